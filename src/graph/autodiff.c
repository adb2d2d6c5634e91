/* autodiff.c - reverse-mode autodiff over the IR and the standard backward rule of each op. */
#include "autodiff.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cg_emit(cg_graph *g, cg_op op, const char *base, const int *in, int n_in, const cg_attrs *a) {
    char name[256];
    snprintf(name, sizeof name, "%s/grad/%s_%d", base, cg_op_names[op], g->n_nodes);
    int v = cg_add_node(g, op, name, in, n_in, a, NULL);
    if (v < 0) cx_fail(CATTR_ERR_NO_MEMORY, "out of memory while building the backward graph");
    return v;
}

/* Allocation failures inside rules are sticky: cg_emit records them and cg_autodiff checks after each rule, so
 * rules can nest EMIT calls without checking every step (an id of -1 fed to a later node is never executed). */
static _Thread_local bool g_emit_failed;

static int emitv(cg_graph *g, cg_op op, const char *base, const cg_attrs *a, int n, ...) {
    int in[CG_MAX_IN];
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) in[i] = va_arg(ap, int);
    va_end(ap);
    int v = cg_emit(g, op, base, in, n, a);
    if (v < 0) g_emit_failed = true;
    return v;
}

#define NARGS_(...) (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int))
#define EMIT(op, a, ...) emitv(g, op, nd.name, a, NARGS_(__VA_ARGS__), __VA_ARGS__)

/* ---- standard rules ------------------------------------------------------------------------------------------ */

static cattr_status r_identity(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)g; (void)ni; (void)u;
    if (need[0]) gx[0] = gy;
    return CATTR_OK;
}

/* rules of the form gx0 = OP(first, gy) with `first` = the node's input 0 or output */
static cattr_status unary_rule(cg_graph *g, int ni, int gy, const bool *need, int *gx, cg_op op, bool use_out) {
    cg_node nd = g->nodes[ni];
    if (need[0]) gx[0] = EMIT(op, &nd.a, use_out ? nd.out : nd.in[0], gy);
    return CATTR_OK;
}
static cattr_status r_relu(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    /* reads the output (Y > 0 iff X > 0), so the pre-activation can be fused away by the planner */
    return unary_rule(g, ni, gy, need, gx, CG_RELU_GRAD, true);
}
static cattr_status r_leakyrelu(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    return unary_rule(g, ni, gy, need, gx, CG_LEAKYRELU_GRAD, false);
}
static cattr_status r_sigmoid(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    return unary_rule(g, ni, gy, need, gx, CG_SIGMOID_GRAD, true);
}
static cattr_status r_tanh(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    return unary_rule(g, ni, gy, need, gx, CG_TANH_GRAD, true);
}
static cattr_status r_softmax(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    return unary_rule(g, ni, gy, need, gx, CG_SOFTMAX_GRAD, true);
}
static cattr_status r_clip(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    return unary_rule(g, ni, gy, need, gx, CG_CLIP_GRAD, false);
}
static cattr_status r_maxpool(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    return unary_rule(g, ni, gy, need, gx, CG_MAXPOOL_GRAD, false);
}
static cattr_status r_avgpool(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    return unary_rule(g, ni, gy, need, gx, CG_AVGPOOL_GRAD, false);
}
static cattr_status r_gap(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    return unary_rule(g, ni, gy, need, gx, CG_GAP_GRAD, false);
}

static cattr_status r_neg(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (need[0]) gx[0] = EMIT(CG_NEG, NULL, gy);
    return CATTR_OK;
}

static cattr_status r_abs(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (need[0]) gx[0] = EMIT(CG_ABS_GRAD, NULL, nd.in[0], gy);
    return CATTR_OK;
}

static cattr_status r_reshape(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (need[0]) gx[0] = EMIT(CG_RESHAPE_LIKE, NULL, gy, nd.in[0]);
    return CATTR_OK;
}

static cattr_status r_binary(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    int A = nd.in[0], B = nd.in[1];
    switch (nd.op) {
    case CG_ADD:
    case CG_SUB:
        if (need[0]) gx[0] = EMIT(CG_REDUCE_SUM_LIKE, NULL, gy, A);
        if (need[1]) {
            int r = EMIT(CG_REDUCE_SUM_LIKE, NULL, gy, B);
            gx[1] = nd.op == CG_SUB ? EMIT(CG_NEG, NULL, r) : r;
        }
        break;
    case CG_MUL:
        if (need[0]) gx[0] = EMIT(CG_REDUCE_SUM_LIKE, NULL, EMIT(CG_MUL, NULL, gy, B), A);
        if (need[1]) gx[1] = EMIT(CG_REDUCE_SUM_LIKE, NULL, EMIT(CG_MUL, NULL, gy, A), B);
        break;
    case CG_DIV:
        if (need[0]) gx[0] = EMIT(CG_REDUCE_SUM_LIKE, NULL, EMIT(CG_DIV, NULL, gy, B), A);
        if (need[1]) {
            int t = EMIT(CG_DIV, NULL, EMIT(CG_MUL, NULL, gy, nd.out), B);
            gx[1] = EMIT(CG_REDUCE_SUM_LIKE, NULL, EMIT(CG_NEG, NULL, t), B);
        }
        break;
    default: return cx_fail(CATTR_ERR_INTERNAL, "binary rule on op %s", cg_op_names[nd.op]);
    }
    return CATTR_OK;
}

static int scalar_const(cg_graph *g, double v) {
    cattr_tensor *t = cx_tensor_alloc(CATTR_FLOAT64, 0, NULL);
    if (!t) return -1;
    ((double *)t->data)[0] = v;
    int id = cg_add_const(g, NULL, t, true);
    if (id < 0) cattr_tensor_free(t);
    return id;
}

static cattr_status r_gemm(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    int A = nd.in[0], B = nd.in[1];
    int ta = nd.a.trans_a, tb = nd.a.trans_b;
    cg_attrs a = cg_attrs_default();
    a.alpha = nd.a.alpha;
    if (need[0]) {
        if (!ta) {
            a.trans_a = 0;
            a.trans_b = !tb;
            a.bf16 = nd.a.bf16; /* the input gradient at the forward's precision */
            gx[0] = EMIT(CG_GEMM, &a, gy, B);
            a.bf16 = 0;
        } else {
            a.trans_a = tb;
            a.trans_b = 1;
            gx[0] = EMIT(CG_GEMM, &a, B, gy);
        }
    }
    if (need[1]) {
        if (!tb) { a.trans_a = !ta; a.trans_b = 0; gx[1] = EMIT(CG_GEMM, &a, A, gy); }
        else { a.trans_a = 1; a.trans_b = ta; gx[1] = EMIT(CG_GEMM, &a, gy, A); }
    }
    if (nd.n_in > 2 && nd.in[2] >= 0 && need[2]) {
        int r = EMIT(CG_REDUCE_SUM_LIKE, NULL, gy, nd.in[2]);
        if (nd.a.beta != 1.0) {
            int s = scalar_const(g, nd.a.beta);
            if (s < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            r = EMIT(CG_MUL, NULL, r, s);
        }
        gx[2] = r;
    }
    return CATTR_OK;
}

static cattr_status r_matmul(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (nd.a.trans_a || nd.a.trans_b) { /* Y = op(A) op(B), each operand at least 2-D */
        int ta = nd.a.trans_a, tb = nd.a.trans_b, A = nd.in[0], B = nd.in[1];
        cg_attrs a = cg_attrs_default();
        if (need[0]) { /* dA = gy op(B)^T, or for A^T: op(B) gy^T */
            a.bf16 = nd.a.bf16; /* the input gradient at the forward's precision */
            if (!ta) a.trans_b = !tb;
            else a.trans_a = tb, a.trans_b = 1;
            gx[0] = EMIT(CG_REDUCE_SUM_LIKE, NULL, ta ? EMIT(CG_MATMUL, &a, B, gy) : EMIT(CG_MATMUL, &a, gy, B), A);
        }
        if (need[1]) { /* dB = op(A)^T gy, or for B^T: gy^T op(A) */
            a = cg_attrs_default();
            if (!tb) a.trans_a = !ta;
            else a.trans_a = 1, a.trans_b = ta;
            gx[1] = EMIT(CG_REDUCE_SUM_LIKE, NULL, tb ? EMIT(CG_MATMUL, &a, gy, A) : EMIT(CG_MATMUL, &a, A, gy), B);
        }
        return CATTR_OK;
    }
    /* numpy promotion of a 1-D operand drops a dim from Y; ranks are only known here for constants, which then use
     * the outer-product form */
    const cg_value *va = &g->vals[nd.in[0]], *vb = &g->vals[nd.in[1]];
    bool a1 = va->kind == CG_VAL_CONST && va->data->ndim == 1, b1 = vb->kind == CG_VAL_CONST && vb->data->ndim == 1;
    cg_attrs a = cg_attrs_default(), ua = cg_attrs_default();
    ua.n_ints = 1;
    if (need[0]) {
        if (b1) {
            ua.ints[0] = -1;
            gx[0] = EMIT(CG_REDUCE_SUM_LIKE, NULL, EMIT(CG_MUL, NULL, EMIT(CG_UNSQUEEZE, &ua, gy), nd.in[1]), nd.in[0]);
        } else {
            a.trans_b = 1;
            a.bf16 = nd.a.bf16;
            gx[0] = EMIT(CG_REDUCE_SUM_LIKE, NULL, EMIT(CG_MATMUL, &a, gy, nd.in[1]), nd.in[0]);
            a.trans_b = 0;
            a.bf16 = 0;
        }
    }
    if (need[1]) {
        if (a1) {
            ua.ints[0] = -1;
            int ac = EMIT(CG_UNSQUEEZE, &ua, nd.in[0]);
            ua.ints[0] = -2;
            gx[1] = EMIT(CG_REDUCE_SUM_LIKE, NULL, EMIT(CG_MUL, NULL, ac, EMIT(CG_UNSQUEEZE, &ua, gy)), nd.in[1]);
        } else {
            a.trans_a = 1;
            gx[1] = EMIT(CG_REDUCE_SUM_LIKE, NULL, EMIT(CG_MATMUL, &a, nd.in[0], gy), nd.in[1]);
        }
    }
    return CATTR_OK;
}

static cattr_status r_conv(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (need[1] || (nd.n_in > 2 && need[2]))
        return cx_fail(CATTR_ERR_UNSUPPORTED,
                       "node '%s' (op Conv): the weight or bias depends on an attributed value; cattr computes no "
                       "weight gradients",
                       nd.name);
    if (need[0]) gx[0] = EMIT(CG_CONV_GRAD_INPUT, &nd.a, nd.in[0], nd.in[1], gy);
    return CATTR_OK;
}

static cattr_status r_batchnorm(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    for (int i = 1; i < 5; i++)
        if (need[i])
            return cx_fail(CATTR_ERR_UNSUPPORTED, "node '%s' (op BatchNormalization): parameter %d depends on an "
                                                  "attributed value", nd.name, i);
    if (need[0]) gx[0] = EMIT(CG_BATCHNORM_GRAD, &nd.a, gy, nd.in[1], nd.in[4]);
    return CATTR_OK;
}

static cattr_status r_concat(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (nd.n_in + 1 > CG_MAX_IN)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "node '%s' (op Concat): gradient of more than %d inputs", nd.name,
                       CG_MAX_IN - 1);
    for (int i = 0; i < nd.n_in; i++) {
        if (!need[i]) continue;
        int in[CG_MAX_IN];
        in[0] = gy;
        for (int j = 0; j < nd.n_in; j++) in[1 + j] = nd.in[j];
        cg_attrs a = nd.a;
        a.index = i;
        gx[i] = cg_emit(g, CG_CONCAT_GRAD, nd.name, in, nd.n_in + 1, &a);
        if (gx[i] < 0) g_emit_failed = true;
    }
    return CATTR_OK;
}

static cattr_status r_transpose(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (!need[0]) return CATTR_OK;
    cg_attrs a = nd.a;
    for (int i = 0; i < nd.a.n_ints; i++) a.ints[nd.a.ints[i]] = i;
    gx[0] = EMIT(CG_TRANSPOSE, &a, gy);
    return CATTR_OK;
}

static cattr_status r_gather(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (need[0]) gx[0] = EMIT(CG_GATHER_GRAD, &nd.a, gy, nd.in[1], nd.in[0]);
    return CATTR_OK;
}

static cattr_status r_slice(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (!need[0]) return CATTR_OK;
    if (nd.n_in > 1) { /* starts/ends/axes/steps computed from shapes: the gradient reads them too (folded alike) */
        int in[CG_MAX_IN] = {gy, nd.in[0]};
        for (int j = 1; j < nd.n_in; j++) in[1 + j] = nd.in[j];
        gx[0] = cg_emit(g, CG_SLICE_GRAD, nd.name, in, nd.n_in + 1, &nd.a);
        return CATTR_OK;
    }
    gx[0] = EMIT(CG_SLICE_GRAD, &nd.a, gy, nd.in[0]);
    return CATTR_OK;
}

/* WhereId passes gY to whichever of A and B each element came from (summed down to their shapes). */
static cattr_status r_where_id(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    int z = EMIT(CG_ZEROS_LIKE, NULL, gy);
    if (nd.n_in <= 4) {
        if (need[0]) gx[0] = EMIT(CG_REDUCE_SUM_LIKE, NULL, EMIT(CG_WHERE_ID, &nd.a, gy, z, nd.in[2], nd.in[3]), nd.in[0]);
        if (need[1]) gx[1] = EMIT(CG_REDUCE_SUM_LIKE, NULL, EMIT(CG_WHERE_ID, &nd.a, z, gy, nd.in[2], nd.in[3]), nd.in[1]);
        return CATTR_OK;
    }
    /* row maps: the gradient of each row goes back to the row it was read from (scatter-added) */
    int mrow = nd.n_in > 6 ? nd.in[6] : -1;
    for (int k = 0; k < 2; k++) {
        if (!need[k]) continue;
        int sel = k == 0 ? emitv(g, CG_WHERE_ID, nd.name, &nd.a, 7, gy, z, nd.in[2], nd.in[3], -1, -1, mrow)
                         : emitv(g, CG_WHERE_ID, nd.name, &nd.a, 7, z, gy, nd.in[2], nd.in[3], -1, -1, mrow);
        int map = nd.n_in > 4 + k ? nd.in[4 + k] : -1;
        gx[k] = map < 0 ? sel : EMIT(CG_GATHER_GRAD, NULL, sel, map, nd.in[k]);
    }
    return CATTR_OK;
}

/* PlaceRows keeps acc's gradient where nothing was placed; the placed values' gradient is not formed (nothing
 * differentiates through a perturbation method's suffix). */
static cattr_status r_place_rows(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (need[1])
        return cx_fail(CATTR_ERR_UNSUPPORTED, "node '%s': no gradient for the values PlaceRows places", nd.name);
    if (need[0])
        gx[0] = EMIT(CG_PLACE_ROWS, NULL, gy, EMIT(CG_ZEROS_LIKE, NULL, nd.in[1]), nd.in[2], nd.in[3]);
    return CATTR_OK;
}

/* (X, like) -> X summed down to like's shape: the gradient broadcasts gY back to X's shape (like is read for its shape
 * only and receives none) */
/* the elementwise functions: gY * f'(X) in one node */
static cattr_status r_ew_unary(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    cg_attrs a = nd.a;
    a.index = nd.op;
    a.axis = nd.a.index; /* Gelu's approximation */
    if (need[0]) gx[0] = EMIT(CG_UNARY_GRAD, &a, nd.in[0], gy);
    return CATTR_OK;
}

/* Pow, Max, Min: each operand's gradient at the broadcast shape, summed down to its shape */
static cattr_status r_ew_binary(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    for (int k = 0; k < 2; k++) {
        if (!need[k]) continue;
        cg_attrs a = cg_attrs_default();
        a.axis = nd.op;
        a.index = k;
        gx[k] = EMIT(CG_REDUCE_SUM_LIKE, NULL, EMIT(CG_BINARY_GRAD, &a, nd.in[0], nd.in[1], gy), nd.in[k]);
    }
    return CATTR_OK;
}

/* Cast between float dtypes passes the gradient (the planner runs a call in one float dtype); a cast to int64 has
 * none */
static cattr_status r_cast(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (need[0] && !nd.a.index) gx[0] = EMIT(CG_IDENTITY, NULL, gy);
    return CATTR_OK;
}

/* Expand: the gradient summed back over the broadcast dims */
static cattr_status r_expand(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (need[0]) gx[0] = EMIT(CG_REDUCE_SUM_LIKE, NULL, gy, nd.in[0]);
    return CATTR_OK;
}

/* ReduceMax / ReduceMin: the gradient shared among the elements that reach the result */
static cattr_status r_reduce_ext(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (need[0]) gx[0] = EMIT(CG_REDUCE_EXT_GRAD, &nd.a, gy, nd.in[0], nd.out);
    return CATTR_OK;
}

/* Mod: d(a mod b)/da = 1 where defined; none for the divisor (a model's divisors are constants) */
static cattr_status r_mod(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (need[1]) return cx_fail(CATTR_ERR_UNSUPPORTED, "node '%s': no gradient for Mod's divisor", nd.name);
    if (need[0]) gx[0] = EMIT(CG_REDUCE_SUM_LIKE, NULL, gy, nd.in[0]);
    return CATTR_OK;
}

/* ScatterND: the data's gradient is gY with the overwritten positions zeroed */
static cattr_status r_scatter_nd(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (need[2]) return cx_fail(CATTR_ERR_UNSUPPORTED, "node '%s': no gradient for ScatterND's updates", nd.name);
    if (need[0]) gx[0] = EMIT(CG_SCATTER_ND, NULL, gy, nd.in[1], EMIT(CG_ZEROS_LIKE, NULL, nd.in[2]));
    return CATTR_OK;
}

/* ConvGradInput as a layer (ONNX ConvTranspose): its input's gradient is the Conv of the gradient with the weight */
static cattr_status r_conv_grad_input(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (need[1]) return cx_fail(CATTR_ERR_UNSUPPORTED, "node '%s': no gradient for a transposed convolution's weight", nd.name);
    if (need[2]) gx[2] = EMIT(CG_CONV, &nd.a, gy, nd.in[1]);
    return CATTR_OK;
}

/* Resize: each input element gets the weighted gradients of the outputs that read it */
static cattr_status r_resize(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    cg_attrs a = nd.a;
    if (nd.n_in > 1) { /* sizes computed from shapes: the gradient's scales are the ratio of its two shapes */
        a.n_ints = 1;
        a.ints[0] = 0;
    }
    if (need[0]) gx[0] = EMIT(CG_RESIZE_GRAD, &a, gy, nd.in[0]);
    return CATTR_OK;
}

/* Tile: the gradient of each element summed over its copies */
static cattr_status r_tile(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (need[0]) gx[0] = EMIT(CG_TILE_GRAD, NULL, gy, nd.in[0]);
    return CATTR_OK;
}

/* Where: each value operand gets the gradient where it was taken */
static cattr_status r_where(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    int z = need[1] || need[2] ? EMIT(CG_ZEROS_LIKE, NULL, gy) : -1;
    if (need[1]) gx[1] = EMIT(CG_REDUCE_SUM_LIKE, NULL, EMIT(CG_WHERE, NULL, nd.in[0], gy, z), nd.in[1]);
    if (need[2]) gx[2] = EMIT(CG_REDUCE_SUM_LIKE, NULL, EMIT(CG_WHERE, NULL, nd.in[0], z, gy), nd.in[2]);
    return CATTR_OK;
}

/* If: the gradient goes to the branch taken (an If on the same condition, zeros for the other branch; the planner
 * drops the branch not taken and what its gradient feeds) */
static cattr_status r_if(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (need[1]) gx[1] = EMIT(CG_IF, NULL, nd.in[0], gy, -1);
    if (need[2]) gx[2] = EMIT(CG_IF, NULL, nd.in[0], -1, gy);
    return CATTR_OK;
}

/* Shape: its output does not depend on the values */
static cattr_status r_none(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)g, (void)ni, (void)gy, (void)need, (void)gx, (void)u;
    return CATTR_OK;
}

static cattr_status r_pad(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (need[0])  /* pads computed from shapes travel along, folded when the gradient is planned */
        gx[0] = nd.n_in > 1 ? EMIT(CG_PAD_GRAD, &nd.a, gy, nd.in[0], nd.in[1]) : EMIT(CG_PAD_GRAD, &nd.a, gy, nd.in[0]);
    return CATTR_OK;
}

static cattr_status r_reduce(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    cg_attrs a = nd.a;
    a.axis = nd.op == CG_REDUCE_MEAN;
    if (need[0]) gx[0] = EMIT(CG_REDUCE_GRAD, &a, gy, nd.in[0]);
    return CATTR_OK;
}

static cattr_status r_reduce_sum_like(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (need[0]) gx[0] = EMIT(CG_ADD, NULL, EMIT(CG_ZEROS_LIKE, NULL, nd.in[0]), gy);
    return CATTR_OK;
}

/* ---- second order: rules of the gradient ops themselves (the gradient of a gradient graph, as torch's double
 * backward), for the activations of networks whose parameters' Hessian-vector products are asked for ---- */

/* ReluGrad(Y, gY) and LeakyReluGrad(X, gY) are linear in gY with a mask that is constant almost everywhere */
static cattr_status r_mask_grad(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (need[1]) gx[1] = EMIT(nd.op, &nd.a, nd.in[0], gy);
    return CATTR_OK;
}

/* TanhGrad(Y, gY) = gY (1 - Y^2): d/dgY = TanhGrad(Y, g); d/dY = -2 Y gY g */
static cattr_status r_tanh_grad(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    int Y = nd.in[0], gY = nd.in[1];
    if (need[1]) gx[1] = EMIT(CG_TANH_GRAD, NULL, Y, gy);
    if (need[0]) {
        int m2 = scalar_const(g, -2.0);
        if (m2 < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        gx[0] = EMIT(CG_MUL, NULL, EMIT(CG_MUL, NULL, EMIT(CG_MUL, NULL, Y, gY), gy), m2);
    }
    return CATTR_OK;
}

/* SigmoidGrad(Y, gY) = gY Y (1 - Y): d/dgY = SigmoidGrad(Y, g); d/dY = gY g (1 - 2 Y) = t - 2 t Y, t = gY g */
static cattr_status r_sigmoid_grad(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    int Y = nd.in[0], gY = nd.in[1];
    if (need[1]) gx[1] = EMIT(CG_SIGMOID_GRAD, NULL, Y, gy);
    if (need[0]) {
        int two = scalar_const(g, 2.0);
        if (two < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        int t = EMIT(CG_MUL, NULL, gY, gy);
        gx[0] = EMIT(CG_SUB, NULL, t, EMIT(CG_MUL, NULL, EMIT(CG_MUL, NULL, t, Y), two));
    }
    return CATTR_OK;
}

/* ReshapeLike(X, like): X's gradient reshaped back; `like` gives a shape only */
static cattr_status r_reshape_like(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (need[0]) gx[0] = EMIT(CG_RESHAPE_LIKE, NULL, gy, nd.in[0]);
    return CATTR_OK;
}

/* ---- transformer ops ---- */

static cattr_status r_seq_pick(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (need[0]) gx[0] = EMIT(CG_SEQ_PICK_GRAD, &nd.a, gy, nd.in[1], nd.in[0]);
    return CATTR_OK;
}

static cattr_status r_rmsnorm(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (need[1]) return cx_fail(CATTR_ERR_UNSUPPORTED, "node '%s': the RMSNorm weight depends on an attributed value", nd.name);
    if (need[0]) gx[0] = EMIT(CG_RMSNORM_GRAD, &nd.a, nd.in[0], nd.in[1], gy);
    return CATTR_OK;
}

static cattr_status r_rope(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    cg_attrs a = nd.a;
    a.index = !nd.a.index; /* the transpose of a rotation is the inverse rotation */
    if (nd.n_in > 2) return cx_fail(CATTR_ERR_UNSUPPORTED, "node '%s': no gradient through a prefix-continuing RoPE", nd.name);
    if (need[0]) gx[0] = EMIT(CG_ROPE, &a, gy, nd.in[1]);
    return CATTR_OK;
}

static cattr_status r_swiglu(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    for (int i = 0; i < 2; i++) {
        if (!need[i]) continue;
        cg_attrs a = cg_attrs_default();
        a.index = i;
        gx[i] = EMIT(CG_SWIGLU_GRAD, &a, nd.in[0], nd.in[1], gy);
    }
    return CATTR_OK;
}

static cattr_status r_attention(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (nd.n_in > 3) return cx_fail(CATTR_ERR_UNSUPPORTED, "node '%s': no gradient through attention over a prefix cache", nd.name);
    int packed = EMIT(CG_ATTENTION_GRAD, &nd.a, nd.in[0], nd.in[1], nd.in[2], gy);
    int64_t cq = nd.a.ints[0] * nd.a.ints[2], ck = nd.a.ints[1] * nd.a.ints[2];
    int64_t lo[3] = {0, cq, cq + ck}, hi[3] = {cq, cq + ck, cq + 2 * ck};
    for (int i = 0; i < 3; i++) {
        if (!need[i]) continue;
        cg_attrs s = cg_attrs_default();
        s.n_ints = 4;
        s.ints[0] = lo[i];
        s.ints[1] = hi[i];
        s.ints[2] = -1;
        s.ints[3] = 1;
        gx[i] = EMIT(CG_SLICE, &s, packed);
    }
    return CATTR_OK;
}

/* RNN: the gradients of X and of the initial states through time (RNNGrad recomputes the gates from the states);
 * none for the weights, which are constants of the model. */
static cattr_status r_rnn(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    if (need[1] || need[2] || (nd.n_in > 3 && need[3]))
        return cx_fail(CATTR_ERR_UNSUPPORTED, "node '%s': no gradient for a recurrent layer's weights", nd.name);
    int x[6] = {-1, -1, -1, -1, -1, -1};
    for (int i = 0; i < nd.n_in && i < 6; i++) x[i] = nd.in[i];
    static const int which[3] = {0, 4, 5};
    for (int k = 0; k < 3; k++) {
        if (which[k] >= nd.n_in || !need[which[k]]) continue;
        cg_attrs a = nd.a;
        a.n_ints = 4;
        a.ints[3] = k;
        gx[which[k]] = EMIT(CG_RNN_GRAD, &a, gy, nd.out, x[0], x[1], x[2], x[3], x[4], x[5]);
    }
    return CATTR_OK;
}

static cattr_status r_logsoftmax(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    return unary_rule(g, ni, gy, need, gx, CG_LOGSOFTMAX_GRAD, true);
}

/* HostCall: a host function has no gradient. The rule refuses it where it is used, not here: it gives every input
 * one gradient node, a HostCall marked index 1, whose shape rule fails ("... has no gradient ...") when a method plans
 * it. The explainer derives its gradient graph for every method, and only the ones that need the gradient plan it:
 * the perturbation methods plan the forward nodes alone and run. */
static cattr_status r_host_call(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    cg_attrs a = nd.a;
    a.index = 1;
    int v = EMIT(CG_HOST_CALL, &a, gy);
    for (int j = 0; j < nd.n_in; j++)
        if (need[j]) gx[j] = v;
    return CATTR_OK;
}

/* MapRows: its gradient with respect to input j is a MapRows of the body's gradient graph (map->grad[j]: inputs the
 * node's and gy, in passes of the same rows). A gradient map has none: the methods need first derivatives only. */
static cattr_status r_map_rows(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *u) {
    (void)u;
    cg_node nd = g->nodes[ni];
    const cg_map *m = nd.a.map;
    for (int j = 0; j < nd.n_in; j++) {
        if (!need[j]) continue;
        if (!m->grad[j])
            return cx_fail(CATTR_ERR_UNSUPPORTED, "node '%s': the model, run in passes of its fixed batch, has no "
                           "gradient for input %d here (an integer input, or a second derivative)", nd.name, j);
        if (nd.n_in + 1 > CG_MAX_IN) return cx_fail(CATTR_ERR_UNSUPPORTED, "node '%s': too many inputs", nd.name);
        int in[CG_MAX_IN];
        memcpy(in, nd.in, (size_t)nd.n_in * sizeof *in);
        in[nd.n_in] = gy;
        cg_attrs a = cg_attrs_default();
        a.map = m->grad[j];
        gx[j] = cg_emit(g, CG_MAP_ROWS, nd.name, in, nd.n_in + 1, &a);
    }
    return CATTR_OK;
}

void cg_rules_default(cg_rules *r) {
    memset(r, 0, sizeof *r);
    r->by_op[CG_IDENTITY] = r_identity;
    r->by_op[CG_GEMM] = r_gemm;
    r->by_op[CG_MATMUL] = r_matmul;
    r->by_op[CG_CONV] = r_conv;
    r->by_op[CG_MAXPOOL] = r_maxpool;
    r->by_op[CG_AVGPOOL] = r_avgpool;
    r->by_op[CG_GLOBALAVGPOOL] = r_gap;
    r->by_op[CG_RELU] = r_relu;
    r->by_op[CG_LEAKYRELU] = r_leakyrelu;
    r->by_op[CG_SIGMOID] = r_sigmoid;
    r->by_op[CG_TANH] = r_tanh;
    r->by_op[CG_SOFTMAX] = r_softmax;
    r->by_op[CG_CLIP] = r_clip;
    r->by_op[CG_ADD] = r_binary;
    r->by_op[CG_SUB] = r_binary;
    r->by_op[CG_MUL] = r_binary;
    r->by_op[CG_DIV] = r_binary;
    r->by_op[CG_NEG] = r_neg;
    r->by_op[CG_ABS] = r_abs;
    r->by_op[CG_RESHAPE] = r_reshape;
    r->by_op[CG_FLATTEN] = r_reshape;
    r->by_op[CG_SQUEEZE] = r_reshape;
    r->by_op[CG_UNSQUEEZE] = r_reshape;
    r->by_op[CG_CONCAT] = r_concat;
    r->by_op[CG_TRANSPOSE] = r_transpose;
    r->by_op[CG_GATHER] = r_gather;
    r->by_op[CG_SLICE] = r_slice;
    r->by_op[CG_BATCHNORM] = r_batchnorm;
    r->by_op[CG_RMSNORM] = r_rmsnorm;
    r->by_op[CG_ROPE] = r_rope;
    r->by_op[CG_SWIGLU] = r_swiglu;
    r->by_op[CG_SEQ_PICK] = r_seq_pick;
    r->by_op[CG_REDUCE_SUM_LIKE] = r_reduce_sum_like;
    r->by_op[CG_RELU_GRAD] = r->by_op[CG_LEAKYRELU_GRAD] = r_mask_grad;
    r->by_op[CG_TANH_GRAD] = r_tanh_grad;
    r->by_op[CG_SIGMOID_GRAD] = r_sigmoid_grad;
    r->by_op[CG_RESHAPE_LIKE] = r_reshape_like;
    r->by_op[CG_ZEROS_LIKE] = r_none;
    r->by_op[CG_REDUCE_SUM] = r->by_op[CG_REDUCE_MEAN] = r->by_op[CG_TORCH_SUM] = r_reduce;
    static const cg_op ew1[] = {CG_SQRT, CG_EXP, CG_LOG, CG_ERF, CG_RECIPROCAL, CG_HARDSIGMOID, CG_HARDSWISH,
                                CG_SOFTPLUS, CG_ELU, CG_SELU, CG_GELU};
    for (size_t k = 0; k < sizeof ew1 / sizeof *ew1; k++) r->by_op[ew1[k]] = r_ew_unary;
    r->by_op[CG_POW] = r->by_op[CG_MAX] = r->by_op[CG_MIN] = r_ew_binary;
    r->by_op[CG_PAD] = r_pad;
    r->by_op[CG_CAST] = r_cast;
    r->by_op[CG_SHAPE] = r->by_op[CG_EQUAL] = r->by_op[CG_CONSTANT_OF_SHAPE] = r_none;
    r->by_op[CG_EXPAND] = r_expand;
    r->by_op[CG_TILE] = r_tile;
    r->by_op[CG_RESIZE] = r_resize;
    r->by_op[CG_CONV_GRAD_INPUT] = r_conv_grad_input;
    r->by_op[CG_MOD] = r_mod;
    r->by_op[CG_SCATTER_ND] = r_scatter_nd;
    r->by_op[CG_RANGE] = r->by_op[CG_NORMAL_NOISE] = r->by_op[CG_LIME_SIMILARITY] = r_none;
    r->by_op[CG_REDUCE_MAX] = r->by_op[CG_REDUCE_MIN] = r_reduce_ext;
    r->by_op[CG_WHERE] = r_where;
    r->by_op[CG_WHERE_ID] = r_where_id;
    r->by_op[CG_PLACE_ROWS] = r_place_rows;
    r->by_op[CG_ATTENTION] = r_attention;
    r->by_op[CG_LOGSOFTMAX] = r_logsoftmax;
    r->by_op[CG_RNN] = r_rnn;
    r->by_op[CG_IF] = r_if;
    r->by_op[CG_HOST_CALL] = r_host_call;
    r->by_op[CG_MAP_ROWS] = r_map_rows;
}

/* ---- the transform ----------------------------------------------------------------------------------------- */

/* Whether a method replaced some of the standard rules (DeepLift, LRP, guided backpropagation...). */
static bool custom_rules(const cg_rules *r) {
    if (r->by_node || r->wrt_grad) return true;
    cg_rules d;
    cg_rules_default(&d);
    for (int k = 0; k < CG_OP_COUNT; k++)
        if (r->by_op[k] != d.by_op[k]) return true;
    return false;
}

cattr_status cg_autodiff(cg_graph *g, int y, int seed, const int *wrt, int n_wrt, const cg_rules *rules,
                         int *grad_out) {
    int nv = g->n_vals, nn = g->n_nodes;
    bool *dep = calloc((size_t)nv, sizeof *dep);     /* value depends on a wrt value */
    int *gacc = malloc((size_t)nv * sizeof *gacc);
    cattr_status st = CATTR_OK;
    if (!dep || !gacc) {
        st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory in autodiff");
        goto done;
    }
    for (int i = 0; i < nv; i++) gacc[i] = -1;
    for (int k = 0; k < n_wrt; k++) dep[wrt[k]] = true;
    for (int i = 0; i < nn; i++) { /* a shape does not depend on the values it is the shape of, nor a range */
        const cg_node *n = &g->nodes[i];
        if (n->op == CG_SHAPE || n->op == CG_RANGE) continue;
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] >= 0 && dep[n->in[j]]) dep[n->out] = true;
    }
    gacc[y] = seed;
    for (int i = nn - 1; i >= 0; i--) {
        cg_node *n = &g->nodes[i];
        int gy = gacc[n->out];
        if (gy < 0 || !dep[n->out]) continue;
        bool need[CG_MAX_IN] = {0}, any = false;
        int gx[CG_MAX_IN];
        for (int j = 0; j < n->n_in; j++) {
            gx[j] = -1;
            need[j] = n->in[j] >= 0 && dep[n->in[j]] && g->vals[n->in[j]].kind != CG_VAL_CONST;
            any |= need[j];
        }
        if (!any) continue;
        cg_backward_fn fn = rules->by_node ? rules->by_node(g, i, rules->user) : NULL;
        if (!fn) fn = rules->by_op[n->op];
        if (n->op == CG_MAP_ROWS && custom_rules(rules)) {
            st = cx_fail(CATTR_ERR_UNSUPPORTED, "node '%s': the model was exported with a fixed batch and could not be "
                         "re-batched, so it runs in passes and its layers are out of reach: this method's own backward "
                         "rules (DeepLift, LRP, guided backpropagation, deconvolution) cannot apply (cattr info says "
                         "why; export with dynamic_axes for the batch)", n->name);
            goto done;
        }
        if (!fn) {
            st = cx_fail(CATTR_ERR_UNSUPPORTED, "node '%s' (op %s): no backward rule", n->name, cg_op_names[n->op]);
            goto done;
        }
        int n_in = n->n_in;
        int ins[CG_MAX_IN];
        memcpy(ins, n->in, sizeof ins);
        g_emit_failed = false;
        st = fn(g, i, gy, need, gx, rules->user);
        if (st == CATTR_OK && g_emit_failed) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory in autodiff");
        if (st != CATTR_OK) goto done;
        for (int j = 0; j < n_in; j++) {
            if (!need[j] || gx[j] < 0) continue;
            int v = ins[j];
            if (gacc[v] < 0) {
                gacc[v] = gx[j];
            } else {
                int pair[2] = {gacc[v], gx[j]};
                int s = cg_emit(g, CG_ADD, g->vals[v].name, pair, 2, NULL);
                if (s < 0) {
                    st = CATTR_ERR_NO_MEMORY;
                    goto done;
                }
                gacc[v] = s;
            }
        }
    }
    for (int k = 0; k < n_wrt && rules->wrt_grad; k++) { /* the rules' last word on a wrt value's total gradient */
        bool again = false; /* a value listed twice: once */
        for (int q = 0; q < k; q++) again |= wrt[q] == wrt[k];
        if (gacc[wrt[k]] < 0 || again) continue;
        g_emit_failed = false;
        st = rules->wrt_grad(g, wrt[k], &gacc[wrt[k]], rules->user);
        if (st == CATTR_OK && g_emit_failed) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory in autodiff");
        if (st != CATTR_OK) goto done;
    }
    bool has_if = false; /* a gradient may come only from a branch an If does not take: see below */
    for (int i = 0; i < nn && !has_if; i++) has_if = g->nodes[i].op == CG_IF;
    for (int k = 0; k < n_wrt; k++) {
        if (gacc[wrt[k]] >= 0 && has_if) {
            /* zeros of the input's shape plus its gradient, marked (index 1) for the planner: it keeps the gradient
             * alone, or the zeros when the gradient comes only from the branch not taken */
            int in0 = wrt[k];
            int z = cg_emit(g, CG_ZEROS_LIKE, g->vals[in0].name, &in0, 1, NULL);
            cg_attrs a = cg_attrs_default();
            a.index = 1;
            int pair[2] = {z, gacc[wrt[k]]};
            grad_out[k] = z < 0 ? -1 : cg_emit(g, CG_ADD, g->vals[in0].name, pair, 2, &a);
            if (grad_out[k] < 0) {
                st = CATTR_ERR_NO_MEMORY;
                goto done;
            }
        } else if (gacc[wrt[k]] >= 0) {
            grad_out[k] = gacc[wrt[k]];
        } else {
            int in0 = wrt[k];
            int z = cg_emit(g, CG_ZEROS_LIKE, g->vals[in0].name, &in0, 1, NULL);
            if (z < 0) {
                st = CATTR_ERR_NO_MEMORY;
                goto done;
            }
            grad_out[k] = z;
        }
    }
done:
    free(dep);
    free(gacc);
    return st;
}
