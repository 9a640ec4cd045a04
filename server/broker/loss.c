// The broker's losses and deadlines (floor 6): producers lost (connection closed or silent),
// trainers dropped (their leases redelivered), connections the transport closed or reset, and the
// tick that expires parked requests and silent peers. It serves no request; the dispatcher settles
// after it. It may use every floor below: the handlers (push.c's push_try, session.c's
// session_forget_pipe), drop.c, the groups, the leases and the core.
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "group.h"
#include "internal.h"
#include "stoker/error.h"
#include "stoker/log.h"

// --- loss ---------------------------------------------------------------------------------------

static void
lose_producer(broker *b, producer *p, uint64_t now_ms, const char *reason, broker_outbox *out)
{
    p->status = STOKER_PRODUCER_LOST;
    p->silent_until_ms = 0;
    stoker_warn("producer-lost: producer %u '%s': %s (%llu examples still queued)", p->id, p->name,
                reason, (unsigned long long)p->q.examples);
    add_event(b, STOKER_EVENT_PRODUCER_LOST, p, now_ms, reason);
    epochs_release(b, p, "producer lost");
    // Its parked pushes are answered so their contexts come free; a live peer resends.
    for (parked *k = p->pushes, *next; k != NULL; k = next) {
        next = k->next;
        send_code(b, out, k->token, STOKER_RETRY, "producer was considered lost: %s", reason);
        free_parked(k);
        b->n_parked--;
    }
    p->pushes = p->pushes_tail = NULL;
}

void
loss_pipe_gone(broker *b, uint32_t pipe, uint64_t now_ms, int lose_producers, broker_outbox *out)
{
    session_forget_pipe(b, pipe);
    for (uint32_t i = 0; i < b->n_producers; i++) {
        producer *p = b->producers[i];
        if (p->pipe == pipe && p->status == STOKER_PRODUCER_LOST)
            p->silent_until_ms = 0; // lost by silence, and now its connection is gone too
        if (p->pipe != pipe || p->status != STOKER_PRODUCER_ALIVE)
            continue;
        if (lose_producers)
            lose_producer(b, p, now_ms, "connection closed", out);
        else
            p->pipe = 0; // its next push or heartbeat, on a new connection, sets it again
    }
    for (uint32_t i = 0; i < b->n_trainers; i++) {
        trainer *t = b->trainers[i];
        if (t->pipe == pipe && t->connected)
            drop_trainer(b, t, "connection closed", now_ms, out);
    }
}

void
loss_tick(broker *b, uint64_t now_ms, broker_outbox *out)
{
    char reason[96];
    group_commit_tick(b, now_ms, out);
    autoscale_tick(b, now_ms);
    for (uint32_t i = 0; i < b->n_producers; i++) {
        producer *p = b->producers[i];
        // Parked pushes past their wait: RETRY (or the gap, for one ahead of what we hold).
        // Once one is answered, those waiting for it behind are answered too: it is not coming.
        int answered = 0;
        while (p->pushes != NULL && (p->pushes->deadline_ms <= now_ms ||
                                     (answered && p->pushes->req->first_seq > p->next_seq))) {
            parked *k = p->pushes;
            p->pushes = k->next;
            if (p->pushes == NULL)
                p->pushes_tail = NULL;
            b->n_parked--;
            push_try(b, p, k, now_ms, out, 1);
            free_parked(k);
            answered = 1;
        }
        // (A job's mirror of the lead's producer, jobs.c, is lost when the lead's is.)
        if (b->lead == NULL && p->status == STOKER_PRODUCER_ALIVE && p->pushes == NULL &&
            now_ms > p->last_seen_ms + b->cfg.producer_timeout_ms) {
            snprintf(reason, sizeof(reason), "silent for %.1f s",
                     (double)(now_ms - p->last_seen_ms) / 1000.0);
            lose_producer(b, p, now_ms, reason, out);
            // Its connection is open: it may be frozen or paused, not gone. The loss is told at
            // once; the supply waits for it a while (producer_may_send).
            if (p->pipe != 0)
                p->silent_until_ms = now_ms + b->cfg.silent_grace_ms;
        }
    }
    for (uint32_t i = 0; i < b->n_trainers; i++) {
        trainer *t = b->trainers[i];
        if (t->connected && t->parked_pulls == 0 &&
            now_ms > t->last_seen_ms + b->cfg.trainer_timeout_ms) {
            snprintf(reason, sizeof(reason), "silent for %.1f s",
                     (double)(now_ms - t->last_seen_ms) / 1000.0);
            drop_trainer(b, t, reason, now_ms, out);
        }
    }
}
