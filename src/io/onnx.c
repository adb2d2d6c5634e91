/* onnx.c - ONNX ModelProto -> cg_graph importer (see onnx.h for the op mapping and the error contract).
 *
 * One pass over the protobuf message unpacked by protobuf-c: initializers become constants, graph inputs become
 * inputs, nodes are converted in file order (so a node may only use values defined before it), graph outputs are
 * resolved last. A hash table maps every ONNX value name to its value id, or records that it is a secondary node
 * output (which cattr does not import) so that a use of it can be reported precisely.
 */
#define _POSIX_C_SOURCE 200809L
#include "io/onnx.h"
#include "ops/elementwise.h"

#include "onnx.pb-c.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "onnx.c copies little-endian raw_data with memcpy: a big-endian host needs byte swapping here"
#endif

#define STR(s) ((s) ? (s) : "")
#define MAX_SLICE_AXES (CG_MAX_INTS / 4)

/* ---- loader state and the name table ------------------------------------------------------------------------ */

/* val >= 0: the value id of `key`; val < 0: `key` is output `slot` (> 0) of ONNX node `node`, not imported. */
typedef struct name_ent {
    const char *key; /* borrowed from the unpacked message */
    int val, node, slot;
    const Onnx__GraphProto *gp; /* the graph (the model's, or an If's branch) whose node `node` is */
    int depth;                  /* the If branch depth it was defined at (0: the model's graph) */
} name_ent;

/* A name table entry as it was before a branch defined it (restored when the branch's scope ends). */
typedef struct name_undo {
    name_ent *slot;
    name_ent old;
} name_undo;

/* val of a name whose branch has ended (its key stays, keeping probe sequences intact) */
#define OUT_OF_SCOPE INT32_MIN

typedef struct loader {
    const Onnx__GraphProto *gp; /* the graph being converted: the model's, or an If's branch */
    int depth;                  /* If branches being converted */
    name_undo *undo;            /* names defined inside branches, to restore when each ends */
    const cx_onnx_info *info;   /* the graph inputs read so far (their dtypes) */
    size_t n_undo, cap_undo;
    int opset;
    cg_graph *g;
    name_ent *tab;
    size_t cap;       /* power of two, more than twice the number of names */
    uint8_t *fiv;     /* per value: from_input_values's answer, 0 not yet known, 2 no, 3 yes */
    size_t cap_fiv;
} loader;

static name_ent *tab_slot(const loader *L, const char *key) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) h = (h ^ *p) * 1099511628211ull;
    size_t i = (size_t)h & (L->cap - 1);
    while (L->tab[i].key && strcmp(L->tab[i].key, key) != 0) i = (i + 1) & (L->cap - 1);
    return &L->tab[i];
}

/* The entry of a name in scope, or NULL. */
static const name_ent *find(const loader *L, const char *key) {
    const name_ent *e = tab_slot(L, key);
    return e->key && e->val != OUT_OF_SCOPE ? e : NULL;
}

/* Defines `name`. Inside an If branch a name may shadow one of an enclosing graph; what the branch defines goes out
 * of scope when it ends (scope_end). */
static cattr_status define(loader *L, const char *name, int val, int node, int slot) {
    name_ent *e = tab_slot(L, name);
    bool in_scope = e->key && e->val != OUT_OF_SCOPE;
    if (in_scope && (L->depth == 0 || e->depth >= L->depth))
        return cx_fail(CATTR_ERR_FORMAT, "value '%s' is defined more than once", name);
    if (L->depth > 0) {
        if (L->n_undo == L->cap_undo) {
            size_t cap = L->cap_undo ? 2 * L->cap_undo : 64;
            name_undo *u = realloc(L->undo, cap * sizeof *u);
            if (!u) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            L->undo = u;
            L->cap_undo = cap;
        }
        L->undo[L->n_undo++] = (name_undo){e, e->key ? *e : (name_ent){name, OUT_OF_SCOPE, 0, 0, NULL, 0}};
    }
    *e = (name_ent){name, val, node, slot, L->gp, L->depth};
    return CATTR_OK;
}

/* Ends the scope of the names defined since the undo log held `mark` entries. */
static void scope_end(loader *L, size_t mark) {
    while (L->n_undo > mark) {
        name_undo *u = &L->undo[--L->n_undo];
        *u->slot = u->old;
    }
}

/* "<name>" or, for a node without one, "<op_type>_<index>". */
static const char *node_label(const Onnx__NodeProto *n, int idx, char *buf, size_t size) {
    if (n->name && *n->name) return n->name;
    snprintf(buf, size, "%s_%d", STR(n->op_type), idx);
    return buf;
}

/* ---- tensors ------------------------------------------------------------------------------------------------ */

static const char *onnx_type_name(int t) {
    static const char *const names[] = {"UNDEFINED", "FLOAT",  "UINT8",  "INT8",   "UINT16",    "INT16",
                                        "INT32",     "INT64",  "STRING", "BOOL",   "FLOAT16",   "DOUBLE",
                                        "UINT32",    "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16"};
    return t >= 0 && t < (int)CX_ARRAY_LEN(names) ? names[t] : "an unknown type";
}

/* How an ONNX element type is stored and what cattr makes of it. */
typedef struct elem_kind {
    cattr_dtype dtype;
    int raw_size;   /* bytes per element in raw_data */
    bool is_signed; /* for the integer widening */
} elem_kind;

static bool elem_kind_of(int t, elem_kind *k) {
    switch (t) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: *k = (elem_kind){CATTR_FLOAT32, 4, true}; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: *k = (elem_kind){CATTR_FLOAT64, 8, true}; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: *k = (elem_kind){CATTR_INT64, 8, true}; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: *k = (elem_kind){CATTR_INT64, 4, true}; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16: *k = (elem_kind){CATTR_INT64, 2, true}; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: *k = (elem_kind){CATTR_INT64, 1, true}; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32: *k = (elem_kind){CATTR_INT64, 4, false}; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16: *k = (elem_kind){CATTR_INT64, 2, false}; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: *k = (elem_kind){CATTR_INT64, 1, false}; return true;
    default: return false;
    }
}

/* Converts a TensorProto to a new cattr tensor; `name` is for messages. */
static cattr_status tensor_from_proto(const Onnx__TensorProto *tp, const char *name, cattr_tensor **out) {
    *out = NULL;
    if ((tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) ||
        tp->n_external_data)
        return cx_fail(CATTR_ERR_UNSUPPORTED,
                       "tensor '%s': external data is not supported (save the model with its weights embedded)", name);
    if (tp->segment) return cx_fail(CATTR_ERR_UNSUPPORTED, "tensor '%s': segmented tensors are not supported", name);
    if (tp->n_dims > CATTR_MAX_DIMS)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "tensor '%s' has %zu dimensions, at most %d are supported", name,
                       tp->n_dims, CATTR_MAX_DIMS);
    elem_kind k;
    if (!elem_kind_of(tp->data_type, &k))
        return cx_fail(CATTR_ERR_UNSUPPORTED, "tensor '%s': element type %s is not supported", name,
                       onnx_type_name(tp->data_type));
    int nd = (int)tp->n_dims;
    int64_t shape[CATTR_MAX_DIMS], numel = 1;
    for (int i = 0; i < nd; i++) {
        shape[i] = tp->dims[i];
        if (shape[i] < 0) return cx_fail(CATTR_ERR_FORMAT, "tensor '%s' has a negative dimension", name);
        if (shape[i] && numel > ((int64_t)1 << 56) / shape[i])
            return cx_fail(CATTR_ERR_FORMAT, "tensor '%s' is impossibly large", name);
        numel *= shape[i];
    }
    char sbuf[160];
    cx_shape_str(nd, shape, sbuf, sizeof sbuf);
    size_t raw_len = tp->raw_data.len;
    if (tp->has_raw_data || raw_len) {
        if (raw_len != (size_t)numel * (size_t)k.raw_size)
            return cx_fail(CATTR_ERR_FORMAT, "tensor '%s': raw_data holds %zu bytes, shape %s of %s needs %lld", name,
                           raw_len, sbuf, onnx_type_name(tp->data_type), (long long)numel * k.raw_size);
    } else {
        size_t count;
        switch (tp->data_type) {
        case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: count = tp->n_float_data; break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: count = tp->n_double_data; break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: count = tp->n_int64_data; break;
        case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32: count = tp->n_uint64_data; break;
        default: count = tp->n_int32_data; break;
        }
        if (count != (size_t)numel)
            return cx_fail(CATTR_ERR_FORMAT, "tensor '%s' holds %zu values, shape %s needs %lld", name, count, sbuf,
                           (long long)numel);
    }
    cattr_tensor *t = cx_tensor_alloc(k.dtype, nd, shape);
    if (!t) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot allocate tensor '%s' %s", name, sbuf);
    size_t bytes = (size_t)numel * cattr_dtype_size(k.dtype);
    int64_t *i64 = t->data;
    if (tp->has_raw_data || raw_len) {
        const uint8_t *src = tp->raw_data.data;
        if ((size_t)k.raw_size == cattr_dtype_size(k.dtype)) {
            if (bytes) memcpy(t->data, src, bytes);
        } else {
            for (int64_t i = 0; i < numel; i++, src += k.raw_size) { /* little-endian integer widening */
                uint64_t u = 0;
                for (int b = 0; b < k.raw_size; b++) u |= (uint64_t)src[b] << (8 * b);
                int shift = 64 - 8 * k.raw_size;
                i64[i] = k.is_signed ? (int64_t)(u << shift) >> shift : (int64_t)u;
            }
        }
    } else if (tp->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT) {
        if (bytes) memcpy(t->data, tp->float_data, bytes);
    } else if (tp->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE) {
        if (bytes) memcpy(t->data, tp->double_data, bytes);
    } else if (tp->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__INT64) {
        if (bytes) memcpy(t->data, tp->int64_data, bytes);
    } else if (tp->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__UINT32) {
        for (int64_t i = 0; i < numel; i++) i64[i] = (int64_t)tp->uint64_data[i];
    } else {
        for (int64_t i = 0; i < numel; i++) i64[i] = tp->int32_data[i];
    }
    *out = t;
    return CATTR_OK;
}

/* ---- per-node context: messages, attributes, folded inputs --------------------------------------------------- */

typedef struct nctx {
    loader *L;
    const Onnx__NodeProto *n;
    int idx;
    const char *label;
    int in[CG_MAX_IN]; /* value id of each ONNX input; -1 when absent (empty name or past the end) */
} nctx;

static cattr_status nfail(const nctx *c, cattr_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static cattr_status nfail(const nctx *c, cattr_status st, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return cx_fail(st, "node '%s' (op %s): %s", c->label, c->n->op_type, msg);
}

static const Onnx__AttributeProto *attr_find(const nctx *c, const char *name) {
    for (size_t i = 0; i < c->n->n_attribute; i++)
        if (strcmp(STR(c->n->attribute[i]->name), name) == 0) return c->n->attribute[i];
    return NULL;
}

static cattr_status attr_typed(const nctx *c, const char *name, Onnx__AttributeProto__AttributeType type,
                               const char *what, const Onnx__AttributeProto **out) {
    *out = attr_find(c, name);
    if (*out && (*out)->type != type) return nfail(c, CATTR_ERR_FORMAT, "attribute '%s' must be %s", name, what);
    return CATTR_OK;
}

static cattr_status attr_int(const nctx *c, const char *name, int64_t def, int64_t *v) {
    const Onnx__AttributeProto *a;
    CX_CHECK(attr_typed(c, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, "an int", &a));
    *v = a ? a->i : def;
    return CATTR_OK;
}

/* A boolean int attribute (default 0); any non-zero value means true, as in onnxruntime. */
static cattr_status attr_flag(const nctx *c, const char *name, int *v) {
    int64_t x;
    CX_CHECK(attr_int(c, name, 0, &x));
    *v = x != 0;
    return CATTR_OK;
}

static cattr_status attr_float(const nctx *c, const char *name, double def, double *v) {
    const Onnx__AttributeProto *a;
    CX_CHECK(attr_typed(c, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT, "a float", &a));
    *v = a ? a->f : def;
    return CATTR_OK;
}

/* Reads an INTS attribute into dst (at most max values); *n = -1 when the attribute is absent. */
static cattr_status attr_ints(const nctx *c, const char *name, int max, int64_t *dst, int *n) {
    const Onnx__AttributeProto *a;
    CX_CHECK(attr_typed(c, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS, "a list of ints", &a));
    *n = -1;
    if (!a) return CATTR_OK;
    if (a->n_ints > (size_t)max)
        return nfail(c, CATTR_ERR_UNSUPPORTED, "attribute '%s' has %zu values, at most %d are supported", name,
                     a->n_ints, max);
    if (a->n_ints) memcpy(dst, a->ints, a->n_ints * sizeof *dst);
    *n = (int)a->n_ints;
    return CATTR_OK;
}

/* The constant tensor behind ONNX input `pos`, which cattr folds into attributes. */
static cattr_status need_const(const nctx *c, int pos, const char *role, const cattr_tensor **t) {
    const cg_value *v = &c->L->g->vals[c->in[pos]];
    if (v->kind != CG_VAL_CONST)
        return nfail(c, CATTR_ERR_UNSUPPORTED,
                     "input '%s' (%s) is not a constant: cattr folds it at import time and needs an initializer or "
                     "a Constant node output",
                     c->n->input[pos], role);
    *t = v->data;
    return CATTR_OK;
}

static cattr_status fold_ints(const nctx *c, int pos, const char *role, int max, int64_t *dst, int *n) {
    const cattr_tensor *t = NULL;
    CX_CHECK(need_const(c, pos, role, &t));
    if (t->dtype != CATTR_INT64 || t->ndim > 1)
        return nfail(c, CATTR_ERR_FORMAT, "input '%s' (%s) must be a 1-D integer tensor", c->n->input[pos], role);
    if (t->numel > max)
        return nfail(c, CATTR_ERR_UNSUPPORTED, "input '%s' (%s) has %lld values, at most %d are supported",
                     c->n->input[pos], role, (long long)t->numel, max);
    if (t->numel) memcpy(dst, t->data, (size_t)t->numel * sizeof *dst);
    *n = (int)t->numel;
    return CATTR_OK;
}

static cattr_status fold_scalar(const nctx *c, int pos, const char *role, double *v) {
    const cattr_tensor *t = NULL;
    CX_CHECK(need_const(c, pos, role, &t));
    if (t->numel != 1) return nfail(c, CATTR_ERR_FORMAT, "input '%s' (%s) must be a scalar", c->n->input[pos], role);
    *v = cx_tensor_get(t, 0);
    return CATTR_OK;
}

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
static cattr_status spatial_attrs(const nctx *c, cg_attrs *a, const int64_t *ks, int nk, bool dilations_ok) {
    if (nk < 1 || nk > CG_MAX_SP)
        return nfail(c, CATTR_ERR_UNSUPPORTED, "%d spatial dimensions (1 to %d are supported)", nk, CG_MAX_SP);
    a->nsp = nk;
    int n;
    int64_t v[2 * CG_MAX_SP];
    static const char *const names[3] = {"strides", "pads", "dilations"};
    for (int k = 0; k < 3; k++) {
        int want = k == 1 ? 2 * nk : nk;
        CX_CHECK(attr_ints(c, names[k], 2 * CG_MAX_SP, v, &n));
        if (n < 0) continue;
        if (n != want)
            return nfail(c, CATTR_ERR_FORMAT, "attribute '%s' has %d values, expected %d", names[k], n, want);
        for (int i = 0; i < n; i++) {
            if (v[i] < (k == 1 ? 0 : 1))
                return nfail(c, CATTR_ERR_FORMAT, "attribute '%s' has an invalid value %lld", names[k],
                             (long long)v[i]);
            if (k == 0) a->stride[i] = v[i];
            if (k == 1) a->pad[i] = v[i];
            if (k == 2) a->dilation[i] = v[i];
        }
        if (k == 2 && !dilations_ok)
            for (int i = 0; i < n; i++)
                if (v[i] != 1) return nfail(c, CATTR_ERR_UNSUPPORTED, "dilations other than 1 are not supported");
    }
    for (int i = 0; i < nk; i++) {
        if (ks[i] < 1) return nfail(c, CATTR_ERR_FORMAT, "kernel size %lld is invalid", (long long)ks[i]);
        a->kernel[i] = ks[i];
    }
    const Onnx__AttributeProto *ap;
    CX_CHECK(attr_typed(c, "auto_pad", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, "a string", &ap));
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
            return nfail(c, CATTR_ERR_UNSUPPORTED, "auto_pad '%s' is not supported (NOTSET, VALID, SAME_UPPER or "
                                                   "SAME_LOWER)", mode);
        }
    }
    return CATTR_OK;
}

/* The pools' kernel_shape, which is required. */
static cattr_status pool_kernel(const nctx *c, int64_t *ks, int *nk) {
    CX_CHECK(attr_ints(c, "kernel_shape", CG_MAX_SP, ks, nk));
    if (*nk < 0) return nfail(c, CATTR_ERR_FORMAT, "attribute 'kernel_shape' is required");
    return CATTR_OK;
}

/* Squeeze / Unsqueeze axes: an input from opset 13, an attribute before. */
static cattr_status axes_attr(const nctx *c, cg_attrs *a, bool required) {
    int n = -1;
    if (c->L->opset >= 13) {
        if (c->in[1] >= 0) CX_CHECK(fold_ints(c, 1, "axes", CG_MAX_INTS, a->ints, &n));
    } else {
        CX_CHECK(attr_ints(c, "axes", CG_MAX_INTS, a->ints, &n));
    }
    if (n < 0 && required) return nfail(c, CATTR_ERR_FORMAT, "axes are required");
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
            if (c->in[1 + k] >= 0) CX_CHECK(fold_ints(c, 1 + k, roles[k], MAX_SLICE_AXES, v[k], &cnt[k]));
        } else if (k < 3) {
            CX_CHECK(attr_ints(c, roles[k], MAX_SLICE_AXES, v[k], &cnt[k]));
        }
    }
    int n = cnt[0];
    if (n < 0 || cnt[1] < 0) return nfail(c, CATTR_ERR_FORMAT, "starts and ends are required");
    for (int k = 1; k < 4; k++) {
        if (cnt[k] >= 0 && cnt[k] != n)
            return nfail(c, CATTR_ERR_FORMAT, "%s has %d values but starts has %d", roles[k], cnt[k], n);
    }
    for (int i = 0; i < n; i++) {
        if (cnt[3] >= 0 && v[3][i] == 0) return nfail(c, CATTR_ERR_FORMAT, "a step of 0 is invalid");
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
    if (c->n->n_attribute != 1) return nfail(c, CATTR_ERR_FORMAT, "exactly one value attribute is required");
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
        return nfail(c, CATTR_ERR_FORMAT, "attribute '%s' has the wrong type", an);
    if (k == 0) {
        cattr_status st = tensor_from_proto(ap->t, out, t);
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
static cattr_status resolve_input(const nctx *c, const char *name, int *id) {
    const loader *L = c->L;
    const name_ent *e = find(L, name);
    char buf[160];
    if (e && e->val >= 0) {
        *id = e->val;
        return CATTR_OK;
    }
    if (e) {
        const Onnx__NodeProto *p = e->gp->node[e->node];
        return nfail(c, CATTR_ERR_UNSUPPORTED,
                     "input '%s' is output %d of node '%s' (op %s); only output 0 of a node is supported", name, e->slot,
                     node_label(p, e->node, buf, sizeof buf), p->op_type);
    }
    for (size_t j = (size_t)c->idx; j < L->gp->n_node; j++)
        for (size_t k = 0; k < L->gp->node[j]->n_output; k++)
            if (strcmp(STR(L->gp->node[j]->output[k]), name) == 0)
                return nfail(c, CATTR_ERR_FORMAT,
                             "input '%s' is produced by the later node '%s' (nodes must be in topological order)", name,
                             node_label(L->gp->node[j], (int)j, buf, sizeof buf));
    return nfail(c, CATTR_ERR_FORMAT, "input '%s' is not defined by any earlier node, initializer or graph input",
                 name);
}

/* A scalar constant of the given dtype and value named `name` (the graph owns it); its value id, or -1 when out of
 * memory. */
static int scalar_const(cg_graph *g, const char *name, cattr_dtype dt, double v) {
    int64_t one = 1;
    cattr_tensor *t = cx_tensor_alloc(dt, 0, &one);
    if (!t) return -1;
    cx_tensor_set(t, 0, v);
    int id = cg_add_const(g, name, t, true);
    if (id < 0) cattr_tensor_free(t);
    return id;
}

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
    int id = k->failed ? -1 : scalar_const(k->c->L->g, nm, dt, v);
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
        if (c->in[1] >= 0) CX_CHECK(fold_ints(c, 1, "axes", CG_MAX_INTS, a->ints, &na));
    } else {
        if (c->n->n_input > 1) return nfail(c, CATTR_ERR_FORMAT, "takes its axes as an attribute in opset %d", c->L->opset);
        CX_CHECK(attr_ints(c, "axes", CG_MAX_INTS, a->ints, &na));
    }
    a->n_ints = na < 0 ? 0 : na;
    CX_CHECK(attr_int(c, "keepdims", 1, &v));
    a->index = v != 0;
    CX_CHECK(attr_int(c, "noop_with_empty_axes", 0, &v));
    *noop = v != 0 && a->n_ints == 0;
    return CATTR_OK;
}

/* Softsign x / (1 + |x|); Celu alpha * Elu(x / alpha); Mish x * tanh(softplus(x)); ThresholdedRelu x where x > alpha,
 * else 0; ReduceSumSquare, ReduceL1 and ReduceLogSumExp (max + log(sum(exp(x - max))), the max kept); DepthToSpace (DCR
 * and CRD) and SpaceToDepth as Reshape, Transpose, Reshape over shapes computed from the input's. */
static cattr_status composed(nctx *c, int idx) {
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
        CX_CHECK(attr_float(c, "alpha", 1.0, &alpha));
        if (!strcmp(t, "Celu")) {
            if (!(alpha != 0)) return nfail(c, CATTR_ERR_FORMAT, "alpha must not be 0");
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
        CX_CHECK(attr_int(c, "blocksize", 0, &b));
        if (b < 1 || b > (1 << 20)) return nfail(c, CATTR_ERR_FORMAT, "blocksize %lld is invalid", (long long)b);
        bool crd = false;
        const Onnx__AttributeProto *mp;
        CX_CHECK(attr_typed(c, "mode", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, "a string", &mp));
        if (mp) {
            bool dcr = mp->s.len == 3 && !memcmp(mp->s.data, "DCR", 3);
            crd = mp->s.len == 3 && !memcmp(mp->s.data, "CRD", 3);
            if (!dcr && !crd)
                return nfail(c, CATTR_ERR_UNSUPPORTED, "mode '%.*s' (expected DCR or CRD)", (int)mp->s.len,
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
            if (mp) return nfail(c, CATTR_ERR_FORMAT, "SpaceToDepth has no mode");
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
    return define(c->L, out, y, idx, 0);
}

/* LayerNormalization (opset 17) as the ops of its definition: mean = ReduceMean(X over dims axis..), D = X - mean,
 * var = ReduceMean(D * D), Y = D / Sqrt(var + epsilon) * Scale + B: the form older exporters write out, so both
 * forms attribute alike. Only the first output (the mean and inverse deviation outputs are training outputs). */
static cattr_status layer_norm(nctx *c, int idx) {
    loader *L = c->L;
    const Onnx__NodeProto *n = L->gp->node[idx];
    int64_t axis = -1, stash = 1;
    double eps = 1e-5;
    CX_CHECK(attr_int(c, "axis", -1, &axis));
    CX_CHECK(attr_float(c, "epsilon", 1e-5, &eps));
    CX_CHECK(attr_int(c, "stash_type", 1, &stash));
    for (size_t k = 1; k < n->n_output; k++)
        if (n->output[k] && *n->output[k])
            return nfail(c, CATTR_ERR_UNSUPPORTED, "output %zu (mean / inverse std, training outputs) is not supported", k);
    if (axis >= 0) /* the dims from axis to the last: counted from the end, the graph stays rank-polymorphic */
        return nfail(c, CATTR_ERR_UNSUPPORTED, "axis %lld: only axes counted from the end (negative, as PyTorch's "
                                               "exporter writes them) are supported", (long long)axis);
    cg_attrs ra = cg_attrs_default();
    ra.index = 1; /* keepdims */
    for (int64_t d = axis; d < 0 && ra.n_ints < CG_MAX_INTS; d++) ra.ints[ra.n_ints++] = d;
    if (ra.n_ints < 1 || ra.n_ints > CG_MAX_INTS) return nfail(c, CATTR_ERR_FORMAT, "axis %lld is out of range", (long long)axis);
    char nm[200];
    snprintf(nm, sizeof nm, "%s.epsilon", c->label);
    int ev = scalar_const(L->g, nm, CATTR_FLOAT32, (float)eps);
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
    return define(L, n->output[0], out, idx, 0);
}

/* A Concat of more inputs than a node holds (DenseNet's blocks): a chain of Concats along the same axis, each taking
 * the previous result and the next inputs; the same values in the same order. */
static cattr_status wide_concat(nctx *c, int idx) {
    loader *L = c->L;
    const Onnx__NodeProto *n = L->gp->node[idx];
    if (!attr_find(c, "axis")) return nfail(c, CATTR_ERR_FORMAT, "attribute 'axis' is required");
    cg_attrs a = cg_attrs_default();
    CX_CHECK(attr_int(c, "axis", 0, &a.axis));
    int acc = -1, in[CG_MAX_IN], k = 0;
    size_t i = 0;
    char nm[200];
    while (i < n->n_input) {
        k = 0;
        if (acc >= 0) in[k++] = acc;
        for (; k < CG_MAX_IN - 1 && i < n->n_input; i++) { /* ConcatGrad reads the gradient and every input */
            if (!n->input[i] || !*n->input[i]) return nfail(c, CATTR_ERR_FORMAT, "required input %zu is empty", i);
            CX_CHECK(resolve_input(c, n->input[i], &in[k++]));
        }
        bool last = i >= n->n_input;
        snprintf(nm, sizeof nm, "%s:part%zu", c->label, i);
        acc = cg_add_node(L->g, CG_CONCAT, last ? c->label : nm, in, k, &a, last ? n->output[0] : nm);
        if (acc < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add node '%s'", c->label);
    }
    return define(L, n->output[0], acc, idx, 0);
}

/* LSTM and GRU (opsets 7 to 14+): one RNN node computing the states of every step, and the ONNX outputs as slices of
 * it: Y [T, D, B, H] the hidden states, Y_h [D, B, H] each direction's last (forward: step T-1, reverse: step 0),
 * Y_c the LSTM's last cell states. The default activations only, no clip, peepholes, sequence lengths or
 * input_forget, layout 0 (time first, as PyTorch's exporter writes). */
static cattr_status recurrent(nctx *c, int idx, bool gru) {
    loader *L = c->L;
    const Onnx__NodeProto *n = L->gp->node[idx];
    int64_t hidden = 0, v;
    CX_CHECK(attr_int(c, "hidden_size", 0, &hidden));
    if (hidden < 1 || hidden > ((int64_t)1 << 24))
        return nfail(c, CATTR_ERR_FORMAT, "attribute hidden_size must be between 1 and 2^24 (got %lld)", (long long)hidden);
    const Onnx__AttributeProto *at;
    CX_CHECK(attr_typed(c, "direction", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, "a string", &at));
    int dir = 0;
    if (at) {
        const char *d = (const char *)at->s.data;
        size_t dl = at->s.len;
        if (dl == 7 && memcmp(d, "forward", 7) == 0) dir = 0;
        else if (dl == 7 && memcmp(d, "reverse", 7) == 0) dir = 1;
        else if (dl == 13 && memcmp(d, "bidirectional", 13) == 0) dir = 2;
        else return nfail(c, CATTR_ERR_FORMAT, "direction must be forward, reverse or bidirectional");
    }
    CX_CHECK(attr_typed(c, "activations", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS, "a list of strings", &at));
    if (at) { /* the defaults written out are accepted: Sigmoid, Tanh(, Tanh) per direction */
        size_t per = gru ? 2 : 3;
        bool ok = at->n_strings == per * (dir == 2 ? 2 : 1);
        for (size_t i = 0; ok && i < at->n_strings; i++) {
            const char *want = i % per == 0 ? "Sigmoid" : "Tanh";
            ok = at->strings[i].len == strlen(want) && memcmp(at->strings[i].data, want, strlen(want)) == 0;
        }
        if (!ok) return nfail(c, CATTR_ERR_UNSUPPORTED, "only the default activations (%s) are supported",
                              gru ? "Sigmoid, Tanh" : "Sigmoid, Tanh, Tanh");
    }
    if (attr_find(c, "activation_alpha") || attr_find(c, "activation_beta"))
        return nfail(c, CATTR_ERR_UNSUPPORTED, "activation_alpha / activation_beta are not supported");
    if (attr_find(c, "clip")) return nfail(c, CATTR_ERR_UNSUPPORTED, "attribute clip is not supported");
    CX_CHECK(attr_int(c, "layout", 0, &v));
    if (v != 0)
        return nfail(c, CATTR_ERR_UNSUPPORTED, "layout=%lld is not supported (only layout 0, time first, as PyTorch's "
                                               "exporter writes)", (long long)v);
    CX_CHECK(attr_int(c, "input_forget", 0, &v));
    if (v != 0) return nfail(c, CATTR_ERR_UNSUPPORTED, "input_forget=1 is not supported");
    int64_t lbr = 0;
    if (gru) CX_CHECK(attr_int(c, "linear_before_reset", 0, &lbr));
    if (c->in[4] >= 0)
        return nfail(c, CATTR_ERR_UNSUPPORTED, "input sequence_lens is not supported (every sequence runs to the end)");
    if (!gru && c->in[7] >= 0) return nfail(c, CATTR_ERR_UNSUPPORTED, "peepholes (input P) are not supported");
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
        if (k == 2 && gru) return nfail(c, CATTR_ERR_FORMAT, "a GRU has two outputs");
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
        CX_CHECK(define(L, n->output[k], y, idx, (int)k));
    }
    return CATTR_OK;
}

/* PRelu(X, slope) = X * Where(X > 0, 1, slope): the values and the gradient of PyTorch's PReLU (slope broadcast
 * unidirectionally to X), a product DeepLift passes its gradient through as Captum's does for PReLU. */
static cattr_status prelu(nctx *c, int idx) {
    loader *L = c->L;
    const Onnx__NodeProto *n = L->gp->node[idx];
    cg_graph *g = L->g;
    char nm[200];
    snprintf(nm, sizeof nm, "%s.zero", c->label);
    int zv = scalar_const(g, nm, CATTR_FLOAT32, 0);
    snprintf(nm, sizeof nm, "%s.one", c->label);
    int ov = zv < 0 ? -1 : scalar_const(g, nm, CATTR_FLOAT32, 1);
    if (zv < 0 || ov < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cg_attrs ga = cg_attrs_default();
    ga.index = CX_CMP_GT;
    snprintf(nm, sizeof nm, "%s:positive", c->label);
    int pos = cg_add_node(g, CG_EQUAL, nm, (int[]){c->in[0], zv}, 2, &ga, nm);
    snprintf(nm, sizeof nm, "%s:slope", c->label);
    int sl = pos < 0 ? -1 : cg_add_node(g, CG_WHERE, nm, (int[]){pos, ov, c->in[1]}, 3, NULL, nm);
    int y = sl < 0 ? -1 : cg_add_node(g, CG_MUL, c->label, (int[]){c->in[0], sl}, 2, NULL, n->output[0]);
    if (y < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add node '%s'", c->label);
    return define(L, n->output[0], y, idx, 0);
}

/* Clip (opset 11+) whose min or max is computed by other nodes (not a constant): Max(x, min), then Min(., max), with
 * numpy broadcasting, as onnxruntime computes it; a constant bound stays an attribute of a Clip. */
static cattr_status clip_computed(nctx *c, int idx) {
    loader *L = c->L;
    const Onnx__NodeProto *n = L->gp->node[idx];
    cg_graph *g = L->g;
    cg_attrs a = cg_attrs_default();
    a.alpha = -INFINITY;
    a.beta = INFINITY;
    bool lo_const = c->in[1] < 0 || g->vals[c->in[1]].kind == CG_VAL_CONST;
    bool hi_const = c->in[2] < 0 || g->vals[c->in[2]].kind == CG_VAL_CONST;
    if (c->in[1] >= 0 && lo_const) CX_CHECK(fold_scalar(c, 1, "min", &a.alpha));
    if (c->in[2] >= 0 && hi_const) CX_CHECK(fold_scalar(c, 2, "max", &a.beta));
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
    return define(L, n->output[0], y, idx, 0);
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
static cattr_status conv_transpose(nctx *c, int idx) {
    loader *L = c->L;
    const Onnx__NodeProto *n = L->gp->node[idx];
    cg_graph *g = L->g;
    const cg_value *w = &g->vals[c->in[1]];
    if (w->kind != CG_VAL_CONST)
        return nfail(c, CATTR_ERR_UNSUPPORTED, "the weight '%s' must be a constant", n->input[1]);
    if (attr_find(c, "output_shape"))
        return nfail(c, CATTR_ERR_UNSUPPORTED, "attribute output_shape is not supported (give pads and output_padding)");
    int nsp = w->data->ndim - 2, nk = -1, np = -1;
    int64_t ks[CG_MAX_SP], opad[CG_MAX_SP] = {0};
    CX_CHECK(attr_ints(c, "kernel_shape", CG_MAX_SP, ks, &nk));
    if (nk < 0) {
        nk = nsp;
        for (int i = 0; i < nsp && i < CG_MAX_SP; i++) ks[i] = w->data->shape[2 + i];
    }
    if (nk != nsp) return nfail(c, CATTR_ERR_FORMAT, "kernel_shape has %d dims, the weight %d", nk, nsp);
    cg_attrs a = cg_attrs_default();
    CX_CHECK(spatial_attrs(c, &a, ks, nk, true));
    if (a.auto_pad)
        return nfail(c, CATTR_ERR_UNSUPPORTED, "auto_pad '%s' is not supported (export with explicit pads)",
                     a.auto_pad == 1 ? "SAME_UPPER" : "SAME_LOWER");
    CX_CHECK(attr_int(c, "group", 1, &a.group));
    if (a.group < 1) return nfail(c, CATTR_ERR_FORMAT, "group must be at least 1");
    CX_CHECK(attr_ints(c, "output_padding", CG_MAX_SP, opad, &np));
    const int64_t big = (int64_t)1 << 24; /* the output extent below stays far from overflowing */
    for (int i = 0; i < nsp; i++)
        if (ks[i] > big || a.stride[i] > big || a.dilation[i] > big || a.pad[i] > big || a.pad[nsp + i] > big ||
            opad[i] > big)
            return nfail(c, CATTR_ERR_FORMAT, "kernel, stride, dilation, pads or output_padding beyond 2^24");
    if (np >= 0 && np != nsp) return nfail(c, CATTR_ERR_FORMAT, "output_padding has %d values for %d dims", np, nsp);
    for (int i = 0; i < nsp; i++)
        if (opad[i] < 0 || (np > 0 && opad[i] >= (a.stride[i] > a.dilation[i] ? a.stride[i] : a.dilation[i])))
            return nfail(c, CATTR_ERR_FORMAT, "output_padding %lld is out of range", (long long)opad[i]);
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
    return define(L, n->output[0], y, idx, 0);
}

/* Einsum of two operands as one MatMul: each operand's letters are batch (in both operands and the output),
 * contracted (in both, not in the output), free (in one operand and the output) or summed away first (in one operand
 * only). With at most one contracted letter, A is laid out as [batch, A's free letters but its last, a 1 per B's free
 * letter but its last, A's last free letter, the contracted letter] and B as [batch, a 1 per A's free letter but its
 * last, B's free letters but its last, the contracted letter, B's last free letter] (a missing letter as a dim of 1),
 * the MatMul broadcasts, and the result is permuted to the output's letters. Repeated letters in an operand
 * (diagonals) and ellipses are refused. */
static cattr_status einsum(nctx *c, int idx) {
    loader *L = c->L;
    const Onnx__NodeProto *n = L->gp->node[idx];
    cg_graph *g = L->g;
    const Onnx__AttributeProto *ap;
    CX_CHECK(attr_typed(c, "equation", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, "a string", &ap));
    if (!ap) return nfail(c, CATTR_ERR_FORMAT, "attribute equation is required");
    char eq[128], ops[3][CATTR_MAX_DIMS + 1] = {"", "", ""};
    int len[3] = {0, 0, 0}, part = 0;
    bool arrow = false;
    if (ap->s.len >= sizeof eq) return nfail(c, CATTR_ERR_UNSUPPORTED, "equation too long");
    if (ap->s.len) memcpy(eq, ap->s.data, ap->s.len);
    eq[ap->s.len] = 0;
    for (const char *q = eq; *q; q++) {
        if (*q == ' ') continue;
        if (*q == ',' && part == 0) { part = 1; continue; }
        if (q[0] == '-' && q[1] == '>' && part == 1 && !arrow) { arrow = true; part = 2; q++; continue; }
        bool letter = (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z');
        if (!letter) return nfail(c, CATTR_ERR_UNSUPPORTED, "equation '%s': only letters, ',' and '->' (no ellipsis)", eq);
        if (len[part] >= CATTR_MAX_DIMS || strchr(ops[part], *q))
            return nfail(c, CATTR_ERR_UNSUPPORTED, "equation '%s': a letter repeated in one term (or too many dims)", eq);
        ops[part][len[part]++] = *q;
        ops[part][len[part]] = 0;
    }
    if (part < 1) return nfail(c, CATTR_ERR_FORMAT, "equation '%s' needs two operands", eq);
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
            return nfail(c, CATTR_ERR_FORMAT, "equation '%s': output letter '%c' is in no operand", eq, ops[2][i]);
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
                    return nfail(c, CATTR_ERR_UNSUPPORTED, "equation '%s': more than one contracted letter", eq);
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
    if (nb + ma + pb + 2 > CATTR_MAX_DIMS) return nfail(c, CATTR_ERR_UNSUPPORTED, "equation '%s': too many dims", eq);
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
    return define(L, n->output[0], y, idx, 0);
}

/* Split: output k is a Slice along the axis, of the given sizes; without sizes, of equal parts computed from the
 * input's shape when the call is planned (the last part smaller when the dim does not divide, as opset 18 says). */
static cattr_status split(nctx *c, int idx) {
    loader *L = c->L;
    const Onnx__NodeProto *n = L->gp->node[idx];
    cg_graph *g = L->g;
    int64_t axis = 0, sizes[CG_MAX_INTS], nout = (int64_t)n->n_output;
    int ns = -1;
    CX_CHECK(attr_int(c, "axis", 0, &axis));
    if (L->opset >= 13) {
        if (c->in[1] >= 0) CX_CHECK(fold_ints(c, 1, "split", CG_MAX_INTS, sizes, &ns));
    } else {
        CX_CHECK(attr_ints(c, "split", CG_MAX_INTS, sizes, &ns));
    }
    if (ns >= 0 && ns != nout)
        return nfail(c, CATTR_ERR_FORMAT, "%d split sizes for %lld outputs", ns, (long long)nout);
    for (int k = 0; k < ns; k++)
        if (sizes[k] < 0 || sizes[k] > ((int64_t)1 << 40))
            return nfail(c, CATTR_ERR_FORMAT, "split size %lld is out of range", (long long)sizes[k]);
    if (nout < 1 || nout > CG_MAX_INTS) return nfail(c, CATTR_ERR_UNSUPPORTED, "%lld outputs", (long long)nout);
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
        CX_CHECK(define(L, n->output[k], y, idx, (int)k));
    }
    return CATTR_OK;
}

static cattr_status convert_node(loader *L, int idx);
static cattr_status add_initializer(loader *L, const Onnx__TensorProto *tp, size_t i);

/* If branches nested deeper than this are refused (a file could nest them without limit). */
#define MAX_IF_DEPTH 16

/* If: the nodes of both branches are imported into the graph (their initializers as constants; they read the outer
 * graph's values by name), and each output of the If becomes a CG_IF choosing between the branches' outputs. The
 * planner folds the condition for the call's shapes and keeps only the branch taken (exec/plan.c). */
static cattr_status if_node(nctx *c, int idx) {
    loader *L = c->L;
    const Onnx__NodeProto *n = L->gp->node[idx];
    const char *names[2] = {"then_branch", "else_branch"};
    int outs[2][CG_MAX_INTS];
    if (n->n_output > CG_MAX_INTS) return nfail(c, CATTR_ERR_UNSUPPORTED, "%zu outputs, at most %d", n->n_output, CG_MAX_INTS);
    if (L->depth >= MAX_IF_DEPTH) return nfail(c, CATTR_ERR_UNSUPPORTED, "If branches nested more than %d deep", MAX_IF_DEPTH);
    for (int b = 0; b < 2; b++) {
        const Onnx__AttributeProto *a;
        CX_CHECK(attr_typed(c, names[b], ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH, "a graph", &a));
        const Onnx__GraphProto *bg = a ? a->g : NULL;
        if (!bg) return nfail(c, CATTR_ERR_FORMAT, "attribute '%s' (a graph) is missing", names[b]);
        if (bg->n_output != n->n_output)
            return nfail(c, CATTR_ERR_FORMAT, "%s has %zu outputs, the node %zu", names[b], bg->n_output, n->n_output);
        if (bg->n_sparse_initializer)
            return nfail(c, CATTR_ERR_UNSUPPORTED, "%s has sparse initializers", names[b]);
        const Onnx__GraphProto *outer = L->gp;
        size_t mark = L->n_undo;
        L->gp = bg;
        L->depth++;
        cattr_status st = CATTR_OK;
        for (size_t i = 0; i < bg->n_initializer && st == CATTR_OK; i++) st = add_initializer(L, bg->initializer[i], i);
        for (size_t i = 0; i < bg->n_node && st == CATTR_OK; i++) st = convert_node(L, (int)i);
        if (st != CATTR_OK) st = cx_fail_context(st, "node '%s' (op If), %s", c->label, names[b]);
        for (size_t k = 0; k < bg->n_output && st == CATTR_OK; k++) {
            const char *on = STR(bg->output[k]->name);
            const name_ent *e = find(L, on);
            if (!e || e->val < 0)
                st = nfail(c, e ? CATTR_ERR_UNSUPPORTED : CATTR_ERR_FORMAT, "output '%s' of %s is %s", on, names[b],
                           e ? "not output 0 of its node (only output 0 of a node is supported)" : "not defined");
            else
                outs[b][k] = e->val;
        }
        L->depth--;
        L->gp = outer;
        scope_end(L, mark);
        if (st != CATTR_OK) return st;
    }
    for (size_t k = 0; k < n->n_output; k++) {
        if (!n->output[k] || !*n->output[k]) continue;
        int in[3] = {c->in[0], outs[0][k], outs[1][k]};
        char nm[200];
        snprintf(nm, sizeof nm, k ? "%s:%zu" : "%s", c->label, k);
        int y = cg_add_node(L->g, CG_IF, nm, in, 3, NULL, n->output[k]);
        if (y < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add node '%s'", c->label);
        CX_CHECK(define(L, n->output[k], y, idx, 0));
    }
    return CATTR_OK;
}

static cattr_status convert_node(loader *L, int idx) {
    const Onnx__NodeProto *n = L->gp->node[idx];
    char lbuf[160];
    nctx c = {L, n, idx, node_label(n, idx, lbuf, sizeof lbuf), {0}};
    if (!n->op_type || !*n->op_type) return cx_fail(CATTR_ERR_FORMAT, "node '%s' has no op_type", c.label);
    if (n->domain && *n->domain && strcmp(n->domain, "ai.onnx") != 0)
        return nfail(&c, CATTR_ERR_UNSUPPORTED, "domain '%s' is not supported (only the default ONNX domain)",
                     n->domain);
    const op_spec *sp = NULL;
    for (size_t i = 0; i < CX_ARRAY_LEN(k_ops) && !sp; i++)
        if (strcmp(k_ops[i].name, n->op_type) == 0) sp = &k_ops[i];
    if (!sp) return nfail(&c, CATTR_ERR_UNSUPPORTED, "unsupported op");
    for (size_t i = 0; i < n->n_attribute; i++) {
        const char *an = STR(n->attribute[i]->name);
        if (!word_in(sp->attrs, an) && !(L->opset < sp->old_until && word_in(sp->old_attrs, an)))
            return nfail(&c, CATTR_ERR_UNSUPPORTED, "unsupported attribute '%s'", an);
    }
    if (n->n_output < 1 || !n->output[0] || !*n->output[0]) return nfail(&c, CATTR_ERR_FORMAT, "no output");
    if (sp->op == CG_CONCAT && n->n_input > CG_MAX_IN - 1) return wide_concat(&c, idx); /* gradient: 7 at most */
    if (n->n_input < (size_t)sp->min_in || n->n_input > (size_t)sp->max_in)
        return nfail(&c, CATTR_ERR_FORMAT, "%zu inputs, expected %d to %d", n->n_input, sp->min_in, sp->max_in);
    for (int i = 0; i < CG_MAX_IN; i++) {
        c.in[i] = -1;
        if ((size_t)i >= n->n_input || !n->input[i] || !*n->input[i]) {
            if (i < sp->min_in || (sp->op == CG_CONCAT && (size_t)i < n->n_input))
                return nfail(&c, CATTR_ERR_FORMAT, "required input %d is empty", i);
            continue;
        }
        CX_CHECK(resolve_input(&c, n->input[i], &c.in[i]));
    }

    if (sp->op == OP_CONSTANT) {
        cattr_tensor *t;
        CX_CHECK(constant_tensor(&c, &t));
        int id = cg_add_const(L->g, n->output[0], t, true);
        if (id < 0) {
            cattr_tensor_free(t);
            return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add constant '%s'", n->output[0]);
        }
        return define(L, n->output[0], id, idx, 0);
    }

    if (sp->op == OP_LAYERNORM) return layer_norm(&c, idx);
    if (sp->op == OP_LSTM || sp->op == OP_GRU) return recurrent(&c, idx, sp->op == OP_GRU);
    if (sp->op == OP_PRELU) return prelu(&c, idx);
    if (sp->op == CG_CLIP && L->opset >= 11 &&
        ((c.in[1] >= 0 && L->g->vals[c.in[1]].kind != CG_VAL_CONST) ||
         (c.in[2] >= 0 && L->g->vals[c.in[2]].kind != CG_VAL_CONST)))
        return clip_computed(&c, idx);
    if (sp->op == OP_SPLIT) return split(&c, idx);
    if (sp->op == OP_CONV_TRANSPOSE) return conv_transpose(&c, idx);
    if (sp->op == OP_EINSUM) return einsum(&c, idx);
    if (sp->op == OP_IF) return if_node(&c, idx);
    if (sp->op == OP_COMPOSED) return composed(&c, idx);
    cg_op op = sp->op == OP_DROPOUT ? CG_IDENTITY : (cg_op)sp->op;
    cg_attrs a = cg_attrs_default();
    int nin = 1; /* most ops keep their first input only; the rest were folded into attributes */
    int64_t ks[CG_MAX_SP], v;
    int nk;
    switch (sp->op) {
    case CG_GEMM:
        CX_CHECK(attr_float(&c, "alpha", 1.0, &a.alpha));
        CX_CHECK(attr_float(&c, "beta", 1.0, &a.beta));
        CX_CHECK(attr_flag(&c, "transA", &a.trans_a));
        CX_CHECK(attr_flag(&c, "transB", &a.trans_b));
        nin = c.in[2] >= 0 ? 3 : 2;
        break;
    case CG_CONV: {
        CX_CHECK(attr_ints(&c, "kernel_shape", CG_MAX_SP, ks, &nk));
        if (nk < 0) {
            const cg_value *w = &L->g->vals[c.in[1]];
            if (w->kind != CG_VAL_CONST)
                return nfail(&c, CATTR_ERR_UNSUPPORTED, "no kernel_shape and the weight '%s' is not a constant",
                             n->input[1]);
            nk = w->data->ndim - 2;
            for (int i = 0; i < nk && i < CG_MAX_SP; i++) ks[i] = w->data->shape[2 + i];
        }
        CX_CHECK(spatial_attrs(&c, &a, ks, nk, true));
        CX_CHECK(attr_int(&c, "group", 1, &a.group));
        if (a.group < 1) return nfail(&c, CATTR_ERR_FORMAT, "group %lld is invalid", (long long)a.group);
        nin = c.in[2] >= 0 ? 3 : 2;
        break;
    }
    case CG_MAXPOOL:
        CX_CHECK(pool_kernel(&c, ks, &nk));
        CX_CHECK(spatial_attrs(&c, &a, ks, nk, true));
        CX_CHECK(attr_flag(&c, "ceil_mode", &a.ceil_mode));
        CX_CHECK(attr_int(&c, "storage_order", 0, &v));
        if (v != 0) return nfail(&c, CATTR_ERR_UNSUPPORTED, "storage_order %lld is not supported", (long long)v);
        break;
    case CG_AVGPOOL:
        CX_CHECK(pool_kernel(&c, ks, &nk));
        CX_CHECK(spatial_attrs(&c, &a, ks, nk, false));
        CX_CHECK(attr_flag(&c, "ceil_mode", &a.ceil_mode));
        CX_CHECK(attr_flag(&c, "count_include_pad", &a.count_include_pad));
        break;
    case CG_LEAKYRELU: CX_CHECK(attr_float(&c, "alpha", 0.01, &a.alpha)); break;
    case CG_LOGSOFTMAX: { /* over the last dim: the op's kernel; over another (opset 13+): as its definition */
        int64_t ax = 0;
        CX_CHECK(attr_int(&c, "axis", L->opset >= 13 ? -1 : 1, &ax));
        if (ax == -1) break;
        if (L->opset < 13)
            return nfail(&c, CATTR_ERR_UNSUPPORTED, "axis %lld before opset 13 (over the dims from axis on): only "
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
        CX_CHECK(attr_float(&c, "alpha", 0.2, &a.alpha));
        CX_CHECK(attr_float(&c, "beta", 0.5, &a.beta));
        break;
    case CG_ELU: CX_CHECK(attr_float(&c, "alpha", 1.0, &a.alpha)); break;
    case CG_SELU:
        CX_CHECK(attr_float(&c, "alpha", 1.67326319217681884765625, &a.alpha));
        CX_CHECK(attr_float(&c, "gamma", 1.05070102214813232421875, &a.beta));
        break;
    case CG_GELU: {
        const Onnx__AttributeProto *ap = attr_find(&c, "approximate");
        const char *mode = ap && ap->s.data ? (const char *)ap->s.data : "none";
        size_t len = ap ? ap->s.len : 4;
        if (len == 4 && !strncmp(mode, "tanh", 4)) a.index = 1;
        else if (!(len == 4 && !strncmp(mode, "none", 4)))
            return nfail(&c, CATTR_ERR_UNSUPPORTED, "approximate='%.*s' (expected 'none' or 'tanh')", (int)len, mode);
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
        if (L->opset < 11) return nfail(&c, CATTR_ERR_UNSUPPORTED, "Resize before opset 11 (export at opset 11 or later)");
        for (int k = 0; k < 3; k++) {
            const Onnx__AttributeProto *sp2;
            CX_CHECK(attr_typed(&c, names[k], ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, "a string", &sp2));
            int found = sp2 ? -1 : 0;
            for (int q = 0; sp2 && q < counts[k]; q++)
                if (sp2->s.len == strlen(tabs[k][q]) && !memcmp(sp2->s.data, tabs[k][q], sp2->s.len)) found = q;
            if (found < 0)
                return nfail(&c, CATTR_ERR_UNSUPPORTED, "%s '%.*s' is not supported", names[k], (int)sp2->s.len,
                             sp2->s.data ? (const char *)sp2->s.data : "");
            if (dst[k]) *dst[k] = found;
            else ta = found;
        }
        a.trans_a = ta;
        CX_CHECK(attr_int(&c, "exclude_outside", 0, &v));
        if (v) return nfail(&c, CATTR_ERR_UNSUPPORTED, "exclude_outside=1 is not supported");
        CX_CHECK(attr_int(&c, "antialias", 0, &v));
        if (v) return nfail(&c, CATTR_ERR_UNSUPPORTED, "antialias=1 is not supported");
        if (attr_find(&c, "axes")) return nfail(&c, CATTR_ERR_UNSUPPORTED, "attribute axes is not supported");
        bool has_scales = false;
        if (c.in[2] >= 0) {
            const cattr_tensor *st = NULL;
            CX_CHECK(need_const(&c, 2, "scales", &st));
            if (st->numel > 0) {
                if (st->numel != 3 && st->numel != 4)
                    return nfail(&c, CATTR_ERR_UNSUPPORTED, "%lld scales: inputs of rank 3 or 4 are supported",
                                 (long long)st->numel);
                if (cx_tensor_get(st, 0) != 1 || cx_tensor_get(st, 1) != 1)
                    return nfail(&c, CATTR_ERR_UNSUPPORTED, "only the spatial dims can be resized (scales of dims 0 "
                                                            "and 1 must be 1)");
                a.alpha = cx_tensor_get(st, 2);
                a.beta = st->numel == 4 ? cx_tensor_get(st, 3) : 1;
                if (!(a.alpha > 0) || !(a.beta > 0)) return nfail(&c, CATTR_ERR_FORMAT, "scales must be positive");
                has_scales = true;
            }
        }
        if (c.in[3] >= 0 && has_scales) return nfail(&c, CATTR_ERR_FORMAT, "give scales or sizes, not both");
        if (c.in[3] >= 0) {
            if (L->g->vals[c.in[3]].kind == CG_VAL_CONST || from_input_values(L, c.in[3])) {
                CX_CHECK(fold_ints(&c, 3, "sizes", CATTR_MAX_DIMS, a.ints, &a.n_ints));
                if (a.n_ints < 1) return nfail(&c, CATTR_ERR_FORMAT, "sizes is empty");
            } else {
                c.in[1] = c.in[3]; /* computed from shapes: folded per call */
                nin = 2;
            }
        } else if (!has_scales) {
            return nfail(&c, CATTR_ERR_FORMAT, "scales or sizes is required");
        }
        break;
    }
    case CG_MOD:
        CX_CHECK(attr_int(&c, "fmod", 0, &v));
        a.index = v != 0;
        nin = 2;
        break;
    case CG_SCATTER_ND: {
        const Onnx__AttributeProto *rp;
        CX_CHECK(attr_typed(&c, "reduction", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, "a string", &rp));
        if (rp && !(rp->s.len == 4 && !memcmp(rp->s.data, "none", 4)))
            return nfail(&c, CATTR_ERR_UNSUPPORTED, "reduction '%.*s' (only none)", (int)rp->s.len,
                         rp->s.data ? (const char *)rp->s.data : "");
        nin = 3;
        break;
    }
    case CG_RANGE: { /* of constants: a constant; from shapes: folded per call (int64 only) */
        bool consts = true;
        for (int j = 0; j < 3; j++) consts &= L->g->vals[c.in[j]].kind == CG_VAL_CONST;
        if (consts) {
            double s0, lim, dl;
            CX_CHECK(fold_scalar(&c, 0, "start", &s0));
            CX_CHECK(fold_scalar(&c, 1, "limit", &lim));
            CX_CHECK(fold_scalar(&c, 2, "delta", &dl));
            double len = dl != 0 ? ceil((lim - s0) / dl) : -1;
            if (dl == 0 || !(len < 1e8)) return nfail(&c, CATTR_ERR_FORMAT, "start, limit and delta give no valid range");
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
            return define(L, n->output[0], id, idx, 0);
        }
        for (int j = 0; j < 3; j++)
            if (from_input_values(L, c.in[j]))
                return nfail(&c, CATTR_ERR_UNSUPPORTED, "input '%s' is computed from an input's values (only shapes "
                                                        "and constants give a range)", n->input[j]);
        nin = 3;
        break;
    }
    case CG_PAD: { /* pads (and the constant, the axes) are inputs from opset 11, attributes before */
        const Onnx__AttributeProto *ap = attr_find(&c, "mode");
        const char *mode = ap && ap->s.data ? (const char *)ap->s.data : "constant";
        size_t len = ap ? ap->s.len : 8;
        if (len == 8 && !strncmp(mode, "constant", 8)) a.index = 0;
        else if (len == 7 && !strncmp(mode, "reflect", 7)) a.index = 1;
        else if (len == 4 && !strncmp(mode, "edge", 4)) a.index = 2;
        else return nfail(&c, CATTR_ERR_UNSUPPORTED, "mode '%.*s' (expected constant, reflect or edge)", (int)len, mode);
        a.alpha = 0;
        int np = -1;
        if (L->opset >= 11) {
            if (c.in[1] < 0) return nfail(&c, CATTR_ERR_FORMAT, "input pads is required");
            if (c.in[2] >= 0) CX_CHECK(fold_scalar(&c, 2, "constant_value", &a.alpha));
            if (c.in[3] >= 0) return nfail(&c, CATTR_ERR_UNSUPPORTED, "the axes input (opset 18): give pads for every dim");
            if (L->g->vals[c.in[1]].kind != CG_VAL_CONST && !from_input_values(L, c.in[1])) {
                nin = 2; /* pads computed from shapes: folded per call */
                break;
            }
            CX_CHECK(fold_ints(&c, 1, "pads", CG_MAX_INTS, a.ints, &np));
        } else {
            CX_CHECK(attr_ints(&c, "pads", CG_MAX_INTS, a.ints, &np));
            CX_CHECK(attr_float(&c, "value", 0, &a.alpha));
        }
        if (np < 0 || np % 2) return nfail(&c, CATTR_ERR_FORMAT, "pads must hold a begin and an end per dim");
        a.n_ints = np;
        break;
    }
    case CG_MAX: case CG_MIN:
        if (c.in[1] < 0) op = CG_IDENTITY; /* the one operand itself (input 1 absent or empty) */
        else nin = 2;
        break;
    case CG_SOFTMAX:
        CX_CHECK(attr_int(&c, "axis", L->opset >= 13 ? -1 : 1, &a.axis));
        a.index = L->opset < 13;
        break;
    case CG_CLIP:
        a.alpha = -INFINITY;
        a.beta = INFINITY;
        if (L->opset >= 11) {
            if (c.in[1] >= 0) CX_CHECK(fold_scalar(&c, 1, "min", &a.alpha));
            if (c.in[2] >= 0) CX_CHECK(fold_scalar(&c, 2, "max", &a.beta));
        } else {
            if (n->n_input > 1) return nfail(&c, CATTR_ERR_FORMAT, "takes one input before opset 11");
            CX_CHECK(attr_float(&c, "min", -INFINITY, &a.alpha));
            CX_CHECK(attr_float(&c, "max", INFINITY, &a.beta));
        }
        break;
    case CG_ADD: case CG_SUB: case CG_MUL: case CG_DIV: case CG_MATMUL: nin = 2; break;
    case CG_RESHAPE:
        if (L->g->vals[c.in[1]].kind == CG_VAL_CONST || from_input_values(L, c.in[1]))
            CX_CHECK(fold_ints(&c, 1, "shape", CG_MAX_INTS, a.ints, &a.n_ints));
        else
            nin = 2; /* computed from shapes: the planner folds it for each call's shapes */
        CX_CHECK(attr_flag(&c, "allowzero", &a.allowzero));
        break;
    case CG_SHAPE: {
        if (strcmp(n->op_type, "Size") == 0) { /* the number of elements: a Shape marked index 1 */
            a.index = 1;
            break;
        }
        int64_t lo = 0, hi = INT64_MAX;
        CX_CHECK(attr_int(&c, "start", 0, &lo));
        CX_CHECK(attr_int(&c, "end", INT64_MAX, &hi));
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
        int zv = scalar_const(L->g, nm, CATTR_INT64, 0);
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
            const Onnx__AttributeProto *vp = attr_find(&c, "value");
            a.alpha = 0;
            if (vp) {
                if (!vp->t) return nfail(&c, CATTR_ERR_FORMAT, "attribute 'value' must be a tensor");
                cattr_tensor *vt = NULL;
                CX_CHECK(tensor_from_proto(vp->t, "value", &vt));
                a.alpha = vt->numel > 0 ? cx_tensor_get(vt, 0) : 0;
                a.index = vt->dtype == CATTR_INT64;
                cattr_tensor_free(vt);
            }
        }
        if (L->g->vals[c.in[si]].kind == CG_VAL_CONST || from_input_values(L, c.in[si])) {
            CX_CHECK(fold_ints(&c, si, sp->op == CG_TILE ? "repeats" : "shape", CG_MAX_INTS, a.ints, &a.n_ints));
            nin = si;
        } else {
            nin = si + 1;
        }
        break;
    }
    case CG_CAST: {
        int64_t to = 0;
        CX_CHECK(attr_int(&c, "to", 0, &to));
        if (to == 7 || to == 6 || to == 5 || to == 3 || to == 2 || to == 4 || to == 12 || to == 13 || to == 9)
            a.index = 1; /* integers and booleans: int64 */
        else if (to == 1 || to == 11 || to == 10 || to == 16)
            a.index = 0; /* floating point: the call's float dtype */
        else
            return nfail(&c, CATTR_ERR_UNSUPPORTED, "cast to ONNX type %lld", (long long)to);
        break;
    }
    case CG_FLATTEN: CX_CHECK(attr_int(&c, "axis", 1, &a.axis)); break;
    case CG_CONCAT:
        if (!attr_find(&c, "axis")) return nfail(&c, CATTR_ERR_FORMAT, "attribute 'axis' is required");
        CX_CHECK(attr_int(&c, "axis", 0, &a.axis));
        nin = (int)n->n_input;
        break;
    case CG_UNSQUEEZE: CX_CHECK(axes_attr(&c, &a, true)); break;
    case CG_SQUEEZE: CX_CHECK(axes_attr(&c, &a, false)); break;
    case CG_REDUCE_SUM: case CG_REDUCE_MEAN: case CG_REDUCE_MAX: case CG_REDUCE_MIN: case OP_REDUCE_L2: {
        /* axes: an input from opset 13 (ReduceSum) or 18 (the others) */
        int na = -1;
        if (L->opset >= (sp->op == CG_REDUCE_SUM ? 13 : 18)) {
            if (c.in[1] >= 0) CX_CHECK(fold_ints(&c, 1, "axes", CG_MAX_INTS, a.ints, &na));
        } else {
            if (n->n_input > 1) return nfail(&c, CATTR_ERR_FORMAT, "takes its axes as an attribute in opset %d", L->opset);
            CX_CHECK(attr_ints(&c, "axes", CG_MAX_INTS, a.ints, &na));
        }
        a.n_ints = na < 0 ? 0 : na;
        CX_CHECK(attr_int(&c, "keepdims", 1, &v));
        a.index = v != 0;
        CX_CHECK(attr_int(&c, "noop_with_empty_axes", 0, &v));
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
        CX_CHECK(attr_ints(&c, "perm", CG_MAX_INTS, a.ints, &a.n_ints));
        if (a.n_ints < 0) a.n_ints = 0;
        break;
    case CG_GATHER: {
        const cg_value *ix = &L->g->vals[c.in[1]];
        if (ix->kind == CG_VAL_CONST && ix->data->dtype != CATTR_INT64)
            return nfail(&c, CATTR_ERR_FORMAT, "indices '%s' must be integers", n->input[1]);
        CX_CHECK(attr_int(&c, "axis", 0, &a.axis));
        nin = 2;
        break;
    }
    case CG_SLICE:
        if (L->opset >= 10 && (c.in[1] < 0 || c.in[2] < 0))
            return nfail(&c, CATTR_ERR_FORMAT, "inputs starts and ends are required");
        if (L->opset < 10 && n->n_input > 1) return nfail(&c, CATTR_ERR_FORMAT, "takes one input before opset 10");
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
        CX_CHECK(attr_float(&c, "epsilon", 1e-5, &a.alpha));
        CX_CHECK(attr_int(&c, "training_mode", 0, &v));
        if (v != 0) return nfail(&c, CATTR_ERR_UNSUPPORTED, "training_mode=1 is not supported (inference only)");
        CX_CHECK(attr_int(&c, "spatial", 1, &v));
        if (v != 1) return nfail(&c, CATTR_ERR_UNSUPPORTED, "spatial=%lld is not supported", (long long)v);
        nin = 5;
        break;
    case OP_DROPOUT:
        if (c.in[2] >= 0) {
            double train = 1;
            if (L->g->vals[c.in[2]].kind == CG_VAL_CONST) CX_CHECK(fold_scalar(&c, 2, "training_mode", &train));
            double ratio = 0.5; /* a ratio of 0 drops nothing, in training mode too (torchvision's Swin exports so) */
            if (c.in[1] >= 0 && L->g->vals[c.in[1]].kind == CG_VAL_CONST) CX_CHECK(fold_scalar(&c, 1, "ratio", &ratio));
            if (train != 0 && ratio != 0)
                return nfail(&c, CATTR_ERR_UNSUPPORTED, "training_mode must be a constant false (or the ratio 0)");
        }
        break;
    default: break; /* unary ops without attributes */
    }
    int in[CG_MAX_IN];
    for (int i = 0; i < nin; i++) in[i] = c.in[i];
    int out = cg_add_node(L->g, op, c.label, in, nin, &a, n->output[0]);
    if (out < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add node '%s'", c.label);
    CX_CHECK(define(L, n->output[0], out, idx, 0));
    for (size_t k = 1; k < n->n_output; k++)
        if (n->output[k] && *n->output[k]) CX_CHECK(define(L, n->output[k], -1, idx, (int)k));
    return CATTR_OK;
}

/* ---- graph inputs, outputs and the model ---------------------------------------------------------------------- */

static cattr_status input_info(const Onnx__ValueInfoProto *vi, cx_onnx_input_info *ii) {
    ii->ndim = -1;
    ii->dtype = CATTR_FLOAT32;
    for (int i = 0; i < CATTR_MAX_DIMS; i++) ii->shape[i] = -1;
    if (!vi->type) return CATTR_OK;
    if (vi->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "graph input '%s' is not a tensor", vi->name);
    const Onnx__TypeProto__Tensor *tt = vi->type->tensor_type;
    elem_kind k;
    if (tt->elem_type == ONNX__TENSOR_PROTO__DATA_TYPE__STRING)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "graph input '%s' has element type STRING", vi->name);
    if (elem_kind_of(tt->elem_type, &k)) ii->dtype = k.dtype;
    if (!tt->shape) return CATTR_OK;
    if (tt->shape->n_dim > CATTR_MAX_DIMS)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "graph input '%s' has %zu dimensions, at most %d are supported",
                       vi->name, tt->shape->n_dim, CATTR_MAX_DIMS);
    ii->ndim = (int)tt->shape->n_dim;
    for (int i = 0; i < ii->ndim; i++) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && d->dim_value >= 0)
            ii->shape[i] = d->dim_value;
        else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && d->dim_param)
            snprintf(ii->dim_param[i], sizeof ii->dim_param[i], "%s", d->dim_param);
    }
    return CATTR_OK;
}

int cx_onnx_batch_axis(const cx_onnx_info *info, int i) {
    if (!info || i < 0 || i >= info->n_inputs) return 0;
    const cx_onnx_input_info *x = &info->inputs[i];
    if (x->ndim < 2 || x->shape[0] < 0) return 0;
    const char *ref = NULL; /* the first input with a dynamic first dim: the batch's name */
    for (int k = 0; k < info->n_inputs && !ref; k++)
        if (info->inputs[k].ndim >= 1 && info->inputs[k].shape[0] < 0) ref = info->inputs[k].dim_param[0];
    if (!ref) return 0;
    for (int d = 1; d < x->ndim; d++)
        if (x->shape[d] < 0 && (!ref[0] || strcmp(x->dim_param[d], ref) == 0)) return d;
    return 0;
}

static cattr_status add_initializer(loader *L, const Onnx__TensorProto *tp, size_t i) {
    if (!tp->name || !*tp->name) return cx_fail(CATTR_ERR_FORMAT, "initializer %zu has no name", i);
    cattr_tensor *t;
    CX_CHECK(tensor_from_proto(tp, tp->name, &t));
    int id = cg_add_const(L->g, tp->name, t, true);
    if (id < 0) {
        cattr_tensor_free(t);
        return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add initializer '%s'", tp->name);
    }
    return define(L, tp->name, id, -1, 0);
}

static cattr_status convert_graph(loader *L, cx_onnx_info *info) {
    const Onnx__GraphProto *gp = L->gp;
    L->info = info;
    if (gp->n_sparse_initializer) return cx_fail(CATTR_ERR_UNSUPPORTED, "sparse initializers are not supported");
    for (size_t i = 0; i < gp->n_initializer; i++) CX_CHECK(add_initializer(L, gp->initializer[i], i));
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = gp->input[i];
        if (!vi->name || !*vi->name) return cx_fail(CATTR_ERR_FORMAT, "graph input %zu has no name", i);
        const name_ent *e = find(L, vi->name);
        if (e && e->val >= 0 && L->g->vals[e->val].kind == CG_VAL_CONST) continue; /* an initializer listed as input */
        CX_CHECK(input_info(vi, &info->inputs[info->n_inputs]));
        int id = cg_add_input(L->g, vi->name);
        if (id < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add input '%s'", vi->name);
        info->n_inputs++;
        CX_CHECK(define(L, vi->name, id, -1, 0));
    }
    for (size_t i = 0; i < gp->n_node; i++) CX_CHECK(convert_node(L, (int)i));
    for (size_t i = 0; i < gp->n_output; i++) {
        const char *name = STR(gp->output[i]->name);
        const name_ent *e = find(L, name);
        char buf[160];
        if (!e)
            return cx_fail(CATTR_ERR_FORMAT, "graph output '%s' is not produced by any node, initializer or input",
                           name);
        if (e->val < 0)
            return cx_fail(CATTR_ERR_UNSUPPORTED,
                           "graph output '%s' is output %d of node '%s' (op %s); only output 0 of a node is supported",
                           name, e->slot, node_label(gp->node[e->node], e->node, buf, sizeof buf),
                           gp->node[e->node]->op_type);
        if (cg_add_output(L->g, e->val) < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add output '%s'", name);
    }
    return CATTR_OK;
}

void cx_onnx_info_free(cx_onnx_info *info) {
    if (!info) return;
    free(info->inputs);
    free(info);
}

/* Initializers and node outputs of graph gp and of the If branches in it (at most MAX_IF_DEPTH deep). */
static size_t count_names(const Onnx__GraphProto *gp, int depth) {
    size_t names = gp->n_initializer;
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *n = gp->node[i];
        names += n->n_output;
        for (size_t k = 0; k < n->n_attribute && depth < MAX_IF_DEPTH; k++)
            if (n->attribute[k]->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH && n->attribute[k]->g)
                names += count_names(n->attribute[k]->g, depth + 1);
    }
    return names;
}

static cattr_status convert_model(const Onnx__ModelProto *m, cg_graph **gout, cx_onnx_info **iout) {
    const Onnx__GraphProto *gp = m->graph;
    if (!gp) return cx_fail(CATTR_ERR_FORMAT, "the model has no graph");
    int64_t opset = -1;
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const char *d = STR(m->opset_import[i]->domain);
        if ((!*d || strcmp(d, "ai.onnx") == 0) && m->opset_import[i]->version > opset)
            opset = m->opset_import[i]->version;
    }
    if (opset < 0) return cx_fail(CATTR_ERR_FORMAT, "the model imports no default ('ai.onnx') opset");
    if (opset < 7) return cx_fail(CATTR_ERR_UNSUPPORTED, "opset %lld is not supported (7 or later)", (long long)opset);
    if (gp->n_node == 0 || gp->n_output == 0) return cx_fail(CATTR_ERR_FORMAT, "the graph is empty");

    size_t names = gp->n_input + 16 + count_names(gp, 0), cap = 64;
    while (cap < 2 * names) cap *= 2;
    loader L = {.gp = gp, .opset = (int)(opset > 100000 ? 100000 : opset), .g = cg_new(),
                .tab = calloc(cap, sizeof(name_ent)), .cap = cap};
    cx_onnx_info *info = calloc(1, sizeof *info);
    if (info) info->inputs = calloc(gp->n_input + 1, sizeof *info->inputs);
    cattr_status st = CATTR_OK;
    if (!L.g || !L.tab || !info || !info->inputs)
        st = cx_fail(CATTR_ERR_NO_MEMORY, "cannot allocate the graph");
    else
        st = convert_graph(&L, info);
    free(L.tab);
    free(L.undo);
    free(L.fiv);
    if (st != CATTR_OK) {
        cg_free(L.g);
        cx_onnx_info_free(info);
        return st;
    }
    info->opset = L.opset;
    info->ir_version = m->ir_version;
    *gout = L.g;
    *iout = info;
    return CATTR_OK;
}

/* ---- entry points ------------------------------------------------------------------------------------------- */

cattr_status cx_onnx_load_buffer_info(const void *data, size_t size, const char *what, cg_graph **out,
                                      cx_onnx_info **info_out) {
    if (out) *out = NULL;
    if (info_out) *info_out = NULL;
    if (!what) what = "<buffer>";
    if (!out || (!data && size)) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "NULL argument to the ONNX loader");
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, size, data);
    if (!m) return cx_fail(CATTR_ERR_FORMAT, "'%s': not a valid ONNX model (protobuf parse failed)", what);
    cx_onnx_info *info = NULL;
    cattr_status st = convert_model(m, out, &info);
    onnx__model_proto__free_unpacked(m, NULL);
    if (st != CATTR_OK) return cx_fail_context(st, "'%s'", what);
    if (info_out)
        *info_out = info;
    else
        cx_onnx_info_free(info);
    return CATTR_OK;
}

cattr_status cx_onnx_load_file_info(const char *path, cg_graph **out, cx_onnx_info **info_out) {
    if (out) *out = NULL;
    if (info_out) *info_out = NULL;
    if (!path || !out) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "NULL argument to the ONNX loader");
    FILE *f = fopen(path, "rb");
    if (!f) return cx_fail(CATTR_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return cx_fail(CATTR_ERR_IO, "'%s' is not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    void *buf = cx_malloc(size);
    if (!buf) {
        fclose(f);
        return cx_fail(CATTR_ERR_NO_MEMORY, "cannot allocate %zu bytes to read '%s'", size, path);
    }
    size_t got = fread(buf, 1, size, f);
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (got != size) {
        free(buf);
        return cx_fail(CATTR_ERR_IO, "cannot read '%s': %s", path, err ? strerror(err) : "file changed while reading");
    }
    cattr_status st = cx_onnx_load_buffer_info(buf, size, path, out, info_out);
    free(buf);
    return st;
}

cattr_status cx_onnx_load_buffer(const void *data, size_t size, const char *what, cg_graph **out, int *opset_out) {
    cx_onnx_info *info = NULL;
    cattr_status st = cx_onnx_load_buffer_info(data, size, what, out, &info);
    if (st == CATTR_OK && opset_out) *opset_out = info->opset;
    cx_onnx_info_free(info);
    return st;
}

cattr_status cx_onnx_load_file(const char *path, cg_graph **out, int *opset_out) {
    cx_onnx_info *info = NULL;
    cattr_status st = cx_onnx_load_file_info(path, out, &info);
    if (st == CATTR_OK && opset_out) *opset_out = info->opset;
    cx_onnx_info_free(info);
    return st;
}

int cx_onnx_input_shape(const cx_onnx_info *info, int i, int64_t shape[CATTR_MAX_DIMS]) {
    if (!info || i < 0 || i >= info->n_inputs || info->inputs[i].ndim < 0) return -1;
    const cx_onnx_input_info *ii = &info->inputs[i];
    if (shape)
        for (int d = 0; d < ii->ndim; d++) shape[d] = ii->shape[d];
    return ii->ndim;
}
