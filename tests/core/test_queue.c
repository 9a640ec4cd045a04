// server/queue.c: one producer's queue of examples as ranges of shared blocks in seq order.
// Examples carry their tag (h_tag) in every float32 field, so order and integrity are visible
// after each move.
#include <string.h>

#include <criterion/criterion.h>

#include "helpers.h"
#include "queue.h"
#include "stoker/error.h"

#define SESSION 7

static stoker_schema schema;
static queue q;

static void
setup(void)
{
    h_setup();
    h_schema(&schema);
    queue_init(&q, &schema);
}

static void
teardown(void)
{
    queue_fini(&q);
    h_teardown();
}

TestSuite(queue, .init = setup, .fini = teardown, .timeout = 10);

// Appends examples first_seq .. first_seq + count - 1, skipping the first skip of them.
static void
append(uint64_t first_seq, uint32_t count, uint32_t skip)
{
    stoker_request *req = h_push(SESSION, &schema, first_seq, count);
    char err[256];
    cr_assert_eq(
        stoker_wire_bind_chunk(&req->chunk, req->n_data, req->data_len, &schema, err, sizeof(err)),
        STOKER_OK, "%s", err);
    cr_assert_eq(queue_append_request(&q, req, skip), STOKER_OK);
}

// Takes up to max examples as a range and copies them to the end of dst (as a pull reply does);
// checks the tags match the seqs reported. The range is kept in *held when held is not NULL,
// else released.
static uint32_t
take_held(stoker_chunk *dst, uint32_t max, uint64_t *first_seq, queue_range *held)
{
    queue_range r;
    uint32_t before = dst->count;
    uint32_t n = queue_take(&q, max, &r);
    if (n == 0)
        return 0;
    cr_assert_eq(r.count, n);
    cr_assert_leq(n, dst->capacity - dst->count);
    *first_seq = r.first_seq;
    for (uint32_t f = 0; f < schema.n_fields; f++) {
        size_t fb = stoker_field_bytes(&schema.fields[f]);
        memcpy(dst->data[f] + (size_t)before * fb, queue_range_field(&r, &schema, f), n * fb);
    }
    dst->count += n;
    for (uint32_t i = 0; i < n; i++) {
        cr_assert_eq(h_chunk_tag(dst, before + i), h_tag(SESSION, *first_seq + i),
                     "example %u carries the wrong data", before + i);
        float out;
        memcpy(&out, stoker_chunk_at(dst, 1, before + i), sizeof(out));
        cr_assert_eq(out, h_tag(SESSION, *first_seq + i), "field 1 of example %u is wrong",
                     before + i);
    }
    if (held != NULL)
        *held = r;
    else
        queue_range_release(&r);
    return n;
}

static uint32_t
take(stoker_chunk *dst, uint32_t max, uint64_t *first_seq)
{
    return take_held(dst, max, first_seq, NULL);
}

Test(queue, append_counts_examples_and_bytes)
{
    size_t eb = stoker_schema_example_bytes(&schema);
    append(0, 3, 0);
    append(3, 5, 0);
    cr_assert_eq(q.examples, 8);
    cr_assert_eq(q.bytes, 8 * eb);
}

Test(queue, append_with_skip_keeps_only_the_new_examples)
{
    append(0, 4, 0);
    append(2, 4, 2); // seqs 2, 3 already held: only 4, 5 are new
    cr_assert_eq(q.examples, 6);
    stoker_chunk dst;
    cr_assert_eq(stoker_chunk_init(&dst, &schema, 16), STOKER_OK);
    uint64_t first;
    cr_assert_eq(take(&dst, 16, &first), 4);
    cr_assert_eq(first, 0);
    cr_assert_eq(take(&dst, 16, &first), 2);
    cr_assert_eq(first, 4);
    cr_assert_eq(q.examples, 0);
    stoker_chunk_fini(&dst);
}

Test(queue, take_moves_one_run_at_a_time_across_segments)
{
    size_t eb = stoker_schema_example_bytes(&schema);
    append(0, 3, 0);
    append(3, 3, 0);
    stoker_chunk dst;
    cr_assert_eq(stoker_chunk_init(&dst, &schema, 16), STOKER_OK);
    uint64_t first;
    // Part of the first segment, then its rest (a take never spans two segments), then the next.
    cr_assert_eq(take(&dst, 2, &first), 2);
    cr_assert_eq(first, 0);
    cr_assert_eq(q.examples, 4);
    cr_assert_eq(q.bytes, 4 * eb);
    cr_assert_eq(take(&dst, 5, &first), 1);
    cr_assert_eq(first, 2);
    cr_assert_eq(take(&dst, 5, &first), 3);
    cr_assert_eq(first, 3);
    cr_assert_eq(dst.count, 6);
    for (uint32_t i = 0; i < 6; i++)
        cr_assert_eq(h_chunk_tag(&dst, i), h_tag(SESSION, i));
    cr_assert_eq(q.examples, 0);
    cr_assert_eq(q.bytes, 0);
    cr_assert_null(q.head);
    cr_assert_null(q.tail);
    stoker_chunk_fini(&dst);
}

Test(queue, take_from_an_empty_queue_moves_nothing)
{
    queue_range r = {0};
    cr_assert_eq(queue_take(&q, 4, &r), 0);
    cr_assert_null(r.block);
}

Test(queue, take_stops_at_max)
{
    append(0, 6, 0);
    stoker_chunk dst;
    cr_assert_eq(stoker_chunk_init(&dst, &schema, 8), STOKER_OK);
    uint64_t first;
    cr_assert_eq(take(&dst, 4, &first), 4);
    cr_assert_eq(q.examples, 2);
    cr_assert_eq(take(&dst, 4, &first), 2);
    cr_assert_eq(first, 4);
    stoker_chunk_fini(&dst);
}

Test(queue, a_taken_range_outlives_the_queue_until_released)
{
    append(0, 4, 0);
    stoker_chunk dst;
    cr_assert_eq(stoker_chunk_init(&dst, &schema, 4), STOKER_OK);
    uint64_t first;
    queue_range held;
    cr_assert_eq(take_held(&dst, 2, &first, &held), 2);
    queue_fini(&q); // the queue lets go of the rest of the block ...
    // ... but the range still reads its examples (ASan would catch a use after free).
    float tag;
    memcpy(&tag, queue_range_field(&held, &schema, 1), sizeof(tag));
    cr_assert_eq(tag, h_tag(SESSION, 0));
    queue_range_release(&held);
    queue_init(&q, &schema);
    stoker_chunk_fini(&dst);
}

Test(queue, put_back_returns_examples_to_the_head_in_order)
{
    size_t eb = stoker_schema_example_bytes(&schema);
    append(0, 8, 0);
    stoker_chunk lease;
    cr_assert_eq(stoker_chunk_init(&lease, &schema, 8), STOKER_OK);
    uint64_t a, b;
    queue_range ra, rb;
    cr_assert_eq(take_held(&lease, 3, &a, &ra), 3); // seqs 0..2
    cr_assert_eq(take_held(&lease, 2, &b, &rb), 2); // seqs 3..4
    cr_assert_eq(q.examples, 3);
    // Returned last run first, as the broker does, so the queue is back in seq order.
    cr_assert_eq(queue_put_back(&q, &rb), STOKER_OK);
    cr_assert_eq(queue_put_back(&q, &ra), STOKER_OK);
    cr_assert_eq(q.examples, 8);
    cr_assert_eq(q.bytes, 8 * eb);
    stoker_chunk_fini(&lease);

    stoker_chunk dst;
    cr_assert_eq(stoker_chunk_init(&dst, &schema, 8), STOKER_OK);
    uint64_t expect = 0, first;
    uint32_t n;
    while ((n = take(&dst, 8, &first)) > 0) {
        cr_assert_eq(first, expect, "run starts at seq %llu, expected %llu",
                     (unsigned long long)first, (unsigned long long)expect);
        expect += n;
    }
    cr_assert_eq(expect, 8);
    cr_assert_eq(q.examples, 0);
    stoker_chunk_fini(&dst);
}

Test(queue, put_back_into_an_empty_queue_sets_head_and_tail)
{
    append(0, 2, 0);
    stoker_chunk lease;
    cr_assert_eq(stoker_chunk_init(&lease, &schema, 2), STOKER_OK);
    uint64_t first;
    queue_range r;
    cr_assert_eq(take_held(&lease, 2, &first, &r), 2);
    cr_assert_null(q.head);
    cr_assert_eq(queue_put_back(&q, &r), STOKER_OK);
    cr_assert_not_null(q.head);
    cr_assert_eq(q.head, q.tail);
    append(2, 1, 0); // appends after the returned range
    stoker_chunk_fini(&lease);
    stoker_chunk dst;
    cr_assert_eq(stoker_chunk_init(&dst, &schema, 4), STOKER_OK);
    cr_assert_eq(take(&dst, 4, &first), 2);
    cr_assert_eq(first, 0);
    cr_assert_eq(take(&dst, 4, &first), 1);
    cr_assert_eq(first, 2);
    stoker_chunk_fini(&dst);
}

// queue_take_seq goes on from where the last take left off (a plan's picks in seq order), and
// still finds a seq before that place: earlier in the list, or in a range put back at the head.
Test(queue, take_seq_from_the_middle_in_any_order_finds_every_example_once)
{
    append(0, 10, 0);
    append(10, 10, 0);
    append(20, 10, 0);
    uint64_t order[] = {3, 5, 7, 12, 25, 26, 1, 8, 29, 0, 11};
    queue_range taken[sizeof order / sizeof *order];
    size_t n = sizeof order / sizeof *order;
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(queue_take_seq(&q, order[i], 1, &taken[i]), 1, "seq %llu",
                     (unsigned long long)order[i]);
        cr_assert_eq(taken[i].first_seq, order[i]);
    }
    cr_assert_eq(q.examples, 30 - n);
    // A taken range put back at the head is found again, though the hint is past it.
    cr_assert_eq(queue_put_back(&q, &taken[4]), STOKER_OK); // seq 25
    cr_assert_eq(queue_take_seq(&q, 28, 1, &taken[4]), 1);
    queue_range again;
    cr_assert_eq(queue_take_seq(&q, 25, 1, &again), 1);
    cr_assert_eq(again.first_seq, 25);
    queue_range_release(&again);
    cr_assert_eq(queue_take_seq(&q, 3, 1, &again), 0, "seq 3 was taken");
    // What is left comes once each, in seq order, from the head.
    uint64_t want[] = {2, 4, 6, 9, 10, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 27};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        cr_assert_eq(queue_take(&q, 1, &again), 1);
        cr_assert_eq(again.first_seq, want[i], "at %zu: seq %llu, expected %llu", i,
                     (unsigned long long)again.first_seq, (unsigned long long)want[i]);
        queue_range_release(&again);
    }
    cr_assert_eq(q.examples, 0);
    for (size_t i = 0; i < n; i++)
        queue_range_release(&taken[i]);
}

// Takes by seq in a seeded random order, runs of 1 to 3, with put-backs among them, against a
// model of which seqs are queued: every take finds exactly what the model says (searching
// forward and back from where the last one left off), the queue's cursor then walks exactly the
// model's seqs (the list's links hold both ways), and every take and put-back changes the
// queue's stamp while appends do not (budget.c's plans ahead rely on it).
Test(queue, random_takes_and_put_backs_match_a_model)
{
    enum { N = 400 };
    for (uint64_t s = 0; s < N; s += 20)
        append(s, 20, 0);
    uint8_t queued[N];
    memset(queued, 1, sizeof queued);
    queue_range held[N];
    uint32_t n_held = 0;
    uint64_t rng = 12345, changes = q.changes;
    for (int step = 0; step < 3000; step++) {
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        uint64_t seq = (rng >> 33) % N;
        uint32_t want = (uint32_t)((rng >> 20) % 3) + 1;
        if ((rng >> 40) % 7 == 0 && n_held > 0) {
            queue_range r = held[--n_held];
            cr_assert_eq(queue_put_back(&q, &r), STOKER_OK);
            for (uint32_t i = 0; i < r.count; i++)
                queued[r.first_seq + i] = 1;
            cr_assert_neq(q.changes, changes, "a put-back changes the stamp");
            changes = q.changes;
            continue;
        }
        queue_range r;
        uint32_t got = queue_take_seq(&q, seq, want, &r);
        if (!queued[seq]) {
            cr_assert_eq(got, 0, "step %d: seq %llu is not queued", step, (unsigned long long)seq);
            continue;
        }
        cr_assert_geq(got, 1, "step %d: seq %llu is queued", step, (unsigned long long)seq);
        cr_assert_eq(r.first_seq, seq);
        for (uint32_t i = 0; i < got; i++) {
            cr_assert(queued[seq + i], "step %d: seq %llu taken twice", step,
                      (unsigned long long)(seq + i));
            queued[seq + i] = 0;
        }
        cr_assert_neq(q.changes, changes, "a take changes the stamp");
        changes = q.changes;
        if (n_held < N)
            held[n_held++] = r;
        else
            queue_range_release(&r);
    }
    append(N, 5, 0);
    cr_assert_eq(q.changes, changes, "an append leaves the stamp");
    uint64_t model = 5;
    for (uint32_t i = 0; i < N; i++)
        model += queued[i];
    cr_assert_eq(q.examples, model);
    queue_cursor c;
    queue_cursor_init(&q, &c);
    uint64_t seq, len, walked = 0;
    uint8_t seen[N + 5] = {0};
    while (queue_cursor_next(&c, -1, &seq, &len)) {
        cr_assert_lt(seq, N + 5);
        cr_assert(seq >= N || queued[seq], "seq %llu walked but not queued",
                  (unsigned long long)seq);
        cr_assert(!seen[seq], "seq %llu walked twice", (unsigned long long)seq);
        seen[seq] = 1;
        walked++;
    }
    cr_assert_eq(walked, model);
    // Taken back to front, each found by searching back from the last take.
    for (uint64_t s = N + 5; s-- > 0;) {
        queue_range r;
        if (seen[s]) {
            cr_assert_eq(queue_take_seq(&q, s, 1, &r), 1, "seq %llu", (unsigned long long)s);
            queue_range_release(&r);
        }
    }
    cr_assert_eq(q.examples, 0);
    cr_assert_eq(queue_tail(&q), NULL);
    for (uint32_t i = 0; i < n_held; i++)
        queue_range_release(&held[i]);
}
