// Fixtures of the core tests (see helpers.h). Children and the temporary directory are the test
// library's (tests/lib); h_teardown kills and reaps every child whatever the test did.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include "helpers.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/synthetic.h"

static int n_brokers;

// --- requests and examples ----------------------------------------------------------------------

void
h_schema(stoker_schema *out)
{
    stoker_synthetic_schema(out);
}

void
h_schema_parse(const char *spec, stoker_schema *out)
{
    char err[256];
    int rv = stoker_schema_parse(spec, out, err, sizeof(err));
    cr_assert_eq(rv, STOKER_OK, "schema '%s': %s", spec, err);
}

stoker_request *
h_roundtrip(const stoker_request *req)
{
    nng_msg *msg = NULL;
    char err[256] = "";
    int rv = stoker_wire_encode_request(req, &msg);
    cr_assert_eq(rv, STOKER_OK, "encoding a request: %s", stoker_strerror(rv));
    stoker_request *out = NULL;
    rv = stoker_wire_decode_request(nng_msg_body(msg), nng_msg_len(msg), &out, err, sizeof(err));
    nng_msg_free(msg);
    cr_assert_eq(rv, STOKER_OK, "decoding a request just encoded: %s", err);
    return out;
}

stoker_request *
h_hello_producer(uint64_t session, const char *name, const stoker_schema *schema)
{
    stoker_request req = {
        .method = STOKER_HELLO,
        .session = session,
        .role = STOKER_ROLE_PRODUCER,
        .has_schema = 1,
        .schema = *schema,
    };
    snprintf(req.name, sizeof(req.name), "%s", name);
    return h_roundtrip(&req);
}

stoker_request *
h_hello_trainer(uint64_t session, const char *name)
{
    stoker_request req = {.method = STOKER_HELLO, .session = session, .role = STOKER_ROLE_TRAINER};
    snprintf(req.name, sizeof(req.name), "%s", name);
    return h_roundtrip(&req);
}

float
h_tag(uint64_t session, uint64_t seq)
{
    return (float)((session & 0xff) * 1000 + seq);
}

float
h_chunk_tag(const stoker_chunk *chunk, uint32_t i)
{
    float v;
    memcpy(&v, stoker_chunk_at(chunk, 0, i), sizeof(v));
    return v;
}

// Fills req as a push of tagged examples (req->chunk owned: stoker_chunk_fini it).
static void
fill_push(stoker_request *req, uint64_t session, const stoker_schema *schema, uint64_t first_seq,
          uint32_t count)
{
    *req = (stoker_request){.method = STOKER_PUSH, .session = session, .first_seq = first_seq};
    int rv = stoker_chunk_init(&req->chunk, schema, count);
    cr_assert_eq(rv, STOKER_OK);
    req->chunk.count = count;
    for (uint32_t f = 0; f < schema->n_fields; f++) {
        size_t fb = stoker_field_bytes(&schema->fields[f]);
        memset(req->chunk.data[f], 0, (size_t)count * fb);
        if (schema->fields[f].dtype != STOKER_FLOAT32)
            continue;
        for (uint32_t i = 0; i < count; i++) {
            float tag = h_tag(session, first_seq + i);
            memcpy(stoker_chunk_at(&req->chunk, f, i), &tag, sizeof(tag));
        }
    }
}

stoker_request *
h_push(uint64_t session, const stoker_schema *schema, uint64_t first_seq, uint32_t count)
{
    stoker_request req;
    fill_push(&req, session, schema, first_seq, count);
    stoker_request *out = h_roundtrip(&req);
    stoker_chunk_fini(&req.chunk);
    return out;
}

stoker_request *
h_pull(uint64_t session, uint32_t max_examples, uint32_t wait_ms, uint32_t n_acks,
       const uint64_t *acks)
{
    stoker_request req = {
        .method = STOKER_PULL,
        .session = session,
        .max_examples = max_examples,
        .wait_ms = wait_ms,
        .n_acks = n_acks,
        .acks = acks,
    };
    return h_roundtrip(&req);
}

stoker_request *
h_ack(uint64_t session, uint32_t n_acks, const uint64_t *acks)
{
    stoker_request req = {.method = STOKER_ACK, .session = session, .n_acks = n_acks, .acks = acks};
    return h_roundtrip(&req);
}

stoker_request *
h_simple(stoker_method method, uint64_t session)
{
    stoker_request req = {.method = method, .session = session};
    return h_roundtrip(&req);
}

// --- the test's directory and children (tests/lib) --------------------------------------------

// The test library's fixtures fail the criterion test that called them.
static void
fail_test(const char *msg)
{
    cr_assert_fail("%s", msg);
}

void
h_setup(void)
{
    stoker_log_init("test", STOKER_LOG_WARN);
    proc_set_fail(fail_test);
    testdir_create("stoker-test");
    n_brokers = 0;
}

void
h_teardown(void)
{
    proc_kill_all();
    testdir_remove();
#if defined(__SANITIZE_ADDRESS__)
    // LeakSanitizer's report at exit does not fail a test, nor does an assertion here in .fini
    // (criterion 2.4 still counts the test as passing); a crash makes the run exit nonzero.
    if (__lsan_do_recoverable_leak_check() != 0) {
        fprintf(stderr, "tests: LeakSanitizer found leaks in this test (report above)\n");
        abort();
    }
#endif
}

proc_child *
h_broker_start(char *url, size_t url_len, const char *const *extra)
{
    char name[32];
    snprintf(name, sizeof(name), "broker-%d", n_brokers++);
    testdir_ipc_url(url, url_len, name);
    return proc_broker_start(url, extra, &(proc_io){.capture = 1});
}

proc_child *
h_producer_start(const char *url, const char *name, const char *const *extra)
{
    return proc_producer_start(url, name, extra, NULL);
}

// --- status -------------------------------------------------------------------------------------

stoker_status *
h_status(const char *url)
{
    stoker_status *st = NULL;
    char err[256] = "";
    int rv = stoker_status_fetch(url, NULL, 3000, &st, err, sizeof(err));
    cr_assert_eq(rv, STOKER_OK, "status from %s: %s (%s)", url, stoker_strerror(rv), err);
    return st;
}

const stoker_producer_info *
h_status_producer(const stoker_status *st, const char *name)
{
    for (uint32_t i = 0; i < st->n_producers; i++) {
        if (strcmp(st->producers[i].name, name) == 0)
            return &st->producers[i];
    }
    return NULL;
}

void
h_assert_identity(const char *url)
{
    stoker_status *st = h_status(url);
    stoker_counters c = st->counters;
    stoker_status_destroy(st);
    cr_assert_eq(c.produced, c.acknowledged + c.queued + c.in_flight,
                 "accounting identity broken: produced %llu != acknowledged %llu + queued %llu "
                 "+ in_flight %llu",
                 (unsigned long long)c.produced, (unsigned long long)c.acknowledged,
                 (unsigned long long)c.queued, (unsigned long long)c.in_flight);
}

int
h_wait_status(const char *url, h_status_ready ready, const void *arg, int timeout_ms)
{
    uint64_t deadline = stoker_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        stoker_status *st = h_status(url);
        int ok = ready(st, arg);
        stoker_status_destroy(st);
        if (ok)
            return 1;
        if (stoker_now_ms() >= deadline)
            return 0;
        stoker_sleep_ms(10, NULL);
    }
}

typedef struct producer_wanted {
    const char *name;
    uint64_t min_accepted;
} producer_wanted;

static int
producer_ready(const stoker_status *st, const void *arg)
{
    const producer_wanted *w = arg;
    const stoker_producer_info *p = h_status_producer(st, w->name);
    return p != NULL && p->accepted >= w->min_accepted;
}

int
h_wait_producer(const char *url, const char *name, uint64_t min_accepted, int timeout_ms)
{
    producer_wanted w = {name, min_accepted};
    return h_wait_status(url, producer_ready, &w, timeout_ms);
}

static int
redelivered_ready(const stoker_status *st, const void *arg)
{
    return st->counters.in_flight == 0 && st->counters.redelivered >= *(const uint64_t *)arg;
}

int
h_wait_redelivered(const char *url, uint64_t min_redelivered, int timeout_ms)
{
    return h_wait_status(url, redelivered_ready, &min_redelivered, timeout_ms);
}

static int
acknowledged_ready(const stoker_status *st, const void *arg)
{
    return st->counters.acknowledged >= *(const uint64_t *)arg;
}

int
h_wait_acknowledged(const char *url, uint64_t n, int timeout_ms)
{
    return h_wait_status(url, acknowledged_ready, &n, timeout_ms);
}

static int
trainers_ready(const stoker_status *st, const void *arg)
{
    return st->counters.trainers >= *(const uint32_t *)arg;
}

int
h_wait_trainers(const char *url, uint32_t n, int timeout_ms)
{
    return h_wait_status(url, trainers_ready, &n, timeout_ms);
}

// --- raw requests -------------------------------------------------------------------------------

nng_socket
h_raw_open(const char *url, int timeout_ms)
{
    nng_socket s;
    int rv = nng_req0_open(&s);
    cr_assert_eq(rv, 0, "nng_req0_open: %s", nng_strerror(rv));
    // No automatic resend: a hand-made request is sent exactly once.
    nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, timeout_ms);
    nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, timeout_ms);
    rv = nng_dial(s, url, NULL, 0);
    cr_assert_eq(rv, 0, "dial %s: %s", url, nng_strerror(rv));
    return s;
}

int
h_raw_send(nng_socket s, const void *buf, size_t len, stoker_reply **rep)
{
    nng_msg *msg;
    int rv = nng_msg_alloc(&msg, len);
    cr_assert_eq(rv, 0);
    if (len > 0)
        memcpy(nng_msg_body(msg), buf, len);
    if ((rv = nng_sendmsg(s, msg, 0)) != 0) {
        nng_msg_free(msg);
        return stoker_err_from_nng(rv);
    }
    if ((rv = nng_recvmsg(s, &msg, 0)) != 0)
        return stoker_err_from_nng(rv);
    char err[256];
    rv = stoker_wire_decode_reply(nng_msg_body(msg), nng_msg_len(msg), rep, err, sizeof(err));
    nng_msg_free(msg);
    return rv;
}

stoker_reply *
h_raw_push(nng_socket s, uint64_t session, const stoker_schema *schema, uint64_t first_seq,
           uint32_t count)
{
    stoker_request req;
    fill_push(&req, session, schema, first_seq, count);
    stoker_reply *rep = h_raw_call(s, &req);
    stoker_chunk_fini(&req.chunk);
    return rep;
}

stoker_reply *
h_raw_call(nng_socket s, const stoker_request *req)
{
    nng_msg *msg = NULL;
    int rv = stoker_wire_encode_request(req, &msg);
    cr_assert_eq(rv, STOKER_OK, "encoding a request: %s", stoker_strerror(rv));
    stoker_reply *rep = NULL;
    rv = h_raw_send(s, nng_msg_body(msg), nng_msg_len(msg), &rep);
    nng_msg_free(msg);
    cr_assert_eq(rv, STOKER_OK, "request (method %d) got no reply: %s", (int)req->method,
                 stoker_strerror(rv));
    return rep;
}

// --- trainers -----------------------------------------------------------------------------------

stoker_trainer_client *
h_trainer(const char *url, const char *name, uint32_t batch_size, uint32_t prefetch,
          uint32_t stall_ms)
{
    stoker_trainer_options o;
    stoker_trainer_options_init(&o);
    o.client.url = url;
    o.client.name = name;
    o.client.give_up_ms = 5000;
    o.client.request_timeout_ms = 2000;
    o.batch_size = batch_size;
    o.prefetch = prefetch;
    o.stall_timeout_ms = stall_ms;
    stoker_trainer_client *tc = NULL;
    char err[512] = "";
    int rv = stoker_trainer_client_create(&o, &tc, err, sizeof(err));
    cr_assert_eq(rv, STOKER_OK, "trainer client for %s: %s (%s)", url, stoker_strerror(rv), err);
    return tc;
}

void
h_ids_add(h_ids *ids, uint64_t session, uint64_t seq)
{
    if (ids->n == ids->cap) {
        ids->cap = ids->cap ? ids->cap * 2 : 256;
        ids->v = realloc(ids->v, ids->cap * sizeof(*ids->v));
        cr_assert_not_null(ids->v);
    }
    ids->v[ids->n++] = (h_id){session, seq};
}

void
h_ids_add_batch(h_ids *ids, const stoker_batch *batch)
{
    for (uint32_t r = 0; r < batch->n_runs; r++) {
        for (uint32_t i = 0; i < batch->runs[r].count; i++)
            h_ids_add(ids, batch->runs[r].session, batch->runs[r].first_seq + i);
    }
}

static int
cmp_id(const void *a, const void *b)
{
    const h_id *x = a, *y = b;
    if (x->session != y->session)
        return x->session < y->session ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

size_t
h_ids_duplicates(const h_ids *ids)
{
    if (ids->n < 2)
        return 0;
    h_id *v = malloc(ids->n * sizeof(*v));
    cr_assert_not_null(v);
    memcpy(v, ids->v, ids->n * sizeof(*v));
    qsort(v, ids->n, sizeof(*v), cmp_id);
    size_t dups = 0;
    for (size_t i = 1; i < ids->n; i++)
        dups += cmp_id(&v[i - 1], &v[i]) == 0;
    free(v);
    return dups;
}

int
h_ids_has(const h_ids *ids, uint64_t session, uint64_t seq)
{
    for (size_t i = 0; i < ids->n; i++) {
        if (ids->v[i].session == session && ids->v[i].seq == seq)
            return 1;
    }
    return 0;
}

void
h_ids_fini(h_ids *ids)
{
    free(ids->v);
    memset(ids, 0, sizeof(*ids));
}

int
h_drain(stoker_trainer_client *tc, h_ids *ids, uint64_t *examples)
{
    uint64_t deadline = stoker_now_ms() + 20000;
    for (;;) {
        if (stoker_now_ms() >= deadline)
            return STOKER_TIMEOUT;
        stoker_batch *b = NULL;
        int rv = stoker_trainer_client_next(tc, &b);
        if (rv != STOKER_OK)
            return rv;
        if (ids != NULL)
            h_ids_add_batch(ids, b);
        if (examples != NULL)
            *examples += b->chunk.count;
        stoker_trainer_client_ack(tc, b->lease);
        stoker_batch_destroy(b);
    }
}
