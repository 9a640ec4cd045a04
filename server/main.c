// stoker-broker: parses options, starts the server, waits for SIGINT/SIGTERM, stops cleanly.
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "server.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/process.h"
#include "stoker/opts.h"
#include "stoker/schema.h"
#include "stoker/tls.h"

static volatile sig_atomic_t stop_signal;

static void
on_signal(int sig)
{
    stop_signal = sig;
}

static void
usage(FILE *f)
{
    fprintf(
        f,
        "usage: stoker-broker --listen URL [--listen URL ...] [options]\n"
        "\n"
        "Keeps one bounded queue per producer and hands batches to trainers with\n"
        "acknowledged delivery.\n"
        "\n"
        "  --listen URL            tcp://HOST:PORT, ipc:///path, inproc://name, tls+tcp://...\n"
        "                          (port 0 picks a free port; the real URL is printed)\n"
        "  --metrics URL           serve /metrics and /status at http://HOST:PORT\n"
        "  --queue-depth N         examples per producer queue (default 64)\n"
        "  --max-bytes N           bytes queued in all (default 1073741824)\n"
        "  --producer-timeout SEC  silence before a producer is lost (default 3)\n"
        "  --trainer-timeout SEC   silence before a trainer's leases are redelivered (default 10)\n"
        "  --schema SPEC           accept only this schema, e.g.\n"
        "                          'input:float32[10],output:float32[1]' (default: the first\n"
        "                          producer's)\n"
        "  --token-file F          require the token in F from every peer\n"
        "  --tls-cert F --tls-key F  certificate and key (PEM) for tls+tcp:// listeners\n"
        "  --tls-ca F              require client certificates signed by this CA (PEM)\n"
        "  --max-message N         largest request accepted in bytes (default 67108864)\n"
        "  --max-producers N       (default 1024)   --max-trainers N (default 64)\n"
        "  --max-chunk N           most examples in one push or pull (default 1048576)\n"
        "  --log-level L           error, warn, info (default), debug\n"
        "  --help, --version\n");
}

static int
bad(const char *opt, const char *val, const char *want)
{
    fprintf(stderr, "stoker-broker: %s '%s': %s\n", opt, val, want);
    usage(stderr);
    return 2;
}

int
main(int argc, char **argv)
{
    stoker_process_init();
    enum {
        OPT_LISTEN = 1000,
        OPT_METRICS,
        OPT_DEPTH,
        OPT_MAX_BYTES,
        OPT_PTIMEOUT,
        OPT_TTIMEOUT,
        OPT_SCHEMA,
        OPT_TOKEN,
        OPT_MAX_MESSAGE,
        OPT_MAX_PRODUCERS,
        OPT_MAX_TRAINERS,
        OPT_MAX_CHUNK,
        OPT_LOG,
        OPT_TLS_CERT,
        OPT_TLS_KEY,
        OPT_TLS_CA,
        OPT_HELP,
        OPT_VERSION,
    };
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, OPT_LISTEN},
        {"metrics", required_argument, NULL, OPT_METRICS},
        {"queue-depth", required_argument, NULL, OPT_DEPTH},
        {"max-bytes", required_argument, NULL, OPT_MAX_BYTES},
        {"producer-timeout", required_argument, NULL, OPT_PTIMEOUT},
        {"trainer-timeout", required_argument, NULL, OPT_TTIMEOUT},
        {"schema", required_argument, NULL, OPT_SCHEMA},
        {"token-file", required_argument, NULL, OPT_TOKEN},
        {"max-message", required_argument, NULL, OPT_MAX_MESSAGE},
        {"max-producers", required_argument, NULL, OPT_MAX_PRODUCERS},
        {"max-trainers", required_argument, NULL, OPT_MAX_TRAINERS},
        {"max-chunk", required_argument, NULL, OPT_MAX_CHUNK},
        {"log-level", required_argument, NULL, OPT_LOG},
        {"tls-cert", required_argument, NULL, OPT_TLS_CERT},
        {"tls-key", required_argument, NULL, OPT_TLS_KEY},
        {"tls-ca", required_argument, NULL, OPT_TLS_CA},
        {"help", no_argument, NULL, OPT_HELP},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    server_config cfg = {.max_message_bytes = 64u << 20, .contexts = 512};
    broker_config_init(&cfg.broker);
    stoker_log_level level = STOKER_LOG_INFO;
    char token[STOKER_TOKEN_MAX] = "";
    char err[512];
    uint64_t u;
    double d;
    int opt;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (opt) {
        case OPT_LISTEN:
            if (cfg.n_listen == SERVER_MAX_LISTEN)
                return bad("--listen", optarg, "at most 8 listen URLs");
            cfg.listen[cfg.n_listen++] = optarg;
            break;
        case OPT_METRICS:
            cfg.metrics_url = optarg;
            break;
        case OPT_DEPTH:
            if (stoker_parse_u64(optarg, 1, 1u << 24, &u) != STOKER_OK)
                return bad("--queue-depth", optarg, "expected an integer 1..16777216");
            cfg.broker.queue_depth = (uint32_t)u;
            break;
        case OPT_MAX_BYTES:
            if (stoker_parse_u64(optarg, 1024, UINT64_MAX / 2, &u) != STOKER_OK)
                return bad("--max-bytes", optarg, "expected an integer >= 1024");
            cfg.broker.max_bytes = u;
            break;
        case OPT_PTIMEOUT:
            if (stoker_parse_double(optarg, 0.05, 86400, &d) != STOKER_OK)
                return bad("--producer-timeout", optarg, "expected seconds, 0.05..86400");
            cfg.broker.producer_timeout_ms = (uint32_t)(d * 1000);
            break;
        case OPT_TTIMEOUT:
            if (stoker_parse_double(optarg, 0.05, 86400, &d) != STOKER_OK)
                return bad("--trainer-timeout", optarg, "expected seconds, 0.05..86400");
            cfg.broker.trainer_timeout_ms = (uint32_t)(d * 1000);
            break;
        case OPT_SCHEMA:
            if (stoker_schema_parse(optarg, &cfg.broker.schema, err, sizeof(err)) != STOKER_OK)
                return bad("--schema", optarg, err);
            cfg.broker.has_schema = 1;
            break;
        case OPT_TOKEN:
            if (stoker_read_token_file(optarg, token, sizeof(token), err, sizeof(err)) != STOKER_OK)
                return bad("--token-file", optarg, err);
            cfg.broker.token = token;
            break;
        case OPT_MAX_MESSAGE:
            if (stoker_parse_u64(optarg, 4096, 1ull << 31, &u) != STOKER_OK)
                return bad("--max-message", optarg, "expected bytes, 4096..2147483648");
            cfg.max_message_bytes = (size_t)u;
            break;
        case OPT_MAX_PRODUCERS:
            if (stoker_parse_u64(optarg, 1, 65536, &u) != STOKER_OK)
                return bad("--max-producers", optarg, "expected an integer 1..65536");
            cfg.broker.max_producers = (uint32_t)u;
            break;
        case OPT_MAX_TRAINERS:
            if (stoker_parse_u64(optarg, 1, 4096, &u) != STOKER_OK)
                return bad("--max-trainers", optarg, "expected an integer 1..4096");
            cfg.broker.max_trainers = (uint32_t)u;
            break;
        case OPT_MAX_CHUNK:
            if (stoker_parse_u64(optarg, 1, 1u << 24, &u) != STOKER_OK)
                return bad("--max-chunk", optarg, "expected an integer 1..16777216");
            cfg.broker.max_chunk_examples = (uint32_t)u;
            break;
        case OPT_LOG:
            if (stoker_log_parse_level(optarg, &level) != STOKER_OK)
                return bad("--log-level", optarg, "expected error, warn, info or debug");
            break;
        case OPT_TLS_CERT:
            cfg.tls.cert = optarg;
            break;
        case OPT_TLS_KEY:
            cfg.tls.key = optarg;
            break;
        case OPT_TLS_CA:
            cfg.tls.ca = optarg;
            break;
        case OPT_HELP:
            usage(stdout);
            return 0;
        case OPT_VERSION:
            printf("stoker-broker %s\n", STOKER_VERSION);
            return 0;
        default:
            fprintf(stderr, "stoker-broker: unknown or incomplete option '%s'\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "stoker-broker: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (cfg.n_listen == 0) {
        fprintf(stderr, "stoker-broker: --listen URL is required\n");
        usage(stderr);
        return 2;
    }
    int any_tls = 0;
    for (uint32_t i = 0; i < cfg.n_listen; i++)
        any_tls |= stoker_tls_url(cfg.listen[i]);
    if (any_tls && stoker_tls_check(&cfg.tls, 1, err, sizeof(err)) != STOKER_OK) {
        fprintf(stderr, "stoker-broker: %s\n", err);
        return 2;
    }
    if (!any_tls && (cfg.tls.cert || cfg.tls.key || cfg.tls.ca)) {
        fprintf(stderr, "stoker-broker: --tls-* options need a tls+tcp:// --listen URL\n");
        return 2;
    }
    stoker_log_init("broker", level);

    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    server *srv;
    int rv = server_start(&cfg, &srv, err, sizeof(err));
    if (rv != STOKER_OK) {
        stoker_error("cannot start: %s", err);
        return 1;
    }
    stoker_info("started: queue depth %u, producer timeout %.1f s, trainer timeout %.1f s",
                cfg.broker.queue_depth, cfg.broker.producer_timeout_ms / 1000.0,
                cfg.broker.trainer_timeout_ms / 1000.0);
    while (!stop_signal)
        stoker_sleep_ms(50, NULL);
    stoker_info("stopping: %s", stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
    server_stop(srv);
    stoker_info("stopped");
    return 0;
}
