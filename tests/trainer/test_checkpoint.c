// Checkpoints (trainer/checkpoint.c) on the CPU backend: a network restored from a checkpoint
// steps exactly like the one that wrote it (weights, Adam's moments and step count all restored);
// the position and the pending identities come back as written; another network's checkpoint and
// a plain weights file are refused, naming what differs.
#include "checkpoint.h"
#include "mlp.h"

#include "stoker/error.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static backend *be;
static char dir[64];

static void
setup(void)
{
    cr_assert_eq(backend_cpu_create(&be), STOKER_OK);
    snprintf(dir, sizeof(dir), "/tmp/stoker-ckpt-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void
teardown(void)
{
    backend_destroy(be);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(checkpoint, .init = setup, .fini = teardown, .timeout = 30);

static const char *
path(const char *name)
{
    static char buf[128];
    snprintf(buf, sizeof(buf), "%s/%s", dir, name);
    return buf;
}

static mlp *
make(uint32_t in, const uint32_t *hidden, uint32_t n_hidden, uint64_t seed)
{
    mlp_config cfg = {.input = in,
                      .hidden = hidden,
                      .hidden_count = n_hidden,
                      .output = 2,
                      .seed = seed,
                      .lr = 0.01f};
    mlp *net = NULL;
    char why[256];
    cr_assert_eq(mlp_create(be, &cfg, &net, why, sizeof(why)), STOKER_OK, "%s", why);
    return net;
}

static void
batch(float *x, float *y, int k)
{
    for (int i = 0; i < 8 * 6; i++)
        x[i] = (float)((i * 7 + k * 13) % 11) / 11.0f - 0.5f;
    for (int i = 0; i < 8 * 2; i++)
        y[i] = (float)((i * 5 + k) % 3) - 1.0f;
}

static checkpoint *
load(const char *p)
{
    checkpoint *ck = NULL;
    char err[512];
    cr_assert_eq(checkpoint_load(p, &ck, err, sizeof(err)), STOKER_OK, "%s", err);
    return ck;
}

Test(checkpoint, a_restored_network_steps_exactly_like_the_one_that_wrote_it)
{
    const uint32_t hidden[] = {12, 5};
    mlp *a = make(6, hidden, 2, 1), *b = make(6, hidden, 2, 99);
    float x[8 * 6], y[8 * 2];
    for (int k = 0; k < 5; k++) {
        batch(x, y, k);
        cr_assert_eq(mlp_step(a, x, y, 8, NULL), STOKER_OK);
    }
    checkpoint_position pos = {.rounds = 2, .batches = 5, .examples = 40, .seed = 1};
    char err[512];
    cr_assert_eq(checkpoint_save(path("a.ckpt"), a, &pos, NULL, err, sizeof(err)), STOKER_OK, "%s",
                 err);
    checkpoint *ck = load(path("a.ckpt"));
    cr_assert_eq(checkpoint_restore(ck, b, err, sizeof(err)), STOKER_OK, "%s", err);
    cr_assert_eq(mlp_steps(b), 5);
    checkpoint_destroy(ck);
    // Adam's moments and step count matter: the next updates agree bit for bit.
    for (int k = 5; k < 9; k++) {
        batch(x, y, k);
        cr_assert_eq(mlp_step(a, x, y, 8, NULL), STOKER_OK);
        cr_assert_eq(mlp_step(b, x, y, 8, NULL), STOKER_OK);
    }
    size_t n = mlp_param_count(a);
    float *pa = malloc(n * sizeof(float)), *pb = malloc(n * sizeof(float));
    cr_assert_eq(mlp_get_params(a, pa, n), STOKER_OK);
    cr_assert_eq(mlp_get_params(b, pb, n), STOKER_OK);
    cr_assert_eq(memcmp(pa, pb, n * sizeof(float)), 0, "the resumed network diverged");
    free(pa);
    free(pb);
    mlp_destroy(a);
    mlp_destroy(b);
}

Test(checkpoint, the_position_and_the_pending_identities_come_back_as_written)
{
    const uint32_t hidden[] = {4};
    mlp *net = make(6, hidden, 1, 1);
    checkpoint_runs pending = {0};
    cr_assert_eq(checkpoint_runs_add(&pending, 0xfeedbeefcafe0001ull, 10, 4), STOKER_OK);
    cr_assert_eq(checkpoint_runs_add(&pending, 0x2ull, 0, 3), STOKER_OK);
    cr_assert_eq(checkpoint_runs_add(&pending, 0xfeedbeefcafe0001ull, 14, 2), STOKER_OK); // merges
    cr_assert_eq(pending.n, 2);
    checkpoint_position pos = {
        .rounds = 7, .batches = 33, .examples = 140, .epochs = 2, .seed = 12345678901234ull};
    char err[512];
    cr_assert_eq(checkpoint_save(path("p.ckpt"), net, &pos, &pending, err, sizeof(err)), STOKER_OK,
                 "%s", err);
    checkpoint *ck = load(path("p.ckpt"));
    const checkpoint_position *got = checkpoint_position_of(ck);
    cr_assert(got->rounds == 7 && got->batches == 33 && got->examples == 140 && got->epochs == 2 &&
              got->seed == 12345678901234ull);
    const checkpoint_runs *back = checkpoint_pending(ck);
    cr_assert_eq(back->n, 2);
    cr_assert(back->v[0].session == 0xfeedbeefcafe0001ull && back->v[0].first_seq == 10 &&
              back->v[0].count == 6);
    cr_assert(back->v[1].session == 2 && back->v[1].first_seq == 0 && back->v[1].count == 3);
    checkpoint_destroy(ck);
    checkpoint_runs_fini(&pending);
    mlp_destroy(net);
}

// --resume-also: a gone rank's pending identities join this rank's; its position does not.
Test(checkpoint, an_adopted_checkpoint_adds_its_pending_identities_and_nothing_else)
{
    const uint32_t hidden[] = {4};
    mlp *net = make(6, hidden, 1, 1);
    checkpoint_runs mine = {0}, theirs = {0};
    cr_assert_eq(checkpoint_runs_add(&mine, 0x1ull, 0, 5), STOKER_OK);
    cr_assert_eq(checkpoint_runs_add(&theirs, 0x1ull, 5, 3), STOKER_OK); // follows mine: merges
    cr_assert_eq(checkpoint_runs_add(&theirs, 0x7ull, 40, 2), STOKER_OK);
    checkpoint_position at = {.rounds = 2, .batches = 10, .examples = 40, .seed = 9};
    checkpoint_position ahead = {.rounds = 3, .batches = 15, .examples = 60, .seed = 9};
    char err[512];
    cr_assert_eq(checkpoint_save(path("r0.ckpt"), net, &at, &mine, err, sizeof(err)), STOKER_OK);
    cr_assert_eq(checkpoint_save(path("r2.ckpt"), net, &ahead, &theirs, err, sizeof(err)),
                 STOKER_OK);
    checkpoint *ck = load(path("r0.ckpt")), *other = load(path("r2.ckpt"));
    cr_assert_eq(checkpoint_adopt(ck, other, err, sizeof(err)), STOKER_OK, "%s", err);
    const checkpoint_runs *p = checkpoint_pending(ck);
    cr_assert_eq(p->n, 2);
    cr_assert(p->v[0].session == 1 && p->v[0].first_seq == 0 && p->v[0].count == 8);
    cr_assert(p->v[1].session == 7 && p->v[1].first_seq == 40 && p->v[1].count == 2);
    cr_assert_eq(checkpoint_position_of(ck)->batches, 10, "the adopted file's position was taken");
    checkpoint_destroy(other);
    checkpoint_destroy(ck);
    checkpoint_runs_fini(&mine);
    checkpoint_runs_fini(&theirs);
    mlp_destroy(net);
}

Test(checkpoint, another_network_is_refused_naming_what_differs)
{
    const uint32_t hidden[] = {4}, other[] = {8};
    mlp *net = make(6, hidden, 1, 1);
    checkpoint_position pos = {0};
    char err[512];
    cr_assert_eq(checkpoint_save(path("n.ckpt"), net, &pos, NULL, err, sizeof(err)), STOKER_OK);
    checkpoint *ck = load(path("n.ckpt"));
    cr_assert_eq(checkpoint_check_options(ck, hidden, 1, 0, err, sizeof(err)), STOKER_OK, "%s",
                 err);
    cr_assert_eq(checkpoint_check_options(ck, other, 1, 0, err, sizeof(err)), STOKER_INVALID);
    cr_assert_not_null(strstr(err, "hidden layers 4, this run's --hidden is 8"), "%s", err);
    cr_assert_eq(checkpoint_check_options(ck, hidden, 1, 5, err, sizeof(err)), STOKER_INVALID);
    cr_assert_not_null(strstr(err, "--classes 5"), "%s", err);
    mlp *wider = make(7, hidden, 1, 1);
    cr_assert_eq(checkpoint_restore(ck, wider, err, sizeof(err)), STOKER_INVALID);
    cr_assert_not_null(strstr(err, "layers.0.weight is [4, 6] in the checkpoint, [4, 7]"), "%s",
                       err);
    mlp *deeper = make(6, (const uint32_t[]){4, 4}, 2, 1);
    cr_assert_eq(checkpoint_restore(ck, deeper, err, sizeof(err)), STOKER_INVALID);
    cr_assert_not_null(strstr(err, "layers.1.weight is [2, 4] in the checkpoint, [4, 4]"), "%s",
                       err);
    checkpoint_destroy(ck);
    mlp_destroy(wider);
    mlp_destroy(deeper);
    mlp_destroy(net);
}

Test(checkpoint, a_weights_file_is_not_a_checkpoint)
{
    const uint32_t hidden[] = {4};
    mlp *net = make(6, hidden, 1, 1);
    cr_assert_eq(mlp_save(net, path("w.safetensors")), STOKER_OK);
    checkpoint *ck = NULL;
    char err[512];
    cr_assert_eq(checkpoint_load(path("w.safetensors"), &ck, err, sizeof(err)), STOKER_INVALID);
    cr_assert_null(ck);
    cr_assert_not_null(strstr(err, "not a stoker-trainer checkpoint"), "%s", err);
    cr_assert_eq(checkpoint_load(path("none"), &ck, err, sizeof(err)), STOKER_IO);
    mlp_destroy(net);
}
