// Child processes of the tests, shared by every C suite (core, hardening, e2e, chaos): spawning
// with fork+exec (nng is not fork-safe), output to a pipe, to files or inherited, bounded waits,
// signals, the "listening URL" lines a broker prints, and stoker's broker and producer started
// the way the tests start them. Children die with the test process (PR_SET_PDEATHSIG) and
// proc_kill_all reaps the rest. Knows nothing of criterion: a fixture that cannot do its job
// calls the failure hook (proc_set_fail), which never returns. Temporary files: testdir.h.
#ifndef TESTS_LIB_PROC_H
#define TESTS_LIB_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

// A NULL-terminated argument list: PROC_ARGS("--delay", "0:0").
#define PROC_ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

typedef struct proc_child {
    pid_t pid;  // 0 once reaped (or never started)
    int status; // waitpid status once reaped
    int out_fd; // read end of its stdout when captured, else -1
    char what[32];
    char out_path[320]; // its stdout when it goes to a file, else ""
    char err_path[320]; // its stderr when it goes to a file, else ""
    size_t out_offset;  // size of out_path when it started (logs are appended to)
} proc_child;

// Where a child's output goes. Zero: stdin, stdout and stderr inherited from the test.
typedef struct proc_io {
    int capture;     // stdout into a pipe (out_fd), for proc_listening
    const char *log; // stderr, and stdout unless captured, appended to this file (a name in the
                     // test's directory, or an absolute path)
    int files;       // stdout and stderr to DIR/what-N.out and .err (truncated), stdin /dev/null
} proc_io;

// The failure hook: called with a message when a fixture cannot do its job; must not return
// (a criterion suite fails the test, a plain program exits). Default: print and abort.
typedef void (*proc_fail_fn)(const char *msg);
void proc_set_fail(proc_fail_fn fail);
// Formats the message and calls the hook (for testdir.c and the suites' own fixtures).
void proc_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

// Starts argv (argv[0] a path, NULL-terminated) into caller-owned *c (not registered: the caller
// reaps it). io may be NULL (everything inherited). Fails (hook) on error.
void proc_start(proc_child *c, const char *what, const char *const *argv, const proc_io *io);
// Like proc_start into a slot of this test's registry (at most 64 children per test), which
// proc_kill_all empties. The child stays valid until proc_kill_all.
proc_child *proc_spawn(const char *what, const char *const *argv, const proc_io *io);
// SIGCONTs, SIGKILLs and reaps every registered child still running; empties the registry.
void proc_kill_all(void);

// Reads the child's stdout (the pipe, or its file from where it started) until it printed n
// "listening URL" lines (at most 10 s) and copies the URLs into urls[i] (256 bytes each; urls
// may be NULL). Fails when the child exits first.
void proc_listening(proc_child *c, int n, char urls[][256]);
// Waits at most timeout_ms for the child to exit: 1 if it did (status in c->status), 0 if not.
// 1 at once for a child already reaped.
int proc_wait(proc_child *c, int timeout_ms);
// Sends sig to a running child; fails when it is not running.
void proc_signal(proc_child *c, int sig);
// SIGKILL and reap (at most 5 s, else fails); nothing when not running.
void proc_kill(proc_child *c);
// SIGCONT and SIGTERM, wait at most timeout_ms, then proc_kill. 1 when it exited on its own.
int proc_stop(proc_child *c, int timeout_ms);
// Waits at most timeout_ms until a SIGSTOPped child is really stopped (or gone); fails if not.
void proc_wait_stopped(const proc_child *c, int timeout_ms);
// The exit code of a reaped child, or 128 + signal when a signal ended it.
int proc_exit_code(const proc_child *c);
// Waits at most timeout_ms and fails unless the child exited (not by a signal) with code;
// the message carries its stderr when that went to a file.
void proc_assert_exit(proc_child *c, int code, int timeout_ms);
// VmRSS of a running child in bytes (0 if unreadable).
uint64_t proc_rss_bytes(const proc_child *c);
// Runs argv with everything inherited and waits at most timeout_ms; returns its exit code.
// Fails when it does not finish in time or a signal ends it.
int proc_run(const char *const *argv, int timeout_ms);
// Runs a shell command (bounded by the command itself); returns its exit code, -1 on a signal.
int proc_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// --- stoker's binaries --------------------------------------------------------------------------

// The path in the environment variable env (STOKER_BROKER_BIN, ...); fails when unset.
const char *proc_bin(const char *env);
// Starts the binary named by bin_env with args (NULL-terminated, may be NULL) in the registry.
proc_child *proc_start_bin(const char *what, const char *bin_env, const char *const *args,
                           const proc_io *io);
// stoker-broker --listen url --log-level warn plus extra, and waits (at most 10 s) for its
// "listening" line (io must capture stdout or send it to a file).
proc_child *proc_broker_start(const char *url, const char *const *extra, const proc_io *io);
// stoker-producer --broker url --name name --log-level warn plus extra; returns at once.
proc_child *proc_producer_start(const char *url, const char *name, const char *const *extra,
                                const proc_io *io);
// Stops a broker with SIGTERM (at most 5 s) and fails unless it exited cleanly with code 0
// (under AddressSanitizer a leak in the broker makes this fail).
void proc_broker_stop(proc_child *c);

#endif
