// libFuzzer entry point of the broker fuzz target (built by scripts/fuzz.sh).
#include <stddef.h>
#include <stdint.h>

#include "harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_broker_run(data, size);
    return 0;
}
