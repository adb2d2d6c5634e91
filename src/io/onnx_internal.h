/* onnx_internal.h - what the ONNX importer's files share (onnx.c: the loader, the name table, the per-node helpers
 * and the op conversion table; onnx_composed.c: the ops written as several IR ops). */
#ifndef CATTR_IO_ONNX_INTERNAL_H
#define CATTR_IO_ONNX_INTERNAL_H

#include "io/onnx.h"
#include "ops/elementwise.h"

#include "onnx.pb-c.h"

#include <stdbool.h>
#include <stdint.h>

#define STR(s) ((s) ? (s) : "")
#define MAX_SLICE_AXES (CG_MAX_INTS / 4)

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

typedef struct nctx {
    loader *L;
    const Onnx__NodeProto *n;
    int idx;
    const char *label;
    int in[CG_MAX_IN]; /* value id of each ONNX input; -1 when absent (empty name or past the end) */
} nctx;

const Onnx__AttributeProto *cx_ox_attr_find(const nctx *c, const char *name);
cattr_status cx_ox_attr_float(const nctx *c, const char *name, double def, double *v);
cattr_status cx_ox_attr_int(const nctx *c, const char *name, int64_t def, int64_t *v);
cattr_status cx_ox_attr_ints(const nctx *c, const char *name, int max, int64_t *dst, int *n);
cattr_status cx_ox_attr_typed(const nctx *c, const char *name, Onnx__AttributeProto__AttributeType type,
                              const char *what, const Onnx__AttributeProto **out);
cattr_status cx_ox_clip_computed(nctx *c, int idx);
cattr_status cx_ox_composed(nctx *c, int idx);
cattr_status cx_ox_conv_transpose(nctx *c, int idx);
cattr_status cx_ox_define(loader *L, const char *name, int val, int node, int slot);
cattr_status cx_ox_einsum(nctx *c, int idx);
cattr_status cx_ox_fold_ints(const nctx *c, int pos, const char *role, int max, int64_t *dst, int *n);
cattr_status cx_ox_fold_scalar(const nctx *c, int pos, const char *role, double *v);
cattr_status cx_ox_layer_norm(nctx *c, int idx);
cattr_status cx_ox_nfail(const nctx *c, cattr_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
cattr_status cx_ox_prelu(nctx *c, int idx);
cattr_status cx_ox_recurrent(nctx *c, int idx, bool gru);
cattr_status cx_ox_resolve_input(const nctx *c, const char *name, int *id);
int cx_ox_scalar_const(cg_graph *g, const char *name, cattr_dtype dt, double v);
cattr_status cx_ox_spatial_attrs(const nctx *c, cg_attrs *a, const int64_t *ks, int nk, bool dilations_ok);
cattr_status cx_ox_split(nctx *c, int idx);
cattr_status cx_ox_wide_concat(nctx *c, int idx);

/* (onnx_ops.c: the op conversion; onnx.c: the loader) */
/* If branches nested deeper than this are refused (a file could nest them without limit). */
#define MAX_IF_DEPTH 16

cattr_status cx_ox_add_initializer(loader *L, const Onnx__TensorProto *tp, size_t i);
cattr_status cx_ox_attr_flag(const nctx *c, const char *name, int *v);
cattr_status cx_ox_convert_node(loader *L, int idx);
const name_ent *cx_ox_find(const loader *L, const char *key);
cattr_status cx_ox_need_const(const nctx *c, int pos, const char *role, const cattr_tensor **t);
const char *cx_ox_node_label(const Onnx__NodeProto *n, int idx, char *buf, size_t size);
void cx_ox_scope_end(loader *L, size_t mark);
cattr_status cx_ox_tensor_from_proto(const Onnx__TensorProto *tp, const char *name, cattr_tensor **out);

#endif
