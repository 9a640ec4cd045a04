// The CUDA backend: plain C over the CUDA runtime and cuBLAS (the element-wise kernels are in
// kernels.cu). All work is queued on one compute stream; batches travel through pinned staging
// buffers on a second, copy stream, two slots alternating so the next batch's copy overlaps the
// current step. Every CUDA and cuBLAS status becomes an error return with a message in
// be->error; nothing here exits. Runtime API only (no driver API, no -lcuda), device 0 only.
// Built as the plugin libstoker-cuda.so (with kernels.cu and common/base/error.c), which the
// trainer opens at run time (backend_plugin.c): the trainer itself links no CUDA library.
#include "config.h"

#include "backend.h"

#include "stoker/error.h"

// The CUDA headers test __cplusplus and _MSC_VER without defining them; -Wundef is ours.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include "kernels.h"
#pragma GCC diagnostic pop
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !STOKER_HAS_CUDA
#error "backend_cuda.c is built only when STOKER_HAS_CUDA is 1"
#endif

#include <pthread.h>

#define MAX_REGISTERED 4 // host ranges registered at once (an arena, and a new broker's)

// One staging slot: pinned host copies of a batch and the device buffers they are copied to.
typedef struct slot {
    void *host_x, *host_y; // pinned (cudaMallocHost)
    void *dev_x, *dev_y;
    size_t x_cap, y_cap;  // bytes
    cudaEvent_t copied;   // recorded on the copy stream after the upload to dev_*
    cudaEvent_t consumed; // recorded on the compute stream once the step using it is queued
    bool used;
} slot;

typedef struct cuda_backend {
    backend base;
    cudaStream_t compute, copy;
    cublasHandle_t cublas;
    slot slots[2];
    int current; // slot of the latest batch, -1 before the first
    // Host memory registered as pinned (host_register): uploads from inside it skip staging.
    // Guarded by `registered_lock`: registration may come from the trainer client's thread.
    pthread_mutex_t registered_lock;
    struct {
        const uint8_t *base;
        size_t bytes;
    } registered[MAX_REGISTERED];
} cuda_backend;

static int
cuda_fail(backend *be, cudaError_t err, const char *what, int line)
{
    snprintf(be->error, sizeof(be->error), "%s failed: %s (%s, backend_cuda.c:%d)", what,
             cudaGetErrorString(err), cudaGetErrorName(err), line);
    return err == cudaErrorMemoryAllocation ? STOKER_NOMEM : STOKER_DEVICE;
}

static int
cublas_fail(backend *be, cublasStatus_t st, const char *what, int line)
{
    snprintf(be->error, sizeof(be->error), "%s failed: %s (backend_cuda.c:%d)", what,
             cublasGetStatusString(st), line);
    return st == CUBLAS_STATUS_ALLOC_FAILED ? STOKER_NOMEM : STOKER_DEVICE;
}

// Checks a CUDA runtime call (or a kernel launcher's status) and returns an error from the
// calling function; llm.c's cudaCheck, minus the exit.
#define CUDA_TRY(be, call)                                                                         \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess)                                                                   \
            return cuda_fail((be), err_, #call, __LINE__);                                         \
    } while (0)

#define CUBLAS_TRY(be, call)                                                                       \
    do {                                                                                           \
        cublasStatus_t st_ = (call);                                                               \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                          \
            return cublas_fail((be), st_, #call, __LINE__);                                        \
    } while (0)

static cuda_backend *
to_cuda(backend *be)
{
    return (cuda_backend *)be;
}

static int
cu_alloc(backend *be, size_t count, float **out_dev)
{
    cuda_backend *cb = to_cuda(be);
    float *p = NULL;
    size_t bytes = (count ? count : 1) * sizeof(float);
    CUDA_TRY(be, cudaMalloc((void **)&p, bytes));
    // On the compute stream: our streams are non-blocking, so a plain cudaMemset on the legacy
    // default stream would not be ordered before the work that follows.
    cudaError_t err = cudaMemsetAsync(p, 0, bytes, cb->compute);
    if (err != cudaSuccess) {
        cudaFree(p);
        return cuda_fail(be, err, "cudaMemsetAsync", __LINE__);
    }
    *out_dev = p;
    return STOKER_OK;
}

// Waits for queued work first: the buffer may still be in use by it (cudaFree's own implicit
// synchronisation is not a documented guarantee for non-blocking streams).
static void
cu_free(backend *be, float *dev)
{
    cuda_backend *cb = to_cuda(be);
    if (dev == NULL)
        return;
    cudaStreamSynchronize(cb->copy);
    cudaStreamSynchronize(cb->compute);
    cudaFree(dev);
}

static int
cu_upload(backend *be, float *dst_dev, const float *src, size_t count)
{
    cuda_backend *cb = to_cuda(be);
    CUDA_TRY(be, cudaMemcpyAsync(dst_dev, src, count * sizeof(float), cudaMemcpyHostToDevice,
                                 cb->compute));
    // src is pageable caller memory: wait so the caller may reuse it at once.
    CUDA_TRY(be, cudaStreamSynchronize(cb->compute));
    return STOKER_OK;
}

static int
cu_download(backend *be, float *dst, const float *src_dev, size_t count)
{
    cuda_backend *cb = to_cuda(be);
    CUDA_TRY(be, cudaMemcpyAsync(dst, src_dev, count * sizeof(float), cudaMemcpyDeviceToHost,
                                 cb->compute));
    CUDA_TRY(be, cudaStreamSynchronize(cb->compute));
    return STOKER_OK;
}

static int
cu_synchronize(backend *be)
{
    cuda_backend *cb = to_cuda(be);
    CUDA_TRY(be, cudaStreamSynchronize(cb->copy));
    CUDA_TRY(be, cudaStreamSynchronize(cb->compute));
    return STOKER_OK;
}

static void
slot_free_buffers(slot *s)
{
    cudaFreeHost(s->host_x);
    cudaFreeHost(s->host_y);
    cudaFree(s->dev_x);
    cudaFree(s->dev_y);
    s->host_x = s->host_y = s->dev_x = s->dev_y = NULL;
    s->x_cap = s->y_cap = 0;
}

// Grows slot s to hold x_bytes and y_bytes. The slot must be idle (caller waited on its events).
static int
slot_reserve(backend *be, slot *s, size_t x_bytes, size_t y_bytes)
{
    if (x_bytes <= s->x_cap && y_bytes <= s->y_cap)
        return STOKER_OK;
    // Grow both to at least what is asked, by doubling, so a slowly growing batch reallocates
    // rarely.
    size_t x_cap = s->x_cap ? s->x_cap : 4096, y_cap = s->y_cap ? s->y_cap : 4096;
    while (x_cap < x_bytes)
        x_cap *= 2;
    while (y_cap < y_bytes)
        y_cap *= 2;
    slot_free_buffers(s);
    CUDA_TRY(be, cudaMallocHost(&s->host_x, x_cap));
    CUDA_TRY(be, cudaMallocHost(&s->host_y, y_cap));
    CUDA_TRY(be, cudaMalloc(&s->dev_x, x_cap));
    CUDA_TRY(be, cudaMalloc(&s->dev_y, y_cap));
    s->x_cap = x_cap;
    s->y_cap = y_cap;
    return STOKER_OK;
}

// Double buffering. Slot k was last used two batches ago. Before reusing it:
// - its pinned memory may still be read by its H2D copy: wait on `copied` (host side);
// - its device memory may still be read by the step queued after it: the copy stream waits on
//   `consumed`, recorded on the compute stream when the following batch arrived (by then that
//   step was fully queued).
// Then the compute stream waits on this batch's `copied`, so the step never sees a half copy.
// --- registered host memory (the broker's arena, pinned) ---------------------------------------

// 1 when [p, p + bytes) lies inside memory registered with host_register.
static bool
registered(cuda_backend *cb, const void *p, size_t bytes)
{
    const uint8_t *q = p;
    bool in = false;
    pthread_mutex_lock(&cb->registered_lock);
    for (int i = 0; i < MAX_REGISTERED && !in; i++)
        in = cb->registered[i].base != NULL && q >= cb->registered[i].base &&
             bytes <= cb->registered[i].bytes &&
             (size_t)(q - cb->registered[i].base) <= cb->registered[i].bytes - bytes;
    pthread_mutex_unlock(&cb->registered_lock);
    return in;
}

static int
cu_host_register(backend *be, const void *base, size_t bytes, char *why, size_t why_len)
{
    cuda_backend *cb = to_cuda(be);
    int free_at = -1;
    pthread_mutex_lock(&cb->registered_lock);
    for (int i = 0; i < MAX_REGISTERED && free_at < 0; i++)
        free_at = cb->registered[i].base == NULL ? i : -1;
    pthread_mutex_unlock(&cb->registered_lock);
    if (free_at < 0)
        return stoker_errorf(why, why_len, STOKER_LIMIT,
                             "%d host ranges registered already, at most %d", MAX_REGISTERED,
                             MAX_REGISTERED);
    // The arena is mapped read-only: registering it writable would fail. Read-only registration
    // needs CUDA 11.1 and a device that supports it; else the plain flag, which may refuse.
    cudaError_t err = cudaErrorNotSupported;
#ifdef cudaHostRegisterReadOnly
    err = cudaHostRegister((void *)base, bytes, cudaHostRegisterReadOnly);
    if (err != cudaSuccess)
        (void)cudaGetLastError(); // not sticky: clear it before trying the plain flag
#endif
    if (err != cudaSuccess)
        err = cudaHostRegister((void *)base, bytes, cudaHostRegisterDefault);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return stoker_errorf(why, why_len, STOKER_DEVICE, "cudaHostRegister of %zu bytes: %s (%s)",
                             bytes, cudaGetErrorString(err), cudaGetErrorName(err));
    }
    pthread_mutex_lock(&cb->registered_lock);
    cb->registered[free_at].base = base;
    cb->registered[free_at].bytes = bytes;
    pthread_mutex_unlock(&cb->registered_lock);
    return STOKER_OK;
}

// batch_upload waits for its direct copies before it returns: nothing in flight reads base.
static void
cu_host_unregister(backend *be, const void *base)
{
    cuda_backend *cb = to_cuda(be);
    bool found = false;
    pthread_mutex_lock(&cb->registered_lock);
    for (int i = 0; i < MAX_REGISTERED; i++) {
        if (cb->registered[i].base == base) {
            cb->registered[i].base = NULL;
            found = true;
        }
    }
    pthread_mutex_unlock(&cb->registered_lock);
    if (found && cudaHostUnregister((void *)base) != cudaSuccess)
        (void)cudaGetLastError();
}

// --- batches -------------------------------------------------------------------------------------

static int
cu_batch_upload(backend *be, const float *x, size_t x_count, const void *y, size_t y_bytes,
                const float **x_dev, const void **y_dev)
{
    cuda_backend *cb = to_cuda(be);
    size_t x_bytes = x_count * sizeof(float);
    // Fields in registered (pinned) memory are copied straight from there by DMA, skipping the
    // staging memcpy; x and y are borrowed for this call only, so it waits for those copies.
    bool x_direct = registered(cb, x, x_bytes);
    bool y_direct = y_bytes > 0 && registered(cb, y, y_bytes);
    if (cb->current >= 0)
        CUDA_TRY(be, cudaEventRecord(cb->slots[cb->current].consumed, cb->compute));
    int k = cb->current < 0 ? 0 : 1 - cb->current;
    slot *s = &cb->slots[k];

    CUDA_TRY(be, cudaEventSynchronize(s->copied));
    if (x_bytes > s->x_cap || y_bytes > s->y_cap) {
        CUDA_TRY(be, cudaEventSynchronize(s->consumed));
        int rv = slot_reserve(be, s, x_bytes, y_bytes);
        if (rv != STOKER_OK)
            return rv;
    }
    if (!x_direct)
        memcpy(s->host_x, x, x_bytes);
    if (y_bytes > 0 && !y_direct)
        memcpy(s->host_y, y, y_bytes);

    if (s->used)
        CUDA_TRY(be, cudaStreamWaitEvent(cb->copy, s->consumed, 0));
    CUDA_TRY(be, cudaMemcpyAsync(s->dev_x, x_direct ? (const void *)x : s->host_x, x_bytes,
                                 cudaMemcpyHostToDevice, cb->copy));
    if (y_bytes > 0)
        CUDA_TRY(be, cudaMemcpyAsync(s->dev_y, y_direct ? y : s->host_y, y_bytes,
                                     cudaMemcpyHostToDevice, cb->copy));
    CUDA_TRY(be, cudaEventRecord(s->copied, cb->copy));
    if (x_direct || y_direct) // the caller may release the arena's region once we return
        CUDA_TRY(be, cudaEventSynchronize(s->copied));
    CUDA_TRY(be, cudaStreamWaitEvent(cb->compute, s->copied, 0));
    s->used = true;
    cb->current = k;
    *x_dev = s->dev_x;
    *y_dev = s->dev_y;
    return STOKER_OK;
}

// The one place that knows cuBLAS is column-major.
// A row-major matrix M (r, c) stored densely is, read column-major, the matrix M^T (c, r) with
// leading dimension c. So the row-major product C (m, n) = op(A) (m, k) @ op(B) (k, n) is, to
// cuBLAS, the column-major product C^T (n, m) = op(B)^T @ op(A)^T: swap the operands and m/n,
// keep each operand's transpose flag, and give each operand the row length it is stored with
// (A stored (k, m) when trans_a, else (m, k); B stored (n, k) when trans_b, else (k, n)).
// Overwrites C (beta 0). Default math mode: full FP32, no TF32, so results match the CPU.
static int
gemm(cuda_backend *cb, bool trans_a, bool trans_b, uint32_t m, uint32_t n, uint32_t k,
     const float *a, const float *b, float *c)
{
    const float one = 1.0f, zero = 0.0f;
    int lda = trans_a ? (int)m : (int)k;
    int ldb = trans_b ? (int)k : (int)n;
    CUBLAS_TRY(&cb->base, cublasSgemm(cb->cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                      trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m, (int)k,
                                      &one, b, ldb, a, lda, &zero, c, (int)n));
    return STOKER_OK;
}

static int
cu_matmul_forward(backend *be, float *out, const float *inp, const float *weight, uint32_t batch,
                  uint32_t in_dim, uint32_t out_dim)
{
    // out (batch, out_dim) = inp (batch, in_dim) @ weight^T
    return gemm(to_cuda(be), false, true, batch, out_dim, in_dim, inp, weight, out);
}

static int
cu_matmul_backward_input(backend *be, float *dinp, const float *dout, const float *weight,
                         uint32_t batch, uint32_t in_dim, uint32_t out_dim)
{
    // dinp (batch, in_dim) = dout (batch, out_dim) @ weight (out_dim, in_dim)
    return gemm(to_cuda(be), false, false, batch, in_dim, out_dim, dout, weight, dinp);
}

static int
cu_matmul_backward_weight(backend *be, float *dweight, const float *dout, const float *inp,
                          uint32_t batch, uint32_t in_dim, uint32_t out_dim)
{
    // dweight (out_dim, in_dim) = dout^T @ inp (batch, in_dim)
    return gemm(to_cuda(be), true, false, out_dim, in_dim, batch, dout, inp, dweight);
}

static int
cu_bias_act_forward(backend *be, float *act, const float *bias, uint32_t batch, uint32_t dim,
                    bool relu)
{
    CUDA_TRY(be,
             kernels_bias_act_forward(act, bias, batch, dim, relu ? 1 : 0, to_cuda(be)->compute));
    return STOKER_OK;
}

static int
cu_relu_backward(backend *be, float *dact, const float *act, size_t count)
{
    CUDA_TRY(be, kernels_relu_backward(dact, act, count, to_cuda(be)->compute));
    return STOKER_OK;
}

static int
cu_bias_backward(backend *be, float *dbias, const float *dout, uint32_t batch, uint32_t dim)
{
    CUDA_TRY(be, kernels_bias_backward(dbias, dout, batch, dim, to_cuda(be)->compute));
    return STOKER_OK;
}

static int
cu_mse_loss(backend *be, float *loss, float *dpred, const float *pred, const float *target,
            uint32_t batch, uint32_t dim)
{
    CUDA_TRY(be, kernels_mse_loss(loss, dpred, pred, target, batch, dim, to_cuda(be)->compute));
    return STOKER_OK;
}

static int
cu_crossentropy_loss(backend *be, float *loss, float *dlogits, const float *logits,
                     const int32_t *labels, uint32_t batch, uint32_t classes)
{
    CUDA_TRY(be, kernels_crossentropy_loss(loss, dlogits, logits, labels, batch, classes,
                                           to_cuda(be)->compute));
    return STOKER_OK;
}

static int
cu_adam_step(backend *be, float *param, const float *grad, float *m, float *v, size_t count,
             float lr, uint64_t step)
{
    // Same float expressions as the CPU backend, so both use identical corrections.
    float correction1 = 1.0f - powf(0.9f, (float)step);
    float correction2 = 1.0f - powf(0.999f, (float)step);
    CUDA_TRY(be, kernels_adam_step(param, grad, m, v, count, lr, correction1, correction2,
                                   to_cuda(be)->compute));
    return STOKER_OK;
}

static void
cu_destroy(backend *be)
{
    cuda_backend *cb = to_cuda(be);
    for (int i = 0; i < MAX_REGISTERED; i++) // normally undone already (the source goes first)
        if (cb->registered[i].base != NULL)
            cu_host_unregister(be, cb->registered[i].base);
    pthread_mutex_destroy(&cb->registered_lock);
    if (cb->compute)
        cudaStreamSynchronize(cb->compute);
    if (cb->copy)
        cudaStreamSynchronize(cb->copy);
    for (int i = 0; i < 2; i++) {
        slot_free_buffers(&cb->slots[i]);
        if (cb->slots[i].copied)
            cudaEventDestroy(cb->slots[i].copied);
        if (cb->slots[i].consumed)
            cudaEventDestroy(cb->slots[i].consumed);
    }
    if (cb->cublas)
        cublasDestroy(cb->cublas);
    if (cb->copy)
        cudaStreamDestroy(cb->copy);
    if (cb->compute)
        cudaStreamDestroy(cb->compute);
    free(cb);
}

static const backend_ops cuda_ops = {
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .synchronize = cu_synchronize,
    .batch_upload = cu_batch_upload,
    .matmul_forward = cu_matmul_forward,
    .matmul_backward_input = cu_matmul_backward_input,
    .matmul_backward_weight = cu_matmul_backward_weight,
    .bias_act_forward = cu_bias_act_forward,
    .relu_backward = cu_relu_backward,
    .bias_backward = cu_bias_backward,
    .mse_loss = cu_mse_loss,
    .crossentropy_loss = cu_crossentropy_loss,
    .adam_step = cu_adam_step,
    .destroy = cu_destroy,
    .host_register = cu_host_register,
    .host_unregister = cu_host_unregister,
};

// Creates streams, events and the cuBLAS handle; on failure writes why and undoes everything
// (cu_destroy copes with a half-built backend).
static int
setup(cuda_backend *cb, char *why, size_t why_len)
{
    backend *be = &cb->base;
    int rv = STOKER_OK;
    cudaError_t err;
    if ((err = cudaStreamCreateWithFlags(&cb->compute, cudaStreamNonBlocking)) != cudaSuccess ||
        (err = cudaStreamCreateWithFlags(&cb->copy, cudaStreamNonBlocking)) != cudaSuccess) {
        rv = cuda_fail(be, err, "cudaStreamCreateWithFlags", __LINE__);
        goto fail;
    }
    for (int i = 0; i < 2; i++) {
        if ((err = cudaEventCreateWithFlags(&cb->slots[i].copied, cudaEventDisableTiming)) !=
                cudaSuccess ||
            (err = cudaEventCreateWithFlags(&cb->slots[i].consumed, cudaEventDisableTiming)) !=
                cudaSuccess) {
            rv = cuda_fail(be, err, "cudaEventCreateWithFlags", __LINE__);
            goto fail;
        }
    }
    cublasStatus_t st = cublasCreate(&cb->cublas);
    if (st != CUBLAS_STATUS_SUCCESS) {
        cb->cublas = NULL;
        rv = cublas_fail(be, st, "cublasCreate", __LINE__);
        goto fail;
    }
    if ((st = cublasSetStream(cb->cublas, cb->compute)) != CUBLAS_STATUS_SUCCESS ||
        (st = cublasSetMathMode(cb->cublas, CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS) {
        rv = cublas_fail(be, st, "cublasSetStream/cublasSetMathMode", __LINE__);
        goto fail;
    }
    return STOKER_OK;
fail:
    if (why_len > 0)
        snprintf(why, why_len, "GPU setup: %s", be->error);
    return rv;
}

static int
cuda_create(backend **out, char *why, size_t why_len)
{
    if (why_len > 0)
        why[0] = '\0';
    // Without a GPU or driver this returns cudaErrorInsufficientDriver (35) or
    // cudaErrorNoDevice and leaves count untouched: initialise it, treat any error as no GPU.
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count <= 0) {
        if (why_len > 0)
            snprintf(why, why_len, "no usable GPU: cudaGetDeviceCount: %s (%d), %d device(s)",
                     err != cudaSuccess ? cudaGetErrorString(err) : "no error", (int)err, count);
        return STOKER_DEVICE;
    }
    struct cudaDeviceProp prop;
    if ((err = cudaSetDevice(0)) != cudaSuccess ||
        (err = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess) {
        if (why_len > 0)
            snprintf(why, why_len, "no usable GPU: device 0: %s", cudaGetErrorString(err));
        return STOKER_DEVICE;
    }
    // kernels.cu is built for sm_90 with compute_90 PTX: older GPUs cannot run it.
    if (prop.major < 9) {
        if (why_len > 0)
            snprintf(why, why_len,
                     "GPU '%s' has compute capability %d.%d; this build needs 9.0 or newer "
                     "(Hopper); rebuild kernels.cu with a matching -gencode",
                     prop.name, prop.major, prop.minor);
        return STOKER_DEVICE;
    }

    cuda_backend *cb = calloc(1, sizeof(*cb));
    if (cb == NULL)
        return STOKER_NOMEM;
    cb->base.ops = &cuda_ops;
    cb->base.name = "gpu";
    cb->current = -1;
    pthread_mutex_init(&cb->registered_lock, NULL);
    snprintf(cb->base.device, sizeof(cb->base.device), "%.80s (sm_%d%d, %.0f GiB)", prop.name,
             prop.major, prop.minor, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    int rv = setup(cb, why, why_len);
    if (rv != STOKER_OK) {
        cu_destroy(&cb->base);
        return rv;
    }
    *out = &cb->base;
    return STOKER_OK;
}

// The plugin's one exported symbol (plugin.map hides everything else), read by the loader in
// backend_plugin.c.
__attribute__((visibility("default"))) const stoker_cuda_plugin stoker_cuda_plugin_v1 = {
    .abi = STOKER_CUDA_PLUGIN_ABI,
    .backend_size = sizeof(backend),
    .ops_size = sizeof(backend_ops),
    .version = STOKER_VERSION,
    .create = cuda_create,
};
