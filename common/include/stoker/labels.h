// A producer's class-to-label map (the images generator's class folders: label i is the i-th
// folder in name order, with its file count), bounded so that a dataset of 100,000 classes cannot
// blow up a hello or the broker's /status: the first classes are listed by name, the rest only
// counted. The producer says it in its hello; the broker keeps it per producer and shows each
// distinct map once in its status snapshot (status.h). It knows nothing of folders or of how
// the map travels (common/wire/) or is rendered (status.c calls stoker_labels_render_json).
#ifndef STOKER_LABELS_H
#define STOKER_LABELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stoker/text.h"

#define STOKER_LABELS_MAX_CLASSES 1000  // classes listed by name; the rest are counted
#define STOKER_LABELS_MAX_BYTES   32768 // bytes of listed names (NULs included), at most
#define STOKER_LABEL_NAME_MAX     256   // bytes of one name kept, NUL included (longer: cut)
#define STOKER_LABEL_MAPS_MAX     16    // distinct maps a status snapshot lists; the rest counted

typedef struct stoker_labels {
    uint32_t n_classes; // the producer's classes: labels 0..n_classes-1 (0: no map)
    uint32_t n_listed;  // the first n_listed classes are named below (<= n_classes)
    char *names;        // n_listed NUL-terminated names one after another (malloc'd)
    size_t names_len;   // bytes of names
    uint64_t *files;    // (n_listed,) file counts (malloc'd)
} stoker_labels;

// Builds *out from n given classes (names[i] and files[i], borrowed; files may be NULL: 0 each)
// of a map of n_classes (>= n) classes, keeping the first that fit the bounds above (a name
// longer than STOKER_LABEL_NAME_MAX - 1 bytes is cut). STOKER_OK or STOKER_NOMEM (*out then
// empty). *out is overwritten, not freed: stoker_labels_fini it first if it held a map.
int stoker_labels_build(stoker_labels *out, uint32_t n_classes, const char *const *names,
                        const uint64_t *files, uint32_t n);
// A copy of src into *out (overwritten). STOKER_OK or STOKER_NOMEM (*out then empty).
int stoker_labels_copy(stoker_labels *out, const stoker_labels *src);
// Frees the map's arrays and empties it; accepts an empty map.
void stoker_labels_fini(stoker_labels *l);
bool stoker_labels_equal(const stoker_labels *a, const stoker_labels *b);
// The name of listed class i (i < n_listed), borrowed; walks the names (O(i)).
const char *stoker_labels_name(const stoker_labels *l, uint32_t i);

// One distinct map of a status snapshot and the producers (ids) that said it.
typedef struct stoker_label_map {
    uint32_t n_producers;
    uint32_t *producers; // malloc'd
    stoker_labels labels;
} stoker_label_map;

// Adds producer's labels to maps (*n of them, a malloc'd array of at most STOKER_LABEL_MAPS_MAX):
// to the entry of an equal map, else as a new entry, else (full) counts it in *omitted.
// STOKER_OK or STOKER_NOMEM.
int stoker_label_maps_add(stoker_label_map **maps, uint32_t *n, uint32_t *omitted,
                          uint32_t producer, const stoker_labels *labels);
// Frees n maps and the array; accepts NULL.
void stoker_label_maps_free(stoker_label_map *maps, uint32_t n);

// Appends the maps as the JSON value of /status's "labels" key:
//   {"maps": [{"producers": [ids], "classes": N, "listed": K, "truncated": bool,
//              "labels": [{"label": 0, "name": "cat", "files": 12}, ...]}], "omitted": M}
// omitted: producers whose distinct map did not fit STOKER_LABEL_MAPS_MAX.
void stoker_labels_render_json(stoker_text *t, const stoker_label_map *maps, uint32_t n,
                               uint32_t omitted);

#endif
