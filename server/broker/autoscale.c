// The autoscale signal (autoscale.h): per producer and trainer, time held or waiting,
// counted every tick; once a second a sample of examples and time, smoothed; on request, per
// pool, demand, supply per producer and the producers wanted, with a sentence saying why.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "mix.h"
#include "stoker/error.h"
#include "stoker/log.h"

#define AUTOSCALE_SCALED_MAX 1000000 // most producers a SCALED report may name

// One sample into m's EWMAs: `examples` made (or taken) over `active_ms`, the part of the span_ms
// sample in which it was at work (a producer making, a trainer not waiting for data). A meter's
// first sample is provisional and the second replaces it: what came before the first (a
// producer's start, its first chunks made but not yet accepted; a trainer's connection) is no
// steady rate, and blended into the EWMAs it read new producers' supply 25-40 % low for tens of
// seconds (bench.py --only autoscale: 48 examples/s per producer fell to 37 after a step up,
// and the controller overshot by the difference). It stays when no second comes (a producer
// that filled its queues at once and is held since: its start is all there is to go by).
static void
meter_add(autoscale_meter *m, double examples, double active_ms, uint64_t span_ms, double tau_ms)
{
    if (!m->sampled || m->provisional) {
        m->provisional = !m->sampled;
        m->ewma_count = examples;
        m->ewma_ms = active_ms;
        m->sampled = 1;
        return;
    }
    double alpha = 1.0 - exp(-(double)span_ms / tau_ms);
    m->ewma_count += alpha * (examples - m->ewma_count);
    m->ewma_ms += alpha * (active_ms - m->ewma_ms);
}

// A producer that says its making time (Push.make_us): the examples accepted over the time it
// spent making (exact whatever held it: full queues, a full retention buffer, a slow network).
static void
producer_sample_made(autoscale_meter *m, uint64_t count, uint64_t make_us, uint64_t span_ms)
{
    double examples = (double)(count - m->last_count);
    double made_ms = (double)(make_us - m->last_make_us) / 1000.0;
    if (made_ms <= 0)
        return; // no making time said (held throughout, or chunks made within a microsecond):
                // what it pushed counts with the next sample that has some
    m->last_count = count;
    m->last_make_us = make_us;
    meter_add(m, examples, made_ms, span_ms, AUTOSCALE_SUPPLY_TAU_MS);
}

// A producer that does not say its making time: the examples accepted over the time its pushes
// were not held by full queues. A sample held nearly throughout that counted nothing is left
// out (a producer waiting for room shows no rate).
static void
producer_sample_held(autoscale_meter *m, uint64_t count, uint64_t span_ms)
{
    uint64_t examples = count - m->last_count;
    uint64_t held = m->busy_ms - m->last_busy_ms;
    m->last_busy_ms = m->busy_ms;
    if (held > span_ms)
        held = span_ms;
    if (examples == 0 && held * 10 >= span_ms * 9)
        return;
    m->last_count = count;
    meter_add(m, (double)examples, (double)(span_ms - held), span_ms, AUTOSCALE_SUPPLY_TAU_MS);
}

// A trainer: demand = the examples it took / the time its caller did not wait for data, that
// is its rate / (1 - its wait share). The wait is what its pulls say its caller waited
// (Pull.data_wait_ms); a prefetched pull parked here while the caller trains on an earlier
// batch is no wait (counted as one, it made demand read 10-40 % high when the producers just
// kept up). A trainer that took nothing this sample says nothing new: then the time a pull of it
// sat parked here (busy_ms). The wait counts at most AUTOSCALE_WAIT_CAP of the span, and a
// trainer fed again after such samples starts afresh (AUTOSCALE_FED_SHARE).
static void
trainer_fold(autoscale_meter *m, uint64_t examples, uint64_t said, uint64_t busy, uint64_t span_ms)
{
    uint64_t waited = examples > 0 ? said : busy;
    double free_ms = (double)(waited < span_ms ? span_ms - waited : 0);
    if (free_ms < (1.0 - AUTOSCALE_WAIT_CAP) * (double)span_ms) {
        free_ms = (1.0 - AUTOSCALE_WAIT_CAP) * (double)span_ms;
        m->capped = 1;
    } else if (m->capped && (double)waited < AUTOSCALE_FED_SHARE * (double)span_ms) {
        m->capped = 0; // fed again: the capped samples said no rate, this one does
        m->sampled = 0;
    }
    meter_add(m, (double)examples, free_ms, span_ms, AUTOSCALE_DEMAND_TAU_MS);
}

// Closes a trainer's sample: folds in the one before it, now that the waits that belong to it
// (said with the pulls after its last batch) are in, and keeps this one pending.
static void
trainer_sample(autoscale_meter *m, uint64_t count, uint64_t span_ms)
{
    uint64_t examples = count - m->last_count;
    uint64_t busy = m->busy_ms - m->last_busy_ms;
    m->last_count = count;
    m->last_busy_ms = m->busy_ms;
    if (m->pend_span_ms > 0)
        trainer_fold(m, m->pend_examples, m->pend_wait_ms + m->wait_late_ms, m->pend_busy_ms,
                     m->pend_span_ms);
    m->pend_examples = examples;
    m->pend_wait_ms = m->wait_open_ms;
    m->pend_busy_ms = busy;
    m->pend_span_ms = span_ms;
    m->wait_open_ms = m->wait_late_ms = 0;
}

static uint64_t
trainer_examples(const trainer *t)
{
    return t->examples_shm + t->examples_socket;
}

// Notes when we last sent t a batch (at a tick, or at a pull of it that comes between two).
static void
trainer_sent_seen(trainer *t, uint64_t now_ms)
{
    if (trainer_examples(t) != t->meter.sent_count) {
        t->meter.sent_count = trainer_examples(t);
        t->meter.last_sent_ms = now_ms;
    }
}

void
autoscale_trainer_wait(broker *b, trainer *t, uint64_t wait_ms, uint64_t now_ms)
{
    if (wait_ms <= t->data_wait_ms) // pulls may overtake each other: keep the latest
        return;
    uint64_t grew = wait_ms - t->data_wait_ms;
    t->data_wait_ms = wait_ms;
    trainer_sent_seen(t, now_ms);
    // The wait ended with the batch we sent last (the caller waited for it): the part of it
    // before the open sample began belongs to the sample before (the one still pending; a wait
    // older than that counts there too, its own sample long folded in).
    uint64_t end = t->meter.last_sent_ms, start = b->autoscale_sample_ms;
    uint64_t before = end <= start ? grew : end - start >= grew ? 0 : grew - (end - start);
    t->meter.wait_late_ms += before;
    t->meter.wait_open_ms += grew - before;
}

// Examples per second of m's smoothed samples; 0 before any.
static double
meter_rate(const autoscale_meter *m)
{
    return m->sampled && m->ewma_ms > 0 ? m->ewma_count * 1000.0 / m->ewma_ms : 0.0;
}

typedef struct pool_sum {
    double accepted;   // smoothed examples per sample of its alive producers
    double supply_sum; // their rates while not held, summed
    uint32_t supplied; // producers with a rate
    uint32_t current;  // producers alive
} pool_sum;

// The pools of b's producers (names borrowed from them, at most AUTOSCALE_POOLS_MAX, in the
// order first seen) and each one's sums over its alive producers. Returns their number.
static uint32_t
pool_sums(const broker *b, const char *names[], pool_sum sums[])
{
    uint32_t n = 0;
    memset(sums, 0, AUTOSCALE_POOLS_MAX * sizeof(*sums));
    for (uint32_t i = 0; i < b->n_producers; i++) {
        const producer *p = b->producers[i];
        uint32_t k = 0;
        while (k < n && strcmp(names[k], p->pool) != 0)
            k++;
        if (k == n) {
            if (n == AUTOSCALE_POOLS_MAX)
                continue;
            names[n++] = p->pool;
        }
        if (p->status != STOKER_PRODUCER_ALIVE)
            continue;
        sums[k].current++;
        if (p->meter.sampled) {
            sums[k].accepted += p->meter.ewma_count;
            sums[k].supply_sum += meter_rate(&p->meter);
            sums[k].supplied++;
        }
    }
    return n;
}

// The pool's entry in b's spreads (a new one when it has none and one is free); NULL: none.
static autoscale_spread *
spread_of(broker *b, const char *pool, int add)
{
    autoscale_spread *free_one = NULL;
    for (uint32_t k = 0; k < AUTOSCALE_POOLS_MAX; k++) {
        autoscale_spread *s = &b->autoscale_spreads[k];
        if (strcmp(s->pool, pool) == 0 && s->pool[0] != '\0')
            return s;
        if (s->pool[0] == '\0' && free_one == NULL)
            free_one = s;
    }
    if (!add || free_one == NULL)
        return NULL;
    memset(free_one, 0, sizeof(*free_one));
    snprintf(free_one->pool, sizeof(free_one->pool), "%s", pool);
    return free_one;
}

// Records each pool's supply per producer (the mean of its alive producers' smoothed rates, as
// the signal says it) in its spread, as sample number n.
static void
spread_record(broker *b, uint64_t n)
{
    const char *names[AUTOSCALE_POOLS_MAX];
    pool_sum sums[AUTOSCALE_POOLS_MAX];
    uint32_t n_pools = pool_sums(b, names, sums);
    for (uint32_t k = 0; k < n_pools; k++) {
        autoscale_spread *s = sums[k].supplied > 0 ? spread_of(b, names[k], 1) : NULL;
        if (s == NULL)
            continue;
        uint32_t slot = (uint32_t)(n % AUTOSCALE_SPREAD_SLOTS);
        s->supply[slot] = sums[k].supply_sum / sums[k].supplied;
        s->sample_of[slot] = n + 1;
    }
}

// The lowest and highest supply per producer of pool over the spread's window, now included.
static void
spread_range(const broker *b, const char *pool, double now, double *lo, double *hi)
{
    *lo = *hi = now;
    uint64_t n = b->autoscale_samples;
    const autoscale_spread *s = spread_of((broker *)b, pool, 0); // add 0: only looks
    if (s == NULL)
        return;
    for (uint32_t j = 0; j < AUTOSCALE_SPREAD_SLOTS; j++) {
        if (s->sample_of[j] == 0 || s->sample_of[j] + AUTOSCALE_SPREAD_SLOTS < n + 1)
            continue; // empty, or older than the window
        if (s->supply[j] < *lo)
            *lo = s->supply[j];
        if (s->supply[j] > *hi)
            *hi = s->supply[j];
    }
}

void
autoscale_tick(broker *b, uint64_t now_ms)
{
    uint64_t dt = b->autoscale_tick_ms != 0 && now_ms > b->autoscale_tick_ms
                      ? now_ms - b->autoscale_tick_ms
                      : 0;
    b->autoscale_tick_ms = now_ms;
    for (uint32_t i = 0; i < b->n_producers; i++) {
        producer *p = b->producers[i];
        // Held: its maker stands still only when every push it has in flight waits for room
        // (it makes the next chunk while one push waits); two parked, or told "no room".
        uint32_t n_parked = 0;
        for (const parked *k = p->pushes; k != NULL && n_parked < 2; k = k->next)
            n_parked++;
        if ((n_parked >= 2 && push_waits_for_room(p)) || p->no_room_at == p->next_seq + 1)
            p->meter.busy_ms += dt;
    }
    for (uint32_t i = 0; i < b->n_trainers; i++) {
        trainer *t = b->trainers[i];
        trainer_sent_seen(t, now_ms);
        if (t->connected && t->parked_pulls > 0) {
            t->meter.busy_ms += dt;
            b->last_pull_ms = now_ms;
        }
    }
    if (b->autoscale_sample_ms == 0) {
        b->autoscale_sample_ms = now_ms;
        return;
    }
    if (now_ms - b->autoscale_sample_ms < AUTOSCALE_SAMPLE_MS)
        return;
    uint64_t span = now_ms - b->autoscale_sample_ms;
    b->autoscale_sample_ms = now_ms;
    for (uint32_t i = 0; i < b->n_producers; i++) {
        producer *p = b->producers[i];
        if (p->status != STOKER_PRODUCER_ALIVE || p->accepted == 0)
            continue; // no push of it in yet: no word on its rate
        if (p->make_us > 0)
            producer_sample_made(&p->meter, p->accepted, p->make_us, span);
        else
            producer_sample_held(&p->meter, p->accepted, span);
    }
    spread_record(b, b->autoscale_samples++);
    for (uint32_t i = 0; i < b->n_trainers; i++) {
        trainer *t = b->trainers[i];
        if (trainer_examples(t) != t->meter.last_count)
            b->last_pull_ms = now_ms;
        if (t->connected) {
            trainer_sample(&t->meter, trainer_examples(t), span);
        } else { // a trainer gone demands nothing; back, it starts afresh
            t->meter.sampled = t->meter.capped = 0;
            t->meter.last_count = trainer_examples(t);
            t->meter.last_busy_ms = t->meter.busy_ms;
            t->meter.pend_span_ms = 0;
            t->meter.wait_open_ms = t->meter.wait_late_ms = 0;
        }
    }
}

static void
decide(const broker *b, stoker_pool_info *d, const pool_sum *s, double demand, int idle)
{
    const broker_config *c = &b->cfg;
    d->current = s->current;
    d->demand = demand;
    d->supply = s->supplied > 0 ? s->supply_sum / s->supplied : 0.0;
    if (d->supply > 0)
        spread_range(b, d->name, d->supply, &d->supply_low, &d->supply_high);
    double want;
    if (idle) {
        want = c->autoscale_min;
        snprintf(d->why, sizeof(d->why), "no trainer is pulling: the minimum, %u",
                 c->autoscale_min);
    } else if (d->supply <= 0) {
        want = s->current;
        snprintf(d->why, sizeof(d->why), "no producer's rate measured yet: keep the %u there",
                 s->current);
    } else {
        // The headroom to the nearest producer, and never fewer than meet the demand: a ceil
        // of demand x headroom / supply adds a whole producer for a hair of noise when that sits
        // near a whole number (250/s at 49.7 per producer wants 6.04: 7, 1.4x the 5 needed).
        double ratio = demand * c->autoscale_headroom / d->supply;
        double meet = ceil(demand / d->supply - 1e-9);
        want = floor(ratio + 0.5);
        if (want < meet)
            want = meet;
        snprintf(d->why, sizeof(d->why),
                 "trainers would take %.1f examples/s, one producer makes %.1f: %.1f x %.2f / "
                 "%.1f = %.2f, to the nearest producer and at least the %.0f that meet the "
                 "demand: %.0f",
                 demand, d->supply, demand, c->autoscale_headroom, d->supply, ratio, meet, want);
    }
    if (want < c->autoscale_min)
        want = c->autoscale_min;
    if (want > c->autoscale_max)
        want = c->autoscale_max;
    d->wanted = (uint32_t)want;
}

// Job j's demand on the n pools (names): its trainers' rates, a mixed trainer's by its weights
// into pool_demand[k], an unmixed one's into *unmixed. Returns its total.
static double
job_demand(const broker *j, const char *const *names, uint32_t n, double *unmixed,
           double *pool_demand)
{
    double demand = 0;
    for (uint32_t i = 0; i < j->n_trainers; i++) {
        const trainer *t = j->trainers[i];
        if (!t->connected)
            continue;
        double rate = meter_rate(&t->meter);
        demand += rate;
        if (t->mix == NULL) {
            *unmixed += rate;
            continue;
        }
        for (uint32_t s = 0; s < t->mix->spec.n; s++)
            for (uint32_t k = 0; k < n; k++)
                if (strcmp(names[k], t->mix->spec.names[s]) == 0)
                    pool_demand[k] += rate * t->mix->share[s];
    }
    return demand;
}

int
autoscale_report(const broker *b, uint64_t now_ms, stoker_status *st)
{
    const char *names[AUTOSCALE_POOLS_MAX];
    pool_sum sums[AUTOSCALE_POOLS_MAX];
    uint32_t n = pool_sums(b, names, sums);
    double total_accepted = 0;
    uint32_t total_alive = 0;
    for (uint32_t k = 0; k < n; k++) {
        total_accepted += sums[k].accepted;
        total_alive += sums[k].current;
    }
    // A trainer with a mixture wants each pool's share of what it takes (its weights); the
    // others' demand falls on the pools as they supply it now (below). Jobs sharing the
    // producers (jobs.c) take the same examples: a pool's demand is its most demanding job's,
    // plus what is made again for a job alone (a dataset's job that joined late or lags under
    // --job-policy remake: the share of its intake made again, at its rate).
    double demand = 0, unmixed = 0, mixed[AUTOSCALE_POOLS_MAX] = {0}, again = 0;
    for (uint32_t i = 0; i <= b->n_followers; i++) {
        const broker *j = i == 0 ? b : b->followers[i - 1];
        if (i > 0 && j->job_state != STOKER_JOB_RUNNING && j->job_state != STOKER_JOB_ABSENT)
            continue;
        double job_unmixed = 0, job_mixed[AUTOSCALE_POOLS_MAX] = {0};
        double total = job_demand(j, names, n, &job_unmixed, job_mixed);
        double alone = j->c.produced > 0 ? (double)j->job_remade / (double)j->c.produced : 0;
        again += total * alone;
        total -= total * alone;
        job_unmixed -= job_unmixed * alone;
        demand = total > demand ? total : demand;
        unmixed = job_unmixed > unmixed ? job_unmixed : unmixed;
        for (uint32_t k = 0; k < n; k++)
            mixed[k] = job_mixed[k] > mixed[k] ? job_mixed[k] : mixed[k];
    }
    demand += again;
    unmixed += again;
    int idle = demand <= 0 && (b->last_pull_ms == 0 || now_ms - b->last_pull_ms > 1000);
    st->has_autoscale = 1;
    st->autoscale_headroom = b->cfg.autoscale_headroom;
    st->autoscale_min = b->cfg.autoscale_min;
    st->autoscale_max = b->cfg.autoscale_max;
    st->idle_s = b->last_pull_ms != 0 ? (double)(now_ms - b->last_pull_ms) / 1000.0 : -1.0;
    st->pools = calloc(n ? n : 1, sizeof(*st->pools));
    if (st->pools == NULL)
        return STOKER_NOMEM;
    for (uint32_t k = 0; k < n; k++) {
        // The unmixed trainers' demand falls on the pools as they supply it now (by producers
        // alive before any rate is known).
        double share = total_accepted > 0 ? sums[k].accepted / total_accepted
                       : total_alive > 0  ? (double)sums[k].current / total_alive
                                          : 1.0 / n;
        snprintf(st->pools[k].name, sizeof(st->pools[k].name), "%s", names[k]);
        decide(b, &st->pools[k], &sums[k], unmixed * share + mixed[k], idle);
    }
    st->n_pools = n;
    return STOKER_OK;
}

int
autoscale_scaled(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
                 broker_outbox *out)
{
    (void)pipe;
    if (req->pool[0] == '\0' || req->scaled_to > AUTOSCALE_SCALED_MAX ||
        req->scaled_from > AUTOSCALE_SCALED_MAX) {
        send_code(b, out, token, STOKER_INVALID,
                  "scaled: needs a pool and counts up to %u (got pool '%s', from %u to %u)",
                  AUTOSCALE_SCALED_MAX, req->pool, req->scaled_from, req->scaled_to);
        return 0;
    }
    const char *engine = req->engine[0] != '\0' ? req->engine : "an engine";
    stoker_info("scaled: pool '%s' from %u to %u by %s: %s", req->pool, req->scaled_from,
                req->scaled_to, engine, req->why);
    stoker_event *e = new_event(b, STOKER_EVENT_SCALED, now_ms);
    snprintf(e->name, sizeof(e->name), "%s", req->pool);
    e->scaled_from = req->scaled_from;
    e->scaled_to = req->scaled_to;
    snprintf(e->reason, sizeof(e->reason), "from %u to %u (%s): %s", req->scaled_from,
             req->scaled_to, engine, req->why);
    send_code(b, out, token, STOKER_OK, NULL);
    return 0;
}
