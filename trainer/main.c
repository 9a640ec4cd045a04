// stoker-trainer: parses options, installs the signal handlers, runs the training loop
// (train.c) and writes the JSON summary. Exit codes: 0 completed or time goal, 3 data supply
// ended, 4 stalled, 130 interrupted, 1 other errors, 2 usage.
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/process.h"
#include "stoker/opts.h"
#include "train.h"

static volatile int stop_requested;

static void
on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static void
usage(FILE *f)
{
    fprintf(f,
            "usage: stoker-trainer (--broker URL [--token-file F] | --inline [--delay MIN:MAX])\n"
            "                      [options]\n"
            "\n"
            "Trains an MLP with Adam on batches pulled from a stoker broker (or generated inline,\n"
            "the baseline), on the GPU when one is usable.\n"
            "\n"
            "  --broker URL          pull batches from this broker\n"
            "  --token-file F        authenticate with the token in F\n"
            "  --tls-cert F --tls-key F  client certificate and key (PEM) for tls+tcp://\n"
            "  --tls-ca F            verify the broker's certificate with this CA (PEM)\n"
            "  --inline              generate synthetic batches in the loop (the baseline)\n"
            "  --delay MIN:MAX       inline generation cost per example (default 0.05:0.5)\n"
            "  --batch-size N        examples per step (default 4)\n"
            "  --round-length N      examples per round (default 20)\n"
            "  --rounds N            rounds to train (default 100)\n"
            "  --time-goal SEC       stop after this long (default: none)\n"
            "  --device D            auto (default), cpu or gpu\n"
            "  --hidden N[,N...]     hidden layer widths (default 16)\n"
            "  --lr X                Adam learning rate (default 0.001)\n"
            "  --seed N              weight initialisation seed (default 1)\n"
            "  --stall-timeout SEC   stop when no batch arrives for this long (default 4)\n"
            "  --input NAME          input field (default input)\n"
            "  --target NAME         target field (default output)\n"
            "  --classes N           the target is an int32 class label in [0, N): softmax\n"
            "                        cross-entropy (default: float target, MSE)\n"
            "  --prefetch N          pull requests in flight (default 4)\n"
            "  --weights PATH        save the weights there as safetensors when stopping\n"
            "  --json PATH|-         write the summary as JSON (- for stdout)\n"
            "  --progress auto|on|off  live status line (auto: when stderr is a terminal)\n"
            "  --log-level L         error, warn, info (default), debug\n"
            "  --help, --version\n"
            "\n"
            "Exit codes: 0 completed or time goal, 3 data supply ended, 4 stalled,\n"
            "130 interrupted, 1 error, 2 usage.\n");
}

static int
bad(const char *opt, const char *val, const char *want)
{
    fprintf(stderr, "stoker-trainer: %s '%s': %s\n", opt, val, want);
    usage(stderr);
    return 2;
}

static int
parse_hidden(const char *s, train_config *cfg)
{
    char buf[256];
    if (strlen(s) >= sizeof(buf))
        return STOKER_INVALID;
    strcpy(buf, s);
    cfg->n_hidden = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        uint64_t v;
        if (cfg->n_hidden == MLP_MAX_LAYERS - 1 ||
            stoker_parse_u64(tok, 1, MLP_MAX_WIDTH, &v) != STOKER_OK)
            return STOKER_INVALID;
        cfg->hidden[cfg->n_hidden++] = (uint32_t)v;
    }
    return cfg->n_hidden > 0 ? STOKER_OK : STOKER_INVALID;
}

int
main(int argc, char **argv)
{
    stoker_process_init();
    enum {
        OPT_BROKER = 1000,
        OPT_TOKEN,
        OPT_INLINE,
        OPT_DELAY,
        OPT_BATCH,
        OPT_ROUND,
        OPT_ROUNDS,
        OPT_TIME_GOAL,
        OPT_DEVICE,
        OPT_HIDDEN,
        OPT_LR,
        OPT_SEED,
        OPT_STALL,
        OPT_INPUT,
        OPT_TARGET,
        OPT_CLASSES,
        OPT_PREFETCH,
        OPT_WEIGHTS,
        OPT_JSON,
        OPT_PROGRESS,
        OPT_LOG,
        OPT_TLS_CERT,
        OPT_TLS_KEY,
        OPT_TLS_CA,
        OPT_HELP,
        OPT_VERSION,
    };
    static const struct option longopts[] = {
        {"broker", required_argument, NULL, OPT_BROKER},
        {"token-file", required_argument, NULL, OPT_TOKEN},
        {"inline", no_argument, NULL, OPT_INLINE},
        {"delay", required_argument, NULL, OPT_DELAY},
        {"batch-size", required_argument, NULL, OPT_BATCH},
        {"round-length", required_argument, NULL, OPT_ROUND},
        {"rounds", required_argument, NULL, OPT_ROUNDS},
        {"time-goal", required_argument, NULL, OPT_TIME_GOAL},
        {"device", required_argument, NULL, OPT_DEVICE},
        {"hidden", required_argument, NULL, OPT_HIDDEN},
        {"lr", required_argument, NULL, OPT_LR},
        {"seed", required_argument, NULL, OPT_SEED},
        {"stall-timeout", required_argument, NULL, OPT_STALL},
        {"input", required_argument, NULL, OPT_INPUT},
        {"target", required_argument, NULL, OPT_TARGET},
        {"classes", required_argument, NULL, OPT_CLASSES},
        {"prefetch", required_argument, NULL, OPT_PREFETCH},
        {"weights", required_argument, NULL, OPT_WEIGHTS},
        {"json", required_argument, NULL, OPT_JSON},
        {"progress", required_argument, NULL, OPT_PROGRESS},
        {"log-level", required_argument, NULL, OPT_LOG},
        {"tls-cert", required_argument, NULL, OPT_TLS_CERT},
        {"tls-key", required_argument, NULL, OPT_TLS_KEY},
        {"tls-ca", required_argument, NULL, OPT_TLS_CA},
        {"help", no_argument, NULL, OPT_HELP},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    train_config cfg;
    train_config_init(&cfg);
    const char *json_path = NULL, *progress = "auto";
    stoker_log_level level = STOKER_LOG_INFO;
    char token[256], err[512];
    int delay_given = 0;
    uint64_t u;
    double d;
    int opt;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (opt) {
        case OPT_BROKER:
            cfg.broker_url = optarg;
            break;
        case OPT_TOKEN:
            if (stoker_read_token_file(optarg, token, sizeof(token), err, sizeof(err)) != STOKER_OK)
                return bad("--token-file", optarg, err);
            cfg.token = token;
            break;
        case OPT_INLINE:
            cfg.inline_mode = 1;
            break;
        case OPT_DELAY:
            if (stoker_parse_range(optarg, 3600, &cfg.delay_min_s, &cfg.delay_max_s) != STOKER_OK)
                return bad("--delay", optarg, "expected MIN:MAX seconds, 0 <= MIN <= MAX");
            delay_given = 1;
            break;
        case OPT_BATCH:
            if (stoker_parse_u64(optarg, 1, 1u << 20, &u) != STOKER_OK)
                return bad("--batch-size", optarg, "expected an integer 1..1048576");
            cfg.batch_size = (uint32_t)u;
            break;
        case OPT_ROUND:
            if (stoker_parse_u64(optarg, 1, 1u << 30, &u) != STOKER_OK)
                return bad("--round-length", optarg, "expected a positive integer");
            cfg.round_length = (uint32_t)u;
            break;
        case OPT_ROUNDS:
            if (stoker_parse_u64(optarg, 1, 1u << 30, &u) != STOKER_OK)
                return bad("--rounds", optarg, "expected a positive integer");
            cfg.rounds = (uint32_t)u;
            break;
        case OPT_TIME_GOAL:
            if (stoker_parse_double(optarg, 0.001, 1e7, &d) != STOKER_OK)
                return bad("--time-goal", optarg, "expected seconds > 0");
            cfg.time_goal_s = d;
            break;
        case OPT_DEVICE:
            if (strcmp(optarg, "auto") != 0 && strcmp(optarg, "cpu") != 0 &&
                strcmp(optarg, "gpu") != 0)
                return bad("--device", optarg, "expected auto, cpu or gpu");
            cfg.device = optarg;
            break;
        case OPT_HIDDEN:
            if (parse_hidden(optarg, &cfg) != STOKER_OK)
                return bad("--hidden", optarg, "expected widths like 16 or 64,32 (1..65536)");
            break;
        case OPT_LR:
            if (stoker_parse_double(optarg, 1e-12, 10, &d) != STOKER_OK)
                return bad("--lr", optarg, "expected a learning rate in (0, 10]");
            cfg.lr = (float)d;
            break;
        case OPT_SEED:
            if (stoker_parse_u64(optarg, 0, UINT64_MAX, &u) != STOKER_OK)
                return bad("--seed", optarg, "expected a non-negative integer");
            cfg.seed = u;
            break;
        case OPT_STALL:
            if (stoker_parse_double(optarg, 0.05, 86400, &d) != STOKER_OK)
                return bad("--stall-timeout", optarg, "expected seconds, 0.05..86400");
            cfg.stall_timeout_ms = (uint32_t)(d * 1000);
            break;
        case OPT_INPUT:
            cfg.input_field = optarg;
            break;
        case OPT_TARGET:
            cfg.target_field = optarg;
            break;
        case OPT_CLASSES:
            if (stoker_parse_u64(optarg, 2, MLP_MAX_WIDTH, &u) != STOKER_OK)
                return bad("--classes", optarg, "expected an integer 2..65536");
            cfg.classes = (uint32_t)u;
            break;
        case OPT_PREFETCH:
            if (stoker_parse_u64(optarg, 1, 64, &u) != STOKER_OK)
                return bad("--prefetch", optarg, "expected an integer 1..64");
            cfg.prefetch = (uint32_t)u;
            break;
        case OPT_WEIGHTS:
            cfg.weights_path = optarg;
            break;
        case OPT_JSON:
            json_path = optarg;
            break;
        case OPT_PROGRESS:
            if (strcmp(optarg, "auto") != 0 && strcmp(optarg, "on") != 0 &&
                strcmp(optarg, "off") != 0)
                return bad("--progress", optarg, "expected auto, on or off");
            progress = optarg;
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
            printf("stoker-trainer %s\n", STOKER_VERSION);
            return 0;
        default:
            fprintf(stderr, "stoker-trainer: unknown or incomplete option '%s'\n",
                    argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "stoker-trainer: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if ((cfg.broker_url == NULL) == (cfg.inline_mode == 0)) {
        fprintf(stderr, "stoker-trainer: give exactly one of --broker URL or --inline\n");
        usage(stderr);
        return 2;
    }
    if (cfg.broker_url != NULL && delay_given) {
        fprintf(stderr, "stoker-trainer: --delay applies to --inline only (producers set their "
                        "own)\n");
        return 2;
    }
    if (cfg.inline_mode && cfg.token != NULL) {
        fprintf(stderr, "stoker-trainer: --token-file applies to --broker only\n");
        return 2;
    }
    if (cfg.inline_mode && (strcmp(cfg.input_field, "input") != 0 ||
                            strcmp(cfg.target_field, "output") != 0 || cfg.classes > 0)) {
        fprintf(stderr, "stoker-trainer: --inline trains on the synthetic schema "
                        "input:float32[10],output:float32[1] only\n");
        return 2;
    }
    if (cfg.tls.cert || cfg.tls.key || cfg.tls.ca) {
        if (!stoker_tls_url(cfg.broker_url)) {
            fprintf(stderr, "stoker-trainer: --tls-* options need a tls+tcp:// --broker URL\n");
            return 2;
        }
        if (stoker_tls_check(&cfg.tls, 0, err, sizeof(err)) != STOKER_OK) {
            fprintf(stderr, "stoker-trainer: %s\n", err);
            return 2;
        }
    }
    FILE *json = NULL;
    if (json_path != NULL) {
        json = strcmp(json_path, "-") == 0 ? stdout : fopen(json_path, "w");
        if (json == NULL) {
            fprintf(stderr, "stoker-trainer: --json '%s': cannot open for writing\n", json_path);
            return 2;
        }
    }
    cfg.progress =
        strcmp(progress, "on") == 0 || (strcmp(progress, "auto") == 0 && isatty(STDERR_FILENO));
    stoker_log_init("trainer", level);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    cfg.stop = &stop_requested;

    train_result *res = malloc(sizeof(*res));
    if (res == NULL) {
        fprintf(stderr, "stoker-trainer: out of memory\n");
        return 1;
    }
    int code = train_run(&cfg, res);
    if (code == 0)
        stoker_info("%s: %s; %llu examples in %.2f s (%.1f/s), final loss %.5f, data wait "
                    "%.1f%%",
                    train_status_name(res->status), res->reason, (unsigned long long)res->examples,
                    res->seconds, res->examples_per_second, res->final_loss,
                    100 * res->data_wait_fraction);
    else
        stoker_error("%s: %s (after %llu examples in %.2f s)", train_status_name(res->status),
                     res->reason, (unsigned long long)res->examples, res->seconds);
    if (json != NULL) {
        train_write_json(res, json);
        if (json != stdout)
            fclose(json);
        else
            fflush(stdout);
    }
    free(res);
    return code;
}
