// Fixtures shared by the core tests: requests built the way the transport builds them (encoded,
// then decoded), the broker and producers as real child processes on an ipc:// path inside a
// fresh temporary directory, raw REQ sockets for hand-made requests, status snapshots and the
// accounting identity. Every wait here is bounded; a fixture that cannot do its job fails the
// test with a message (criterion's cr_assert), it never hangs.
#ifndef TESTS_CORE_HELPERS_H
#define TESTS_CORE_HELPERS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <nng/nng.h>

#include "proc.h"
#include "stoker/client.h"
#include "stoker/trainer_client.h"
#include "stoker/wire.h"
#include "testdir.h"

// --- requests and examples ----------------------------------------------------------------------

// input:float32[10],output:float32[1], the reference schema.
void h_schema(stoker_schema *out);
// Parses spec or fails the test.
void h_schema_parse(const char *spec, stoker_schema *out);

// Encodes req and decodes it again: a request exactly as the broker receives it (caller owns;
// the broker's functions take it over).
stoker_request *h_roundtrip(const stoker_request *req);
stoker_request *h_hello_producer(uint64_t session, const char *name, const stoker_schema *schema);
stoker_request *h_hello_trainer(uint64_t session, const char *name);
// A push of examples first_seq .. first_seq + count - 1 of schema; every field's first element
// of example seq holds h_tag(session, seq), so a test can tell examples apart after the trip.
stoker_request *h_push(uint64_t session, const stoker_schema *schema, uint64_t first_seq,
                       uint32_t count);
stoker_request *h_pull(uint64_t session, uint32_t max_examples, uint32_t wait_ms, uint32_t n_acks,
                       const uint64_t *acks);
stoker_request *h_ack(uint64_t session, uint32_t n_acks, const uint64_t *acks);
// GOODBYE, HEARTBEAT or STATUS.
stoker_request *h_simple(stoker_method method, uint64_t session);
// The tag stored in examples: (session & 0xff) * 1000 + seq, exact in a float32 for small seqs.
float h_tag(uint64_t session, uint64_t seq);
// The tag of example i of a float32 chunk's field 0.
float h_chunk_tag(const stoker_chunk *chunk, uint32_t i);

// --- the test's directory and children ---------------------------------------------------------

// Children, waits and signals are the test library's (tests/lib/proc.h: proc_wait, proc_signal,
// proc_stop, proc_broker_stop, ...), the temporary directory too (tests/lib/testdir.h).

// Call from a suite's .init / .fini: makes a fresh temporary directory and sends the test
// library's failures to criterion; kills (SIGKILL) and reaps every child still running, removes
// the directory and, under AddressSanitizer, fails the test if leaks are found.
void h_setup(void);
void h_teardown(void);

// Starts stoker-broker (STOKER_BROKER_BIN) listening on ipc://DIR/broker-N.sock with extra
// arguments (NULL-terminated list, may be NULL), waits (at most 10 s) for its "listening" line
// and writes the URL to url. Its stdout is captured, its stderr is the test's. Fails the test on
// any problem.
proc_child *h_broker_start(char *url, size_t url_len, const char *const *extra);
// Starts stoker-producer (STOKER_PRODUCER_BIN) --broker url --name name with extra arguments.
// Returns at once (the producer connects in the background).
proc_child *h_producer_start(const char *url, const char *name, const char *const *extra);

// --- status -------------------------------------------------------------------------------------

// The broker's status; fails the test if it cannot be fetched within 3 s.
stoker_status *h_status(const char *url);
// The producer called name in st, or NULL.
const stoker_producer_info *h_status_producer(const stoker_status *st, const char *name);
// Asserts produced == acknowledged + queued + in_flight in a fresh status snapshot.
void h_assert_identity(const char *url);
// Polls status (every 10 ms, at most timeout_ms) until ready(snapshot, arg) returns nonzero.
// Returns 1 when it did, 0 on timeout. The waits below are this with one condition each.
typedef int (*h_status_ready)(const stoker_status *st, const void *arg);
int h_wait_status(const char *url, h_status_ready ready, const void *arg, int timeout_ms);
// Until the producer called name exists with at least min_accepted examples accepted.
int h_wait_producer(const char *url, const char *name, uint64_t min_accepted, int timeout_ms);
// Until every counter says in_flight == 0 and at least min_redelivered were redelivered.
int h_wait_redelivered(const char *url, uint64_t min_redelivered, int timeout_ms);
// Until trainers acknowledged at least n examples.
int h_wait_acknowledged(const char *url, uint64_t n, int timeout_ms);
// Until at least n trainers are connected.
int h_wait_trainers(const char *url, uint32_t n, int timeout_ms);

// --- raw requests -------------------------------------------------------------------------------

// A REQ socket dialed to url (blocking dial, resend disabled, receive timeout timeout_ms).
nng_socket h_raw_open(const char *url, int timeout_ms);
// Sends len bytes as one request; on a reply writes the decoded reply to *rep and returns
// STOKER_OK, else returns the transport error (STOKER_TIMEOUT when nothing came back) or
// STOKER_INVALID when the reply could not be decoded.
int h_raw_send(nng_socket s, const void *buf, size_t len, stoker_reply **rep);
// Encodes req and calls h_raw_send; fails the test if the call gets no reply.
stoker_reply *h_raw_call(nng_socket s, const stoker_request *req);
// A push of tagged examples (as h_push) sent with h_raw_call.
stoker_reply *h_raw_push(nng_socket s, uint64_t session, const stoker_schema *schema,
                         uint64_t first_seq, uint32_t count);

// --- trainers -----------------------------------------------------------------------------------

// A trainer client for url; fails the test if it cannot connect.
stoker_trainer_client *h_trainer(const char *url, const char *name, uint32_t batch_size,
                                 uint32_t prefetch, uint32_t stall_ms);

// Identities of delivered examples, to assert exactly-once delivery across trainers.
typedef struct h_id {
    uint64_t session, seq;
} h_id;
typedef struct h_ids {
    h_id *v;
    size_t n, cap;
} h_ids;
void h_ids_add(h_ids *ids, uint64_t session, uint64_t seq);
void h_ids_add_batch(h_ids *ids, const stoker_batch *batch);
// Number of identities recorded more than once.
size_t h_ids_duplicates(const h_ids *ids);
// 1 if (session, seq) is recorded.
int h_ids_has(const h_ids *ids, uint64_t session, uint64_t seq);
void h_ids_fini(h_ids *ids);

// Pulls until the supply ends, acknowledging every batch; returns the code that ended it
// (STOKER_END_OF_DATA, STOKER_NO_PRODUCERS, or the error) and adds the examples to *ids
// (may be NULL) and their count to *examples (may be NULL).
int h_drain(stoker_trainer_client *tc, h_ids *ids, uint64_t *examples);

#endif
