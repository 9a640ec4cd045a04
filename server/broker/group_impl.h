// The groups' private parts, shared by group.c (forming steps) and group_commit.c (commits).
#ifndef GROUP_IMPL_H
#define GROUP_IMPL_H

#include <stdint.h>

#include "internal.h"

typedef struct group_rank {
    trainer *t;          // NULL until the rank joined
    uint64_t delivered;  // steps whose batch was sent to this rank
    uint64_t said;       // the steps it said in its hello it had taken (a broker before died)
    lease **pending;     // formed, not yet sent: FIFO of steps_ahead entries
    uint64_t *events_at; // per pending entry: the broker's events when its step was formed
    uint32_t head, n_pending;
    // The events this rank may hear: those before its last sent step was formed. An event (an
    // epoch's end) thus reaches every rank with the same step, the first formed after it.
    uint64_t events_upto, events_before; // and the value before the last pop (group_untake)
    // When another trainer first claimed this rank while it was held (0: no claim): a holder
    // heard after it is alive (group_admit).
    uint64_t claimed_ms;
    // A group commit in progress (group_commit): the leases this rank acknowledged for it, and
    // its final part's request, answered once every rank's is in.
    uint64_t *staged;
    uint32_t n_staged, cap_staged;
    void *commit_token;
} group_rank;

typedef struct group {
    struct group *next;
    char name[STOKER_NAME_MAX];
    uint32_t world, batch, ahead;
    stoker_batching batching; // how its steps' batches are made (all 0: by count, batch each)
    struct mix *mix;          // its mixture of sources (mix.h), every rank's alike; NULL: none
    uint32_t members;         // trainers whose ->group is this one
    int retired;              // broken or ended: a hello with this name starts a new group
    int started;              // every rank joined once: the step count is set (resumed or 1)
    uint64_t catch_up; // resumed: ranks that had taken fewer steps get batches alone up to it
    uint64_t steps;    // formed so far
    int end_code;      // STOKER_OK until the end (END_OF_DATA / NO_PRODUCERS) or the break
    uint64_t leftover; // examples no equal step could hold, at the end
    char end_reason[STOKER_MESSAGE_MAX];
    uint64_t ended_ms; // the end or the break (broker uptime), for /status
    group_rank *ranks; // world of them
    // For a rank told why it waits (group_take): when the last step was formed (or the group
    // created) and the examples produced until then, so the rate since can be said.
    uint64_t step_ms, step_produced;
    int short_of; // the last fill found fewer examples queued than a full step
    // The step every rank commits at in the commit in progress (0: none), and since when.
    uint64_t commit_step, commit_since_ms;
} group;

// The next step of a group with a mixture: 1 with its per-source counts once every source has
// its count queued; 0 while it waits, or when the group ended with its mixture (group_mix.c).
int group_mixed_step(broker *b, group *g, uint64_t now_ms, uint32_t *counts);
// The same for a group mixing by tokens (budget_plan_mixed): 1 when a step may be formed (each
// rank's batch planned whole from the group's books, group_mixed_tokens_take); 0 while it waits
// (the source it waits for in the mixture's waits_for), or when the group ended with its mixture.
int group_mixed_tokens_step(broker *b, group *g, uint64_t now_ms);
// Rank t's batch of such a step, whole, or NULL (a source it needs has nothing queued).
lease *group_mixed_tokens_take(broker *b, group *g, trainer *t);
// Whether g's mixture is the one asked for (none and none alike); the refusal of a rank whose
// mixture is not its group's.
int group_same_mix(const group *g, const stoker_mix *asked);
int group_mix_disagrees(const group *g, const stoker_request *req, const char *who, char *why,
                        size_t len);

#endif
