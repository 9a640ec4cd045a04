// stoker-bench-producer: a producer with generation cost (nearly) zero, for measuring stoker's
// own overhead. Each example's fields are filled with a byte derived from its seq (a memset), so
// the data is defined and distinguishable without costing more than writing it once.
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/process.h"
#include "stoker/opts.h"
#include "stoker/producer.h"

typedef struct bench_gen {
    size_t bytes[STOKER_MAX_FIELDS];
    int is_float32[STOKER_MAX_FIELDS];
    uint32_t n_fields;
} bench_gen;

static int
fill(void *user, uint64_t seq, uint64_t seed, void *const fields[])
{
    const bench_gen *g = user;
    (void)seed;
    for (uint32_t i = 0; i < g->n_fields; i++) {
        if (g->is_float32[i]) {
            // Finite values in [0, 1), so a trainer's real step on them stays finite.
            float v = (float)(seq % 1000) / 1000.0f, *f = fields[i];
            for (size_t k = 0; k < g->bytes[i] / sizeof(float); k++)
                f[k] = v;
        } else {
            memset(fields[i], (int)(seq & 0xff), g->bytes[i]);
        }
    }
    return STOKER_OK;
}

int
main(int argc, char **argv)
{
    stoker_process_init();
    static const struct option longopts[] = {
        {"broker", required_argument, NULL, 'b'}, {"schema", required_argument, NULL, 's'},
        {"chunk", required_argument, NULL, 'c'},  {"max-examples", required_argument, NULL, 'm'},
        {"name", required_argument, NULL, 'n'},   {NULL, 0, NULL, 0},
    };
    stoker_producer_config cfg;
    stoker_producer_config_init(&cfg);
    cfg.handle_signals = 1;
    const char *spec = "input:float32[10],output:float32[1]";
    char err[256];
    uint64_t u;
    int opt;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (opt) {
        case 'b':
            cfg.client.url = optarg;
            break;
        case 's':
            spec = optarg;
            break;
        case 'c':
            if (stoker_parse_u64(optarg, 1, 1u << 20, &u) != STOKER_OK)
                goto usage;
            cfg.chunk = (uint32_t)u;
            break;
        case 'm':
            if (stoker_parse_u64(optarg, 1, UINT64_MAX / 2, &u) != STOKER_OK)
                goto usage;
            cfg.max_examples = u;
            break;
        case 'n':
            cfg.client.name = optarg;
            break;
        default:
            goto usage;
        }
    }
    if (cfg.client.url == NULL || optind != argc)
        goto usage;
    stoker_log_init("bench-producer", STOKER_LOG_WARN);
    bench_gen g = {0};
    stoker_generator gen = {.kind = "bench", .fill = fill, .user = &g};
    if (stoker_schema_parse(spec, &gen.schema, err, sizeof(err)) != STOKER_OK) {
        fprintf(stderr, "stoker-bench-producer: --schema: %s\n", err);
        return 2;
    }
    g.n_fields = gen.schema.n_fields;
    for (uint32_t i = 0; i < g.n_fields; i++) {
        g.bytes[i] = stoker_field_bytes(&gen.schema.fields[i]);
        g.is_float32[i] = gen.schema.fields[i].dtype == STOKER_FLOAT32;
    }
    return stoker_producer_run(&cfg, &gen, NULL) == STOKER_OK ? 0 : 1;
usage:
    fprintf(stderr, "usage: stoker-bench-producer --broker URL [--schema SPEC] [--chunk N] "
                    "[--max-examples N] [--name S]\n");
    return 2;
}
