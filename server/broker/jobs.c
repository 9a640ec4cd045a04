// Jobs sharing the producers (see jobs.h): followers' mirrors of the lead's producers, a push
// queued for every job, the producers' room judged by every job, what a producer may forget by
// every job, and the jobs' lives (running, absent, ended).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "epoch.h"
#include "internal.h"
#include "jobs.h"
#include "remake.h"
#include "stoker/error.h"
#include "stoker/log.h"

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

// The set of job j whose members r's items are (copies made again for j: a push holds one shard's
// items, all made again or none), or NULL.
static remake *
remade_range(const broker *j, const queue_range *r)
{
    const uint64_t *items =
        j->remakes[0] != NULL || j->remakes[1] != NULL ? queue_range_items(r) : NULL;
    remake *set = items != NULL ? remake_find(j->remakes, EPOCH_OF(items[0])) : NULL;
    return set != NULL && remake_is_member(set, (uint32_t)EPOCH_INDEX(items[0])) ? set : NULL;
}

void
jobs_acked(broker *b, const producer *p, const queue_range *r, uint64_t now_ms)
{
    broker *l = b->lead != NULL ? b->lead : b;
    if (l->epochs == NULL)
        return;
    epochs_job_acked(b, r, now_ms);
    remake *set = remade_range(b, r);
    if (set != NULL) { // b's own copies: its epoch may end now, the shared ones are counted apart
        remake_acked(set, r->count);
        if (remake_complete(set) && set->pending_count == 0) {
            for (uint32_t k = 0; k < REMAKE_SETS; k++)
                if (b->remakes[k] == set)
                    b->remakes[k] = NULL;
            remake_destroy(set);
            b->job_remaking = b->remakes[0] != NULL || b->remakes[1] != NULL;
        }
        return;
    }
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
            if (l->epochs != NULL && remade_range(b, &r) == NULL)
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

int
jobs_owes_before(const broker *j, uint32_t epoch)
{
    for (uint32_t k = 0; k < REMAKE_SETS; k++)
        if (j->remakes[k] != NULL && !remake_complete(j->remakes[k]) &&
            j->remakes[k]->epoch < epoch)
            return 1;
    return 0;
}

// Job j passes over count items (of one epoch): it has no room for them (--job-policy remake),
// or, with strict epochs, still waits for copies of an earlier epoch; they are made again for it
// by index once it has room (jobs_may_pass checked there is a set for them).
static void
pass_over(broker *j, const uint64_t *items, uint32_t count, uint64_t now_ms)
{
    uint32_t epoch = EPOCH_OF(items[0]);
    remake *set = remake_find(j->remakes, epoch);
    for (uint32_t k = 0; set == NULL && k < REMAKE_SETS; k++)
        if (j->remakes[k] == NULL)
            set = j->remakes[k] = remake_create(epochs_items(lead_of(j)->epochs), epoch);
    // Told once, when it lags (not when it is only behind in its strict epochs: a late job).
    if (!j->job_remaking && !jobs_owes_before(j, epoch)) {
        j->job_remaking = 1;
        broker *l = j->lead != NULL ? j->lead : j;
        for (broker *log = j;; log = l) {
            stoker_event *e = new_event(log, STOKER_EVENT_JOB_REMAKING, now_ms);
            snprintf(e->name, sizeof(e->name), "%s", j->job);
            snprintf(e->reason, sizeof(e->reason),
                     "job '%s' lags more than %llu examples per producer behind the others "
                     "(--job-lag): what it has no room for is made again for it by index "
                     "(--job-policy remake)",
                     j->job, (unsigned long long)jobs_lag(j));
            if (log == l)
                break;
        }
        stoker_info("job-remaking: job '%s' lags: the items it has no room for are made again "
                    "for it once it has room",
                    j->job);
    }
    for (uint32_t k = 0; set != NULL && k < count; k++)
        if (remake_add(set, (uint32_t)EPOCH_INDEX(items[k])) != STOKER_OK)
            set = NULL;
    if (set == NULL)
        stoker_error("job '%s': out of memory passing over %u items of epoch %u: that epoch "
                     "cannot end",
                     j->job, count, epoch);
}

// Takes the examples just appended to the lead's queue of p (range r) out again: the lead's job
// does not take them (it ended, they were made again for other jobs, or it passes them over).
static void
lead_skips(broker *b, producer *p, const queue_range *r, uint64_t bytes)
{
    queue_range got;
    uint32_t n = queue_take_seq(&p->q, r->first_seq, r->count, &got);
    queue_range_release(&got);
    b->c.queued -= n;
    b->queued_bytes -= bytes;
    b->c.released += n;
    trained_add(&p->trained, r->first_seq, n);
}

void
jobs_appended(broker *b, producer *p, uint32_t fresh, uint64_t bytes, uint32_t takers,
              uint32_t passed, uint64_t now_ms)
{
    const queue_range *tail = queue_tail(&p->q);
    if (tail == NULL)
        return;
    queue_range r = *tail;
    const uint64_t *items = queue_range_items(&r);
    for (uint32_t i = 0; i < b->n_followers; i++) {
        broker *f = b->followers[i];
        producer *m = takes(f) ? mirror(f, p, r.first_seq) : NULL;
        if (m == NULL)
            continue;
        uint32_t bit = 1u << f->job_slot;
        if (!(takers & bit) || (passed & bit) ||
            (items != NULL && EPOCH_OF(items[0]) < f->job_from_epoch)) {
            // Not its: made again for other jobs, or of an epoch before the one a late job
            // starts with (a push holds one shard's items, all of one epoch), or passed over (made
            // again for it later); counted trained for it, so that it holds neither the
            // producer's retention nor the epoch's end.
            if (passed & bit)
                pass_over(f, items, fresh, now_ms);
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
        f->job_remade += takers != JOBS_ALL ? fresh : 0;
    }
    if (passed & 1)
        pass_over(b, items, fresh, now_ms);
    if ((!takes(b) && b->job_named) || !(takers & 1) || (passed & 1))
        lead_skips(b, p, &r, bytes); // after the followers: r's blocks are theirs now too
    else
        b->job_remade += takers != JOBS_ALL ? fresh : 0;
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

// The lowest job slot no follower of b holds (the lead's is 0).
static uint32_t
free_slot(const broker *b)
{
    for (uint32_t slot = 1; slot < JOBS_MAX; slot++) {
        int used = 0;
        for (uint32_t i = 0; i < b->n_followers; i++)
            used |= b->followers[i]->job_slot == slot;
        if (!used)
            return slot;
    }
    return 0; // not reached: a lead has fewer than JOBS_MAX - 1 followers
}

int
jobs_add(broker *b, broker *f, const char *name, uint64_t now_ms)
{
    if (b->followers == NULL && (b->followers = calloc(JOBS_MAX, sizeof(*b->followers))) == NULL)
        return STOKER_NOMEM;
    if (b->n_followers + 1 >= JOBS_MAX)
        return STOKER_NOMEM;
    f->lead = b;
    f->job_slot = free_slot(b);
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
    // Its first epoch is whole at once: the items of it accepted before it joined are made again
    // for it by index (with any job that joined at the same time and needs them too).
    remake *set = remake_create(epochs_items(b->epochs), epoch);
    if (set == NULL || epochs_remake_accepted(b->epochs, epoch, set) != STOKER_OK) {
        remake_destroy(set);
        return STOKER_NOMEM;
    }
    int rv = jobs_add(b, f, name, now_ms);
    if (rv != STOKER_OK) {
        remake_destroy(set);
        return rv;
    }
    epochs_job_starts(f, epoch, now_ms);
    uint64_t members = set->members;
    if (members > 0)
        f->remakes[0] = set;
    else
        remake_destroy(set);
    stoker_info("job-joined: job '%s' joins the dataset late: it takes every item once per "
                "epoch from epoch %u on, the %llu of it the others took already made again for it",
                name, epoch, (unsigned long long)members);
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
        if (e->producer == 0 && e->kind != STOKER_EVENT_SCALED)
            continue; // (each job hears of an epoch's end in its own time: epochs_job_acked)
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
    // What was to be made again for it is not made; the epochs no longer wait for it.
    for (uint32_t k = 0; k < REMAKE_SETS; k++) {
        remake_destroy(b->remakes[k]);
        b->remakes[k] = NULL;
    }
    epochs_forget_slot(b->lead != NULL ? b->lead : b, b->job_slot);
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

int
jobs_pulled(const broker *j)
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
    if (b->cfg.job_policy != JOB_POLICY_DETACH || b->epochs != NULL)
        return;
    for (uint32_t i = 0; i <= b->n_followers && jobs_shared(b); i++) {
        broker *j = i == 0 ? b : b->followers[i - 1];
        if (takes(j) && (i > 0 || b->job_named) && jobs_pulled(j) && lags(b, j))
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
