/* reduce.cu - the CUDA backend's reductions: ReduceSum / ReduceMean and their gradient, ReduceSumLike, TorchSum (torch's
 * CPU summation order, torch_sum_impl.h), Softmax, LogSoftmax and RMSNorm with their gradients. One thread per
 * output (or row), summing in double in the reference kernels' order. */
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
static void softmax(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    int ax = (int)(n->a.axis < 0 ? n->a.axis + in[0].ndim : n->a.axis);
    int64_t outer = cx_numel(ax, in[0].shape);
    int64_t len = n->a.index == 1 ? cx_numel(in[0].ndim - ax, in[0].shape + ax) : in[0].shape[ax];
    int64_t inner = n->a.index == 1 ? 1 : cx_numel(in[0].ndim - ax - 1, in[0].shape + ax + 1);
    dv x = cu_dv(&in[0]), y = cu_dv(out), g = n->op == CG_SOFTMAX_GRAD ? cu_dv(&in[1]) : y;
    bool grad = n->op == CG_SOFTMAX_GRAD;
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
}

static void logsoftmax(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    int64_t D = in[0].shape[in[0].ndim - 1], rows = D ? cx_view_numel(&in[0]) / D : 0;
    dv x = cu_dv(&in[0]), y = cu_dv(out), g = n->op == CG_LOGSOFTMAX_GRAD ? cu_dv(&in[1]) : y;
    bool grad = n->op == CG_LOGSOFTMAX_GRAD;
    cu_each(c, rows, CU_FN {
        int64_t b = i * D;
        if (grad) {
            double s = 0;
            for (int64_t j = 0; j < D; j++) s += ld(g, b + j);
            for (int64_t j = 0; j < D; j++) sto(y, b + j, ld(g, b + j) - exp(ld(x, b + j)) * s);
            return;
        }
        double mx = ld(x, b), s = 0;
        for (int64_t j = 1; j < D; j++)
            if (ld(x, b + j) > mx) mx = ld(x, b + j);
        for (int64_t j = 0; j < D; j++) s += exp(ld(x, b + j) - mx);
        for (int64_t j = 0; j < D; j++) sto(y, b + j, ld(x, b + j) - (mx + log(s)));
    });
}

static void rmsnorm(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_RMSNORM_GRAD;
    int64_t D = cx_view_numel(&in[1]), rows = D ? cx_view_numel(&in[0]) / D : 0;
    dv x = cu_dv(&in[0]), w = cu_dv(&in[1]), y = cu_dv(out), g = grad ? cu_dv(&in[2]) : y;
    double eps = rd(y, n->a.alpha);
    cu_each(c, rows, CU_FN {
        int64_t b = i * D;
        double ss = 0, xwg = 0;
        for (int64_t j = 0; j < D; j++) {
            double v = ld(x, b + j);
            ss += v * v;
            if (grad) xwg += v * ld(w, j) * ld(g, b + j);
        }
        double rms = sqrt(ss / (double)D + eps);
        for (int64_t j = 0; j < D; j++) {
            double v = ld(x, b + j), wv = ld(w, j);
            if (grad) sto(y, b + j, wv * ld(g, b + j) / rms - v * xwg / ((double)D * rms * rms * rms));
            else sto(y, b + j, wv * (v / rms));
        }
    });
}

cattr_status cu_run_reduce(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out, bool *done) {
    *done = out->dtype != CATTR_INT64;
    if (!*done) return CATTR_OK;
    switch (n->op) {
    case CG_REDUCE_SUM: case CG_REDUCE_MEAN: case CG_REDUCE_GRAD: return reduce(c, n, in, out);
    case CG_REDUCE_SUM_LIKE: reduce_sum_like(c, in, out); return CATTR_OK;
    case CG_TORCH_SUM: torch_sum(c, n, in, out); return CATTR_OK;
    case CG_SOFTMAX: case CG_SOFTMAX_GRAD: softmax(c, n, in, out); return CATTR_OK;
    case CG_LOGSOFTMAX: case CG_LOGSOFTMAX_GRAD: logsoftmax(c, n, in, out); return CATTR_OK;
    case CG_RMSNORM: case CG_RMSNORM_GRAD: rmsnorm(c, n, in, out); return CATTR_OK;
    default: break;
    }
    *done = false;
    return CATTR_OK;
}
