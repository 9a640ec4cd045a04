// Private to libstoker: the identities a trainer has seen, as per-session sets of seq
// intervals. Sessions' seqs arrive mostly in order, so the sets stay a few intervals long.
#ifndef STOKER_IDSET_H
#define STOKER_IDSET_H

#include <stdint.h>

typedef struct idset idset;

idset *idset_create(void);
void idset_destroy(idset *s);
// Adds [first, first + count) for session; returns how many of them were already present.
// Returns UINT64_MAX when out of memory (nothing added).
uint64_t idset_add(idset *s, uint64_t session, uint64_t first, uint64_t count);
// How many of [first, first + count) for session were added before (nothing is added).
uint64_t idset_count(const idset *s, uint64_t session, uint64_t first, uint64_t count);

// Writes up to max intervals as (session, lo, hi) triples into out (3 * max values): every
// session's newest intervals, an equal share each. Returns how many triples were written.
uint32_t idset_export(const idset *s, uint64_t *out, uint32_t max);

#endif
