// Checkpoints of stoker-trainer (--checkpoint, --resume): the weights, Adam's moments and step
// count, and where the feed stood, in one safetensors file written atomically (a temporary file,
// fsync, rename: a reader finds the previous checkpoint or this one, never half of one). Tensors
// layers.N.weight / layers.N.bias as mlp_save writes them (any safetensors reader loads the
// model), adam.m.layers.N.* and adam.v.layers.N.* beside them; scalars as __metadata__ strings
// named stoker.*. It does not decide when to save and never talks to the broker: train.c does.
#ifndef STOKER_TRAINER_CHECKPOINT_H
#define STOKER_TRAINER_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "mlp.h"

// Where the lineage (the run and every run resumed from its checkpoints) stood.
typedef struct checkpoint_position {
    uint64_t rounds, batches, examples; // done
    uint32_t epochs;                    // of a dataset, done
    uint64_t seed;                      // the initial weights' seed
} checkpoint_position;

// Identities (session, first_seq .. first_seq + count - 1) the model trained that the broker may
// not know as trained: those since the last commit that succeeded (a death between the file
// landing and the commit leaves them uncommitted; the broker delivers them again and the resumed
// trainer must drop them), and those a resumed run inherited.
typedef struct checkpoint_run {
    uint64_t session, first_seq, count;
} checkpoint_run;

// A growing list of runs; adjacent runs of one session merge. init zeroes; fini frees.
typedef struct checkpoint_runs {
    checkpoint_run *v;
    size_t n, cap;
} checkpoint_runs;

// STOKER_OK or STOKER_NOMEM (runs unchanged).
int checkpoint_runs_add(checkpoint_runs *runs, uint64_t session, uint64_t first_seq,
                        uint64_t count);
void checkpoint_runs_fini(checkpoint_runs *runs);

// Writes net (weights, moments, steps), pos and pending (borrowed; may be NULL) to path
// atomically. STOKER_OK, or an error with err (err_len bytes) naming the path and the cause.
int checkpoint_save(const char *path, mlp *net, const checkpoint_position *pos,
                    const checkpoint_runs *pending, char *err, size_t err_len);

typedef struct checkpoint checkpoint;

// Reads a checkpoint file. On success *out is owned by the caller (checkpoint_destroy).
// STOKER_IO (cannot read), STOKER_INVALID (not a safetensors file, or not a stoker-trainer
// checkpoint: err says what is missing), STOKER_NOMEM.
int checkpoint_load(const char *path, checkpoint **out, char *err, size_t err_len);

// Accepts NULL.
void checkpoint_destroy(checkpoint *ck);

// Borrowed from ck.
const checkpoint_position *checkpoint_position_of(const checkpoint *ck);
const checkpoint_runs *checkpoint_pending(const checkpoint *ck);

// Takes over the pending identities of other, the checkpoint of a rank this run does not resume
// (a group resumed at fewer ranks: --resume-also), so that they are reported as trained and kept
// in this rank's later checkpoints; other's weights and position are not used (a rank whose own
// file is behind the others' catches up at the broker). STOKER_NOMEM leaves part of other's runs
// added.
int checkpoint_adopt(checkpoint *ck, const checkpoint *other, char *err, size_t err_len);

// What can be checked before the broker's schema is known: the hidden widths and the loss.
// STOKER_INVALID with why naming what differs (the flag to change) when they do not match.
int checkpoint_check_options(const checkpoint *ck, const uint32_t *hidden, uint32_t n_hidden,
                             uint32_t classes, char *why, size_t why_len);

// Checks that ck holds a network of exactly net's shape (every layer's weight and bias, and the
// moments) and loads the weights, the moments and the step count into net.
// STOKER_INVALID with why naming the first difference, or the backend's error.
int checkpoint_restore(const checkpoint *ck, mlp *net, char *why, size_t why_len);

#endif
