// An image augmentation pipeline given as a short spec, e.g.
// "rrc(0.08,1;0.75,1.33),hflip,jitter(b=0.4,c=0.4,s=0.4,h=0.1),rotate(15),normalize" (or with
// "randaug(n=2,m=9)" for RandAugment) or, for
// evaluation, "resize(73),ccrop(64)": parsing the spec and applying it to 8-bit RGB pixels with
// every random choice drawn from a caller's generator. It does not decode files or know about
// examples, schemas or output dtypes (images.c does).
#ifndef PRODUCER_AUGMENT_H
#define PRODUCER_AUGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stoker/rng.h"

typedef struct augment augment;

// The operations (docs/images.md has the full table), in the order given, each with its
// torchvision counterpart:
//   rrc(smin,smax;rmin,rmax)  RandomResizedCrop(out, scale, ratio); defaults (0.08,1;0.75,1.3333)
//   resize(S) | resize(H,W)   Resize(S): shorter side to S, or exactly HxW; antialiased
//   ccrop | ccrop(S) | ccrop(H,W)  CenterCrop (no argument: the output size); zero padding
//   hflip | hflip(P)          RandomHorizontalFlip(P), default 0.5
//   jitter(b=B,c=C,s=S,h=H)   ColorJitter: each B may be X (factor in [max(0,1-X), 1+X]; hue in
//                             [-X, X]) or LO:HI; the four run in a random order per example
//   rotate(D) | rotate(LO:HI) RandomRotation(D, interpolation=BILINEAR), fill 0
//   blur(K) | blur(K;SMIN,SMAX)  GaussianBlur(K, sigma=(SMIN, SMAX)), default sigma 0.1..2
//   erase | erase(P) | erase(P;SMIN,SMAX;RMIN,RMAX)  RandomErasing(P, scale, ratio) after
//                             Normalize: fills with the mean color (0 once normalized), or 0
//                             without normalize; defaults (0.5;0.02,0.33;0.3,3.3)
//   randaug | randaug(N,M) | randaug(n=N,m=M,bins=B)  RandAugment(num_ops=N, magnitude=M,
//                             num_magnitude_bins=B), defaults 2, 9, 31 (randaug.h)
//   normalize | normalize(M,M,M;S,S,S)  Normalize; default ImageNet's mean and std
// Resampling (rrc, resize) is PIL's bilinear filter: antialiased when it shrinks.
// If the geometry does not end at the output size, a final resize makes it so.
// When the pipeline starts with rrc or resize, the source may come reduced by 2, 4 or 8 (a JPEG
// decoded with DCT scaling, as PIL's Image.draft): augment_draft says by how much it may, for
// an example, without upsampling what the first operation resamples.

// Parses spec (borrowed). STOKER_OK with *out (caller owns; augment_destroy); STOKER_INVALID
// with err naming the operation or argument that is wrong; STOKER_NOMEM.
int augment_parse(const char *spec, augment **out, char *err, size_t err_len);
void augment_destroy(augment *a);

// Whether the spec ends in normalize, and its mean and std (written when true).
bool augment_normalization(const augment *a, float mean[3], float std[3]);

// Applies the pipeline to rgb (borrowed; (height, width, 3) bytes) and writes the result, values
// in [0, 255] before normalization, as (out_h, out_w, 3) floats into out (caller's, out_h *
// out_w * 3 floats). Normalization is not applied here (the caller decides by output dtype).
// Draws only from rng: the same rng state gives the same floats. Allocates scratch and frees it.
// STOKER_OK; STOKER_NOMEM.
int augment_apply(const augment *a, const uint8_t *rgb, uint32_t width, uint32_t height,
                  stoker_rng *rng, uint32_t out_h, uint32_t out_w, float *out);

// A source image whose pixels may be the image reduced by scale.
typedef struct augment_image {
    const uint8_t *rgb;     // borrowed; (height, width, 3) bytes
    uint32_t width, height; // of rgb: ceil(full_width / scale) x ceil(full_height / scale)
    uint32_t scale;         // 1, 2, 4 or 8; pixel (x, y) stands for the full image's
                            // square of side scale at (x * scale, y * scale)
    uint32_t full_width, full_height; // the image's own size: every draw and size is computed
                                      // from it, so the random choices do not depend on scale
} augment_image;

// The largest reduction s in {1, 2, 4, 8} at which a box_h x box_w region of the full image
// still has at least out_h x out_w pixels: resampling it from the image reduced by s shrinks
// (or keeps its size), never enlarges.
uint32_t augment_draft_scale(uint32_t box_h, uint32_t box_w, uint32_t out_h, uint32_t out_w);

// The reduction the example drawn from rng (borrowed, not advanced: the state augment_apply_image
// will start from) may use: augment_draft_scale of the region the first operation resamples
// (rrc's box, resize's whole image to its target) to its size; 1 when the pipeline starts with
// anything else. *rows (if not NULL): how many of the full image's top rows the example reads
// (rrc's box ends above the bottom; every row otherwise).
uint32_t augment_draft(const augment *a, uint32_t width, uint32_t height, const stoker_rng *rng,
                       uint32_t out_h, uint32_t out_w, uint32_t *rows);

// The reductions augment_draft can give for some example of a width x height image: from *lo
// to *hi (powers of two; resize's is one scale, rrc's any up to that of the whole image).
void augment_draft_range(const augment *a, uint32_t width, uint32_t height, uint32_t out_h,
                         uint32_t out_w, uint32_t *lo, uint32_t *hi);

// augment_apply on src, which may be reduced: the first operation's box (or its whole image)
// is mapped onto src's pixels and resampled from there (a fractional box, edges clamped to the
// pixels it touches). src->scale must be 1 or what augment_draft allowed for this rng (a larger
// scale is STOKER_INVALID). With scale 1 the result is augment_apply's, bit for bit.
int augment_apply_image(const augment *a, const augment_image *src, stoker_rng *rng, uint32_t out_h,
                        uint32_t out_w, float *out);

#endif
