/* sgemm_rate.c - the GEMM roofline of this machine for bench/llm_qwen3_shape.py: the rate of OpenBLAS sgemm on
 * N x N x N float32 matrices (default 2048), with the same BLAS and threads cattr uses. Prints 'sgemm: n=<N>
 * gflops=<G>' (the best of R repetitions after one warm-up).
 *
 * `sgemm_rate N R own` measures cattr's own float32 GEMM instead (src/backend/cpu/f32_gemm.c and f32_gemm_avx2.c,
 * the kernels cattr runs in place of OpenBLAS where the CPU has AVX-512F, or AVX2 and FMA), split in column blocks
 * over the OpenMP threads as the backend splits it; prints 'own: n=<N> gflops=<G>', or 'own: unavailable' without
 * either. */
#define _POSIX_C_SOURCE 200809L
#include "backend/cpu/f32_gemm.h"
#include "core/core.h"

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void own_gemm(int n, const float *a, const float *b, float *c) {
#pragma omp parallel
    {
        int t = omp_get_thread_num(), cnt = omp_get_num_threads();
        int per = ((n + cnt - 1) / cnt + 31) / 32 * 32, lo = t * per, hi = lo + per < n ? lo + per : n;
        if (lo < hi) cx_f32_gemm(n, hi - lo, n, a, n, b + (size_t)lo * n, n, true, c + lo, n, n);
    }
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2048, reps = argc > 2 ? atoi(argv[2]) : 5;
    int own = argc > 3 && strcmp(argv[3], "own") == 0;
    if (n < 1 || reps < 1 || (argc > 3 && !own)) {
        fprintf(stderr, "usage: sgemm_rate [N] [REPS] [own]\n");
        return 2;
    }
    if (own && !cx_f32_gemm_available()) {
        printf("own: unavailable\n");
        return 0;
    }
    /* as in cattr: OpenBLAS single-threaded inside OpenMP's threads; a pthread OpenBLAS is set to one thread, the
     * OpenMP build is left alone (there openblas_set_num_threads sets OpenMP's own thread count, which made this
     * measurement a one-thread rate) */
    if (own && openblas_get_parallel() == 1) openblas_set_num_threads(1);
    size_t nn = (size_t)n * (size_t)n;
    /* allocated as cattr allocates tensors (cx_malloc: 2 MiB-aligned, huge-page advice) */
    float *a = cx_malloc(nn * sizeof *a), *b = cx_malloc(nn * sizeof *b), *c = cx_malloc(nn * sizeof *c);
    if (!a || !b || !c) {
        fprintf(stderr, "sgemm_rate: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)((i * 7919u) % 1000u) * 1e-3f - 0.5f;
        b[i] = (float)((i * 104729u) % 1000u) * 1e-3f - 0.5f;
    }
    double best = 1e30;
    for (int r = 0; r <= reps; r++) {
        double t0 = now_s();
        if (own) own_gemm(n, a, b, c);
        else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double t = now_s() - t0;
        if (r > 0 && t < best) best = t;
    }
    printf("%s: n=%d gflops=%.2f seconds=%.6f check=%g\n", own ? "own" : "sgemm", n, 2.0 * n * (double)n * n / best * 1e-9,
           best, (double)c[nn / 3]);
    free(a);
    free(b);
    free(c);
    return 0;
}
