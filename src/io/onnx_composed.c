/* onnx_composed.c - ONNX ops imported as several IR ops (their gradients, kernels and finite-difference tests are
 * those of the ops they are written with; tests/python/test_ops_ort.py holds each against onnxruntime): the
 * composed activations and reductions, LayerNormalization, Concat of many inputs, RNN/GRU/LSTM, PRelu, Clip with
 * computed bounds, ConvTranspose, Einsum, Split. The loader, the name table and the per-node helpers are onnx.c's. */
#include "io/onnx_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- ops written as others: their gradients, kernels and finite-difference tests are those of the ops they are
 * written with (tests/python/test_ops_ort.py holds each against onnxruntime) ---- */

static int int_const(cg_graph *g, const char *name, const int64_t *v, int n);

typedef struct { nctx *c; char label[200]; bool failed; } composer;

static int cp_node(composer *k, cg_op op, const char *what, const int *in, int n_in, const cg_attrs *a, const char *out) {
    char nm[300];
    snprintf(nm, sizeof nm, "%s:%s", k->label, what);
    int v = k->failed ? -1 : cg_add_node(k->c->L->g, op, out ? k->label : nm, in, n_in, a, out ? out : nm);
    if (v < 0) k->failed = true;
    return v;
}

static int cp_scalar(composer *k, const char *what, cattr_dtype dt, double v) {
    char nm[300];
    snprintf(nm, sizeof nm, "%s:%s", k->label, what);
    int id = k->failed ? -1 : cx_ox_scalar_const(k->c->L->g, nm, dt, v);
    if (id < 0) k->failed = true;
    return id;
}

static int cp_ints(composer *k, const char *what, const int64_t *v, int n) {
    char nm[300];
    snprintf(nm, sizeof nm, "%s:%s", k->label, what);
    int id = k->failed ? -1 : int_const(k->c->L->g, nm, v, n);
    if (id < 0) k->failed = true;
    return id;
}

/* Dim d of x's shape as an int64 [1] value. */
static int cp_dim(composer *k, int x, int d, const char *what) {
    cg_attrs a = cg_attrs_default();
    a.ints[0] = d;
    a.ints[1] = d + 1;
    a.n_ints = 2;
    return cp_node(k, CG_SHAPE, what, &x, 1, &a, NULL);
}

/* The reduction attributes of a Reduce* node (axes from opset 18 an input) into a: axes, keepdims; *noop when the
 * node asks for no reduction (noop_with_empty_axes without axes). */
static cattr_status reduce_attrs(nctx *c, cg_attrs *a, bool *noop) {
    int na = -1;
    int64_t v;
    if (c->L->opset >= 18) {
        if (c->in[1] >= 0) CX_CHECK(cx_ox_fold_ints(c, 1, "axes", CG_MAX_INTS, a->ints, &na));
    } else {
        if (c->n->n_input > 1) return cx_ox_nfail(c, CATTR_ERR_FORMAT, "takes its axes as an attribute in opset %d", c->L->opset);
        CX_CHECK(cx_ox_attr_ints(c, "axes", CG_MAX_INTS, a->ints, &na));
    }
    a->n_ints = na < 0 ? 0 : na;
    CX_CHECK(cx_ox_attr_int(c, "keepdims", 1, &v));
    a->index = v != 0;
    CX_CHECK(cx_ox_attr_int(c, "noop_with_empty_axes", 0, &v));
    *noop = v != 0 && a->n_ints == 0;
    return CATTR_OK;
}

/* Softsign x / (1 + |x|); Celu alpha * Elu(x / alpha); Mish x * tanh(softplus(x)); ThresholdedRelu x where x > alpha,
 * else 0; ReduceSumSquare, ReduceL1 and ReduceLogSumExp (max + log(sum(exp(x - max))), the max kept); DepthToSpace (DCR
 * and CRD) and SpaceToDepth as Reshape, Transpose, Reshape over shapes computed from the input's. */
cattr_status cx_ox_composed(nctx *c, int idx) {
    const Onnx__NodeProto *n = c->L->gp->node[idx];
    const char *t = n->op_type, *out = n->output[0];
    composer k = {.c = c};
    snprintf(k.label, sizeof k.label, "%s", c->label);
    int x = c->in[0], y = -1;
    cattr_dtype F = CATTR_FLOAT32;
    if (!strcmp(t, "Softsign")) {
        int ab = cp_node(&k, CG_ABS, "abs", &x, 1, NULL, NULL);
        int one = cp_scalar(&k, "one", F, 1);
        int den = cp_node(&k, CG_ADD, "denominator", (int[]){ab, one}, 2, NULL, NULL);
        y = cp_node(&k, CG_DIV, "", (int[]){x, den}, 2, NULL, out);
    } else if (!strcmp(t, "Celu") || !strcmp(t, "ThresholdedRelu")) {
        double alpha;
        CX_CHECK(cx_ox_attr_float(c, "alpha", 1.0, &alpha));
        if (!strcmp(t, "Celu")) {
            if (!(alpha != 0)) return cx_ox_nfail(c, CATTR_ERR_FORMAT, "alpha must not be 0");
            int inv = cp_scalar(&k, "inverse_alpha", F, 1 / alpha), al = cp_scalar(&k, "alpha", F, alpha);
            int sc = cp_node(&k, CG_MUL, "scaled", (int[]){x, inv}, 2, NULL, NULL);
            int el = cp_node(&k, CG_ELU, "elu", &sc, 1, NULL, NULL);
            y = cp_node(&k, CG_MUL, "", (int[]){el, al}, 2, NULL, out);
        } else {
            int th = cp_scalar(&k, "alpha", F, alpha), zero = cp_scalar(&k, "zero", F, 0);
            cg_attrs ga = cg_attrs_default();
            ga.index = CX_CMP_GT;
            int gt = cp_node(&k, CG_EQUAL, "above", (int[]){x, th}, 2, &ga, NULL);
            y = cp_node(&k, CG_WHERE, "", (int[]){gt, x, zero}, 3, NULL, out);
        }
    } else if (!strcmp(t, "Mish")) {
        int sp = cp_node(&k, CG_SOFTPLUS, "softplus", &x, 1, NULL, NULL);
        int th = cp_node(&k, CG_TANH, "tanh", &sp, 1, NULL, NULL);
        y = cp_node(&k, CG_MUL, "", (int[]){x, th}, 2, NULL, out);
    } else if (!strncmp(t, "Reduce", 6)) {
        cg_attrs a = cg_attrs_default();
        bool noop = false;
        CX_CHECK(reduce_attrs(c, &a, &noop));
        if (!strcmp(t, "ReduceSumSquare") || !strcmp(t, "ReduceL1")) {
            int v = !strcmp(t, "ReduceL1") ? cp_node(&k, CG_ABS, "abs", &x, 1, NULL, NULL)
                                           : cp_node(&k, CG_MUL, "squared", (int[]){x, x}, 2, NULL, NULL);
            y = noop ? cp_node(&k, CG_IDENTITY, "", &v, 1, NULL, out) : cp_node(&k, CG_REDUCE_SUM, "", &v, 1, &a, out);
        } else if (noop) {
            y = cp_node(&k, CG_IDENTITY, "", &x, 1, NULL, out);
        } else { /* ReduceLogSumExp */
            cg_attrs keep = a;
            keep.index = 1;
            int mk = cp_node(&k, CG_REDUCE_MAX, "max", &x, 1, &keep, NULL);
            int d = cp_node(&k, CG_SUB, "centered", (int[]){x, mk}, 2, NULL, NULL);
            int e = cp_node(&k, CG_EXP, "exp", &d, 1, NULL, NULL);
            int sm = cp_node(&k, CG_REDUCE_SUM, "sum", &e, 1, &a, NULL);
            int lg = cp_node(&k, CG_LOG, "log", &sm, 1, NULL, NULL);
            int m = a.index ? mk : cp_node(&k, CG_REDUCE_MAX, "max_dropped", &x, 1, &a, NULL);
            y = cp_node(&k, CG_ADD, "", (int[]){lg, m}, 2, NULL, out);
        }
    } else { /* DepthToSpace, SpaceToDepth: [N, C, H, W] */
        int64_t b;
        CX_CHECK(cx_ox_attr_int(c, "blocksize", 0, &b));
        if (b < 1 || b > (1 << 20)) return cx_ox_nfail(c, CATTR_ERR_FORMAT, "blocksize %lld is invalid", (long long)b);
        bool crd = false;
        const Onnx__AttributeProto *mp;
        CX_CHECK(cx_ox_attr_typed(c, "mode", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, "a string", &mp));
        if (mp) {
            bool dcr = mp->s.len == 3 && !memcmp(mp->s.data, "DCR", 3);
            crd = mp->s.len == 3 && !memcmp(mp->s.data, "CRD", 3);
            if (!dcr && !crd)
                return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "mode '%.*s' (expected DCR or CRD)", (int)mp->s.len,
                             mp->s.data ? (const char *)mp->s.data : "");
        }
        int N = cp_dim(&k, x, 0, "n"), C = cp_dim(&k, x, 1, "c"), H = cp_dim(&k, x, 2, "h"), W = cp_dim(&k, x, 3, "w");
        int bv = cp_ints(&k, "block", &b, 1);
        int64_t bb = b * b;
        int b2 = cp_ints(&k, "block2", &bb, 1);
        cg_attrs cat = cg_attrs_default(), tr = cg_attrs_default();
        int s1, s2;
        if (!strcmp(t, "DepthToSpace")) {
            int cd = cp_node(&k, CG_DIV, "c_out", (int[]){C, b2}, 2, NULL, NULL);
            int hb = cp_node(&k, CG_MUL, "h_out", (int[]){H, bv}, 2, NULL, NULL);
            int wb = cp_node(&k, CG_MUL, "w_out", (int[]){W, bv}, 2, NULL, NULL);
            s1 = crd ? cp_node(&k, CG_CONCAT, "split_shape", (int[]){N, cd, bv, bv, H, W}, 6, &cat, NULL)
                     : cp_node(&k, CG_CONCAT, "split_shape", (int[]){N, bv, bv, cd, H, W}, 6, &cat, NULL);
            s2 = cp_node(&k, CG_CONCAT, "out_shape", (int[]){N, cd, hb, wb}, 4, &cat, NULL);
            static const int64_t dcr_perm[6] = {0, 3, 4, 1, 5, 2}, crd_perm[6] = {0, 1, 4, 2, 5, 3};
            memcpy(tr.ints, crd ? crd_perm : dcr_perm, sizeof dcr_perm);
        } else {
            if (mp) return cx_ox_nfail(c, CATTR_ERR_FORMAT, "SpaceToDepth has no mode");
            int hd = cp_node(&k, CG_DIV, "h_out", (int[]){H, bv}, 2, NULL, NULL);
            int wd = cp_node(&k, CG_DIV, "w_out", (int[]){W, bv}, 2, NULL, NULL);
            int cm = cp_node(&k, CG_MUL, "c_out", (int[]){C, b2}, 2, NULL, NULL);
            s1 = cp_node(&k, CG_CONCAT, "split_shape", (int[]){N, C, hd, bv, wd, bv}, 6, &cat, NULL);
            s2 = cp_node(&k, CG_CONCAT, "out_shape", (int[]){N, cm, hd, wd}, 4, &cat, NULL);
            static const int64_t perm[6] = {0, 3, 5, 1, 2, 4};
            memcpy(tr.ints, perm, sizeof perm);
        }
        tr.n_ints = 6;
        int r1 = cp_node(&k, CG_RESHAPE, "split", (int[]){x, s1}, 2, NULL, NULL);
        int tp = cp_node(&k, CG_TRANSPOSE, "transpose", &r1, 1, &tr, NULL);
        y = cp_node(&k, CG_RESHAPE, "", (int[]){tp, s2}, 2, NULL, out);
    }
    if (k.failed || y < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add node '%s'", c->label);
    return cx_ox_define(c->L, out, y, idx, 0);
}

/* LayerNormalization (opset 17) as the ops of its definition: mean = ReduceMean(X over dims axis..), D = X - mean,
 * var = ReduceMean(D * D), Y = D / Sqrt(var + epsilon) * Scale + B: the form older exporters write out, so both
 * forms attribute alike. Only the first output (the mean and inverse deviation outputs are training outputs). */
cattr_status cx_ox_layer_norm(nctx *c, int idx) {
    loader *L = c->L;
    const Onnx__NodeProto *n = L->gp->node[idx];
    int64_t axis = -1, stash = 1;
    double eps = 1e-5;
    CX_CHECK(cx_ox_attr_int(c, "axis", -1, &axis));
    CX_CHECK(cx_ox_attr_float(c, "epsilon", 1e-5, &eps));
    CX_CHECK(cx_ox_attr_int(c, "stash_type", 1, &stash));
    for (size_t k = 1; k < n->n_output; k++)
        if (n->output[k] && *n->output[k])
            return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "output %zu (mean / inverse std, training outputs) is not supported", k);
    if (axis >= 0) /* the dims from axis to the last: counted from the end, the graph stays rank-polymorphic */
        return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "axis %lld: only axes counted from the end (negative, as PyTorch's "
                                               "exporter writes them) are supported", (long long)axis);
    cg_attrs ra = cg_attrs_default();
    ra.index = 1; /* keepdims */
    for (int64_t d = axis; d < 0 && ra.n_ints < CG_MAX_INTS; d++) ra.ints[ra.n_ints++] = d;
    if (ra.n_ints < 1 || ra.n_ints > CG_MAX_INTS) return cx_ox_nfail(c, CATTR_ERR_FORMAT, "axis %lld is out of range", (long long)axis);
    char nm[200];
    snprintf(nm, sizeof nm, "%s.epsilon", c->label);
    int ev = cx_ox_scalar_const(L->g, nm, CATTR_FLOAT32, (float)eps);
    if (ev < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cg_graph *g = L->g;
    int x = c->in[0], v;
#define LN_NODE(op, a, i0, i1, suffix)                                                                                 \
    (snprintf(nm, sizeof nm, "%s:%s", c->label, suffix), v = cg_add_node(g, op, nm, (int[]){i0, i1}, (i1) < -1 ? 1 : 2, a, nm), v)
    int mean = LN_NODE(CG_REDUCE_MEAN, &ra, x, -2, "mean");
    int d = mean < 0 ? -1 : LN_NODE(CG_SUB, NULL, x, mean, "centered");
    int sq = d < 0 ? -1 : LN_NODE(CG_MUL, NULL, d, d, "squared");
    int var = sq < 0 ? -1 : LN_NODE(CG_REDUCE_MEAN, &ra, sq, -2, "variance");
    int ve = var < 0 ? -1 : LN_NODE(CG_ADD, NULL, var, ev, "variance_eps");
    int sd = ve < 0 ? -1 : LN_NODE(CG_SQRT, NULL, ve, -2, "std");
    int y = sd < 0 ? -1 : LN_NODE(CG_DIV, NULL, d, sd, "normalized");
    if (y >= 0 && c->in[1] >= 0) y = LN_NODE(CG_MUL, NULL, y, c->in[1], "scaled");
    if (y >= 0 && c->in[2] >= 0) y = LN_NODE(CG_ADD, NULL, y, c->in[2], "shifted");
#undef LN_NODE
    if (y < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add node '%s'", c->label);
    /* the result under the node's output name (an Identity carries it) */
    int out = cg_add_node(g, CG_IDENTITY, c->label, &y, 1, NULL, n->output[0]);
    if (out < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add node '%s'", c->label);
    return cx_ox_define(L, n->output[0], out, idx, 0);
}

/* A Concat of more inputs than a node holds (DenseNet's blocks): a chain of Concats along the same axis, each taking
 * the previous result and the next inputs; the same values in the same order. */
cattr_status cx_ox_wide_concat(nctx *c, int idx) {
    loader *L = c->L;
    const Onnx__NodeProto *n = L->gp->node[idx];
    if (!cx_ox_attr_find(c, "axis")) return cx_ox_nfail(c, CATTR_ERR_FORMAT, "attribute 'axis' is required");
    cg_attrs a = cg_attrs_default();
    CX_CHECK(cx_ox_attr_int(c, "axis", 0, &a.axis));
    int acc = -1, in[CG_MAX_IN], k = 0;
    size_t i = 0;
    char nm[200];
    while (i < n->n_input) {
        k = 0;
        if (acc >= 0) in[k++] = acc;
        for (; k < CG_MAX_IN - 1 && i < n->n_input; i++) { /* ConcatGrad reads the gradient and every input */
            if (!n->input[i] || !*n->input[i]) return cx_ox_nfail(c, CATTR_ERR_FORMAT, "required input %zu is empty", i);
            CX_CHECK(cx_ox_resolve_input(c, n->input[i], &in[k++]));
        }
        bool last = i >= n->n_input;
        snprintf(nm, sizeof nm, "%s:part%zu", c->label, i);
        acc = cg_add_node(L->g, CG_CONCAT, last ? c->label : nm, in, k, &a, last ? n->output[0] : nm);
        if (acc < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add node '%s'", c->label);
    }
    return cx_ox_define(L, n->output[0], acc, idx, 0);
}

/* LSTM and GRU (opsets 7 to 14+): one RNN node computing the states of every step, and the ONNX outputs as slices of
 * it: Y [T, D, B, H] the hidden states, Y_h [D, B, H] each direction's last (forward: step T-1, reverse: step 0),
 * Y_c the LSTM's last cell states. The default activations only, no clip, peepholes, sequence lengths or
 * input_forget, layout 0 (time first, as PyTorch's exporter writes). */
cattr_status cx_ox_recurrent(nctx *c, int idx, bool gru) {
    loader *L = c->L;
    const Onnx__NodeProto *n = L->gp->node[idx];
    int64_t hidden = 0, v;
    CX_CHECK(cx_ox_attr_int(c, "hidden_size", 0, &hidden));
    if (hidden < 1 || hidden > ((int64_t)1 << 24))
        return cx_ox_nfail(c, CATTR_ERR_FORMAT, "attribute hidden_size must be between 1 and 2^24 (got %lld)", (long long)hidden);
    const Onnx__AttributeProto *at;
    CX_CHECK(cx_ox_attr_typed(c, "direction", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, "a string", &at));
    int dir = 0;
    if (at) {
        const char *d = (const char *)at->s.data;
        size_t dl = at->s.len;
        if (dl == 7 && memcmp(d, "forward", 7) == 0) dir = 0;
        else if (dl == 7 && memcmp(d, "reverse", 7) == 0) dir = 1;
        else if (dl == 13 && memcmp(d, "bidirectional", 13) == 0) dir = 2;
        else return cx_ox_nfail(c, CATTR_ERR_FORMAT, "direction must be forward, reverse or bidirectional");
    }
    CX_CHECK(cx_ox_attr_typed(c, "activations", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS, "a list of strings", &at));
    if (at) { /* the defaults written out are accepted: Sigmoid, Tanh(, Tanh) per direction */
        size_t per = gru ? 2 : 3;
        bool ok = at->n_strings == per * (dir == 2 ? 2 : 1);
        for (size_t i = 0; ok && i < at->n_strings; i++) {
            const char *want = i % per == 0 ? "Sigmoid" : "Tanh";
            ok = at->strings[i].len == strlen(want) && memcmp(at->strings[i].data, want, strlen(want)) == 0;
        }
        if (!ok) return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "only the default activations (%s) are supported",
                              gru ? "Sigmoid, Tanh" : "Sigmoid, Tanh, Tanh");
    }
    if (cx_ox_attr_find(c, "activation_alpha") || cx_ox_attr_find(c, "activation_beta"))
        return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "activation_alpha / activation_beta are not supported");
    if (cx_ox_attr_find(c, "clip")) return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "attribute clip is not supported");
    CX_CHECK(cx_ox_attr_int(c, "layout", 0, &v));
    if (v != 0)
        return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "layout=%lld is not supported (only layout 0, time first, as PyTorch's "
                                               "exporter writes)", (long long)v);
    CX_CHECK(cx_ox_attr_int(c, "input_forget", 0, &v));
    if (v != 0) return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "input_forget=1 is not supported");
    int64_t lbr = 0;
    if (gru) CX_CHECK(cx_ox_attr_int(c, "linear_before_reset", 0, &lbr));
    if (c->in[4] >= 0)
        return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "input sequence_lens is not supported (every sequence runs to the end)");
    if (!gru && c->in[7] >= 0) return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "peepholes (input P) are not supported");
    cg_attrs a = cg_attrs_default();
    a.index = gru ? 1 : 0;
    a.n_ints = 3;
    a.ints[0] = hidden;
    a.ints[1] = dir;
    a.ints[2] = lbr != 0;
    int in[6] = {c->in[0], c->in[1], c->in[2], c->in[3], c->in[5], gru ? -1 : c->in[6]};
    char nm[200];
    snprintf(nm, sizeof nm, "%s:states", c->label);
    cg_graph *g = L->g;
    int st = cg_add_node(g, CG_RNN, c->label, in, gru ? 5 : 6, &a, nm);
    if (st < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add node '%s'", c->label);
    int64_t D = dir == 2 ? 2 : 1;
    for (size_t k = 0; k < n->n_output && k < 3; k++) {
        if (!n->output[k] || !*n->output[k]) continue;
        if (k == 2 && gru) return cx_ox_nfail(c, CATTR_ERR_FORMAT, "a GRU has two outputs");
        int64_t lo = k == 2 ? hidden : 0;
        cg_attrs sa = cg_attrs_default(); /* the hidden (or cell) part of the states: [T, D, B, H] */
        sa.n_ints = 4;
        sa.ints[0] = lo;
        sa.ints[1] = lo + hidden;
        sa.ints[2] = 3;
        sa.ints[3] = 1;
        snprintf(nm, sizeof nm, k == 0 ? "%s" : "%s:part%zu", c->label, k);
        int y = cg_add_node(g, CG_SLICE, nm, &st, 1, &sa, k == 0 ? n->output[0] : nm);
        if (y >= 0 && k > 0) { /* each direction's last step: [1, D, B, H] -> [D, B, H] */
            int part[2];
            for (int64_t d = 0; d < D && y >= 0; d++) {
                bool rev = dir == 1 || d == 1;
                cg_attrs pa = cg_attrs_default();
                pa.n_ints = 8;
                int64_t q[8] = {rev ? 0 : -1, d, rev ? 1 : INT64_MAX, d + 1, 0, 1, 1, 1};
                memcpy(pa.ints, q, sizeof q);
                snprintf(nm, sizeof nm, "%s:last%zu_%lld", c->label, k, (long long)d);
                part[d] = cg_add_node(g, CG_SLICE, nm, &y, 1, &pa, nm);
                if (part[d] < 0) y = -1;
            }
            if (y >= 0 && D == 2) {
                cg_attrs ca = cg_attrs_default();
                ca.axis = 1;
                snprintf(nm, sizeof nm, "%s:last%zu", c->label, k);
                y = cg_add_node(g, CG_CONCAT, nm, part, 2, &ca, nm);
            } else if (y >= 0) {
                y = part[0];
            }
            cg_attrs qa = cg_attrs_default();
            qa.n_ints = 1;
            qa.ints[0] = 0;
            snprintf(nm, sizeof nm, "%s:output%zu", c->label, k);
            if (y >= 0) y = cg_add_node(g, CG_SQUEEZE, nm, &y, 1, &qa, n->output[k]);
        }
        if (y < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add node '%s'", c->label);
        CX_CHECK(cx_ox_define(L, n->output[k], y, idx, (int)k));
    }
    return CATTR_OK;
}

/* PRelu(X, slope) = X * Where(X > 0, 1, slope): the values and the gradient of PyTorch's PReLU (slope broadcast
 * unidirectionally to X), a product DeepLift passes its gradient through as Captum's does for PReLU. */
cattr_status cx_ox_prelu(nctx *c, int idx) {
    loader *L = c->L;
    const Onnx__NodeProto *n = L->gp->node[idx];
    cg_graph *g = L->g;
    char nm[200];
    snprintf(nm, sizeof nm, "%s.zero", c->label);
    int zv = cx_ox_scalar_const(g, nm, CATTR_FLOAT32, 0);
    snprintf(nm, sizeof nm, "%s.one", c->label);
    int ov = zv < 0 ? -1 : cx_ox_scalar_const(g, nm, CATTR_FLOAT32, 1);
    if (zv < 0 || ov < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cg_attrs ga = cg_attrs_default();
    ga.index = CX_CMP_GT;
    snprintf(nm, sizeof nm, "%s:positive", c->label);
    int pos = cg_add_node(g, CG_EQUAL, nm, (int[]){c->in[0], zv}, 2, &ga, nm);
    snprintf(nm, sizeof nm, "%s:slope", c->label);
    int sl = pos < 0 ? -1 : cg_add_node(g, CG_WHERE, nm, (int[]){pos, ov, c->in[1]}, 3, NULL, nm);
    int y = sl < 0 ? -1 : cg_add_node(g, CG_MUL, c->label, (int[]){c->in[0], sl}, 2, NULL, n->output[0]);
    if (y < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add node '%s'", c->label);
    return cx_ox_define(L, n->output[0], y, idx, 0);
}

/* Clip (opset 11+) whose min or max is computed by other nodes (not a constant): Max(x, min), then Min(., max), with
 * numpy broadcasting, as onnxruntime computes it; a constant bound stays an attribute of a Clip. */
cattr_status cx_ox_clip_computed(nctx *c, int idx) {
    loader *L = c->L;
    const Onnx__NodeProto *n = L->gp->node[idx];
    cg_graph *g = L->g;
    cg_attrs a = cg_attrs_default();
    a.alpha = -INFINITY;
    a.beta = INFINITY;
    bool lo_const = c->in[1] < 0 || g->vals[c->in[1]].kind == CG_VAL_CONST;
    bool hi_const = c->in[2] < 0 || g->vals[c->in[2]].kind == CG_VAL_CONST;
    if (c->in[1] >= 0 && lo_const) CX_CHECK(cx_ox_fold_scalar(c, 1, "min", &a.alpha));
    if (c->in[2] >= 0 && hi_const) CX_CHECK(cx_ox_fold_scalar(c, 2, "max", &a.beta));
    char nm[200];
    int y = c->in[0];
    if (a.alpha != -INFINITY || a.beta != INFINITY) {
        snprintf(nm, sizeof nm, "%s:constant_bounds", c->label);
        y = cg_add_node(g, CG_CLIP, nm, &y, 1, &a, nm);
    }
    if (y >= 0 && !lo_const) {
        snprintf(nm, sizeof nm, "%s:min", c->label);
        bool last = hi_const;
        y = cg_add_node(g, CG_MAX, last ? c->label : nm, (int[]){y, c->in[1]}, 2, NULL, last ? n->output[0] : nm);
    }
    if (y >= 0 && !hi_const)
        y = cg_add_node(g, CG_MIN, c->label, (int[]){y, c->in[2]}, 2, NULL, n->output[0]);
    if (y < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add node '%s'", c->label);
    return cx_ox_define(L, n->output[0], y, idx, 0);
}

/* An int64 constant of the given values (1-D, or a scalar when n is 0 and v points to one value). */
static int int_const(cg_graph *g, const char *name, const int64_t *v, int n) {
    int64_t len = n;
    cattr_tensor *t = cx_tensor_alloc(CATTR_INT64, n ? 1 : 0, &len);
    if (!t) return -1;
    memcpy(t->data, v, (size_t)(n ? n : 1) * sizeof *v);
    int id = cg_add_const(g, name, t, true);
    if (id < 0) cattr_tensor_free(t);
    return id;
}

/* ConvTranspose (X, W[, B]): the input gradient of the Conv with weight W (its layout [C_in, C_out / group, k...]
 * is the Conv's [C_out, C_in / group, k...]) applied to X, for an output of N x (W's dim 1 * group) x out_d with
 * out_d = stride (in_d - 1) + output_padding + dilation (k - 1) + 1 - pads, computed from X's shape when the call is
 * planned; then the bias per channel. */
cattr_status cx_ox_conv_transpose(nctx *c, int idx) {
    loader *L = c->L;
    const Onnx__NodeProto *n = L->gp->node[idx];
    cg_graph *g = L->g;
    const cg_value *w = &g->vals[c->in[1]];
    if (w->kind != CG_VAL_CONST)
        return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "the weight '%s' must be a constant", n->input[1]);
    if (cx_ox_attr_find(c, "output_shape"))
        return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "attribute output_shape is not supported (give pads and output_padding)");
    int nsp = w->data->ndim - 2, nk = -1, np = -1;
    int64_t ks[CG_MAX_SP], opad[CG_MAX_SP] = {0};
    CX_CHECK(cx_ox_attr_ints(c, "kernel_shape", CG_MAX_SP, ks, &nk));
    if (nk < 0) {
        nk = nsp;
        for (int i = 0; i < nsp && i < CG_MAX_SP; i++) ks[i] = w->data->shape[2 + i];
    }
    if (nk != nsp) return cx_ox_nfail(c, CATTR_ERR_FORMAT, "kernel_shape has %d dims, the weight %d", nk, nsp);
    cg_attrs a = cg_attrs_default();
    CX_CHECK(cx_ox_spatial_attrs(c, &a, ks, nk, true));
    if (a.auto_pad)
        return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "auto_pad '%s' is not supported (export with explicit pads)",
                     a.auto_pad == 1 ? "SAME_UPPER" : "SAME_LOWER");
    CX_CHECK(cx_ox_attr_int(c, "group", 1, &a.group));
    if (a.group < 1) return cx_ox_nfail(c, CATTR_ERR_FORMAT, "group must be at least 1");
    CX_CHECK(cx_ox_attr_ints(c, "output_padding", CG_MAX_SP, opad, &np));
    const int64_t big = (int64_t)1 << 24; /* the output extent below stays far from overflowing */
    for (int i = 0; i < nsp; i++)
        if (ks[i] > big || a.stride[i] > big || a.dilation[i] > big || a.pad[i] > big || a.pad[nsp + i] > big ||
            opad[i] > big)
            return cx_ox_nfail(c, CATTR_ERR_FORMAT, "kernel, stride, dilation, pads or output_padding beyond 2^24");
    if (np >= 0 && np != nsp) return cx_ox_nfail(c, CATTR_ERR_FORMAT, "output_padding has %d values for %d dims", np, nsp);
    for (int i = 0; i < nsp; i++)
        if (opad[i] < 0 || (np > 0 && opad[i] >= (a.stride[i] > a.dilation[i] ? a.stride[i] : a.dilation[i])))
            return cx_ox_nfail(c, CATTR_ERR_FORMAT, "output_padding %lld is out of range", (long long)opad[i]);
    /* the output's shape: [N] ++ [C_out] ++ in_sp * stride + (dilation (k - 1) + 1 + output_padding - pads - stride) */
    int64_t mul[CG_MAX_SP], add[CG_MAX_SP], cout = w->data->shape[1] * a.group, lo = 2;
    for (int i = 0; i < nsp; i++) {
        mul[i] = a.stride[i];
        add[i] = a.dilation[i] * (ks[i] - 1) + 1 + opad[i] - a.pad[i] - a.pad[nsp + i] - a.stride[i];
    }
    char nm[200];
    cg_attrs sa = cg_attrs_default();
    int v[8];
    snprintf(nm, sizeof nm, "%s:in_shape", c->label);
    v[0] = cg_add_node(g, CG_SHAPE, nm, &c->in[0], 1, NULL, nm);
    sa.n_ints = 4;
    int64_t q0[4] = {0, 1, 0, 1}, q1[4] = {lo, INT64_MAX, 0, 1};
    memcpy(sa.ints, q0, sizeof q0);
    snprintf(nm, sizeof nm, "%s:batch", c->label);
    v[1] = v[0] < 0 ? -1 : cg_add_node(g, CG_SLICE, nm, &v[0], 1, &sa, nm);
    memcpy(sa.ints, q1, sizeof q1);
    snprintf(nm, sizeof nm, "%s:in_spatial", c->label);
    v[2] = v[0] < 0 ? -1 : cg_add_node(g, CG_SLICE, nm, &v[0], 1, &sa, nm);
    snprintf(nm, sizeof nm, "%s:stride", c->label);
    v[3] = int_const(g, nm, mul, nsp);
    snprintf(nm, sizeof nm, "%s:extent", c->label);
    v[4] = int_const(g, nm, add, nsp);
    snprintf(nm, sizeof nm, "%s:channels", c->label);
    v[5] = int_const(g, nm, &cout, 1);
    snprintf(nm, sizeof nm, "%s:scaled", c->label);
    int sc = v[2] < 0 || v[3] < 0 ? -1 : cg_add_node(g, CG_MUL, nm, (int[]){v[2], v[3]}, 2, NULL, nm);
    snprintf(nm, sizeof nm, "%s:out_spatial", c->label);
    int os = sc < 0 || v[4] < 0 ? -1 : cg_add_node(g, CG_ADD, nm, (int[]){sc, v[4]}, 2, NULL, nm);
    cg_attrs ca = cg_attrs_default();
    snprintf(nm, sizeof nm, "%s:out_shape", c->label);
    int shp = os < 0 || v[1] < 0 || v[5] < 0 ? -1 : cg_add_node(g, CG_CONCAT, nm, (int[]){v[1], v[5], os}, 3, &ca, nm);
    snprintf(nm, sizeof nm, "%s:out_like", c->label); /* zeros of the output's shape: ConvGradInput reads its shape */
    int like = shp < 0 ? -1 : cg_add_node(g, CG_CONSTANT_OF_SHAPE, nm, &shp, 1, NULL, nm);
    bool bias = c->in[2] >= 0;
    snprintf(nm, sizeof nm, "%s:transposed", c->label);
    int y = like < 0 ? -1 : cg_add_node(g, CG_CONV_GRAD_INPUT, bias ? nm : c->label, (int[]){like, c->in[1], c->in[0]},
                                        3, &a, bias ? nm : n->output[0]);
    if (y >= 0 && bias) { /* + B as [C_out, 1, ...] */
        cg_attrs ra = cg_attrs_default();
        ra.n_ints = 1 + nsp;
        ra.ints[0] = -1;
        for (int i = 0; i < nsp; i++) ra.ints[1 + i] = 1;
        snprintf(nm, sizeof nm, "%s:bias", c->label);
        int b = cg_add_node(g, CG_RESHAPE, nm, &c->in[2], 1, &ra, nm);
        y = b < 0 ? -1 : cg_add_node(g, CG_ADD, c->label, (int[]){y, b}, 2, NULL, n->output[0]);
    }
    if (y < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add node '%s'", c->label);
    return cx_ox_define(L, n->output[0], y, idx, 0);
}

/* Einsum of two operands as one MatMul: each operand's letters are batch (in both operands and the output),
 * contracted (in both, not in the output), free (in one operand and the output) or summed away first (in one operand
 * only). With at most one contracted letter, A is laid out as [batch, A's free letters but its last, a 1 per B's free
 * letter but its last, A's last free letter, the contracted letter] and B as [batch, a 1 per A's free letter but its
 * last, B's free letters but its last, the contracted letter, B's last free letter] (a missing letter as a dim of 1),
 * the MatMul broadcasts, and the result is permuted to the output's letters. Repeated letters in an operand
 * (diagonals) and ellipses are refused. */
cattr_status cx_ox_einsum(nctx *c, int idx) {
    loader *L = c->L;
    const Onnx__NodeProto *n = L->gp->node[idx];
    cg_graph *g = L->g;
    const Onnx__AttributeProto *ap;
    CX_CHECK(cx_ox_attr_typed(c, "equation", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, "a string", &ap));
    if (!ap) return cx_ox_nfail(c, CATTR_ERR_FORMAT, "attribute equation is required");
    char eq[128], ops[3][CATTR_MAX_DIMS + 1] = {"", "", ""};
    int len[3] = {0, 0, 0}, part = 0;
    bool arrow = false;
    if (ap->s.len >= sizeof eq) return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "equation too long");
    if (ap->s.len) memcpy(eq, ap->s.data, ap->s.len);
    eq[ap->s.len] = 0;
    for (const char *q = eq; *q; q++) {
        if (*q == ' ') continue;
        if (*q == ',' && part == 0) { part = 1; continue; }
        if (q[0] == '-' && q[1] == '>' && part == 1 && !arrow) { arrow = true; part = 2; q++; continue; }
        bool letter = (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z');
        if (!letter) return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "equation '%s': only letters, ',' and '->' (no ellipsis)", eq);
        if (len[part] >= CATTR_MAX_DIMS || strchr(ops[part], *q))
            return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "equation '%s': a letter repeated in one term (or too many dims)", eq);
        ops[part][len[part]++] = *q;
        ops[part][len[part]] = 0;
    }
    if (part < 1) return cx_ox_nfail(c, CATTR_ERR_FORMAT, "equation '%s' needs two operands", eq);
    if (!arrow) { /* implicit output: the letters that appear once, in alphabetical order */
        for (int ch = 'A'; ch <= 'z'; ch++) {
            if (ch > 'Z' && ch < 'a') continue;
            int cnt = (strchr(ops[0], ch) != NULL) + (strchr(ops[1], ch) != NULL);
            if (cnt == 1 && len[2] < CATTR_MAX_DIMS) {
                ops[2][len[2]++] = (char)ch;
                ops[2][len[2]] = 0;
            }
        }
    }
    for (int i = 0; i < len[2]; i++)
        if (!strchr(ops[0], ops[2][i]) && !strchr(ops[1], ops[2][i]))
            return cx_ox_nfail(c, CATTR_ERR_FORMAT, "equation '%s': output letter '%c' is in no operand", eq, ops[2][i]);
    char batch[CATTR_MAX_DIMS + 1] = "", fr[2][CATTR_MAX_DIMS + 1] = {"", ""}, kept[2][CATTR_MAX_DIMS + 1], contr = 0;
    int nb = 0, nf[2] = {0, 0};
    for (int i = 0; i < len[2]; i++) /* batch letters in the output's order */
        if (strchr(ops[0], ops[2][i]) && strchr(ops[1], ops[2][i])) batch[nb++] = ops[2][i];
    int cur[2] = {c->in[0], c->in[1]};
    char nm[200];
    for (int o = 0; o < 2; o++) {
        const char *mine = ops[o], *other = ops[1 - o];
        cg_attrs ra = cg_attrs_default(); /* letters in this operand only and not in the output: summed first */
        int k = 0;
        for (int i = 0; i < len[o]; i++) {
            bool out = strchr(ops[2], mine[i]) != NULL, both = strchr(other, mine[i]) != NULL;
            if (!out && !both) ra.ints[ra.n_ints++] = i;
            else kept[o][k++] = mine[i];
            if (both && !out) {
                if (contr && contr != mine[i])
                    return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "equation '%s': more than one contracted letter", eq);
                contr = mine[i];
            }
            if (out && !both) fr[o][nf[o]++] = mine[i];
        }
        kept[o][k] = 0;
        if (ra.n_ints) {
            snprintf(nm, sizeof nm, "%s:sum%d", c->label, o);
            cur[o] = cg_add_node(g, CG_REDUCE_SUM, nm, &cur[o], 1, &ra, nm);
            if (cur[o] < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        }
    }
    int ma = nf[0] > 0 ? nf[0] - 1 : 0, pb = nf[1] > 0 ? nf[1] - 1 : 0;
    if (nb + ma + pb + 2 > CATTR_MAX_DIMS) return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "equation '%s': too many dims", eq);
    for (int o = 0; o < 2; o++) {
        /* the operand's own letters in layout order, then 1s inserted where the layout has none */
        char want[CATTR_MAX_DIMS + 3];
        int w = 0, slot = 0;
        cg_attrs ua = cg_attrs_default();
        for (int i = 0; i < nb; i++) want[w++] = batch[i];
        slot = nb;
        for (int i = 0; i < ma; i++, slot++) {
            if (o == 0) want[w++] = fr[0][i];
            else ua.ints[ua.n_ints++] = slot;
        }
        for (int i = 0; i < pb; i++, slot++) {
            if (o == 1) want[w++] = fr[1][i];
            else ua.ints[ua.n_ints++] = slot;
        }
        char rowl = o == 0 ? (nf[0] ? fr[0][nf[0] - 1] : 0) : contr; /* the matrix's two dims */
        char coll = o == 0 ? contr : (nf[1] ? fr[1][nf[1] - 1] : 0);
        if (rowl) want[w++] = rowl;
        else ua.ints[ua.n_ints++] = slot;
        slot++;
        if (coll) want[w++] = coll;
        else ua.ints[ua.n_ints++] = slot;
        cg_attrs ta = cg_attrs_default();
        bool ident = true;
        for (int i = 0; i < w; i++) {
            ta.ints[i] = strchr(kept[o], want[i]) - kept[o];
            ident &= ta.ints[i] == i;
        }
        ta.n_ints = w;
        if (!ident) {
            snprintf(nm, sizeof nm, "%s:perm%d", c->label, o);
            cur[o] = cg_add_node(g, CG_TRANSPOSE, nm, &cur[o], 1, &ta, nm);
        }
        if (cur[o] >= 0 && ua.n_ints) {
            snprintf(nm, sizeof nm, "%s:unsqueeze%d", c->label, o);
            cur[o] = cg_add_node(g, CG_UNSQUEEZE, nm, &cur[o], 1, &ua, nm);
        }
        if (cur[o] < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    snprintf(nm, sizeof nm, "%s:matmul", c->label);
    int y = cg_add_node(g, CG_MATMUL, nm, cur, 2, NULL, nm);
    /* the product's letters: batch, A's free but last, B's free but last, A's last free, B's last free */
    char res[CATTR_MAX_DIMS + 3];
    int nr = 0;
    cg_attrs sq = cg_attrs_default();
    for (int i = 0; i < nb; i++) res[nr++] = batch[i];
    for (int i = 0; i < ma; i++) res[nr++] = fr[0][i];
    for (int i = 0; i < pb; i++) res[nr++] = fr[1][i];
    int at = nr;
    if (nf[0]) res[nr++] = fr[0][nf[0] - 1];
    else sq.ints[sq.n_ints++] = at;
    if (nf[1]) res[nr++] = fr[1][nf[1] - 1];
    else sq.ints[sq.n_ints++] = at + 1;
    res[nr] = 0;
    if (y >= 0 && sq.n_ints) {
        snprintf(nm, sizeof nm, "%s:squeeze", c->label);
        y = cg_add_node(g, CG_SQUEEZE, nm, &y, 1, &sq, nm);
    }
    cg_attrs pa = cg_attrs_default();
    bool ident = true;
    for (int i = 0; i < len[2]; i++) {
        pa.ints[i] = strchr(res, ops[2][i]) - res;
        ident &= pa.ints[i] == i;
    }
    pa.n_ints = len[2];
    y = y < 0 ? -1 : cg_add_node(g, ident ? CG_IDENTITY : CG_TRANSPOSE, c->label, &y, 1, ident ? NULL : &pa, n->output[0]);
    if (y < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add node '%s'", c->label);
    return cx_ox_define(L, n->output[0], y, idx, 0);
}

/* Split: output k is a Slice along the axis, of the given sizes; without sizes, of equal parts computed from the
 * input's shape when the call is planned (the last part smaller when the dim does not divide, as opset 18 says). */
cattr_status cx_ox_split(nctx *c, int idx) {
    loader *L = c->L;
    const Onnx__NodeProto *n = L->gp->node[idx];
    cg_graph *g = L->g;
    int64_t axis = 0, sizes[CG_MAX_INTS], nout = (int64_t)n->n_output;
    int ns = -1;
    CX_CHECK(cx_ox_attr_int(c, "axis", 0, &axis));
    if (L->opset >= 13) {
        if (c->in[1] >= 0) CX_CHECK(cx_ox_fold_ints(c, 1, "split", CG_MAX_INTS, sizes, &ns));
    } else {
        CX_CHECK(cx_ox_attr_ints(c, "split", CG_MAX_INTS, sizes, &ns));
    }
    if (ns >= 0 && ns != nout)
        return cx_ox_nfail(c, CATTR_ERR_FORMAT, "%d split sizes for %lld outputs", ns, (long long)nout);
    for (int k = 0; k < ns; k++)
        if (sizes[k] < 0 || sizes[k] > ((int64_t)1 << 40))
            return cx_ox_nfail(c, CATTR_ERR_FORMAT, "split size %lld is out of range", (long long)sizes[k]);
    if (nout < 1 || nout > CG_MAX_INTS) return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "%lld outputs", (long long)nout);
    char nm[200];
    int each = -1;
    if (ns < 0) { /* ceil(dim / n) = (dim + n - 1) / n, from the shape */
        int64_t pk[2] = {axis, nout - 1}, nn = nout;
        snprintf(nm, sizeof nm, "%s:shape", c->label);
        int sh = cg_add_node(g, CG_SHAPE, nm, &c->in[0], 1, NULL, nm);
        snprintf(nm, sizeof nm, "%s:axis", c->label);
        int ax = int_const(g, nm, &pk[0], 1);
        snprintf(nm, sizeof nm, "%s:dim", c->label);
        cg_attrs ga = cg_attrs_default();
        int dim = sh < 0 || ax < 0 ? -1 : cg_add_node(g, CG_GATHER, nm, (int[]){sh, ax}, 2, &ga, nm);
        snprintf(nm, sizeof nm, "%s:n_minus_1", c->label);
        int nm1 = int_const(g, nm, &pk[1], 1);
        snprintf(nm, sizeof nm, "%s:n", c->label);
        int nv = int_const(g, nm, &nn, 1);
        snprintf(nm, sizeof nm, "%s:dim_up", c->label);
        int up = dim < 0 || nm1 < 0 ? -1 : cg_add_node(g, CG_ADD, nm, (int[]){dim, nm1}, 2, NULL, nm);
        snprintf(nm, sizeof nm, "%s:part", c->label);
        each = up < 0 || nv < 0 ? -1 : cg_add_node(g, CG_DIV, nm, (int[]){up, nv}, 2, NULL, nm);
        if (each < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add node '%s'", c->label);
    }
    int64_t off = 0;
    for (int64_t k = 0; k < nout; k++) {
        if (!n->output[k] || !*n->output[k]) {
            if (ns >= 0) off += sizes[k];
            continue;
        }
        int y;
        if (ns >= 0) {
            cg_attrs sa = cg_attrs_default();
            sa.n_ints = 4;
            int64_t q[4] = {off, off + sizes[k], axis, 1};
            memcpy(sa.ints, q, sizeof q);
            off += sizes[k];
            y = cg_add_node(g, CG_SLICE, n->output[k], &c->in[0], 1, &sa, n->output[k]);
        } else { /* starts k * part, ends (k + 1) * part, computed per call */
            int64_t kk[3] = {k, k + 1, axis};
            int se[2];
            for (int e = 0; e < 2; e++) {
                snprintf(nm, sizeof nm, "%s:k%lld_%d", c->label, (long long)k, e);
                int kv = int_const(g, nm, &kk[e], 1);
                snprintf(nm, sizeof nm, "%s:bound%lld_%d", c->label, (long long)k, e);
                se[e] = kv < 0 ? -1 : cg_add_node(g, CG_MUL, nm, (int[]){each, kv}, 2, NULL, nm);
            }
            snprintf(nm, sizeof nm, "%s:axes%lld", c->label, (long long)k);
            int axv = int_const(g, nm, &kk[2], 1);
            y = se[0] < 0 || se[1] < 0 || axv < 0 ? -1
                : cg_add_node(g, CG_SLICE, n->output[k], (int[]){c->in[0], se[0], se[1], axv}, 4, NULL, n->output[k]);
        }
        if (y < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add node '%s'", c->label);
        CX_CHECK(cx_ox_define(L, n->output[k], y, idx, (int)k));
    }
    return CATTR_OK;
}
