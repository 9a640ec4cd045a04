// The broker fuzz harness: runs one input (format in requests.h) through request decoding and a
// fresh broker state machine, checking the accounting identity after every step (abort if it
// breaks). Shared by the libFuzzer target (fuzz_broker.c) and the regression test
// (tests/hardening/test_regressions.c), which replays fuzz/regressions/*.
#ifndef FUZZ_HARNESS_H
#define FUZZ_HARNESS_H

#include <stddef.h>
#include <stdint.h>

// Returns the number of requests that decoded (for tests); never fails otherwise, aborts on a
// broken invariant.
int fuzz_broker_run(const uint8_t *data, size_t size);

#endif
