// How fast stoker-producer stops: a producer held back by a full queue (no
// trainer pulling, so its push waits for room at the broker) or waiting for a slow exec child
// exits soon after SIGTERM, still saying goodbye, for the synthetic generator, exec with small
// text examples and exec with 150 KB raw records. The target is 100 ms; the tests allow
// STOP_LIMIT_MS for a loaded machine and print what they measured. The real broker and
// producer run as processes on an ipc:// path (tests/e2e/e2e.h).
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "e2e.h"
#include "stoker/clock.h"
#include "stoker/error.h"

#define STOP_LIMIT_MS 300
#define QUEUE_DEPTH   "16"

TestSuite(stop, .init = e2e_setup, .fini = e2e_teardown, .timeout = 30);

// Sends SIGTERM and returns the milliseconds until the producer exited (asserts it exited 0).
static double
stop_ms(proc_child *p)
{
    uint64_t t0 = stoker_now_ns();
    proc_signal(p, SIGTERM);
    int ended = proc_wait(p, 10000);
    double ms = (double)(stoker_now_ns() - t0) / 1e6;
    cr_assert(ended, "the producer did not exit within 10 s of SIGTERM");
    cr_assert_eq(proc_exit_code(p), 0, "the producer exited with %d after SIGTERM",
                 proc_exit_code(p));
    return ms;
}

// Asserts the broker reports the producer finished (goodbye, not lost) with as many examples
// accepted as the producer's "finished: N examples" log line says it pushed; returns that.
static uint64_t
assert_finished(const char *url, const proc_child *p, const char *name)
{
    stoker_status *st = h_status(url);
    const stoker_producer_info *info = h_status_producer(st, name);
    cr_assert_not_null(info, "the broker does not know producer '%s'", name);
    cr_assert_eq(info->status, STOKER_PRODUCER_FINISHED,
                 "producer '%s' is %s after SIGTERM, expected finished (goodbye)", name,
                 stoker_producer_status_name(info->status));
    uint64_t accepted = info->accepted;
    stoker_status_destroy(st);

    char *log = testdir_read(p->err_path, NULL);
    cr_assert_not_null(log);
    const char *line = strstr(log, "finished: ");
    cr_assert_not_null(line, "no 'finished:' line in the producer's log:\n%s", log);
    unsigned long long pushed = 0;
    cr_assert_eq(sscanf(line, "finished: %llu examples", &pushed), 1, "log line: %s", line);
    free(log);
    cr_assert_eq(accepted, pushed, "the broker accepted %llu, the producer says it pushed %llu",
                 (unsigned long long)accepted, pushed);
    return pushed;
}

// Runs producer name with args against a broker (on broker_name) whose queue it fills (nobody
// pulls), waits until the queue is full and its next push has waited for room a while, stops it
// and checks it said goodbye and nothing it abandoned is taken later. Returns the milliseconds
// from SIGTERM to its exit.
static double
stop_when_the_queue_is_full(const char *broker_name, const char *name, const char *const *args)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), broker_name);
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--queue-depth", QUEUE_DEPTH));
    proc_child *p = e2e_producer_start(url, name, args);
    cr_assert(h_wait_producer(url, name, (uint64_t)atoi(QUEUE_DEPTH) - 4, 10000),
              "producer '%s' did not fill the queue in 10 s", name);
    // Its next push does not fit: let it wait at the broker (parked, answered RETRY, resent).
    stoker_sleep_ms(500, NULL);
    cr_assert(proc_wait(p, 0) == 0, "producer '%s' ended by itself", name);
    double ms = stop_ms(p);
    fprintf(stderr, "producer '%s' blocked on a full queue exited %.1f ms after SIGTERM\n", name,
            ms);
    uint64_t pushed = assert_finished(url, p, name);

    // The push abandoned on stop is not taken later when room appears: a trainer that drains
    // the queue at once (well within the broker's park time) gets exactly what was pushed.
    stoker_trainer_client *tc = e2e_trainer_client(url, 4, 5000);
    e2e_examples ex = {0};
    int rv = e2e_drain(tc, &ex, 10000);
    cr_assert_eq(rv, STOKER_END_OF_DATA, "the supply ended with %s", stoker_errname(rv));
    cr_assert_eq(ex.n, pushed, "drained %zu examples, the producer pushed %llu", ex.n,
                 (unsigned long long)pushed);
    cr_assert_eq(e2e_duplicates(&ex), 0);
    e2e_examples_fini(&ex);
    stoker_trainer_client_destroy(tc);
    h_assert_identity(url);
    proc_broker_stop(broker);
    return ms;
}

// A producer blocked on a full queue exits within STOP_LIMIT_MS of SIGTERM. On a machine busy
// with other work one slow stop is measured again once: before the fix every stop took > 1 s.
static void
assert_stops_fast(const char *name, const char *const *args)
{
    double ms = stop_when_the_queue_is_full("broker", name, args);
    if (ms >= STOP_LIMIT_MS) {
        fprintf(stderr, "%.1f ms: measuring once more\n", ms);
        ms = stop_when_the_queue_is_full("broker-again", name, args);
    }
    cr_assert_lt(ms, STOP_LIMIT_MS, "producer '%s' took %.1f ms to exit after SIGTERM (target 100)",
                 name, ms);
}

Test(stop, synthetic_producer_on_a_full_queue_exits_at_once_and_says_goodbye)
{
    assert_stops_fast("synth", PROC_ARGS("--delay", "0:0", "--chunk", "3", "--log-level", "info"));
}

Test(stop, exec_producer_on_a_full_queue_exits_at_once_and_says_goodbye)
{
    assert_stops_fast("exec-text", PROC_ARGS("--generator", "exec", "--exec", "yes '0.5 1.5'",
                                             "--schema", "input:float32[1],output:float32[1]",
                                             "--chunk", "3", "--log-level", "info"));
}

// The case of the report: 150 KB raw records (float32[38400]), four to a push.
Test(stop, large_example_exec_producer_on_a_full_queue_exits_at_once_and_says_goodbye)
{
    assert_stops_fast("exec-large", PROC_ARGS("--generator", "exec", "--exec", "cat /dev/zero",
                                              "--format", "raw", "--schema", "input:float32[38400]",
                                              "--chunk", "4", "--log-level", "info"));
}

// Not the queue but the generator holds it: a child that writes nothing for a minute.
static double
stop_while_the_child_is_silent(const char *broker_name)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), broker_name);
    proc_child *broker = e2e_broker_start(url, NULL);
    proc_child *p = e2e_producer_start(
        url, "slow",
        PROC_ARGS("--generator", "exec", "--exec", "echo 1 2; sleep 60", "--schema",
                  "input:float32[1],output:float32[1]", "--chunk", "1", "--log-level", "info"));
    cr_assert(h_wait_producer(url, "slow", 1, 10000), "the first example never arrived");
    stoker_sleep_ms(200, NULL);
    double ms = stop_ms(p);
    fprintf(stderr, "producer waiting for a slow exec child exited %.1f ms after SIGTERM\n", ms);
    assert_finished(url, p, "slow");
    h_assert_identity(url);
    proc_broker_stop(broker);
    return ms;
}

Test(stop, exec_producer_waiting_for_a_slow_child_exits_at_once_and_says_goodbye)
{
    double ms = stop_while_the_child_is_silent("broker");
    if (ms >= STOP_LIMIT_MS) {
        fprintf(stderr, "%.1f ms: measuring once more\n", ms);
        ms = stop_while_the_child_is_silent("broker-again");
    }
    cr_assert_lt(ms, STOP_LIMIT_MS, "the producer took %.1f ms to exit after SIGTERM (target 100)",
                 ms);
}
