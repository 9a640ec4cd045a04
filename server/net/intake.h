// The broker's intake: a listener of its own beside each tcp:// listener, for the producers' push
// streams (common/transport/push_stream.h), which speak nng's SP framing for a REQ peer. nng
// receives a message into memory it allocates zeroed, which the broker then copied into the
// shared-memory arena: three passes over each byte. The intake reads each request straight into
// a buffer of its own (reused, never zeroed), which the decoded request keeps (the queue holds
// it until its examples are acknowledged): one pass less. A large push goes straight into the
// arena where the host has room (intake_host.stage): a batch that is its chunk is then sent
// from there, one pass more less. It handles nothing itself: each
// request goes to the host (the broker, under its lock), each reply comes back by intake_reply.
// It does not decide anything about producers: a connection's end is only told to the host.
#ifndef INTAKE_H
#define INTAKE_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/wire.h"

struct nng_msg;

// Reply tokens the transport hands the broker start with one of these, so that the outbox can
// tell where a reply goes (server.c's REP contexts or an intake connection).
#define TOKEN_REP    1
#define TOKEN_INTAKE 2

// Intake connections' pipe ids, for the broker: above nng's (which stay below 2^31).
#define INTAKE_PIPE_BASE 0x80000000u

typedef struct intake_host {
    void *arg;
    // A request read on connection pipe: the host takes req and answers token (intake_reply),
    // now or later. Called on nng's threads, with no intake lock held.
    void (*deliver)(void *arg, void *token, uint32_t pipe, stoker_request *req);
    // A request that could not be decoded (code, why): answer token as the broker refuses.
    void (*refuse)(void *arg, void *token, uint32_t pipe, int code, const char *why);
    // Connection pipe ended (after its last request was delivered).
    void (*closed)(void *arg, uint32_t pipe);
    // Optional (NULL: none): memory for a push of len bytes whose first blob starts blob_at
    // bytes in (the broker's shared memory, where a batch that is the push's chunk can be sent
    // from without a copy), let go with unstage(stage_arg, buf) once the request is freed; NULL
    // when there is none to spare (the intake's own buffers then). Called on nng's threads.
    uint8_t *(*stage)(void *stage_arg, size_t len, size_t blob_at);
    void (*unstage)(void *stage_arg, void *buf);
    void *stage_arg;
} intake_host;

typedef struct intake intake;

// Listens on listen_url's host (a tcp:// URL of the broker's) at port (0: one the system
// chooses), for requests of at most max_message bytes. STOKER_OK and *out, or an error with err.
int intake_start(const char *listen_url, uint32_t port, size_t max_message, const intake_host *host,
                 intake **out, char *err, size_t err_len);
// The port it listens on.
uint32_t intake_port(const intake *in);
// Stops accepting and closes every connection (their pending requests' tokens stay valid until
// answered or dropped with intake_reply). Accepts NULL; may be called twice.
void intake_close(intake *in);
// Frees it after intake_close, once the host holds no request of it any more (the buffers go
// back to it). Accepts NULL.
void intake_destroy(intake *in);

// Sends msg (a reply; taken) for token, or with msg NULL only lets token go. Any thread; takes
// only the connection's own lock.
void intake_reply(void *token, struct nng_msg *msg);

#endif
