// Jobs sharing a producer (see jobs.h): which jobs have room for its push, which pass it over
// (--job-policy remake), and what it may forget: the seqs every job that takes examples trained,
// the intersection of their trained sets. It uses the core, the sets and jobs.c.
#include <string.h>

#include "internal.h"
#include "epoch.h"
#include "jobs.h"
#include "remake.h"

// At most this many trained spans of one job are looked at when telling a producer what every
// job trained: leaving some out only makes a producer keep more (safe).
#define TRAINED_SPANS 64

typedef struct span {
    uint64_t first, end;
} span;

// s as sorted spans: [0, through), then its ranges (at most cap). Returns how many.
static uint32_t
spans_of(const trained_set *s, span *out, uint32_t cap)
{
    uint32_t n = 0;
    if (s->through > 0)
        out[n++] = (span){0, s->through};
    for (uint32_t i = 0; i < s->n && n < cap; i++)
        out[n++] = (span){s->ranges[i].first, s->ranges[i].end};
    return n;
}

// a (n spans) intersected with b (m spans) into a; returns the spans left.
static uint32_t
intersect(span *a, uint32_t n, const span *b, uint32_t m)
{
    span out[TRAINED_SPANS];
    uint32_t k = 0, i = 0, j = 0;
    while (i < n && j < m && k < TRAINED_SPANS) {
        uint64_t first = a[i].first > b[j].first ? a[i].first : b[j].first;
        uint64_t end = a[i].end < b[j].end ? a[i].end : b[j].end;
        if (first < end)
            out[k++] = (span){first, end};
        if (a[i].end < b[j].end)
            i++;
        else
            j++;
    }
    memcpy(a, out, k * sizeof(*a));
    return k;
}

void
jobs_tell_trained(const broker *b, const producer *p, stoker_reply *rep)
{
    if (b->n_followers == 0) {
        trained_tell(&p->trained, rep);
        return;
    }
    span acc[TRAINED_SPANS], one[TRAINED_SPANS];
    uint32_t n = 0;
    int any = 0;
    if (jobs_takes(b) || !b->job_named) {
        n = spans_of(&p->trained, acc, TRAINED_SPANS);
        any = 1;
    }
    for (uint32_t i = 0; i < b->n_followers; i++) {
        const broker *f = b->followers[i];
        const producer *m = jobs_takes(f) ? find_producer_id(f, p->id) : NULL;
        if (m == NULL)
            continue;
        uint32_t k = spans_of(&m->trained, one, TRAINED_SPANS);
        if (!any) {
            memcpy(acc, one, k * sizeof(*one));
            n = k;
            any = 1;
        } else {
            n = intersect(acc, n, one, k);
        }
    }
    trained_set s = {0};
    if (!any) { // no job takes examples: nothing is kept for one
        trained_init(&s, p->next_seq);
    } else {
        uint32_t rest = n > 0 && acc[0].first == 0 ? 1 : 0; // acc[0] is the through run
        trained_init(&s, rest ? acc[0].end : 0);
        for (uint32_t i = rest; i < n; i++)
            trained_add(&s, acc[i].first, acc[i].end - acc[i].first);
    }
    trained_tell(&s, rep);
    trained_fini(&s);
}

// Whether job j can keep items of epoch `epoch` to make again: a set for it, or room for one.
static int
can_pass(const broker *j, uint32_t epoch)
{
    int room = remake_find(j->remakes, epoch) != NULL;
    for (uint32_t k = 0; k < REMAKE_SETS; k++)
        room |= j->remakes[k] == NULL;
    return room;
}

uint32_t
jobs_short(const broker *b, const producer *p, uint32_t fresh, uint64_t bytes, uint32_t takers,
           uint32_t epoch)
{
    int strict = takers == JOBS_ALL && b->epochs != NULL && epochs_strict(b->epochs);
    uint32_t mask = 0;
    for (uint32_t i = 0; i <= b->n_followers; i++) {
        const broker *j = i == 0 ? b : b->followers[i - 1];
        uint32_t bit = 1u << j->job_slot;
        const producer *own = !jobs_takes(j) || !(takers & bit) ? NULL
                              : i == 0                          ? p
                                                                : find_producer_id(j, p->id);
        // (One behind that cannot pass the push over takes it: its producers must go on to make
        // the copies it waits for.)
        if (own != NULL && (!jobs_fits(j, own, fresh, bytes) ||
                            (strict && jobs_owes_before(j, epoch) && can_pass(j, epoch))))
            mask |= bit;
    }
    return mask;
}

uint32_t
jobs_may_pass(const broker *b, uint32_t short_mask, uint32_t epoch)
{
    if (b->epochs == NULL)
        return 0;
    int strict = epochs_strict(b->epochs);
    uint32_t pass = 0, taking = jobs_takes(b) && b->job_named ? 1 : 0;
    for (uint32_t i = 0; i <= b->n_followers; i++) {
        const broker *j = i == 0 ? b : b->followers[i - 1];
        uint32_t bit = 1u << j->job_slot;
        if (i > 0 && jobs_takes(j))
            taking |= bit;
        if (!(short_mask & bit) || !jobs_takes(j) || (i == 0 && !b->job_named))
            continue;
        // Behind in its epochs, or lagging under --job-policy remake once it pulled.
        int behind = strict && jobs_owes_before(j, epoch);
        if (!behind && (b->cfg.job_policy != JOB_POLICY_REMAKE || !jobs_pulled(j)))
            continue;
        pass |= can_pass(j, epoch) ? bit : 0;
    }
    // Some job takes it and goes on; when every job is short, the producers wait for them.
    return (taking & ~short_mask) != 0 ? pass : 0;
}

int
jobs_have_room(const broker *b, const producer *p)
{
    uint64_t chunk = p->last_chunk > 0 ? p->last_chunk : 1;
    for (uint32_t i = 0; i < b->n_followers; i++) {
        const broker *f = b->followers[i];
        const producer *m = jobs_takes(f) ? find_producer_id(f, p->id) : NULL;
        if (m != NULL && !jobs_fits(f, m, chunk, f->example_bytes))
            return 0;
    }
    return 1;
}
