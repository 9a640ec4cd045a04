// Exact delivery against the real stoker-broker process: idempotent pushes, bounded queues,
// leases and redelivery, schema checks, bad input, the end of the supply. Producers are real
// stoker-producer processes or hand-made requests on raw REQ sockets; trainers are libstoker's
// trainer client. Every test ends by checking produced == acknowledged + queued + in_flight and
// that the broker exits cleanly on SIGTERM.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <criterion/criterion.h>

#include "helpers.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/producer_client.h"

#define SUITE(name) TestSuite(name, .init = h_setup, .fini = h_teardown, .timeout = 30)
SUITE(delivery);
SUITE(backpressure);
SUITE(redelivery);
SUITE(lease);
SUITE(schema);
SUITE(bad_input);
SUITE(supply);

static stoker_reply *
raw_hello(nng_socket s, uint64_t session, stoker_role role, const char *name,
          const stoker_schema *schema)
{
    stoker_request req = {.method = STOKER_HELLO, .session = session, .role = role};
    snprintf(req.name, sizeof(req.name), "%s", name);
    if (schema != NULL) {
        req.has_schema = 1;
        req.schema = *schema;
    }
    return h_raw_call(s, &req);
}

static void
raw_ok(stoker_reply *rep, const char *what)
{
    cr_assert_eq(rep->code, STOKER_OK, "%s: %s (%s)", what, stoker_errname(rep->code),
                 rep->message);
    stoker_reply_free(rep);
}

static stoker_reply *
raw_simple(nng_socket s, stoker_method method, uint64_t session)
{
    stoker_request req = {.method = method, .session = session};
    return h_raw_call(s, &req);
}

static stoker_reply *
raw_pull(nng_socket s, uint64_t session, uint32_t max, uint32_t wait_ms, uint32_t n_acks,
         const uint64_t *acks)
{
    stoker_request *req = h_pull(session, max, wait_ms, n_acks, acks);
    stoker_reply *rep = h_raw_call(s, req);
    stoker_request_free(req);
    return rep;
}

static stoker_reply *
raw_ack(nng_socket s, uint64_t session, uint32_t n_acks, const uint64_t *acks)
{
    stoker_request req = {.method = STOKER_ACK, .session = session, .n_acks = n_acks, .acks = acks};
    return h_raw_call(s, &req);
}

static stoker_counters
counters(const char *url)
{
    stoker_status *st = h_status(url);
    stoker_counters c = st->counters;
    stoker_status_destroy(st);
    return c;
}

// --- idempotent push ----------------------------------------------------------------------------

Test(delivery, resent_push_is_not_duplicated)
{
    char url[256];
    proc_child *broker = h_broker_start(url, sizeof(url), NULL);
    stoker_schema schema;
    h_schema(&schema);
    const uint64_t session = 0x5e55100000000001ull;
    nng_socket p = h_raw_open(url, 3000);
    raw_ok(raw_hello(p, session, STOKER_ROLE_PRODUCER, "raw-producer", &schema), "hello");

    stoker_reply *rep = h_raw_push(p, session, &schema, 0, 3);
    cr_assert_eq(rep->code, STOKER_OK);
    cr_assert_eq(rep->acked_through, 3);
    stoker_reply_free(rep);
    rep = h_raw_push(p, session, &schema, 0, 3); // the same chunk again
    cr_assert_eq(rep->code, STOKER_OK, "a resend is acknowledged");
    cr_assert_eq(rep->acked_through, 3);
    stoker_reply_free(rep);
    rep = h_raw_push(p, session, &schema, 1, 4); // overlaps: only seqs 3, 4 are new
    cr_assert_eq(rep->code, STOKER_OK);
    cr_assert_eq(rep->acked_through, 5);
    stoker_reply_free(rep);

    stoker_status *st = h_status(url);
    const stoker_producer_info *info = h_status_producer(st, "raw-producer");
    cr_assert_not_null(info);
    cr_assert_eq(info->accepted, 5);
    cr_assert_eq(info->next_seq, 5);
    cr_assert_eq(st->counters.produced, 5);
    stoker_status_destroy(st);
    h_assert_identity(url);

    raw_ok(raw_simple(p, STOKER_GOODBYE, session), "goodbye");
    stoker_trainer_client *tc = h_trainer(url, "t", 4, 2, 4000);
    h_ids ids = {0};
    uint64_t n = 0;
    cr_assert_eq(h_drain(tc, &ids, &n), STOKER_END_OF_DATA);
    cr_assert_eq(n, 5, "delivered %llu examples, expected 5", (unsigned long long)n);
    cr_assert_eq(h_ids_duplicates(&ids), 0);
    for (uint64_t seq = 0; seq < 5; seq++)
        cr_assert(h_ids_has(&ids, session, seq), "seq %llu never delivered",
                  (unsigned long long)seq);
    h_ids_fini(&ids);
    stoker_trainer_client_destroy(tc);
    nng_close(p);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

Test(delivery, push_with_a_gap_in_seq_is_refused)
{
    char url[256];
    proc_child *broker = h_broker_start(url, sizeof(url), NULL);
    stoker_schema schema;
    h_schema(&schema);
    const uint64_t session = 0x5e55100000000002ull;
    nng_socket p = h_raw_open(url, 3000);
    raw_ok(raw_hello(p, session, STOKER_ROLE_PRODUCER, "raw-producer", &schema), "hello");
    raw_ok(h_raw_push(p, session, &schema, 0, 4), "push 0..3");

    stoker_reply *rep = h_raw_push(p, session, &schema, 6, 2);
    cr_assert_eq(rep->code, STOKER_SEQ_GAP, "answered %s", stoker_errname(rep->code));
    cr_assert(strstr(rep->message, "expects 4") != NULL, "message: %s", rep->message);
    stoker_reply_free(rep);

    stoker_counters c = counters(url);
    cr_assert_eq(c.produced, 4, "the refused push added nothing");
    cr_assert_eq(c.queued, 4);
    cr_assert_eq(c.refused, 1);
    // The producer goes on from where the broker is.
    raw_ok(h_raw_push(p, session, &schema, 4, 2), "push 4..5");
    cr_assert_eq(counters(url).produced, 6);
    nng_close(p);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

// A producer pushing its retention again says in a hello that it skips seqs a trainer reported
// trained (a hole in what it retains): the broker jumps over them, counts them `skipped` in its
// status (accepted + skipped + the session's first seq = next_seq), and never delivers them.
Test(delivery, seqs_a_hello_skips_are_counted_and_never_delivered)
{
    char url[256];
    proc_child *broker = h_broker_start(url, sizeof(url), NULL);
    stoker_schema schema;
    h_schema(&schema);
    const uint64_t session = 0x5e55100000000003ull;
    nng_socket p = h_raw_open(url, 3000);
    raw_ok(raw_hello(p, session, STOKER_ROLE_PRODUCER, "raw-producer", &schema), "hello");
    raw_ok(h_raw_push(p, session, &schema, 0, 3), "push 0..2");
    stoker_request again = {.method = STOKER_HELLO,
                            .session = session,
                            .role = STOKER_ROLE_PRODUCER,
                            .has_schema = 1,
                            .schema = schema,
                            .next_seq = 5}; // 3 and 4 were trained before
    snprintf(again.name, sizeof(again.name), "raw-producer");
    stoker_reply *rep = h_raw_call(p, &again);
    cr_assert_eq(rep->code, STOKER_OK, "hello at 5: %s", stoker_errname(rep->code));
    cr_assert_eq(rep->next_seq, 5, "the broker goes on from 5, not %llu",
                 (unsigned long long)rep->next_seq);
    stoker_reply_free(rep);
    raw_ok(h_raw_push(p, session, &schema, 5, 2), "push 5..6");

    stoker_status *st = h_status(url);
    const stoker_producer_info *info = h_status_producer(st, "raw-producer");
    cr_assert_not_null(info);
    cr_assert_eq(info->accepted, 5, "accepted %llu", (unsigned long long)info->accepted);
    cr_assert_eq(info->skipped, 2, "skipped %llu", (unsigned long long)info->skipped);
    cr_assert_eq(info->next_seq, 7);
    stoker_status_destroy(st);

    raw_ok(raw_simple(p, STOKER_GOODBYE, session), "goodbye");
    stoker_trainer_client *tc = h_trainer(url, "t", 4, 2, 4000);
    h_ids ids = {0};
    uint64_t n = 0;
    cr_assert_eq(h_drain(tc, &ids, &n), STOKER_END_OF_DATA);
    cr_assert_eq(n, 5, "delivered %llu examples, expected 5", (unsigned long long)n);
    for (uint64_t seq = 0; seq < 7; seq++)
        cr_assert_eq(h_ids_has(&ids, session, seq), seq != 3 && seq != 4, "seq %llu",
                     (unsigned long long)seq);
    h_ids_fini(&ids);
    stoker_trainer_client_destroy(tc);
    nng_close(p);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

// --- backpressure -------------------------------------------------------------------------------

Test(backpressure, fast_producer_never_exceeds_queue_depth)
{
    char url[256];
    const char *const bargs[] = {"--queue-depth", "8", NULL};
    proc_child *broker = h_broker_start(url, sizeof(url), bargs);
    const char *const pargs[] = {"--delay", "0:0", "--chunk", "3", "--max-examples", "150", NULL};
    proc_child *producer = h_producer_start(url, "fast", pargs);
    stoker_trainer_client *tc = h_trainer(url, "slow", 4, 2, 5000);

    uint64_t received = 0, max_queued = 0;
    int rv;
    for (;;) {
        stoker_batch *b = NULL;
        rv = stoker_trainer_client_next(tc, &b);
        if (rv != STOKER_OK)
            break;
        received += b->chunk.count;
        stoker_trainer_client_ack(tc, b->lease);
        stoker_batch_destroy(b);
        stoker_status *st = h_status(url);
        for (uint32_t i = 0; i < st->n_producers; i++) {
            cr_assert_leq(st->producers[i].queued, 8, "producer '%s' has %llu queued, depth 8",
                          st->producers[i].name, (unsigned long long)st->producers[i].queued);
            if (st->producers[i].queued > max_queued)
                max_queued = st->producers[i].queued;
        }
        cr_assert_leq(st->counters.queued, 8);
        stoker_status_destroy(st);
        stoker_sleep_ms(20, NULL); // the trainer is the slow side
    }
    cr_assert_eq(rv, STOKER_END_OF_DATA, "the supply ended with %s", stoker_errname(rv));
    cr_assert_eq(received, 150);
    cr_assert_gt(max_queued, 4, "the queue never filled up (max %llu): no backpressure tested",
                 (unsigned long long)max_queued);
    cr_assert_eq(stoker_trainer_client_duplicates(tc), 0);
    stoker_trainer_client_destroy(tc);
    cr_assert(proc_wait(producer, 5000), "the producer did not exit after its quota");
    cr_assert(WIFEXITED(producer->status) && WEXITSTATUS(producer->status) == 0);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

// --- redelivery ---------------------------------------------------------------------------------

Test(redelivery, disconnected_trainers_examples_go_to_another_trainer)
{
    char url[256];
    proc_child *broker = h_broker_start(url, sizeof(url), NULL);
    const char *const pargs[] = {"--delay", "0:0", "--chunk", "4", "--max-examples", "24", NULL};
    proc_child *producer = h_producer_start(url, "p", pargs);
    cr_assert(proc_wait(producer, 5000), "the producer did not finish its 24 examples");

    // Trainer A takes two batches and disconnects without acknowledging them.
    stoker_trainer_client *a = h_trainer(url, "a", 4, 2, 4000);
    h_ids held = {0};
    for (int i = 0; i < 2; i++) {
        stoker_batch *b = NULL;
        cr_assert_eq(stoker_trainer_client_next(a, &b), STOKER_OK);
        h_ids_add_batch(&held, b);
        stoker_batch_destroy(b);
    }
    cr_assert_eq(held.n, 8);
    cr_assert_geq(counters(url).in_flight, 8);
    stoker_trainer_client_destroy(a);
    cr_assert(h_wait_redelivered(url, 8, 3000),
              "the disconnected trainer's leases did not come back within 3 s");

    stoker_trainer_client *b = h_trainer(url, "b", 4, 2, 4000);
    h_ids got = {0};
    uint64_t n = 0;
    cr_assert_eq(h_drain(b, &got, &n), STOKER_END_OF_DATA);
    cr_assert_eq(n, 24, "trainer B received %llu of 24 examples", (unsigned long long)n);
    cr_assert_eq(h_ids_duplicates(&got), 0);
    cr_assert_eq(stoker_trainer_client_duplicates(b), 0);
    for (size_t i = 0; i < held.n; i++)
        cr_assert(h_ids_has(&got, held.v[i].session, held.v[i].seq),
                  "seq %llu held by A never reached B", (unsigned long long)held.v[i].seq);
    stoker_trainer_client_destroy(b);

    stoker_status *st = h_status(url);
    cr_assert_geq(st->counters.redelivered, 8);
    cr_assert_eq(st->counters.acknowledged, 24);
    cr_assert_eq(st->counters.in_flight, 0);
    cr_assert_eq(st->counters.queued, 0);
    const stoker_producer_info *info = h_status_producer(st, "p");
    cr_assert_not_null(info);
    cr_assert_eq(info->redelivered, st->counters.redelivered);
    stoker_status_destroy(st);
    h_ids_fini(&held);
    h_ids_fini(&got);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

// A trainer the broker dropped (silent past --trainer-timeout) while it still held batches gets
// those examples again when it comes back (the broker redelivered them): the client drops the
// identities it saw before, counts them, and the trainer trains every example exactly once.
// Silent as a frozen process is: without its heartbeat (no_heartbeat), so that the test process
// itself can come back.
Test(redelivery, a_returning_trainer_never_gets_an_identity_twice)
{
    char url[256];
    const char *const bargs[] = {"--trainer-timeout", "1", NULL};
    proc_child *broker = h_broker_start(url, sizeof(url), bargs);
    const char *const pargs[] = {"--delay", "0:0", "--chunk", "4", "--max-examples", "32", NULL};
    proc_child *producer = h_producer_start(url, "p", pargs);
    cr_assert(proc_wait(producer, 5000), "the producer did not finish its 32 examples");
    stoker_trainer_options o;
    stoker_trainer_options_init(&o);
    o.client.url = url;
    o.client.name = "t";
    o.client.give_up_ms = 5000;
    o.client.request_timeout_ms = 2000;
    o.batch_size = 4;
    o.prefetch = 2;
    o.stall_timeout_ms = 8000;
    o.no_heartbeat = 1;
    stoker_trainer_client *tc = NULL;
    char err[512] = "";
    int rv = stoker_trainer_client_create(&o, &tc, err, sizeof(err));
    cr_assert_eq(rv, STOKER_OK, "trainer client for %s: %s (%s)", url, stoker_strerror(rv), err);
    h_ids ids = {0};
    uint64_t n = 0;
    stoker_batch *held = NULL;
    cr_assert_eq(stoker_trainer_client_next(tc, &held), STOKER_OK);
    h_ids_add_batch(&ids, held);
    n += held->chunk.count;
    // Silent with its batches unacknowledged: the broker drops the trainer, redelivers them.
    cr_assert(h_wait_redelivered(url, 4, 5000), "the silent trainer was not dropped within 5 s");
    stoker_trainer_client_ack(tc, held->lease); // too late: refused, changes nothing
    stoker_batch_destroy(held);
    cr_assert_eq(h_drain(tc, &ids, &n), STOKER_END_OF_DATA);
    cr_assert_eq(h_ids_duplicates(&ids), 0, "%zu identities trained twice", h_ids_duplicates(&ids));
    cr_assert_eq(n, 32, "trained %llu examples, not the 32 made", (unsigned long long)n);
    cr_assert_gt(stoker_trainer_client_duplicates(tc), 0,
                 "the redelivered examples were not seen again (the test did not test)");
    stoker_trainer_client_destroy(tc);
    h_ids_fini(&ids);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

Test(redelivery, closed_raw_socket_returns_its_lease)
{
    char url[256];
    proc_child *broker = h_broker_start(url, sizeof(url), NULL);
    stoker_schema schema;
    h_schema(&schema);
    const uint64_t ps = 0x5e55100000000003ull, ts = 0x7a1e000000000003ull;
    nng_socket p = h_raw_open(url, 3000);
    raw_ok(raw_hello(p, ps, STOKER_ROLE_PRODUCER, "raw-producer", &schema), "hello");
    raw_ok(h_raw_push(p, ps, &schema, 0, 8), "push");
    raw_ok(raw_simple(p, STOKER_GOODBYE, ps), "goodbye");

    nng_socket t = h_raw_open(url, 3000);
    raw_ok(raw_hello(t, ts, STOKER_ROLE_TRAINER, "raw-trainer", NULL), "trainer hello");
    stoker_reply *rep = raw_pull(t, ts, 5, 0, 0, NULL);
    cr_assert_eq(rep->code, STOKER_OK);
    cr_assert_eq(rep->chunk.count, 5);
    stoker_reply_free(rep);
    cr_assert_eq(counters(url).in_flight, 5);
    nng_close(t);
    cr_assert(h_wait_redelivered(url, 5, 3000), "the lease was not returned within 3 s");

    stoker_trainer_client *tc = h_trainer(url, "t", 4, 2, 4000);
    h_ids ids = {0};
    uint64_t n = 0;
    cr_assert_eq(h_drain(tc, &ids, &n), STOKER_END_OF_DATA);
    cr_assert_eq(n, 8);
    cr_assert_eq(h_ids_duplicates(&ids), 0);
    h_ids_fini(&ids);
    stoker_trainer_client_destroy(tc);
    stoker_counters c = counters(url);
    cr_assert_eq(c.redelivered, 5);
    cr_assert_eq(c.acknowledged, 8);
    nng_close(p);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

// --- leases -------------------------------------------------------------------------------------

static int
same_accounting(stoker_counters a, stoker_counters b)
{
    return a.produced == b.produced && a.acknowledged == b.acknowledged && a.queued == b.queued &&
           a.in_flight == b.in_flight && a.redelivered == b.redelivered &&
           a.delivered == b.delivered;
}

Test(lease, second_ack_and_unknown_lease_are_refused_and_change_nothing)
{
    char url[256];
    proc_child *broker = h_broker_start(url, sizeof(url), NULL);
    stoker_schema schema;
    h_schema(&schema);
    const uint64_t ps = 0x5e55100000000004ull, ts = 0x7a1e000000000004ull;
    nng_socket p = h_raw_open(url, 3000);
    raw_ok(raw_hello(p, ps, STOKER_ROLE_PRODUCER, "raw-producer", &schema), "hello");
    raw_ok(h_raw_push(p, ps, &schema, 0, 12), "push");
    raw_ok(raw_simple(p, STOKER_GOODBYE, ps), "goodbye");

    nng_socket t = h_raw_open(url, 3000);
    raw_ok(raw_hello(t, ts, STOKER_ROLE_TRAINER, "raw-trainer", NULL), "trainer hello");
    stoker_reply *rep = raw_pull(t, ts, 4, 0, 0, NULL);
    cr_assert_eq(rep->code, STOKER_OK);
    uint64_t lease = rep->lease;
    stoker_reply_free(rep);
    raw_ok(raw_ack(t, ts, 1, &lease), "first ack");
    stoker_counters before = counters(url);
    cr_assert_eq(before.acknowledged, 4);

    rep = raw_ack(t, ts, 1, &lease);
    cr_assert_eq(rep->code, STOKER_NOT_FOUND, "second ack answered %s", stoker_errname(rep->code));
    cr_assert_eq(rep->acks_refused, 1);
    stoker_reply_free(rep);
    uint64_t unknown = lease + 1000;
    rep = raw_ack(t, ts, 1, &unknown);
    cr_assert_eq(rep->code, STOKER_NOT_FOUND, "unknown lease answered %s",
                 stoker_errname(rep->code));
    cr_assert_eq(rep->acks_refused, 1);
    stoker_reply_free(rep);
    stoker_counters after = counters(url);
    cr_assert(same_accounting(before, after), "a refused ack changed the accounting");
    cr_assert_eq(after.refused, before.refused + 2);
    h_assert_identity(url);

    // Piggybacked on a pull, the stale ack is refused too, and the pull is still served.
    rep = raw_pull(t, ts, 4, 0, 1, &lease);
    cr_assert_eq(rep->code, STOKER_OK);
    cr_assert_eq(rep->acks_refused, 1);
    cr_assert_eq(rep->chunk.count, 4);
    uint64_t second = rep->lease;
    stoker_reply_free(rep);
    raw_ok(raw_ack(t, ts, 1, &second), "ack of the second lease");
    nng_close(t);

    // The trainer client counts refusals of its own acknowledgements.
    stoker_trainer_client *tc = h_trainer(url, "t", 4, 1, 4000);
    stoker_batch *b = NULL;
    cr_assert_eq(stoker_trainer_client_next(tc, &b), STOKER_OK);
    uint64_t l = b->lease;
    stoker_batch_destroy(b);
    stoker_trainer_client_ack(tc, l);
    cr_assert_eq(stoker_trainer_client_flush(tc), STOKER_OK);
    stoker_counters mid = counters(url);
    stoker_trainer_client_ack(tc, l);
    cr_assert_eq(stoker_trainer_client_flush(tc), STOKER_NOT_FOUND);
    cr_assert_eq(stoker_trainer_client_acks_refused(tc), 1);
    cr_assert(same_accounting(mid, counters(url)), "a refused ack changed the accounting");
    stoker_trainer_client_destroy(tc);
    cr_assert_eq(counters(url).acknowledged, 12);
    nng_close(p);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

// --- schema -------------------------------------------------------------------------------------

Test(schema, mismatched_producer_is_refused_naming_both_schemas)
{
    char url[256];
    proc_child *broker = h_broker_start(url, sizeof(url), NULL);
    const char *const pargs[] = {"--delay", "0:0", "--chunk", "2", "--max-examples", "6", NULL};
    proc_child *good = h_producer_start(url, "good", pargs);
    cr_assert(h_wait_producer(url, "good", 0, 5000), "the first producer never said hello");

    stoker_schema other;
    h_schema_parse("input:float32[12],output:float32[1]", &other);
    stoker_client_options o;
    stoker_client_options_init(&o);
    o.url = url;
    o.name = "aug-3";
    o.give_up_ms = 3000;
    stoker_producer_client *pc = NULL;
    cr_assert_eq(stoker_producer_client_create(&o, &other, &pc), STOKER_OK);
    int rv = stoker_producer_client_hello(pc);
    cr_assert_eq(rv, STOKER_SCHEMA_MISMATCH, "hello answered %s", stoker_errname(rv));
    const char *msg = stoker_producer_client_error(pc);
    cr_assert(strstr(msg, "input:float32[12],output:float32[1]") != NULL,
              "message does not name the producer's schema: %s", msg);
    cr_assert(strstr(msg, "input:float32[10],output:float32[1]") != NULL,
              "message does not name the broker's schema: %s", msg);
    cr_assert(strstr(msg, "aug-3") != NULL, "message does not name the producer: %s", msg);
    stoker_producer_client_destroy(pc);

    // The broker serves the good producer as before.
    stoker_trainer_client *tc = h_trainer(url, "t", 2, 2, 4000);
    uint64_t n = 0;
    cr_assert_eq(h_drain(tc, NULL, &n), STOKER_END_OF_DATA);
    cr_assert_eq(n, 6);
    stoker_trainer_client_destroy(tc);
    stoker_status *st = h_status(url);
    cr_assert_eq(st->n_producers, 1, "the refused producer was registered");
    stoker_status_destroy(st);
    cr_assert(proc_wait(good, 5000));
    h_assert_identity(url);
    proc_broker_stop(broker);
}

// --- bad input ----------------------------------------------------------------------------------

// Sends len bytes on a fresh socket; asserts an error reply or no reply at all (a dropped
// connection). Returns the reply's code, or -1 when nothing came back.
static int
send_bad(const char *url, const char *what, const void *buf, size_t len)
{
    // A client whose connection nng dropped (the oversized message) redials at once; closing it
    // mid-handshake can stop the broker's listener (nng 1.5.2), which the broker then restarts
    // within about two seconds, closing the connections that reached the stopped one: wait long
    // enough for that (and see send_bad_answered).
    nng_socket s = h_raw_open(url, 5000);
    stoker_reply *rep = NULL;
    int rv = h_raw_send(s, buf, len, &rep);
    int code = -1;
    if (rv == STOKER_OK) {
        code = rep->code;
        cr_assert_neq(code, STOKER_OK, "%s was answered OK", what);
        cr_assert_neq(rep->message[0], '\0', "%s: the error reply has no message", what);
        stoker_reply_free(rep);
    } else {
        cr_assert(rv == STOKER_TIMEOUT || rv == STOKER_CONNECTION || rv == STOKER_CLOSED,
                  "%s: unexpected result %s", what, stoker_errname(rv));
    }
    nng_close(s);
    return code;
}

// send_bad for a message that must be answered: a connection that the broker closed (its
// listener restart, see send_bad) is retried on a new one, at most three times.
static int
send_bad_answered(const char *url, const char *what, const void *buf, size_t len)
{
    int code = -1;
    for (int attempt = 0; attempt < 3 && code == -1; attempt++)
        code = send_bad(url, what, buf, len);
    return code;
}

Test(bad_input, malformed_requests_are_refused_and_the_broker_keeps_serving)
{
    char url[256];
    const char *const bargs[] = {"--max-message", "4096", NULL};
    proc_child *broker = h_broker_start(url, sizeof(url), bargs);
    const char *const pargs[] = {"--delay",        "0:0.002", "--chunk", "3",
                                 "--max-examples", "30",      NULL};
    proc_child *producer = h_producer_start(url, "good", pargs);
    stoker_trainer_client *tc = h_trainer(url, "t", 4, 2, 4000);
    stoker_schema schema;
    h_schema(&schema);

    // Random bytes (fixed seed: the same bytes every run).
    uint8_t noise[64];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < sizeof(noise); i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        noise[i] = (uint8_t)(x >> 56);
    }
    cr_assert_eq(send_bad(url, "random bytes", noise, sizeof(noise)), STOKER_INVALID);

    // A valid push cut in half.
    stoker_request push = {.method = STOKER_PUSH, .session = 42, .first_seq = 0};
    cr_assert_eq(stoker_chunk_init(&push.chunk, &schema, 3), STOKER_OK);
    push.chunk.count = 3;
    nng_msg *msg = NULL;
    cr_assert_eq(stoker_wire_encode_request(&push, &msg), STOKER_OK);
    stoker_chunk_fini(&push.chunk);
    cr_assert_eq(send_bad(url, "a truncated push", nng_msg_body(msg), nng_msg_len(msg) / 2),
                 STOKER_INVALID);
    nng_msg_free(msg);

    // Beyond --max-message: nng drops the connection (an error reply would do as well).
    size_t big_len = 16384;
    uint8_t *big = calloc(1, big_len);
    cr_assert_not_null(big);
    memset(big, 0x0a, big_len);
    send_bad(url, "an oversized message", big, big_len);
    free(big);

    // A valid protobuf of the wrong message type: an encoded Reply.
    stoker_reply wrong = {.code = STOKER_NOT_FOUND, .lease = 7, .acks_refused = 3};
    snprintf(wrong.message, sizeof(wrong.message), "I am a reply");
    cr_assert_eq(stoker_wire_encode_reply(&wrong, &msg), STOKER_OK);
    cr_assert_eq(send_bad_answered(url, "an encoded Reply", nng_msg_body(msg), nng_msg_len(msg)),
                 STOKER_INVALID);
    nng_msg_free(msg);

    // An empty message, and a well-formed push from a session that never said hello.
    cr_assert_neq(send_bad_answered(url, "an empty message", "", 0), -1);
    nng_socket s = h_raw_open(url, 1000);
    stoker_reply *rep = h_raw_push(s, 0x5e55100000000099ull, &schema, 0, 2);
    cr_assert_eq(rep->code, STOKER_UNKNOWN_PEER);
    stoker_reply_free(rep);
    nng_close(s);

    // Nothing was lost: every example of the good producer arrives once.
    h_ids ids = {0};
    uint64_t n = 0;
    cr_assert_eq(h_drain(tc, &ids, &n), STOKER_END_OF_DATA);
    cr_assert_eq(n, 30, "received %llu of 30 examples", (unsigned long long)n);
    cr_assert_eq(h_ids_duplicates(&ids), 0);
    h_ids_fini(&ids);
    stoker_trainer_client_destroy(tc);
    cr_assert(proc_wait(producer, 5000));
    cr_assert(WIFEXITED(producer->status) && WEXITSTATUS(producer->status) == 0);
    stoker_counters c = counters(url);
    cr_assert_geq(c.refused, 4, "refused %llu requests", (unsigned long long)c.refused);
    cr_assert_eq(c.acknowledged, 30);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

// --- supply end ---------------------------------------------------------------------------------

Test(supply, all_producers_finished_gives_end_of_data)
{
    char url[256];
    proc_child *broker = h_broker_start(url, sizeof(url), NULL);
    const char *const a_args[] = {"--delay",        "0:0.002", "--chunk", "3",
                                  "--max-examples", "10",      NULL};
    const char *const b_args[] = {"--delay",        "0:0.002", "--chunk", "2",
                                  "--max-examples", "7",       NULL};
    proc_child *a = h_producer_start(url, "a", a_args);
    proc_child *b = h_producer_start(url, "b", b_args);
    cr_assert(h_wait_producer(url, "a", 0, 5000) && h_wait_producer(url, "b", 0, 5000));
    stoker_trainer_client *tc = h_trainer(url, "t", 4, 2, 4000);
    h_ids ids = {0};
    uint64_t n = 0;
    cr_assert_eq(h_drain(tc, &ids, &n), STOKER_END_OF_DATA);
    cr_assert_eq(n, 17);
    cr_assert_eq(h_ids_duplicates(&ids), 0);
    stoker_batch *batch = NULL;
    cr_assert_eq(stoker_trainer_client_next(tc, &batch), STOKER_END_OF_DATA, "the end is repeated");
    h_ids_fini(&ids);
    stoker_trainer_client_destroy(tc);
    cr_assert(proc_wait(a, 5000) && proc_wait(b, 5000));
    stoker_status *st = h_status(url);
    for (uint32_t i = 0; i < st->n_producers; i++)
        cr_assert_eq(st->producers[i].status, STOKER_PRODUCER_FINISHED);
    stoker_status_destroy(st);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

Test(supply, every_producer_gone_gives_no_producers)
{
    char url[256];
    proc_child *broker = h_broker_start(url, sizeof(url), NULL);
    const char *const done_args[] = {"--delay", "0:0", "--chunk", "2", "--max-examples", "4", NULL};
    const char *const slow_args[] = {"--delay", "0.01:0.01", "--chunk", "1", NULL};
    proc_child *done = h_producer_start(url, "done", done_args);
    proc_child *doomed = h_producer_start(url, "doomed", slow_args);
    cr_assert(h_wait_producer(url, "done", 4, 5000) && h_wait_producer(url, "doomed", 2, 5000));
    cr_assert(proc_wait(done, 5000), "the producer with a quota did not finish");
    proc_signal(doomed, SIGKILL);
    cr_assert(proc_wait(doomed, 2000));

    stoker_trainer_client *tc = h_trainer(url, "t", 4, 2, 4000);
    uint64_t n = 0;
    cr_assert_eq(h_drain(tc, NULL, &n), STOKER_NO_PRODUCERS,
                 "one producer lost and one finished: no producers, not the end of data");
    stoker_batch *batch = NULL;
    cr_assert_eq(stoker_trainer_client_next(tc, &batch), STOKER_NO_PRODUCERS);
    stoker_trainer_client_destroy(tc);
    stoker_counters c = counters(url);
    cr_assert_eq(n, c.produced, "queued examples of the lost producer were not all delivered");
    cr_assert_eq(c.queued, 0);
    h_assert_identity(url);
    proc_broker_stop(broker);
}
