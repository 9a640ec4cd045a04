// xoshiro256** (Blackman and Vigna), seeded through splitmix64; FNV-1a for names.
#include <math.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "stoker/clock.h"
#include "stoker/rng.h"

static uint64_t
splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t
rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void
stoker_rng_seed(stoker_rng *rng, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        rng->s[i] = splitmix64(&seed);
}

uint64_t
stoker_rng_u64(stoker_rng *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double
stoker_rng_uniform(stoker_rng *rng)
{
    return (double)(stoker_rng_u64(rng) >> 11) * 0x1.0p-53;
}

double
stoker_rng_range(stoker_rng *rng, double lo, double hi)
{
    return lo + (hi - lo) * stoker_rng_uniform(rng);
}

double
stoker_rng_normal(stoker_rng *rng)
{
    double u1 = stoker_rng_uniform(rng);
    double u2 = stoker_rng_uniform(rng);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint64_t
stoker_hash64(const void *data, uint64_t len, uint64_t seed)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull ^ seed;
    for (uint64_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return splitmix64(&h);
}

uint64_t
stoker_example_seed(uint64_t seed, const char *name, uint64_t seq)
{
    uint64_t h = stoker_hash64(name, name != NULL ? strlen(name) : 0, seed);
    uint64_t x = h ^ (seq * 0xd1b54a32d192ed03ull);
    return splitmix64(&x);
}

uint64_t
stoker_random_u64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
        // No entropy source: fall back to time and pid, still unique enough for a session id.
        uint64_t x = stoker_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL);
        v = splitmix64(&x);
    }
    return v != 0 ? v : 1;
}

uint64_t
stoker_item_seed(uint64_t seed, uint32_t epoch, uint64_t index)
{
    uint64_t x = seed ^ ((uint64_t)epoch * 0x9e3779b97f4a7c15ull);
    x = splitmix64(&x) ^ (index * 0xd1b54a32d192ed03ull);
    return splitmix64(&x);
}
