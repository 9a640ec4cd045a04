// The listener watchdog (see watchdog.h): notices a listener that stopped accepting connections
// and restarts it. It owns the probing and the restart; it does not own the listeners: it uses
// only the watchdog_host it is handed (server.c creates the listeners, counts their accepted
// connections in pipe_cb and tells the broker which closed connections a restart caused), nng,
// and libstoker's clock, log and TLS helpers.
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <nng/nng.h>

#include "stoker/clock.h"
#include "stoker/error.h"
#include "stoker/log.h"
#include "stoker/tls.h"
#include "watchdog.h"

#define WATCH_PERIOD_MS 250
#define PROBE_WAIT_MS   750

// The statistics scope of listener id under st. (nng 1.5.2's nng_stat_find_listener returns
// the first listener's scope whatever the id.)
static nng_stat *
find_listener_stats(nng_stat *st, uint64_t id)
{
    for (; st != NULL; st = nng_stat_next(st)) {
        if (nng_stat_type(st) == NNG_STAT_SCOPE && strcmp(nng_stat_name(st), "listener") == 0) {
            nng_stat *sid = nng_stat_find(st, "id");
            if (sid != NULL && nng_stat_value(sid) == id)
                return st;
        }
        nng_stat *found = find_listener_stats(nng_stat_child(st), id);
        if (found != NULL)
            return found;
    }
    return NULL;
}

// The listener's accept errors so far ("other" and "canceled" in nng's statistics), or
// UINT64_MAX when statistics cannot be read (then every check probes).
uint64_t
watchdog_listener_errors(nng_listener l)
{
    nng_stat *root;
    if (nng_stats_get(&root) != 0)
        return UINT64_MAX;
    uint64_t n = UINT64_MAX;
    nng_stat *ls = find_listener_stats(root, (uint64_t)nng_listener_id(l));
    if (ls != NULL) {
        nng_stat *other = nng_stat_find(ls, "other");
        nng_stat *canceled = nng_stat_find(ls, "canceled");
        n = (other != NULL ? nng_stat_value(other) : 0) +
            (canceled != NULL ? nng_stat_value(canceled) : 0);
    }
    nng_stats_free(root);
    return n;
}

uint64_t
watchdog_listener_tls_failures(nng_listener l)
{
    nng_stat *root;
    if (nng_stats_get(&root) != 0)
        return UINT64_MAX;
    uint64_t n = UINT64_MAX;
    nng_stat *ls = find_listener_stats(root, (uint64_t)nng_listener_id(l));
    if (ls != NULL) {
        nng_stat *auth = nng_stat_find(ls, "auth");
        n = auth != NULL ? nng_stat_value(auth) : 0;
    }
    nng_stats_free(root);
    return n;
}

// Says (at most every TLS_SAY_EVERY_MS) how many TLS handshakes on w failed since it last said.
#define TLS_SAY_EVERY_MS 10000
static void
report_tls_failures(watched *w)
{
    uint64_t n = watchdog_listener_tls_failures(w->l);
    if (n == UINT64_MAX || n < w->tls_failed) // a restarted listener counts from 0
        return;
    w->tls_failed = n;
    uint64_t now = stoker_now_ms();
    if (n == w->tls_reported || (w->tls_said_ms != 0 && now < w->tls_said_ms + TLS_SAY_EVERY_MS))
        return;
    stoker_warn("tls-handshake-failed: %llu TLS handshake%s on %s failed%s: a client without a "
                "certificate signed by this broker's --tls-ca, one whose --tls-ca does not sign "
                "this broker's certificate, or a plaintext tcp:// client (nng does not tell the "
                "broker which peer)",
                (unsigned long long)(n - w->tls_reported), n - w->tls_reported == 1 ? "" : "s",
                w->url, w->tls_said_ms != 0 ? " since the last report" : "");
    w->tls_reported = n;
    w->tls_said_ms = now;
}

// Waits until fd is ready for events or deadline_ms passes. Returns 1 when ready.
static int
wait_fd(int fd, short events, uint64_t deadline_ms)
{
    for (;;) {
        uint64_t now = stoker_now_ms();
        if (now >= deadline_ms)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int rv = poll(&p, 1, (int)(deadline_ms - now));
        if (rv > 0)
            return 1;
        if (rv < 0 && errno != EINTR)
            return 0;
    }
}

// Connects to the listener as a REQ peer would (the SP headers both ways). Returns 1 when the
// socket then accepted the connection (a pipe from this listener was added: the transport alone
// still answers the handshake when the listener has stopped), 0 when that did not happen within
// PROBE_WAIT_MS, -1 when the listener cannot be probed. The probe is an ordinary short
// connection for the broker.
static int
probe_listener(watched *w)
{
    nng_sockaddr sa;
    unsigned long accepted_before = atomic_load(&w->accepted);
    if (nng_listener_get_addr(w->l, NNG_OPT_LOCADDR, &sa) != 0)
        return -1;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    socklen_t len;
    if (sa.s_family == NNG_AF_IPC) {
        struct sockaddr_un *un = (struct sockaddr_un *)&ss;
        un->sun_family = AF_UNIX;
        if (strlen(sa.s_ipc.sa_path) >= sizeof(un->sun_path))
            return -1;
        strcpy(un->sun_path, sa.s_ipc.sa_path);
        len = sizeof(*un);
    } else if (sa.s_family == NNG_AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;
        in->sin_family = AF_INET;
        in->sin_port = sa.s_in.sa_port; // both in network order
        in->sin_addr.s_addr = sa.s_in.sa_addr != 0 ? sa.s_in.sa_addr : htonl(INADDR_LOOPBACK);
        len = sizeof(*in);
    } else if (sa.s_family == NNG_AF_INET6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = sa.s_in6.sa_port;
        memcpy(&in6->sin6_addr, sa.s_in6.sa_addr, 16);
        if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr))
            in6->sin6_addr = in6addr_loopback;
        len = sizeof(*in6);
    } else {
        return -1;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    uint64_t deadline = stoker_now_ms() + PROBE_WAIT_MS;
    int alive = 0;
    if (connect(fd, (struct sockaddr *)&ss, len) == 0 ||
        (errno == EINPROGRESS && wait_fd(fd, POLLOUT, deadline))) {
        uint8_t head[8];
        size_t got = 0;
        while (got < sizeof(head) && wait_fd(fd, POLLIN, deadline)) {
            ssize_t n = recv(fd, head + got, sizeof(head) - got, 0);
            if (n <= 0 && !(n < 0 && (errno == EINTR || errno == EAGAIN)))
                break;
            if (n > 0)
                got += (size_t)n;
        }
        static const uint8_t req0[8] = {0, 'S', 'P', 0, 0x00, 0x30, 0, 0}; // REQ v0
        if (got == sizeof(head) && head[0] == 0 && head[1] == 'S' && head[2] == 'P' &&
            head[3] == 0 && send(fd, req0, sizeof(req0), MSG_NOSIGNAL) == sizeof(req0)) {
            while (!(alive = atomic_load(&w->accepted) != accepted_before) &&
                   stoker_now_ms() < deadline)
                stoker_sleep_ms(5, NULL);
        }
    }
    close(fd);
    return alive;
}

// Makes l the watched listener in place of the stopped one and says so.
static void
adopt_listener(watched *w, nng_listener l, const char *how)
{
    w->l = l;
    atomic_store(&w->id, (unsigned)nng_listener_id(l));
    // A new listener counts its accept errors from 0: one that stopped it between its start and
    // now (peers of a flood still leaving mid-handshake) must make the next look probe it, which
    // reading the count here would hide.
    w->errors = 0;
    w->strikes = 0;
    stoker_warn("listener-restarted: %s had stopped accepting connections (nng 1.5.2 ends a "
                "listener's accept loop when a peer leaves mid-handshake); %s",
                w->url, how);
}

// Closes the stopped listener (and with it the connections it had accepted: pipe_cb hands them
// to broker_pipe_reset) and starts a new one on the same address.
static void
restart_listener(const watchdog_host *h, watched *w)
{
    h->retire(h->ctx, (uint32_t)nng_listener_id(w->l));
    nng_listener_close(w->l); // its connections close (pipe_cb: broker_pipe_reset)
    char err[256];
    for (int attempt = 0; attempt < 50 && !atomic_load(h->stopping); attempt++) {
        nng_listener l = NNG_LISTENER_INITIALIZER;
        if (h->start_listener(h->ctx, w->url, &l, err, sizeof(err)) == STOKER_OK) {
            adopt_listener(w, l, "its connections were closed and reconnect");
            return;
        }
        if (nng_listener_id(l) > 0)
            nng_listener_close(l);
        stoker_sleep_ms(100, NULL); // the old one may still hold the address for a moment
    }
    stoker_error("listener-lost: %s could not be restarted: %s", w->url, err);
}

void *
watchdog_main(void *arg)
{
    const watchdog_host *h = arg;
    while (!atomic_load(h->stopping)) {
        for (int i = 0; i < WATCH_PERIOD_MS / 50 && !atomic_load(h->stopping); i++)
            stoker_sleep_ms(50, NULL);
        for (uint32_t i = 0; i < h->n_listeners && !atomic_load(h->stopping); i++) {
            watched *w = &h->listeners[i];
            if (stoker_tls_url(w->url)) {
                report_tls_failures(w);
                continue;
            }
            uint64_t errors = watchdog_listener_errors(w->l);
            if (errors != UINT64_MAX && errors == w->errors && w->strikes == 0)
                continue; // no accept error since the last look: nothing can have stopped it
            w->errors = errors;
            int alive = probe_listener(w);
            stoker_debug("listener-probe: %s: %s (accept errors %llu)", w->url,
                         alive > 0    ? "accepted"
                         : alive == 0 ? "NOT accepted"
                                      : "cannot probe",
                         (unsigned long long)errors);
            w->strikes = alive == 0 ? w->strikes + 1 : 0;
            // A restart closes connections: a second probe confirms.
            if (w->strikes >= 2) {
                w->strikes = 0;
                restart_listener(h, w);
            }
        }
    }
    return NULL;
}
