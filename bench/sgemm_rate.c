/* sgemm_rate.c - the GEMM roofline of this machine for bench/llm_qwen3_shape.py: the rate of OpenBLAS sgemm on
 * N x N x N float32 matrices (default 2048), the same BLAS and threads cattr uses. Prints 'sgemm: n=<N> gflops=<G>'
 * (the best of R repetitions after one warm-up). */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2048, reps = argc > 2 ? atoi(argv[2]) : 5;
    if (n < 1 || reps < 1) {
        fprintf(stderr, "usage: sgemm_rate [N] [REPS]\n");
        return 2;
    }
    size_t nn = (size_t)n * (size_t)n;
    float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = malloc(nn * sizeof *c);
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
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double t = now_s() - t0;
        if (r > 0 && t < best) best = t;
    }
    printf("sgemm: n=%d gflops=%.2f seconds=%.6f check=%g\n", n, 2.0 * n * (double)n * n / best * 1e-9, best, (double)c[nn / 3]);
    free(a);
    free(b);
    free(c);
    return 0;
}
