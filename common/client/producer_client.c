// Producer client: hello / push / heartbeat / goodbye over one REQ socket with three contexts
// (the pushing thread's, the heartbeat thread's, and a dataset's shard requests made ahead on
// the generating thread). The seq rule makes every resend safe. Pushes themselves go over a
// connection of their own when the URL allows (push_stream.h: no copy of the chunk), else, and
// whenever that connection fails, over the socket.
// A stop (opts.stop) gives the pushes STOP_GRACE_MS: a push the broker can take is answered in
// that time; one parked for room (queue full) or sent to a broker that is gone is abandoned, and
// goodbye's answer then says where the session ended.
// On the broker's host (the broker offers its arena socket in the hello reply) the retained
// copies of large chunks live in shared memory handed to the broker (push_pool.h) and pushes
// carry only where they are: the broker reads the examples in place (STOKER_SHM=0: bytes).
// Retention: a copy of every pushed chunk is kept (retention.c) until the broker reports its
// examples trained (trained_through in push, heartbeat and hello replies); a full buffer makes
// push wait (backpressure). A hello that finds a broker holding less of the session than was
// pushed (a restarted broker) is followed by pushing the retained chunks again from there.
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "push_pool.h"
#include "push_stream.h"
#include "retention.h"
#include "session.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/producer_client.h"
#include "stoker/rng.h"

#define STOP_GRACE_MS 40

struct stoker_producer_client {
    stoker_client_options opts;
    char url[512];
    char name[STOKER_NAME_MAX];
    char autoscale_pool[STOKER_NAME_MAX]; // its autoscale pool (empty: the broker's "default")
    char token[STOKER_TOKEN_MAX];
    stoker_schema schema;
    session session; // the socket, hello, heartbeats, the broker's presence (session.h)
    nng_ctx push_ctx;
    nng_ctx shard_ctx; // stoker_producer_client_shard_ahead's, while the pusher uses push_ctx
    push_stream ps;    // pushes from the chunks' own buffers (push_stream.h); the pusher's
    uint64_t next_seq;
    conn_stop stop; // the pushing thread's: opts.stop with STOP_GRACE_MS
    char error[STOKER_MESSAGE_MAX];

    _Atomic uint32_t max_chunk; // examples one push may carry, from the hello; 0: not said
    _Atomic int done_making;    // draining: heartbeats say it pushes nothing more
    _Atomic uint64_t make_us;   // spent making examples (stoker_producer_client_add_make_us)

    // A dataset's producer (stoker_producer_client_set_dataset): said in hello; the items of
    // the push in progress (stoker_producer_client_push_items), NULL for a stream's.
    uint64_t dataset_size, dataset_fingerprint;
    const uint64_t *push_items;
    uint64_t push_shard;         // the shard push_items belong to
    const stoker_labels *labels; // said in hello (stoker_producer_client_set_labels); borrowed
    // Retention (the pushing thread's, but trained, which the heartbeat thread raises too).
    retention *kept; // NULL when off
    // Pushes by reference (push_pool.h): the pool, made at the first hello that offers it;
    // shm 0 when STOKER_SHM=0 (never asked); pool_said: the path was logged.
    push_pool *pool;
    int shm, pool_said;
    uint64_t pool_min;          // pushes of fewer bytes go as bytes (STOKER_SHM_PUSH_MIN)
    _Atomic uint32_t retain;    // bound in examples; STOKER_RETAIN_AUTO until the hello
    int retain_auto;            // retain follows the broker's queue depth (no --retain N)
    _Atomic uint64_t trained;   // seqs below it are trained (the broker said so)
    uint64_t broker_seq;        // the broker's next seq for us, from its last answer
    int full_logged;            // "retention full" said for this wait
    uint64_t replays, replayed; // pushes again to a broker that lost them, and their examples
    // Two pushes in flight (stoker_producer_client_set_pipelined): the one sent on the push
    // stream whose reply is not read yet. It is retained, and pc->next_seq is past it already.
    int pipelined;
    struct {
        int on;
        uint32_t id;
        uint64_t stream; // the push stream's connection it went out on (push_stream.h: conns)
        uint64_t first;
        uint32_t count;
    } flying;
    // Pushes encoded ahead of time on the generating thread (stoker_producer_client_prepare),
    // taken by the push of the same seqs; prepare and push run on different threads.
    pthread_mutex_t prepared_lock;
    struct {
        nng_msg *msg; // NULL: free slot
        uint64_t first_seq;
        uint32_t count;
    } prepared[2];
};

#define RETAIN_FALLBACK 1024 // examples, when the broker does not tell its queue depth

// With the default retention, follows the broker's current queue depth (it sizes its queues
// from the trainers' batches): twice it, so the broker's queue, not retention, stays the bound.
static void
note_depth(stoker_producer_client *pc, uint32_t depth)
{
    if (!pc->retain_auto)
        return;
    atomic_store(&pc->retain, depth == 0               ? (uint32_t)RETAIN_FALLBACK
                              : depth > UINT32_MAX / 4 ? UINT32_MAX - 1
                                                       : 2 * depth);
}

// Raises trained to through (never lowers it; the heartbeat thread may race the pusher).
static void
note_trained(stoker_producer_client *pc, uint64_t through)
{
    uint64_t cur = atomic_load(&pc->trained);
    while (through > cur && !atomic_compare_exchange_weak(&pc->trained, &cur, through))
        ;
}

static int
stopped(const stoker_producer_client *pc)
{
    return pc->opts.stop != NULL && *pc->opts.stop;
}

static void
backoff(stoker_producer_client *pc, uint32_t *delay_ms)
{
    stoker_sleep_ms(*delay_ms, pc->opts.stop);
    *delay_ms =
        *delay_ms * 2 > pc->opts.reconnect_max_ms ? pc->opts.reconnect_max_ms : *delay_ms * 2;
}

// Whether the broker took our hello and has not said since that it forgot us.
static int
known(const stoker_producer_client *pc)
{
    return atomic_load(&((stoker_producer_client *)pc)->session.known);
}

static uint64_t
retained_now(const stoker_producer_client *pc)
{
    return pc->kept != NULL ? retention_examples(pc->kept) : 0;
}

// A request of the pushing thread found no broker: STOKER_OK while it may wait on for one
// (--broker-wait from its last answer), else STOKER_CONNECTION, said (session_keep_waiting).
static int
keep_waiting(stoker_producer_client *pc)
{
    return session_keep_waiting(&pc->session, pc->error, retained_now(pc));
}

static void
beat_fill(void *owner, stoker_request *req)
{
    stoker_producer_client *pc = owner;
    req->done_making = atomic_load(&pc->done_making);
}

// A heartbeat's answer: what is trained, and the broker's queue depth (session.h session_beat).
static void
beat_answered(void *owner, session *s, const stoker_reply *rep, uint32_t timeout_ms,
              conn_stop *stop)
{
    (void)s, (void)timeout_ms, (void)stop;
    stoker_producer_client *pc = owner;
    if (rep->code == STOKER_OK) {
        note_trained(pc, rep->trained_through);
        if (rep->queue_depth > 0)
            note_depth(pc, rep->queue_depth);
    }
}

int
stoker_producer_client_create(const stoker_client_options *opts, const stoker_schema *schema,
                              stoker_producer_client **out)
{
    char err[256];
    int rv;
    if (opts->url == NULL || stoker_schema_validate(schema, err, sizeof(err)) != STOKER_OK)
        return STOKER_INVALID;
    stoker_producer_client *pc = calloc(1, sizeof(*pc));
    if (pc == NULL)
        return STOKER_NOMEM;
    pc->opts = *opts;
    conn_copy_str(pc->url, sizeof(pc->url), opts->url);
    conn_copy_str(pc->name, sizeof(pc->name), opts->name != NULL ? opts->name : "producer");
    conn_copy_str(pc->token, sizeof(pc->token), opts->token);
    conn_copy_str(pc->autoscale_pool, sizeof(pc->autoscale_pool),
                  opts->pool != NULL ? opts->pool : "");
    pc->opts.pool = pc->autoscale_pool;
    pc->opts.url = pc->url;
    pc->opts.name = pc->name;
    pc->opts.token = pc->token;
    if (pc->opts.session == 0)
        pc->opts.session = stoker_random_u64();
    pc->schema = *schema;
    pc->stop.flag = opts->stop;
    pc->stop.grace_ms = STOP_GRACE_MS;
    pc->stop.conn = &pc->session.conn; // a TLS failure ends the pushing thread's waits (STOKER_TLS)
    pc->retain = STOKER_RETAIN_AUTO;
    pc->retain_auto = 1;
    const char *shm = getenv("STOKER_SHM");
    pc->shm = shm == NULL || strcmp(shm, "0") != 0;
    const char *min = getenv("STOKER_SHM_PUSH_MIN");
    pc->pool_min = min != NULL && *min != '\0' ? strtoull(min, NULL, 10) : PUSH_POOL_MIN;
    if ((pc->kept = retention_create()) == NULL) {
        free(pc);
        return STOKER_NOMEM;
    }
    pthread_mutex_init(&pc->prepared_lock, NULL);
    char who[STOKER_NAME_MAX + 16];
    snprintf(who, sizeof(who), "producer '%s'", pc->name);
    if ((rv = session_open(&pc->session, &pc->opts, who, err, sizeof(err))) != STOKER_OK) {
        stoker_error("producer: %s", err);
        goto fail_conn;
    }
    if ((rv = nng_ctx_open(&pc->push_ctx, pc->session.conn.sock)) != 0 ||
        (rv = nng_ctx_open(&pc->shard_ctx, pc->session.conn.sock)) != 0) {
        rv = stoker_err_from_nng(rv);
        goto fail_ctx;
    }
    push_stream_init(&pc->ps, pc->url, opts->max_message_bytes, pc->token, pc->opts.session);
    // Heartbeats only while nothing else tells the broker we live, and only once it knows us.
    session_beat beat = {.fill = beat_fill, .answered = beat_answered, .owner = pc};
    if ((rv = session_start_heartbeat(&pc->session, &beat)) != STOKER_OK)
        goto fail_ctx;
    *out = pc;
    return STOKER_OK;

fail_ctx:
    push_stream_close(&pc->ps);
    session_close(&pc->session);
fail_conn:
    pthread_mutex_destroy(&pc->prepared_lock);
    retention_destroy(pc->kept);
    free(pc);
    return rv;
}

// After a hello: hands our shared memory to the broker when it offers its arena socket (it is
// on our host), else forgets the last broker's secret; pushes go as bytes until it is taken.
static void
attach_pool(stoker_producer_client *pc, const stoker_reply *rep)
{
    if (rep->arena_socket[0] == '\0' || rep->arena_ticket == 0) {
        if (pc->pool != NULL)
            push_pool_detach(pc->pool); // a secret is one broker's
        return;
    }
    if (pc->pool != NULL && push_pool_attached_to(pc->pool, rep->arena_socket))
        return; // the same broker: the secret it gave stays good
    char err[256];
    int rv = STOKER_OK;
    if (pc->pool == NULL &&
        (rv = push_pool_create(PUSH_POOL_BYTES, &pc->pool, err, sizeof(err))) == STOKER_OK &&
        pc->kept != NULL)
        retention_set_pool(pc->kept, pc->pool, pc->pool_min);
    if (rv == STOKER_OK)
        rv = push_pool_attach(pc->pool, rep->arena_socket, rep->arena_ticket,
                              pc->opts.request_timeout_ms, err, sizeof(err));
    if (rv == STOKER_OK && !pc->pool_said) {
        stoker_info("producer '%s': on the broker's host: pushes of %llu bytes or more go by "
                    "reference through shared memory",
                    pc->name, (unsigned long long)pc->pool_min);
        pc->pool_said = 1;
    } else if (rv != STOKER_OK && pc->pool_said != 2) {
        stoker_info("producer '%s': pushes go as bytes: %s", pc->name, err);
        pc->pool_said = 2;
    }
}

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

// One hello attempt. Returns STOKER_OK, a refusal code (final), a transport code (retry), or
// STOKER_INTERRUPTED when stop (may be NULL) abandoned it.
// at: the seq to announce (UINT64_MAX: the oldest kept, else the next).
static int
hello_once(stoker_producer_client *pc, conn_stop *stop, uint64_t at)
{
    // A broker that does not know us starts where our retained (untrained) examples do: the
    // oldest retained chunk, less what is trained at its head (a chunk is released only once
    // all of it is trained, and sized chunks hold thousands), so that a restarted broker takes
    // us as returning and gets no trained example again.
    uint64_t from = pc->next_seq;
    if (pc->kept != NULL) {
        uint64_t trained = atomic_load(&pc->trained);
        from = retention_oldest(pc->kept, pc->next_seq);
        if (trained > from && trained <= pc->next_seq)
            from = trained;
    }
    stoker_request req = {
        .role = STOKER_ROLE_PRODUCER,
        .has_schema = 1,
        .schema = pc->schema,
        .next_seq = at != UINT64_MAX ? at : from,
        .dataset_size = pc->dataset_size,
        .dataset_fingerprint = pc->dataset_fingerprint,
        .want_arena = pc->shm,
    };
    if (pc->labels != NULL)
        req.labels = *pc->labels; // borrowed for the encoding
    conn_copy_str(req.pool, sizeof(req.pool), pc->autoscale_pool);
    stoker_reply *rep = NULL;
    char err[STOKER_MESSAGE_MAX];
    int rv = session_hello(&pc->session, pc->push_ctx, &req, pc->opts.request_timeout_ms, stop,
                           &rep, err, sizeof(err));
    if (rep == NULL) {
        conn_copy_str(pc->error, sizeof(pc->error), err);
        return rv;
    }
    if (rv == STOKER_OK) {
        atomic_store(&pc->max_chunk, rep->max_chunk);
        note_trained(pc, rep->trained_through);
        pc->broker_seq = rep->next_seq;
        // The default: the broker's queue for us plus as much again in flight or awaiting the
        // report that it was trained, so the broker's queue, not retention, stays the bound.
        note_depth(pc, rep->queue_depth);
        if (rep->next_seq > pc->next_seq) {
            // The broker holds more of our session than we remember (we lost state): continue
            // after what it holds rather than collide with it.
            stoker_warn("producer '%s': broker holds up to seq %llu, skipping ahead", pc->name,
                        (unsigned long long)rep->next_seq);
            pc->next_seq = rep->next_seq;
        }
        pc->error[0] = '\0';
        attach_pool(pc, rep);
        push_stream_set_intake(&pc->ps, rep->intake_port);
    } else {
        conn_copy_str(pc->error, sizeof(pc->error), rep->message);
    }
    stoker_reply_free(rep);
    return rv;
}

static int
transient(int rv)
{
    return rv == STOKER_TIMEOUT || rv == STOKER_CONNECTION || rv == STOKER_CLOSED ||
           rv == STOKER_RETRY || rv == STOKER_UNKNOWN_PEER;
}

int
stoker_producer_client_hello(stoker_producer_client *pc)
{
    uint32_t delay = 10;
    for (;;) {
        if (stopped(pc))
            return STOKER_INTERRUPTED;
        int rv = hello_once(pc, &pc->stop, UINT64_MAX);
        if (!transient(rv))
            return rv;
        if ((rv == STOKER_CONNECTION || rv == STOKER_TIMEOUT) && keep_waiting(pc) != STOKER_OK)
            return STOKER_CONNECTION;
        backoff(pc, &delay);
    }
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
    if (rep->acked_through > pc->next_seq)
        pc->next_seq = rep->acked_through;
    note_trained(pc, rep->trained_through);
    if (pc->pool != NULL)
        push_pool_trained(pc->pool, atomic_load(&pc->trained));
    if (rep->queue_depth > 0)
        note_depth(pc, rep->queue_depth);
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
        if (stopped(pc)) {
            uint64_t now = stoker_now_ms();
            if (pc->stop.seen_ms == 0)
                pc->stop.seen_ms = now;
            if (now >= pc->stop.seen_ms + pc->stop.grace_ms)
                return STOKER_INTERRUPTED;
        }
        int rv;
        if (!known(pc)) {
            rv = hello_once(pc, &pc->stop, UINT64_MAX);
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
            if (stopped(pc))
                return STOKER_INTERRUPTED; // no room, and no reason to wait for it any more
            continue;                      // the broker already waited for room
        }
        if (rv == STOKER_UNKNOWN_PEER) {
            session_forget(&pc->session);
            continue;
        }
    failed:
        if (!transient(rv))
            return rv;
        if (rv == STOKER_CONNECTION || rv == STOKER_TIMEOUT) {
            session_forget(&pc->session); // a new connection may be a new broker: say hello again
            if (keep_waiting(pc) != STOKER_OK)
                return STOKER_CONNECTION;
        }
        backoff(pc, &delay);
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
    while (pc->kept != NULL && known(pc) && pc->broker_seq < pc->next_seq) {
        uint64_t first;
        int hole;
        const stoker_chunk *c = retention_find(pc->kept, pc->broker_seq, &first, &hole);
        if (c == NULL)
            break; // not ours to give (never retained): the broker's seq rule decides
        if (hole) {
            // Trained already (acknowledged out of order): the broker skips these seqs.
            int rv = hello_once(pc, &pc->stop, first + c->count);
            if (rv != STOKER_OK && !transient(rv))
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
    if (!known(pc)) {
        int rv = hello_once(pc, &pc->stop, UINT64_MAX);
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
        note_trained(pc, rep->trained_through);
        if (rep->queue_depth > 0)
            note_depth(pc, rep->queue_depth);
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
        if (stopped(pc))
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
            keep_waiting(pc) != STOKER_OK)
            return STOKER_CONNECTION; // waited --broker-wait for a broker to train anything
        if (polled != STOKER_OK && !transient(polled))
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
    return pc->pipelined && pc->kept != NULL && pc->push_items == NULL && known(pc) &&
           !stopped(pc) && pc->broker_seq == (pc->flying.on ? pc->flying.first : pc->next_seq);
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
    if (known(pc) && (rv = wait_room(pc, chunk->count)) != STOKER_OK)
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
stoker_producer_client_set_retain(stoker_producer_client *pc, uint32_t examples)
{
    if (examples == 0) {
        retention_destroy(pc->kept);
        pc->kept = NULL;
    }
    pc->retain = examples;
    pc->retain_auto = examples == STOKER_RETAIN_AUTO;
    return STOKER_OK;
}

uint64_t
stoker_producer_client_retained(const stoker_producer_client *pc)
{
    return pc->kept != NULL ? retention_examples(pc->kept) : 0;
}

uint64_t
stoker_producer_client_trained_through(const stoker_producer_client *pc)
{
    return atomic_load(&((stoker_producer_client *)pc)->trained);
}

uint32_t
stoker_producer_client_retain(const stoker_producer_client *pc)
{
    return pc->kept != NULL ? pc->retain : 0;
}

int
stoker_producer_client_drain(stoker_producer_client *pc, uint32_t timeout_ms)
{
    if (pc->kept == NULL)
        return STOKER_OK;
    // Nothing more is pushed: the push in flight is answered first, then every heartbeat says
    // so (after poll_trained's replay of what the broker lacks), so that a group over this
    // producer forms its last, short step now, not after the linger (issue 26).
    (void)settle(pc);
    atomic_store(&pc->done_making, 1);
    uint64_t deadline = stoker_now_ms() + timeout_ms;
    uint32_t nap = 1;
    for (;;) {
        retention_release(pc->kept, atomic_load(&pc->trained));
        if (retention_examples(pc->kept) == 0)
            return STOKER_OK;
        if (stopped(pc))
            return STOKER_INTERRUPTED;
        if (stoker_now_ms() >= deadline)
            return STOKER_TIMEOUT;
        uint64_t before = atomic_load(&pc->trained);
        int polled = poll_trained(pc);
        if ((polled == STOKER_CONNECTION || polled == STOKER_TIMEOUT) &&
            keep_waiting(pc) != STOKER_OK)
            return STOKER_CONNECTION; // said: no broker to report anything trained
        if (polled != STOKER_OK && !transient(polled))
            return polled; // a refusal: waiting longer changes nothing
        if (polled != STOKER_OK)
            nap = 50;
        nap = atomic_load(&pc->trained) > before ? 1 : (nap < 50 ? nap * 2 : 50);
        stoker_sleep_ms(nap, pc->opts.stop);
    }
}

uint64_t
stoker_producer_client_next_seq(const stoker_producer_client *pc)
{
    return pc->next_seq;
}

uint64_t
stoker_producer_client_session(const stoker_producer_client *pc)
{
    return pc->opts.session;
}

uint32_t
stoker_producer_client_max_chunk(const stoker_producer_client *pc)
{
    return atomic_load(&((stoker_producer_client *)pc)->max_chunk);
}

uint32_t
stoker_producer_client_id(const stoker_producer_client *pc)
{
    return atomic_load(&((stoker_producer_client *)pc)->session.peer_id);
}

const char *
stoker_producer_client_error(const stoker_producer_client *pc)
{
    return pc->error;
}

void
stoker_producer_client_set_pipelined(stoker_producer_client *pc, int on)
{
    pc->pipelined = on != 0;
}

int
stoker_producer_client_goodbye(stoker_producer_client *pc)
{
    uint64_t give_up = stoker_now_ms() + 2000;
    // The push in flight is answered first, and what the broker lacks pushed again, so that
    // goodbye's answer counts it (on a stop: abandoned after the grace; the answer says).
    int rv = settle(pc);
    if (rv == STOKER_OK && pc->kept != NULL && pc->broker_seq < pc->next_seq) {
        if (known(pc) || hello_once(pc, &pc->stop, UINT64_MAX) == STOKER_OK)
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
            if (rv == STOKER_UNKNOWN_PEER && hello_once(pc, NULL, UINT64_MAX) == STOKER_OK) {
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

void
stoker_producer_client_destroy(stoker_producer_client *pc)
{
    if (pc == NULL)
        return;
    session_stop_heartbeat(&pc->session); // abandons a heartbeat in flight
    push_stream_close(&pc->ps);
    session_close(&pc->session);
    for (int i = 0; i < 2; i++)
        nng_msg_free(pc->prepared[i].msg);
    pthread_mutex_destroy(&pc->prepared_lock);
    retention_destroy(pc->kept); // before the pool its copies may live in
    push_pool_destroy(pc->pool);
    free(pc);
}

void
stoker_producer_client_set_labels(stoker_producer_client *pc, const stoker_labels *labels)
{
    pc->labels = labels;
}

// --- datasets -----------------------------------------------------------------------------------

void
stoker_producer_client_set_dataset(stoker_producer_client *pc, uint64_t n_items,
                                   uint64_t fingerprint)
{
    pc->dataset_size = n_items;
    pc->dataset_fingerprint = fingerprint;
}

int
stoker_producer_client_push_items(stoker_producer_client *pc, const stoker_chunk *chunk,
                                  uint64_t first_seq, const uint64_t *items, uint64_t shard)
{
    pc->push_items = items;
    pc->push_shard = shard;
    int rv = stoker_producer_client_push(pc, chunk, first_seq);
    pc->push_items = NULL;
    pc->push_shard = 0;
    return rv;
}

// Copies a SHARD reply's items (at most cap), seed and id to the caller.
static void
take_shard(const stoker_reply *rep, uint64_t *items, uint32_t cap, stoker_shard *out)
{
    uint32_t got = rep->n_items < cap ? rep->n_items : cap;
    memcpy(items, rep->items, got * sizeof(*items));
    out->n = got;
    out->seed = rep->dataset_seed;
    out->id = rep->shard;
}

int
stoker_producer_client_shard_ahead(stoker_producer_client *pc, uint64_t *items, uint32_t cap,
                                   stoker_shard *out)
{
    if (stopped(pc))
        return STOKER_INTERRUPTED;
    if (!known(pc))
        return STOKER_UNKNOWN_PEER; // the pusher's hello comes first
    stoker_request req = {.method = STOKER_SHARD, .session = pc->opts.session};
    stoker_reply *rep = NULL;
    char err[256];
    conn_stop stop = {.flag = pc->opts.stop, .grace_ms = STOP_GRACE_MS}; // not the pusher's
    session_sent(&pc->session);
    int rv = conn_call_until(pc->shard_ctx, &req, pc->opts.request_timeout_ms, &stop, &rep, err,
                             sizeof(err));
    if (rv != STOKER_OK) {
        stoker_debug("producer '%s': shard asked ahead: %s", pc->name, err);
        return rv == STOKER_CLOSED ? STOKER_CONNECTION : rv;
    }
    rv = rep->code;
    if (rv == STOKER_OK)
        take_shard(rep, items, cap, out);
    else
        stoker_debug("producer '%s': shard asked ahead: %s", pc->name, rep->message);
    stoker_reply_free(rep);
    return rv;
}

int
stoker_producer_client_shard(stoker_producer_client *pc, uint64_t *items, uint32_t cap,
                             stoker_shard *out)
{
    uint32_t delay = 10;
    for (;;) {
        if (stopped(pc))
            return STOKER_INTERRUPTED;
        int rv = known(pc) ? STOKER_OK : hello_once(pc, &pc->stop, UINT64_MAX);
        if (rv == STOKER_OK) {
            stoker_request req = {.method = STOKER_SHARD, .session = pc->opts.session};
            stoker_reply *rep = NULL;
            char err[256];
            session_sent(&pc->session);
            rv = conn_call_until(pc->push_ctx, &req, pc->opts.request_timeout_ms, &pc->stop, &rep,
                                 err, sizeof(err));
            if (rv != STOKER_OK) {
                conn_copy_str(pc->error, sizeof(pc->error), err);
                rv = rv == STOKER_CLOSED ? STOKER_CONNECTION : rv;
            } else {
                session_answered(&pc->session);
                rv = rep->code;
                conn_copy_str(pc->error, sizeof(pc->error), rep->message);
                if (rv == STOKER_OK)
                    take_shard(rep, items, cap, out);
                stoker_reply_free(rep);
                if (rv == STOKER_OK || rv == STOKER_RETRY || rv == STOKER_END_OF_DATA)
                    return rv;
                if (rv == STOKER_UNKNOWN_PEER)
                    session_forget(&pc->session);
            }
        }
        if (rv == STOKER_INTERRUPTED || !transient(rv))
            return rv;
        if (rv == STOKER_CONNECTION || rv == STOKER_TIMEOUT) {
            session_forget(&pc->session);
            if (keep_waiting(pc) != STOKER_OK)
                return STOKER_CONNECTION;
        }
        backoff(pc, &delay);
    }
}

void
stoker_producer_client_add_make_us(stoker_producer_client *pc, uint64_t us)
{
    atomic_fetch_add(&pc->make_us, us);
}
