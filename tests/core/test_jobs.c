// Jobs sharing one broker's producers (server/broker/jobs.c, docs/sharing.md), driven through the
// broker state machine: every job gets every example made after it joined exactly once, a
// producer's push is queued once for all of them (made once), the slowest job paces the
// producers, a producer may forget an example only when every job trained it, and a job whose
// consumers left frees what it held while the others go on.
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "broker_fixture.h"
#include "helpers.h"
#include "stoker/error.h"
#include "stoker/status.h"

#define P  1 // the producer's session
#define TA 11
#define TB 12
#define TC 13

static stoker_schema schema;

static void
setup(void)
{
    h_setup();
    h_schema(&schema);
    bf_init();
    broker_config cfg;
    broker_config_init(&cfg);
    cfg.queue_depth = 16;
    cfg.queue_depth_auto = 0;
    cfg.job_lag = 8;
    cfg.job_timeout_ms = 5000;
    bf_create(&cfg);
}

static void
teardown(void)
{
    bf_fini();
    h_teardown();
}

TestSuite(jobs, .init = setup, .fini = teardown, .timeout = 10);

static void
hello_job(uint64_t session, const char *job)
{
    stoker_request *req = h_hello_trainer(session, "trainer");
    snprintf(req->job, sizeof(req->job), "%s", job);
    bf_answered(bf_handle((uint32_t)session, req), STOKER_OK);
}

// Jobs a (trainer TA) and b (TB), then the producer P.
static void
two_jobs(const char *a, const char *b)
{
    hello_job(TA, a);
    hello_job(TB, b);
    bf_answered(bf_handle(P, h_hello_producer(P, "p", &schema)), STOKER_OK);
}

static stoker_reply *
push(uint64_t first, uint32_t count, int code)
{
    return bf_answered(bf_handle(P, h_push(P, &schema, first, count)), code);
}

// Pulls up to max for trainer t and acknowledges; adds the seqs it got to seen (counts each).
static uint32_t
take(uint64_t t, uint32_t max, uint8_t *seen, uint32_t cap)
{
    stoker_reply *rep = bf_reply(bf_handle((uint32_t)t, h_pull(t, max, 0, 0, NULL)));
    cr_assert_not_null(rep, "a pull with no wait is answered at once");
    if (rep->code != STOKER_OK || rep->lease == 0)
        return 0;
    uint32_t n = 0;
    for (uint32_t r = 0; r < rep->n_runs; r++)
        for (uint64_t s = rep->runs[r].first_seq; s < rep->runs[r].first_seq + rep->runs[r].count;
             s++) {
            cr_assert_lt(s, cap);
            seen[s]++;
            n++;
        }
    uint64_t lease = rep->lease;
    bf_answered(bf_handle((uint32_t)t, h_ack(t, 1, &lease)), STOKER_OK);
    return n;
}

static stoker_status *
status(void)
{
    stoker_status *st = NULL;
    cr_assert_eq(broker_status(bf_broker, bf_now_ms, 100, &st), STOKER_OK);
    return st;
}

static const stoker_job_info *
job(const stoker_status *st, const char *name)
{
    for (uint32_t i = 0; i < st->n_jobs; i++)
        if (strcmp(st->jobs[i].name, name) == 0)
            return &st->jobs[i];
    cr_assert_fail("no job '%s' in the status", name);
    return NULL;
}

Test(jobs, every_job_gets_every_example_once_and_it_is_made_once)
{
    hello_job(TA, "a");
    hello_job(TB, "b");
    hello_job(TC, "");
    bf_answered(bf_handle(P, h_hello_producer(P, "p", &schema)), STOKER_OK);
    uint8_t seen[3][256] = {{0}};
    uint64_t seq = 0;
    while (seq < 240) {
        push(seq, 8, STOKER_OK);
        seq += 8;
        // Batches of other sizes than the pushes, each job keeping pace.
        take(TA, 5, seen[0], 256);
        take(TB, 7, seen[1], 256);
        take(TC, 3, seen[2], 256);
        take(TA, 3, seen[0], 256);
        take(TB, 1, seen[1], 256);
        take(TC, 5, seen[2], 256);
        bf_forget();
    }
    for (int k = 0; k < 40; k++) {
        take(TA, 16, seen[0], 256);
        take(TB, 16, seen[1], 256);
        take(TC, 16, seen[2], 256);
        bf_forget();
    }
    for (int j = 0; j < 3; j++)
        for (uint64_t s = 0; s < 240; s++)
            cr_assert_eq(seen[j][s], 1, "job %d got seq %llu %u times", j, (unsigned long long)s,
                         seen[j][s]);
    stoker_status *st = status();
    cr_assert_eq(st->counters.produced, 240, "the producer's examples were taken in once");
    cr_assert_eq(st->n_jobs, 3);
    cr_assert_eq(job(st, "a")->delivered, 240);
    cr_assert_eq(job(st, "b")->acknowledged, 240);
    cr_assert_eq(job(st, "")->made, 240);
    uint32_t in_b = 0;
    for (uint32_t i = 0; i < st->n_consumers; i++)
        in_b += strcmp(st->consumers[i].job, "b") == 0;
    cr_assert_eq(in_b, 1, "each consumer names its job");
    stoker_status_destroy(st);
}

Test(jobs, the_slowest_job_paces_the_producers_and_holds_what_it_has_not_trained)
{
    two_jobs("fast", "slow");
    uint8_t seen[2][256] = {{0}};
    // The slow job takes nothing: depth 16 + lag 8 = 24 examples fit, then pushes wait.
    push(0, 8, STOKER_OK);
    push(8, 8, STOKER_OK);
    take(TA, 16, seen[0], 256);
    stoker_reply *rep = push(16, 8, STOKER_OK);
    cr_assert_eq(rep->trained_through, 0, "nothing is trained by every job yet");
    take(TA, 16, seen[0], 256);
    uintptr_t waiting = bf_handle(P, h_push(P, &schema, 24, 8));
    cr_assert_null(bf_reply(waiting), "the slow job's queue is full: the push waits");
    bf_tick(300);
    cr_assert_eq(bf_answered(waiting, STOKER_RETRY)->code, STOKER_RETRY);
    // The slow job takes: room again, and what both trained may be forgotten.
    take(TB, 16, seen[1], 256);
    rep = push(24, 8, STOKER_OK);
    cr_assert_eq(rep->trained_through, 16, "seqs below 16 trained by both jobs");
    stoker_status *st = status();
    cr_assert_eq(job(st, "slow")->queued, 16);
    cr_assert_eq(job(st, "fast")->queued, 8);
    cr_assert_eq(job(st, "slow")->lag, 8);
    stoker_status_destroy(st);
}

Test(jobs, a_job_whose_consumers_left_frees_what_it_held_and_the_others_go_on)
{
    two_jobs("stays", "leaves");
    uint8_t seen[2][256] = {{0}};
    push(0, 8, STOKER_OK);
    push(8, 8, STOKER_OK);
    push(16, 8, STOKER_OK);
    take(TA, 24, seen[0], 256);
    take(TB, 4, seen[1], 256);
    bf_answered(bf_handle(TB, h_simple(STOKER_GOODBYE, TB)), STOKER_OK);
    bf_tick(100);
    stoker_status *st = status();
    cr_assert_eq(job(st, "leaves")->state, STOKER_JOB_ENDED, "state %u", job(st, "leaves")->state);
    cr_assert_eq(job(st, "leaves")->queued, 0, "what it held is freed");
    stoker_status_destroy(st);
    // The other job goes on at its own pace: pushes fit, and are trained by it alone.
    for (uint64_t s = 24; s < 96; s += 8) {
        stoker_reply *rep = push(s, 8, STOKER_OK);
        take(TA, 8, seen[0], 256);
        cr_assert_geq(rep->trained_through, s, "the ended job holds nothing back");
    }
    for (uint64_t s = 0; s < 96; s++)
        cr_assert_eq(seen[0][s], 1, "seq %llu", (unsigned long long)s);
}

Test(jobs, a_job_gone_past_its_timeout_ends_and_one_joining_late_starts_from_then)
{
    two_jobs("a", "b");
    uint8_t seen[3][256] = {{0}};
    push(0, 8, STOKER_OK);
    take(TA, 8, seen[0], 256);
    bf_pipe_closed(TB); // killed: its job waits --job-timeout for it
    bf_tick(1000);
    stoker_status *st = status();
    cr_assert_eq(job(st, "b")->state, STOKER_JOB_ABSENT);
    stoker_status_destroy(st);
    push(8, 8, STOKER_OK);
    hello_job(TC, "late");
    push(16, 8, STOKER_OK);
    for (int k = 0; k < 4; k++) {
        take(TA, 8, seen[0], 256);
        take(TC, 8, seen[2], 256);
    }
    for (uint64_t s = 0; s < 24; s++) {
        cr_assert_eq(seen[0][s], 1, "job a, seq %llu", (unsigned long long)s);
        cr_assert_eq(seen[2][s], s >= 16 ? 1 : 0,
                     "a job joining late starts from the examples "
                     "made after it joined (seq %llu)",
                     (unsigned long long)s);
    }
    bf_tick(5000);
    st = status();
    cr_assert_eq(job(st, "b")->state, STOKER_JOB_ENDED, "%s", job(st, "b")->end_reason);
    cr_assert(strstr(job(st, "b")->end_reason, "--job-timeout") != NULL, "%s",
              job(st, "b")->end_reason);
    cr_assert_eq(st->n_jobs, 3);
    stoker_status_destroy(st);
}

Test(jobs, jobs_that_start_together_share_a_dataset)
{
    bf_fini();
    bf_init();
    broker_config cfg;
    broker_config_init(&cfg);
    cfg.dataset_size = 100;
    bf_create(&cfg);
    hello_job(TA, "a");
    hello_job(TB, "b");
    stoker_status *st = status();
    cr_assert_eq(st->n_jobs, 2, "two jobs on one dataset, both before its first batch");
    stoker_status_destroy(st);
}

Test(jobs, the_lead_job_ends_and_the_others_go_on_with_its_producers)
{
    two_jobs("first", "second"); // "first" leads: it owns the producers' books
    uint8_t seen[2][256] = {{0}};
    push(0, 8, STOKER_OK);
    take(TA, 8, seen[0], 256);
    bf_answered(bf_handle(TA, h_simple(STOKER_GOODBYE, TA)), STOKER_OK);
    bf_tick(100);
    for (uint64_t s = 8; s < 120; s += 8) {
        stoker_reply *rep = push(s, 8, STOKER_OK); // the lead keeps nothing for its own job now
        take(TB, 16, seen[1], 256);
        cr_assert_geq(rep->trained_through, s - 8, "the ended lead holds nothing back");
        bf_forget();
    }
    take(TB, 16, seen[1], 256);
    for (uint64_t s = 0; s < 120; s++)
        cr_assert_eq(seen[1][s], 1, "seq %llu", (unsigned long long)s);
    stoker_status *st = status();
    cr_assert_eq(job(st, "first")->state, STOKER_JOB_ENDED);
    cr_assert_eq(st->counters.released, 112, "what the ended lead's job would have got: freed");
    stoker_status_destroy(st);
    // The lead's job started again: it gets the examples made from then on.
    hello_job(TC, "first");
    push(120, 8, STOKER_OK);
    uint8_t again[256] = {0};
    take(TC, 16, again, 256);
    for (uint64_t s = 0; s < 128; s++)
        cr_assert_eq(again[s], s >= 120 ? 1 : 0, "seq %llu", (unsigned long long)s);
}

Test(jobs, a_lagging_job_is_detached_under_the_detach_policy_and_the_others_go_on)
{
    bf_fini();
    bf_init();
    broker_config cfg;
    broker_config_init(&cfg);
    cfg.queue_depth = 16;
    cfg.queue_depth_auto = 0;
    cfg.job_lag = 8;
    cfg.job_policy = JOB_POLICY_DETACH;
    bf_create(&cfg);
    two_jobs("fast", "slow");
    uint8_t seen[2][256] = {{0}};
    take(TB, 4, seen[1], 256); // nothing yet: it only says it pulls
    for (uint64_t s = 0; s < 24; s += 8) {
        push(s, 8, STOKER_OK);
        take(TA, 8, seen[0], 256);
    }
    bf_tick(100); // slow holds 24 = depth + lag, fast none: slow is detached
    stoker_status *st = status();
    cr_assert_eq(job(st, "slow")->state, STOKER_JOB_DETACHED, "state %u", job(st, "slow")->state);
    cr_assert(strstr(job(st, "slow")->end_reason, "--job-lag") != NULL, "%s",
              job(st, "slow")->end_reason);
    int told = 0;
    for (uint32_t i = 0; i < st->n_events; i++)
        told += st->events[i].kind == STOKER_EVENT_JOB_DETACHED &&
                strcmp(st->events[i].name, "slow") == 0;
    cr_assert_eq(told, 1, "a job_detached event in the broker's log");
    stoker_status_destroy(st);
    // Its consumer hears why, and cannot come back to the same job.
    stoker_reply *rep = bf_reply(bf_handle(TB, h_pull(TB, 8, 0, 0, NULL)));
    cr_assert_not_null(rep);
    cr_assert_eq(rep->code, STOKER_NO_PRODUCERS, "%s", stoker_errname(rep->code));
    cr_assert(strstr(rep->message, "job 'slow' was detached") != NULL, "%s", rep->message);
    stoker_request *again = h_hello_trainer(TC, "trainer");
    snprintf(again->job, sizeof(again->job), "%s", "slow");
    rep = bf_answered(bf_handle(TC, again), STOKER_INVALID);
    cr_assert(strstr(rep->message, "detached") != NULL, "%s", rep->message);
    // The fast job goes on at its own pace.
    for (uint64_t s = 24; s < 120; s += 8) {
        push(s, 8, STOKER_OK);
        take(TA, 8, seen[0], 256);
        bf_forget();
    }
    for (uint64_t s = 0; s < 120; s++)
        cr_assert_eq(seen[0][s], 1, "seq %llu", (unsigned long long)s);
}

// After a broker restart each job's trainers say what they trained: it counts in their own job
// only (a heartbeat before the hello, naming its job, counts in none until that hello).
Test(jobs, what_a_job_reported_trained_counts_in_that_job_only)
{
    uint64_t report[3] = {P, 0, 8}; // seqs 0..7 of the producer's session
    stoker_request beat = {
        .method = STOKER_HEARTBEAT, .session = TB, .n_trained = 1, .trained = report};
    snprintf(beat.job, sizeof(beat.job), "%s", "b");
    bf_handle(TB, h_roundtrip(&beat));
    hello_job(TA, "a");
    stoker_request *hello = h_hello_trainer(TB, "trainer");
    snprintf(hello->job, sizeof(hello->job), "%s", "b");
    hello->n_trained = 1;
    hello->trained = report;
    stoker_request *sent = h_roundtrip(hello);
    hello->trained = NULL;
    stoker_request_free(hello);
    bf_answered(bf_handle(TB, sent), STOKER_OK);
    bf_answered(bf_handle(P, h_hello_producer(P, "p", &schema)), STOKER_OK);
    push(0, 16, STOKER_OK);
    uint8_t seen[2][256] = {{0}};
    take(TA, 16, seen[0], 256);
    take(TB, 16, seen[1], 256);
    for (uint64_t s = 0; s < 16; s++) {
        cr_assert_eq(seen[0][s], 1, "job a trained seq %llu (b's report is not a's)",
                     (unsigned long long)s);
        cr_assert_eq(seen[1][s], s >= 8 ? 1 : 0, "job b, seq %llu", (unsigned long long)s);
    }
}

// A producer's hello that jumps over seqs (trained before, never coming): trained for every job,
// so that what every job trained goes on past them.
Test(jobs, seqs_a_producer_jumps_over_are_trained_for_every_job)
{
    two_jobs("a", "b");
    uint8_t seen[2][256] = {{0}};
    push(0, 8, STOKER_OK);
    take(TA, 8, seen[0], 256);
    take(TB, 8, seen[1], 256);
    stoker_request *again = h_hello_producer(P, "p", &schema);
    again->next_seq = 20;
    bf_answered(bf_handle(P, again), STOKER_OK);
    push(20, 8, STOKER_OK);
    take(TA, 8, seen[0], 256);
    take(TB, 8, seen[1], 256);
    stoker_reply *rep = push(28, 8, STOKER_OK);
    cr_assert_eq(rep->trained_through, 28, "trained through %llu: the jump holds it back",
                 (unsigned long long)rep->trained_through);
}
