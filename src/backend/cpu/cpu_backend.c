/* cpu_backend.c - the CPU backend: host memory with a peak counter, OpenBLAS GEMM, OpenMP kernels.
 *
 * The float kernels live in kernels_impl.h and are instantiated here for float and double, on the products of
 * cpu_gemm.c. Data-movement ops (reshape, transpose, concat, slice, gather) work on bytes and serve every dtype.
 */
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/bf16_gemm.h"
#include "backend/cpu/cpu_gemm.h"
#include "backend/cpu/f32_gemm.h"
#include "backend/check/check_kernels.h"
#include "ops/elementwise.h"
#include "ops/ops.h"
#include "core/rng.h"

#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Grow-only per-thread scratch buffers (convolution columns), so that repeated calls allocate nothing. A thread's
 * set is freed when the thread ends (a pthread key's destructor: OpenMP ends pool threads when a team shrinks), the
 * main thread's at exit. */
#define SCRATCH_SLOTS 3 /* convolution columns, staged products, transposed filters (pooling rows use slot 0) */
typedef struct {
    void *p[SCRATCH_SLOTS];
    size_t n[SCRATCH_SLOTS];
} scratch_set;
static _Thread_local scratch_set *g_scratch;
static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
static bool g_scratch_key_ok;

static void scratch_set_free(void *v) {
    scratch_set *s = v;
    if (!s) return;
    for (int i = 0; i < SCRATCH_SLOTS; i++) free(s->p[i]);
    free(s);
}
static void scratch_key_make(void) { g_scratch_key_ok = pthread_key_create(&g_scratch_key, scratch_set_free) == 0; }

static void *cpu_scratch(int slot, size_t bytes) {
    if (!g_scratch) {
        pthread_once(&g_scratch_once, scratch_key_make);
        if (!(g_scratch = calloc(1, sizeof *g_scratch))) return NULL;
        if (g_scratch_key_ok) pthread_setspecific(g_scratch_key, g_scratch);
    }
    scratch_set *s = g_scratch;
    if (s->n[slot] < bytes) {
        free(s->p[slot]);
        s->p[slot] = NULL;
        s->n[slot] = 0;
        if (posix_memalign(&s->p[slot], 64, bytes)) return NULL;
        s->n[slot] = bytes;
    }
    return s->p[slot];
}

__attribute__((destructor)) static void cpu_scratch_release(void) { /* the main thread's (no key destructor there) */
    if (g_scratch_key_ok) pthread_setspecific(g_scratch_key, NULL);
    scratch_set_free(g_scratch);
    g_scratch = NULL;
}

/* Hot row kernels are built for several instruction sets and picked at load time (GCC's target_clones); their
 * reductions use fixed lanes, so every clone rounds the same way. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define CX_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CX_CLONES
#endif
/* for helpers of a CX_CLONES kernel: a helper left out of line is built for the default target only */
#define CX_INLINE inline __attribute__((always_inline))

/* exp for float in a form the vectoriser takes: Cephes' expf (Cody-Waite reduction by ln 2, degree-6 polynomial),
 * within 2 ulp of expf on [-87, 88]; arguments are clamped there (e^-87 = 1.6e-38 stands for anything smaller), NaN
 * stays NaN. Used
 * by the transformer kernels' SiLU and softmax, where libm's scalar expf was a tenth of an LLM attribution. */
static inline float cx_vexpf(float x0) {
    float x = x0 < 88.0f ? x0 : 88.0f; /* NaN takes 88 here (no float-to-int conversion of a NaN below) ... */
    x = x > -87.0f ? x : -87.0f;
    float fx = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest, no libm call */
    float r = x - fx * 0.693359375f;
    r = r - fx * -2.12194440e-4f;
    float r2 = r * r;
    float p = 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    p = p * r2 + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)fx + 127) << 23;
    float s;
    memcpy(&s, &bits, 4);
    return x0 == x0 ? p * s : x0; /* ... and comes back out as NaN */
}

float cx_vexpf_for_tests(float x) { return cx_vexpf(x); }

/* p[u] = cx_vexpf(p[u] - sub) for u < n, eight lanes at a time in GCC vectors (the same operations in the same order
 * per lane: the bits of cx_vexpf): the vectoriser left the loop over cx_vexpf scalar in the AVX2 and default clones
 * (the selects of its clamps and NaN are control flow there), where the attention's softmax spent a quarter of its
 * time. For the helpers of a CX_CLONES kernel (always inlined). */
static CX_INLINE void cx_vexpf_row(float *p, int64_t n, float sub) {
    typedef float vf __attribute__((vector_size(32)));
    typedef int32_t vi __attribute__((vector_size(32)));
    const vf hi = (vf){0} + 88.0f, lo = (vf){0} - 87.0f;
    int64_t u = 0;
    for (; u + 8 <= n; u += 8) {
        vf x0;
        memcpy(&x0, p + u, sizeof x0);
        x0 = x0 - sub;
        vi m = x0 < hi; /* NaN takes 88 here ... */
        vf x = (vf)(((vi)x0 & m) | ((vi)hi & ~m));
        m = x > lo;
        x = (vf)(((vi)x & m) | ((vi)lo & ~m));
        vf fx = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
        vf r = x - fx * 0.693359375f;
        r = r - fx * -2.12194440e-4f;
        vf r2 = r * r;
        vf q = (vf){0} + 1.9875691500E-4f;
        q = q * r + 1.3981999507E-3f;
        q = q * r + 8.3334519073E-3f;
        q = q * r + 4.1665795894E-2f;
        q = q * r + 1.6666665459E-1f;
        q = q * r + 5.0000001201E-1f;
        q = q * r2 + r + 1.0f;
        vi bits = (__builtin_convertvector(fx, vi) + 127) << 23;
        vf y = q * (vf)bits;
        m = x0 == x0; /* ... and comes back out as NaN */
        y = (vf)(((vi)y & m) | ((vi)x0 & ~m));
        memcpy(p + u, &y, sizeof y);
    }
    for (; u < n; u++) p[u] = cx_vexpf(p[u] - sub);
}

void cx_vexpf_row_for_tests(float *p, int64_t n, float sub) { cx_vexpf_row(p, n, sub); }

/* Whether the attention kernels block for 16-lane vectors (native with AVX-512F) or 8 (AVX2 and others: 16-lane
 * accumulators spilled to the stack there, 2-5 GFLOP/s). Both give the same bits (attn_impl.h). CATTR_ATT_LANES=8 or
 * 16 chooses (for tests of either width on any CPU). */
static _Atomic int g_att_wide = -1; /* -1: not chosen yet */
static bool cpu_att_wide(void) {
    int w = atomic_load_explicit(&g_att_wide, memory_order_relaxed);
    if (w < 0) {
        const char *e = getenv("CATTR_ATT_LANES");
#if defined(__x86_64__) && defined(__GNUC__)
        __builtin_cpu_init();
        w = __builtin_cpu_supports("avx512f") ? 1 : 0;
#else
        w = 1;
#endif
        if (e && !strcmp(e, "8")) w = 0;
        else if (e && !strcmp(e, "16")) w = 1;
        atomic_store_explicit(&g_att_wide, w, memory_order_relaxed);
    }
    return w != 0;
}

void cx_cpu_att_lanes_for_tests(int lanes) {
    atomic_store_explicit(&g_att_wide, lanes == 16 ? 1 : lanes == 8 ? 0 : -1, memory_order_relaxed);
}

/* ---- float instantiation ---- */
#define T float
#define K(name) name##_f32
#define GEMM cx_sgemm
#define EXP expf
#define VEXP cx_vexpf
#define VEXP_ROW cx_vexpf_row
#define TANH tanhf
#define SQRT sqrtf
#include "kernels_impl.h"
#include "llm_impl.h"
#undef T
#undef K
#undef GEMM
#undef EXP
#undef VEXP
#undef VEXP_ROW
#undef TANH
#undef SQRT
#undef PAR_MIN

static CX_INLINE void cx_vexp_row_f64(double *p, int64_t n, double sub) {
    for (int64_t u = 0; u < n; u++) p[u] = exp(p[u] - sub);
}

/* ---- double instantiation ---- */
#define T double
#define K(name) name##_f64
#define GEMM cx_dgemm
#define EXP exp
#define VEXP exp
#define VEXP_ROW cx_vexp_row_f64
#define TANH tanh
#define SQRT sqrt
#include "kernels_impl.h"
#include "llm_impl.h"
#undef T
#undef K
#undef GEMM
#undef EXP
#undef VEXP
#undef VEXP_ROW
#undef TANH
#undef SQRT

/* ---- dtype-generic data movement ------------------------------------------------------------------------- */

static cattr_status k_copy(const cx_view *in, cx_view *out) {
    size_t bytes = (size_t)cx_view_numel(out) * cattr_dtype_size(out->dtype);
    if (out->data != in->data && bytes) memcpy(out->data, in->data, bytes);
    return CATTR_OK;
}

static cattr_status k_transpose(const cg_node *n, const cx_view *in, cx_view *out) {
    int nd = in->ndim;
    size_t es = cattr_dtype_size(in->dtype);
    int64_t istr[CATTR_MAX_DIMS], pstr[CATTR_MAX_DIMS], r = 1;
    for (int d = nd - 1; d >= 0; d--) {
        istr[d] = r;
        r *= in->shape[d];
    }
    for (int d = 0; d < nd; d++) pstr[d] = istr[n->a.n_ints ? n->a.ints[d] : nd - 1 - d];
    int64_t cnt = cx_view_numel(out);
    const char *x = in->data;
    char *y = out->data;
    for (int64_t i = 0; i < cnt; i++) {
        int64_t rem = i, off = 0;
        for (int d = nd - 1; d >= 0; d--) {
            off += (rem % out->shape[d]) * pstr[d];
            rem /= out->shape[d];
        }
        memcpy(y + (size_t)i * es, x + (size_t)off * es, es);
    }
    return CATTR_OK;
}

static cattr_status k_concat(const cg_node *n, const cx_view *in, cx_view *out) {
    int ax = (int)(n->a.axis < 0 ? n->a.axis + out->ndim : n->a.axis);
    size_t es = cattr_dtype_size(out->dtype);
    int64_t outer = cx_numel(ax, out->shape), inner = cx_numel(out->ndim - ax - 1, out->shape + ax + 1);
    int64_t orow = out->shape[ax] * inner, off = 0;
    for (int i = 0; i < n->n_in; i++) {
        int64_t row = in[i].shape[ax] * inner;
        for (int64_t o = 0; o < outer; o++)
            memcpy((char *)out->data + (size_t)(o * orow + off) * es, (const char *)in[i].data + (size_t)(o * row) * es,
                   (size_t)row * es);
        off += row;
    }
    return CATTR_OK;
}

/* (gY, X0..Xk): the piece of gY along axis that belongs to X_index */
static cattr_status k_concat_grad(const cg_node *n, const cx_view *in, cx_view *out) {
    int ax = (int)(n->a.axis < 0 ? n->a.axis + in[0].ndim : n->a.axis);
    size_t es = cattr_dtype_size(out->dtype);
    int64_t outer = cx_numel(ax, in[0].shape), inner = cx_numel(in[0].ndim - ax - 1, in[0].shape + ax + 1);
    int64_t grow = in[0].shape[ax] * inner, off = 0;
    for (int i = 0; i < n->a.index; i++) off += in[1 + i].shape[ax] * inner;
    int64_t row = out->shape[ax] * inner;
    for (int64_t o = 0; o < outer; o++)
        memcpy((char *)out->data + (size_t)(o * row) * es, (const char *)in[0].data + (size_t)(o * grow + off) * es,
               (size_t)row * es);
    return CATTR_OK;
}

static cattr_status gather_index(const cg_node *n, int64_t v, int64_t dim, int64_t *out) {
    int64_t given = v;
    if (v < 0) v += dim;
    if (v < 0 || v >= dim)
        return cx_fail(CATTR_ERR_SHAPE, "node '%s' (op Gather): index %lld is out of range for a dimension of size %lld "
                       "(from %lld to %lld)", n->name, (long long)given, (long long)dim, (long long)-dim,
                       (long long)dim - 1);
    *out = v;
    return CATTR_OK;
}

/* (k, j) pairs ordered by k, then j */
static int cmp_pair(const void *a, const void *b) {
    const int64_t *p = a, *q = b;
    return p[0] != q[0] ? (p[0] < q[0] ? -1 : 1) : (p[1] < q[1] ? -1 : p[1] > q[1]);
}

/* GatherGrad in float32 with every output element summed in double and rounded once (as the cpu-check kernel sums):
 * the rows j that add into output row k are grouped (sorted by k, then j) and summed in a double buffer of one row,
 * so the scratch is the indices and one row whatever the size of the output (an embedding table's gradient). */
static cattr_status gather_grad_f32(const cg_node *n, const cx_view *in, cx_view *out, int64_t outer, int64_t inner,
                                    int64_t dim, int64_t ni) {
    const int64_t *ix = in[1].data;
    int64_t cnt = cx_view_numel(out);
    if (cnt <= ((int64_t)1 << 22)) { /* an output of up to 4M values: one double per value, in row order */
        double small[256], *acc = cnt <= 256 ? small : calloc((size_t)cnt, sizeof *acc);
        if (!acc) return cx_fail(CATTR_ERR_NO_MEMORY, "node '%s' (op GatherGrad): out of memory", n->name);
        if (acc == small) memset(small, 0, sizeof small);
        const float *g = in[0].data;
        cattr_status st = CATTR_OK;
        for (int64_t o = 0; o < outer && st == CATTR_OK; o++)
            for (int64_t j = 0; j < ni && st == CATTR_OK; j++) {
                int64_t k = 0;
                st = gather_index(n, ix[j], dim, &k);
                double *d = acc + (o * dim + k) * inner;
                const float *s = g + (o * ni + j) * inner;
                for (int64_t t = 0; st == CATTR_OK && t < inner; t++) d[t] += (double)s[t];
            }
        float *y = out->data;
        for (int64_t i = 0; i < cnt && st == CATTR_OK; i++) y[i] = (float)acc[i];
        if (acc != small) free(acc);
        return st;
    }
    int64_t *pairs = malloc((size_t)(2 * ni + 1) * sizeof *pairs);
    double *acc = malloc((size_t)(inner + 1) * sizeof *acc);
    if (!pairs || !acc) {
        free(pairs);
        free(acc);
        return cx_fail(CATTR_ERR_NO_MEMORY, "node '%s' (op GatherGrad): out of memory", n->name);
    }
    cattr_status st = CATTR_OK;
    for (int64_t j = 0; j < ni && st == CATTR_OK; j++) {
        st = gather_index(n, ix[j], dim, &pairs[2 * j]);
        pairs[2 * j + 1] = j;
    }
    if (st == CATTR_OK) qsort(pairs, (size_t)ni, 2 * sizeof *pairs, cmp_pair);
    float *y = out->data;
    const float *g = in[0].data;
    for (int64_t o = 0; o < outer && st == CATTR_OK; o++)
        for (int64_t q = 0; q < ni;) {
            int64_t k = pairs[2 * q];
            for (int64_t t = 0; t < inner; t++) acc[t] = 0;
            for (; q < ni && pairs[2 * q] == k; q++) {
                const float *s = g + (o * ni + pairs[2 * q + 1]) * inner;
                for (int64_t t = 0; t < inner; t++) acc[t] += (double)s[t];
            }
            float *d = y + (o * dim + k) * inner;
            for (int64_t t = 0; t < inner; t++) d[t] = (float)acc[t];
        }
    free(pairs);
    free(acc);
    return st;
}

/* Gather: (data, indices) -> out; GatherGrad: (gY, indices, X) -> scatter-add. */
static cattr_status k_gather(const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_GATHER_GRAD;
    const cx_view *data = grad ? &in[2] : &in[0];
    const cx_view *idx = &in[1];
    int ax = (int)(n->a.axis < 0 ? n->a.axis + data->ndim : n->a.axis);
    size_t es = cattr_dtype_size(out->dtype);
    int64_t outer = cx_numel(ax, data->shape), inner = cx_numel(data->ndim - ax - 1, data->shape + ax + 1);
    int64_t dim = data->shape[ax], ni = cx_view_numel(idx);
    const int64_t *ix = idx->data;
    if (grad) memset(out->data, 0, (size_t)cx_view_numel(out) * es);
    if (grad && out->dtype == CATTR_FLOAT32) return gather_grad_f32(n, in, out, outer, inner, dim, ni);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < ni; j++) {
            int64_t k = 0;
            CX_CHECK(gather_index(n, ix[j], dim, &k));
            if (!grad && cx_dtype_is_storage(data->dtype)) { /* rows of a checkpoint's matrix, widened */
                const uint16_t *src = (const uint16_t *)data->data + (o * dim + k) * inner;
                float *dst = (float *)out->data + (o * ni + j) * inner;
                if (data->dtype == CX_BFLOAT16)
                    for (int64_t t = 0; t < inner; t++) dst[t] = cx_bf16_to_f32(src[t]);
                else
                    for (int64_t t = 0; t < inner; t++) dst[t] = cx_f16_to_f32(src[t]);
            } else if (!grad) {
                memcpy((char *)out->data + (size_t)((o * ni + j) * inner) * es,
                       (const char *)data->data + (size_t)((o * dim + k) * inner) * es, (size_t)inner * es);
            } else if (out->dtype == CATTR_FLOAT32) {
                float *d = (float *)out->data + (o * dim + k) * inner;
                const float *s = (const float *)in[0].data + (o * ni + j) * inner;
                for (int64_t t = 0; t < inner; t++) d[t] += s[t];
            } else if (out->dtype == CATTR_INT64) {
                int64_t *d = (int64_t *)out->data + (o * dim + k) * inner;
                const int64_t *s = (const int64_t *)in[0].data + (o * ni + j) * inner;
                for (int64_t t = 0; t < inner; t++) d[t] += s[t];
            } else {
                double *d = (double *)out->data + (o * dim + k) * inner;
                const double *s = (const double *)in[0].data + (o * ni + j) * inner;
                for (int64_t t = 0; t < inner; t++) d[t] += s[t];
            }
        }
    return CATTR_OK;
}

/* Slice: (X) -> Y ; SliceGrad: (gY, X) -> zeros of X's shape with gY in the slice. */
static cattr_status k_slice(const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_SLICE_GRAD;
    const cx_view *big = grad ? out : &in[0];
    const cx_view *small = grad ? &in[0] : out;
    int nd = big->ndim;
    size_t es = cattr_dtype_size(out->dtype);
    int64_t st[CATTR_MAX_DIMS], sp[CATTR_MAX_DIMS], cnt[CATTR_MAX_DIMS], str[CATTR_MAX_DIMS], r = 1;
    cx_slice_resolve(&n->a, nd, big->shape, st, sp, cnt);
    for (int d = nd - 1; d >= 0; d--) {
        str[d] = r;
        r *= big->shape[d];
    }
    if (grad) memset(out->data, 0, (size_t)cx_view_numel(out) * es);
    int64_t total = cx_view_numel(small);
    /* one copy per run of elements: along the last dim when it is taken with step 1 (whole rows of the slice), else
     * element by element; `top` dims index the runs */
    bool rows = nd >= 1 && sp[nd - 1] == 1 && cnt[nd - 1] > 0;
    int64_t run = rows ? cnt[nd - 1] : 1, runs = total / run;
    int top = rows ? nd - 1 : nd;
    size_t rb = (size_t)run * es;
    PAR_FOR(total > (1 << 18), /* the runs are disjoint: threads copy them independently */
    for (int64_t i = 0; i < runs; i++) {
        int64_t rem = i, off = rows ? st[nd - 1] : 0;
        for (int d = top - 1; d >= 0; d--) {
            off += (st[d] + (rem % cnt[d]) * sp[d]) * str[d];
            rem /= cnt[d];
        }
        if (grad) memcpy((char *)out->data + (size_t)off * es, (const char *)in[0].data + (size_t)i * rb, rb);
        else memcpy((char *)out->data + (size_t)i * rb, (const char *)in[0].data + (size_t)off * es, rb);
    });
    return CATTR_OK;
}

/* SeqPick: (X [S, L, C], pos [S] or [S, P]) -> [S, P, C], row (s, p) = X[s, pos[s, p]]; SeqPickGrad: (gY, pos, X)
 * -> zeros with gY's rows added at the positions (a position picked twice receives both). */
static cattr_status k_seq_pick(const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_SEQ_PICK_GRAD;
    const cx_view *big = grad ? out : &in[0];
    const int64_t *pos = in[1].data;
    int64_t S = big->shape[0], L = big->shape[1], C = big->shape[2], P = in[1].ndim == 2 ? in[1].shape[1] : 1;
    size_t row = (size_t)C * cattr_dtype_size(out->dtype);
    for (int64_t i = 0; i < S * P; i++)
        if (pos[i] < 0 || pos[i] >= L)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "node '%s': position %lld outside 0..%lld", n->name,
                           (long long)pos[i], (long long)(L - 1));
    if (grad) memset(out->data, 0, (size_t)(S * L) * row);
    for (int64_t i = 0; i < S * P; i++) {
        int64_t s = i / P;
        char *big_row = (char *)big->data + (size_t)(s * L + pos[i]) * row;
        const char *g = (const char *)in[0].data + (size_t)i * row;
        if (!grad) {
            memcpy((char *)out->data + (size_t)i * row, big_row, row);
        } else if (out->dtype == CATTR_FLOAT64) {
            for (int64_t c = 0; c < C; c++) ((double *)(void *)big_row)[c] += ((const double *)(const void *)g)[c];
        } else if (out->dtype == CATTR_INT64) {
            for (int64_t c = 0; c < C; c++) ((int64_t *)(void *)big_row)[c] += ((const int64_t *)(const void *)g)[c];
        } else {
            for (int64_t c = 0; c < C; c++) ((float *)(void *)big_row)[c] += ((const float *)(const void *)g)[c];
        }
    }
    return CATTR_OK;
}

/* WhereId: (A, B, M, id) -> M[r, ...] == id[r] ? B : A over M's shape (index 1: M[r, ...] <= id[r]), A and B broadcast (a selection: no arithmetic,
 * so one byte-wise kernel serves both float dtypes). A and B are each read as a whole tensor of M's shape, one value
 * per row ([R, 1, ...]), one value, or (any other broadcast) through strides. Rows run in parallel. */
enum { WI_FULL, WI_ROW, WI_ONE, WI_STRIDED };
static int where_kind(const cx_view *v, const cx_view *m) {
    int64_t nv = cx_view_numel(v), R = m->shape[0];
    if (cx_shape_eq(v->ndim, v->shape, m->ndim, m->shape)) return WI_FULL;
    if (nv == 1) return WI_ONE;
    if (v->ndim == m->ndim && v->shape[0] == R && nv == R) return WI_ROW;
    return WI_STRIDED;
}
/* one row of WhereId with row maps: a branch-free select the vectoriser takes */
CX_CLONES static void where_row_4(void *o, const void *a, const void *b, const int64_t *m, int64_t id, int64_t n) {
    uint32_t *y = o;
    const uint32_t *x0 = a, *x1 = b;
    for (int64_t k = 0; k < n; k++) y[k] = m[k] == id ? x1[k] : x0[k];
}
CX_CLONES static void where_row_8(void *o, const void *a, const void *b, const int64_t *m, int64_t id, int64_t n) {
    uint64_t *y = o;
    const uint64_t *x0 = a, *x1 = b;
    for (int64_t k = 0; k < n; k++) y[k] = m[k] == id ? x1[k] : x0[k];
}
/* the same with M <= id (WhereId index 1: the Shapley methods' "features added so far") */
CX_CLONES static void where_le_row_4(void *o, const void *a, const void *b, const int64_t *m, int64_t id, int64_t n) {
    uint32_t *y = o;
    const uint32_t *x0 = a, *x1 = b;
    for (int64_t k = 0; k < n; k++) y[k] = m[k] <= id ? x1[k] : x0[k];
}
CX_CLONES static void where_le_row_8(void *o, const void *a, const void *b, const int64_t *m, int64_t id, int64_t n) {
    uint64_t *y = o;
    const uint64_t *x0 = a, *x1 = b;
    for (int64_t k = 0; k < n; k++) y[k] = m[k] <= id ? x1[k] : x0[k];
}

static cattr_status k_where_id(const cg_node *n, const cx_view *in, cx_view *out) {
    const cx_view *m = &in[2];
    size_t es = cattr_dtype_size(out->dtype);
    const int64_t *id = in[3].data;
    int64_t R = out->shape[0], per = R ? cx_view_numel(out) / R : 0;
    bool le = n->a.index == 1;
    if (n->n_in > 4) { /* row maps: row r of A, B and M at arow[r], brow[r], mrow[r] (each row of the row shape) */
        const int64_t *map[3];
        for (int k = 0; k < 3; k++) map[k] = n->n_in > 4 + k ? in[4 + k].data : NULL;
        const int64_t *mv = m->data;
        for (int64_t r = 0; r < R; r++) {
            int64_t ra = map[0] ? map[0][r] : r, rb = map[1] ? map[1][r] : r, rm = map[2] ? map[2][r] : r;
            if (ra < 0 || ra >= in[0].shape[0] || rb < 0 || rb >= in[1].shape[0] || rm < 0 || rm >= m->shape[0])
                return cx_fail(CATTR_ERR_SHAPE, "node '%s' (op WhereId): row map out of range at row %lld", n->name,
                               (long long)r);
        }
        PAR_FOR(cx_view_numel(out) > (1 << 16),
        for (int64_t r = 0; r < R; r++) {
            int64_t ra = map[0] ? map[0][r] : r, rb = map[1] ? map[1][r] : r, rm = map[2] ? map[2][r] : r;
            const char *a = (const char *)in[0].data + (size_t)(ra * per) * es;
            const char *b = (const char *)in[1].data + (size_t)(rb * per) * es;
            const int64_t *mr = mv + rm * per;
            char *o = (char *)out->data + (size_t)(r * per) * es;
            if (le) {
                if (es == 4) where_le_row_4(o, a, b, mr, id[r], per);
                else where_le_row_8(o, a, b, mr, id[r], per);
            } else if (es == 4) {
                where_row_4(o, a, b, mr, id[r], per);
            } else {
                where_row_8(o, a, b, mr, id[r], per);
            }
        });
        return CATTR_OK;
    }
    int nd = m->ndim;
    int kind[2] = {where_kind(&in[0], m), where_kind(&in[1], m)};
    int64_t st[2][CATTR_MAX_DIMS]; /* element strides of A and B along M's dims (0 where broadcast) */
    for (int k = 0; k < 2; k++) {
        int64_t r = 1;
        for (int d = nd - 1; d >= 0; d--) {
            int dk = d - (nd - in[k].ndim);
            int64_t size = dk >= 0 ? in[k].shape[dk] : 1;
            st[k][d] = size == 1 ? 0 : r;
            r *= size;
        }
    }
    const int64_t *mv = m->data;
    PAR_FOR(cx_view_numel(m) > (1 << 16),
    for (int64_t r = 0; r < R; r++) {
        for (int64_t k = 0; k < per; k++) {
            int64_t i = r * per + k;
            int pick = le ? mv[i] <= id[r] : mv[i] == id[r];
            int64_t off;
            switch (kind[pick]) {
            case WI_FULL: off = i; break;
            case WI_ROW: off = r; break;
            case WI_ONE: off = 0; break;
            default: {
                int64_t rem = i;
                off = 0;
                for (int d = nd - 1; d >= 0; d--) {
                    off += (rem % m->shape[d]) * st[pick][d];
                    rem /= m->shape[d];
                }
            }
            }
            memcpy((char *)out->data + (size_t)i * es, (const char *)in[pick].data + (size_t)off * es, es);
        }
    });
    return CATTR_OK;
}

/* PlaceRows: (acc [B, ...], v [R], ord [1 or B, ...], q0) -> acc with element (b, k) taken from
 * v[(ord[b, k] - q0) * B + b] where that state is among the R / B of v. */
static cattr_status k_place_rows(const cg_node *n, const cx_view *in, cx_view *out) {
    (void)n;
    size_t es = cattr_dtype_size(out->dtype);
    int64_t B = out->shape[0], per = B ? cx_view_numel(out) / B : 0, S = B ? in[1].shape[0] / B : 0;
    int64_t q0 = ((const int64_t *)in[3].data)[0], orows = in[2].shape[0];
    const int64_t *ord = in[2].data;
    if (out->data != in[0].data) memcpy(out->data, in[0].data, (size_t)cx_view_numel(out) * es);
    for (int64_t b = 0; b < B; b++) {
        const int64_t *o = ord + (orows == 1 ? 0 : b) * per;
        for (int64_t k = 0; k < per; k++) {
            int64_t j = o[k] - q0;
            if (j >= 0 && j < S)
                memcpy((char *)out->data + (size_t)(b * per + k) * es, (const char *)in[1].data + (size_t)(j * B + b) * es, es);
        }
    }
    return CATTR_OK;
}

/* ---- dispatch --------------------------------------------------------------------------------------------- */

#define DISPATCH(fn, ...) (f64 ? fn##_f64(__VA_ARGS__) : fn##_f32(__VA_ARGS__))

/* Shape: X's dims as int64; Cast: between float32, float64 and int64 (to int64 truncating toward zero). */
static cattr_status k_shape_cast(const cg_node *n, const cx_view *in, cx_view *out) {
    if (n->op == CG_SHAPE && n->a.index == 1) { /* Size */
        *(int64_t *)out->data = cx_view_numel(&in[0]);
        return CATTR_OK;
    }
    if (n->op == CG_SHAPE) {
        int64_t lo = n->a.n_ints > 0 ? n->a.ints[0] : 0;
        if (lo < 0) lo += in[0].ndim;
        if (lo < 0) lo = 0;
        for (int64_t k = 0; k < out->shape[0]; k++) ((int64_t *)out->data)[k] = in[0].shape[lo + k];
        return CATTR_OK;
    }
    int64_t cnt = cx_view_numel(out);
    for (int64_t k = 0; k < cnt; k++) {
        double v = in[0].dtype == CATTR_INT64 ? (double)((const int64_t *)in[0].data)[k]
                   : in[0].dtype == CATTR_FLOAT64 ? ((const double *)in[0].data)[k] : ((const float *)in[0].data)[k];
        if (out->dtype == CATTR_INT64) {
            ((int64_t *)out->data)[k] = in[0].dtype == CATTR_INT64 ? ((const int64_t *)in[0].data)[k] : (int64_t)v;
        } else if (out->dtype == CATTR_FLOAT64) {
            ((double *)out->data)[k] = v;
        } else {
            ((float *)out->data)[k] = (float)v;
        }
    }
    return CATTR_OK;
}

/* ConstantOfShape, Equal, Where, Expand: any dtype, element by element (numpy broadcasting). */
static double elem_as_double(const cx_view *v, int64_t i) {
    return v->dtype == CATTR_INT64 ? (double)((const int64_t *)v->data)[i]
           : v->dtype == CATTR_FLOAT64 ? ((const double *)v->data)[i] : ((const float *)v->data)[i];
}

static cattr_status k_select_ops(const cg_node *n, const cx_view *in, cx_view *out) {
    int64_t cnt = cx_view_numel(out), c[CATTR_MAX_DIMS];
    size_t es = cattr_dtype_size(out->dtype);
    for (int64_t i = 0; i < cnt; i++) {
        int64_t rem = i;
        for (int d = out->ndim - 1; d >= 0; d--) {
            c[d] = rem % out->shape[d];
            rem /= out->shape[d];
        }
        switch (n->op) {
        case CG_CONSTANT_OF_SHAPE:
            if (out->dtype == CATTR_INT64) ((int64_t *)out->data)[i] = (int64_t)n->a.alpha;
            else if (out->dtype == CATTR_FLOAT64) ((double *)out->data)[i] = n->a.alpha;
            else ((float *)out->data)[i] = (float)n->a.alpha;
            break;
        case CG_EQUAL:
            ((int64_t *)out->data)[i] =
                cx_compare((int)n->a.index, elem_as_double(&in[0], cx_bcast_at(out->ndim, c, in[0].ndim, in[0].shape)),
                           elem_as_double(&in[1], cx_bcast_at(out->ndim, c, in[1].ndim, in[1].shape)));
            break;
        case CG_WHERE: {
            bool take = ((const int64_t *)in[0].data)[cx_bcast_at(out->ndim, c, in[0].ndim, in[0].shape)] != 0;
            const cx_view *src = take ? &in[1] : &in[2];
            memcpy((char *)out->data + (size_t)i * es,
                   (const char *)src->data + (size_t)cx_bcast_at(out->ndim, c, src->ndim, src->shape) * es, es);
            break;
        }
        case CG_TILE: {
            int64_t at = 0;
            for (int d = 0; d < out->ndim; d++) at = at * in[0].shape[d] + c[d] % in[0].shape[d];
            memcpy((char *)out->data + (size_t)i * es, (const char *)in[0].data + (size_t)at * es, es);
            break;
        }
        default: /* Expand */
            memcpy((char *)out->data + (size_t)i * es,
                   (const char *)in[0].data + (size_t)cx_bcast_at(out->ndim, c, in[0].ndim, in[0].shape) * es, es);
            break;
        }
    }
    return CATTR_OK;
}

/* Mod (float or int64, broadcast), Range (int64 from its folded start and delta), ScatterND (any dtype). */
/* NormalNoise: element k of row r is float32(sd * float32(N(seed, S[r], I[r] + k))), each a pure function of its
 * coordinates, so the rows run in parallel. */
static cattr_status k_normal_noise(const cg_node *n, const cx_view *in, cx_view *out) {
    const int64_t *st = in[0].data, *first = in[1].data;
    int64_t R = out->shape[0], per = R ? cx_view_numel(out) / R : 0;
    uint64_t seed = (uint64_t)n->a.axis;
    float sd = (float)n->a.alpha;
    bool f64 = out->dtype == CATTR_FLOAT64;
    PAR_FOR(R * per > (1 << 14),
    for (int64_t r = 0; r < R; r++)
        for (int64_t k = 0; k < per; k++) {
            float v = sd == 0 ? 0.0f : (float)((double)sd * (double)(float)cx_rng_normal_at(seed, (uint64_t)st[r],
                                                                                             (uint64_t)(first[r] + k)));
            if (f64) ((double *)out->data)[r * per + k] = v;
            else ((float *)out->data)[r * per + k] = v;
        });
    return CATTR_OK;
}

/* LimeSimilarity: one weight per row pair, the rows in parallel. */
static cattr_status k_lime_similarity(const cg_node *n, const cx_view *in, cx_view *out) {
    int64_t R = in[0].shape[0], m = in[0].shape[1];
    size_t es = cattr_dtype_size(in[0].dtype);
    PAR_FOR(R * m > (1 << 14),
    for (int64_t r = 0; r < R; r++) {
        double w = cx_lime_similarity((const char *)in[0].data + (size_t)(r * m) * es,
                                      (const char *)in[1].data + (size_t)(r * m) * es, in[0].dtype, m, n->a.alpha,
                                      n->a.index == 1);
        if (out->dtype == CATTR_FLOAT64) ((double *)out->data)[r] = w;
        else ((float *)out->data)[r] = (float)w;
    });
    return CATTR_OK;
}

static cattr_status k_index_ops(const cg_node *n, const cx_view *in, cx_view *out) {
    int64_t cnt = cx_view_numel(out), c[CATTR_MAX_DIMS];
    size_t es = cattr_dtype_size(out->dtype);
    if (n->op == CG_RANGE) {
        for (int64_t k = 0; k < cnt; k++) ((int64_t *)out->data)[k] = cx_range_at(n->a.ints[0], n->a.ints[2], k);
        return CATTR_OK;
    }
    if (n->op != CG_SCATTER_ND) { /* Mod, and Add / Sub / Mul / Div on int64 */
        int fm = (int)n->a.index;
        for (int64_t i = 0; i < cnt; i++) {
            int64_t rem = i;
            for (int d = out->ndim - 1; d >= 0; d--) {
                c[d] = rem % out->shape[d];
                rem /= out->shape[d];
            }
            int64_t ia = cx_bcast_at(out->ndim, c, in[0].ndim, in[0].shape), ib = cx_bcast_at(out->ndim, c, in[1].ndim, in[1].shape);
            if (out->dtype == CATTR_INT64 && n->op != CG_MOD)
                ((int64_t *)out->data)[i] = cx_int_binary(n->op, ((const int64_t *)in[0].data)[ia], ((const int64_t *)in[1].data)[ib]);
            else if (out->dtype == CATTR_INT64)
                ((int64_t *)out->data)[i] = cx_mod_i(((const int64_t *)in[0].data)[ia], ((const int64_t *)in[1].data)[ib], fm);
            else if (out->dtype == CATTR_FLOAT64)
                ((double *)out->data)[i] = cx_mod_f(((const double *)in[0].data)[ia], ((const double *)in[1].data)[ib], fm);
            else
                ((float *)out->data)[i] = (float)cx_mod_f(((const float *)in[0].data)[ia], ((const float *)in[1].data)[ib], fm);
        }
        return CATTR_OK;
    }
    /* ScatterND: the data, then each index tuple's slice replaced by its updates */
    const cx_view *ix = &in[1];
    int k = (int)ix->shape[ix->ndim - 1];
    int64_t tuples = cx_numel(ix->ndim - 1, ix->shape), slice = cx_numel(out->ndim - k, out->shape + k);
    memcpy(out->data, in[0].data, (size_t)cnt * es);
    for (int64_t t = 0; t < tuples; t++) {
        int64_t at = 0;
        for (int j = 0; j < k; j++) {
            int64_t v = ((const int64_t *)ix->data)[t * k + j], dim = out->shape[j];
            if (v < 0) v += dim;
            if (v < 0 || v >= dim)
                return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "node '%s' (op ScatterND): index %lld is out of range for dim %d of size %lld",
                               n->name, (long long)((const int64_t *)ix->data)[t * k + j], j, (long long)dim);
            at = at * dim + v;
        }
        memcpy((char *)out->data + (size_t)(at * slice) * es, (const char *)in[2].data + (size_t)(t * slice) * es,
               (size_t)slice * es);
    }
    return CATTR_OK;
}

static cattr_status cpu_run_op(void *ctx, const cg_node *n, const cx_view *in, cx_view *out) {
    (void)ctx;
    bool f64 = out->dtype == CATTR_FLOAT64;
    bool flt = out->dtype != CATTR_INT64;
    switch (n->op) {
    case CG_IDENTITY: case CG_RESHAPE: case CG_FLATTEN: case CG_UNSQUEEZE: case CG_SQUEEZE: case CG_RESHAPE_LIKE:
        return k_copy(&in[0], out);
    case CG_TRANSPOSE: return k_transpose(n, &in[0], out);
    case CG_CONCAT: return k_concat(n, in, out);
    case CG_CONCAT_GRAD: return k_concat_grad(n, in, out);
    case CG_GATHER: case CG_GATHER_GRAD: return k_gather(n, in, out);
    case CG_SLICE: case CG_SLICE_GRAD: return k_slice(n, in, out);
    case CG_SEQ_PICK: case CG_SEQ_PICK_GRAD: return k_seq_pick(n, in, out);
    case CG_WHERE_ID: return k_where_id(n, in, out);
    case CG_PLACE_ROWS: return k_place_rows(n, in, out);
    case CG_SHAPE: case CG_CAST: return k_shape_cast(n, in, out);
    case CG_CONSTANT_OF_SHAPE: case CG_EQUAL: case CG_WHERE: case CG_EXPAND: case CG_TILE:
        return k_select_ops(n, in, out);
    case CG_MOD: case CG_RANGE: case CG_SCATTER_ND: return k_index_ops(n, in, out);
    case CG_NORMAL_NOISE: return k_normal_noise(n, in, out);
    case CG_LIME_SIMILARITY: return k_lime_similarity(n, in, out);
    case CG_HOST_CALL: return cx_check_run_op(n, in, out); /* the host function on views of this memory (no copy) */
    case CG_IF: { /* the branch taken, or zeros for an absent one */
        int j = elem_as_double(&in[0], 0) != 0 ? 1 : 2;
        size_t bytes = (size_t)cx_view_numel(out) * cattr_dtype_size(out->dtype);
        if (n->in[j] < 0) memset(out->data, 0, bytes);
        else if (bytes && out->data != in[j].data) memmove(out->data, in[j].data, bytes);
        return CATTR_OK;
    }
    case CG_ADD: case CG_SUB: case CG_MUL: case CG_DIV:
        if (!flt) { /* int64, with the planner's fused ReLU (a model of integers) */
            cattr_status st = k_index_ops(n, in, out);
            int64_t *y = out->data;
            for (int64_t i = 0; st == CATTR_OK && n->a.fuse_relu && i < cx_view_numel(out); i++) y[i] = y[i] < 0 ? 0 : y[i];
            return st;
        }
        break;
    case CG_RELU: case CG_NEG: case CG_ABS:
        if (!flt) { /* a model of integers (the perturbation methods' int64 inputs) */
            const int64_t *x = in[0].data;
            int64_t *y = out->data;
            for (int64_t i = 0; i < cx_view_numel(out); i++)
                y[i] = n->op == CG_RELU ? (x[i] > 0 ? x[i] : 0) : n->op == CG_NEG ? -x[i] : (x[i] < 0 ? -x[i] : x[i]);
            return CATTR_OK;
        }
        break;
    default: break;
    }
    if (!flt)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "node '%s' (op %s): int64 data is not supported by this op", n->name,
                       cg_op_names[n->op]);
    switch (n->op) {
    case CG_RELU: case CG_LEAKYRELU: case CG_SIGMOID: case CG_TANH: case CG_CLIP: case CG_NEG: case CG_ZEROS_LIKE:
    case CG_ABS:
        return DISPATCH(unary, n, in, out);
    case CG_RELU_GRAD: case CG_LEAKYRELU_GRAD: case CG_SIGMOID_GRAD: case CG_TANH_GRAD: case CG_CLIP_GRAD:
    case CG_ABS_GRAD:
        return DISPATCH(unary_grad, n, in, out);
    case CG_ADD: case CG_SUB: case CG_MUL: case CG_DIV: {
        cattr_status st = DISPATCH(binary, n, in, out);
        if (st == CATTR_OK && n->a.fuse_relu) DISPATCH(relu_inplace, out->data, cx_view_numel(out));
        return st;
    }
    case CG_REDUCE_SUM_LIKE: return DISPATCH(reduce_sum_like, n, in, out);
    case CG_REDUCE_SUM: case CG_REDUCE_MEAN: case CG_REDUCE_GRAD: return DISPATCH(reduce, n, in, out);
    case CG_TORCH_SUM: return DISPATCH(torch_sum, n, in, out);
    case CG_SQRT: case CG_EXP: case CG_LOG: case CG_ERF: case CG_RECIPROCAL: case CG_HARDSIGMOID: case CG_HARDSWISH:
    case CG_SOFTPLUS: case CG_ELU: case CG_SELU: case CG_GELU:
        return DISPATCH(ew_unary, n, in, out);
    case CG_UNARY_GRAD: return DISPATCH(ew_unary_grad, n, in, out);
    case CG_POW: case CG_MAX: case CG_MIN: case CG_BINARY_GRAD: return DISPATCH(ew_binary, n, in, out);
    case CG_PAD: case CG_PAD_GRAD: return DISPATCH(pad, n, in, out);
    case CG_RNN: case CG_RNN_GRAD: return DISPATCH(rnn, n, in, out);
    case CG_TILE_GRAD: return DISPATCH(tile_grad, n, in, out);
    case CG_RESIZE: case CG_RESIZE_GRAD: return DISPATCH(resize, n, in, out);
    case CG_REDUCE_MAX: case CG_REDUCE_MIN: case CG_REDUCE_EXT_GRAD: return DISPATCH(reduce_ext, n, in, out);
    case CG_GEMM: case CG_MATMUL: {
        cattr_status st = n->op == CG_GEMM ? DISPATCH(gemm, n, in, out) : DISPATCH(matmul, n, in, out);
        if (st == CATTR_OK && n->a.fuse_relu) DISPATCH(relu_inplace, out->data, cx_view_numel(out));
        return st;
    }
    case CG_CONV: return DISPATCH(conv, n, in, out);
    case CG_CONV_GRAD_INPUT: return DISPATCH(conv_grad_input, n, in, out);
    case CG_MAXPOOL: case CG_AVGPOOL: return DISPATCH(pool, n, in, out, NULL);
    case CG_MAXPOOL_GRAD: case CG_AVGPOOL_GRAD: return DISPATCH(pool, n, in, out, &in[1]);
    case CG_GLOBALAVGPOOL: case CG_GAP_GRAD: return DISPATCH(global_avgpool, n, in, out);
    case CG_SOFTMAX: return DISPATCH(softmax, n, in, out);
    case CG_SOFTMAX_GRAD: return DISPATCH(softmax_grad, n, in, out);
    case CG_BATCHNORM: case CG_BATCHNORM_GRAD: return DISPATCH(batchnorm, n, in, out);
    case CG_RMSNORM: return DISPATCH(rmsnorm, n, in, out);
    case CG_SWIGLU: case CG_SWIGLU_GRAD: return DISPATCH(swiglu, n, in, out);
    case CG_RMSNORM_GRAD: return DISPATCH(rmsnorm_grad, n, in, out);
    case CG_ROPE: return DISPATCH(rope, n, in, out);
    case CG_ATTENTION: return DISPATCH(attention, n, in, out);
    case CG_ATTENTION_GRAD: return DISPATCH(attention_grad, n, in, out);
    case CG_LOGSOFTMAX: return DISPATCH(logsoftmax, n, in, out);
    case CG_LOGSOFTMAX_GRAD: return DISPATCH(logsoftmax_grad, n, in, out);
    case CG_DL_DELTA: return DISPATCH(dl_delta, n, in, out);
    case CG_DL_RESCALE: return DISPATCH(dl_rescale, n, in, out);
    case CG_DL_CENTER: return DISPATCH(dl_center, n, in, out);
    case CG_DL_MAXPOOL: return DISPATCH(dl_maxpool, n, in, out);
    case CG_LRP_DIV: return DISPATCH(lrp_div, n, in, out);
    default: break;
    }
    return cx_fail(CATTR_ERR_UNSUPPORTED, "node '%s': the CPU backend has no kernel for op %s", n->name,
                   cg_op_names[n->op]);
}

/* ---- memory ----------------------------------------------------------------------------------------------- */

static _Atomic size_t g_cur, g_peak;

static void *cpu_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    void *p = cx_malloc(bytes ? bytes : 64); /* 64-byte aligned; huge-page advice from 2 MiB */
    if (!p) return NULL;
    size_t cur = atomic_fetch_add(&g_cur, bytes) + bytes;
    size_t pk = atomic_load(&g_peak);
    while (cur > pk && !atomic_compare_exchange_weak(&g_peak, &pk, cur)) {
    }
    return p;
}

static void cpu_free(void *ctx, void *p, size_t bytes) {
    (void)ctx;
    if (!p) return;
    atomic_fetch_sub(&g_cur, bytes);
    free(p);
}

static cattr_status cpu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    if (bytes) memcpy(dst, src, bytes);
    return CATTR_OK;
}

static cattr_status cpu_zero(void *ctx, void *dst, size_t bytes) {
    (void)ctx;
    if (bytes) memset(dst, 0, bytes);
    return CATTR_OK;
}

static cattr_status cpu_sync(void *ctx) {
    (void)ctx;
    return CATTR_OK;
}
static size_t cpu_peak(void *ctx) {
    (void)ctx;
    return atomic_load(&g_peak);
}
static void cpu_reset_peak(void *ctx) {
    (void)ctx;
    atomic_store(&g_peak, atomic_load(&g_cur));
}
static bool cpu_supports(void *ctx, cg_op op, cattr_dtype dtype) {
    (void)ctx;
    (void)dtype;
    return op < CG_OP_COUNT && !cx_op_run_by_executor(op);
}

static bool cpu_has_cap(void *ctx, cx_cap cap) {
    (void)ctx;
    return (cap == CX_CAP_BF16_GEMM && cx_bf16_available()) || cap == CX_CAP_STORED_WEIGHTS;
}
static void cpu_forget_host(void *ctx, const void *host) {
    (void)ctx;
    cx_bf16_release(host);
}

static cx_backend g_cpu = {
    .version = CX_BACKEND_VERSION,
    .name = "cpu",
    .ctx = NULL,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_in = cpu_copy,
    .copy_out = cpu_copy,
    .memset_zero = cpu_zero,
    .copy_dev = cpu_copy,
    .run_op = cpu_run_op,
    .synchronize = cpu_sync,
    .peak_memory = cpu_peak,
    .reset_peak = cpu_reset_peak,
    .supports_op = cpu_supports,
    .host_memory = true,
    .has_cap = cpu_has_cap,
    .forget_host = cpu_forget_host,
};

cx_backend *cx_backend_cpu_get(void) {
    cx_cpu_blas_init();
    return &g_cpu;
}
