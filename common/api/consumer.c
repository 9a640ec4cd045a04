// The consumer API (see consumer.h): a flat, binding-friendly face of stoker_trainer_client.
// It adds what a binding cannot do through the trainer client's structs: field access by index,
// identities as arrays, events as plain values, the status as JSON, and error messages that
// carry the broker's reason. It does no data work of its own: batches are the client's, unchanged.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stoker/client.h"
#include "stoker/consumer.h"
#include "stoker/error.h"
#include "stoker/opts.h"
#include "stoker/protocol.h"
#include "stoker/status.h"
#include "stoker/trainer_client.h"

#define EVENT_RING 1024

struct stoker_consumer_batch {
    stoker_batch *batch;
    int acked;
};

struct stoker_consumer {
    stoker_trainer_client *tc;
    volatile int stop;
    char error[512];
    // Events as they arrive (on_event runs on our thread, inside stoker_trainer_client_next).
    stoker_event events[EVENT_RING];
    uint32_t epochs_ended; // EPOCH_END events seen (a dataset's)
    // Broker restarts heard of (BROKER_RESTARTED events) and epochs_ended when the latest came:
    // the new broker's epochs count from there.
    uint32_t restarts, epochs_before_restart;
    uint32_t ev_head, ev_len;
    // The broker's last word on producers that went away, for the supply-end message.
    char last_gone[STOKER_NAME_MAX + STOKER_REASON_MAX + 64];
    uint32_t stall_timeout_ms;
    int in_group; // a rank of a data-parallel group
    int mixed;    // a mixture of sources (its end is the broker's word: which source ran dry)
    int in_job;   // a named job sharing the producers (its end may be the job's: detached)
};

int
stoker_consumer_api_version(void)
{
    return STOKER_API_VERSION;
}

// The most sequences a batch made by tokens holds (the broker's BUDGET_MAX_EXAMPLES).
#define CONSUMER_MAX_SEQUENCES 8192

void
stoker_consumer_options_init(stoker_consumer_options *o)
{
    stoker_trainer_options feed; // the defaults are the trainer client's, written once there
    stoker_trainer_options_init(&feed);
    memset(o, 0, sizeof(*o));
    o->api_version = STOKER_API_VERSION;
    o->batch_size = 0; // feed.batch_size, or with max_tokens no cap (consumer_open)
    o->prefetch = feed.prefetch;
    o->stall_timeout_ms = feed.stall_timeout_ms;
}

static void
on_event(const stoker_event *e, void *arg)
{
    stoker_consumer *c = arg;
    c->epochs_ended += e->kind == STOKER_EVENT_EPOCH_END;
    if (e->kind == STOKER_EVENT_BROKER_RESTARTED) {
        c->restarts++;
        c->epochs_before_restart = c->epochs_ended;
    }
    if (e->kind == STOKER_EVENT_PRODUCER_LOST || e->kind == STOKER_EVENT_PRODUCER_FINISHED)
        snprintf(c->last_gone, sizeof(c->last_gone), "producer %u '%s' %s%s%s", e->producer,
                 e->name, e->kind == STOKER_EVENT_PRODUCER_LOST ? "lost" : "finished",
                 e->reason[0] != '\0' ? ": " : "", e->reason);
    if (c->ev_len == EVENT_RING) { // keep the newest
        c->ev_head = (c->ev_head + 1) % EVENT_RING;
        c->ev_len--;
    }
    c->events[(c->ev_head + c->ev_len) % EVENT_RING] = *e;
    c->ev_len++;
}

// The checks every use of opts shares: its version, a url, the token (into token, cap bytes;
// "" for none) and the TLS settings (into *tls, pointing into opts). STOKER_OK or
// STOKER_INVALID with err.
static int
check_options(const stoker_consumer_options *opts, char *token, size_t cap, stoker_tls_options *tls,
              char *err, size_t err_len)
{
    if (opts == NULL || opts->api_version != STOKER_API_VERSION)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "consumer options of API version %u; this library is version %d",
                             opts != NULL ? opts->api_version : 0u, STOKER_API_VERSION);
    if (opts->url == NULL || opts->url[0] == '\0')
        return stoker_errorf(err, err_len, STOKER_INVALID, "consumer options: no broker URL");
    token[0] = '\0';
    if (opts->token_file != NULL) {
        if (stoker_read_token_file(opts->token_file, token, cap, err, err_len) != STOKER_OK)
            return STOKER_INVALID;
    } else if (opts->token != NULL) {
        snprintf(token, cap, "%s", opts->token);
    }
    *tls = (stoker_tls_options){.ca = opts->tls_ca,
                                .cert = opts->tls_cert,
                                .key = opts->tls_key,
                                .insecure = opts->tls_insecure != 0};
    if (!stoker_tls_url(opts->url)) {
        if (tls->ca != NULL || tls->cert != NULL || tls->key != NULL || tls->insecure)
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "TLS settings (tls_ca, tls_cert, tls_key, tls_insecure) need a "
                                 "tls+tcp:// broker URL, not '%s'",
                                 opts->url);
        return STOKER_OK;
    }
    if (stoker_tls_check(tls, 0, err, err_len) != STOKER_OK)
        return STOKER_INVALID;
    return STOKER_OK;
}

// opts's mixture (mix and mix_stop) into *mix; STOKER_INVALID with err naming what is wrong.
static int
parse_mix(const stoker_consumer_options *opts, stoker_mix *mix, char *err, size_t err_len)
{
    int rv = stoker_mix_stop_parse(opts->mix_stop, &mix->stop, err, err_len);
    if (rv == STOKER_OK)
        rv = stoker_mix_parse(opts->mix, mix, err, err_len);
    if (rv == STOKER_OK)
        rv = stoker_mix_blend_parse(opts->mix_blend, &mix->blend, err, err_len);
    if (rv == STOKER_OK)
        rv = stoker_mix_schedule_parse(opts->mix_schedule, mix, err, err_len);
    if (rv == STOKER_OK && mix->n == 0 && opts->mix_stop != NULL && opts->mix_stop[0] != '\0')
        rv = stoker_errorf(err, err_len, STOKER_INVALID,
                           "mix_stop '%s' without a mixture (mix names the pools and weights)",
                           opts->mix_stop);
    return rv;
}

static int
open_consumer(const stoker_consumer_options *opts, const char *group, uint32_t rank, uint32_t world,
              uint64_t resume_step, int commit, stoker_consumer **out, char *err, size_t err_len)
{
    char scratch[512];
    if (err == NULL || err_len == 0) {
        err = scratch;
        err_len = sizeof(scratch);
    }
    err[0] = '\0';
    char token[256];
    stoker_tls_options tls;
    if (check_options(opts, token, sizeof(token), &tls, err, err_len) != STOKER_OK)
        return STOKER_INVALID;
    stoker_consumer *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return STOKER_NOMEM;
    char name[STOKER_NAME_MAX];
    if (opts->name != NULL)
        snprintf(name, sizeof(name), "%s", opts->name);
    else
        snprintf(name, sizeof(name), "consumer-%d", (int)getpid());

    stoker_trainer_options to;
    stoker_trainer_options_init(&to);
    to.client.url = opts->url;
    to.client.name = name;
    to.client.token = token[0] != '\0' ? token : NULL;
    to.client.stop = &c->stop;
    to.client.tls = tls;
    to.batching = (stoker_batching){.max_tokens = opts->max_tokens,
                                    .buckets = opts->buckets,
                                    .pack = opts->pack,
                                    .pack_whole = opts->pack_whole};
    if (parse_mix(opts, &to.mix, err, err_len) != STOKER_OK) {
        free(c);
        return STOKER_INVALID;
    }
    if (opts->batch_size != 0)
        to.batch_size = opts->batch_size;
    else if (opts->max_tokens > 0)
        to.batch_size = CONSUMER_MAX_SEQUENCES; // no cap but the broker's

    to.prefetch = opts->prefetch;
    to.stall_timeout_ms = opts->stall_timeout_ms;
    // Connecting is bounded too: a consumer never waits forever for a broker.
    to.client.give_up_ms =
        opts->connect_timeout_ms != 0 ? opts->connect_timeout_ms : opts->stall_timeout_ms;
    // One attempt of a request must not outlast a short connect timeout either.
    if (opts->connect_timeout_ms != 0 && opts->connect_timeout_ms < to.client.request_timeout_ms)
        to.client.request_timeout_ms =
            opts->connect_timeout_ms < 100 ? 100 : opts->connect_timeout_ms;
    to.on_event = on_event;
    to.on_event_arg = c;
    to.group = group;
    to.job = opts->job;
    c->in_group = group != NULL;
    c->mixed = to.mix.n > 0;
    c->in_job = opts->job != NULL && opts->job[0] != '\0';
    to.rank = rank;
    to.world = world;
    to.group_resume_step = resume_step;
    to.commit = commit != 0;
    c->stall_timeout_ms = opts->stall_timeout_ms;
    int rv = stoker_trainer_client_create(&to, &c->tc, err, err_len);
    if (rv != STOKER_OK) {
        free(c);
        return rv;
    }
    *out = c;
    return STOKER_OK;
}

int
stoker_consumer_open(const stoker_consumer_options *opts, stoker_consumer **out, char *err,
                     size_t err_len)
{
    return open_consumer(opts, NULL, 0, 0, 0, 0, out, err, err_len);
}

int
stoker_consumer_open_group(const stoker_consumer_options *opts, const char *group, uint32_t rank,
                           uint32_t world, stoker_consumer **out, char *err, size_t err_len)
{
    if (group == NULL || group[0] == '\0')
        return stoker_errorf(err, err_len, STOKER_INVALID, "consumer group: no group name");
    return open_consumer(opts, group, rank, world, 0, 0, out, err, err_len);
}

int
stoker_consumer_open_group_at(const stoker_consumer_options *opts, const char *group, uint32_t rank,
                              uint32_t world, uint64_t resume_step, int commit,
                              stoker_consumer **out, char *err, size_t err_len)
{
    if (group == NULL || group[0] == '\0')
        return stoker_errorf(err, err_len, STOKER_INVALID, "consumer group: no group name");
    return open_consumer(opts, group, rank, world, resume_step, commit, out, err, err_len);
}

uint64_t
stoker_consumer_group_steps(const stoker_consumer *c)
{
    return stoker_trainer_client_group_steps(c->tc);
}

uint64_t
stoker_consumer_group_leftover(const stoker_consumer *c)
{
    return stoker_trainer_client_group_leftover(c->tc);
}

static const stoker_field *
field_at(const stoker_consumer *c, uint32_t f)
{
    const stoker_schema *s = stoker_trainer_client_schema(c->tc);
    return f < s->n_fields ? &s->fields[f] : NULL;
}

void
stoker_consumer_schema(const stoker_consumer *c, char *buf, size_t len)
{
    stoker_schema_format(stoker_trainer_client_schema(c->tc), buf, len);
}

uint32_t
stoker_consumer_n_fields(const stoker_consumer *c)
{
    return stoker_trainer_client_schema(c->tc)->n_fields;
}

const char *
stoker_consumer_field_name(const stoker_consumer *c, uint32_t field)
{
    const stoker_field *f = field_at(c, field);
    return f != NULL ? f->name : NULL;
}

int
stoker_consumer_field_dtype(const stoker_consumer *c, uint32_t field)
{
    const stoker_field *f = field_at(c, field);
    return f != NULL ? (int)f->dtype : STOKER_DTYPE_INVALID;
}

int
stoker_consumer_field_shape(const stoker_consumer *c, uint32_t field, uint32_t *shape, uint32_t cap)
{
    const stoker_field *f = field_at(c, field);
    if (f == NULL)
        return -1;
    for (uint32_t i = 0; i < f->rank && i < cap; i++)
        shape[i] = f->shape[i];
    return (int)f->rank;
}

int
stoker_consumer_field_variable(const stoker_consumer *c, uint32_t field, uint32_t *max_rows)
{
    const stoker_field *f = field_at(c, field);
    if (f == NULL)
        return -1;
    if (max_rows != NULL)
        *max_rows = f->max_rows;
    return f->variable ? 1 : 0;
}

// The broker's account of the producers that went away: the last lost/finished event this
// consumer heard of, or, when it heard none (it connected after they went), their states.
static void
describe_end(stoker_consumer *c, char *buf, size_t len)
{
    if (c->last_gone[0] != '\0') {
        snprintf(buf, len, "%s", c->last_gone);
        return;
    }
    snprintf(buf, len, "no producer connected");
    stoker_status *st = NULL;
    if (stoker_trainer_client_status(c->tc, &st) != STOKER_OK)
        return;
    size_t at = 0;
    for (uint32_t i = 0; i < st->n_producers && at < len; i++) {
        const stoker_producer_info *p = &st->producers[i];
        if (i == 4) {
            snprintf(buf + at, len - at, ", and %u more", st->n_producers - i);
            break;
        }
        int n = snprintf(buf + at, len - at, "%sproducer %u '%s' %s", i > 0 ? ", " : "", p->id,
                         p->name, stoker_producer_status_name(p->status));
        at += n > 0 ? (size_t)n : 0;
    }
    stoker_status_destroy(st);
}

static int
next_within(stoker_consumer *c, stoker_consumer_batch **out, uint32_t wait_ms)
{
    c->error[0] = '\0';
    stoker_consumer_batch *cb = malloc(sizeof(*cb));
    if (cb == NULL) {
        return stoker_errorf(c->error, sizeof(c->error), STOKER_NOMEM, "out of memory");
    }
    stoker_batch *b = NULL;
    int rv = stoker_trainer_client_next_within(c->tc, &b, wait_ms);
    if (rv == STOKER_OK) {
        cb->batch = b;
        cb->acked = 0;
        *out = cb;
        return STOKER_OK;
    }
    free(cb);
    char gone[sizeof(c->last_gone)];
    if ((c->in_group || c->mixed || c->in_job) &&
        (rv == STOKER_NO_PRODUCERS || rv == STOKER_END_OF_DATA || rv == STOKER_GROUP_BROKEN)) {
        // A rank: the broker's word names the step and the leftover (or the lost rank); a
        // mixture: the source that ran dry; a job: that it was detached (docs/sharing.md).
        stoker_errorf(c->error, sizeof(c->error), rv, "%s",
                      stoker_trainer_client_end_reason(c->tc));
        return rv;
    }
    if (rv == STOKER_NO_PRODUCERS || rv == STOKER_END_OF_DATA)
        describe_end(c, gone, sizeof(gone));
    // The reason alone: what happened (stalled, the supply ended) is the code's, which a binding
    // says once (Python's exceptions: their class and str).
    const char *refusal = stoker_trainer_client_refusal(c->tc);
    switch (rv) {
    case STOKER_NO_PRODUCERS:
        stoker_errorf(c->error, sizeof(c->error), rv,
                      "every producer was lost and nothing is queued (last: %s)", gone);
        break;
    case STOKER_END_OF_DATA:
        stoker_errorf(c->error, sizeof(c->error), rv,
                      "every producer finished and nothing is queued (last: %s)", gone);
        break;
    case STOKER_STALLED:
        stoker_errorf(c->error, sizeof(c->error), rv, "no batch within %.1f s%s%s",
                      c->stall_timeout_ms / 1000.0, refusal[0] != '\0' ? ": " : "", refusal);
        break;
    case STOKER_INTERRUPTED:
        c->stop = 0; // one interruption per request: the consumer stays usable
        stoker_errorf(c->error, sizeof(c->error), rv, "interrupted");
        break;
    case STOKER_TIMEOUT:
        stoker_errorf(c->error, sizeof(c->error), rv, "no batch within %u ms (not stalled yet)%s%s",
                      wait_ms, refusal[0] != '\0' ? ": " : "", refusal);
        break;
    default:
        // The broker's reason when it refused (a batch larger than it allows, ...).
        stoker_errorf(c->error, sizeof(c->error), rv, "%s",
                      refusal[0] != '\0' ? refusal : stoker_strerror(rv));
        break;
    }
    return rv;
}

int
stoker_consumer_next(stoker_consumer *c, stoker_consumer_batch **out)
{
    return next_within(c, out, c->stall_timeout_ms);
}

int
stoker_consumer_next_within(stoker_consumer *c, stoker_consumer_batch **out, uint32_t wait_ms)
{
    return next_within(c, out, wait_ms);
}

void
stoker_consumer_ack(stoker_consumer *c, stoker_consumer_batch *b)
{
    if (b == NULL || b->acked)
        return;
    b->acked = 1;
    stoker_trainer_client_ack(c->tc, b->batch->lease);
}

int
stoker_consumer_flush(stoker_consumer *c)
{
    c->error[0] = '\0';
    int rv = stoker_trainer_client_flush(c->tc);
    if (rv != STOKER_OK)
        stoker_errorf(c->error, sizeof(c->error), rv, "could not acknowledge: %s",
                      stoker_strerror(rv));
    return rv;
}

void
stoker_consumer_set_commit(stoker_consumer *c, int on)
{
    stoker_trainer_client_set_commit(c->tc, on);
}

int
stoker_consumer_commit(stoker_consumer *c)
{
    c->error[0] = '\0';
    char before[sizeof(c->error)];
    snprintf(before, sizeof(before), "%s", stoker_trainer_client_refusal(c->tc));
    uint64_t step = stoker_trainer_client_group_steps(c->tc);
    int rv = stoker_trainer_client_commit(c->tc);
    if (rv == STOKER_OK)
        return rv;
    // The broker's reason when it refused the commit (a rank lost or gone, ranks at different
    // steps, a rank that did not commit in time); a refusal it repeats reads the same as the
    // last. A request that got no answer has no such reason: the code's, and the step.
    const char *refusal = stoker_trainer_client_refusal(c->tc);
    const char *end = stoker_trainer_client_end_reason(c->tc);
    int answered = rv != STOKER_TIMEOUT && rv != STOKER_CONNECTION && rv != STOKER_INTERRUPTED &&
                   rv != STOKER_NOMEM;
    if (refusal[0] != '\0' && (strcmp(refusal, before) != 0 || answered))
        stoker_errorf(c->error, sizeof(c->error), rv, "%s", refusal);
    else if (rv == STOKER_GROUP_BROKEN && end[0] != '\0')
        stoker_errorf(c->error, sizeof(c->error), rv, "%s", end);
    else if (c->in_group)
        stoker_errorf(c->error, sizeof(c->error), rv,
                      "%s (the group commit at step %llu; its acknowledgements stay kept)",
                      stoker_strerror(rv), (unsigned long long)step);
    else
        stoker_errorf(c->error, sizeof(c->error), rv,
                      "%s (%llu acknowledgements stay kept for the next commit)",
                      stoker_strerror(rv),
                      (unsigned long long)stoker_trainer_client_uncommitted(c->tc));
    return rv;
}

uint64_t
stoker_consumer_uncommitted(const stoker_consumer *c)
{
    return stoker_trainer_client_uncommitted(c->tc);
}

void
stoker_consumer_batch_free(stoker_consumer_batch *b)
{
    if (b == NULL)
        return;
    stoker_batch_destroy(b->batch);
    free(b);
}

void
stoker_consumer_release(stoker_consumer *c, stoker_consumer_batch *b)
{
    if (b == NULL)
        return;
    stoker_consumer_ack(c, b);
    stoker_consumer_batch_free(b);
}

int
stoker_consumer_batch_shared(const stoker_consumer_batch *b)
{
    return b->batch->arena != NULL && !b->batch->chunk.owns_data;
}

const char *
stoker_consumer_delivery(const stoker_consumer *c)
{
    return stoker_trainer_client_delivery(c->tc);
}

void
stoker_consumer_delivery_counts(const stoker_consumer *c, uint64_t *shm, uint64_t *socket,
                                uint64_t *arena_full)
{
    stoker_trainer_client_batches_by_path(c->tc, shm, socket, arena_full);
}

int
stoker_consumer_set_mix(stoker_consumer *c, const char *mix, uint64_t *from_batch)
{
    c->error[0] = '\0';
    stoker_mix m = {0};
    int rv = stoker_mix_parse(mix, &m, c->error, sizeof(c->error));
    if (rv == STOKER_OK && m.n == 0)
        rv = stoker_errorf(c->error, sizeof(c->error), STOKER_INVALID, "set_mix: no pool named");
    if (rv == STOKER_OK)
        rv = stoker_trainer_client_set_mix(c->tc, &m, from_batch, c->error, sizeof(c->error));
    return rv;
}

uint32_t
stoker_consumer_batch_count(const stoker_consumer_batch *b)
{
    return b->batch->chunk.count;
}

int
stoker_consumer_batch_field(const stoker_consumer_batch *b, uint32_t field, void **data, int *dtype,
                            uint32_t *rank, uint32_t *shape, uint64_t *count, uint64_t *bytes)
{
    const stoker_chunk *ch = &b->batch->chunk;
    if (field >= ch->schema.n_fields)
        return STOKER_INVALID;
    const stoker_field *f = &ch->schema.fields[field];
    uint64_t elems = (uint64_t)ch->count * stoker_field_elems(f);
    uint64_t rows = 0;
    if (f->variable) {
        rows = ch->offsets[field] != NULL ? stoker_chunk_var_offset(ch, field, ch->count) : 0;
        elems = rows * (stoker_field_row_bytes(f) / stoker_dtype_size(f->dtype));
    }
    if (data != NULL)
        *data = ch->data[field];
    if (dtype != NULL)
        *dtype = (int)f->dtype;
    if (rank != NULL)
        *rank = f->variable ? f->rank : f->rank + 1;
    if (shape != NULL && f->variable) {
        shape[0] = (uint32_t)rows; // (rows, dims after the first): the values concatenated
        for (uint32_t i = 1; i < f->rank; i++)
            shape[i] = f->shape[i];
    } else if (shape != NULL) {
        shape[0] = ch->count;
        for (uint32_t i = 0; i < f->rank; i++)
            shape[i + 1] = f->shape[i];
    }
    if (count != NULL)
        *count = elems;
    if (bytes != NULL)
        *bytes = elems * stoker_dtype_size(f->dtype);
    return STOKER_OK;
}

int
stoker_consumer_batch_offsets(const stoker_consumer_batch *b, uint32_t field,
                              const uint64_t **offsets, uint64_t *n)
{
    const stoker_chunk *ch = &b->batch->chunk;
    if (field >= ch->schema.n_fields || !ch->schema.fields[field].variable ||
        ch->offsets[field] == NULL)
        return STOKER_INVALID;
    *offsets = ch->offsets[field];
    *n = (uint64_t)ch->count + 1;
    return STOKER_OK;
}

uint32_t
stoker_consumer_batch_n_runs(const stoker_consumer_batch *b)
{
    return b->batch->n_runs;
}

int
stoker_consumer_batch_run(const stoker_consumer_batch *b, uint32_t run, uint32_t *producer,
                          uint64_t *session, uint64_t *first_seq, uint32_t *count)
{
    if (run >= b->batch->n_runs)
        return STOKER_INVALID;
    const stoker_run *r = &b->batch->runs[run];
    if (producer != NULL)
        *producer = r->producer;
    if (session != NULL)
        *session = r->session;
    if (first_seq != NULL)
        *first_seq = r->first_seq;
    if (count != NULL)
        *count = r->count;
    return STOKER_OK;
}

uint32_t
stoker_consumer_batch_sources(const stoker_consumer_batch *b, uint32_t *sources, uint32_t cap)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < b->batch->n_runs; i++) {
        const stoker_run *r = &b->batch->runs[i];
        for (uint32_t k = 0; k < r->count && n < cap; k++, n++)
            sources[n] = r->source > 0 ? r->source - 1 : UINT32_MAX;
    }
    return n;
}

uint32_t
stoker_consumer_batch_identities(const stoker_consumer_batch *b, uint64_t *sessions, uint64_t *seqs,
                                 uint32_t cap)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < b->batch->n_runs; i++) {
        const stoker_run *r = &b->batch->runs[i];
        for (uint32_t k = 0; k < r->count && n < cap; k++, n++) {
            sessions[n] = r->session;
            seqs[n] = r->first_seq + k;
        }
    }
    return n;
}

static void
copy_str(char *dst, size_t len, const char *src)
{
    if (dst != NULL && len > 0)
        snprintf(dst, len, "%s", src);
}

int
stoker_consumer_poll_event(stoker_consumer *c, int *kind, uint32_t *producer, char *name,
                           size_t name_len, double *at_s, char *reason, size_t reason_len)
{
    if (c->ev_len == 0)
        return 0;
    const stoker_event *e = &c->events[c->ev_head];
    if (kind != NULL)
        *kind = (int)e->kind;
    if (producer != NULL)
        *producer = e->producer;
    copy_str(name, name_len, e->name);
    if (at_s != NULL)
        *at_s = e->at_s;
    copy_str(reason, reason_len, e->reason);
    c->ev_head = (c->ev_head + 1) % EVENT_RING;
    c->ev_len--;
    return 1;
}

const char *
stoker_consumer_error(const stoker_consumer *c)
{
    return c->error;
}

uint64_t
stoker_consumer_duplicates(const stoker_consumer *c)
{
    return stoker_trainer_client_duplicates(c->tc);
}

// The status as /status renders it (stoker_status_render_json), without its final newline,
// into buf: STOKER_TOO_LARGE with the needed length when buf is short.
static int
status_to_json(const stoker_status *st, char *buf, size_t cap, size_t *len)
{
    char *text = stoker_status_render_json(st);
    if (text == NULL)
        return STOKER_NOMEM;
    size_t n = strlen(text);
    if (n > 0 && text[n - 1] == '\n')
        text[--n] = '\0';
    if (n < cap)
        memcpy(buf, text, n + 1);
    free(text);
    if (len != NULL)
        *len = n;
    return n < cap ? STOKER_OK : STOKER_TOO_LARGE;
}

int
stoker_consumer_status_json(stoker_consumer *c, char *buf, size_t cap, size_t *len)
{
    c->error[0] = '\0';
    stoker_status *st = NULL;
    int rv = stoker_trainer_client_status(c->tc, &st);
    if (rv != STOKER_OK) {
        return stoker_errorf(c->error, sizeof(c->error), rv, "status: %s", stoker_strerror(rv));
    }
    rv = status_to_json(st, buf, cap, len);
    stoker_status_destroy(st);
    return rv;
}

int
stoker_status_json_opts(const stoker_consumer_options *opts, uint32_t timeout_ms, char *buf,
                        size_t cap, size_t *len)
{
    char err[512] = "", token[256];
    stoker_tls_options tls;
    stoker_status *st = NULL;
    int rv = check_options(opts, token, sizeof(token), &tls, err, sizeof(err));
    if (rv == STOKER_OK)
        rv = stoker_status_fetch_tls(opts->url, token[0] != '\0' ? token : NULL, &tls, timeout_ms,
                                     &st, err, sizeof(err));
    if (rv != STOKER_OK) {
        if (buf != NULL && cap > 0)
            snprintf(buf, cap, "%s", err[0] != '\0' ? err : stoker_strerror(rv));
        return rv;
    }
    rv = status_to_json(st, buf, cap, len);
    stoker_status_destroy(st);
    return rv;
}

void
stoker_consumer_interrupt(stoker_consumer *c)
{
    c->stop = 1;
}

void
stoker_consumer_close(stoker_consumer *c)
{
    if (c == NULL)
        return;
    stoker_trainer_client_destroy(c->tc);
    free(c);
}

// --- datasets -----------------------------------------------------------------------------------

uint32_t
stoker_consumer_batch_items(const stoker_consumer_batch *b, uint32_t *epochs, uint64_t *indices,
                            uint32_t cap)
{
    const stoker_batch *batch = b->batch;
    if (batch->items == NULL)
        return 0;
    uint32_t n = batch->chunk.count < cap ? batch->chunk.count : cap;
    for (uint32_t i = 0; i < n; i++) {
        epochs[i] = stoker_item_epoch(batch->items[i]);
        indices[i] = stoker_item_index(batch->items[i]);
    }
    return n;
}

uint32_t
stoker_consumer_epochs_ended(const stoker_consumer *c)
{
    return c->epochs_ended;
}

uint32_t
stoker_consumer_broker_restarts(const stoker_consumer *c, uint64_t *broker_id,
                                uint32_t *epochs_ended_before)
{
    if (broker_id != NULL)
        *broker_id = stoker_trainer_client_broker_id(c->tc);
    if (epochs_ended_before != NULL)
        *epochs_ended_before = c->epochs_before_restart;
    return c->restarts;
}
