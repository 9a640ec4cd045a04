// The producer's push stream (push_stream.h): nng's SP framing for a REQ peer, written by hand
// on an nng stream. On the wire (as nng 1.5's tcp and ipc transports): an 8-byte handshake each
// way ("\0SP\0", the protocol number, two zero bytes), then messages, each an optional type byte
// (ipc: 1), a big-endian u64 length, and the body. A request's body starts with its 32-bit id,
// high bit set (the REP peer copies it into the reply); then the stoker message.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "push_stream.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/sp.h"

#define ID_BIT           0x80000000u
#define REDIAL_PAUSE_MS  1000 // after a failure, pushes use the socket this long
#define DIAL_TIMEOUT_MS  2000
#define MAX_IOV          8 // nng 1.5's limit per operation
#define MAX_FRAME_PREFIX 13

static int
has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

void
push_stream_init(push_stream *ps, const char *url, size_t max_reply, const char *token,
                 uint64_t session)
{
    memset(ps, 0, sizeof(*ps));
    snprintf(ps->url, sizeof(ps->url), "%s", url);
    ps->max_reply = max_reply;
    ps->token = token;
    ps->session = session;
    ps->ipc = has_prefix(url, "ipc://");
    const char *env = getenv("STOKER_PUSH_STREAM");
    int wanted = env == NULL || strcmp(env, "0") != 0;
    int spoken = ps->ipc || has_prefix(url, "tcp://") || has_prefix(url, "tcp4://") ||
                 has_prefix(url, "tcp6://");
    if (!wanted || !spoken || nng_stream_dialer_alloc(&ps->dialer, url) != 0)
        return;
    if (conn_waiter_init(&ps->w) != 0) {
        nng_stream_dialer_free(ps->dialer);
        ps->dialer = NULL;
        return;
    }
    if (nng_aio_alloc(&ps->aio, conn_waiter_done, &ps->w) != 0) {
        conn_waiter_fini(&ps->w);
        nng_stream_dialer_free(ps->dialer);
        ps->dialer = NULL;
        return;
    }
    ps->usable = 1;
    if (!ps->ipc)
        nng_stream_dialer_set_bool(ps->dialer, NNG_OPT_TCP_NODELAY, true);
}

// Closes the connection; pushes use the socket for the next REDIAL_PAUSE_MS.
static void
drop(push_stream *ps)
{
    if (ps->s != NULL) {
        nng_stream_close(ps->s);
        nng_stream_free(ps->s);
        ps->s = NULL;
    }
    nng_msg_free(ps->stash); // nng_msg_free(NULL) is a no-op
    ps->stash = NULL;
    atomic_store(&ps->streaming, 0);
    ps->redial_at_ms = stoker_now_ms() + REDIAL_PAUSE_MS;
}

void
push_stream_set_intake(push_stream *ps, uint32_t port)
{
    if (ps->ipc)
        return;
    atomic_store(&ps->intake_port, port);
    atomic_fetch_add(&ps->intake_said, 1);
}

void
push_stream_close(push_stream *ps)
{
    drop(ps);
    if (ps->intake_dialer != NULL)
        nng_stream_dialer_free(ps->intake_dialer);
    ps->intake_dialer = NULL;
    if (ps->dialer != NULL) {
        nng_aio_free(ps->aio);
        conn_waiter_fini(&ps->w);
        nng_stream_dialer_free(ps->dialer);
    }
    ps->dialer = NULL;
    ps->aio = NULL;
    ps->usable = 0;
}

static int
ready(const push_stream *ps, uint64_t now)
{
    return ps->usable && !ps->poisoned && (ps->s != NULL || now >= ps->redial_at_ms);
}

// Sends (sending) or receives all of pieces on the connected stream, in order, by deadline. 0
// or an nng error (NNG_EINTR: stop gave up).
static int
transfer(push_stream *ps, int sending, stoker_wire_piece *pieces, uint32_t n, uint64_t deadline,
         conn_stop *stop)
{
    uint32_t i = 0;
    size_t off = 0; // into pieces[i]
    for (;;) {
        while (i < n && off == pieces[i].len)
            i++, off = 0;
        if (i == n)
            return 0;
        nng_iov iov[MAX_IOV];
        unsigned k = 0;
        for (uint32_t j = i; j < n && k < MAX_IOV; j++) {
            size_t skip = j == i ? off : 0;
            if (pieces[j].len > skip)
                iov[k++] = (nng_iov){(uint8_t *)pieces[j].buf + skip, pieces[j].len - skip};
        }
        uint64_t now = stoker_now_ms();
        if (now >= deadline)
            return NNG_ETIMEDOUT;
        nng_aio_set_timeout(ps->aio, (nng_duration)(deadline - now));
        nng_aio_set_iov(ps->aio, k, iov);
        if (sending)
            nng_stream_send(ps->s, ps->aio);
        else
            nng_stream_recv(ps->s, ps->aio);
        conn_waiter_wait(ps->aio, &ps->w, stop);
        int rv = nng_aio_result(ps->aio);
        if (rv != 0)
            return rv;
        size_t moved = nng_aio_count(ps->aio);
        if (moved == 0)
            return NNG_ECONNSHUT;
        while (moved > 0) {
            size_t left = pieces[i].len - off;
            size_t step = moved < left ? moved : left;
            off += step, moved -= step;
            if (off == pieces[i].len)
                i++, off = 0;
        }
    }
}

static int
transfer_buf(push_stream *ps, int sending, void *buf, size_t len, uint64_t deadline,
             conn_stop *stop)
{
    stoker_wire_piece p = {buf, len};
    return transfer(ps, sending, &p, 1, deadline, stop);
}

// A transport failure: the stream is closed (or, when stop gave up, left open and unusable).
static int
failed(push_stream *ps, int nng_rv, const char *doing, char *err, size_t err_len)
{
    if (nng_rv == NNG_EINTR) {
        ps->poisoned = 1;
        atomic_store(&ps->streaming, 0);
        snprintf(err, err_len, "%s: abandoned on stop", doing);
        return STOKER_INTERRUPTED;
    }
    snprintf(err, err_len, "push stream: %s: %s", doing, nng_strerror(nng_rv));
    drop(ps);
    return nng_rv == NNG_ETIMEDOUT ? STOKER_TIMEOUT : STOKER_CONNECTION;
}

// Decodes the reply in msg (its id already trimmed).
static int
decode(push_stream *ps, nng_msg *msg, stoker_reply **out, char *err, size_t err_len)
{
    int rv = stoker_wire_decode_reply_msg(msg, out, err, err_len);
    if (rv != STOKER_OK) {
        nng_msg_free(msg);
        drop(ps);
    }
    return rv;
}

// Whether a is an id issued before b (ids count up from 1 with the high bit set).
static int
earlier(uint32_t a, uint32_t b)
{
    return (a & ~ID_BIT) < (b & ~ID_BIT);
}

// Receives the reply to request id. With two requests out, the later one's reply may come
// first: it is kept (the stash) for its own receive. Replies to requests given up on (a
// timeout after the whole request was sent) are read and dropped.
static int
receive_reply(push_stream *ps, uint32_t id, uint64_t deadline, conn_stop *stop, stoker_reply **out,
              char *err, size_t err_len)
{
    if (ps->stash != NULL && earlier(ps->stash_id, id)) {
        nng_msg_free(ps->stash); // its request was pushed again: nobody will ask for it
        ps->stash = NULL;
    }
    if (ps->stash != NULL && ps->stash_id == id) {
        nng_msg *msg = ps->stash;
        ps->stash = NULL;
        return decode(ps, msg, out, err, err_len);
    }
    for (;;) {
        uint8_t head[9];
        size_t head_len = ps->ipc ? 9 : 8;
        int rv = transfer_buf(ps, 0, head, head_len, deadline, stop);
        if (rv != 0)
            return failed(ps, rv, "receive", err, err_len);
        if (ps->ipc && head[0] != 1)
            return failed(ps, NNG_EPROTO, "receive", err, err_len);
        uint64_t len = stoker_sp_get_be(head + head_len - 8, 8);
        if (len < 4 || len - 4 > ps->max_reply)
            return failed(ps, len < 4 ? NNG_EPROTO : NNG_EMSGSIZE, "receive", err, err_len);
        nng_msg *msg;
        if ((rv = nng_msg_alloc(&msg, (size_t)len)) != 0)
            return failed(ps, rv, "receive", err, err_len);
        if ((rv = transfer_buf(ps, 0, nng_msg_body(msg), (size_t)len, deadline, stop)) != 0) {
            nng_msg_free(msg);
            return failed(ps, rv, "receive", err, err_len);
        }
        uint32_t got = (uint32_t)stoker_sp_get_be(nng_msg_body(msg), 4);
        nng_msg_trim(msg, 4);
        if (got == id)
            return decode(ps, msg, out, err, err_len);
        if ((got & ID_BIT) != 0 && earlier(got, id)) {
            nng_msg_free(msg); // a late reply
            continue;
        }
        if ((got & ID_BIT) != 0 && !earlier(ps->next_id | ID_BIT, got) && ps->stash == NULL) {
            ps->stash = msg; // the reply to a later request, out first
            ps->stash_id = got;
            continue;
        }
        nng_msg_free(msg);
        return failed(ps, NNG_EPROTO, "receive", err, err_len);
    }
}

// Sends req on the connected stream; *id names its reply.
static int
send_request(push_stream *ps, const stoker_request *req, uint64_t deadline, conn_stop *stop,
             uint32_t *id, char *err, size_t err_len)
{
    stoker_wire_pieces body;
    int rv = stoker_wire_encode_request_pieces(req, &body);
    if (rv != STOKER_OK) {
        snprintf(err, err_len, "cannot encode request: %s", stoker_strerror(rv));
        return rv;
    }
    ps->next_id = (ps->next_id + 1) & ~ID_BIT;
    if (ps->next_id == 0)
        ps->next_id = 1;
    *id = ps->next_id | ID_BIT;
    uint8_t prefix[MAX_FRAME_PREFIX];
    size_t at = 0;
    if (ps->ipc)
        prefix[at++] = 1;
    stoker_sp_put_be(prefix + at, 4 + (uint64_t)body.total, 8);
    stoker_sp_put_be(prefix + at + 8, *id, 4);
    stoker_wire_piece pieces[1 + sizeof(body.piece) / sizeof(body.piece[0])];
    pieces[0] = (stoker_wire_piece){prefix, at + 12};
    memcpy(pieces + 1, body.piece, body.n * sizeof(body.piece[0]));
    rv = transfer(ps, 1, pieces, body.n + 1, deadline, stop);
    stoker_wire_pieces_free(&body);
    return rv != 0 ? failed(ps, rv, "send", err, err_len) : STOKER_OK;
}

// One request and its reply on the connected stream.
static int
round_trip(push_stream *ps, const stoker_request *req, uint64_t deadline, conn_stop *stop,
           stoker_reply **out, char *err, size_t err_len)
{
    uint32_t id;
    int rv = send_request(ps, req, deadline, stop, &id, err, err_len);
    return rv != STOKER_OK ? rv : receive_reply(ps, id, deadline, stop, out, err, err_len);
}

// Dials with dialer, exchanges the SP handshake, and says an observer's hello when the broker
// wants a token.
static int
connect_with(push_stream *ps, nng_stream_dialer *dialer, uint64_t deadline, conn_stop *stop,
             char *err, size_t err_len)
{
    uint64_t now = stoker_now_ms();
    uint64_t left = deadline > now ? deadline - now : 1;
    nng_aio_set_timeout(ps->aio, (nng_duration)(left < DIAL_TIMEOUT_MS ? left : DIAL_TIMEOUT_MS));
    nng_stream_dialer_dial(dialer, ps->aio);
    conn_waiter_wait(ps->aio, &ps->w, stop);
    int rv = nng_aio_result(ps->aio);
    if (rv == 0)
        ps->s = nng_aio_get_output(ps->aio, 0);
    if (rv != 0) {
        snprintf(err, err_len, "dial: %s", nng_strerror(rv));
        return rv == NNG_EINTR ? STOKER_INTERRUPTED : STOKER_CONNECTION;
    }
    uint8_t mine[8], theirs[8];
    stoker_sp_handshake(mine, STOKER_SP_REQ0);
    if ((rv = transfer_buf(ps, 1, mine, sizeof(mine), deadline, stop)) != 0 ||
        (rv = transfer_buf(ps, 0, theirs, sizeof(theirs), deadline, stop)) != 0) {
        snprintf(err, err_len, "handshake: %s", nng_strerror(rv));
        drop(ps);
        return rv == NNG_EINTR ? STOKER_INTERRUPTED : STOKER_CONNECTION;
    }
    if (!stoker_sp_handshake_is(theirs, STOKER_SP_REP0)) {
        snprintf(err, err_len, "handshake: the peer is not a stoker broker (protocol %u)",
                 (unsigned)stoker_sp_get_be(theirs + 4, 2));
        drop(ps);
        return STOKER_CONNECTION;
    }
    if (ps->token == NULL || ps->token[0] == '\0')
        return STOKER_OK;
    stoker_request hello = {
        .method = STOKER_HELLO, .session = ps->session, .role = STOKER_ROLE_OBSERVER};
    snprintf(hello.name, sizeof(hello.name), "push-stream");
    snprintf(hello.token, sizeof(hello.token), "%s", ps->token);
    stoker_reply *rep = NULL;
    if ((rv = round_trip(ps, &hello, deadline, stop, &rep, err, err_len)) != STOKER_OK)
        return rv;
    rv = rep->code;
    if (rv != STOKER_OK) {
        snprintf(err, err_len, "hello: %s", rep->message);
        drop(ps);
    }
    stoker_reply_free(rep);
    return rv;
}

// The dialer of the intake the broker said, made anew when it says another port; NULL when
// there is none or it could not be reached.
static nng_stream_dialer *
intake_dialer(push_stream *ps)
{
    uint32_t port = atomic_load(&ps->intake_port);
    uint32_t said = atomic_load(&ps->intake_said);
    if (said != ps->intake_seen) { // a hello since it failed: the broker may be a new one
        ps->intake_seen = said;
        ps->intake_failed = 0;
    }
    if (port != ps->intake_dialed) {
        if (ps->intake_dialer != NULL)
            nng_stream_dialer_free(ps->intake_dialer);
        ps->intake_dialer = NULL;
        ps->intake_dialed = port;
        ps->intake_failed = 0;
        const char *colon = strrchr(ps->url, ':');
        if (port != 0 && colon != NULL) {
            snprintf(ps->intake_url, sizeof(ps->intake_url), "%.*s:%u", (int)(colon - ps->url),
                     ps->url, port);
            if (nng_stream_dialer_alloc(&ps->intake_dialer, ps->intake_url) == 0)
                nng_stream_dialer_set_bool(ps->intake_dialer, NNG_OPT_TCP_NODELAY, true);
            else
                ps->intake_dialer = NULL;
        }
    }
    return ps->intake_failed ? NULL : ps->intake_dialer;
}

// Connects to the broker's intake when it said one, else (or when that fails) to url.
static int
connect_stream(push_stream *ps, uint64_t deadline, conn_stop *stop, char *err, size_t err_len)
{
    nng_stream_dialer *intake = intake_dialer(ps);
    if (intake != NULL) {
        char why[256];
        int rv = connect_with(ps, intake, deadline, stop, why, sizeof(why));
        if (rv == STOKER_OK || rv == STOKER_INTERRUPTED) {
            if (rv != STOKER_OK)
                snprintf(err, err_len, "%s", why);
            return rv;
        }
        if (ps->s != NULL) { // the handshake or the hello failed: not the intake
            nng_stream_close(ps->s);
            nng_stream_free(ps->s);
            ps->s = NULL;
        }
        ps->intake_failed = 1;
        stoker_info("push-stream: the broker's intake %s: %s; pushing to %s", ps->intake_url, why,
                    ps->url);
    }
    return connect_with(ps, ps->dialer, deadline, stop, err, err_len);
}

int
push_stream_ready(const push_stream *ps)
{
    return atomic_load(&ps->streaming);
}

int
push_stream_send(push_stream *ps, const stoker_request *req, uint32_t timeout_ms, conn_stop *stop,
                 uint32_t *id, char *err, size_t err_len)
{
    uint64_t now = stoker_now_ms();
    if (!ready(ps, now))
        return PUSH_STREAM_UNUSED;
    uint64_t deadline = now + timeout_ms;
    if (ps->s == NULL) {
        char why[256];
        int rv = connect_stream(ps, deadline, stop, why, sizeof(why));
        if (rv == STOKER_INTERRUPTED) {
            drop(ps); // nothing of the push was sent
            snprintf(err, err_len, "%s", why);
            return rv;
        }
        if (rv != STOKER_OK) {
            drop(ps);
            if (!ps->said_fallback)
                stoker_info("push-stream: %s: %s; pushing over the socket meanwhile", ps->url, why);
            ps->said_fallback = 1;
            return PUSH_STREAM_UNUSED;
        }
        stoker_debug("push-stream: connected to %s: pushes go from the chunks' own buffers",
                     ps->intake_dialer != NULL && !ps->intake_failed ? ps->intake_url : ps->url);
        ps->said_fallback = 0;
        ps->conns++;
        atomic_store(&ps->streaming, 1);
    }
    return send_request(ps, req, deadline, stop, id, err, err_len);
}

uint64_t
push_stream_conn(const push_stream *ps)
{
    return ps->s != NULL ? ps->conns : 0;
}

int
push_stream_receive(push_stream *ps, uint32_t id, uint32_t timeout_ms, conn_stop *stop,
                    stoker_reply **out, char *err, size_t err_len)
{
    if (ps->s == NULL || ps->poisoned) {
        snprintf(err, err_len, "push stream: closed before the reply came");
        return STOKER_CONNECTION;
    }
    return receive_reply(ps, id, stoker_now_ms() + timeout_ms, stop, out, err, err_len);
}

int
push_stream_call(push_stream *ps, const stoker_request *req, uint32_t timeout_ms, conn_stop *stop,
                 stoker_reply **out, char *err, size_t err_len)
{
    uint32_t id;
    int rv = push_stream_send(ps, req, timeout_ms, stop, &id, err, err_len);
    return rv != STOKER_OK ? rv : push_stream_receive(ps, id, timeout_ms, stop, out, err, err_len);
}
