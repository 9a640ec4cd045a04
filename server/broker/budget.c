// The broker's budget room: batches made by tokens for a consumer that asked for them in its
// hello (stoker/batching.h, docs/schema.md, "Batching by tokens"): a token budget, length buckets,
// packed rows. It plans a batch from what the queues hold (it takes nothing: lease.c takes
// the plan's examples into a lease) and says when a budget can be filled. It uses the core, queue.c
// and the trained room (a trainer's hello may have said some queued examples are trained).
#include <stdlib.h>
#include <string.h>

#include "ahead.h"
#include "budget.h"
#include "mix.h"
#include "internal.h"
#include "stoker/batching.h"

// The examples a plan looks at: the oldest of every queue, interleaved (the round-robin order
// count batching takes them in), at most this many. Buckets find similar lengths among them.
#define WINDOW_MAX BUDGET_MAX_EXAMPLES
_Static_assert(WINDOW_MAX <= 0xffff, "length_key keeps a window index in 16 bits");

// Buckets choose among what is queued: a batch with buckets waits until the queues hold this
// many batches' worth (examples, or tokens of a budget), its reserve, so that when producers set
// the pace (the queues nearly empty when a consumer asks) a batch still finds similar lengths.
// The reserve costs start-up time only: once it is queued, each batch takes one batch's worth
// and the producers refill it (docs/schema.md, "Length buckets").
#define BUCKET_RESERVE_BATCHES 16
// Buckets look at the oldest this many reserves' worth where the queues hold more (a producer
// faster than its consumer), and at most BUCKET_WINDOW_MAX sequences: more choice pads less
// (log-normal lengths, batch 32: 0.09 with 2 reserves, 0.04 with 4), and a plan's cost grows
// with it, paid at every batch (a window of 5,000 for max_tokens=16384 halved the tokens/s a
// consumer faster than a free producer got).
#define BUCKET_WINDOW_RESERVES 4
#define BUCKET_WINDOW_MAX      2048

// The examples of batching's batch of at most max: max, or by a budget as many as fit it at the
// queued sequences' mean length (at least 1).
static uint64_t
batch_examples(const broker *b, const stoker_batching *batching, uint32_t max)
{
    uint64_t batch = max, budget = stoker_batching_budget(batching, max);
    if (budget > 0 && b->c.queued > 0) {
        uint64_t mean = budget_queued_tokens(b) / b->c.queued;
        uint64_t fit = budget / (mean > 0 ? mean : 1) + 1;
        if (fit < batch)
            batch = fit;
    }
    return batch > 0 ? batch : 1;
}

// The examples of a bucket reserve (BUCKET_RESERVE_BATCHES batches).
static uint64_t
reserve_examples(const broker *b, const stoker_batching *batching, uint32_t max)
{
    return BUCKET_RESERVE_BATCHES * batch_examples(b, batching, max);
}

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

// The window: up to most examples (at most WINDOW_MAX), the i-th of every queue (of pool's
// producers; NULL: all) before the (i+1)-th of any, starting at the round-robin cursor. *n_out
// candidates into a new array (NULL: none or out of memory).
static candidate *
window(const broker *b, int field, const char *pool, uint64_t most, uint32_t *n_out)
{
    *n_out = 0;
    if (most > WINDOW_MAX)
        most = WINDOW_MAX;
    uint64_t queued = b->c.queued < most ? b->c.queued : most;
    if (queued == 0 || b->n_producers == 0)
        return NULL;
    candidate *c = malloc(queued * sizeof(*c));
    queue_cursor *cur = malloc(b->n_producers * sizeof(*cur));
    uint8_t *open = malloc(b->n_producers);
    trained_walk *walk = calloc(b->n_producers, sizeof(*walk));
    if (c == NULL || cur == NULL || open == NULL || walk == NULL) {
        free(c);
        free(cur);
        free(open);
        free(walk);
        return NULL;
    }
    uint32_t n = 0, left = 0;
    for (uint32_t i = 0; i < b->n_producers; i++) {
        queue_cursor_init(&b->producers[i]->q, &cur[i]);
        open[i] = b->producers[i]->q.examples > 0 &&
                  (pool == NULL || strcmp(b->producers[i]->pool, pool) == 0);
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
            if (!trained_untrained(b, b->producers[i], &walk[i], x->seq))
                continue;
            x->producer = i;
            x->taken = 0;
            n++;
        }
    }
    free(cur);
    free(open);
    free(walk);
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

// Buckets: the run of sequences, consecutive in length, whose batch pads the least (padded slots
// over slots), so that a reserve of a few batches (budget_ready) yields batches of near-equal
// lengths. Sorting the window by length and taking the best run beats taking the oldest and its
// nearest: the oldest is often a leftover of unusual length, and the batch padded to it. A sequence
// passed over while BUCKET_AGE_RESERVES reserves' worth of newer ones arrived goes in the next
// batch (in the best run that holds it), so none waits forever. (A limit in reserves, not in
// windows: the window grows with what is passed over, and so would the wait.)
#define BUCKET_AGE_RESERVES 16

// A candidate's key in length order: its length, then its age (index in the window, which is
// in arrival order), in one integer.
static uint64_t
length_key(uint64_t len, uint32_t index)
{
    if (len > (UINT64_C(1) << 47) - 1)
        len = (UINT64_C(1) << 47) - 1;
    return len << 16 | index;
}

// Sorts keys[0..n) ascending: least significant byte first, over the bytes the largest key
// has (a window's keys hold a length and a 16-bit index: 4 passes for lengths under 65536, cheaper
// than qsort's comparisons at every batch). tmp holds n keys.
static void
sort_keys(uint64_t *keys, uint64_t *tmp, uint32_t n)
{
    uint64_t top = 0;
    for (uint32_t i = 0; i < n; i++)
        top |= keys[i];
    uint64_t *from = keys, *to = tmp;
    for (unsigned shift = 0; shift < 64 && (top >> shift) != 0; shift += 8) {
        uint32_t count[257] = {0};
        for (uint32_t i = 0; i < n; i++)
            count[(from[i] >> shift & 0xff) + 1]++;
        for (unsigned d = 0; d < 256; d++)
            count[d + 1] += count[d];
        for (uint32_t i = 0; i < n; i++)
            to[count[from[i] >> shift & 0xff]++] = from[i];
        uint64_t *t = from;
        from = to;
        to = t;
    }
    if (from != keys)
        memcpy(keys, from, n * sizeof(*keys));
}

static uint64_t
key_len(uint64_t key)
{
    return key >> 16;
}

// The window's candidate that has waited too long (see BUCKET_AGE_RESERVES), or -1: the head of
// a queue whose producer has made more than its share of the limit since (the broker's arrivals
// meanwhile, roughly, are that times the producers alive), or more than its queue's depth: a
// producer keeps what it pushed until it is trained, by default twice its queue's depth, and
// stops making more when that is full (common/client/retention.h), so it must not wait on
// a sequence held back here.
// How old (in the producer's seqs made since) the head of a queue may grow before it goes in
// the next batch.
static uint64_t
overdue_age(const broker *b, uint64_t reserve)
{
    uint64_t alive = producers_alive(b);
    uint64_t limit = BUCKET_AGE_RESERVES * reserve / (alive > 0 ? alive : 1);
    return limit < b->queue_depth ? limit : b->queue_depth;
}

static uint64_t
age_of(const producer *p, uint64_t seq)
{
    return p->next_seq > seq ? p->next_seq - seq - 1 : 0;
}

// The candidate not taken yet that has waited too long (see BUCKET_AGE_RESERVES), or -1: the
// oldest of a producer that has made more than its share of the limit since (the broker's
// arrivals meanwhile, roughly, are that times the producers alive), or more than its queue's
// depth: a producer keeps what it pushed until it is trained, by default twice its queue's
// depth, and stops making more when that is full (common/client/retention.h), so it must not
// wait on a sequence held back here. A batch planned ahead is made later: its candidates
// older by `later` seqs of each producer by then.
static int
overdue(const broker *b, const candidate *c, uint32_t n, uint64_t reserve, uint64_t later)
{
    int worst = -1;
    uint64_t worst_age = overdue_age(b, reserve);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t age = age_of(b->producers[c[i].producer], c[i].seq) + later;
        if (!c[i].taken && age > worst_age) {
            worst = (int)i;
            worst_age = age;
        }
    }
    return worst;
}

// The run of keys[s..e) (sorted by length) a batch takes from s: at most max, within the budget
// padded to the run's longest (the first always goes). *full when more would not fit.
static uint32_t
run_end(const uint64_t *keys, uint32_t n, uint32_t s, uint32_t e, uint32_t max, uint64_t budget,
        int *full)
{
    if (e <= s)
        e = s + 1;
    while (e < n && e - s < max &&
           (budget == 0 || (uint64_t)(e - s + 1) * key_len(keys[e]) <= budget))
        e++;
    *full = e - s == max || e < n;
    return e;
}

static int
index_order(const void *pa, const void *pb)
{
    uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
    return a < b ? -1 : a > b;
}

// The best run of keys[lo_s..hi_s) as starts (full before not, then the least padding; a run
// that is not full ends at the top of the lengths: among those the longest, all of the window
// when it holds less than a batch: the supply ending, a pull's wait over), in [*s_out, *e_out).
// With must >= 0 (the overdue one, sorted at hi_s - 1), only runs that hold it. Returns whether
// it is full.
static int
best_run(const uint64_t *keys, uint32_t n, uint32_t lo, uint32_t hi, int must, uint32_t max,
         uint64_t budget, uint32_t *s_out, uint32_t *e_out)
{
    uint32_t best_s = lo, best_e = lo;
    int best_full = -1;
    double best_frac = 0.0;
    uint64_t sum = 0; // lengths in [s, e)
    uint32_t e = lo;
    for (uint32_t s = lo; s < hi; s++) {
        int full;
        uint32_t e2 = run_end(keys, n, s, e, max, budget, &full);
        for (; e < e2; e++)
            sum += key_len(keys[e]);
        if (must < 0 || e > hi - 1) {
            uint64_t slots = (uint64_t)(e - s) * key_len(keys[e - 1]), pad = slots - sum;
            double frac = slots > 0 ? (double)pad / (double)slots : 0.0;
            int better = full ? frac < best_frac : e - s > best_e - best_s;
            if (full > best_full || (full == best_full && better)) {
                best_s = s, best_e = e, best_full = full, best_frac = frac;
            }
        }
        sum -= key_len(keys[s]);
    }
    *s_out = best_s;
    *e_out = best_e;
    return best_full > 0;
}

// Buckets: up to n_plans batches (at least 1), each the best run of what the ones before left,
// in plans[0 ..); the second on only while the runs are full. Returns how many were planned.
static uint32_t
plan_buckets(budget_plan *plans, uint32_t n_plans, const broker *b, candidate *c, uint32_t n,
             uint32_t max, uint64_t budget, uint64_t reserve)
{
    if (n == 0 || max == 0)
        return 0;
    uint64_t *keys = malloc(2 * n * sizeof(*keys)); // (2, n): the keys, the sort's scratch
    uint32_t *take = malloc(n * sizeof(*take));
    if (keys == NULL || take == NULL) {
        free(keys);
        free(take);
        return 0;
    }
    for (uint32_t i = 0; i < n; i++)
        keys[i] = length_key(c[i].len, i);
    sort_keys(keys, keys + n, n);
    uint64_t alive = producers_alive(b), n_all = n;
    uint32_t made = 0;
    while (made < n_plans && n > 0) {
        int must = overdue(b, c, n_all, reserve, made * (uint64_t)max / (alive > 0 ? alive : 1));
        uint32_t lo = 0, hi = n; // the runs' starts considered
        if (must >= 0) {
            uint32_t at = 0;
            while ((keys[at] & 0xffff) != (uint32_t)must)
                at++;
            lo = at + 1 > max ? at + 1 - max : 0;
            hi = at + 1;
        }
        uint32_t s, e;
        int full = best_run(keys, n, lo, hi, must, max, budget, &s, &e);
        if (made > 0 && !full)
            break; // what is left waits for more to choose among
        // The batch in arrival order.
        uint32_t k = 0;
        for (uint32_t i = s; i < e; i++)
            take[k++] = (uint32_t)(keys[i] & 0xffff);
        qsort(take, k, sizeof(*take), index_order);
        budget_plan *plan = &plans[made++];
        for (uint32_t i = 0; i < k && add_pick(plan, &c[take[i]]) == 0; i++)
            c[take[i]].taken = 1;
        plan->full = full;
        if (plan->n < k)
            break; // out of memory: this one short, no more
        memmove(&keys[s], &keys[e], (n - e) * sizeof(*keys));
        n -= e - s;
    }
    free(keys);
    free(take);
    return made;
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

// What a plan pads: to its longest (count and budget), or the packed rows' unused tail.
static void
plan_padding(budget_plan *plan, const stoker_batching *bt)
{
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
}

int
budget_plan_make(broker *b, const trainer *t, uint32_t max, uint32_t cap, budget_plan *plan)
{
    *plan = (budget_plan){0};
    const stoker_batching *bt = &t->batching;
    int ahead = bt->buckets && bt->pack == 0;
    if (ahead && ahead_next(b, bt, max, cap, plan) == 0)
        return 0;
    ahead_drop(b); // none, or planned for another batching
    int field = stoker_schema_first_variable(&b->schema);
    uint64_t most_window = WINDOW_MAX;
    if (ahead) {
        most_window = BUCKET_WINDOW_RESERVES * reserve_examples(b, bt, max);
        if (most_window > BUCKET_WINDOW_MAX)
            most_window = BUCKET_WINDOW_MAX;
        uint64_t batch = batch_examples(b, bt, max); // a large batch: itself and as many again
        if (most_window < 2 * batch)
            most_window = 2 * batch;
    }
    uint32_t n;
    candidate *c = window(b, field, NULL, most_window, &n);
    if (c == NULL)
        return -1;
    uint32_t most = bt->pack > 0 ? BUDGET_MAX_EXAMPLES : max;
    if (most > cap)
        most = cap;
    if (bt->pack > 0) {
        plan_packed(plan, c, n, most, bt->pack, max, bt->pack_whole != 0);
    } else if (bt->buckets) {
        // Ahead: as many as leave most of the window to choose among (a quarter taken).
        uint32_t batch = (uint32_t)batch_examples(b, bt, most);
        uint32_t n_plans = n / (4 * (batch > 0 ? batch : 1));
        n_plans = n_plans < 1 ? 1 : n_plans > AHEAD_MAX ? AHEAD_MAX : n_plans;
        budget_plan plans[AHEAD_MAX] = {{0}};
        uint32_t made = plan_buckets(plans, n_plans, b, c, n, most, bt->max_tokens,
                                     reserve_examples(b, bt, max));
        if (made > 0) {
            *plan = plans[0];
            for (uint32_t i = 1; i < made; i++)
                plan_padding(&plans[i], bt);
            ahead_keep(b, plans, made, bt, max, cap);
        }
    } else {
        plan_budget(plan, c, n, most, bt->max_tokens);
    }
    free(c);
    if (plan->n == 0) {
        budget_plan_free(plan);
        return -1;
    }
    plan_padding(plan, bt);
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

// Nonzero when the queues hold batches full batches as for budget_ready.
static int
holds(const broker *b, const stoker_batching *batching, uint32_t max, uint64_t batches)
{
    if (b->c.queued >= batches * (batching->pack > 0 ? BUDGET_MAX_EXAMPLES : max))
        return 1;
    uint64_t budget = stoker_batching_budget(batching, max);
    return budget > 0 && budget_queued_tokens(b) >= batches * budget;
}

// Nonzero when the queues cannot hold a reserve larger than what they hold: half the examples
// they may hold (the alive producers' depth), half the bytes --max-bytes leaves, or the most a
// plan looks at. Half, so that a reserve never waits on queues that fill unevenly (a queue's
// last chunk that does not fit) and never counts as a batch short of its queues.
static int
reserve_bounded(const broker *b)
{
    uint64_t queued = b->c.queued, alive = producers_alive(b);
    if (queued >= BUDGET_MAX_EXAMPLES || 2 * queued >= (uint64_t)b->queue_depth * alive)
        return 1;
    uint64_t room = b->cfg.max_bytes > b->held_bytes ? b->cfg.max_bytes - b->held_bytes : 0;
    return 2 * b->queued_bytes >= room;
}

int
budget_ready(const broker *b, const stoker_batching *batching, uint32_t max, uint32_t world)
{
    if (!stoker_batching_active(batching))
        return b->c.queued >= (uint64_t)world * max;
    if (!holds(b, batching, max, world))
        return 0;
    if (!batching->buckets || batching->pack > 0 || world >= BUCKET_RESERVE_BATCHES)
        return 1;
    return holds(b, batching, max, BUCKET_RESERVE_BATCHES) || reserve_bounded(b);
}

// A mixed batch by tokens (budget_plan_mixed): each source's window, and how far it was taken.
typedef struct mixed_source {
    candidate *c;
    uint32_t n, next;
    uint64_t tokens; // of this batch
} mixed_source;

int
budget_plan_mixed(const broker *b, const trainer *t, const mix *m, uint32_t max, budget_plan *plan,
                  int32_t *waits_for)
{
    *plan = (budget_plan){0};
    *waits_for = -1;
    int field = stoker_schema_first_variable(&b->schema);
    uint64_t budget = t->batching.max_tokens;
    mixed_source src[STOKER_MIX_MAX] = {{0}};
    uint32_t most = max < BUDGET_MAX_EXAMPLES ? max : BUDGET_MAX_EXAMPLES;
    for (uint32_t s = 0; s < m->spec.n; s++)
        if (m->share[s] > 0.0)
            src[s].c = window(b, field, m->spec.names[s], most, &src[s].n);
    // Deficit first: the next sequence comes from the source furthest behind its running target
    // in tokens (its share of what was given, this batch included), so that every source stays
    // within about one sequence of its share; the batch is full at max sequences or when the
    // next would pad it past the budget.
    while (plan->n < most) {
        uint64_t more = plan->tokens;
        int32_t best = -1;
        double behind = 0.0;
        for (uint32_t s = 0; s < m->spec.n; s++) {
            if (m->share[s] <= 0.0)
                continue;
            double d = mix_owed(m, s, more) - (double)src[s].tokens;
            if (best < 0 || d > behind)
                best = (int32_t)s, behind = d;
        }
        if (best < 0)
            break;
        mixed_source *x = &src[best];
        if (x->next == x->n) { // the source to serve has nothing queued: the batch waits for it
            *waits_for = best;
            break;
        }
        const candidate *c = &x->c[x->next];
        if (plan->n > 0 && budget > 0 && padded_with(plan, c->len) > budget) {
            plan->full = 1;
            break;
        }
        if (add_pick(plan, c) != 0)
            break;
        plan->picks[plan->n - 1].source = (uint32_t)best + 1;
        x->next++;
        x->tokens += c->len;
        if (budget > 0 && plan->tokens >= budget) {
            plan->full = 1;
            break;
        }
    }
    if (plan->n == most)
        plan->full = 1;
    for (uint32_t s = 0; s < m->spec.n; s++)
        free(src[s].c);
    plan->padding = (uint64_t)plan->n * plan->longest - plan->tokens;
    return plan->n > 0 ? 0 : -1;
}
