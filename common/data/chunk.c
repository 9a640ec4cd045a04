// Field-major example storage. A chunk owns its buffers unless it aliases a decoded message
// (then owns_data is 0 and whoever decoded it frees the memory).
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "stoker/chunk.h"
#include "stoker/error.h"

int
stoker_chunk_init(stoker_chunk *c, const stoker_schema *schema, uint32_t capacity)
{
    memset(c, 0, sizeof(*c));
    if (capacity == 0 || schema->n_fields == 0 || schema->n_fields > STOKER_MAX_FIELDS ||
        stoker_schema_first_variable(schema) >= 0)
        return STOKER_INVALID;
    c->schema = *schema;
    c->capacity = capacity;
    c->owns_data = 1;
    for (uint32_t i = 0; i < schema->n_fields; i++) {
        size_t bytes = stoker_field_bytes(&schema->fields[i]) * (size_t)capacity;
        size_t rounded = (bytes + 63) & ~(size_t)63;
        c->data[i] = aligned_alloc(64, rounded ? rounded : 64);
        if (c->data[i] == NULL) {
            stoker_chunk_fini(c);
            return STOKER_NOMEM;
        }
        // Zeroed once: bytes a generator leaves unwritten go out as zeros, never as old heap.
        memset(c->data[i], 0, rounded ? rounded : 64);
    }
    return STOKER_OK;
}

void
stoker_chunk_fini(stoker_chunk *c)
{
    if (c == NULL)
        return;
    if (c->owns_data) {
        for (uint32_t i = 0; i < STOKER_MAX_FIELDS; i++)
            free(c->data[i]);
    }
    memset(c, 0, sizeof(*c));
}

void *
stoker_chunk_at(const stoker_chunk *c, uint32_t field, uint32_t example)
{
    assert(field < c->schema.n_fields);
    return c->data[field] + (size_t)example * stoker_field_bytes(&c->schema.fields[field]);
}

int
stoker_chunk_append(stoker_chunk *dst, const stoker_chunk *src, uint32_t src_first, uint32_t n)
{
    if (!stoker_schema_equal(&dst->schema, &src->schema) || src_first > src->count ||
        n > src->count - src_first || n > dst->capacity - dst->count)
        return STOKER_INVALID;
    for (uint32_t i = 0; i < dst->schema.n_fields; i++) {
        size_t fb = stoker_field_bytes(&dst->schema.fields[i]);
        memcpy(dst->data[i] + (size_t)dst->count * fb, src->data[i] + (size_t)src_first * fb,
               (size_t)n * fb);
    }
    dst->count += n;
    return STOKER_OK;
}
