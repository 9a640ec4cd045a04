// The consumer API: a small, stable C interface to pull batches from a broker into any training
// loop, for bindings (Python's ctypes, a Wolfram LibraryLink, ...) and command-line tools.
// It wraps stoker_trainer_client and uses plain C types only: no struct is passed or returned by
// value, errors are ints (stoker_err codes; stoker_strerror for a text), strings are
// NUL-terminated. Versioned: STOKER_API_VERSION changes whenever a declaration here changes
// incompatibly; a binding compares stoker_consumer_api_version() with the version it was written
// for. A consumer is used from one thread (stoker_consumer_interrupt excepted).
#ifndef STOKER_CONSUMER_H
#define STOKER_CONSUMER_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/error.h"

// 2: the tls_* options; 3: max_tokens, buckets, pack, pack_whole; 4: mix, mix_stop,
// mix_schedule, mix_blend and
// stoker_consumer_batch_sources (stoker_status_json gone: stoker_status_json_opts); 5: job
#define STOKER_API_VERSION 5

typedef struct stoker_consumer stoker_consumer;
typedef struct stoker_consumer_batch stoker_consumer_batch;

// The version of this header the library was built from (STOKER_API_VERSION).
int stoker_consumer_api_version(void);

typedef struct stoker_consumer_options {
    uint32_t api_version;        // STOKER_API_VERSION; open refuses others (layout check)
    const char *url;             // broker URL (borrowed for the call)
    const char *token;           // auth token, or NULL
    const char *token_file;      // or read it from this file (first line); NULL for none
    const char *name;            // shown in the broker's status; NULL for "consumer-PID"
    uint32_t batch_size;         // examples per batch (0, the default: 4; see max_tokens, pack)
    uint32_t prefetch;           // pulls in flight, 1..64 (default 4)
    uint32_t stall_timeout_ms;   // no batch for this long: STOKER_STALLED (default 4000)
    uint32_t connect_timeout_ms; // no broker answer for this long: STOKER_CONNECTION (default:
                                 // the stall timeout)
    // TLS, for a tls+tcp:// url (paths borrowed for the call; NULL for none), as the C clients'
    // --tls-* flags (docs/security.md). The broker is verified: tls_ca is required unless
    // tls_insecure is nonzero (encrypted, not authenticated). tls_cert and tls_key (together)
    // are this consumer's certificate, for a broker that requires client certificates.
    const char *tls_ca;    // PEM CA certificate(s) that signed the broker's certificate
    const char *tls_cert;  // PEM client certificate (chain)
    const char *tls_key;   // its unencrypted PEM private key
    uint32_t tls_insecure; // 1: do not verify the broker (no tls_ca)
    // Batches of a variable-length schema made by tokens, by the broker (docs/schema.md, "Batching
    // by tokens"; "tokens" are rows of the schema's first variable field). All 0 (default):
    // batch_size examples each. max_tokens: as many sequences as fit in this many padded tokens
    // (count x the longest); a sequence longer alone comes in a batch of its own, never dropped.
    // batch_size then caps the sequences per batch (0, the default: no cap but the broker's, 8192).
    uint32_t max_tokens;
    // buckets (nonzero): each batch holds sequences of similar length (the oldest waiting and
    // those nearest its length among what the broker's queues hold): little padding.
    uint32_t buckets;
    // pack: rows of pack tokens; batch_size is the rows per batch (0, the default: 4), filled
    // with whole sequences (the batch's tokens at most rows x pack). Lay them out with
    // stoker_consumer_batch_offsets: concatenated, cut every pack tokens, or with pack_whole
    // nonzero next-fit (a sequence that does not fit the current row starts the next; one longer
    // than a row is split all the same).
    uint32_t pack;
    uint32_t pack_whole;
    // A mixture of sources (docs/mixing.md; borrowed for the call): "code=0.3,web=0.7", pools of
    // producers (their --pool) and relative weights. Every batch then holds each pool's share,
    // exactly (each source's running count within one example of weight x examples delivered).
    // NULL or "" (default): every producer alike. mix_stop: when a source runs dry, "first"
    // (NULL, the default: the consumer's supply ends, exact to the last batch) or "all" (the
    // others go on, re-weighted, until every source ran dry).
    const char *mix;
    const char *mix_stop;
    // Weights that change as training goes (borrowed for the call): "1000:code=0.5,web=0.5;..."
    // from batch 1000 on (a group's global step) those weights, each point naming every pool
    // (weights >= 0); mix_blend "step" (NULL, the default: a point's weights hold until the
    // next) or "linear" (blended from point to point). The shares stay exact through changes.
    const char *mix_schedule;
    const char *mix_blend;
    // The training job this consumer belongs to (docs/sharing.md; borrowed for the call): jobs
    // share the broker's producers and each gets every example once. NULL or "" (default): the
    // default job; else 1..63 bytes. Every rank of a group names the same job.
    const char *job;
} stoker_consumer_options;

// Fills defaults (and api_version).
void stoker_consumer_options_init(stoker_consumer_options *opts);

// Connects and says hello, then waits (within the stall timeout) until the broker knows the
// schema. On STOKER_OK *out is a new consumer. Otherwise a reason is written into err (if
// err != NULL): STOKER_INVALID (options, token file, TLS files), STOKER_CONNECTION (no broker
// answered), STOKER_TLS (the TLS handshake fails: err says why, e.g. the broker's certificate
// not signed by tls_ca, a client certificate required or refused, a tcp:// url to a TLS broker;
// found within about a second, not after the connect timeout), STOKER_UNAUTHENTICATED,
// STOKER_STALLED (no schema: no producer connected in time).
int stoker_consumer_open(const stoker_consumer_options *opts, stoker_consumer **out, char *err,
                         size_t err_len);

// The same as a rank of a data-parallel group (docs/groups.md): group names it (borrowed for
// the call), rank is this consumer's in 0..world-1. Every rank gets batch_size examples per
// step and the same number of steps; the end (STOKER_END_OF_DATA / STOKER_NO_PRODUCERS, its
// message naming the examples left over) comes to all at the same step. When a rank is lost
// before the end, stoker_consumer_next returns STOKER_GROUP_BROKEN naming it. The broker refuses
// (STOKER_INVALID, reason in err) a rank outside the world, a rank already held, and ranks that
// disagree on the world or batch size.
int stoker_consumer_open_group(const stoker_consumer_options *opts, const char *group,
                               uint32_t rank, uint32_t world, stoker_consumer **out, char *err,
                               size_t err_len);

// A rank of a group with commit with checkpoints (group commit, docs/groups.md), maybe resumed
// from a checkpoint: as stoker_consumer_open_group, with commit on from the start (commit
// nonzero) and the group's step count going on from resume_step (the steps taken when the
// checkpoint was committed; 0 for a new run). Every rank commits at the same step.
int stoker_consumer_open_group_at(const stoker_consumer_options *opts, const char *group,
                                  uint32_t rank, uint32_t world, uint64_t resume_step, int commit,
                                  stoker_consumer **out, char *err, size_t err_len);
// A rank's steps taken so far (with a resumed group, counted from resume_step).
uint64_t stoker_consumer_group_steps(const stoker_consumer *c);

// For a rank of a group, after next returned the end: the examples left over that no equal
// step could hold (still queued at the broker). 0 otherwise.
uint64_t stoker_consumer_group_leftover(const stoker_consumer *c);

// The broker's schema, as text ("input:float32[10],output:float32[1]") into buf (always
// NUL-terminated; truncated if short), and field by field. Indices out of range give NULL / 0 /
// STOKER_INVALID.
void stoker_consumer_schema(const stoker_consumer *c, char *buf, size_t len);
uint32_t stoker_consumer_n_fields(const stoker_consumer *c);
const char *stoker_consumer_field_name(const stoker_consumer *c, uint32_t field); // borrowed
int stoker_consumer_field_dtype(const stoker_consumer *c, uint32_t field);        // stoker_dtype
// One example's shape: writes up to cap dims into shape and returns the rank (-1 if no field).
// A variable field's shape[0] is 0.
int stoker_consumer_field_shape(const stoker_consumer *c, uint32_t field, uint32_t *shape,
                                uint32_t cap);
// 1 when the field's leading dimension is variable (docs/schema.md), with its bound in *max_rows
// (0: none; may be NULL); 0 for a fixed field; -1 if no field.
int stoker_consumer_field_variable(const stoker_consumer *c, uint32_t field, uint32_t *max_rows);

// Waits for the next batch, never longer than the stall timeout. STOKER_OK: *out is a batch the
// caller owns until stoker_consumer_release (or ack + batch_free). Otherwise *out is untouched:
// STOKER_NO_PRODUCERS / STOKER_END_OF_DATA (supply ended; repeated by later calls),
// STOKER_GROUP_BROKEN (a rank of the group was lost; repeated by later calls),
// STOKER_STALLED, STOKER_INTERRUPTED (stoker_consumer_interrupt), or another error;
// stoker_consumer_error tells why, with the broker's reason where it gave one: the reason alone
// ("no batch within 4.0 s"), what happened being the code's (say it once, as its word).
// Batches are independent of each other: holding one while pulling the next is fine, and its
// memory is never reused until it is freed.
int stoker_consumer_next(stoker_consumer *c, stoker_consumer_batch **out);

// As stoker_consumer_next, but waits at most wait_ms: when that is shorter than the stall
// timeout and no batch came, returns STOKER_TIMEOUT (no warning; call again). For a binding that
// must get control back often while it waits (Python runs its Ctrl-C handler only between
// calls into the library) and counts the stall timeout itself.
int stoker_consumer_next_within(stoker_consumer *c, stoker_consumer_batch **out, uint32_t wait_ms);

// Acknowledges b (sent with the next pull, or at close) and frees it. Accepts b == NULL.
void stoker_consumer_release(stoker_consumer *c, stoker_consumer_batch *b);
// The two halves of release, for bindings that keep the memory alive past the acknowledgement:
// ack once per batch (a second ack of the same batch is ignored), free when nothing points into
// the batch any more. stoker_consumer_batch_free may be called after the consumer is closed.
void stoker_consumer_ack(stoker_consumer *c, stoker_consumer_batch *b);
// Commit with checkpoints (stoker_trainer_client_commit): with on, acknowledgements are kept
// until stoker_consumer_commit, so what was trained since the last commit is redelivered if this
// consumer dies; commit when your checkpoint is saved. Commit returns STOKER_OK once the broker
// applied them, or the error (they stay kept). uncommitted: acknowledgements kept now. A rank of a
// group commits with the others: every rank at the same step, applied when the last one's comes
// (stoker_trainer_client_commit says what fails it).
void stoker_consumer_set_commit(stoker_consumer *c, int on);
int stoker_consumer_commit(stoker_consumer *c);
uint64_t stoker_consumer_uncommitted(const stoker_consumer *c);
void stoker_consumer_batch_free(stoker_consumer_batch *b);
// Sends the pending acknowledgements now instead of with the next pull, for a consumer that
// stops pulling for a while (a training loop left by break). Bounded by the request timeout.
// Returns STOKER_OK when the broker applied them (or none were pending), else an error
// (stoker_consumer_error tells why): those batches are then redelivered to other consumers.
int stoker_consumer_flush(stoker_consumer *c);

// 1 when b's fields are in the broker's shared memory (mapped read-only: writing through
// stoker_consumer_batch_field's pointers faults; copy first), 0 when in the batch's own memory.
int stoker_consumer_batch_shared(const stoker_consumer_batch *b);
// How batches arrive: "shm" (the broker's shared memory, mapped and used) or "socket" (static
// string); see stoker_trainer_client_delivery.
const char *stoker_consumer_delivery(const stoker_consumer *c);
// Batches received so far through shared memory, as bytes over the socket, and of the latter
// those that came so while the arena was mapped (the broker's arena was full). Any may be NULL.
void stoker_consumer_delivery_counts(const stoker_consumer *c, uint64_t *shm, uint64_t *socket,
                                     uint64_t *arena_full);

// Examples in the batch: batch_size, or fewer when the supply ends, when the producers' queues
// are all full before a batch is, or when the pull's wait ends first (data trickling in).
uint32_t stoker_consumer_batch_count(const stoker_consumer_batch *b);
// Field f of the batch: *data points to count elements of dtype (a stoker_dtype), C-contiguous
// with shape (examples, field shape...): *rank = 1 + the field's rank, dims written into shape
// (which must hold rank dims; 9 always do). *bytes = count * element size. Any out-pointer may be
// NULL. Valid until the batch is freed. STOKER_INVALID if f is out of range (nothing written).
// A variable field: *data points to the values of all examples concatenated, with shape
// (rows of all examples, the field's dims after the first) and *rank = the field's rank;
// stoker_consumer_batch_offsets says where each example's value is.
int stoker_consumer_batch_field(const stoker_consumer_batch *b, uint32_t field, void **data,
                                int *dtype, uint32_t *rank, uint32_t *shape, uint64_t *count,
                                uint64_t *bytes);
// Variable field f of the batch: *offsets points to examples + 1 row numbers (8-byte aligned,
// native uint64, each below 2^63: readable as int64), offsets[0] == 0; example i's value is rows
// offsets[i] .. offsets[i+1] - 1 of the field's values. *n = examples + 1. Valid until the batch
// is freed. STOKER_INVALID for a fixed field or f out of range (nothing written).
int stoker_consumer_batch_offsets(const stoker_consumer_batch *b, uint32_t field,
                                  const uint64_t **offsets, uint64_t *n);

// Where the examples came from: runs (producer, session, first_seq .. first_seq + count - 1) in
// example order. Returns STOKER_INVALID if run is out of range.
uint32_t stoker_consumer_batch_n_runs(const stoker_consumer_batch *b);
int stoker_consumer_batch_run(const stoker_consumer_batch *b, uint32_t run, uint32_t *producer,
                              uint64_t *session, uint64_t *first_seq, uint32_t *count);
// A mixture's batch (options.mix): every example's source, its index in the mixture as given
// (0 for "code" in "code=0.3,web=0.7"), in example order, into the caller's array of cap
// entries; UINT32_MAX for an example of no mixture. Returns the number written (min(count, cap)).
uint32_t stoker_consumer_batch_sources(const stoker_consumer_batch *b, uint32_t *sources,
                                       uint32_t cap);
// Every example's identity (session, seq), in example order, into the caller's arrays of
// cap entries. Returns the number written (min(count, cap)).
uint32_t stoker_consumer_batch_identities(const stoker_consumer_batch *b, uint64_t *sessions,
                                          uint64_t *seqs, uint32_t cap);

// A dataset's batch (docs/datasets.md): every example's epoch and index, in example order, into
// the caller's arrays of cap entries. Returns the number written (min(count, cap)); 0 for a
// batch of streams.
uint32_t stoker_consumer_batch_items(const stoker_consumer_batch *b, uint32_t *epochs,
                                     uint64_t *indices, uint32_t cap);
// Epochs of the broker's dataset that ended so far (every item delivered and acknowledged), as
// the consumer heard of them (EPOCH_END events, also returned by poll_event) while
// stoker_consumer_next waited. Epochs end in order: epoch k has ended when this is > k.
uint32_t stoker_consumer_epochs_ended(const stoker_consumer *c);
// Restarts of the broker the consumer noticed so far: a hello answered by another broker
// instance than the one before (each also an event of kind STOKER_EVENT_BROKER_RESTARTED,
// returned by poll_event before any batch of the new broker). *broker_id (may be NULL) gets the
// instance that answered the latest hello, 0 when the broker does not say one (one older than
// this library: then no restart is noticed here). *epochs_ended_before (may be NULL) gets
// stoker_consumer_epochs_ended as it was at the latest restart: the new broker's epochs start
// anew from 0, and those it ended are the count beyond it.
uint32_t stoker_consumer_broker_restarts(const stoker_consumer *c, uint64_t *broker_id,
                                         uint32_t *epochs_ended_before);

// Pops the oldest event not yet returned: 1 and the fields written (strings NUL-terminated,
// truncated to their buffers; any pointer may be NULL), or 0 if none. kind is a
// stoker_event_kind (stoker_event_kind_name gives "producer_lost", ...), at_s the broker's
// uptime when it happened. Events are collected while stoker_consumer_next waits; the last 1024
// are kept.
int stoker_consumer_poll_event(stoker_consumer *c, int *kind, uint32_t *producer, char *name,
                               size_t name_len, double *at_s, char *reason, size_t reason_len);

// Why the last failed call failed (borrowed, valid until the next call; "" after success).
const char *stoker_consumer_error(const stoker_consumer *c);
// Identities this consumer saw twice (0 unless the delivery guarantee broke).
uint64_t stoker_consumer_duplicates(const stoker_consumer *c);

// The broker's status as one JSON object (the keys of /status: see stoker_status_render_json in
// stoker/status.h) into buf. Returns STOKER_OK and
// the length in *len (excluding the NUL); STOKER_TOO_LARGE with the needed length in *len when
// buf is short (call again with a larger one); or an error.
int stoker_consumer_status_json(stoker_consumer *c, char *buf, size_t cap, size_t *len);
// The same without a consumer: asks the broker at opts's url directly, with its token (or
// token_file) and TLS settings (the other fields are not used; opts->api_version must be
// STOKER_API_VERSION), within timeout_ms. On an error, a reason is written into buf when it has
// room; a TLS failure returns STOKER_TLS, as stoker_consumer_open says it.
int stoker_status_json_opts(const stoker_consumer_options *opts, uint32_t timeout_ms, char *buf,
                            size_t cap, size_t *len);

// Changes the weights of this consumer's mixture (options.mix; not a rank's, whose group changes
// by its mix_schedule): mix names the same pools in the same order ("code=0.5,web=0.5"). They
// apply from the broker's next batch on, whose number (1 for the first batch) goes into
// *from_batch (may be NULL); batches already pulled ahead keep the weights they were made with.
// A schedule, if any, is done. STOKER_INVALID (stoker_consumer_error says why) otherwise.
int stoker_consumer_set_mix(stoker_consumer *c, const char *mix, uint64_t *from_batch);

// Makes a stoker_consumer_next that is waiting (or the next one) return STOKER_INTERRUPTED soon.
// Safe from any thread or a signal handler.
void stoker_consumer_interrupt(stoker_consumer *c);

// Sends pending acknowledgements (bounded), disconnects and frees; accepts NULL. Batches not
// acknowledged are redelivered to other consumers; batches not freed stay valid.
void stoker_consumer_close(stoker_consumer *c);

#endif
