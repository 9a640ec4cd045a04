// Which shard a producer makes next (docs/datasets.md, docs/sharing.md): items some job takes as
// copies made again by index (remake.h: a job that joined a dataset late, or passed items over
// while it lagged) when that job has room for them, else the epochs' next (epoch.c). A shard made
// again goes to every job that still needs all of its items, so jobs that joined together get
// theirs made once. Floor of the leases: it uses the core, the sets, the jobs' room and the
// epochs.
#include <stdlib.h>

#include "internal.h"
#include "jobs.h"
#include "remake.h"
#include "shards.h"
#include "stoker/error.h"

// Job j's own queue of lead b's producer p (its mirror in a follower; NULL: none made yet).
static const producer *
own_queue(const broker *b, const broker *j, const producer *p)
{
    return j == b ? p : find_producer_id(j, p->id);
}

// A job of lead b with items to make again and room for p's next push of them (a shard is pushed
// in chunks), or NULL; its set in *set.
static broker *
due(broker *b, const producer *p, remake **set)
{
    uint32_t chunk = p->last_chunk > 0 ? p->last_chunk : 1;
    for (uint32_t i = 0; i <= b->n_followers; i++) {
        broker *j = i == 0 ? b : b->followers[i - 1];
        if (!jobs_takes(j) || (i == 0 && !b->job_named))
            continue;
        const producer *own = own_queue(b, j, p);
        if (own != NULL && !jobs_fits(j, own, chunk, 0))
            continue;
        // Its oldest epoch first; with strict epochs a later one's copies once it has the
        // earlier ones (its epochs come one after the other).
        int strict = epochs_strict(b->epochs);
        for (uint32_t k = 0; k < REMAKE_SETS; k++) {
            remake *r = j->remakes[k];
            if (r != NULL && r->pending_count > 0 && (*set == NULL || r->epoch < (*set)->epoch) &&
                (!strict || !jobs_owes_before(j, r->epoch)))
                *set = r;
        }
        if (*set != NULL)
            return j;
    }
    return NULL;
}

// The jobs of lead b besides `cut_for` that need every item of index[0..n) of epoch `epoch` made
// again too (each pending in its set): they take the shard as well, no longer pending for them.
static uint32_t
also_for(broker *b, const broker *cut_for, uint32_t epoch, const uint32_t *index, uint32_t n)
{
    uint32_t targets = 0;
    for (uint32_t i = 0; i <= b->n_followers; i++) {
        broker *j = i == 0 ? b : b->followers[i - 1];
        remake *r = j != cut_for && jobs_takes(j) ? remake_find(j->remakes, epoch) : NULL;
        uint32_t k = 0;
        while (r != NULL && k < n && remake_is_pending(r, index[k]))
            k++;
        if (r == NULL || k < n)
            continue;
        for (k = 0; k < n; k++)
            remake_take(r, index[k]);
        targets |= 1u << j->job_slot;
    }
    return targets;
}

int
shards_handle(broker *b, void *token, uint32_t pipe, stoker_request *req, uint64_t now_ms,
              broker_outbox *out)
{
    producer *p = b->epochs != NULL ? find_producer(b, req->session) : NULL;
    remake *set = NULL;
    uint32_t want = p != NULL ? epochs_shard_items(b->epochs) : 0;
    broker *j = p != NULL && p->status != STOKER_PRODUCER_FINISHED ? due(b, p, &set) : NULL;
    uint32_t *index = j != NULL ? malloc(want * sizeof(*index)) : NULL;
    if (index == NULL) // no copies due (or no memory for them now): the epochs' next
        return epochs_handle_shard(b, token, pipe, req, now_ms, out);
    revive(b, p, pipe, now_ms, "asked for a shard");
    uint32_t n = remake_cut(set, want, index);
    uint32_t targets = (1u << j->job_slot) | also_for(b, j, set->epoch, index, n);
    if (epochs_give_remade(b, p, set->epoch, index, n, targets, token, out) != STOKER_OK) {
        for (uint32_t i = 0; i <= b->n_followers; i++) { // pending again for every target
            broker *t = i == 0 ? b : b->followers[i - 1];
            remake *r = (targets >> t->job_slot) & 1 ? remake_find(t->remakes, set->epoch) : NULL;
            for (uint32_t k = 0; r != NULL && k < n; k++)
                remake_give_back(r, index[k]);
        }
        send_code(b, out, token, STOKER_RETRY, "broker out of memory cutting a shard");
    }
    free(index);
    return 0;
}
