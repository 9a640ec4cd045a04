// Private to the broker's rooms (broker*.c): the state they share and the functions one room
// calls in another. The broker's public contract is broker.h; nothing outside server/broker*.c
// includes this file. Every function here runs under the caller's lock (see broker.h), like the
// public ones, and none does I/O: replies go to the outbox.
//
// The rules of the state machine, in DESIGN.md's words:
// - idempotent push: only examples beyond a producer's next_seq are appended; a push starting
//   beyond it is a gap and refused;
// - backpressure: a push that does not fit waits (parked) until room appears or park_ms passes,
//   then RETRY; queues never exceed the queue depth (sized by broker_queues.c unless fixed by
//   --queue-depth), nor all queues max_bytes;
// - leases: a pull moves examples into a lease; an ack frees them, once; a dropped trainer's
//   leases go back to the head of their queues (redelivered); those a trainer that says goodbye
//   never handed to its caller go back too (returned_unused);
// - fairness: pulls take from producer queues round-robin;
// - loss: pipe closed or silence beyond the timeout; events reach trainers in pull replies;
// - supply end: no producer alive and nothing queued answers NO_PRODUCERS / END_OF_DATA.
// Invariant, checked in tests: produced == acknowledged + queued + in_flight.
#ifndef BROKER_INTERNAL_H
#define BROKER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

#include "broker.h"
#include "broker_epoch.h"
#include "queue.h"
#include "stoker/labels.h"

#define EVENT_LOG         4096 // events remembered
#define EVENTS_PER_REPLY  64
#define MAX_REDELIVER_LOG 8
// A trainer's hello reply lists the producers already there as events with this reason (index
// 0), at most SNAPSHOT_MAX of them (a reply's events are limited to 4096 on the wire).
#define SNAPSHOT_REASON "already there when this trainer joined"
#define SNAPSHOT_MAX    4000

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
    lease_part *parts;   // in example order
    uint64_t held_bytes; // counted in the broker's held_bytes (a committing trainer's lease)
} lease;

// Which seqs of a producer's session are trained (broker_trained.c): all below `through`, and
// the ranges beyond it (sorted, disjoint, not touching).
typedef struct trained_range {
    uint64_t first, end;
} trained_range;
typedef struct trained_set {
    uint64_t through;
    trained_range *ranges;
    uint32_t n, cap;
} trained_set;

typedef struct producer {
    uint32_t id;
    char name[STOKER_NAME_MAX];
    uint64_t session;
    stoker_producer_status status;
    uint32_t pipe;
    uint64_t last_seen_ms;
    uint64_t next_seq;
    queue q;
    uint64_t accepted, delivered, acknowledged, redelivered, returned_unused, in_flight;
    uint64_t n_pushes, n_pushes_streamed; // of them on a connection other than its hello's
    uint64_t n_pushes_shm;                // of them by reference (its shared memory)
    uint32_t last_chunk; // examples in its latest push: its queue is full when that cannot fit
    parked *pushes, *pushes_tail; // parked pushes, in seq order
    uint64_t items_held;          // dataset items assigned to it, not yet accepted
    trained_set trained;          // what its retention buffer may forget
    stoker_labels labels;         // its class-to-label map, from its latest hello (may be empty)
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
    int in_arena; // its last batch went through shared memory
    int commit;   // acknowledges at its commits: its leases count in --max-bytes (broker_commit.c)
    uint32_t batch_examples; // max_examples of its latest pull (sizes the queues)
    int pulled; // it pulled at least once (until then a hello gets the producers' snapshot)
    struct group *group; // NULL, or the data-parallel group it is rank `rank` of
    uint32_t rank;
    // Its delivery path for /status (issue 13): pid from its hello, what it was sent each way
    // (broker_lease.c arena_reply), batches the full arena sent as bytes.
    uint32_t pid;
    stoker_delivery delivery;
    uint64_t batches_shm, batches_socket, examples_shm, examples_socket, bytes_shm, bytes_socket;
    uint64_t arena_full;
} trainer;

struct broker {
    broker_config cfg;
    char token[STOKER_TOKEN_MAX];
    uint64_t start_ms;
    // Until then the supply is not said to have ended: a producer came back from a broker that
    // died (its hello continued a session at seq > 0), so others of that broker may follow.
    uint64_t returning_until_ms;
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
    uint64_t held_bytes;   // leases of committing trainers, inside max_bytes with queued_bytes
    uint32_t queue_depth;  // examples per producer queue now (broker_queues.c)
    char queue_limit[512]; // said once: why a batch came short because of the queues

    // With a token, the pipes (connections) that said hello with it; nothing else is served.
    uint32_t *authed;
    uint32_t n_authed, cap_authed;

    struct broker_arena *arena; // NULL: no shared memory
    epochs *epochs;             // NULL: the broker serves streams (broker_epoch.c)
    struct group *groups;       // data-parallel groups (broker_group.c)
};

// --- broker.c: replies, events, lookups, lifecycle helpers ---

// Appends (token, msg) to out; takes msg (freed when out of memory: the client retries).
void outbox_add(broker_outbox *out, void *token, nng_msg *msg);
// Encodes rep and queues it for token; counts refusals.
void send_reply(broker *b, broker_outbox *out, void *token, const stoker_reply *rep);
// The same, with fill (may be NULL; taken) to do before the reply is sent.
typedef struct broker_fill broker_fill;
void outbox_add_fill(broker_outbox *out, void *token, nng_msg *msg, broker_fill *fill);
void send_reply_fill(broker *b, broker_outbox *out, void *token, const stoker_reply *rep,
                     broker_fill *fill);
// broker_lease.c: copies fill's examples into their arena region (unless copy is 0: the reply is
// not sent), lets the region go as usual and frees fill. Runs outside the broker's lock.
void broker_fill_run(broker_fill *fill, int copy);
// A new parked request (token, req) that takes req; NULL when out of memory, after answering
// RETRY (the client asks again) and freeing req.
parked *parked_new(broker *b, broker_outbox *out, void *token, stoker_request *req);
// A reply with only a code and a formatted message (fmt may be NULL).
void send_code(broker *b, broker_outbox *out, void *token, int code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
// Appends an event about producer p to the event log (the oldest is overwritten).
void add_event(broker *b, stoker_event_kind kind, const producer *p, uint64_t now_ms,
               const char *reason);
// Lookups: NULL when not found; the broker keeps ownership.
producer *find_producer(const broker *b, uint64_t session);
producer *find_producer_id(const broker *b, uint32_t id);
trainer *find_trainer(const broker *b, uint64_t session);
// Free a parked request (and its request) / a lease (releasing its ranges).
void free_parked(parked *p);
void free_lease(lease *l);
uint32_t producers_alive(const broker *b);

// --- broker_push.c: pushes ---

// Completes parked pushes that now fit, oldest first per producer. Returns how many.
uint32_t serve_pushes(broker *b, uint64_t now_ms, broker_outbox *out);
// Tries to apply the parked push k. Returns 1 when it was answered (k->req consumed), 0 when it
// must keep waiting (only when !final).
int try_push(broker *b, producer *p, parked *k, uint64_t now_ms, broker_outbox *out, int final);
// Marks p alive again on pipe (an event when it was not), seen now.
void revive(broker *b, producer *p, uint32_t pipe, uint64_t now_ms, const char *how);
// Takes req.
void handle_push(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
                 broker_outbox *out);

// --- broker_session.c: hello, goodbye, heartbeat, authentication ---

// Nonzero when pipe said hello with the token.
int pipe_authed(const broker *b, uint32_t pipe);
// Forgets that pipe said hello (it closed).
void forget_pipe(broker *b, uint32_t pipe);
// Writes a description of pipe's peer to buf and returns buf.
const char *peer(const broker *b, uint32_t pipe, char *buf, size_t len);
// These take req.
void handle_hello(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
                  broker_outbox *out);
void handle_goodbye(broker *b, void *token, stoker_request *req, uint64_t now_ms,
                    broker_outbox *out);
void handle_heartbeat(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
                      broker_outbox *out);

// --- broker_lease.c: pulls, leases, acknowledgements ---

// Puts every lease of t back in its queues (newest first), counted as redelivered.
void redeliver(broker *b, trainer *t);
// Puts every lease of t, which said goodbye, back in its queues: those in held (handed to its
// caller, not acknowledged) counted as redelivered, the others as returned_unused.
void give_back(broker *b, trainer *t, uint32_t n_held, const uint64_t *held);
// Builds a lease of up to max examples for t (first in t->leases), round-robin over the queues;
// NULL when nothing is queued (or out of memory).
lease *take_lease(broker *b, trainer *t, uint32_t max);
// Puts the examples of lease l (unlinked from its trainer) back at the head of their queues and
// frees l, counted as returned_unused when unused (never handed to the trainer's caller), else
// as redelivered. Returns how many went back.
uint64_t return_lease(broker *b, lease *l, int unused);
// Unlinks parked pull k (after prev, NULL for the head) from the parked pulls; does not free it.
void unlink_pull(broker *b, parked *prev, parked *k);
// After any change: serves parked pulls and pushes until nothing moves.
void settle(broker *b, uint64_t now_ms, broker_outbox *out);
// These take req.
void handle_pull(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
                 broker_outbox *out);
void handle_ack(broker *b, void *token, stoker_request *req, uint64_t now_ms, broker_outbox *out);

// --- broker_loss.c: lost peers ---

// Disconnects trainer t and redelivers its leases; reason NULL means it said goodbye.
void drop_trainer(broker *b, trainer *t, const char *reason, uint64_t now_ms, broker_outbox *out);

// --- broker_trained.c: which seqs are trained ---

// Starts s empty with every seq below from counted as trained (frees what it held).
void trained_init(trained_set *s, uint64_t from);
void trained_fini(trained_set *s);
// Records seqs first .. first + count - 1 as trained.
void trained_add(trained_set *s, uint64_t first, uint64_t count);
// Writes what s says into a reply to its producer (trained_through and trained_after).
void trained_tell(const trained_set *s, stoker_reply *rep);

// --- broker_commit.c: trainers that acknowledge at their commits ---

// Bytes the queues may still take: max_bytes less what is queued and held for commits.
uint64_t bytes_room(const broker *b);
// Counts lease l (just given to t) as held when t commits; releases it when it ends.
void commit_hold(broker *b, const trainer *t, lease *l);
void commit_release(broker *b, lease *l);
// Why an empty pull of t waits (held leases fill max_bytes), in buf; "" when that is not why.
void commit_why_empty(const broker *b, const trainer *t, char *buf, size_t len);
// The queue depth a producer's reply tells it (its default retention is twice that): the
// current depth plus its share of the examples held for commits, which stay untrained until
// their trainer commits (without it, retention would stop the producers long before max_bytes).
uint32_t retain_depth(const broker *b);
// --- broker_queues.c: queue sizing ---

// Recomputes b->queue_depth from the trainers' batch sizes, the alive producers and max_bytes
// (nothing when the depth is fixed). Called before pulls are served.
void queues_resize(broker *b);
// Nonzero when no queue can take more: no alive producer's queue has room for another chunk of
// its size, or all of them together are at max_bytes.
int queues_full(const broker *b);
// A batch of max examples for trainer t goes out with only `queued` examples because the queues
// are full: counts it, and the first time says why in the log and in /status.
void queues_cut_short(broker *b, const trainer *t, uint32_t max, uint64_t queued);

// --- broker_report.c: reports ---

// Answers a Status request from the status snapshot; takes req.
void handle_status(broker *b, void *token, stoker_request *req, uint64_t now_ms,
                   broker_outbox *out);

#endif
