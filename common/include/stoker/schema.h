// The schema: a fixed set of named fields, each with a dtype and a shape, e.g.
// "input:float32[10],output:float32[1]". A field's leading dimension may be variable, with an
// optional bound ("tokens:int32[?<=8192]", "points:float32[?,3]", "jpeg:bytes" = uint8[?]):
// each example then has its own length (docs/schema.md). Plain value types, no allocation: a
// schema can be copied with `=`.
#ifndef STOKER_SCHEMA_H
#define STOKER_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STOKER_MAX_FIELDS 16
#define STOKER_MAX_RANK   8
#define STOKER_NAME_MAX   64 // including the terminating NUL

typedef enum stoker_dtype {
    STOKER_DTYPE_INVALID = 0,
    STOKER_FLOAT32 = 1,
    STOKER_FLOAT64 = 2,
    STOKER_INT32 = 3,
    STOKER_INT64 = 4,
    STOKER_UINT8 = 5,
    STOKER_INT8 = 6,
    STOKER_INT16 = 7,
    STOKER_UINT16 = 8,
    STOKER_FLOAT16 = 9,   // IEEE 754 binary16
    STOKER_BFLOAT16 = 10, // the upper 16 bits of a float32 (torch.bfloat16)
    STOKER_BOOL = 11,     // one byte, 0 or 1
    STOKER_DTYPE_COUNT
} stoker_dtype;

typedef struct stoker_field {
    char name[STOKER_NAME_MAX];
    stoker_dtype dtype;
    uint32_t rank;
    // A variable field has shape[0] == 0 (its length varies); every other dimension is fixed.
    uint32_t shape[STOKER_MAX_RANK];
    uint32_t variable; // nonzero: the leading dimension varies per example (rank >= 1)
    uint32_t max_rows; // a variable field's bound on its leading dimension ("?<=N"); 0: none
} stoker_field;

typedef struct stoker_schema {
    uint32_t n_fields;
    stoker_field fields[STOKER_MAX_FIELDS];
} stoker_schema;

// Bytes of one element (4 for float32); 0 for an invalid dtype.
size_t stoker_dtype_size(stoker_dtype dtype);
// "float32", ...; "invalid" for anything else.
const char *stoker_dtype_name(stoker_dtype dtype);
// Parses a dtype name; STOKER_INVALID if unknown.
int stoker_dtype_parse(const char *name, stoker_dtype *out);

// Elements of one example of the field (product of its shape; 1 for rank 0; 0 for a variable
// field, whose size is per example).
size_t stoker_field_elems(const stoker_field *field);
// Bytes of one example of the field (0 for a variable field).
size_t stoker_field_bytes(const stoker_field *field);
// Bytes of one row of the leading dimension: the dtype's size times every dimension after the
// first (12 for float32[?,3]); for rank 0, the dtype's size.
size_t stoker_field_row_bytes(const stoker_field *field);
// Bytes of one whole example's fixed fields (variable fields count 0).
size_t stoker_schema_example_bytes(const stoker_schema *schema);
// Index of the schema's first variable field, or -1 when every field is fixed.
int stoker_schema_first_variable(const stoker_schema *schema);

// Parses "name:dtype[d0,d1,...],name:dtype[...]" (spaces allowed around tokens); d0 may be
// "?" or "?<=N" (a variable leading dimension), and "name:bytes" is "name:uint8[?]". On failure
// returns STOKER_INVALID and writes a message naming the bad part into err (if err != NULL);
// *out is written only on success.
int stoker_schema_parse(const char *spec, stoker_schema *out, char *err, size_t err_len);
// Formats schema in the syntax stoker_schema_parse reads; always NUL-terminates (truncating).
void stoker_schema_format(const stoker_schema *schema, char *buf, size_t len);
// Checks names are non-empty and unique, dtypes valid, shapes nonzero (but a variable field's
// shape[0], which is 0), sizes below limits (a bounded variable field at its bound included).
// Writes a reason into err on failure and returns STOKER_INVALID.
int stoker_schema_validate(const stoker_schema *schema, char *err, size_t err_len);
bool stoker_schema_equal(const stoker_schema *a, const stoker_schema *b);
// Index of the field called name, or -1.
int stoker_schema_find(const stoker_schema *schema, const char *name);
// Appends a field; STOKER_INVALID when full or the name is too long. shape[0] == 0 (rank >= 1)
// makes its leading dimension variable, unbounded (set fields[i].max_rows for a bound).
int stoker_schema_add(stoker_schema *schema, const char *name, stoker_dtype dtype, uint32_t rank,
                      const uint32_t *shape);

#endif
