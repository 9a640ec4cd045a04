// The broker's budget room: batches made by tokens for a consumer that asked for them in its
// hello (stoker/batching.h, docs/schema.md, "Batching by tokens"): a token budget, length buckets,
// packed rows. It plans a batch from what the queues hold (it takes nothing: lease.c takes
// the plan's examples into a lease) and says when a budget can be filled. It uses the core, queue.c
// and the trained room (a trainer's hello may have said some queued examples are trained).
#include <stdlib.h>

#include "budget.h"
#include "internal.h"
#include "stoker/batching.h"

// The examples a plan looks at: the oldest of every queue, interleaved (the round-robin order
// count batching takes them in), at most this many. Buckets find similar lengths among them.
#define WINDOW_MAX BUDGET_MAX_EXAMPLES
_Static_assert(WINDOW_MAX <= 0xffff, "bucket_key keeps a window index in 16 bits");

typedef struct candidate {
    uint32_t producer; // index into b->producers
    uint64_t seq, len;
    int taken;
} candidate;

void
budget_plan_free(budget_plan *plan)
{
    free(plan->picks);
    *plan = (budget_plan){0};
}

static int
add_pick(budget_plan *plan, const candidate *c)
{
    if (plan->n == plan->cap) {
        uint32_t cap = plan->cap ? 2 * plan->cap : 64;
        budget_pick *picks = realloc(plan->picks, cap * sizeof(*picks));
        if (picks == NULL)
            return -1;
        plan->picks = picks;
        plan->cap = cap;
    }
    plan->picks[plan->n++] = (budget_pick){.producer = c->producer, .seq = c->seq, .len = c->len};
    plan->tokens += c->len;
    if (c->len > plan->longest)
        plan->longest = c->len;
    return 0;
}

// Whether seq of p may be handed out (not trained already: a trainer's hello said so, after the
// broker before this one died; such examples are dropped once they reach their queue's head,
// lease.c).
static int
untrained(const broker *b, const producer *p, uint64_t seq)
{
    uint64_t next;
    return trained_none_from(b, p, seq) || !trained_has(&p->trained, seq, &next);
}

// The window: up to WINDOW_MAX examples, the i-th of every queue before the (i+1)-th of any,
// starting at the round-robin cursor. *n_out candidates into a new array (NULL: none or out of
// memory).
static candidate *
window(const broker *b, int field, uint32_t *n_out)
{
    *n_out = 0;
    uint64_t queued = b->c.queued < WINDOW_MAX ? b->c.queued : WINDOW_MAX;
    if (queued == 0 || b->n_producers == 0)
        return NULL;
    candidate *c = malloc(queued * sizeof(*c));
    queue_cursor *cur = malloc(b->n_producers * sizeof(*cur));
    uint8_t *open = malloc(b->n_producers);
    if (c == NULL || cur == NULL || open == NULL) {
        free(c);
        free(cur);
        free(open);
        return NULL;
    }
    uint32_t n = 0, left = 0;
    for (uint32_t i = 0; i < b->n_producers; i++) {
        queue_cursor_init(&b->producers[i]->q, &cur[i]);
        open[i] = b->producers[i]->q.examples > 0;
        left += open[i];
    }
    while (left > 0 && n < queued) {
        for (uint32_t k = 0; k < b->n_producers && n < queued; k++) {
            uint32_t i = (b->rr + k) % b->n_producers;
            if (!open[i])
                continue;
            candidate *x = &c[n];
            if (!queue_cursor_next(&cur[i], field, &x->seq, &x->len)) {
                open[i] = 0;
                left--;
                continue;
            }
            if (!untrained(b, b->producers[i], x->seq))
                continue;
            x->producer = i;
            x->taken = 0;
            n++;
        }
    }
    free(cur);
    free(open);
    *n_out = n;
    return c;
}

// Count batching with a token budget (and buckets without one): the padded cost of the plan
// with one more sequence of length len.
static uint64_t
padded_with(const budget_plan *plan, uint64_t len)
{
    uint64_t longest = len > plan->longest ? len : plan->longest;
    return (uint64_t)(plan->n + 1) * longest;
}

// Token budget in arrival order: sequences as they come while the padded batch fits.
static void
plan_budget(budget_plan *plan, candidate *c, uint32_t n, uint32_t max, uint64_t budget)
{
    for (uint32_t i = 0; i < n && plan->n < max; i++) {
        if (plan->n > 0 && padded_with(plan, c[i].len) > budget) {
            plan->full = 1;
            return;
        }
        if (add_pick(plan, &c[i]) != 0)
            return;
        if (plan->tokens >= budget) { // alone over the budget, or exactly at it
            plan->full = 1;
            return;
        }
    }
    plan->full = plan->n == max;
}

// A candidate's key for buckets: its distance in length from the anchor, then its age (index in
// the window, which is in arrival order), in one integer: smaller is nearer, then older.
static uint64_t
bucket_key(uint64_t len, uint64_t anchor, uint32_t index)
{
    uint64_t d = len > anchor ? len - anchor : anchor - len;
    if (d > (UINT64_C(1) << 47) - 1)
        d = (UINT64_C(1) << 47) - 1;
    return d << 16 | index;
}

static int
key_order(const void *pa, const void *pb)
{
    uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;
    return a < b ? -1 : a > b;
}

// Moves the k smallest of keys[0..n) to its front (quickselect: O(n) on average).
static void
select_smallest(uint64_t *keys, uint32_t n, uint32_t k)
{
    uint32_t lo = 0, hi = n; // the k-th smallest lies in [lo, hi)
    while (hi - lo > 1) {
        uint64_t pivot = keys[lo + (hi - lo) / 2];
        uint32_t i = lo, j = hi - 1;
        while (i <= j) {
            while (keys[i] < pivot)
                i++;
            while (keys[j] > pivot)
                j--;
            if (i <= j) {
                uint64_t t = keys[i];
                keys[i] = keys[j];
                keys[j] = t;
                i++;
                if (j == 0)
                    break;
                j--;
            }
        }
        if (k <= j)
            hi = j + 1;
        else if (k >= i)
            lo = i;
        else
            return;
    }
}

// Buckets: the oldest sequence and those nearest its length, within the count and the budget.
// Only the max - 1 nearest can be taken, so only they are sorted (the window may hold 8192).
static void
plan_buckets(budget_plan *plan, candidate *c, uint32_t n, uint32_t max, uint64_t budget)
{
    if (n == 0 || add_pick(plan, &c[0]) != 0)
        return;
    if (n > 1 && max > 1) {
        uint64_t *keys = malloc((n - 1) * sizeof(*keys));
        if (keys == NULL)
            return;
        for (uint32_t i = 1; i < n; i++)
            keys[i - 1] = bucket_key(c[i].len, c[0].len, i);
        uint32_t k = max - 1 < n - 1 ? max - 1 : n - 1;
        if (k < n - 1)
            select_smallest(keys, n - 1, k);
        qsort(keys, k, sizeof(*keys), key_order);
        for (uint32_t i = 0; i < k && plan->n < max; i++) {
            const candidate *x = &c[keys[i] & 0xffff];
            if (budget > 0 && padded_with(plan, x->len) > budget) {
                plan->full = 1;
                continue; // a shorter one further on may fit
            }
            if (add_pick(plan, x) != 0)
                break;
        }
        free(keys);
    }
    if (plan->n == max || (budget > 0 && plan->tokens >= budget))
        plan->full = 1;
}

// Packed rows being filled: the budget (rows x pack tokens), and with whole the rows begun and
// the tokens in the last one.
typedef struct packing {
    uint64_t pack, rows, budget, used_rows, in_row;
    int whole;
} packing;

static uint64_t
rows_for(const packing *k, uint64_t len)
{
    return len == 0 ? 1 : (len + k->pack - 1) / k->pack;
}

// The tokens the plan can still take in its gap: the last row's rest (whole), or the budget's.
static uint64_t
packing_gap(const packing *k, const budget_plan *plan)
{
    if (k->whole)
        return k->used_rows == 0 ? k->pack : k->pack - k->in_row;
    return k->budget - plan->tokens;
}

// Adds x to the plan. 1 when the rows are full, -1 out of memory, else 0.
static int
packing_take(packing *k, budget_plan *plan, candidate *x)
{
    x->taken = 1;
    if (k->whole) {
        if (k->used_rows > 0 && x->len <= k->pack - k->in_row) {
            k->in_row += x->len;
        } else { // next fit: it starts the next row (and a longer one the rows after)
            k->used_rows += rows_for(k, x->len);
            k->in_row = x->len == 0 ? 0 : x->len - (x->len - 1) / k->pack * k->pack;
        }
    }
    if (add_pick(plan, x) != 0)
        return -1;
    return plan->tokens >= k->budget ||
           (k->whole && k->used_rows >= k->rows && k->in_row >= k->pack);
}

// Packed rows: sequences in arrival order while they fit, then the gap filled best-fit from the
// rest of the window. whole: rows filled next-fit (a sequence that does not fit the current row
// starts the next), so that a consumer packing the batch in its order gets the same rows.
static void
plan_packed(budget_plan *plan, candidate *c, uint32_t n, uint32_t max, uint32_t pack, uint32_t rows,
            int whole)
{
    packing k = {.pack = pack, .rows = rows, .budget = (uint64_t)pack * rows, .whole = whole};
    // Arrival order, while they fit (the first always goes: one longer than the batch alone).
    uint32_t i = 0;
    for (; i < n && plan->n < max; i++) {
        uint64_t len = c[i].len;
        int fits = plan->n == 0 || (whole ? (k.used_rows > 0 && len <= k.pack - k.in_row) ||
                                                rows_for(&k, len) <= k.rows - k.used_rows
                                          : plan->tokens + len <= k.budget);
        if (!fits)
            break;
        int r = packing_take(&k, plan, &c[i]);
        if (r != 0) {
            plan->full = r > 0;
            return;
        }
    }
    if (i < n)
        plan->full = 1; // one did not fit: the batch is as full as the window makes it
    // Best fit: the longest of the rest that fits the gap, again and again.
    while (i < n && plan->n < max) {
        uint64_t gap = packing_gap(&k, plan);
        int best = -1;
        for (uint32_t j = i; j < n; j++) {
            if (!c[j].taken && c[j].len <= gap && (best < 0 || c[j].len > c[best].len))
                best = (int)j;
        }
        if (best < 0 || packing_take(&k, plan, &c[best]) != 0)
            break;
    }
    if (plan->n == max)
        plan->full = 1;
}

int
budget_plan_make(const broker *b, const trainer *t, uint32_t max, uint32_t cap, budget_plan *plan)
{
    *plan = (budget_plan){0};
    const stoker_batching *bt = &t->batching;
    int field = stoker_schema_first_variable(&b->schema);
    uint32_t n;
    candidate *c = window(b, field, &n);
    if (c == NULL)
        return -1;
    uint32_t most = bt->pack > 0 ? BUDGET_MAX_EXAMPLES : max;
    if (most > cap)
        most = cap;
    if (bt->pack > 0)
        plan_packed(plan, c, n, most, bt->pack, max, bt->pack_whole != 0);
    else if (bt->buckets)
        plan_buckets(plan, c, n, most, bt->max_tokens);
    else
        plan_budget(plan, c, n, most, bt->max_tokens);
    free(c);
    if (plan->n == 0)
        return -1;
    // What the batch pads: to its longest (count and budget), or the packed rows' unused tail.
    if (bt->pack > 0) {
        uint64_t *lens = malloc(plan->n * sizeof(*lens));
        uint64_t rows = 0;
        if (lens != NULL) {
            for (uint32_t i = 0; i < plan->n; i++)
                lens[i] = plan->picks[i].len;
            rows = stoker_pack_rows(lens, plan->n, bt->pack, bt->pack_whole != 0);
            free(lens);
        }
        plan->padding = rows * bt->pack > plan->tokens ? rows * bt->pack - plan->tokens : 0;
    } else {
        plan->padding = (uint64_t)plan->n * plan->longest - plan->tokens;
    }
    return 0;
}

uint64_t
budget_queued_tokens(const broker *b)
{
    uint64_t tokens = 0;
    for (uint32_t i = 0; i < b->n_producers; i++)
        tokens += b->producers[i]->q.tokens;
    return tokens;
}

int
budget_ready(const broker *b, const stoker_batching *batching, uint32_t max, uint32_t world)
{
    if (!stoker_batching_active(batching))
        return b->c.queued >= (uint64_t)world * max;
    if (b->c.queued >= (uint64_t)world * (batching->pack > 0 ? BUDGET_MAX_EXAMPLES : max))
        return 1;
    uint64_t budget = stoker_batching_budget(batching, max);
    return budget > 0 && budget_queued_tokens(b) >= world * budget;
}
