// Data-parallel groups in the broker's state machine (server/broker_group.c), driven directly as
// tests/core/test_broker.c drives it: requests encoded and decoded as the transport would, fake
// tokens, time a number the test advances, the accounting identity checked after every step.
// Step filling, the bound on steps ahead, the end at the same step with its leftover, refusals
// at hello, and the break when a rank is lost.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "broker.h"
#include "broker_fixture.h"
#include "helpers.h"
#include "stoker/error.h"

#define P1 11
#define P2 12

static stoker_schema schema;

static void
make_broker(uint32_t ahead, uint32_t depth)
{
    broker_config cfg;
    broker_config_init(&cfg);
    cfg.queue_depth = depth;
    cfg.queue_depth_auto = 0; // these tests mean queues of exactly depth
    cfg.producer_timeout_ms = 3000;
    cfg.trainer_timeout_ms = 10000;
    cfg.group_steps_ahead = ahead;
    bf_create(&cfg);
}

static void
setup(void)
{
    h_setup();
    h_schema(&schema);
    bf_init();
    make_broker(4, 256);
}

static void
teardown(void)
{
    bf_fini();
    h_teardown();
}

TestSuite(group, .init = setup, .fini = teardown, .timeout = 10);

// A batch of count examples for step `step`.
static stoker_reply *
batch(uintptr_t token, uint32_t count, uint64_t step)
{
    stoker_reply *rep = bf_answered(token, STOKER_OK);
    cr_assert_eq(rep->chunk.count, count, "request %lu: %u examples, expected %u",
                 (unsigned long)token, rep->chunk.count, count);
    cr_assert_eq(rep->group_step, step, "request %lu: step %llu, expected %llu",
                 (unsigned long)token, (unsigned long long)rep->group_step,
                 (unsigned long long)step);
    return rep;
}

static uintptr_t
hello_rank(uint64_t session, const char *group, uint32_t rank, uint32_t world, uint32_t batch_n)
{
    stoker_request req = {.method = STOKER_HELLO, .session = session, .role = STOKER_ROLE_TRAINER};
    snprintf(req.name, sizeof(req.name), "rank-%llu", (unsigned long long)session);
    snprintf(req.group, sizeof(req.group), "%s", group);
    req.rank = rank;
    req.world = world;
    req.group_batch = batch_n;
    return bf_handle((uint32_t)session, h_roundtrip(&req));
}

static void
producer(uint64_t session, uint32_t count)
{
    bf_answered(bf_handle((uint32_t)session, h_hello_producer(session, "p", &schema)), STOKER_OK);
    if (count > 0)
        bf_answered(bf_handle((uint32_t)session, h_push(session, &schema, 0, count)), STOKER_OK);
}

static void
finish(uint64_t session)
{
    bf_answered(bf_handle((uint32_t)session, h_simple(STOKER_GOODBYE, session)), STOKER_OK);
}

static uintptr_t
pull(uint64_t session, uint32_t max)
{
    return bf_handle((uint32_t)session, h_pull(session, max, 1000, 0, NULL));
}

static const stoker_group_info *
group_info(stoker_status **st)
{
    cr_assert_eq(broker_status(bf_broker, bf_now_ms, 0, st), STOKER_OK);
    cr_assert_geq((*st)->n_groups, 1, "no group in the status");
    return &(*st)->groups[0];
}

Test(group, step_starts_only_when_every_batch_can_be_filled)
{
    producer(P1, 5); // 5 < 2 x 3: no step yet (before the ranks: no event wakes their pulls)
    bf_answered(hello_rank(21, "g", 0, 2, 3), STOKER_OK);
    bf_answered(hello_rank(22, "g", 1, 2, 3), STOKER_OK);
    uintptr_t a = pull(21, 3), c = pull(22, 3);
    cr_assert_null(bf_reply(a), "a step was started with 5 examples for 2 ranks of 3");
    cr_assert_null(bf_reply(c));
    bf_answered(bf_handle(P1, h_push(P1, &schema, 5, 1)), STOKER_OK);
    stoker_reply *ra = batch(a, 3, 1), *rc = batch(c, 3, 1);
    // Disjoint: rank 0 has seqs 0..2, rank 1 seqs 3..5 (one producer, in order).
    cr_assert_eq(ra->runs[0].first_seq + ra->runs[0].count, rc->runs[0].first_seq);
}

Test(group, pull_wait_ends_empty_while_the_group_is_incomplete)
{
    producer(P1, 10);
    bf_answered(hello_rank(21, "g", 0, 2, 2), STOKER_OK);
    uintptr_t a = pull(21, 2);
    cr_assert_null(bf_reply(a), "rank 0 got a batch before rank 1 joined");
    bf_tick(1500);
    stoker_reply *r = bf_answered(a, STOKER_OK);
    cr_assert_eq(r->chunk.count, 0);
    stoker_counters c;
    broker_counters(bf_broker, &c);
    cr_assert_eq(c.queued, 10, "examples were taken for an incomplete group");
}

Test(group, ranks_prefetch_a_bounded_number_of_steps)
{
    broker_outbox out = {0};
    broker_destroy(bf_broker, &out);
    broker_outbox_fini(&out);
    make_broker(2, 256);
    bf_answered(hello_rank(21, "g", 0, 2, 1), STOKER_OK);
    bf_answered(hello_rank(22, "g", 1, 2, 1), STOKER_OK);
    producer(P1, 100);
    batch(pull(21, 1), 1, 1);
    batch(pull(21, 1), 1, 2);
    uintptr_t third = pull(21, 1);
    cr_assert_null(bf_reply(third), "rank 0 ran 3 steps ahead of rank 1 with --group-ahead 2");
    stoker_status *st = NULL;
    const stoker_group_info *g = group_info(&st);
    cr_assert_eq(g->steps, 2);
    cr_assert_eq(g->rank_steps[0], 2);
    cr_assert_eq(g->rank_steps[1], 0);
    cr_assert_eq(g->rank_ready[1], 2);
    stoker_status_destroy(st);
    batch(pull(22, 1), 1, 1); // rank 1 catches up one step: rank 0 may go on
    batch(third, 1, 3);
}

Test(group, end_reaches_every_rank_at_the_same_step_with_a_short_last_step)
{
    bf_answered(hello_rank(21, "g", 0, 2, 4), STOKER_OK);
    bf_answered(hello_rank(22, "g", 1, 2, 4), STOKER_OK);
    producer(P1, 11); // 8 in step 1, 2 x 1 in a short step 2, 1 left over
    finish(P1);
    batch(pull(21, 4), 4, 1);
    batch(pull(21, 4), 1, 2);
    stoker_reply *end0 = bf_answered(pull(21, 4), STOKER_END_OF_DATA);
    batch(pull(22, 4), 4, 1);
    batch(pull(22, 4), 1, 2);
    stoker_reply *end1 = bf_answered(pull(22, 4), STOKER_END_OF_DATA);
    cr_assert_eq(end0->group_leftover, 1);
    cr_assert_eq(end1->group_leftover, 1);
    cr_assert(strstr(end0->message, "ended at step 2") != NULL, "%s", end0->message);
    cr_assert(strstr(end0->message, "1 example left over") != NULL, "%s", end0->message);
    stoker_status *st = NULL;
    const stoker_group_info *g = group_info(&st);
    cr_assert_str_eq(g->state, "ended");
    cr_assert_eq(g->leftover, 1);
    char *json = stoker_status_render_json(st);
    cr_assert(strstr(json, "\"leftover\": 1") != NULL, "%s", json);
    free(json);
    stoker_status_destroy(st);
    stoker_counters c;
    broker_counters(bf_broker, &c);
    cr_assert_eq(c.queued, 1, "the leftover is still queued, not dropped");
}

Test(group, leftover_below_one_per_rank_is_reported_not_dropped)
{
    bf_answered(hello_rank(21, "g", 0, 4, 2), STOKER_OK);
    for (uint64_t s = 22; s <= 24; s++)
        bf_answered(hello_rank(s, "g", (uint32_t)(s - 21), 4, 2), STOKER_OK);
    producer(P1, 3);
    finish(P1);
    for (uint64_t s = 21; s <= 24; s++) {
        stoker_reply *r = bf_answered(pull(s, 2), STOKER_END_OF_DATA);
        cr_assert_eq(r->group_leftover, 3);
        cr_assert(strstr(r->message, "ended at step 0") != NULL, "%s", r->message);
    }
}

Test(group, refusals_at_hello)
{
    stoker_reply *r = bf_answered(hello_rank(21, "g", 2, 2, 4), STOKER_INVALID);
    cr_assert(strstr(r->message, "outside the world size") != NULL, "%s", r->message);
    bf_answered(hello_rank(21, "g", 0, 2, 4), STOKER_OK);
    // A claim on a held rank waits until the holder is judged: heard since
    // the claim, the holder is alive and the claimer is refused.
    r = bf_answered(hello_rank(22, "g", 0, 2, 4), STOKER_RETRY);
    cr_assert(strstr(r->message, "rank 0 is held by") != NULL, "%s", r->message);
    bf_now_ms += 100;
    bf_answered(hello_rank(21, "g", 0, 2, 4), STOKER_OK);
    r = bf_answered(hello_rank(22, "g", 0, 2, 4), STOKER_INVALID);
    cr_assert(strstr(r->message, "rank 0 is already held") != NULL, "%s", r->message);
    r = bf_answered(hello_rank(23, "g", 1, 3, 4), STOKER_INVALID);
    cr_assert(strstr(r->message, "disagree on the world size") != NULL, "%s", r->message);
    r = bf_answered(hello_rank(24, "g", 1, 2, 8), STOKER_INVALID);
    cr_assert(strstr(r->message, "disagree on the batch size") != NULL, "%s", r->message);
    r = bf_answered(hello_rank(25, "h", 0, 0, 4), STOKER_INVALID);
    cr_assert(strstr(r->message, "world size 0") != NULL, "%s", r->message);
    bf_answered(hello_rank(26, "g", 1, 2, 4), STOKER_OK); // the right one still joins
}

Test(group, lost_rank_breaks_the_group_and_its_batches_go_back)
{
    bf_answered(hello_rank(21, "g", 0, 2, 2), STOKER_OK);
    bf_answered(hello_rank(22, "g", 1, 2, 2), STOKER_OK);
    producer(P1, 20);
    for (uint64_t step = 1; step <= 4; step++) // rank 1 is sent none of its four formed steps
        batch(pull(21, 2), 2, step);
    uintptr_t waiting = pull(21, 2);
    cr_assert_null(bf_reply(waiting), "rank 0 ran 5 steps ahead of rank 1 (default bound 4)");
    bf_pipe_closed(22);
    stoker_reply *r = bf_answered(waiting, STOKER_GROUP_BROKEN);
    cr_assert(strstr(r->message, "rank 1") != NULL, "%s", r->message);
    // Rank 1's formed steps went back to the queues; rank 0's four sent batches stay leased.
    stoker_counters c;
    broker_counters(bf_broker, &c);
    cr_assert_eq(c.in_flight, 8);
    cr_assert_eq(c.queued, 12);
    bf_answered(pull(21, 2), STOKER_GROUP_BROKEN);
}

Test(group, silent_rank_breaks_the_group_within_the_trainer_timeout)
{
    bf_answered(hello_rank(21, "g", 0, 2, 2), STOKER_OK);
    bf_answered(hello_rank(22, "g", 1, 2, 2), STOKER_OK);
    producer(P1, 20);
    batch(pull(21, 2), 2, 1);
    for (int i = 0; i < 12; i++) { // rank 0 keeps pulling, rank 1 is silent
        bf_answered(bf_handle(P1, h_simple(STOKER_HEARTBEAT, P1)), STOKER_OK);
        pull(21, 2);
        bf_tick(1000);
    }
    bf_answered(pull(21, 2), STOKER_GROUP_BROKEN);
}

Test(group, broken_group_reforms_cleanly_under_its_name)
{
    bf_answered(hello_rank(21, "g", 0, 2, 2), STOKER_OK);
    bf_answered(hello_rank(22, "g", 1, 2, 2), STOKER_OK);
    producer(P1, 20);
    batch(pull(21, 2), 2, 1);
    bf_pipe_closed(22);
    bf_answered(pull(21, 2), STOKER_GROUP_BROKEN);
    bf_pipe_closed(21);
    // torchrun restarts both ranks: new sessions, the same group.
    bf_answered(hello_rank(31, "g", 0, 2, 2), STOKER_OK);
    bf_answered(hello_rank(32, "g", 1, 2, 2), STOKER_OK);
    batch(pull(31, 2), 2, 1);
    batch(pull(32, 2), 2, 1);
}

Test(group, queues_too_small_for_a_full_step_give_equal_short_steps)
{
    broker_outbox out = {0};
    broker_destroy(bf_broker, &out);
    broker_outbox_fini(&out);
    make_broker(4, 4); // a queue of 4 can never hold a step of 2 x 4
    producer(P1, 3);   // 3 queued: another chunk of 3 cannot fit, so the queue is full
    bf_answered(hello_rank(21, "g", 0, 2, 4), STOKER_OK);
    bf_answered(hello_rank(22, "g", 1, 2, 4), STOKER_OK);
    // No full step can come: one each at once, 1 stays, and the room that makes lets the next
    // push in.
    batch(pull(21, 4), 1, 1);
    batch(pull(22, 4), 1, 1);
    bf_answered(bf_handle(P1, h_push(P1, &schema, 3, 3)), STOKER_OK);
}

Test(group, rank_lost_after_the_end_leaves_the_others_their_steps)
{
    producer(P1, 0);
    bf_answered(hello_rank(21, "g", 0, 2, 2), STOKER_OK);
    bf_answered(hello_rank(22, "g", 1, 2, 2), STOKER_OK);
    bf_answered(bf_handle(P1, h_push(P1, &schema, 0, 9)), STOKER_OK);
    finish(P1);
    // Rank 0 takes both steps (2 x 2, then a short 2 x 2) and the end; rank 1 took none.
    batch(pull(21, 2), 2, 1);
    batch(pull(21, 2), 2, 2);
    bf_answered(pull(21, 2), STOKER_END_OF_DATA);
    bf_pipe_closed(21); // rank 0 leaves after the end: no break
    batch(pull(22, 2), 2, 1);
    bf_pipe_closed(22); // rank 1 dies holding its formed step 2: redelivered, not sent
    stoker_counters c;
    broker_counters(bf_broker, &c);
    // Nothing was acknowledged: both ranks' batches, sent or only formed, are queued again.
    cr_assert_eq(c.queued, 9);
    cr_assert_eq(c.in_flight, 0);
    bf_answered(hello_rank(22, "g", 1, 2, 2), STOKER_OK); // the same session comes back
    bf_answered(pull(22, 2), STOKER_END_OF_DATA);
}
