/* onnx_ops.c - ONNX nodes to IR nodes: the table of ops taken one for one (with their attributes and the opset they
 * need), the attribute forms (spatial, axes, slices), constant folding of shape inputs, If, and convert_node, which
 * refuses what it cannot import by node and attribute name. The ops written as several IR ops are onnx_composed.c's;
 * the loader, the name table and the per-node helpers onnx.c's. */
#include "io/onnx_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- op conversion ------------------------------------------------------------------------------------------ */

enum { OP_CONSTANT = CG_OP_COUNT, OP_DROPOUT, OP_LAYERNORM, OP_LSTM, OP_GRU, OP_NOT, OP_PRELU, OP_REDUCE_L2, OP_SPLIT, OP_CONV_TRANSPOSE, OP_EINSUM, OP_IF,
       OP_COMPOSED /* ops written as others (composed below) */ };

typedef struct op_spec {
    const char *name;
    int op; /* cg_op, or OP_CONSTANT / OP_DROPOUT */
    int min_in, max_in;
    const char *attrs;     /* attributes accepted in every opset, space-separated */
    int old_until;         /* opset from which `old_attrs` are no longer part of the op (0: none) */
    const char *old_attrs; /* attributes of older opsets (they became inputs) */
} op_spec;

static const op_spec k_ops[] = {
    {"Gemm", CG_GEMM, 2, 3, "alpha beta transA transB", 0, ""},
    {"MatMul", CG_MATMUL, 2, 2, "", 0, ""},
    {"Conv", CG_CONV, 2, 3, "kernel_shape strides pads dilations group auto_pad", 0, ""},
    {"MaxPool", CG_MAXPOOL, 1, 1, "kernel_shape strides pads dilations ceil_mode storage_order auto_pad", 0, ""},
    {"AveragePool", CG_AVGPOOL, 1, 1, "kernel_shape strides pads dilations ceil_mode count_include_pad auto_pad", 0,
     ""},
    {"GlobalAveragePool", CG_GLOBALAVGPOOL, 1, 1, "", 0, ""},
    {"Relu", CG_RELU, 1, 1, "", 0, ""},
    {"LeakyRelu", CG_LEAKYRELU, 1, 1, "alpha", 0, ""},
    {"Sigmoid", CG_SIGMOID, 1, 1, "", 0, ""},
    {"Tanh", CG_TANH, 1, 1, "", 0, ""},
    {"Softmax", CG_SOFTMAX, 1, 1, "axis", 0, ""},
    {"LogSoftmax", CG_LOGSOFTMAX, 1, 1, "axis", 0, ""},
    {"Clip", CG_CLIP, 1, 3, "", 11, "min max"},
    {"Add", CG_ADD, 2, 2, "", 0, ""},
    {"Sub", CG_SUB, 2, 2, "", 0, ""},
    {"Mul", CG_MUL, 2, 2, "", 0, ""},
    {"Div", CG_DIV, 2, 2, "", 0, ""},
    {"Neg", CG_NEG, 1, 1, "", 0, ""},
    {"Abs", CG_ABS, 1, 1, "", 0, ""},
    {"Sqrt", CG_SQRT, 1, 1, "", 0, ""},
    {"Exp", CG_EXP, 1, 1, "", 0, ""},
    {"Log", CG_LOG, 1, 1, "", 0, ""},
    {"Erf", CG_ERF, 1, 1, "", 0, ""},
    {"Reciprocal", CG_RECIPROCAL, 1, 1, "", 0, ""},
    {"HardSigmoid", CG_HARDSIGMOID, 1, 1, "alpha beta", 0, ""},
    {"HardSwish", CG_HARDSWISH, 1, 1, "", 0, ""},
    {"Softplus", CG_SOFTPLUS, 1, 1, "", 0, ""},
    {"Elu", CG_ELU, 1, 1, "alpha", 0, ""},
    {"Selu", CG_SELU, 1, 1, "alpha gamma", 0, ""},
    {"Gelu", CG_GELU, 1, 1, "approximate", 0, ""},
    {"Pow", CG_POW, 2, 2, "", 0, ""},
    {"Pad", CG_PAD, 1, 4, "mode", 11, "pads value"},
    {"Shape", CG_SHAPE, 1, 1, "start end", 0, ""},
    {"Size", CG_SHAPE, 1, 1, "", 0, ""},
    {"ConstantOfShape", CG_CONSTANT_OF_SHAPE, 1, 1, "value", 0, ""},
    {"Equal", CG_EQUAL, 2, 2, "", 0, ""},
    {"Greater", CG_EQUAL, 2, 2, "", 0, ""},
    {"Less", CG_EQUAL, 2, 2, "", 0, ""},
    {"GreaterOrEqual", CG_EQUAL, 2, 2, "", 0, ""},
    {"LessOrEqual", CG_EQUAL, 2, 2, "", 0, ""},
    {"And", CG_EQUAL, 2, 2, "", 0, ""},
    {"Or", CG_EQUAL, 2, 2, "", 0, ""},
    {"Xor", CG_EQUAL, 2, 2, "", 0, ""},
    {"Not", OP_NOT, 1, 1, "", 0, ""},
    {"PRelu", OP_PRELU, 2, 2, "", 0, ""},
    {"ConvTranspose", OP_CONV_TRANSPOSE, 2, 3,
     "kernel_shape strides pads dilations group auto_pad output_padding output_shape", 0, ""},
    {"Einsum", OP_EINSUM, 2, 2, "equation", 0, ""},
    {"Softsign", OP_COMPOSED, 1, 1, "", 0, ""},
    {"Celu", OP_COMPOSED, 1, 1, "alpha", 0, ""},
    {"Mish", OP_COMPOSED, 1, 1, "", 0, ""},
    {"ThresholdedRelu", OP_COMPOSED, 1, 1, "alpha", 0, ""},
    {"ReduceSumSquare", OP_COMPOSED, 1, 2, "keepdims noop_with_empty_axes", 18, "axes"},
    {"ReduceL1", OP_COMPOSED, 1, 2, "keepdims noop_with_empty_axes", 18, "axes"},
    {"ReduceLogSumExp", OP_COMPOSED, 1, 2, "keepdims noop_with_empty_axes", 18, "axes"},
    {"DepthToSpace", OP_COMPOSED, 1, 1, "blocksize mode", 0, ""},
    {"SpaceToDepth", OP_COMPOSED, 1, 1, "blocksize", 0, ""},
    {"If", OP_IF, 1, 1, "then_branch else_branch", 0, ""},
    {"Split", OP_SPLIT, 1, 2, "axis num_outputs", 13, "split"},
    {"Where", CG_WHERE, 3, 3, "", 0, ""},
    {"Expand", CG_EXPAND, 2, 2, "", 0, ""},
    {"Tile", CG_TILE, 2, 2, "", 0, ""},
    {"Resize", CG_RESIZE, 1, 4, "mode coordinate_transformation_mode nearest_mode cubic_coeff_a exclude_outside "
     "extrapolation_value antialias axes keep_aspect_ratio_policy", 0, ""},
    {"Mod", CG_MOD, 2, 2, "fmod", 0, ""},
    {"Range", CG_RANGE, 3, 3, "", 0, ""},
    {"ScatterND", CG_SCATTER_ND, 3, 3, "reduction", 0, ""},
    {"Cast", CG_CAST, 1, 1, "to saturate", 0, ""},
    {"Max", CG_MAX, 1, 2, "", 0, ""},
    {"Min", CG_MIN, 1, 2, "", 0, ""},
    {"Reshape", CG_RESHAPE, 2, 2, "allowzero", 0, ""},
    {"Flatten", CG_FLATTEN, 1, 1, "axis", 0, ""},
    {"Concat", CG_CONCAT, 1, CG_MAX_IN, "axis", 0, ""},
    {"Unsqueeze", CG_UNSQUEEZE, 1, 2, "", 13, "axes"},
    {"Squeeze", CG_SQUEEZE, 1, 2, "", 13, "axes"},
    {"Transpose", CG_TRANSPOSE, 1, 1, "perm", 0, ""},
    {"ReduceSum", CG_REDUCE_SUM, 1, 2, "keepdims noop_with_empty_axes", 13, "axes"},
    {"ReduceMean", CG_REDUCE_MEAN, 1, 2, "keepdims noop_with_empty_axes", 18, "axes"},
    {"ReduceMax", CG_REDUCE_MAX, 1, 2, "keepdims noop_with_empty_axes", 18, "axes"},
    {"ReduceMin", CG_REDUCE_MIN, 1, 2, "keepdims noop_with_empty_axes", 18, "axes"},
    {"ReduceL2", OP_REDUCE_L2, 1, 2, "keepdims noop_with_empty_axes", 18, "axes"},
    {"Gather", CG_GATHER, 2, 2, "axis", 0, ""},
    {"Slice", CG_SLICE, 1, 5, "", 10, "starts ends axes"},
    {"BatchNormalization", CG_BATCHNORM, 5, 5, "epsilon momentum training_mode", 9, "spatial"},
    {"Identity", CG_IDENTITY, 1, 1, "", 0, ""},
    {"Dropout", OP_DROPOUT, 1, 3, "ratio seed", 0, ""},
    {"LayerNormalization", OP_LAYERNORM, 1, 3, "axis epsilon stash_type", 0, ""},
    {"LSTM", OP_LSTM, 3, 8, "activation_alpha activation_beta activations clip direction hidden_size input_forget layout",
     0, ""},
    {"GRU", OP_GRU, 3, 6, "activation_alpha activation_beta activations clip direction hidden_size layout "
     "linear_before_reset", 0, ""},
    {"Constant", OP_CONSTANT, 0, 0, "value value_float value_floats value_int value_ints", 0, ""},
};

static bool word_in(const char *list, const char *w) {
    size_t n = strlen(w);
    if (n == 0) return false;
    for (const char *p = list; (p = strstr(p, w)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return true;
    return false;
}

/* kernel/strides/pads/dilations/auto_pad of Conv and the pools; `ks` holds nk kernel sizes. */
cattr_status cx_ox_spatial_attrs(const nctx *c, cg_attrs *a, const int64_t *ks, int nk, bool dilations_ok) {
    if (nk < 1 || nk > CG_MAX_SP)
        return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "%d spatial dimensions (1 to %d are supported)", nk, CG_MAX_SP);
    a->nsp = nk;
    int n;
    int64_t v[2 * CG_MAX_SP];
    static const char *const names[3] = {"strides", "pads", "dilations"};
    for (int k = 0; k < 3; k++) {
        int want = k == 1 ? 2 * nk : nk;
        CX_CHECK(cx_ox_attr_ints(c, names[k], 2 * CG_MAX_SP, v, &n));
        if (n < 0) continue;
        if (n != want)
            return cx_ox_nfail(c, CATTR_ERR_FORMAT, "attribute '%s' has %d values, expected %d", names[k], n, want);
        for (int i = 0; i < n; i++) {
            if (v[i] < (k == 1 ? 0 : 1))
                return cx_ox_nfail(c, CATTR_ERR_FORMAT, "attribute '%s' has an invalid value %lld", names[k],
                             (long long)v[i]);
            if (k == 0) a->stride[i] = v[i];
            if (k == 1) a->pad[i] = v[i];
            if (k == 2) a->dilation[i] = v[i];
        }
        if (k == 2 && !dilations_ok)
            for (int i = 0; i < n; i++)
                if (v[i] != 1) return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "dilations other than 1 are not supported");
    }
    for (int i = 0; i < nk; i++) {
        if (ks[i] < 1) return cx_ox_nfail(c, CATTR_ERR_FORMAT, "kernel size %lld is invalid", (long long)ks[i]);
        a->kernel[i] = ks[i];
    }
    const Onnx__AttributeProto *ap;
    CX_CHECK(cx_ox_attr_typed(c, "auto_pad", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, "a string", &ap));
    if (ap) {
        char mode[32];
        snprintf(mode, sizeof mode, "%.*s", (int)(ap->s.len < 31 ? ap->s.len : 31),
                 ap->s.data ? (const char *)ap->s.data : "");
        if (strcmp(mode, "VALID") == 0) {
            for (int i = 0; i < 2 * CG_MAX_SP; i++) a->pad[i] = 0;
        } else if (strcmp(mode, "SAME_UPPER") == 0 || strcmp(mode, "SAME_LOWER") == 0) {
            for (int i = 0; i < 2 * CG_MAX_SP; i++) a->pad[i] = 0;
            a->auto_pad = mode[5] == 'U' ? 1 : 2; /* the pads from each call's input shape (cx_geom_init) */
        } else if (strcmp(mode, "NOTSET") != 0 && mode[0]) {
            return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "auto_pad '%s' is not supported (NOTSET, VALID, SAME_UPPER or "
                                                   "SAME_LOWER)", mode);
        }
    }
    return CATTR_OK;
}

/* The pools' kernel_shape, which is required. */
static cattr_status pool_kernel(const nctx *c, int64_t *ks, int *nk) {
    CX_CHECK(cx_ox_attr_ints(c, "kernel_shape", CG_MAX_SP, ks, nk));
    if (*nk < 0) return cx_ox_nfail(c, CATTR_ERR_FORMAT, "attribute 'kernel_shape' is required");
    return CATTR_OK;
}

/* Squeeze / Unsqueeze axes: an input from opset 13, an attribute before. */
static cattr_status axes_attr(const nctx *c, cg_attrs *a, bool required) {
    int n = -1;
    if (c->L->opset >= 13) {
        if (c->in[1] >= 0) CX_CHECK(cx_ox_fold_ints(c, 1, "axes", CG_MAX_INTS, a->ints, &n));
    } else {
        CX_CHECK(cx_ox_attr_ints(c, "axes", CG_MAX_INTS, a->ints, &n));
    }
    if (n < 0 && required) return cx_ox_nfail(c, CATTR_ERR_FORMAT, "axes are required");
    a->n_ints = n < 0 ? 0 : n;
    return CATTR_OK;
}

/* Whether value v0 is computed from a float graph input's values (not only from shapes, constants and integer inputs):
 * such a shape input cannot be folded when a call is planned. (Integer inputs are: a call gives their values, and the
 * model is planned for them; models/model.c, cx_model_fold_inputs.) A walk with its own stack, each value's answer
 * kept in L->fiv: linear in the graph however deep it is and however many paths reach a value (a file can make both
 * as large as it likes). Without memory for the walk: true (the caller refuses the node). */
static bool from_input_values(loader *L, int v0) {
    const cg_graph *g = L->g;
    if (v0 < 0) return false;
    if ((size_t)g->n_vals > L->cap_fiv) {
        size_t cap = 2 * L->cap_fiv > (size_t)g->n_vals ? 2 * L->cap_fiv : (size_t)g->n_vals;
        uint8_t *m = realloc(L->fiv, cap);
        if (!m) return true;
        memset(m + L->cap_fiv, 0, cap - L->cap_fiv);
        L->fiv = m;
        L->cap_fiv = cap;
    }
    if (L->fiv[v0]) return L->fiv[v0] == 3;
    size_t cap = 64, sp = 0;
    int *stack = malloc(cap * sizeof *stack);
    if (!stack) return true;
    stack[sp++] = v0;
    while (sp) {
        int v = stack[sp - 1];
        if (L->fiv[v]) {
            sp--;
            continue;
        }
        const cg_value *val = &g->vals[v];
        uint8_t r = 2;
        bool pending = false;
        if (val->kind == CG_VAL_INPUT) {
            r = L->info->inputs[val->input_index].dtype != CATTR_INT64 ? 3 : 2;
        } else if (val->kind == CG_VAL_NODE && g->nodes[val->producer].op != CG_SHAPE) {
            const cg_node *nd = &g->nodes[val->producer];
            for (int j = 0; j < nd->n_in && r != 3; j++) {
                int u = nd->in[j];
                if (u < 0 || L->fiv[u] == 2) continue;
                if (L->fiv[u] == 3) {
                    r = 3;
                } else { /* not known yet: its answer first, then this value's again */
                    if (sp == cap) {
                        int *m = realloc(stack, 2 * cap * sizeof *stack);
                        if (!m) {
                            free(stack);
                            return true;
                        }
                        stack = m;
                        cap *= 2;
                    }
                    stack[sp++] = u;
                    pending = true;
                }
            }
        }
        if (pending && r != 3) continue;
        L->fiv[v] = r;
        sp--;
    }
    free(stack);
    return L->fiv[v0] == 3;
}

static cattr_status slice_attrs(const nctx *c, cg_attrs *a) {
    int64_t v[4][MAX_SLICE_AXES];
    int cnt[4] = {-1, -1, -1, -1};
    static const char *const roles[4] = {"starts", "ends", "axes", "steps"};
    for (int k = 0; k < 4; k++) {
        if (c->L->opset >= 10) {
            if (c->in[1 + k] >= 0) CX_CHECK(cx_ox_fold_ints(c, 1 + k, roles[k], MAX_SLICE_AXES, v[k], &cnt[k]));
        } else if (k < 3) {
            CX_CHECK(cx_ox_attr_ints(c, roles[k], MAX_SLICE_AXES, v[k], &cnt[k]));
        }
    }
    int n = cnt[0];
    if (n < 0 || cnt[1] < 0) return cx_ox_nfail(c, CATTR_ERR_FORMAT, "starts and ends are required");
    for (int k = 1; k < 4; k++) {
        if (cnt[k] >= 0 && cnt[k] != n)
            return cx_ox_nfail(c, CATTR_ERR_FORMAT, "%s has %d values but starts has %d", roles[k], cnt[k], n);
    }
    for (int i = 0; i < n; i++) {
        if (cnt[3] >= 0 && v[3][i] == 0) return cx_ox_nfail(c, CATTR_ERR_FORMAT, "a step of 0 is invalid");
        a->ints[i] = v[0][i];
        a->ints[n + i] = v[1][i];
        a->ints[2 * n + i] = cnt[2] >= 0 ? v[2][i] : i;
        a->ints[3 * n + i] = cnt[3] >= 0 ? v[3][i] : 1;
    }
    a->n_ints = 4 * n;
    return CATTR_OK;
}

/* The tensor of a Constant node (its one value attribute). */
static cattr_status constant_tensor(const nctx *c, cattr_tensor **t) {
    *t = NULL;
    if (c->n->n_attribute != 1) return cx_ox_nfail(c, CATTR_ERR_FORMAT, "exactly one value attribute is required");
    const Onnx__AttributeProto *ap = c->n->attribute[0];
    const char *an = STR(ap->name), *out = c->n->output[0];
    static const Onnx__AttributeProto__AttributeType types[5] = {
        ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT,
        ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS,
        ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS};
    static const char *const names[5] = {"value", "value_float", "value_int", "value_floats", "value_ints"};
    int k = 0;
    while (k < 5 && strcmp(an, names[k]) != 0) k++;
    if (k == 5 || ap->type != types[k] || (k == 0 && !ap->t))
        return cx_ox_nfail(c, CATTR_ERR_FORMAT, "attribute '%s' has the wrong type", an);
    if (k == 0) {
        cattr_status st = cx_ox_tensor_from_proto(ap->t, out, t);
        return st == CATTR_OK ? st : cx_fail_context(st, "node '%s' (op Constant)", c->label);
    }
    int64_t len = k == 3 ? (int64_t)ap->n_floats : (int64_t)ap->n_ints;
    cattr_dtype dt = (k == 1 || k == 3) ? CATTR_FLOAT32 : CATTR_INT64;
    *t = cx_tensor_alloc(dt, k >= 3 ? 1 : 0, &len);
    if (!*t) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot allocate constant '%s'", out);
    float *f = (*t)->data;
    int64_t *i64 = (*t)->data;
    if (k == 1) f[0] = ap->f;
    if (k == 2) i64[0] = ap->i;
    for (int64_t i = 0; k == 3 && i < len; i++) f[i] = ap->floats[i];
    for (int64_t i = 0; k == 4 && i < len; i++) i64[i] = ap->ints[i];
    return CATTR_OK;
}

/* Value id of ONNX input `name` of node c, or an error for a secondary output or an undefined name. */
cattr_status cx_ox_resolve_input(const nctx *c, const char *name, int *id) {
    const loader *L = c->L;
    const name_ent *e = cx_ox_find(L, name);
    char buf[160];
    if (e && e->val >= 0) {
        *id = e->val;
        return CATTR_OK;
    }
    if (e) {
        const Onnx__NodeProto *p = e->gp->node[e->node];
        return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED,
                     "input '%s' is output %d of node '%s' (op %s); only output 0 of a node is supported", name, e->slot,
                     cx_ox_node_label(p, e->node, buf, sizeof buf), p->op_type);
    }
    for (size_t j = (size_t)c->idx; j < L->gp->n_node; j++)
        for (size_t k = 0; k < L->gp->node[j]->n_output; k++)
            if (strcmp(STR(L->gp->node[j]->output[k]), name) == 0)
                return cx_ox_nfail(c, CATTR_ERR_FORMAT,
                             "input '%s' is produced by the later node '%s' (nodes must be in topological order)", name,
                             cx_ox_node_label(L->gp->node[j], (int)j, buf, sizeof buf));
    return cx_ox_nfail(c, CATTR_ERR_FORMAT, "input '%s' is not defined by any earlier node, initializer or graph input",
                 name);
}

/* A scalar constant of the given dtype and value named `name` (the graph owns it); its value id, or -1 when out of
 * memory. */
int cx_ox_scalar_const(cg_graph *g, const char *name, cattr_dtype dt, double v) {
    int64_t one = 1;
    cattr_tensor *t = cx_tensor_alloc(dt, 0, &one);
    if (!t) return -1;
    cx_tensor_set(t, 0, v);
    int id = cg_add_const(g, name, t, true);
    if (id < 0) cattr_tensor_free(t);
    return id;
}



/* If: the nodes of both branches are imported into the graph (their initializers as constants; they read the outer
 * graph's values by name), and each output of the If becomes a CG_IF choosing between the branches' outputs. The
 * planner folds the condition for the call's shapes and keeps only the branch taken (exec/plan.c). */
static cattr_status if_node(nctx *c, int idx) {
    loader *L = c->L;
    const Onnx__NodeProto *n = L->gp->node[idx];
    const char *names[2] = {"then_branch", "else_branch"};
    int outs[2][CG_MAX_INTS];
    if (n->n_output > CG_MAX_INTS) return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "%zu outputs, at most %d", n->n_output, CG_MAX_INTS);
    if (L->depth >= MAX_IF_DEPTH) return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "If branches nested more than %d deep", MAX_IF_DEPTH);
    for (int b = 0; b < 2; b++) {
        const Onnx__AttributeProto *a;
        CX_CHECK(cx_ox_attr_typed(c, names[b], ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH, "a graph", &a));
        const Onnx__GraphProto *bg = a ? a->g : NULL;
        if (!bg) return cx_ox_nfail(c, CATTR_ERR_FORMAT, "attribute '%s' (a graph) is missing", names[b]);
        if (bg->n_output != n->n_output)
            return cx_ox_nfail(c, CATTR_ERR_FORMAT, "%s has %zu outputs, the node %zu", names[b], bg->n_output, n->n_output);
        if (bg->n_sparse_initializer)
            return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "%s has sparse initializers", names[b]);
        const Onnx__GraphProto *outer = L->gp;
        size_t mark = L->n_undo;
        L->gp = bg;
        L->depth++;
        cattr_status st = CATTR_OK;
        for (size_t i = 0; i < bg->n_initializer && st == CATTR_OK; i++) st = cx_ox_add_initializer(L, bg->initializer[i], i);
        for (size_t i = 0; i < bg->n_node && st == CATTR_OK; i++) st = cx_ox_convert_node(L, (int)i);
        if (st != CATTR_OK) st = cx_fail_context(st, "node '%s' (op If), %s", c->label, names[b]);
        for (size_t k = 0; k < bg->n_output && st == CATTR_OK; k++) {
            const char *on = STR(bg->output[k]->name);
            const name_ent *e = cx_ox_find(L, on);
            if (!e || e->val < 0)
                st = cx_ox_nfail(c, e ? CATTR_ERR_UNSUPPORTED : CATTR_ERR_FORMAT, "output '%s' of %s is %s", on, names[b],
                           e ? "not output 0 of its node (only output 0 of a node is supported)" : "not defined");
            else
                outs[b][k] = e->val;
        }
        L->depth--;
        L->gp = outer;
        cx_ox_scope_end(L, mark);
        if (st != CATTR_OK) return st;
    }
    for (size_t k = 0; k < n->n_output; k++) {
        if (!n->output[k] || !*n->output[k]) continue;
        int in[3] = {c->in[0], outs[0][k], outs[1][k]};
        char nm[200];
        snprintf(nm, sizeof nm, k ? "%s:%zu" : "%s", c->label, k);
        int y = cg_add_node(L->g, CG_IF, nm, in, 3, NULL, n->output[k]);
        if (y < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add node '%s'", c->label);
        CX_CHECK(cx_ox_define(L, n->output[k], y, idx, 0));
    }
    return CATTR_OK;
}

cattr_status cx_ox_convert_node(loader *L, int idx) {
    const Onnx__NodeProto *n = L->gp->node[idx];
    char lbuf[160];
    nctx c = {L, n, idx, cx_ox_node_label(n, idx, lbuf, sizeof lbuf), {0}};
    if (!n->op_type || !*n->op_type) return cx_fail(CATTR_ERR_FORMAT, "node '%s' has no op_type", c.label);
    if (n->domain && *n->domain && strcmp(n->domain, "ai.onnx") != 0)
        return cx_ox_nfail(&c, CATTR_ERR_UNSUPPORTED, "domain '%s' is not supported (only the default ONNX domain)",
                     n->domain);
    const op_spec *sp = NULL;
    for (size_t i = 0; i < CX_ARRAY_LEN(k_ops) && !sp; i++)
        if (strcmp(k_ops[i].name, n->op_type) == 0) sp = &k_ops[i];
    if (!sp) return cx_ox_nfail(&c, CATTR_ERR_UNSUPPORTED, "unsupported op");
    for (size_t i = 0; i < n->n_attribute; i++) {
        const char *an = STR(n->attribute[i]->name);
        if (!word_in(sp->attrs, an) && !(L->opset < sp->old_until && word_in(sp->old_attrs, an)))
            return cx_ox_nfail(&c, CATTR_ERR_UNSUPPORTED, "unsupported attribute '%s'", an);
    }
    if (n->n_output < 1 || !n->output[0] || !*n->output[0]) return cx_ox_nfail(&c, CATTR_ERR_FORMAT, "no output");
    if (sp->op == CG_CONCAT && n->n_input > CG_MAX_IN - 1) return cx_ox_wide_concat(&c, idx); /* gradient: 7 at most */
    if (n->n_input < (size_t)sp->min_in || n->n_input > (size_t)sp->max_in)
        return cx_ox_nfail(&c, CATTR_ERR_FORMAT, "%zu inputs, expected %d to %d", n->n_input, sp->min_in, sp->max_in);
    for (int i = 0; i < CG_MAX_IN; i++) {
        c.in[i] = -1;
        if ((size_t)i >= n->n_input || !n->input[i] || !*n->input[i]) {
            if (i < sp->min_in || (sp->op == CG_CONCAT && (size_t)i < n->n_input))
                return cx_ox_nfail(&c, CATTR_ERR_FORMAT, "required input %d is empty", i);
            continue;
        }
        CX_CHECK(cx_ox_resolve_input(&c, n->input[i], &c.in[i]));
    }

    if (sp->op == OP_CONSTANT) {
        cattr_tensor *t;
        CX_CHECK(constant_tensor(&c, &t));
        int id = cg_add_const(L->g, n->output[0], t, true);
        if (id < 0) {
            cattr_tensor_free(t);
            return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add constant '%s'", n->output[0]);
        }
        return cx_ox_define(L, n->output[0], id, idx, 0);
    }

    if (sp->op == OP_LAYERNORM) return cx_ox_layer_norm(&c, idx);
    if (sp->op == OP_LSTM || sp->op == OP_GRU) return cx_ox_recurrent(&c, idx, sp->op == OP_GRU);
    if (sp->op == OP_PRELU) return cx_ox_prelu(&c, idx);
    if (sp->op == CG_CLIP && L->opset >= 11 &&
        ((c.in[1] >= 0 && L->g->vals[c.in[1]].kind != CG_VAL_CONST) ||
         (c.in[2] >= 0 && L->g->vals[c.in[2]].kind != CG_VAL_CONST)))
        return cx_ox_clip_computed(&c, idx);
    if (sp->op == OP_SPLIT) return cx_ox_split(&c, idx);
    if (sp->op == OP_CONV_TRANSPOSE) return cx_ox_conv_transpose(&c, idx);
    if (sp->op == OP_EINSUM) return cx_ox_einsum(&c, idx);
    if (sp->op == OP_IF) return if_node(&c, idx);
    if (sp->op == OP_COMPOSED) return cx_ox_composed(&c, idx);
    cg_op op = sp->op == OP_DROPOUT ? CG_IDENTITY : (cg_op)sp->op;
    cg_attrs a = cg_attrs_default();
    int nin = 1; /* most ops keep their first input only; the rest were folded into attributes */
    int64_t ks[CG_MAX_SP], v;
    int nk;
    switch (sp->op) {
    case CG_GEMM:
        CX_CHECK(cx_ox_attr_float(&c, "alpha", 1.0, &a.alpha));
        CX_CHECK(cx_ox_attr_float(&c, "beta", 1.0, &a.beta));
        CX_CHECK(cx_ox_attr_flag(&c, "transA", &a.trans_a));
        CX_CHECK(cx_ox_attr_flag(&c, "transB", &a.trans_b));
        nin = c.in[2] >= 0 ? 3 : 2;
        break;
    case CG_CONV: {
        CX_CHECK(cx_ox_attr_ints(&c, "kernel_shape", CG_MAX_SP, ks, &nk));
        if (nk < 0) {
            const cg_value *w = &L->g->vals[c.in[1]];
            if (w->kind != CG_VAL_CONST)
                return cx_ox_nfail(&c, CATTR_ERR_UNSUPPORTED, "no kernel_shape and the weight '%s' is not a constant",
                             n->input[1]);
            nk = w->data->ndim - 2;
            for (int i = 0; i < nk && i < CG_MAX_SP; i++) ks[i] = w->data->shape[2 + i];
        }
        CX_CHECK(cx_ox_spatial_attrs(&c, &a, ks, nk, true));
        CX_CHECK(cx_ox_attr_int(&c, "group", 1, &a.group));
        if (a.group < 1) return cx_ox_nfail(&c, CATTR_ERR_FORMAT, "group %lld is invalid", (long long)a.group);
        nin = c.in[2] >= 0 ? 3 : 2;
        break;
    }
    case CG_MAXPOOL:
        CX_CHECK(pool_kernel(&c, ks, &nk));
        CX_CHECK(cx_ox_spatial_attrs(&c, &a, ks, nk, true));
        CX_CHECK(cx_ox_attr_flag(&c, "ceil_mode", &a.ceil_mode));
        CX_CHECK(cx_ox_attr_int(&c, "storage_order", 0, &v));
        if (v != 0) return cx_ox_nfail(&c, CATTR_ERR_UNSUPPORTED, "storage_order %lld is not supported", (long long)v);
        break;
    case CG_AVGPOOL:
        CX_CHECK(pool_kernel(&c, ks, &nk));
        CX_CHECK(cx_ox_spatial_attrs(&c, &a, ks, nk, false));
        CX_CHECK(cx_ox_attr_flag(&c, "ceil_mode", &a.ceil_mode));
        CX_CHECK(cx_ox_attr_flag(&c, "count_include_pad", &a.count_include_pad));
        break;
    case CG_LEAKYRELU: CX_CHECK(cx_ox_attr_float(&c, "alpha", 0.01, &a.alpha)); break;
    case CG_LOGSOFTMAX: { /* over the last dim: the op's kernel; over another (opset 13+): as its definition */
        int64_t ax = 0;
        CX_CHECK(cx_ox_attr_int(&c, "axis", L->opset >= 13 ? -1 : 1, &ax));
        if (ax == -1) break;
        if (L->opset < 13)
            return cx_ox_nfail(&c, CATTR_ERR_UNSUPPORTED, "axis %lld before opset 13 (over the dims from axis on): only "
                                                    "axis -1 is supported", (long long)ax);
        /* x - m - log(sum(exp(x - m))) with m = max(x) over the axis */
        cg_attrs ra = cg_attrs_default();
        ra.index = 1;
        ra.n_ints = 1;
        ra.ints[0] = ax;
        char nm[200];
        cg_graph *g = L->g;
        int v = c.in[0], t;
#define LS_NODE(op, at, suffix, ...)                                                                                   \
    (snprintf(nm, sizeof nm, "%s:%s", c.label, suffix),                                                                \
     t = cg_add_node(g, op, nm, (int[]){__VA_ARGS__}, (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), at, nm), t)
        int m = LS_NODE(CG_REDUCE_MAX, &ra, "max", v);
        int d = m < 0 ? -1 : LS_NODE(CG_SUB, NULL, "shifted", v, m);
        int e = d < 0 ? -1 : LS_NODE(CG_EXP, NULL, "exp", d);
        int s = e < 0 ? -1 : LS_NODE(CG_REDUCE_SUM, &ra, "sum", e);
        int l = s < 0 ? -1 : LS_NODE(CG_LOG, NULL, "log_sum", s);
#undef LS_NODE
        if (l < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add node '%s'", c.label);
        c.in[0] = d;
        c.in[1] = l;
        op = CG_SUB;
        nin = 2;
        break;
    }
    case CG_HARDSIGMOID:
        CX_CHECK(cx_ox_attr_float(&c, "alpha", 0.2, &a.alpha));
        CX_CHECK(cx_ox_attr_float(&c, "beta", 0.5, &a.beta));
        break;
    case CG_ELU: CX_CHECK(cx_ox_attr_float(&c, "alpha", 1.0, &a.alpha)); break;
    case CG_SELU:
        CX_CHECK(cx_ox_attr_float(&c, "alpha", 1.67326319217681884765625, &a.alpha));
        CX_CHECK(cx_ox_attr_float(&c, "gamma", 1.05070102214813232421875, &a.beta));
        break;
    case CG_GELU: {
        const Onnx__AttributeProto *ap = cx_ox_attr_find(&c, "approximate");
        const char *mode = ap && ap->s.data ? (const char *)ap->s.data : "none";
        size_t len = ap ? ap->s.len : 4;
        if (len == 4 && !strncmp(mode, "tanh", 4)) a.index = 1;
        else if (!(len == 4 && !strncmp(mode, "none", 4)))
            return cx_ox_nfail(&c, CATTR_ERR_UNSUPPORTED, "approximate='%.*s' (expected 'none' or 'tanh')", (int)len, mode);
        break;
    }
    case CG_POW: nin = 2; break;
    case CG_RESIZE: { /* nearest and linear over the spatial dims, scales constant, sizes constant or from shapes */
        static const char *const modes[] = {"nearest", "linear"};
        static const char *const coords[] = {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"};
        static const char *const rounding[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
        const char *const *tabs[3] = {modes, coords, rounding};
        static const int counts[3] = {2, 4, 4};
        static const char *const names[3] = {"mode", "coordinate_transformation_mode", "nearest_mode"};
        int64_t *dst[3] = {&a.index, &a.axis, NULL};
        int ta = 0;
        if (L->opset < 11) return cx_ox_nfail(&c, CATTR_ERR_UNSUPPORTED, "Resize before opset 11 (export at opset 11 or later)");
        for (int k = 0; k < 3; k++) {
            const Onnx__AttributeProto *sp2;
            CX_CHECK(cx_ox_attr_typed(&c, names[k], ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, "a string", &sp2));
            int found = sp2 ? -1 : 0;
            for (int q = 0; sp2 && q < counts[k]; q++)
                if (sp2->s.len == strlen(tabs[k][q]) && !memcmp(sp2->s.data, tabs[k][q], sp2->s.len)) found = q;
            if (found < 0)
                return cx_ox_nfail(&c, CATTR_ERR_UNSUPPORTED, "%s '%.*s' is not supported", names[k], (int)sp2->s.len,
                             sp2->s.data ? (const char *)sp2->s.data : "");
            if (dst[k]) *dst[k] = found;
            else ta = found;
        }
        a.trans_a = ta;
        CX_CHECK(cx_ox_attr_int(&c, "exclude_outside", 0, &v));
        if (v) return cx_ox_nfail(&c, CATTR_ERR_UNSUPPORTED, "exclude_outside=1 is not supported");
        CX_CHECK(cx_ox_attr_int(&c, "antialias", 0, &v));
        if (v) return cx_ox_nfail(&c, CATTR_ERR_UNSUPPORTED, "antialias=1 is not supported");
        if (cx_ox_attr_find(&c, "axes")) return cx_ox_nfail(&c, CATTR_ERR_UNSUPPORTED, "attribute axes is not supported");
        bool has_scales = false;
        if (c.in[2] >= 0) {
            const cattr_tensor *st = NULL;
            CX_CHECK(cx_ox_need_const(&c, 2, "scales", &st));
            if (st->numel > 0) {
                if (st->numel != 3 && st->numel != 4)
                    return cx_ox_nfail(&c, CATTR_ERR_UNSUPPORTED, "%lld scales: inputs of rank 3 or 4 are supported",
                                 (long long)st->numel);
                if (cx_tensor_get(st, 0) != 1 || cx_tensor_get(st, 1) != 1)
                    return cx_ox_nfail(&c, CATTR_ERR_UNSUPPORTED, "only the spatial dims can be resized (scales of dims 0 "
                                                            "and 1 must be 1)");
                a.alpha = cx_tensor_get(st, 2);
                a.beta = st->numel == 4 ? cx_tensor_get(st, 3) : 1;
                if (!(a.alpha > 0) || !(a.beta > 0)) return cx_ox_nfail(&c, CATTR_ERR_FORMAT, "scales must be positive");
                has_scales = true;
            }
        }
        if (c.in[3] >= 0 && has_scales) return cx_ox_nfail(&c, CATTR_ERR_FORMAT, "give scales or sizes, not both");
        if (c.in[3] >= 0) {
            if (L->g->vals[c.in[3]].kind == CG_VAL_CONST || from_input_values(L, c.in[3])) {
                CX_CHECK(cx_ox_fold_ints(&c, 3, "sizes", CATTR_MAX_DIMS, a.ints, &a.n_ints));
                if (a.n_ints < 1) return cx_ox_nfail(&c, CATTR_ERR_FORMAT, "sizes is empty");
            } else {
                c.in[1] = c.in[3]; /* computed from shapes: folded per call */
                nin = 2;
            }
        } else if (!has_scales) {
            return cx_ox_nfail(&c, CATTR_ERR_FORMAT, "scales or sizes is required");
        }
        break;
    }
    case CG_MOD:
        CX_CHECK(cx_ox_attr_int(&c, "fmod", 0, &v));
        a.index = v != 0;
        nin = 2;
        break;
    case CG_SCATTER_ND: {
        const Onnx__AttributeProto *rp;
        CX_CHECK(cx_ox_attr_typed(&c, "reduction", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, "a string", &rp));
        if (rp && !(rp->s.len == 4 && !memcmp(rp->s.data, "none", 4)))
            return cx_ox_nfail(&c, CATTR_ERR_UNSUPPORTED, "reduction '%.*s' (only none)", (int)rp->s.len,
                         rp->s.data ? (const char *)rp->s.data : "");
        nin = 3;
        break;
    }
    case CG_RANGE: { /* of constants: a constant; from shapes: folded per call (int64 only) */
        bool consts = true;
        for (int j = 0; j < 3; j++) consts &= L->g->vals[c.in[j]].kind == CG_VAL_CONST;
        if (consts) {
            double s0, lim, dl;
            CX_CHECK(cx_ox_fold_scalar(&c, 0, "start", &s0));
            CX_CHECK(cx_ox_fold_scalar(&c, 1, "limit", &lim));
            CX_CHECK(cx_ox_fold_scalar(&c, 2, "delta", &dl));
            double len = dl != 0 ? ceil((lim - s0) / dl) : -1;
            if (dl == 0 || !(len < 1e8)) return cx_ox_nfail(&c, CATTR_ERR_FORMAT, "start, limit and delta give no valid range");
            int64_t cnt = len > 0 ? (int64_t)len : 0;
            cattr_dtype dt = L->g->vals[c.in[0]].data->dtype;
            cattr_tensor *t = cx_tensor_alloc(dt, 1, &cnt);
            if (!t) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            for (int64_t k = 0; k < cnt; k++) cx_tensor_set(t, k, s0 + (double)k * dl);
            int id = cg_add_const(L->g, n->output[0], t, true);
            if (id < 0) {
                cattr_tensor_free(t);
                return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add constant '%s'", n->output[0]);
            }
            return cx_ox_define(L, n->output[0], id, idx, 0);
        }
        for (int j = 0; j < 3; j++)
            if (from_input_values(L, c.in[j]))
                return cx_ox_nfail(&c, CATTR_ERR_UNSUPPORTED, "input '%s' is computed from an input's values (only shapes "
                                                        "and constants give a range)", n->input[j]);
        nin = 3;
        break;
    }
    case CG_PAD: { /* pads (and the constant, the axes) are inputs from opset 11, attributes before */
        const Onnx__AttributeProto *ap = cx_ox_attr_find(&c, "mode");
        const char *mode = ap && ap->s.data ? (const char *)ap->s.data : "constant";
        size_t len = ap ? ap->s.len : 8;
        if (len == 8 && !strncmp(mode, "constant", 8)) a.index = 0;
        else if (len == 7 && !strncmp(mode, "reflect", 7)) a.index = 1;
        else if (len == 4 && !strncmp(mode, "edge", 4)) a.index = 2;
        else return cx_ox_nfail(&c, CATTR_ERR_UNSUPPORTED, "mode '%.*s' (expected constant, reflect or edge)", (int)len, mode);
        a.alpha = 0;
        int np = -1;
        if (L->opset >= 11) {
            if (c.in[1] < 0) return cx_ox_nfail(&c, CATTR_ERR_FORMAT, "input pads is required");
            if (c.in[2] >= 0) CX_CHECK(cx_ox_fold_scalar(&c, 2, "constant_value", &a.alpha));
            if (c.in[3] >= 0) return cx_ox_nfail(&c, CATTR_ERR_UNSUPPORTED, "the axes input (opset 18): give pads for every dim");
            if (L->g->vals[c.in[1]].kind != CG_VAL_CONST && !from_input_values(L, c.in[1])) {
                nin = 2; /* pads computed from shapes: folded per call */
                break;
            }
            CX_CHECK(cx_ox_fold_ints(&c, 1, "pads", CG_MAX_INTS, a.ints, &np));
        } else {
            CX_CHECK(cx_ox_attr_ints(&c, "pads", CG_MAX_INTS, a.ints, &np));
            CX_CHECK(cx_ox_attr_float(&c, "value", 0, &a.alpha));
        }
        if (np < 0 || np % 2) return cx_ox_nfail(&c, CATTR_ERR_FORMAT, "pads must hold a begin and an end per dim");
        a.n_ints = np;
        break;
    }
    case CG_MAX: case CG_MIN:
        if (c.in[1] < 0) op = CG_IDENTITY; /* the one operand itself (input 1 absent or empty) */
        else nin = 2;
        break;
    case CG_SOFTMAX:
        CX_CHECK(cx_ox_attr_int(&c, "axis", L->opset >= 13 ? -1 : 1, &a.axis));
        a.index = L->opset < 13;
        break;
    case CG_CLIP:
        a.alpha = -INFINITY;
        a.beta = INFINITY;
        if (L->opset >= 11) {
            if (c.in[1] >= 0) CX_CHECK(cx_ox_fold_scalar(&c, 1, "min", &a.alpha));
            if (c.in[2] >= 0) CX_CHECK(cx_ox_fold_scalar(&c, 2, "max", &a.beta));
        } else {
            if (n->n_input > 1) return cx_ox_nfail(&c, CATTR_ERR_FORMAT, "takes one input before opset 11");
            CX_CHECK(cx_ox_attr_float(&c, "min", -INFINITY, &a.alpha));
            CX_CHECK(cx_ox_attr_float(&c, "max", INFINITY, &a.beta));
        }
        break;
    case CG_ADD: case CG_SUB: case CG_MUL: case CG_DIV: case CG_MATMUL: nin = 2; break;
    case CG_RESHAPE:
        if (L->g->vals[c.in[1]].kind == CG_VAL_CONST || from_input_values(L, c.in[1]))
            CX_CHECK(cx_ox_fold_ints(&c, 1, "shape", CG_MAX_INTS, a.ints, &a.n_ints));
        else
            nin = 2; /* computed from shapes: the planner folds it for each call's shapes */
        CX_CHECK(cx_ox_attr_flag(&c, "allowzero", &a.allowzero));
        break;
    case CG_SHAPE: {
        if (strcmp(n->op_type, "Size") == 0) { /* the number of elements: a Shape marked index 1 */
            a.index = 1;
            break;
        }
        int64_t lo = 0, hi = INT64_MAX;
        CX_CHECK(cx_ox_attr_int(&c, "start", 0, &lo));
        CX_CHECK(cx_ox_attr_int(&c, "end", INT64_MAX, &hi));
        a.ints[0] = lo;
        a.n_ints = 1;
        if (hi != INT64_MAX) a.ints[a.n_ints++] = hi;
        break;
    }
    case CG_EQUAL: { /* Equal and the other comparisons and logical ops: one op, the relation in index */
        static const char *const rel[CX_CMP_COUNT] = {"Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual",
                                                      "And", "Or", "Xor"};
        for (int k = 0; k < CX_CMP_COUNT; k++)
            if (strcmp(n->op_type, rel[k]) == 0) a.index = k;
        nin = 2;
        break;
    }
    case OP_NOT: { /* Not(x) = Equal(x, 0) */
        char nm[200];
        snprintf(nm, sizeof nm, "%s.zero", c.label);
        int zv = cx_ox_scalar_const(L->g, nm, CATTR_INT64, 0);
        if (zv < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        op = CG_EQUAL;
        c.in[1] = zv;
        nin = 2;
        break;
    }
    case CG_WHERE: nin = 3; break;
    case CG_EXPAND: case CG_CONSTANT_OF_SHAPE: case CG_TILE: { /* the shape (Tile: the repeats): a constant, or
                                                                * computed from shapes (folded per call) */
        int si = sp->op == CG_CONSTANT_OF_SHAPE ? 0 : 1;
        if (sp->op == CG_CONSTANT_OF_SHAPE) {
            const Onnx__AttributeProto *vp = cx_ox_attr_find(&c, "value");
            a.alpha = 0;
            if (vp) {
                if (!vp->t) return cx_ox_nfail(&c, CATTR_ERR_FORMAT, "attribute 'value' must be a tensor");
                cattr_tensor *vt = NULL;
                CX_CHECK(cx_ox_tensor_from_proto(vp->t, "value", &vt));
                a.alpha = vt->numel > 0 ? cx_tensor_get(vt, 0) : 0;
                a.index = vt->dtype == CATTR_INT64;
                cattr_tensor_free(vt);
            }
        }
        if (L->g->vals[c.in[si]].kind == CG_VAL_CONST || from_input_values(L, c.in[si])) {
            CX_CHECK(cx_ox_fold_ints(&c, si, sp->op == CG_TILE ? "repeats" : "shape", CG_MAX_INTS, a.ints, &a.n_ints));
            nin = si;
        } else {
            nin = si + 1;
        }
        break;
    }
    case CG_CAST: {
        int64_t to = 0;
        CX_CHECK(cx_ox_attr_int(&c, "to", 0, &to));
        if (to == 7 || to == 6 || to == 5 || to == 3 || to == 2 || to == 4 || to == 12 || to == 13 || to == 9)
            a.index = 1; /* integers and booleans: int64 */
        else if (to == 1 || to == 11 || to == 10 || to == 16)
            a.index = 0; /* floating point: the call's float dtype */
        else
            return cx_ox_nfail(&c, CATTR_ERR_UNSUPPORTED, "cast to ONNX type %lld", (long long)to);
        break;
    }
    case CG_FLATTEN: CX_CHECK(cx_ox_attr_int(&c, "axis", 1, &a.axis)); break;
    case CG_CONCAT:
        if (!cx_ox_attr_find(&c, "axis")) return cx_ox_nfail(&c, CATTR_ERR_FORMAT, "attribute 'axis' is required");
        CX_CHECK(cx_ox_attr_int(&c, "axis", 0, &a.axis));
        nin = (int)n->n_input;
        break;
    case CG_UNSQUEEZE: CX_CHECK(axes_attr(&c, &a, true)); break;
    case CG_SQUEEZE: CX_CHECK(axes_attr(&c, &a, false)); break;
    case CG_REDUCE_SUM: case CG_REDUCE_MEAN: case CG_REDUCE_MAX: case CG_REDUCE_MIN: case OP_REDUCE_L2: {
        /* axes: an input from opset 13 (ReduceSum) or 18 (the others) */
        int na = -1;
        if (L->opset >= (sp->op == CG_REDUCE_SUM ? 13 : 18)) {
            if (c.in[1] >= 0) CX_CHECK(cx_ox_fold_ints(&c, 1, "axes", CG_MAX_INTS, a.ints, &na));
        } else {
            if (n->n_input > 1) return cx_ox_nfail(&c, CATTR_ERR_FORMAT, "takes its axes as an attribute in opset %d", L->opset);
            CX_CHECK(cx_ox_attr_ints(&c, "axes", CG_MAX_INTS, a.ints, &na));
        }
        a.n_ints = na < 0 ? 0 : na;
        CX_CHECK(cx_ox_attr_int(&c, "keepdims", 1, &v));
        a.index = v != 0;
        CX_CHECK(cx_ox_attr_int(&c, "noop_with_empty_axes", 0, &v));
        if (v != 0 && a.n_ints == 0) op = CG_IDENTITY; /* no axes: the input itself */
        if (sp->op == OP_REDUCE_L2 && op != CG_IDENTITY) { /* sqrt(ReduceSum(X * X)) */
            char nm[200];
            snprintf(nm, sizeof nm, "%s:squared", c.label);
            int sq = cg_add_node(L->g, CG_MUL, nm, (int[]){c.in[0], c.in[0]}, 2, NULL, nm);
            snprintf(nm, sizeof nm, "%s:sum", c.label);
            int sm = sq < 0 ? -1 : cg_add_node(L->g, CG_REDUCE_SUM, nm, &sq, 1, &a, nm);
            if (sm < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add node '%s'", c.label);
            c.in[0] = sm;
            op = CG_SQRT;
            a = cg_attrs_default();
        }
        break;
    }
    case CG_TRANSPOSE:
        CX_CHECK(cx_ox_attr_ints(&c, "perm", CG_MAX_INTS, a.ints, &a.n_ints));
        if (a.n_ints < 0) a.n_ints = 0;
        break;
    case CG_GATHER: {
        const cg_value *ix = &L->g->vals[c.in[1]];
        if (ix->kind == CG_VAL_CONST && ix->data->dtype != CATTR_INT64)
            return cx_ox_nfail(&c, CATTR_ERR_FORMAT, "indices '%s' must be integers", n->input[1]);
        CX_CHECK(cx_ox_attr_int(&c, "axis", 0, &a.axis));
        nin = 2;
        break;
    }
    case CG_SLICE:
        if (L->opset >= 10 && (c.in[1] < 0 || c.in[2] < 0))
            return cx_ox_nfail(&c, CATTR_ERR_FORMAT, "inputs starts and ends are required");
        if (L->opset < 10 && n->n_input > 1) return cx_ox_nfail(&c, CATTR_ERR_FORMAT, "takes one input before opset 10");
        if (L->opset >= 10) { /* starts, ends, axes, steps computed from shapes: folded by the planner per call */
            bool computed = false;
            for (int j = 1; j <= 4; j++)
                computed |= c.in[j] >= 0 && L->g->vals[c.in[j]].kind != CG_VAL_CONST && !from_input_values(L, c.in[j]);
            if (computed) {
                nin = (int)n->n_input;
                break;
            }
        }
        CX_CHECK(slice_attrs(&c, &a));
        break;
    case CG_BATCHNORM:
        CX_CHECK(cx_ox_attr_float(&c, "epsilon", 1e-5, &a.alpha));
        CX_CHECK(cx_ox_attr_int(&c, "training_mode", 0, &v));
        if (v != 0) return cx_ox_nfail(&c, CATTR_ERR_UNSUPPORTED, "training_mode=1 is not supported (inference only)");
        CX_CHECK(cx_ox_attr_int(&c, "spatial", 1, &v));
        if (v != 1) return cx_ox_nfail(&c, CATTR_ERR_UNSUPPORTED, "spatial=%lld is not supported", (long long)v);
        nin = 5;
        break;
    case OP_DROPOUT:
        if (c.in[2] >= 0) {
            double train = 1;
            if (L->g->vals[c.in[2]].kind == CG_VAL_CONST) CX_CHECK(cx_ox_fold_scalar(&c, 2, "training_mode", &train));
            double ratio = 0.5; /* a ratio of 0 drops nothing, in training mode too (torchvision's Swin exports so) */
            if (c.in[1] >= 0 && L->g->vals[c.in[1]].kind == CG_VAL_CONST) CX_CHECK(cx_ox_fold_scalar(&c, 1, "ratio", &ratio));
            if (train != 0 && ratio != 0)
                return cx_ox_nfail(&c, CATTR_ERR_UNSUPPORTED, "training_mode must be a constant false (or the ratio 0)");
        }
        break;
    default: break; /* unary ops without attributes */
    }
    int in[CG_MAX_IN];
    for (int i = 0; i < nin; i++) in[i] = c.in[i];
    int out = cg_add_node(L->g, op, c.label, in, nin, &a, n->output[0]);
    if (out < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add node '%s'", c.label);
    CX_CHECK(cx_ox_define(L, n->output[0], out, idx, 0));
    for (size_t k = 1; k < n->n_output; k++)
        if (n->output[k] && *n->output[k]) CX_CHECK(cx_ox_define(L, n->output[k], -1, idx, (int)k));
    return CATTR_OK;
}
