// stoker-bench-producer: a producer with generation cost (nearly) zero, for measuring stoker's
// own overhead. Each example's fields are filled with a byte derived from its seq (a memset; an
// integer field of 8 bytes or more then starts with the seq itself, little-endian), so the data
// is defined and tells every example apart without costing more than writing it once; with
// --fill stamp only each field's first 8 bytes are written (the seq), the rest keeping what the
// buffer held (zeros at first): generation free, like the raw nng baseline's messages, which
// nobody writes. A variable-length field gets --var-rows rows in every example, written the same
// way, so a schema with one (x:float32[16],t:int32[?]) carries the same bytes as its fixed twin
// (x:float32[16],t:int32[L]) for comparing the two layouts.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/process.h"
#include "stoker/cli.h"
#include "stoker/producer.h"

typedef struct bench_gen {
    size_t bytes[STOKER_MAX_FIELDS];
    int is_float32[STOKER_MAX_FIELDS];
    int is_variable[STOKER_MAX_FIELDS];
    uint32_t n_fields;
    uint64_t var_rows; // rows of every variable field's value
    int stamp;         // --fill stamp
} bench_gen;

static int
fill(void *user, uint64_t seq, uint64_t seed, void *const fields[])
{
    const bench_gen *g = user;
    (void)seed;
    void *at[STOKER_MAX_FIELDS]; // where each field's bytes go (a variable field's reserved rows)
    for (uint32_t i = 0; i < g->n_fields; i++) {
        at[i] = fields[i];
        if (g->is_variable[i]) {
            int rv = stoker_var_reserve(fields[i], g->var_rows, &at[i]);
            if (rv != STOKER_OK)
                return rv;
        }
    }
    for (uint32_t i = 0; g->stamp && i < g->n_fields; i++) {
        if (g->bytes[i] >= sizeof(seq))
            memcpy(at[i], &seq, sizeof(seq));
        else
            memset(at[i], (int)(seq & 0xff), g->bytes[i]);
    }
    for (uint32_t i = 0; !g->stamp && i < g->n_fields; i++) {
        if (g->is_float32[i]) {
            // Finite values in [0, 1), so a trainer's real step on them stays finite.
            float v = (float)(seq % 1000) / 1000.0f, *f = at[i];
            for (size_t k = 0; k < g->bytes[i] / sizeof(float); k++)
                f[k] = v;
        } else {
            // The seq's low byte everywhere and the whole seq in front: every example differs.
            memset(at[i], (int)(seq & 0xff), g->bytes[i]);
            if (g->bytes[i] >= sizeof(seq))
                memcpy(at[i], &seq, sizeof(seq));
        }
    }
    return STOKER_OK;
}

// A dataset's item: made like example seq = index.
static int
fill_item(void *user, uint64_t index, uint64_t seed, void *const fields[])
{
    return fill(user, index, seed, fields);
}

typedef struct bench_options {
    stoker_producer_config run;
    const char *schema;
    int stamp;         // --fill: 0 all, 1 stamp
    uint64_t items;    // > 0: serve a dataset of this many items
    uint64_t var_rows; // rows of each variable field's value
} bench_options;

#define AT(member) STOKER_CLI_AT(bench_options, member)
static const char *const fill_modes[] = {"all", "stamp", NULL};
static const stoker_cli_option rows[] = {
    {"schema", "SPEC", "the examples' schema", STOKER_CLI_STRING, AT(schema)},
    {"chunk", "N", "examples per push", STOKER_CLI_UINT, AT(run.chunk), .imin = 1,
     .imax = 1u << 20},
    {"max-examples", "N", "stop after N examples (default: no limit)", STOKER_CLI_UINT,
     AT(run.max_examples), .imin = 1, .imax = UINT64_MAX / 2},
    {"name", "S", "name shown in events and status", STOKER_CLI_STRING, AT(run.client.name)},
    {"pool", "NAME", "the pool it counts in (a source of a consumer's mixture)", STOKER_CLI_STRING,
     AT(run.client.pool)},
    {"items", "N", "serve a dataset of N items in the broker's epochs", STOKER_CLI_UINT, AT(items),
     .imin = 1, .imax = UINT32_MAX},
    {"fill", "all|stamp",
     "all: write every byte of each example; stamp: only its seq (generation free)",
     STOKER_CLI_ENUM, AT(stamp), .choices = fill_modes},
    {"var-rows", "N", "rows of every variable-length field's value in each example (default 16)",
     STOKER_CLI_UINT, AT(var_rows), .imin = 0, .imax = 1u << 20},
    {"retain", "N", "examples kept until trained (0: off; default: twice the queue depth)",
     STOKER_CLI_UINT, AT(run.retain), .imax = UINT32_MAX - 1},
};

int
main(int argc, char **argv)
{
    stoker_process_init();
    bench_options o = {.schema = "input:float32[10],output:float32[1]", .var_rows = 16};
    stoker_producer_config_init(&o.run);
    o.run.handle_signals = 1;
    stoker_cli cli;
    stoker_cli_init(&cli, "stoker-bench-producer", "--broker URL [options]",
                    "Pushes examples that cost (nearly) nothing to make.", STOKER_LOG_WARN);
    stoker_cli_add(&cli, NULL, STOKER_CLI_ROWS(stoker_cli_broker_rows), &o.run.client);
    stoker_cli_add(&cli, NULL, STOKER_CLI_ROWS(stoker_cli_tls_rows), &o.run.client);
    stoker_cli_add(&cli, NULL, STOKER_CLI_ROWS(rows), &o);
    int code = stoker_cli_parse(&cli, argc, argv);
    if (code >= 0)
        return code;
    if (stoker_cli_require(&cli, "broker", NULL) != 0 ||
        stoker_cli_check_tls(&cli, &o.run.client) != 0)
        return 2;
    stoker_log_init("bench-producer", cli.log_level);
    bench_gen g = {0};
    stoker_generator gen = {.kind = "bench", .fill = fill, .user = &g};
    if (o.items > 0) {
        gen.n_items = o.items;
        gen.fill_item = fill_item;
    }
    char err[256];
    if (stoker_schema_parse(o.schema, &gen.schema, err, sizeof(err)) != STOKER_OK)
        return stoker_cli_fail(&cli, "--schema '%s': %s", o.schema, err);
    g.n_fields = gen.schema.n_fields;
    g.stamp = o.stamp;
    g.var_rows = o.var_rows;
    for (uint32_t i = 0; i < g.n_fields; i++) {
        const stoker_field *f = &gen.schema.fields[i];
        g.is_variable[i] = f->variable != 0;
        if (g.is_variable[i] && f->max_rows > 0 && o.var_rows > f->max_rows)
            return stoker_cli_fail(&cli, "--var-rows %llu: field '%s' holds at most %u rows",
                                   (unsigned long long)o.var_rows, f->name, f->max_rows);
        g.bytes[i] =
            g.is_variable[i] ? stoker_field_row_bytes(f) * o.var_rows : stoker_field_bytes(f);
        g.is_float32[i] = f->dtype == STOKER_FLOAT32;
    }
    return stoker_producer_run(&o.run, &gen, NULL) == STOKER_OK ? 0 : 1;
}
