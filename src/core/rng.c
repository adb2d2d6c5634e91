/* rng.c - Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011) and the draws
 * built on it. The key is the seed; the 128-bit counter is (index, stream). */
#include "core/rng.h"
#include "core/philox.h"

#include <math.h>

void cx_philox(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4]) {
    cx_philox_block(seed, stream, index, out);
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
    return cx_philox_normal_at(seed, stream, block);
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
