/* bf16_gemm.h - float32 GEMM with bfloat16 inputs and float32 accumulation (AVX-512 BF16), for precision "high". */
#ifndef CATTR_BF16_GEMM_H
#define CATTR_BF16_GEMM_H

#include "cattr.h"
#include "backend/cpu/f32_gemm.h"

#include <stdbool.h>
#include <stdint.h>

/* Whether this build and CPU have the AVX-512 BF16 kernels. */
bool cx_bf16_available(void);

/* C[M, N] = A[M, K] x B, B[k][n] = trans ? W[n * ldw + k] : W[k * ldw + n] (row-major), with A and B rounded to
 * bfloat16 (nearest even) and float32 accumulation; W is stored as wt says (float32, or a checkpoint's bfloat16 or
 * half matrix, widened first). W must be a constant: its bfloat16 panels are made on first use
 * and kept (keyed by address, shape, orientation and a sample of values) until cx_bf16_release_all. Errors:
 * CATTR_ERR_UNSUPPORTED without AVX-512 BF16, CATTR_ERR_NO_MEMORY. */
cattr_status cx_bf16_gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const void *W, cx_gemm_btype wt,
                          int64_t ldw, bool trans, float *C, int64_t ldc);

/* Frees the packed forms of weight w (call before freeing w; other weights' forms stay, so models in use on other
 * threads are unaffected). */
void cx_bf16_release(const void *w);

/* Frees every packed weight (no GEMM may be running). */
void cx_bf16_release_all(void);

#endif
