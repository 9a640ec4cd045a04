// What every chaos test of this folder does alike, around its own runs: a failed assertion of a
// run recorded and printed (the run goes on to report everything), a fixture that cannot do its
// job ending the whole test, the watchdog that bounds it, and the seed and numbers read from the
// environment. It does not start, kill or check processes (tests/lib/proc.h) and does not own the
// temporary directory (each test makes and removes its own).
#ifndef TESTS_CHAOS_HARNESS_H
#define TESTS_CHAOS_HARNESS_H

#include <stdint.h>

// Set by harness_fail; the test clears it when a run starts and reads it when the run ends.
extern int harness_run_failed;

// Starts the test called name (the prefix of every line printed here, e.g. "chaos"): stdout
// line-buffered, SIGPIPE ignored, the test library's failures (proc_fail) end the test through
// harness_die. name and logs_dir are borrowed for the whole test; logs_dir is read only when a
// fatal error prints where the logs are, so it may be a buffer filled later.
void harness_init(const char *name, const char *logs_dir);

// Records a failed assertion of the current run: prints "NAME: FAIL: ..." and sets
// harness_run_failed.
void harness_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// A fixture that cannot do its job: prints "NAME: ERROR: ..." and where the logs are, and exits
// 1 at once (the children die with us: PR_SET_PDEATHSIG).
void harness_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

// Ends the test (exit 1, with a message) if it still runs seconds from now, whatever it is doing.
void harness_watchdog(unsigned seconds);

// The environment variable name as a number (strtoull, base 0), or dflt when unset or empty.
uint64_t harness_env_u64(const char *name, uint64_t dflt);

// STOKER_CHAOS_SEED, or a fresh random seed in [1, 1e9] when it is unset or 0.
uint64_t harness_seed(void);

#endif
