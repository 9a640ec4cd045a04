// The `images` generator: real CPU augmentation of a folder of PNG, JPEG and WebP files, the way
// a torchvision pipeline does it: by default ImageNet training's (RandomResizedCrop, horizontal
// flip, brightness and contrast jitter, normalization), or any pipeline an augment spec gives
// (augment.h), training or evaluation. Every image is decoded once, at creation, into memory, and
// examples are made from those pixels (or, with decode_each, only headers are checked at creation
// and each example reads and decodes its file). JPEGs may be decoded reduced (jpeg_draft in
// images_config). It does not watch the folder for changes.
#ifndef PRODUCER_IMAGES_H
#define PRODUCER_IMAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stoker/generator.h"

// Most decoded pixel bytes (RGB, 8 bits a channel) held in memory: 1 GiB.
#define IMAGES_MAX_DECODED_BYTES ((size_t)1 << 30)
// Largest output size accepted (size x size pixels).
#define IMAGES_MAX_SIZE 4096

// Reads dir (borrowed): one subfolder per class, sorted by name (strcmp), the label being the
// subfolder's index; hidden entries (".name") are skipped. In each class folder every file named
// *.png, *.jpg or *.jpeg (any case; images_generator_open also reads *.webp, *.bmp, *.tif and
// *.tiff) is decoded (by content, not name) to 8-bit RGB: grayscale is
// expanded, alpha dropped, 16-bit reduced. Other files are ignored. With decode_each only each
// file's header is read here (signature, then the PNG IHDR or JPEG frame header dimensions), so
// creation costs a listing and a small read per file, not a decode.
// Sets out's schema to `image:float32[3,size,size],label:int32[1]`.
// Returns STOKER_OK; STOKER_INVALID (size 0 or over IMAGES_MAX_SIZE, a missing or unreadable
// folder, no class subfolders, a class without images, a corrupt file or, with decode_each, a
// corrupt header); STOKER_TOO_LARGE (the decoded images, or with decode_each one image, would
// exceed IMAGES_MAX_DECODED_BYTES); STOKER_NOMEM; STOKER_IO. On failure err
// (if not NULL) names the path and the problem, and *out is untouched.
//
// The fill callback never ends (no STOKER_END_OF_DATA). It draws everything from seed: an image
// uniformly among all images (so classes are weighted by their image counts), a crop of 8-100 %
// of its area with aspect ratio 3/4-4/3 (torchvision RandomResizedCrop's algorithm, with its
// center-crop fallback) resized to size x size by bilinear interpolation without antialiasing
// (from the JPEG decoded reduced where that crop allows: jpeg_draft in images_config), a
// horizontal flip with probability 0.5, brightness and contrast factors uniform in [0.6, 1.4]
// applied in random order (clamped to [0, 1] after each, as ColorJitter does), then
// (x - mean) / std per channel with ImageNet's mean (0.485, 0.456, 0.406) and std (0.229, 0.224,
// 0.225). image is channel-first (3, size, size); label is the class index. The same seed gives
// the same bytes. It allocates nothing; one generator must not be filled from two threads at once.
//
// decode_each: keep only the paths, and read and decode the chosen file for every example, the
// cost a data loader reading its dataset pays; fill then allocates the file and the decoded image
// and frees them. The examples are the same bytes. A file that fails to read or decode then (bad
// data behind a good header) is logged with its path (WARN), skipped from then on, and counted
// (images_generator_skipped; destroy logs the count): the example is made from another image,
// drawn from the same seed, so examples stay determined by the seed and the set of bad files.
// fill fails only when out of memory or when every file has failed (STOKER_INVALID).
//
// This is the original form: square, float32 (3, size, size), label int32[1], the default
// pipeline. images_generator_open takes every option.
int images_generator_create(const char *dir, uint32_t size, bool decode_each, stoker_generator *out,
                            char *err, size_t err_len);

// Makes gen (created above) serve the folder as a dataset (docs/datasets.md): item i is the i-th
// image of the listing (classes in order, files sorted within each), augmented from the item's
// seed as fill augments from its seed (encoded output: the file's bytes); the fingerprint is a
// hash of the class/file names in that order, so producers on other boxes must see the same
// names. STOKER_OK; STOKER_TOO_LARGE (encoded output: a file of the listing is over the field's
// bound, and a dataset item cannot be skipped; err names the file and its size), gen unchanged.
int images_generator_dataset(stoker_generator *gen, char *err, size_t err_len);
// float32 and uint8 are decoded pixels through the pipeline; encoded is each file's bytes as
// they are on disk, for decoding on the consumer (torchvision.io.decode_jpeg, nvJPEG, DALI).
typedef enum images_output {
    IMAGES_FLOAT32 = 0,
    IMAGES_UINT8 = 1,
    IMAGES_ENCODED = 2
} images_output;
typedef enum images_label { IMAGES_LABEL_INT64 = 0, IMAGES_LABEL_INT32 = 1 } images_label;

// Everything images_generator_open reads; images_config_init sets the defaults.
typedef struct images_config {
    const char *dir;        // borrowed
    uint32_t height, width; // output size (default 64 x 64)
    bool decode_each;
    const char *augment;  // borrowed spec (augment.h); NULL: the default pipeline above
    images_output output; // float32 (default): normalized as the pipeline says; uint8: raw pixels
    bool hwc;             // channel-last (height, width, 3) instead of (3, height, width)
    images_label label;   // int64 scalar (default, what PyTorch losses take) or int32[1]
    bool quiet;           // no per-class lines in the start-up log
    // A file that cannot be read or decoded at start (with decode_each: whose header cannot be)
    // fails creation (strict; images_generator_create's contract) or, by default, is logged
    // with its path (WARN), left out and counted (images_generator_skipped_at_start); its class
    // keeps its label. Creation still fails when no file at all can be read.
    bool strict;
    // JPEGs are decoded reduced by 2, 4 or 8 (libjpeg's DCT scaling, PIL's Image.draft) when
    // the pipeline's first resampling (rrc's or the default pipeline's crop, or resize) shrinks
    // the region by at least that anyway, never below the size it resamples to; the rest of the
    // pipeline runs on the smaller image. Default true; false decodes every JPEG at full size.
    // Either way an example is the same pixels with decode_each or not (decoded once, a JPEG
    // is held at each scale its examples may use: at most 1.33x the pixels of full size,
    // counted in IMAGES_MAX_DECODED_BYTES).
    bool jpeg_draft;
    // Encoded output: the bound of the image field (image:uint8[?<=max_file_bytes]), 1 ..
    // IMAGES_MAX_FILE_BYTES; 0: none (image:bytes). A file over it is refused when drawn (a
    // WARN names it and its size; the producer counts it refused and makes the example from
    // another file); a dataset with one is refused at images_generator_dataset.
    uint64_t max_file_bytes;
    // Without decode_each: only headers at start, and each file decoded when an example first
    // uses it, then held (what decode once holds, in the end), so that a dataset's producer,
    // handed only its own shards, starts at once and decodes only what they need. A file that
    // then fails is handled as with decode_each. Default false: every file decoded at start.
    bool decode_when_used;
} images_config;

// The largest bound max_file_bytes may give: an example's limit (1 GiB) less its label.
// Without a bound a file may have up to a chunk's values (STOKER_CHUNK_VALUE_BYTES_MAX).
#define IMAGES_MAX_FILE_BYTES ((1ull << 30) - 8)

void images_config_init(images_config *cfg);

// Like images_generator_create with every option. Schema: `image:DTYPE[3,H,W]` (or [H,W,3]
// with hwc) and `label:int64[]` (or int32[1]). Encoded output: `image:bytes` (uint8[?], or
// uint8[?<=max_file_bytes]) and the same label: each example is one file's bytes, read when the
// example is made, never decoded here (at start only headers are checked, as with
// decode_each; size, augment, hwc, decode_each and jpeg_draft do not apply); a file that
// cannot be read then is skipped as decode_each skips one. Class folders may nest folders (walked
// depth first, sorted by name; the label is the top folder's index), and *.webp files are read when
// built with libwebp. float32 output is (x / 255 - mean) / std when the pipeline normalizes (the
// default does, with ImageNet's statistics), else x / 255; uint8 output is the pixels rounded,
// never normalized: images_generator_normalization gives the mean and std the consumer should
// apply. Extra errors: STOKER_INVALID for a bad augment spec (err names the operation).
int images_generator_open(const images_config *cfg, stoker_generator *out, char *err,
                          size_t err_len);

// The mean and std (per channel, for values in [0, 1]) the pipeline normalizes with, or that a
// uint8 consumer should apply; false when the pipeline does not normalize.
bool images_generator_normalization(const stoker_generator *gen, float mean[3], float std[3]);

// Number of classes, and class i's folder name and file count (borrowed; valid until destroy).
uint32_t images_generator_classes(const stoker_generator *gen);
const char *images_generator_class_name(const stoker_generator *gen, uint32_t i, size_t *files);

// Writes the label map as JSON to path: {"classes": [{"label": 0, "name": "cat", "files": 12},
// ...], "normalize": {"mean": [...], "std": [...]} or null}. STOKER_OK or STOKER_IO (err written).
int images_generator_write_label_map(const stoker_generator *gen, const char *path, char *err,
                                     size_t err_len);

// decode_each: how many files failed to decode and are skipped so far (0 otherwise).
size_t images_generator_skipped(const stoker_generator *gen);
// How many files were left out at creation (not strict): corrupt, unsupported or unreadable.
size_t images_generator_skipped_at_start(const stoker_generator *gen);

#endif
