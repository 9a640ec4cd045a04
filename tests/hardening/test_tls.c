// TLS: a throwaway CA and certificates made by the test with openssl; the broker listens on
// tls+tcp://127.0.0.1:0 requiring client certificates from its CA (and on ipc:// for the test's
// status requests). A client with a certificate from another CA, or with none, never connects
// and never gets data, while the broker keeps serving the right clients, which train end to end.
// Every TLS misconfiguration is named as one, within a second or two (not as "no broker
// answered" after the connect timeout), by the clients, and logged by the broker.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoker/client.h"

#include <criterion/criterion.h>

#include "helpers.h"
#include "training.h"
#include "stoker/clock.h"
#include "stoker/error.h"

TestSuite(tls, .init = h_setup, .fini = h_teardown, .timeout = 120);

// Makes DIR/NAME.key and DIR/NAME.crt signed by DIR/CA (CN cn, SAN IP 127.0.0.1 and localhost).
static void
make_cert(const char *ca, const char *name, const char *cn)
{
    int rv = proc_sh("cd '%s' && openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
                     "-nodes -keyout %s.key -out %s.csr -subj '/CN=%s' 2>>openssl.log && "
                     "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > %s.ext && "
                     "openssl x509 -req -in %s.csr -CA %s.crt -CAkey %s.key -CAcreateserial "
                     "-days 2 -extfile %s.ext -out %s.crt 2>>openssl.log",
                     testdir_path(), name, name, cn, name, name, ca, ca, name, name);
    cr_assert_eq(rv, 0, "openssl could not make %s (see %s/openssl.log)", name, testdir_path());
}

static void
make_ca(const char *name)
{
    int rv = proc_sh("cd '%s' && openssl req -x509 -newkey ec -pkeyopt "
                     "ec_paramgen_curve:prime256v1 -nodes -keyout %s.key -out %s.crt -days 2 "
                     "-subj '/CN=%s' 2>>openssl.log",
                     testdir_path(), name, name, name);
    cr_assert_eq(rv, 0, "openssl could not make the CA %s", name);
}

static char tls_url[256], ipc_url[256];

static void
start_broker(void)
{
    cr_assert_eq(proc_sh("command -v openssl >/dev/null"), 0,
                 "openssl is missing (scripts/deps.sh installs it)");
    make_ca("ca");
    make_ca("rogue-ca");
    make_cert("ca", "server", "localhost");
    make_cert("ca", "client", "stoker-client");
    make_cert("rogue-ca", "rogue", "stoker-client");
    char ipc[256];
    snprintf(ipc, sizeof(ipc), "ipc://%s/b.sock", testdir_path());
    char cert[512], key[512], ca[512];
    snprintf(cert, sizeof(cert), "%s", testdir_file("server.crt"));
    snprintf(key, sizeof(key), "%s", testdir_file("server.key"));
    snprintf(ca, sizeof(ca), "%s", testdir_file("ca.crt"));
    const char *argv[] = {getenv("STOKER_BROKER_BIN"),
                          "--listen",
                          "tls+tcp://127.0.0.1:0",
                          "--listen",
                          ipc,
                          "--tls-cert",
                          cert,
                          "--tls-key",
                          key,
                          "--tls-ca",
                          ca,
                          "--log-level",
                          "info",
                          NULL};
    cr_assert_not_null(argv[0]);
    proc_child *b = proc_spawn("broker", argv, &(proc_io){.capture = 1, .log = "broker.log"});
    char urls[2][256];
    proc_listening(b, 2, urls);
    snprintf(tls_url, sizeof(tls_url), "%s", urls[0]);
    snprintf(ipc_url, sizeof(ipc_url), "%s", urls[1]);
    cr_assert(strncmp(tls_url, "tls+tcp://127.0.0.1:", 20) == 0, "first URL: %s", tls_url);
}

// A trainer client in this process with the given certificate (NULL: none); its create result,
// and its message into err (when not NULL).
static int
try_trainer_err(const char *cert_name, char *why, size_t why_len)
{
    char cert[512] = "", key[512] = "", ca[512];
    if (cert_name != NULL) {
        snprintf(cert, sizeof(cert), "%s/%s.crt", testdir_path(), cert_name);
        snprintf(key, sizeof(key), "%s/%s.key", testdir_path(), cert_name);
    }
    snprintf(ca, sizeof(ca), "%s/ca.crt", testdir_path());
    stoker_trainer_options o;
    stoker_trainer_options_init(&o);
    o.client.url = tls_url;
    o.client.name = "tls-trainer";
    o.client.give_up_ms = 2500;
    o.client.request_timeout_ms = 1000;
    o.client.tls.cert = cert_name != NULL ? cert : NULL;
    o.client.tls.key = cert_name != NULL ? key : NULL;
    o.client.tls.ca = ca;
    o.batch_size = 4;
    o.stall_timeout_ms = 3000;
    stoker_trainer_client *tc = NULL;
    char err[512] = "";
    int rv = stoker_trainer_client_create(&o, &tc, err, sizeof(err));
    stoker_trainer_client_destroy(tc);
    if (why != NULL)
        snprintf(why, why_len, "%s", err);
    return rv;
}

Test(tls, other_ca_refused_right_client_trains)
{
    start_broker();
    // A producer with a certificate from another CA, started first and left trying throughout.
    char rogue_cert[512], rogue_key[512], ca[512];
    snprintf(rogue_cert, sizeof(rogue_cert), "%s", testdir_file("rogue.crt"));
    snprintf(rogue_key, sizeof(rogue_key), "%s", testdir_file("rogue.key"));
    snprintf(ca, sizeof(ca), "%s", testdir_file("ca.crt"));
    const char *rogue[] = {getenv("STOKER_PRODUCER_BIN"),
                           "--broker",
                           tls_url,
                           "--name",
                           "rogue",
                           "--tls-cert",
                           rogue_cert,
                           "--tls-key",
                           rogue_key,
                           "--tls-ca",
                           ca,
                           "--delay",
                           "0:0",
                           NULL};
    proc_spawn("rogue producer", rogue, &(proc_io){.log = "rogue.log"});

    // In-process trainers: another CA's certificate, and none at all, never get through, and
    // are told it is TLS (before, both timed out as STOKER_CONNECTION, "no broker answered").
    char why[512];
    cr_assert_eq(try_trainer_err("rogue", why, sizeof(why)), STOKER_TLS, "a rogue certificate: %s",
                 why);
    cr_assert(strstr(why, "refused the client certificate") != NULL, "%s", why);
    cr_assert_eq(try_trainer_err(NULL, why, sizeof(why)), STOKER_TLS,
                 "a client without certificate: %s", why);
    cr_assert(strstr(why, "requires a client certificate") != NULL, "%s", why);

    // The right producer and trainer train end to end over TLS meanwhile.
    char cert[512], key[512];
    snprintf(cert, sizeof(cert), "%s", testdir_file("client.crt"));
    snprintf(key, sizeof(key), "%s", testdir_file("client.key"));
    const char *json = testdir_file("summary.json");
    const char *const client_args[] = {"--tls-cert", cert, "--tls-key", key, "--tls-ca", ca, NULL};
    train_end_to_end(tls_url, "good", client_args, json);

    // The rogue producer never said hello: only 'good' is known to the broker.
    stoker_status *st = h_status(ipc_url);
    cr_assert_not_null(h_status_producer(st, "good"), "the good producer is not in status");
    cr_assert_null(h_status_producer(st, "rogue"), "the rogue producer got through");
    cr_assert_eq(st->n_producers, 1);
    stoker_status_destroy(st);
}

// Runs a client binary (STOKER_*_BIN env) against the broker with args; asserts its exit code
// within limit_ms of wall time and that its stderr holds each of needles. what names the file.
static void
client_fails(const char *bin_env, const char *what, const char *const *args, int code, int limit_ms,
             const char *const *needles)
{
    const char *argv[32];
    int n = 0;
    argv[n++] = getenv(bin_env);
    cr_assert_not_null(argv[0], "%s is not set", bin_env);
    for (int i = 0; args[i] != NULL && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    uint64_t t0 = stoker_now_ms();
    proc_child *c = proc_spawn(what, argv, &(proc_io){.files = 1});
    proc_assert_exit(c, code, 20000);
    uint64_t took = stoker_now_ms() - t0;
    size_t len;
    char *err = testdir_read(c->err_path, &len);
    cr_assert_not_null(err);
    cr_assert(took < (uint64_t)limit_ms, "%s took %llu ms (under %d expected):\n%s", what,
              (unsigned long long)took, limit_ms, err);
    for (int i = 0; needles[i] != NULL; i++)
        cr_assert(strstr(err, needles[i]) != NULL, "%s does not say '%s':\n%s", what, needles[i],
                  err);
    cr_assert(strstr(err, "no broker answered") == NULL, "%s says no broker answered:\n%s", what,
              err);
    free(err);
}

// A wrong --tls-ca, a missing or refused client certificate, tcp:// to the TLS listener and
// tls+tcp:// to a plaintext one: producer and trainer exit 1 within seconds, saying TLS and what
// is wrong (before: "no broker answered", exit 3 after --broker-wait / exit 4 "stalled"). The
// broker logs tls-handshake-failed, and keeps serving: a status over TLS answers afterwards.
Test(tls, misconfigurations_named_as_tls)
{
    start_broker();
    char ca[512], rogue_ca[512], cert[512], key[512], plain_url[300];
    snprintf(ca, sizeof(ca), "%s", testdir_file("ca.crt"));
    snprintf(rogue_ca, sizeof(rogue_ca), "%s", testdir_file("rogue-ca.crt"));
    snprintf(cert, sizeof(cert), "%s", testdir_file("client.crt"));
    snprintf(key, sizeof(key), "%s", testdir_file("client.key"));
    snprintf(plain_url, sizeof(plain_url), "tcp://%s", tls_url + strlen("tls+tcp://"));

    client_fails("STOKER_PRODUCER_BIN", "producer-wrong-ca",
                 PROC_ARGS("--broker", tls_url, "--tls-ca", rogue_ca, "--tls-cert", cert,
                           "--tls-key", key, "--delay", "0:0"),
                 1, 5000, PROC_ARGS("TLS handshake", "is not signed by the CA in", rogue_ca));
    client_fails("STOKER_TRAINER_BIN", "trainer-wrong-ca",
                 PROC_ARGS("--broker", tls_url, "--tls-ca", rogue_ca, "--tls-cert", cert,
                           "--tls-key", key, "--device", "cpu"),
                 1, 5000, PROC_ARGS("TLS handshake", "is not signed by the CA in"));
    client_fails("STOKER_TRAINER_BIN", "trainer-no-cert",
                 PROC_ARGS("--broker", tls_url, "--tls-ca", ca, "--device", "cpu"), 1, 5000,
                 PROC_ARGS("TLS handshake", "requires a client certificate"));
    client_fails("STOKER_PRODUCER_BIN", "producer-plain-to-tls",
                 PROC_ARGS("--broker", plain_url, "--delay", "0:0"), 1, 5000,
                 PROC_ARGS("speaks TLS", "tls+tcp://"));
    client_fails("STOKER_TRAINER_BIN", "trainer-plain-to-tls",
                 PROC_ARGS("--broker", plain_url, "--device", "cpu"), 1, 5000,
                 PROC_ARGS("speaks TLS", "tls+tcp://"));
    // Verification is on by default: tls+tcp:// without --tls-ca is a usage error.
    client_fails("STOKER_TRAINER_BIN", "trainer-no-ca", PROC_ARGS("--broker", tls_url), 2, 5000,
                 PROC_ARGS("--tls-ca", "--tls-insecure"));
    // tls+tcp:// to a plaintext listener (the broker's ipc:// one is no TCP: a broker of its own).
    const char *plain_argv[] = {getenv("STOKER_BROKER_BIN"), "--listen", "tcp://127.0.0.1:0", NULL};
    proc_child *plain =
        proc_spawn("plain broker", plain_argv, &(proc_io){.capture = 1, .log = "plain.log"});
    char purls[1][256];
    proc_listening(plain, 1, purls);
    char tls_to_plain[300];
    snprintf(tls_to_plain, sizeof(tls_to_plain), "tls+tcp://%s", purls[0] + strlen("tcp://"));
    client_fails("STOKER_PRODUCER_BIN", "producer-tls-to-plain",
                 PROC_ARGS("--broker", tls_to_plain, "--tls-ca", ca, "--delay", "0:0"), 1, 5000,
                 PROC_ARGS("TLS handshake", "speaks plain nng"));

    // The broker said so (within its 10 s report period: the first report is at once) ...
    uint64_t deadline = stoker_now_ms() + 3000;
    while (!testdir_contains(testdir_file("broker.log"), "tls-handshake-failed") &&
           stoker_now_ms() < deadline)
        stoker_sleep_ms(50, NULL);
    cr_assert(testdir_contains(testdir_file("broker.log"), "tls-handshake-failed"),
              "the broker logged no tls-handshake-failed");
    // ... and still serves TLS clients: a status over TLS with the right certificate.
    stoker_tls_options tls = {.ca = ca, .cert = cert, .key = key};
    stoker_status *st = NULL;
    char err[512] = "";
    cr_assert_eq(stoker_status_fetch_tls(tls_url, NULL, &tls, 5000, &st, err, sizeof(err)),
                 STOKER_OK, "status over TLS: %s", err);
    stoker_status_destroy(st);
    // A status with the wrong CA is named TLS at once too.
    tls.ca = rogue_ca;
    uint64_t t0 = stoker_now_ms();
    cr_assert_eq(stoker_status_fetch_tls(tls_url, NULL, &tls, 5000, &st, err, sizeof(err)),
                 STOKER_TLS, "status with a wrong CA: %s", err);
    cr_assert(stoker_now_ms() - t0 < 3000, "took %llu ms",
              (unsigned long long)(stoker_now_ms() - t0));
    cr_assert(strstr(err, "not signed by the CA in") != NULL, "%s", err);
    proc_broker_stop(plain);
}
