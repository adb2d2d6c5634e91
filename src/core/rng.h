/* rng.h - counter-based random numbers (Philox4x32-10): value i of stream s under seed k is a pure function of
 * (k, s, i), so stochastic methods give the same result whatever the thread count, chunking or device. */
#ifndef CATTR_RNG_H
#define CATTR_RNG_H

#include <stdint.h>

typedef struct cx_rng {
    uint64_t seed;
    uint64_t stream;
    uint64_t index; /* next 128-bit block */
    uint32_t buf[4];
    int avail;      /* unread words in buf */
} cx_rng;

/* The four 32-bit words of block `index` of `stream` under `seed`. */
void cx_philox(uint64_t seed, uint64_t stream, uint64_t index, uint32_t out[4]);

void cx_rng_init(cx_rng *r, uint64_t seed, uint64_t stream);
uint32_t cx_rng_u32(cx_rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double cx_rng_uniform(cx_rng *r);
/* Standard normal (Box-Muller on two uniforms: the four words of one block). */
double cx_rng_normal(cx_rng *r);
/* The normal cx_rng_normal draws from block `block` of `stream` under `seed` (a generator at that block boundary): a
 * pure function, so any device and any split of the work draw the same values (the NormalNoise op's kernels). */
double cx_rng_normal_at(uint64_t seed, uint64_t stream, uint64_t block);
/* Uniform integer in [0, n) without modulo bias; n >= 1. */
int64_t cx_rng_below(cx_rng *r, int64_t n);
/* A uniformly random permutation of 0..n-1 (Fisher-Yates). */
void cx_rng_permutation(cx_rng *r, int64_t n, int64_t *out);

#endif
