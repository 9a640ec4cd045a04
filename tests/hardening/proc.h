// Process fixtures of the hardening and chaos tests, beside the core helpers (tests/core/
// helpers.h, linked too): any binary with any arguments (a broker on tls+tcp:// with port 0, the
// trainer, the chaos consumer), the URLs a broker prints, a child's exit, its resident memory.
// Children die with the test process (PR_SET_PDEATHSIG) and p_teardown kills and reaps the rest.
// Every wait is bounded.
#ifndef TESTS_HARDENING_PROC_H
#define TESTS_HARDENING_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct p_child {
    pid_t pid;  // 0 once reaped
    int status; // waitpid status once reaped
    int out_fd; // read end of its stdout when captured, else -1
    char what[32];
} p_child;

// Starts argv (argv[0] a path, NULL-terminated) with stderr to DIR/<log> (log may be NULL: the
// test's stderr) and stdout captured when capture. Fails the test on error.
p_child *p_spawn(const char *what, const char *const *argv, int capture, const char *log);
// Reads the child's stdout until it printed n "listening URL" lines (at most 10 s) and copies
// the URLs into urls[i] (cap bytes each).
void p_listening(p_child *c, int n, char urls[][256]);
// Waits at most timeout_ms for the child to exit: 1 if it did (status in c->status).
int p_wait(p_child *c, int timeout_ms);
// Sends sig (no-op when the child is gone).
void p_signal(p_child *c, int sig);
// SIGKILL and reap.
void p_kill(p_child *c);
// Exit code of a reaped child, -1 when it died of a signal.
int p_exit_code(const p_child *c);
// VmRSS of a running child in bytes (0 if unreadable).
uint64_t p_rss_bytes(const p_child *c);
// Kills and reaps every child left; call from the suite's .fini before h_teardown.
void p_teardown(void);

// Path of a file in the test's temporary directory (static buffer per call slot 0..7).
const char *p_path(int slot, const char *name);
// Writes text to DIR/name; returns the path (slot as p_path).
const char *p_write_file(int slot, const char *name, const char *text);
// 1 if the file at path contains needle.
int p_file_contains(const char *path, const char *needle);
// Runs a shell command (bounded by the caller's command itself); returns its exit code.
int p_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// Runs a synthetic producer called name (200 examples, no delay) and a CPU trainer (5 rounds of
// 20) against url, both with client_args (NULL-terminated client flags: the token file, the TLS
// files); asserts within 60 s that the trainer completed 100 examples with no duplicate and
// discrepancy 0 (its JSON summary goes to json).
void p_train_end_to_end(const char *url, const char *name, const char *const *client_args,
                        const char *json);

#endif
