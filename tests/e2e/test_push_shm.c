// Pushes by reference with real processes (docs/shm.md, "The producers' side"): producers on the
// broker's host keep their retained chunks in shared memory the broker maps, and push only where
// they are. stoker-bench-producer --fill all writes each example as its seq (the whole seq in
// its first 8 bytes, the low byte everywhere else), so every example is checked byte for byte as
// it arrives: a region written again while the broker could still read it would show as the
// wrong seq. Also: a producer SIGKILLed with pushes queued (they are still delivered, from its
// memory, which the broker unmaps once they are trained), and a broker SIGKILLed and restarted
// (the producer hands its memory to the new one and pushes by reference again), and a dataset's
// producer, which retains nothing and pushes by reference from copies it keeps until trained.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "e2e.h"
#include "helpers.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/status.h"

#define SCHEMA        "image:uint8[64,64,3]"
#define EXAMPLE_BYTES (64 * 64 * 3)

TestSuite(push_shm, .init = e2e_setup, .fini = e2e_teardown, .timeout = 120);

// A bench producer of SCHEMA, 8 examples (96 KiB) a push: above the size pushed by reference.
static proc_child *
producer(const char *url, const char *name, const char *max_examples)
{
    if (max_examples == NULL)
        return e2e_start("bench-producer", "STOKER_BENCH_PRODUCER_BIN",
                         PROC_ARGS("--broker", url, "--name", name, "--schema", SCHEMA, "--chunk",
                                   "8", "--fill", "all"));
    return e2e_start("bench-producer", "STOKER_BENCH_PRODUCER_BIN",
                     PROC_ARGS("--broker", url, "--name", name, "--schema", SCHEMA, "--chunk", "8",
                               "--fill", "all", "--max-examples", max_examples));
}

// Asserts that example i of b is what the bench producer made for its seq.
static void
assert_example(const stoker_batch *b, uint32_t i, uint64_t seq)
{
    const uint8_t *x = b->chunk.data[0] + (size_t)i * EXAMPLE_BYTES;
    uint64_t stamp;
    memcpy(&stamp, x, sizeof(stamp));
    cr_assert_eq(stamp, seq, "example of seq %llu reads as seq %llu: its memory was reused",
                 (unsigned long long)seq, (unsigned long long)stamp);
    for (size_t k = sizeof(stamp); k < EXAMPLE_BYTES; k++)
        if (x[k] != (uint8_t)seq)
            cr_assert_fail("example of seq %llu: byte %zu is %u, not %u", (unsigned long long)seq,
                           k, x[k], (uint8_t)seq);
}

// Checks every example of b and records its identity.
static void
check_batch(const stoker_batch *b, h_ids *ids)
{
    uint32_t at = 0;
    for (uint32_t r = 0; r < b->n_runs; r++) {
        for (uint32_t k = 0; k < b->runs[r].count; k++, at++) {
            assert_example(b, at, b->runs[r].first_seq + k);
            h_ids_add(ids, b->runs[r].session, b->runs[r].first_seq + k);
        }
    }
    cr_assert_eq(at, b->chunk.count);
}

// Pulls, checks and acknowledges until the supply ends (returned) or want examples came
// (STOKER_OK).
static int
pull_checked(stoker_trainer_client *tc, h_ids *ids, size_t want, int timeout_ms)
{
    uint64_t deadline = stoker_now_ms() + (uint64_t)timeout_ms;
    while (want == 0 || ids->n < want) {
        cr_assert_lt(stoker_now_ms(), deadline, "%zu examples after %d ms", ids->n, timeout_ms);
        stoker_batch *b = NULL;
        int rv = stoker_trainer_client_next(tc, &b);
        if (rv != STOKER_OK)
            return rv;
        check_batch(b, ids);
        stoker_trainer_client_ack(tc, b->lease);
        stoker_batch_destroy(b);
    }
    return STOKER_OK;
}

// Asserts that ids holds seqs 0 .. per - 1 of each of n sessions, once each.
static void
assert_all_once(const h_ids *ids, uint32_t n, uint64_t per)
{
    cr_assert_eq(h_ids_duplicates(ids), 0, "an example was delivered twice");
    cr_assert_eq(ids->n, n * per, "%zu examples delivered, %llu made", ids->n,
                 (unsigned long long)(n * per));
}

// Whether the broker (pid) maps a producer's shared memory.
static int
broker_maps_a_pool(pid_t pid)
{
    char path[64], line[512];
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot read %s", path);
    int found = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        found |= strstr(line, "stoker-push-pool") != NULL;
    fclose(f);
    return found;
}

// No file of ours in /dev/shm (the memory is memfds: nothing to leave behind).
static void
assert_dev_shm_clean(void)
{
    FILE *ls = popen("ls /dev/shm 2>/dev/null | grep -c stoker", "r");
    cr_assert_not_null(ls);
    int n = -1;
    cr_assert_eq(fscanf(ls, "%d", &n), 1);
    pclose(ls);
    cr_assert_eq(n, 0, "%d stoker files left in /dev/shm", n);
}

// The producer entry called name, from a fresh status of url; asserts every push of it came by
// reference (more than min of them).
static void
assert_pushed_by_reference(const char *url, const char *name, uint64_t min)
{
    stoker_status *st = h_status(url);
    const stoker_producer_info *p = h_status_producer(st, name);
    cr_assert_gt(p->pushes_shm, min, "producer '%s': %llu pushes by reference", name,
                 (unsigned long long)p->pushes_shm);
    cr_assert_eq(p->pushes_shm, p->pushes, "producer '%s': %llu of %llu pushes by reference", name,
                 (unsigned long long)p->pushes_shm, (unsigned long long)p->pushes);
    stoker_status_destroy(st);
}

// 2 x 2,400 examples in pushes of 8: 300 pushes each, while retention holds twice the queue
// depth (a few dozen pushes), so each producer writes every region of its memory again many
// times, each time only after the broker said its examples were trained.
Test(push_shm, examples_exact_while_the_producers_memory_is_reused)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    e2e_broker_start(url, PROC_ARGS("--queue-depth", "32"));
    proc_child *a = producer(url, "a", "2400");
    proc_child *b = producer(url, "b", "2400");
    cr_assert(h_wait_producer(url, "a", 1, 10000) && h_wait_producer(url, "b", 1, 10000),
              "the producers did not push within 10 s");
    stoker_trainer_client *tc = e2e_trainer_client(url, 16, 10000);
    h_ids ids = {0};
    int rv = pull_checked(tc, &ids, 0, 60000);
    cr_assert_eq(rv, STOKER_END_OF_DATA, "the supply ended with %s", stoker_errname(rv));
    assert_all_once(&ids, 2, 2400);
    proc_assert_exit(a, 0, 5000);
    proc_assert_exit(b, 0, 5000);
    assert_pushed_by_reference(url, "a", 100);
    assert_pushed_by_reference(url, "b", 100);
    h_ids_fini(&ids);
    stoker_trainer_client_destroy(tc);
    assert_dev_shm_clean();
}

typedef struct queued_at_least {
    uint64_t n;
} queued_at_least;

static int
queued(const stoker_status *st, const void *arg)
{
    return st->n_producers == 1 && st->producers[0].queued >= ((const queued_at_least *)arg)->n &&
           st->producers[0].pushes_shm > 0;
}

// The queued pushes of a SIGKILLed producer point into memory only the broker still maps: they
// are delivered as they were made, and once trained the broker lets the memory go.
Test(push_shm, a_killed_producers_queued_pushes_are_delivered_then_unmapped)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(url, PROC_ARGS("--queue-depth", "64"));
    proc_child *p = producer(url, "victim", NULL);
    queued_at_least q = {.n = 56};
    cr_assert(h_wait_status(url, queued, &q, 10000), "the queue did not fill by reference in 10 s");
    proc_signal(p, SIGKILL);
    cr_assert(proc_wait(p, 5000), "the producer did not die of SIGKILL");
    cr_assert(broker_maps_a_pool(broker->pid),
              "the broker does not map the dead producer's memory its queue points into");
    stoker_status *st = h_status(url);
    uint64_t accepted = st->producers[0].accepted;
    stoker_status_destroy(st);

    stoker_trainer_client *tc = e2e_trainer_client(url, 16, 10000);
    h_ids ids = {0};
    int rv = pull_checked(tc, &ids, 0, 30000);
    cr_assert(rv == STOKER_NO_PRODUCERS || rv == STOKER_END_OF_DATA, "the supply ended with %s",
              stoker_errname(rv));
    assert_all_once(&ids, 1, accepted);
    stoker_trainer_client_flush(tc);
    int gone = 0;
    for (int waited = 0; waited < 3000 && !gone; waited += 50) {
        gone = !broker_maps_a_pool(broker->pid);
        if (!gone)
            stoker_sleep_ms(50, NULL);
    }
    cr_assert(gone, "the broker still maps the dead producer's memory after its examples were "
                    "trained");
    assert_dev_shm_clean();
    h_ids_fini(&ids);
    stoker_trainer_client_destroy(tc);
    proc_broker_stop(broker);
}

// A broker SIGKILLed mid-run: the producer says hello to the new one, hands it its memory under
// a new secret, and pushes its retained chunks again by reference; the trainer gets every example
// once (its identity filter drops what the dead broker delivered and the producer pushed again).
Test(push_shm, a_restarted_broker_takes_the_producers_memory_again)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    const char *const bargs[] = {"--queue-depth", "32", NULL};
    proc_child *broker = e2e_broker_start(url, bargs);
    proc_child *p = producer(url, "keeper", "2000");
    cr_assert(h_wait_producer(url, "keeper", 1, 10000), "the producer did not push within 10 s");
    stoker_trainer_client *tc = e2e_trainer_client(url, 16, 20000);
    h_ids ids = {0};
    cr_assert_eq(pull_checked(tc, &ids, 600, 30000), STOKER_OK);
    assert_pushed_by_reference(url, "keeper", 10);
    proc_signal(broker, SIGKILL);
    cr_assert(proc_wait(broker, 5000), "the broker did not die of SIGKILL");
    stoker_sleep_ms(150, NULL);
    e2e_broker_start(url, bargs);
    cr_assert(h_wait_producer(url, "keeper", 1, 20000), "the producer did not come back");
    int rv = pull_checked(tc, &ids, 0, 60000);
    cr_assert_eq(rv, STOKER_END_OF_DATA, "the supply ended with %s", stoker_errname(rv));
    assert_all_once(&ids, 1, 2000);
    assert_pushed_by_reference(url, "keeper", 10);
    proc_assert_exit(p, 0, 10000);
    h_ids_fini(&ids);
    stoker_trainer_client_destroy(tc);
}

// STOKER_SHM=0 in the producer's environment: every push goes as bytes, and all arrive as made.
Test(push_shm, turned_off_pushes_go_as_bytes)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    e2e_broker_start(url, NULL);
    setenv("STOKER_SHM", "0", 1);
    proc_child *p = producer(url, "bytes", "400");
    unsetenv("STOKER_SHM");
    cr_assert(h_wait_producer(url, "bytes", 1, 10000), "the producer did not push within 10 s");
    stoker_trainer_client *tc = e2e_trainer_client(url, 16, 10000);
    h_ids ids = {0};
    int rv = pull_checked(tc, &ids, 0, 30000);
    cr_assert_eq(rv, STOKER_END_OF_DATA, "the supply ended with %s", stoker_errname(rv));
    assert_all_once(&ids, 1, 400);
    proc_assert_exit(p, 0, 5000);
    stoker_status *st = h_status(url);
    const stoker_producer_info *info = h_status_producer(st, "bytes");
    cr_assert_gt(info->pushes, 0);
    cr_assert_eq(info->pushes_shm, 0, "%llu pushes by reference with STOKER_SHM=0",
                 (unsigned long long)info->pushes_shm);
    stoker_status_destroy(st);
    h_ids_fini(&ids);
    stoker_trainer_client_destroy(tc);
}

// A dataset's producer (its pushes carry items, one in flight): pushed by reference all the same,
// every item of both epochs delivered once, each example what the producer made for its item.
Test(push_shm, a_datasets_pushes_go_by_reference_too)
{
    enum { ITEMS = 400 };
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    e2e_broker_start(url, PROC_ARGS("--dataset-size", "400", "--epochs", "2"));
    proc_child *p = e2e_start("bench-producer", "STOKER_BENCH_PRODUCER_BIN",
                              PROC_ARGS("--broker", url, "--name", "items", "--schema", SCHEMA,
                                        "--chunk", "8", "--fill", "all", "--items", "400"));
    cr_assert(h_wait_producer(url, "items", 1, 10000), "the producer did not push within 10 s");
    stoker_trainer_client *tc = e2e_trainer_client(url, 16, 10000);
    static uint8_t seen[2][ITEMS];
    memset(seen, 0, sizeof(seen));
    uint64_t deadline = stoker_now_ms() + 60000, n = 0;
    int rv;
    for (;;) {
        cr_assert_lt(stoker_now_ms(), deadline, "%llu items after 60 s", (unsigned long long)n);
        stoker_batch *b = NULL;
        if ((rv = stoker_trainer_client_next(tc, &b)) != STOKER_OK)
            break;
        cr_assert_not_null(b->items, "a dataset's batch without items");
        for (uint32_t i = 0; i < b->chunk.count; i++) {
            uint32_t epoch = stoker_item_epoch(b->items[i]);
            uint64_t index = stoker_item_index(b->items[i]);
            cr_assert(epoch < 2 && index < ITEMS, "item %u:%llu outside the dataset", epoch,
                      (unsigned long long)index);
            cr_assert_eq(seen[epoch][index], 0, "item %u:%llu delivered twice", epoch,
                         (unsigned long long)index);
            seen[epoch][index] = 1;
            assert_example(b, i, index); // made like example seq = index
            n++;
        }
        stoker_trainer_client_ack(tc, b->lease);
        stoker_batch_destroy(b);
    }
    cr_assert_eq(rv, STOKER_END_OF_DATA, "the supply ended with %s", stoker_errname(rv));
    cr_assert_eq(n, 2 * ITEMS, "%llu items delivered, %d made", (unsigned long long)n, 2 * ITEMS);
    proc_assert_exit(p, 0, 10000);
    assert_pushed_by_reference(url, "items", 50);
    stoker_trainer_client_destroy(tc);
}
