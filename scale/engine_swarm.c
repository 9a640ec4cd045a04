// The swarm engine (engine_swarm.h): HTTP/1.1 over the Docker Engine's Unix socket, one request
// per connection (Connection: close), every read and write bounded by the request's deadline and
// the answer by RESPONSE_MAX bytes. The JSON of the service is not parsed into a tree: a small
// scanner finds Spec, Version.Index and Spec.Mode.Replicated.Replicas and the spec is sent back
// byte for byte but for the replicas' number.
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "engine_swarm.h"
#include "stoker/clock.h"

#define RESPONSE_MAX (4u << 20) // a service's JSON is a few KB; more is not an engine's answer

static int
fail(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
    return -1;
}

static int
left_ms(uint64_t deadline)
{
    uint64_t now = stoker_now_ms();
    return now >= deadline ? 0 : (int)(deadline - now);
}

// Waits for fd to be ready for events until deadline: 0, or -1 on a timeout or error.
static int
wait_fd(int fd, short events, uint64_t deadline)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int ms = left_ms(deadline);
        if (ms == 0)
            return -1;
        int n = poll(&p, 1, ms);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

// The body of a chunked transfer, decoded in place (body..*len). 0, or -1 when malformed.
static int
dechunk(char *body, size_t *len)
{
    size_t in = 0, out = 0, n = *len;
    for (;;) {
        char *end;
        if (in >= n)
            return -1;
        unsigned long size = strtoul(body + in, &end, 16);
        char *line = memchr(body + in, '\n', n - in);
        if (line == NULL || end == body + in)
            return -1;
        in = (size_t)(line - body) + 1;
        if (size == 0)
            break;
        if (size > n - in)
            return -1;
        memmove(body + out, body + in, size);
        out += size;
        in += size;
        if (in < n && body[in] == '\r')
            in++;
        if (in < n && body[in] == '\n')
            in++;
    }
    *len = out;
    body[out] = '\0';
    return 0;
}

// One request: method path, body (NULL: none). On 0, *status is the HTTP status and *out the
// body (malloc'd, NUL-terminated; the caller frees it).
static int
http(const engine_swarm *e, const char *method, const char *path, const char *body, int *status,
     char **out, char *err, size_t err_len)
{
    uint64_t deadline = stoker_now_ms() + e->timeout_ms;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(e->socket_path) >= sizeof(addr.sun_path))
        return fail(err, err_len, "docker socket path '%s' is too long", e->socket_path);
    strcpy(addr.sun_path, e->socket_path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return fail(err, err_len, "socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 && errno != EINPROGRESS &&
        errno != EAGAIN) {
        int e2 = errno;
        close(fd);
        return fail(err, err_len,
                    "cannot reach the Docker engine at %s: %s (is dockerd running, is the "
                    "socket mounted, may this user open it?)",
                    e->socket_path, strerror(e2));
    }
    size_t body_len = body != NULL ? strlen(body) : 0;
    char head[1024];
    int head_len = snprintf(head, sizeof(head),
                            "%s %s HTTP/1.1\r\nHost: docker\r\nUser-Agent: stoker-scale\r\n"
                            "Connection: close\r\n%s",
                            method, path, body != NULL ? "Content-Type: application/json\r\n" : "");
    if (head_len < 0 || (size_t)head_len >= sizeof(head) - 64) {
        close(fd);
        return fail(err, err_len, "request path too long: %s", path);
    }
    head_len += snprintf(head + head_len, sizeof(head) - (size_t)head_len,
                         "Content-Length: %zu\r\n\r\n", body_len);
    const char *parts[2] = {head, body};
    size_t lens[2] = {(size_t)head_len, body_len};
    for (int i = 0; i < 2; i++) {
        size_t done = 0;
        while (done < lens[i]) {
            if (wait_fd(fd, POLLOUT, deadline) != 0) {
                close(fd);
                return fail(err, err_len, "%s %s: the Docker engine took no request within %.1f s",
                            method, path, e->timeout_ms / 1000.0);
            }
            ssize_t n = send(fd, parts[i] + done, lens[i] - done, MSG_NOSIGNAL);
            if (n < 0 && errno != EAGAIN && errno != EINTR) {
                int e2 = errno;
                close(fd);
                return fail(err, err_len, "%s %s: writing to %s: %s", method, path, e->socket_path,
                            strerror(e2));
            }
            done += n > 0 ? (size_t)n : 0;
        }
    }
    size_t cap = 16384, len = 0;
    char *buf = malloc(cap);
    if (buf == NULL) {
        close(fd);
        return fail(err, err_len, "out of memory");
    }
    for (;;) {
        if (wait_fd(fd, POLLIN, deadline) != 0) {
            free(buf);
            close(fd);
            return fail(err, err_len, "%s %s: no full answer from the Docker engine within %.1f s",
                        method, path, e->timeout_ms / 1000.0);
        }
        if (len + 1 == cap) {
            if (cap >= RESPONSE_MAX) {
                free(buf);
                close(fd);
                return fail(err, err_len, "%s %s: the answer is over %u bytes", method, path,
                            RESPONSE_MAX);
            }
            char *bigger = realloc(buf, cap * 2);
            if (bigger == NULL) {
                free(buf);
                close(fd);
                return fail(err, err_len, "out of memory");
            }
            buf = bigger;
            cap *= 2;
        }
        ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
        if (n == 0)
            break;
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
            int e2 = errno;
            free(buf);
            close(fd);
            return fail(err, err_len, "%s %s: reading from %s: %s", method, path, e->socket_path,
                        strerror(e2));
        }
        len += n > 0 ? (size_t)n : 0;
    }
    close(fd);
    buf[len] = '\0';
    int code = 0;
    char *sep = strstr(buf, "\r\n\r\n");
    if (sscanf(buf, "HTTP/1.%*d %d", &code) != 1 || sep == NULL) {
        free(buf);
        return fail(err, err_len, "%s %s: %s does not answer as a Docker engine (no HTTP reply)",
                    method, path, e->socket_path);
    }
    *sep = '\0';
    char *payload = sep + 4;
    size_t payload_len = len - (size_t)(payload - buf);
    for (char *h = buf; *h; h++)
        if (*h >= 'A' && *h <= 'Z')
            *h = (char)(*h - 'A' + 'a');
    if (strstr(buf, "transfer-encoding: chunked") != NULL && dechunk(payload, &payload_len) != 0) {
        free(buf);
        return fail(err, err_len, "%s %s: a malformed chunked answer", method, path);
    }
    memmove(buf, payload, payload_len + 1);
    *status = code;
    *out = buf;
    return 0;
}

// --- a JSON scanner: just enough to find values by key ------------------------------------------

static const char *
ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

// The end of the string starting at p (at its opening quote), past the closing quote; NULL.
static const char *
skip_string(const char *p, const char *end)
{
    for (p++; p < end; p++) {
        if (*p == '\\')
            p++;
        else if (*p == '"')
            return p + 1;
    }
    return NULL;
}

// The end of the value at p; NULL when malformed.
static const char *
skip_value(const char *p, const char *end)
{
    p = ws(p, end);
    if (p >= end)
        return NULL;
    if (*p == '"')
        return skip_string(p, end);
    if (*p == '{' || *p == '[') {
        int depth = 0;
        while (p < end) {
            if (*p == '"') {
                if ((p = skip_string(p, end)) == NULL)
                    return NULL;
                continue;
            }
            depth += (*p == '{' || *p == '[') - (*p == '}' || *p == ']');
            p++;
            if (depth == 0)
                return p;
        }
        return NULL;
    }
    while (p < end && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\n')
        p++;
    return p;
}

// In the object [obj, end) (obj at its '{'), the value of key: its span in *v, *v_end. 0 when
// found, -1 when absent or malformed.
static int
find_key(const char *obj, const char *end, const char *key, const char **v, const char **v_end)
{
    const char *p = ws(obj, end);
    if (p >= end || *p != '{')
        return -1;
    size_t klen = strlen(key);
    p++;
    for (;;) {
        p = ws(p, end);
        if (p >= end || *p == '}' || *p != '"')
            return -1;
        const char *k = p + 1, *k_end = skip_string(p, end);
        if (k_end == NULL)
            return -1;
        p = ws(k_end, end);
        if (p >= end || *p != ':')
            return -1;
        const char *val = ws(p + 1, end), *val_end = skip_value(val, end);
        if (val_end == NULL)
            return -1;
        if ((size_t)(k_end - 1 - k) == klen && memcmp(k, key, klen) == 0) {
            *v = val;
            *v_end = val_end;
            return 0;
        }
        p = ws(val_end, end);
        if (p < end && *p == ',')
            p++;
    }
}

// The engine's {"message": "..."} as a C string in msg (cut to fit).
static void
engine_message(const char *body, char *msg, size_t cap)
{
    const char *v, *v_end;
    const char *end = body + strlen(body);
    if (find_key(body, end, "message", &v, &v_end) == 0 && *v == '"' && v_end - v >= 2)
        snprintf(msg, cap, "%.*s", (int)(v_end - v - 2), v + 1);
    else
        snprintf(msg, cap, "%.200s", body);
}

// What a GET /services/NAME told: the service's id, version, spec and where its replicas are.
typedef struct service_view {
    char *body; // owns the rest's storage
    char id[80];
    unsigned long long version;
    const char *spec, *spec_end;
    const char *replicas, *replicas_end; // the number's span; NULL: no Replicas key yet
    const char *replicated;              // the Replicated object's '{'
    uint32_t count;
} service_view;

static int
service_read(const engine_swarm *e, service_view *s, char *err, size_t err_len)
{
    char path[512], msg[256];
    memset(s, 0, sizeof(*s));
    if (snprintf(path, sizeof(path), "/services/%s", e->service) >= (int)sizeof(path))
        return fail(err, err_len, "service name too long: %s", e->service);
    int status;
    if (http(e, "GET", path, NULL, &status, &s->body, err, err_len) != 0)
        return -1;
    const char *b = s->body, *end = b + strlen(b), *v, *v_end, *mode, *mode_end, *rep, *rep_end;
    if (status != 200) {
        engine_message(b, msg, sizeof(msg));
        free(s->body);
        s->body = NULL;
        if (status == 404)
            return fail(err, err_len,
                        "the Docker engine has no service '%s' (%s); give --service the "
                        "service's full name, as `docker service ls` shows it",
                        e->service, msg);
        if (status == 503)
            return fail(err, err_len,
                        "the Docker engine at %s is not a swarm manager (%s): run the swarm "
                        "engine on a manager node",
                        e->socket_path, msg);
        return fail(err, err_len, "GET %s: the Docker engine answered %d: %s", path, status, msg);
    }
    if (find_key(b, end, "ID", &v, &v_end) == 0 && *v == '"')
        snprintf(s->id, sizeof(s->id), "%.*s", (int)(v_end - v - 2), v + 1);
    if (find_key(b, end, "Version", &v, &v_end) == 0 &&
        find_key(v, v_end, "Index", &v, &v_end) == 0)
        s->version = strtoull(v, NULL, 10);
    if (s->id[0] == '\0' || s->version == 0 ||
        find_key(b, end, "Spec", &s->spec, &s->spec_end) != 0 ||
        find_key(s->spec, s->spec_end, "Mode", &mode, &mode_end) != 0) {
        free(s->body);
        s->body = NULL;
        return fail(err, err_len, "GET %s: the answer has no ID, Version.Index or Spec.Mode", path);
    }
    if (find_key(mode, mode_end, "Replicated", &rep, &rep_end) != 0) {
        free(s->body);
        s->body = NULL;
        return fail(err, err_len,
                    "service '%s' is not replicated (its mode is %.60s): the swarm engine sets "
                    "a replicated service's replicas",
                    e->service, mode);
    }
    s->replicated = rep;
    s->count = 1; // the engine's default when Replicas is left out
    if (find_key(rep, rep_end, "Replicas", &v, &v_end) == 0) {
        s->replicas = v;
        s->replicas_end = v_end;
        s->count = (uint32_t)strtoul(v, NULL, 10);
    }
    return 0;
}

int
engine_swarm_get(const engine_swarm *e, uint32_t *replicas, char *err, size_t err_len)
{
    service_view s;
    if (service_read(e, &s, err, err_len) != 0)
        return -1;
    *replicas = s.count;
    free(s.body);
    return 0;
}

// One try: 0 done, 1 the version moved (try again), -1 failed.
static int
set_once(const engine_swarm *e, uint32_t replicas, char *err, size_t err_len)
{
    service_view s;
    if (service_read(e, &s, err, err_len) != 0)
        return -1;
    // The spec with the replicas' number replaced, or inserted first into Replicated.
    const char *cut = s.replicas != NULL ? s.replicas : s.replicated + 1;
    const char *resume = s.replicas != NULL ? s.replicas_end : s.replicated + 1;
    char num[32];
    if (s.replicas != NULL)
        snprintf(num, sizeof(num), "%u", replicas);
    else
        snprintf(num, sizeof(num), "\"Replicas\":%u%s", replicas,
                 ws(resume, s.spec_end)[0] == '}' ? "" : ",");
    size_t spec_len = (size_t)(s.spec_end - s.spec);
    char *spec = malloc(spec_len + sizeof(num) + 1);
    if (spec == NULL) {
        free(s.body);
        return fail(err, err_len, "out of memory");
    }
    size_t a = (size_t)(cut - s.spec), n = strlen(num);
    memcpy(spec, s.spec, a);
    memcpy(spec + a, num, n);
    memcpy(spec + a + n, resume, (size_t)(s.spec_end - resume));
    spec[a + n + (size_t)(s.spec_end - resume)] = '\0';
    char path[256], msg[256];
    snprintf(path, sizeof(path), "/services/%s/update?version=%llu", s.id, s.version);
    free(s.body);
    int status;
    char *body = NULL;
    int rv = http(e, "POST", path, spec, &status, &body, err, err_len);
    free(spec);
    if (rv != 0)
        return -1;
    if (status == 200) {
        free(body);
        return 0;
    }
    engine_message(body, msg, sizeof(msg));
    free(body);
    if (strstr(msg, "out of sequence") != NULL)
        return 1;
    return fail(err, err_len,
                "updating service '%s' to %u replicas: the Docker engine answered %d: %s",
                e->service, replicas, status, msg);
}

int
engine_swarm_set(const engine_swarm *e, uint32_t replicas, char *err, size_t err_len)
{
    for (int attempt = 0; attempt < 3; attempt++) {
        int rv = set_once(e, replicas, err, err_len);
        if (rv <= 0)
            return rv;
    }
    return fail(err, err_len,
                "updating service '%s' to %u replicas: its version kept changing under us "
                "(another update at the same time?)",
                e->service, replicas);
}
