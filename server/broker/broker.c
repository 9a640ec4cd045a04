// The broker's top floor (see broker.h): configuration defaults, create/destroy, the method table
// that checks each request's preconditions once and hands it to its handler, the public entry
// points for losses and ticks, and settle(), the one loop that serves parked requests until
// nothing moves. It may call every floor below (internal.h); nothing calls back into it. It
// handles no request itself.
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ahead.h"
#include "arena.h"
#include "group.h"
#include "internal.h"
#include "jobs.h"
#include "mix.h"
#include "shards.h"
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
    cfg->silent_grace_ms = 30000;
    cfg->trainer_timeout_ms = 10000;
    cfg->park_ms = 250;
    cfg->max_pull_wait_ms = 5000;
    cfg->max_producers = 1024;
    cfg->max_trainers = 64;
    cfg->max_chunk_examples = 1u << 20;
    cfg->max_parked = 512;
    cfg->shard_items = 32;
    cfg->group_steps_ahead = 4;
    cfg->job_timeout_ms = 30000;
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
    b->instance_id = stoker_random_u64(); // never 0
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
        b->example_bytes = queues_example_bytes(&b->schema);
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
    for (uint32_t i = 0; i < b->n_followers; i++)
        broker_destroy(b->followers[i], out);
    free(b->followers);
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
            mix_release(l->mix);
            free_lease(l);
        }
        mix_release(t->mix);
        free(t);
    }
    group_destroy_all(b, out);
    ahead_free(b);
    free(b->reported);
    free(b->producers);
    free(b->trainers);
    free(b->authed);
    if (b->lead == NULL) { // a follower borrows its lead's
        broker_arena_destroy(b->arena);
        epochs_destroy(b->epochs);
    }
    free(b);
}

struct broker_arena *
broker_shared_memory(const broker *b)
{
    return b->arena;
}

// --- dispatch -----------------------------------------------------------------------------------

// A request kind's handler. The dispatcher owns req: it frees it after the handler unless the
// handler returns 1, when it kept it (parked, or queued: then it is freed with what kept it).
typedef int (*handler_fn)(broker *b, void *token, uint32_t pipe, stoker_request *req,
                          uint64_t now_ms, broker_outbox *out);

// What a request kind needs before its handler runs: checked once, here, for every kind.
enum {
    NEEDS_AUTH = 1,   // with a token: the connection said hello with it
    NEEDS_SCHEMA = 2, // a producer said hello (the schema is known)
};

// One row per request kind: its handler, its preconditions and its name for logs.
typedef struct method {
    stoker_method method;
    handler_fn handle;
    unsigned needs;
    const char *name;
} method;

static const method methods[] = {
    {STOKER_HELLO, session_handle_hello, 0, "hello"},
    // A status or a controller's report may come before any producer (a pool scaled from 0).
    {STOKER_STATUS, report_status, NEEDS_AUTH, "status"},
    {STOKER_SCALED, autoscale_scaled, NEEDS_AUTH, "scaled"},
    {STOKER_PUSH, push_handle, NEEDS_AUTH | NEEDS_SCHEMA, "push"},
    {STOKER_PULL, pull_handle, NEEDS_AUTH | NEEDS_SCHEMA, "pull"},
    {STOKER_ACK, pull_handle_ack, NEEDS_AUTH | NEEDS_SCHEMA, "ack"},
    {STOKER_GOODBYE, session_handle_goodbye, NEEDS_AUTH | NEEDS_SCHEMA, "goodbye"},
    {STOKER_HEARTBEAT, session_handle_heartbeat, NEEDS_AUTH | NEEDS_SCHEMA, "heartbeat"},
    {STOKER_SHARD, shards_handle, NEEDS_AUTH | NEEDS_SCHEMA, "shard"},
    {STOKER_MIX, pull_handle_mix, NEEDS_AUTH | NEEDS_SCHEMA, "mix"},
};

static const method *
find_method(stoker_method m)
{
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        if (methods[i].method == m)
            return &methods[i];
    return NULL;
}

// Checks m's preconditions for req from pipe: 1 when its handler may run, else 0 after answering
// (req is still the caller's).
static int
admitted(broker *b, const method *m, void *token, uint32_t pipe, const stoker_request *req,
         broker_outbox *out)
{
    if ((m->needs & NEEDS_AUTH) && b->token[0] != '\0' && !session_pipe_authed(b, pipe)) {
        if (!(m->needs & NEEDS_SCHEMA)) {
            send_code(b, out, token, STOKER_UNAUTHENTICATED,
                      "%s needs a hello with the token on this connection first", m->name);
            return 0;
        }
        // Every connection says hello with the token before anything else; a client whose
        // connection was replaced (a reconnect) is told to say hello again.
        char who[96];
        stoker_warn("unauthenticated: %s request from %s before hello",
                    req->method == STOKER_PUSH || req->method == STOKER_PULL ? m->name : "a",
                    session_peer(b, pipe, who, sizeof(who)));
        send_code(b, out, token, STOKER_UNKNOWN_PEER,
                  "unauthenticated connection: say hello with the token first");
        return 0;
    }
    if ((m->needs & NEEDS_SCHEMA) && !b->has_schema) {
        // A trainer of a broker that died may report what it trained before any producer came
        // back (session_handle_heartbeat): kept for the producers' sessions. A named job's report
        // waits for its hello (which says it again) to reach that job, not the lead's (jobs.c).
        if (req->method == STOKER_HEARTBEAT && req->n_trained > 0 && jobs_is(b, req->job))
            trained_reported(b, req);
        send_code(b, out, token, STOKER_UNKNOWN_PEER, "say hello first");
        return 0;
    }
    return 1;
}

// After any change: pulls take what became available, pushes fill the room that made, until
// nothing moves; with jobs sharing the producers (jobs.c) the followers' pulls too (a push
// queues for every job, a follower's pull makes room for the lead's parked pushes). Each round
// answers at least one parked request, so this ends.
static void
settle(broker *b, uint64_t now_ms, broker_outbox *out)
{
    jobs_sync(b, now_ms); // producers may have come, gone or pushed
    queues_resize(b);     // producers or trainers may have come or gone
    for (uint32_t i = 0; i < b->n_followers; i++)
        queues_resize(b->followers[i]);
    uint32_t moved;
    do {
        moved = pull_serve_parked(b, now_ms, out) + push_serve_parked(b, now_ms, out);
        for (uint32_t i = 0; i < b->n_followers; i++)
            moved += pull_serve_parked(b->followers[i], now_ms, out);
    } while (moved > 0);
}

// The broker of job name for a trainer's hello: the lead's own (named by its first trainer, or
// starting again after it ended), a follower, or a new follower. NULL after answering when no
// job can be made for it.
static broker *
job_for_hello(broker *b, void *token, const stoker_request *req, uint64_t now_ms,
              broker_outbox *out)
{
    const char *name = req->job;
    broker *j = jobs_find(b, name);
    char why[256];
    if (j != NULL && jobs_detached(j, why, sizeof(why))) {
        send_code(b, out, token, STOKER_INVALID,
                  "%s; a consumer of it cannot go on exactly (start it under another job name)",
                  why);
        return NULL;
    }
    if (!b->job_named || (j == b && b->job_state == STOKER_JOB_ENDED)) {
        jobs_start(b, name, now_ms);
        return b;
    }
    if (j != NULL && j->job_state != STOKER_JOB_ENDED)
        return j;
    if (j != NULL) { // it ended: a job of that name starts anew
        jobs_remove(b, j);
        broker_destroy(j, out);
    }
    // A job joining a dataset whose epochs began takes the newest one open as its first, whole:
    // what the others took of it already is made again for it (jobs_add_late).
    uint32_t from = b->epochs != NULL && jobs_started(b) ? epochs_newest_open(b->epochs) : 0;
    if (from == UINT32_MAX)
        from = epochs_next_unopened(b->epochs);
    if (from == UINT32_MAX) {
        send_code(b, out, token, STOKER_INVALID,
                  "job '%s' joins a dataset whose every epoch (--epochs) was made for job '%s': "
                  "no epoch is left for it; give it a broker of its own",
                  name, b->job);
        return NULL;
    }
    if (b->n_followers + 1 >= JOBS_MAX) // room: the oldest ended job goes
        for (uint32_t i = 0; i < b->n_followers; i++)
            if (b->followers[i]->job_state == STOKER_JOB_ENDED) {
                broker *gone = b->followers[i];
                jobs_remove(b, gone);
                broker_destroy(gone, out);
                break;
            }
    broker_config cfg = b->cfg;
    cfg.arena_bytes = 0; // the lead's arena serves every job's trainers on this host
    cfg.dataset_size = 0;
    // Leases of every job name regions of that one arena: each job's ids in a range of its own.
    cfg.first_lease_id = b->next_lease_id + ((uint64_t)(b->n_followers + 1) << 56);
    broker *f = broker_create(&cfg, now_ms);
    if (f != NULL)
        f->arena = b->arena;
    int late = b->epochs != NULL && jobs_started(b);
    if (f == NULL || (late ? jobs_add_late(b, f, name, from, now_ms)
                           : jobs_add(b, f, name, now_ms)) != STOKER_OK) {
        broker_destroy(f, NULL);
        send_code(b, out, token, STOKER_RETRY,
                  "job '%s': no room for another job (at most %d share the producers)", name,
                  JOBS_MAX);
        return NULL;
    }
    return f;
}

// The broker (job) that handles req: a trainer's hello goes to its job's, a request of a
// follower's trainer to that follower, everything else (producers, status) to the lead. NULL
// when answered already.
static broker *
route(broker *b, void *token, const stoker_request *req, uint64_t now_ms, broker_outbox *out)
{
    if (req->method == STOKER_HELLO)
        return req->role == STOKER_ROLE_TRAINER ? job_for_hello(b, token, req, now_ms, out) : b;
    if (b->n_followers == 0 || req->method == STOKER_STATUS ||
        find_producer(b, req->session) != NULL || find_trainer(b, req->session) != NULL)
        return b;
    broker *f = jobs_find_trainer(b, req->session);
    return f != NULL ? f : b;
}

void
broker_handle(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
              broker_outbox *out)
{
    const method *m = find_method(req->method);
    broker *j = m != NULL ? route(b, token, req, now_ms, out) : b;
    if (m == NULL) {
        send_code(b, out, token, STOKER_INVALID, "unknown method %d", (int)req->method);
        stoker_request_free(req);
    } else if (j == NULL || !admitted(j, m, token, pipe, req, out) ||
               !m->handle(j, token, pipe, req, now_ms, out)) {
        stoker_request_free(req);
    }
    // A trainer's hello to another job: its connection may ask the lead for the status.
    if (j != NULL && j != b && session_pipe_authed(j, pipe))
        session_authorize_pipe(b, pipe);
    settle(b, now_ms, out);
}

void
broker_pipe_closed(broker *b, uint32_t pipe, uint64_t now_ms, broker_outbox *out)
{
    loss_pipe_gone(b, pipe, now_ms, 1, out);
    for (uint32_t i = 0; i < b->n_followers; i++)
        loss_pipe_gone(b->followers[i], pipe, now_ms, 1, out);
    settle(b, now_ms, out);
}

void
broker_pipe_reset(broker *b, uint32_t pipe, uint64_t now_ms, broker_outbox *out)
{
    stoker_info("connection-reset: pipe %u closed by the listener restart; its peer reconnects",
                pipe);
    loss_pipe_gone(b, pipe, now_ms, 0, out);
    for (uint32_t i = 0; i < b->n_followers; i++)
        loss_pipe_gone(b->followers[i], pipe, now_ms, 0, out);
    settle(b, now_ms, out);
}

void
broker_tick(broker *b, uint64_t now_ms, broker_outbox *out)
{
    loss_tick(b, now_ms, out);
    for (uint32_t i = 0; i < b->n_followers; i++)
        loss_tick(b->followers[i], now_ms, out);
    jobs_tick(b, now_ms);
    settle(b, now_ms, out); // parked pulls past their wait get what there is (possibly nothing)
}

void
broker_refuse(broker *b, void *token, uint32_t pipe, int code, const char *message,
              broker_outbox *out)
{
    stoker_warn("bad-request: pipe %u: %s", pipe, message);
    send_code(b, out, token, code, "%s", message);
}
