// Fixtures of the end-to-end tests: the real stoker-broker, stoker-producer and stoker-trainer
// as child processes in a fresh temporary directory (brokers on ipc:// paths inside it, never TCP
// ports), their output captured in files there, libstoker's trainer client and status snapshots,
// and the Python checker of JSON summaries and safetensors files. Every wait is bounded; a
// fixture that cannot do its job fails the test (cr_assert), it never hangs.
// Output goes to files instead of pipes (a child never blocks on a full pipe), and brokers are
// restartable on the same path.
#ifndef TESTS_E2E_E2E_H
#define TESTS_E2E_E2E_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "stoker/client.h"
#include "stoker/trainer_client.h"

#include "helpers.h"
#include "proc.h"
#include "testdir.h"

// Children, waits, signals and exit checks are the test library's (tests/lib/proc.h:
// proc_signal, proc_wait, proc_assert_exit, proc_stop, proc_broker_stop, PROC_ARGS), the
// temporary directory and its files too (tests/lib/testdir.h: testdir_file, testdir_ipc_url,
// testdir_read, testdir_exists). Set STOKER_TEST_KEEP to keep a test's directory.

// Suite .init / .fini: a fresh temporary directory and the test library's failures sent to
// criterion; at the end every child still running is SIGCONTed, SIGKILLed and reaped and the
// directory removed.
void e2e_setup(void);
void e2e_teardown(void);

// Starts the binary named by the environment variable bin_env (STOKER_BROKER_BIN, ...) with
// args (NULL-terminated, may be NULL); stdout and stderr go to files DIR/what-N.out / .err
// (c->out_path, c->err_path), stdin is /dev/null.
proc_child *e2e_start(const char *what, const char *bin_env, const char *const *args);
// Starts stoker-broker --listen url --log-level warn plus extra, and waits (at most 10 s) for its
// "listening" line.
proc_child *e2e_broker_start(const char *url, const char *const *extra);
// stoker-producer --broker url --name name --log-level warn plus extra; returns at once.
proc_child *e2e_producer_start(const char *url, const char *name, const char *const *extra);
// stoker-trainer --progress off plus args; returns at once.
proc_child *e2e_trainer_start(const char *const *args);

// Status snapshots, the accounting identity and waits on the broker's status come from the core
// suite's helpers (tests/core/helpers.h): h_status, h_status_producer, h_assert_identity,
// h_wait_producer, h_wait_trainers, h_wait_acknowledged.

// A trainer client (fails the test if it cannot connect).
stoker_trainer_client *e2e_trainer_client(const char *url, uint32_t batch_size, uint32_t stall_ms);

// Examples pulled by a trainer client: identities and each example's bytes (fields in schema
// order, concatenated).
typedef struct e2e_example {
    uint64_t session, seq;
    uint8_t *bytes;
} e2e_example;
typedef struct e2e_examples {
    e2e_example *v;
    size_t n, cap;
    size_t example_bytes;
    stoker_event events[64];
    int n_events;
} e2e_examples;
// Records the examples of b (identities and bytes) into ex; b stays the caller's.
void e2e_record(e2e_examples *ex, const stoker_batch *b);
// Pulls until the supply ends or timeout_ms passes, acknowledging every batch and recording its
// examples and the events that arrive (polled). Returns the code that ended it
// (STOKER_END_OF_DATA, STOKER_NO_PRODUCERS, STOKER_TIMEOUT...).
int e2e_drain(stoker_trainer_client *tc, e2e_examples *ex, int timeout_ms);
// Like e2e_drain but stops as soon as n examples were recorded (STOKER_OK) .
int e2e_pull_n(stoker_trainer_client *tc, e2e_examples *ex, size_t n, int timeout_ms);
// Pairs recorded more than once.
size_t e2e_duplicates(const e2e_examples *ex);
// Sorts by (session, seq).
void e2e_examples_sort(e2e_examples *ex);
// Asserts ex holds exactly seqs 0 .. per_session - 1 of n_sessions sessions, each once: no
// duplicate, no gap, nothing beyond (sorts ex).
void e2e_assert_exactly(e2e_examples *ex, size_t n_sessions, uint64_t per_session);
void e2e_examples_fini(e2e_examples *ex);

// Runs python3 (STOKER_PYTHON) on tests/e2e/check.py (STOKER_E2E_CHECK) with args (its output
// goes to this test's stderr) and asserts it exits 0, within 20 s. Where python3 is unavailable
// it says so on stderr and asserts nothing.
void e2e_check_ok(const char *const *args);

#endif
