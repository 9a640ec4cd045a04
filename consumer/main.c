// stoker-pull: a command-line consumer for any language. Pulls batches from a broker and writes
// them to stdout as text lines or raw records (pull.h), acknowledging each batch only once it is
// written and flushed; what it never wrote is redelivered by the broker to other consumers.
// Exit codes as the trainer's: 0 done (--max-examples reached), 3 data supply ended, 4 stalled,
// 5 group broken (--group: another rank was lost), 6 the broker went away (it does not answer),
// 130 interrupted, 1 other errors (stdout closed, broker refused), 2 usage.
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "pull.h"
#include "stoker/batching.h"
#include "stoker/cli.h"
#include "stoker/consumer.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/mix.h"
#include "stoker/process.h"
#include "stoker/protocol.h"

static stoker_consumer *volatile running;

// "s" unless n is 1: "1 example", "2 examples".
static const char *
plural(unsigned long long n)
{
    return n == 1 ? "" : "s";
}

static void
on_signal(int sig)
{
    (void)sig;
    stoker_consumer *c = running;
    if (c != NULL)
        stoker_consumer_interrupt(c);
}

// Everything the command line sets; --broker and --token-file go through client.
typedef struct pull_options {
    stoker_consumer_options consumer;
    stoker_client_options client;
    int format; // pull_format
    uint64_t max_examples;
    int schema_only;
    const char *group; // --group: a rank of this data-parallel group
    uint32_t rank, world;
} pull_options;

static void
options_init(pull_options *o)
{
    *o = (pull_options){.format = PULL_TEXT, .max_examples = UINT64_MAX};
    stoker_consumer_options_init(&o->consumer);
    o->consumer.batch_size = 16; // stoker-pull's own default: a pipe wants larger batches
    stoker_client_options_init(&o->client);
}

static const char *const formats[] = {"text", "raw", NULL}; // by pull_format
_Static_assert(PULL_TEXT == 0 && PULL_RAW == 1, "formats[] is indexed by pull_format");

#define AT(member) STOKER_CLI_AT(pull_options, member)
static const stoker_cli_option rows[] = {
    {"format", "text|raw", "output format", STOKER_CLI_ENUM, AT(format), .choices = formats},
    {"batch-size", "N", "examples per pull", STOKER_CLI_UINT, AT(consumer.batch_size), .imin = 1,
     .imax = 1u << 20},
    {"max-tokens", "T",
     "variable-length schema: batches of as many sequences as fit\n"
     "in T padded tokens (--batch-size then caps the sequences)",
     STOKER_CLI_UINT, AT(consumer.max_tokens), .imin = 1, .imax = UINT32_MAX},
    {"buckets", NULL, "variable-length schema: batches of sequences of similar length",
     STOKER_CLI_FLAG, AT(consumer.buckets)},
    {"pack", "L",
     "variable-length schema: batches of --batch-size rows of L\n"
     "tokens, filled with whole sequences",
     STOKER_CLI_UINT, AT(consumer.pack), .imin = 1, .imax = UINT32_MAX},
    {"pack-whole", NULL, "with --pack: no sequence split across rows (next-fit)", STOKER_CLI_FLAG,
     AT(consumer.pack_whole)},
    {"job", "NAME",
     "the training job this consumer belongs to (docs/sharing.md):\n"
     "jobs share the broker's producers, each gets every example\n"
     "once (default: the default job; every rank of a group the same)",
     STOKER_CLI_STRING, AT(consumer.job), .imin = 1, .imax = STOKER_NAME_MAX - 1},
    {"mix", "POOL=W,...",
     "a mixture of sources: every batch holds each pool's share\n"
     "of weight W, exactly (e.g. code=0.3,web=0.7; docs/mixing.md)",
     STOKER_CLI_STRING, AT(consumer.mix)},
    {"mix-stop", "first|all",
     "with --mix, when a pool runs dry: end (first, the default)\n"
     "or go on re-weighted until every pool ran dry (all)",
     STOKER_CLI_STRING, AT(consumer.mix_stop)},
    {"mix-schedule", "POINTS",
     "with --mix, weights that change: from batch STEP on those\n"
     "weights (e.g. 1000:code=0.5,web=0.5;5000:code=0.7,web=0.3)",
     STOKER_CLI_STRING, AT(consumer.mix_schedule)},
    {"mix-blend", "step|linear",
     "with --mix-schedule: a point's weights hold until the next\n"
     "(step, the default) or blend from point to point (linear)",
     STOKER_CLI_STRING, AT(consumer.mix_blend)},
    {"max-examples", "N",
     "stop after writing exactly N examples (default: until the\n"
     "supply ends)",
     STOKER_CLI_UINT, AT(max_examples), .imin = 1, .imax = UINT64_MAX},
    {"stall-timeout", "SEC", "stop when no batch arrives for this long", STOKER_CLI_SECONDS_MS,
     AT(consumer.stall_timeout_ms), .dmin = 0.05, .dmax = 86400},
    {"prefetch", "N", "pull requests in flight", STOKER_CLI_UINT, AT(consumer.prefetch), .imin = 1,
     .imax = 64},
    {"schema", NULL, "print the broker's schema to stdout and exit", STOKER_CLI_FLAG,
     AT(schema_only)},
    {"group", "NAME",
     "pull as one rank of this data-parallel group (equal steps,\n"
     "one common end; see --rank, --world)",
     STOKER_CLI_STRING, AT(group)},
    {"rank", "N", "this rank in the group (0..world-1)", STOKER_CLI_UINT, AT(rank), .imin = 0,
     .imax = 65535},
    {"world", "N", "ranks in the group", STOKER_CLI_UINT, AT(world), .imin = 1, .imax = 65536},
};

static const char *group_name; // --group, for open_consumer
static uint32_t group_rank, group_world;

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
        else if (kind == STOKER_EVENT_SCALED)
            stoker_info("scaled: pool '%s' %s", name, reason);
        else
            stoker_info("producer %u '%s': %s", producer, name,
                        stoker_event_kind_name((stoker_event_kind)kind));
    }
}

// Opens the consumer (again, for a new batch size): 0, or the exit code.
static int
open_consumer(const stoker_consumer_options *o, stoker_consumer **c, const char *what)
{
    char err[512];
    int rv = group_name != NULL ? stoker_consumer_open_group(o, group_name, group_rank, group_world,
                                                             c, err, sizeof(err))
                                : stoker_consumer_open(o, c, err, sizeof(err));
    if (rv == STOKER_OK) {
        running = *c;
        return 0;
    }
    fprintf(stderr, "stoker-pull: %s %s: %s\n", what, o->url, err);
    return rv == STOKER_INVALID ? 2 : rv == STOKER_STALLED || rv == STOKER_CONNECTION ? 4 : 1;
}

static int
print_schema(stoker_consumer *c)
{
    char spec[2048];
    stoker_consumer_schema(c, spec, sizeof(spec));
    printf("%s\n", spec);
    running = NULL;
    stoker_consumer_close(c);
    return 0;
}

// How the batches came, over every connection of the run: the summary line says it.
typedef struct delivery_totals {
    uint64_t shm, socket, arena_full;
    const char *path; // the latest connection's: "shm" or "socket"
} delivery_totals;

static void
count_delivery(const stoker_consumer *c, delivery_totals *t)
{
    uint64_t shm, socket, arena_full;
    stoker_consumer_delivery_counts(c, &shm, &socket, &arena_full);
    t->shm += shm;
    t->socket += socket;
    t->arena_full += arena_full;
    if (shm + socket > 0)
        t->path = stoker_consumer_delivery(c);
}

// After a stall: whether the broker is gone (it does not answer a Status request) rather than
// having nothing to give; bounded by the client's request timeout.
static int
broker_gone(stoker_consumer *c)
{
    char buf[4096];
    size_t len = 0;
    int rv = stoker_consumer_status_json(c, buf, sizeof(buf), &len);
    return rv == STOKER_TIMEOUT || rv == STOKER_CONNECTION || rv == STOKER_UNKNOWN_PEER;
}

// Writes batches until max_examples or the supply ends: the exit code.
static int
pull_loop(stoker_consumer *c, stoker_consumer_options *o, uint64_t max_examples, pull_format format)
{
    int rv;
    uint64_t written = 0;
    int code = 0;
    delivery_totals dt = {.path = "socket"};
    while (written < max_examples) {
        if (max_examples - written < o->batch_size) {
            // Leases are acknowledged whole: for an exact count, ask for exactly what is left
            // (a new connection; batches prefetched by this one go back to the broker).
            count_delivery(c, &dt);
            stoker_consumer_close(c);
            running = NULL;
            o->batch_size = (uint32_t)(max_examples - written);
            if ((rv = open_consumer(o, &c, "cannot reconnect to")) != 0)
                return rv == 2 ? 1 : rv;
        }
        stoker_consumer_batch *b;
        rv = stoker_consumer_next(c, &b);
        print_events(c);
        if (rv == STOKER_STALLED && broker_gone(c)) {
            fprintf(stderr,
                    "stoker-pull: the broker went away: %s does not answer and no batch came "
                    "within the stall timeout: start the broker again, then stoker-pull (after "
                    "%llu example%s)\n",
                    o->url, (unsigned long long)written, plural(written));
            code = 6;
            break;
        }
        if (rv != STOKER_OK) {
            code = rv == STOKER_NO_PRODUCERS || rv == STOKER_END_OF_DATA ? 3
                   : rv == STOKER_STALLED                                ? 4
                   : rv == STOKER_GROUP_BROKEN                           ? 5
                   : rv == STOKER_INTERRUPTED                            ? 130
                                                                         : 1;
            // The consumer's error is the reason alone: what happened is said here, once.
            const char *what = code == 3 ? "data supply ended: " : code == 4 ? "stalled: " : "";
            fprintf(stderr, "stoker-pull: %s%s (after %llu example%s)\n", what,
                    stoker_consumer_error(c), (unsigned long long)written, plural(written));
            break;
        }
        uint32_t n = stoker_consumer_batch_count(b);
        uint32_t take = max_examples - written < n ? (uint32_t)(max_examples - written) : n;
        if ((rv = pull_write(stdout, format, b, take)) != STOKER_OK) {
            // Not acknowledged: the broker redelivers the whole batch to another consumer.
            fprintf(stderr, "stoker-pull: writing stdout: %s (after %llu example%s)\n",
                    rv == STOKER_IO ? strerror(errno) : stoker_strerror(rv),
                    (unsigned long long)written, plural(written));
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
    count_delivery(c, &dt);
    stoker_consumer_close(c);
    // The summary (docs/shm.md): which path the batches took; --log-level error hides it.
    if (stoker_log_get_level() >= STOKER_LOG_WARN)
        fprintf(stderr,
                "stoker-pull: %llu example%s written; delivery %s: %llu batch%s through shared "
                "memory, %llu over the socket (%llu of them because the arena was full)\n",
                (unsigned long long)written, plural(written), dt.path, (unsigned long long)dt.shm,
                dt.shm == 1 ? "" : "es", (unsigned long long)dt.socket,
                (unsigned long long)dt.arena_full);
    return code;
}

int
main(int argc, char **argv)
{
    stoker_process_init();
    pull_options o;
    options_init(&o);
    stoker_cli cli;
    stoker_cli_init(&cli, "stoker-pull", "--broker URL [options]",
                    "Pulls batches from a stoker broker and writes their examples to stdout, one "
                    "example\nper line (all numbers of all fields in schema order, separated by "
                    "spaces) or as raw\nlittle-endian records; a variable-length value comes "
                    "after its length in rows\n(a number, or a uint32 in raw records). Each batch "
                    "is acknowledged once it is written.",
                    STOKER_LOG_WARN);
    cli.epilog = "Exit codes: 0 done, 3 data supply ended, 4 stalled, 5 group broken,\n"
                 "6 the broker went away, 130 interrupted, 1 error, 2 usage.";
    stoker_cli_add(&cli, NULL, STOKER_CLI_ROWS(stoker_cli_broker_rows), &o.client);
    stoker_cli_add(&cli, NULL, STOKER_CLI_ROWS(stoker_cli_tls_rows), &o.client);
    stoker_cli_add(&cli, NULL, STOKER_CLI_ROWS(rows), &o);
    int code = stoker_cli_parse(&cli, argc, argv);
    if (code >= 0 || (code = stoker_cli_require(&cli, "broker", NULL)) != 0 ||
        (code = stoker_cli_check_url(&cli, "broker", o.client.url)) != 0 ||
        (code = stoker_cli_check_tls(&cli, &o.client)) != 0)
        return code;
    if (o.group == NULL && (stoker_cli_given(&cli, "rank") || stoker_cli_given(&cli, "world")))
        return stoker_cli_fail(&cli, "--rank and --world go with --group");
    if (o.group != NULL) {
        if (!stoker_cli_given(&cli, "rank") || !stoker_cli_given(&cli, "world"))
            return stoker_cli_fail(&cli, "--group needs --rank and --world");
        if (o.rank >= o.world)
            return stoker_cli_fail(&cli,
                                   "--rank %u is outside the world size %u (ranks are "
                                   "0..%u)",
                                   o.rank, o.world, o.world - 1);
        if ((code = stoker_cli_exclude(&cli, "group", "max-examples",
                                       "every rank takes the group's steps to its end")) != 0)
            return code;
        group_name = o.group;
        group_rank = o.rank;
        group_world = o.world;
    }
    const char *by_tokens = o.consumer.max_tokens > 0 ? "max-tokens"
                            : o.consumer.pack > 0     ? "pack"
                            : o.consumer.buckets      ? "buckets"
                                                      : NULL;
    if (by_tokens != NULL && stoker_cli_given(&cli, "max-examples"))
        return stoker_cli_fail(&cli,
                               "--max-examples with --%s: batches made by tokens have no fixed "
                               "count to stop at exactly",
                               by_tokens);
    if (o.consumer.max_tokens > 0 && !stoker_cli_given(&cli, "batch-size"))
        o.consumer.batch_size = 0; // a token budget: no cap on the sequences but the broker's
    {
        stoker_batching bt = {.max_tokens = o.consumer.max_tokens,
                              .buckets = o.consumer.buckets,
                              .pack = o.consumer.pack,
                              .pack_whole = o.consumer.pack_whole};
        char why[256];
        if (stoker_batching_check(&bt, NULL, o.consumer.batch_size, why, sizeof(why)) != STOKER_OK)
            return stoker_cli_fail(&cli, "%s", why);
        stoker_mix mix = {0};
        if (stoker_mix_stop_parse(o.consumer.mix_stop, &mix.stop, why, sizeof(why)) != STOKER_OK ||
            stoker_mix_parse(o.consumer.mix, &mix, why, sizeof(why)) != STOKER_OK ||
            stoker_mix_blend_parse(o.consumer.mix_blend, &mix.blend, why, sizeof(why)) !=
                STOKER_OK ||
            stoker_mix_schedule_parse(o.consumer.mix_schedule, &mix, why, sizeof(why)) != STOKER_OK)
            return stoker_cli_fail(&cli, "--%s", why);
        if (mix.n == 0 && stoker_cli_given(&cli, "mix-stop"))
            return stoker_cli_fail(&cli, "--mix-stop without --mix (the pools and weights)");
    }
    o.consumer.url = o.client.url;
    o.consumer.token = o.client.token;
    o.consumer.tls_ca = o.client.tls.ca;
    o.consumer.tls_cert = o.client.tls.cert;
    o.consumer.tls_key = o.client.tls.key;
    o.consumer.tls_insecure = o.client.tls.insecure ? 1 : 0;
    stoker_log_init("pull", cli.log_level);
    stoker_process_on_stop(on_signal);

    stoker_consumer *c;
    if ((code = open_consumer(&o.consumer, &c, "cannot start pulling from")) != 0)
        return code;
    if (o.schema_only)
        return print_schema(c);
    return pull_loop(c, &o.consumer, o.max_examples, (pull_format)o.format);
}
