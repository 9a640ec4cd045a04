// A trainer's end, lost or gone: its parked pulls are answered, a commit in progress in its
// group fails, its group is told (it breaks unless it had ended) and its leases go back to their
// queues. Floor 4 beside the groups: it uses them and the leases; the handlers (session.c) and the
// losses (loss.c) call it.
#include <stddef.h>
#include <stdint.h>

#include "group.h"
#include "internal.h"
#include "stoker/error.h"
#include "stoker/log.h"

// Disconnects trainer t and redelivers its leases; reason NULL means it said goodbye.
void
drop_trainer(broker *b, trainer *t, const char *reason, uint64_t now_ms, broker_outbox *out)
{
    if (reason != NULL)
        stoker_warn("trainer-lost: trainer %u '%s': %s", t->id, t->name, reason);
    else
        stoker_info("trainer-left: trainer %u '%s' said goodbye", t->id, t->name);
    reason = reason != NULL ? reason : "trainer left";
    t->connected = 0;
    parked *prev = NULL, *k = b->pulls;
    while (k != NULL) {
        parked *next = k->next;
        if (k->trainer == t) {
            send_code(b, out, k->token, STOKER_UNKNOWN_PEER, "trainer was dropped: %s", reason);
            unlink_pull(b, prev, k);
            free_parked(k);
        } else {
            prev = k;
        }
        k = next;
    }
    group_commit_lost(b, t, out);
    group_rank_lost(b, t, reason);
    lease_redeliver(b, t);
}
