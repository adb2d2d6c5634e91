/* elementwise.cu - the CUDA backend's elementwise kernels: copies and views, the activations and their gradients, the
 * broadcasting binary ops, the functions of ops/elementwise.h, selections (Where, Equal, Expand, Tile, Cast,
 * ConstantOfShape, Shape), the DeepLift / LRP rule ops, SwiGLU and NormalNoise. Each output element is one thread,
 * computed in double from the inputs and rounded once (the reference kernels' arithmetic, check_kernels.c). */
#include "backend/cuda/cu.h"

extern "C" {
#include "core/philox.h"
#include "ops/elementwise.h"
}

static bool same_shape(const cx_view *a, const cx_view *b) {
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

/* Relu ... Abs: y = f(x), attributes rounded to the dtype as the CPU kernels hold them. */
static void unary(cu_ctx *c, cg_op op, const cx_view *in, cx_view *out, double alpha, double beta) {
    dv x = cu_dv(&in[0]), y = cu_dv(out);
    alpha = rd(y, alpha), beta = rd(y, beta);
    cu_each(c, cx_view_numel(out), CU_FN {
        double v = ld(x, i), r;
        switch (op) {
        case CG_RELU: r = v > 0 ? v : 0; break;
        case CG_LEAKYRELU: r = v > 0 ? v : v * alpha; break;
        case CG_SIGMOID: r = 1 / (1 + exp(-v)); break;
        case CG_TANH: r = tanh(v); break;
        case CG_CLIP: r = v < alpha ? alpha : v; r = r > beta ? beta : r; break;
        case CG_NEG: r = -v; break;
        default: r = fabs(v); break; /* Abs */
        }
        sto(y, i, r);
    });
}

static void unary_grad(cu_ctx *c, cg_op op, const cx_view *in, cx_view *out, double alpha, double beta) {
    dv x = cu_dv(&in[0]), g = cu_dv(&in[1]), y = cu_dv(out);
    alpha = rd(y, alpha), beta = rd(y, beta);
    cu_each(c, cx_view_numel(out), CU_FN {
        double v = ld(x, i), gv = ld(g, i), r;
        switch (op) {
        case CG_RELU_GRAD: r = v > 0 ? gv : 0; break;
        case CG_LEAKYRELU_GRAD: r = v > 0 ? gv : gv * alpha; break;
        case CG_SIGMOID_GRAD: r = gv * (1 - v) * v; break;
        case CG_TANH_GRAD: r = gv * (1 - v * v); break;
        case CG_CLIP_GRAD: r = v >= alpha && v <= beta ? gv : 0; break;
        default: r = v > 0 ? gv : v < 0 ? -gv : 0; break; /* AbsGrad */
        }
        sto(y, i, r);
    });
}

/* Add, Sub, Mul, Div, Pow, Max, Min (numpy broadcasting; the fused ReLU on the first four); BinaryGrad. */
static void binary(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    dv a = cu_dv(&in[0]), b = cu_dv(&in[1]), y = cu_dv(out), g = n->op == CG_BINARY_GRAD ? cu_dv(&in[2]) : y;
    cg_op op = n->op, fop = (cg_op)n->a.axis;
    int which = (int)n->a.index, relu = n->a.fuse_relu, nd = out->ndim;
    bool flat = same_shape(&in[0], out) && same_shape(&in[1], out);
    cu_each(c, cx_view_numel(out), CU_FN {
        int64_t ia = i, ib = i;
        if (!flat) {
            int64_t cc[CATTR_MAX_DIMS];
            unrav(i, nd, y.sh, cc);
            ia = bidx(nd, cc, a);
            ib = bidx(nd, cc, b);
        }
        double va = ld(a, ia), vb = ld(b, ib), r;
        switch (op) {
        case CG_ADD: r = va + vb; break;
        case CG_SUB: r = va - vb; break;
        case CG_MUL: r = va * vb; break;
        case CG_DIV: r = va / vb; break;
        case CG_BINARY_GRAD: r = cx_binary_df(fop, which, va, vb, ld(g, i)); break;
        default: r = cx_binary_f(op, va, vb); break;
        }
        sto(y, i, relu ? relu0(r) : r);
    });
}

/* Sqrt ... Gelu and UnaryGrad through ops/elementwise.h's double formulas. */
static void ew_unary(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    dv x = cu_dv(&in[0]), y = cu_dv(out), g = n->op == CG_UNARY_GRAD ? cu_dv(&in[1]) : y;
    cg_op op = n->op, fop = (cg_op)n->a.index;
    double alpha = n->a.alpha, beta = n->a.beta;
    int approx = (int)n->a.index, gapprox = (int)n->a.axis;
    cu_each(c, cx_view_numel(out), CU_FN {
        if (op == CG_UNARY_GRAD) sto(y, i, ld(g, i) * cx_unary_df(fop, ld(x, i), alpha, beta, gapprox));
        else sto(y, i, cx_unary_f(op, ld(x, i), alpha, beta, approx));
    });
}

/* ConstantOfShape, Equal, Where, Expand, Tile (every dtype; Equal's result int64). */
static void select_op(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    dv y = cu_dv(out), a = cu_dv(&in[0]), b = n->n_in > 1 ? cu_dv(&in[1]) : y, w = n->n_in > 2 ? cu_dv(&in[2]) : y;
    cg_op op = n->op;
    int nd = out->ndim, mode = (int)n->a.index;
    double alpha = n->a.alpha;
    cu_each(c, cx_view_numel(out), CU_FN {
        int64_t cc[CATTR_MAX_DIMS];
        unrav(i, nd, y.sh, cc);
        if (op == CG_CONSTANT_OF_SHAPE) {
            if (y.dt == CATTR_INT64) ((int64_t *)y.p)[i] = (int64_t)alpha;
            else sto(y, i, alpha);
        } else if (op == CG_EQUAL) {
            int64_t ia = bidx(nd, cc, a), ib = bidx(nd, cc, b);
            double va = a.dt == CATTR_INT64 ? (double)ldi(a, ia) : ld(a, ia);
            double vb = b.dt == CATTR_INT64 ? (double)ldi(b, ib) : ld(b, ib);
            ((int64_t *)y.p)[i] = cx_compare(mode, va, vb);
        } else if (op == CG_TILE) {
            int64_t at = 0;
            for (int d = 0; d < nd; d++) at = at * a.sh[d] + cc[d] % a.sh[d];
            cpe(y, i, a, at);
        } else if (op == CG_WHERE) {
            const dv &src = ldi(a, bidx(nd, cc, a)) ? b : w;
            cpe(y, i, src, bidx(nd, cc, src));
        } else { /* Expand */
            cpe(y, i, a, bidx(nd, cc, a));
        }
    });
}

static void cast_op(cu_ctx *c, const cx_view *in, cx_view *out) {
    dv x = cu_dv(&in[0]), y = cu_dv(out);
    cu_each(c, cx_view_numel(out), CU_FN {
        if (y.dt == CATTR_INT64) ((int64_t *)y.p)[i] = x.dt == CATTR_INT64 ? ldi(x, i) : (int64_t)ld(x, i);
        else sto(y, i, x.dt == CATTR_INT64 ? (double)ldi(x, i) : ld(x, i));
    });
}

/* The DeepLift / LRP rule ops: a batch of 2N rows, N actual then N references. */
static cattr_status rules(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    dv y = cu_dv(out), x = cu_dv(&in[0]);
    double eps = rd(y, n->a.alpha);
    int64_t cnt = cx_view_numel(out);
    switch (n->op) {
    case CG_DL_DELTA: {
        int64_t half = cnt / 2;
        cu_each(c, half, CU_FN {
            double d = ld(x, i) - ld(x, half + i);
            sto(y, i, d);
            sto(y, half + i, d);
        });
        return CATTR_OK;
    }
    case CG_DL_RESCALE: {
        dv g = cu_dv(&in[1]), dy = cu_dv(&in[2]), dx = cu_dv(&in[3]);
        cu_each(c, cnt, CU_FN {
            double d = ld(dx, i);
            sto(y, i, fabs(d) < eps ? ld(x, i) : ld(g, i) * ld(dy, i) / d);
        });
        return CATTR_OK;
    }
    case CG_DL_CENTER: { /* the sum by one thread into the scratch, then every element */
        double *sum = (double *)cu_scratch(c, sizeof(double));
        if (!sum) return cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': out of device memory", n->name);
        cu_each(c, 1, CU_FN {
            double s = 0;
            for (int64_t k = 0; k < cnt; k++) s += ld(x, k);
            sum[i] = s;
        });
        cu_each(c, cnt, CU_FN { sto(y, i, ld(x, i) - sum[0] / (double)cnt); });
        return CATTR_OK;
    }
    default: { /* LrpDiv */
        dv z = cu_dv(&in[1]);
        cu_each(c, cnt, CU_FN {
            double v = ld(z, i);
            sto(y, i, ld(x, i) / (v + (v < 0 ? -eps : eps)));
        });
        return CATTR_OK;
    }
    }
}

static void swiglu(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    dv g = cu_dv(&in[0]), u = cu_dv(&in[1]), y = cu_dv(out), gy = n->op == CG_SWIGLU_GRAD ? cu_dv(&in[2]) : y;
    bool fwd = n->op == CG_SWIGLU, du = n->a.index == 1;
    cu_each(c, cx_view_numel(out), CU_FN {
        double gv = ld(g, i), uv = ld(u, i), sg = 1 / (1 + exp(-gv)), r;
        if (fwd) {
            r = gv * sg * uv;
        } else {
            double t = ld(gy, i), da = t * uv;
            r = du ? t * (gv * sg) : da * sg + da * gv * (1 - sg) * sg;
        }
        sto(y, i, r);
    });
}

/* NormalNoise: element k of row r from block I[r] + k of stream S[r], times the float32 standard deviation. */
static void normal_noise(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    dv s = cu_dv(&in[0]), first = cu_dv(&in[1]), y = cu_dv(out);
    int64_t R = out->shape[0], per = R ? cx_view_numel(out) / R : 0;
    float sd = (float)n->a.alpha;
    uint64_t seed = (uint64_t)n->a.axis;
    cu_each(c, cx_view_numel(out), CU_FN {
        int64_t r = i / per, k = i % per;
        double z = (float)cx_philox_normal_at(seed, (uint64_t)ldi(s, r), (uint64_t)(ldi(first, r) + k));
        sto(y, i, sd == 0 ? 0.0 : (double)(float)((double)sd * z));
    });
}

cattr_status cu_run_elementwise(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out, bool *done) {
    bool flt = out->dtype != CATTR_INT64;
    *done = true;
    switch (n->op) {
    case CG_IDENTITY: case CG_RESHAPE: case CG_FLATTEN: case CG_UNSQUEEZE: case CG_SQUEEZE: case CG_RESHAPE_LIKE:
        return cu_copy_d2d(c, out->data, in[0].data, (size_t)cx_view_numel(out) * cattr_dtype_size(out->dtype));
    case CG_ZEROS_LIKE: return cu_zero(c, out->data, (size_t)cx_view_numel(out) * cattr_dtype_size(out->dtype));
    case CG_SHAPE: { /* the dims are known here: one small copy (Size: the element count) */
        if (n->a.index == 1) {
            int64_t cnt = cx_view_numel(&in[0]);
            return cu_copy_h2d(c, out->data, &cnt, sizeof cnt);
        }
        int64_t dims[CATTR_MAX_DIMS], lo = n->a.n_ints > 0 ? n->a.ints[0] : 0;
        if (lo < 0) lo += in[0].ndim;
        if (lo < 0) lo = 0;
        for (int64_t k = 0; k < out->shape[0]; k++) dims[k] = in[0].shape[lo + k];
        cattr_status st = cu_copy_h2d(c, out->data, dims, (size_t)out->shape[0] * sizeof(int64_t));
        return st;
    }
    case CG_CONSTANT_OF_SHAPE: case CG_EQUAL: case CG_WHERE: case CG_EXPAND: case CG_TILE:
        select_op(c, n, in, out);
        return CATTR_OK;
    case CG_CAST: cast_op(c, in, out); return CATTR_OK;
    case CG_NORMAL_NOISE: normal_noise(c, n, in, out); return CATTR_OK;
    default: break;
    }
    if (!flt && (n->op == CG_RELU || n->op == CG_NEG || n->op == CG_ABS)) { /* a model of integers */
        dv x = cu_dv(&in[0]), y = cu_dv(out);
        cg_op op = n->op;
        cu_each(c, cx_view_numel(out), CU_FN {
            int64_t v = ldi(x, i);
            ((int64_t *)y.p)[i] = op == CG_RELU ? (v > 0 ? v : 0) : op == CG_NEG ? -v : (v < 0 ? -v : v);
        });
        return CATTR_OK;
    }
    if (flt) switch (n->op) {
        case CG_RELU: case CG_LEAKYRELU: case CG_SIGMOID: case CG_TANH: case CG_CLIP: case CG_NEG: case CG_ABS:
            unary(c, n->op, in, out, n->a.alpha, n->a.beta);
            return CATTR_OK;
        case CG_RELU_GRAD: case CG_LEAKYRELU_GRAD: case CG_SIGMOID_GRAD: case CG_TANH_GRAD: case CG_CLIP_GRAD:
        case CG_ABS_GRAD:
            unary_grad(c, n->op, in, out, n->a.alpha, n->a.beta);
            return CATTR_OK;
        case CG_ADD: case CG_SUB: case CG_MUL: case CG_DIV: case CG_POW: case CG_MAX: case CG_MIN: case CG_BINARY_GRAD:
            binary(c, n, in, out);
            return CATTR_OK;
        case CG_SQRT: case CG_EXP: case CG_LOG: case CG_ERF: case CG_RECIPROCAL: case CG_HARDSIGMOID:
        case CG_HARDSWISH: case CG_SOFTPLUS: case CG_ELU: case CG_SELU: case CG_GELU: case CG_UNARY_GRAD:
            ew_unary(c, n, in, out);
            return CATTR_OK;
        case CG_DL_DELTA: case CG_DL_RESCALE: case CG_DL_CENTER: case CG_LRP_DIV: return rules(c, n, in, out);
        case CG_SWIGLU: case CG_SWIGLU_GRAD: swiglu(c, n, in, out); return CATTR_OK;
        default: break;
        }
    *done = false;
    return CATTR_OK;
}
