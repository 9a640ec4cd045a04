// The broker's side of commit with checkpoints: a trainer that says `commit` in its hello sends
// its acknowledgements only when it commits (typically when it saves a checkpoint), so its leases
// stay in flight meanwhile, and are redelivered if it dies before committing. Those leases keep
// their examples in memory, so they count inside --max-bytes with the queues: when held and
// queued bytes reach the bound, pushes wait, and an empty pull says why. It does not apply
// acknowledgements (lease.c) nor decide who commits (the trainer client).
// It may use the core (core.h) only.
#include <stdio.h>

#include "internal.h"

uint64_t
commit_bytes_room(const broker *b)
{
    uint64_t used = b->queued_bytes + b->held_bytes;
    return used >= b->cfg.max_bytes ? 0 : b->cfg.max_bytes - used;
}

void
commit_hold(broker *b, const trainer *t, lease *l)
{
    if (!t->commit || l == NULL)
        return;
    l->held_bytes = l->bytes;
    b->held_bytes += l->held_bytes;
}

void
commit_release(broker *b, lease *l)
{
    b->held_bytes -= l->held_bytes;
    l->held_bytes = 0;
}

void
commit_why_empty(const broker *b, const trainer *t, char *buf, size_t len)
{
    buf[0] = '\0';
    if (b->held_bytes == 0 || commit_bytes_room(b) >= b->example_bytes * 2)
        return;
    uint64_t mine = 0;
    for (const lease *l = t->leases; l != NULL; l = l->next)
        mine += l->held_bytes;
    snprintf(buf, len,
             "uncommitted leases hold %llu bytes (%llu of them this trainer's) of --max-bytes "
             "%llu: no room for new examples until a commit",
             (unsigned long long)b->held_bytes, (unsigned long long)mine,
             (unsigned long long)b->cfg.max_bytes);
}

uint32_t
commit_retain_depth(const broker *b)
{
    uint64_t depth = b->queue_depth;
    uint32_t alive = producers_alive(b);
    if (b->held_bytes > 0 && b->example_bytes > 0)
        depth += b->held_bytes / b->example_bytes / (alive > 0 ? alive : 1);
    // And a share of what trainers hold unacknowledged: a producer keeps those too, and a queue
    // of two batch-sized chunks (queues.c) would otherwise leave it waiting for every ack.
    depth += b->c.in_flight / (alive > 0 ? alive : 1);
    return depth > UINT32_MAX / 4 ? UINT32_MAX / 4 : (uint32_t)depth;
}
