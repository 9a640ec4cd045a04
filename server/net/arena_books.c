// The arena's books (see arena.h, arena_impl.h): regions reserved for batches, requests staged
// in the arena, fills and releases. Regions are few (batches in flight), so a sorted array and
// first-fit over its gaps are enough. No thread or socket of its own: the broker's thread and the
// arena's socket thread (arena.c) call it under the arena's lock.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "arena_impl.h"
#include "stoker/arena.h"
#include "stoker/error.h"
#include "stoker/log.h"

// --- regions (under the lock) -------------------------------------------------------------------

void
drop_region(broker_arena *a, uint32_t i)
{
    a->used_bytes -= a->regions[i].len;
    memmove(&a->regions[i], &a->regions[i + 1], (a->n_regions - i - 1) * sizeof(region));
    a->n_regions--;
}

void
maybe_free(broker_arena *a, uint32_t i)
{
    const region *r = &a->regions[i];
    if (!r->lease_held && !r->consumer_held && !r->filling && !r->staged)
        drop_region(a, i);
}

int
find_lease(const broker_arena *a, uint64_t lease)
{
    for (uint32_t i = 0; i < a->n_regions; i++)
        if (a->regions[i].lease == lease)
            return (int)i;
    return -1;
}

// Index where a region of len fits (first fit), with its offset; -1 when none.
static int
fit(const broker_arena *a, uint64_t len, uint64_t *off)
{
    uint64_t at = 0;
    for (uint32_t i = 0; i <= a->n_regions; i++) {
        uint64_t end = i < a->n_regions ? a->regions[i].off : a->bytes;
        if (end >= at && end - at >= len) {
            *off = at;
            return (int)i;
        }
        if (i < a->n_regions) {
            at = a->regions[i].off + a->regions[i].len;
            at = (at + STOKER_ARENA_ALIGN - 1) & ~(uint64_t)(STOKER_ARENA_ALIGN - 1);
        }
    }
    return -1;
}

// Index where a region of len fits at the top of the highest gap that holds it (last fit), with
// its offset; -1 when none. Pushes read into the arena are placed from its end and copied
// batches from its start (fit), so that the ones do not cut the others' room into pieces.
static int
fit_last(const broker_arena *a, uint64_t len, uint64_t *off)
{
    uint64_t at = 0;
    int found = -1;
    for (uint32_t i = 0; i <= a->n_regions; i++) {
        uint64_t end = i < a->n_regions ? a->regions[i].off : a->bytes;
        if (end >= at && end - at >= len) {
            uint64_t top = (end - len) & ~(uint64_t)(STOKER_ARENA_ALIGN - 1);
            if (top >= at) {
                *off = top;
                found = (int)i;
            }
        }
        if (i < a->n_regions) {
            at = a->regions[i].off + a->regions[i].len;
            at = (at + STOKER_ARENA_ALIGN - 1) & ~(uint64_t)(STOKER_ARENA_ALIGN - 1);
        }
    }
    return found;
}

// The memory and the books, once the broker and every staged request let go.
void
arena_free(broker_arena *a)
{
    munmap(a->base, a->bytes);
    close(a->memfd);
    pthread_mutex_destroy(&a->lock);
    free(a);
}

// The staged region (index) in which the examples of parts already lie as a batch of len
// bytes would in the arena (stoker_arena_layout from their first blob on), free for a lease: one
// part, fixed-size fields, each field's blob where the layout puts it (a push's whole chunk whose
// blobs' sizes are multiples of STOKER_ARENA_ALIGN, or any run of a one-field chunk's examples).
// sizes: each field's blob, as the caller computed them. -1 when there is none: the batch is
// copied.
static int
in_place(const broker_arena *a, const stoker_schema *schema, const stoker_chunk_part *parts,
         uint32_t n_parts, const size_t *sizes, uint64_t len)
{
    if (n_parts != 1 || a->staged_bytes == 0 || schema->n_fields == 0)
        return -1;
    const uint8_t *first = parts[0].data[0];
    if (first < a->base || first >= a->base + a->bytes)
        return -1;
    uint64_t at = (uint64_t)(first - a->base);
    uint64_t offsets[STOKER_MAX_FIELDS];
    for (uint32_t f = 0; f < schema->n_fields; f++)
        if (schema->fields[f].variable)
            return -1;
    (void)stoker_arena_layout(at, schema->n_fields, sizes, offsets);
    for (uint32_t f = 0; f < schema->n_fields; f++)
        if (parts[0].data[f] != a->base + offsets[f])
            return -1;
    for (uint32_t i = 0; i < a->n_regions; i++) {
        const region *r = &a->regions[i];
        if (r->off > at)
            break;
        if (at - r->off < r->len && len <= r->len - (at - r->off))
            return r->staged && !r->lease_held && !r->consumer_held && !r->filling ? (int)i : -1;
    }
    return -1;
}

uint8_t *
broker_arena_stage(broker_arena *a, size_t len, size_t blob_at)
{
    // The region starts aligned; the request starts pad bytes in, so its blob 0 is aligned.
    uint64_t pad = (STOKER_ARENA_ALIGN - blob_at % STOKER_ARENA_ALIGN) % STOKER_ARENA_ALIGN;
    uint64_t need = pad + len, at = 0;
    uint8_t *buf = NULL;
    pthread_mutex_lock(&a->lock);
    // Only while a trainer maps the arena: otherwise no batch can be sent from it, and the
    // memfd's pages, once written, stay the broker's until it ends.
    int mapped = 0;
    for (uint32_t c = 1; c <= MAX_CONSUMERS && !mapped; c++)
        mapped = a->consumers[c].fd >= 0;
    int i = mapped && !a->destroyed && a->n_regions < MAX_REGIONS &&
                    a->staged_bytes + need <= a->bytes / 4 * STAGE_QUARTERS
                ? fit_last(a, need, &at)
                : -1;
    if (i >= 0) {
        memmove(&a->regions[i + 1], &a->regions[i], (a->n_regions - (uint32_t)i) * sizeof(region));
        a->regions[i] = (region){.off = at, .len = need, .staged = 1};
        a->n_regions++;
        a->used_bytes += need;
        a->staged_bytes += need;
        a->staged_out++;
        buf = a->base + at + pad;
    }
    pthread_mutex_unlock(&a->lock);
    return buf;
}

void
broker_arena_unstage(void *arg, void *buf)
{
    broker_arena *a = arg;
    uint64_t at = (uint64_t)((uint8_t *)buf - a->base);
    pthread_mutex_lock(&a->lock);
    for (uint32_t i = 0; i < a->n_regions; i++) {
        region *r = &a->regions[i];
        if (r->staged && at >= r->off && at - r->off < r->len) {
            r->staged = 0;
            a->staged_bytes -= r->len;
            maybe_free(a, i);
            break;
        }
    }
    int last = --a->staged_out == 0 && a->destroyed;
    pthread_mutex_unlock(&a->lock);
    if (last)
        arena_free(a);
}

int
broker_arena_reserve(broker_arena *a, uint64_t secret, uint64_t lease, const stoker_schema *schema,
                     const stoker_chunk_part *parts, uint32_t n_parts, uint32_t count,
                     uint64_t *offset, int *placed)
{
    *placed = 0;
    size_t sizes[STOKER_MAX_FIELDS];
    uint64_t offsets[STOKER_MAX_FIELDS];
    for (uint32_t f = 0; f < schema->n_fields; f++)
        sizes[f] = (size_t)stoker_wire_blob_bytes(schema, f, parts, n_parts, count);
    uint64_t len = stoker_arena_layout(0, schema->n_fields, sizes, offsets);
    uint64_t at;
    pthread_mutex_lock(&a->lock);
    // Looked up under the same lock as the reservation: a consumer whose connection ends now
    // either gets the region (and releases it when its end is read) or is not found.
    uint32_t consumer = 0;
    for (uint32_t c = 1; secret != 0 && c <= MAX_CONSUMERS && consumer == 0; c++)
        if (a->consumers[c].fd >= 0 && a->consumers[c].secret == secret)
            consumer = c;
    if (consumer == 0) {
        pthread_mutex_unlock(&a->lock);
        return STOKER_NOT_FOUND;
    }
    int k = in_place(a, schema, parts, n_parts, sizes, len);
    if (k >= 0) {
        region *r = &a->regions[k];
        r->lease = lease;
        r->consumer = consumer;
        r->lease_held = r->consumer_held = 1;
        *offset = (uint64_t)(parts[0].data[0] - a->base);
        *placed = 1;
        pthread_mutex_unlock(&a->lock);
        return STOKER_OK;
    }
    int i = a->n_regions < MAX_REGIONS ? fit(a, len, &at) : -1;
    if (i >= 0) {
        memmove(&a->regions[i + 1], &a->regions[i], (a->n_regions - (uint32_t)i) * sizeof(region));
        a->regions[i] = (region){.off = at,
                                 .len = len,
                                 .lease = lease,
                                 .consumer = consumer,
                                 .lease_held = 1,
                                 .consumer_held = 1,
                                 .filling = 1};
        a->n_regions++;
        a->used_bytes += len;
    }
    pthread_mutex_unlock(&a->lock);
    if (i < 0)
        return STOKER_LIMIT;
    *offset = at;
    return STOKER_OK;
}

void
broker_arena_fill(broker_arena *a, uint64_t lease, uint64_t offset, const stoker_chunk_part *parts,
                  uint32_t n_parts, const stoker_schema *schema, uint32_t count)
{
    // The copy runs outside the arena's lock (and the broker's): the region is ours while
    // filling is set, whatever happens meanwhile to its lease or its consumer.
    if (parts != NULL) {
        size_t sizes[STOKER_MAX_FIELDS];
        uint64_t offsets[STOKER_MAX_FIELDS];
        for (uint32_t f = 0; f < schema->n_fields; f++)
            sizes[f] = (size_t)stoker_wire_blob_bytes(schema, f, parts, n_parts, count);
        (void)stoker_arena_layout(0, schema->n_fields, sizes, offsets);
        for (uint32_t f = 0; f < schema->n_fields; f++)
            stoker_wire_blob_write(schema, f, parts, n_parts, count, a->base + offset + offsets[f]);
    }
    pthread_mutex_lock(&a->lock);
    int i = find_lease(a, lease);
    if (i >= 0 && a->regions[i].off == offset) {
        a->regions[i].filling = 0;
        maybe_free(a, (uint32_t)i);
    }
    pthread_mutex_unlock(&a->lock);
}

void
broker_arena_lease_done(broker_arena *a, uint64_t lease)
{
    pthread_mutex_lock(&a->lock);
    int i = find_lease(a, lease);
    if (i >= 0) {
        a->regions[i].lease_held = 0;
        maybe_free(a, (uint32_t)i);
    }
    pthread_mutex_unlock(&a->lock);
}

void
broker_arena_get_stats(broker_arena *a, broker_arena_stats *out)
{
    pthread_mutex_lock(&a->lock);
    out->bytes = a->bytes;
    out->used_bytes = a->used_bytes;
    out->regions = a->n_regions;
    out->consumers = 0;
    for (uint32_t i = 1; i <= MAX_CONSUMERS; i++)
        out->consumers += a->consumers[i].fd >= 0;
    out->producers = 0;
    for (uint32_t i = 0; i < MAX_POOLS; i++)
        out->producers += a->pools[i].fd >= 0;
    pthread_mutex_unlock(&a->lock);
}
