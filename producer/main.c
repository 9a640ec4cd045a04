// stoker-producer: parses options, builds the chosen generator (synthetic, exec or images) and
// runs it with stoker_producer_run.
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "exec.h"
#include "images.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/process.h"
#include "stoker/opts.h"
#include "stoker/producer.h"
#include "stoker/synthetic.h"
#include "stoker/tls.h"

static void
usage(FILE *f)
{
    fprintf(
        f,
        "usage: stoker-producer --broker URL [options]\n"
        "\n"
        "Generates training examples and pushes them to a stoker broker.\n"
        "\n"
        "  --broker URL            the broker (tcp://HOST:PORT, ipc:///path, ...)\n"
        "  --generator KIND        synthetic (default), exec or images\n"
        "  --name S                name shown in events and status (default: host-pid)\n"
        "  --chunk N               examples per push (default 3)\n"
        "  --max-examples N        stop after N examples and say goodbye (default: no limit)\n"
        "  --seed N                run seed; each example's seed derives from it, the name\n"
        "                          and the example's seq (default 1)\n"
        "  --token-file F          authenticate with the token in F\n"
        "  --tls-cert F --tls-key F  client certificate and key (PEM) for tls+tcp://\n"
        "  --tls-ca F              verify the broker's certificate with this CA (PEM)\n"
        "  --log-level L           error, warn, info (default), debug\n"
        "  --measure N             generate N examples without a broker and print the\n"
        "                          generator's rate as JSON (how fast is my generator?)\n"
        "synthetic:\n"
        "  --delay MIN:MAX         seconds of simulated work per example (default 0.05:0.5)\n"
        "exec:\n"
        "  --exec 'CMD'            run CMD with /bin/sh -c and read examples from its stdout\n"
        "  --schema SPEC           e.g. 'input:float32[10],output:float32[1]'\n"
        "  --format text|raw       one example per line, or little-endian records (default text)\n"
        "images:\n"
        "  --images DIR            one subfolder of PNG/JPEG files per class\n"
        "  --size N                output side in pixels (default 64)\n"
        "  --decode once|each      once (default): decode every file at start: start-up time\n"
        "                          and memory grow with the folder, examples are cheapest;\n"
        "                          each: check headers only at start (fast, no pixels held),\n"
        "                          read and decode the file for every example as a data loader\n"
        "                          does (one decode per example; a file that fails is logged\n"
        "                          with its path and skipped)\n"
        "  --help, --version\n");
}

// --measure: the generator alone, in chunks as it would push them, no broker.
static int
measure_generator(const stoker_generator *gen, const stoker_producer_config *cfg, uint64_t n)
{
    stoker_chunk chunk;
    int rv = stoker_chunk_init(&chunk, &gen->schema, cfg->chunk);
    if (rv != STOKER_OK)
        return rv;
    uint64_t done = 0, start = stoker_now_ns();
    while (done < n && rv == STOKER_OK) {
        uint32_t k = n - done < cfg->chunk ? (uint32_t)(n - done) : cfg->chunk;
        chunk.count = 0;
        rv = stoker_generator_fill_chunk(gen, &chunk, k, done, cfg->seed, cfg->client.name);
        done += chunk.count;
    }
    double s = (double)(stoker_now_ns() - start) / 1e9;
    stoker_chunk_fini(&chunk);
    if (rv != STOKER_OK && rv != STOKER_END_OF_DATA) {
        stoker_error("measure: generator failed after %llu examples: %s", (unsigned long long)done,
                     stoker_strerror(rv));
        return rv;
    }
    printf("{\"examples\": %llu, \"seconds\": %.6f, \"examples_per_second\": %.1f}\n",
           (unsigned long long)done, s, s > 0 ? done / s : 0);
    return STOKER_OK;
}

static int
bad(const char *opt, const char *val, const char *want)
{
    fprintf(stderr, "stoker-producer: %s '%s': %s\n", opt, val, want);
    usage(stderr);
    return 2;
}

int
main(int argc, char **argv)
{
    stoker_process_init();
    enum {
        OPT_BROKER = 1000,
        OPT_GENERATOR,
        OPT_NAME,
        OPT_CHUNK,
        OPT_MAX,
        OPT_SEED,
        OPT_TOKEN,
        OPT_LOG,
        OPT_DELAY,
        OPT_EXEC,
        OPT_SCHEMA,
        OPT_FORMAT,
        OPT_IMAGES,
        OPT_SIZE,
        OPT_DECODE,
        OPT_MEASURE,
        OPT_TLS_CERT,
        OPT_TLS_KEY,
        OPT_TLS_CA,
        OPT_HELP,
        OPT_VERSION,
    };
    static const struct option longopts[] = {
        {"broker", required_argument, NULL, OPT_BROKER},
        {"generator", required_argument, NULL, OPT_GENERATOR},
        {"name", required_argument, NULL, OPT_NAME},
        {"chunk", required_argument, NULL, OPT_CHUNK},
        {"max-examples", required_argument, NULL, OPT_MAX},
        {"seed", required_argument, NULL, OPT_SEED},
        {"token-file", required_argument, NULL, OPT_TOKEN},
        {"log-level", required_argument, NULL, OPT_LOG},
        {"delay", required_argument, NULL, OPT_DELAY},
        {"exec", required_argument, NULL, OPT_EXEC},
        {"schema", required_argument, NULL, OPT_SCHEMA},
        {"format", required_argument, NULL, OPT_FORMAT},
        {"images", required_argument, NULL, OPT_IMAGES},
        {"size", required_argument, NULL, OPT_SIZE},
        {"decode", required_argument, NULL, OPT_DECODE},
        {"measure", required_argument, NULL, OPT_MEASURE},
        {"tls-cert", required_argument, NULL, OPT_TLS_CERT},
        {"tls-key", required_argument, NULL, OPT_TLS_KEY},
        {"tls-ca", required_argument, NULL, OPT_TLS_CA},
        {"help", no_argument, NULL, OPT_HELP},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    stoker_producer_config cfg;
    stoker_producer_config_init(&cfg);
    cfg.seed = 1;
    cfg.handle_signals = 1;
    const char *generator = "synthetic";
    const char *exec_cmd = NULL, *schema_spec = NULL, *images_dir = NULL;
    exec_format format = EXEC_TEXT;
    int format_given = 0, delay_given = 0, size_given = 0;
    uint32_t size = 64;
    bool decode_each = false;
    int decode_given = 0;
    stoker_synthetic synth = {.delay_min_s = 0.05, .delay_max_s = 0.5};
    stoker_log_level level = STOKER_LOG_INFO;
    char token[256] = "", name[64] = "", err[512];
    uint64_t u, measure = 0;
    int opt;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (opt) {
        case OPT_BROKER:
            cfg.client.url = optarg;
            break;
        case OPT_GENERATOR:
            if (strcmp(optarg, "synthetic") != 0 && strcmp(optarg, "exec") != 0 &&
                strcmp(optarg, "images") != 0)
                return bad("--generator", optarg, "expected synthetic, exec or images");
            generator = optarg;
            break;
        case OPT_NAME:
            if (strlen(optarg) == 0 || strlen(optarg) >= sizeof(name))
                return bad("--name", optarg, "expected 1..63 characters");
            snprintf(name, sizeof(name), "%s", optarg);
            break;
        case OPT_CHUNK:
            if (stoker_parse_u64(optarg, 1, 1u << 20, &u) != STOKER_OK)
                return bad("--chunk", optarg, "expected an integer 1..1048576");
            cfg.chunk = (uint32_t)u;
            break;
        case OPT_MAX:
            if (stoker_parse_u64(optarg, 1, UINT64_MAX / 2, &u) != STOKER_OK)
                return bad("--max-examples", optarg, "expected a positive integer");
            cfg.max_examples = u;
            break;
        case OPT_SEED:
            if (stoker_parse_u64(optarg, 0, UINT64_MAX, &u) != STOKER_OK)
                return bad("--seed", optarg, "expected a non-negative integer");
            cfg.seed = u;
            break;
        case OPT_TOKEN:
            if (stoker_read_token_file(optarg, token, sizeof(token), err, sizeof(err)) != STOKER_OK)
                return bad("--token-file", optarg, err);
            cfg.client.token = token;
            break;
        case OPT_LOG:
            if (stoker_log_parse_level(optarg, &level) != STOKER_OK)
                return bad("--log-level", optarg, "expected error, warn, info or debug");
            break;
        case OPT_DELAY:
            if (stoker_parse_range(optarg, 3600, &synth.delay_min_s, &synth.delay_max_s) !=
                STOKER_OK)
                return bad("--delay", optarg, "expected MIN:MAX seconds, 0 <= MIN <= MAX");
            delay_given = 1;
            break;
        case OPT_EXEC:
            exec_cmd = optarg;
            break;
        case OPT_SCHEMA:
            schema_spec = optarg;
            break;
        case OPT_FORMAT:
            if (exec_format_parse(optarg, &format) != STOKER_OK)
                return bad("--format", optarg, "expected text or raw");
            format_given = 1;
            break;
        case OPT_IMAGES:
            images_dir = optarg;
            break;
        case OPT_SIZE:
            if (stoker_parse_u64(optarg, 8, 1024, &u) != STOKER_OK)
                return bad("--size", optarg, "expected an integer 8..1024");
            size = (uint32_t)u;
            size_given = 1;
            break;
        case OPT_DECODE:
            if (strcmp(optarg, "once") != 0 && strcmp(optarg, "each") != 0)
                return bad("--decode", optarg, "expected once or each");
            decode_each = strcmp(optarg, "each") == 0;
            decode_given = 1;
            break;
        case OPT_MEASURE:
            if (stoker_parse_u64(optarg, 1, UINT64_MAX / 2, &measure) != STOKER_OK)
                return bad("--measure", optarg, "expected a positive integer");
            break;
        case OPT_TLS_CERT:
            cfg.client.tls.cert = optarg;
            break;
        case OPT_TLS_KEY:
            cfg.client.tls.key = optarg;
            break;
        case OPT_TLS_CA:
            cfg.client.tls.ca = optarg;
            break;
        case OPT_HELP:
            usage(stdout);
            return 0;
        case OPT_VERSION:
            printf("stoker-producer %s\n", STOKER_VERSION);
            return 0;
        default:
            fprintf(stderr, "stoker-producer: unknown or incomplete option '%s'\n",
                    argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "stoker-producer: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (cfg.client.url == NULL && measure == 0) {
        fprintf(stderr, "stoker-producer: --broker URL is required\n");
        usage(stderr);
        return 2;
    }
    if (cfg.client.url != NULL && stoker_tls_url(cfg.client.url)
            ? stoker_tls_check(&cfg.client.tls, 0, err, sizeof(err)) != STOKER_OK
            : (cfg.client.tls.cert || cfg.client.tls.key || cfg.client.tls.ca) &&
                  snprintf(err, sizeof(err), "--tls-* options need a tls+tcp:// --broker URL")) {
        fprintf(stderr, "stoker-producer: %s\n", err);
        return 2;
    }
    // Options of one generator given to another are mistakes worth stopping for.
    int is_exec = strcmp(generator, "exec") == 0, is_images = strcmp(generator, "images") == 0;
    if (!is_exec && (exec_cmd || schema_spec || format_given)) {
        fprintf(stderr, "stoker-producer: --exec, --schema and --format need --generator exec\n");
        return 2;
    }
    if (!is_images && (images_dir || size_given || decode_given)) {
        fprintf(stderr, "stoker-producer: --images, --size and --decode need --generator images\n");
        return 2;
    }
    if ((is_exec || is_images) && delay_given) {
        fprintf(stderr, "stoker-producer: --delay applies to --generator synthetic only\n");
        return 2;
    }
    if (is_exec && (exec_cmd == NULL || schema_spec == NULL)) {
        fprintf(stderr, "stoker-producer: --generator exec needs --exec 'CMD' and --schema SPEC\n");
        return 2;
    }
    if (is_images && images_dir == NULL) {
        fprintf(stderr, "stoker-producer: --generator images needs --images DIR\n");
        return 2;
    }
    if (name[0] == '\0') {
        char host[32] = "host";
        gethostname(host, sizeof(host) - 1);
        host[sizeof(host) - 1] = '\0';
        snprintf(name, sizeof(name), "%s-%d", host, (int)getpid());
    }
    cfg.client.name = name;
    stoker_log_init("producer", level);

    stoker_generator gen;
    if (is_exec) {
        stoker_schema schema;
        if (stoker_schema_parse(schema_spec, &schema, err, sizeof(err)) != STOKER_OK)
            return bad("--schema", schema_spec, err);
        if (exec_generator_create(exec_cmd, &schema, format, &gen, err, sizeof(err)) != STOKER_OK) {
            stoker_error("exec: %s", err);
            return 1;
        }
    } else if (is_images) {
        if (images_generator_create(images_dir, size, decode_each, &gen, err, sizeof(err)) !=
            STOKER_OK) {
            stoker_error("images: %s", err);
            return 1;
        }
    } else {
        synth.stop = stoker_producer_stop_flag();
        stoker_synthetic_generator(&gen, &synth);
    }
    if (measure > 0) {
        int mrv = measure_generator(&gen, &cfg, measure);
        stoker_generator_fini(&gen);
        return mrv == STOKER_OK ? 0 : 1;
    }
    stoker_producer_stats stats;
    int rv = stoker_producer_run(&cfg, &gen, &stats);
    stoker_generator_fini(&gen);
    if (rv != STOKER_OK)
        return 1;
    return 0;
}
