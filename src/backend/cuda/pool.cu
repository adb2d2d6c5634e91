/* pool.cu - the CUDA backend's pooling and normalisation: MaxPool / AveragePool and their gradients (each input
 * element gathers the windows that hold it: deterministic, no atomics), GlobalAveragePool and its gradient,
 * BatchNormalization and its gradient. The window scans follow the reference kernels (check_kernels.c). */
#include "backend/cuda/cu.h"

extern "C" {
#include "ops/ops.h"
}

typedef struct pgeo {
    cu_win w;
    int64_t planes, in[3], out[3], k[3], s[3], d[3], pb[3], pe[3], isp, osp;
    int include_pad;
} pgeo;

static pgeo pgeo_of(const cg_node *n, const cx_view *x) {
    cx_geom g;
    cx_geom_init(&g, &n->a, x->shape, x->ndim, NULL);
    pgeo r;
    r.w = cu_win_of(&g);
    r.planes = g.n * g.c_in;
    for (int d = 0; d < 3; d++) {
        r.in[d] = g.in[d], r.out[d] = g.out[d], r.k[d] = g.k[d], r.s[d] = g.s[d], r.d[d] = g.d[d];
        r.pb[d] = g.pb[d], r.pe[d] = g.pe[d];
    }
    r.isp = r.in[0] * r.in[1] * r.in[2];
    r.osp = r.out[0] * r.out[1] * r.out[2];
    r.include_pad = n->a.count_include_pad;
    return r;
}

/* The window of output o (plane p): its first maximum's flat index (-1 when it holds no input element), its sum and
 * its taps inside the input. */
static inline CX_HD void pwindow(const pgeo &g, const dv &x, int64_t p, const int64_t *o, int64_t *best, double *sum,
                                 int64_t *inside) {
    double bv = 0;
    *best = -1, *sum = 0, *inside = 0;
    for (int64_t kz = 0; kz < g.k[0]; kz++) {
        int64_t iz = o[0] * g.s[0] - g.pb[0] + kz * g.d[0];
        if (iz < 0 || iz >= g.in[0]) continue;
        for (int64_t ky = 0; ky < g.k[1]; ky++) {
            int64_t iy = o[1] * g.s[1] - g.pb[1] + ky * g.d[1];
            if (iy < 0 || iy >= g.in[1]) continue;
            for (int64_t kx = 0; kx < g.k[2]; kx++) {
                int64_t ix = o[2] * g.s[2] - g.pb[2] + kx * g.d[2];
                if (ix < 0 || ix >= g.in[2]) continue;
                int64_t xi = ((p * g.in[0] + iz) * g.in[1] + iy) * g.in[2] + ix;
                double v = ld(x, xi);
                if (*best < 0 || v > bv || isnan(v)) {
                    *best = xi;
                    bv = v;
                }
                *sum += v;
                (*inside)++;
            }
        }
    }
}

static inline CX_HD int64_t pcount(const pgeo &g, const int64_t *o, int64_t inside) {
    if (!g.include_pad) return inside;
    int64_t cnt = 1;
    for (int d = 0; d < 3; d++) {
        int64_t start = o[d] * g.s[d] - g.pb[d], end = start + g.k[d], lim = g.in[d] + g.pe[d];
        cnt *= (end < lim ? end : lim) - start;
    }
    return cnt;
}

static void pool_fwd(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    pgeo g = pgeo_of(n, &in[0]);
    dv x = cu_dv(&in[0]), y = cu_dv(out);
    bool maxp = n->op == CG_MAXPOOL;
    cu_each(c, cx_view_numel(out), CU_FN {
        int64_t q = i % g.osp, p = i / g.osp, o[3] = {q / (g.out[1] * g.out[2]), (q / g.out[2]) % g.out[1], q % g.out[2]};
        int64_t best, inside;
        double sum;
        pwindow(g, x, p, o, &best, &sum, &inside);
        if (maxp) {
            sto(y, i, best >= 0 ? ld(x, best) : -INFINITY);
        } else {
            int64_t cnt = pcount(g, o, inside);
            sto(y, i, cnt > 0 ? sum / (double)cnt : 0);
        }
    });
}

/* Each input element: the sum over the windows that hold it of their gradient (MaxPool: the windows whose first
 * maximum it is; AveragePool: gY / the window's count). */
static void pool_grad(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    pgeo g = pgeo_of(n, &in[0]);
    dv x = cu_dv(&in[0]), gy = cu_dv(&in[1]), y = cu_dv(out);
    bool maxp = n->op == CG_MAXPOOL_GRAD;
    cu_each(c, cx_view_numel(out), CU_FN {
        int64_t qi = i % g.isp, p = i / g.isp;
        int64_t iz = qi / (g.in[1] * g.in[2]), iy = (qi / g.in[2]) % g.in[1], ix = qi % g.in[2];
        double s = 0;
        cu_taps_reading(g.w, iz, iy, ix, [&](int64_t r, int64_t q) {
            int64_t o[3] = {q / (g.out[1] * g.out[2]), (q / g.out[2]) % g.out[1], q % g.out[2]};
            int64_t yi = p * g.osp + q, best, inside;
            double sum;
            pwindow(g, x, p, o, &best, &sum, &inside);
            if (maxp) {
                if (best == i) s += ld(gy, yi);
            } else {
                int64_t cnt = pcount(g, o, inside);
                if (cnt > 0) s += ld(gy, yi) / (double)cnt;
            }
        });
        sto(y, i, s);
    });
}

cattr_status cu_run_pool(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out, bool *done) {
    *done = out->dtype != CATTR_INT64;
    if (!*done) return CATTR_OK;
    switch (n->op) {
    case CG_MAXPOOL: case CG_AVGPOOL: pool_fwd(c, n, in, out); return CATTR_OK;
    case CG_MAXPOOL_GRAD: case CG_AVGPOOL_GRAD: pool_grad(c, n, in, out); return CATTR_OK;
    case CG_GLOBALAVGPOOL: {
        dv x = cu_dv(&in[0]), y = cu_dv(out);
        int64_t planes = in[0].shape[0] * in[0].shape[1], sp = planes ? cx_view_numel(&in[0]) / planes : 0;
        cu_each(c, planes, CU_FN {
            double s = 0;
            for (int64_t j = 0; j < sp; j++) s += ld(x, i * sp + j);
            sto(y, i, s / (double)sp);
        });
        return CATTR_OK;
    }
    case CG_GAP_GRAD: {
        dv gy = cu_dv(&in[1]), y = cu_dv(out);
        int64_t planes = in[0].shape[0] * in[0].shape[1], sp = planes ? cx_view_numel(&in[0]) / planes : 0;
        cu_each(c, cx_view_numel(out), CU_FN { sto(y, i, ld(gy, i / sp) / (double)sp); });
        return CATTR_OK;
    }
    case CG_BATCHNORM: case CG_BATCHNORM_GRAD: {
        bool grad = n->op == CG_BATCHNORM_GRAD;
        dv x = cu_dv(&in[0]), scale = cu_dv(&in[1]), var = cu_dv(&in[grad ? 2 : 4]), y = cu_dv(out);
        dv bias = grad ? y : cu_dv(&in[2]), mean = grad ? y : cu_dv(&in[3]);
        int64_t C = in[0].shape[1], sp = cx_numel(in[0].ndim - 2, in[0].shape + 2);
        double eps = rd(y, n->a.alpha);
        cu_each(c, cx_view_numel(out), CU_FN {
            int64_t ch = (i / sp) % C;
            double inv = 1 / sqrt(ld(var, ch) + eps), v = ld(x, i);
            sto(y, i, grad ? v * ld(scale, ch) * inv : (v - ld(mean, ch)) * inv * ld(scale, ch) + ld(bias, ch));
        });
        return CATTR_OK;
    }
    default: break;
    }
    *done = false;
    return CATTR_OK;
}
