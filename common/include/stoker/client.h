// What producer and trainer clients share: connection options, and fetching the broker's status
// snapshot (its type and renderings are in stoker/status.h).
#ifndef STOKER_CLIENT_H
#define STOKER_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/protocol.h"
#include "stoker/status.h"
#include "stoker/tls.h"

typedef struct stoker_client_options {
    const char *url;   // broker URL: tcp://, ipc://, inproc://, tls+tcp:// (borrowed)
    const char *name;  // shown in the broker's events and status (borrowed; may be NULL)
    const char *token; // auth token (borrowed; may be NULL)
    const char *pool;  // producers: the pool named in the broker's autoscale signal (NULL: default)
    uint64_t session;  // 0: draw a random one; keep it to resume after a restart
    uint32_t request_timeout_ms; // one attempt of one request, beyond any server-side wait
    uint32_t reconnect_max_ms;   // cap of the exponential reconnect backoff
    uint32_t give_up_ms;         // how long a request is retried before STOKER_CONNECTION
    size_t max_message_bytes;    // largest reply accepted
    const volatile int *stop;    // when nonzero, blocking calls return STOKER_INTERRUPTED soon
    stoker_tls_options tls;      // for tls+tcp:// URLs (paths borrowed)
} stoker_client_options;

// Fills defaults: request 3000 ms, reconnect cap 1000 ms, give up after 30000 ms,
// messages up to 256 MiB, random session.
void stoker_client_options_init(stoker_client_options *opts);

// Asks the broker at url for its status, within timeout_ms. *out (owned by the caller, free
// with stoker_status_destroy) is written on success; on failure err holds the reason. Its events
// are the broker's latest (at most 64).
// A tls+tcp:// url needs stoker_status_fetch_tls.
int stoker_status_fetch(const char *url, const char *token, uint32_t timeout_ms,
                        stoker_status **out, char *err, size_t err_len);
// The same with TLS settings for a tls+tcp:// url (tls borrowed for the call; NULL: none). A
// TLS failure (wrong CA, a refused or missing client certificate, a broker that does not speak
// TLS, or a tcp:// url to one that does) returns STOKER_TLS with err saying which, as soon as
// it is found (well within timeout_ms), not a timeout.
int stoker_status_fetch_tls(const char *url, const char *token, const stoker_tls_options *tls,
                            uint32_t timeout_ms, stoker_status **out, char *err, size_t err_len);

// Tells the broker at url (TLS settings and token as for stoker_status_fetch_tls) that a
// controller changed pool from `from` to `to` producers through engine, for why (cut to
// STOKER_REASON_MAX): the broker logs it and adds a SCALED event. Returns STOKER_OK, or an error
// with err saying why (an older broker answers STOKER_INVALID, unknown method).
int stoker_scaled_report(const char *url, const char *token, const stoker_tls_options *tls,
                         uint32_t timeout_ms, const char *pool, uint32_t from, uint32_t to,
                         const char *engine, const char *why, char *err, size_t err_len);

#endif
