// Writer and reader of float32 safetensors files (format in safetensors.h). The writer emits
// the header with stdio into memory, pads it with spaces to 8 bytes as the reference
// implementation does, and renames a temporary file into place. The reader is a small JSON
// parser for exactly this header shape (objects, strings, integer arrays); it is not a general
// JSON library and decodes no \u escapes.
#include "safetensors.h"

#include "stoker/error.h"

#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c writes host floats as little-endian data"
#endif

#define MAX_HEADER_BYTES (100u * 1024 * 1024)

static uint64_t
element_count(const safetensors_tensor *t)
{
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

// Text that goes into JSON unescaped: refuse anything that would need escaping.
static bool
plain_text(const char *text)
{
    if (text == NULL)
        return false;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        if (*p < 0x20 || *p == '"' || *p == '\\' || *p == 0x7f)
            return false;
    return true;
}

static bool
plain_name(const char *name)
{
    return name != NULL && name[0] != '\0' && strcmp(name, "__metadata__") != 0 && plain_text(name);
}

static int
by_name(const void *a, const void *b)
{
    const safetensors_tensor *const *ta = a, *const *tb = b;
    return strcmp((*ta)->name, (*tb)->name);
}

// Builds the padded JSON header for the tensors in sorted order. *out is malloc'd.
static int
build_header(const safetensors_tensor **sorted, size_t count, const safetensors_meta *meta,
             size_t n_meta, char **out, size_t *out_len)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (mem == NULL)
        return STOKER_NOMEM;
    fputs("{\"__metadata__\":{\"format\":\"pt\"", mem);
    for (size_t i = 0; i < n_meta; i++)
        fprintf(mem, ",\"%s\":\"%s\"", meta[i].key, meta[i].value);
    fputc('}', mem);
    uint64_t offset = 0;
    for (size_t i = 0; i < count; i++) {
        const safetensors_tensor *t = sorted[i];
        uint64_t bytes = element_count(t) * sizeof(float);
        fprintf(mem, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[", t->name);
        for (uint32_t d = 0; d < t->ndim; d++)
            fprintf(mem, "%s%llu", d ? "," : "", (unsigned long long)t->shape[d]);
        fprintf(mem, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                (unsigned long long)(offset + bytes));
        offset += bytes;
    }
    fputc('}', mem);
    // The data that follows starts 8-aligned, as the reference writer guarantees.
    while ((8 + ftell(mem)) % 8 != 0)
        fputc(' ', mem);
    if (ferror(mem) || fclose(mem) != 0) {
        free(buf);
        return STOKER_NOMEM;
    }
    *out = buf;
    *out_len = len;
    return STOKER_OK;
}

// Makes a rename in path's folder durable (the folder's entry points at the new file even after a
// machine crash). 0, or -1 with errno set when the folder was opened but not synced.
static int
sync_folder(const char *path)
{
    const char *slash = strrchr(path, '/');
    char folder[4096];
    if (slash == NULL)
        snprintf(folder, sizeof(folder), ".");
    else if (slash == path)
        snprintf(folder, sizeof(folder), "/");
    else
        snprintf(folder, sizeof(folder), "%.*s", (int)(slash - path), path);
    int fd = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return 0; // a folder we cannot open cannot be synced either: the rename stands
    int rv = fsync(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return rv;
}

static bool
write_all(FILE *f, const void *data, size_t bytes)
{
    return bytes == 0 || fwrite(data, 1, bytes, f) == bytes;
}

int
safetensors_write(const char *path, const safetensors_tensor *tensors, size_t count, char *err,
                  size_t err_len)
{
    return safetensors_write_meta(path, tensors, count, NULL, 0, err, err_len);
}

int
safetensors_write_meta(const char *path, const safetensors_tensor *tensors, size_t count,
                       const safetensors_meta *meta, size_t n_meta, char *err, size_t err_len)
{
    if (err_len > 0)
        err[0] = '\0';
    for (size_t i = 0; i < n_meta; i++) {
        if (!plain_text(meta[i].key) || meta[i].key[0] == '\0' ||
            strcmp(meta[i].key, "format") == 0 || !plain_text(meta[i].value))
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "%s: metadata entry %zu ('%s') not writable", path, i,
                                 meta[i].key ? meta[i].key : "(null)");
    }
    const safetensors_tensor **sorted = malloc((count ? count : 1) * sizeof(*sorted));
    if (sorted == NULL)
        return stoker_errorf(err, err_len, STOKER_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < count; i++) {
        if (!plain_name(tensors[i].name) || tensors[i].ndim > SAFETENSORS_MAX_DIMS) {
            free(sorted);
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "%s: tensor %zu: name '%s' or %u dims not writable", path, i,
                                 tensors[i].name ? tensors[i].name : "(null)", tensors[i].ndim);
        }
        sorted[i] = &tensors[i];
    }
    qsort(sorted, count, sizeof(*sorted), by_name);
    for (size_t i = 1; i < count; i++) {
        if (strcmp(sorted[i - 1]->name, sorted[i]->name) == 0) {
            int rv = stoker_errorf(err, err_len, STOKER_INVALID,
                                   "%s: tensor name '%s' appears twice", path, sorted[i]->name);
            free(sorted);
            return rv;
        }
    }

    char *header = NULL;
    size_t header_len = 0;
    int rv = build_header(sorted, count, meta, n_meta, &header, &header_len);
    if (rv != STOKER_OK) {
        free(sorted);
        return stoker_errorf(err, err_len, rv, "%s: out of memory", path);
    }

    size_t tmp_len = strlen(path) + 16;
    char *tmp = malloc(tmp_len);
    if (tmp == NULL) {
        rv = stoker_errorf(err, err_len, STOKER_NOMEM, "%s: out of memory", path);
        goto free_header;
    }
    snprintf(tmp, tmp_len, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        rv = stoker_errorf(err, err_len, STOKER_IO,
                           "%s: cannot create a temporary file beside it: %s", path,
                           strerror(errno));
        goto free_tmp;
    }
    // mkstemp makes the file 0600; a weights file is meant to be shared like any output.
    (void)fchmod(fd, 0644);
    FILE *f = fdopen(fd, "wb");
    if (f == NULL) {
        rv = stoker_errorf(err, err_len, STOKER_IO, "%s: %s", tmp, strerror(errno));
        close(fd);
        goto unlink_tmp;
    }
    unsigned char len_le[8];
    for (int i = 0; i < 8; i++)
        len_le[i] = (unsigned char)((uint64_t)header_len >> (8 * i));
    bool ok = write_all(f, len_le, sizeof(len_le)) && write_all(f, header, header_len);
    for (size_t i = 0; ok && i < count; i++)
        ok = write_all(f, sorted[i]->data, element_count(sorted[i]) * sizeof(float));
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int saved = errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        saved = errno;
    }
    if (!ok) {
        rv = stoker_errorf(err, err_len, STOKER_IO, "%s: write failed: %s", tmp, strerror(saved));
        goto unlink_tmp;
    }
    if (rename(tmp, path) != 0) {
        rv = stoker_errorf(err, err_len, STOKER_IO, "%s: cannot rename %s into place: %s", path,
                           tmp, strerror(errno));
        goto unlink_tmp;
    }
    if (sync_folder(path) != 0) {
        rv = stoker_errorf(err, err_len, STOKER_IO,
                           "%s: in place, but its folder's sync failed: %s", path, strerror(errno));
        goto free_tmp;
    }
    rv = STOKER_OK;
    goto free_tmp;

unlink_tmp:
    unlink(tmp);
free_tmp:
    free(tmp);
free_header:
    free(header);
    free(sorted);
    return rv;
}

// ---- reader ----

struct safetensors_file {
    size_t count;
    safetensors_tensor *tensors; // sorted by name; names malloc'd
    float *data;                 // the whole data section
    size_t n_meta;
    char **meta; // __metadata__: key, value, key, value... (2 * n_meta, malloc'd)
};

typedef struct parser {
    const char *start, *p, *end;
    char *err;
    size_t err_len;
} parser;

static void
skip_ws(parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static bool
expect(parser *ps, char c)
{
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == c) {
        ps->p++;
        return true;
    }
    return false;
}

static int
bad(parser *ps, const char *what)
{
    return stoker_errorf(ps->err, ps->err_len, STOKER_INVALID, "malformed header: %s at byte %td",
                         what, ps->p - ps->start);
}

// Parses a string into a malloc'd copy (*out), decoding the simple escapes.
static int
parse_string(parser *ps, char **out)
{
    if (!expect(ps, '"'))
        return bad(ps, "expected a string");
    char *s = malloc((size_t)(ps->end - ps->p) + 1);
    if (s == NULL)
        return STOKER_NOMEM;
    size_t n = 0;
    while (ps->p < ps->end && *ps->p != '"') {
        char c = *ps->p++;
        if (c == '\\') {
            if (ps->p >= ps->end)
                break;
            char e = *ps->p++;
            switch (e) {
            case '"':
            case '\\':
            case '/':
                c = e;
                break;
            case 'n':
                c = '\n';
                break;
            case 't':
                c = '\t';
                break;
            case 'r':
                c = '\r';
                break;
            case 'b':
                c = '\b';
                break;
            case 'f':
                c = '\f';
                break;
            default:
                free(s);
                return bad(ps, "unsupported escape in a string");
            }
        }
        s[n++] = c;
    }
    if (ps->p >= ps->end) {
        free(s);
        return bad(ps, "unterminated string");
    }
    ps->p++;
    s[n] = '\0';
    *out = s;
    return STOKER_OK;
}

static int
parse_uint(parser *ps, uint64_t *out)
{
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
        return bad(ps, "expected a non-negative integer");
    uint64_t v = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        uint64_t digit = (uint64_t)(*ps->p - '0');
        if (v > (UINT64_MAX - digit) / 10)
            return bad(ps, "integer overflow");
        v = v * 10 + digit;
        ps->p++;
    }
    *out = v;
    return STOKER_OK;
}

// [n, n, ...] with at most max entries.
static int
parse_uint_array(parser *ps, uint64_t *vals, uint32_t max, uint32_t *count)
{
    if (!expect(ps, '['))
        return bad(ps, "expected '['");
    uint32_t n = 0;
    if (!expect(ps, ']')) {
        do {
            if (n == max)
                return bad(ps, "array too long");
            int rv = parse_uint(ps, &vals[n++]);
            if (rv != STOKER_OK)
                return rv;
        } while (expect(ps, ','));
        if (!expect(ps, ']'))
            return bad(ps, "expected ']'");
    }
    *count = n;
    return STOKER_OK;
}

// Skips any JSON value (used for __metadata__ and keys we do not know).
static int
skip_value(parser *ps, int depth)
{
    if (depth > 32)
        return bad(ps, "nesting too deep");
    skip_ws(ps);
    if (ps->p >= ps->end)
        return bad(ps, "expected a value");
    char c = *ps->p;
    if (c == '"') {
        char *s = NULL;
        int rv = parse_string(ps, &s);
        free(s);
        return rv;
    }
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        ps->p++;
        if (expect(ps, close))
            return STOKER_OK;
        do {
            int rv;
            if (c == '{') {
                char *key = NULL;
                if ((rv = parse_string(ps, &key)) != STOKER_OK)
                    return rv;
                free(key);
                if (!expect(ps, ':'))
                    return bad(ps, "expected ':'");
            }
            if ((rv = skip_value(ps, depth + 1)) != STOKER_OK)
                return rv;
        } while (expect(ps, ','));
        return expect(ps, close) ? STOKER_OK : bad(ps, "unclosed object or array");
    }
    // number, true, false, null
    const char *start = ps->p;
    while (ps->p < ps->end && strchr(",}] \t\r\n", *ps->p) == NULL)
        ps->p++;
    return ps->p > start ? STOKER_OK : bad(ps, "expected a value");
}

// {"dtype": "F32", "shape": [...], "data_offsets": [b, e]} into t; offsets into begin/end.
static int
parse_tensor(parser *ps, safetensors_tensor *t, uint64_t *begin, uint64_t *end)
{
    bool have_dtype = false, have_shape = false, have_offsets = false;
    if (!expect(ps, '{'))
        return bad(ps, "expected a tensor object");
    if (expect(ps, '}'))
        return bad(ps, "empty tensor object");
    do {
        char *key = NULL;
        int rv = parse_string(ps, &key);
        if (rv != STOKER_OK)
            return rv;
        if (!expect(ps, ':')) {
            free(key);
            return bad(ps, "expected ':'");
        }
        if (strcmp(key, "dtype") == 0) {
            char *dtype = NULL;
            rv = parse_string(ps, &dtype);
            if (rv == STOKER_OK && strcmp(dtype, "F32") != 0)
                rv = stoker_errorf(ps->err, ps->err_len, STOKER_INVALID,
                                   "dtype %s not supported (only F32)", dtype);
            free(dtype);
            have_dtype = true;
        } else if (strcmp(key, "shape") == 0) {
            rv = parse_uint_array(ps, t->shape, SAFETENSORS_MAX_DIMS, &t->ndim);
            have_shape = true;
        } else if (strcmp(key, "data_offsets") == 0) {
            uint64_t off[2];
            uint32_t n = 0;
            rv = parse_uint_array(ps, off, 2, &n);
            if (rv == STOKER_OK && n != 2)
                rv = bad(ps, "data_offsets needs two numbers");
            *begin = off[0];
            *end = off[1];
            have_offsets = true;
        } else {
            rv = skip_value(ps, 1);
        }
        free(key);
        if (rv != STOKER_OK)
            return rv;
    } while (expect(ps, ','));
    if (!expect(ps, '}'))
        return bad(ps, "expected '}' after a tensor");
    if (!have_dtype || !have_shape || !have_offsets)
        return bad(ps, "tensor lacks dtype, shape or data_offsets");
    return STOKER_OK;
}

// The __metadata__ object: string keys to string values (the format's rule).
static int
parse_meta(parser *ps, safetensors_file *f)
{
    if (!expect(ps, '{'))
        return bad(ps, "__metadata__ is not an object");
    if (expect(ps, '}'))
        return STOKER_OK;
    do {
        char **grown = realloc(f->meta, (2 * f->n_meta + 2) * sizeof(*grown));
        if (grown == NULL)
            return STOKER_NOMEM;
        f->meta = grown;
        char *key = NULL, *value = NULL;
        int rv = parse_string(ps, &key);
        if (rv != STOKER_OK)
            return rv;
        if (!expect(ps, ':')) {
            free(key);
            return bad(ps, "expected ':'");
        }
        if ((rv = parse_string(ps, &value)) != STOKER_OK) {
            free(key);
            return rv;
        }
        f->meta[2 * f->n_meta] = key;
        f->meta[2 * f->n_meta + 1] = value;
        f->n_meta++;
    } while (expect(ps, ','));
    return expect(ps, '}') ? STOKER_OK : bad(ps, "expected '}' after __metadata__");
}

static int
parse_header(parser *ps, safetensors_file *f, uint64_t data_bytes)
{
    size_t cap = 0;
    if (!expect(ps, '{'))
        return bad(ps, "header is not a JSON object");
    if (expect(ps, '}'))
        return STOKER_OK;
    do {
        char *name = NULL;
        int rv = parse_string(ps, &name);
        if (rv != STOKER_OK)
            return rv;
        if (!expect(ps, ':')) {
            free(name);
            return bad(ps, "expected ':'");
        }
        if (strcmp(name, "__metadata__") == 0) {
            free(name);
            if ((rv = parse_meta(ps, f)) != STOKER_OK)
                return rv;
            continue;
        }
        if (f->count == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            safetensors_tensor *grown = realloc(f->tensors, ncap * sizeof(*grown));
            if (grown == NULL) {
                free(name);
                return STOKER_NOMEM;
            }
            f->tensors = grown;
            cap = ncap;
        }
        safetensors_tensor *t = &f->tensors[f->count];
        memset(t, 0, sizeof(*t));
        t->name = name;
        f->count++; // now owned by f, freed by safetensors_destroy
        uint64_t begin = 0, end = 0;
        if ((rv = parse_tensor(ps, t, &begin, &end)) != STOKER_OK)
            return rv;
        uint64_t bytes = 0;
        if (end < begin || end > data_bytes || begin % sizeof(float) != 0 ||
            __builtin_mul_overflow(element_count(t), sizeof(float), &bytes) || bytes != end - begin)
            return stoker_errorf(
                ps->err, ps->err_len, STOKER_INVALID,
                "tensor '%s': data_offsets [%llu, %llu] do not fit its shape or the "
                "%llu data bytes",
                name, (unsigned long long)begin, (unsigned long long)end,
                (unsigned long long)data_bytes);
        t->data = f->data + begin / sizeof(float);
    } while (expect(ps, ','));
    if (!expect(ps, '}'))
        return bad(ps, "expected '}' at the end of the header");
    return STOKER_OK;
}

static int
by_tensor_name(const void *a, const void *b)
{
    return strcmp(((const safetensors_tensor *)a)->name, ((const safetensors_tensor *)b)->name);
}

int
safetensors_read(const char *path, safetensors_file **out, char *err, size_t err_len)
{
    if (err_len > 0)
        err[0] = '\0';
    int rv = STOKER_OK;
    char *header = NULL;
    FILE *in = fopen(path, "rb");
    if (in == NULL)
        return stoker_errorf(err, err_len, STOKER_IO, "%s: %s", path, strerror(errno));
    safetensors_file *f = calloc(1, sizeof(*f));
    if (f == NULL) {
        rv = STOKER_NOMEM;
        goto close_in;
    }

    unsigned char len_le[8];
    if (fread(len_le, 1, 8, in) != 8) {
        rv = stoker_errorf(err, err_len, STOKER_INVALID, "%s: shorter than 8 bytes", path);
        goto destroy;
    }
    uint64_t header_len = 0;
    for (int i = 0; i < 8; i++)
        header_len |= (uint64_t)len_le[i] << (8 * i);
    if (fseek(in, 0, SEEK_END) != 0) {
        rv = stoker_errorf(err, err_len, STOKER_IO, "%s: %s", path, strerror(errno));
        goto destroy;
    }
    long file_len = ftell(in);
    if (file_len < 0 || header_len > MAX_HEADER_BYTES || 8 + header_len > (uint64_t)file_len) {
        rv = stoker_errorf(err, err_len, STOKER_INVALID,
                           "%s: header length %llu does not fit the file", path,
                           (unsigned long long)header_len);
        goto destroy;
    }
    uint64_t data_bytes = (uint64_t)file_len - 8 - header_len;
    header = malloc(header_len + 1);
    f->data = malloc(data_bytes ? data_bytes : 1);
    if (header == NULL || f->data == NULL) {
        rv = stoker_errorf(err, err_len, STOKER_NOMEM, "%s: out of memory", path);
        goto destroy;
    }
    if (fseek(in, 8, SEEK_SET) != 0 || fread(header, 1, header_len, in) != header_len ||
        fread(f->data, 1, data_bytes, in) != data_bytes) {
        rv = stoker_errorf(err, err_len, STOKER_IO, "%s: read failed", path);
        goto destroy;
    }
    header[header_len] = '\0';

    char why[200] = "";
    parser ps = {.start = header,
                 .p = header,
                 .end = header + header_len,
                 .err = why,
                 .err_len = sizeof(why)};
    if ((rv = parse_header(&ps, f, data_bytes)) != STOKER_OK) {
        stoker_errorf(err, err_len, rv, "%s: %s", path, why[0] ? why : "out of memory");
        goto destroy;
    }
    skip_ws(&ps);
    if (ps.p != ps.end) {
        rv = stoker_errorf(err, err_len, STOKER_INVALID, "%s: trailing bytes after the JSON header",
                           path);
        goto destroy;
    }
    qsort(f->tensors, f->count, sizeof(*f->tensors), by_tensor_name);
    free(header);
    fclose(in);
    *out = f;
    return STOKER_OK;

destroy:
    free(header);
    safetensors_destroy(f);
close_in:
    fclose(in);
    return rv;
}

size_t
safetensors_count(const safetensors_file *f)
{
    return f->count;
}

const safetensors_tensor *
safetensors_get(const safetensors_file *f, size_t i)
{
    return i < f->count ? &f->tensors[i] : NULL;
}

const safetensors_tensor *
safetensors_find(const safetensors_file *f, const char *name)
{
    safetensors_tensor key = {.name = name};
    return bsearch(&key, f->tensors, f->count, sizeof(*f->tensors), by_tensor_name);
}

const char *
safetensors_meta_get(const safetensors_file *f, const char *key)
{
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[2 * i], key) == 0)
            return f->meta[2 * i + 1];
    return NULL;
}

void
safetensors_destroy(safetensors_file *f)
{
    if (f == NULL)
        return;
    for (size_t i = 0; i < 2 * f->n_meta; i++)
        free(f->meta[i]);
    free(f->meta);
    for (size_t i = 0; i < f->count; i++)
        free((char *)f->tensors[i].name);
    free(f->tensors);
    free(f->data);
    free(f);
}

unsigned
safetensors_remove_stale(const char *path)
{
    char *dir_copy = strdup(path), *base_copy = strdup(path);
    unsigned removed = 0;
    if (dir_copy == NULL || base_copy == NULL)
        goto out;
    const char *dir = dirname(dir_copy), *base = basename(base_copy);
    size_t base_len = strlen(base);
    DIR *d = opendir(dir);
    if (d == NULL)
        goto out;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        // Exactly base + ".tmp." + mkstemp's six characters.
        if (strlen(e->d_name) != base_len + 11 || strncmp(e->d_name, base, base_len) != 0 ||
            strncmp(e->d_name + base_len, ".tmp.", 5) != 0)
            continue;
        char full[4096];
        if (snprintf(full, sizeof(full), "%s/%s", dir, e->d_name) >= (int)sizeof(full))
            continue;
        if (unlink(full) == 0)
            removed++;
    }
    closedir(d);
out:
    free(dir_copy);
    free(base_copy);
    return removed;
}
