// The end-to-end training the authentication and TLS tests run through a secured broker: a real
// producer and CPU trainer started with the client flags under test. Processes and files come
// from the test library (tests/lib/proc.h, testdir.h); the suites' .init / .fini are the core
// helpers' h_setup / h_teardown.
#ifndef TESTS_HARDENING_TRAINING_H
#define TESTS_HARDENING_TRAINING_H

// Runs a synthetic producer called name (200 examples, no delay) and a CPU trainer (5 rounds of
// 20) against url, both with client_args (NULL-terminated client flags: the token file, the TLS
// files); asserts within 60 s that the trainer completed 100 examples with no duplicate and
// discrepancy 0 (its JSON summary goes to json).
void train_end_to_end(const char *url, const char *name, const char *const *client_args,
                      const char *json);

#endif
