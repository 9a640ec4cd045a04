// The CUDA backend's element-wise and reduction kernels (the matmuls are cuBLAS). Each follows
// the CPU backend's arithmetic order where that is cheap, so the two agree to float rounding:
// per-row loops stay sequential, loss sums are in double. The losses run in one block because
// the trainer's batches are small (a few thousand values); they are not tuned for big tensors.
#include "kernels.h"

#define LOSS_THREADS 256

__global__ static void
bias_act_forward_kernel(float *act, const float *bias, uint32_t batch, uint32_t dim, int relu)
{
    size_t n = (size_t)batch * dim;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = act[i] + bias[i % dim];
        act[i] = (relu && v < 0.0f) ? 0.0f : v;
    }
}

__global__ static void
relu_backward_kernel(float *dact, const float *act, size_t count)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        if (!(act[i] > 0.0f))
            dact[i] = 0.0f;
    }
}

// One thread per column; adjacent threads read adjacent columns of a row (coalesced).
__global__ static void
bias_backward_kernel(float *dbias, const float *dout, uint32_t batch, uint32_t dim)
{
    uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= dim)
        return;
    float acc = 0.0f;
    for (uint32_t b = 0; b < batch; b++)
        acc += dout[(size_t)b * dim + j];
    dbias[j] = acc;
}

// Sums each thread's partial in shared memory; thread 0 returns the total.
__device__ static double
block_sum(double v)
{
    __shared__ double partial[LOSS_THREADS];
    partial[threadIdx.x] = v;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride)
            partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    return partial[0];
}

__global__ static void
mse_loss_kernel(float *loss, float *dpred, const float *pred, const float *target, size_t n)
{
    double sum = 0.0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
        float diff = pred[i] - target[i];
        sum += (double)diff * diff;
        dpred[i] = 2.0f * diff / (float)n;
    }
    double total = block_sum(sum);
    if (threadIdx.x == 0)
        *loss = n ? (float)(total / (double)n) : 0.0f;
}

// One thread per row.
__global__ static void
crossentropy_loss_kernel(float *loss, float *dlogits, const float *logits, const int32_t *labels,
                         uint32_t batch, uint32_t classes)
{
    double sum = 0.0;
    for (uint32_t b = threadIdx.x; b < batch; b += blockDim.x) {
        const float *row = logits + (size_t)b * classes;
        float *drow = dlogits + (size_t)b * classes;
        int32_t label = labels[b];
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
    double total = block_sum(sum);
    if (threadIdx.x == 0)
        *loss = batch ? (float)(total / batch) : 0.0f;
}

__global__ static void
adam_kernel(float *param, const float *grad, float *m, float *v, size_t count, float lr,
            float correction1, float correction2)
{
    const float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        float g = grad[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        param[i] -= lr * (mi / correction1) / (sqrtf(vi / correction2) + eps);
    }
}

// Enough blocks of 256 to cover n, capped: the kernels above are grid-stride loops.
static unsigned
blocks_for(size_t n)
{
    size_t blocks = (n + 255) / 256;
    if (blocks == 0)
        blocks = 1;
    return blocks > 4096 ? 4096u : (unsigned)blocks;
}

extern "C" cudaError_t
kernels_bias_act_forward(float *act, const float *bias, uint32_t batch, uint32_t dim, int relu,
                         cudaStream_t stream)
{
    bias_act_forward_kernel<<<blocks_for((size_t)batch * dim), 256, 0, stream>>>(act, bias, batch,
                                                                                 dim, relu);
    return cudaGetLastError();
}

extern "C" cudaError_t
kernels_relu_backward(float *dact, const float *act, size_t count, cudaStream_t stream)
{
    relu_backward_kernel<<<blocks_for(count), 256, 0, stream>>>(dact, act, count);
    return cudaGetLastError();
}

extern "C" cudaError_t
kernels_bias_backward(float *dbias, const float *dout, uint32_t batch, uint32_t dim,
                      cudaStream_t stream)
{
    bias_backward_kernel<<<(dim + 255) / 256, 256, 0, stream>>>(dbias, dout, batch, dim);
    return cudaGetLastError();
}

extern "C" cudaError_t
kernels_mse_loss(float *loss, float *dpred, const float *pred, const float *target, uint32_t batch,
                 uint32_t dim, cudaStream_t stream)
{
    mse_loss_kernel<<<1, LOSS_THREADS, 0, stream>>>(loss, dpred, pred, target, (size_t)batch * dim);
    return cudaGetLastError();
}

extern "C" cudaError_t
kernels_crossentropy_loss(float *loss, float *dlogits, const float *logits, const int32_t *labels,
                          uint32_t batch, uint32_t classes, cudaStream_t stream)
{
    crossentropy_loss_kernel<<<1, LOSS_THREADS, 0, stream>>>(loss, dlogits, logits, labels, batch,
                                                             classes);
    return cudaGetLastError();
}

extern "C" cudaError_t
kernels_adam_step(float *param, const float *grad, float *m, float *v, size_t count, float lr,
                  float correction1, float correction2, cudaStream_t stream)
{
    adam_kernel<<<blocks_for(count), 256, 0, stream>>>(param, grad, m, v, count, lr, correction1,
                                                       correction2);
    return cudaGetLastError();
}
