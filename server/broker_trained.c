// The broker's record of which seqs of each producer's session are trained (acknowledged by a
// trainer): a contiguous prefix (everything below `through`) plus the acknowledged ranges beyond
// it, which arrive out of order when several leases of one producer are in flight. Push replies
// and heartbeats carry `through` to the producer, whose retention buffer then forgets what is
// below it. It does not decide what counts as acknowledged (broker_lease.c applies acks).
// It may use the core's types (trained_set, broker_core.h) and libstoker; it calls no other room.
#include <stdlib.h>
#include <string.h>

#include "broker_internal.h"
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
