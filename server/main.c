// stoker-broker: parses the option table, starts the server, waits for SIGINT/SIGTERM, stops
// cleanly.
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server.h"
#include "stoker/cli.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/process.h"
#include "stoker/schema.h"
#include "stoker/tls.h"

static volatile sig_atomic_t stop_signal;

// The longest a stop may take. nng 1.5.2's close of the socket once did not return (the main
// thread in nng_close, every nng thread idle, after the stop signal came as a producer was
// killed): a broker told to stop then lived on until killed. Past this, it says so and exits.
#define STOP_WATCH_MS 20000

static void *
stop_watch(void *arg)
{
    (void)arg;
    stoker_sleep_ms(STOP_WATCH_MS, NULL);
    stoker_error("stopping took more than %d s (closing the sockets did not finish): exiting "
                 "without a clean close",
                 STOP_WATCH_MS / 1000);
    _exit(1);
    return NULL;
}

static void
on_signal(int sig)
{
    stop_signal = sig;
}

// The server's own defaults; the broker's are broker_config_init's.
static void
config_init(server_config *cfg)
{
    *cfg = (server_config){.max_message_bytes = 64u << 20, .contexts = 512};
    broker_config_init(&cfg->broker);
    cfg->broker.arena_bytes = 256u << 20; // shared memory for local trainers (broker_arena.h)
}

static int
parse_schema(const char *value, void *base, char *err, size_t err_len)
{
    server_config *cfg = base;
    if (stoker_schema_parse(value, &cfg->broker.schema, err, err_len) != STOKER_OK)
        return 1;
    cfg->broker.has_schema = 1;
    return 0;
}

// --queue-depth N fixes the depth (a user's choice); auto (the default) lets the broker size it.
static int
parse_queue_depth(const char *value, void *base, char *err, size_t err_len)
{
    server_config *cfg = base;
    if (strcmp(value, "auto") == 0) {
        cfg->broker.queue_depth_auto = 1;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long n = strtoull(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || value[0] == '-' || n < 1 || n > (1u << 24)) {
        snprintf(err, err_len, "expected a number of examples in 1..16777216, or auto");
        return 1;
    }
    cfg->broker.queue_depth = (uint32_t)n;
    cfg->broker.queue_depth_auto = 0;
    return 0;
}

// --dataset-size N serves N items; auto takes the first dataset producer's count.
static int
parse_dataset_size(const char *value, void *base, char *err, size_t err_len)
{
    server_config *cfg = base;
    if (strcmp(value, "auto") == 0) {
        cfg->broker.dataset_auto = 1;
        cfg->broker.dataset_size = 0;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long n = strtoull(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || value[0] == '-' || n < 1 || n > UINT32_MAX) {
        snprintf(err, err_len, "expected a number of items in 1..%u, or auto", UINT32_MAX);
        return 1;
    }
    cfg->broker.dataset_size = n;
    cfg->broker.dataset_auto = 0;
    return 0;
}

// --intake PORT|auto|off: the intake's port beside each tcp:// listener (intake.h).
static int
parse_intake(const char *value, void *base, char *err, size_t err_len)
{
    server_config *cfg = base;
    if (strcmp(value, "auto") == 0 || strcmp(value, "off") == 0) {
        cfg->intake_off = value[1] == 'f';
        cfg->intake_port = 0;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long n = strtoull(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || value[0] == '-' || n < 1 || n > 65535) {
        snprintf(err, err_len, "expected a port in 1..65535, auto or off");
        return 1;
    }
    cfg->intake_port = (uint32_t)n;
    cfg->intake_off = 0;
    return 0;
}

static void
show_intake(const void *base, char *buf, size_t len)
{
    const server_config *cfg = base;
    if (cfg->intake_off)
        snprintf(buf, len, "off");
    else if (cfg->intake_port == 0)
        snprintf(buf, len, "auto");
    else
        snprintf(buf, len, "%u", cfg->intake_port);
}

static void
show_queue_depth(const void *base, char *buf, size_t len)
{
    const server_config *cfg = base;
    if (cfg->broker.queue_depth_auto)
        snprintf(buf, len, "auto");
    else
        snprintf(buf, len, "%u", cfg->broker.queue_depth);
}

#define AT(member) STOKER_CLI_AT(server_config, member)
static const char *const job_policies[] = {"wait", "detach", "remake", NULL};

static const stoker_cli_option rows[] = {
    {"listen", "URL",
     "tcp://HOST:PORT, ipc:///path, inproc://name, tls+tcp://...\n"
     "(port 0 picks a free port; the real URL is printed)",
     STOKER_CLI_STRINGS, AT(listen), .offset2 = offsetof(server_config, n_listen),
     .imax = SERVER_MAX_LISTEN},
    {"metrics", "URL", "serve the live page /, /status and /metrics at http://HOST:PORT",
     STOKER_CLI_STRING, AT(metrics_url)},
    {"queue-depth", "N|auto",
     "examples per producer queue; auto: the broker sizes each queue\n"
     "to hold two of the largest batch a trainer asks for across the\n"
     "producers alive (at least 64, within --max-bytes); N fixes it\n"
     "(batches larger than the queues hold then come short)",
     STOKER_CLI_CUSTOM, AT(broker.queue_depth), .parse = parse_queue_depth,
     .show = show_queue_depth, .expect = "expected a number of examples in 1..16777216, or auto"},
    {"max-bytes", "N", "bytes queued in all", STOKER_CLI_BYTES, AT(broker.max_bytes), .imin = 1024,
     .imax = UINT64_MAX / 2},
    {"producer-timeout", "SEC", "silence before a producer is lost", STOKER_CLI_SECONDS_MS,
     AT(broker.producer_timeout_ms), .dmin = 0.05, .dmax = 86400},
    {"silent-grace", "SEC",
     "how long the supply waits for a producer lost by silence while its\n"
     "connection stays open (frozen, paused, on a loaded node): it may\n"
     "come back with what it retains",
     STOKER_CLI_SECONDS_MS, AT(broker.silent_grace_ms), .dmin = 0, .dmax = 86400},
    {"trainer-timeout", "SEC", "silence before a trainer's leases are redelivered",
     STOKER_CLI_SECONDS_MS, AT(broker.trainer_timeout_ms), .dmin = 0.05, .dmax = 86400},
    {"job-lag", "N",
     "jobs sharing the producers (docs/sharing.md): examples a job may hold\n"
     "queued per producer beyond the queue depth while another job takes\n"
     "faster; beyond it the producers wait for the slowest job (0: one\n"
     "queue depth)",
     STOKER_CLI_UINT, AT(broker.job_lag), .imin = 0, .imax = 1u << 24},
    {"job-policy", "wait|detach|remake",
     "a job lagging --job-lag behind the others: the producers wait for it\n"
     "(wait); it is detached, its consumers told why, and the others go on\n"
     "(detach; streams); or what it cannot take now is made again for it\n"
     "by index once it has room, and the others go on (remake; datasets)",
     STOKER_CLI_ENUM, AT(broker.job_policy), .choices = job_policies},
    {"job-timeout", "SEC",
     "how long a job none of whose consumers is connected is kept (a\n"
     "resumed consumer continues it) before what it held is freed and the\n"
     "other jobs no longer wait for it",
     STOKER_CLI_SECONDS_MS, AT(broker.job_timeout_ms), .dmin = 0.05, .dmax = 86400},
    {"schema", "SPEC",
     "accept only this schema, e.g. 'input:float32[10],output:float32[1]'\n"
     "(default: the first producer's); fields NAME:DTYPE[DIMS], DIMS may\n"
     "start with ? or ?<=N (a variable length), NAME:bytes is uint8[?]\n"
     "(docs/schema.md)",
     STOKER_CLI_CUSTOM, AT(broker.schema), .parse = parse_schema},
    {"token-file", "F", "require the token in F from every peer", STOKER_CLI_TOKEN_FILE,
     AT(broker.token)},
    {"tls-cert", "F", "certificate (PEM) for tls+tcp:// listeners", STOKER_CLI_STRING,
     AT(tls.cert)},
    {"tls-key", "F", "its private key (PEM)", STOKER_CLI_STRING, AT(tls.key)},
    {"tls-ca", "F", "require client certificates signed by this CA (PEM)", STOKER_CLI_STRING,
     AT(tls.ca)},
    {"max-message", "N", "largest request accepted in bytes", STOKER_CLI_BYTES,
     AT(max_message_bytes), .imin = 4096, .imax = 1ull << 31},
    {"intake", "PORT|auto|off",
     "port beside each tcp:// listener where producers' pushes are read into the broker's own "
     "buffers (auto: one the system picks; a producer that cannot reach it pushes on --listen)",
     STOKER_CLI_CUSTOM, AT(intake_port), .parse = parse_intake, .show = show_intake},
    {"max-producers", "N", "producers connected at once", STOKER_CLI_UINT, AT(broker.max_producers),
     .imin = 1, .imax = 65536},
    {"max-trainers", "N", "trainers connected at once", STOKER_CLI_UINT, AT(broker.max_trainers),
     .imin = 1, .imax = 4096},
    {"shm-bytes", "N",
     "shared memory for the batches of trainers on this host\n"
     "(at most --max-bytes; 0: all batches go over sockets)",
     STOKER_CLI_BYTES, AT(broker.arena_bytes), .imin = 0, .imax = UINT64_MAX / 2},
    {"max-chunk", "N", "most examples in one push or pull", STOKER_CLI_UINT,
     AT(broker.max_chunk_examples), .imin = 1, .imax = 1u << 24},
    {"dataset-size", "N|auto",
     "serve a dataset of N items in epochs instead of streams; auto:\n"
     "as many as the first producer serves (see docs/datasets.md)",
     STOKER_CLI_CUSTOM, AT(broker.dataset_size), .parse = parse_dataset_size},
    {"epochs", "E", "with --dataset-size: make E epochs, then end (0: without end)",
     STOKER_CLI_UINT, AT(broker.epochs), .imin = 0, .imax = UINT32_MAX},
    {"shuffle-seed", "S", "with --dataset-size: seed of each epoch's order and items' seeds",
     STOKER_CLI_UINT, AT(broker.shuffle_seed), .imin = 0, .imax = UINT64_MAX},
    {"shard-items", "N", "with --dataset-size: items handed to a producer per request",
     STOKER_CLI_UINT, AT(broker.shard_items), .imin = 1, .imax = STOKER_SHARD_MAX_ITEMS},
    {"strict-epochs", NULL,
     "with --dataset-size: start an epoch's work only once the previous one\n"
     "was acknowledged (the default: no batch mixes epochs)",
     STOKER_CLI_FLAG, AT(broker.strict_epochs)},
    {"overlap-epochs", NULL,
     "with --dataset-size: hand out the next epoch's work once every item\n"
     "of the current one was handed out (producers never idle; an epoch's\n"
     "last batches may hold items of the next one)",
     STOKER_CLI_FLAG, AT(broker.overlap_epochs)},
    {"group-ahead", "N", "steps a trainer group may form beyond its slowest rank", STOKER_CLI_UINT,
     AT(broker.group_steps_ahead), .imin = 1, .imax = 1024},
    {"autoscale-headroom", "X", "producers wanted = demand x X / one producer's rate",
     STOKER_CLI_NUMBER, AT(broker.autoscale_headroom), .dmin = 1.0, .dmax = 100},
    {"autoscale-min", "N", "fewest producers a pool is said to want", STOKER_CLI_UINT,
     AT(broker.autoscale_min), .imin = 0, .imax = 100000},
    {"autoscale-max", "N", "most producers a pool is said to want", STOKER_CLI_UINT,
     AT(broker.autoscale_max), .imin = 1, .imax = 100000},
};

// What the table cannot say: --listen is required, and --tls-* go with tls+tcp:// listeners.
static int
check(const stoker_cli *cli, const server_config *cfg)
{
    char err[512];
    int any_tls = 0;
    if (stoker_cli_require(cli, "listen", NULL) != 0)
        return 2;
    if (cfg->broker.autoscale_min > cfg->broker.autoscale_max)
        return stoker_cli_fail(cli, "--autoscale-min %u is above --autoscale-max %u",
                               cfg->broker.autoscale_min, cfg->broker.autoscale_max);
    for (uint32_t i = 0; i < cfg->n_listen; i++) {
        if (stoker_cli_check_url(cli, "listen", cfg->listen[i]) != 0)
            return 2;
        any_tls |= stoker_tls_url(cfg->listen[i]);
    }
    if (any_tls && stoker_tls_check(&cfg->tls, 1, err, sizeof(err)) != STOKER_OK)
        return stoker_cli_fail(cli, "%s", err);
    if (!any_tls && (cfg->tls.cert || cfg->tls.key || cfg->tls.ca))
        return stoker_cli_fail(cli, "--tls-* options need a tls+tcp:// --listen URL");
    if (cfg->broker.strict_epochs && cfg->broker.overlap_epochs)
        return stoker_cli_fail(cli, "--strict-epochs and --overlap-epochs: choose one");
    if (cfg->broker.job_policy == JOB_POLICY_DETACH &&
        (cfg->broker.dataset_size > 0 || cfg->broker.dataset_auto))
        return stoker_cli_fail(cli, "--job-policy detach is for streams: a dataset's lagging job "
                                    "is served by --job-policy remake (its items made again by "
                                    "index) or waited for (wait)");
    if (cfg->broker.job_policy == JOB_POLICY_REMAKE && cfg->broker.dataset_size == 0 &&
        !cfg->broker.dataset_auto)
        return stoker_cli_fail(cli, "--job-policy remake needs a dataset (--dataset-size): a "
                                    "stream's examples cannot be made again by index; use "
                                    "detach or wait");
    return -1;
}

int
main(int argc, char **argv)
{
    stoker_process_init();
    server_config cfg;
    config_init(&cfg);
    stoker_cli cli;
    stoker_cli_init(&cli, "stoker-broker", "--listen URL [--listen URL ...] [options]",
                    "Keeps one bounded queue per producer and hands batches to trainers with\n"
                    "acknowledged delivery.",
                    STOKER_LOG_INFO);
    stoker_cli_add(&cli, NULL, STOKER_CLI_ROWS(rows), &cfg);
    int code = stoker_cli_parse(&cli, argc, argv);
    if (code >= 0 || (code = check(&cli, &cfg)) >= 0)
        return code;
    stoker_log_init("broker", cli.log_level);
    stoker_process_on_stop(on_signal);

    server *srv;
    char err[512];
    int rv = server_start(&cfg, &srv, err, sizeof(err));
    if (rv != STOKER_OK) {
        // A URL nng refuses or an address already in use is the command line's fault: exit 2.
        stoker_error("cannot start: %s", err);
        return rv == STOKER_INVALID ? 2 : 1;
    }
    stoker_info("started: queue depth %s%u, producer timeout %.1f s, trainer timeout %.1f s",
                cfg.broker.queue_depth_auto ? "auto, at least " : "", cfg.broker.queue_depth,
                cfg.broker.producer_timeout_ms / 1000.0, cfg.broker.trainer_timeout_ms / 1000.0);
    while (!stop_signal)
        stoker_sleep_ms(50, NULL);
    stoker_info("stopping: %s", stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
    pthread_t watch;
    if (pthread_create(&watch, NULL, stop_watch, NULL) == 0)
        pthread_detach(watch);
    server_stop(srv);
    stoker_info("stopped");
    return 0;
}
