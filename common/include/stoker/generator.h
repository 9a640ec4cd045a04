// The generator interface: how user code makes examples. A generator fills one example at a
// time into slots the caller provides; stoker_producer_run (producer.h) drives it, handling the
// connection, pushes, retries, reconnects, signals and goodbye.
#ifndef STOKER_GENERATOR_H
#define STOKER_GENERATOR_H

#include <stdint.h>

#include "stoker/chunk.h"
#include "stoker/labels.h"
#include "stoker/schema.h"

// Fills example seq. fields[i] points at room for one example of field i of the generator's
// schema (stoker_field_bytes bytes, aligned for its dtype); for a variable-length field it
// points at a stoker_var_slot to write the value through (below). seed is derived from the run's
// seed, the producer's name and seq (stoker_example_seed): use it, not global state, so output does
// not depend on timing. Returns STOKER_OK; STOKER_END_OF_DATA when the generator has no more
// examples (nothing was written); any other stoker_err on failure (message already logged).
// Called from one thread at a time.
typedef int (*stoker_fill_fn)(void *user, uint64_t seq, uint64_t seed, void *const fields[]);

// Fills item index of a dataset (0 <= index < n_items) into fields as stoker_fill_fn does. seed
// is stoker_item_seed(the broker's dataset seed, epoch, index): the same item of the same epoch
// comes out the same whichever producer makes it. Returns STOKER_OK or a stoker_err (message
// already logged). Called from one thread at a time.
typedef int (*stoker_item_fn)(void *user, uint64_t index, uint64_t seed, void *const fields[]);

typedef struct stoker_generator {
    const char *kind; // "synthetic", "exec", "images", or the user's; borrowed
    stoker_schema schema;
    stoker_fill_fn fill;
    void *user;
    // Frees user; may be NULL. Called by stoker_generator_fini.
    void (*destroy)(void *user);
    // A dataset (docs/datasets.md): n_items > 0 serves items 0..n_items-1 through fill_item,
    // in the order and epochs the broker hands out (fill may then be NULL). fingerprint
    // identifies the listing (e.g. a hash of the sorted file names): producers of one broker
    // must agree on it.
    uint64_t n_items;
    uint64_t fingerprint;
    stoker_item_fn fill_item;
    // Its class-to-label map (the images generator's), which the producer says in its hello and
    // the broker shows in /status; NULL: none. Owned by user, valid until destroy.
    const stoker_labels *labels;
} stoker_generator;

// A variable-length field's slot (fields[i] of a fill callback for variable field i): the value
// is written by appending rows, in one call or several (their rows add up), e.g.
//     stoker_var_append(fields[0], tokens, n_tokens);       // tokens:int32[?<=8192]
// or, to write in place, stoker_var_reserve(fields[0], n, &p) then fill p. A value that would
// pass the field's bound (or the chunk's STOKER_CHUNK_VALUE_BYTES_MAX) is refused with
// STOKER_TOO_LARGE and a log line naming the field, the example and the length: return that code
// from the fill callback and the example is not pushed (counted in stoker_producer_stats.refused;
// the same seq is made again with another seed). A dataset item cannot be skipped: there it is
// an error that stops the producer.
typedef struct stoker_var_slot {
    stoker_chunk *chunk; // internal
    uint32_t field;      // internal
    uint64_t seq;        // the example being made (dataset: its item index)
    int refused;         // set when a value was refused
} stoker_var_slot;
// Appends rows rows (rows * stoker_field_row_bytes bytes) of the value being made and gives
// where to write them (*out, valid until the next call on this slot). STOKER_OK,
// STOKER_TOO_LARGE (nothing appended), STOKER_NOMEM.
int stoker_var_reserve(stoker_var_slot *slot, uint64_t rows, void **out);
// Appends rows rows copied from data. As stoker_var_reserve.
int stoker_var_append(stoker_var_slot *slot, const void *data, uint64_t rows);
// Examples refused so far in this process because a value passed its bound.
uint64_t stoker_generator_refused(void);

// Points slots[i] at room for the example being made in chunk (chunk->count): fixed fields at
// their place, variable fields at vars[i] (begun empty). For code that drives a fill callback.
void stoker_generator_slots(stoker_chunk *chunk, uint64_t seq, stoker_var_slot *vars,
                            void *slots[]);

// Appends up to n examples to chunk (which must have the generator's schema and room for n),
// numbered first_seq, first_seq + 1, ...; seeds from (seed, name, seq). Stops early at
// STOKER_END_OF_DATA or an error: chunk->count then holds the good examples made before it, and
// the code is returned (STOKER_OK when all n were made).
int stoker_generator_fill_chunk(const stoker_generator *gen, stoker_chunk *chunk, uint32_t n,
                                uint64_t first_seq, uint64_t seed, const char *name);
// Calls destroy; accepts NULL.
void stoker_generator_fini(stoker_generator *gen);

#endif
