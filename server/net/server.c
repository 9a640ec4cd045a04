// nng plumbing of the broker (see server.h): the socket and its contexts, pipe events, the tick
// thread, the HTTP routes and the listeners' creation. It uses the broker (broker.h) and the
// listener watchdog (watchdog.h), which it hands a watchdog_host: the listeners, the stopping
// flag and the two calls a restart needs (retire_listener, watchdog_start_listener). Watching the
// listeners is watchdog.c's; the broker's state and its reports are broker*.c's.
#include <errno.h>
#include <malloc.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/supplemental/http/http.h>

#include "arena.h"
#include "intake.h"
#include "page.h"
#include "server.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "watchdog.h"

typedef struct rctx {
    int kind; // TOKEN_REP (intake.h): the outbox's tokens are these or an intake's
    server *srv;
    nng_ctx ctx;
    nng_aio *aio;
    int sending;
} rctx;

#define RETIRED_MAX 16

struct server {
    nng_socket sock;
    int sock_open;
    rctx *ctxs;
    uint32_t n_ctxs;
    pthread_mutex_t lock; // guards b and retired
    broker *b;
    pthread_t tick_thread;
    int tick_started;
    atomic_int stopping;
    nng_http_server *http;
    size_t max_message_bytes;
    size_t trim_free_bytes; // free heap kept before malloc_trim gives pages back
    stoker_tls_options tls;
    watched listeners[SERVER_MAX_LISTEN];
    uint32_t n_listeners;
    intake *intakes[SERVER_MAX_LISTEN]; // beside listeners[i] (tcp:// only), or NULL
    uint32_t retired[RETIRED_MAX];      // ids of listeners closed by a restart (a ring)
    uint32_t n_retired;
    watchdog_host watch; // what the watchdog thread is handed
    pthread_t watch_thread;
    int watch_started;
    char http_token[STOKER_TOKEN_MAX]; // --token-file's token: /status and /metrics ask for it
};

static void
recv_next(rctx *c)
{
    c->sending = 0;
    nng_ctx_recv(c->ctx, c->aio);
}

// Sends the replies collected under the lock (which the caller no longer holds), after the copies
// they wait for.
static void
flush(broker_outbox *out)
{
    broker_outbox_fill(out);
    for (size_t i = 0; i < out->n; i++) {
        nng_msg *msg = out->items[i].msg;
        out->items[i].msg = NULL;
        if (*(int *)out->items[i].token == TOKEN_INTAKE) {
            intake_reply(out->items[i].token, msg);
            continue;
        }
        rctx *c = out->items[i].token;
        if (msg == NULL) { // could not encode: let the client time out, take the next request
            if (!atomic_load(&c->srv->stopping))
                recv_next(c);
            continue;
        }
        c->sending = 1;
        nng_aio_set_msg(c->aio, msg);
        nng_ctx_send(c->ctx, c->aio);
    }
    broker_outbox_fini(out);
}

static void
ctx_cb(void *arg)
{
    rctx *c = arg;
    server *s = c->srv;
    int rv = nng_aio_result(c->aio);
    if (c->sending) {
        if (rv != 0) // peer gone: the reply is dropped, as it would be anyway
            nng_msg_free(nng_aio_get_msg(c->aio));
        nng_aio_set_msg(c->aio, NULL);
        if (rv != NNG_ECLOSED)
            recv_next(c);
        return;
    }
    if (rv != 0) {
        if (rv != NNG_ECLOSED)
            recv_next(c);
        return;
    }
    nng_msg *msg = nng_aio_get_msg(c->aio);
    nng_aio_set_msg(c->aio, NULL);
    uint32_t pipe = (uint32_t)nng_pipe_id(nng_msg_get_pipe(msg));
    stoker_request *req = NULL;
    char err[256];
    // Decoding happens outside the lock. On success the request owns msg: a push's examples
    // stay in the received message until the last of them is acknowledged.
    int drv = stoker_wire_decode_request_msg_unaligned(msg, &req, err, sizeof(err));
    if (drv != STOKER_OK)
        nng_msg_free(msg);
    broker_outbox out = {0};
    pthread_mutex_lock(&s->lock);
    if (drv == STOKER_OK)
        broker_handle(s->b, c, pipe, req, stoker_now_ms(), &out);
    else
        broker_refuse(s->b, c, pipe, drv, err, &out);
    pthread_mutex_unlock(&s->lock);
    flush(&out);
}

// --- the intake's host (intake.h): its requests go to the broker as the contexts' do -----------

static void
intake_deliver(void *arg, void *token, uint32_t pipe, stoker_request *req)
{
    server *s = arg;
    broker_outbox out = {0};
    pthread_mutex_lock(&s->lock);
    broker_handle(s->b, token, pipe, req, stoker_now_ms(), &out);
    pthread_mutex_unlock(&s->lock);
    flush(&out);
}

static void
intake_refuse(void *arg, void *token, uint32_t pipe, int code, const char *why)
{
    server *s = arg;
    broker_outbox out = {0};
    pthread_mutex_lock(&s->lock);
    broker_refuse(s->b, token, pipe, code, why, &out);
    pthread_mutex_unlock(&s->lock);
    flush(&out);
}

// intake_host.stage: a large push read into the broker's shared memory.
static uint8_t *
stage_in_arena(void *arena, size_t len, size_t blob_at)
{
    return broker_arena_stage(arena, len, blob_at);
}

static void
intake_closed(void *arg, uint32_t pipe)
{
    server *s = arg;
    if (atomic_load(&s->stopping))
        return;
    broker_outbox out = {0};
    pthread_mutex_lock(&s->lock);
    broker_pipe_closed(s->b, pipe, stoker_now_ms(), &out);
    pthread_mutex_unlock(&s->lock);
    flush(&out);
}

// broker_config.intake_port: the port of the intake beside the listener pipe came through
// (under the broker's lock; nng's option read does not call back into us).
static uint32_t
intake_port_of(void *arg, uint32_t pipe_id)
{
    server *s = arg;
    if (pipe_id >= INTAKE_PIPE_BASE)
        return 0;
    nng_pipe p = NNG_PIPE_INITIALIZER;
    p.id = pipe_id;
    uint32_t listener_id = (uint32_t)nng_listener_id(nng_pipe_listener(p));
    for (uint32_t i = 0; i < s->n_listeners; i++)
        if (s->intakes[i] != NULL && atomic_load(&s->listeners[i].id) == listener_id)
            return intake_port(s->intakes[i]);
    return 0;
}

// The remote address of a pipe, for the broker's log lines (called under the broker lock; nng's
// option read does not call back into us).
static void
describe_peer(uint32_t pipe_id, char *buf, size_t len)
{
    nng_pipe p = NNG_PIPE_INITIALIZER;
    nng_sockaddr sa;
    p.id = pipe_id;
    if (nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa) != 0)
        return;
    if (sa.s_family == NNG_AF_INET) {
        const uint8_t *a = (const uint8_t *)&sa.s_in.sa_addr;
        unsigned port = ((sa.s_in.sa_port & 0xff) << 8) | (sa.s_in.sa_port >> 8);
        snprintf(buf, len, "%u.%u.%u.%u:%u (pipe %u)", a[0], a[1], a[2], a[3], port, pipe_id);
    } else if (sa.s_family == NNG_AF_IPC) {
        snprintf(buf, len, "ipc %s (pipe %u)", sa.s_ipc.sa_path, pipe_id);
    }
}

static int
is_retired(const server *s, uint32_t listener_id)
{
    uint32_t n = s->n_retired < RETIRED_MAX ? s->n_retired : RETIRED_MAX;
    for (uint32_t i = 0; i < n; i++)
        if (s->retired[i] == listener_id)
            return 1;
    return 0;
}

static void
pipe_cb(nng_pipe pipe, nng_pipe_ev ev, void *arg)
{
    server *s = arg;
    uint32_t listener_id = (uint32_t)nng_listener_id(nng_pipe_listener(pipe));
    if (ev == NNG_PIPE_EV_ADD_POST) {
        for (uint32_t i = 0; i < s->n_listeners; i++)
            if (atomic_load(&s->listeners[i].id) == listener_id)
                atomic_fetch_add(&s->listeners[i].accepted, 1);
        return;
    }
    if (ev != NNG_PIPE_EV_REM_POST || atomic_load(&s->stopping))
        return;
    broker_outbox out = {0};
    pthread_mutex_lock(&s->lock);
    if (listener_id != 0 && is_retired(s, listener_id))
        broker_pipe_reset(s->b, (uint32_t)nng_pipe_id(pipe), stoker_now_ms(), &out);
    else
        broker_pipe_closed(s->b, (uint32_t)nng_pipe_id(pipe), stoker_now_ms(), &out);
    pthread_mutex_unlock(&s->lock);
    flush(&out);
}

static void *
tick_main(void *arg)
{
    server *s = arg;
    uint64_t trimmed_ms = stoker_now_ms();
    while (!atomic_load(&s->stopping)) {
        // Large messages live in the heap (stoker_process_init raises the mmap and trim
        // thresholds for speed), and pushes, their aligned copies and pull replies of slightly
        // different sizes leave holes no later message fits: without giving free pages back,
        // resident memory grew with --max-bytes beyond it (1.3x at 64 MiB). malloc_trim returns
        // free pages anywhere in the heap; once a second it costs little.
        // Only when there is much to give back (an eighth of --max-bytes, 8 to 64 MiB):
        // trimming returns pages that the next messages then fault in again, a cost that showed
        // in profiles of the broker under load (a tenth of its CPU with a trim every second).
        if (stoker_now_ms() - trimmed_ms >= 1000) {
            struct mallinfo2 mi = mallinfo2();
            if (mi.fordblks > s->trim_free_bytes)
                malloc_trim(0);
            trimmed_ms = stoker_now_ms();
        }
        broker_outbox out = {0};
        pthread_mutex_lock(&s->lock);
        broker_tick(s->b, stoker_now_ms(), &out);
        pthread_mutex_unlock(&s->lock);
        flush(&out);
        stoker_sleep_ms(5, NULL);
    }
    return NULL;
}

// --- HTTP ---------------------------------------------------------------------------------------

static void
http_reply(nng_aio *aio, char *body, const char *type)
{
    nng_http_res *res;
    if (body == NULL || nng_http_res_alloc(&res) != 0) {
        free(body);
        nng_aio_finish(aio, NNG_ENOMEM);
        return;
    }
    nng_http_res_set_header(res, "Content-Type", type);
    nng_http_res_set_header(res, "Cache-Control", "no-store");
    nng_http_res_copy_data(res, body, strlen(body));
    free(body);
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

// With a token, /status and /metrics answer only a request that carries it as
// "Authorization: Bearer TOKEN" (the live page asks for it and sends it so; Prometheus's
// authorization.credentials_file does the same). Compared in constant time in its length.
static int
http_authorized(const server *s, nng_aio *aio)
{
    if (s->http_token[0] == '\0')
        return 1;
    const char *given = nng_http_req_get_header(nng_aio_get_input(aio, 0), "Authorization");
    if (given == NULL || strncmp(given, "Bearer ", 7) != 0)
        return 0;
    given += 7;
    size_t n = strlen(s->http_token), m = strnlen(given, STOKER_TOKEN_MAX);
    unsigned diff = n != m;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(s->http_token[i] ^ (i < m ? given[i] : 0));
    return diff == 0;
}

// 401 with the scheme it wants; nothing else is said.
static void
http_unauthorized(nng_aio *aio)
{
    nng_http_res *res;
    if (nng_http_res_alloc_error(&res, NNG_HTTP_STATUS_UNAUTHORIZED) != 0) {
        nng_aio_finish(aio, NNG_ENOMEM);
        return;
    }
    nng_http_res_set_header(res, "WWW-Authenticate", "Bearer realm=\"stoker\"");
    nng_http_res_set_header(res, "Cache-Control", "no-store");
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

static void
http_metrics(nng_aio *aio)
{
    server *s = nng_http_handler_get_data(nng_aio_get_input(aio, 1));
    if (!http_authorized(s, aio)) {
        http_unauthorized(aio);
        return;
    }
    pthread_mutex_lock(&s->lock);
    char *text = broker_metrics_text(s->b, stoker_now_ms());
    pthread_mutex_unlock(&s->lock);
    http_reply(aio, text, "text/plain; version=0.0.4");
}

static void
http_status(nng_aio *aio)
{
    server *s = nng_http_handler_get_data(nng_aio_get_input(aio, 1));
    if (!http_authorized(s, aio)) {
        http_unauthorized(aio);
        return;
    }
    pthread_mutex_lock(&s->lock);
    char *text = broker_status_json(s->b, stoker_now_ms());
    pthread_mutex_unlock(&s->lock);
    http_reply(aio, text, "application/json");
}

// The live page (server/page/index.html, built in): static, it holds no figures (it reads them
// from /status, which asks for the token) and its policy lets it reach nothing but this origin.
static void
http_page(nng_aio *aio)
{
    nng_http_res *res;
    if (nng_http_res_alloc(&res) != 0) {
        nng_aio_finish(aio, NNG_ENOMEM);
        return;
    }
    nng_http_res_set_header(res, "Content-Type", "text/html; charset=utf-8");
    nng_http_res_set_header(res, "Content-Security-Policy",
                            "default-src 'none'; script-src 'unsafe-inline'; "
                            "style-src 'unsafe-inline'; img-src data:; connect-src 'self'; "
                            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
    nng_http_res_set_header(res, "X-Content-Type-Options", "nosniff");
    nng_http_res_set_header(res, "Cache-Control", "no-cache");
    nng_http_res_set_data(res, stoker_page_html, stoker_page_html_len); // static: not copied
    nng_aio_set_output(aio, 0, res);
    nng_aio_finish(aio, 0);
}

static int
start_http(server *s, const char *url_text, char *err, size_t err_len)
{
    nng_url *url;
    int rv;
    if ((rv = nng_url_parse(&url, url_text)) != 0 || strcmp(url->u_scheme, "http") != 0) {
        if (rv == 0)
            nng_url_free(url);
        snprintf(err, err_len, "--metrics: '%s' is not an http://HOST:PORT URL", url_text);
        return STOKER_INVALID;
    }
    rv = nng_http_server_hold(&s->http, url);
    nng_url_free(url);
    if (rv != 0) {
        snprintf(err, err_len, "--metrics %s: %s", url_text, nng_strerror(rv));
        return stoker_err_from_nng(rv);
    }
    struct {
        const char *path;
        void (*cb)(nng_aio *);
    } routes[] = {{"/metrics", http_metrics}, {"/status", http_status}, {"/", http_page}};
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        nng_http_handler *h;
        if ((rv = nng_http_handler_alloc(&h, routes[i].path, routes[i].cb)) != 0 ||
            (rv = nng_http_handler_set_method(h, "GET")) != 0 ||
            (rv = nng_http_handler_set_data(h, s, NULL)) != 0 ||
            (rv = nng_http_server_add_handler(s->http, h)) != 0) {
            snprintf(err, err_len, "--metrics: %s", nng_strerror(rv));
            return stoker_err_from_nng(rv);
        }
    }
    if ((rv = nng_http_server_start(s->http)) != 0) {
        snprintf(err, err_len, "--metrics %s: cannot listen: %s", url_text, nng_strerror(rv));
        return rv == NNG_EADDRINUSE ? STOKER_INVALID : stoker_err_from_nng(rv);
    }
    nng_sockaddr sa;
    char host[64] = "";
    if (nng_http_server_get_addr(s->http, &sa) == 0 && sa.s_family == NNG_AF_INET) {
        const uint8_t *a = (const uint8_t *)&sa.s_in.sa_addr;
        snprintf(host, sizeof(host), "%u.%u.%u.%u:%u", a[0], a[1], a[2], a[3],
                 (unsigned)((sa.s_in.sa_port >> 8) | ((sa.s_in.sa_port & 0xff) << 8)) & 0xffff);
        printf("metrics http://%s\n", host);
    } else {
        printf("metrics %s\n", url_text);
    }
    return STOKER_OK;
}

// --- lifecycle ----------------------------------------------------------------------------------

// Creates and starts a listener on url; prints "listening URL" when announce is set. On failure
// err says why; *out is set as soon as the listener exists (the caller closes it).
static int
start_listener(server *s, const char *url, int announce, nng_listener *out, char *err,
               size_t err_len)
{
    nng_listener l;
    int rv;
    if ((rv = nng_listener_create(&l, s->sock, url)) != 0) {
        snprintf(err, err_len, "--listen '%s': %s", url, nng_strerror(rv));
        return STOKER_INVALID;
    }
    *out = l;
    nng_listener_set_size(l, NNG_OPT_RECVMAXSZ, s->max_message_bytes);
    if (stoker_tls_url(url) &&
        (rv = stoker_tls_listener_set(l, url, &s->tls, err, err_len)) != STOKER_OK)
        return rv;
    if ((rv = nng_listener_start(l, 0)) != 0) {
        snprintf(err, err_len, "--listen '%s': cannot listen: %s", url, nng_strerror(rv));
        return rv == NNG_EADDRINUSE ? STOKER_INVALID : stoker_err_from_nng(rv);
    }
    int port = 0;
    if (!announce) {
        return STOKER_OK;
    } else if ((strncmp(url, "tcp://", 6) == 0 || stoker_tls_url(url)) &&
               nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port) == 0) {
        // Print the URL with the port the system chose (for --listen tcp://HOST:0).
        const char *colon = strrchr(url, ':');
        printf("listening %.*s:%d\n", (int)(colon - url), url, port);
    } else {
        printf("listening %s\n", url);
    }
    return STOKER_OK;
}

// watchdog_host.retire: a restart is about to close listener_id; pipe_cb then hands its
// connections to broker_pipe_reset (the lock guards the ring against pipe_cb's reads).
static void
retire_listener(void *ctx, uint32_t listener_id)
{
    server *s = ctx;
    pthread_mutex_lock(&s->lock);
    s->retired[s->n_retired++ % RETIRED_MAX] = listener_id;
    pthread_mutex_unlock(&s->lock);
}

// watchdog_host.start_listener: a listener in place of a stopped one, not announced.
static int
watchdog_start_listener(void *ctx, const char *url, nng_listener *out, char *err, size_t err_len)
{
    return start_listener(ctx, url, 0, out, err, err_len);
}

// Opens the broker's REP socket and its contexts (cfg->contexts requests in flight).
static int
open_socket(server *s, const server_config *cfg, char *err, size_t err_len)
{
    int rv;
    if ((rv = nng_rep0_open(&s->sock)) != 0) {
        snprintf(err, err_len, "cannot open socket: %s", nng_strerror(rv));
        return stoker_err_from_nng(rv);
    }
    s->sock_open = 1;
    nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ, cfg->max_message_bytes);
    nng_pipe_notify(s->sock, NNG_PIPE_EV_REM_POST, pipe_cb, s);
    nng_pipe_notify(s->sock, NNG_PIPE_EV_ADD_POST, pipe_cb, s);
    s->n_ctxs = cfg->contexts;
    if ((s->ctxs = calloc(s->n_ctxs, sizeof(*s->ctxs))) == NULL)
        return STOKER_NOMEM;
    for (uint32_t i = 0; i < s->n_ctxs; i++) {
        rctx *c = &s->ctxs[i];
        c->kind = TOKEN_REP;
        c->srv = s;
        if ((rv = nng_ctx_open(&c->ctx, s->sock)) != 0 ||
            (rv = nng_aio_alloc(&c->aio, ctx_cb, c)) != 0) {
            snprintf(err, err_len, "cannot create context: %s", nng_strerror(rv));
            return stoker_err_from_nng(rv);
        }
    }
    return STOKER_OK;
}

// Starts a listener for each of cfg's addresses, each with its watchdog record and, for tcp://,
// the intake that reads pushes from their own streams (into the arena when there is one).
static int
start_listeners(server *s, const server_config *cfg, char *err, size_t err_len)
{
    int rv;
    for (uint32_t i = 0; i < cfg->n_listen && i < SERVER_MAX_LISTEN; i++) {
        watched *w = &s->listeners[s->n_listeners];
        w->url = cfg->listen[i];
        if ((rv = start_listener(s, w->url, 1, &w->l, err, err_len)) != STOKER_OK)
            return rv;
        atomic_store(&w->id, (unsigned)nng_listener_id(w->l));
        w->errors = watchdog_listener_errors(w->l);
        s->n_listeners++;
        if (!cfg->intake_off && strncmp(w->url, "tcp://", 6) == 0) {
            static const intake_host host = {
                .deliver = intake_deliver, .refuse = intake_refuse, .closed = intake_closed};
            intake_host h = host;
            h.arg = s;
            if (broker_shared_memory(s->b) != NULL) {
                h.stage = stage_in_arena;
                h.unstage = broker_arena_unstage;
                h.stage_arg = broker_shared_memory(s->b);
            }
            if ((rv = intake_start(w->url, cfg->intake_port, cfg->max_message_bytes, &h,
                                   &s->intakes[i], err, err_len)) != STOKER_OK)
                return rv;
        }
    }
    return STOKER_OK;
}

int
server_start(const server_config *cfg, server **out, char *err, size_t err_len)
{
    int rv;
    server *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return STOKER_NOMEM;
    pthread_mutex_init(&s->lock, NULL);
    broker_config bc = cfg->broker;
    bc.describe_peer = describe_peer;
    bc.intake_port = intake_port_of;
    bc.intake_arg = s;
    bc.max_message_bytes = cfg->max_message_bytes;
    bc.max_parked = cfg->contexts > 64 ? cfg->contexts - 32 : cfg->contexts / 2;
    if ((s->b = broker_create(&bc, stoker_now_ms())) == NULL) {
        rv = STOKER_NOMEM;
        goto fail;
    }
    if ((rv = open_socket(s, cfg, err, err_len)) != STOKER_OK)
        goto fail;
    s->max_message_bytes = cfg->max_message_bytes;
    s->trim_free_bytes = cfg->broker.max_bytes / 8;
    if (s->trim_free_bytes < ((size_t)8 << 20))
        s->trim_free_bytes = (size_t)8 << 20;
    if (s->trim_free_bytes > ((size_t)64 << 20))
        s->trim_free_bytes = (size_t)64 << 20;
    s->tls = cfg->tls;
    if (cfg->broker.token != NULL)
        snprintf(s->http_token, sizeof(s->http_token), "%s", cfg->broker.token);
    // The metrics server first: when its address is taken the broker stops before it printed
    // "listening" (which scripts wait for) or accepted a connection.
    if (cfg->metrics_url != NULL &&
        (rv = start_http(s, cfg->metrics_url, err, err_len)) != STOKER_OK)
        goto fail;
    if ((rv = start_listeners(s, cfg, err, err_len)) != STOKER_OK)
        goto fail;
    fflush(stdout);
    for (uint32_t i = 0; i < s->n_ctxs; i++)
        recv_next(&s->ctxs[i]);
    if (pthread_create(&s->tick_thread, NULL, tick_main, s) != 0) {
        rv = STOKER_NOMEM;
        goto fail;
    }
    s->tick_started = 1;
    s->watch = (watchdog_host){.ctx = s,
                               .listeners = s->listeners,
                               .n_listeners = s->n_listeners,
                               .stopping = &s->stopping,
                               .retire = retire_listener,
                               .start_listener = watchdog_start_listener};
    if (pthread_create(&s->watch_thread, NULL, watchdog_main, &s->watch) != 0) {
        rv = STOKER_NOMEM;
        goto fail;
    }
    s->watch_started = 1;
    *out = s;
    return STOKER_OK;
fail:
    server_stop(s);
    return rv;
}

void
server_stop(server *s)
{
    if (s == NULL)
        return;
    atomic_store(&s->stopping, 1);
    if (s->tick_started)
        pthread_join(s->tick_thread, NULL);
    if (s->watch_started)
        pthread_join(s->watch_thread, NULL);
    if (s->http != NULL) {
        nng_http_server_stop(s->http);
        nng_http_server_release(s->http);
    }
    for (uint32_t i = 0; i < SERVER_MAX_LISTEN; i++)
        intake_close(s->intakes[i]);
    if (s->sock_open)
        nng_close(s->sock);
    for (uint32_t i = 0; s->ctxs != NULL && i < s->n_ctxs; i++) {
        if (s->ctxs[i].aio != NULL) {
            nng_aio_stop(s->ctxs[i].aio);
            nng_msg_free(nng_aio_get_msg(s->ctxs[i].aio));
            nng_aio_free(s->ctxs[i].aio);
        }
    }
    free(s->ctxs);
    broker_outbox out = {0};
    broker_destroy(s->b, &out);
    for (size_t i = 0; i < out.n; i++) { // parked requests of intake connections: let them go
        if (*(int *)out.items[i].token == TOKEN_INTAKE) {
            intake_reply(out.items[i].token, out.items[i].msg);
            out.items[i].msg = NULL;
        }
    }
    broker_outbox_fini(&out);
    for (uint32_t i = 0; i < SERVER_MAX_LISTEN; i++)
        intake_destroy(s->intakes[i]);
    pthread_mutex_destroy(&s->lock);
    free(s);
}
