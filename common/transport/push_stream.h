// Private to libstoker: the producer's pushes written straight from the chunk's own buffers.
//
// nng's REQ socket sends only nng messages: each push would be copied into one (which nng zeroes
// when it allocates it) and the message freed once sent, so the producer passed over every byte
// three times (zero, copy, send) where a raw sender passes once. A push stream is a connection of
// its own to the broker that speaks nng's SP framing for a REQ peer (the broker's REP socket sees
// one more peer; nothing changes on its side) and hands the kernel the chunk's blobs where they
// are. tcp:// and ipc:// only; for other URLs (tls+tcp://, ws://) pushes keep the REQ socket.
//
// The stream is the push thread's alone, with at most two requests out (a pipelined producer's;
// replies are matched by request id). Any failure closes it and the call reports a transport
// error like the socket's; the next call dials again (after a pause). An abandoned call (a stop)
// leaves the stream unusable but open until push_stream_close, which follows goodbye. The broker
// judges a producer's liveness by the connection of its hello, not by this one.
#ifndef STOKER_PUSH_STREAM_H
#define STOKER_PUSH_STREAM_H

#include <stdatomic.h>
#include <stdint.h>

#include <nng/nng.h>

#include "conn.h"
#include "stoker/wire.h"

typedef struct push_stream {
    char url[512];
    int ipc;    // the ipc:// framing (a type byte before each length)
    int usable; // the URL is one the stream speaks, and STOKER_PUSH_STREAM is not 0
    size_t max_reply;
    const char *token; // said in an observer hello on each new connection ("" or NULL: none)
    uint64_t session;
    nng_stream_dialer *dialer;
    // The broker's intake (its hello says the port; server/intake.h), dialed before url when
    // set: same framing, on the host of url. Set from any thread; the rest is the pusher's.
    _Atomic uint32_t intake_port;
    _Atomic uint32_t intake_said; // counts the hellos that said it
    uint32_t intake_dialed;       // the port intake_dialer is for (0: none)
    uint32_t intake_seen;         // intake_said when intake_failed was last cleared
    int intake_failed;            // it could not be reached: url until the next hello
    nng_stream_dialer *intake_dialer;
    char intake_url[520];
    nng_aio *aio; // every dial, send and receive, one at a time (the pusher's), waited on w
    conn_waiter w;
    nng_stream *s;    // NULL: not connected
    int poisoned;     // an abandoned call left the stream in the middle of a message
    uint32_t next_id; // request ids, as nng's REQ numbers them (high bit set on the wire)
    nng_msg *stash;   // a reply that came before the one being waited for, or NULL
    uint32_t stash_id;
    uint64_t redial_at_ms; // after a failed dial or a failure, not before then
    uint64_t conns;        // connections made so far (push_stream_conn)
    int said_fallback;     // "pushing over the socket" logged for the current outage
    _Atomic int streaming; // connected and usable: read by other threads (push_stream_ready)
} push_stream;

// Sets ps up for url (no connection yet). Never fails: an unusable URL makes every call answer
// PUSH_STREAM_UNUSED.
void push_stream_init(push_stream *ps, const char *url, size_t max_reply, const char *token,
                      uint64_t session);
void push_stream_close(push_stream *ps);

// The broker said (in a hello reply) its intake is at port (0: none) on url's host (tcp://
// only): the next connection goes there, and to url when it cannot be reached, until the next
// hello. Any thread.
void push_stream_set_intake(push_stream *ps, uint32_t port);

// Whether pushes are going over the stream now (then a push encoded ahead into a socket
// message is wasted work). Any thread.
int push_stream_ready(const push_stream *ps);

#define PUSH_STREAM_UNUSED 1 // not an error: send this request over the socket instead

// Sends req and waits for its reply, timeout_ms in all, watching stop (may be NULL) as conn_call
// does. Returns STOKER_OK with *out (free with stoker_reply_free), PUSH_STREAM_UNUSED when the
// stream cannot be used now (nothing was sent), or a transport code (STOKER_TIMEOUT,
// STOKER_CONNECTION, STOKER_INTERRUPTED) with a reason in err, the request possibly applied.
int push_stream_call(push_stream *ps, const stoker_request *req, uint32_t timeout_ms,
                     conn_stop *stop, stoker_reply **out, char *err, size_t err_len);

// Which connection the stream is on (counts up with each new one); replies of requests sent on
// an earlier connection are lost.
uint64_t push_stream_conn(const push_stream *ps);

// push_stream_call in two halves, so that a second request can go out before the first one's
// reply is read: push_stream_send (same returns; *id names the reply), then
// push_stream_receive(id) (STOKER_CONNECTION when the stream failed meanwhile).
int push_stream_send(push_stream *ps, const stoker_request *req, uint32_t timeout_ms,
                     conn_stop *stop, uint32_t *id, char *err, size_t err_len);
int push_stream_receive(push_stream *ps, uint32_t id, uint32_t timeout_ms, conn_stop *stop,
                        stoker_reply **out, char *err, size_t err_len);

#endif
