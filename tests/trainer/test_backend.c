// The CPU backend's operations against plain double-precision references written here: the
// matmuls, bias/ReLU, the two losses' gradients against finite differences of a double loss,
// and Adam against hand-computed steps. Also backend_create's choices. The CUDA backend is
// compared with this one in test_gpu.c.
#include "backend.h"

#include "config.h"
#include "stoker/error.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static backend *be;

static void
setup(void)
{
    cr_assert_eq(backend_cpu_create(&be), STOKER_OK);
}

static void
teardown(void)
{
    backend_destroy(be);
    be = NULL;
}

// Deterministic values in [-1, 1).
static void
fill(float *v, size_t n, uint32_t seed)
{
    uint32_t s = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        v[i] = (float)((s >> 8) * (1.0 / 16777216.0) * 2.0 - 1.0);
    }
}

static void
assert_close(const float *got, const double *want, size_t n, double tol, const char *what)
{
    for (size_t i = 0; i < n; i++)
        cr_assert(fabs(got[i] - want[i]) <= tol * (1.0 + fabs(want[i])),
                  "%s[%zu]: got %.9g, want %.9g", what, i, (double)got[i], want[i]);
}

enum { B = 5, IN = 7, OUT = 3 };

Test(backend_cpu, matmul_forward_is_input_times_weight_transposed, .init = setup, .fini = teardown)
{
    float inp[B * IN], w[OUT * IN], out[B * OUT];
    double want[B * OUT];
    fill(inp, B * IN, 1);
    fill(w, OUT * IN, 2);
    cr_assert_eq(be->ops->matmul_forward(be, out, inp, w, B, IN, OUT), STOKER_OK);
    for (int b = 0; b < B; b++)
        for (int o = 0; o < OUT; o++) {
            double acc = 0;
            for (int i = 0; i < IN; i++)
                acc += (double)inp[b * IN + i] * w[o * IN + i];
            want[b * OUT + o] = acc;
        }
    assert_close(out, want, B * OUT, 1e-5, "out");
}

Test(backend_cpu, matmul_backward_products_match_their_definitions, .init = setup, .fini = teardown)
{
    float inp[B * IN], w[OUT * IN], dout[B * OUT], dinp[B * IN], dw[OUT * IN];
    double want_dinp[B * IN], want_dw[OUT * IN];
    fill(inp, B * IN, 3);
    fill(w, OUT * IN, 4);
    fill(dout, B * OUT, 5);
    cr_assert_eq(be->ops->matmul_backward_input(be, dinp, dout, w, B, IN, OUT), STOKER_OK);
    cr_assert_eq(be->ops->matmul_backward_weight(be, dw, dout, inp, B, IN, OUT), STOKER_OK);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < IN; i++) {
            double acc = 0;
            for (int o = 0; o < OUT; o++)
                acc += (double)dout[b * OUT + o] * w[o * IN + i];
            want_dinp[b * IN + i] = acc;
        }
    for (int o = 0; o < OUT; o++)
        for (int i = 0; i < IN; i++) {
            double acc = 0;
            for (int b = 0; b < B; b++)
                acc += (double)dout[b * OUT + o] * inp[b * IN + i];
            want_dw[o * IN + i] = acc;
        }
    assert_close(dinp, want_dinp, B * IN, 1e-5, "dinp");
    assert_close(dw, want_dw, OUT * IN, 1e-5, "dweight");
}

Test(backend_cpu, bias_act_forward_adds_bias_then_clamps_negatives, .init = setup, .fini = teardown)
{
    float act[2 * 3] = {1, -2, 0.5f, -1, 3, -0.25f};
    float act2[2 * 3];
    memcpy(act2, act, sizeof(act));
    const float bias[3] = {0.5f, 1, -1};
    cr_assert_eq(be->ops->bias_act_forward(be, act, bias, 2, 3, true), STOKER_OK);
    cr_assert_eq(be->ops->bias_act_forward(be, act2, bias, 2, 3, false), STOKER_OK);
    const float relu[6] = {1.5f, 0, 0, 0, 4, 0};
    const float linear[6] = {1.5f, -1, -0.5f, -0.5f, 4, -1.25f};
    for (int i = 0; i < 6; i++) {
        cr_assert_float_eq(act[i], relu[i], 1e-7, "relu[%d]", i);
        cr_assert_float_eq(act2[i], linear[i], 1e-7, "linear[%d]", i);
    }
}

Test(backend_cpu, relu_backward_zeroes_gradient_where_output_was_clamped, .init = setup,
     .fini = teardown)
{
    const float act[4] = {0, 2, 0, 0.1f};
    float dact[4] = {1, 2, 3, 4};
    cr_assert_eq(be->ops->relu_backward(be, dact, act, 4), STOKER_OK);
    const float want[4] = {0, 2, 0, 4};
    for (int i = 0; i < 4; i++)
        cr_assert_float_eq(dact[i], want[i], 0, "dact[%d]", i);
}

Test(backend_cpu, bias_backward_sums_each_column, .init = setup, .fini = teardown)
{
    const float dout[3 * 2] = {1, 10, 2, 20, 3, 30};
    float dbias[2];
    cr_assert_eq(be->ops->bias_backward(be, dbias, dout, 3, 2), STOKER_OK);
    cr_assert_float_eq(dbias[0], 6, 1e-6);
    cr_assert_float_eq(dbias[1], 60, 1e-6);
}

// Double references of the two losses.
static double
mse_ref(const double *pred, const float *target, size_t n)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (pred[i] - target[i]) * (pred[i] - target[i]);
    return sum / (double)n;
}

static double
crossentropy_ref(const double *logits, const int32_t *labels, uint32_t batch, uint32_t classes)
{
    double sum = 0;
    for (uint32_t b = 0; b < batch; b++) {
        const double *row = logits + (size_t)b * classes;
        double max = row[0], denom = 0;
        for (uint32_t c = 1; c < classes; c++)
            max = fmax(max, row[c]);
        for (uint32_t c = 0; c < classes; c++)
            denom += exp(row[c] - max);
        sum += log(denom) + max - row[labels[b]];
    }
    return sum / batch;
}

// Largest |analytic - numeric| relative to the largest numeric component; a per-element relative
// error would be dominated by components that are zero up to rounding.
static double
gradient_error(const float *analytic, const double *numeric, size_t n)
{
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs(analytic[i] - numeric[i]));
        scale = fmax(scale, fabs(numeric[i]));
    }
    return worst / fmax(scale, 1e-12);
}

Test(backend_cpu, mse_gradient_matches_finite_differences, .init = setup, .fini = teardown)
{
    enum { N = B * OUT };
    float pred[N], target[N], dpred[N], loss;
    double p[N], numeric[N];
    fill(pred, N, 6);
    fill(target, N, 7);
    cr_assert_eq(be->ops->mse_loss(be, &loss, dpred, pred, target, B, OUT), STOKER_OK);
    for (int i = 0; i < N; i++)
        p[i] = pred[i];
    cr_assert_float_eq(loss, mse_ref(p, target, N), 1e-6);
    const double h = 1e-6;
    for (int i = 0; i < N; i++) {
        p[i] = pred[i] + h;
        double up = mse_ref(p, target, N);
        p[i] = pred[i] - h;
        double down = mse_ref(p, target, N);
        p[i] = pred[i];
        numeric[i] = (up - down) / (2 * h);
    }
    double err = gradient_error(dpred, numeric, N);
    cr_assert_lt(err, 1e-3, "relative error %g", err);
}

Test(backend_cpu, crossentropy_gradient_matches_finite_differences, .init = setup, .fini = teardown)
{
    enum { C = 4, N = B * C };
    float logits[N], dlogits[N], loss;
    const int32_t labels[B] = {0, 3, 1, 1, 2};
    double l[N], numeric[N];
    fill(logits, N, 8);
    for (int i = 0; i < N; i++)
        logits[i] *= 3; // spread the softmax
    cr_assert_eq(be->ops->crossentropy_loss(be, &loss, dlogits, logits, labels, B, C), STOKER_OK);
    for (int i = 0; i < N; i++)
        l[i] = logits[i];
    cr_assert_float_eq(loss, crossentropy_ref(l, labels, B, C), 1e-5);
    const double h = 1e-6;
    for (int i = 0; i < N; i++) {
        l[i] = logits[i] + h;
        double up = crossentropy_ref(l, labels, B, C);
        l[i] = logits[i] - h;
        double down = crossentropy_ref(l, labels, B, C);
        l[i] = logits[i];
        numeric[i] = (up - down) / (2 * h);
    }
    double err = gradient_error(dlogits, numeric, N);
    cr_assert_lt(err, 1e-3, "relative error %g", err);
}

Test(backend_cpu, crossentropy_survives_huge_logits, .init = setup, .fini = teardown)
{
    const float logits[2 * 2] = {1000, -1000, -1000, 1000};
    const int32_t labels[2] = {0, 0};
    float dlogits[4], loss;
    cr_assert_eq(be->ops->crossentropy_loss(be, &loss, dlogits, logits, labels, 2, 2), STOKER_OK);
    cr_assert(isfinite(loss));
    cr_assert_float_eq(loss, 1000.0f, 1e-3); // row 0: ~0, row 1: 2000, mean 1000
}

Test(backend_cpu, crossentropy_refuses_a_label_out_of_range, .init = setup, .fini = teardown)
{
    const float logits[2 * 3] = {0};
    const int32_t labels[2] = {1, 3};
    float dlogits[6], loss;
    cr_assert_eq(be->ops->crossentropy_loss(be, &loss, dlogits, logits, labels, 2, 3),
                 STOKER_INVALID);
    cr_assert(strstr(backend_error(be), "label 3") != NULL, "%s", backend_error(be));
}

// p = 1, lr 0.1, g1 = 0.5, g2 = 0.25, worked by hand:
// t=1: m = 0.05, v = 0.00025, m^ = 0.5, v^ = 0.25, p = 1 - 0.1 * 0.5 / (0.5 + 1e-8)
//      = 0.90000000200
// t=2: m = 0.9*0.05 + 0.1*0.25 = 0.07, v = 0.999*0.00025 + 0.001*0.0625 = 0.00031225,
//      m^ = 0.07/0.19 = 0.368421053, v^ = 0.00031225/0.001999 = 0.156203102,
//      p = 0.9 - 0.1 * 0.368421053 / (0.395225381 + 1e-8) = 0.806782040
Test(backend_cpu, adam_matches_hand_computed_steps, .init = setup, .fini = teardown)
{
    float p[2] = {1.0f, -2.0f}, m[2] = {0}, v[2] = {0};
    float g1[2] = {0.5f, -3.0f}, g2[2] = {0.25f, 0.0f};
    cr_assert_eq(be->ops->adam_step(be, p, g1, m, v, 2, 0.1f, 1), STOKER_OK);
    cr_assert_float_eq(p[0], 0.9f, 1e-6, "step 1: %.9g", (double)p[0]);
    cr_assert_float_eq(p[1], -1.9f, 1e-6, "step 1: the first step is lr * sign(g)");
    cr_assert_float_eq(m[0], 0.05f, 1e-7); // (1 - 0.9f) is not 0.1 in float
    cr_assert_float_eq(v[0], 0.00025f, 2e-8);
    cr_assert_eq(be->ops->adam_step(be, p, g2, m, v, 2, 0.1f, 2), STOKER_OK);
    cr_assert_float_eq(p[0], 0.806782040f, 1e-6, "step 2: %.9g", (double)p[0]);
    // Second parameter: g2 = 0 but momentum keeps moving it: m = -0.27, v = 0.008991,
    // m^ = -1.42105263, v^ = 4.49774887, p = -1.9 + 0.1 * 1.42105263 / 2.12078968 = -1.83299418
    cr_assert_float_eq(p[1], -1.83299418f, 1e-6, "step 2: %.9g", (double)p[1]);
}

Test(backend_cpu, alloc_gives_zeroed_buffers_and_copies_round_trip, .init = setup, .fini = teardown)
{
    float *dev = NULL;
    cr_assert_eq(be->ops->alloc(be, 8, &dev), STOKER_OK);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(dev[i], 0.0f);
    const float src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    float back[8];
    cr_assert_eq(be->ops->upload(be, dev, src, 8), STOKER_OK);
    cr_assert_eq(be->ops->download(be, back, dev, 8), STOKER_OK);
    cr_assert_arr_eq(back, src, sizeof(src));
    be->ops->free(be, dev);
}

Test(backend_create, cpu_is_always_available)
{
    backend *b = NULL;
    char why[256];
    cr_assert_eq(backend_create("cpu", &b, why, sizeof(why)), STOKER_OK);
    cr_assert_str_eq(b->name, "cpu");
    cr_assert_str_empty(why);
    backend_destroy(b);
}

Test(backend_create, unknown_device_is_invalid_and_named)
{
    backend *b = NULL;
    char why[256];
    cr_assert_eq(backend_create("tpu", &b, why, sizeof(why)), STOKER_INVALID);
    cr_assert(strstr(why, "'tpu'") != NULL, "%s", why);
    cr_assert_null(b);
}

// Passes on any machine: either a GPU is there and is used, or "gpu" fails with a reason.
Test(backend_create, forced_gpu_without_a_device_fails_with_a_reason)
{
    backend *b = NULL;
    char why[256];
    int rv = backend_create("gpu", &b, why, sizeof(why));
    if (rv == STOKER_OK) {
        cr_assert_str_eq(b->name, "gpu");
        backend_destroy(b);
        return;
    }
    cr_assert_eq(rv, STOKER_DEVICE);
    cr_assert_null(b);
    cr_assert_str_not_empty(why);
}

Test(backend_create, auto_falls_back_to_cpu_and_says_why)
{
    backend *b = NULL;
    char why[256];
    cr_assert_eq(backend_create("auto", &b, why, sizeof(why)), STOKER_OK);
    if (strcmp(b->name, "cpu") == 0)
        cr_assert_str_not_empty(why, "a fallback must explain itself");
    else
        cr_assert_str_empty(why);
    backend_destroy(b);
}
