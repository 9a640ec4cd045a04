// A producer's shared memory for pushes by reference (push_pool.h): the sealed memfd, its
// regions (a sorted array and first fit: regions are the retention buffer's slots, a few dozen),
// the regions waiting for their seqs to be trained, and the attachment to a broker.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "push_pool.h"
#include "stoker/arena.h"
#include "stoker/clock.h"
#include "stoker/error.h"

typedef struct pool_region {
    uint64_t off, len;
} pool_region;

typedef struct deferred {
    uint64_t off;
    uint64_t end; // given back once every seq below it is trained
} deferred;

struct push_pool {
    pthread_mutex_t lock;
    int memfd;
    uint8_t *base;
    uint64_t bytes;
    pool_region *regions; // sorted by off
    uint32_t n_regions, cap_regions;
    deferred *waiting;
    uint32_t n_waiting, cap_waiting;
    int sock;       // the attachment's connection; -1 when none
    char name[108]; // the arena socket it was made on
    _Atomic uint64_t secret;
};

int
push_pool_create(uint64_t bytes, push_pool **out, char *err, size_t err_len)
{
    bytes = (bytes + 4095) & ~(uint64_t)4095;
    push_pool *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return STOKER_NOMEM;
    p->sock = -1;
    // A memfd: nothing in /dev/shm whoever dies; sealed so that the broker, which maps it, can
    // trust its size (a shrunk file would fault the broker's reads).
    p->memfd = memfd_create("stoker-push-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (p->memfd < 0) {
        int e = errno;
        free(p);
        return stoker_errorf(err, err_len, STOKER_IO, "memfd_create: %s", strerror(e));
    }
    if (ftruncate(p->memfd, (off_t)bytes) != 0 ||
        fcntl(p->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 ||
        (p->base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, p->memfd, 0)) ==
            MAP_FAILED) {
        int e = errno;
        close(p->memfd);
        free(p);
        return stoker_errorf(err, err_len, STOKER_IO, "shared memory of %llu bytes: %s",
                             (unsigned long long)bytes, strerror(e));
    }
    p->bytes = bytes;
    pthread_mutex_init(&p->lock, NULL);
    *out = p;
    return STOKER_OK;
}

void
push_pool_destroy(push_pool *p)
{
    if (p == NULL)
        return;
    push_pool_detach(p);
    munmap(p->base, p->bytes);
    close(p->memfd);
    pthread_mutex_destroy(&p->lock);
    free(p->regions);
    free(p->waiting);
    free(p);
}

// --- regions ------------------------------------------------------------------------------------

static uint64_t
align64(uint64_t n)
{
    return (n + STOKER_ARENA_ALIGN - 1) & ~(uint64_t)(STOKER_ARENA_ALIGN - 1);
}

uint8_t *
push_pool_alloc(push_pool *p, uint64_t len)
{
    uint8_t *out = NULL;
    if (len == 0)
        len = 1;
    pthread_mutex_lock(&p->lock);
    if (p->n_regions == p->cap_regions) {
        uint32_t cap = p->cap_regions ? 2 * p->cap_regions : 32;
        pool_region *r = realloc(p->regions, cap * sizeof(*r));
        if (r == NULL)
            goto done;
        p->regions = r;
        p->cap_regions = cap;
    }
    uint64_t at = 0;
    for (uint32_t i = 0; i <= p->n_regions; i++) {
        uint64_t end = i < p->n_regions ? p->regions[i].off : p->bytes;
        if (end >= at && end - at >= len) {
            memmove(&p->regions[i + 1], &p->regions[i], (p->n_regions - i) * sizeof(pool_region));
            p->regions[i] = (pool_region){at, len};
            p->n_regions++;
            out = p->base + at;
            break;
        }
        if (i < p->n_regions)
            at = align64(p->regions[i].off + p->regions[i].len);
    }
done:
    pthread_mutex_unlock(&p->lock);
    return out;
}

// Drops the region at off (under the lock).
static void
drop(push_pool *p, uint64_t off)
{
    for (uint32_t i = 0; i < p->n_regions; i++) {
        if (p->regions[i].off == off) {
            memmove(&p->regions[i], &p->regions[i + 1],
                    (p->n_regions - i - 1) * sizeof(pool_region));
            p->n_regions--;
            return;
        }
    }
}

void
push_pool_free(push_pool *p, uint8_t *region)
{
    if (region == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    drop(p, (uint64_t)(region - p->base));
    pthread_mutex_unlock(&p->lock);
}

void
push_pool_defer(push_pool *p, uint8_t *region, uint64_t end)
{
    if (region == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    if (p->n_waiting == p->cap_waiting) {
        uint32_t cap = p->cap_waiting ? 2 * p->cap_waiting : 8;
        deferred *w = realloc(p->waiting, cap * sizeof(*w));
        if (w == NULL) {
            // Kept for the pool's life instead: a region lost is never a region overwritten.
            pthread_mutex_unlock(&p->lock);
            return;
        }
        p->waiting = w;
        p->cap_waiting = cap;
    }
    p->waiting[p->n_waiting++] = (deferred){(uint64_t)(region - p->base), end};
    pthread_mutex_unlock(&p->lock);
}

void
push_pool_trained(push_pool *p, uint64_t through)
{
    pthread_mutex_lock(&p->lock);
    for (uint32_t i = p->n_waiting; i-- > 0;) {
        if (p->waiting[i].end <= through) {
            drop(p, p->waiting[i].off);
            p->waiting[i] = p->waiting[--p->n_waiting];
        }
    }
    pthread_mutex_unlock(&p->lock);
}

int
push_pool_chunk(push_pool *p, const stoker_schema *schema, uint32_t capacity, stoker_chunk *chunk,
                uint8_t **region)
{
    memset(chunk, 0, sizeof(*chunk));
    if (capacity == 0)
        return STOKER_INVALID;
    uint64_t offsets[STOKER_MAX_FIELDS], at = 0;
    for (uint32_t i = 0; i < schema->n_fields; i++) {
        offsets[i] = at;
        at = align64(at + stoker_field_bytes(&schema->fields[i]) * (uint64_t)capacity);
    }
    uint8_t *base = push_pool_alloc(p, at);
    if (base == NULL)
        return STOKER_NOMEM;
    chunk->schema = *schema;
    chunk->capacity = capacity;
    for (uint32_t i = 0; i < schema->n_fields; i++)
        chunk->data[i] = base + offsets[i];
    *region = base;
    return STOKER_OK;
}

// Bytes of field f's blob of chunk c: its values, after a variable field's count + 1 offsets.
static uint64_t
blob_bytes(const stoker_chunk *c, uint32_t f)
{
    uint64_t values = stoker_chunk_field_bytes(c, f, 0, c->count);
    return c->schema.fields[f].variable ? ((uint64_t)c->count + 1) * 8 + values : values;
}

int
push_pool_copy(push_pool *p, const stoker_chunk *src, stoker_chunk *chunk, uint8_t **region)
{
    memset(chunk, 0, sizeof(*chunk));
    if (src->count == 0)
        return STOKER_INVALID;
    uint64_t offsets[STOKER_MAX_FIELDS], at = 0;
    for (uint32_t i = 0; i < src->schema.n_fields; i++) {
        offsets[i] = at;
        at = align64(at + blob_bytes(src, i));
    }
    uint8_t *base = push_pool_alloc(p, at);
    if (base == NULL)
        return STOKER_NOMEM;
    chunk->schema = src->schema;
    chunk->capacity = chunk->count = src->count;
    for (uint32_t i = 0; i < src->schema.n_fields; i++) {
        uint8_t *blob = base + offsets[i];
        uint64_t values = stoker_chunk_field_bytes(src, i, 0, src->count);
        if (src->schema.fields[i].variable) {
            uint64_t *offs = (uint64_t *)(void *)blob;
            uint64_t first = stoker_chunk_var_offset(src, i, 0);
            for (uint32_t k = 0; k <= src->count; k++)
                offs[k] = stoker_chunk_var_offset(src, i, k) - first;
            chunk->offsets[i] = offs;
            chunk->value_capacity[i] = (size_t)values;
            blob += ((size_t)src->count + 1) * 8;
        }
        if (values > 0)
            memcpy(blob, src->data[i], (size_t)values);
        chunk->data[i] = blob;
    }
    *region = base;
    return STOKER_OK;
}

int
push_pool_offsets(const push_pool *p, const stoker_chunk *chunk, uint64_t *offsets)
{
    for (uint32_t i = 0; i < chunk->schema.n_fields; i++) {
        const uint8_t *d = chunk->data[i];
        uint64_t len = blob_bytes(chunk, i);
        if (chunk->schema.fields[i].variable) {
            // Its blob starts at its offsets, which its values must follow.
            const uint8_t *o = (const uint8_t *)chunk->offsets[i];
            if (o == NULL || d != o + ((size_t)chunk->count + 1) * 8)
                return 0;
            d = o;
        }
        if (d == NULL || d < p->base || (uint64_t)(d - p->base) > p->bytes ||
            len > p->bytes - (uint64_t)(d - p->base))
            return 0;
    }
    for (uint32_t i = 0; i < chunk->schema.n_fields; i++)
        offsets[i] =
            (uint64_t)((chunk->schema.fields[i].variable ? (const uint8_t *)chunk->offsets[i]
                                                         : chunk->data[i]) -
                       p->base);
    return 1;
}

// --- the attachment -----------------------------------------------------------------------------

// Waits until sock has events (POLLIN or POLLOUT), at most until deadline_ms. 1 when it has.
static int
wait_for(int sock, short events, uint64_t deadline_ms)
{
    for (;;) {
        uint64_t now = stoker_now_ms();
        if (now >= deadline_ms)
            return 0;
        struct pollfd pf = {.fd = sock, .events = events};
        int rv = poll(&pf, 1, (int)(deadline_ms - now));
        if (rv > 0)
            return 1;
        if (rv == 0 || errno != EINTR)
            return 0;
    }
}

int
push_pool_attach(push_pool *p, const char *socket_name, uint64_t ticket, uint32_t timeout_ms,
                 char *err, size_t err_len)
{
    push_pool_detach(p);
    uint64_t deadline = stoker_now_ms() + timeout_ms;
    int sock;
    int rv = stoker_arena_connect(socket_name, timeout_ms, &sock, err, err_len);
    if (rv != STOKER_OK)
        return rv;
    uint8_t msg[16];
    stoker_arena_put_word(msg, ticket);
    if (stoker_arena_send_fd(sock, msg, 8, p->memfd) != 8) {
        int e = errno;
        close(sock);
        return stoker_errorf(err, err_len, STOKER_IO, "arena socket: sending the pool: %s",
                             strerror(e));
    }
    size_t got = 0;
    while (got < sizeof(msg) && wait_for(sock, POLLIN, deadline)) {
        ssize_t n = recv(sock, msg + got, sizeof(msg) - got, 0);
        if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR)))
            break;
        got += n > 0 ? (size_t)n : 0;
    }
    if (got != sizeof(msg) || stoker_arena_get_word(msg) == 0) {
        close(sock);
        return stoker_errorf(err, err_len, STOKER_UNAUTHENTICATED,
                             "the broker did not take our shared memory (ticket or user "
                             "refused, or no answer within %u ms)",
                             timeout_ms);
    }
    pthread_mutex_lock(&p->lock);
    p->sock = sock;
    snprintf(p->name, sizeof(p->name), "%s", socket_name);
    atomic_store(&p->secret, stoker_arena_get_word(msg));
    pthread_mutex_unlock(&p->lock);
    return STOKER_OK;
}

void
push_pool_detach(push_pool *p)
{
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->secret, 0);
    if (p->sock >= 0)
        close(p->sock);
    p->sock = -1;
    pthread_mutex_unlock(&p->lock);
}

int
push_pool_attached_to(push_pool *p, const char *socket_name)
{
    pthread_mutex_lock(&p->lock);
    int yes = p->sock >= 0 && strcmp(p->name, socket_name) == 0;
    if (yes) {
        // The broker never writes to us: anything readable is the connection's end.
        struct pollfd pf = {.fd = p->sock, .events = POLLIN};
        yes = poll(&pf, 1, 0) == 0;
    }
    pthread_mutex_unlock(&p->lock);
    return yes;
}

uint64_t
push_pool_secret(const push_pool *p)
{
    return atomic_load(&((push_pool *)p)->secret);
}
