// Epochs over a dataset (see epoch.h). At most two epochs are open at once: the oldest
// not yet acknowledged in full (lo) and, unless strict, the next one, whose shards go out once
// every item of lo was handed out, so producers never idle at an epoch's end. The work runs
// under the broker's lock on every push and ack, so it keeps no state per item at a place the
// permutation chose: a shard is a run of the permutation copied into its producer's own list, a
// push must name that list's next items (compared in order), and an ack counts its lease's
// items (each was accepted once, and a lease is acknowledged once). Each epoch's permutation
// (Fisher-Yates from the seed and the epoch number) is drawn ahead, by a thread outside the
// lock, while the epoch before is made. Items handed back after a loss go out first. A
// producer holds up to two shards: the one its pushes are filling and the next, asked for
// while the first one's last pushes are in flight (so it never idles at a shard's end); a
// shard leaves its list once pushed in full, and each push names its shard's id.
// It may use the core and push.c (revive).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "epoch.h"
#include "drawer.h"
#include "epoch_impl.h"
#include "internal.h"
#include "remake.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/rng.h"

// Where this broker's shard ids start: a random point, so that a restarted broker's ids never
// meet the ones the broker before it handed out. Producers come back from a restart still
// naming that broker's shards: a push of one must be refused as another broker's (it is not
// one of ours), and a producer that dropped one of them must not take a new shard of the same
// id for the one it dropped (it would drop that too, and the broker would wait for its items
// for ever). 30 random bits above a 32-bit count: no id is 0, none wraps.
static uint64_t
shard_ids_start(void)
{
    return ((stoker_random_u64() >> 34) << 32) + 1;
}

static void
epoch_fini(epoch *ep)
{
    free(ep->order);
    free(ep->returned);
    memset(ep, 0, sizeof(*ep));
}

// Starts drawing epoch k's permutation ahead (net/drawer.c), unless no epoch k will be made.
// Without memory or a thread nothing is started: epoch_open then draws it itself.
static void
draw_ahead(epochs *e, uint32_t k)
{
    if (e->next == NULL || (e->limit > 0 && k >= e->limit))
        return;
    uint32_t *order = e->spare_order != NULL ? e->spare_order : malloc(e->n * sizeof(*order));
    if (order == NULL)
        return;
    if (drawer_start(e->next, order, e->n, e->seed, k) == 0) {
        e->spare_order = NULL;
    } else if (order != e->spare_order) {
        free(order);
    }
}

// Opens epoch k in its window slot, with its permutation drawn ahead when it was, and starts
// drawing the next one.
static int
epoch_open(epochs *e, uint32_t k)
{
    epoch *ep = &e->win[k % WINDOW];
    epoch_fini(ep);
    ep->number = k;
    ep->order = e->next != NULL ? drawer_take(e->next, k) : NULL;
    if (ep->order == NULL && (ep->order = malloc(e->n * sizeof(*ep->order))) != NULL)
        draw_order(ep->order, e->n, e->seed, k);
    if (ep->order == NULL) {
        epoch_fini(ep);
        return STOKER_NOMEM;
    }
    draw_ahead(e, k + 1);
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
    e->first_shard = e->next_shard = shard_ids_start();
    e->next = drawer_create();
    draw_ahead(e, 0);
    return e;
}

void
epochs_destroy(epochs *e)
{
    if (e == NULL)
        return;
    drawer_destroy(e->next);
    for (uint32_t w = 0; w < WINDOW; w++)
        epoch_fini(&e->win[w]);
    for (uint32_t h = 0; h < e->n_held; h++)
        free(e->held[h].items);
    free(e->held);
    free(e->spare_order);
    free(e->spare_items);
    free(e);
}

// The open epoch an item belongs to, or NULL (an epoch already done, or not open yet).
static epoch *
item_epoch(epochs *e, uint64_t item)
{
    uint32_t k = EPOCH_OF(item);
    if (k < e->lo || k >= e->opened || EPOCH_INDEX(item) >= e->n)
        return NULL;
    return &e->win[k % WINDOW];
}

// Shard `shard` of producer producer_id, or with shard 0 its oldest (the one its pushes fill);
// NULL when it holds no such shard.
static held *
find_held(epochs *e, uint32_t producer_id, uint64_t shard)
{
    held *found = NULL;
    for (uint32_t h = 0; h < e->n_held; h++) {
        held *x = &e->held[h];
        if (x->producer_id != producer_id)
            continue;
        if (shard != 0 ? x->id == shard : found == NULL || x->id < found->id)
            found = x;
    }
    return found;
}

// How many shards producer producer_id holds.
static uint32_t
count_held(const epochs *e, uint32_t producer_id)
{
    uint32_t count = 0;
    for (uint32_t h = 0; h < e->n_held; h++)
        count += e->held[h].producer_id == producer_id;
    return count;
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

// Appends the unmade rest of h to its epoch's items to hand out first (a remade shard's: to its
// jobs' sets); returns how many. Returns 0 without memory: those items are then lost for the
// epoch, which therefore never ends; the broker logs it (an epoch ends only when every item was
// acknowledged).
static uint64_t
hand_back(broker *b, const held *h)
{
    epochs *e = b->epochs;
    uint64_t back = h->n - h->done;
    if (back == 0)
        return 0;
    if (h->remade) {
        epoch_hand_back_remade(b, h);
        return back;
    }
    epoch *ep = item_epoch(e, h->items[h->done]);
    if (ep == NULL)
        return 0; // cannot happen: an epoch ends only when all of its items were accepted
    if (ep->n_returned + back > ep->cap_returned) {
        uint64_t cap = ep->cap_returned * 2 > ep->n_returned + back ? ep->cap_returned * 2
                                                                    : ep->n_returned + back;
        uint32_t *r = realloc(ep->returned, cap * sizeof(*r));
        if (r == NULL) {
            stoker_error("broker out of memory handing back %llu items of epoch %u: that "
                         "epoch cannot end",
                         (unsigned long long)back, ep->number);
            return 0;
        }
        ep->returned = r;
        ep->cap_returned = cap;
    }
    for (uint32_t j = h->done; j < h->n; j++)
        ep->returned[ep->n_returned++] = (uint32_t)EPOCH_INDEX(h->items[j]);
    return back;
}

// Removes shard h of producer p from the list, its unmade rest handed back first (none when
// it was pushed in full), and keeps its item list for the next shard.
static void
drop_held(broker *b, producer *p, held *h, const char *why)
{
    epochs *e = b->epochs;
    uint64_t back = hand_back(b, h);
    uint64_t id = h->id;
    if (e->spare_items == NULL)
        e->spare_items = h->items;
    else
        free(h->items);
    *h = e->held[--e->n_held];
    p->items_held = p->items_held > back ? p->items_held - back : 0;
    e->reassigned += back;
    if (back > 0)
        stoker_info("shard-returned: %llu items of producer %u '%s' (shard %llu) go to others "
                    "(%s)",
                    (unsigned long long)back, p->id, p->name, (unsigned long long)id, why);
}

void
epochs_release(broker *b, producer *p, const char *why)
{
    epochs *e = b->epochs;
    held *h;
    while (e != NULL && (h = find_held(e, p->id, 0)) != NULL)
        drop_held(b, p, h, why);
    p->items_held = 0;
}

// Whether epoch ep has items to hand out.
static int
has_work(const epochs *e, const epoch *ep)
{
    return ep->n_returned > 0 || ep->cursor < e->n;
}

// Whether the next epoch may open now: within the limit, at most two open (one when strict),
// one more when a group asked (epochs_open_early).
static int
may_open(const epochs *e)
{
    uint32_t open = e->opened - e->lo, allowed = (e->strict ? 1 : 2) + (e->early ? 1 : 0);
    return (e->limit == 0 || e->opened < e->limit) && open < allowed;
}

// The open epoch to cut the next shard from, opening one when allowed; NULL when none.
static epoch *
next_work(epochs *e, int *nomem)
{
    for (uint32_t k = e->lo; k < e->opened; k++) {
        if (has_work(e, &e->win[k % WINDOW]))
            return &e->win[k % WINDOW];
    }
    if (!may_open(e))
        return NULL;
    if (epoch_open(e, e->opened) != STOKER_OK) {
        *nomem = 1;
        return NULL;
    }
    stoker_info("epoch-started: epoch %u of %llu items%s", e->opened, (unsigned long long)e->n,
                e->early ? " (early: a group's last examples of the one before ride with it)" : "");
    e->early = 0;
    return &e->win[e->opened++ % WINDOW];
}

// A new, empty shard for producer producer_id with room for cap items (every shard has the
// same), or NULL without memory.
static held *
held_add(epochs *e, uint32_t producer_id, uint32_t cap)
{
    if (e->n_held == e->cap_held) {
        uint32_t ncap = e->cap_held ? e->cap_held * 2 : 8;
        held *nh = realloc(e->held, ncap * sizeof(*nh));
        if (nh == NULL)
            return NULL;
        e->held = nh;
        e->cap_held = ncap;
    }
    uint64_t *items = e->spare_items != NULL ? e->spare_items : malloc(cap * sizeof(*items));
    e->spare_items = NULL;
    if (items == NULL)
        return NULL;
    held *h = &e->held[e->n_held++];
    *h = (held){.producer_id = producer_id, .id = e->next_shard++, .items = items};
    return h;
}

// Hands shard h, just cut, to p.
static void
send_shard(broker *b, producer *p, held *h, void *token, broker_outbox *out)
{
    p->items_held += h->n;
    stoker_debug("shard-out: shard %llu, %u items of epoch %u%s, to producer %u '%s', which holds "
                 "%u",
                 (unsigned long long)h->id, h->n, EPOCH_OF(h->items[0]),
                 h->remade ? " made again for some jobs" : "", p->id, p->name,
                 count_held(b->epochs, p->id));
    stoker_reply rep = {.code = STOKER_OK,
                        .n_items = h->n,
                        .items = h->items,
                        .dataset_seed = b->epochs->seed,
                        .shard = h->id};
    send_reply(b, out, token, &rep);
}

int
epochs_handle_shard(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
                    broker_outbox *out)
{
    epochs *e = b->epochs;
    producer *p = find_producer(b, req->session);
    if (e == NULL) {
        send_code(b, out, token, STOKER_INVALID, "this broker serves streams, not a dataset");
        return 0;
    }
    if (p == NULL || p->status == STOKER_PRODUCER_FINISHED) {
        send_code(b, out, token, STOKER_UNKNOWN_PEER, "unknown session: say hello first");
        return 0;
    }
    revive(b, p, pipe, now_ms, "asked for a shard");
    // Its shards pushed in full left the list already; one asking while it still holds two
    // gave up the older one (a producer asks ahead only while one shard's pushes are in flight).
    if (count_held(e, p->id) >= HELD_MAX)
        drop_held(b, p, find_held(e, p->id, 0), "asked for a third shard");
    int nomem = 0;
    epoch *ep = next_work(e, &nomem);
    if (ep == NULL) {
        if (nomem)
            send_code(b, out, token, STOKER_RETRY, "broker out of memory opening an epoch");
        else if (e->limit > 0 && e->lo >= e->limit && !epoch_copies_owed(b))
            send_code(b, out, token, STOKER_END_OF_DATA, "all %u epochs were made", e->limit);
        else
            send_code(b, out, token, STOKER_RETRY,
                      "no items to hand out now (epoch %u waits for its last items)", e->lo);
        return 0;
    }
    uint32_t want = epochs_shard_items(e);
    held *h = held_add(e, p->id, want);
    if (h == NULL) {
        send_code(b, out, token, STOKER_RETRY, "broker out of memory cutting a shard");
        return 0;
    }
    while (h->n < want && ep->n_returned > 0)
        h->items[h->n++] = EPOCH_ITEM(ep->number, ep->returned[--ep->n_returned]);
    uint64_t run = e->n - ep->cursor < want - h->n ? e->n - ep->cursor : want - h->n;
    const uint32_t *order = ep->order + ep->cursor;
    for (uint64_t j = 0; j < run; j++)
        h->items[h->n++] = EPOCH_ITEM(ep->number, order[j]);
    ep->cursor += run;
    send_shard(b, p, h, token, out);
    return 0;
}

int
epochs_give_remade(broker *b, producer *p, uint32_t number, const uint32_t *index, uint32_t n,
                   uint32_t targets, void *token, broker_outbox *out)
{
    epochs *e = b->epochs;
    if (count_held(e, p->id) >= HELD_MAX)
        drop_held(b, p, find_held(e, p->id, 0), "asked for a third shard");
    held *h = n <= epochs_shard_items(e) ? held_add(e, p->id, epochs_shard_items(e)) : NULL;
    if (h == NULL)
        return STOKER_NOMEM;
    for (h->n = 0; h->n < n; h->n++)
        h->items[h->n] = EPOCH_ITEM(number, index[h->n]);
    h->remade = 1;
    h->targets = targets;
    send_shard(b, p, h, token, out);
    return STOKER_OK;
}

int
epochs_push_remade(const broker *b, const producer *p, uint64_t shard, uint32_t *targets)
{
    const held *h = b->epochs != NULL ? find_held(b->epochs, p->id, shard) : NULL;
    if (h == NULL || !h->remade)
        return 0;
    *targets = h->targets;
    return 1;
}

void
epochs_forget_slot(broker *b, uint32_t slot)
{
    for (uint32_t h = 0; b->epochs != NULL && h < b->epochs->n_held; h++)
        b->epochs->held[h].targets &= ~(1u << slot);
}

void
epochs_job_acked(broker *job, const queue_range *r, uint64_t now_ms)
{
    const broker *l = job->lead != NULL ? job->lead : job;
    const uint64_t *items = queue_range_items(r);
    if (l->epochs != NULL && items != NULL)
        epoch_job_trained(job, EPOCH_OF(items[0]), r->count, l->epochs->n, now_ms);
}

void
epochs_job_starts(broker *job, uint32_t first, uint64_t now_ms)
{
    const broker *l = job->lead != NULL ? job->lead : job;
    if (l->epochs != NULL)
        epoch_job_starts(job, first, l->epochs->n, now_ms);
}

uint64_t
epochs_items(const epochs *e)
{
    return e->n;
}

int
epochs_strict(const epochs *e)
{
    return e->strict;
}

uint32_t
epochs_shard_items(const epochs *e)
{
    return e->shard_items < STOKER_SHARD_MAX_ITEMS ? e->shard_items : STOKER_SHARD_MAX_ITEMS;
}

// Whether shard id was cut by this broker (0, a push's "my oldest", names none).
static int
our_shard(const epochs *e, uint64_t id)
{
    return id >= e->first_shard && id < e->next_shard;
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
    uint32_t m = req->n_items - skip;
    const uint64_t *items = req->items + skip;
    held *h = find_held(e, p->id, req->shard);
    // The usual case: the shard's next m items, in the order they were handed out.
    if (h != NULL && h->n - h->done >= m &&
        memcmp(items, h->items + h->done, m * sizeof(*items)) == 0)
        return STOKER_OK;
    for (uint32_t j = 0; j < m; j++) {
        uint32_t at = h != NULL ? h->done + j : 0;
        if (h != NULL && at < h->n && h->items[at] == items[j])
            continue;
        for (; h != NULL && at < h->n; at++) {
            if (h->items[at] == items[j])
                return stoker_errorf(err, err_len, STOKER_INVALID,
                                     "item %llu of epoch %u comes out of order in a push from "
                                     "'%s': a shard's items are pushed in the order the broker "
                                     "handed them out",
                                     (unsigned long long)EPOCH_INDEX(items[j]), EPOCH_OF(items[j]),
                                     p->name);
        }
        // The producer drops the shard its push named: what it still holds of it goes to
        // others (nothing, usually: it was handed back when the producer was taken for lost).
        e->revoked++;
        if (h != NULL)
            drop_held(b, p, h, "its push was refused");
        if (h == NULL && req->shard != 0 && !our_shard(e, req->shard))
            return stoker_errorf(
                err, err_len, STOKER_SHARD_REVOKED,
                "item %llu of epoch %u belongs to another broker's epochs: shard %llu was "
                "handed to producer '%s' by the broker before this one (it restarted, and this "
                "broker makes its epochs anew from epoch 0): drop the shard and ask for a new "
                "one",
                (unsigned long long)EPOCH_INDEX(items[j]), EPOCH_OF(items[j]),
                (unsigned long long)req->shard, p->name);
        return stoker_errorf(err, err_len, STOKER_SHARD_REVOKED,
                             "item %llu of epoch %u is not producer '%s''s any more (it was "
                             "taken for lost and its shard went to others): drop the shard "
                             "and ask for a new one",
                             (unsigned long long)EPOCH_INDEX(items[j]), EPOCH_OF(items[j]),
                             p->name);
    }
    return STOKER_OK; // not reached: the memcmp above matched
}

void
epochs_accepted(broker *b, producer *p, const stoker_request *req, uint32_t skip)
{
    epochs *e = b->epochs;
    held *h = find_held(e, p->id, req->shard);
    uint32_t n = req->n_items - skip;
    p->items_held = p->items_held > n ? p->items_held - n : 0;
    if (h == NULL)
        return;
    h->done = h->n - h->done > n ? h->done + n : h->n;
    if (h->done == h->n)
        drop_held(b, p, h, "pushed in full"); // nothing to hand back
}

static void try_end(broker *job, uint64_t now_ms);

void
epochs_acked(broker *b, const queue_range *r, uint64_t now_ms)
{
    epochs *e = b->epochs;
    const uint64_t *items = queue_range_items(r);
    if (e == NULL || items == NULL)
        return;
    // A range is part of one push, whose items are the next ones of one shard (epochs_check_push),
    // so of one epoch, each accepted once and leased once at a time; a lease is acknowledged
    // once (a second ack of it is refused before this): its items count without a look at each.
    epoch *ep = item_epoch(e, items[0]);
    if (ep == NULL)
        return;
    ep->acked += r->count;
    if (ep->acked > e->n) {
        stoker_error("epoch %u: %llu items acknowledged of %llu (a broken invariant: an item "
                     "acknowledged twice)",
                     ep->number, (unsigned long long)ep->acked, (unsigned long long)e->n);
        ep->acked = e->n;
    }
    try_end(b, now_ms);
}

static void
try_end(broker *job, uint64_t now_ms)
{
    broker *b = job->lead != NULL ? job->lead : job; // the epochs are the lead's
    epochs *e = b->epochs;
    // Epochs end in order: a later one complete before an earlier one waits for it. (Each job
    // hears of an end when it trained every item of it, its copies made again included:
    // epochs_job_acked.)
    while (e->lo < e->opened && e->win[e->lo % WINDOW].acked == e->n) {
        stoker_info("epoch-end: epoch %u, all %llu items acknowledged", e->lo,
                    (unsigned long long)e->n);
        epoch *done = &e->win[e->lo % WINDOW];
        if (e->spare_order == NULL) {
            e->spare_order = done->order;
            done->order = NULL;
        }
        epoch_fini(done);
        e->lo++;
        e->early = 0; // it ended: the next one opens by the rule
    }
}

int
epochs_waiting(const broker *b)
{
    const epochs *e = b->epochs;
    if (e == NULL || e->n_held > 0)
        return 0; // a stream, or items with producers, not yet pushed
    const broker *l = b->lead != NULL ? b->lead : b;
    for (uint32_t i = 0; i <= l->n_followers; i++) {
        const broker *j = i == 0 ? l : l->followers[i - 1];
        for (uint32_t k = 0; k < REMAKE_SETS; k++)
            if (j->remakes[k] != NULL && j->remakes[k]->pending_count > 0)
                return 0; // items to make again for a job
    }
    for (uint32_t k = e->lo; k < e->opened; k++) {
        if (has_work(e, &e->win[k % WINDOW]))
            return 0;
    }
    return !may_open(e);
}

int
epochs_open_early(broker *b)
{
    epochs *e = b->epochs;
    if (e == NULL || (e->limit > 0 && e->opened >= e->limit))
        return 0;
    if (!e->early)
        stoker_info("epoch-early: epoch %u opens before epoch %u is acknowledged in full: a "
                    "group's last examples of it are fewer than its ranks",
                    e->opened, e->lo);
    e->early = 1;
    return 1;
}

uint32_t
epochs_next_unopened(const epochs *e)
{
    return e->limit > 0 && e->opened >= e->limit ? UINT32_MAX : e->opened;
}

uint32_t
epochs_newest_open(const epochs *e)
{
    return e->opened > e->lo ? e->opened - 1 : UINT32_MAX;
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
    st->epochs_overlap = !e->strict;
    st->epoch_acknowledged = e->lo < e->opened ? e->win[e->lo % WINDOW].acked : 0;
}
