// The broker's shared-memory arena (see arena.h): the memfd, and the thread that serves the Unix
// socket: handshakes (peer's user checked, one-time ticket), region releases, and the end of a
// consumer's connection. The same socket takes the producers' shared memory
// (common/transport/push_pool.h): a producer on our host hands its sealed memfd over with its
// ticket, we map it read-only, and its pushes by reference point into it. The regions' books are
// arena_books.c's. It uses libstoker and the system only: nothing of the broker's state.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "arena_impl.h"
#include "stoker/arena.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/rng.h"

static void
pool_unref(void *arg)
{
    broker_pool *p = arg;
    if (atomic_fetch_sub(&p->refs, 1) == 1) {
        munmap((void *)p->base, p->bytes);
        free(p);
    }
}

// The producer's connection ended (under the lock): its pushes keep the mapping alive.
static void
pool_gone(broker_arena *a, uint32_t i)
{
    pool_slot *s = &a->pools[i];
    close(s->fd);
    pool_unref(s->pool);
    *s = (pool_slot){.fd = -1};
}

// --- the socket's thread ------------------------------------------------------------------------

static void
consumer_gone(broker_arena *a, uint32_t id)
{
    arena_consumer *c = &a->consumers[id];
    close(c->fd);
    c->fd = -1;
    c->secret = 0;
    uint32_t held = 0;
    for (uint32_t i = a->n_regions; i-- > 0;) {
        if (a->regions[i].consumer == id && a->regions[i].consumer_held) {
            a->regions[i].consumer_held = 0;
            held++;
            maybe_free(a, i);
        }
    }
    stoker_info("arena-consumer-gone: consumer %u (%u regions it held are reusable once their "
                "leases are done)",
                id, held);
}

static void
released(broker_arena *a, uint32_t id, uint64_t lease)
{
    int i = find_lease(a, lease);
    if (i < 0 || a->regions[i].consumer != id || !a->regions[i].consumer_held) {
        stoker_debug("arena: consumer %u released unknown lease %llu", id,
                     (unsigned long long)lease);
        return;
    }
    a->regions[i].consumer_held = 0;
    maybe_free(a, (uint32_t)i);
}

// Maps a producer's shared memory fd (passed over the socket) read-only: a memfd sealed against
// shrinking (so our reads can never fault), of a sane size. NULL with the reason in why.
static broker_pool *
map_pool(int fd, const char **why)
{
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        (uint64_t)st.st_size > POOL_MAX_BYTES) {
        *why = "not a shared memory file of a size we map";
        return NULL;
    }
    if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
        *why = "not sealed against shrinking";
        return NULL;
    }
    broker_pool *p = calloc(1, sizeof(*p));
    void *base = p != NULL ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0) : NULL;
    if (base == NULL || base == MAP_FAILED) {
        free(p);
        *why = "cannot map it";
        return NULL;
    }
    atomic_init(&p->refs, 1);
    p->base = base;
    p->bytes = (uint64_t)st.st_size;
    return p;
}

// A producer presented ticket with its shared memory (passed): checked, mapped and answered
// with its secret, or the connection is closed.
static void
take_pool(broker_arena *a, int fd, int passed, uint64_t ticket, pid_t pid)
{
    const char *why = NULL;
    broker_pool *pool = map_pool(passed, &why);
    close(passed);
    uint64_t session = 0, secret = stoker_random_u64();
    uint32_t slot = MAX_POOLS;
    pthread_mutex_lock(&a->lock);
    for (uint32_t i = 0; i < MAX_POOLS && session == 0; i++) {
        if (ticket != 0 && a->pool_tickets[i].ticket == ticket) {
            session = a->pool_tickets[i].session;
            a->pool_tickets[i] = (pool_ticket){0}; // one use
        }
    }
    for (uint32_t i = 0; i < MAX_POOLS && slot == MAX_POOLS; i++)
        if (a->pools[i].fd < 0)
            slot = i;
    if (pool != NULL && session != 0 && slot < MAX_POOLS && secret != 0) {
        a->pools[slot] = (pool_slot){.fd = fd, .secret = secret, .session = session, .pool = pool};
    }
    pthread_mutex_unlock(&a->lock);
    if (pool == NULL || session == 0 || slot == MAX_POOLS || secret == 0) {
        stoker_warn("arena-refused: pid %d: shared memory of a producer not taken: %s", (int)pid,
                    why != NULL         ? why
                    : session == 0      ? "unknown ticket"
                    : slot == MAX_POOLS ? "too many producers' pools"
                                        : "no secret");
        if (pool != NULL)
            pool_unref(pool);
        close(fd);
        return;
    }
    uint8_t buf[16];
    stoker_arena_put_word(buf, secret);
    stoker_arena_put_word(buf + 8, pool->bytes);
    if (send(fd, buf, sizeof(buf), MSG_NOSIGNAL) != (ssize_t)sizeof(buf)) {
        pthread_mutex_lock(&a->lock);
        if (a->pools[slot].fd == fd)
            pool_gone(a, slot);
        pthread_mutex_unlock(&a->lock);
        return;
    }
    stoker_info("arena-producer: pid %d pushes by reference from its shared memory (%llu MiB "
                "mapped read-only)",
                (int)pid, (unsigned long long)(pool->bytes >> 20));
}

// A connection sent its ticket: check the peer's user and the ticket, then hand over the arena.
static void
handshake(broker_arena *a, int fd)
{
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    uint8_t buf[16];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || cred.uid != geteuid()) {
        stoker_warn("arena-refused: a process of uid %d is not the broker's user", (int)cred.uid);
        close(fd);
        return;
    }
    // A peer of ours sends its 8 bytes right after connecting (a producer's with its shared
    // memory attached); do not wait on a silent one.
    stoker_cmsg_buf in_ctrl; // aligned for the cmsghdr that CMSG_FIRSTHDR points at
    struct iovec in_iov = {.iov_base = buf, .iov_len = 8};
    struct msghdr in = {.msg_iov = &in_iov,
                        .msg_iovlen = 1,
                        .msg_control = in_ctrl.buf,
                        .msg_controllen = sizeof(in_ctrl.buf)};
    ssize_t got = poll(&p, 1, 200) == 1 ? recvmsg(fd, &in, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) : -1;
    // One descriptor is taken; any more that came (their space fits two) are closed, not kept.
    int passed = -1;
    struct cmsghdr *pc = got > 0 ? CMSG_FIRSTHDR(&in) : NULL;
    if (pc != NULL && pc->cmsg_level == SOL_SOCKET && pc->cmsg_type == SCM_RIGHTS &&
        pc->cmsg_len >= CMSG_LEN(sizeof(int))) {
        size_t n = (pc->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int one;
            memcpy(&one, CMSG_DATA(pc) + i * sizeof(int), sizeof(int));
            if (i == 0 && n == 1)
                passed = one;
            else
                close(one);
        }
    }
    if (got != 8) {
        stoker_warn("arena-refused: pid %d sent no ticket", (int)cred.pid);
        if (passed >= 0)
            close(passed);
        close(fd);
        return;
    }
    uint64_t ticket = stoker_arena_get_word(buf);
    if (passed >= 0) {
        take_pool(a, fd, passed, ticket, cred.pid);
        return;
    }
    pthread_mutex_lock(&a->lock);
    int known = 0;
    for (uint32_t i = 0; i < MAX_TICKETS; i++) {
        if (ticket != 0 && a->tickets[i] == ticket) {
            a->tickets[i] = 0; // one use
            known = 1;
        }
    }
    uint32_t id = 0;
    for (uint32_t i = 1; known && i <= MAX_CONSUMERS && id == 0; i++)
        if (a->consumers[i].fd < 0)
            id = i;
    uint64_t secret = stoker_random_u64();
    if (id != 0) {
        a->consumers[id].fd = fd;
        a->consumers[id].secret = secret;
        a->consumers[id].n_partial = 0;
    }
    pthread_mutex_unlock(&a->lock);
    if (id == 0) {
        stoker_warn("arena-refused: pid %d: %s", (int)cred.pid,
                    known ? "too many arena consumers" : "unknown ticket");
        close(fd);
        return;
    }
    // A read-only descriptor of the memfd: the consumer cannot map it writable.
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", a->memfd);
    int ro = open(path, O_RDONLY | O_CLOEXEC);
    stoker_arena_put_word(buf, secret);
    stoker_arena_put_word(buf + 8, a->bytes);
    ssize_t sent = ro >= 0 ? stoker_arena_send_fd(fd, buf, sizeof(buf), ro) : -1;
    if (ro >= 0)
        close(ro);
    pthread_mutex_lock(&a->lock);
    if (sent != (ssize_t)sizeof(buf)) {
        stoker_warn("arena-refused: pid %d: handing over the arena failed (%s)", (int)cred.pid,
                    strerror(errno));
        consumer_gone(a, id);
    } else {
        stoker_info("arena-consumer: pid %d maps the arena as consumer %u", (int)cred.pid, id);
    }
    pthread_mutex_unlock(&a->lock);
}

// Reads what consumer id sent: releases, or the end of its connection.
static void
serve_consumer(broker_arena *a, uint32_t id)
{
    uint8_t buf[4096];
    arena_consumer *c = &a->consumers[id];
    ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    pthread_mutex_lock(&a->lock);
    if (n <= 0) {
        consumer_gone(a, id);
    } else {
        for (ssize_t i = 0; i < n; i++) {
            c->partial[c->n_partial++] = buf[i];
            if (c->n_partial == 8) {
                released(a, id, stoker_arena_get_word(c->partial));
                c->n_partial = 0;
            }
        }
    }
    pthread_mutex_unlock(&a->lock);
}

static void *
arena_main(void *arg)
{
    broker_arena *a = arg;
    struct pollfd fds[MAX_CONSUMERS + MAX_POOLS + 2];
    uint32_t ids[MAX_CONSUMERS + MAX_POOLS + 2];
    for (;;) {
        uint32_t n = 0;
        fds[n++] = (struct pollfd){.fd = a->wake[0], .events = POLLIN};
        fds[n++] = (struct pollfd){.fd = a->listen_fd, .events = POLLIN};
        pthread_mutex_lock(&a->lock);
        for (uint32_t i = 1; i <= MAX_CONSUMERS; i++) {
            if (a->consumers[i].fd >= 0) {
                ids[n] = i;
                fds[n++] = (struct pollfd){.fd = a->consumers[i].fd, .events = POLLIN};
            }
        }
        for (uint32_t i = 0; i < MAX_POOLS; i++) {
            if (a->pools[i].fd >= 0) {
                ids[n] = MAX_CONSUMERS + 1 + i;
                fds[n++] = (struct pollfd){.fd = a->pools[i].fd, .events = POLLIN};
            }
        }
        pthread_mutex_unlock(&a->lock);
        if (poll(fds, n, 1000) < 0)
            continue; // EINTR; nothing else is expected with valid descriptors
        if (fds[0].revents != 0)
            return NULL;
        if (fds[1].revents & POLLIN) {
            int fd = accept4(a->listen_fd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0)
                handshake(a, fd);
        }
        for (uint32_t i = 2; i < n; i++) {
            if (fds[i].revents == 0)
                continue;
            if (ids[i] <= MAX_CONSUMERS) {
                serve_consumer(a, ids[i]);
                continue;
            }
            // A producer never writes after its ticket: anything readable is its end.
            uint32_t slot = ids[i] - MAX_CONSUMERS - 1;
            pthread_mutex_lock(&a->lock);
            if (a->pools[slot].fd == fds[i].fd)
                pool_gone(a, slot);
            pthread_mutex_unlock(&a->lock);
        }
    }
}

// --- lifecycle ----------------------------------------------------------------------------------

int
broker_arena_create(uint64_t bytes, broker_arena **out, char *err, size_t err_len)
{
    int rv = STOKER_IO;
    broker_arena *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return STOKER_NOMEM;
    bytes = (bytes + 4095) & ~(uint64_t)4095;
    a->bytes = bytes;
    a->listen_fd = a->wake[0] = a->wake[1] = -1;
    for (uint32_t i = 0; i <= MAX_CONSUMERS; i++)
        a->consumers[i].fd = -1;
    for (uint32_t i = 0; i < MAX_POOLS; i++)
        a->pools[i].fd = -1;
    pthread_mutex_init(&a->lock, NULL);
    // A memfd: no file in /dev/shm, whoever is killed; the memory goes with the last mapping.
    a->memfd = memfd_create("stoker-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (a->memfd < 0) {
        rv = stoker_errorf(err, err_len, STOKER_IO, "memfd_create: %s", strerror(errno));
        goto fail_memfd;
    }
    if (ftruncate(a->memfd, (off_t)bytes) != 0 ||
        fcntl(a->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        rv = stoker_errorf(err, err_len, STOKER_IO, "sizing the arena to %llu bytes: %s",
                           (unsigned long long)bytes, strerror(errno));
        goto fail_map;
    }
    a->base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, a->memfd, 0);
    if (a->base == MAP_FAILED) {
        a->base = NULL;
        rv = stoker_errorf(err, err_len, STOKER_IO, "mapping the arena: %s", strerror(errno));
        goto fail_map;
    }
    // An abstract Unix socket: nothing on disk, reachable only from this network namespace.
    snprintf(a->name, sizeof(a->name), "stoker-arena-%d-%016llx", (int)getpid(),
             (unsigned long long)stoker_random_u64());
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t name_len = strlen(a->name);
    memcpy(addr.sun_path + 1, a->name, name_len);
    a->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (a->listen_fd < 0 ||
        bind(a->listen_fd, (struct sockaddr *)&addr,
             (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + name_len)) != 0 ||
        listen(a->listen_fd, 64) != 0 || pipe2(a->wake, O_CLOEXEC) != 0) {
        rv = stoker_errorf(err, err_len, STOKER_IO, "arena socket: %s", strerror(errno));
        goto fail_sock;
    }
    if (pthread_create(&a->thread, NULL, arena_main, a) != 0) {
        rv = stoker_errorf(err, err_len, STOKER_NOMEM, "arena thread");
        goto fail_sock;
    }
    *out = a;
    return STOKER_OK;

fail_sock:
    if (a->wake[0] >= 0) {
        close(a->wake[0]);
        close(a->wake[1]);
    }
    if (a->listen_fd >= 0)
        close(a->listen_fd);
    munmap(a->base, bytes);
fail_map:
    close(a->memfd);
fail_memfd:
    pthread_mutex_destroy(&a->lock);
    free(a);
    return rv;
}

void
broker_arena_destroy(broker_arena *a)
{
    if (a == NULL)
        return;
    if (write(a->wake[1], "x", 1) != 1)
        stoker_warn("arena: cannot wake its thread");
    pthread_join(a->thread, NULL);
    pthread_mutex_lock(&a->lock);
    for (uint32_t i = 1; i <= MAX_CONSUMERS; i++)
        if (a->consumers[i].fd >= 0)
            close(a->consumers[i].fd);
    for (uint32_t i = 0; i < MAX_POOLS; i++)
        if (a->pools[i].fd >= 0)
            pool_gone(a, i); // pushes still queued keep their mapping
    close(a->wake[0]);
    close(a->wake[1]);
    close(a->listen_fd);
    a->destroyed = 1;
    int last = a->staged_out == 0;
    pthread_mutex_unlock(&a->lock);
    if (last)
        arena_free(a);
}

// --- the broker's calls -------------------------------------------------------------------------

const char *
broker_arena_socket(const broker_arena *a)
{
    return a->name;
}

uint64_t
broker_arena_ticket(broker_arena *a)
{
    uint64_t t = stoker_random_u64();
    pthread_mutex_lock(&a->lock);
    a->tickets[a->next_ticket++ % MAX_TICKETS] = t; // the oldest unused one expires
    pthread_mutex_unlock(&a->lock);
    return t;
}

uint64_t
broker_arena_pool_ticket(broker_arena *a, uint64_t session)
{
    uint64_t t = stoker_random_u64();
    pthread_mutex_lock(&a->lock);
    a->pool_tickets[a->next_pool_ticket++ % MAX_POOLS] = (pool_ticket){t, session};
    pthread_mutex_unlock(&a->lock);
    return t;
}

int
broker_arena_pool_resolve(broker_arena *a, stoker_request *req, char *err, size_t err_len)
{
    broker_pool *pool = NULL;
    pthread_mutex_lock(&a->lock);
    for (uint32_t i = 0; i < MAX_POOLS && pool == NULL; i++) {
        if (a->pools[i].fd >= 0 && a->pools[i].secret == req->pool_secret &&
            a->pools[i].session == req->session) {
            pool = a->pools[i].pool;
            atomic_fetch_add(&pool->refs, 1);
        }
    }
    pthread_mutex_unlock(&a->lock);
    if (pool == NULL)
        return stoker_errorf(err, err_len, STOKER_UNKNOWN_PEER,
                             "push by reference names shared memory this broker does not map "
                             "(a producer that restarted, or a broker that did): say hello again");
    for (uint32_t i = 0; i < req->n_data; i++) {
        uint64_t off = req->pool_offsets[i], len = req->data_len[i];
        if (off > pool->bytes || len > pool->bytes - off || (off & 7) != 0) {
            pool_unref(pool);
            return stoker_errorf(err, err_len, STOKER_INVALID,
                                 "push by reference: field %u at offset %llu (%llu bytes) is "
                                 "not inside the producer's shared memory of %llu bytes, "
                                 "8-byte aligned",
                                 i, (unsigned long long)off, (unsigned long long)len,
                                 (unsigned long long)pool->bytes);
        }
    }
    int rv = stoker_request_hold(req, pool_unref, pool);
    if (rv != STOKER_OK) {
        pool_unref(pool);
        return stoker_errorf(err, err_len, rv, "push by reference: already resolved");
    }
    for (uint32_t i = 0; i < req->n_data; i++)
        req->chunk.data[i] = (uint8_t *)pool->base + req->pool_offsets[i];
    return STOKER_OK;
}
