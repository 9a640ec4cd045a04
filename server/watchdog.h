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
// probe would need a TLS handshake).
// It does not create the listeners nor handle connections (server.c).
#ifndef WATCHDOG_H
#define WATCHDOG_H

#include <stdatomic.h>
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
} watched;

// The listener's accept errors so far ("other" and "canceled" in nng's statistics), or
// UINT64_MAX when statistics cannot be read (then every check probes).
uint64_t watchdog_listener_errors(nng_listener l);

// Thread body: arg is the struct server whose listeners it watches, until the server is
// stopping. A restart takes the server's lock briefly (to retire the old listener's id), never
// across I/O.
void *watchdog_main(void *arg);

#endif
