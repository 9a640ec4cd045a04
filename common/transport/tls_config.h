// Private to libstoker and the broker: building an nng TLS configuration from PEM files.
#ifndef STOKER_TLS_CONFIG_H
#define STOKER_TLS_CONFIG_H

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

#include "stoker/tls.h"

// Creates a TLS configuration for a listener (server) or a dialer (client, checking the server's
// name against server_name when a CA is given). *out is owned by the caller (nng_tls_config_free)
// on success; on failure err says which file or setting was refused.
int stoker_tls_config_create(const stoker_tls_options *tls, int server, const char *server_name,
                             nng_tls_config **out, char *err, size_t err_len);

#endif
