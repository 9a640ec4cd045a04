// The broker's producers' side: pushes, applied at once or parked until their queue has room
// (idempotent by sequence number, refused on a gap), and the revival of a producer heard from
// again. It does not decide when a producer is lost (loss.c) nor hand examples out
// (lease.c).
// It may use the core and arena.c, commit.c, epoch.c, trained.c.
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "arena.h"
#include "internal.h"
#include "jobs.h"
#include "stoker/error.h"
#include "stoker/log.h"

// --- serving parked requests --------------------------------------------------------------------

// Completes p's parked pushes that now fit, in seq order. Returns how many.
static uint32_t
serve_producer(broker *b, producer *p, uint64_t now_ms, broker_outbox *out)
{
    uint32_t served = 0;
    while (p->pushes != NULL) {
        parked *k = p->pushes;
        if (!push_try(b, p, k, now_ms, out, 0))
            break;
        p->pushes = k->next;
        if (p->pushes == NULL)
            p->pushes_tail = NULL;
        b->n_parked--;
        free(k); // push_try took the request
        served++;
    }
    return served;
}

// Completes parked pushes that now fit, in seq order per producer. Returns how many.
uint32_t
push_serve_parked(broker *b, uint64_t now_ms, broker_outbox *out)
{
    uint32_t served = 0;
    for (uint32_t i = 0; i < b->n_producers; i++)
        served += serve_producer(b, b->producers[i], now_ms, out);
    return served;
}

// Parks k among p's waiting pushes in seq order (after any of the same seq).
static void
park_push(broker *b, producer *p, parked *k)
{
    parked **at = &p->pushes;
    while (*at != NULL && (*at)->req->first_seq <= k->req->first_seq)
        at = &(*at)->next;
    k->next = *at;
    *at = k;
    if (k->next == NULL)
        p->pushes_tail = k;
    b->n_parked++;
}

// --- push ---------------------------------------------------------------------------------------

// Whether fresh examples (bytes) of p fit: in its queue, and with jobs sharing the producers in
// every job's that takes examples (jobs.c; the lead's own job, once ended, keeps nothing). An
// empty sized queue takes any chunk the broker accepts (queues_max_chunk): the depth may have
// shrunk below the chunk since (more producers alive); --max-bytes still bounds it.
// A shard made again for some jobs (epoch.c) needs room in theirs only (takers); under
// --job-policy remake a job that lags passes a push over (passed) and the others take it.
static int
push_fits(const broker *b, const producer *p, const stoker_request *req, uint32_t skip,
          uint64_t bytes, uint32_t *takers, uint32_t *passed)
{
    uint32_t fresh = req->chunk.count - skip, remade_for;
    *takers = b->epochs != NULL && epochs_push_remade(b, p, req->shard, &remade_for) ? remade_for
                                                                                     : JOBS_ALL;
    *passed = 0;
    uint32_t epoch = b->epochs != NULL && req->n_items > skip ? EPOCH_OF(req->items[skip]) : 0;
    uint32_t short_mask = jobs_short(b, p, fresh, bytes, *takers, epoch);
    if (short_mask != 0 && *takers == JOBS_ALL && b->epochs != NULL && req->n_items > skip)
        *passed = jobs_may_pass(b, short_mask, epoch);
    return (short_mask & ~*passed) == 0;
}

// Tries to apply the parked push k. Returns 1 when it was answered (k->req consumed), 0 when it
// must keep waiting (only when !final).
int
push_try(broker *b, producer *p, parked *k, uint64_t now_ms, broker_outbox *out, int final)
{
    stoker_request *req = k->req;
    uint32_t count = req->chunk.count;
    if (req->make_us > p->make_us) // its making time so far (the autoscale signal's supply)
        p->make_us = req->make_us;
    uint64_t first = req->first_seq;
    if (first > p->next_seq) {
        // Ahead of what we hold: its predecessor may be on its way (a producer keeps two
        // pushes in flight, and two contexts may take them in either order). It waits for it
        // as for room, and only a final try says the gap.
        if (!final)
            return 0;
        if (p->no_room_at == p->next_seq + 1) {
            // Its predecessor was told "no room" and comes again: so does this one, behind it.
            // Not a refusal (a clean run with full queues does this all the time).
            send_code(b, out, k->token, STOKER_RETRY,
                      "push from '%s' at seq %llu waits for seq %llu, which had no room yet: "
                      "push again from seq %llu",
                      p->name, (unsigned long long)first, (unsigned long long)p->next_seq,
                      (unsigned long long)p->next_seq);
            stoker_request_free(req);
            k->req = NULL;
            return 1;
        }
        send_code(b, out, k->token, STOKER_SEQ_GAP,
                  "push from '%s' starts at seq %llu, broker expects %llu: examples in between "
                  "were never received",
                  p->name, (unsigned long long)first, (unsigned long long)p->next_seq);
        stoker_request_free(req);
        k->req = NULL;
        return 1;
    }
    uint64_t end = first + count;
    if (end <= p->next_seq) { // a resend of what we hold: acknowledge, append nothing
        stoker_reply rep = {.code = STOKER_OK,
                            .acked_through = p->next_seq,
                            .queue_depth = commit_retain_depth(b) + (uint32_t)jobs_lag(b),
                            .batch_examples = queues_batch_examples(b)};
        jobs_tell_trained(b, p, &rep);
        tell_peers(b, &rep);
        send_reply(b, out, k->token, &rep);
        stoker_request_free(req);
        k->req = NULL;
        return 1;
    }
    uint32_t skip = (uint32_t)(p->next_seq - first);
    uint32_t fresh = count - skip;
    uint64_t fresh_bytes = stoker_chunk_bytes(&req->chunk, skip, fresh); // real bytes
    uint32_t takers, passed;
    if (!push_fits(b, p, req, skip, fresh_bytes, &takers, &passed)) {
        if (!final)
            return 0;
        stoker_debug("queue-full: producer %u '%s' holds %llu examples", p->id, p->name,
                     (unsigned long long)p->q.examples);
        send_code(b, out, k->token, STOKER_RETRY, "queue full (%llu of %u examples)",
                  (unsigned long long)p->q.examples, b->queue_depth);
        p->no_room_at = p->next_seq + 1;
        stoker_request_free(req);
        k->req = NULL;
        return 1;
    }
    char why[STOKER_MESSAGE_MAX - 16];
    int rv;
    if (b->epochs != NULL &&
        (rv = epochs_check_push(b, p, req, skip, why, sizeof(why))) != STOKER_OK) {
        stoker_info("push-refused: producer %u '%s': %s", p->id, p->name, why);
        send_code(b, out, k->token, rv, "%s", why);
        stoker_request_free(req);
        k->req = NULL;
        return 1;
    }
    if (queue_append_request(&p->q, req, skip) != STOKER_OK) {
        send_code(b, out, k->token, STOKER_RETRY, "broker out of memory");
        stoker_request_free(req);
        k->req = NULL;
        return 1;
    }
    k->req = NULL; // the queue owns it now
    if (b->epochs != NULL)
        epochs_accepted(b, p, req, skip);
    p->next_seq = end;
    p->accepted += fresh;
    b->c.produced += fresh;
    b->c.queued += fresh;
    b->queued_bytes += fresh_bytes;
    jobs_appended(b, p, fresh, fresh_bytes, takers, passed, now_ms);
    stoker_reply rep = {.code = STOKER_OK,
                        .acked_through = end,
                        .queue_depth = commit_retain_depth(b) + (uint32_t)jobs_lag(b),
                        .batch_examples = queues_batch_examples(b)};
    jobs_tell_trained(b, p, &rep);
    tell_peers(b, &rep);
    send_reply(b, out, k->token, &rep);
    return 1;
}

int
push_handle(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
            broker_outbox *out)
{
    producer *p = find_producer(b, req->session);
    char err[256];
    if (p == NULL) {
        send_code(b, out, token, STOKER_UNKNOWN_PEER, "unknown session %016llx: say hello first",
                  (unsigned long long)req->session);
        return 0;
    }
    if (p->status == STOKER_PRODUCER_FINISHED) {
        send_code(b, out, token, STOKER_INVALID, "producer '%s' said goodbye; hello again first",
                  p->name);
        return 0;
    }
    // The connection that says whether a live producer is gone is the one its hello and
    // heartbeats come on: its pushes may come on a push stream of their own, which it may
    // close and dial again without going anywhere. A push that revives a lost producer does
    // not say which connection that is (it may come on a stream it is about to close: the old
    // one that outlived a cut cable): its next heartbeat does, its silence ends it meanwhile.
    revive(b, p, p->status == STOKER_PRODUCER_ALIVE ? p->pipe : 0, now_ms, "resumed pushing");
    uint32_t max_chunk = queues_max_chunk(b);
    if (req->chunk.count == 0 || req->chunk.count > max_chunk) {
        send_code(b, out, token, STOKER_TOO_LARGE,
                  "chunk of %u examples: must be 1..%u (the chunk limit: --max-chunk, a fixed "
                  "--queue-depth, --max-bytes and --max-message)",
                  req->chunk.count, max_chunk);
        return 0;
    }
    p->last_chunk = req->chunk.count;
    if (req->chunk.count > p->max_chunk) {
        p->max_chunk = req->chunk.count;
        queues_resize(b); // sized queues hold two of it
    }
    p->n_pushes++;
    p->n_pushes_streamed += pipe != p->pipe;
    if (req->pool_secret != 0) {
        // By reference: the examples are in the producer's shared memory, which the queue
        // keeps mapped as long as it holds any of them. Mapped first, then bound (a variable
        // field's offsets are copied out of it before they are checked).
        int rv = b->arena != NULL ? broker_arena_pool_resolve(b->arena, req, err, sizeof(err))
                                  : stoker_errorf(err, sizeof(err), STOKER_INVALID,
                                                  "push by reference to a broker without "
                                                  "shared memory");
        if (rv != STOKER_OK) {
            stoker_warn("bad-push: producer %u '%s': %s", p->id, p->name, err);
            send_code(b, out, token, rv, "push refused: %s", err);
            return 0;
        }
    }
    if ((req->pool_secret != 0
             ? stoker_request_bind_shared(req, &b->schema, err, sizeof(err))
             : stoker_wire_bind_chunk(&req->chunk, req->n_data, req->data_len, &b->schema, err,
                                      sizeof(err))) != STOKER_OK) {
        stoker_warn("bad-push: producer %u '%s': %s", p->id, p->name, err);
        send_code(b, out, token, STOKER_INVALID, "push refused: %s", err);
        return 0;
    }
    p->n_pushes_shm += req->pool_secret != 0;
    if (req->first_seq > UINT64_MAX - req->chunk.count) {
        send_code(b, out, token, STOKER_INVALID, "push: seq overflow");
        return 0;
    }
    parked *k = parked_new(b, out, token, req);
    if (k == NULL)
        return 1; // parked_new answered and freed it
    // Pushes of this producer still waiting go in seq order (one that arrived ahead of its
    // predecessor waits for it); and only so many may wait.
    int can_park = b->n_parked < b->cfg.max_parked;
    if (p->pushes == NULL && push_try(b, p, k, now_ms, out, !can_park)) {
        free(k);
        return 1;
    }
    if (!can_park) {
        push_try(b, p, k, now_ms, out, 1);
        free(k);
        return 1;
    }
    k->deadline_ms = now_ms + b->cfg.park_ms;
    park_push(b, p, k);
    serve_producer(b, p, now_ms, out); // k may be the predecessor the others waited for
    return 1;
}
