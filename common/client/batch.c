// A batch's end: what a client hands out (stoker_batch, declared with the chunk types in
// stoker/chunk.h) owns its decoded reply and, when it came in shared memory, a region of the
// broker's arena; destroying it gives both back. It sits with the clients because it reaches
// into the wire (the reply) and the transport (the arena), which the data model below may not.
#include <stdlib.h>

#include "stoker/arena.h"
#include "stoker/chunk.h"
#include "stoker/wire.h"

void
stoker_batch_destroy(stoker_batch *batch)
{
    if (batch == NULL)
        return;
    if (batch->chunk.owns_data)
        stoker_chunk_fini(&batch->chunk);
    stoker_reply_free(batch->owner);
    if (batch->arena != NULL)
        stoker_arena_release(batch->arena, batch->lease);
    free(batch->runs);
    free(batch);
}
