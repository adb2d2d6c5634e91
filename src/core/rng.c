/* rng.c - Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011) and the draws
 * built on it. The key is the seed; the 128-bit counter is (index, stream). */
#include "core/rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    *lo = (uint32_t)p;
}

void cx_philox(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)index, c1 = (uint32_t)(index >> 32), c2 = (uint32_t)stream, c3 = (uint32_t)(stream >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int round = 0; round < 10; round++) {
        uint32_t hi0, lo0, hi1, lo1;
        mulhilo(PHILOX_M0, c0, &hi0, &lo0);
        mulhilo(PHILOX_M1, c2, &hi1, &lo1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

void cx_rng_init(cx_rng *r, uint64_t seed, uint64_t stream) {
    r->seed = seed;
    r->stream = stream;
    r->index = 0;
    r->avail = 0;
}

uint32_t cx_rng_u32(cx_rng *r) {
    if (r->avail == 0) {
        cx_philox(r->seed, r->stream, r->index++, r->buf);
        r->avail = 4;
    }
    return r->buf[4 - r->avail--];
}

double cx_rng_uniform(cx_rng *r) {
    uint64_t a = cx_rng_u32(r) >> 5, b = cx_rng_u32(r) >> 6; /* 27 + 26 bits */
    return ((double)a * 67108864.0 + (double)b) * (1.0 / 9007199254740992.0);
}

double cx_rng_normal(cx_rng *r) {
    double u1 = cx_rng_uniform(r), u2 = cx_rng_uniform(r);
    if (u1 <= 0) u1 = 1.0 / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

double cx_rng_normal_at(uint64_t seed, uint64_t stream, uint64_t block) {
    cx_rng g;
    cx_rng_init(&g, seed, stream);
    g.index = block;
    return cx_rng_normal(&g);
}

int64_t cx_rng_below(cx_rng *r, int64_t n) {
    if (n <= 1) return 0;
    uint64_t un = (uint64_t)n, lim = UINT64_MAX - UINT64_MAX % un;
    for (;;) {
        uint64_t v = ((uint64_t)cx_rng_u32(r) << 32) | cx_rng_u32(r);
        if (v < lim) return (int64_t)(v % un);
    }
}

void cx_rng_permutation(cx_rng *r, int64_t n, int64_t *out) {
    for (int64_t i = 0; i < n; i++) out[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = cx_rng_below(r, i + 1), t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
}
