// Leases, the broker's books of what is handed out: a lease takes examples from the producers'
// queues (round-robin, or as a batch made by tokens plans them), an acknowledgement frees them
// once, and a lease given back returns its examples to the head of their queues (redelivered, or
// returned unused). It decides neither when a batch goes out (pull.c) nor when a trainer is
// dropped (drop.c). Floor 3: it uses the core and floors 1-2 (arena, commit, budget, epoch,
// queues, trained), nothing above.
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "ahead.h"
#include "arena.h"
#include "budget.h"
#include "internal.h"
#include "jobs.h"
#include "mix.h"
#include "stoker/error.h"
#include "stoker/log.h"

// Frees l and its hold on its mixture.
static void
lease_free(lease *l)
{
    mix_release(l->mix);
    free_lease(l);
}

// --- leases and acks ----------------------------------------------------------------------------

// Applies acknowledgements from t. Returns how many were refused.
uint32_t
lease_apply_acks(broker *b, trainer *t, uint32_t n, const uint64_t *acks, uint64_t now_ms)
{
    uint32_t refused = 0;
    for (uint32_t i = 0; i < n; i++) {
        lease **pp = &t->leases;
        while (*pp != NULL && (*pp)->id != acks[i])
            pp = &(*pp)->next;
        lease *l = *pp;
        if (l == NULL) {
            refused++;
            continue;
        }
        *pp = l->next;
        for (uint32_t r = 0; r < l->n_parts; r++) {
            producer *p = find_producer_id(b, l->parts[r].producer);
            if (p == NULL) {
                epochs_acked(b, &l->parts[r].range, now_ms);
                epochs_job_acked(b, &l->parts[r].range, now_ms);
                continue;
            }
            p->acknowledged += l->parts[r].range.count;
            p->in_flight -= l->parts[r].range.count;
            trained_add(&p->trained, l->parts[r].range.first_seq, l->parts[r].range.count);
            jobs_acked(b, p, &l->parts[r].range, now_ms); // a dataset's items: by every job
        }
        b->c.acknowledged += l->count;
        b->c.in_flight -= l->count;
        if (b->arena != NULL)
            broker_arena_lease_done(b->arena, l->id);
        commit_release(b, l);
        lease_free(l);
    }
    if (refused > 0)
        stoker_warn("ack-refused: trainer %u '%s': %u unknown or already acknowledged leases",
                    t->id, t->name, refused);
    return refused;
}

// Puts the examples of lease l back at the head of their producers' queues and frees l,
// counted as redelivered (after a loss) or, when unused, as returned_unused (never handed to
// the trainer's caller). Returns how many went back.
uint64_t
lease_return(broker *b, lease *l, int unused)
{
    uint64_t total = 0;
    // Parts go back last-first, so each queue ends up in its original order.
    for (uint32_t r = l->n_parts; r-- > 0;) {
        lease_part *part = &l->parts[r];
        uint32_t n = part->range.count;
        uint64_t bytes = queue_range_bytes(&part->range);
        producer *p = find_producer_id(b, part->producer);
        if (p == NULL || queue_put_back(&p->q, &part->range) != STOKER_OK) {
            // Never expected: producers with examples in flight are not evicted, and a put back
            // failing means we are out of memory. Say so and keep the books exact.
            stoker_error("lease_redeliver: lost %u examples of producer %u (out of memory)", n,
                         part->producer);
            b->c.in_flight -= n;
            b->c.produced -= n;
            continue;
        }
        part->range.block = NULL; // the queue holds the reference now
        p->in_flight -= n;
        b->c.in_flight -= n;
        b->c.queued += n;
        if (unused) {
            p->returned_unused += n;
            b->c.returned_unused += n;
        } else {
            p->redelivered += n;
            b->c.redelivered += n;
        }
        b->queued_bytes += bytes;
        total += n;
    }
    if (l->mix != NULL)
        for (uint32_t r = 0; r < l->n_parts; r++)
            if (l->parts[r].source > 0)
                mix_gave_back(l->mix, l->parts[r].source - 1,
                              l->mix->tokens ? (uint32_t)l->parts[r].tokens
                                             : l->parts[r].range.count);
    if (b->arena != NULL)
        broker_arena_lease_done(b->arena, l->id);
    commit_release(b, l);
    lease_free(l);
    return total;
}

// Puts every lease of t back (newest first, so older examples end up nearer the head).
void
lease_redeliver(broker *b, trainer *t)
{
    uint64_t total = 0;
    lease *l = t->leases;
    while (l != NULL) {
        lease *next = l->next;
        total += lease_return(b, l, 0);
        l = next;
    }
    t->leases = NULL;
    if (total > 0)
        stoker_info("redelivered: %llu examples of trainer %u '%s' back in their queues",
                    (unsigned long long)total, t->id, t->name);
}

void
lease_give_back(broker *b, trainer *t, uint32_t n_held, const uint64_t *held)
{
    uint64_t redelivered = 0, unused = 0;
    lease *l = t->leases;
    while (l != NULL) {
        lease *next = l->next;
        int was_held = 0;
        for (uint32_t i = 0; i < n_held && !was_held; i++)
            was_held = held[i] == l->id;
        if (was_held)
            redelivered += lease_return(b, l, 0);
        else
            unused += lease_return(b, l, 1);
        l = next;
    }
    t->leases = NULL;
    if (redelivered > 0)
        stoker_info("redelivered: %llu examples trainer %u '%s' held unacknowledged when it left "
                    "back in their queues",
                    (unsigned long long)redelivered, t->id, t->name);
    if (unused > 0)
        stoker_info("returned-unused: %llu examples trainer %u '%s' got ahead and never used back "
                    "in their queues",
                    (unsigned long long)unused, t->id, t->name);
}

// The examples at the head of p's queue that are trained already (a trainer said so when it said
// hello to this broker, after the broker before it died and the producer pushed them again):
// dropped, counted acknowledged, so that no other trainer gets them. Returns 0 when
// it dropped some, else how many of the next want examples may be taken (up to the next trained
// one). Not for datasets (their items have books of their own): want then.
static uint32_t
skip_trained(broker *b, producer *p, uint32_t want)
{
    if (trained_none_from(b, p, queue_head_seq(&p->q)))
        return want;
    uint64_t from = queue_head_seq(&p->q), dropped = 0, dropped_bytes = 0;
    // The queue is not one run of seqs (a producer that comes back skips the seqs it was told
    // were trained, seq-jump): drop what the head holds of the trained run at the head, then look
    // again, never more than the run (counting the run in seqs dropped untrained
    // examples after a hole, and the producer then waited for them for ever).
    while (p->q.examples > 0) {
        uint64_t seq = queue_head_seq(&p->q), next = UINT64_MAX;
        if (!trained_has(&p->trained, seq, &next)) {
            if (dropped > 0)
                break;
            return next - seq < want ? (uint32_t)(next - seq) : want;
        }
        uint64_t run = trained_run_end(&p->trained, seq) - seq;
        queue_range r;
        uint32_t got = queue_take(&p->q, run < UINT32_MAX ? (uint32_t)run : UINT32_MAX, &r);
        if (got == 0)
            break;
        dropped_bytes += queue_range_bytes(&r);
        queue_range_release(&r);
        dropped += got;
    }
    p->acknowledged += dropped;
    b->c.queued -= dropped;
    b->c.acknowledged += dropped;
    b->queued_bytes -= dropped_bytes;
    stoker_info("trained-dropped: %llu examples of producer %u '%s' from seq %llu pushed again "
                "were trained before (a trainer said so): dropped, not delivered again",
                (unsigned long long)dropped, p->id, p->name, (unsigned long long)from);
    return 0;
}

// A new empty lease with room for cap parts; NULL when out of memory.
static lease *
new_lease(uint32_t cap)
{
    lease *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return NULL;
    l->cap_parts = cap;
    l->parts = malloc(l->cap_parts * sizeof(*l->parts));
    if (l->parts == NULL) {
        free(l);
        return NULL;
    }
    return l;
}

// Takes up to n examples of p's queue from seq on (anywhere in it; seq < 0 for its head) into
// one new part of l. Returns how many (0: none, or out of memory).
static uint32_t
take_part(lease *l, producer *p, int64_t seq, uint32_t n)
{
    if (l->n_parts == l->cap_parts) {
        lease_part *parts = realloc(l->parts, 2 * l->cap_parts * sizeof(*parts));
        if (parts == NULL)
            return 0;
        l->parts = parts;
        l->cap_parts *= 2;
    }
    lease_part *part = &l->parts[l->n_parts];
    uint32_t got = seq < 0 ? queue_take(&p->q, n, &part->range)
                           : queue_take_seq(&p->q, (uint64_t)seq, n, &part->range);
    if (got == 0)
        return 0;
    part->producer = p->id;
    part->session = p->session;
    l->n_parts++;
    l->count += got;
    l->bytes += queue_range_bytes(&part->range);
    p->delivered += got;
    p->in_flight += got;
    return got;
}

// The lease l made for t: counted out of the queues, numbered, first in t's leases.
static lease *
lease_made(broker *b, trainer *t, lease *l)
{
    if (l->count == 0) {
        lease_free(l);
        return NULL;
    }
    b->c.queued -= l->count;
    b->queued_bytes -= l->bytes;
    b->c.in_flight += l->count;
    b->c.delivered += l->count;
    l->id = b->next_lease_id++;
    l->next = t->leases;
    t->leases = l;
    commit_hold(b, t, l);
    return l;
}

// Takes the picks of plan into l, in its order, each run of neighbours (one producer's
// consecutive seqs of one source) one part, marked with its source; with m, each source's
// tokens booked in m (a mixture whose books count tokens). Returns the picks taken (fewer: out
// of memory, deliver what we have).
static uint32_t
take_picks(broker *b, lease *l, const budget_plan *plan, mix *m)
{
    int field = m != NULL ? stoker_schema_first_variable(&b->schema) : -1;
    uint32_t i = 0;
    while (i < plan->n) {
        const budget_pick *first = &plan->picks[i];
        uint32_t j = i + 1;
        while (j < plan->n && plan->picks[j].producer == first->producer &&
               plan->picks[j].source == first->source &&
               plan->picks[j].seq == plan->picks[j - 1].seq + 1)
            j++;
        producer *p = b->producers[first->producer];
        uint64_t seq = first->seq;
        uint32_t left = j - i, got = 1;
        while (left > 0 && (got = take_part(l, p, (int64_t)seq, left)) > 0) {
            lease_part *part = &l->parts[l->n_parts - 1];
            part->source = first->source;
            if (m != NULL && first->source > 0) {
                part->tokens = queue_range_tokens(&part->range, field);
                mix_took(m, first->source - 1, (uint32_t)part->tokens);
            }
            seq += got;
            left -= got;
        }
        if (got == 0)
            break;
        i = j;
    }
    return i;
}

// Takes plan into l (take_picks) and makes it t's lease: a batch that came whole is full as
// the plan says, and its tokens and padding count for t; the round-robin goes on past the
// plan's first producer.
static lease *
take_plan(broker *b, trainer *t, lease *l, const budget_plan *plan, mix *m)
{
    if (take_picks(b, l, plan, m) == plan->n) {
        l->full = plan->full;
        t->tokens += plan->tokens;
        t->padding += plan->padding;
    }
    if (plan->n > 0)
        b->rr = (plan->picks[0].producer + 1) % b->n_producers;
    return lease_made(b, t, l);
}

// A lease of a batch made by tokens (budget.c plans it): the plan's examples, in its
// order, each run of neighbours one part.
static lease *
take_planned(broker *b, trainer *t, uint32_t max, uint32_t cap)
{
    for (uint32_t i = 0; i < b->n_producers; i++) {
        producer *p = b->producers[i];
        while (p->q.examples > 0 && skip_trained(b, p, 1) == 0)
            ; // a head trained already: dropped, look again
    }
    budget_plan plan;
    if (budget_plan_make(b, t, max, cap, &plan) != 0)
        return NULL;
    lease *l = new_lease(8);
    lease *made = l != NULL ? take_plan(b, t, l, &plan, NULL) : NULL;
    budget_plan_free(&plan);
    if (l != NULL)
        ahead_taken(b);
    return made;
}

// Takes up to n examples into l, round-robin over the queues of the producers of pool (NULL:
// every producer), each part marked as of source (0: none). Returns 0, or -1 out of memory
// (l then holds what it got).
static int
take_fair(broker *b, lease *l, uint32_t n, const char *pool, uint32_t source)
{
    uint32_t goal = l->count + n;
    // Fair mixing: each pass gives every non-empty queue an equal share of what is still
    // needed, starting after the producer that was served last.
    while (l->count < goal) {
        uint32_t nonempty = 0;
        for (uint32_t i = 0; i < b->n_producers; i++)
            nonempty += b->producers[i]->q.examples > 0 &&
                        (pool == NULL || strcmp(b->producers[i]->pool, pool) == 0);
        if (nonempty == 0)
            break;
        uint32_t need = goal - l->count;
        uint32_t share = (need + nonempty - 1) / nonempty;
        uint32_t start = b->rr;
        for (uint32_t k = 0; k < b->n_producers && l->count < goal; k++) {
            uint32_t i = (start + k) % b->n_producers;
            producer *p = b->producers[i];
            if (pool != NULL && strcmp(p->pool, pool) != 0)
                continue;
            uint32_t want = share;
            if (want > goal - l->count)
                want = goal - l->count;
            while (want > 0 && p->q.examples > 0) {
                uint32_t runs_for = skip_trained(b, p, want);
                if (runs_for == 0)
                    continue; // the head was trained already: dropped, look again
                uint32_t got = take_part(l, p, -1, runs_for);
                if (got == 0)
                    return -1;
                l->parts[l->n_parts - 1].source = source;
                want -= got;
                b->rr = (i + 1) % b->n_producers;
            }
        }
    }
    return 0;
}

// Builds a lease of up to max examples, round-robin over the producers' queues (a batch made by
// tokens: take_planned, max rows with pack=), and never more than cap examples. Returns NULL
// when nothing is queued (or out of memory).
lease *
lease_take(broker *b, trainer *t, uint32_t max, uint32_t cap)
{
    if (stoker_batching_active(&t->batching))
        return take_planned(b, t, max, cap);
    if (max > cap)
        max = cap;
    uint64_t avail = b->c.queued;
    uint32_t n = (uint32_t)(avail < max ? avail : max);
    if (n == 0)
        return NULL;
    lease *l = new_lease(8);
    if (l == NULL)
        return NULL;
    take_fair(b, l, n, NULL, 0); // out of memory: deliver what we have
    return lease_made(b, t, l);
}

// A new empty lease of mixture m's batch (holding m), or NULL when out of memory.
static lease *
new_mix_lease(mix *m)
{
    lease *l = new_lease(8);
    if (l != NULL) {
        l->mix = m;
        mix_hold(m);
    }
    return l;
}

lease *
lease_take_mix_plan(broker *b, trainer *t, mix *m, const budget_plan *plan)
{
    lease *l = new_mix_lease(m);
    return l != NULL ? take_plan(b, t, l, plan, m) : NULL;
}

lease *
lease_take_mix(broker *b, trainer *t, mix *m, const uint32_t *counts)
{
    lease *l = new_mix_lease(m);
    if (l == NULL)
        return NULL;
    for (uint32_t s = 0; s < m->spec.n; s++) {
        uint32_t before = l->count;
        int rv = counts[s] > 0 ? take_fair(b, l, counts[s], m->spec.names[s], s + 1) : 0;
        mix_took(m, s, l->count - before);
        if (rv != 0)
            break; // out of memory: deliver what we have
    }
    return lease_made(b, t, l);
}

// Describes lease l for a reply: its chunk's parts, runs and (a dataset's) items, malloc'd for
// the caller to free after the reply is sent. STOKER_OK or STOKER_NOMEM (nothing to free).
int
lease_describe(const broker *b, const lease *l, stoker_reply *rep)
{
    stoker_chunk_part *parts = calloc(l->n_parts, sizeof(*parts));
    stoker_run *runs = calloc(l->n_parts, sizeof(*runs));
    uint64_t *items = b->epochs != NULL ? malloc((size_t)l->count * sizeof(*items)) : NULL;
    if (parts == NULL || runs == NULL || (b->epochs != NULL && items == NULL)) {
        free(parts);
        free(runs);
        free(items);
        return STOKER_NOMEM;
    }
    for (uint32_t i = 0, at = 0; i < l->n_parts; i++) {
        const lease_part *part = &l->parts[i];
        const uint64_t *part_items = queue_range_items(&part->range);
        for (uint32_t j = 0; items != NULL && j < part->range.count; j++)
            items[at++] = part_items != NULL ? part_items[j] : UINT64_MAX;
        for (uint32_t f = 0; f < b->schema.n_fields; f++) {
            parts[i].data[f] = queue_range_field(&part->range, &b->schema, f);
            parts[i].offsets[f] = queue_range_offsets(&part->range, f);
        }
        parts[i].count = part->range.count;
        runs[i] = (stoker_run){.producer = part->producer,
                               .session = part->session,
                               .first_seq = part->range.first_seq,
                               .count = part->range.count,
                               .source = part->source};
    }
    rep->lease = l->id;
    rep->chunk.schema = b->schema;
    rep->chunk.count = l->count;
    rep->parts = parts;
    rep->n_parts = l->n_parts;
    rep->n_runs = l->n_parts;
    rep->runs = runs;
    rep->n_items = items != NULL ? l->count : 0;
    rep->items = items;
    return STOKER_OK;
}
