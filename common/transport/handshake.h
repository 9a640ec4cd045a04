// Private to libstoker: why connections to a broker keep failing during their handshake, told in
// words. nng 1.5.2's dialer retries such failures in the background and says nothing; its
// statistics only count them ("auth" for NNG_ECRYPTO / NNG_EPEERAUTH, "other" for a connection
// the peer shut). handshake_diagnose probes the address itself to tell a TLS problem (which CA,
// which certificate, which end speaks TLS) from anything else. It does not decide when to ask:
// conn.c's watcher does, from the dialer's counters.
#ifndef STOKER_HANDSHAKE_H
#define STOKER_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#include "stoker/tls.h"

// What the dialer of url counted since it started (nng's dialer statistics).
typedef struct handshake_counts {
    uint64_t connect; // connections made (handshake done)
    uint64_t auth;    // TLS failures seen by this end (NNG_ECRYPTO, NNG_EPEERAUTH)
    uint64_t shut;    // connections the peer closed during the handshake ("other", "disconnect",
                      // "proto")
    uint64_t refused; // connection attempts refused (nothing listens at the address)
} handshake_counts;

// The counters of dialer dialer_id (nng_dialer_id); 0 on success, -1 when statistics cannot be
// read.
int handshake_counts_get(int dialer_id, handshake_counts *out);

// Probes url (tcp:// or tls+tcp://; others give STOKER_OK) with short connections of its own,
// bounded by about a second, after the dialer counted failures. Returns STOKER_TLS with why
// naming the TLS cause ("TLS handshake with tls+tcp://H:P failed: the broker's certificate is
// not signed by the CA in ca.pem (--tls-ca)", "... speaks TLS: try tls+tcp://H:P"), or STOKER_OK
// when it finds no TLS cause (why untouched). tls (may be NULL) is what the dialer uses;
// server_name the name it checks ("" when none).
int handshake_diagnose(const char *url, const stoker_tls_options *tls, const char *server_name,
                       char *why, size_t why_len);

#endif
