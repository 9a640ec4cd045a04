// A producer with your own generator, to copy: noisy points on a circle, labelled by quadrant.
// Write a stoker_fill_fn, describe its schema, hand both to stoker_producer_run, which connects,
// pushes, retries and says goodbye. Draw randomness from `seed` only, so the output does not
// depend on timing or on how examples are split into chunks.
//   cc custom_generator.c -lstoker ...   then   ./a.out tcp://gpu-box:7070
#include <math.h>
#include <stdio.h>

#include "stoker/error.h"
#include "stoker/generator.h"
#include "stoker/producer.h"
#include "stoker/rng.h"

#define PI 3.14159265358979323846

typedef struct circle {
    float noise; // standard deviation added to each coordinate
} circle;

// fields[0]: point float32[2]; fields[1]: quadrant int32[1]. Return STOKER_END_OF_DATA to end.
static int
circle_fill(void *user, uint64_t seq, uint64_t seed, void *const fields[])
{
    const circle *c = user;
    stoker_rng rng;
    stoker_rng_seed(&rng, seed);
    double angle = stoker_rng_range(&rng, 0, 2 * PI);
    float *point = fields[0];
    int32_t *quadrant = fields[1];
    point[0] = (float)(cos(angle) + c->noise * stoker_rng_normal(&rng));
    point[1] = (float)(sin(angle) + c->noise * stoker_rng_normal(&rng));
    *quadrant = (int32_t)(angle / (PI / 2));
    (void)seq;
    return STOKER_OK;
}

int
main(int argc, char **argv)
{
    circle state = {.noise = 0.05f};
    stoker_generator gen = {.kind = "circle", .fill = circle_fill, .user = &state};
    char err[256];
    if (argc != 2 || stoker_schema_parse("point:float32[2],quadrant:int32[1]", &gen.schema, err,
                                         sizeof err) != STOKER_OK) {
        fprintf(stderr, "usage: %s BROKER_URL\n", argv[0]);
        return 2;
    }
    stoker_producer_config cfg;
    stoker_producer_config_init(&cfg);
    cfg.client.url = argv[1];
    cfg.client.name = "circle";
    cfg.chunk = 32;         // examples per push: several, since each is cheap
    cfg.handle_signals = 1; // Ctrl-C pushes what was made and says goodbye
    int rv = stoker_producer_run(&cfg, &gen, NULL);
    if (rv != STOKER_OK)
        fprintf(stderr, "circle: %s\n", stoker_strerror(rv));
    return rv == STOKER_OK ? 0 : rv == STOKER_INTERRUPTED ? 130 : 1;
}
