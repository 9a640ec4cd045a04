// A producer's retention buffer (retention.h): a ring of chunk copies. Released slots keep their
// buffers, so a steady producer copies into memory it already has instead of allocating per push;
// a chunk trained out of order (a hole) frees its copy at once and keeps only its count.
// With a pool (push_pool.h) the copies of large chunks live in shared memory the broker reads
// them from; a slot's region is written again only after its examples were trained.
#include <stdlib.h>
#include <string.h>

#include "push_pool.h"
#include "retention.h"
#include "stoker/error.h"

typedef struct entry {
    stoker_chunk chunk; // owned; capacity may exceed count (a reused buffer)
    uint8_t *region;    // non-NULL: chunk's buffers are this region of the pool
    uint64_t first_seq;
    int hole; // trained out of order: not counted, not pushed again
} entry;

struct retention {
    entry *ring;
    uint32_t cap, head, len; // held entries: ring[(head + i) % cap], i < len
    uint64_t examples;
    push_pool *pool; // NULL: none
    uint64_t pool_min;
};

int
retention_would_pool(const retention *r, const stoker_chunk *chunk)
{
    return r->pool != NULL && push_pool_secret(r->pool) != 0 &&
           stoker_chunk_bytes(chunk, 0, chunk->count) >= r->pool_min;
}

// Frees a slot's buffers, wherever they are.
static void
slot_fini(retention *r, entry *e)
{
    if (e->region != NULL) {
        push_pool_free(r->pool, e->region);
        memset(&e->chunk, 0, sizeof(e->chunk));
        e->region = NULL;
    } else {
        stoker_chunk_fini(&e->chunk);
    }
}

// Gives slot e buffers for chunk's examples: in the pool when the chunk is large enough and the
// pool has room, else on the heap; buffers that fit already stay.
static int
slot_fit(retention *r, entry *e, const stoker_chunk *chunk)
{
    uint32_t count = chunk->count;
    int fits = e->chunk.capacity >= count && stoker_schema_equal(&e->chunk.schema, &chunk->schema);
    if (stoker_schema_first_variable(&chunk->schema) >= 0) {
        // Variable values grow as they are appended: only on the heap (a copy in the pool is
        // made whole, retention_add).
        if (e->region != NULL) {
            slot_fini(r, e);
            fits = 0;
        }
    } else if ((!fits || e->region == NULL) && retention_would_pool(r, chunk)) {
        stoker_chunk pooled;
        uint8_t *region;
        if (push_pool_chunk(r->pool, &chunk->schema, count, &pooled, &region) == STOKER_OK) {
            slot_fini(r, e);
            e->chunk = pooled;
            e->region = region;
            return STOKER_OK;
        }
    }
    if (fits)
        return STOKER_OK;
    slot_fini(r, e);
    return stoker_chunk_init(&e->chunk, &chunk->schema, count);
}

retention *
retention_create(void)
{
    return calloc(1, sizeof(retention));
}

void
retention_destroy(retention *r)
{
    if (r == NULL)
        return;
    // Held copies in the pool may still be read by the broker (retention turned off while the
    // producer lives on): their regions wait for their seqs to be trained.
    for (uint32_t i = 0; i < r->len; i++) {
        entry *e = &r->ring[(r->head + i) % r->cap];
        if (e->region != NULL && !e->hole) {
            push_pool_defer(r->pool, e->region, e->first_seq + e->chunk.count);
            e->region = NULL;
            memset(&e->chunk, 0, sizeof(e->chunk));
        }
    }
    for (uint32_t i = 0; i < r->cap; i++)
        slot_fini(r, &r->ring[i]);
    free(r->ring);
    free(r);
}

void
retention_set_pool(retention *r, push_pool *pool, uint64_t min_bytes)
{
    r->pool = pool;
    r->pool_min = min_bytes;
}

int
retention_pooled(const retention *r, const stoker_chunk *chunk)
{
    return r->pool != NULL && push_pool_offsets(r->pool, chunk, (uint64_t[STOKER_MAX_FIELDS]){0});
}

static int
grow(retention *r)
{
    uint32_t cap = r->cap ? r->cap * 2 : 8;
    entry *ring = calloc(cap, sizeof(*ring));
    if (ring == NULL)
        return STOKER_NOMEM;
    // Held entries first, in order; then the free slots with their buffers.
    for (uint32_t i = 0; i < r->cap; i++)
        ring[i] = r->ring[(r->head + i) % r->cap];
    free(r->ring);
    r->ring = ring;
    r->cap = cap;
    r->head = 0;
    return STOKER_OK;
}

// Halves a ring that holds at most a quarter of its slots (it grew for many small chunks, and
// the chunks grew since: a producer's first chunks, before it knew the trainers' batch), freeing
// the buffers of the free slots furthest from reuse. Otherwise the next pushes go round every
// slot, each with buffers too small for them, allocating new ones, and the ring ends up keeping
// buffers for all its slots. Only before an entry is added: entries move, as when it grows.
static void
shrink(retention *r)
{
    while (r->cap > 8 && r->len <= r->cap / 4) {
        uint32_t cap = r->cap / 2;
        entry *ring = calloc(cap, sizeof(*ring));
        if (ring == NULL)
            return;
        // Held entries first, in order; then the free slots that come next.
        for (uint32_t i = 0; i < r->cap; i++) {
            entry *e = &r->ring[(r->head + i) % r->cap];
            if (i < cap)
                ring[i] = *e;
            else
                slot_fini(r, e);
        }
        free(r->ring);
        r->ring = ring;
        r->cap = cap;
        r->head = 0;
    }
}

int
retention_add(retention *r, const stoker_chunk *chunk, uint64_t first_seq)
{
    shrink(r);
    if (r->len == r->cap && grow(r) != STOKER_OK)
        return STOKER_NOMEM;
    entry *e = &r->ring[(r->head + r->len) % r->cap];
    int rv;
    if (stoker_schema_first_variable(&chunk->schema) >= 0 && retention_would_pool(r, chunk)) {
        // Variable-length values: a copy laid out as the push's blobs (push_pool_copy).
        stoker_chunk pooled;
        uint8_t *region;
        if (push_pool_copy(r->pool, chunk, &pooled, &region) == STOKER_OK) {
            slot_fini(r, e);
            e->chunk = pooled;
            e->region = region;
            e->first_seq = first_seq;
            e->hole = 0;
            r->len++;
            r->examples += chunk->count;
            return STOKER_OK;
        }
    }
    rv = slot_fit(r, e, chunk);
    if (rv != STOKER_OK)
        return rv;
    e->chunk.count = 0;
    rv = stoker_chunk_append(&e->chunk, chunk, 0, chunk->count);
    if (rv != STOKER_OK)
        return rv;
    e->first_seq = first_seq;
    e->hole = 0;
    r->len++;
    r->examples += chunk->count;
    return STOKER_OK;
}

int
retention_adopt(retention *r, stoker_chunk *chunk, uint64_t first_seq)
{
    if (!chunk->owns_data || chunk->count == 0)
        return STOKER_INVALID;
    if (retention_would_pool(r, chunk)) {
        // The copy goes to the pool (the broker reads it there); the caller keeps its buffers.
        int rv = retention_add(r, chunk, first_seq);
        if (rv == STOKER_OK)
            chunk->count = 0;
        return rv;
    }
    shrink(r);
    if (r->len == r->cap && grow(r) != STOKER_OK)
        return STOKER_NOMEM;
    entry *e = &r->ring[(r->head + r->len) % r->cap];
    // The free slot's buffers go to the caller, unless too small or of another schema (or none
    // yet): then fresh ones of the caller's capacity, made before anything is swapped.
    if (e->region != NULL)
        slot_fini(r, e); // pool buffers are not the caller's to fill
    stoker_chunk spare = e->chunk;
    if (spare.capacity < chunk->capacity || !stoker_schema_equal(&spare.schema, &chunk->schema)) {
        stoker_chunk fresh;
        int rv = stoker_chunk_init(&fresh, &chunk->schema, chunk->capacity);
        if (rv != STOKER_OK)
            return rv;
        stoker_chunk_fini(&spare);
        spare = fresh;
    }
    e->chunk = *chunk;
    spare.count = 0;
    *chunk = spare;
    e->first_seq = first_seq;
    e->hole = 0;
    r->len++;
    r->examples += e->chunk.count;
    return STOKER_OK;
}

void
retention_release(retention *r, uint64_t trained_through)
{
    while (r->len > 0) {
        entry *e = &r->ring[r->head];
        if (!e->hole && e->first_seq + e->chunk.count > trained_through)
            break;
        if (!e->hole)
            r->examples -= e->chunk.count;
        r->head = (r->head + 1) % r->cap;
        r->len--;
    }
}

void
retention_forget_from(retention *r, uint64_t seq)
{
    while (r->len > 0) {
        entry *e = &r->ring[(r->head + r->len - 1) % r->cap];
        if (e->first_seq < seq)
            break;
        if (!e->hole)
            r->examples -= e->chunk.count;
        if (e->region != NULL) {
            // The broker may hold the push all the same (its answer was lost): the region is
            // not written again before the seqs it carried are trained.
            push_pool_defer(r->pool, e->region, e->first_seq + e->chunk.count);
            memset(&e->chunk, 0, sizeof(e->chunk));
            e->region = NULL;
        }
        r->len--; // the slot keeps its buffers for the next add
    }
}

void
retention_release_ranges(retention *r, const uint64_t *pairs, uint32_t n)
{
    if (n < 2)
        return;
    for (uint32_t i = 0; i < r->len; i++) {
        entry *e = &r->ring[(r->head + i) % r->cap];
        if (e->hole)
            continue;
        for (uint32_t k = 0; k + 1 < n; k += 2) {
            if (e->first_seq >= pairs[k] && e->first_seq + e->chunk.count <= pairs[k + 1]) {
                // The copy goes (its seqs stay, as a count): holes behind an old chunk that is
                // still in flight hold no example memory.
                uint32_t count = e->chunk.count;
                slot_fini(r, e);
                e->chunk.count = count;
                e->hole = 1;
                r->examples -= count;
                break;
            }
        }
    }
    retention_release(r, 0); // holes at the head go
}

uint64_t
retention_examples(const retention *r)
{
    return r->examples;
}

uint64_t
retention_oldest(const retention *r, uint64_t none)
{
    return r->len > 0 ? r->ring[r->head].first_seq : none;
}

const stoker_chunk *
retention_find(const retention *r, uint64_t seq, uint64_t *first_seq, int *hole)
{
    for (uint32_t i = 0; i < r->len; i++) {
        const entry *e = &r->ring[(r->head + i) % r->cap];
        if (seq >= e->first_seq && seq < e->first_seq + e->chunk.count) {
            *first_seq = e->first_seq;
            *hole = e->hole;
            return &e->chunk;
        }
    }
    return NULL;
}
