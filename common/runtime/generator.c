// Drives a generator's per-example fill callback to fill a chunk.
#include "stoker/error.h"
#include "stoker/generator.h"
#include "stoker/rng.h"

int
stoker_generator_fill_chunk(const stoker_generator *gen, stoker_chunk *chunk, uint32_t n,
                            uint64_t first_seq, uint64_t seed, const char *name)
{
    if (n > chunk->capacity - chunk->count || !stoker_schema_equal(&gen->schema, &chunk->schema))
        return STOKER_INVALID;
    for (uint32_t i = 0; i < n; i++) {
        void *slots[STOKER_MAX_FIELDS];
        for (uint32_t f = 0; f < chunk->schema.n_fields; f++)
            slots[f] = stoker_chunk_at(chunk, f, chunk->count);
        uint64_t seq = first_seq + i;
        int rv = gen->fill(gen->user, seq, stoker_example_seed(seed, name, seq), slots);
        if (rv != STOKER_OK)
            return rv;
        chunk->count++;
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
