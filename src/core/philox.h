/* philox.h - the Philox4x32-10 block function and the normal draw at a block, as inline functions that host code
 * (rng.c) and the CUDA backend's kernels share, so that every device draws the same values. */
#ifndef CATTR_PHILOX_H
#define CATTR_PHILOX_H

#include "core/hd.h"

#include <math.h>
#include <stdint.h>

/* The four 32-bit words of block `index` of `stream` under `seed` (Salmon et al., SC 2011: the key is the seed, the
 * 128-bit counter is (index, stream)). */
static inline CX_HD void cx_philox_block(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)index, c1 = (uint32_t)(index >> 32), c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0, hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* Uniform in [0, 1) with 53 random bits from two words (27 + 26 bits). */
static inline CX_HD double cx_philox_uniform(uint32_t w0, uint32_t w1) {
    uint64_t a = w0 >> 5, b = w1 >> 6;
    return ((double)a * 67108864.0 + (double)b) * (1.0 / 9007199254740992.0);
}

/* The standard normal of block `block`: Box-Muller on the two uniforms of its four words. */
static inline CX_HD double cx_philox_normal_at(uint64_t seed, uint64_t stream, uint64_t block) {
    uint32_t w[4];
    cx_philox_block(seed, stream, block, w);
    double u1 = cx_philox_uniform(w[0], w[1]), u2 = cx_philox_uniform(w[2], w[3]);
    if (u1 <= 0) u1 = 1.0 / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
