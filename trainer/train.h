// The training loop of stoker-trainer: pulls batches (from the broker, or generates them inline
// for the baseline), steps the MLP, counts rounds NetTrain-style, watches the stop conditions
// (rounds, time goal, supply end, stall, signal), saves the weights and fills a summary. It
// never does data work beyond copying a batch, and every wait in it is bounded.
#ifndef STOKER_TRAINER_TRAIN_H
#define STOKER_TRAINER_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "mlp.h"
#include "stoker/mix.h"
#include "stoker/protocol.h"
#include "stoker/tls.h"

#define TRAIN_MAX_EVENTS 1024

typedef enum train_status {
    TRAIN_COMPLETED = 0,
    TRAIN_TIME_GOAL,
    TRAIN_SUPPLY_ENDED,
    TRAIN_STALLED,
    TRAIN_INTERRUPTED,
    TRAIN_ERROR,
    TRAIN_GROUP_BROKEN, // another rank of its data-parallel group was lost
    TRAIN_BROKER_LOST,  // the broker went away (stopped, killed, unreachable) and stayed away
} train_status;

typedef struct train_config {
    // Source: a broker, or the synthetic generator inline (the baseline).
    const char *broker_url;
    const char *token;
    stoker_tls_options tls; // for tls+tcp:// brokers
    int inline_mode;
    double delay_min_s, delay_max_s; // inline only
    // NetTrain-like control.
    uint32_t batch_size;   // defaults: train_config_init (feeding ones from the library)
    uint32_t round_length; // examples per round, 20
    uint32_t rounds;       // 100
    double time_goal_s;    // 0: none
    uint32_t epochs;       // > 0: stop after this many epochs of a dataset (rounds then ignored)
    // Network.
    const char *device; // auto | cpu | gpu
    uint32_t hidden[MLP_MAX_LAYERS];
    uint32_t n_hidden;
    float lr;
    uint64_t seed;
    const char *input_field;  // "input"
    const char *target_field; // "output"
    uint32_t classes;         // > 0: cross-entropy on an int32 target
    // Feeding.
    uint32_t prefetch;
    uint32_t stall_timeout_ms;
    const char *group; // NULL, or the data-parallel group this trainer is rank `rank` of
    stoker_mix mix;    // --mix (and --mix-stop): its mixture of sources (n 0: none)
    const char *job;   // --job: the training job it belongs to (docs/sharing.md); NULL: default
    uint32_t rank, world;
    // Checkpoints (checkpoint.h). With checkpoint_path the broker source commits: what it
    // trained counts as trained at the broker only once a checkpoint holding it is on disk.
    const char *checkpoint_path;     // NULL: none (acknowledged after each step, as without)
    uint32_t checkpoint_every;       // rounds between checkpoints (10)
    const struct checkpoint *resume; // loaded by the caller (borrowed), or NULL
    const char *identity_log_path;   // NULL, or a file to append each trained run's identities to
    // Output.
    const char *weights_path; // may be NULL
    int progress;             // 1: live status line, 0: one line per round
    const volatile int *stop; // set by the signal handler
} train_config;

// Defaults of DESIGN.md's command line.
void train_config_init(train_config *cfg);

typedef struct train_event {
    stoker_event_kind kind;
    uint32_t producer;
    char name[STOKER_NAME_MAX];
    double at_s; // seconds since the trainer started, when it heard of the event
    char reason[STOKER_REASON_MAX];
} train_event;

typedef struct train_result {
    train_status status;
    char reason[512];
    int usage;       // with TRAIN_ERROR: the data does not fit this trainer at all (exit 2)
    char device[16]; // "cpu" | "gpu"
    uint64_t rounds, batches, examples;
    double seconds, examples_per_second, final_loss, first_round_loss, data_wait_fraction;
    const char *delivery; // how batches arrived: "shm", "socket" (static), NULL: not a broker
    // With delivery: batches through shared memory, as bytes over the socket, and of those the
    // ones sent so because the broker's arena was full.
    uint64_t batches_shm, batches_socket, batches_arena_full;
    int has_audit;
    uint64_t produced, acknowledged, still_queued, in_flight, redelivered, duplicates_seen;
    uint64_t returned_unused; // handed back unused by trainers that said goodbye (not a loss)
    int has_group;            // a rank of a data-parallel group (--group)
    uint64_t group_leftover;  // its end's leftover: examples no equal step could hold
    int64_t discrepancy;
    uint32_t n_events;
    train_event events[TRAIN_MAX_EVENTS];
    uint32_t epochs; // epochs of a dataset whose every item was delivered (EPOCH_END events)
    // Checkpoints: how many were written (and committed) by this run; where the lineage stood
    // when this run resumed (rounds, batches and examples above include it).
    int checkpointing, has_resumed;
    uint64_t checkpoints, commits_failed;
    uint64_t resumed_rounds, resumed_batches, resumed_examples;
} train_result;

// Runs training as configured. Always fills *result (status and reason say how it ended) and
// returns the process exit code: 0 completed or time goal, 3 supply ended, 4 stalled,
// 5 group broken, 6 broker lost, 130 interrupted, 1 any other error.
int train_run(const train_config *cfg, train_result *result);

// "completed", "time_goal", "supply_ended", "stalled", "interrupted", "error", "group_broken",
// "broker_lost".
const char *train_status_name(train_status status);

// Writes result as DESIGN.md's JSON summary object (one line) to f.
void train_write_json(const train_result *result, FILE *f);

#endif
