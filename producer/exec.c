// The `exec` generator: a child process (/bin/sh -c CMD) writes examples to a pipe, text or raw,
// and each fill parses one. The child is started with fork+exec, doing only async-signal-safe
// calls between the two (nng's threads may be running). It does not time out a slow child: a fill
// blocks until the example arrives, the child's output ends, or the producer is told to stop.
#include "exec.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/producer.h"
#include "stoker/rng.h"

#define READ_CHUNK_BYTES  65536
#define MAX_LINE_BYTES    (64u << 20) // a longer line is an error, not unbounded growth
#define STOP_GRACE_MS     1000        // SIGTERM, then this long before SIGKILL
#define EXIT_WAIT_MS      5000        // after EOF, how long the child may take to exit
#define SCHEMA_TEXT_BYTES 1024
#define STOP_POLL_MS      10 // how often a fill waiting for the child looks at the stop flag
#define MAX_VALUE_BYTES   (64u << 20) // raw: a longer variable-length value is an error

typedef struct exec_gen {
    char *cmd;
    stoker_schema schema;
    exec_format format;
    char schema_text[SCHEMA_TEXT_BYTES];
    size_t example_bytes;
    size_t n_numbers; // elements of all fields together (text format)

    pid_t pid; // -1 once reaped
    int fd;    // read end of the child's stdout; -1 once closed
    int in_fd; // a dataset's: write end of the child's stdin (indices); -1 otherwise
    uint64_t n_items;

    // Buffered input: bytes buf[start, end) are unread.
    char *buf;
    size_t cap, start, end;
    bool eof;

    uint8_t *scratch; // one example, parsed before it is copied out
    // Variable-length fields (any: has_var): each one's value of the example being read, rows
    // rows in var_buf[f] (var_cap[f] bytes); over is 1 + the field whose value passed its bound
    // (not read: the example is refused), else 0.
    bool has_var;
    uint32_t over;
    uint8_t *var_buf[STOKER_MAX_FIELDS];
    size_t var_cap[STOKER_MAX_FIELDS];
    uint64_t var_rows[STOKER_MAX_FIELDS];
    uint64_t line; // lines (text) or records (raw) read so far
    int final_rv;  // STOKER_OK while running; the sticky result once ended
} exec_gen;

int
exec_format_parse(const char *name, exec_format *out)
{
    if (strcmp(name, "text") == 0)
        *out = EXEC_TEXT;
    else if (strcmp(name, "raw") == 0)
        *out = EXEC_RAW;
    else
        return STOKER_INVALID;
    return STOKER_OK;
}

static void
sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

// Waits up to timeout_ms for the child to exit. Returns true and fills *status when reaped
// (status 0 if someone else reaped it, e.g. SIGCHLD ignored).
static bool
reap_within(exec_gen *g, long timeout_ms, int *status)
{
    long waited_ms = 0, step_ms = 1;
    for (;;) {
        pid_t r = waitpid(g->pid, status, WNOHANG);
        if (r == g->pid || (r < 0 && errno == ECHILD)) {
            if (r < 0)
                *status = 0;
            g->pid = -1;
            return true;
        }
        if (r < 0 && errno != EINTR)
            return false;
        if (waited_ms >= timeout_ms)
            return false;
        sleep_ms(step_ms);
        waited_ms += step_ms;
        if (step_ms < 20)
            step_ms *= 2;
    }
}

// Stops the child for good: SIGTERM to its group, a grace period, then SIGKILL and a reap.
static void
stop_child(exec_gen *g)
{
    if (g->in_fd >= 0) {
        close(g->in_fd);
        g->in_fd = -1;
    }
    if (g->fd >= 0) {
        close(g->fd);
        g->fd = -1;
    }
    if (g->pid <= 0)
        return;
    int status;
    kill(-g->pid, SIGTERM);
    kill(g->pid, SIGTERM); // in case setpgid did not happen
    if (reap_within(g, STOP_GRACE_MS, &status))
        return;
    stoker_warn("exec: command '%s' (pid %d) ignored SIGTERM for %d ms; killing it", g->cmd,
                (int)g->pid, STOP_GRACE_MS);
    kill(-g->pid, SIGKILL);
    kill(g->pid, SIGKILL);
    while (waitpid(g->pid, &status, 0) < 0 && errno == EINTR) {
    }
    g->pid = -1;
}

static void
exec_destroy(void *user)
{
    exec_gen *g = user;
    if (g == NULL)
        return;
    stop_child(g);
    free(g->scratch);
    for (uint32_t f = 0; f < STOKER_MAX_FIELDS; f++)
        free(g->var_buf[f]);
    free(g->buf);
    free(g->cmd);
    free(g);
}

// Called at the end of the child's output: decides between a clean end and a failure.
static int
finish(exec_gen *g)
{
    int status = 0;
    if (g->fd >= 0) {
        close(g->fd);
        g->fd = -1;
    }
    if (g->pid > 0 && !reap_within(g, EXIT_WAIT_MS, &status)) {
        stoker_warn("exec: command '%s' closed its output but is still running after %d ms; "
                    "stopping it",
                    g->cmd, EXIT_WAIT_MS);
        stop_child(g);
        return STOKER_END_OF_DATA;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return STOKER_END_OF_DATA;
    if (WIFEXITED(status)) {
        int code = WEXITSTATUS(status);
        stoker_error("exec: command '%s' exited with status %d%s", g->cmd, code,
                     code == 127   ? " (command not found?)"
                     : code == 126 ? " (not executable?)"
                                   : "");
    } else if (WIFSIGNALED(status)) {
        stoker_error("exec: command '%s' was killed by signal %d (%s)", g->cmd, WTERMSIG(status),
                     strsignal(WTERMSIG(status)));
    } else {
        stoker_error("exec: command '%s' ended with wait status %d", g->cmd, status);
    }
    return STOKER_IO;
}

// Waits until the child's output is readable. STOKER_INTERRUPTED when the producer's stop flag
// (stoker_producer_stop_flag: SIGINT/SIGTERM) is set first, so a slow child never holds a
// producer that was told to stop.
static int
wait_readable(exec_gen *g)
{
    const volatile int *stop = stoker_producer_stop_flag();
    struct pollfd pfd = {.fd = g->fd, .events = POLLIN};
    while (!*stop) {
        int n = poll(&pfd, 1, STOP_POLL_MS);
        if (n > 0 || (n < 0 && errno != EINTR))
            return STOKER_OK; // readable, at its end, or broken: read() tells which
    }
    return STOKER_INTERRUPTED;
}

// Reads more of the child's output into buf; grows buf when it is full. Returns STOKER_OK (with
// g->eof set at the end of output), STOKER_TOO_LARGE, STOKER_IO or STOKER_INTERRUPTED (a stop,
// see wait_readable; nothing read is lost).
static int
fill_buffer(exec_gen *g)
{
    if (g->start > 0) {
        memmove(g->buf, g->buf + g->start, g->end - g->start);
        g->end -= g->start;
        g->start = 0;
    }
    if (g->end == g->cap) {
        if (g->cap >= MAX_LINE_BYTES)
            return STOKER_TOO_LARGE;
        size_t cap = g->cap * 2;
        char *buf = realloc(g->buf, cap + 1); // + 1 for a NUL after a line
        if (buf == NULL)
            return STOKER_NOMEM;
        g->buf = buf;
        g->cap = cap;
    }
    for (;;) {
        int rv = wait_readable(g);
        if (rv != STOKER_OK)
            return rv;
        ssize_t n = read(g->fd, g->buf + g->end, g->cap - g->end);
        if (n > 0) {
            g->end += (size_t)n;
            return STOKER_OK;
        }
        if (n == 0) {
            g->eof = true;
            return STOKER_OK;
        }
        if (errno != EINTR) {
            stoker_error("exec: reading the output of '%s': %s", g->cmd, strerror(errno));
            return STOKER_IO;
        }
    }
}

static bool
is_sep(char c)
{
    return c == ' ' || c == '\t' || c == ',' || c == '\r' || c == '\v' || c == '\f';
}

// Finds the field and element that number k (0-based, across all fields) belongs to.
static void
locate(const exec_gen *g, size_t k, uint32_t *field, size_t *elem)
{
    for (uint32_t f = 0; f < g->schema.n_fields; f++) {
        size_t n = stoker_field_elems(&g->schema.fields[f]);
        if (k < n) {
            *field = f;
            *elem = k;
            return;
        }
        k -= n;
    }
    *field = g->schema.n_fields;
    *elem = 0;
}

static bool
int_range(stoker_dtype dtype, long long *lo, long long *hi)
{
    switch (dtype) {
    case STOKER_INT8:
        *lo = INT8_MIN, *hi = INT8_MAX;
        return true;
    case STOKER_UINT8:
        *lo = 0, *hi = UINT8_MAX;
        return true;
    case STOKER_INT16:
        *lo = INT16_MIN, *hi = INT16_MAX;
        return true;
    case STOKER_UINT16:
        *lo = 0, *hi = UINT16_MAX;
        return true;
    case STOKER_INT32:
        *lo = INT32_MIN, *hi = INT32_MAX;
        return true;
    case STOKER_INT64:
        *lo = LLONG_MIN, *hi = LLONG_MAX;
        return true;
    default:
        return false;
    }
}

// scratch packs fields back to back, so elements may be unaligned: store with memcpy.
#define STORE_AS(type, dst, v)                                                                     \
    do {                                                                                           \
        type t_ = (type)(v);                                                                       \
        memcpy((dst), &t_, sizeof t_);                                                             \
    } while (0)

static void
store_int(void *dst, stoker_dtype dtype, long long v)
{
    switch (dtype) {
    case STOKER_INT8:
        STORE_AS(int8_t, dst, v);
        break;
    case STOKER_UINT8:
        STORE_AS(uint8_t, dst, v);
        break;
    case STOKER_INT16:
        STORE_AS(int16_t, dst, v);
        break;
    case STOKER_UINT16:
        STORE_AS(uint16_t, dst, v);
        break;
    case STOKER_INT32:
        STORE_AS(int32_t, dst, v);
        break;
    case STOKER_INT64:
        STORE_AS(int64_t, dst, v);
        break;
    default:
        break;
    }
}

// Parses token tok (NUL-terminated), number k of the current line, as an element of field into
// dst.
static int
parse_into(exec_gen *g, const char *tok, size_t k, const stoker_field *field, uint8_t *dst)
{
    char *end;
    errno = 0;

    if (field->dtype == STOKER_FLOAT32 || field->dtype == STOKER_FLOAT64) {
        double d = field->dtype == STOKER_FLOAT32 ? (double)strtof(tok, &end) : strtod(tok, &end);
        if (end == tok || *end != '\0') {
            stoker_error("exec: line %llu: number %zu ('%s') of field %s (%s) is not a number",
                         (unsigned long long)g->line, k + 1, tok, field->name,
                         stoker_dtype_name(field->dtype));
            return STOKER_INVALID;
        }
        if (field->dtype == STOKER_FLOAT32) {
            float v = (float)d;
            memcpy(dst, &v, sizeof v);
        } else {
            memcpy(dst, &d, sizeof d);
        }
        return STOKER_OK;
    }

    long long lo, hi, v;
    if (!int_range(field->dtype, &lo, &hi))
        return STOKER_INVALID; // validated at create; unreachable
    v = strtoll(tok, &end, 10);
    bool range_err = errno == ERANGE;
    if (end == tok || *end != '\0') {
        // Not integer syntax: accept an integral decimal such as "3.0" or "1e3".
        errno = 0;
        double d = strtod(tok, &end);
        if (end == tok || *end != '\0') {
            stoker_error("exec: line %llu: number %zu ('%s') of field %s (%s) is not a number",
                         (unsigned long long)g->line, k + 1, tok, field->name,
                         stoker_dtype_name(field->dtype));
            return STOKER_INVALID;
        }
        if (!isfinite(d) || d != floor(d)) {
            stoker_error("exec: line %llu: number %zu ('%s') of field %s (%s) is not an integer",
                         (unsigned long long)g->line, k + 1, tok, field->name,
                         stoker_dtype_name(field->dtype));
            return STOKER_INVALID;
        }
        range_err = d < -9.2233720368547758e18 || d >= 9.2233720368547758e18;
        v = range_err ? 0 : (long long)d;
    }
    if (range_err || v < lo || v > hi) {
        stoker_error("exec: line %llu: number %zu ('%s') of field %s is out of range for %s",
                     (unsigned long long)g->line, k + 1, tok, field->name,
                     stoker_dtype_name(field->dtype));
        return STOKER_INVALID;
    }
    store_int(dst, field->dtype, v);
    return STOKER_OK;
}

// Parses token tok (NUL-terminated) as number k of the current line into scratch.
static int
parse_number(exec_gen *g, const char *tok, size_t k, size_t scratch_off[])
{
    uint32_t f;
    size_t e;
    locate(g, k, &f, &e);
    const stoker_field *field = &g->schema.fields[f];
    return parse_into(g, tok, k, field,
                      g->scratch + scratch_off[f] + e * stoker_dtype_size(field->dtype));
}

// Makes var_buf[f] hold at least bytes bytes. STOKER_OK or STOKER_NOMEM.
static int
var_room(exec_gen *g, uint32_t f, size_t bytes)
{
    if (bytes <= g->var_cap[f])
        return STOKER_OK;
    size_t cap = g->var_cap[f] > 0 ? g->var_cap[f] : 256;
    while (cap < bytes)
        cap *= 2;
    uint8_t *p = realloc(g->var_buf[f], cap);
    if (p == NULL)
        return STOKER_NOMEM;
    g->var_buf[f] = p;
    g->var_cap[f] = cap;
    return STOKER_OK;
}

// The next token of *p (NUL-terminated in place), or NULL at the end of the line.
static char *
next_token(char **p)
{
    char *q = *p;
    while (is_sep(*q))
        q++;
    if (*q == '\0') {
        *p = q;
        return NULL;
    }
    char *tok = q;
    while (*q != '\0' && !is_sep(*q))
        q++;
    if (*q != '\0')
        *q++ = '\0';
    *p = q;
    return tok;
}

// A text line of a schema with variable-length fields: the fields in schema order, a variable
// one as its length in rows, then its rows' numbers. Returns as parse_line; a value over its
// bound sets g->over (the rest of the line is not read: the example is refused).
static int
parse_line_var(exec_gen *g, char *line, size_t scratch_off[])
{
    char *p = line;
    char *tok = next_token(&p);
    if (tok == NULL)
        return STOKER_END_OF_DATA;
    size_t k = 0; // numbers read
    g->over = 0;
    for (uint32_t f = 0; f < g->schema.n_fields; f++) {
        const stoker_field *field = &g->schema.fields[f];
        size_t esize = stoker_dtype_size(field->dtype);
        uint64_t elems;
        uint8_t *dst = NULL;
        if (field->variable) {
            if (tok == NULL) {
                stoker_error("exec: line %llu: ended before the length of field %s (%s)",
                             (unsigned long long)g->line, field->name, g->schema_text);
                return STOKER_INVALID;
            }
            char *end;
            errno = 0;
            unsigned long long n = strtoull(tok, &end, 10);
            if (end == tok || *end != '\0' || errno != 0 || tok[0] == '-' || tok[0] == '+') {
                stoker_error("exec: line %llu: number %zu ('%s') is not a length for field %s: a "
                             "variable-length value starts with its length in rows, a whole "
                             "number 0 or more",
                             (unsigned long long)g->line, k + 1, tok, field->name);
                return STOKER_INVALID;
            }
            if (field->max_rows > 0 && n > field->max_rows) {
                stoker_warn("exec: line %llu: field %s has length %llu, over its bound %u: the "
                            "example is refused (not pushed)",
                            (unsigned long long)g->line, field->name, n, field->max_rows);
                g->over = f + 1;
                g->var_rows[f] = n;
                return STOKER_OK;
            }
            g->var_rows[f] = n;
            k++;
            tok = next_token(&p);
            elems = n * (stoker_field_row_bytes(field) / esize);
        } else {
            elems = stoker_field_elems(field);
            dst = g->scratch + scratch_off[f];
        }
        for (uint64_t e = 0; e < elems; e++, k++, tok = next_token(&p)) {
            if (tok == NULL) {
                stoker_error("exec: line %llu: ended after %llu of the %llu numbers of field %s%s "
                             "(%s)",
                             (unsigned long long)g->line, (unsigned long long)e,
                             (unsigned long long)elems, field->name,
                             field->variable ? " (its length says that many)" : "", g->schema_text);
                return STOKER_INVALID;
            }
            if (field->variable) {
                if (var_room(g, f, (size_t)(e + 1) * esize) != STOKER_OK)
                    return STOKER_NOMEM;
                dst = g->var_buf[f] + e * esize;
            } else if (e > 0)
                dst += esize;
            int rv = parse_into(g, tok, k, field, dst);
            if (rv != STOKER_OK)
                return rv;
        }
    }
    if (tok != NULL) {
        size_t extra = 0;
        for (; tok != NULL; tok = next_token(&p))
            extra++;
        stoker_error("exec: line %llu: %zu numbers more than the schema and the lengths say (%zu "
                     "numbers, then %zu; %s; a variable field is its length, then its values)",
                     (unsigned long long)g->line, extra, k, extra, g->schema_text);
        return STOKER_INVALID;
    }
    return STOKER_OK;
}

// Parses one line (NUL-terminated, no newline) into scratch. Returns STOKER_OK, STOKER_INVALID
// (logged), or STOKER_END_OF_DATA for a blank line (skipped by the caller).
static int
parse_line(exec_gen *g, char *line, size_t scratch_off[])
{
    size_t k = 0;
    char *p = line;
    for (;;) {
        while (is_sep(*p))
            p++;
        if (*p == '\0')
            break;
        char *tok = p;
        while (*p != '\0' && !is_sep(*p))
            p++;
        char saved = *p;
        *p = '\0';
        if (k < g->n_numbers) {
            int rv = parse_number(g, tok, k, scratch_off);
            if (rv != STOKER_OK)
                return rv;
        }
        k++;
        *p = saved;
    }
    if (k == 0)
        return STOKER_END_OF_DATA;
    if (k != g->n_numbers) {
        stoker_error("exec: line %llu: expected %zu numbers (%s), got %zu",
                     (unsigned long long)g->line, g->n_numbers, g->schema_text, k);
        return STOKER_INVALID;
    }
    return STOKER_OK;
}

// Reads one text example into scratch.
static int
read_text(exec_gen *g, size_t scratch_off[])
{
    size_t scanned = 0; // bytes after start already searched for a newline
    for (;;) {
        char *nl = memchr(g->buf + g->start + scanned, '\n', g->end - g->start - scanned);
        if (nl == NULL && !g->eof) {
            scanned = g->end - g->start;
            int rv = fill_buffer(g);
            if (rv == STOKER_TOO_LARGE) {
                stoker_error("exec: line %llu: longer than %u bytes",
                             (unsigned long long)g->line + 1, MAX_LINE_BYTES);
                return STOKER_INVALID;
            }
            if (rv != STOKER_OK)
                return rv;
            continue;
        }
        if (nl == NULL && g->start == g->end)
            return finish(g); // clean end: nothing after the last newline
        char *line = g->buf + g->start;
        size_t len = nl != NULL ? (size_t)(nl - line) : g->end - g->start;
        line[len] = '\0'; // buf has one spare byte beyond cap for a last line without newline
        g->start += len + (nl != NULL ? 1 : 0);
        scanned = 0;
        g->line++;
        if (memchr(line, '\0', len) != NULL) {
            stoker_error("exec: line %llu: contains a NUL byte (is the output raw? use --format "
                         "raw)",
                         (unsigned long long)g->line);
            return STOKER_INVALID;
        }
        int rv =
            g->has_var ? parse_line_var(g, line, scratch_off) : parse_line(g, line, scratch_off);
        if (rv == STOKER_END_OF_DATA)
            continue; // blank line
        return rv;
    }
}

static void
swap_bytes(uint8_t *p, size_t esize, size_t n)
{
    for (size_t i = 0; i < n; i++, p += esize)
        for (size_t a = 0, b = esize - 1; a < b; a++, b--) {
            uint8_t t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}

// Reads one raw record into scratch.
static int
read_raw(exec_gen *g)
{
    while (g->end - g->start < g->example_bytes && !g->eof) {
        int rv = fill_buffer(g);
        if (rv != STOKER_OK)
            return rv;
    }
    size_t have = g->end - g->start;
    if (have == 0)
        return finish(g);
    if (have < g->example_bytes) {
        stoker_error("exec: record %llu: expected %zu bytes (%s, little-endian), got %zu before "
                     "the output ended",
                     (unsigned long long)g->line + 1, g->example_bytes, g->schema_text, have);
        return STOKER_INVALID;
    }
    memcpy(g->scratch, g->buf + g->start, g->example_bytes);
    g->start += g->example_bytes;
    g->line++;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    size_t off = 0;
    for (uint32_t f = 0; f < g->schema.n_fields; f++) {
        const stoker_field *field = &g->schema.fields[f];
        swap_bytes(g->scratch + off, stoker_dtype_size(field->dtype), stoker_field_elems(field));
        off += stoker_field_bytes(field);
    }
#else
    (void)swap_bytes;
#endif
    return STOKER_OK;
}

// Takes n bytes of the child's output into dst (NULL: skips them). STOKER_OK, STOKER_END_OF_DATA
// when the output ends first, or fill_buffer's error.
static int
raw_take(exec_gen *g, uint64_t n, uint8_t *dst)
{
    while (n > 0) {
        if (g->start == g->end) {
            if (g->eof)
                return STOKER_END_OF_DATA;
            int rv = fill_buffer(g);
            if (rv != STOKER_OK)
                return rv;
            continue;
        }
        size_t k = g->end - g->start < n ? g->end - g->start : (size_t)n;
        if (dst != NULL) {
            memcpy(dst, g->buf + g->start, k);
            dst += k;
        }
        g->start += k;
        n -= k;
    }
    return STOKER_OK;
}

// Reads one raw record of a schema with variable-length fields: the fields in schema order, a
// variable one as a uint32 length in rows, then its rows, all little-endian.
static int
read_raw_var(exec_gen *g, size_t off[])
{
    while (g->start == g->end && !g->eof) {
        int rv = fill_buffer(g);
        if (rv != STOKER_OK)
            return rv;
    }
    if (g->start == g->end)
        return finish(g);
    unsigned long long rec = (unsigned long long)g->line + 1;
    g->over = 0;
    for (uint32_t f = 0; f < g->schema.n_fields; f++) {
        const stoker_field *field = &g->schema.fields[f];
        size_t esize = stoker_dtype_size(field->dtype);
        int rv;
        const char *part = "values";
        if (!field->variable) {
            rv = raw_take(g, stoker_field_bytes(field), g->scratch + off[f]);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
            swap_bytes(g->scratch + off[f], esize, stoker_field_elems(field));
#endif
        } else {
            uint8_t c[4];
            part = "length";
            rv = raw_take(g, 4, c);
            if (rv == STOKER_OK) {
                uint64_t n =
                    c[0] | (uint64_t)c[1] << 8 | (uint64_t)c[2] << 16 | (uint64_t)c[3] << 24;
                uint64_t bytes = n * stoker_field_row_bytes(field);
                part = "values";
                if (bytes > MAX_VALUE_BYTES) {
                    stoker_error("exec: record %llu: field %s has length %llu (%llu bytes), more "
                                 "than exec reads in one value (%u MiB)%s",
                                 rec, field->name, (unsigned long long)n, (unsigned long long)bytes,
                                 MAX_VALUE_BYTES >> 20,
                                 field->max_rows > 0 && n > field->max_rows
                                     ? " and over its bound: is the output in step with the "
                                       "schema?"
                                     : "");
                    return STOKER_INVALID;
                }
                g->var_rows[f] = n;
                if (field->max_rows > 0 && n > field->max_rows) {
                    stoker_warn("exec: record %llu: field %s has length %llu, over its bound %u: "
                                "the example is refused (not pushed)",
                                rec, field->name, (unsigned long long)n, field->max_rows);
                    if (g->over == 0)
                        g->over = f + 1;
                    rv = raw_take(g, bytes, NULL);
                } else if ((rv = var_room(g, f, (size_t)bytes)) == STOKER_OK) {
                    rv = raw_take(g, bytes, g->var_buf[f]);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
                    swap_bytes(g->var_buf[f], esize, (size_t)bytes / esize);
#endif
                }
            }
        }
        (void)esize;
        if (rv == STOKER_END_OF_DATA) {
            stoker_error("exec: record %llu: the output ended inside the %s of field %s (%s, "
                         "little-endian; a variable field is a uint32 length in rows, then its "
                         "rows)",
                         rec, part, field->name, g->schema_text);
            return STOKER_INVALID;
        }
        if (rv != STOKER_OK)
            return rv;
    }
    g->line++;
    return STOKER_OK;
}

static int
exec_fill(void *user, uint64_t seq, uint64_t seed, void *const fields[])
{
    exec_gen *g = user;
    size_t off[STOKER_MAX_FIELDS], total = 0;
    (void)seq;
    (void)seed;
    if (g->final_rv != STOKER_OK)
        return g->final_rv;
    for (uint32_t f = 0; f < g->schema.n_fields; f++) {
        off[f] = total;
        total += stoker_field_bytes(&g->schema.fields[f]);
    }
    int rv = g->format == EXEC_TEXT ? read_text(g, off)
             : g->has_var           ? read_raw_var(g, off)
                                    : read_raw(g);
    if (rv == STOKER_INTERRUPTED)
        return rv; // a stop, not an end: the partial example stays buffered
    if (rv != STOKER_OK) {
        g->final_rv = rv;
        return rv;
    }
    for (uint32_t f = 0; f < g->schema.n_fields; f++) {
        const stoker_field *field = &g->schema.fields[f];
        if (!field->variable) {
            memcpy(fields[f], g->scratch + off[f], stoker_field_bytes(field));
            continue;
        }
        // A value over its bound was not read: reserving it refuses the example (logged with the
        // example's seq and counted in the producer's refused); the next fill reads the next one.
        uint64_t rows = g->var_rows[f];
        void *p;
        if ((rv = stoker_var_reserve(fields[f], rows, &p)) != STOKER_OK)
            return rv;
        if (g->over != 0 && g->over - 1 == f)
            return STOKER_TOO_LARGE; // not reached: the bound refuses it
        if (rows > 0)
            memcpy(p, g->var_buf[f], (size_t)(rows * stoker_field_row_bytes(field)));
    }
    return STOKER_OK;
}

// A dataset's item: "INDEX SEED\n" to the child's stdin, then its example as exec_fill reads it.
static int
exec_fill_item(void *user, uint64_t index, uint64_t seed, void *const fields[])
{
    exec_gen *g = user;
    if (g->final_rv != STOKER_OK)
        return g->final_rv;
    char line[64];
    int n = snprintf(line, sizeof line, "%llu %llu\n", (unsigned long long)index,
                     (unsigned long long)seed);
    for (int done = 0; done < n;) {
        ssize_t w = write(g->in_fd, line + done, (size_t)(n - done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            stoker_error("exec: command '%s' stopped reading indices (item %llu): %s", g->cmd,
                         (unsigned long long)index, strerror(errno));
            g->final_rv = STOKER_IO;
            return STOKER_IO;
        }
        done += (int)w;
    }
    int rv = exec_fill(user, index, seed, fields);
    if (rv == STOKER_END_OF_DATA) {
        stoker_error("exec: command '%s' ended without writing item %llu (out of its range?)",
                     g->cmd, (unsigned long long)index);
        g->final_rv = STOKER_IO;
        return STOKER_IO;
    }
    if (rv != STOKER_OK && rv != STOKER_INTERRUPTED)
        stoker_error("exec: command '%s' failed on item %llu", g->cmd, (unsigned long long)index);
    return rv;
}

// Child side of fork: only async-signal-safe calls until exec.
static void __attribute__((noreturn))
run_child(char *const argv[], int out_fd, int null_fd, pid_t parent)
{
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) // the parent died before prctl took effect
        _exit(1);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    const int sigs[] = {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &dfl, NULL);
    if (dup2(null_fd, STDIN_FILENO) < 0 || dup2(out_fd, STDOUT_FILENO) < 0)
        _exit(126);
    if (out_fd == STDOUT_FILENO) // dup2 onto itself keeps close-on-exec: clear it
        fcntl(out_fd, F_SETFD, 0);
    execv("/bin/sh", argv);
    _exit(127);
}

static int create(const char *cmd, const stoker_schema *schema, exec_format format,
                  uint64_t n_items, stoker_generator *out, char *err, size_t err_len);

int
exec_generator_create(const char *cmd, const stoker_schema *schema, exec_format format,
                      stoker_generator *out, char *err, size_t err_len)
{
    return create(cmd, schema, format, 0, out, err, err_len);
}

int
exec_generator_create_dataset(const char *cmd, const stoker_schema *schema, exec_format format,
                              uint64_t n_items, stoker_generator *out, char *err, size_t err_len)
{
    if (n_items == 0)
        return stoker_errorf(err, err_len, STOKER_INVALID, "exec: a dataset of 0 items");
    return create(cmd, schema, format, n_items, out, err, err_len);
}

static int
create(const char *cmd, const stoker_schema *schema, exec_format format, uint64_t n_items,
       stoker_generator *out, char *err, size_t err_len)
{
    char why[256];
    int rv;
    if (cmd == NULL || cmd[0] == '\0') {
        return stoker_errorf(err, err_len, STOKER_INVALID, "exec: no command given");
    }
    if (format != EXEC_TEXT && format != EXEC_RAW) {
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "exec: unknown output format %d (expected text or raw)", (int)format);
    }
    if ((rv = stoker_schema_validate(schema, why, sizeof why)) != STOKER_OK) {
        return stoker_errorf(err, err_len, rv, "exec: bad schema: %s", why);
    }
    for (uint32_t f = 0; f < schema->n_fields; f++) {
        stoker_dtype d = schema->fields[f].dtype;
        long long lo, hi;
        // Raw records are bytes of any dtype; text holds numbers exec can parse.
        if (format == EXEC_TEXT && d != STOKER_FLOAT32 && d != STOKER_FLOAT64 &&
            !int_range(d, &lo, &hi)) {
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "exec: field %s has dtype %s, which the text format cannot read "
                                 "(use --format raw)",
                                 schema->fields[f].name, stoker_dtype_name(d));
        }
    }

    exec_gen *g = calloc(1, sizeof *g);
    if (g == NULL)
        goto fail_alloc;
    g->pid = -1;
    g->fd = -1;
    g->in_fd = -1;
    g->n_items = n_items;
    g->schema = *schema;
    g->format = format;
    stoker_schema_format(schema, g->schema_text, sizeof g->schema_text);
    g->example_bytes = stoker_schema_example_bytes(schema);
    for (uint32_t f = 0; f < schema->n_fields; f++)
        g->n_numbers += stoker_field_elems(&schema->fields[f]);
    g->cmd = strdup(cmd);
    g->cap = READ_CHUNK_BYTES;
    while (g->cap < g->example_bytes)
        g->cap *= 2;
    g->buf = malloc(g->cap + 1);
    g->scratch = malloc(g->example_bytes + 1); // + 1: a schema of variable fields only
    g->has_var = stoker_schema_first_variable(schema) >= 0;
    if (g->cmd == NULL || g->buf == NULL || g->scratch == NULL)
        goto fail_alloc;

    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
        rv = stoker_errorf(err, err_len, STOKER_IO, "exec: pipe: %s", strerror(errno));
        goto fail_pipe;
    }
    // A dataset's child reads indices from a pipe; a stream's stdin is /dev/null.
    int in_pipe[2] = {-1, -1};
    if (n_items > 0 && pipe2(in_pipe, O_CLOEXEC) != 0) {
        rv = stoker_errorf(err, err_len, STOKER_IO, "exec: pipe: %s", strerror(errno));
        close(pipe_fds[0]);
        close(pipe_fds[1]);
        goto fail_pipe;
    }
    int null_fd = n_items > 0 ? in_pipe[0] : open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd < 0) {
        rv = stoker_errorf(err, err_len, STOKER_IO, "exec: /dev/null: %s", strerror(errno));
        goto fail_null;
    }
    char *argv[] = {"sh", "-c", g->cmd, NULL};
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        rv =
            stoker_errorf(err, err_len, STOKER_IO, "exec: fork for '%s': %s", cmd, strerror(errno));
        goto fail_fork;
    }
    if (pid == 0)
        run_child(argv, pipe_fds[1], null_fd, parent);
    setpgid(pid, pid); // also in the parent, so kill(-pid) works at once (races are harmless)
    close(null_fd);
    close(pipe_fds[1]);
    g->pid = pid;
    g->fd = pipe_fds[0];
    g->in_fd = in_pipe[1];
    stoker_debug("exec: started '%s' as pid %d (%s, %s)", cmd, (int)pid, g->schema_text,
                 format == EXEC_TEXT ? "text" : "raw");

    out->kind = "exec";
    out->schema = *schema;
    out->fill = exec_fill;
    out->user = g;
    out->destroy = exec_destroy;
    out->n_items = n_items;
    out->fill_item = NULL;
    out->fingerprint = 0;
    if (n_items > 0) {
        out->fill_item = exec_fill_item;
        out->fingerprint = stoker_hash64("exec", 4, n_items); // the child owns its listing
    }
    return STOKER_OK;

fail_fork:
    close(null_fd);
    if (in_pipe[1] >= 0)
        close(in_pipe[1]);
fail_null:
    close(pipe_fds[0]);
    close(pipe_fds[1]);
fail_pipe:
    exec_destroy(g);
    return rv;
fail_alloc:
    stoker_errorf(err, err_len, STOKER_NOMEM, "exec: out of memory");
    exec_destroy(g);
    return STOKER_NOMEM;
}

pid_t
exec_generator_pid(const stoker_generator *gen)
{
    const exec_gen *g = gen->user;
    return g->pid;
}
