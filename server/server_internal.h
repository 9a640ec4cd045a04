// Private to the broker's transport (server.c) and its listener watchdog (watchdog.c): the
// server's state they share. The public contract is server.h.
#ifndef SERVER_INTERNAL_H
#define SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#include "server.h"
#include "watchdog.h"

typedef struct rctx {
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
    uint32_t retired[RETIRED_MAX]; // ids of listeners closed by a restart (a ring)
    uint32_t n_retired;
    pthread_t watch_thread;
    int watch_started;
};

// Creates and starts a listener on url; prints "listening URL" when announce is set. On failure
// err says why; *out is set as soon as the listener exists (the caller closes it).
int server_start_listener(server *s, const char *url, int announce, nng_listener *out, char *err,
                          size_t err_len);

#endif
