// Limits and hostile input against the real broker: an oversized message drops its connection
// (nng refuses to receive past --max-message) while the broker serves others; too many
// producers / trainers and too large chunks or pulls get clear errors; messages that claim huge
// sizes are refused by wire decoding itself.
//
// Why nothing is allocated for a claimed size (common/wire/frame.c): frame_header checks the u32
// length against the bytes received; protobuf-c sizes repeated fields from the elements actually
// present in the buffer; chunk_from_pb checks every Chunk.sizes entry against the bytes left in
// the message before using it, and the data is then used in place (no copy sized by the claim);
// the count must equal what the broker's schema says those bytes hold (stoker_wire_bind_chunk),
// and it is bounded by --max-chunk and the queue depth before that. The tests below send such
// claims (1 TiB fields, 2^32-1 examples, a 4 GiB header) and check both the refusal and that the
// broker's resident memory does not grow.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "helpers.h"
#include "training.h"
#include "stoker/clock.h"
#include "stoker/error.h"

TestSuite(limits, .init = h_setup, .fini = h_teardown, .timeout = 90);

static proc_child *broker_child;

// A broker on ipc:// with the extra flags; returns its URL in url.
static void
start_broker(char *url, const char *const *extra)
{
    char listen[256];
    snprintf(listen, sizeof(listen), "ipc://%s/b.sock", testdir_path());
    const char *argv[32] = {getenv("STOKER_BROKER_BIN"), "--listen", listen, "--log-level", "warn"};
    int n = 5;
    for (int i = 0; extra != NULL && extra[i] != NULL; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    cr_assert_not_null(argv[0]);
    broker_child = proc_spawn("broker", argv, &(proc_io){.capture = 1, .log = "broker.log"});
    char urls[1][256];
    proc_listening(broker_child, 1, urls);
    snprintf(url, 256, "%s", urls[0]);
}

static void
expect(stoker_reply *rep, int code, const char *what)
{
    cr_assert_eq(rep->code, code, "%s: got %s (%s), expected %s", what, stoker_errname(rep->code),
                 rep->message, stoker_errname(code));
    stoker_reply_free(rep);
}

static stoker_reply *
hello(nng_socket s, uint64_t session, stoker_role role)
{
    stoker_request req = {.method = STOKER_HELLO, .session = session, .role = role};
    snprintf(req.name, sizeof(req.name), "peer-%llx", (unsigned long long)session);
    if (role == STOKER_ROLE_PRODUCER) {
        req.has_schema = 1;
        h_schema(&req.schema);
    }
    return h_raw_call(s, &req);
}

Test(limits, oversized_message_drops_the_connection_only)
{
    char url[256];
    const char *extra[] = {"--max-message", "65536", "--queue-depth", "100000", NULL};
    start_broker(url, extra);
    stoker_schema schema;
    h_schema(&schema);
    nng_socket s = h_raw_open(url, 2000);
    expect(hello(s, 0x51, STOKER_ROLE_PRODUCER), STOKER_OK, "hello");
    expect(h_raw_push(s, 0x51, &schema, 0, 100), STOKER_OK, "a push under the limit");
    // 2000 examples of 44 bytes: 88 KB, over 64 KiB. nng drops the connection; no reply.
    stoker_request big = {.method = STOKER_PUSH, .session = 0x51, .first_seq = 100};
    cr_assert_eq(stoker_chunk_init(&big.chunk, &schema, 2000), STOKER_OK);
    big.chunk.count = 2000;
    nng_msg *msg;
    cr_assert_eq(stoker_wire_encode_request(&big, &msg), STOKER_OK);
    stoker_chunk_fini(&big.chunk);
    stoker_reply *rep = NULL;
    int rv = h_raw_send(s, nng_msg_body(msg), nng_msg_len(msg), &rep);
    nng_msg_free(msg);
    cr_assert_neq(rv, STOKER_OK, "an oversized push got a reply (%s)",
                  rep != NULL ? stoker_errname(rep->code) : "?");
    nng_close(s);
    // The broker lives and kept what it had; the producer is lost (its connection closed).
    stoker_status *st = h_status(url);
    cr_assert_eq(st->counters.produced, 100, "produced %llu",
                 (unsigned long long)st->counters.produced);
    stoker_status_destroy(st);
    h_assert_identity(url);
}

Test(limits, too_many_producers_and_trainers)
{
    char url[256];
    const char *extra[] = {"--max-producers", "2", "--max-trainers", "1", NULL};
    start_broker(url, extra);
    nng_socket s = h_raw_open(url, 2000);
    expect(hello(s, 1, STOKER_ROLE_PRODUCER), STOKER_OK, "producer 1");
    expect(hello(s, 2, STOKER_ROLE_PRODUCER), STOKER_OK, "producer 2");
    stoker_reply *rep = hello(s, 3, STOKER_ROLE_PRODUCER);
    cr_assert_eq(rep->code, STOKER_LIMIT, "producer 3: %s", stoker_errname(rep->code));
    cr_assert(strstr(rep->message, "too many producers (at most 2)") != NULL, "message: %s",
              rep->message);
    stoker_reply_free(rep);
    expect(hello(s, 1, STOKER_ROLE_PRODUCER), STOKER_OK, "producer 1 again (not a new one)");
    expect(hello(s, 10, STOKER_ROLE_TRAINER), STOKER_OK, "trainer 1");
    rep = hello(s, 11, STOKER_ROLE_TRAINER);
    cr_assert_eq(rep->code, STOKER_LIMIT, "trainer 2: %s", stoker_errname(rep->code));
    cr_assert(strstr(rep->message, "too many trainers (at most 1)") != NULL, "message: %s",
              rep->message);
    stoker_reply_free(rep);
    stoker_status *st = h_status(url);
    cr_assert_eq(st->n_producers, 2);
    cr_assert_eq(st->counters.trainers, 1);
    stoker_status_destroy(st);
    nng_close(s);
}

Test(limits, chunk_and_pull_sizes)
{
    char url[256];
    const char *extra[] = {"--max-chunk", "8", "--queue-depth", "64", NULL};
    start_broker(url, extra);
    stoker_schema schema;
    h_schema(&schema);
    nng_socket s = h_raw_open(url, 2000);
    expect(hello(s, 1, STOKER_ROLE_PRODUCER), STOKER_OK, "producer");
    stoker_reply *rep = h_raw_push(s, 1, &schema, 0, 9);
    cr_assert_eq(rep->code, STOKER_TOO_LARGE, "push of 9: %s", stoker_errname(rep->code));
    cr_assert(strstr(rep->message, "chunk of 9 examples: must be 1..8") != NULL, "%s",
              rep->message);
    stoker_reply_free(rep);
    expect(h_raw_push(s, 1, &schema, 0, 8), STOKER_OK, "push of 8");
    expect(hello(s, 2, STOKER_ROLE_TRAINER), STOKER_OK, "trainer");
    stoker_request pull = {.method = STOKER_PULL, .session = 2, .max_examples = 9};
    rep = h_raw_call(s, &pull);
    cr_assert_eq(rep->code, STOKER_INVALID, "pull of 9: %s", stoker_errname(rep->code));
    cr_assert(strstr(rep->message, "pull of 9 examples: must be 1..8") != NULL, "%s", rep->message);
    stoker_reply_free(rep);
    nng_close(s);
    h_assert_identity(url);
}

// --- hand-made protobuf -------------------------------------------------------------------------

typedef struct pb {
    uint8_t b[256];
    size_t n;
} pb;

static void
varint(pb *p, uint64_t v)
{
    do {
        uint8_t byte = v & 0x7f;
        v >>= 7;
        p->b[p->n++] = byte | (v ? 0x80 : 0);
    } while (v);
}

static void
sub(pb *p, uint8_t tag, const pb *inner)
{
    p->b[p->n++] = tag;
    varint(p, inner->n);
    memcpy(p->b + p->n, inner->b, inner->n);
    p->n += inner->n;
}

// A framed push of session 1 whose chunk claims count examples and the given field sizes,
// followed by tail bytes of data. Returns the message length in out.
static size_t
claim_push(uint8_t *out, uint32_t header_claim, uint32_t count, const uint64_t *sizes, int n,
           size_t tail)
{
    pb chunk = {0}, packed = {0}, push = {0}, req = {0};
    chunk.b[chunk.n++] = 0x08; // count
    varint(&chunk, count);
    for (int i = 0; i < n; i++)
        varint(&packed, sizes[i]);
    sub(&chunk, 0x1a, &packed); // sizes, packed
    push.b[push.n++] = 0x08;    // first_seq 0
    varint(&push, 0);
    sub(&push, 0x12, &chunk);
    req.b[req.n++] = 0x08; // method PUSH
    varint(&req, STOKER_PUSH);
    req.b[req.n++] = 0x11; // session, fixed64
    uint64_t session = 1;
    memcpy(req.b + req.n, &session, 8);
    req.n += 8;
    sub(&req, 0x22, &push);
    uint32_t len = header_claim ? header_claim : (uint32_t)req.n;
    memcpy(out, &len, 4);
    memcpy(out + 4, req.b, req.n);
    memset(out + 4 + req.n, 0x5a, tail);
    return 4 + req.n + tail;
}

Test(limits, claimed_sizes_refused_by_decoding_without_allocating)
{
    uint8_t msg[512];
    char err[256];
    stoker_request *req = NULL;
    const uint64_t tib[] = {1ull << 40, 1ull << 40};
    // The claim is refused by the bounds check, before anything is sized by it.
    size_t len = claim_push(msg, 0, UINT32_MAX, tib, 2, 16);
    cr_assert_eq(stoker_wire_decode_request(msg, len, &req, err, sizeof(err)), STOKER_INVALID);
    cr_assert(strstr(err, "claimed past the message end") != NULL, "reason: %s", err);
    // Sizes that would wrap around when added up.
    const uint64_t wrap[] = {8, UINT64_MAX - 4};
    len = claim_push(msg, 0, 1, wrap, 2, 16);
    cr_assert_eq(stoker_wire_decode_request(msg, len, &req, err, sizeof(err)), STOKER_INVALID);
    // A header that claims 4 GiB of protobuf.
    len = claim_push(msg, UINT32_MAX, 1, tib, 1, 16);
    cr_assert_eq(stoker_wire_decode_request(msg, len, &req, err, sizeof(err)), STOKER_INVALID);
    cr_assert(strstr(err, "header claims") != NULL, "reason: %s", err);
    // More fields than a schema may have.
    const uint64_t many[20] = {0};
    len = claim_push(msg, 0, 1, many, 20, 0);
    cr_assert_eq(stoker_wire_decode_request(msg, len, &req, err, sizeof(err)), STOKER_INVALID);
}

Test(limits, broker_refuses_claims_and_keeps_its_memory)
{
    char url[256];
    start_broker(url, NULL);
    nng_socket s = h_raw_open(url, 2000);
    expect(hello(s, 1, STOKER_ROLE_PRODUCER), STOKER_OK, "producer");
    uint64_t rss_before = proc_rss_bytes(broker_child);
    uint8_t msg[512];
    const uint64_t tib[] = {1ull << 40, 1ull << 40};
    const uint64_t fits[] = {8, 8}; // 16 bytes that do follow, but for 2^31 examples
    for (int i = 0; i < 200; i++) {
        stoker_reply *rep = NULL;
        size_t len = i % 2 ? claim_push(msg, 0, UINT32_MAX, tib, 2, 16)
                           : claim_push(msg, 0, 1u << 31, fits, 2, 16);
        cr_assert_eq(h_raw_send(s, msg, len, &rep), STOKER_OK, "claim %d: no reply", i);
        cr_assert(rep->code == STOKER_INVALID || rep->code == STOKER_TOO_LARGE,
                  "claim %d answered %s (%s)", i, stoker_errname(rep->code), rep->message);
        stoker_reply_free(rep);
    }
    uint64_t rss_after = proc_rss_bytes(broker_child);
    cr_assert_lt(rss_after, rss_before + (16u << 20),
                 "broker RSS grew from %llu to %llu bytes on refused claims",
                 (unsigned long long)rss_before, (unsigned long long)rss_after);
    nng_close(s);
    h_assert_identity(url);
    stoker_status *st = h_status(url);
    cr_assert_eq(st->counters.produced, 0);
    stoker_status_destroy(st);
}
