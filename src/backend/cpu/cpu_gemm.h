/* cpu_gemm.h - the CPU backend's matrix products (cpu_gemm.c), for its kernels (kernels_impl.h, llm_impl.h). */
#ifndef CATTR_CPU_GEMM_H
#define CATTR_CPU_GEMM_H

#include "backend/cpu/f32_gemm.h"
#include "core/core.h"

#include <cblas.h>

/* C = alpha op(A) op(B) + beta C, as cblas_sgemm / cblas_dgemm, on cattr's threads (same bits at any thread count). */
void cx_sgemm(enum CBLAS_ORDER o, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
void cx_dgemm(enum CBLAS_ORDER o, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n, int k, double alpha,
              const double *A, int lda, const double *B, int ldb, double beta, double *C, int ldc);

/* Row-major C = alpha op(A) op(B) + beta C with B a checkpoint's 16-bit matrix as stored (bt), widened exactly:
 * the bits of cx_sgemm on a float32 copy of B. Errors: CATTR_ERR_NO_MEMORY. */
cattr_status cx_sgemm_stored(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                             const float *A, int lda, const void *B, cx_gemm_btype bt, int ldb, float beta, float *C,
                             int ldc);

/* The storage of a product's B: float32 (the view of a float32 or float64 call), or a checkpoint's 16-bit matrix. */
static inline cx_gemm_btype gemm_btype(cattr_dtype dt) {
    return dt == CX_BFLOAT16 ? CX_GEMM_B_BF16 : dt == CX_FLOAT16 ? CX_GEMM_B_F16 : CX_GEMM_B_F32;
}

/* Once per process: a pthread OpenBLAS (loaded by the host process) is asked for one thread per call. */
void cx_cpu_blas_init(void);

#endif
