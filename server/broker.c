// The broker's core (see broker.h and the rules in broker_internal.h): configuration defaults,
// create/destroy, the outbox and reply helpers, the event log, lookups, the counters, and the
// dispatch of each request to the room that handles it. The rooms: broker_push.c (producers'
// pushes), broker_session.c (hello, goodbye, heartbeat, authentication), broker_lease.c (pulls,
// leases, acknowledgements), broker_loss.c (lost peers, deadlines), broker_queues.c (queue
// sizing), broker_report.c (Status, /status, /metrics). This file handles no request itself.
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "broker_arena.h"
#include "broker_group.h"
#include "broker_internal.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/rng.h"

void
broker_config_init(broker_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->queue_depth = 64;
    cfg->queue_depth_auto = 1;
    cfg->max_bytes = 1ull << 30;
    cfg->producer_timeout_ms = 3000;
    cfg->trainer_timeout_ms = 10000;
    cfg->park_ms = 250;
    cfg->max_pull_wait_ms = 5000;
    cfg->max_producers = 1024;
    cfg->max_trainers = 64;
    cfg->max_chunk_examples = 1u << 20;
    cfg->max_parked = 512;
    cfg->shard_items = 32;
    cfg->group_steps_ahead = 4;
}

void
broker_outbox_fill(broker_outbox *out)
{
    for (size_t i = 0; i < out->n; i++) {
        if (out->items[i].fill != NULL) {
            broker_fill_run(out->items[i].fill, out->items[i].msg != NULL);
            out->items[i].fill = NULL;
        }
    }
}

void
broker_outbox_fini(broker_outbox *out)
{
    for (size_t i = 0; i < out->n; i++) {
        if (out->items[i].fill != NULL)
            broker_fill_run(out->items[i].fill, 0);
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
                broker_fill_run(fill, 0);
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
    if (rep->code != STOKER_OK && rep->code != STOKER_RETRY && rep->code != STOKER_NO_PRODUCERS &&
        rep->code != STOKER_END_OF_DATA)
        b->c.refused++;
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

void
add_event(broker *b, stoker_event_kind kind, const producer *p, uint64_t now_ms, const char *reason)
{
    stoker_event *e = &b->events[b->n_events % EVENT_LOG];
    memset(e, 0, sizeof(*e));
    e->index = ++b->n_events;
    e->kind = kind;
    e->producer = p->id;
    snprintf(e->name, sizeof(e->name), "%s", p->name);
    e->at_s = uptime_s(b, now_ms);
    snprintf(e->reason, sizeof(e->reason), "%s", reason != NULL ? reason : "");
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

// --- lifecycle ----------------------------------------------------------------------------------

broker *
broker_create(const broker_config *cfg, uint64_t now_ms)
{
    broker *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return NULL;
    b->cfg = *cfg;
    if (cfg->token != NULL)
        snprintf(b->token, sizeof(b->token), "%s", cfg->token);
    b->cfg.token = b->token;
    b->start_ms = now_ms;
    b->producers = calloc(cfg->max_producers, sizeof(*b->producers));
    b->trainers = calloc(cfg->max_trainers, sizeof(*b->trainers));
    if (b->producers == NULL || b->trainers == NULL) {
        free(b->producers);
        free(b->trainers);
        free(b);
        return NULL;
    }
    if (cfg->has_schema) {
        b->has_schema = 1;
        b->schema = cfg->schema;
        b->example_bytes = stoker_schema_example_bytes(&b->schema);
    }
    if (cfg->arena_bytes > 0) {
        char err[256];
        uint64_t bytes = cfg->arena_bytes < cfg->max_bytes ? cfg->arena_bytes : cfg->max_bytes;
        if (broker_arena_create(bytes, &b->arena, err, sizeof(err)) != STOKER_OK)
            stoker_warn("shm-off: no shared memory for local trainers: %s", err);
        else
            stoker_info("shm: %llu bytes of shared memory for trainers on this host",
                        (unsigned long long)bytes);
    }
    b->queue_depth = cfg->queue_depth;
    if (cfg->dataset_size > 0 &&
        (b->epochs = epochs_create(cfg->dataset_size, cfg->shuffle_seed, cfg->shard_items,
                                   cfg->epochs, cfg->strict_epochs)) == NULL) {
        free(b->producers);
        free(b->trainers);
        free(b);
        return NULL;
    }
    b->next_producer_id = 1;
    b->next_trainer_id = 1;
    b->next_lease_id =
        cfg->first_lease_id != 0 ? cfg->first_lease_id : (stoker_random_u64() >> 16) | 1;
    return b;
}

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

void
broker_destroy(broker *b, broker_outbox *out)
{
    if (b == NULL)
        return;
    for (uint32_t i = 0; i < b->n_producers; i++) {
        producer *p = b->producers[i];
        for (parked *k = p->pushes, *next; k != NULL; k = next) {
            next = k->next;
            if (out != NULL)
                outbox_add(out, k->token, NULL);
            free_parked(k);
        }
        queue_fini(&p->q);
        trained_fini(&p->trained);
        stoker_labels_fini(&p->labels);
        free(p);
    }
    for (parked *k = b->pulls, *next; k != NULL; k = next) {
        next = k->next;
        if (out != NULL)
            outbox_add(out, k->token, NULL);
        free_parked(k);
    }
    for (uint32_t i = 0; i < b->n_trainers; i++) {
        trainer *t = b->trainers[i];
        for (lease *l = t->leases, *next; l != NULL; l = next) {
            next = l->next;
            free_lease(l);
        }
        free(t);
    }
    group_destroy_all(b);
    free(b->producers);
    free(b->trainers);
    free(b->authed);
    broker_arena_destroy(b->arena);
    epochs_destroy(b->epochs);
    free(b);
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

static uint32_t
trainers_connected(const broker *b, int in_arena)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < b->n_trainers; i++)
        n += b->trainers[i]->connected &&
             (!in_arena || b->trainers[i]->delivery == STOKER_DELIVERY_SHM);
    return n;
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

// --- dispatch -----------------------------------------------------------------------------------

static void dispatch(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
                     broker_outbox *out);

void
broker_handle(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
              broker_outbox *out)
{
    dispatch(b, token, pipe, req, now_ms, out);
    settle(b, now_ms, out);
}

static void
dispatch(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
         broker_outbox *out)
{
    switch (req->method) {
    case STOKER_HELLO:
        handle_hello(b, token, pipe, req, now_ms, out);
        return;
    case STOKER_STATUS:
        if (b->token[0] != '\0' && !pipe_authed(b, pipe)) {
            send_code(b, out, token, STOKER_UNAUTHENTICATED,
                      "status needs a hello with the token on this connection first");
            stoker_request_free(req);
            return;
        }
        handle_status(b, token, req, now_ms, out);
        return;
    default:
        break;
    }
    if (b->token[0] != '\0' && !pipe_authed(b, pipe)) {
        // Every connection says hello with the token before anything else; a client whose
        // connection was replaced (a reconnect) is told to say hello again.
        char who[96];
        stoker_warn("unauthenticated: %s request from %s before hello",
                    req->method == STOKER_PUSH   ? "push"
                    : req->method == STOKER_PULL ? "pull"
                                                 : "a",
                    peer(b, pipe, who, sizeof(who)));
        send_code(b, out, token, STOKER_UNKNOWN_PEER,
                  "unauthenticated connection: say hello with the token first");
        stoker_request_free(req);
        return;
    }
    if (!b->has_schema) {
        send_code(b, out, token, STOKER_UNKNOWN_PEER, "say hello first");
        stoker_request_free(req);
        return;
    }
    switch (req->method) {
    case STOKER_PUSH:
        handle_push(b, token, pipe, req, now_ms, out);
        break;
    case STOKER_PULL:
        handle_pull(b, token, pipe, req, now_ms, out);
        break;
    case STOKER_ACK:
        handle_ack(b, token, req, now_ms, out);
        break;
    case STOKER_GOODBYE:
        handle_goodbye(b, token, req, now_ms, out);
        break;
    case STOKER_HEARTBEAT:
        handle_heartbeat(b, token, pipe, req, now_ms, out);
        break;
    case STOKER_SHARD:
        epochs_handle_shard(b, token, pipe, req, now_ms, out);
        break;
    default:
        send_code(b, out, token, STOKER_INVALID, "unknown method %d", (int)req->method);
        stoker_request_free(req);
        break;
    }
}

void
broker_refuse(broker *b, void *token, uint32_t pipe, int code, const char *message,
              broker_outbox *out)
{
    stoker_warn("bad-request: pipe %u: %s", pipe, message);
    send_code(b, out, token, code, "%s", message);
}
