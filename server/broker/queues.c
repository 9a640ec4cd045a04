// The broker's queue sizing: how many examples each producer's queue may hold now, from what the
// broker knows (the batch sizes its trainers ask for, the producers alive, --max-bytes), unless
// the user fixed it with --queue-depth N; when the queues are full; and the one warning when a
// batch came short because of them rather than the supply. It moves no examples itself.
// It may use the core and commit.c (commit_bytes_room): a rank's group size is its trainer's world.
#include <stdio.h>

#include "budget.h"
#include "group.h"
#include "internal.h"
#include "jobs.h"
#include "stoker/log.h"

#define DEPTH_MAX (1u << 24) // as --queue-depth's own bound
// A push's bytes beyond its examples': the request's envelope (method, session, seqs, per field a
// size, a tag and a shared-memory offset), and a dataset's item per example.
#define PUSH_ENVELOPE_BYTES 1024u
#define PUSH_ITEM_BYTES     8u

uint32_t
queues_max_chunk(const broker *b)
{
    uint64_t max = b->cfg.max_chunk_examples;
    if (!b->cfg.queue_depth_auto && b->cfg.queue_depth < max)
        max = b->cfg.queue_depth; // the user's fixed queue: a larger chunk would never fit
    if (b->example_bytes > 0) {
        uint64_t fit = b->cfg.max_bytes / b->example_bytes; // what the queues could ever hold
        if (fit < max)
            max = fit;
        uint64_t msg = b->cfg.max_message_bytes;
        if (msg > 0) {
            uint64_t room = msg > PUSH_ENVELOPE_BYTES ? msg - PUSH_ENVELOPE_BYTES : 0;
            uint64_t m = room / (b->example_bytes + PUSH_ITEM_BYTES);
            if (m < max)
                max = m;
        }
    }
    return max < 1 ? 1 : (uint32_t)max;
}

uint32_t
queues_batch_examples(const broker *b)
{
    uint32_t batch = 0;
    for (uint32_t i = 0; i < b->n_trainers; i++) {
        const trainer *t = b->trainers[i];
        if (t->connected && !stoker_batching_active(&t->batching) && t->batch_examples > batch)
            batch = t->batch_examples;
    }
    return batch;
}

// The examples one batch of t's takes: its pull's count; for a batch made by tokens its budget
// over the queued sequences' mean length, and with buckets BUCKET_BATCHES of them, so that the
// queues hold similar lengths to choose from (packed: PACK_BATCHES) (stoker/batching.h).
#define BUCKET_BATCHES 64
#define PACK_BATCHES   4 // packed rows: short sequences to fill the rows' gaps with (best fit)
static uint64_t
batch_need(const broker *b, const trainer *t)
{
    uint64_t need = t->batch_examples;
    if (!stoker_batching_active(&t->batching))
        return need;
    uint64_t budget = stoker_batching_budget(&t->batching, t->batch_examples);
    uint64_t queued = b->c.queued, tokens = budget_queued_tokens(b);
    if (budget > 0 && queued > 0 && tokens > 0) {
        uint64_t mean = tokens / queued;
        need = budget / (mean > 0 ? mean : 1) + 1;
    }
    if (t->batching.buckets)
        need *= BUCKET_BATCHES;
    else if (t->batching.pack > 0)
        need *= PACK_BATCHES;
    return need < BUDGET_MAX_EXAMPLES ? need : BUDGET_MAX_EXAMPLES;
}

void
queues_resize(broker *b)
{
    if (!b->cfg.queue_depth_auto) {
        b->queue_depth = b->cfg.queue_depth;
        return;
    }
    uint64_t batch = 0; // the largest pull, or for a group's rank its whole step
    for (uint32_t i = 0; i < b->n_trainers; i++) {
        const trainer *t = b->trainers[i];
        uint64_t need = batch_need(b, t);
        if (t->world > 0)
            need *= t->world; // a rank's step takes a batch for every rank at once
        if (t->connected && need > batch)
            batch = need;
    }
    uint32_t alive = producers_alive(b);
    uint64_t chunk = 0; // the largest push of an alive producer
    for (uint32_t i = 0; i < b->n_producers; i++) {
        const producer *p = b->producers[i];
        if (p->status == STOKER_PRODUCER_ALIVE && p->max_chunk > chunk)
            chunk = p->max_chunk;
    }
    if (alive == 0)
        alive = 1;
    // Two of the largest batch across the alive producers: one being taken while the next
    // fills; and two of the largest chunk, so that a producer's next push fits while its last
    // is taken (producers size their chunks by bytes, docs/running.md). A queue measured in
    // examples cannot suit 44-byte and 150 KB examples alike with one number; --max-bytes
    // bounds the memory in both cases.
    uint64_t want = (2ull * batch + alive - 1) / alive;
    if (want < 2 * chunk)
        want = 2 * chunk;
    if (b->example_bytes > 0) {
        uint64_t fit = b->cfg.max_bytes / b->example_bytes / alive;
        if (want > fit)
            want = fit;
    }
    if (want > DEPTH_MAX)
        want = DEPTH_MAX;
    b->queue_depth = want > b->cfg.queue_depth ? (uint32_t)want : b->cfg.queue_depth;
}

int
queues_full(const broker *b)
{
    if (b->example_bytes > commit_bytes_room(b)) // queued and held for commits (commit.c)
        return 1;
    for (uint32_t i = 0; i < b->n_producers; i++)
        if (queues_has_room(b, b->producers[i]))
            return 0;
    return 1;
}

int
queues_has_room(const broker *b, const producer *p)
{
    // Full for this producer when its next chunk (the size of its last) cannot fit: a queue
    // of 63 with chunks of 3 and a depth of 64 takes nothing more.
    uint64_t chunk = p->last_chunk > 0 ? p->last_chunk : 1;
    // (An empty sized queue takes any chunk, push.c.) Jobs sharing the producers: every job
    // that takes examples must have room (jobs.c); an ended job keeps nothing.
    return p->status == STOKER_PRODUCER_ALIVE && (!jobs_takes(b) || jobs_fits(b, p, chunk, 0)) &&
           jobs_have_room(b, p);
}

void
queues_cut_short(broker *b, const trainer *t, uint32_t max, uint64_t queued)
{
    b->c.short_by_queues++;
    if (b->queue_limit[0] != '\0')
        return; // said once
    uint32_t alive = producers_alive(b);
    if (b->example_bytes > commit_bytes_room(b))
        snprintf(b->queue_limit, sizeof(b->queue_limit),
                 "trainer %u '%s' asks for batches of %u examples; the queues hold at most "
                 "--max-bytes %llu bytes (%llu examples of %zu bytes), so its batches come "
                 "short (this one %llu): raise --max-bytes",
                 t->id, t->name, max, (unsigned long long)b->cfg.max_bytes,
                 (unsigned long long)(b->example_bytes ? b->cfg.max_bytes / b->example_bytes : 0),
                 b->example_bytes, (unsigned long long)queued);
    else if (!b->cfg.queue_depth_auto)
        snprintf(b->queue_limit, sizeof(b->queue_limit),
                 "trainer %u '%s' asks for batches of %u examples; %u producers x --queue-depth "
                 "%u hold at most %llu, so its batches come short (this one %llu): raise "
                 "--queue-depth, or leave it out and the broker sizes the queues",
                 t->id, t->name, max, alive, b->queue_depth,
                 (unsigned long long)alive * b->queue_depth, (unsigned long long)queued);
    else
        snprintf(b->queue_limit, sizeof(b->queue_limit),
                 "trainer %u '%s' asks for batches of %u examples; %u producers x %u examples "
                 "(sized by the broker) held only %llu: raise --max-bytes or --queue-depth",
                 t->id, t->name, max, alive, b->queue_depth, (unsigned long long)queued);
    stoker_warn("queue-limit: %s", b->queue_limit);
}

size_t
queues_example_bytes(const stoker_schema *schema)
{
    size_t bytes = stoker_schema_example_bytes(schema);
    for (uint32_t i = 0; i < schema->n_fields; i++)
        bytes += schema->fields[i].variable ? 8 : 0;
    return bytes;
}
