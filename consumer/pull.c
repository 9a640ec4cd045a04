// Batch formatting for stoker-pull (see pull.h). Batches are field-major; both output formats
// are example-major, so each example gathers one slice of every field.
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "pull.h"
#include "stoker/schema.h"

typedef struct field_view {
    const uint8_t *data;
    int dtype;
    size_t elem_bytes;
    size_t elems;            // per example (a fixed field)
    const uint64_t *offsets; // a variable field: examples + 1 row offsets; NULL for fixed
    size_t row_elems;        // a variable field: elements per row
} field_view;

// Where example i's elements of field v are, and how many.
static const uint8_t *
example_of(const field_view *v, uint32_t i, size_t *elems)
{
    if (v->offsets == NULL) {
        *elems = v->elems;
        return v->data + (size_t)i * v->elems * v->elem_bytes;
    }
    *elems = (size_t)(v->offsets[i + 1] - v->offsets[i]) * v->row_elems;
    return v->data + (size_t)v->offsets[i] * v->row_elems * v->elem_bytes;
}

int
pull_format_parse(const char *name, pull_format *out)
{
    if (strcmp(name, "text") == 0)
        *out = PULL_TEXT;
    else if (strcmp(name, "raw") == 0)
        *out = PULL_RAW;
    else
        return STOKER_INVALID;
    return STOKER_OK;
}

// IEEE 754 binary16 to float, subnormals, infinities and NaN included.
static float
half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    float f;
    if (exp == 0x1f) {
        uint32_t bits = sign | 0x7f800000u | (mant << 13);
        memcpy(&f, &bits, sizeof(f));
        return f;
    }
    if (exp == 0) {
        f = (float)mant * (1.0f / 16777216.0f); // subnormal (or zero): mant * 2^-24
        return sign ? -f : f;
    }
    uint32_t bits = sign | ((exp + 112) << 23) | (mant << 13);
    memcpy(&f, &bits, sizeof(f));
    return f;
}

// Appends one element as text; returns the characters written (buf holds at least 40).
static int
format_elem(char *buf, int dtype, const uint8_t *p)
{
    switch (dtype) {
    case STOKER_FLOAT32: {
        float v;
        memcpy(&v, p, sizeof(v));
        return sprintf(buf, "%.9g", (double)v);
    }
    case STOKER_FLOAT64: {
        double v;
        memcpy(&v, p, sizeof(v));
        return sprintf(buf, "%.17g", v);
    }
    case STOKER_INT32: {
        int32_t v;
        memcpy(&v, p, sizeof(v));
        return sprintf(buf, "%" PRId32, v);
    }
    case STOKER_INT64: {
        int64_t v;
        memcpy(&v, p, sizeof(v));
        return sprintf(buf, "%" PRId64, v);
    }
    case STOKER_UINT8:
        return sprintf(buf, "%u", (unsigned)*p);
    case STOKER_INT8:
        return sprintf(buf, "%d", (int)(int8_t)*p);
    case STOKER_INT16: {
        int16_t v;
        memcpy(&v, p, sizeof(v));
        return sprintf(buf, "%d", (int)v);
    }
    case STOKER_UINT16: {
        uint16_t v;
        memcpy(&v, p, sizeof(v));
        return sprintf(buf, "%u", (unsigned)v);
    }
    case STOKER_FLOAT16: {
        uint16_t v;
        memcpy(&v, p, sizeof(v));
        return sprintf(buf, "%.5g", (double)half_to_float(v));
    }
    case STOKER_BFLOAT16: {
        uint16_t v;
        memcpy(&v, p, sizeof(v));
        uint32_t bits = (uint32_t)v << 16;
        float f;
        memcpy(&f, &bits, sizeof(f));
        return sprintf(buf, "%.4g", (double)f);
    }
    case STOKER_BOOL:
        return sprintf(buf, "%u", *p != 0);
    default:
        return sprintf(buf, "nan");
    }
}

// Copies one element in little-endian byte order.
static void
put_le(uint8_t *dst, const uint8_t *src, size_t bytes)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (size_t i = 0; i < bytes; i++)
        dst[i] = src[bytes - 1 - i];
#else
    memcpy(dst, src, bytes);
#endif
}

int
pull_write(FILE *f, pull_format format, const stoker_consumer_batch *b, uint32_t n)
{
    field_view fields[STOKER_MAX_FIELDS];
    uint32_t n_fields = 0;
    void *data;
    int dtype;
    uint32_t rank, shape[STOKER_MAX_RANK + 1];
    uint64_t count;
    uint32_t examples = stoker_consumer_batch_count(b);
    while (n_fields < STOKER_MAX_FIELDS &&
           stoker_consumer_batch_field(b, n_fields, &data, &dtype, &rank, shape, &count, NULL) ==
               STOKER_OK) {
        field_view *v = &fields[n_fields];
        memset(v, 0, sizeof(*v));
        v->data = data;
        v->dtype = dtype;
        v->elem_bytes = stoker_dtype_size((stoker_dtype)dtype);
        uint64_t n_off;
        if (stoker_consumer_batch_offsets(b, n_fields, &v->offsets, &n_off) == STOKER_OK) {
            v->row_elems = 1; // (rows, dims after the first): a row is those dims
            for (uint32_t d = 1; d < rank; d++)
                v->row_elems *= shape[d];
        } else {
            v->elems = examples > 0 ? (size_t)(count / examples) : 0;
        }
        n_fields++;
    }
    if (n > examples)
        n = examples;
    size_t cap = 0;
    uint8_t *buf = NULL;
    int rv = STOKER_OK;
    for (uint32_t i = 0; i < n && rv == STOKER_OK; i++) {
        // One example's worth of output at a time: raw bytes (a variable value after its
        // length, 4 bytes), or at most 40 characters a number (and its length first).
        size_t need = 2;
        for (uint32_t fi = 0; fi < n_fields; fi++) {
            size_t elems;
            (void)example_of(&fields[fi], i, &elems);
            need += format == PULL_RAW ? elems * fields[fi].elem_bytes + 4 : elems * 40 + 41;
        }
        if (need > cap) {
            uint8_t *grown = realloc(buf, need);
            if (grown == NULL) {
                free(buf);
                return STOKER_NOMEM;
            }
            buf = grown;
            cap = need;
        }
        size_t len = 0;
        for (uint32_t fi = 0; fi < n_fields; fi++) {
            const field_view *v = &fields[fi];
            size_t elems;
            const uint8_t *p = example_of(v, i, &elems);
            if (v->offsets != NULL) {
                uint32_t rows = (uint32_t)(v->offsets[i + 1] - v->offsets[i]);
                if (format == PULL_RAW) {
                    uint8_t le[4] = {(uint8_t)rows, (uint8_t)(rows >> 8), (uint8_t)(rows >> 16),
                                     (uint8_t)(rows >> 24)};
                    memcpy(buf + len, le, 4);
                    len += 4;
                } else {
                    if (len > 0)
                        buf[len++] = ' ';
                    len += (size_t)sprintf((char *)buf + len, "%u", rows);
                }
            }
            for (size_t e = 0; e < elems; e++, p += v->elem_bytes) {
                if (format == PULL_RAW) {
                    put_le(buf + len, p, v->elem_bytes);
                    len += v->elem_bytes;
                } else {
                    if (len > 0)
                        buf[len++] = ' ';
                    len += (size_t)format_elem((char *)buf + len, v->dtype, p);
                }
            }
        }
        if (format == PULL_TEXT)
            buf[len++] = '\n';
        if (fwrite(buf, 1, len, f) != len)
            rv = STOKER_IO;
    }
    free(buf);
    if (rv == STOKER_OK && fflush(f) != 0)
        rv = STOKER_IO;
    return rv;
}
