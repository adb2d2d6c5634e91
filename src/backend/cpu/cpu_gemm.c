/* cpu_gemm.c - the CPU backend's matrix products: OpenBLAS single-threaded inside, cattr's threads outside; cattr's
 * own float32 kernels (f32_gemm.c, f32_gemm_avx2.c) where they take the product; a checkpoint's 16-bit matrices
 * widened exactly on the way in. */
#include "backend/cpu/cpu_gemm.h"
#include "core/core.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

/* ---- GEMM: OpenBLAS single-threaded inside, threads of our own outside ----
 * One thread pool in the process: the build links Debian's OpenMP OpenBLAS (CMake's CATTR_BLAS), which runs on the
 * calling thread inside a parallel region, and a large product is split into row (or column) blocks over cattr's
 * OpenMP threads. A pthread OpenBLAS (linked with CATTR_BLAS=system, or loaded earlier by the host process) keeps a
 * pool of its own, whose threads spin against OpenMP's on a few cores; it is then asked for one thread per call and
 * an info line says so once. (Not asked of the OpenMP build: there, the call would set OpenMP's thread count.) */

static pthread_once_t g_blas_once = PTHREAD_ONCE_INIT;
static void blas_single_thread_once(void) {
    if (openblas_get_parallel() == 1) {
        openblas_set_num_threads(1);
        /* info, not a warning: cattr has already asked it for one thread, and in Python it is numpy that loaded it */
        cx_log(CATTR_LOG_INFO, "OpenBLAS has a thread pool of its own (the pthread build, loaded before cattr's, e.g. by "
                               "numpy): cattr asks it for one thread per call; for the OpenMP build, select it with "
                               "update-alternatives --set libopenblas.so.0-x86_64-linux-gnu "
                               "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0");
    }
}

/* float32: cattr's own kernels take the plain products C = A x op(B): with AVX-512F those of at least 4e6
 * multiply-adds (smaller ones stay with OpenBLAS, whose call costs less there); with AVX2 only, every one (OpenBLAS's
 * AVX2 kernels round a row by its place in the product: see f32_gemm_avx2.c) */
#define GEMM_MIN_SPLIT 4.0e6
static bool own_sgemm_ok(enum CBLAS_ORDER o, enum CBLAS_TRANSPOSE ta, float alpha, float beta, double work) {
    return o == CblasRowMajor && ta == CblasNoTrans && alpha == 1.0f && beta == 0.0f &&
           (work >= GEMM_MIN_SPLIT || cx_f32_gemm_all_sizes()) && cx_f32_gemm_available();
}
static void own_sgemm(enum CBLAS_TRANSPOSE tb, int m, int n, int k, const float *A, int lda, const float *B, int ldb,
                      float *C, int ldc, int m_all) {
    cx_f32_gemm(m, n, k, A, lda, B, ldb, tb == CblasTrans, C, ldc, m_all);
}
/* How cattr's own kernel is split over nt threads (one block each): not at all below GEMM_MIN_SPLIT multiply-adds or
 * when neither side has enough tiles; else the rows when they give each thread 16, or the columns 64 each, else the
 * longer side. cx_sgemm and cx_sgemm_stored split alike. */
static bool own_whole(int m, int n, int nt, double work) {
    return nt < 2 || work < GEMM_MIN_SPLIT || (m < 16 * nt && n < 64 * nt);
}
static bool own_rows(int m, int n, int nt) { return m >= n ? m >= 16 * nt : n < 64 * nt; }
/* The blocks of a split product of cattr's own kernel: OWN_BLOCKS_PER_THREAD per thread, each at least
 * OWN_MIN_ROWS rows (a row block packs the whole of op(B) again: with 96-row blocks 2048^3 lost 7%) or OWN_MIN_COLS
 * columns (a column block packs A again), at most one thread's share, whole tiles. */
#define OWN_BLOCKS_PER_THREAD 4
#define OWN_MIN_ROWS 512
#define OWN_MIN_COLS 256
typedef struct own_split { /* how a product is cut into blocks of C (own_blocks, blas_blocks) */
    bool rows;       /* blocks of rows, else of columns */
    int total, per;  /* rows or columns in all, and per block */
    int nb;          /* blocks */
} own_split;
static own_split own_blocks(int m, int n, int nt) {
    own_split b = {.rows = own_rows(m, n, nt)};
    b.total = b.rows ? m : n;
    int align = b.rows ? 12 : 32, least = b.rows ? OWN_MIN_ROWS : OWN_MIN_COLS, most = (b.total + nt - 1) / nt;
    int per = (b.total + nt * OWN_BLOCKS_PER_THREAD - 1) / (nt * OWN_BLOCKS_PER_THREAD);
    per = per < least ? least : per;
    per = per > most ? most : per;
    b.per = (per + align - 1) / align * align;
    b.nb = (b.total + b.per - 1) / b.per;
    return b;
}

static bool own_dgemm_ok(enum CBLAS_ORDER o, enum CBLAS_TRANSPOSE ta, double alpha, double beta, double work) {
    (void)o, (void)ta, (void)alpha, (void)beta, (void)work;
    return false;
}
static void own_dgemm(enum CBLAS_TRANSPOSE tb, int m, int n, int k, const double *A, int lda, const double *B, int ldb,
                      double *C, int ldc, int m_all) {
    (void)tb, (void)m, (void)n, (void)k, (void)A, (void)lda, (void)B, (void)ldb, (void)C, (void)ldc, (void)m_all;
}

/* An OpenBLAS product of more than GEMM_BLOCK_WORK multiply-adds (OpenBLAS's own threshold for threading a GEMM) is
 * cut into blocks of rows or columns of C fixed by the problem alone (at most GEMM_MAX_BLOCKS, whole tiles) and the
 * blocks run on cattr's threads, OpenBLAS single-threaded in each: the same calls, so the same bits, whatever the
 * thread count (OpenBLAS's own threading rounds differently from one thread, so a one-thread MPI rank and a
 * two-thread process disagreed in the last bits). Smaller products run whole: OpenBLAS keeps them on one thread.
 * cattr's own kernel (float32 plain products) rounds the same in any block, so it is split from GEMM_MIN_SPLIT
 * multiply-adds (a smaller one, which the AVX2 kernel also takes, runs whole: waking the threads for it cost up to
 * 15 ms on a first call) into own_split's blocks. Either way the blocks are handed out one at a time: a thread
 * that the scheduler holds back (another process busy on its core) takes fewer of them, and the product waits for
 * the block it holds, not for a thread's fixed share. */
#define GEMM_BLOCK_WORK 262144.0
#define GEMM_MAX_BLOCKS 16
/* OpenBLAS's blocks: one per GEMM_BLOCK_WORK multiply-adds (at most GEMM_MAX_BLOCKS) over the longer side of C,
 * whole tiles, whatever the thread count */
static own_split blas_blocks(int m, int n, double work) {
    own_split b = {.rows = m >= n};
    b.total = b.rows ? m : n;
    int align = b.rows ? 12 : 32, nb = (int)ceil(work / GEMM_BLOCK_WORK);
    nb = nb > GEMM_MAX_BLOCKS ? GEMM_MAX_BLOCKS : nb;
    b.per = ((b.total + nb - 1) / nb + align - 1) / align * align;
    b.nb = (b.total + b.per - 1) / b.per;
    return b;
}
#define GEMM_DEFINE(NAME, TY, BLAS, OWN)                                                                               \
    void NAME(enum CBLAS_ORDER o, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n, int k,       \
                     TY alpha, const TY *A, int lda, const TY *B, int ldb, TY beta, TY *C, int ldc) {                 \
        double work = (double)m * (double)n * (double)k;                                                             \
        bool own = OWN##_ok(o, ta, alpha, beta, work) && k > 0;                                                      \
        int nt = omp_in_parallel() ? 1 : omp_get_max_threads();                                                     \
        if (own ? own_whole(m, n, nt, work) : work <= GEMM_BLOCK_WORK || omp_in_parallel()) {                       \
            if (own) OWN(tb, m, n, k, A, lda, B, ldb, C, ldc, m);                                                       \
            else BLAS(o, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);                                      \
            return;                                                                                                  \
        }                                                                                                            \
        /* cattr's kernel rounds the same in any block (f32_gemm.c): own_blocks (m_all keeps its kernel choice);  \
         * OpenBLAS: blas_blocks, fixed by the problem */                                                            \
        own_split sp = own ? own_blocks(m, n, nt) : blas_blocks(m, n, work);                                         \
        bool rows = sp.rows;                                                                                         \
        int total = sp.total, per = sp.per, nb = sp.nb;                                                              \
        /* with one thread the loop runs here, OpenBLAS on that one thread; with more, inside an active region */   \
        _Pragma("omp parallel for num_threads(nt) schedule(dynamic, 1) if (nt > 1)")                                 \
        for (int blk = 0; blk < nb; blk++) {                                                                         \
            int lo = blk * per, hi = lo + per < total ? lo + per : total;                                            \
            if (rows) {                                                                                              \
                const TY *a = ta == CblasNoTrans ? A + (size_t)lo * lda : A + lo;                                   \
                if (own) OWN(tb, hi - lo, n, k, a, lda, B, ldb, C + (size_t)lo * ldc, ldc, m);                          \
                else BLAS(o, ta, tb, hi - lo, n, k, alpha, a, lda, B, ldb, beta, C + (size_t)lo * ldc, ldc);         \
            } else {                                                                                                 \
                const TY *b = tb == CblasNoTrans ? B + lo : B + (size_t)lo * ldb;                                   \
                if (own) OWN(tb, m, hi - lo, k, A, lda, b, ldb, C + lo, ldc, m);                                        \
                else BLAS(o, ta, tb, m, hi - lo, k, alpha, A, lda, b, ldb, beta, C + lo, ldc);                       \
            }                                                                                                        \
        }                                                                                                            \
    }
GEMM_DEFINE(cx_sgemm, float, cblas_sgemm, own_sgemm)
GEMM_DEFINE(cx_dgemm, double, cblas_dgemm, own_dgemm)

/* B widened for OpenBLAS in one piece up to this size; a larger one in column blocks (see cx_sgemm_stored) */
#define STORED_WIDEN_MAX ((size_t)256 << 20)
/* cattr's own kernel: op(B)'s columns widened STORED_BLOCK_BYTES of float32 at a time (each block is a call of
 * the kernel, which packs A again: 16 MiB keeps that a few per cent of a large product) */
#define STORED_BLOCK_BYTES ((size_t)16 << 20)

/* Columns [c0, c0 + nc) of op(B) (op(B) is k x n; B is n x ldb when trans, else k x ldb), widened into w, which then
 * holds B's block in B's own orientation with leading dimension (trans ? k : nc). */
static void widen_cols(const void *B, cx_gemm_btype bt, bool trans, int64_t k, int64_t ldb, int64_t c0, int64_t nc,
                       float *w, bool par) {
    int64_t r1 = trans ? nc : k, c1 = trans ? k : nc;
#pragma omp parallel for if (par && r1 * c1 > (1 << 18)) schedule(static)
    for (int64_t r = 0; r < r1; r++) {
        const uint16_t *src = (const uint16_t *)B + (trans ? (c0 + r) * ldb : r * ldb + c0);
        float *dst = w + r * c1;
        if (bt == CX_GEMM_B_BF16)
            for (int64_t c = 0; c < c1; c++) dst[c] = cx_bf16_to_f32(src[c]);
        else
            for (int64_t c = 0; c < c1; c++) dst[c] = cx_f16_to_f32(src[c]);
    }
}

/* cattr's own kernel on a block of C (rows_all: the rows of the whole product): the AVX2 kernel widens op(B)'s values
 * as it packs them; for the AVX-512F kernels op(B) is widened a block of columns at a time into w
 * (STORED_BLOCK_BYTES). The kernels' sums do not depend on the columns they are given, so the result is that of a
 * float32 copy of B, bit for bit. */
static void own_stored(int m, int n, int k, const float *A, int lda, const void *B, cx_gemm_btype bt, int ldb,
                       bool trans, float *C, int ldc, int rows_all, float *w, int64_t step) {
    if (cx_f32_gemm_widens_stored()) {
        cx_f32_gemm_stored(m, n, k, A, lda, B, bt, ldb, trans, C, ldc);
        return;
    }
    for (int64_t c0 = 0; c0 < n; c0 += step) {
        int64_t nc = n - c0 < step ? n - c0 : step;
        widen_cols(B, bt, trans, k, ldb, c0, nc, w, false);
        cx_f32_gemm(m, nc, k, A, lda, w, trans ? k : nc, trans, C + c0, ldc, rows_all);
    }
}

/* C = alpha A x op(B) + beta C with B a checkpoint's matrix as stored (bt: bfloat16 or half), float32 results, B's
 * values widened exactly. cattr's own kernel (the products cx_sgemm gives it, split over the threads as there) widens
 * them as it packs (AVX2) or reads op(B) through 16 MiB float32 blocks of columns (AVX-512F). Products that go to
 * OpenBLAS get a float32 copy of B made for the call: the whole of B (the same call as cx_sgemm on a float32 copy, so the same bits), or, past STORED_WIDEN_MAX,
 * blocks of columns of C, each its own OpenBLAS call, which may round apart from the one call by an ulp (CPUs
 * without AVX-512F, or CATTR_GEMM=openblas, only). */
cattr_status cx_sgemm_stored(enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                                    const float *A, int lda, const void *B, cx_gemm_btype bt, int ldb, float beta,
                                    float *C, int ldc) {
    double work = (double)m * (double)n * (double)k;
    bool trans = tb == CblasTrans;
    if (own_sgemm_ok(CblasRowMajor, ta, alpha, beta, work) && k > 0) {
        int64_t step = (int64_t)(STORED_BLOCK_BYTES / ((size_t)k * sizeof(float))) / 32 * 32;
        if (step < 32) step = 32;
        int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
        bool whole = own_whole(m, n, nt, work);
        own_split sp = own_blocks(m, n, nt); /* as cx_sgemm splits it */
        bool rows = sp.rows;
        int total = sp.total, per = sp.per, nb = whole ? 1 : sp.nb;
        int nw = whole ? 1 : nt; /* a widening buffer per thread (AVX-512F), none where the kernel widens */
        float **w = calloc((size_t)nw, sizeof *w);
        bool ok = w != NULL;
        for (int i = 0; ok && !cx_f32_gemm_widens_stored() && i < nw; i++)
            ok = (w[i] = malloc((size_t)(step * k) * sizeof(float))) != NULL;
        if (ok && whole) {
            own_stored(m, n, k, A, lda, B, bt, ldb, trans, C, ldc, m, w[0], step);
        } else if (ok) {
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
            for (int blk = 0; blk < nb; blk++) {
                int lo = blk * per, hi = lo + per < total ? lo + per : total;
                float *wt = w[omp_get_thread_num()];
                if (rows)
                    own_stored(hi - lo, n, k, A + (size_t)lo * lda, lda, B, bt, ldb, trans, C + (size_t)lo * ldc, ldc, m,
                               wt, step);
                else
                    own_stored(m, hi - lo, k, A, lda,
                               (const uint16_t *)B + (trans ? (size_t)lo * (size_t)ldb : (size_t)lo), bt, ldb, trans,
                               C + lo, ldc, m, wt, step);
            }
        }
        for (int i = 0; w && i < nw; i++) free(w[i]);
        free(w);
        return ok ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory widening a weight");
    }
    /* OpenBLAS: op(B) is k x n; B itself is (trans ? n x ldb : k x ldb) */
    size_t whole = (size_t)n * (size_t)k * sizeof(float);
    int64_t step = whole <= STORED_WIDEN_MAX ? n : (int64_t)(STORED_WIDEN_MAX / ((size_t)k * sizeof(float)));
    if (step < 1) step = 1;
    if (step > n) step = n;
    float *w = malloc((size_t)(step * k) * sizeof *w);
    if (!w) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory widening a weight (%d x %d)", n, k);
    for (int64_t c0 = 0; c0 < n; c0 += step) {
        int64_t nc = n - c0 < step ? n - c0 : step;
        widen_cols(B, bt, trans, k, ldb, c0, nc, w, true);
        cx_sgemm(CblasRowMajor, ta, tb, m, (int)nc, k, alpha, A, lda, w, trans ? k : (int)nc, beta, C + c0, ldc);
    }
    free(w);
    return CATTR_OK;
}

void cx_cpu_blas_init(void) { pthread_once(&g_blas_once, blas_single_thread_once); }
