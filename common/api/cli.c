// Table-driven command lines: getopt_long over the rows of stoker_cli's groups, the range checks
// and messages of each kind, the generated usage text and the checks across flags. Number
// parsing itself is opts.c's; what a flag means is the caller's.
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "stoker/cli.h"
#include "stoker/error.h"
#include "stoker/opts.h"
#include "stoker/tls.h"

// --log-level is log.c's parser (any case, "warning" too), so a custom row.
static int
parse_log_level(const char *value, void *base, char *err, size_t err_len)
{
    (void)err;
    (void)err_len;
    return stoker_log_parse_level(value, &((stoker_cli *)base)->log_level) != STOKER_OK;
}

static void
show_log_level(const void *base, char *buf, size_t len)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    stoker_log_level level = ((const stoker_cli *)base)->log_level;
    snprintf(buf, len, "%s", names[level <= STOKER_LOG_DEBUG ? level : STOKER_LOG_DEBUG]);
}

static const stoker_cli_option log_row[] = {
    {"log-level", "L", "log level: error, warn, info or debug", STOKER_CLI_CUSTOM,
     STOKER_CLI_AT(stoker_cli, log_level), .expect = "expected error, warn, info or debug",
     .parse = parse_log_level, .show = show_log_level},
};

const stoker_cli_option stoker_cli_broker_rows[2] = {
    {"broker", "URL", "the broker (tcp://HOST:PORT, ipc:///path, tls+tcp://...)", STOKER_CLI_STRING,
     STOKER_CLI_AT(stoker_client_options, url)},
    {"token-file", "F", "authenticate with the token in F", STOKER_CLI_TOKEN_FILE,
     STOKER_CLI_AT(stoker_client_options, token)},
};

const stoker_cli_option stoker_cli_tls_rows[4] = {
    {"tls-cert", "F", "client certificate (PEM) for tls+tcp://", STOKER_CLI_STRING,
     STOKER_CLI_AT(stoker_client_options, tls.cert)},
    {"tls-key", "F", "its private key (PEM)", STOKER_CLI_STRING,
     STOKER_CLI_AT(stoker_client_options, tls.key)},
    {"tls-ca", "F", "verify the broker's certificate with this CA (PEM); required for tls+tcp://",
     STOKER_CLI_STRING, STOKER_CLI_AT(stoker_client_options, tls.ca)},
    {"tls-insecure", NULL, "tls+tcp:// without verifying the broker (no --tls-ca; not safe)",
     STOKER_CLI_FLAG, STOKER_CLI_AT(stoker_client_options, tls.insecure)},
};

const char *
stoker_version(void)
{
    return STOKER_VERSION;
}

void
stoker_cli_init(stoker_cli *cli, const char *prog, const char *synopsis, const char *about,
                stoker_log_level log_level)
{
    memset(cli, 0, sizeof(*cli));
    cli->prog = prog;
    cli->synopsis = synopsis;
    cli->about = about;
    cli->log_level = log_level;
}

static size_t
n_rows(const stoker_cli *cli)
{
    size_t n = 0;
    for (size_t g = 0; g < cli->n_groups; g++)
        n += cli->groups[g].n_rows;
    return n;
}

static void
add_group(stoker_cli *cli, const char *heading, const stoker_cli_option *rows, size_t n, void *base)
{
    if (cli->n_groups == STOKER_CLI_MAX_GROUPS || n_rows(cli) + n > STOKER_CLI_MAX_ROWS)
        abort();
    for (size_t i = 0; i < n; i++)
        if ((rows[i].kind == STOKER_CLI_UINT || rows[i].kind == STOKER_CLI_BYTES) &&
            (rows[i].size != 4 && rows[i].size != 8))
            abort();
    cli->groups[cli->n_groups++] = (stoker_cli_group){heading, rows, n, base};
}

void
stoker_cli_add(stoker_cli *cli, const char *heading, const stoker_cli_option *rows, size_t n,
               void *base)
{
    // Leaves room for the --log-level row parse adds.
    if (cli->n_groups + 1 == STOKER_CLI_MAX_GROUPS || n_rows(cli) + n + 1 > STOKER_CLI_MAX_ROWS)
        abort();
    add_group(cli, heading, rows, n, base);
}

// --- one row -------------------------------------------------------------------------------

static void *
field(const stoker_cli_group *g, size_t offset)
{
    return (char *)g->base + offset;
}

static uint64_t
get_uint(const void *p, size_t size)
{
    if (size == 4) {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static void
put_uint(void *p, size_t size, uint64_t v)
{
    if (size == 4) {
        uint32_t w = (uint32_t)v;
        memcpy(p, &w, 4);
    } else {
        memcpy(p, &v, 8);
    }
}

static void
choices_text(const char *const *c, char *buf, size_t len)
{
    size_t n = 0, at = 0;
    while (c[n] != NULL)
        n++;
    buf[0] = '\0';
    for (size_t i = 0; i < n && at < len; i++)
        at += snprintf(buf + at, len - at, "%s%s", i == 0 ? "" : i + 1 == n ? " or " : ", ", c[i]);
}

// What the row accepts, for error messages.
static void
expect_text(const stoker_cli_option *o, char *buf, size_t len)
{
    unsigned long long lo = o->imin, hi = o->imax;
    if (o->expect != NULL) {
        snprintf(buf, len, "%s", o->expect);
        return;
    }
    switch (o->kind) {
    case STOKER_CLI_UINT:
    case STOKER_CLI_BYTES: {
        const char *what = o->kind == STOKER_CLI_BYTES ? "bytes" : "an integer";
        if (hi < UINT64_MAX / 2)
            snprintf(buf, len, "expected %s, %llu..%llu", what, lo, hi);
        else if (lo <= 1 && o->kind == STOKER_CLI_UINT)
            snprintf(buf, len, "expected a %s integer", lo == 0 ? "non-negative" : "positive");
        else
            snprintf(buf, len, "expected %s >= %llu", what, lo);
        break;
    }
    case STOKER_CLI_SECONDS_MS:
        snprintf(buf, len, "expected seconds, %g..%g", o->dmin, o->dmax);
        break;
    case STOKER_CLI_NUMBER:
        snprintf(buf, len, "expected a number, %g..%g", o->dmin, o->dmax);
        break;
    case STOKER_CLI_RANGE:
        snprintf(buf, len, "expected MIN:MAX seconds, 0 <= MIN <= MAX <= %g", o->dmax);
        break;
    case STOKER_CLI_CHOICE:
    case STOKER_CLI_ENUM: {
        char c[256];
        choices_text(o->choices, c, sizeof(c));
        snprintf(buf, len, "expected %s", c);
        break;
    }
    case STOKER_CLI_STRING:
        snprintf(buf, len, "expected %llu..%llu characters", lo, hi);
        break;
    default:
        snprintf(buf, len, "not accepted");
    }
}

static int
choice_index(const char *const *c, const char *value)
{
    for (int i = 0; c[i] != NULL; i++)
        if (strcmp(c[i], value) == 0)
            return i;
    return -1;
}

// Sets the row's field from value; on failure writes why into err and returns nonzero.
static int
apply(stoker_cli *cli, const stoker_cli_group *g, const stoker_cli_option *o, const char *value,
      char *err, size_t err_len)
{
    void *f = field(g, o->offset);
    uint64_t u;
    double d, d2;
    int i;
    err[0] = '\0';
    switch (o->kind) {
    case STOKER_CLI_FLAG:
        *(int *)f = 1;
        return 0;
    case STOKER_CLI_STRING:
        if (o->imax > 0 && (strlen(value) < o->imin || strlen(value) > o->imax))
            break;
        *(const char **)f = value;
        return 0;
    case STOKER_CLI_STRINGS: {
        uint32_t *count = field(g, o->offset2);
        if (*count >= o->imax) {
            snprintf(err, err_len, "at most %llu --%s values", (unsigned long long)o->imax,
                     o->name);
            return 1;
        }
        ((const char **)f)[(*count)++] = value;
        return 0;
    }
    case STOKER_CLI_UINT:
    case STOKER_CLI_BYTES:
        if (stoker_parse_u64(value, o->imin, o->imax, &u) != STOKER_OK)
            break;
        put_uint(f, o->size, u);
        return 0;
    case STOKER_CLI_SECONDS_MS:
        if (stoker_parse_double(value, o->dmin, o->dmax, &d) != STOKER_OK)
            break;
        *(uint32_t *)f = (uint32_t)(d * 1000);
        return 0;
    case STOKER_CLI_NUMBER:
        if (stoker_parse_double(value, o->dmin, o->dmax, &d) != STOKER_OK)
            break;
        if (o->size == sizeof(float))
            *(float *)f = (float)d;
        else
            *(double *)f = d;
        return 0;
    case STOKER_CLI_RANGE:
        if (stoker_parse_range(value, o->dmax, &d, &d2) != STOKER_OK)
            break;
        *(double *)f = d;
        *(double *)field(g, o->offset2) = d2;
        return 0;
    case STOKER_CLI_CHOICE:
    case STOKER_CLI_ENUM:
        if ((i = choice_index(o->choices, value)) < 0)
            break;
        if (o->kind == STOKER_CLI_CHOICE)
            *(const char **)f = o->choices[i];
        else
            *(int *)f = i;
        return 0;
    case STOKER_CLI_TOKEN_FILE:
        if (stoker_read_token_file(value, cli->token, sizeof(cli->token), err, err_len) !=
            STOKER_OK)
            return 1;
        *(const char **)f = cli->token;
        return 0;
    case STOKER_CLI_CUSTOM:
        if (o->parse(value, g->base, err, err_len) == 0)
            return 0;
        if (o->expect != NULL || err[0] == '\0')
            break;
        return 1;
    }
    expect_text(o, err, err_len);
    return 1;
}

// The row's current value as its default in the usage ("" for none).
static void
show(const stoker_cli_group *g, const stoker_cli_option *o, char *buf, size_t len)
{
    const void *f = field(g, o->offset);
    buf[0] = '\0';
    switch (o->kind) {
    case STOKER_CLI_STRING:
    case STOKER_CLI_CHOICE:
        if (*(const char *const *)f != NULL)
            snprintf(buf, len, "%s", *(const char *const *)f);
        break;
    case STOKER_CLI_UINT:
    case STOKER_CLI_BYTES:
        if (get_uint(f, o->size) != 0)
            snprintf(buf, len, "%llu", (unsigned long long)get_uint(f, o->size));
        break;
    case STOKER_CLI_SECONDS_MS:
        if (*(const uint32_t *)f != 0)
            snprintf(buf, len, "%g", *(const uint32_t *)f / 1000.0);
        break;
    case STOKER_CLI_NUMBER: {
        double d = o->size == sizeof(float) ? *(const float *)f : *(const double *)f;
        if (d != 0)
            snprintf(buf, len, "%g", d);
        break;
    }
    case STOKER_CLI_RANGE:
        snprintf(buf, len, "%g:%g", *(const double *)f, *(const double *)field(g, o->offset2));
        break;
    case STOKER_CLI_ENUM:
        snprintf(buf, len, "%s", o->choices[*(const int *)f]);
        break;
    case STOKER_CLI_CUSTOM:
        if (o->show != NULL)
            o->show(g->base, buf, len);
        break;
    default:
        break;
    }
}

// --- the whole command line ----------------------------------------------------------------

static void
usage_row(const stoker_cli_group *g, const stoker_cli_option *o, FILE *f)
{
    char left[64], def[128];
    snprintf(left, sizeof(left), "--%s%s%s", o->name, o->metavar ? " " : "",
             o->metavar ? o->metavar : "");
    fprintf(f, "  %-22s  ", left);
    if (strlen(left) > 22)
        fprintf(f, "\n  %-22s  ", "");
    for (const char *p = o->help; *p != '\0'; p++) {
        fputc(*p, f);
        if (*p == '\n')
            fprintf(f, "  %-22s  ", "");
    }
    show(g, o, def, sizeof(def));
    if (def[0] != '\0' && strstr(o->help, "(default") == NULL)
        fprintf(f, " (default %s)", def);
    fputc('\n', f);
}

void
stoker_cli_usage(const stoker_cli *cli, FILE *f)
{
    fprintf(f, "usage: %s %s\n", cli->prog, cli->synopsis);
    if (cli->about != NULL)
        fprintf(f, "\n%s\n", cli->about);
    fputc('\n', f);
    for (size_t g = 0; g < cli->n_groups; g++) {
        const stoker_cli_group *grp = &cli->groups[g];
        if (grp->heading != NULL)
            fprintf(f, "%s\n", grp->heading);
        for (size_t i = 0; i < grp->n_rows; i++)
            usage_row(grp, &grp->rows[i], f);
    }
    fprintf(f, "  --help, --version\n");
    if (cli->epilog != NULL)
        fprintf(f, "\n%s\n", cli->epilog);
}

int
stoker_cli_fail(const stoker_cli *cli, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", cli->prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    // Not the whole usage: its defaults would show the values parsed so far.
    fprintf(stderr, "usage: %s %s\n(%s --help lists the options)\n", cli->prog, cli->synopsis,
            cli->prog);
    return 2;
}

static const char *const kind_names[] = {
    "flag",   "string", "strings", "uint",   "bytes",      "seconds",
    "number", "range",  "choice",  "choice", "token-file", "custom",
};

static void
dump_table(const stoker_cli *cli)
{
    for (size_t g = 0; g < cli->n_groups; g++)
        for (size_t i = 0; i < cli->groups[g].n_rows; i++) {
            const stoker_cli_option *o = &cli->groups[g].rows[i];
            char c[256] = "";
            if (o->choices != NULL)
                for (size_t k = 0; o->choices[k] != NULL; k++)
                    snprintf(c + strlen(c), sizeof(c) - strlen(c), "%s%s", k ? "," : "",
                             o->choices[k]);
            printf("%s\t%s\t%s\t%llu\t%llu\t%.15g\t%.15g\t%s\n", o->name, kind_names[o->kind],
                   o->metavar ? o->metavar : "", (unsigned long long)o->imin,
                   (unsigned long long)o->imax, o->dmin, o->dmax, c);
        }
}

// Finds row number k (in the order of the groups).
static const stoker_cli_option *
row_at(const stoker_cli *cli, size_t k, const stoker_cli_group **group)
{
    for (size_t g = 0; g < cli->n_groups; g++) {
        if (k < cli->groups[g].n_rows) {
            *group = &cli->groups[g];
            return &cli->groups[g].rows[k];
        }
        k -= cli->groups[g].n_rows;
    }
    return NULL;
}

int
stoker_cli_parse(stoker_cli *cli, int argc, char **argv)
{
    enum { OPT_HELP = 1000, OPT_VERSION, OPT_TABLE, OPT_ROW = 2000 };
    // --log-level goes with the general rows, before the first group with a heading.
    add_group(cli, NULL, log_row, 1, cli);
    size_t at = 0;
    while (at + 1 < cli->n_groups && cli->groups[at].heading == NULL)
        at++;
    stoker_cli_group log_group = cli->groups[cli->n_groups - 1];
    memmove(&cli->groups[at + 1], &cli->groups[at], (cli->n_groups - 1 - at) * sizeof(log_group));
    cli->groups[at] = log_group;
    size_t n = n_rows(cli);
    struct option longopts[STOKER_CLI_MAX_ROWS + 4];
    for (size_t k = 0; k < n; k++) {
        const stoker_cli_group *g;
        const stoker_cli_option *o = row_at(cli, k, &g);
        longopts[k] =
            (struct option){o->name, o->kind == STOKER_CLI_FLAG ? no_argument : required_argument,
                            NULL, OPT_ROW + (int)k};
    }
    longopts[n] = (struct option){"help", no_argument, NULL, OPT_HELP};
    longopts[n + 1] = (struct option){"version", no_argument, NULL, OPT_VERSION};
    longopts[n + 2] = (struct option){"cli-table", no_argument, NULL, OPT_TABLE};
    longopts[n + 3] = (struct option){NULL, 0, NULL, 0};

    char err[512];
    int opt;
    opterr = 0;
    optind = 1;
    while ((opt = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        if (opt == OPT_HELP) {
            stoker_cli_usage(cli, stdout);
            return 0;
        }
        if (opt == OPT_VERSION) {
            printf("%s %s\n", cli->prog, stoker_version());
            return 0;
        }
        if (opt == OPT_TABLE) {
            dump_table(cli);
            return 0;
        }
        if (opt == ':')
            return stoker_cli_fail(cli, "%s needs a value", argv[optind - 1]);
        if (opt < OPT_ROW || (size_t)(opt - OPT_ROW) >= n)
            return stoker_cli_fail(cli, "unknown or incomplete option '%s'", argv[optind - 1]);
        const stoker_cli_group *g;
        const stoker_cli_option *o = row_at(cli, (size_t)(opt - OPT_ROW), &g);
        if (apply(cli, g, o, optarg, err, sizeof(err)) != 0)
            return stoker_cli_fail(cli, "--%s '%s': %s", o->name, optarg, err);
        cli->given[opt - OPT_ROW] = 1;
    }
    if (optind < argc)
        return stoker_cli_fail(cli, "unexpected argument '%s'", argv[optind]);
    return -1;
}

// --- checks across flags -------------------------------------------------------------------

static const stoker_cli_option *
find(const stoker_cli *cli, const char *name, int *given)
{
    size_t k = 0;
    for (size_t g = 0; g < cli->n_groups; g++)
        for (size_t i = 0; i < cli->groups[g].n_rows; i++, k++)
            if (strcmp(cli->groups[g].rows[i].name, name) == 0) {
                *given = cli->given[k];
                return &cli->groups[g].rows[i];
            }
    abort(); // a name that is in no table is a programming error
}

int
stoker_cli_given(const stoker_cli *cli, const char *name)
{
    int given;
    find(cli, name, &given);
    return given;
}

static void
spelled(const stoker_cli *cli, const char *name, char *buf, size_t len)
{
    int given;
    const stoker_cli_option *o = find(cli, name, &given);
    snprintf(buf, len, "--%s%s%s", name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
}

int
stoker_cli_require(const stoker_cli *cli, const char *name, const char *unless)
{
    char s[64];
    if (stoker_cli_given(cli, name) || (unless != NULL && stoker_cli_given(cli, unless)))
        return 0;
    spelled(cli, name, s, sizeof(s));
    return stoker_cli_fail(cli, "%s is required", s);
}

int
stoker_cli_one_of(const stoker_cli *cli, const char *a, const char *b)
{
    char sa[64], sb[64];
    if (stoker_cli_given(cli, a) != stoker_cli_given(cli, b))
        return 0;
    spelled(cli, a, sa, sizeof(sa));
    spelled(cli, b, sb, sizeof(sb));
    return stoker_cli_fail(cli, "give exactly one of %s or %s", sa, sb);
}

int
stoker_cli_exclude(const stoker_cli *cli, const char *a, const char *b, const char *why)
{
    if (stoker_cli_given(cli, a) && stoker_cli_given(cli, b))
        return stoker_cli_fail(cli, "%s", why);
    return 0;
}

// The transports stoker speaks (nng's, by scheme); those before the NULL with a host need
// HOST:PORT.
static const char *const url_schemes[] = {"tcp://",      "tcp4://",     "tcp6://", "tls+tcp://",
                                          "tls+tcp4://", "tls+tcp6://", NULL,      "ipc://",
                                          "abstract://", "inproc://",   NULL};

int
stoker_cli_check_url(const stoker_cli *cli, const char *flag, const char *url)
{
    if (url == NULL)
        return 0;
    int host_port = 1;
    for (const char *const *s = url_schemes;; s++) {
        if (*s == NULL) {
            if (!host_port)
                break;
            host_port = 0;
            continue;
        }
        size_t n = strlen(*s);
        if (strncmp(url, *s, n) != 0)
            continue;
        const char *colon = strrchr(url + n, ':');
        if (!host_port && url[n] != '\0')
            return 0;
        if (host_port && colon != NULL && colon[1] != '\0' &&
            strspn(colon + 1, "0123456789") == strlen(colon + 1))
            return 0;
        return stoker_cli_fail(cli, "--%s '%s': %s", flag, url,
                               host_port ? "expected HOST:PORT after the scheme (a port number)"
                                         : "expected a path or name after the scheme");
    }
    const char *hint = strstr(url, "://") == NULL && strchr(url, ':') != NULL ? "tcp://" : NULL;
    if (hint != NULL)
        return stoker_cli_fail(cli,
                               "--%s '%s' is not a URL: expected tcp://HOST:PORT, ipc:///path, "
                               "inproc://NAME or tls+tcp://HOST:PORT (did you mean '%s%s'?)",
                               flag, url, hint, url);
    return stoker_cli_fail(cli,
                           "--%s '%s' is not a URL stoker speaks: expected tcp://HOST:PORT, "
                           "ipc:///path, inproc://NAME or tls+tcp://HOST:PORT",
                           flag, url);
}

int
stoker_cli_check_tls(const stoker_cli *cli, const stoker_client_options *c)
{
    char err[512];
    int code = stoker_cli_check_url(cli, "broker", c->url);
    if (code != 0)
        return code;
    if (c->url != NULL && stoker_tls_url(c->url)) {
        if (stoker_tls_check(&c->tls, 0, err, sizeof(err)) != STOKER_OK)
            return stoker_cli_fail(cli, "%s", err);
    } else if (c->tls.cert || c->tls.key || c->tls.ca || c->tls.insecure) {
        return stoker_cli_fail(cli, "--tls-* options need a tls+tcp:// --broker URL");
    }
    return 0;
}
