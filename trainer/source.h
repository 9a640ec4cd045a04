// Where the training loop's batches come from: a small table of operations with two
// implementations, the broker's trainer client (source_broker.c) and the synthetic generator run
// inline, the baseline without a broker (source_inline.c). train.c picks one when it opens the
// source and never asks which it has. A source only hands out batches and accounts for them; the
// loop's timing, stop conditions and the summary's wording stay in train.c.
#ifndef STOKER_TRAINER_SOURCE_H
#define STOKER_TRAINER_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"
#include "stoker/chunk.h"
#include "stoker/protocol.h"
#include "stoker/schema.h"
#include "train.h"

typedef struct source source;

// Called for each producer event as soon as the source hears of it (possibly from inside next),
// on the training thread.
typedef void (*source_event_fn)(const stoker_event *e, void *arg);

// What the training loop wants to hear from a source while it runs (borrowed; arg must outlive
// the source and every batch it handed out).
typedef struct source_hooks {
    source_event_fn on_event; // required
    // Optional (NULL: none): memory that batches will be read from in place, mapped 1 when the
    // source maps it and 0 just before it unmaps it: the broker's shared-memory arena
    // (stoker/arena.h), which the CUDA backend registers as pinned memory. Any thread.
    void (*on_memory)(const void *base, uint64_t bytes, int mapped, void *arg);
    void *arg;
} source_hooks;

typedef struct source_ops {
    // The schema of the batches (borrowed, valid while the source lives).
    const stoker_schema *(*schema)(const source *src);
    // Waits for the next batch, bounded by the stall timeout. On STOKER_OK *chunk is borrowed
    // until settle, which the caller calls once after training on it. Otherwise no batch is held:
    // STOKER_NO_PRODUCERS / STOKER_END_OF_DATA (supply ended), STOKER_STALLED (nothing within
    // the stall timeout from a far end that still answers), STOKER_CONNECTION (nothing within
    // the stall timeout, and the far end does not answer: the broker went away),
    // STOKER_INTERRUPTED (cfg->stop set), or another error. A committing source with batches
    // settled but not committed may also return STOKER_RETRY after a second without a batch:
    // checkpoint (which commits) and call next again; the stall timeout keeps running. With a
    // time goal (cfg->time_goal_s, counted from the first call) no wait goes past it: there
    // STOKER_TIMEOUT, for the loop to stop on its time goal.
    int (*next)(source *src, const stoker_chunk **chunk);
    // Done with the batch next returned (trained on or not): acknowledges it and frees it.
    void (*settle)(source *src);
    // The supply as the far end sees it, for the progress line: STOKER_OK with *producers_alive
    // and *queued filled, or an error when there is nothing (or nothing now) to report. May take
    // one request to the broker.
    int (*supply)(source *src, uint32_t *producers_alive, uint64_t *queued);
    // After the run: fills res's audit fields (has_audit, produced, ...) from what the source
    // knows; res->status says how the run ended. May leave has_audit 0.
    void (*audit)(source *src, train_result *res);
    // Says goodbye where there is someone to say it to, and frees src.
    void (*destroy)(source *src);
    // Commit with checkpoints (cfg->checkpoint_path); NULL where there is no one to commit to.
    // commit makes every batch settled so far count as trained at the far end: STOKER_OK, or the
    // error (they stay uncommitted and the next commit tries again). pending: the identities
    // trained that the far end may not know as trained (since the last successful commit, and
    // those given to mark_trained), borrowed until the next call on src. mark_trained: identities
    // the model trained before this source existed (the checkpoint it resumed from): dropped
    // when delivered; STOKER_OK or STOKER_NOMEM.
    int (*commit)(source *src);
    const checkpoint_runs *(*pending)(source *src);
    int (*mark_trained)(source *src, const checkpoint_runs *runs);
} source_ops;

// Implementations embed this as their first member.
struct source {
    const source_ops *ops;
};

// Opens a source as cfg says (cfg and hooks->arg are borrowed and must outlive it). On
// success *out is owned by the caller (ops->destroy). On failure why (why_len bytes) holds the
// whole reason, ready for the summary, and the code says its kind: STOKER_INTERRUPTED (stopped
// by a signal), STOKER_STALLED or STOKER_CONNECTION (no broker within the stall timeout), or
// another error.
typedef int (*source_open_fn)(const train_config *cfg, const source_hooks *hooks, source **out,
                              char *why, size_t why_len);

// The synthetic generator, inline: never waits on anyone but its own delays, never ends; its
// audit says everything made was trained on once (unless the run failed).
int source_inline_open(const train_config *cfg, const source_hooks *hooks, source **out, char *why,
                       size_t why_len);

// The broker at cfg->broker_url, through a trainer client; connecting is bounded by the stall
// timeout. Its audit is the broker's counters after acknowledgements were flushed.
int source_broker_open(const train_config *cfg, const source_hooks *hooks, source **out, char *why,
                       size_t why_len);

#endif
