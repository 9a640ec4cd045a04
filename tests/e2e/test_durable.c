// Retention end to end: producers keep what they pushed until a trainer trained it, so
// a broker SIGKILLed and restarted on the same path, several times (also while the producers are
// blocked on full queues), loses nothing and no example is trained twice, checked from the
// identities the trainer trained; and the retention bound holds: a full retention buffer stalls
// a producer (nothing trained, nothing more accepted) without losing anything.
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "e2e.h"
#include "stoker/clock.h"
#include "stoker/error.h"

TestSuite(durable, .init = e2e_setup, .fini = e2e_teardown, .timeout = 120);

typedef struct full_queues {
    uint32_t depth, chunk;
} full_queues;

// Every producer's queue is too full for one more chunk (its pushes wait).
static int
queues_full(const stoker_status *st, const void *arg)
{
    const full_queues *f = arg;
    if (st->n_producers == 0)
        return 0;
    for (uint32_t i = 0; i < st->n_producers; i++) {
        if (st->producers[i].queued + f->chunk <= f->depth)
            return 0;
    }
    return 1;
}

static proc_child *
restart(proc_child *broker, const char *url, const char *const *bargs)
{
    proc_signal(broker, SIGKILL);
    cr_assert(proc_wait(broker, 5000), "the broker did not die of SIGKILL");
    stoker_sleep_ms(150, NULL); // the producers push into nothing meanwhile
    return e2e_broker_start(url, bargs);
}

// Within 20 s: the producer called name is known to the broker at url again, or its process
// ended (it had nothing left to deliver).
static int
back_or_done(const char *url, const char *name, proc_child *p)
{
    for (int waited = 0; waited < 20000; waited += 200) {
        if (proc_wait(p, 0) || h_wait_producer(url, name, 0, 200))
            return 1;
    }
    return 0;
}

Test(durable, broker_sigkill_and_restart_three_times_loses_nothing)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    const char *const bargs[] = {"--queue-depth", "40", NULL};
    proc_child *broker = e2e_broker_start(url, bargs);
    enum { PER = 900 };
    // Retention above the queue depth, so that the producers block on the broker's full queues.
    const char *const pargs[] = {"--max-examples", "900", "--delay",  "0.0002:0.0005",
                                 "--chunk",        "3",   "--linger", "60",
                                 "--retain",       "200", NULL};
    proc_child *p1 = e2e_producer_start(url, "keeper-1", pargs);
    proc_child *p2 = e2e_producer_start(url, "keeper-2", pargs);
    stoker_trainer_client *tc = e2e_trainer_client(url, 16, 20000);
    e2e_examples ex = {0};

    // 1: mid-run, while the trainer pulls.
    cr_assert_eq(e2e_pull_n(tc, &ex, 300, 30000), STOKER_OK);
    broker = restart(broker, url, bargs);

    // 2: while both producers wait on full queues (nobody pulls).
    cr_assert_eq(e2e_pull_n(tc, &ex, 700, 30000), STOKER_OK);
    full_queues f = {.depth = 40, .chunk = 3};
    cr_assert(h_wait_status(url, queues_full, &f, 10000), "the queues did not fill in 10 s");
    stoker_sleep_ms(100, NULL);
    broker = restart(broker, url, bargs);

    // 3: again mid-run, soon after the last restart.
    cr_assert_eq(e2e_pull_n(tc, &ex, 1200, 30000), STOKER_OK);
    broker = restart(broker, url, bargs);
    // Both still have examples to deliver: wait until the new broker knows them, or one that is
    // slow to reconnect (a loaded machine) misses the supply's end the other one's goodbye makes.
    // (One whose every example was already trained before the restart says goodbye and ends
    // instead: that is as good.)
    cr_assert(back_or_done(url, "keeper-1", p1), "keeper-1 neither came back nor finished");
    cr_assert(back_or_done(url, "keeper-2", p2), "keeper-2 neither came back nor finished");

    int rv = e2e_drain(tc, &ex, 60000);
    cr_assert_eq(rv, STOKER_END_OF_DATA, "the supply ended with %s", stoker_errname(rv));
    proc_assert_exit(p1, 0, 10000);
    proc_assert_exit(p2, 0, 10000);
    fprintf(stderr,
            "durable: %zu examples trained across 3 broker restarts, %llu duplicates "
            "dropped by the trainer's identity filter\n",
            ex.n, (unsigned long long)stoker_trainer_client_duplicates(tc));
    e2e_assert_exactly(&ex, 2, PER);
    e2e_examples_fini(&ex);
    stoker_trainer_client_destroy(tc);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

typedef struct accepted_at_least {
    uint64_t n;
} accepted_at_least;

static int
accepted(const stoker_status *st, const void *arg)
{
    const accepted_at_least *a = arg;
    return st->n_producers == 1 && st->producers[0].accepted >= a->n;
}

Test(durable, a_full_retention_buffer_stalls_the_producer_without_loss)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    // Queues far larger than the retention bound: the producer stops at its bound, not theirs.
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--queue-depth", "100000"));
    proc_child *p =
        e2e_producer_start(url, "bounded",
                           PROC_ARGS("--retain", "30", "--max-examples", "200", "--delay", "0:0",
                                     "--chunk", "3", "--linger", "30"));
    accepted_at_least a = {.n = 30};
    cr_assert(h_wait_status(url, accepted, &a, 10000), "the producer did not push 30 in 10 s");
    stoker_sleep_ms(500, NULL); // nothing is trained: it must be waiting
    stoker_status *st = h_status(url);
    uint64_t held = st->producers[0].accepted;
    stoker_status_destroy(st);
    cr_assert_eq(held, 30, "with --retain 30 and nothing trained, the broker got %llu examples",
                 (unsigned long long)held);
    cr_assert_eq(proc_wait(p, 0), 0, "the stalled producer exited");

    stoker_trainer_client *tc = e2e_trainer_client(url, 8, 10000);
    e2e_examples ex = {0};
    int rv = e2e_drain(tc, &ex, 30000);
    cr_assert_eq(rv, STOKER_END_OF_DATA, "the supply ended with %s", stoker_errname(rv));
    proc_assert_exit(p, 0, 10000);
    e2e_assert_exactly(&ex, 1, 200);
    e2e_examples_fini(&ex);
    stoker_trainer_client_destroy(tc);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

// The bound is memory, not only a count: a producer of 150,528-byte examples that nobody trains
// holds --retain of them (plus its two chunks being made and pushed), however much room the
// broker's queue has left.
Test(durable, retention_memory_stays_within_its_bound)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--queue-depth", "100000"));
    proc_child *p =
        e2e_start("bench-producer", "STOKER_BENCH_PRODUCER_BIN",
                  PROC_ARGS("--broker", url, "--name", "big", "--schema", "image:uint8[224,224,3]",
                            "--chunk", "8", "--retain", "64", "--fill", "all"));
    accepted_at_least a = {.n = 64};
    cr_assert(h_wait_status(url, accepted, &a, 10000), "the producer did not push 64 in 10 s");
    stoker_sleep_ms(500, NULL); // nothing is trained: it must be waiting at its bound
    stoker_status *st = h_status(url);
    uint64_t held = st->producers[0].accepted;
    stoker_status_destroy(st);
    cr_assert_eq(held, 64, "with --retain 64 and nothing trained, the broker got %llu examples",
                 (unsigned long long)held);
    // 64 retained + 2 chunks of 8 = 80 examples of 150,528 bytes (12 MB); 4x that for the
    // process, its libraries and malloc's slack. Unbounded, 500 ms would hold hundreds more.
    uint64_t rss = proc_rss_bytes(p);
    cr_assert_gt(rss, 0, "cannot read the producer's VmRSS");
    cr_assert_lt(rss, 4 * 80 * 150528 + (16u << 20), "producer RSS %llu MB with --retain 64",
                 (unsigned long long)(rss >> 20));
    proc_signal(p, SIGTERM);
    proc_assert_exit(p, 0, 5000);
    proc_broker_stop(broker);
}

// --- commit with checkpoints --------------------------------------------------------------------

static stoker_trainer_client *
committing_client(const char *url, uint32_t batch, uint32_t stall_ms)
{
    stoker_trainer_options o;
    stoker_trainer_options_init(&o);
    o.client.url = url;
    o.client.name = "committer";
    o.batch_size = batch;
    o.stall_timeout_ms = stall_ms;
    o.commit = 1;
    stoker_trainer_client *tc = NULL;
    char err[256];
    cr_assert_eq(stoker_trainer_client_create(&o, &tc, err, sizeof(err)), STOKER_OK, "%s", err);
    return tc;
}

Test(durable, a_trainer_that_dies_between_commits_resumes_with_each_example_once)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--queue-depth", "64"));
    proc_child *p = e2e_producer_start(
        url, "source",
        PROC_ARGS("--max-examples", "400", "--delay", "0:0", "--chunk", "4", "--linger", "30"));

    // The first trainer commits (a checkpoint) after 120 examples, trains 100 more, and dies.
    stoker_trainer_client *t1 = committing_client(url, 8, 10000);
    e2e_examples checkpoint = {0}, lost_work = {0};
    cr_assert_eq(e2e_pull_n(t1, &checkpoint, 120, 10000), STOKER_OK);
    cr_assert_eq(stoker_trainer_client_commit(t1), STOKER_OK);
    cr_assert_eq(stoker_trainer_client_uncommitted(t1), 0);
    cr_assert_eq(e2e_pull_n(t1, &lost_work, 100, 10000), STOKER_OK);
    cr_assert_gt(stoker_trainer_client_uncommitted(t1), 0);
    stoker_trainer_client_destroy(t1); // its uncommitted leases go back to the queues

    // Resumed from the checkpoint: it must see every example after it, each once.
    stoker_trainer_client *t2 = committing_client(url, 8, 10000);
    e2e_examples resumed = {0};
    int rv;
    do {
        rv = e2e_pull_n(t2, &resumed, resumed.n + 40, 30000);
        cr_assert_eq(stoker_trainer_client_commit(t2), STOKER_OK);
    } while (rv == STOKER_OK);
    cr_assert_eq(rv, STOKER_END_OF_DATA, "the supply ended with %s", stoker_errname(rv));
    proc_assert_exit(p, 0, 10000);

    // The lineage: what the checkpoint holds plus what the resumed trainer trained.
    e2e_examples lineage = {0};
    for (size_t i = 0; i < checkpoint.n + resumed.n; i++) {
        const e2e_example *e = i < checkpoint.n ? &checkpoint.v[i] : &resumed.v[i - checkpoint.n];
        e2e_example copy = {.session = e->session, .seq = e->seq};
        if (lineage.n == lineage.cap) {
            lineage.cap = lineage.cap ? lineage.cap * 2 : 512;
            lineage.v = realloc(lineage.v, lineage.cap * sizeof(*lineage.v));
            cr_assert_not_null(lineage.v);
        }
        lineage.v[lineage.n++] = copy;
    }
    e2e_assert_exactly(&lineage, 1, 400);
    fprintf(stderr,
            "commit: checkpoint at %zu, %zu trained after it were redelivered, the "
            "resumed trainer trained %zu\n",
            checkpoint.n, lost_work.n, resumed.n);
    cr_assert_geq(resumed.n, lost_work.n, "the uncommitted work was not redelivered");
    e2e_examples_fini(&lineage);
    e2e_examples_fini(&checkpoint);
    e2e_examples_fini(&lost_work);
    e2e_examples_fini(&resumed);
    stoker_trainer_client_destroy(t2);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

Test(durable, uncommitted_leases_stay_inside_max_bytes)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    // 44-byte examples: room for 64 of them, queued and held together.
    proc_child *broker =
        e2e_broker_start(url, PROC_ARGS("--queue-depth", "1000", "--max-bytes", "2816"));
    proc_child *p =
        e2e_producer_start(url, "source",
                           PROC_ARGS("--max-examples", "200", "--delay", "0:0", "--chunk", "4",
                                     "--retain", "1000", "--linger", "30"));
    stoker_trainer_client *tc = committing_client(url, 8, 1500);
    e2e_examples ex = {0};
    // Without a commit the trainer gets at most 64 examples: then its pulls wait.
    int rv = e2e_pull_n(tc, &ex, 200, 10000);
    cr_assert_eq(rv, STOKER_STALLED, "pulling without commits ended with %s", stoker_errname(rv));
    cr_assert_leq(ex.n, 64, "%zu examples delivered uncommitted, --max-bytes holds 64", ex.n);
    cr_assert_geq(ex.n, 48, "only %zu examples before the bound", ex.n);
    stoker_status *st = h_status(url);
    cr_assert_leq(st->counters.queued + st->counters.in_flight, 64);
    stoker_status_destroy(st);
    // Committing frees the room: the rest arrives.
    do {
        cr_assert_eq(stoker_trainer_client_commit(tc), STOKER_OK);
        rv = e2e_pull_n(tc, &ex, ex.n + 32, 10000);
    } while (rv == STOKER_OK || rv == STOKER_STALLED);
    cr_assert_eq(rv, STOKER_END_OF_DATA, "the supply ended with %s", stoker_errname(rv));
    cr_assert_eq(stoker_trainer_client_commit(tc), STOKER_OK);
    proc_assert_exit(p, 0, 10000);
    e2e_assert_exactly(&ex, 1, 200);
    e2e_examples_fini(&ex);
    stoker_trainer_client_destroy(tc);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

// --- a broker away for a while --------------------------------------------

// Waits (at most timeout_ms) until the file at path contains want; returns whether it did.
static int
file_says(const char *path, const char *want, int timeout_ms)
{
    for (int waited = 0;; waited += 100) {
        char *text = testdir_read(path, NULL);
        int found = text != NULL && strstr(text, want) != NULL;
        free(text);
        if (found || waited >= timeout_ms)
            return found;
        stoker_sleep_ms(100, NULL);
    }
}

// A broker SIGKILLed and started again 4 s later, within the producers' --broker-wait of 8 s
// (the bound that was a fixed 30 s, made short here): the producers wait with what they retain,
// say so, and push it again; every example is trained once.
Test(durable, producers_wait_for_a_broker_back_within_broker_wait_and_lose_nothing)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    const char *const bargs[] = {"--queue-depth", "40", NULL};
    proc_child *broker = e2e_broker_start(url, bargs);
    enum { PER = 400 };
    const char *const pargs[] = {"--max-examples",
                                 "400",
                                 "--delay",
                                 "0.0002:0.0005",
                                 "--chunk",
                                 "3",
                                 "--linger",
                                 "60",
                                 "--retain",
                                 "200",
                                 "--broker-wait",
                                 "8",
                                 NULL};
    proc_child *p1 = e2e_producer_start(url, "patient-1", pargs);
    proc_child *p2 = e2e_producer_start(url, "patient-2", pargs);
    stoker_trainer_client *tc = e2e_trainer_client(url, 16, 20000);
    e2e_examples ex = {0};
    cr_assert_eq(e2e_pull_n(tc, &ex, 200, 30000), STOKER_OK);

    proc_signal(broker, SIGKILL);
    cr_assert(proc_wait(broker, 5000), "the broker did not die of SIGKILL");
    cr_assert(file_says(p1->err_path, "--broker-wait", 4000),
              "patient-1 did not say it waits for the broker (and for how long)");
    stoker_sleep_ms(4000, NULL);
    cr_assert_eq(proc_wait(p1, 0), 0, "patient-1 ended while waiting for its broker");
    cr_assert_eq(proc_wait(p2, 0), 0, "patient-2 ended while waiting for its broker");
    broker = e2e_broker_start(url, bargs);
    cr_assert(back_or_done(url, "patient-1", p1), "patient-1 neither came back nor finished");
    cr_assert(back_or_done(url, "patient-2", p2), "patient-2 neither came back nor finished");

    int rv = e2e_drain(tc, &ex, 60000);
    cr_assert_eq(rv, STOKER_END_OF_DATA, "the supply ended with %s", stoker_errname(rv));
    proc_assert_exit(p1, 0, 10000);
    proc_assert_exit(p2, 0, 10000);
    e2e_assert_exactly(&ex, 2, PER);
    e2e_examples_fini(&ex);
    stoker_trainer_client_destroy(tc);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

// Beyond the bound: a broker gone for good ends the producer after --broker-wait (2 s here) with
// exit code 3 and a message that names the broker, the wait, the flag and what was lost.
Test(durable, a_broker_gone_past_broker_wait_ends_the_producer_with_exit_3)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--queue-depth", "40"));
    proc_child *p = e2e_producer_start(
        url, "abandoned", PROC_ARGS("--delay", "0:0", "--chunk", "3", "--broker-wait", "2"));
    cr_assert(h_wait_producer(url, "abandoned", 30, 10000), "no examples in 10 s");
    proc_signal(broker, SIGKILL);
    cr_assert(proc_wait(broker, 5000), "the broker did not die of SIGKILL");
    uint64_t killed = stoker_now_ms();
    cr_assert(proc_wait(p, 8000), "the producer still runs 8 s after its broker died "
                                  "(--broker-wait 2)");
    uint64_t took = stoker_now_ms() - killed;
    cr_assert_geq(took, 1500, "the producer gave up after %llu ms, before its --broker-wait 2",
                  (unsigned long long)took);
    char *err = testdir_read(p->err_path, NULL);
    cr_assert_eq(proc_exit_code(p), 3, "exit code %d, expected 3:\n%s", proc_exit_code(p), err);
    cr_assert(strstr(err, "--broker-wait") != NULL && strstr(err, url) != NULL &&
                  strstr(err, "retained") != NULL,
              "the message does not name the broker, --broker-wait and what was retained:\n%s",
              err);
    free(err);
}

// No broker at all: the producer waits --broker-wait for one, then says no broker answered (not
// that one refused it) and exits 3.
Test(durable, a_producer_without_a_broker_says_none_answered_and_exits_3)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "nobody");
    proc_child *p = e2e_producer_start(url, "lonely", PROC_ARGS("--broker-wait", "1"));
    cr_assert(proc_wait(p, 8000), "the producer still runs 8 s without a broker (--broker-wait 1)");
    char *err = testdir_read(p->err_path, NULL);
    cr_assert_eq(proc_exit_code(p), 3, "exit code %d, expected 3:\n%s", proc_exit_code(p), err);
    cr_assert(strstr(err, "refused") == NULL, "nothing refused the hello, but:\n%s", err);
    cr_assert(strstr(err, "no broker answered") != NULL && strstr(err, url) != NULL,
              "the message does not say no broker answered at %s:\n%s", url, err);
    free(err);
}

typedef struct drain_arg {
    stoker_trainer_client *tc;
    e2e_examples ex;
    int rv;
} drain_arg;

static void *
drain_main(void *arg)
{
    drain_arg *d = arg;
    d->rv = e2e_drain(d->tc, &d->ex, 60000);
    return NULL;
}

// Two trainers and a broker SIGKILLed and restarted mid-run. The producers
// push again what the dead broker had not reported trained; part of it was trained by one
// trainer, and the other must not get it from the new broker (each trainer's own identity filter
// sees only what it saw itself). Checked from the identities both trainers trained: every
// example exactly once across the two, nothing lost.
Test(durable, two_trainers_across_a_broker_restart_train_each_example_once)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    const char *const bargs[] = {"--queue-depth", "40", "--producer-timeout", "2", NULL};
    proc_child *broker = e2e_broker_start(url, bargs);
    enum { PER = 600 };
    const char *const pargs[] = {"--max-examples", "600", "--delay",  "0.0002:0.0005",
                                 "--chunk",        "3",   "--linger", "60",
                                 "--retain",       "200", NULL};
    proc_child *p1 = e2e_producer_start(url, "two-1", pargs);
    proc_child *p2 = e2e_producer_start(url, "two-2", pargs);
    stoker_trainer_client *a = e2e_trainer_client(url, 8, 20000);
    stoker_trainer_client *b = e2e_trainer_client(url, 8, 20000);
    e2e_examples ex = {0};

    // Both train, in turns, then the broker dies with trained examples not yet reported to the
    // producers (their retention pushes them again).
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(e2e_pull_n(a, &ex, ex.n + 40, 30000), STOKER_OK);
        cr_assert_eq(e2e_pull_n(b, &ex, ex.n + 40, 30000), STOKER_OK);
    }
    broker = restart(broker, url, bargs);
    // In turns again, so that what one trained before may be offered to the other.
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(e2e_pull_n(a, &ex, ex.n + 40, 30000), STOKER_OK);
        cr_assert_eq(e2e_pull_n(b, &ex, ex.n + 40, 30000), STOKER_OK);
    }
    cr_assert(back_or_done(url, "two-1", p1), "two-1 neither came back nor finished");
    cr_assert(back_or_done(url, "two-2", p2), "two-2 neither came back nor finished");
    // Both drain at once (each holds batches the other's end waits for).
    drain_arg da = {.tc = b, .ex = {0}};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, drain_main, &da), 0);
    int rv = e2e_drain(a, &ex, 60000);
    pthread_join(th, NULL);
    cr_assert_eq(rv, STOKER_END_OF_DATA, "trainer a: the supply ended with %s", stoker_errname(rv));
    cr_assert_eq(da.rv, STOKER_END_OF_DATA, "trainer b: the supply ended with %s",
                 stoker_errname(da.rv));
    for (size_t i = 0; i < da.ex.n; i++) { // b's examples join a's (the bytes move)
        if (ex.n == ex.cap) {
            ex.cap = ex.cap ? 2 * ex.cap : 64;
            ex.v = realloc(ex.v, ex.cap * sizeof(*ex.v));
            cr_assert_not_null(ex.v);
        }
        ex.v[ex.n++] = da.ex.v[i];
    }
    free(da.ex.v);
    proc_assert_exit(p1, 0, 10000);
    proc_assert_exit(p2, 0, 10000);
    fprintf(stderr,
            "durable: two trainers, %zu examples trained across a broker restart, %zu trained "
            "twice, duplicates dropped by each trainer's filter: %llu and %llu\n",
            ex.n, e2e_duplicates(&ex), (unsigned long long)stoker_trainer_client_duplicates(a),
            (unsigned long long)stoker_trainer_client_duplicates(b));
    e2e_assert_exactly(&ex, 2, PER);
    e2e_examples_fini(&ex);
    stoker_trainer_client_destroy(a);
    stoker_trainer_client_destroy(b);
    proc_broker_stop(broker);
}

typedef struct back_watch {
    const char *url;
    uint64_t back_ms; // when the status first showed 2 producers alive and 1 trainer (0: never)
} back_watch;

// Polls the broker's status every 20 ms until it shows both producers alive and the trainer
// connected, and notes when.
static void *
back_watch_main(void *arg)
{
    back_watch *w = arg;
    for (int waited = 0; waited < 20000; waited += 20) {
        stoker_status *st = NULL;
        char err[256];
        // No assertion off the test's thread: a status that fails is only "not yet".
        int back = stoker_status_fetch(w->url, NULL, 1000, &st, err, sizeof(err)) == STOKER_OK &&
                   st->counters.producers_alive == 2 && st->counters.trainers == 1;
        stoker_status_destroy(st);
        if (back) {
            w->back_ms = stoker_now_ms();
            return NULL;
        }
        stoker_sleep_ms(20, NULL);
    }
    return NULL;
}

// The new broker's returning window (nothing handed out while the peers of the broker that
// died come back) ends as soon as they are all back, as its producers' hellos say the old broker
// had them, not after --producer-timeout (10 s here): the first batch comes within 1.5 s of
// both producers and the trainer being back, and nothing is lost or trained twice.
Test(durable, a_restarted_broker_hands_out_as_soon_as_its_peers_are_back)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    const char *const bargs[] = {"--queue-depth", "40", "--producer-timeout", "10", NULL};
    proc_child *broker = e2e_broker_start(url, bargs);
    enum { PER = 600 };
    const char *const pargs[] = {"--max-examples", "600", "--delay",  "0.0002:0.0005",
                                 "--chunk",        "3",   "--linger", "60",
                                 "--retain",       "200", NULL};
    proc_child *p1 = e2e_producer_start(url, "soon-1", pargs);
    proc_child *p2 = e2e_producer_start(url, "soon-2", pargs);
    stoker_trainer_client *tc = e2e_trainer_client(url, 8, 30000);
    e2e_examples ex = {0};
    cr_assert_eq(e2e_pull_n(tc, &ex, 200, 30000), STOKER_OK);
    // Both producers told the broker's peers in a reply since the trainer connected.
    cr_assert(h_wait_producer(url, "soon-1", 1, 10000) && h_wait_producer(url, "soon-2", 1, 10000));
    stoker_sleep_ms(200, NULL);
    broker = restart(broker, url, bargs);
    uint64_t started_ms = stoker_now_ms();
    back_watch w = {.url = url};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, back_watch_main, &w), 0);
    // More examples than the trainer prefetched from the broker that died: some come from the
    // new one.
    size_t before = ex.n;
    cr_assert_eq(e2e_pull_n(tc, &ex, before + 64, 30000), STOKER_OK);
    uint64_t first_ms = stoker_now_ms();
    pthread_join(th, NULL);
    cr_assert_neq(w.back_ms, 0, "the status never showed both producers and the trainer back");
    fprintf(stderr,
            "durable: peers back %.3f s after the restart, 64 examples %.3f s after it "
            "(--producer-timeout 10)\n",
            (double)(w.back_ms - started_ms) / 1000.0, (double)(first_ms - started_ms) / 1000.0);
    cr_assert_lt(first_ms, w.back_ms + 1500,
                 "the new broker's first batch came %.3f s after the peers were back (at most "
                 "1.5 s)",
                 (double)(first_ms - w.back_ms) / 1000.0);
    // The trainer client noticed the restart exactly: another broker instance answered its hello.
    cr_assert_eq(stoker_trainer_client_broker_restarts(tc), 1);
    int told = 0;
    for (int i = 0; i < ex.n_events; i++)
        told += ex.events[i].kind == STOKER_EVENT_BROKER_RESTARTED;
    cr_assert_eq(told, 1, "%d broker_restarted events", told);
    int rv = e2e_drain(tc, &ex, 60000);
    cr_assert_eq(rv, STOKER_END_OF_DATA, "the supply ended with %s", stoker_errname(rv));
    proc_assert_exit(p1, 0, 10000);
    proc_assert_exit(p2, 0, 10000);
    e2e_assert_exactly(&ex, 2, PER);
    e2e_examples_fini(&ex);
    stoker_trainer_client_destroy(tc);
    h_assert_identity(url);
    proc_broker_stop(broker);
}
