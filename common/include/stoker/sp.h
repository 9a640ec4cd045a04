// nng's SP framing over a byte stream, as its tcp transport writes it (nng 1.5), for the
// producer's push stream (which writes it by hand) and the broker's intake (which reads it by
// hand): an 8-byte handshake each way ("\0SP\0", the protocol as a big-endian u16, two zero
// bytes), then messages, each a big-endian u64 length and the body; a request's body starts
// with its 32-bit id (high bit set), which the reply repeats.
#ifndef STOKER_SP_H
#define STOKER_SP_H

#include <stdint.h>
#include <string.h>

#define STOKER_SP_REQ0 0x30 // nng's protocol numbers
#define STOKER_SP_REP0 0x31

// Writes v as `bytes` big-endian bytes at dst.
static inline void
stoker_sp_put_be(uint8_t *dst, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--, v >>= 8)
        dst[i] = (uint8_t)v;
}

// Reads `bytes` big-endian bytes at src.
static inline uint64_t
stoker_sp_get_be(const uint8_t *src, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v = v << 8 | src[i];
    return v;
}

// The handshake a peer of protocol `self` sends.
static inline void
stoker_sp_handshake(uint8_t out[8], uint16_t self)
{
    memcpy(out, "\0SP\0", 4);
    stoker_sp_put_be(out + 4, self, 2);
    out[6] = out[7] = 0;
}

// Whether hs is a handshake of a peer of protocol `peer`.
static inline int
stoker_sp_handshake_is(const uint8_t hs[8], uint16_t peer)
{
    return memcmp(hs, "\0SP\0", 4) == 0 && stoker_sp_get_be(hs + 4, 2) == peer && hs[6] == 0 &&
           hs[7] == 0;
}

#endif
