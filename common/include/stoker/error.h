// stoker's one error type. Every libstoker function that can fail returns a stoker_err;
// codes from nng, errno, protobuf-c and CUDA are translated where those libraries are called.
// The first codes double as the wire status codes of replies (see proto/stoker.proto).
#ifndef STOKER_ERROR_H
#define STOKER_ERROR_H

#include <stddef.h>

typedef enum stoker_err {
    STOKER_OK = 0,
    STOKER_RETRY = 1,           // broker busy (queue full): send the same request again
    STOKER_NO_PRODUCERS = 2,    // every producer lost and nothing queued
    STOKER_END_OF_DATA = 3,     // every producer finished cleanly and nothing queued
    STOKER_INVALID = 4,         // malformed request or argument
    STOKER_SCHEMA_MISMATCH = 5, // producer's schema differs from the broker's
    STOKER_UNAUTHENTICATED = 6, // wrong or missing token
    STOKER_UNKNOWN_PEER = 7,    // session not known to the broker (say hello again)
    STOKER_SEQ_GAP = 8,         // push starts beyond the next expected seq
    STOKER_NOT_FOUND = 9,       // unknown or already acknowledged lease
    STOKER_TOO_LARGE = 10,      // message or chunk over a limit
    STOKER_LIMIT = 11,          // too many producers / trainers
    STOKER_NOMEM = 12,
    STOKER_TIMEOUT = 13,     // a bounded wait expired
    STOKER_CLOSED = 14,      // the object was closed
    STOKER_CONNECTION = 15,  // transport failure (peer gone, connection reset)
    STOKER_STALLED = 16,     // no data within the stall timeout
    STOKER_INTERRUPTED = 17, // stopped by a signal or by the caller
    STOKER_IO = 18,          // file or pipe I/O failed
    STOKER_DEVICE = 19,      // GPU or backend failure
    STOKER_INTERNAL = 20,
    STOKER_GROUP_BROKEN = 21,     // a rank of this trainer's group died or left before the end
    STOKER_DATASET_MISMATCH = 22, // producer's dataset (size or listing) differs from the broker's
    STOKER_SHARD_REVOKED = 23,    // the items pushed were given to another producer meanwhile
    STOKER_TLS = 24,              // a TLS handshake with the broker failed (certificates, CA,
                                  // or one end speaking TLS and the other not): not retried
    STOKER_ERR_COUNT
} stoker_err;

// Static, never NULL: a short description of err ("queue full, retry", ...).
const char *stoker_strerror(int err);

// Stable lowercase word for err ("retry", "no_producers", ...), for logs and JSON.
const char *stoker_errname(int err);

// Writes a printf-style message into err (err_len bytes, truncated and always NUL-terminated;
// nothing is written when err is NULL or err_len is 0) and returns code, so a failing path reads
// `return stoker_errorf(err, err_len, STOKER_INVALID, "...", ...);`.
int stoker_errorf(char *err, size_t err_len, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

// Translates an nng error code (0 -> STOKER_OK). Defined in error_nng.c, the one part of this
// module that needs nng.
stoker_err stoker_err_from_nng(int nng_rv);

#endif
