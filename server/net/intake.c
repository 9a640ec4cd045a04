// The broker's intake (see intake.h): an nng stream listener, its connections' reads and writes
// on nng's aio callbacks, and the pool of buffers requests are read into. On the wire, as nng
// 1.5's tcp transport: an 8-byte handshake each way ("\0SP\0", the protocol, two zero bytes),
// then messages, each a big-endian u64 length and the body, whose first 4 bytes are the request
// id (high bit set) that the reply repeats. Only tcp (the push stream of a producer on the
// broker's host pushes by reference through shared memory anyway).
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>

#include "intake.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/sp.h"

#define POOL_KEEP  8           // idle buffers kept for the next requests
#define POOL_MIN   (64 << 10)  // smaller ones are not kept
#define POOL_MAX   (64u << 20) // nor larger ones
#define POOL_BYTES (64u << 20) // idle buffers' bytes in all: the pool's bound beyond --max-bytes
#define BUF_HEADER 16          // a buffer's capacity before its bytes (keeps them 16-aligned)
#define STAGE_MIN  (256 << 10) // smaller pushes are not worth a region of the host's arena

typedef struct intake_conn intake_conn;

typedef struct intake_token {
    int kind; // TOKEN_INTAKE (intake.h)
    intake_conn *c;
    uint32_t id; // the request's id, which its reply repeats
} intake_token;

typedef struct out_frame {
    struct out_frame *next;
    nng_msg *msg; // the reply's body (with the prefix inserted in front)
} out_frame;

struct intake_conn {
    intake *in;
    nng_stream *s;
    uint32_t pipe;
    pthread_mutex_t lock; // refs, closed and the writer's queue
    int refs;             // the reader, each token not answered, the writer while it writes
    int closed;
    intake_conn *next; // in the intake's list (under its lock)
    // The reader (its callback only): what it reads now, as up to two pieces.
    nng_aio *rx;
    // 0 the handshake, 1 a message's length, 2 its body, 3 a large one's request id and the
    // first word of its body (the protobuf part's length: where its blobs start)
    int state;
    uint8_t hs[8], head[8], id[4], word[4];
    uint8_t *buf;
    int staged; // buf is the host's (intake_host.stage), not the pool's
    size_t body_len;
    nng_iov want[2];
    unsigned n_want;
    // The writer: frames queued, the first being written from offset sent.
    nng_aio *tx;
    out_frame *q_head, *q_tail;
    int writing;
    size_t sent;
    uint8_t hs_out[8];
    int hs_sent;
};

struct intake {
    intake_host host;
    size_t max_message;
    uint32_t port;
    nng_stream_listener *l;
    nng_aio *accept;
    pthread_mutex_t lock; // conns, the pool, refs, closing
    intake_conn *conns;
    int closing;
    int refs; // 1 until intake_destroy, plus each connection and each buffer out
    uint8_t *pool[POOL_KEEP];
    uint32_t n_pool;
    size_t pool_bytes; // their capacities' sum
};

static atomic_uint next_pipe = 0;

// --- the pool -----------------------------------------------------------------------------------

static size_t *
cap_of(uint8_t *buf)
{
    return (size_t *)(void *)(buf - BUF_HEADER);
}

static void
intake_unref(intake *in)
{
    pthread_mutex_lock(&in->lock);
    int last = --in->refs == 0;
    pthread_mutex_unlock(&in->lock);
    if (!last)
        return;
    for (uint32_t i = 0; i < in->n_pool; i++)
        free(in->pool[i] - BUF_HEADER);
    pthread_mutex_destroy(&in->lock);
    free(in);
}

// A buffer of at least len bytes, not zeroed; NULL when out of memory.
static uint8_t *
buf_get(intake *in, size_t len)
{
    uint8_t *buf = NULL;
    pthread_mutex_lock(&in->lock);
    for (uint32_t i = 0; i < in->n_pool; i++) {
        size_t cap = *cap_of(in->pool[i]);
        if (cap >= len && cap / 2 <= len) {
            buf = in->pool[i];
            in->pool[i] = in->pool[--in->n_pool];
            in->pool_bytes -= cap;
            break;
        }
    }
    in->refs++;
    pthread_mutex_unlock(&in->lock);
    if (buf != NULL)
        return buf;
    uint8_t *raw = malloc(BUF_HEADER + (len > 0 ? len : 1));
    if (raw == NULL) {
        intake_unref(in);
        return NULL;
    }
    *(size_t *)(void *)raw = len;
    return raw + BUF_HEADER;
}

// stoker_wire_decode_request_buf's buf_free: back to the pool, or freed.
static void
buf_put(void *arg, void *p)
{
    intake *in = arg;
    uint8_t *buf = p;
    size_t cap = *cap_of(buf);
    pthread_mutex_lock(&in->lock);
    int keep = !in->closing && cap >= POOL_MIN && cap <= POOL_MAX && in->n_pool < POOL_KEEP &&
               in->pool_bytes + cap <= POOL_BYTES;
    if (keep) {
        in->pool[in->n_pool++] = buf;
        in->pool_bytes += cap;
    }
    pthread_mutex_unlock(&in->lock);
    if (!keep)
        free(buf - BUF_HEADER);
    intake_unref(in);
}

// --- connections --------------------------------------------------------------------------------

static void
conn_free(intake_conn *c)
{
    intake *in = c->in;
    pthread_mutex_lock(&in->lock);
    for (intake_conn **at = &in->conns; *at != NULL; at = &(*at)->next) {
        if (*at == c) {
            *at = c->next;
            break;
        }
    }
    pthread_mutex_unlock(&in->lock);
    // The aios may be ours to free from their own callbacks: nng_aio_reap does it later.
    nng_aio_reap(c->rx);
    nng_aio_reap(c->tx);
    nng_stream_free(c->s);
    pthread_mutex_destroy(&c->lock);
    free(c);
    intake_unref(in);
}

static void
conn_unref(intake_conn *c)
{
    pthread_mutex_lock(&c->lock);
    int last = --c->refs == 0;
    pthread_mutex_unlock(&c->lock);
    if (last)
        conn_free(c);
}

// Closes c's stream: its reads and writes end with errors, which end their loops.
static void
conn_close(intake_conn *c)
{
    pthread_mutex_lock(&c->lock);
    int was = c->closed;
    c->closed = 1;
    pthread_mutex_unlock(&c->lock);
    if (!was)
        nng_stream_close(c->s);
}

// Writes from the first queued frame (the handshake before any), under c->lock.
static void
write_next(intake_conn *c)
{
    nng_iov iov;
    if (!c->hs_sent) {
        iov = (nng_iov){c->hs_out + c->sent, sizeof(c->hs_out) - c->sent};
    } else if (c->q_head != NULL) {
        nng_msg *m = c->q_head->msg;
        iov = (nng_iov){(uint8_t *)nng_msg_body(m) + c->sent, nng_msg_len(m) - c->sent};
    } else {
        c->writing = 0;
        return;
    }
    c->writing = 1;
    nng_aio_set_iov(c->tx, 1, &iov);
    nng_stream_send(c->s, c->tx);
}

static void
drop_queue(intake_conn *c)
{
    while (c->q_head != NULL) {
        out_frame *f = c->q_head;
        c->q_head = f->next;
        nng_msg_free(f->msg);
        free(f);
    }
    c->q_tail = NULL;
}

static void
tx_cb(void *arg)
{
    intake_conn *c = arg;
    int rv = nng_aio_result(c->tx);
    pthread_mutex_lock(&c->lock);
    if (rv != 0 || c->closed) {
        drop_queue(c);
        c->writing = 0;
        int last = --c->refs == 0;
        pthread_mutex_unlock(&c->lock);
        conn_close(c);
        if (last)
            conn_free(c);
        return;
    }
    c->sent += nng_aio_count(c->tx);
    if (!c->hs_sent) {
        if (c->sent == sizeof(c->hs_out))
            c->hs_sent = 1, c->sent = 0;
    } else if (c->sent == nng_msg_len(c->q_head->msg)) {
        out_frame *f = c->q_head;
        c->q_head = f->next;
        if (c->q_head == NULL)
            c->q_tail = NULL;
        nng_msg_free(f->msg);
        free(f);
        c->sent = 0;
    }
    write_next(c);
    int last = !c->writing && --c->refs == 0;
    pthread_mutex_unlock(&c->lock);
    if (last)
        conn_free(c);
}

void
intake_reply(void *token, nng_msg *msg)
{
    intake_token *t = token;
    intake_conn *c = t->c;
    uint32_t id = t->id;
    free(t);
    out_frame *f = NULL;
    if (msg != NULL) {
        uint8_t prefix[12];
        stoker_sp_put_be(prefix, 4 + (uint64_t)nng_msg_len(msg), 8);
        stoker_sp_put_be(prefix + 8, id, 4);
        if (nng_msg_insert(msg, prefix, sizeof(prefix)) != 0 ||
            (f = calloc(1, sizeof(*f))) == NULL) {
            nng_msg_free(msg); // the producer's call times out and it pushes again
            msg = NULL;
        } else {
            f->msg = msg;
        }
    }
    pthread_mutex_lock(&c->lock);
    if (f != NULL && !c->closed) {
        if (c->q_tail != NULL)
            c->q_tail->next = f;
        else
            c->q_head = f;
        c->q_tail = f;
        f = NULL;
        if (!c->writing) {
            c->refs++; // the writer's
            write_next(c);
        }
    }
    int last = --c->refs == 0; // the token's
    pthread_mutex_unlock(&c->lock);
    if (f != NULL) {
        nng_msg_free(f->msg);
        free(f);
    }
    if (last)
        conn_free(c);
}

// Reads what c->want still asks for.
static void
read_more(intake_conn *c)
{
    nng_aio_set_iov(c->rx, c->n_want, c->want);
    nng_stream_recv(c->s, c->rx);
}

static void
read_into(intake_conn *c, int state, void *a, size_t a_len, void *b, size_t b_len)
{
    c->state = state;
    c->want[0] = (nng_iov){a, a_len};
    c->want[1] = (nng_iov){b, b_len};
    c->n_want = b_len > 0 ? 2 : 1;
    read_more(c);
}

// The reader is done: the connection ends once its tokens are answered.
static void
reader_ends(intake_conn *c, const char *why)
{
    if (why != NULL)
        stoker_warn("bad-request: intake pipe %u: %s; connection closed", c->pipe, why);
    conn_close(c);
    c->in->host.closed(c->in->host.arg, c->pipe);
    conn_unref(c);
}

// Lets go of the buffer c read into (not yet a request's).
static void
conn_buf_put(intake_conn *c)
{
    if (c->buf == NULL)
        return;
    if (c->staged)
        c->in->host.unstage(c->in->host.stage_arg, c->buf);
    else
        buf_put(c->in, c->buf);
    c->buf = NULL;
}

// A whole request is in: decode it and hand it on.
static void
deliver(intake_conn *c)
{
    intake *in = c->in;
    intake_token *t = malloc(sizeof(*t));
    if (t == NULL) {
        conn_buf_put(c);
        reader_ends(c, "out of memory");
        return;
    }
    uint8_t *buf = c->buf;
    // The request gives buf back where it came from: the host's arena or our pool.
    void (*put)(void *, void *) = c->staged ? in->host.unstage : buf_put;
    void *put_arg = c->staged ? in->host.stage_arg : (void *)in;
    c->buf = NULL;
    *t = (intake_token){.kind = TOKEN_INTAKE, .c = c, .id = (uint32_t)stoker_sp_get_be(c->id, 4)};
    pthread_mutex_lock(&c->lock);
    c->refs++;
    pthread_mutex_unlock(&c->lock);
    stoker_request *req;
    char err[256];
    int rv = stoker_wire_decode_request_buf(buf, c->body_len, put, put_arg, &req, err, sizeof(err));
    if (rv == STOKER_OK) {
        in->host.deliver(in->host.arg, t, c->pipe, req);
    } else {
        put(put_arg, buf);
        in->host.refuse(in->host.arg, t, c->pipe, rv, err);
    }
}

static void
rx_cb(void *arg)
{
    intake_conn *c = arg;
    int rv = nng_aio_result(c->rx);
    if (rv != 0) {
        conn_buf_put(c);
        reader_ends(c, NULL); // the peer went, or we closed
        return;
    }
    size_t moved = nng_aio_count(c->rx);
    for (unsigned i = 0; i < c->n_want && moved > 0; i++) {
        size_t step = moved < c->want[i].iov_len ? moved : c->want[i].iov_len;
        c->want[i].iov_buf = (uint8_t *)c->want[i].iov_buf + step;
        c->want[i].iov_len -= step;
        moved -= step;
    }
    while (c->n_want > 0 && c->want[0].iov_len == 0) {
        c->want[0] = c->want[1];
        c->n_want--;
    }
    if (c->n_want > 0) {
        read_more(c);
        return;
    }
    switch (c->state) {
    case 0:
        if (!stoker_sp_handshake_is(c->hs, STOKER_SP_REQ0)) {
            reader_ends(c, "not an SP request peer (handshake)");
            return;
        }
        read_into(c, 1, c->head, sizeof(c->head), NULL, 0);
        return;
    case 1: {
        uint64_t len = stoker_sp_get_be(c->head, 8);
        if (len < 4 || len - 4 > c->in->max_message) {
            char why[128];
            snprintf(why, sizeof(why), "message of %llu bytes (--max-message is %zu)",
                     (unsigned long long)len, c->in->max_message);
            reader_ends(c, why);
            return;
        }
        c->body_len = (size_t)(len - 4);
        if (c->body_len >= STAGE_MIN && c->in->host.stage != NULL) {
            read_into(c, 3, c->id, sizeof(c->id), c->word, sizeof(c->word));
            return;
        }
        c->staged = 0;
        if ((c->buf = buf_get(c->in, c->body_len)) == NULL) {
            reader_ends(c, "out of memory");
            return;
        }
        read_into(c, 2, c->id, sizeof(c->id), c->buf, c->body_len);
        return;
    }
    case 3: {
        // A push's blobs start after the header word and the protobuf part, 8-aligned
        // (common/wire/request.c): the host places them aligned in its arena.
        size_t pb_len = (size_t)c->word[0] | (size_t)c->word[1] << 8 | (size_t)c->word[2] << 16 |
                        (size_t)c->word[3] << 24;
        size_t blob_at = (4 + pb_len + 7) & ~(size_t)7;
        c->buf = blob_at < c->body_len
                     ? c->in->host.stage(c->in->host.stage_arg, c->body_len, blob_at)
                     : NULL;
        c->staged = c->buf != NULL;
        if (c->buf == NULL && (c->buf = buf_get(c->in, c->body_len)) == NULL) {
            reader_ends(c, "out of memory");
            return;
        }
        memcpy(c->buf, c->word, sizeof(c->word));
        read_into(c, 2, c->buf + sizeof(c->word), c->body_len - sizeof(c->word), NULL, 0);
        return;
    }
    default:
        deliver(c);
        pthread_mutex_lock(&c->lock);
        int closed = c->closed;
        pthread_mutex_unlock(&c->lock);
        if (closed) {
            reader_ends(c, NULL);
            return;
        }
        read_into(c, 1, c->head, sizeof(c->head), NULL, 0);
        return;
    }
}

static void
accept_cb(void *arg)
{
    intake *in = arg;
    int rv = nng_aio_result(in->accept);
    if (rv != 0) {
        if (rv != NNG_ECLOSED && rv != NNG_ECANCELED) {
            stoker_warn("intake: accept: %s", nng_strerror(rv));
            nng_stream_listener_accept(in->l, in->accept);
        }
        return;
    }
    nng_stream *s = nng_aio_get_output(in->accept, 0);
    intake_conn *c = calloc(1, sizeof(*c));
    if (c == NULL || nng_aio_alloc(&c->rx, rx_cb, c) != 0 || nng_aio_alloc(&c->tx, tx_cb, c) != 0) {
        if (c != NULL) {
            nng_aio_free(c->rx);
            free(c);
        }
        nng_stream_free(s);
        nng_stream_listener_accept(in->l, in->accept);
        return;
    }
    c->in = in;
    c->s = s;
    c->pipe = INTAKE_PIPE_BASE | (atomic_fetch_add(&next_pipe, 1) & 0x7fffffffu);
    if (c->pipe == INTAKE_PIPE_BASE)
        c->pipe = INTAKE_PIPE_BASE | (atomic_fetch_add(&next_pipe, 1) & 0x7fffffffu);
    pthread_mutex_init(&c->lock, NULL);
    nng_stream_set_bool(s, NNG_OPT_TCP_NODELAY, true);
    stoker_sp_handshake(c->hs_out, STOKER_SP_REP0);
    c->refs = 2; // the reader, the writer (the handshake)
    pthread_mutex_lock(&in->lock);
    int closing = in->closing;
    if (!closing) {
        c->next = in->conns;
        in->conns = c;
        in->refs++;
    }
    pthread_mutex_unlock(&in->lock);
    if (closing) {
        nng_aio_free(c->rx);
        nng_aio_free(c->tx);
        pthread_mutex_destroy(&c->lock);
        free(c);
        nng_stream_free(s);
        return;
    }
    pthread_mutex_lock(&c->lock);
    write_next(c);
    pthread_mutex_unlock(&c->lock);
    read_into(c, 0, c->hs, sizeof(c->hs), NULL, 0);
    nng_stream_listener_accept(in->l, in->accept);
}

// --- the listener -------------------------------------------------------------------------------

int
intake_start(const char *listen_url, uint32_t port, size_t max_message, const intake_host *host,
             intake **out, char *err, size_t err_len)
{
    // tcp://HOST:PORT -> tcp://HOST:port
    const char *colon = strrchr(listen_url, ':');
    if (strncmp(listen_url, "tcp://", 6) != 0 || colon == NULL || colon < listen_url + 6)
        return stoker_errorf(err, err_len, STOKER_INVALID, "intake: '%s' is not a tcp:// URL",
                             listen_url);
    char url[600];
    snprintf(url, sizeof(url), "%.*s:%u", (int)(colon - listen_url), listen_url, port);
    intake *in = calloc(1, sizeof(*in));
    if (in == NULL)
        return STOKER_NOMEM;
    in->host = *host;
    in->max_message = max_message;
    in->refs = 1;
    pthread_mutex_init(&in->lock, NULL);
    int rv;
    if ((rv = nng_stream_listener_alloc(&in->l, url)) != 0 ||
        (rv = nng_aio_alloc(&in->accept, accept_cb, in)) != 0) {
        snprintf(err, err_len, "intake %s: %s", url, nng_strerror(rv));
        goto fail;
    }
    if ((rv = nng_stream_listener_listen(in->l)) != 0) {
        snprintf(err, err_len, "intake %s: cannot listen: %s", url, nng_strerror(rv));
        goto fail;
    }
    int bound = 0;
    nng_stream_listener_get_int(in->l, NNG_OPT_TCP_BOUND_PORT, &bound);
    in->port = (uint32_t)bound;
    nng_stream_listener_accept(in->l, in->accept);
    *out = in;
    return STOKER_OK;
fail:
    nng_aio_free(in->accept);
    nng_stream_listener_free(in->l);
    pthread_mutex_destroy(&in->lock);
    free(in);
    return rv == NNG_EADDRINUSE ? STOKER_INVALID : stoker_err_from_nng(rv);
}

uint32_t
intake_port(const intake *in)
{
    return in->port;
}

void
intake_close(intake *in)
{
    if (in == NULL)
        return;
    pthread_mutex_lock(&in->lock);
    int was = in->closing;
    in->closing = 1;
    pthread_mutex_unlock(&in->lock);
    if (was)
        return;
    nng_stream_listener_close(in->l);
    nng_aio_stop(in->accept);
    // Close every connection and wait until its callbacks are done (none may reach the host
    // after this returns); each frees itself once its tokens are answered too.
    pthread_mutex_lock(&in->lock);
    size_t n = 0, cap = 0;
    intake_conn **held = NULL;
    for (intake_conn *c = in->conns; c != NULL; c = c->next)
        cap++;
    if (cap > 0 && (held = malloc(cap * sizeof(*held))) == NULL)
        cap = 0; // out of memory: closed below without waiting
    for (intake_conn *c = in->conns; c != NULL; c = c->next) {
        pthread_mutex_lock(&c->lock);
        int alive = c->refs > 0; // 0: being freed, its callbacks over
        if (alive && n < cap)
            c->refs++, held[n++] = c;
        int had_closed = c->closed;
        c->closed = 1;
        pthread_mutex_unlock(&c->lock);
        if (alive && !had_closed)
            nng_stream_close(c->s);
    }
    pthread_mutex_unlock(&in->lock);
    for (size_t i = 0; i < n; i++) {
        nng_aio_stop(held[i]->rx);
        nng_aio_stop(held[i]->tx);
        conn_unref(held[i]);
    }
    free(held);
}

void
intake_destroy(intake *in)
{
    if (in == NULL)
        return;
    intake_close(in);
    nng_aio_free(in->accept);
    nng_stream_listener_free(in->l);
    in->accept = NULL;
    in->l = NULL;
    intake_unref(in);
}
