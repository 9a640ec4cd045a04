// stoker-producer: parses the option table, builds the chosen generator (synthetic, exec or
// images) and runs it with stoker_producer_run.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "augment.h"
#include "exec.h"
#include "images.h"
#include "stoker/cli.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/process.h"
#include "stoker/producer.h"
#include "stoker/synthetic.h"
#include "tokens.h"

// Everything the command line sets.
typedef struct producer_options {
    stoker_producer_config run;
    const char *generator; // synthetic | exec | images | tokens
    stoker_synthetic synth;
    const char *exec_cmd, *schema_spec;
    int format; // exec_format
    const char *images_dir;
    uint32_t height, width;
    int decode_each;
    int jpeg_full;           // --jpeg-draft off: JPEGs decoded at full size
    const char *augment;     // NULL: the default pipeline
    int output;              // images_output
    int layout;              // 0: chw, 1: hwc
    int label;               // images_label
    const char *label_map;   // write the label map (JSON) here
    uint64_t max_file_bytes; // --output encoded: the image field's bound (0: none)
    uint64_t measure;        // 0: push to a broker
    uint64_t items;          // synthetic, exec: serve a dataset of this many items (0: a stream)
    int dataset;             // images, tokens: serve the folder / the windows as a dataset
    const char *tokens_path;
    int shard_format; // tokens_format
    uint32_t window, stride;
    int token_dtype; // by token_dtypes[]
    const char *token_field;
    int split; // 0: windows, 1: documents
    uint32_t eot, max_doc;
    char name[64]; // the default name, host-pid
} producer_options;

static void
options_init(producer_options *o)
{
    *o = (producer_options){.generator = "synthetic",
                            .format = EXEC_TEXT,
                            .height = 64,
                            .width = 64,
                            .window = 1024,
                            .eot = 50256};
    stoker_producer_config_init(&o->run);
    o->run.seed = 1;
    o->run.handle_signals = 1;
    stoker_synthetic_init(&o->synth);
}

static const char *const generators[] = {"synthetic", "exec", "images", "tokens", NULL};
static const char *const shard_formats[] = {"auto", "llmc", "raw", NULL}; // by tokens_format
static const char *const token_dtypes[] = {"int32", "int64", "uint16", NULL};
static const char *const splits[] = {"windows", "documents", NULL};
static const stoker_dtype token_dtype_of[] = {STOKER_INT32, STOKER_INT64, STOKER_UINT16};
_Static_assert(TOKENS_AUTO == 0 && TOKENS_LLMC == 1 && TOKENS_RAW == 2,
               "shard_formats[] is indexed by tokens_format");
static const char *const formats[] = {"text", "raw", NULL}; // by exec_format
static const char *const decodes[] = {"once", "each", NULL};
static const char *const drafts[] = {"on", "off", NULL};
static const char *const outputs[] = {"float32", "uint8", "encoded", NULL}; // by images_output
static const char *const layouts[] = {"chw", "hwc", NULL};
static const char *const labels[] = {"int64", "int32", NULL}; // by images_label
_Static_assert(IMAGES_FLOAT32 == 0 && IMAGES_UINT8 == 1 && IMAGES_ENCODED == 2,
               "outputs[] is indexed by images_output");
_Static_assert(IMAGES_LABEL_INT64 == 0 && IMAGES_LABEL_INT32 == 1, "labels[] by images_label");

#define MIN_SIDE 8
#define MAX_SIDE 1024

// --size N (square) or HxW.
static int
parse_size(const char *value, void *base, char *err, size_t err_len)
{
    producer_options *o = base;
    char *end;
    unsigned long h = strtoul(value, &end, 10), w = h;
    if (end != value && (*end == 'x' || *end == 'X')) {
        const char *rest = end + 1;
        w = strtoul(rest, &end, 10);
        if (end == rest)
            end = (char *)value; // reject below
    }
    if (end == value || *end != '\0' || value[0] == '-' || h < MIN_SIDE || h > MAX_SIDE ||
        w < MIN_SIDE || w > MAX_SIDE) {
        snprintf(err, err_len, "expected N or HxW, each side %d..%d (e.g. 64 or 48x64)", MIN_SIDE,
                 MAX_SIDE);
        return 1;
    }
    o->height = (uint32_t)h;
    o->width = (uint32_t)w;
    return 0;
}

static void
show_size(const void *base, char *buf, size_t len)
{
    const producer_options *o = base;
    if (o->height == o->width)
        snprintf(buf, len, "%u", o->height);
    else
        snprintf(buf, len, "%ux%u", o->height, o->width);
}
_Static_assert(EXEC_TEXT == 0 && EXEC_RAW == 1, "formats[] is indexed by exec_format");

static const char *const workloads[] = {"reference", "tokens",
                                        NULL}; // by stoker_synthetic_workload
_Static_assert(STOKER_SYNTHETIC_REFERENCE == 0 && STOKER_SYNTHETIC_TOKENS == 1,
               "workloads[] is indexed by stoker_synthetic_workload");

// --lengths fixed:N | uniform:MIN:MAX | lognormal:MEAN:CAP[:SIGMA]
static int
parse_lengths(const char *value, void *base, char *err, size_t err_len)
{
    producer_options *o = base;
    return stoker_synthetic_parse_lengths(value, &o->synth, err, err_len) == STOKER_OK ? 0 : 1;
}

static void
show_lengths(const void *base, char *buf, size_t len)
{
    const stoker_synthetic *s = &((const producer_options *)base)->synth;
    if (s->lengths == STOKER_LENGTHS_FIXED)
        snprintf(buf, len, "fixed:%g", s->len_a);
    else if (s->lengths == STOKER_LENGTHS_UNIFORM)
        snprintf(buf, len, "uniform:%g:%g", s->len_a, s->len_b);
    else
        snprintf(buf, len, "lognormal:%g:%g:%g", s->len_a, s->len_b, s->len_c);
}

// --chunk N fixes the examples per push; auto (the default) sizes chunks by bytes and time.
static int
parse_chunk(const char *value, void *base, char *err, size_t err_len)
{
    producer_options *o = base;
    if (strcmp(value, "auto") == 0) {
        o->run.chunk = STOKER_CHUNK_AUTO;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long n = strtoull(value, &end, 10);
    if (errno != 0 || end == value || *end != '\0' || value[0] == '-' || n < 1 ||
        n > STOKER_CHUNK_MAX) {
        snprintf(err, err_len, "expected a number of examples in 1..%u, or auto", STOKER_CHUNK_MAX);
        return 1;
    }
    o->run.chunk = (uint32_t)n;
    return 0;
}

static void
show_chunk(const void *base, char *buf, size_t len)
{
    const producer_options *o = base;
    if (o->run.chunk == STOKER_CHUNK_AUTO)
        snprintf(buf, len, "auto");
    else
        snprintf(buf, len, "%u", o->run.chunk);
}

#define AT(member) STOKER_CLI_AT(producer_options, member)
static const stoker_cli_option rows[] = {
    {"generator", "KIND", "synthetic, exec, images or tokens", STOKER_CLI_CHOICE, AT(generator),
     .choices = generators},
    {"name", "S", "name shown in events and status (default: host-pid)", STOKER_CLI_STRING,
     AT(run.client.name), .imin = 1, .imax = 63},
    {"pool", "NAME",
     "the pool this producer counts in for the broker's\nautoscale signal (default: default)",
     STOKER_CLI_STRING, AT(run.client.pool), .imin = 1, .imax = 63},
    {"chunk", "N|auto",
     "examples per push: N fixes the count; auto closes a chunk at\n"
     "--chunk-bytes or --chunk-ms, whichever first (and within what\n"
     "the broker takes in one push)",
     STOKER_CLI_CUSTOM, AT(run.chunk), .parse = parse_chunk, .show = show_chunk,
     .expect = "expected a number of examples in 1..1048576, or auto"},
    {"chunk-bytes", "B",
     "with --chunk auto: close a chunk once its examples hold B\n"
     "bytes (at least one example per chunk)",
     STOKER_CLI_BYTES, AT(run.chunk_bytes), .imin = 1, .imax = 1ull << 30},
    {"chunk-batch-bytes", "B",
     "with --chunk auto: when the trainers' batch holds more than\n"
     "--chunk-bytes, a chunk holds one batch, or an equal share of\n"
     "one, within B bytes (0: --chunk-bytes alone)",
     STOKER_CLI_BYTES, AT(run.chunk_batch_bytes), .imax = 1ull << 30},
    {"chunk-ms", "MS",
     "with --chunk auto: or MS milliseconds after its first example\n"
     "was begun (an example that takes longer goes out alone)",
     STOKER_CLI_NUMBER, AT(run.chunk_ms), .dmin = 0.001, .dmax = 60000},
    {"max-examples", "N", "stop after N examples and say goodbye (default: no limit)",
     STOKER_CLI_UINT, AT(run.max_examples), .imin = 1, .imax = UINT64_MAX / 2},
    {"retain", "N",
     "keep up to N pushed examples until trainers trained them,\n"
     "so a restarted broker gets them again; a full buffer\n"
     "waits (0: off) (default: twice the broker's queue depth)",
     STOKER_CLI_UINT, AT(run.retain), .imax = UINT32_MAX - 1},
    {"broker-wait", "S",
     "wait up to S seconds for a broker that does not answer\n"
     "(not started yet, or gone mid-run), keeping what is\n"
     "retained to push again; then exit 3 (default 600)",
     STOKER_CLI_SECONDS_MS, AT(run.client.give_up_ms), .dmin = 0.1, .dmax = 86400 * 7},
    {"linger", "S",
     "at the end, wait up to S seconds until everything pushed\n"
     "is trained before saying goodbye (default 0)",
     STOKER_CLI_SECONDS_MS, AT(run.linger_ms), .dmax = 86400},
    {"seed", "N",
     "run seed; each example's seed derives from it, the name\n"
     "and the example's seq",
     STOKER_CLI_UINT, AT(run.seed), .imax = UINT64_MAX},
    {"measure", "N",
     "generate N examples without a broker and print the\n"
     "generator's rate as JSON (how fast is my generator?)",
     STOKER_CLI_UINT, AT(measure), .imin = 1, .imax = UINT64_MAX / 2},
    {"items", "N",
     "synthetic, exec: serve a dataset of N items, made by\n"
     "index in the epochs the broker hands out",
     STOKER_CLI_UINT, AT(items), .imin = 1, .imax = UINT32_MAX},
    {"dataset", NULL,
     "images: serve the folder as a dataset (item i is the i-th\n"
     "file of the sorted listing); tokens: serve every window at\n"
     "--stride once per epoch; in the broker's epochs",
     STOKER_CLI_FLAG, AT(dataset)},
};
static const stoker_cli_option synthetic_rows[] = {
    {"delay", "MIN:MAX",
     "seconds of simulated work per example (default 0.05:0.5\n"
     "for reference, 0:0 for tokens)",
     STOKER_CLI_RANGE, AT(synth.delay_min_s),
     .offset2 = offsetof(producer_options, synth.delay_max_s), .dmax = 3600},
    {"workload", "reference|tokens",
     "reference: input:float32[10],output:float32[1];\n"
     "tokens: token sequences tokens:int32[?<=CAP],label:int64\n"
     "(lengths from --lengths, tokens uniform in [0, --vocab),\n"
     "label 1 when more tokens are even than odd)",
     STOKER_CLI_ENUM, AT(synth.workload), .choices = workloads},
    {"lengths", "DIST",
     "tokens: sequence lengths, fixed:N, uniform:MIN:MAX or\n"
     "lognormal:MEAN:CAP[:SIGMA] (mean MEAN, log-space sigma\n"
     "SIGMA, default 1; longer draws cut to CAP); the field's\n"
     "bound is N, MAX or CAP",
     STOKER_CLI_CUSTOM, AT(synth.lengths), .parse = parse_lengths, .show = show_lengths},
    {"vocab", "V", "tokens: token values are in [0, V)", STOKER_CLI_UINT, AT(synth.vocab),
     .imin = 1, .imax = INT32_MAX},
};
static const stoker_cli_option exec_rows[] = {
    {"exec", "'CMD'", "run CMD with /bin/sh -c and read examples from its stdout",
     STOKER_CLI_STRING, AT(exec_cmd)},
    {"schema", "SPEC",
     "e.g. 'input:float32[10],output:float32[1]'; fields NAME:DTYPE[DIMS],\n"
     "DIMS may start with ? or ?<=N (a variable length), NAME:bytes is\n"
     "uint8[?] (docs/schema.md)",
     STOKER_CLI_STRING, AT(schema_spec)},
    {"format", "text|raw", "one example per line, or little-endian records", STOKER_CLI_ENUM,
     AT(format), .choices = formats},
};
static const stoker_cli_option images_rows[] = {
    {"images", "DIR",
     "one subfolder of PNG/JPEG/WebP/BMP/TIFF files per class\n"
     "(nested folders walked; bad files named and skipped)",
     STOKER_CLI_STRING, AT(images_dir)},
    {"size", "N|HxW", "output side, or height x width, in pixels", STOKER_CLI_CUSTOM, AT(height),
     .parse = parse_size, .show = show_size},
    {"augment", "SPEC",
     "augmentation pipeline, e.g. 'rrc(0.08,1;0.75,1.33),hflip,\n"
     "jitter(b=0.4,c=0.4,s=0.4,h=0.1),rotate(15),normalize' or for\n"
     "evaluation 'resize(73),ccrop(64),normalize' (docs/images.md;\n"
     "default: the built-in rrc, hflip, jitter(b=0.4,c=0.4), normalize)",
     STOKER_CLI_STRING, AT(augment)},
    {"output", "float32|uint8|encoded",
     "float32: normalized as the pipeline says; uint8: raw pixels\n"
     "(normalize on the consumer with the mean and std logged);\n"
     "encoded: each file's bytes as they are on disk (JPEG, PNG...),\n"
     "image:bytes,label:int64, to decode on the GPU (torchvision.io.\n"
     "decode_jpeg, nvJPEG, DALI); no --size, --augment, --layout,\n"
     "--decode or --jpeg-draft",
     STOKER_CLI_ENUM, AT(output), .choices = outputs},
    {"max-file-bytes", "B",
     "--output encoded: the image field's bound, image:uint8[?<=B]\n"
     "(a larger file is named and refused; a chunk holds about\n"
     "--chunk-bytes / B files) (default: none, image:bytes)",
     STOKER_CLI_BYTES, AT(max_file_bytes), .imin = 1, .imax = IMAGES_MAX_FILE_BYTES},
    {"layout", "chw|hwc", "image channel-first (3,H,W) or channel-last (H,W,3)", STOKER_CLI_ENUM,
     AT(layout), .choices = layouts},
    {"label", "int64|int32", "label as an int64 scalar, or int32[1] (the old form)",
     STOKER_CLI_ENUM, AT(label), .choices = labels},
    {"label-map", "FILE", "write the class names, labels and file counts as JSON",
     STOKER_CLI_STRING, AT(label_map)},
    {"decode", "once|each",
     "once: decode every file at start (start-up time and\n"
     "memory grow with the folder; examples are cheapest);\n"
     "each: check headers only at start (fast, no pixels held),\n"
     "then read and decode the file for every example as a data\n"
     "loader does (a file that fails is logged with its path\n"
     "and skipped)",
     STOKER_CLI_ENUM, AT(decode_each), .choices = decodes},
    {"jpeg-draft", "on|off",
     "on: decode a JPEG at 1/2, 1/4 or 1/8 of its size (DCT\n"
     "scaling, PIL's draft) where the first resize or crop\n"
     "shrinks it that much anyway, never below the output size;\n"
     "off: always at full size (slower)",
     STOKER_CLI_ENUM, AT(jpeg_full), .choices = drafts},
};
static const stoker_cli_option tokens_rows[] = {
    {"tokens", "PATH",
     "pre-tokenized shards: a file, a folder (its *.bin) or a\n"
     "glob pattern; llm.c's .bin (256-int header) or plain uint16",
     STOKER_CLI_STRING, AT(tokens_path)},
    {"shard-format", "auto|llmc|raw",
     "auto: llm.c's when the file starts with its magic number,\n"
     "else plain little-endian uint16 (nanoGPT's)",
     STOKER_CLI_ENUM, AT(shard_format), .choices = shard_formats},
    {"split", "windows|documents",
     "windows: --window tokens an example; documents: the runs\n"
     "between --eot tokens, a variable-length field tokens:int32[?]",
     STOKER_CLI_ENUM, AT(split), .choices = splits},
    {"window", "N", "tokens per example", STOKER_CLI_UINT, AT(window), .imin = 1,
     .imax = TOKENS_MAX_WINDOW},
    {"eot", "N", "documents: the end-of-text token (GPT-2's <|endoftext|>)", STOKER_CLI_UINT,
     AT(eot), .imax = UINT32_MAX},
    {"max-doc", "N",
     "documents: the field's bound ([?<=N]); a longer document is cut\n"
     "into pieces of N (default: no bound)",
     STOKER_CLI_UINT, AT(max_doc), .imin = 1, .imax = TOKENS_MAX_WINDOW},
    {"stride", "N",
     "--dataset: a window starts every N tokens (default: --window;\n"
     "--window 1025 --stride 1024 gives inputs and next-token\n"
     "targets of 1024 from each example); a stream draws offsets",
     STOKER_CLI_UINT, AT(stride), .imin = 1, .imax = TOKENS_MAX_WINDOW},
    {"token-dtype", "int32|int64|uint16", "the field's dtype", STOKER_CLI_ENUM, AT(token_dtype),
     .choices = token_dtypes},
    {"token-field", "NAME", "the field's name (default: tokens)", STOKER_CLI_STRING,
     AT(token_field), .imin = 1, .imax = STOKER_NAME_MAX - 1},
};

// When the generator kind is not chosen (!chosen) and a flag of its table was given: says
// so, naming every flag of table, and returns 1.
static int
foreign_flag(const stoker_cli *cli, int chosen, const char *kind, const stoker_cli_option *table,
             size_t n)
{
    for (size_t i = 0; !chosen && i < n; i++) {
        if (!stoker_cli_given(cli, table[i].name))
            continue;
        char all[256] = "";
        for (size_t j = 0; j < n; j++)
            snprintf(all + strlen(all), sizeof(all) - strlen(all), "%s--%s", j == 0 ? "" : ", ",
                     table[j].name);
        stoker_cli_fail(cli, "--%s needs --generator %s (as do %s)", table[i].name, kind, all);
        return 1;
    }
    return 0;
}

// What the table cannot say: the broker is needed unless measuring, and options of one
// generator given to another are mistakes worth stopping for.
static int
check(const stoker_cli *cli, const producer_options *o)
{
    int is_exec = strcmp(o->generator, "exec") == 0;
    int is_images = strcmp(o->generator, "images") == 0;
    int is_tokens = strcmp(o->generator, "tokens") == 0;
    if (stoker_cli_require(cli, "broker", "measure") != 0 ||
        stoker_cli_check_tls(cli, &o->run.client) != 0)
        return 2;
    if (!is_exec && (stoker_cli_given(cli, "exec") || stoker_cli_given(cli, "schema") ||
                     stoker_cli_given(cli, "format")))
        return stoker_cli_fail(cli, "--exec, --schema and --format need --generator exec");
    if (foreign_flag(cli, is_images, "images", images_rows,
                     sizeof images_rows / sizeof *images_rows) ||
        foreign_flag(cli, is_tokens, "tokens", tokens_rows,
                     sizeof tokens_rows / sizeof *tokens_rows))
        return 2;
    if (is_tokens && o->tokens_path == NULL)
        return stoker_cli_fail(cli, "--generator tokens needs --tokens PATH (a shard, a folder "
                                    "of *.bin shards or a glob pattern)");
    if (is_tokens && o->split == 1 &&
        (stoker_cli_given(cli, "window") || stoker_cli_given(cli, "stride")))
        return stoker_cli_fail(cli, "--window and --stride apply to --split windows; documents "
                                    "are as long as they are (--max-doc N bounds them)");
    if (is_tokens && o->split == 0 &&
        (stoker_cli_given(cli, "eot") || stoker_cli_given(cli, "max-doc")))
        return stoker_cli_fail(cli, "--eot and --max-doc apply to --split documents");
    if (is_tokens && stoker_cli_given(cli, "stride") && !o->dataset)
        return stoker_cli_fail(cli, "--stride applies with --dataset (a stream draws each "
                                    "window's offset at random)");
    if (o->run.chunk != STOKER_CHUNK_AUTO &&
        (stoker_cli_given(cli, "chunk-bytes") || stoker_cli_given(cli, "chunk-ms")))
        return stoker_cli_fail(cli,
                               "--chunk-bytes and --chunk-ms size chunks with --chunk auto "
                               "(the default); --chunk %u fixes the count",
                               o->run.chunk);
    if (o->run.chunk != STOKER_CHUNK_AUTO && stoker_cli_given(cli, "chunk-batch-bytes"))
        return stoker_cli_fail(cli,
                               "--chunk-batch-bytes sizes chunks with --chunk auto (the "
                               "default); --chunk %u fixes the count",
                               o->run.chunk);
    static const char *const synthetic_flags[] = {"delay", "workload", "lengths", "vocab"};
    for (size_t i = 0; i < sizeof synthetic_flags / sizeof *synthetic_flags; i++)
        if ((is_exec || is_images || is_tokens) && stoker_cli_given(cli, synthetic_flags[i]))
            return stoker_cli_fail(cli, "--%s applies to --generator synthetic only",
                                   synthetic_flags[i]);
    if (o->synth.workload != STOKER_SYNTHETIC_TOKENS &&
        (stoker_cli_given(cli, "lengths") || stoker_cli_given(cli, "vocab")))
        return stoker_cli_fail(cli, "--lengths and --vocab need --workload tokens");
    if (is_exec && (o->exec_cmd == NULL || o->schema_spec == NULL))
        return stoker_cli_fail(cli, "--generator exec needs --exec 'CMD' and --schema SPEC");
    if (is_images && o->images_dir == NULL)
        return stoker_cli_fail(cli, "--generator images needs --images DIR");
    static const char *const decoded_flags[] = {"size", "augment", "layout", "decode",
                                                "jpeg-draft"};
    for (size_t i = 0; i < sizeof decoded_flags / sizeof *decoded_flags; i++)
        if (o->output == IMAGES_ENCODED && stoker_cli_given(cli, decoded_flags[i]))
            return stoker_cli_fail(cli,
                                   "--%s applies to decoded output (--output float32 or uint8); "
                                   "--output encoded sends each file's bytes as they are",
                                   decoded_flags[i]);
    if (o->output != IMAGES_ENCODED && stoker_cli_given(cli, "max-file-bytes"))
        return stoker_cli_fail(cli, "--max-file-bytes bounds --output encoded's image field");
    if (o->augment != NULL) {
        // A bad pipeline is the command line's fault, found before the folder is read.
        char err[512];
        augment *a = NULL;
        int rv = augment_parse(o->augment, &a, err, sizeof(err));
        augment_destroy(a);
        if (rv == STOKER_INVALID)
            return stoker_cli_fail(cli, "--augment '%s': %s", o->augment, err);
    }
    if ((is_images || is_tokens) && stoker_cli_given(cli, "items"))
        return stoker_cli_fail(cli, "--items applies to synthetic and exec; images and tokens use "
                                    "--dataset (the files or the windows are the items)");
    if (!is_images && !is_tokens && o->dataset)
        return stoker_cli_fail(
            cli, "--dataset applies to --generator images and tokens; others use --items N");
    return -1;
}

// Builds the chosen generator into *gen: 0, or the exit code.
static int
build_generator(const stoker_cli *cli, producer_options *o, stoker_generator *gen)
{
    char err[512];
    *gen = (stoker_generator){0};
    if (strcmp(o->generator, "exec") == 0) {
        stoker_schema schema;
        if (stoker_schema_parse(o->schema_spec, &schema, err, sizeof(err)) != STOKER_OK)
            return stoker_cli_fail(cli, "--schema '%s': %s", o->schema_spec, err);
        if ((o->items > 0
                 ? exec_generator_create_dataset(o->exec_cmd, &schema, (exec_format)o->format,
                                                 o->items, gen, err, sizeof(err))
                 : exec_generator_create(o->exec_cmd, &schema, (exec_format)o->format, gen, err,
                                         sizeof(err))) != STOKER_OK) {
            stoker_error("exec: %s", err);
            return 1;
        }
    } else if (strcmp(o->generator, "images") == 0) {
        images_config cfg;
        images_config_init(&cfg);
        cfg.dir = o->images_dir;
        cfg.height = o->height;
        cfg.width = o->width;
        cfg.decode_each = o->decode_each;
        // A dataset's producer is handed only its own shards: it decodes their files as they
        // come (--decode once still holds each, once decoded).
        cfg.decode_when_used = o->dataset;
        cfg.jpeg_draft = !o->jpeg_full;
        cfg.augment = o->augment;
        cfg.output = (images_output)o->output;
        cfg.hwc = o->layout == 1;
        cfg.label = (images_label)o->label;
        cfg.max_file_bytes = o->max_file_bytes;
        if (images_generator_open(&cfg, gen, err, sizeof(err)) != STOKER_OK) {
            stoker_error("%s", err);
            return 1;
        }
        if (o->label_map != NULL &&
            images_generator_write_label_map(gen, o->label_map, err, sizeof(err)) != STOKER_OK) {
            stoker_error("%s", err);
            stoker_generator_fini(gen);
            return 1;
        }
        if (o->dataset && images_generator_dataset(gen, err, sizeof(err)) != STOKER_OK) {
            stoker_error("%s", err);
            stoker_generator_fini(gen);
            return 1;
        }
    } else if (strcmp(o->generator, "tokens") == 0) {
        tokens_config cfg = {.path = o->tokens_path,
                             .format = (tokens_format)o->shard_format,
                             .window = o->window,
                             .stride = o->stride,
                             .dtype = token_dtype_of[o->token_dtype],
                             .field = o->token_field,
                             .dataset = o->dataset,
                             .documents = o->split == 1,
                             .eot = o->eot,
                             .max_doc = o->max_doc};
        if (tokens_generator_open(&cfg, gen, err, sizeof(err)) != STOKER_OK) {
            stoker_error("tokens: %s", err);
            return 1;
        }
        if (o->split == 1)
            stoker_info("tokens: %llu tokens, %llu documents split at token %u%s",
                        (unsigned long long)tokens_generator_tokens(gen),
                        (unsigned long long)tokens_generator_windows(gen), o->eot,
                        o->dataset ? " (the dataset's items)" : " (a stream drawing them)");
        else
            stoker_info("tokens: %llu tokens, %llu windows of %u%s",
                        (unsigned long long)tokens_generator_tokens(gen),
                        (unsigned long long)tokens_generator_windows(gen), o->window,
                        o->dataset ? " (the dataset's items)" : " (a stream at random offsets)");
    } else {
        o->synth.stop = stoker_producer_stop_flag();
        if (o->synth.workload == STOKER_SYNTHETIC_TOKENS && !stoker_cli_given(cli, "delay"))
            o->synth.delay_min_s = o->synth.delay_max_s = 0; // tokens: free unless asked
        if (o->items > 0)
            stoker_synthetic_dataset(gen, &o->synth, o->items);
        else
            stoker_synthetic_generator(gen, &o->synth);
    }
    return 0;
}

// --measure: the generator alone, in chunks as it would push them, no broker.
static int
measure_generator(const stoker_generator *gen, const stoker_producer_config *cfg, uint64_t n)
{
    stoker_chunk chunk;
    uint32_t capacity = stoker_producer_chunk_capacity(cfg, &gen->schema);
    int rv = stoker_chunk_init(&chunk, &gen->schema, capacity);
    if (rv != STOKER_OK)
        return rv;
    uint64_t done = 0, start = stoker_now_ns();
    while (done < n && rv == STOKER_OK) {
        uint32_t k = n - done < capacity ? (uint32_t)(n - done) : capacity;
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

int
main(int argc, char **argv)
{
    stoker_process_init();
    producer_options o;
    options_init(&o);
    stoker_cli cli;
    stoker_cli_init(&cli, "stoker-producer", "--broker URL [options]",
                    "Generates training examples and pushes them to a stoker broker.",
                    STOKER_LOG_INFO);
    stoker_cli_add(&cli, NULL, STOKER_CLI_ROWS(stoker_cli_broker_rows), &o.run.client);
    stoker_cli_add(&cli, NULL, STOKER_CLI_ROWS(stoker_cli_tls_rows), &o.run.client);
    stoker_cli_add(&cli, NULL, STOKER_CLI_ROWS(rows), &o);
    stoker_cli_add(&cli, "synthetic:", STOKER_CLI_ROWS(synthetic_rows), &o);
    stoker_cli_add(&cli, "exec:", STOKER_CLI_ROWS(exec_rows), &o);
    stoker_cli_add(&cli, "images:", STOKER_CLI_ROWS(images_rows), &o);
    stoker_cli_add(&cli, "tokens:", STOKER_CLI_ROWS(tokens_rows), &o);
    int code = stoker_cli_parse(&cli, argc, argv);
    if (code >= 0 || (code = check(&cli, &o)) >= 0)
        return code;
    if (o.run.client.name == NULL) {
        char host[32] = "host";
        gethostname(host, sizeof(host) - 1);
        host[sizeof(host) - 1] = '\0';
        snprintf(o.name, sizeof(o.name), "%s-%d", host, (int)getpid());
        o.run.client.name = o.name;
    }
    stoker_log_init("producer", cli.log_level);

    stoker_generator gen;
    if ((code = build_generator(&cli, &o, &gen)) != 0)
        return code;
    if (o.measure > 0)
        code = measure_generator(&gen, &o.run, o.measure) == STOKER_OK ? 0 : 1;
    else {
        // 3: no broker answered within --broker-wait (said in the log); 1: any other error.
        int rv = stoker_producer_run(&o.run, &gen, NULL);
        code = rv == STOKER_OK ? 0 : rv == STOKER_CONNECTION ? 3 : 1;
    }
    stoker_generator_fini(&gen);
    return code;
}
