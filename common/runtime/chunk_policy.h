// When a producer's chunk is closed (private to libstoker): at a fixed count (--chunk N), or,
// sized (the default), at a byte budget or a time bound, whichever comes first, so that a cheap
// generator fills large chunks and an expensive one's examples leave as soon as they are made.
// Used by the stream loop (producer.c) and the dataset loop (producer_dataset.c); it neither
// generates nor pushes.
#ifndef CHUNK_POLICY_H
#define CHUNK_POLICY_H

#include <stdint.h>

#include "stoker/producer.h"

typedef struct chunk_policy {
    uint32_t capacity; // examples a chunk holds at most
    // Sized chunks only (else 0): the capacity from chunk_bytes, within broker_max; the broker's
    // limit; an example's estimated bytes; cfg's chunk_batch_bytes; the batch last fitted.
    uint32_t bytes_capacity;
    uint32_t broker_max;
    uint64_t example_bytes;
    uint64_t batch_bytes;
    uint32_t batch;
    const char *name;
    uint64_t bound_ns;   // a chunk closes this long after its first example was begun; 0: never
    uint64_t start_ns;   // when the chunk being filled was begun
    uint32_t next_check; // the count at which the clock is read next
} chunk_policy;

// Sets cp up for cfg's chunks of schema's examples, within broker_max examples per push (the
// broker's hello said it; 0: not said). STOKER_OK, or STOKER_TOO_LARGE (said in the log, naming
// the producer) when a fixed chunk is more than the broker takes.
int chunk_policy_init(chunk_policy *cp, const stoker_producer_config *cfg,
                      const stoker_schema *schema, uint32_t broker_max, const char *name);

// The broker's trainers take batches of batch examples (0: none said): a sized chunk's capacity
// becomes one batch, or an equal share of one within chunk_batch_bytes, where that is more than
// chunk_bytes' worth (said in the log when it changes); else chunk_bytes' worth. Nothing for a
// fixed chunk.
void chunk_policy_fit_batch(chunk_policy *cp, uint32_t batch);

// A chunk is begun: its clock starts now.
void chunk_policy_begin(chunk_policy *cp);

// After its count-th example was made: nonzero when the chunk is to be closed now (it holds
// capacity examples, or its time bound passed). Reads the clock after the first example, then
// about every microsecond of estimated work, so cheap examples do not pay for it each.
int chunk_policy_close(chunk_policy *cp, uint32_t count);

#endif
