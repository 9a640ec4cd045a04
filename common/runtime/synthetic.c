// The reference synthetic workload (see synthetic.h for the target function).
#include <math.h>
#include <stdint.h>
#include <time.h>

#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/rng.h"
#include "stoker/synthetic.h"

void
stoker_synthetic_schema(stoker_schema *out)
{
    *out = (stoker_schema){0};
    uint32_t in_shape[1] = {STOKER_SYNTHETIC_INPUTS}, out_shape[1] = {1};
    stoker_schema_add(out, "input", STOKER_FLOAT32, 1, in_shape);
    stoker_schema_add(out, "output", STOKER_FLOAT32, 1, out_shape);
}

float
stoker_synthetic_target(const float x[STOKER_SYNTHETIC_INPUTS])
{
    double d = x[2] - x[3];
    double y = sin(2.0 * M_PI * x[0]) * x[1] + d * d + 0.5 * x[4] * x[5] -
               0.25 * (x[6] + x[7] + x[8] + x[9]);
    return (float)y;
}

// Sleeps until the absolute monotonic deadline end_ns (clock_nanosleep with TIMER_ABSTIME wakes
// within tens of microseconds of it, so nothing spins and the pause costs no CPU), in slices of
// at most 20 ms so a stop flag set by a signal handler is seen soon. Returns 0 when the deadline
// was reached, -1 when stop was set first.
static int
pause_until(uint64_t end_ns, const volatile int *stop)
{
    for (;;) {
        if (stop != NULL && *stop)
            return -1;
        uint64_t now_ns = stoker_now_ns();
        if (now_ns >= end_ns)
            return 0;
        uint64_t wake_ns = end_ns - now_ns > 20000000u ? now_ns + 20000000u : end_ns;
        struct timespec ts = {(time_t)(wake_ns / 1000000000u), (long)(wake_ns % 1000000000u)};
        // EINTR (a signal) or an early wake-up: the loop checks the flag and the clock again.
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
    }
}

int
stoker_synthetic_fill(void *user, uint64_t seq, uint64_t seed, void *const fields[])
{
    const stoker_synthetic *synth = user;
    (void)seq;
    stoker_rng rng;
    stoker_rng_seed(&rng, seed);
    float *input = fields[0];
    float *output = fields[1];
    for (int i = 0; i < STOKER_SYNTHETIC_INPUTS; i++)
        input[i] = (float)stoker_rng_uniform(&rng);
    output[0] = stoker_synthetic_target(input) + (float)(0.01 * stoker_rng_normal(&rng));
    if (synth->delay_max_s > 0) {
        // The delay stands in for expensive augmentation: drawn from the example's own seed so
        // the cost, like the data, does not depend on timing.
        double delay_s = stoker_rng_range(&rng, synth->delay_min_s, synth->delay_max_s);
        uint64_t end_ns = stoker_now_ns() + (uint64_t)(delay_s * 1e9);
        if (pause_until(end_ns, synth->stop) != 0)
            return STOKER_INTERRUPTED;
    }
    return STOKER_OK;
}

static void
synthetic_destroy(void *user)
{
    (void)user; // borrowed
}

void
stoker_synthetic_init(stoker_synthetic *synth)
{
    *synth = (stoker_synthetic){.delay_min_s = 0.05, .delay_max_s = 0.5};
}

void
stoker_synthetic_generator(stoker_generator *gen, stoker_synthetic *synth)
{
    *gen = (stoker_generator){0};
    gen->kind = "synthetic";
    stoker_synthetic_schema(&gen->schema);
    gen->fill = stoker_synthetic_fill;
    gen->user = synth;
    gen->destroy = synthetic_destroy;
}

static int
fill_item(void *user, uint64_t index, uint64_t seed, void *const fields[])
{
    return stoker_synthetic_fill(user, index, seed, fields);
}

void
stoker_synthetic_dataset(stoker_generator *gen, stoker_synthetic *synth, uint64_t n_items)
{
    stoker_synthetic_generator(gen, synth);
    gen->n_items = n_items;
    gen->fill_item = fill_item;
    gen->fingerprint = stoker_hash64("synthetic", 9, n_items);
}
