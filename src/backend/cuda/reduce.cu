/* reduce.cu - the CUDA backend's reductions: ReduceSum / ReduceMean and their gradient, ReduceSumLike, TorchSum (torch's
 * CPU summation order, torch_sum_impl.h), Softmax, LogSoftmax and RMSNorm with their gradients. Rows of contiguous
 * elements (Softmax over the last axes, LogSoftmax, RMSNorm, a ReduceSum of the trailing axes) run a block per row
 * in the tensors' dtype (warp-shuffle sums: cu.h's cu_blocks); the other forms one thread per output, summing in
 * double in the reference kernels' order, as TorchSum keeps torch's. */
#include "backend/cuda/cu.h"

extern "C" {
#include "ops/ops.h"
}

/* A column of a [outer, m, per] view: element i of column (o, k) is v[(o m + i) per + k]. */
typedef struct ts_col {
    dv v;
    int64_t base, per;
} ts_col;
static inline CX_HD double ts_col_get(const ts_col &s, int64_t i) { return ld(s.v, s.base + i * s.per); }
#define TS_SRC ts_col
#define TS_GET(src, i) ts_col_get((src), (i))
#include "ops/torch_sum_impl.h"

/* The kept / reduced split of a reduction over a rank-nd input: kept dims keep their size, reduced ones size 1 (ksh),
 * and the reduced dims' sizes in rsh (kept ones 1). */
typedef struct rsplit {
    int nd;
    int64_t sh[CATTR_MAX_DIMS], ksh[CATTR_MAX_DIMS], rsh[CATTR_MAX_DIMS], cnt;
} rsplit;

static bool rsplit_of(const cg_attrs *a, const cx_view *x, rsplit *r) {
    bool red[CATTR_MAX_DIMS];
    if (!cx_reduce_axes(a, x->ndim, red)) return false;
    r->nd = x->ndim;
    r->cnt = 1;
    for (int d = 0; d < CATTR_MAX_DIMS; d++) {
        bool rr = d < x->ndim && red[d];
        r->sh[d] = d < x->ndim ? x->shape[d] : 1;
        r->ksh[d] = rr ? 1 : r->sh[d];
        r->rsh[d] = rr ? r->sh[d] : 1;
        if (rr) r->cnt *= r->sh[d];
    }
    return true;
}

/* ---- rows: a block per row of D contiguous elements (cu.h's cu_blocks), in the tensors' dtype ----------------- */

/* Softmax / LogSoftmax of x's rows, or (g given) their gradients from the output y... here x is Y: Softmax's
 * gradient Y (gY - sum(gY Y)), LogSoftmax's gY - exp(Y) sum(gY). */
template <class T> static cattr_status softmax_rows(cu_ctx *c, int64_t rows, int64_t D, bool log, const T *x,
                                                    const T *g, T *y) {
    return cu_blocks(c, rows, 0, CU_BLK_FN {
        const T *xr = x + blk.b * D, *gr = g ? g + blk.b * D : NULL;
        T *yr = y + blk.b * D;
        if (gr && log) {
            T s = blk.template sum<T>(D, [&](int64_t k) { return gr[k]; });
            blk.each(D, [&](int64_t k) { yr[k] = gr[k] - (T)exp(xr[k]) * s; });
        } else if (gr) {
            T s = blk.template sum<T>(D, [&](int64_t k) { return gr[k] * xr[k]; });
            blk.each(D, [&](int64_t k) { yr[k] = xr[k] * (gr[k] - s); });
        } else {
            T mx = blk.template max<T>(D, [&](int64_t k) { return xr[k]; });
            T s = blk.template sum<T>(D, [&](int64_t k) { return (T)exp(xr[k] - mx); });
            if (log) blk.each(D, [&](int64_t k) { yr[k] = xr[k] - (mx + (T)::log(s)); });
            else blk.each(D, [&](int64_t k) { yr[k] = (T)exp(xr[k] - mx) / s; });
        }
        blk.count(D);
    });
}

/* RMSNorm (x, w) over rows of len(w), or its gradient (g: gY). */
template <class T> static cattr_status rmsnorm_rows(cu_ctx *c, int64_t rows, int64_t D, T eps, const T *x,
                                                    const T *w, const T *g, T *y) {
    return cu_blocks(c, rows, 0, CU_BLK_FN {
        const T *xr = x + blk.b * D, *gr = g ? g + blk.b * D : NULL;
        T *yr = y + blk.b * D;
        T ss = blk.template sum<T>(D, [&](int64_t k) { return xr[k] * xr[k]; });
        T rms = (T)sqrt(ss / (T)D + eps);
        if (gr) {
            T xwg = blk.template sum<T>(D, [&](int64_t k) { return xr[k] * w[k] * gr[k]; });
            blk.each(D, [&](int64_t k) { yr[k] = w[k] * gr[k] / rms - xr[k] * xwg / ((T)D * rms * rms * rms); });
        } else {
            blk.each(D, [&](int64_t k) { yr[k] = w[k] * (xr[k] / rms); });
        }
        blk.count(D);
    });
}

/* ReduceSum / ReduceMean of rows of cnt contiguous elements (the reduced axes trailing). */
template <class T> static cattr_status sum_rows(cu_ctx *c, int64_t rows, int64_t cnt, bool mean, const T *x, T *y) {
    return cu_blocks(c, rows, 0, CU_BLK_FN {
        const T *xr = x + blk.b * cnt;
        T s = blk.template sum<T>(cnt, [&](int64_t k) { return xr[k]; });
        blk.each(1, [&](int64_t) { y[blk.b] = mean ? s / (T)cnt : s; });
        blk.count(cnt);
    });
}

static cattr_status reduce(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_REDUCE_GRAD, mean = grad ? n->a.axis == 1 : n->op == CG_REDUCE_MEAN;
    const cx_view *xv = grad ? &in[1] : &in[0];
    rsplit r;
    if (!rsplit_of(&n->a, xv, &r)) return cx_fail(CATTR_ERR_SHAPE, "node '%s': reduction axis out of range", n->name);
    dv x = cu_dv(xv), y = cu_dv(out), g = grad ? cu_dv(&in[0]) : y;
    if (grad) {
        cu_each(c, cx_view_numel(xv), CU_FN {
            int64_t cc[CATTR_MAX_DIMS], o = 0;
            unrav(i, r.nd, r.sh, cc);
            for (int d = 0; d < r.nd; d++) o = o * r.ksh[d] + (r.ksh[d] == 1 ? 0 : cc[d]);
            double v = ld(g, o);
            sto(y, i, mean ? rd(y, v / (double)r.cnt) : v);
        });
        return CATTR_OK;
    }
    int64_t kept = cx_numel(r.nd, r.ksh);
    bool trailing = kept > 0 && r.cnt > 0, seen = false; /* every reduced dim after every kept one: rows */
    for (int d = 0; d < r.nd; d++)
        if (r.sh[d] != 1) {
            if (r.ksh[d] == 1) seen = true;
            else if (seen) trailing = false;
        }
    if (trailing)
        return y.dt == CATTR_FLOAT32 ? sum_rows(c, kept, r.cnt, mean, (const float *)x.p, (float *)y.p)
                                     : sum_rows(c, kept, r.cnt, mean, (const double *)x.p, (double *)y.p);
    cu_each(c, kept, CU_FN {
        int64_t kc[CATTR_MAX_DIMS], rc[CATTR_MAX_DIMS];
        unrav(i, r.nd, r.ksh, kc);
        double s = 0;
        for (int64_t j = 0; j < r.cnt; j++) { /* the reduced elements in row-major order, as the reference adds them */
            unrav(j, r.nd, r.rsh, rc);
            int64_t at = 0;
            for (int d = 0; d < r.nd; d++) at = at * r.sh[d] + (r.rsh[d] == 1 ? kc[d] : rc[d]);
            s += ld(x, at);
        }
        sto(y, i, mean ? rd(y, rd(y, s) / (double)r.cnt) : s);
    });
    return CATTR_OK;
}

/* ReduceSumLike (gY, X): each element of X's shape sums the gY elements that broadcast onto it. */
static void reduce_sum_like(cu_ctx *c, const cx_view *in, cx_view *out) {
    dv g = cu_dv(&in[0]), y = cu_dv(out);
    int nd = in[0].ndim, off = nd - out->ndim;
    int64_t rsh[CATTR_MAX_DIMS], cnt = 1; /* per gY dim: the extent summed (1 where kept) */
    for (int d = 0; d < nd; d++) {
        int64_t od = d >= off ? out->shape[d - off] : 1;
        rsh[d] = od == 1 ? in[0].shape[d] : 1;
        cnt *= rsh[d];
    }
    cu_each(c, cx_view_numel(out), CU_FN {
        int64_t oc[CATTR_MAX_DIMS], rc[CATTR_MAX_DIMS];
        unrav(i, y.nd, y.sh, oc);
        double s = 0;
        for (int64_t j = 0; j < cnt; j++) {
            unrav(j, nd, rsh, rc);
            int64_t at = 0;
            for (int d = 0; d < nd; d++) at = at * g.sh[d] + (d < off || y.sh[d - off] == 1 ? rc[d] : oc[d - off]);
            s += ld(g, at);
        }
        sto(y, i, s);
    });
}

static void torch_sum(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    const cx_view *x = &in[0];
    int ax = (int)(n->a.ints[0] < 0 ? n->a.ints[0] + x->ndim : n->a.ints[0]);
    int64_t m = x->shape[ax], per = cx_numel(x->ndim - ax - 1, x->shape + ax + 1);
    dv xv = cu_dv(x), y = cu_dv(out);
    cattr_dtype dt = x->dtype;
    cu_each(c, cx_view_numel(out), CU_FN {
        int64_t o = i / per, k = i % per;
        ts_col col = {xv, o * m * per + k, per};
        sto(y, i, ts_sum(dt, col, m, k, per));
    });
}

/* Softmax over [outer, len, inner] (legacy opset: every dim from the axis); its gradient Y (gY - sum(gY Y)). */
static cattr_status softmax_rows_of(cu_ctx *c, int64_t rows, int64_t D, bool log, const cx_view *in, bool grad,
                                    cx_view *out) {
    if (out->dtype == CATTR_FLOAT32)
        return softmax_rows(c, rows, D, log, (const float *)in[0].data, grad ? (const float *)in[1].data : NULL,
                            (float *)out->data);
    return softmax_rows(c, rows, D, log, (const double *)in[0].data, grad ? (const double *)in[1].data : NULL,
                        (double *)out->data);
}

static cattr_status softmax(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    int ax = (int)(n->a.axis < 0 ? n->a.axis + in[0].ndim : n->a.axis);
    int64_t outer = cx_numel(ax, in[0].shape);
    int64_t len = n->a.index == 1 ? cx_numel(in[0].ndim - ax, in[0].shape + ax) : in[0].shape[ax];
    int64_t inner = n->a.index == 1 ? 1 : cx_numel(in[0].ndim - ax - 1, in[0].shape + ax + 1);
    dv x = cu_dv(&in[0]), y = cu_dv(out), g = n->op == CG_SOFTMAX_GRAD ? cu_dv(&in[1]) : y;
    bool grad = n->op == CG_SOFTMAX_GRAD;
    if (inner == 1) return softmax_rows_of(c, outer, len, false, in, grad, out);
    cu_each(c, outer * inner, CU_FN {
        int64_t base = (i / inner) * len * inner + i % inner;
        if (grad) {
            double s = 0;
            for (int64_t j = 0; j < len; j++) s += ld(g, base + j * inner) * ld(x, base + j * inner);
            for (int64_t j = 0; j < len; j++) sto(y, base + j * inner, ld(x, base + j * inner) * (ld(g, base + j * inner) - s));
            return;
        }
        double mx = len > 0 ? ld(x, base) : 0, s = 0;
        for (int64_t j = 1; j < len; j++)
            if (ld(x, base + j * inner) > mx) mx = ld(x, base + j * inner);
        for (int64_t j = 0; j < len; j++) s += exp(ld(x, base + j * inner) - mx);
        for (int64_t j = 0; j < len; j++) sto(y, base + j * inner, exp(ld(x, base + j * inner) - mx) / s);
    });
    return CATTR_OK;
}

static cattr_status logsoftmax(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    int64_t D = in[0].shape[in[0].ndim - 1], rows = D ? cx_view_numel(&in[0]) / D : 0;
    return softmax_rows_of(c, rows, D, true, in, n->op == CG_LOGSOFTMAX_GRAD, out);
}

static cattr_status rmsnorm(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_RMSNORM_GRAD;
    int64_t D = cx_view_numel(&in[1]), rows = D ? cx_view_numel(&in[0]) / D : 0;
    if (out->dtype == CATTR_FLOAT32)
        return rmsnorm_rows(c, rows, D, (float)n->a.alpha, (const float *)in[0].data, (const float *)in[1].data,
                            grad ? (const float *)in[2].data : NULL, (float *)out->data);
    return rmsnorm_rows(c, rows, D, n->a.alpha, (const double *)in[0].data, (const double *)in[1].data,
                        grad ? (const double *)in[2].data : NULL, (double *)out->data);
}

cattr_status cu_run_reduce(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out, bool *done) {
    *done = out->dtype != CATTR_INT64;
    if (!*done) return CATTR_OK;
    switch (n->op) {
    case CG_REDUCE_SUM: case CG_REDUCE_MEAN: case CG_REDUCE_GRAD: return reduce(c, n, in, out);
    case CG_REDUCE_SUM_LIKE: reduce_sum_like(c, in, out); return CATTR_OK;
    case CG_TORCH_SUM: torch_sum(c, n, in, out); return CATTR_OK;
    case CG_SOFTMAX: case CG_SOFTMAX_GRAD: return softmax(c, n, in, out);
    case CG_LOGSOFTMAX: case CG_LOGSOFTMAX_GRAD: return logsoftmax(c, n, in, out);
    case CG_RMSNORM: case CG_RMSNORM_GRAD: return rmsnorm(c, n, in, out);
    default: break;
    }
    *done = false;
    return CATTR_OK;
}
