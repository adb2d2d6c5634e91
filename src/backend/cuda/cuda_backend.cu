/* cuda_backend.cu - the "cuda" backend's table: device memory from the device's stream-ordered pool (cudaMallocAsync,
 * freed without waiting for the device; cudaMalloc where there is no pool), one stream per device on which every
 * copy, kernel and cuBLAS call is enqueued in order, and the dispatch of a node to its kernel family (elementwise.cu,
 * linear.cu, pool.cu, reduce.cu, index.cu, decoder.cu).
 *
 * An op without a kernel here yet runs on the host: its inputs come down, the reference kernel (check_kernels.c)
 * computes it, its output goes up. Correct, but a synchronisation and two copies; `fallbacks` counts them and the
 * first use of each such op is logged, so the profile says where the device waits.
 *
 * With CATTR_CUDA_EMULATE the same file builds without the CUDA toolkit: "device" memory is host memory and the
 * kernels run as host loops (cu.h), so the backend's logic is tested wherever the CPU suite runs.
 */
#include <pthread.h>

#include "backend/cuda/cu.h"

extern "C" {
#include "backend/check/check_kernels.h"
#include "backend/cuda/cuda_backend.h"
}

#ifdef CX_CUDA_EMULATE
#include <cblas.h>
#else
#include <dlfcn.h>
#endif

#define CU_MAX_DEVICES 16

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static cx_backend *g_backends[CU_MAX_DEVICES];
static bool g_logged_fallback[CG_OP_COUNT];

#ifndef CX_CUDA_EMULATE
static cattr_status cuda_err(cudaError_t e, const char *what) {
    return cx_fail(e == cudaErrorMemoryAllocation ? CATTR_ERR_NO_MEMORY : CATTR_ERR_INTERNAL, "cuda: %s: %s", what,
                   cudaGetErrorString(e));
}
#define CU_TRY(call, what)                                                                                             \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) return cuda_err(e_, what);                                                              \
    } while (0)
#endif

#ifndef CX_CUDA_EMULATE
/* cuBLAS is loaded with dlopen when a device is first used, not linked: its 600 MB of libraries cost every process
 * 0.1 s at start-up, CPU-only runs included. The toolkit's library folder (CATTR_CUDA_LIBDIR, from the build) is
 * tried after the loader's own search. */
struct cu_blas_fns {
    decltype(&cublasCreate_v2) create;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSetMathMode) set_math_mode;
    decltype(&cublasSgemmStridedBatched) sgemm;
    decltype(&cublasDgemmStridedBatched) dgemm;
};
static cu_blas_fns g_blas;
static bool g_blas_ok;
static char g_blas_err[512];

static void load_cublas(void) {
    char name[64], path[600];
    snprintf(name, sizeof name, "libcublas.so.%d", (int)CUBLAS_VER_MAJOR);
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
#ifdef CATTR_CUDA_LIBDIR
    if (!h) {
        snprintf(path, sizeof path, "%s/%s", CATTR_CUDA_LIBDIR, name);
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
#else
    (void)path;
#endif
    if (!h) {
        const char *e = dlerror();
        snprintf(g_blas_err, sizeof g_blas_err, "cannot load %s (%s): install the CUDA toolkit's cuBLAS or add its "
                 "folder to LD_LIBRARY_PATH", name, e ? e : "not found");
        return;
    }
    g_blas.create = (decltype(g_blas.create))dlsym(h, "cublasCreate_v2");
    g_blas.set_stream = (decltype(g_blas.set_stream))dlsym(h, "cublasSetStream_v2");
    g_blas.set_math_mode = (decltype(g_blas.set_math_mode))dlsym(h, "cublasSetMathMode");
    g_blas.sgemm = (decltype(g_blas.sgemm))dlsym(h, "cublasSgemmStridedBatched");
    g_blas.dgemm = (decltype(g_blas.dgemm))dlsym(h, "cublasDgemmStridedBatched");
    g_blas_ok = g_blas.create && g_blas.set_stream && g_blas.set_math_mode && g_blas.sgemm && g_blas.dgemm;
    if (!g_blas_ok) snprintf(g_blas_err, sizeof g_blas_err, "%s lacks the functions cattr uses", name);
}
#endif

/* ---- memory ------------------------------------------------------------------------------------------------------- */

static void *cu_alloc(void *ctx, size_t bytes) {
    cu_ctx *c = (cu_ctx *)ctx;
    void *p = NULL;
    size_t n = bytes ? bytes : 256;
#ifndef CX_CUDA_EMULATE
    cudaSetDevice(c->ordinal);
    if ((c->pool ? cudaMallocAsync(&p, n, c->stream) : cudaMalloc(&p, n)) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky-free allocation error */
        return NULL;
    }
#else
    if (posix_memalign(&p, 256, n)) return NULL;
#endif
    pthread_mutex_lock(&g_lock);
    c->cur += bytes;
    if (c->cur > c->peak) c->peak = c->cur;
    pthread_mutex_unlock(&g_lock);
    return p;
}

static void cu_free(void *ctx, void *p, size_t bytes) {
    cu_ctx *c = (cu_ctx *)ctx;
    if (!p) return;
#ifndef CX_CUDA_EMULATE
    cudaSetDevice(c->ordinal);
    /* stream-ordered: p goes back to the pool after the work enqueued before it, without waiting for the device
     * (cudaFree would wait: nothing enqueued may still use p) */
    if (c->pool) cudaFreeAsync(p, c->stream);
    else cudaFree(p);
#else
    free(p);
#endif
    pthread_mutex_lock(&g_lock);
    c->cur -= bytes;
    pthread_mutex_unlock(&g_lock);
}

void *cu_scratch(cu_ctx *c, size_t bytes) {
    if (c->scratch_bytes >= bytes) return c->scratch;
    cu_free(c, c->scratch, c->scratch_bytes);
    c->scratch = NULL;
    c->scratch_bytes = 0;
    size_t n = bytes + bytes / 4; /* room to grow a little without another reallocation */
    c->scratch = cu_alloc(c, n);
    if (c->scratch) c->scratch_bytes = n;
    return c->scratch;
}

/* The device error word: 0, or the first CU_ERR_* a kernel recorded since the last check (which clears it). */
static cattr_status check_device_error(cu_ctx *c) {
    int code = 0;
#ifndef CX_CUDA_EMULATE
    CU_TRY(cudaMemcpyAsync(&code, c->err, sizeof code, cudaMemcpyDeviceToHost, c->stream), "reading the error word");
    CU_TRY(cudaStreamSynchronize(c->stream), "synchronising");
    if (code) CU_TRY(cudaMemsetAsync(c->err, 0, sizeof code, c->stream), "clearing the error word");
#else
    code = *c->err;
    *c->err = 0;
#endif
    switch (code) {
    case CU_ERR_NONE: return CATTR_OK;
    case CU_ERR_GATHER_INDEX: return cx_fail(CATTR_ERR_SHAPE, "cuda: a Gather index was out of range");
    case CU_ERR_SEQ_POS: return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cuda: a SeqPick position was out of range");
    case CU_ERR_ROW_MAP: return cx_fail(CATTR_ERR_SHAPE, "cuda: a WhereId row map was out of range");
    case CU_ERR_ROPE_POS: return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cuda: a RoPE position was negative");
    case CU_ERR_SEGMENT: return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cuda: an Attention segment was out of range");
    default: return cx_fail(CATTR_ERR_INTERNAL, "cuda: device error code %d", code);
    }
}

/* ---- copies ------------------------------------------------------------------------------------------------------- */

cattr_status cu_copy_h2d(cu_ctx *c, void *dst, const void *src, size_t bytes) {
    if (!bytes) return CATTR_OK;
#ifndef CX_CUDA_EMULATE
    /* from pageable memory the call returns once the source is staged: the caller may reuse it at once */
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream), "copy to the device");
#else
    (void)c;
    memcpy(dst, src, bytes);
#endif
    return CATTR_OK;
}

cattr_status cu_copy_d2d(cu_ctx *c, void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return CATTR_OK;
#ifndef CX_CUDA_EMULATE
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream), "copy on the device");
#else
    (void)c;
    memmove(dst, src, bytes);
#endif
    return CATTR_OK;
}

cattr_status cu_zero(cu_ctx *c, void *p, size_t bytes) {
    if (!bytes) return CATTR_OK;
#ifndef CX_CUDA_EMULATE
    CU_TRY(cudaMemsetAsync(p, 0, bytes, c->stream), "zeroing device memory");
#else
    (void)c;
    memset(p, 0, bytes);
#endif
    return CATTR_OK;
}

static cattr_status t_copy_in(void *ctx, void *dst, const void *src, size_t bytes) {
    return cu_copy_h2d((cu_ctx *)ctx, dst, src, bytes);
}

static cattr_status t_copy_out(void *ctx, void *dst, const void *src, size_t bytes) {
    cu_ctx *c = (cu_ctx *)ctx;
    if (!bytes) return check_device_error(c);
#ifndef CX_CUDA_EMULATE
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream), "copy from the device");
#else
    memcpy(dst, src, bytes);
#endif
    return check_device_error(c); /* synchronises: dst is complete on return */
}

static cattr_status t_zero(void *ctx, void *dst, size_t bytes) { return cu_zero((cu_ctx *)ctx, dst, bytes); }
static cattr_status t_copy_dev(void *ctx, void *dst, const void *src, size_t bytes) {
    return cu_copy_d2d((cu_ctx *)ctx, dst, src, bytes);
}

/* ---- GEMM --------------------------------------------------------------------------------------------------------- */

cattr_status cu_gemm(cu_ctx *c, cattr_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *A,
                     int64_t lda, int64_t sa, const void *B, int64_t ldb, int64_t sb, void *C, int64_t ldc, int64_t sc,
                     int64_t batch, double beta) {
    if (m <= 0 || n <= 0 || batch <= 0) return CATTR_OK;
    if (k <= 0) { /* an empty sum: C = beta C */
        if (beta != 0) return cx_fail(CATTR_ERR_INTERNAL, "cuda: GEMM with an empty inner dim and beta");
        for (int64_t b = 0; b < batch; b++)
            for (int64_t i = 0; i < m; i++) {
                cattr_status st = cu_zero(c, (char *)C + (size_t)(b * sc + i * ldc) * cattr_dtype_size(dt),
                                          (size_t)n * cattr_dtype_size(dt));
                if (st != CATTR_OK) return st;
            }
        return CATTR_OK;
    }
    const int64_t lim = 2147483647;
    if (m > lim || n > lim || k > lim || lda > lim || ldb > lim || ldc > lim || batch > lim)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "cuda: a GEMM of %lld x %lld x %lld is beyond cuBLAS's 32-bit sizes",
                       (long long)m, (long long)n, (long long)k);
    c->launches++;
#ifndef CX_CUDA_EMULATE
    /* row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: B first, m and n swapped */
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t s;
    if (dt == CATTR_FLOAT32) {
        float one = 1, bt = (float)beta;
        s = c->fn->sgemm(c->blas, ob, oa, (int)n, (int)m, (int)k, &one, (const float *)B, (int)ldb, sb,
                                      (const float *)A, (int)lda, sa, &bt, (float *)C, (int)ldc, sc, (int)batch);
    } else {
        double one = 1, bt = beta;
        s = c->fn->dgemm(c->blas, ob, oa, (int)n, (int)m, (int)k, &one, (const double *)B, (int)ldb, sb,
                                      (const double *)A, (int)lda, sa, &bt, (double *)C, (int)ldc, sc, (int)batch);
    }
    if (s != CUBLAS_STATUS_SUCCESS) return cx_fail(CATTR_ERR_INTERNAL, "cuda: cuBLAS GEMM failed (status %d)", (int)s);
#else
    CBLAS_TRANSPOSE oa = ta ? CblasTrans : CblasNoTrans, ob = tb ? CblasTrans : CblasNoTrans;
    for (int64_t b = 0; b < batch; b++) {
        if (dt == CATTR_FLOAT32)
            cblas_sgemm(CblasRowMajor, oa, ob, (int)m, (int)n, (int)k, 1.0f, (const float *)A + b * sa, (int)lda,
                        (const float *)B + b * sb, (int)ldb, (float)beta, (float *)C + b * sc, (int)ldc);
        else
            cblas_dgemm(CblasRowMajor, oa, ob, (int)m, (int)n, (int)k, 1.0, (const double *)A + b * sa, (int)lda,
                        (const double *)B + b * sb, (int)ldb, beta, (double *)C + b * sc, (int)ldc);
    }
#endif
    return CATTR_OK;
}

/* ---- running a node ----------------------------------------------------------------------------------------------- */

/* The reference kernel of node n on the host: inputs down, the kernel, the output up. */
static cattr_status host_roundtrip(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    cattr_status st = CATTR_OK;
    cx_view hin[CG_MAX_IN], hout = *out;
    void *bufs[CG_MAX_IN + 1] = {0};
    for (int i = 0; i < n->n_in; i++) {
        hin[i] = in[i];
        size_t b = (size_t)cx_view_numel(&in[i]) * cattr_dtype_size(in[i].dtype);
        if (!in[i].data) continue;
        if (!(bufs[i] = malloc(b ? b : 1))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else st = t_copy_out(c, bufs[i], in[i].data, b);
        hin[i].data = bufs[i];
        if (st != CATTR_OK) break;
    }
    size_t ob = (size_t)cx_view_numel(out) * cattr_dtype_size(out->dtype);
    if (st == CATTR_OK && !(bufs[CG_MAX_IN] = calloc(1, ob ? ob : 1))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    hout.data = bufs[CG_MAX_IN];
    if (st == CATTR_OK) st = cx_check_run_op(n, hin, &hout);
    if (st == CATTR_OK) {
        st = cu_copy_h2d(c, out->data, hout.data, ob);
#ifndef CX_CUDA_EMULATE
        if (st == CATTR_OK) CU_TRY(cudaStreamSynchronize(c->stream), "synchronising"); /* before the host buffer goes */
#endif
    }
    for (int i = 0; i <= CG_MAX_IN; i++) free(bufs[i]);
    return st;
}

/* An op without a kernel here: it runs on the host (host_roundtrip), logged once per op. */
static cattr_status run_on_host(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    cattr_status st = host_roundtrip(c, n, in, out);
    c->fallbacks++;
    if (st == CATTR_OK && (unsigned)n->op < (unsigned)CG_OP_COUNT) {
        pthread_mutex_lock(&g_lock);
        bool first = !g_logged_fallback[n->op];
        g_logged_fallback[n->op] = true;
        pthread_mutex_unlock(&g_lock);
        if (first)
            cx_log(CATTR_LOG_DEBUG, "cuda: op %s runs on the host (no device kernel yet): node '%s'",
                   cg_op_names[n->op], n->name);
    }
    return st;
}

static cattr_status run_op(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    if (cx_view_numel(out) == 0) return CATTR_OK;
    if (n->a.bf16)
        return cx_fail(CATTR_ERR_UNSUPPORTED,
                       "node '%s' (op %s): bfloat16 products (precision \"high\") are not supported by the cuda "
                       "backend yet; use precision \"highest\"",
                       n->name, cg_op_names[n->op]);
    if (c->host_ops && strstr(c->host_ops, cg_op_names[n->op])) return run_on_host(c, n, in, out);
    typedef cattr_status (*family)(cu_ctx *, const cg_node *, const cx_view *, cx_view *, bool *);
    static const family families[] = {cu_run_elementwise, cu_run_linear, cu_run_pool,
                                      cu_run_reduce,      cu_run_index,  cu_run_decoder};
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        bool done = false;
        cattr_status st = families[f](c, n, in, out, &done);
        if (!done) continue;
#ifndef CX_CUDA_EMULATE
        if (st == CATTR_OK) {
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess)
                return cx_fail(CATTR_ERR_INTERNAL, "cuda: node '%s' (op %s): %s", n->name, cg_op_names[n->op],
                               cudaGetErrorString(e));
        }
#endif
        return st;
    }
    return run_on_host(c, n, in, out);
}

/* One op at a time: the methods may run plans from two host threads at once (IG's two halves), and an op's kernels
 * share the scratch and the cuBLAS handle; once enqueued, the stream keeps every op's launches in order. */
static cattr_status t_run_op(void *ctx, const cg_node *n, const cx_view *in, cx_view *out) {
    cu_ctx *c = (cu_ctx *)ctx;
    /* a host function (HostCall) runs on the host by definition, outside the op lock: it may take long, and may call
     * the library itself; its copies are ordered on the stream like the executor's own */
    if (n->op == CG_HOST_CALL) return host_roundtrip(c, n, in, out);
    pthread_mutex_lock(&c->op_lock);
    cattr_status st = run_op(c, n, in, out);
    pthread_mutex_unlock(&c->op_lock);
    return st;
}

static cattr_status t_sync(void *ctx) { return check_device_error((cu_ctx *)ctx); }

static size_t t_peak(void *ctx) {
    cu_ctx *c = (cu_ctx *)ctx;
    pthread_mutex_lock(&g_lock);
    size_t p = c->peak;
    pthread_mutex_unlock(&g_lock);
    return p;
}
static void t_reset_peak(void *ctx) {
    cu_ctx *c = (cu_ctx *)ctx;
    pthread_mutex_lock(&g_lock);
    c->peak = c->cur;
    pthread_mutex_unlock(&g_lock);
}
/* The ops with a device kernel: not those it runs on the host (cx_op_cuda_on_host, which run_op still accepts) nor
 * the executor's own. */
static bool t_supports(void *ctx, cg_op op, cattr_dtype dtype) {
    (void)ctx, (void)dtype;
    return (unsigned)op < (unsigned)CG_OP_COUNT && !cx_op_cuda_on_host(op) && !cx_op_run_by_executor(op);
}
/* The device's free memory (cudaMemGetInfo); the emulated build's memory is the host's. */
static size_t t_free_memory(void *ctx) {
#ifdef CX_CUDA_EMULATE
    (void)ctx;
    return SIZE_MAX;
#else
    cu_ctx *c = (cu_ctx *)ctx;
    size_t free_b = 0, total = 0;
    cudaSetDevice(c->ordinal);
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
        cudaGetLastError(); /* not sticky: the budget falls back to the host's */
        return SIZE_MAX;
    }
    cudaMemPool_t mp;
    uint64_t reserved = 0, used = 0; /* the pool keeps freed memory: free for this process too */
    if (c->pool && cudaDeviceGetDefaultMemPool(&mp, c->ordinal) == cudaSuccess &&
        cudaMemPoolGetAttribute(mp, cudaMemPoolAttrReservedMemCurrent, &reserved) == cudaSuccess &&
        cudaMemPoolGetAttribute(mp, cudaMemPoolAttrUsedMemCurrent, &used) == cudaSuccess && reserved > used)
        free_b += (size_t)(reserved - used);
    cudaGetLastError();
    return free_b;
#endif
}
/* full precision only; a checkpoint's 16-bit matrices stay 16-bit on the device (linear.cu's gemm_stored widens a
 * block of columns at a time; Gather widens as it copies) */
static bool t_has_cap(void *ctx, cx_cap cap) {
    (void)ctx;
    return cap == CX_CAP_STORED_WEIGHTS;
}

/* ---- the table ---------------------------------------------------------------------------------------------------- */

static cattr_status make_backend(int ordinal, cx_backend **out) {
    cu_ctx *c = (cu_ctx *)calloc(1, sizeof *c);
    cx_backend *b = (cx_backend *)calloc(1, sizeof *b);
    if (!c || !b) {
        free(c), free(b);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    c->ordinal = ordinal;
    pthread_mutex_init(&c->op_lock, NULL);
    c->host_ops = getenv("CATTR_CUDA_HOST_OPS");
#ifndef CX_CUDA_EMULATE
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        cudaGetLastError();
        free(c), free(b);
        return cx_fail(CATTR_ERR_UNSUPPORTED, "device 'cuda:%d': no CUDA device found (%s)", ordinal,
                       e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports none");
    }
    if (ordinal >= count) {
        free(c), free(b);
        return cx_fail(CATTR_ERR_UNSUPPORTED, "device 'cuda:%d': this machine has %d CUDA device%s", ordinal, count,
                       count == 1 ? "" : "s");
    }
    cudaDeviceProp prop;
    if (cudaSetDevice(ordinal) != cudaSuccess || cudaGetDeviceProperties(&prop, ordinal) != cudaSuccess ||
        cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking) != cudaSuccess) {
        e = cudaGetLastError();
        free(c), free(b);
        return cx_fail(CATTR_ERR_UNSUPPORTED, "device 'cuda:%d': cannot be used (%s)", ordinal, cudaGetErrorString(e));
    }
    snprintf(c->device_name, sizeof c->device_name, "%s", prop.name);
    /* device memory from the stream-ordered pool (cudaMallocAsync) where the device has one, kept by the pool
     * between calls instead of given back to the driver at each synchronisation */
    int pools = 0;
    cudaMemPool_t mp;
    if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, ordinal) == cudaSuccess && pools &&
        cudaDeviceGetDefaultMemPool(&mp, ordinal) == cudaSuccess) {
        uint64_t keep = UINT64_MAX;
        c->pool = cudaMemPoolSetAttribute(mp, cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess;
    }
    cudaGetLastError();
    static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
    pthread_once(&blas_once, load_cublas);
    if (!g_blas_ok) {
        cudaStreamDestroy(c->stream);
        free(c), free(b);
        return cx_fail(CATTR_ERR_UNSUPPORTED, "device 'cuda:%d': %s", ordinal, g_blas_err);
    }
    c->fn = &g_blas;
    if (c->fn->create(&c->blas) != CUBLAS_STATUS_SUCCESS ||
        c->fn->set_stream(c->blas, c->stream) != CUBLAS_STATUS_SUCCESS ||
        c->fn->set_math_mode(c->blas, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS) { /* never TF32 */
        cudaStreamDestroy(c->stream);
        free(c), free(b);
        return cx_fail(CATTR_ERR_UNSUPPORTED, "device 'cuda:%d': cuBLAS cannot start", ordinal);
    }
#else
    snprintf(c->device_name, sizeof c->device_name, "host emulation");
#endif
    c->err = (int *)cu_alloc(c, sizeof(int));
    if (!c->err || cu_zero(c, c->err, sizeof(int)) != CATTR_OK) {
        free(c), free(b);
        return cx_fail(CATTR_ERR_NO_MEMORY, "device 'cuda:%d': out of device memory", ordinal);
    }
    c->cur = c->peak = 0; /* the error word is the backend's own, not the caller's */
    b->version = CX_BACKEND_VERSION;
    b->name = "cuda";
    b->ctx = c;
    b->alloc = cu_alloc;
    b->free = cu_free;
    b->copy_in = t_copy_in;
    b->copy_out = t_copy_out;
    b->memset_zero = t_zero;
    b->copy_dev = t_copy_dev;
    b->run_op = t_run_op;
    b->synchronize = t_sync;
    b->peak_memory = t_peak;
    b->reset_peak = t_reset_peak;
    b->supports_op = t_supports;
    b->host_memory = false;
    b->has_cap = t_has_cap;
    b->forget_host = NULL;
    b->free_memory = t_free_memory;
    *out = b;
    return CATTR_OK;
}

extern "C" cattr_status cx_backend_cuda_get(int ordinal, cx_backend **out) {
    *out = NULL;
    if (ordinal < 0 || ordinal >= CU_MAX_DEVICES)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "device 'cuda:%d': the ordinal must be 0..%d", ordinal,
                       CU_MAX_DEVICES - 1);
    static pthread_mutex_t make_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&make_lock);
    cattr_status st = CATTR_OK;
    if (!g_backends[ordinal]) st = make_backend(ordinal, &g_backends[ordinal]);
    *out = g_backends[ordinal];
    pthread_mutex_unlock(&make_lock);
    return st;
}

extern "C" int cx_backend_cuda_emulated(void) {
#ifdef CX_CUDA_EMULATE
    return 1;
#else
    return 0;
#endif
}

#ifdef CX_CUDA_EMULATE
static int64_t g_emulated_work; /* the multiply-adds block kernels declared (blk.count) */
extern "C" void cu_emulated_work_add(int64_t n) { __atomic_fetch_add(&g_emulated_work, n, __ATOMIC_RELAXED); }
#endif

extern "C" int64_t cx_backend_cuda_emulated_work(void) {
#ifdef CX_CUDA_EMULATE
    return __atomic_load_n(&g_emulated_work, __ATOMIC_RELAXED);
#else
    return -1;
#endif
}
