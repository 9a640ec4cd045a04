// The tokens generator (tokens.h): shards mapped read-only, windows copied out with the token
// width converted to the field's dtype.
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stoker/error.h"
#include "stoker/rng.h"
#include "tokens.h"

#define LLMC_HEADER_INTS  256
#define LLMC_HEADER_BYTES (LLMC_HEADER_INTS * 4)

typedef struct shard {
    char *path;
    const uint8_t *map; // the whole file
    size_t map_len;
    const uint8_t *tokens; // past the header
    uint64_t n_tokens;
    uint32_t width;       // bytes a token: 2 or 4
    uint64_t windows;     // a dataset's windows in this shard
    uint64_t first_item;  // the dataset index of its first window
    uint64_t draw_weight; // windows at any offset: n_tokens - window + 1
} shard;

// A document (or a piece of one): where its tokens are.
typedef struct document {
    uint64_t start; // token offset in its shard
    uint32_t shard, len;
} document;

typedef struct tokens_gen {
    shard *shards;
    uint32_t n_shards;
    uint32_t window, stride;
    stoker_dtype dtype;
    uint64_t tokens, windows, draw_total;
    document *docs; // documents mode: windows counts them
    size_t docs_cap;
} tokens_gen;

static void
tokens_destroy(void *user)
{
    tokens_gen *g = user;
    if (g == NULL)
        return;
    for (uint32_t i = 0; i < g->n_shards; i++) {
        if (g->shards[i].map != NULL)
            munmap((void *)g->shards[i].map, g->shards[i].map_len);
        free(g->shards[i].path);
    }
    free(g->shards);
    free(g->docs);
    free(g);
}

static uint32_t
le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

// Maps s->path and reads its header: STOKER_OK, or an error naming the file.
static int
shard_open(shard *s, tokens_format format, char *err, size_t err_len)
{
    int fd = open(s->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return stoker_errorf(err, err_len, STOKER_IO, "%s: %s", s->path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return stoker_errorf(err, err_len, STOKER_INVALID, "%s: not a regular file", s->path);
    }
    size_t len = (size_t)st.st_size;
    if (len == 0) {
        close(fd);
        return stoker_errorf(err, err_len, STOKER_INVALID, "%s: empty", s->path);
    }
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return stoker_errorf(err, err_len, STOKER_IO, "%s: cannot map: %s", s->path,
                             strerror(errno));
    madvise(map, len, MADV_RANDOM); // windows are read at scattered offsets
    s->map = map;
    s->map_len = len;
    const uint8_t *p = map;
    int llmc = format == TOKENS_LLMC ||
               (format == TOKENS_AUTO && len >= 4 && le32(p) == TOKENS_LLMC_MAGIC);
    if (!llmc) {
        if (len % 2 != 0)
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "%s: %zu bytes, an odd size for plain uint16 tokens", s->path,
                                 len);
        s->tokens = p;
        s->n_tokens = len / 2;
        s->width = 2;
        return STOKER_OK;
    }
    if (len < LLMC_HEADER_BYTES)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "%s: %zu bytes, shorter than llm.c's %d-byte header", s->path, len,
                             LLMC_HEADER_BYTES);
    uint32_t magic = le32(p), version = le32(p + 4), count = le32(p + 8);
    if (magic != TOKENS_LLMC_MAGIC)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "%s: header magic is %u, llm.c's is %d (is it a plain uint16 "
                             "shard? use --shard-format raw)",
                             s->path, magic, TOKENS_LLMC_MAGIC);
    if (version != 1 && version != 2)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "%s: header version %u: stoker reads version 1 (uint16 tokens) "
                             "and 2 (uint32 tokens)",
                             s->path, version);
    s->width = version == 1 ? 2 : 4;
    uint64_t want = LLMC_HEADER_BYTES + (uint64_t)count * s->width;
    if (want != len)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "%s: the header says %u tokens (%llu bytes with the header), the "
                             "file has %zu bytes",
                             s->path, count, (unsigned long long)want, len);
    s->tokens = p + LLMC_HEADER_BYTES;
    s->n_tokens = count;
    return STOKER_OK;
}

// Lists the shards of path (a file, a folder's *.bin, or a glob pattern) into g->shards.
static int
list_shards(tokens_gen *g, const char *path, char *err, size_t err_len)
{
    char pattern[4096];
    struct stat st;
    int found = stat(path, &st) == 0;
    if (!found && strpbrk(path, "*?[") == NULL)
        return stoker_errorf(err, err_len, STOKER_INVALID, "--tokens '%s': %s", path,
                             strerror(errno));
    if (found && S_ISDIR(st.st_mode))
        snprintf(pattern, sizeof(pattern), "%s/*.bin", path);
    else
        snprintf(pattern, sizeof(pattern), "%s", path);
    glob_t gl;
    int rv = glob(pattern, 0, NULL, &gl);
    if (rv == GLOB_NOMATCH || (rv == 0 && gl.gl_pathc == 0)) {
        if (rv == 0)
            globfree(&gl);
        return stoker_errorf(err, err_len, STOKER_INVALID, "--tokens '%s': no shard %s", path,
                             found && S_ISDIR(st.st_mode) ? "(*.bin) in that folder" : "matches");
    }
    if (rv != 0)
        return stoker_errorf(err, err_len, STOKER_IO, "--tokens '%s': cannot list it", path);
    if (gl.gl_pathc > TOKENS_MAX_SHARDS) {
        size_t n = gl.gl_pathc;
        globfree(&gl);
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "--tokens '%s': %zu shards, more than the %d one producer opens", path,
                             n, TOKENS_MAX_SHARDS);
    }
    g->shards = calloc(gl.gl_pathc, sizeof(*g->shards)); // glob sorts the matches
    if (g->shards == NULL) {
        globfree(&gl);
        return stoker_errorf(err, err_len, STOKER_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < gl.gl_pathc; i++) {
        if ((g->shards[i].path = strdup(gl.gl_pathv[i])) == NULL) {
            globfree(&gl);
            return stoker_errorf(err, err_len, STOKER_NOMEM, "out of memory");
        }
        g->n_shards++;
    }
    globfree(&gl);
    return STOKER_OK;
}

// Copies n tokens of width bytes (little-endian, as the shards and this host store them) from
// src into dst as dtype: one plain loop per case, which the compiler vectorizes.
static void
convert(void *restrict dst, stoker_dtype dtype, const uint8_t *restrict src, uint32_t width,
        uint32_t n)
{
    _Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "shards are little-endian");
    if (width == 2 && dtype == STOKER_UINT16) {
        memcpy(dst, src, (size_t)n * 2);
        return;
    }
    if (width == 2) {
        const uint16_t *restrict s = (const uint16_t *)(const void *)src; // 2-byte aligned
        if (dtype == STOKER_INT32) {
            int32_t *restrict d = dst;
            for (uint32_t i = 0; i < n; i++)
                d[i] = s[i];
        } else {
            int64_t *restrict d = dst;
            for (uint32_t i = 0; i < n; i++)
                d[i] = s[i];
        }
        return;
    }
    const uint32_t *restrict s = (const uint32_t *)(const void *)src; // past the 1 KiB header
    if (dtype == STOKER_INT32) {
        memcpy(dst, s, (size_t)n * 4);
    } else {
        int64_t *restrict d = dst;
        for (uint32_t i = 0; i < n; i++)
            d[i] = s[i];
    }
}

static void
copy_window(const tokens_gen *g, const shard *s, uint64_t offset, void *dst)
{
    convert(dst, g->dtype, s->tokens + offset * s->width, s->width, g->window);
}

static int
fill_stream(void *user, uint64_t seq, uint64_t seed, void *const fields[])
{
    (void)seq;
    const tokens_gen *g = user;
    stoker_rng rng;
    stoker_rng_seed(&rng, seed);
    uint64_t r = stoker_rng_u64(&rng) % g->draw_total;
    uint32_t i = 0;
    while (r >= g->shards[i].draw_weight) // shards are few next to windows: a linear walk
        r -= g->shards[i++].draw_weight;
    copy_window(g, &g->shards[i], r, fields[0]);
    return STOKER_OK;
}

static int
fill_item(void *user, uint64_t index, uint64_t seed, void *const fields[])
{
    (void)seed;
    const tokens_gen *g = user;
    if (index >= g->windows)
        return STOKER_INVALID;
    uint32_t lo = 0, hi = g->n_shards; // the last shard whose first_item <= index (each has one)
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (g->shards[mid].first_item <= index)
            lo = mid;
        else
            hi = mid;
    }
    const shard *s = &g->shards[lo];
    copy_window(g, s, (index - s->first_item) * g->stride, fields[0]);
    return STOKER_OK;
}

// Documents mode: writes document d through the variable-length slot.
static int
copy_document(const tokens_gen *g, const document *d, void *slot)
{
    const shard *s = &g->shards[d->shard];
    void *dst = NULL;
    int rv = stoker_var_reserve(slot, d->len, &dst);
    if (rv == STOKER_OK)
        convert(dst, g->dtype, s->tokens + d->start * s->width, s->width, d->len);
    return rv;
}

static int
fill_document(void *user, uint64_t seq, uint64_t seed, void *const fields[])
{
    (void)seq;
    const tokens_gen *g = user;
    stoker_rng rng;
    stoker_rng_seed(&rng, seed);
    return copy_document(g, &g->docs[stoker_rng_u64(&rng) % g->windows], fields[0]);
}

static int
fill_document_item(void *user, uint64_t index, uint64_t seed, void *const fields[])
{
    (void)seed;
    const tokens_gen *g = user;
    return index < g->windows ? copy_document(g, &g->docs[index], fields[0]) : STOKER_INVALID;
}

static int
add_document(tokens_gen *g, uint32_t shard_index, uint64_t start, uint64_t len, uint32_t max_doc)
{
    while (len > 0) {
        uint64_t piece = max_doc > 0 && len > max_doc ? max_doc : len;
        if (piece > UINT32_MAX)
            piece = UINT32_MAX;
        if (g->windows == g->docs_cap) {
            size_t cap = g->docs_cap ? 2 * g->docs_cap : 1024;
            document *d = realloc(g->docs, cap * sizeof(*d));
            if (d == NULL)
                return STOKER_NOMEM;
            g->docs = d;
            g->docs_cap = cap;
        }
        g->docs[g->windows++] =
            (document){.start = start, .shard = shard_index, .len = (uint32_t)piece};
        start += piece;
        len -= piece;
    }
    return STOKER_OK;
}

// Finds the documents of shard i: the runs between eot tokens, empty ones skipped.
static int
index_documents(tokens_gen *g, uint32_t i, uint32_t eot, uint32_t max_doc)
{
    const shard *s = &g->shards[i];
    uint64_t begin = 0;
    for (uint64_t t = 0; t <= s->n_tokens; t++) {
        if (t < s->n_tokens) {
            uint32_t tok = s->width == 2 ? ((const uint16_t *)(const void *)s->tokens)[t]
                                         : ((const uint32_t *)(const void *)s->tokens)[t];
            if (tok != eot)
                continue;
        }
        if (t > begin && add_document(g, i, begin, t - begin, max_doc) != STOKER_OK)
            return STOKER_NOMEM;
        begin = t + 1;
    }
    return STOKER_OK;
}

int
tokens_generator_open(const tokens_config *cfg, stoker_generator *out, char *err, size_t err_len)
{
    if (!cfg->documents && (cfg->window == 0 || cfg->window > TOKENS_MAX_WINDOW))
        return stoker_errorf(err, err_len, STOKER_INVALID, "--window %u: expected 1..%u tokens",
                             cfg->window, TOKENS_MAX_WINDOW);
    stoker_dtype dtype = cfg->dtype == STOKER_DTYPE_INVALID ? STOKER_INT32 : cfg->dtype;
    if (dtype != STOKER_INT32 && dtype != STOKER_INT64 && dtype != STOKER_UINT16)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "tokens come as int32, int64 or uint16, not %s",
                             stoker_dtype_name(dtype));
    tokens_gen *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return stoker_errorf(err, err_len, STOKER_NOMEM, "out of memory");
    g->window = cfg->window;
    g->stride = cfg->stride > 0 ? cfg->stride : cfg->window;
    g->dtype = dtype;
    int rv = list_shards(g, cfg->path, err, err_len);
    uint64_t fingerprint =
        stoker_hash64(&g->window, sizeof(g->window), g->stride ^ ((uint64_t)cfg->documents << 40));
    for (uint32_t i = 0; rv == STOKER_OK && i < g->n_shards; i++) {
        shard *s = &g->shards[i];
        if ((rv = shard_open(s, cfg->format, err, err_len)) != STOKER_OK)
            break;
        if (s->width == 4 && dtype == STOKER_UINT16) {
            rv = stoker_errorf(err, err_len, STOKER_INVALID,
                               "%s: uint32 tokens (llm.c version 2) do not fit --token-dtype "
                               "uint16",
                               s->path);
            break;
        }
        // By file name, not path: producers on other boxes mount the shards elsewhere.
        const char *base = strrchr(s->path, '/');
        base = base != NULL ? base + 1 : s->path;
        if (cfg->documents) {
            uint64_t before = g->windows;
            if ((rv = index_documents(g, i, cfg->eot, cfg->max_doc)) != STOKER_OK) {
                rv = stoker_errorf(err, err_len, rv, "out of memory indexing %s", s->path);
                break;
            }
            g->tokens += s->n_tokens;
            fingerprint = stoker_hash64(base, strlen(base) + 1,
                                        fingerprint ^ s->n_tokens ^ (g->windows - before));
            continue;
        }
        if (s->n_tokens < g->window) {
            rv = stoker_errorf(err, err_len, STOKER_INVALID,
                               "%s: %llu tokens, fewer than one window of %u", s->path,
                               (unsigned long long)s->n_tokens, g->window);
            break;
        }
        s->windows = (s->n_tokens - g->window) / g->stride + 1;
        s->first_item = g->windows;
        s->draw_weight = s->n_tokens - g->window + 1;
        g->windows += s->windows;
        g->tokens += s->n_tokens;
        g->draw_total += s->draw_weight;
        fingerprint = stoker_hash64(base, strlen(base) + 1, fingerprint ^ s->n_tokens);
    }
    if (rv == STOKER_OK && cfg->documents && g->windows == 0)
        rv = stoker_errorf(err, err_len, STOKER_INVALID,
                           "--tokens '%s': no document (every token is the end-of-text token %u)",
                           cfg->path, cfg->eot);
    if (rv == STOKER_OK && cfg->dataset && g->windows > UINT32_MAX)
        rv = stoker_errorf(err, err_len, STOKER_INVALID,
                           "%llu windows, more than a dataset's %u items: take a larger --stride",
                           (unsigned long long)g->windows, UINT32_MAX);
    stoker_schema schema = {0};
    char spec[160], bound[32] = "";
    if (cfg->max_doc > 0)
        snprintf(bound, sizeof(bound), "<=%u", cfg->max_doc);
    if (cfg->documents)
        snprintf(spec, sizeof(spec), "%.64s:%s[?%s]", cfg->field != NULL ? cfg->field : "tokens",
                 stoker_dtype_name(dtype), bound);
    else
        snprintf(spec, sizeof(spec), "%.64s:%s[%u]", cfg->field != NULL ? cfg->field : "tokens",
                 stoker_dtype_name(dtype), g->window);
    char why[256];
    if (rv == STOKER_OK && stoker_schema_parse(spec, &schema, why, sizeof(why)) != STOKER_OK)
        rv = stoker_errorf(err, err_len, STOKER_INVALID, "--token-field '%s': %s", cfg->field, why);
    if (rv != STOKER_OK) {
        tokens_destroy(g);
        return rv;
    }
    *out = (stoker_generator){.kind = "tokens",
                              .schema = schema,
                              .fill = cfg->documents ? fill_document : fill_stream,
                              .user = g,
                              .destroy = tokens_destroy};
    if (cfg->dataset) {
        out->n_items = g->windows;
        out->fingerprint = fingerprint;
        out->fill_item = cfg->documents ? fill_document_item : fill_item;
    }
    return STOKER_OK;
}

uint64_t
tokens_generator_tokens(const stoker_generator *gen)
{
    return ((const tokens_gen *)gen->user)->tokens;
}

uint64_t
tokens_generator_windows(const stoker_generator *gen)
{
    return ((const tokens_gen *)gen->user)->windows;
}
