// Private to libstoker's clients: the session a trainer or producer client holds with the broker.
// It owns the socket (conn), says hello (the request's own fields are the client's), keeps the
// broker hearing from us on a heartbeat thread of its own, and knows whether the broker answers.
// It does no pulls, pushes or goodbyes: those are the clients' own requests over session->conn.
#ifndef STOKER_CLIENT_SESSION_H
#define STOKER_CLIENT_SESSION_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "conn.h"
#include "stoker/client.h"
#include "stoker/wire.h"

typedef struct session session;

// What a client adds to its heartbeats (the session sends them, stoker/protocol.h HEARTBEAT).
typedef struct session_beat {
    // Heartbeats go on while the broker does not know us (a trainer's report what it trained to
    // a restarted broker); else only once a hello was taken.
    int while_unknown;
    // Fills the client's fields of a heartbeat (method and session are set). May be NULL.
    void (*fill)(void *owner, stoker_request *req);
    // The broker's answer (rep borrowed, any code), on the heartbeat thread. stop and timeout_ms
    // are the heartbeat's, for a further request on s->beat_ctx. May be NULL.
    void (*answered)(void *owner, session *s, const stoker_reply *rep, uint32_t timeout_ms,
                     conn_stop *stop);
    void *owner;
} session_beat;

// Embedded in its client (one per client), from session_open to session_close.
struct session {
    conn conn;
    const stoker_client_options *opts; // the client's (borrowed): url, name, token, timeouts
    char who[STOKER_NAME_MAX + 16];    // how logs name the client: "trainer", "producer 'x'"
    nng_ctx beat_ctx;                  // the heartbeat thread's
    _Atomic uint32_t peer_id;          // from the last hello the broker took
    _Atomic uint32_t heartbeat_ms;     // from it; 0 before
    _Atomic int known;                 // a hello was taken, and nothing said since it forgot us
    _Atomic uint64_t sent_ms;          // the last request that told the broker we live

    // The heartbeat thread (session_start_heartbeat .. session_stop_heartbeat).
    session_beat beat;
    pthread_t beat_thread;
    int beat_started;
    pthread_mutex_t beat_mu;
    pthread_cond_t beat_cv;
    volatile int beat_stop;

    // The broker's presence, as the client's own requests found it: when it last answered (or
    // the session opened), since when it is away (0: it answers), when that was last said
    // (session_keep_waiting), whether any broker ever answered.
    uint64_t answered_ms;
    _Atomic uint64_t away_since_ms;
    uint64_t away_said_ms;
    int ever_answered;
};

// Opens the socket to opts->url (conn_open) and the heartbeat's context; who names the client in
// logs (copied). opts is borrowed until session_close. STOKER_OK, or an error with err.
int session_open(session *s, const stoker_client_options *opts, const char *who, char *err,
                 size_t err_len);
// Stops the heartbeat thread (if started) and closes the socket. May be called twice.
void session_close(session *s);

// Says hello on ctx: req is the client's request (role, schema, ...), whose method, session,
// name and token are filled here. Waits at most timeout_ms; stop may be NULL. An answer ends an
// outage (session_answered); a taken hello makes the session known, with its peer id and
// heartbeat period. Returns the broker's code with *rep (the caller frees it), or a transport
// error (STOKER_CLOSED as STOKER_CONNECTION, STOKER_INTERRUPTED, STOKER_TLS) with err and *rep
// NULL.
int session_hello(session *s, nng_ctx ctx, stoker_request *req, uint32_t timeout_ms,
                  conn_stop *stop, stoker_reply **rep, char *err, size_t err_len);

// Starts the heartbeat thread: a heartbeat goes out when no request told the broker we live for
// its heartbeat period (session_sent), and at once when the socket connected again after losing
// its connection (a broker that restarted hears from us within its returning window).
// beat is copied. STOKER_OK or STOKER_NOMEM.
int session_start_heartbeat(session *s, const session_beat *beat);
// Ends the heartbeat thread, abandoning a heartbeat in flight; waits for it. Idempotent.
void session_stop_heartbeat(session *s);
// A request that tells the broker we live went out now: the heartbeat can wait.
void session_sent(session *s);
// The broker told us it does not know us (or the client wants to say hello again anyway).
void session_forget(session *s);

// The broker answered one of the client's requests: an outage is over (said so when it was said).
void session_answered(session *s);
// One of the client's requests found no broker (failed in transport): it is away from then on
// (since its last answer) until it answers again.
void session_failed(session *s);
// Whether the broker is unreachable now: a request failed in transport since its last answer,
// and the socket has no connection. Nobody can answer then; any thread.
int session_unreachable(session *s);
// The timeout of a request that cannot wait for an unreachable broker (a stopping trainer's
// flush, status and goodbye would add theirs to its stall or time goal): the request timeout,
// or SESSION_AWAY_CALL_MS while session_unreachable.
#define SESSION_AWAY_CALL_MS 200
uint32_t session_call_timeout(session *s);
// A request found no broker (session_failed): whether the client may keep waiting for one,
// STOKER_OK, while its last answer is less than opts->give_up_ms (--broker-wait) ago, else
// STOKER_CONNECTION, with an error that says what is lost (retained examples not reported
// trained). Says when the wait begins (after a second: blips are not worth a word) and every
// 10 s. why: the last failure, for the words.
int session_keep_waiting(session *s, const char *why, uint64_t retained);

// pthread_cond_timedwait for at most ms on cv with mu held (a realtime deadline built here).
void session_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t ms);

#endif
