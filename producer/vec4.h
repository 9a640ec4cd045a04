// Four floats at a time through GCC/Clang vector extensions (SSE on x86-64, NEON on ARM), for
// the generators' per-pixel passes, which -O2 does not vectorize itself. Every operation is
// elementwise IEEE arithmetic in a fixed order, so results are the same on every path and
// machine (the same item and seed give the same pixels, whoever makes them).
#ifndef STOKER_PRODUCER_VEC4_H
#define STOKER_PRODUCER_VEC4_H

#include <stdint.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4f
v4_splat(float x)
{
    return (v4f){x, x, x, x};
}

// mask ? a : b, lane by lane (mask lanes all ones or all zeros, as comparisons give).
static inline v4f
v4_select(v4i mask, v4f a, v4f b)
{
    return (v4f)((mask & (v4i)a) | (~mask & (v4i)b));
}

// min and max with SSE semantics (a < b ? a : b), identical on every path.
static inline v4f
v4_min(v4f a, v4f b)
{
#if defined(__SSE2__)
    return (v4f)_mm_min_ps((__m128)a, (__m128)b);
#else
    return v4_select(a < b, a, b);
#endif
}

static inline v4f
v4_max(v4f a, v4f b)
{
#if defined(__SSE2__)
    return (v4f)_mm_max_ps((__m128)a, (__m128)b);
#else
    return v4_select(a > b, a, b);
#endif
}

// The four bytes at p as floats (a pixel's r, g, b and the next byte).
static inline v4f
v4_from_u8(const uint8_t *p)
{
#if defined(__SSE2__)
    // GCC scalarizes the generic conversion below; widening with unpacks is 4 instructions.
    int32_t bits;
    memcpy(&bits, p, sizeof bits);
    const __m128i zero = _mm_setzero_si128();
    __m128i wide = _mm_unpacklo_epi8(_mm_cvtsi32_si128(bits), zero);
    return (v4f)_mm_cvtepi32_ps(_mm_unpacklo_epi16(wide, zero));
#else
    typedef uint8_t v4u8 __attribute__((vector_size(4)));
    v4u8 bytes;
    memcpy(&bytes, p, sizeof bytes);
    return __builtin_convertvector(bytes, v4f);
#endif
}

#endif
