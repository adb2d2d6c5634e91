/* linear.cu - the CUDA backend's products: Gemm and MatMul through cuBLAS (cu_gemm: full precision, no TF32), and
 * convolution and its input gradient as im2col / col2im around a cuBLAS GEMM per group (a direct kernel for grouped
 * convolutions). Bias, alpha / beta and the fused ReLU are an elementwise epilogue in double, as the reference kernels
 * compute them. */
#include "backend/cuda/cu.h"

extern "C" {
#include "ops/ops.h"
}

#include <stdio.h>

static cattr_status no_device_memory(const cg_node *n) {
    return cx_fail(CATTR_ERR_NO_MEMORY, "node '%s' (op %s): out of device memory for its workspace", n->name,
                   cg_op_names[n->op]);
}

/* C[m, nn] (row stride ldc) = A[m, k] (row stride lda) op(B) in float32, B a checkpoint's 16-bit matrix as stored
 * ([k, nn], or [nn, k] when tb): B widened a block of columns of op(B) at a time into the scratch (at most 64 MiB),
 * each block one GEMM: device memory holds the weights in 16 bits and one block in float32. */
static cattr_status gemm_stored(cu_ctx *c, const cg_node *n, bool tb, int64_t m, int64_t nn, int64_t k, const void *A,
                                int64_t lda, const cx_view *B, float *C, int64_t ldc) {
    int64_t jb = k > 0 ? (int64_t)((64u << 20) / sizeof(float)) / k : nn;
    if (jb < 1) jb = 1;
    if (jb > nn) jb = nn;
    float *W = (float *)cu_scratch(c, (size_t)(jb * (k > 0 ? k : 1)) * sizeof(float));
    if (!W) return no_device_memory(n);
    const void *bp = B->data;
    int bt = (int)B->dtype;
    for (int64_t j0 = 0; j0 < nn; j0 += jb) {
        int64_t w = nn - j0 < jb ? nn - j0 : jb;
        if (tb) /* rows j0.. of B: contiguous */
            cu_each(c, w * k, CU_FN { W[i] = cu_from16(bp, bt, j0 * k + i); });
        else /* columns j0.. of B's rows, packed [k, w] */
            cu_each(c, k * w, CU_FN { W[i] = cu_from16(bp, bt, (i / w) * nn + j0 + i % w); });
        cattr_status st = cu_gemm(c, CATTR_FLOAT32, false, tb, m, w, k, A, lda, 0, W, tb ? k : w, 0, C + j0, ldc, 0, 1,
                                  0.0);
        if (st != CATTR_OK) return st;
    }
    return CATTR_OK;
}

/* Gemm: Y = alpha op(A) op(B) + beta C, then the fused ReLU. */
static cattr_status gemm(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    const cg_attrs *a = &n->a;
    int64_t m = out->shape[0], nn = out->shape[1], k = a->trans_a ? in[0].shape[0] : in[0].shape[1];
    cattr_status st = cx_dtype_is_storage(in[1].dtype) && !a->trans_a && out->dtype == CATTR_FLOAT32
                          ? gemm_stored(c, n, a->trans_b, m, nn, k, in[0].data, in[0].shape[1], &in[1],
                                        (float *)out->data, nn)
                          : cu_gemm(c, out->dtype, a->trans_a, a->trans_b, m, nn, k, in[0].data, in[0].shape[1], 0,
                                    in[1].data, in[1].shape[1], 0, out->data, nn, 0, 1, 0.0);
    if (st != CATTR_OK) return st;
    bool has_c = n->n_in > 2 && in[2].data && a->beta != 0;
    if (!has_c && a->alpha == 1 && !a->fuse_relu) return CATTR_OK;
    dv y = cu_dv(out), cv = has_c ? cu_dv(&in[2]) : y;
    double alpha = rd(y, a->alpha), beta = rd(y, a->beta);
    int relu = a->fuse_relu;
    cu_each(c, m * nn, CU_FN {
        double v = rd(y, alpha * ld(y, i));
        if (has_c) {
            int64_t ij[2] = {i / nn, i % nn};
            v += rd(y, beta * ld(cv, bidx(2, ij, cv)));
        }
        sto(y, i, relu ? relu0(v) : v);
    });
    return CATTR_OK;
}

/* MatMul: numpy matmul with broadcast batch dims and the internal transposes. One strided-batched GEMM when each
 * operand's batch offset is affine in the output batch (its batch dims match the output's or are all 1); else one
 * GEMM per batch. */
static cattr_status matmul(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    const cg_attrs *a = &n->a;
    int64_t as[CATTR_MAX_DIMS], bs[CATTR_MAX_DIMS], bat[CATTR_MAX_DIMS];
    int na = in[0].ndim, nb = in[1].ndim, nbat;
    memcpy(as, in[0].shape, sizeof as);
    memcpy(bs, in[1].shape, sizeof bs);
    if (na == 1) {
        as[1] = as[0];
        as[0] = 1;
        na = 2;
    }
    if (nb == 1) {
        bs[1] = 1;
        nb = 2;
    }
    int64_t ar = as[na - 2], ac = as[na - 1], br = bs[nb - 2], bc = bs[nb - 1];
    int64_t m = a->trans_a ? ac : ar, k = a->trans_a ? ar : ac, nn = a->trans_b ? br : bc;
    cx_broadcast_shape(na - 2, as, nb - 2, bs, &nbat, bat);
    int64_t nbatch = cx_numel(nbat, bat), nba = cx_numel(na - 2, as), nbb = cx_numel(nb - 2, bs);
    size_t es = cattr_dtype_size(out->dtype);
    cattr_status st = CATTR_OK;
    if (cx_dtype_is_storage(in[1].dtype)) { /* a checkpoint's matrix as stored (2-D, A not transposed: the planner) */
        if (in[1].ndim != 2 || a->trans_a || out->dtype != CATTR_FLOAT32)
            return cx_fail(CATTR_ERR_INTERNAL, "node '%s' (op MatMul): a 16-bit operand B of rank %d", n->name,
                           in[1].ndim);
        st = gemm_stored(c, n, a->trans_b, nbatch * m, nn, k, in[0].data, ac, &in[1], (float *)out->data, nn);
    } else if ((nba == nbatch || nba == 1) && (nbb == nbatch || nbb == 1)) {
        if (nbb == 1 && !a->trans_a && nba == nbatch) /* A's batches are rows of one tall product */
            st = cu_gemm(c, out->dtype, false, a->trans_b, nbatch * m, nn, k, in[0].data, ac, 0, in[1].data, bc, 0,
                         out->data, nn, 0, 1, 0.0);
        else
            st = cu_gemm(c, out->dtype, a->trans_a, a->trans_b, m, nn, k, in[0].data, ac, nba == 1 ? 0 : ar * ac,
                         in[1].data, bc, nbb == 1 ? 0 : br * bc, out->data, nn, m * nn, nbatch, 0.0);
    } else {
        for (int64_t b = 0; b < nbatch && st == CATTR_OK; b++) {
            int64_t cc[CATTR_MAX_DIMS], oa = 0, ob = 0;
            for (int64_t d = nbat - 1, r = b; d >= 0; d--) { /* b's coordinates in the batch shape */
                cc[d] = r % bat[d];
                r /= bat[d];
            }
            for (int d = 0; d < na - 2; d++) oa = oa * as[d] + (as[d] == 1 ? 0 : cc[nbat - (na - 2) + d]);
            for (int d = 0; d < nb - 2; d++) ob = ob * bs[d] + (bs[d] == 1 ? 0 : cc[nbat - (nb - 2) + d]);
            st = cu_gemm(c, out->dtype, a->trans_a, a->trans_b, m, nn, k, (const char *)in[0].data + (size_t)(oa * ar * ac) * es,
                         ac, 0, (const char *)in[1].data + (size_t)(ob * br * bc) * es, bc, 0,
                         (char *)out->data + (size_t)(b * m * nn) * es, nn, 0, 1, 0.0);
        }
    }
    if (st == CATTR_OK && a->fuse_relu) {
        dv y = cu_dv(out);
        cu_each(c, cx_view_numel(out), CU_FN { sto(y, i, relu0(ld(y, i))); });
    }
    return st;
}

/* The geometry a kernel needs, by value. */
typedef struct geo {
    int64_t n, ci, co, cig, cog, G;
    cu_win w;
    int64_t in[3], out[3], k[3], s[3], d[3], pb[3];
    int64_t kk, isp, osp; /* taps per channel, input and output plane sizes */
} geo;

static geo geo_of(const cg_node *n, const cx_view *x, const cx_view *w) {
    cx_geom g;
    cx_geom_init(&g, &n->a, x->shape, x->ndim, w ? w->shape : NULL);
    geo r;
    r.n = g.n, r.ci = g.c_in, r.co = g.c_out, r.G = n->a.group > 0 ? n->a.group : 1;
    r.cig = r.ci / r.G, r.cog = r.co / r.G;
    for (int d = 0; d < 3; d++) {
        r.in[d] = g.in[d], r.out[d] = g.out[d], r.k[d] = g.k[d], r.s[d] = g.s[d], r.d[d] = g.d[d], r.pb[d] = g.pb[d];
    }
    r.w = cu_win_of(&g);
    r.kk = r.k[0] * r.k[1] * r.k[2];
    r.isp = r.in[0] * r.in[1] * r.in[2];
    r.osp = r.out[0] * r.out[1] * r.out[2];
    return r;
}

/* Conv (group 1): per block of samples, col [cig kk, osp] per sample from X, then Y_b = W [co, cig kk] col_b; the
 * bias and the fused ReLU after. ConvGradInput: colg_b = W^T gY_b, then each input element gathers the taps that
 * read it (col2im, deterministic). Blocks keep the columns under 512 MiB. */
static cattr_status conv_gemm(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out, bool grad) {
    const cx_view *x = &in[0], *w = &in[1];
    geo g = geo_of(n, x, w);
    size_t es = cattr_dtype_size(out->dtype);
    int64_t rows = g.cig * g.kk, per = rows * g.osp; /* column elements per sample */
    int64_t blk = per > 0 ? (int64_t)((512u << 20) / ((size_t)per * es)) : g.n;
    if (blk < 1) blk = 1;
    if (blk > g.n) blk = g.n;
    void *col = cu_scratch(c, (size_t)(blk * per) * es);
    if (!col && per > 0) return no_device_memory(n);
    dv cv = cu_dv(out);
    cv.p = col;
    cv.dt = out->dtype;
    cattr_status st = CATTR_OK;
    for (int64_t b0 = 0; b0 < g.n && st == CATTR_OK; b0 += blk) {
        int64_t nb = g.n - b0 < blk ? g.n - b0 : blk;
        if (!grad) {
            dv xv = cu_dv(x);
            cu_each(c, nb * per, CU_FN { /* col[b][c, kz, ky, kx][oz, oy, ox] */
                int64_t o = i % g.osp, r = (i / g.osp) % rows, b = b0 + i / per;
                int64_t ox = o % g.out[2], oy = (o / g.out[2]) % g.out[1], oz = o / (g.out[2] * g.out[1]);
                int64_t kx = r % g.k[2], ky = (r / g.k[2]) % g.k[1], kz = (r / (g.k[2] * g.k[1])) % g.k[0];
                int64_t ch = r / g.kk;
                int64_t iz = oz * g.s[0] - g.pb[0] + kz * g.d[0], iy = oy * g.s[1] - g.pb[1] + ky * g.d[1],
                        ix = ox * g.s[2] - g.pb[2] + kx * g.d[2];
                double v = 0;
                if (iz >= 0 && iz < g.in[0] && iy >= 0 && iy < g.in[1] && ix >= 0 && ix < g.in[2])
                    v = ld(xv, (((b * g.ci + ch) * g.in[0] + iz) * g.in[1] + iy) * g.in[2] + ix);
                sto(cv, i, v);
            });
            st = cu_gemm(c, out->dtype, false, false, g.co, g.osp, rows, w->data, rows, 0, col, g.osp, per,
                         (char *)out->data + (size_t)(b0 * g.co * g.osp) * es, g.osp, g.co * g.osp, nb, 0.0);
        } else {
            const cx_view *gy = &in[2];
            st = cu_gemm(c, out->dtype, true, false, rows, g.osp, g.co, w->data, rows, 0,
                         (const char *)gy->data + (size_t)(b0 * g.co * g.osp) * es, g.osp, g.co * g.osp, col, g.osp,
                         per, nb, 0.0);
            dv xo = cu_dv(out);
            cu_each(c, nb * g.ci * g.isp, CU_FN { /* dX[b, ch, iz, iy, ix] = sum of the columns' taps there */
                int64_t p = i % g.isp, ch = (i / g.isp) % g.ci, bl = i / (g.isp * g.ci);
                int64_t ix = p % g.in[2], iy = (p / g.in[2]) % g.in[1], iz = p / (g.in[2] * g.in[1]);
                double s = 0;
                cu_taps_reading(g.w, iz, iy, ix, [&](int64_t r, int64_t o) { s += ld(cv, bl * per + (ch * g.kk + r) * g.osp + o); });
                sto(xo, (b0 + bl) * g.ci * g.isp + ch * g.isp + p, s);
            });
        }
    }
    if (st != CATTR_OK || grad) return st;
    bool bias = n->n_in > 2 && in[2].data;
    if (!bias && !n->a.fuse_relu) return CATTR_OK;
    dv y = cu_dv(out), bv = bias ? cu_dv(&in[2]) : y;
    int relu = n->a.fuse_relu;
    cu_each(c, cx_view_numel(out), CU_FN {
        double v = ld(y, i) + (bias ? ld(bv, (i / g.osp) % g.co) : 0);
        sto(y, i, relu ? relu0(v) : v);
    });
    return CATTR_OK;
}

/* Grouped convolutions (depthwise and the like): one thread per output element (Conv) or input element
 * (ConvGradInput, gathering the outputs that read it). */
static cattr_status conv_direct(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out, bool grad) {
    geo g = geo_of(n, &in[0], &in[1]);
    dv x = cu_dv(&in[0]), w = cu_dv(&in[1]), y = cu_dv(out);
    if (!grad) {
        bool bias = n->n_in > 2 && in[2].data;
        dv bv = bias ? cu_dv(&in[2]) : y;
        int relu = n->a.fuse_relu;
        cu_each(c, cx_view_numel(out), CU_FN {
            int64_t o = i % g.osp, m = (i / g.osp) % g.co, b = i / (g.osp * g.co);
            int64_t ox = o % g.out[2], oy = (o / g.out[2]) % g.out[1], oz = o / (g.out[2] * g.out[1]);
            double s = bias ? ld(bv, m) : 0;
            for (int64_t ch = 0; ch < g.cig; ch++)
                for (int64_t kz = 0; kz < g.k[0]; kz++)
                    for (int64_t ky = 0; ky < g.k[1]; ky++)
                        for (int64_t kx = 0; kx < g.k[2]; kx++) {
                            int64_t iz = oz * g.s[0] - g.pb[0] + kz * g.d[0], iy = oy * g.s[1] - g.pb[1] + ky * g.d[1],
                                    ix = ox * g.s[2] - g.pb[2] + kx * g.d[2];
                            if (iz < 0 || iz >= g.in[0] || iy < 0 || iy >= g.in[1] || ix < 0 || ix >= g.in[2]) continue;
                            double wv = ld(w, (((m * g.cig + ch) * g.k[0] + kz) * g.k[1] + ky) * g.k[2] + kx);
                            int64_t xc = b * g.ci + (m / g.cog) * g.cig + ch;
                            s += wv * ld(x, ((xc * g.in[0] + iz) * g.in[1] + iy) * g.in[2] + ix);
                        }
            sto(y, i, relu ? relu0(s) : s);
        });
        return CATTR_OK;
    }
    dv gy = cu_dv(&in[2]);
    cu_each(c, cx_view_numel(out), CU_FN {
        int64_t p = i % g.isp, xc = (i / g.isp) % g.ci, b = i / (g.isp * g.ci), grp = xc / g.cig, ch = xc % g.cig;
        int64_t ix = p % g.in[2], iy = (p / g.in[2]) % g.in[1], iz = p / (g.in[2] * g.in[1]);
        double s = 0;
        for (int64_t mm = 0; mm < g.cog; mm++) {
            int64_t m = grp * g.cog + mm;
            cu_taps_reading(g.w, iz, iy, ix, [&](int64_t r, int64_t o) {
                s += ld(w, (m * g.cig + ch) * g.kk + r) * ld(gy, (b * g.co + m) * g.osp + o);
            });
        }
        sto(y, i, s);
    });
    return CATTR_OK;
}

cattr_status cu_run_linear(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out, bool *done) {
    *done = out->dtype != CATTR_INT64;
    if (!*done) return CATTR_OK;
    switch (n->op) {
    case CG_GEMM: return gemm(c, n, in, out);
    case CG_MATMUL: return matmul(c, n, in, out);
    case CG_CONV: case CG_CONV_GRAD_INPUT: {
        bool grad = n->op == CG_CONV_GRAD_INPUT;
        if (in[0].dtype != out->dtype || in[1].dtype != out->dtype) break;
        return n->a.group > 1 ? conv_direct(c, n, in, out, grad) : conv_gemm(c, n, in, out, grad);
    }
    default: break;
    }
    *done = false;
    return CATTR_OK;
}
