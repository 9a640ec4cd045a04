// Which shard a producer of a dataset makes next: items some job takes as copies made again by
// index (remake.h), when that job has room, else the epochs' next (epoch.c). Private to the
// broker's rooms; runs under the broker's lock and does no I/O.
#ifndef BROKER_SHARDS_H
#define BROKER_SHARDS_H

#include <stdint.h>

#include "core.h"

// Answers a SHARD request, as epochs_handle_shard does (the dispatcher frees req).
int shards_handle(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
                  broker_outbox *out);

#endif
