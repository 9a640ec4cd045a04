// The producer's push stream (common/transport/push_stream.h): pushes written from the chunks' own
// buffers on a connection of their own that speaks nng's REQ framing. Over tcp:// with a token (the
// stream says an observer's hello first) and over ipc://, every example arrives once and the
// producer's log says the stream carried them; with STOKER_PUSH_STREAM=0 the socket carries
// them, exactly as well. A producer that finishes after pushing on the stream is finished, not
// lost, in the broker's eyes (its stream closes after its goodbye). Two pushes in flight meeting
// a queue full past the broker's wait are pushed again without a repeat. The broker SIGKILLed
// under a producer pushing on the stream is the durable suite's (ipc://, the stream by default).
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

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

// A broker on tcp://127.0.0.1 (a port of its choosing), the intake as said (NULL: auto), its
// log in broker.log; url gets its address.
static proc_child *
tcp_broker(const char *intake, char *url)
{
    const char *argv[] = {getenv("STOKER_BROKER_BIN"),
                          "--listen",
                          "tcp://127.0.0.1:0",
                          "--schema",
                          SCHEMA,
                          "--queue-depth",
                          "48",
                          "--log-level",
                          "info",
                          intake != NULL ? "--intake" : NULL,
                          intake,
                          NULL};
    cr_assert_not_null(argv[0], "STOKER_BROKER_BIN not set");
    proc_child *b = proc_spawn("broker", argv, &(proc_io){.capture = 1, .log = "broker.log"});
    char urls[1][256];
    proc_listening(b, 1, urls);
    snprintf(url, 256, "%s", urls[0]);
    return b;
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
// and the one behind it too (it waited for its predecessor; not refused as a gap), so the
// producer pushes both again from retention (retention is made large enough
// not to hold the producer back first). Every example still arrives exactly once, and nothing
// counts as refused.
static void
queue_full_repeats_nothing(int tcp)
{
    char url[256];
    proc_child *b;
    if (tcp) {
        b = tcp_broker(NULL, url);
    } else {
        testdir_ipc_url(url, sizeof(url), "broker");
        b = e2e_broker_start(url, PROC_ARGS("--schema", SCHEMA, "--queue-depth", "48"));
    }
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

Test(push_stream, a_queue_full_past_the_wait_with_two_pushes_in_flight_repeats_nothing)
{
    queue_full_repeats_nothing(0);
}

// The same over tcp://, where the pushes go to the broker's intake (server/intake.h).
Test(push_stream, a_queue_full_at_the_intake_with_two_pushes_in_flight_repeats_nothing)
{
    queue_full_repeats_nothing(1);
}

// Over tcp:// the broker's hello names its intake, a port of its own beside the listener: the
// push stream goes there (its log names the port), every push but the first rides it, and every
// example arrives once. With --intake off the stream goes to the listener itself.
static void
over_tcp(const char *intake)
{
    char url[256];
    proc_child *b = tcp_broker(intake, url);
    proc_child *p = produce_and_check(url, NULL, NULL);
    char connected[320];
    snprintf(connected, sizeof(connected), CONNECTED " to %s:", url);
    int on_listener = testdir_contains(p->err_path, connected);
    snprintf(connected, sizeof(connected), CONNECTED " to tcp://127.0.0.1:");
    cr_assert(testdir_contains(p->err_path, connected), "the producer never used its push stream");
    if (intake == NULL)
        cr_assert(!on_listener, "the push stream went to the listener %s, not the intake", url);
    else
        cr_assert(on_listener, "--intake off, yet the push stream did not go to %s", url);
    stoker_status *st = h_status(url);
    const stoker_producer_info *info = h_status_producer(st, "streamer");
    cr_assert_not_null(info);
    cr_assert(info->pushes_streamed > 0 && info->pushes_streamed + 2 >= info->pushes,
              "/status: %llu of %llu pushes on the push stream",
              (unsigned long long)info->pushes_streamed, (unsigned long long)info->pushes);
    cr_assert_eq(st->counters.refused, 0);
    stoker_status_destroy(st);
    h_assert_identity(url);
    proc_broker_stop(b);
}

Test(push_stream, tcp_pushes_go_to_the_intake_every_example_once)
{
    over_tcp(NULL);
}

Test(push_stream, tcp_with_the_intake_off_pushes_go_to_the_listener)
{
    over_tcp("off");
}

// Writes all of len bytes to fd; 0 or -1.
static int
write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n <= 0)
            return -1;
        p += n, len -= (size_t)n;
    }
    return 0;
}

// A connection to 127.0.0.1:port that sends hs (8 bytes) then tail; returns whether the broker
// closed it (read gives 0 or an error within 5 s, after its own 8-byte handshake), or with
// answered set, whether more than its handshake came back (a reply) first.
static int
intake_closes(unsigned port, const uint8_t *hs, const uint8_t *tail, size_t tail_len, int answered)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "connect to the intake");
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    cr_assert_eq(write_all(fd, hs, 8), 0);
    if (tail_len > 0)
        write_all(fd, tail, tail_len); // may fail once the broker closed
    uint8_t buf[64];
    size_t got = 0;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            close(fd);
            return 1;
        }
        if (n < 0) { // timed out: still open
            close(fd);
            return 0;
        }
        got += (size_t)n;
        if (answered && got > 8 + 12) {
            close(fd);
            return 1;
        }
    }
}

// Bad input at the intake is refused, not fatal: a peer that is not an SP requester, a message
// longer than --max-message and one that is no stoker request each end their connection (with a
// log line), and the broker keeps serving: a producer after them delivers every example once.
Test(push_stream, bad_input_at_the_intake_closes_only_that_connection)
{
    // A port the system had free a moment ago for --intake.
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    unsigned port = ntohs(sa.sin_port);
    close(fd);
    char port_s[16], url[256];
    snprintf(port_s, sizeof(port_s), "%u", port);
    proc_child *b = tcp_broker(port_s, url);
    const uint8_t req_hs[8] = {0, 'S', 'P', 0, 0, 0x30, 0, 0};
    const uint8_t pub_hs[8] = {0, 'S', 'P', 0, 0, 0x20, 0, 0};
    cr_assert(intake_closes(port, pub_hs, NULL, 0, 0), "a non-REQ peer was kept");
    const uint8_t huge[8] = {0, 0, 0, 1, 0, 0, 0, 0}; // 2^40 bytes
    cr_assert(intake_closes(port, req_hs, huge, sizeof(huge), 0), "an oversized message was kept");
    uint8_t junk[8 + 4 + 16] = {0, 0, 0, 0, 0, 0, 0, 20, 0x80, 0, 0, 1};
    memset(junk + 12, 0xee, 16);
    // Undecodable: answered with an error (the connection stays); then the peer leaves.
    cr_assert(intake_closes(port, req_hs, junk, sizeof(junk), 1),
              "an undecodable request at the intake was not answered");
    cr_assert(testdir_contains(testdir_file("broker.log"), "bad-request: intake"),
              "the broker did not log the refused intake connection");
    proc_child *p = produce_and_check(url, NULL, NULL);
    char connected[320];
    snprintf(connected, sizeof(connected), CONNECTED " to tcp://127.0.0.1:%u", port);
    cr_assert(testdir_contains(p->err_path, connected), "the producer did not use --intake %u",
              port);
    h_assert_identity(url);
    proc_broker_stop(b);
}
