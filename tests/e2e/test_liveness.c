// A trainer's liveness, its pulls and its bounded waits, with the
// real broker, producers, stoker-pull and stoker-trainer as processes:
// - a live trainer whose step outlasts --trainer-timeout (an evaluation pass, a checkpoint) keeps
//   its leases and its group: it is heard through its heartbeat, not only its pulls;
// - a consumer SIGSTOPped for less than --trainer-timeout loses no batch: a pull whose reply came
//   after it timed out is named by the next one, and the broker sends that lease again;
// - a broker that dies, or is stopped cleanly, and stays down ends a trainer's wait at its stall
//   timeout, named as a broker that went away (exit 6), not as a stall.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "e2e.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/status.h"

TestSuite(liveness, .init = e2e_setup, .fini = e2e_teardown, .timeout = 90);

#define SCHEMA "input:float32[10],output:float32[1]"

static stoker_trainer_client *
rank_client(const char *url, const char *group, uint32_t rank, uint32_t world)
{
    stoker_trainer_options o;
    stoker_trainer_options_init(&o);
    o.client.url = url;
    o.client.name = rank == 0 ? "rank-0" : "rank-1";
    o.client.give_up_ms = 5000;
    o.client.request_timeout_ms = 2000;
    o.batch_size = 8;
    o.prefetch = 2;
    o.stall_timeout_ms = 8000;
    o.group = group;
    o.rank = rank;
    o.world = world;
    stoker_trainer_client *tc = NULL;
    char err[512] = "";
    int rv = stoker_trainer_client_create(&o, &tc, err, sizeof(err));
    cr_assert_eq(rv, STOKER_OK, "rank %u of '%s' at %s: %s (%s)", rank, group, url,
                 stoker_strerror(rv), err);
    return tc;
}

// Defect 4: one step of 5 s under --trainer-timeout 2: the trainer is not dropped, nothing is
// redelivered, and its next batch comes.
Test(liveness, a_step_longer_than_the_trainer_timeout_keeps_the_trainer_and_its_leases)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker =
        e2e_broker_start(url, PROC_ARGS("--schema", SCHEMA, "--trainer-timeout", "2"));
    proc_child *producer = e2e_producer_start(url, "p", PROC_ARGS("--delay", "0:0"));
    stoker_trainer_client *tc = e2e_trainer_client(url, 8, 8000);
    stoker_batch *b = NULL;
    cr_assert_eq(stoker_trainer_client_next(tc, &b), STOKER_OK);
    uint64_t lease = b->lease;
    stoker_sleep_ms(5000, NULL); // the long step: an evaluation pass
    stoker_trainer_client_ack(tc, lease);
    stoker_batch_destroy(b);
    b = NULL;
    cr_assert_eq(stoker_trainer_client_next(tc, &b), STOKER_OK, "no batch after the long step");
    stoker_trainer_client_ack(tc, b->lease);
    stoker_batch_destroy(b);
    cr_assert_eq(stoker_trainer_client_flush(tc), STOKER_OK,
                 "the long step's acknowledgement was refused: the trainer was dropped");
    stoker_status *st = h_status(url);
    cr_assert_eq(st->counters.redelivered, 0, "%llu examples redelivered from a live trainer",
                 (unsigned long long)st->counters.redelivered);
    stoker_status_destroy(st);
    stoker_trainer_client_destroy(tc);
    proc_stop(producer, 5000);
    proc_broker_stop(broker);
    cr_assert(!testdir_contains(broker->err_path, "trainer-lost"),
              "the broker dropped a live trainer (see %s)", broker->err_path);
}

// Defect 4 for a group: rank 0 spends 5 s on one step under --trainer-timeout 2; the group stays
// whole and both ranks get their next step.
Test(liveness, a_rank_with_a_long_step_does_not_break_its_group)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker =
        e2e_broker_start(url, PROC_ARGS("--schema", SCHEMA, "--trainer-timeout", "2"));
    proc_child *producer = e2e_producer_start(url, "p", PROC_ARGS("--delay", "0:0"));
    stoker_trainer_client *r0 = rank_client(url, "g", 0, 2);
    stoker_trainer_client *r1 = rank_client(url, "g", 1, 2);
    stoker_trainer_client *ranks[2] = {r0, r1};
    for (int step = 0; step < 3; step++) {
        for (int r = 0; r < 2; r++) {
            stoker_batch *b = NULL;
            int rv = stoker_trainer_client_next(ranks[r], &b);
            cr_assert_eq(rv, STOKER_OK, "step %d rank %d: %s (%s)", step, r, stoker_strerror(rv),
                         stoker_trainer_client_end_reason(ranks[r]));
            stoker_trainer_client_ack(ranks[r], b->lease);
            stoker_batch_destroy(b);
        }
        if (step == 0)
            stoker_sleep_ms(5000, NULL); // both ranks wait for rank 0's evaluation pass
    }
    stoker_trainer_client_destroy(r0);
    stoker_trainer_client_destroy(r1);
    proc_stop(producer, 5000);
    proc_broker_stop(broker);
    cr_assert(!testdir_contains(broker->err_path, "trainer-lost"),
              "the broker dropped a live rank (see %s)", broker->err_path);
}

static size_t
count_lines(const char *path)
{
    size_t len = 0, n = 0;
    char *text = testdir_read(path, &len);
    for (size_t i = 0; i < len; i++)
        n += text[i] == '\n';
    free(text);
    return n;
}

// Defect 5: stoker-pull SIGSTOPped for 6 s (under --trainer-timeout 20) while 800 examples come:
// its pulls time out on its side after their wait plus the request timeout (4 s) while the broker
// leased batches for them. It still writes all 800 and the broker got none back unused.
Test(liveness, a_consumer_paused_under_its_timeout_loses_no_batch)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker =
        e2e_broker_start(url, PROC_ARGS("--schema", SCHEMA, "--trainer-timeout", "20"));
    proc_child *producer = e2e_producer_start(
        url, "p", PROC_ARGS("--delay", "0.01:0.01", "--chunk", "16", "--max-examples", "800"));
    proc_child *pull = e2e_start("pull", "STOKER_PULL_BIN",
                                 PROC_ARGS("--broker", url, "--batch-size", "16", "--max-examples",
                                           "800", "--stall-timeout", "10", "--log-level", "info"));
    cr_assert(h_wait_acknowledged(url, 64, 15000), "the consumer did not start");
    proc_signal(pull, SIGSTOP);
    stoker_sleep_ms(6000, NULL);
    proc_signal(pull, SIGCONT);
    cr_assert(proc_wait(pull, 40000), "stoker-pull still running 40 s after the pause");
    int rv = proc_exit_code(pull);
    size_t lines = count_lines(pull->out_path);
    stoker_status *st = h_status(url);
    unsigned long long unused = st->counters.returned_unused;
    stoker_status_destroy(st);
    cr_assert_eq(lines, 800, "stoker-pull wrote %zu of 800 examples (exit %d; see %s)", lines, rv,
                 pull->err_path);
    cr_assert_eq(rv, 0, "stoker-pull exited %d (see %s)", rv, pull->err_path);
    cr_assert_eq(unused, 0, "%llu examples came back unused after the pause", unused);
    proc_stop(producer, 5000);
    proc_broker_stop(broker);
}

// Defect 5, made certain: the broker frozen for 5 s (its timeouts longer) while the trainer client
// waits, so its pulls time out on the client's side (wait 1 s + request 2 s) and the broker,
// thawed, leases batches for them whose replies the client no longer takes. Every one of the
// 400 examples still comes, once, and none comes back unused.
Test(liveness, replies_that_come_after_the_pull_timed_out_lose_no_batch)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker =
        e2e_broker_start(url, PROC_ARGS("--schema", SCHEMA, "--trainer-timeout", "30",
                                        "--producer-timeout", "30", "--queue-depth", "1000"));
    proc_child *producer = e2e_producer_start(
        url, "p", PROC_ARGS("--delay", "0:0", "--chunk", "16", "--max-examples", "400"));
    cr_assert(h_wait_producer(url, "p", 400, 15000), "the producer did not push its 400");
    stoker_trainer_client *tc = e2e_trainer_client(url, 16, 8000);
    e2e_examples ex = {0};
    cr_assert_eq(e2e_pull_n(tc, &ex, 32, 10000), STOKER_OK);
    proc_signal(broker, SIGSTOP);
    proc_wait_stopped(broker, 5000);
    // Pulls go out (to a broker that reads them only when thawed) and time out meanwhile.
    stoker_batch *b = NULL;
    for (int i = 0; i < 8; i++) { // what was prefetched
        int rv = stoker_trainer_client_next_within(tc, &b, 100);
        if (rv != STOKER_OK)
            break;
        e2e_record(&ex, b);
        stoker_trainer_client_ack(tc, b->lease);
        stoker_batch_destroy(b);
    }
    stoker_sleep_ms(5000, NULL);
    proc_signal(broker, SIGCONT);
    int rv = e2e_drain(tc, &ex, 30000);
    cr_assert(rv == STOKER_END_OF_DATA, "drain ended with %s after %zu examples",
              stoker_strerror(rv), ex.n);
    stoker_trainer_client_destroy(tc);
    stoker_status *st = h_status(url);
    unsigned long long unused = st->counters.returned_unused;
    stoker_status_destroy(st);
    size_t n = ex.n;
    e2e_assert_exactly(&ex, 1, 400);
    cr_assert_eq(unused, 0, "%llu examples came back unused (%zu received)", unused, n);
    e2e_examples_fini(&ex);
    proc_stop(producer, 5000);
    proc_broker_stop(broker);
}

// The broker SIGKILLed under stoker-trainer --time-goal 60 --stall-timeout 3 and never
// restarted: the trainer stops within its stall timeout plus a margin, saying the broker went
// away (exit 6).
Test(liveness, a_broker_that_stays_down_ends_the_trainer_at_its_stall_timeout)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--schema", SCHEMA));
    proc_child *producer = e2e_producer_start(url, "p", PROC_ARGS("--delay", "0:0.01"));
    const char *json = testdir_file("summary.json");
    proc_child *t =
        e2e_trainer_start(PROC_ARGS("--broker", url, "--batch-size", "8", "--time-goal", "60",
                                    "--stall-timeout", "3", "--device", "cpu", "--json", json));
    cr_assert(h_wait_acknowledged(url, 32, 15000), "the trainer did not start");
    proc_signal(broker, SIGKILL);
    uint64_t killed = stoker_now_ms();
    int exited = proc_wait(t, 15000);
    uint64_t took = stoker_now_ms() - killed;
    cr_assert(exited, "stoker-trainer still running 15 s after the broker died (see %s)",
              t->err_path);
    int rv = proc_exit_code(t);
    cr_log_info("stoker-trainer stopped %.1f s after the broker died", took / 1000.0);
    cr_assert_eq(rv, 6, "stoker-trainer exited %d %.1f s after the broker died (see %s)", rv,
                 took / 1000.0, t->err_path);
    cr_assert_lt(took, 6000, "stoker-trainer took %.1f s to stop (stall timeout 3 s)",
                 took / 1000.0);
    e2e_check_ok(PROC_ARGS("summary", json, "--status", "broker_lost", "--reason-starts",
                           "the broker went away"));
    proc_kill(producer);
}

// The broker stopped cleanly (SIGTERM, as systemctl stop does) under stoker-trainer
// --stall-timeout 3: it sends no goodbye, its connections close. The trainer ends within its
// stall timeout plus a margin with status broker_lost and a reason that says the broker went
// away (exit 6), not "stalled" (exit 4) as if producers were slow.
Test(liveness, a_broker_stopped_cleanly_ends_the_trainer_saying_the_broker_went_away)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--schema", SCHEMA));
    proc_child *producer = e2e_producer_start(url, "p", PROC_ARGS("--delay", "0:0.01"));
    const char *json = testdir_file("summary.json");
    proc_child *t =
        e2e_trainer_start(PROC_ARGS("--broker", url, "--batch-size", "8", "--rounds", "100000",
                                    "--stall-timeout", "3", "--device", "cpu", "--json", json));
    cr_assert(h_wait_acknowledged(url, 32, 15000), "the trainer did not start");
    proc_signal(broker, SIGTERM);
    uint64_t stopped = stoker_now_ms();
    cr_assert(proc_wait(broker, 10000), "the broker did not stop on SIGTERM");
    cr_assert_eq(proc_exit_code(broker), 0, "the broker's clean stop exited %d",
                 proc_exit_code(broker));
    cr_assert(proc_wait(t, 15000), "stoker-trainer still running 15 s after the broker stopped");
    uint64_t took = stoker_now_ms() - stopped;
    cr_log_info("stoker-trainer stopped %.1f s after the broker", took / 1000.0);
    cr_assert_eq(proc_exit_code(t), 6,
                 "stoker-trainer exited %d %.1f s after the broker stopped "
                 "(see %s)",
                 proc_exit_code(t), took / 1000.0, t->err_path);
    cr_assert_lt(took, 6000, "stoker-trainer took %.1f s to stop (stall timeout 3 s)",
                 took / 1000.0);
    e2e_check_ok(PROC_ARGS("summary", json, "--status", "broker_lost", "--reason-starts",
                           "the broker went away"));
    cr_assert(testdir_contains(t->err_path, "broker_lost: the broker went away"),
              "the trainer's last line does not say the broker went away (see %s)", t->err_path);
    cr_assert(!testdir_contains(t->err_path, "stalled: stalled:"),
              "the trainer's log says \"stalled: stalled:\" (see %s)", t->err_path);
    proc_kill(producer);
}

// Defect 12, the time goal: stoker-trainer --time-goal 5 --stall-timeout 60 and the broker
// SIGKILLed a second in: the trainer stops on its time goal (exit 0, status time_goal), not 60 s
// later.
Test(liveness, a_broker_that_stays_down_ends_the_trainer_at_its_time_goal)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--schema", SCHEMA));
    proc_child *producer = e2e_producer_start(url, "p", PROC_ARGS("--delay", "0:0.01"));
    const char *json = testdir_file("summary.json");
    uint64_t t0 = stoker_now_ms();
    proc_child *t =
        e2e_trainer_start(PROC_ARGS("--broker", url, "--batch-size", "8", "--time-goal", "5",
                                    "--stall-timeout", "60", "--device", "cpu", "--json", json));
    cr_assert(h_wait_acknowledged(url, 32, 15000), "the trainer did not start");
    proc_signal(broker, SIGKILL);
    int exited = proc_wait(t, 20000);
    uint64_t took = stoker_now_ms() - t0;
    cr_assert(exited, "stoker-trainer --time-goal 5 still running after %.1f s (see %s)",
              took / 1000.0, t->err_path);
    cr_log_info("stoker-trainer --time-goal 5 stopped after %.1f s", took / 1000.0);
    cr_assert_eq(proc_exit_code(t), 0, "stoker-trainer exited %d (see %s)", proc_exit_code(t),
                 t->err_path);
    cr_assert_lt(took, 9000, "stoker-trainer --time-goal 5 took %.1f s", took / 1000.0);
    // (check.py's summary check wants the audit, which a dead broker cannot give.)
    cr_assert(testdir_contains(json, "\"time_goal\""), "no time_goal status in %s", json);
    proc_kill(producer);
}

// Defect 12 in the trainer client: with the broker gone, next returns STOKER_STALLED within the
// stall timeout (after what was prefetched), and destroy does not wait for the broker.
Test(liveness, a_client_whose_broker_died_stalls_in_time)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--schema", SCHEMA));
    proc_child *producer = e2e_producer_start(url, "p", PROC_ARGS("--delay", "0:0"));
    stoker_trainer_client *tc = e2e_trainer_client(url, 8, 2000);
    stoker_batch *b = NULL;
    cr_assert_eq(stoker_trainer_client_next(tc, &b), STOKER_OK);
    stoker_trainer_client_ack(tc, b->lease);
    stoker_batch_destroy(b);
    proc_signal(broker, SIGKILL);
    proc_wait(broker, 5000);
    proc_kill(producer);
    uint64_t t0 = stoker_now_ms();
    int rv = STOKER_OK;
    for (int i = 0; i < 1000 && rv == STOKER_OK; i++) { // what was prefetched, then the wait
        b = NULL;
        rv = stoker_trainer_client_next(tc, &b);
        if (rv == STOKER_OK) {
            stoker_trainer_client_ack(tc, b->lease);
            stoker_batch_destroy(b);
        }
    }
    uint64_t took = stoker_now_ms() - t0;
    cr_assert_eq(rv, STOKER_STALLED, "next returned %s", stoker_strerror(rv));
    cr_assert_lt(took, 4500, "next took %.1f s with a stall timeout of 2 s", took / 1000.0);
    uint64_t d0 = stoker_now_ms();
    stoker_trainer_client_destroy(tc);
    cr_assert_lt(stoker_now_ms() - d0, 4000, "destroy took %llu ms without a broker",
                 (unsigned long long)(stoker_now_ms() - d0));
}
