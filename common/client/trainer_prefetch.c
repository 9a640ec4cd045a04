// The trainer client's pulls in flight (trainer_impl.h): `prefetch` pull requests kept in flight
// on their own contexts, so a batch is usually waiting when a training step ends. nng completes
// each on its own threads (slot_cb), which queue the slot for the training thread; sending the
// next pulls is the issuer thread's job (it was a tenth of a millisecond per batch of the
// training thread's time: encoding and the socket write). Also the bookkeeping of pulls whose
// replies were lost, and of a group rank's replies that overtook an earlier step's.
#include <string.h>

#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "trainer_impl.h"

static void
slot_cb(void *arg)
{
    slot *s = arg;
    stoker_trainer_client *tc = s->tc;
    int rv = nng_aio_result(s->aio);
    pthread_mutex_lock(&tc->lock);
    if (tc->closing) {
        // stoker_trainer_client_destroy is stopping the aios: start nothing new.
        if (s->state == SLOT_SENDING)
            nng_msg_free(nng_aio_get_msg(s->aio));
        else if (rv == 0)
            nng_msg_free(nng_aio_get_msg(s->aio));
        nng_aio_set_msg(s->aio, NULL);
        s->state = SLOT_IDLE;
        pthread_mutex_unlock(&tc->lock);
        return;
    }
    if (s->state == SLOT_SENDING && rv == 0) {
        s->state = SLOT_RECEIVING;
        pthread_mutex_unlock(&tc->lock);
        nng_ctx_recv(s->ctx, s->aio);
        return;
    }
    if (s->state == SLOT_SENDING)
        nng_msg_free(nng_aio_get_msg(s->aio));
    s->sent = s->state == SLOT_RECEIVING;
    s->result = rv;
    s->reply = rv == 0 ? nng_aio_get_msg(s->aio) : NULL;
    nng_aio_set_msg(s->aio, NULL);
    s->state = SLOT_DONE;
    tc->done[(tc->done_head + tc->done_len) % MAX_PREFETCH] = (uint32_t)(s - tc->slots);
    tc->done_len++;
    pthread_cond_signal(&tc->cond);
    pthread_mutex_unlock(&tc->lock);
}

// Starts a pull on an idle slot, carrying the pending acknowledgements.
static void
issue(stoker_trainer_client *tc, slot *s)
{
    stoker_request req = {
        .method = STOKER_PULL,
        .session = tc->opts.client.session,
        .max_examples = tc->opts.batch_size,
        .wait_ms = tc->wait_ms,
        .arena_secret = tc->arena_secret,
    };
    uint64_t since = atomic_load(&tc->waiting_since_ms), now = stoker_now_ms();
    req.data_wait_ms = atomic_load(&tc->waited_ms) + (since != 0 && now > since ? now - since : 0);
    s->n_acks = tc->n_pending_acks;
    memcpy(s->acks, tc->pending_acks, s->n_acks * sizeof(uint64_t));
    tc->n_pending_acks = 0;
    req.n_acks = s->n_acks;
    req.acks = s->acks;
    s->pull_id = ++tc->next_pull_id;
    s->n_lost = tc->n_lost;
    memcpy(s->lost, tc->lost, s->n_lost * sizeof(uint64_t));
    tc->n_lost = 0;
    req.pull_id = s->pull_id;
    req.n_replaces = s->n_lost;
    req.replaces = s->lost;
    nng_msg *msg;
    if (stoker_wire_encode_request(&req, &msg) != STOKER_OK) {
        // Out of memory: leave the slot idle and the acks pending; the next call retries.
        memcpy(tc->pending_acks, s->acks, s->n_acks * sizeof(uint64_t));
        tc->n_pending_acks = s->n_acks;
        s->n_acks = 0;
        memcpy(tc->lost, s->lost, s->n_lost * sizeof(uint64_t));
        tc->n_lost = s->n_lost;
        s->n_lost = 0;
        return;
    }
    s->state = SLOT_SENDING;
    nng_aio_set_msg(s->aio, msg);
    nng_ctx_send(s->ctx, s->aio);
}

// The issuer thread: sends a pull on every idle slot when next() asks, until destroy.
static void *
issuer_main(void *arg)
{
    stoker_trainer_client *tc = arg;
    pthread_mutex_lock(&tc->lock);
    for (;;) {
        while (!tc->issue_requested && !tc->closing)
            pthread_cond_wait(&tc->issue_cond, &tc->lock);
        if (tc->closing)
            break;
        // Once the supply ended only a pull that names lost ones goes out: it may bring back a
        // batch the broker leased us while we could not take it.
        for (uint32_t i = 0; i < tc->n_slots; i++) {
            if (tc->slots[i].state == SLOT_IDLE && (!tc->ending || tc->n_lost > 0))
                issue(tc, &tc->slots[i]);
        }
        tc->issue_requested = 0;
        pthread_cond_broadcast(&tc->cond); // for wait_issued
    }
    pthread_mutex_unlock(&tc->lock);
    return NULL;
}

// Waits until the pulls next() asked for are sent, so that a status request made after them
int
trainer_prefetch_open(stoker_trainer_client *tc)
{
    tc->n_slots = tc->opts.prefetch;
    for (uint32_t i = 0; i < tc->n_slots; i++) {
        slot *s = &tc->slots[i];
        s->tc = tc;
        int rv;
        if ((rv = nng_ctx_open(&s->ctx, tc->session.conn.sock)) != 0 ||
            (rv = nng_aio_alloc(&s->aio, slot_cb, s)) != 0)
            return stoker_err_from_nng(rv);
        nng_aio_set_timeout(s->aio,
                            (nng_duration)(tc->wait_ms + tc->opts.client.request_timeout_ms));
    }
    return STOKER_OK;
}

int
trainer_prefetch_start(stoker_trainer_client *tc)
{
    if (pthread_create(&tc->issuer, NULL, issuer_main, tc) != 0)
        return STOKER_NOMEM;
    tc->issuer_started = 1;
    return STOKER_OK;
}

void
trainer_prefetch_stop(stoker_trainer_client *tc)
{
    // Stop the pulls in flight before the socket closes, so no callback runs (and restarts an
    // operation) while nng tears the contexts down.
    pthread_mutex_lock(&tc->lock);
    tc->closing = 1;
    pthread_cond_signal(&tc->issue_cond);
    pthread_mutex_unlock(&tc->lock);
    if (tc->issuer_started)
        pthread_join(tc->issuer, NULL);
    tc->issuer_started = 0;
    for (uint32_t i = 0; i < tc->n_slots; i++) {
        if (tc->slots[i].aio != NULL)
            nng_aio_stop(tc->slots[i].aio);
    }
}

void
trainer_prefetch_free(stoker_trainer_client *tc)
{
    for (uint32_t i = 0; i < tc->n_slots; i++) {
        nng_msg_free(tc->slots[i].reply);
        tc->slots[i].reply = NULL;
        if (tc->slots[i].aio != NULL) // a create that failed midway made only some
            nng_aio_free(tc->slots[i].aio);
        tc->slots[i].aio = NULL;
    }
    for (uint32_t i = 0; i < tc->n_early; i++)
        stoker_reply_free(tc->early[i]);
    tc->n_early = 0;
}

uint32_t
trainer_prefetch_ask(stoker_trainer_client *tc)
{
    uint32_t busy = 0, idle = 0;
    for (uint32_t i = 0; i < tc->n_slots; i++) {
        if (tc->slots[i].state != SLOT_IDLE)
            busy++;
        else if (!tc->ending || tc->n_lost > 0)
            idle++;
    }
    if (idle > 0) {
        // The issuer sends them; the training thread goes on to wait for a reply.
        tc->issue_requested = 1;
        pthread_cond_signal(&tc->issue_cond);
    }
    return busy + idle;
}

void
trainer_wait_issued(stoker_trainer_client *tc)
{
    pthread_mutex_lock(&tc->lock);
    while (tc->issue_requested && !tc->closing)
        pthread_cond_wait(&tc->cond, &tc->lock);
    pthread_mutex_unlock(&tc->lock);
}

static void
requeue_acks(stoker_trainer_client *tc, slot *s)
{
    for (uint32_t i = 0; i < s->n_acks && tc->n_pending_acks < MAX_ACKS; i++)
        tc->pending_acks[tc->n_pending_acks++] = s->acks[i];
    s->n_acks = 0;
}

// Remembers lost pull id for the next pull to name (see MAX_LOST); the oldest goes when full.
static void
add_lost(stoker_trainer_client *tc, uint64_t id)
{
    if (tc->n_lost == MAX_LOST) {
        memmove(&tc->lost[0], &tc->lost[1], (MAX_LOST - 1) * sizeof(uint64_t));
        tc->n_lost--;
    }
    tc->lost[tc->n_lost++] = id;
}

void
trainer_prefetch_failed(stoker_trainer_client *tc, slot *s)
{
    // The request or its connection failed: the broker returns leases of a closed connection to
    // their queues, so re-sending our acks can only be refused, never lose anything. A pull that
    // reached the socket may have been answered with a lease we will never read (nng drops a
    // reply that comes after the request timed out): the next pull names it, and the broker
    // sends that lease again.
    requeue_acks(tc, s);
    for (uint32_t i = 0; i < s->n_lost; i++)
        add_lost(tc, s->lost[i]);
    s->n_lost = 0;
    if (s->sent && s->result == NNG_ETIMEDOUT)
        add_lost(tc, s->pull_id);
}

// Slot s's pull was answered: the lost pulls it named are settled, except, when the broker sent
// one of their leases again (resent), the others, which may hold leases too: the next pull names
// them again. Under lock.
void
trainer_settle_lost(stoker_trainer_client *tc, slot *s, uint64_t resent)
{
    for (uint32_t i = 0; resent != 0 && i < s->n_lost; i++) {
        if (s->lost[i] != resent)
            add_lost(tc, s->lost[i]);
    }
    s->n_lost = 0;
}

// The steps taken so far: a rank's, or a mixture's numbered batches.
static uint64_t
steps_taken(const stoker_trainer_client *tc)
{
    return tc->group[0] != '\0' ? tc->group_steps : tc->mix_steps;
}

// Keeps rep for later when it is a rank's batch of a step beyond the next one (the earlier
// step's reply is still on its way), or a mixture's batch beyond the next, and there is room;
// 1 when kept.
int
trainer_keep_early(stoker_trainer_client *tc, stoker_reply *rep, uint32_t pipe)
{
    if ((tc->group[0] == '\0' && tc->opts.mix.n == 0) || rep->code != STOKER_OK ||
        rep->chunk.count == 0 || rep->group_step <= steps_taken(tc) + 1 ||
        tc->n_early == MAX_PREFETCH)
        return 0;
    tc->early_pipe[tc->n_early] = pipe;
    tc->early[tc->n_early++] = rep;
    return 1;
}

// Whether rep is a batch that came on a connection that closed since (conn_reply_stale): the
// broker took it back (a lost connection's leases go to other trainers; a broker that died has
// its producers push them again, and what we train before our hello there would not be in the
// hello's report), so it is not trained; its events still count. Frees rep when it says so.
int
trainer_stale_batch(stoker_trainer_client *tc, stoker_reply *rep, uint32_t pipe)
{
    if (rep->code != STOKER_OK || rep->chunk.count == 0 || pipe == 0 ||
        pipe == atomic_load(&tc->session.conn.live_pipe))
        return 0;
    trainer_take_extras(tc, rep);
    stoker_info("trainer: batch of lease %llu (%u examples) came on a connection that closed "
                "since: not trained (the broker hands its examples out again)",
                (unsigned long long)rep->lease, rep->chunk.count);
    stoker_reply_free(rep);
    return 1;
}

// The kept reply whose step is next, or NULL; with none of them next while every pull in flight
// came back (a step's reply lost for good), the earliest, so nothing waits for it forever.
stoker_reply *
trainer_take_early(stoker_trainer_client *tc, uint32_t *pipe)
{
    if (tc->n_early == 0)
        return NULL;
    uint32_t best = 0;
    for (uint32_t i = 1; i < tc->n_early; i++)
        if (tc->early[i]->group_step < tc->early[best]->group_step)
            best = i;
    if (tc->early[best]->group_step != steps_taken(tc) + 1) {
        int waiting = 0;
        pthread_mutex_lock(&tc->lock);
        for (uint32_t i = 0; i < tc->n_slots; i++)
            waiting += tc->slots[i].state != SLOT_IDLE;
        pthread_mutex_unlock(&tc->lock);
        if (waiting > 0)
            return NULL;
    }
    stoker_reply *rep = tc->early[best];
    *pipe = tc->early_pipe[best];
    tc->n_early--;
    tc->early[best] = tc->early[tc->n_early];
    tc->early_pipe[best] = tc->early_pipe[tc->n_early];
    return rep;
}

// Before the goodbye: waits (at most a pull's wait at the broker, plus a little) until the pulls
// in flight that carry acknowledgements are answered, which tells that the broker applied them.
// It handles a connection's requests on parallel contexts, so such a pull could otherwise reach
// it after the goodbye, when it has already handed those leases to other trainers.
void
trainer_wait_inflight_acks(stoker_trainer_client *tc)
{
    uint64_t deadline = stoker_now_ms() + tc->wait_ms + 200;
    pthread_mutex_lock(&tc->lock);
    for (;;) {
        int carrying = 0;
        for (uint32_t i = 0; i < tc->n_slots; i++) {
            const slot *s = &tc->slots[i];
            carrying |= (s->state == SLOT_SENDING || s->state == SLOT_RECEIVING) && s->n_acks > 0;
        }
        if (!carrying || stoker_now_ms() >= deadline || session_unreachable(&tc->session))
            break;
        session_cond_wait_ms(&tc->cond, &tc->lock, 10);
    }
    pthread_mutex_unlock(&tc->lock);
}
