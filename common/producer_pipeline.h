// The producers' pusher thread (private to libstoker): the calling thread fills one chunk while
// the pusher sends the previous one (two chunks, double-buffered), so a CPU-bound generator keeps
// its core busy instead of idling for each push's round trip. Pushes go out one at a time and in
// the order submitted, so the broker's seq rule works as with a single chunk in flight. Used by
// the stream loop (producer.c) and the dataset loop (producer_dataset.c); it does not generate.
#ifndef PRODUCER_PIPELINE_H
#define PRODUCER_PIPELINE_H

#include <stdint.h>

#include "stoker/chunk.h"
#include "stoker/producer.h"
#include "stoker/producer_client.h"

typedef struct producer_pipeline producer_pipeline;

// Starts the pusher for pc (borrowed; only the pusher uses it until drain or finish return)
// with two chunks of `chunk` examples of schema. STOKER_OK and *out, or STOKER_NOMEM.
int producer_pipeline_create(stoker_producer_client *pc, const stoker_schema *schema,
                             uint32_t chunk, const char *name, producer_pipeline **out);

// Waits for a chunk to fill (borrowed until submitted); NULL when the pusher has stopped after
// a failure (finish returns it).
stoker_chunk *producer_pipeline_free_chunk(producer_pipeline *pl);

// Hands the chunk free_chunk returned to the pusher. A stream's chunk (items NULL) goes out
// from first_seq, less what the broker already holds of it; a dataset's chunk carries items
// (borrowed until drain returns, one per example) and goes out at the client's next seq. After
// a push was refused as STOKER_SHARD_REVOKED the shard's later chunks are dropped unpushed.
void producer_pipeline_submit(producer_pipeline *pl, uint64_t first_seq, const uint64_t *items);

// Whether a dataset push was refused as revoked since the last drain (the rest of the shard
// need not be made).
int producer_pipeline_revoked(producer_pipeline *pl);

// Waits until every submitted chunk was pushed or dropped (the client is then free for the
// caller until the next submit). Returns the pusher's failure or STOKER_OK; *revoked (may be
// NULL) says whether a push was refused as revoked since the last drain, and is reset.
int producer_pipeline_drain(producer_pipeline *pl, int *revoked);

// Lets the pusher push what was submitted, stops it and frees the pipeline. Returns the
// pusher's failure or STOKER_OK; adds what it pushed to *st.
int producer_pipeline_finish(producer_pipeline *pl, stoker_producer_stats *st);

#endif
