// The producer loop for a dataset (see stoker_producer_run in stoker/producer.h): private to
// libstoker, called by producer.c once hello succeeded.
#ifndef PRODUCER_DATASET_H
#define PRODUCER_DATASET_H

#include "chunk_policy.h"
#include "stoker/producer.h"
#include "stoker/producer_client.h"

// Asks pc's broker for shards and makes and pushes their items with gen (borrowed, n_items > 0)
// until the last epoch is made or a stop (cfg->client.stop or the signal flag), then says
// goodbye and returns STOKER_OK; a generator or push error returns it without goodbye. Adds
// what the broker accepted to *st. cp (borrowed) closes its chunks, each within one shard.
int producer_dataset_run(const stoker_producer_config *cfg, const stoker_generator *gen,
                         stoker_producer_client *pc, chunk_policy *cp, stoker_producer_stats *st);

#endif
