// The broker's transport: an nng REP socket with a pool of contexts (a parked request keeps its
// context until answered), pipe notifications for lost peers, a tick thread for deadlines, and
// the HTTP server for /metrics and /status. All broker state is behind one lock, held briefly
// and never across I/O: replies are sent after unlocking.
#ifndef SERVER_H
#define SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "broker.h"
#include "stoker/tls.h"

#define SERVER_MAX_LISTEN 8

typedef struct server server;

typedef struct server_config {
    const char *listen[SERVER_MAX_LISTEN]; // borrowed
    uint32_t n_listen;
    const char *metrics_url; // http://HOST:PORT or NULL
    size_t max_message_bytes;
    uint32_t contexts; // requests handled or parked at once
    // The intake beside each tcp:// listener (intake.h): its port (0: the system picks one),
    // or none with intake_off.
    uint32_t intake_port;
    int intake_off;
    stoker_tls_options tls; // for tls+tcp:// listeners
    broker_config broker;
} server_config;

// Starts listening; prints "listening URL" and "metrics URL" lines (with the real ports) to
// stdout. On failure nothing is left running and err says what failed.
int server_start(const server_config *cfg, server **out, char *err, size_t err_len);
// Stops listening and frees everything; accepts NULL.
void server_stop(server *s);

#endif
