// Private to the wire floor: the pieces of a Status reply (and the label map of a hello) to and
// from their protobuf messages, for request.c and reply.c. The lists below name the fields each
// Status struct shares with its message, by the same name and meaning: the encoder and the
// decoder both walk them (COPY_FIELD: d->f = s->f), so a field is named once; names, states and
// kinds are converted by hand beside them. The broker's counters are STOKER_COUNTERS
// (stoker/protocol.h), the one list every rendering of them is made from.
#ifndef STOKER_WIRE_STATUS_PB_H
#define STOKER_WIRE_STATUS_PB_H

#include <stddef.h>
#include <stdint.h>

#include "stoker.pb-c.h"
#include "stoker/labels.h"
#include "stoker/wire.h"

// clang-format off
#define RUN_FIELDS(X) X(producer) X(session) X(first_seq) X(count) X(source)
#define EVENT_FIELDS(X) X(index) X(producer) X(at_s) X(epoch) X(scaled_from) X(scaled_to)
#define PRODUCER_FIELDS(X)                                                                         \
    X(id) X(session) X(queued) X(accepted) X(delivered) X(acknowledged) X(redelivered)             \
    X(returned_unused) X(next_seq) X(silent_ms) X(pushes) X(pushes_streamed)                       \
    X(pushes_shm) X(skipped)
#define GROUP_FIELDS(X) X(world) X(batch) X(joined) X(steps) X(leftover)
#define CONSUMER_FIELDS(X)                                                                         \
    X(id) X(pid) X(batches_shm) X(batches_socket) X(examples_shm) X(examples_socket)               \
    X(bytes_shm) X(bytes_socket) X(arena_full) X(data_wait_ms) X(tokens) X(padding)
#define JOB_FIELDS(X)                                                                              \
    X(trainers) X(made) X(delivered) X(acknowledged) X(queued) X(in_flight) X(lag) X(joined_s)    \
    X(data_wait_ms) X(rate) X(remade)
// clang-format on
#define COPY_FIELD(f) d->f = s->f;
// A row of STOKER_COUNTERS, whatever its kind: its field copied.
#define COPY_COUNTER(f, ...) d->f = s->f;

// n messages of desc's type, initialised, behind the array of pointers to them that a repeated
// field holds: one allocation (free the pointers). NULL when n is 0 or out of memory.
void *wire_pb_repeated(const ProtobufCMessageDescriptor *desc, size_t n);

// A group's state ("open", "ended", "broken") as its code on the wire (unknown: 0), and back
// (an unknown code: "unknown"; the name is static).
uint32_t wire_group_state_code(const char *state);
const char *wire_group_state_name(uint32_t code);

// The listed names of l as pointers, for a repeated string field: malloc'd (the caller frees),
// NULL when none are listed or out of memory (tell them apart by l->n_listed).
char **wire_label_name_ptrs(const stoker_labels *l);
// A peer's map (classes, then names and file counts of the first classes) into *out, within
// the bounds of stoker/labels.h (extra names are dropped, not refused). STOKER_INVALID naming
// what, or STOKER_NOMEM.
int wire_labels_from_pb(stoker_labels *out, uint32_t classes, size_t n_names, char **names,
                        size_t n_files, const uint64_t *files, const char *what, char *err,
                        size_t err_len);

// The reply's label maps as r's LabelMap messages (free with wire_label_maps_pb_free, also
// after a failure). STOKER_OK or STOKER_NOMEM.
int wire_label_maps_to_pb(const stoker_reply *rep, Stoker__Reply *r);
// Frees what wire_label_maps_to_pb set in r.
void wire_label_maps_pb_free(Stoker__Reply *r);
// The peer's n label maps into rep (freed with the reply, also after a failure).
int wire_label_maps_from_pb(Stoker__LabelMap *const *pb, size_t n, stoker_reply *rep, char *err,
                            size_t err_len);

// The reply's consumers as r's ConsumerState messages (free r->consumers). STOKER_NOMEM.
// Frees what wire_consumers_to_pb made of r (its consumers and their mixtures).
void wire_consumers_pb_free(Stoker__Reply *r);
int wire_consumers_to_pb(const stoker_reply *rep, Stoker__Reply *r);
int wire_consumers_from_pb(const Stoker__Reply *r, stoker_reply *rep, char *err, size_t err_len);

// The reply's jobs as r's JobState messages (free with wire_jobs_pb_free, also after a
// failure). STOKER_OK or STOKER_NOMEM.
int wire_jobs_to_pb(const stoker_reply *rep, Stoker__Reply *r);
void wire_jobs_pb_free(Stoker__Reply *r);
// The peer's jobs into rep (freed with the reply, also after a failure): at most
// STOKER_JOBS_MAX, else STOKER_INVALID saying how many.
int wire_jobs_from_pb(const Stoker__Reply *r, stoker_reply *rep, char *err, size_t err_len);

// The reply's autoscale signal into r (free r->pools). STOKER_NOMEM.
int wire_pools_to_pb(const stoker_reply *rep, Stoker__Reply *r);
int wire_pools_from_pb(const Stoker__Reply *r, stoker_reply *rep, char *err, size_t err_len);

#endif
