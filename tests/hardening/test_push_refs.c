// Pushes by reference against the real broker: a producer on the broker's host hands it a sealed
// memfd over the arena's Unix socket (common/transport/push_pool.h) and its pushes then name only
// offsets in it. The broker offers the socket only to a producer that asks; takes a memfd only with
// a ticket it gave, once, sealed against shrinking (an unsealed one could be shrunk under its reads
// and fault it); resolves a push only for the session the memfd came with and only inside the
// memfd, 8-byte aligned; and trainers get exactly the bytes the producer wrote, on either path
// (socket or the broker's own shared memory), even after the producer is gone. Every refusal
// leaves the broker serving.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "push_pool.h"
#include "helpers.h"
#include "stoker/arena.h"
#include "stoker/clock.h"
#include "stoker/error.h"

TestSuite(push_refs, .init = h_setup, .fini = h_teardown, .timeout = 60);

#define POOL_BYTES (1u << 20)

// A broker on ipc:// whose stderr goes to broker.log (the refusals are WARN lines there).
static proc_child *
start_broker(char *url, const char *const *extra)
{
    testdir_ipc_url(url, 256, "b");
    return proc_broker_start(url, extra, &(proc_io){.capture = 1, .log = "broker.log"});
}

// Waits (at most 3 s) for needle in broker.log: the broker logs from its own thread.
static int
log_has(const char *needle)
{
    uint64_t deadline = stoker_now_ms() + 3000;
    while (!testdir_contains(testdir_file("broker.log"), needle)) {
        if (stoker_now_ms() >= deadline)
            return 0;
        stoker_sleep_ms(20, NULL);
    }
    return 1;
}

static stoker_reply *
hello(nng_socket s, uint64_t session, const char *name, int want_arena)
{
    stoker_request req = {.method = STOKER_HELLO,
                          .session = session,
                          .role = STOKER_ROLE_PRODUCER,
                          .has_schema = 1,
                          .want_arena = want_arena};
    snprintf(req.name, sizeof(req.name), "%s", name);
    h_schema(&req.schema);
    stoker_reply *rep = h_raw_call(s, &req);
    cr_assert_eq(rep->code, STOKER_OK, "hello of '%s': %s (%s)", name, stoker_errname(rep->code),
                 rep->message);
    return rep;
}

static void
expect(stoker_reply *rep, int code, const char *needle, const char *what)
{
    cr_assert_eq(rep->code, code, "%s: got %s (%s), expected %s", what, stoker_errname(rep->code),
                 rep->message, stoker_errname(code));
    if (needle != NULL)
        cr_assert(strstr(rep->message, needle) != NULL, "%s: message '%s' lacks '%s'", what,
                  rep->message, needle);
    stoker_reply_free(rep);
}

// A pool handed to the broker with the ticket of a hello that asked for it.
static push_pool *
attach(const stoker_reply *rep)
{
    cr_assert_neq(rep->arena_socket[0], '\0', "the hello offered no arena socket");
    cr_assert_neq(rep->arena_ticket, 0);
    push_pool *p = NULL;
    char err[256] = "";
    cr_assert_eq(push_pool_create(POOL_BYTES, &p, err, sizeof(err)), STOKER_OK, "%s", err);
    int rv = push_pool_attach(p, rep->arena_socket, rep->arena_ticket, 3000, err, sizeof(err));
    cr_assert_eq(rv, STOKER_OK, "attach: %s (%s)", stoker_strerror(rv), err);
    cr_assert_neq(push_pool_secret(p), 0);
    return p;
}

// The byte k of field f of example seq of session: what a trainer must get back, exactly.
static uint8_t
pattern(uint64_t session, uint64_t seq, uint32_t f, size_t k)
{
    return (uint8_t)(session * 131 + seq * 31 + f * 7 + k * 3 + 1);
}

// A chunk of count examples first_seq.. of the broker's schema, laid out in the pool and filled
// with the pattern.
static stoker_chunk
pool_chunk(push_pool *p, uint64_t session, uint64_t first_seq, uint32_t count)
{
    stoker_schema schema;
    h_schema(&schema);
    stoker_chunk c;
    uint8_t *region;
    cr_assert_eq(push_pool_chunk(p, &schema, count, &c, &region), STOKER_OK);
    for (uint32_t f = 0; f < schema.n_fields; f++) {
        size_t fb = stoker_field_bytes(&schema.fields[f]);
        for (uint32_t i = 0; i < count; i++)
            for (size_t k = 0; k < fb; k++)
                c.data[f][i * fb + k] = pattern(session, first_seq + i, f, k);
    }
    c.count = count;
    return c;
}

// A push of chunk (in p) by reference, offsets as push_pool_offsets says, unless offs is given.
static stoker_reply *
push_ref(nng_socket s, uint64_t session, uint64_t first_seq, const stoker_chunk *chunk,
         uint64_t secret, const push_pool *p, const uint64_t *offs)
{
    stoker_request req = {.method = STOKER_PUSH,
                          .session = session,
                          .first_seq = first_seq,
                          .chunk = *chunk,
                          .pool_secret = secret};
    if (offs != NULL)
        memcpy(req.pool_offsets, offs, chunk->schema.n_fields * sizeof(uint64_t));
    else
        cr_assert_eq(push_pool_offsets(p, chunk, req.pool_offsets), 1, "chunk not in the pool");
    return h_raw_call(s, &req);
}

static stoker_trainer_client *
trainer(const char *url, const char *name, int shm)
{
    stoker_trainer_options o;
    stoker_trainer_options_init(&o);
    o.client.url = url;
    o.client.name = name;
    o.client.give_up_ms = 5000;
    o.client.request_timeout_ms = 2000;
    o.batch_size = 16;
    o.prefetch = 1;
    o.stall_timeout_ms = 3000;
    o.shm = shm;
    stoker_trainer_client *tc = NULL;
    char err[512] = "";
    int rv = stoker_trainer_client_create(&o, &tc, err, sizeof(err));
    cr_assert_eq(rv, STOKER_OK, "trainer: %s (%s)", stoker_strerror(rv), err);
    return tc;
}

// Pulls until want examples came (acknowledging each batch) and checks every byte of each
// against the pattern; the seqs of session first_seq .. first_seq + want - 1, each once.
static void
pull_exact(stoker_trainer_client *tc, uint64_t session, uint64_t first_seq, uint32_t want)
{
    uint8_t seen[256] = {0};
    cr_assert_leq(want, 256);
    uint32_t got = 0;
    while (got < want) {
        stoker_batch *b = NULL;
        int rv = stoker_trainer_client_next(tc, &b);
        cr_assert_eq(rv, STOKER_OK, "batch after %u of %u examples: %s", got, want,
                     stoker_strerror(rv));
        uint32_t at = 0; // the example's index in the batch
        for (uint32_t r = 0; r < b->n_runs; r++) {
            const stoker_run *run = &b->runs[r];
            cr_assert_eq(run->session, session);
            for (uint32_t i = 0; i < run->count; i++, at++) {
                uint64_t seq = run->first_seq + i;
                cr_assert(seq >= first_seq && seq < first_seq + want, "seq %llu unexpected",
                          (unsigned long long)seq);
                cr_assert_eq(seen[seq - first_seq]++, 0, "seq %llu twice", (unsigned long long)seq);
                for (uint32_t f = 0; f < b->chunk.schema.n_fields; f++) {
                    size_t fb = stoker_field_bytes(&b->chunk.schema.fields[f]);
                    const uint8_t *d = b->chunk.data[f] + (size_t)at * fb;
                    for (size_t k = 0; k < fb; k++)
                        cr_assert_eq(d[k], pattern(session, seq, f, k),
                                     "seq %llu field %u byte %zu: %#x, written %#x",
                                     (unsigned long long)seq, f, k, d[k],
                                     pattern(session, seq, f, k));
                }
            }
        }
        cr_assert_eq(at, b->chunk.count, "runs cover %u examples of %u", at, b->chunk.count);
        got += at;
        stoker_trainer_client_ack(tc, b->lease);
        stoker_batch_destroy(b);
    }
    cr_assert_eq(got, want);
    cr_assert_eq(stoker_trainer_client_flush(tc), STOKER_OK);
}

static stoker_producer_info
producer(const char *url, const char *name)
{
    stoker_status *st = h_status(url);
    const stoker_producer_info *p = h_status_producer(st, name);
    cr_assert_not_null(p, "no producer '%s' in /status", name);
    stoker_producer_info out = *p;
    stoker_status_destroy(st);
    return out;
}

// Connects to the arena socket by hand and sends ticket with fd attached (fd < 0: none), as
// push_pool_attach does; returns the connection.
static int
send_ticket(const char *name, uint64_t ticket, int fd)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t len = strlen(name);
    cr_assert(len > 0 && len + 1 < sizeof(addr.sun_path));
    memcpy(addr.sun_path + 1, name, len);
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(sock, 0);
    cr_assert_eq(connect(sock, (struct sockaddr *)&addr,
                         (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len)),
                 0, "connect @%s: %s", name, strerror(errno));
    uint8_t msg[8];
    stoker_arena_put_word(msg, ticket);
    char ctrl[CMSG_SPACE(sizeof(int))];
    memset(ctrl, 0, sizeof(ctrl));
    struct iovec iov = {.iov_base = msg, .iov_len = sizeof(msg)};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        mh.msg_control = ctrl;
        mh.msg_controllen = sizeof(ctrl);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    cr_assert_eq(sendmsg(sock, &mh, MSG_NOSIGNAL), 8, "sendmsg: %s", strerror(errno));
    return sock;
}

// Asserts that the broker closes the connection without an answer within a second.
static void
expect_closed(int sock, const char *what)
{
    struct pollfd pf = {.fd = sock, .events = POLLIN};
    cr_assert_eq(poll(&pf, 1, 1000), 1, "%s: the broker neither answered nor closed in 1 s", what);
    uint8_t buf[16];
    ssize_t n = recv(sock, buf, sizeof(buf), MSG_DONTWAIT);
    cr_assert_eq(n, 0, "%s: %zd bytes came back instead of the connection's end", what, n);
    close(sock);
}

// A memfd of POOL_BYTES with the given seals (0: none; -1: one that does not allow sealing).
static int
memfd_with(int seals)
{
    int fd = memfd_create("stoker-test", MFD_CLOEXEC | (seals >= 0 ? MFD_ALLOW_SEALING : 0));
    cr_assert_geq(fd, 0, "memfd_create: %s", strerror(errno));
    cr_assert_eq(ftruncate(fd, POOL_BYTES), 0);
    if (seals > 0)
        cr_assert_eq(fcntl(fd, F_ADD_SEALS, seals), 0, "F_ADD_SEALS: %s", strerror(errno));
    return fd;
}

Test(push_refs, the_arena_is_offered_only_to_a_producer_that_asks)
{
    char url[256];
    start_broker(url, NULL);
    nng_socket s = h_raw_open(url, 3000);
    stoker_reply *rep = hello(s, 0x11, "asks", 1);
    cr_assert_neq(rep->arena_socket[0], '\0', "no arena socket for a producer that asked");
    cr_assert_neq(rep->arena_ticket, 0, "no ticket for a producer that asked");
    uint64_t first = rep->arena_ticket;
    char name[sizeof(rep->arena_socket)];
    snprintf(name, sizeof(name), "%s", rep->arena_socket);
    stoker_reply_free(rep);
    rep = hello(s, 0x11, "asks", 1); // again: a new ticket, the same socket
    cr_assert_neq(rep->arena_ticket, 0);
    cr_assert_neq(rep->arena_ticket, first, "a ticket is for one use: each hello gets its own");
    cr_assert_str_eq(rep->arena_socket, name);
    stoker_reply_free(rep);
    rep = hello(s, 0x22, "does-not-ask", 0);
    cr_assert_eq(rep->arena_socket[0], '\0', "arena socket '%s' offered unasked",
                 rep->arena_socket);
    cr_assert_eq(rep->arena_ticket, 0, "a ticket given unasked");
    stoker_reply_free(rep);
    nng_close(s);
}

Test(push_refs, a_broker_without_shared_memory_offers_none_and_refuses_references)
{
    char url[256];
    start_broker(url, PROC_ARGS("--shm-bytes", "0"));
    nng_socket s = h_raw_open(url, 3000);
    stoker_reply *rep = hello(s, 0x33, "p", 1);
    cr_assert_eq(rep->arena_socket[0], '\0', "arena socket '%s' without an arena",
                 rep->arena_socket);
    cr_assert_eq(rep->arena_ticket, 0);
    stoker_reply_free(rep);
    push_pool *p = NULL;
    char err[256];
    cr_assert_eq(push_pool_create(POOL_BYTES, &p, err, sizeof(err)), STOKER_OK, "%s", err);
    stoker_chunk c = pool_chunk(p, 0x33, 0, 16);
    expect(push_ref(s, 0x33, 0, &c, 0x5ec7e7, p, NULL), STOKER_INVALID, "without shared memory",
           "a push by reference");
    expect(h_raw_push(s, 0x33, &c.schema, 0, 16), STOKER_OK, NULL, "a push of bytes after it");
    stoker_producer_info info = producer(url, "p");
    cr_assert_eq(info.queued, 16);
    cr_assert_eq(info.pushes_shm, 0);
    push_pool_destroy(p);
    nng_close(s);
}

Test(push_refs, an_unknown_secret_is_an_unknown_peer_and_the_broker_serves_on)
{
    char url[256];
    proc_child *broker = start_broker(url, NULL);
    nng_socket s = h_raw_open(url, 3000);
    stoker_reply_free(hello(s, 0x44, "p", 1));
    // A pool the broker was never given (its ticket unused): its offsets name nothing it maps.
    push_pool *p = NULL;
    char err[256];
    cr_assert_eq(push_pool_create(POOL_BYTES, &p, err, sizeof(err)), STOKER_OK, "%s", err);
    stoker_chunk c = pool_chunk(p, 0x44, 0, 16);
    expect(push_ref(s, 0x44, 0, &c, 0x0123456789abcdefull, p, NULL), STOKER_UNKNOWN_PEER,
           "shared memory", "a push naming an unknown secret");
    cr_assert(log_has("bad-push"), "no WARN line for the refused push");
    stoker_producer_info info = producer(url, "p");
    cr_assert_eq(info.queued, 0, "a refused push queued %llu examples",
                 (unsigned long long)info.queued);
    cr_assert_eq(info.pushes_shm, 0);
    expect(h_raw_push(s, 0x44, &c.schema, 0, 16), STOKER_OK, NULL, "a push of bytes after it");
    info = producer(url, "p");
    cr_assert_eq(info.queued, 16);
    cr_assert_eq(info.pushes_shm, 0);
    h_assert_identity(url);
    push_pool_destroy(p);
    nng_close(s);
    proc_broker_stop(broker);
}

Test(push_refs, pushes_by_reference_reach_trainers_byte_for_byte)
{
    char url[256];
    proc_child *broker = start_broker(url, NULL);
    nng_socket s = h_raw_open(url, 3000);
    stoker_reply *rep = hello(s, 0x55, "ref", 1);
    push_pool *p = attach(rep);
    uint64_t secret = push_pool_secret(p);
    // The ticket was for one use: a second pool presenting it is refused.
    push_pool *again = NULL;
    char err[256] = "";
    cr_assert_eq(push_pool_create(POOL_BYTES, &again, err, sizeof(err)), STOKER_OK, "%s", err);
    int rv = push_pool_attach(again, rep->arena_socket, rep->arena_ticket, 2000, err, sizeof(err));
    cr_assert_neq(rv, STOKER_OK, "a used ticket was taken again");
    cr_assert_eq(push_pool_secret(again), 0);
    cr_assert(log_has("unknown ticket"), "no WARN line for the used ticket");
    push_pool_destroy(again);
    stoker_reply_free(rep);

    stoker_chunk a = pool_chunk(p, 0x55, 0, 16);
    expect(push_ref(s, 0x55, 0, &a, secret, p, NULL), STOKER_OK, NULL, "push by reference");
    stoker_producer_info info = producer(url, "ref");
    cr_assert_eq(info.pushes, 1);
    cr_assert_eq(info.pushes_shm, 1, "pushes_shm %llu", (unsigned long long)info.pushes_shm);
    cr_assert_eq(info.queued, 16);
    stoker_chunk b = pool_chunk(p, 0x55, 16, 16);
    expect(push_ref(s, 0x55, 16, &b, secret, p, NULL), STOKER_OK, NULL, "second push");
    info = producer(url, "ref");
    cr_assert_eq(info.pushes_shm, 2);
    cr_assert_eq(info.queued, 32);
    // Over the socket: the broker sends its examples from the producer's memory.
    stoker_trainer_client *tc = trainer(url, "t-socket", 0);
    pull_exact(tc, 0x55, 0, 16);
    cr_assert_str_eq(stoker_trainer_client_delivery(tc), "socket");
    stoker_trainer_client_destroy(tc);
    // Through the broker's arena: it copies them from the producer's memory into its own.
    tc = trainer(url, "t-shm", 1);
    pull_exact(tc, 0x55, 16, 16);
    cr_assert_str_eq(stoker_trainer_client_delivery(tc), "shm");
    stoker_trainer_client_destroy(tc);
    cr_assert(h_wait_acknowledged(url, 32, 3000), "32 examples not acknowledged");
    h_assert_identity(url);
    push_pool_destroy(p);
    nng_close(s);
    proc_broker_stop(broker); // exits cleanly (under ASan: without leaks) holding the mapping
}

Test(push_refs, queued_examples_outlive_the_producers_memory)
{
    char url[256];
    proc_child *broker = start_broker(url, NULL);
    nng_socket s = h_raw_open(url, 3000);
    stoker_reply *rep = hello(s, 0x66, "gone", 1);
    push_pool *p = attach(rep);
    stoker_reply_free(rep);
    uint64_t secret = push_pool_secret(p);
    stoker_chunk a = pool_chunk(p, 0x66, 0, 16);
    expect(push_ref(s, 0x66, 0, &a, secret, p, NULL), STOKER_OK, NULL, "push by reference");
    uint64_t offs[STOKER_MAX_FIELDS];
    cr_assert(push_pool_offsets(p, &a, offs));
    // The producer exits: its connection ends and its mapping goes; the memfd lives on in the
    // broker's mapping as long as the queue holds examples in it.
    push_pool_destroy(p);
    uint64_t deadline = stoker_now_ms() + 2000;
    for (;;) {
        // The same seqs again, so that one taken before the broker noticed adds nothing.
        stoker_request req = {.method = STOKER_PUSH,
                              .session = 0x66,
                              .first_seq = 0,
                              .chunk = {.schema = a.schema, .count = 16, .capacity = 16},
                              .pool_secret = secret};
        memcpy(req.pool_offsets, offs, sizeof(offs));
        stoker_reply *r = h_raw_call(s, &req);
        int code = r->code;
        stoker_reply_free(r);
        if (code == STOKER_UNKNOWN_PEER)
            break;
        cr_assert_eq(code, STOKER_OK, "push after the producer's end: %s", stoker_errname(code));
        cr_assert_lt(stoker_now_ms(), deadline,
                     "the broker still takes the secret of a pool "
                     "whose connection ended 2 s ago");
        stoker_sleep_ms(20, NULL);
    }
    stoker_trainer_client *tc = trainer(url, "t", 0);
    pull_exact(tc, 0x66, 0, 16);
    stoker_trainer_client_destroy(tc);
    h_assert_identity(url);
    nng_close(s);
    proc_broker_stop(broker);
}

Test(push_refs, offsets_outside_the_memory_or_misaligned_are_invalid)
{
    char url[256];
    proc_child *broker = start_broker(url, NULL);
    nng_socket s = h_raw_open(url, 3000);
    stoker_reply *rep = hello(s, 0x77, "p", 1);
    push_pool *p = attach(rep);
    stoker_reply_free(rep);
    uint64_t secret = push_pool_secret(p);
    stoker_chunk c = pool_chunk(p, 0x77, 0, 16); // fields of 640 and 64 bytes
    uint64_t good[STOKER_MAX_FIELDS];
    cr_assert(push_pool_offsets(p, &c, good));
    static const struct {
        uint32_t field;
        uint64_t off;
        const char *what;
    } bad[] = {
        {0, POOL_BYTES, "a field at the memory's end"},
        {0, POOL_BYTES - 8, "a field that runs past the end"},
        {1, POOL_BYTES - 56, "the last field 8 bytes past the end"},
        {0, UINT64_MAX & ~(uint64_t)7, "an offset that overflows"},
        {1, 644, "a field 4-byte aligned"},
        {0, 1, "a field at an odd offset"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t offs[STOKER_MAX_FIELDS];
        memcpy(offs, good, sizeof(offs));
        offs[bad[i].field] = bad[i].off;
        expect(push_ref(s, 0x77, 0, &c, secret, p, offs), STOKER_INVALID,
               "not inside the producer's shared memory", bad[i].what);
    }
    stoker_producer_info info = producer(url, "p");
    cr_assert_eq(info.queued, 0, "refused pushes queued %llu examples",
                 (unsigned long long)info.queued);
    cr_assert_eq(info.pushes_shm, 0);
    // The last byte of the memory is inside: a field that ends exactly there is taken.
    uint64_t offs[STOKER_MAX_FIELDS];
    memcpy(offs, good, sizeof(offs));
    offs[1] = POOL_BYTES - 64;
    expect(push_ref(s, 0x77, 0, &c, secret, p, offs), STOKER_OK, NULL, "a field to the very end");
    // And the broker, and the pool, serve on.
    stoker_chunk d = pool_chunk(p, 0x77, 16, 16);
    expect(push_ref(s, 0x77, 16, &d, secret, p, NULL), STOKER_OK, NULL, "a good push after them");
    info = producer(url, "p");
    cr_assert_eq(info.queued, 32);
    cr_assert_eq(info.pushes_shm, 2);
    h_assert_identity(url);
    push_pool_destroy(p);
    nng_close(s);
    proc_broker_stop(broker);
}

Test(push_refs, only_a_sealed_memfd_with_a_good_ticket_is_taken)
{
    char url[256];
    proc_child *broker = start_broker(url, NULL);
    nng_socket s = h_raw_open(url, 3000);
    stoker_reply *rep = hello(s, 0x88, "p", 1);
    char name[sizeof(rep->arena_socket)];
    snprintf(name, sizeof(name), "%s", rep->arena_socket);
    uint64_t used = rep->arena_ticket;
    stoker_reply_free(rep);
    // Not sealed (a memfd that cannot be): the producer could shrink it under the broker's reads.
    int fd = memfd_with(-1);
    expect_closed(send_ticket(name, used, fd), "an unsealed memfd");
    close(fd);
    cr_assert(log_has("not sealed against shrinking"), "no WARN line for the unsealed memfd");
    // Its ticket is spent: the real pool cannot use it after.
    push_pool *p = NULL;
    char err[256] = "";
    cr_assert_eq(push_pool_create(POOL_BYTES, &p, err, sizeof(err)), STOKER_OK, "%s", err);
    cr_assert_neq(push_pool_attach(p, name, used, 2000, err, sizeof(err)), STOKER_OK,
                  "a ticket spent on a refused memfd was taken again");
    push_pool_destroy(p);
    // Sealable but not sealed, and sealed against growing only: refused the same way.
    static const int seals[] = {0, F_SEAL_GROW};
    for (int i = 0; i < 2; i++) {
        rep = hello(s, 0x88, "p", 1);
        fd = memfd_with(seals[i]);
        expect_closed(send_ticket(name, rep->arena_ticket, fd), "a memfd without F_SEAL_SHRINK");
        close(fd);
        stoker_reply_free(rep);
    }
    // Not a memfd at all (a pipe), with a good ticket.
    rep = hello(s, 0x88, "p", 1);
    int pipe_fds[2];
    cr_assert_eq(pipe(pipe_fds), 0);
    expect_closed(send_ticket(name, rep->arena_ticket, pipe_fds[0]), "a pipe");
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    stoker_reply_free(rep);
    cr_assert(log_has("not a shared memory file"), "no WARN line for the pipe");
    // A sealed memfd with a ticket the broker never gave, and a ticket without a memfd.
    fd = memfd_with(F_SEAL_SHRINK);
    expect_closed(send_ticket(name, 0x0badc0de, fd), "an unknown ticket");
    close(fd);
    cr_assert(log_has("unknown ticket"), "no WARN line for the unknown ticket");
    rep = hello(s, 0x88, "p", 1);
    expect_closed(send_ticket(name, rep->arena_ticket, -1), "a producer's ticket without memfd");
    stoker_reply_free(rep);
    // A sealed memfd made by hand with a fresh ticket is taken: 16 bytes, a secret and its size.
    rep = hello(s, 0x88, "p", 1);
    fd = memfd_with(F_SEAL_SHRINK);
    int sock = send_ticket(name, rep->arena_ticket, fd);
    close(fd);
    stoker_reply_free(rep);
    struct pollfd pf = {.fd = sock, .events = POLLIN};
    cr_assert_eq(poll(&pf, 1, 2000), 1, "no answer to a good memfd");
    uint8_t answer[16];
    cr_assert_eq(recv(sock, answer, sizeof(answer), MSG_WAITALL), 16);
    cr_assert_neq(stoker_arena_get_word(answer), 0, "secret 0");
    cr_assert_eq(stoker_arena_get_word(answer + 8), POOL_BYTES, "the size the broker mapped");
    close(sock);
    // Through all of it the broker serves: the real pool attaches and pushes by reference.
    rep = hello(s, 0x88, "p", 1);
    p = attach(rep);
    stoker_reply_free(rep);
    stoker_chunk c = pool_chunk(p, 0x88, 0, 16);
    expect(push_ref(s, 0x88, 0, &c, push_pool_secret(p), p, NULL), STOKER_OK, NULL,
           "push by reference after the refusals");
    stoker_producer_info info = producer(url, "p");
    cr_assert_eq(info.pushes_shm, 1);
    cr_assert_eq(info.queued, 16);
    push_pool_destroy(p);
    nng_close(s);
    proc_broker_stop(broker);
}

// Descriptors open in process pid.
static int
open_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    cr_assert_not_null(d, "cannot list %s", path);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

// A ticket with two memfds attached: neither is taken, and the broker keeps no descriptor of
// them (a peer sending many could otherwise run the broker out of descriptors).
Test(push_refs, two_descriptors_with_a_ticket_are_refused_and_closed)
{
    char url[256];
    proc_child *broker = start_broker(url, NULL);
    nng_socket s = h_raw_open(url, 3000);
    stoker_reply *rep = hello(s, 0x99, "p", 1);
    char name[sizeof(rep->arena_socket)];
    snprintf(name, sizeof(name), "%s", rep->arena_socket);
    uint64_t ticket = rep->arena_ticket;
    stoker_reply_free(rep);
    int before = open_fds(broker->pid);
    int fds[2] = {memfd_with(F_SEAL_SHRINK), memfd_with(F_SEAL_SHRINK)};
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path + 1, name, strlen(name));
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_eq(connect(sock, (struct sockaddr *)&addr,
                         (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name))),
                 0);
    uint8_t msg[8];
    stoker_arena_put_word(msg, ticket);
    union {
        char buf[CMSG_SPACE(2 * sizeof(int))];
        struct cmsghdr align;
    } ctrl;
    memset(&ctrl, 0, sizeof(ctrl));
    struct iovec iov = {.iov_base = msg, .iov_len = sizeof(msg)};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctrl.buf,
                        .msg_controllen = sizeof(ctrl.buf)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(2 * sizeof(int));
    memcpy(CMSG_DATA(c), fds, sizeof(fds));
    cr_assert_eq(sendmsg(sock, &mh, MSG_NOSIGNAL), 8, "sendmsg: %s", strerror(errno));
    expect_closed(sock, "two memfds with one ticket");
    close(fds[0]);
    close(fds[1]);
    int after = -1;
    for (int waited = 0; waited < 2000; waited += 50) {
        if ((after = open_fds(broker->pid)) <= before)
            break;
        stoker_sleep_ms(50, NULL);
    }
    cr_assert_leq(after, before, "the broker holds %d descriptors, %d before the two memfds", after,
                  before);
    nng_close(s);
    proc_broker_stop(broker);
}

Test(push_refs, a_secret_is_good_only_for_its_own_session)
{
    char url[256];
    proc_child *broker = start_broker(url, NULL);
    nng_socket s = h_raw_open(url, 3000);
    stoker_reply *rep = hello(s, 0xa1, "owner", 1);
    push_pool *p = attach(rep);
    stoker_reply_free(rep);
    stoker_reply_free(hello(s, 0xb2, "other", 0));
    uint64_t secret = push_pool_secret(p);
    stoker_chunk c = pool_chunk(p, 0xa1, 0, 16);
    expect(push_ref(s, 0xb2, 0, &c, secret, p, NULL), STOKER_UNKNOWN_PEER, "shared memory",
           "another session naming the owner's secret");
    stoker_producer_info other = producer(url, "other");
    cr_assert_eq(other.queued, 0);
    cr_assert_eq(other.pushes_shm, 0);
    expect(push_ref(s, 0xa1, 0, &c, secret, p, NULL), STOKER_OK, NULL, "the owner's push");
    stoker_producer_info owner = producer(url, "owner");
    cr_assert_eq(owner.queued, 16);
    cr_assert_eq(owner.pushes_shm, 1);
    h_assert_identity(url);
    push_pool_destroy(p);
    nng_close(s);
    proc_broker_stop(broker);
}

// A variable-length chunk of count examples (t:int32[?<=64]: example i has i % 7 + 1 values,
// value k of it seq * 100 + k) made on the heap, then copied into the pool as a push lays it out.
static stoker_chunk
var_chunk(push_pool *p, const stoker_schema *schema, uint64_t first_seq, uint32_t count)
{
    stoker_chunk src, c;
    uint8_t *region;
    cr_assert_eq(stoker_chunk_init(&src, schema, count), STOKER_OK);
    for (uint32_t i = 0; i < count; i++) {
        stoker_chunk_begin_example(&src);
        int32_t *v = NULL;
        cr_assert_eq(stoker_chunk_var_reserve(&src, 0, i % 7 + 1, (void **)&v), STOKER_OK);
        for (uint32_t k = 0; k <= i % 7; k++)
            v[k] = (int32_t)((first_seq + i) * 100 + k);
        stoker_chunk_commit_example(&src);
    }
    cr_assert_eq(push_pool_copy(p, &src, &c, &region), STOKER_OK);
    stoker_chunk_fini(&src);
    return c;
}

Test(push_refs, variable_length_pushes_by_reference_keep_the_offsets_they_were_checked_with)
{
    char url[256];
    proc_child *broker = start_broker(url, NULL);
    nng_socket s = h_raw_open(url, 3000);
    stoker_request req = {.method = STOKER_HELLO,
                          .session = 0x99,
                          .role = STOKER_ROLE_PRODUCER,
                          .has_schema = 1,
                          .want_arena = 1};
    snprintf(req.name, sizeof(req.name), "var");
    char err[256] = "";
    cr_assert_eq(stoker_schema_parse("t:int32[?<=64]", &req.schema, err, sizeof(err)), STOKER_OK,
                 "%s", err);
    stoker_reply *rep = h_raw_call(s, &req);
    cr_assert_eq(rep->code, STOKER_OK, "hello: %s", rep->message);
    push_pool *p = attach(rep);
    stoker_reply_free(rep);
    uint64_t secret = push_pool_secret(p);

    // Offsets that decrease, written in the shared memory: refused by name, nothing queued.
    stoker_chunk bad = var_chunk(p, &req.schema, 0, 8);
    bad.offsets[0][3] = 1;
    expect(push_ref(s, 0x99, 0, &bad, secret, p, NULL), STOKER_INVALID, "'t'",
           "decreasing offsets by reference");
    cr_assert_eq(producer(url, "var").queued, 0);

    // A good push; then the producer overwrites its offsets in the shared memory with garbage
    // (a bug or a hostile process): the broker checked and uses its own copy, so the trainer gets
    // every value at its length, and the broker does not read outside the values.
    stoker_chunk c = var_chunk(p, &req.schema, 0, 16);
    expect(push_ref(s, 0x99, 0, &c, secret, p, NULL), STOKER_OK, NULL, "push by reference");
    for (uint32_t k = 0; k <= 16; k++)
        c.offsets[0][k] = UINT64_MAX / 2 - k;
    stoker_producer_info info = producer(url, "var");
    cr_assert_eq(info.pushes_shm, 1);
    cr_assert_eq(info.queued, 16);
    stoker_trainer_client *tc = trainer(url, "t", 0);
    stoker_batch *b = NULL;
    cr_assert_eq(stoker_trainer_client_next(tc, &b), STOKER_OK);
    cr_assert_eq(b->chunk.count, 16);
    for (uint32_t i = 0; i < 16; i++) {
        uint64_t rows = 0;
        const int32_t *v = stoker_chunk_var_value(&b->chunk, 0, i, &rows);
        cr_assert_eq(rows, i % 7 + 1, "example %u: %llu values", i, (unsigned long long)rows);
        for (uint32_t k = 0; k < rows; k++)
            cr_assert_eq(v[k], (int32_t)(i * 100 + k), "example %u value %u", i, k);
    }
    stoker_trainer_client_ack(tc, b->lease);
    stoker_batch_destroy(b);
    cr_assert_eq(stoker_trainer_client_flush(tc), STOKER_OK);
    stoker_trainer_client_destroy(tc);
    cr_assert(h_wait_acknowledged(url, 16, 3000), "16 examples not acknowledged");
    h_assert_identity(url);
    push_pool_destroy(p);
    nng_close(s);
    proc_broker_stop(broker);
}
