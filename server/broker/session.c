// The broker's sessions: hello (authentication by token, schema agreement, joining or rejoining
// as a producer or trainer), goodbye and heartbeat, and which connections are authenticated.
// It does not move examples (push.c, lease.c) nor notice silence (loss.c).
// A handler (floor 5): it may use the floors below (internal.h), drop.c included (drop_trainer).
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "arena.h"
#include "group.h"
#include "internal.h"
#include "jobs.h"
#include "mix.h"
#include "stoker/error.h"
#include "stoker/log.h"

// --- hello / goodbye / heartbeat ----------------------------------------------------------------

static int
token_ok(const broker *b, const char *given)
{
    if (b->token[0] == '\0')
        return 1;
    // Constant time in the token's length: compare every byte, accumulate differences.
    size_t n = strlen(b->token), m = strnlen(given, STOKER_TOKEN_MAX);
    unsigned char diff = (unsigned char)(n != m);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(b->token[i] ^ (i < m ? given[i] : 0));
    return diff == 0;
}

int
session_pipe_authed(const broker *b, uint32_t pipe)
{
    for (uint32_t i = 0; i < b->n_authed; i++) {
        if (b->authed[i] == pipe)
            return 1;
    }
    return 0;
}

int
session_authorize_pipe(broker *b, uint32_t pipe)
{
    if (session_pipe_authed(b, pipe))
        return STOKER_OK;
    if (b->n_authed == b->cap_authed) {
        uint32_t cap = b->cap_authed ? b->cap_authed * 2 : 64;
        uint32_t *a = realloc(b->authed, cap * sizeof(*a));
        if (a == NULL)
            return STOKER_NOMEM;
        b->authed = a;
        b->cap_authed = cap;
    }
    b->authed[b->n_authed++] = pipe;
    return STOKER_OK;
}

void
session_forget_pipe(broker *b, uint32_t pipe)
{
    for (uint32_t i = 0; i < b->n_authed; i++) {
        if (b->authed[i] == pipe) {
            b->authed[i] = b->authed[--b->n_authed];
            return;
        }
    }
}

const char *
session_peer(const broker *b, uint32_t pipe, char *buf, size_t len)
{
    snprintf(buf, len, "pipe %u", pipe);
    if (b->cfg.describe_peer != NULL)
        b->cfg.describe_peer(pipe, buf, len);
    return buf;
}

// Why the schema a producer gave the broker still holds (writes it to buf), or NULL when it may
// be forgotten: it came from a producer (not --schema), no producer is alive, nothing is queued
// or in flight, no trainer that learned it is connected, and the broker serves streams (a
// dataset's epochs hold items of that schema).
static const char *
schema_held(const broker *b, char *buf, size_t len)
{
    uint32_t trainers = 0;
    for (uint32_t i = 0; i < b->n_trainers; i++)
        trainers += b->trainers[i]->connected != 0;
    if (b->cfg.has_schema)
        snprintf(buf, len, "it was given with --schema");
    else if (producers_alive(b) > 0 || b->c.queued > 0 || b->c.in_flight > 0 || trainers > 0)
        snprintf(buf, len,
                 "the broker keeps its first producer's schema while producers are alive (%u), "
                 "examples are queued (%llu) or in flight (%llu), or trainers that know it are "
                 "connected (%u)",
                 producers_alive(b), (unsigned long long)b->c.queued,
                 (unsigned long long)b->c.in_flight, trainers);
    else if (b->epochs != NULL)
        snprintf(buf, len, "a dataset broker keeps its schema for its epochs (restart it)");
    else
        return NULL;
    return buf;
}

// Whether req's schema may be b's: equal to it, or b's is forgotten because nothing of it is left
// anywhere. Else 0, after the refusal.
static int
producer_schema_ok(broker *b, void *token, const stoker_request *req, broker_outbox *out)
{
    char want[512], got[512], held[256];
    if (!req->has_schema) {
        send_code(b, out, token, STOKER_INVALID, "producer '%s' sent no schema", req->name);
        return 0;
    }
    if (!b->has_schema || stoker_schema_equal(&b->schema, &req->schema))
        return 1;
    stoker_schema_format(&req->schema, got, sizeof(got));
    stoker_schema_format(&b->schema, want, sizeof(want));
    if (schema_held(b, held, sizeof(held)) == NULL) {
        // Nothing of the old schema is left anywhere: the new kind of producer starts afresh.
        stoker_info("schema-forgotten: %s (no producer alive, nothing queued or in flight, "
                    "no trainer connected); producer '%s' brings %s",
                    want, req->name, got);
        b->has_schema = 0;
        return 1;
    }
    stoker_warn("schema-mismatch: producer '%s' sends %s, broker expects %s: %s", req->name, got,
                want, held);
    send_code(b, out, token, STOKER_SCHEMA_MISMATCH,
              "schema mismatch: producer '%s' sends %s, broker expects %s: %s", req->name, got,
              want, held);
    return 0;
}

// Whether req's producer serves what b serves (a dataset or a stream); --dataset-size auto takes
// the first dataset producer's count. Else 0, after the refusal.
static int
producer_dataset_ok(broker *b, void *token, const stoker_request *req, broker_outbox *out)
{
    char why[STOKER_MESSAGE_MAX - 16];
    if (b->epochs == NULL && b->cfg.dataset_auto && req->dataset_size > 0) {
        b->epochs = epochs_create(req->dataset_size, b->cfg.shuffle_seed, b->cfg.shard_items,
                                  b->cfg.epochs, !b->cfg.overlap_epochs);
        if (b->epochs == NULL) {
            send_code(b, out, token, STOKER_NOMEM, "broker out of memory for a dataset");
            return 0;
        }
        stoker_info("dataset: %llu items (--dataset-size auto, from producer '%s')",
                    (unsigned long long)req->dataset_size, req->name);
    }
    int rv = b->epochs != NULL ? epochs_check_hello(b, req, why, sizeof(why))
             : b->cfg.dataset_auto
                 ? stoker_errorf(why, sizeof(why), STOKER_DATASET_MISMATCH,
                                 "dataset mismatch: producer '%s' serves a stream, the broker a "
                                 "dataset (--dataset-size auto; start it with --items)",
                                 req->name)
             : req->dataset_size > 0
                 ? stoker_errorf(why, sizeof(why), STOKER_DATASET_MISMATCH,
                                 "dataset mismatch: producer '%s' serves a dataset of %llu items, "
                                 "the broker streams (start it with --dataset-size)",
                                 req->name, (unsigned long long)req->dataset_size)
                 : STOKER_OK;
    if (rv == STOKER_OK)
        return 1;
    stoker_warn("dataset-mismatch: %s", why);
    send_code(b, out, token, rv, "%s", why);
    return 0;
}

// A slot for a new producer: free, or the slot of one that is gone and owes nothing (freed).
// 0 when every slot is taken, after the refusal.
static int
producer_slot(broker *b, void *token, broker_outbox *out)
{
    if (b->n_producers < b->cfg.max_producers)
        return 1;
    uint32_t i;
    for (i = 0; i < b->n_producers; i++) {
        producer *old = b->producers[i];
        if (old->status != STOKER_PRODUCER_ALIVE && old->q.examples == 0 && old->in_flight == 0 &&
            old->pushes == NULL)
            break;
    }
    if (i == b->n_producers) {
        send_code(b, out, token, STOKER_LIMIT, "too many producers (at most %u)",
                  b->cfg.max_producers);
        return 0;
    }
    queue_fini(&b->producers[i]->q);
    trained_fini(&b->producers[i]->trained);
    stoker_labels_fini(&b->producers[i]->labels);
    free(b->producers[i]);
    b->producers[i] = b->producers[--b->n_producers];
    return 1;
}

// Ends the returning window (returning_until_ms) once the peers the broker before us knew are
// back: as many producers that knew it as it had alive, and as many trainers connected as it
// had, as a returning producer said. Its time bound stays a bound for peers that never return,
// and for producers that said nothing of that broker (the window then runs out its time).
static void
returning_check(broker *b, uint64_t now_ms)
{
    if (now_ms >= b->returning_until_ms || b->returning_producers == 0 ||
        b->returned_producers < b->returning_producers ||
        trainers_connected(b, 0) < b->returning_trainers)
        return;
    stoker_info("returning-done: the %u producers and %u trainers of the broker before this one "
                "are back after %.3f s (the window would have lasted %.3f s more)",
                b->returning_producers, b->returning_trainers,
                (double)(now_ms - b->start_ms) / 1000.0,
                (double)(b->returning_until_ms - now_ms) / 1000.0);
    b->returning_until_ms = now_ms;
}

// The producer of req's new session, joined; NULL after the refusal.
static producer *
producer_join(broker *b, void *token, uint32_t pipe, const stoker_request *req, uint64_t now_ms,
              broker_outbox *out)
{
    producer *p;
    if (!producer_slot(b, token, out))
        return NULL;
    if ((p = calloc(1, sizeof(*p))) == NULL) {
        send_code(b, out, token, STOKER_NOMEM, "broker out of memory");
        return NULL;
    }
    if (!b->has_schema) {
        char want[512];
        b->has_schema = 1;
        b->schema = req->schema;
        b->example_bytes = queues_example_bytes(&b->schema);
        stoker_schema_format(&b->schema, want, sizeof(want));
        stoker_info("schema %s (from producer '%s')", want, req->name);
    }
    p->id = b->next_producer_id++;
    snprintf(p->name, sizeof(p->name), "%s", req->name[0] ? req->name : "producer");
    snprintf(p->pool, sizeof(p->pool), "%s", req->pool[0] ? req->pool : "default");
    p->session = req->session;
    p->status = STOKER_PRODUCER_ALIVE;
    p->pipe = pipe;
    p->last_seen_ms = now_ms;
    p->next_seq = req->next_seq;
    trained_init(&p->trained, req->next_seq); // what came before is not ours to keep
    if (req->next_seq > 0) { // a session a dead broker held: its other producers may follow
        b->returning_until_ms = now_ms + b->cfg.producer_timeout_ms;
        // and its trainers, whose report of what they trained must come before anything is
        // handed out: each dials anew within RETURNING_TRAINERS_MS of our start.
        if (b->returning_until_ms < b->start_ms + RETURNING_TRAINERS_MS)
            b->returning_until_ms = b->start_ms + RETURNING_TRAINERS_MS;
    }
    if (req->known_producers > 0) { // it knew a broker before us: one of the peers awaited
        b->returned_producers++;
        if (req->known_producers > b->returning_producers)
            b->returning_producers = req->known_producers;
        if (req->known_trainers > b->returning_trainers)
            b->returning_trainers = req->known_trainers;
    }
    trained_reported_apply(b, p);
    queue_init(&p->q, &b->schema);
    b->producers[b->n_producers++] = p;
    stoker_info("producer-joined: producer %u '%s' session %016llx from seq %llu", p->id, p->name,
                (unsigned long long)p->session, (unsigned long long)p->next_seq);
    add_event(b, STOKER_EVENT_PRODUCER_JOINED, p, now_ms, "hello");
    return p;
}

// Producer p, known to b, said hello again (a new connection, or back from silence).
static void
producer_again(broker *b, producer *p, uint32_t pipe, const stoker_request *req, uint64_t now_ms)
{
    if (p->status != STOKER_PRODUCER_ALIVE) {
        p->status = STOKER_PRODUCER_LOST; // revive() below reports the reconnection
        revive(b, p, pipe, now_ms, "hello again");
    }
    p->pipe = pipe;
    p->last_seen_ms = now_ms;
    if (req->next_seq > p->next_seq) {
        // The producer went on without us (we lost examples it sent, e.g. a restart of
        // ours is impossible here since we know it). Follow it, loudly.
        stoker_warn("seq-jump: producer %u '%s' resumes at %llu, broker held up to %llu", p->id,
                    p->name, (unsigned long long)req->next_seq, (unsigned long long)p->next_seq);
        trained_add(&p->trained, p->next_seq, req->next_seq - p->next_seq); // never coming
        p->skipped += req->next_seq - p->next_seq;
        p->next_seq = req->next_seq;
    }
}

static void
hello_producer(broker *b, void *token, uint32_t pipe, const stoker_request *req, uint64_t now_ms,
               broker_outbox *out)
{
    if (!producer_schema_ok(b, token, req, out) || !producer_dataset_ok(b, token, req, out))
        return;
    producer *p = find_producer(b, req->session);
    if (p != NULL)
        producer_again(b, p, pipe, req, now_ms);
    else if ((p = producer_join(b, token, pipe, req, now_ms, out)) == NULL)
        return;
    // Its label map, as said in this hello (a restarted producer may serve another folder).
    stoker_labels labels;
    if (stoker_labels_copy(&labels, &req->labels) == STOKER_OK) {
        stoker_labels_fini(&p->labels);
        p->labels = labels;
    }
    queues_resize(b); // one more producer alive: the depth it is told is the current one
    returning_check(b, now_ms);
    stoker_reply rep = {
        .code = STOKER_OK,
        .peer_id = p->id,
        .next_seq = p->next_seq,
        .heartbeat_ms = b->cfg.producer_timeout_ms / 3,
        .max_chunk = queues_max_chunk(b),
        .trained_through = p->trained.through,
        // The current (sized) depth, plus the producer's share of what is held for commits
        // (commit_retain_depth): sizes its default retention, which follows it in push and
        // heartbeat replies as the broker resizes its queues.
        .queue_depth = commit_retain_depth(b),
        .has_schema = 1,
        .schema = b->schema,
        .broker_id = b->instance_id,
    };
    tell_peers(b, &rep);
    if (req->want_arena && b->arena != NULL) { // pushes by reference: arena.h
        snprintf(rep.arena_socket, sizeof(rep.arena_socket), "%s", broker_arena_socket(b->arena));
        rep.arena_ticket = broker_arena_pool_ticket(b->arena, p->session);
    }
    if (b->cfg.intake_port != NULL)
        rep.intake_port = b->cfg.intake_port(b->cfg.intake_arg, pipe);
    send_reply(b, out, token, &rep);
}

// The producers b knows, one event each in its current state (index 0: not in the log):
// producer_joined for the alive, producer_lost / producer_finished for the others, alive ones
// first, reason SNAPSHOT_REASON. A malloc'd array of *n (at most SNAPSHOT_MAX) the caller frees;
// NULL when there are none or out of memory (a trainer then learns only what happens next).
static stoker_event *
producers_snapshot(const broker *b, uint64_t now_ms, uint32_t *n)
{
    uint32_t cap = b->n_producers < SNAPSHOT_MAX ? b->n_producers : SNAPSHOT_MAX;
    if (cap == 0)
        return NULL;
    stoker_event *ev = calloc(cap, sizeof(*ev));
    if (ev == NULL)
        return NULL;
    uint32_t k = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < b->n_producers && k < cap; i++) {
            const producer *p = b->producers[i];
            if ((p->status == STOKER_PRODUCER_ALIVE) != (pass == 0))
                continue;
            stoker_event *e = &ev[k++];
            e->index = 0;
            e->kind = p->status == STOKER_PRODUCER_ALIVE  ? STOKER_EVENT_PRODUCER_JOINED
                      : p->status == STOKER_PRODUCER_LOST ? STOKER_EVENT_PRODUCER_LOST
                                                          : STOKER_EVENT_PRODUCER_FINISHED;
            e->producer = p->id;
            snprintf(e->name, sizeof(e->name), "%s", p->name);
            e->at_s = (double)(now_ms - b->start_ms) / 1000.0;
            snprintf(e->reason, sizeof(e->reason), "%s", SNAPSHOT_REASON);
        }
    }
    *n = k;
    return ev;
}

// For a trainer's hello that names a group: *g its group (admitted). 0 after the answer when it
// is not admitted (refused, or told to say hello again while a rank's holder may be alive).
static int
trainer_group_admit(broker *b, trainer *t, void *token, const stoker_request *req, uint64_t now_ms,
                    struct group **g, broker_outbox *out)
{
    char why[STOKER_MESSAGE_MAX];
    trainer *holder = NULL;
    int rv = group_admit(b, t, req, now_ms, g, &holder, why, sizeof(why));
    if (holder != NULL) {
        // A re-forming group claims a rank whose holder is silent (hung, partitioned): it is
        // lost, its group breaks, and the claim starts the new group (docs/groups.md).
        if (holder->connected)
            drop_trainer(b, holder, why, now_ms, out);
        else
            group_rank_lost(b, holder, why);
        rv = group_admit(b, t, req, now_ms, g, &holder, why, sizeof(why));
    }
    if (rv == STOKER_RETRY) {
        stoker_info("group-claim: %s", why);
        stoker_reply rep = {.code = rv, .heartbeat_ms = b->cfg.trainer_timeout_ms / 3};
        snprintf(rep.message, sizeof(rep.message), "%s", why);
        send_reply(b, out, token, &rep);
        return 0;
    }
    if (rv != STOKER_OK) {
        stoker_warn("group-refused: %s", why);
        send_code(b, out, token, rv, "%s", why);
        return 0;
    }
    return 1;
}

// The trainer of req's new session, joined; NULL after the refusal (no slot, no memory).
static trainer *
trainer_join(broker *b, void *token, const stoker_request *req, broker_outbox *out)
{
    if (b->n_trainers == b->cfg.max_trainers) {
        uint32_t i;
        for (i = 0; i < b->n_trainers; i++) {
            if (!b->trainers[i]->connected && b->trainers[i]->leases == NULL &&
                b->trainers[i]->parked_pulls == 0)
                break;
        }
        if (i == b->n_trainers) {
            send_code(b, out, token, STOKER_LIMIT, "too many trainers (at most %u)",
                      b->cfg.max_trainers);
            return NULL;
        }
        group_detach(b, b->trainers[i]);
        mix_release(b->trainers[i]->mix);
        free(b->trainers[i]);
        b->trainers[i] = b->trainers[--b->n_trainers];
    }
    trainer *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        send_code(b, out, token, STOKER_NOMEM, "broker out of memory");
        return NULL;
    }
    t->id = b->next_trainer_id++;
    snprintf(t->name, sizeof(t->name), "%s", req->name[0] ? req->name : "trainer");
    t->session = req->session;
    // A new trainer hears of events from now on (plus nothing older: the snapshot below).
    t->event_cursor = b->n_events;
    b->trainers[b->n_trainers++] = t;
    stoker_info("trainer-joined: trainer %u '%s'", t->id, t->name);
    return t;
}

// Nonzero, with why, when a trainer's hello asks for a mixture this broker cannot make: with a
// dataset, with length buckets or packed rows (not yet: docs/mixing.md), or one other than the
// one whose leases it still holds.
static int
mix_refused(const broker *b, const trainer *t, const stoker_request *req, char *why, size_t len)
{
    const stoker_mix *m = &req->mix;
    const stoker_batching *bt = &req->batching;
    int by_tokens = stoker_batching_active(bt);
    const char *with = b->epochs != NULL           ? "a dataset"
                       : by_tokens && bt->buckets  ? "length buckets"
                       : by_tokens && bt->pack > 0 ? "packed rows"
                                                   : NULL;
    if (m->n > 0 && with != NULL) {
        snprintf(why, len, "a mixture of sources with %s is not supported yet (docs/mixing.md)",
                 with);
        return 1;
    }
    if (t != NULL && t->mix != NULL && t->leases != NULL && !stoker_mix_equal(&t->mix->spec, m)) {
        snprintf(why, len,
                 "trainer %u '%s' says hello with another mixture while it holds leases of its "
                 "first: acknowledge or give them back first",
                 t->id, t->name);
        return 1;
    }
    return 0;
}

// Gives t the mixture its hello asked for (none: n 0): the books go on when it is the same.
static int
mix_take(trainer *t, const stoker_mix *spec, int tokens)
{
    if (t->mix != NULL && stoker_mix_equal(&t->mix->spec, spec) && t->mix->tokens == tokens)
        return STOKER_OK;
    mix_release(t->mix);
    t->mix = NULL;
    if (spec->n == 0)
        return STOKER_OK;
    if ((t->mix = mix_new(spec)) == NULL)
        return STOKER_NOMEM;
    t->mix->tokens = tokens; // its books count tokens
    char text[256];
    stoker_mix_format(spec, text, sizeof(text));
    stoker_info("trainer-mix: trainer %u '%s' mixes %s (stop '%s')", t->id, t->name, text,
                stoker_mix_stop_name(spec->stop));
    return STOKER_OK;
}

static void
hello_trainer(broker *b, void *token, uint32_t pipe, const stoker_request *req, uint64_t now_ms,
              broker_outbox *out)
{
    trainer *t = find_trainer(b, req->session);
    struct group *g = NULL;
    char why[STOKER_MESSAGE_MAX];
    if (stoker_batching_check(&req->batching, b->has_schema ? &b->schema : NULL, req->group_batch,
                              why, sizeof(why)) != STOKER_OK) {
        stoker_warn("trainer-refused: '%s': %s", req->name, why);
        send_code(b, out, token, STOKER_INVALID, "%s", why);
        return;
    }
    if (mix_refused(b, t, req, why, sizeof(why))) {
        stoker_warn("trainer-refused: '%s': %s", req->name, why);
        send_code(b, out, token, STOKER_INVALID, "%s", why);
        return;
    }
    if (req->group[0] != '\0' && !trainer_group_admit(b, t, token, req, now_ms, &g, out))
        return;
    if (t == NULL) {
        if ((t = trainer_join(b, token, req, out)) == NULL)
            return;
    } else if (!t->connected) {
        stoker_info("trainer-reconnected: trainer %u '%s'", t->id, t->name);
    }
    t->connected = 1;
    t->left = 0;
    t->pipe = pipe;
    trained_reported(b, req); // what it trained, maybe on a broker that died
    t->last_seen_ms = now_ms;
    t->pid = req->pid;       // /status's consumers
    t->commit = req->commit; // its leases stay held until it commits (commit.c)
    t->batching = req->batching;
    static const stoker_mix none = {0};
    // A rank's mixture is its group's (group.c): every rank's alike, one set of books.
    if (mix_take(t, g == NULL ? &req->mix : &none, stoker_batching_active(&req->batching)) !=
        STOKER_OK) {
        send_code(b, out, token, STOKER_NOMEM, "broker out of memory");
        return;
    }
    if (g != NULL) {
        t->said_steps = req->group_steps;
        group_attach(b, g, t, req->rank);
    }
    returning_check(b, now_ms);
    stoker_reply rep = {
        .code = STOKER_OK,
        .peer_id = t->id,
        .heartbeat_ms = b->cfg.trainer_timeout_ms / 3,
        .has_schema = b->has_schema,
        .schema = b->schema,
        .broker_id = b->instance_id,
    };
    if (req->want_arena && b->arena != NULL) { // shared memory: see arena.h
        snprintf(rep.arena_socket, sizeof(rep.arena_socket), "%s", broker_arena_socket(b->arena));
        rep.arena_ticket = broker_arena_ticket(b->arena);
    }
    stoker_event *snapshot = NULL;
    if (!t->pulled) {
        // Until its first pull (a hello may be repeated when its reply was lost), a trainer is
        // told who is there now, and hears of events from now on.
        snapshot = producers_snapshot(b, now_ms, &rep.n_events);
        rep.events = snapshot;
        t->event_cursor = b->n_events;
    }
    send_reply(b, out, token, &rep);
    free(snapshot);
}

int
session_handle_hello(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
                     broker_outbox *out)
{
    char who[96];
    if (!token_ok(b, req->token)) {
        stoker_warn("unauthenticated: hello from '%s' at %s with a wrong or missing token",
                    req->name, session_peer(b, pipe, who, sizeof(who)));
        send_code(b, out, token, STOKER_UNAUTHENTICATED, "wrong or missing token");
    } else if (b->token[0] != '\0' && session_authorize_pipe(b, pipe) != STOKER_OK) {
        send_code(b, out, token, STOKER_NOMEM, "broker out of memory");
    } else if (req->session == 0) {
        send_code(b, out, token, STOKER_INVALID, "hello without a session id");
    } else if (req->role == STOKER_ROLE_PRODUCER) {
        hello_producer(b, token, pipe, req, now_ms, out);
    } else if (req->role == STOKER_ROLE_TRAINER) {
        hello_trainer(b, token, pipe, req, now_ms, out);
    } else {
        send_code(b, out, token, STOKER_OK, NULL);
    }
    return 0;
}

int
session_handle_goodbye(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
                       broker_outbox *out)
{
    (void)pipe;
    producer *p = find_producer(b, req->session);
    trainer *t = p == NULL ? find_trainer(b, req->session) : NULL;
    if (t != NULL) {
        // A trainer that stops: what it holds unacknowledged goes to the others.
        if (t->connected) {
            lease_give_back(b, t, req->n_held,
                            req->held); // before drop_trainer redelivers the rest
            drop_trainer(b, t, NULL, now_ms, out);
        }
        t->left = 1;
        send_code(b, out, token, STOKER_OK, NULL);
    } else if (p == NULL) {
        send_code(b, out, token, STOKER_UNKNOWN_PEER, "unknown session: say hello first");
    } else {
        // Pushes still parked were abandoned by the producer (it stopped while they waited for
        // room): refuse them, so nothing is taken after goodbye and its answer is final.
        for (parked *k = p->pushes, *next; k != NULL; k = next) {
            next = k->next;
            send_code(b, out, k->token, STOKER_RETRY, "producer '%s' said goodbye", p->name);
            free_parked(k);
            b->n_parked--;
        }
        p->pushes = p->pushes_tail = NULL;
        epochs_release(b, p, "producer said goodbye");
        if (p->status != STOKER_PRODUCER_FINISHED) {
            p->status = STOKER_PRODUCER_FINISHED;
            stoker_info("producer-finished: producer %u '%s' after %llu examples", p->id, p->name,
                        (unsigned long long)p->next_seq);
            add_event(b, STOKER_EVENT_PRODUCER_FINISHED, p, now_ms, "goodbye");
        }
        // Where the session ends, so a producer that abandoned a push knows if it was taken.
        stoker_reply rep = {.code = STOKER_OK, .acked_through = p->next_seq};
        send_reply(b, out, token, &rep);
    }
    return 0;
}

int
session_handle_heartbeat(broker *b, void *token, uint32_t pipe, stoker_request *req,
                         uint64_t now_ms, broker_outbox *out)
{
    producer *p = find_producer(b, req->session);
    trainer *t = p == NULL ? find_trainer(b, req->session) : NULL;
    if (p != NULL && p->status != STOKER_PRODUCER_FINISHED) {
        revive(b, p, pipe, now_ms, "heartbeat after silence");
        if (req->done_making && !p->done_making) {
            p->done_making = 1;
            stoker_info("producer-done: producer %u '%s' pushes nothing more after %llu examples "
                        "(it lingers until they are trained)",
                        p->id, p->name, (unsigned long long)p->next_seq);
        }
        stoker_reply rep = {.code = STOKER_OK,
                            .queue_depth = commit_retain_depth(b) + (uint32_t)jobs_lag(b)};
        jobs_tell_trained(b, p, &rep);
        tell_peers(b, &rep);
        send_reply(b, out, token, &rep);
    } else if (t != NULL && t->connected) {
        // A trainer's own liveness: its heartbeat thread beats while its caller is
        // busy (a long evaluation pass pulls nothing), so only a dead or frozen one falls silent.
        t->last_seen_ms = now_ms;
        send_code(b, out, token, STOKER_OK, NULL);
    } else if (t != NULL) {
        send_code(b, out, token, STOKER_UNKNOWN_PEER,
                  "trainer %u '%s' was dropped: say hello again", t->id, t->name);
    } else {
        // A trainer of a broker that died, not yet said hello to us: what it trained counts now
        //, so that the re-pushed examples reach no other trainer meanwhile.
        if (req->n_trained > 0 && jobs_is(b, req->job))
            trained_reported(b, req);
        send_code(b, out, token, STOKER_UNKNOWN_PEER, "unknown session: say hello first");
    }
    return 0;
}
