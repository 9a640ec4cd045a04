// The producer's push stream (common/transport/push_stream.h): pushes written from the chunks' own
// buffers on a connection of their own that speaks nng's REQ framing. Over tcp:// with a token (the
// stream says an observer's hello first) and over ipc://, every example arrives once and the
// producer's log says the stream carried them; with STOKER_PUSH_STREAM=0 the socket carries
// them, exactly as well. A producer that finishes after pushing on the stream is finished, not
// lost, in the broker's eyes (its stream closes after its goodbye). Two pushes in flight meeting
// a queue full past the broker's wait are pushed again without a repeat. The broker SIGKILLed
// under a producer pushing on the stream is the durable suite's (ipc://, the stream by default).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "e2e.h"
#include "stoker/clock.h"
#include "stoker/error.h"

TestSuite(push_stream, .init = e2e_setup, .fini = e2e_teardown, .timeout = 60);

#define TOKEN     "push-stream-token-42"
#define SCHEMA    "input:float32[10],output:float32[1]"
#define EXAMPLES  3000
#define CONNECTED "push-stream: connected"

static stoker_trainer_client *
trainer(const char *url, const char *token)
{
    stoker_trainer_options o;
    stoker_trainer_options_init(&o);
    o.client.url = url;
    o.client.name = "e2e-test";
    o.client.token = token;
    o.client.give_up_ms = 5000;
    o.client.request_timeout_ms = 2000;
    o.batch_size = 64;
    o.prefetch = 2;
    o.stall_timeout_ms = 10000;
    stoker_trainer_client *tc = NULL;
    char err[512] = "";
    int rv = stoker_trainer_client_create(&o, &tc, err, sizeof(err));
    cr_assert_eq(rv, STOKER_OK, "trainer client for %s: %s (%s)", url, stoker_strerror(rv), err);
    return tc;
}

// Runs a producer of EXAMPLES examples (its extra flags; chunks of 37, so the last is short)
// into the broker at url, drains them and asserts each arrived once; returns the producer.
static proc_child *
produce_and_check(const char *url, const char *token, const char *const *extra)
{
    stoker_trainer_client *tc = trainer(url, token);
    const char *args[16] = {"--delay",        "0:0",  "--chunk",     "37",
                            "--max-examples", "3000", "--log-level", "debug"};
    int n = 8;
    for (int i = 0; extra != NULL && extra[i] != NULL; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    proc_child *p = e2e_producer_start(url, "streamer", args);
    e2e_examples ex = {0};
    int rv = e2e_drain(tc, &ex, 20000);
    cr_assert_eq(rv, STOKER_END_OF_DATA, "the supply ended with %s", stoker_errname(rv));
    proc_assert_exit(p, 0, 5000);
    e2e_assert_exactly(&ex, 1, EXAMPLES);
    for (int i = 0; i < ex.n_events; i++)
        cr_assert_neq(ex.events[i].kind, STOKER_EVENT_PRODUCER_LOST,
                      "the broker lost producer '%s'", ex.events[i].name);
    e2e_examples_fini(&ex);
    stoker_trainer_client_destroy(tc);
    return p;
}

Test(push_stream, tcp_with_a_token_carries_every_example_once_on_the_stream)
{
    const char *token = testdir_write("token", TOKEN "\n");
    const char *argv[] = {getenv("STOKER_BROKER_BIN"),
                          "--listen",
                          "tcp://127.0.0.1:0",
                          "--token-file",
                          token,
                          "--schema",
                          SCHEMA,
                          "--log-level",
                          "info",
                          NULL};
    cr_assert_not_null(argv[0], "STOKER_BROKER_BIN not set");
    proc_child *b = proc_spawn("broker", argv, &(proc_io){.capture = 1, .log = "broker.log"});
    char urls[1][256];
    proc_listening(b, 1, urls);
    proc_child *p = produce_and_check(urls[0], TOKEN, PROC_ARGS("--token-file", token));
    cr_assert(testdir_contains(p->err_path, CONNECTED), "the producer never used its push stream");
    cr_assert(!testdir_contains(testdir_file("broker.log"), "unauthenticated"),
              "the broker refused the push stream's hello");
    stoker_status *st = NULL;
    char err[256] = "";
    int rv = stoker_status_fetch(urls[0], TOKEN, 3000, &st, err, sizeof(err));
    cr_assert_eq(rv, STOKER_OK, "status: %s (%s)", stoker_strerror(rv), err);
    const stoker_producer_info *info = h_status_producer(st, "streamer");
    cr_assert_not_null(info);
    cr_assert_eq(info->status, STOKER_PRODUCER_FINISHED, "producer %s, expected finished",
                 stoker_producer_status_name(info->status));
    stoker_status_destroy(st);
    proc_broker_stop(b);
}

// A producer over ipc://, its push stream on or off (STOKER_PUSH_STREAM=0): every example once,
// and the log says which path carried them.
static void
over_ipc(int stream)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *b = e2e_broker_start(url, PROC_ARGS("--schema", SCHEMA));
    if (!stream)
        setenv("STOKER_PUSH_STREAM", "0", 1);
    proc_child *p = produce_and_check(url, NULL, NULL);
    unsetenv("STOKER_PUSH_STREAM");
    stoker_status *st = h_status(url);
    const stoker_producer_info *info = h_status_producer(st, "streamer");
    cr_assert_not_null(info);
    if (stream) {
        cr_assert(testdir_contains(p->err_path, CONNECTED),
                  "the producer never used its push stream");
        // The first push may go over the socket while the stream connects; the rest do not.
        cr_assert(info->pushes_streamed > 0 && info->pushes_streamed + 2 >= info->pushes,
                  "/status: %llu of %llu pushes on the push stream",
                  (unsigned long long)info->pushes_streamed, (unsigned long long)info->pushes);
    } else {
        cr_assert(!testdir_contains(p->err_path, "push-stream"),
                  "STOKER_PUSH_STREAM=0, yet the producer used its push stream");
        cr_assert_eq(info->pushes_streamed, 0, "/status: %llu pushes on a push stream",
                     (unsigned long long)info->pushes_streamed);
        cr_assert_gt(info->pushes, 0);
    }
    stoker_status_destroy(st);
    h_assert_identity(url);
    proc_broker_stop(b);
}

Test(push_stream, ipc_carries_every_example_once_on_the_stream)
{
    over_ipc(1);
}

Test(push_stream, turned_off_the_socket_carries_every_example_once)
{
    over_ipc(0);
}

// Two pushes in flight against a queue that stays full past the broker's wait (the trainer
// pauses 600 ms, longer than the 250 ms a push may wait for room): the first is answered RETRY
// and the one behind it too (it waited for its predecessor; not refused as a gap: issue 26,
// defect 17), so the producer pushes both again from retention (retention is made large enough
// not to hold the producer back first). Every example still arrives exactly once, and nothing
// counts as refused.
Test(push_stream, a_queue_full_past_the_wait_with_two_pushes_in_flight_repeats_nothing)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *b = e2e_broker_start(url, PROC_ARGS("--schema", SCHEMA, "--queue-depth", "48"));
    stoker_trainer_client *tc = trainer(url, NULL);
    proc_child *p =
        e2e_producer_start(url, "streamer",
                           PROC_ARGS("--delay", "0:0", "--chunk", "16", "--max-examples", "1200",
                                     "--retain", "4096", "--log-level", "debug"));
    e2e_examples ex = {0};
    for (int pause = 0; pause < 3; pause++) {
        cr_assert_eq(e2e_pull_n(tc, &ex, ex.n + 128, 10000), STOKER_OK);
        stoker_sleep_ms(600, NULL);
    }
    int rv = e2e_drain(tc, &ex, 20000);
    cr_assert_eq(rv, STOKER_END_OF_DATA, "the supply ended with %s", stoker_errname(rv));
    proc_assert_exit(p, 0, 5000);
    e2e_assert_exactly(&ex, 1, 1200);
    cr_assert(testdir_contains(p->err_path, CONNECTED), "the producer never used its push stream");
    cr_assert(testdir_contains(p->err_path, "was not taken (queue full"),
              "no push in flight was told the queue is full: the path of pushing both again was "
              "not taken");
    stoker_status *st = h_status(url);
    cr_assert_eq(st->counters.refused, 0, "a clean run left refused at %llu",
                 (unsigned long long)st->counters.refused);
    stoker_status_destroy(st);
    e2e_examples_fini(&ex);
    stoker_trainer_client_destroy(tc);
    h_assert_identity(url);
    proc_broker_stop(b);
}
