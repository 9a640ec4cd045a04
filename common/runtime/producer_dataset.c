// A dataset's producer loop: ask the broker for a shard of (epoch, index) items, make each with
// the generator's fill_item and the item's seed, push them a chunk at a time carrying their
// items, repeat until the broker's last epoch is made. A shard the broker took back (this
// producer was taken for lost while it was frozen or cut off) is dropped: its items were handed
// to others. Making a chunk overlaps pushing the previous one (the pusher thread of
// producer_pipeline.c, as for streams), across shards too: the next shard is asked for (on the
// client's shard context) as soon as this one's last chunk is made, while its pushes are in
// flight, since the broker keeps a producer's current shard and the one asked ahead.
#include <stdlib.h>
#include <string.h>

#include "producer_dataset.h"
#include "producer_pipeline.h"
#include "producer_stop.h"
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
    chunk_policy *cp;
    const char *name;
} dataset_run;

static int
stop_requested(const dataset_run *r)
{
    const volatile int *user = r->cfg->client.stop;
    return producer_stop_requested(user);
}

// Makes items[0..n) into chunk (emptied first) with the generator, or fewer when the chunk
// closes first (its time bound, chunk_policy.h): chunk->count says how many.
static int
make_items(const dataset_run *r, stoker_chunk *chunk, const uint64_t *items, uint32_t n,
           uint64_t dataset_seed)
{
    chunk->count = 0;
    chunk_policy_begin(r->cp);
    for (uint32_t i = 0; i < n && (i == 0 || !chunk_policy_close(r->cp, chunk->count)); i++) {
        uint32_t epoch = (uint32_t)(items[i] >> 32);
        uint64_t index = items[i] & 0xffffffffu;
        if (index >= r->gen->n_items) {
            stoker_error("producer '%s': broker asked for item %llu of a dataset of %llu", r->name,
                         (unsigned long long)index, (unsigned long long)r->gen->n_items);
            return STOKER_INVALID;
        }
        void *slots[STOKER_MAX_FIELDS];
        stoker_var_slot vars[STOKER_MAX_FIELDS];
        stoker_generator_slots(chunk, index, vars, slots);
        int rv = r->gen->fill_item(r->gen->user, index,
                                   stoker_item_seed(dataset_seed, epoch, index), slots);
        if (rv != STOKER_OK)
            return rv;
        stoker_chunk_commit_example(chunk);
    }
    return STOKER_OK;
}

// Makes shard s (items) and hands its chunks to the pusher, without waiting for their pushes;
// *last is raised to the last chunk's mark. Stops early when a push of the shard was refused
// as revoked. STOKER_OK, or the error (the pusher stopped, the generator failed, a stop).
static int
make_shard(const dataset_run *r, const uint64_t *items, const stoker_shard *s, uint64_t *last)
{
    for (uint32_t off = 0; off < s->n && !producer_pipeline_revoked(r->pl, s->id);) {
        if (stop_requested(r))
            return STOKER_INTERRUPTED;
        chunk_policy_fit_batch(r->cp, stoker_producer_client_batch_examples(r->pc));
        stoker_chunk *chunk = producer_pipeline_free_chunk(r->pl, r->cp->capacity);
        if (chunk == NULL)
            return producer_pipeline_drain(r->pl); // the pusher failed: this says how
        uint32_t cap = r->cp->capacity < chunk->capacity ? r->cp->capacity : chunk->capacity;
        uint32_t m = s->n - off < cap ? s->n - off : cap;
        int rv = make_items(r, chunk, items + off, m, s->seed);
        if (rv != STOKER_OK)
            return rv;
        uint32_t made = chunk->count; // read before the pusher has it
        *last = producer_pipeline_submit(r->pl, 0, items + off, s->id);
        off += made;
    }
    return STOKER_OK;
}

int
producer_dataset_run(const stoker_producer_config *cfg, const stoker_generator *gen,
                     stoker_producer_client *pc, chunk_policy *cp, stoker_producer_stats *st)
{
    dataset_run r = {.cfg = cfg,
                     .gen = gen,
                     .pc = pc,
                     .cp = cp,
                     .name = cfg->client.name != NULL ? cfg->client.name : "producer"};
    // Two shards' items: the one being made, and the one before, whose last chunks may still
    // be in flight (the pusher reads their items).
    uint64_t *items = malloc(2 * SHARD_MAX * sizeof(*items));
    int rv = items == NULL
                 ? STOKER_NOMEM
                 : producer_pipeline_create(pc, &gen->schema, cp->capacity, r.name, &r.pl);
    if (rv != STOKER_OK) {
        free(items);
        return rv;
    }
    uint64_t shards = 0, asked_ahead = 0;
    uint64_t last = 0;      // the mark of the last chunk submitted
    uint64_t prev_last = 0; // the mark of the last chunk of the shard before the current one
    int ended = 0, have = 0, k = 0;
    stoker_shard cur = {0};
    while (!stop_requested(&r)) {
        if (!have) {
            // Nothing asked ahead (the first shard, or the broker had none or did not answer):
            // ask the usual way, which may say hello, once no push is in flight.
            if ((rv = producer_pipeline_drain(r.pl)) != STOKER_OK)
                break;
            rv = stoker_producer_client_shard(pc, items + k * SHARD_MAX, SHARD_MAX, &cur);
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
        }
        shards++;
        if ((rv = make_shard(&r, items + k * SHARD_MAX, &cur, &last)) != STOKER_OK)
            break;
        // Ask for the next shard while this one's last chunks are pushed, and make it at once.
        // The broker keeps two shards for us, so the one before must be taken in full first
        // (it is, unless this shard was a single chunk), and its items array is then free.
        have = 0;
        if ((rv = producer_pipeline_wait(r.pl, prev_last)) != STOKER_OK)
            break;
        prev_last = last;
        k ^= 1;
        int ahead = stoker_producer_client_shard_ahead(pc, items + k * SHARD_MAX, SHARD_MAX, &cur);
        if (ahead == STOKER_OK) {
            have = 1;
            asked_ahead++;
        } else if (ahead == STOKER_END_OF_DATA) {
            ended = 1;
            break;
        }
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
    stoker_info("producer '%s' finished: %llu items in %llu shards, %llu asked ahead (%s)", r.name,
                (unsigned long long)st->examples, (unsigned long long)shards,
                (unsigned long long)asked_ahead, ended ? "last epoch made" : "stopped");
    return STOKER_OK;
}
