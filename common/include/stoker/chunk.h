// Chunks and batches: N examples stored field-major (all examples of field 0, then field 1...),
// so a batch is collated by concatenation and reaches the GPU with one copy per field.
// A variable-length field (stoker/schema.h) is stored as its values, concatenated in example
// order, plus offsets: count + 1 row numbers, offsets[0] == 0, example i's value is rows
// offsets[i] .. offsets[i+1] - 1 (docs/schema.md). Collating still concatenates, rebasing the
// offsets. The structs are exposed so generators can fill them in place; use the functions to
// manage them.
#ifndef STOKER_CHUNK_H
#define STOKER_CHUNK_H

#include <stdint.h>
#include <string.h>

#include "stoker/schema.h"

typedef struct stoker_chunk {
    stoker_schema schema;
    uint32_t count;    // examples held
    uint32_t capacity; // examples the buffers can hold
    // data[i]: field i, capacity * stoker_field_bytes(&schema.fields[i]) bytes, 64-byte aligned
    // when the chunk owns them.
    // A variable field's data[i] holds its values (value_capacity[i] bytes when owned).
    uint8_t *data[STOKER_MAX_FIELDS];
    int owns_data; // nonzero: stoker_chunk_fini frees data[] and offsets[]
    // Variable field i: count + 1 offsets in rows of its leading dimension (capacity + 1 when
    // owned), offsets[i][0] == 0; NULL for fixed fields. uint64: a batch's rows of bytes fields
    // may pass 2^32, and every value is below 2^63, so torch and numpy can read them as int64
    // (torch's jagged nested tensors take int64 offsets) without a copy. In a chunk decoded from
    // a message they point into it, little-endian, and are 8-byte aligned only where the data
    // is (the broker's unaligned decode): read them with stoker_chunk_var_offset there.
    uint64_t *offsets[STOKER_MAX_FIELDS];
    size_t value_capacity[STOKER_MAX_FIELDS]; // owned variable field i: bytes data[i] can hold
} stoker_chunk;

// A chunk's values of variable fields together may not grow past this (1 GiB, an example's
// limit too): a value that would is refused (STOKER_TOO_LARGE), so a chunk always takes at least
// one example of any valid value.
#define STOKER_CHUNK_VALUE_BYTES_MAX (1ull << 30)

// Allocates buffers for capacity examples of schema (count = 0); a variable field gets its
// offsets and a small value buffer that grows as values are written. STOKER_NOMEM or
// STOKER_INVALID (capacity 0); on failure *chunk is left zeroed.
int stoker_chunk_init(stoker_chunk *chunk, const stoker_schema *schema, uint32_t capacity);
// Frees owned buffers; accepts a zeroed chunk and NULL.
void stoker_chunk_fini(stoker_chunk *chunk);
// Pointer to example i of fixed field f (no bounds check beyond an assert; for a variable field
// use stoker_chunk_var_value).
void *stoker_chunk_at(const stoker_chunk *chunk, uint32_t field, uint32_t example);
// Copies n examples from src starting at src_first to the end of dst, rebasing the offsets of
// variable fields (dst's value buffers grow as needed). Schemas must be equal and dst must have
// room: STOKER_INVALID (STOKER_NOMEM, STOKER_TOO_LARGE past STOKER_CHUNK_VALUE_BYTES_MAX)
// otherwise, dst unchanged.
int stoker_chunk_append(stoker_chunk *dst, const stoker_chunk *src, uint32_t src_first, uint32_t n);

// --- variable-length fields ---------------------------------------------------------------------

// Offset i (0 <= i <= count) of variable field f, read safely wherever the offsets lie.
uint64_t stoker_chunk_var_offset(const stoker_chunk *chunk, uint32_t field, uint32_t i);
// The little-endian u64 at p, aligned or not (offsets are stored so): one load where the host is
// little-endian too. Walks over many offsets (the broker's plans) read them in place with it.
static inline uint64_t
stoker_le64(const void *p)
{
    const uint8_t *b = (const uint8_t *)p;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v;
    memcpy(&v, b, sizeof v);
    return v;
#else
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--)
        v = v << 8 | b[k];
    return v;
#endif
}
// Example i's value of variable field f: its first byte, and its length in rows (*rows).
const void *stoker_chunk_var_value(const stoker_chunk *chunk, uint32_t field, uint32_t example,
                                   uint64_t *rows);
// Bytes of examples first .. first + n - 1 of field f (a variable field: their values; a fixed
// one: n times its size).
uint64_t stoker_chunk_field_bytes(const stoker_chunk *chunk, uint32_t field, uint32_t first,
                                  uint32_t n);
// Bytes those examples take in memory, all fields together: values, plus 8 bytes of offsets per
// example and variable field. What the broker's byte limits count.
uint64_t stoker_chunk_bytes(const stoker_chunk *chunk, uint32_t first, uint32_t n);

// Writing the example being made: example number chunk->count, which counts once
// stoker_chunk_commit_example is called. stoker_chunk_begin_example empties its variable values;
// stoker_chunk_var_reserve then appends rows to its value of variable field f and gives where to
// write them (*out, rows * stoker_field_row_bytes bytes, valid until the next reserve on that
// field). STOKER_TOO_LARGE when the value would pass the field's bound (max_rows) or the
// chunk's values STOKER_CHUNK_VALUE_BYTES_MAX; STOKER_NOMEM; STOKER_INVALID for a fixed field,
// a chunk it does not own or no room for another example. Nothing changes on failure.
void stoker_chunk_begin_example(stoker_chunk *chunk);
int stoker_chunk_var_reserve(stoker_chunk *chunk, uint32_t field, uint64_t rows, void **out);
// Rows of the value of variable field f the example being made holds so far.
uint64_t stoker_chunk_var_rows(const stoker_chunk *chunk, uint32_t field);
// The example being made is complete: count + 1.
void stoker_chunk_commit_example(stoker_chunk *chunk);
// The identity of examples (session, first_seq .. first_seq + count - 1) from one producer.
typedef struct stoker_run {
    uint32_t producer; // the broker's id for the producer
    uint64_t session;
    uint64_t first_seq;
    uint32_t count;
    uint32_t source; // of a mixture's batch (stoker/mix.h): its source's index + 1; 0: none
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
