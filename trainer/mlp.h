// A multilayer perceptron trained with Adam: input -> hidden layers with ReLU -> output, with
// mean squared error on float targets or softmax cross-entropy on int32 class labels. It runs
// every numeric operation through a backend (backend.h) and never touches CUDA itself. It does
// not own the backend, read batches from anywhere, or decide when to stop: the caller does.
#ifndef STOKER_TRAINER_MLP_H
#define STOKER_TRAINER_MLP_H

#include "backend.h"

#include <stddef.h>
#include <stdint.h>

#define MLP_MAX_LAYERS 16    // hidden layers + the output layer
#define MLP_MAX_WIDTH  65536 // any one layer's width

typedef struct mlp mlp;

typedef struct mlp_config {
    uint32_t input;         // features per example
    const uint32_t *hidden; // hidden widths, e.g. {16} or {64, 32}; borrowed during mlp_create
    uint32_t hidden_count;  // 0 makes a linear model
    uint32_t output;        // outputs per example (MSE); with classes > 0, 0 or == classes
    uint32_t classes;       // > 0: softmax cross-entropy on int32 labels in [0, classes)
    uint64_t seed;          // initial weights: same seed, same weights on every backend
    float lr;               // Adam learning rate, e.g. 0.001
} mlp_config;

// Builds the network on be (borrowed: it must outlive the mlp). Weights: He normal for the ReLU
// layers, Glorot uniform for the last, biases 0, drawn on the host from cfg->seed.
// Returns STOKER_OK and *out (owned by the caller, mlp_destroy), STOKER_INVALID for a bad
// config, or the backend's error (STOKER_NOMEM, STOKER_DEVICE); why (why_len bytes, NULL if 0)
// then says what was wrong.
int mlp_create(backend *be, const mlp_config *cfg, mlp **out, char *why, size_t why_len);

// Accepts NULL.
void mlp_destroy(mlp *net);

// One training step: forward, loss, backward, Adam update. x is (batch, input) floats; y is
// (batch, output) floats for MSE or (batch) int32 labels for cross-entropy. x and y are
// borrowed for the call only. When loss_out is non-NULL the loss of this batch (before the
// update) is written there, which waits for the device; pass NULL to let a GPU run ahead (the
// next batch's copy then overlaps this step) and read it later with mlp_last_loss.
// Returns STOKER_INVALID for batch 0 or a label out of range (nothing is updated), else the
// backend's status.
int mlp_step(mlp *net, const float *x, const void *y, uint32_t batch, float *loss_out);

// Loss of the latest mlp_step / mlp_loss / mlp_gradients call; waits for the device.
int mlp_last_loss(mlp *net, float *loss_out);

// Forward pass only: out (batch, output) receives the last layer's values (logits for
// cross-entropy, no softmax). Borrows x and out.
int mlp_forward(mlp *net, const float *x, uint32_t batch, float *out);

// Loss of a batch without updating anything.
int mlp_loss(mlp *net, const float *x, const void *y, uint32_t batch, float *loss_out);

// Loss and gradient of a batch without updating anything: grads receives mlp_param_count()
// floats in the mlp_get_params order. For tests and diagnostics.
int mlp_gradients(mlp *net, const float *x, const void *y, uint32_t batch, float *loss_out,
                  float *grads);

// Number of parameters: sum over layers of out*in + out.
size_t mlp_param_count(const mlp *net);
// Copies all parameters to params (count must equal mlp_param_count), layer by layer, each
// layer's weight (out, in) row-major then its bias (out). STOKER_INVALID on a count mismatch.
int mlp_get_params(mlp *net, float *params, size_t count);
// Replaces all parameters (same order); Adam's moments and step count are kept.
int mlp_set_params(mlp *net, const float *params, size_t count);

// Adam's state, for checkpoints: the first (m) and second (v) moments, count floats each in
// the mlp_get_params order, and the steps taken. get copies them out; set replaces them and the
// step count (the parameters are mlp_set_params's business). STOKER_INVALID on a count mismatch.
int mlp_get_adam(mlp *net, float *m, float *v, size_t count);
int mlp_set_adam(mlp *net, const float *m, const float *v, size_t count, uint64_t steps);

// Number of layers (hidden_count + 1), and layer i's (out, in) sizes; STOKER_INVALID for a bad i.
uint32_t mlp_layer_count(const mlp *net);
int mlp_layer_shape(const mlp *net, uint32_t layer, uint32_t *out_dim, uint32_t *in_dim);
uint32_t mlp_input_size(const mlp *net);
uint32_t mlp_output_size(const mlp *net);
// 0 for MSE.
uint32_t mlp_classes(const mlp *net);
// Adam steps taken so far.
uint64_t mlp_steps(const mlp *net);

// Writes the parameters as a safetensors file at path (atomically: a temporary file in the same
// folder, then rename), tensors layers.N.weight [out, in] and layers.N.bias [out], float32.
// STOKER_IO with a message on failure (see mlp_error).
int mlp_save(mlp *net, const char *path);

// The last failure's description; "" when none. Borrowed, valid until the next call on net.
const char *mlp_error(const mlp *net);

#endif
