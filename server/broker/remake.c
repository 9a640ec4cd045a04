// A job's items to make again in one epoch (see remake.h): two bitmaps over the dataset and the
// members in the order they are to be made. A cut walks the order from where the last one left
// off, skipping members no longer pending (another job's shard made them for this one too).
#include <stdlib.h>
#include <string.h>

#include "remake.h"
#include "stoker/error.h"

static int
bit(const uint8_t *map, uint32_t i)
{
    return (map[i >> 3] >> (i & 7)) & 1;
}

static void
set_bit(uint8_t *map, uint32_t i, int on)
{
    if (on)
        map[i >> 3] |= (uint8_t)(1u << (i & 7));
    else
        map[i >> 3] &= (uint8_t) ~(1u << (i & 7));
}

remake *
remake_create(uint64_t n, uint32_t epoch)
{
    remake *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->epoch = epoch;
    r->n = n;
    r->member = calloc((n + 7) / 8, 1);
    r->pending = calloc((n + 7) / 8, 1);
    if (r->member == NULL || r->pending == NULL) {
        remake_destroy(r);
        return NULL;
    }
    return r;
}

void
remake_destroy(remake *r)
{
    if (r == NULL)
        return;
    free(r->member);
    free(r->pending);
    free(r->order);
    free(r);
}

// Appends index to the order to make. STOKER_NOMEM.
static int
push_order(remake *r, uint32_t index)
{
    if (r->head > 0 && r->head == r->len)
        r->head = r->len = 0; // all looked at: start the list again
    if (r->len == r->cap) {
        if (r->head > r->len / 2) { // most of it looked at: move the rest to the front
            memmove(r->order, r->order + r->head, (r->len - r->head) * sizeof(*r->order));
            r->len -= r->head;
            r->head = 0;
        } else {
            uint64_t cap = r->cap ? r->cap * 2 : 256;
            uint32_t *o = realloc(r->order, cap * sizeof(*o));
            if (o == NULL)
                return STOKER_NOMEM;
            r->order = o;
            r->cap = cap;
        }
    }
    r->order[r->len++] = index;
    return STOKER_OK;
}

int
remake_add(remake *r, uint32_t index)
{
    if (index >= r->n || bit(r->member, index))
        return STOKER_OK;
    if (push_order(r, index) != STOKER_OK)
        return STOKER_NOMEM;
    set_bit(r->member, index, 1);
    set_bit(r->pending, index, 1);
    r->members++;
    r->pending_count++;
    r->outstanding++;
    return STOKER_OK;
}

uint32_t
remake_cut(remake *r, uint32_t want, uint32_t *out)
{
    uint32_t got = 0;
    while (got < want && r->head < r->len) {
        uint32_t index = r->order[r->head++];
        if (!bit(r->pending, index))
            continue;
        set_bit(r->pending, index, 0);
        r->pending_count--;
        out[got++] = index;
    }
    return got;
}

int
remake_is_member(const remake *r, uint32_t index)
{
    return index < r->n && bit(r->member, index);
}

int
remake_is_pending(const remake *r, uint32_t index)
{
    return index < r->n && bit(r->pending, index);
}

void
remake_take(remake *r, uint32_t index)
{
    if (remake_is_pending(r, index)) {
        set_bit(r->pending, index, 0);
        r->pending_count--;
    }
}

int
remake_give_back(remake *r, uint32_t index)
{
    if (!remake_is_member(r, index) || remake_is_pending(r, index))
        return STOKER_OK;
    if (push_order(r, index) != STOKER_OK)
        return STOKER_NOMEM;
    set_bit(r->pending, index, 1);
    r->pending_count++;
    return STOKER_OK;
}

void
remake_acked(remake *r, uint64_t count)
{
    r->outstanding = r->outstanding > count ? r->outstanding - count : 0;
}

int
remake_complete(const remake *r)
{
    return r->outstanding == 0;
}

remake *
remake_find(remake *const *sets, uint32_t epoch)
{
    for (uint32_t i = 0; i < REMAKE_SETS; i++)
        if (sets[i] != NULL && sets[i]->epoch == epoch)
            return sets[i];
    return NULL;
}
