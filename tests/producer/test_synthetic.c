// The synthetic generator's pauses (`--delay`): they cost time, not CPU (the pause sleeps to an
// absolute deadline instead of spinning on the clock), they stay accurate, and a stop flag ends a
// long one early. The distribution of the delays is tested in tests/e2e/test_timing.c.
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/rng.h"
#include "stoker/synthetic.h"

TestSuite(synthetic, .timeout = 30);

static double
thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// 150 examples of 1 to 3 ms each, each filled three times (an example's delay comes from its
// seed, so every fill draws the same one). A pause that spins on the clock for its last
// millisecond costs a third of its wall time or more; a sleeping one a few microseconds per
// example. The fastest of the three fills of each example is its delay plus the least
// scheduling noise; their mean must be within 5 % below or 1 ms above the expected 2 ms.
Test(synthetic, pauses_cost_time_not_cpu)
{
    const double lo = 0.001, hi = 0.003;
    const int n = 150;
    stoker_synthetic synth = {.delay_min_s = lo, .delay_max_s = hi};
    stoker_generator gen;
    stoker_synthetic_generator(&gen, &synth);
    float input[STOKER_SYNTHETIC_INPUTS], output[1];
    void *fields[2] = {input, output};
    double sum_best = 0, wall = 0;
    double cpu0 = thread_cpu_s();
    for (int seq = 0; seq < n; seq++) {
        uint64_t seed = stoker_example_seed(7, "sleeper", (uint64_t)seq);
        double best = 1e9;
        for (int k = 0; k < 3; k++) {
            uint64_t t0 = stoker_now_ns();
            cr_assert_eq(gen.fill(gen.user, (uint64_t)seq, seed, fields), STOKER_OK);
            double d = (double)(stoker_now_ns() - t0) / 1e9;
            cr_assert_geq(d, lo, "example %d paused %.3f ms, less than the minimum delay", seq,
                          d * 1e3);
            wall += d;
            best = d < best ? d : best;
        }
        sum_best += best;
    }
    double cpu = thread_cpu_s() - cpu0;
    stoker_generator_fini(&gen);
    double mean = sum_best / n, want = (lo + hi) / 2;
    fprintf(stderr,
            "synthetic: %d pauses took %.3f s of wall time and %.4f s of CPU (%.2f %%), %.1f us "
            "of CPU each; mean delay %.3f ms (expected %.3f ms)\n",
            3 * n, wall, cpu, 100 * cpu / wall, cpu / (3 * n) * 1e6, mean * 1e3, want * 1e3);
    cr_assert_lt(cpu, 0.05 * wall,
                 "the pauses used %.4f s of CPU in %.3f s (%.1f %%): they spin instead of "
                 "sleeping (at most 5 %% expected)",
                 cpu, wall, 100 * cpu / wall);
    cr_assert(mean > 0.95 * want && mean < want + 0.001,
              "mean delay %.3f ms, expected %.3f ms (5 %% below to 1 ms above)", mean * 1e3,
              want * 1e3);
}

static void *
raise_stop_later(void *arg)
{
    stoker_sleep_ms(50, NULL);
    *(volatile int *)arg = 1;
    return NULL;
}

// A 10 s pause ends within a fraction of a second of the stop flag, with STOKER_INTERRUPTED.
Test(synthetic, stop_flag_ends_a_long_pause)
{
    volatile int stop = 0;
    stoker_synthetic synth = {.delay_min_s = 10, .delay_max_s = 10, .stop = &stop};
    stoker_generator gen;
    stoker_synthetic_generator(&gen, &synth);
    float input[STOKER_SYNTHETIC_INPUTS], output[1];
    void *fields[2] = {input, output};
    pthread_t th;
    uint64_t t0 = stoker_now_ms();
    cr_assert_eq(pthread_create(&th, NULL, raise_stop_later, (void *)&stop), 0);
    int rv = gen.fill(gen.user, 0, 1, fields);
    uint64_t took_ms = stoker_now_ms() - t0;
    pthread_join(th, NULL);
    stoker_generator_fini(&gen);
    cr_assert_eq(rv, STOKER_INTERRUPTED, "fill returned %s", stoker_errname(rv));
    cr_assert_lt(took_ms, 1000, "the pause ended %llu ms after it began (stop at 50 ms)",
                 (unsigned long long)took_ms);
}
