// The variable-length test data (tests/lib/var_producer.c makes it; readers check it byte for
// byte): every byte of example seq follows from seq alone. tests/python/helpers.py's var_*
// functions say the same in Python.
#ifndef TESTS_LIB_VAR_DATA_H
#define TESTS_LIB_VAR_DATA_H

#include <stdint.h>

#define VAR_SCHEMA     "tokens:int32[?<=64],points:float32[?,3],label:int64"
#define VAR_TOKENS_MAX 64

// Lengths 0..64 and 0..4, zero included, spread over seqs.
static inline uint32_t
var_tokens(uint64_t seq)
{
    return (uint32_t)((seq * 2654435761u) % 65u);
}
static inline uint32_t
var_points(uint64_t seq)
{
    return (uint32_t)((seq * 40503u + 7u) % 5u);
}
static inline int32_t
var_token(uint64_t seq, uint32_t j)
{
    return (int32_t)(seq * 131u + j);
}
static inline void
var_point(uint64_t seq, uint32_t r, float row[3])
{
    row[0] = (float)seq + (float)r / 4.0f;
    row[1] = (float)r / 8.0f;
    row[2] = -(float)seq;
}

#endif
