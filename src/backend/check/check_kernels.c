/* check_kernels.c - the reference kernels the fast CPU kernels must agree with (the "cpu-check" backend).
 *
 * One scalar loop nest per op, written from the op's definition: no BLAS, no SIMD, no blocking, no special cases for
 * speed (MatMul alone shares its independent rows among OpenMP threads). Every kernel is written once for both float dtypes: elements are read as double (exactly),
 * the arithmetic runs in double, every reduction (dot products, sums, softmax denominators, norms, scatter-adds)
 * accumulates in double, and each result is rounded once, to the output dtype, when it is stored. Attributes that
 * the fast kernels convert to the element type (alpha, beta, epsilons, Clip's bounds) are rounded to the dtype first
 * (attr()), so that comparisons against them decide alike. The data-movement ops copy elements as bytes and serve
 * int64 as well.
 *
 * The semantics are those of the fast kernels (src/backend/cpu/kernels_impl.h, llm_impl.h, cpu_backend.c):
 * broadcasting, the fused ReLU epilogue, the pooling geometry of cx_geom_init, Slice through cx_slice_resolve, ragged
 * attention over prefix keys and values, the DeepLift and LRP rule ops, the error statuses and messages. Where a
 * reference must not do what a fast kernel does, it says so at the kernel:
 *  - MaxPool (and DeepLift's max-pool rule) takes a NaN the way PyTorch does: a tap replaces the maximum when it is
 *    greater or NaN, so a NaN in a window is the result;
 *  - every index and position is checked before anything is written;
 *  - RoPE's positions must number the rows, SliceGrad's gradient must have the slice's element count;
 *  - MatMul's bfloat16 flag (precision "high") is refused: this backend computes at full precision only.
 */
#include "backend/check/check_kernels.h"
#include "ops/elementwise.h"
#include "ops/ops.h"
#include "core/rng.h"
#include "core/pool.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- elements, attributes, indices ------------------------------------------------------------------------------ */

/* Element i of a view, as double (exact for float32 and float64). */
static double get(const cx_view *v, int64_t i) {
    if (v->dtype == CX_BFLOAT16) return (double)cx_bf16_to_f32(((const uint16_t *)v->data)[i]);
    if (v->dtype == CX_FLOAT16) return (double)cx_f16_to_f32(((const uint16_t *)v->data)[i]);
    switch (v->dtype) {
    case CATTR_FLOAT32: return (double)((const float *)v->data)[i];
    case CATTR_FLOAT64: return ((const double *)v->data)[i];
    default: return (double)((const int64_t *)v->data)[i];
    }
}

/* Stores x into element i of a float view: the one rounding of a result. */
static void put(cx_view *v, int64_t i, double x) {
    if (v->dtype == CATTR_FLOAT32) ((float *)v->data)[i] = (float)x;
    else ((double *)v->data)[i] = x;
}

/* x rounded to the element type of `v`: where a float32 kernel holds an intermediate result in a float (a product
 * before its bias is added), the reference rounds it there too, so that float32 results agree bit for bit where the
 * fast kernels and PyTorch agree. */
static double rnd(const cx_view *v, double x) { return v->dtype == CATTR_FLOAT32 ? (double)(float)x : x; }

/* An attribute as the fast kernels see it: converted to the element type of `v`. */
static double attr(const cx_view *v, double a) { return v->dtype == CATTR_FLOAT32 ? (double)(float)a : a; }

static double relu(double x) { return x > 0 ? x : 0; } /* NaN gives 0, as the fast epilogue does */

static const char *op_name(cg_op op) { return (unsigned)op < (unsigned)CG_OP_COUNT ? cg_op_names[op] : "(unknown)"; }

/* A zeroed scratch array of `count` doubles; NULL when out of memory. */
static double *zeros(int64_t count) { return calloc((size_t)(count > 0 ? count : 1), sizeof(double)); }

static cattr_status no_memory(const cg_node *n) {
    return cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': out of memory in the cpu-check backend", n->name);
}

/* Row-major strides of a shape. */
static void strides_of(int nd, const int64_t *shape, int64_t *str) {
    int64_t r = 1;
    for (int d = nd - 1; d >= 0; d--) {
        str[d] = r;
        r *= shape[d];
    }
}

/* The coordinates c of flat index i in a shape. */
static void unravel(int64_t i, int nd, const int64_t *shape, int64_t *c) {
    for (int d = nd - 1; d >= 0; d--) {
        c[d] = shape[d] > 0 ? i % shape[d] : 0;
        i = shape[d] > 0 ? i / shape[d] : 0;
    }
}

/* The flat index, in a tensor of shape sh (rank nd <= nc, aligned to the right), of the element that broadcasts to
 * the coordinates c (rank nc): a dim of size 1 is read at 0 (numpy broadcasting). */
static int64_t bcast_index(int nc, const int64_t *c, int nd, const int64_t *sh) {
    int64_t off = 0;
    for (int d = 0; d < nd; d++) off = off * sh[d] + (sh[d] == 1 ? 0 : c[nc - nd + d]);
    return off;
}

static void copy_elem(void *dst, int64_t di, const void *src, int64_t si, size_t es) {
    memcpy((char *)dst + (size_t)di * es, (const char *)src + (size_t)si * es, es);
}

/* ---- data movement (every dtype) -------------------------------------------------------------------------------- */

/* Identity, Reshape, Flatten, Squeeze, Unsqueeze, ReshapeLike: the same elements in the same order. The planner may
 * give the output the input's storage. */
static cattr_status k_copy(const cx_view *in, cx_view *out) {
    size_t bytes = (size_t)cx_view_numel(out) * cattr_dtype_size(out->dtype);
    if (bytes && out->data != in->data) memmove(out->data, in->data, bytes);
    return CATTR_OK;
}

/* out[c] = in[c permuted]: output dim d is input dim perm[d] (perm = ints, or the reversed dims without ints). */
static cattr_status k_transpose(const cg_node *n, const cx_view *in, cx_view *out) {
    int nd = in->ndim;
    size_t es = cattr_dtype_size(in->dtype);
    int64_t istr[CATTR_MAX_DIMS], c[CATTR_MAX_DIMS];
    strides_of(nd, in->shape, istr);
    for (int64_t i = 0; i < cx_view_numel(out); i++) {
        unravel(i, nd, out->shape, c);
        int64_t src = 0;
        for (int d = 0; d < nd; d++) src += c[d] * istr[n->a.n_ints ? n->a.ints[d] : nd - 1 - d];
        copy_elem(out->data, i, in->data, src, es);
    }
    return CATTR_OK;
}

/* The inputs one after the other along axis. */
static cattr_status k_concat(const cg_node *n, const cx_view *in, cx_view *out) {
    int nd = out->ndim, ax = (int)(n->a.axis < 0 ? n->a.axis + nd : n->a.axis);
    size_t es = cattr_dtype_size(out->dtype);
    int64_t ostr[CATTR_MAX_DIMS], c[CATTR_MAX_DIMS], off = 0;
    strides_of(nd, out->shape, ostr);
    for (int k = 0; k < n->n_in; k++) {
        for (int64_t i = 0; i < cx_view_numel(&in[k]); i++) {
            unravel(i, nd, in[k].shape, c);
            c[ax] += off;
            int64_t dst = 0;
            for (int d = 0; d < nd; d++) dst += c[d] * ostr[d];
            copy_elem(out->data, dst, in[k].data, i, es);
        }
        off += in[k].shape[ax];
    }
    return CATTR_OK;
}

/* (gY, X0..Xk-1): the piece of gY along axis that belongs to X_index. */
static cattr_status k_concat_grad(const cg_node *n, const cx_view *in, cx_view *out) {
    int nd = in[0].ndim, ax = (int)(n->a.axis < 0 ? n->a.axis + nd : n->a.axis);
    size_t es = cattr_dtype_size(out->dtype);
    int64_t gstr[CATTR_MAX_DIMS], c[CATTR_MAX_DIMS], off = 0;
    strides_of(nd, in[0].shape, gstr);
    for (int64_t k = 0; k < n->a.index; k++) off += in[1 + k].shape[ax];
    for (int64_t i = 0; i < cx_view_numel(out); i++) {
        unravel(i, nd, out->shape, c);
        c[ax] += off;
        int64_t src = 0;
        for (int d = 0; d < nd; d++) src += c[d] * gstr[d];
        copy_elem(out->data, i, in[0].data, src, es);
    }
    return CATTR_OK;
}

/* Gather: (data, int64 indices) -> out[outer, j, inner] = data[outer, indices[j], inner] (a negative index counts
 * from the end). GatherGrad: (gY, indices, X) -> zeros of X's shape with gY's rows added at the indices (repeated
 * indices add up). Every index is checked before anything is written. */
static cattr_status k_gather(const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_GATHER_GRAD;
    const cx_view *data = grad ? &in[2] : &in[0];
    const int64_t *ix = in[1].data;
    int ax = (int)(n->a.axis < 0 ? n->a.axis + data->ndim : n->a.axis);
    int64_t outer = cx_numel(ax, data->shape), inner = cx_numel(data->ndim - ax - 1, data->shape + ax + 1);
    int64_t dim = data->shape[ax], ni = cx_view_numel(&in[1]);
    for (int64_t j = 0; j < ni; j++) {
        int64_t k = ix[j] < 0 ? ix[j] + dim : ix[j];
        if (k < 0 || k >= dim)
            return cx_fail(CATTR_ERR_SHAPE, "node '%s' (op %s): index %lld (element %lld of the indices) is out of range "
                           "for a dimension of size %lld (from %lld to %lld)", n->name, op_name(n->op),
                           (long long)ix[j], (long long)j, (long long)dim, (long long)-dim, (long long)dim - 1);
    }
    if (!grad) {
        size_t es = cattr_dtype_size(out->dtype);
        bool widen = cx_dtype_is_storage(data->dtype); /* a checkpoint's table as stored */
        for (int64_t o = 0; o < outer; o++)
            for (int64_t j = 0; j < ni; j++) {
                int64_t k = ix[j] < 0 ? ix[j] + dim : ix[j];
                for (int64_t t = 0; t < inner; t++) {
                    int64_t di = (o * ni + j) * inner + t, si = (o * dim + k) * inner + t;
                    if (widen) put(out, di, get(data, si));
                    else copy_elem(out->data, di, data->data, si, es);
                }
            }
        return CATTR_OK;
    }
    int64_t cnt = cx_view_numel(out);
    if (out->dtype == CATTR_INT64) { /* integer sums are exact in int64 */
        int64_t *y = out->data;
        const int64_t *g = in[0].data;
        for (int64_t i = 0; i < cnt; i++) y[i] = 0;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t j = 0; j < ni; j++) {
                int64_t k = ix[j] < 0 ? ix[j] + dim : ix[j];
                for (int64_t t = 0; t < inner; t++) y[(o * dim + k) * inner + t] += g[(o * ni + j) * inner + t];
            }
        return CATTR_OK;
    }
    double *acc = zeros(cnt);
    if (!acc) return no_memory(n);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < ni; j++) {
            int64_t k = ix[j] < 0 ? ix[j] + dim : ix[j];
            for (int64_t t = 0; t < inner; t++) acc[(o * dim + k) * inner + t] += get(&in[0], (o * ni + j) * inner + t);
        }
    for (int64_t i = 0; i < cnt; i++) put(out, i, acc[i]);
    free(acc);
    return CATTR_OK;
}

/* Slice: (X) -> Y[c] = X[start + c * step] per dim (cx_slice_resolve). SliceGrad: (gY, X) -> zeros of X's shape
 * with gY written into the slice (X read for its shape only). */
static cattr_status k_slice(const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_SLICE_GRAD;
    const cx_view *big = grad ? out : &in[0], *small = grad ? &in[0] : out;
    int nd = big->ndim;
    size_t es = cattr_dtype_size(out->dtype);
    int64_t st[CATTR_MAX_DIMS], sp[CATTR_MAX_DIMS], cnt[CATTR_MAX_DIMS], bstr[CATTR_MAX_DIMS], c[CATTR_MAX_DIMS];
    cx_slice_resolve(&n->a, nd, big->shape, st, sp, cnt);
    strides_of(nd, big->shape, bstr);
    int64_t total = cx_numel(nd, cnt);
    if (cx_view_numel(small) != total)
        return cx_fail(CATTR_ERR_SHAPE, "node '%s' (op %s): the slice has %lld elements, the gradient %lld", n->name,
                       op_name(n->op), (long long)total, (long long)cx_view_numel(small));
    if (grad) memset(out->data, 0, (size_t)cx_view_numel(out) * es);
    for (int64_t i = 0; i < total; i++) {
        unravel(i, nd, cnt, c);
        int64_t off = 0;
        for (int d = 0; d < nd; d++) off += (st[d] + c[d] * sp[d]) * bstr[d];
        if (grad) copy_elem(out->data, off, in[0].data, i, es);
        else copy_elem(out->data, i, in[0].data, off, es);
    }
    return CATTR_OK;
}

/* SeqPick: (X [S, L, C], int64 pos [S] or [S, P]) -> [S, P, C], row (s, p) = X[s, pos[s, p]]. SeqPickGrad: (gY
 * [S, P, C], pos, X) -> zeros of X's shape with gY's rows added at the positions (X read for its shape only). */
static cattr_status k_seq_pick(const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_SEQ_PICK_GRAD;
    const cx_view *big = grad ? out : &in[0];
    const int64_t *pos = in[1].data;
    int64_t S = big->shape[0], L = big->shape[1], C = big->shape[2], P = in[1].ndim == 2 ? in[1].shape[1] : 1;
    for (int64_t i = 0; i < S * P; i++)
        if (pos[i] < 0 || pos[i] >= L)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "node '%s': position %lld outside 0..%lld", n->name,
                           (long long)pos[i], (long long)(L - 1));
    size_t es = cattr_dtype_size(out->dtype);
    if (grad) memset(out->data, 0, (size_t)cx_view_numel(out) * es);
    for (int64_t i = 0; i < S * P; i++)
        for (int64_t c = 0; c < C; c++) {
            int64_t bi = ((i / P) * L + pos[i]) * C + c, si = i * C + c;
            if (!grad) copy_elem(out->data, si, in[0].data, bi, es);
            else if (out->dtype == CATTR_INT64) ((int64_t *)out->data)[bi] += ((const int64_t *)in[0].data)[si];
            else put(out, bi, get(out, bi) + get(&in[0], si));
        }
    return CATTR_OK;
}

/* ---- elementwise ------------------------------------------------------------------------------------------------ */

/* Relu, LeakyRelu (alpha), Sigmoid, Tanh, Clip (alpha = min, beta = max), Neg. */
static cattr_status k_unary(const cg_node *n, const cx_view *in, cx_view *out) {
    const double alpha = attr(out, n->a.alpha), beta = attr(out, n->a.beta);
    for (int64_t i = 0; i < cx_view_numel(out); i++) {
        double x = get(&in[0], i), y = 0;
        switch (n->op) {
        case CG_RELU: y = x > 0 ? x : 0; break;
        case CG_LEAKYRELU: y = x > 0 ? x : x * alpha; break;
        case CG_SIGMOID: y = 1 / (1 + exp(-x)); break;
        case CG_TANH: y = tanh(x); break;
        case CG_CLIP: y = x < alpha ? alpha : x; y = y > beta ? beta : y; break; /* NaN stays NaN */
        case CG_NEG: y = -x; break;
        case CG_ABS: y = fabs(x); break;
        default: return cx_fail(CATTR_ERR_INTERNAL, "node '%s': not a unary op", n->name);
        }
        put(out, i, y);
    }
    return CATTR_OK;
}

/* The elementwise functions of ops/elementwise.h (Sqrt ... Gelu), their gradient UnaryGrad, and Pow / Max / Min with
 * broadcasting and their BinaryGrad: the same double formulas, rounded to the dtype. */
static cattr_status k_ew(const cg_node *n, const cx_view *in, cx_view *out) {
    int nd = out->ndim;
    int64_t c[CATTR_MAX_DIMS];
    for (int64_t i = 0; i < cx_view_numel(out); i++) {
        double y;
        if (n->op == CG_UNARY_GRAD) {
            y = get(&in[1], i) * cx_unary_df((cg_op)n->a.index, get(&in[0], i), n->a.alpha, n->a.beta, (int)n->a.axis);
        } else if (n->op == CG_POW || n->op == CG_MAX || n->op == CG_MIN || n->op == CG_BINARY_GRAD) {
            unravel(i, nd, out->shape, c);
            double a = get(&in[0], bcast_index(nd, c, in[0].ndim, in[0].shape));
            double b = get(&in[1], bcast_index(nd, c, in[1].ndim, in[1].shape));
            y = n->op == CG_BINARY_GRAD ? cx_binary_df((cg_op)n->a.axis, (int)n->a.index, a, b, get(&in[2], i))
                                        : cx_binary_f(n->op, a, b);
        } else {
            y = cx_unary_f(n->op, get(&in[0], i), n->a.alpha, n->a.beta, (int)n->a.index);
        }
        put(out, i, y);
    }
    return CATTR_OK;
}

/* Pad and PadGrad: each output position reads the element cx_pad_source names (or the constant); the gradient adds
 * each position's gradient into that element, in double. */
static cattr_status k_pad(const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_PAD_GRAD;
    const cx_view *x = grad ? &in[1] : &in[0], *y = grad ? &in[0] : out;
    int64_t c[CATTR_MAX_DIMS], cnt = cx_view_numel(y), nx = cx_view_numel(x);
    double *acc = grad ? zeros(nx) : NULL;
    if (grad && !acc) return no_memory(n);
    for (int64_t i = 0; i < cnt; i++) {
        unravel(i, y->ndim, y->shape, c);
        int64_t at = cx_pad_source(c, x->ndim, x->shape, n->a.ints, (int)n->a.index);
        if (grad) {
            if (at >= 0) acc[at] += get(&in[0], i);
        } else {
            put(out, i, at >= 0 ? get(x, at) : attr(out, n->a.alpha));
        }
    }
    for (int64_t i = 0; grad && i < nx; i++) put(out, i, acc[i]);
    free(acc);
    return CATTR_OK;
}

/* ZerosLike: (X) -> zeros of X's shape (X read for its shape only). */
static cattr_status k_zeros(cx_view *out) {
    memset(out->data, 0, (size_t)cx_view_numel(out) * cattr_dtype_size(out->dtype));
    return CATTR_OK;
}

/* (X or Y, gY) -> gX: ReluGrad gY * (X > 0), LeakyReluGrad gY * (X > 0 ? 1 : alpha), SigmoidGrad gY * (1 - Y) * Y,
 * TanhGrad gY * (1 - Y^2), ClipGrad gY where min <= X <= max. */
static cattr_status k_unary_grad(const cg_node *n, const cx_view *in, cx_view *out) {
    const double alpha = attr(out, n->a.alpha), beta = attr(out, n->a.beta);
    for (int64_t i = 0; i < cx_view_numel(out); i++) {
        double x = get(&in[0], i), g = get(&in[1], i), y = 0;
        switch (n->op) {
        case CG_RELU_GRAD: y = x > 0 ? g : 0; break;
        case CG_LEAKYRELU_GRAD: y = x > 0 ? g : g * alpha; break;
        case CG_SIGMOID_GRAD: y = g * (1 - x) * x; break;
        case CG_TANH_GRAD: y = g * (1 - x * x); break;
        case CG_CLIP_GRAD: y = x >= alpha && x <= beta ? g : 0; break;
        case CG_ABS_GRAD: y = x > 0 ? g : x < 0 ? -g : 0; break; /* sign(0) = 0, as torch */
        default: return cx_fail(CATTR_ERR_INTERNAL, "node '%s': not a unary gradient op", n->name);
        }
        put(out, i, y);
    }
    return CATTR_OK;
}

/* Add, Sub, Mul, Div with numpy broadcasting; a fused ReLU (a.fuse_relu) on the result of any of the four. */
static cattr_status k_binary(const cg_node *n, const cx_view *in, cx_view *out) {
    int nd = out->ndim;
    int64_t c[CATTR_MAX_DIMS];
    for (int64_t i = 0; i < cx_view_numel(out); i++) {
        unravel(i, nd, out->shape, c);
        double a = get(&in[0], bcast_index(nd, c, in[0].ndim, in[0].shape));
        double b = get(&in[1], bcast_index(nd, c, in[1].ndim, in[1].shape));
        double y = n->op == CG_ADD ? a + b : n->op == CG_SUB ? a - b : n->op == CG_MUL ? a * b : a / b;
        put(out, i, n->a.fuse_relu ? relu(y) : y);
    }
    return CATTR_OK;
}

/* (gY, X) -> gY summed over the dims X broadcasts along, to X's shape (X read for its shape only). */
static cattr_status k_reduce_sum_like(const cg_node *n, const cx_view *in, cx_view *out) {
    int64_t c[CATTR_MAX_DIMS], cnt = cx_view_numel(out);
    double *acc = zeros(cnt);
    if (!acc) return no_memory(n);
    for (int64_t i = 0; i < cx_view_numel(&in[0]); i++) {
        unravel(i, in[0].ndim, in[0].shape, c);
        acc[bcast_index(in[0].ndim, c, out->ndim, out->shape)] += get(&in[0], i);
    }
    for (int64_t i = 0; i < cnt; i++) put(out, i, acc[i]);
    free(acc);
    return CATTR_OK;
}

/* ReduceSum / ReduceMean: each output the sum in double of the values it reduces, rounded to the dtype (the mean: that
 * rounded sum divided by the count, rounded); ReduceGrad: each input element takes its output's gradient (divided by
 * the count for the mean). */
static cattr_status k_reduce(const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_REDUCE_GRAD, mean = grad ? n->a.axis == 1 : n->op == CG_REDUCE_MEAN;
    const cx_view *x = grad ? &in[1] : &in[0];
    bool red[CATTR_MAX_DIMS];
    if (!cx_reduce_axes(&n->a, x->ndim, red)) return cx_fail(CATTR_ERR_SHAPE, "node '%s': reduction axis out of range", n->name);
    int64_t ksh[CATTR_MAX_DIMS], c[CATTR_MAX_DIMS], cnt = 1;
    for (int d = 0; d < x->ndim; d++) {
        ksh[d] = red[d] ? 1 : x->shape[d];
        cnt *= red[d] ? x->shape[d] : 1;
    }
    int64_t kept = cx_numel(x->ndim, ksh);
    double *acc = zeros(kept);
    if (!acc) return no_memory(n);
    if (grad) {
        for (int64_t i = 0; i < cx_view_numel(x); i++) {
            unravel(i, x->ndim, x->shape, c);
            double g = get(&in[0], bcast_index(x->ndim, c, x->ndim, ksh));
            put(out, i, mean ? rnd(out, g / (double)cnt) : g);
        }
    } else {
        for (int64_t i = 0; i < cx_view_numel(x); i++) {
            unravel(i, x->ndim, x->shape, c);
            acc[bcast_index(x->ndim, c, x->ndim, ksh)] += get(x, i);
        }
        for (int64_t o = 0; o < kept; o++) put(out, o, mean ? rnd(out, rnd(out, acc[o]) / (double)cnt) : acc[o]);
    }
    free(acc);
    return CATTR_OK;
}

/* TorchSum: for every column (o, k) of X = [outer, m, per], its m values in order, summed by cx_torch_sum. */
static cattr_status k_torch_sum(const cg_node *n, const cx_view *in, cx_view *out) {
    const cx_view *x = &in[0];
    int ax = (int)(n->a.ints[0] < 0 ? n->a.ints[0] + x->ndim : n->a.ints[0]);
    int64_t outer = cx_numel(ax, x->shape), m = x->shape[ax], per = cx_numel(x->ndim - ax - 1, x->shape + ax + 1);
    double *col = zeros(m);
    if (!col) return no_memory(n);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < per; k++) {
            for (int64_t i = 0; i < m; i++) col[i] = get(x, (o * m + i) * per + k);
            put(out, o * per + k, cx_torch_sum(x->dtype, col, m, k, per));
        }
    free(col);
    return CATTR_OK;
}

/* ---- matrix products -------------------------------------------------------------------------------------------- */

/* sum over kk < k of a[ia + kk * sa] * b[ib + kk * sb], accumulated in double (a float32 product is exact there) in
 * four interleaved partial sums (kk mod 4) added at the end: the same dot product to within double rounding, at the
 * speed of the adder's pipeline rather than its latency (the language models' vocabulary-wide head is most of this
 * backend's time). The typed loops only spare the per-element dtype switch of get(). */
#define DOT4(A, B) DOT4_OF((double)(A)[(i_) * sa], (double)(B)[(i_) * sb])
/* the same with element i_ of each side given by an expression (a checkpoint's 16-bit B widened) */
#define DOT4_OF(EA, EB)                                                                                                \
    do {                                                                                                               \
        int64_t kk = 0;                                                                                                \
        for (; kk + 4 <= k; kk += 4) {                                                                                 \
            int64_t i_ = kk;                                                                                           \
            s0 += (EA) * (EB);                                                                                         \
            i_ = kk + 1;                                                                                               \
            s1 += (EA) * (EB);                                                                                         \
            i_ = kk + 2;                                                                                               \
            s2 += (EA) * (EB);                                                                                         \
            i_ = kk + 3;                                                                                               \
            s3 += (EA) * (EB);                                                                                         \
        }                                                                                                              \
        for (; kk < k; kk++) {                                                                                         \
            int64_t i_ = kk;                                                                                           \
            s0 += (EA) * (EB);                                                                                         \
        }                                                                                                              \
    } while (0)
static double dot(const cx_view *a, int64_t ia, int64_t sa, const cx_view *b, int64_t ib, int64_t sb, int64_t k) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    if (a->dtype == CATTR_FLOAT32 && b->dtype == CATTR_FLOAT32) {
        const float *pa = (const float *)a->data + ia, *pb = (const float *)b->data + ib;
        DOT4(pa, pb);
    } else if (a->dtype == CATTR_FLOAT64 && b->dtype == CATTR_FLOAT64) {
        const double *pa = (const double *)a->data + ia, *pb = (const double *)b->data + ib;
        DOT4(pa, pb);
    } else if (a->dtype == CATTR_FLOAT32 && cx_dtype_is_storage(b->dtype)) { /* the float32 copy's sum, bit for bit */
        const float *pa = (const float *)a->data + ia;
        const uint16_t *pb = (const uint16_t *)b->data + ib;
        if (b->dtype == CX_BFLOAT16) DOT4_OF((double)pa[i_ * sa], (double)cx_bf16_to_f32(pb[i_ * sb]));
        else DOT4_OF((double)pa[i_ * sa], (double)cx_f16_to_f32(pb[i_ * sb]));
    } else {
        for (int64_t kk = 0; kk < k; kk++) s0 += get(a, ia + kk * sa) * get(b, ib + kk * sb);
    }
    return (s0 + s1) + (s2 + s3);
}

/* Gemm: Y = alpha * op(A) op(B) + beta * C, op = transpose when trans_a / trans_b; C optional, broadcast to [M, N],
 * and not read at all when beta is 0; then the fused ReLU. */
static cattr_status k_gemm(const cg_node *n, const cx_view *in, cx_view *out) {
    const cg_attrs *a = &n->a;
    if (a->bf16)
        return cx_fail(CATTR_ERR_UNSUPPORTED,
                       "node '%s' (op Gemm): bfloat16 products (precision \"high\") are not supported: the cpu-check "
                       "backend computes at full precision only",
                       n->name);
    int64_t m = out->shape[0], nn = out->shape[1], k = a->trans_a ? in[0].shape[0] : in[0].shape[1];
    int64_t lda = in[0].shape[1], ldb = in[1].shape[1];
    bool has_c = n->n_in > 2 && in[2].data && a->beta != 0;
    const double alpha = attr(out, a->alpha), beta = attr(out, a->beta);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < nn; j++) {
            double s = dot(&in[0], a->trans_a ? i : i * lda, a->trans_a ? lda : 1, &in[1], a->trans_b ? j * ldb : j,
                           a->trans_b ? 1 : ldb, k);
            double y = rnd(out, alpha * rnd(out, s)); /* op(A) op(B) is a float32 matrix before C is added */
            if (has_c) {
                int64_t ij[2] = {i, j};
                y += rnd(out, beta * get(&in[2], bcast_index(2, ij, in[2].ndim, in[2].shape)));
            }
            put(out, i * nn + j, a->fuse_relu ? relu(y) : y);
        }
    return CATTR_OK;
}

/* MatMul: numpy matmul (a 1-D A is a row [1, K], a 1-D B a column [K, 1], and those dims are dropped from the
 * result; batch dims broadcast), with the internal transposes trans_a / trans_b of the last two dims; then the fused
 * ReLU. */
static cattr_status k_matmul(const cg_node *n, const cx_view *in, cx_view *out) {
    const cg_attrs *a = &n->a;
    if (a->bf16)
        return cx_fail(CATTR_ERR_UNSUPPORTED,
                       "node '%s' (op MatMul): bfloat16 products (precision \"high\") are not supported: the cpu-check "
                       "backend computes at full precision only",
                       n->name);
    int64_t as[CATTR_MAX_DIMS], bs[CATTR_MAX_DIMS], bat[CATTR_MAX_DIMS];
    int na = in[0].ndim, nb = in[1].ndim, nbat;
    memcpy(as, in[0].shape, sizeof as);
    memcpy(bs, in[1].shape, sizeof bs);
    if (na == 1) { as[1] = as[0]; as[0] = 1; na = 2; }
    if (nb == 1) { bs[1] = 1; nb = 2; }
    int64_t ar = as[na - 2], ac = as[na - 1], br = bs[nb - 2], bc = bs[nb - 1];
    int64_t m = a->trans_a ? ac : ar, k = a->trans_a ? ar : ac, nn = a->trans_b ? br : bc;
    cx_broadcast_shape(na - 2, as, nb - 2, bs, &nbat, bat);
    int64_t nbatch = cx_numel(nbat, bat);
    if (!a->trans_b && !a->trans_a) { /* B's rows are contiguous: stream them once per block of A's rows */
        enum { RB = 8 };
        int64_t blocks = (m + RB - 1) / RB;
        cattr_status st = CATTR_OK;
        #pragma omp parallel for schedule(static) if (nbatch * m * nn * k > (1 << 22))
        for (int64_t bk = 0; bk < nbatch * blocks; bk++) {
            int64_t b = bk / blocks, i0 = (bk % blocks) * RB, i1 = i0 + RB < m ? i0 + RB : m, c[CATTR_MAX_DIMS];
            unravel(b, nbat, bat, c);
            int64_t oa = bcast_index(nbat, c, na - 2, as) * ar * ac, ob = bcast_index(nbat, c, nb - 2, bs) * br * bc;
            double *acc = zeros(RB * nn);
            if (!acc) {
                #pragma omp critical
                st = no_memory(n);
                continue;
            }
            /* acc[r][j] = sum over kk ascending of A[i0 + r, kk] * B[kk, j]: one product chain per output */
            for (int64_t kk = 0; kk < k; kk++)
                for (int64_t i = i0; i < i1; i++) {
                    double aik = get(&in[0], oa + i * ac + kk);
                    double *ar_ = acc + (i - i0) * nn;
                    if (in[1].dtype == CATTR_FLOAT32) {
                        const float *brow = (const float *)in[1].data + ob + kk * bc;
                        for (int64_t j = 0; j < nn; j++) ar_[j] += aik * (double)brow[j];
                    } else if (cx_dtype_is_storage(in[1].dtype)) { /* a checkpoint's matrix as stored */
                        for (int64_t j = 0; j < nn; j++) ar_[j] += aik * get(&in[1], ob + kk * bc + j);
                    } else {
                        const double *brow = (const double *)in[1].data + ob + kk * bc;
                        for (int64_t j = 0; j < nn; j++) ar_[j] += aik * brow[j];
                    }
                }
            for (int64_t i = i0; i < i1; i++)
                for (int64_t j = 0; j < nn; j++) {
                    double v = acc[(i - i0) * nn + j];
                    put(out, (b * m + i) * nn + j, a->fuse_relu ? relu(v) : v);
                }
            free(acc);
        }
        return st;
    }
    /* every output element is one dot product of its own, so rows may be shared among threads without changing a
     * single bit (the language models' vocabulary-wide head is most of this backend's time otherwise) */
    #pragma omp parallel for schedule(static) if (nbatch * m * nn * k > (1 << 22))
    for (int64_t bi = 0; bi < nbatch * m; bi++) {
        int64_t b = bi / m, i = bi % m, c[CATTR_MAX_DIMS];
        unravel(b, nbat, bat, c);
        int64_t oa = bcast_index(nbat, c, na - 2, as) * ar * ac, ob = bcast_index(nbat, c, nb - 2, bs) * br * bc;
        for (int64_t j = 0; j < nn; j++) {
            double s = dot(&in[0], oa + (a->trans_a ? i : i * ac), a->trans_a ? ac : 1, &in[1],
                           ob + (a->trans_b ? j * bc : j), a->trans_b ? 1 : bc, k);
            put(out, bi * nn + j, a->fuse_relu ? relu(s) : s);
        }
    }
    return CATTR_OK;
}

/* ---- convolution and pooling (geometry of cx_geom_init: 3 spatial dims, missing leading ones of size 1) ---------- */

/* Input coordinate of output position o, tap k along geometry dim d; false when it falls in the padding. */
static bool tap(const cx_geom *g, int d, int64_t o, int64_t k, int64_t *i) {
    *i = o * g->s[d] - g->pb[d] + k * g->d[d];
    return *i >= 0 && *i < g->in[d];
}

/* Flat index of spatial position (z, y, x) in plane p of a tensor with spatial extent sp[3]. */
static int64_t at(int64_t p, const int64_t *sp, int64_t z, int64_t y, int64_t x) {
    return ((p * sp[0] + z) * sp[1] + y) * sp[2] + x;
}

/* Conv: (X [N, C, ...], W [M, C/group, k...], [bias M]) -> Y[b, m, o] = bias[m] + sum over the channels c of m's
 * group and the taps k inside the input of W[m, c, k] X[b, c, o * stride - pad_begin + k * dilation]; then the fused
 * ReLU. ConvGradInput: (X, W, gY) -> dX, the adjoint: the same loop nest adding W gY into dX (X read for its shape).
 */
static cattr_status k_conv(const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_CONV_GRAD_INPUT;
    cx_geom g;
    cx_geom_init(&g, &n->a, in[0].shape, in[0].ndim, in[1].shape);
    const int64_t G = n->a.group, cig = g.c_in / G, cog = g.c_out / G;
    const cx_view *w = &in[1], *gy = grad ? &in[2] : NULL;
    const cx_view *bias = !grad && n->n_in > 2 && in[2].data ? &in[2] : NULL;
    double *acc = grad ? zeros(cx_view_numel(out)) : NULL;
    if (grad && !acc) return no_memory(n);
    for (int64_t b = 0; b < g.n; b++)
        for (int64_t m = 0; m < g.c_out; m++)
            for (int64_t oz = 0; oz < g.out[0]; oz++)
                for (int64_t oy = 0; oy < g.out[1]; oy++)
                    for (int64_t ox = 0; ox < g.out[2]; ox++) {
                        int64_t yi = at(b * g.c_out + m, g.out, oz, oy, ox);
                        double s = bias ? get(bias, m) : 0, gv = grad ? get(gy, yi) : 0;
                        for (int64_t c = 0; c < cig; c++)
                            for (int64_t kz = 0; kz < g.k[0]; kz++)
                                for (int64_t ky = 0; ky < g.k[1]; ky++)
                                    for (int64_t kx = 0; kx < g.k[2]; kx++) {
                                        int64_t iz, iy, ix;
                                        if (!tap(&g, 0, oz, kz, &iz) || !tap(&g, 1, oy, ky, &iy) ||
                                            !tap(&g, 2, ox, kx, &ix))
                                            continue;
                                        double wv = get(w, at(m * cig + c, g.k, kz, ky, kx));
                                        int64_t xi = at(b * g.c_in + (m / cog) * cig + c, g.in, iz, iy, ix);
                                        if (grad) acc[xi] += wv * gv;
                                        else s += wv * get(&in[0], xi);
                                    }
                        if (!grad) put(out, yi, n->a.fuse_relu ? relu(s) : s);
                    }
    if (grad) {
        for (int64_t i = 0; i < cx_view_numel(out); i++) put(out, i, acc[i]);
        free(acc);
    }
    return CATTR_OK;
}

/* The window of output position o of plane p: *best gets the flat input index of its maximum (the first in window
 * scan order z, y, x; a NaN replaces the maximum, as in PyTorch) and *sum, *inside the sum and number of its taps
 * inside the input. *best is -1 for a window that holds no input element. */
static void window(const cx_geom *g, const cx_view *x, int64_t p, int64_t oz, int64_t oy, int64_t ox, int64_t *best,
                   double *sum, int64_t *inside) {
    double bv = 0;
    *best = -1;
    *sum = 0;
    *inside = 0;
    for (int64_t kz = 0; kz < g->k[0]; kz++)
        for (int64_t ky = 0; ky < g->k[1]; ky++)
            for (int64_t kx = 0; kx < g->k[2]; kx++) {
                int64_t iz, iy, ix;
                if (!tap(g, 0, oz, kz, &iz) || !tap(g, 1, oy, ky, &iy) || !tap(g, 2, ox, kx, &ix)) continue;
                int64_t xi = at(p, g->in, iz, iy, ix);
                double v = get(x, xi);
                if (*best < 0 || v > bv || isnan(v)) {
                    *best = xi;
                    bv = v;
                }
                *sum += v;
                (*inside)++;
            }
}

/* The divisor of an average window: its taps inside the input, or with count_include_pad every tap inside the
 * padded input (per dim min(start + kernel, size + pad_end) - start, without the dilation). */
static int64_t avg_count(const cg_node *n, const cx_geom *g, int64_t oz, int64_t oy, int64_t ox, int64_t inside) {
    if (!n->a.count_include_pad) return inside;
    int64_t o[3] = {oz, oy, ox}, cnt = 1;
    for (int d = 0; d < 3; d++) {
        int64_t start = o[d] * g->s[d] - g->pb[d], end = start + g->k[d], lim = g->in[d] + g->pe[d];
        cnt *= (end < lim ? end : lim) - start;
    }
    return cnt;
}

/* MaxPool: (X) -> the maximum of each window (-inf for a window without input elements); MaxPoolGrad: (X, gY) -> gY
 * added at each window's maximum. AveragePool: (X) -> the window's sum over avg_count (0 when that is 0);
 * AveragePoolGrad: (X, gY) -> gY / avg_count added at every tap of the window inside the input. */
static cattr_status k_pool(const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_MAXPOOL_GRAD || n->op == CG_AVGPOOL_GRAD;
    bool maxp = n->op == CG_MAXPOOL || n->op == CG_MAXPOOL_GRAD;
    cx_geom g;
    cx_geom_init(&g, &n->a, in[0].shape, in[0].ndim, NULL);
    double *acc = grad ? zeros(cx_view_numel(out)) : NULL;
    if (grad && !acc) return no_memory(n);
    for (int64_t p = 0; p < g.n * g.c_in; p++)
        for (int64_t oz = 0; oz < g.out[0]; oz++)
            for (int64_t oy = 0; oy < g.out[1]; oy++)
                for (int64_t ox = 0; ox < g.out[2]; ox++) {
                    int64_t yi = at(p, g.out, oz, oy, ox), best, inside;
                    double sum;
                    window(&g, &in[0], p, oz, oy, ox, &best, &sum, &inside);
                    if (maxp) {
                        if (!grad) put(out, yi, best >= 0 ? get(&in[0], best) : -INFINITY);
                        else if (best >= 0) acc[best] += get(&in[1], yi);
                        continue;
                    }
                    int64_t cnt = avg_count(n, &g, oz, oy, ox, inside);
                    if (!grad) {
                        put(out, yi, cnt > 0 ? sum / (double)cnt : 0);
                        continue;
                    }
                    if (cnt <= 0) continue;
                    double gv = get(&in[1], yi) / (double)cnt;
                    for (int64_t kz = 0; kz < g.k[0]; kz++)
                        for (int64_t ky = 0; ky < g.k[1]; ky++)
                            for (int64_t kx = 0; kx < g.k[2]; kx++) {
                                int64_t iz, iy, ix;
                                if (tap(&g, 0, oz, kz, &iz) && tap(&g, 1, oy, ky, &iy) && tap(&g, 2, ox, kx, &ix))
                                    acc[at(p, g.in, iz, iy, ix)] += gv;
                            }
                }
    if (grad) {
        for (int64_t i = 0; i < cx_view_numel(out); i++) put(out, i, acc[i]);
        free(acc);
    }
    return CATTR_OK;
}

/* GlobalAveragePool: (X [N, C, ...]) -> the mean of each plane; GapGrad: (X, gY) -> gY / plane size everywhere. */
static cattr_status k_global_avgpool(const cg_node *n, const cx_view *in, cx_view *out) {
    int64_t planes = in[0].shape[0] * in[0].shape[1], sp = planes ? cx_view_numel(&in[0]) / planes : 0;
    for (int64_t p = 0; p < planes; p++) {
        if (n->op == CG_GAP_GRAD) {
            for (int64_t j = 0; j < sp; j++) put(out, p * sp + j, get(&in[1], p) / (double)sp);
            continue;
        }
        double s = 0;
        for (int64_t j = 0; j < sp; j++) s += get(&in[0], p * sp + j);
        put(out, p, s / (double)sp);
    }
    return CATTR_OK;
}

/* ---- softmax, normalisation ------------------------------------------------------------------------------------- */

/* The softmax axis as [outer, len, inner]; a.index == 1 is the legacy (opset < 13) softmax over every dim from the
 * axis on. */
static void axis_split(const cg_node *n, const cx_view *v, int64_t *outer, int64_t *len, int64_t *inner) {
    int ax = (int)(n->a.axis < 0 ? n->a.axis + v->ndim : n->a.axis);
    *outer = cx_numel(ax, v->shape);
    *len = n->a.index == 1 ? cx_numel(v->ndim - ax, v->shape + ax) : v->shape[ax];
    *inner = n->a.index == 1 ? 1 : cx_numel(v->ndim - ax - 1, v->shape + ax + 1);
}

/* Softmax: exp(x - max) / sum(exp(x - max)) along the axis. SoftmaxGrad: (Y, gY) -> Y * (gY - sum(gY * Y)). */
static cattr_status k_softmax(const cg_node *n, const cx_view *in, cx_view *out) {
    int64_t outer, len, inner;
    axis_split(n, &in[0], &outer, &len, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t base = o * len * inner + i;
            if (n->op == CG_SOFTMAX_GRAD) {
                double s = 0;
                for (int64_t j = 0; j < len; j++) s += get(&in[1], base + j * inner) * get(&in[0], base + j * inner);
                for (int64_t j = 0; j < len; j++) {
                    double y = get(&in[0], base + j * inner);
                    put(out, base + j * inner, y * (get(&in[1], base + j * inner) - s));
                }
                continue;
            }
            double mx = len > 0 ? get(&in[0], base) : 0, s = 0;
            for (int64_t j = 1; j < len; j++)
                if (get(&in[0], base + j * inner) > mx) mx = get(&in[0], base + j * inner);
            for (int64_t j = 0; j < len; j++) s += exp(get(&in[0], base + j * inner) - mx);
            for (int64_t j = 0; j < len; j++) put(out, base + j * inner, exp(get(&in[0], base + j * inner) - mx) / s);
        }
    return CATTR_OK;
}

/* BatchNormalization: (X, scale, bias, mean, var); alpha = eps -> (x - mean) / sqrt(var + eps) * scale + bias per
 * channel (dim 1). BatchNormGrad: (gY, scale, var) -> gY * scale / sqrt(var + eps). */
static cattr_status k_batchnorm(const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_BATCHNORM_GRAD;
    const cx_view *scale = &in[1], *var = &in[grad ? 2 : 4];
    int64_t N = in[0].shape[0], C = in[0].shape[1], sp = cx_numel(in[0].ndim - 2, in[0].shape + 2);
    const double eps = attr(out, n->a.alpha);
    for (int64_t b = 0; b < N; b++)
        for (int64_t c = 0; c < C; c++) {
            double inv = 1 / sqrt(get(var, c) + eps);
            for (int64_t j = 0; j < sp; j++) {
                int64_t i = (b * C + c) * sp + j;
                double x = get(&in[0], i);
                put(out, i, grad ? x * get(scale, c) * inv
                                 : (x - get(&in[3], c)) * inv * get(scale, c) + get(&in[2], c));
            }
        }
    return CATTR_OK;
}

/* RMSNorm: (X, W); alpha = eps -> w * x / sqrt(mean(x^2) + eps) over each group of len(W) elements of the last dim.
 * RMSNormGrad: (X, W, gY) -> w g / rms - x sum(x w g) / (D rms^3). */
static cattr_status k_rmsnorm(const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_RMSNORM_GRAD;
    int64_t D = cx_view_numel(&in[1]), rows = D ? cx_view_numel(&in[0]) / D : 0;
    const double eps = attr(out, n->a.alpha);
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0, xwg = 0;
        for (int64_t i = 0; i < D; i++) {
            double x = get(&in[0], r * D + i);
            ss += x * x;
            if (grad) xwg += x * get(&in[1], i) * get(&in[2], r * D + i);
        }
        double rms = sqrt(ss / (double)D + eps);
        for (int64_t i = 0; i < D; i++) {
            double x = get(&in[0], r * D + i), w = get(&in[1], i);
            if (grad) put(out, r * D + i, w * get(&in[2], r * D + i) / rms - x * xwg / ((double)D * rms * rms * rms));
            else put(out, r * D + i, w * (x / rms));
        }
    }
    return CATTR_OK;
}

/* LogSoftmax over the last dim: x - max - log(sum(exp(x - max))). LogSoftmaxGrad: (Y, gY) -> gY - exp(Y) sum(gY). */
static cattr_status k_logsoftmax(const cg_node *n, const cx_view *in, cx_view *out) {
    int64_t D = in[0].shape[in[0].ndim - 1], rows = D ? cx_view_numel(&in[0]) / D : 0;
    for (int64_t r = 0; r < rows; r++) {
        if (n->op == CG_LOGSOFTMAX_GRAD) {
            double s = 0;
            for (int64_t i = 0; i < D; i++) s += get(&in[1], r * D + i);
            for (int64_t i = 0; i < D; i++)
                put(out, r * D + i, get(&in[1], r * D + i) - exp(get(&in[0], r * D + i)) * s);
            continue;
        }
        double mx = get(&in[0], r * D), s = 0;
        for (int64_t i = 1; i < D; i++)
            if (get(&in[0], r * D + i) > mx) mx = get(&in[0], r * D + i);
        for (int64_t i = 0; i < D; i++) s += exp(get(&in[0], r * D + i) - mx);
        for (int64_t i = 0; i < D; i++) put(out, r * D + i, get(&in[0], r * D + i) - (mx + log(s)));
    }
    return CATTR_OK;
}

/* ---- transformer ops -------------------------------------------------------------------------------------------- */

/* RoPE: (X [..., T, heads * d], inv_freq [d/2][, int64 positions, one per row]); ints[0] = d -> each head's halves
 * (x1, x2) rotated by the angle position * inv_freq[m]: (x1 cos - x2 sin, x2 cos + x1 sin); index 1 rotates by the
 * negative angle (the inverse). Without positions row r is at position r mod T. */
static cattr_status k_rope(const cg_node *n, const cx_view *in, cx_view *out) {
    int nd = in[0].ndim;
    int64_t d = n->a.ints[0], half = d / 2, C = in[0].shape[nd - 1], T = in[0].shape[nd - 2];
    int64_t rows = C ? cx_view_numel(&in[0]) / C : 0, heads = C / d;
    const double sgn = n->a.index ? -1 : 1;
    const int64_t *pos = n->n_in > 2 && in[2].data ? in[2].data : NULL;
    if (pos && cx_view_numel(&in[2]) != rows)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "node '%s': %lld positions for %lld rows", n->name,
                       (long long)cx_view_numel(&in[2]), (long long)rows);
    for (int64_t r = 0; pos && r < rows; r++)
        if (pos[r] < 0) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "node '%s': negative position", n->name);
    for (int64_t r = 0; r < rows; r++) {
        int64_t t = pos ? pos[r] : r % T;
        for (int64_t h = 0; h < heads; h++)
            for (int64_t m = 0; m < half; m++) {
                double angle = (double)t * get(&in[1], m), c = cos(angle), s = sgn * sin(angle);
                int64_t i1 = r * C + h * d + m, i2 = i1 + half;
                double x1 = get(&in[0], i1), x2 = get(&in[0], i2);
                put(out, i1, x1 * c - x2 * s);
                put(out, i2, x2 * c + x1 * s);
            }
    }
    return CATTR_OK;
}

/* Where one sequence of a causal attention lives: its query rows row0..row0+len-1 of Q (row stride cq) and of K, V
 * (row stride ck); the P prefix keys and values (rows of pk, pv, same stride) come before its own keys. */
typedef struct {
    const cx_view *q, *k, *v, *pk, *pv;
    int64_t row0, len, P, cq, ck, d;
} att_seq;

/* Element i of key (or value) u of kv head g: prefix rows first, then the sequence's own rows. */
static double att_kv(const att_seq *a, bool value, int64_t u, int64_t g, int64_t i) {
    if (u < a->P) return get(value ? a->pv : a->pk, u * a->ck + g * a->d + i);
    return get(value ? a->v : a->k, (a->row0 + u - a->P) * a->ck + g * a->d + i);
}

/* p[u] for u < P + t + 1: the softmax over the keys query t of head j (kv head g) sees of scale * q . key_u. */
static void att_probs(const att_seq *a, int64_t j, int64_t g, int64_t t, double scale, double *p) {
    int64_t W = a->P + t + 1;
    double mx = -INFINITY, s = 0;
    for (int64_t u = 0; u < W; u++) {
        double dot = 0;
        for (int64_t i = 0; i < a->d; i++) dot += get(a->q, (a->row0 + t) * a->cq + j * a->d + i) * att_kv(a, false, u, g, i);
        p[u] = dot * scale;
        if (p[u] > mx) mx = p[u];
    }
    for (int64_t u = 0; u < W; u++) s += (p[u] = exp(p[u] - mx));
    for (int64_t u = 0; u < W; u++) p[u] /= s;
}

/* One sequence's attention output: row t of head j = sum over u < P + t + 1 of p[u] value_u. */
static void att_forward(const att_seq *a, int64_t nh, int64_t grp, double scale, double *p, cx_view *out) {
    for (int64_t j = 0; j < nh; j++)
        for (int64_t t = 0; t < a->len; t++) {
            int64_t g = j / grp;
            att_probs(a, j, g, t, scale, p);
            for (int64_t i = 0; i < a->d; i++) {
                double o = 0;
                for (int64_t u = 0; u < a->P + t + 1; u++) o += p[u] * att_kv(a, true, u, g, i);
                put(out, (a->row0 + t) * a->cq + j * a->d + i, o);
            }
        }
}

/* Attention: (Q [..., T, nh d], K, V [..., T, nkv d][, prefix K, prefix V [Lp, nkv d], int64 segments [S, 3]]);
 * ints = {nh, nkv, d} -> causal grouped-query attention (query head j uses kv head j / (nh / nkv)), scores scaled by
 * 1 / sqrt(d). With segments (a single flattened sequence [1, N, C]): segment (start, len, P) is the rows
 * start..start+len-1, continuing the first P prefix keys and values; rows outside every segment are 0. The prefix is
 * read only with segments. */
static cattr_status k_attention(const cg_node *n, const cx_view *in, cx_view *out) {
    int nd = in[0].ndim;
    const int64_t nh = n->a.ints[0], nkv = n->a.ints[1], d = n->a.ints[2], grp = nh / nkv;
    const int64_t T = in[0].shape[nd - 2], S = T ? cx_view_numel(&in[0]) / (T * nh * d) : 0;
    const double scale = 1 / sqrt((double)d);
    att_seq a = {&in[0], &in[1], &in[2], NULL, NULL, 0, T, 0, nh * d, nkv * d, d};
    if (n->n_in > 5 && in[5].data) {
        const int64_t *seg = in[5].data, ns = in[5].shape[0], Lp = in[3].shape[0];
        int64_t maxw = 1;
        for (int64_t s = 0; s < ns; s++) {
            int64_t st0 = seg[3 * s], len = seg[3 * s + 1], P = seg[3 * s + 2];
            if (st0 < 0 || len < 0 || st0 + len > T || P < 0 || P > Lp)
                return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "node '%s': segment %lld out of range", n->name,
                               (long long)s);
            if (P + len > maxw) maxw = P + len;
        }
        double *p = zeros(maxw);
        if (!p) return no_memory(n);
        for (int64_t i = 0; i < cx_view_numel(out); i++) put(out, i, 0);
        a.pk = &in[3];
        a.pv = &in[4];
        for (int64_t s = 0; s < ns; s++) {
            a.row0 = seg[3 * s];
            a.len = seg[3 * s + 1];
            a.P = seg[3 * s + 2];
            att_forward(&a, nh, grp, scale, p, out);
        }
        free(p);
        return CATTR_OK;
    }
    double *p = zeros(T);
    if (!p) return no_memory(n);
    for (int64_t s = 0; s < S; s++) {
        a.row0 = s * T;
        att_forward(&a, nh, grp, scale, p, out);
    }
    free(p);
    return CATTR_OK;
}

/* AttentionGrad: (Q, K, V, gO) -> [dQ | dK | dV] packed along the last dim (row stride (nh + 2 nkv) d). Per query t of
 * head j: dp_u = gO_t . v_u, ds_u = p_u (dp_u - sum_w p_w dp_w) / sqrt(d); dQ_t = sum_u ds_u k_u, dK_u += ds_u q_t,
 * dV_u += p_u gO_t (summed over the query heads of the kv group). */
static cattr_status k_attention_grad(const cg_node *n, const cx_view *in, cx_view *out) {
    int nd = in[0].ndim;
    const int64_t nh = n->a.ints[0], nkv = n->a.ints[1], d = n->a.ints[2], grp = nh / nkv;
    const int64_t T = in[0].shape[nd - 2], S = T ? cx_view_numel(&in[0]) / (T * nh * d) : 0;
    const int64_t cq = nh * d, ck = nkv * d, cp = cq + 2 * ck;
    const double scale = 1 / sqrt((double)d);
    double *acc = zeros(cx_view_numel(out)), *p = zeros(T), *ds = zeros(T);
    if (!acc || !p || !ds) {
        free(acc), free(p), free(ds);
        return no_memory(n);
    }
    for (int64_t s = 0; s < S; s++) {
        att_seq a = {&in[0], &in[1], &in[2], NULL, NULL, s * T, T, 0, cq, ck, d};
        for (int64_t j = 0; j < nh; j++)
            for (int64_t t = 0; t < T; t++) {
                int64_t g = j / grp, W = t + 1, row = s * T + t;
                att_probs(&a, j, g, t, scale, p);
                double pdp = 0;
                for (int64_t u = 0; u < W; u++) {
                    double dp = 0;
                    for (int64_t i = 0; i < d; i++) dp += get(&in[3], row * cq + j * d + i) * att_kv(&a, true, u, g, i);
                    ds[u] = dp;
                    pdp += p[u] * dp;
                }
                for (int64_t u = 0; u < W; u++) ds[u] = p[u] * (ds[u] - pdp) * scale;
                for (int64_t u = 0; u < W; u++) {
                    int64_t urow = s * T + u;
                    for (int64_t i = 0; i < d; i++) {
                        acc[row * cp + j * d + i] += ds[u] * att_kv(&a, false, u, g, i);
                        acc[urow * cp + cq + g * d + i] += ds[u] * get(&in[0], row * cq + j * d + i);
                        acc[urow * cp + cq + ck + g * d + i] += p[u] * get(&in[3], row * cq + j * d + i);
                    }
                }
            }
    }
    for (int64_t i = 0; i < cx_view_numel(out); i++) put(out, i, acc[i]);
    free(acc), free(p), free(ds);
    return CATTR_OK;
}

/* ReduceMax / ReduceMin (X) -> Y; ReduceExtGrad (gY, X, Y) -> gX, gY[o] shared evenly among the elements equal to
 * Y[o]. */
static cattr_status k_reduce_ext(const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_REDUCE_EXT_GRAD, mx = n->op == CG_REDUCE_MAX;
    const cx_view *x = grad ? &in[1] : &in[0];
    bool red[CATTR_MAX_DIMS];
    if (!cx_reduce_axes(&n->a, x->ndim, red)) return cx_fail(CATTR_ERR_SHAPE, "node '%s': axis out of range", n->name);
    int64_t c[CATTR_MAX_DIMS], kept = 1, nx = cx_view_numel(x);
    for (int d = 0; d < x->ndim; d++) kept *= red[d] ? 1 : x->shape[d];
    double *acc = zeros(kept);
    if (!acc) return no_memory(n);
    for (int64_t o = 0; o < kept; o++) acc[o] = grad ? 0 : mx ? -INFINITY : INFINITY;
    for (int pass = 0; pass < 2; pass++)
        for (int64_t i = 0; i < nx; i++) {
            unravel(i, x->ndim, x->shape, c);
            int64_t o = 0;
            for (int d = 0; d < x->ndim; d++)
                if (!red[d]) o = o * x->shape[d] + c[d];
            double v = get(x, i);
            if (!grad) {
                if (pass == 0 && (isnan(v) || (!isnan(acc[o]) && (mx ? v > acc[o] : v < acc[o])))) acc[o] = v;
            } else if (pass == 0) {
                acc[o] += v == get(&in[2], o);
            } else {
                put(out, i, v == get(&in[2], o) ? get(&in[0], o) / acc[o] : 0);
            }
        }
    for (int64_t o = 0; !grad && o < kept; o++) put(out, o, acc[o]);
    free(acc);
    return CATTR_OK;
}

/* Resize (X) -> Y, ResizeGrad (gY, X) -> gX: per output element, the weighted input elements it reads. */
static cattr_status k_resize(const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_RESIZE_GRAD;
    const cx_view *x = grad ? &in[1] : &in[0], *y = grad ? &in[0] : out;
    int nd = x->ndim;
    int64_t c[CATTR_MAX_DIMS], ny = cx_view_numel(y), nx = cx_view_numel(x);
    double *acc = grad ? zeros(nx) : NULL;
    if (grad && !acc) return no_memory(n);
    for (int64_t i = 0; i < ny; i++) {
        unravel(i, nd, y->shape, c);
        int64_t lo[2] = {0, 0}, hi[2] = {0, 0};
        double w[2] = {0, 0};
        for (int k = 0; k < nd - 2; k++) { /* k 0: the last dim of a rank-3 input, else dims 2 and 3 */
            int d = 2 + k;
            cx_resize_src(&n->a, c[d], x->shape[d], y->shape[d], cx_resize_scale(&n->a, nd, d, x->shape[d], y->shape[d]),
                          x->dtype == CATTR_FLOAT32, &lo[k], &hi[k], &w[k]);
        }
        double v = 0;
        for (int a0 = 0; a0 < 2; a0++)
            for (int a1 = 0; a1 < (nd == 4 ? 2 : 1); a1++) {
                double wt = (a0 ? w[0] : 1 - w[0]) * (nd == 4 ? (a1 ? w[1] : 1 - w[1]) : 1);
                if (wt == 0) continue;
                int64_t at = (c[0] * x->shape[1] + c[1]) * x->shape[2] + (a0 ? hi[0] : lo[0]);
                if (nd == 4) at = at * x->shape[3] + (a1 ? hi[1] : lo[1]);
                if (grad) acc[at] += wt * get(&in[0], i);
                else v += wt * get(x, at);
            }
        if (!grad) put(out, i, v);
    }
    for (int64_t i = 0; grad && i < nx; i++) put(out, i, acc[i]);
    free(acc);
    return CATTR_OK;
}

/* TileGrad (gY, X) -> gX: for each element of X, the sum of the gradients of its copies. */
static cattr_status k_tile_grad(const cx_view *in, cx_view *out) {
    int64_t c[CATTR_MAX_DIMS], nx = cx_view_numel(out), ng = cx_view_numel(&in[0]);
    double *acc = zeros(nx);
    if (!acc) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory in the cpu-check backend");
    for (int64_t i = 0; i < ng; i++) {
        unravel(i, in[0].ndim, in[0].shape, c);
        int64_t at = 0;
        for (int d = 0; d < out->ndim; d++) at = at * out->shape[d] + c[d] % out->shape[d];
        acc[at] += get(&in[0], i);
    }
    for (int64_t i = 0; i < nx; i++) put(out, i, acc[i]);
    free(acc);
    return CATTR_OK;
}

/* ---- recurrent layers ---------------------------------------------------------------------------------------- */

static double sigm(double x) { return 1 / (1 + exp(-x)); }

/* Element (b, j) of the state before step t of direction d: the initial state (h0 or c0, `k` 0 or 1) when t is the
 * direction's first step, else the stored state of the step before (h at column j, c at column H + j). */
typedef struct rnn_ref {
    const cx_view *x, *w, *r, *bias, *h0, *c0, *states;
    int64_t T, B, In, H, D, G, SW;
    bool lstm, lbr;
} rnn_ref;

static double rnn_prev(const rnn_ref *m, int64_t d, int64_t t, bool rev, int k, int64_t b, int64_t j) {
    bool first = rev ? t == m->T - 1 : t == 0;
    if (first) {
        const cx_view *v = k ? m->c0 : m->h0;
        return v ? get(v, (d * m->B + b) * m->H + j) : 0;
    }
    int64_t tp = rev ? t + 1 : t - 1;
    return get(m->states, ((tp * m->D + d) * m->B + b) * m->SW + k * m->H + j);
}

/* The gates of step t, row b, after their activations (gates[G*H]), and for a GRU the recurrent part of the h gate
 * (rec[H]: h R_h^T + Rb_h, or (r * h) R_h^T + Rb_h without linear_before_reset). */
static void rnn_step_gates(const rnn_ref *m, int64_t d, int64_t t, bool rev, int64_t b, double *gates, double *rec) {
    int64_t H = m->H, GH = m->G * H;
    for (int64_t row = 0; row < GH; row++) {
        double a = 0, hsum = 0;
        for (int64_t i = 0; i < m->In; i++)
            a += get(m->w, (d * GH + row) * m->In + i) * get(m->x, (t * m->B + b) * m->In + i);
        for (int64_t i = 0; i < H; i++)
            hsum += get(m->r, (d * GH + row) * H + i) * rnn_prev(m, d, t, rev, 0, b, i);
        double wb = m->bias ? get(m->bias, d * 2 * GH + row) : 0, rb = m->bias ? get(m->bias, d * 2 * GH + GH + row) : 0;
        if (m->lstm) gates[row] = row >= 3 * H ? tanh(a + hsum + wb + rb) : sigm(a + hsum + wb + rb);
        else if (row < 2 * H) gates[row] = sigm(a + hsum + wb + rb);
        else {
            gates[row] = a + wb;
            rec[row - 2 * H] = hsum + rb;
        }
    }
    if (m->lstm) return;
    for (int64_t j = 0; j < H; j++) {
        if (!m->lbr) { /* (r * h) R_h^T */
            double sum = 0;
            for (int64_t i = 0; i < H; i++)
                sum += get(m->r, (d * GH + 2 * H + j) * H + i) * gates[H + i] * rnn_prev(m, d, t, rev, 0, b, i);
            rec[j] = sum + (m->bias ? get(m->bias, d * 2 * GH + GH + 2 * H + j) : 0);
        }
        gates[2 * H + j] = tanh(gates[2 * H + j] + (m->lbr ? gates[H + j] * rec[j] : rec[j]));
    }
}

/* RNN (X, W, R, bias, h0, c0) -> the states [T, D, B, S]; RNNGrad (gS, S, X, W, R, bias, h0, c0) -> the gradient
 * of X (ints[3] = 0), h0 (1) or c0 (2) by backpropagation through time, with the gates recomputed from the states. */
static cattr_status k_rnn(const cg_node *n, const cx_view *in0, cx_view *out) {
    bool grad = n->op == CG_RNN_GRAD;
    const cx_view *in = grad ? in0 + 2 : in0;
    const int *src = grad ? n->in + 2 : n->in;
    int nin = n->n_in - (grad ? 2 : 0);
    rnn_ref m = {&in[0], &in[1], &in[2], nin > 3 && src[3] >= 0 ? &in[3] : NULL, nin > 4 && src[4] >= 0 ? &in[4] : NULL,
                 nin > 5 && src[5] >= 0 ? &in[5] : NULL, grad ? &in0[1] : out, in[0].shape[0], in[0].shape[1],
                 in[0].shape[2], n->a.ints[0], n->a.ints[1] == 2 ? 2 : 1, n->a.index == 0 ? 4 : 3, 0,
                 n->a.index == 0, n->a.ints[2] != 0};
    int64_t H = m.H, GH = m.G * H, B = m.B;
    m.SW = m.lstm ? 2 * H : H;
    double *gates = zeros(GH), *rec = zeros(H), *dg = zeros(GH), *dh = zeros(B * H), *dc = zeros(B * H), *dhp = zeros(H);
    double *acc = grad ? zeros(cx_view_numel(out)) : NULL;
    cattr_status st = CATTR_OK;
    if (!gates || !rec || !dg || !dh || !dc || !dhp || (grad && !acc)) {
        st = no_memory(n);
        goto done;
    }
    for (int64_t d = 0; d < m.D; d++) {
        bool rev = n->a.ints[1] == 1 || d == 1;
        memset(dh, 0, (size_t)(B * H) * sizeof(double));
        memset(dc, 0, (size_t)(B * H) * sizeof(double));
        for (int64_t s = 0; s < m.T; s++) {
            int64_t k = grad ? m.T - 1 - s : s, t = rev ? m.T - 1 - k : k;
            int64_t at = (t * m.D + d) * B * m.SW;
            for (int64_t b = 0; b < B; b++) {
                rnn_step_gates(&m, d, t, rev, b, gates, rec);
                if (!grad) {
                    for (int64_t j = 0; j < H; j++) {
                        if (m.lstm) {
                            double c = gates[2 * H + j] * rnn_prev(&m, d, t, rev, 1, b, j) + gates[j] * gates[3 * H + j];
                            put(out, at + b * m.SW + H + j, c);
                            put(out, at + b * m.SW + j, gates[H + j] * tanh(rnd(out, c)));
                        } else {
                            double z = gates[j];
                            put(out, at + b * m.SW + j, (1 - z) * gates[2 * H + j] + z * rnn_prev(&m, d, t, rev, 0, b, j));
                        }
                    }
                    continue;
                }
                /* backward through step t: the gates' pre-activation gradients dg, then X's and the state's */
                double *dhb = dh + b * H, *dcb = dc + b * H;
                for (int64_t j = 0; j < H; j++) {
                    double dH = get(&in0[0], at + b * m.SW + j) + dhb[j];
                    if (m.lstm) {
                        double i = gates[j], o = gates[H + j], f = gates[2 * H + j], c = gates[3 * H + j];
                        double tc = tanh(get(m.states, at + b * m.SW + H + j));
                        double dC = get(&in0[0], at + b * m.SW + H + j) + dcb[j] + dH * o * (1 - tc * tc);
                        dg[j] = dC * c * i * (1 - i);
                        dg[H + j] = dH * tc * o * (1 - o);
                        dg[2 * H + j] = dC * rnn_prev(&m, d, t, rev, 1, b, j) * f * (1 - f);
                        dg[3 * H + j] = dC * i * (1 - c * c);
                        dcb[j] = dC * f;
                        dhp[j] = 0;
                    } else {
                        double z = gates[j], ht = gates[2 * H + j];
                        dg[j] = dH * (rnn_prev(&m, d, t, rev, 0, b, j) - ht) * z * (1 - z);
                        dg[2 * H + j] = dH * (1 - z) * (1 - ht * ht);
                        dhp[j] = dH * z;
                    }
                }
                if (!m.lstm) { /* the r gate and the h gate's recurrent part */
                    for (int64_t j = 0; j < H; j++) {
                        double r = gates[H + j];
                        if (m.lbr) {
                            dg[H + j] = dg[2 * H + j] * rec[j] * r * (1 - r);
                            for (int64_t i = 0; i < H; i++)
                                dhp[i] += dg[2 * H + j] * r * get(m.r, (d * GH + 2 * H + j) * H + i);
                        } else {
                            double ds = 0; /* the gradient of (r * h)_j */
                            for (int64_t l = 0; l < H; l++) ds += dg[2 * H + l] * get(m.r, (d * GH + 2 * H + l) * H + j);
                            dg[H + j] = ds * rnn_prev(&m, d, t, rev, 0, b, j) * r * (1 - r);
                            dhp[j] += ds * r;
                        }
                    }
                }
                int64_t nrec = m.lstm ? GH : 2 * H; /* the gates whose pre-activation has h R^T */
                for (int64_t i = 0; i < H; i++) {
                    double sum = 0;
                    for (int64_t row = 0; row < nrec; row++) sum += dg[row] * get(m.r, (d * GH + row) * H + i);
                    dhp[i] += sum;
                }
                for (int64_t i = 0; i < H; i++) dhb[i] = dhp[i];
                if (n->a.ints[3] == 0)
                    for (int64_t i = 0; i < m.In; i++) {
                        double sum = 0;
                        for (int64_t row = 0; row < GH; row++) sum += dg[row] * get(m.w, (d * GH + row) * m.In + i);
                        acc[(t * B + b) * m.In + i] += sum;
                    }
            }
        }
        if (grad && n->a.ints[3] > 0)
            for (int64_t i = 0; i < B * H; i++) acc[d * B * H + i] = n->a.ints[3] == 1 ? dh[i] : dc[i];
    }
    for (int64_t i = 0; grad && i < cx_view_numel(out); i++) put(out, i, acc[i]);
done:
    free(gates);
    free(rec);
    free(dg);
    free(dh);
    free(dc);
    free(dhp);
    free(acc);
    return st;
}

/* SwiGLU: (G, U) -> G sigmoid(G) U. SwiGLUGrad: (G, U, gY); index 1: dU = gY G sigmoid(G); else dG = a s + a G (1 - s)
 * s with a = gY U, s = sigmoid(G). */
static cattr_status k_swiglu(const cg_node *n, const cx_view *in, cx_view *out) {
    for (int64_t i = 0; i < cx_view_numel(out); i++) {
        double g = get(&in[0], i), u = get(&in[1], i), sg = 1 / (1 + exp(-g)), y;
        if (n->op == CG_SWIGLU) {
            y = g * sg * u;
        } else {
            double gy = get(&in[2], i), da = gy * u;
            y = n->a.index == 1 ? gy * (g * sg) : da * sg + da * g * (1 - sg) * sg;
        }
        put(out, i, y);
    }
    return CATTR_OK;
}

/* ---- rule ops: a batch of 2N rows, N actual rows then their N references ----------------------------------------- */

/* DlDelta: (X) -> [Xa - Xr; Xa - Xr]. */
static cattr_status k_dl_delta(const cx_view *in, cx_view *out) {
    int64_t half = cx_view_numel(out) / 2;
    for (int64_t i = 0; i < half; i++) {
        double d = get(&in[0], i) - get(&in[0], half + i);
        put(out, i, d);
        put(out, half + i, d);
    }
    return CATTR_OK;
}

/* DlRescale: (G0, gY, dY, dX); alpha = eps -> where(|dX| < eps, G0, gY dY / dX). */
static cattr_status k_dl_rescale(const cg_node *n, const cx_view *in, cx_view *out) {
    const double eps = attr(out, n->a.alpha);
    for (int64_t i = 0; i < cx_view_numel(out); i++) {
        double dx = get(&in[3], i);
        put(out, i, fabs(dx) < eps ? get(&in[0], i) : get(&in[1], i) * get(&in[2], i) / dx);
    }
    return CATTR_OK;
}

/* DlCenter: (U) -> U - sum(U) / numel(U). */
static cattr_status k_dl_center(const cx_view *in, cx_view *out) {
    int64_t cnt = cx_view_numel(out);
    double s = 0;
    for (int64_t i = 0; i < cnt; i++) s += get(&in[0], i);
    for (int64_t i = 0; i < cnt; i++) put(out, i, get(&in[0], i) - s / (double)cnt);
    return CATTR_OK;
}

/* DlMaxPool: (X, Y, gY, G0); pool attrs, alpha = eps -> DeepLift's max-pool multipliers. With Ya, Yr the actual and
 * reference halves of Y: dOut = [max(Ya, Yr) - Yr; Ya - max(Ya, Yr)] (a NaN in Ya wins the max); P = gY dOut put at
 * each window's maximum of X (assignment: of windows sharing a maximum, the last in scan order wins); then
 * gX = [v; v] with v = where(|Xa - Xr| < eps, G0's first row, (Pa + Pr) / (Xa - Xr)). */
static cattr_status k_dl_maxpool(const cg_node *n, const cx_view *in, cx_view *out) {
    cx_geom g;
    cx_geom_init(&g, &n->a, in[0].shape, in[0].ndim, NULL);
    const int64_t C = g.c_in, half = g.n / 2, cnt = cx_view_numel(out), hn = cnt / 2, row = g.n ? cnt / g.n : 0;
    const double eps = attr(out, n->a.alpha);
    double *u = zeros(cnt);
    if (!u) return no_memory(n);
    for (int64_t p = 0; p < g.n * C; p++) {
        bool actual = p / C < half;
        int64_t pa = actual ? p : p - half * C; /* the plane of the actual row */
        for (int64_t oz = 0; oz < g.out[0]; oz++)
            for (int64_t oy = 0; oy < g.out[1]; oy++)
                for (int64_t ox = 0; ox < g.out[2]; ox++) {
                    int64_t best, inside;
                    double sum;
                    window(&g, &in[0], p, oz, oy, ox, &best, &sum, &inside);
                    if (best < 0) continue;
                    double ya = get(&in[1], at(pa, g.out, oz, oy, ox)), yr = get(&in[1], at(pa + half * C, g.out, oz, oy, ox));
                    double m = ya > yr || isnan(ya) ? ya : yr;
                    u[best] = get(&in[2], at(p, g.out, oz, oy, ox)) * (actual ? m - yr : ya - m);
                }
    }
    for (int64_t i = 0; i < hn; i++) {
        double d = get(&in[0], i) - get(&in[0], hn + i);
        double v = fabs(d) < eps ? get(&in[3], i % row) : (u[i] + u[hn + i]) / d;
        put(out, i, v);
        put(out, hn + i, v);
    }
    free(u);
    return CATTR_OK;
}

/* LrpDiv: (gY, Z); alpha = eps -> gY / (Z + eps sign(Z)), sign(0) = +1. */
static cattr_status k_lrp_div(const cg_node *n, const cx_view *in, cx_view *out) {
    const double eps = attr(out, n->a.alpha);
    for (int64_t i = 0; i < cx_view_numel(out); i++) {
        double z = get(&in[1], i);
        put(out, i, get(&in[0], i) / (z + (z < 0 ? -eps : eps)));
    }
    return CATTR_OK;
}

/* WhereId: out[c] = M[c] == id[c_0] ? B[c] : A[c] over M's shape (A and B broadcast); with row maps, row r of A, B
 * and M is row arow[r], brow[r], mrow[r] (row r without a map). A selection. */
static cattr_status k_where_id(const cg_node *n, const cx_view *in, cx_view *out) {
    const cx_view *m = &in[2];
    int64_t c[CATTR_MAX_DIMS];
    size_t es = cattr_dtype_size(out->dtype);
    if (n->n_in > 4) {
        int64_t R = out->shape[0], per = R ? cx_view_numel(out) / R : 0;
        for (int64_t r = 0; r < R; r++) {
            int64_t row[3];
            for (int k = 0; k < 3; k++) {
                const cx_view *map = n->n_in > 4 + k && in[4 + k].data ? &in[4 + k] : NULL;
                row[k] = map ? (int64_t)get(map, r) : r;
                if (row[k] < 0 || row[k] >= in[k == 2 ? 2 : k].shape[0])
                    return cx_fail(CATTR_ERR_SHAPE, "node '%s' (op WhereId): row map out of range at row %lld",
                                   n->name, (long long)r);
            }
            for (int64_t k = 0; k < per; k++) {
                int64_t mk = ((const int64_t *)m->data)[row[2] * per + k], idr = ((const int64_t *)in[3].data)[r];
                bool pick = n->a.index == 1 ? mk <= idr : mk == idr;
                copy_elem(out->data, r * per + k, in[pick].data, row[pick] * per + k, es);
            }
        }
        return CATTR_OK;
    }
    for (int64_t i = 0; i < cx_view_numel(m); i++) {
        unravel(i, m->ndim, m->shape, c);
        int64_t mk = ((const int64_t *)m->data)[i], idr = ((const int64_t *)in[3].data)[c[0]];
        const cx_view *src = (n->a.index == 1 ? mk <= idr : mk == idr) ? &in[1] : &in[0];
        copy_elem(out->data, i, src->data, bcast_index(m->ndim, c, src->ndim, src->shape), es);
    }
    return CATTR_OK;
}

/* PlaceRows: out[b, k] = v[(ord[b or 0, k] - q0) * B + b] where 0 <= ord - q0 < R / B, else acc[b, k]. */
static cattr_status k_place_rows(const cx_view *in, cx_view *out) {
    int64_t B = out->shape[0], per = B ? cx_view_numel(out) / B : 0, S = B ? in[1].shape[0] / B : 0;
    int64_t q0 = (int64_t)get(&in[3], 0);
    size_t es = cattr_dtype_size(out->dtype);
    for (int64_t b = 0; b < B; b++)
        for (int64_t k = 0; k < per; k++) {
            int64_t j = (int64_t)get(&in[2], (in[2].shape[0] == 1 ? 0 : b) * per + k) - q0;
            if (j >= 0 && j < S) copy_elem(out->data, b * per + k, in[1].data, j * B + b, es);
            else copy_elem(out->data, b * per + k, in[0].data, b * per + k, es);
        }
    return CATTR_OK;
}

/* ---- dispatch --------------------------------------------------------------------------------------------------- */

/* ConstantOfShape, Equal, Where, Expand, through double (int64 values are exact there up to 2^53) or by bytes. */
static cattr_status k_select(const cg_node *n, const cx_view *in, cx_view *out) {
    int64_t c[CATTR_MAX_DIMS];
    size_t es = cattr_dtype_size(out->dtype);
    for (int64_t i = 0; i < cx_view_numel(out); i++) {
        unravel(i, out->ndim, out->shape, c);
        if (n->op == CG_CONSTANT_OF_SHAPE) {
            if (out->dtype == CATTR_INT64) ((int64_t *)out->data)[i] = (int64_t)n->a.alpha;
            else put(out, i, n->a.alpha);
        } else if (n->op == CG_EQUAL) {
            double a = in[0].dtype == CATTR_INT64 ? (double)((const int64_t *)in[0].data)[bcast_index(out->ndim, c, in[0].ndim, in[0].shape)]
                                                  : get(&in[0], bcast_index(out->ndim, c, in[0].ndim, in[0].shape));
            double b = in[1].dtype == CATTR_INT64 ? (double)((const int64_t *)in[1].data)[bcast_index(out->ndim, c, in[1].ndim, in[1].shape)]
                                                  : get(&in[1], bcast_index(out->ndim, c, in[1].ndim, in[1].shape));
            ((int64_t *)out->data)[i] = cx_compare((int)n->a.index, a, b);
        } else if (n->op == CG_TILE) {
            int64_t at = 0;
            for (int d = 0; d < out->ndim; d++) at = at * in[0].shape[d] + c[d] % in[0].shape[d];
            copy_elem(out->data, i, in[0].data, at, es);
        } else {
            const cx_view *src = &in[0];
            if (n->op == CG_WHERE)
                src = ((const int64_t *)in[0].data)[bcast_index(out->ndim, c, in[0].ndim, in[0].shape)] ? &in[1] : &in[2];
            copy_elem(out->data, i, src->data, bcast_index(out->ndim, c, src->ndim, src->shape), es);
        }
    }
    return CATTR_OK;
}

/* Mod (float in double, int64 in int64), Range, ScatterND: one element at a time. */
/* NormalNoise: element k of row r from block I[r] + k of stream S[r], scaled by the float32 standard deviation. */
static cattr_status k_normal_noise(const cg_node *n, const cx_view *in, cx_view *out) {
    int64_t R = out->shape[0], per = R ? cx_view_numel(out) / R : 0;
    float sd = (float)n->a.alpha;
    for (int64_t r = 0; r < R; r++) {
        uint64_t stream = (uint64_t)((const int64_t *)in[0].data)[r]; /* all 64 bits: not through get()'s double */
        int64_t first = ((const int64_t *)in[1].data)[r];
        for (int64_t k = 0; k < per; k++) {
            double z = (float)cx_rng_normal_at((uint64_t)n->a.axis, stream, (uint64_t)(first + k));
            put(out, r * per + k, sd == 0 ? 0.0 : (float)((double)sd * z));
        }
    }
    return CATTR_OK;
}

/* LimeSimilarity: row by row. */
static cattr_status k_lime_similarity(const cg_node *n, const cx_view *in, cx_view *out) {
    int64_t R = in[0].shape[0], m = in[0].shape[1];
    size_t es = cattr_dtype_size(in[0].dtype);
    for (int64_t r = 0; r < R; r++)
        put(out, r, cx_lime_similarity((const char *)in[0].data + (size_t)(r * m) * es,
                                       (const char *)in[1].data + (size_t)(r * m) * es, in[0].dtype, m, n->a.alpha,
                                       n->a.index == 1));
    return CATTR_OK;
}

static cattr_status k_index(const cg_node *n, const cx_view *in, cx_view *out) {
    int64_t cnt = cx_view_numel(out), c[CATTR_MAX_DIMS];
    size_t es = cattr_dtype_size(out->dtype);
    for (int64_t i = 0; i < cnt && n->op != CG_SCATTER_ND; i++) {
        if (n->op == CG_RANGE) {
            ((int64_t *)out->data)[i] = cx_range_at(n->a.ints[0], n->a.ints[2], i);
            continue;
        }
        unravel(i, out->ndim, out->shape, c);
        int64_t ia = bcast_index(out->ndim, c, in[0].ndim, in[0].shape), ib = bcast_index(out->ndim, c, in[1].ndim, in[1].shape);
        if (out->dtype == CATTR_INT64 && n->op != CG_MOD) { /* with the planner's fused ReLU (a model of integers) */
            int64_t y = cx_int_binary(n->op, ((const int64_t *)in[0].data)[ia], ((const int64_t *)in[1].data)[ib]);
            ((int64_t *)out->data)[i] = n->a.fuse_relu && y < 0 ? 0 : y;
        } else if (out->dtype == CATTR_INT64) {
            ((int64_t *)out->data)[i] = cx_mod_i(((const int64_t *)in[0].data)[ia], ((const int64_t *)in[1].data)[ib], (int)n->a.index);
        } else {
            put(out, i, cx_mod_f(get(&in[0], ia), get(&in[1], ib), (int)n->a.index));
        }
    }
    if (n->op != CG_SCATTER_ND) return CATTR_OK;
    const cx_view *ix = &in[1], *u = &in[2];
    int k = (int)ix->shape[ix->ndim - 1];
    for (int64_t i = 0; i < cnt; i++) copy_elem(out->data, i, in[0].data, i, es);
    for (int64_t i = 0; i < cx_view_numel(u); i++) { /* update element i: tuple i / slice, offset i % slice */
        int64_t slice = cx_numel(out->ndim - k, out->shape + k), t = i / slice, at = 0;
        for (int j = 0; j < k; j++) {
            int64_t v = ((const int64_t *)ix->data)[t * k + j];
            if (v < 0) v += out->shape[j];
            if (v < 0 || v >= out->shape[j])
                return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "node '%s' (op ScatterND): an index is out of range for dim %d", n->name, j);
            at = at * out->shape[j] + v;
        }
        copy_elem(out->data, at * slice + i % slice, u->data, i, es);
    }
    return CATTR_OK;
}

/* HostCall: the host function on tensors viewing the inputs (no copy), its output checked against the planned shape
 * and converted into `out`. Also the CPU backend's kernel (its memory is host memory) and the one the cpu-check and
 * cuda backends run on host copies. Never called from a worker thread: inside an active parallel region or on a
 * helper of the task pool it refuses. */
static cattr_status k_host_call(const cg_node *n, const cx_view *in, cx_view *out) {
    const cg_host_fn *h = n->a.host;
    if (n->a.index == 1 || !h)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "node '%s': a model that runs a host function ('%s') has no gradient: use "
                       "a perturbation method, or a forward function cattr can export", n->name, h ? h->name : "?");
    if (omp_in_parallel() || cx_pool_is_helper())
        return cx_fail(CATTR_ERR_INTERNAL, "host function '%s' (node '%s') reached inside a parallel region: cattr "
                       "calls host functions only on the thread that called it, outside parallel regions", h->name,
                       n->name);
    struct cattr_tensor t[CG_MAX_IN];
    const cattr_tensor *tp[CG_MAX_IN];
    for (int i = 0; i < n->n_in; i++) {
        memset(&t[i], 0, sizeof t[i]);
        t[i].dtype = in[i].dtype;
        t[i].ndim = in[i].ndim;
        memcpy(t[i].shape, in[i].shape, sizeof t[i].shape);
        t[i].numel = cx_view_numel(&in[i]);
        t[i].data = in[i].data;
        t[i].borrowed = true;
        tp[i] = &t[i];
    }
    cattr_tensor *res = NULL;
    cg_host_clear_error();
    int st = h->fn(h->user, n->n_in, tp, &res);
    char s1[128], s2[128], s3[512] = "";
    if (st != CATTR_OK) {
        cattr_tensor_free(res);
        const char *msg = cg_host_error();
        return cx_fail(cx_host_status(st), "host function '%s' failed: %s", h->name,
                       msg && *msg ? msg : cattr_status_string(cx_host_status(st)));
    }
    if (!res) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "host function '%s' returned no output", h->name);
    cattr_status rs = CATTR_OK;
    if (!cx_shape_eq(res->ndim, res->shape, out->ndim, out->shape)) {
        for (int i = 0; i < n->n_in; i++) {
            size_t off = strlen(s3);
            snprintf(s3 + off, sizeof s3 - off, "%s%s", i ? ", " : "", cx_shape_str(in[i].ndim, in[i].shape, s1, sizeof s1));
        }
        rs = cx_fail(CATTR_ERR_SHAPE, "host function '%s' returned an output of shape %s; its shape function gave %s for "
                     "input shapes %s", h->name, cx_shape_str(res->ndim, res->shape, s1, sizeof s1),
                     cx_shape_str(out->ndim, out->shape, s2, sizeof s2), s3);
    } else if (res->dtype != CATTR_FLOAT32 && res->dtype != CATTR_FLOAT64 && res->dtype != CATTR_INT64) {
        rs = cx_fail(CATTR_ERR_DTYPE, "host function '%s' returned an output of dtype %d", h->name, (int)res->dtype);
    } else if (res->dtype == out->dtype) {
        if (res->numel) memcpy(out->data, res->data, (size_t)res->numel * cattr_dtype_size(res->dtype));
    } else {
        cx_view v = {res->dtype, res->ndim, {0}, res->data};
        for (int64_t k = 0; k < res->numel; k++) put(out, k, get(&v, k));
    }
    cattr_tensor_free(res);
    return rs;
}

cattr_status cx_check_run_op(const cg_node *n, const cx_view *in, cx_view *out) {
    switch (n->op) { /* data movement: every dtype */
    case CG_HOST_CALL: return k_host_call(n, in, out);
    case CG_IDENTITY: case CG_RESHAPE: case CG_FLATTEN: case CG_UNSQUEEZE: case CG_SQUEEZE: case CG_RESHAPE_LIKE:
        return k_copy(&in[0], out);
    case CG_TRANSPOSE: return k_transpose(n, &in[0], out);
    case CG_CONCAT: return k_concat(n, in, out);
    case CG_CONCAT_GRAD: return k_concat_grad(n, in, out);
    case CG_GATHER: case CG_GATHER_GRAD: return k_gather(n, in, out);
    case CG_SLICE: case CG_SLICE_GRAD: return k_slice(n, in, out);
    case CG_SEQ_PICK: case CG_SEQ_PICK_GRAD: return k_seq_pick(n, in, out);
    case CG_WHERE_ID: return k_where_id(n, in, out); /* selections: int64 too (the perturbation methods' inputs) */
    case CG_PLACE_ROWS: return k_place_rows(in, out);
    case CG_SHAPE: { /* X's dims from start; Size: its element count */
        if (n->a.index == 1) {
            *(int64_t *)out->data = cx_view_numel(&in[0]);
            return CATTR_OK;
        }
        int64_t lo = n->a.n_ints > 0 ? n->a.ints[0] : 0;
        if (lo < 0) lo += in[0].ndim;
        if (lo < 0) lo = 0;
        for (int64_t k = 0; k < out->shape[0]; k++) ((int64_t *)out->data)[k] = in[0].shape[lo + k];
        return CATTR_OK;
    }
    case CG_CONSTANT_OF_SHAPE: case CG_EQUAL: case CG_WHERE: case CG_EXPAND: case CG_TILE: return k_select(n, in, out);
    case CG_MOD: case CG_RANGE: case CG_SCATTER_ND: return k_index(n, in, out);
    case CG_NORMAL_NOISE: return k_normal_noise(n, in, out);
    case CG_LIME_SIMILARITY: return k_lime_similarity(n, in, out);
    case CG_IF: { /* element by element from the branch taken; zeros for an absent branch */
        double c = in[0].dtype == CATTR_INT64 ? (double)((const int64_t *)in[0].data)[0] : get(&in[0], 0);
        int j = c != 0 ? 1 : 2;
        size_t es = cattr_dtype_size(out->dtype);
        for (int64_t k = 0; k < cx_view_numel(out); k++) {
            if (n->in[j] < 0) memset((char *)out->data + (size_t)k * es, 0, es);
            else memcpy((char *)out->data + (size_t)k * es, (const char *)in[j].data + (size_t)k * es, es);
        }
        return CATTR_OK;
    }
    case CG_ADD: case CG_SUB: case CG_MUL: case CG_DIV:
        if (out->dtype == CATTR_INT64) return k_index(n, in, out);
        break;
    case CG_RELU: case CG_NEG: case CG_ABS: /* int64: a model of integers (the perturbation methods' int64 inputs) */
        if (out->dtype != CATTR_INT64) break;
        for (int64_t k = 0; k < cx_view_numel(out); k++) {
            int64_t x = ((const int64_t *)in[0].data)[k];
            ((int64_t *)out->data)[k] = n->op == CG_RELU ? (x > 0 ? x : 0) : n->op == CG_NEG ? -x : (x < 0 ? -x : x);
        }
        return CATTR_OK;
    case CG_CAST: /* through double; to int64 truncating toward zero */
        for (int64_t k = 0; k < cx_view_numel(out); k++) {
            if (out->dtype == CATTR_INT64)
                ((int64_t *)out->data)[k] = in[0].dtype == CATTR_INT64 ? ((const int64_t *)in[0].data)[k] : (int64_t)get(&in[0], k);
            else
                put(out, k, in[0].dtype == CATTR_INT64 ? (double)((const int64_t *)in[0].data)[k] : get(&in[0], k));
        }
        return CATTR_OK;
    default: break;
    }
    if ((unsigned)n->op < (unsigned)CG_OP_COUNT && out->dtype != CATTR_FLOAT32 && out->dtype != CATTR_FLOAT64)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "node '%s' (op %s): %s data is not supported by this op", n->name,
                       op_name(n->op), cattr_dtype_name(out->dtype));
    switch (n->op) {
    case CG_RELU: case CG_LEAKYRELU: case CG_SIGMOID: case CG_TANH: case CG_CLIP: case CG_NEG: case CG_ABS:
        return k_unary(n, in, out);
    case CG_ZEROS_LIKE: return k_zeros(out);
    case CG_RELU_GRAD: case CG_LEAKYRELU_GRAD: case CG_SIGMOID_GRAD: case CG_TANH_GRAD: case CG_CLIP_GRAD: case CG_ABS_GRAD:
        return k_unary_grad(n, in, out);
    case CG_ADD: case CG_SUB: case CG_MUL: case CG_DIV: return k_binary(n, in, out);
    case CG_REDUCE_SUM_LIKE: return k_reduce_sum_like(n, in, out);
    case CG_REDUCE_SUM: case CG_REDUCE_MEAN: case CG_REDUCE_GRAD: return k_reduce(n, in, out);
    case CG_TORCH_SUM: return k_torch_sum(n, in, out);
    case CG_SQRT: case CG_EXP: case CG_LOG: case CG_ERF: case CG_RECIPROCAL: case CG_HARDSIGMOID: case CG_HARDSWISH:
    case CG_SOFTPLUS: case CG_ELU: case CG_SELU: case CG_GELU: case CG_UNARY_GRAD: case CG_POW: case CG_MAX: case CG_MIN:
    case CG_BINARY_GRAD:
        return k_ew(n, in, out);
    case CG_PAD: case CG_PAD_GRAD: return k_pad(n, in, out);
    case CG_RNN: case CG_RNN_GRAD: return k_rnn(n, in, out);
    case CG_TILE_GRAD: return k_tile_grad(in, out);
    case CG_RESIZE: case CG_RESIZE_GRAD: return k_resize(n, in, out);
    case CG_REDUCE_MAX: case CG_REDUCE_MIN: case CG_REDUCE_EXT_GRAD: return k_reduce_ext(n, in, out);
    case CG_GEMM: return k_gemm(n, in, out);
    case CG_MATMUL: return k_matmul(n, in, out);
    case CG_CONV: case CG_CONV_GRAD_INPUT: return k_conv(n, in, out);
    case CG_MAXPOOL: case CG_AVGPOOL: case CG_MAXPOOL_GRAD: case CG_AVGPOOL_GRAD: return k_pool(n, in, out);
    case CG_GLOBALAVGPOOL: case CG_GAP_GRAD: return k_global_avgpool(n, in, out);
    case CG_SOFTMAX: case CG_SOFTMAX_GRAD: return k_softmax(n, in, out);
    case CG_BATCHNORM: case CG_BATCHNORM_GRAD: return k_batchnorm(n, in, out);
    case CG_RMSNORM: case CG_RMSNORM_GRAD: return k_rmsnorm(n, in, out);
    case CG_ROPE: return k_rope(n, in, out);
    case CG_ATTENTION: return k_attention(n, in, out);
    case CG_ATTENTION_GRAD: return k_attention_grad(n, in, out);
    case CG_LOGSOFTMAX: case CG_LOGSOFTMAX_GRAD: return k_logsoftmax(n, in, out);
    case CG_SWIGLU: case CG_SWIGLU_GRAD: return k_swiglu(n, in, out);
    case CG_DL_DELTA: return k_dl_delta(in, out);
    case CG_DL_RESCALE: return k_dl_rescale(n, in, out);
    case CG_DL_CENTER: return k_dl_center(in, out);
    case CG_DL_MAXPOOL: return k_dl_maxpool(n, in, out);
    case CG_LRP_DIV: return k_lrp_div(n, in, out);
    default: break;
    }
    return cx_fail(CATTR_ERR_UNSUPPORTED, "node '%s': the cpu-check backend has no kernel for op %s", n->name,
                   op_name(n->op));
}
