// The broker's trainers' side: pulls, parked until a batch is ready, which move examples from the
// producers' queues (round-robin) into leases; acknowledgements that free them; the return of a
// lease's examples to their queues; and settle(), which serves parked requests after any change.
// It does not decide when a trainer is dropped (broker_loss.c).
// It may use the core and the rooms below the dispatcher (broker_internal.h): arena, commit,
// epoch, group, push, queues, trained.
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "broker_arena.h"
#include "broker_budget.h"
#include "broker_group.h"
#include "broker_internal.h"
#include "stoker/error.h"
#include "stoker/log.h"

// --- leases and acks ----------------------------------------------------------------------------

// Applies acknowledgements from t. Returns how many were refused.
uint32_t
apply_acks(broker *b, trainer *t, uint32_t n, const uint64_t *acks, uint64_t now_ms)
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
            epochs_acked(b, &l->parts[r].range, now_ms);
            if (p != NULL) {
                p->acknowledged += l->parts[r].range.count;
                p->in_flight -= l->parts[r].range.count;
                trained_add(&p->trained, l->parts[r].range.first_seq, l->parts[r].range.count);
            }
        }
        b->c.acknowledged += l->count;
        b->c.in_flight -= l->count;
        if (b->arena != NULL)
            broker_arena_lease_done(b->arena, l->id);
        commit_release(b, l);
        free_lease(l);
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
return_lease(broker *b, lease *l, int unused)
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
            stoker_error("redeliver: lost %u examples of producer %u (out of memory)", n,
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
    if (b->arena != NULL)
        broker_arena_lease_done(b->arena, l->id);
    commit_release(b, l);
    free_lease(l);
    return total;
}

// Puts every lease of t back (newest first, so older examples end up nearer the head).
void
redeliver(broker *b, trainer *t)
{
    uint64_t total = 0;
    lease *l = t->leases;
    while (l != NULL) {
        lease *next = l->next;
        total += return_lease(b, l, 0);
        l = next;
    }
    t->leases = NULL;
    if (total > 0)
        stoker_info("redelivered: %llu examples of trainer %u '%s' back in their queues",
                    (unsigned long long)total, t->id, t->name);
}

void
give_back(broker *b, trainer *t, uint32_t n_held, const uint64_t *held)
{
    uint64_t redelivered = 0, unused = 0;
    lease *l = t->leases;
    while (l != NULL) {
        lease *next = l->next;
        int was_held = 0;
        for (uint32_t i = 0; i < n_held && !was_held; i++)
            was_held = held[i] == l->id;
        if (was_held)
            redelivered += return_lease(b, l, 0);
        else
            unused += return_lease(b, l, 1);
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
// dropped, counted acknowledged, so that no other trainer gets them (issue 26). Returns 0 when
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
    // again, never more than the run (issue 26: counting the run in seqs dropped untrained
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
        free_lease(l);
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

// A lease of a batch made by tokens (broker_budget.c plans it): the plan's examples, in its
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
    if (l == NULL) {
        budget_plan_free(&plan);
        return NULL;
    }
    uint32_t i = 0;
    while (i < plan.n) {
        uint32_t j = i + 1;
        while (j < plan.n && plan.picks[j].producer == plan.picks[i].producer &&
               plan.picks[j].seq == plan.picks[j - 1].seq + 1)
            j++;
        producer *p = b->producers[plan.picks[i].producer];
        uint64_t seq = plan.picks[i].seq;
        uint32_t left = j - i, got = 1;
        while (left > 0 && (got = take_part(l, p, (int64_t)seq, left)) > 0) {
            seq += got;
            left -= got;
        }
        if (got == 0)
            break; // out of memory: deliver what we have
        i = j;
    }
    if (i == plan.n) {
        l->full = plan.full;
        t->tokens += plan.tokens;
        t->padding += plan.padding;
    }
    b->rr = (plan.picks[0].producer + 1) % b->n_producers;
    budget_plan_free(&plan);
    return lease_made(b, t, l);
}

// Builds a lease of up to max examples, round-robin over the producers' queues (a batch made by
// tokens: take_planned, max rows with pack=), and never more than cap examples. Returns NULL
// when nothing is queued (or out of memory).
lease *
take_lease(broker *b, trainer *t, uint32_t max, uint32_t cap)
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
    // Fair mixing: each pass gives every non-empty queue an equal share of what is still
    // needed, starting after the producer that was served last.
    while (l->count < n) {
        uint32_t nonempty = 0;
        for (uint32_t i = 0; i < b->n_producers; i++)
            nonempty += b->producers[i]->q.examples > 0;
        if (nonempty == 0)
            break;
        uint32_t need = n - l->count;
        uint32_t share = (need + nonempty - 1) / nonempty;
        uint32_t start = b->rr;
        for (uint32_t k = 0; k < b->n_producers && l->count < n; k++) {
            uint32_t i = (start + k) % b->n_producers;
            producer *p = b->producers[i];
            uint32_t want = share;
            if (want > n - l->count)
                want = n - l->count;
            while (want > 0 && p->q.examples > 0) {
                uint32_t runs_for = skip_trained(b, p, want);
                if (runs_for == 0)
                    continue; // the head was trained already: dropped, look again
                uint32_t got = take_part(l, p, -1, runs_for);
                if (got == 0)
                    goto done; // out of memory: deliver what we have
                want -= got;
                b->rr = (i + 1) % b->n_producers;
            }
        }
    }
done:
    return lease_made(b, t, l);
}

// The events of indices from..upto still in the log, at most max of them, into buf.
static uint32_t
copy_events(const broker *b, uint64_t from, uint64_t upto, stoker_event *buf, uint32_t max)
{
    if (b->n_events >= EVENT_LOG && from <= b->n_events - EVENT_LOG)
        from = b->n_events - EVENT_LOG + 1; // older ones were overwritten
    uint32_t n = 0;
    for (uint64_t i = from; i <= upto && n < max; i++)
        buf[n++] = b->events[(i - 1) % EVENT_LOG];
    return n;
}

// Events t has not been sent yet, into buf (at most EVENTS_PER_REPLY), now counted as sent: the
// reply being made carries them.
// A rank hears only those before the step it was last sent was formed (group_events_upto).
uint32_t
take_events(const broker *b, trainer *t, stoker_event *buf)
{
    uint32_t n =
        copy_events(b, t->event_cursor + 1, group_events_upto(b, t), buf, EVENTS_PER_REPLY);
    if (n > 0)
        t->event_cursor = buf[n - 1].index;
    return n;
}

// Why the supply ended, or STOKER_OK while producers may still send: also for
// --producer-timeout after a producer came back from a broker that died (returning_until_ms),
// so that one finishing first does not end the supply for the others still reconnecting.
static int
supply_state(const broker *b, uint64_t now_ms, char *why, size_t why_len)
{
    if (b->n_producers == 0 || b->c.queued > 0 || now_ms < b->returning_until_ms)
        return STOKER_OK;
    uint32_t lost = 0, finished = 0;
    for (uint32_t i = 0; i < b->n_producers; i++) {
        const producer *p = b->producers[i];
        if (p->status == STOKER_PRODUCER_ALIVE)
            return STOKER_OK;
        lost += p->status == STOKER_PRODUCER_LOST;
        finished += p->status == STOKER_PRODUCER_FINISHED;
    }
    snprintf(why, why_len, "no producer left (%u lost, %u finished) and nothing queued", lost,
             finished);
    return lost > 0 ? STOKER_NO_PRODUCERS : STOKER_END_OF_DATA;
}

// A batch's copy into its arena region, left for after the broker's lock (broker_outbox_fill):
// it holds a reference to each block the examples lie in, so an acknowledgement or a lost
// producer meanwhile cannot free them.
typedef struct lease_fill {
    broker_fill fill; // first: the outbox runs it (lease_fill_run)
    broker_arena *arena;
    uint64_t lease, offset;
    stoker_schema schema;
    uint32_t count, n_parts;
    stoker_chunk_part *parts;
    queue_range *held;
} lease_fill;

// Copies fill's examples into their arena region (unless copy is 0: the reply is not sent), lets
// the region go as usual and frees fill. Runs outside the broker's lock.
static void
lease_fill_run(broker_fill *f, int copy)
{
    lease_fill *fill = (lease_fill *)f;
    broker_arena_fill(fill->arena, fill->lease, fill->offset, copy ? fill->parts : NULL,
                      fill->n_parts, &fill->schema, fill->count);
    for (uint32_t i = 0; i < fill->n_parts; i++)
        queue_range_release(&fill->held[i]);
    free(fill->parts);
    free(fill->held);
    free(fill);
}

// The copy of lease l's examples (rep->parts) into the region at offset, for later; NULL when out
// of memory (the caller then copies at once).
static broker_fill *
fill_for(broker *b, const lease *l, const stoker_reply *rep, uint64_t offset)
{
    lease_fill *fill = calloc(1, sizeof(*fill));
    if (fill == NULL)
        return NULL;
    fill->parts = malloc(l->n_parts * sizeof(*fill->parts));
    fill->held = malloc(l->n_parts * sizeof(*fill->held));
    if (fill->parts == NULL || fill->held == NULL) {
        free(fill->parts);
        free(fill->held);
        free(fill);
        return NULL;
    }
    *fill = (lease_fill){.fill = {.run = lease_fill_run},
                         .arena = b->arena,
                         .lease = l->id,
                         .offset = offset,
                         .schema = b->schema,
                         .count = l->count,
                         .n_parts = l->n_parts,
                         .parts = fill->parts,
                         .held = fill->held};
    memcpy(fill->parts, rep->parts, l->n_parts * sizeof(*fill->parts));
    for (uint32_t i = 0; i < l->n_parts; i++) {
        fill->held[i] = l->parts[i].range;
        queue_range_retain(&fill->held[i]);
    }
    return &fill->fill;
}

// A trainer that proved it maps the arena (its secret) gets lease l there: rep then carries only
// the offset, and *fill the copy to make before the reply goes (outside the broker's lock).
// Without room (regions still held), bytes as for any trainer.
// Counted per trainer for /status (issue 13): a trainer that maps the arena keeps the shm path
// when a batch finds no room (arena_full), one whose secret is unknown (no mapping) is on the
// socket's.
static void
arena_reply(broker *b, trainer *t, uint64_t secret, const lease *l, stoker_reply *rep,
            broker_fill **fill)
{
    *fill = NULL;
    int placed = 0;
    int rv = secret != 0 && b->arena != NULL
                 ? broker_arena_reserve(b->arena, secret, l->id, &b->schema, rep->parts,
                                        rep->n_parts, l->count, &rep->arena_offset, &placed)
                 : STOKER_NOT_FOUND;
    t->in_arena = rv == STOKER_OK;
    rep->in_arena = t->in_arena;
    uint64_t bytes = l->bytes;
    t->delivery =
        rv == STOKER_OK || rv == STOKER_LIMIT ? STOKER_DELIVERY_SHM : STOKER_DELIVERY_SOCKET;
    t->arena_full += rv == STOKER_LIMIT;
    if (!t->in_arena) {
        t->batches_socket++;
        t->examples_socket += l->count;
        t->bytes_socket += bytes;
        return;
    }
    b->c.delivered_shm += l->count;
    t->batches_shm++;
    t->examples_shm += l->count;
    t->bytes_shm += bytes;
    if (placed) {
        b->c.delivered_in_place += l->count;
        return;
    }
    if ((*fill = fill_for(b, l, rep, rep->arena_offset)) == NULL)
        broker_arena_fill(b->arena, l->id, rep->arena_offset, rep->parts, rep->n_parts, &b->schema,
                          l->count);
}

// Describes lease l for a reply: its chunk's parts, runs and (a dataset's) items, malloc'd for
// the caller to free after the reply is sent. STOKER_OK or STOKER_NOMEM (nothing to free).
static int
describe_lease(const broker *b, const lease *l, stoker_reply *rep)
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
                               .count = part->range.count};
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

static void send_again(broker *b, trainer *t, parked *k, lease *l, uint64_t resent, uint64_t now_ms,
                       broker_outbox *out);

// Pull k of t names pulls whose replies t lost (Pull.replaces): answers it with the first lease t
// still holds that was sent for one of them, the same lease again (as bytes: its arena region
// may be gone), and returns 1; 0 when none is held any more (then k is served as usual).
static int
resend_lost(broker *b, trainer *t, parked *k, uint64_t now_ms, broker_outbox *out)
{
    const stoker_request *req = k->req;
    // A named pull still parked here (the reply not even made yet) is answered now, into the
    // void: its lease, made later, would otherwise go where nobody listens.
    parked *prev = NULL, *p = b->pulls;
    while (p != NULL) {
        parked *next = p->next;
        int named = 0;
        for (uint32_t i = 0; p->trainer == t && p->req->pull_id != 0 && i < req->n_replaces; i++)
            named |= req->replaces[i] == p->req->pull_id;
        if (named) {
            send_code(b, out, p->token, STOKER_RETRY, "pull %llu replaced by pull %llu",
                      (unsigned long long)p->req->pull_id, (unsigned long long)req->pull_id);
            unlink_pull(b, prev, p);
            free_parked(p);
        } else {
            prev = p;
        }
        p = next;
    }
    lease *l = t->leases;
    for (; l != NULL; l = l->next) {
        int named = 0;
        for (uint32_t i = 0; i < req->n_replaces && !named; i++)
            named = l->pull_id != 0 && req->replaces[i] == l->pull_id;
        if (named)
            break;
    }
    if (l == NULL)
        return 0;
    stoker_info("lease-resent: lease %llu (%u examples) to trainer %u '%s', whose reply to pull "
                "%llu was lost",
                (unsigned long long)l->id, l->count, t->id, t->name,
                (unsigned long long)l->pull_id);
    send_again(b, t, k, l, l->pull_id, now_ms, out);
    return 1;
}

// Answers pull k of t with lease l again (as bytes: its arena region may be gone), saying which
// lost pull it answers (resent, or 0); the next pull that names k's pull gets it again.
static void
send_again(broker *b, trainer *t, parked *k, lease *l, uint64_t resent, uint64_t now_ms,
           broker_outbox *out)
{
    const stoker_request *req = k->req;
    stoker_event events[EVENTS_PER_REPLY];
    stoker_reply rep = {.code = STOKER_OK,
                        .group_step = l->group_step,
                        .resent_pull = resent,
                        .acks_refused = k->acks_refused};
    if (describe_lease(b, l, &rep) != STOKER_OK) {
        send_code(b, out, k->token, STOKER_RETRY, "broker out of memory");
        return;
    }
    l->pull_id = req->pull_id; // lost again: the next pull names this one
    l->sent_ms = now_ms;
    // The lost reply's events first (an epoch's end that came with this step), then new ones.
    uint32_t n = l->events_last != 0
                     ? copy_events(b, l->events_first, l->events_last, events, EVENTS_PER_REPLY / 2)
                     : 0;
    stoker_event fresh[EVENTS_PER_REPLY];
    uint32_t n_fresh = take_events(b, t, fresh);
    if (n_fresh > EVENTS_PER_REPLY - n) {
        t->event_cursor = fresh[EVENTS_PER_REPLY - n - 1].index; // the rest go with the next
        n_fresh = EVENTS_PER_REPLY - n;
    }
    memcpy(events + n, fresh, n_fresh * sizeof(*fresh));
    n += n_fresh;
    if (n > 0) {
        l->events_first = l->events_last != 0 ? l->events_first : events[0].index;
        l->events_last = events[n - 1].index;
    }
    rep.n_events = n;
    rep.events = events;
    send_reply(b, out, k->token, &rep);
    free((void *)rep.parts);
    free((void *)rep.runs);
    free((void *)rep.items);
}

// A lease held back from the supply's end goes again after this long without acknowledgement.
#define LEASE_AGAIN_MS 2000

// Answers pull k of trainer t if it can be answered now (or if final). Returns 1 if answered.
static int
try_pull(broker *b, parked *k, uint64_t now_ms, broker_outbox *out, int final)
{
    trainer *t = k->trainer;
    uint32_t max = k->req->max_examples;
    char why[STOKER_MESSAGE_MAX];
    stoker_event events[EVENTS_PER_REPLY];
    // Sent with this reply whenever there are some (they make it ready); a rank's after its
    // step is taken (they come with the step formed after them).
    uint64_t cursor = t->event_cursor;
    uint32_t n_events = t->group == NULL ? take_events(b, t, events) : 0;
    int alive = producers_alive(b) > 0;
    int ended = supply_state(b, now_ms, why, sizeof(why));
    // Not the end for a trainer that holds leases (not one that commits: it holds them until its
    // commit): a reply of ours may have been lost to it (its pull timed out while it was frozen),
    // and the pull that names that one, which brings the lease again, may come after this one.
    // Its leases acknowledged, the end comes (with the acknowledgement's next pull, or when
    // this pull's wait is over). Issue 26, defect 5.
    if (ended != STOKER_OK && t->group == NULL && !t->commit && t->leases != NULL) {
        ended = STOKER_OK;
        // A lease sent a while ago and not acknowledged while t pulls on may be one whose reply
        // t lost without knowing it (its pull failed before it was sent, say): it goes again.
        // A copy t has is dropped by its identity filter (and not acknowledged while its caller
        // holds the batch), so this never trains an example twice.
        for (lease *l = t->leases; l != NULL; l = l->next) {
            if (now_ms >= l->sent_ms + LEASE_AGAIN_MS) {
                stoker_info("lease-again: lease %llu (%u examples) of trainer %u '%s' sent "
                            "%.1f s ago, not acknowledged, and the supply is over: sent again",
                            (unsigned long long)l->id, l->count, t->id, t->name,
                            (double)(now_ms - l->sent_ms) / 1000.0);
                t->event_cursor = cursor; // the events go with the lease (send_again)
                send_again(b, t, k, l, 0, now_ms, out);
                return 1;
            }
        }
    }
    // Enough queued for a full batch (made by tokens: its budget, broker_budget.c).
    int enough = budget_ready(b, &t->batching, max, 1);
    // Only asked when it matters (it looks at every producer): some queued, not a full batch.
    int full = b->c.queued > 0 && !enough && alive && queues_full(b);
    // A batch goes out when it is full; short when no more can come soon: no producer left,
    // every queue full (a batch larger than the queues can hold), or the pull's wait is over
    // (data trickles in slower than the batch fills: a short batch beats a false stall), or a
    // dataset can put nothing more in the queues until what was handed out is acknowledged (an
    // epoch's last items: waiting out the pull would only pause every epoch boundary).
    int partial = b->c.queued > 0 && (!alive || final || full || epochs_waiting(b));
    // Nothing goes out within the returning window (issue 26): the producers push again what the
    // broker before this one held, and the trainers that trained part of it say so in their
    // hello meanwhile; a batch made earlier could hand one of them to another trainer.
    int take = (enough || partial) && now_ms >= b->returning_until_ms;
    // Short because of the queues' limits, not the supply: said once (queues_cut_short).
    int cut_short = full;
    int ready = take || n_events > 0 || ended != STOKER_OK;
    lease *l = NULL;
    uint64_t step = 0, leftover = 0;
    if (t->group != NULL) {
        // A rank gets its step's batch, formed for the whole group (broker_group.c).
        why[0] = '\0';
        ended = group_take(b, t, now_ms, &l, &step, &leftover, why, sizeof(why));
        n_events = take_events(b, t, events);
        take = 0;
        ready = l != NULL || n_events > 0 || ended != STOKER_OK;
    }
    if (!ready && !final)
        return 0;
    stoker_reply rep = {.code = STOKER_OK, .group_step = step, .group_leftover = leftover};
    broker_fill *fill = NULL;
    stoker_chunk_part *parts = NULL;
    stoker_run *runs = NULL;
    uint64_t *items = NULL;
    if (take)
        l = take_lease(b, t, max, UINT32_MAX);
    if (l != NULL) {
        if (describe_lease(b, l, &rep) != STOKER_OK) {
            // Cannot describe the batch: give the examples back; the trainer asks again.
            t->event_cursor = cursor; // the events go with the reply that is sent
            if (t->group != NULL) {
                group_untake(b, t, l); // the rank's step waits for its next pull
            } else {
                t->leases = l->next; // take_lease put it first
                return_lease(b, l, 1);
            }
            send_code(b, out, k->token, STOKER_RETRY, "broker out of memory");
            return 1;
        }
        if (cut_short)
            queues_cut_short(b, t, max, l->count);
        parts = (stoker_chunk_part *)rep.parts;
        runs = (stoker_run *)rep.runs;
        items = (uint64_t *)rep.items;
        l->pull_id = k->req->pull_id;
        l->sent_ms = now_ms;
        l->group_step = step;
        l->events_first = n_events > 0 ? events[0].index : 0;
        l->events_last = n_events > 0 ? events[n_events - 1].index : 0;
        arena_reply(b, t, k->req->arena_secret, l, &rep, &fill);
    } else if (ended != STOKER_OK) {
        rep.code = ended;
        snprintf(rep.message, sizeof(rep.message), "%s", why);
    } else if (t->group != NULL && why[0] != '\0') {
        snprintf(rep.message, sizeof(rep.message), "%s", why); // why the rank waits
    } else {
        commit_why_empty(b, t, rep.message, sizeof(rep.message)); // waits for a commit?
    }
    rep.n_events = n_events;
    rep.events = events;
    rep.acks_refused = k->acks_refused;
    send_reply_fill(b, out, k->token, &rep, fill);
    free(parts);
    free(runs);
    free(items);
    return 1;
}

void
unlink_pull(broker *b, parked *prev, parked *k)
{
    if (prev != NULL)
        prev->next = k->next;
    else
        b->pulls = k->next;
    if (b->pulls_tail == k)
        b->pulls_tail = prev;
    b->n_parked--;
    k->trainer->parked_pulls--;
}

// Answers parked pulls that can be answered now (or whose wait expired), oldest first. Returns
// how many.
static uint32_t
serve_pulls(broker *b, uint64_t now_ms, broker_outbox *out)
{
    uint32_t served = 0;
    parked *prev = NULL, *k = b->pulls;
    while (k != NULL) {
        parked *next = k->next;
        if (try_pull(b, k, now_ms, out, k->deadline_ms <= now_ms)) {
            unlink_pull(b, prev, k);
            free_parked(k);
            served++;
        } else {
            prev = k;
        }
        k = next;
    }
    return served;
}

// After any change: pulls take what became available, pushes fill the room that made, until
// nothing moves. Each round answers at least one parked request, so this ends.
void
settle(broker *b, uint64_t now_ms, broker_outbox *out)
{
    queues_resize(b); // producers or trainers may have come or gone
    while (serve_pulls(b, now_ms, out) + serve_pushes(b, now_ms, out) > 0)
        ;
}

void
handle_pull(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
            broker_outbox *out)
{
    trainer *t = find_trainer(b, req->session);
    if (t == NULL) {
        send_code(b, out, token, STOKER_UNKNOWN_PEER, "unknown session: say hello first");
        stoker_request_free(req);
        return;
    }
    if (t->left) {
        // Its goodbye overtook this pull (another context of its connection): what it held
        // went back as unused or redelivered, and a lease now would reach no caller.
        send_code(b, out, token, STOKER_UNKNOWN_PEER,
                  "trainer %u '%s' said goodbye; hello again first", t->id, t->name);
        stoker_request_free(req);
        return;
    }
    if (!t->connected)
        stoker_info("trainer-reconnected: trainer %u '%s'", t->id, t->name);
    t->connected = 1;
    t->pipe = pipe;
    t->last_seen_ms = now_ms;
    t->pulled = 1;
    if (req->max_examples == 0 || req->max_examples > b->cfg.max_chunk_examples) {
        send_code(b, out, token, STOKER_INVALID, "pull of %u examples: must be 1..%u",
                  req->max_examples, b->cfg.max_chunk_examples);
        stoker_request_free(req);
        return;
    }
    char why[STOKER_MESSAGE_MAX];
    if (b->has_schema && stoker_batching_check(&t->batching, &b->schema, req->max_examples, why,
                                               sizeof(why)) != STOKER_OK) {
        send_code(b, out, token, STOKER_INVALID, "%s", why);
        stoker_request_free(req);
        return;
    }
    parked *k = parked_new(b, out, token, req);
    if (k == NULL)
        return;
    k->trainer = t;
    autoscale_trainer_wait(b, t, req->data_wait_ms, now_ms);
    k->acks_refused = apply_acks(b, t, req->n_acks, req->acks, now_ms);
    if (req->n_replaces > 0 && resend_lost(b, t, k, now_ms, out)) {
        free_parked(k);
        return;
    }
    if (req->max_examples != t->batch_examples) {
        t->batch_examples = req->max_examples;
        queues_resize(b); // before it is served: the queues may have to grow for it
    }
    // Older parked pulls are served first, so a new one only goes ahead when none wait.
    int can_park = b->n_parked < b->cfg.max_parked;
    if ((b->pulls == NULL && try_pull(b, k, now_ms, out, 0)) ||
        (!can_park && try_pull(b, k, now_ms, out, 1))) {
        free_parked(k);
        return;
    }
    uint32_t wait = req->wait_ms < b->cfg.max_pull_wait_ms ? req->wait_ms : b->cfg.max_pull_wait_ms;
    k->deadline_ms = now_ms + wait;
    if (b->pulls_tail != NULL)
        b->pulls_tail->next = k;
    else
        b->pulls = k;
    b->pulls_tail = k;
    b->n_parked++;
    t->parked_pulls++;
}

void
handle_ack(broker *b, void *token, stoker_request *req, uint64_t now_ms, broker_outbox *out)
{
    trainer *t = find_trainer(b, req->session);
    if (t == NULL) {
        send_code(b, out, token, STOKER_UNKNOWN_PEER, "unknown session: say hello first");
    } else if (req->commit_step > 0 && (t->group == NULL || !t->commit)) {
        send_code(b, out, token, STOKER_INVALID,
                  "a group commit from a trainer that is not a committing rank of a group");
    } else if (req->commit_step > 0) {
        group_commit(b, t, token, req, now_ms, out);
    } else {
        uint32_t refused = apply_acks(b, t, req->n_acks, req->acks, now_ms);
        // With the events the trainer has not heard yet: an acknowledgement that ends an epoch
        // may come after the reply that ended the supply, and is then the last thing it sends.
        stoker_event events[EVENTS_PER_REPLY];
        uint32_t n_events = take_events(b, t, events);
        stoker_reply rep = {.code = refused == 0 ? STOKER_OK : STOKER_NOT_FOUND,
                            .acks_refused = refused,
                            .n_events = n_events,
                            .events = events};
        if (refused > 0)
            snprintf(rep.message, sizeof(rep.message),
                     "%u of %u leases unknown or already acknowledged", refused, req->n_acks);
        send_reply(b, out, token, &rep);
        if (t->leases == NULL && t->parked_pulls > 0)
            settle(b, now_ms, out); // the end it was held back from (try_pull) may come now
    }
    stoker_request_free(req);
}
