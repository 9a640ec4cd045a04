// The producers' pusher thread (see producer_pipeline.h): two chunks, one being filled by the
// caller while the pusher sends the other. A stream's push is encoded on the caller's thread
// when it submits (stoker_producer_client_prepare), and retention keeps the pushed chunk's own
// buffers (stoker_producer_client_push_owned), so the pusher's path holds no copy of the
// examples. It knows streams' seq resumption and datasets'
// revoked shards (by shard id: a revoked shard's later chunks are dropped, the next shard's
// pushed); it does not generate, ask for shards or say goodbye.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "producer_pipeline.h"
#include "stoker/error.h"
#include "stoker/log.h"

struct producer_pipeline {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    stoker_chunk chunks[2];
    uint64_t first_seq[2];
    const uint64_t *items[2]; // a dataset chunk's items, NULL for a stream's
    uint64_t shard[2];        // a dataset chunk's shard id
    int full[2];              // filled and waiting for (or in) its push
    int fill, push;           // the next chunk to fill, the next to push
    int done;                 // no more chunks will come
    uint64_t revoked;         // the last shard a push of which was refused as revoked, 0: none
    uint64_t submitted;       // chunks submitted
    uint64_t answered;        // chunks pushed or dropped (in submission order)
    int rv;                   // the pusher's failure (it then stops), STOKER_OK while it works
    uint64_t examples;        // acknowledged by the broker
    uint64_t pushes;
    stoker_producer_client *pc;
    const char *name;
    pthread_t thread;
};

// Pushes a stream's chunk from first_seq. Normally first_seq is the client's next seq; when the
// broker already holds part of the chunk (it answered a hello with a later seq) only the rest
// is sent.
static int
push_stream(producer_pipeline *pl, stoker_chunk *chunk, uint64_t first_seq)
{
    uint64_t next = stoker_producer_client_next_seq(pl->pc);
    if (next >= first_seq + chunk->count)
        return STOKER_OK;  // all of it is held already
    if (next <= first_seq) // the whole chunk: retention may keep its buffers rather than a copy
        return stoker_producer_client_push_owned(pl->pc, chunk, first_seq);
    uint32_t skip = (uint32_t)(next - first_seq);
    if (stoker_schema_first_variable(&chunk->schema) >= 0) {
        // Offsets must start at 0: the rest goes as a copy with its offsets rebased.
        stoker_chunk rest;
        int rv = stoker_chunk_init(&rest, &chunk->schema, chunk->count - skip);
        if (rv == STOKER_OK &&
            (rv = stoker_chunk_append(&rest, chunk, skip, chunk->count - skip)) == STOKER_OK)
            rv = stoker_producer_client_push(pl->pc, &rest, next);
        stoker_chunk_fini(&rest);
        return rv;
    }
    stoker_chunk view = *chunk;
    view.owns_data = 0;
    for (uint32_t f = 0; f < view.schema.n_fields; f++)
        view.data[f] += (size_t)skip * stoker_field_bytes(&view.schema.fields[f]);
    view.count -= skip;
    first_seq = next;
    return stoker_producer_client_push(pl->pc, &view, first_seq);
}

// Pushes a dataset's chunk of shard `shard`; a chunk of a shard already revoked is dropped.
static int
push_items(producer_pipeline *pl, const stoker_chunk *chunk, const uint64_t *items, uint64_t shard,
           int revoked)
{
    if (revoked)
        return STOKER_SHARD_REVOKED;
    uint64_t seq = stoker_producer_client_next_seq(pl->pc);
    int rv = stoker_producer_client_push_items(pl->pc, chunk, seq, items, shard);
    if (rv == STOKER_SHARD_REVOKED)
        stoker_info("shard-revoked: producer '%s': the broker refused the rest of its shard "
                    "%llu (%s); dropping it",
                    pl->name, (unsigned long long)shard, stoker_producer_client_error(pl->pc));
    return rv;
}

static void *
pusher_main(void *arg)
{
    producer_pipeline *pl = arg;
    pthread_mutex_lock(&pl->mu);
    for (;;) {
        while (!pl->full[pl->push] && !pl->done)
            pthread_cond_wait(&pl->cv, &pl->mu);
        if (!pl->full[pl->push])
            break; // done, and everything was pushed
        stoker_chunk *chunk = &pl->chunks[pl->push];
        uint64_t first_seq = pl->first_seq[pl->push];
        const uint64_t *items = pl->items[pl->push];
        uint64_t shard = pl->shard[pl->push];
        int revoked = items != NULL && pl->revoked != 0 && pl->revoked == shard;
        uint32_t count = chunk->count; // a push may swap the chunk's buffers (retention)
        pthread_mutex_unlock(&pl->mu);
        int rv = items != NULL ? push_items(pl, chunk, items, shard, revoked)
                               : push_stream(pl, chunk, first_seq);
        pthread_mutex_lock(&pl->mu);
        if (rv == STOKER_INTERRUPTED) {
            // Stopped while the broker had no room (or was unreachable): the push was abandoned;
            // goodbye's answer says whether the broker took it after all.
            stoker_info("producer '%s': stopped with seq %llu.. waiting for room (queue full); "
                        "not pushing it",
                        pl->name, (unsigned long long)first_seq);
        } else if (rv != STOKER_OK && rv != STOKER_SHARD_REVOKED) {
            stoker_error("producer '%s': push of seq %llu failed: %s (%s)", pl->name,
                         (unsigned long long)first_seq, stoker_strerror(rv),
                         stoker_producer_client_error(pl->pc));
        }
        if (rv == STOKER_SHARD_REVOKED) {
            pl->revoked = shard; // nothing of the chunk was taken
        } else if (rv != STOKER_OK) {
            pl->rv = rv;
            break;
        } else {
            pl->examples += count;
            pl->pushes++;
        }
        pl->full[pl->push] = 0;
        pl->push ^= 1;
        pl->answered++;
        pthread_cond_broadcast(&pl->cv);
    }
    pthread_cond_broadcast(&pl->cv);
    pthread_mutex_unlock(&pl->mu);
    return NULL;
}

int
producer_pipeline_create(stoker_producer_client *pc, const stoker_schema *schema, uint32_t chunk,
                         const char *name, producer_pipeline **out)
{
    producer_pipeline *pl = calloc(1, sizeof(*pl));
    if (pl == NULL)
        return STOKER_NOMEM;
    pl->pc = pc;
    pl->name = name;
    int rv;
    if ((rv = stoker_chunk_init(&pl->chunks[0], schema, chunk)) != STOKER_OK)
        goto free_pl;
    if ((rv = stoker_chunk_init(&pl->chunks[1], schema, chunk)) != STOKER_OK)
        goto fini_chunk0;
    pthread_mutex_init(&pl->mu, NULL);
    pthread_cond_init(&pl->cv, NULL);
    if (pthread_create(&pl->thread, NULL, pusher_main, pl) != 0) {
        rv = STOKER_NOMEM;
        goto fini_sync;
    }
    *out = pl;
    return STOKER_OK;

fini_sync:
    pthread_cond_destroy(&pl->cv);
    pthread_mutex_destroy(&pl->mu);
    stoker_chunk_fini(&pl->chunks[1]);
fini_chunk0:
    stoker_chunk_fini(&pl->chunks[0]);
free_pl:
    free(pl);
    return rv;
}

stoker_chunk *
producer_pipeline_free_chunk(producer_pipeline *pl, uint32_t capacity)
{
    pthread_mutex_lock(&pl->mu);
    while (pl->full[pl->fill] && pl->rv == STOKER_OK)
        pthread_cond_wait(&pl->cv, &pl->mu);
    stoker_chunk *chunk = pl->rv == STOKER_OK ? &pl->chunks[pl->fill] : NULL;
    pthread_mutex_unlock(&pl->mu);
    // Not full: the pusher does not touch it until it is submitted. Out of memory, the chunk
    // keeps its buffers (and its capacity, which the caller fills up to).
    stoker_chunk larger;
    if (chunk != NULL && chunk->capacity < capacity &&
        stoker_chunk_init(&larger, &chunk->schema, capacity) == STOKER_OK) {
        stoker_chunk_fini(chunk);
        *chunk = larger;
    }
    return chunk;
}

uint64_t
producer_pipeline_submit(producer_pipeline *pl, uint64_t first_seq, const uint64_t *items,
                         uint64_t shard)
{
    // A stream's push is encoded here, on the generating thread, while the pusher waits on the
    // previous one; if this fails the pusher encodes it itself.
    if (items == NULL)
        (void)stoker_producer_client_prepare(pl->pc, &pl->chunks[pl->fill], first_seq);
    pthread_mutex_lock(&pl->mu);
    pl->first_seq[pl->fill] = first_seq;
    pl->items[pl->fill] = items;
    pl->shard[pl->fill] = shard;
    pl->full[pl->fill] = 1;
    pl->fill ^= 1;
    uint64_t mark = ++pl->submitted;
    pthread_cond_broadcast(&pl->cv);
    pthread_mutex_unlock(&pl->mu);
    return mark;
}

int
producer_pipeline_revoked(producer_pipeline *pl, uint64_t shard)
{
    pthread_mutex_lock(&pl->mu);
    int revoked = shard != 0 && pl->revoked == shard;
    pthread_mutex_unlock(&pl->mu);
    return revoked;
}

int
producer_pipeline_wait(producer_pipeline *pl, uint64_t mark)
{
    pthread_mutex_lock(&pl->mu);
    while (pl->answered < mark && pl->rv == STOKER_OK)
        pthread_cond_wait(&pl->cv, &pl->mu);
    int rv = pl->rv;
    pthread_mutex_unlock(&pl->mu);
    return rv;
}

int
producer_pipeline_drain(producer_pipeline *pl)
{
    pthread_mutex_lock(&pl->mu);
    uint64_t mark = pl->submitted;
    pthread_mutex_unlock(&pl->mu);
    return producer_pipeline_wait(pl, mark);
}

int
producer_pipeline_finish(producer_pipeline *pl, stoker_producer_stats *st)
{
    pthread_mutex_lock(&pl->mu);
    pl->done = 1;
    pthread_cond_broadcast(&pl->cv);
    pthread_mutex_unlock(&pl->mu);
    pthread_join(pl->thread, NULL);
    st->examples += pl->examples;
    st->pushes += pl->pushes;
    int rv = pl->rv;
    stoker_chunk_fini(&pl->chunks[0]);
    stoker_chunk_fini(&pl->chunks[1]);
    pthread_cond_destroy(&pl->cv);
    pthread_mutex_destroy(&pl->mu);
    free(pl);
    return rv;
}
