// One producer's bounded queue of examples, as a list of ranges in seq order. The examples stay
// where they arrived: a range refers to part of a shared, reference-counted block (the decoded
// push, whose data points into the received message, or a copy). Taking examples hands out a
// range with its own reference instead of copying them: a lease holds ranges until it is
// acknowledged (then they are released) or dropped (then they go back to the head of their
// queue). Bounds are enforced by the broker, not here.
#ifndef QUEUE_H
#define QUEUE_H

#include <stdint.h>

#include "stoker/chunk.h"
#include "stoker/wire.h"

typedef struct qblock qblock; // shared storage of one push (private)
typedef struct qnode qnode;   // list node (private)

typedef struct queue_range {
    qblock *block;  // holds one reference while the range is held
    uint32_t first; // index of the first example within the block
    uint32_t count;
    uint64_t first_seq; // seq of the first example
} queue_range;

typedef struct queue {
    const stoker_schema *schema; // borrowed from the broker
    int length_field; // the schema's first variable field, whose rows are tokens (-1: none)
    qnode *head, *tail;
    // Where the last queue_take_seq left off (NULL: the head), the next one's search starts from
    // (queue.c, find_seq).
    qnode *hint;
    // Stamp of its last change other than an append (a take, a put-back, a reset; unique across
    // queues): batches planned ahead from it (budget.c) hold while it stays the same.
    uint64_t changes;
    uint64_t examples;
    uint64_t bytes;  // real bytes of the examples held (queue_range_bytes)
    uint64_t tokens; // their rows of the schema's length field (queue_range_tokens; 0: none)
} queue;

// A walk over a queue's examples from its head, in queue order (for batches made by tokens,
// budget.c); valid while the queue is not changed.
typedef struct queue_cursor {
    const qnode *node;
    uint32_t i;
    const uint8_t *offsets; // the node's length-field offsets from its first example (or NULL)
    uint64_t at;            // the offset where example i begins
} queue_cursor;

void queue_init(queue *q, const stoker_schema *schema);
// Releases every range; the queue is then empty.
void queue_fini(queue *q);

// Appends examples skip .. chunk.count - 1 of req's chunk (seqs first_seq + skip ...). Takes
// ownership of req on success (STOKER_OK); on STOKER_NOMEM the caller still owns it.
int queue_append_request(queue *q, stoker_request *req, uint32_t skip);

// The range at the queue's tail (the push appended last), or NULL when the queue is empty.
const queue_range *queue_tail(const queue *q);
// Appends a copy of range r (another queue's, of the same schema) holding a reference of its
// own: one push queued for several jobs (jobs.c). STOKER_OK or STOKER_NOMEM.
int queue_append_range(queue *q, const queue_range *r);

// Appends copies of every range of src to dst (each holding a reference of its own). Returns
// the examples copied (fewer when out of memory).
uint64_t queue_copy(queue *dst, const queue *src);

// Takes up to max examples from the head (one contiguous run of seqs from one block) into *out,
// which then holds a reference. Returns the number taken (0 when empty).
uint32_t queue_take(queue *q, uint32_t max, queue_range *out);
// Takes up to max examples from seq on (one contiguous run of one block; seq may lie anywhere
// in the queue, the examples around it stay) into *out. Returns the number taken (0 when seq is
// not queued, or out of memory splitting a range).
uint32_t queue_take_seq(queue *q, uint64_t seq, uint32_t max, queue_range *out);
void queue_cursor_init(const queue *q, queue_cursor *c);
// The cursor's next example: its seq and its length in rows of variable field `field` (0 when
// field < 0). Returns 0 at the queue's end.
int queue_cursor_next(queue_cursor *c, int field, uint64_t *seq, uint64_t *len);
// The range's rows of variable field `field` (0 for field < 0).
uint64_t queue_range_tokens(const queue_range *r, int field);
// The seq of the head example (the queue must not be empty).
uint64_t queue_head_seq(const queue *q);
// Puts range r back at the head, taking over its reference. STOKER_NOMEM leaves r to the caller.
int queue_put_back(queue *q, const queue_range *r);
// Drops r's reference (the block is freed with its last one); accepts a zeroed range. The one
// call allowed outside the broker's lock, for a reference taken with queue_range_retain.
void queue_range_release(queue_range *r);
// Takes one more reference to r's block (for a copy of r released later with
// queue_range_release, e.g. by a reply's copy outside the broker's lock).
void queue_range_retain(const queue_range *r);
// Where field f of the range's first example is (the range's examples follow contiguously).
const uint8_t *queue_range_field(const queue_range *r, const stoker_schema *schema, uint32_t f);
// A variable field f's count + 1 offsets for the range (as they lie in the push: little-endian,
// any alignment, starting where the range starts), or NULL for a fixed field.
const uint8_t *queue_range_offsets(const queue_range *r, uint32_t f);
// The range's bytes as the broker's limits count them (stoker_chunk_bytes); 0 for a zeroed range.
uint64_t queue_range_bytes(const queue_range *r);
// The dataset items of the range's examples (one each, in order), or NULL for a stream's.
const uint64_t *queue_range_items(const queue_range *r);

#endif
