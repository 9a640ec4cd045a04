// The MLP on the CPU backend against a double-precision reference network written here:
// forward values, gradients against finite differences of the double loss (MSE and
// cross-entropy), learning a simple function, seeding, argument checks. Also the safetensors
// writer and reader; with STOKER_SAFETENSORS_DIR set, the files written are kept there for
// check_safetensors.py.
#include "mlp.h"
#include "safetensors.h"

#include "stoker/error.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static mlp *
make(const uint32_t *hidden, uint32_t hidden_count, uint32_t in, uint32_t out, uint32_t classes,
     uint64_t seed, float lr)
{
    mlp_config cfg = {.input = in,
                      .hidden = hidden,
                      .hidden_count = hidden_count,
                      .output = out,
                      .classes = classes,
                      .seed = seed,
                      .lr = lr};
    mlp *net = NULL;
    char why[256];
    int rv = mlp_create(be, &cfg, &net, why, sizeof(why));
    cr_assert_eq(rv, STOKER_OK, "mlp_create: %s", why);
    return net;
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

// ---- the double reference network, over the parameter layout mlp_get_params documents ----

typedef struct ref_net {
    uint32_t layers;
    uint32_t dims[MLP_MAX_LAYERS + 1]; // dims[0] input ... dims[layers] output
} ref_net;

static ref_net
ref_of(mlp *net)
{
    ref_net r = {.layers = mlp_layer_count(net)};
    r.dims[0] = mlp_input_size(net);
    for (uint32_t l = 0; l < r.layers; l++) {
        uint32_t o, i;
        cr_assert_eq(mlp_layer_shape(net, l, &o, &i), STOKER_OK);
        cr_assert_eq(i, r.dims[l]);
        r.dims[l + 1] = o;
    }
    return r;
}

// out (batch, dims[layers]) in double.
static void
ref_forward(const ref_net *r, const double *params, const float *x, uint32_t batch, double *out)
{
    double a[64 * 64], next[64 * 64];
    cr_assert(batch * 64 <= 64 * 64);
    for (uint32_t i = 0; i < batch * r->dims[0]; i++)
        a[i] = x[i];
    const double *p = params;
    for (uint32_t l = 0; l < r->layers; l++) {
        uint32_t in = r->dims[l], o = r->dims[l + 1];
        cr_assert(in <= 64 && o <= 64);
        const double *w = p, *bias = p + (size_t)o * in;
        for (uint32_t b = 0; b < batch; b++)
            for (uint32_t j = 0; j < o; j++) {
                double acc = bias[j];
                for (uint32_t k = 0; k < in; k++)
                    acc += w[j * in + k] * a[b * in + k];
                next[b * o + j] = (l + 1 < r->layers && acc < 0) ? 0 : acc;
            }
        memcpy(a, next, sizeof(double) * batch * o);
        p += (size_t)o * in + o;
    }
    memcpy(out, a, sizeof(double) * batch * r->dims[r->layers]);
}

static double
ref_loss(const ref_net *r, const double *params, const float *x, const void *y, uint32_t batch,
         uint32_t classes)
{
    double out[64 * 64];
    ref_forward(r, params, x, batch, out);
    uint32_t n_out = r->dims[r->layers];
    double sum = 0;
    if (classes == 0) {
        const float *t = y;
        for (uint32_t i = 0; i < batch * n_out; i++)
            sum += (out[i] - t[i]) * (out[i] - t[i]);
        return sum / (batch * n_out);
    }
    const int32_t *labels = y;
    for (uint32_t b = 0; b < batch; b++) {
        const double *row = out + b * n_out;
        double max = row[0], denom = 0;
        for (uint32_t c = 1; c < n_out; c++)
            max = fmax(max, row[c]);
        for (uint32_t c = 0; c < n_out; c++)
            denom += exp(row[c] - max);
        sum += log(denom) + max - row[labels[b]];
    }
    return sum / batch;
}

// Compares mlp_gradients with central differences of the double loss at the same parameters.
static void
check_gradients(mlp *net, const float *x, const void *y, uint32_t batch, uint32_t classes)
{
    ref_net r = ref_of(net);
    size_t n = mlp_param_count(net);
    float *pf = malloc(n * sizeof(float)), *grads = malloc(n * sizeof(float));
    double *pd = malloc(n * sizeof(double)), *numeric = malloc(n * sizeof(double));
    cr_assert(pf && grads && pd && numeric);
    cr_assert_eq(mlp_get_params(net, pf, n), STOKER_OK);
    for (size_t i = 0; i < n; i++)
        pd[i] = pf[i];
    float loss;
    cr_assert_eq(mlp_gradients(net, x, y, batch, &loss, grads), STOKER_OK, "%s", mlp_error(net));
    double want = ref_loss(&r, pd, x, y, batch, classes);
    cr_assert(fabs(loss - want) <= 1e-5 * (1 + fabs(want)), "loss %g, reference %g", (double)loss,
              want);

    const double h = 1e-6;
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        double saved = pd[i];
        pd[i] = saved + h;
        double up = ref_loss(&r, pd, x, y, batch, classes);
        pd[i] = saved - h;
        double down = ref_loss(&r, pd, x, y, batch, classes);
        pd[i] = saved;
        numeric[i] = (up - down) / (2 * h);
        worst = fmax(worst, fabs(grads[i] - numeric[i]));
        scale = fmax(scale, fabs(numeric[i]));
    }
    // Relative to the largest gradient component: per-element ratios would be dominated by
    // components that are zero up to rounding.
    double err = worst / fmax(scale, 1e-12);
    cr_assert_lt(err, 1e-3, "gradient relative error %g (largest component %g)", err, scale);
    // And the large components one by one.
    for (size_t i = 0; i < n; i++)
        if (fabs(numeric[i]) > 0.1 * scale)
            cr_assert(fabs(grads[i] - numeric[i]) <= 1e-3 * fabs(numeric[i]),
                      "parameter %zu: analytic %g, numeric %g", i, (double)grads[i], numeric[i]);
    free(pf);
    free(grads);
    free(pd);
    free(numeric);
}

Test(mlp, mse_gradient_matches_finite_differences, .init = setup, .fini = teardown)
{
    const uint32_t hidden[] = {6, 5};
    mlp *net = make(hidden, 2, 4, 2, 0, 11, 1e-3f);
    float x[8 * 4], y[8 * 2];
    fill(x, 8 * 4, 1);
    fill(y, 8 * 2, 2);
    check_gradients(net, x, y, 8, 0);
    mlp_destroy(net);
}

Test(mlp, crossentropy_gradient_matches_finite_differences, .init = setup, .fini = teardown)
{
    const uint32_t hidden[] = {7};
    mlp *net = make(hidden, 1, 3, 0, 4, 12, 1e-3f);
    float x[6 * 3];
    const int32_t labels[6] = {0, 1, 2, 3, 2, 1};
    fill(x, 6 * 3, 3);
    check_gradients(net, x, labels, 6, 4);
    mlp_destroy(net);
}

Test(mlp, linear_model_gradient_matches_finite_differences, .init = setup, .fini = teardown)
{
    mlp *net = make(NULL, 0, 5, 3, 0, 13, 1e-3f);
    float x[4 * 5], y[4 * 3];
    fill(x, 4 * 5, 4);
    fill(y, 4 * 3, 5);
    check_gradients(net, x, y, 4, 0);
    mlp_destroy(net);
}

Test(mlp, forward_matches_double_reference, .init = setup, .fini = teardown)
{
    const uint32_t hidden[] = {16};
    mlp *net = make(hidden, 1, 10, 1, 0, 1, 1e-3f);
    ref_net r = ref_of(net);
    size_t n = mlp_param_count(net);
    cr_assert_eq(n, 10 * 16 + 16 + 16 + 1);
    float *pf = malloc(n * sizeof(float));
    double *pd = malloc(n * sizeof(double));
    cr_assert_eq(mlp_get_params(net, pf, n), STOKER_OK);
    for (size_t i = 0; i < n; i++)
        pd[i] = pf[i];
    float x[4 * 10], out[4];
    double want[4];
    fill(x, 40, 6);
    cr_assert_eq(mlp_forward(net, x, 4, out), STOKER_OK);
    ref_forward(&r, pd, x, 4, want);
    for (int i = 0; i < 4; i++)
        cr_assert(fabs(out[i] - want[i]) <= 1e-5 * (1 + fabs(want[i])), "out[%d] %g vs %g", i,
                  (double)out[i], want[i]);
    free(pf);
    free(pd);
    mlp_destroy(net);
}

// y = x0 * x1 + sin(2 x2): the default trainer shape (10 inputs, 16 hidden, 1 output).
static void
target_fn(const float *x, uint32_t batch, float *y)
{
    for (uint32_t b = 0; b < batch; b++)
        y[b] = x[b * 10 + 0] * x[b * 10 + 1] + sinf(2 * x[b * 10 + 2]);
}

Test(mlp, learns_a_simple_function, .init = setup, .fini = teardown)
{
    const uint32_t hidden[] = {32};
    mlp *net = make(hidden, 1, 10, 1, 0, 7, 1e-2f);
    enum { BATCH = 32, EVAL = 64 };
    float x_eval[EVAL * 10], y_eval[EVAL], x[BATCH * 10], y[BATCH];
    fill(x_eval, EVAL * 10, 100);
    target_fn(x_eval, EVAL, y_eval);
    float before, after, step_loss;
    cr_assert_eq(mlp_loss(net, x_eval, y_eval, EVAL, &before), STOKER_OK);
    for (uint32_t s = 0; s < 500; s++) {
        fill(x, BATCH * 10, 1000 + s);
        target_fn(x, BATCH, y);
        cr_assert_eq(mlp_step(net, x, y, BATCH, s % 50 == 0 ? &step_loss : NULL), STOKER_OK, "%s",
                     mlp_error(net));
    }
    cr_assert_eq(mlp_steps(net), 500);
    cr_assert_eq(mlp_loss(net, x_eval, y_eval, EVAL, &after), STOKER_OK);
    cr_assert_lt(after, 0.2f * before, "held-out loss %g -> %g", (double)before, (double)after);
    mlp_destroy(net);
}

Test(mlp, learns_to_classify, .init = setup, .fini = teardown)
{
    // Class = which of the first 3 inputs is largest.
    const uint32_t hidden[] = {16};
    mlp *net = make(hidden, 1, 4, 0, 3, 8, 1e-2f);
    enum { BATCH = 32 };
    float x[BATCH * 4];
    int32_t labels[BATCH];
    float first = 0, last = 0;
    for (uint32_t s = 0; s < 400; s++) {
        fill(x, BATCH * 4, 5000 + s);
        for (int b = 0; b < BATCH; b++) {
            int best = 0;
            for (int c = 1; c < 3; c++)
                if (x[b * 4 + c] > x[b * 4 + best])
                    best = c;
            labels[b] = best;
        }
        float l;
        cr_assert_eq(mlp_step(net, x, labels, BATCH, &l), STOKER_OK, "%s", mlp_error(net));
        if (s == 0)
            first = l;
        last = l;
    }
    cr_assert_lt(last, 0.5f * first, "loss %g -> %g", (double)first, (double)last);
    mlp_destroy(net);
}

Test(mlp, same_seed_gives_same_weights_and_other_seeds_differ, .init = setup, .fini = teardown)
{
    const uint32_t hidden[] = {8, 4};
    mlp *a = make(hidden, 2, 3, 2, 0, 42, 1e-3f), *b = make(hidden, 2, 3, 2, 0, 42, 1e-3f),
        *c = make(hidden, 2, 3, 2, 0, 43, 1e-3f);
    size_t n = mlp_param_count(a);
    float *pa = malloc(n * sizeof(float)), *pb = malloc(n * sizeof(float)),
          *pc = malloc(n * sizeof(float));
    mlp_get_params(a, pa, n);
    mlp_get_params(b, pb, n);
    mlp_get_params(c, pc, n);
    cr_assert_arr_eq(pa, pb, n * sizeof(float));
    cr_assert(memcmp(pa, pc, n * sizeof(float)) != 0);
    // Biases start at zero: layer 0 bias follows its 8x3 weight.
    for (int i = 0; i < 8; i++)
        cr_assert_eq(pa[24 + i], 0.0f);
    free(pa);
    free(pb);
    free(pc);
    mlp_destroy(a);
    mlp_destroy(b);
    mlp_destroy(c);
}

Test(mlp, bad_configs_are_refused_with_a_reason, .init = setup, .fini = teardown)
{
    const uint32_t zero[] = {0};
    const mlp_config bad[] = {
        {.input = 0, .output = 1, .lr = 1e-3f},
        {.input = 3, .output = 0, .lr = 1e-3f},
        {.input = 3, .output = 1, .hidden = zero, .hidden_count = 1, .lr = 1e-3f},
        {.input = 3, .output = 2, .classes = 3, .lr = 1e-3f},
        {.input = 3, .classes = 1, .lr = 1e-3f},
        {.input = 3, .output = 1, .lr = 0},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mlp *net = NULL;
        char why[256];
        cr_assert_eq(mlp_create(be, &bad[i], &net, why, sizeof(why)), STOKER_INVALID, "config %zu",
                     i);
        cr_assert_null(net);
        cr_assert_str_not_empty(why, "config %zu", i);
    }
}

Test(mlp, label_out_of_range_is_refused_and_nothing_changes, .init = setup, .fini = teardown)
{
    mlp *net = make(NULL, 0, 2, 0, 3, 9, 1e-2f);
    size_t n = mlp_param_count(net);
    float before[9], after[9];
    cr_assert_eq(n, 9);
    mlp_get_params(net, before, n);
    const float x[2 * 2] = {1, 2, 3, 4};
    const int32_t labels[2] = {0, 3};
    cr_assert_eq(mlp_step(net, x, labels, 2, NULL), STOKER_INVALID);
    cr_assert(strstr(mlp_error(net), "label 3") != NULL, "%s", mlp_error(net));
    cr_assert_eq(mlp_step(net, x, labels, 0, NULL), STOKER_INVALID);
    mlp_get_params(net, after, n);
    cr_assert_arr_eq(before, after, sizeof(before));
    cr_assert_eq(mlp_steps(net), 0);
    mlp_destroy(net);
}

Test(mlp, batch_size_may_grow_and_shrink, .init = setup, .fini = teardown)
{
    const uint32_t hidden[] = {5};
    mlp *net = make(hidden, 1, 3, 2, 0, 10, 1e-3f);
    float x[64 * 3], y[64 * 2], loss;
    fill(x, 64 * 3, 20);
    fill(y, 64 * 2, 21);
    const uint32_t sizes[] = {4, 64, 1, 17};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(mlp_step(net, x, y, sizes[i], &loss), STOKER_OK, "%s", mlp_error(net));
    check_gradients(net, x, y, 17, 0);
    mlp_destroy(net);
}

// ---- safetensors ----

// Where to write: $STOKER_SAFETENSORS_DIR when set (check_safetensors.py reads the files
// afterwards), else a fresh temporary folder removed at the end.
static bool
out_dir(char *dir, size_t len)
{
    const char *keep = getenv("STOKER_SAFETENSORS_DIR");
    if (keep != NULL && keep[0] != '\0') {
        snprintf(dir, len, "%s", keep);
        return true;
    }
    snprintf(dir, len, "/tmp/stoker-st-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    return false;
}

static void
remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

static size_t
count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

// The values check_safetensors.py expects in fixture.safetensors (exact in float).
static float
fixture_value(int tensor, int i)
{
    switch (tensor) {
    case 0:
        return 0.25f * i - 1.0f; // layers.0.weight [3, 2]
    case 1:
        return 0.5f * i; // layers.0.bias [3]
    case 2:
        return -0.125f * i; // layers.1.weight [1, 3]
    default:
        return 42.0f; // layers.1.bias [1]
    }
}

Test(safetensors, round_trip_through_our_reader)
{
    char dir[256], path[512], err[256];
    bool keep = out_dir(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/fixture.safetensors", dir);
    float data[4][6];
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < 6; i++)
            data[t][i] = fixture_value(t, i);
    // Deliberately unsorted: the writer sorts.
    const safetensors_tensor tensors[4] = {
        {.name = "layers.1.weight", .ndim = 2, .shape = {1, 3}, .data = data[2]},
        {.name = "layers.0.weight", .ndim = 2, .shape = {3, 2}, .data = data[0]},
        {.name = "layers.1.bias", .ndim = 1, .shape = {1}, .data = data[3]},
        {.name = "layers.0.bias", .ndim = 1, .shape = {3}, .data = data[1]},
    };
    cr_assert_eq(safetensors_write(path, tensors, 4, err, sizeof(err)), STOKER_OK, "%s", err);

    safetensors_file *f = NULL;
    cr_assert_eq(safetensors_read(path, &f, err, sizeof(err)), STOKER_OK, "%s", err);
    cr_assert_eq(safetensors_count(f), 4);
    const char *order[4] = {"layers.0.bias", "layers.0.weight", "layers.1.bias", "layers.1.weight"};
    for (size_t i = 0; i < 4; i++)
        cr_assert_str_eq(safetensors_get(f, i)->name, order[i]);
    const safetensors_tensor *w = safetensors_find(f, "layers.0.weight");
    cr_assert_not_null(w);
    cr_assert_eq(w->ndim, 2);
    cr_assert_eq(w->shape[0], 3);
    cr_assert_eq(w->shape[1], 2);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(w->data[i], fixture_value(0, i));
    cr_assert_eq(safetensors_find(f, "layers.1.bias")->data[0], 42.0f);
    cr_assert_null(safetensors_find(f, "layers.2.bias"));
    safetensors_destroy(f);
    if (!keep) {
        cr_assert_eq(count_entries(dir), 1, "no temporary file may be left behind");
        remove_dir(dir);
    }
}

Test(safetensors, mlp_save_writes_every_layer_readably, .init = setup, .fini = teardown)
{
    char dir[256], path[512], err[256];
    bool keep = out_dir(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/mlp.safetensors", dir);
    const uint32_t hidden[] = {16, 8};
    mlp *net = make(hidden, 2, 10, 1, 0, 3, 1e-3f);
    // Save twice: the second replaces the first atomically.
    cr_assert_eq(mlp_save(net, path), STOKER_OK, "%s", mlp_error(net));
    cr_assert_eq(mlp_save(net, path), STOKER_OK, "%s", mlp_error(net));
    size_t n = mlp_param_count(net);
    float *params = malloc(n * sizeof(float));
    cr_assert_eq(mlp_get_params(net, params, n), STOKER_OK);

    safetensors_file *f = NULL;
    cr_assert_eq(safetensors_read(path, &f, err, sizeof(err)), STOKER_OK, "%s", err);
    cr_assert_eq(safetensors_count(f), 6);
    size_t offset = 0;
    for (uint32_t l = 0; l < 3; l++) {
        uint32_t o, i;
        mlp_layer_shape(net, l, &o, &i);
        char name[32];
        snprintf(name, sizeof(name), "layers.%u.weight", l);
        const safetensors_tensor *w = safetensors_find(f, name);
        cr_assert_not_null(w, "%s", name);
        cr_assert(w->ndim == 2 && w->shape[0] == o && w->shape[1] == i, "%s shape", name);
        cr_assert_arr_eq(w->data, params + offset, (size_t)o * i * sizeof(float));
        offset += (size_t)o * i;
        snprintf(name, sizeof(name), "layers.%u.bias", l);
        const safetensors_tensor *b = safetensors_find(f, name);
        cr_assert_not_null(b, "%s", name);
        cr_assert(b->ndim == 1 && b->shape[0] == o, "%s shape", name);
        cr_assert_arr_eq(b->data, params + offset, o * sizeof(float));
        offset += o;
    }
    safetensors_destroy(f);
    free(params);
    mlp_destroy(net);
    if (!keep) {
        cr_assert_eq(count_entries(dir), 1, "no temporary file may be left behind");
        remove_dir(dir);
    }
}

Test(safetensors, duplicate_names_are_refused)
{
    char dir[256], path[512], err[256];
    snprintf(dir, sizeof(dir), "/tmp/stoker-st-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/dup.safetensors", dir);
    const float v[1] = {1};
    const safetensors_tensor t[2] = {{.name = "a", .ndim = 1, .shape = {1}, .data = v},
                                     {.name = "a", .ndim = 1, .shape = {1}, .data = v}};
    cr_assert_eq(safetensors_write(path, t, 2, err, sizeof(err)), STOKER_INVALID);
    cr_assert(strstr(err, "'a'") != NULL, "%s", err);
    cr_assert_eq(count_entries(dir), 0);
    remove_dir(dir);
}

Test(safetensors, malformed_files_are_refused_not_crashed_on)
{
    char dir[256], path[512], err[256];
    snprintf(dir, sizeof(dir), "/tmp/stoker-st-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/bad.safetensors", dir);
    struct {
        const char *header;
        size_t data_bytes;
    } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8},  // unclosed
        {"{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4}, // dtype
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8}, // shape
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4}, // past end
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8},                        // no offsets
        {"[1,2]", 0},                                                            // not object
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        FILE *f = fopen(path, "wb");
        cr_assert_not_null(f);
        uint64_t len = strlen(cases[c].header);
        fwrite(&len, 8, 1, f);
        fwrite(cases[c].header, 1, len, f);
        for (size_t i = 0; i < cases[c].data_bytes; i++)
            fputc(0, f);
        fclose(f);
        safetensors_file *st = NULL;
        cr_assert_eq(safetensors_read(path, &st, err, sizeof(err)), STOKER_INVALID, "case %zu", c);
        cr_assert_null(st);
        cr_assert_str_not_empty(err, "case %zu", c);
    }
    // A header length larger than the file.
    FILE *f = fopen(path, "wb");
    uint64_t len = 1000;
    fwrite(&len, 8, 1, f);
    fclose(f);
    safetensors_file *st = NULL;
    cr_assert_eq(safetensors_read(path, &st, err, sizeof(err)), STOKER_INVALID);
    unlink(path);
    cr_assert_eq(safetensors_read(path, &st, err, sizeof(err)), STOKER_IO);
    remove_dir(dir);
}
