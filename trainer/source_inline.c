// The inline batch source (see source.h): the synthetic generator runs on the training thread,
// one batch at a time into one reused chunk, the baseline that shows what a broker costs. It has
// no producers, so no events and no supply to report; nothing it makes is lost or repeated.
#include <stdlib.h>

#include "source.h"
#include "stoker/error.h"
#include "stoker/generator.h"
#include "stoker/synthetic.h"

typedef struct inline_source {
    source base;
    const train_config *cfg; // borrowed
    stoker_synthetic synth;  // the generator's parameters; gen points at it
    stoker_generator gen;
    stoker_chunk chunk; // (batch_size) examples, reused for every batch
    uint64_t seq;       // the next example's number
} inline_source;

static const stoker_schema *
inline_schema(const source *src)
{
    const inline_source *s = (const inline_source *)src;
    return &s->gen.schema;
}

static int
inline_next(source *src, const stoker_chunk **chunk)
{
    inline_source *s = (inline_source *)src;
    const train_config *cfg = s->cfg;
    s->chunk.count = 0;
    int rv = stoker_generator_fill_chunk(&s->gen, &s->chunk, cfg->batch_size, s->seq, cfg->seed,
                                         "inline");
    s->seq += s->chunk.count;
    // A signal during the generator's delay ends the run even when the batch got filled.
    if (rv == STOKER_INTERRUPTED || (cfg->stop != NULL && *cfg->stop))
        return STOKER_INTERRUPTED;
    if (rv != STOKER_OK)
        return rv;
    *chunk = &s->chunk;
    return STOKER_OK;
}

static void
inline_settle(source *src)
{
    (void)src; // the chunk is refilled by the next call
}

static int
inline_supply(source *src, uint32_t *producers_alive, uint64_t *queued)
{
    (void)src;
    (void)producers_alive;
    (void)queued;
    return STOKER_NOT_FOUND; // no producers, no queue
}

static void
inline_audit(source *src, train_result *res)
{
    (void)src;
    // No broker: everything generated was trained on, once.
    if (res->status != TRAIN_ERROR) {
        res->has_audit = 1;
        res->produced = res->acknowledged = res->examples;
    }
}

static void
inline_destroy(source *src)
{
    inline_source *s = (inline_source *)src;
    if (s == NULL)
        return;
    stoker_chunk_fini(&s->chunk);
    stoker_generator_fini(&s->gen);
    free(s);
}

static const source_ops inline_ops = {
    .schema = inline_schema,
    .next = inline_next,
    .settle = inline_settle,
    .supply = inline_supply,
    .audit = inline_audit,
    .destroy = inline_destroy,
};

int
source_inline_open(const train_config *cfg, const source_hooks *hooks, source **out, char *why,
                   size_t why_len)
{
    (void)hooks; // it has no producers and maps nothing
    inline_source *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return stoker_errorf(why, why_len, STOKER_NOMEM, "out of memory");
    s->base.ops = &inline_ops;
    s->cfg = cfg;
    s->synth = (stoker_synthetic){cfg->delay_min_s, cfg->delay_max_s, cfg->stop};
    stoker_synthetic_generator(&s->gen, &s->synth);
    if (stoker_chunk_init(&s->chunk, &s->gen.schema, cfg->batch_size) != STOKER_OK) {
        inline_destroy(&s->base);
        return stoker_errorf(why, why_len, STOKER_NOMEM, "out of memory");
    }
    *out = &s->base;
    return STOKER_OK;
}
