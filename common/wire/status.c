// The status snapshot's renderings (see status.h): JSON and Prometheus text, from the snapshot
// alone. Filling a snapshot is the broker's job (or the wire decoder's); this file only reads one.
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stoker/status.h"
#include "stoker/text.h"

// The rows of STOKER_COUNTERS (stoker/protocol.h) as a table for the renderings below: each
// counter's names and where its value lies in stoker_counters.
typedef struct counter_row {
    const char *key, *metric, *type, *help;
    size_t offset, size;
    int top; // a G row: at the top level of the JSON, not in its "counters" object
} counter_row;

#define COUNTER_ROW(f, metric, type, help, top)                                                    \
    {#f, metric, type, help, offsetof(stoker_counters, f), sizeof(((stoker_counters *)0)->f), top},
#define COUNTER_ROW_C(f, metric, type, help)        COUNTER_ROW(f, metric, type, help, 0)
#define COUNTER_ROW_A(f, audit, metric, type, help) COUNTER_ROW(f, metric, type, help, 0)
#define COUNTER_ROW_G(f, metric, type, help)        COUNTER_ROW(f, metric, type, help, 1)
static const counter_row counter_rows[] = {
    STOKER_COUNTERS(COUNTER_ROW_C, COUNTER_ROW_A, COUNTER_ROW_G)};
#define N_COUNTER_ROWS (sizeof(counter_rows) / sizeof(counter_rows[0]))

static unsigned long long
counter_value(const stoker_counters *c, const counter_row *row)
{
    const char *at = (const char *)c + row->offset;
    if (row->size == sizeof(uint64_t)) {
        uint64_t v;
        memcpy(&v, at, sizeof(v));
        return v;
    }
    uint32_t v;
    memcpy(&v, at, sizeof(v));
    return v;
}

void
stoker_status_destroy(stoker_status *st)
{
    if (st == NULL)
        return;
    free(st->producers);
    free(st->events);
    free(st->groups);
    free(st->consumers);
    free(st->jobs);
    free(st->pools);
    stoker_label_maps_free(st->label_maps, st->n_label_maps);
    free(st);
}

const char *
stoker_delivery_name(stoker_delivery delivery)
{
    switch (delivery) {
    case STOKER_DELIVERY_SOCKET:
        return "socket";
    case STOKER_DELIVERY_SHM:
        return "shm";
    default:
        return "none";
    }
}

const char *
stoker_job_state_name(uint32_t state)
{
    static const char *const names[] = {"running", "absent", "ended", "detached"};
    return state < sizeof(names) / sizeof(names[0]) ? names[state] : "unknown";
}

// Consumers: their entries in JSON and in Prometheus text.

// A consumer's mixture: "mix": {"stop", "waits_for" (a pool or null), "sources": [{"pool",
// "target_share", "delivered", "delivered_share", "dry"}]}; nothing without one.
static void
mix_json(stoker_text *t, const stoker_consumer_info *c)
{
    if (c->n_mix == 0)
        return;
    uint64_t total = 0;
    for (uint32_t k = 0; k < c->n_mix; k++)
        total += c->mix[k].delivered;
    stoker_text_printf(
        t, ", \"mix\": {\"stop\": \"%s\", \"waits_for\": ", stoker_mix_stop_name(c->mix_stop));
    if (c->mix_waits_for >= 0 && (uint32_t)c->mix_waits_for < c->n_mix)
        stoker_text_json_string(t, c->mix[c->mix_waits_for].pool);
    else
        stoker_text_printf(t, "null");
    stoker_text_printf(t, ", \"sources\": [");
    for (uint32_t k = 0; k < c->n_mix; k++) {
        const stoker_mix_share *m = &c->mix[k];
        stoker_text_printf(t, "%s{\"pool\": ", k ? ", " : "");
        stoker_text_json_string(t, m->pool);
        stoker_text_printf(t,
                           ", \"target_share\": %.6f, \"delivered\": %llu, "
                           "\"delivered_share\": %.6f, \"dry\": %s}",
                           m->share, (unsigned long long)m->delivered,
                           total > 0 ? (double)m->delivered / (double)total : 0.0,
                           m->dry ? "true" : "false");
    }
    stoker_text_printf(t, "]}");
}

static void
consumers_json(stoker_text *t, const stoker_status *st)
{
    stoker_text_printf(t, ", \"consumers\": [");
    for (uint32_t i = 0; i < st->n_consumers; i++) {
        const stoker_consumer_info *c = &st->consumers[i];
        stoker_text_printf(t, "%s{\"id\": %u, \"name\": ", i ? ", " : "", c->id);
        stoker_text_json_string(t, c->name);
        stoker_text_printf(t, ", \"job\": ");
        stoker_text_json_string(t, c->job);
        if (c->pid != 0)
            stoker_text_printf(t, ", \"pid\": %u", c->pid);
        else
            stoker_text_printf(t, ", \"pid\": null");
        stoker_text_printf(
            t,
            ", \"connected\": %s, \"delivery\": \"%s\", \"batches_shm\": %llu, "
            "\"batches_socket\": %llu, \"examples_shm\": %llu, "
            "\"examples_socket\": %llu, \"bytes_shm\": %llu, "
            "\"bytes_socket\": %llu, \"arena_full\": %llu, \"data_wait_s\": %.3f",
            c->connected ? "true" : "false", stoker_delivery_name(c->delivery),
            (unsigned long long)c->batches_shm, (unsigned long long)c->batches_socket,
            (unsigned long long)c->examples_shm, (unsigned long long)c->examples_socket,
            (unsigned long long)c->bytes_shm, (unsigned long long)c->bytes_socket,
            (unsigned long long)c->arena_full, (double)c->data_wait_ms / 1000.0);
        if (c->tokens + c->padding > 0)
            stoker_text_printf(t,
                               ", \"tokens\": %llu, \"padding\": %llu, \"padding_fraction\": %.4f",
                               (unsigned long long)c->tokens, (unsigned long long)c->padding,
                               (double)c->padding / (double)(c->tokens + c->padding));
        mix_json(t, c);
        stoker_text_printf(t, "}");
    }
    stoker_text_printf(t, "]");
}

static void label_value(char *dst, size_t cap, const char *src);

// The consumers' mixtures: per source its examples delivered and its target share.
static void
mix_metrics(stoker_text *t, const stoker_status *st)
{
    static const struct {
        const char *name, *type, *help;
    } per[] = {
        {"consumer_mix_delivered_total", "counter",
         "Examples of this source (pool) delivered to this consumer's mixture"},
        {"consumer_mix_target_share", "gauge",
         "This source's (pool's) share of this consumer's mixture now"},
    };
    for (size_t m = 0; m < sizeof(per) / sizeof(per[0]); m++) {
        stoker_text_printf(t, "# HELP stoker_%s %s\n# TYPE stoker_%s %s\n", per[m].name,
                           per[m].help, per[m].name, per[m].type);
        for (uint32_t i = 0; i < st->n_consumers; i++) {
            const stoker_consumer_info *c = &st->consumers[i];
            for (uint32_t k = 0; k < c->n_mix; k++) {
                char pool[STOKER_NAME_MAX];
                label_value(pool, sizeof(pool), c->mix[k].pool);
                if (m == 0)
                    stoker_text_printf(t, "stoker_%s{consumer=\"%u\",pool=\"%s\"} %llu\n",
                                       per[m].name, c->id, pool,
                                       (unsigned long long)c->mix[k].delivered);
                else
                    stoker_text_printf(t, "stoker_%s{consumer=\"%u\",pool=\"%s\"} %.6f\n",
                                       per[m].name, c->id, pool, c->mix[k].share);
            }
        }
    }
}

static void
consumers_metrics(stoker_text *t, const stoker_status *st)
{
    uint32_t by_path[3] = {0};
    for (uint32_t i = 0; i < st->n_consumers; i++)
        if (st->consumers[i].connected && st->consumers[i].delivery <= STOKER_DELIVERY_SHM)
            by_path[st->consumers[i].delivery]++;
    stoker_text_printf(t,
                       "# HELP stoker_consumers Connected consumers by the path of their batches\n"
                       "# TYPE stoker_consumers gauge\n"
                       "stoker_consumers{delivery=\"shm\"} %u\n"
                       "stoker_consumers{delivery=\"socket\"} %u\n"
                       "stoker_consumers{delivery=\"none\"} %u\n",
                       by_path[STOKER_DELIVERY_SHM], by_path[STOKER_DELIVERY_SOCKET],
                       by_path[STOKER_DELIVERY_NONE]);
    static const struct {
        const char *name, *help;
    } per[] = {
        {"consumer_batches_total", "Batches sent to this consumer, by path"},
        {"consumer_bytes_total", "Bytes of examples sent to this consumer, by path"},
        {"consumer_arena_full_total",
         "Batches of this consumer sent as bytes because the arena had no free region"},
        {"consumer_data_wait_seconds_total",
         "Seconds this consumer's caller waited for batches (its rate: the share of time it "
         "waits for data)"},
    };
    for (size_t m = 0; m < sizeof(per) / sizeof(per[0]); m++) {
        stoker_text_printf(t, "# HELP stoker_%s %s\n# TYPE stoker_%s counter\n", per[m].name,
                           per[m].help, per[m].name);
        for (uint32_t i = 0; i < st->n_consumers; i++) {
            const stoker_consumer_info *c = &st->consumers[i];
            char name[STOKER_NAME_MAX];
            label_value(name, sizeof(name), c->name);
            if (m == 2) {
                stoker_text_printf(t, "stoker_%s{consumer=\"%u\",name=\"%s\"} %llu\n", per[m].name,
                                   c->id, name, (unsigned long long)c->arena_full);
                continue;
            }
            if (m == 3) {
                stoker_text_printf(t, "stoker_%s{consumer=\"%u\",name=\"%s\"} %.3f\n", per[m].name,
                                   c->id, name, (double)c->data_wait_ms / 1000.0);
                continue;
            }
            uint64_t shm = m == 0 ? c->batches_shm : c->bytes_shm;
            uint64_t sock = m == 0 ? c->batches_socket : c->bytes_socket;
            stoker_text_printf(t,
                               "stoker_%s{consumer=\"%u\",name=\"%s\",path=\"shm\"} %llu\n"
                               "stoker_%s{consumer=\"%u\",name=\"%s\",path=\"socket\"} %llu\n",
                               per[m].name, c->id, name, (unsigned long long)shm, per[m].name,
                               c->id, name, (unsigned long long)sock);
        }
    }
    mix_metrics(t, st);
}

// Jobs (docs/sharing.md): their list and the sharing summary in JSON, their gauges and counters
// in Prometheus text.
static void
jobs_json(stoker_text *t, const stoker_status *st)
{
    uint64_t delivered = 0;
    stoker_text_printf(t, ", \"jobs\": [");
    for (uint32_t i = 0; i < st->n_jobs; i++) {
        const stoker_job_info *j = &st->jobs[i];
        delivered += j->delivered;
        stoker_text_printf(t, "%s{\"name\": ", i ? ", " : "");
        stoker_text_json_string(t, j->name);
        stoker_text_printf(t,
                           ", \"state\": \"%s\", \"trainers\": %u, \"made\": %llu, "
                           "\"delivered\": %llu, \"acknowledged\": %llu, \"queued\": %llu, "
                           "\"in_flight\": %llu, \"lag\": %llu, \"joined_s\": %.3f, "
                           "\"data_wait_s\": %.3f, \"rate\": %.1f, \"remade\": %llu, "
                           "\"end_reason\": ",
                           stoker_job_state_name(j->state), j->trainers,
                           (unsigned long long)j->made, (unsigned long long)j->delivered,
                           (unsigned long long)j->acknowledged, (unsigned long long)j->queued,
                           (unsigned long long)j->in_flight, (unsigned long long)j->lag,
                           j->joined_s, (double)j->data_wait_ms / 1000.0, j->rate,
                           (unsigned long long)j->remade);
        if (j->end_reason[0] != '\0')
            stoker_text_json_string(t, j->end_reason);
        else
            stoker_text_printf(t, "null");
        stoker_text_printf(t, "}");
    }
    stoker_text_printf(t, "]");
    if (st->n_jobs == 0) {
        stoker_text_printf(t, ", \"sharing\": null");
        return;
    }
    // made_per_delivered: how many examples the producers made per example a job got; below 1
    // when jobs share what was made.
    stoker_text_printf(t, ", \"sharing\": {\"jobs\": %u, \"made\": %llu, \"delivered\": %llu, ",
                       st->n_jobs, (unsigned long long)st->counters.produced,
                       (unsigned long long)delivered);
    if (delivered > 0)
        stoker_text_printf(t, "\"made_per_delivered\": %.6f}",
                           (double)st->counters.produced / (double)delivered);
    else
        stoker_text_printf(t, "\"made_per_delivered\": null}");
}

static void
jobs_metrics(stoker_text *t, const stoker_status *st)
{
    uint32_t live = 0;
    for (uint32_t i = 0; i < st->n_jobs; i++)
        live += st->jobs[i].state == STOKER_JOB_RUNNING || st->jobs[i].state == STOKER_JOB_ABSENT;
    stoker_text_printf(t,
                       "# HELP stoker_jobs Jobs sharing the producers, not ended or detached\n"
                       "# TYPE stoker_jobs gauge\nstoker_jobs %u\n",
                       live);
    if (st->n_jobs == 0)
        return;
    static const struct {
        const char *name, *type, *help;
    } per[] = {
        {"job_delivered_total", "counter", "Examples sent to this job's trainers"},
        {"job_acknowledged_total", "counter", "Examples this job's trainers acknowledged"},
        {"job_queued", "gauge", "Examples waiting for this job"},
        {"job_lag", "gauge", "Examples queued for this job beyond the fastest job's"},
        {"job_data_wait_seconds_total", "counter",
         "Seconds this job's trainers waited for batches, summed"},
        {"job_state", "gauge", "1 for this job's state"},
        {"job_rate", "gauge", "Examples/s delivered to this job, over the last seconds"},
    };
    for (size_t m = 0; m < sizeof(per) / sizeof(per[0]); m++) {
        stoker_text_printf(t, "# HELP stoker_%s %s\n# TYPE stoker_%s %s\n", per[m].name,
                           per[m].help, per[m].name, per[m].type);
        for (uint32_t i = 0; i < st->n_jobs; i++) {
            const stoker_job_info *j = &st->jobs[i];
            char name[STOKER_NAME_MAX];
            label_value(name, sizeof(name), j->name);
            if (m == 4)
                stoker_text_printf(t, "stoker_%s{job=\"%s\"} %.3f\n", per[m].name, name,
                                   (double)j->data_wait_ms / 1000.0);
            else if (m == 5)
                stoker_text_printf(t, "stoker_%s{job=\"%s\",state=\"%s\"} 1\n", per[m].name, name,
                                   stoker_job_state_name(j->state));
            else if (m == 6)
                stoker_text_printf(t, "stoker_%s{job=\"%s\"} %.1f\n", per[m].name, name, j->rate);
            else
                stoker_text_printf(t, "stoker_%s{job=\"%s\"} %llu\n", per[m].name, name,
                                   (unsigned long long)(m == 0   ? j->delivered
                                                        : m == 1 ? j->acknowledged
                                                        : m == 2 ? j->queued
                                                                 : j->lag));
        }
    }
}

// Autoscale: its block in JSON and its gauges in Prometheus text.
static void
autoscale_json(stoker_text *t, const stoker_status *st)
{
    if (!st->has_autoscale) {
        stoker_text_printf(t, ", \"autoscale\": null");
        return;
    }
    stoker_text_printf(t, ", \"autoscale\": {\"headroom\": %.3f, \"min\": %u, \"max\": %u, ",
                       st->autoscale_headroom, st->autoscale_min, st->autoscale_max);
    if (st->idle_s >= 0)
        stoker_text_printf(t, "\"idle_s\": %.3f, \"pools\": [", st->idle_s);
    else
        stoker_text_printf(t, "\"idle_s\": null, \"pools\": [");
    for (uint32_t i = 0; i < st->n_pools; i++) {
        const stoker_pool_info *p = &st->pools[i];
        stoker_text_printf(t, "%s{\"pool\": ", i ? ", " : "");
        stoker_text_json_string(t, p->name);
        stoker_text_printf(t,
                           ", \"demand\": %.3f, \"supply_per_producer\": %.3f, "
                           "\"supply_low\": %.3f, \"supply_high\": %.3f, \"wanted\": %u, "
                           "\"current\": %u, \"why\": ",
                           p->demand, p->supply, p->supply_low, p->supply_high, p->wanted,
                           p->current);
        stoker_text_json_string(t, p->why);
        stoker_text_printf(t, "}");
    }
    stoker_text_printf(t, "]}");
}

static void
autoscale_metrics(stoker_text *t, const stoker_status *st)
{
    if (!st->has_autoscale)
        return;
    static const char *const head[] = {
        "producers_wanted",
        "Producers this pool wants so that trainers never wait for data",
        "pool_demand",
        "Examples/s the trainers would take from this pool if they never waited",
        "pool_supply_per_producer",
        "Examples/s of one producer of this pool while not held by full queues (0: unknown)"};
    for (size_t m = 0; m < 3; m++) {
        stoker_text_printf(t, "# HELP stoker_%s %s\n# TYPE stoker_%s gauge\n", head[2 * m],
                           head[2 * m + 1], head[2 * m]);
        for (uint32_t i = 0; i < st->n_pools; i++) {
            const stoker_pool_info *p = &st->pools[i];
            char name[STOKER_NAME_MAX];
            label_value(name, sizeof(name), p->name);
            double v = m == 0 ? (double)p->wanted : m == 1 ? p->demand : p->supply;
            stoker_text_printf(t, "stoker_%s{pool=\"%s\"} %.6g\n", head[2 * m], name, v);
        }
    }
}

char *
stoker_status_render_json(const stoker_status *st)
{
    stoker_text t = {0};
    const stoker_counters *c = &st->counters;
    char schema[1024] = "";
    if (st->has_schema)
        stoker_schema_format(&st->schema, schema, sizeof(schema));
    stoker_text_printf(&t, "{\"uptime_s\": %.3f, \"schema\": ", (double)st->uptime_ms / 1000.0);
    stoker_text_json_string(&t, schema);
    stoker_text_printf(&t, ", \"queue_depth\": %u, \"queue_depth_auto\": %s, \"max_bytes\": %llu",
                       st->queue_depth, st->queue_depth_auto ? "true" : "false",
                       (unsigned long long)st->max_bytes);
    stoker_text_printf(&t, ", \"queue_limit\": ");
    stoker_text_json_string(&t, st->queue_limit);
    stoker_text_printf(&t, ", \"counters\": {");
    const char *sep = "";
    for (size_t i = 0; i < N_COUNTER_ROWS; i++) {
        if (!counter_rows[i].top) {
            stoker_text_printf(&t, "%s\"%s\": %llu", sep, counter_rows[i].key,
                               counter_value(c, &counter_rows[i]));
            sep = ", ";
        }
    }
    stoker_text_printf(
        &t, ", \"discrepancy\": %lld}",
        (long long)(c->produced - c->acknowledged - c->queued - c->in_flight - c->released));
    for (size_t i = 0; i < N_COUNTER_ROWS; i++)
        if (counter_rows[i].top)
            stoker_text_printf(&t, ", \"%s\": %llu", counter_rows[i].key,
                               counter_value(c, &counter_rows[i]));
    stoker_text_printf(&t, ", \"producers\": [");
    for (uint32_t i = 0; i < st->n_producers; i++) {
        const stoker_producer_info *p = &st->producers[i];
        stoker_text_printf(&t, "%s{\"id\": %u, \"name\": ", i ? ", " : "", p->id);
        stoker_text_json_string(&t, p->name);
        stoker_text_printf(&t,
                           ", \"session\": \"%016llx\", \"state\": \"%s\", \"queued\": %llu, "
                           "\"accepted\": %llu, \"delivered\": %llu, \"acknowledged\": %llu, "
                           "\"redelivered\": %llu, \"returned_unused\": %llu, "
                           "\"next_seq\": %llu, \"silent_s\": %.3f, \"pushes\": %llu, "
                           "\"pushes_streamed\": %llu, \"pushes_shm\": %llu, \"skipped\": %llu}",
                           (unsigned long long)p->session, stoker_producer_status_name(p->status),
                           (unsigned long long)p->queued, (unsigned long long)p->accepted,
                           (unsigned long long)p->delivered, (unsigned long long)p->acknowledged,
                           (unsigned long long)p->redelivered,
                           (unsigned long long)p->returned_unused, (unsigned long long)p->next_seq,
                           (double)p->silent_ms / 1000.0, (unsigned long long)p->pushes,
                           (unsigned long long)p->pushes_streamed,
                           (unsigned long long)p->pushes_shm, (unsigned long long)p->skipped);
    }
    stoker_text_printf(&t, "], \"events\": [");
    for (uint32_t i = 0; i < st->n_events; i++) {
        const stoker_event *e = &st->events[i];
        stoker_text_printf(
            &t, "%s{\"index\": %llu, \"kind\": \"%s\", \"producer\": %u, \"name\": ", i ? ", " : "",
            (unsigned long long)e->index, stoker_event_kind_name(e->kind), e->producer);
        stoker_text_json_string(&t, e->name);
        stoker_text_printf(&t, ", \"at\": %.3f, \"reason\": ", e->at_s);
        stoker_text_json_string(&t, e->reason);
        if (e->kind == STOKER_EVENT_SCALED) // name is the pool
            stoker_text_printf(&t, ", \"from\": %u, \"to\": %u", e->scaled_from, e->scaled_to);
        stoker_text_printf(&t, "}");
    }
    stoker_text_printf(&t, "]");
    consumers_json(&t, st);
    jobs_json(&t, st);
    stoker_text_printf(&t, ", \"groups\": [");
    for (uint32_t i = 0; i < st->n_groups; i++) {
        const stoker_group_info *g = &st->groups[i];
        uint64_t slowest = UINT64_MAX;
        for (uint32_t r = 0; r < g->world; r++)
            slowest = g->rank_steps[r] < slowest ? g->rank_steps[r] : slowest;
        stoker_text_printf(&t, "%s{\"name\": ", i ? ", " : "");
        stoker_text_json_string(&t, g->name);
        stoker_text_printf(&t,
                           ", \"state\": \"%s\", \"world\": %u, \"batch\": %u, \"joined\": %u, "
                           "\"steps\": %llu, \"leftover\": %llu, \"end_reason\": ",
                           g->state, g->world, g->batch, g->joined, (unsigned long long)g->steps,
                           (unsigned long long)g->leftover);
        if (g->end_reason[0] != '\0') {
            stoker_text_json_string(&t, g->end_reason);
            stoker_text_printf(&t, ", \"ended_at\": %.3f, \"ranks\": [", g->ended_at_s);
        } else {
            stoker_text_printf(&t, "null, \"ended_at\": null, \"ranks\": [");
        }
        for (uint32_t r = 0; r < g->world; r++)
            stoker_text_printf(&t,
                               "%s{\"rank\": %u, \"steps\": %llu, \"ahead\": %llu, "
                               "\"ready\": %u}",
                               r ? ", " : "", r, (unsigned long long)g->rank_steps[r],
                               (unsigned long long)(g->rank_steps[r] - slowest), g->rank_ready[r]);
        stoker_text_printf(&t, "]}");
    }
    stoker_text_printf(&t, "]");
    stoker_text_printf(&t, ", \"labels\": ");
    stoker_labels_render_json(&t, st->label_maps, st->n_label_maps, st->label_maps_omitted);
    autoscale_json(&t, st);
    if (st->dataset_size > 0)
        stoker_text_printf(
            &t,
            ", \"mode\": \"dataset\", \"dataset\": {\"items\": %llu, "
            "\"epochs_done\": %u, \"epochs\": %u, \"items_reassigned\": %llu, "
            "\"pushes_revoked\": %llu, \"overlap\": %s, "
            "\"epoch_acknowledged\": %llu}}\n",
            (unsigned long long)st->dataset_size, st->epochs_done, st->epochs_limit,
            (unsigned long long)st->items_reassigned, (unsigned long long)st->pushes_revoked,
            st->epochs_overlap ? "true" : "false", (unsigned long long)st->epoch_acknowledged);
    else
        stoker_text_printf(&t, ", \"mode\": \"streams\", \"dataset\": null}\n");
    return stoker_text_finish(&t);
}

// A Prometheus label value (not JSON): names come from peers, keep them printable and
// quote-free.
static void
label_value(char *dst, size_t cap, const char *src)
{
    size_t j = 0;
    for (size_t i = 0; src[i] != '\0' && j + 1 < cap; i++) {
        unsigned char ch = (unsigned char)src[i];
        dst[j++] = (ch < 0x20 || ch >= 0x7f || ch == '"' || ch == '\\') ? '_' : (char)ch;
    }
    dst[j] = '\0';
}

char *
stoker_status_render_metrics(const stoker_status *st)
{
    stoker_text t = {0};
    stoker_text_printf(&t, "%s", "");
    const stoker_counters *c = &st->counters;
    for (size_t i = 0; i < N_COUNTER_ROWS; i++) {
        const counter_row *row = &counter_rows[i];
        stoker_text_printf(&t, "# HELP stoker_%s %s\n# TYPE stoker_%s %s\nstoker_%s %llu\n",
                           row->metric, row->help, row->metric, row->type, row->metric,
                           counter_value(c, row));
    }
    stoker_text_printf(&t,
                       "# HELP stoker_uptime_seconds Seconds since the broker started\n"
                       "# TYPE stoker_uptime_seconds gauge\nstoker_uptime_seconds %.3f\n"
                       "# HELP stoker_max_bytes Bytes all queues may hold (--max-bytes)\n"
                       "# TYPE stoker_max_bytes gauge\nstoker_max_bytes %llu\n",
                       (double)st->uptime_ms / 1000.0, (unsigned long long)st->max_bytes);
    static const struct {
        const char *name, *type, *help;
    } per[] = {
        {"producer_queue_depth", "gauge", "Examples queued for this producer"},
        {"producer_accepted_total", "counter", "Examples accepted from this producer"},
        {"producer_delivered_total", "counter", "Examples of this producer sent to trainers"},
        {"producer_acknowledged_total", "counter", "Examples of this producer acknowledged"},
        {"producer_redelivered_total", "counter", "Examples of this producer redelivered"},
        {"producer_returned_unused_total", "counter", "Examples of this producer returned unused"},
        {"producer_alive", "gauge", "1 while this producer is alive"},
    };
    for (size_t m = 0; m < sizeof(per) / sizeof(per[0]); m++) {
        stoker_text_printf(&t, "# HELP stoker_%s %s\n# TYPE stoker_%s %s\n", per[m].name,
                           per[m].help, per[m].name, per[m].type);
        for (uint32_t i = 0; i < st->n_producers; i++) {
            const stoker_producer_info *p = &st->producers[i];
            uint64_t v[] = {p->queued,
                            p->accepted,
                            p->delivered,
                            p->acknowledged,
                            p->redelivered,
                            p->returned_unused,
                            p->status == STOKER_PRODUCER_ALIVE};
            char name[STOKER_NAME_MAX];
            label_value(name, sizeof(name), p->name);
            stoker_text_printf(&t, "stoker_%s{producer=\"%u\",name=\"%s\"} %llu\n", per[m].name,
                               p->id, name, (unsigned long long)v[m]);
        }
    }
    consumers_metrics(&t, st);
    jobs_metrics(&t, st);
    autoscale_metrics(&t, st);
    if (st->n_groups > 0)
        stoker_text_printf(&t,
                           "# HELP stoker_group_steps Steps formed for this group\n"
                           "# TYPE stoker_group_steps counter\n"
                           "# HELP stoker_group_leftover Examples left over at this group's end\n"
                           "# TYPE stoker_group_leftover gauge\n"
                           "# HELP stoker_group_ranks_joined Ranks of this group joined\n"
                           "# TYPE stoker_group_ranks_joined gauge\n");
    for (uint32_t i = 0; i < st->n_groups; i++) {
        const stoker_group_info *g = &st->groups[i];
        char name[STOKER_NAME_MAX];
        label_value(name, sizeof(name), g->name);
        stoker_text_printf(&t,
                           "stoker_group_steps{group=\"%s\"} %llu\n"
                           "stoker_group_leftover{group=\"%s\"} %llu\n"
                           "stoker_group_ranks_joined{group=\"%s\"} %u\n",
                           name, (unsigned long long)g->steps, name,
                           (unsigned long long)g->leftover, name, g->joined);
    }
    return stoker_text_finish(&t);
}
