/* rebatch.c - models exported with a fixed batch, made to run any batch (see model.h, cx_model_rebatch).
 *
 * torch.onnx.export without dynamic_axes declares the input's batch as the example's (usually 1) and folds every
 * shape it computed into constants: Reshape's target [1, 2, 58, 28, 28], Expand's [1, -1, -1], a multi-head
 * attention's [197, 12, 64] (the batch of 1 times 12 heads). cattr's methods run many rows at once (IG's steps), so
 * each such constant must carry the call's batch instead. Shapes are inferred for the declared (exported) input
 * shapes, and each value's batch axis is tracked from the inputs (axis 0) through every node: a reshape moves it to
 * the output axis whose block starts where the input's batch axis starts (row-major, the batch outermost in its
 * axis). Where a constant shape meets a tracked value, the entry at the batch axis is multiplied by the call's
 * batch factor, computed in the graph from the value's own shape (Shape, Div, Concat, Mul: the planner folds them
 * for each call), so one graph serves every batch size as a dynamic export does. A value that does not depend on
 * the inputs but is concatenated with one that does (ViT's class token, an initial recurrent state) is tiled to the
 * batch. Where the batch cannot be followed (a node that mixes it with other axes, reduces over it, or a branch on
 * data), the graph is left as exported and the methods run their rows in passes of the exported batch
 * (cx_model_batch_rows). */
#include "models/model.h"

#include "exec/plan.h"
#include "graph/autodiff.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tracking budget: node visits over all backtracking (a reshape can often place the batch in more than one way
 * that fits the exported shapes: the wrong ways fail a few nodes later) */
#define RB_MAX_VISITS 2000000

typedef struct rb {
    cg_graph *g;
    const cx_plan *pl;
    int64_t eb;            /* the exported batch */
    int n_vals0, n_nodes0; /* the graph as imported: shapes are known for these values */
    int *ax;               /* per original value: the axis holding the batch, -1 none */
    int64_t *mm;           /* its inner multiplier m: the axis's exported size is u * eb * m, the batch block
                            * (eb * m) inside u outer rows; the call's batch factor s makes it u * s * eb * m */
    int *bent;             /* integer shape values: the entry holding the batch size (times constants); -1 none, -3
                            * some entry depends on it in a way not followed */
    bool apply;            /* the second pass: rewrite the graph */
    int n_rewrites;
    char why[400];         /* why the batch cannot be followed */
    int why_node;          /* the furthest node a failure was met at */
    cattr_status st;       /* an allocation failure while adding helpers */
} rb;

/* The exported shape of original value v. */
static int eshape(const rb *r, int v, int64_t *sh) {
    const cg_value *val = &r->g->vals[v];
    if (val->kind == CG_VAL_CONST) {
        memcpy(sh, val->data->shape, (size_t)val->data->ndim * sizeof *sh);
        return val->data->ndim;
    }
    const cx_view *w = cx_plan_view(r->pl, v);
    memcpy(sh, w->shape, (size_t)w->ndim * sizeof *sh);
    return w->ndim;
}

static int64_t prod(const int64_t *s, int n) {
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= s[i];
    return p;
}

#define RB_FAIL (-2)

static int fail(rb *r, int node, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(rb *r, int node, const char *fmt, ...) {
    if (node >= r->why_node) { /* the furthest failure: the others are wrong turns before it */
        r->why_node = node;
        const cg_node *n = &r->g->nodes[node];
        int k = snprintf(r->why, sizeof r->why, "node '%s' (op %s) ", n->name, cg_op_names[n->op]);
        va_list ap;
        va_start(ap, fmt);
        if (k > 0 && (size_t)k < sizeof r->why) vsnprintf(r->why + k, sizeof r->why - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return RB_FAIL;
}

static int int_const(rb *r, const char *name, const int64_t *v, int n) {
    int64_t len = n;
    cattr_tensor *t = cx_tensor_alloc(CATTR_INT64, 1, &len);
    if (!t) return r->st = CATTR_ERR_NO_MEMORY, -1;
    memcpy(t->data, v, (size_t)n * sizeof *v);
    int id = cg_add_const(r->g, name, t, true);
    if (id < 0) cattr_tensor_free(t), r->st = CATTR_ERR_NO_MEMORY;
    return id;
}

static int add(rb *r, cg_op op, const char *base, const char *what, const int *in, int n_in, const cg_attrs *a) {
    char nm[300];
    snprintf(nm, sizeof nm, "%s:rebatch_%s", base, what);
    int v = cg_add_node(r->g, op, nm, in, n_in, a, nm);
    if (v < 0) r->st = CATTR_ERR_NO_MEMORY;
    return v;
}

/* The call's batch factor s as an int64 [1] value: value v's size at axis `axis` over its exported size there. */
static int factor(rb *r, const char *base, int v, int axis) {
    int64_t sh[CATTR_MAX_DIMS];
    eshape(r, v, sh);
    cg_attrs a = cg_attrs_default();
    a.ints[0] = axis;
    a.ints[1] = axis + 1;
    a.n_ints = 2;
    int s = add(r, CG_SHAPE, base, "size", &v, 1, &a);
    if (s < 0 || sh[axis] == 1) return s;
    int e = int_const(r, base, &sh[axis], 1);
    return e < 0 ? -1 : add(r, CG_DIV, base, "factor", (int[]){s, e}, 2, NULL);
}

/* An int64 [n] value: `base` (a value id; -1: ones) with entry j multiplied by the factor value f. */
static int scaled(rb *r, const char *name, int base, int n, int j, int f) {
    int64_t ones[CG_MAX_INTS];
    for (int i = 0; i < n; i++) ones[i] = 1;
    int parts[3], np = 0;
    if (j > 0 && (parts[np++] = int_const(r, name, ones, j)) < 0) return -1;
    parts[np++] = f;
    if (j + 1 < n && (parts[np++] = int_const(r, name, ones, n - j - 1)) < 0) return -1;
    cg_attrs ca = cg_attrs_default();
    int vec = np == 1 ? f : add(r, CG_CONCAT, name, "ones", parts, np, &ca);
    if (base < 0 || vec < 0) return vec;
    return add(r, CG_MUL, name, "shape", (int[]){base, vec}, 2, NULL);
}

/* Node i's shape (its folded attribute: Reshape's target, Expand's shape, Resize's sizes; or its shape input, when
 * computed) becomes an input computed per call: entry j times the batch factor of value `src` at axis `sax`. */
static void rewrite_shape(rb *r, int i, int j, int src, int sax) {
    if (!r->apply) return;
    char base[256];
    snprintf(base, sizeof base, "%s", r->g->nodes[i].name);
    int have = r->g->nodes[i].n_in > 1 ? r->g->nodes[i].in[1] : -1, nt;
    if (have < 0) {
        nt = r->g->nodes[i].a.n_ints;
        if ((have = int_const(r, base, r->g->nodes[i].a.ints, nt)) < 0) return;
    } else {
        int64_t sh[CATTR_MAX_DIMS];
        nt = eshape(r, have, sh) == 1 ? (int)sh[0] : 0;
    }
    int f = factor(r, base, src, sax);
    int v = f < 0 ? -1 : scaled(r, base, have, nt, j, f);
    if (v >= 0 && r->g->nodes[i].n_in > 1) { /* computed: a -1 (inferred) or 0 (copied) entry stays as it is */
        int64_t zero = 0;
        int z = int_const(r, base, &zero, 1);
        cg_attrs ga = cg_attrs_default();
        ga.index = 1; /* Greater */
        int pos = z < 0 ? -1 : add(r, CG_EQUAL, base, "positive", (int[]){have, z}, 2, &ga);
        v = pos < 0 ? -1 : add(r, CG_WHERE, base, "scaled", (int[]){pos, v, have}, 3, NULL);
    }
    if (v < 0) return;
    cg_node *n = &r->g->nodes[i];
    n->in[1] = v;
    n->n_in = 2;
    r->n_rewrites++;
}

/* Input k of node i, which does not depend on the inputs, tiled along axis `axis` by the batch factor of value src
 * (at its axis sax): a value every example shares, made one per example. */
static void tile_input(rb *r, int i, int k, int src, int sax, int axis) {
    if (!r->apply) return;
    char base[256];
    snprintf(base, sizeof base, "%s:%d", r->g->nodes[i].name, k);
    int64_t sh[CATTR_MAX_DIMS];
    int nd = eshape(r, r->g->nodes[i].in[k], sh);
    int f = factor(r, base, src, sax);
    int rep = f < 0 ? -1 : scaled(r, base, -1, nd, axis, f);
    int in[2] = {r->g->nodes[i].in[k], rep};
    int t = rep < 0 ? -1 : add(r, CG_TILE, base, "tile", in, 2, NULL);
    if (t < 0) return;
    r->g->nodes[i].in[k] = t;
    r->n_rewrites++;
}

/* The ways a reshape can place the batch: output axes j with inner multipliers m[j] such that, with the input's
 * batch block after P elements and before I (its axis a, multiplier m), the output's axis j holds u' * eb * m' with
 * prod(out[:j]) * u' = P and m' * prod(out[j+1:]) = I. Returns how many (their axes in js, multipliers in ms). */
static int reshape_ways(const rb *r, const int64_t *in, int nin, int a, int64_t m, const int64_t *out, int nout,
                        int *js, int64_t *ms) {
    int64_t u = in[a] / (r->eb * m), P = prod(in, a) * u, I = m * prod(in + a + 1, nin - a - 1), pj = 1;
    int k = 0;
    for (int j = 0; j < nout; j++) {
        if (pj > P) break;
        if (pj > 0 && P % pj == 0) {
            int64_t u2 = P / pj;
            if (out[j] > 0 && out[j] % (u2 * r->eb) == 0) {
                int64_t m2 = out[j] / (u2 * r->eb);
                if (m2 * prod(out + j + 1, nout - j - 1) == I) {
                    js[k] = j;
                    ms[k++] = m2;
                }
            }
        }
        pj *= out[j];
    }
    return k;
}

static bool is_int(const rb *r, int v) {
    const cg_value *val = &r->g->vals[v];
    if (val->kind == CG_VAL_CONST) return val->data->dtype == CATTR_INT64;
    return cx_plan_view(r->pl, v)->dtype == CATTR_INT64;
}

/* The integer value of constant v at element k (v a constant). */
static int64_t const_at(const rb *r, int v, int64_t k) {
    const cattr_tensor *t = r->g->vals[v].data;
    return t->dtype == CATTR_INT64 ? ((const int64_t *)t->data)[k] : (int64_t)cx_tensor_get(t, k);
}

/* Integer shape arithmetic (no input holds batched data): where the batch size goes. */
static int track_bent(rb *r, int i) {
    cg_node *n = &r->g->nodes[i];
    int b[CG_MAX_IN], nb = 0, first = -1;
    for (int k = 0; k < n->n_in; k++) {
        b[k] = n->in[k] >= 0 && n->in[k] < r->n_vals0 ? r->bent[n->in[k]] : -1;
        if (b[k] != -1) nb++, first = first < 0 ? k : first;
    }
    int64_t os[CATTR_MAX_DIMS], xs[CATTR_MAX_DIMS];
    int on = eshape(r, n->out, os), xn = eshape(r, n->in[first], xs);
    int64_t onum = prod(os, on), xnum = prod(xs, xn);
    if (b[first] == -3) return -3;
    switch (n->op) {
    case CG_IDENTITY: case CG_CAST: case CG_UNSQUEEZE: case CG_SQUEEZE: case CG_RESHAPE: case CG_FLATTEN:
        return first == 0 && onum == xnum ? b[0] : -3;
    case CG_GATHER: {
        if (first != 0 || xn != 1 || r->g->vals[n->in[1]].kind != CG_VAL_CONST) return -3;
        const cattr_tensor *t = r->g->vals[n->in[1]].data;
        int at = -1;
        for (int64_t k = 0; k < t->numel; k++) {
            int64_t ix = const_at(r, n->in[1], k);
            if ((ix < 0 ? ix + xs[0] : ix) == b[0]) {
                if (at >= 0) return -3;
                at = (int)k;
            }
        }
        return at;
    }
    case CG_SLICE: {
        if (first != 0 || xn != 1 || n->n_in > 1) return -3;
        int ns = n->a.n_ints / 4;
        if (ns == 0) return b[0];
        if (ns != 1 || n->a.ints[3] != 1) return -3;
        int64_t st = n->a.ints[0] < 0 ? n->a.ints[0] + xs[0] : n->a.ints[0], en = n->a.ints[1];
        if (en < 0) en += xs[0];
        return b[0] >= st && b[0] < en ? (int)(b[0] - st) : -1;
    }
    case CG_CONCAT: {
        if (nb != 1 || on != 1) return -3;
        int64_t off = 0, ks[CATTR_MAX_DIMS];
        for (int k = 0; k < first; k++) eshape(r, n->in[k], ks), off += ks[0];
        return (int)(off + b[first]);
    }
    case CG_EQUAL: return -1; /* flags, not sizes */
    case CG_ADD: case CG_SUB: case CG_MUL: case CG_DIV: case CG_MOD: case CG_MAX: case CG_MIN: case CG_WHERE: {
        int lo = n->op == CG_WHERE ? 1 : 0, bb = -1, cnt = 0;
        for (int k = lo; k < n->n_in; k++) {
            if (b[k] == -1) continue;
            if (b[k] == -3) return -3;
            int64_t ks[CATTR_MAX_DIMS];
            int kn = eshape(r, n->in[k], ks);
            if (prod(ks, kn) != onum) return -3; /* a batch size broadcast over a shape */
            if (cnt++ && b[k] != bb) return -3;
            bb = b[k];
        }
        if (n->op != CG_MUL && n->op != CG_DIV && n->op != CG_WHERE && n->op != CG_MAX && n->op != CG_MIN && bb >= 0)
            return -3; /* the batch size plus something: no longer a multiple of it */
        return bb;
    }
    default: return -3;
    }
}

/* The state of a shape input (its bent) for node i's input k: -1 fixed at export (a constant, or computed from
 * shapes that do not hold the batch), >= 0 the entry holding the call's batch, -3 not followed. */
static int shape_bent(const rb *r, const cg_node *n, int k) {
    if (k >= n->n_in || n->in[k] < 0) return -1;
    return n->in[k] < r->n_vals0 ? r->bent[n->in[k]] : -1;
}

/* Tracks node i with the option `opt` of its choices (*nopt: how many): sets its output's batch axis, multiplier and
 * shape entry, or returns RB_FAIL (r->why says why). In the apply pass, rewrites the shapes that pin the batch. */
static int track(rb *r, int i, int opt, int *nopt) {
    cg_node *n = &r->g->nodes[i];
    int in_ax[CG_MAX_IN], any = -1, anyb = -1;
    *nopt = 1;
    for (int k = 0; k < n->n_in; k++) {
        int v = n->in[k];
        in_ax[k] = v >= 0 && v < r->n_vals0 ? r->ax[v] : -1;
        if (in_ax[k] >= 0 && any < 0) any = k;
        if (v >= 0 && v < r->n_vals0 && r->bent[v] != -1 && anyb < 0) anyb = k;
    }
    int o = n->out;
    r->ax[o] = -1;
    r->mm[o] = 1;
    r->bent[o] = -1;
    if (any < 0 && anyb < 0) return 0; /* nothing here depends on the batch */
    int64_t xs[CATTR_MAX_DIMS], os[CATTR_MAX_DIMS];
    int on = eshape(r, o, os);
    if (any < 0) { /* integer shape arithmetic, or a value made in a shape that holds the batch */
        int sb = -1;
        switch (n->op) {
        case CG_CONSTANT_OF_SHAPE: case CG_EXPAND: case CG_RESHAPE: {
            int k = n->op == CG_CONSTANT_OF_SHAPE ? 0 : 1;
            sb = shape_bent(r, n, k);
            if (sb == -3) return fail(r, i, "takes a shape computed from the batch in a way not followed");
            if (sb < 0) return 0;
            if (n->op == CG_RESHAPE) return fail(r, i, "gives a shared value the batch");
            r->ax[o] = sb;
            r->mm[o] = os[sb] % r->eb ? 1 : os[sb] / r->eb;
            return 0;
        }
        case CG_SLICE: case CG_TILE: case CG_PAD: case CG_RESIZE: case CG_RANGE: case CG_SCATTER_ND:
            return fail(r, i, "takes bounds computed from the batch size");
        default:
            if (is_int(r, o) && on <= 1) {
                r->bent[o] = track_bent(r, i);
                return 0;
            }
            return fail(r, i, "computes with the batch size");
        }
    }
    int a = in_ax[any];
    int64_t m = r->mm[n->in[any]];
    int xn = eshape(r, n->in[any], xs);
    r->mm[o] = m;
    switch (n->op) {
    case CG_IDENTITY: case CG_RELU: case CG_LEAKYRELU: case CG_SIGMOID: case CG_TANH: case CG_CLIP: case CG_NEG:
    case CG_ABS: case CG_SQRT: case CG_EXP: case CG_LOG: case CG_ERF: case CG_RECIPROCAL: case CG_HARDSIGMOID:
    case CG_HARDSWISH: case CG_SOFTPLUS: case CG_ELU: case CG_SELU: case CG_GELU: case CG_CAST:
    case CG_ADD: case CG_SUB: case CG_MUL: case CG_DIV: case CG_POW: case CG_MAX: case CG_MIN: case CG_EQUAL:
    case CG_WHERE: case CG_MOD: { /* numpy broadcasting: axes align at the end */
        int oa = -1;
        for (int k = 0; k < n->n_in; k++) {
            if (n->in[k] < 0 || in_ax[k] < 0) continue;
            int64_t ks[CATTR_MAX_DIMS];
            int kn = eshape(r, n->in[k], ks), ok = in_ax[k] + on - kn;
            if (oa >= 0 && (ok != oa || r->mm[n->in[k]] != m))
                return fail(r, i, "combines values whose batches are laid out differently");
            oa = ok;
        }
        for (int k = 0; k < n->n_in; k++) { /* a shared value broadcast to more than one example */
            if (n->in[k] < 0 || in_ax[k] >= 0) continue;
            int64_t ks[CATTR_MAX_DIMS];
            int kn = eshape(r, n->in[k], ks), at = oa - (on - kn);
            if (at < 0 || ks[at] == 1) continue;
            if (os[oa] != r->eb * m) return fail(r, i, "broadcasts a shared value inside the batch's axis");
            tile_input(r, i, k, n->in[any], a, at);
        }
        r->ax[o] = oa;
        return 0;
    }
    case CG_SOFTMAX: case CG_LOGSOFTMAX: {
        int sax = n->op == CG_LOGSOFTMAX ? xn - 1 : (int)(n->a.axis < 0 ? n->a.axis + xn : n->a.axis);
        if (n->op == CG_SOFTMAX && n->a.index ? a >= sax : a == sax) return fail(r, i, "normalises over the batch");
        r->ax[o] = a;
        return 0;
    }
    case CG_CONV: case CG_MAXPOOL: case CG_AVGPOOL: case CG_GLOBALAVGPOOL: case CG_BATCHNORM: case CG_RESIZE:
    case CG_CONV_GRAD_INPUT: { /* [N, C, ...] */
        for (int k = 0; k < n->n_in; k++)
            if (in_ax[k] > 0) return fail(r, i, "has its batch on axis %d (its inputs are [N, C, ...])", in_ax[k]);
        if (n->op == CG_RESIZE && n->n_in == 1 && n->a.n_ints > 0) {
            if (n->a.ints[0] != xs[0]) return fail(r, i, "resizes the batch");
            rewrite_shape(r, i, 0, n->in[0], 0);
        } else if (n->op == CG_RESIZE && n->n_in > 1) {
            int sb = shape_bent(r, n, 1);
            if (sb != 0) return fail(r, i, "takes sizes that do not carry the batch");
        }
        r->ax[o] = 0;
        return 0;
    }
    case CG_RESHAPE: case CG_FLATTEN: {
        int js[CATTR_MAX_DIMS];
        int64_t ms[CATTR_MAX_DIMS];
        int nw = reshape_ways(r, xs, xn, a, m, os, on, js, ms);
        int sb = n->op == CG_RESHAPE ? shape_bent(r, n, 1) : -1;
        if (sb == -3) return fail(r, i, "takes a shape computed from the batch in a way not followed");
        if (sb >= 0) { /* the call's own batch: the shape says where it goes */
            int k = 0;
            while (k < nw && js[k] != sb) k++;
            if (k == nw) return fail(r, i, "puts the batch where its layout cannot be");
            r->ax[o] = sb;
            r->mm[o] = ms[k];
            return 0;
        }
        if (nw == 0) return fail(r, i, "merges the batch with other dims");
        *nopt = nw;
        int j = js[opt];
        r->ax[o] = j;
        r->mm[o] = ms[opt];
        if (n->op == CG_FLATTEN) return 0;
        if (n->n_in > 1) { /* computed from shapes without the batch: scale its entry */
            rewrite_shape(r, i, j, n->in[0], a);
            return 0;
        }
        int64_t t = n->a.ints[j];
        if (t == 0 && !n->a.allowzero && j != a) return fail(r, i, "copies another dim where the batch goes");
        if (t > 0) rewrite_shape(r, i, j, n->in[0], a); /* a -1 or a copied dim takes the batch itself */
        return 0;
    }
    case CG_TRANSPOSE:
        for (int d = 0; d < on; d++) {
            int pd = n->a.n_ints ? (int)n->a.ints[d] : on - 1 - d;
            if ((pd < 0 ? pd + xn : pd) == a) {
                r->ax[o] = d;
                return 0;
            }
        }
        return fail(r, i, "has no output axis for the batch");
    case CG_UNSQUEEZE: {
        bool ins[CATTR_MAX_DIMS] = {0};
        for (int k = 0; k < n->a.n_ints; k++) ins[n->a.ints[k] < 0 ? n->a.ints[k] + on : n->a.ints[k]] = true;
        for (int d = 0, src = 0; d < on; d++) {
            if (ins[d]) continue;
            if (src++ == a) r->ax[o] = d;
        }
        return 0;
    }
    case CG_SQUEEZE: {
        int64_t axes[CATTR_MAX_DIMS];
        int na = 0;
        if (n->a.n_ints == 0) { /* every dim of size 1: at another batch the batch's would stay; name the others */
            for (int d = 0; d < xn; d++)
                if (xs[d] == 1 && d != a) axes[na++] = d;
        } else {
            for (int k = 0; k < n->a.n_ints; k++) axes[na++] = n->a.ints[k] < 0 ? n->a.ints[k] + xn : n->a.ints[k];
        }
        int oa = a;
        for (int k = 0; k < na; k++) {
            if (axes[k] == a) return fail(r, i, "removes the batch dim");
            if (axes[k] < a) oa--;
        }
        if (r->apply && n->a.n_ints == 0) {
            memcpy(n->a.ints, axes, (size_t)na * sizeof *axes);
            n->a.n_ints = na;
            if (na == 0) n->op = CG_IDENTITY;
            r->n_rewrites++;
        }
        r->ax[o] = oa;
        return 0;
    }
    case CG_CONCAT: {
        int cax = (int)(n->a.axis < 0 ? n->a.axis + on : n->a.axis);
        for (int k = 0; k < n->n_in; k++)
            if (in_ax[k] >= 0 && (in_ax[k] != a || r->mm[n->in[k]] != m))
                return fail(r, i, "joins values whose batches are laid out differently");
        if (cax == a) return fail(r, i, "joins along the batch axis");
        for (int k = 0; k < n->n_in; k++) {
            if (in_ax[k] >= 0) continue;
            if (xs[a] != r->eb * m) return fail(r, i, "joins a shared value inside the batch's axis");
            tile_input(r, i, k, n->in[any], a, a);
        }
        r->ax[o] = a;
        return 0;
    }
    case CG_GATHER: {
        int gax = (int)(n->a.axis < 0 ? n->a.axis + xn : n->a.axis);
        int64_t is[CATTR_MAX_DIMS];
        int in_n = eshape(r, n->in[1], is);
        if (in_ax[0] >= 0 && in_ax[1] >= 0) return fail(r, i, "indexes batched data with batched indices");
        if (in_ax[0] >= 0) {
            if (a == gax) return fail(r, i, "picks along the batch axis");
            r->ax[o] = a < gax ? a : a + in_n - 1;
        } else {
            int dn = eshape(r, n->in[0], xs);
            gax = (int)(n->a.axis < 0 ? n->a.axis + dn : n->a.axis);
            r->ax[o] = gax + in_ax[1];
        }
        return 0;
    }
    case CG_SLICE: {
        if (n->n_in > 1) { /* bounds computed from shapes: the call's own, unless they hold a batch fixed */
            r->ax[o] = a;
            return 0;
        }
        int ns = n->a.n_ints / 4;
        for (int k = 0; k < ns; k++) {
            int d = (int)(n->a.ints[2 * ns + k] < 0 ? n->a.ints[2 * ns + k] + xn : n->a.ints[2 * ns + k]);
            if (d != a) continue;
            if (n->a.ints[k] == 0 && n->a.ints[3 * ns + k] == 1 && n->a.ints[ns + k] >= xs[a]) {
                if (r->apply) n->a.ints[ns + k] = INT64_MAX; /* the whole batch */
                continue;
            }
            return fail(r, i, "slices the batch axis");
        }
        r->ax[o] = a;
        return 0;
    }
    case CG_PAD:
        if (any != 0) return fail(r, i, "pads by amounts computed from the batch");
        if (n->n_in == 1 && (n->a.ints[a] != 0 || n->a.ints[xn + a] != 0)) return fail(r, i, "pads the batch axis");
        r->ax[o] = a;
        return 0;
    case CG_EXPAND: {
        if (any != 0) return fail(r, i, "expands to a shape computed from the batch");
        int oa = a + on - xn, sb = shape_bent(r, n, 1);
        if (sb == -3) return fail(r, i, "takes a shape computed from the batch in a way not followed");
        if (sb >= 0 && sb != oa) return fail(r, i, "expands the batch to another axis");
        int nt = n->n_in == 1 ? n->a.n_ints : on, j = oa - (on - nt);
        if (sb < 0 && j >= 0) {
            bool big = n->n_in == 1 ? n->a.ints[j] > 1 : os[oa] > xs[a];
            if (n->n_in == 1 && n->a.ints[j] > 1 && n->a.ints[j] != xs[a]) return fail(r, i, "expands the batch");
            if (big) rewrite_shape(r, i, j, n->in[0], a);
        }
        r->ax[o] = oa;
        return 0;
    }
    case CG_TILE:
        if (any != 0 || n->n_in > 1) return fail(r, i, "tiles by counts computed from the batch");
        if (n->a.ints[a] != 1) return fail(r, i, "repeats the batch");
        r->ax[o] = a;
        return 0;
    case CG_REDUCE_SUM: case CG_REDUCE_MEAN: case CG_REDUCE_MAX: case CG_REDUCE_MIN: case CG_TORCH_SUM: {
        bool red[CATTR_MAX_DIMS] = {0};
        if (n->op == CG_TORCH_SUM) red[n->a.ints[0] < 0 ? n->a.ints[0] + xn : n->a.ints[0]] = true;
        else if (n->a.n_ints == 0) return fail(r, i, "reduces over every axis, the batch's too");
        else
            for (int k = 0; k < n->a.n_ints; k++) red[n->a.ints[k] < 0 ? n->a.ints[k] + xn : n->a.ints[k]] = true;
        if (red[a]) return fail(r, i, "reduces over the batch");
        int oa = a;
        if (!n->a.index)
            for (int d = 0; d < a; d++) oa -= red[d];
        r->ax[o] = oa;
        return 0;
    }
    case CG_MATMUL: case CG_GEMM: {
        int64_t bs[CATTR_MAX_DIMS];
        int an = eshape(r, n->in[0], xs), bn = eshape(r, n->in[1], bs);
        if (n->op == CG_GEMM) {
            if (in_ax[0] < 0 || in_ax[0] != (n->a.trans_a ? 1 : 0)) return fail(r, i, "contracts the batch");
            if (in_ax[1] >= 0 || (n->n_in > 2 && in_ax[2] >= 0)) return fail(r, i, "has a batched weight");
            r->ax[o] = 0;
            return 0;
        }
        if (an < 2 || bn < 2) return fail(r, i, "multiplies a vector holding the batch");
        int oa = -1;
        if (in_ax[0] >= 0) {
            if (in_ax[0] == an - 1) return fail(r, i, "contracts the batch");
            oa = in_ax[0] + on - an;
        }
        if (in_ax[1] >= 0) {
            if (in_ax[1] == bn - 2) return fail(r, i, "contracts the batch");
            int ob = in_ax[1] + on - bn;
            if (oa >= 0 && (ob != oa || r->mm[n->in[1]] != r->mm[n->in[0]]))
                return fail(r, i, "combines values whose batches are laid out differently");
            oa = ob;
        }
        if (oa < on - 2) /* a batch dim: a shared operand with more than one there is tiled */
            for (int k = 0; k < 2; k++) {
                int kn = k ? bn : an, at = oa - (on - kn);
                const int64_t *ks = k ? bs : xs;
                if (in_ax[k] >= 0 || at < 0 || ks[at] == 1) continue;
                if (os[oa] != r->eb * m) return fail(r, i, "broadcasts a shared value inside the batch's axis");
                tile_input(r, i, k, n->in[any], a, at);
            }
        r->ax[o] = oa;
        return 0;
    }
    case CG_RNN: {
        if (in_ax[0] != 1) return fail(r, i, "has its batch on axis %d of X [sequence, batch, features]", in_ax[0]);
        for (int k = 4; k < n->n_in; k++) {
            if (n->in[k] < 0 || in_ax[k] == 1) continue;
            if (in_ax[k] >= 0) return fail(r, i, "has an initial state batched on axis %d", in_ax[k]);
            tile_input(r, i, k, n->in[0], 1, 1);
        }
        r->ax[o] = 2;
        return 0;
    }
    case CG_SHAPE: {
        if (n->a.index == 1) { /* Size: a count that holds the batch */
            r->bent[o] = 0;
            return 0;
        }
        int64_t lo = n->a.n_ints > 0 ? n->a.ints[0] : 0, hi = n->a.n_ints > 1 ? n->a.ints[1] : xn;
        if (lo < 0) lo += xn;
        if (hi < 0) hi += xn;
        r->bent[o] = a >= lo && a < hi ? (int)(a - lo) : -1;
        return 0;
    }
    case CG_CONSTANT_OF_SHAPE: case CG_RANGE:
        return 0; /* integers from shapes */
    default:
        return fail(r, i, "is not followed through by the re-batching");
    }
}

/* Puts the nodes in dependency order again (the helpers were appended): each node after the producers of its
 * inputs, the imported order kept otherwise. */
static cattr_status reorder(cg_graph *g) {
    int n = g->n_nodes;
    int *order = malloc((size_t)n * sizeof *order), *stack = malloc((size_t)n * sizeof *stack);
    char *done = calloc((size_t)n, 1);
    cg_node *nodes = malloc((size_t)n * sizeof *nodes);
    cattr_status st = CATTR_OK;
    if (!order || !stack || !done || !nodes) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory re-batching the graph");
    int k = 0;
    for (int i0 = 0; st == CATTR_OK && i0 < n; i0++) {
        if (done[i0]) continue;
        int sp = 0;
        stack[sp++] = i0;
        while (sp) {
            int i = stack[sp - 1], next = -1;
            for (int j = 0; j < g->nodes[i].n_in && next < 0; j++) {
                int v = g->nodes[i].in[j];
                if (v >= 0 && g->vals[v].kind == CG_VAL_NODE && !done[g->vals[v].producer]) next = g->vals[v].producer;
            }
            if (next >= 0 && sp < n) {
                stack[sp++] = next;
                continue;
            }
            sp--;
            if (!done[i]) {
                done[i] = 1;
                order[k++] = i;
            }
        }
    }
    if (st == CATTR_OK) {
        for (int i = 0; i < n; i++) nodes[i] = g->nodes[order[i]];
        memcpy(g->nodes, nodes, (size_t)n * sizeof *nodes);
        for (int i = 0; i < n; i++) g->vals[g->nodes[i].out].producer = i;
    }
    free(order);
    free(stack);
    free(done);
    free(nodes);
    return st;
}

/* Follows the batch through every node, backtracking over the reshapes that could place it in more than one way:
 * opt[i] is the way node i takes. True when it reaches the end; r->why says why not. */
static bool search(rb *r, int *opt, int *nopt) {
    int i = 0;
    long visits = 0;
    while (i < r->n_nodes0) {
        if (++visits > RB_MAX_VISITS) {
            snprintf(r->why, sizeof r->why, "the batch's layout has too many possibilities to follow");
            return false;
        }
        if (track(r, i, opt[i], &nopt[i]) != RB_FAIL) {
            i++;
            continue;
        }
        /* back to the latest node with a way not yet tried */
        while (--i >= 0 && opt[i] + 1 >= nopt[i]) opt[i] = 0;
        if (i < 0) return false;
        opt[i]++;
    }
    for (int k = 0; k < r->g->n_outputs; k++) {
        int v = r->g->outputs[k];
        if (r->ax[v] > 0 || (r->ax[v] == 0 && r->mm[v] != 1)) {
            snprintf(r->why, sizeof r->why, "output '%s' does not have the batch first (axis %d)", r->g->vals[v].name,
                     r->ax[v]);
            return false;
        }
    }
    return true;
}

/* The model as exported, run in passes of its batch: its graph (the body) and the body's gradient graph, and the
 * maps of the MapRows nodes that run them. */
typedef struct cx_passes {
    cg_graph *body;  /* the graph as imported (owns its constants) */
    cg_graph *gbody; /* its gradient: inputs X0..Xn-1 and the gradient of output 0, outputs the float inputs'
                      * gradients (borrows the body's constants) */
    cg_map *maps;    /* one per output, then one per input (its gradient) */
} cx_passes;

void cx_passes_free(cx_passes *ps) {
    if (!ps) return;
    cg_free(ps->gbody);
    cg_free(ps->body);
    free(ps->maps);
    free(ps);
}

/* One pass's map of body g over the model's declared inputs, eb rows each (a gradient map adds the output's gradient
 * as a last input after this). */
static void map_init(cg_map *mp, const cattr_model *m, const cg_graph *g, int out, int64_t eb) {
    mp->g = g;
    mp->out = out;
    mp->n_in = m->g->n_inputs;
    for (int j = 0; j < mp->n_in; j++) {
        mp->in_rows[j] = eb;
        mp->in_ndim[j] = m->in_ndim[j];
        memcpy(mp->in_shape[j], m->in_shape[j], sizeof mp->in_shape[j]);
        mp->int_in[j] = m->in_dtype[j] == CATTR_INT64;
    }
}

/* Makes m's graph MapRows nodes over the graph as exported (see model.h). m->batch_note says why not where it cannot
 * (the graph then stays). Errors: CATTR_ERR_NO_MEMORY. */
static cattr_status make_passes(cattr_model *m, const rb *r) {
    cg_graph *g = m->g;
    int ni = g->n_inputs, no = g->n_outputs;
    char why[200] = "";
    if (ni + 1 > CG_MAX_IN_MAP) snprintf(why, sizeof why, "more than %d inputs", CG_MAX_IN_MAP - 1);
    for (int i = 0; !why[0] && i < ni; i++) {
        bool ok = m->in_ndim[i] >= 1 && m->in_shape[i][0] == r->eb;
        for (int d = 1; ok && d < m->in_ndim[i]; d++) ok = m->in_shape[i][d] >= 0;
        if (!ok) snprintf(why, sizeof why, "input '%s' has dynamic dims besides the batch", g->vals[g->inputs[i]].name);
    }
    int64_t osh[CATTR_MAX_DIMS];
    for (int k = 0; !why[0] && k < no; k++)
        if (eshape(r, g->outputs[k], osh) < 1) snprintf(why, sizeof why, "output '%s' is a scalar", g->vals[g->outputs[k]].name);
    if (why[0]) {
        size_t len = strlen(m->batch_note);
        snprintf(m->batch_note + len, sizeof m->batch_note - len, "; nor can it run in passes: %s", why);
        return CATTR_OK;
    }
    cx_passes *ps = calloc(1, sizeof *ps);
    cg_map *maps = calloc((size_t)(no + ni), sizeof *maps);
    cg_graph *ng = cg_new(), *gb = cg_clone(g);
    cattr_status st = ps && maps && ng && gb ? CATTR_OK : CATTR_ERR_NO_MEMORY;
    for (int k = 0; st == CATTR_OK && k < no; k++) { /* forward: one map per output */
        cg_map *mp = &maps[k];
        map_init(mp, m, g, k, r->eb);
        mp->out_ndim = eshape(r, g->outputs[k], mp->out_shape);
    }
    /* the gradient of output 0 with respect to each float input, for the gradient maps */
    int wrt[CG_MAX_IN_MAP], grads[CG_MAX_IN_MAP], nw = 0, gy = -1, which[CG_MAX_IN_MAP];
    if (st == CATTR_OK) {
        char nm[300];
        snprintf(nm, sizeof nm, "%s:gradient", g->vals[g->outputs[0]].name);
        gy = cg_add_input(gb, nm);
        if (gy < 0) st = CATTR_ERR_NO_MEMORY;
    }
    for (int i = 0; st == CATTR_OK && i < ni; i++)
        if (m->in_dtype[i] != CATTR_INT64) which[nw] = i, wrt[nw++] = gb->inputs[i];
    bool has_grad = false;
    if (st == CATTR_OK && nw) {
        cg_rules rules;
        cg_rules_default(&rules);
        cattr_status ad = cg_autodiff(gb, gb->outputs[0], gy, wrt, nw, &rules, grads);
        if (ad == CATTR_ERR_NO_MEMORY) st = ad;
        has_grad = ad == CATTR_OK; /* else forward passes only: a method that needs the gradient fails, naming why */
        gb->n_outputs = 0;
        for (int k = 0; st == CATTR_OK && has_grad && k < nw; k++)
            if (cg_add_output(gb, grads[k]) != 0) st = CATTR_ERR_NO_MEMORY;
    }
    for (int k = 0; st == CATTR_OK && has_grad && k < nw; k++) {
        int i = which[k];
        cg_map *mp = &maps[no + i];
        map_init(mp, m, gb, k, r->eb);
        mp->n_in = ni + 1;
        mp->in_rows[ni] = maps[0].out_shape[0];
        mp->in_ndim[ni] = maps[0].out_ndim;
        memcpy(mp->in_shape[ni], maps[0].out_shape, sizeof mp->in_shape[ni]);
        mp->out_ndim = m->in_ndim[i];
        memcpy(mp->out_shape, m->in_shape[i], sizeof mp->out_shape);
        maps[0].grad[i] = mp;
    }
    /* the new graph: the inputs, and a MapRows node per output under the output's name */
    int ins[CG_MAX_IN_MAP];
    for (int i = 0; st == CATTR_OK && i < ni; i++)
        if ((ins[i] = cg_add_input(ng, g->vals[g->inputs[i]].name)) < 0) st = CATTR_ERR_NO_MEMORY;
    for (int k = 0; st == CATTR_OK && k < no; k++) {
        cg_attrs a = cg_attrs_default();
        a.map = &maps[k];
        char nm[300];
        snprintf(nm, sizeof nm, "%s:passes", g->vals[g->outputs[k]].name);
        int y = cg_add_node(ng, CG_MAP_ROWS, nm, ins, ni, &a, g->vals[g->outputs[k]].name);
        if (y < 0 || cg_add_output(ng, y) != 0) st = CATTR_ERR_NO_MEMORY;
    }
    if (st != CATTR_OK) {
        cg_free(ng);
        cg_free(gb);
        free(maps);
        free(ps);
        return cx_fail(st, "out of memory preparing '%s' to run in passes", m->path);
    }
    ps->body = g;
    ps->gbody = gb;
    ps->maps = maps;
    m->passes = ps;
    m->g = ng;
    for (int i = 0; i < ni; i++) m->in_shape[i][0] = -1;
    if (!has_grad) {
        size_t len = strlen(m->batch_note);
        snprintf(m->batch_note + len, sizeof m->batch_note - len, "; it has no gradient: %s", cattr_last_error());
    }
    return CATTR_OK;
}

cattr_status cx_model_rebatch(cattr_model *m) {
    cg_graph *g = m->g;
    int64_t eb = 0;
    int nb = 0;
    for (int i = 0; i < g->n_inputs; i++) /* an input with a dynamic first dim: the batch is dynamic (a recurrent
                                             * state [2, B, H] beside it pins nothing) */
        if (m->in_ndim[i] >= 1 && m->in_shape[i][0] < 0) return CATTR_OK;
    for (int i = 0; i < g->n_inputs; i++) {
        if (m->in_ndim[i] < 1 || m->in_shape[i][0] < 1) continue;
        if (eb && m->in_shape[i][0] != eb) {
            snprintf(m->batch_note, sizeof m->batch_note, "its inputs are declared with different batches (%lld, %lld)",
                     (long long)eb, (long long)m->in_shape[i][0]);
            m->batch_exported = m->batch_rows = eb;
            return CATTR_OK;
        }
        eb = m->in_shape[i][0];
        nb++;
    }
    if (!nb) return CATTR_OK; /* a dynamic batch: nothing pinned */
    m->batch_exported = m->batch_rows = eb; /* until the batch is followed through: passes of the exported batch */
    if (g->n_inputs > 16) {
        snprintf(m->batch_note, sizeof m->batch_note, "it has more than 16 inputs");
        return CATTR_OK;
    }
    int nd[16];
    int64_t sh[16][CATTR_MAX_DIMS];
    for (int i = 0; i < g->n_inputs; i++) {
        nd[i] = m->in_ndim[i] < 0 ? 0 : m->in_ndim[i];
        for (int d = 0; d < nd[i]; d++) sh[i][d] = m->in_shape[i][d] < 0 ? 1 : m->in_shape[i][d];
    }
    int n0 = g->n_nodes, v0 = g->n_vals;
    rb r = {.g = g, .eb = eb, .n_vals0 = v0, .n_nodes0 = n0, .why_node = -1};
    int *outs = malloc((size_t)(n0 ? n0 : 1) * sizeof *outs), *opt = calloc((size_t)(n0 ? n0 : 1), sizeof *opt);
    int *nopt = calloc((size_t)(n0 ? n0 : 1), sizeof *nopt);
    r.ax = malloc((size_t)v0 * sizeof *r.ax);
    r.bent = malloc((size_t)v0 * sizeof *r.bent);
    r.mm = malloc((size_t)v0 * sizeof *r.mm);
    cx_backend *be = NULL;
    cx_consts *cc = NULL;
    cx_plan *pl = NULL;
    cattr_status st = outs && opt && nopt && r.ax && r.bent && r.mm
                          ? CATTR_OK
                          : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory re-batching '%s'", m->path);
    for (int i = 0; st == CATTR_OK && i < n0; i++) outs[i] = g->nodes[i].out;
    if (st == CATTR_OK) st = cx_model_backend(m, &be);
    if (st == CATTR_OK) st = cx_consts_new(be, CATTR_FLOAT32, &cc);
    if (st == CATTR_OK &&
        cx_plan_new(g, cc, true, nd, (const int64_t(*)[CATTR_MAX_DIMS])sh, m->in_dtype, outs, n0, &pl) != CATTR_OK) {
        snprintf(m->batch_note, sizeof m->batch_note, "its shapes could not be inferred for the declared inputs: %s",
                 cattr_last_error());
        goto done;
    }
    r.pl = pl;
    for (int i = 0; st == CATTR_OK && i < n0; i++)
        if (g->nodes[i].op == CG_IF || g->nodes[i].op == CG_HOST_CALL) {
            snprintf(m->batch_note, sizeof m->batch_note, "node '%s' (op %s) is not followed through by the re-batching",
                     g->nodes[i].name, cg_op_names[g->nodes[i].op]);
            st = make_passes(m, &r);
            goto done;
        }
    for (int v = 0; st == CATTR_OK && v < v0; v++) {
        const cg_value *val = &g->vals[v];
        bool in = val->kind == CG_VAL_INPUT && m->in_ndim[val->input_index] >= 1 &&
                  m->in_shape[val->input_index][0] == eb;
        r.ax[v] = in ? 0 : -1;
        r.mm[v] = 1;
        r.bent[v] = -1;
    }
    const char *force = getenv("CATTR_BATCH_PASSES"); /* a diagnostic: passes even where the batch can be followed */
    if (st == CATTR_OK && force && strcmp(force, "1") == 0) {
        snprintf(m->batch_note, sizeof m->batch_note, "CATTR_BATCH_PASSES=1 asks for passes");
        st = make_passes(m, &r);
        goto done;
    }
    if (st == CATTR_OK && !search(&r, opt, nopt)) {
        snprintf(m->batch_note, sizeof m->batch_note, "%s", r.why);
        st = make_passes(m, &r);
        goto done;
    }
    /* the second pass, along the ways found: rewrite */
    r.apply = true;
    for (int i = 0; st == CATTR_OK && i < n0; i++) {
        int k;
        if (track(&r, i, opt[i], &k) == RB_FAIL) st = cx_fail(CATTR_ERR_INTERNAL, "re-batching: %s", r.why);
        else if (r.st != CATTR_OK) st = cx_fail(r.st, "out of memory re-batching '%s'", m->path);
    }
    if (st == CATTR_OK) st = reorder(g);
    if (st == CATTR_OK) {
        for (int i = 0; i < g->n_inputs; i++)
            if (m->in_ndim[i] >= 1 && m->in_shape[i][0] == eb) m->in_shape[i][0] = -1;
        m->batch_rows = 0;
        m->batch_rewrites = r.n_rewrites;
    }
done:
    cx_plan_free(pl);
    cx_consts_free(cc);
    free(outs);
    free(opt);
    free(nopt);
    free(r.ax);
    free(r.bent);
    free(r.mm);
    return st;
}
