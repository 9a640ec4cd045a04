// The reference workload: examples of input:float32[10], output:float32[1] that each cost a
// random pause uniform in [delay_min_s, delay_max_s). input is uniform in [0,1); output is a
// fixed nonlinear function of input plus small noise, the same in every producer, so a trainer
// can learn it:
//   output = sin(2*pi*x0) * x1 + (x2 - x3)^2 + 0.5 * x4 * x5 - 0.25 * (x6 + x7 + x8 + x9)
//            + 0.01 * N(0,1)
// The producer, the trainer's inline baseline and the benchmarks all use this same code.
#ifndef STOKER_SYNTHETIC_H
#define STOKER_SYNTHETIC_H

#include <stddef.h>

#include "stoker/generator.h"
#include "stoker/rng.h"

#define STOKER_SYNTHETIC_INPUTS 10

// The token workload (--workload tokens): examples of tokens:int32[?<=CAP],label:int64, each
// sequence's length drawn from a distribution and its tokens uniform in [0, vocab), all from the
// example's seed; label is 1 when the sequence holds more even tokens than odd, else 0.
typedef enum stoker_synthetic_workload {
    STOKER_SYNTHETIC_REFERENCE = 0, // input:float32[10],output:float32[1]
    STOKER_SYNTHETIC_TOKENS = 1,
} stoker_synthetic_workload;

// Lengths: fixed:N (a = N), uniform:MIN:MAX (a..b inclusive), lognormal:MEAN:CAP[:SIGMA] (the
// log-normal distribution with mean a and log-space sigma c, rounded, at least 1 and at most
// the cap b: a longer draw is cut to the cap).
typedef enum stoker_lengths_kind {
    STOKER_LENGTHS_FIXED = 0,
    STOKER_LENGTHS_UNIFORM = 1,
    STOKER_LENGTHS_LOGNORMAL = 2,
} stoker_lengths_kind;

typedef struct stoker_synthetic {
    double delay_min_s;
    double delay_max_s;
    const volatile int *stop; // when set to nonzero, pauses end early (may be NULL)
    int workload;             // stoker_synthetic_workload
    int lengths;              // stoker_lengths_kind
    double len_a, len_b, len_c;
    uint32_t vocab; // tokens are in [0, vocab)
} stoker_synthetic;

// The longest sequence the lengths allow (the bound of the tokens field).
uint32_t stoker_synthetic_cap(const stoker_synthetic *synth);
// Parses "fixed:N", "uniform:MIN:MAX" or "lognormal:MEAN:CAP[:SIGMA]" into synth's lengths;
// STOKER_INVALID with the reason in err.
int stoker_synthetic_parse_lengths(const char *spec, stoker_synthetic *synth, char *err,
                                   size_t err_len);
// The length of the sequence drawn first from rng (what the token workload does first).
uint32_t stoker_synthetic_draw_length(const stoker_synthetic *synth, stoker_rng *rng);

// The reference workload with the reference experiment's delays, 0.05:0.5 s, no stop flag; the
// token workload's defaults: lognormal:512:4096 (sigma 1), vocab 50257.
void stoker_synthetic_init(stoker_synthetic *synth);
// input:float32[10],output:float32[1] (the reference workload's schema)
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
