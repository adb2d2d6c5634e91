/* bf16_gemm.c - precision "high": float32 GEMM with bfloat16 inputs and float32 accumulation on AVX-512 BF16
 * (VDPBF16PS), for products by a constant weight. Debian's OpenBLAS has no bf16 GEMM, so this is cattr's own.
 *
 * C[M, N] = A[M, K] x B with B[k][n] = trans ? W[n * ldw + k] : W[k * ldw + n], W float32 or a checkpoint's
 * bfloat16 / half matrix as stored (a stored bfloat16 packs as itself). B is packed once per weight and
 * orientation into panels of 32 columns: for each pair of rows (2p, 2p + 1) of B, 32 dwords, dword j holding the
 * bfloat16 of B[2p][n0 + j] (low half) and B[2p + 1][n0 + j] (high half), zero-padded. A is converted per call to
 * the same pairs (round to nearest even). One VDPBF16PS then adds a[2p] b[2p] + a[2p + 1] b[2p + 1] to 16 columns.
 * Loops: blocks of 256 pairs (A's block stays in L2, the panel's in L1); panels split over the OpenMP threads;
 * 8 x 32 register tiles. This file is built with -mavx512f -mavx512bf16 and only entered after a CPU check. */
#include "backend/cpu/bf16_gemm.h"

#include "core/core.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(CATTR_HAVE_AVX512BF16)
#include <immintrin.h>
#include <omp.h>

#define KB 256 /* pairs per K block */
#define MR 8

typedef struct {
    const void *w;
    int64_t rows, cols; /* of B: K x N */
    bool trans;
    uint64_t sample;
    uint32_t *packed; /* n_panels * Kp * 32 dwords */
    int64_t kp, n_panels;
} packed_b;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static packed_b *g_packs;
static int g_n, g_cap;

static size_t round64(size_t n) { return (n + 63) / 64 * 64; } /* aligned_alloc wants a multiple */

static inline uint16_t to_bf16(float f) { /* round to nearest even; NaN stays NaN */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static uint64_t sample_of(const void *w, int64_t n, size_t es) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 64; i++) {
        uint32_t u = 0;
        memcpy(&u, (const char *)w + (size_t)((int64_t)i * (n - 1) / 63) * es, es);
        h = (h ^ u) * 1099511628211ull;
    }
    return h;
}

/* element i of W as float32 (a stored bfloat16 or half widened exactly) */
static inline float w_at(const void *w, int64_t i, cx_gemm_btype wt) {
    if (wt == CX_GEMM_B_F32) return ((const float *)w)[i];
    uint16_t h;
    memcpy(&h, (const char *)w + 2 * i, 2);
    return wt == CX_GEMM_B_BF16 ? cx_bf16_to_f32(h) : cx_f16_to_f32(h);
}

static bool get_pack(const void *w, cx_gemm_btype wt, int64_t K, int64_t N, int64_t ldw, bool trans, packed_b *out) {
    uint64_t smp = sample_of(w, trans ? N * ldw : K * ldw, wt == CX_GEMM_B_F32 ? 4 : 2);
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_n; i++)
        if (g_packs[i].w == w && g_packs[i].rows == K && g_packs[i].cols == N && g_packs[i].trans == trans &&
            g_packs[i].sample == smp) {
            *out = g_packs[i];
            pthread_mutex_unlock(&g_mu);
            return true;
        }
    if (g_n == g_cap) {
        int nc = g_cap ? 2 * g_cap : 64;
        packed_b *np = realloc(g_packs, (size_t)nc * sizeof *np);
        if (!np) {
            pthread_mutex_unlock(&g_mu);
            return false;
        }
        g_packs = np;
        g_cap = nc;
    }
    packed_b pb = {w, K, N, trans, smp, NULL, (K + 1) / 2, (N + 31) / 32};
    pb.packed = aligned_alloc(64, round64((size_t)(pb.n_panels * pb.kp * 32) * 4));
    if (!pb.packed) {
        pthread_mutex_unlock(&g_mu);
        return false;
    }
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < pb.n_panels; p++)
        for (int64_t q = 0; q < pb.kp; q++) {
            uint32_t *dst = pb.packed + (p * pb.kp + q) * 32;
            for (int j = 0; j < 32; j++) {
                int64_t n = p * 32 + j, k0 = 2 * q, k1 = 2 * q + 1;
                float b0 = 0, b1 = 0;
                if (n < N) {
                    b0 = w_at(w, trans ? n * ldw + k0 : k0 * ldw + n, wt);
                    if (k1 < K) b1 = w_at(w, trans ? n * ldw + k1 : k1 * ldw + n, wt);
                }
                dst[j] = (uint32_t)to_bf16(b0) | (uint32_t)to_bf16(b1) << 16;
            }
        }
    g_packs[g_n++] = pb;
    *out = pb;
    pthread_mutex_unlock(&g_mu);
    return true;
}

/* acc[r] over pairs q0..q1 of rows a (MR rows of packed A, stride kp dwords) and panel b. */
static inline void tile(const uint32_t *a, int64_t kp, const uint32_t *b, int64_t nq, int mr, float *c, int64_t ldc,
                        int ncols, bool first) {
    __m512 acc[MR][2];
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    if (mr == MR) {
        for (int64_t q = 0; q < nq; q++) {
            __m512bh b0 = (__m512bh)_mm512_load_si512((const void *)(b + q * 32));
            __m512bh b1 = (__m512bh)_mm512_load_si512((const void *)(b + q * 32 + 16));
#pragma GCC unroll 8
            for (int r = 0; r < MR; r++) {
                __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[r * kp + q]);
                acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
                acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
            }
        }
    } else {
        for (int64_t q = 0; q < nq; q++) {
            __m512bh b0 = (__m512bh)_mm512_load_si512((const void *)(b + q * 32));
            __m512bh b1 = (__m512bh)_mm512_load_si512((const void *)(b + q * 32 + 16));
            for (int r = 0; r < mr; r++) {
                __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[r * kp + q]);
                acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
                acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
            }
        }
    }
    __mmask16 m0 = ncols >= 16 ? 0xffff : (__mmask16)((1u << ncols) - 1);
    __mmask16 m1 = ncols >= 32 ? 0xffff : ncols <= 16 ? 0 : (__mmask16)((1u << (ncols - 16)) - 1);
    for (int r = 0; r < mr; r++) {
        float *cr = c + r * ldc;
        __m512 v0 = acc[r][0], v1 = acc[r][1];
        if (!first) {
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, cr));
            v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, cr + 16));
        }
        _mm512_mask_storeu_ps(cr, m0, v0);
        _mm512_mask_storeu_ps(cr + 16, m1, v1);
    }
}

static bool cpu_ok(void) {
    static _Atomic int ok = -1; /* threads may race to set it: all set the same value */
    if (ok < 0) {
        __builtin_cpu_init();
        ok = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512f");
    }
    return ok;
}

bool cx_bf16_available(void) { return cpu_ok(); }

cattr_status cx_bf16_gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const void *W, cx_gemm_btype wt,
                          int64_t ldw, bool trans, float *C, int64_t ldc) {
    if (!cpu_ok()) return cx_fail(CATTR_ERR_UNSUPPORTED, "precision 'high' needs AVX-512 BF16, which this CPU lacks");
    packed_b pk;
    if (!get_pack(W, wt, K, N, ldw, trans, &pk)) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory packing a bfloat16 weight");
    const packed_b *pb = &pk;
    int64_t kp = pb->kp, Mp = (M + MR - 1) / MR * MR;
    uint32_t *ap = aligned_alloc(64, round64((size_t)(Mp * kp) * 4 + 64));
    if (!ap) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
#pragma omp parallel for schedule(static) if (M * K > 65536)
    for (int64_t m = 0; m < Mp; m++) {
        uint32_t *dst = ap + m * kp;
        if (m >= M) {
            memset(dst, 0, (size_t)kp * 4);
            continue;
        }
        const float *src = A + m * lda;
        int64_t k = 0;
        for (; k + 32 <= K; k += 32) {
            __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + k + 16), _mm512_loadu_ps(src + k));
            _mm512_storeu_si512((void *)(dst + k / 2), (__m512i)v);
        }
        for (; k < K; k += 2) dst[k / 2] = (uint32_t)to_bf16(src[k]) | (uint32_t)(k + 1 < K ? to_bf16(src[k + 1]) : 0) << 16;
    }
    int64_t np = pb->n_panels;
    for (int64_t q0 = 0; q0 < kp; q0 += KB) {
        int64_t nq = kp - q0 < KB ? kp - q0 : KB;
        bool first = q0 == 0;
#pragma omp parallel for schedule(static) if (M * N * K > 4000000)
        for (int64_t p = 0; p < np; p++) {
            const uint32_t *b = pb->packed + (p * kp + q0) * 32;
            int ncols = (int)(N - p * 32 < 32 ? N - p * 32 : 32);
            for (int64_t m = 0; m < M; m += MR) {
                int mr = (int)(M - m < MR ? M - m : MR);
                tile(ap + m * kp + q0, kp, b, nq, mr, C + m * ldc + p * 32, ldc, ncols, first);
            }
        }
    }
    free(ap);
    return CATTR_OK;
}

void cx_bf16_release(const void *w) {
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_n;)
        if (g_packs[i].w == w) {
            free(g_packs[i].packed);
            g_packs[i] = g_packs[--g_n];
        } else {
            i++;
        }
    pthread_mutex_unlock(&g_mu);
}

void cx_bf16_release_all(void) {
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_n; i++) free(g_packs[i].packed);
    free(g_packs);
    g_packs = NULL;
    g_n = g_cap = 0;
    pthread_mutex_unlock(&g_mu);
}

#else

bool cx_bf16_available(void) { return false; }

cattr_status cx_bf16_gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const void *W, cx_gemm_btype wt,
                          int64_t ldw, bool trans, float *C, int64_t ldc) {
    (void)M, (void)N, (void)K, (void)A, (void)lda, (void)W, (void)wt, (void)ldw, (void)trans, (void)C, (void)ldc;
    return cx_fail(CATTR_ERR_UNSUPPORTED, "precision 'high' needs AVX-512 BF16 kernels, not built here");
}

void cx_bf16_release(const void *w) { (void)w; }

void cx_bf16_release_all(void) {}

#endif
