// How a consumer's batches are made from variable-length data (docs/schema.md, "Batching by
// tokens", "Batching"): by count (the default), by a token budget, by length buckets, or packed
// into rows of a fixed length. The consumer chooses, says it in its hello, and the broker makes
// every batch so. "Tokens" are the rows of the schema's first variable field (its length field): a
// token sequence's tokens, an encoded image's bytes, a point cloud's points.
#ifndef STOKER_BATCHING_H
#define STOKER_BATCHING_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/schema.h"

typedef struct stoker_batching {
    // Token budget: as many sequences as fit in max_tokens padded tokens (count x the longest in
    // the batch, what a padded batch costs the GPU), and at most batch_size of them. A sequence
    // longer than the budget alone is never dropped: it comes alone, in a batch of one. 0: none.
    uint32_t max_tokens;
    // Length buckets (nonzero): each batch holds a run of near-equal lengths chosen among a
    // reserve of several batches' worth the broker keeps queued, so padding stays small.
    uint32_t buckets;
    // Packed rows of pack tokens each (0: not packed): batch_size counts rows, the batch holds
    // whole sequences of at most batch_size x pack tokens in all, chosen to fill them.
    uint32_t pack;
    // With pack: no sequence is split across two rows (nonzero); a sequence longer than a row is
    // the one exception (it is split: a row cannot hold it). 0: sequences flow across rows.
    uint32_t pack_whole;
} stoker_batching;

// Nonzero when batching asks for more than count batching.
int stoker_batching_active(const stoker_batching *batching);
// Checks batching against schema (may be NULL: not known yet) and batch_size: STOKER_INVALID with
// err naming what is wrong (a token budget for a schema without variable field, pack with
// max_tokens, pack_whole without pack, a budget below one row).
int stoker_batching_check(const stoker_batching *batching, const stoker_schema *schema,
                          uint32_t batch_size, char *err, size_t err_len);
// The token budget of one batch: max_tokens, batch_size x pack, or 0 (none).
uint64_t stoker_batching_budget(const stoker_batching *batching, uint32_t batch_size);
// The rows n sequences of the given lengths take when packed in that order into rows of pack
// tokens: whole (a sequence that does not fit the current row starts the next; one longer than a
// row takes as many rows as it needs) or flowing across rows (ceil(total / pack)).
uint64_t stoker_pack_rows(const uint64_t *lengths, uint32_t n, uint32_t pack, int whole);

#endif
