// Authentication: with --token-file, a hello with a wrong or missing token is refused with
// UNAUTHENTICATED and a WARN line naming the peer's address; nothing else works on a connection
// before a hello with the token (push, pull, ack, heartbeat, goodbye: UNKNOWN_PEER; status:
// UNAUTHENTICATED) and the broker's state does not change; the right token trains end to end.
// The comparison itself (token_ok in server/broker.c) is constant-time in the token's length:
// it XORs every byte and accumulates, with no early exit; these tests check its results on
// prefixes, extensions and near misses, not its timing.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "broker.h"
#include "helpers.h"
#include "training.h"
#include "stoker/error.h"

#define TOKEN "s3cret-token-0123456789"

TestSuite(auth, .init = h_setup, .fini = h_teardown, .timeout = 90);

// A broker with the token on tcp://127.0.0.1:0 and ipc://; stderr to broker.log. urls[0] tcp,
// urls[1] ipc.
static proc_child *
start_broker(char urls[2][256])
{
    const char *token = testdir_write("token", TOKEN "\n");
    char ipc[256];
    snprintf(ipc, sizeof(ipc), "ipc://%s/b.sock", testdir_path());
    const char *argv[] = {getenv("STOKER_BROKER_BIN"),
                          "--listen",
                          "tcp://127.0.0.1:0",
                          "--listen",
                          ipc,
                          "--token-file",
                          token,
                          "--log-level",
                          "info",
                          NULL};
    cr_assert_not_null(argv[0], "STOKER_BROKER_BIN not set");
    proc_child *b = proc_spawn("broker", argv, &(proc_io){.capture = 1, .log = "broker.log"});
    proc_listening(b, 2, urls);
    return b;
}

static stoker_counters
counters(const char *url)
{
    stoker_status *st = NULL;
    char err[256] = "";
    int rv = stoker_status_fetch(url, TOKEN, 3000, &st, err, sizeof(err));
    cr_assert_eq(rv, STOKER_OK, "status with the token: %s (%s)", stoker_strerror(rv), err);
    stoker_counters c = st->counters;
    stoker_status_destroy(st);
    return c;
}

static stoker_reply *
hello(nng_socket s, uint64_t session, stoker_role role, const char *name, const char *token)
{
    stoker_request req = {.method = STOKER_HELLO, .session = session, .role = role};
    snprintf(req.name, sizeof(req.name), "%s", name);
    snprintf(req.token, sizeof(req.token), "%s", token);
    if (role == STOKER_ROLE_PRODUCER) {
        req.has_schema = 1;
        h_schema(&req.schema);
    }
    return h_raw_call(s, &req);
}

static void
expect(stoker_reply *rep, int code, const char *what)
{
    cr_assert_eq(rep->code, code, "%s: got %s (%s), expected %s", what, stoker_errname(rep->code),
                 rep->message, stoker_errname(code));
    stoker_reply_free(rep);
}

Test(auth, wrong_or_missing_token_refused_and_logged_with_peer_address)
{
    char urls[2][256];
    start_broker(urls);
    nng_socket s = h_raw_open(urls[0], 3000);
    expect(hello(s, 7, STOKER_ROLE_PRODUCER, "intruder", "guess"), STOKER_UNAUTHENTICATED,
           "hello with a wrong token");
    expect(hello(s, 8, STOKER_ROLE_TRAINER, "nobody", ""), STOKER_UNAUTHENTICATED,
           "hello without a token");
    expect(hello(s, 9, STOKER_ROLE_PRODUCER, "near", TOKEN "x"), STOKER_UNAUTHENTICATED,
           "hello with the token plus a byte");
    nng_close(s);
    const char *log = testdir_file("broker.log");
    cr_assert(testdir_contains(log, "unauthenticated: hello from 'intruder' at 127.0.0.1:"),
              "no WARN line naming the peer of the wrong token in %s", log);
    cr_assert(testdir_contains(log, "unauthenticated: hello from 'nobody' at 127.0.0.1:"),
              "no WARN line naming the peer of the missing token");
    stoker_counters c = counters(urls[1]);
    cr_assert_eq(c.producers_alive, 0, "a refused producer was registered");
    cr_assert_eq(c.trainers, 0, "a refused trainer was registered");
}

Test(auth, nothing_works_on_a_connection_before_hello)
{
    char urls[2][256];
    start_broker(urls);
    stoker_schema schema;
    h_schema(&schema);
    // A legitimate producer with three examples queued.
    nng_socket good = h_raw_open(urls[0], 3000);
    expect(hello(good, 0x42, STOKER_ROLE_PRODUCER, "good", TOKEN), STOKER_OK, "good hello");
    expect(h_raw_push(good, 0x42, &schema, 0, 3), STOKER_OK, "good push");
    stoker_counters before = counters(urls[1]);
    cr_assert_eq(before.produced, 3);

    // Another connection uses the good producer's session without saying hello: every method
    // is refused, and so is the connection that said hello with a wrong token.
    for (int attempt = 0; attempt < 2; attempt++) {
        nng_socket bad = h_raw_open(urls[0], 3000);
        if (attempt == 1)
            expect(hello(bad, 0x43, STOKER_ROLE_TRAINER, "bad", "wrong"), STOKER_UNAUTHENTICATED,
                   "wrong-token hello");
        expect(h_raw_push(bad, 0x42, &schema, 3, 3), STOKER_UNKNOWN_PEER, "push before hello");
        stoker_request pull = {.method = STOKER_PULL, .session = 0x43, .max_examples = 3};
        expect(h_raw_call(bad, &pull), STOKER_UNKNOWN_PEER, "pull before hello");
        uint64_t lease = 1;
        stoker_request ack = {.method = STOKER_ACK, .session = 0x43, .n_acks = 1, .acks = &lease};
        expect(h_raw_call(bad, &ack), STOKER_UNKNOWN_PEER, "ack before hello");
        stoker_request bye = {.method = STOKER_GOODBYE, .session = 0x42};
        expect(h_raw_call(bad, &bye), STOKER_UNKNOWN_PEER, "goodbye before hello");
        stoker_request beat = {.method = STOKER_HEARTBEAT, .session = 0x42};
        expect(h_raw_call(bad, &beat), STOKER_UNKNOWN_PEER, "heartbeat before hello");
        stoker_request status = {.method = STOKER_STATUS};
        stoker_reply *rep = h_raw_call(bad, &status);
        cr_assert_eq(rep->code, STOKER_UNAUTHENTICATED, "status before hello: %s",
                     stoker_errname(rep->code));
        cr_assert_eq(rep->has_counters, 0, "status before hello carried counters");
        stoker_reply_free(rep);
        nng_close(bad);
    }
    cr_assert(testdir_contains(testdir_file("broker.log"), "request from 127.0.0.1:"),
              "no WARN line naming the peer of an unauthenticated request");

    stoker_counters after = counters(urls[1]);
    cr_assert_eq(after.produced, before.produced, "an unauthenticated push changed produced");
    cr_assert_eq(after.queued, before.queued);
    cr_assert_eq(after.in_flight, 0, "an unauthenticated pull leased examples");
    cr_assert_eq(after.trainers, 0);
    cr_assert_eq(after.producers_alive, 1, "the good producer was affected (goodbye?)");
    // The good connection still works.
    expect(h_raw_push(good, 0x42, &schema, 3, 2), STOKER_OK, "good push after the attempts");
    nng_close(good);
}

// The state machine alone: token_ok's answers on near misses (same length, prefix, extension).
static void
handle(broker *b, uint32_t pipe, stoker_request *req, int want, const char *what)
{
    broker_outbox out = {0};
    broker_handle(b, (void *)1, pipe, req, 1000, &out);
    cr_assert_eq(out.n, 1, "%s: %zu replies", what, out.n);
    stoker_reply *rep = NULL;
    char err[256];
    cr_assert_eq(stoker_wire_decode_reply(nng_msg_body(out.items[0].msg),
                                          nng_msg_len(out.items[0].msg), &rep, err, sizeof(err)),
                 STOKER_OK, "%s: %s", what, err);
    cr_assert_eq(rep->code, want, "%s: %s (%s)", what, stoker_errname(rep->code), rep->message);
    stoker_reply_free(rep);
    broker_outbox_fini(&out);
}

static stoker_request *
trainer_hello(uint32_t session, const char *token)
{
    stoker_request req = {.method = STOKER_HELLO, .session = session, .role = STOKER_ROLE_TRAINER};
    snprintf(req.token, sizeof(req.token), "%s", token);
    return h_roundtrip(&req);
}

Test(auth, token_compare_exact)
{
    broker_config cfg;
    broker_config_init(&cfg);
    cfg.token = "abcdef";
    broker *b = broker_create(&cfg, 1000);
    cr_assert_not_null(b);
    const char *wrong[] = {"", "a", "abcde", "abcdeg", "bbcdef", "abcdefg", "ABCDEF", "abcdef "};
    for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++)
        handle(b, 1, trainer_hello(5, wrong[i]), STOKER_UNAUTHENTICATED, wrong[i]);
    // Refused hellos authenticate nothing: pipe 1 still may not pull.
    handle(b, 1, h_pull(5, 1, 0, 0, NULL), STOKER_UNKNOWN_PEER, "pull on pipe 1");
    handle(b, 2, trainer_hello(5, "abcdef"), STOKER_OK, "the token");
    // Authentication is per connection: pipe 2 may status, pipe 1 still may not.
    handle(b, 2, h_simple(STOKER_STATUS, 0), STOKER_OK, "status on pipe 2");
    handle(b, 1, h_simple(STOKER_STATUS, 0), STOKER_UNAUTHENTICATED, "status on pipe 1");
    // A closed connection forgets its authentication (pipe ids are not reused by nng, but the
    // broker must not keep them either).
    broker_outbox out = {0};
    broker_pipe_closed(b, 2, 1000, &out);
    broker_outbox_fini(&out);
    handle(b, 2, h_simple(STOKER_STATUS, 0), STOKER_UNAUTHENTICATED, "status after close");
    broker_destroy(b, &out);
    broker_outbox_fini(&out);
}

Test(auth, right_token_trains_end_to_end)
{
    char urls[2][256];
    start_broker(urls);
    const char *token = testdir_file("token");
    const char *json = testdir_file("summary.json");
    const char *const client_args[] = {"--token-file", token, NULL};
    train_end_to_end(urls[0], "p1", client_args, json);
    cr_assert(!testdir_contains(testdir_file("broker.log"), "unauthenticated"),
              "the broker refused a client that had the token");
}
