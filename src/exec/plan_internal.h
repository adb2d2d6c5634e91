/* plan_internal.h - what the planner's files share (plan.c: planning and running; consts.c; fold.c: shapes and Ifs
 * folded while planning; finite.c: the non-finite diagnosis). */
#ifndef CATTR_EXEC_PLAN_INTERNAL_H
#define CATTR_EXEC_PLAN_INTERNAL_H

#include "exec/plan.h"
#include "ops/elementwise.h"

#include "core/profile.h"
#include "ops/ops.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* graph inputs a plan takes (the prefix-continuing decoder has two per layer) */
#define CX_PLAN_MAX_IN 256

/* One transfer through the backend: host to backend, backend to host, or zeroing; with `prof` (the profiler's switch,
 * read once per run) a copy event. */
typedef enum { BE_COPY_IN, BE_COPY_OUT, BE_ZERO, BE_COPY_DEV } be_copy_kind;

/* Constants uploaded to a backend are shared by every cx_consts in the process: one upload per (backend, host
 * tensor, dtype), counted references. A model's weights so exist once on a device however many explainers, graphs
 * derived from the model and plan kinds use them. */
typedef struct dev_const {
    cx_backend *be;
    const cattr_tensor *t;
    const void *host; /* t->data and t->numel when uploaded, so that a tensor freed and another made at the same */
    int64_t numel;    /* address is not taken for it */
    cattr_dtype dtype;
    void *p;
    size_t bytes;
    int refs;
} dev_const;

struct cx_consts {
    cx_backend *be;
    cattr_dtype dtype;
    const cattr_tensor **src; /* which host tensor each slot was made from */
    cx_view *views;
    size_t *bytes;
    int n;
};

struct cx_plan {
    const cg_graph *g;
    cx_consts *consts;
    cx_backend *be;
    bool eager;
    int n_inputs;
    int in_ndim[CX_PLAN_MAX_IN];
    int64_t in_shape[CX_PLAN_MAX_IN][CATTR_MAX_DIMS];
    cattr_dtype in_dtype[CX_PLAN_MAX_IN];
    cattr_dtype consts_dtype;
    cx_view *views;   /* per value */
    int *root;        /* per value: the value whose storage it uses (itself unless a view alias) */
    size_t *offset;   /* per root value: arena offset (planned) */
    size_t *bytes;    /* per value */
    int *last_use;    /* per root: position in order of the last reader (n_order for outputs) */
    int *order;       /* node ids to run */
    cg_node *nodes;   /* the nodes to run, in order (copies: fusion sets flags on them) */
    int n_order;
    int n_fused;
    int *outs;
    int n_outs;
    void *arena;
    size_t arena_bytes;
    bool arena_external; /* lent by cx_plan_use_arena: not ours to free */
    size_t eager_peak;
    bool check_finite; /* cx_plan_set_check_finite: look for the node where NaN or Inf first appears */
    bool prof;         /* the profiler's switch, read at the start of each run */
    struct if_ctx *ifc; /* while planning a graph with If nodes: their resolution (below); NULL otherwise */
    struct folded **fmemo; /* while planning: per value, what fold_value computed (NULL where not yet), so that a
                            * shape computation is folded once per value however many paths reach it */
    cx_plan **sub;         /* per node to run: a MapRows node's plan of its body for one pass (NULL otherwise) */
    struct rt_if *rt;      /* the Ifs decided when the plan runs (NULL when none) */
    cx_consts **sub_cc;    /* and the body's constants */
};

/* The resolution of a graph's If nodes while it is planned (see "If" below): choice IF_AT_RUN for an If whose
 * condition reads the data. */
#define IF_AT_RUN 3
typedef struct if_ctx {
    int8_t *state; /* per value: 0 view unknown, 1 pending, 2 known */
    int *stack, sp;
    int *choice;   /* per node: 1 or 2 for a resolved If (the input taken), 0 unresolved, -1 failed */
    bool *dead;    /* per value: zeros of the branch not taken */
    cg_node *rw;   /* the graph's nodes with the Ifs resolved */
} if_ctx;

struct folded;

/* The Ifs whose condition reads the data (IF_AT_RUN): both branches are planned, and the If kernel copies the branch
 * its condition takes. The gradient autodiff gives such an If's branches is an If of the same condition with one
 * branch absent (zeros): under each value of a condition, the gradient nodes that read only such zeros are dead, as
 * the planner marks them when it folds a condition (if_rewrite); when the plan runs, the first If of a condition reads
 * it (one element copied out) and the dead nodes after it write zeros instead of running. So the branch not taken
 * adds exactly nothing to the gradient, even where its own values are not finite (a division by a zero variance in
 * the branch that checks for it). */
typedef struct rt_if {
    int n_cond, n_order;
    int *cond;      /* the conditions' value ids */
    uint8_t *dead;  /* [n_cond][2][n_order]: 1 where the node writes zeros when condition j is false (0) / true (1) */
    int8_t *state;  /* per run, per condition: -1 not read yet, else its truth */
    uint8_t *skip;  /* per run, per node position: writes zeros */
} rt_if;

#define FOLD_MAX CG_MAX_INTS

/* A value computed while folding: its int64 elements (row-major) and its shape. */
typedef struct folded {
    int64_t v[FOLD_MAX];
    int n, ndim;
    int64_t shape[CATTR_MAX_DIMS];
} folded;

enum { NF_NAN = 1, NF_INF = 2 };

#define SRC_OUTSIDE (-2)
typedef struct {
    int *nf, *nan_src, *inf_src, *nan_from_inf;
} fcheck;

cattr_status cx_pl_be_copy(cx_backend *be, bool prof, be_copy_kind kind, void *dst, const void *src, size_t bytes);
/* The view of constant v of g on c's backend: in the compute dtype (int64 stays int64), or with `stored` a
 * checkpoint's 16-bit matrix as stored; made once per (backend, tensor, dtype) for the process (host memory: the
 * tensor itself where the dtype is its own). */
cattr_status cx_pl_consts_get(cx_consts *c, const cg_graph *g, int v, bool stored, cx_view *out);
void cx_pl_fcheck_free(fcheck *fc);
cattr_status cx_pl_fcheck_node(cx_plan *p, fcheck *fc, int k);
cattr_status cx_pl_fcheck_start(cx_plan *p, fcheck *fc);
cattr_status cx_pl_finite_verdict(const cx_plan *p, const fcheck *fc);
cattr_status cx_pl_if_resolve(cx_plan *p, const cg_graph *g, int i);
void cx_pl_if_rewrite(cx_plan *p, const cg_graph *g, cg_node *rw);
cattr_status cx_pl_infer_node(cx_plan *p, const cg_graph *g, cg_node *n);
cattr_status cx_pl_place(cx_plan *p);
void cx_pl_shapes_text(const cx_plan *p, const cg_node *n, char *buf, size_t size);

#endif
