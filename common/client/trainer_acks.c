// The trainer client's holds, acknowledgements and commits (trainer_impl.h): the leases handed to
// the caller and not acknowledged yet (the goodbye names them), acknowledgements waiting for the
// next pull to carry them (or sent on their own), and a committing trainer's acknowledgements
// kept until its commit, alone or as a rank of a group (docs/groups.md).
#include <stdlib.h>
#include <string.h>

#include "stoker/error.h"
#include "stoker/log.h"
#include "trainer_impl.h"

int
trainer_holds(stoker_trainer_client *tc, uint64_t lease)
{
    int found = 0;
    pthread_mutex_lock(&tc->lock);
    for (uint32_t i = 0; i < tc->n_held && !found; i++)
        found = tc->held[i] == lease;
    pthread_mutex_unlock(&tc->lock);
    return found;
}

void
trainer_hold(stoker_trainer_client *tc, uint64_t lease)
{
    pthread_mutex_lock(&tc->lock);
    if (tc->n_held == MAX_ACKS) {
        memmove(&tc->held[0], &tc->held[1], (MAX_ACKS - 1) * sizeof(uint64_t));
        tc->n_held--;
    }
    tc->held[tc->n_held++] = lease;
    pthread_mutex_unlock(&tc->lock);
}

int
trainer_send_acks(stoker_trainer_client *tc, int background)
{
    uint64_t acks[MAX_ACKS];
    pthread_mutex_lock(&tc->lock);
    uint32_t n = tc->n_pending_acks;
    memcpy(acks, tc->pending_acks, n * sizeof(uint64_t));
    tc->n_pending_acks = 0;
    pthread_mutex_unlock(&tc->lock);
    if (n == 0)
        return STOKER_OK;
    stoker_request req = {
        .method = STOKER_ACK, .session = tc->opts.client.session, .n_acks = n, .acks = acks};
    stoker_reply *rep = NULL;
    char err[256];
    int rv =
        conn_call(tc->ctl_ctx, &req, session_call_timeout(&tc->session), &rep, err, sizeof(err));
    if (rv != STOKER_OK) {
        if (background) {
            pthread_mutex_lock(&tc->lock);
            for (uint32_t i = 0; i < n && tc->n_pending_acks < MAX_ACKS; i++)
                tc->pending_acks[tc->n_pending_acks++] = acks[i];
            pthread_mutex_unlock(&tc->lock);
        } else {
            stoker_warn("trainer: could not acknowledge %u leases: %s", n, err);
        }
        return rv;
    }
    rv = rep->code;
    trainer_take_extras(tc, rep); // events an acknowledgement brought about (an epoch's end)
    if (rv != STOKER_OK && !background)
        stoker_warn("trainer: acknowledgement refused: %s", rep->message);
    stoker_reply_free(rep);
    return rv;
}

// Forgets that lease is held by the caller (acknowledged, or kept for the commit).
static void
unhold(stoker_trainer_client *tc, uint64_t lease)
{
    pthread_mutex_lock(&tc->lock);
    for (uint32_t i = 0; i < tc->n_held; i++) {
        if (tc->held[i] == lease) {
            memmove(&tc->held[i], &tc->held[i + 1], (tc->n_held - i - 1) * sizeof(uint64_t));
            tc->n_held--;
            break;
        }
    }
    pthread_mutex_unlock(&tc->lock);
}

void
stoker_trainer_client_ack(stoker_trainer_client *tc, uint64_t lease)
{
    if (tc->opts.commit) {
        // Kept until the next commit. Out of memory: sent now (it counts as trained at once).
        if (tc->n_uncommitted == tc->cap_uncommitted) {
            uint32_t cap = tc->cap_uncommitted ? tc->cap_uncommitted * 2 : 256;
            uint64_t *u = realloc(tc->uncommitted, cap * sizeof(*u));
            if (u != NULL) {
                tc->uncommitted = u;
                tc->cap_uncommitted = cap;
            }
        }
        if (tc->n_uncommitted < tc->cap_uncommitted) {
            unhold(tc, lease); // the goodbye names it among the uncommitted instead
            tc->uncommitted[tc->n_uncommitted++] = lease;
            return;
        }
        stoker_warn("trainer: out of memory keeping an acknowledgement for the commit");
    }
    unhold(tc, lease);
    pthread_mutex_lock(&tc->lock);
    int full = tc->n_pending_acks == MAX_ACKS;
    pthread_mutex_unlock(&tc->lock);
    if (full)
        stoker_trainer_client_flush(tc);
    pthread_mutex_lock(&tc->lock);
    if (tc->n_pending_acks < MAX_ACKS)
        tc->pending_acks[tc->n_pending_acks++] = lease;
    pthread_mutex_unlock(&tc->lock);
}

int
stoker_trainer_client_flush(stoker_trainer_client *tc)
{
    return trainer_send_acks(tc, 0);
}

// A rank's commit (group commit, docs/groups.md): its acknowledgements in parts at its step
// count, the last part final; the broker applies every rank's at once when all are in, and
// answers the final part then (at most STOKER_GROUP_COMMIT_WAIT_MS after the first rank's part, or
// GROUP_BROKEN when a rank is lost meanwhile). Nothing counts unless the final part says OK.

static int
group_commit(stoker_trainer_client *tc)
{
    if (tc->group_steps == 0 && tc->n_uncommitted == 0)
        return STOKER_OK; // no step taken: nothing to commit
    uint32_t done = 0;
    int rv = STOKER_OK;
    for (;;) {
        uint32_t n = tc->n_uncommitted - done < MAX_ACKS ? tc->n_uncommitted - done : MAX_ACKS;
        int final = done + n == tc->n_uncommitted;
        stoker_request req = {.method = STOKER_ACK,
                              .session = tc->opts.client.session,
                              .n_acks = n,
                              .acks = tc->uncommitted + done,
                              .commit_step = tc->group_steps,
                              .commit_final = final};
        stoker_reply *rep = NULL;
        char err[256];
        uint32_t timeout = tc->opts.client.request_timeout_ms;
        if (final)
            timeout += STOKER_GROUP_COMMIT_WAIT_MS;
        rv = conn_call(tc->ctl_ctx, &req, timeout, &rep, err, sizeof(err));
        if (rv != STOKER_OK) {
            stoker_warn("trainer: group commit at step %llu failed: %s",
                        (unsigned long long)tc->group_steps, err);
            return rv;
        }
        rv = rep->code;
        if (rv != STOKER_OK && rv != STOKER_NOT_FOUND) {
            snprintf(tc->refusal, sizeof(tc->refusal), "%s", rep->message);
            stoker_warn("trainer: group commit at step %llu refused: %s",
                        (unsigned long long)tc->group_steps, rep->message);
            stoker_reply_free(rep);
            return rv; // kept: the next commit sends them again
        }
        if (final)
            trainer_take_extras(tc, rep);
        stoker_reply_free(rep);
        done += n;
        if (final)
            break;
    }
    tc->n_uncommitted = 0;
    tc->told_commit_wait = 0;
    return STOKER_OK;
}

int
stoker_trainer_client_commit(stoker_trainer_client *tc)
{
    int rv = stoker_trainer_client_flush(tc);
    if (rv == STOKER_OK && tc->group[0] != '\0' && tc->opts.commit)
        return group_commit(tc);
    uint32_t done = 0;
    while (rv == STOKER_OK && done < tc->n_uncommitted) {
        // Sent here, not through the pending acknowledgements, so that no pull in flight carries
        // them: an OK means the broker applied every one.
        uint32_t n = tc->n_uncommitted - done < MAX_ACKS ? tc->n_uncommitted - done : MAX_ACKS;
        stoker_request req = {.method = STOKER_ACK,
                              .session = tc->opts.client.session,
                              .n_acks = n,
                              .acks = tc->uncommitted + done};
        stoker_reply *rep = NULL;
        char err[256];
        rv = conn_call(tc->ctl_ctx, &req, tc->opts.client.request_timeout_ms, &rep, err,
                       sizeof(err));
        if (rv != STOKER_OK) {
            stoker_warn("trainer: commit of %u leases failed: %s", n, err);
            break;
        }
        rv = rep->code;
        trainer_take_extras(tc, rep); // events the commit brought about (an epoch's end)
        stoker_reply_free(rep);
        // Refused acknowledgements (leases given back after a disconnect) are final too.
        if (rv == STOKER_OK || rv == STOKER_NOT_FOUND) {
            rv = STOKER_OK;
            done += n;
        }
    }
    memmove(tc->uncommitted, tc->uncommitted + done, (tc->n_uncommitted - done) * sizeof(uint64_t));
    tc->n_uncommitted -= done;
    tc->told_commit_wait = 0;
    return rv;
}

void
stoker_trainer_client_set_commit(stoker_trainer_client *tc, int on)
{
    if ((tc->opts.commit != 0) == (on != 0))
        return;
    if (!on)
        stoker_trainer_client_commit(tc); // what was kept is sent now
    tc->opts.commit = on != 0;
    session_forget(&tc->session); // the next hello says it
}

uint64_t
stoker_trainer_client_uncommitted(const stoker_trainer_client *tc)
{
    return tc->n_uncommitted;
}

int
stoker_trainer_client_mark_trained(stoker_trainer_client *tc, uint64_t producer_session,
                                   uint64_t first_seq, uint64_t count)
{
    pthread_mutex_lock(&tc->seen_lock);
    uint64_t added = idset_add(tc->seen, producer_session, first_seq, count);
    pthread_mutex_unlock(&tc->seen_lock);
    return added == UINT64_MAX ? STOKER_NOMEM : STOKER_OK;
}

uint64_t
stoker_trainer_client_acks_refused(const stoker_trainer_client *tc)
{
    return tc->acks_refused;
}
