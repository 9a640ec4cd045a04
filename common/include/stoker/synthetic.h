// The reference workload: examples of input:float32[10], output:float32[1] that each cost a
// random pause uniform in [delay_min_s, delay_max_s). input is uniform in [0,1); output is a
// fixed nonlinear function of input plus small noise, the same in every producer, so a trainer
// can learn it:
//   output = sin(2*pi*x0) * x1 + (x2 - x3)^2 + 0.5 * x4 * x5 - 0.25 * (x6 + x7 + x8 + x9)
//            + 0.01 * N(0,1)
// The producer, the trainer's inline baseline and the benchmarks all use this same code.
#ifndef STOKER_SYNTHETIC_H
#define STOKER_SYNTHETIC_H

#include "stoker/generator.h"

#define STOKER_SYNTHETIC_INPUTS 10

typedef struct stoker_synthetic {
    double delay_min_s;
    double delay_max_s;
    const volatile int *stop; // when set to nonzero, pauses end early (may be NULL)
} stoker_synthetic;

// The reference experiment's delays, 0.05:0.5 s, no stop flag.
void stoker_synthetic_init(stoker_synthetic *synth);
// input:float32[10],output:float32[1]
void stoker_synthetic_schema(stoker_schema *out);
// The noiseless target function above.
float stoker_synthetic_target(const float input[STOKER_SYNTHETIC_INPUTS]);
// stoker_fill_fn for a stoker_synthetic (user): draws the delay and the example from seed.
int stoker_synthetic_fill(void *user, uint64_t seq, uint64_t seed, void *const fields[]);
// Sets up gen to use synth (borrowed: it must outlive gen).
void stoker_synthetic_generator(stoker_generator *gen, stoker_synthetic *synth);
// Sets up gen to serve a dataset of n_items synthetic items (item i is drawn from the seed the
// broker gives it, so it looks the same whichever producer makes it).
void stoker_synthetic_dataset(stoker_generator *gen, stoker_synthetic *synth, uint64_t n_items);

#endif
