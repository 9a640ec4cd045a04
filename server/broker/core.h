// The broker's core, the room every other room stands on: the state they share (producers,
// trainers, leases, parked requests, the event log, the counters) and the helpers each of them
// needs (lookups, the outbox and replies, events, freeing). It uses only broker.h, queue.c,
// libstoker and nng; it calls no other room. Private to server/broker*.c; every function runs
// under the caller's lock (see broker.h) and does no I/O: replies go to the outbox.
//
// The rules of the state machine, in DESIGN.md's words:
// - idempotent push: only examples beyond a producer's next_seq are appended; a push starting
//   beyond it is a gap and refused;
// - backpressure: a push that does not fit waits (parked) until room appears or park_ms passes,
//   then RETRY; queues never exceed the queue depth (sized by queues.c unless fixed by
//   --queue-depth), nor all queues max_bytes;
// - leases: a pull moves examples into a lease; an ack frees them, once; a dropped trainer's
//   leases go back to the head of their queues (redelivered); those a trainer that says goodbye
//   never handed to its caller go back too (returned_unused);
// - fairness: pulls take from producer queues round-robin;
// - loss: pipe closed or silence beyond the timeout; events reach trainers in pull replies;
// - supply end: no producer alive and nothing queued answers NO_PRODUCERS / END_OF_DATA.
// Invariant, checked in tests: produced == acknowledged + queued + in_flight.
#ifndef BROKER_CORE_H
#define BROKER_CORE_H

#include <stddef.h>
#include <stdint.h>

#include <nng/nng.h>

#include "broker.h"
#include "autoscale.h"
#include "queue.h"
#include "stoker/labels.h"

struct broker_arena; // arena.h
struct epochs;       // epoch.h
struct group;        // group.h
struct mix;          // mix.h

#define EVENT_LOG         4096 // events remembered
#define EVENTS_PER_REPLY  64
#define MAX_REDELIVER_LOG 8
// A trainer's hello reply lists the producers already there as events with this reason (index
// 0), at most SNAPSHOT_MAX of them (a reply's events are limited to 4096 on the wire).
#define SNAPSHOT_REASON "already there when this trainer joined"
#define SNAPSHOT_MAX    4000

typedef struct parked {
    struct parked *next;
    void *token;
    stoker_request *req;
    uint64_t deadline_ms;
    struct trainer *trainer; // pulls
    uint32_t acks_refused;   // pulls: of the acknowledgements they carried
} parked;

// A lease refers to the examples it delivered (no copy): ranges of their producers' blocks.
typedef struct lease_part {
    queue_range range;
    uint32_t producer;
    uint64_t session;
    uint32_t source; // of a mixture's batch: its source's index + 1 (0: no mixture)
    uint64_t tokens; // of a mixture whose books count tokens: the part's (mix.h)
} lease_part;

typedef struct lease {
    struct lease *next;
    uint64_t id;
    uint32_t count; // examples
    uint64_t bytes; // their bytes (stoker_chunk_bytes): what left the queues' byte count
    uint32_t n_parts, cap_parts;
    lease_part *parts;   // in example order
    uint64_t held_bytes; // counted in the broker's held_bytes (a committing trainer's lease)
    // The pull it was sent for (Pull.id, 0: unnamed) and its group step: a trainer that lost the
    // reply names that pull in a later one, which gets this lease again (lease.c).
    uint64_t pull_id, group_step;
    // The events sent with it (indices, 0 for none): a lost reply's events go again with the
    // lease (an epoch's end rides with a rank's step; the client drops those it saw).
    uint64_t events_first, events_last;
    uint64_t sent_ms; // when it was last sent (a lease held back from the end goes again)
    int full;         // a batch made by tokens that filled its budget (budget.c)
    struct mix *mix;  // the mixture whose books count it (mix.h), or NULL
} lease;

// Which seqs of a producer's session are trained (trained.c): all below `through`, and
// the ranges beyond it (sorted, disjoint, not touching).
typedef struct trained_range {
    uint64_t first, end;
} trained_range;
typedef struct trained_set {
    uint64_t through;
    trained_range *ranges;
    uint32_t n, cap;
} trained_set;

typedef struct producer {
    uint32_t id;
    char name[STOKER_NAME_MAX];
    uint64_t session;
    stoker_producer_status status;
    uint32_t pipe;
    uint64_t last_seen_ms;
    uint64_t next_seq;
    queue q;
    uint64_t accepted, delivered, acknowledged, redelivered, returned_unused, in_flight;
    uint64_t n_pushes, n_pushes_streamed; // of them on a connection other than its hello's
    uint64_t n_pushes_shm;                // of them by reference (its shared memory)
    uint64_t skipped;    // seqs its hellos jumped over: trained before, never pushed to us
    uint32_t last_chunk; // examples in its latest push: its queue is full when that cannot fit
    uint32_t max_chunk;  // examples in its largest push: sized queues hold two of them
    parked *pushes, *pushes_tail; // parked pushes, in seq order
    // 1 + next_seq when a push of it was answered "no room" (RETRY); 0: none. A push parked
    // behind that one is then not refused as a gap, only told to come again (push_try).
    uint64_t no_room_at;
    uint64_t items_held;  // dataset items assigned to it, not yet accepted
    trained_set trained;  // what its retention buffer may forget
    stoker_labels labels; // its class-to-label map, from its latest hello (may be empty)
    // Its heartbeat said it pushes nothing more (it lingers until its examples are trained):
    // a group does not wait for it (group.c supply_over).
    int done_making;
    char pool[STOKER_NAME_MAX]; // its autoscale pool ("default" unless its hello said one)
    autoscale_meter meter;      // busy_ms: its pushes held by full queues
    uint64_t make_us;           // its pushes' latest making time (0: it says none)
    // Lost by silence with its connection open: until then the supply waits for it (0: not).
    uint64_t silent_until_ms;
} producer;

typedef struct trainer {
    uint32_t id;
    char name[STOKER_NAME_MAX];
    uint64_t session;
    int connected;
    // It said goodbye: a pull of its that comes after (sent before, on another context) is
    // refused instead of taking it back (a lease it would never see); a hello undoes it.
    int left;
    uint32_t pipe;
    uint64_t last_seen_ms;
    uint64_t event_cursor; // index of the last event sent
    lease *leases;
    uint32_t parked_pulls;
    int in_arena; // its last batch went through shared memory
    int commit;   // acknowledges at its commits: its leases count in --max-bytes (commit.c)
    uint32_t batch_examples; // max_examples of its latest pull (sizes the queues)
    int pulled; // it pulled at least once (until then a hello gets the producers' snapshot)
    struct group *group; // NULL, or the data-parallel group it is rank `rank` of
    uint32_t rank;
    uint32_t world;      // ranks in its group (0: none): a step takes world batches at once
    uint64_t said_steps; // a rank's hello: the steps it had taken (a broker before us died)
    // Its delivery path for /status: pid from its hello, what it was sent each way
    // (lease.c arena_reply), batches the full arena sent as bytes.
    uint32_t pid;
    stoker_delivery delivery;
    uint64_t batches_shm, batches_socket, examples_shm, examples_socket, bytes_shm, bytes_socket;
    uint64_t arena_full;
    uint64_t data_wait_ms; // its caller's wait for batches, as its latest pull said
    autoscale_meter meter; // busy_ms: a pull of it parked for want of data
    // How its batches are made (its hello; all 0: by count), and for batches made by tokens the
    // tokens it was sent and the padding they take (budget.c), for /status.
    stoker_batching batching;
    uint64_t tokens, padding;
    struct mix *mix; // its mixture of sources (mix.h; its hello), or NULL: every producer alike
} trainer;

// The longest a trainer of a broker that died takes, from our start, to reach us and say what it
// trained: a client redials within a second, and one whose dialer nng 1.5.2 left stuck is given
// a new dialer after CONN_WATCH_MS + CONN_WATCH_EVERY_MS (3 s, common/transport/conn.h); the rest
// is a margin for a loaded host.
#define RETURNING_TRAINERS_MS 5000

// Epochs a job counts its trained items of at once, from the oldest not ended for it: the lead's
// open ones and those it lags in (two at most, remake.h).
#define ENDS_AHEAD 8

struct broker {
    broker_config cfg;
    char token[STOKER_TOKEN_MAX];
    uint64_t start_ms;
    uint64_t instance_id; // random, never 0: told in hello and Status replies (restarts show)
    // Until then the supply is not said to have ended, and nothing is handed out: a producer
    // came back from a broker that died (its hello continued a session at seq > 0), so others of
    // that broker may follow, and its trainers, who say what they trained.
    uint64_t returning_until_ms;
    // It ends sooner, once the peers the broker before us knew are back: the most producers
    // alive and trainers connected that a returning producer's hello said that broker had
    // (0: none said), and the producers that knew a broker before us which said hello here.
    uint32_t returning_producers, returning_trainers;
    uint32_t returned_producers;
    // Identities trainers said they trained when they said hello ((session, first_seq, end)
    // triples, at most REPORTED_MAX): a producer's session that comes back later (it pushes again
    // what a dead broker held) counts them trained from its hello on.
    uint64_t *reported;
    uint32_t n_reported;
    int has_schema;
    stoker_schema schema;
    size_t example_bytes;

    producer **producers;
    uint32_t n_producers;
    uint32_t rr;                // round-robin cursor into producers
    struct budget_ahead *ahead; // batches by tokens planned ahead (ahead.c), or NULL
    uint32_t next_producer_id;
    trainer **trainers;
    uint32_t n_trainers;
    uint32_t next_trainer_id;
    uint64_t next_lease_id;

    parked *pulls, *pulls_tail; // parked pulls, FIFO
    uint32_t n_parked;

    stoker_event events[EVENT_LOG];
    uint64_t n_events; // total ever; event i (1-based) is at events[(i - 1) % EVENT_LOG]

    stoker_counters c;
    uint64_t queued_bytes;
    uint64_t held_bytes;   // leases of committing trainers, inside max_bytes with queued_bytes
    uint32_t queue_depth;  // examples per producer queue now (queues.c)
    char queue_limit[512]; // said once: why a batch came short because of the queues

    // With a token, the pipes (connections) that said hello with it; nothing else is served.
    uint32_t *authed;
    uint32_t n_authed, cap_authed;

    struct broker_arena *arena; // NULL: no shared memory
    struct epochs *epochs;      // NULL: the broker serves streams (epoch.c)
    struct group *groups;       // data-parallel groups (group.c)
    // The autoscale signal (autoscale.c): the latest tick and sample, and the latest
    // time a trainer pulled (was sent examples or had a pull parked); 0: never.
    uint64_t autoscale_tick_ms, autoscale_sample_ms, last_pull_ms;
    uint64_t autoscale_samples; // samples taken
    autoscale_spread autoscale_spreads[AUTOSCALE_POOLS_MAX];

    // --- jobs sharing the producers (jobs.c, docs/sharing.md) ---
    // Every broker is one job's: its trainers, leases, groups, mixtures and queues. The lead
    // (the first job to say hello) also owns the producers; each further job is a follower
    // broker whose producers mirror the lead's (same ids), whose queues hold the same pushes
    // (shared blocks) and which the lead's dispatcher routes its trainers' requests to.
    char job[STOKER_NAME_MAX]; // "": the default job
    int job_named;             // a trainer said hello (job is set)
    uint32_t job_state;        // stoker_job_state
    uint64_t job_joined_ms;
    uint64_t job_absent_ms; // since when none of its consumers is connected (ABSENT)
    char job_end_reason[192];
    // A job that joined a dataset late (jobs.c): it takes the items of this epoch on (0: all).
    uint32_t job_from_epoch;
    // Its place among the lead's jobs (the lead 0, a follower 1..JOBS_MAX-1), which names it in
    // the targets of a shard made again for some jobs only (epoch.c), and its items made again
    // by index (remake.h): of the epoch it joined late to, or passed over while it lagged.
    uint32_t job_slot;
    struct remake *remakes[2]; // REMAKE_SETS
    uint64_t job_remade;       // examples made again for it (counted as they are queued)
    // Its own epoch ends (epoch_remake.c): the next to end, and the items of it and the epochs
    // after it that it trained so far (an epoch ends for it when it trained every item of it).
    uint32_t ends_next;
    uint64_t ends_count[ENDS_AHEAD];
    int job_remaking; // said (an event) that it lags and is served by remaking
    // Its rate (examples/s delivered, smoothed) and the delivered count and time it was last
    // taken from (jobs_tick).
    double job_rate;
    uint64_t job_rate_delivered, job_rate_ms;
    struct broker *lead;       // a follower's lead; NULL for the lead
    struct broker **followers; // the lead's further jobs (JOBS_MAX)
    uint32_t n_followers;
    uint64_t job_events_synced; // the lead's events copied to its followers so far
};

#define JOBS_MAX 32 // jobs one broker serves at once (the lead included)

// --- core.c: replies, events, lookups, freeing ---

// A copy a reply waits for, done after the broker's lock is released (broker_outbox_fill): the
// room that makes one (lease.c) puts this first in its own struct. run does the copy
// (none when copy is 0: the reply is not sent), lets go of what the copy held and frees fill.
typedef struct broker_fill {
    void (*run)(struct broker_fill *fill, int copy);
} broker_fill;

// Appends (token, msg) to out; takes msg (freed when out of memory: the client retries).
void outbox_add(broker_outbox *out, void *token, nng_msg *msg);
// Encodes rep and queues it for token; counts refusals.
void send_reply(broker *b, broker_outbox *out, void *token, const stoker_reply *rep);
// The same, with fill (may be NULL; taken) to do before the reply is sent.
void outbox_add_fill(broker_outbox *out, void *token, nng_msg *msg, broker_fill *fill);
void send_reply_fill(broker *b, broker_outbox *out, void *token, const stoker_reply *rep,
                     broker_fill *fill);
// A new parked request (token, req) that takes req; NULL when out of memory, after answering
// RETRY (the client asks again) and freeing req.
parked *parked_new(broker *b, broker_outbox *out, void *token, stoker_request *req);
// A reply with only a code and a formatted message (fmt may be NULL).
void send_code(broker *b, broker_outbox *out, void *token, int code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
// Appends an event of kind at now_ms to the event log (the oldest is overwritten), its index,
// kind and time set, the rest zero: the caller fills it in. Every event goes through here.
stoker_event *new_event(broker *b, stoker_event_kind kind, uint64_t now_ms);
// Appends an event about producer p to the event log (new_event).
void add_event(broker *b, stoker_event_kind kind, const producer *p, uint64_t now_ms,
               const char *reason);
// Lookups: NULL when not found; the broker keeps ownership.
producer *find_producer(const broker *b, uint64_t session);
producer *find_producer_id(const broker *b, uint32_t id);
trainer *find_trainer(const broker *b, uint64_t session);
// Free a parked request (and its request) / a lease (releasing its ranges).
void free_parked(parked *p);
void free_lease(lease *l);
uint32_t producers_alive(const broker *b);
// Trainers connected (in_arena: of them those whose last batch went through shared memory).
uint32_t trainers_connected(const broker *b, int in_arena);
// Tells a producer's reply (hello, push, heartbeat) the producers alive and trainers connected,
// which the producer carries to a broker after this one (its returning window).
void tell_peers(const broker *b, stoker_reply *rep);
// Whether p may still send: alive, or lost by silence within --silent-grace with its connection
// open (a frozen or paused producer that comes back resumes where it was).
int producer_may_send(const producer *p, uint64_t now_ms);
// Nonzero when p's oldest parked push waits for room in its queue (not when it arrived ahead of
// its predecessor, which is on its way: two pushes in flight).
int push_waits_for_room(const producer *p);
// Marks p alive again on pipe (an event when it was not), seen now.
void revive(broker *b, producer *p, uint32_t pipe, uint64_t now_ms, const char *how);
// Unlinks parked pull k (after prev, NULL for the head) from the parked pulls; does not free it.
void unlink_pull(broker *b, parked *prev, parked *k);
// The events of indices from..upto still in the log, at most max of them, into buf.
// The events t has not heard yet up to index upto (a rank: those it may hear, group_events_upto;
// any other trainer: b->n_events), at most EVENTS_PER_REPLY into buf; marks them heard.
uint32_t take_events(const broker *b, trainer *t, uint64_t upto, stoker_event *buf);
uint32_t copy_events(const broker *b, uint64_t from, uint64_t upto, stoker_event *buf,
                     uint32_t max);

#endif
