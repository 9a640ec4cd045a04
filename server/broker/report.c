// The broker's reports: it fills the status snapshot (stoker/status.h) from its state, and
// answers the Status request, /status and /metrics from that one snapshot. How a snapshot is
// written out (JSON, Prometheus text) is libstoker's (common/wire/status.c), not this file's. It
// only reads the broker's state. It may use the core, epoch.c and group.c (their
// reports).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "group.h"
#include "internal.h"
#include "jobs.h"
#include "mix.h"
#include "stoker/error.h"
#include "stoker/status.h"

#define STATUS_PAGE_EVENTS 100 // events on /status

// t's mixture (NULL: none) into c.
static void
mix_report(const mix *m, stoker_consumer_info *c)
{
    c->mix_waits_for = -1;
    if (m == NULL)
        return;
    for (uint32_t s = 0; s < m->spec.n; s++) {
        snprintf(c->mix[s].pool, sizeof(c->mix[s].pool), "%s", m->spec.names[s]);
        c->mix[s].share = m->share[s];
        c->mix[s].delivered = m->got[s];
        c->mix[s].dry = m->dry[s];
    }
    c->n_mix = m->spec.n;
    c->mix_waits_for = m->waits_for;
    c->mix_stop = m->spec.stop;
}

// Examples job j holds queued beyond the fastest job, summed over the lead's producers.
static uint64_t
lag_of(const broker *b, const broker *j)
{
    uint64_t lag = 0;
    for (uint32_t i = 0; i < b->n_producers; i++) {
        const producer *p = b->producers[i];
        const producer *own = j == b ? p : find_producer_id(j, p->id);
        if (own == NULL || !jobs_takes(j))
            continue;
        uint64_t least = jobs_takes(b) ? p->q.examples : UINT64_MAX;
        for (uint32_t k = 0; k < b->n_followers; k++) {
            const producer *m =
                jobs_takes(b->followers[k]) ? find_producer_id(b->followers[k], p->id) : NULL;
            if (m != NULL && m->q.examples < least)
                least = m->q.examples;
        }
        lag += own->q.examples > least ? own->q.examples - least : 0;
    }
    return lag;
}

static void
job_report(const broker *b, const broker *j, stoker_job_info *d)
{
    snprintf(d->name, sizeof(d->name), "%s", j->job);
    d->state = j->job_state;
    for (uint32_t i = 0; i < j->n_trainers; i++) {
        d->trainers += j->trainers[i]->connected;
        d->data_wait_ms += j->trainers[i]->data_wait_ms;
    }
    d->made = j->c.produced;
    d->delivered = j->c.delivered;
    d->acknowledged = j->c.acknowledged;
    d->queued = j->c.queued;
    d->in_flight = j->c.in_flight;
    d->lag = lag_of(b, j);
    d->joined_s = (double)(j->job_joined_ms - b->start_ms) / 1000.0;
    d->rate = j->job_rate;
    d->remade = j->job_remade;
    snprintf(d->end_reason, sizeof(d->end_reason), "%s", j->job_end_reason);
}

// The jobs of lead b (jobs.c) into st->jobs (none until a trainer said hello). STOKER_NOMEM.
static int
jobs_status(const broker *b, stoker_status *st)
{
    if (!b->job_named)
        return STOKER_OK;
    st->jobs = calloc(1 + b->n_followers, sizeof(*st->jobs));
    if (st->jobs == NULL)
        return STOKER_NOMEM;
    job_report(b, b, &st->jobs[st->n_jobs++]);
    for (uint32_t i = 0; i < b->n_followers; i++)
        job_report(b, b->followers[i], &st->jobs[st->n_jobs++]);
    return STOKER_OK;
}

// The trainers of job j, each with its delivery path, appended to st->consumers.
static void
job_consumers(const broker *j, stoker_status *st)
{
    for (uint32_t i = 0; i < j->n_trainers; i++) {
        const trainer *t = j->trainers[i];
        stoker_consumer_info *c = &st->consumers[st->n_consumers++];
        *c = (stoker_consumer_info){
            .id = t->id,
            .pid = t->pid,
            .connected = t->connected,
            .delivery = t->delivery,
            .batches_shm = t->batches_shm,
            .batches_socket = t->batches_socket,
            .examples_shm = t->examples_shm,
            .examples_socket = t->examples_socket,
            .bytes_shm = t->bytes_shm,
            .bytes_socket = t->bytes_socket,
            .arena_full = t->arena_full,
            .tokens = t->tokens,
            .padding = t->padding,
            .data_wait_ms = t->data_wait_ms,
        };
        snprintf(c->name, sizeof(c->name), "%s", t->name);
        snprintf(c->job, sizeof(c->job), "%s", j->job);
        mix_report(t->mix, c);
    }
}

// The trainers of every job (jobs.c), each with its delivery path and job. STOKER_NOMEM.
static int
consumers_status(const broker *b, stoker_status *st)
{
    uint32_t n = b->n_trainers;
    for (uint32_t i = 0; i < b->n_followers; i++)
        n += b->followers[i]->n_trainers;
    st->consumers = calloc(n ? n : 1, sizeof(*st->consumers));
    if (st->consumers == NULL)
        return STOKER_NOMEM;
    job_consumers(b, st);
    for (uint32_t i = 0; i < b->n_followers; i++)
        job_consumers(b->followers[i], st);
    return jobs_status(b, st);
}

int
broker_status(const broker *b, uint64_t now_ms, uint32_t max_events, stoker_status **out)
{
    stoker_status *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return STOKER_NOMEM;
    uint64_t from = b->n_events > max_events ? b->n_events - max_events + 1 : 1;
    uint32_t n_events = b->n_events >= from ? (uint32_t)(b->n_events - from + 1) : 0;
    st->producers = calloc(b->n_producers ? b->n_producers : 1, sizeof(*st->producers));
    st->events = calloc(n_events ? n_events : 1, sizeof(*st->events));
    if (st->producers == NULL || st->events == NULL) {
        stoker_status_destroy(st);
        return STOKER_NOMEM;
    }
    st->uptime_ms = now_ms - b->start_ms;
    st->has_schema = b->has_schema;
    st->schema = b->schema;
    st->queue_depth = b->queue_depth;
    st->broker_id = b->instance_id;
    st->queue_depth_auto = b->cfg.queue_depth_auto;
    snprintf(st->queue_limit, sizeof(st->queue_limit), "%s", b->queue_limit);
    st->max_bytes = b->cfg.max_bytes;
    epochs_report(b->epochs, st);
    broker_counters(b, &st->counters);
    for (uint32_t i = 0; i < b->n_producers; i++) {
        const producer *p = b->producers[i];
        stoker_producer_info *d = &st->producers[i];
        d->id = p->id;
        snprintf(d->name, sizeof(d->name), "%s", p->name);
        d->session = p->session;
        d->status = p->status;
        d->queued = p->q.examples;
        d->accepted = p->accepted;
        d->delivered = p->delivered;
        d->acknowledged = p->acknowledged;
        d->redelivered = p->redelivered;
        d->returned_unused = p->returned_unused;
        d->next_seq = p->next_seq;
        d->silent_ms = now_ms - p->last_seen_ms;
        d->pushes = p->n_pushes;
        d->pushes_streamed = p->n_pushes_streamed;
        d->pushes_shm = p->n_pushes_shm;
        d->skipped = p->skipped;
    }
    st->n_producers = b->n_producers;
    for (uint64_t i = from; i <= b->n_events; i++)
        st->events[st->n_events++] = b->events[(i - 1) % EVENT_LOG];
    // Label maps: each distinct map once, with the producers that said it.
    for (uint32_t i = 0; i < b->n_producers; i++) {
        const producer *p = b->producers[i];
        if (p->labels.n_classes > 0 &&
            stoker_label_maps_add(&st->label_maps, &st->n_label_maps, &st->label_maps_omitted,
                                  p->id, &p->labels) != STOKER_OK) {
            stoker_status_destroy(st);
            return STOKER_NOMEM;
        }
    }
    if (consumers_status(b, st) != STOKER_OK || autoscale_report(b, now_ms, st) != STOKER_OK ||
        group_status(b, &st->groups, &st->n_groups) != STOKER_OK) {
        stoker_status_destroy(st);
        return STOKER_NOMEM;
    }
    *out = st;
    return STOKER_OK;
}

int
report_status(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
              broker_outbox *out)
{
    (void)pipe;
    // The latest events too (the trainer also gets them in pull replies as they happen).
    stoker_status *st = NULL;
    if (broker_status(b, now_ms, EVENTS_PER_REPLY, &st) != STOKER_OK) {
        send_code(b, out, token, STOKER_NOMEM, "broker out of memory");
        return 0;
    }
    stoker_reply rep = {
        .code = STOKER_OK,
        .has_counters = 1,
        .counters = st->counters,
        .has_schema = st->has_schema,
        .schema = st->schema,
        .producers = st->producers,
        .n_producers = st->n_producers,
        .events = st->events,
        .n_events = st->n_events,
        .uptime_ms = st->uptime_ms,
        .broker_id = st->broker_id,
        .queue_depth = st->queue_depth,
        .max_bytes = st->max_bytes,
        .dataset_size = st->dataset_size,
        .epochs_done = st->epochs_done,
        .epochs_limit = st->epochs_limit,
        .items_reassigned = st->items_reassigned,
        .pushes_revoked = st->pushes_revoked,
        .epochs_overlap = st->epochs_overlap,
        .epoch_acknowledged = st->epoch_acknowledged,
        .queue_depth_auto = st->queue_depth_auto,
        .groups = st->groups,
        .n_groups = st->n_groups,
        .consumers = st->consumers,
        .n_consumers = st->n_consumers,
        .label_maps = st->label_maps,
        .n_label_maps = st->n_label_maps,
        .label_maps_omitted = st->label_maps_omitted,
        .has_autoscale = st->has_autoscale,
        .autoscale_headroom = st->autoscale_headroom,
        .autoscale_min = st->autoscale_min,
        .autoscale_max = st->autoscale_max,
        .idle_ms = st->idle_s >= 0 ? (int64_t)(st->idle_s * 1000.0) : -1,
        .pools = st->pools,
        .n_pools = st->n_pools,
        .jobs = st->jobs,
        .n_jobs = st->n_jobs,
    };
    snprintf(rep.queue_limit, sizeof(rep.queue_limit), "%s", st->queue_limit);
    send_reply(b, out, token, &rep);
    stoker_status_destroy(st);
    return 0;
}

char *
broker_metrics_text(const broker *b, uint64_t now_ms)
{
    stoker_status *st = NULL;
    if (broker_status(b, now_ms, 0, &st) != STOKER_OK)
        return NULL;
    char *text = stoker_status_render_metrics(st);
    stoker_status_destroy(st);
    return text;
}

char *
broker_status_json(const broker *b, uint64_t now_ms)
{
    stoker_status *st = NULL;
    if (broker_status(b, now_ms, STATUS_PAGE_EVENTS, &st) != STOKER_OK)
        return NULL;
    char *text = stoker_status_render_json(st);
    stoker_status_destroy(st);
    return text;
}
