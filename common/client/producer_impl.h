// Producer client: hello / push / heartbeat / goodbye over one REQ socket with three contexts
// (the pushing thread's, the heartbeat thread's, and a dataset's shard requests made ahead on
// the generating thread). The seq rule makes every resend safe. Pushes themselves go over a
// connection of their own when the URL allows (push_stream.h: no copy of the chunk), else, and
// whenever that connection fails, over the socket.
// A stop (opts.stop) gives the pushes STOP_GRACE_MS: a push the broker can take is answered in
// that time; one parked for room (queue full) or sent to a broker that is gone is abandoned, and
// goodbye's answer then says where the session ended.
// On the broker's host (the broker offers its arena socket in the hello reply) the retained
// copies of large chunks live in shared memory handed to the broker (push_pool.h) and pushes
// carry only where they are: the broker reads the examples in place (STOKER_SHM=0: bytes).
// Retention: a copy of every pushed chunk is kept (retention.c) until the broker reports its
// examples trained (trained_through in push, heartbeat and hello replies); a full buffer makes
// push wait (backpressure). A hello that finds a broker holding less of the session than was
// pushed (a restarted broker) is followed by pushing the retained chunks again from there.
//
// Private to the producer client's files: its state, shared by its rooms. producer_client.c
// (create, destroy, the hello and what the broker's answers tell) is the bottom;
// producer_push.c (pushes, their replay to a broker that lost them, drain, goodbye) and
// producer_shards.c (a dataset's shards) sit above it. The session with the broker, its
// heartbeats and the broker's presence are session.h's.
#ifndef STOKER_CLIENT_PRODUCER_IMPL_H
#define STOKER_CLIENT_PRODUCER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "push_pool.h"
#include "push_stream.h"
#include "retention.h"
#include "session.h"
#include "stoker/producer_client.h"

#define STOP_GRACE_MS 40

struct stoker_producer_client {
    stoker_client_options opts;
    char url[512];
    char name[STOKER_NAME_MAX];
    char autoscale_pool[STOKER_NAME_MAX]; // its autoscale pool (empty: the broker's "default")
    char token[STOKER_TOKEN_MAX];
    stoker_schema schema;
    session session; // the socket, hello, heartbeats, the broker's presence (session.h)
    nng_ctx push_ctx;
    nng_ctx shard_ctx; // stoker_producer_client_shard_ahead's, while the pusher uses push_ctx
    push_stream ps;    // pushes from the chunks' own buffers (push_stream.h); the pusher's
    uint64_t next_seq;
    conn_stop stop; // the pushing thread's: opts.stop with STOP_GRACE_MS
    char error[STOKER_MESSAGE_MAX];

    _Atomic uint32_t max_chunk;      // examples one push may carry, from the hello; 0: not said
    _Atomic uint32_t batch_examples; // the trainers' largest batch, from push replies; 0: none
    _Atomic int done_making;         // draining: heartbeats say it pushes nothing more
    _Atomic uint64_t make_us;        // spent making examples (stoker_producer_client_add_make_us)
    // The producers alive (high 32 bits) and trainers connected (low) at the broker, as its
    // latest answer said; a hello carries them to a broker after it (its returning window).
    _Atomic uint64_t peers;

    // A dataset's producer (stoker_producer_client_set_dataset): said in hello; the items of
    // the push in progress (stoker_producer_client_push_items), NULL for a stream's.
    uint64_t dataset_size, dataset_fingerprint;
    const uint64_t *push_items;
    uint64_t push_shard;         // the shard push_items belong to
    const stoker_labels *labels; // said in hello (stoker_producer_client_set_labels); borrowed
    // Retention (the pushing thread's, but trained, which the heartbeat thread raises too).
    retention *kept; // NULL when off
    // Pushes by reference (push_pool.h): the pool, made at the first hello that offers it;
    // shm 0 when STOKER_SHM=0 (never asked); pool_said: the path was logged.
    push_pool *pool;
    int shm, pool_said;
    uint64_t pool_min;          // pushes of fewer bytes go as bytes (STOKER_SHM_PUSH_MIN)
    _Atomic uint32_t retain;    // bound in examples; STOKER_RETAIN_AUTO until the hello
    int retain_auto;            // retain follows the broker's queue depth (no --retain N)
    _Atomic uint64_t trained;   // seqs below it are trained (the broker said so)
    uint64_t broker_seq;        // the broker's next seq for us, from its last answer
    int full_logged;            // "retention full" said for this wait
    uint64_t replays, replayed; // pushes again to a broker that lost them, and their examples
    // Two pushes in flight (stoker_producer_client_set_pipelined): the one sent on the push
    // stream whose reply is not read yet. It is retained, and pc->next_seq is past it already.
    int pipelined;
    struct {
        int on;
        uint32_t id;
        uint64_t stream; // the push stream's connection it went out on (push_stream.h: conns)
        uint64_t first;
        uint32_t count;
    } flying;
    // Pushes encoded ahead of time on the generating thread (stoker_producer_client_prepare),
    // taken by the push of the same seqs; prepare and push run on different threads.
    pthread_mutex_t prepared_lock;
    struct {
        nng_msg *msg; // NULL: free slot
        uint64_t first_seq;
        uint32_t count;
    } prepared[2];
};

// --- producer_client.c ---
// One hello attempt on the pushing thread's context. Returns STOKER_OK, a refusal code (final),
// a transport code (retry), or STOKER_INTERRUPTED when stop (may be NULL) abandoned it.
// at: the seq to announce (UINT64_MAX: the oldest kept, else the next).
int producer_hello_once(stoker_producer_client *pc, conn_stop *stop, uint64_t at);
// Whether opts.stop is set.
int producer_stopped(const stoker_producer_client *pc);
// Sleeps *delay_ms (ending early on a stop), then doubles it up to opts.reconnect_max_ms.
void producer_backoff(stoker_producer_client *pc, uint32_t *delay_ms);
// Whether the broker took our hello and has not said since that it forgot us.
int producer_known(const stoker_producer_client *pc);
// A request of the pushing thread found no broker: STOKER_OK while it may wait on for one
// (--broker-wait from its last answer), else STOKER_CONNECTION, said (session_keep_waiting).
int producer_keep_waiting(stoker_producer_client *pc);
// Whether rv is worth a retry (a transport failure, a broker busy or not knowing us).
int producer_transient(int rv);
// Raises trained to through (never lowers it; the heartbeat thread may race the pusher).
void producer_note_trained(stoker_producer_client *pc, uint64_t through);
// With the default retention, follows the broker's queue depth (twice it).
void producer_note_depth(stoker_producer_client *pc, uint32_t depth);
// Remembers the peers rep says the broker has (a reply that says none changes nothing).
void producer_note_peers(stoker_producer_client *pc, const stoker_reply *rep);

#endif
