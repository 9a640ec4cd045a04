// The broker's batches planned ahead (ahead.h). Sorting a window of up to 2,048 sequences afresh
// for every batch with length buckets (budget.c) cost a quarter of the tokens/s a free producer
// gives at batch 32 (bench.py --only buckets); so one sort plans up to AHEAD_MAX batches, each
// the best run of what the ones before left, and the next pulls with the same batching take them
// in turn while every queue changed by appends only (queue.changes) since the batch before was
// leased. Anything else (another consumer's take, a put-back, a producer gone or back) or a pick
// said trained meanwhile drops them, and the next pull plans afresh. A pick is still taken by
// its seq (lease.c): a stale plan could only come short, never hand an example out twice.
// It uses the core, queue.c and trained.c; budget.c and lease.c call it.
#include <stdlib.h>
#include <string.h>

#include "ahead.h"
#include "internal.h"

// One queue as the last lease left it.
typedef struct ahead_queue {
    uint32_t id;
    uint64_t session, changes;
} ahead_queue;

struct budget_ahead {
    uint32_t max, cap;
    stoker_batching batching;
    budget_plan plans[AHEAD_MAX];
    uint32_t next, n;  // plans[next .. n) wait
    int taken;         // queues holds every queue as the last lease left it
    uint32_t n_queues; // b->n_producers then
    ahead_queue *queues;
    uint32_t cap_queues;
};

static void
drop_plans(budget_ahead *a)
{
    for (uint32_t i = a->next; i < a->n; i++) {
        free(a->plans[i].picks);
        a->plans[i] = (budget_plan){0};
    }
    a->next = a->n = 0;
    a->taken = 0;
}

void
ahead_drop(broker *b)
{
    if (b->ahead != NULL)
        drop_plans(b->ahead);
}

void
ahead_free(broker *b)
{
    if (b->ahead == NULL)
        return;
    drop_plans(b->ahead);
    free(b->ahead->queues);
    free(b->ahead);
    b->ahead = NULL;
}

// Whether every queue is as the last lease left it, but for appends.
static int
queues_hold(const broker *b, const budget_ahead *a)
{
    if (!a->taken || a->n_queues != b->n_producers)
        return 0;
    for (uint32_t i = 0; i < b->n_producers; i++) {
        const producer *p = b->producers[i];
        const ahead_queue *q = &a->queues[i];
        if (q->id != p->id || q->session != p->session || q->changes != p->q.changes)
            return 0;
    }
    return 1;
}

int
ahead_next(broker *b, const stoker_batching *batching, uint32_t max, uint32_t cap,
           budget_plan *plan)
{
    budget_ahead *a = b->ahead;
    if (a == NULL || a->next == a->n)
        return -1;
    // The batching is four integers, no padding.
    int ok = a->max == max && a->cap == cap &&
             memcmp(&a->batching, batching, sizeof(*batching)) == 0 && queues_hold(b, a);
    budget_plan *next = &a->plans[a->next];
    for (uint32_t i = 0; ok && i < next->n; i++)
        ok = trained_untrained(b, b->producers[next->picks[i].producer], NULL, next->picks[i].seq);
    if (!ok) {
        drop_plans(a);
        return -1;
    }
    *plan = *next;
    *next = (budget_plan){0};
    a->next++;
    a->taken = 0;
    return 0;
}

void
ahead_keep(broker *b, budget_plan *plans, uint32_t n, const stoker_batching *batching, uint32_t max,
           uint32_t cap)
{
    if (b->ahead != NULL)
        drop_plans(b->ahead);
    else if (n > 1)
        b->ahead = calloc(1, sizeof(*b->ahead));
    budget_ahead *a = b->ahead;
    for (uint32_t i = 1; i < n && a == NULL; i++)
        free(plans[i].picks);
    if (a == NULL)
        return;
    a->max = max, a->cap = cap, a->batching = *batching;
    for (uint32_t i = 1; i < n && a->n < AHEAD_MAX; i++)
        a->plans[a->n++] = plans[i];
}

void
ahead_taken(broker *b)
{
    budget_ahead *a = b->ahead;
    if (a == NULL || a->next == a->n)
        return;
    if (a->cap_queues < b->n_producers) {
        ahead_queue *q = realloc(a->queues, b->n_producers * sizeof(*q));
        if (q == NULL) {
            drop_plans(a);
            return;
        }
        a->queues = q;
        a->cap_queues = b->n_producers;
    }
    for (uint32_t i = 0; i < b->n_producers; i++) {
        const producer *p = b->producers[i];
        a->queues[i] = (ahead_queue){.id = p->id, .session = p->session, .changes = p->q.changes};
    }
    a->n_queues = b->n_producers;
    a->taken = 1;
}
