// The `images` generator: real CPU augmentation of a folder of PNG and JPEG files, the way a
// torchvision ImageNet training pipeline does it (RandomResizedCrop, horizontal flip, brightness
// and contrast jitter, normalization). Every image is decoded once, at creation, into memory, and
// examples are made from those pixels (or, with decode_each, each example decodes its image from
// the file's bytes held in memory). It does not watch the folder for changes.
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
// *.png, *.jpg or *.jpeg (any case) is decoded (by content, not name) to 8-bit RGB: grayscale is
// expanded, alpha dropped, 16-bit reduced. Other files are ignored.
// Sets out's schema to `image:float32[3,size,size],label:int32[1]`.
// Returns STOKER_OK; STOKER_INVALID (size 0 or over IMAGES_MAX_SIZE, a missing or unreadable
// folder, no class subfolders, a class without images, a corrupt file); STOKER_TOO_LARGE (the
// decoded images would exceed IMAGES_MAX_DECODED_BYTES); STOKER_NOMEM; STOKER_IO. On failure err
// (if not NULL) names the path and the problem, and *out is untouched.
//
// The fill callback never ends (no STOKER_END_OF_DATA). It draws everything from seed: an image
// uniformly among all images (so classes are weighted by their image counts), a crop of 8-100 %
// of its area with aspect ratio 3/4-4/3 (torchvision RandomResizedCrop's algorithm, with its
// center-crop fallback) resized to size x size by bilinear interpolation without antialiasing, a
// horizontal flip with probability 0.5, brightness and contrast factors uniform in [0.6, 1.4]
// applied in random order (clamped to [0, 1] after each, as ColorJitter does), then
// (x - mean) / std per channel with ImageNet's mean (0.485, 0.456, 0.406) and std (0.229, 0.224,
// 0.225). image is channel-first (3, size, size); label is the class index. The same seed gives
// the same bytes. It allocates nothing; one generator must not be filled from two threads at once.
//
// decode_each: keep the files' bytes (bounded by the same budget) instead of their pixels, and
// decode the chosen image for every example, the cost a data loader reading its dataset pays;
// fill then allocates the decoded image and frees it. The examples are the same bytes.
int images_generator_create(const char *dir, uint32_t size, bool decode_each, stoker_generator *out,
                            char *err, size_t err_len);

#endif
