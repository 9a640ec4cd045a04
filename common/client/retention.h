// Private to libstoker: a producer's retention buffer, copies of the chunks it pushed that the
// broker has not yet reported trained, in seq order and contiguous. When a restarted broker does
// not know the session, the producer pushes them again from the oldest. The bound (how many
// examples may be held) is the producer client's to enforce; this only stores.
#ifndef STOKER_RETENTION_H
#define STOKER_RETENTION_H

#include <stdint.h>

#include "push_pool.h"
#include "stoker/chunk.h"

typedef struct retention retention;

retention *retention_create(void);
// Frees every copy; accepts NULL. Before the pool, if it has one: the pool's regions of copies
// still held are given back only once their seqs are trained (push_pool_defer).
void retention_destroy(retention *r);
// From now on, copies of chunks of at least min_bytes go to pool (borrowed) while it is
// attached to a broker and has room (push_pool.h), and adopting one copies it there (the
// caller keeps its buffers): the broker reads them in place. NULL: none.
void retention_set_pool(retention *r, push_pool *pool, uint64_t min_bytes);
// Nonzero when a copy of chunk would go to the pool (attached, chunk large enough).
int retention_would_pool(const retention *r, const stoker_chunk *chunk);
// Nonzero when chunk (a held one, from retention_find) lies in the pool.
int retention_pooled(const retention *r, const stoker_chunk *chunk);
// Keeps a copy of chunk as seqs first_seq .. first_seq + count - 1 (after what is held).
// STOKER_NOMEM leaves r unchanged.
int retention_add(retention *r, const stoker_chunk *chunk, uint64_t first_seq);
// Keeps chunk itself instead of a copy: its buffers (it must own them) move into r, and chunk
// gets buffers of at least the same capacity that r no longer needs (or new ones), count 0, so
// the caller fills it again without allocating. STOKER_NOMEM or STOKER_INVALID (a borrowed or
// empty chunk) leave both unchanged.
int retention_adopt(retention *r, stoker_chunk *chunk, uint64_t first_seq);
// Forgets every chunk whose seqs are all below trained_through.
void retention_release(retention *r, uint64_t trained_through);
// Forgets the examples of every chunk wholly inside one of the n / 2 trained [first, end) pairs
// (acknowledged out of order). Its seqs stay known as a hole, so that the held seqs still run
// contiguously from the oldest (retention_find reports holes).
void retention_release_ranges(retention *r, const uint64_t *pairs, uint32_t n);
// Forgets the newest chunks, from the one that starts at seq on (a push taken back).
void retention_forget_from(retention *r, uint64_t seq);
// Examples held, and the seq of the oldest (none when empty).
uint64_t retention_examples(const retention *r);
uint64_t retention_oldest(const retention *r, uint64_t none);
// The held chunk containing seq (borrowed until the next add or release), its first seq in
// *first_seq and in *hole whether its examples were forgotten as trained (then only its count
// is meaningful); NULL when no held chunk contains it.
const stoker_chunk *retention_find(const retention *r, uint64_t seq, uint64_t *first_seq,
                                   int *hole);

#endif
