// A producer's shared memory for pushes by reference (common/transport/push_pool.c) and the
// retention buffer that keeps its copies there (common/client/retention.c). Regions are 64-byte
// aligned, disjoint and inside the pool; a region comes back after a free, and a deferred one only
// once the seqs it carried are trained. The attach protocol is played against a fake broker here (a
// thread on an abstract Unix socket that takes the ticket and the memfd and answers as told): it
// gives the pool a secret without a real broker, which retention needs before it uses the pool at
// all, and it lets these tests look at the memfd the broker would map (its seals, its size, its
// bytes).
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "push_pool.h"
#include "retention.h"
#include "stoker/arena.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/schema.h"

static stoker_schema
schema_of(const char *spec)
{
    stoker_schema s;
    char err[128];
    cr_assert_eq(stoker_schema_parse(spec, &s, err, sizeof(err)), STOKER_OK, "%s", err);
    return s;
}

static push_pool *
new_pool(uint64_t bytes)
{
    push_pool *p = NULL;
    char err[256] = "";
    int rv = push_pool_create(bytes, &p, err, sizeof(err));
    cr_assert_eq(rv, STOKER_OK, "push_pool_create(%llu): %s", (unsigned long long)bytes, err);
    cr_assert_not_null(p);
    return p;
}

// Where len bytes at at lie in the pool, through push_pool_offsets on a one-field chunk: 1 and
// *off when all of them do, else 0. The pool's base is not part of its API; offsets are.
static int
offset_of(const push_pool *p, uint8_t *at, uint32_t len, uint64_t *off)
{
    stoker_chunk c = {.schema = schema_of("b:uint8[1]"), .count = len, .capacity = len};
    c.data[0] = at;
    uint64_t offs[STOKER_MAX_FIELDS] = {0};
    int in = push_pool_offsets(p, &c, offs);
    *off = offs[0];
    return in;
}

// --- a fake broker's end of the attach protocol -------------------------------------------------

typedef enum fake_mode {
    FAKE_ANSWER, // the secret and the size, as the broker answers a good ticket
    FAKE_ZERO,   // 16 bytes whose secret is 0
    FAKE_CLOSE,  // closes the connection without an answer, as the broker refusing
    FAKE_SILENT, // keeps the connection and never answers
} fake_mode;

typedef struct fake_broker {
    char name[64]; // the abstract socket's name (without the leading NUL)
    fake_mode mode;
    uint64_t secret;
    int listen_fd, conn_fd, passed_fd;
    ssize_t got;        // bytes of the ticket message received
    uint64_t ticket;    // as received
    int seals;          // of the passed fd (F_GET_SEALS), -1 when none came
    uint64_t size;      // of the passed fd
    const uint8_t *map; // the passed fd mapped read-only, as the broker maps it
    pthread_t thread;
} fake_broker;

static void *
fake_serve(void *arg)
{
    fake_broker *f = arg;
    struct pollfd pf = {.fd = f->listen_fd, .events = POLLIN};
    if (poll(&pf, 1, 5000) != 1)
        return NULL;
    f->conn_fd = accept(f->listen_fd, NULL, NULL);
    if (f->conn_fd < 0)
        return NULL;
    pf = (struct pollfd){.fd = f->conn_fd, .events = POLLIN};
    if (poll(&pf, 1, 5000) != 1)
        return NULL;
    uint8_t buf[8];
    char ctrl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl, .msg_controllen = sizeof(ctrl)};
    f->got = recvmsg(f->conn_fd, &mh, MSG_CMSG_CLOEXEC);
    struct cmsghdr *c = f->got > 0 ? CMSG_FIRSTHDR(&mh) : NULL;
    if (c != NULL && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
        memcpy(&f->passed_fd, CMSG_DATA(c), sizeof(int));
    if (f->got == 8)
        f->ticket = stoker_arena_get_word(buf);
    if (f->passed_fd >= 0) {
        struct stat st;
        f->seals = fcntl(f->passed_fd, F_GET_SEALS);
        if (fstat(f->passed_fd, &st) == 0 && st.st_size > 0) {
            f->size = (uint64_t)st.st_size;
            void *m = mmap(NULL, f->size, PROT_READ, MAP_SHARED, f->passed_fd, 0);
            f->map = m != MAP_FAILED ? m : NULL;
        }
    }
    uint8_t answer[16];
    switch (f->mode) {
    case FAKE_ANSWER:
    case FAKE_ZERO:
        stoker_arena_put_word(answer, f->mode == FAKE_ANSWER ? f->secret : 0);
        stoker_arena_put_word(answer + 8, f->size);
        (void)send(f->conn_fd, answer, sizeof(answer), MSG_NOSIGNAL);
        break;
    case FAKE_CLOSE:
        close(f->conn_fd);
        f->conn_fd = -1;
        break;
    case FAKE_SILENT:
        break;
    }
    return NULL;
}

// Listens on a fresh abstract name and serves one attach in a thread, as mode says.
static void
fake_start(fake_broker *f, fake_mode mode, uint64_t secret)
{
    static unsigned n;
    *f = (fake_broker){.mode = mode,
                       .secret = secret,
                       .listen_fd = -1,
                       .conn_fd = -1,
                       .passed_fd = -1,
                       .seals = -1};
    snprintf(f->name, sizeof(f->name), "stoker-test-pool-%d-%u-%llx", (int)getpid(), n++,
             (unsigned long long)stoker_now_ms());
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t len = strlen(f->name);
    memcpy(addr.sun_path + 1, f->name, len);
    f->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(f->listen_fd, 0, "socket: %s", strerror(errno));
    cr_assert_eq(bind(f->listen_fd, (struct sockaddr *)&addr,
                      (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len)),
                 0, "bind @%s: %s", f->name, strerror(errno));
    cr_assert_eq(listen(f->listen_fd, 4), 0);
    cr_assert_eq(pthread_create(&f->thread, NULL, fake_serve, f), 0);
}

static void
fake_join(fake_broker *f)
{
    pthread_join(f->thread, NULL);
}

// Closes the fake broker's end of the connection: the producer's side sees the broker gone.
static void
fake_hang_up(fake_broker *f)
{
    if (f->conn_fd >= 0)
        close(f->conn_fd);
    f->conn_fd = -1;
}

static void
fake_stop(fake_broker *f)
{
    fake_hang_up(f);
    if (f->map != NULL)
        munmap((void *)f->map, f->size);
    if (f->passed_fd >= 0)
        close(f->passed_fd);
    if (f->listen_fd >= 0)
        close(f->listen_fd);
    f->map = NULL;
    f->passed_fd = f->listen_fd = -1;
}

// A pool of bytes attached to a fake broker (which stays connected until fake_stop): the only
// way to a nonzero secret, without which retention never uses the pool.
static push_pool *
attached_pool(uint64_t bytes, fake_broker *f)
{
    push_pool *p = new_pool(bytes);
    fake_start(f, FAKE_ANSWER, 0x5ec7e7);
    char err[256] = "";
    int rv = push_pool_attach(p, f->name, 42, 2000, err, sizeof(err));
    fake_join(f);
    cr_assert_eq(rv, STOKER_OK, "attach to the fake broker: %s", err);
    cr_assert_eq(push_pool_secret(p), 0x5ec7e7);
    return p;
}

// --- regions ------------------------------------------------------------------------------------

Test(push_pool, alloc_gives_aligned_disjoint_regions_inside_the_pool)
{
    push_pool *p = new_pool(1 << 20);
    static const uint32_t lens[] = {1, 100, 64, 4095, 1000, 65, 0, 128, 7, 20000};
    enum { N = sizeof(lens) / sizeof(lens[0]) };
    uint8_t *at[N];
    uint64_t off[N];
    for (uint32_t i = 0; i < N; i++) {
        at[i] = push_pool_alloc(p, lens[i]);
        cr_assert_not_null(at[i], "alloc of %u bytes", lens[i]);
        cr_assert_eq((uintptr_t)at[i] % 64, 0, "region %u at %p: not 64-byte aligned", i,
                     (void *)at[i]);
        uint32_t len = lens[i] ? lens[i] : 1; // an empty region still takes a byte
        cr_assert(offset_of(p, at[i], len, &off[i]), "region %u not inside the pool", i);
        cr_assert_leq(off[i] + len, 1 << 20);
        memset(at[i], (int)i + 1, len); // mapped and writable
    }
    for (uint32_t i = 0; i < N; i++) {
        uint64_t li = lens[i] ? lens[i] : 1;
        for (uint32_t j = i + 1; j < N; j++) {
            uint64_t lj = lens[j] ? lens[j] : 1;
            cr_assert(off[i] + li <= off[j] || off[j] + lj <= off[i],
                      "regions %u [%llu, +%llu) and %u [%llu, +%llu) overlap", i,
                      (unsigned long long)off[i], (unsigned long long)li, j,
                      (unsigned long long)off[j], (unsigned long long)lj);
        }
        cr_assert_eq(at[i][li - 1], (uint8_t)(i + 1), "region %u overwritten by another", i);
    }
    push_pool_destroy(p);
}

Test(push_pool, a_freed_region_is_reused)
{
    push_pool *p = new_pool(1 << 20);
    uint8_t *a = push_pool_alloc(p, 5000);
    uint8_t *b = push_pool_alloc(p, 5000);
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    cr_assert_neq(a, b);
    push_pool_free(p, a);
    push_pool_free(p, NULL); // accepted, nothing happens
    uint8_t *c = push_pool_alloc(p, 5000);
    cr_assert_eq(c, a, "the freed region comes back (first fit)");
    uint8_t *d = push_pool_alloc(p, 5000);
    cr_assert(d != a && d != b, "a region still held is not handed out twice");
    push_pool_destroy(p);
}

Test(push_pool, alloc_fails_when_full_and_succeeds_after_a_free)
{
    // 1000 bytes are rounded up to a page: exactly 4096 fit, 4097 do not.
    push_pool *p = new_pool(1000);
    cr_assert_null(push_pool_alloc(p, 4097), "more than the pool");
    uint8_t *whole = push_pool_alloc(p, 4096);
    cr_assert_not_null(whole, "the whole (rounded) pool");
    cr_assert_null(push_pool_alloc(p, 1), "nothing left");
    push_pool_free(p, whole);
    cr_assert_eq(push_pool_alloc(p, 4096), whole);
    push_pool_destroy(p);

    p = new_pool(65536);
    uint8_t *a = push_pool_alloc(p, 32768), *b = push_pool_alloc(p, 32768);
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    cr_assert_null(push_pool_alloc(p, 1), "full");
    push_pool_free(p, b);
    cr_assert_null(push_pool_alloc(p, 32769), "a free gap of 32768 does not hold 32769");
    cr_assert_eq(push_pool_alloc(p, 100), b);
    // Two gaps of 16 KiB do not make one of 32 KiB.
    push_pool_free(p, b);
    uint8_t *c = push_pool_alloc(p, 16384);
    cr_assert_eq(c, b);
    push_pool_free(p, a);
    uint8_t *d = push_pool_alloc(p, 16384);
    cr_assert_eq(d, a);
    cr_assert_null(push_pool_alloc(p, 32768), "no 32 KiB gap: [16K, 32K) and [48K, 64K)");
    cr_assert_not_null(push_pool_alloc(p, 16384));
    push_pool_destroy(p);
}

Test(push_pool, chunk_lays_fields_out_aligned_in_one_region)
{
    push_pool *p = new_pool(1 << 20);
    stoker_schema s = schema_of("a:uint8[3],b:float32[5],c:int64[2],d:uint8[1]");
    stoker_chunk c;
    uint8_t *region = NULL;
    cr_assert_eq(push_pool_chunk(p, &s, 7, &c, &region), STOKER_OK);
    cr_assert_eq(c.data[0], region, "the first field starts the region");
    cr_assert_eq(c.capacity, 7);
    cr_assert_eq(c.count, 0);
    cr_assert_eq(c.owns_data, 0, "the pool's buffers are not the chunk's to free");
    cr_assert(stoker_schema_equal(&c.schema, &s));
    uint64_t region_off;
    cr_assert(offset_of(p, region, 1, &region_off));
    for (uint32_t i = 0; i < s.n_fields; i++) {
        cr_assert_eq((uintptr_t)c.data[i] % 64, 0, "field %u not 64-byte aligned", i);
        if (i > 0)
            cr_assert_geq(c.data[i], c.data[i - 1] + stoker_field_bytes(&s.fields[i - 1]) * 7,
                          "field %u overlaps field %u", i, i - 1);
    }
    // All of the chunk is in the pool; offsets say where each field starts.
    for (uint32_t i = 0; i < s.n_fields; i++)
        memset(c.data[i], 0xa0 + (int)i, stoker_field_bytes(&s.fields[i]) * 7);
    c.count = 7;
    uint64_t offs[STOKER_MAX_FIELDS];
    cr_assert_eq(push_pool_offsets(p, &c, offs), 1);
    for (uint32_t i = 0; i < s.n_fields; i++) {
        cr_assert_eq(offs[i], region_off + (uint64_t)(c.data[i] - region), "field %u offset", i);
        cr_assert_eq(offs[i] % 64, 0);
    }
    // The region covers the last field: the next one starts after it.
    uint8_t *last_end = c.data[3] + stoker_field_bytes(&s.fields[3]) * 7;
    uint8_t *next = push_pool_alloc(p, 64);
    cr_assert_not_null(next);
    cr_assert_geq(next, last_end, "the next region overlaps the chunk's last field");
    for (uint32_t i = 0; i < s.n_fields; i++)
        cr_assert_eq(c.data[i][0], (uint8_t)(0xa0 + i), "field %u overwritten", i);
    // Freeing the region frees the whole chunk: one as large fits where it was.
    push_pool_free(p, region);
    stoker_chunk again;
    uint8_t *region2 = NULL;
    cr_assert_eq(push_pool_chunk(p, &s, 7, &again, &region2), STOKER_OK);
    cr_assert_eq(region2, region);
    cr_assert_eq(push_pool_chunk(p, &s, 0, &again, &region2), STOKER_INVALID, "capacity 0");
    push_pool_destroy(p);
}

Test(push_pool, chunk_fails_when_the_pool_is_full)
{
    push_pool *p = new_pool(8192);
    stoker_schema s = schema_of("x:uint8[1000]");
    stoker_chunk c;
    uint8_t *region;
    cr_assert_eq(push_pool_chunk(p, &s, 8, &c, &region), STOKER_OK); // 8000 bytes
    memset(&c, 0x5a, sizeof(c));
    cr_assert_eq(push_pool_chunk(p, &s, 8, &c, &region), STOKER_NOMEM);
    cr_assert_eq(c.capacity, 0, "chunk zeroed");
    cr_assert_null(c.data[0]);
    cr_assert_eq(c.schema.n_fields, 0);
    push_pool_destroy(p);
}

Test(push_pool, offsets_only_for_chunks_wholly_in_the_pool)
{
    push_pool *p = new_pool(8192);
    stoker_schema s = schema_of("x:float32[4],y:uint8[16]");
    stoker_chunk heap;
    cr_assert_eq(stoker_chunk_init(&heap, &s, 4), STOKER_OK);
    heap.count = 4;
    uint64_t offs[STOKER_MAX_FIELDS];
    for (uint32_t i = 0; i < STOKER_MAX_FIELDS; i++)
        offs[i] = 0xdead;
    cr_assert_eq(push_pool_offsets(p, &heap, offs), 0, "a heap chunk");
    cr_assert_eq(offs[0], 0xdead, "nothing written");
    cr_assert_eq(offs[1], 0xdead, "nothing written");
    // One field in the pool, the other on the heap: not a push by reference.
    stoker_chunk mixed = heap;
    mixed.data[0] = push_pool_alloc(p, 64);
    cr_assert_not_null(mixed.data[0]);
    cr_assert_eq(push_pool_offsets(p, &mixed, offs), 0, "a chunk half in the pool");
    cr_assert_eq(offs[0], 0xdead);
    // A field that runs past the pool's end.
    uint8_t *tail = push_pool_alloc(p, 8192 - 64);
    cr_assert_not_null(tail);
    uint64_t off;
    cr_assert_eq(offset_of(p, tail, 8192 - 64, &off), 1, "exactly to the end");
    cr_assert_eq(off, 64);
    cr_assert_eq(offset_of(p, tail, 8192 - 63, &off), 0, "one byte past the end");
    stoker_chunk_fini(&heap);
    push_pool_destroy(p);
}

Test(push_pool, a_deferred_region_waits_for_its_seqs)
{
    push_pool *p = new_pool(65536);
    uint8_t *a = push_pool_alloc(p, 32768), *b = push_pool_alloc(p, 32768);
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    push_pool_defer(p, a, 100); // given back once seqs below 100 are trained
    push_pool_defer(p, b, 200);
    push_pool_defer(p, NULL, 1); // accepted, nothing happens
    cr_assert_null(push_pool_alloc(p, 1), "deferred regions are still held");
    push_pool_trained(p, 99);
    cr_assert_null(push_pool_alloc(p, 1), "seq 99 not yet trained: still held");
    push_pool_trained(p, 100);
    cr_assert_eq(push_pool_alloc(p, 32768), a, "trained through its end: given back");
    cr_assert_null(push_pool_alloc(p, 1), "the other waits for seq 199");
    push_pool_trained(p, 150);
    cr_assert_null(push_pool_alloc(p, 1));
    push_pool_trained(p, 1000);
    cr_assert_eq(push_pool_alloc(p, 32768), b);
    // Given back once only: a second report does not free the region now held again.
    push_pool_trained(p, 2000);
    cr_assert_null(push_pool_alloc(p, 1));
    push_pool_destroy(p);
}

Test(push_pool, many_deferred_regions_in_any_order)
{
    // More than the waiting list's first capacity (8), given back out of order.
    push_pool *p = new_pool(64 * 4096);
    uint8_t *r[40];
    for (uint32_t i = 0; i < 40; i++) {
        r[i] = push_pool_alloc(p, 4096);
        cr_assert_not_null(r[i]);
    }
    for (uint32_t i = 0; i < 40; i++)
        push_pool_defer(p, r[i], 1000 - 10 * (uint64_t)i); // the last deferred ends first
    for (uint32_t i = 40; i < 64; i++)
        cr_assert_not_null(push_pool_alloc(p, 4096));
    cr_assert_null(push_pool_alloc(p, 1));
    push_pool_trained(p, 1000 - 10 * 19); // r[19..39]
    for (uint32_t i = 19; i < 40; i++)
        cr_assert_eq(push_pool_alloc(p, 4096), r[i], "r[%u] given back", i);
    cr_assert_null(push_pool_alloc(p, 1), "r[0..18] still wait");
    push_pool_trained(p, 1000);
    for (uint32_t i = 0; i < 19; i++)
        cr_assert_eq(push_pool_alloc(p, 4096), r[i], "r[%u] given back", i);
    push_pool_destroy(p);
}

typedef struct churn {
    push_pool *p;
    uint8_t tag;
    int bad;
} churn;

static void *
churn_main(void *arg)
{
    churn *c = arg;
    uint32_t x = c->tag * 2654435761u;
    for (int i = 0; i < 3000 && !c->bad; i++) {
        x = x * 1103515245u + 12345u;
        uint32_t len = 1 + (x >> 8) % 8192;
        uint8_t *r = push_pool_alloc(c->p, len);
        if (r == NULL) {
            c->bad = 1;
            break;
        }
        memset(r, c->tag, len);
        for (uint32_t k = 0; k < len; k++)
            if (r[k] != c->tag)
                c->bad = 2;
        push_pool_free(c->p, r);
    }
    return NULL;
}

Test(push_pool, concurrent_alloc_and_free_never_share_a_region)
{
    push_pool *p = new_pool(1 << 20);
    pthread_t t[4];
    churn c[4];
    for (int i = 0; i < 4; i++) {
        c[i] = (churn){.p = p, .tag = (uint8_t)(i + 1)};
        cr_assert_eq(pthread_create(&t[i], NULL, churn_main, &c[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(c[i].bad, 0, "thread %d: %s", i,
                     c[i].bad == 1 ? "no region in a pool of 1 MiB" : "its region overwritten");
    cr_assert_not_null(push_pool_alloc(p, 1 << 20), "every region given back");
    push_pool_destroy(p);
}

// --- the attachment -----------------------------------------------------------------------------

Test(push_pool, attach_hands_the_broker_a_sealed_memfd_it_can_read)
{
    push_pool *p = new_pool(1 << 20);
    cr_assert_eq(push_pool_secret(p), 0, "not attached yet");
    fake_broker f;
    fake_start(&f, FAKE_ANSWER, 0x1234567890abcdefull);
    char err[256] = "";
    int rv = push_pool_attach(p, f.name, 0x0102030405060708ull, 2000, err, sizeof(err));
    fake_join(&f);
    cr_assert_eq(rv, STOKER_OK, "%s", err);
    cr_assert_eq(push_pool_secret(p), 0x1234567890abcdefull);
    cr_assert_eq(f.got, 8, "the ticket is 8 bytes");
    cr_assert_eq(f.ticket, 0x0102030405060708ull, "little-endian ticket");
    cr_assert_geq(f.passed_fd, 0, "the memfd came with it");
    // Sealed: the broker can trust its size (a shrink would fault its reads) and nobody can
    // take the seals off.
    cr_assert_neq(f.seals, -1, "F_GET_SEALS: not a memfd that allows sealing");
    cr_assert(f.seals & F_SEAL_SHRINK, "seals %#x: not against shrinking", f.seals);
    cr_assert(f.seals & F_SEAL_GROW, "seals %#x: not against growing", f.seals);
    cr_assert(f.seals & F_SEAL_SEAL, "seals %#x: more seals could be added", f.seals);
    cr_assert_eq(f.size, 1 << 20);
    cr_assert_neq(ftruncate(f.passed_fd, 4096), 0, "a sealed memfd cannot shrink");
    // What the producer writes in a region, the broker reads at its offset.
    cr_assert_not_null(f.map);
    uint8_t *r = push_pool_alloc(p, 3000);
    cr_assert_not_null(r);
    for (uint32_t i = 0; i < 3000; i++)
        r[i] = (uint8_t)(i * 7 + 3);
    uint64_t off;
    cr_assert(offset_of(p, r, 3000, &off));
    cr_assert_eq(memcmp(f.map + off, r, 3000), 0, "the broker's mapping sees other bytes");
    // Attached while the broker holds the connection, to that socket only.
    cr_assert(push_pool_attached_to(p, f.name));
    cr_assert_not(push_pool_attached_to(p, "some-other-broker"));
    fake_hang_up(&f);
    uint64_t deadline = stoker_now_ms() + 1000;
    while (push_pool_attached_to(p, f.name) && stoker_now_ms() < deadline)
        stoker_sleep_ms(5, NULL);
    cr_assert_not(push_pool_attached_to(p, f.name), "the broker's end went unnoticed");
    push_pool_detach(p);
    cr_assert_eq(push_pool_secret(p), 0, "detached: no secret");
    cr_assert_not(push_pool_attached_to(p, f.name));
    fake_stop(&f);
    push_pool_destroy(p);
}

Test(push_pool, attach_fails_when_the_broker_refuses_or_is_silent)
{
    push_pool *p = new_pool(65536);
    char err[256] = "";
    fake_broker f;
    // The broker closes the connection: ticket or user refused.
    fake_start(&f, FAKE_CLOSE, 0);
    cr_assert_eq(push_pool_attach(p, f.name, 1, 2000, err, sizeof(err)), STOKER_UNAUTHENTICATED);
    fake_join(&f);
    cr_assert(strstr(err, "did not take our shared memory") != NULL, "err: %s", err);
    cr_assert_eq(push_pool_secret(p), 0);
    cr_assert_not(push_pool_attached_to(p, f.name));
    fake_stop(&f);
    // An answer whose secret is 0 is no answer.
    fake_start(&f, FAKE_ZERO, 0);
    cr_assert_eq(push_pool_attach(p, f.name, 1, 2000, err, sizeof(err)), STOKER_UNAUTHENTICATED);
    fake_join(&f);
    cr_assert_eq(push_pool_secret(p), 0);
    fake_stop(&f);
    // No answer: bounded by the timeout.
    fake_start(&f, FAKE_SILENT, 0);
    uint64_t t0 = stoker_now_ms();
    cr_assert_eq(push_pool_attach(p, f.name, 1, 200, err, sizeof(err)), STOKER_UNAUTHENTICATED);
    uint64_t took = stoker_now_ms() - t0;
    fake_join(&f);
    cr_assert_geq(took, 150, "gave up after %llu ms, before its timeout", (unsigned long long)took);
    cr_assert_lt(took, 2000, "waited %llu ms for a 200 ms timeout", (unsigned long long)took);
    cr_assert_eq(push_pool_secret(p), 0);
    fake_stop(&f);
    // Nobody on the name (a broker on another host), and a name that cannot be one.
    cr_assert_eq(push_pool_attach(p, "stoker-test-nobody-here", 1, 200, err, sizeof(err)),
                 STOKER_CONNECTION);
    cr_assert(strstr(err, "no arena socket") != NULL, "err: %s", err);
    cr_assert_eq(push_pool_attach(p, "", 1, 200, err, sizeof(err)), STOKER_INVALID);
    cr_assert_eq(push_pool_secret(p), 0);
    push_pool_destroy(p);
}

Test(push_pool, a_new_attach_replaces_the_old_one)
{
    fake_broker f1, f2;
    push_pool *p = attached_pool(65536, &f1);
    fake_start(&f2, FAKE_ANSWER, 0x77);
    char err[256] = "";
    cr_assert_eq(push_pool_attach(p, f2.name, 2, 2000, err, sizeof(err)), STOKER_OK, "%s", err);
    fake_join(&f2);
    cr_assert_eq(push_pool_secret(p), 0x77, "the new broker's secret");
    cr_assert(push_pool_attached_to(p, f2.name));
    cr_assert_not(push_pool_attached_to(p, f1.name));
    // The first broker sees its connection end: it drops the pool from its table.
    struct pollfd pf = {.fd = f1.conn_fd, .events = POLLIN};
    cr_assert_eq(poll(&pf, 1, 1000), 1);
    char byte;
    cr_assert_eq(recv(f1.conn_fd, &byte, 1, MSG_DONTWAIT), 0, "the old connection is closed");
    // A refused attach leaves no attachment behind (the old one is closed first).
    fake_broker f3;
    fake_start(&f3, FAKE_CLOSE, 0);
    cr_assert_neq(push_pool_attach(p, f3.name, 3, 2000, err, sizeof(err)), STOKER_OK);
    fake_join(&f3);
    cr_assert_eq(push_pool_secret(p), 0);
    cr_assert_not(push_pool_attached_to(p, f2.name));
    fake_stop(&f1);
    fake_stop(&f2);
    fake_stop(&f3);
    push_pool_destroy(p);
}

// --- retention with a pool ----------------------------------------------------------------------

static void
fill(stoker_chunk *c, uint32_t count, uint8_t byte)
{
    for (uint32_t f = 0; f < c->schema.n_fields; f++)
        for (size_t k = 0; k < (size_t)count * stoker_field_bytes(&c->schema.fields[f]); k++)
            c->data[f][k] = (uint8_t)(byte + k * 13);
    c->count = count;
}

// Asserts that the held chunk at seq has count examples filled by fill(byte), and returns it.
static const stoker_chunk *
held(const retention *r, uint64_t seq, uint32_t count, uint8_t byte)
{
    uint64_t first;
    int hole;
    const stoker_chunk *k = retention_find(r, seq, &first, &hole);
    cr_assert_not_null(k, "seq %llu not held", (unsigned long long)seq);
    cr_assert_eq(hole, 0);
    cr_assert_eq(k->count, count);
    for (uint32_t f = 0; f < k->schema.n_fields; f++)
        for (size_t i = 0; i < (size_t)count * stoker_field_bytes(&k->schema.fields[f]); i++)
            cr_assert_eq(k->data[f][i], (uint8_t)(byte + i * 13),
                         "seq %llu field %u byte %zu: the copy differs", (unsigned long long)seq, f,
                         i);
    return k;
}

// x:uint8[1000], 8 examples: 8000 bytes, a 64-byte multiple; a pool of 16 KiB holds two.
#define SPEC   "x:uint8[1000]"
#define REGION 8000u

Test(retention_pool, large_chunks_go_to_the_pool_small_ones_to_the_heap)
{
    fake_broker f;
    push_pool *p = attached_pool(1 << 20, &f);
    stoker_schema s = schema_of(SPEC);
    retention *r = retention_create();
    retention_set_pool(r, p, 4096);
    stoker_chunk c;
    cr_assert_eq(stoker_chunk_init(&c, &s, 8), STOKER_OK);
    fill(&c, 8, 1);
    cr_assert_eq(retention_add(r, &c, 0), STOKER_OK);
    const stoker_chunk *k = held(r, 0, 8, 1);
    cr_assert(retention_pooled(r, k), "8000 bytes >= 4096: in the pool");
    uint64_t offs[STOKER_MAX_FIELDS];
    cr_assert_eq(push_pool_offsets(p, k, offs), 1);
    cr_assert_eq(memcmp(f.map + offs[0], c.data[0], REGION), 0, "the broker reads the copy");
    fill(&c, 4, 2); // 4000 bytes: below the minimum
    cr_assert_eq(retention_add(r, &c, 8), STOKER_OK);
    k = held(r, 8, 4, 2);
    cr_assert_not(retention_pooled(r, k), "4000 bytes < 4096: on the heap");
    cr_assert_eq(push_pool_offsets(p, k, offs), 0);
    cr_assert_eq(retention_examples(r), 12);
    held(r, 0, 8, 1); // the first copy is intact
    stoker_chunk_fini(&c);
    retention_destroy(r);
    fake_stop(&f);
    push_pool_destroy(p);
}

Test(retention_pool, no_pool_use_until_attached)
{
    push_pool *p = new_pool(1 << 20);
    stoker_schema s = schema_of(SPEC);
    retention *r = retention_create();
    retention_set_pool(r, p, 4096);
    stoker_chunk c;
    cr_assert_eq(stoker_chunk_init(&c, &s, 8), STOKER_OK);
    fill(&c, 8, 3);
    cr_assert_eq(retention_add(r, &c, 0), STOKER_OK);
    cr_assert_not(retention_pooled(r, held(r, 0, 8, 3)), "no secret: the broker maps nothing");
    // Adopting without a secret keeps the chunk's buffers, as without a pool.
    uint8_t *mine = c.data[0];
    fill(&c, 8, 4);
    cr_assert_eq(retention_adopt(r, &c, 8), STOKER_OK);
    const stoker_chunk *k = held(r, 8, 8, 4);
    cr_assert_eq(k->data[0], mine, "adopted without a copy");
    cr_assert_not(retention_pooled(r, k));
    cr_assert_not_null(push_pool_alloc(p, 1 << 20), "nothing taken from the pool");
    stoker_chunk_fini(&c);
    retention_destroy(r);
    push_pool_destroy(p);
    // And no pool at all.
    r = retention_create();
    cr_assert_eq(stoker_chunk_init(&c, &s, 8), STOKER_OK);
    fill(&c, 8, 5);
    cr_assert_eq(retention_add(r, &c, 0), STOKER_OK);
    cr_assert_not(retention_pooled(r, held(r, 0, 8, 5)));
    stoker_chunk_fini(&c);
    retention_destroy(r);
}

Test(retention_pool, adopt_copies_into_the_pool_and_the_caller_keeps_its_buffers)
{
    fake_broker f;
    push_pool *p = attached_pool(1 << 20, &f);
    stoker_schema s = schema_of(SPEC);
    retention *r = retention_create();
    retention_set_pool(r, p, 4096);
    stoker_chunk c;
    cr_assert_eq(stoker_chunk_init(&c, &s, 8), STOKER_OK);
    uint8_t *mine = c.data[0];
    fill(&c, 8, 6);
    cr_assert_eq(retention_adopt(r, &c, 0), STOKER_OK);
    cr_assert_eq(c.data[0], mine, "the caller keeps its buffers");
    cr_assert_eq(c.count, 0);
    cr_assert_eq(c.capacity, 8);
    cr_assert(c.owns_data);
    const stoker_chunk *k = held(r, 0, 8, 6);
    cr_assert_neq(k->data[0], mine);
    cr_assert(retention_pooled(r, k));
    // The caller refills its buffers: the held copy does not change.
    fill(&c, 8, 7);
    held(r, 0, 8, 6);
    stoker_chunk_fini(&c);
    retention_destroy(r);
    fake_stop(&f);
    push_pool_destroy(p);
}

Test(retention_pool, released_slots_reuse_their_regions)
{
    // A pool of 65536 bytes holds eight regions of 8000, the ring's eight slots: if a released
    // slot's region were not reused (or leaked), copies would soon go to the heap.
    fake_broker f;
    push_pool *p = attached_pool(65536, &f);
    stoker_schema s = schema_of(SPEC);
    retention *r = retention_create();
    retention_set_pool(r, p, 4096);
    stoker_chunk c;
    cr_assert_eq(stoker_chunk_init(&c, &s, 8), STOKER_OK);
    uint8_t *seen[16];
    uint32_t n_seen = 0;
    uint64_t seq = 0;
    for (int i = 0; i < 40; i++, seq += 8) {
        fill(&c, 8, (uint8_t)i);
        cr_assert_eq(retention_add(r, &c, seq), STOKER_OK);
        const stoker_chunk *k = held(r, seq, 8, (uint8_t)i);
        cr_assert(retention_pooled(r, k), "push %d went to the heap: pool regions leaked", i);
        int known = 0;
        for (uint32_t j = 0; j < n_seen; j++)
            known |= seen[j] == k->data[0];
        if (!known) {
            cr_assert_lt(n_seen, 16);
            seen[n_seen++] = k->data[0];
        }
        retention_release(r, seq); // all but the newest trained
    }
    cr_assert_leq(n_seen, 8, "%u distinct regions for a ring of 8", n_seen);
    stoker_chunk_fini(&c);
    // The newest copy is not trained: destroy leaves its region until it is (the broker may
    // still read it), and gives back every other.
    retention_destroy(r);
    cr_assert_null(push_pool_alloc(p, 65536), "a held copy's region came back before trained");
    push_pool_trained(p, seq);
    cr_assert_not_null(push_pool_alloc(p, 65536), "destroy and training gave every region back");
    fake_stop(&f);
    push_pool_destroy(p);
}

Test(retention_pool, a_full_pool_falls_back_to_the_heap)
{
    fake_broker f;
    push_pool *p = attached_pool(2 * REGION, &f); // 16384 bytes: two regions and 384 bytes
    stoker_schema s = schema_of(SPEC);
    retention *r = retention_create();
    retention_set_pool(r, p, 4096);
    stoker_chunk c;
    cr_assert_eq(stoker_chunk_init(&c, &s, 8), STOKER_OK);
    for (uint8_t i = 0; i < 3; i++) {
        fill(&c, 8, (uint8_t)(10 + i));
        cr_assert_eq(retention_add(r, &c, 8 * (uint64_t)i), STOKER_OK);
    }
    cr_assert(retention_pooled(r, held(r, 0, 8, 10)));
    cr_assert(retention_pooled(r, held(r, 8, 8, 11)));
    cr_assert_not(retention_pooled(r, held(r, 16, 8, 12)), "no room: on the heap");
    cr_assert_eq(retention_examples(r), 24);
    stoker_chunk_fini(&c);
    retention_destroy(r);
    fake_stop(&f);
    push_pool_destroy(p);
}

Test(retention_pool, forget_from_defers_the_region_until_its_seqs_are_trained)
{
    fake_broker f;
    push_pool *p = attached_pool(2 * REGION, &f);
    stoker_schema s = schema_of(SPEC);
    retention *r = retention_create();
    retention_set_pool(r, p, 4096);
    stoker_chunk c;
    cr_assert_eq(stoker_chunk_init(&c, &s, 8), STOKER_OK);
    fill(&c, 8, 20);
    cr_assert_eq(retention_add(r, &c, 0), STOKER_OK);
    fill(&c, 8, 21);
    cr_assert_eq(retention_add(r, &c, 8), STOKER_OK);
    uint8_t *taken_back = held(r, 8, 8, 21)->data[0];
    cr_assert(retention_pooled(r, held(r, 8, 8, 21)));
    // The push of seqs 8..15 is taken back (its answer lost): the broker may hold it all the
    // same, so its region is not written again until seq 15 is trained.
    retention_forget_from(r, 8);
    cr_assert_null(retention_find(r, 8, &(uint64_t){0}, &(int){0}));
    cr_assert_eq(retention_examples(r), 8);
    cr_assert_null(push_pool_alloc(p, REGION), "the taken-back region was given back at once");
    fill(&c, 8, 22); // the same seqs again, before they are trained
    cr_assert_eq(retention_add(r, &c, 8), STOKER_OK);
    const stoker_chunk *k = held(r, 8, 8, 22);
    cr_assert_neq(k->data[0], taken_back, "the deferred region was written again");
    cr_assert_not(retention_pooled(r, k), "no other room: the heap");
    // What the broker may still read there is what was pushed.
    for (size_t i = 0; i < REGION; i++)
        cr_assert_eq(taken_back[i], (uint8_t)(21 + i * 13), "byte %zu of the taken-back push", i);
    push_pool_trained(p, 15);
    cr_assert_null(push_pool_alloc(p, REGION), "seq 15 not yet trained");
    push_pool_trained(p, 16);
    uint8_t *back = push_pool_alloc(p, REGION);
    cr_assert_eq(back, taken_back, "trained through its end: given back");
    push_pool_free(p, back);
    // Taken back again from the heap copy: nothing deferred, the next copy is pooled.
    retention_forget_from(r, 8);
    fill(&c, 8, 23);
    cr_assert_eq(retention_add(r, &c, 8), STOKER_OK);
    cr_assert(retention_pooled(r, held(r, 8, 8, 23)));
    stoker_chunk_fini(&c);
    retention_destroy(r);
    fake_stop(&f);
    push_pool_destroy(p);
}

Test(retention_pool, a_hole_gives_its_region_back_at_once)
{
    fake_broker f;
    push_pool *p = attached_pool(2 * REGION, &f);
    stoker_schema s = schema_of(SPEC);
    retention *r = retention_create();
    retention_set_pool(r, p, 4096);
    stoker_chunk c;
    cr_assert_eq(stoker_chunk_init(&c, &s, 8), STOKER_OK);
    fill(&c, 8, 30);
    cr_assert_eq(retention_add(r, &c, 0), STOKER_OK);
    fill(&c, 8, 31);
    cr_assert_eq(retention_add(r, &c, 8), STOKER_OK);
    uint8_t *second = held(r, 8, 8, 31)->data[0];
    cr_assert_null(push_pool_alloc(p, REGION), "both regions held");
    // Seqs 8..15 trained out of order: trained, so the broker reads them no more.
    uint64_t pairs[] = {8, 16};
    retention_release_ranges(r, pairs, 2);
    int hole = 0;
    const stoker_chunk *k = retention_find(r, 8, &(uint64_t){0}, &hole);
    cr_assert_not_null(k);
    cr_assert_eq(hole, 1);
    cr_assert_eq(k->count, 8, "a hole keeps its count");
    cr_assert_eq(retention_examples(r), 8);
    uint8_t *back = push_pool_alloc(p, REGION);
    cr_assert_eq(back, second, "the hole's region is free");
    push_pool_free(p, back);
    held(r, 0, 8, 30);
    retention_release(r, 16);
    cr_assert_eq(retention_examples(r), 0);
    stoker_chunk_fini(&c);
    retention_destroy(r);
    cr_assert_not_null(push_pool_alloc(p, 2 * REGION), "every region given back");
    fake_stop(&f);
    push_pool_destroy(p);
}
