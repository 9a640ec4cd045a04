// The `tokens` generator: pre-tokenized corpora in the shard formats of small language-model
// training code, served as windows of N tokens. Two formats:
// - llm.c's `.bin`: a header of 256 little-endian int32 (magic 20240520, version 1 with uint16
//   tokens or version 2 with uint32 tokens, the token count), then the tokens;
// - plain little-endian uint16 tokens with no header, as nanoGPT's prepare scripts write them.
// Shards are memory-mapped read-only at creation and never read into memory as a whole; a window
// never crosses from one shard into the next.
//
// As a stream, each example is a window at an offset drawn uniformly from the example's seed in
// a shard drawn with probability proportional to its windows (nanoGPT's get_batch sampling, made
// deterministic). As a dataset (docs/datasets.md), item i is the i-th window at stride S over the
// shards in order: shard 0's tokens [0, N), [S, S + N), ..., then shard 1's, so every window is
// served once per epoch.
#ifndef PRODUCER_TOKENS_H
#define PRODUCER_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/generator.h"

typedef enum tokens_format { TOKENS_AUTO = 0, TOKENS_LLMC = 1, TOKENS_RAW = 2 } tokens_format;

// The magic number of llm.c's shard header.
#define TOKENS_LLMC_MAGIC 20240520
// Most shards one generator opens.
#define TOKENS_MAX_SHARDS 65536
// Longest window, in tokens.
#define TOKENS_MAX_WINDOW (1u << 24)

typedef struct tokens_config {
    // A shard file, a folder (every *.bin in it, sorted by name) or a glob pattern ("data/*.bin",
    // matches sorted). Borrowed.
    const char *path;
    tokens_format format; // auto: llm.c when the file starts with the magic, else plain uint16
    uint32_t window;      // tokens per example (N)
    uint32_t stride;      // a dataset's items start every stride tokens (0: window)
    stoker_dtype dtype;   // of the field: STOKER_INT32 (default), STOKER_INT64 or STOKER_UINT16
    const char *field;    // the field's name (NULL: "tokens")
    int dataset;          // serve the windows at stride as a dataset
} tokens_config;

// Opens the shards and sets out to a generator with the schema `tokens:DTYPE[N]`. STOKER_OK;
// STOKER_INVALID with err naming the file and what is wrong (no shard matched, a header with a
// wrong magic or version, a size that disagrees with the header's count, an odd size for plain
// uint16, a token that does not fit uint16 output, a shard shorter than a window, a window of 0
// or over TOKENS_MAX_WINDOW); STOKER_IO (cannot open or map); STOKER_NOMEM. *out is untouched on
// failure.
int tokens_generator_open(const tokens_config *cfg, stoker_generator *out, char *err,
                          size_t err_len);

// Tokens in all shards, and windows a dataset serves (for logs and tests).
uint64_t tokens_generator_tokens(const stoker_generator *gen);
uint64_t tokens_generator_windows(const stoker_generator *gen);

#endif
