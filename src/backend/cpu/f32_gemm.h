/* f32_gemm.h - cattr's own float32 GEMM for AVX-512F and AVX2 CPUs (exact float32: products and sums in float32, no
 * reduced precision), used in place of OpenBLAS's sgemm: for large products where the CPU has AVX-512F; for every
 * plain product where it has AVX2 and FMA only (OpenBLAS's AVX2 kernels round a row by its place in the product, so
 * a row of a split call would differ from the same row of the whole call). */
#ifndef CATTR_F32_GEMM_H
#define CATTR_F32_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How a product's B is stored: float32, or a checkpoint's bfloat16 / IEEE half matrix (read through float32 copies
 * of blocks made for the call, or, precision "high", packed to bfloat16 as the weight's panels). */
typedef enum { CX_GEMM_B_F32 = 0, CX_GEMM_B_BF16 = 1, CX_GEMM_B_F16 = 2 } cx_gemm_btype;

/* The packed order (below): K blocks and super-blocks. */
#define CX_GEMM_PKC 1024
#define CX_GEMM_PKSUPER 4096

/* Whether the kernels are built in, the CPU has AVX-512F, or AVX2 and FMA, and the environment does not ask for
 * OpenBLAS (CATTR_GEMM=openblas). Decided once per process. */
bool cx_f32_gemm_available(void);
/* Whether they take every plain product (the AVX2 kernel), not only the large ones (AVX-512F). */
bool cx_f32_gemm_all_sizes(void);

/* C[M, N] = A[M, K] x op(B) (row-major, C overwritten), op(B)[k][n] = trans_b ? B[n * ldb + k] : B[k * ldb + n].
 * Single-threaded: the caller splits a product over its threads in row or column blocks and passes each block with
 * rows_all, the rows of the whole product. Each element's sum runs in a fixed order that depends only on K, trans_b
 * and rows_all (which picks the kernel of x W^T on AVX-512F), so a split never changes a result. Only after
 * cx_f32_gemm_available() returned true. The packed order: each element one fused multiply-add chain from zero per
 * K block of CX_GEMM_PKC (k ascending), the blocks added in order, and over CX_GEMM_PKSUPER the super-blocks' sums
 * formed apart and added in order (cx_f32_gemm_packed_scalar); the AVX2 kernel uses it for every product, the
 * AVX-512F one except for x W^T below 32 rows (a dot-product kernel of its own order). */
void cx_f32_gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, bool trans_b,
                 float *C, int64_t ldc, int64_t rows_all);

/* The packed kernel's sums (used by cx_f32_gemm for op(B) = B, and for B^T from 32 rows of the whole product)
 * computed element by element in the same order, bit for bit: its fallback when the packing buffers cannot be
 * allocated, and the tests' check of that order. Slow. Only after cx_f32_gemm_available() returned true. */
void cx_f32_gemm_packed_scalar(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                               int64_t ldb, bool trans_b, float *C, int64_t ldc);

/* The packing buffer of the calling thread, at least `bytes` (64-byte aligned), kept from call to call up to 32 MiB
 * (a larger one is allocated for the call); NULL when out of memory. Give it back with cx_gemm_pack_buffer_done. */
float *cx_gemm_pack_buffer(size_t bytes);
void cx_gemm_pack_buffer_done(float *p);

/* A kernel's packed product over one super-block (K <= CX_GEMM_PKSUPER): C = sum over K blocks of A x op(B), each
 * block's sum added to C in k order; ap and bp its packing buffers; B stored as bt (float32 for the AVX-512F
 * kernels). */
typedef void (*cx_gemm_range_fn)(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const void *B,
                                 cx_gemm_btype bt, int64_t ldb, bool trans_b, float *C, int64_t ldc, float *ap,
                                 float *bp);
/* C = A x op(B) in the packed order with a kernel's `range`: over CX_GEMM_PKSUPER (a long K, like the input gradient
 * of an LM head over the vocabulary) the super-blocks' sums formed apart and added to C in k order, so an element's
 * rounding grows with PKC + PKSUPER / PKC + K / PKSUPER rather than K / PKC. The packing buffer is `bytes` (op(B)'s
 * part from float b_offset). Without memory for the buffers the same sums run element by element
 * (cx_f32_gemm_packed_scalar). */
void cx_gemm_superblocks(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const void *B, cx_gemm_btype bt,
                         int64_t ldb, bool trans_b, float *C, int64_t ldc, cx_gemm_range_fn range, int64_t b_offset,
                         size_t bytes);

/* cx_f32_gemm with B a checkpoint's 16-bit matrix as stored (bt), each value widened exactly as it is packed (no
 * float32 copy of B): the bits of cx_f32_gemm on a float32 copy of B. Only where cx_f32_gemm_widens_stored() says
 * the kernel does it (the AVX2 kernel); the AVX-512F kernels read float32 blocks of B made by the caller. */
bool cx_f32_gemm_widens_stored(void);
void cx_f32_gemm_stored(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const void *B, cx_gemm_btype bt,
                        int64_t ldb, bool trans_b, float *C, int64_t ldc);

/* The AVX-512F kernels (f32_gemm.c): built in or not, and the product (called by cx_f32_gemm). */
bool cx_f32_gemm512_available(void);
void cx_f32_gemm512(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                    bool trans_b, float *C, int64_t ldc, int64_t rows_all);

#endif
