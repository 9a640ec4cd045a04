// Shared memory with real processes (docs/shm.md): a broker with a small arena (--shm-bytes) so
// that it wraps around many times, stoker-producer's synthetic examples checked byte for byte
// against the generator itself (each example is recomputed from the producer's seed, name and
// seq: a checksum that tells every example apart), consumers that hold batches for long, a
// consumer SIGKILLed while holding regions, a socket and an shm consumer side by side, a write
// into the read-only mapping (in a child, tests/e2e/shm_holder.c), and the broker's memory bound
// under a slow consumer that holds more than the arena. The Python package's side of the same
// promises is tests/python/test_shm.py.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "e2e.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/rng.h"
#include "stoker/status.h"
#include "stoker/synthetic.h"

#define SEED "41"

TestSuite(shm, .init = e2e_setup, .fini = e2e_teardown, .timeout = 90);

// A trainer client through shared memory (shm 1) or with STOKER_SHM=0 (shm 0).
static stoker_trainer_client *
client(const char *url, uint32_t batch_size, int shm)
{
    if (!shm)
        setenv("STOKER_SHM", "0", 1);
    stoker_trainer_client *tc = e2e_trainer_client(url, batch_size, 10000);
    unsetenv("STOKER_SHM");
    return tc;
}

// Asserts that each example is exactly what producer `name` with --seed SEED made for its seq.
static void
assert_exact(const e2e_examples *ex, const char *name)
{
    stoker_synthetic synth = {0, 0, NULL};
    float input[STOKER_SYNTHETIC_INPUTS], output[1];
    void *const fields[] = {input, output};
    cr_assert_eq(ex->example_bytes, sizeof(input) + sizeof(output));
    for (size_t i = 0; i < ex->n; i++) {
        uint64_t seq = ex->v[i].seq;
        stoker_synthetic_fill(&synth, seq, stoker_example_seed(strtoull(SEED, NULL, 10), name, seq),
                              fields);
        cr_assert(memcmp(ex->v[i].bytes, input, sizeof(input)) == 0 &&
                      memcmp(ex->v[i].bytes + sizeof(input), output, sizeof(output)) == 0,
                  "example %s:%llu is not what its producer made", name, (unsigned long long)seq);
    }
}

// The broker's entry for the consumer named name (the status is the caller's).
static const stoker_consumer_info *
consumer_entry(const stoker_status *st, const char *name, uint32_t pid)
{
    for (uint32_t i = 0; i < st->n_consumers; i++)
        if (strcmp(st->consumers[i].name, name) == 0 && (pid == 0 || st->consumers[i].pid == pid))
            return &st->consumers[i];
    cr_assert_fail("no consumer '%s' in the broker's status", name);
    return NULL;
}

static proc_child *
broker(char *url, const char *shm_bytes)
{
    testdir_ipc_url(url, 256, "broker");
    return e2e_broker_start(url, PROC_ARGS("--shm-bytes", shm_bytes));
}

static proc_child *
producer(const char *url, const char *max_examples)
{
    return e2e_producer_start(url, "p1",
                              PROC_ARGS("--delay", "0:0", "--seed", SEED, "--chunk", "32",
                                        "--max-examples", max_examples));
}

// One batch of 8 synthetic examples takes 384 bytes of the arena (two 64-byte aligned blobs):
// 8 KiB hold about 21. 6,000 examples are 750 batches, the arena wraps around ~30 times, while
// every 40th batch is kept (acknowledged, not released) until the end, 12 of them: the kept ones
// must still read as they came, and whatever came as bytes came so because the arena was full.
Test(shm, examples_exact_across_wraparounds_while_batches_are_held)
{
    char url[256];
    broker(url, "8192");
    producer(url, "6000");
    stoker_trainer_client *tc = client(url, 8, 1);
    e2e_examples ex = {0};
    stoker_batch *kept[64];
    uint8_t *copies[64];
    int n_kept = 0;
    uint64_t deadline = stoker_now_ms() + 60000;
    for (uint64_t k = 0;; k++) {
        cr_assert_lt(stoker_now_ms(), deadline, "6000 examples not pulled within 60 s");
        stoker_batch *b = NULL;
        int rv = stoker_trainer_client_next(tc, &b);
        if (rv == STOKER_END_OF_DATA)
            break;
        cr_assert_eq(rv, STOKER_OK, "%s", stoker_strerror(rv));
        e2e_record(&ex, b);
        stoker_trainer_client_ack(tc, b->lease);
        if (k % 40 == 0 && n_kept < 12) {
            size_t bytes = (size_t)b->chunk.count * 40; // input blob: count x float32[10]
            copies[n_kept] = malloc(bytes);
            cr_assert_not_null(copies[n_kept]);
            memcpy(copies[n_kept], b->chunk.data[0], bytes);
            kept[n_kept++] = b;
        } else {
            stoker_batch_destroy(b);
        }
    }
    uint64_t shm = stoker_trainer_client_arena_batches(tc);
    uint64_t sock = stoker_trainer_client_socket_batches(tc);
    cr_assert_gt(shm * 384, 8192 * 20,
                 "only %llu batches through shared memory: not 20 wrap-arounds",
                 (unsigned long long)shm);
    cr_assert_str_eq(stoker_trainer_client_delivery(tc), "shm");
    int kept_in_arena = 0;
    for (int i = 0; i < n_kept; i++)
        kept_in_arena += kept[i]->arena != NULL;
    cr_assert_geq(kept_in_arena, 6, "only %d of the kept batches are in the arena", kept_in_arena);
    for (int i = 0; i < n_kept; i++) {
        size_t bytes = (size_t)kept[i]->chunk.count * 40;
        cr_assert(memcmp(copies[i], kept[i]->chunk.data[0], bytes) == 0,
                  "kept batch %d (lease %llu) was overwritten", i,
                  (unsigned long long)kept[i]->lease);
        stoker_batch_destroy(kept[i]);
        free(copies[i]);
    }
    stoker_trainer_client_flush(tc);
    cr_assert_eq(ex.n, 6000, "%zu examples of 6000", ex.n);
    e2e_examples_sort(&ex);
    cr_assert_eq(e2e_duplicates(&ex), 0);
    assert_exact(&ex, "p1");
    stoker_status *st = h_status(url);
    const stoker_consumer_info *c = consumer_entry(st, "e2e-test", 0);
    cr_assert_eq(c->delivery, STOKER_DELIVERY_SHM);
    cr_assert_eq(c->batches_shm, shm);
    cr_assert_eq(c->batches_socket, sock);
    cr_assert_eq(c->arena_full, sock, "a batch came as bytes for another reason than a full arena");
    stoker_status_destroy(st);
    e2e_examples_fini(&ex);
    stoker_trainer_client_destroy(tc);
}

// Starts shm_holder (tests/e2e/shm_holder.c) taking n batches of batch examples in mode ("hold"
// or "write") and waits until it says it holds them.
static proc_child *
holder(const char *url, int n, int batch, const char *mode)
{
    char count[16], size[16];
    snprintf(count, sizeof(count), "%d", n);
    snprintf(size, sizeof(size), "%d", batch);
#ifdef __SANITIZE_ADDRESS__
    // Built with AddressSanitizer too: let the fault be a plain SIGSEGV, not ASan's report.
    char asan[512];
    const char *old = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof(asan), "%s%shandle_segv=0", old ? old : "", old ? ":" : "");
    setenv("ASAN_OPTIONS", asan, 1);
#endif
    proc_child *h = e2e_start("holder", "STOKER_SHM_HOLDER_BIN", PROC_ARGS(url, count, size, mode));
    char want[32];
    snprintf(want, sizeof(want), "holding %d", n);
    uint64_t deadline = stoker_now_ms() + 10000;
    while (!testdir_contains(h->out_path, want)) {
        cr_assert(proc_wait(h, 0) == 0, "shm_holder exited %d before holding", proc_exit_code(h));
        cr_assert_lt(stoker_now_ms(), deadline, "shm_holder did not hold %d batches in 10 s", n);
        stoker_sleep_ms(20, NULL);
    }
    return h;
}

// The holder takes the whole arena (the broker rounds it up to a page, 4,096 bytes: eight
// regions of 512 bytes, one batch of 11 examples each, and no room left for even one example)
// and is SIGKILLed. Until then our batches come as bytes (arena full); after, the broker
// redelivers its leases and only then reuses its regions: the first batch we get in shared
// memory again comes after the redelivery, and everything we got (the dead consumer's
// examples among it) is exact.
Test(shm, killed_consumer_regions_reused_only_after_its_leases_came_back)
{
    char url[256];
    broker(url, "4096");
    producer(url, "4000");
    cr_assert(h_wait_producer(url, "p1", 64, 10000), "the producer did not push 64 examples");
    proc_child *h = holder(url, 8, 11, "hold");
    stoker_trainer_client *tc = client(url, 8, 1);
    e2e_examples ex = {0};
    cr_assert_eq(e2e_pull_n(tc, &ex, 8 * 8, 10000), STOKER_OK);
    cr_assert_eq(stoker_trainer_client_arena_batches(tc), 0,
                 "a batch came through the arena the holder fills");
    stoker_status *st = h_status(url);
    const stoker_consumer_info *held = consumer_entry(st, "shm-holder", 0);
    cr_assert_eq(held->pid, (uint32_t)h->pid);
    cr_assert_eq(held->delivery, STOKER_DELIVERY_SHM);
    cr_assert_geq(consumer_entry(st, "e2e-test", 0)->arena_full, 8);
    uint64_t redelivered_before = st->counters.redelivered;
    stoker_status_destroy(st);

    proc_signal(h, SIGKILL);
    cr_assert(proc_wait(h, 5000));
    uint64_t deadline = stoker_now_ms() + 10000;
    while (stoker_trainer_client_arena_batches(tc) == 0) {
        cr_assert_lt(stoker_now_ms(), deadline, "the dead consumer's regions never came back");
        cr_assert_eq(e2e_pull_n(tc, &ex, ex.n + 1, 10000), STOKER_OK);
    }
    st = h_status(url);
    cr_assert_geq(st->counters.redelivered, redelivered_before + 8 * 11,
                  "a region came back before the dead consumer's leases (%llu redelivered)",
                  (unsigned long long)st->counters.redelivered);
    cr_assert_not(consumer_entry(st, "shm-holder", 0)->connected);
    stoker_status_destroy(st);
    cr_assert_neq(e2e_drain(tc, &ex, 30000), STOKER_TIMEOUT);
    e2e_examples_sort(&ex);
    cr_assert_eq(e2e_duplicates(&ex), 0);
    cr_assert_eq(ex.n, 4000, "%zu examples of 4000", ex.n);
    assert_exact(&ex, "p1");
    e2e_examples_fini(&ex);
    stoker_trainer_client_destroy(tc);
}

// Two consumers on one broker, one through shared memory and one with STOKER_SHM=0, take turns
// until the supply ends: each gets exact examples on its own path only, together every example
// once, and the broker's status names each one's path.
Test(shm, socket_and_shm_consumers_on_one_broker_both_exact)
{
    char url[256];
    broker(url, "65536");
    producer(url, "3000");
    stoker_trainer_client *tc[2] = {client(url, 8, 1), client(url, 8, 0)};
    e2e_examples ex[2] = {{0}};
    int ended[2] = {0, 0};
    uint64_t deadline = stoker_now_ms() + 60000;
    while (!ended[0] || !ended[1]) {
        cr_assert_lt(stoker_now_ms(), deadline, "3000 examples not pulled within 60 s");
        for (int i = 0; i < 2; i++) {
            if (ended[i])
                continue;
            int rv = e2e_pull_n(tc[i], &ex[i], ex[i].n + 1, 10000);
            ended[i] = rv == STOKER_END_OF_DATA;
            cr_assert(rv == STOKER_OK || ended[i], "consumer %d: %s", i, stoker_strerror(rv));
        }
    }
    cr_assert_gt(ex[0].n, 0);
    cr_assert_gt(ex[1].n, 0);
    cr_assert_str_eq(stoker_trainer_client_delivery(tc[0]), "shm");
    cr_assert_str_eq(stoker_trainer_client_delivery(tc[1]), "socket");
    cr_assert_eq(stoker_trainer_client_socket_batches(tc[0]), 0);
    cr_assert_eq(stoker_trainer_client_arena_batches(tc[1]), 0);
    stoker_status *st = h_status(url);
    cr_assert_eq(st->n_consumers, 2);
    for (int i = 0; i < 2; i++) {
        const stoker_consumer_info *c = &st->consumers[i];
        int shm = c->delivery == STOKER_DELIVERY_SHM;
        cr_assert_eq(c->delivery, shm ? STOKER_DELIVERY_SHM : STOKER_DELIVERY_SOCKET);
        cr_assert_eq(shm ? c->batches_socket : c->batches_shm, 0);
        cr_assert_eq(shm ? c->examples_shm : c->examples_socket, ex[shm ? 0 : 1].n);
        cr_assert_eq(c->pid, (uint32_t)getpid());
    }
    cr_assert_neq(st->consumers[0].delivery, st->consumers[1].delivery);
    cr_assert_eq(st->counters.trainers_shm, 1);
    stoker_status_destroy(st);
    e2e_examples all = {0};
    for (int i = 0; i < 2; i++) {
        assert_exact(&ex[i], "p1");
        for (size_t k = 0; k < ex[i].n; k++) { // moved: ex[i] keeps no bytes afterwards
            if (all.n == all.cap) {
                all.cap = all.cap ? all.cap * 2 : 4096;
                all.v = realloc(all.v, all.cap * sizeof(*all.v));
                cr_assert_not_null(all.v);
            }
            all.v[all.n++] = ex[i].v[k];
        }
        ex[i].n = 0;
        e2e_examples_fini(&ex[i]);
        stoker_trainer_client_destroy(tc[i]);
    }
    e2e_examples_sort(&all);
    cr_assert_eq(e2e_duplicates(&all), 0);
    cr_assert_eq(all.n, 3000, "%zu examples of 3000", all.n);
    e2e_examples_fini(&all);
}

// The mapping is read-only: a consumer that writes into a batch there dies of SIGSEGV (in a
// child process, shm_holder).
Test(shm, write_into_the_mapping_faults)
{
    char url[256];
    broker(url, "65536");
    producer(url, "400");
    proc_child *h = holder(url, 1, 8, "write");
    cr_assert(proc_wait(h, 10000), "the writer neither faulted nor exited");
    cr_assert_eq(proc_exit_code(h), 128 + SIGSEGV, "the writer exited %d", proc_exit_code(h));
    cr_assert_not(testdir_contains(h->out_path, "wrote"));
}

// Memory bound (as tests/hardening/test_memory.c): producers far faster than a slow consumer
// that keeps its latest 24 batches of 1 MiB (acknowledged, not released: 24 MiB, three times
// the 8 MiB arena). The arena never grows: once it is full, batches come as bytes; the broker's
// resident memory stays under an idle broker's plus --max-bytes plus --shm-bytes plus the fixed
// overhead test_memory.c measured (12 MiB per producer, 16 MiB of slack).
#define BIG_SCHEMA "input:float32[16383],output:float32[1]" // 65,536 bytes per example
#define BIG_MAX    (32ull << 20)
#define BIG_SHM    (8ull << 20)
#define BIG_KEEP   24

Test(shm, arena_bound_holds_under_a_slow_consumer_that_holds_batches)
{
#ifdef __SANITIZE_ADDRESS__
    cr_skip_test("resident memory is not meaningful under AddressSanitizer (quarantine, shadow)");
#endif
    char url[256], max_bytes[32], shm_bytes[32];
    testdir_ipc_url(url, sizeof(url), "broker");
    snprintf(max_bytes, sizeof(max_bytes), "%llu", BIG_MAX);
    snprintf(shm_bytes, sizeof(shm_bytes), "%llu", BIG_SHM);
    proc_child *b =
        e2e_broker_start(url, PROC_ARGS("--schema", BIG_SCHEMA, "--max-bytes", max_bytes,
                                        "--shm-bytes", shm_bytes, "--queue-depth", "100000"));
    stoker_sleep_ms(300, NULL);
    uint64_t idle = proc_rss_bytes(b);
    cr_assert_gt(idle, 0, "cannot read the broker's VmRSS");
    for (int i = 0; i < 2; i++)
        e2e_producer_start(url, i ? "zero-1" : "zero-0",
                           PROC_ARGS("--generator", "exec", "--exec", "cat /dev/zero", "--format",
                                     "raw", "--schema", BIG_SCHEMA, "--chunk", "16"));
    stoker_trainer_client *tc = client(url, 16, 1);
    stoker_batch *kept[BIG_KEEP] = {0};
    uint64_t peak = 0, n = 0, start = stoker_now_ms();
    while (stoker_now_ms() - start < 6000) {
        stoker_batch *batch = NULL;
        int rv = stoker_trainer_client_next(tc, &batch);
        cr_assert_eq(rv, STOKER_OK, "consumer: %s", stoker_strerror(rv));
        stoker_trainer_client_ack(tc, batch->lease);
        stoker_batch_destroy(kept[n % BIG_KEEP]); // the oldest goes, the newest is kept
        kept[n++ % BIG_KEEP] = batch;
        for (int k = 0; k < 10; k++) { // 100 ms per batch, sampling every 10 ms
            uint64_t rss = proc_rss_bytes(b);
            peak = rss > peak ? rss : peak;
            stoker_sleep_ms(10, NULL);
        }
    }
    uint64_t shm = stoker_trainer_client_arena_batches(tc);
    uint64_t full = stoker_trainer_client_arena_full_batches(tc);
    stoker_status *st = h_status(url);
    const stoker_consumer_info *c = consumer_entry(st, "e2e-test", 0);
    // The broker counts a batch when it answers a pull; the client when it hands the batch
    // out: up to its prefetch (4) answered pulls are in between.
    cr_assert(c->arena_full >= full && c->arena_full <= full + 4,
              "broker counted %llu batches as bytes for a full arena, the client %llu",
              (unsigned long long)c->arena_full, (unsigned long long)full);
    stoker_status_destroy(st);
    for (int i = 0; i < BIG_KEEP; i++)
        stoker_batch_destroy(kept[i]);
    stoker_trainer_client_destroy(tc);
    uint64_t bound = idle + BIG_MAX + BIG_SHM + 2 * (12ull << 20) + (16ull << 20);
    fprintf(stderr,
            "shm memory: idle broker %.1f MiB, peak %.1f MiB, bound %.1f MiB; %llu batches, %llu "
            "through the arena, %llu as bytes because it was full\n",
            idle / 1048576.0, peak / 1048576.0, bound / 1048576.0, (unsigned long long)n,
            (unsigned long long)shm, (unsigned long long)full);
    cr_assert_gt(shm, 0, "no batch came through the arena");
    cr_assert_gt(full, 0, "the arena never filled: the bound was not tested");
    cr_assert_lt(peak, bound, "broker RSS %llu bytes over the bound %llu", (unsigned long long)peak,
                 (unsigned long long)bound);
}

// The hook the CUDA trainer pins the arena with (stoker_trainer_options.on_arena): called once
// with the mapping when it is mapped, and once more with the same mapping just before it is
// unmapped, which a batch still alive after the client's end postpones.
typedef struct hook_calls {
    int mapped, unmapped;
    const void *base;
    uint64_t bytes;
} hook_calls;

static void
on_arena(const void *base, uint64_t bytes, int mapped, void *arg)
{
    hook_calls *h = arg;
    if (mapped) {
        h->mapped++;
        h->base = base;
        h->bytes = bytes;
    } else {
        cr_assert_eq(base, h->base, "unmapped a mapping the hook was not told of");
        cr_assert_eq(bytes, h->bytes);
        h->unmapped++;
    }
}

Test(shm, arena_hook_sees_the_mapping_before_it_goes)
{
    char url[256];
    broker(url, "65536");
    producer(url, "400");
    hook_calls calls = {0};
    stoker_trainer_options o;
    stoker_trainer_options_init(&o);
    o.client.url = url;
    o.client.name = "hooked";
    o.client.give_up_ms = 5000;
    o.batch_size = 8;
    o.on_arena = on_arena;
    o.on_arena_arg = &calls;
    stoker_trainer_client *tc = NULL;
    char err[512] = "";
    cr_assert_eq(stoker_trainer_client_create(&o, &tc, err, sizeof(err)), STOKER_OK, "%s", err);
    cr_assert_eq(calls.mapped, 1);
    cr_assert_eq(calls.bytes, 65536);
    stoker_batch *b = NULL;
    cr_assert_eq(stoker_trainer_client_next(tc, &b), STOKER_OK);
    cr_assert_not_null(b->arena, "the batch did not come through the arena");
    const uint8_t *p = b->chunk.data[0];
    cr_assert(p >= (const uint8_t *)calls.base && p < (const uint8_t *)calls.base + calls.bytes,
              "the batch is not inside the mapping the hook was told of");
    stoker_trainer_client_ack(tc, b->lease);
    stoker_trainer_client_destroy(tc);
    cr_assert_eq(calls.unmapped, 0, "unmapped while a batch still reads it");
    stoker_batch_destroy(b);
    cr_assert_eq(calls.unmapped, 1);
    cr_assert_eq(calls.mapped, 1);
}
