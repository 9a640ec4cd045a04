// The CPU backend: the numeric reference every other backend is checked against. Plain loops,
// except the three matmuls, which use OpenBLAS's cblas_sgemm when config.h has
// STOKER_HAS_OPENBLAS 1. Everything is synchronous; "device" buffers are host memory.
// It also holds backend_create, the choice between backends, since this file is always built.
#include "backend.h"

#include "config.h"
#include "stoker/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if STOKER_HAS_OPENBLAS
#include <cblas.h>
#endif

typedef struct cpu_backend {
    backend base;
} cpu_backend;

static int
cpu_alloc(backend *be, size_t count, float **out_dev)
{
    float *p = calloc(count ? count : 1, sizeof(float));
    if (p == NULL)
        return stoker_errorf(be->error, sizeof(be->error), STOKER_NOMEM,
                             "cpu: cannot allocate %zu floats", count);
    *out_dev = p;
    return STOKER_OK;
}

static void
cpu_free(backend *be, float *dev)
{
    (void)be;
    free(dev);
}

static int
cpu_copy(backend *be, float *dst, const float *src, size_t count)
{
    (void)be;
    if (count > 0)
        memmove(dst, src, count * sizeof(float));
    return STOKER_OK;
}

static int
cpu_synchronize(backend *be)
{
    (void)be;
    return STOKER_OK;
}

// No copy: the step runs synchronously inside the caller's call, while x and y are still
// borrowed.
static int
cpu_batch_upload(backend *be, const float *x, size_t x_count, const void *y, size_t y_bytes,
                 const float **x_dev, const void **y_dev)
{
    (void)be;
    (void)x_count;
    (void)y_bytes;
    *x_dev = x;
    *y_dev = y;
    return STOKER_OK;
}

// Row-major C (m, n) = op(A) op(B), op(A) (m, k), op(B) (k, n); A is stored (k, m) when trans_a,
// B is stored (n, k) when trans_b. Overwrites C.
static void
gemm(bool trans_a, bool trans_b, uint32_t m, uint32_t n, uint32_t k, const float *a, const float *b,
     float *c)
{
#if STOKER_HAS_OPENBLAS
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, a,
                trans_a ? (int)m : (int)k, b, trans_b ? (int)k : (int)n, 0.0f, c, (int)n);
#else
    for (uint32_t i = 0; i < m; i++) {
        for (uint32_t j = 0; j < n; j++) {
            float acc = 0.0f;
            for (uint32_t p = 0; p < k; p++) {
                float av = trans_a ? a[(size_t)p * m + i] : a[(size_t)i * k + p];
                float bv = trans_b ? b[(size_t)j * k + p] : b[(size_t)p * n + j];
                acc += av * bv;
            }
            c[(size_t)i * n + j] = acc;
        }
    }
#endif
}

static int
cpu_matmul_forward(backend *be, float *out, const float *inp, const float *weight, uint32_t batch,
                   uint32_t in_dim, uint32_t out_dim)
{
    (void)be;
    // out (batch, out_dim) = inp (batch, in_dim) @ weight^T (in_dim, out_dim)
    gemm(false, true, batch, out_dim, in_dim, inp, weight, out);
    return STOKER_OK;
}

static int
cpu_matmul_backward_input(backend *be, float *dinp, const float *dout, const float *weight,
                          uint32_t batch, uint32_t in_dim, uint32_t out_dim)
{
    (void)be;
    // dinp (batch, in_dim) = dout (batch, out_dim) @ weight (out_dim, in_dim)
    gemm(false, false, batch, in_dim, out_dim, dout, weight, dinp);
    return STOKER_OK;
}

static int
cpu_matmul_backward_weight(backend *be, float *dweight, const float *dout, const float *inp,
                           uint32_t batch, uint32_t in_dim, uint32_t out_dim)
{
    (void)be;
    // dweight (out_dim, in_dim) = dout^T (out_dim, batch) @ inp (batch, in_dim)
    gemm(true, false, out_dim, in_dim, batch, dout, inp, dweight);
    return STOKER_OK;
}

static int
cpu_bias_act_forward(backend *be, float *act, const float *bias, uint32_t batch, uint32_t dim,
                     bool relu)
{
    (void)be;
    for (uint32_t b = 0; b < batch; b++) {
        float *row = act + (size_t)b * dim;
        for (uint32_t j = 0; j < dim; j++) {
            float v = row[j] + bias[j];
            row[j] = (relu && v < 0.0f) ? 0.0f : v;
        }
    }
    return STOKER_OK;
}

static int
cpu_relu_backward(backend *be, float *dact, const float *act, size_t count)
{
    (void)be;
    for (size_t i = 0; i < count; i++)
        if (!(act[i] > 0.0f))
            dact[i] = 0.0f;
    return STOKER_OK;
}

static int
cpu_bias_backward(backend *be, float *dbias, const float *dout, uint32_t batch, uint32_t dim)
{
    (void)be;
    for (uint32_t j = 0; j < dim; j++) {
        float acc = 0.0f;
        for (uint32_t b = 0; b < batch; b++)
            acc += dout[(size_t)b * dim + j];
        dbias[j] = acc;
    }
    return STOKER_OK;
}

static int
cpu_mse_loss(backend *be, float *loss, float *dpred, const float *pred, const float *target,
             uint32_t batch, uint32_t dim)
{
    (void)be;
    size_t n = (size_t)batch * dim;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        float diff = pred[i] - target[i];
        sum += (double)diff * diff;
        dpred[i] = 2.0f * diff / (float)n;
    }
    *loss = n ? (float)(sum / (double)n) : 0.0f;
    return STOKER_OK;
}

static int
cpu_crossentropy_loss(backend *be, float *loss, float *dlogits, const float *logits,
                      const int32_t *labels, uint32_t batch, uint32_t classes)
{
    double sum = 0.0;
    for (uint32_t b = 0; b < batch; b++) {
        const float *row = logits + (size_t)b * classes;
        float *drow = dlogits + (size_t)b * classes;
        int32_t label = labels[b];
        if (label < 0 || (uint32_t)label >= classes)
            return stoker_errorf(be->error, sizeof(be->error), STOKER_INVALID,
                                 "label %d of example %u outside [0, %u)", label, b, classes);
        // Subtracting the row maximum keeps exp() finite.
        float max = row[0];
        for (uint32_t c = 1; c < classes; c++)
            if (row[c] > max)
                max = row[c];
        float denom = 0.0f;
        for (uint32_t c = 0; c < classes; c++)
            denom += expf(row[c] - max);
        sum += (double)(logf(denom) + max - row[label]);
        for (uint32_t c = 0; c < classes; c++) {
            float p = expf(row[c] - max) / denom;
            drow[c] = (p - (c == (uint32_t)label ? 1.0f : 0.0f)) / (float)batch;
        }
    }
    *loss = batch ? (float)(sum / batch) : 0.0f;
    return STOKER_OK;
}

static int
cpu_adam_step(backend *be, float *param, const float *grad, float *m, float *v, size_t count,
              float lr, uint64_t step)
{
    (void)be;
    const float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
    float correction1 = 1.0f - powf(beta1, (float)step);
    float correction2 = 1.0f - powf(beta2, (float)step);
    for (size_t i = 0; i < count; i++) {
        float g = grad[i];
        m[i] = beta1 * m[i] + (1.0f - beta1) * g;
        v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
        float m_hat = m[i] / correction1;
        float v_hat = v[i] / correction2;
        param[i] -= lr * m_hat / (sqrtf(v_hat) + eps);
    }
    return STOKER_OK;
}

static void
cpu_destroy(backend *be)
{
    free(be);
}

static const backend_ops cpu_ops = {
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .synchronize = cpu_synchronize,
    .batch_upload = cpu_batch_upload,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward_input = cpu_matmul_backward_input,
    .matmul_backward_weight = cpu_matmul_backward_weight,
    .bias_act_forward = cpu_bias_act_forward,
    .relu_backward = cpu_relu_backward,
    .bias_backward = cpu_bias_backward,
    .mse_loss = cpu_mse_loss,
    .crossentropy_loss = cpu_crossentropy_loss,
    .adam_step = cpu_adam_step,
    .destroy = cpu_destroy,
};

int
backend_cpu_create(backend **out)
{
    cpu_backend *cpu = calloc(1, sizeof(*cpu));
    if (cpu == NULL)
        return STOKER_NOMEM;
    cpu->base.ops = &cpu_ops;
    cpu->base.name = "cpu";
#if STOKER_HAS_OPENBLAS
    snprintf(cpu->base.device, sizeof(cpu->base.device), "cpu (OpenBLAS)");
#else
    snprintf(cpu->base.device, sizeof(cpu->base.device), "cpu (plain loops)");
#endif
    *out = &cpu->base;
    return STOKER_OK;
}

// Follows wlroots' renderer choice: a forced backend that fails is an error, "auto" falls back
// to the CPU and says why.
int
backend_create(const char *device, backend **out, char *why, size_t why_len)
{
    if (why_len > 0)
        why[0] = '\0';
    bool want_gpu = false, allow_cpu = false;
    if (device != NULL && strcmp(device, "cpu") == 0) {
        allow_cpu = true;
    } else if (device != NULL && strcmp(device, "gpu") == 0) {
        want_gpu = true;
    } else if (device != NULL && strcmp(device, "auto") == 0) {
        want_gpu = true;
        allow_cpu = true;
    } else {
        if (why_len > 0)
            snprintf(why, why_len, "unknown device '%s': use auto, cpu or gpu",
                     device ? device : "(null)");
        return STOKER_INVALID;
    }

    if (want_gpu) {
        // The CUDA backend is a plugin (backend_plugin.c): found, loaded and probed only here.
        int rv = backend_cuda_create(out, why, why_len);
        if (rv == STOKER_OK || !allow_cpu)
            return rv;
    }
    return backend_cpu_create(out);
}

void
backend_destroy(backend *be)
{
    if (be != NULL)
        be->ops->destroy(be);
}

const char *
backend_error(const backend *be)
{
    return be ? be->error : "";
}
