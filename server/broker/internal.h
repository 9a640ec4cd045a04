// Private to the broker's rooms (broker_*.c): the functions one room calls in another. The state
// they share and the core's helpers are core.h's; the broker's public contract is
// broker.h; nothing outside server/broker*.c includes this file. Every function here runs under
// the caller's lock (see broker.h), like the public ones, and none does I/O: replies go to the
// outbox. The core (core.c) calls none of them; the dispatcher (broker.c) calls them.
#ifndef BROKER_INTERNAL_H
#define BROKER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "epoch.h"

// --- push.c: pushes ---

// Completes parked pushes that now fit, oldest first per producer. Returns how many.
uint32_t push_serve_parked(broker *b, uint64_t now_ms, broker_outbox *out);
// Tries to apply the parked push k. Returns 1 when it was answered (k->req consumed), 0 when it
// must keep waiting (only when !final).
int push_try(broker *b, producer *p, parked *k, uint64_t now_ms, broker_outbox *out, int final);
int push_handle(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
                broker_outbox *out);

// --- session.c: hello, goodbye, heartbeat, authentication ---

// Nonzero when pipe said hello with the token.
int session_pipe_authed(const broker *b, uint32_t pipe);
// Counts pipe as having said hello with the token (a trainer's hello to another job of this
// broker, jobs.c). STOKER_OK or STOKER_NOMEM.
int session_authorize_pipe(broker *b, uint32_t pipe);
// Forgets that pipe said hello (it closed).
void session_forget_pipe(broker *b, uint32_t pipe);
// Writes a description of pipe's peer to buf and returns buf.
const char *session_peer(const broker *b, uint32_t pipe, char *buf, size_t len);
int session_handle_hello(broker *b, void *token, uint32_t pipe, stoker_request *req,
                         uint64_t now_ms, broker_outbox *out);
int session_handle_goodbye(broker *b, void *token, uint32_t pipe, stoker_request *req,
                           uint64_t now_ms, broker_outbox *out);
int session_handle_heartbeat(broker *b, void *token, uint32_t pipe, stoker_request *req,
                             uint64_t now_ms, broker_outbox *out);

// --- lease.c: leases (floor 3) ---

// Puts every lease of t back in its queues (newest first), counted as redelivered.
void lease_redeliver(broker *b, trainer *t);
// Puts every lease of t, which said goodbye, back in its queues: those in held (handed to its
// caller, not acknowledged) counted as redelivered, the others as returned_unused.
void lease_give_back(broker *b, trainer *t, uint32_t n_held, const uint64_t *held);
// Builds a lease of up to max examples for t (first in t->leases), round-robin over the queues
// (made by tokens: max rows with pack=), never more than cap examples (UINT32_MAX: no cap);
// NULL when nothing is queued (or out of memory).
lease *lease_take(broker *b, trainer *t, uint32_t max, uint32_t cap);
// A lease of a mixture's batch for t: counts[s] examples of each source s of m (round-robin
// over its pool's queues), booked in m; NULL when nothing could be taken (or out of memory).
lease *lease_take_mix(broker *b, trainer *t, struct mix *m, const uint32_t *counts);
// A lease of a mixture's batch by tokens for t: the picks of plan (budget_plan_mixed), each
// run of neighbours one part, the tokens of each source booked in m; NULL when nothing could be
// taken (or out of memory).
// Describes lease l for a reply: its chunk's parts, runs and (a dataset's) items, malloc'd for
// the caller to free after the reply is sent. STOKER_OK or STOKER_NOMEM (nothing to free).
int lease_describe(const broker *b, const lease *l, stoker_reply *rep);
struct budget_plan;
lease *lease_take_mix_plan(broker *b, trainer *t, struct mix *m, const struct budget_plan *plan);
// Puts the examples of lease l (unlinked from its trainer) back at the head of their queues and
// frees l, counted as returned_unused when unused (never handed to the trainer's caller), else
// as redelivered. Returns how many went back.
uint64_t lease_return(broker *b, lease *l, int unused);
// Applies acknowledgements (leases) from t; returns how many were refused (unknown, not t's).
uint32_t lease_apply_acks(broker *b, trainer *t, uint32_t n, const uint64_t *acks, uint64_t now_ms);

// --- pull.c: pulls and acknowledgements (a handler, floor 5) ---

// Answers parked pulls that can be answered now (or whose wait expired), oldest first; returns
// how many (the dispatcher's settle loop).
uint32_t pull_serve_parked(broker *b, uint64_t now_ms, broker_outbox *out);
int pull_handle(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
                broker_outbox *out);
// A trainer's new weights for its mixture (docs/mixing.md): from its next batch on, the reply's
// group_step naming that batch's number. Same pools, a plain trainer (a group's changes by its
// schedule, at one step for every rank).
int pull_handle_mix(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
                    broker_outbox *out);
int pull_handle_ack(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
                    broker_outbox *out);

// --- drop.c: a trainer's end ---

// Disconnects trainer t and redelivers its leases; reason NULL means it said goodbye.
void drop_trainer(broker *b, trainer *t, const char *reason, uint64_t now_ms, broker_outbox *out);

// --- loss.c: lost peers and deadlines (the dispatcher settles after each) ---

// The connection pipe closed (lose_producers: its producers are lost) or was reset by a listener
// restart (they reconnect): its trainers are dropped.
void loss_pipe_gone(broker *b, uint32_t pipe, uint64_t now_ms, int lose_producers,
                    broker_outbox *out);
// Parked pushes past their wait, silent producers and trainers, group commits and autoscaling.
void loss_tick(broker *b, uint64_t now_ms, broker_outbox *out);

// --- trained.c: which seqs are trained ---

// Starts s empty with every seq below from counted as trained (frees what it held).
void trained_init(trained_set *s, uint64_t from);
void trained_fini(trained_set *s);
// Records seqs first .. first + count - 1 as trained.
void trained_add(trained_set *s, uint64_t first, uint64_t count);
// Writes what s says into a reply to its producer (trained_through and trained_after).
void trained_tell(const trained_set *s, stoker_reply *rep);
// Whether seq is trained; else in *next the first trained seq after it (UINT64_MAX: none).
int trained_has(const trained_set *s, uint64_t seq, uint64_t *next);
// The first seq at or after seq that is not trained (seq itself when it is not).
uint64_t trained_run_end(const trained_set *s, uint64_t seq);
// Whether no seq of p's from seq on can be trained yet (nothing to look up): with epochs (their
// own books), or when p's trained set holds nothing beyond its through mark.
int trained_none_from(const broker *b, const producer *p, uint64_t seq);
// Where a walk over p's trained ranges is (trained_untrained): the first range that may hold
// seqs from last on, and the seq asked before. Zero: at the start.
typedef struct trained_walk {
    uint32_t i;
    uint64_t last;
} trained_walk;
// Whether seq of p may be handed out: not trained already (a trainer's hello said so, after the
// broker before this one died; such examples are dropped once they reach their queue's head,
// lease.c). With a walk (w), seqs asked in order cost the ranges once in all, not once each
// (a window over a queue that batches by buckets split into many ranges); NULL: a look alone.
int trained_untrained(const broker *b, const producer *p, trained_walk *w, uint64_t seq);
// A trainer's hello named identities it trained (req->trained): counted trained for the
// producers b knows, and kept for the sessions that come back later (trained_reported_apply).
void trained_reported(broker *b, const stoker_request *req);
// A producer's session came back to b (a hello at seq > 0): what trainers reported of it.
void trained_reported_apply(broker *b, producer *p);

// --- commit.c: trainers that acknowledge at their commits ---

// Bytes the queues may still take: max_bytes less what is queued and held for commits.
uint64_t commit_bytes_room(const broker *b);
// Counts lease l (just given to t) as held when t commits; releases it when it ends.
void commit_hold(broker *b, const trainer *t, lease *l);
void commit_release(broker *b, lease *l);
// Why an empty pull of t waits (held leases fill max_bytes), in buf; "" when that is not why.
void commit_why_empty(const broker *b, const trainer *t, char *buf, size_t len);
// The queue depth a producer's reply tells it (its default retention is twice that): the
// current depth plus its share of the examples held for commits, which stay untrained until
// their trainer commits (without it, retention would stop the producers long before max_bytes),
// and its share of those in flight (leased, not yet acknowledged).
uint32_t commit_retain_depth(const broker *b);
// --- queues.c: queue sizing ---

// The fewest bytes one example of schema takes in the queues: its fixed fields, plus 8 bytes of
// offsets per variable field (whose values count as they come, stoker_chunk_bytes). What the
// queues' sizing estimates with; the byte limits themselves count real bytes.
size_t queues_example_bytes(const stoker_schema *schema);

// Recomputes b->queue_depth from the trainers' batch sizes, the alive producers and max_bytes
// (nothing when the depth is fixed). Called before pulls are served.
void queues_resize(broker *b);
// The most examples one push may carry: --max-chunk; a fixed --queue-depth; what --max-bytes
// and the transport's largest request can hold of the schema's examples. Told to producers in
// their hello reply (max_chunk), so that their chunks never exceed it.
uint32_t queues_max_chunk(const broker *b);
// The most examples one batch of a connected trainer counting examples takes (its pulls'
// max_examples; one batching by tokens is left out: its count is only a cap), 0: none. Told to
// producers in their push replies, so that sized chunks can hold a batch each.
uint32_t queues_batch_examples(const broker *b);
// Nonzero when no queue can take more: no alive producer's queue has room for another chunk of
// its size, or all of them together are at max_bytes.
int queues_full(const broker *b);
// Nonzero when alive producer p's queue can take its next chunk (queues_full's test, for one).
int queues_has_room(const broker *b, const producer *p);
// A batch of max examples for trainer t goes out with only `queued` examples because the queues
// are full: counts it, and the first time says why in the log and in /status.
void queues_cut_short(broker *b, const trainer *t, uint32_t max, uint64_t queued);

// --- report.c: reports ---

// Answers a Status request from the status snapshot; takes req.
int report_status(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
                  broker_outbox *out);

#endif
