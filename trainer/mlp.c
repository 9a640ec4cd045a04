// The MLP: layer bookkeeping, forward and backward passes composed from backend operations, and
// Adam. Parameters, their gradients and Adam's two moments live in ONE backend allocation
// carved into views (llm.c's malloc_and_point_parameters); activations in a second one that
// grows with the batch. No CUDA here, and no knowledge of where batches come from.
// Initial weights are drawn on the host with a local splitmix64 so trainer_core needs only
// libstoker's headers (the GPU machine may build it without the network libraries).
#include "mlp.h"
#include "safetensors.h"

#include "stoker/error.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct layer {
    uint32_t in_dim, out_dim;
    size_t weight_offset, bias_offset; // into the parameter vector, in floats
    float *weight, *bias;              // views: (out, in), (out)
    float *dweight, *dbias;            // views into the gradient region, same shapes
    float *act;                        // (batch, out): output after bias (and ReLU if hidden)
} layer;

struct mlp {
    backend *be; // borrowed
    uint32_t input, output, classes;
    uint32_t layer_count;
    layer layers[MLP_MAX_LAYERS];
    float lr;
    uint64_t step;

    size_t param_count;
    float *mem;    // device: params | grads | m | v, 4 * param_count floats
    float *params; // views into mem
    float *grads;
    float *adam_m;
    float *adam_v;

    uint32_t act_batch; // batch the activation buffer is sized for
    float *act_mem;     // device: every layer's act, two gradient buffers, the loss
    float *dbuf[2];     // (act_batch, widest layer) each, ping-ponged through backward
    float *loss;        // one float
    bool have_loss;

    char error[256];
};

// A backend operation failed: keep its message.
static int
backend_failed(mlp *net, int rv)
{
    if (rv != STOKER_OK)
        snprintf(net->error, sizeof(net->error), "%s backend: %s", net->be->name,
                 backend_error(net->be));
    return rv;
}

// ---- initialisation ----

static uint64_t
splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Uniform in (0, 1), never 0 so log() below is finite.
static double
uniform01(uint64_t *state)
{
    return ((double)(splitmix64(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static double
normal(uint64_t *state)
{
    double u1 = uniform01(state), u2 = uniform01(state);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

// He normal (std sqrt(2/in)) for the ReLU layers, Glorot uniform (limit sqrt(6/(in+out))) for
// the last, which feeds a linear output or a softmax. Biases start at 0.
static void
init_params(const mlp *net, uint64_t seed, float *host)
{
    uint64_t state = seed;
    memset(host, 0, net->param_count * sizeof(float));
    for (uint32_t l = 0; l < net->layer_count; l++) {
        const layer *ly = &net->layers[l];
        float *w = host + ly->weight_offset;
        size_t n = (size_t)ly->out_dim * ly->in_dim;
        if (l + 1 < net->layer_count) {
            double std = sqrt(2.0 / ly->in_dim);
            for (size_t i = 0; i < n; i++)
                w[i] = (float)(std * normal(&state));
        } else {
            double limit = sqrt(6.0 / (ly->in_dim + ly->out_dim));
            for (size_t i = 0; i < n; i++)
                w[i] = (float)(limit * (2.0 * uniform01(&state) - 1.0));
        }
    }
}

static int
check_config(const mlp_config *cfg, uint32_t *output, char *why, size_t why_len)
{
    *output = cfg->output;
    if (cfg->classes > 0) {
        if (cfg->output != 0 && cfg->output != cfg->classes) {
            return stoker_errorf(why, why_len, STOKER_INVALID, "output %u differs from classes %u",
                                 cfg->output, cfg->classes);
        }
        if (cfg->classes < 2) {
            return stoker_errorf(why, why_len, STOKER_INVALID,
                                 "classes %u: cross-entropy needs at least 2", cfg->classes);
        }
        *output = cfg->classes;
    }
    if (cfg->input == 0 || cfg->input > MLP_MAX_WIDTH || *output == 0 || *output > MLP_MAX_WIDTH) {
        return stoker_errorf(why, why_len, STOKER_INVALID,
                             "input %u and output %u must be within 1..%u", cfg->input, *output,
                             MLP_MAX_WIDTH);
    }
    if (cfg->hidden_count + 1 > MLP_MAX_LAYERS || (cfg->hidden_count > 0 && !cfg->hidden)) {
        return stoker_errorf(why, why_len, STOKER_INVALID, "%u hidden layers: at most %u",
                             cfg->hidden_count, MLP_MAX_LAYERS - 1);
    }
    for (uint32_t i = 0; i < cfg->hidden_count; i++) {
        if (cfg->hidden[i] == 0 || cfg->hidden[i] > MLP_MAX_WIDTH) {
            return stoker_errorf(why, why_len, STOKER_INVALID,
                                 "hidden layer %u has width %u: must be within 1..%u", i,
                                 cfg->hidden[i], MLP_MAX_WIDTH);
        }
    }
    if (!(cfg->lr > 0.0f) || !isfinite(cfg->lr)) {
        return stoker_errorf(why, why_len, STOKER_INVALID, "learning rate %g must be positive",
                             (double)cfg->lr);
    }
    return STOKER_OK;
}

int
mlp_create(backend *be, const mlp_config *cfg, mlp **out, char *why, size_t why_len)
{
    char reason[256] = "";
    if (why_len > 0)
        why[0] = '\0';
    mlp *net = calloc(1, sizeof(*net));
    if (net == NULL)
        return STOKER_NOMEM;
    int rv = check_config(cfg, &net->output, reason, sizeof(reason));
    if (rv != STOKER_OK) {
        if (why_len > 0)
            snprintf(why, why_len, "bad network: %s", reason);
        free(net);
        return rv;
    }
    net->be = be;
    net->input = cfg->input;
    net->classes = cfg->classes;
    net->lr = cfg->lr;
    net->layer_count = cfg->hidden_count + 1;

    // Lay out the parameter vector: layer by layer, weight then bias.
    size_t offset = 0;
    for (uint32_t l = 0; l < net->layer_count; l++) {
        layer *ly = &net->layers[l];
        ly->in_dim = l == 0 ? cfg->input : cfg->hidden[l - 1];
        ly->out_dim = l + 1 < net->layer_count ? cfg->hidden[l] : net->output;
        ly->weight_offset = offset;
        offset += (size_t)ly->out_dim * ly->in_dim;
        ly->bias_offset = offset;
        offset += ly->out_dim;
    }
    net->param_count = offset;

    if ((rv = be->ops->alloc(be, 4 * net->param_count, &net->mem)) != STOKER_OK) {
        if (why_len > 0)
            snprintf(why, why_len, "cannot allocate %zu parameters on the %s backend: %s",
                     net->param_count, be->name, backend_error(be));
        free(net);
        return rv;
    }
    net->params = net->mem;
    net->grads = net->mem + net->param_count;
    net->adam_m = net->mem + 2 * net->param_count;
    net->adam_v = net->mem + 3 * net->param_count;
    for (uint32_t l = 0; l < net->layer_count; l++) {
        layer *ly = &net->layers[l];
        ly->weight = net->params + ly->weight_offset;
        ly->bias = net->params + ly->bias_offset;
        ly->dweight = net->grads + ly->weight_offset;
        ly->dbias = net->grads + ly->bias_offset;
    }

    float *host = malloc(net->param_count * sizeof(float));
    if (host == NULL) {
        rv = STOKER_NOMEM;
        goto free_mem;
    }
    init_params(net, cfg->seed, host);
    rv = be->ops->upload(be, net->params, host, net->param_count);
    free(host);
    if (rv != STOKER_OK)
        goto free_mem;
    *out = net;
    return STOKER_OK;

free_mem:
    if (why_len > 0)
        snprintf(why, why_len, "cannot set up the network on the %s backend: %s", be->name,
                 rv == STOKER_NOMEM && !be->error[0] ? "out of memory" : backend_error(be));
    be->ops->free(be, net->mem);
    free(net);
    return rv;
}

void
mlp_destroy(mlp *net)
{
    if (net == NULL)
        return;
    net->be->ops->free(net->be, net->act_mem);
    net->be->ops->free(net->be, net->mem);
    free(net);
}

// Makes room for batch rows of activations: each layer's output, two gradient buffers as wide
// as the widest layer, and the loss.
static int
reserve_activations(mlp *net, uint32_t batch)
{
    if (batch <= net->act_batch)
        return STOKER_OK;
    uint32_t widest = 0;
    size_t total = 0;
    for (uint32_t l = 0; l < net->layer_count; l++) {
        total += (size_t)batch * net->layers[l].out_dim;
        if (net->layers[l].out_dim > widest)
            widest = net->layers[l].out_dim;
    }
    total += 2 * (size_t)batch * widest + 1;
    // cuBLAS takes int sizes.
    if ((size_t)batch * widest > INT32_MAX || (size_t)batch * net->input > INT32_MAX)
        return stoker_errorf(net->error, sizeof(net->error), STOKER_INVALID,
                             "batch %u too large for this network", batch);

    float *mem = NULL;
    int rv = net->be->ops->alloc(net->be, total, &mem);
    if (rv != STOKER_OK)
        return backend_failed(net, rv);
    // The old buffer may still be read by queued work; the backend's free waits for it.
    net->be->ops->free(net->be, net->act_mem);
    net->act_mem = mem;
    net->act_batch = batch;
    float *p = mem;
    for (uint32_t l = 0; l < net->layer_count; l++) {
        net->layers[l].act = p;
        p += (size_t)batch * net->layers[l].out_dim;
    }
    net->dbuf[0] = p;
    p += (size_t)batch * widest;
    net->dbuf[1] = p;
    p += (size_t)batch * widest;
    net->loss = p;
    net->have_loss = false;
    return STOKER_OK;
}

// Checks the arguments of a batch and uploads it. y may be NULL for a forward pass only.
static int
prepare(mlp *net, const float *x, const void *y, uint32_t batch, const float **x_dev,
        const void **y_dev)
{
    net->error[0] = '\0';
    if (batch == 0 || x == NULL)
        return stoker_errorf(net->error, sizeof(net->error), STOKER_INVALID, "empty batch");
    size_t y_bytes = 0;
    if (y != NULL && net->classes > 0) {
        const int32_t *labels = y;
        for (uint32_t b = 0; b < batch; b++)
            if (labels[b] < 0 || (uint32_t)labels[b] >= net->classes)
                return stoker_errorf(net->error, sizeof(net->error), STOKER_INVALID,
                                     "label %d of example %u is outside [0, %u): check --classes",
                                     labels[b], b, net->classes);
        y_bytes = (size_t)batch * sizeof(int32_t);
    } else if (y != NULL) {
        y_bytes = (size_t)batch * net->output * sizeof(float);
    }
    int rv = reserve_activations(net, batch);
    if (rv != STOKER_OK)
        return rv;
    rv = net->be->ops->batch_upload(net->be, x, (size_t)batch * net->input, y, y_bytes, x_dev,
                                    y_dev);
    return backend_failed(net, rv);
}

static int
forward(mlp *net, const float *x_dev, uint32_t batch)
{
    backend *be = net->be;
    const float *inp = x_dev; // (batch, in)
    for (uint32_t l = 0; l < net->layer_count; l++) {
        layer *ly = &net->layers[l];
        bool relu = l + 1 < net->layer_count;
        int rv =
            be->ops->matmul_forward(be, ly->act, inp, ly->weight, batch, ly->in_dim, ly->out_dim);
        if (rv == STOKER_OK)
            rv = be->ops->bias_act_forward(be, ly->act, ly->bias, batch, ly->out_dim, relu);
        if (rv != STOKER_OK)
            return backend_failed(net, rv);
        inp = ly->act; // (batch, out)
    }
    return STOKER_OK;
}

// Loss into net->loss and its gradient w.r.t. the last layer's output into dbuf[0].
static int
loss(mlp *net, const void *y_dev, uint32_t batch)
{
    backend *be = net->be;
    const float *pred = net->layers[net->layer_count - 1].act; // (batch, output)
    int rv;
    if (net->classes > 0)
        rv = be->ops->crossentropy_loss(be, net->loss, net->dbuf[0], pred, y_dev, batch,
                                        net->classes);
    else
        rv = be->ops->mse_loss(be, net->loss, net->dbuf[0], pred, y_dev, batch, net->output);
    net->have_loss = rv == STOKER_OK;
    return backend_failed(net, rv);
}

// Gradients of every parameter from dbuf[0], overwriting the gradient region.
static int
backward(mlp *net, const float *x_dev, uint32_t batch)
{
    backend *be = net->be;
    float *dout = net->dbuf[0]; // (batch, out) of the current layer
    for (uint32_t l = net->layer_count; l-- > 0;) {
        layer *ly = &net->layers[l];
        const float *inp = l == 0 ? x_dev : net->layers[l - 1].act; // (batch, in)
        int rv = be->ops->matmul_backward_weight(be, ly->dweight, dout, inp, batch, ly->in_dim,
                                                 ly->out_dim);
        if (rv == STOKER_OK)
            rv = be->ops->bias_backward(be, ly->dbias, dout, batch, ly->out_dim);
        if (rv == STOKER_OK && l > 0) {
            float *dinp = dout == net->dbuf[0] ? net->dbuf[1] : net->dbuf[0]; // (batch, in)
            rv = be->ops->matmul_backward_input(be, dinp, dout, ly->weight, batch, ly->in_dim,
                                                ly->out_dim);
            // inp is the previous layer's ReLU output: no gradient where it was clamped.
            if (rv == STOKER_OK)
                rv = be->ops->relu_backward(be, dinp, inp, (size_t)batch * ly->in_dim);
            dout = dinp;
        }
        if (rv != STOKER_OK)
            return backend_failed(net, rv);
    }
    return STOKER_OK;
}

int
mlp_step(mlp *net, const float *x, const void *y, uint32_t batch, float *loss_out)
{
    const float *x_dev;
    const void *y_dev;
    if (y == NULL)
        return stoker_errorf(net->error, sizeof(net->error), STOKER_INVALID,
                             "mlp_step needs targets");
    int rv = prepare(net, x, y, batch, &x_dev, &y_dev);
    if (rv == STOKER_OK)
        rv = forward(net, x_dev, batch);
    if (rv == STOKER_OK)
        rv = loss(net, y_dev, batch);
    if (rv == STOKER_OK)
        rv = backward(net, x_dev, batch);
    if (rv != STOKER_OK)
        return rv;
    rv = net->be->ops->adam_step(net->be, net->params, net->grads, net->adam_m, net->adam_v,
                                 net->param_count, net->lr, net->step + 1);
    if (rv != STOKER_OK)
        return backend_failed(net, rv);
    net->step++;
    return loss_out ? mlp_last_loss(net, loss_out) : STOKER_OK;
}

int
mlp_last_loss(mlp *net, float *loss_out)
{
    if (!net->have_loss)
        return stoker_errorf(net->error, sizeof(net->error), STOKER_INVALID,
                             "no loss computed yet");
    return backend_failed(net, net->be->ops->download(net->be, loss_out, net->loss, 1));
}

int
mlp_forward(mlp *net, const float *x, uint32_t batch, float *out)
{
    const float *x_dev;
    const void *y_dev;
    int rv = prepare(net, x, NULL, batch, &x_dev, &y_dev);
    if (rv == STOKER_OK)
        rv = forward(net, x_dev, batch);
    if (rv != STOKER_OK)
        return rv;
    const float *last = net->layers[net->layer_count - 1].act;
    return backend_failed(net,
                          net->be->ops->download(net->be, out, last, (size_t)batch * net->output));
}

int
mlp_loss(mlp *net, const float *x, const void *y, uint32_t batch, float *loss_out)
{
    const float *x_dev;
    const void *y_dev;
    if (y == NULL)
        return stoker_errorf(net->error, sizeof(net->error), STOKER_INVALID,
                             "mlp_loss needs targets");
    int rv = prepare(net, x, y, batch, &x_dev, &y_dev);
    if (rv == STOKER_OK)
        rv = forward(net, x_dev, batch);
    if (rv == STOKER_OK)
        rv = loss(net, y_dev, batch);
    if (rv != STOKER_OK)
        return rv;
    return mlp_last_loss(net, loss_out);
}

int
mlp_gradients(mlp *net, const float *x, const void *y, uint32_t batch, float *loss_out,
              float *grads)
{
    const float *x_dev;
    const void *y_dev;
    if (y == NULL)
        return stoker_errorf(net->error, sizeof(net->error), STOKER_INVALID,
                             "mlp_gradients needs targets");
    int rv = prepare(net, x, y, batch, &x_dev, &y_dev);
    if (rv == STOKER_OK)
        rv = forward(net, x_dev, batch);
    if (rv == STOKER_OK)
        rv = loss(net, y_dev, batch);
    if (rv == STOKER_OK)
        rv = backward(net, x_dev, batch);
    if (rv == STOKER_OK && loss_out)
        rv = mlp_last_loss(net, loss_out);
    if (rv != STOKER_OK)
        return rv;
    return backend_failed(net,
                          net->be->ops->download(net->be, grads, net->grads, net->param_count));
}

size_t
mlp_param_count(const mlp *net)
{
    return net->param_count;
}

int
mlp_get_params(mlp *net, float *params, size_t count)
{
    if (count != net->param_count)
        return stoker_errorf(net->error, sizeof(net->error), STOKER_INVALID,
                             "asked for %zu parameters, the network has %zu", count,
                             net->param_count);
    return backend_failed(net, net->be->ops->download(net->be, params, net->params, count));
}

int
mlp_set_params(mlp *net, const float *params, size_t count)
{
    if (count != net->param_count)
        return stoker_errorf(net->error, sizeof(net->error), STOKER_INVALID,
                             "got %zu parameters, the network has %zu", count, net->param_count);
    return backend_failed(net, net->be->ops->upload(net->be, net->params, params, count));
}

int
mlp_get_adam(mlp *net, float *m, float *v, size_t count)
{
    if (count != net->param_count)
        return stoker_errorf(net->error, sizeof(net->error), STOKER_INVALID,
                             "asked for %zu moments, the network has %zu parameters", count,
                             net->param_count);
    int rv = net->be->ops->download(net->be, m, net->adam_m, count);
    if (rv == STOKER_OK)
        rv = net->be->ops->download(net->be, v, net->adam_v, count);
    return backend_failed(net, rv);
}

int
mlp_set_adam(mlp *net, const float *m, const float *v, size_t count, uint64_t steps)
{
    if (count != net->param_count)
        return stoker_errorf(net->error, sizeof(net->error), STOKER_INVALID,
                             "got %zu moments, the network has %zu parameters", count,
                             net->param_count);
    int rv = net->be->ops->upload(net->be, net->adam_m, m, count);
    if (rv == STOKER_OK)
        rv = net->be->ops->upload(net->be, net->adam_v, v, count);
    if (rv == STOKER_OK)
        net->step = steps;
    return backend_failed(net, rv);
}

uint32_t
mlp_layer_count(const mlp *net)
{
    return net->layer_count;
}

int
mlp_layer_shape(const mlp *net, uint32_t l, uint32_t *out_dim, uint32_t *in_dim)
{
    if (l >= net->layer_count)
        return STOKER_INVALID;
    *out_dim = net->layers[l].out_dim;
    *in_dim = net->layers[l].in_dim;
    return STOKER_OK;
}

uint32_t
mlp_input_size(const mlp *net)
{
    return net->input;
}

uint32_t
mlp_output_size(const mlp *net)
{
    return net->output;
}

uint32_t
mlp_classes(const mlp *net)
{
    return net->classes;
}

uint64_t
mlp_steps(const mlp *net)
{
    return net->step;
}

int
mlp_save(mlp *net, const char *path)
{
    float *host = malloc(net->param_count * sizeof(float));
    if (host == NULL)
        return stoker_errorf(net->error, sizeof(net->error), STOKER_NOMEM, "%s: out of memory",
                             path);
    int rv = mlp_get_params(net, host, net->param_count);
    if (rv != STOKER_OK) {
        free(host);
        return rv;
    }
    safetensors_tensor tensors[2 * MLP_MAX_LAYERS];
    char names[2 * MLP_MAX_LAYERS][32];
    for (uint32_t l = 0; l < net->layer_count; l++) {
        const layer *ly = &net->layers[l];
        snprintf(names[2 * l], sizeof(names[0]), "layers.%u.weight", l);
        snprintf(names[2 * l + 1], sizeof(names[0]), "layers.%u.bias", l);
        tensors[2 * l] = (safetensors_tensor){
            .name = names[2 * l],
            .ndim = 2,
            .shape = {ly->out_dim, ly->in_dim},
            .data = host + ly->weight_offset,
        };
        tensors[2 * l + 1] = (safetensors_tensor){
            .name = names[2 * l + 1],
            .ndim = 1,
            .shape = {ly->out_dim},
            .data = host + ly->bias_offset,
        };
    }
    rv = safetensors_write(path, tensors, 2 * net->layer_count, net->error, sizeof(net->error));
    free(host);
    return rv;
}

const char *
mlp_error(const mlp *net)
{
    return net->error;
}
