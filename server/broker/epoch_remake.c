// The epochs' books of items made again for some jobs only (see remake.h): which of an epoch's
// items were accepted before a job joined late, where a remade shard's unmade rest goes back,
// and whether an epoch still waits for such copies. It uses the core and the sets.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "epoch_impl.h"
#include "internal.h"
#include "remake.h"
#include "stoker/error.h"
#include "stoker/log.h"

broker *
epoch_job_at(broker *b, uint32_t slot)
{
    if (slot == 0)
        return b;
    for (uint32_t i = 0; i < b->n_followers; i++)
        if (b->followers[i]->job_slot == slot)
            return b->followers[i];
    return NULL;
}

void
epoch_hand_back_remade(broker *b, const held *h)
{
    for (uint32_t slot = 0; slot < JOBS_MAX; slot++) {
        broker *j = (h->targets >> slot) & 1 ? epoch_job_at(b, slot) : NULL;
        remake *r = j != NULL ? remake_find(j->remakes, EPOCH_OF(h->items[0])) : NULL;
        for (uint32_t k = h->done; r != NULL && k < h->n; k++)
            if (remake_give_back(r, (uint32_t)EPOCH_INDEX(h->items[k])) != STOKER_OK)
                stoker_error("job '%s': out of memory handing back an item to make again: its "
                             "epoch %u cannot end",
                             j->job, r->epoch);
    }
}

int
epoch_copies_owed(const broker *b)
{
    for (uint32_t i = 0; i <= b->n_followers; i++) {
        const broker *j = i == 0 ? b : b->followers[i - 1];
        for (uint32_t k = 0; k < REMAKE_SETS; k++)
            if (j->remakes[k] != NULL && !remake_complete(j->remakes[k]))
                return 1;
    }
    return 0;
}

static void
end_event(broker *j, uint32_t k, uint64_t n, uint64_t now_ms)
{
    stoker_event *ev = new_event(j, STOKER_EVENT_EPOCH_END, now_ms);
    ev->epoch = k;
    snprintf(ev->name, sizeof(ev->name), "epoch %u", k);
    snprintf(ev->reason, sizeof(ev->reason), "all %llu items acknowledged", (unsigned long long)n);
}

void
epoch_job_trained(broker *j, uint32_t k, uint64_t count, uint64_t n, uint64_t now_ms)
{
    if (k < j->ends_next || k - j->ends_next >= ENDS_AHEAD) {
        stoker_error("job '%s': %llu items of epoch %u trained while its epoch %u is the oldest "
                     "not ended (not counted)",
                     j->job, (unsigned long long)count, k, j->ends_next);
        return;
    }
    j->ends_count[k % ENDS_AHEAD] += count;
    while (j->ends_count[j->ends_next % ENDS_AHEAD] >= n) {
        j->ends_count[j->ends_next % ENDS_AHEAD] = 0;
        end_event(j, j->ends_next++, n, now_ms);
    }
}

void
epoch_job_starts(broker *j, uint32_t first, uint64_t n, uint64_t now_ms)
{
    // Its consumers count epoch ends from the first: those before its first ended for it too.
    for (uint32_t k = 0; k < first; k++)
        end_event(j, k, n, now_ms);
    j->ends_next = first;
    memset(j->ends_count, 0, sizeof(j->ends_count));
}

int
epochs_remake_accepted(const epochs *e, uint32_t k, remake *r)
{
    if (k < e->lo || k >= e->opened)
        return STOKER_OK;
    const epoch *ep = &e->win[k % WINDOW];
    uint8_t *out = calloc((e->n + 7) / 8, 1); // handed out, not accepted (yet)
    if (out == NULL)
        return STOKER_NOMEM;
    for (uint64_t i = 0; i < ep->n_returned; i++)
        out[ep->returned[i] >> 3] |= (uint8_t)(1u << (ep->returned[i] & 7));
    for (uint32_t h = 0; h < e->n_held; h++) {
        const held *x = &e->held[h];
        for (uint32_t j = x->done; !x->remade && j < x->n && EPOCH_OF(x->items[j]) == k; j++) {
            uint32_t i = (uint32_t)EPOCH_INDEX(x->items[j]);
            out[i >> 3] |= (uint8_t)(1u << (i & 7));
        }
    }
    int rv = STOKER_OK;
    for (uint64_t pos = 0; pos < ep->cursor && rv == STOKER_OK; pos++) {
        uint32_t i = ep->order[pos];
        if (!((out[i >> 3] >> (i & 7)) & 1))
            rv = remake_add(r, i);
    }
    free(out);
    return rv;
}
