// Writing batches of the consumer API to a stream, as text (one example per line: the numbers of
// all fields in schema order, separated by spaces, the format the exec producer reads) or raw
// records (per example, the fields in schema order, elements little-endian). A variable-length
// field's value is preceded by its length in rows: a number in text, a uint32 little-endian in
// raw records (docs/schema.md). It only formats: pulling, acknowledging and exit codes are
// main.c's.
#ifndef CONSUMER_PULL_H
#define CONSUMER_PULL_H

#include <stdint.h>
#include <stdio.h>

#include "stoker/consumer.h"

typedef enum pull_format {
    PULL_TEXT = 0,
    PULL_RAW = 1,
} pull_format;

// Parses "text" or "raw"; STOKER_INVALID otherwise (*out untouched).
int pull_format_parse(const char *name, pull_format *out);

// Writes the first n examples of b to f (n at most the batch's count) and flushes f.
// Floats are written with enough digits to read back the same value (%.9g for float32, %.17g
// for float64). Returns STOKER_OK, STOKER_IO if writing failed (errno set), STOKER_NOMEM.
int pull_write(FILE *f, pull_format format, const stoker_consumer_batch *b, uint32_t n);

#endif
