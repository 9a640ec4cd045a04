// The broker's record of which seqs of each producer's session are trained (acknowledged by a
// trainer): a contiguous prefix (everything below `through`) plus the acknowledged ranges beyond
// it, which arrive out of order when several leases of one producer are in flight. Push replies
// and heartbeats carry `through` to the producer, whose retention buffer then forgets what is
// below it. It does not decide what counts as acknowledged (lease.c applies acks).
// It may use the core's types (trained_set, core.h) and libstoker; it calls no other room.
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "stoker/log.h"

void
trained_init(trained_set *s, uint64_t from)
{
    free(s->ranges);
    memset(s, 0, sizeof(*s));
    s->through = from;
}

void
trained_fini(trained_set *s)
{
    free(s->ranges);
    memset(s, 0, sizeof(*s));
}

// Merges ranges that now touch the prefix into it.
static void
advance(trained_set *s)
{
    uint32_t used = 0;
    while (used < s->n && s->ranges[used].first <= s->through) {
        if (s->ranges[used].end > s->through)
            s->through = s->ranges[used].end;
        used++;
    }
    if (used > 0) {
        memmove(s->ranges, s->ranges + used, (s->n - used) * sizeof(*s->ranges));
        s->n -= used;
    }
}

void
trained_add(trained_set *s, uint64_t first, uint64_t count)
{
    uint64_t end = first + count;
    if (end <= s->through || count == 0)
        return;
    if (first < s->through)
        first = s->through;
    // Insert in order of first, merging with neighbours that overlap or touch.
    uint32_t i = 0;
    while (i < s->n && s->ranges[i].end < first)
        i++;
    if (i < s->n && s->ranges[i].first <= end) {
        trained_range *r = &s->ranges[i];
        if (first < r->first)
            r->first = first;
        if (end > r->end)
            r->end = end;
        while (i + 1 < s->n && s->ranges[i + 1].first <= r->end) {
            if (s->ranges[i + 1].end > r->end)
                r->end = s->ranges[i + 1].end;
            memmove(&s->ranges[i + 1], &s->ranges[i + 2], (s->n - i - 2) * sizeof(*s->ranges));
            s->n--;
        }
    } else {
        if (s->n == s->cap) {
            uint32_t cap = s->cap ? s->cap * 2 : 8;
            trained_range *r = realloc(s->ranges, cap * sizeof(*r));
            if (r == NULL) {
                // Out of memory: the producer keeps these examples a little longer (until the
                // prefix reaches them through a later range), which is safe.
                stoker_warn("trained: out of memory recording acknowledged seqs");
                return;
            }
            s->ranges = r;
            s->cap = cap;
        }
        memmove(&s->ranges[i + 1], &s->ranges[i], (s->n - i) * sizeof(*s->ranges));
        s->ranges[i] = (trained_range){.first = first, .end = end};
        s->n++;
    }
    advance(s);
}

void
trained_tell(const trained_set *s, stoker_reply *rep)
{
    rep->trained_through = s->through;
    rep->n_trained_after = 0;
    for (uint32_t i = 0; i < s->n && rep->n_trained_after + 2 <= STOKER_TRAINED_AFTER_MAX; i++) {
        rep->trained_after[rep->n_trained_after++] = s->ranges[i].first;
        rep->trained_after[rep->n_trained_after++] = s->ranges[i].end;
    }
}

int
trained_none_from(const broker *b, const producer *p, uint64_t seq)
{
    return b->epochs != NULL || (p->trained.n == 0 && seq >= p->trained.through);
}

int
trained_untrained(const broker *b, const producer *p, trained_walk *w, uint64_t seq)
{
    const trained_set *s = &p->trained;
    trained_walk alone = {0, 0};
    if (w == NULL)
        w = &alone;
    if (trained_none_from(b, p, seq))
        return 1;
    if (seq < s->through)
        return 0;
    if (seq < w->last)
        w->i = 0; // out of seq order: from the first range again
    w->last = seq;
    while (w->i < s->n && s->ranges[w->i].end <= seq)
        w->i++;
    return w->i == s->n || seq < s->ranges[w->i].first;
}

int
trained_has(const trained_set *s, uint64_t seq, uint64_t *next)
{
    if (seq < s->through)
        return 1;
    for (uint32_t i = 0; i < s->n; i++) {
        if (seq < s->ranges[i].first) {
            *next = s->ranges[i].first;
            return 0;
        }
        if (seq < s->ranges[i].end)
            return 1;
    }
    *next = UINT64_MAX;
    return 0;
}

uint64_t
trained_run_end(const trained_set *s, uint64_t seq)
{
    if (seq < s->through)
        return s->through; // advance() merged every range that touches the prefix
    for (uint32_t i = 0; i < s->n; i++)
        if (seq >= s->ranges[i].first && seq < s->ranges[i].end)
            return s->ranges[i].end; // trained_add merged ranges that touch
    return seq;
}

#define REPORTED_MAX (4 * STOKER_HELLO_TRAINED_MAX)

void
trained_reported(broker *b, const stoker_request *req)
{
    if (req->n_trained == 0)
        return;
    if (b->reported == NULL &&
        (b->reported = malloc(3 * sizeof(uint64_t) * REPORTED_MAX)) == NULL) {
        stoker_warn("trained: out of memory keeping what a trainer reported");
        return;
    }
    uint64_t applied = 0;
    for (uint32_t i = 0; i < req->n_trained; i++) {
        const uint64_t *t = &req->trained[3 * i];
        if (t[2] <= t[1])
            continue;
        producer *p = find_producer(b, t[0]);
        if (p != NULL) {
            trained_add(&p->trained, t[1], t[2] - t[1]);
            applied += t[2] - t[1];
        }
        if (b->n_reported == REPORTED_MAX) { // the oldest go: their sessions came back long ago
            memmove(b->reported, b->reported + 3 * (REPORTED_MAX / 4),
                    3 * sizeof(uint64_t) * (REPORTED_MAX - REPORTED_MAX / 4));
            b->n_reported -= REPORTED_MAX / 4;
        }
        memcpy(&b->reported[3 * b->n_reported++], t, 3 * sizeof(uint64_t));
    }
    stoker_debug("trained: trainer session %016llx reported %u ranges it trained (%s)",
                 (unsigned long long)req->session, req->n_trained,
                 req->method == STOKER_HELLO ? "hello" : "heartbeat");
    (void)applied;
}

void
trained_reported_apply(broker *b, producer *p)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < b->n_reported; i++) {
        const uint64_t *t = &b->reported[3 * i];
        if (t[0] == p->session && t[2] > t[1] && t[2] > p->trained.through) {
            n += t[2] - (t[1] > p->trained.through ? t[1] : p->trained.through);
            trained_add(&p->trained, t[1], t[2] - t[1]);
        }
    }
    if (n > 0)
        stoker_info("trained-reported: producer %u '%s': %llu examples it pushes again were "
                    "trained before this broker started (its trainers said); they go to no one",
                    p->id, p->name, (unsigned long long)n);
}
