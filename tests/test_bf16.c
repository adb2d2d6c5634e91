/* test_bf16.c - the vectorisable expf of the transformer kernels (within 2 ulp of expf), and the AVX-512 BF16 GEMM of precision "high" against a float64 product of the same bfloat16-rounded
 * inputs: odd sizes, both weight orientations, several K blocks, partial panels and row tiles. Skips (77) on a CPU
 * without AVX-512 BF16. */
#include "backend/cpu/bf16_gemm.h"
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
    cattr_status st = cx_bf16_gemm(M, N, K, A, K, W, ldw, trans, C, N);
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

float cx_vexpf_for_tests(float x); /* the vectorisable expf of the CPU backend */

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
    if (!cx_bf16_available()) {
        printf("SKIP: this CPU (or build) has no AVX-512 BF16 (the expf check above ran)\n");
        return g_failures ? 1 : 77;
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
