// The broker's top (see broker.h): configuration defaults, create/destroy, and the dispatch of
// each decoded request to the room that handles it. It stands above the rooms and may call any of
// them (broker_internal.h) and the core (broker_core.c: state, lookups, outbox, replies); no room
// calls back into it. The rooms: broker_push.c, broker_session.c, broker_lease.c, broker_loss.c,
// broker_queues.c, broker_report.c, broker_epoch.c, broker_group.c, broker_arena.c, with
// broker_commit.c and broker_trained.c below them. This file handles no request itself.
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    cfg->autoscale_headroom = 1.2;
    cfg->autoscale_min = 1;
    cfg->autoscale_max = 64;
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
        b->example_bytes = broker_example_bytes(&b->schema);
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
                                   cfg->epochs, !cfg->overlap_epochs)) == NULL) {
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
    group_destroy_all(b, out);
    free(b->reported);
    free(b->producers);
    free(b->trainers);
    free(b->authed);
    broker_arena_destroy(b->arena);
    epochs_destroy(b->epochs);
    free(b);
}

struct broker_arena *
broker_shared_memory(const broker *b)
{
    return b->arena;
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
    case STOKER_SCALED:
        // A controller reports before any producer may have come (a pool scaled from 0).
        if (b->token[0] != '\0' && !pipe_authed(b, pipe)) {
            send_code(b, out, token, STOKER_UNAUTHENTICATED,
                      "scaled needs a hello with the token on this connection first");
            stoker_request_free(req);
            return;
        }
        autoscale_scaled(b, token, req, now_ms, out);
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
        // A trainer of a broker that died may report what it trained before any producer came
        // back (handle_heartbeat, issue 26): kept for the producers' sessions.
        if (req->method == STOKER_HEARTBEAT && req->n_trained > 0)
            trained_reported(b, req);
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
