/* cu.h - what the CUDA backend's kernel files share (C++; only the files of src/backend/cuda include it).
 *
 * Kernels are written once, as an element function `CU_FN { ... }` run for every index i < n by cu_each(): on a GPU
 * a grid-stride kernel on the backend's stream, and in an emulation build (CATTR_CUDA_EMULATE: the same sources
 * compiled as host C++ with no CUDA toolkit) an OpenMP loop, so that every kernel's indexing and arithmetic is tested
 * on machines without a GPU against the reference kernels. Element values pass through double (ld/st), as the
 * reference kernels compute (check_kernels.c): one rounding to the dtype per result. GEMMs go through cu_gemm
 * (cuBLAS without TF32; OpenBLAS when emulated).
 */
#ifndef CATTR_CU_H
#define CATTR_CU_H

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backend/backend.h"
#include "ops/ops.h"
}
#include "core/hd.h"

#ifndef CX_CUDA_EMULATE
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define CU_DEV __device__
#else
#define CU_DEV
#endif

/* The element function of cu_each: index i, everything else captured by value. */
#define CU_FN [=] CU_DEV(int64_t i)

/* The device error word's codes (a kernel that meets bad data records the first; synchronize reports it). */
enum { CU_ERR_NONE = 0, CU_ERR_GATHER_INDEX = 1, CU_ERR_SEQ_POS = 2, CU_ERR_ROW_MAP = 3, CU_ERR_ROPE_POS = 4, CU_ERR_SEGMENT = 5 };

typedef struct cu_ctx {
    int ordinal;
    pthread_mutex_t op_lock; /* run_op: one op at a time (its launches in order on the stream) */
#ifndef CX_CUDA_EMULATE
    cudaStream_t stream;
    bool pool; /* memory from the device's stream-ordered pool (cudaMallocAsync / cudaFreeAsync) */
    cublasHandle_t blas;
    struct cu_blas_fns *fn; /* cuBLAS, loaded when the first device is used (cuda_backend.cu) */
#endif
    int *err;             /* device memory: one int, CU_ERR_* */
    void *scratch;        /* grow-only device scratch (convolution columns) */
    size_t scratch_bytes;
    size_t cur, peak;     /* bytes allocated through the table, and their high-water mark */
    int64_t launches;     /* kernels and cuBLAS calls enqueued */
    int64_t fallbacks;    /* ops run on the host (no kernel of this backend yet) */
    const char *host_ops; /* CATTR_CUDA_HOST_OPS: op names to run on the host anyway (bisecting a kernel) */
    char device_name[256];
} cu_ctx;

/* A view as kernels see it: a trivially copyable struct captured by value. */
typedef struct dv {
    void *p;
    int dt;
    int nd;
    int64_t sh[CATTR_MAX_DIMS];
} dv;

static inline dv cu_dv(const cx_view *v) {
    dv d;
    d.p = v->data;
    d.dt = (int)v->dtype;
    d.nd = v->ndim;
    for (int k = 0; k < CATTR_MAX_DIMS; k++) d.sh[k] = k < v->ndim ? v->shape[k] : 1;
    return d;
}

static inline CX_HD double ld(const dv &v, int64_t i) {
    return v.dt == CATTR_FLOAT32   ? (double)((const float *)v.p)[i]
           : v.dt == CATTR_FLOAT64 ? ((const double *)v.p)[i]
                                   : (double)((const int64_t *)v.p)[i];
}
static inline CX_HD void sto(const dv &v, int64_t i, double x) {
    if (v.dt == CATTR_FLOAT32) ((float *)v.p)[i] = (float)x;
    else ((double *)v.p)[i] = x;
}
static inline CX_HD int64_t ldi(const dv &v, int64_t i) { return ((const int64_t *)v.p)[i]; }
/* x rounded to v's element type (an intermediate the fast kernels hold in that type) */
static inline CX_HD double rd(const dv &v, double x) { return v.dt == CATTR_FLOAT32 ? (double)(float)x : x; }
/* Element i of a checkpoint's 16-bit matrix as stored (CX_BFLOAT16 or CX_FLOAT16), widened exactly to float32. */
static inline CX_HD float cu_from16(const void *p, int dt, int64_t i) {
    uint16_t h = ((const uint16_t *)p)[i];
#if defined(__CUDA_ARCH__)
    return dt == (int)CX_BFLOAT16 ? __uint_as_float((uint32_t)h << 16) : __half2float(__ushort_as_half(h));
#else
    if (dt != (int)CX_BFLOAT16) return cx_f16_to_f32(h);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}
/* element si of src to element di of dst, by bytes (4 or 8): every dtype */
static inline CX_HD void cpe(const dv &dst, int64_t di, const dv &src, int64_t si) {
    if (dst.dt == CATTR_FLOAT32) ((float *)dst.p)[di] = ((const float *)src.p)[si];
    else ((int64_t *)dst.p)[di] = ((const int64_t *)src.p)[si];
}
static inline CX_HD void unrav(int64_t i, int nd, const int64_t *sh, int64_t *c) {
    for (int d = nd - 1; d >= 0; d--) {
        c[d] = sh[d] > 0 ? i % sh[d] : 0;
        i = sh[d] > 0 ? i / sh[d] : 0;
    }
}
/* the flat index in v of the element broadcast to coordinates c of rank nc (numpy rules: ops.h's cx_bcast_at) */
static inline CX_HD int64_t bidx(int nc, const int64_t *c, const dv &v) { return cx_bcast_at(nc, c, v.nd, v.sh); }

/* The window geometry of a convolution or pool over 3 spatial dims (cx_geom's, by value for kernels). */
typedef struct cu_win {
    int64_t in[3], out[3], k[3], s[3], d[3], pb[3];
} cu_win;

static inline cu_win cu_win_of(const cx_geom *g) {
    cu_win w;
    for (int d = 0; d < 3; d++)
        w.in[d] = g->in[d], w.out[d] = g->out[d], w.k[d] = g->k[d], w.s[d] = g->s[d], w.d[d] = g->d[d],
        w.pb[d] = g->pb[d];
    return w;
}

/* The adjoint of a window scan, for gradients that gather: f(r, o) for every tap r (flat over the kernel, z-major) and
 * output position o (flat over the output plane) whose window reads input position (iz, iy, ix), taps in order. */
template <class F>
static inline CX_HD void cu_taps_reading(const cu_win &w, int64_t iz, int64_t iy, int64_t ix, F f) {
    for (int64_t kz = 0; kz < w.k[0]; kz++) {
        int64_t tz = iz + w.pb[0] - kz * w.d[0];
        if (tz < 0 || tz % w.s[0] || tz / w.s[0] >= w.out[0]) continue;
        for (int64_t ky = 0; ky < w.k[1]; ky++) {
            int64_t ty = iy + w.pb[1] - ky * w.d[1];
            if (ty < 0 || ty % w.s[1] || ty / w.s[1] >= w.out[1]) continue;
            for (int64_t kx = 0; kx < w.k[2]; kx++) {
                int64_t tx = ix + w.pb[2] - kx * w.d[2];
                if (tx < 0 || tx % w.s[2] || tx / w.s[2] >= w.out[2]) continue;
                f((kz * w.k[1] + ky) * w.k[2] + kx, ((tz / w.s[0]) * w.out[1] + ty / w.s[1]) * w.out[2] + tx / w.s[2]);
            }
        }
    }
}
static inline CX_HD double relu0(double x) { return x > 0 ? x : 0; } /* NaN gives 0, as the CPU epilogue */

/* Records the first device-side error (CU_ERR_*). */
static inline CX_HD void cu_flag(int *err, int code) {
#if defined(__CUDA_ARCH__)
    atomicCAS(err, 0, code);
#elif defined(CX_CUDA_EMULATE)
    int zero = 0;
    __atomic_compare_exchange_n(err, &zero, code, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
#else
    (void)err, (void)code;
#endif
}

#ifndef CX_CUDA_EMULATE
template <class F> __global__ void cu_each_kernel(int64_t n, F f) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)blockDim.x * gridDim.x) f(i);
}
template <class F> static inline void cu_each(cu_ctx *c, int64_t n, F f) {
    if (n <= 0) return;
    int64_t blocks = (n + 255) / 256;
    if (blocks > 65536) blocks = 65536;
    cu_each_kernel<<<(unsigned)blocks, 256, 0, c->stream>>>(n, f);
    c->launches++;
}
#else
template <class F> static inline void cu_each(cu_ctx *c, int64_t n, F f) {
    if (n <= 0) return;
#pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t i = 0; i < n; i++) f(i);
    c->launches++;
}
#endif

/* ---- block kernels: one block of CU_NT threads per task, for rows and tiles -------------------------------------
 * cu_blocks(c, nb, shared, CU_BLK_FN { ... }) runs the function once per block b < nb with `shared` bytes of the
 * block's shared memory (blk.sh). Its code is written for the whole block: everything outside blk's calls runs on
 * every thread alike (uniform: no stores but through blk.each), the work is spread by
 *   blk.each(n, f)   f(k) for k < n, thread t taking k = t, t + CU_NT, ... (then blk.sync() before reading it),
 *   blk.sum / blk.max(n, f)   the sum / maximum of f(k) over k < n, to every thread: thread t's strided partial in
 *                    increasing k, then a tree (warp shuffles by 16, 8, 4, 2, 1; the 8 warps' results the same way).
 * The emulated build runs each block on one host thread in exactly that order (each: k in order; the reductions'
 * 256 partials and the same tree), so its numbers are the GPU's up to the math library's last bits; it also counts
 * the multiply-adds a kernel declares with blk.count() (cx_cuda_emulated_work: the work-count tests). */
#define CU_NT 256
#define CU_BLK_FN [=] CU_DEV(const cu_blk &blk)

template <class T> struct cu_add {
    CX_HD T operator()(T a, T b) const { return a + b; }
    static CX_HD T id() { return (T)0; }
};
template <class T> struct cu_max { /* NaN never wins, as the reference's "if (v > mx) mx = v" */
    CX_HD T operator()(T a, T b) const { return b > a ? b : a; }
    static CX_HD T id() { return (T)-INFINITY; }
};

#ifdef CX_CUDA_EMULATE
extern "C" void cu_emulated_work_add(int64_t n); /* cuda_backend.cu */
#endif

struct cu_blk {
    int64_t b;     /* the block's task */
    void *sh;      /* its shared memory (16-byte aligned) */
    double *red;   /* 32 doubles: the reductions' exchange */
#ifdef CX_CUDA_EMULATE
    template <class F> void each(int64_t n, F f) const {
        for (int64_t k = 0; k < n; k++) f(k);
    }
    void sync() const {}
    void count(int64_t n) const { cu_emulated_work_add(n); }
    template <class T, class Op, class F> T reduce(int64_t n, F f) const {
        Op op;
        T part[CU_NT], w[32];
        for (int t = 0; t < CU_NT; t++) part[t] = Op::id();
        for (int64_t k = 0; k < n; k++) part[k % CU_NT] = op(part[k % CU_NT], (T)f(k));
        for (int v = 0; v < 32; v++) w[v] = Op::id();
        for (int v = 0; v < CU_NT / 32; v++) {
            T *p = part + 32 * v;
            for (int off = 16; off; off >>= 1)
                for (int l = 0; l < off; l++) p[l] = op(p[l], p[l + off]);
            w[v] = p[0];
        }
        for (int off = 16; off; off >>= 1)
            for (int l = 0; l < off; l++) w[l] = op(w[l], w[l + off]);
        return w[0];
    }
#else
    template <class F> __device__ void each(int64_t n, F f) const {
        for (int64_t k = threadIdx.x; k < n; k += CU_NT) f(k);
    }
    __device__ void sync() const { __syncthreads(); }
    __device__ void count(int64_t) const {}
    template <class T, class Op, class F> __device__ T reduce(int64_t n, F f) const {
        Op op;
        T v = Op::id();
        for (int64_t k = threadIdx.x; k < n; k += CU_NT) v = op(v, (T)f(k));
        int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
        for (int off = 16; off; off >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, off));
        if (lane == 0) red[w] = (double)v;
        __syncthreads();
        if (w == 0) {
            v = lane < CU_NT / 32 ? (T)red[lane] : Op::id();
            for (int off = 16; off; off >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, off));
            if (lane == 0) red[CU_NT / 32] = (double)v;
        }
        __syncthreads();
        T r = (T)red[CU_NT / 32];
        __syncthreads(); /* red is free again */
        return r;
    }
#endif
    template <class T, class F> CU_DEV T sum(int64_t n, F f) const { return reduce<T, cu_add<T>>(n, f); }
    template <class T, class F> CU_DEV T max(int64_t n, F f) const { return reduce<T, cu_max<T>>(n, f); }
};

#ifndef CX_CUDA_EMULATE
template <class F> __global__ void __launch_bounds__(CU_NT) cu_blocks_kernel(int64_t nb, F f) {
    extern __shared__ __align__(16) unsigned char cu_shared[];
    __shared__ double red[32];
    cu_blk blk;
    blk.sh = cu_shared;
    blk.red = red;
    for (int64_t b = blockIdx.x; b < nb; b += gridDim.x) {
        blk.b = b;
        f(blk);
        __syncthreads();
    }
}
template <class F> static inline cattr_status cu_blocks(cu_ctx *c, int64_t nb, size_t shared, F f) {
    if (nb <= 0) return CATTR_OK;
    if (shared > 48 * 1024 &&
        cudaFuncSetAttribute(cu_blocks_kernel<F>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared) !=
            cudaSuccess) {
        cudaGetLastError();
        return cx_fail(CATTR_ERR_UNSUPPORTED, "cuda: a block kernel needs %zu bytes of shared memory", shared);
    }
    int64_t grid = nb < (1 << 20) ? nb : (1 << 20);
    cu_blocks_kernel<<<(unsigned)grid, CU_NT, shared, c->stream>>>(nb, f);
    c->launches++;
    return CATTR_OK;
}
#else
template <class F> static inline cattr_status cu_blocks(cu_ctx *c, int64_t nb, size_t shared, F f) {
    if (nb <= 0) return CATTR_OK;
    bool fail = false;
#pragma omp parallel if (nb > 1)
    {
        void *sh = shared ? aligned_alloc(16, (shared + 15) / 16 * 16) : NULL;
        double red[32];
        if (shared && !sh) {
#pragma omp atomic write
            fail = true;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t b = 0; b < nb; b++) {
            if (shared && !sh) continue;
            cu_blk blk;
            blk.b = b;
            blk.sh = sh;
            blk.red = red;
            f(blk);
        }
        free(sh);
    }
    c->launches++;
    return fail ? cx_fail(CATTR_ERR_NO_MEMORY, "cuda (emulated): out of memory for a block's shared memory")
                : CATTR_OK;
}
#endif

/* The device scratch of at least `bytes` (grow-only; NULL when out of device memory). */
void *cu_scratch(cu_ctx *c, size_t bytes);

/* Row-major strided-batched GEMM at full precision: for b < batch, C_b = op(A_b) op(B_b) + beta C_b, op a transpose
 * when ta / tb; A_b = A + b sa elements (sa 0: one A for every batch), likewise B, C; lda, ldb, ldc the row-major
 * leading dims. float32 or float64. Errors: CATTR_ERR_UNSUPPORTED (a dim beyond cuBLAS's int), CATTR_ERR_INTERNAL. */
cattr_status cu_gemm(cu_ctx *c, cattr_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *A,
                     int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb, void *C, int64_t ldc, int64_t sc,
                     int64_t batch, double beta);

cattr_status cu_zero(cu_ctx *c, void *p, size_t bytes);
cattr_status cu_copy_d2d(cu_ctx *c, void *dst, const void *src, size_t bytes);
cattr_status cu_copy_h2d(cu_ctx *c, void *dst, const void *src, size_t bytes);

/* The kernel families: each runs node n if it is one of its ops (*done = true) and says nothing otherwise. */
cattr_status cu_run_elementwise(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out, bool *done);
cattr_status cu_run_linear(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out, bool *done);
cattr_status cu_run_pool(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out, bool *done);
cattr_status cu_run_reduce(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out, bool *done);
cattr_status cu_run_index(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out, bool *done);
cattr_status cu_run_decoder(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out, bool *done);

#endif
