// Chunks and batches: N examples stored field-major (all examples of field 0, then field 1...),
// so a batch is collated by concatenation and reaches the GPU with one copy per field.
// The structs are exposed so generators can fill them in place; use the functions to manage them.
#ifndef STOKER_CHUNK_H
#define STOKER_CHUNK_H

#include <stdint.h>

#include "stoker/schema.h"

typedef struct stoker_chunk {
    stoker_schema schema;
    uint32_t count;    // examples held
    uint32_t capacity; // examples the buffers can hold
    // data[i]: field i, capacity * stoker_field_bytes(&schema.fields[i]) bytes, 64-byte aligned
    // when the chunk owns them.
    uint8_t *data[STOKER_MAX_FIELDS];
    int owns_data; // nonzero: stoker_chunk_fini frees data[]
} stoker_chunk;

// Allocates buffers for capacity examples of schema (count = 0). STOKER_NOMEM or STOKER_INVALID
// (capacity 0); on failure *chunk is left zeroed.
int stoker_chunk_init(stoker_chunk *chunk, const stoker_schema *schema, uint32_t capacity);
// Frees owned buffers; accepts a zeroed chunk and NULL.
void stoker_chunk_fini(stoker_chunk *chunk);
// Pointer to example i of field f (no bounds check beyond an assert).
void *stoker_chunk_at(const stoker_chunk *chunk, uint32_t field, uint32_t example);
// Copies n examples from src starting at src_first to the end of dst. Schemas must be equal and
// dst must have room: STOKER_INVALID otherwise, dst unchanged.
int stoker_chunk_append(stoker_chunk *dst, const stoker_chunk *src, uint32_t src_first, uint32_t n);

// The identity of examples (session, first_seq .. first_seq + count - 1) from one producer.
typedef struct stoker_run {
    uint32_t producer; // the broker's id for the producer
    uint64_t session;
    uint64_t first_seq;
    uint32_t count;
} stoker_run;

// A batch delivered to a trainer: examples plus where they came from. Runs are in example order.
typedef struct stoker_batch {
    stoker_chunk chunk;
    uint64_t lease; // acknowledge this to free the examples at the broker
    uint32_t n_runs;
    stoker_run *runs;
    void *owner; // internal: decoded message the data points into
    // internal: the shared-memory arena the data is in (stoker/arena.h), or NULL; destroying the
    // batch releases its region there.
    struct stoker_arena *arena;
    // From a broker serving a dataset: example i is item items[i], (epoch << 32) | index
    // (stoker_item_epoch / stoker_item_index); NULL for streams. Owned by the batch.
    uint64_t *items;
} stoker_batch;

// The epoch and the index of a dataset item as batches carry it.
static inline uint32_t
stoker_item_epoch(uint64_t item)
{
    return (uint32_t)(item >> 32);
}
static inline uint64_t
stoker_item_index(uint64_t item)
{
    return item & 0xffffffffu;
}

// Frees the batch and everything it owns (its reply, its region of the arena); accepts NULL.
// Implemented with the clients (client/batch.c), which hand batches out.
void stoker_batch_destroy(stoker_batch *batch);

#endif
