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
    uint32_t capacity;   // examples a chunk holds at most
    uint64_t bound_ns;   // a chunk closes this long after its first example was begun; 0: never
    uint64_t start_ns;   // when the chunk being filled was begun
    uint32_t next_check; // the count at which the clock is read next
} chunk_policy;

// Sets cp up for cfg's chunks of schema's examples, within broker_max examples per push (the
// broker's hello said it; 0: not said). STOKER_OK, or STOKER_TOO_LARGE (said in the log, naming
// the producer) when a fixed chunk is more than the broker takes.
int chunk_policy_init(chunk_policy *cp, const stoker_producer_config *cfg,
                      const stoker_schema *schema, uint32_t broker_max, const char *name);

// A chunk is begun: its clock starts now.
void chunk_policy_begin(chunk_policy *cp);

// After its count-th example was made: nonzero when the chunk is to be closed now (it holds
// capacity examples, or its time bound passed). Reads the clock after the first example, then
// about every microsecond of estimated work, so cheap examples do not pay for it each.
int chunk_policy_close(chunk_policy *cp, uint32_t count);

#endif
