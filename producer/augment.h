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

#endif
