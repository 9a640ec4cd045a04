// A producer of variable-length examples for the tests (and an example of writing them):
// schema tokens:int32[?<=64],points:float32[?,3],label:int64. Example seq (or dataset item
// seq) holds var_tokens(seq) tokens seq * 131 + j and var_points(seq) rows (seq + r / 4,
// c / 8, -seq), label seq: a reader recomputes every byte from the label (tests/lib/var_data.h).
//   stoker-test-var-producer URL NAME COUNT [--chunk N] [--retain N] [--items N]
//                            [--overflow-every K] [--linger-ms MS] [--delay-us US]
// --items N serves a dataset of N items (COUNT ignored); --overflow-every K makes about one
// example in K try a 65-token value first (over the bound: refused at the producer, made again);
// at the end it prints "refused R" and "examples E" on stdout.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stoker/error.h"
#include "stoker/generator.h"
#include "stoker/producer.h"
#include "var_data.h"

typedef struct var_gen {
    uint64_t overflow_every;
    uint64_t delay_us;
} var_gen;

static int
make(const var_gen *g, uint64_t seq, uint64_t seed, void *const fields[])
{
    if (g->delay_us > 0) {
        struct timespec ts = {.tv_sec = (time_t)(g->delay_us / 1000000),
                              .tv_nsec = (long)(g->delay_us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    int32_t tokens[VAR_TOKENS_MAX + 1];
    uint32_t n = var_tokens(seq);
    if (g->overflow_every > 0 && seed % g->overflow_every == 0)
        n = VAR_TOKENS_MAX + 1; // over the bound: stoker_var_append refuses it
    for (uint32_t j = 0; j < n; j++)
        tokens[j] = var_token(seq, j);
    int rv = stoker_var_append(fields[0], tokens, n);
    if (rv != STOKER_OK)
        return rv; // STOKER_TOO_LARGE: refused, the runtime makes this seq again
    // The points in place, row by row (reserve, then write).
    for (uint32_t r = 0; r < var_points(seq); r++) {
        float *row;
        if ((rv = stoker_var_reserve(fields[1], 1, (void **)&row)) != STOKER_OK)
            return rv;
        var_point(seq, r, row);
    }
    int64_t label = (int64_t)seq;
    memcpy(fields[2], &label, sizeof label);
    return STOKER_OK;
}

static int
fill(void *user, uint64_t seq, uint64_t seed, void *const fields[])
{
    return make(user, seq, seed, fields);
}

static int
fill_item(void *user, uint64_t index, uint64_t seed, void *const fields[])
{
    var_gen g = *(const var_gen *)user;
    g.overflow_every = 0; // an item cannot be skipped
    return make(&g, index, seed, fields);
}

int
main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s URL NAME COUNT [options]\n", argv[0]);
        return 2;
    }
    var_gen g = {0};
    stoker_generator gen = {.kind = "var", .fill = fill, .fill_item = fill_item, .user = &g};
    char err[256];
    if (stoker_schema_parse(VAR_SCHEMA, &gen.schema, err, sizeof err) != STOKER_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    stoker_producer_config cfg;
    stoker_producer_config_init(&cfg);
    cfg.client.url = argv[1];
    cfg.client.name = argv[2];
    cfg.max_examples = strtoull(argv[3], NULL, 10);
    cfg.handle_signals = 1;
    for (int i = 4; i + 1 < argc; i += 2) {
        unsigned long long v = strtoull(argv[i + 1], NULL, 10);
        if (strcmp(argv[i], "--chunk") == 0)
            cfg.chunk = (uint32_t)v;
        else if (strcmp(argv[i], "--retain") == 0)
            cfg.retain = (uint32_t)v;
        else if (strcmp(argv[i], "--items") == 0)
            gen.n_items = v, gen.fingerprint = 0x7661720000000000ull | v;
        else if (strcmp(argv[i], "--overflow-every") == 0)
            g.overflow_every = v;
        else if (strcmp(argv[i], "--linger-ms") == 0)
            cfg.linger_ms = (uint32_t)v;
        else if (strcmp(argv[i], "--delay-us") == 0)
            g.delay_us = v;
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    stoker_producer_stats st = {0};
    int rv = stoker_producer_run(&cfg, &gen, &st);
    printf("examples %llu\nrefused %llu\n", (unsigned long long)st.examples,
           (unsigned long long)st.refused);
    fflush(stdout);
    if (rv != STOKER_OK)
        fprintf(stderr, "var producer: %s\n", stoker_strerror(rv));
    return rv == STOKER_OK ? 0 : rv == STOKER_INTERRUPTED ? 130 : 1;
}
