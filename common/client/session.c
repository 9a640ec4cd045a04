// A client's session with the broker (session.h): the socket, the hello, the heartbeat thread
// and the broker's presence. What a hello or heartbeat carries beyond the session's own fields,
// and what its answer means for the client, is the client's (session_beat, the hello's req/rep).
#include "session.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"

// How often the heartbeat thread looks whether the socket connected again (beat_wait).
#define BEAT_LOOK_MS 50
// "still waiting for the broker", while it stays away (session_keep_waiting).
#define AWAY_SAY_EVERY_MS 10000

void
session_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(cv, mu, &ts);
}

int
session_open(session *s, const stoker_client_options *opts, const char *who, char *err,
             size_t err_len)
{
    int rv;
    s->opts = opts;
    snprintf(s->who, sizeof(s->who), "%s", who);
    s->answered_ms = stoker_now_ms();
    atomic_store(&s->sent_ms, s->answered_ms);
    if ((rv = conn_open(&s->conn, opts->url, opts->max_message_bytes, opts->reconnect_max_ms,
                        &opts->tls, err, err_len)) != STOKER_OK)
        return rv;
    if ((rv = nng_ctx_open(&s->beat_ctx, s->conn.sock)) != 0) {
        conn_close(&s->conn);
        return stoker_errorf(err, err_len, stoker_err_from_nng(rv), "%s: %s", who,
                             nng_strerror(rv));
    }
    pthread_mutex_init(&s->beat_mu, NULL);
    pthread_cond_init(&s->beat_cv, NULL);
    return STOKER_OK;
}

void
session_close(session *s)
{
    if (!s->conn.open)
        return;
    session_stop_heartbeat(s);
    conn_close(&s->conn);
    pthread_cond_destroy(&s->beat_cv);
    pthread_mutex_destroy(&s->beat_mu);
}

void
session_sent(session *s)
{
    atomic_store(&s->sent_ms, stoker_now_ms());
}

void
session_forget(session *s)
{
    atomic_store(&s->known, 0);
}

int
session_hello(session *s, nng_ctx ctx, stoker_request *req, uint32_t timeout_ms, conn_stop *stop,
              stoker_reply **out, char *err, size_t err_len)
{
    req->method = STOKER_HELLO;
    req->session = s->opts->session;
    conn_copy_str(req->name, sizeof(req->name), s->opts->name);
    conn_copy_str(req->token, sizeof(req->token), s->opts->token);
    stoker_reply *rep = NULL;
    session_sent(s);
    int rv = conn_call_until(ctx, req, timeout_ms, stop, &rep, err, err_len);
    if (rv != STOKER_OK)
        return rv == STOKER_CLOSED ? STOKER_CONNECTION : rv;
    session_answered(s);
    if (rep->code == STOKER_OK) {
        atomic_store(&s->peer_id, rep->peer_id);
        if (rep->heartbeat_ms > 0)
            atomic_store(&s->heartbeat_ms, rep->heartbeat_ms);
        atomic_store(&s->known, 1);
    }
    *out = rep;
    return rep->code;
}

// Waits (beat_mu held) until a heartbeat is due (every ms after the last request that told the
// broker we live), or until session_stop_heartbeat, or until the socket connected again after
// it had lost its connection (*lost: the last loss seen): a broker that restarted then hears
// from us at once, not a heartbeat period later (a trainer's report of what it trained must
// reach it within its returning window). 1 when a heartbeat is due, 0 when stopping.
static int
beat_wait(session *s, uint32_t every, uint64_t *lost)
{
    while (!s->beat_stop) {
        uint64_t now = stoker_now_ms(), due = atomic_load(&s->sent_ms) + every;
        int may = s->beat.while_unknown || atomic_load(&s->known);
        if (may && now >= due)
            return 1;
        uint64_t at = atomic_load(&s->conn.pipeless_since_ms);
        if (at != *lost && atomic_load(&s->conn.pipes) > 0) {
            *lost = at;
            if (may)
                return 1;
        }
        uint64_t nap = may && due - now < BEAT_LOOK_MS ? due - now : BEAT_LOOK_MS;
        session_cond_wait_ms(&s->beat_cv, &s->beat_mu, nap);
    }
    return 0;
}

// The heartbeat thread: from session_start_heartbeat to session_stop_heartbeat. A heartbeat that
// fails is not retried early: the client's own requests find out what is wrong.
static void *
beat_main(void *arg)
{
    session *s = arg;
    pthread_mutex_lock(&s->beat_mu);
    uint64_t lost = atomic_load(&s->conn.pipeless_since_ms);
    for (;;) {
        uint32_t every = atomic_load(&s->heartbeat_ms);
        if (every == 0)
            every = 1000;
        if (!beat_wait(s, every, &lost))
            break;
        pthread_mutex_unlock(&s->beat_mu);
        stoker_request req = {.method = STOKER_HEARTBEAT, .session = s->opts->session};
        if (s->beat.fill != NULL)
            s->beat.fill(s->beat.owner, &req);
        stoker_reply *rep = NULL;
        char err[256];
        conn_stop stop = {.flag = &s->beat_stop};
        uint32_t timeout =
            s->opts->request_timeout_ms < every ? s->opts->request_timeout_ms : every;
        session_sent(s);
        if (conn_call_until(s->beat_ctx, &req, timeout, &stop, &rep, err, sizeof(err)) ==
            STOKER_OK) {
            if (rep->code != STOKER_OK)
                stoker_debug("%s: heartbeat refused: %s", s->who, rep->message);
            if (rep->code == STOKER_UNKNOWN_PEER)
                session_forget(s); // a new broker: the client says hello again
            if (s->beat.answered != NULL)
                s->beat.answered(s->beat.owner, s, rep, timeout, &stop);
            stoker_reply_free(rep);
        } else {
            stoker_debug("%s: heartbeat: %s", s->who, err);
        }
        pthread_mutex_lock(&s->beat_mu);
    }
    pthread_mutex_unlock(&s->beat_mu);
    return NULL;
}

int
session_start_heartbeat(session *s, const session_beat *beat)
{
    s->beat = *beat;
    s->beat_stop = 0;
    if (pthread_create(&s->beat_thread, NULL, beat_main, s) != 0)
        return STOKER_NOMEM;
    s->beat_started = 1;
    return STOKER_OK;
}

void
session_stop_heartbeat(session *s)
{
    if (!s->beat_started)
        return;
    pthread_mutex_lock(&s->beat_mu);
    s->beat_stop = 1;
    pthread_cond_signal(&s->beat_cv);
    pthread_mutex_unlock(&s->beat_mu);
    pthread_join(s->beat_thread, NULL);
    s->beat_started = 0;
}

void
session_answered(session *s)
{
    uint64_t now = stoker_now_ms(), since = atomic_load(&s->away_since_ms);
    if (since != 0 && s->away_said_ms != 0)
        stoker_info("%s: broker at %s answers again after %.1f s away", s->who, s->opts->url,
                    (double)(now - since) / 1000.0);
    s->answered_ms = now;
    atomic_store(&s->away_since_ms, 0);
    s->away_said_ms = 0;
    s->ever_answered = 1;
}

void
session_failed(session *s)
{
    if (atomic_load(&s->away_since_ms) == 0) {
        uint64_t now = stoker_now_ms();
        atomic_store(&s->away_since_ms, s->answered_ms < now ? s->answered_ms : now);
    }
}

int
session_unreachable(session *s)
{
    return atomic_load(&s->away_since_ms) != 0 && atomic_load(&s->conn.pipes) == 0;
}

uint32_t
session_call_timeout(session *s)
{
    uint32_t t = s->opts->request_timeout_ms;
    return session_unreachable(s) && t > SESSION_AWAY_CALL_MS ? SESSION_AWAY_CALL_MS : t;
}

int
session_keep_waiting(session *s, const char *why, uint64_t retained)
{
    session_failed(s);
    uint64_t now = stoker_now_ms();
    uint64_t away = now - atomic_load(&s->away_since_ms);
    double bound_s = s->opts->give_up_ms / 1000.0;
    const char *url = s->opts->url;
    char unknown[320];
    if (away >= s->opts->give_up_ms) {
        if (!s->ever_answered && conn_unknown_host(url, unknown, sizeof(unknown)))
            stoker_error("%s: %s in --broker %s: no broker answered within %.1f s "
                         "(--broker-wait): check the host name",
                         s->who, unknown, url, bound_s);
        else if (!s->ever_answered)
            stoker_error("%s: no broker answered at %s within %.1f s (--broker-wait; "
                         "last: %s): start the broker, check the URL, or wait longer",
                         s->who, url, bound_s, why);
        else
            stoker_error("%s: no broker at %s for %.1f s (--broker-wait; last: %s): "
                         "giving up; %llu retained examples not yet reported trained are lost "
                         "with this process (start the broker again sooner, or raise "
                         "--broker-wait)",
                         s->who, url, bound_s, why, (unsigned long long)retained);
        return STOKER_CONNECTION;
    }
    // A short blip (a push stream replaced, one timeout) is not worth a word; a second is.
    if (away < 1000 && s->away_said_ms == 0)
        return STOKER_OK;
    if (s->away_said_ms == 0 && !s->ever_answered &&
        conn_unknown_host(url, unknown, sizeof(unknown))) {
        stoker_warn("%s: %s in --broker %s: waiting up to %.1f s for it to resolve "
                    "(--broker-wait)",
                    s->who, unknown, url, bound_s);
        s->away_said_ms = now;
    } else if (s->away_said_ms == 0 && !s->ever_answered) {
        stoker_warn("%s: no broker at %s yet (%s): waiting up to %.1f s for one "
                    "(--broker-wait)",
                    s->who, url, why, bound_s);
        s->away_said_ms = now;
    } else if (s->away_said_ms == 0) {
        stoker_warn("%s: no broker at %s (%s): waiting up to %.1f s for it "
                    "(--broker-wait), keeping %llu retained examples to push again",
                    s->who, url, why, bound_s, (unsigned long long)retained);
        s->away_said_ms = now;
    } else if (now - s->away_said_ms >= AWAY_SAY_EVERY_MS) {
        stoker_warn("%s: still waiting for the broker at %s: %.0f of %.1f s "
                    "(--broker-wait), %llu examples retained",
                    s->who, url, away / 1000.0, bound_s, (unsigned long long)retained);
        s->away_said_ms = now;
    }
    return STOKER_OK;
}
