// The producer client's pushes (producer_impl.h): each chunk sent until the broker holds it
// (the seq rule makes every resend safe), over the push stream when it can take it, else over
// the socket; retained until reported trained (backpressure when full), pushed again to a broker
// that lost them, two in flight when pipelined; and drain and goodbye, which settle them.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "producer_impl.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"

// The push of req's chunk by reference when it lies in our shared memory and the broker maps it.
static void
describe_push(stoker_producer_client *pc, stoker_request *req)
{
    req->pool_secret = 0;
    req->make_us = atomic_load(&pc->make_us);
    uint64_t secret = pc->pool != NULL ? push_pool_secret(pc->pool) : 0;
    if (secret != 0 && push_pool_offsets(pc->pool, &req->chunk, req->pool_offsets))
        req->pool_secret = secret;
}

// The push prepared for exactly these seqs, now the caller's; NULL when there is none (a
// dataset's pushes carry items and are never prepared).
static nng_msg *
take_prepared(stoker_producer_client *pc, uint64_t first_seq, uint32_t count)
{
    nng_msg *msg = NULL;
    pthread_mutex_lock(&pc->prepared_lock);
    for (int i = 0; i < 2; i++) {
        if (pc->prepared[i].msg != NULL && pc->prepared[i].first_seq == first_seq &&
            pc->prepared[i].count == count && pc->push_items == NULL) {
            msg = pc->prepared[i].msg;
            pc->prepared[i].msg = NULL;
        }
    }
    pthread_mutex_unlock(&pc->prepared_lock);
    return msg;
}

int
stoker_producer_client_prepare(stoker_producer_client *pc, const stoker_chunk *chunk,
                               uint64_t first_seq)
{
    if (!stoker_schema_equal(&chunk->schema, &pc->schema) || chunk->count == 0)
        return STOKER_INVALID;
    if (push_stream_ready(&pc->ps))
        return STOKER_OK; // the push stream sends the chunk from where it is: nothing to do
    stoker_request req = {.method = STOKER_PUSH,
                          .session = pc->opts.session,
                          .first_seq = first_seq,
                          .chunk = *chunk,
                          .make_us = atomic_load(&pc->make_us)};
    nng_msg *msg;
    int rv = stoker_wire_encode_request(&req, &msg);
    if (rv != STOKER_OK)
        return rv;
    pthread_mutex_lock(&pc->prepared_lock);
    // A free slot, else the one for the older seqs (a prepared push nobody took).
    int slot = pc->prepared[0].msg == NULL                             ? 0
               : pc->prepared[1].msg == NULL                           ? 1
               : pc->prepared[0].first_seq < pc->prepared[1].first_seq ? 0
                                                                       : 1;
    nng_msg *old = pc->prepared[slot].msg;
    pc->prepared[slot].msg = msg;
    pc->prepared[slot].first_seq = first_seq;
    pc->prepared[slot].count = chunk->count;
    pthread_mutex_unlock(&pc->prepared_lock);
    nng_msg_free(old);
    return STOKER_OK;
}

#define NEED_REPLAY (-1) // push_raw: a hello found the broker short of first_seq

// What a push's OK answer tells: how far the broker holds our session, what is trained.
static void
took(stoker_producer_client *pc, const stoker_reply *rep)
{
    pc->broker_seq = rep->acked_through;
    atomic_store(&pc->batch_examples, rep->batch_examples);
    if (rep->acked_through > pc->next_seq)
        pc->next_seq = rep->acked_through;
    producer_note_trained(pc, rep->trained_through);
    producer_note_peers(pc, rep);
    if (pc->pool != NULL)
        push_pool_trained(pc->pool, atomic_load(&pc->trained));
    if (rep->queue_depth > 0)
        producer_note_depth(pc, rep->queue_depth);
    if (pc->kept != NULL)
        retention_release_ranges(pc->kept, rep->trained_after, rep->n_trained_after);
}

static int replay_from(stoker_producer_client *pc, int restarted);

// Reads the answer to the push in flight, if any. When it was not taken (or its answer was
// lost with the stream), the retained chunks from it on are pushed again, one at a time (the
// seq rule makes that safe whatever the broker did take). STOKER_OK or an error as for push.
static int
settle(stoker_producer_client *pc)
{
    if (!pc->flying.on)
        return STOKER_OK;
    pc->flying.on = 0;
    uint64_t first = pc->flying.first, end = first + pc->flying.count;
    stoker_reply *rep = NULL;
    char err[256];
    int rv = STOKER_CONNECTION;
    snprintf(err, sizeof(err), "push stream: replaced before the answer came");
    if (push_stream_conn(&pc->ps) == pc->flying.stream)
        rv = push_stream_receive(&pc->ps, pc->flying.id, pc->opts.request_timeout_ms, &pc->stop,
                                 &rep, err, sizeof(err));
    if (rv == STOKER_OK && rep->code == STOKER_OK && rep->acked_through >= end) {
        took(pc, rep);
        stoker_reply_free(rep);
        return STOKER_OK;
    }
    if (rv == STOKER_INTERRUPTED)
        return rv; // goodbye's answer says whether the broker took it
    conn_copy_str(pc->error, sizeof(pc->error), rv == STOKER_OK ? rep->message : err);
    stoker_debug("producer '%s': the push in flight of seq %llu.. was not taken (%s): pushing "
                 "again from seq %llu",
                 pc->name, (unsigned long long)first, pc->error,
                 (unsigned long long)(pc->broker_seq < first ? pc->broker_seq : first));
    if (rv != STOKER_OK || rep->code == STOKER_UNKNOWN_PEER)
        session_forget(
            &pc->session); // a new connection may be a new broker: hello says what it holds
    stoker_reply_free(rep);
    if (pc->broker_seq > first)
        pc->broker_seq = first;
    return replay_from(pc, 0);
}

// Sends chunk as first_seq.. until the broker holds it (it may hold it already). Returns
// STOKER_OK, NEED_REPLAY when a hello on the way found a broker that lacks seqs before first_seq
// (retained ones: push them first), or an error as for stoker_producer_client_push.
static int
push_attempts(stoker_producer_client *pc, const stoker_chunk *chunk, uint64_t first_seq,
              nng_msg **prepared)
{
    stoker_request req = {.method = STOKER_PUSH, .first_seq = first_seq, .chunk = *chunk};
    if (pc->push_items != NULL) {
        req.n_items = chunk->count;
        req.items = pc->push_items;
        req.shard = pc->push_shard;
    }
    uint32_t delay = 10;
    for (;;) {
        // After a stop, pushes get STOP_GRACE_MS in all (conn_stop): one the broker can take is
        // answered by then; one waiting for room, or for a broker that is gone, is abandoned.
        if (producer_stopped(pc)) {
            uint64_t now = stoker_now_ms();
            if (pc->stop.seen_ms == 0)
                pc->stop.seen_ms = now;
            if (now >= pc->stop.seen_ms + pc->stop.grace_ms)
                return STOKER_INTERRUPTED;
        }
        int rv;
        if (!producer_known(pc)) {
            rv = producer_hello_once(pc, &pc->stop, UINT64_MAX);
            if (rv == STOKER_INTERRUPTED)
                return rv;
            if (rv != STOKER_OK)
                goto failed;
            if (pc->kept != NULL && pc->broker_seq < first_seq &&
                retention_find(pc->kept, pc->broker_seq, &(uint64_t){0}, &(int){0}) != NULL)
                return NEED_REPLAY;
        }
        req.session = pc->opts.session;
        describe_push(pc, &req);
        stoker_reply *rep = NULL;
        char err[256];
        session_sent(&pc->session);
        rv = push_stream_call(&pc->ps, &req, pc->opts.request_timeout_ms, &pc->stop, &rep, err,
                              sizeof(err));
        if (rv == PUSH_STREAM_UNUSED && *prepared != NULL) {
            // The first attempt sends what the generating thread encoded; resends encode anew.
            rv = conn_call_msg_until(pc->push_ctx, *prepared, pc->opts.request_timeout_ms,
                                     &pc->stop, &rep, err, sizeof(err));
            *prepared = NULL;
        } else if (rv == PUSH_STREAM_UNUSED) {
            rv = conn_call_until(pc->push_ctx, &req, pc->opts.request_timeout_ms, &pc->stop, &rep,
                                 err, sizeof(err));
        }
        if (rv == STOKER_INTERRUPTED)
            return rv; // abandoned: goodbye's answer says whether the broker took it
        if (rv != STOKER_OK) {
            conn_copy_str(pc->error, sizeof(pc->error), err);
            rv = rv == STOKER_CLOSED ? STOKER_CONNECTION : rv;
            goto failed;
        }
        // The broker answered: the --broker-wait clock starts again (a push may wait for room
        // far longer than that), and a later outage is said again.
        session_answered(&pc->session);
        rv = rep->code;
        if (rv == STOKER_OK) {
            if (rep->acked_through >= first_seq + chunk->count) {
                took(pc, rep);
                stoker_reply_free(rep);
                return STOKER_OK;
            }
            rv = STOKER_INTERNAL;
        }
        conn_copy_str(pc->error, sizeof(pc->error), rep->message);
        stoker_reply_free(rep);
        if (rv == STOKER_RETRY) {
            if (producer_stopped(pc))
                return STOKER_INTERRUPTED; // no room, and no reason to wait for it any more
            continue;                      // the broker already waited for room
        }
        if (rv == STOKER_UNKNOWN_PEER) {
            session_forget(&pc->session);
            continue;
        }
    failed:
        if (!producer_transient(rv))
            return rv;
        if (rv == STOKER_CONNECTION || rv == STOKER_TIMEOUT) {
            session_forget(&pc->session); // a new connection may be a new broker: say hello again
            if (producer_keep_waiting(pc) != STOKER_OK)
                return STOKER_CONNECTION;
        }
        producer_backoff(pc, &delay);
    }
}

// push_attempts with the push prepared for these seqs, if any (stoker_producer_client_prepare).
static int
push_raw(stoker_producer_client *pc, const stoker_chunk *chunk, uint64_t first_seq)
{
    nng_msg *prepared = take_prepared(pc, first_seq, chunk->count);
    int rv = settle(pc);
    if (rv == STOKER_OK)
        rv = push_attempts(pc, chunk, first_seq, &prepared);
    nng_msg_free(prepared); // not sent (NULL when it was)
    return rv;
}

// Pushes the retained chunks the broker lacks (from broker_seq up to next_seq): a restarted
// broker that did not know the session. Returns STOKER_OK or an error as for push.
static int
replay(stoker_producer_client *pc)
{
    return replay_from(pc, 1);
}

// replay; restarted 0: a push in flight that was not taken, pushed again without the words.
static int
replay_from(stoker_producer_client *pc, int restarted)
{
    int settled = settle(pc);
    if (settled != STOKER_OK)
        return settled;
    uint64_t from = pc->broker_seq, count = 0;
    while (pc->kept != NULL && producer_known(pc) && pc->broker_seq < pc->next_seq) {
        uint64_t first;
        int hole;
        const stoker_chunk *c = retention_find(pc->kept, pc->broker_seq, &first, &hole);
        if (c == NULL)
            break; // not ours to give (never retained): the broker's seq rule decides
        if (hole) {
            // Trained already (acknowledged out of order): the broker skips these seqs.
            int rv = producer_hello_once(pc, &pc->stop, first + c->count);
            if (rv != STOKER_OK && !producer_transient(rv))
                return rv;
            if (rv != STOKER_OK)
                session_forget(&pc->session);
            continue;
        }
        if (count == 0 && restarted)
            stoker_warn("producer '%s': the broker holds our session only up to seq %llu (it "
                        "restarted, or did not take our last pushes before a connection failed): "
                        "pushing again %llu retained examples up to seq %llu",
                        pc->name, (unsigned long long)pc->broker_seq,
                        (unsigned long long)(pc->next_seq - pc->broker_seq),
                        (unsigned long long)pc->next_seq);
        int rv = push_raw(pc, c, first);
        if (rv == NEED_REPLAY)
            continue; // the broker restarted again meanwhile: from where it now is
        if (rv != STOKER_OK)
            return rv;
        count += c->count;
        pc->replays += restarted;
        pc->replayed += restarted ? c->count : 0;
    }
    if (count > 0 && restarted)
        stoker_info("producer '%s': pushed %llu retained examples again from seq %llu", pc->name,
                    (unsigned long long)count, (unsigned long long)from);
    return STOKER_OK;
}

// One heartbeat on the pushing thread's context: learns what is trained, and whether the broker
// still knows us (if not, says hello and replays). Returns STOKER_OK or a transport error.
static int
poll_trained(stoker_producer_client *pc)
{
    if (!producer_known(pc)) {
        int rv = producer_hello_once(pc, &pc->stop, UINT64_MAX);
        if (rv != STOKER_OK)
            return rv;
    }
    int rv = replay(pc);
    if (rv != STOKER_OK)
        return rv;
    stoker_request req = {.method = STOKER_HEARTBEAT,
                          .session = pc->opts.session,
                          .done_making = atomic_load(&pc->done_making)};
    stoker_reply *rep = NULL;
    char err[STOKER_MESSAGE_MAX];
    session_sent(&pc->session);
    rv = conn_call(pc->push_ctx, &req, pc->opts.request_timeout_ms, &rep, err, sizeof(err));
    if (rv != STOKER_OK) {
        conn_copy_str(pc->error, sizeof(pc->error), err);
        session_forget(&pc->session);
        return rv == STOKER_CLOSED ? STOKER_CONNECTION : rv;
    }
    session_answered(&pc->session);
    if (rep->code == STOKER_OK) {
        producer_note_trained(pc, rep->trained_through);
        producer_note_peers(pc, rep);
        if (rep->queue_depth > 0)
            producer_note_depth(pc, rep->queue_depth);
        retention_release_ranges(pc->kept, rep->trained_after, rep->n_trained_after);
    } else if (rep->code == STOKER_UNKNOWN_PEER)
        session_forget(&pc->session);
    stoker_reply_free(rep);
    return STOKER_OK;
}

// Waits until count more examples fit in the retention buffer (or it is empty): backpressure
// while trainers are behind. Returns STOKER_OK, STOKER_INTERRUPTED, or STOKER_CONNECTION when
// the broker stayed away longer than --broker-wait meanwhile.
static int
wait_room(stoker_producer_client *pc, uint32_t count)
{
    uint32_t nap = 1;
    for (;;) {
        retention_release(pc->kept, atomic_load(&pc->trained));
        uint64_t held = retention_examples(pc->kept);
        if (held == 0 || held + count <= pc->retain)
            break;
        if (producer_stopped(pc))
            return STOKER_INTERRUPTED;
        if (!pc->full_logged) {
            stoker_info("producer '%s': retention full (%llu examples pushed but not yet "
                        "trained, --retain %u): generation waits for the trainers",
                        pc->name, (unsigned long long)held, atomic_load(&pc->retain));
            pc->full_logged = 1;
        }
        uint64_t before = atomic_load(&pc->trained);
        int polled = poll_trained(pc);
        if ((polled == STOKER_CONNECTION || polled == STOKER_TIMEOUT) &&
            producer_keep_waiting(pc) != STOKER_OK)
            return STOKER_CONNECTION; // waited --broker-wait for a broker to train anything
        if (polled != STOKER_OK && !producer_transient(polled))
            return polled; // a refusal (a retained chunk too large for a new broker, ...): final
        if (polled != STOKER_OK)
            nap = 50;
        // At most 4 ms between polls while the broker answers: a queue the trainers drain fast
        // must not wait on a sleeping producer (a heartbeat costs one small round trip).
        if (atomic_load(&pc->trained) > before)
            nap = 1;
        else if (nap < 4)
            nap *= 2;
        stoker_sleep_ms(nap, pc->opts.stop);
    }
    pc->full_logged = 0;
    return STOKER_OK;
}

// Retains the pushed chunk (its own buffers when owned is chunk, then chunk gets others back).
// STOKER_NOMEM when it could not: said once per chunk, for a broker restart would then lose it.
static int
keep(stoker_producer_client *pc, const stoker_chunk *chunk, uint64_t first_seq, stoker_chunk *owned,
     int quiet)
{
    int rv = STOKER_OK;
    if ((owned == NULL || retention_adopt(pc->kept, owned, first_seq) != STOKER_OK) &&
        (rv = retention_add(pc->kept, chunk, first_seq)) != STOKER_OK && !quiet) {
        stoker_warn("producer '%s': out of memory retaining seq %llu..; a broker restart now "
                    "loses them",
                    pc->name, (unsigned long long)first_seq);
    }
    retention_release(pc->kept, atomic_load(&pc->trained));
    return rv;
}

// Whether the next push may go out before the previous one's answer: pipelined, a stream's
// (a dataset's pushes carry items and shards), retained, and the broker holding everything
// before the push in flight.
static int
can_fly(const stoker_producer_client *pc)
{
    return pc->pipelined && pc->kept != NULL && pc->push_items == NULL && producer_known(pc) &&
           !producer_stopped(pc) &&
           pc->broker_seq == (pc->flying.on ? pc->flying.first : pc->next_seq);
}

#define NOT_SENT (-2) // push_flying: not retained; push it the slow way

// Takes back a push whose caller counts it as failed (abandoned on a stop, or the push before
// it refused): goodbye's answer says whether the broker took it after all.
static int
take_back(stoker_producer_client *pc, uint64_t first_seq, int rv)
{
    retention_forget_from(pc->kept, first_seq);
    pc->next_seq = first_seq;
    return rv;
}

// Pushes chunk while the previous push may still be in flight: retains it, sends it on the
// push stream from the retained copy, then reads the previous one's answer (settle). Returns
// NOT_SENT when it could not be retained (nothing changed), else STOKER_OK or an error as for
// push.
static int
push_flying(stoker_producer_client *pc, const stoker_chunk *chunk, uint64_t first_seq,
            stoker_chunk *owned)
{
    uint32_t count = chunk->count;
    uint64_t end = first_seq + count;
    nng_msg_free(take_prepared(pc, first_seq, count)); // encoded for the socket: not needed
    if (keep(pc, chunk, first_seq, owned, 1) != STOKER_OK)
        return NOT_SENT;
    const stoker_chunk *held = retention_find(pc->kept, first_seq, &(uint64_t){0}, &(int){0});
    stoker_request req = {
        .method = STOKER_PUSH, .session = pc->opts.session, .first_seq = first_seq, .chunk = *held};
    describe_push(pc, &req);
    pc->next_seq = end;
    uint32_t id;
    char err[256];
    session_sent(&pc->session);
    int rv = push_stream_send(&pc->ps, &req, pc->opts.request_timeout_ms, &pc->stop, &id, err,
                              sizeof(err));
    if (rv == STOKER_INTERRUPTED)
        return take_back(pc, first_seq, rv);
    int sent = rv == STOKER_OK;
    if (!sent && rv != PUSH_STREAM_UNUSED)
        conn_copy_str(pc->error, sizeof(pc->error), err);
    uint64_t stream = push_stream_conn(&pc->ps);
    if ((rv = settle(pc)) != STOKER_OK)
        return take_back(pc, first_seq, rv);
    if (sent && pc->broker_seq == first_seq && push_stream_conn(&pc->ps) == stream) {
        pc->flying.on = 1;
        pc->flying.id = id;
        pc->flying.stream = stream;
        pc->flying.first = first_seq;
        pc->flying.count = count;
        return STOKER_OK;
    }
    // Not in flight (the stream could not take it, or the push before it was pushed again and
    // this one with it): what the broker lacks is pushed now, one at a time, from retention; or
    // by the next hello, which finds it missing, when the connection is down.
    return pc->broker_seq < end ? replay_from(pc, 0) : STOKER_OK;
}

// A push without retention (a dataset's, or --retain 0) on the broker's host: by reference from
// a copy in the shared memory, whose region waits until its seqs are trained (the broker may
// read it until then, whatever the push's answer said). NOT_SENT when it cannot go so (not
// attached, too small, the memory full): nothing done.
static int
push_copy_by_reference(stoker_producer_client *pc, const stoker_chunk *chunk, uint64_t first_seq)
{
    uint64_t bytes = stoker_chunk_bytes(chunk, 0, chunk->count);
    stoker_chunk copy;
    uint8_t *region;
    if (pc->pool == NULL || push_pool_secret(pc->pool) == 0 || bytes < pc->pool_min ||
        push_pool_copy(pc->pool, chunk, &copy, &region) != STOKER_OK)
        return NOT_SENT;
    int rv = push_raw(pc, &copy, first_seq);
    push_pool_defer(pc->pool, region, first_seq + chunk->count);
    return rv;
}

// Push (stoker_producer_client_push); owned, when not NULL, is chunk itself with its buffers
// the caller's to give: retention then keeps them instead of a copy.
static int
push_keeping(stoker_producer_client *pc, const stoker_chunk *chunk, uint64_t first_seq,
             stoker_chunk *owned)
{
    if (!stoker_schema_equal(&chunk->schema, &pc->schema) || chunk->count == 0 ||
        first_seq != pc->next_seq)
        return STOKER_INVALID;
    int rv;
    if (pc->kept == NULL)
        return (rv = push_copy_by_reference(pc, chunk, first_seq)) != NOT_SENT
                   ? rv
                   : push_raw(pc, chunk, first_seq);
    if (producer_known(pc) && (rv = wait_room(pc, chunk->count)) != STOKER_OK)
        return rv;
    if (can_fly(pc) && (rv = push_flying(pc, chunk, first_seq, owned)) != NOT_SENT)
        return rv;
    // On the broker's host a large chunk is retained first (in the shared memory) and pushed
    // from there, by reference: no copy is sent and none made after.
    const stoker_chunk *send = chunk;
    if (retention_would_pool(pc->kept, chunk) && keep(pc, chunk, first_seq, NULL, 1) == STOKER_OK) {
        send = retention_find(pc->kept, first_seq, &(uint64_t){0}, &(int){0});
        if (send == NULL || !retention_pooled(pc->kept, send)) {
            retention_forget_from(pc->kept, first_seq);
            send = chunk;
        }
    }
    for (;;) {
        if ((rv = replay(pc)) != STOKER_OK)
            break;
        rv = push_raw(pc, send, first_seq);
        if (rv != NEED_REPLAY)
            break;
    }
    if (send != chunk) // retained already: taken back when the push failed
        return rv == STOKER_OK ? STOKER_OK : take_back(pc, first_seq, rv);
    if (rv != STOKER_OK)
        return rv;
    keep(pc, chunk, first_seq, owned, 0);
    return STOKER_OK;
}

int
stoker_producer_client_push(stoker_producer_client *pc, const stoker_chunk *chunk,
                            uint64_t first_seq)
{
    return push_keeping(pc, chunk, first_seq, NULL);
}

int
stoker_producer_client_push_owned(stoker_producer_client *pc, stoker_chunk *chunk,
                                  uint64_t first_seq)
{
    return push_keeping(pc, chunk, first_seq, chunk->owns_data ? chunk : NULL);
}

int
stoker_producer_client_drain(stoker_producer_client *pc, uint32_t timeout_ms)
{
    if (pc->kept == NULL)
        return STOKER_OK;
    // Nothing more is pushed: the push in flight is answered first, then every heartbeat says
    // so (after poll_trained's replay of what the broker lacks), so that a group over this
    // producer forms its last, short step now, not after the linger.
    (void)settle(pc);
    atomic_store(&pc->done_making, 1);
    uint64_t deadline = stoker_now_ms() + timeout_ms;
    uint32_t nap = 1;
    for (;;) {
        retention_release(pc->kept, atomic_load(&pc->trained));
        if (retention_examples(pc->kept) == 0)
            return STOKER_OK;
        if (producer_stopped(pc))
            return STOKER_INTERRUPTED;
        if (stoker_now_ms() >= deadline)
            return STOKER_TIMEOUT;
        uint64_t before = atomic_load(&pc->trained);
        int polled = poll_trained(pc);
        if ((polled == STOKER_CONNECTION || polled == STOKER_TIMEOUT) &&
            producer_keep_waiting(pc) != STOKER_OK)
            return STOKER_CONNECTION; // said: no broker to report anything trained
        if (polled != STOKER_OK && !producer_transient(polled))
            return polled; // a refusal: waiting longer changes nothing
        if (polled != STOKER_OK)
            nap = 50;
        nap = atomic_load(&pc->trained) > before ? 1 : (nap < 50 ? nap * 2 : 50);
        stoker_sleep_ms(nap, pc->opts.stop);
    }
}
int
stoker_producer_client_goodbye(stoker_producer_client *pc)
{
    uint64_t give_up = stoker_now_ms() + 2000;
    // The push in flight is answered first, and what the broker lacks pushed again, so that
    // goodbye's answer counts it (on a stop: abandoned after the grace; the answer says).
    int rv = settle(pc);
    if (rv == STOKER_OK && pc->kept != NULL && pc->broker_seq < pc->next_seq) {
        if (producer_known(pc) || producer_hello_once(pc, &pc->stop, UINT64_MAX) == STOKER_OK)
            replay_from(pc, 0);
    }
    for (;;) {
        stoker_request req = {.method = STOKER_GOODBYE, .session = pc->opts.session};
        stoker_reply *rep = NULL;
        char err[256];
        rv = conn_call(pc->push_ctx, &req, 1000, &rep, err, sizeof(err));
        if (rv == STOKER_OK) {
            rv = rep->code;
            if (rv != STOKER_OK)
                conn_copy_str(pc->error, sizeof(pc->error), rep->message);
            else
                pc->next_seq = rep->acked_through; // where the broker says the session ends
            stoker_reply_free(rep);
            if (rv == STOKER_UNKNOWN_PEER &&
                producer_hello_once(pc, NULL, UINT64_MAX) == STOKER_OK) {
                replay(pc); // a restarted broker gets what it lost before the goodbye
                continue;
            }
            return rv;
        }
        conn_copy_str(pc->error, sizeof(pc->error), err);
        if (stoker_now_ms() >= give_up)
            return rv;
        stoker_sleep_ms(50, NULL);
    }
}
