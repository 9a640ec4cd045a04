// The broker batch source (see source.h): batches come through libstoker's trainer client, each
// one's lease acknowledged once the loop settles it, and the audit is the broker's own counters.
// Connecting, prefetching, redelivery and duplicate checks are the client's business, not this
// file's. With --checkpoint the client commits (its acknowledgements count only when train.c
// commits after a checkpoint) and this file remembers what was trained since; --identity-log
// appends each settled batch's identities.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "source.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/trainer_client.h"

typedef struct broker_source {
    source base;
    stoker_trainer_client *tc;
    stoker_batch *batch; // the one next handed out, until settle; NULL when none
    int grouped;         // a rank of a data-parallel group
    int committing;      // --checkpoint: commit mode, pending kept
    // Identities trained the broker may not know as trained: [0, n_inherited) from mark_trained
    // (kept for the lineage), the rest since the last successful commit.
    checkpoint_runs pending;
    size_t n_inherited;
    FILE *identity_log; // --identity-log, or NULL
    uint32_t stall_ms;  // the stall timeout
    uint32_t idle_ms;   // waited without a batch before the last STOKER_RETRY (0: none since)
    // --time-goal: no wait for a batch goes past it (next returns STOKER_TIMEOUT there, and the
    // loop stops on its time goal). Counted from the first next, just after the loop's clock
    // started; 0 until then, or without a time goal.
    double time_goal_s;
    uint64_t goal_at_ms;
} broker_source;

// A committing source with uncommitted work returns STOKER_RETRY after waiting this long for a
// batch, so that the trainer checkpoints and commits: producers that linger until their examples
// are trained say goodbye only then, and the supply can end.
#define IDLE_COMMIT_MS 1000u

static const stoker_schema *
broker_schema(const source *src)
{
    const broker_source *s = (const broker_source *)src;
    return stoker_trainer_client_schema(s->tc);
}

// A stall's cause: STOKER_STALLED when the broker answers a Status request (it has nothing to
// give), STOKER_CONNECTION when it does not (stopped, killed or unreachable: it sends no word
// when it stops, its connection just closes). Bounded by the client's request timeout, 200 ms
// once a request found the broker gone.
static int
stall_cause(broker_source *s)
{
    stoker_status *st;
    int rv = stoker_trainer_client_status(s->tc, &st);
    if (rv == STOKER_OK) {
        stoker_status_destroy(st);
        return STOKER_STALLED;
    }
    return rv == STOKER_TIMEOUT || rv == STOKER_CONNECTION ? STOKER_CONNECTION : STOKER_STALLED;
}

static int
broker_next(source *src, const stoker_chunk **chunk)
{
    broker_source *s = (broker_source *)src;
    stoker_batch *batch = NULL;
    int rv;
    uint64_t now = stoker_now_ms();
    if (s->time_goal_s > 0 && s->goal_at_ms == 0)
        s->goal_at_ms = now + (uint64_t)(s->time_goal_s * 1000.0);
    uint64_t left = s->goal_at_ms > now ? s->goal_at_ms - now : 0;
    if (s->goal_at_ms != 0 && left < s->stall_ms - s->idle_ms) {
        // The time goal comes before a stall could: wait until it, not past it.
        if (left == 0)
            return STOKER_TIMEOUT;
        rv = stoker_trainer_client_next_within(s->tc, &batch, (uint32_t)left);
        if (rv != STOKER_OK)
            return rv;
        s->idle_ms = 0;
        s->batch = batch;
        *chunk = &batch->chunk;
        return STOKER_OK;
    }
    // Idle with something to commit: what was trained since the last commit, or leases whose
    // examples were all dropped as trained already (a resumed run's inherited identities
    // delivered again): the supply (a dataset's epoch end, lingering producers) waits for those.
    if (s->committing &&
        (s->pending.n > s->n_inherited || stoker_trainer_client_uncommitted(s->tc) > 0) &&
        s->idle_ms + IDLE_COMMIT_MS < s->stall_ms) {
        rv = stoker_trainer_client_next_within(s->tc, &batch, IDLE_COMMIT_MS);
        if (rv == STOKER_TIMEOUT) {
            s->idle_ms += IDLE_COMMIT_MS;
            return STOKER_RETRY;
        }
    } else if (s->idle_ms > 0) {
        // The rest of the stall timeout.
        rv = stoker_trainer_client_next_within(s->tc, &batch, s->stall_ms - s->idle_ms);
        if (rv == STOKER_TIMEOUT) {
            stoker_warn("stalled: no batch for %u ms", s->stall_ms);
            rv = STOKER_STALLED;
        }
    } else {
        rv = stoker_trainer_client_next(s->tc, &batch);
    }
    if (rv == STOKER_STALLED)
        rv = stall_cause(s);
    if (rv != STOKER_OK)
        return rv;
    s->idle_ms = 0;
    s->batch = batch;
    *chunk = &batch->chunk;
    return STOKER_OK;
}

static void
broker_settle(source *src)
{
    broker_source *s = (broker_source *)src;
    if (s->batch == NULL)
        return;
    const uint64_t *item = s->batch->items; // a dataset's, one per example in run order
    for (uint32_t i = 0; i < s->batch->n_runs; i++) {
        const stoker_run *r = &s->batch->runs[i];
        if (s->committing &&
            checkpoint_runs_add(&s->pending, r->session, r->first_seq, r->count) != STOKER_OK)
            stoker_warn("trainer: out of memory keeping the identities trained since the last "
                        "commit; a death before it may train them twice");
        if (s->identity_log != NULL && item == NULL)
            fprintf(s->identity_log, "%016llx %llu %u\n", (unsigned long long)r->session,
                    (unsigned long long)r->first_seq, r->count);
        // A dataset's examples one a line: the identity (count 1), the epoch and the index.
        for (uint32_t k = 0; s->identity_log != NULL && item != NULL && k < r->count; k++, item++)
            fprintf(s->identity_log, "%016llx %llu 1 %u %llu\n", (unsigned long long)r->session,
                    (unsigned long long)(r->first_seq + k), stoker_item_epoch(*item),
                    (unsigned long long)stoker_item_index(*item));
    }
    stoker_trainer_client_ack(s->tc, s->batch->lease);
    stoker_batch_destroy(s->batch);
    s->batch = NULL;
}

static int
broker_supply(source *src, uint32_t *producers_alive, uint64_t *queued)
{
    broker_source *s = (broker_source *)src;
    stoker_status *st;
    int rv = stoker_trainer_client_status(s->tc, &st);
    if (rv != STOKER_OK)
        return rv;
    *producers_alive = st->counters.producers_alive;
    *queued = st->counters.queued;
    stoker_status_destroy(st);
    return STOKER_OK;
}

// Flushes first, so the broker's counters include every acknowledgement this trainer made.
static void
broker_audit(source *src, train_result *res)
{
    broker_source *s = (broker_source *)src;
    stoker_trainer_client_flush(s->tc);
    stoker_status *st;
    // A broker that went away has no counters to give: the summary says why, no warning more.
    int rv = res->status == TRAIN_BROKER_LOST ? STOKER_CONNECTION
                                              : stoker_trainer_client_status(s->tc, &st);
    if (rv == STOKER_OK) {
        res->has_audit = 1;
        res->produced = st->counters.produced;
        res->acknowledged = st->counters.acknowledged;
        res->still_queued = st->counters.queued;
        res->in_flight = st->counters.in_flight;
        res->redelivered = st->counters.redelivered;
        res->returned_unused = st->counters.returned_unused;
        res->discrepancy = (int64_t)(st->counters.produced - st->counters.acknowledged -
                                     st->counters.queued - st->counters.in_flight);
        stoker_status_destroy(st);
    } else if (res->status != TRAIN_BROKER_LOST) {
        stoker_warn("audit: Status failed (%s); audit left out", stoker_strerror(rv));
    }
    res->duplicates_seen = stoker_trainer_client_duplicates(s->tc);
    res->delivery = stoker_trainer_client_delivery(s->tc);
    stoker_trainer_client_batches_by_path(s->tc, &res->batches_shm, &res->batches_socket,
                                          &res->batches_arena_full);
    res->has_group = s->grouped;
    res->group_leftover = stoker_trainer_client_group_leftover(s->tc);
}

static void
broker_destroy(source *src)
{
    broker_source *s = (broker_source *)src;
    if (s == NULL)
        return;
    stoker_batch_destroy(s->batch);
    stoker_trainer_client_destroy(s->tc);
    checkpoint_runs_fini(&s->pending);
    if (s->identity_log != NULL)
        fclose(s->identity_log);
    free(s);
}

static int
broker_commit(source *src)
{
    broker_source *s = (broker_source *)src;
    int rv = stoker_trainer_client_commit(s->tc);
    if (rv == STOKER_OK)
        s->pending.n = s->n_inherited;
    return rv;
}

static const checkpoint_runs *
broker_pending(source *src)
{
    return &((broker_source *)src)->pending;
}

static int
broker_mark_trained(source *src, const checkpoint_runs *runs)
{
    broker_source *s = (broker_source *)src;
    for (size_t i = 0; i < runs->n; i++) {
        const checkpoint_run *r = &runs->v[i];
        int rv = stoker_trainer_client_mark_trained(s->tc, r->session, r->first_seq, r->count);
        if (rv == STOKER_OK)
            rv = checkpoint_runs_add(&s->pending, r->session, r->first_seq, r->count);
        if (rv != STOKER_OK)
            return rv;
    }
    s->n_inherited = s->pending.n;
    return STOKER_OK;
}

static const source_ops broker_ops = {
    .schema = broker_schema,
    .next = broker_next,
    .settle = broker_settle,
    .supply = broker_supply,
    .audit = broker_audit,
    .destroy = broker_destroy,
    .commit = broker_commit,
    .pending = broker_pending,
    .mark_trained = broker_mark_trained,
};

int
source_broker_open(const train_config *cfg, const source_hooks *hooks, source **out, char *why,
                   size_t why_len)
{
    broker_source *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return stoker_errorf(why, why_len, STOKER_NOMEM, "cannot start feeding from %s: %s",
                             cfg->broker_url, stoker_strerror(STOKER_NOMEM));
    s->base.ops = &broker_ops;
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
    to.on_event = hooks->on_event;
    to.on_event_arg = hooks->arg;
    to.on_arena = hooks->on_memory; // the arena's mapping, e.g. for CUDA pinning
    to.on_arena_arg = hooks->arg;
    to.group = cfg->group;
    to.mix = cfg->mix;
    to.job = cfg->job;
    s->grouped = cfg->group != NULL;
    to.rank = cfg->rank;
    to.world = cfg->world;
    if (cfg->resume != NULL) {
        // A rank resumed from its checkpoint: the group's step count goes on from the steps it
        // had taken then (a rank's batches are its steps), at whatever world size this run has;
        // and its hello names the identities the checkpoint holds that may not be committed, so
        // that no rank is given them again (group commit, docs/groups.md).
        if (cfg->group != NULL)
            to.group_resume_step = checkpoint_position_of(cfg->resume)->batches;
        const checkpoint_runs *pending = checkpoint_pending(cfg->resume);
        _Static_assert(sizeof(checkpoint_run) == 3 * sizeof(uint64_t), "a run is 3 uint64");
        to.trained_runs = (const uint64_t *)pending->v;
        to.n_trained_runs = pending->n < UINT32_MAX ? (uint32_t)pending->n : UINT32_MAX;
    }
    s->committing = to.commit = cfg->checkpoint_path != NULL;
    s->stall_ms = cfg->stall_timeout_ms;
    s->time_goal_s = cfg->time_goal_s;
    if (cfg->identity_log_path != NULL) {
        if ((s->identity_log = fopen(cfg->identity_log_path, "a")) == NULL) {
            free(s);
            return stoker_errorf(why, why_len, STOKER_IO, "--identity-log %s: %s",
                                 cfg->identity_log_path, strerror(errno));
        }
        // A line per run as soon as it is trained: what a SIGKILL leaves is whole lines.
        setvbuf(s->identity_log, NULL, _IOLBF, 0);
    }
    char err[512] = "";
    int rv = stoker_trainer_client_create(&to, &s->tc, err, sizeof(err));
    if (rv != STOKER_OK) {
        if (s->identity_log != NULL)
            fclose(s->identity_log);
        free(s);
        return stoker_errorf(why, why_len, rv, "cannot start feeding from %s: %s", cfg->broker_url,
                             err[0] != '\0' ? err : stoker_strerror(rv));
    }
    *out = &s->base;
    return STOKER_OK;
}
