// safetensors files of float32 tensors: 8-byte little-endian header length, a JSON header
// {"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...} with names in
// sorted order, then the raw data. Readable by numpy, PyTorch and the safetensors package.
// Only F32 is written or read; names and metadata must not need JSON escaping. Little-endian hosts
// only.
#ifndef STOKER_TRAINER_SAFETENSORS_H
#define STOKER_TRAINER_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define SAFETENSORS_MAX_DIMS 4

typedef struct safetensors_tensor {
    const char *name; // borrowed (writer) / owned by the file (reader)
    uint32_t ndim;    // 0 (scalar) .. SAFETENSORS_MAX_DIMS
    uint64_t shape[SAFETENSORS_MAX_DIMS];
    const float *data; // product(shape) floats; borrowed (writer) / owned by the file (reader)
} safetensors_tensor;

// Writes count tensors to path atomically: a temporary file beside it, fsync, then rename and a
// sync of the folder, so a reader sees the old file or the new one, never half, and the new one
// stays after a machine crash. Tensors borrowed; their order does not
// matter (they are sorted by name). Returns STOKER_OK; STOKER_INVALID for a duplicate or
// unwritable name, too many dims; STOKER_IO or STOKER_NOMEM otherwise. err (err_len bytes,
// may be NULL if err_len is 0) receives a message naming the path on failure.
int safetensors_write(const char *path, const safetensors_tensor *tensors, size_t count, char *err,
                      size_t err_len);

// Removes the temporary files a writer of path killed mid-write left beside it (path.tmp.XXXXXX,
// as safetensors_write names them) and returns how many went. Call it before this process
// writes path; a file some other live process is writing would go too.
unsigned safetensors_remove_stale(const char *path);

// One __metadata__ entry (string to string; both borrowed, neither may need JSON escaping).
typedef struct safetensors_meta {
    const char *key, *value;
} safetensors_meta;

// safetensors_write with metadata entries beside "format": "pt" (meta may be NULL when n_meta
// is 0; a key "format" or a value that needs escaping is STOKER_INVALID).
int safetensors_write_meta(const char *path, const safetensors_tensor *tensors, size_t count,
                           const safetensors_meta *meta, size_t n_meta, char *err, size_t err_len);

typedef struct safetensors_file safetensors_file;

// Reads a whole safetensors file of F32 tensors. On success *out is owned by the caller
// (safetensors_destroy). STOKER_IO when it cannot be read, STOKER_INVALID when it is malformed
// or holds another dtype (err says what), STOKER_NOMEM.
int safetensors_read(const char *path, safetensors_file **out, char *err, size_t err_len);

// Number of tensors, and tensor i in sorted name order (borrowed from f; NULL if out of range).
size_t safetensors_count(const safetensors_file *f);
const safetensors_tensor *safetensors_get(const safetensors_file *f, size_t i);
// The tensor called name, or NULL. Borrowed from f.
const safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name);

// The __metadata__ value of key, or NULL when absent. Borrowed from f.
const char *safetensors_meta_get(const safetensors_file *f, const char *key);

// Accepts NULL.
void safetensors_destroy(safetensors_file *f);

#endif
