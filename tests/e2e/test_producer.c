// stoker-producer end to end: the real producer process against the real broker on an
// ipc:// path, its examples pulled back with libstoker's trainer client. Quotas and goodbye,
// SIGTERM without loss, per-example seeding, the exec generator (values, a malformed line, a
// missing command, no orphan child), a broker killed and restarted under a pushing producer,
// and bad command lines. Every test that runs a broker ends with the accounting identity.
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "e2e.h"
#include "stoker/clock.h"
#include "stoker/error.h"

#define SUITE(name) TestSuite(name, .init = e2e_setup, .fini = e2e_teardown, .timeout = 30)
SUITE(producer);
SUITE(seeding);
SUITE(exec);
SUITE(restart);
SUITE(producer_cli);

// The synthetic generator's schema, also used by the exec generators here.
#define EXEC_SCHEMA "input:float32[10],output:float32[1]"

// The producer called name in url's status, copied (fails the test if absent).
static stoker_producer_info
producer_info(const char *url, const char *name)
{
    stoker_status *st = h_status(url);
    const stoker_producer_info *p = h_status_producer(st, name);
    cr_assert_not_null(p, "the broker does not know producer '%s'", name);
    stoker_producer_info copy = *p;
    stoker_status_destroy(st);
    return copy;
}

// Asserts ex holds exactly seqs first .. first + n - 1 of one session, once each (sorts ex).
static void
assert_contiguous(e2e_examples *ex, uint64_t first, uint64_t n)
{
    cr_assert_eq(ex->n, n, "pulled %zu examples, expected %llu", ex->n, (unsigned long long)n);
    e2e_examples_sort(ex);
    for (size_t i = 0; i < ex->n; i++) {
        cr_assert_eq(ex->v[i].session, ex->v[0].session, "examples from two sessions");
        cr_assert_eq(ex->v[i].seq, first + i, "example %zu has seq %llu, expected %llu", i,
                     (unsigned long long)ex->v[i].seq, (unsigned long long)(first + i));
    }
}

static int
has_event(const e2e_examples *ex, stoker_event_kind kind, const char *name)
{
    for (int i = 0; i < ex->n_events; i++) {
        if (ex->events[i].kind == kind && strcmp(ex->events[i].name, name) == 0)
            return 1;
    }
    return 0;
}

// --- quotas and signals -------------------------------------------------------------------------

Test(producer, max_examples_stops_after_exactly_n_and_reports_finished)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    // The schema up front: the trainer client connects before any producer.
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--schema", EXEC_SCHEMA));
    stoker_trainer_client *tc = e2e_trainer_client(url, 8, 5000);
    // 50 is not a multiple of the chunk: the last push is a short one.
    proc_child *p = e2e_producer_start(
        url, "quota", PROC_ARGS("--delay", "0:0", "--chunk", "7", "--max-examples", "50"));
    proc_assert_exit(p, 0, 10000);

    stoker_producer_info info = producer_info(url, "quota");
    cr_assert_eq(info.status, STOKER_PRODUCER_FINISHED, "status %s, expected finished",
                 stoker_producer_status_name(info.status));
    cr_assert_eq(info.accepted, 50, "accepted %llu, expected 50",
                 (unsigned long long)info.accepted);

    e2e_examples ex = {0};
    int rv = e2e_drain(tc, &ex, 10000);
    cr_assert_eq(rv, STOKER_END_OF_DATA, "the supply ended with %s", stoker_errname(rv));
    cr_assert(has_event(&ex, STOKER_EVENT_PRODUCER_FINISHED, "quota"),
              "the trainer heard no producer_finished event");
    assert_contiguous(&ex, 0, 50);
    cr_assert_eq(stoker_trainer_client_duplicates(tc), 0);
    e2e_examples_fini(&ex);
    stoker_trainer_client_destroy(tc);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

// A client whose socket has had no connection for 2.5 s replaces its dialer (the conn's watcher:
// nng 1.5.2's dialer can stop redialing after a broker died during a handshake); the new dialer
// connects as soon as a broker listens.
Test(producer, a_long_unconnected_producer_dials_anew_and_connects)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *p = e2e_producer_start(url, "patient", PROC_ARGS("--log-level", "info"));
    char *err = NULL;
    for (int waited = 0; waited < 10000; waited += 100) {
        free(err);
        err = testdir_read(p->err_path, NULL);
        if (err != NULL && strstr(err, "dialing anew") != NULL)
            break;
        stoker_sleep_ms(100, NULL);
    }
    cr_assert(err != NULL && strstr(err, "dialing anew") != NULL,
              "no 'dialing anew' in 10 s without a broker:\n%s", err != NULL ? err : "");
    free(err);
    proc_child *broker = e2e_broker_start(url, NULL);
    cr_assert(h_wait_producer(url, "patient", 1, 5000),
              "the producer did not push through the new dialer in 5 s");
    proc_signal(p, SIGTERM);
    proc_assert_exit(p, 0, 5000);
    proc_broker_stop(broker);
}

Test(producer, sigterm_says_goodbye_and_loses_nothing)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    // Room for everything: the producer is never held back by a full queue.
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--queue-depth", "100000"));
    proc_child *p = e2e_producer_start(
        url, "term", PROC_ARGS("--delay", "0.001:0.003", "--chunk", "5", "--log-level", "info"));
    cr_assert(h_wait_producer(url, "term", 40, 10000), "the producer pushed < 40 in 10 s");
    proc_signal(p, SIGTERM);
    proc_assert_exit(p, 0, 5000);

    stoker_producer_info info = producer_info(url, "term");
    cr_assert_eq(info.status, STOKER_PRODUCER_FINISHED,
                 "status %s after SIGTERM, expected "
                 "finished (goodbye)",
                 stoker_producer_status_name(info.status));
    // What the producer says it pushed is what the broker accepted.
    char *err = testdir_read(p->err_path, NULL);
    cr_assert_not_null(err);
    const char *line = strstr(err, "finished: ");
    cr_assert_not_null(line, "no 'finished:' line in the producer's log:\n%s", err);
    unsigned long long pushed = 0;
    cr_assert_eq(sscanf(line, "finished: %llu examples", &pushed), 1, "log line: %s", line);
    free(err);
    cr_assert_eq(info.accepted, pushed, "broker accepted %llu, producer pushed %llu",
                 (unsigned long long)info.accepted, pushed);
    cr_assert_eq(info.next_seq, pushed);

    stoker_trainer_client *tc = e2e_trainer_client(url, 16, 5000);
    e2e_examples ex = {0};
    int rv = e2e_drain(tc, &ex, 10000);
    cr_assert_eq(rv, STOKER_END_OF_DATA, "the supply ended with %s", stoker_errname(rv));
    assert_contiguous(&ex, 0, pushed);
    e2e_examples_fini(&ex);
    stoker_trainer_client_destroy(tc);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

// --- seeding ------------------------------------------------------------------------------------

// Runs a producer to completion against a fresh broker and pulls all its examples, sorted.
static void
run_and_collect(const char *broker_name, const char *const *pargs, const char *name,
                e2e_examples *ex)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), broker_name);
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--queue-depth", "100000"));
    proc_child *p = e2e_producer_start(url, name, pargs);
    proc_assert_exit(p, 0, 15000);
    stoker_trainer_client *tc = e2e_trainer_client(url, 32, 5000);
    int rv = e2e_drain(tc, ex, 10000);
    cr_assert_eq(rv, STOKER_END_OF_DATA, "the supply ended with %s", stoker_errname(rv));
    stoker_trainer_client_destroy(tc);
    h_assert_identity(url);
    proc_broker_stop(broker);
    e2e_examples_sort(ex);
}

Test(seeding, producers_with_different_names_never_send_equal_inputs)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--queue-depth", "100000"));
    const char *const pargs[] = {"--delay", "0:0", "--seed", "42", "--max-examples", "300", NULL};
    proc_child *a = e2e_producer_start(url, "twin-a", pargs);
    proc_child *b = e2e_producer_start(url, "twin-b", pargs);
    proc_assert_exit(a, 0, 10000);
    proc_assert_exit(b, 0, 10000);
    stoker_trainer_client *tc = e2e_trainer_client(url, 32, 5000);
    e2e_examples ex = {0};
    int rv = e2e_drain(tc, &ex, 10000);
    cr_assert_eq(rv, STOKER_END_OF_DATA, "the supply ended with %s", stoker_errname(rv));
    cr_assert_eq(ex.n, 600);
    cr_assert_eq(e2e_duplicates(&ex), 0);

    // Inputs are the first 40 bytes (input:float32[10]) of each example.
    const size_t in_bytes = 10 * sizeof(float);
    size_t equal = 0, cross = 0;
    for (size_t i = 0; i < ex.n; i++) {
        for (size_t j = i + 1; j < ex.n; j++) {
            if (ex.v[i].session != ex.v[j].session)
                cross++;
            if (memcmp(ex.v[i].bytes, ex.v[j].bytes, in_bytes) == 0)
                equal++;
        }
    }
    cr_assert_eq(cross, 300u * 300u, "the examples did not come from two sessions");
    cr_assert_eq(equal, 0, "%zu pairs of examples have equal inputs", equal);
    e2e_examples_fini(&ex);
    stoker_trainer_client_destroy(tc);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

Test(seeding, same_name_and_seed_give_the_same_bytes_whatever_the_timing)
{
    e2e_examples fast = {0}, slow = {0}, other = {0};
    // Different pace, different chunking: the bytes of example seq depend only on
    // (seed, name, seq).
    run_and_collect(
        "fast", PROC_ARGS("--delay", "0:0", "--chunk", "7", "--seed", "7", "--max-examples", "60"),
        "same", &fast);
    run_and_collect(
        "slow",
        PROC_ARGS("--delay", "0.001:0.004", "--chunk", "2", "--seed", "7", "--max-examples", "60"),
        "same", &slow);
    run_and_collect("other", PROC_ARGS("--delay", "0:0", "--seed", "8", "--max-examples", "60"),
                    "same", &other);
    cr_assert_eq(fast.n, 60);
    cr_assert_eq(slow.n, 60);
    cr_assert_eq(other.n, 60);
    cr_assert_eq(fast.example_bytes, slow.example_bytes);
    size_t differ = 0;
    for (size_t i = 0; i < 60; i++) {
        cr_assert_eq(fast.v[i].seq, i);
        cr_assert_eq(slow.v[i].seq, i);
        cr_assert(memcmp(fast.v[i].bytes, slow.v[i].bytes, fast.example_bytes) == 0,
                  "example %zu differs between the fast and the slow run", i);
        differ += memcmp(fast.v[i].bytes, other.v[i].bytes, fast.example_bytes) != 0;
    }
    cr_assert_eq(differ, 60, "another seed repeated %zu examples", 60 - differ);
    e2e_examples_fini(&fast);
    e2e_examples_fini(&slow);
    e2e_examples_fini(&other);
}

// --- exec ---------------------------------------------------------------------------------------

// Example i of the awk generators below: input j = i * 100 + j, output i + 0.5 (exact floats).
static void
assert_exec_values(const e2e_examples *ex)
{
    for (size_t k = 0; k < ex->n; k++) {
        float v[11];
        memcpy(v, ex->v[k].bytes, sizeof(v));
        uint64_t i = ex->v[k].seq;
        for (int j = 0; j < 10; j++)
            cr_assert_eq(v[j], (float)(i * 100 + (uint64_t)j), "example %llu input %d is %g",
                         (unsigned long long)i, j, v[j]);
        cr_assert_eq(v[10], (float)i + 0.5f, "example %llu output is %g", (unsigned long long)i,
                     v[10]);
    }
}

Test(exec, awk_text_generator_feeds_the_broker_intact)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--queue-depth", "1000"));
    // Spaces and commas both separate numbers.
    const char *cmd = "awk 'BEGIN { for (i = 0; i < 40; i++) { s = \"\"; "
                      "for (j = 0; j < 10; j++) s = s (i * 100 + j) (j % 2 ? \" \" : \",\"); "
                      "print s (i + 0.5) } }'";
    proc_child *p = e2e_producer_start(url, "awk",
                                       PROC_ARGS("--generator", "exec", "--exec", cmd, "--schema",
                                                 EXEC_SCHEMA, "--format", "text", "--chunk", "4"));
    proc_assert_exit(p, 0, 10000);
    stoker_producer_info info = producer_info(url, "awk");
    cr_assert_eq(info.status, STOKER_PRODUCER_FINISHED, "a child that ended cleanly: status %s",
                 stoker_producer_status_name(info.status));
    cr_assert_eq(info.accepted, 40);

    stoker_trainer_client *tc = e2e_trainer_client(url, 8, 5000);
    e2e_examples ex = {0};
    int rv = e2e_drain(tc, &ex, 10000);
    cr_assert_eq(rv, STOKER_END_OF_DATA, "the supply ended with %s", stoker_errname(rv));
    assert_contiguous(&ex, 0, 40);
    assert_exec_values(&ex);
    e2e_examples_fini(&ex);
    stoker_trainer_client_destroy(tc);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

Test(exec, malformed_line_7_is_named_and_the_6_good_examples_arrive)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--schema", EXEC_SCHEMA));
    stoker_trainer_client *tc = e2e_trainer_client(url, 8, 5000);
    // Six good lines, a bad seventh, then good lines that must never be pushed.
    const char *cmd = "awk 'BEGIN { for (i = 0; i < 10; i++) { if (i == 6) { print \"1 2 oops\"; "
                      "continue } s = \"\"; for (j = 0; j < 10; j++) s = s (i * 100 + j) \" \"; "
                      "print s (i + 0.5) } }'";
    proc_child *p = e2e_producer_start(
        url, "bad7",
        PROC_ARGS("--generator", "exec", "--exec", cmd, "--schema", EXEC_SCHEMA, "--chunk", "4"));
    cr_assert(proc_wait(p, 10000), "the producer did not exit within 10 s");
    char *err = testdir_read(p->err_path, NULL);
    cr_assert(WIFEXITED(p->status) && WEXITSTATUS(p->status) != 0,
              "expected a non-zero exit, got status %#x; stderr:\n%s", p->status, err);
    cr_assert(strstr(err, "line 7") != NULL, "stderr does not name line 7:\n%s", err);
    free(err);

    e2e_examples ex = {0};
    int rv = e2e_drain(tc, &ex, 10000);
    cr_assert_eq(rv, STOKER_NO_PRODUCERS,
                 "the supply ended with %s, expected no_producers (the "
                 "producer is lost, not finished)",
                 stoker_errname(rv));
    cr_assert(has_event(&ex, STOKER_EVENT_PRODUCER_LOST, "bad7"), "no producer_lost event");
    stoker_producer_info info = producer_info(url, "bad7");
    cr_assert_eq(info.status, STOKER_PRODUCER_LOST, "status %s, expected lost",
                 stoker_producer_status_name(info.status));
    cr_assert_eq(info.accepted, 6);
    assert_contiguous(&ex, 0, 6);
    assert_exec_values(&ex);
    e2e_examples_fini(&ex);
    stoker_trainer_client_destroy(tc);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

Test(exec, missing_command_exits_1_with_a_clear_message)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(url, NULL);
    proc_child *p = e2e_producer_start(url, "nocmd",
                                       PROC_ARGS("--generator", "exec", "--exec",
                                                 "/nonexistent/stoker-no-such-generator",
                                                 "--schema", EXEC_SCHEMA));
    proc_assert_exit(p, 1, 10000);
    char *err = testdir_read(p->err_path, NULL);
    cr_assert(strstr(err, "stoker-no-such-generator") != NULL,
              "stderr does not name the command:\n%s", err);
    cr_assert(strstr(err, "127") != NULL || strstr(err, "not found") != NULL ||
                  strstr(err, "No such file") != NULL,
              "stderr does not say the command was not found:\n%s", err);
    free(err);
    stoker_status *st = h_status(url);
    const stoker_producer_info *info = h_status_producer(st, "nocmd");
    if (info != NULL)
        cr_assert_eq(info->status != STOKER_PRODUCER_FINISHED, 1,
                     "a producer whose command failed is reported finished");
    stoker_status_destroy(st);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

static pid_t
read_pid(const char *path, int timeout_ms)
{
    uint64_t deadline = stoker_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        char *s = testdir_read(path, NULL);
        long pid = s != NULL && strchr(s, '\n') != NULL ? strtol(s, NULL, 10) : 0;
        free(s);
        if (pid > 0)
            return (pid_t)pid;
        cr_assert_lt(stoker_now_ms(), deadline, "the child wrote no pid to %s", path);
        stoker_sleep_ms(10, NULL);
    }
}

Test(exec, child_is_gone_after_the_producer_stops)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--queue-depth", "100000"));
    const char *pidfile = testdir_file("child.pid");
    char cmd[512];
    // An endless generator; `exec awk` keeps the pid the shell wrote.
    snprintf(cmd, sizeof(cmd),
             "echo $$ > %s; exec awk 'BEGIN { for (;;) { print \"1 2 3 4 5 6 7 8 9 10 11\"; "
             "fflush(); system(\"sleep 0.01\") } }'",
             pidfile);
    proc_child *p = e2e_producer_start(
        url, "endless", PROC_ARGS("--generator", "exec", "--exec", cmd, "--schema", EXEC_SCHEMA));
    pid_t child = read_pid(pidfile, 5000);
    cr_assert(h_wait_producer(url, "endless", 10, 10000), "no examples arrived in 10 s");
    cr_assert_eq(kill(child, 0), 0, "the generator %d is not running while producing", child);

    proc_signal(p, SIGTERM);
    proc_assert_exit(p, 0, 5000);
    // The producer reaps its child: it must not exist any more (not even as an orphan).
    uint64_t deadline = stoker_now_ms() + 2000;
    while (kill(child, 0) == 0 && stoker_now_ms() < deadline)
        stoker_sleep_ms(10, NULL);
    cr_assert(kill(child, 0) == -1 && errno == ESRCH,
              "the generator child %d still exists after the producer stopped", child);
    cr_assert_eq(producer_info(url, "endless").status, STOKER_PRODUCER_FINISHED);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

// --- broker restart -----------------------------------------------------------------------------

Test(restart, producer_reconnects_to_a_restarted_broker_without_duplicate_seq, .timeout = 40)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    const char *const bargs[] = {"--queue-depth", "100000", NULL};
    proc_child *broker = e2e_broker_start(url, bargs);
    // Without retention (--retain 0): the new broker gets only what comes after the kill.
    // test_durable.c shows what retention adds.
    proc_child *p = e2e_producer_start(
        url, "survivor", PROC_ARGS("--delay", "0.001:0.002", "--chunk", "3", "--retain", "0"));
    cr_assert(h_wait_producer(url, "survivor", 30, 10000), "no examples in 10 s");
    stoker_producer_info before = producer_info(url, "survivor");

    proc_signal(broker, SIGKILL);
    cr_assert(proc_wait(broker, 5000));
    stoker_sleep_ms(200, NULL); // the producer is pushing into nothing meanwhile
    uint64_t restart_ms = stoker_now_ms();
    broker = e2e_broker_start(url, bargs);
    cr_assert(h_wait_producer(url, "survivor", 1, 10000),
              "the producer did not come back within 10 s of the restart");
    uint64_t back_ms = stoker_now_ms() - restart_ms;
    cr_assert(h_wait_producer(url, "survivor", 30, 10000),
              "the producer pushed < 30 to the new broker in 10 s");
    fprintf(stderr, "restart: the producer was back %llu ms after the broker restarted\n",
            (unsigned long long)back_ms);
    cr_assert_lt(back_ms, 3000, "reconnecting took %llu ms", (unsigned long long)back_ms);

    proc_signal(p, SIGTERM);
    proc_assert_exit(p, 0, 5000);
    stoker_producer_info after = producer_info(url, "survivor");
    cr_assert_eq(after.session, before.session, "the producer changed its session id");
    cr_assert_eq(after.status, STOKER_PRODUCER_FINISHED);

    stoker_trainer_client *tc = e2e_trainer_client(url, 32, 5000);
    e2e_examples ex = {0};
    int rv = e2e_drain(tc, &ex, 10000);
    cr_assert_eq(rv, STOKER_END_OF_DATA, "the supply ended with %s", stoker_errname(rv));
    cr_assert_eq(stoker_trainer_client_duplicates(tc), 0);
    cr_assert_eq(e2e_duplicates(&ex), 0, "the new broker holds duplicate seqs");
    cr_assert_eq(ex.n, after.accepted);
    // The new broker holds the seqs from where the producer resumed, without gaps: at most the
    // chunk in flight at the kill is held by both brokers, none is skipped.
    e2e_examples_sort(&ex);
    uint64_t first = ex.v[0].seq;
    cr_assert_geq(first + 3, before.accepted,
                  "the producer resumed at seq %llu, the old broker "
                  "had %llu already",
                  (unsigned long long)first, (unsigned long long)before.accepted);
    assert_contiguous(&ex, first, after.accepted);
    e2e_examples_fini(&ex);
    stoker_trainer_client_destroy(tc);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

// --- counters of a clean run ----------------------------------------------

// A clean run refuses nothing: producers pushing as fast as they can (two pushes in flight, small
// chunks), their queues full for a while before a trainer comes (each parked push then waits out
// its time, answered "no room", and the one behind it with it), the trainer pulling and
// acknowledging everything, the supply ended by the producers' goodbyes. The broker's refused
// counter, the one an operator alarms on, stays 0.
Test(producer, a_clean_run_leaves_the_refused_counter_at_zero)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker =
        e2e_broker_start(url, PROC_ARGS("--schema", EXEC_SCHEMA, "--queue-depth", "16"));
    const char *const pargs[] = {"--delay", "0:0", "--chunk", "1", "--max-examples", "1500", NULL};
    proc_child *p1 = e2e_producer_start(url, "clean-1", pargs);
    proc_child *p2 = e2e_producer_start(url, "clean-2", pargs);
    cr_assert(h_wait_producer(url, "clean-1", 16, 10000), "clean-1 did not fill its queue");
    cr_assert(h_wait_producer(url, "clean-2", 16, 10000), "clean-2 did not fill its queue");
    stoker_sleep_ms(1500, NULL); // parked pushes wait out their time, several times over
    stoker_trainer_client *tc = e2e_trainer_client(url, 8, 10000);
    e2e_examples ex = {0};
    int rv = e2e_drain(tc, &ex, 20000);
    cr_assert_eq(rv, STOKER_END_OF_DATA, "the supply ended with %s", stoker_errname(rv));
    proc_assert_exit(p1, 0, 5000);
    proc_assert_exit(p2, 0, 5000);
    e2e_assert_exactly(&ex, 2, 1500);
    e2e_examples_fini(&ex);
    stoker_trainer_client_destroy(tc);
    stoker_status *st = h_status(url);
    uint64_t refused = st->counters.refused;
    stoker_status_destroy(st);
    cr_assert_eq(refused, 0, "a clean run left the broker's refused counter at %llu",
                 (unsigned long long)refused);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

// --- command lines ------------------------------------------------------------------------------

// Runs the producer with args (no broker needed: these fail before connecting) and asserts the
// exit code and that stderr contains want.
static void
assert_refused(const char *const *args, int code, const char *want)
{
    proc_child *p = e2e_start("producer", "STOKER_PRODUCER_BIN", args);
    proc_assert_exit(p, code, 5000);
    char *err = testdir_read(p->err_path, NULL);
    cr_assert(strstr(err, want) != NULL, "stderr does not mention '%s':\n%s", want, err);
    free(err);
}

Test(producer_cli, bad_flags_exit_2_naming_the_flag)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "nobody");
    assert_refused(PROC_ARGS("--broker", url, "--chunk", "0"), 2, "--chunk");
    assert_refused(PROC_ARGS("--broker", url, "--delay", "5:1"), 2, "--delay");
    assert_refused(PROC_ARGS("--broker", url, "--no-such-flag"), 2, "--no-such-flag");
    assert_refused(PROC_ARGS("--broker", url, "--generator", "nope"), 2, "--generator");
    assert_refused(PROC_ARGS("--broker", url, "--max-examples", "-3"), 2, "--max-examples");
    assert_refused(PROC_ARGS("--delay", "0:0"), 2, "--broker");
}

Test(producer_cli, missing_image_folder_exits_1_naming_it)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "nobody");
    const char *dir = testdir_file("no-such-images");
    assert_refused(PROC_ARGS("--broker", url, "--generator", "images", "--images", dir), 1, dir);
}
