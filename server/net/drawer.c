// The epochs' permutation drawer: one thread per draw, joined when the permutation is taken.
#include <pthread.h>
#include <stdlib.h>

#include "drawer.h"
#include "stoker/rng.h"

struct drawer {
    pthread_t thread;
    int running; // the thread was started and not yet joined
    uint32_t number;
    uint32_t *order; // (n,) owned until taken
    uint64_t n, seed;
};

__extension__ typedef unsigned __int128 u128;

// Fisher-Yates. A draw below i + 1 is the high half of a 64x64-bit product (Lemire's reduction),
// not a division: an epoch of N items costs N of them.
void
draw_order(uint32_t *order, uint64_t n, uint64_t seed, uint32_t k)
{
    for (uint64_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    stoker_rng rng;
    stoker_rng_seed(&rng, seed ^ ((uint64_t)k * 0x9e3779b97f4a7c15ull));
    for (uint64_t i = n - 1; i > 0; i--) {
        uint64_t j = (uint64_t)(((u128)stoker_rng_u64(&rng) * (i + 1)) >> 64);
        uint32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

static void *
drawer_main(void *arg)
{
    drawer *d = arg;
    draw_order(d->order, d->n, d->seed, d->number);
    return NULL;
}

drawer *
drawer_create(void)
{
    return calloc(1, sizeof(drawer));
}

void
drawer_destroy(drawer *d)
{
    if (d == NULL)
        return;
    if (d->running)
        pthread_join(d->thread, NULL);
    free(d->order);
    free(d);
}

int
drawer_start(drawer *d, uint32_t *order, uint64_t n, uint64_t seed, uint32_t k)
{
    if (d->running)
        return 1;
    d->order = order;
    d->number = k;
    d->n = n;
    d->seed = seed;
    if (pthread_create(&d->thread, NULL, drawer_main, d) != 0) {
        d->order = NULL;
        return 1;
    }
    d->running = 1;
    return 0;
}

uint32_t *
drawer_take(drawer *d, uint32_t k)
{
    if (!d->running)
        return NULL;
    pthread_join(d->thread, NULL);
    d->running = 0;
    uint32_t *order = d->order;
    d->order = NULL;
    if (d->number != k) {
        free(order);
        return NULL;
    }
    return order;
}
