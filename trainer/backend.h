// The seam between the MLP and the hardware: a small table of numeric operations on buffers that
// the backend owns (host memory for the CPU backend, device memory for CUDA). The CPU backend is
// always built and is the numeric reference; the CUDA backend is a plugin (libstoker-cuda.so,
// built when config.h says STOKER_HAS_CUDA 1) loaded at run time. This header deliberately knows no
// CUDA type, and no layer or network structure: the MLP in mlp.c composes these operations.
#ifndef STOKER_TRAINER_BACKEND_H
#define STOKER_TRAINER_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct backend backend;

// Conventions for every operation below:
// - Matrices are row-major float32. A weight matrix is (out, in), as in PyTorch's nn.Linear.
// - Pointers named *_dev are buffers from ops->alloc (or batch_upload) of this backend; host
//   pointers are plain memory the caller owns. Nothing is retained after a call returns, except
//   the staging slots of batch_upload.
// - Operations may run asynchronously (CUDA queues them on one stream in call order); download
//   and synchronize wait. An error from a queued operation may therefore surface at a later call.
// - Each returns STOKER_OK or a stoker_err (STOKER_DEVICE for a GPU failure, STOKER_NOMEM when
//   memory runs out, STOKER_INVALID for bad sizes); backend_error() then says what failed.
typedef struct backend_ops {
    // Allocates count floats, zeroed. *out_dev is owned by the caller until ops->free.
    int (*alloc)(backend *be, size_t count, float **out_dev);
    // Frees what alloc returned, after the queued work that may use it; NULL is fine.
    void (*free)(backend *be, float *dev);
    // Copies count floats host -> device. Synchronous with respect to src: src may be reused as
    // soon as the call returns.
    int (*upload)(backend *be, float *dst_dev, const float *src, size_t count);
    // Waits for all queued work, then copies count floats device -> host.
    int (*download)(backend *be, float *dst, const float *src_dev, size_t count);
    // Waits for all queued work.
    int (*synchronize)(backend *be);

    // Stages one batch and returns device pointers to it: x is (batch, in) floats (x_count of
    // them), y is y_bytes of targets (float (batch, out) or int32 (batch)). x and y are borrowed
    // for the call only. The returned pointers stay valid until the next batch_upload but one:
    // two slots alternate, so on CUDA the next batch's copy overlaps the current step.
    int (*batch_upload)(backend *be, const float *x, size_t x_count, const void *y, size_t y_bytes,
                        const float **x_dev, const void **y_dev);

    // out = inp @ weight^T: out (batch, out_dim), inp (batch, in_dim), weight (out_dim, in_dim).
    int (*matmul_forward)(backend *be, float *out_dev, const float *inp_dev,
                          const float *weight_dev, uint32_t batch, uint32_t in_dim,
                          uint32_t out_dim);
    // dinp = dout @ weight: dinp (batch, in_dim), dout (batch, out_dim). Overwrites dinp.
    int (*matmul_backward_input)(backend *be, float *dinp_dev, const float *dout_dev,
                                 const float *weight_dev, uint32_t batch, uint32_t in_dim,
                                 uint32_t out_dim);
    // dweight = dout^T @ inp: dweight (out_dim, in_dim). Overwrites dweight.
    int (*matmul_backward_weight)(backend *be, float *dweight_dev, const float *dout_dev,
                                  const float *inp_dev, uint32_t batch, uint32_t in_dim,
                                  uint32_t out_dim);
    // In place on act (batch, dim): act += bias (dim) on every row, then act = max(act, 0) when
    // relu is true.
    int (*bias_act_forward)(backend *be, float *act_dev, const float *bias_dev, uint32_t batch,
                            uint32_t dim, bool relu);
    // In place on dact (count): dact = 0 where the ReLU output act was not positive.
    int (*relu_backward)(backend *be, float *dact_dev, const float *act_dev, size_t count);
    // dbias (dim) = column sums of dout (batch, dim). Overwrites dbias.
    int (*bias_backward)(backend *be, float *dbias_dev, const float *dout_dev, uint32_t batch,
                         uint32_t dim);
    // Mean squared error over all batch*dim elements: *loss_dev = mean((pred - target)^2),
    // dpred = 2 (pred - target) / (batch*dim). pred, target, dpred are (batch, dim);
    // loss_dev is one float on the device.
    int (*mse_loss)(backend *be, float *loss_dev, float *dpred_dev, const float *pred_dev,
                    const float *target_dev, uint32_t batch, uint32_t dim);
    // Softmax cross-entropy averaged over the batch: logits, dlogits (batch, classes), labels
    // (batch) int32 in [0, classes) (the caller checks the range; out-of-range labels are
    // STOKER_INVALID on the CPU and give undefined numbers on the GPU).
    // dlogits = (softmax(logits) - onehot(labels)) / batch.
    int (*crossentropy_loss)(backend *be, float *loss_dev, float *dlogits_dev,
                             const float *logits_dev, const int32_t *labels_dev, uint32_t batch,
                             uint32_t classes);
    // One Adam step over count parameters (beta1 0.9, beta2 0.999, eps 1e-8, bias-corrected,
    // no weight decay); step is the 1-based step number t.
    //   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
    //   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
    int (*adam_step)(backend *be, float *param_dev, const float *grad_dev, float *m_dev,
                     float *v_dev, size_t count, float lr, uint64_t step);

    // Frees the backend and everything it staged; buffers from alloc must be freed first.
    void (*destroy)(backend *be);

    // Optional, NULL where pointless (the CPU): host memory that batches are read from in place
    // (the broker's read-only shared-memory arena, docs/shm.md) registered with the device, so
    // batch_upload copies straight from it instead of through its staging buffers. STOKER_OK,
    // or an error with the reason in why: the caller carries on unregistered. Any thread.
    int (*host_register)(backend *be, const void *base, size_t bytes, char *why, size_t why_len);
    // Undoes host_register before the memory goes away; nothing in flight reads it afterwards.
    void (*host_unregister)(backend *be, const void *base);
} backend_ops;

// Implementations embed this as their first member.
struct backend {
    const backend_ops *ops;
    const char *name; // "cpu" or "gpu", static
    char device[128]; // human description: "NVIDIA H200 (sm_90)", "cpu (OpenBLAS)"
    char error[256];  // last failure, "" when none
};

// Chooses and creates a backend. device is "auto", "cpu" or "gpu".
// - "cpu": always succeeds unless out of memory.
// - "gpu": STOKER_DEVICE when the CUDA plugin is missing or no usable GPU exists; why says which.
// - "auto": CUDA when usable, else the CPU; why then explains the fallback ("" when CUDA was
//   used) so the caller can log it as "backend-fallback". Check (*out)->name for the choice.
// Any other string is STOKER_INVALID. On success *out is owned by the caller (backend_destroy).
// why (why_len bytes, may be NULL when why_len is 0) is always NUL-terminated on return.
int backend_create(const char *device, backend **out, char *why, size_t why_len);

// The CPU backend alone; never fails except STOKER_NOMEM.
int backend_cpu_create(backend **out);

// The CUDA backend alone, on device 0, from the plugin (libstoker-cuda.so, opened with dlopen on
// the first call; the trainer itself links no CUDA library). STOKER_DEVICE with a reason in why
// when the plugin cannot be found or loaded, or no GPU is usable. The search order is below;
// the plugin stays loaded until the process ends.
int backend_cuda_create(backend **out, char *why, size_t why_len);

// Where the plugin is looked for, first match wins (docs/operating.md, "The CUDA backend"):
//   1. $STOKER_CUDA_PLUGIN, a path to the .so: when set, the only place looked at;
//   2. libstoker-cuda.so beside the running executable (a build tree's trainer/, a gpu-pack);
//   3. STOKER_CUDA_PLUGIN_PATH, where meson install (and the stoker-cuda package) puts it.

// The one symbol the plugin exports (a version script hides the rest): a stoker_cuda_plugin
// named STOKER_CUDA_PLUGIN_SYMBOL. The loader checks abi, the two sizes and version (the
// project's, STOKER_VERSION) before calling create, so a plugin of another build is refused with
// the reason rather than crashing.
#define STOKER_CUDA_PLUGIN_ABI    1
#define STOKER_CUDA_PLUGIN_SYMBOL "stoker_cuda_plugin_v1"
typedef struct stoker_cuda_plugin {
    uint32_t abi;          // STOKER_CUDA_PLUGIN_ABI
    uint32_t backend_size; // sizeof(backend)
    uint32_t ops_size;     // sizeof(backend_ops)
    const char *version;   // STOKER_VERSION of the plugin's build
    // The CUDA backend on device 0, as backend_cuda_create says.
    int (*create)(backend **out, char *why, size_t why_len);
} stoker_cuda_plugin;

// Accepts NULL.
void backend_destroy(backend *be);

// The last failure's description; "" when none. Borrowed, valid until the next call on be.
const char *backend_error(const backend *be);

#endif
