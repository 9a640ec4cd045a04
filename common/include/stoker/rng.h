// Small, fast, seedable random numbers (xoshiro256** seeded through splitmix64) and the
// per-example seed derivation that makes a producer's output independent of timing.
#ifndef STOKER_RNG_H
#define STOKER_RNG_H

#include <stdint.h>

typedef struct stoker_rng {
    uint64_t s[4];
} stoker_rng;

void stoker_rng_seed(stoker_rng *rng, uint64_t seed);
uint64_t stoker_rng_u64(stoker_rng *rng);
// Uniform in [0, 1).
double stoker_rng_uniform(stoker_rng *rng);
// Uniform in [lo, hi).
double stoker_rng_range(stoker_rng *rng, double lo, double hi);
// Standard normal (Box-Muller).
double stoker_rng_normal(stoker_rng *rng);

// 64-bit hash of len bytes (FNV-1a folded through splitmix64), for deriving seeds from names.
uint64_t stoker_hash64(const void *data, uint64_t len, uint64_t seed);
// The seed of example seq of producer name in a run seeded with seed. Same inputs, same seed;
// different names give unrelated streams.
uint64_t stoker_example_seed(uint64_t seed, const char *name, uint64_t seq);
// The seed of item index of a dataset in epoch epoch, with the broker's dataset seed: the same
// whichever producer makes the item, different for each epoch (fresh augmentation).
uint64_t stoker_item_seed(uint64_t seed, uint32_t epoch, uint64_t index);
// A random 64-bit value from the OS (getrandom), never 0; used for session ids.
uint64_t stoker_random_u64(void);

#endif
