// Field-major example storage. A chunk owns its buffers unless it aliases a decoded message
// (then owns_data is 0 and whoever decoded it frees the memory). Variable-length fields keep
// their values concatenated plus count + 1 offsets in rows (stoker/chunk.h); their value
// buffers grow by doubling up to STOKER_CHUNK_VALUE_BYTES_MAX for all of a chunk's values.
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chunk_check.h"
#include "stoker/chunk.h"
#include "stoker/error.h"

// A variable field's first value buffer: enough for short sequences without a regrowth.
#define VALUE_BYTES_INITIAL 4096

int
stoker_chunk_init(stoker_chunk *c, const stoker_schema *schema, uint32_t capacity)
{
    memset(c, 0, sizeof(*c));
    if (capacity == 0 || capacity == UINT32_MAX || schema->n_fields == 0 ||
        schema->n_fields > STOKER_MAX_FIELDS)
        return STOKER_INVALID;
    c->schema = *schema;
    c->capacity = capacity;
    c->owns_data = 1;
    for (uint32_t i = 0; i < schema->n_fields; i++) {
        const stoker_field *f = &schema->fields[i];
        size_t bytes = f->variable ? VALUE_BYTES_INITIAL : stoker_field_bytes(f) * (size_t)capacity;
        size_t rounded = (bytes + 63) & ~(size_t)63;
        c->data[i] = aligned_alloc(64, rounded ? rounded : 64);
        if (c->data[i] == NULL) {
            stoker_chunk_fini(c);
            return STOKER_NOMEM;
        }
        // Zeroed once: bytes a generator leaves unwritten go out as zeros, never as old heap.
        memset(c->data[i], 0, rounded ? rounded : 64);
        if (f->variable) {
            c->value_capacity[i] = rounded;
            c->offsets[i] = calloc((size_t)capacity + 1, sizeof(uint64_t));
            if (c->offsets[i] == NULL) {
                stoker_chunk_fini(c);
                return STOKER_NOMEM;
            }
        }
    }
    return STOKER_OK;
}

void
stoker_chunk_fini(stoker_chunk *c)
{
    if (c == NULL)
        return;
    if (c->owns_data) {
        for (uint32_t i = 0; i < STOKER_MAX_FIELDS; i++) {
            free(c->data[i]);
            free(c->offsets[i]);
        }
    }
    memset(c, 0, sizeof(*c));
}

void *
stoker_chunk_at(const stoker_chunk *c, uint32_t field, uint32_t example)
{
    assert(field < c->schema.n_fields && !c->schema.fields[field].variable);
    return c->data[field] + (size_t)example * stoker_field_bytes(&c->schema.fields[field]);
}

uint64_t
stoker_chunk_var_offset(const stoker_chunk *c, uint32_t field, uint32_t i)
{
    return stoker_le64((const uint8_t *)c->offsets[field] + (size_t)i * 8);
}

const void *
stoker_chunk_var_value(const stoker_chunk *c, uint32_t field, uint32_t example, uint64_t *rows)
{
    uint64_t a = stoker_chunk_var_offset(c, field, example);
    uint64_t b = stoker_chunk_var_offset(c, field, example + 1);
    *rows = b - a;
    return c->data[field] + a * stoker_field_row_bytes(&c->schema.fields[field]);
}

uint64_t
stoker_chunk_field_bytes(const stoker_chunk *c, uint32_t field, uint32_t first, uint32_t n)
{
    const stoker_field *f = &c->schema.fields[field];
    if (!f->variable)
        return (uint64_t)n * stoker_field_bytes(f);
    uint64_t rows =
        stoker_chunk_var_offset(c, field, first + n) - stoker_chunk_var_offset(c, field, first);
    return rows * stoker_field_row_bytes(f);
}

uint64_t
stoker_chunk_bytes(const stoker_chunk *c, uint32_t first, uint32_t n)
{
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < c->schema.n_fields; i++)
        bytes += stoker_chunk_field_bytes(c, i, first, n) +
                 (c->schema.fields[i].variable ? 8ull * n : 0);
    return bytes;
}

// Values of all variable fields of owned chunk c, the example being made included, in bytes.
static uint64_t
value_bytes(const stoker_chunk *c)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < c->schema.n_fields; i++) {
        if (c->schema.fields[i].variable)
            total += c->offsets[i][c->count + 1] * stoker_field_row_bytes(&c->schema.fields[i]);
    }
    return total;
}

// Makes room for bytes more bytes of values in owned variable field i holding used bytes.
static int
grow_values(stoker_chunk *c, uint32_t i, uint64_t used, uint64_t more)
{
    if (used + more <= c->value_capacity[i])
        return STOKER_OK;
    uint64_t cap = c->value_capacity[i] ? c->value_capacity[i] : VALUE_BYTES_INITIAL;
    while (cap < used + more)
        cap *= 2;
    cap = (cap + 63) & ~(uint64_t)63;
    uint8_t *grown = aligned_alloc(64, (size_t)cap);
    if (grown == NULL)
        return STOKER_NOMEM;
    memcpy(grown, c->data[i], (size_t)used);
    memset(grown + used, 0, (size_t)(cap - used));
    free(c->data[i]);
    c->data[i] = grown;
    c->value_capacity[i] = (size_t)cap;
    return STOKER_OK;
}

void
stoker_chunk_begin_example(stoker_chunk *c)
{
    if (c->count >= c->capacity)
        return;
    for (uint32_t i = 0; i < c->schema.n_fields; i++) {
        if (c->schema.fields[i].variable && c->offsets[i] != NULL)
            c->offsets[i][c->count + 1] = c->offsets[i][c->count];
    }
}

uint64_t
stoker_chunk_var_rows(const stoker_chunk *c, uint32_t field)
{
    return c->offsets[field][c->count + 1] - c->offsets[field][c->count];
}

int
stoker_chunk_var_reserve(stoker_chunk *c, uint32_t field, uint64_t rows, void **out)
{
    if (field >= c->schema.n_fields || !c->schema.fields[field].variable || !c->owns_data ||
        c->count >= c->capacity)
        return STOKER_INVALID;
    const stoker_field *f = &c->schema.fields[field];
    uint64_t row_bytes = stoker_field_row_bytes(f);
    uint64_t have = stoker_chunk_var_rows(c, field);
    if (rows > STOKER_CHUNK_VALUE_BYTES_MAX / row_bytes ||
        (f->max_rows != 0 && have + rows > f->max_rows))
        return STOKER_TOO_LARGE;
    uint64_t more = rows * row_bytes;
    if (value_bytes(c) + more > STOKER_CHUNK_VALUE_BYTES_MAX)
        return STOKER_TOO_LARGE;
    uint64_t used = c->offsets[field][c->count + 1] * row_bytes;
    int rv = grow_values(c, field, used, more);
    if (rv != STOKER_OK)
        return rv;
    c->offsets[field][c->count + 1] += rows;
    *out = c->data[field] + used;
    return STOKER_OK;
}

void
stoker_chunk_commit_example(stoker_chunk *c)
{
    if (c->count < c->capacity)
        c->count++;
}

int
stoker_chunk_append(stoker_chunk *dst, const stoker_chunk *src, uint32_t src_first, uint32_t n)
{
    if (!stoker_schema_equal(&dst->schema, &src->schema) || src_first > src->count ||
        n > src->count - src_first || n > dst->capacity - dst->count)
        return STOKER_INVALID;
    // Room for the values first, so that a failure leaves dst unchanged.
    uint64_t total = 0;
    for (uint32_t i = 0; i < dst->schema.n_fields; i++) {
        if (!dst->schema.fields[i].variable)
            continue;
        if (!dst->owns_data)
            return STOKER_INVALID;
        uint64_t more = stoker_chunk_field_bytes(src, i, src_first, n);
        total += stoker_chunk_field_bytes(dst, i, 0, dst->count) + more;
        if (total > STOKER_CHUNK_VALUE_BYTES_MAX)
            return STOKER_TOO_LARGE;
        int rv = grow_values(dst, i, stoker_chunk_field_bytes(dst, i, 0, dst->count), more);
        if (rv != STOKER_OK)
            return rv;
    }
    for (uint32_t i = 0; i < dst->schema.n_fields; i++) {
        const stoker_field *f = &dst->schema.fields[i];
        if (f->variable) {
            uint64_t base = dst->offsets[i][dst->count];
            uint64_t from = stoker_chunk_var_offset(src, i, src_first);
            size_t rb = stoker_field_row_bytes(f);
            memcpy(dst->data[i] + base * rb, src->data[i] + from * rb,
                   (size_t)stoker_chunk_field_bytes(src, i, src_first, n));
            for (uint32_t k = 1; k <= n; k++)
                dst->offsets[i][dst->count + k] =
                    base + stoker_chunk_var_offset(src, i, src_first + k) - from;
            continue;
        }
        size_t fb = stoker_field_bytes(f);
        memcpy(dst->data[i] + (size_t)dst->count * fb, src->data[i] + (size_t)src_first * fb,
               (size_t)n * fb);
    }
    dst->count += n;
    return STOKER_OK;
}

int
stoker_chunk_check_offsets(const stoker_field *f, const uint8_t *offsets, uint32_t count,
                           uint64_t values_bytes, char *err, size_t err_len)
{
    uint64_t row_bytes = stoker_field_row_bytes(f);
    uint64_t rows_max = values_bytes / row_bytes; // no offset may point past the values
    uint64_t prev = stoker_le64(offsets);
    if (prev != 0)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "field '%s': offsets start at %llu, not 0", f->name,
                             (unsigned long long)prev);
    for (uint32_t i = 0; i < count; i++) {
        uint64_t next = stoker_le64(offsets + (size_t)(i + 1) * 8);
        if (next < prev)
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "field '%s': offsets of example %u decrease (%llu after %llu)",
                                 f->name, i, (unsigned long long)next, (unsigned long long)prev);
        if (next > rows_max)
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "field '%s': example %u ends at row %llu, past the %llu rows of "
                                 "values sent",
                                 f->name, i, (unsigned long long)next,
                                 (unsigned long long)rows_max);
        if (f->max_rows != 0 && next - prev > f->max_rows)
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "field '%s': example %u has length %llu, over its bound %u",
                                 f->name, i, (unsigned long long)(next - prev), f->max_rows);
        prev = next;
    }
    if (prev * row_bytes != values_bytes)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "field '%s': offsets end at row %llu (%llu bytes), %llu bytes of "
                             "values sent",
                             f->name, (unsigned long long)prev,
                             (unsigned long long)(prev * row_bytes),
                             (unsigned long long)values_bytes);
    return STOKER_OK;
}
