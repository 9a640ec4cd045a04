// Private to libstoker: a REQ socket to the broker and one synchronous request on a context.
// nng REQ's automatic resend is disabled (resend time infinite): it would duplicate pulls, and
// pushes are resent by our own code under the seq rule instead.
#ifndef STOKER_CONN_H
#define STOKER_CONN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

#include "stoker/client.h"
#include "stoker/wire.h"

typedef struct conn {
    nng_socket sock;
    nng_dialer dialer;
    int open;
    // What dialing again needs (the watcher), and the connections the socket has now.
    char url[512];
    size_t max_message_bytes;
    nng_tls_config *tls; // NULL unless tls+tcp://
    _Atomic int pipes;
    _Atomic uint64_t pipeless_since_ms; // when pipes last fell to 0 (or the open)
    // The id of the newest connection while it lasts, or 0: a reply that came on another closed
    // since, and what the broker handed out on it was taken back (trainer_prefetch.c,
    // trainer_stale_batch).
    _Atomic uint32_t live_pipe;
    uint64_t redials;
    // The dialer's watcher: a thread of the conn's own, from conn_open to conn_close.
    pthread_t watcher;
    pthread_mutex_t watch_mu;
    pthread_cond_t watch_cv; // signalled by conn_close
    int closing;             // under watch_mu
    // What the dialer uses, kept for handshake_diagnose (the caller's strings are borrowed).
    char tls_cert[512], tls_key[512], tls_ca[512], server_name[256];
    stoker_tls_options tls_opts; // pointing into the arrays above
    int diagnosed_dialer;        // the dialer (id) whose failed handshakes were diagnosed
    // A TLS failure the watcher found (conn_failure); cleared when a connection is made.
    _Atomic int failure;
    // A connection was made once: failed handshakes after that are a broker restarting (or a
    // routing mesh resetting connections meanwhile), not a configuration that cannot work.
    _Atomic int ever_connected;
    pthread_mutex_t failure_mu; // guards failure_why
    char failure_why[512];
    // The watcher said once that the address refuses connections or does not resolve.
    int told_unreachable, resolve_checked;
    uint64_t opened_ms; // when conn_open began dialing
} conn;

// Opens a REQ socket and starts dialing url in the background (returns at once). tls (may be
// NULL) applies to tls+tcp:// URLs. Also starts the dialer's watcher: a thread that looks every
// CONN_WATCH_EVERY_MS and, when the socket has had no connection for CONN_WATCH_MS, replaces the
// dialer by a new one (logged "dialer-restarted ... dialing anew"). While there is no connection
// it also looks every CONN_FAIL_EVERY_MS at the dialer's failed handshakes: after
// CONN_FAIL_AFTER of them and none that succeeded, it finds out whether TLS is the cause
// (handshake_diagnose) and, when it is, sets the failure conn_failure reports (and calls given a
// conn_stop with this conn end with). nng 1.5.2's dialer can stop
// redialing after a connection dies during its handshake (a broker SIGKILLed and restarted on the
// same address); sends would then time out forever. c must stay where it is until conn_close.
int conn_open(conn *c, const char *url, size_t max_message_bytes, uint32_t reconnect_max_ms,
              const stoker_tls_options *tls, char *err, size_t err_len);
// Stops and joins the watcher, then closes the socket (aborting calls in flight on its contexts),
// waiting at most 50 ms for nng to finish: nng 1.5.2's close can deadlock now and then, and is
// then finished on a thread of its own while the caller goes on (conn.c, close_bounded). May be
// called twice; not from two threads at once.
void conn_close(conn *c);

// Whether url names a host (tcp://, tls+tcp://) that does not resolve (getaddrinfo: no such
// name): 1 with "unknown host 'HOST'" in why, else 0 (resolved, another scheme, or the resolver
// could not tell now). May block for the resolver's own timeout: call it only when about to
// say that no broker answered.
int conn_unknown_host(const char *url, char *why, size_t why_len);

// No connection for this long, though a working dialer retries at least every reconnect_max_ms
// (1 s by default): the dialer is replaced. The watcher looks this often.
#define CONN_WATCH_MS       2500
#define CONN_WATCH_EVERY_MS 500
#define CONN_FAIL_EVERY_MS  50
#define CONN_FAIL_AFTER     2
// An address that refuses connections for this long after the open is said (a WARN).
#define CONN_REFUSED_QUIET_MS 500

// STOKER_TLS with why (why_len bytes, may be 0) when the watcher found that the handshakes with
// the broker fail for a TLS reason; STOKER_OK while it found none. Any thread.
int conn_failure(conn *c, char *why, size_t why_len);

// Sends req on ctx and waits for the reply, at most timeout_ms in all. On STOKER_OK *out is the
// decoded reply (caller frees with stoker_reply_free); its code may still be an error. Transport
// failures return STOKER_TIMEOUT / STOKER_CONNECTION / STOKER_CLOSED, with a reason in err.
int conn_call(nng_ctx ctx, const stoker_request *req, uint32_t timeout_ms, stoker_reply **out,
              char *err, size_t err_len);

// When a call may be abandoned: grace_ms after *flag is first seen nonzero (seen_ms, set by the
// call, 0 until then, so one stop spans several calls). flag NULL: never. With conn set, also
// as soon as conn_failure(conn) reports a failure: the call then returns it (STOKER_TLS).
typedef struct conn_stop {
    const volatile int *flag;
    uint32_t grace_ms;
    uint64_t seen_ms;
    conn *conn;
} conn_stop;

// conn_call that also watches stop (may be NULL), every few ms: once its grace has passed, the
// request is abandoned and STOKER_INTERRUPTED returned. An abandoned request may still have
// reached the broker and be applied there; only a later answer tells (for pushes: goodbye's).
int conn_call_until(nng_ctx ctx, const stoker_request *req, uint32_t timeout_ms, conn_stop *stop,
                    stoker_reply **out, char *err, size_t err_len);
// conn_call_until with the request already encoded (stoker_wire_encode_request): msg is the
// call's, sent or freed, whatever the outcome.
int conn_call_msg_until(nng_ctx ctx, nng_msg *msg, uint32_t timeout_ms, conn_stop *stop,
                        stoker_reply **out, char *err, size_t err_len);

// One aio waited for with a stop: the calls' own machinery, also the push stream's.
typedef struct conn_waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
} conn_waiter;
// 0, or -1 when out of resources.
int conn_waiter_init(conn_waiter *w);
void conn_waiter_fini(conn_waiter *w);
// The aio's callback (nng_aio_alloc(&aio, conn_waiter_done, w)).
void conn_waiter_done(void *arg);
// Waits for the operation started on aio; aborts it (result NNG_EINTR) when stop (may be NULL)
// says to give up. The flag is looked at every few ms: a signal handler can set it, not wake us.
void conn_waiter_wait(nng_aio *aio, conn_waiter *w, conn_stop *stop);

// Moves the counters, producers and events of a successful STATUS reply into a new status
// (*out, owned by the caller). STOKER_OK or STOKER_NOMEM (rep unchanged).
int conn_status_from_reply(stoker_reply *rep, stoker_status **out);

// Copies src into dst (cap bytes, always terminated).
void conn_copy_str(char *dst, size_t cap, const char *src);

#endif
