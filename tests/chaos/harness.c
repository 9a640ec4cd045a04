// The chaos tests' verdicts, fatal errors, watchdog and environment (see harness.h).
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stoker/rng.h"

#include "harness.h"
#include "proc.h"

int harness_run_failed;

static const char *test_name = "chaos";
static const char *logs = "";
// Made at init: a signal handler may only write(2) what is ready.
static char watchdog_msg[128];
static size_t watchdog_len;

static void
die_hook(const char *msg)
{
    harness_die("%s", msg);
}

static void
on_alarm(int sig)
{
    (void)sig;
    ssize_t n = write(STDOUT_FILENO, watchdog_msg, watchdog_len);
    (void)n;
    _exit(1);
}

void
harness_init(const char *name, const char *logs_dir)
{
    test_name = name;
    logs = logs_dir;
    snprintf(watchdog_msg, sizeof(watchdog_msg),
             "%s: ERROR: watchdog: the test ran past its time bound\n", name);
    watchdog_len = strlen(watchdog_msg);
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    proc_set_fail(die_hook);
}

void
harness_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s: FAIL: ", test_name);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    harness_run_failed = 1;
}

void
harness_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s: ERROR: ", test_name);
    vprintf(fmt, ap);
    printf("\n%s: logs kept in %s\n", test_name, logs);
    va_end(ap);
    fflush(stdout);
    _exit(1);
}

void
harness_watchdog(unsigned seconds)
{
    signal(SIGALRM, on_alarm);
    alarm(seconds);
}

uint64_t
harness_env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? strtoull(v, NULL, 0) : dflt;
}

uint64_t
harness_seed(void)
{
    uint64_t seed = harness_env_u64("STOKER_CHAOS_SEED", 0);
    return seed != 0 ? seed : stoker_random_u64() % 1000000000u + 1;
}
