// The producer client's bottom room (producer_impl.h): create and destroy, the hello (the
// session's, with what a producer says: schema, seq, dataset, labels) and what the broker's
// answers tell it (how far it trained, its queue depth, its shared memory for pushes by
// reference), the heartbeat's extras, and the client's settings and counters.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "producer_impl.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/rng.h"

#define RETAIN_FALLBACK 1024 // examples, when the broker does not tell its queue depth

// With the default retention, follows the broker's current queue depth (it sizes its queues
// from the trainers' batches): twice it, so the broker's queue, not retention, stays the bound.
void
producer_note_depth(stoker_producer_client *pc, uint32_t depth)
{
    if (!pc->retain_auto)
        return;
    atomic_store(&pc->retain, depth == 0               ? (uint32_t)RETAIN_FALLBACK
                              : depth > UINT32_MAX / 4 ? UINT32_MAX - 1
                                                       : 2 * depth);
}

void
producer_note_peers(stoker_producer_client *pc, const stoker_reply *rep)
{
    if (rep->peers_producers > 0) // a producer's answer counts that producer: 0 is not said
        atomic_store(&pc->peers, (uint64_t)rep->peers_producers << 32 | rep->peers_trainers);
}

// Raises trained to through (never lowers it; the heartbeat thread may race the pusher).
void
producer_note_trained(stoker_producer_client *pc, uint64_t through)
{
    uint64_t cur = atomic_load(&pc->trained);
    while (through > cur && !atomic_compare_exchange_weak(&pc->trained, &cur, through))
        ;
}

int
producer_stopped(const stoker_producer_client *pc)
{
    return pc->opts.stop != NULL && *pc->opts.stop;
}

void
producer_backoff(stoker_producer_client *pc, uint32_t *delay_ms)
{
    stoker_sleep_ms(*delay_ms, pc->opts.stop);
    *delay_ms =
        *delay_ms * 2 > pc->opts.reconnect_max_ms ? pc->opts.reconnect_max_ms : *delay_ms * 2;
}

// Whether the broker took our hello and has not said since that it forgot us.
int
producer_known(const stoker_producer_client *pc)
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
int
producer_keep_waiting(stoker_producer_client *pc)
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
        producer_note_trained(pc, rep->trained_through);
        producer_note_peers(pc, rep);
        if (rep->queue_depth > 0)
            producer_note_depth(pc, rep->queue_depth);
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

// One hello attempt. Returns STOKER_OK, a refusal code (final), a transport code (retry), or
// STOKER_INTERRUPTED when stop (may be NULL) abandoned it.
// at: the seq to announce (UINT64_MAX: the oldest kept, else the next).
int
producer_hello_once(stoker_producer_client *pc, conn_stop *stop, uint64_t at)
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
    // The broker we last heard from, as it said (0: none): a broker that restarted waits for
    // its peers only until they are all back.
    uint64_t peers = atomic_load(&pc->peers);
    req.known_producers = (uint32_t)(peers >> 32);
    req.known_trainers = (uint32_t)peers;
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
        producer_note_trained(pc, rep->trained_through);
        producer_note_peers(pc, rep);
        pc->broker_seq = rep->next_seq;
        // The default: the broker's queue for us plus as much again in flight or awaiting the
        // report that it was trained, so the broker's queue, not retention, stays the bound.
        producer_note_depth(pc, rep->queue_depth);
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

int
producer_transient(int rv)
{
    return rv == STOKER_TIMEOUT || rv == STOKER_CONNECTION || rv == STOKER_CLOSED ||
           rv == STOKER_RETRY || rv == STOKER_UNKNOWN_PEER;
}

int
stoker_producer_client_hello(stoker_producer_client *pc)
{
    uint32_t delay = 10;
    for (;;) {
        if (producer_stopped(pc))
            return STOKER_INTERRUPTED;
        int rv = producer_hello_once(pc, &pc->stop, UINT64_MAX);
        if (!producer_transient(rv))
            return rv;
        if ((rv == STOKER_CONNECTION || rv == STOKER_TIMEOUT) &&
            producer_keep_waiting(pc) != STOKER_OK)
            return STOKER_CONNECTION;
        producer_backoff(pc, &delay);
    }
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
stoker_producer_client_batch_examples(const stoker_producer_client *pc)
{
    return atomic_load(&((stoker_producer_client *)pc)->batch_examples);
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

void
stoker_producer_client_add_make_us(stoker_producer_client *pc, uint64_t us)
{
    atomic_fetch_add(&pc->make_us, us);
}
