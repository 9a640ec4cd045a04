// A dataset's producer loop: ask the broker for a shard of (epoch, index) items, make each with
// the generator's fill_item and the item's seed, push them a chunk at a time carrying their
// items, repeat until the broker's last epoch is made. A shard the broker took back (this
// producer was taken for lost while it was frozen or cut off) is dropped: its items were handed
// to others. Within a shard, making a chunk overlaps pushing the previous one (the pusher
// thread of producer_pipeline.c, as for streams); the next shard is asked for once every push
// of this one was answered, since asking hands back what this producer still holds.
#include <stdlib.h>
#include <string.h>

#include "producer_dataset.h"
#include "producer_pipeline.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/rng.h"

#define SHARD_MAX STOKER_SHARD_MAX_ITEMS
#define IDLE_MS   5 // between shard requests while the broker has nothing to hand out

typedef struct dataset_run {
    const stoker_producer_config *cfg;
    const stoker_generator *gen;
    stoker_producer_client *pc;
    producer_pipeline *pl;
    const char *name;
} dataset_run;

static int
stop_requested(const dataset_run *r)
{
    const volatile int *user = r->cfg->client.stop;
    return *stoker_producer_stop_flag() || (user != NULL && *user);
}

// Makes items[0..n) into chunk (emptied first) with the generator.
static int
make_items(const dataset_run *r, stoker_chunk *chunk, const uint64_t *items, uint32_t n,
           uint64_t dataset_seed)
{
    chunk->count = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t epoch = (uint32_t)(items[i] >> 32);
        uint64_t index = items[i] & 0xffffffffu;
        if (index >= r->gen->n_items) {
            stoker_error("producer '%s': broker asked for item %llu of a dataset of %llu", r->name,
                         (unsigned long long)index, (unsigned long long)r->gen->n_items);
            return STOKER_INVALID;
        }
        void *slots[STOKER_MAX_FIELDS];
        for (uint32_t f = 0; f < chunk->schema.n_fields; f++)
            slots[f] = stoker_chunk_at(chunk, f, chunk->count);
        int rv = r->gen->fill_item(r->gen->user, index,
                                   stoker_item_seed(dataset_seed, epoch, index), slots);
        if (rv != STOKER_OK)
            return rv;
        chunk->count++;
    }
    return STOKER_OK;
}

// Makes one shard and hands its chunks to the pusher, then waits until every push of it was
// answered. STOKER_OK when all of it was taken or the broker took it back, otherwise the
// error (the pusher's, or the generator's once the pushes submitted before it were answered).
static int
run_shard(const dataset_run *r, const uint64_t *items, uint32_t n, uint64_t dataset_seed)
{
    int rv = STOKER_OK;
    for (uint32_t off = 0; off < n && !producer_pipeline_revoked(r->pl);) {
        if (stop_requested(r)) {
            rv = STOKER_INTERRUPTED;
            break;
        }
        stoker_chunk *chunk = producer_pipeline_free_chunk(r->pl);
        if (chunk == NULL)
            break; // the pusher failed: drain says how
        uint32_t m = n - off < chunk->capacity ? n - off : chunk->capacity;
        if ((rv = make_items(r, chunk, items + off, m, dataset_seed)) != STOKER_OK)
            break;
        producer_pipeline_submit(r->pl, 0, items + off);
        off += m;
    }
    int push_rv = producer_pipeline_drain(r->pl, NULL);
    return push_rv != STOKER_OK ? push_rv : rv;
}

int
producer_dataset_run(const stoker_producer_config *cfg, const stoker_generator *gen,
                     stoker_producer_client *pc, stoker_producer_stats *st)
{
    dataset_run r = {.cfg = cfg,
                     .gen = gen,
                     .pc = pc,
                     .name = cfg->client.name != NULL ? cfg->client.name : "producer"};
    uint64_t *items = malloc(SHARD_MAX * sizeof(*items));
    int rv = items == NULL ? STOKER_NOMEM
                           : producer_pipeline_create(pc, &gen->schema, cfg->chunk, r.name, &r.pl);
    if (rv != STOKER_OK) {
        free(items);
        return rv;
    }
    uint64_t shards = 0;
    int ended = 0;
    while (!stop_requested(&r)) {
        uint32_t n = 0;
        uint64_t dataset_seed = 0;
        rv = stoker_producer_client_shard(pc, items, SHARD_MAX, &n, &dataset_seed);
        if (rv == STOKER_RETRY) {
            stoker_sleep_ms(IDLE_MS, cfg->client.stop);
            continue;
        }
        if (rv == STOKER_END_OF_DATA) {
            ended = 1;
            break;
        }
        if (rv != STOKER_OK)
            break;
        shards++;
        if ((rv = run_shard(&r, items, n, dataset_seed)) != STOKER_OK)
            break;
    }
    int push_rv = producer_pipeline_finish(r.pl, st);
    if (rv == STOKER_OK)
        rv = push_rv;
    free(items);
    if (rv == STOKER_INTERRUPTED || stop_requested(&r) || ended) {
        rv = STOKER_OK;
    } else if (rv != STOKER_OK) {
        stoker_error("producer '%s': dataset run failed after %llu items: %s (%s)", r.name,
                     (unsigned long long)st->examples, stoker_strerror(rv),
                     stoker_producer_client_error(pc));
        return rv;
    }
    int bye = stoker_producer_client_goodbye(pc);
    if (bye != STOKER_OK)
        stoker_warn("producer '%s': goodbye not acknowledged: %s", r.name, stoker_strerror(bye));
    stoker_info("producer '%s' finished: %llu items in %llu shards (%s)", r.name,
                (unsigned long long)st->examples, (unsigned long long)shards,
                ended ? "last epoch made" : "stopped");
    return STOKER_OK;
}
