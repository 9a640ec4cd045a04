// A consumer's side of the broker's shared-memory arena (see stoker/arena.h): the Unix-socket
// handshake that proves we share the broker's host and user, the read-only mapping, and region
// releases. It keeps no batch state: trainer_delivery.c decides which batches live here.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "stoker/arena.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"

struct stoker_arena {
    atomic_int refs;
    int sock; // kept open: its end releases every region we hold
    const uint8_t *base;
    uint64_t bytes;
    uint64_t secret;
    stoker_arena_hook on_unmap;
    void *on_unmap_arg;
};

uint64_t
stoker_arena_layout(uint64_t at, uint32_t n, const size_t *sizes, uint64_t *offsets)
{
    uint64_t end = at;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t off = (end + STOKER_ARENA_ALIGN - 1) & ~(uint64_t)(STOKER_ARENA_ALIGN - 1);
        offsets[i] = off;
        end = off + sizes[i];
    }
    return end - at;
}

void
stoker_arena_put_word(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

uint64_t
stoker_arena_get_word(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

// Waits until sock is readable, at most timeout_ms. 1 when readable.
static int
readable(int sock, uint32_t timeout_ms)
{
    struct pollfd p = {.fd = sock, .events = POLLIN};
    int rv;
    do
        rv = poll(&p, 1, (int)timeout_ms);
    while (rv < 0 && errno == EINTR);
    return rv > 0;
}

int
stoker_arena_connect(const char *socket_name, uint32_t timeout_ms, int *out, char *err,
                     size_t err_len)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t name_len = strlen(socket_name);
    if (name_len == 0 || name_len + 1 > sizeof(addr.sun_path))
        return stoker_errorf(err, err_len, STOKER_INVALID, "arena socket name of %zu bytes",
                             name_len);
    memcpy(addr.sun_path + 1, socket_name, name_len); // abstract: sun_path[0] is NUL
    // Non-blocking while connecting: a Unix socket's connect does not wait but says EAGAIN when
    // the broker's backlog is full, so it is tried again until timeout_ms.
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (sock < 0)
        return stoker_errorf(err, err_len, STOKER_IO, "socket: %s", strerror(errno));
    uint64_t deadline = stoker_now_ms() + timeout_ms;
    int rv;
    while ((rv = connect(sock, (struct sockaddr *)&addr,
                         (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + name_len))) !=
               0 &&
           (errno == EAGAIN || errno == EINTR) && stoker_now_ms() < deadline)
        stoker_sleep_ms(5, NULL);
    if (rv != 0 || fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(sock);
        return stoker_errorf(err, err_len, STOKER_CONNECTION,
                             "no arena socket '@%s' here (%s): the broker runs on another host "
                             "or in another network namespace",
                             socket_name, strerror(e));
    }
    *out = sock;
    return STOKER_OK;
}

ssize_t
stoker_arena_send_fd(int sock, const void *buf, size_t len, int fd)
{
    stoker_cmsg_buf ctrl; // aligned for the cmsghdr that CMSG_FIRSTHDR points at
    memset(&ctrl, 0, sizeof(ctrl));
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctrl.buf,
                        .msg_controllen = sizeof(ctrl.buf)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    return sendmsg(sock, &mh, MSG_NOSIGNAL);
}

int
stoker_arena_attach(const char *socket_name, uint64_t ticket, uint32_t timeout_ms,
                    stoker_arena **out, char *err, size_t err_len)
{
    int sock;
    int rv = stoker_arena_connect(socket_name, timeout_ms, &sock, err, err_len);
    if (rv != STOKER_OK)
        return rv;
    uint8_t msg[16];
    stoker_arena_put_word(msg, ticket);
    if (send(sock, msg, 8, MSG_NOSIGNAL) != 8) {
        int e = errno;
        close(sock);
        return stoker_errorf(err, err_len, STOKER_IO, "arena socket: sending the ticket: %s",
                             strerror(e));
    }
    stoker_cmsg_buf ctrl; // aligned for the cmsghdr that CMSG_FIRSTHDR points at
    struct iovec iov = {.iov_base = msg, .iov_len = sizeof(msg)};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctrl.buf,
                        .msg_controllen = sizeof(ctrl.buf)};
    ssize_t got = -1;
    if (readable(sock, timeout_ms))
        got = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
    int fd = -1;
    struct cmsghdr *c = got > 0 ? CMSG_FIRSTHDR(&mh) : NULL;
    if (c != NULL && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(sizeof(int)))
        memcpy(&fd, CMSG_DATA(c), sizeof(int));
    if (got != (ssize_t)sizeof(msg) || fd < 0) {
        if (fd >= 0)
            close(fd);
        close(sock);
        return stoker_errorf(err, err_len, STOKER_UNAUTHENTICATED,
                             "the broker did not hand over its arena (ticket or user refused, "
                             "or no answer within %u ms)",
                             timeout_ms);
    }
    uint64_t secret = stoker_arena_get_word(msg), bytes = stoker_arena_get_word(msg + 8);
    // Read-only: the descriptor itself is read-only, so a writable shared mapping is refused.
    void *base = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (base == MAP_FAILED) {
        close(sock);
        return stoker_errorf(err, err_len, STOKER_IO, "mapping the arena (%llu bytes): %s",
                             (unsigned long long)bytes, strerror(e));
    }
    stoker_arena *a = calloc(1, sizeof(*a));
    if (a == NULL) {
        munmap(base, bytes);
        close(sock);
        return STOKER_NOMEM;
    }
    atomic_init(&a->refs, 1);
    a->sock = sock;
    a->base = base;
    a->bytes = bytes;
    a->secret = secret;
    *out = a;
    return STOKER_OK;
}

uint64_t
stoker_arena_secret(const stoker_arena *a)
{
    return a->secret;
}

uint64_t
stoker_arena_bytes(const stoker_arena *a)
{
    return a->bytes;
}

int
stoker_arena_resolve(const stoker_arena *a, uint64_t offset, uint32_t n, const size_t *sizes,
                     uint8_t **data, char *err, size_t err_len)
{
    uint64_t offsets[64];
    if (n > 64)
        return stoker_errorf(err, err_len, STOKER_INVALID, "arena batch of %u fields", n);
    if (offset > a->bytes)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "arena batch at %llu is past the arena's %llu bytes",
                             (unsigned long long)offset, (unsigned long long)a->bytes);
    uint64_t span = stoker_arena_layout(offset, n, sizes, offsets);
    if (span > a->bytes - offset)
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "arena batch of %llu bytes at %llu reaches past the arena's %llu",
                             (unsigned long long)span, (unsigned long long)offset,
                             (unsigned long long)a->bytes);
    for (uint32_t i = 0; i < n; i++)
        data[i] = (uint8_t *)a->base + offsets[i];
    return STOKER_OK;
}

void
stoker_arena_ref(stoker_arena *a)
{
    atomic_fetch_add(&a->refs, 1);
}

void
stoker_arena_release(stoker_arena *a, uint64_t lease)
{
    uint8_t msg[8];
    stoker_arena_put_word(msg, lease);
    // The broker reads these as they come; a full socket buffer (a broker that stopped
    // reading) must not hang the training loop: the region stays held until we close.
    if (send(a->sock, msg, sizeof(msg), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(msg))
        stoker_debug("arena: release of lease %llu not sent (%s)", (unsigned long long)lease,
                     strerror(errno));
    stoker_arena_unref(a);
}

void
stoker_arena_unref(stoker_arena *a)
{
    if (a == NULL || atomic_fetch_sub(&a->refs, 1) != 1)
        return;
    if (a->on_unmap != NULL)
        a->on_unmap(a->base, a->bytes, 0, a->on_unmap_arg);
    munmap((void *)a->base, a->bytes);
    close(a->sock);
    free(a);
}

const void *
stoker_arena_base(const stoker_arena *a)
{
    return a->base;
}

void
stoker_arena_on_unmap(stoker_arena *a, stoker_arena_hook fn, void *arg)
{
    a->on_unmap = fn;
    a->on_unmap_arg = arg;
}
