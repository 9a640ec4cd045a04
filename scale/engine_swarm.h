// stoker-scale's swarm engine (docs/autoscale.md): reads and sets a Docker Swarm service's
// replicas through the Docker Engine API on its Unix socket (HTTP/1.1 by hand over AF_UNIX, one
// request per connection). It changes nothing of the service but Mode.Replicated.Replicas, and
// does not decide anything (scale.c does).
#ifndef ENGINE_SWARM_H
#define ENGINE_SWARM_H

#include <stddef.h>
#include <stdint.h>

typedef struct engine_swarm {
    const char *socket_path; // the engine's socket, e.g. /var/run/docker.sock (borrowed)
    const char *service;     // the service's name or id (borrowed)
    uint32_t timeout_ms;     // each request, connect to last byte
} engine_swarm;

// The service's replicas now (Spec.Mode.Replicated.Replicas) into *replicas. Returns 0, or -1
// with err naming what failed: the socket, the engine's answer (its message), a service that
// is not replicated, a timeout.
int engine_swarm_get(const engine_swarm *e, uint32_t *replicas, char *err, size_t err_len);

// Sets the service's replicas to `replicas`: reads its spec and version, posts the spec back
// with only the replicas changed; a version that moved meanwhile (another update) is read again
// and tried once more. Returns 0, or -1 with err.
int engine_swarm_set(const engine_swarm *e, uint32_t replicas, char *err, size_t err_len);

#endif
