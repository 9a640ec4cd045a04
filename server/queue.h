// One producer's bounded queue of examples, as a list of segments in seq order. A segment is
// the new part of one accepted push (its data still inside the decoded request, not copied) or
// examples returned from a dropped lease (copied). Taking examples copies them out; a segment is
// freed when its last example is taken. Bounds are enforced by the broker, not here.
#ifndef QUEUE_H
#define QUEUE_H

#include <stdint.h>

#include "stoker/chunk.h"
#include "stoker/wire.h"

typedef struct segment segment;

typedef struct queue {
    const stoker_schema *schema; // borrowed from the broker
    segment *head, *tail;
    uint64_t examples;
    uint64_t bytes;
} queue;

void queue_init(queue *q, const stoker_schema *schema);
// Frees every segment; the queue is then empty.
void queue_fini(queue *q);

// Appends examples skip .. chunk->count - 1 of req's chunk as seqs first_seq + skip ... Takes
// ownership of req on success (STOKER_OK); on STOKER_NOMEM the caller still owns it.
int queue_append_request(queue *q, stoker_request *req, uint32_t skip);
// Puts count examples, copied from src (field-major, src_first .. of chunk src) with seqs
// first_seq .., back at the head. STOKER_OK or STOKER_NOMEM (queue unchanged).
int queue_prepend_copy(queue *q, const stoker_chunk *src, uint32_t src_first, uint32_t count,
                       uint64_t first_seq);

// Moves up to max examples from the head segment (one contiguous run of seqs) to the end of
// dst, which must have room. Returns the number moved (0 when empty) and their first seq.
uint32_t queue_take(queue *q, uint32_t max, stoker_chunk *dst, uint64_t *first_seq);

#endif
