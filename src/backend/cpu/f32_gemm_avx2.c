/* f32_gemm_avx2.c - the entry points of cattr's own float32 GEMM (which kernel a CPU gets), its AVX2 + FMA kernel,
 * and the element-by-element form of the packed order that both kernels follow (see f32_gemm.h).
 *
 * Why an AVX2 kernel: OpenBLAS's AVX2 sgemm kernels (Haswell, Zen) round a row of C differently by its place in the
 * product (its position within the kernel's tiles and edge paths), so the rows of a unit of IntegratedGradients
 * computed in a pass of another size, in a part of a split call, came out in other bits than in the whole call. This
 * kernel computes every element as the packed order says, whatever the shape of the product or the element's place.
 *
 * Layout: per K block of CX_GEMM_PKC, op(B) packed into panels of 16 columns (1024 columns at a time) and A into
 * panels of 6 rows (96 rows at a time, which stay in L2 while the block of B passes); tiles of 6 rows x 16 columns
 * accumulate broadcast elements of A times two 8-lane vectors of the panel (12 vector
 * sums in registers), each element one fused multiply-add chain from zero in k order, added to C block after block;
 * super-blocks of CX_GEMM_PKSUPER formed apart and added. This file is built with -mavx2 -mfma and the kernel only
 * entered after a CPU check. */
#include "backend/cpu/f32_gemm.h"
#include "core/core.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Each thread keeps its packing buffer from call to call (up to PACK_KEEP bytes; it is the size of the largest
 * product's packed A, a few MiB in an LLM pass): glibc returns a freed block of this size to the kernel, and mapping
 * it again costs a page fault per 4 KiB on every call (at 2048^3 it halved the rate). A thread-specific key frees it
 * when its thread exits; the main thread's stays reachable until the process ends. */
#define PACK_KEEP ((size_t)32 << 20)
static _Thread_local float *g_pack;
static _Thread_local size_t g_pack_bytes;
static pthread_key_t g_pack_key;
static pthread_once_t g_pack_once = PTHREAD_ONCE_INIT;
static bool g_pack_key_ok;

static void pack_key_make(void) { g_pack_key_ok = pthread_key_create(&g_pack_key, free) == 0; }

float *cx_gemm_pack_buffer(size_t bytes) {
    bytes = (bytes + 63) / 64 * 64;
    pthread_once(&g_pack_once, pack_key_make);
    if (bytes > PACK_KEEP || !g_pack_key_ok) return aligned_alloc(64, bytes);
    if (bytes > g_pack_bytes) {
        free(g_pack);
        g_pack = aligned_alloc(64, bytes);
        g_pack_bytes = g_pack ? bytes : 0;
        pthread_setspecific(g_pack_key, g_pack);
    }
    return g_pack;
}

void cx_gemm_pack_buffer_done(float *p) {
    if (p != g_pack) free(p);
}

/* Element i of B as stored (bt), and its address: a checkpoint's bfloat16 or half values widened exactly */
static inline float b_val(const void *B, cx_gemm_btype bt, int64_t i) {
    if (bt == CX_GEMM_B_F32) return ((const float *)B)[i];
    uint16_t h = ((const uint16_t *)B)[i];
    return bt == CX_GEMM_B_BF16 ? cx_bf16_to_f32(h) : cx_f16_to_f32(h);
}
static inline const void *b_ptr(const void *B, cx_gemm_btype bt, int64_t i) {
    return (const char *)B + i * (bt == CX_GEMM_B_F32 ? 4 : 2);
}

static void packed_scalar(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const void *B, cx_gemm_btype bt,
                          int64_t ldb, bool trans_b, float *C, int64_t ldc);

void cx_gemm_superblocks(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const void *B, cx_gemm_btype bt,
                         int64_t ldb, bool trans_b, float *C, int64_t ldc, cx_gemm_range_fn range, int64_t b_offset,
                         size_t bytes) {
    float *ap = cx_gemm_pack_buffer(bytes), *part = NULL;
    if (ap && K > CX_GEMM_PKSUPER) part = malloc((size_t)(M * N) * sizeof *part);
    if (!ap || (K > CX_GEMM_PKSUPER && !part)) {
        if (ap) cx_gemm_pack_buffer_done(ap);
        packed_scalar(M, N, K, A, lda, B, bt, ldb, trans_b, C, ldc);
        return;
    }
    float *bp = ap + b_offset;
    for (int64_t s0 = 0; s0 < K; s0 += CX_GEMM_PKSUPER) {
        int64_t ks = K - s0 < CX_GEMM_PKSUPER ? K - s0 : CX_GEMM_PKSUPER;
        const void *b = b_ptr(B, bt, trans_b ? s0 : s0 * ldb);
        if (s0 == 0) {
            range(M, N, ks, A, lda, b, bt, ldb, trans_b, C, ldc, ap, bp);
            continue;
        }
        range(M, N, ks, A + s0, lda, b, bt, ldb, trans_b, part, N, ap, bp);
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) C[m * ldc + n] += part[m * N + n];
    }
    free(part);
    cx_gemm_pack_buffer_done(ap);
}

void cx_f32_gemm_packed_scalar(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                               int64_t ldb, bool trans_b, float *C, int64_t ldc) {
    packed_scalar(M, N, K, A, lda, B, CX_GEMM_B_F32, ldb, trans_b, C, ldc);
}

static void packed_scalar(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const void *B, cx_gemm_btype bt,
                          int64_t ldb, bool trans_b, float *C, int64_t ldc) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            float c = 0.0f;
            for (int64_t s0 = 0; s0 < K; s0 += CX_GEMM_PKSUPER) {
                int64_t s1 = s0 + CX_GEMM_PKSUPER < K ? s0 + CX_GEMM_PKSUPER : K;
                float part = 0.0f;
                for (int64_t j0 = s0; j0 < s1; j0 += CX_GEMM_PKC) {
                    int64_t j1 = j0 + CX_GEMM_PKC < s1 ? j0 + CX_GEMM_PKC : s1;
                    float acc = 0.0f;
                    for (int64_t k = j0; k < j1; k++)
                        acc = fmaf(A[m * lda + k], b_val(B, bt, trans_b ? n * ldb + k : k * ldb + n), acc);
                    part = j0 == s0 ? acc : part + acc;
                }
                c = s0 == 0 ? part : c + part;
            }
            C[m * ldc + n] = c;
        }
}

#if defined(__x86_64__) && defined(CATTR_HAVE_AVX2)
#include <immintrin.h>

#define AMR 6  /* tile rows of A */
#define ANR 16 /* tile columns of op(B): two vectors */

/* Ap[k][r] = A[r][k] for k < kc, r < AMR (rows from mr on are zero) */
static void pack_a(int mr, int64_t kc, const float *A, int64_t lda, float *Ap) {
    for (int64_t k = 0; k < kc; k++)
        for (int r = 0; r < AMR; r++) Ap[k * AMR + r] = r < mr ? A[r * lda + k] : 0.0f;
}

/* t[i][j] = r[j][i]: an 8 x 8 block of floats transposed */
static inline __attribute__((always_inline)) void transpose8(const __m256 *r, __m256 *t) {
    __m256 a0 = _mm256_unpacklo_ps(r[0], r[1]), a1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 a2 = _mm256_unpacklo_ps(r[2], r[3]), a3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 a4 = _mm256_unpacklo_ps(r[4], r[5]), a5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 a6 = _mm256_unpacklo_ps(r[6], r[7]), a7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 b0 = _mm256_shuffle_ps(a0, a2, 0x44), b1 = _mm256_shuffle_ps(a0, a2, 0xEE);
    __m256 b2 = _mm256_shuffle_ps(a1, a3, 0x44), b3 = _mm256_shuffle_ps(a1, a3, 0xEE);
    __m256 b4 = _mm256_shuffle_ps(a4, a6, 0x44), b5 = _mm256_shuffle_ps(a4, a6, 0xEE);
    __m256 b6 = _mm256_shuffle_ps(a5, a7, 0x44), b7 = _mm256_shuffle_ps(a5, a7, 0xEE);
    t[0] = _mm256_permute2f128_ps(b0, b4, 0x20), t[4] = _mm256_permute2f128_ps(b0, b4, 0x31);
    t[1] = _mm256_permute2f128_ps(b1, b5, 0x20), t[5] = _mm256_permute2f128_ps(b1, b5, 0x31);
    t[2] = _mm256_permute2f128_ps(b2, b6, 0x20), t[6] = _mm256_permute2f128_ps(b2, b6, 0x31);
    t[3] = _mm256_permute2f128_ps(b3, b7, 0x20), t[7] = _mm256_permute2f128_ps(b3, b7, 0x31);
}

/* Eight consecutive values of B as stored (bt), widened exactly: bfloat16 by a shift into the high half, half
 * through cx_f16_to_f32 */
static inline __attribute__((always_inline)) __m256 load8(const void *B, cx_gemm_btype bt, int64_t i) {
    if (bt == CX_GEMM_B_F32) return _mm256_loadu_ps((const float *)B + i);
    const uint16_t *h = (const uint16_t *)B + i;
    if (bt == CX_GEMM_B_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)h)), 16));
    float f[8];
    for (int j = 0; j < 8; j++) f[j] = cx_f16_to_f32(h[j]);
    return _mm256_loadu_ps(f);
}

/* Bp[k][c] = op(B)[k][c] for k < kc, c < ANR (columns from nc on are zero); element `at` of B (stored as bt) is
 * op(B)[0][0] */
static inline __attribute__((always_inline)) void pack_b_of(int nc, int64_t kc, const void *B, cx_gemm_btype bt,
                                                            int64_t at, int64_t ldb, bool trans_b, float *Bp) {
    if (!trans_b) {
        for (int64_t k = 0; k < kc; k++) {
            int64_t b = at + k * ldb;
            float *d = Bp + k * ANR;
            if (nc == ANR) {
                _mm256_store_ps(d, load8(B, bt, b));
                _mm256_store_ps(d + 8, load8(B, bt, b + 8));
            } else {
                for (int c = 0; c < ANR; c++) d[c] = c < nc ? b_val(B, bt, b + c) : 0.0f;
            }
        }
        return;
    }
    int64_t k0 = 0;
    if (nc == ANR) /* B^T, whole panel: 8 x 8 blocks of B transposed in registers (the same values, moved) */
        for (; k0 + 8 <= kc; k0 += 8)
            for (int h = 0; h < ANR; h += 8) {
                __m256 r[8], t[8];
                for (int j = 0; j < 8; j++) r[j] = load8(B, bt, at + (h + j) * ldb + k0);
                transpose8(r, t);
                for (int i = 0; i < 8; i++) _mm256_store_ps(Bp + (k0 + i) * ANR + h, t[i]);
            }
    for (int c = 0; c < ANR; c++) /* B^T: column c of the panel is row c of B */
        for (int64_t k = k0; k < kc; k++) Bp[k * ANR + c] = c < nc ? b_val(B, bt, at + c * ldb + k) : 0.0f;
}
/* one copy of the packing per storage type, so that float32's loads stay unconditional */
static void pack_b(int nc, int64_t kc, const void *B, cx_gemm_btype bt, int64_t at, int64_t ldb, bool trans_b,
                   float *Bp) {
    if (bt == CX_GEMM_B_F32) pack_b_of(nc, kc, B, CX_GEMM_B_F32, at, ldb, trans_b, Bp);
    else if (bt == CX_GEMM_B_BF16) pack_b_of(nc, kc, B, CX_GEMM_B_BF16, at, ldb, trans_b, Bp);
    else pack_b_of(nc, kc, B, CX_GEMM_B_F16, at, ldb, trans_b, Bp);
}

static inline __m256i lane_mask(int n) { /* lanes below n set */
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* C[r][0..nc) = (add ? C[r][..] : 0) + sum over k < kc of Ap[k][r] Bp[k][..], r < mr: the sum one fused
 * multiply-add chain from zero in k order, then added to C */
static inline __attribute__((always_inline)) void tile(int mr, int64_t kc, const float *Ap, const float *Bp, float *C,
                                                       int64_t ldc, int nc, bool add) {
    __m256 acc[AMR][2];
#pragma GCC unroll 8
    for (int r = 0; r < AMR; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(Bp + k * ANR), b1 = _mm256_load_ps(Bp + k * ANR + 8);
#pragma GCC unroll 8
        for (int r = 0; r < AMR; r++) {
            __m256 a = _mm256_broadcast_ss(Ap + k * AMR + r);
            acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
        }
    }
    if (nc == ANR) {
        for (int r = 0; r < mr; r++) {
            float *c = C + r * ldc;
            __m256 c0 = acc[r][0], c1 = acc[r][1];
            if (add) {
                c0 = _mm256_add_ps(_mm256_loadu_ps(c), c0);
                c1 = _mm256_add_ps(_mm256_loadu_ps(c + 8), c1);
            }
            _mm256_storeu_ps(c, c0);
            _mm256_storeu_ps(c + 8, c1);
        }
        return;
    }
    __m256i m0 = lane_mask(nc), m1 = lane_mask(nc - 8); /* no load or store past a short row */
    for (int r = 0; r < mr; r++) {
        float *c = C + r * ldc;
        __m256 c0 = acc[r][0], c1 = acc[r][1];
        if (add) {
            c0 = _mm256_add_ps(_mm256_maskload_ps(c, m0), c0);
            if (nc > 8) c1 = _mm256_add_ps(_mm256_maskload_ps(c + 8, m1), c1);
        }
        _mm256_maskstore_ps(c, m0, c0);
        if (nc > 8) _mm256_maskstore_ps(c + 8, m1, c1);
    }
}

/* Cache blocks within a K block: op(B) packed NCB columns at a time (4 MiB, from L3), A MCB rows at a time (384 KiB,
 * kept in L2 while every panel of the B block passes over it). The order of the loops over rows and columns does not
 * touch any element's sum. */
#define MCB 96
#define NCB 1024

/* C = sum over K blocks j0 (< K) of A[:, j0..] x op(B)[j0.., :], each block's sum added to C in k order; ap holds
 * MCB rows of packed A, bp NCB columns of packed op(B) */
static void packed_range(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const void *B, cx_gemm_btype bt,
                         int64_t ldb, bool trans_b, float *C, int64_t ldc, float *ap, float *bp) {
    for (int64_t j0 = 0; j0 < K; j0 += CX_GEMM_PKC) {
        int64_t kc = K - j0 < CX_GEMM_PKC ? K - j0 : CX_GEMM_PKC;
        for (int64_t n0 = 0; n0 < N; n0 += NCB) {
            int64_t n1 = n0 + NCB < N ? n0 + NCB : N;
            for (int64_t c0 = n0; c0 < n1; c0 += ANR) {
                int nc = n1 - c0 < ANR ? (int)(n1 - c0) : ANR;
                pack_b(nc, kc, B, bt, trans_b ? c0 * ldb + j0 : j0 * ldb + c0, ldb, trans_b,
                       bp + (c0 - n0) / ANR * ANR * kc);
            }
            for (int64_t m0 = 0; m0 < M; m0 += MCB) {
                int64_t m1 = m0 + MCB < M ? m0 + MCB : M, tiles = (m1 - m0 + AMR - 1) / AMR;
                for (int64_t t = 0; t < tiles; t++) {
                    int64_t m = m0 + t * AMR;
                    pack_a(m1 - m < AMR ? (int)(m1 - m) : AMR, kc, A + m * lda + j0, lda, ap + t * AMR * kc);
                }
                for (int64_t c0 = n0; c0 < n1; c0 += ANR) {
                    int nc = n1 - c0 < ANR ? (int)(n1 - c0) : ANR;
                    const float *bpan = bp + (c0 - n0) / ANR * ANR * kc;
                    for (int64_t t = 0; t < tiles; t++) {
                        int64_t m = m0 + t * AMR;
                        float *c = C + m * ldc + c0;
                        if (m1 - m >= AMR) tile(AMR, kc, ap + t * AMR * kc, bpan, c, ldc, nc, j0 > 0);
                        else tile((int)(m1 - m), kc, ap + t * AMR * kc, bpan, c, ldc, nc, j0 > 0);
                    }
                }
            }
        }
    }
}


/* A small product (one K block) without packing, in the same order: each element one fused multiply-add chain from
 * zero in k order; 8 columns at a time where op(B)'s rows are contiguous (B, not B^T). Packing costs more than such
 * a product (an MLP's layers on a few rows). */
#define SMALL_WORK 65536
static void gemm_small(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                       bool trans_b, float *C, int64_t ldc) {
    for (int64_t m = 0; m < M; m++) {
        const float *a = A + m * lda;
        int64_t n = 0;
        if (!trans_b)
            for (; n + 8 <= N; n += 8) {
                __m256 acc = _mm256_setzero_ps();
                for (int64_t k = 0; k < K; k++)
                    acc = _mm256_fmadd_ps(_mm256_broadcast_ss(a + k), _mm256_loadu_ps(B + k * ldb + n), acc);
                _mm256_storeu_ps(C + m * ldc + n, acc);
            }
        for (; n < N; n++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++) acc = fmaf(a[k], trans_b ? B[n * ldb + k] : B[k * ldb + n], acc);
            C[m * ldc + n] = acc;
        }
    }
}

static void gemm_avx2(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const void *B, cx_gemm_btype bt,
                      int64_t ldb, bool trans_b, float *C, int64_t ldc) {
    if (K <= CX_GEMM_PKC && (double)M * (double)N * (double)K <= SMALL_WORK) {
        /* one chain per element either way: the element-by-element form for a stored B */
        if (bt == CX_GEMM_B_F32) gemm_small(M, N, K, A, lda, B, ldb, trans_b, C, ldc);
        else packed_scalar(M, N, K, A, lda, B, bt, ldb, trans_b, C, ldc);
        return;
    }
    int64_t kb = K < CX_GEMM_PKC ? K : CX_GEMM_PKC;
    int64_t boff = ((MCB + AMR) * kb + 15) / 16 * 16; /* the block of op(B) after A's, 64-byte aligned */
    cx_gemm_superblocks(M, N, K, A, lda, B, bt, ldb, trans_b, C, ldc, packed_range, boff,
                        (size_t)(boff + (NCB + ANR) * kb) * sizeof(float));
}

static bool avx2_cpu(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
static void gemm_avx2(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const void *B, cx_gemm_btype bt,
                      int64_t ldb, bool trans_b, float *C, int64_t ldc) {
    packed_scalar(M, N, K, A, lda, B, bt, ldb, trans_b, C, ldc);
}
static bool avx2_cpu(void) { return false; }
#endif

/* 0: none (OpenBLAS), 1: AVX2, 2: AVX-512F; decided once (threads may race to set it: all set the same value) */
static int kind(void) {
    static _Atomic int k = -1;
    if (k < 0) {
        const char *e = getenv("CATTR_GEMM");
        int v = 0;
#if defined(__x86_64__)
        if (!(e && strcmp(e, "openblas") == 0)) {
            __builtin_cpu_init();
            if (cx_f32_gemm512_available() && __builtin_cpu_supports("avx512f")) v = 2;
            else if (avx2_cpu()) v = 1;
        }
#else
        (void)e;
#endif
        k = v;
    }
    return k;
}

bool cx_f32_gemm_available(void) { return kind() > 0; }

bool cx_f32_gemm_all_sizes(void) { return kind() == 1; }

void cx_f32_gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, bool trans_b,
                 float *C, int64_t ldc, int64_t rows_all) {
    if (kind() == 2) cx_f32_gemm512(M, N, K, A, lda, B, ldb, trans_b, C, ldc, rows_all);
    else gemm_avx2(M, N, K, A, lda, B, CX_GEMM_B_F32, ldb, trans_b, C, ldc);
}

bool cx_f32_gemm_widens_stored(void) { return kind() == 1; }

void cx_f32_gemm_stored(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const void *B, cx_gemm_btype bt,
                        int64_t ldb, bool trans_b, float *C, int64_t ldc) {
    gemm_avx2(M, N, K, A, lda, B, bt, ldb, trans_b, C, ldc);
}
