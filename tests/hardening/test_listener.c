// Peers that leave in the middle of the connection handshake. nng 1.5.2 ends a listener's
// accept loop for good when such a connection fails with NNG_ECLOSED, which on ipc:// is what a
// peer causes that connects and closes before the broker has written its SP header (EPIPE). The
// chaos test found it as a broker that stopped answering new connections; the broker's listener
// watchdog (server/server.c) restarts such a listener. These tests make it happen on purpose
// with a flood of connect-and-close peers, next to a producer and a trainer at work.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "helpers.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/trainer_client.h"

static void
setup(void)
{
    h_setup();
    // nng 1.5.2 cannot free a listener whose accept loop it stopped: its ipc transport keeps a
    // reference for every connection negotiated after the stop (the watchdog's probe among
    // them), so the few KB of that listener are still allocated when the broker exits. Under
    // AddressSanitizer the brokers of this suite (children: the environment is read when they
    // start) therefore run without the exit-time leak check; the rest of the suite keeps it.
    const char *asan = getenv("ASAN_OPTIONS");
    char opts[512];
    snprintf(opts, sizeof(opts), "%s%sdetect_leaks=0", asan != NULL ? asan : "",
             asan != NULL && asan[0] != '\0' ? ":" : "");
    setenv("ASAN_OPTIONS", opts, 1);
}

TestSuite(listener, .init = setup, .fini = h_teardown, .timeout = 120);

// Connects to the broker's ipc socket and closes at once, n times.
static void
flood(const char *url, int n)
{
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    cr_assert(strncmp(url, "ipc://", 6) == 0);
    snprintf(un.sun_path, sizeof(un.sun_path), "%s", url + 6);
    for (int i = 0; i < n; i++) {
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        cr_assert_geq(fd, 0);
        (void)connect(fd, (struct sockaddr *)&un, sizeof(un)); // a full backlog refuses: fine
        close(fd);
    }
}

// Milliseconds until a new connection gets a Status answer (at most limit_ms; then the test
// fails).
static uint64_t
ms_until_answered(const char *url, uint64_t limit_ms)
{
    uint64_t start = stoker_now_ms();
    char err[256] = "";
    for (;;) {
        stoker_status *st = NULL;
        if (stoker_status_fetch(url, NULL, 1000, &st, err, sizeof(err)) == STOKER_OK) {
            stoker_status_destroy(st);
            return stoker_now_ms() - start;
        }
        cr_assert_lt(stoker_now_ms() - start, limit_ms,
                     "no new connection answered for %llu ms after the flood: %s",
                     (unsigned long long)limit_ms, err);
    }
}

Test(listener, new_connections_are_answered_after_a_flood_of_peers_that_leave_mid_handshake)
{
    char url[512];
    proc_child *broker = h_broker_start(url, sizeof(url), NULL);
    for (int round = 0; round < 3; round++) {
        flood(url, 1000);
        uint64_t ms = ms_until_answered(url, 15000);
        printf("round %d: a new connection was answered %llu ms after 1000 connect-and-close "
               "peers\n",
               round, (unsigned long long)ms);
    }
    proc_broker_stop(broker);
}

Test(listener, producers_are_not_lost_and_training_goes_on_through_a_listener_restart)
{
    char url[512];
    proc_child *broker = h_broker_start(url, sizeof(url), NULL);
    const char *slow[] = {"--delay", "0.002", NULL};
    proc_child *producer = h_producer_start(url, "p1", slow);
    cr_assert(h_wait_producer(url, "p1", 50, 10000), "the producer never pushed");
    stoker_trainer_client *tc = h_trainer(url, "t1", 16, 2, 20000);
    h_ids ids = {0};
    uint64_t before = 0, after = 0;
    for (int i = 0; i < 5; i++) {
        stoker_batch *b = NULL;
        cr_assert_eq(stoker_trainer_client_next(tc, &b), STOKER_OK);
        h_ids_add_batch(&ids, b);
        before += b->chunk.count;
        stoker_trainer_client_ack(tc, b->lease);
        stoker_batch_destroy(b);
    }
    flood(url, 1000);
    ms_until_answered(url, 15000);
    // Training goes on over the reconnected connections.
    uint64_t deadline = stoker_now_ms() + 15000;
    while (after < 200 && stoker_now_ms() < deadline) {
        stoker_batch *b = NULL;
        int rv = stoker_trainer_client_next(tc, &b);
        cr_assert_eq(rv, STOKER_OK, "the trainer's supply failed after the flood: %s",
                     stoker_strerror(rv));
        h_ids_add_batch(&ids, b);
        after += b->chunk.count;
        stoker_trainer_client_ack(tc, b->lease);
        stoker_batch_destroy(b);
    }
    cr_assert_geq(after, 200, "only %llu examples in 15 s after the flood",
                  (unsigned long long)after);
    stoker_status *st = h_status(url);
    const stoker_producer_info *p = h_status_producer(st, "p1");
    cr_assert_not_null(p);
    cr_assert_eq(p->status, STOKER_PRODUCER_ALIVE, "the producer is not alive after the flood");
    for (uint32_t i = 0; i < st->n_events; i++)
        cr_assert_neq(st->events[i].kind, STOKER_EVENT_PRODUCER_LOST,
                      "the broker reported its producer lost: %s", st->events[i].reason);
    stoker_status_destroy(st);
    cr_assert_eq(h_ids_duplicates(&ids), 0, "%zu examples delivered twice", h_ids_duplicates(&ids));
    h_ids_fini(&ids);
    stoker_trainer_client_destroy(tc);
    proc_stop(producer, 5000);
    h_assert_identity(url);
    proc_broker_stop(broker);
}
