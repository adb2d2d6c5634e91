/* derive.h - what every method builds its graphs and passes from: graphs derived from the model's graph, a cache of
 * plans by input shapes, and backend memory held for one call.
 *
 * A method's graph is a prefix of method ops (making the model's inputs from what a call uploads: scaled, masked or
 * noisy inputs), the model, its gradient (cg_autodiff) and a suffix of method ops (weighting, summing, multiplying),
 * so that a call uploads its inputs once, runs whole chunks on the backend, and downloads the result once.
 */
#ifndef CATTR_DERIVE_H
#define CATTR_DERIVE_H

#include "exec/run.h"
#include "graph/autodiff.h"

/* A node of op `op` over values a and b (its output's id), or -1 when either is -1 (an earlier failure) or the node
 * cannot be added: builders chain these and check the last result once. */
static inline int cx_emit2(cg_graph *g, cg_op op, const char *name, int a, int b) {
    int in[2] = {a, b};
    return a < 0 || b < 0 ? -1 : cg_emit(g, op, name, in, 2, NULL);
}

/* The point of an integration path for the rows of a chunk: Gather(b, rows) + alpha * (Gather(x, rows) -
 * Gather(b, rows)), in Captum's order (IG's and the layer methods' path prefix); -1 on failure. */
static inline int cx_emit_path_point(cg_graph *g, int x, int b, int alpha, int rows) {
    int xt = cx_emit2(g, CG_GATHER, "__path_xt", x, rows), bt = cx_emit2(g, CG_GATHER, "__path_bt", b, rows);
    return cx_emit2(g, CG_ADD, "__path_point", bt, cx_emit2(g, CG_MUL, "__path_alpha_diff", alpha,
                                                             cx_emit2(g, CG_SUB, "__path_diff", xt, bt)));
}

/* Starts a graph derived from model graph m: an empty *g and *map, room for the id of every value of m (for
 * cx_graph_append_model). The caller frees both. Errors: CATTR_ERR_NO_MEMORY (nothing left allocated). */
cattr_status cx_derive_new(const cg_graph *m, cg_graph **g, int **map);

/* The other form of derived graph: *g a clone of m (nodes and values keep m's ids, so that state keyed to m's nodes
 * and values, such as LRP's rules, applies) with n_extra inputs added after m's, named names[k] (NULL: "__extra_<k>"),
 * their value ids in extra[k] (extra may be NULL when n_extra is 0). For a method whose additions are inputs and a
 * suffix: a seed, an index, the gradient (cg_autodiff) and ops on it. Errors: CATTR_ERR_NO_MEMORY (*g NULL). */
cattr_status cx_derive_clone(const cg_graph *m, int n_extra, const char *const *names, cg_graph **g, int *extra);

/* Appends a copy of model graph m to g: constants shared (borrowed), nodes with the same names, ops and attributes,
 * model input i read from value in_map[i] of g. Writes the id in g of every value of m to map[0..m->n_vals).
 * Errors: CATTR_ERR_NO_MEMORY. */
cattr_status cx_graph_append_model(cg_graph *g, const cg_graph *m, const int *in_map, int *map);

/* As cx_graph_append_model, with model values rep[0..n_rep) replaced by g's values rep_by[]: every node that reads
 * rep[k] reads rep_by[k] (the node computing rep[k] is still appended; map[rep[k]] is rep_by[k]). A second copy of m
 * in the same graph shares the first copy's constants. */
cattr_status cx_graph_append_model_replacing(cg_graph *g, const cg_graph *m, const int *in_map, int n_rep,
                                             const int *rep, const int *rep_by, int *map);

/* Attributed plus additional inputs of a call, at most. */
#define CX_MAX_IN 16

/* What a method that runs as a derived graph keeps from call to call besides its backend buffers: the graph, built
 * for one call shape (inputs, their ranks, additional inputs, target mode), the constants in the compute dtype and
 * the plans. A zeroed cx_derived is empty. */
typedef struct cx_derived {
    cg_graph *g;
    int n, n_add, rank[CX_MAX_IN];
    bool target;
    cx_consts *consts;
} cx_derived;

/* Frees the plans, the constants and the graph; d is empty again. */
void cx_derived_free(cx_derived *d);

#endif
