// Producer client: hello / push / heartbeat / goodbye over one REQ socket with two contexts
// (the pushing thread's and the heartbeat thread's). The seq rule makes every resend safe.
// A stop (opts.stop) gives the pushes STOP_GRACE_MS: a push the broker can take is answered in
// that time; one parked for room (queue full) or sent to a broker that is gone is abandoned, and
// goodbye's answer then says where the session ended.
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
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
    char token[STOKER_TOKEN_MAX];
    stoker_schema schema;
    conn conn;
    nng_ctx push_ctx;
    nng_ctx beat_ctx;
    uint64_t next_seq;
    conn_stop stop; // the pushing thread's: opts.stop with STOP_GRACE_MS
    uint32_t id;
    _Atomic int said_hello;
    char error[STOKER_MESSAGE_MAX];

    // Heartbeat thread.
    pthread_t beat_thread;
    int beat_started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int closing;
    uint32_t heartbeat_ms;         // from the broker's hello reply; 0 before it
    _Atomic uint64_t last_sent_ms; // when the last request went out

    // A dataset's producer (stoker_producer_client_set_dataset): said in hello; the items of
    // the push in progress (stoker_producer_client_push_items), NULL for a stream's.
    uint64_t dataset_size, dataset_fingerprint;
    const uint64_t *push_items;
};

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

static void *
heartbeat_main(void *arg)
{
    stoker_producer_client *pc = arg;
    pthread_mutex_lock(&pc->lock);
    while (!pc->closing) {
        uint32_t every = pc->heartbeat_ms > 0 ? pc->heartbeat_ms : 1000;
        uint64_t now = stoker_now_ms();
        uint64_t due = atomic_load(&pc->last_sent_ms) + every;
        if (pc->said_hello && now >= due) {
            pthread_mutex_unlock(&pc->lock);
            stoker_request req = {.method = STOKER_HEARTBEAT, .session = pc->opts.session};
            stoker_reply *rep = NULL;
            char err[256];
            atomic_store(&pc->last_sent_ms, stoker_now_ms());
            if (conn_call(pc->beat_ctx, &req, every, &rep, err, sizeof(err)) == STOKER_OK) {
                if (rep->code != STOKER_OK)
                    stoker_debug("heartbeat refused: %s", rep->message);
            } else {
                stoker_debug("heartbeat: %s", err);
            }
            stoker_reply_free(rep);
            pthread_mutex_lock(&pc->lock);
            continue;
        }
        uint64_t wait_ms = due > now ? due - now : every;
        if (wait_ms > 100)
            wait_ms = 100;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)wait_ms * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&pc->cond, &pc->lock, &ts);
    }
    pthread_mutex_unlock(&pc->lock);
    return NULL;
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
    pc->opts.url = pc->url;
    pc->opts.name = pc->name;
    pc->opts.token = pc->token;
    if (pc->opts.session == 0)
        pc->opts.session = stoker_random_u64();
    pc->schema = *schema;
    pc->stop.flag = opts->stop;
    pc->stop.grace_ms = STOP_GRACE_MS;
    pthread_mutex_init(&pc->lock, NULL);
    pthread_cond_init(&pc->cond, NULL);
    if ((rv = conn_open(&pc->conn, pc->url, opts->max_message_bytes, opts->reconnect_max_ms,
                        &opts->tls, err, sizeof(err))) != STOKER_OK) {
        stoker_error("producer: %s", err);
        goto fail_conn;
    }
    if ((rv = nng_ctx_open(&pc->push_ctx, pc->conn.sock)) != 0 ||
        (rv = nng_ctx_open(&pc->beat_ctx, pc->conn.sock)) != 0) {
        rv = stoker_err_from_nng(rv);
        goto fail_ctx;
    }
    atomic_store(&pc->last_sent_ms, stoker_now_ms());
    if (pthread_create(&pc->beat_thread, NULL, heartbeat_main, pc) != 0) {
        rv = STOKER_NOMEM;
        goto fail_ctx;
    }
    pc->beat_started = 1;
    *out = pc;
    return STOKER_OK;

fail_ctx:
    conn_close(&pc->conn);
fail_conn:
    pthread_cond_destroy(&pc->cond);
    pthread_mutex_destroy(&pc->lock);
    free(pc);
    return rv;
}

// One hello attempt. Returns STOKER_OK, a refusal code (final), a transport code (retry), or
// STOKER_INTERRUPTED when stop (may be NULL) abandoned it.
static int
hello_once(stoker_producer_client *pc, conn_stop *stop)
{
    stoker_request req = {
        .method = STOKER_HELLO,
        .session = pc->opts.session,
        .role = STOKER_ROLE_PRODUCER,
        .has_schema = 1,
        .schema = pc->schema,
        .next_seq = pc->next_seq,
        .dataset_size = pc->dataset_size,
        .dataset_fingerprint = pc->dataset_fingerprint,
    };
    conn_copy_str(req.name, sizeof(req.name), pc->name);
    conn_copy_str(req.token, sizeof(req.token), pc->token);
    stoker_reply *rep = NULL;
    char err[256];
    atomic_store(&pc->last_sent_ms, stoker_now_ms());
    int rv = conn_call_until(pc->push_ctx, &req, pc->opts.request_timeout_ms, stop, &rep, err,
                             sizeof(err));
    if (rv != STOKER_OK) {
        conn_copy_str(pc->error, sizeof(pc->error), err);
        return rv == STOKER_CLOSED ? STOKER_CONNECTION : rv;
    }
    rv = rep->code;
    if (rv == STOKER_OK) {
        pthread_mutex_lock(&pc->lock);
        pc->id = rep->peer_id;
        pc->heartbeat_ms = rep->heartbeat_ms;
        pc->said_hello = 1;
        pthread_mutex_unlock(&pc->lock);
        if (rep->next_seq > pc->next_seq) {
            // The broker holds more of our session than we remember (we lost state): continue
            // after what it holds rather than collide with it.
            stoker_warn("producer '%s': broker holds up to seq %llu, skipping ahead", pc->name,
                        (unsigned long long)rep->next_seq);
            pc->next_seq = rep->next_seq;
        }
        pc->error[0] = '\0';
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
    uint64_t give_up = stoker_now_ms() + pc->opts.give_up_ms;
    uint32_t delay = 10;
    for (;;) {
        if (stopped(pc))
            return STOKER_INTERRUPTED;
        int rv = hello_once(pc, &pc->stop);
        if (!transient(rv))
            return rv;
        if (stoker_now_ms() >= give_up) {
            stoker_error("producer '%s': no broker at %s after %u ms: %s", pc->name, pc->url,
                         pc->opts.give_up_ms, pc->error);
            return STOKER_CONNECTION;
        }
        backoff(pc, &delay);
    }
}

int
stoker_producer_client_push(stoker_producer_client *pc, const stoker_chunk *chunk,
                            uint64_t first_seq)
{
    if (!stoker_schema_equal(&chunk->schema, &pc->schema) || chunk->count == 0 ||
        first_seq != pc->next_seq)
        return STOKER_INVALID;
    stoker_request req = {.method = STOKER_PUSH, .first_seq = first_seq, .chunk = *chunk};
    if (pc->push_items != NULL) {
        req.n_items = chunk->count;
        req.items = pc->push_items;
    }
    uint64_t give_up = stoker_now_ms() + pc->opts.give_up_ms;
    uint32_t delay = 10;
    int logged_down = 0;
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
        if (!pc->said_hello) {
            rv = hello_once(pc, &pc->stop);
            if (rv == STOKER_INTERRUPTED)
                return rv;
            if (rv != STOKER_OK)
                goto failed;
        }
        req.session = pc->opts.session;
        stoker_reply *rep = NULL;
        char err[256];
        atomic_store(&pc->last_sent_ms, stoker_now_ms());
        rv = conn_call_until(pc->push_ctx, &req, pc->opts.request_timeout_ms, &pc->stop, &rep, err,
                             sizeof(err));
        if (rv == STOKER_INTERRUPTED)
            return rv; // abandoned: goodbye's answer says whether the broker took it
        if (rv != STOKER_OK) {
            conn_copy_str(pc->error, sizeof(pc->error), err);
            rv = rv == STOKER_CLOSED ? STOKER_CONNECTION : rv;
            goto failed;
        }
        rv = rep->code;
        if (rv == STOKER_OK) {
            if (rep->acked_through >= first_seq + chunk->count) {
                pc->next_seq = rep->acked_through;
                stoker_reply_free(rep);
                if (logged_down)
                    stoker_info("producer '%s': broker back, push resumed at seq %llu", pc->name,
                                (unsigned long long)first_seq);
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
            pc->said_hello = 0;
            continue;
        }
    failed:
        if (!transient(rv))
            return rv;
        if (!logged_down && rv != STOKER_RETRY) {
            stoker_warn("producer '%s': broker unreachable (%s), retrying seq %llu", pc->name,
                        pc->error, (unsigned long long)first_seq);
            logged_down = 1;
        }
        if (rv == STOKER_CONNECTION || rv == STOKER_TIMEOUT)
            pc->said_hello = 0; // a new connection may be a new broker: say hello again
        if (stoker_now_ms() >= give_up) {
            stoker_error("producer '%s': gave up pushing seq %llu after %u ms: %s", pc->name,
                         (unsigned long long)first_seq, pc->opts.give_up_ms, pc->error);
            return STOKER_CONNECTION;
        }
        backoff(pc, &delay);
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
stoker_producer_client_id(const stoker_producer_client *pc)
{
    return pc->id;
}

const char *
stoker_producer_client_error(const stoker_producer_client *pc)
{
    return pc->error;
}

int
stoker_producer_client_goodbye(stoker_producer_client *pc)
{
    uint64_t give_up = stoker_now_ms() + 2000;
    int rv;
    for (;;) {
        stoker_request req = {.method = STOKER_GOODBYE, .session = pc->opts.session};
        stoker_reply *rep = NULL;
        char err[256];
        rv = conn_call(pc->push_ctx, &req, 1000, &rep, err, sizeof(err));
        if (rv == STOKER_OK) {
            rv = rep->code;
            if (rv != STOKER_OK)
                conn_copy_str(pc->error, sizeof(pc->error), rep->message);
            else if (rep->acked_through > pc->next_seq)
                pc->next_seq = rep->acked_through; // took an abandoned push after all
            stoker_reply_free(rep);
            if (rv == STOKER_UNKNOWN_PEER && hello_once(pc, NULL) == STOKER_OK)
                continue;
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
    if (pc->beat_started) {
        pthread_mutex_lock(&pc->lock);
        pc->closing = 1;
        pthread_cond_signal(&pc->cond);
        pthread_mutex_unlock(&pc->lock);
        // Closing the socket aborts a heartbeat in flight.
        conn_close(&pc->conn);
        pthread_join(pc->beat_thread, NULL);
    }
    conn_close(&pc->conn);
    pthread_cond_destroy(&pc->cond);
    pthread_mutex_destroy(&pc->lock);
    free(pc);
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
                                  uint64_t first_seq, const uint64_t *items)
{
    pc->push_items = items;
    int rv = stoker_producer_client_push(pc, chunk, first_seq);
    pc->push_items = NULL;
    return rv;
}

int
stoker_producer_client_shard(stoker_producer_client *pc, uint64_t *items, uint32_t cap, uint32_t *n,
                             uint64_t *seed)
{
    uint64_t give_up = stoker_now_ms() + pc->opts.give_up_ms;
    uint32_t delay = 10;
    for (;;) {
        if (stopped(pc))
            return STOKER_INTERRUPTED;
        int rv = pc->said_hello ? STOKER_OK : hello_once(pc, &pc->stop);
        if (rv == STOKER_OK) {
            stoker_request req = {.method = STOKER_SHARD, .session = pc->opts.session};
            stoker_reply *rep = NULL;
            char err[256];
            atomic_store(&pc->last_sent_ms, stoker_now_ms());
            rv = conn_call_until(pc->push_ctx, &req, pc->opts.request_timeout_ms, &pc->stop, &rep,
                                 err, sizeof(err));
            if (rv != STOKER_OK) {
                conn_copy_str(pc->error, sizeof(pc->error), err);
                rv = rv == STOKER_CLOSED ? STOKER_CONNECTION : rv;
            } else {
                rv = rep->code;
                conn_copy_str(pc->error, sizeof(pc->error), rep->message);
                if (rv == STOKER_OK) {
                    uint32_t got = rep->n_items < cap ? rep->n_items : cap;
                    memcpy(items, rep->items, got * sizeof(*items));
                    *n = got;
                    *seed = rep->dataset_seed;
                }
                stoker_reply_free(rep);
                if (rv == STOKER_OK || rv == STOKER_RETRY || rv == STOKER_END_OF_DATA)
                    return rv;
                if (rv == STOKER_UNKNOWN_PEER)
                    pc->said_hello = 0;
            }
        }
        if (rv == STOKER_INTERRUPTED || !transient(rv))
            return rv;
        if (rv == STOKER_CONNECTION || rv == STOKER_TIMEOUT)
            pc->said_hello = 0;
        if (stoker_now_ms() >= give_up)
            return STOKER_CONNECTION;
        backoff(pc, &delay);
    }
}
