// The CUDA backend against the CPU reference (llm.c's test_gpt2.cu against test_gpt2.c): every
// operation on the same inputs, then whole MLPs trained 20 steps on the same seed and batches.
// A plain program rather than criterion so that it builds on a GPU machine without criterion.
// Exits 77 (meson's SKIP) with the reason when CUDA is not built in or no GPU is usable.
#include "backend.h"
#include "mlp.h"

#include "config.h"
#include "stoker/error.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKIP 77

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("    %s:%d: ", __FILE__, __LINE__);                                             \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            return false;                                                                          \
        }                                                                                          \
    } while (0)

#define CHECK_OK(be, call)                                                                         \
    do {                                                                                           \
        int rv_ = (call);                                                                          \
        CHECK(rv_ == STOKER_OK, "%s: %s (%s)", #call, stoker_errname_local(rv_),                   \
              backend_error(be));                                                                  \
    } while (0)

// libstoker's stoker_errname lives in its library, which this test does not link.
static const char *
stoker_errname_local(int rv)
{
    switch (rv) {
    case STOKER_OK:
        return "ok";
    case STOKER_INVALID:
        return "invalid";
    case STOKER_NOMEM:
        return "nomem";
    case STOKER_DEVICE:
        return "device";
    default:
        return "error";
    }
}

static void
fill(float *v, size_t n, uint32_t seed)
{
    uint32_t s = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        v[i] = (float)((s >> 8) * (1.0 / 16777216.0) * 2.0 - 1.0);
    }
}

// Every element within tol relative to itself, with a floor at 1% of the largest magnitude
// (components that are zero up to rounding have no meaningful relative error).
static bool
close_enough(const float *gpu, const float *cpu, size_t n, double tol, const char *what)
{
    double scale = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(cpu[i]));
    for (size_t i = 0; i < n; i++) {
        double diff = fabs((double)gpu[i] - cpu[i]);
        if (!(diff <= tol * (fabs(cpu[i]) + 0.01 * scale) + 1e-30)) {
            printf("    %s[%zu]: gpu %.9g, cpu %.9g (relative %.3g)\n", what, i, (double)gpu[i],
                   (double)cpu[i], diff / fmax(fabs(cpu[i]), 1e-30));
            return false;
        }
    }
    return true;
}

// A host array mirrored on the GPU.
typedef struct mirror {
    float *host, *dev;
    size_t n;
} mirror;

static bool
mirror_make(backend *gpu, mirror *m, size_t n, uint32_t seed)
{
    m->n = n;
    m->host = calloc(n, sizeof(float));
    m->dev = NULL;
    CHECK(m->host != NULL, "out of memory");
    if (seed)
        fill(m->host, n, seed);
    CHECK_OK(gpu, gpu->ops->alloc(gpu, n, &m->dev));
    CHECK_OK(gpu, gpu->ops->upload(gpu, m->dev, m->host, n));
    return true;
}

static void
mirror_drop(backend *gpu, mirror *m)
{
    free(m->host);
    gpu->ops->free(gpu, m->dev);
    m->host = m->dev = NULL;
}

// Downloads m and compares it with its host side.
static bool
mirror_matches(backend *gpu, const mirror *m, double tol, const char *what)
{
    float *back = malloc(m->n * sizeof(float));
    CHECK(back != NULL, "out of memory");
    int rv = gpu->ops->download(gpu, back, m->dev, m->n);
    bool ok = rv == STOKER_OK && close_enough(back, m->host, m->n, tol, what);
    if (rv != STOKER_OK)
        printf("    download %s: %s\n", what, backend_error(gpu));
    free(back);
    return ok;
}

// Odd sizes so that a swapped leading dimension cannot pass by symmetry.
enum { B = 37, IN = 19, OUT = 23 };

static bool
matmuls_match_cpu(backend *cpu, backend *gpu)
{
    mirror inp, w, dout, out, dinp, dw;
    bool ok = mirror_make(gpu, &inp, B * IN, 1) && mirror_make(gpu, &w, OUT * IN, 2) &&
              mirror_make(gpu, &dout, B * OUT, 3) && mirror_make(gpu, &out, B * OUT, 0) &&
              mirror_make(gpu, &dinp, B * IN, 0) && mirror_make(gpu, &dw, OUT * IN, 0);
    if (ok) {
        CHECK_OK(cpu, cpu->ops->matmul_forward(cpu, out.host, inp.host, w.host, B, IN, OUT));
        CHECK_OK(gpu, gpu->ops->matmul_forward(gpu, out.dev, inp.dev, w.dev, B, IN, OUT));
        CHECK_OK(cpu,
                 cpu->ops->matmul_backward_input(cpu, dinp.host, dout.host, w.host, B, IN, OUT));
        CHECK_OK(gpu, gpu->ops->matmul_backward_input(gpu, dinp.dev, dout.dev, w.dev, B, IN, OUT));
        CHECK_OK(cpu,
                 cpu->ops->matmul_backward_weight(cpu, dw.host, dout.host, inp.host, B, IN, OUT));
        CHECK_OK(gpu, gpu->ops->matmul_backward_weight(gpu, dw.dev, dout.dev, inp.dev, B, IN, OUT));
        ok = mirror_matches(gpu, &out, 1e-5, "out") && mirror_matches(gpu, &dinp, 1e-5, "dinp") &&
             mirror_matches(gpu, &dw, 1e-5, "dweight");
    }
    mirror *all[] = {&inp, &w, &dout, &out, &dinp, &dw};
    for (size_t i = 0; i < 6; i++)
        mirror_drop(gpu, all[i]);
    return ok;
}

static bool
elementwise_ops_match_cpu(backend *cpu, backend *gpu)
{
    mirror act, act2, bias, dact, dbias;
    bool ok = mirror_make(gpu, &act, B * OUT, 4) && mirror_make(gpu, &act2, B * OUT, 4) &&
              mirror_make(gpu, &bias, OUT, 5) && mirror_make(gpu, &dact, B * OUT, 6) &&
              mirror_make(gpu, &dbias, OUT, 0);
    if (ok) {
        CHECK_OK(cpu, cpu->ops->bias_act_forward(cpu, act.host, bias.host, B, OUT, true));
        CHECK_OK(gpu, gpu->ops->bias_act_forward(gpu, act.dev, bias.dev, B, OUT, true));
        CHECK_OK(cpu, cpu->ops->bias_act_forward(cpu, act2.host, bias.host, B, OUT, false));
        CHECK_OK(gpu, gpu->ops->bias_act_forward(gpu, act2.dev, bias.dev, B, OUT, false));
        CHECK_OK(cpu, cpu->ops->relu_backward(cpu, dact.host, act.host, B * OUT));
        CHECK_OK(gpu, gpu->ops->relu_backward(gpu, dact.dev, act.dev, B * OUT));
        CHECK_OK(cpu, cpu->ops->bias_backward(cpu, dbias.host, dact.host, B, OUT));
        CHECK_OK(gpu, gpu->ops->bias_backward(gpu, dbias.dev, dact.dev, B, OUT));
        ok = mirror_matches(gpu, &act, 1e-6, "relu act") &&
             mirror_matches(gpu, &act2, 1e-6, "linear act") &&
             mirror_matches(gpu, &dact, 1e-6, "dact") && mirror_matches(gpu, &dbias, 1e-5, "dbias");
    }
    mirror *all[] = {&act, &act2, &bias, &dact, &dbias};
    for (size_t i = 0; i < 5; i++)
        mirror_drop(gpu, all[i]);
    return ok;
}

static bool
losses_match_cpu(backend *cpu, backend *gpu)
{
    enum { C = 7 };
    mirror pred, target, dpred, loss, dlogits, labels_f;
    int32_t labels[B];
    for (int b = 0; b < B; b++)
        labels[b] = (b * 5) % C;
    bool ok = mirror_make(gpu, &pred, B * C, 7) && mirror_make(gpu, &target, B * C, 8) &&
              mirror_make(gpu, &dpred, B * C, 0) && mirror_make(gpu, &loss, 1, 0) &&
              mirror_make(gpu, &dlogits, B * C, 0) && mirror_make(gpu, &labels_f, B, 0);
    if (ok) {
        // int32 labels travel in a float-sized device buffer: same bytes.
        memcpy(labels_f.host, labels, sizeof(labels));
        CHECK_OK(gpu, gpu->ops->upload(gpu, labels_f.dev, labels_f.host, B));
        CHECK_OK(cpu, cpu->ops->mse_loss(cpu, loss.host, dpred.host, pred.host, target.host, B, C));
        CHECK_OK(gpu, gpu->ops->mse_loss(gpu, loss.dev, dpred.dev, pred.dev, target.dev, B, C));
        ok = mirror_matches(gpu, &loss, 1e-6, "mse loss") &&
             mirror_matches(gpu, &dpred, 1e-6, "dpred");
        if (ok) {
            CHECK_OK(cpu, cpu->ops->crossentropy_loss(cpu, loss.host, dlogits.host, pred.host,
                                                      labels, B, C));
            CHECK_OK(gpu, gpu->ops->crossentropy_loss(gpu, loss.dev, dlogits.dev, pred.dev,
                                                      (const int32_t *)labels_f.dev, B, C));
            ok = mirror_matches(gpu, &loss, 1e-6, "crossentropy loss") &&
                 mirror_matches(gpu, &dlogits, 1e-5, "dlogits");
        }
    }
    mirror *all[] = {&pred, &target, &dpred, &loss, &dlogits, &labels_f};
    for (size_t i = 0; i < 6; i++)
        mirror_drop(gpu, all[i]);
    return ok;
}

static bool
adam_matches_cpu(backend *cpu, backend *gpu)
{
    enum { N = 1000 };
    mirror p, g, m, v;
    bool ok = mirror_make(gpu, &p, N, 9) && mirror_make(gpu, &g, N, 10) &&
              mirror_make(gpu, &m, N, 0) && mirror_make(gpu, &v, N, 0);
    for (uint64_t t = 1; ok && t <= 3; t++) {
        CHECK_OK(cpu, cpu->ops->adam_step(cpu, p.host, g.host, m.host, v.host, N, 1e-2f, t));
        CHECK_OK(gpu, gpu->ops->adam_step(gpu, p.dev, g.dev, m.dev, v.dev, N, 1e-2f, t));
    }
    ok = ok && mirror_matches(gpu, &p, 1e-6, "param") && mirror_matches(gpu, &m, 1e-6, "m") &&
         mirror_matches(gpu, &v, 1e-6, "v");
    mirror *all[] = {&p, &g, &m, &v};
    for (size_t i = 0; i < 4; i++)
        mirror_drop(gpu, all[i]);
    return ok;
}

// Trains the same network on both backends with the same batches; batch sizes cycle through
// sizes (so the GPU's staging slots grow while work is queued) and the loss is read only at the
// last step, letting the GPU run ahead as the trainer will.
static bool
train_both(backend *cpu, backend *gpu, const mlp_config *cfg, const uint32_t *sizes, size_t n_sizes,
           uint32_t steps)
{
    mlp *nets[2] = {NULL, NULL};
    backend *bes[2] = {cpu, gpu};
    char why[256];
    for (int k = 0; k < 2; k++) {
        int rv = mlp_create(bes[k], cfg, &nets[k], why, sizeof(why));
        CHECK(rv == STOKER_OK, "mlp_create on %s: %s", bes[k]->name, why);
    }
    uint32_t in = cfg->input, out = mlp_output_size(nets[0]), max_batch = 0;
    for (size_t i = 0; i < n_sizes; i++)
        max_batch = sizes[i] > max_batch ? sizes[i] : max_batch;
    float *x = malloc((size_t)max_batch * in * sizeof(float));
    float *y = malloc((size_t)max_batch * out * sizeof(float));
    int32_t *labels = malloc(max_batch * sizeof(int32_t));
    float losses[2] = {0, 0};
    bool ok = x && y && labels;
    for (uint32_t s = 0; ok && s < steps; s++) {
        uint32_t batch = sizes[s % n_sizes];
        fill(x, (size_t)batch * in, 100 + s);
        fill(y, (size_t)batch * out, 200 + s);
        for (uint32_t b = 0; b < batch; b++)
            labels[b] = (int32_t)((b * 7 + s) % (cfg->classes ? cfg->classes : 1));
        const void *target = cfg->classes ? (const void *)labels : (const void *)y;
        for (int k = 0; ok && k < 2; k++) {
            float *loss_out = s + 1 == steps ? &losses[k] : NULL;
            int rv = mlp_step(nets[k], x, target, batch, loss_out);
            if (rv != STOKER_OK) {
                printf("    step %u on %s: %s\n", s, bes[k]->name, mlp_error(nets[k]));
                ok = false;
            }
        }
    }
    if (ok) {
        size_t n = mlp_param_count(nets[0]);
        float *pc = malloc(n * sizeof(float)), *pg = malloc(n * sizeof(float));
        ok = pc && pg && mlp_get_params(nets[0], pc, n) == STOKER_OK &&
             mlp_get_params(nets[1], pg, n) == STOKER_OK;
        ok = ok && close_enough(pg, pc, n, 1e-4, "parameter");
        ok = ok && close_enough(&losses[1], &losses[0], 1, 1e-4, "final loss");
        if (ok)
            printf("    %zu parameters within 1e-4 after %u steps, final loss cpu %.6g gpu %.6g\n",
                   n, steps, (double)losses[0], (double)losses[1]);
        free(pc);
        free(pg);
    }
    free(x);
    free(y);
    free(labels);
    mlp_destroy(nets[0]);
    mlp_destroy(nets[1]);
    return ok;
}

static bool
mse_mlp_matches_cpu_after_20_steps(backend *cpu, backend *gpu)
{
    const uint32_t hidden[] = {64, 32};
    const mlp_config cfg = {
        .input = 10, .hidden = hidden, .hidden_count = 2, .output = 3, .seed = 1234, .lr = 1e-3f};
    const uint32_t sizes[] = {32};
    return train_both(cpu, gpu, &cfg, sizes, 1, 20);
}

static bool
crossentropy_mlp_matches_cpu_after_20_steps(backend *cpu, backend *gpu)
{
    const uint32_t hidden[] = {16};
    const mlp_config cfg = {
        .input = 10, .hidden = hidden, .hidden_count = 1, .classes = 5, .seed = 99, .lr = 1e-3f};
    const uint32_t sizes[] = {32};
    return train_both(cpu, gpu, &cfg, sizes, 1, 20);
}

static bool
changing_batch_sizes_match_cpu(backend *cpu, backend *gpu)
{
    const uint32_t hidden[] = {16};
    const mlp_config cfg = {
        .input = 10, .hidden = hidden, .hidden_count = 1, .output = 1, .seed = 5, .lr = 1e-3f};
    const uint32_t sizes[] = {4, 256, 1, 3000, 17};
    return train_both(cpu, gpu, &cfg, sizes, 5, 20);
}

static bool
forward_matches_cpu(backend *cpu, backend *gpu)
{
    const uint32_t hidden[] = {64, 32};
    const mlp_config cfg = {
        .input = 10, .hidden = hidden, .hidden_count = 2, .output = 4, .seed = 77, .lr = 1e-3f};
    mlp *c = NULL, *g = NULL;
    char why[256];
    CHECK(mlp_create(cpu, &cfg, &c, why, sizeof(why)) == STOKER_OK, "%s", why);
    CHECK(mlp_create(gpu, &cfg, &g, why, sizeof(why)) == STOKER_OK, "%s", why);
    float x[B * 10], oc[B * 4], og[B * 4];
    fill(x, B * 10, 55);
    bool ok = mlp_forward(c, x, B, oc) == STOKER_OK && mlp_forward(g, x, B, og) == STOKER_OK &&
              close_enough(og, oc, B * 4, 1e-5, "output");
    mlp_destroy(c);
    mlp_destroy(g);
    return ok;
}

typedef struct gpu_test {
    const char *name;
    bool (*run)(backend *cpu, backend *gpu);
} gpu_test;

static const gpu_test tests[] = {
    {"backend_cuda/matmuls_match_cpu", matmuls_match_cpu},
    {"backend_cuda/elementwise_ops_match_cpu", elementwise_ops_match_cpu},
    {"backend_cuda/losses_match_cpu", losses_match_cpu},
    {"backend_cuda/adam_matches_cpu", adam_matches_cpu},
    {"mlp_gpu/forward_matches_cpu", forward_matches_cpu},
    {"mlp_gpu/mse_mlp_matches_cpu_after_20_steps", mse_mlp_matches_cpu_after_20_steps},
    {"mlp_gpu/crossentropy_mlp_matches_cpu_after_20_steps",
     crossentropy_mlp_matches_cpu_after_20_steps},
    {"mlp_gpu/changing_batch_sizes_match_cpu", changing_batch_sizes_match_cpu},
};

int
main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
#if !STOKER_HAS_CUDA
    (void)tests;
    printf("SKIP: this build has no CUDA backend (configure with -Dcuda=enabled)\n");
    return SKIP;
#else
    backend *gpu = NULL, *cpu = NULL;
    char why[256];
    if (backend_create("gpu", &gpu, why, sizeof(why)) != STOKER_OK) {
        printf("SKIP: %s\n", why);
        return SKIP;
    }
    if (backend_cpu_create(&cpu) != STOKER_OK) {
        printf("FAIL: cannot create the CPU backend\n");
        backend_destroy(gpu);
        return 1;
    }
    printf("comparing %s against %s\n", gpu->device, cpu->device);
    int passed = 0, failed = 0;
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
        bool ok = tests[i].run(cpu, gpu);
        printf("[%s] %s\n", ok ? "PASS" : "FAIL", tests[i].name);
        ok ? passed++ : failed++;
    }
    backend_destroy(cpu);
    backend_destroy(gpu);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
#endif
}
