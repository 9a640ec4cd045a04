// Closing a client never waits: open, use and close each kind of client many times against a
// real broker and time every close. nng 1.5.2 can deadlock in nng_close when the socket still
// has an operation in flight (nanomsg/nng#1813); a client used to wait 5 s for it and leave the
// socket to a thread. Each cycle here closes with requests just answered, batches held in the
// broker's shared memory and pulls in flight (prefetch), the cases in which it was seen.
//
//   close_cycles [CYCLES [LIMIT_MS [KINDS]]]   default 300 cycles of each kind, limit 100 ms;
//                                            KINDS: letters of those to run (ptcs, the default)
// Prints, per kind, the cycles, the slowest close and how many took longer than the limit, and
// exits 1 when any did (or anything failed), 0 otherwise. It starts its own broker
// (STOKER_BROKER_BIN) on tcp://127.0.0.1 (an ephemeral port) and on an ipc:// path in a fresh
// temporary directory, and alternates between them.
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proc.h"
#include "stoker/client.h"
#include "stoker/clock.h"
#include "stoker/consumer.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/producer_client.h"
#include "stoker/schema.h"
#include "stoker/status.h"
#include "stoker/trainer_client.h"
#include "testdir.h"

#define EXAMPLES_PER_PUSH 16

typedef struct kind_stats {
    const char *name;
    uint32_t cycles, slow;
    double max_ms, total_ms;
} kind_stats;

static int failures;

// Threads of this process: a close nng never finishes stays on a thread of its own.
static int
threads_now(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    if (d == NULL)
        return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void
note_close(kind_stats *k, uint64_t start_ns, double limit_ms)
{
    double ms = (double)(stoker_now_ns() - start_ns) / 1e6;
    k->cycles++;
    k->total_ms += ms;
    if (ms > k->max_ms)
        k->max_ms = ms;
    if (ms > limit_ms) {
        k->slow++;
        fprintf(stderr, "close_cycles: %s close %u took %.1f ms\n", k->name, k->cycles, ms);
    }
}

static void
fail(const char *what, int rv, const char *err)
{
    fprintf(stderr, "close_cycles: %s: %s%s%s\n", what, stoker_strerror(rv), err ? ": " : "",
            err ? err : "");
    failures++;
}

// One producer: hello, a push, goodbye, close.
static void
producer_cycle(const char *url, const stoker_schema *schema, stoker_chunk *chunk, kind_stats *k,
               double limit_ms)
{
    stoker_client_options o;
    stoker_client_options_init(&o);
    o.url = url;
    o.name = "close-cycles";
    stoker_producer_client *pc;
    int rv = stoker_producer_client_create(&o, schema, &pc);
    if (rv != STOKER_OK) {
        fail("producer create", rv, NULL);
        return;
    }
    if ((rv = stoker_producer_client_hello(pc)) != STOKER_OK) {
        fail("producer hello", rv, stoker_producer_client_error(pc));
    } else {
        rv = stoker_producer_client_push(pc, chunk, stoker_producer_client_next_seq(pc));
        if (rv != STOKER_OK)
            fail("producer push", rv, stoker_producer_client_error(pc));
        (void)stoker_producer_client_goodbye(pc);
    }
    uint64_t t0 = stoker_now_ns();
    stoker_producer_client_destroy(pc);
    note_close(k, t0, limit_ms);
}

// One trainer: hello, a batch taken and held (in shared memory on this host) while more pulls are
// in flight, then closed with the batch still held, then the batch freed.
static void
trainer_cycle(const char *url, kind_stats *k, double limit_ms)
{
    stoker_trainer_options o;
    stoker_trainer_options_init(&o);
    o.client.url = url;
    o.batch_size = 8;
    o.prefetch = 4;
    o.stall_timeout_ms = 4000;
    char err[256] = "";
    stoker_trainer_client *tc;
    int rv = stoker_trainer_client_create(&o, &tc, err, sizeof(err));
    if (rv != STOKER_OK) {
        fail("trainer create", rv, err);
        return;
    }
    stoker_batch *b = NULL;
    if ((rv = stoker_trainer_client_next(tc, &b)) != STOKER_OK)
        fail("trainer next", rv, stoker_trainer_client_end_reason(tc));
    else
        stoker_trainer_client_ack(tc, b->lease);
    uint64_t t0 = stoker_now_ns();
    stoker_trainer_client_destroy(tc);
    note_close(k, t0, limit_ms);
    stoker_batch_destroy(b);
}

// One consumer (the C API bindings use): a batch taken and acknowledged, then closed.
static void
consumer_cycle(const char *url, kind_stats *k, double limit_ms)
{
    stoker_consumer_options o;
    stoker_consumer_options_init(&o);
    o.url = url;
    o.batch_size = 8;
    char err[256] = "";
    stoker_consumer *c;
    int rv = stoker_consumer_open(&o, &c, err, sizeof(err));
    if (rv != STOKER_OK) {
        fail("consumer open", rv, err);
        return;
    }
    stoker_consumer_batch *b;
    if ((rv = stoker_consumer_next(c, &b)) != STOKER_OK)
        fail("consumer next", rv, NULL);
    else
        stoker_consumer_release(c, b);
    uint64_t t0 = stoker_now_ns();
    stoker_consumer_close(c);
    note_close(k, t0, limit_ms);
}

// One status fetch: its own socket, opened and closed inside the call.
static void
status_cycle(const char *url, kind_stats *k, double limit_ms)
{
    char err[256] = "";
    stoker_status *st;
    uint64_t t0 = stoker_now_ns();
    int rv = stoker_status_fetch(url, NULL, 4000, &st, err, sizeof(err));
    if (rv != STOKER_OK) {
        fail("status", rv, err);
        return;
    }
    stoker_status_destroy(st);
    // The whole call (a request and the close) is timed: its close cannot be told apart, so a
    // round trip on a busy machine is allowed for (five times the limit).
    note_close(k, t0, 5 * limit_ms);
}

int
main(int argc, char **argv)
{
    uint32_t cycles = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 300;
    double limit_ms = argc > 2 ? strtod(argv[2], NULL) : 100.0;
    const char *which = argc > 3 ? argv[3] : "ptcs";
    if (cycles == 0 || limit_ms <= 0) {
        fprintf(stderr, "usage: close_cycles [CYCLES>0 [LIMIT_MS>0]]\n");
        return 2;
    }
    stoker_log_set_level(STOKER_LOG_ERROR);
    testdir_create("close-cycles");
    // Cycles alternate between tcp:// and ipc://, the two transports clients use.
    char urls[2][256], ipc[256];
    testdir_ipc_url(ipc, sizeof(ipc), "broker");
    const char *broker_argv[] = {
        proc_bin("STOKER_BROKER_BIN"), "--listen", "tcp://127.0.0.1:0", "--listen", ipc,
        // Every producer cycle is a new producer; a gone one's slot is reused only once its
        // queue is empty, and the consumers' returned prefetches leave a few in many queues.
        "--max-producers", "65536", NULL};
    proc_child *broker =
        proc_spawn("broker", broker_argv, &(proc_io){.capture = 1, .log = "broker.log"});
    proc_listening(broker, 2, urls);

    stoker_schema schema;
    char err[256];
    if (stoker_schema_parse("input:float32[10],output:float32[1]", &schema, err, sizeof(err)) !=
        STOKER_OK) {
        fprintf(stderr, "close_cycles: schema: %s\n", err);
        return 1;
    }
    stoker_chunk chunk;
    if (stoker_chunk_init(&chunk, &schema, EXAMPLES_PER_PUSH) != STOKER_OK)
        return 1;
    chunk.count = EXAMPLES_PER_PUSH;

    kind_stats kinds[4] = {
        {.name = "producer"}, {.name = "trainer"}, {.name = "consumer"}, {.name = "status"}};
    uint64_t start_ns = stoker_now_ns();
    int threads_before = -1;
    for (uint32_t i = 0; i < cycles && failures < 10; i++) {
        const char *url = urls[i % 2];
        // Each producer cycle pushes 16 examples; the trainer and the consumer take 8 each (the
        // trainer's prefetched pulls go back when it closes), so the queues stay short and a
        // producer that is gone owes nothing: its slot at the broker is reused.
        if (strchr(which, 'p'))
            producer_cycle(url, &schema, &chunk, &kinds[0], limit_ms);
        if (strchr(which, 't'))
            trainer_cycle(url, &kinds[1], limit_ms);
        if (strchr(which, 'c'))
            consumer_cycle(url, &kinds[2], limit_ms);
        if (strchr(which, 's'))
            status_cycle(url, &kinds[3], limit_ms);
        if (i == 0)
            threads_before = threads_now(); // nng's own threads are started by now
    }
    stoker_chunk_fini(&chunk);
    uint32_t slow = 0;
    for (int i = 0; i < 4; i++) {
        const kind_stats *k = &kinds[i];
        printf("close_cycles: %-8s %5u cycles, close mean %.2f ms, max %.1f ms, %u over %.0f ms\n",
               k->name, k->cycles, k->cycles ? k->total_ms / k->cycles : 0.0, k->max_ms, k->slow,
               limit_ms);
        slow += k->slow;
    }
    // nng 1.5.2's close deadlock, when it happened, shows here: the close was not waited for,
    // but its thread is still there (and every later close of the process waits behind it).
    printf("close_cycles: %.1f s in all; closes still on a thread of their own: %d\n",
           (double)(stoker_now_ns() - start_ns) / 1e9, threads_now() - threads_before);
    proc_broker_stop(broker);
    testdir_remove();
    if (failures > 0 || slow > 0) {
        printf("close_cycles: FAILED (%d failures, %u slow closes)\n", failures, slow);
        return 1;
    }
    return 0;
}
