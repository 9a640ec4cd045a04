// Checkpoint files (see checkpoint.h): one safetensors file per checkpoint, built from the MLP's
// parameters and Adam state copied to the host, the position and pending identities as text in
// the header's metadata. Shapes are checked from the tensors themselves, so a file from another
// network is refused with the first layer that differs.
#include "checkpoint.h"
#include "safetensors.h"

#include "stoker/error.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FORMAT_VERSION "1"

int
checkpoint_runs_add(checkpoint_runs *runs, uint64_t session, uint64_t first_seq, uint64_t count)
{
    if (count == 0)
        return STOKER_OK;
    for (size_t i = runs->n; i-- > 0 && i + 8 >= runs->n;) { // the latest few: seqs come in order
        checkpoint_run *r = &runs->v[i];
        if (r->session == session && r->first_seq + r->count == first_seq) {
            r->count += count;
            return STOKER_OK;
        }
    }
    if (runs->n == runs->cap) {
        size_t cap = runs->cap ? 2 * runs->cap : 64;
        checkpoint_run *grown = realloc(runs->v, cap * sizeof(*grown));
        if (grown == NULL)
            return STOKER_NOMEM;
        runs->v = grown;
        runs->cap = cap;
    }
    runs->v[runs->n++] = (checkpoint_run){session, first_seq, count};
    return STOKER_OK;
}

void
checkpoint_runs_fini(checkpoint_runs *runs)
{
    free(runs->v);
    memset(runs, 0, sizeof(*runs));
}

// ---- writing ----

// "session:first:count,..." with the session in hex; *out malloc'd ("" for none).
static int
format_runs(const checkpoint_runs *runs, char **out)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (mem == NULL)
        return STOKER_NOMEM;
    for (size_t i = 0; runs != NULL && i < runs->n; i++)
        fprintf(mem, "%s%016" PRIx64 ":%" PRIu64 ":%" PRIu64, i ? "," : "", runs->v[i].session,
                runs->v[i].first_seq, runs->v[i].count);
    if (ferror(mem) || fclose(mem) != 0) {
        free(buf);
        return STOKER_NOMEM;
    }
    *out = buf;
    return STOKER_OK;
}

int
checkpoint_save(const char *path, mlp *net, const checkpoint_position *pos,
                const checkpoint_runs *pending, char *err, size_t err_len)
{
    size_t count = mlp_param_count(net);
    uint32_t layers = mlp_layer_count(net);
    float *host = malloc(3 * count * sizeof(float)); // params | m | v
    char *pending_text = NULL;
    if (host == NULL || format_runs(pending, &pending_text) != STOKER_OK) {
        free(host);
        return stoker_errorf(err, err_len, STOKER_NOMEM, "%s: out of memory", path);
    }
    int rv = mlp_get_params(net, host, count);
    if (rv == STOKER_OK)
        rv = mlp_get_adam(net, host + count, host + 2 * count, count);
    if (rv != STOKER_OK) {
        stoker_errorf(err, err_len, rv, "%s: cannot read the network: %s", path, mlp_error(net));
        goto done;
    }
    safetensors_tensor tensors[6 * MLP_MAX_LAYERS];
    char names[6 * MLP_MAX_LAYERS][48];
    static const char *const prefix[3] = {"", "adam.m.", "adam.v."};
    size_t n = 0, offset = 0;
    for (uint32_t l = 0; l < layers; l++) {
        uint32_t out_dim, in_dim;
        mlp_layer_shape(net, l, &out_dim, &in_dim);
        for (int part = 0; part < 3; part++) {
            snprintf(names[n], sizeof(names[n]), "%slayers.%u.weight", prefix[part], l);
            tensors[n] = (safetensors_tensor){.name = names[n],
                                              .ndim = 2,
                                              .shape = {out_dim, in_dim},
                                              .data = host + part * count + offset};
            n++;
            snprintf(names[n], sizeof(names[n]), "%slayers.%u.bias", prefix[part], l);
            tensors[n] = (safetensors_tensor){.name = names[n],
                                              .ndim = 1,
                                              .shape = {out_dim},
                                              .data = host + part * count + offset +
                                                      (size_t)out_dim * in_dim};
            n++;
        }
        offset += (size_t)out_dim * in_dim + out_dim;
    }
    char steps[24], rounds[24], batches[24], examples[24], epochs[16], seed[24], classes[16];
    char hidden[MLP_MAX_LAYERS * 8] = "";
    snprintf(steps, sizeof(steps), "%" PRIu64, mlp_steps(net));
    snprintf(rounds, sizeof(rounds), "%" PRIu64, pos->rounds);
    snprintf(batches, sizeof(batches), "%" PRIu64, pos->batches);
    snprintf(examples, sizeof(examples), "%" PRIu64, pos->examples);
    snprintf(epochs, sizeof(epochs), "%u", pos->epochs);
    snprintf(seed, sizeof(seed), "%" PRIu64, pos->seed);
    snprintf(classes, sizeof(classes), "%u", mlp_classes(net));
    for (uint32_t l = 0, at = 0; l + 1 < layers; l++) {
        uint32_t out_dim, in_dim;
        mlp_layer_shape(net, l, &out_dim, &in_dim);
        at += (uint32_t)snprintf(hidden + at, sizeof(hidden) - at, "%s%u", l ? "," : "", out_dim);
    }
    const safetensors_meta meta[] = {
        {"stoker.checkpoint", FORMAT_VERSION},
        {"stoker.steps", steps},
        {"stoker.rounds", rounds},
        {"stoker.batches", batches},
        {"stoker.examples", examples},
        {"stoker.epochs", epochs},
        {"stoker.seed", seed},
        {"stoker.hidden", hidden},
        {"stoker.classes", classes},
        {"stoker.pending", pending_text},
    };
    rv = safetensors_write_meta(path, tensors, n, meta, sizeof(meta) / sizeof(meta[0]), err,
                                err_len);
done:
    free(pending_text);
    free(host);
    return rv;
}

// ---- reading ----

struct checkpoint {
    char path[512];
    safetensors_file *file;
    checkpoint_position pos;
    uint64_t steps;
    uint32_t classes;
    char hidden[MLP_MAX_LAYERS * 8];
    checkpoint_runs pending;
};

static int
meta_u64(const checkpoint *ck, const char *key, uint64_t *out, char *err, size_t err_len)
{
    const char *v = safetensors_meta_get(ck->file, key);
    char *end = NULL;
    if (v == NULL || v[0] < '0' || v[0] > '9' ||
        (*out = strtoull(v, &end, 10), end == NULL || *end != '\0'))
        return stoker_errorf(err, err_len, STOKER_INVALID,
                             "%s: not a stoker-trainer checkpoint: metadata '%s' is %s%s%s",
                             ck->path, key, v == NULL ? "missing" : "'", v == NULL ? "" : v,
                             v == NULL ? "" : "', not a number");
    return STOKER_OK;
}

static int
parse_pending(checkpoint *ck, const char *text, char *err, size_t err_len)
{
    const char *p = text;
    while (*p != '\0') {
        char *end;
        uint64_t session = strtoull(p, &end, 16), first, count;
        if (*end != ':')
            goto bad;
        first = strtoull(end + 1, &end, 10);
        if (*end != ':')
            goto bad;
        count = strtoull(end + 1, &end, 10);
        if (*end != ',' && *end != '\0')
            goto bad;
        if (checkpoint_runs_add(&ck->pending, session, first, count) != STOKER_OK)
            return stoker_errorf(err, err_len, STOKER_NOMEM, "%s: out of memory", ck->path);
        p = *end == ',' ? end + 1 : end;
    }
    return STOKER_OK;
bad:
    return stoker_errorf(err, err_len, STOKER_INVALID,
                         "%s: metadata 'stoker.pending' is malformed near '%.40s'", ck->path, p);
}

int
checkpoint_load(const char *path, checkpoint **out, char *err, size_t err_len)
{
    checkpoint *ck = calloc(1, sizeof(*ck));
    if (ck == NULL)
        return stoker_errorf(err, err_len, STOKER_NOMEM, "%s: out of memory", path);
    snprintf(ck->path, sizeof(ck->path), "%s", path);
    int rv = safetensors_read(path, &ck->file, err, err_len);
    if (rv != STOKER_OK) {
        free(ck);
        return rv;
    }
    const char *version = safetensors_meta_get(ck->file, "stoker.checkpoint");
    if (version == NULL || strcmp(version, FORMAT_VERSION) != 0) {
        rv = stoker_errorf(err, err_len, STOKER_INVALID,
                           "%s: not a stoker-trainer checkpoint (metadata 'stoker.checkpoint' is "
                           "%s%s; a --weights file holds no optimizer state or position)",
                           path, version ? "version " : "missing", version ? version : "");
        goto fail;
    }
    uint64_t epochs = 0, classes = 0;
    if ((rv = meta_u64(ck, "stoker.steps", &ck->steps, err, err_len)) != STOKER_OK ||
        (rv = meta_u64(ck, "stoker.rounds", &ck->pos.rounds, err, err_len)) != STOKER_OK ||
        (rv = meta_u64(ck, "stoker.batches", &ck->pos.batches, err, err_len)) != STOKER_OK ||
        (rv = meta_u64(ck, "stoker.examples", &ck->pos.examples, err, err_len)) != STOKER_OK ||
        (rv = meta_u64(ck, "stoker.epochs", &epochs, err, err_len)) != STOKER_OK ||
        (rv = meta_u64(ck, "stoker.seed", &ck->pos.seed, err, err_len)) != STOKER_OK ||
        (rv = meta_u64(ck, "stoker.classes", &classes, err, err_len)) != STOKER_OK)
        goto fail;
    ck->pos.epochs = (uint32_t)epochs;
    ck->classes = (uint32_t)classes;
    const char *hidden = safetensors_meta_get(ck->file, "stoker.hidden");
    const char *pending = safetensors_meta_get(ck->file, "stoker.pending");
    if (hidden == NULL || pending == NULL) {
        rv = stoker_errorf(err, err_len, STOKER_INVALID,
                           "%s: not a stoker-trainer checkpoint: metadata '%s' is missing", path,
                           hidden == NULL ? "stoker.hidden" : "stoker.pending");
        goto fail;
    }
    snprintf(ck->hidden, sizeof(ck->hidden), "%s", hidden);
    if ((rv = parse_pending(ck, pending, err, err_len)) != STOKER_OK)
        goto fail;
    *out = ck;
    return STOKER_OK;
fail:
    checkpoint_destroy(ck);
    return rv;
}

void
checkpoint_destroy(checkpoint *ck)
{
    if (ck == NULL)
        return;
    safetensors_destroy(ck->file);
    checkpoint_runs_fini(&ck->pending);
    free(ck);
}

const checkpoint_position *
checkpoint_position_of(const checkpoint *ck)
{
    return &ck->pos;
}

const checkpoint_runs *
checkpoint_pending(const checkpoint *ck)
{
    return &ck->pending;
}

int
checkpoint_adopt(checkpoint *ck, const checkpoint *other, char *err, size_t err_len)
{
    for (size_t i = 0; i < other->pending.n; i++) {
        const checkpoint_run *r = &other->pending.v[i];
        if (checkpoint_runs_add(&ck->pending, r->session, r->first_seq, r->count) != STOKER_OK)
            return stoker_errorf(err, err_len, STOKER_NOMEM, "%s: out of memory", other->path);
    }
    return STOKER_OK;
}

int
checkpoint_check_options(const checkpoint *ck, const uint32_t *hidden, uint32_t n_hidden,
                         uint32_t classes, char *why, size_t why_len)
{
    char mine[MLP_MAX_LAYERS * 8] = "";
    for (uint32_t i = 0, at = 0; i < n_hidden && at < sizeof(mine); i++)
        at += (uint32_t)snprintf(mine + at, sizeof(mine) - at, "%s%u", i ? "," : "", hidden[i]);
    if (strcmp(mine, ck->hidden) != 0)
        return stoker_errorf(why, why_len, STOKER_INVALID,
                             "--resume %s: the checkpoint's network has hidden layers %s, this "
                             "run's --hidden is %s (give --hidden %s to resume it)",
                             ck->path, ck->hidden[0] ? ck->hidden : "(none)", mine,
                             ck->hidden[0] ? ck->hidden : "(none)");
    if (classes != ck->classes) {
        char theirs[48], ours[48];
        snprintf(theirs, sizeof(theirs), ck->classes ? "--classes %u" : "MSE (no --classes)",
                 ck->classes);
        snprintf(ours, sizeof(ours), classes ? "--classes %u" : "MSE (no --classes)", classes);
        return stoker_errorf(why, why_len, STOKER_INVALID,
                             "--resume %s: the checkpoint was trained with %s, this run has %s",
                             ck->path, theirs, ours);
    }
    return STOKER_OK;
}

// The tensor name must be in the file with exactly shape (ndim dims).
static int
check_tensor(const checkpoint *ck, const char *name, uint32_t ndim, const uint64_t *shape,
             char *why, size_t why_len)
{
    const safetensors_tensor *t = safetensors_find(ck->file, name);
    char want[48], have[48] = "";
    if (ndim == 2)
        snprintf(want, sizeof(want), "[%" PRIu64 ", %" PRIu64 "]", shape[0], shape[1]);
    else
        snprintf(want, sizeof(want), "[%" PRIu64 "]", shape[0]);
    if (t == NULL)
        return stoker_errorf(why, why_len, STOKER_INVALID,
                             "--resume %s: tensor %s is missing (this network's is %s)", ck->path,
                             name, want);
    int same = t->ndim == ndim;
    for (uint32_t d = 0, at = 0; d < t->ndim; d++) {
        same = same && t->shape[d] == shape[d];
        at += (uint32_t)snprintf(have + at, sizeof(have) - at, "%s%" PRIu64, d ? ", " : "[",
                                 t->shape[d]);
    }
    if (!same)
        return stoker_errorf(why, why_len, STOKER_INVALID,
                             "--resume %s: tensor %s is %s%s in the checkpoint, %s in this "
                             "network (input and output sizes come from the broker's schema, "
                             "--input/--target and --classes; hidden ones from --hidden)",
                             ck->path, name, have, t->ndim ? "]" : "[]", want);
    return STOKER_OK;
}

int
checkpoint_restore(const checkpoint *ck, mlp *net, char *why, size_t why_len)
{
    size_t count = mlp_param_count(net);
    uint32_t layers = mlp_layer_count(net);
    static const char *const prefix[3] = {"", "adam.m.", "adam.v."};
    char name[48];
    // One layer too many in the file is a different network too.
    snprintf(name, sizeof(name), "layers.%u.weight", layers);
    if (safetensors_find(ck->file, name) != NULL)
        return stoker_errorf(why, why_len, STOKER_INVALID,
                             "--resume %s: the checkpoint has more than this network's %u layers",
                             ck->path, layers);
    float *host = malloc(3 * count * sizeof(float));
    if (host == NULL)
        return stoker_errorf(why, why_len, STOKER_NOMEM, "--resume %s: out of memory", ck->path);
    int rv = STOKER_OK;
    size_t offset = 0;
    for (uint32_t l = 0; l < layers && rv == STOKER_OK; l++) {
        uint32_t out_dim, in_dim;
        mlp_layer_shape(net, l, &out_dim, &in_dim);
        for (int part = 0; part < 3 && rv == STOKER_OK; part++) {
            uint64_t wshape[2] = {out_dim, in_dim}, bshape[1] = {out_dim};
            snprintf(name, sizeof(name), "%slayers.%u.weight", prefix[part], l);
            if ((rv = check_tensor(ck, name, 2, wshape, why, why_len)) != STOKER_OK)
                break;
            memcpy(host + part * count + offset, safetensors_find(ck->file, name)->data,
                   (size_t)out_dim * in_dim * sizeof(float));
            snprintf(name, sizeof(name), "%slayers.%u.bias", prefix[part], l);
            if ((rv = check_tensor(ck, name, 1, bshape, why, why_len)) != STOKER_OK)
                break;
            memcpy(host + part * count + offset + (size_t)out_dim * in_dim,
                   safetensors_find(ck->file, name)->data, out_dim * sizeof(float));
        }
        offset += (size_t)out_dim * in_dim + out_dim;
    }
    if (rv == STOKER_OK &&
        ((rv = mlp_set_params(net, host, count)) != STOKER_OK ||
         (rv = mlp_set_adam(net, host + count, host + 2 * count, count, ck->steps)) != STOKER_OK))
        stoker_errorf(why, why_len, rv, "--resume %s: cannot load the network: %s", ck->path,
                      mlp_error(net));
    free(host);
    return rv;
}
