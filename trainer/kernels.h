// Element-wise and reduction kernels of the CUDA backend, as C-callable launchers. Each queues
// its kernel on stream and returns the launch status (cudaGetLastError), never exits. Shapes and
// formulas are those of the matching backend_ops entry in backend.h. Included only by
// backend_cuda.c and kernels.cu; the matmuls are cuBLAS calls in backend_cuda.c, not here.
#ifndef STOKER_TRAINER_KERNELS_H
#define STOKER_TRAINER_KERNELS_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// act (batch, dim) += bias (dim) per row; then max(act, 0) when relu != 0.
cudaError_t kernels_bias_act_forward(float *act, const float *bias, uint32_t batch, uint32_t dim,
                                     int relu, cudaStream_t stream);
// dact (count) = 0 where act <= 0.
cudaError_t kernels_relu_backward(float *dact, const float *act, size_t count, cudaStream_t stream);
// dbias (dim) = column sums of dout (batch, dim).
cudaError_t kernels_bias_backward(float *dbias, const float *dout, uint32_t batch, uint32_t dim,
                                  cudaStream_t stream);
// *loss (one float) = mean (pred - target)^2; dpred = 2 (pred - target) / (batch*dim).
cudaError_t kernels_mse_loss(float *loss, float *dpred, const float *pred, const float *target,
                             uint32_t batch, uint32_t dim, cudaStream_t stream);
// *loss = mean over rows of softmax cross-entropy; dlogits = (softmax - onehot) / batch.
cudaError_t kernels_crossentropy_loss(float *loss, float *dlogits, const float *logits,
                                      const int32_t *labels, uint32_t batch, uint32_t classes,
                                      cudaStream_t stream);
// Adam with the bias corrections (1 - beta^t) precomputed by the caller.
cudaError_t kernels_adam_step(float *param, const float *grad, float *m, float *v, size_t count,
                              float lr, float correction1, float correction2, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
