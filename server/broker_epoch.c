// Epochs over a dataset (see broker_epoch.h). At most two epochs are open at once: the oldest
// not yet acknowledged in full (lo) and, unless strict, the next one, whose shards go out once
// every item of lo was handed out, so producers never idle at an epoch's end. Each open epoch
// keeps one word per item (its state and, while assigned, its producer: one memory access per
// item on the push and ack paths); shards are cut from the permutation in order,
// except that items handed back after a loss go out first.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker_epoch.h"
#include "broker_internal.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/rng.h"

enum { ITEM_NEW = 0, ITEM_ASSIGNED, ITEM_ACCEPTED, ITEM_ACKED };
// An item's word: its state in the low 2 bits, its producer's id above (ids past 2^30 wrap; two
// producers 2^30 sessions apart would share a word, which no broker lives to see).
#define SLOT(state, owner) ((uint32_t)(state) | ((uint32_t)(owner) << 2))

typedef struct epoch {
    uint32_t number;
    uint32_t *order;     // (n,) the permutation
    uint32_t *slot;      // (n,) SLOT(state, owner): ITEM_* and, while ASSIGNED, the producer
    uint32_t *returned;  // items handed back, handed out before the order's rest
    uint64_t n_returned; // (at most n)
    uint64_t cursor;     // next position in order
    uint64_t acked;
} epoch;

struct epochs {
    uint64_t n;
    uint64_t seed;
    uint32_t shard_items;
    uint32_t limit; // epochs to make, 0: without end
    int strict;
    int has_fingerprint;
    uint64_t fingerprint;
    epoch win[2]; // epoch k at win[k % 2] while lo <= k < opened
    uint32_t lo, opened;
    uint64_t reassigned, revoked;
};

static void
epoch_fini(epoch *ep)
{
    free(ep->order);
    free(ep->slot);
    free(ep->returned);
    memset(ep, 0, sizeof(*ep));
}

// Opens epoch k in its window slot: its permutation (Fisher-Yates from (seed, k)).
static int
epoch_open(epochs *e, uint32_t k)
{
    epoch *ep = &e->win[k % 2];
    epoch_fini(ep);
    ep->number = k;
    ep->order = malloc(e->n * sizeof(*ep->order));
    ep->slot = calloc(e->n, sizeof(*ep->slot));
    ep->returned = malloc(e->n * sizeof(*ep->returned));
    if (ep->order == NULL || ep->slot == NULL || ep->returned == NULL) {
        epoch_fini(ep);
        return STOKER_NOMEM;
    }
    for (uint64_t i = 0; i < e->n; i++)
        ep->order[i] = (uint32_t)i;
    stoker_rng rng;
    stoker_rng_seed(&rng, e->seed ^ ((uint64_t)k * 0x9e3779b97f4a7c15ull));
    for (uint64_t i = e->n - 1; i > 0; i--) {
        uint64_t j = stoker_rng_u64(&rng) % (i + 1);
        uint32_t t = ep->order[i];
        ep->order[i] = ep->order[j];
        ep->order[j] = t;
    }
    return STOKER_OK;
}

epochs *
epochs_create(uint64_t dataset_size, uint64_t seed, uint32_t shard_items, uint32_t limit,
              int strict)
{
    if (dataset_size == 0 || dataset_size > UINT32_MAX || shard_items == 0)
        return NULL;
    epochs *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return NULL;
    e->n = dataset_size;
    e->seed = seed;
    e->shard_items = shard_items;
    e->limit = limit;
    e->strict = strict;
    return e;
}

void
epochs_destroy(epochs *e)
{
    if (e == NULL)
        return;
    epoch_fini(&e->win[0]);
    epoch_fini(&e->win[1]);
    free(e);
}

// The open epoch an item belongs to, or NULL (an epoch already done, or not open yet).
static epoch *
item_epoch(epochs *e, uint64_t item)
{
    uint32_t k = EPOCH_OF(item);
    if (k < e->lo || k >= e->opened || EPOCH_INDEX(item) >= e->n)
        return NULL;
    return &e->win[k % 2];
}

// Items of a push or a lease sit at random places of their epoch (a permutation's order): ask
// for all their words first, so the cache misses overlap instead of coming one by one.
static void
prefetch_items(epochs *e, const uint64_t *items, uint32_t n)
{
    for (uint32_t j = 0; j < n; j++) {
        epoch *ep = item_epoch(e, items[j]);
        if (ep != NULL)
            __builtin_prefetch(&ep->slot[EPOCH_INDEX(items[j])], 1);
    }
}

int
epochs_check_hello(broker *b, const stoker_request *req, char *err, size_t err_len)
{
    epochs *e = b->epochs;
    if (req->dataset_size == 0)
        return stoker_errorf(err, err_len, STOKER_DATASET_MISMATCH,
                             "dataset mismatch: producer '%s' serves a stream, the broker a "
                             "dataset of %llu items (start it with --items)",
                             req->name, (unsigned long long)e->n);
    if (req->dataset_size != e->n)
        return stoker_errorf(err, err_len, STOKER_DATASET_MISMATCH,
                             "dataset mismatch: producer '%s' serves %llu items, the broker "
                             "%llu: every producer must see the same dataset",
                             req->name, (unsigned long long)req->dataset_size,
                             (unsigned long long)e->n);
    if (!e->has_fingerprint) {
        e->has_fingerprint = 1;
        e->fingerprint = req->dataset_fingerprint;
    } else if (req->dataset_fingerprint != e->fingerprint) {
        return stoker_errorf(err, err_len, STOKER_DATASET_MISMATCH,
                             "dataset mismatch: producer '%s' lists other items (fingerprint "
                             "%016llx, the broker's %016llx): every producer must see the same "
                             "files in the same order",
                             req->name, (unsigned long long)req->dataset_fingerprint,
                             (unsigned long long)e->fingerprint);
    }
    return STOKER_OK;
}

void
epochs_release(broker *b, producer *p, const char *why)
{
    epochs *e = b->epochs;
    if (e == NULL || p->items_held == 0)
        return;
    uint64_t back = 0;
    for (uint32_t k = e->lo; k < e->opened; k++) {
        epoch *ep = &e->win[k % 2];
        for (uint64_t i = 0; i < e->n; i++) {
            if (ep->slot[i] == SLOT(ITEM_ASSIGNED, p->id)) {
                ep->slot[i] = ITEM_NEW;
                ep->returned[ep->n_returned++] = (uint32_t)i;
                back++;
            }
        }
    }
    p->items_held = 0;
    e->reassigned += back;
    if (back > 0)
        stoker_info("shard-returned: %llu items of producer %u '%s' go to others (%s)",
                    (unsigned long long)back, p->id, p->name, why);
}

// Whether epoch ep has items to hand out.
static int
has_work(const epochs *e, const epoch *ep)
{
    return ep->n_returned > 0 || ep->cursor < e->n;
}

// The open epoch to cut the next shard from, opening one when allowed; NULL when none.
static epoch *
next_work(epochs *e, int *nomem)
{
    for (uint32_t k = e->lo; k < e->opened; k++) {
        if (has_work(e, &e->win[k % 2]))
            return &e->win[k % 2];
    }
    int may_open = (e->limit == 0 || e->opened < e->limit) && e->opened - e->lo < 2 &&
                   (!e->strict || e->opened == e->lo);
    if (!may_open)
        return NULL;
    if (epoch_open(e, e->opened) != STOKER_OK) {
        *nomem = 1;
        return NULL;
    }
    stoker_info("epoch-started: epoch %u of %llu items", e->opened, (unsigned long long)e->n);
    return &e->win[e->opened++ % 2];
}

void
epochs_handle_shard(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
                    broker_outbox *out)
{
    epochs *e = b->epochs;
    producer *p = find_producer(b, req->session);
    stoker_request_free(req);
    if (e == NULL) {
        send_code(b, out, token, STOKER_INVALID, "this broker serves streams, not a dataset");
        return;
    }
    if (p == NULL || p->status == STOKER_PRODUCER_FINISHED) {
        send_code(b, out, token, STOKER_UNKNOWN_PEER, "unknown session: say hello first");
        return;
    }
    revive(b, p, pipe, now_ms, "asked for a shard");
    epochs_release(b, p, "asked for a new shard");
    int nomem = 0;
    epoch *ep = next_work(e, &nomem);
    if (ep == NULL) {
        if (nomem)
            send_code(b, out, token, STOKER_RETRY, "broker out of memory opening an epoch");
        else if (e->limit > 0 && e->lo >= e->limit)
            send_code(b, out, token, STOKER_END_OF_DATA, "all %u epochs were made", e->limit);
        else
            send_code(b, out, token, STOKER_RETRY,
                      "no items to hand out now (epoch %u waits for its last items)", e->lo);
        return;
    }
    uint32_t n = 0;
    uint32_t want =
        e->shard_items < STOKER_SHARD_MAX_ITEMS ? e->shard_items : STOKER_SHARD_MAX_ITEMS;
    uint64_t *items = malloc(want * sizeof(*items));
    if (items == NULL) {
        send_code(b, out, token, STOKER_RETRY, "broker out of memory cutting a shard");
        return;
    }
    while (n < want && has_work(e, ep)) {
        uint32_t i = ep->n_returned > 0 ? ep->returned[--ep->n_returned] : ep->order[ep->cursor++];
        ep->slot[i] = SLOT(ITEM_ASSIGNED, p->id);
        items[n++] = EPOCH_ITEM(ep->number, i);
    }
    p->items_held += n;
    stoker_reply rep = {.code = STOKER_OK, .n_items = n, .items = items, .dataset_seed = e->seed};
    send_reply(b, out, token, &rep);
    free(items);
}

int
epochs_check_push(broker *b, producer *p, const stoker_request *req, uint32_t skip, char *err,
                  size_t err_len)
{
    epochs *e = b->epochs;
    if (req->n_items != req->chunk.count)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "push of %u examples from '%s' names %u items: a dataset's "
                             "examples each carry their item",
                             req->chunk.count, p->name, req->n_items);
    prefetch_items(e, req->items + skip, req->n_items - skip);
    for (uint32_t j = skip; j < req->n_items; j++) {
        epoch *ep = item_epoch(e, req->items[j]);
        uint64_t i = EPOCH_INDEX(req->items[j]);
        if (ep == NULL || ep->slot[i] != SLOT(ITEM_ASSIGNED, p->id)) {
            e->revoked++;
            epochs_release(b, p, "its push was refused");
            return stoker_errorf(err, err_len, STOKER_SHARD_REVOKED,
                                 "item %llu of epoch %u is not producer '%s''s any more (it was "
                                 "taken for lost and its shard went to others): drop the shard "
                                 "and ask for a new one",
                                 (unsigned long long)i, EPOCH_OF(req->items[j]), p->name);
        }
    }
    return STOKER_OK;
}

void
epochs_accepted(broker *b, producer *p, const stoker_request *req, uint32_t skip)
{
    epochs *e = b->epochs;
    for (uint32_t j = skip; j < req->n_items; j++) {
        epoch *ep = item_epoch(e, req->items[j]);
        if (ep != NULL)
            ep->slot[EPOCH_INDEX(req->items[j])] = ITEM_ACCEPTED;
    }
    uint32_t n = req->n_items - skip;
    p->items_held = p->items_held > n ? p->items_held - n : 0;
}

static void
epoch_end_event(broker *b, uint32_t k, uint64_t now_ms)
{
    stoker_event *ev = &b->events[b->n_events % EVENT_LOG];
    memset(ev, 0, sizeof(*ev));
    ev->index = ++b->n_events;
    ev->kind = STOKER_EVENT_EPOCH_END;
    ev->epoch = k;
    snprintf(ev->name, sizeof(ev->name), "epoch %u", k);
    ev->at_s = (double)(now_ms - b->start_ms) / 1000.0;
    snprintf(ev->reason, sizeof(ev->reason), "all %llu items acknowledged",
             (unsigned long long)b->epochs->n);
}

void
epochs_acked(broker *b, const queue_range *r, uint64_t now_ms)
{
    epochs *e = b->epochs;
    const uint64_t *items = queue_range_items(r);
    if (e == NULL || items == NULL)
        return;
    prefetch_items(e, items, r->count);
    for (uint32_t j = 0; j < r->count; j++) {
        epoch *ep = item_epoch(e, items[j]);
        uint64_t i = EPOCH_INDEX(items[j]);
        if (ep != NULL && ep->slot[i] == ITEM_ACCEPTED) {
            ep->slot[i] = ITEM_ACKED;
            ep->acked++;
        }
    }
    // Epochs end in order: a later one complete before an earlier one waits for it.
    while (e->lo < e->opened && e->win[e->lo % 2].acked == e->n) {
        stoker_info("epoch-end: epoch %u, all %llu items acknowledged", e->lo,
                    (unsigned long long)e->n);
        epoch_end_event(b, e->lo, now_ms);
        epoch_fini(&e->win[e->lo % 2]);
        e->lo++;
    }
}

void
epochs_report(const epochs *e, stoker_status *st)
{
    if (e == NULL)
        return;
    st->dataset_size = e->n;
    st->epochs_done = e->lo;
    st->epochs_limit = e->limit;
    st->items_reassigned = e->reassigned;
    st->pushes_revoked = e->revoked;
}
