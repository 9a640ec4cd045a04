// The broker's core (core.h): the outbox and the reply helpers, the event log, lookups,
// freeing parked requests and leases, and the counters. The other rooms and the dispatcher
// (broker.c) use it; it uses only core.h (queue.c, libstoker, nng) and calls no room: a
// reply's copy into shared memory is run through the fill's own function.
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "core.h"
#include "stoker/error.h"
#include "stoker/log.h"

void
broker_outbox_fill(broker_outbox *out)
{
    for (size_t i = 0; i < out->n; i++) {
        if (out->items[i].fill != NULL) {
            out->items[i].fill->run(out->items[i].fill, out->items[i].msg != NULL);
            out->items[i].fill = NULL;
        }
    }
}

void
broker_outbox_fini(broker_outbox *out)
{
    for (size_t i = 0; i < out->n; i++) {
        if (out->items[i].fill != NULL)
            out->items[i].fill->run(out->items[i].fill, 0);
        nng_msg_free(out->items[i].msg);
    }
    free(out->items);
    memset(out, 0, sizeof(*out));
}

void
outbox_add_fill(broker_outbox *out, void *token, nng_msg *msg, broker_fill *fill)
{
    if (out->n == out->cap) {
        size_t cap = out->cap ? out->cap * 2 : 16;
        void *items = realloc(out->items, cap * sizeof(*out->items));
        if (items == NULL) {
            // Cannot queue the reply: the client's request times out and is retried.
            stoker_error("out of memory queueing a reply");
            nng_msg_free(msg);
            if (fill != NULL)
                fill->run(fill, 0);
            return;
        }
        out->items = items;
        out->cap = cap;
    }
    out->items[out->n].token = token;
    out->items[out->n].msg = msg;
    out->items[out->n].fill = fill;
    out->n++;
}

void
outbox_add(broker_outbox *out, void *token, nng_msg *msg)
{
    outbox_add_fill(out, token, msg, NULL);
}

void
send_reply(broker *b, broker_outbox *out, void *token, const stoker_reply *rep)
{
    send_reply_fill(b, out, token, rep, NULL);
}

void
send_reply_fill(broker *b, broker_outbox *out, void *token, const stoker_reply *rep,
                broker_fill *fill)
{
    nng_msg *msg = NULL;
    if (stoker_wire_encode_reply(rep, &msg) != STOKER_OK) {
        stoker_error("out of memory encoding a reply");
        msg = NULL;
    }
    // Refused: the request was not done and will not be by asking the same again. "Not now"
    // (RETRY, a push behind one that had no room included) and the supply's end are answers.
    if (rep->code != STOKER_OK && rep->code != STOKER_RETRY && rep->code != STOKER_NO_PRODUCERS &&
        rep->code != STOKER_END_OF_DATA) {
        b->c.refused++;
        stoker_debug("refused (%s): %s", stoker_errname(rep->code), rep->message);
    }
    outbox_add_fill(out, token, msg, fill);
}

parked *
parked_new(broker *b, broker_outbox *out, void *token, stoker_request *req)
{
    parked *k = calloc(1, sizeof(*k));
    if (k == NULL) {
        send_code(b, out, token, STOKER_RETRY, "broker out of memory");
        stoker_request_free(req);
        return NULL;
    }
    k->token = token;
    k->req = req;
    return k;
}

void
send_code(broker *b, broker_outbox *out, void *token, int code, const char *fmt, ...)
{
    stoker_reply rep = {.code = code};
    if (fmt != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(rep.message, sizeof(rep.message), fmt, ap);
        va_end(ap);
    }
    send_reply(b, out, token, &rep);
}

static double
uptime_s(const broker *b, uint64_t now_ms)
{
    return (double)(now_ms - b->start_ms) / 1000.0;
}

stoker_event *
new_event(broker *b, stoker_event_kind kind, uint64_t now_ms)
{
    stoker_event *e = &b->events[b->n_events % EVENT_LOG];
    memset(e, 0, sizeof(*e));
    e->index = ++b->n_events;
    e->kind = kind;
    e->at_s = uptime_s(b, now_ms);
    return e;
}

void
add_event(broker *b, stoker_event_kind kind, const producer *p, uint64_t now_ms, const char *reason)
{
    stoker_event *e = new_event(b, kind, now_ms);
    e->producer = p->id;
    snprintf(e->name, sizeof(e->name), "%s", p->name);
    snprintf(e->reason, sizeof(e->reason), "%s", reason != NULL ? reason : "");
    b->c.producers_lost += kind == STOKER_EVENT_PRODUCER_LOST;
}

// --- lookup -------------------------------------------------------------------------------------

producer *
find_producer(const broker *b, uint64_t session)
{
    for (uint32_t i = 0; i < b->n_producers; i++) {
        if (b->producers[i]->session == session)
            return b->producers[i];
    }
    return NULL;
}

producer *
find_producer_id(const broker *b, uint32_t id)
{
    for (uint32_t i = 0; i < b->n_producers; i++) {
        if (b->producers[i]->id == id)
            return b->producers[i];
    }
    return NULL;
}

trainer *
find_trainer(const broker *b, uint64_t session)
{
    for (uint32_t i = 0; i < b->n_trainers; i++) {
        if (b->trainers[i]->session == session)
            return b->trainers[i];
    }
    return NULL;
}

// --- freeing -----------------------------------------------------------------------------------

void
free_parked(parked *p)
{
    stoker_request_free(p->req);
    free(p);
}

void
free_lease(lease *l)
{
    for (uint32_t i = 0; i < l->n_parts; i++)
        queue_range_release(&l->parts[i].range);
    free(l->parts);
    free(l);
}

// --- accounting helpers -------------------------------------------------------------------------

uint32_t
producers_alive(const broker *b)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < b->n_producers; i++)
        n += b->producers[i]->status == STOKER_PRODUCER_ALIVE;
    return n;
}

uint32_t
trainers_connected(const broker *b, int in_arena)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < b->n_trainers; i++)
        n += b->trainers[i]->connected &&
             (!in_arena || b->trainers[i]->delivery == STOKER_DELIVERY_SHM);
    return n;
}

void
tell_peers(const broker *b, stoker_reply *rep)
{
    rep->peers_producers = producers_alive(b);
    rep->peers_trainers = trainers_connected(b, 0);
}

void
broker_counters(const broker *b, stoker_counters *out)
{
    *out = b->c;
    out->queued_bytes = b->queued_bytes;
    out->producers_alive = producers_alive(b);
    out->trainers = trainers_connected(b, 0);
    out->trainers_shm = trainers_connected(b, 1);
}

int
push_waits_for_room(const producer *p)
{
    // Parked pushes are in seq order: the first is either ahead of its predecessor (two pushes
    // in flight, taken in the other order: it waits for that one, not for room) or it did not
    // fit (push_try parks nothing else).
    return p->pushes != NULL && p->pushes->req->first_seq <= p->next_seq;
}

int
producer_may_send(const producer *p, uint64_t now_ms)
{
    return p->status == STOKER_PRODUCER_ALIVE ||
           (p->status == STOKER_PRODUCER_LOST && now_ms < p->silent_until_ms);
}

void
revive(broker *b, producer *p, uint32_t pipe, uint64_t now_ms, const char *how)
{
    p->silent_until_ms = 0;
    if (p->status != STOKER_PRODUCER_ALIVE) {
        p->status = STOKER_PRODUCER_ALIVE;
        stoker_info("producer-reconnected: producer %u '%s' (%s)", p->id, p->name, how);
        add_event(b, STOKER_EVENT_PRODUCER_RECONNECTED, p, now_ms, how);
    }
    p->pipe = pipe;
    p->last_seen_ms = now_ms;
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

uint32_t
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
take_events(const broker *b, trainer *t, uint64_t upto, stoker_event *buf)
{
    uint32_t n = copy_events(b, t->event_cursor + 1, upto, buf, EVENTS_PER_REPLY);
    if (n > 0)
        t->event_cursor = buf[n - 1].index;
    return n;
}
