// The command lines of stoker's executables, as tables: one row per flag (name, metavar, help,
// kind, bounds, the config field it sets), in the spirit of redis's standardConfig table. Parsing,
// range checks, the error messages, the usage text (with defaults read from the initialised
// config, so they cannot drift), --help, --version and --log-level all read the rows.
// It does not know what a flag means beyond its kind: checks across flags that depend on values
// (e.g. "--exec needs --generator exec") stay in each main.c, written with stoker_cli_fail.
#ifndef STOKER_CLI_H
#define STOKER_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "stoker/client.h"
#include "stoker/log.h"
#include "stoker/wire.h"

typedef enum stoker_cli_kind {
    STOKER_CLI_FLAG,       // no value: sets an int field to 1
    STOKER_CLI_STRING,     // const char * field = the value (borrowed from argv); when imax > 0
                           // its length must be in imin..imax
    STOKER_CLI_STRINGS,    // repeated: const char *field[imax], uint32_t count at offset2
    STOKER_CLI_UINT,       // unsigned integer in imin..imax, into a field of size 4 or 8
    STOKER_CLI_BYTES,      // a size in bytes, imin..imax, into a field of size 4 or 8
    STOKER_CLI_SECONDS_MS, // seconds (fractions allowed) in dmin..dmax, into a uint32_t of ms
    STOKER_CLI_NUMBER,     // a real number in dmin..dmax, into a double or a float (size 4)
    STOKER_CLI_RANGE,      // MIN:MAX (or one number), 0 <= MIN <= MAX <= dmax, doubles at
                           // offset (MIN) and offset2 (MAX)
    STOKER_CLI_CHOICE,     // one of choices; the const char * field points to the choice
    STOKER_CLI_ENUM,       // one of choices; the int-sized field is its index
    STOKER_CLI_TOKEN_FILE, // reads a token from the file; the const char * field points to it
    STOKER_CLI_CUSTOM,     // parse() decides; expect says what it accepts
} stoker_cli_kind;

typedef struct stoker_cli_option {
    const char *name;    // the flag without "--"
    const char *metavar; // "N", "URL"; NULL for flags
    const char *help;    // one line; "\n" continues on the next, indented; no default in it:
                         // " (default X)" is appended from the config unless help says
                         // "(default" itself
    stoker_cli_kind kind;
    size_t offset;  // of the field in the struct the row's group points to
    size_t size;    // of the field
    size_t offset2; // RANGE: the MAX double; STRINGS: the uint32_t count
    uint64_t imin, imax;
    double dmin, dmax;
    const char *const *choices; // CHOICE, ENUM: NULL-terminated
    const char *expect;         // overrides the generated "expected ..." of error messages
    // CUSTOM: parses value into the struct at base; on failure returns nonzero with a reason in
    // err. show writes the current value for the usage's default ("" for none); may be NULL.
    int (*parse)(const char *value, void *base, char *err, size_t err_len);
    void (*show)(const void *base, char *buf, size_t len);
} stoker_cli_option;

// Row helpers: the field's offset and size in type.
#define STOKER_CLI_AT(type, member)                                                                \
    .offset = offsetof(type, member), .size = sizeof(((type *)0)->member)

#define STOKER_CLI_MAX_GROUPS 8
#define STOKER_CLI_MAX_ROWS   64

typedef struct stoker_cli_group {
    const char *heading; // printed above the group's rows ("synthetic:"); NULL for none
    const stoker_cli_option *rows;
    size_t n_rows;
    void *base; // the struct the rows' offsets point into (borrowed)
} stoker_cli_group;

// One command line: the program's words, its groups of rows, and what parsing found. Kept by
// main for the life of the process (the token read by --token-file lives here).
typedef struct stoker_cli {
    const char *prog;     // "stoker-broker"
    const char *synopsis; // what follows "usage: PROG "
    const char *about;    // paragraph after the usage line; may be NULL
    const char *epilog;   // after the options (exit codes); may be NULL
    stoker_cli_group groups[STOKER_CLI_MAX_GROUPS];
    size_t n_groups;
    stoker_log_level log_level; // --log-level, every program has it; set its default before parse
    char token[STOKER_TOKEN_MAX];
    unsigned char given[STOKER_CLI_MAX_ROWS]; // by row, in the order of the groups
} stoker_cli;

// The rows every client shares, into a stoker_client_options: --broker, --token-file
// (stoker_cli_broker_rows) and --tls-cert, --tls-key, --tls-ca,
// --tls-insecure (stoker_cli_tls_rows).
extern const stoker_cli_option stoker_cli_broker_rows[2];
extern const stoker_cli_option stoker_cli_tls_rows[4];
#define STOKER_CLI_ROWS(rows) (rows), (sizeof(rows) / sizeof((rows)[0]))

// The one version string of every executable (the project's version).
const char *stoker_version(void);

// Sets up cli for prog with no groups; --log-level defaults to log_level.
void stoker_cli_init(stoker_cli *cli, const char *prog, const char *synopsis, const char *about,
                     stoker_log_level log_level);
// Appends a group of rows (borrowed, like base). Too many groups or rows is a programming error
// (abort).
void stoker_cli_add(stoker_cli *cli, const char *heading, const stoker_cli_option *rows,
                    size_t n_rows, void *base);

// Parses argv into the groups' structs (once per cli: it adds the --log-level row). Returns -1 when
// the program should go on; otherwise the exit code main returns: 0 after --help (usage to stdout)
// or --version, 2 after a usage error (the message names the flag, the value and what is accepted,
// then the synopsis, on stderr). A hidden --cli-table prints the rows (tab-separated: name, kind,
// metavar, imin, imax, dmin, dmax, choices) for the cli test and returns 0.
int stoker_cli_parse(stoker_cli *cli, int argc, char **argv);

// Whether the flag (name without "--") was given.
int stoker_cli_given(const stoker_cli *cli, const char *name);

// Checks across flags, each printing "PROG: ..." and the synopsis to stderr and returning 2 when
// violated, 0 otherwise: name must be given (unless `unless` was, when not NULL); exactly one of
// a and b; a and b not together (why is the message).
int stoker_cli_require(const stoker_cli *cli, const char *name, const char *unless);
int stoker_cli_one_of(const stoker_cli *cli, const char *a, const char *b);
int stoker_cli_exclude(const stoker_cli *cli, const char *a, const char *b, const char *why);
// A URL flag's value: a scheme stoker speaks (tcp://, tls+tcp:// with HOST:PORT; ipc://,
// inproc://, abstract:// with a path or name). NULL (not given) passes. 0 or 2 as above; the
// message names the flag and, for "localhost:7070", suggests "tcp://localhost:7070".
int stoker_cli_check_url(const stoker_cli *cli, const char *flag, const char *url);
// The client's --broker URL (stoker_cli_check_url) and its --tls-* flags against it: a
// tls+tcp:// URL needs a consistent set, other URLs none. 0 or 2 as above.
int stoker_cli_check_tls(const stoker_cli *cli, const stoker_client_options *client);

// Prints "PROG: message" and the synopsis line to stderr; returns 2.
int stoker_cli_fail(const stoker_cli *cli, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
// Writes the usage text generated from the rows (defaults from the structs' current values).
void stoker_cli_usage(const stoker_cli *cli, FILE *f);

#endif
