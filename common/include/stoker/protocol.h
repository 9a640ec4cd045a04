// Protocol vocabulary shared by the broker and its clients: methods, roles, events and the
// status snapshot. The wire format itself is private to the wire floor (common/wire/).
#ifndef STOKER_PROTOCOL_H
#define STOKER_PROTOCOL_H

#include <stdint.h>

#include "stoker/schema.h"

#define STOKER_REASON_MAX 160
// Most items one SHARD reply hands a dataset's producer.
#define STOKER_SHARD_MAX_ITEMS 65536

typedef enum stoker_method {
    STOKER_METHOD_NONE = 0,
    STOKER_HELLO = 1,
    STOKER_PUSH = 2,
    STOKER_PULL = 3,
    STOKER_ACK = 4,
    STOKER_STATUS = 5,
    STOKER_GOODBYE = 6,
    STOKER_HEARTBEAT = 7,
    STOKER_SHARD = 60,   // a dataset's producer asks for items to make
    STOKER_SCALED = 520, // a controller reports a change of a pool's producers
    STOKER_MIX = 640,    // a trainer changes its mixture's weights (docs/mixing.md)
} stoker_method;

typedef enum stoker_role {
    STOKER_ROLE_NONE = 0,
    STOKER_ROLE_PRODUCER = 1,
    STOKER_ROLE_TRAINER = 2,
    STOKER_ROLE_OBSERVER = 3,
} stoker_role;

typedef enum stoker_event_kind {
    STOKER_EVENT_NONE = 0,
    STOKER_EVENT_PRODUCER_JOINED = 1,
    STOKER_EVENT_PRODUCER_LOST = 2,
    STOKER_EVENT_PRODUCER_FINISHED = 3,
    STOKER_EVENT_PRODUCER_RECONNECTED = 4,
    STOKER_EVENT_EPOCH_END = 15, // every item of an epoch was acknowledged (epoch says which)
    STOKER_EVENT_SCALED = 520,   // a controller changed a pool (name) from scaled_from to scaled_to
    // The client's own, never on the wire: a later hello was answered by another broker instance
    // than the one before (it restarted: its epochs and a group's steps start anew). Queued before
    // any batch of the new broker; index 0, reason says both instances.
    STOKER_EVENT_BROKER_RESTARTED = 600,
    // The consumer's job lagged beyond --job-lag under --job-policy detach (docs/sharing.md):
    // name is the job, reason says why; no further example comes for it.
    STOKER_EVENT_JOB_DETACHED = 700,
    // The consumer's job lagged beyond --job-lag under --job-policy remake (a dataset's jobs):
    // the items it had no room for are made again for it by index once it has room; the others
    // go on. name is the job, reason says why. Said once until it caught up.
    STOKER_EVENT_JOB_REMAKING = 701,
} stoker_event_kind;

typedef struct stoker_event {
    uint64_t index; // position in the broker's event log, from 1
    stoker_event_kind kind;
    uint32_t producer; // the broker's producer id
    char name[STOKER_NAME_MAX];
    double at_s; // broker uptime when it happened
    char reason[STOKER_REASON_MAX];
    uint32_t epoch;                  // EPOCH_END: which epoch ended (from 0)
    uint32_t scaled_from, scaled_to; // SCALED: the pool's producers before and after
} stoker_event;

// "producer_joined", "producer_lost", ...
const char *stoker_event_kind_name(stoker_event_kind kind);

typedef enum stoker_producer_status {
    STOKER_PRODUCER_ALIVE = 0,
    STOKER_PRODUCER_LOST = 1,
    STOKER_PRODUCER_FINISHED = 2,
} stoker_producer_status;

// "alive", "lost", "finished".
const char *stoker_producer_status_name(stoker_producer_status status);

// The broker's accounting. produced = acknowledged + queued + in_flight at every moment.
typedef struct stoker_counters {
    uint64_t produced;     // examples accepted from producers
    uint64_t acknowledged; // examples acknowledged by trainers
    uint64_t queued;       // examples waiting in producer queues
    uint64_t in_flight;    // examples leased to trainers, not yet acknowledged
    uint64_t redelivered;  // examples returned to their queues after a loss: leases of a
                           // trainer that was dropped, or held unacknowledged when it left
    uint64_t delivered;    // examples sent to trainers, redeliveries included
    uint64_t queued_bytes;
    uint32_t producers_alive;
    uint32_t trainers;
    uint64_t refused; // requests refused with an error
    // Shared memory (docs/shm.md): examples delivered through it, and connected trainers that
    // take their batches through it (map the arena; the others get bytes over their sockets).
    uint64_t delivered_shm;
    uint32_t trainers_shm;
    // Of delivered_shm, examples sent from where the broker read their push into shared memory
    // (a push's chunk that is a whole batch, from a producer on another host): not copied.
    uint64_t delivered_in_place;
    // Examples returned to their queues unused: leases a trainer got ahead (prefetched) and
    // never handed to its caller, given back when it said goodbye. Not a loss.
    uint64_t returned_unused;
    uint64_t short_by_queues; // batches cut short by the queues' limits, not by the supply
    uint64_t producers_lost;  // producer_lost events so far (a producer lost twice counts twice)
    // Examples freed unread because the job they were queued for ended (docs/sharing.md): no
    // consumer of it within --job-timeout while other jobs went on.
    uint64_t released;
} stoker_counters;

// Every member of stoker_counters, once, in the order the status JSON's "counters" object lists
// them. The wire's encoder and decoder, the JSON and Prometheus renderings (status.c) and the
// trainer's audit are all made from this list: a new counter is one row here. Rows of three kinds:
//   C(field, metric, type, help)         a counter of the JSON "counters" object
//   A(field, audit, metric, type, help)  one the trainer's audit repeats, under the key audit
//                                        (also its train_result member)
//   G(field, metric, type, help)         a uint32_t at the top level of the JSON
// field is the struct member, the protobuf Counters field and the JSON key; metric the Prometheus
// name after "stoker_"; type "counter" or "gauge"; help its Prometheus HELP text.
// clang-format off
#define STOKER_COUNTERS(C, A, G)                                                                   \
    A(produced, produced, "produced_total", "counter", "Examples accepted from producers")        \
    A(acknowledged, acknowledged, "acknowledged_total", "counter",                                 \
      "Examples acknowledged by trainers")                                                         \
    A(queued, still_queued, "queued", "gauge", "Examples waiting in producer queues")             \
    A(in_flight, in_flight, "in_flight", "gauge",                                                  \
      "Examples leased to trainers, not yet acknowledged")                                         \
    A(redelivered, redelivered, "redelivered_total", "counter",                                    \
      "Examples returned to queues after a loss (a dropped trainer's leases)")                     \
    A(returned_unused, returned_unused, "returned_unused_total", "counter",                        \
      "Examples handed back unused (prefetched) by trainers that said goodbye")                    \
    C(delivered, "delivered_total", "counter", "Examples sent to trainers, redeliveries included") \
    C(queued_bytes, "queued_bytes", "gauge", "Bytes of queued examples")                           \
    C(refused, "refused_total", "counter", "Requests refused with an error")                      \
    C(short_by_queues, "short_by_queues_total", "counter",                                         \
      "Batches cut short by the queues' limits rather than by the supply")                         \
    C(delivered_shm, "delivered_shm_total", "counter",                                             \
      "Examples sent to trainers through shared memory")                                           \
    C(delivered_in_place, "delivered_in_place_total", "counter",                                   \
      "Examples sent through shared memory from where their push was read (not copied)")           \
    C(producers_lost, "producers_lost_total", "counter", "Producers lost (producer_lost events)")  \
    C(released, "released_total", "counter",                                                       \
      "Examples freed unread because the job they were queued for ended")                          \
    G(producers_alive, "producers_alive", "gauge", "Producers connected and sending")             \
    G(trainers, "trainers_connected", "gauge", "Trainers connected")                               \
    G(trainers_shm, "trainers_shm", "gauge", "Trainers whose batches come through shared memory")
// clang-format on

typedef struct stoker_producer_info {
    uint32_t id;
    char name[STOKER_NAME_MAX];
    uint64_t session;
    stoker_producer_status status;
    uint64_t queued, accepted, delivered, acknowledged, redelivered, returned_unused;
    uint64_t next_seq;
    uint64_t silent_ms; // since the broker last heard from it
    // Pushes received, and of them those that came on a connection of their own (the producer's
    // push stream, not the connection of its hello: see docs/shm.md).
    uint64_t pushes, pushes_streamed;
    // Of them, those by reference: their examples read in place from the producer's shared
    // memory (a producer on the broker's host).
    uint64_t pushes_shm;
    // Seqs its hellos said it skips (trained before, e.g. by a trainer whose acknowledgement
    // died with a broker): never pushed here. This broker took [next_seq - accepted - skipped,
    // next_seq) of the session, less those.
    uint64_t skipped;
} stoker_producer_info;

#endif
