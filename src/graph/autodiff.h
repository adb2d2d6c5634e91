/* autodiff.h - reverse-mode differentiation as a graph transform.
 *
 * cg_autodiff appends to a graph the nodes that compute d(sum(seed * y))/d(wrt[k]) for each requested value,
 * touching only nodes that lie on a path from some wrt value to y: weights never get gradients. Each op's backward
 * rule is looked up in a cg_rules table; a method may replace the rule of an op kind (by_op) or of single nodes
 * (by_node), which is how DeepLift, guided backprop and LRP plug in without engine changes.
 */
#ifndef CATTR_AUTODIFF_H
#define CATTR_AUTODIFF_H

#include "graph.h"

/* Appends nodes computing the input gradients of node `ni` from `gy` (the gradient of its output). For each input i
 * with need[i] true, writes gx[i] = a value id, or -1 when that gradient is zero. The rule must copy what it needs
 * from g->nodes[ni] before adding nodes (adding may move the node array). */
typedef cattr_status (*cg_backward_fn)(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *user);

typedef struct cg_rules {
    cg_backward_fn by_op[CG_OP_COUNT]; /* NULL: the op has no gradient (an error if one is needed) */
    /* Optional per-node override: returns the rule for node ni, or NULL to use by_op. */
    cg_backward_fn (*by_node)(const cg_graph *g, int ni, void *user);
    void *user;
    /* Optional: called with the summed gradient *grad of each wrt value before cg_autodiff returns it, and may
     * replace it: a method's change to a value's total gradient that the value's producer would apply, for the wrt
     * values, whose producers autodiff does not visit (LRP's multiplication of a layer's input by its gradient). */
    cattr_status (*wrt_grad)(cg_graph *g, int value, int *grad, void *user);
} cg_rules;

/* Fills `r` with the standard gradient of every differentiable op. */
void cg_rules_default(cg_rules *r);

/* Differentiates y (seeded with the value `seed`, of y's shape) with respect to wrt[0..n_wrt-1]; writes the gradient
 * value ids to grad_out (a ZerosLike node for a value y does not depend on).
 * Errors: CATTR_ERR_UNSUPPORTED naming a node whose op has no backward rule, CATTR_ERR_NO_MEMORY. */
cattr_status cg_autodiff(cg_graph *g, int y, int seed, const int *wrt, int n_wrt, const cg_rules *rules,
                         int *grad_out);

/* Helpers for rules: append one node; return the value id or -1 (and set the error) on allocation failure. */
int cg_emit(cg_graph *g, cg_op op, const char *base, const int *in, int n_in, const cg_attrs *a);

#endif
