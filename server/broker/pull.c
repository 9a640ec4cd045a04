// The broker's pull path: a pull asks its trainer's source (a plain trainer's, or a group rank's)
// the one question "is a batch ready?", takes the answer, and builds the one reply: a batch (in
// the shared-memory arena or as bytes), the end of the supply, or why it waits. Parked pulls wait
// here until their answer comes or their wait is over; acknowledgements come in here too.
// It stands above the leases (lease.c) and the groups (group.c), which it calls; nothing below it
// calls it. The dispatcher (broker.c) serves parked pulls after every change (settle).
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "arena.h"
#include "budget.h"
#include "group.h"
#include "internal.h"
#include "jobs.h"
#include "mix.h"
#include "stoker/error.h"
#include "stoker/log.h"

// Why the supply ended, or STOKER_OK while producers may still send: also for
// --producer-timeout after a producer came back from a broker that died (returning_until_ms),
// so that one finishing first does not end the supply for the others still reconnecting.
static int
supply_state(const broker *b, uint64_t now_ms, char *why, size_t why_len)
{
    if (jobs_detached(b, why, why_len)) // no example comes for this job any more (jobs.c)
        return STOKER_NO_PRODUCERS;
    if (b->n_producers == 0 || b->c.queued > 0 || now_ms < b->returning_until_ms)
        return STOKER_OK;
    uint32_t lost = 0, finished = 0;
    for (uint32_t i = 0; i < b->n_producers; i++) {
        const producer *p = b->producers[i];
        if (producer_may_send(p, now_ms))
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
// Counted per trainer for /status: a trainer that maps the arena keeps the shm path
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
    if (lease_describe(b, l, &rep) != STOKER_OK) {
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
    uint32_t n_fresh = take_events(b, t, group_events_upto(b, t), fresh);
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

// The one answer to "is a batch ready for this pull?", whoever the trainer is.
typedef struct pull_answer {
    lease *batch;  // taken for this pull (first in its trainer's leases), or NULL
    lease *again;  // a lease sent before, to send again (batch is then NULL)
    int end;       // STOKER_OK, or why no batch will come (END_OF_DATA, NO_PRODUCERS, GROUP_BROKEN)
    int cut_short; // batch is short because the queues are full, not the supply
    uint64_t step; // a rank's step (0: not a rank)
    uint64_t leftover;            // at a group's end: the examples no equal step could hold
    char why[STOKER_MESSAGE_MAX]; // the end's reason, or why a rank waits ("": none)
} pull_answer;

// Where a trainer's batches come from: a plain trainer's take from the queues as they are, a
// rank's from the steps its group forms. answer() fills *a and returns nonzero when the pull can
// be answered now (a batch, a lease again, or the end); final: the pull's wait is over, so a short
// batch beats none. untake() gives back a batch answer() took that could not be sent.
typedef struct pull_source {
    int (*answer)(broker *b, trainer *t, uint32_t max, uint64_t now_ms, int final, pull_answer *a);
    void (*untake)(broker *b, trainer *t, lease *l);
} pull_source;

// A plain trainer whose supply is over but that holds leases is not told the end: a reply of ours
// may have been lost to it (its pull timed out while it was frozen), and the pull that names that
// one, which brings the lease again, may come after this one. A lease sent a while ago and not
// acknowledged meanwhile goes again (a copy it has is dropped by its identity filter, so nothing
// trains twice). Returns that lease, or NULL.
static lease *
lease_to_send_again(trainer *t, uint64_t now_ms)
{
    for (lease *l = t->leases; l != NULL; l = l->next) {
        if (now_ms >= l->sent_ms + LEASE_AGAIN_MS) {
            stoker_info("lease-again: lease %llu (%u examples) of trainer %u '%s' sent %.1f s ago, "
                        "not acknowledged, and the supply is over: sent again",
                        (unsigned long long)l->id, l->count, t->id, t->name,
                        (double)(now_ms - l->sent_ms) / 1000.0);
            return l;
        }
    }
    return NULL;
}

// A trainer whose supply is over but that holds leases is not told the end (lease_to_send_again):
// the end becomes a lease to send again, or a wait. Returns -1 when the answer goes on, else
// the answer.
static int
hold_end(trainer *t, uint64_t now_ms, pull_answer *a)
{
    if (a->end == STOKER_OK || t->commit || t->leases == NULL)
        return -1;
    a->end = STOKER_OK; // not the end while it holds leases (not one that commits)
    a->why[0] = '\0';
    a->again = lease_to_send_again(t, now_ms);
    return a->again != NULL;
}

// A plain trainer's readiness. A batch goes out when it is full (made by tokens: its budget);
// short when no more can come soon: no producer left, every queue full (a batch larger than the
// queues can hold), the pull's wait is over (a short batch beats a false stall), or a dataset can
// queue nothing more until what was handed out is acknowledged (an epoch's last items). Nothing
// goes out within the returning window after a broker before this one died: its producers push
// again what it held while its trainers say what they trained.
static int
plain_answer(broker *b, trainer *t, uint32_t max, uint64_t now_ms, int final, pull_answer *a)
{
    a->end = supply_state(b, now_ms, a->why, sizeof(a->why));
    int held = hold_end(t, now_ms, a);
    if (held >= 0)
        return held;
    if (b->c.queued == 0 || now_ms < b->returning_until_ms)
        return a->end != STOKER_OK;
    int enough = budget_ready(b, &t->batching, max, 1);
    int alive = producers_alive(b) > 0;
    a->cut_short = !enough && alive && queues_full(b);
    if (enough || !alive || final || a->cut_short || epochs_waiting(b))
        a->batch = lease_take(b, t, max, UINT32_MAX);
    return a->batch != NULL || a->end != STOKER_OK;
}

// Takes t's mixed batch (of counts, or by tokens the picks of plan) into a, numbered: the client
// hands its batches to its caller in this order (pulls in flight may come back in another), so
// that the running counts hold where the caller sees them.
static int
mixed_take(broker *b, trainer *t, const uint32_t *counts, const budget_plan *plan, pull_answer *a)
{
    a->batch = plan != NULL ? lease_take_mix_plan(b, t, t->mix, plan)
                            : lease_take_mix(b, t, t->mix, counts);
    if (a->batch != NULL)
        a->step = ++t->mix->steps;
    return a->batch != NULL;
}

// Whether a mixed batch waits for source s, which has `have` of the `need` it is owed queued
// (need 0: a mixture by tokens, owed its next sequence and holding none) (a->why says so): it goes
// short instead when the source cannot queue more (its queues full, or all queues together at
// --max-bytes: the other sources' full queues are no reason), and at the pull's wait's end while
// the source makes examples at all (a short batch beats a false stall; without a producer of it
// alive the consumer waits, told why).
static int
mixed_waits(broker *b, mix *m, uint32_t s, uint64_t have, uint32_t need, int final, pull_answer *a)
{
    uint32_t alive, lost, n = mix_producers(b, m, s, &alive, &lost);
    a->cut_short = b->example_bytes > commit_bytes_room(b) || mix_source_full(b, m, s);
    if ((final && alive > 0) || a->cut_short)
        return 0;
    char held[64];
    if (need > 0)
        snprintf(held, sizeof(held), "%u of its %u queued", (unsigned)have, need);
    else
        snprintf(held, sizeof(held), "its next sequence is owed and none is queued");
    snprintf(a->why, sizeof(a->why),
             "the mixture waits for source '%s': %s (%u producer%s of pool '%s', %u alive)",
             m->spec.names[s], held, n, n == 1 ? "" : "s", m->spec.names[s], alive);
    return 1;
}

// A mixture's batch by tokens (budget_plan_mixed): each next sequence from the source furthest
// behind its share of the tokens. When that source has nothing queued the batch waits for it,
// or goes short (what came before it: exact so far) as mixed_waits says or when the mixture
// ended (ending).
static int
mixed_tokens_answer(broker *b, trainer *t, uint32_t max, uint64_t now_ms, int final, int ending,
                    pull_answer *a)
{
    budget_plan plan;
    int32_t s;
    int planned = budget_plan_mixed(b, t, t->mix, max, &plan, &s) == 0;
    t->mix->waits_for = s;
    // A source whose producers make nothing more gave its last: the batch goes with it.
    if (s >= 0 && !mix_source_sends_more(b, t->mix, (uint32_t)s, now_ms))
        ending = 1;
    if (s < 0 || ending || !mixed_waits(b, t->mix, (uint32_t)s, 0, 0, final, a))
        planned = planned && mixed_take(b, t, NULL, &plan, a);
    budget_plan_free(&plan);
    return planned;
}

// A trainer with a mixture (mix.h): a batch goes out with the per-source counts the quota rule
// gives (by tokens: mixed_tokens_answer), when every source has its count queued. Until then it
// waits (proportions exact), and the reply says for which source; short (counts for fewer
// examples, still exact) as mixed_waits says, or when the mixture ends.
static int
mixed_answer(broker *b, trainer *t, uint32_t max, uint64_t now_ms, int final, pull_answer *a)
{
    mix *m = t->mix;
    uint64_t avail[STOKER_MIX_MAX];
    uint32_t counts[STOKER_MIX_MAX];
    mix_at_step(m, m->steps + 1); // the schedule's weights for the batch to make
    mix_avail(b, m, avail);
    char who[STOKER_NAME_MAX + 32];
    snprintf(who, sizeof(who), "trainer %u '%s'", t->id, t->name);
    int over = 0;
    if (now_ms >= b->returning_until_ms) {
        a->end = mix_end(b, m, avail, now_ms, who, a->why, sizeof(a->why));
        over = a->end != STOKER_OK;
    }
    if (over && (m->tokens || mix_fit(m, max, avail, counts) > 0)) {
        int end = a->end; // the last batches that fit go first
        a->end = STOKER_OK;
        if (m->tokens ? mixed_tokens_answer(b, t, max, now_ms, 1, 1, a)
                      : mixed_take(b, t, counts, NULL, a))
            return 1;
        a->end = end;
        return 1;
    }
    int held = hold_end(t, now_ms, a);
    if (held >= 0)
        return held;
    if (over)
        return 1;
    if (now_ms < b->returning_until_ms)
        return 0;
    if (m->tokens)
        return mixed_tokens_answer(b, t, max, now_ms, final, 0, a);
    mix_plan(m, max, counts);
    uint32_t s = 0;
    while (s < m->spec.n && counts[s] <= avail[s])
        s++;
    m->waits_for = s < m->spec.n ? (int32_t)s : -1;
    if (s < m->spec.n && (mixed_waits(b, m, s, avail[s], counts[s], final, a) ||
                          mix_fit(m, max, avail, counts) == 0))
        return 0;
    return mixed_take(b, t, counts, NULL, a);
}

static void
plain_untake(broker *b, trainer *t, lease *l)
{
    t->leases = l->next; // lease_take put it first
    lease_return(b, l, 1);
}

// A rank gets its step's batch, formed for the whole group (group.c).
static int
rank_answer(broker *b, trainer *t, uint32_t max, uint64_t now_ms, int final, pull_answer *a)
{
    (void)max;
    (void) final;
    a->end = group_take(b, t, now_ms, &a->batch, &a->step, &a->leftover, a->why, sizeof(a->why));
    return a->batch != NULL || a->end != STOKER_OK;
}

static void
mixed_untake(broker *b, trainer *t, lease *l)
{
    plain_untake(b, t, l);
    t->mix->steps--; // the next batch takes its number
}

static const pull_source plain_source = {plain_answer, plain_untake};
static const pull_source mixed_source = {mixed_answer, mixed_untake};
static const pull_source rank_source = {rank_answer, group_untake};

// Where t's batches come from.
static const pull_source *
source_of(const trainer *t)
{
    return t->group != NULL ? &rank_source : t->mix != NULL ? &mixed_source : &plain_source;
}

// Answers pull k with the batch a->batch just took and the events taken for it (t's event cursor
// was at cursor before).
static void
send_batch(broker *b, trainer *t, parked *k, const pull_answer *a, uint64_t cursor,
           stoker_event *events, uint32_t n_events, uint64_t now_ms, broker_outbox *out)
{
    lease *l = a->batch;
    stoker_reply rep = {.code = STOKER_OK,
                        .group_step = a->step,
                        .group_leftover = a->leftover,
                        .n_events = n_events,
                        .events = events,
                        .acks_refused = k->acks_refused};
    if (lease_describe(b, l, &rep) != STOKER_OK) {
        // Cannot describe the batch: give the examples back; the trainer asks again, and the
        // events go with the reply that is sent.
        t->event_cursor = cursor;
        source_of(t)->untake(b, t, l);
        send_code(b, out, k->token, STOKER_RETRY, "broker out of memory");
        return;
    }
    if (a->cut_short)
        queues_cut_short(b, t, k->req->max_examples, l->count);
    l->pull_id = k->req->pull_id;
    l->sent_ms = now_ms;
    l->group_step = a->step;
    l->events_first = n_events > 0 ? events[0].index : 0;
    l->events_last = n_events > 0 ? events[n_events - 1].index : 0;
    broker_fill *fill = NULL;
    arena_reply(b, t, k->req->arena_secret, l, &rep, &fill);
    send_reply_fill(b, out, k->token, &rep, fill);
    free((void *)rep.parts);
    free((void *)rep.runs);
    free((void *)rep.items);
}

// Answers pull k of trainer t if it can be answered now (or if final). Returns 1 if answered.
static int
try_pull(broker *b, parked *k, uint64_t now_ms, broker_outbox *out, int final)
{
    trainer *t = k->trainer;
    pull_answer a = {.end = STOKER_OK};
    int ready = source_of(t)->answer(b, t, k->req->max_examples, now_ms, final, &a);
    // Events the trainer has not heard make a pull ready too (a rank's: those before its step).
    uint64_t upto = group_events_upto(b, t);
    if (!ready && !final && t->event_cursor >= upto)
        return 0;
    if (a.again != NULL) {
        send_again(b, t, k, a.again, 0, now_ms, out);
        return 1;
    }
    stoker_event events[EVENTS_PER_REPLY];
    uint64_t cursor = t->event_cursor;
    uint32_t n_events = take_events(b, t, upto, events);
    if (a.batch != NULL) {
        send_batch(b, t, k, &a, cursor, events, n_events, now_ms, out);
        return 1;
    }
    stoker_reply rep = {.code = a.end,
                        .group_step = a.step,
                        .group_leftover = a.leftover,
                        .n_events = n_events,
                        .events = events,
                        .acks_refused = k->acks_refused};
    if (a.end != STOKER_OK || a.why[0] != '\0')
        snprintf(rep.message, sizeof(rep.message), "%s", a.why); // the end, or why a rank waits
    else
        commit_why_empty(b, t, rep.message, sizeof(rep.message)); // waits for a commit?
    send_reply(b, out, k->token, &rep);
    return 1;
}

// Answers parked pulls that can be answered now (or whose wait expired), oldest first. Returns
// how many.
uint32_t
pull_serve_parked(broker *b, uint64_t now_ms, broker_outbox *out)
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

int
pull_handle(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
            broker_outbox *out)
{
    trainer *t = find_trainer(b, req->session);
    if (t == NULL) {
        send_code(b, out, token, STOKER_UNKNOWN_PEER, "unknown session: say hello first");
        return 0;
    }
    if (t->left) {
        // Its goodbye overtook this pull (another context of its connection): what it held
        // went back as unused or redelivered, and a lease now would reach no caller.
        send_code(b, out, token, STOKER_UNKNOWN_PEER,
                  "trainer %u '%s' said goodbye; hello again first", t->id, t->name);
        return 0;
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
        return 0;
    }
    char why[STOKER_MESSAGE_MAX];
    if (b->has_schema && stoker_batching_check(&t->batching, &b->schema, req->max_examples, why,
                                               sizeof(why)) != STOKER_OK) {
        send_code(b, out, token, STOKER_INVALID, "%s", why);
        return 0;
    }
    parked *k = parked_new(b, out, token, req);
    if (k == NULL)
        return 1; // parked_new answered and freed it
    k->trainer = t;
    autoscale_trainer_wait(b, t, req->data_wait_ms, now_ms);
    k->acks_refused = lease_apply_acks(b, t, req->n_acks, req->acks, now_ms);
    if (req->n_replaces > 0 && resend_lost(b, t, k, now_ms, out)) {
        free_parked(k);
        return 1;
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
        return 1;
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
    return 1;
}

int
pull_handle_ack(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
                broker_outbox *out)
{
    (void)pipe;
    trainer *t = find_trainer(b, req->session);
    if (t == NULL) {
        send_code(b, out, token, STOKER_UNKNOWN_PEER, "unknown session: say hello first");
    } else if (req->commit_step > 0 && (t->group == NULL || !t->commit)) {
        send_code(b, out, token, STOKER_INVALID,
                  "a group commit from a trainer that is not a committing rank of a group");
    } else if (req->commit_step > 0) {
        group_commit(b, t, token, req, now_ms, out);
    } else {
        uint32_t refused = lease_apply_acks(b, t, req->n_acks, req->acks, now_ms);
        // With the events the trainer has not heard yet: an acknowledgement that ends an epoch
        // may come after the reply that ended the supply, and is then the last thing it sends.
        stoker_event events[EVENTS_PER_REPLY];
        uint32_t n_events = take_events(b, t, group_events_upto(b, t), events);
        stoker_reply rep = {.code = refused == 0 ? STOKER_OK : STOKER_NOT_FOUND,
                            .acks_refused = refused,
                            .n_events = n_events,
                            .events = events};
        if (refused > 0)
            snprintf(rep.message, sizeof(rep.message),
                     "%u of %u leases unknown or already acknowledged", refused, req->n_acks);
        send_reply(b, out, token, &rep); // the dispatcher settles next: an end held back may come
    }
    return 0;
}

int
pull_handle_mix(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
                broker_outbox *out)
{
    (void)pipe;
    (void)now_ms;
    trainer *t = find_trainer(b, req->session);
    mix *m = t != NULL ? t->mix : NULL;
    uint32_t s = 0;
    while (m != NULL && s < m->spec.n && s < req->mix.n &&
           strcmp(m->spec.names[s], req->mix.names[s]) == 0)
        s++;
    if (t == NULL) {
        send_code(b, out, token, STOKER_UNKNOWN_PEER, "unknown session: say hello first");
    } else if (t->group != NULL) {
        send_code(b, out, token, STOKER_INVALID,
                  "a rank's mixture changes with its group's schedule (mix_schedule), at one "
                  "step for every rank");
    } else if (m == NULL) {
        send_code(b, out, token, STOKER_INVALID,
                  "trainer %u '%s' has no mixture to change (say mix= when connecting)", t->id,
                  t->name);
    } else if (s != m->spec.n || req->mix.n != m->spec.n) {
        send_code(b, out, token, STOKER_INVALID,
                  "new weights for trainer %u '%s': name the mixture's %u pools in its order "
                  "(the first that differs: #%u)",
                  t->id, t->name, m->spec.n, s + 1);
    } else {
        memcpy(m->spec.weights, req->mix.weights, sizeof(m->spec.weights));
        m->spec.n_points = 0; // the new weights hold from here on: the schedule is done
        memcpy(m->weight, m->spec.weights, sizeof(m->weight));
        mix_reweigh(m);
        char text[256];
        stoker_mix_format(&m->spec, text, sizeof(text));
        stoker_info("trainer-mix: trainer %u '%s' mixes %s from its batch %llu on", t->id, t->name,
                    text, (unsigned long long)m->steps + 1);
        stoker_reply rep = {.code = STOKER_OK, .group_step = m->steps + 1};
        send_reply(b, out, token, &rep);
    }
    return 0;
}
