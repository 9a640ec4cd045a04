// Jobs sharing the producers (see jobs.h): followers' mirrors of the lead's producers, a push
// queued for every job, the producers' room judged by every job, what a producer may forget by
// every job, and the jobs' lives (running, absent, ended).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "epoch.h"
#include "internal.h"
#include "jobs.h"
#include "stoker/error.h"
#include "stoker/log.h"

// At most this many trained spans of one job are looked at when telling a producer what every
// job trained: leaving some out only makes a producer keep more (safe).
#define TRAINED_SPANS 64

static const broker *
lead_of(const broker *b)
{
    return b->lead != NULL ? b->lead : b;
}

// Whether job b takes examples: named (a trainer said hello) and not ended. The lead before its
// first trainer keeps what producers push, as a lone broker does.
static int
takes(const broker *b)
{
    return b->job_state == STOKER_JOB_RUNNING || b->job_state == STOKER_JOB_ABSENT;
}

int
jobs_is(const broker *b, const char *name)
{
    return b->job_named ? strcmp(b->job, name) == 0 : name[0] == '\0';
}

int
jobs_takes(const broker *b)
{
    return takes(b);
}

int
jobs_shared(const broker *b)
{
    const broker *l = lead_of(b);
    uint32_t n = takes(l) ? 1 : 0;
    for (uint32_t i = 0; i < l->n_followers; i++)
        n += takes(l->followers[i]);
    return n > 1;
}

uint64_t
jobs_lag(const broker *b)
{
    if (!jobs_shared(b))
        return 0;
    return b->cfg.job_lag > 0 ? b->cfg.job_lag : b->queue_depth;
}

// The mirror of lead producer p in follower f, made when missing with every seq below from
// counted trained (the job never takes them). NULL when out of memory or room.
static producer *
mirror(broker *f, const producer *p, uint64_t from)
{
    producer *m = find_producer_id(f, p->id);
    if (m != NULL)
        return m;
    if (f->n_producers >= f->cfg.max_producers || (m = calloc(1, sizeof(*m))) == NULL) {
        stoker_error("job '%s': no room to mirror producer %u '%s'", f->job, p->id, p->name);
        return NULL;
    }
    m->id = p->id;
    m->session = p->session;
    m->status = p->status;
    m->next_seq = from;
    m->last_seen_ms = p->last_seen_ms;
    snprintf(m->name, sizeof(m->name), "%s", p->name);
    snprintf(m->pool, sizeof(m->pool), "%s", p->pool);
    queue_init(&m->q, &f->schema);
    trained_init(&m->trained, from);
    trained_reported_apply(f, m); // what this job's trainers said they trained (a restart)
    f->producers[f->n_producers++] = m;
    return m;
}

int
jobs_fits(const broker *b, const producer *m, uint64_t fresh, uint64_t bytes)
{
    uint64_t depth = b->queue_depth + jobs_lag(b);
    if (b->cfg.queue_depth_auto && m->q.examples == 0 && fresh > depth)
        depth = fresh; // an empty sized queue takes any chunk (push.c)
    return m->q.examples + fresh <= depth && bytes <= commit_bytes_room(b);
}

int
jobs_push_fits(const broker *b, const producer *p, uint32_t fresh, uint64_t bytes)
{
    for (uint32_t i = 0; i < b->n_followers; i++) {
        const broker *f = b->followers[i];
        const producer *m = takes(f) ? find_producer_id(f, p->id) : NULL;
        if (m != NULL && !jobs_fits(f, m, fresh, bytes))
            return 0;
    }
    return 1;
}

int
jobs_have_room(const broker *b, const producer *p)
{
    uint64_t chunk = p->last_chunk > 0 ? p->last_chunk : 1;
    for (uint32_t i = 0; i < b->n_followers; i++) {
        const broker *f = b->followers[i];
        const producer *m = takes(f) ? find_producer_id(f, p->id) : NULL;
        if (m != NULL && !jobs_fits(f, m, chunk, f->example_bytes))
            return 0;
    }
    return 1;
}

// Whether every job of lead l that takes examples trained seq of producer id.
static int
all_trained(const broker *l, uint32_t id, uint64_t seq)
{
    uint64_t next;
    const producer *p = find_producer_id(l, id);
    if (takes(l) && p != NULL && !trained_has(&p->trained, seq, &next))
        return 0;
    for (uint32_t i = 0; i < l->n_followers; i++) {
        const broker *f = l->followers[i];
        const producer *m = takes(f) ? find_producer_id(f, id) : NULL;
        if (m != NULL && !trained_has(&m->trained, seq, &next))
            return 0;
    }
    return 1;
}

// The runs of r that every job has trained, acknowledged in lead l's epochs.
static void
epochs_acked_by_all(broker *l, uint32_t id, const queue_range *r, uint64_t now_ms)
{
    uint32_t i = 0;
    while (i < r->count) {
        uint32_t j = i;
        while (j < r->count && all_trained(l, id, r->first_seq + j))
            j++;
        if (j > i) {
            queue_range run = *r;
            run.first += i;
            run.count = j - i;
            run.first_seq += i;
            epochs_acked(l, &run, now_ms);
        }
        while (j < r->count && !all_trained(l, id, r->first_seq + j))
            j++;
        i = j;
    }
}

void
jobs_acked(broker *b, const producer *p, const queue_range *r, uint64_t now_ms)
{
    broker *l = b->lead != NULL ? b->lead : b;
    if (l->epochs == NULL)
        return;
    if (l->n_followers == 0)
        epochs_acked(l, r, now_ms);
    else
        epochs_acked_by_all(l, p->id, r, now_ms);
}

int
jobs_started(const broker *b)
{
    int started = b->c.delivered > 0;
    for (uint32_t i = 0; i < b->n_followers; i++)
        started = started || b->followers[i]->c.delivered > 0;
    return started;
}

// Frees what job b (just ended) holds queued, counted released; with a dataset, its items that
// every other job trained are acknowledged in the lead's epochs (this job no longer holds them
// back).
static void
release_queues(broker *b, uint64_t now_ms)
{
    broker *l = b->lead != NULL ? b->lead : b;
    uint64_t n = 0;
    for (uint32_t i = 0; i < b->n_producers; i++) {
        producer *p = b->producers[i];
        queue_range r;
        uint32_t got;
        while ((got = queue_take(&p->q, UINT32_MAX, &r)) > 0) {
            if (l->epochs != NULL)
                epochs_acked_by_all(l, p->id, &r, now_ms);
            queue_range_release(&r);
            n += got;
        }
        queue_fini(&p->q);
    }
    b->c.queued -= n;
    b->c.released += n;
    b->queued_bytes = 0;
}

void
jobs_appended(broker *b, producer *p, uint32_t fresh, uint64_t bytes)
{
    const queue_range *tail = queue_tail(&p->q);
    if (tail == NULL)
        return;
    queue_range r = *tail;
    for (uint32_t i = 0; i < b->n_followers; i++) {
        broker *f = b->followers[i];
        producer *m = takes(f) ? mirror(f, p, r.first_seq) : NULL;
        if (m == NULL)
            continue;
        const uint64_t *items = f->job_from_epoch > 0 ? queue_range_items(&r) : NULL;
        if (items != NULL && EPOCH_OF(items[0]) < f->job_from_epoch) {
            // An epoch before the one a late job starts with: not its (a push holds one
            // shard's items, all of one epoch); counted trained for it, so that it holds
            // neither the producer's retention nor the epoch's end.
            trained_add(&m->trained, r.first_seq, fresh);
            m->next_seq = p->next_seq;
            continue;
        }
        if (queue_append_range(&m->q, &r) != STOKER_OK) {
            // Out of memory: the job cannot get these; said, and never counted as queued.
            stoker_error("job '%s': lost %u examples of producer %u '%s' (out of memory)", f->job,
                         fresh, p->id, p->name);
            continue;
        }
        m->accepted += fresh;
        m->next_seq = p->next_seq;
        f->c.produced += fresh;
        f->c.queued += fresh;
        f->queued_bytes += bytes;
    }
    if (!takes(b) && b->job_named) {
        // The lead's own job ended: it keeps nothing for it.
        queue_range got;
        uint32_t n = queue_take_seq(&p->q, r.first_seq, fresh, &got);
        queue_range_release(&got);
        b->c.queued -= n;
        b->queued_bytes -= bytes;
        b->c.released += n;
        trained_add(&p->trained, r.first_seq, n);
    }
}

// --- what every job trained ---------------------------------------------------------------------

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
    if (takes(b) || !b->job_named) {
        n = spans_of(&p->trained, acc, TRAINED_SPANS);
        any = 1;
    }
    for (uint32_t i = 0; i < b->n_followers; i++) {
        const broker *f = b->followers[i];
        const producer *m = takes(f) ? find_producer_id(f, p->id) : NULL;
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

// --- finding and starting jobs ------------------------------------------------------------------

broker *
jobs_find_trainer(const broker *b, uint64_t session)
{
    for (uint32_t i = 0; i < b->n_followers; i++)
        if (find_trainer(b->followers[i], session) != NULL)
            return b->followers[i];
    return NULL;
}

broker *
jobs_find(broker *b, const char *name)
{
    if (b->job_named && strcmp(b->job, name) == 0)
        return b;
    for (uint32_t i = 0; i < b->n_followers; i++)
        if (strcmp(b->followers[i]->job, name) == 0)
            return b->followers[i];
    return NULL;
}

void
jobs_start(broker *b, const char *name, uint64_t now_ms)
{
    int again = b->job_named;
    snprintf(b->job, sizeof(b->job), "%s", name);
    b->job_named = 1;
    b->job_state = STOKER_JOB_RUNNING;
    b->job_joined_ms = now_ms;
    b->job_absent_ms = 0;
    b->job_end_reason[0] = '\0';
    if (again) // it ended: it starts from the examples made from now on
        for (uint32_t i = 0; i < b->n_producers; i++)
            trained_init(&b->producers[i]->trained, b->producers[i]->next_seq);
}

int
jobs_add(broker *b, broker *f, const char *name, uint64_t now_ms)
{
    if (b->followers == NULL && (b->followers = calloc(JOBS_MAX, sizeof(*b->followers))) == NULL)
        return STOKER_NOMEM;
    if (b->n_followers + 1 >= JOBS_MAX)
        return STOKER_NOMEM;
    f->lead = b;
    snprintf(f->job, sizeof(f->job), "%s", name);
    f->job_named = 1;
    f->job_state = STOKER_JOB_RUNNING;
    f->job_joined_ms = now_ms;
    b->followers[b->n_followers++] = f;
    // Jobs that start together get the same examples: while no job was handed any, a new one
    // takes a copy of what the lead holds.
    int fresh_start = !jobs_started(b);
    jobs_sync(b, now_ms);
    for (uint32_t i = 0; fresh_start && i < b->n_producers; i++) {
        producer *p = b->producers[i];
        if (p->q.examples == 0)
            continue;
        producer *m = find_producer_id(f, p->id);
        if (m == NULL)
            continue;
        uint64_t head = queue_head_seq(&p->q);
        trained_init(&m->trained, head);
        uint64_t n = queue_copy(&m->q, &p->q);
        m->accepted += n;
        f->c.produced += n;
        f->c.queued += n;
        f->queued_bytes += m->q.bytes;
    }
    stoker_info(
        "job-joined: job '%s' shares the producers with %u other job(s), %s", name, b->n_followers,
        fresh_start ? "from the first example queued" : "from the examples made from now on");
    return STOKER_OK;
}

int
jobs_add_late(broker *b, broker *f, const char *name, uint32_t epoch, uint64_t now_ms)
{
    f->job_from_epoch = epoch;
    int rv = jobs_add(b, f, name, now_ms);
    if (rv == STOKER_OK)
        stoker_info("job-joined: job '%s' joins the dataset late: it takes every item once per "
                    "epoch from epoch %u on",
                    name, epoch);
    return rv;
}

void
jobs_remove(broker *b, broker *f)
{
    for (uint32_t i = 0; i < b->n_followers; i++)
        if (b->followers[i] == f) {
            b->followers[i] = b->followers[--b->n_followers];
            return;
        }
}

// --- mirrors ------------------------------------------------------------------------------------

// The lead's events about producers (and pools) since the last sync, into f's log: its trainers
// hear of a producer lost as the lead's do.
static void
mirror_events(broker *b, broker *f, uint64_t now_ms)
{
    uint64_t from = b->job_events_synced + 1;
    if (b->n_events >= EVENT_LOG && from < b->n_events - EVENT_LOG + 1)
        from = b->n_events - EVENT_LOG + 1;
    for (uint64_t i = from; i <= b->n_events; i++) {
        const stoker_event *e = &b->events[(i - 1) % EVENT_LOG];
        if (e->producer == 0 && e->kind != STOKER_EVENT_SCALED && e->kind != STOKER_EVENT_EPOCH_END)
            continue;
        stoker_event *c = new_event(f, e->kind, now_ms);
        uint64_t index = c->index;
        *c = *e;
        c->index = index;
    }
}

void
jobs_sync(broker *b, uint64_t now_ms)
{
    for (uint32_t i = 0; i < b->n_followers; i++) {
        broker *f = b->followers[i];
        if (b->has_schema && !f->has_schema) {
            f->has_schema = 1;
            f->schema = b->schema;
            f->example_bytes = b->example_bytes;
        }
        f->returning_until_ms = b->returning_until_ms;
        f->epochs = b->epochs; // borrowed: its items are acknowledged by every job (jobs_acked)
        if (!f->has_schema)
            continue;
        for (uint32_t k = 0; k < b->n_producers; k++) {
            const producer *p = b->producers[k];
            producer *m = mirror(f, p, p->next_seq);
            if (m == NULL)
                continue;
            m->session = p->session;
            m->status = p->status;
            m->last_seen_ms = p->last_seen_ms;
            m->silent_until_ms = p->silent_until_ms;
            m->done_making = p->done_making;
            m->last_chunk = p->last_chunk;
            m->max_chunk = p->max_chunk;
            m->make_us = p->make_us;
            // Seqs that never reached this job (a producer's hello jumped over them: trained
            // before): trained for it too, or what every job trained would stop at them.
            if (p->next_seq > m->next_seq)
                trained_add(&m->trained, m->next_seq, p->next_seq - m->next_seq);
            m->next_seq = p->next_seq;
        }
        mirror_events(b, f, now_ms);
    }
    b->job_events_synced = b->n_events;
}

// --- the jobs' lives ----------------------------------------------------------------------------

// Ends job b: its queued examples are freed (counted released), it takes nothing more.
static void
end_job(broker *b, const char *reason, uint64_t now_ms)
{
    b->job_state = STOKER_JOB_ENDED;
    snprintf(b->job_end_reason, sizeof(b->job_end_reason), "%s", reason);
    uint64_t held = b->c.queued;
    release_queues(b, now_ms);
    stoker_info("job-ended: job '%s': %s; %llu examples queued for it freed", b->job, reason,
                (unsigned long long)held);
}

// Job b's state now; ends it when it is gone and another job goes on.
static void
job_tick(broker *b, uint64_t now_ms, int others)
{
    if (!takes(b))
        return;
    uint32_t connected = 0, left = 0;
    for (uint32_t i = 0; i < b->n_trainers; i++) {
        connected += b->trainers[i]->connected;
        left += !b->trainers[i]->connected && b->trainers[i]->left;
    }
    if (connected > 0) {
        b->job_state = STOKER_JOB_RUNNING;
        b->job_absent_ms = 0;
        return;
    }
    if (b->job_state == STOKER_JOB_RUNNING) {
        b->job_state = STOKER_JOB_ABSENT;
        b->job_absent_ms = now_ms;
    }
    if (!others)
        return; // a job alone keeps what it has, as a broker without jobs does
    char reason[160];
    if (left > 0 && left == b->n_trainers) {
        end_job(b, "its consumers said goodbye", now_ms);
    } else if (now_ms >= b->job_absent_ms + b->cfg.job_timeout_ms) {
        snprintf(reason, sizeof(reason),
                 "no consumer of it connected for %.1f s (--job-timeout) while other jobs went on",
                 (double)(now_ms - b->job_absent_ms) / 1000.0);
        end_job(b, reason, now_ms);
    }
}

// Producer p's queue in job j of lead l (its mirror in a follower), or NULL.
static const producer *
queue_of(const broker *l, const broker *j, const producer *p)
{
    return j == l ? p : find_producer_id(j, p->id);
}

// Whether job j of lead l lags beyond its bound: for some alive producer, j's queue cannot take
// the producer's next chunk even with --job-lag, while another job's has room within the depth.
static int
lags(const broker *l, const broker *j)
{
    for (uint32_t i = 0; i < l->n_producers; i++) {
        const producer *p = l->producers[i];
        const producer *own = queue_of(l, j, p);
        uint64_t chunk = p->last_chunk > 0 ? p->last_chunk : 1;
        if (p->status != STOKER_PRODUCER_ALIVE || own == NULL ||
            own->q.examples + chunk <= j->queue_depth + jobs_lag(j))
            continue;
        for (uint32_t k = 0; k <= l->n_followers; k++) {
            const broker *o = k == 0 ? l : l->followers[k - 1];
            const producer *theirs = o != j && takes(o) ? queue_of(l, o, p) : NULL;
            if (theirs != NULL && theirs->q.examples + chunk <= o->queue_depth)
                return 1;
        }
    }
    return 0;
}

// Whether a consumer of job j pulled yet: one still starting (connecting, loading its model) is
// not detached for lagging; the producers wait for it meanwhile, within the lag.
static int
pulled(const broker *j)
{
    for (uint32_t i = 0; i < j->n_trainers; i++)
        if (j->trainers[i]->pulled)
            return 1;
    return 0;
}

// Detaches job j of lead l (--job-policy detach): what it holds is freed, its consumers hear a
// job_detached event and then the end of their supply, the others go on.
static void
detach(broker *l, broker *j, uint64_t now_ms)
{
    char reason[160];
    snprintf(reason, sizeof(reason),
             "it lagged more than %llu examples per producer behind the other jobs (--job-lag, "
             "--job-policy detach)",
             (unsigned long long)jobs_lag(j));
    end_job(j, reason, now_ms);
    j->job_state = STOKER_JOB_DETACHED;
    for (broker *log = j;; log = l) {
        stoker_event *e = new_event(log, STOKER_EVENT_JOB_DETACHED, now_ms);
        snprintf(e->name, sizeof(e->name), "%s", j->job);
        snprintf(e->reason, sizeof(e->reason), "job '%s' was detached: %s", j->job, reason);
        if (log == l)
            break;
    }
    stoker_warn("job-detached: job '%s': %s", j->job, reason);
}

// Job j's rate: examples delivered per second over the last second or more, smoothed.
static void
job_rate(broker *j, uint64_t now_ms)
{
    if (j->job_rate_ms == 0 || now_ms < j->job_rate_ms) {
        j->job_rate_ms = now_ms;
        j->job_rate_delivered = j->c.delivered;
        return;
    }
    if (now_ms - j->job_rate_ms < 1000)
        return;
    double now = (double)(j->c.delivered - j->job_rate_delivered) * 1000.0 /
                 (double)(now_ms - j->job_rate_ms);
    j->job_rate = j->job_rate > 0 ? 0.5 * j->job_rate + 0.5 * now : now;
    j->job_rate_ms = now_ms;
    j->job_rate_delivered = j->c.delivered;
}

void
jobs_tick(broker *b, uint64_t now_ms)
{
    job_rate(b, now_ms);
    for (uint32_t i = 0; i < b->n_followers; i++)
        job_rate(b->followers[i], now_ms);
    if (b->n_followers == 0)
        return;
    if (b->job_named)
        job_tick(b, now_ms, jobs_shared(b));
    for (uint32_t i = 0; i < b->n_followers; i++)
        job_tick(b->followers[i], now_ms, jobs_shared(b));
    if (!b->cfg.job_detach || b->epochs != NULL)
        return;
    for (uint32_t i = 0; i <= b->n_followers && jobs_shared(b); i++) {
        broker *j = i == 0 ? b : b->followers[i - 1];
        if (takes(j) && (i > 0 || b->job_named) && pulled(j) && lags(b, j))
            detach(b, j, now_ms);
    }
}

int
jobs_detached(const broker *b, char *why, size_t why_len)
{
    if (b->job_state != STOKER_JOB_DETACHED)
        return 0;
    snprintf(why, why_len, "job '%s' was detached: %s", b->job, b->job_end_reason);
    return 1;
}
