// Drives a generator's per-example fill callback to fill a chunk.
#include <stdatomic.h>
#include <string.h>

#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/generator.h"
#include "stoker/rng.h"

// Tries to make one example before a fill that keeps refusing values is an error.
#define REFUSED_TRIES_MAX 64

static _Atomic uint64_t refused_total;

uint64_t
stoker_generator_refused(void)
{
    return atomic_load(&refused_total);
}

void
stoker_generator_slots(stoker_chunk *chunk, uint64_t seq, stoker_var_slot *vars, void *slots[])
{
    stoker_chunk_begin_example(chunk);
    for (uint32_t f = 0; f < chunk->schema.n_fields; f++) {
        if (chunk->schema.fields[f].variable) {
            vars[f] = (stoker_var_slot){.chunk = chunk, .field = f, .seq = seq};
            slots[f] = &vars[f];
        } else {
            slots[f] = stoker_chunk_at(chunk, f, chunk->count);
        }
    }
}

int
stoker_var_reserve(stoker_var_slot *slot, uint64_t rows, void **out)
{
    int rv = stoker_chunk_var_reserve(slot->chunk, slot->field, rows, out);
    if (rv == STOKER_TOO_LARGE) {
        const stoker_field *f = &slot->chunk->schema.fields[slot->field];
        uint64_t len = stoker_chunk_var_rows(slot->chunk, slot->field) + rows;
        if (f->max_rows != 0 && len > f->max_rows)
            stoker_warn("value-refused: field '%s' of example %llu has length %llu, over its "
                        "bound %u: the example is not pushed",
                        f->name, (unsigned long long)slot->seq, (unsigned long long)len,
                        f->max_rows);
        else
            stoker_warn("value-refused: field '%s' of example %llu: length %llu passes a chunk's "
                        "%llu bytes of values: the example is not pushed",
                        f->name, (unsigned long long)slot->seq, (unsigned long long)len,
                        (unsigned long long)STOKER_CHUNK_VALUE_BYTES_MAX);
        slot->refused = 1;
    }
    return rv;
}

int
stoker_var_append(stoker_var_slot *slot, const void *data, uint64_t rows)
{
    void *p;
    int rv = stoker_var_reserve(slot, rows, &p);
    if (rv == STOKER_OK && rows > 0)
        memcpy(p, data,
               (size_t)(rows * stoker_field_row_bytes(&slot->chunk->schema.fields[slot->field])));
    return rv;
}

int
stoker_generator_fill_chunk(const stoker_generator *gen, stoker_chunk *chunk, uint32_t n,
                            uint64_t first_seq, uint64_t seed, const char *name)
{
    if (n > chunk->capacity - chunk->count || !stoker_schema_equal(&gen->schema, &chunk->schema))
        return STOKER_INVALID;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t seq = first_seq + i;
        for (uint32_t attempt = 0;; attempt++) {
            void *slots[STOKER_MAX_FIELDS];
            stoker_var_slot vars[STOKER_MAX_FIELDS];
            stoker_generator_slots(chunk, seq, vars, slots);
            // A refused example is made again under the same seq with another seed (a seq
            // must not be skipped: the broker takes seqs without gaps).
            uint64_t s = stoker_example_seed(seed, name, seq) + attempt * 0x9e3779b97f4a7c15ull;
            int rv = gen->fill(gen->user, seq, s, slots);
            int refused = 0;
            for (uint32_t f = 0; f < chunk->schema.n_fields; f++)
                refused |= chunk->schema.fields[f].variable && vars[f].refused;
            if (rv == STOKER_TOO_LARGE && refused && attempt + 1 < REFUSED_TRIES_MAX) {
                atomic_fetch_add(&refused_total, 1);
                continue;
            }
            if (rv != STOKER_OK)
                return rv;
            break;
        }
        stoker_chunk_commit_example(chunk);
    }
    return STOKER_OK;
}

void
stoker_generator_fini(stoker_generator *gen)
{
    if (gen == NULL)
        return;
    if (gen->destroy != NULL)
        gen->destroy(gen->user);
    gen->destroy = NULL;
    gen->user = NULL;
}
