/* shape.c - shape inference for every op of the IR, run by the planner for concrete input shapes. */
#include "ops.h"
#include "ops/elementwise.h"

#include <stdio.h>
#include <string.h>

bool cx_broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int *nout, int64_t *out) {
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int64_t da = i < n - na ? 1 : a[i - (n - na)];
        int64_t db = i < n - nb ? 1 : b[i - (n - nb)];
        if (da != db && da != 1 && db != 1) return false;
        out[i] = da == 1 ? db : da;
    }
    *nout = n;
    return true;
}

void cx_geom_init(cx_geom *g, const cg_attrs *a, const int64_t *x, int xnd, const int64_t *w) {
    int nsp = xnd - 2, off = 3 - nsp;
    g->n = x[0];
    g->c_in = x[1];
    g->c_out = w ? w[0] : x[1];
    for (int i = 0; i < 3; i++) {
        g->in[i] = 1; g->k[i] = 1; g->s[i] = 1; g->d[i] = 1; g->pb[i] = 0; g->pe[i] = 0;
    }
    for (int i = 0; i < nsp; i++) {
        g->in[off + i] = x[2 + i];
        g->k[off + i] = w ? w[2 + i] : a->kernel[i];
        g->s[off + i] = a->stride[i];
        g->d[off + i] = a->dilation[i] ? a->dilation[i] : 1;
        g->pb[off + i] = a->pad[i];
        g->pe[off + i] = a->pad[nsp + i];
        if (a->auto_pad) { /* SAME: out = ceil(in / stride), the pads it takes split evenly, the odd one at the end
                            * (SAME_UPPER) or the beginning (SAME_LOWER) */
            int64_t in = g->in[off + i], s = g->s[off + i], o = (in + s - 1) / s;
            int64_t total = (o - 1) * s + g->d[off + i] * (g->k[off + i] - 1) + 1 - in;
            if (total < 0) total = 0;
            g->pb[off + i] = a->auto_pad == 1 ? total / 2 : total - total / 2;
            g->pe[off + i] = total - g->pb[off + i];
        }
    }
    for (int i = 0; i < 3; i++) {
        int64_t span = g->in[i] + g->pb[i] + g->pe[i] - g->d[i] * (g->k[i] - 1) - 1;
        int64_t o;
        if (a->ceil_mode && !w) {
            o = (span + g->s[i] - 1) / g->s[i] + 1;
            /* the last window must start inside the input or the begin padding */
            if ((o - 1) * g->s[i] >= g->in[i] + g->pb[i]) o--;
        } else {
            o = span >= 0 ? span / g->s[i] + 1 : 0;
        }
        g->out[i] = o;
    }
}

void cx_slice_resolve(const cg_attrs *a, int ndim, const int64_t *shape, int64_t *start, int64_t *step,
                      int64_t *count) {
    for (int d = 0; d < ndim; d++) {
        start[d] = 0;
        step[d] = 1;
        count[d] = shape[d];
    }
    int n = a->n_ints / 4;
    for (int i = 0; i < n; i++) {
        int64_t st = a->ints[i], en = a->ints[n + i], ax = a->ints[2 * n + i], sp = a->ints[3 * n + i];
        if (ax < 0) ax += ndim;
        if (ax < 0 || ax >= ndim || sp == 0) continue;
        int64_t dim = shape[ax];
        if (st < 0) st += dim;
        if (en < 0) en += dim;
        if (sp > 0) {
            st = st < 0 ? 0 : (st > dim ? dim : st);
            en = en < 0 ? 0 : (en > dim ? dim : en);
            count[ax] = en > st ? (en - st + sp - 1) / sp : 0;
        } else {
            st = st < 0 ? -1 : (st > dim - 1 ? dim - 1 : st);
            en = en < -1 ? -1 : (en > dim - 1 ? dim - 1 : en);
            count[ax] = st > en ? (st - en + (-sp) - 1) / (-sp) : 0;
        }
        start[ax] = st;
        step[ax] = sp;
    }
}

#define SHAPE_FAIL(...) return shape_fail(n, in, __VA_ARGS__)

/* Pads beyond 2^40 elements cannot make a tensor that fits in memory; refusing them keeps the sums below exact. */
#define MAX_PAD ((int64_t)1 << 40)
static bool pad_ok(int64_t p) { return p >= -MAX_PAD && p <= MAX_PAD; }

static cattr_status shape_fail(const cg_node *n, const cx_view *in, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cattr_status shape_fail(const cg_node *n, const cx_view *in, const char *fmt, ...) {
    char msg[512], shapes[512] = "", buf[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t off = 0;
    for (int i = 0; i < n->n_in && off < sizeof shapes; i++) {
        if (!in[i].data && in[i].ndim == 0 && n->in[i] < 0) continue;
        off += (size_t)snprintf(shapes + off, sizeof shapes - off, "%s%s", i ? ", " : "",
                                cx_shape_str(in[i].ndim, in[i].shape, buf, sizeof buf));
    }
    return cx_fail(CATTR_ERR_SHAPE, "node '%s' (op %s): %s (input shapes %s)", n->name, cg_op_names[n->op], msg,
                   shapes);
}

static void copy_shape(cx_view *out, const cx_view *src) {
    out->ndim = src->ndim;
    memcpy(out->shape, src->shape, sizeof out->shape);
}

static int norm_axis(int64_t axis, int ndim) { return (int)(axis < 0 ? axis + ndim : axis); }

bool cx_reduce_axes(const cg_attrs *a, int nd, bool *red) {
    for (int d = 0; d < nd; d++) red[d] = a->n_ints == 0;
    for (int k = 0; k < a->n_ints; k++) {
        int64_t ax = a->ints[k] < 0 ? a->ints[k] + nd : a->ints[k];
        if (ax < 0 || ax >= nd) return false;
        red[ax] = true;
    }
    return true;
}

cattr_status cx_host_status(int st) {
    return st > CATTR_OK && st <= CATTR_ERR_CANCELLED ? (cattr_status)st : CATTR_ERR_INVALID_ARGUMENT;
}

/* HostCall: the output shape its host function's shape function gives for these input shapes (a float output; the
 * planner gives it the call's float dtype). The gradient of a HostCall (index 1) is refused here, when a method plans
 * it. */
/* MapRows: the inputs' rows in passes (every input the same number of passes, each pass the body's input shape),
 * the output the body's one-pass output per pass, stacked. */
static cattr_status map_rows_shape(const cg_node *n, const cx_view *in, cx_view *out) {
    const cg_map *m = n->a.map;
    if (!m || m->n_in != n->n_in) SHAPE_FAIL("no body");
    int64_t passes = -1;
    for (int k = 0; k < n->n_in; k++) {
        char s1[128], s2[128];
        bool ok = in[k].ndim == m->in_ndim[k] && in[k].ndim > 0 && in[k].shape[0] % m->in_rows[k] == 0;
        for (int d = 1; ok && d < in[k].ndim; d++) ok = in[k].shape[d] == m->in_shape[k][d];
        if (!ok) {
            cx_shape_str(in[k].ndim, in[k].shape, s1, sizeof s1);
            cx_shape_str(m->in_ndim[k], m->in_shape[k], s2, sizeof s2);
            return cx_fail(CATTR_ERR_SHAPE, "node '%s': input %d has shape %s; the model, exported with a fixed batch "
                           "it could not be re-batched from, runs passes of %s (a multiple of %lld rows)", n->name, k,
                           s1, s2, (long long)m->in_rows[k]);
        }
        int64_t q = in[k].shape[0] / m->in_rows[k];
        if (passes >= 0 && q != passes) SHAPE_FAIL("inputs with different numbers of passes (%lld, %lld)",
                                                   (long long)passes, (long long)q);
        passes = q;
    }
    out->ndim = m->out_ndim;
    memcpy(out->shape, m->out_shape, sizeof out->shape);
    out->shape[0] *= passes;
    out->dtype = CATTR_FLOAT32;
    return CATTR_OK;
}

static cattr_status host_call_shape(const cg_node *n, const cx_view *in, cx_view *out) {
    const cg_host_fn *h = n->a.host;
    if (n->a.index == 1)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "node '%s': a model that runs a host function ('%s') has no gradient: use "
                       "a perturbation method, or a forward function cattr can export", n->name, h ? h->name : "?");
    if (!h) SHAPE_FAIL("no host function");
    int nd[CG_MAX_IN];
    int64_t sh[CG_MAX_IN * CATTR_MAX_DIMS];
    memset(sh, 0, sizeof sh);
    for (int i = 0; i < n->n_in; i++) {
        nd[i] = in[i].ndim;
        memcpy(sh + i * CATTR_MAX_DIMS, in[i].shape, (size_t)in[i].ndim * sizeof(int64_t));
    }
    int ond = -1;
    int64_t os[CATTR_MAX_DIMS];
    memset(os, 0, sizeof os);
    cg_host_clear_error();
    int st = h->shape(h->user, n->n_in, nd, sh, &ond, os);
    if (st != CATTR_OK) {
        const char *msg = cg_host_error();
        return cx_fail(cx_host_status(st), "host function '%s': its shape function failed: %s", h->name,
                       msg && *msg ? msg : cattr_status_string(cx_host_status(st)));
    }
    if (ond < 0 || ond > CATTR_MAX_DIMS) SHAPE_FAIL("host function '%s': its shape function gave rank %d", h->name, ond);
    for (int d = 0; d < ond; d++)
        if (os[d] < 0) SHAPE_FAIL("host function '%s': its shape function gave size %lld", h->name, (long long)os[d]);
    out->ndim = ond;
    memcpy(out->shape, os, sizeof out->shape);
    out->dtype = CATTR_FLOAT32;
    return CATTR_OK;
}

cattr_status cx_infer(const cg_node *n, const cx_view *in, cx_view *out) {
    const cg_attrs *a = &n->a;
    out->dtype = n->n_in > 0 ? in[0].dtype : CATTR_FLOAT32;
    switch (n->op) {
    case CG_IDENTITY: case CG_RELU: case CG_LEAKYRELU: case CG_SIGMOID: case CG_TANH: case CG_CLIP: case CG_NEG:
    case CG_ZEROS_LIKE: case CG_ABS: case CG_SQRT: case CG_EXP: case CG_LOG: case CG_ERF: case CG_RECIPROCAL:
    case CG_HARDSIGMOID: case CG_HARDSWISH: case CG_SOFTPLUS: case CG_ELU: case CG_SELU: case CG_GELU:
        copy_shape(out, &in[0]);
        return CATTR_OK;
    case CG_SHAPE: {
        if (a->index == 1) { /* Size */
            out->dtype = CATTR_INT64;
            out->ndim = 0;
            return CATTR_OK;
        }
        int64_t lo = a->n_ints > 0 ? a->ints[0] : 0, hi = a->n_ints > 1 ? a->ints[1] : in[0].ndim;
        if (lo < 0) lo += in[0].ndim;
        if (hi < 0) hi += in[0].ndim;
        lo = lo < 0 ? 0 : lo > in[0].ndim ? in[0].ndim : lo;
        hi = hi < lo ? lo : hi > in[0].ndim ? in[0].ndim : hi;
        out->dtype = CATTR_INT64;
        out->ndim = 1;
        out->shape[0] = hi - lo;
        return CATTR_OK;
    }
    case CG_CONSTANT_OF_SHAPE:
        if (n->n_in > 0 && in[0].data) SHAPE_FAIL("the shape is not known when the call is planned");
        if (a->n_ints > CATTR_MAX_DIMS) SHAPE_FAIL("%d dims", a->n_ints);
        out->ndim = a->n_ints;
        for (int d = 0; d < a->n_ints; d++) {
            if (a->ints[d] < 0) SHAPE_FAIL("negative size %lld", (long long)a->ints[d]);
            out->shape[d] = a->ints[d];
        }
        out->dtype = a->index ? CATTR_INT64 : CATTR_FLOAT32;
        return CATTR_OK;
    case CG_EXPAND: {
        if (n->n_in > 1) SHAPE_FAIL("the target shape is not known when the call is planned");
        if (!cx_broadcast_shape(in[0].ndim, in[0].shape, a->n_ints, a->ints, &out->ndim, out->shape))
            SHAPE_FAIL("the shape does not broadcast with the input");
        return CATTR_OK;
    }
    case CG_EQUAL:
        if (a->index < 0 || a->index >= CX_CMP_COUNT) SHAPE_FAIL("unknown comparison %lld", (long long)a->index);
        if (!cx_broadcast_shape(in[0].ndim, in[0].shape, in[1].ndim, in[1].shape, &out->ndim, out->shape))
            SHAPE_FAIL("operands do not broadcast");
        out->dtype = CATTR_INT64;
        return CATTR_OK;
    case CG_IF: {
        if (n->n_in != 3) SHAPE_FAIL("an If takes a condition and two branch values");
        if (cx_view_numel(&in[0]) != 1) SHAPE_FAIL("the condition has %lld elements, not one", (long long)cx_view_numel(&in[0]));
        if (n->in[1] < 0 && n->in[2] < 0) SHAPE_FAIL("both branch values are absent");
        const cx_view *x = &in[n->in[1] >= 0 ? 1 : 2];
        if (n->in[1] >= 0 && n->in[2] >= 0 &&
            (in[1].dtype != in[2].dtype || in[1].ndim != in[2].ndim ||
             memcmp(in[1].shape, in[2].shape, (size_t)in[1].ndim * sizeof *in[1].shape) != 0))
            SHAPE_FAIL("the branches give values of different shapes or dtypes (a condition known only when the call "
                       "runs needs branches of one shape)");
        copy_shape(out, x);
        out->dtype = x->dtype;
        return CATTR_OK;
    }
    case CG_WHERE: {
        int nd;
        int64_t sh[CATTR_MAX_DIMS];
        if (!cx_broadcast_shape(in[1].ndim, in[1].shape, in[2].ndim, in[2].shape, &nd, sh) ||
            !cx_broadcast_shape(in[0].ndim, in[0].shape, nd, sh, &out->ndim, out->shape))
            SHAPE_FAIL("condition and values do not broadcast");
        if (in[1].dtype != in[2].dtype) SHAPE_FAIL("the two value dtypes differ");
        out->dtype = in[1].dtype;
        return CATTR_OK;
    }
    case CG_CAST:
        copy_shape(out, &in[0]);
        out->dtype = a->index ? CATTR_INT64 : in[0].dtype == CATTR_INT64 ? CATTR_FLOAT32 : in[0].dtype;
        return CATTR_OK;
    case CG_PAD: case CG_PAD_GRAD: {
        const cx_view *x = n->op == CG_PAD ? &in[0] : &in[1];
        if (n->n_in > (n->op == CG_PAD ? 1 : 2)) SHAPE_FAIL("the pads are not known when the call is planned");
        if (a->n_ints != 2 * x->ndim) SHAPE_FAIL("%d pads for an input of rank %d", a->n_ints, x->ndim);
        if (n->op == CG_PAD_GRAD) {
            copy_shape(out, x);
            out->dtype = in[0].dtype;
            return CATTR_OK;
        }
        copy_shape(out, x);
        for (int d = 0; d < x->ndim; d++) {
            if (!pad_ok(a->ints[d]) || !pad_ok(a->ints[x->ndim + d]))
                SHAPE_FAIL("pads of dim %d exceed %lld in size", d, (long long)MAX_PAD);
            out->shape[d] = x->shape[d] + a->ints[d] + a->ints[x->ndim + d];
            if (out->shape[d] < 0) SHAPE_FAIL("pads crop dim %d below 0", d);
            if (a->index == 1 && (a->ints[d] >= x->shape[d] || a->ints[x->ndim + d] >= x->shape[d]))
                SHAPE_FAIL("reflect pads of dim %d must be below its size %lld", d, (long long)x->shape[d]);
            if (a->index != 0 && x->shape[d] == 0 && out->shape[d] > 0) SHAPE_FAIL("cannot pad an empty dim %d", d);
        }
        return CATTR_OK;
    }
    case CG_RESIZE: case CG_RESIZE_GRAD: {
        const cx_view *x = n->op == CG_RESIZE ? &in[0] : &in[1];
        if (n->op == CG_RESIZE && n->n_in > 1) SHAPE_FAIL("the sizes are not known when the call is planned");
        if (x->ndim != 3 && x->ndim != 4) SHAPE_FAIL("inputs of rank 3 or 4 are supported");
        copy_shape(out, x);
        if (n->op == CG_RESIZE_GRAD) {
            out->dtype = in[0].dtype;
            return CATTR_OK;
        }
        if (a->n_ints > 0) {
            if (a->n_ints != x->ndim) SHAPE_FAIL("%d sizes for rank %d", a->n_ints, x->ndim);
            for (int d = 0; d < x->ndim; d++) {
                if (d < 2 && a->ints[d] != x->shape[d]) SHAPE_FAIL("only the spatial dims can be resized");
                if (a->ints[d] < 0 || a->ints[d] > ((int64_t)1 << 40)) SHAPE_FAIL("size %lld", (long long)a->ints[d]);
                out->shape[d] = a->ints[d];
            }
            return CATTR_OK;
        }
        for (int d = 2; d < x->ndim; d++) {
            double s = cx_resize_scale(a, x->ndim, d, 0, 0), len = floor((double)x->shape[d] * s);
            if (!(s > 0) || !(len < 1e12)) SHAPE_FAIL("scale %g of dim %d", s, d);
            out->shape[d] = (int64_t)len;
        }
        return CATTR_OK;
    }
    case CG_TILE:
        if (n->n_in > 1) SHAPE_FAIL("the repeats are not known when the call is planned");
        if (a->n_ints != in[0].ndim) SHAPE_FAIL("%d repeats for an input of rank %d", a->n_ints, in[0].ndim);
        copy_shape(out, &in[0]);
        for (int d = 0; d < in[0].ndim; d++)
            if (a->ints[d] < 0 || __builtin_mul_overflow(in[0].shape[d], a->ints[d], &out->shape[d]))
                SHAPE_FAIL("repeat %lld of dim %d is out of range", (long long)a->ints[d], d);
        return CATTR_OK;
    case CG_TILE_GRAD:
        if (in[0].ndim != in[1].ndim) SHAPE_FAIL("the gradient's rank differs from the input's");
        for (int d = 0; d < in[1].ndim; d++)
            if (in[1].shape[d] ? in[0].shape[d] % in[1].shape[d] != 0 : in[0].shape[d] != 0)
                SHAPE_FAIL("dim %d of the gradient is not a multiple of the input's", d);
        copy_shape(out, &in[1]);
        out->dtype = in[0].dtype;
        return CATTR_OK;
    case CG_RNN: case CG_RNN_GRAD: {
        const cx_view *v = n->op == CG_RNN ? in : in + 2; /* X, W, R, bias, h0, c0 */
        int nv = n->n_in - (n->op == CG_RNN ? 0 : 2);
        if (a->n_ints < 3 || a->ints[0] < 1 || a->ints[1] < 0 || a->ints[1] > 2 || a->index < 0 || a->index > 1)
            SHAPE_FAIL("bad recurrent attributes");
        if (nv < 3 || v[0].ndim != 3) SHAPE_FAIL("X must be [sequence, batch, features]");
        int64_t H = a->ints[0], D = a->ints[1] == 2 ? 2 : 1, G = a->index == 0 ? 4 : 3;
        int64_t T = v[0].shape[0], B = v[0].shape[1], I = v[0].shape[2];
        if (H > ((int64_t)1 << 24)) SHAPE_FAIL("hidden size %lld is too large", (long long)H);
        if (v[1].ndim != 3 || v[1].shape[0] != D || v[1].shape[1] != G * H || v[1].shape[2] != I)
            SHAPE_FAIL("W must be [%lld, %lld, %lld]", (long long)D, (long long)(G * H), (long long)I);
        if (v[2].ndim != 3 || v[2].shape[0] != D || v[2].shape[1] != G * H || v[2].shape[2] != H)
            SHAPE_FAIL("R must be [%lld, %lld, %lld]", (long long)D, (long long)(G * H), (long long)H);
        const int *src = n->op == CG_RNN ? n->in : n->in + 2;
        if (nv > 3 && src[3] >= 0 && (v[3].ndim != 2 || v[3].shape[0] != D || v[3].shape[1] != 2 * G * H))
            SHAPE_FAIL("the bias must be [%lld, %lld]", (long long)D, (long long)(2 * G * H));
        for (int k = 4; k < 6 && k < nv; k++)
            if (src[k] >= 0 && (v[k].ndim != 3 || v[k].shape[0] != D || v[k].shape[1] != B || v[k].shape[2] != H))
                SHAPE_FAIL("initial state %d must be [%lld, %lld, %lld]", k - 4, (long long)D, (long long)B, (long long)H);
        if (a->index == 1 && nv > 5 && src[5] >= 0) SHAPE_FAIL("a GRU has no cell state");
        if (n->op == CG_RNN) {
            out->ndim = 4;
            out->shape[0] = T;
            out->shape[1] = D;
            out->shape[2] = B;
            out->shape[3] = a->index == 0 ? 2 * H : H;
            out->dtype = v[0].dtype;
            return CATTR_OK;
        }
        if (a->n_ints < 4 || a->ints[3] < 0 || a->ints[3] > 2) SHAPE_FAIL("bad gradient selector");
        if (in[0].ndim != 4 || in[1].ndim != 4 || in[0].shape[0] != T || in[0].shape[1] != D || in[0].shape[2] != B ||
            in[0].shape[3] != (a->index == 0 ? 2 * H : H) || !cx_shape_eq(4, in[0].shape, 4, in[1].shape))
            SHAPE_FAIL("the states' gradient does not match the states");
        if (a->ints[3] == 0) {
            copy_shape(out, &v[0]);
        } else {
            out->ndim = 3;
            out->shape[0] = D;
            out->shape[1] = B;
            out->shape[2] = H;
        }
        out->dtype = in[0].dtype;
        return CATTR_OK;
    }
    case CG_REDUCE_EXT_GRAD: {
        bool red[CATTR_MAX_DIMS];
        if (!cx_reduce_axes(a, in[1].ndim, red)) SHAPE_FAIL("a reduction axis is out of range for rank %d", in[1].ndim);
        int64_t kept = 1;
        for (int d = 0; d < in[1].ndim; d++) kept *= red[d] ? 1 : in[1].shape[d];
        if (cx_view_numel(&in[0]) != kept || cx_view_numel(&in[2]) != kept)
            SHAPE_FAIL("the gradient or the result is not of the reduction's size");
        copy_shape(out, &in[1]);
        out->dtype = in[0].dtype;
        return CATTR_OK;
    }
    case CG_TORCH_SUM: case CG_REDUCE_SUM: case CG_REDUCE_MEAN: case CG_REDUCE_MAX: case CG_REDUCE_MIN: {
        bool red[CATTR_MAX_DIMS];
        if (n->op == CG_TORCH_SUM && a->n_ints != 1) SHAPE_FAIL("TorchSum reduces one axis, not %d", a->n_ints);
        if (!cx_reduce_axes(a, in[0].ndim, red)) SHAPE_FAIL("a reduction axis is out of range for rank %d", in[0].ndim);
        out->ndim = 0;
        for (int d = 0; d < in[0].ndim; d++)
            if (!red[d]) out->shape[out->ndim++] = in[0].shape[d];
            else if (a->index) out->shape[out->ndim++] = 1;
        return CATTR_OK;
    }
    case CG_REDUCE_GRAD: {
        bool red[CATTR_MAX_DIMS];
        if (!cx_reduce_axes(a, in[1].ndim, red)) SHAPE_FAIL("a reduction axis is out of range for rank %d", in[1].ndim);
        int64_t kept = 1;
        for (int d = 0; d < in[1].ndim; d++) kept *= red[d] ? 1 : in[1].shape[d];
        if (cx_view_numel(&in[0]) != kept) SHAPE_FAIL("the gradient is not of the reduction's size");
        copy_shape(out, &in[1]);
        out->dtype = in[0].dtype;
        return CATTR_OK;
    }
    case CG_SOFTMAX: {
        int ax = norm_axis(a->axis, in[0].ndim);
        if (ax < 0 || ax >= in[0].ndim) SHAPE_FAIL("axis %lld out of range", (long long)a->axis);
        copy_shape(out, &in[0]);
        return CATTR_OK;
    }
    case CG_BATCHNORM:
        if (in[0].ndim < 2) SHAPE_FAIL("input must have a channel dim");
        for (int i = 1; i < 5; i++)
            if (cx_view_numel(&in[i]) != in[0].shape[1]) SHAPE_FAIL("parameter %d does not match the channels", i);
        copy_shape(out, &in[0]);
        return CATTR_OK;
    case CG_RELU_GRAD: case CG_LEAKYRELU_GRAD: case CG_SIGMOID_GRAD: case CG_TANH_GRAD: case CG_SOFTMAX_GRAD: case CG_ABS_GRAD:
    case CG_UNARY_GRAD:
    case CG_CLIP_GRAD:
        if (!cx_shape_eq(in[0].ndim, in[0].shape, in[1].ndim, in[1].shape)) SHAPE_FAIL("gradient shape mismatch");
        copy_shape(out, &in[0]);
        out->dtype = in[1].dtype;
        return CATTR_OK;
    case CG_MAXPOOL_GRAD: case CG_AVGPOOL_GRAD: case CG_GAP_GRAD: case CG_RESHAPE_LIKE: case CG_REDUCE_SUM_LIKE:
    case CG_SLICE_GRAD: {
        const cx_view *like = n->op == CG_RESHAPE_LIKE || n->op == CG_REDUCE_SUM_LIKE || n->op == CG_SLICE_GRAD
                                  ? &in[1] : &in[0];
        const cx_view *gy = n->op == CG_RESHAPE_LIKE || n->op == CG_REDUCE_SUM_LIKE || n->op == CG_SLICE_GRAD
                                ? &in[0] : &in[1];
        if (n->op == CG_RESHAPE_LIKE && cx_view_numel(like) != cx_view_numel(gy)) SHAPE_FAIL("element count differs");
        if (n->op == CG_SLICE_GRAD) { /* gY holds exactly the slice of X */
            int64_t st[CATTR_MAX_DIMS], sp[CATTR_MAX_DIMS], cnt[CATTR_MAX_DIMS];
            cx_slice_resolve(a, like->ndim, like->shape, st, sp, cnt);
            if (cx_numel(like->ndim, cnt) != cx_view_numel(gy)) SHAPE_FAIL("the gradient is not of the slice's size");
        }
        if (n->op == CG_REDUCE_SUM_LIKE) {
            int nb;
            int64_t b[CATTR_MAX_DIMS];
            if (!cx_broadcast_shape(like->ndim, like->shape, gy->ndim, gy->shape, &nb, b) ||
                !cx_shape_eq(nb, b, gy->ndim, gy->shape))
                SHAPE_FAIL("gradient does not broadcast from the input");
        }
        copy_shape(out, like);
        out->dtype = gy->dtype;
        return CATTR_OK;
    }
    case CG_CONV_GRAD_INPUT:
        copy_shape(out, &in[0]);
        out->dtype = in[2].dtype;
        return CATTR_OK;
    case CG_BATCHNORM_GRAD:
        copy_shape(out, &in[0]);
        return CATTR_OK;
    case CG_GATHER_GRAD:
        copy_shape(out, &in[2]);
        out->dtype = in[0].dtype;
        return CATTR_OK;
    case CG_CONCAT_GRAD: {
        int ax = norm_axis(a->axis, in[0].ndim);
        int idx = (int)a->index + 1;
        if (idx < 1 || idx >= n->n_in) SHAPE_FAIL("bad piece index");
        copy_shape(out, &in[idx]);
        out->dtype = in[0].dtype;
        (void)ax;
        return CATTR_OK;
    }
    case CG_BINARY_GRAD:
        if (!cx_broadcast_shape(in[0].ndim, in[0].shape, in[1].ndim, in[1].shape, &out->ndim, out->shape))
            SHAPE_FAIL("operands do not broadcast");
        out->dtype = in[2].dtype;
        return CATTR_OK;
    case CG_LIME_SIMILARITY:
        if (in[0].ndim != 2 || !cx_shape_eq(in[0].ndim, in[0].shape, in[1].ndim, in[1].shape) ||
            in[0].dtype != in[1].dtype || (in[0].dtype != CATTR_FLOAT32 && in[0].dtype != CATTR_FLOAT64))
            SHAPE_FAIL("needs two float matrices of one shape and dtype");
        if (!(a->alpha > 0)) SHAPE_FAIL("kernel width %g", a->alpha);
        out->ndim = 1;
        out->shape[0] = in[0].shape[0];
        out->dtype = in[0].dtype;
        return CATTR_OK;
    case CG_NORMAL_NOISE:
        if (in[0].dtype != CATTR_INT64 || in[1].dtype != CATTR_INT64 || in[0].ndim != 1 || in[1].ndim != 1 ||
            in[0].shape[0] != in[1].shape[0])
            SHAPE_FAIL("needs int64 streams and first blocks of one length");
        if (a->n_ints + 1 > CATTR_MAX_DIMS) SHAPE_FAIL("rows of %d dims", a->n_ints);
        out->ndim = a->n_ints + 1;
        out->shape[0] = in[0].shape[0];
        for (int d = 0; d < a->n_ints; d++) {
            if (a->ints[d] < 0) SHAPE_FAIL("negative size %lld", (long long)a->ints[d]);
            out->shape[d + 1] = a->ints[d];
        }
        out->dtype = CATTR_FLOAT32;
        return CATTR_OK;
    case CG_RANGE: {
        if (n->n_in > 0) SHAPE_FAIL("start, limit and delta are not known when the call is planned");
        if (a->n_ints != 3 || a->ints[2] == 0) SHAPE_FAIL("needs start, limit and a non-zero delta");
        double len = ceil(((double)a->ints[1] - (double)a->ints[0]) / (double)a->ints[2]);
        if (len > 1e12) SHAPE_FAIL("%.0f values are too many", len);
        out->ndim = 1;
        out->shape[0] = len > 0 ? (int64_t)len : 0;
        out->dtype = CATTR_INT64;
        return CATTR_OK;
    }
    case CG_SCATTER_ND: {
        const cx_view *d = &in[0], *ix = &in[1], *u = &in[2];
        if (ix->dtype != CATTR_INT64 || ix->ndim < 1) SHAPE_FAIL("indices must be int64 of rank 1 or more");
        int64_t k = ix->shape[ix->ndim - 1];
        if (k < 1 || k > d->ndim) SHAPE_FAIL("index tuples of %lld values for data of rank %d", (long long)k, d->ndim);
        if (u->ndim != ix->ndim - 1 + d->ndim - (int)k) SHAPE_FAIL("updates have the wrong rank");
        for (int i = 0; i < ix->ndim - 1; i++)
            if (u->shape[i] != ix->shape[i]) SHAPE_FAIL("updates do not match the indices' dims");
        for (int i = (int)k; i < d->ndim; i++)
            if (u->shape[ix->ndim - 1 + i - k] != d->shape[i]) SHAPE_FAIL("updates do not match the data's slices");
        if (u->dtype != d->dtype) SHAPE_FAIL("updates and data differ in dtype");
        copy_shape(out, d);
        return CATTR_OK;
    }
    case CG_ADD: case CG_SUB: case CG_MUL: case CG_DIV: case CG_POW: case CG_MAX: case CG_MIN: case CG_MOD: {
        if (n->n_in < 2 || n->in[0] < 0 || n->in[1] < 0) SHAPE_FAIL("two operands are required");
        if (!cx_broadcast_shape(in[0].ndim, in[0].shape, in[1].ndim, in[1].shape, &out->ndim, out->shape))
            SHAPE_FAIL("operands do not broadcast");
        if (in[0].dtype != in[1].dtype) SHAPE_FAIL("operand dtypes differ (%s, %s)", cattr_dtype_name(in[0].dtype),
                                                   cattr_dtype_name(in[1].dtype));
        return CATTR_OK;
    }
    case CG_GEMM: {
        if (in[0].ndim != 2 || in[1].ndim != 2) SHAPE_FAIL("Gemm needs 2-D A and B");
        int64_t m = a->trans_a ? in[0].shape[1] : in[0].shape[0];
        int64_t k = a->trans_a ? in[0].shape[0] : in[0].shape[1];
        int64_t k2 = a->trans_b ? in[1].shape[1] : in[1].shape[0];
        int64_t nn = a->trans_b ? in[1].shape[0] : in[1].shape[1];
        if (k != k2) SHAPE_FAIL("inner dimensions differ (%lld vs %lld)", (long long)k, (long long)k2);
        out->ndim = 2;
        out->shape[0] = m;
        out->shape[1] = nn;
        if (n->n_in > 2 && in[2].data) {
            int nb;
            int64_t b[CATTR_MAX_DIMS];
            if (!cx_broadcast_shape(in[2].ndim, in[2].shape, 2, out->shape, &nb, b) || nb != 2 || b[0] != m ||
                b[1] != nn)
                SHAPE_FAIL("C does not broadcast to [%lld, %lld]", (long long)m, (long long)nn);
        }
        return CATTR_OK;
    }
    case CG_MATMUL: {
        if (in[0].ndim < 1 || in[1].ndim < 1) SHAPE_FAIL("MatMul needs tensors");
        int64_t as[CATTR_MAX_DIMS], bs[CATTR_MAX_DIMS];
        int na = in[0].ndim, nb = in[1].ndim;
        memcpy(as, in[0].shape, sizeof as);
        memcpy(bs, in[1].shape, sizeof bs);
        if (na == 1) { as[1] = as[0]; as[0] = 1; na = 2; }
        if (nb == 1) { bs[1] = 1; nb = 2; }
        int64_t m = a->trans_a ? as[na - 1] : as[na - 2], k = a->trans_a ? as[na - 2] : as[na - 1];
        int64_t k2 = a->trans_b ? bs[nb - 1] : bs[nb - 2], nn = a->trans_b ? bs[nb - 2] : bs[nb - 1];
        if (k != k2) SHAPE_FAIL("inner dimensions differ (%lld vs %lld)", (long long)k, (long long)k2);
        int nbat;
        int64_t bat[CATTR_MAX_DIMS];
        if (!cx_broadcast_shape(na - 2, as, nb - 2, bs, &nbat, bat)) SHAPE_FAIL("batch dims do not broadcast");
        out->ndim = nbat;
        memcpy(out->shape, bat, (size_t)nbat * sizeof(int64_t));
        if (in[0].ndim > 1) out->shape[out->ndim++] = m;
        if (in[1].ndim > 1) out->shape[out->ndim++] = nn;
        return CATTR_OK;
    }
    case CG_CONV: case CG_MAXPOOL: case CG_AVGPOOL: {
        int nsp = in[0].ndim - 2;
        if (nsp < 1 || nsp > 3) SHAPE_FAIL("expected 1 to 3 spatial dims");
        if (a->nsp && a->nsp != nsp) SHAPE_FAIL("kernel has %d dims, input has %d spatial dims", a->nsp, nsp);
        const int64_t *w = n->op == CG_CONV ? in[1].shape : NULL;
        if (w) {
            if (in[1].ndim != in[0].ndim) SHAPE_FAIL("weight rank differs from input rank");
            if (a->group < 1 || in[0].shape[1] != in[1].shape[1] * a->group || in[1].shape[0] % a->group)
                SHAPE_FAIL("channels do not match the weight and group %lld", (long long)a->group);
            if (n->n_in > 2 && in[2].data && cx_view_numel(&in[2]) != in[1].shape[0]) SHAPE_FAIL("bias size");
        }
        cx_geom g;
        cx_geom_init(&g, a, in[0].shape, in[0].ndim, w);
        out->ndim = in[0].ndim;
        out->shape[0] = g.n;
        out->shape[1] = g.c_out;
        for (int i = 0; i < nsp; i++) {
            out->shape[2 + i] = g.out[3 - nsp + i];
            if (out->shape[2 + i] <= 0) SHAPE_FAIL("window larger than the (padded) input");
        }
        return CATTR_OK;
    }
    case CG_GLOBALAVGPOOL:
        if (in[0].ndim < 3) SHAPE_FAIL("expected spatial dims");
        copy_shape(out, &in[0]);
        for (int i = 2; i < out->ndim; i++) out->shape[i] = 1;
        return CATTR_OK;
    case CG_RESHAPE: {
        if (n->n_in > 1) SHAPE_FAIL("the target shape is computed from data, not from shapes and constants: it is not "
                                    "known when the call is planned");
        int64_t total = cx_view_numel(&in[0]), known = 1;
        int infer = -1;
        if (a->n_ints > CATTR_MAX_DIMS) SHAPE_FAIL("target shape has %d dims (at most %d)", a->n_ints, CATTR_MAX_DIMS);
        out->ndim = a->n_ints;
        for (int i = 0; i < a->n_ints; i++) {
            int64_t d = a->ints[i];
            if (d == 0 && !a->allowzero) {
                if (i >= in[0].ndim) SHAPE_FAIL("0 in shape refers to a missing dim");
                d = in[0].shape[i];
            }
            if (d == -1) {
                if (infer >= 0) SHAPE_FAIL("more than one -1 in the target shape");
                infer = i;
                d = 1;
            } else if (d < 0) SHAPE_FAIL("negative size in target shape");
            out->shape[i] = d;
        }
        bool zero = false;
        for (int i = 0; i < a->n_ints; i++) zero |= out->shape[i] == 0;
        for (int i = 0; i < a->n_ints && !zero; i++)
            if (__builtin_mul_overflow(known, out->shape[i], &known)) SHAPE_FAIL("target shape has more than 2^63 elements");
        if (zero) known = 0;
        if (infer >= 0) {
            if (known == 0 || total % known) SHAPE_FAIL("cannot infer -1: %lld elements", (long long)total);
            out->shape[infer] = total / known;
        } else if (known != total) {
            SHAPE_FAIL("target shape has %lld elements, input has %lld", (long long)known, (long long)total);
        }
        return CATTR_OK;
    }
    case CG_FLATTEN: {
        int ax = norm_axis(a->axis, in[0].ndim);
        if (ax < 0 || ax > in[0].ndim) SHAPE_FAIL("axis out of range");
        out->ndim = 2;
        out->shape[0] = cx_numel(ax, in[0].shape);
        out->shape[1] = cx_numel(in[0].ndim - ax, in[0].shape + ax);
        return CATTR_OK;
    }
    case CG_CONCAT: {
        copy_shape(out, &in[0]);
        int ax = norm_axis(a->axis, in[0].ndim);
        if (ax < 0 || ax >= in[0].ndim) SHAPE_FAIL("axis out of range");
        for (int i = 1; i < n->n_in; i++) {
            if (in[i].ndim != in[0].ndim) SHAPE_FAIL("inputs differ in rank");
            if (in[i].dtype != in[0].dtype)
                SHAPE_FAIL("inputs differ in dtype (%s, %s)", cattr_dtype_name(in[0].dtype), cattr_dtype_name(in[i].dtype));
            for (int d = 0; d < in[0].ndim; d++)
                if (d != ax && in[i].shape[d] != in[0].shape[d]) SHAPE_FAIL("inputs differ outside the axis");
            out->shape[ax] += in[i].shape[ax];
        }
        return CATTR_OK;
    }
    case CG_UNSQUEEZE: {
        int nd = in[0].ndim + a->n_ints;
        if (nd > CATTR_MAX_DIMS) SHAPE_FAIL("too many dims");
        bool ins[CATTR_MAX_DIMS] = {0};
        for (int i = 0; i < a->n_ints; i++) {
            int ax = norm_axis(a->ints[i], nd);
            if (ax < 0 || ax >= nd || ins[ax]) SHAPE_FAIL("bad axis %lld", (long long)a->ints[i]);
            ins[ax] = true;
        }
        out->ndim = nd;
        for (int d = 0, j = 0; d < nd; d++) out->shape[d] = ins[d] ? 1 : in[0].shape[j++];
        return CATTR_OK;
    }
    case CG_SQUEEZE: {
        bool rm[CATTR_MAX_DIMS] = {0};
        for (int i = 0; i < a->n_ints; i++) {
            int ax = norm_axis(a->ints[i], in[0].ndim);
            if (ax < 0 || ax >= in[0].ndim || in[0].shape[ax] != 1) SHAPE_FAIL("cannot squeeze axis %lld", (long long)a->ints[i]);
            rm[ax] = true;
        }
        out->ndim = 0;
        for (int d = 0; d < in[0].ndim; d++)
            if (!(a->n_ints ? rm[d] : in[0].shape[d] == 1)) out->shape[out->ndim++] = in[0].shape[d];
        return CATTR_OK;
    }
    case CG_TRANSPOSE: {
        out->ndim = in[0].ndim;
        if (a->n_ints && a->n_ints != in[0].ndim) SHAPE_FAIL("perm has %d entries", a->n_ints);
        bool seen[CATTR_MAX_DIMS] = {0};
        for (int d = 0; d < in[0].ndim; d++) {
            int64_t p = a->n_ints ? a->ints[d] : in[0].ndim - 1 - d;
            if (p < 0 || p >= in[0].ndim || seen[p]) /* a repeated axis would read past the input (fuzzing found it) */
                SHAPE_FAIL("perm is not a permutation of the %d axes (entry %d is %lld)", in[0].ndim, d, (long long)p);
            seen[p] = true;
            out->shape[d] = in[0].shape[p];
        }
        return CATTR_OK;
    }
    case CG_GATHER: {
        int ax = norm_axis(a->axis, in[0].ndim);
        if (ax < 0 || ax >= in[0].ndim) SHAPE_FAIL("axis out of range");
        if (in[1].dtype != CATTR_INT64) SHAPE_FAIL("indices must be int64");
        int nd = in[0].ndim - 1 + in[1].ndim;
        if (nd > CATTR_MAX_DIMS) SHAPE_FAIL("too many dims");
        out->ndim = 0;
        for (int d = 0; d < ax; d++) out->shape[out->ndim++] = in[0].shape[d];
        for (int d = 0; d < in[1].ndim; d++) out->shape[out->ndim++] = in[1].shape[d];
        for (int d = ax + 1; d < in[0].ndim; d++) out->shape[out->ndim++] = in[0].shape[d];
        return CATTR_OK;
    }
    case CG_SLICE: {
        int64_t st[CATTR_MAX_DIMS], sp[CATTR_MAX_DIMS], cnt[CATTR_MAX_DIMS];
        cx_slice_resolve(a, in[0].ndim, in[0].shape, st, sp, cnt);
        out->ndim = in[0].ndim;
        memcpy(out->shape, cnt, sizeof cnt);
        return CATTR_OK;
    }
    case CG_SEQ_PICK: case CG_SEQ_PICK_GRAD: {
        const cx_view *x = n->op == CG_SEQ_PICK ? &in[0] : &in[2];
        if (x->ndim != 3 || in[1].dtype != CATTR_INT64 || in[1].ndim < 1 || in[1].ndim > 2 ||
            in[1].shape[0] != x->shape[0])
            SHAPE_FAIL("position pick needs [S, L, C] and int64 positions [S] or [S, P]");
        int64_t P = in[1].ndim == 2 ? in[1].shape[1] : 1;
        if (n->op == CG_SEQ_PICK_GRAD && (in[0].ndim != 3 || in[0].shape[0] != x->shape[0] || in[0].shape[1] != P ||
                                          in[0].shape[2] != x->shape[2]))
            SHAPE_FAIL("gradient shape mismatch");
        copy_shape(out, x);
        out->dtype = n->op == CG_SEQ_PICK ? x->dtype : in[0].dtype;
        if (n->op == CG_SEQ_PICK) out->shape[1] = P;
        return CATTR_OK;
    }
    case CG_SWIGLU: case CG_SWIGLU_GRAD:
        if (!cx_shape_eq(in[0].ndim, in[0].shape, in[1].ndim, in[1].shape) ||
            (n->op == CG_SWIGLU_GRAD && !cx_shape_eq(in[0].ndim, in[0].shape, in[2].ndim, in[2].shape)))
            SHAPE_FAIL("gate, up (and gradient) shapes differ");
        copy_shape(out, &in[0]);
        return CATTR_OK;
    case CG_RMSNORM: case CG_RMSNORM_GRAD: {
        int64_t D = cx_view_numel(&in[1]);
        if (in[0].ndim < 1 || D < 1 || in[0].shape[in[0].ndim - 1] % D)
            SHAPE_FAIL("the weight (%lld values) does not divide the last dim", (long long)D);
        copy_shape(out, &in[0]);
        out->dtype = in[0].dtype;
        return CATTR_OK;
    }
    case CG_ROPE: {
        int64_t d = a->n_ints ? a->ints[0] : 0;
        if (in[0].ndim < 2 || d < 2 || d % 2 || in[0].shape[in[0].ndim - 1] < d || in[0].shape[in[0].ndim - 1] % d ||
            cx_view_numel(&in[1]) != d / 2)
            SHAPE_FAIL("rotary embedding needs [..., T, heads*%lld] and %lld frequencies", (long long)d,
                       (long long)(d / 2));
        if (n->n_in > 2 && n->in[2] >= 0 &&
            (in[2].dtype != CATTR_INT64 || cx_view_numel(&in[2]) != cx_view_numel(&in[0]) / in[0].shape[in[0].ndim - 1]))
            SHAPE_FAIL("rotary embedding needs one int64 position per row");
        copy_shape(out, &in[0]);
        return CATTR_OK;
    }
    case CG_ATTENTION: case CG_ATTENTION_GRAD: {
        int64_t nh = a->ints[0], nkv = a->ints[1], d = a->ints[2];
        int nd = in[0].ndim;
        if (a->n_ints < 3 || nh < 1 || nkv < 1 || nh % nkv || d < 1 || nd < 2 || in[1].ndim != nd || in[2].ndim != nd ||
            in[0].shape[nd - 1] != nh * d || in[1].shape[nd - 1] != nkv * d || in[2].shape[nd - 1] != nkv * d ||
            !cx_shape_eq(nd - 1, in[0].shape, nd - 1, in[1].shape) || !cx_shape_eq(nd - 1, in[0].shape, nd - 1, in[2].shape))
            SHAPE_FAIL("attention needs q [..., T, %lld], k and v [..., T, %lld]", (long long)(nh * d),
                       (long long)(nkv * d));
        if (cx_view_numel(&in[0]) == 0) SHAPE_FAIL("attention needs at least one row");
        if (n->op == CG_ATTENTION && n->n_in > 5 &&
            (in[5].dtype != CATTR_INT64 || in[5].ndim != 2 || in[5].shape[1] != 3 || in[0].shape[0] != 1 || nd != 3))
            SHAPE_FAIL("ragged attention needs one flattened sequence [1, N, C] and int64 segments [S, 3]");
        if (n->op == CG_ATTENTION && n->n_in > 4 &&
            (in[3].ndim != 2 || in[4].ndim != 2 || in[3].shape[0] != in[4].shape[0] || in[3].shape[1] != nkv * d ||
             in[4].shape[1] != nkv * d))
            SHAPE_FAIL("the prefix keys and values must be [P, %lld]", (long long)(nkv * d));
        copy_shape(out, &in[0]);
        if (n->op == CG_ATTENTION_GRAD) out->shape[nd - 1] = (nh + 2 * nkv) * d;
        return CATTR_OK;
    }
    case CG_LOGSOFTMAX: case CG_LOGSOFTMAX_GRAD:
        if (in[0].ndim < 1) SHAPE_FAIL("log-softmax needs a dim");
        copy_shape(out, &in[0]);
        if (n->op == CG_LOGSOFTMAX_GRAD) out->dtype = in[1].dtype;
        return CATTR_OK;
    case CG_DL_DELTA: case CG_DL_RESCALE: case CG_DL_CENTER: case CG_LRP_DIV:
        for (int i = 1; i < n->n_in; i++)
            if (!cx_shape_eq(in[i].ndim, in[i].shape, in[0].ndim, in[0].shape)) SHAPE_FAIL("operand shapes differ");
        if (n->op == CG_DL_DELTA && (in[0].ndim < 1 || in[0].shape[0] % 2))
            SHAPE_FAIL("needs an even batch (actual rows, then their references)");
        copy_shape(out, &in[0]);
        return CATTR_OK;
    case CG_DL_MAXPOOL: {
        int nsp = in[0].ndim - 2;
        if (nsp < 1 || nsp > 3) SHAPE_FAIL("expected 1 to 3 spatial dims");
        if (in[0].shape[0] % 2) SHAPE_FAIL("needs an even batch (actual rows, then their references)");
        if (!cx_shape_eq(in[1].ndim, in[1].shape, in[2].ndim, in[2].shape) ||
            !cx_shape_eq(in[3].ndim, in[3].shape, in[0].ndim, in[0].shape) || in[1].ndim != in[0].ndim ||
            in[1].shape[0] != in[0].shape[0] || in[1].shape[1] != in[0].shape[1])
            SHAPE_FAIL("expected (X, Y, gY, gX) of the pool's input and output shapes");
        cx_geom g;
        cx_geom_init(&g, a, in[0].shape, in[0].ndim, NULL);
        for (int i = 0; i < nsp; i++)
            if (in[1].shape[2 + i] != g.out[3 - nsp + i]) SHAPE_FAIL("Y is not the pool output of X");
        copy_shape(out, &in[0]);
        return CATTR_OK;
    }
    case CG_WHERE_ID: {
        const cx_view *m = &in[2], *id = &in[3];
        bool maps = n->n_in > 4;
        if (m->dtype != CATTR_INT64 || id->dtype != CATTR_INT64) SHAPE_FAIL("the mask and the ids must be int64");
        /* int64 A and B too: the perturbation methods' integer inputs (the kernels select elements by bytes) */
        if (in[0].dtype != in[1].dtype) SHAPE_FAIL("A and B must be of one dtype");
        if (m->ndim < 1 || id->ndim != 1 || (!maps && id->shape[0] != m->shape[0]))
            SHAPE_FAIL("expected one id per row of the mask");
        int64_t R = id->shape[0];
        for (int k = 4; maps && k < n->n_in; k++)
            if (n->in[k] >= 0) {
                if (in[k].dtype != CATTR_INT64 || in[k].ndim != 1 || in[k].shape[0] != R)
                    SHAPE_FAIL("row map %d must be int64 [%lld]", k - 4, (long long)R);
            } else if (k < 7 && (k == 6 ? m->shape[0] : in[k - 4].shape[0]) != R) {
                SHAPE_FAIL("without row map %d the operand needs %lld rows", k - 4, (long long)R);
            }
        for (int k = 0; k < 2; k++) {
            if (maps) {
                if (in[k].ndim != m->ndim || !cx_shape_eq(m->ndim - 1, m->shape + 1, in[k].ndim - 1, in[k].shape + 1))
                    SHAPE_FAIL("with row maps, %s must have the mask's row shape", k ? "B" : "A");
                continue;
            }
            int nb = 0;
            int64_t b[CATTR_MAX_DIMS];
            if (in[k].ndim > m->ndim || !cx_broadcast_shape(in[k].ndim, in[k].shape, m->ndim, m->shape, &nb, b) ||
                !cx_shape_eq(nb, b, m->ndim, m->shape))
                SHAPE_FAIL("%s does not broadcast to the mask's shape", k ? "B" : "A");
        }
        copy_shape(out, m);
        out->shape[0] = R;
        out->dtype = in[0].dtype;
        return CATTR_OK;
    }
    case CG_PLACE_ROWS: {
        const cx_view *acc = &in[0], *v = &in[1], *ord = &in[2], *q0 = &in[3];
        /* int64 too: the differences of a model with an integer output (the kernels place elements by bytes) */
        if (v->dtype != acc->dtype) SHAPE_FAIL("acc and v must be of one dtype");
        if (ord->dtype != CATTR_INT64 || q0->dtype != CATTR_INT64 || cx_view_numel(q0) != 1)
            SHAPE_FAIL("ord must be int64 and q0 one int64");
        if (acc->ndim < 1 || v->ndim != 1 || acc->shape[0] < 1 || v->shape[0] % acc->shape[0])
            SHAPE_FAIL("v must hold whole blocks of the %lld rows of acc", (long long)(acc->ndim ? acc->shape[0] : 0));
        if (ord->ndim != acc->ndim || (ord->shape[0] != 1 && ord->shape[0] != acc->shape[0]) ||
            !cx_shape_eq(ord->ndim - 1, ord->shape + 1, acc->ndim - 1, acc->shape + 1))
            SHAPE_FAIL("ord must have acc's row shape and 1 or acc's rows");
        copy_shape(out, acc);
        return CATTR_OK;
    }
    case CG_HOST_CALL: return host_call_shape(n, in, out);
    case CG_MAP_ROWS: return map_rows_shape(n, in, out);
    case CG_OP_COUNT: break;
    }
    return cx_fail(CATTR_ERR_INTERNAL, "node '%s': no shape rule for op %d", n->name, (int)n->op);
}
