// The reference synthetic workload (see synthetic.h for the target function).
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/generator.h"
#include "stoker/rng.h"
#include "stoker/synthetic.h"

// The token workload's longest allowed sequence (bounds what a lengths spec may ask for).
#define TOKENS_CAP_MAX (1u << 24)

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

uint32_t
stoker_synthetic_cap(const stoker_synthetic *synth)
{
    return synth->lengths == STOKER_LENGTHS_FIXED ? (uint32_t)synth->len_a : (uint32_t)synth->len_b;
}

// One number of a lengths spec, in [lo, hi]: 0, or -1 with err set.
static int
lengths_number(const char *text, const char *what, double lo, double hi, int integer, double *out,
               char *err, size_t err_len)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || errno != 0 || !(v >= lo && v <= hi) ||
        (integer && v != floor(v))) {
        snprintf(err, err_len, "%s '%s': expected %s in %.10g..%.10g", what, text,
                 integer ? "a whole number" : "a number", lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int
stoker_synthetic_parse_lengths(const char *spec, stoker_synthetic *synth, char *err, size_t err_len)
{
    char buf[128];
    const char *usage = "expected fixed:N, uniform:MIN:MAX or lognormal:MEAN:CAP[:SIGMA]";
    if (strlen(spec) >= sizeof buf) {
        snprintf(err, err_len, "too long; %s", usage);
        return STOKER_INVALID;
    }
    memcpy(buf, spec, strlen(spec) + 1);
    char *parts[5] = {0};
    int n = 0;
    for (char *p = buf, *colon; n < 5; p = colon + 1) {
        parts[n++] = p;
        if ((colon = strchr(p, ':')) == NULL)
            break;
        *colon = '\0';
    }
    double cap = TOKENS_CAP_MAX, a = 0, b = 0, c = 1.0;
    if (strcmp(parts[0], "fixed") == 0 && n == 2) {
        if (lengths_number(parts[1], "N", 1, cap, 1, &a, err, err_len) != 0)
            return STOKER_INVALID;
        synth->lengths = STOKER_LENGTHS_FIXED;
    } else if (strcmp(parts[0], "uniform") == 0 && n == 3) {
        if (lengths_number(parts[1], "MIN", 0, cap, 1, &a, err, err_len) != 0 ||
            lengths_number(parts[2], "MAX", 1, cap, 1, &b, err, err_len) != 0)
            return STOKER_INVALID;
        if (a > b) {
            snprintf(err, err_len, "MIN %s is above MAX %s", parts[1], parts[2]);
            return STOKER_INVALID;
        }
        synth->lengths = STOKER_LENGTHS_UNIFORM;
    } else if (strcmp(parts[0], "lognormal") == 0 && (n == 3 || n == 4)) {
        if (lengths_number(parts[1], "MEAN", 1, cap, 0, &a, err, err_len) != 0 ||
            lengths_number(parts[2], "CAP", 1, cap, 1, &b, err, err_len) != 0 ||
            (n == 4 && lengths_number(parts[3], "SIGMA", 0.01, 4, 0, &c, err, err_len) != 0))
            return STOKER_INVALID;
        if (a > b) {
            snprintf(err, err_len, "MEAN %s is above CAP %s", parts[1], parts[2]);
            return STOKER_INVALID;
        }
        synth->lengths = STOKER_LENGTHS_LOGNORMAL;
    } else {
        snprintf(err, err_len, "'%s': %s", spec, usage);
        return STOKER_INVALID;
    }
    synth->len_a = a;
    synth->len_b = b;
    synth->len_c = c;
    return STOKER_OK;
}

uint32_t
stoker_synthetic_draw_length(const stoker_synthetic *synth, stoker_rng *rng)
{
    switch (synth->lengths) {
    case STOKER_LENGTHS_UNIFORM: {
        uint64_t span = (uint64_t)(synth->len_b - synth->len_a) + 1;
        return (uint32_t)synth->len_a + (uint32_t)(stoker_rng_u64(rng) % span);
    }
    case STOKER_LENGTHS_LOGNORMAL: {
        // mean = exp(mu + sigma^2 / 2)
        double sigma = synth->len_c, mu = log(synth->len_a) - sigma * sigma / 2;
        double x = round(exp(mu + sigma * stoker_rng_normal(rng)));
        return x < 1 ? 1 : x > synth->len_b ? (uint32_t)synth->len_b : (uint32_t)x;
    }
    default:
        return (uint32_t)synth->len_a;
    }
}

// The token workload's example: the length, then the tokens, then the delay, from the seed.
static int
tokens_fill(const stoker_synthetic *synth, stoker_rng *rng, void *const fields[])
{
    uint32_t n = stoker_synthetic_draw_length(synth, rng);
    int32_t *tokens;
    int rv = stoker_var_reserve(fields[0], n, (void **)&tokens);
    if (rv != STOKER_OK)
        return rv;
    int64_t even = 0;
    for (uint32_t j = 0; j < n; j++) {
        tokens[j] = (int32_t)(stoker_rng_u64(rng) % synth->vocab);
        even += (tokens[j] & 1) == 0;
    }
    int64_t label = 2 * even > (int64_t)n;
    memcpy(fields[1], &label, sizeof label);
    return STOKER_OK;
}

int
stoker_synthetic_fill(void *user, uint64_t seq, uint64_t seed, void *const fields[])
{
    const stoker_synthetic *synth = user;
    (void)seq;
    stoker_rng rng;
    stoker_rng_seed(&rng, seed);
    if (synth->workload == STOKER_SYNTHETIC_TOKENS) {
        int rv = tokens_fill(synth, &rng, fields);
        if (rv != STOKER_OK)
            return rv;
    } else {
        float *input = fields[0];
        float *output = fields[1];
        for (int i = 0; i < STOKER_SYNTHETIC_INPUTS; i++)
            input[i] = (float)stoker_rng_uniform(&rng);
        output[0] = stoker_synthetic_target(input) + (float)(0.01 * stoker_rng_normal(&rng));
    }
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
    *synth = (stoker_synthetic){.delay_min_s = 0.05,
                                .delay_max_s = 0.5,
                                .lengths = STOKER_LENGTHS_LOGNORMAL,
                                .len_a = 512,
                                .len_b = 4096,
                                .len_c = 1.0,
                                .vocab = 50257};
}

void
stoker_synthetic_generator(stoker_generator *gen, stoker_synthetic *synth)
{
    *gen = (stoker_generator){0};
    gen->kind = "synthetic";
    if (synth->workload == STOKER_SYNTHETIC_TOKENS) {
        char spec[96], err[256];
        snprintf(spec, sizeof spec, "tokens:int32[?<=%u],label:int64", stoker_synthetic_cap(synth));
        int rv = stoker_schema_parse(spec, &gen->schema, err, sizeof err);
        (void)rv; // the cap is at most TOKENS_CAP_MAX: always a valid schema
    } else
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
    if (synth->workload == STOKER_SYNTHETIC_TOKENS) {
        // Another workload, or other lengths, make other items.
        double p[4] = {synth->len_a, synth->len_b, synth->len_c, (double)synth->vocab};
        gen->fingerprint = stoker_hash64(p, sizeof p, gen->fingerprint ^ (uint64_t)synth->lengths);
    }
}
