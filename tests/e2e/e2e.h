// Fixtures of the end-to-end tests: the real stoker-broker, stoker-producer and stoker-trainer
// as child processes in a fresh temporary directory (brokers on ipc:// paths inside it, never TCP
// ports), their output captured in files there, libstoker's trainer client and status snapshots,
// and the Python checker of JSON summaries and safetensors files. Every wait is bounded; a
// fixture that cannot do its job fails the test (cr_assert), it never hangs.
// Adapted from tests/core/helpers.c (same spawn rules), with output in files instead of pipes
// (a child never blocks on a full pipe) and brokers restartable on the same path.
#ifndef TESTS_E2E_E2E_H
#define TESTS_E2E_E2E_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "stoker/client.h"
#include "stoker/trainer_client.h"

#include "helpers.h"

// A NULL-terminated argument list: E2E_ARGS("--delay", "0:0").
#define E2E_ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

typedef struct e2e_child {
    pid_t pid;  // 0 once reaped
    int status; // waitpid status once reaped
    char what[32];
    char out_path[256]; // its stdout
    char err_path[256]; // its stderr
} e2e_child;

// Suite .init / .fini: a fresh temporary directory; at the end every child still running is
// SIGCONTed, SIGKILLed and reaped and the directory removed.
void e2e_setup(void);
void e2e_teardown(void);
// DIR/name of this test's temporary directory (static buffer, one of several in rotation).
const char *e2e_path(const char *name);

// Starts the binary named by the environment variable bin_env (STOKER_BROKER_BIN, ...) with
// args (NULL-terminated, may be NULL); stdout and stderr go to files DIR/what-N.out / .err.
e2e_child *e2e_start(const char *what, const char *bin_env, const char *const *args);
// ipc://DIR/name.sock, written to url.
void e2e_broker_url(char *url, size_t len, const char *name);
// Starts stoker-broker --listen url --log-level warn plus extra, and waits (at most 10 s) for its
// "listening" line.
e2e_child *e2e_broker_start(const char *url, const char *const *extra);
// stoker-producer --broker url --name name --log-level warn plus extra; returns at once.
e2e_child *e2e_producer_start(const char *url, const char *name, const char *const *extra);
// stoker-trainer --progress off plus args; returns at once.
e2e_child *e2e_trainer_start(const char *const *args);

void e2e_signal(e2e_child *c, int sig);
// Waits at most timeout_ms for the child to end: 1 if it did (status in c->status), 0 if not.
int e2e_wait(e2e_child *c, int timeout_ms);
// Waits at most timeout_ms and asserts the child exited (not by a signal) with code.
void e2e_assert_exit(e2e_child *c, int code, int timeout_ms);
// The exit code of an ended child, or 128 + signal when a signal ended it.
int e2e_exit_code(const e2e_child *c);
// SIGTERM, wait at most timeout_ms, then SIGKILL. 1 when it ended on its own after SIGTERM.
int e2e_stop(e2e_child *c, int timeout_ms);
// SIGTERM the broker and assert a clean exit with code 0.
void e2e_broker_stop(e2e_child *c);

// The whole file (NUL-terminated, owned by the caller), or NULL when it cannot be read.
char *e2e_read_file(const char *path);
// 1 when the file exists.
int e2e_file_exists(const char *path);

// Status snapshots and the accounting identity come from the core suite's helpers:
// h_status, h_status_producer, h_assert_identity (tests/core/helpers.h).
// Polls status (every 10 ms, at most timeout_ms) until the producer called name exists with at
// least min_accepted examples and, if status >= 0, that status. 1 when seen, 0 on timeout.
int e2e_wait_producer(const char *url, const char *name, uint64_t min_accepted, int status,
                      int timeout_ms);

// Polls status until at least n trainers are connected (1) or timeout_ms passes (0).
int e2e_wait_trainers(const char *url, uint32_t n, int timeout_ms);

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
void e2e_examples_fini(e2e_examples *ex);

// Runs python3 (STOKER_PYTHON) on tests/e2e/check.py (STOKER_E2E_CHECK) with args; returns its
// exit code (its output goes to this test's stderr). 77 means "python3 unavailable".
int e2e_check(const char *const *args);

#endif
