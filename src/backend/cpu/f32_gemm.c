/* f32_gemm.c - float32 GEMM with AVX-512F kernels of cattr's own (cx_f32_gemm512; f32_gemm_avx2.c holds the AVX2
 * kernel, the element-by-element form of the packed order and the entry points that pick one).
 *
 * Why: OpenBLAS is often configured (or detects the CPU) to run its AVX2 kernels on AVX-512 machines
 * (OPENBLAS_CORETYPE=Haswell here), and it repacks the constant operand on every call. These kernels keep every
 * product exact in float32 and run up to ~1.8x faster than that at the shapes of a transformer layer (measured with
 * bench/sgemm_rate.c and in the LLM bench).
 *
 * Packed (op(B) = B, and op(B) = B^T from PACK_MIN_ROWS rows of the whole product): per K block of PKC, A is packed
 * into panels of 12 rows (k-major) and op(B) into panels of 32 columns (B^T transposed on the copy, 16 x 16 register
 * transposes); tiles of 12 rows x 32 columns of C accumulate broadcast elements of A times two vectors of the panel
 * (24 vector sums in registers). Each element is one fused multiply-add chain per K block, added to C block after
 * block; a K longer than PKSUPER is cut into super-blocks whose sums are formed apart and then added, so a sum over
 * an LM head's vocabulary rounds like the others.
 *
 * Dot (op(B) = B^T, x W^T with W [N, K], below PACK_MIN_ROWS rows): a dot-product kernel on the row-major operands
 * as they are, no packing: 6 rows of A x 4 rows of W, 24 vector sums (16 lanes of k each) over K blocks of 1024,
 * each reduced to a scalar by a fixed lane tree. With few rows, packing W costs as much as it saves.
 *
 * The order of every element's sum depends only on K, the orientation and the kernel (chosen from the rows of the
 * whole product, not of the block a thread computes), never on the tile or the thread count. */
#include "backend/cpu/f32_gemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(CATTR_HAVE_AVX512F)
#include <immintrin.h>

#define MR 6      /* dot tile: rows of A */
#define NR 4      /* dot tile: rows of W */
#define KBLK 1024 /* dot: K per block */
#define PMR 12    /* packed tile: rows of A */
#define PNR 32    /* packed tile: columns of op(B) (two vectors) */
#define PKC CX_GEMM_PKC /* packed: K per block (a 128 KiB panel of op(B) streamed from L2, 48 KiB of A per tile) */
#define PKSUPER CX_GEMM_PKSUPER /* packed: K per super-block (sums of K blocks) */
#define PF_ROWS 24 /* pack of op(B) = B: rows ahead to prefetch */
#define PACK_MIN_ROWS 32   /* x W^T with at least this many rows in the whole product runs packed */

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

/* Transposes the 16 x 16 block in v (v[i] = row i) in place: v[c] = column c. */
static inline void transpose16(__m512 v[16]) {
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
    }
    /* u[4i + q], 128-bit lane j: rows 4i..4i+3 at column 4j + q */
    for (int i = 0; i < 16; i += 4) {
        __m512d t0 = _mm512_castps_pd(t[i]), t1 = _mm512_castps_pd(t[i + 1]);
        __m512d t2 = _mm512_castps_pd(t[i + 2]), t3 = _mm512_castps_pd(t[i + 3]);
        u[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
        u[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
        u[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
        u[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
    for (int q = 0; q < 4; q++) {
        __m512 v02 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x88), w02 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x88);
        __m512 v13 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xDD), w13 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xDD);
        v[q] = _mm512_shuffle_f32x4(v02, w02, 0x88);
        v[8 + q] = _mm512_shuffle_f32x4(v02, w02, 0xDD);
        v[4 + q] = _mm512_shuffle_f32x4(v13, w13, 0x88);
        v[12 + q] = _mm512_shuffle_f32x4(v13, w13, 0xDD);
    }
}

static inline __mmask16 lanes(int64_t n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1); }

/* Ap[k][r] = A[r][k] for k < kc, r < PMR (rows from mr on are zero) */
static void pack_a(int mr, int64_t kc, const float *A, int64_t lda, float *Ap) {
    for (int64_t k = 0; k < kc; k += 16) {
        __mmask16 km = lanes(kc - k);
        __m512 v[16];
        for (int r = 0; r < 16; r++) v[r] = r < mr ? _mm512_maskz_loadu_ps(km, A + r * lda + k) : _mm512_setzero_ps();
        transpose16(v);
        for (int i = 0; i < 16 && k + i < kc; i++) _mm512_mask_storeu_ps(Ap + (k + i) * PMR, lanes(PMR), v[i]);
    }
}

/* Bp[k][c] = op(B)[k][c] for k < kc, c < PNR (columns from nc on are zero); B points at op(B)[0][0] */
static void pack_b(int nc, int64_t kc, const float *B, int64_t ldb, bool trans_b, float *Bp) {
    if (!trans_b) {
        __mmask16 m0 = lanes(nc), m1 = nc > 16 ? lanes(nc - 16) : 0;
        for (int64_t k = 0; k < kc; k++) {
            if (k + PF_ROWS < kc) {
                _mm_prefetch((const char *)(B + (k + PF_ROWS) * ldb), _MM_HINT_T0);
                if (nc > 16) _mm_prefetch((const char *)(B + (k + PF_ROWS) * ldb) + 64, _MM_HINT_T0);
            }
            _mm512_store_ps(Bp + k * PNR, _mm512_maskz_loadu_ps(m0, B + k * ldb));
            _mm512_store_ps(Bp + k * PNR + 16, m1 ? _mm512_maskz_loadu_ps(m1, B + k * ldb + 16) : _mm512_setzero_ps());
        }
        return;
    }
    for (int h = 0; h < PNR; h += 16)
        for (int64_t k = 0; k < kc; k += 16) {
            __mmask16 km = lanes(kc - k);
            __m512 v[16];
            for (int c = 0; c < 16; c++)
                v[c] = h + c < nc ? _mm512_maskz_loadu_ps(km, B + (h + c) * ldb + k) : _mm512_setzero_ps();
            transpose16(v);
            for (int i = 0; i < 16 && k + i < kc; i++) _mm512_store_ps(Bp + (k + i) * PNR + h, v[i]);
        }
}

/* C[r][0..nc) = (add ? C[r][..] : 0) + sum over k < kc of Ap[k][r] Bp[k][..], r < mr: the sum one fused
 * multiply-add chain from zero in k order, then added to C */
static inline __attribute__((always_inline)) void packed_tile(int mr, int64_t kc, const float *Ap, const float *Bp,
                                                              float *C, int64_t ldc, int nc, bool add) {
    __mmask16 m0 = lanes(nc), m1 = nc > 16 ? lanes(nc - 16) : 0;
    __m512 acc[PMR][2];
#pragma GCC unroll 16
    for (int r = 0; r < PMR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0 = _mm512_load_ps(Bp + k * PNR), b1 = _mm512_load_ps(Bp + k * PNR + 16);
#pragma GCC unroll 16
        for (int r = 0; r < PMR; r++) {
            __m512 a = _mm512_set1_ps(Ap[k * PMR + r]);
            acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < PMR; r++)
        if (r < mr) {
            __m512 c0 = acc[r][0], c1 = acc[r][1];
            if (add) {
                c0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, C + r * ldc), c0);
                if (m1) c1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, C + r * ldc + 16), c1);
            }
            _mm512_mask_storeu_ps(C + r * ldc, m0, c0);
            if (m1) _mm512_mask_storeu_ps(C + r * ldc + 16, m1, c1); /* no pointer past a short row */
        }
}

/* C = sum over K blocks j0 (< K) of A[:, j0..] x op(B)[j0.., :], each block's sum added to C in k order; ap holds the
 * packed A of one block, bp one panel of op(B) */
static void packed_range(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const void *Bv, cx_gemm_btype bt,
                         int64_t ldb, bool trans_b, float *C, int64_t ldc, float *ap, float *bp) {
    const float *B = Bv; /* float32 only here (bt) */
    (void)bt;
    int64_t tiles = (M + PMR - 1) / PMR;
    for (int64_t j0 = 0; j0 < K; j0 += PKC) {
        int64_t kc = K - j0 < PKC ? K - j0 : PKC;
        for (int64_t t = 0; t < tiles; t++) {
            int64_t m = t * PMR;
            pack_a(M - m < PMR ? (int)(M - m) : PMR, kc, A + m * lda + j0, lda, ap + t * PMR * kc);
        }
        for (int64_t c0 = 0; c0 < N; c0 += PNR) {
            int nc = N - c0 < PNR ? (int)(N - c0) : PNR;
            pack_b(nc, kc, trans_b ? B + c0 * ldb + j0 : B + j0 * ldb + c0, ldb, trans_b, bp);
            for (int64_t t = 0; t < tiles; t++) {
                int64_t m = t * PMR;
                float *c = C + m * ldc + c0;
                if (M - m >= PMR) packed_tile(PMR, kc, ap + t * PMR * kc, bp, c, ldc, nc, j0 > 0);
                else packed_tile((int)(M - m), kc, ap + t * PMR * kc, bp, c, ldc, nc, j0 > 0);
            }
        }
    }
}

/* C = A x op(B) on packed operands: K blocks of PKC, and over PKSUPER (a long K, like the input gradient of an LM
 * head over the vocabulary) the sums of super-blocks computed apart and added to C in k order, so an element's
 * rounding grows with PKC + PKSUPER / PKC + K / PKSUPER rather than K / PKC. Without memory for its buffers the
 * same sums run element by element (cx_f32_gemm_packed_scalar). */
static void gemm_packed(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                        bool trans_b, float *C, int64_t ldc) {
    int64_t tiles = (M + PMR - 1) / PMR;
    cx_gemm_superblocks(M, N, K, A, lda, B, CX_GEMM_B_F32, ldb, trans_b, C, ldc, packed_range, tiles * PMR * PKC,
                        (size_t)((tiles * PMR + PNR) * PKC) * sizeof(float));
}

bool cx_f32_gemm512_available(void) { return true; }

void cx_f32_gemm512(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                    bool trans_b, float *C, int64_t ldc, int64_t rows_all) {
    if (!trans_b || rows_all >= PACK_MIN_ROWS) gemm_packed(M, N, K, A, lda, B, ldb, trans_b, C, ldc);
    else gemm_dot(M, N, K, A, lda, B, ldb, C, ldc);
}

#else

bool cx_f32_gemm512_available(void) { return false; }

void cx_f32_gemm512(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                    bool trans_b, float *C, int64_t ldc, int64_t rows_all) {
    (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb, (void)trans_b, (void)C, (void)ldc, (void)rows_all;
}

#endif
