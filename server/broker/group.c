// Data-parallel groups: admission of ranks at hello, the forming of equal steps from the
// producers' queues, the one common end with its leftover, and the break when a rank is lost.
// A step's batches are leases like any other (held by their rank's trainer from the moment the
// step is formed), so acknowledgement and redelivery need nothing of their own here. It does not
// build replies (pull.c sends what group_take hands it). Floor 4: it uses the leases (lease.c),
// the queues' sizing, the epochs and the core; only the handlers and drop.c call it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "group.h"
#include "group_impl.h"
#include "mix.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"

static group *
find_open(const broker *b, const char *name)
{
    for (group *g = b->groups; g != NULL; g = g->next)
        if (!g->retired && strcmp(g->name, name) == 0)
            return g;
    return NULL;
}

static void
group_free(group *g)
{
    if (g == NULL)
        return;
    for (uint32_t r = 0; r < g->world; r++) {
        free(g->ranks[r].pending);
        free(g->ranks[r].events_at);
        free(g->ranks[r].staged);
    }
    free(g->ranks);
    mix_release(g->mix);
    free(g);
}

static group *
group_create(broker *b, const stoker_request *req)
{
    group *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return NULL;
    g->ranks = calloc(req->world, sizeof(*g->ranks));
    if (g->ranks == NULL) {
        free(g);
        return NULL;
    }
    g->world = req->world;
    g->batch = req->group_batch;
    g->batching = req->batching;
    if (req->mix.n > 0 && (g->mix = mix_new(&req->mix)) == NULL) {
        group_free(g);
        return NULL;
    }
    if (g->mix != NULL) // by tokens: its books count tokens, taken and given back alike
        g->mix->tokens = stoker_batching_active(&g->batching);
    g->step_produced = b->c.produced;
    g->ahead = b->cfg.group_steps_ahead;
    for (uint32_t r = 0; r < g->world; r++) {
        g->ranks[r].pending = calloc(g->ahead, sizeof(lease *));
        g->ranks[r].events_at = calloc(g->ahead, sizeof(uint64_t));
        g->ranks[r].events_upto = b->n_events;
        if (g->ranks[r].pending == NULL || g->ranks[r].events_at == NULL) {
            group_free(g);
            return NULL;
        }
    }
    snprintf(g->name, sizeof(g->name), "%s", req->group);
    g->next = b->groups;
    b->groups = g;
    return g;
}

int
group_admit(broker *b, const trainer *t, const stoker_request *req, uint64_t now_ms, group **out,
            trainer **holder, char *why, size_t why_len)
{
    *holder = NULL;
    const char *who = req->name[0] ? req->name : "trainer";
    if (req->world == 0 || req->world > STOKER_GROUP_MAX_WORLD)
        return stoker_errorf(why, why_len, STOKER_INVALID,
                             "group '%s': world size %u from '%s' must be 1..%u", req->group,
                             req->world, who, STOKER_GROUP_MAX_WORLD);
    if (req->rank >= req->world)
        return stoker_errorf(why, why_len, STOKER_INVALID,
                             "group '%s': rank %u from '%s' is outside the world size %u (ranks "
                             "are 0..%u)",
                             req->group, req->rank, who, req->world, req->world - 1);
    if (req->group_batch == 0 || req->group_batch > b->cfg.max_chunk_examples)
        return stoker_errorf(why, why_len, STOKER_INVALID,
                             "group '%s': batch size %u from '%s' must be 1..%u", req->group,
                             req->group_batch, who, b->cfg.max_chunk_examples);
    // The same trainer saying hello again (it reconnected) stays where it was.
    if (t != NULL && t->group != NULL && strcmp(t->group->name, req->group) == 0 &&
        t->rank == req->rank && t->group->world == req->world &&
        t->group->batch == req->group_batch &&
        memcmp(&t->group->batching, &req->batching, sizeof(req->batching)) == 0 &&
        group_same_mix(t->group, &req->mix)) {
        *out = t->group;
        return STOKER_OK;
    }
    if (t != NULL && t->group != NULL)
        return stoker_errorf(why, why_len, STOKER_INVALID,
                             "trainer '%s' is already rank %u of group '%s': a session joins one "
                             "group once",
                             who, t->rank, t->group->name);
    group *g = find_open(b, req->group);
    if (g != NULL) {
        if (g->world != req->world)
            return stoker_errorf(why, why_len, STOKER_INVALID,
                                 "group '%s': ranks disagree on the world size: the group has %u "
                                 "ranks, '%s' (rank %u) says %u",
                                 g->name, g->world, who, req->rank, req->world);
        if (g->batch != req->group_batch)
            return stoker_errorf(why, why_len, STOKER_INVALID,
                                 "group '%s': ranks disagree on the batch size: the group takes %u "
                                 "examples per rank, '%s' (rank %u) says %u",
                                 g->name, g->batch, who, req->rank, req->group_batch);
        if (memcmp(&g->batching, &req->batching, sizeof(req->batching)) != 0)
            return stoker_errorf(
                why, why_len, STOKER_INVALID,
                "group '%s': ranks disagree on how batches are made: the group takes "
                "max_tokens=%u buckets=%u pack=%u pack_whole=%u, '%s' (rank %u) says "
                "max_tokens=%u buckets=%u pack=%u pack_whole=%u (every rank of a step gets the "
                "same budget)",
                g->name, g->batching.max_tokens, g->batching.buckets, g->batching.pack,
                g->batching.pack_whole, who, req->rank, req->batching.max_tokens,
                req->batching.buckets, req->batching.pack, req->batching.pack_whole);
        if (!group_same_mix(g, &req->mix))
            return group_mix_disagrees(g, req, who, why, why_len);
        group_rank *gr = &g->ranks[req->rank];
        trainer *held = gr->t;
        if (held != NULL) {
            uint64_t takeover = b->cfg.trainer_timeout_ms / 2; // 1.5 of its heartbeats
            uint64_t silent = now_ms > held->last_seen_ms ? now_ms - held->last_seen_ms : 0;
            if (gr->claimed_ms != 0 && now_ms > gr->claimed_ms + 2 * takeover)
                gr->claimed_ms = 0; // a claim given up long ago says nothing now
            if (!held->connected || (held->parked_pulls == 0 && silent >= takeover)) {
                gr->claimed_ms = 0;
                *holder = held; // lost: the caller drops it (the group breaks) and admits again
                return stoker_errorf(why, why_len, STOKER_RETRY,
                                     "group '%s': rank %u's holder, trainer %u '%s', silent for "
                                     "%.1f s, is taken over by '%s'",
                                     g->name, req->rank, held->id, held->name, silent / 1000.0,
                                     who);
            }
            if (gr->claimed_ms != 0 && held->last_seen_ms > gr->claimed_ms) {
                gr->claimed_ms = 0;
                return stoker_errorf(why, why_len, STOKER_INVALID,
                                     "group '%s': rank %u is already held by trainer %u '%s', "
                                     "alive (heard %.1f s ago); '%s' cannot take it too",
                                     g->name, req->rank, held->id, held->name, silent / 1000.0,
                                     who);
            }
            if (gr->claimed_ms == 0)
                gr->claimed_ms = now_ms;
            return stoker_errorf(why, why_len, STOKER_RETRY,
                                 "group '%s': rank %u is held by trainer %u '%s', silent for %.1f "
                                 "s: '%s' takes it over if it stays silent for %.1f s (a group "
                                 "re-forming), or is refused if it is heard (a live duplicate)",
                                 g->name, req->rank, held->id, held->name, silent / 1000.0, who,
                                 takeover / 1000.0);
        }
    } else if ((g = group_create(b, req)) == NULL) {
        return stoker_errorf(why, why_len, STOKER_NOMEM, "broker out of memory");
    }
    *out = g;
    return STOKER_OK;
}

void
group_attach(broker *b, group *g, trainer *t, uint32_t rank)
{
    (void)b;
    if (t->group == g)
        return;
    t->group = g;
    t->rank = rank;
    t->world = g->world;
    g->ranks[rank].t = t;
    if (!g->started)
        g->ranks[rank].said = t->said_steps;
    g->members++;
    uint32_t joined = 0;
    for (uint32_t r = 0; r < g->world; r++)
        joined += g->ranks[r].t != NULL;
    stoker_info("group-joined: trainer %u '%s' is rank %u of group '%s' (%u of %u ranks, %u "
                "examples per rank per step)",
                t->id, t->name, rank, g->name, joined, g->world, g->batch);
}

void
group_detach(broker *b, trainer *t)
{
    group *g = t->group;
    if (g == NULL)
        return;
    if (g->ranks[t->rank].t == t)
        g->ranks[t->rank].t = NULL;
    t->group = NULL;
    t->world = 0;
    if (--g->members > 0 || !g->retired)
        return;
    for (group **pp = &b->groups; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == g) {
            *pp = g->next;
            break;
        }
    }
    group_free(g);
}

// Unlinks lease l from t's leases (it is there: formed steps are held by their rank).
static void
unlink_lease(trainer *t, lease *l)
{
    for (lease **pp = &t->leases; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == l) {
            *pp = l->next;
            l->next = NULL;
            return;
        }
    }
}

// Pops the oldest batch formed for rank gr and not yet sent (NULL when none).
static lease *
pop_pending(const group *g, group_rank *gr)
{
    if (gr->n_pending == 0)
        return NULL;
    lease *l = gr->pending[gr->head];
    gr->events_before = gr->events_upto;
    gr->events_upto = gr->events_at[gr->head];
    gr->head = (gr->head + 1) % g->ahead;
    gr->n_pending--;
    return l;
}

// Gives every batch formed for rank gr and not yet sent back to its queues.
static void
return_pending(broker *b, const group *g, group_rank *gr)
{
    lease *l;
    while ((l = pop_pending(g, gr)) != NULL) {
        unlink_lease(gr->t, l);
        lease_return(b, l, 1);
    }
}

void
group_rank_lost(broker *b, trainer *t, const char *reason)
{
    group *g = t->group;
    if (g == NULL)
        return;
    // t's formed steps go back with its leases (lease_redeliver): forget them here.
    g->ranks[t->rank].n_pending = 0;
    if (g->end_code != STOKER_OK)
        return; // after the end, ranks leave as they finish
    g->end_code = STOKER_GROUP_BROKEN;
    g->retired = 1;
    g->ended_ms = stoker_now_ms() - b->start_ms; // shown on /status only: the wall clock will do
    snprintf(g->end_reason, sizeof(g->end_reason),
             "group '%s' is broken: rank %u (trainer %u '%s') %s at step %llu", g->name, t->rank,
             t->id, t->name, reason != NULL ? reason : "left", (unsigned long long)g->steps);
    stoker_warn("group-broken: %s", g->end_reason);
    for (uint32_t r = 0; r < g->world; r++) {
        group_rank *gr = &g->ranks[r];
        if (gr->t != t && gr->t != NULL)
            return_pending(b, g, gr);
    }
}

// Whether g's ranks commit with checkpoints (group commit): their acknowledgements come at
// their commits, every so many steps.
static int
group_commits(const group *g)
{
    for (uint32_t r = 0; r < g->world; r++)
        if (g->ranks[r].t != NULL && g->ranks[r].t->commit)
            return 1;
    return 0;
}

// Nonzero when no more examples can come: producers said hello and none is alive but one that
// said it is done making (a lingering producer waits only for its examples to be trained, which
// waits for this step), and the window for producers returning to a restarted broker
// (--producer-timeout) is over, as for plain trainers (supply_state): one finishing first does
// not end it for the others. The group ends then once fewer examples are queued than one per rank.
static int
supply_over(const broker *b, uint64_t now_ms)
{
    if (b->job_state == STOKER_JOB_DETACHED) // its job gets nothing more (jobs.c)
        return 1;
    if (b->n_producers == 0 || now_ms < b->returning_until_ms)
        return 0;
    for (uint32_t i = 0; i < b->n_producers; i++) {
        const producer *p = b->producers[i];
        if (p->status == STOKER_PRODUCER_ALIVE && (!p->done_making || p->pushes != NULL))
            return 0;
        if (p->status != STOKER_PRODUCER_ALIVE && producer_may_send(p, now_ms))
            return 0; // lost by silence, its connection open: it may come back
    }
    return 1;
}

// Nonzero when the queues cannot grow now: all of them full together (max_bytes), or every alive
// producer's queue either at its depth or with a push waiting for room (a chunk that does not
// fit: a queue of depth 64 filled by chunks of 3 stops at 63). A push parked because it came
// ahead of its predecessor (two in flight) waits for that one, not for room: it does not count.
static int
no_room(const broker *b)
{
    if (queues_full(b))
        return 1;
    for (uint32_t i = 0; i < b->n_producers; i++) {
        const producer *p = b->producers[i];
        if (p->status == STOKER_PRODUCER_ALIVE && !push_waits_for_room(p) &&
            p->q.examples < b->queue_depth)
            return 0;
    }
    return 1;
}

// Ends g: supply_over (dataset 0), or a dataset's last epoch waiting for its last examples,
// fewer than one per rank (dataset 1). They stay queued, reported as the leftover.
static void
end_group(broker *b, group *g, int dataset)
{
    uint32_t lost = 0, finished = 0;
    for (uint32_t i = 0; i < b->n_producers; i++) {
        lost += b->producers[i]->status == STOKER_PRODUCER_LOST;
        finished +=
            b->producers[i]->status == STOKER_PRODUCER_FINISHED ||
            (b->producers[i]->status == STOKER_PRODUCER_ALIVE && b->producers[i]->done_making);
    }
    g->end_code = (lost > 0 || b->job_state == STOKER_JOB_DETACHED) && !dataset
                      ? STOKER_NO_PRODUCERS
                      : STOKER_END_OF_DATA;
    g->ended_ms = stoker_now_ms() - b->start_ms;
    g->leftover = b->c.queued;
    g->retired = 1;
    if (dataset && g->leftover == 0)
        snprintf(g->end_reason, sizeof(g->end_reason),
                 "group '%s' ended at step %llu: the dataset's last epoch was handed out in full "
                 "(what the ranks trained since their last commit counts once they commit)",
                 g->name, (unsigned long long)g->steps);
    else if (dataset)
        snprintf(g->end_reason, sizeof(g->end_reason),
                 "group '%s' ended at step %llu: the dataset's last epoch waits only for its "
                 "last %llu example%s, fewer than one per rank of %u: left over, still queued",
                 g->name, (unsigned long long)g->steps, (unsigned long long)g->leftover,
                 g->leftover == 1 ? "" : "s", g->world);
    else if (b->job_state == STOKER_JOB_DETACHED)
        snprintf(g->end_reason, sizeof(g->end_reason),
                 "group '%s' ended at step %llu: its job '%s' was detached: %s", g->name,
                 (unsigned long long)g->steps, b->job, b->job_end_reason);
    else
        snprintf(g->end_reason, sizeof(g->end_reason),
                 "group '%s' ended at step %llu: no producer left (%u lost, %u finished); %llu "
                 "example%s left over (fewer than one per rank of %u), still queued",
                 g->name, (unsigned long long)g->steps, lost, finished,
                 (unsigned long long)g->leftover, g->leftover == 1 ? "" : "s", g->world);
    stoker_info("group-ended: %s", g->end_reason);
}

// Forms one step: n examples for each rank, one more for the first `extra` ranks (an epoch's
// last step, split as evenly as the examples allow). Returns 1 when formed, 0 when the queues
// could not give every rank its share (out of memory): then nothing changed.
// Batches made by tokens (g->batching): each rank's is full (its budget reached), or for a
// short step (is_short) not empty.
static int
form_step(broker *b, group *g, uint32_t n, uint32_t extra, int is_short, const uint32_t *mixed)
{
    int budgeted = stoker_batching_active(&g->batching);
    uint32_t left_of[STOKER_MIX_MAX], rank_counts[STOKER_MIX_MAX];
    uint32_t n_sources = g->mix != NULL ? g->mix->spec.n : 0;
    for (uint32_t s = 0; mixed != NULL && s < n_sources; s++)
        left_of[s] = mixed[s];
    uint32_t r;
    for (r = 0; r < g->world; r++) {
        group_rank *gr = &g->ranks[r];
        uint32_t want = n + (r < extra ? 1 : 0);
        // A short step shares what is queued among the ranks still to serve (rounded up, as
        // want is): with packed rows want counts rows, and the first rank would otherwise take
        // every sequence left and the next none, the step then never forming.
        uint64_t left = b->c.queued, ranks = g->world - r;
        uint32_t share = is_short ? (uint32_t)((left + ranks - 1) / ranks) : UINT32_MAX;
        lease *l;
        if (mixed != NULL) {
            // A mixed step: each rank's part of the step's per-source counts, in proportion.
            mix_split(left_of, n_sources, want, rank_counts);
            l = lease_take_mix(b, gr->t, g->mix, rank_counts);
            for (uint32_t s = 0; s < n_sources; s++)
                left_of[s] -= rank_counts[s];
        } else if (g->mix != NULL) {
            l = group_mixed_tokens_take(b, g, gr->t); // mixing by tokens: whole or none
        } else {
            l = lease_take(b, gr->t, want, share);
        }
        int ok = l != NULL && (budgeted ? l->full || is_short : l->count == want);
        if (!ok) {
            if (l != NULL) {
                unlink_lease(gr->t, l);
                lease_return(b, l, 1);
            }
            break;
        }
        gr->pending[(gr->head + gr->n_pending) % g->ahead] = l;
        gr->events_at[(gr->head + gr->n_pending) % g->ahead] = b->n_events;
        gr->n_pending++;
    }
    if (r == g->world) {
        g->steps++;
        g->step_produced = b->c.produced;
        g->step_ms = 0; // set by the next fill that waits
        return 1;
    }
    // Undo the ranks already served: newest first, so the queues regain their order.
    while (r-- > 0) {
        group_rank *gr = &g->ranks[r];
        lease *l = gr->pending[(gr->head + gr->n_pending - 1) % g->ahead];
        gr->n_pending--;
        unlink_lease(gr->t, l);
        lease_return(b, l, 1);
    }
    return 0;
}

// Once every rank joined: the group's step count. Ranks that say they took steps come to a
// broker that started after the one they trained with died: the group resumes at
// the most steps any rank took, and a rank that took fewer gets batches of its own (catch-up,
// group_take) until it took as many, so that every rank ends with the same count.
static void
start(group *g)
{
    uint64_t most = 0, least = UINT64_MAX;
    for (uint32_t r = 0; r < g->world; r++) {
        if (g->ranks[r].said > most)
            most = g->ranks[r].said;
        if (g->ranks[r].said < least)
            least = g->ranks[r].said;
    }
    g->started = 1;
    if (most == 0)
        return;
    g->steps = most;
    g->catch_up = most;
    for (uint32_t r = 0; r < g->world; r++)
        g->ranks[r].delivered = g->ranks[r].said;
    stoker_info("group-resumed: group '%s' resumes at step %llu (its ranks had taken %llu to "
                "%llu steps with a broker that died; those behind catch up first)",
                g->name, (unsigned long long)most + 1, (unsigned long long)least,
                (unsigned long long)most);
}

// Forms the next step if it can be formed now: every rank joined and connected, the slowest
// rank fewer than `ahead` steps behind, and a batch for every rank. Called when a rank needs a
// batch and has none formed, so steps are taken from the queues only as fast as the fastest
// rank trains. Latches the end.
static void
fill(broker *b, group *g, uint64_t now_ms)
{
    // Within the returning window no step is formed (see try_pull).
    if (g->end_code == STOKER_OK && now_ms >= b->returning_until_ms) {
        uint64_t slowest = UINT64_MAX;
        for (uint32_t r = 0; r < g->world; r++) {
            const group_rank *gr = &g->ranks[r];
            if (gr->t == NULL || !gr->t->connected)
                return;
            if (gr->delivered < slowest)
                slowest = gr->delivered;
        }
        if (!g->started) {
            start(g);
            return; // the ranks behind catch up first (group_take)
        }
        if (slowest < g->catch_up)
            return;
        if (g->steps - slowest >= g->ahead)
            return;
        if (g->mix != NULL && stoker_batching_active(&g->batching)) {
            if (group_mixed_tokens_step(b, g, now_ms) && !form_step(b, g, g->batch, 0, 0, NULL))
                g->short_of = 1; // a later rank's batch came short: the step waits
            return;
        }
        if (g->mix != NULL) {
            uint32_t counts[STOKER_MIX_MAX];
            if (group_mixed_step(b, g, now_ms, counts))
                form_step(b, g, g->batch, 0, 0, counts);
            return;
        }
        uint64_t queued = b->c.queued;
        uint32_t n = g->batch, extra = 0;
        int enough = budget_ready(b, &g->batching, g->batch, g->world); // every rank's batch
        g->short_of = !enough;
        if (!enough && g->step_ms == 0) {
            g->step_ms = now_ms; // the wait for this step starts
            g->step_produced = b->c.produced;
        }
        if (!enough) {
            // A short step only when no full one can come: the supply is over, the queues are
            // full and still hold less than a full step, or a dataset's epochs wait for what is
            // queued to be acknowledged (its producers stay alive until then).
            int over = supply_over(b, now_ms);
            int waiting = !over && epochs_waiting(b);
            if (!over && !waiting && !no_room(b))
                return;
            n = (uint32_t)(queued / g->world);
            if (waiting) {
                // An epoch's last step takes everything queued, uneven by at most one example
                // per rank, so that the epoch can end. Fewer examples than ranks ride with the
                // next epoch's first step; after the last epoch they are left over.
                extra = (uint32_t)(queued % g->world);
                if (n == 0) {
                    if (queued > 0 && !epochs_open_early(b))
                        end_group(b, g, 1);
                    else if (queued == 0 && group_commits(g) && !epochs_open_early(b))
                        // The epoch's last items are the ranks' own, kept for their commit
                        // (group commit): the next epoch opens rather than wait for it, and
                        // after the last one the group ends (the ranks' final commit follows).
                        end_group(b, g, 1);
                    return;
                }
            } else if (n == 0) {
                if (over)
                    end_group(b, g, 0);
                return;
            }
            if (g->batching.pack > 0) {
                // Packed: every rank keeps its rows, fewer sequences fill them; form_step shares
                // what is queued among the ranks, so no rank gets a row more (extra counts
                // examples, not rows).
                n = g->batch;
                extra = 0;
            }
        }
        form_step(b, g, n, extra, !enough, NULL);
    }
}

int
group_take(broker *b, trainer *t, uint64_t now_ms, lease **l, uint64_t *step, uint64_t *leftover,
           char *why, size_t why_len)
{
    group *g = t->group;
    group_rank *gr = &g->ranks[t->rank];
    if (g->end_code == STOKER_GROUP_BROKEN)
        return stoker_errorf(why, why_len, STOKER_GROUP_BROKEN, "%s", g->end_reason);
    if (gr->n_pending == 0)
        fill(b, g, now_ms);
    if (g->started && gr->n_pending == 0 && gr->delivered < g->catch_up &&
        g->end_code == STOKER_OK && now_ms >= b->returning_until_ms) {
        // Behind the others after a broker restart: a batch of its own, a full one.
        lease *c = b->c.queued >= g->batch ? lease_take(b, t, g->batch, UINT32_MAX) : NULL;
        if (c != NULL && (stoker_batching_active(&g->batching) ? c->full : c->count == g->batch)) {
            *l = c;
            *step = ++gr->delivered;
            return STOKER_OK;
        }
        if (c != NULL) {
            unlink_lease(t, c);
            lease_return(b, c, 1);
        }
        if (supply_over(b, now_ms) && b->c.queued < g->batch) {
            g->end_code = STOKER_GROUP_BROKEN;
            g->retired = 1;
            snprintf(g->end_reason, sizeof(g->end_reason),
                     "group '%s' is broken: after a broker restart rank %u had taken %llu steps, "
                     "others %llu, and the supply ended before it could catch up (%llu examples "
                     "left, %u needed)",
                     g->name, t->rank, (unsigned long long)gr->delivered,
                     (unsigned long long)g->catch_up, (unsigned long long)b->c.queued, g->batch);
            stoker_warn("group-broken: %s", g->end_reason);
            for (uint32_t r = 0; r < g->world; r++)
                if (g->ranks[r].t != NULL)
                    return_pending(b, g, &g->ranks[r]);
            return stoker_errorf(why, why_len, STOKER_GROUP_BROKEN, "%s", g->end_reason);
        }
        return STOKER_OK;
    }
    if ((*l = pop_pending(g, gr)) != NULL) {
        *step = ++gr->delivered;
        return STOKER_OK;
    }
    *leftover = g->leftover;
    if (g->end_code != STOKER_OK)
        return stoker_errorf(why, why_len, g->end_code, "%s", g->end_reason);
    if (g->short_of && g->step_ms != 0 && now_ms > g->step_ms) {
        // Why this rank waits (its stall reason): the step's size, what is queued,
        // and how fast examples come.
        double secs = (double)(now_ms - g->step_ms) / 1000.0;
        if (g->mix != NULL && g->mix->waits_for >= 0) {
            snprintf(why, why_len,
                     "group '%s' waits for a full step %llu: the mixture waits for source '%s' "
                     "(%llu examples arriving in all in the last %.1f s)",
                     g->name, (unsigned long long)g->steps + 1,
                     g->mix->spec.names[g->mix->waits_for],
                     (unsigned long long)(b->c.produced - g->step_produced), secs);
            return STOKER_OK;
        }
        snprintf(why, why_len,
                 "group '%s' waits for a full step %llu: %llu examples (%u ranks x %u), %llu "
                 "queued, %.1f examples/s arriving (%llu in the last %.1f s)",
                 g->name, (unsigned long long)g->steps + 1, (unsigned long long)g->world * g->batch,
                 g->world, g->batch, (unsigned long long)b->c.queued,
                 (double)(b->c.produced - g->step_produced) / secs,
                 (unsigned long long)(b->c.produced - g->step_produced), secs);
    }
    return STOKER_OK;
}

void
group_untake(broker *b, trainer *t, lease *l)
{
    (void)b;
    group *g = t->group;
    group_rank *gr = &g->ranks[t->rank];
    gr->head = (gr->head + g->ahead - 1) % g->ahead;
    gr->pending[gr->head] = l;
    gr->events_at[gr->head] = gr->events_upto;
    gr->events_upto = gr->events_before;
    gr->n_pending++;
    gr->delivered--;
}

uint64_t
group_events_upto(const broker *b, const trainer *t)
{
    const group *g = t->group;
    // Ended or broken: the end reaches every rank at the same step, with every event.
    if (g == NULL || g->end_code != STOKER_OK)
        return b->n_events;
    return g->ranks[t->rank].events_upto;
}

int
group_status(const broker *b, stoker_group_info **out, uint32_t *n)
{
    uint32_t count = 0;
    for (const group *g = b->groups; g != NULL; g = g->next)
        count++;
    *out = NULL;
    *n = 0;
    if (count == 0)
        return STOKER_OK;
    stoker_group_info *info = calloc(count, sizeof(*info));
    if (info == NULL)
        return STOKER_NOMEM;
    uint32_t i = 0;
    for (const group *g = b->groups; g != NULL; g = g->next, i++) {
        stoker_group_info *d = &info[i];
        snprintf(d->name, sizeof(d->name), "%s", g->name);
        d->world = g->world;
        d->batch = g->batch;
        d->steps = g->steps;
        d->leftover = g->leftover;
        d->state = g->end_code == STOKER_GROUP_BROKEN ? "broken"
                   : g->end_code != STOKER_OK         ? "ended"
                                                      : "open";
        if (g->end_code != STOKER_OK) {
            snprintf(d->end_reason, sizeof(d->end_reason), "%.*s", (int)sizeof(d->end_reason) - 1,
                     g->end_reason);
            d->ended_at_s = (double)g->ended_ms / 1000.0;
        }
        for (uint32_t r = 0; r < g->world; r++) {
            const group_rank *gr = &g->ranks[r];
            d->joined += gr->t != NULL;
            d->rank_steps[r] = gr->delivered;
            d->rank_ready[r] = gr->n_pending;
        }
    }
    *out = info;
    *n = count;
    return STOKER_OK;
}

void
group_destroy_all(broker *b, broker_outbox *out)
{
    group *g = b->groups;
    while (g != NULL) {
        group *next = g->next;
        for (uint32_t r = 0; r < g->world; r++)
            if (g->ranks[r].commit_token != NULL && out != NULL)
                outbox_add(out, g->ranks[r].commit_token, NULL);
        group_free(g);
        g = next;
    }
    b->groups = NULL;
}
