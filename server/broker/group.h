// Private to the broker's rooms: data-parallel groups (docs/groups.md). A group is world ranks
// (trainers) fed step by step: step k gives every rank one batch of the same size, formed only
// when all of its batches can be filled, at most steps_ahead steps beyond the slowest rank; the
// end reaches every rank at the same step, and a rank lost before it breaks the group.
// Every function runs under the broker's lock, like the rest of internal.h.
#ifndef BROKER_GROUP_H
#define BROKER_GROUP_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

// Checks a trainer's hello with a group (req->group non-empty) and returns its group in *out
// (created when none of that name is open). t is the trainer of req's session, or NULL when it
// is new. STOKER_INVALID (bad rank, world or batch; a rank held by a live trainer; ranks
// disagreeing) or STOKER_NOMEM with the reason in why; nothing changes then.
// A rank held by another trainer (a group re-forming while an old rank hangs: SIGSTOP, a
// partitioned node) is judged by the holder's silence: silent for GROUP_TAKEOVER_MS (half the
// trainer timeout, 1.5 heartbeats) it is lost: *holder is set and STOKER_RETRY returned (the
// caller drops it, which breaks its group, and admits again); heard since the claim began, it is
// a live duplicate (STOKER_INVALID); otherwise STOKER_RETRY with *holder NULL and the reason in
// why: the claimer says hello again (the trainer client waits, bounded).
int group_admit(broker *b, const trainer *t, const stoker_request *req, uint64_t now_ms,
                struct group **out, trainer **holder, char *why, size_t why_len);
// Makes t rank `rank` of g (after group_admit said yes).
void group_attach(broker *b, struct group *g, trainer *t, uint32_t rank);
// Before t is freed: it leaves its group (a group nobody is in any more is freed).
void group_detach(broker *b, trainer *t);
// t (a rank) was dropped (reason) or said goodbye: its group breaks unless it had ended. The
// batches formed for the other ranks and not yet sent go back to their queues; t's own go back
// with its leases (lease_redeliver). Call before lease_redeliver(b, t).
void group_rank_lost(broker *b, trainer *t, const char *reason);

// For a pull of grouped trainer t: forms the steps that can be formed, then gives t its next
// batch in *l (and its step in *step), or tells why none comes: STOKER_OK (wait), or the end
// (STOKER_END_OF_DATA / STOKER_NO_PRODUCERS, with the leftover in *leftover) or
// STOKER_GROUP_BROKEN, with the reason in why.
int group_take(broker *b, trainer *t, uint64_t now_ms, lease **l, uint64_t *step,
               uint64_t *leftover, char *why, size_t why_len);
// Gives back a batch group_take handed out that could not be sent (out of memory): t gets it
// again with its next pull.
void group_untake(broker *b, trainer *t, lease *l);

// The last event index t may be told (all of them for a trainer outside a group): a rank hears
// an event with the first step formed after it, the same step on every rank, or with the end.
uint64_t group_events_upto(const broker *b, const trainer *t);
// The mixture of t's group (mix.h), or NULL.
struct mix *group_mix(const trainer *t);

// Groups as the status snapshot shows them: *out a malloc'd array of *n (NULL when none).
int group_status(const broker *b, stoker_group_info **out, uint32_t *n);
// Frees every group (broker_destroy; leases are freed with their trainers); a commit request
// still waiting is released into out (may be NULL).
void group_destroy_all(broker *b, broker_outbox *out);

// Group commit (docs/groups.md, "Checkpoints"): a committing rank's acknowledgements come in
// parts (ACKs with commit_step, the last one commit_final) and are staged, not applied; once
// every rank's final part for the same step is in, all of them are applied at once and every
// rank is answered. Until then the final part waits, at most STOKER_GROUP_COMMIT_WAIT_MS from the
// first rank's part (then STOKER_TIMEOUT naming the ranks missing). A rank lost meanwhile ends it
// with STOKER_GROUP_BROKEN: nothing of it counts, the ranks' leases are redelivered as uncommitted.
#define GROUP_COMMIT_MAX_LEASES (1u << 22) // per rank and commit: the staging's bound
// Handles t's (a committing rank's) ACK req with commit_step; answers token now or later.
void group_commit(broker *b, trainer *t, void *token, const stoker_request *req, uint64_t now_ms,
                  broker_outbox *out);
// t is being dropped: a commit in progress in its group fails (call before group_rank_lost).
void group_commit_lost(broker *b, trainer *t, broker_outbox *out);
// Commits waiting past STOKER_GROUP_COMMIT_WAIT_MS fail (broker_tick).
void group_commit_tick(broker *b, uint64_t now_ms, broker_outbox *out);

#endif
