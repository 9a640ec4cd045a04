// A consumer's mixture at the broker (mix.h): the books of what each source gave, the plan of
// the next batch's counts, and which sources ran dry.
#include "mix.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "stoker/error.h"
#include "stoker/log.h"

// Shares over the sources still in m (each weight over their sum), rebased at given: every
// target goes on from where it is.
static void
reshare(mix *m)
{
    double sum = 0.0;
    for (uint32_t s = 0; s < m->spec.n; s++)
        sum += m->dry[s] ? 0.0 : m->weight[s];
    for (uint32_t s = 0; s < m->spec.n; s++) {
        m->base[s] += m->share[s] * ((double)m->given - (double)m->from);
        m->share[s] = m->dry[s] || sum <= 0.0 ? 0.0 : m->weight[s] / sum;
    }
    m->from = m->given;
}

mix *
mix_new(const stoker_mix *spec)
{
    mix *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    m->spec = *spec;
    memcpy(m->weight, spec->weights, sizeof(m->weight));
    m->waits_for = -1;
    m->refs = 1;
    reshare(m);
    return m;
}

void
mix_hold(mix *m)
{
    m->refs++;
}

void
mix_release(mix *m)
{
    if (m != NULL && --m->refs == 0)
        free(m);
}

int
mix_source_of(const mix *m, const char *pool)
{
    for (uint32_t s = 0; s < m->spec.n; s++)
        if (strcmp(m->spec.names[s], pool) == 0)
            return (int)s;
    return -1;
}

void
mix_avail(const broker *b, const mix *m, uint64_t *avail)
{
    memset(avail, 0, m->spec.n * sizeof(*avail));
    for (uint32_t i = 0; i < b->n_producers; i++) {
        const producer *p = b->producers[i];
        int s = p->q.examples > 0 ? mix_source_of(m, p->pool) : -1;
        if (s >= 0)
            avail[s] += p->q.examples;
    }
}

// Whether p may still send examples: one that said it makes nothing more (it lingers until its
// examples are trained, which may wait for this consumer's commit) sends nothing more either.
static int
sends_more(const producer *p, uint64_t now_ms)
{
    int lingers = p->status == STOKER_PRODUCER_ALIVE && p->done_making && p->pushes == NULL;
    return producer_may_send(p, now_ms) && !lingers;
}

int
mix_source_sends_more(const broker *b, const mix *m, uint32_t s, uint64_t now_ms)
{
    for (uint32_t i = 0; i < b->n_producers; i++)
        if (strcmp(b->producers[i]->pool, m->spec.names[s]) == 0 &&
            sends_more(b->producers[i], now_ms))
            return 1;
    return 0;
}

int
mix_source_dry(const broker *b, const mix *m, uint32_t s, uint64_t now_ms)
{
    int seen = 0, any_may_send = 0;
    for (uint32_t i = 0; i < b->n_producers; i++) {
        const producer *p = b->producers[i];
        int may_send = sends_more(p, now_ms);
        any_may_send |= may_send;
        if (strcmp(p->pool, m->spec.names[s]) != 0)
            continue;
        if (may_send || p->q.examples > 0)
            return 0;
        seen = 1;
    }
    // A pool none of whose producers came yet is waited for while the supply goes on.
    return seen || (b->n_producers > 0 && !any_may_send);
}

int
mix_source_full(const broker *b, const mix *m, uint32_t s)
{
    int alive = 0;
    for (uint32_t i = 0; i < b->n_producers; i++) {
        const producer *p = b->producers[i];
        if (strcmp(p->pool, m->spec.names[s]) != 0 || p->status != STOKER_PRODUCER_ALIVE)
            continue;
        if (queues_has_room(b, p) && !push_waits_for_room(p))
            return 0;
        alive = 1;
    }
    return alive;
}

uint32_t
mix_producers(const broker *b, const mix *m, uint32_t s, uint32_t *alive, uint32_t *lost)
{
    uint32_t n = 0;
    *alive = *lost = 0;
    for (uint32_t i = 0; i < b->n_producers; i++) {
        const producer *p = b->producers[i];
        if (strcmp(p->pool, m->spec.names[s]) != 0)
            continue;
        n++;
        *alive += p->status == STOKER_PRODUCER_ALIVE;
        *lost += p->status == STOKER_PRODUCER_LOST;
    }
    return n;
}

void
mix_plan(const mix *m, uint32_t n, uint32_t *counts)
{
    double o[STOKER_MIX_MAX];
    for (uint32_t s = 0; s < m->spec.n; s++)
        o[s] = mix_owed(m, s, n);
    stoker_mix_counts(m->spec.n, o, n, counts);
}

uint32_t
mix_fit(const mix *m, uint32_t n, const uint64_t *avail, uint32_t *counts)
{
    // A source owed more than one example beyond what it has cannot be served: that bounds the
    // batch from above; below the bound, the largest that fits.
    uint32_t most = n;
    for (uint32_t s = 0; s < m->spec.n; s++) {
        if (m->share[s] <= 0.0)
            continue;
        double room = (double)avail[s] + 1.0 - mix_owed(m, s, 0);
        double bound = room <= 0.0 ? 0.0 : ceil(room / m->share[s]);
        if (bound < most)
            most = (uint32_t)bound;
    }
    for (uint32_t k = most; k > 0; k--) {
        mix_plan(m, k, counts);
        uint32_t s = 0;
        while (s < m->spec.n && counts[s] <= avail[s])
            s++;
        if (s == m->spec.n)
            return k;
    }
    memset(counts, 0, m->spec.n * sizeof(*counts));
    return 0;
}

void
mix_took(mix *m, uint32_t s, uint32_t n)
{
    m->got[s] += n;
    m->given += n;
}

void
mix_gave_back(mix *m, uint32_t s, uint32_t n)
{
    m->got[s] -= n < m->got[s] ? n : m->got[s];
    m->given -= n < m->given ? n : m->given;
}

void
mix_at_step(mix *m, uint64_t step)
{
    if (m->spec.n_points == 0)
        return;
    double w[STOKER_MIX_MAX];
    stoker_mix_weights_at(&m->spec, step, w);
    if (memcmp(w, m->weight, m->spec.n * sizeof(double)) == 0)
        return;
    memcpy(m->weight, w, m->spec.n * sizeof(double));
    reshare(m);
}

void
mix_reweigh(mix *m)
{
    reshare(m);
}

void
mix_drop_source(mix *m, uint32_t s)
{
    if (m->dry[s])
        return;
    m->dry[s] = 1;
    reshare(m);
}

int
mix_end(const broker *b, mix *m, const uint64_t *avail, uint64_t now_ms, const char *who, char *why,
        size_t len)
{
    uint32_t live = 0, lost_any = 0;
    for (uint32_t s = 0; s < m->spec.n; s++) {
        uint32_t alive, lost, n = mix_producers(b, m, s, &alive, &lost);
        lost_any += lost;
        if (m->dry[s] || avail[s] > 0 || !mix_source_dry(b, m, s, now_ms)) {
            live += !m->dry[s];
            continue;
        }
        if (m->spec.stop == STOKER_MIX_STOP_FIRST)
            return stoker_errorf(why, len, lost > 0 ? STOKER_NO_PRODUCERS : STOKER_END_OF_DATA,
                                 "source '%s' of the mixture ran dry (%u producer%s, %u lost) and "
                                 "the mixture stops at its first dry source (mix stop 'first'): "
                                 "what the other sources hold stays queued",
                                 m->spec.names[s], n, n == 1 ? "" : "s", lost);
        stoker_info("mix-source-dry: %s: source '%s' ran dry (%u producer%s, %u lost); the "
                    "mixture goes on without it",
                    who, m->spec.names[s], n, n == 1 ? "" : "s", lost);
        mix_drop_source(m, s);
    }
    if (live > 0)
        return STOKER_OK;
    return stoker_errorf(why, len, lost_any > 0 ? STOKER_NO_PRODUCERS : STOKER_END_OF_DATA,
                         "every source of the mixture ran dry (mix stop 'all'): no producer of "
                         "its %u pool%s may send and none of their examples is queued",
                         m->spec.n, m->spec.n == 1 ? "" : "s");
}

void
mix_split(const uint32_t *left, uint32_t n_sources, uint32_t want, uint32_t *counts)
{
    uint64_t total = 0;
    for (uint32_t s = 0; s < n_sources; s++)
        total += left[s];
    double owed[STOKER_MIX_MAX];
    for (uint32_t s = 0; s < n_sources; s++)
        owed[s] = total > 0 ? (double)left[s] * (double)want / (double)total : 0.0;
    stoker_mix_counts(n_sources, owed, want, counts);
}
