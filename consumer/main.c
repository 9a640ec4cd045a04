// stoker-pull: a command-line consumer for any language. Pulls batches from a broker and writes
// them to stdout as text lines or raw records (pull.h), acknowledging each batch only once it is
// written and flushed; what it never wrote is redelivered by the broker to other consumers.
// Exit codes as the trainer's: 0 done (--max-examples reached), 3 data supply ended, 4 stalled,
// 130 interrupted, 1 other errors (stdout closed, broker refused), 2 usage.
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "pull.h"
#include "stoker/consumer.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/opts.h"
#include "stoker/process.h"
#include "stoker/protocol.h"

static stoker_consumer *volatile running;

static void
on_signal(int sig)
{
    (void)sig;
    stoker_consumer *c = running;
    if (c != NULL)
        stoker_consumer_interrupt(c);
}

static void
usage(FILE *f)
{
    fprintf(f,
            "usage: stoker-pull --broker URL [options]\n"
            "\n"
            "Pulls batches from a stoker broker and writes their examples to stdout, one example\n"
            "per line (all numbers of all fields in schema order, separated by spaces) or as raw\n"
            "little-endian records. Each batch is acknowledged once it is written.\n"
            "\n"
            "  --broker URL          the broker (tcp://, ipc://, tls+tcp://)\n"
            "  --token-file F        authenticate with the token in F\n"
            "  --format text|raw     output format (default text)\n"
            "  --batch-size N        examples per pull (default 16)\n"
            "  --max-examples N      stop after writing exactly N examples (default: until the\n"
            "                        supply ends)\n"
            "  --stall-timeout SEC   stop when no batch arrives for this long (default 4)\n"
            "  --prefetch N          pull requests in flight (default 4)\n"
            "  --schema              print the broker's schema to stdout and exit\n"
            "  --log-level L         error, warn (default), info, debug (to stderr)\n"
            "  --help, --version\n"
            "\n"
            "Exit codes: 0 done, 3 data supply ended, 4 stalled, 130 interrupted, 1 error,\n"
            "2 usage.\n");
}

static int
bad(const char *opt, const char *val, const char *want)
{
    fprintf(stderr, "stoker-pull: %s '%s': %s\n", opt, val, want);
    usage(stderr);
    return 2;
}

static void
print_events(stoker_consumer *c)
{
    int kind;
    uint32_t producer;
    char name[STOKER_NAME_MAX], reason[STOKER_REASON_MAX];
    while (stoker_consumer_poll_event(c, &kind, &producer, name, sizeof(name), NULL, reason,
                                      sizeof(reason))) {
        if (kind == STOKER_EVENT_PRODUCER_LOST)
            stoker_warn("producer-lost: producer %u '%s': %s", producer, name, reason);
        else
            stoker_info("producer %u '%s': %s", producer, name,
                        stoker_event_kind_name((stoker_event_kind)kind));
    }
}

int
main(int argc, char **argv)
{
    stoker_process_init();
    enum {
        OPT_BROKER = 1000,
        OPT_TOKEN,
        OPT_FORMAT,
        OPT_BATCH,
        OPT_MAX,
        OPT_STALL,
        OPT_PREFETCH,
        OPT_SCHEMA,
        OPT_LOG,
        OPT_HELP,
        OPT_VERSION,
    };
    static const struct option longopts[] = {
        {"broker", required_argument, NULL, OPT_BROKER},
        {"token-file", required_argument, NULL, OPT_TOKEN},
        {"format", required_argument, NULL, OPT_FORMAT},
        {"batch-size", required_argument, NULL, OPT_BATCH},
        {"max-examples", required_argument, NULL, OPT_MAX},
        {"stall-timeout", required_argument, NULL, OPT_STALL},
        {"prefetch", required_argument, NULL, OPT_PREFETCH},
        {"schema", no_argument, NULL, OPT_SCHEMA},
        {"log-level", required_argument, NULL, OPT_LOG},
        {"help", no_argument, NULL, OPT_HELP},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    stoker_consumer_options o;
    stoker_consumer_options_init(&o);
    o.batch_size = 16;
    pull_format format = PULL_TEXT;
    uint64_t max_examples = UINT64_MAX, u;
    stoker_log_level level = STOKER_LOG_WARN;
    int schema_only = 0;
    double d;
    int opt;

    opterr = 0;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (opt) {
        case OPT_BROKER:
            o.url = optarg;
            break;
        case OPT_TOKEN:
            o.token_file = optarg;
            break;
        case OPT_FORMAT:
            if (pull_format_parse(optarg, &format) != STOKER_OK)
                return bad("--format", optarg, "expected text or raw");
            break;
        case OPT_BATCH:
            if (stoker_parse_u64(optarg, 1, 1u << 20, &u) != STOKER_OK)
                return bad("--batch-size", optarg, "expected an integer 1..1048576");
            o.batch_size = (uint32_t)u;
            break;
        case OPT_MAX:
            if (stoker_parse_u64(optarg, 1, UINT64_MAX, &max_examples) != STOKER_OK)
                return bad("--max-examples", optarg, "expected a positive integer");
            break;
        case OPT_STALL:
            if (stoker_parse_double(optarg, 0.05, 86400, &d) != STOKER_OK)
                return bad("--stall-timeout", optarg, "expected seconds, 0.05..86400");
            o.stall_timeout_ms = (uint32_t)(d * 1000);
            break;
        case OPT_PREFETCH:
            if (stoker_parse_u64(optarg, 1, 64, &u) != STOKER_OK)
                return bad("--prefetch", optarg, "expected an integer 1..64");
            o.prefetch = (uint32_t)u;
            break;
        case OPT_SCHEMA:
            schema_only = 1;
            break;
        case OPT_LOG:
            if (stoker_log_parse_level(optarg, &level) != STOKER_OK)
                return bad("--log-level", optarg, "expected error, warn, info or debug");
            break;
        case OPT_HELP:
            usage(stdout);
            return 0;
        case OPT_VERSION:
            printf("stoker-pull %s\n", STOKER_VERSION);
            return 0;
        default:
            fprintf(stderr, "stoker-pull: unknown or incomplete option '%s'\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "stoker-pull: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (o.url == NULL) {
        fprintf(stderr, "stoker-pull: --broker URL is required\n");
        usage(stderr);
        return 2;
    }
    stoker_log_init("pull", level);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    stoker_consumer *c;
    char err[512];
    int rv = stoker_consumer_open(&o, &c, err, sizeof(err));
    if (rv != STOKER_OK) {
        fprintf(stderr, "stoker-pull: cannot start pulling from %s: %s\n", o.url, err);
        return rv == STOKER_INVALID ? 2 : rv == STOKER_STALLED || rv == STOKER_CONNECTION ? 4 : 1;
    }
    running = c;
    if (schema_only) {
        char spec[2048];
        stoker_consumer_schema(c, spec, sizeof(spec));
        printf("%s\n", spec);
        running = NULL;
        stoker_consumer_close(c);
        return 0;
    }

    uint64_t written = 0;
    int code = 0;
    while (written < max_examples) {
        if (max_examples - written < o.batch_size) {
            // Leases are acknowledged whole: for an exact count, ask for exactly what is left
            // (a new connection; batches prefetched by this one go back to the broker).
            stoker_consumer_close(c);
            running = NULL;
            o.batch_size = (uint32_t)(max_examples - written);
            if ((rv = stoker_consumer_open(&o, &c, err, sizeof(err))) != STOKER_OK) {
                fprintf(stderr, "stoker-pull: cannot reconnect to %s: %s\n", o.url, err);
                return rv == STOKER_STALLED || rv == STOKER_CONNECTION ? 4 : 1;
            }
            running = c;
        }
        stoker_consumer_batch *b;
        rv = stoker_consumer_next(c, &b);
        print_events(c);
        if (rv != STOKER_OK) {
            code = rv == STOKER_NO_PRODUCERS || rv == STOKER_END_OF_DATA ? 3
                   : rv == STOKER_STALLED                                ? 4
                   : rv == STOKER_INTERRUPTED                            ? 130
                                                                         : 1;
            fprintf(stderr, "stoker-pull: %s (after %llu examples)\n", stoker_consumer_error(c),
                    (unsigned long long)written);
            break;
        }
        uint32_t n = stoker_consumer_batch_count(b);
        uint32_t take = max_examples - written < n ? (uint32_t)(max_examples - written) : n;
        if ((rv = pull_write(stdout, format, b, take)) != STOKER_OK) {
            // Not acknowledged: the broker redelivers the whole batch to another consumer.
            fprintf(stderr, "stoker-pull: writing stdout: %s (after %llu examples)\n",
                    rv == STOKER_IO ? strerror(errno) : stoker_strerror(rv),
                    (unsigned long long)written);
            stoker_consumer_batch_free(b);
            code = 1;
            break;
        }
        written += take;
        if (take == n)
            stoker_consumer_release(c, b);
        else // cannot happen (batch size <= what is left); never acknowledge unwritten data
            stoker_consumer_batch_free(b);
    }
    running = NULL;
    stoker_consumer_close(c);
    return code;
}
