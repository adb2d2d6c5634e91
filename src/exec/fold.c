/* fold.c - what the planner computes on the host before a plan runs: shape values computed from shapes (folded into
 * the nodes' attributes), and the If nodes resolved from their conditions (or left to the run: IF_AT_RUN). */
#include "exec/plan_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- shapes computed from shapes -----------------------------------------------------------------------------
 * Exporters compute target shapes from the input's shape: Shape -> Gather -> Div -> Cast -> Unsqueeze -> Concat ->
 * Reshape. A graph stays shape-polymorphic: when a call is planned for concrete input shapes, such a shape input is
 * evaluated here on the host from the shapes the plan has inferred and the constants, and becomes the node's
 * attributes; the nodes that computed it never run. */

bool cx_shape_value_input(const cg_node *n, int j) {
    return (n->op == CG_RESHAPE && j == 1) || (n->op == CG_SLICE && j >= 1) || (n->op == CG_SLICE_GRAD && j >= 2) ||
           (n->op == CG_CONSTANT_OF_SHAPE && j == 0) || (n->op == CG_EXPAND && j == 1) ||
           (n->op == CG_TILE && j == 1) || (n->op == CG_PAD && j == 1) || (n->op == CG_PAD_GRAD && j == 2) || (n->op == CG_RESIZE && j == 1) ||
           n->op == CG_RANGE;
}


static cattr_status fold_value(cx_plan *p, const cg_graph *g, int v, int depth, folded *f);
static cattr_status fold_compute(cx_plan *p, const cg_graph *g, int v, int depth, folded *f);
static cattr_status if_ensure(cx_plan *p, const cg_graph *g, int v0);

/* Writes the folded shape inputs of node r (cx_shape_value_input; fi[j] for input j) into its attributes: Range's three
 * scalars, Slice's starts, ends, axes and steps, or the one shape (Reshape's target, Expand's, ConstantOfShape's,
 * Tile's repeats, Pad's pads). The caller drops the inputs from `first` on. */
static cattr_status apply_folded(cg_node *r, int first, const folded *fi) {
    if (r->op == CG_RANGE) {
        for (int j = 0; j < 3; j++) {
            if (fi[j].n != 1) return cx_fail(CATTR_ERR_SHAPE, "input %d is not a scalar", j);
            r->a.ints[j] = fi[j].v[0];
        }
        r->a.n_ints = 3;
        return CATTR_OK;
    }
    if (r->op == CG_SLICE || r->op == CG_SLICE_GRAD) {
        int cnt[4];
        for (int j = 0; j < 4; j++) cnt[j] = first + j < r->n_in && r->in[first + j] >= 0 ? fi[first + j].n : -1;
        int ns = cnt[0];
        if (ns < 0 || cnt[1] != ns || (cnt[2] >= 0 && cnt[2] != ns) || (cnt[3] >= 0 && cnt[3] != ns) || 4 * ns > CG_MAX_INTS)
            return cx_fail(CATTR_ERR_SHAPE, "starts, ends, axes and steps differ in length");
        for (int i = 0; i < ns; i++) {
            r->a.ints[i] = fi[first].v[i];
            r->a.ints[ns + i] = fi[first + 1].v[i];
            r->a.ints[2 * ns + i] = cnt[2] >= 0 ? fi[first + 2].v[i] : i;
            r->a.ints[3 * ns + i] = cnt[3] >= 0 ? fi[first + 3].v[i] : 1;
        }
        r->a.n_ints = 4 * ns;
        return CATTR_OK;
    }
    int cnt = fi[first].n;
    int most = r->op == CG_RESHAPE ? FOLD_MAX : r->op == CG_PAD || r->op == CG_PAD_GRAD ? 2 * CATTR_MAX_DIMS : CATTR_MAX_DIMS;
    if (cnt > most) return cx_fail(CATTR_ERR_SHAPE, "%d values, at most %d", cnt, most);
    memcpy(r->a.ints, fi[first].v, (size_t)cnt * sizeof *fi[first].v);
    r->a.n_ints = cnt;
    return CATTR_OK;
}

static int first_shape_input(const cg_node *r) {
    for (int j = 0; j < r->n_in; j++)
        if (cx_shape_value_input(r, j)) return j;
    return -1;
}

/* Element k of the folded node's output (shape `o`), read from its folded inputs: the shape ops and the integer
 * arithmetic exporters compute shapes with. */
static cattr_status fold_elem(const cg_node *nd, const folded *fi, const cx_view *o, int64_t k, int64_t *out) {
    int64_t c[CATTR_MAX_DIMS], rem = k;
    for (int d = o->ndim - 1; d >= 0; d--) {
        c[d] = rem % o->shape[d];
        rem /= o->shape[d];
    }
#define AT(j) cx_bcast_at(o->ndim, c, fi[j].ndim, fi[j].shape)
    switch (nd->op) {
    case CG_IDENTITY: case CG_UNSQUEEZE: case CG_SQUEEZE: case CG_CAST: case CG_RESHAPE: case CG_FLATTEN:
        *out = fi[0].v[k];
        return CATTR_OK;
    case CG_EXPAND: case CG_TILE:
        if (nd->op == CG_TILE) {
            int64_t at = 0;
            for (int d = 0; d < o->ndim; d++) at = at * fi[0].shape[d] + c[d] % fi[0].shape[d];
            *out = fi[0].v[at];
        } else {
            *out = fi[0].v[AT(0)];
        }
        return CATTR_OK;
    case CG_CONSTANT_OF_SHAPE: *out = (int64_t)nd->a.alpha; return CATTR_OK;
    case CG_RANGE: *out = cx_range_at(nd->a.ints[0], nd->a.ints[2], k); return CATTR_OK;
    case CG_WHERE: *out = fi[0].v[AT(0)] ? fi[1].v[AT(1)] : fi[2].v[AT(2)]; return CATTR_OK;
    case CG_TRANSPOSE: case CG_SLICE: {
        const folded *x = &fi[0];
        int64_t at = 0, stride = 1, st[CATTR_MAX_DIMS], sp[CATTR_MAX_DIMS], cnt[CATTR_MAX_DIMS];
        if (nd->op == CG_SLICE) cx_slice_resolve(&nd->a, x->ndim, x->shape, st, sp, cnt);
        int64_t strides[CATTR_MAX_DIMS];
        for (int d = x->ndim - 1; d >= 0; d--) {
            strides[d] = stride;
            stride *= x->shape[d];
        }
        for (int d = 0; d < o->ndim; d++) {
            if (nd->op == CG_SLICE) {
                at += (st[d] + c[d] * sp[d]) * strides[d];
            } else {
                int pd = nd->a.n_ints ? (int)nd->a.ints[d] : o->ndim - 1 - d;
                at += c[d] * strides[pd < 0 ? pd + x->ndim : pd];
            }
        }
        *out = x->v[at];
        return CATTR_OK;
    }
    case CG_CONCAT: {
        int ax = (int)(nd->a.axis < 0 ? nd->a.axis + o->ndim : nd->a.axis);
        int64_t pos = c[ax];
        for (int j = 0; j < nd->n_in; j++) {
            if (pos < fi[j].shape[ax]) {
                int64_t at = 0;
                for (int d = 0; d < o->ndim; d++) at = at * fi[j].shape[d] + (d == ax ? pos : c[d]);
                *out = fi[j].v[at];
                return CATTR_OK;
            }
            pos -= fi[j].shape[ax];
        }
        return cx_fail(CATTR_ERR_INTERNAL, "node '%s': concat position out of range", nd->name);
    }
    case CG_GATHER: { /* out = data[:axis] + indices + data[axis+1:] */
        const folded *x = &fi[0], *ix = &fi[1];
        int ax = (int)(nd->a.axis < 0 ? nd->a.axis + x->ndim : nd->a.axis);
        int64_t iat = 0;
        for (int d = 0; d < ix->ndim; d++) iat = iat * ix->shape[d] + c[ax + d];
        int64_t i = ix->v[iat] < 0 ? ix->v[iat] + x->shape[ax] : ix->v[iat];
        if (i < 0 || i >= x->shape[ax])
            return cx_fail(CATTR_ERR_SHAPE, "node '%s': index %lld out of range", nd->name, (long long)ix->v[iat]);
        int64_t at = 0;
        for (int d = 0; d < x->ndim; d++)
            at = at * x->shape[d] + (d < ax ? c[d] : d == ax ? i : c[d - 1 + ix->ndim]);
        *out = x->v[at];
        return CATTR_OK;
    }
    case CG_ADD: case CG_SUB: case CG_MUL: case CG_DIV: case CG_EQUAL: case CG_MOD: {
        int64_t x = fi[0].v[AT(0)], y = fi[1].v[AT(1)];
        bool over = false;
        switch (nd->op) {
        case CG_ADD: over = __builtin_add_overflow(x, y, out); break;
        case CG_SUB: over = __builtin_sub_overflow(x, y, out); break;
        case CG_MUL: over = __builtin_mul_overflow(x, y, out); break;
        case CG_EQUAL: *out = cx_compare((int)nd->a.index, (double)x, (double)y); break;
        case CG_MOD: *out = cx_mod_i(x, y, (int)nd->a.index); break;
        default:
            if (y == 0) return cx_fail(CATTR_ERR_SHAPE, "node '%s': division by zero", nd->name);
            over = x == INT64_MIN && y == -1;
            if (!over) *out = x / y;
        }
        if (over) return cx_fail(CATTR_ERR_SHAPE, "node '%s': the shape arithmetic overflows", nd->name);
        return CATTR_OK;
    }
    default:
        return cx_fail(CATTR_ERR_SHAPE, "node '%s' (op %s) computes a shape from data: only shapes and constants can "
                                        "give a shape", nd->name, cg_op_names[nd->op]);
    }
#undef AT
}

/* The int64 values and the shape of value v, computed from constants and the shapes the plan has inferred so far
 * (Shape reads the view of its input). Each node's output shape comes from its shape rule (cx_infer). */
static cattr_status fold_value(cx_plan *p, const cg_graph *g, int v, int depth, folded *f) {
    const cg_value *val = &g->vals[v];
    f->n = 0;
    f->ndim = 0;
    if (depth > 64) return cx_fail(CATTR_ERR_SHAPE, "value '%s': shape computation too deep to fold", val->name);
    if (!p->fmemo && !(p->fmemo = calloc((size_t)g->n_vals, sizeof *p->fmemo)))
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (p->fmemo[v]) {
        *f = *p->fmemo[v];
        return CATTR_OK;
    }
    cattr_status st = fold_compute(p, g, v, depth, f);
    if (st == CATTR_OK && (p->fmemo[v] = malloc(sizeof *f))) *p->fmemo[v] = *f; /* no memory: not kept, no error */
    return st;
}

/* fold_value without the memo. */
static cattr_status fold_compute(cx_plan *p, const cg_graph *g, int v, int depth, folded *f) {
    const cg_value *val = &g->vals[v];
    if (val->kind == CG_VAL_CONST) {
        const cattr_tensor *t = val->data;
        if (t->numel > FOLD_MAX) return cx_fail(CATTR_ERR_SHAPE, "constant '%s' is too long for a shape", val->name);
        for (int64_t k = 0; k < t->numel; k++)
            f->v[k] = t->dtype == CATTR_INT64 ? ((const int64_t *)t->data)[k] : (int64_t)cx_tensor_get(t, k);
        f->n = (int)t->numel;
        f->ndim = t->ndim;
        memcpy(f->shape, t->shape, (size_t)t->ndim * sizeof *t->shape);
        return CATTR_OK;
    }
    if (val->kind != CG_VAL_NODE)
        return cx_fail(CATTR_ERR_SHAPE, "a shape is computed from input '%s': it must depend only on shapes and "
                                        "constants", val->name);
    const cg_node *nd = &g->nodes[val->producer];
    if (nd->op == CG_IF) { /* the value of the branch taken */
        if (!p->ifc) return cx_fail(CATTR_ERR_INTERNAL, "node '%s' (op If) outside planning", nd->name);
        CX_CHECK(cx_pl_if_resolve(p, g, val->producer));
        if (p->ifc->choice[val->producer] == IF_AT_RUN)
            return cx_fail(CATTR_ERR_SHAPE, "node '%s' (op If) is decided when the call runs (its condition reads the "
                           "data): a shape cannot come through it", nd->name);
        int ch = nd->in[p->ifc->choice[val->producer]];
        if (ch < 0) return cx_fail(CATTR_ERR_SHAPE, "node '%s' (op If): the branch taken has no value", nd->name);
        return fold_value(p, g, ch, depth + 1, f);
    }
    if (nd->op == CG_SHAPE) {
        if (p->ifc) CX_CHECK(if_ensure(p, g, nd->in[0])); /* folding an If's condition before the shapes pass */
        const cx_view *x = &p->views[nd->in[0]];
        if (nd->a.index == 1) { /* Size */
            f->v[f->n++] = cx_view_numel(x);
            return CATTR_OK;
        }
        int64_t lo = nd->a.n_ints > 0 ? nd->a.ints[0] : 0, hi = nd->a.n_ints > 1 ? nd->a.ints[1] : x->ndim;
        if (lo < 0) lo += x->ndim;
        if (hi < 0) hi += x->ndim;
        lo = lo < 0 ? 0 : lo > x->ndim ? x->ndim : lo;
        hi = hi < lo ? lo : hi > x->ndim ? x->ndim : hi;
        for (int64_t k = lo; k < hi; k++) f->v[f->n++] = x->shape[k];
        f->ndim = 1;
        f->shape[0] = f->n;
        return CATTR_OK;
    }
    folded *fi = malloc((size_t)CG_MAX_IN * sizeof *fi);
    if (!fi) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_status st = CATTR_OK;
    cg_node tmp = *nd;
    cx_view in[CG_MAX_IN], o;
    memset(in, 0, sizeof in);
    memset(&o, 0, sizeof o);
    for (int j = 0; j < nd->n_in && st == CATTR_OK; j++) {
        if (nd->in[j] < 0) continue;
        st = fold_value(p, g, nd->in[j], depth + 1, &fi[j]);
        in[j].dtype = CATTR_INT64;
        in[j].ndim = fi[j].ndim;
        memcpy(in[j].shape, fi[j].shape, sizeof in[j].shape);
    }
    int first = first_shape_input(nd);
    if (st == CATTR_OK && first >= 0) {
        st = apply_folded(&tmp, first, fi);
        tmp.n_in = first;
    }
    if (st == CATTR_OK && (tmp.op == CG_CAST || tmp.op == CG_CONSTANT_OF_SHAPE)) tmp.a.index = 1; /* int64 values */
    if (st == CATTR_OK) st = cx_infer(&tmp, in, &o);
    int64_t cnt = st == CATTR_OK ? cx_view_numel(&o) : 0;
    if (st == CATTR_OK && (cnt < 0 || cnt > FOLD_MAX))
        st = cx_fail(CATTR_ERR_SHAPE, "node '%s': too many values for a shape", nd->name);
    for (int64_t k = 0; k < cnt && st == CATTR_OK; k++) st = fold_elem(&tmp, fi, &o, k, &f->v[k]);
    if (st == CATTR_OK) {
        f->n = (int)cnt;
        f->ndim = o.ndim;
        memcpy(f->shape, o.shape, sizeof f->shape);
    }
    free(fi);
    return st;
}

/* Folds node r's shape inputs (cx_shape_value_input) into its attributes and drops them: Reshape's target, Expand's and
 * ConstantOfShape's shape, Slice's (and SliceGrad's) starts, ends, axes and steps, Tile's repeats, Pad's pads,
 * Range's scalars. Errors: CATTR_ERR_SHAPE naming the node. */
static cattr_status fold_node(cx_plan *p, const cg_graph *g, cg_node *r) {
    int first = first_shape_input(r);
    if (first < 0) return CATTR_OK;
    folded *fi = malloc((size_t)CG_MAX_IN * sizeof *fi);
    if (!fi) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_status st = CATTR_OK;
    for (int j = first; j < r->n_in && st == CATTR_OK; j++) {
        fi[j].n = 0;
        if (r->in[j] >= 0) st = fold_value(p, g, r->in[j], 0, &fi[j]);
        else if (r->op == CG_RANGE) st = cx_fail(CATTR_ERR_SHAPE, "input %d is missing", j);
    }
    if (st == CATTR_OK) st = apply_folded(r, first, fi);
    free(fi);
    if (st != CATTR_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", cattr_last_error());
        return cx_fail(CATTR_ERR_SHAPE, "node '%s' (op %s): %s", r->name, cg_op_names[r->op], msg);
    }
    r->n_in = first;
    return CATTR_OK;
}

/* The output view (shape and dtype, no data) of node n, a copy the caller owns: its shape inputs folded into its
 * attributes, then its shape rule. Errors: CATTR_ERR_SHAPE naming the node. */
cattr_status cx_pl_infer_node(cx_plan *p, const cg_graph *g, cg_node *n) {
    CX_CHECK(fold_node(p, g, n));
    cx_view in[CG_MAX_IN];
    for (int j = 0; j < n->n_in; j++) {
        if (n->in[j] < 0) memset(&in[j], 0, sizeof in[j]);
        else {
            in[j] = p->views[n->in[j]];
            in[j].data = (void *)1; /* marks "present" for optional-input checks */
        }
    }
    cx_view *o = &p->views[n->out];
    CX_CHECK(cx_infer(n, in, o));
    if (cx_dtype_is_storage(o->dtype)) o->dtype = CATTR_FLOAT32; /* rows of a stored matrix (Gather), widened */
    /* floats made from nothing or from integers (ConstantOfShape, NormalNoise, Cast of int64), and a host function's
     * output, take the call's float dtype */
    if (o->dtype == CATTR_FLOAT32 && !n->a.index &&
        (n->op == CG_CONSTANT_OF_SHAPE || n->op == CG_NORMAL_NOISE || n->op == CG_HOST_CALL || n->op == CG_MAP_ROWS ||
         (n->op == CG_CAST && in[0].dtype == CATTR_INT64)))
        o->dtype = p->consts_dtype;
    o->data = NULL;
    if (cx_view_numel(o) < 0 || (uint64_t)cx_view_numel(o) > (uint64_t)INT64_MAX / 8) {
        char sb[256];
        return cx_fail(CATTR_ERR_SHAPE, "node '%s' (op %s): output shape %s is too large", n->name, cg_op_names[n->op],
                       cx_shape_str(o->ndim, o->shape, sb, sizeof sb));
    }
    return CATTR_OK;
}

/* ---- If ------------------------------------------------------------------------------------------------------
 * An If (an imported ONNX If, or the gradient autodiff gives its branches) runs only the branch its condition takes.
 * Before the needed nodes are chosen, each If's condition is folded from shapes and constants (the shapes it reads are
 * inferred on demand, through the branches earlier Ifs take); the If becomes an Identity of the branch taken. A
 * gradient If whose branch taken is absent gives zeros: its value is "dead", and so is every node reading it, except
 * an Add (the sum of a value's gradients), which becomes an Identity of its other operand. So nothing of the branch not
 * taken, nor of its gradient, is planned or run. */

/* Infers the view of value v0 (and of the values it depends on, in dependency order) for folding a condition. */
static cattr_status if_ensure(cx_plan *p, const cg_graph *g, int v0) {
    if_ctx *c = p->ifc;
    if (c->state[v0] == 2) return CATTR_OK;
    int base = c->sp;
    c->stack[c->sp++] = v0;
    c->state[v0] = 1;
    cattr_status st = CATTR_OK;
    while (c->sp > base && st == CATTR_OK) {
        int v = c->stack[c->sp - 1];
        const cg_value *val = &g->vals[v];
        if (val->kind != CG_VAL_NODE) { /* inputs have their views; a constant's view is its host tensor's shape */
            if (val->kind == CG_VAL_CONST) {
                const cattr_tensor *t = val->data;
                cx_view *w = &p->views[v];
                w->dtype = t->dtype == CATTR_INT64 ? CATTR_INT64 : p->consts_dtype;
                w->ndim = t->ndim;
                memcpy(w->shape, t->shape, sizeof t->shape);
            }
            c->state[v] = 2;
            c->sp--;
            continue;
        }
        int i = val->producer;
        const cg_node *nd = &g->nodes[i];
        int next = -1;
        if (nd->op == CG_IF) {
            st = cx_pl_if_resolve(p, g, i);
            if (st != CATTR_OK) break;
            if (c->choice[i] == IF_AT_RUN) {
                st = cx_fail(CATTR_ERR_SHAPE, "node '%s' (op If) is decided when the call runs (its condition reads "
                             "the data): another If's condition cannot come through it", nd->name);
                break;
            }
            int ch = nd->in[c->choice[i]];
            if (ch < 0 || c->dead[ch]) {
                st = cx_fail(CATTR_ERR_SHAPE, "node '%s' (op If): the branch taken has no value", nd->name);
                break;
            }
            if (c->state[ch] != 2) next = ch;
            else p->views[v] = p->views[ch];
        } else {
            for (int j = 0; j < nd->n_in && next < 0; j++) /* shape inputs are folded, not inferred */
                if (nd->in[j] >= 0 && !cx_shape_value_input(nd, j) && c->state[nd->in[j]] != 2) next = nd->in[j];
            if (next < 0) {
                cg_node tmp = *nd;
                st = cx_pl_infer_node(p, g, &tmp);
                if (st != CATTR_OK) break;
            }
        }
        if (next >= 0) {
            if (c->state[next] == 1) {
                st = cx_fail(CATTR_ERR_INTERNAL, "value '%s' depends on itself", g->vals[next].name);
                break;
            }
            c->state[next] = 1;
            c->stack[c->sp++] = next;
            continue;
        }
        c->state[v] = 2;
        c->sp--;
    }
    while (c->sp > base) c->state[c->stack[--c->sp]] = 0; /* after a failure */
    return st;
}

/* Resolves If node i: folds its condition. Errors: CATTR_ERR_SHAPE naming the node when the condition is not known
 * when the call is planned. */
cattr_status cx_pl_if_resolve(cx_plan *p, const cg_graph *g, int i) {
    if_ctx *c = p->ifc;
    if (c->choice[i] > 0) return CATTR_OK;
    const cg_node *nd = &g->nodes[i];
    folded *f = malloc(sizeof *f);
    if (!f) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_status st = fold_value(p, g, nd->in[0], 0, f);
    if (st == CATTR_OK && f->n != 1) st = cx_fail(CATTR_ERR_SHAPE, "the condition has %d values, not one", f->n);
    if (st == CATTR_OK) c->choice[i] = f->v[0] != 0 ? 1 : 2;
    free(f);
    if (st == CATTR_ERR_NO_MEMORY) return st;
    if (st != CATTR_OK) { /* a condition read from the data: both branches planned, the kernel takes one per run */
        cx_log(CATTR_LOG_DEBUG, "node '%s' (op If) is decided when the call runs: %s", nd->name, cattr_last_error());
        c->choice[i] = IF_AT_RUN;
    }
    return CATTR_OK;
}

/* Node n becomes an Identity of value v. */
static void to_identity(cg_node *n, int v) {
    n->op = CG_IDENTITY;
    n->in[0] = v;
    n->n_in = 1;
    n->a = cg_attrs_default();
}

/* The nodes of g with every If resolved (into rw, a copy of g's nodes): an If becomes an Identity of the branch
 * taken, and dead values (above) are marked in c->dead. An If that cannot be resolved stays an If (an error if it is
 * needed). */
void cx_pl_if_rewrite(cx_plan *p, const cg_graph *g, cg_node *rw) {
    if_ctx *c = p->ifc;
    for (int i = 0; i < g->n_nodes; i++) {
        cg_node *n = &rw[i];
        *n = g->nodes[i];
        if (n->op == CG_IF) {
            if (c->choice[i] == 0) (void)cx_pl_if_resolve(p, g, i); /* its error is reported if it is needed */
            if (c->choice[i] == IF_AT_RUN) { /* a dead branch value is zeros: an absent one */
                for (int j = 1; j < 3; j++)
                    if (n->in[j] >= 0 && c->dead[n->in[j]]) n->in[j] = -1;
                if (n->in[1] < 0 && n->in[2] < 0) c->dead[n->out] = true;
                continue;
            }
            if (c->choice[i] <= 0) continue;
            int ch = n->in[c->choice[i]];
            if (ch < 0 || c->dead[ch]) c->dead[n->out] = true;
            else to_identity(n, ch);
            continue;
        }
        int n_dead = 0, live = -1;
        for (int j = 0; j < n->n_in; j++) {
            if (n->in[j] >= 0 && c->dead[n->in[j]]) n_dead++;
            else live = j;
        }
        if (!n_dead && n->op == CG_ADD && n->a.index == 1) to_identity(n, n->in[1]); /* an input's gradient + zeros */
        else if (n->op == CG_ADD && n->n_in == 2 && n_dead == 1) to_identity(n, n->in[live]); /* the other gradient */
        else if (n_dead) c->dead[n->out] = true;
    }
}

/* The plans of the MapRows nodes' bodies, one pass each, made once with the plan (a body is the model as exported:
 * it plans as any graph, with its own constants on the same backend and dtype). */
