// The broker's status snapshot: its limits, counters, per-producer queue state and latest events,
// as the broker fills it (server/broker_report.c) and a client receives it (stoker_status_fetch,
// stoker_trainer_client_status); and its renderings: /status's JSON (also what the consumer API
// and `python -m stoker.status --json` print) and /metrics' Prometheus text. One snapshot, one
// renderer per format, so every view carries the same names. It does not fetch anything.
#ifndef STOKER_STATUS_H
#define STOKER_STATUS_H

#include <stdint.h>

#include "stoker/mix.h"
#include "stoker/labels.h"
#include "stoker/protocol.h"
#include "stoker/schema.h"

#define STOKER_GROUP_MAX_WORLD 256 // ranks in one data-parallel group

// A data-parallel group of trainers (docs/groups.md) as the broker sees it.
typedef struct stoker_group_info {
    char name[STOKER_NAME_MAX];
    const char *state; // "open", "ended" or "broken" (static)
    uint32_t world, batch, joined;
    uint64_t steps;    // formed so far
    uint64_t leftover; // at the end: examples no equal step could hold (still queued)
    uint64_t rank_steps[STOKER_GROUP_MAX_WORLD]; // batches sent to each rank
    uint32_t rank_ready[STOKER_GROUP_MAX_WORLD]; // formed for each rank, not sent yet
    char end_reason[STOKER_REASON_MAX];          // ended or broken: why ("" while open)
    double ended_at_s;                           // ended or broken: the broker's uptime then
} stoker_group_info;

// --- consumers and their delivery path (docs/shm.md) ---------------------------------
// How a consumer's batches reach it: by its latest batch, shared memory when it maps the broker's
// arena (a batch the full arena could not hold still counts as shm, in arena_full), else socket.
typedef enum stoker_delivery {
    STOKER_DELIVERY_NONE = 0, // no batch yet
    STOKER_DELIVERY_SOCKET = 1,
    STOKER_DELIVERY_SHM = 2,
} stoker_delivery;

// "none", "socket", "shm" (static).
const char *stoker_delivery_name(stoker_delivery delivery);

// A trainer (any consumer: the C trainer, the consumer API, Python, stoker-pull) as the broker
// sees it. Batches, examples and bytes it was sent each way (redeliveries included).
typedef struct stoker_mix_share {
    char pool[STOKER_NAME_MAX];
    double share;       // its target share now
    uint64_t delivered; // examples of it delivered (leased and not given back)
    int dry;            // it ran dry and left the mixture
} stoker_mix_share;

typedef struct stoker_consumer_info {
    uint32_t id;
    char name[STOKER_NAME_MAX];
    uint32_t pid; // its process id as it said in its hello; 0: not said
    int connected;
    stoker_delivery delivery;
    uint64_t batches_shm, batches_socket, examples_shm, examples_socket, bytes_shm, bytes_socket;
    uint64_t arena_full; // batches sent as bytes because the arena had no free region
    // Milliseconds its caller waited for batches since it started, as it said in its latest
    // pull: its rate is the share of time the consumer waits for data.
    uint64_t data_wait_ms;
    // Batched by tokens (stoker/batching.h): the tokens it was sent and the padding its batches
    // take (padded to their longest, or packed rows' unused tail). 0 and 0 for count batching.
    uint64_t tokens, padding;
    // Its mixture of sources (docs/mixing.md; n_mix 0: none): each source's pool, target share
    // (its weight over the sources still in it), examples delivered and whether it ran dry; the
    // source its latest full batch waited for (-1: none); the stop rule (stoker_mix_stop).
    uint32_t n_mix;
    stoker_mix_share mix[STOKER_MIX_MAX];
    int32_t mix_waits_for;
    uint32_t mix_stop;
    char job[STOKER_NAME_MAX]; // its job (docs/sharing.md); "": the default job
} stoker_consumer_info;
// --- end of consumers ---------------------------------------------------------------------------

// --- autoscale (docs/autoscale.md) ---
// One producer pool's share of the broker's autoscale signal.
typedef struct stoker_pool_info {
    char name[STOKER_NAME_MAX];
    double demand; // examples/s the trainers would take from this pool if they never waited
    double supply; // examples/s of one producer while not held by full queues (0: unknown)
    // The lowest and highest supply (per producer, smoothed) over the broker's last minute,
    // supply included: how much the machine's load moves it (0: unknown, or an older broker).
    double supply_low, supply_high;
    uint32_t wanted;  // producers wanted, within the broker's min..max
    uint32_t current; // producers of the pool alive now
    char why[192];    // one sentence
} stoker_pool_info;
// --- end of autoscale ---

// --- jobs (docs/sharing.md) ---
// A training job sharing the broker's producers: every job gets every example made after it
// joined once; producers make each example once.
#define STOKER_JOBS_MAX 64 // jobs one Status lists (a peer listing more is refused)
typedef enum stoker_job_state {
    STOKER_JOB_RUNNING = 0,  // a consumer of it is connected
    STOKER_JOB_ABSENT = 1,   // none connected; kept for --job-timeout (a resume continues it)
    STOKER_JOB_ENDED = 2,    // it left (or stayed away past --job-timeout): its examples freed
    STOKER_JOB_DETACHED = 3, // it lagged beyond --job-lag under --job-policy detach
} stoker_job_state;
// "running", "absent", "ended", "detached" (static).
const char *stoker_job_state_name(uint32_t state);

typedef struct stoker_job_info {
    char name[STOKER_NAME_MAX]; // "": the default job
    uint32_t state;             // stoker_job_state
    uint32_t trainers;          // its consumers connected
    uint64_t made;              // examples made for it since it joined (everything it can get)
    uint64_t delivered, acknowledged, queued, in_flight;
    uint64_t lag;          // examples queued for it beyond the fastest job's (all producers)
    double joined_s;       // broker uptime when it joined
    double rate;           // examples/s delivered to it, smoothed over the last seconds
    uint64_t remade;       // of made: made again by index for it (a dataset it joined late to
                           // or lagged in under --job-policy remake)
    uint64_t data_wait_ms; // its consumers' data wait, summed
    char end_reason[192];  // why it ended or was detached ("" while it runs)
} stoker_job_info;
// --- end of jobs ---

typedef struct stoker_status {
    uint64_t uptime_ms;   // since the broker started
    uint64_t broker_id;   // the broker's instance, drawn at its start (0: a broker before it)
    int has_schema;       // 0 until the first producer said hello (or --schema)
    stoker_schema schema; // when has_schema
    uint32_t queue_depth; // examples per producer queue, now
    uint64_t max_bytes;   // examples' bytes all queues may hold
    int queue_depth_auto; // 1: the broker sizes queue_depth (no --queue-depth N given)
    // Said once (empty until then): the first batch the queues' limits cut short, and why.
    char queue_limit[512];
    stoker_counters counters;
    uint32_t n_producers;
    stoker_producer_info *producers;
    uint32_t n_events; // the broker's latest events, oldest first
    stoker_event *events;
    // A broker serving a dataset (0 items: streams): items per epoch, epochs acknowledged in
    // full, epochs to make (0: without end); items handed back after producers were lost and
    // pushes refused as no longer the pusher's.
    uint64_t dataset_size;
    uint32_t epochs_done, epochs_limit;
    uint64_t items_reassigned, pushes_revoked;
    int epochs_overlap;          // epochs open before the previous one is done (--overlap-epochs)
    uint64_t epoch_acknowledged; // items of the oldest open epoch (epochs_done) acknowledged
    uint32_t n_groups;
    stoker_group_info *groups;
    uint32_t n_consumers; // every trainer the broker knows, connected or not
    stoker_consumer_info *consumers;
    // The jobs sharing the producers (docs/sharing.md), the lead job first; 0: no consumer
    // said hello yet.
    uint32_t n_jobs;
    stoker_job_info *jobs;
    // --- label maps ---
    // The producers' class-to-label maps, each distinct map once with the producers that said
    // it (stoker/labels.h); label_maps_omitted: producers whose map did not fit.
    uint32_t n_label_maps;
    stoker_label_map *label_maps;
    uint32_t label_maps_omitted;
    // --- end of label maps ---
    // --- autoscale: filled by the broker for /status and /metrics only (not on the
    // wire: a fetched snapshot has has_autoscale 0 and renders "autoscale": null) ---
    int has_autoscale;
    double autoscale_headroom;
    uint32_t autoscale_min, autoscale_max;
    double idle_s; // since a trainer last pulled (-1: none ever did)
    uint32_t n_pools;
    stoker_pool_info *pools;
    // --- end of autoscale ---
} stoker_status;

// Frees the snapshot and its arrays (malloc'd); accepts NULL.
void stoker_status_destroy(stoker_status *status);

// The snapshot as one JSON object and a newline, the keys:
//   uptime_s, schema, queue_depth, queue_depth_auto, max_bytes, queue_limit,
//   counters {produced, acknowledged, queued, in_flight, redelivered, returned_unused,
//             delivered, queued_bytes, refused, short_by_queues, delivered_shm,
//             producers_lost, discrepancy},
//   producers_alive, trainers, trainers_shm,
//   consumers [{id, name, job ("": the default job), pid (null: not said), connected, delivery
//               ("none", "socket", "shm"), batches_shm, batches_socket, examples_shm,
//               examples_socket, bytes_shm, bytes_socket, arena_full, data_wait_s}],
//   jobs [{name, state ("running", "absent", "ended", "detached"), trainers, made, delivered,
//          acknowledged, queued, in_flight, lag, joined_s, data_wait_s, rate (examples/s),
//          remade (of made: made again by index for it), end_reason (null while it runs)}]
//          (docs/sharing.md; [] before a trainer said hello),
//   sharing {jobs, made (counters.produced), delivered (the jobs' summed), made_per_delivered
//            (null before anything was delivered)} (null without jobs),
//   producers [{id, name, session, state, queued, accepted, delivered, acknowledged,
//               redelivered, returned_unused, next_seq, silent_s}],
//   events [{index, kind, producer, name, at, reason}],
//   groups [{name, state, world, batch, joined, steps, leftover, end_reason, ended_at,
//            ranks [{rank, steps, ahead, ready}]}] (ahead: steps beyond the slowest rank;
//            end_reason and ended_at null while open),
//   labels {maps [{producers, classes, listed, truncated, labels [{label, name, files}]}],
//   omitted} (stoker/labels.h),
//   autoscale {headroom, min, max, idle_s (null: no trainer ever pulled), pools [{pool, demand,
//   supply_per_producer, wanted, current, why}]} (null when not filled: docs/autoscale.md),
//   mode ("dataset" or "streams"), dataset {items, epochs_done, epochs, items_reassigned,
//   pushes_revoked, overlap, epoch_acknowledged} (null for streams).
// Returns a malloc'd string (the caller frees) or NULL when out of memory.
char *stoker_status_render_json(const stoker_status *status);
// The snapshot as Prometheus text (stoker_* metrics, one series per producer for the
// per-producer ones, per consumer for stoker_consumer_*; stoker_consumers{delivery="shm"} and
// {delivery="socket"} count connected consumers by path; stoker_jobs counts the jobs not ended
// or detached, and stoker_job_delivered_total, stoker_job_acknowledged_total, stoker_job_queued,
// stoker_job_lag, stoker_job_data_wait_seconds_total and stoker_job_state{state=...} (1) have
// one series per job, labelled job="name"; stoker_producers_wanted,
// stoker_pool_demand and stoker_pool_supply_per_producer per pool when the autoscale block is
// filled). Returns a malloc'd string (the caller
// frees) or NULL when out of memory.
char *stoker_status_render_metrics(const stoker_status *status);

#endif
