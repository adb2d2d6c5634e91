/* f32_gemm.c - float32 GEMM with AVX-512F kernels of cattr's own.
 *
 * Why: OpenBLAS is often configured (or detects the CPU) to run its AVX2 kernels on AVX-512 machines
 * (OPENBLAS_CORETYPE=Haswell here), and it repacks the constant operand on every call. These two kernels keep every
 * product exact in float32 and run 1.2-1.7x faster than that at the shapes of a transformer layer (measured with
 * bench/sgemm_rate.c and in the LLM bench).
 *
 * op(B) = B^T (x W^T with W [N, K], a layer's forward): a dot-product kernel on the row-major operands as they are,
 * no packing: 6 rows of A x 4 rows of W, 24 vector sums (16 lanes of k each) over K blocks of 1024, each reduced to
 * a scalar by a fixed lane tree. W streams from memory row by row, which is what a weight read once per call wants
 * (a transposing copy into L1 panels measured faster with W in cache, slower in an LLM pass where it is not).
 *
 * op(B) = B (dy W, the input gradient of a layer; convolution GEMMs): B's rows are copied into an L1 panel of 32
 * columns x 192 rows, then tiles of 12 rows x 32 columns of C accumulate broadcast elements of A times the panel
 * (24 vector sums in registers); K blocks after the first add into C.
 *
 * The order of every element's sum depends only on K and the orientation, never on the block a thread computes, the
 * tile or the thread count. */
#include "backend/cpu/f32_gemm.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(CATTR_HAVE_AVX512F)
#include <immintrin.h>

#define MR 6      /* dot tile: rows of A */
#define NR 4      /* dot tile: rows of W */
#define KBLK 1024 /* dot: K per block */
#define BMR 12    /* panel tile: rows of A */
#define JB 192    /* panel: rows of B (K) */

/* [sum a, sum b, sum c, sum d] */
static inline __m128 sum4(__m512 a, __m512 b, __m512 c, __m512 d) {
    __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    __m512 x = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(ab), _mm512_castps_pd(cd))),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(ab), _mm512_castps_pd(cd))));
    __m256 y = _mm256_add_ps(_mm512_castps512_ps256(x), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    return _mm_add_ps(_mm256_castps256_ps128(y), _mm256_extractf128_ps(y, 1));
}

/* C[r][j] (+)= sum over k < K of A[r][k] W[j][k], r < mr, j < nr; inlined with constant mr, nr for full tiles */
static inline __attribute__((always_inline)) void dot_tile(int mr, int nr, int64_t K, const float *A, int64_t lda,
                                                           const float *W, int64_t ldw, float *C, int64_t ldc, bool add) {
    __m512 acc[MR][NR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 8
        for (int j = 0; j < NR; j++) acc[r][j] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        __m512 w[NR];
#pragma GCC unroll 8
        for (int j = 0; j < NR; j++)
            w[j] = j < nr ? _mm512_loadu_ps(W + j * ldw + k) : _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++)
            if (r < mr) {
                __m512 a = _mm512_loadu_ps(A + r * lda + k);
#pragma GCC unroll 8
                for (int j = 0; j < NR; j++)
                    if (j < nr) acc[r][j] = _mm512_fmadd_ps(a, w[j], acc[r][j]);
            }
    }
    if (k < K) {
        __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
        __m512 w[NR];
#pragma GCC unroll 8
        for (int j = 0; j < NR; j++)
            w[j] = j < nr ? _mm512_maskz_loadu_ps(m, W + j * ldw + k) : _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++)
            if (r < mr) {
                __m512 a = _mm512_maskz_loadu_ps(m, A + r * lda + k);
#pragma GCC unroll 8
                for (int j = 0; j < NR; j++)
                    if (j < nr) acc[r][j] = _mm512_fmadd_ps(a, w[j], acc[r][j]);
            }
    }
    for (int r = 0; r < mr; r++) {
        float s[4];
        _mm_storeu_ps(s, sum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
        for (int j = 0; j < nr; j++) C[r * ldc + j] = add ? C[r * ldc + j] + s[j] : s[j];
    }
}

static void gemm_dot(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *W, int64_t ldw, float *C,
                    int64_t ldc) {
    for (int64_t k0 = 0; k0 < K; k0 += KBLK) {
        int64_t kb = K - k0 < KBLK ? K - k0 : KBLK;
        int64_t nblk = (384 * 1024) / (kb * 4) / NR * NR; /* rows of W per block: ~384 KiB */
        if (nblk < NR) nblk = NR;
        for (int64_t n0 = 0; n0 < N; n0 += nblk) {
            int64_t n1 = n0 + nblk < N ? n0 + nblk : N;
            for (int64_t m = 0; m < M; m += MR) {
                int mr = M - m < MR ? (int)(M - m) : MR;
                for (int64_t n = n0; n < n1; n += NR) {
                    int nr = n1 - n < NR ? (int)(n1 - n) : NR;
                    const float *a = A + m * lda + k0, *w = W + n * ldw + k0;
                    float *c = C + m * ldc + n;
                    if (mr == MR && nr == NR) dot_tile(MR, NR, kb, a, lda, w, ldw, c, ldc, k0 > 0);
                    else dot_tile(mr, nr, kb, a, lda, w, ldw, c, ldc, k0 > 0);
                }
            }
        }
    }
}

/* C[r][0..nc) (+)= sum over j < jb of A[r][j] Bp[j][0..nc), r < mr */
static inline __attribute__((always_inline)) void bcast_tile(int mr, int64_t jb, const float *A, int64_t lda,
                                                             const float *Bp, float *C, int64_t ldc, int nc, bool add) {
    __m512 acc[BMR][2];
#pragma GCC unroll 16
    for (int r = 0; r < BMR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t j = 0; j < jb; j++) {
        __m512 b0 = _mm512_load_ps(Bp + j * 32), b1 = _mm512_load_ps(Bp + j * 32 + 16);
#pragma GCC unroll 16
        for (int r = 0; r < BMR; r++)
            if (r < mr) {
                __m512 a = _mm512_set1_ps(A[r * lda + j]);
                acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
                acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
            }
    }
    __mmask16 m0 = nc >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nc) - 1);
    __mmask16 m1 = nc >= 32 ? (__mmask16)0xffff : nc <= 16 ? (__mmask16)0 : (__mmask16)((1u << (nc - 16)) - 1);
    for (int r = 0; r < mr; r++) {
        __m512 c0 = acc[r][0], c1 = acc[r][1];
        if (add) {
            c0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, C + r * ldc), c0);
            c1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, C + r * ldc + 16), c1);
        }
        _mm512_mask_storeu_ps(C + r * ldc, m0, c0);
        _mm512_mask_storeu_ps(C + r * ldc + 16, m1, c1);
    }
}

/* C = A x B through L1 panels of B: 32 columns x up to JB rows, zero-padded to 32 columns */
static void gemm_panels(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                        float *C, int64_t ldc) {
    float bp[JB * 32] __attribute__((aligned(64)));
    for (int64_t j0 = 0; j0 < K; j0 += JB) {
        int64_t jb = K - j0 < JB ? K - j0 : JB;
        for (int64_t c0 = 0; c0 < N; c0 += 32) {
            int nc = N - c0 < 32 ? (int)(N - c0) : 32;
            for (int64_t j = 0; j < jb; j++) {
                if (nc < 32) memset(bp + j * 32, 0, 32 * sizeof(float));
                memcpy(bp + j * 32, B + (j0 + j) * ldb + c0, (size_t)nc * sizeof(float));
            }
            for (int64_t m = 0; m < M; m += BMR) {
                int mr = M - m < BMR ? (int)(M - m) : BMR;
                const float *a = A + m * lda + j0;
                float *c = C + m * ldc + c0;
                if (mr == BMR) bcast_tile(BMR, jb, a, lda, bp, c, ldc, nc, j0 > 0);
                else bcast_tile(mr, jb, a, lda, bp, c, ldc, nc, j0 > 0);
            }
        }
    }
}

bool cx_f32_gemm_available(void) {
    static _Atomic int ok = -1; /* threads may race to set it: all set the same value */
    if (ok < 0) {
        const char *e = getenv("CATTR_GEMM");
        __builtin_cpu_init();
        ok = __builtin_cpu_supports("avx512f") && !(e && strcmp(e, "openblas") == 0);
    }
    return ok;
}

void cx_f32_gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, bool trans_b,
                 float *C, int64_t ldc) {
    if (trans_b) gemm_dot(M, N, K, A, lda, B, ldb, C, ldc);
    else gemm_panels(M, N, K, A, lda, B, ldb, C, ldc);
}

#else

bool cx_f32_gemm_available(void) { return false; }

void cx_f32_gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, bool trans_b,
                 float *C, int64_t ldc) {
    (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb, (void)trans_b, (void)C, (void)ldc;
}

#endif
