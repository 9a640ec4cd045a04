// Class-to-label maps (see stoker/labels.h): building one within its bounds, copying, comparing,
// grouping equal maps of several producers, and the JSON block /status shows. Carrying a map in
// a hello or a Status reply is common/wire's (request.c, reply.c, status_pb.c); keeping one per
// producer is the broker's.
#include <stdlib.h>
#include <string.h>

#include "stoker/error.h"
#include "stoker/labels.h"

void
stoker_labels_fini(stoker_labels *l)
{
    if (l == NULL)
        return;
    free(l->names);
    free(l->files);
    memset(l, 0, sizeof(*l));
}

// Bytes of s kept as a name: at most STOKER_LABEL_NAME_MAX - 1, not cutting a UTF-8 sequence.
static size_t
kept_length(const char *s)
{
    size_t n = strlen(s);
    if (n < STOKER_LABEL_NAME_MAX)
        return n;
    n = STOKER_LABEL_NAME_MAX - 1;
    while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
        n--;
    return n;
}

int
stoker_labels_build(stoker_labels *out, uint32_t n_classes, const char *const *names,
                    const uint64_t *files, uint32_t n)
{
    memset(out, 0, sizeof(*out));
    if (n > n_classes)
        n = n_classes;
    uint32_t listed = 0;
    size_t bytes = 0;
    while (listed < n && listed < STOKER_LABELS_MAX_CLASSES) {
        size_t len = kept_length(names[listed]) + 1;
        if (bytes + len > STOKER_LABELS_MAX_BYTES)
            break;
        bytes += len;
        listed++;
    }
    out->names = malloc(bytes > 0 ? bytes : 1);
    out->files = calloc(listed > 0 ? listed : 1, sizeof(*out->files));
    if (out->names == NULL || out->files == NULL) {
        stoker_labels_fini(out);
        return STOKER_NOMEM;
    }
    char *at = out->names;
    for (uint32_t i = 0; i < listed; i++) {
        size_t len = kept_length(names[i]);
        memcpy(at, names[i], len);
        at[len] = '\0';
        at += len + 1;
        out->files[i] = files != NULL ? files[i] : 0;
    }
    out->n_classes = n_classes;
    out->n_listed = listed;
    out->names_len = bytes;
    return STOKER_OK;
}

int
stoker_labels_copy(stoker_labels *out, const stoker_labels *src)
{
    memset(out, 0, sizeof(*out));
    out->names = malloc(src->names_len > 0 ? src->names_len : 1);
    out->files = calloc(src->n_listed > 0 ? src->n_listed : 1, sizeof(*out->files));
    if (out->names == NULL || out->files == NULL) {
        stoker_labels_fini(out);
        return STOKER_NOMEM;
    }
    if (src->names_len > 0)
        memcpy(out->names, src->names, src->names_len);
    if (src->n_listed > 0)
        memcpy(out->files, src->files, src->n_listed * sizeof(*out->files));
    out->n_classes = src->n_classes;
    out->n_listed = src->n_listed;
    out->names_len = src->names_len;
    return STOKER_OK;
}

bool
stoker_labels_equal(const stoker_labels *a, const stoker_labels *b)
{
    return a->n_classes == b->n_classes && a->n_listed == b->n_listed &&
           a->names_len == b->names_len &&
           (a->names_len == 0 || memcmp(a->names, b->names, a->names_len) == 0) &&
           (a->n_listed == 0 || memcmp(a->files, b->files, a->n_listed * sizeof(*a->files)) == 0);
}

const char *
stoker_labels_name(const stoker_labels *l, uint32_t i)
{
    const char *s = l->names;
    while (i-- > 0)
        s += strlen(s) + 1;
    return s;
}

int
stoker_label_maps_add(stoker_label_map **maps, uint32_t *n, uint32_t *omitted, uint32_t producer,
                      const stoker_labels *labels)
{
    stoker_label_map *m = NULL;
    for (uint32_t i = 0; i < *n && m == NULL; i++)
        if (stoker_labels_equal(&(*maps)[i].labels, labels))
            m = &(*maps)[i];
    if (m == NULL && *n == STOKER_LABEL_MAPS_MAX) {
        (*omitted)++;
        return STOKER_OK;
    }
    if (m == NULL) {
        stoker_label_map *grown = realloc(*maps, (*n + 1) * sizeof(**maps));
        if (grown == NULL)
            return STOKER_NOMEM;
        *maps = grown;
        m = &grown[*n];
        memset(m, 0, sizeof(*m));
        if (stoker_labels_copy(&m->labels, labels) != STOKER_OK)
            return STOKER_NOMEM;
        (*n)++;
    }
    uint32_t *ids = realloc(m->producers, (m->n_producers + 1) * sizeof(*ids));
    if (ids == NULL)
        return STOKER_NOMEM;
    ids[m->n_producers++] = producer;
    m->producers = ids;
    return STOKER_OK;
}

void
stoker_label_maps_free(stoker_label_map *maps, uint32_t n)
{
    for (uint32_t i = 0; maps != NULL && i < n; i++) {
        free(maps[i].producers);
        stoker_labels_fini(&maps[i].labels);
    }
    free(maps);
}

void
stoker_labels_render_json(stoker_text *t, const stoker_label_map *maps, uint32_t n,
                          uint32_t omitted)
{
    stoker_text_printf(t, "{\"maps\": [");
    for (uint32_t i = 0; i < n; i++) {
        const stoker_label_map *m = &maps[i];
        stoker_text_printf(t, "%s{\"producers\": [", i ? ", " : "");
        for (uint32_t k = 0; k < m->n_producers; k++)
            stoker_text_printf(t, "%s%u", k ? ", " : "", m->producers[k]);
        stoker_text_printf(t,
                           "], \"classes\": %u, \"listed\": %u, \"truncated\": %s, \"labels\": [",
                           m->labels.n_classes, m->labels.n_listed,
                           m->labels.n_listed < m->labels.n_classes ? "true" : "false");
        const char *name = m->labels.names;
        for (uint32_t c = 0; c < m->labels.n_listed; c++) {
            stoker_text_printf(t, "%s{\"label\": %u, \"name\": ", c ? ", " : "", c);
            stoker_text_json_string(t, name);
            stoker_text_printf(t, ", \"files\": %llu}", (unsigned long long)m->labels.files[c]);
            name += strlen(name) + 1;
        }
        stoker_text_printf(t, "]}");
    }
    stoker_text_printf(t, "], \"omitted\": %u}", omitted);
}
