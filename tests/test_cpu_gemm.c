/* test_cpu_gemm.c - the CPU backend's own kernels: the vectorisable expf of the transformer kernels (within 2 ulp of
 * expf); the float32 GEMM (the AVX-512F kernels, or the AVX2 one on a CPU without AVX-512F) against a float64
 * product (odd sizes, both orientations of B, several K blocks,
 * partial tiles, leading dimensions wider than the rows, a product split in column blocks equal to the whole; a
 * bfloat16 or half B as stored equal to its float32 copy, bit for bit, where the kernel widens while packing); and
 * the AVX-512 BF16 GEMM of precision "high" against a float64 product of the same bfloat16-rounded inputs. The GEMM
 * parts are skipped (with a message) on a CPU without the instructions; exit 77 when neither ran. */
#include "backend/cpu/bf16_gemm.h"
#include "backend/cpu/f32_gemm.h"
#include "core/core.h"
#include "test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static float bf16_round(float f) { /* nearest even, as the kernel */
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

static void one(int64_t M, int64_t N, int64_t K, bool trans) {
    float *A = malloc((size_t)(M * K) * sizeof *A), *W = malloc((size_t)(N * K) * sizeof *W);
    float *C = malloc((size_t)(M * N) * sizeof *C);
    uint64_t s = 88172645463325252ull;
    for (int64_t i = 0; i < M * K; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        A[i] = (float)((double)(s % 20001) / 10000.0 - 1.0);
    }
    for (int64_t i = 0; i < N * K; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        W[i] = (float)((double)(s % 20001) / 10000.0 - 1.0) * 0.1f;
    }
    int64_t ldw = trans ? K : N;
    cattr_status st = cx_bf16_gemm(M, N, K, A, K, W, CX_GEMM_B_F32, ldw, trans, C, N);
    CHECK(st == CATTR_OK, "cx_bf16_gemm failed: %s", cattr_last_error());
    double worst = 0;
    for (int64_t m = 0; m < M && st == CATTR_OK; m++)
        for (int64_t n = 0; n < N; n++) {
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                double b = bf16_round(trans ? W[n * ldw + k] : W[k * ldw + n]);
                ref += (double)bf16_round(A[m * K + k]) * b;
                mag += fabs((double)bf16_round(A[m * K + k]) * b);
            }
            double e = fabs(C[m * N + n] - ref) / (mag + 1e-30);
            if (e > worst) worst = e;
        }
    /* float32 accumulation of K products: a few ulps of the sum of magnitudes */
    CHECK(worst < 1e-5, "M=%lld N=%lld K=%lld trans=%d: error %.3e of the magnitude", (long long)M, (long long)N,
          (long long)K, (int)trans, worst);
    printf("bf16 gemm M=%lld N=%lld K=%lld trans=%d: max error %.2e of the magnitude\n", (long long)M, (long long)N,
           (long long)K, (int)trans, worst);
    free(A);
    free(W);
    free(C);
}

static void fill(float *x, int64_t n, uint64_t *s, float scale) {
    for (int64_t i = 0; i < n; i++) {
        *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
        x[i] = (float)((double)(*s % 20001) / 10000.0 - 1.0) * scale;
    }
}

/* C = A x op(B) with every leading dimension 3 wider than its rows, against float64; then the same product computed
 * as two column blocks and as two row blocks (as the backend splits it over threads, passing the whole product's rows)
 * must equal the whole bit for bit. rows_all: the rows the kernel is told the whole product has (it picks the kernel
 * of x W^T from it: the dot kernel below 32 rows, packed panels from 32). */
static void one_f32(int64_t M, int64_t N, int64_t K, bool trans, int64_t rows_all) {
    int64_t lda = K + 3, ldb = (trans ? K : N) + 3, ldc = N + 3, brows = trans ? N : K;
    float *A = malloc((size_t)(M * lda) * sizeof *A), *B = malloc((size_t)(brows * ldb) * sizeof *B);
    float *C = malloc((size_t)(M * ldc) * sizeof *C), *C2 = malloc((size_t)(M * ldc) * sizeof *C2);
    uint64_t s = 88172645463325252ull;
    fill(A, M * lda, &s, 1.0f);
    fill(B, brows * ldb, &s, 0.1f);
    for (int64_t i = 0; i < M * ldc; i++) C[i] = C2[i] = -7.0f; /* the gaps between rows must stay untouched */
    cx_f32_gemm(M, N, K, A, lda, B, ldb, trans, C, ldc, rows_all);
    double worst = 0;
    bool gaps_ok = true;
    for (int64_t m = 0; m < M; m++) {
        for (int64_t n = 0; n < N; n++) {
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                double b = trans ? B[n * ldb + k] : B[k * ldb + n];
                ref += (double)A[m * lda + k] * b;
                mag += fabs((double)A[m * lda + k] * b);
            }
            double e = fabs(C[m * ldc + n] - ref) / (mag + 1e-30);
            if (e > worst) worst = e;
        }
        for (int64_t n = N; n < ldc; n++) gaps_ok &= C[m * ldc + n] == -7.0f;
    }
    CHECK(worst < 1e-6, "f32 gemm M=%lld N=%lld K=%lld trans=%d rows_all=%lld: error %.3e of the magnitude", (long long)M,
          (long long)N, (long long)K, (int)trans, (long long)rows_all, worst);
    CHECK(gaps_ok, "f32 gemm M=%lld N=%lld K=%lld trans=%d rows_all=%lld wrote past a row", (long long)M, (long long)N, (long long)K,
          (int)trans, (long long)rows_all);
    int64_t half = N / 2 / 32 * 32 > 0 ? N / 2 / 32 * 32 : N / 2;
    cx_f32_gemm(M, half, K, A, lda, B, ldb, trans, C2, ldc, rows_all);
    cx_f32_gemm(M, N - half, K, A, lda, trans ? B + half * ldb : B + half, ldb, trans, C2 + half, ldc, rows_all);
    CHECK(memcmp(C, C2, (size_t)(M * ldc) * sizeof *C) == 0,
          "f32 gemm M=%lld N=%lld K=%lld trans=%d rows_all=%lld: two column blocks differ from the whole", (long long)M, (long long)N,
          (long long)K, (int)trans, (long long)rows_all);
    int64_t top = M / 2; /* and two row blocks */
    for (int64_t i = 0; i < M * ldc; i++) C2[i] = -7.0f;
    cx_f32_gemm(top, N, K, A, lda, B, ldb, trans, C2, ldc, rows_all);
    cx_f32_gemm(M - top, N, K, A + top * lda, lda, B, ldb, trans, C2 + top * ldc, ldc, rows_all);
    CHECK(memcmp(C, C2, (size_t)(M * ldc) * sizeof *C) == 0,
          "f32 gemm M=%lld N=%lld K=%lld trans=%d rows_all=%lld: two row blocks differ from the whole", (long long)M, (long long)N,
          (long long)K, (int)trans, (long long)rows_all);
    if (!trans || rows_all >= 32 || cx_f32_gemm_all_sizes()) {
        /* the packed kernel (every product of the AVX2 one): its element-by-element form (the fallback) must agree */
        for (int64_t i = 0; i < M * ldc; i++) C2[i] = -7.0f;
        cx_f32_gemm_packed_scalar(M, N, K, A, lda, B, ldb, trans, C2, ldc);
        CHECK(memcmp(C, C2, (size_t)(M * ldc) * sizeof *C) == 0,
              "f32 gemm M=%lld N=%lld K=%lld trans=%d: the packed kernel and its element-by-element form differ",
              (long long)M, (long long)N, (long long)K, (int)trans);
    }
    printf("f32 gemm M=%lld N=%lld K=%lld trans=%d rows_all=%lld: max error %.2e of the magnitude\n", (long long)M, (long long)N,
           (long long)K, (int)trans, (long long)rows_all, worst);
    free(A);
    free(B);
    free(C);
    free(C2);
}

/* A product with B a checkpoint's 16-bit matrix as stored (bt: bfloat16 or half, random finite values with
 * subnormals among them), widened as the kernel packs it: the same bits as the product on a float32 copy of B. */
static void one_stored(int64_t M, int64_t N, int64_t K, bool trans, cx_gemm_btype bt) {
    int64_t lda = K + 3, ldb = (trans ? K : N) + 5, ldc = N + 3, brows = trans ? N : K;
    float *A = malloc((size_t)(M * lda) * sizeof *A), *Bf = malloc((size_t)(brows * ldb) * sizeof *Bf);
    uint16_t *B = malloc((size_t)(brows * ldb) * sizeof *B);
    float *C = malloc((size_t)(M * ldc) * sizeof *C), *C2 = malloc((size_t)(M * ldc) * sizeof *C2);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    fill(A, M * lda, &s, 1.0f);
    for (int64_t i = 0; i < brows * ldb; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        /* sign, an exponent near 1 (0 now and then: zeros and subnormals), any mantissa */
        unsigned sign = (unsigned)(s >> 63), man = (unsigned)(s >> 20), e = (unsigned)(s % 9);
        if (bt == CX_GEMM_B_BF16) B[i] = (uint16_t)(sign << 15 | (e ? 120u + e : 0u) << 7 | (man & 0x7fu));
        else B[i] = (uint16_t)(sign << 15 | (e ? 10u + e : 0u) << 10 | (man & 0x3ffu));
        Bf[i] = bt == CX_GEMM_B_BF16 ? cx_bf16_to_f32(B[i]) : cx_f16_to_f32(B[i]);
    }
    for (int64_t i = 0; i < M * ldc; i++) C[i] = C2[i] = -7.0f;
    cx_f32_gemm(M, N, K, A, lda, Bf, ldb, trans, C, ldc, M);
    cx_f32_gemm_stored(M, N, K, A, lda, B, bt, ldb, trans, C2, ldc);
    CHECK(memcmp(C, C2, (size_t)(M * ldc) * sizeof *C) == 0,
          "stored %s gemm M=%lld N=%lld K=%lld trans=%d: differs from the product on a float32 copy",
          bt == CX_GEMM_B_BF16 ? "bf16" : "f16", (long long)M, (long long)N, (long long)K, (int)trans);
    printf("stored %s gemm M=%lld N=%lld K=%lld trans=%d: the bits of the float32 copy's product\n",
           bt == CX_GEMM_B_BF16 ? "bf16" : "f16", (long long)M, (long long)N, (long long)K, (int)trans);
    free(A);
    free(Bf);
    free(B);
    free(C);
    free(C2);
}

float cx_vexpf_for_tests(float x); /* the vectorisable expf of the CPU backend */
void cx_vexpf_row_for_tests(float *p, int64_t n, float sub); /* its row form: p[u] = e^(p[u] - sub) */

/* ulps between two finite positive floats */
static double ulps(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    return fabs((double)ia - (double)ib);
}

int main(void) {
    double worst = 0;
    for (int i = 0; i <= 2000000; i++) {
        float x = -87.0f + 175.0f * (float)i / 2000000.0f;
        double u = ulps(cx_vexpf_for_tests(x), expf(x));
        if (u > worst) worst = u;
    }
    printf("vectorisable expf: max %.0f ulp from expf on [-87, 88]\n", worst);
    CHECK(worst <= 2, "vectorisable expf off by %.0f ulp", worst);
    { /* its eight-lane row form (the attention's softmax) gives its bits, NaN, infinities and the clamps included */
        enum { N = 4099 };
        static float row[N], want[N];
        for (int i = 0; i < N; i++) row[i] = -120.0f + 240.0f * (float)i / (float)N;
        row[5] = NAN, row[9] = INFINITY, row[10] = -INFINITY, row[11] = 88.5f, row[12] = -87.5f;
        for (int i = 0; i < N; i++) want[i] = cx_vexpf_for_tests(row[i] - 0.75f);
        cx_vexpf_row_for_tests(row, N, 0.75f);
        int diff = 0;
        for (int i = 0; i < N; i++) diff += memcmp(&row[i], &want[i], 4) != 0;
        CHECK(diff == 0, "the row form of the vectorisable expf differs from it at %d of %d values", diff, N);
    }
    bool f32 = cx_f32_gemm_available();
    if (!f32) printf("SKIP: the float32 GEMM part: this CPU (or build) has neither AVX-512F nor AVX2 with FMA, or "
                       "CATTR_GEMM=openblas\n");
    for (int t = 0; f32 && t < 2; t++) {
        for (int packed = 0; packed < 2; packed++) { /* B^T: the dot kernel, then packed panels */
            int64_t r = packed ? 1000 : 1;
            one_f32(1, 1, 1, t, r);
            one_f32(13, 45, 37, t, r);
            one_f32(12, 32, 16, t, r);
            one_f32(5, 40, 2100, t, r);   /* three K blocks of either kernel */
            one_f32(25, 70, 1100, t, r);
            one_f32(71, 130, 2300, t, r); /* partial row and column tiles */
            one_f32(97, 33, 1025, t, r);  /* one past a K block, a column tile and eight row tiles */
            one_f32(30, 35, 9000, t, r);  /* three super-blocks of the packed one (an LM head's input gradient) */
        }
    }
    if (f32 && !cx_f32_gemm_widens_stored())
        printf("SKIP: the stored-weight GEMM part: this CPU's kernel (AVX-512F) reads float32 blocks made by the "
               "caller\n");
    for (int t = 0; f32 && cx_f32_gemm_widens_stored() && t < 2; t++)
        for (int b = 0; b < 2; b++) {
            cx_gemm_btype bt = b ? CX_GEMM_B_F16 : CX_GEMM_B_BF16;
            one_stored(3, 17, 40, t, bt);     /* the small, unpacked path */
            one_stored(13, 45, 370, t, bt);   /* partial tiles */
            one_stored(71, 130, 2300, t, bt); /* K blocks, partial row and column tiles */
            one_stored(30, 35, 9000, t, bt);  /* super-blocks */
        }
    if (!cx_bf16_available()) {
        printf("SKIP: the bfloat16 GEMM part: this CPU (or build) has no AVX-512 BF16\n");
        return g_failures ? 1 : f32 ? 0 : 77;
    }
    for (int t = 0; t < 2; t++) {
        one(1, 1, 1, t);
        one(13, 45, 37, t);
        one(8, 32, 64, t);
        one(70, 100, 1100, t); /* three K blocks */
        one(300, 96, 512, t);
    }
    cx_bf16_release_all();
    return g_failures ? 1 : 0;
}
