// The producer side of the protocol: hello, push chunks with their first seq, heartbeat,
// goodbye, and retention: a copy of each pushed chunk is kept until the broker reports its
// examples trained, so that a broker that dies and restarts gets them again (the trainers'
// identity filter drops what they trained already). Pushes are idempotent by seq, so after a RETRY,
// a timeout or a reconnect the client simply sends the same chunk again; the broker keeps only
// examples beyond what it holds. While connected, a background thread sends a heartbeat whenever
// nothing else was sent for a third of the broker's producer timeout, so a slow generator is not
// taken for a lost producer.
#ifndef STOKER_PRODUCER_CLIENT_H
#define STOKER_PRODUCER_CLIENT_H

#include "stoker/chunk.h"
#include "stoker/client.h"
#include "stoker/labels.h"

typedef struct stoker_producer_client stoker_producer_client;

// Creates a client for schema (copied) and starts dialing opts->url in the background; returns
// at once. opts and its strings are copied. *out is written on success.
int stoker_producer_client_create(const stoker_client_options *opts, const stoker_schema *schema,
                                  stoker_producer_client **out);

// Says hello (blocking, retried with backoff up to opts.give_up_ms). Push calls it when needed,
// so calling it is optional; useful to fail fast on a schema mismatch or bad token.
// Returns STOKER_OK, STOKER_SCHEMA_MISMATCH / STOKER_UNAUTHENTICATED / STOKER_INVALID (the
// broker's message is in stoker_producer_client_error), STOKER_CONNECTION, STOKER_INTERRUPTED.
int stoker_producer_client_hello(stoker_producer_client *pc);

// Pushes chunk (borrowed; its schema must equal the client's) as examples first_seq ..
// first_seq + count - 1, and blocks until the broker acknowledged all of them (pipelined: until
// they are sent and retained, see stoker_producer_client_set_pipelined). first_seq must
// be the client's next seq (stoker_producer_client_next_seq). Handles RETRY (queue full),
// reconnects and re-hello by itself. Returns STOKER_OK, or an error as for hello; after
// STOKER_INTERRUPTED the chunk may or may not be held by the broker (resending is safe).
// Once opts.stop is set, pushes have 40 ms in all: a push the broker takes at once is still
// acknowledged; one waiting for room (queue full) or for an unreachable broker is abandoned
// with STOKER_INTERRUPTED. Goodbye then tells whether the broker took it.
int stoker_producer_client_push(stoker_producer_client *pc, const stoker_chunk *chunk,
                                uint64_t first_seq);

// As push, for a chunk whose buffers the client may take (the chunk owns them): instead of
// copying the pushed examples into the retention buffer, the client keeps the buffers and gives
// chunk others of at least its capacity (count 0), so the caller fills it again at once. chunk
// keeps its buffers when retention is off or the push fails.
int stoker_producer_client_push_owned(stoker_producer_client *pc, stoker_chunk *chunk,
                                      uint64_t first_seq);
// Encodes the push of chunk as first_seq.. now, on the calling thread, so that the push of the
// same seqs later sends it without encoding (a copy of every byte): a generating thread pays it
// while the pushing thread waits on the network. Optional; at most two are kept (a third
// replaces the older). STOKER_OK, STOKER_INVALID (wrong schema, empty) or STOKER_NOMEM.
int stoker_producer_client_prepare(stoker_producer_client *pc, const stoker_chunk *chunk,
                                   uint64_t first_seq);

// Retention bound in examples (call before the first push): pushed examples not yet reported
// trained are kept, and a push waits while keeping its chunk would exceed the bound (unless
// nothing is kept). 0 turns retention off (a broker restart then loses what it held);
// STOKER_RETAIN_AUTO, the default, is twice the broker's current queue depth (its hello reply
// says it, and push and heartbeat replies say it again as the broker sizes its queues from the
// trainers' batches): the broker's queue for this producer plus as much again in flight.
#define STOKER_RETAIN_AUTO UINT32_MAX
int stoker_producer_client_set_retain(stoker_producer_client *pc, uint32_t examples);
// Pipelined pushes (off by default): a push returns once it is sent and retained, and its
// answer is read during the next push (two in flight on the push stream), or by goodbye. A
// push the broker did not take is pushed again from retention; a final refusal surfaces from
// a later push or goodbye. Only with retention, on tcp:// and ipc://; stoker_producer_run
// turns it on. next_seq then runs ahead of what the broker has confirmed until goodbye.
void stoker_producer_client_set_pipelined(stoker_producer_client *pc, int on);
// The bound in force (0: off; STOKER_RETAIN_AUTO before the first hello).
uint32_t stoker_producer_client_retain(const stoker_producer_client *pc);
// Examples kept now, and the seq below which the broker reported every example trained.
uint64_t stoker_producer_client_retained(const stoker_producer_client *pc);
uint64_t stoker_producer_client_trained_through(const stoker_producer_client *pc);
// Waits (at most timeout_ms) until every pushed example is trained, pushing again to a broker
// that restarted meanwhile. Call it before goodbye so that a broker death after the last push
// loses nothing. STOKER_OK when nothing is kept any more, STOKER_TIMEOUT, STOKER_INTERRUPTED,
// STOKER_CONNECTION when no broker answered for opts.give_up_ms, or a push error.
int stoker_producer_client_drain(stoker_producer_client *pc, uint32_t timeout_ms);

// The seq of the next example to push (0 for a new session).
uint64_t stoker_producer_client_next_seq(const stoker_producer_client *pc);
// The session id (random unless given in the options).
uint64_t stoker_producer_client_session(const stoker_producer_client *pc);
// The broker's id for this producer (0 before the first hello).
uint32_t stoker_producer_client_id(const stoker_producer_client *pc);
// The most examples one push may carry, as the broker's last hello reply said (its --max-chunk,
// a fixed --queue-depth, --max-bytes, --max-message); 0 before a hello or from a broker that
// does not say. A larger push is refused as STOKER_TOO_LARGE.
uint32_t stoker_producer_client_max_chunk(const stoker_producer_client *pc);
// The most examples one batch of the broker's trainers takes (those counting examples), as its
// last push reply said; 0 before a push, while no trainer pulls, or from a broker that does
// not say. Sized chunks hold one batch where its bytes allow (stoker_producer_config).
uint32_t stoker_producer_client_batch_examples(const stoker_producer_client *pc);
// The broker's message for the last error (static storage of the client; "" when none).
const char *stoker_producer_client_error(const stoker_producer_client *pc);

// Tells the broker this producer finished (it reports `producer_finished`). Bounded: tries for
// at most 2 s. Returns STOKER_OK or the last error. The broker's answer says where the session
// ends: next_seq moves past a push abandoned on stop that the broker took after all (brokers
// drop pushes still waiting for room at goodbye, so nothing is taken after it).
int stoker_producer_client_goodbye(stoker_producer_client *pc);

// Before the first hello: every hello says labels (borrowed; must outlive the client), the
// generator's class-to-label map, which the broker shows in /status. NULL: none.
void stoker_producer_client_set_labels(stoker_producer_client *pc, const stoker_labels *labels);
// Counts us microseconds more spent making examples (not waiting for the broker); every push
// then tells the broker the total, from which its autoscale signal takes this producer's supply
// (docs/autoscale.md). Any thread; never blocks.
void stoker_producer_client_add_make_us(stoker_producer_client *pc, uint64_t us);

// Datasets (docs/datasets.md). Before the first hello: this client serves a dataset of n_items
// items whose listing has fingerprint (the broker refuses one that differs from the others').
void stoker_producer_client_set_dataset(stoker_producer_client *pc, uint64_t n_items,
                                        uint64_t fingerprint);
// A shard the broker handed out: n items written to the caller's array, the broker's dataset
// seed, and the shard's id, which every push of its items names.
typedef struct stoker_shard {
    uint32_t n;
    uint64_t seed;
    uint64_t id;
} stoker_shard;
// Asks the broker for the next shard: on STOKER_OK, out->n (at most cap) items ((epoch << 32) |
// index, stoker_item_* in producer.h) written to items, the seed and id to *out. The broker
// keeps the shard this producer still pushes: a producer holds up to two, the one it pushes
// and one asked for ahead; asking while holding two hands the older one's unpushed rest to
// others. STOKER_RETRY: nothing to make right now (ask again shortly); STOKER_END_OF_DATA: the
// broker's last epoch is made; otherwise an error as for push. Retries connection trouble like
// push, saying hello on the pushing context: call it while no push is in flight.
int stoker_producer_client_shard(stoker_producer_client *pc, uint64_t *items, uint32_t cap,
                                 stoker_shard *out);
// As stoker_producer_client_shard, but safe while another thread pushes: one attempt on a
// context of its own, no hello, no retry. Any failure is returned as is (STOKER_UNKNOWN_PEER
// when no hello was said yet); once the pushes are done, ask with stoker_producer_client_shard.
int stoker_producer_client_shard_ahead(stoker_producer_client *pc, uint64_t *items, uint32_t cap,
                                       stoker_shard *out);
// As push, each example i carrying items[i] (borrowed, chunk->count of them): the items of
// shard `shard` (its id), pushed in the order the shard listed them (STOKER_INVALID
// otherwise). Besides push's errors, STOKER_SHARD_REVOKED: the broker gave these items to
// others meanwhile (this producer was taken for lost); nothing of the chunk was taken: drop
// that shard (a shard asked for ahead may still be this producer's: its pushes say).
int stoker_producer_client_push_items(stoker_producer_client *pc, const stoker_chunk *chunk,
                                      uint64_t first_seq, const uint64_t *items, uint64_t shard);

// Stops the heartbeat thread, closes the socket and frees; accepts NULL. Without a goodbye the
// broker reports the producer lost.
void stoker_producer_client_destroy(stoker_producer_client *pc);

#endif
