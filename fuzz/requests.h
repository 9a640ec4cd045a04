// Valid requests for the broker fuzz target: the preamble it replays before the fuzzer's input
// and the seed corpus (fuzz/make_corpus.c) are built from the same encoders, so the sessions and
// lease ids a seed names are the ones the preamble created.
#ifndef FUZZ_REQUESTS_H
#define FUZZ_REQUESTS_H

#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

#include "stoker/wire.h"

#define FUZZ_SCHEMA   "x:float32[2],y:int32[1]"
#define FUZZ_TOKEN    "secret"
#define FUZZ_PRODUCER 0x1111u // session of the preamble's producer (pipe 1)
#define FUZZ_TRAINER  0x2222u // session of the preamble's trainer (pipe 2)

// The input format (what the fuzzer mutates):
//   byte 0: flags: bit 0 a token is required, bit 1 small limits, bit 2 no preamble
//   then records, each starting with an op byte (op % 4):
//     0, 3: a request: pipe byte (1 + b % 4), u16 little-endian length, that many bytes
//     1:    time passes: u16 little-endian milliseconds, then a tick
//     2:    a connection closes: pipe byte (1 + b % 4)
enum { FUZZ_OP_MESSAGE = 0, FUZZ_OP_TICK = 1, FUZZ_OP_CLOSE = 2 };
enum { FUZZ_FLAG_TOKEN = 1, FUZZ_FLAG_SMALL = 2, FUZZ_FLAG_NO_PREAMBLE = 4 };

// A schema with a variable-length field, for conversations without the preamble.
#define FUZZ_VAR_SCHEMA "t:int32[?<=8],x:float32[2]"
// What fuzz_push_var does to the offsets of its variable field.
enum {
    FUZZ_VAR_GOOD = 0,
    FUZZ_VAR_DECREASING, // an offset below the one before it
    FUZZ_VAR_OVER_BOUND, // a value of 9 rows (the bound is 8)
    FUZZ_VAR_PAST_DATA,  // the last offset beyond the values sent
    FUZZ_VAR_NOT_ZERO,   // the first offset is not 0
};

// The schema FUZZ_SCHEMA (parsed once).
const stoker_schema *fuzz_schema(void);

// Encoded requests (new nng messages, caller frees), or NULL when out of memory.
nng_msg *fuzz_hello(uint64_t session, stoker_role role, const char *name, const char *token,
                    int with_schema);
nng_msg *fuzz_push(uint64_t session, uint64_t first_seq, uint32_t count);
// A hello of a producer with FUZZ_VAR_SCHEMA, and its pushes: example k has k % 5 tokens, the
// offsets then changed as `how` says.
nng_msg *fuzz_hello_var(uint64_t session, const char *name, const char *token);
nng_msg *fuzz_push_var(uint64_t session, uint64_t first_seq, uint32_t count, int how);
nng_msg *fuzz_pull(uint64_t session, uint32_t max_examples, uint32_t wait_ms, uint32_t n_acks,
                   const uint64_t *acks);
nng_msg *fuzz_ack(uint64_t session, uint32_t n_acks, const uint64_t *acks);
nng_msg *fuzz_simple(stoker_method method, uint64_t session);

#endif
