// A worker thread that draws the next epoch's permutation while the broker works. No broker
// state: the epochs (broker/epoch.c) hand it an array and take the permutation back. Floor 0 of
// the broker's objects: it calls nothing of the broker.
#ifndef DRAWER_H
#define DRAWER_H

#include <stdint.h>

typedef struct drawer drawer;

// The permutation of epoch k over 0..n-1 from (seed, k), into order (n entries).
void draw_order(uint32_t *order, uint64_t n, uint64_t seed, uint32_t k);

// A drawer with no draw running; NULL when out of memory.
drawer *drawer_create(void);
// Waits for a draw running and frees what it holds. Accepts NULL.
void drawer_destroy(drawer *d);
// Starts drawing epoch k's permutation of n items into order, which the drawer then owns (until
// drawer_take). 0 when started; nonzero when a draw runs already or no thread could start (order
// is then still the caller's).
int drawer_start(drawer *d, uint32_t *order, uint64_t n, uint64_t seed, uint32_t k);
// Epoch k's permutation if it was being drawn (waiting for the thread, which had an epoch's time
// to finish), else NULL; the caller owns what is returned. Any other draw is dropped.
uint32_t *drawer_take(drawer *d, uint32_t k);

#endif
