// The broker's listener watchdog.
//
// nng 1.5.2 (Debian 12's) ends a listener's accept loop for good when a connection fails during
// the SP handshake with NNG_ECLOSED, which its listener takes for "listener closed". On ipc://
// that is what a peer causes that connects and is gone before the broker has written its 8-byte
// header: the write fails with EPIPE, which nng maps to NNG_ECLOSED. From then on no new
// connection is accepted while the open ones keep working: a killed client, a client that gave up
// at the wrong moment, or any local process can silently shut the broker to newcomers (the chaos
// test found it as a broker that stopped answering Status). The watchdog notices and restarts the
// listener: four times a second it reads the listener's accept-error counters (nng's
// statistics); when they moved, it probes the listener with a raw connection that completes the
// SP handshake, and when the socket did not accept it twice in a row, it closes the stopped
// listener and starts a new one on the same address. Closing it also closes the connections it
// had accepted, and those that reached it after it stopped (they would wait forever: the
// transport answered their handshake, the socket never saw them): every peer reconnects on its
// own; producers are not counted as lost (broker_pipe_reset); a trainer's leases are redelivered,
// and the trainer client drops what it had seen before. tls+tcp:// listeners are not probed (a
// probe would need a TLS handshake); their failed TLS handshakes (nng's "auth" counter) are
// logged instead, as tls-handshake-failed (nng 1.5.2 does not say which peer failed).
// It does not create the listeners nor handle connections (server.c).
#ifndef WATCHDOG_H
#define WATCHDOG_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

// A listener and what the watchdog knows of it.
typedef struct watched {
    nng_listener l;
    atomic_uint id;        // l's id, read by pipe_cb
    atomic_ulong accepted; // connections it accepted (pipe_cb counts them)
    const char *url;       // borrowed from the configuration
    uint64_t errors;       // its accept errors as last read
    int strikes;           // probes in a row that got no answer
    // tls+tcp:// listeners: failed TLS handshakes counted (nng's "auth") and reported so far.
    uint64_t tls_failed, tls_reported, tls_said_ms;
} watched;

// The listener's accept errors so far ("other" and "canceled" in nng's statistics), or
// UINT64_MAX when statistics cannot be read (then every check probes).
uint64_t watchdog_listener_errors(nng_listener l);

// The listener's failed TLS handshakes so far ("auth" in nng's statistics: NNG_ECRYPTO and
// NNG_EPEERAUTH), or UINT64_MAX when statistics cannot be read.
uint64_t watchdog_listener_tls_failures(nng_listener l);

// What the watchdog is handed (server.c fills it in before starting the thread): the listeners
// it watches and the calls into their owner that a restart needs. It stays valid, and
// listeners[0..n_listeners) in place, until the thread has returned.
typedef struct watchdog_host {
    void *ctx; // the owner's, passed to the calls below
    watched *listeners;
    uint32_t n_listeners;
    atomic_int *stopping; // nonzero: the watchdog returns
    // Called before a stopped listener of this id is closed, so that the connections its closing
    // closes are known to be a restart's (server.c: broker_pipe_reset). May take a lock briefly.
    void (*retire)(void *ctx, uint32_t listener_id);
    // Creates and starts a listener on url (not announced). On failure err says why; *out is set
    // as soon as the listener exists (the watchdog then closes it).
    int (*start_listener)(void *ctx, const char *url, nng_listener *out, char *err, size_t err_len);
} watchdog_host;

// Thread body: arg is the watchdog_host whose listeners it watches, until *stopping. A restart
// calls retire (the server takes its lock briefly, never across I/O) and start_listener.
void *watchdog_main(void *arg);

#endif
