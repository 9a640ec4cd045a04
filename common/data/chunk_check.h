// Private to libstoker: the check of a variable field's offsets that the wire floor makes on
// what it decodes (chunk.c). Not exported from libstoker.so.
#ifndef STOKER_CHUNK_CHECK_H
#define STOKER_CHUNK_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/schema.h"

// Checks that n_offsets = count + 1 offsets at offsets (little-endian, any alignment) describe
// exactly values_bytes bytes of values of variable field f: the first 0, none decreasing, no
// value longer than the field's bound, the last times the row's bytes equal to values_bytes.
// STOKER_INVALID with a message naming the field, the example and the length otherwise.
int stoker_chunk_check_offsets(const stoker_field *field, const uint8_t *offsets, uint32_t count,
                               uint64_t values_bytes, char *err, size_t err_len);

#endif
