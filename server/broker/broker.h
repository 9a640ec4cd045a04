// The broker's state machine: producers with bounded queues, trainers with leases, parked
// requests, events and the accounting of DESIGN.md. It knows nothing of sockets: the transport
// (server.c) hands it decoded requests with an opaque token for the reply, and it answers by
// appending (token, encoded reply) pairs to an outbox that the transport sends after unlocking.
// Not thread-safe: the caller serializes every call with one lock.
#ifndef BROKER_H
#define BROKER_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/protocol.h"
#include "stoker/status.h"
#include "stoker/wire.h"

struct nng_msg;

typedef struct broker broker;

typedef struct broker_config {
    // Examples per producer queue. With queue_depth_auto (the default) this is a floor and the
    // broker sizes the queues itself (queues.c): enough for two of the largest batch a
    // connected trainer asks for across the alive producers, within max_bytes. Without it (a
    // user's --queue-depth N) the depth is fixed and a chunk larger than it is refused
    // (TOO_LARGE); sized, the queues also grow to hold two of the largest chunk a producer
    // pushes, and a chunk is refused only beyond what --max-bytes could ever hold.
    uint32_t queue_depth;
    int queue_depth_auto;
    uint64_t max_bytes;           // examples' bytes queued in all (in-flight not counted)
    uint32_t producer_timeout_ms; // silence before a producer is lost
    // A producer lost by silence whose connection is still open (frozen, paused, a loaded node)
    // may come back with what it retains: the supply does not end for want of it until this long
    // after its loss (its connection closing ends the wait at once).
    uint32_t silent_grace_ms;
    uint32_t trainer_timeout_ms; // silence before a trainer is dropped (leases redelivered)
    uint32_t park_ms;            // a push that does not fit waits this long, then RETRY
    uint32_t max_pull_wait_ms;   // cap on a pull's requested wait
    uint32_t max_producers;
    uint32_t max_trainers;
    uint32_t max_chunk_examples;
    // The transport's largest request (its --max-message): a push's examples must fit in it
    // (queues_max_chunk); 0: not limited here.
    uint64_t max_message_bytes;
    uint32_t max_parked;        // requests that may wait at once (the transport's spare contexts)
    uint32_t group_steps_ahead; // steps a group may form beyond its slowest rank (docs/groups.md)
    // Jobs sharing the producers (jobs.c, docs/sharing.md): examples a job may hold queued per
    // producer beyond the queue depth while another job takes faster (0: one queue depth), and
    // how long a job with no consumer connected is kept before what it held is freed.
    uint32_t job_lag;
    uint32_t job_timeout_ms;
    // What a job lagging beyond the lag bound does to the others (JOB_POLICY_*): the producers
    // wait for it (the default); it is detached, its consumers told why, and the others go on (a
    // stream's jobs); or what it cannot take now is passed over and made again for it by index
    // once it has room (a dataset's jobs).
    int job_policy;
    // The autoscale signal (docs/autoscale.md): producers wanted = demand x headroom / supply per
    // producer, within min..max.
    double autoscale_headroom;
    uint32_t autoscale_min, autoscale_max;
    int has_schema;
    stoker_schema schema;
    const char *token; // NULL or "": no authentication (borrowed)
    // Id of the first lease; 0 (the default) draws a random 48-bit start, so that an ack a
    // trainer still holds from a broker that restarted can never match a lease of the new one.
    uint64_t first_lease_id;
    // Shared memory for trainers on this host (arena.h): its size, at most max_bytes;
    // 0 (the default here; stoker-broker's default is in its option table) serves bytes only.
    uint64_t arena_bytes;
    // A dataset (epoch.c): dataset_size > 0 serves items 0..dataset_size-1 in epochs
    // instead of streams. Each epoch is a permutation from (shuffle_seed, epoch), handed to
    // producers in shards of shard_items; epochs 0 means without end. dataset_auto serves a
    // dataset of as many items as the first dataset producer says (dataset_size 0 until then).
    // An epoch's work starts only once the previous one was acknowledged in full, unless
    // overlap_epochs (strict_epochs, the default, only says so).
    uint64_t dataset_size;
    int dataset_auto;
    uint64_t shuffle_seed;
    uint32_t shard_items;
    uint32_t epochs;
    int strict_epochs;
    int overlap_epochs;
    // Writes a description of the peer on pipe (its address) for log lines; may be NULL.
    void (*describe_peer)(uint32_t pipe, char *buf, size_t len);
    // The port of the intake (server/intake.c) beside the listener pipe came through, told to a
    // producer in its hello reply; 0 none. May be NULL. Called under the broker's lock.
    uint32_t (*intake_port)(void *arg, uint32_t pipe);
    void *intake_arg;
} broker_config;

// Fills the defaults. They are written only there: stoker-broker --help prints them from the
// initialised config.
void broker_config_init(broker_config *cfg);

struct broker_fill; // a batch's copy into the shared-memory arena (lease.c)

typedef struct broker_outbox {
    struct {
        void *token;
        struct nng_msg *msg;
        struct broker_fill *fill; // to do before msg is sent (broker_outbox_fill), or NULL
    } * items;
    size_t n, cap;
} broker_outbox;

// Does the copies the replies wait for (batches into the shared-memory arena), which the broker
// leaves for after its lock is released: call it outside the lock, before sending any reply.
void broker_outbox_fill(broker_outbox *out);
// Frees the replies not sent (a copy not done is dropped: its region is let go as usual).
void broker_outbox_fini(broker_outbox *out);

// Returns a new broker, or NULL when out of memory.
broker *broker_create(const broker_config *cfg, uint64_t now_ms);
// Frees everything; parked requests' tokens are appended to out with a NULL msg (the transport
// drops them).
void broker_destroy(broker *b, broker_outbox *out);

// Handles a decoded request that arrived on pipe. Takes ownership of req. The reply (now or
// later, when a parked request completes) goes to out with this token.
void broker_handle(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
                   broker_outbox *out);
// Answers a request that could not be decoded: code with message, logged, counted.
void broker_refuse(broker *b, void *token, uint32_t pipe, int code, const char *message,
                   broker_outbox *out);
// A transport connection closed: its producer is lost, its trainer dropped.
void broker_pipe_closed(broker *b, uint32_t pipe, uint64_t now_ms, broker_outbox *out);
// The broker closed connection `pipe` itself (a listener restart, see server.c): a producer on
// it is not lost, since it reconnects on its own (its silence decides, as for any peer not heard
// from); a trainer on it is dropped as on any closed connection (a reply in flight on it is gone,
// so its leases are redelivered).
void broker_pipe_reset(broker *b, uint32_t pipe, uint64_t now_ms, broker_outbox *out);
// Expires parked requests and silent peers. Call every few milliseconds.
void broker_tick(broker *b, uint64_t now_ms, broker_outbox *out);

void broker_counters(const broker *b, stoker_counters *out);
// The broker's shared memory for trainers on its host (arena.h), NULL without one: the
// intake reads large pushes into it (broker_arena_stage). Fixed for the broker's life.
struct broker_arena *broker_shared_memory(const broker *b);
// The status snapshot (stoker/status.h) with the latest max_events events: *out is a new
// snapshot owned by the caller (stoker_status_destroy). Returns STOKER_OK or STOKER_NOMEM.
int broker_status(const broker *b, uint64_t now_ms, uint32_t max_events, stoker_status **out);
// The snapshot rendered as Prometheus text (/metrics) / as JSON (/status, the latest 100 events):
// a malloc'd string (caller frees), or NULL when out of memory.
char *broker_metrics_text(const broker *b, uint64_t now_ms);
char *broker_status_json(const broker *b, uint64_t now_ms);

// --job-policy's values, in the order the command line lists them.
enum { JOB_POLICY_WAIT, JOB_POLICY_DETACH, JOB_POLICY_REMAKE };

#endif
