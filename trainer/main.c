// stoker-trainer: parses the option table, installs the signal handlers, runs the training
// loop (train.c) and writes the JSON summary. Exit codes: 0 completed or time goal, 3 data
// supply ended, 4 stalled, 5 group broken, 6 broker lost, 130 interrupted, 1 other errors,
// 2 usage.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "safetensors.h"
#include "stoker/cli.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/opts.h"
#include "stoker/process.h"
#include "train.h"

static volatile int stop_requested;

static void
on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

// Everything the command line sets: the training loop's config, the shared client flags
// (copied into it after parsing) and the output choices.
typedef struct trainer_options {
    train_config train;
    stoker_client_options client;
    const char *json_path;
    const char *progress;    // auto | on | off
    const char *resume_path; // --resume: loaded into train.resume before training
    const char *adopt_paths; // --resume-also: comma-separated, adopted into train.resume
    const char *mix_spec;    // --mix, parsed into train.mix by check
    const char *mix_stop;    // --mix-stop
    const char *mix_schedule, *mix_blend; // --mix-schedule, --mix-blend
} trainer_options;

static int
parse_hidden(const char *s, void *base, char *err, size_t err_len)
{
    train_config *cfg = &((trainer_options *)base)->train;
    (void)err;
    (void)err_len;
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

static void
show_hidden(const void *base, char *buf, size_t len)
{
    const train_config *cfg = &((const trainer_options *)base)->train;
    size_t at = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < cfg->n_hidden && at < len; i++)
        at += snprintf(buf + at, len - at, "%s%u", i ? "," : "", cfg->hidden[i]);
}

static const char *const devices[] = {"auto", "cpu", "gpu", NULL};
static const char *const progresses[] = {"auto", "on", "off", NULL};

#define AT(member) STOKER_CLI_AT(trainer_options, member)
static const stoker_cli_option rows[] = {
    {"inline", NULL, "generate synthetic batches in the loop (the baseline)", STOKER_CLI_FLAG,
     AT(train.inline_mode)},
    {"delay", "MIN:MAX", "inline generation cost per example", STOKER_CLI_RANGE,
     AT(train.delay_min_s), .offset2 = offsetof(trainer_options, train.delay_max_s), .dmax = 3600},
    {"batch-size", "N", "examples per step", STOKER_CLI_UINT, AT(train.batch_size), .imin = 1,
     .imax = 1u << 20},
    {"round-length", "N", "examples per round", STOKER_CLI_UINT, AT(train.round_length), .imin = 1,
     .imax = 1u << 30},
    {"rounds", "N", "rounds to train", STOKER_CLI_UINT, AT(train.rounds), .imin = 1,
     .imax = 1u << 30},
    {"epochs", "E",
     "stop after E epochs of the broker's dataset;\n"
     "--rounds is then ignored",
     STOKER_CLI_UINT, AT(train.epochs), .imin = 1, .imax = UINT32_MAX},
    {"time-goal", "SEC", "stop after this long (default: none)", STOKER_CLI_NUMBER,
     AT(train.time_goal_s), .dmin = 0.001, .dmax = 1e7, .expect = "expected seconds > 0"},
    {"device", "D", "auto, cpu or gpu", STOKER_CLI_CHOICE, AT(train.device), .choices = devices},
    {"hidden", "N[,N...]", "hidden layer widths", STOKER_CLI_CUSTOM, AT(train.hidden),
     .expect = "expected widths like 16 or 64,32 (1..65536)", .parse = parse_hidden,
     .show = show_hidden},
    {"lr", "X", "Adam learning rate", STOKER_CLI_NUMBER, AT(train.lr), .dmin = 1e-12, .dmax = 10,
     .expect = "expected a learning rate in (0, 10]"},
    {"seed", "N", "weight initialisation seed", STOKER_CLI_UINT, AT(train.seed),
     .imax = UINT64_MAX},
    {"stall-timeout", "SEC", "stop when no batch arrives for this long", STOKER_CLI_SECONDS_MS,
     AT(train.stall_timeout_ms), .dmin = 0.05, .dmax = 86400},
    {"input", "NAME", "input field", STOKER_CLI_STRING, AT(train.input_field)},
    {"target", "NAME", "target field", STOKER_CLI_STRING, AT(train.target_field)},
    {"classes", "N",
     "the target is an int32 or int64 class label in [0, N): softmax\n"
     "cross-entropy (default: float target, MSE)",
     STOKER_CLI_UINT, AT(train.classes), .imin = 2, .imax = MLP_MAX_WIDTH},
    {"prefetch", "N", "pull requests in flight", STOKER_CLI_UINT, AT(train.prefetch), .imin = 1,
     .imax = 64},
    {"group", "NAME",
     "train as one rank of this data-parallel group (see --rank,\n"
     "--world): equal steps, one common end",
     STOKER_CLI_STRING, AT(train.group)},
    {"rank", "N", "this rank in the group (0..world-1)", STOKER_CLI_UINT, AT(train.rank), .imin = 0,
     .imax = 65535},
    {"world", "N", "ranks in the group", STOKER_CLI_UINT, AT(train.world), .imin = 1,
     .imax = 65536},
    {"job", "NAME",
     "the training job this trainer belongs to (docs/sharing.md):\n"
     "jobs share the broker's producers, each gets every example\n"
     "once (default: the default job; every rank of a group the same)",
     STOKER_CLI_STRING, AT(train.job), .imin = 1, .imax = STOKER_NAME_MAX - 1},
    {"mix", "POOL=W,...",
     "a mixture of sources: every batch holds each pool's share of\n"
     "weight W, exactly (e.g. code=0.3,web=0.7)",
     STOKER_CLI_STRING, AT(mix_spec)},
    {"mix-stop", "first|all",
     "with --mix, when a pool runs dry: end (first, the default) or\n"
     "go on re-weighted until every pool ran dry (all)",
     STOKER_CLI_STRING, AT(mix_stop)},
    {"mix-schedule", "POINTS",
     "with --mix, weights that change: from batch STEP on those weights\n"
     "(e.g. 1000:code=0.5,web=0.5;5000:code=0.7,web=0.3)",
     STOKER_CLI_STRING, AT(mix_schedule)},
    {"mix-blend", "step|linear",
     "with --mix-schedule: a point's weights hold until the next (step,\n"
     "the default) or blend from point to point (linear)",
     STOKER_CLI_STRING, AT(mix_blend)},
    {"weights", "PATH", "save the weights there as safetensors when stopping", STOKER_CLI_STRING,
     AT(train.weights_path)},
    {"checkpoint", "PATH",
     "every --checkpoint-every rounds and at the end, save weights, Adam\n"
     "state and position there (safetensors, atomically); batches count\n"
     "as trained at the broker only once a checkpoint holds them",
     STOKER_CLI_STRING, AT(train.checkpoint_path)},
    {"checkpoint-every", "N",
     "rounds between checkpoints (a rank of a --group: N rounds' worth of steps, so that every "
     "rank checkpoints and commits at the same step)",
     STOKER_CLI_UINT, AT(train.checkpoint_every), .imin = 1, .imax = 1u << 30},
    {"resume", "PATH", "continue from this checkpoint: weights, Adam state, position",
     STOKER_CLI_STRING, AT(resume_path)},
    {"resume-also", "PATH[,PATH...]",
     "with --resume: checkpoints of ranks this run does not resume (a\n"
     "group resumed at fewer ranks); what they trained and had not\n"
     "committed is reported as trained and kept in this rank's checkpoints",
     STOKER_CLI_STRING, AT(adopt_paths)},
    {"identity-log", "PATH",
     "append the identities of the examples trained to PATH, a line\n"
     "'SESSION FIRST_SEQ COUNT' per run (SESSION in hex); of a\n"
     "dataset, 'SESSION SEQ 1 EPOCH INDEX' per example",
     STOKER_CLI_STRING, AT(train.identity_log_path)},
    {"json", "PATH|-", "write the summary as JSON (- for stdout)", STOKER_CLI_STRING,
     AT(json_path)},
    {"progress", "auto|on|off", "live status line (auto: when stderr is a terminal)",
     STOKER_CLI_CHOICE, AT(progress), .choices = progresses},
};

// What the table cannot say: which flags go with --broker and which with --inline; the
// mixture parsed (--mix, --mix-stop) into o->train.mix.
static int
check(const stoker_cli *cli, trainer_options *o)
{
    train_config *cfg = &o->train;
    if (stoker_cli_one_of(cli, "broker", "inline") != 0 ||
        stoker_cli_exclude(cli, "broker", "delay",
                           "--delay applies to --inline only (producers set their own)") != 0 ||
        stoker_cli_exclude(cli, "inline", "token-file", "--token-file applies to --broker only") !=
            0 ||
        stoker_cli_check_tls(cli, &o->client) != 0 ||
        stoker_cli_exclude(cli, "inline", "group", "--group applies to --broker only") != 0 ||
        stoker_cli_exclude(cli, "inline", "job", "--job applies to --broker only") != 0 ||
        stoker_cli_exclude(cli, "inline", "identity-log",
                           "--identity-log applies to --broker only") != 0)
        return 2;
    char why[256];
    stoker_mix *mix = &cfg->mix;
    if (stoker_mix_stop_parse(o->mix_stop, &mix->stop, why, sizeof(why)) != STOKER_OK ||
        stoker_mix_parse(o->mix_spec, mix, why, sizeof(why)) != STOKER_OK ||
        stoker_mix_blend_parse(o->mix_blend, &mix->blend, why, sizeof(why)) != STOKER_OK ||
        stoker_mix_schedule_parse(o->mix_schedule, mix, why, sizeof(why)) != STOKER_OK)
        return stoker_cli_fail(cli, "--%s", why);
    if (mix->n == 0 && o->mix_stop != NULL)
        return stoker_cli_fail(cli, "--mix-stop goes with --mix (the pools and weights)");
    if (mix->n > 0 && cfg->inline_mode)
        return stoker_cli_fail(cli, "--mix applies to --broker only");
    if (o->adopt_paths != NULL && o->resume_path == NULL)
        return stoker_cli_fail(cli, "--resume-also goes with --resume PATH (this rank's own "
                                    "checkpoint, or rank 0's for a rank new to the group)");
    if (stoker_cli_given(cli, "checkpoint-every") && cfg->checkpoint_path == NULL)
        return stoker_cli_fail(cli, "--checkpoint-every goes with --checkpoint PATH");
    if (cfg->group == NULL && (stoker_cli_given(cli, "rank") || stoker_cli_given(cli, "world")))
        return stoker_cli_fail(cli, "--rank and --world go with --group");
    if (cfg->group != NULL && (!stoker_cli_given(cli, "rank") || !stoker_cli_given(cli, "world")))
        return stoker_cli_fail(cli, "--group needs --rank and --world");
    if (cfg->group != NULL && cfg->rank >= cfg->world)
        return stoker_cli_fail(cli, "--rank %u is outside the world size %u (ranks are 0..%u)",
                               cfg->rank, cfg->world, cfg->world - 1);
    if (cfg->inline_mode && (strcmp(cfg->input_field, "input") != 0 ||
                             strcmp(cfg->target_field, "output") != 0 || cfg->classes > 0))
        return stoker_cli_fail(cli, "--inline trains on the synthetic schema "
                                    "input:float32[10],output:float32[1] only");
    return -1;
}

// Adopts into resume the pending identities of each checkpoint in the comma-separated list paths
// (--resume-also). STOKER_OK, or STOKER_INVALID after saying which file failed and why.
static int
adopt(const stoker_cli *cli, checkpoint *resume, const char *paths)
{
    const char *p = paths;
    for (;;) {
        size_t len = strcspn(p, ",");
        char path[512], err[512];
        if (len == 0 || len >= sizeof(path)) {
            stoker_cli_fail(cli, "--resume-also '%s': %s", paths,
                            len == 0 ? "an empty path in the list" : "a path is too long");
            return STOKER_INVALID;
        }
        memcpy(path, p, len);
        path[len] = '\0';
        checkpoint *other = NULL;
        if (checkpoint_load(path, &other, err, sizeof(err)) != STOKER_OK ||
            checkpoint_adopt(resume, other, err, sizeof(err)) != STOKER_OK) {
            checkpoint_destroy(other);
            stoker_cli_fail(cli, "--resume-also: %s", err);
            return STOKER_INVALID;
        }
        checkpoint_destroy(other);
        if (p[len] == '\0')
            return STOKER_OK;
        p += len + 1;
    }
}

// Trains, logs how it ended and writes the JSON summary to json (closed unless stdout; may be
// NULL): the exit code.
static int
train_and_report(const train_config *cfg, FILE *json)
{
    train_result *res = malloc(sizeof(*res));
    if (res == NULL) {
        fprintf(stderr, "stoker-trainer: out of memory\n");
        return 1;
    }
    int code = train_run(cfg, res);
    if (res->delivery != NULL) // a broker's batches: which path they took (docs/shm.md)
        stoker_info("delivery %s: %llu batches through shared memory, %llu over the socket (%llu "
                    "of them because the arena was full)",
                    res->delivery, (unsigned long long)res->batches_shm,
                    (unsigned long long)res->batches_socket,
                    (unsigned long long)res->batches_arena_full);
    if (code == 0)
        stoker_info("%s: %s; %llu examples in %.2f s (%.1f/s), final loss %.5f, data wait "
                    "%.1f%%",
                    train_status_name(res->status), res->reason, (unsigned long long)res->examples,
                    res->seconds, res->examples_per_second, res->final_loss,
                    100 * res->data_wait_fraction);
    else
        stoker_error("%s: %s (after %llu examples in %.2f s)", train_status_name(res->status),
                     res->reason, (unsigned long long)res->examples, res->seconds);
    if (res->has_resumed)
        stoker_info("resumed from round %llu (%llu examples, %llu batches); %llu rounds and "
                    "%llu examples in this run",
                    (unsigned long long)res->resumed_rounds,
                    (unsigned long long)res->resumed_examples,
                    (unsigned long long)res->resumed_batches,
                    (unsigned long long)(res->rounds - res->resumed_rounds),
                    (unsigned long long)(res->examples - res->resumed_examples));
    if (res->checkpointing)
        stoker_info("checkpoints: %llu written to %s (%llu commits failed)",
                    (unsigned long long)res->checkpoints, cfg->checkpoint_path,
                    (unsigned long long)res->commits_failed);
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

int
main(int argc, char **argv)
{
    stoker_process_init();
    trainer_options o = {.progress = "auto"};
    train_config_init(&o.train);
    stoker_client_options_init(&o.client);
    stoker_cli cli;
    stoker_cli_init(&cli, "stoker-trainer",
                    "(--broker URL [--token-file F] | --inline [--delay MIN:MAX])\n"
                    "                      [options]",
                    "Trains an MLP with Adam on batches pulled from a stoker broker (or generated "
                    "inline,\nthe baseline), on the GPU when one is usable.",
                    STOKER_LOG_INFO);
    cli.epilog = "Exit codes: 0 completed or time goal, 3 data supply ended, 4 stalled,\n"
                 "5 group broken, 6 the broker went away, 130 interrupted, 1 error, 2 usage.";
    stoker_cli_add(&cli, NULL, STOKER_CLI_ROWS(stoker_cli_broker_rows), &o.client);
    stoker_cli_add(&cli, NULL, STOKER_CLI_ROWS(stoker_cli_tls_rows), &o.client);
    stoker_cli_add(&cli, NULL, STOKER_CLI_ROWS(rows), &o);
    int code = stoker_cli_parse(&cli, argc, argv);
    if (code >= 0 || (code = check(&cli, &o)) >= 0)
        return code;
    o.train.broker_url = o.client.url;
    o.train.token = o.client.token;
    o.train.tls = o.client.tls;
    o.train.progress =
        strcmp(o.progress, "on") == 0 || (strcmp(o.progress, "auto") == 0 && isatty(STDERR_FILENO));
    checkpoint *resume = NULL;
    if (o.resume_path != NULL) {
        char err[512];
        if (checkpoint_load(o.resume_path, &resume, err, sizeof(err)) != STOKER_OK)
            return stoker_cli_fail(&cli, "--resume: %s", err);
        if (checkpoint_check_options(resume, o.train.hidden, o.train.n_hidden, o.train.classes, err,
                                     sizeof(err)) != STOKER_OK) {
            checkpoint_destroy(resume);
            return stoker_cli_fail(&cli, "%s", err);
        }
        if (o.adopt_paths != NULL && adopt(&cli, resume, o.adopt_paths) != STOKER_OK) {
            checkpoint_destroy(resume);
            return 2;
        }
        o.train.resume = resume;
    }
    FILE *json = NULL;
    if (o.json_path != NULL &&
        (json = strcmp(o.json_path, "-") == 0 ? stdout : fopen(o.json_path, "w")) == NULL) {
        checkpoint_destroy(resume);
        return stoker_cli_fail(&cli, "--json '%s': cannot open for writing", o.json_path);
    }
    stoker_log_init("trainer", cli.log_level);
    // A trainer SIGKILLed while writing leaves its temporary file: this run writes the same paths.
    const char *outputs[] = {o.train.checkpoint_path, o.train.weights_path};
    for (size_t i = 0; i < sizeof(outputs) / sizeof(outputs[0]); i++) {
        unsigned stale = outputs[i] != NULL ? safetensors_remove_stale(outputs[i]) : 0;
        if (stale > 0)
            stoker_info("removed %u temporary file(s) beside %s that an earlier run killed while "
                        "writing left behind",
                        stale, outputs[i]);
    }
    stoker_process_on_stop(on_signal);
    o.train.stop = &stop_requested;
    code = train_and_report(&o.train, json);
    checkpoint_destroy(resume);
    return code;
}
