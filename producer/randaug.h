// RandAugment (torchvision.transforms.RandAugment, as in torchvision 0.14): its fourteen
// operations on a float (height, width, 3) image in [0, 255], each as torchvision applies it to
// a PIL image (nearest-neighbour affine sampling with fill 0, ImageEnhance's blends, ImageOps'
// posterize, solarize, autocontrast and equalize), its magnitude table, and the policy: n
// operations drawn uniformly, each at one magnitude bin, signed ones negated half the time.
// Every draw comes from the caller's generator. It does not parse specs (augment.c does).
#ifndef PRODUCER_RANDAUG_H
#define PRODUCER_RANDAUG_H

#include <stdbool.h>
#include <stdint.h>

#include "stoker/rng.h"

#define RANDAUG_OPS  14
#define RANDAUG_BINS 31 // torchvision's num_magnitude_bins

// The operations in torchvision's order: Identity, ShearX, ShearY, TranslateX, TranslateY,
// Rotate, Brightness, Color, Contrast, Sharpness, Posterize, Solarize, AutoContrast, Equalize.
extern const char *const randaug_names[RANDAUG_OPS];

// Index of the operation called name (as above, any case), or -1.
int randaug_find(const char *name);

// The magnitude of operation op at bin (< bins) for a width x height image, as torchvision's
// _augmentation_space gives it, and whether it is signed (negated half the time).
double randaug_magnitude(int op, uint32_t bin, uint32_t bins, uint32_t width, uint32_t height,
                         bool *is_signed);

// Applies operation op at magnitude (already signed) to px ((height, width, 3) floats in
// [0, 255]) in place. STOKER_OK; STOKER_NOMEM (geometric operations need a copy).
int randaug_apply_op(int op, double magnitude, float *px, uint32_t height, uint32_t width);

// The policy: n operations, each drawn uniformly from the fourteen, at bin of bins, a signed
// one negated when a fair coin says so; draws from rng only. STOKER_OK; STOKER_NOMEM.
int randaug_apply(uint32_t n, uint32_t bin, uint32_t bins, float *px, uint32_t height,
                  uint32_t width, stoker_rng *rng);

#endif
