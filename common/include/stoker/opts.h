// Helpers for the command lines: strict number parsing (the whole string, within bounds) and
// token files. Each returns STOKER_OK or STOKER_INVALID and writes *out only on success.
#ifndef STOKER_OPTS_H
#define STOKER_OPTS_H

#include <stddef.h>
#include <stdint.h>

int stoker_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);
int stoker_parse_double(const char *s, double min, double max, double *out);
// "MIN:MAX" (or a single number meaning MIN = MAX), 0 <= MIN <= MAX <= max.
int stoker_parse_range(const char *s, double max, double *lo, double *hi);
// Reads a token (first line, trailing whitespace removed, non-empty) from path into buf.
int stoker_read_token_file(const char *path, char *buf, size_t cap, char *err, size_t err_len);

#endif
