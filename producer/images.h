// The `images` generator: real CPU augmentation of a folder of PNG and JPEG files, the way a
// torchvision ImageNet training pipeline does it (RandomResizedCrop, horizontal flip, brightness
// and contrast jitter, normalization). Every image is decoded once, at creation, into memory, and
// examples are made from those pixels (or, with decode_each, only headers are checked at creation
// and each example reads and decodes its file). It does not watch the folder for changes.
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
// center-crop fallback) resized to size x size by bilinear interpolation without antialiasing, a
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
int images_generator_create(const char *dir, uint32_t size, bool decode_each, stoker_generator *out,
                            char *err, size_t err_len);

// Makes gen (created above) serve the folder as a dataset (docs/datasets.md): item i is the i-th
// image of the listing (classes in order, files sorted within each), augmented from the item's
// seed as fill augments from its seed; the fingerprint is a hash of the class/file names in
// that order, so producers on other boxes must see the same names.
void images_generator_dataset(stoker_generator *gen);

// decode_each: how many files failed to decode and are skipped so far (0 otherwise).
size_t images_generator_skipped(const stoker_generator *gen);

#endif
