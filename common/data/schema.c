// Schema parsing, formatting and comparison. Limits (fields, rank, bytes per example) are
// checked here so nothing downstream multiplies unchecked sizes from a peer.
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoker/error.h"
#include "stoker/schema.h"

// An example larger than this is refused (1 GiB): it bounds every size computation.
#define EXAMPLE_BYTES_MAX (1ull << 30)

static const struct {
    const char *name;
    size_t size;
} dtypes[STOKER_DTYPE_COUNT] = {
    [STOKER_DTYPE_INVALID] = {"invalid", 0},
    [STOKER_FLOAT32] = {"float32", 4},
    [STOKER_FLOAT64] = {"float64", 8},
    [STOKER_INT32] = {"int32", 4},
    [STOKER_INT64] = {"int64", 8},
    [STOKER_UINT8] = {"uint8", 1},
    [STOKER_INT8] = {"int8", 1},
    [STOKER_INT16] = {"int16", 2},
    [STOKER_UINT16] = {"uint16", 2},
    [STOKER_FLOAT16] = {"float16", 2},
    [STOKER_BFLOAT16] = {"bfloat16", 2},
    [STOKER_BOOL] = {"bool", 1},
};

size_t
stoker_dtype_size(stoker_dtype dtype)
{
    return (dtype > 0 && dtype < STOKER_DTYPE_COUNT) ? dtypes[dtype].size : 0;
}

const char *
stoker_dtype_name(stoker_dtype dtype)
{
    return (dtype > 0 && dtype < STOKER_DTYPE_COUNT) ? dtypes[dtype].name : "invalid";
}

int
stoker_dtype_parse(const char *name, stoker_dtype *out)
{
    for (int i = 1; i < STOKER_DTYPE_COUNT; i++) {
        if (strcmp(name, dtypes[i].name) == 0) {
            *out = (stoker_dtype)i;
            return STOKER_OK;
        }
    }
    return STOKER_INVALID;
}

size_t
stoker_field_elems(const stoker_field *field)
{
    size_t n = 1;
    for (uint32_t i = 0; i < field->rank && i < STOKER_MAX_RANK; i++)
        n *= field->shape[i];
    return n;
}

size_t
stoker_field_bytes(const stoker_field *field)
{
    return stoker_field_elems(field) * stoker_dtype_size(field->dtype);
}

size_t
stoker_field_row_bytes(const stoker_field *field)
{
    size_t n = stoker_dtype_size(field->dtype);
    for (uint32_t i = 1; i < field->rank && i < STOKER_MAX_RANK; i++)
        n *= field->shape[i];
    return n;
}

int
stoker_schema_first_variable(const stoker_schema *schema)
{
    for (uint32_t i = 0; i < schema->n_fields && i < STOKER_MAX_FIELDS; i++) {
        if (schema->fields[i].variable)
            return (int)i;
    }
    return -1;
}

size_t
stoker_schema_example_bytes(const stoker_schema *schema)
{
    size_t n = 0;
    for (uint32_t i = 0; i < schema->n_fields && i < STOKER_MAX_FIELDS; i++)
        n += stoker_field_bytes(&schema->fields[i]);
    return n;
}

int
stoker_schema_validate(const stoker_schema *s, char *err, size_t err_len)
{
    if (s->n_fields == 0)
        return stoker_errorf(err, err_len, STOKER_INVALID, "schema has no fields");
    if (s->n_fields > STOKER_MAX_FIELDS)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "schema has %u fields, at most %d allowed", s->n_fields,
                             STOKER_MAX_FIELDS);
    uint64_t total = 0;
    for (uint32_t i = 0; i < s->n_fields; i++) {
        const stoker_field *f = &s->fields[i];
        size_t len = strnlen(f->name, STOKER_NAME_MAX);
        if (len == 0 || len == STOKER_NAME_MAX)
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "field %u: name empty or longer than %d bytes", i,
                                 STOKER_NAME_MAX - 1);
        for (size_t k = 0; k < len; k++) {
            unsigned char c = (unsigned char)f->name[k];
            if (!(isalnum(c) || c == '_' || c == '-' || c == '.'))
                return stoker_errorf(err, err_len, STOKER_INVALID,
                                     "field '%s': name may hold only letters, digits, _ - .",
                                     f->name);
        }
        if (stoker_dtype_size(f->dtype) == 0)
            return stoker_errorf(err, err_len, STOKER_INVALID, "field '%s': unknown dtype %d",
                                 f->name, (int)f->dtype);
        if (f->rank > STOKER_MAX_RANK)
            return stoker_errorf(err, err_len, STOKER_INVALID, "field '%s': rank %u over %d",
                                 f->name, f->rank, STOKER_MAX_RANK);
        if (f->variable && (f->rank == 0 || f->shape[0] != 0))
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "field '%s': a variable field needs rank >= 1 and its first "
                                 "dimension '?'",
                                 f->name);
        if (!f->variable && f->max_rows != 0)
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "field '%s': a bound (<=%u) on a fixed field", f->name,
                                 f->max_rows);
        uint64_t bytes = stoker_dtype_size(f->dtype);
        for (uint32_t d = 0; d < f->rank; d++) {
            uint64_t dim = f->shape[d];
            if (d == 0 && f->variable)
                dim = f->max_rows; // bounded: the largest value must fit the limits too
            else if (dim == 0)
                return stoker_errorf(err, err_len, STOKER_INVALID, "field '%s': dimension %u is 0",
                                     f->name, d);
            if (dim == 0)
                continue; // unbounded variable field: only its rows' size is checked here
            bytes *= dim;
            if (bytes > EXAMPLE_BYTES_MAX)
                return stoker_errorf(err, err_len, STOKER_INVALID,
                                     "field '%s': over %llu bytes per example", f->name,
                                     (unsigned long long)EXAMPLE_BYTES_MAX);
        }
        if (f->variable && f->max_rows == 0)
            bytes = 0; // its values are bounded per example by EXAMPLE_BYTES_MAX when made
        total += bytes;
        if (total > EXAMPLE_BYTES_MAX)
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "schema: over %llu bytes per example",
                                 (unsigned long long)EXAMPLE_BYTES_MAX);
        for (uint32_t j = 0; j < i; j++) {
            if (strcmp(s->fields[j].name, f->name) == 0)
                return stoker_errorf(err, err_len, STOKER_INVALID, "field '%s' appears twice",
                                     f->name);
        }
    }
    return STOKER_OK;
}

// "float32, float64, ..., bool": every dtype a schema may name, in table order.
static void
dtype_names(char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 1; i < STOKER_DTYPE_COUNT && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i > 1 ? ", " : "", dtypes[i].name);
}

static const char *
skip_space(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

int
stoker_schema_parse(const char *spec, stoker_schema *out, char *err, size_t err_len)
{
    stoker_schema s;
    memset(&s, 0, sizeof(s));
    if (spec == NULL)
        return stoker_errorf(err, err_len, STOKER_INVALID, "schema: empty");
    const char *p = skip_space(spec);
    while (*p != '\0') {
        if (s.n_fields == STOKER_MAX_FIELDS)
            return stoker_errorf(err, err_len, STOKER_INVALID, "schema: more than %d fields",
                                 STOKER_MAX_FIELDS);
        stoker_field *f = &s.fields[s.n_fields];
        // name
        const char *start = p;
        while (*p != '\0' && *p != ':' && *p != ',' && *p != ' ')
            p++;
        size_t len = (size_t)(p - start);
        if (len == 0 || len >= STOKER_NAME_MAX)
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "schema: expected a field name at '%s'", start);
        memcpy(f->name, start, len);
        p = skip_space(p);
        if (*p != ':')
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "schema: field '%s': expected ':dtype[shape]'", f->name);
        p = skip_space(p + 1);
        // dtype
        start = p;
        while (isalnum((unsigned char)*p))
            p++;
        char dname[16] = {0};
        len = (size_t)(p - start);
        if (len == 0 || len >= sizeof(dname))
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "schema: field '%s': expected a dtype", f->name);
        memcpy(dname, start, len);
        if (strcmp(dname, "bytes") == 0) {
            // "bytes": encoded data (a JPEG, a compressed record), uint8[?].
            f->dtype = STOKER_UINT8;
            f->rank = 1;
            f->variable = 1;
            p = skip_space(p);
            if (*p == '[')
                return stoker_errorf(err, err_len, STOKER_INVALID,
                                     "schema: field '%s': 'bytes' takes no shape (it is "
                                     "uint8[?]; write uint8[?<=N] for a bound)",
                                     f->name);
            goto next_field;
        }
        if (stoker_dtype_parse(dname, &f->dtype) != STOKER_OK) {
            char names[160];
            dtype_names(names, sizeof names);
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "schema: field '%s': unknown dtype '%s' (%s)", f->name, dname,
                                 names);
        }
        p = skip_space(p);
        // shape: [d0,d1,...]; a missing shape means a scalar, [1].
        if (*p == '[') {
            p++;
            for (;;) {
                p = skip_space(p);
                if (*p == ']' && f->rank == 0) {
                    p++;
                    break;
                }
                if (*p == '?') {
                    if (f->rank > 0)
                        return stoker_errorf(err, err_len, STOKER_INVALID,
                                             "schema: field '%s': only the first dimension may be "
                                             "'?' (at '%s')",
                                             f->name, p);
                    f->variable = 1;
                    f->rank = 1; // shape[0] stays 0
                    p = skip_space(p + 1);
                    if (p[0] == '<' && p[1] == '=') {
                        const char *at = skip_space(p + 2);
                        char *end;
                        errno = 0;
                        unsigned long v = strtoul(at, &end, 10);
                        if (end == at || errno != 0 || v == 0 || v > 0xffffffffUL || *at == '-')
                            return stoker_errorf(err, err_len, STOKER_INVALID,
                                                 "schema: field '%s': bad bound at '%s' (write "
                                                 "?<=N, N >= 1)",
                                                 f->name, p);
                        f->max_rows = (uint32_t)v;
                        p = skip_space(end);
                    } else if (*p != ',' && *p != ']') {
                        return stoker_errorf(err, err_len, STOKER_INVALID,
                                             "schema: field '%s': after '?' expected '<=N', ',' "
                                             "or ']' at '%s'",
                                             f->name, p);
                    }
                    if (*p == ',') {
                        p++;
                        continue;
                    }
                    if (*p == ']') {
                        p++;
                        break;
                    }
                    return stoker_errorf(err, err_len, STOKER_INVALID,
                                         "schema: field '%s': expected ',' or ']' at '%s'", f->name,
                                         p);
                }
                char *end;
                errno = 0;
                unsigned long v = strtoul(p, &end, 10);
                if (end == p || errno != 0 || v == 0 || v > 0xffffffffUL || *p == '-')
                    return stoker_errorf(err, err_len, STOKER_INVALID,
                                         "schema: field '%s': bad dimension at '%s'", f->name, p);
                if (f->rank == STOKER_MAX_RANK)
                    return stoker_errorf(err, err_len, STOKER_INVALID,
                                         "schema: field '%s': more than %d dimensions", f->name,
                                         STOKER_MAX_RANK);
                f->shape[f->rank++] = (uint32_t)v;
                p = skip_space(end);
                if (*p == ',') {
                    p++;
                    continue;
                }
                if (*p == ']') {
                    p++;
                    break;
                }
                return stoker_errorf(err, err_len, STOKER_INVALID,
                                     "schema: field '%s': expected ',' or ']' at '%s'", f->name, p);
            }
        } else {
            f->rank = 1;
            f->shape[0] = 1;
        }
    next_field:
        s.n_fields++;
        p = skip_space(p);
        if (*p == ',') {
            p = skip_space(p + 1);
            if (*p == '\0')
                return stoker_errorf(err, err_len, STOKER_INVALID, "schema: trailing ','");
            continue;
        }
        if (*p != '\0')
            return stoker_errorf(err, err_len, STOKER_INVALID, "schema: unexpected '%s'", p);
    }
    int rv = stoker_schema_validate(&s, err, err_len);
    if (rv != STOKER_OK)
        return rv;
    *out = s;
    return STOKER_OK;
}

void
stoker_schema_format(const stoker_schema *s, char *buf, size_t len)
{
    if (len == 0)
        return;
    size_t used = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < s->n_fields && i < STOKER_MAX_FIELDS && used < len; i++) {
        const stoker_field *f = &s->fields[i];
        used += (size_t)snprintf(buf + used, len - used, "%s%.*s:%s[", i ? "," : "",
                                 STOKER_NAME_MAX, f->name, stoker_dtype_name(f->dtype));
        for (uint32_t d = 0; d < f->rank && d < STOKER_MAX_RANK && used < len; d++) {
            if (d == 0 && f->variable && f->max_rows != 0)
                used += (size_t)snprintf(buf + used, len - used, "?<=%u", f->max_rows);
            else if (d == 0 && f->variable)
                used += (size_t)snprintf(buf + used, len - used, "?");
            else
                used += (size_t)snprintf(buf + used, len - used, "%s%u", d ? "," : "", f->shape[d]);
        }
        if (used < len)
            used += (size_t)snprintf(buf + used, len - used, "]");
    }
}

bool
stoker_schema_equal(const stoker_schema *a, const stoker_schema *b)
{
    if (a->n_fields != b->n_fields)
        return false;
    for (uint32_t i = 0; i < a->n_fields && i < STOKER_MAX_FIELDS; i++) {
        const stoker_field *x = &a->fields[i], *y = &b->fields[i];
        if (strncmp(x->name, y->name, STOKER_NAME_MAX) != 0 || x->dtype != y->dtype ||
            x->rank != y->rank || !x->variable != !y->variable || x->max_rows != y->max_rows)
            return false;
        for (uint32_t d = 0; d < x->rank && d < STOKER_MAX_RANK; d++) {
            if (x->shape[d] != y->shape[d])
                return false;
        }
    }
    return true;
}

int
stoker_schema_find(const stoker_schema *s, const char *name)
{
    for (uint32_t i = 0; i < s->n_fields && i < STOKER_MAX_FIELDS; i++) {
        if (strncmp(s->fields[i].name, name, STOKER_NAME_MAX) == 0)
            return (int)i;
    }
    return -1;
}

int
stoker_schema_add(stoker_schema *s, const char *name, stoker_dtype dtype, uint32_t rank,
                  const uint32_t *shape)
{
    if (s->n_fields >= STOKER_MAX_FIELDS || strlen(name) >= STOKER_NAME_MAX ||
        rank > STOKER_MAX_RANK)
        return STOKER_INVALID;
    stoker_field *f = &s->fields[s->n_fields];
    memset(f, 0, sizeof(*f));
    strcpy(f->name, name);
    f->dtype = dtype;
    f->rank = rank;
    for (uint32_t d = 0; d < rank; d++)
        f->shape[d] = shape[d];
    f->variable = rank >= 1 && shape[0] == 0; // shape[0] 0: a variable leading dimension
    s->n_fields++;
    return STOKER_OK;
}
