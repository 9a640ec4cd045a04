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

// Starts the pusher for pc (borrowed; only the pusher uses it until drain or finish return,
// but for stoker_producer_client_shard_ahead, made for that) with two chunks of `chunk`
// examples of schema. STOKER_OK and *out, or STOKER_NOMEM.
int producer_pipeline_create(stoker_producer_client *pc, const stoker_schema *schema,
                             uint32_t chunk, const char *name, producer_pipeline **out);

// Waits for a chunk to fill (borrowed until submitted), with room for capacity examples where
// memory allows (its buffers grow when the chunks grew since; its capacity says what it holds);
// NULL when the pusher has stopped after a failure (finish returns it).
stoker_chunk *producer_pipeline_free_chunk(producer_pipeline *pl, uint32_t capacity);

// Hands the chunk free_chunk returned to the pusher. A stream's chunk (items NULL) goes out
// from first_seq, less what the broker already holds of it; a dataset's chunk carries items
// of shard `shard` (its id; borrowed until the chunk is answered, one per example) and goes out
// at the client's next seq. After a push was refused as STOKER_SHARD_REVOKED that shard's later
// chunks are dropped unpushed. Returns the chunk's mark for producer_pipeline_wait (1, 2, ...).
uint64_t producer_pipeline_submit(producer_pipeline *pl, uint64_t first_seq, const uint64_t *items,
                                  uint64_t shard);

// Whether a push of dataset shard `shard` was refused as revoked (the rest of that shard need
// not be made; a later shard is unaffected).
int producer_pipeline_revoked(producer_pipeline *pl, uint64_t shard);

// Waits until the chunks submitted up to mark (submit's return) were pushed or dropped.
// Returns the pusher's failure or STOKER_OK.
int producer_pipeline_wait(producer_pipeline *pl, uint64_t mark);

// Waits until every submitted chunk was pushed or dropped (the client is then free for the
// caller until the next submit). Returns the pusher's failure or STOKER_OK.
int producer_pipeline_drain(producer_pipeline *pl);

// Lets the pusher push what was submitted, stops it and frees the pipeline. Returns the
// pusher's failure or STOKER_OK; adds what it pushed to *st.
int producer_pipeline_finish(producer_pipeline *pl, stoker_producer_stats *st);

#endif
