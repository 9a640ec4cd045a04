// The broker's reports: the Status reply, /metrics (Prometheus text) and /status (JSON). It only
// reads the broker's state.
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "broker_internal.h"
#include "stoker/error.h"
#include "stoker/log.h"

void
handle_status(broker *b, void *token, stoker_request *req, broker_outbox *out)
{
    stoker_reply rep = {.code = STOKER_OK, .has_counters = 1};
    broker_counters(b, &rep.counters);
    rep.has_schema = b->has_schema;
    rep.schema = b->schema;
    rep.producers = calloc(b->n_producers ? b->n_producers : 1, sizeof(*rep.producers));
    if (rep.producers == NULL) {
        send_code(b, out, token, STOKER_NOMEM, "broker out of memory");
        stoker_request_free(req);
        return;
    }
    for (uint32_t i = 0; i < b->n_producers; i++) {
        const producer *p = b->producers[i];
        stoker_producer_info *d = &rep.producers[i];
        d->id = p->id;
        snprintf(d->name, sizeof(d->name), "%s", p->name);
        d->session = p->session;
        d->status = p->status;
        d->queued = p->q.examples;
        d->accepted = p->accepted;
        d->delivered = p->delivered;
        d->acknowledged = p->acknowledged;
        d->redelivered = p->redelivered;
        d->next_seq = p->next_seq;
    }
    rep.n_producers = b->n_producers;
    // The latest events too (the trainer also gets them in pull replies as they happen).
    stoker_event events[EVENTS_PER_REPLY];
    uint64_t from = b->n_events > EVENTS_PER_REPLY ? b->n_events - EVENTS_PER_REPLY + 1 : 1;
    for (uint64_t i = from; i <= b->n_events; i++)
        events[rep.n_events++] = b->events[(i - 1) % EVENT_LOG];
    rep.events = events;
    send_reply(b, out, token, &rep);
    free(rep.producers);
    stoker_request_free(req);
}

// --- reports ------------------------------------------------------------------------------------

typedef struct sbuf {
    char *s;
    size_t len, cap;
    int failed;
} sbuf;

static void sbuf_printf(sbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
sbuf_printf(sbuf *sb, const char *fmt, ...)
{
    if (sb->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        // Before the first allocation s is NULL: no arithmetic on it (undefined behaviour).
        int n = vsnprintf(sb->s != NULL ? sb->s + sb->len : NULL, sb->cap - sb->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            sb->failed = 1;
            return;
        }
        if ((size_t)n < sb->cap - sb->len) {
            sb->len += (size_t)n;
            return;
        }
        size_t cap = (sb->cap + (size_t)n + 1) * 2;
        char *s = realloc(sb->s, cap);
        if (s == NULL) {
            sb->failed = 1;
            return;
        }
        sb->s = s;
        sb->cap = cap;
    }
}

static char *
sbuf_finish(sbuf *sb)
{
    if (sb->failed) {
        free(sb->s);
        return NULL;
    }
    return sb->s;
}

// Names and strings we print come from peers: keep them printable and quote-free.
static void
clean_name(char *dst, size_t cap, const char *src)
{
    size_t j = 0;
    for (size_t i = 0; src[i] != '\0' && j + 1 < cap; i++) {
        unsigned char ch = (unsigned char)src[i];
        dst[j++] = (ch < 0x20 || ch >= 0x7f || ch == '"' || ch == '\\') ? '_' : (char)ch;
    }
    dst[j] = '\0';
}

char *
broker_metrics_text(const broker *b, uint64_t now_ms)
{
    sbuf sb = {0};
    sbuf_printf(&sb, "%s", "");
    stoker_counters c;
    broker_counters(b, &c);
    static const struct {
        const char *name, *type, *help;
        size_t offset;
    } totals[] = {
        {"produced_total", "counter", "Examples accepted from producers",
         offsetof(stoker_counters, produced)},
        {"acknowledged_total", "counter", "Examples acknowledged by trainers",
         offsetof(stoker_counters, acknowledged)},
        {"delivered_total", "counter", "Examples sent to trainers, redeliveries included",
         offsetof(stoker_counters, delivered)},
        {"redelivered_total", "counter", "Examples returned to queues from dropped leases",
         offsetof(stoker_counters, redelivered)},
        {"queued", "gauge", "Examples waiting in producer queues",
         offsetof(stoker_counters, queued)},
        {"in_flight", "gauge", "Examples leased to trainers, not yet acknowledged",
         offsetof(stoker_counters, in_flight)},
        {"queued_bytes", "gauge", "Bytes of queued examples",
         offsetof(stoker_counters, queued_bytes)},
        {"refused_total", "counter", "Requests refused with an error",
         offsetof(stoker_counters, refused)},
    };
    for (size_t i = 0; i < sizeof(totals) / sizeof(totals[0]); i++) {
        uint64_t v = *(const uint64_t *)((const char *)&c + totals[i].offset);
        sbuf_printf(&sb, "# HELP stoker_%s %s\n# TYPE stoker_%s %s\nstoker_%s %llu\n",
                    totals[i].name, totals[i].help, totals[i].name, totals[i].type, totals[i].name,
                    (unsigned long long)v);
    }
    sbuf_printf(&sb,
                "# HELP stoker_producers_alive Producers connected and sending\n"
                "# TYPE stoker_producers_alive gauge\nstoker_producers_alive %u\n"
                "# HELP stoker_trainers_connected Trainers connected\n"
                "# TYPE stoker_trainers_connected gauge\nstoker_trainers_connected %u\n"
                "# HELP stoker_uptime_seconds Seconds since the broker started\n"
                "# TYPE stoker_uptime_seconds gauge\nstoker_uptime_seconds %.3f\n",
                c.producers_alive, c.trainers, uptime_s(b, now_ms));
    static const struct {
        const char *name, *type, *help;
    } per[] = {
        {"producer_queue_depth", "gauge", "Examples queued for this producer"},
        {"producer_accepted_total", "counter", "Examples accepted from this producer"},
        {"producer_delivered_total", "counter", "Examples of this producer sent to trainers"},
        {"producer_acknowledged_total", "counter", "Examples of this producer acknowledged"},
        {"producer_redelivered_total", "counter", "Examples of this producer redelivered"},
        {"producer_alive", "gauge", "1 while this producer is alive"},
    };
    for (size_t m = 0; m < sizeof(per) / sizeof(per[0]); m++) {
        sbuf_printf(&sb, "# HELP stoker_%s %s\n# TYPE stoker_%s %s\n", per[m].name, per[m].help,
                    per[m].name, per[m].type);
        for (uint32_t i = 0; i < b->n_producers; i++) {
            const producer *p = b->producers[i];
            uint64_t v[] = {p->q.examples,   p->accepted,    p->delivered,
                            p->acknowledged, p->redelivered, p->status == STOKER_PRODUCER_ALIVE};
            char name[STOKER_NAME_MAX];
            clean_name(name, sizeof(name), p->name);
            sbuf_printf(&sb, "stoker_%s{producer=\"%u\",name=\"%s\"} %llu\n", per[m].name, p->id,
                        name, (unsigned long long)v[m]);
        }
    }
    return sbuf_finish(&sb);
}

char *
broker_status_json(const broker *b, uint64_t now_ms)
{
    sbuf sb = {0};
    stoker_counters c;
    broker_counters(b, &c);
    char schema[1024] = "";
    if (b->has_schema)
        stoker_schema_format(&b->schema, schema, sizeof(schema));
    sbuf_printf(&sb,
                "{\"uptime_s\": %.3f, \"schema\": \"%s\", \"queue_depth\": %u, "
                "\"max_bytes\": %llu, \"counters\": {\"produced\": %llu, \"acknowledged\": %llu, "
                "\"queued\": %llu, \"in_flight\": %llu, \"redelivered\": %llu, "
                "\"delivered\": %llu, \"queued_bytes\": %llu, \"refused\": %llu, "
                "\"discrepancy\": %lld}, \"producers_alive\": %u, \"trainers_connected\": %u, "
                "\"producers\": [",
                uptime_s(b, now_ms), schema, b->cfg.queue_depth,
                (unsigned long long)b->cfg.max_bytes, (unsigned long long)c.produced,
                (unsigned long long)c.acknowledged, (unsigned long long)c.queued,
                (unsigned long long)c.in_flight, (unsigned long long)c.redelivered,
                (unsigned long long)c.delivered, (unsigned long long)c.queued_bytes,
                (unsigned long long)c.refused,
                (long long)(c.produced - c.acknowledged - c.queued - c.in_flight),
                c.producers_alive, c.trainers);
    for (uint32_t i = 0; i < b->n_producers; i++) {
        const producer *p = b->producers[i];
        char name[STOKER_NAME_MAX];
        clean_name(name, sizeof(name), p->name);
        sbuf_printf(&sb,
                    "%s{\"id\": %u, \"name\": \"%s\", \"session\": \"%016llx\", \"state\": \"%s\", "
                    "\"queued\": %llu, \"accepted\": %llu, \"delivered\": %llu, "
                    "\"acknowledged\": %llu, \"redelivered\": %llu, \"next_seq\": %llu, "
                    "\"silent_s\": %.3f}",
                    i ? ", " : "", p->id, name, (unsigned long long)p->session,
                    stoker_producer_status_name(p->status), (unsigned long long)p->q.examples,
                    (unsigned long long)p->accepted, (unsigned long long)p->delivered,
                    (unsigned long long)p->acknowledged, (unsigned long long)p->redelivered,
                    (unsigned long long)p->next_seq, (double)(now_ms - p->last_seen_ms) / 1000.0);
    }
    sbuf_printf(&sb, "], \"events\": [");
    uint64_t from = b->n_events > 100 ? b->n_events - 100 + 1 : 1;
    for (uint64_t i = from; i <= b->n_events; i++) {
        const stoker_event *e = &b->events[(i - 1) % EVENT_LOG];
        char name[STOKER_NAME_MAX], reason[STOKER_REASON_MAX];
        clean_name(name, sizeof(name), e->name);
        clean_name(reason, sizeof(reason), e->reason);
        sbuf_printf(&sb,
                    "%s{\"index\": %llu, \"kind\": \"%s\", \"producer\": %u, \"name\": \"%s\", "
                    "\"at\": %.3f, \"reason\": \"%s\"}",
                    i > from ? ", " : "", (unsigned long long)e->index,
                    stoker_event_kind_name(e->kind), e->producer, name, e->at_s, reason);
    }
    sbuf_printf(&sb, "]}\n");
    return sbuf_finish(&sb);
}
