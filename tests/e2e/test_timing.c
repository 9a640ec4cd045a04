// The end-to-end tests that assert durations, run one at a time and alone (tests/e2e/meson.build):
// the synthetic generator's delay distribution as the broker sees it, the trainer's exit within
// a second of the supply's death, and its exit after the stall timeout when producers freeze.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "e2e.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/rng.h"
#include "stoker/synthetic.h"

#define SUITE(name) TestSuite(name, .init = e2e_setup, .fini = e2e_teardown, .timeout = 40)
SUITE(synthetic);
SUITE(supply);

#define SCHEMA "input:float32[10],output:float32[1]"

Test(synthetic, producer_pays_the_delays_end_to_end)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker =
        e2e_broker_start(url, PROC_ARGS("--schema", SCHEMA, "--queue-depth", "1000"));
    // The trainer client is there first so it hears the producer's joined and finished events,
    // stamped by the broker. With one chunk of 200, the time between them is the 200 delays
    // plus one push and a goodbye.
    stoker_trainer_client *tc = e2e_trainer_client(url, 50, 10000);
    const double lo = 0.002, hi = 0.006, n = 200;
    proc_child *p = e2e_producer_start(
        url, "paced",
        PROC_ARGS("--delay", "0.002:0.006", "--chunk", "200", "--max-examples", "200"));
    e2e_examples ex = {0};
    int rv = e2e_drain(tc, &ex, 15000);
    cr_assert_eq(rv, STOKER_END_OF_DATA, "the supply ended with %s", stoker_errname(rv));
    proc_assert_exit(p, 0, 5000);
    cr_assert_eq(ex.n, 200);
    double joined = -1, finished = -1;
    for (int i = 0; i < ex.n_events; i++) {
        if (strcmp(ex.events[i].name, "paced") != 0)
            continue;
        if (ex.events[i].kind == STOKER_EVENT_PRODUCER_JOINED)
            joined = ex.events[i].at_s;
        if (ex.events[i].kind == STOKER_EVENT_PRODUCER_FINISHED)
            finished = ex.events[i].at_s;
    }
    cr_assert(joined >= 0 && finished >= 0, "joined/finished events missing (%d events)",
              ex.n_events);
    double mean = (finished - joined) / n, want = (lo + hi) / 2;
    fprintf(stderr, "synthetic: mean delay %.3f ms over 200 examples (uniform %g:%g s: %.3f ms)\n",
            mean * 1e3, lo, hi, want * 1e3);
    // The wall time only grows with load (late wake-ups, preempted spins), so end to end the
    // lower bound is exact and the upper one is a sanity check (units, range); the 10 % check
    // of the mean is delay_distribution_is_uniform_in_the_range below.
    cr_assert(mean > 0.9 * want && mean < 2 * want,
              "mean delay %.3f ms, expected %.3f ms (at least 90 %%)", mean * 1e3, want * 1e3);
    e2e_examples_fini(&ex);
    stoker_trainer_client_destroy(tc);
    h_assert_identity(url);
    proc_broker_stop(broker);
}

// The same 200 examples the producer above makes (seed 1, name "paced"), timed one by one in
// this process with libstoker's synthetic generator. An example's delay is drawn from its own
// seed, so filling it again draws the same delay: the fastest of three fills is the delay plus
// the least scheduling noise, which a loaded machine cannot inflate the way it can a single run.
Test(synthetic, delay_distribution_is_uniform_in_the_range)
{
    const double lo = 0.002, hi = 0.006;
    stoker_synthetic synth = {.delay_min_s = lo, .delay_max_s = hi};
    stoker_generator gen;
    stoker_synthetic_generator(&gen, &synth);
    float input[10], output[1];
    void *fields[2] = {input, output};
    double sum = 0, min_d = 1, max_d = 0;
    int below_3ms = 0, above_5ms = 0;
    for (uint64_t seq = 0; seq < 200; seq++) {
        uint64_t seed = stoker_example_seed(1, "paced", seq);
        double best = 1e9;
        for (int k = 0; k < 3; k++) {
            uint64_t t0 = stoker_now_ns();
            cr_assert_eq(gen.fill(gen.user, seq, seed, fields), STOKER_OK);
            double d = (double)(stoker_now_ns() - t0) / 1e9;
            best = d < best ? d : best;
        }
        cr_assert_geq(best, lo, "example %llu took %.3f ms, less than the minimum delay",
                      (unsigned long long)seq, best * 1e3);
        sum += best;
        min_d = best < min_d ? best : min_d;
        max_d = best > max_d ? best : max_d;
        below_3ms += best < 0.003;
        above_5ms += best > 0.005;
    }
    stoker_generator_fini(&gen);
    double mean = sum / 200, want = (lo + hi) / 2;
    fprintf(stderr,
            "synthetic: delays %.3f..%.3f ms, mean %.3f ms (expected %.3f), %d below 3 ms, "
            "%d above 5 ms\n",
            min_d * 1e3, max_d * 1e3, mean * 1e3, want * 1e3, below_3ms, above_5ms);
    cr_assert(mean > 0.9 * want && mean < 1.1 * want,
              "mean delay %.3f ms, expected %.3f ms within 10 %%", mean * 1e3, want * 1e3);
    // Uniform over [2, 6] ms puts a quarter of the delays in each end millisecond.
    cr_assert(below_3ms >= 25 && above_5ms >= 25,
              "not spread over the range: %d below 3 ms, %d above 5 ms of 200", below_3ms,
              above_5ms);
}

Test(supply, killing_every_producer_ends_training_with_3_within_a_second)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    proc_child *broker = e2e_broker_start(url, NULL);
    // Slower producers than the trainer: the queues are near empty when they die.
    proc_child *p1 = e2e_producer_start(url, "doomed-1", PROC_ARGS("--delay", "0.002:0.004"));
    proc_child *p2 = e2e_producer_start(url, "doomed-2", PROC_ARGS("--delay", "0.002:0.004"));
    const char *json = testdir_file("summary.json");
    const char *weights = testdir_file("weights.safetensors");
    proc_child *t =
        e2e_trainer_start(PROC_ARGS("--broker", url, "--rounds", "1000000", "--stall-timeout", "10",
                                    "--device", "cpu", "--json", json, "--weights", weights));
    cr_assert(h_wait_acknowledged(url, 100, 15000), "the trainer acknowledged < 100 in 15 s");
    uint64_t kill_ms = stoker_now_ms();
    proc_signal(p1, SIGKILL);
    proc_signal(p2, SIGKILL);
    proc_assert_exit(t, 3, 10000);
    uint64_t took = stoker_now_ms() - kill_ms;
    fprintf(stderr, "supply: the trainer exited %llu ms after the producers were killed\n",
            (unsigned long long)took);
    cr_assert_lt(took, 1000, "the trainer took %llu ms to stop after the supply died",
                 (unsigned long long)took);

    e2e_check_ok(PROC_ARGS("summary", json, "--status", "supply_ended", "--batch-size", "4"));
    char *s = testdir_read(json, NULL);
    cr_assert_not_null(s);
    int lost = 0;
    for (const char *at = s; (at = strstr(at, "\"producer_lost\"")) != NULL; at++)
        lost++;
    cr_assert_eq(lost, 2, "%d producer_lost events in the summary, expected 2: %s", lost, s);
    free(s);
    cr_assert(testdir_exists(weights), "no weights file after the supply ended");
    e2e_check_ok(
        PROC_ARGS("safetensors", weights, "--inputs", "10", "--hidden", "16", "--outputs", "1"));
    h_assert_identity(url);
    proc_broker_stop(broker);
}

Test(supply, frozen_producers_stall_the_trainer_with_4_after_the_timeout)
{
    char url[256];
    testdir_ipc_url(url, sizeof(url), "broker");
    // A producer timeout far beyond the stall timeout: frozen producers are not declared lost
    // (which would end the supply instead).
    proc_child *broker =
        e2e_broker_start(url, PROC_ARGS("--producer-timeout", "30", "--schema", SCHEMA));
    proc_child *p1 = e2e_producer_start(url, "frozen-1", PROC_ARGS("--delay", "0:0"));
    proc_child *p2 = e2e_producer_start(url, "frozen-2", PROC_ARGS("--delay", "0:0"));
    const char *json = testdir_file("summary.json");
    // A trainer slower than the producers (a wide network): batches are still queued when the
    // producers freeze, so its last batch comes after the freeze and the stall timeout counts
    // from a moment after it.
    proc_child *t = e2e_trainer_start(
        PROC_ARGS("--broker", url, "--rounds", "1000000", "--batch-size", "32", "--hidden",
                  "256,256", "--stall-timeout", "1", "--device", "cpu", "--json", json));
    cr_assert(h_wait_acknowledged(url, 200, 15000), "the trainer acknowledged < 200 in 15 s");
    uint64_t stop_ms = stoker_now_ms();
    proc_signal(p1, SIGSTOP);
    proc_signal(p2, SIGSTOP);
    proc_assert_exit(t, 4, 10000);
    double took = (double)(stoker_now_ms() - stop_ms) / 1000.0;
    fprintf(stderr, "stall: the trainer exited %.3f s after the producers froze\n", took);
    cr_assert(took >= 1.0 && took <= 3.0,
              "the trainer exited %.3f s after the freeze, expected "
              "within [1, 3] s (stall timeout 1 s)",
              took);
    // The reason alone: the summary line puts "stalled: " before it once.
    e2e_check_ok(PROC_ARGS("summary", json, "--status", "stalled", "--reason-starts",
                           "no batch within 1.0 s", "--batch-size", "32"));
    proc_signal(p1, SIGCONT);
    proc_signal(p2, SIGCONT);
    proc_stop(p1, 3000);
    proc_stop(p2, 3000);
    h_assert_identity(url);
    proc_broker_stop(broker);
}
