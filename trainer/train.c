// The training loop (see train.h).
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "checkpoint.h"
#include "source.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/synthetic.h"
#include "stoker/text.h"
#include "stoker/trainer_client.h"
#include "train.h"

void
train_config_init(train_config *cfg)
{
    // The feeding and inline defaults are the library's, written once there.
    stoker_trainer_options feed;
    stoker_trainer_options_init(&feed);
    stoker_synthetic synth;
    stoker_synthetic_init(&synth);
    memset(cfg, 0, sizeof(*cfg));
    cfg->delay_min_s = synth.delay_min_s;
    cfg->delay_max_s = synth.delay_max_s;
    cfg->batch_size = feed.batch_size;
    cfg->round_length = 20;
    cfg->rounds = 100;
    cfg->device = "auto";
    cfg->hidden[0] = 16;
    cfg->n_hidden = 1;
    cfg->lr = 0.001f;
    cfg->seed = 1;
    cfg->input_field = "input";
    cfg->target_field = "output";
    cfg->prefetch = feed.prefetch;
    cfg->stall_timeout_ms = feed.stall_timeout_ms;
    cfg->checkpoint_every = 10;
}

const char *
train_status_name(train_status status)
{
    static const char *const names[] = {"completed",   "time_goal", "supply_ended", "stalled",
                                        "interrupted", "error",     "group_broken", "broker_lost"};
    return status <= TRAIN_BROKER_LOST ? names[status] : "error";
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
    case TRAIN_GROUP_BROKEN:
        return 5;
    // Not 4: a stall waits on producers at a broker that answers; here the broker itself is
    // gone, which a supervisor handles differently (start the broker, then the trainer). Not 3:
    // that is the broker's own word that the supply ended, which nobody said here.
    case TRAIN_BROKER_LOST:
        return 6;
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

// A batch's fields in the forms mlp_step takes: uint8 inputs (the images generator's --output
// uint8) scaled to [0, 1] floats, int64 labels (its default) narrowed to int32. Buffers grow
// to the largest batch and live for the run.
typedef struct batch_view {
    float *x;
    int32_t *y;
    size_t x_cap, y_cap;
} batch_view;

static int
view_batch(batch_view *v, const stoker_field *in, const stoker_field *tgt, const void *x_data,
           const void *y_data, uint32_t n, const float **x, const void **y)
{
    *x = x_data;
    *y = y_data;
    if (in->dtype == STOKER_UINT8) {
        size_t count = (size_t)n * stoker_field_elems(in);
        if (count > v->x_cap) {
            float *grown = realloc(v->x, count * sizeof *grown);
            if (grown == NULL)
                return STOKER_NOMEM;
            v->x = grown;
            v->x_cap = count;
        }
        const uint8_t *p = x_data;
        for (size_t i = 0; i < count; i++)
            v->x[i] = p[i] * (1.0f / 255.0f);
        *x = v->x;
    }
    if (tgt->dtype == STOKER_INT64) {
        if (n > v->y_cap) {
            int32_t *grown = realloc(v->y, n * sizeof *grown);
            if (grown == NULL)
                return STOKER_NOMEM;
            v->y = grown;
            v->y_cap = n;
        }
        const int64_t *p = y_data;
        for (uint32_t i = 0; i < n; i++) // out of range stays out of range: mlp_step reports it
            v->y[i] = p[i] < INT32_MIN ? INT32_MIN : p[i] > INT32_MAX ? INT32_MAX : (int32_t)p[i];
        *y = v->y;
    }
    return STOKER_OK;
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
        return stoker_errorf(why, why_len, STOKER_INVALID,
                             "input field '%s' is not in the schema %s (choose one with --input)",
                             cfg->input_field, spec);
    }
    if (*tgt_idx < 0) {
        return stoker_errorf(why, why_len, STOKER_INVALID,
                             "target field '%s' is not in the schema %s (choose one with --target)",
                             cfg->target_field, spec);
    }
    const stoker_field *in = &schema->fields[*in_idx], *tgt = &schema->fields[*tgt_idx];
    for (int k = 0; k < 2; k++) {
        const stoker_field *f = k == 0 ? in : tgt;
        if (f->variable)
            return stoker_errorf(why, why_len, STOKER_SCHEMA_MISMATCH,
                                 "%s field '%s' has a variable length; the MLP trainer takes "
                                 "fixed-shape fields only (schema %s): pad or pack it in your own "
                                 "loop (docs/schema.md)",
                                 k == 0 ? "input" : "target", f->name, spec);
    }
    if (in->dtype != STOKER_FLOAT32 && in->dtype != STOKER_UINT8) {
        return stoker_errorf(why, why_len, STOKER_INVALID,
                             "input field '%s' is %s; the trainer takes float32, or uint8 "
                             "pixels it scales to [0, 1] (schema %s)",
                             in->name, stoker_dtype_name(in->dtype), spec);
    }
    *in_dim = (uint32_t)stoker_field_elems(in);
    if (cfg->classes > 0) {
        if ((tgt->dtype != STOKER_INT32 && tgt->dtype != STOKER_INT64) ||
            stoker_field_elems(tgt) != 1) {
            return stoker_errorf(why, why_len, STOKER_INVALID,
                                 "--classes needs an int32 or int64 class label (one value); "
                                 "target '%s' is %s[%zu] "
                                 "(schema %s)",
                                 tgt->name, stoker_dtype_name(tgt->dtype), stoker_field_elems(tgt),
                                 spec);
        }
        *out_dim = cfg->classes;
    } else {
        if (tgt->dtype != STOKER_FLOAT32) {
            return stoker_errorf(
                why, why_len, STOKER_INVALID,
                "target '%s' is %s: float32 targets train with MSE; for class labels give "
                "--classes N (schema %s)",
                tgt->name, stoker_dtype_name(tgt->dtype), spec);
        }
        *out_dim = (uint32_t)stoker_field_elems(tgt);
    }
    return STOKER_OK;
}

// The producers the broker already knew when this trainer joined (its hello reply lists each
// as an event of index 0): counted, and said in one line once the source is open, so a trainer
// joining a long-lived broker does not log a line for every producer it ever saw.
typedef struct producers_known {
    uint32_t alive, lost, finished;
} producers_known;

static void
record_event(train_result *res, producers_known *known, const stoker_event *e, double at_s)
{
    if (e->kind == STOKER_EVENT_EPOCH_END) {
        res->epochs++;
        stoker_info("epoch-end: epoch %u done (%llu examples trained so far)", e->epoch,
                    (unsigned long long)res->examples);
    }
    const char *what = e->kind == STOKER_EVENT_PRODUCER_LOST       ? "lost"
                       : e->kind == STOKER_EVENT_PRODUCER_FINISHED ? "finished"
                       : e->kind == STOKER_EVENT_PRODUCER_JOINED   ? "joined"
                                                                   : "reconnected";
    if (e->kind == STOKER_EVENT_EPOCH_END)
        ;
    else if (e->kind == STOKER_EVENT_SCALED)
        stoker_info("scaled: pool '%s' %s", e->name, e->reason); // a controller's change
    else if (e->index == 0 && e->kind != STOKER_EVENT_PRODUCER_RECONNECTED) {
        known->alive += e->kind == STOKER_EVENT_PRODUCER_JOINED;
        known->lost += e->kind == STOKER_EVENT_PRODUCER_LOST;
        known->finished += e->kind == STOKER_EVENT_PRODUCER_FINISHED;
        stoker_debug("producer %u '%s' %s: %s", e->producer, e->name, what, e->reason);
    } else if (e->kind == STOKER_EVENT_PRODUCER_LOST)
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

// Events are recorded the moment the source hears of them, even while it waits for a batch.
// be: the backend memory the source maps is registered with (on_memory).
typedef struct event_sink {
    train_result *res;
    producers_known known;
    uint64_t origin_ns;
    backend *be;
} event_sink;

static void
on_event(const stoker_event *e, void *arg)
{
    event_sink *sink = arg;
    record_event(sink->res, &sink->known, e, (double)(stoker_now_ns() - sink->origin_ns) / 1e9);
}

// Writes a checkpoint of net and the lineage's position, then commits: the batches trained so
// far count as trained at the broker only once the file holding them is in place. A failed
// commit is logged and tried again with the next checkpoint (the file keeps what is pending).
static int
save_checkpoint(const train_config *cfg, source *src, mlp *net, train_result *res, uint64_t seed,
                char *why, size_t why_len)
{
    checkpoint_position pos = {.rounds = res->rounds,
                               .batches = res->batches,
                               .examples = res->examples,
                               .epochs = res->epochs,
                               .seed = seed};
    const checkpoint_runs *pending = src->ops->pending ? src->ops->pending(src) : NULL;
    int rv = checkpoint_save(cfg->checkpoint_path, net, &pos, pending, why, why_len);
    if (rv != STOKER_OK)
        return rv;
    res->checkpoints++;
    if (src->ops->commit != NULL && (rv = src->ops->commit(src)) != STOKER_OK) {
        res->commits_failed++;
        stoker_warn("checkpoint-commit-failed: %s (what it holds stays uncommitted; the next "
                    "checkpoint commits it)",
                    stoker_strerror(rv));
    }
    stoker_debug("checkpoint: %s at round %llu, %llu examples", cfg->checkpoint_path,
                 (unsigned long long)res->rounds, (unsigned long long)res->examples);
    return STOKER_OK;
}

// Whether a checkpoint is due after this step: every checkpoint_every rounds, or for a rank of
// a group every checkpoint_every rounds' worth of steps, counted in steps (a rank's batches):
// every rank then checkpoints, and commits, at the same step (group commit), though an epoch's
// last step may give the ranks one example more or less.
static int
checkpoint_due(const train_config *cfg, const train_result *res, int round_done)
{
    if (cfg->group == NULL)
        return round_done && res->rounds % cfg->checkpoint_every == 0;
    uint64_t per_round = cfg->round_length / (cfg->batch_size > 0 ? cfg->batch_size : 1);
    uint64_t every = (per_round > 0 ? per_round : 1) * cfg->checkpoint_every;
    return res->batches % every == 0;
}

// Loads the checkpoint resumed from into net and continues its lineage's counts.
static int
resume(const train_config *cfg, source *src, mlp *net, train_result *res, uint64_t *seed, char *why,
       size_t why_len)
{
    int rv = checkpoint_restore(cfg->resume, net, why, why_len);
    if (rv != STOKER_OK)
        return rv;
    const checkpoint_position *pos = checkpoint_position_of(cfg->resume);
    if (src->ops->mark_trained != NULL &&
        (rv = src->ops->mark_trained(src, checkpoint_pending(cfg->resume))) != STOKER_OK)
        return stoker_errorf(why, why_len, rv, "--resume: %s", stoker_strerror(rv));
    res->has_resumed = 1;
    res->resumed_rounds = pos->rounds;
    res->resumed_batches = pos->batches;
    res->resumed_examples = pos->examples;
    res->rounds += pos->rounds;
    res->batches += pos->batches;
    res->examples += pos->examples;
    res->epochs += pos->epochs;
    *seed = pos->seed;
    stoker_info("resumed: round %llu, %llu examples, %llu steps (%zu identities' runs pending "
                "from before)",
                (unsigned long long)pos->rounds, (unsigned long long)pos->examples,
                (unsigned long long)mlp_steps(net), checkpoint_pending(cfg->resume)->n);
    return STOKER_OK;
}

// The broker's shared-memory arena, mapped or about to be unmapped: the CUDA backend registers
// it as pinned memory so uploads read batches straight from it; the CPU reads it in place.
static void
on_memory(const void *base, uint64_t bytes, int mapped, void *arg)
{
    backend *be = ((event_sink *)arg)->be;
    if (be->ops->host_register == NULL)
        return;
    if (!mapped) {
        be->ops->host_unregister(be, base);
        return;
    }
    char why[256];
    if (be->ops->host_register(be, base, bytes, why, sizeof(why)) == STOKER_OK)
        stoker_info("shm-pinned: the broker's arena (%llu MiB) is registered with the GPU: "
                    "uploads read batches straight from it",
                    (unsigned long long)(bytes >> 20));
    else
        stoker_warn("shm-unpinned: %s; uploads go through staging buffers", why);
}

typedef struct progress {
    int live;
    uint64_t last_status_ms;
    uint32_t producers_alive;
    uint64_t queued;
    int have_status;
} progress;

static void
report(const train_config *cfg, progress *pg, source *src, const train_result *res,
       double round_loss, double elapsed_s, double wait_s, int round_done)
{
    uint64_t now = stoker_now_ms();
    if (now >= pg->last_status_ms + 1000) {
        if (src->ops->supply(src, &pg->producers_alive, &pg->queued) == STOKER_OK)
            pg->have_status = 1;
        pg->last_status_ms = now;
    }
    char supply[96] = "";
    if (pg->have_status)
        snprintf(supply, sizeof(supply), "  producers %u  queued %llu", pg->producers_alive,
                 (unsigned long long)pg->queued);
    // This run's rate: a resumed lineage's earlier examples took no time here.
    double rate = elapsed_s > 0 ? (double)(res->examples - res->resumed_examples) / elapsed_s : 0;
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
    source *src = NULL;
    backend *be = NULL;
    mlp *net = NULL;
    batch_view view = {0};
    event_sink sink = {.res = res, .origin_ns = stoker_now_ns()};

    // The device first: probing CUDA takes a while, and the clock of a training run should not
    // include it (nor the examples producers queue meanwhile).
    if ((rv = backend_create(cfg->device, &be, why, sizeof(why))) != STOKER_OK) {
        set_reason(res, TRAIN_ERROR, "--device %s: %s", cfg->device, why);
        goto done;
    }
    if (why[0] != '\0')
        stoker_info("backend-fallback: %s", why);
    snprintf(res->device, sizeof(res->device), "%s", be->name);
    sink.be = be;
    stoker_info("backend: %s (%s)", be->name, be->device);
    // The one place that knows there are two kinds of source.
    source_open_fn open_source = cfg->inline_mode ? source_inline_open : source_broker_open;
    source_hooks hooks = {.on_event = on_event, .on_memory = on_memory, .arg = &sink};
    if ((rv = open_source(cfg, &hooks, &src, why, sizeof(why))) != STOKER_OK) {
        train_status st = rv == STOKER_INTERRUPTED                          ? TRAIN_INTERRUPTED
                          : rv == STOKER_STALLED || rv == STOKER_CONNECTION ? TRAIN_STALLED
                                                                            : TRAIN_ERROR;
        set_reason(res, st, "%s", why);
        goto done;
    }
    const producers_known *known = &sink.known;
    if (known->alive + known->lost + known->finished > 0)
        stoker_info("producers-known: the broker knew %u producers when this trainer joined (%u "
                    "alive, %u lost, %u finished)",
                    known->alive + known->lost + known->finished, known->alive, known->lost,
                    known->finished);

    int in_idx = -1, tgt_idx = -1;
    uint32_t in_dim = 0, out_dim = 0;
    if ((rv = check_fields(cfg, src->ops->schema(src), &in_idx, &tgt_idx, &in_dim, &out_dim, why,
                           sizeof(why))) != STOKER_OK) {
        set_reason(res, TRAIN_ERROR, "%s", why);
        res->usage = rv == STOKER_SCHEMA_MISMATCH;
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
    uint64_t lineage_seed = cfg->seed;
    res->checkpointing = cfg->checkpoint_path != NULL;
    if (cfg->resume != NULL &&
        (rv = resume(cfg, src, net, res, &lineage_seed, why, sizeof(why))) != STOKER_OK) {
        set_reason(res, TRAIN_ERROR, "%s", why);
        goto done;
    }

    progress pg = {.live = cfg->progress};
    uint64_t total = (uint64_t)cfg->rounds * cfg->round_length;
    uint64_t start_ns = stoker_now_ns();
    uint64_t wait_ns = 0;
    double round_loss_sum = 0;
    uint64_t round_batches = 0;
    for (;;) {
        double elapsed_s = (double)(stoker_now_ns() - start_ns) / 1e9;
        if (cfg->stop != NULL && *cfg->stop) {
            set_reason(res, TRAIN_INTERRUPTED, "stopped by a signal");
            break;
        }
        if (cfg->epochs > 0 && res->epochs >= cfg->epochs) {
            set_reason(res, TRAIN_COMPLETED, "all %u epochs done", cfg->epochs);
            break;
        }
        if (cfg->epochs == 0 && res->examples >= total) {
            set_reason(res, TRAIN_COMPLETED, "all %u rounds done", cfg->rounds);
            break;
        }
        if (cfg->time_goal_s > 0 && elapsed_s >= cfg->time_goal_s) {
            set_reason(res, TRAIN_TIME_GOAL, "time goal of %.1f s reached", cfg->time_goal_s);
            break;
        }
        uint64_t t0 = stoker_now_ns();
        const stoker_chunk *chunk = NULL;
        rv = src->ops->next(src, &chunk);
        wait_ns += stoker_now_ns() - t0;
        if (rv == STOKER_TIMEOUT) // the time goal came while waiting: the loop's top says so
            continue;
        if (rv == STOKER_RETRY) { // idle with uncommitted work: checkpoint and commit it now
            if (save_checkpoint(cfg, src, net, res, lineage_seed, why, sizeof(why)) != STOKER_OK) {
                set_reason(res, TRAIN_ERROR, "cannot write the checkpoint: %s", why);
                break;
            }
            continue;
        }
        if (rv != STOKER_OK && cfg->epochs > 0 && res->epochs >= cfg->epochs) {
            set_reason(res, TRAIN_COMPLETED, "all %u epochs done", cfg->epochs);
            break;
        }
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
            case STOKER_STALLED: // the summary line says "stalled: " before the reason
                set_reason(res, TRAIN_STALLED, "no batch within %.1f s",
                           cfg->stall_timeout_ms / 1000.0);
                break;
            case STOKER_CONNECTION:
                set_reason(res, TRAIN_BROKER_LOST,
                           "the broker went away: %s does not answer and no batch came within "
                           "%.1f s (--stall-timeout): start the broker again, then the trainer",
                           cfg->broker_url, cfg->stall_timeout_ms / 1000.0);
                break;
            case STOKER_INTERRUPTED:
                set_reason(res, TRAIN_INTERRUPTED, "stopped by a signal");
                break;
            case STOKER_GROUP_BROKEN:
                set_reason(res, TRAIN_GROUP_BROKEN,
                           "group '%s' broken: another rank was lost (the group-broken line "
                           "names it)",
                           cfg->group);
                break;
            default:
                set_reason(res, TRAIN_ERROR, "feeding failed: %s", stoker_strerror(rv));
                break;
            }
            break;
        }
        float loss;
        const float *x;
        const void *y;
        const stoker_schema *schema = src->ops->schema(src);
        rv = view_batch(&view, &schema->fields[in_idx], &schema->fields[tgt_idx],
                        chunk->data[in_idx], chunk->data[tgt_idx], chunk->count, &x, &y);
        if (rv == STOKER_OK)
            rv = mlp_step(net, x, y, chunk->count, &loss);
        uint32_t n = chunk->count;
        src->ops->settle(src);
        if (rv != STOKER_OK) {
            set_reason(res, TRAIN_ERROR, "training step failed: %s",
                       rv == STOKER_NOMEM ? "out of memory" : mlp_error(net));
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
            if (res->rounds == res->resumed_rounds + 1) // this run's first
                res->first_round_loss = res->final_loss;
        }
        double now_s = (double)(stoker_now_ns() - start_ns) / 1e9;
        if (round_done || pg.live)
            report(cfg, &pg, src, res, res->final_loss, now_s, (double)wait_ns / 1e9, round_done);
        if (round_done) {
            round_loss_sum = 0;
            round_batches = 0;
        }
        if (cfg->checkpoint_path != NULL && checkpoint_due(cfg, res, round_done) &&
            save_checkpoint(cfg, src, net, res, lineage_seed, why, sizeof(why)) != STOKER_OK) {
            set_reason(res, TRAIN_ERROR, "cannot write the checkpoint: %s", why);
            break;
        }
    }
    if (pg.live)
        fputc('\n', stderr);
    // A clean end: the last checkpoint holds everything trained, and commits it.
    if (cfg->checkpoint_path != NULL && res->status != TRAIN_ERROR &&
        save_checkpoint(cfg, src, net, res, lineage_seed, why, sizeof(why)) != STOKER_OK) {
        stoker_error("cannot write the checkpoint: %s", why);
        if (res->status == TRAIN_COMPLETED || res->status == TRAIN_TIME_GOAL)
            set_reason(res, TRAIN_ERROR, "cannot write the checkpoint: %s", why);
    }
    res->seconds = (double)(stoker_now_ns() - start_ns) / 1e9;
    res->examples_per_second =
        res->seconds > 0 ? (double)(res->examples - res->resumed_examples) / res->seconds : 0;
    res->data_wait_fraction = res->seconds > 0 ? (double)wait_ns / 1e9 / res->seconds : 0;

done:
    if (src != NULL) {
        src->ops->audit(src, res);
        src->ops->destroy(src);
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
    free(view.x);
    free(view.y);
    mlp_destroy(net);
    backend_destroy(be);
    return res->usage ? 2 : exit_code(res->status);
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
            "\"first_round_loss\": %.9g, \"data_wait_fraction\": %.6f, \"epochs\": %u",
            r->device, (unsigned long long)r->rounds, (unsigned long long)r->batches,
            (unsigned long long)r->examples, r->seconds, r->examples_per_second,
            finite_or_zero(r->final_loss), finite_or_zero(r->first_round_loss),
            r->data_wait_fraction, r->epochs);
    if (r->delivery != NULL)
        fprintf(f,
                ", \"delivery\": \"%s\", \"delivery_batches\": {\"shm\": %llu, \"socket\": %llu, "
                "\"arena_full\": %llu}",
                r->delivery, (unsigned long long)r->batches_shm,
                (unsigned long long)r->batches_socket, (unsigned long long)r->batches_arena_full);
    if (r->has_audit) {
        // The broker's counters the audit repeats: the A rows of STOKER_COUNTERS, under their
        // audit keys (train_result's members of the same names), then the trainer's own.
        fprintf(f, ", \"audit\": {");
        const char *sep = "";
#define AUDIT_SKIP(...)
#define AUDIT_ROW(field, audit, ...)                                                               \
    fprintf(f, "%s\"" #audit "\": %llu", sep, (unsigned long long)r->audit);                       \
    sep = ", ";
        STOKER_COUNTERS(AUDIT_SKIP, AUDIT_ROW, AUDIT_SKIP)
#undef AUDIT_ROW
#undef AUDIT_SKIP
        fprintf(f, "%s\"duplicates_seen\": %llu, \"discrepancy\": %lld", sep,
                (unsigned long long)r->duplicates_seen, (long long)r->discrepancy);
        if (r->has_group) // a rank: what its group's end left over (still queued)
            fprintf(f, ", \"group_leftover\": %llu", (unsigned long long)r->group_leftover);
        fprintf(f, "}");
    } else {
        fprintf(f, ", \"audit\": null");
    }
    if (r->checkpointing)
        fprintf(f, ", \"checkpoints\": %llu, \"commits_failed\": %llu",
                (unsigned long long)r->checkpoints, (unsigned long long)r->commits_failed);
    if (r->has_resumed)
        fprintf(f,
                ", \"resumed_from\": {\"rounds\": %llu, \"batches\": %llu, \"examples\": "
                "%llu}",
                (unsigned long long)r->resumed_rounds, (unsigned long long)r->resumed_batches,
                (unsigned long long)r->resumed_examples);
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
