/* onnx.c - ONNX ModelProto -> cg_graph importer (see onnx.h for the op mapping and the error contract).
 *
 * One pass over the protobuf message unpacked by protobuf-c: initializers become constants, graph inputs become
 * inputs, nodes are converted in file order (so a node may only use values defined before it), graph outputs are
 * resolved last. A hash table maps every ONNX value name to its value id, or records that it is a secondary node
 * output (which cattr does not import) so that a use of it can be reported precisely.
 */
#define _POSIX_C_SOURCE 200809L
#include "io/onnx_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "onnx.c copies little-endian raw_data with memcpy: a big-endian host needs byte swapping here"
#endif


/* ---- loader state and the name table ------------------------------------------------------------------------ */





static name_ent *tab_slot(const loader *L, const char *key) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) h = (h ^ *p) * 1099511628211ull;
    size_t i = (size_t)h & (L->cap - 1);
    while (L->tab[i].key && strcmp(L->tab[i].key, key) != 0) i = (i + 1) & (L->cap - 1);
    return &L->tab[i];
}

/* The entry of a name in scope, or NULL. */
const name_ent *cx_ox_find(const loader *L, const char *key) {
    const name_ent *e = tab_slot(L, key);
    return e->key && e->val != OUT_OF_SCOPE ? e : NULL;
}

/* Defines `name`. Inside an If branch a name may shadow one of an enclosing graph; what the branch defines goes out
 * of scope when it ends (scope_end). */
cattr_status cx_ox_define(loader *L, const char *name, int val, int node, int slot) {
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
void cx_ox_scope_end(loader *L, size_t mark) {
    while (L->n_undo > mark) {
        name_undo *u = &L->undo[--L->n_undo];
        *u->slot = u->old;
    }
}

/* "<name>" or, for a node without one, "<op_type>_<index>". */
const char *cx_ox_node_label(const Onnx__NodeProto *n, int idx, char *buf, size_t size) {
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
cattr_status cx_ox_tensor_from_proto(const Onnx__TensorProto *tp, const char *name, cattr_tensor **out) {
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


cattr_status cx_ox_nfail(const nctx *c, cattr_status st, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return cx_fail(st, "node '%s' (op %s): %s", c->label, c->n->op_type, msg);
}

const Onnx__AttributeProto *cx_ox_attr_find(const nctx *c, const char *name) {
    for (size_t i = 0; i < c->n->n_attribute; i++)
        if (strcmp(STR(c->n->attribute[i]->name), name) == 0) return c->n->attribute[i];
    return NULL;
}

cattr_status cx_ox_attr_typed(const nctx *c, const char *name, Onnx__AttributeProto__AttributeType type,
                               const char *what, const Onnx__AttributeProto **out) {
    *out = cx_ox_attr_find(c, name);
    if (*out && (*out)->type != type) return cx_ox_nfail(c, CATTR_ERR_FORMAT, "attribute '%s' must be %s", name, what);
    return CATTR_OK;
}

cattr_status cx_ox_attr_int(const nctx *c, const char *name, int64_t def, int64_t *v) {
    const Onnx__AttributeProto *a;
    CX_CHECK(cx_ox_attr_typed(c, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, "an int", &a));
    *v = a ? a->i : def;
    return CATTR_OK;
}

/* A boolean int attribute (default 0); any non-zero value means true, as in onnxruntime. */
cattr_status cx_ox_attr_flag(const nctx *c, const char *name, int *v) {
    int64_t x;
    CX_CHECK(cx_ox_attr_int(c, name, 0, &x));
    *v = x != 0;
    return CATTR_OK;
}

cattr_status cx_ox_attr_float(const nctx *c, const char *name, double def, double *v) {
    const Onnx__AttributeProto *a;
    CX_CHECK(cx_ox_attr_typed(c, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT, "a float", &a));
    *v = a ? a->f : def;
    return CATTR_OK;
}

/* Reads an INTS attribute into dst (at most max values); *n = -1 when the attribute is absent. */
cattr_status cx_ox_attr_ints(const nctx *c, const char *name, int max, int64_t *dst, int *n) {
    const Onnx__AttributeProto *a;
    CX_CHECK(cx_ox_attr_typed(c, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS, "a list of ints", &a));
    *n = -1;
    if (!a) return CATTR_OK;
    if (a->n_ints > (size_t)max)
        return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "attribute '%s' has %zu values, at most %d are supported", name,
                     a->n_ints, max);
    if (a->n_ints) memcpy(dst, a->ints, a->n_ints * sizeof *dst);
    *n = (int)a->n_ints;
    return CATTR_OK;
}

/* The constant tensor behind ONNX input `pos`, which cattr folds into attributes. */
cattr_status cx_ox_need_const(const nctx *c, int pos, const char *role, const cattr_tensor **t) {
    const cg_value *v = &c->L->g->vals[c->in[pos]];
    if (v->kind != CG_VAL_CONST)
        return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED,
                     "input '%s' (%s) is not a constant: cattr folds it at import time and needs an initializer or "
                     "a Constant node output",
                     c->n->input[pos], role);
    *t = v->data;
    return CATTR_OK;
}

cattr_status cx_ox_fold_ints(const nctx *c, int pos, const char *role, int max, int64_t *dst, int *n) {
    const cattr_tensor *t = NULL;
    CX_CHECK(cx_ox_need_const(c, pos, role, &t));
    if (t->dtype != CATTR_INT64 || t->ndim > 1)
        return cx_ox_nfail(c, CATTR_ERR_FORMAT, "input '%s' (%s) must be a 1-D integer tensor", c->n->input[pos], role);
    if (t->numel > max)
        return cx_ox_nfail(c, CATTR_ERR_UNSUPPORTED, "input '%s' (%s) has %lld values, at most %d are supported",
                     c->n->input[pos], role, (long long)t->numel, max);
    if (t->numel) memcpy(dst, t->data, (size_t)t->numel * sizeof *dst);
    *n = (int)t->numel;
    return CATTR_OK;
}

cattr_status cx_ox_fold_scalar(const nctx *c, int pos, const char *role, double *v) {
    const cattr_tensor *t = NULL;
    CX_CHECK(cx_ox_need_const(c, pos, role, &t));
    if (t->numel != 1) return cx_ox_nfail(c, CATTR_ERR_FORMAT, "input '%s' (%s) must be a scalar", c->n->input[pos], role);
    *v = cx_tensor_get(t, 0);
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

cattr_status cx_ox_add_initializer(loader *L, const Onnx__TensorProto *tp, size_t i) {
    if (!tp->name || !*tp->name) return cx_fail(CATTR_ERR_FORMAT, "initializer %zu has no name", i);
    cattr_tensor *t;
    CX_CHECK(cx_ox_tensor_from_proto(tp, tp->name, &t));
    int id = cg_add_const(L->g, tp->name, t, true);
    if (id < 0) {
        cattr_tensor_free(t);
        return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add initializer '%s'", tp->name);
    }
    return cx_ox_define(L, tp->name, id, -1, 0);
}

static cattr_status convert_graph(loader *L, cx_onnx_info *info) {
    const Onnx__GraphProto *gp = L->gp;
    L->info = info;
    if (gp->n_sparse_initializer) return cx_fail(CATTR_ERR_UNSUPPORTED, "sparse initializers are not supported");
    for (size_t i = 0; i < gp->n_initializer; i++) CX_CHECK(cx_ox_add_initializer(L, gp->initializer[i], i));
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = gp->input[i];
        if (!vi->name || !*vi->name) return cx_fail(CATTR_ERR_FORMAT, "graph input %zu has no name", i);
        const name_ent *e = cx_ox_find(L, vi->name);
        if (e && e->val >= 0 && L->g->vals[e->val].kind == CG_VAL_CONST) continue; /* an initializer listed as input */
        CX_CHECK(input_info(vi, &info->inputs[info->n_inputs]));
        int id = cg_add_input(L->g, vi->name);
        if (id < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot add input '%s'", vi->name);
        info->n_inputs++;
        CX_CHECK(cx_ox_define(L, vi->name, id, -1, 0));
    }
    for (size_t i = 0; i < gp->n_node; i++) CX_CHECK(cx_ox_convert_node(L, (int)i));
    for (size_t i = 0; i < gp->n_output; i++) {
        const char *name = STR(gp->output[i]->name);
        const name_ent *e = cx_ox_find(L, name);
        char buf[160];
        if (!e)
            return cx_fail(CATTR_ERR_FORMAT, "graph output '%s' is not produced by any node, initializer or input",
                           name);
        if (e->val < 0)
            return cx_fail(CATTR_ERR_UNSUPPORTED,
                           "graph output '%s' is output %d of node '%s' (op %s); only output 0 of a node is supported",
                           name, e->slot, cx_ox_node_label(gp->node[e->node], e->node, buf, sizeof buf),
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


