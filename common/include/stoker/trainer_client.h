// The trainer side of the protocol: hello, pull batches with several requests in flight
// (prefetch), acknowledgements piggybacked on the next pull, events, status.
// A trainer client is used from one thread. Every wait is bounded: a batch arrives, the supply
// ends (STOKER_NO_PRODUCERS / STOKER_END_OF_DATA), or nothing arrives within the stall timeout
// (STOKER_STALLED).
#ifndef STOKER_TRAINER_CLIENT_H
#define STOKER_TRAINER_CLIENT_H

#include "stoker/arena.h"
#include "stoker/batching.h"
#include "stoker/mix.h"
#include "stoker/chunk.h"
#include "stoker/client.h"

typedef struct stoker_trainer_client stoker_trainer_client;

typedef struct stoker_trainer_options {
    stoker_client_options client;
    uint32_t batch_size;       // examples per batch (default 4)
    uint32_t prefetch;         // pull requests kept in flight (default 4, at most 64)
    uint32_t stall_timeout_ms; // waiting this long for a batch: STOKER_STALLED (default 4000)
    // Called for each event as soon as a reply brings it, from inside stoker_trainer_client_next
    // (on the caller's thread), even while next keeps waiting for a batch, or from inside
    // stoker_trainer_client_ack / _flush / _commit (an acknowledgement's reply brings the events it
    // caused, such as the end of a dataset's epoch). When NULL, events
    // are queued for stoker_trainer_client_poll_event instead.
    void (*on_event)(const stoker_event *event, void *arg);
    void *on_event_arg;
    // On the broker's host, take batches from its shared memory (stoker/arena.h) instead of the
    // socket; falls back to the socket, with one log line, where the broker cannot serve them.
    // Default 1, or 0 when the environment has STOKER_SHM=0.
    int shm;
    // Called with the arena's read-only mapping once it is mapped (mapped 1, from create or a
    // later hello, on the caller's or the client's own thread) and just before it is unmapped
    // (mapped 0, by whichever thread frees its last batch or the client): e.g. to register it as
    // CUDA pinned memory so uploads read it directly. NULL for none; on_arena_arg must outlive
    // every batch (a batch keeps the mapping).
    stoker_arena_hook on_arena;
    void *on_arena_arg;
    // Commit with checkpoints: acknowledgements (stoker_trainer_client_ack) are kept by the
    // client and sent only by stoker_trainer_client_commit, so the broker keeps those leases
    // in flight (inside its --max-bytes) until then and redelivers them if this trainer dies
    // first. Commit when the model's state is saved: a model resumed from that checkpoint then
    // sees every example exactly once in its lineage. 0 (default): acknowledged after the step.
    // With group: a group commit (every rank commits at the same step; see _commit).
    int commit;
    // Data-parallel group (docs/groups.md): NULL for none, else its name (borrowed for create),
    // this trainer's rank in 0..world-1 and the world size. Every rank gets batch_size examples
    // per step, the same number of steps, and the end at the same step; a rank lost before it
    // makes next return STOKER_GROUP_BROKEN on the others.
    const char *group;
    uint32_t rank, world;
    // A group resumed from a checkpoint: the steps its ranks had taken then (group commit,
    // docs/groups.md); the group's step count goes on from there. 0: a new run.
    uint64_t group_resume_step;
    // Identities this trainer trained before it was created (a run resumed from a checkpoint
    // that holds identities maybe not committed): n_trained_runs triples (session, first_seq,
    // count), borrowed for create. They are in its identity filter from the start and its hello
    // tells the broker, so that no other trainer (no other rank) is given them either.
    const uint64_t *trained_runs;
    uint32_t n_trained_runs;
    // Liveness: while it lives the client sends the broker a heartbeat from a thread of its own
    // (every third of the broker's --trainer-timeout), so a step longer than that timeout (an
    // evaluation pass) keeps its leases and its group; only a dead or frozen process falls
    // silent. 1: no heartbeat, the broker hears the trainer only through its pulls and drops it
    // after --trainer-timeout without one, as if frozen (for tests of that). Default 0.
    int no_heartbeat;
    // How batches are made from a variable-length schema (stoker/batching.h): a token budget,
    // length buckets or packed rows; all 0 (default): batch_size examples each. With max_tokens
    // batch_size caps the sequences per batch; with pack it is the rows per batch. Every rank of
    // a group says the same.
    stoker_batching batching;
    // Its mixture of sources (stoker/mix.h, docs/mixing.md): n 0 (default) takes from every
    // producer alike; else each batch holds each pool's share, exactly.
    stoker_mix mix;
    // The training job it belongs to (docs/sharing.md; borrowed for create): jobs share the
    // broker's producers and each gets every example once. NULL or "" (default): the default
    // job; else 1..STOKER_NAME_MAX-1 bytes. Every rank of a group names the same job.
    const char *job;
} stoker_trainer_options;

void stoker_trainer_options_init(stoker_trainer_options *opts);

// Connects and says hello (blocking, bounded by opts.client.give_up_ms); on success *out is a
// new client and the broker's schema is known. Errors: STOKER_CONNECTION (no broker),
// STOKER_UNAUTHENTICATED, STOKER_INVALID (message in err), STOKER_INTERRUPTED.
int stoker_trainer_client_create(const stoker_trainer_options *opts, stoker_trainer_client **out,
                                 char *err, size_t err_len);

// The broker's schema (borrowed, valid while the client lives). Zero fields until the first
// producer said hello, if the broker was started without --schema; stoker_trainer_client_next
// fills it in as soon as the broker knows it.
const stoker_schema *stoker_trainer_client_schema(const stoker_trainer_client *tc);

// Waits for the next batch. On STOKER_OK *out is a batch owned by the caller (at most
// batch_size examples; fewer when the supply ends, when the broker's queues cannot hold a full
// batch, or when data trickles in slower than a pull waits): train on it, then pass its lease to
// stoker_trainer_client_ack and free it with stoker_batch_destroy. Otherwise:
// STOKER_NO_PRODUCERS / STOKER_END_OF_DATA (supply ended; repeated on later calls),
// STOKER_GROUP_BROKEN (a rank of this trainer's group was lost; repeated on later calls),
// STOKER_STALLED (no batch within stall_timeout_ms of this call), STOKER_INTERRUPTED (*stop
// set), or an error.
// Never blocks longer than the stall timeout.
int stoker_trainer_client_next(stoker_trainer_client *tc, stoker_batch **out);

// As stoker_trainer_client_next, but waits at most wait_ms: when that is shorter than the stall
// timeout and no batch came, returns STOKER_TIMEOUT (no warning; call again). For a caller that
// has something to do while the supply is idle (a committing trainer checkpoints).
int stoker_trainer_client_next_within(stoker_trainer_client *tc, stoker_batch **out,
                                      uint32_t wait_ms);

// The broker's word on why the supply ended or the group broke (after next returned
// STOKER_NO_PRODUCERS, STOKER_END_OF_DATA or STOKER_GROUP_BROKEN; "" before). Borrowed.
const char *stoker_trainer_client_end_reason(const stoker_trainer_client *tc);
// The broker's reason for the last pull (or hello) it refused, which next returned as an error
// (STOKER_INVALID, ...); "" when none was refused.
const char *stoker_trainer_client_refusal(const stoker_trainer_client *tc);
// For a rank of a group: the batches (steps) next returned so far, and, once the supply ended,
// the examples left over that no equal step could hold (still queued at the broker).
uint64_t stoker_trainer_client_group_steps(const stoker_trainer_client *tc);
uint64_t stoker_trainer_client_group_leftover(const stoker_trainer_client *tc);

// Marks lease as done; it is acknowledged with the next pull (or by flush / destroy).
void stoker_trainer_client_ack(stoker_trainer_client *tc, uint64_t lease);
// Sends pending acknowledgements now (bounded by the request timeout).
int stoker_trainer_client_flush(stoker_trainer_client *tc);
// With opts.commit: sends every acknowledgement kept since the last commit and returns once the
// broker applied them (STOKER_OK: those examples now count as trained and are never delivered
// again), or the error (they stay uncommitted: a later commit sends them again; leases the broker
// gave back meanwhile are refused and come again, dropped by the identity filter). Without
// opts.commit it is stoker_trainer_client_flush.
// A rank of a group (group commit): every rank commits at the same step; the broker applies
// all ranks' acknowledgements at once when the last rank's commit comes, and this returns then
// (STOKER_OK), or STOKER_TIMEOUT when a rank did not commit within STOKER_GROUP_COMMIT_WAIT_MS
// of the first, STOKER_GROUP_BROKEN when a rank was lost meanwhile, STOKER_INVALID when the
// ranks commit at different steps: then nothing of it counts (all stay uncommitted).
int stoker_trainer_client_commit(stoker_trainer_client *tc);
// Turns opts.commit on or off after create (the client says hello again before its next pull,
// which tells the broker). Not for a rank of a group (opts.group): create refuses both together,
// and turning it on here is refused with a warning.
void stoker_trainer_client_set_commit(stoker_trainer_client *tc, int on);
// Leases acknowledged but not yet committed.
uint64_t stoker_trainer_client_uncommitted(const stoker_trainer_client *tc);
// Marks the identities (session, first_seq .. first_seq + count - 1) as trained before this
// client existed (by the model a trainer resumed from a checkpoint taken just before a commit
// that never happened): when the broker delivers them they are dropped like duplicates and their
// leases acknowledged (with opts.commit, at the next commit). STOKER_OK or STOKER_NOMEM.
int stoker_trainer_client_mark_trained(stoker_trainer_client *tc, uint64_t session,
                                       uint64_t first_seq, uint64_t count);

// Pops the oldest event not yet returned into *out: 1 if there was one, 0 if none.
int stoker_trainer_client_poll_event(stoker_trainer_client *tc, stoker_event *out);
// Restarts of the broker this client noticed: hellos answered by another broker instance than
// the one before (each also queued a STOKER_EVENT_BROKER_RESTARTED event before the new
// broker's first batch). 0 with a broker that does not say its instance. Any thread.
uint32_t stoker_trainer_client_broker_restarts(const stoker_trainer_client *tc);
// The broker instance that answered the latest hello (0: the broker does not say one). Any thread.
uint64_t stoker_trainer_client_broker_id(const stoker_trainer_client *tc);

// Identities seen twice so far (the client checks every batch's runs), and leases the broker
// refused to acknowledge (already redelivered after a disconnect).
uint64_t stoker_trainer_client_duplicates(const stoker_trainer_client *tc);
uint64_t stoker_trainer_client_acks_refused(const stoker_trainer_client *tc);

// How batches arrive: "shm" once the broker's shared memory is mapped and batches came through
// it (a batch the full arena sent as bytes does not change that), "socket" otherwise (a static
// string).
const char *stoker_trainer_client_delivery(const stoker_trainer_client *tc);
// Batches so far by the path they came (each pointer may be NULL): through shared memory, as
// bytes over the socket, and of those the ones that came so while the arena was mapped (the
// broker's arena had no free region: the fallback of a full arena).
void stoker_trainer_client_batches_by_path(const stoker_trainer_client *tc, uint64_t *shm,
                                           uint64_t *socket, uint64_t *arena_full);
// Each of them alone.
static inline uint64_t
stoker_trainer_client_arena_batches(const stoker_trainer_client *tc)
{
    uint64_t n;
    stoker_trainer_client_batches_by_path(tc, &n, NULL, NULL);
    return n;
}
static inline uint64_t
stoker_trainer_client_socket_batches(const stoker_trainer_client *tc)
{
    uint64_t n;
    stoker_trainer_client_batches_by_path(tc, NULL, &n, NULL);
    return n;
}
static inline uint64_t
stoker_trainer_client_arena_full_batches(const stoker_trainer_client *tc)
{
    uint64_t n;
    stoker_trainer_client_batches_by_path(tc, NULL, NULL, &n);
    return n;
}

// Changes the weights of this trainer's mixture (stoker/mix.h, docs/mixing.md; not a rank's: a
// group's change by its schedule) to those of mix (the same pools, in the same order): they
// apply from the broker's next batch on, whose number goes into *from_batch (may be NULL);
// batches already made (prefetched) keep the weights they were made with. The schedule, if any,
// is done. STOKER_INVALID with the broker's reason in err (other pools, no mixture, a rank).
int stoker_trainer_client_set_mix(stoker_trainer_client *tc, const stoker_mix *mix,
                                  uint64_t *from_batch, char *err, size_t err_len);

// The broker's status, as stoker_status_fetch.
int stoker_trainer_client_status(stoker_trainer_client *tc, stoker_status **out);

// Flushes acknowledgements and says goodbye (best effort, bounded by 1 s each), closes and
// frees; accepts NULL. Leases not acknowledged are redelivered by the broker to other trainers.
void stoker_trainer_client_destroy(stoker_trainer_client *tc);

#endif
