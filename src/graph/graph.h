/* graph.h - the one IR of cattr: a graph of typed ops over named values (the ops, their attributes and a node:
 * ops/op.h).
 *
 * Values are graph inputs, constants (weights, folded shape tensors) or node outputs. Every node has exactly one
 * output value. Shapes are not stored in the graph: they are inferred by the planner for concrete input shapes, so
 * one graph serves every batch size. Shape-like ONNX inputs (Reshape's shape, Unsqueeze's axes, Slice's starts...,
 * Clip's bounds) are folded into cg_attrs at import time; Gather's indices stay an int64 constant input.
 */
#ifndef CATTR_GRAPH_H
#define CATTR_GRAPH_H

#include "../core/core.h"
#include "../ops/op.h"

typedef enum cg_value_kind { CG_VAL_INPUT = 0, CG_VAL_CONST = 1, CG_VAL_NODE = 2 } cg_value_kind;

typedef struct cg_value {
    char *name;
    cg_value_kind kind;
    int producer;        /* node index for CG_VAL_NODE, else -1 */
    int input_index;     /* position among graph inputs for CG_VAL_INPUT, else -1 */
    cattr_tensor *data;  /* CG_VAL_CONST: the constant (host) */
    bool owns_data;      /* whether cg_free releases `data` */
} cg_value;

typedef struct cg_graph {
    cg_value *vals;
    int n_vals, cap_vals;
    cg_node *nodes; /* in topological order */
    int n_nodes, cap_nodes;
    int *inputs; /* value ids of the graph inputs, in order */
    int n_inputs;
    int *outputs; /* value ids of the graph outputs */
    int n_outputs;
    uint64_t uid; /* unique in the process (cg_new, cg_clone): what the runner keeps a graph's plans by */
    uint64_t rev; /* raised by every change made through the functions below: plans of an older revision are stale */
} cg_graph;

cg_graph *cg_new(void);
/* Frees g and everything it owns; first calls the free hook, if one is set, with g. */
void cg_free(cg_graph *g);
/* Sets the function cg_free calls first for every graph (the runner's, to drop the plans it keeps of that graph;
 * NULL: none). Set once, before graphs are freed on other threads. */
void cg_set_free_hook(void (*hook)(const cg_graph *g));
/* Raises g's revision: for a change made to its arrays directly (the functions below raise it themselves). */
static inline void cg_touch(cg_graph *g) { g->rev++; }
/* Deep copy of the structure; constants are shared (borrowed, not owned) by the copy. NULL on allocation failure. */
cg_graph *cg_clone(const cg_graph *g);

/* Precision "high": flags every MatMul and Gemm whose second operand is a constant 2-D float weight (and whose first
 * is not transposed, and which the loader did not mark keep_precision) for bfloat16 products with float32
 * accumulation. Returns the number of products flagged. */
int cg_mark_bf16(cg_graph *g);

/* Adds a graph input called `name`; returns its value id, or -1 on allocation failure. */
int cg_add_input(cg_graph *g, const char *name);
/* Makes graph input i (0 <= i < n_inputs) a constant holding t (owned by the graph when `owns`): same value id and
 * name; the inputs after it move down one place. */
void cg_input_to_const(cg_graph *g, int i, cattr_tensor *t, bool owns);
/* Makes constant value v (CG_VAL_CONST) the graph's next input, same value id and name (its data released if owned):
 * a weight becomes a value to differentiate by. Returns its input index, or -1 on allocation failure (v unchanged). */
int cg_const_to_input(cg_graph *g, int v);
/* Adds a constant; the graph takes ownership of `t` when `owns` is true. Returns the value id or -1. */
int cg_add_const(cg_graph *g, const char *name, cattr_tensor *t, bool owns);
/* Appends a node computing `op` over `in` (n_in value ids) and returns its output value id (named `out_name`, or
 * generated when NULL), or -1 on allocation failure. `a` may be NULL (defaults). */
int cg_add_node(cg_graph *g, cg_op op, const char *node_name, const int *in, int n_in, const cg_attrs *a,
                const char *out_name);
/* Marks a value as a graph output. Returns 0, or -1 on allocation failure. */
int cg_add_output(cg_graph *g, int value);
/* Value id of `name`, or -1. Linear search: for loaders and user-facing look-ups, not hot paths. */
int cg_find_value(const cg_graph *g, const char *name);

#endif
