// A data-parallel group with a mixture of sources (docs/mixing.md): its steps' per-source
// counts (the quota rule over world x batch examples), each rank's part in proportion
// (group.c forms the step), and its end with its mixture's. Below group.c, which calls it.
#include <stdio.h>

#include "budget.h"
#include "group.h"
#include "group_impl.h"
#include "internal.h"
#include "mix.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"

// Whether g's mixture is the one asked for (none and none alike).
int
group_same_mix(const group *g, const stoker_mix *asked)
{
    return g->mix != NULL ? stoker_mix_equal(&g->mix->spec, asked) : asked->n == 0;
}

// The refusal of a rank whose mixture is not its group's.
int
group_mix_disagrees(const group *g, const stoker_request *req, const char *who, char *why,
                    size_t len)
{
    char has[256] = "", says[256] = "";
    if (g->mix != NULL)
        stoker_mix_format(&g->mix->spec, has, sizeof(has));
    stoker_mix_format(&req->mix, says, sizeof(says));
    return stoker_errorf(why, len, STOKER_INVALID,
                         "group '%s': ranks disagree on the mixture: the group mixes '%s', '%s' "
                         "(rank %u) says '%s' (every rank's step holds the same shares)",
                         g->name, has, who, req->rank, says);
}

// Ends mixed group g: its mixture is over (code and why from mix_end). What its sources still
// hold stays queued, reported as the leftover (a last short step would break the shares).
static void
end_mixed(broker *b, group *g, int code, const char *why, const uint64_t *avail)
{
    g->end_code = code;
    g->ended_ms = stoker_now_ms() - b->start_ms;
    g->leftover = 0;
    for (uint32_t s = 0; s < g->mix->spec.n; s++)
        g->leftover += avail[s];
    g->retired = 1;
    snprintf(g->end_reason, sizeof(g->end_reason),
             "group '%s' ended at step %llu: %s; %llu example%s of its sources left over, still "
             "queued",
             g->name, (unsigned long long)g->steps, why, (unsigned long long)g->leftover,
             g->leftover == 1 ? "" : "s");
    stoker_info("group-ended: %s", g->end_reason);
}

// The next step of a group with a mixture (mix.h): 1 with the step's per-source counts (world x
// batch examples, the quota rule) once every source has its count queued; 0 while it waits, or
// when the group ended with its mixture.
// The schedule's weights for g's next step, and what each source holds queued (avail): 1 while
// the mixture goes on, 0 when it ended (and the group with it).
static int
mixture_goes_on(broker *b, group *g, uint64_t now_ms, uint64_t *avail)
{
    char who[STOKER_NAME_MAX + 16], why[STOKER_MESSAGE_MAX];
    mix_at_step(g->mix, g->steps + 1); // the schedule's weights for the step to form
    mix_avail(b, g->mix, avail);
    snprintf(who, sizeof(who), "group '%s'", g->name);
    int end = mix_end(b, g->mix, avail, now_ms, who, why, sizeof(why));
    if (end != STOKER_OK) {
        end_mixed(b, g, end, why, avail);
        return 0;
    }
    return 1;
}

// Whether g's next step may form (ready); while it may not, the wait for it is timed for the
// ranks' stall reason (group_take).
static int
step_ready(broker *b, group *g, uint64_t now_ms, int ready)
{
    g->short_of = !ready;
    if (!ready && g->step_ms == 0) {
        g->step_ms = now_ms; // the wait for this step starts
        g->step_produced = b->c.produced;
    }
    return ready;
}

int
group_mixed_step(broker *b, group *g, uint64_t now_ms, uint32_t *counts)
{
    mix *m = g->mix;
    uint64_t avail[STOKER_MIX_MAX];
    if (!mixture_goes_on(b, g, now_ms, avail))
        return 0;
    mix_plan(m, g->world * g->batch, counts);
    uint32_t s = 0;
    while (s < m->spec.n && counts[s] <= avail[s])
        s++;
    m->waits_for = s < m->spec.n ? (int32_t)s : -1;
    return step_ready(b, g, now_ms, s == m->spec.n);
}

int
group_mixed_tokens_step(broker *b, group *g, uint64_t now_ms)
{
    mix *m = g->mix;
    uint64_t avail[STOKER_MIX_MAX];
    if (!mixture_goes_on(b, g, now_ms, avail))
        return 0;
    // Every rank's budget queued in all, and the first rank's batch whole from the sources as
    // their shares say (a dry plan: nothing taken); a later rank short of it undoes the step.
    budget_plan plan;
    int32_t s = -1;
    int ready = budget_ready(b, &g->batching, g->batch, g->world) &&
                budget_plan_mixed(b, g->ranks[0].t, m, g->batch, &plan, &s) == 0;
    if (ready) {
        ready = plan.full;
        budget_plan_free(&plan);
    }
    m->waits_for = ready ? -1 : s;
    return step_ready(b, g, now_ms, ready);
}

lease *
group_mixed_tokens_take(broker *b, group *g, trainer *t)
{
    budget_plan plan;
    int32_t s = -1;
    lease *l = NULL;
    if (budget_plan_mixed(b, t, g->mix, g->batch, &plan, &s) == 0) {
        if (plan.full)
            l = lease_take_mix_plan(b, t, g->mix, &plan);
        budget_plan_free(&plan);
    }
    g->mix->waits_for = l != NULL ? -1 : s;
    return l;
}

struct mix *
group_mix(const trainer *t)
{
    return t->group != NULL ? t->group->mix : NULL;
}
