// The training loop (see train.h).
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/rng.h"
#include "stoker/synthetic.h"
#include "stoker/text.h"
#include "stoker/trainer_client.h"
#include "train.h"

void
train_config_init(train_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->delay_min_s = 0.05;
    cfg->delay_max_s = 0.5;
    cfg->batch_size = 4;
    cfg->round_length = 20;
    cfg->rounds = 100;
    cfg->device = "auto";
    cfg->hidden[0] = 16;
    cfg->n_hidden = 1;
    cfg->lr = 0.001f;
    cfg->seed = 1;
    cfg->input_field = "input";
    cfg->target_field = "output";
    cfg->prefetch = 4;
    cfg->stall_timeout_ms = 4000;
}

const char *
train_status_name(train_status status)
{
    static const char *const names[] = {"completed", "time_goal",   "supply_ended",
                                        "stalled",   "interrupted", "error"};
    return status <= TRAIN_ERROR ? names[status] : "error";
}

static int
exit_code(train_status status)
{
    switch (status) {
    case TRAIN_COMPLETED:
    case TRAIN_TIME_GOAL:
        return 0;
    case TRAIN_SUPPLY_ENDED:
        return 3;
    case TRAIN_STALLED:
        return 4;
    case TRAIN_INTERRUPTED:
        return 130;
    default:
        return 1;
    }
}

static void set_reason(train_result *res, train_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
set_reason(train_result *res, train_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->reason, sizeof(res->reason), fmt, ap);
    va_end(ap);
    res->status = status;
}

// Checks that the schema has what the network needs; sizes the network's ends.
static int
check_fields(const train_config *cfg, const stoker_schema *schema, int *in_idx, int *tgt_idx,
             uint32_t *in_dim, uint32_t *out_dim, char *why, size_t why_len)
{
    char spec[1024];
    stoker_schema_format(schema, spec, sizeof(spec));
    *in_idx = stoker_schema_find(schema, cfg->input_field);
    *tgt_idx = stoker_schema_find(schema, cfg->target_field);
    if (*in_idx < 0) {
        snprintf(why, why_len, "input field '%s' is not in the schema %s (choose one with --input)",
                 cfg->input_field, spec);
        return STOKER_INVALID;
    }
    if (*tgt_idx < 0) {
        snprintf(why, why_len,
                 "target field '%s' is not in the schema %s (choose one with --target)",
                 cfg->target_field, spec);
        return STOKER_INVALID;
    }
    const stoker_field *in = &schema->fields[*in_idx], *tgt = &schema->fields[*tgt_idx];
    if (in->dtype != STOKER_FLOAT32) {
        snprintf(why, why_len, "input field '%s' is %s; the trainer takes float32 (schema %s)",
                 in->name, stoker_dtype_name(in->dtype), spec);
        return STOKER_INVALID;
    }
    *in_dim = (uint32_t)stoker_field_elems(in);
    if (cfg->classes > 0) {
        if (tgt->dtype != STOKER_INT32 || stoker_field_elems(tgt) != 1) {
            snprintf(why, why_len,
                     "--classes needs an int32[1] class label; target '%s' is %s[%zu] "
                     "(schema %s)",
                     tgt->name, stoker_dtype_name(tgt->dtype), stoker_field_elems(tgt), spec);
            return STOKER_INVALID;
        }
        *out_dim = cfg->classes;
    } else {
        if (tgt->dtype != STOKER_FLOAT32) {
            snprintf(why, why_len,
                     "target '%s' is %s: float32 targets train with MSE; for class labels give "
                     "--classes N (schema %s)",
                     tgt->name, stoker_dtype_name(tgt->dtype), spec);
            return STOKER_INVALID;
        }
        *out_dim = (uint32_t)stoker_field_elems(tgt);
    }
    return STOKER_OK;
}

static void
record_event(train_result *res, const stoker_event *e, double at_s)
{
    const char *what = e->kind == STOKER_EVENT_PRODUCER_LOST       ? "lost"
                       : e->kind == STOKER_EVENT_PRODUCER_FINISHED ? "finished"
                       : e->kind == STOKER_EVENT_PRODUCER_JOINED   ? "joined"
                                                                   : "reconnected";
    if (e->kind == STOKER_EVENT_PRODUCER_LOST)
        stoker_warn("producer %u '%s' %s: %s", e->producer, e->name, what, e->reason);
    else
        stoker_info("producer %u '%s' %s", e->producer, e->name, what);
    if (res->n_events == TRAIN_MAX_EVENTS)
        return;
    train_event *t = &res->events[res->n_events++];
    t->kind = e->kind;
    t->producer = e->producer;
    snprintf(t->name, sizeof(t->name), "%s", e->name);
    snprintf(t->reason, sizeof(t->reason), "%s", e->reason);
    t->at_s = at_s;
}

// Events are recorded the moment the client hears of them, even while it waits for a batch.
typedef struct event_sink {
    train_result *res;
    uint64_t origin_ns;
} event_sink;

static void
on_event(const stoker_event *e, void *arg)
{
    event_sink *sink = arg;
    record_event(sink->res, e, (double)(stoker_now_ns() - sink->origin_ns) / 1e9);
}

typedef struct progress {
    int live;
    uint64_t last_status_ms;
    uint32_t producers_alive;
    uint64_t queued;
    int have_status;
} progress;

static void
report(const train_config *cfg, progress *pg, stoker_trainer_client *tc, const train_result *res,
       double round_loss, double elapsed_s, double wait_s, int round_done)
{
    uint64_t now = stoker_now_ms();
    if (tc != NULL && now >= pg->last_status_ms + 1000) {
        stoker_status *st;
        if (stoker_trainer_client_status(tc, &st) == STOKER_OK) {
            pg->producers_alive = st->counters.producers_alive;
            pg->queued = st->counters.queued;
            pg->have_status = 1;
            stoker_status_destroy(st);
        }
        pg->last_status_ms = now;
    }
    char supply[96] = "";
    if (pg->have_status)
        snprintf(supply, sizeof(supply), "  producers %u  queued %llu", pg->producers_alive,
                 (unsigned long long)pg->queued);
    double rate = elapsed_s > 0 ? (double)res->examples / elapsed_s : 0;
    double wait = elapsed_s > 0 ? 100.0 * wait_s / elapsed_s : 0;
    if (pg->live) {
        fprintf(stderr, "\r\033[Kround %llu/%u  loss %.5f  %.1f ex/s  data wait %.1f%%%s",
                (unsigned long long)res->rounds, cfg->rounds, round_loss, rate, wait, supply);
        fflush(stderr);
    } else if (round_done) {
        fprintf(stderr, "round %llu/%u  loss %.5f  examples %llu  %.1f ex/s  data wait %.1f%%%s\n",
                (unsigned long long)res->rounds, cfg->rounds, round_loss,
                (unsigned long long)res->examples, rate, wait, supply);
    }
}

int
train_run(const train_config *cfg, train_result *res)
{
    memset(res, 0, sizeof(*res));
    snprintf(res->device, sizeof(res->device), "cpu");
    char why[512] = "";
    int rv;
    stoker_schema schema;
    stoker_trainer_client *tc = NULL;
    stoker_synthetic synth = {cfg->delay_min_s, cfg->delay_max_s, cfg->stop};
    stoker_generator gen = {0}; // zeroed: fini is safe on the paths that never set it up
    stoker_chunk inline_chunk = {0};
    backend *be = NULL;
    mlp *net = NULL;
    event_sink sink = {res, stoker_now_ns()};

    // The device first: probing CUDA takes a while, and the clock of a training run should not
    // include it (nor the examples producers queue meanwhile).
    if ((rv = backend_create(cfg->device, &be, why, sizeof(why))) != STOKER_OK) {
        set_reason(res, TRAIN_ERROR, "--device %s: %s", cfg->device, why);
        goto done;
    }
    if (why[0] != '\0')
        stoker_info("backend-fallback: %s", why);
    snprintf(res->device, sizeof(res->device), "%s", be->name);
    stoker_info("backend: %s (%s)", be->name, be->device);
    if (cfg->inline_mode) {
        stoker_synthetic_generator(&gen, &synth);
        schema = gen.schema;
        if (stoker_chunk_init(&inline_chunk, &schema, cfg->batch_size) != STOKER_OK) {
            set_reason(res, TRAIN_ERROR, "out of memory");
            goto done;
        }
    } else {
        stoker_trainer_options to;
        stoker_trainer_options_init(&to);
        char name[STOKER_NAME_MAX];
        snprintf(name, sizeof(name), "trainer-%d", (int)getpid());
        to.client.url = cfg->broker_url;
        to.client.name = name;
        to.client.token = cfg->token;
        to.client.tls = cfg->tls;
        to.client.stop = cfg->stop;
        // Connecting is bounded by the stall timeout too: a trainer never waits forever.
        to.client.give_up_ms = cfg->stall_timeout_ms;
        to.batch_size = cfg->batch_size;
        to.prefetch = cfg->prefetch;
        to.stall_timeout_ms = cfg->stall_timeout_ms;
        to.on_event = on_event;
        to.on_event_arg = &sink;
        rv = stoker_trainer_client_create(&to, &tc, why, sizeof(why));
        if (rv != STOKER_OK) {
            train_status st = rv == STOKER_INTERRUPTED                          ? TRAIN_INTERRUPTED
                              : rv == STOKER_STALLED || rv == STOKER_CONNECTION ? TRAIN_STALLED
                                                                                : TRAIN_ERROR;
            set_reason(res, st, "cannot start feeding from %s: %s", cfg->broker_url, why);
            tc = NULL;
            goto done;
        }
        schema = *stoker_trainer_client_schema(tc);
    }

    int in_idx, tgt_idx;
    uint32_t in_dim, out_dim;
    if (check_fields(cfg, &schema, &in_idx, &tgt_idx, &in_dim, &out_dim, why, sizeof(why)) !=
        STOKER_OK) {
        set_reason(res, TRAIN_ERROR, "%s", why);
        goto done;
    }
    mlp_config mc = {
        .input = in_dim,
        .hidden = cfg->hidden,
        .hidden_count = cfg->n_hidden,
        .output = out_dim,
        .classes = cfg->classes,
        .seed = cfg->seed,
        .lr = cfg->lr,
    };
    if ((rv = mlp_create(be, &mc, &net, why, sizeof(why))) != STOKER_OK) {
        set_reason(res, TRAIN_ERROR, "cannot build the network: %s", why);
        goto done;
    }

    progress pg = {.live = cfg->progress};
    uint64_t total = (uint64_t)cfg->rounds * cfg->round_length;
    uint64_t start_ns = stoker_now_ns();
    uint64_t wait_ns = 0;
    double round_loss_sum = 0;
    uint64_t round_batches = 0;
    uint64_t inline_seq = 0;
    for (;;) {
        double elapsed_s = (double)(stoker_now_ns() - start_ns) / 1e9;
        if (cfg->stop != NULL && *cfg->stop) {
            set_reason(res, TRAIN_INTERRUPTED, "stopped by a signal");
            break;
        }
        if (res->examples >= total) {
            set_reason(res, TRAIN_COMPLETED, "all %u rounds done", cfg->rounds);
            break;
        }
        if (cfg->time_goal_s > 0 && elapsed_s >= cfg->time_goal_s) {
            set_reason(res, TRAIN_TIME_GOAL, "time goal of %.1f s reached", cfg->time_goal_s);
            break;
        }
        uint64_t t0 = stoker_now_ns();
        stoker_batch *batch = NULL;
        const stoker_chunk *chunk;
        if (cfg->inline_mode) {
            inline_chunk.count = 0;
            rv = stoker_generator_fill_chunk(&gen, &inline_chunk, cfg->batch_size, inline_seq,
                                             cfg->seed, "inline");
            inline_seq += inline_chunk.count;
            if (rv == STOKER_INTERRUPTED || (cfg->stop != NULL && *cfg->stop)) {
                wait_ns += stoker_now_ns() - t0;
                set_reason(res, TRAIN_INTERRUPTED, "stopped by a signal");
                break;
            }
            chunk = &inline_chunk;
        } else {
            rv = stoker_trainer_client_next(tc, &batch);
            chunk = batch != NULL ? &batch->chunk : NULL;
        }
        wait_ns += stoker_now_ns() - t0;
        if (rv != STOKER_OK) {
            switch (rv) {
            case STOKER_NO_PRODUCERS:
                set_reason(res, TRAIN_SUPPLY_ENDED,
                           "data supply ended: every producer was lost and nothing is queued");
                break;
            case STOKER_END_OF_DATA:
                set_reason(res, TRAIN_SUPPLY_ENDED,
                           "data supply ended: every producer finished and nothing is queued");
                break;
            case STOKER_STALLED:
                set_reason(res, TRAIN_STALLED, "stalled: no batch within %.1f s",
                           cfg->stall_timeout_ms / 1000.0);
                break;
            case STOKER_INTERRUPTED:
                set_reason(res, TRAIN_INTERRUPTED, "stopped by a signal");
                break;
            default:
                set_reason(res, TRAIN_ERROR, "feeding failed: %s", stoker_strerror(rv));
                break;
            }
            break;
        }
        float loss;
        const float *x = (const float *)chunk->data[in_idx];
        const void *y = chunk->data[tgt_idx];
        rv = mlp_step(net, x, y, chunk->count, &loss);
        uint32_t n = chunk->count;
        if (batch != NULL) {
            stoker_trainer_client_ack(tc, batch->lease);
            stoker_batch_destroy(batch);
        }
        if (rv != STOKER_OK) {
            set_reason(res, TRAIN_ERROR, "training step failed: %s", mlp_error(net));
            break;
        }
        res->examples += n;
        res->batches++;
        round_loss_sum += loss;
        round_batches++;
        res->final_loss = round_loss_sum / (double)round_batches;
        int round_done = res->examples >= (res->rounds + 1) * (uint64_t)cfg->round_length;
        if (round_done) {
            res->rounds++;
            if (res->rounds == 1)
                res->first_round_loss = res->final_loss;
        }
        double now_s = (double)(stoker_now_ns() - start_ns) / 1e9;
        if (round_done || pg.live)
            report(cfg, &pg, tc, res, res->final_loss, now_s, (double)wait_ns / 1e9, round_done);
        if (round_done) {
            round_loss_sum = 0;
            round_batches = 0;
        }
    }
    if (pg.live)
        fputc('\n', stderr);
    res->seconds = (double)(stoker_now_ns() - start_ns) / 1e9;
    res->examples_per_second = res->seconds > 0 ? (double)res->examples / res->seconds : 0;
    res->data_wait_fraction = res->seconds > 0 ? (double)wait_ns / 1e9 / res->seconds : 0;

done:
    if (cfg->inline_mode && res->status != TRAIN_ERROR) {
        // No broker: everything generated was trained on, once.
        res->has_audit = 1;
        res->produced = res->acknowledged = res->examples;
    }
    if (tc != NULL) {
        stoker_trainer_client_flush(tc);
        stoker_status *st;
        int srv = stoker_trainer_client_status(tc, &st);
        if (srv == STOKER_OK) {
            res->has_audit = 1;
            res->produced = st->counters.produced;
            res->acknowledged = st->counters.acknowledged;
            res->still_queued = st->counters.queued;
            res->in_flight = st->counters.in_flight;
            res->redelivered = st->counters.redelivered;
            res->discrepancy = (int64_t)(st->counters.produced - st->counters.acknowledged -
                                         st->counters.queued - st->counters.in_flight);
            stoker_status_destroy(st);
        } else {
            stoker_warn("audit: Status failed (%s); audit left out", stoker_strerror(srv));
        }
        res->duplicates_seen = stoker_trainer_client_duplicates(tc);
        stoker_trainer_client_destroy(tc);
    }
    if (net != NULL && cfg->weights_path != NULL) {
        if (mlp_save(net, cfg->weights_path) == STOKER_OK) {
            stoker_info("weights saved to %s (%llu steps)", cfg->weights_path,
                        (unsigned long long)mlp_steps(net));
        } else {
            stoker_error("cannot save weights to %s: %s", cfg->weights_path, mlp_error(net));
            if (res->status == TRAIN_COMPLETED || res->status == TRAIN_TIME_GOAL)
                set_reason(res, TRAIN_ERROR, "cannot save weights: %s", mlp_error(net));
        }
    }
    mlp_destroy(net);
    backend_destroy(be);
    stoker_chunk_fini(&inline_chunk);
    if (cfg->inline_mode)
        stoker_generator_fini(&gen);
    return exit_code(res->status);
}

static double
finite_or_zero(double v)
{
    return isfinite(v) ? v : 0.0;
}

void
train_write_json(const train_result *r, FILE *f)
{
    fprintf(f, "{\"status\": \"%s\", \"reason\": ", train_status_name(r->status));
    stoker_text_fput_json(r->reason, f);
    fprintf(f,
            ", \"device\": \"%s\", \"rounds\": %llu, \"batches\": %llu, \"examples\": %llu, "
            "\"seconds\": %.6f, \"examples_per_second\": %.6f, \"final_loss\": %.9g, "
            "\"first_round_loss\": %.9g, \"data_wait_fraction\": %.6f",
            r->device, (unsigned long long)r->rounds, (unsigned long long)r->batches,
            (unsigned long long)r->examples, r->seconds, r->examples_per_second,
            finite_or_zero(r->final_loss), finite_or_zero(r->first_round_loss),
            r->data_wait_fraction);
    if (r->has_audit)
        fprintf(f,
                ", \"audit\": {\"produced\": %llu, \"acknowledged\": %llu, \"still_queued\": %llu, "
                "\"in_flight\": %llu, \"redelivered\": %llu, \"duplicates_seen\": %llu, "
                "\"discrepancy\": %lld}",
                (unsigned long long)r->produced, (unsigned long long)r->acknowledged,
                (unsigned long long)r->still_queued, (unsigned long long)r->in_flight,
                (unsigned long long)r->redelivered, (unsigned long long)r->duplicates_seen,
                (long long)r->discrepancy);
    else
        fprintf(f, ", \"audit\": null");
    fprintf(f, ", \"events\": [");
    for (uint32_t i = 0; i < r->n_events; i++) {
        const train_event *e = &r->events[i];
        fprintf(f, "%s{\"kind\": \"%s\", \"producer\": %u, \"name\": ", i ? ", " : "",
                stoker_event_kind_name(e->kind), e->producer);
        stoker_text_fput_json(e->name, f);
        fprintf(f, ", \"at\": %.3f, \"reason\": ", e->at_s);
        stoker_text_fput_json(e->reason, f);
        fputc('}', f);
    }
    fprintf(f, "]}\n");
}
