// Why the handshakes with a broker fail (see handshake.h). Two probes, each a short connection
// that ends the way an ordinary client's does (nng 1.5.2's listeners stop for good on some
// half-finished handshakes, docs/security.md): a raw TCP one, which tells a plaintext nng
// listener (it sends its 8-byte SP header at once) from a TLS one (silent until the client's
// hello); and a TLS one through nng's stream API, which tells whether this end's CA verifies the
// broker's certificate, by handshaking without a client certificate.
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

#include "handshake.h"
#include "stoker/clock.h"
#include "stoker/error.h"
#include "tls_config.h"

#define RAW_CONNECT_MS 500
#define RAW_SILENT_MS  300 // an nng listener sends its header within this (it does at once)
#define TLS_PROBE_MS   1000

// nng's SP header of a REQ peer (protocol 0x30) and the start of any SP header.
static const unsigned char req_header[8] = {0, 'S', 'P', 0, 0, 0x30, 0, 0};
static const unsigned char sp_magic[4] = {0, 'S', 'P', 0};
// Sent to a silent listener: no TLS record (a TLS server answers with an alert or hangs up, as
// for any other bytes), and a request an HTTP server answers ("HTTP/1.x ..."): a client pointed
// at the broker's --metrics port is told that, not that the port speaks TLS.
static const char http_probe[] = "GET / HTTP/1.0\r\n\r\n";

static nng_stat *
find_dialer(nng_stat *st, uint64_t id)
{
    for (; st != NULL; st = nng_stat_next(st)) {
        if (nng_stat_type(st) == NNG_STAT_SCOPE && strcmp(nng_stat_name(st), "dialer") == 0) {
            nng_stat *sid = nng_stat_find(st, "id");
            if (sid != NULL && nng_stat_value(sid) == id)
                return st;
        }
        nng_stat *found = find_dialer(nng_stat_child(st), id);
        if (found != NULL)
            return found;
    }
    return NULL;
}

static uint64_t
stat_of(nng_stat *scope, const char *name)
{
    nng_stat *s = nng_stat_find(scope, name);
    return s != NULL ? nng_stat_value(s) : 0;
}

int
handshake_counts_get(int dialer_id, handshake_counts *out)
{
    nng_stat *root;
    if (nng_stats_get(&root) != 0)
        return -1;
    // (nng 1.5.2's nng_stat_find_dialer returns the first dialer's scope whatever the id.)
    nng_stat *d = find_dialer(root, (uint64_t)dialer_id);
    if (d == NULL) {
        nng_stats_free(root);
        return -1;
    }
    out->connect = stat_of(d, "connect");
    out->auth = stat_of(d, "auth");
    out->shut = stat_of(d, "other") + stat_of(d, "disconnect") + stat_of(d, "proto");
    out->refused = stat_of(d, "refused");
    nng_stats_free(root);
    return 0;
}

// HOST and PORT of a tcp:// or tls+tcp:// URL ([IPv6] unbracketed). 0, or -1 for other URLs.
static int
url_split(const char *url, char *host, size_t host_len, char *port, size_t port_len)
{
    const char *p;
    if (strncmp(url, "tcp://", 6) == 0)
        p = url + 6;
    else if (stoker_tls_url(url))
        p = url + 10;
    else
        return -1;
    const char *colon = strrchr(p, ':');
    if (colon == NULL || colon[1] == '\0')
        return -1;
    size_t n = (size_t)(colon - p);
    if (n >= 2 && p[0] == '[' && p[n - 1] == ']') {
        p++;
        n -= 2;
    }
    snprintf(host, host_len, "%.*s", (int)n, p);
    snprintf(port, port_len, "%s", colon + 1);
    return 0;
}

// Waits until fd is ready for events, at most ms. 1 ready, 0 not.
static int
wait_fd(int fd, short events, uint32_t ms)
{
    uint64_t deadline = stoker_now_ms() + ms;
    for (;;) {
        uint64_t now = stoker_now_ms();
        if (now >= deadline)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int rv = poll(&p, 1, (int)(deadline - now));
        if (rv > 0)
            return 1;
        if (rv < 0 && errno != EINTR)
            return 0;
    }
}

// A TCP connection to host:port (non-blocking), or -1.
static int
raw_connect(const char *host, const char *port)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res, *ai;
    if (getaddrinfo(host[0] != '\0' ? host : NULL, port, &hints, &res) != 0)
        return -1;
    int fd = -1;
    for (ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        int err = 0;
        socklen_t len = sizeof(err);
        if ((connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) ||
            !wait_fd(fd, POLLOUT, RAW_CONNECT_MS) ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

// Reads up to want bytes within ms. The count read; *closed (may be NULL) is set when the peer
// closed or reset the connection (not when it merely stayed silent).
static size_t
raw_read(int fd, unsigned char *buf, size_t want, uint32_t ms, int *closed)
{
    size_t got = 0;
    uint64_t deadline = stoker_now_ms() + ms;
    if (closed != NULL)
        *closed = 0;
    while (got < want) {
        uint64_t now = stoker_now_ms();
        if (now >= deadline || !wait_fd(fd, POLLIN, (uint32_t)(deadline - now)))
            break;
        ssize_t n = recv(fd, buf + got, want - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (closed != NULL)
                *closed = 1;
            break;
        }
        got += (size_t)n;
    }
    return got;
}

enum speaks { SPEAKS_UNKNOWN, SPEAKS_PLAIN_NNG, SPEAKS_TLS, SPEAKS_HTTP };

// What the listener at host:port speaks, by its first words (see the file's comment).
static enum speaks
raw_probe(const char *host, const char *port)
{
    int fd = raw_connect(host, port);
    if (fd < 0)
        return SPEAKS_UNKNOWN;
    unsigned char got[8];
    enum speaks what = SPEAKS_UNKNOWN;
    int closed;
    size_t n = raw_read(fd, got, sizeof(got), RAW_SILENT_MS, &closed);
    if (n >= 4 && memcmp(got, sp_magic, 4) == 0) {
        // A plaintext nng listener: finish its handshake as a REQ peer, as any client would.
        (void)!send(fd, req_header, sizeof(req_header), MSG_NOSIGNAL);
        what = SPEAKS_PLAIN_NNG;
    } else if (n == 0 && !closed) {
        // Silent: a TLS server waits for the client's hello, an HTTP server for a request. Our
        // request is no TLS record: a TLS server answers with an alert (content type 21,
        // version 3.x) or hangs up at once; an HTTP server answers "HTTP/". A peer that stays
        // silent still (a frozen broker: the kernel accepted for it) is not taken for TLS.
        (void)!send(fd, http_probe, sizeof(http_probe) - 1, MSG_NOSIGNAL);
        n = raw_read(fd, got, 5, RAW_SILENT_MS, &closed);
        if (n == 5 && memcmp(got, "HTTP/", 5) == 0)
            what = SPEAKS_HTTP;
        else if ((n == 0 && closed) || (n >= 2 && got[0] == 21 && got[1] == 3))
            what = SPEAKS_TLS;
    }
    close(fd);
    return what;
}

// One TLS handshake through nng's stream API with cfg; then the SP headers both ways, so the
// broker sees an ordinary connection. 0 or the nng error of the first step that failed.
static int
tls_probe(const char *url, nng_tls_config *cfg)
{
    nng_stream_dialer *d = NULL;
    nng_stream *s = NULL;
    nng_aio *aio = NULL;
    int rv;
    if ((rv = nng_stream_dialer_alloc(&d, url)) != 0 ||
        (rv = nng_stream_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg)) != 0 ||
        (rv = nng_aio_alloc(&aio, NULL, NULL)) != 0)
        goto out;
    nng_aio_set_timeout(aio, TLS_PROBE_MS);
    nng_stream_dialer_dial(d, aio);
    nng_aio_wait(aio);
    if ((rv = nng_aio_result(aio)) != 0)
        goto out;
    s = nng_aio_get_output(aio, 0);
    unsigned char hdr[8];
    memcpy(hdr, req_header, sizeof(hdr));
    nng_iov iov = {.iov_buf = hdr, .iov_len = sizeof(hdr)};
    nng_aio_set_iov(aio, 1, &iov);
    nng_stream_send(s, aio); // the handshake happens here
    nng_aio_wait(aio);
    if ((rv = nng_aio_result(aio)) != 0)
        goto out;
    nng_aio_set_iov(aio, 1, &iov);
    nng_stream_recv(s, aio);
    nng_aio_wait(aio);
    rv = nng_aio_result(aio);
out:
    if (s != NULL) {
        nng_stream_close(s);
        nng_stream_free(s);
    }
    nng_aio_free(aio);
    nng_stream_dialer_free(d);
    return rv;
}

int
handshake_diagnose(const char *url, const stoker_tls_options *tls, const char *server_name,
                   char *why, size_t why_len)
{
    char host[256], port[32];
    if (url_split(url, host, sizeof(host), port, sizeof(port)) != 0)
        return STOKER_OK;
    enum speaks speaks = raw_probe(host, port);
    if (speaks == SPEAKS_HTTP)
        return stoker_errorf(
            why, why_len, STOKER_TLS,
            "%s is an HTTP server, not a stoker broker (the broker's --metrics port? its live "
            "page is http://%s%s%s:%s/): connect to the address of the broker's --listen (it "
            "prints 'listening tcp://HOST:PORT'; 7070 in the docs)",
            url, strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "", port);
    if (!stoker_tls_url(url)) {
        if (speaks != SPEAKS_TLS)
            return STOKER_OK;
        return stoker_errorf(
            why, why_len, STOKER_TLS,
            "the broker at %s speaks TLS (it does not answer nng's plaintext "
            "handshake and hangs up): connect to tls+tcp://%s%s%s:%s with --tls-ca "
            "(Python: tls_ca=)",
            url, strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "", port);
    }
    if (speaks == SPEAKS_PLAIN_NNG)
        return stoker_errorf(why, why_len, STOKER_TLS,
                             "TLS handshake with %s failed: the broker there speaks plain nng, "
                             "without TLS: connect to tcp://%s:%s instead, or start the broker "
                             "with a tls+tcp:// --listen",
                             url, host, port);
    if (speaks != SPEAKS_TLS)
        return STOKER_OK;
    // A TLS listener. Handshake once without a client certificate, verifying the broker as the
    // dialer does: a failure on our side is the broker's certificate; a hang-up is the broker
    // refusing a client without (or with our) certificate.
    stoker_tls_options verify_only = {.ca = tls != NULL ? tls->ca : NULL,
                                      .insecure = tls == NULL || tls->ca == NULL};
    nng_tls_config *cfg;
    char err[256];
    if (stoker_tls_config_create(&verify_only, 0, server_name, &cfg, err, sizeof(err)) != STOKER_OK)
        return STOKER_OK;
    int rv = tls_probe(url, cfg);
    nng_tls_config_free(cfg);
    const char *cert = tls != NULL ? tls->cert : NULL;
    if ((rv == NNG_ECRYPTO || rv == NNG_EPEERAUTH) && verify_only.ca != NULL) {
        if (server_name != NULL && server_name[0] != '\0')
            return stoker_errorf(why, why_len, STOKER_TLS,
                                 "TLS handshake with %s failed: the broker's certificate is not "
                                 "signed by the CA in %s (--tls-ca, Python: tls_ca), or does not "
                                 "name the host '%s'",
                                 url, verify_only.ca, server_name);
        return stoker_errorf(why, why_len, STOKER_TLS,
                             "TLS handshake with %s failed: the broker's certificate is not "
                             "signed by the CA in %s (--tls-ca, Python: tls_ca)",
                             url, verify_only.ca);
    }
    if (rv == NNG_ECONNSHUT || rv == NNG_ECLOSED || rv == NNG_ECONNRESET ||
        rv == NNG_ECONNREFUSED) {
        if (cert == NULL)
            return stoker_errorf(why, why_len, STOKER_TLS,
                                 "TLS handshake with %s failed: the broker requires a client "
                                 "certificate signed by its --tls-ca: give --tls-cert and "
                                 "--tls-key (Python: tls_cert=, tls_key=)",
                                 url);
        return stoker_errorf(why, why_len, STOKER_TLS,
                             "TLS handshake with %s failed: the broker refused the client "
                             "certificate %s (not signed by the CA the broker was given as "
                             "--tls-ca, or expired)",
                             url, cert);
    }
    if (rv == 0 && cert != NULL)
        return stoker_errorf(why, why_len, STOKER_TLS,
                             "TLS handshake with %s failed: the broker's certificate verifies, "
                             "but the handshake with the client certificate %s and key %s does "
                             "not complete (a key that does not belong to the certificate?)",
                             url, cert, tls->key);
    return stoker_errorf(why, why_len, STOKER_TLS,
                         "TLS handshake with %s failed (%s): check --tls-ca, --tls-cert and "
                         "--tls-key against the broker's",
                         url, rv != 0 ? nng_strerror(rv) : "the broker hangs up");
}
