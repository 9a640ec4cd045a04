// The broker's budget room (budget.c): batches made by tokens. Private to server/.
#ifndef BROKER_BUDGET_H
#define BROKER_BUDGET_H

#include <stdint.h>

#include "core.h"

// The most examples a batch made by tokens holds, and the most a plan looks at.
#define BUDGET_MAX_EXAMPLES 8192

typedef struct budget_pick {
    uint32_t producer; // index into b->producers
    uint32_t source;   // a mixture's source plus one (budget_plan_mixed); 0: none
    uint64_t seq, len;
} budget_pick;

// A batch planned for a trainer, in the order its examples go in the batch (a packed consumer
// packs them in that order into the same rows).
typedef struct budget_plan {
    budget_pick *picks;
    uint32_t n, cap;
    uint64_t tokens, longest;
    uint64_t padding; // tokens the batch pads (to its longest, or the packed rows' unused tail)
    int full;         // the budget or the count is reached: more queued would not make it larger
} budget_plan;

// Plans a batch for trainer t (its batching is active) from what the queues hold (with buckets:
// the run of similar lengths that pads least, budget.c): at most max
// examples, or with pack= max rows (and at most BUDGET_MAX_EXAMPLES examples), and never more
// than cap examples (a group's short step shares what is left among its ranks); takes nothing.
// -1 when nothing can be planned (nothing queued, out of memory).
// With buckets a plan may come from batches planned ahead (ahead.h): the caller takes its
// picks by seq, then calls ahead_taken.
int budget_plan_make(broker *b, const trainer *t, uint32_t max, uint32_t cap, budget_plan *plan);
void budget_plan_free(budget_plan *plan);
// A batch by tokens for trainer t with mixture m (mix.h: its books count tokens): each next
// sequence from the source furthest behind its running target in tokens, in arrival order
// within the source, at most max of them and within t's token budget. *waits_for: the source
// the batch stopped for, having nothing queued (else -1); the plan then holds what came before
// it (exact so far). -1 when nothing is planned.
struct mix;
int budget_plan_mixed(const broker *b, const trainer *t, const struct mix *m, uint32_t max,
                      budget_plan *plan, int32_t *waits_for);

// Tokens queued in all queues (rows of the schema's length field).
uint64_t budget_queued_tokens(const broker *b);
// Nonzero when the queues hold enough for world full batches made as batching says (max as for
// budget_plan_make): max examples each, or by tokens each its budget's tokens (or as many
// examples as a plan looks at). One trainer: world 1; a group's step: its world. With buckets,
// enough is a reserve of several batches to choose among (budget.c, BUCKET_RESERVE_BATCHES),
// or what the queues can hold (half their depth or of --max-bytes): callers still make a batch
// without it when the supply ends, the queues are full or a pull's wait is over.
int budget_ready(const broker *b, const stoker_batching *batching, uint32_t max, uint32_t world);

#endif
