// Memory bound under load: producers far faster than the trainer (exec generators streaming
// /dev/zero as 64 KiB examples, pushes of 1 MiB, against a trainer taking 16 examples per
// 100 ms) fill the broker to --max-bytes; its resident memory (VmRSS from /proc) must stay under
// what an idle broker uses plus --max-bytes plus a fixed overhead. The overhead is what may be
// held beside the queues, per producer: its push in transit, the aligned copy decoding makes of
// it, a parked push, a RETRY's resend (a producer sends one push at a time), and allocator slack;
// plus the trainer's leases (prefetch x batch). Measured here with 3 producers of 1 MiB pushes:
// RSS - --max-bytes was 20-35 MiB for --max-bytes 16, 64 and 128 MiB (fixed, not proportional),
// so the test allows 12 MiB per producer and 16 MiB of slack. Two fixes made it so: decoding
// kept the received message beside its aligned copy (common/wire/request.c: 2x --max-bytes), and
// heap holes left by large messages were never given back (server/server.c trims once a second:
// before, 85 MiB at --max-bytes 16 MiB and 247 MiB at 128 MiB). The test prints what it
// measured.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "helpers.h"
#include "training.h"
#include "stoker/clock.h"
#include "stoker/error.h"

#define SCHEMA    "input:float32[16383],output:float32[1]" // 65,536 bytes per example
#define MAX_BYTES (64ull << 20)
#define PRODUCERS 3
#define RUN_MS    8000

TestSuite(memory, .init = h_setup, .fini = h_teardown, .timeout = 120);

Test(memory, broker_rss_bounded_by_max_bytes)
{
#ifdef __SANITIZE_ADDRESS__
    // The broker under test is built the same way: AddressSanitizer's shadow memory and
    // quarantine (freed blocks held back on purpose) say nothing about the broker's own bound.
    cr_skip_test("resident memory is not meaningful under AddressSanitizer (quarantine, shadow)");
#endif
    char listen[256], url[256], max_bytes[32];
    snprintf(listen, sizeof(listen), "ipc://%s/b.sock", testdir_path());
    snprintf(max_bytes, sizeof(max_bytes), "%llu", MAX_BYTES);
    const char *argv[] = {getenv("STOKER_BROKER_BIN"),
                          "--listen",
                          listen,
                          "--schema",
                          SCHEMA,
                          "--max-bytes",
                          max_bytes,
                          "--queue-depth",
                          "100000",
                          "--log-level",
                          "warn",
                          NULL};
    cr_assert_not_null(argv[0]);
    proc_child *b = proc_spawn("broker", argv, &(proc_io){.capture = 1, .log = "broker.log"});
    char urls[1][256];
    proc_listening(b, 1, urls);
    snprintf(url, sizeof(url), "%s", urls[0]);
    stoker_sleep_ms(300, NULL);
    uint64_t idle = proc_rss_bytes(b);
    cr_assert_gt(idle, 0, "cannot read the broker's VmRSS");

    for (int i = 0; i < PRODUCERS; i++) {
        char name[16];
        snprintf(name, sizeof(name), "zero-%d", i);
        const char *prod[] = {getenv("STOKER_PRODUCER_BIN"),
                              "--broker",
                              url,
                              "--name",
                              name,
                              "--generator",
                              "exec",
                              "--exec",
                              "cat /dev/zero",
                              "--format",
                              "raw",
                              "--schema",
                              SCHEMA,
                              "--chunk",
                              "16",
                              "--log-level",
                              "warn",
                              NULL};
        proc_spawn("producer", prod, &(proc_io){.log = "producers.log"});
    }
    stoker_trainer_client *tc = h_trainer(url, "slow", 16, 2, 10000);
    uint64_t peak = 0, peak_queued = 0, trained = 0;
    uint64_t start = stoker_now_ms(), last_status = 0;
    while (stoker_now_ms() - start < RUN_MS) {
        stoker_batch *batch = NULL;
        int rv = stoker_trainer_client_next(tc, &batch);
        cr_assert_eq(rv, STOKER_OK, "trainer: %s", stoker_strerror(rv));
        trained += batch->chunk.count;
        stoker_trainer_client_ack(tc, batch->lease);
        stoker_batch_destroy(batch);
        for (int k = 0; k < 10; k++) { // 100 ms per batch, sampling every 10 ms
            uint64_t rss = proc_rss_bytes(b);
            peak = rss > peak ? rss : peak;
            stoker_sleep_ms(10, NULL);
        }
        if (stoker_now_ms() - last_status >= 500) {
            stoker_status *st = h_status(url);
            if (st->counters.queued_bytes > peak_queued)
                peak_queued = st->counters.queued_bytes;
            cr_assert_leq(st->counters.queued_bytes, MAX_BYTES, "queued bytes over --max-bytes");
            stoker_status_destroy(st);
            last_status = stoker_now_ms();
        }
    }
    stoker_trainer_client_destroy(tc);
    uint64_t overhead = (uint64_t)PRODUCERS * (12u << 20) + (16u << 20);
    uint64_t bound = idle + MAX_BYTES + overhead;
    fprintf(stderr,
            "memory: idle broker %.1f MiB; under load peak %.1f MiB with %.1f MiB queued at most "
            "(--max-bytes %.0f MiB); bound %.1f MiB; trainer took %llu examples\n",
            idle / 1048576.0, peak / 1048576.0, peak_queued / 1048576.0, MAX_BYTES / 1048576.0,
            bound / 1048576.0, (unsigned long long)trained);
    cr_assert_geq(peak_queued, MAX_BYTES * 9 / 10,
                  "the queues never filled (%llu bytes queued at most): the bound was not tested",
                  (unsigned long long)peak_queued);
    cr_assert_lt(peak, bound, "broker RSS %llu bytes over the bound %llu", (unsigned long long)peak,
                 (unsigned long long)bound);
    h_assert_identity(url);
}
