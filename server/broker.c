// The broker's state machine (see broker.h). Rules, in DESIGN.md's words:
// - idempotent push: only examples beyond a producer's next_seq are appended; a push starting
//   beyond it is a gap and refused;
// - backpressure: a push that does not fit waits (parked) until room appears or park_ms passes,
//   then RETRY; queues never exceed queue_depth, nor all queues max_bytes;
// - leases: a pull moves examples into a lease; an ack frees them, once; a dropped trainer's
//   leases go back to the head of their queues (redelivered);
// - fairness: pulls take from producer queues round-robin;
// - loss: pipe closed or silence beyond the timeout; events reach trainers in pull replies;
// - supply end: no producer alive and nothing queued answers NO_PRODUCERS / END_OF_DATA.
// Invariant, checked in tests: produced == acknowledged + queued + in_flight.
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "broker.h"
#include "queue.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/rng.h"

#define EVENT_LOG         4096 // events remembered
#define EVENTS_PER_REPLY  64
#define MAX_REDELIVER_LOG 8

typedef struct parked {
    struct parked *next;
    void *token;
    stoker_request *req;
    uint64_t deadline_ms;
    struct trainer *trainer; // pulls
    uint32_t acks_refused;   // pulls: of the acknowledgements they carried
} parked;

// A lease refers to the examples it delivered (no copy): ranges of their producers' blocks.
typedef struct lease_part {
    queue_range range;
    uint32_t producer;
    uint64_t session;
} lease_part;

typedef struct lease {
    struct lease *next;
    uint64_t id;
    uint32_t count; // examples
    uint32_t n_parts, cap_parts;
    lease_part *parts; // in example order
} lease;

typedef struct producer {
    uint32_t id;
    char name[STOKER_NAME_MAX];
    uint64_t session;
    stoker_producer_status status;
    uint32_t pipe;
    uint64_t last_seen_ms;
    uint64_t next_seq;
    queue q;
    uint64_t accepted, delivered, acknowledged, redelivered, in_flight;
    parked *pushes, *pushes_tail; // parked pushes, FIFO
} producer;

typedef struct trainer {
    uint32_t id;
    char name[STOKER_NAME_MAX];
    uint64_t session;
    int connected;
    uint32_t pipe;
    uint64_t last_seen_ms;
    uint64_t event_cursor; // index of the last event sent
    lease *leases;
    uint32_t parked_pulls;
} trainer;

struct broker {
    broker_config cfg;
    char token[STOKER_TOKEN_MAX];
    uint64_t start_ms;
    int has_schema;
    stoker_schema schema;
    size_t example_bytes;

    producer **producers;
    uint32_t n_producers;
    uint32_t rr; // round-robin cursor into producers
    uint32_t next_producer_id;
    trainer **trainers;
    uint32_t n_trainers;
    uint32_t next_trainer_id;
    uint64_t next_lease_id;

    parked *pulls, *pulls_tail; // parked pulls, FIFO
    uint32_t n_parked;

    stoker_event events[EVENT_LOG];
    uint64_t n_events; // total ever; event i (1-based) is at events[(i - 1) % EVENT_LOG]

    stoker_counters c;
    uint64_t queued_bytes;

    // With a token, the pipes (connections) that said hello with it; nothing else is served.
    uint32_t *authed;
    uint32_t n_authed, cap_authed;
};

void
broker_config_init(broker_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->queue_depth = 64;
    cfg->max_bytes = 1ull << 30;
    cfg->producer_timeout_ms = 3000;
    cfg->trainer_timeout_ms = 10000;
    cfg->park_ms = 250;
    cfg->max_pull_wait_ms = 5000;
    cfg->max_producers = 1024;
    cfg->max_trainers = 64;
    cfg->max_chunk_examples = 1u << 20;
    cfg->max_parked = 512;
}

void
broker_outbox_fini(broker_outbox *out)
{
    for (size_t i = 0; i < out->n; i++)
        nng_msg_free(out->items[i].msg);
    free(out->items);
    memset(out, 0, sizeof(*out));
}

static void
outbox_add(broker_outbox *out, void *token, nng_msg *msg)
{
    if (out->n == out->cap) {
        size_t cap = out->cap ? out->cap * 2 : 16;
        void *items = realloc(out->items, cap * sizeof(*out->items));
        if (items == NULL) {
            // Cannot queue the reply: the client's request times out and is retried.
            stoker_error("out of memory queueing a reply");
            nng_msg_free(msg);
            return;
        }
        out->items = items;
        out->cap = cap;
    }
    out->items[out->n].token = token;
    out->items[out->n].msg = msg;
    out->n++;
}

static void
send_reply(broker *b, broker_outbox *out, void *token, const stoker_reply *rep)
{
    nng_msg *msg = NULL;
    if (stoker_wire_encode_reply(rep, &msg) != STOKER_OK) {
        stoker_error("out of memory encoding a reply");
        msg = NULL;
    }
    if (rep->code != STOKER_OK && rep->code != STOKER_RETRY && rep->code != STOKER_NO_PRODUCERS &&
        rep->code != STOKER_END_OF_DATA)
        b->c.refused++;
    outbox_add(out, token, msg);
}

static void send_code(broker *b, broker_outbox *out, void *token, int code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void
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

static void
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

static producer *
find_producer(const broker *b, uint64_t session)
{
    for (uint32_t i = 0; i < b->n_producers; i++) {
        if (b->producers[i]->session == session)
            return b->producers[i];
    }
    return NULL;
}

static producer *
find_producer_id(const broker *b, uint32_t id)
{
    for (uint32_t i = 0; i < b->n_producers; i++) {
        if (b->producers[i]->id == id)
            return b->producers[i];
    }
    return NULL;
}

static trainer *
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
    b->next_producer_id = 1;
    b->next_trainer_id = 1;
    b->next_lease_id =
        cfg->first_lease_id != 0 ? cfg->first_lease_id : (stoker_random_u64() >> 16) | 1;
    return b;
}

static void
free_parked(parked *p)
{
    stoker_request_free(p->req);
    free(p);
}

static void
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
    free(b->producers);
    free(b->trainers);
    free(b->authed);
    free(b);
}

// --- accounting helpers -------------------------------------------------------------------------

static uint32_t
producers_alive(const broker *b)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < b->n_producers; i++)
        n += b->producers[i]->status == STOKER_PRODUCER_ALIVE;
    return n;
}

static uint32_t
trainers_connected(const broker *b)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < b->n_trainers; i++)
        n += b->trainers[i]->connected;
    return n;
}

void
broker_counters(const broker *b, stoker_counters *out)
{
    *out = b->c;
    out->queued_bytes = b->queued_bytes;
    out->producers_alive = producers_alive(b);
    out->trainers = trainers_connected(b);
}

// --- serving parked requests --------------------------------------------------------------------

static int try_push(broker *b, producer *p, parked *k, uint64_t now_ms, broker_outbox *out,
                    int final);

// Completes parked pushes that now fit, oldest first per producer. Returns how many.
static uint32_t
serve_pushes(broker *b, uint64_t now_ms, broker_outbox *out)
{
    uint32_t served = 0;
    for (uint32_t i = 0; i < b->n_producers; i++) {
        producer *p = b->producers[i];
        while (p->pushes != NULL) {
            parked *k = p->pushes;
            if (!try_push(b, p, k, now_ms, out, 0))
                break;
            p->pushes = k->next;
            if (p->pushes == NULL)
                p->pushes_tail = NULL;
            b->n_parked--;
            free(k); // try_push took the request
            served++;
        }
    }
    return served;
}

// --- push ---------------------------------------------------------------------------------------

// Tries to apply the parked push k. Returns 1 when it was answered (k->req consumed), 0 when it
// must keep waiting (only when !final).
static int
try_push(broker *b, producer *p, parked *k, uint64_t now_ms, broker_outbox *out, int final)
{
    stoker_request *req = k->req;
    uint32_t count = req->chunk.count;
    uint64_t first = req->first_seq;
    if (first > p->next_seq) {
        send_code(b, out, k->token, STOKER_SEQ_GAP,
                  "push from '%s' starts at seq %llu, broker expects %llu: examples in between "
                  "were never received",
                  p->name, (unsigned long long)first, (unsigned long long)p->next_seq);
        stoker_request_free(req);
        k->req = NULL;
        return 1;
    }
    uint64_t end = first + count;
    if (end <= p->next_seq) { // a resend of what we hold: acknowledge, append nothing
        stoker_reply rep = {.code = STOKER_OK, .acked_through = p->next_seq};
        send_reply(b, out, k->token, &rep);
        stoker_request_free(req);
        k->req = NULL;
        return 1;
    }
    uint32_t skip = (uint32_t)(p->next_seq - first);
    uint32_t fresh = count - skip;
    uint64_t fresh_bytes = (uint64_t)fresh * b->example_bytes;
    if (p->q.examples + fresh > b->cfg.queue_depth ||
        b->queued_bytes + fresh_bytes > b->cfg.max_bytes) {
        if (!final)
            return 0;
        stoker_debug("queue-full: producer %u '%s' holds %llu examples", p->id, p->name,
                     (unsigned long long)p->q.examples);
        send_code(b, out, k->token, STOKER_RETRY, "queue full (%llu of %u examples)",
                  (unsigned long long)p->q.examples, b->cfg.queue_depth);
        stoker_request_free(req);
        k->req = NULL;
        return 1;
    }
    if (queue_append_request(&p->q, req, skip) != STOKER_OK) {
        send_code(b, out, k->token, STOKER_RETRY, "broker out of memory");
        stoker_request_free(req);
        k->req = NULL;
        return 1;
    }
    k->req = NULL; // the queue owns it now
    p->next_seq = end;
    p->accepted += fresh;
    b->c.produced += fresh;
    b->c.queued += fresh;
    b->queued_bytes += fresh_bytes;
    stoker_reply rep = {.code = STOKER_OK, .acked_through = end};
    send_reply(b, out, k->token, &rep);
    return 1;
}

static void
revive(broker *b, producer *p, uint32_t pipe, uint64_t now_ms, const char *how)
{
    if (p->status != STOKER_PRODUCER_ALIVE) {
        p->status = STOKER_PRODUCER_ALIVE;
        stoker_info("producer-reconnected: producer %u '%s' (%s)", p->id, p->name, how);
        add_event(b, STOKER_EVENT_PRODUCER_RECONNECTED, p, now_ms, how);
    }
    p->pipe = pipe;
    p->last_seen_ms = now_ms;
}

static void
handle_push(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
            broker_outbox *out)
{
    producer *p = find_producer(b, req->session);
    char err[256];
    if (p == NULL) {
        send_code(b, out, token, STOKER_UNKNOWN_PEER, "unknown session %016llx: say hello first",
                  (unsigned long long)req->session);
        stoker_request_free(req);
        return;
    }
    if (p->status == STOKER_PRODUCER_FINISHED) {
        send_code(b, out, token, STOKER_INVALID, "producer '%s' said goodbye; hello again first",
                  p->name);
        stoker_request_free(req);
        return;
    }
    revive(b, p, pipe, now_ms, "resumed pushing");
    if (req->chunk.count == 0 || req->chunk.count > b->cfg.max_chunk_examples ||
        req->chunk.count > b->cfg.queue_depth) {
        send_code(b, out, token, STOKER_TOO_LARGE,
                  "chunk of %u examples: must be 1..%u (the queue depth and chunk limit)",
                  req->chunk.count,
                  b->cfg.queue_depth < b->cfg.max_chunk_examples ? b->cfg.queue_depth
                                                                 : b->cfg.max_chunk_examples);
        stoker_request_free(req);
        return;
    }
    if (stoker_wire_bind_chunk(&req->chunk, req->n_data, req->data_len, &b->schema, err,
                               sizeof(err)) != STOKER_OK) {
        stoker_warn("bad-push: producer %u '%s': %s", p->id, p->name, err);
        send_code(b, out, token, STOKER_INVALID, "push refused: %s", err);
        stoker_request_free(req);
        return;
    }
    if (req->first_seq > UINT64_MAX - req->chunk.count) {
        send_code(b, out, token, STOKER_INVALID, "push: seq overflow");
        stoker_request_free(req);
        return;
    }
    parked *k = calloc(1, sizeof(*k));
    if (k == NULL) {
        send_code(b, out, token, STOKER_RETRY, "broker out of memory");
        stoker_request_free(req);
        return;
    }
    k->token = token;
    k->req = req;
    // Earlier pushes of this producer still waiting go first; and only so many may wait.
    int can_park = b->n_parked < b->cfg.max_parked;
    if (p->pushes == NULL && try_push(b, p, k, now_ms, out, !can_park)) {
        free(k);
        return;
    }
    if (!can_park) {
        try_push(b, p, k, now_ms, out, 1);
        free(k);
        return;
    }
    k->deadline_ms = now_ms + b->cfg.park_ms;
    if (p->pushes_tail != NULL)
        p->pushes_tail->next = k;
    else
        p->pushes = k;
    p->pushes_tail = k;
    b->n_parked++;
}

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

static int
pipe_authed(const broker *b, uint32_t pipe)
{
    for (uint32_t i = 0; i < b->n_authed; i++) {
        if (b->authed[i] == pipe)
            return 1;
    }
    return 0;
}

static int
authorize_pipe(broker *b, uint32_t pipe)
{
    if (pipe_authed(b, pipe))
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

static void
forget_pipe(broker *b, uint32_t pipe)
{
    for (uint32_t i = 0; i < b->n_authed; i++) {
        if (b->authed[i] == pipe) {
            b->authed[i] = b->authed[--b->n_authed];
            return;
        }
    }
}

static const char *
peer(const broker *b, uint32_t pipe, char *buf, size_t len)
{
    snprintf(buf, len, "pipe %u", pipe);
    if (b->cfg.describe_peer != NULL)
        b->cfg.describe_peer(pipe, buf, len);
    return buf;
}

static void
hello_producer(broker *b, void *token, uint32_t pipe, const stoker_request *req, uint64_t now_ms,
               broker_outbox *out)
{
    char want[512], got[512];
    if (!req->has_schema) {
        send_code(b, out, token, STOKER_INVALID, "producer '%s' sent no schema", req->name);
        return;
    }
    if (b->has_schema && !stoker_schema_equal(&b->schema, &req->schema)) {
        stoker_schema_format(&req->schema, got, sizeof(got));
        stoker_schema_format(&b->schema, want, sizeof(want));
        stoker_warn("schema-mismatch: producer '%s' sends %s, broker expects %s", req->name, got,
                    want);
        send_code(b, out, token, STOKER_SCHEMA_MISMATCH,
                  "schema mismatch: producer '%s' sends %s, broker expects %s", req->name, got,
                  want);
        return;
    }
    producer *p = find_producer(b, req->session);
    if (p == NULL) {
        if (b->n_producers == b->cfg.max_producers) {
            // Reuse the slot of a producer that is gone and owes nothing.
            uint32_t i;
            for (i = 0; i < b->n_producers; i++) {
                producer *old = b->producers[i];
                if (old->status != STOKER_PRODUCER_ALIVE && old->q.examples == 0 &&
                    old->in_flight == 0 && old->pushes == NULL)
                    break;
            }
            if (i == b->n_producers) {
                send_code(b, out, token, STOKER_LIMIT, "too many producers (at most %u)",
                          b->cfg.max_producers);
                return;
            }
            queue_fini(&b->producers[i]->q);
            free(b->producers[i]);
            b->producers[i] = b->producers[--b->n_producers];
        }
        p = calloc(1, sizeof(*p));
        if (p == NULL) {
            send_code(b, out, token, STOKER_NOMEM, "broker out of memory");
            return;
        }
        if (!b->has_schema) {
            b->has_schema = 1;
            b->schema = req->schema;
            b->example_bytes = stoker_schema_example_bytes(&b->schema);
            stoker_schema_format(&b->schema, want, sizeof(want));
            stoker_info("schema %s (from producer '%s')", want, req->name);
        }
        p->id = b->next_producer_id++;
        snprintf(p->name, sizeof(p->name), "%s", req->name[0] ? req->name : "producer");
        p->session = req->session;
        p->status = STOKER_PRODUCER_ALIVE;
        p->pipe = pipe;
        p->last_seen_ms = now_ms;
        p->next_seq = req->next_seq;
        queue_init(&p->q, &b->schema);
        b->producers[b->n_producers++] = p;
        stoker_info("producer-joined: producer %u '%s' session %016llx from seq %llu", p->id,
                    p->name, (unsigned long long)p->session, (unsigned long long)p->next_seq);
        add_event(b, STOKER_EVENT_PRODUCER_JOINED, p, now_ms, "hello");
    } else {
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
                        p->name, (unsigned long long)req->next_seq,
                        (unsigned long long)p->next_seq);
            p->next_seq = req->next_seq;
        }
    }
    stoker_reply rep = {
        .code = STOKER_OK,
        .peer_id = p->id,
        .next_seq = p->next_seq,
        .heartbeat_ms = b->cfg.producer_timeout_ms / 3,
        .has_schema = 1,
        .schema = b->schema,
    };
    send_reply(b, out, token, &rep);
}

static void
hello_trainer(broker *b, void *token, uint32_t pipe, const stoker_request *req, uint64_t now_ms,
              broker_outbox *out)
{
    trainer *t = find_trainer(b, req->session);
    if (t == NULL) {
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
                return;
            }
            free(b->trainers[i]);
            b->trainers[i] = b->trainers[--b->n_trainers];
        }
        t = calloc(1, sizeof(*t));
        if (t == NULL) {
            send_code(b, out, token, STOKER_NOMEM, "broker out of memory");
            return;
        }
        t->id = b->next_trainer_id++;
        snprintf(t->name, sizeof(t->name), "%s", req->name[0] ? req->name : "trainer");
        t->session = req->session;
        // A new trainer hears of events from now on (plus nothing older).
        t->event_cursor = b->n_events;
        b->trainers[b->n_trainers++] = t;
        stoker_info("trainer-joined: trainer %u '%s'", t->id, t->name);
    } else if (!t->connected) {
        stoker_info("trainer-reconnected: trainer %u '%s'", t->id, t->name);
    }
    t->connected = 1;
    t->pipe = pipe;
    t->last_seen_ms = now_ms;
    stoker_reply rep = {
        .code = STOKER_OK,
        .peer_id = t->id,
        .heartbeat_ms = b->cfg.trainer_timeout_ms / 3,
        .has_schema = b->has_schema,
        .schema = b->schema,
    };
    send_reply(b, out, token, &rep);
}

static void
handle_hello(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
             broker_outbox *out)
{
    char who[96];
    if (!token_ok(b, req->token)) {
        stoker_warn("unauthenticated: hello from '%s' at %s with a wrong or missing token",
                    req->name, peer(b, pipe, who, sizeof(who)));
        send_code(b, out, token, STOKER_UNAUTHENTICATED, "wrong or missing token");
    } else if (b->token[0] != '\0' && authorize_pipe(b, pipe) != STOKER_OK) {
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
    stoker_request_free(req);
}

static void drop_trainer(broker *b, trainer *t, const char *reason, uint64_t now_ms,
                         broker_outbox *out);

static void
handle_goodbye(broker *b, void *token, stoker_request *req, uint64_t now_ms, broker_outbox *out)
{
    producer *p = find_producer(b, req->session);
    trainer *t = p == NULL ? find_trainer(b, req->session) : NULL;
    if (t != NULL) {
        // A trainer that stops: what it holds unacknowledged goes to the others.
        if (t->connected)
            drop_trainer(b, t, NULL, now_ms, out);
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
    stoker_request_free(req);
}

static void
handle_heartbeat(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
                 broker_outbox *out)
{
    producer *p = find_producer(b, req->session);
    trainer *t = p == NULL ? find_trainer(b, req->session) : NULL;
    if (p != NULL && p->status != STOKER_PRODUCER_FINISHED) {
        revive(b, p, pipe, now_ms, "heartbeat after silence");
        send_code(b, out, token, STOKER_OK, NULL);
    } else if (t != NULL) {
        t->last_seen_ms = now_ms;
        send_code(b, out, token, STOKER_OK, NULL);
    } else {
        send_code(b, out, token, STOKER_UNKNOWN_PEER, "unknown session: say hello first");
    }
    stoker_request_free(req);
}

// --- leases and acks ----------------------------------------------------------------------------

// Applies acknowledgements from t. Returns how many were refused.
static uint32_t
apply_acks(broker *b, trainer *t, uint32_t n, const uint64_t *acks)
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
            if (p != NULL) {
                p->acknowledged += l->parts[r].range.count;
                p->in_flight -= l->parts[r].range.count;
            }
        }
        b->c.acknowledged += l->count;
        b->c.in_flight -= l->count;
        free_lease(l);
    }
    if (refused > 0)
        stoker_warn("ack-refused: trainer %u '%s': %u unknown or already acknowledged leases",
                    t->id, t->name, refused);
    return refused;
}

// Puts the examples of lease l back at the head of their producers' queues and frees l.
// Returns how many went back.
static uint64_t
return_lease(broker *b, lease *l)
{
    uint64_t total = 0;
    // Parts go back last-first, so each queue ends up in its original order.
    for (uint32_t r = l->n_parts; r-- > 0;) {
        lease_part *part = &l->parts[r];
        uint32_t n = part->range.count;
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
        p->redelivered += n;
        b->c.in_flight -= n;
        b->c.queued += n;
        b->c.redelivered += n;
        b->queued_bytes += (uint64_t)n * b->example_bytes;
        total += n;
    }
    free_lease(l);
    return total;
}

// Puts every lease of t back (newest first, so older examples end up nearer the head).
static void
redeliver(broker *b, trainer *t)
{
    uint64_t total = 0;
    lease *l = t->leases;
    while (l != NULL) {
        lease *next = l->next;
        total += return_lease(b, l);
        l = next;
    }
    t->leases = NULL;
    if (total > 0)
        stoker_info("redelivered: %llu examples of trainer %u '%s' back in their queues",
                    (unsigned long long)total, t->id, t->name);
}

// Builds a lease of up to max examples, round-robin over the producers' queues. Returns NULL
// when nothing is queued (or out of memory).
static lease *
take_lease(broker *b, trainer *t, uint32_t max)
{
    uint64_t avail = b->c.queued;
    uint32_t n = (uint32_t)(avail < max ? avail : max);
    if (n == 0)
        return NULL;
    lease *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return NULL;
    l->cap_parts = 8;
    l->parts = malloc(l->cap_parts * sizeof(*l->parts));
    if (l->parts == NULL) {
        free(l);
        return NULL;
    }
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
                if (l->n_parts == l->cap_parts) {
                    lease_part *parts = realloc(l->parts, 2 * l->cap_parts * sizeof(*parts));
                    if (parts == NULL)
                        goto done; // deliver what we have
                    l->parts = parts;
                    l->cap_parts *= 2;
                }
                lease_part *part = &l->parts[l->n_parts];
                uint32_t got = queue_take(&p->q, want, &part->range);
                if (got == 0)
                    break;
                part->producer = p->id;
                part->session = p->session;
                l->n_parts++;
                l->count += got;
                p->delivered += got;
                p->in_flight += got;
                want -= got;
                b->rr = (i + 1) % b->n_producers;
            }
        }
    }
done:
    if (l->count == 0) {
        free_lease(l);
        return NULL;
    }
    b->c.queued -= l->count;
    b->queued_bytes -= (uint64_t)l->count * b->example_bytes;
    b->c.in_flight += l->count;
    b->c.delivered += l->count;
    l->id = b->next_lease_id++;
    l->next = t->leases;
    t->leases = l;
    return l;
}

// Events t has not been sent yet: [first, first + n) in the log.
static uint32_t
pending_events(const broker *b, const trainer *t, stoker_event *buf)
{
    uint64_t from = t->event_cursor + 1;
    if (b->n_events >= EVENT_LOG && from <= b->n_events - EVENT_LOG)
        from = b->n_events - EVENT_LOG + 1; // older ones were overwritten
    uint32_t n = 0;
    for (uint64_t i = from; i <= b->n_events && n < EVENTS_PER_REPLY; i++)
        buf[n++] = b->events[(i - 1) % EVENT_LOG];
    return n;
}

// Why the supply ended, or STOKER_OK while producers may still send.
static int
supply_state(const broker *b, char *why, size_t why_len)
{
    if (b->n_producers == 0 || b->c.queued > 0)
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

// Nonzero when no queue can take more: every alive producer's queue is at its depth, or all of
// them together are at max_bytes.
static int
queues_full(const broker *b)
{
    if (b->queued_bytes + b->example_bytes > b->cfg.max_bytes)
        return 1;
    for (uint32_t i = 0; i < b->n_producers; i++) {
        const producer *p = b->producers[i];
        if (p->status == STOKER_PRODUCER_ALIVE && p->q.examples < b->cfg.queue_depth)
            return 0;
    }
    return 1;
}

// Answers pull k of trainer t if it can be answered now (or if final). Returns 1 if answered.
static int
try_pull(broker *b, parked *k, uint64_t now_ms, broker_outbox *out, int final)
{
    trainer *t = k->trainer;
    uint32_t max = k->req->max_examples;
    char why[160];
    stoker_event events[EVENTS_PER_REPLY];
    uint32_t n_events = pending_events(b, t, events);
    int alive = producers_alive(b) > 0;
    int ended = supply_state(b, why, sizeof(why));
    // A batch goes out when it is full; short when no more can come soon: no producer left,
    // every queue full (a batch larger than the queues could ever hold), or the pull's wait is
    // over (data trickles in slower than the batch fills: a short batch beats a false stall).
    int partial = b->c.queued > 0 && (!alive || final || queues_full(b));
    int take = b->c.queued >= max || partial;
    int ready = take || n_events > 0 || ended != STOKER_OK;
    if (!ready && !final)
        return 0;
    stoker_reply rep = {.code = STOKER_OK};
    lease *l = NULL;
    stoker_chunk_part *parts = NULL;
    stoker_run *runs = NULL;
    if (take)
        l = take_lease(b, t, max);
    if (l != NULL) {
        parts = calloc(l->n_parts, sizeof(*parts));
        runs = calloc(l->n_parts, sizeof(*runs));
        if (parts == NULL || runs == NULL) {
            // Cannot describe the batch: give the examples back; the trainer asks again.
            free(parts);
            free(runs);
            t->leases = l->next; // take_lease put it first
            return_lease(b, l);
            send_code(b, out, k->token, STOKER_RETRY, "broker out of memory");
            return 1;
        }
        for (uint32_t i = 0; i < l->n_parts; i++) {
            const lease_part *part = &l->parts[i];
            for (uint32_t f = 0; f < b->schema.n_fields; f++)
                parts[i].data[f] = queue_range_field(&part->range, &b->schema, f);
            parts[i].count = part->range.count;
            runs[i] = (stoker_run){.producer = part->producer,
                                   .session = part->session,
                                   .first_seq = part->range.first_seq,
                                   .count = part->range.count};
        }
        rep.lease = l->id;
        rep.chunk.schema = b->schema;
        rep.chunk.count = l->count;
        rep.parts = parts;
        rep.n_parts = l->n_parts;
        rep.n_runs = l->n_parts;
        rep.runs = runs;
    } else if (ended != STOKER_OK) {
        rep.code = ended;
        snprintf(rep.message, sizeof(rep.message), "%s", why);
    }
    rep.n_events = n_events;
    rep.events = events;
    rep.acks_refused = k->acks_refused;
    if (n_events > 0)
        t->event_cursor = events[n_events - 1].index;
    send_reply(b, out, k->token, &rep);
    free(parts);
    free(runs);
    (void)now_ms;
    return 1;
}

static void
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
static void
settle(broker *b, uint64_t now_ms, broker_outbox *out)
{
    while (serve_pulls(b, now_ms, out) + serve_pushes(b, now_ms, out) > 0)
        ;
}

static void
handle_pull(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
            broker_outbox *out)
{
    trainer *t = find_trainer(b, req->session);
    if (t == NULL) {
        send_code(b, out, token, STOKER_UNKNOWN_PEER, "unknown session: say hello first");
        stoker_request_free(req);
        return;
    }
    if (!t->connected)
        stoker_info("trainer-reconnected: trainer %u '%s'", t->id, t->name);
    t->connected = 1;
    t->pipe = pipe;
    t->last_seen_ms = now_ms;
    if (req->max_examples == 0 || req->max_examples > b->cfg.max_chunk_examples) {
        send_code(b, out, token, STOKER_INVALID, "pull of %u examples: must be 1..%u",
                  req->max_examples, b->cfg.max_chunk_examples);
        stoker_request_free(req);
        return;
    }
    parked *k = calloc(1, sizeof(*k));
    if (k == NULL) {
        send_code(b, out, token, STOKER_RETRY, "broker out of memory");
        stoker_request_free(req);
        return;
    }
    k->token = token;
    k->req = req;
    k->trainer = t;
    k->acks_refused = apply_acks(b, t, req->n_acks, req->acks);
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

static void
handle_ack(broker *b, void *token, stoker_request *req, broker_outbox *out)
{
    trainer *t = find_trainer(b, req->session);
    if (t == NULL) {
        send_code(b, out, token, STOKER_UNKNOWN_PEER, "unknown session: say hello first");
    } else {
        uint32_t refused = apply_acks(b, t, req->n_acks, req->acks);
        stoker_reply rep = {.code = refused == 0 ? STOKER_OK : STOKER_NOT_FOUND,
                            .acks_refused = refused};
        if (refused > 0)
            snprintf(rep.message, sizeof(rep.message),
                     "%u of %u leases unknown or already acknowledged", refused, req->n_acks);
        send_reply(b, out, token, &rep);
    }
    stoker_request_free(req);
}

static void
handle_status(broker *b, void *token, stoker_request *req, broker_outbox *out)
{
    stoker_reply rep = {.code = STOKER_OK, .has_counters = 1};
    broker_counters(b, &rep.counters);
    rep.has_schema = b->has_schema;
    rep.schema = b->schema;
    rep.producers = calloc(b->n_producers ? b->n_producers : 1, sizeof(*rep.producers));
    if (rep.producers == NULL) {
        send_code(b, out, token, STOKER_NOMEM, "broker out of memory");
        stoker_request_free(req);
        return;
    }
    for (uint32_t i = 0; i < b->n_producers; i++) {
        const producer *p = b->producers[i];
        stoker_producer_info *d = &rep.producers[i];
        d->id = p->id;
        snprintf(d->name, sizeof(d->name), "%s", p->name);
        d->session = p->session;
        d->status = p->status;
        d->queued = p->q.examples;
        d->accepted = p->accepted;
        d->delivered = p->delivered;
        d->acknowledged = p->acknowledged;
        d->redelivered = p->redelivered;
        d->next_seq = p->next_seq;
    }
    rep.n_producers = b->n_producers;
    // The latest events too (the trainer also gets them in pull replies as they happen).
    stoker_event events[EVENTS_PER_REPLY];
    uint64_t from = b->n_events > EVENTS_PER_REPLY ? b->n_events - EVENTS_PER_REPLY + 1 : 1;
    for (uint64_t i = from; i <= b->n_events; i++)
        events[rep.n_events++] = b->events[(i - 1) % EVENT_LOG];
    rep.events = events;
    send_reply(b, out, token, &rep);
    free(rep.producers);
    stoker_request_free(req);
}

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
        handle_status(b, token, req, out);
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
        handle_ack(b, token, req, out);
        break;
    case STOKER_GOODBYE:
        handle_goodbye(b, token, req, now_ms, out);
        break;
    case STOKER_HEARTBEAT:
        handle_heartbeat(b, token, pipe, req, now_ms, out);
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

// --- loss ---------------------------------------------------------------------------------------

static void
lose_producer(broker *b, producer *p, uint64_t now_ms, const char *reason, broker_outbox *out)
{
    p->status = STOKER_PRODUCER_LOST;
    stoker_warn("producer-lost: producer %u '%s': %s (%llu examples still queued)", p->id, p->name,
                reason, (unsigned long long)p->q.examples);
    add_event(b, STOKER_EVENT_PRODUCER_LOST, p, now_ms, reason);
    // Its parked pushes are answered so their contexts come free; a live peer resends.
    for (parked *k = p->pushes, *next; k != NULL; k = next) {
        next = k->next;
        send_code(b, out, k->token, STOKER_RETRY, "producer was considered lost: %s", reason);
        free_parked(k);
        b->n_parked--;
    }
    p->pushes = p->pushes_tail = NULL;
}

// Disconnects trainer t and redelivers its leases; reason NULL means it said goodbye.
static void
drop_trainer(broker *b, trainer *t, const char *reason, uint64_t now_ms, broker_outbox *out)
{
    if (reason != NULL)
        stoker_warn("trainer-lost: trainer %u '%s': %s", t->id, t->name, reason);
    else
        stoker_info("trainer-left: trainer %u '%s' said goodbye", t->id, t->name);
    reason = reason != NULL ? reason : "trainer left";
    t->connected = 0;
    parked *prev = NULL, *k = b->pulls;
    while (k != NULL) {
        parked *next = k->next;
        if (k->trainer == t) {
            send_code(b, out, k->token, STOKER_UNKNOWN_PEER, "trainer was dropped: %s", reason);
            unlink_pull(b, prev, k);
            free_parked(k);
        } else {
            prev = k;
        }
        k = next;
    }
    redeliver(b, t);
}

static void
pipe_gone(broker *b, uint32_t pipe, uint64_t now_ms, int lose_producers, broker_outbox *out)
{
    forget_pipe(b, pipe);
    for (uint32_t i = 0; i < b->n_producers; i++) {
        producer *p = b->producers[i];
        if (p->pipe != pipe || p->status != STOKER_PRODUCER_ALIVE)
            continue;
        if (lose_producers)
            lose_producer(b, p, now_ms, "connection closed", out);
        else
            p->pipe = 0; // its next push or heartbeat, on a new connection, sets it again
    }
    for (uint32_t i = 0; i < b->n_trainers; i++) {
        trainer *t = b->trainers[i];
        if (t->pipe == pipe && t->connected)
            drop_trainer(b, t, "connection closed", now_ms, out);
    }
    settle(b, now_ms, out);
}

void
broker_pipe_closed(broker *b, uint32_t pipe, uint64_t now_ms, broker_outbox *out)
{
    pipe_gone(b, pipe, now_ms, 1, out);
}

void
broker_pipe_reset(broker *b, uint32_t pipe, uint64_t now_ms, broker_outbox *out)
{
    stoker_info("connection-reset: pipe %u closed by the listener restart; its peer reconnects",
                pipe);
    pipe_gone(b, pipe, now_ms, 0, out);
}

void
broker_tick(broker *b, uint64_t now_ms, broker_outbox *out)
{
    char reason[96];
    for (uint32_t i = 0; i < b->n_producers; i++) {
        producer *p = b->producers[i];
        // Parked pushes past their wait: RETRY.
        while (p->pushes != NULL && p->pushes->deadline_ms <= now_ms) {
            parked *k = p->pushes;
            p->pushes = k->next;
            if (p->pushes == NULL)
                p->pushes_tail = NULL;
            b->n_parked--;
            try_push(b, p, k, now_ms, out, 1);
            free_parked(k);
        }
        if (p->status == STOKER_PRODUCER_ALIVE && p->pushes == NULL &&
            now_ms > p->last_seen_ms + b->cfg.producer_timeout_ms) {
            snprintf(reason, sizeof(reason), "silent for %.1f s",
                     (double)(now_ms - p->last_seen_ms) / 1000.0);
            lose_producer(b, p, now_ms, reason, out);
        }
    }
    for (uint32_t i = 0; i < b->n_trainers; i++) {
        trainer *t = b->trainers[i];
        if (t->connected && t->parked_pulls == 0 &&
            now_ms > t->last_seen_ms + b->cfg.trainer_timeout_ms) {
            snprintf(reason, sizeof(reason), "silent for %.1f s",
                     (double)(now_ms - t->last_seen_ms) / 1000.0);
            drop_trainer(b, t, reason, now_ms, out);
        }
    }
    // Parked pulls past their wait get what there is (possibly nothing).
    settle(b, now_ms, out);
}

// --- reports ------------------------------------------------------------------------------------

typedef struct sbuf {
    char *s;
    size_t len, cap;
    int failed;
} sbuf;

static void sbuf_printf(sbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
sbuf_printf(sbuf *sb, const char *fmt, ...)
{
    if (sb->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        // Before the first allocation s is NULL: no arithmetic on it (undefined behaviour).
        int n = vsnprintf(sb->s != NULL ? sb->s + sb->len : NULL, sb->cap - sb->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            sb->failed = 1;
            return;
        }
        if ((size_t)n < sb->cap - sb->len) {
            sb->len += (size_t)n;
            return;
        }
        size_t cap = (sb->cap + (size_t)n + 1) * 2;
        char *s = realloc(sb->s, cap);
        if (s == NULL) {
            sb->failed = 1;
            return;
        }
        sb->s = s;
        sb->cap = cap;
    }
}

static char *
sbuf_finish(sbuf *sb)
{
    if (sb->failed) {
        free(sb->s);
        return NULL;
    }
    return sb->s;
}

// Names and strings we print come from peers: keep them printable and quote-free.
static void
clean_name(char *dst, size_t cap, const char *src)
{
    size_t j = 0;
    for (size_t i = 0; src[i] != '\0' && j + 1 < cap; i++) {
        unsigned char ch = (unsigned char)src[i];
        dst[j++] = (ch < 0x20 || ch >= 0x7f || ch == '"' || ch == '\\') ? '_' : (char)ch;
    }
    dst[j] = '\0';
}

char *
broker_metrics_text(const broker *b, uint64_t now_ms)
{
    sbuf sb = {0};
    sbuf_printf(&sb, "%s", "");
    stoker_counters c;
    broker_counters(b, &c);
    static const struct {
        const char *name, *type, *help;
        size_t offset;
    } totals[] = {
        {"produced_total", "counter", "Examples accepted from producers",
         offsetof(stoker_counters, produced)},
        {"acknowledged_total", "counter", "Examples acknowledged by trainers",
         offsetof(stoker_counters, acknowledged)},
        {"delivered_total", "counter", "Examples sent to trainers, redeliveries included",
         offsetof(stoker_counters, delivered)},
        {"redelivered_total", "counter", "Examples returned to queues from dropped leases",
         offsetof(stoker_counters, redelivered)},
        {"queued", "gauge", "Examples waiting in producer queues",
         offsetof(stoker_counters, queued)},
        {"in_flight", "gauge", "Examples leased to trainers, not yet acknowledged",
         offsetof(stoker_counters, in_flight)},
        {"queued_bytes", "gauge", "Bytes of queued examples",
         offsetof(stoker_counters, queued_bytes)},
        {"refused_total", "counter", "Requests refused with an error",
         offsetof(stoker_counters, refused)},
    };
    for (size_t i = 0; i < sizeof(totals) / sizeof(totals[0]); i++) {
        uint64_t v = *(const uint64_t *)((const char *)&c + totals[i].offset);
        sbuf_printf(&sb, "# HELP stoker_%s %s\n# TYPE stoker_%s %s\nstoker_%s %llu\n",
                    totals[i].name, totals[i].help, totals[i].name, totals[i].type, totals[i].name,
                    (unsigned long long)v);
    }
    sbuf_printf(&sb,
                "# HELP stoker_producers_alive Producers connected and sending\n"
                "# TYPE stoker_producers_alive gauge\nstoker_producers_alive %u\n"
                "# HELP stoker_trainers_connected Trainers connected\n"
                "# TYPE stoker_trainers_connected gauge\nstoker_trainers_connected %u\n"
                "# HELP stoker_uptime_seconds Seconds since the broker started\n"
                "# TYPE stoker_uptime_seconds gauge\nstoker_uptime_seconds %.3f\n",
                c.producers_alive, c.trainers, uptime_s(b, now_ms));
    static const struct {
        const char *name, *type, *help;
    } per[] = {
        {"producer_queue_depth", "gauge", "Examples queued for this producer"},
        {"producer_accepted_total", "counter", "Examples accepted from this producer"},
        {"producer_delivered_total", "counter", "Examples of this producer sent to trainers"},
        {"producer_acknowledged_total", "counter", "Examples of this producer acknowledged"},
        {"producer_redelivered_total", "counter", "Examples of this producer redelivered"},
        {"producer_alive", "gauge", "1 while this producer is alive"},
    };
    for (size_t m = 0; m < sizeof(per) / sizeof(per[0]); m++) {
        sbuf_printf(&sb, "# HELP stoker_%s %s\n# TYPE stoker_%s %s\n", per[m].name, per[m].help,
                    per[m].name, per[m].type);
        for (uint32_t i = 0; i < b->n_producers; i++) {
            const producer *p = b->producers[i];
            uint64_t v[] = {p->q.examples,   p->accepted,    p->delivered,
                            p->acknowledged, p->redelivered, p->status == STOKER_PRODUCER_ALIVE};
            char name[STOKER_NAME_MAX];
            clean_name(name, sizeof(name), p->name);
            sbuf_printf(&sb, "stoker_%s{producer=\"%u\",name=\"%s\"} %llu\n", per[m].name, p->id,
                        name, (unsigned long long)v[m]);
        }
    }
    return sbuf_finish(&sb);
}

char *
broker_status_json(const broker *b, uint64_t now_ms)
{
    sbuf sb = {0};
    stoker_counters c;
    broker_counters(b, &c);
    char schema[1024] = "";
    if (b->has_schema)
        stoker_schema_format(&b->schema, schema, sizeof(schema));
    sbuf_printf(&sb,
                "{\"uptime_s\": %.3f, \"schema\": \"%s\", \"queue_depth\": %u, "
                "\"max_bytes\": %llu, \"counters\": {\"produced\": %llu, \"acknowledged\": %llu, "
                "\"queued\": %llu, \"in_flight\": %llu, \"redelivered\": %llu, "
                "\"delivered\": %llu, \"queued_bytes\": %llu, \"refused\": %llu, "
                "\"discrepancy\": %lld}, \"producers_alive\": %u, \"trainers_connected\": %u, "
                "\"producers\": [",
                uptime_s(b, now_ms), schema, b->cfg.queue_depth,
                (unsigned long long)b->cfg.max_bytes, (unsigned long long)c.produced,
                (unsigned long long)c.acknowledged, (unsigned long long)c.queued,
                (unsigned long long)c.in_flight, (unsigned long long)c.redelivered,
                (unsigned long long)c.delivered, (unsigned long long)c.queued_bytes,
                (unsigned long long)c.refused,
                (long long)(c.produced - c.acknowledged - c.queued - c.in_flight),
                c.producers_alive, c.trainers);
    for (uint32_t i = 0; i < b->n_producers; i++) {
        const producer *p = b->producers[i];
        char name[STOKER_NAME_MAX];
        clean_name(name, sizeof(name), p->name);
        sbuf_printf(&sb,
                    "%s{\"id\": %u, \"name\": \"%s\", \"session\": \"%016llx\", \"state\": \"%s\", "
                    "\"queued\": %llu, \"accepted\": %llu, \"delivered\": %llu, "
                    "\"acknowledged\": %llu, \"redelivered\": %llu, \"next_seq\": %llu, "
                    "\"silent_s\": %.3f}",
                    i ? ", " : "", p->id, name, (unsigned long long)p->session,
                    stoker_producer_status_name(p->status), (unsigned long long)p->q.examples,
                    (unsigned long long)p->accepted, (unsigned long long)p->delivered,
                    (unsigned long long)p->acknowledged, (unsigned long long)p->redelivered,
                    (unsigned long long)p->next_seq, (double)(now_ms - p->last_seen_ms) / 1000.0);
    }
    sbuf_printf(&sb, "], \"events\": [");
    uint64_t from = b->n_events > 100 ? b->n_events - 100 + 1 : 1;
    for (uint64_t i = from; i <= b->n_events; i++) {
        const stoker_event *e = &b->events[(i - 1) % EVENT_LOG];
        char name[STOKER_NAME_MAX], reason[STOKER_REASON_MAX];
        clean_name(name, sizeof(name), e->name);
        clean_name(reason, sizeof(reason), e->reason);
        sbuf_printf(&sb,
                    "%s{\"index\": %llu, \"kind\": \"%s\", \"producer\": %u, \"name\": \"%s\", "
                    "\"at\": %.3f, \"reason\": \"%s\"}",
                    i > from ? ", " : "", (unsigned long long)e->index,
                    stoker_event_kind_name(e->kind), e->producer, name, e->at_s, reason);
    }
    sbuf_printf(&sb, "]}\n");
    return sbuf_finish(&sb);
}
