// A REQ socket to the broker, synchronous calls on contexts, and the status helper.
#include <arpa/inet.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "conn.h"
#include "handshake.h"
#include "stoker/clock.h"
#include "tls_config.h"
#include "stoker/error.h"
#include "stoker/log.h"

void
conn_copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src != NULL ? src : "");
}

// The host part of a tls+tcp://HOST:PORT URL, for checking the broker's certificate.
static void
url_host(const char *url, char *host, size_t cap)
{
    const char *p = strstr(url, "://");
    p = p != NULL ? p + 3 : url;
    const char *end = strrchr(p, ':');
    size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
    if (n > 0 && p[0] == '[' && p[n - 1] == ']') { // [IPv6]
        p++;
        n -= 2;
    }
    snprintf(host, cap, "%.*s", (int)n, p);
}

// Counts the socket's connections (nng calls this on its own threads). nng runs REM_POST for
// every pipe it ran ADD_PRE for, also one that failed before ADD_POST: count from ADD_PRE.
static void
pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    conn *c = arg;
    uint32_t id = (uint32_t)nng_pipe_id(p);
    if (ev == NNG_PIPE_EV_ADD_PRE) {
        atomic_fetch_add(&c->pipes, 1);
        atomic_store(&c->live_pipe, id);
        atomic_store(&c->ever_connected, 1);
        atomic_store(&c->failure, STOKER_OK);
    } else if (ev == NNG_PIPE_EV_REM_POST) {
        atomic_compare_exchange_strong(&c->live_pipe, &id, 0);
        if (atomic_fetch_sub(&c->pipes, 1) == 1)
            atomic_store(&c->pipeless_since_ms, stoker_now_ms());
    }
}

int
conn_unknown_host(const char *url, char *why, size_t why_len)
{
    static const char *const schemes[] = {"tcp://",     "tcp4://",     "tcp6://",
                                          "tls+tcp://", "tls+tcp4://", "tls+tcp6://"};
    const char *host = NULL;
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]) && host == NULL; i++)
        if (strncmp(url, schemes[i], strlen(schemes[i])) == 0)
            host = url + strlen(schemes[i]);
    const char *colon = host != NULL ? strrchr(host, ':') : NULL;
    if (colon == NULL || colon == host || host[0] == '[')
        return 0; // no host, or an IPv6 literal: nothing to resolve
    char name[256];
    size_t n = (size_t)(colon - host);
    if (n >= sizeof(name))
        return 0;
    memcpy(name, host, n);
    name[n] = '\0';
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rv = getaddrinfo(name, NULL, &hints, &res);
    if (res != NULL)
        freeaddrinfo(res);
    if (rv != EAI_NONAME
#ifdef EAI_NODATA
        && rv != EAI_NODATA
#endif
    )
        return 0;
    snprintf(why, why_len, "unknown host '%s' (%s)", name, gai_strerror(rv));
    return 1;
}

// Creates and starts the dialer for c->url (with c->tls when set).
static int
dial(conn *c, char *err, size_t err_len)
{
    int rv;
    if ((rv = nng_dialer_create(&c->dialer, c->sock, c->url)) != 0) {
        snprintf(err, err_len, "bad broker URL '%s': %s", c->url, nng_strerror(rv));
        return STOKER_INVALID;
    }
    nng_dialer_set_size(c->dialer, NNG_OPT_RECVMAXSZ, c->max_message_bytes);
    if (c->tls != NULL && (rv = nng_dialer_set_ptr(c->dialer, NNG_OPT_TLS_CONFIG, c->tls)) != 0) {
        snprintf(err, err_len, "TLS on '%s': %s", c->url, nng_strerror(rv));
        nng_dialer_close(c->dialer);
        return stoker_err_from_nng(rv);
    }
    if ((rv = nng_dialer_start(c->dialer, NNG_FLAG_NONBLOCK)) != 0) {
        snprintf(err, err_len, "cannot dial '%s': %s", c->url, nng_strerror(rv));
        nng_dialer_close(c->dialer);
        return stoker_err_from_nng(rv);
    }
    return STOKER_OK;
}

// Initialises cv for cond_wait_ms (timed on the monotonic clock). 0 or an errno value.
static int
cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    int rv = pthread_condattr_init(&ca);
    if (rv != 0)
        return rv;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    rv = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return rv;
}

// Waits on cv (made by cond_init_monotonic; mu held) until signalled or ms have passed.
static void
cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(cv, mu, &ts);
}

// Replaces the dialer when the socket has had no connection for CONN_WATCH_MS (the watcher's
// thread, under watch_mu, so conn_close waits for it to finish).
static void
redial_if_stuck(conn *c)
{
    uint64_t now = stoker_now_ms();
    if (atomic_load(&c->pipes) > 0 || now < atomic_load(&c->pipeless_since_ms) + CONN_WATCH_MS)
        return;
    char err[256];
    nng_dialer_close(c->dialer);
    atomic_store(&c->pipeless_since_ms, now);
    if (dial(c, err, sizeof(err)) != STOKER_OK) {
        stoker_warn("dialer-restart: %s (tried again in %u ms)", err, CONN_WATCH_MS);
        return;
    }
    c->redials++;
    stoker_info("dialer-restarted: no connection to %s for %u ms: dialing anew", c->url,
                CONN_WATCH_MS);
}

int
conn_failure(conn *c, char *why, size_t why_len)
{
    int rv = atomic_load(&c->failure);
    if (rv != STOKER_OK && why != NULL && why_len > 0) {
        pthread_mutex_lock(&c->failure_mu);
        snprintf(why, why_len, "%s", c->failure_why);
        pthread_mutex_unlock(&c->failure_mu);
    }
    return rv;
}

// While there is no connection: when the dialer's handshakes keep failing (and none succeeded),
// asks handshake_diagnose once per dialer whether TLS is the reason. nng's dialer says nothing
// but its counters (nng 1.5.2: no pipe event before a handshake completes).
static void
check_handshakes(conn *c)
{
    if (atomic_load(&c->pipes) > 0) {
        atomic_store(&c->failure, STOKER_OK);
        return;
    }
    // Once connected with this configuration, failed handshakes are a broker restarting or a
    // mesh resetting connections while its task is away (swarm's ingress: CI saw producers
    // take one for a TLS failure and exit during a broker's restart): keep dialing.
    if (atomic_load(&c->ever_connected))
        return;
    int id = nng_dialer_id(c->dialer);
    handshake_counts n;
    if (atomic_load(&c->failure) != STOKER_OK || id <= 0 || id == c->diagnosed_dialer ||
        handshake_counts_get(id, &n) != 0 || n.connect > 0 || n.auth + n.shut < CONN_FAIL_AFTER)
        return;
    c->diagnosed_dialer = id;
    char why[sizeof(c->failure_why)];
    if (handshake_diagnose(c->url, c->tls != NULL ? &c->tls_opts : NULL, c->server_name, why,
                           sizeof(why)) != STOKER_TLS) {
        stoker_debug("conn: %llu failed handshakes with %s, no TLS cause found",
                     (unsigned long long)(n.auth + n.shut), c->url);
        return;
    }
    pthread_mutex_lock(&c->failure_mu);
    snprintf(c->failure_why, sizeof(c->failure_why), "%s", why);
    pthread_mutex_unlock(&c->failure_mu);
    atomic_store(&c->failure, STOKER_TLS);
    stoker_debug("conn: %s", why);
}

// Before the first connection, an address that refuses connections or a host name that does not
// resolve is said at once as a WARN line, not only when the caller gives up seconds later; the
// caller keeps trying as long as it would (a broker may be starting meanwhile).
static void
tell_unreachable(conn *c)
{
    if (c->told_unreachable || atomic_load(&c->ever_connected) || atomic_load(&c->pipes) > 0)
        return;
    handshake_counts n;
    int id = nng_dialer_id(c->dialer);
    // Refusals in the first CONN_REFUSED_QUIET_MS are a broker still starting beside its clients
    // (the README's quickstart starts them together): not worth a warning yet.
    if (id > 0 && stoker_now_ms() >= c->opened_ms + CONN_REFUSED_QUIET_MS &&
        handshake_counts_get(id, &n) == 0 && n.refused > 0) {
        c->told_unreachable = 1;
        stoker_warn("broker-unreachable: %s refuses connections: nothing listens there (is the "
                    "broker running, and is this its --listen address?); still trying",
                    c->url);
        return;
    }
    if (c->resolve_checked)
        return;
    c->resolve_checked = 1; // once: the resolver may take its own time
    char why[320];
    if (conn_unknown_host(c->url, why, sizeof(why))) {
        c->told_unreachable = 1;
        stoker_warn("broker-unreachable: %s in %s: check the host name; still trying", why, c->url);
    }
}

static void *
watch_main(void *arg)
{
    conn *c = arg;
    pthread_mutex_lock(&c->watch_mu);
    while (!c->closing) {
        int connected = atomic_load(&c->pipes) > 0;
        cond_wait_ms(&c->watch_cv, &c->watch_mu,
                     connected && atomic_load(&c->failure) == STOKER_OK ? CONN_WATCH_EVERY_MS
                                                                        : CONN_FAIL_EVERY_MS);
        if (c->closing)
            break;
        check_handshakes(c);
        tell_unreachable(c);
        redial_if_stuck(c);
    }
    pthread_mutex_unlock(&c->watch_mu);
    return NULL;
}

// Starts c's watcher (its lock, condition on the monotonic clock, and thread).
static int
watcher_start(conn *c)
{
    c->closing = 0;
    if (pthread_mutex_init(&c->watch_mu, NULL) != 0)
        return STOKER_NOMEM;
    if (pthread_mutex_init(&c->failure_mu, NULL) != 0)
        goto fail_failure;
    if (cond_init_monotonic(&c->watch_cv) != 0)
        goto fail_cond;
    if (pthread_create(&c->watcher, NULL, watch_main, c) != 0)
        goto fail_thread;
    return STOKER_OK;

fail_thread:
    pthread_cond_destroy(&c->watch_cv);
fail_cond:
    pthread_mutex_destroy(&c->failure_mu);
fail_failure:
    pthread_mutex_destroy(&c->watch_mu);
    return STOKER_NOMEM;
}

int
conn_open(conn *c, const char *url, size_t max_message_bytes, uint32_t reconnect_max_ms,
          const stoker_tls_options *tls, char *err, size_t err_len)
{
    int rv;
    memset(c, 0, sizeof(*c));
    if (strlen(url) >= sizeof(c->url)) {
        snprintf(err, err_len, "broker URL longer than %zu bytes", sizeof(c->url) - 1);
        return STOKER_INVALID;
    }
    snprintf(c->url, sizeof(c->url), "%s", url);
    c->max_message_bytes = max_message_bytes;
    atomic_store(&c->pipeless_since_ms, stoker_now_ms());
    c->opened_ms = stoker_now_ms();
    if ((rv = nng_req0_open(&c->sock)) != 0) {
        snprintf(err, err_len, "cannot open socket: %s", nng_strerror(rv));
        return stoker_err_from_nng(rv);
    }
    nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, max_message_bytes);
    nng_socket_set_ms(c->sock, NNG_OPT_RECONNMINT, 10);
    nng_socket_set_ms(c->sock, NNG_OPT_RECONNMAXT, (nng_duration)reconnect_max_ms);
    nng_pipe_notify(c->sock, NNG_PIPE_EV_ADD_PRE, pipe_event, c);
    nng_pipe_notify(c->sock, NNG_PIPE_EV_REM_POST, pipe_event, c);
    if (stoker_tls_url(url)) {
        stoker_tls_options none = {0};
        char host[256];
        nng_tls_config *cfg;
        url_host(url, host, sizeof(host));
        // mbedTLS 2 cannot match a certificate to an IP address: for a broker given by address
        // the certificate chain is verified, not the name.
        unsigned char addr[16];
        if (inet_pton(AF_INET, host, addr) == 1 || inet_pton(AF_INET6, host, addr) == 1)
            host[0] = '\0';
        if ((rv = stoker_tls_config_create(tls != NULL ? tls : &none, 0, host, &cfg, err,
                                           err_len)) != STOKER_OK) {
            nng_close(c->sock);
            return rv;
        }
        // Copies for handshake_diagnose, which runs after the caller's strings are gone.
        const stoker_tls_options *t = tls != NULL ? tls : &none;
        conn_copy_str(c->server_name, sizeof(c->server_name), host);
        conn_copy_str(c->tls_cert, sizeof(c->tls_cert), t->cert);
        conn_copy_str(c->tls_key, sizeof(c->tls_key), t->key);
        conn_copy_str(c->tls_ca, sizeof(c->tls_ca), t->ca);
        c->tls_opts.cert = t->cert != NULL ? c->tls_cert : NULL;
        c->tls_opts.key = t->key != NULL ? c->tls_key : NULL;
        c->tls_opts.ca = t->ca != NULL ? c->tls_ca : NULL;
        c->tls_opts.insecure = t->insecure;
        c->tls = cfg; // kept for dialing again; each dialer holds its own reference too
    }
    if ((rv = dial(c, err, err_len)) != STOKER_OK)
        goto fail_dial;
    if ((rv = watcher_start(c)) != STOKER_OK) {
        snprintf(err, err_len, "cannot start the dialer's watcher: %s", stoker_strerror(rv));
        goto fail_dial;
    }
    c->open = 1;
    return STOKER_OK;

fail_dial:
    nng_close(c->sock);
    if (c->tls != NULL)
        nng_tls_config_free(c->tls);
    c->tls = NULL;
    return rv;
}

// nng_close on a thread of its own (close_bounded).
typedef struct closer {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    nng_socket sock;
    int done;      // nng_close returned
    int abandoned; // the closing thread stopped waiting: the closer frees itself
} closer;

static void
closer_free(closer *k)
{
    pthread_cond_destroy(&k->cv);
    pthread_mutex_destroy(&k->mu);
    free(k);
}

static void *
closer_main(void *arg)
{
    closer *k = arg;
    nng_close(k->sock);
    pthread_mutex_lock(&k->mu);
    k->done = 1;
    int abandoned = k->abandoned;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
    if (abandoned)
        closer_free(k);
    return NULL;
}

// nng_close(sock), waited for at most CONN_CLOSE_WAIT_MS. nng 1.5.2's nng_close can deadlock
// inside nng: its one reaper thread waits for a task an aio prepared and never started, and every
// later close of the process then waits behind it (nanomsg/nng#1813; fixed upstream by aborting
// such a task when its aio is stopped, in nng 1.8.0; Debian 12 has 1.5.2). tests/hardening's
// close_cycles finds it within a few thousand open/use/close cycles of a consumer. So no caller
// waits for it: past a short wait the socket is left to a thread that may never return, and the
// caller goes on. The socket's pipe callbacks are removed first, so nothing of the caller is
// touched afterwards; what the thread holds is the socket alone.
#define CONN_CLOSE_WAIT_MS 50
static void
close_bounded(nng_socket sock, const char *url)
{
    nng_pipe_notify(sock, NNG_PIPE_EV_ADD_PRE, NULL, NULL);
    nng_pipe_notify(sock, NNG_PIPE_EV_REM_POST, NULL, NULL);
    closer *k = calloc(1, sizeof(*k));
    pthread_attr_t attr;
    pthread_t thread;
    int threaded = k != NULL && pthread_mutex_init(&k->mu, NULL) == 0;
    if (threaded && cond_init_monotonic(&k->cv) != 0) {
        pthread_mutex_destroy(&k->mu);
        threaded = 0;
    }
    if (threaded) {
        k->sock = sock;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&thread, &attr, closer_main, k) != 0) {
            closer_free(k);
            k = NULL;
            threaded = 0;
        }
        pthread_attr_destroy(&attr);
    } else {
        free(k);
    }
    if (!threaded) {
        nng_close(sock); // no thread to spare: unbounded, as nng itself
        return;
    }
    uint64_t deadline = stoker_now_ms() + CONN_CLOSE_WAIT_MS;
    pthread_mutex_lock(&k->mu);
    for (uint64_t now = stoker_now_ms(); !k->done && now < deadline; now = stoker_now_ms())
        cond_wait_ms(&k->cv, &k->mu, (long)(deadline - now));
    int done = k->done;
    k->abandoned = !done;
    pthread_mutex_unlock(&k->mu);
    if (done) {
        closer_free(k);
        return;
    }
    // Said once per process at info (nothing for the user to do; a busy machine can be all it
    // is), then counted at debug.
    static atomic_uint left;
    unsigned n = atomic_fetch_add(&left, 1) + 1;
    if (n == 1)
        stoker_info("conn: closing the socket to %s took over %u ms (nng 1.5.2 can deadlock in "
                    "nng_close): finishing it on a thread of its own, the caller goes on",
                    url, CONN_CLOSE_WAIT_MS);
    else
        stoker_debug("conn: close %u of the process left to its own thread (%s)", n, url);
}

void
conn_close(conn *c)
{
    if (c->open) {
        // The watcher first: it may be replacing the dialer of the socket closed next.
        pthread_mutex_lock(&c->watch_mu);
        c->closing = 1;
        pthread_cond_signal(&c->watch_cv);
        pthread_mutex_unlock(&c->watch_mu);
        pthread_join(c->watcher, NULL);
        pthread_cond_destroy(&c->watch_cv);
        pthread_mutex_destroy(&c->watch_mu);
        pthread_mutex_destroy(&c->failure_mu);
        close_bounded(c->sock, c->url);
        c->open = 0;
        if (c->tls != NULL)
            nng_tls_config_free(c->tls);
        c->tls = NULL;
    }
}

// Completion of a call's aio, signalled to the waiting thread.
int
conn_waiter_init(conn_waiter *w)
{
    w->done = 0;
    if (pthread_mutex_init(&w->mu, NULL) != 0)
        return -1;
    if (cond_init_monotonic(&w->cv) != 0) {
        pthread_mutex_destroy(&w->mu);
        return -1;
    }
    return 0;
}

void
conn_waiter_fini(conn_waiter *w)
{
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

void
conn_waiter_done(void *arg)
{
    conn_waiter *w = arg;
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

// Whether stop says to abandon the call now; notes when the flag was first seen.
static int
give_up_now(conn_stop *stop)
{
    if (stop != NULL && stop->conn != NULL && atomic_load(&stop->conn->failure) != STOKER_OK)
        return 1;
    if (stop == NULL || stop->flag == NULL || !*stop->flag)
        return 0;
    uint64_t now = stoker_now_ms();
    if (stop->seen_ms == 0)
        stop->seen_ms = now;
    return now >= stop->seen_ms + stop->grace_ms;
}

// Waits for the operation started on aio; aborts it (result NNG_EINTR) when stop says so. The
// flag is looked at every CALL_POLL_MS: a signal handler can set it, but cannot wake us.
#define CALL_POLL_MS 5
void
conn_waiter_wait(nng_aio *aio, conn_waiter *w, conn_stop *stop)
{
    if (stop != NULL && (stop->flag != NULL || stop->conn != NULL)) {
        pthread_mutex_lock(&w->mu);
        while (!w->done && !give_up_now(stop)) {
            cond_wait_ms(&w->cv, &w->mu, CALL_POLL_MS);
        }
        int done = w->done;
        pthread_mutex_unlock(&w->mu);
        if (!done)
            nng_aio_abort(aio, NNG_EINTR);
    }
    nng_aio_wait(aio); // also waits for conn_waiter_done to return
    w->done = 0;
}

int
conn_call_until(nng_ctx ctx, const stoker_request *req, uint32_t timeout_ms, conn_stop *stop,
                stoker_reply **out, char *err, size_t err_len)
{
    nng_msg *msg;
    int rv = stoker_wire_encode_request(req, &msg);
    if (rv != STOKER_OK) {
        snprintf(err, err_len, "cannot encode request: %s", stoker_strerror(rv));
        return rv;
    }
    return conn_call_msg_until(ctx, msg, timeout_ms, stop, out, err, err_len);
}

int
conn_call_msg_until(nng_ctx ctx, nng_msg *msg, uint32_t timeout_ms, conn_stop *stop,
                    stoker_reply **out, char *err, size_t err_len)
{
    nng_aio *aio;
    conn_waiter w;
    int rv;
    if (conn_waiter_init(&w) != 0) {
        nng_msg_free(msg);
        snprintf(err, err_len, "out of memory");
        return STOKER_NOMEM;
    }
    if ((rv = nng_aio_alloc(&aio, conn_waiter_done, &w)) != 0) {
        conn_waiter_fini(&w);
        nng_msg_free(msg);
        snprintf(err, err_len, "out of memory");
        return STOKER_NOMEM;
    }
    // One deadline for send and receive together.
    uint64_t deadline = stoker_now_ms() + timeout_ms;
    nng_aio_set_timeout(aio, (nng_duration)timeout_ms);
    nng_aio_set_msg(aio, msg);
    nng_ctx_send(ctx, aio);
    conn_waiter_wait(aio, &w, stop);
    if ((rv = nng_aio_result(aio)) != 0) {
        nng_msg_free(nng_aio_get_msg(aio));
        snprintf(err, err_len, "send: %s",
                 rv == NNG_EINTR ? "abandoned on stop" : nng_strerror(rv));
        goto out;
    }
    uint64_t now = stoker_now_ms();
    nng_aio_set_timeout(aio, now < deadline ? (nng_duration)(deadline - now) : 1);
    nng_ctx_recv(ctx, aio);
    conn_waiter_wait(aio, &w, stop);
    if ((rv = nng_aio_result(aio)) != 0) {
        snprintf(err, err_len, "receive: %s",
                 rv == NNG_EINTR ? "abandoned on stop" : nng_strerror(rv));
        goto out;
    }
    msg = nng_aio_get_msg(aio);
    if ((rv = stoker_wire_decode_reply_msg(msg, out, err, err_len)) != STOKER_OK)
        nng_msg_free(msg);
    nng_aio_free(aio);
    conn_waiter_fini(&w);
    return rv;

out:
    nng_aio_free(aio);
    conn_waiter_fini(&w);
    // No answer because the handshakes fail for a TLS reason: that reason, not a timeout.
    if (stop != NULL && stop->conn != NULL && conn_failure(stop->conn, err, err_len) == STOKER_TLS)
        return STOKER_TLS;
    return stoker_err_from_nng(rv);
}

int
conn_call(nng_ctx ctx, const stoker_request *req, uint32_t timeout_ms, stoker_reply **out,
          char *err, size_t err_len)
{
    return conn_call_until(ctx, req, timeout_ms, NULL, out, err, err_len);
}

void
stoker_client_options_init(stoker_client_options *o)
{
    memset(o, 0, sizeof(*o));
    o->request_timeout_ms = 3000;
    o->reconnect_max_ms = 1000;
    o->give_up_ms = 30000;
    o->max_message_bytes = 256u << 20;
}

// One connection, one request (after a hello, with a token): req's reply in *out when its code
// is STOKER_OK.
static int
call_once(const char *url, const char *token, const stoker_tls_options *tls,
          const stoker_request *req, uint32_t timeout_ms, stoker_reply **out, char *err,
          size_t err_len)
{
    conn c;
    nng_ctx ctx;
    stoker_reply *rep = NULL;
    int rv = conn_open(&c, url, 256u << 20, 100, tls, err, err_len);
    if (rv != STOKER_OK)
        return rv;
    if ((rv = nng_ctx_open(&ctx, c.sock)) != 0) {
        conn_close(&c);
        return stoker_err_from_nng(rv);
    }
    conn_stop stop = {.conn = &c}; // a TLS failure ends the wait at once
    if (token != NULL && token[0] != '\0') {
        // With a token, a connection says hello (as an observer) before anything else.
        stoker_request hello = {.method = STOKER_HELLO, .role = STOKER_ROLE_OBSERVER, .session = 1};
        conn_copy_str(hello.name, sizeof(hello.name), "status");
        conn_copy_str(hello.token, sizeof(hello.token), token);
        rv = conn_call_until(ctx, &hello, timeout_ms, &stop, &rep, err, err_len);
        if (rv == STOKER_OK && rep->code != STOKER_OK) {
            rv = rep->code;
            snprintf(err, err_len, "%s", rep->message);
        }
        stoker_reply_free(rep);
        rep = NULL;
    }
    if (rv == STOKER_OK)
        rv = conn_call_until(ctx, req, timeout_ms, &stop, &rep, err, err_len);
    if (rv == STOKER_OK && rep->code != STOKER_OK) {
        rv = rep->code;
        snprintf(err, err_len, "%s", rep->message);
    }
    if (rv == STOKER_OK)
        *out = rep;
    else
        stoker_reply_free(rep);
    nng_ctx_close(ctx);
    conn_close(&c);
    return rv;
}

// One connection, one Status request.
static int
status_fetch_once(const char *url, const char *token, const stoker_tls_options *tls,
                  uint32_t timeout_ms, stoker_status **out, char *err, size_t err_len)
{
    stoker_request req = {.method = STOKER_STATUS};
    stoker_reply *rep = NULL;
    int rv = call_once(url, token, tls, &req, timeout_ms, &rep, err, err_len);
    if (rv == STOKER_OK)
        rv = conn_status_from_reply(rep, out);
    stoker_reply_free(rep);
    return rv;
}

int
stoker_status_fetch(const char *url, const char *token, uint32_t timeout_ms, stoker_status **out,
                    char *err, size_t err_len)
{
    return stoker_status_fetch_tls(url, token, NULL, timeout_ms, out, err, err_len);
}

int
stoker_status_fetch_tls(const char *url, const char *token, const stoker_tls_options *tls,
                        uint32_t timeout_ms, stoker_status **out, char *err, size_t err_len)
{
    // A connection reset before the answer (the broker dropped it, or a listener it restarted)
    // is tried again on a new connection while the time lasts.
    uint64_t deadline = stoker_now_ms() + timeout_ms;
    for (;;) {
        uint64_t now = stoker_now_ms();
        int rv = status_fetch_once(url, token, tls, now < deadline ? (uint32_t)(deadline - now) : 1,
                                   out, err, err_len);
        if ((rv != STOKER_CONNECTION && rv != STOKER_CLOSED) || stoker_now_ms() + 20 >= deadline)
            return rv;
        stoker_sleep_ms(20, NULL);
    }
}

int
stoker_scaled_report(const char *url, const char *token, const stoker_tls_options *tls,
                     uint32_t timeout_ms, const char *pool, uint32_t from, uint32_t to,
                     const char *engine, const char *why, char *err, size_t err_len)
{
    stoker_request req = {.method = STOKER_SCALED, .scaled_from = from, .scaled_to = to};
    conn_copy_str(req.pool, sizeof(req.pool), pool);
    conn_copy_str(req.engine, sizeof(req.engine), engine != NULL ? engine : "");
    conn_copy_str(req.why, sizeof(req.why), why != NULL ? why : ""); // cut to fit
    uint64_t deadline = stoker_now_ms() + timeout_ms;
    for (;;) {
        stoker_reply *rep = NULL;
        uint64_t now = stoker_now_ms();
        int rv = call_once(url, token, tls, &req, now < deadline ? (uint32_t)(deadline - now) : 1,
                           &rep, err, err_len);
        stoker_reply_free(rep);
        if ((rv != STOKER_CONNECTION && rv != STOKER_CLOSED) || stoker_now_ms() + 20 >= deadline)
            return rv;
        stoker_sleep_ms(20, NULL);
    }
}

int
conn_status_from_reply(stoker_reply *rep, stoker_status **out)
{
    stoker_status *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return STOKER_NOMEM;
    st->uptime_ms = rep->uptime_ms;
    st->broker_id = rep->broker_id;
    st->has_schema = rep->has_schema;
    st->schema = rep->schema;
    st->queue_depth = rep->queue_depth;
    st->dataset_size = rep->dataset_size;
    st->epochs_done = rep->epochs_done;
    st->epochs_limit = rep->epochs_limit;
    st->items_reassigned = rep->items_reassigned;
    st->pushes_revoked = rep->pushes_revoked;
    st->epochs_overlap = rep->epochs_overlap;
    st->epoch_acknowledged = rep->epoch_acknowledged;
    st->max_bytes = rep->max_bytes;
    st->queue_depth_auto = rep->queue_depth_auto;
    snprintf(st->queue_limit, sizeof(st->queue_limit), "%s", rep->queue_limit);
    st->counters = rep->counters;
    st->n_producers = rep->n_producers;
    st->producers = rep->producers; // take ownership
    rep->producers = NULL;
    rep->n_producers = 0;
    st->n_events = rep->n_events;
    st->events = rep->events;
    rep->events = NULL;
    rep->n_events = 0;
    st->n_groups = rep->n_groups;
    st->groups = rep->groups;
    rep->groups = NULL;
    st->n_label_maps = rep->n_label_maps; // label maps: take ownership
    st->label_maps = rep->label_maps;
    st->label_maps_omitted = rep->label_maps_omitted;
    rep->label_maps = NULL;
    rep->n_label_maps = 0;
    rep->n_groups = 0;
    st->n_consumers = rep->n_consumers;
    st->consumers = rep->consumers;
    rep->consumers = NULL;
    rep->n_consumers = 0;
    st->has_autoscale = rep->has_autoscale;
    st->autoscale_headroom = rep->autoscale_headroom;
    st->autoscale_min = rep->autoscale_min;
    st->autoscale_max = rep->autoscale_max;
    st->idle_s = rep->idle_ms >= 0 ? (double)rep->idle_ms / 1000.0 : -1.0;
    st->n_pools = rep->n_pools;
    st->pools = rep->pools;
    rep->pools = NULL;
    rep->n_pools = 0;
    st->n_jobs = rep->n_jobs;
    st->jobs = rep->jobs; // take ownership
    rep->jobs = NULL;
    rep->n_jobs = 0;
    *out = st;
    return STOKER_OK;
}
