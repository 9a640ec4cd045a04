// Group commit (see group.h, "Checkpoints"): a committing rank's acknowledgements are staged, not
// applied, until every rank's final part for the same step is in; then all are applied at once.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "group.h"
#include "group_impl.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"

// Ends the commit in progress on g without applying it: every rank's final part waiting is
// answered with code and why (each rank keeps its acknowledgements and sends them again with its
// next commit), and what was staged is forgotten.
static void
commit_abort(broker *b, group *g, int code, const char *why, broker_outbox *out)
{
    for (uint32_t r = 0; r < g->world; r++) {
        group_rank *gr = &g->ranks[r];
        if (gr->commit_token != NULL)
            send_code(b, out, gr->commit_token, code, "%s", why);
        gr->commit_token = NULL;
        gr->n_staged = 0;
    }
    g->commit_step = 0;
}

// Whether rank gr's part of a commit at step `step` is in: its final part came, or it resumed
// from a checkpoint at that step or later (a rank killed after it saved its checkpoint and before
// the others did: what it trained up to there is in its file, and its hello named what of it was
// not committed), so it commits nothing there and the others' commit does not wait for it.
static int
commit_in(const group_rank *gr, uint64_t step)
{
    return gr->t != NULL && (gr->commit_token != NULL || (gr->said >= step && gr->n_staged == 0));
}

// Applies the commit in progress on g (every rank's final part is in): each rank's staged
// acknowledgements at once, then every rank is answered, with the events it may hear.
static void
commit_apply(broker *b, group *g, uint64_t now_ms, broker_outbox *out)
{
    uint64_t leases = 0;
    for (uint32_t r = 0; r < g->world; r++) {
        group_rank *gr = &g->ranks[r];
        if (gr->commit_token == NULL)
            continue; // resumed past this step (commit_in)
        uint32_t refused = lease_apply_acks(b, gr->t, gr->n_staged, gr->staged, now_ms);
        leases += gr->n_staged;
        stoker_event events[EVENTS_PER_REPLY];
        uint32_t n_events = take_events(b, gr->t, group_events_upto(b, gr->t), events);
        stoker_reply rep = {.code = refused == 0 ? STOKER_OK : STOKER_NOT_FOUND,
                            .acks_refused = refused,
                            .group_step = g->commit_step,
                            .n_events = n_events,
                            .events = events};
        if (refused > 0)
            snprintf(rep.message, sizeof(rep.message),
                     "%u of %u leases unknown or already acknowledged", refused, gr->n_staged);
        send_reply(b, out, gr->commit_token, &rep);
        gr->commit_token = NULL;
        gr->n_staged = 0;
    }
    stoker_info("group-committed: group '%s' committed step %llu on its %u ranks (%llu leases)",
                g->name, (unsigned long long)g->commit_step, g->world, (unsigned long long)leases);
    g->commit_step = 0;
}

void
group_commit(broker *b, trainer *t, void *token, const stoker_request *req, uint64_t now_ms,
             broker_outbox *out)
{
    group *g = t->group;
    if (g->end_code == STOKER_GROUP_BROKEN) {
        send_code(b, out, token, STOKER_GROUP_BROKEN, "%s", g->end_reason);
        return;
    }
    group_rank *gr = &g->ranks[t->rank];
    if (g->commit_step != 0 && req->commit_step != g->commit_step) {
        send_code(b, out, token, STOKER_INVALID,
                  "group '%s': rank %u commits at step %llu while a commit at step %llu is under "
                  "way: every rank commits at the same step (call state_dict() or commit() on "
                  "every rank)",
                  g->name, t->rank, (unsigned long long)req->commit_step,
                  (unsigned long long)g->commit_step);
        return;
    }
    if (gr->n_staged + (uint64_t)req->n_acks > GROUP_COMMIT_MAX_LEASES) {
        send_code(b, out, token, STOKER_INVALID,
                  "group '%s': rank %u stages more than %u leases in one commit", g->name, t->rank,
                  GROUP_COMMIT_MAX_LEASES);
        return;
    }
    if (gr->n_staged + (uint64_t)req->n_acks > gr->cap_staged) {
        uint32_t cap = gr->cap_staged ? gr->cap_staged : 256;
        while (cap < gr->n_staged + req->n_acks)
            cap *= 2;
        uint64_t *staged = realloc(gr->staged, (size_t)cap * sizeof(*staged));
        if (staged == NULL) {
            send_code(b, out, token, STOKER_NOMEM, "broker out of memory staging a commit");
            return;
        }
        gr->staged = staged;
        gr->cap_staged = cap;
    }
    if (g->commit_step == 0) {
        g->commit_step = req->commit_step;
        g->commit_since_ms = now_ms;
    }
    if (req->n_acks > 0) // a rank may commit a step with nothing new (acks NULL)
        memcpy(gr->staged + gr->n_staged, req->acks, (size_t)req->n_acks * sizeof(uint64_t));
    gr->n_staged += req->n_acks;
    if (!req->commit_final) {
        send_code(b, out, token, STOKER_OK, "staged");
        return;
    }
    if (gr->commit_token != NULL) // the rank sent its final part again (its wait timed out)
        send_code(b, out, gr->commit_token, STOKER_RETRY, "replaced by a later commit request");
    gr->commit_token = token;
    for (uint32_t r = 0; r < g->world; r++)
        if (!commit_in(&g->ranks[r], g->commit_step))
            return; // the others' come later
    commit_apply(b, g, now_ms, out);
}

void
group_commit_lost(broker *b, trainer *t, broker_outbox *out)
{
    group *g = t->group;
    if (g == NULL || g->commit_step == 0)
        return;
    char why[STOKER_MESSAGE_MAX];
    snprintf(why, sizeof(why),
             "group '%s': rank %u (trainer %u '%s') was lost before every rank committed step "
             "%llu: nothing of that commit counts",
             g->name, t->rank, t->id, t->name, (unsigned long long)g->commit_step);
    stoker_warn("group-commit-failed: %s", why);
    commit_abort(b, g, STOKER_GROUP_BROKEN, why, out);
}

void
group_commit_tick(broker *b, uint64_t now_ms, broker_outbox *out)
{
    for (group *g = b->groups; g != NULL; g = g->next) {
        if (g->commit_step == 0 || now_ms < g->commit_since_ms + STOKER_GROUP_COMMIT_WAIT_MS)
            continue;
        char missing[128] = "";
        size_t used = 0;
        for (uint32_t r = 0; r < g->world && used + 12 < sizeof(missing); r++)
            if (!commit_in(&g->ranks[r], g->commit_step))
                used += (size_t)snprintf(missing + used, sizeof(missing) - used, "%s%u",
                                         used > 0 ? ", " : "", r);
        char why[STOKER_MESSAGE_MAX];
        snprintf(why, sizeof(why),
                 "group '%s': rank(s) %s did not commit step %llu within %.0f s of the first: "
                 "every rank calls state_dict() (or commit()) at the same step; nothing of that "
                 "commit counts",
                 g->name, missing, (unsigned long long)g->commit_step,
                 STOKER_GROUP_COMMIT_WAIT_MS / 1000.0);
        stoker_warn("group-commit-failed: %s", why);
        commit_abort(b, g, STOKER_TIMEOUT, why, out);
    }
}
