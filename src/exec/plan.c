/* plan.c - the planned and eager executors (see plan.h). */
#include "exec/plan.h"
#include "ops/elementwise.h"

#include "core/profile.h"
#include "ops/ops.h"

#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* graph inputs a plan takes (the prefix-continuing decoder has two per layer) */
#define CX_PLAN_MAX_IN 256

/* One transfer through the backend: host to backend, backend to host, or zeroing; with `prof` (the profiler's switch,
 * read once per run) a copy event. */
typedef enum { BE_COPY_IN, BE_COPY_OUT, BE_ZERO, BE_COPY_DEV } be_copy_kind;
static cattr_status be_copy(cx_backend *be, bool prof, be_copy_kind kind, void *dst, const void *src, size_t bytes) {
    uint64_t t0 = prof ? cx_prof_now() : 0;
    cattr_status st = kind == BE_COPY_IN    ? be->copy_in(be->ctx, dst, src, bytes)
                      : kind == BE_COPY_OUT ? be->copy_out(be->ctx, dst, src, bytes)
                      : kind == BE_COPY_DEV ? be->copy_dev(be->ctx, dst, src, bytes)
                                            : be->memset_zero(be->ctx, dst, bytes);
    if (prof && kind == BE_COPY_DEV) /* inside the backend: not a transfer between host and device */
        cx_prof_span("device", "copy within the device", t0, cx_prof_now());
    else if (prof)
        cx_prof_copy(be->name, kind == BE_COPY_IN ? "in" : kind == BE_COPY_OUT ? "out" : "zero", bytes, t0,
                     cx_prof_now());
    return st;
}

cattr_status cx_copy_in(cx_backend *be, void *dev, const void *host, size_t bytes) {
    return be_copy(be, cx_prof_on(), BE_COPY_IN, dev, host, bytes);
}
cattr_status cx_copy_out(cx_backend *be, void *host, const void *dev, size_t bytes) {
    return be_copy(be, cx_prof_on(), BE_COPY_OUT, host, dev, bytes);
}
cattr_status cx_copy_dev(cx_backend *be, void *dst, const void *src, size_t bytes) {
    return be_copy(be, cx_prof_on(), BE_COPY_DEV, dst, src, bytes);
}
cattr_status cx_zero(cx_backend *be, void *dev, size_t bytes) {
    return be_copy(be, cx_prof_on(), BE_ZERO, dev, NULL, bytes);
}

/* ---- constants -------------------------------------------------------------------------------------------- */

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
static pthread_mutex_t g_dc_mu = PTHREAD_MUTEX_INITIALIZER;
static dev_const *g_dc;
static int g_dc_n, g_dc_cap;

/* A reference to t on be in dtype dt (uploaded on first use). Errors: CATTR_ERR_NO_MEMORY, the backend's. */
static cattr_status dc_acquire(cx_backend *be, const cattr_tensor *t, cattr_dtype dt, const char *name, void **res,
                               size_t *bytes) {
    cattr_status st = CATTR_ERR_NO_MEMORY;
    *res = NULL;
    pthread_mutex_lock(&g_dc_mu);
    for (int i = 0; i < g_dc_n; i++) {
        dev_const *d = &g_dc[i];
        if (d->be == be && d->t == t && d->host == t->data && d->numel == t->numel && d->dtype == dt) {
            d->refs++;
            *bytes = d->bytes;
            *res = d->p;
            st = CATTR_OK;
            goto out;
        }
    }
    if (g_dc_n == g_dc_cap) {
        int cap = g_dc_cap ? 2 * g_dc_cap : 64;
        dev_const *n = realloc(g_dc, (size_t)cap * sizeof *n);
        if (!n) {
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            goto out;
        }
        g_dc = n;
        g_dc_cap = cap;
    }
    cattr_tensor *conv = NULL;
    const cattr_tensor *use = t;
    if (dt != t->dtype) {
        if ((st = cattr_tensor_convert(t, dt, &conv)) != CATTR_OK) goto out;
        use = conv;
    }
    size_t nb = (size_t)use->numel * cattr_dtype_size(dt);
    void *p = be->alloc(be->ctx, nb);
    if (!p) {
        st = cx_fail(CATTR_ERR_NO_MEMORY, "cannot allocate constant '%s' (%zu bytes) on device '%s'", name, nb,
                     be->name);
    } else if ((st = be_copy(be, cx_prof_on(), BE_COPY_IN, p, use->data, nb)) != CATTR_OK) {
        be->free(be->ctx, p, nb);
    } else {
        g_dc[g_dc_n++] = (dev_const){be, t, t->data, t->numel, dt, p, nb, 1};
        *bytes = nb;
        *res = p;
    }
    cattr_tensor_free(conv);
out:
    pthread_mutex_unlock(&g_dc_mu);
    return st;
}

static void dc_release(cx_backend *be, void *p) {
    pthread_mutex_lock(&g_dc_mu);
    for (int i = 0; i < g_dc_n; i++)
        if (g_dc[i].be == be && g_dc[i].p == p) {
            if (--g_dc[i].refs == 0) {
                be->free(be->ctx, p, g_dc[i].bytes);
                g_dc[i] = g_dc[--g_dc_n];
            }
            break;
        }
    pthread_mutex_unlock(&g_dc_mu);
}

struct cx_consts {
    cx_backend *be;
    cattr_dtype dtype;
    const cattr_tensor **src; /* which host tensor each slot was made from */
    cx_view *views;
    size_t *bytes;
    int n;
};

cattr_status cx_consts_new(cx_backend *be, cattr_dtype dtype, cx_consts **out) {
    cx_consts *c = calloc(1, sizeof *c);
    if (!c) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    c->be = be;
    c->dtype = dtype;
    *out = c;
    return CATTR_OK;
}

void cx_consts_free(cx_consts *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++)
        if (c->views[i].data && c->bytes[i]) dc_release(c->be, c->views[i].data);
    free(c->src);
    free(c->views);
    free(c->bytes);
    free(c);
}

static cattr_status consts_get(cx_consts *c, const cg_graph *g, int v, cx_view *out) {
    if (v >= c->n) {
        int n = g->n_vals > v + 1 ? g->n_vals : v + 1;
        const cattr_tensor **s = realloc(c->src, (size_t)n * sizeof *s);
        if (s) c->src = s;
        cx_view *vw = realloc(c->views, (size_t)n * sizeof *vw);
        if (vw) c->views = vw;
        size_t *b = realloc(c->bytes, (size_t)n * sizeof *b);
        if (b) c->bytes = b;
        if (!s || !vw || !b) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        for (int i = c->n; i < n; i++) {
            c->src[i] = NULL;
            memset(&c->views[i], 0, sizeof c->views[i]);
            c->bytes[i] = 0;
        }
        c->n = n;
    }
    const cattr_tensor *t = g->vals[v].data;
    if (c->src[v] != t) { /* a different graph reused this id: replace */
        if (c->views[v].data && c->bytes[v]) dc_release(c->be, c->views[v].data);
        c->views[v].data = NULL;
        c->src[v] = NULL;
    }
    if (!c->views[v].data) {
        cattr_dtype dt = t->dtype == CATTR_INT64 ? CATTR_INT64 : c->dtype;
        if (dt == t->dtype && c->be->host_memory) { /* used in place; bytes 0 marks it as not ours */
            c->views[v].dtype = dt;
            c->views[v].ndim = t->ndim;
            memcpy(c->views[v].shape, t->shape, sizeof t->shape);
            c->views[v].data = t->data;
            c->bytes[v] = 0;
            c->src[v] = t;
            *out = c->views[v];
            return CATTR_OK;
        }
        size_t bytes = 0;
        void *p = NULL;
        CX_CHECK(dc_acquire(c->be, t, dt, g->vals[v].name, &p, &bytes));
        c->views[v].dtype = dt;
        c->views[v].ndim = t->ndim;
        memcpy(c->views[v].shape, t->shape, sizeof t->shape);
        c->views[v].data = p;
        c->bytes[v] = bytes;
        c->src[v] = t;
    }
    *out = c->views[v];
    return CATTR_OK;
}

/* ---- plans -------------------------------------------------------------------------------------------------- */

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

static void if_ctx_free(if_ctx *c) {
    if (!c) return;
    free(c->state);
    free(c->stack);
    free(c->choice);
    free(c->dead);
    free(c->rw);
    free(c);
}

struct folded;
static void fmemo_free(cx_plan *p) {
    if (!p->fmemo) return;
    for (int v = 0; v < p->g->n_vals; v++) free(p->fmemo[v]);
    free(p->fmemo);
    p->fmemo = NULL;
}

static bool is_view_op(cg_op op) {
    return op == CG_IDENTITY || op == CG_RESHAPE || op == CG_FLATTEN || op == CG_SQUEEZE || op == CG_UNSQUEEZE ||
           op == CG_RESHAPE_LIKE;
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Inputs whose kernels read only the shape (fixed when planning), never the data. */
static bool shape_only_input(cg_op op, int j) {
    return (j == 1 && (op == CG_REDUCE_SUM_LIKE || op == CG_RESHAPE_LIKE || op == CG_SLICE_GRAD || op == CG_PAD_GRAD)) ||
           (j == 2 && op == CG_SEQ_PICK_GRAD) || (j == 0 && op == CG_ZEROS_LIKE);
}

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

static void rt_if_free(rt_if *r) {
    if (!r) return;
    free(r->cond);
    free(r->dead);
    free(r->state);
    free(r->skip);
    free(r);
}

void cx_plan_free(cx_plan *p) {
    if (!p) return;
    if (p->arena && !p->arena_external) p->be->free(p->be->ctx, p->arena, p->arena_bytes);
    free(p->views);
    free(p->root);
    free(p->offset);
    free(p->bytes);
    free(p->last_use);
    free(p->order);
    free(p->nodes);
    free(p->outs);
    if_ctx_free(p->ifc);
    fmemo_free(p);
    for (int k = 0; p->sub && k < p->n_order; k++) {
        cx_plan_free(p->sub[k]);
        cx_consts_free(p->sub_cc[k]);
    }
    free(p->sub);
    free(p->sub_cc);
    rt_if_free(p->rt);
    free(p);
}

bool cx_plan_matches(const cx_plan *p, const int *in_ndim, const int64_t (*in_shape)[CATTR_MAX_DIMS],
                     const cattr_dtype *in_dtype) {
    for (int i = 0; i < p->n_inputs; i++) {
        if (!cx_shape_eq(p->in_ndim[i], p->in_shape[i], in_ndim[i], in_shape[i])) return false;
        if (p->in_dtype[i] != (in_dtype ? in_dtype[i] : p->consts_dtype)) return false;
    }
    return true;
}

const cx_view *cx_plan_view(const cx_plan *p, int v) { return &p->views[v]; }
size_t cx_plan_bytes(const cx_plan *p) { return p->eager ? p->eager_peak : p->arena_bytes; }

void cx_plan_use_arena(cx_plan *p, void *arena) {
    if (p->eager || p->arena == arena) return;
    if (p->arena && !p->arena_external) p->be->free(p->be->ctx, p->arena, p->arena_bytes);
    p->arena = arena;
    p->arena_external = arena != NULL;
}

/* First-fit placement of [lo, hi) lifetimes into one arena. */
typedef struct { size_t off, size; int end; } block;

static cattr_status place(cx_plan *p) {
    const cg_graph *g = p->g;
    int nb = 0, cap = 64;
    block *live = malloc((size_t)cap * sizeof *live);
    if (!live) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    size_t top = 0;
    /* graph inputs are defined at position -1, node outputs at their position */
    for (int pos = -1; pos < p->n_order; pos++) {
        /* release blocks whose last use is before this position */
        for (int i = 0; i < nb;)
            if (live[i].end < pos) live[i] = live[--nb];
            else i++;
        int defs[CX_PLAN_MAX_IN], nd = 0;
        if (pos < 0) {
            for (int i = 0; i < g->n_inputs && nd < CX_PLAN_MAX_IN; i++)
                if (p->last_use[g->inputs[i]] >= 0) defs[nd++] = g->inputs[i];
        } else {
            int v = p->nodes[pos].out;
            if (p->root[v] == v) defs[nd++] = v;
        }
        for (int d = 0; d < nd; d++) {
            int v = defs[d];
            size_t need = align64(p->bytes[v]);
            /* sort live blocks by offset and find the first gap that fits */
            for (int i = 1; i < nb; i++)
                for (int j = i; j > 0 && live[j - 1].off > live[j].off; j--) {
                    block t = live[j];
                    live[j] = live[j - 1];
                    live[j - 1] = t;
                }
            size_t off = 0;
            for (int i = 0; i < nb; i++) {
                if (live[i].off >= off + need) break;
                if (live[i].off + live[i].size > off) off = live[i].off + live[i].size;
            }
            if (nb == cap) {
                cap *= 2;
                block *nl = realloc(live, (size_t)cap * sizeof *nl);
                if (!nl) {
                    free(live);
                    return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
                }
                live = nl;
            }
            live[nb++] = (block){off, need, p->last_use[v]};
            p->offset[v] = off;
            if (off + need > top) top = off + need;
        }
    }
    free(live);
    p->arena_bytes = top;
    return CATTR_OK;
}

static cattr_status plan_new(const cg_graph *g, cx_consts *consts, bool eager, const int *in_ndim,
                             const int64_t (*in_shape)[CATTR_MAX_DIMS], const cattr_dtype *in_dtype, const int *outs,
                             int n_outs, cx_plan **out);

/* cx_plan_new is plan_new, timed as a "plan build" span when the profiler is on. */
cattr_status cx_plan_new(const cg_graph *g, cx_consts *consts, bool eager, const int *in_ndim,
                         const int64_t (*in_shape)[CATTR_MAX_DIMS], const cattr_dtype *in_dtype, const int *outs,
                         int n_outs, cx_plan **out) {
    if (!cx_prof_on()) return plan_new(g, consts, eager, in_ndim, in_shape, in_dtype, outs, n_outs, out);
    uint64_t t0 = cx_prof_now();
    cattr_status st = plan_new(g, consts, eager, in_ndim, in_shape, in_dtype, outs, n_outs, out);
    cx_prof_span("plan", "plan build", t0, cx_prof_now());
    return st;
}

/* ---- shapes computed from shapes -----------------------------------------------------------------------------
 * Exporters compute target shapes from the input's shape: Shape -> Gather -> Div -> Cast -> Unsqueeze -> Concat ->
 * Reshape. A graph stays shape-polymorphic: when a call is planned for concrete input shapes, such a shape input is
 * evaluated here on the host from the shapes the plan has inferred and the constants, and becomes the node's
 * attributes; the nodes that computed it never run. */

bool cx_shape_value_input(const cg_node *n, int j) {
    return (n->op == CG_RESHAPE && j == 1) || (n->op == CG_SLICE && j >= 1) || (n->op == CG_SLICE_GRAD && j >= 2) ||
           (n->op == CG_CONSTANT_OF_SHAPE && j == 0) || (n->op == CG_EXPAND && j == 1) ||
           (n->op == CG_TILE && j == 1) || (n->op == CG_PAD && j == 1) || (n->op == CG_PAD_GRAD && j == 2) || (n->op == CG_RESIZE && j == 1) ||
           n->op == CG_RANGE;
}

#define FOLD_MAX CG_MAX_INTS

/* A value computed while folding: its int64 elements (row-major) and its shape. */
typedef struct folded {
    int64_t v[FOLD_MAX];
    int n, ndim;
    int64_t shape[CATTR_MAX_DIMS];
} folded;

static cattr_status fold_value(cx_plan *p, const cg_graph *g, int v, int depth, folded *f);
static cattr_status fold_compute(cx_plan *p, const cg_graph *g, int v, int depth, folded *f);
static cattr_status if_ensure(cx_plan *p, const cg_graph *g, int v0);
static cattr_status if_resolve(cx_plan *p, const cg_graph *g, int i);

/* Writes the folded shape inputs of node r (cx_shape_value_input; fi[j] for input j) into its attributes: Range's three
 * scalars, Slice's starts, ends, axes and steps, or the one shape (Reshape's target, Expand's, ConstantOfShape's,
 * Tile's repeats, Pad's pads). The caller drops the inputs from `first` on. */
static cattr_status apply_folded(cg_node *r, int first, const folded *fi) {
    if (r->op == CG_RANGE) {
        for (int j = 0; j < 3; j++) {
            if (fi[j].n != 1) return cx_fail(CATTR_ERR_SHAPE, "input %d is not a scalar", j);
            r->a.ints[j] = fi[j].v[0];
        }
        r->a.n_ints = 3;
        return CATTR_OK;
    }
    if (r->op == CG_SLICE || r->op == CG_SLICE_GRAD) {
        int cnt[4];
        for (int j = 0; j < 4; j++) cnt[j] = first + j < r->n_in && r->in[first + j] >= 0 ? fi[first + j].n : -1;
        int ns = cnt[0];
        if (ns < 0 || cnt[1] != ns || (cnt[2] >= 0 && cnt[2] != ns) || (cnt[3] >= 0 && cnt[3] != ns) || 4 * ns > CG_MAX_INTS)
            return cx_fail(CATTR_ERR_SHAPE, "starts, ends, axes and steps differ in length");
        for (int i = 0; i < ns; i++) {
            r->a.ints[i] = fi[first].v[i];
            r->a.ints[ns + i] = fi[first + 1].v[i];
            r->a.ints[2 * ns + i] = cnt[2] >= 0 ? fi[first + 2].v[i] : i;
            r->a.ints[3 * ns + i] = cnt[3] >= 0 ? fi[first + 3].v[i] : 1;
        }
        r->a.n_ints = 4 * ns;
        return CATTR_OK;
    }
    int cnt = fi[first].n;
    int most = r->op == CG_RESHAPE ? FOLD_MAX : r->op == CG_PAD || r->op == CG_PAD_GRAD ? 2 * CATTR_MAX_DIMS : CATTR_MAX_DIMS;
    if (cnt > most) return cx_fail(CATTR_ERR_SHAPE, "%d values, at most %d", cnt, most);
    memcpy(r->a.ints, fi[first].v, (size_t)cnt * sizeof *fi[first].v);
    r->a.n_ints = cnt;
    return CATTR_OK;
}

static int first_shape_input(const cg_node *r) {
    for (int j = 0; j < r->n_in; j++)
        if (cx_shape_value_input(r, j)) return j;
    return -1;
}

/* Element k of the folded node's output (shape `o`), read from its folded inputs: the shape ops and the integer
 * arithmetic exporters compute shapes with. */
static cattr_status fold_elem(const cg_node *nd, const folded *fi, const cx_view *o, int64_t k, int64_t *out) {
    int64_t c[CATTR_MAX_DIMS], rem = k;
    for (int d = o->ndim - 1; d >= 0; d--) {
        c[d] = rem % o->shape[d];
        rem /= o->shape[d];
    }
#define AT(j) cx_bcast_at(o->ndim, c, fi[j].ndim, fi[j].shape)
    switch (nd->op) {
    case CG_IDENTITY: case CG_UNSQUEEZE: case CG_SQUEEZE: case CG_CAST: case CG_RESHAPE: case CG_FLATTEN:
        *out = fi[0].v[k];
        return CATTR_OK;
    case CG_EXPAND: case CG_TILE:
        if (nd->op == CG_TILE) {
            int64_t at = 0;
            for (int d = 0; d < o->ndim; d++) at = at * fi[0].shape[d] + c[d] % fi[0].shape[d];
            *out = fi[0].v[at];
        } else {
            *out = fi[0].v[AT(0)];
        }
        return CATTR_OK;
    case CG_CONSTANT_OF_SHAPE: *out = (int64_t)nd->a.alpha; return CATTR_OK;
    case CG_RANGE: *out = cx_range_at(nd->a.ints[0], nd->a.ints[2], k); return CATTR_OK;
    case CG_WHERE: *out = fi[0].v[AT(0)] ? fi[1].v[AT(1)] : fi[2].v[AT(2)]; return CATTR_OK;
    case CG_TRANSPOSE: case CG_SLICE: {
        const folded *x = &fi[0];
        int64_t at = 0, stride = 1, st[CATTR_MAX_DIMS], sp[CATTR_MAX_DIMS], cnt[CATTR_MAX_DIMS];
        if (nd->op == CG_SLICE) cx_slice_resolve(&nd->a, x->ndim, x->shape, st, sp, cnt);
        int64_t strides[CATTR_MAX_DIMS];
        for (int d = x->ndim - 1; d >= 0; d--) {
            strides[d] = stride;
            stride *= x->shape[d];
        }
        for (int d = 0; d < o->ndim; d++) {
            if (nd->op == CG_SLICE) {
                at += (st[d] + c[d] * sp[d]) * strides[d];
            } else {
                int pd = nd->a.n_ints ? (int)nd->a.ints[d] : o->ndim - 1 - d;
                at += c[d] * strides[pd < 0 ? pd + x->ndim : pd];
            }
        }
        *out = x->v[at];
        return CATTR_OK;
    }
    case CG_CONCAT: {
        int ax = (int)(nd->a.axis < 0 ? nd->a.axis + o->ndim : nd->a.axis);
        int64_t pos = c[ax];
        for (int j = 0; j < nd->n_in; j++) {
            if (pos < fi[j].shape[ax]) {
                int64_t at = 0;
                for (int d = 0; d < o->ndim; d++) at = at * fi[j].shape[d] + (d == ax ? pos : c[d]);
                *out = fi[j].v[at];
                return CATTR_OK;
            }
            pos -= fi[j].shape[ax];
        }
        return cx_fail(CATTR_ERR_INTERNAL, "node '%s': concat position out of range", nd->name);
    }
    case CG_GATHER: { /* out = data[:axis] + indices + data[axis+1:] */
        const folded *x = &fi[0], *ix = &fi[1];
        int ax = (int)(nd->a.axis < 0 ? nd->a.axis + x->ndim : nd->a.axis);
        int64_t iat = 0;
        for (int d = 0; d < ix->ndim; d++) iat = iat * ix->shape[d] + c[ax + d];
        int64_t i = ix->v[iat] < 0 ? ix->v[iat] + x->shape[ax] : ix->v[iat];
        if (i < 0 || i >= x->shape[ax])
            return cx_fail(CATTR_ERR_SHAPE, "node '%s': index %lld out of range", nd->name, (long long)ix->v[iat]);
        int64_t at = 0;
        for (int d = 0; d < x->ndim; d++)
            at = at * x->shape[d] + (d < ax ? c[d] : d == ax ? i : c[d - 1 + ix->ndim]);
        *out = x->v[at];
        return CATTR_OK;
    }
    case CG_ADD: case CG_SUB: case CG_MUL: case CG_DIV: case CG_EQUAL: case CG_MOD: {
        int64_t x = fi[0].v[AT(0)], y = fi[1].v[AT(1)];
        bool over = false;
        switch (nd->op) {
        case CG_ADD: over = __builtin_add_overflow(x, y, out); break;
        case CG_SUB: over = __builtin_sub_overflow(x, y, out); break;
        case CG_MUL: over = __builtin_mul_overflow(x, y, out); break;
        case CG_EQUAL: *out = cx_compare((int)nd->a.index, (double)x, (double)y); break;
        case CG_MOD: *out = cx_mod_i(x, y, (int)nd->a.index); break;
        default:
            if (y == 0) return cx_fail(CATTR_ERR_SHAPE, "node '%s': division by zero", nd->name);
            over = x == INT64_MIN && y == -1;
            if (!over) *out = x / y;
        }
        if (over) return cx_fail(CATTR_ERR_SHAPE, "node '%s': the shape arithmetic overflows", nd->name);
        return CATTR_OK;
    }
    default:
        return cx_fail(CATTR_ERR_SHAPE, "node '%s' (op %s) computes a shape from data: only shapes and constants can "
                                        "give a shape", nd->name, cg_op_names[nd->op]);
    }
#undef AT
}

/* The int64 values and the shape of value v, computed from constants and the shapes the plan has inferred so far
 * (Shape reads the view of its input). Each node's output shape comes from its shape rule (cx_infer). */
static cattr_status fold_value(cx_plan *p, const cg_graph *g, int v, int depth, folded *f) {
    const cg_value *val = &g->vals[v];
    f->n = 0;
    f->ndim = 0;
    if (depth > 64) return cx_fail(CATTR_ERR_SHAPE, "value '%s': shape computation too deep to fold", val->name);
    if (!p->fmemo && !(p->fmemo = calloc((size_t)g->n_vals, sizeof *p->fmemo)))
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (p->fmemo[v]) {
        *f = *p->fmemo[v];
        return CATTR_OK;
    }
    cattr_status st = fold_compute(p, g, v, depth, f);
    if (st == CATTR_OK && (p->fmemo[v] = malloc(sizeof *f))) *p->fmemo[v] = *f; /* no memory: not kept, no error */
    return st;
}

/* fold_value without the memo. */
static cattr_status fold_compute(cx_plan *p, const cg_graph *g, int v, int depth, folded *f) {
    const cg_value *val = &g->vals[v];
    if (val->kind == CG_VAL_CONST) {
        const cattr_tensor *t = val->data;
        if (t->numel > FOLD_MAX) return cx_fail(CATTR_ERR_SHAPE, "constant '%s' is too long for a shape", val->name);
        for (int64_t k = 0; k < t->numel; k++)
            f->v[k] = t->dtype == CATTR_INT64 ? ((const int64_t *)t->data)[k] : (int64_t)cx_tensor_get(t, k);
        f->n = (int)t->numel;
        f->ndim = t->ndim;
        memcpy(f->shape, t->shape, (size_t)t->ndim * sizeof *t->shape);
        return CATTR_OK;
    }
    if (val->kind != CG_VAL_NODE)
        return cx_fail(CATTR_ERR_SHAPE, "a shape is computed from input '%s': it must depend only on shapes and "
                                        "constants", val->name);
    const cg_node *nd = &g->nodes[val->producer];
    if (nd->op == CG_IF) { /* the value of the branch taken */
        if (!p->ifc) return cx_fail(CATTR_ERR_INTERNAL, "node '%s' (op If) outside planning", nd->name);
        CX_CHECK(if_resolve(p, g, val->producer));
        if (p->ifc->choice[val->producer] == IF_AT_RUN)
            return cx_fail(CATTR_ERR_SHAPE, "node '%s' (op If) is decided when the call runs (its condition reads the "
                           "data): a shape cannot come through it", nd->name);
        int ch = nd->in[p->ifc->choice[val->producer]];
        if (ch < 0) return cx_fail(CATTR_ERR_SHAPE, "node '%s' (op If): the branch taken has no value", nd->name);
        return fold_value(p, g, ch, depth + 1, f);
    }
    if (nd->op == CG_SHAPE) {
        if (p->ifc) CX_CHECK(if_ensure(p, g, nd->in[0])); /* folding an If's condition before the shapes pass */
        const cx_view *x = &p->views[nd->in[0]];
        if (nd->a.index == 1) { /* Size */
            f->v[f->n++] = cx_view_numel(x);
            return CATTR_OK;
        }
        int64_t lo = nd->a.n_ints > 0 ? nd->a.ints[0] : 0, hi = nd->a.n_ints > 1 ? nd->a.ints[1] : x->ndim;
        if (lo < 0) lo += x->ndim;
        if (hi < 0) hi += x->ndim;
        lo = lo < 0 ? 0 : lo > x->ndim ? x->ndim : lo;
        hi = hi < lo ? lo : hi > x->ndim ? x->ndim : hi;
        for (int64_t k = lo; k < hi; k++) f->v[f->n++] = x->shape[k];
        f->ndim = 1;
        f->shape[0] = f->n;
        return CATTR_OK;
    }
    folded *fi = malloc((size_t)CG_MAX_IN * sizeof *fi);
    if (!fi) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_status st = CATTR_OK;
    cg_node tmp = *nd;
    cx_view in[CG_MAX_IN], o;
    memset(in, 0, sizeof in);
    memset(&o, 0, sizeof o);
    for (int j = 0; j < nd->n_in && st == CATTR_OK; j++) {
        if (nd->in[j] < 0) continue;
        st = fold_value(p, g, nd->in[j], depth + 1, &fi[j]);
        in[j].dtype = CATTR_INT64;
        in[j].ndim = fi[j].ndim;
        memcpy(in[j].shape, fi[j].shape, sizeof in[j].shape);
    }
    int first = first_shape_input(nd);
    if (st == CATTR_OK && first >= 0) {
        st = apply_folded(&tmp, first, fi);
        tmp.n_in = first;
    }
    if (st == CATTR_OK && (tmp.op == CG_CAST || tmp.op == CG_CONSTANT_OF_SHAPE)) tmp.a.index = 1; /* int64 values */
    if (st == CATTR_OK) st = cx_infer(&tmp, in, &o);
    int64_t cnt = st == CATTR_OK ? cx_view_numel(&o) : 0;
    if (st == CATTR_OK && (cnt < 0 || cnt > FOLD_MAX))
        st = cx_fail(CATTR_ERR_SHAPE, "node '%s': too many values for a shape", nd->name);
    for (int64_t k = 0; k < cnt && st == CATTR_OK; k++) st = fold_elem(&tmp, fi, &o, k, &f->v[k]);
    if (st == CATTR_OK) {
        f->n = (int)cnt;
        f->ndim = o.ndim;
        memcpy(f->shape, o.shape, sizeof f->shape);
    }
    free(fi);
    return st;
}

/* Folds node r's shape inputs (cx_shape_value_input) into its attributes and drops them: Reshape's target, Expand's and
 * ConstantOfShape's shape, Slice's (and SliceGrad's) starts, ends, axes and steps, Tile's repeats, Pad's pads,
 * Range's scalars. Errors: CATTR_ERR_SHAPE naming the node. */
static cattr_status fold_node(cx_plan *p, const cg_graph *g, cg_node *r) {
    int first = first_shape_input(r);
    if (first < 0) return CATTR_OK;
    folded *fi = malloc((size_t)CG_MAX_IN * sizeof *fi);
    if (!fi) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_status st = CATTR_OK;
    for (int j = first; j < r->n_in && st == CATTR_OK; j++) {
        fi[j].n = 0;
        if (r->in[j] >= 0) st = fold_value(p, g, r->in[j], 0, &fi[j]);
        else if (r->op == CG_RANGE) st = cx_fail(CATTR_ERR_SHAPE, "input %d is missing", j);
    }
    if (st == CATTR_OK) st = apply_folded(r, first, fi);
    free(fi);
    if (st != CATTR_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", cattr_last_error());
        return cx_fail(CATTR_ERR_SHAPE, "node '%s' (op %s): %s", r->name, cg_op_names[r->op], msg);
    }
    r->n_in = first;
    return CATTR_OK;
}

/* The output view (shape and dtype, no data) of node n, a copy the caller owns: its shape inputs folded into its
 * attributes, then its shape rule. Errors: CATTR_ERR_SHAPE naming the node. */
static cattr_status infer_node(cx_plan *p, const cg_graph *g, cg_node *n) {
    CX_CHECK(fold_node(p, g, n));
    cx_view in[CG_MAX_IN];
    for (int j = 0; j < n->n_in; j++) {
        if (n->in[j] < 0) memset(&in[j], 0, sizeof in[j]);
        else {
            in[j] = p->views[n->in[j]];
            in[j].data = (void *)1; /* marks "present" for optional-input checks */
        }
    }
    cx_view *o = &p->views[n->out];
    CX_CHECK(cx_infer(n, in, o));
    /* floats made from nothing or from integers (ConstantOfShape, NormalNoise, Cast of int64), and a host function's
     * output, take the call's float dtype */
    if (o->dtype == CATTR_FLOAT32 && !n->a.index &&
        (n->op == CG_CONSTANT_OF_SHAPE || n->op == CG_NORMAL_NOISE || n->op == CG_HOST_CALL || n->op == CG_MAP_ROWS ||
         (n->op == CG_CAST && in[0].dtype == CATTR_INT64)))
        o->dtype = p->consts_dtype;
    o->data = NULL;
    if (cx_view_numel(o) < 0 || (uint64_t)cx_view_numel(o) > (uint64_t)INT64_MAX / 8) {
        char sb[256];
        return cx_fail(CATTR_ERR_SHAPE, "node '%s' (op %s): output shape %s is too large", n->name, cg_op_names[n->op],
                       cx_shape_str(o->ndim, o->shape, sb, sizeof sb));
    }
    return CATTR_OK;
}

/* ---- If ------------------------------------------------------------------------------------------------------
 * An If (an imported ONNX If, or the gradient autodiff gives its branches) runs only the branch its condition takes.
 * Before the needed nodes are chosen, each If's condition is folded from shapes and constants (the shapes it reads are
 * inferred on demand, through the branches earlier Ifs take); the If becomes an Identity of the branch taken. A
 * gradient If whose branch taken is absent gives zeros: its value is "dead", and so is every node reading it, except
 * an Add (the sum of a value's gradients), which becomes an Identity of its other operand. So nothing of the branch not
 * taken, nor of its gradient, is planned or run. */

/* Infers the view of value v0 (and of the values it depends on, in dependency order) for folding a condition. */
static cattr_status if_ensure(cx_plan *p, const cg_graph *g, int v0) {
    if_ctx *c = p->ifc;
    if (c->state[v0] == 2) return CATTR_OK;
    int base = c->sp;
    c->stack[c->sp++] = v0;
    c->state[v0] = 1;
    cattr_status st = CATTR_OK;
    while (c->sp > base && st == CATTR_OK) {
        int v = c->stack[c->sp - 1];
        const cg_value *val = &g->vals[v];
        if (val->kind != CG_VAL_NODE) { /* inputs have their views; a constant's view is its host tensor's shape */
            if (val->kind == CG_VAL_CONST) {
                const cattr_tensor *t = val->data;
                cx_view *w = &p->views[v];
                w->dtype = t->dtype == CATTR_INT64 ? CATTR_INT64 : p->consts_dtype;
                w->ndim = t->ndim;
                memcpy(w->shape, t->shape, sizeof t->shape);
            }
            c->state[v] = 2;
            c->sp--;
            continue;
        }
        int i = val->producer;
        const cg_node *nd = &g->nodes[i];
        int next = -1;
        if (nd->op == CG_IF) {
            st = if_resolve(p, g, i);
            if (st != CATTR_OK) break;
            if (c->choice[i] == IF_AT_RUN) {
                st = cx_fail(CATTR_ERR_SHAPE, "node '%s' (op If) is decided when the call runs (its condition reads "
                             "the data): another If's condition cannot come through it", nd->name);
                break;
            }
            int ch = nd->in[c->choice[i]];
            if (ch < 0 || c->dead[ch]) {
                st = cx_fail(CATTR_ERR_SHAPE, "node '%s' (op If): the branch taken has no value", nd->name);
                break;
            }
            if (c->state[ch] != 2) next = ch;
            else p->views[v] = p->views[ch];
        } else {
            for (int j = 0; j < nd->n_in && next < 0; j++) /* shape inputs are folded, not inferred */
                if (nd->in[j] >= 0 && !cx_shape_value_input(nd, j) && c->state[nd->in[j]] != 2) next = nd->in[j];
            if (next < 0) {
                cg_node tmp = *nd;
                st = infer_node(p, g, &tmp);
                if (st != CATTR_OK) break;
            }
        }
        if (next >= 0) {
            if (c->state[next] == 1) {
                st = cx_fail(CATTR_ERR_INTERNAL, "value '%s' depends on itself", g->vals[next].name);
                break;
            }
            c->state[next] = 1;
            c->stack[c->sp++] = next;
            continue;
        }
        c->state[v] = 2;
        c->sp--;
    }
    while (c->sp > base) c->state[c->stack[--c->sp]] = 0; /* after a failure */
    return st;
}

/* Resolves If node i: folds its condition. Errors: CATTR_ERR_SHAPE naming the node when the condition is not known
 * when the call is planned. */
static cattr_status if_resolve(cx_plan *p, const cg_graph *g, int i) {
    if_ctx *c = p->ifc;
    if (c->choice[i] > 0) return CATTR_OK;
    const cg_node *nd = &g->nodes[i];
    folded *f = malloc(sizeof *f);
    if (!f) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_status st = fold_value(p, g, nd->in[0], 0, f);
    if (st == CATTR_OK && f->n != 1) st = cx_fail(CATTR_ERR_SHAPE, "the condition has %d values, not one", f->n);
    if (st == CATTR_OK) c->choice[i] = f->v[0] != 0 ? 1 : 2;
    free(f);
    if (st == CATTR_ERR_NO_MEMORY) return st;
    if (st != CATTR_OK) { /* a condition read from the data: both branches planned, the kernel takes one per run */
        cx_log(CATTR_LOG_DEBUG, "node '%s' (op If) is decided when the call runs: %s", nd->name, cattr_last_error());
        c->choice[i] = IF_AT_RUN;
    }
    return CATTR_OK;
}

/* Node n becomes an Identity of value v. */
static void to_identity(cg_node *n, int v) {
    n->op = CG_IDENTITY;
    n->in[0] = v;
    n->n_in = 1;
    n->a = cg_attrs_default();
}

/* The nodes of g with every If resolved (into rw, a copy of g's nodes): an If becomes an Identity of the branch
 * taken, and dead values (above) are marked in c->dead. An If that cannot be resolved stays an If (an error if it is
 * needed). */
static void if_rewrite(cx_plan *p, const cg_graph *g, cg_node *rw) {
    if_ctx *c = p->ifc;
    for (int i = 0; i < g->n_nodes; i++) {
        cg_node *n = &rw[i];
        *n = g->nodes[i];
        if (n->op == CG_IF) {
            if (c->choice[i] == 0) (void)if_resolve(p, g, i); /* its error is reported if it is needed */
            if (c->choice[i] == IF_AT_RUN) { /* a dead branch value is zeros: an absent one */
                for (int j = 1; j < 3; j++)
                    if (n->in[j] >= 0 && c->dead[n->in[j]]) n->in[j] = -1;
                if (n->in[1] < 0 && n->in[2] < 0) c->dead[n->out] = true;
                continue;
            }
            if (c->choice[i] <= 0) continue;
            int ch = n->in[c->choice[i]];
            if (ch < 0 || c->dead[ch]) c->dead[n->out] = true;
            else to_identity(n, ch);
            continue;
        }
        int n_dead = 0, live = -1;
        for (int j = 0; j < n->n_in; j++) {
            if (n->in[j] >= 0 && c->dead[n->in[j]]) n_dead++;
            else live = j;
        }
        if (!n_dead && n->op == CG_ADD && n->a.index == 1) to_identity(n, n->in[1]); /* an input's gradient + zeros */
        else if (n->op == CG_ADD && n->n_in == 2 && n_dead == 1) to_identity(n, n->in[live]); /* the other gradient */
        else if (n_dead) c->dead[n->out] = true;
    }
}

/* The plans of the MapRows nodes' bodies, one pass each, made once with the plan (a body is the model as exported:
 * it plans as any graph, with its own constants on the same backend and dtype). */
static cattr_status plan_maps(cx_plan *p) {
    for (int k = 0; k < p->n_order; k++) {
        const cg_node *n = &p->nodes[k];
        if (n->op != CG_MAP_ROWS) continue;
        if (!p->sub) {
            p->sub = calloc((size_t)p->n_order, sizeof *p->sub);
            p->sub_cc = calloc((size_t)p->n_order, sizeof *p->sub_cc);
            if (!p->sub || !p->sub_cc) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        }
        const cg_map *m = n->a.map;
        cattr_dtype dt[CG_MAX_IN];
        for (int j = 0; j < m->n_in; j++) dt[j] = p->views[n->in[j]].dtype;
        int out = m->g->outputs[m->out];
        CX_CHECK(cx_consts_new(p->be, p->consts_dtype, &p->sub_cc[k]));
        cattr_status st = cx_plan_new(m->g, p->sub_cc[k], p->eager, m->in_ndim,
                                      (const int64_t(*)[CATTR_MAX_DIMS])m->in_shape, dt, &out, 1, &p->sub[k]);
        if (st != CATTR_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", cattr_last_error());
            return cx_fail(st, "node '%s' (op MapRows): planning one pass of the model: %s", n->name, msg);
        }
    }
    return CATTR_OK;
}

/* The dead nodes of each condition of the Ifs left in the plan (those decided when it runs), for each of its values. */
static cattr_status plan_rt_ifs(cx_plan *p) {
    int nc = 0;
    for (int k = 0; k < p->n_order; k++) nc += p->nodes[k].op == CG_IF;
    if (!nc) return CATTR_OK;
    const cg_graph *g = p->g;
    rt_if *r = calloc(1, sizeof *r);
    bool *dead = calloc((size_t)g->n_vals, sizeof *dead);
    if (r) {
        r->cond = malloc((size_t)nc * sizeof *r->cond);
        r->dead = calloc((size_t)nc * 2 * (size_t)p->n_order, 1);
        r->state = malloc((size_t)nc);
        r->skip = calloc((size_t)p->n_order, 1);
    }
    p->rt = r;
    if (!r || !dead || !r->cond || !r->dead || !r->state || !r->skip) {
        free(dead);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    r->n_order = p->n_order;
    for (int k = 0; k < p->n_order; k++) {
        const cg_node *n = &p->nodes[k];
        if (n->op != CG_IF) continue;
        int j = 0;
        while (j < r->n_cond && r->cond[j] != n->in[0]) j++;
        if (j == r->n_cond) r->cond[r->n_cond++] = n->in[0];
    }
    for (int j = 0; j < r->n_cond; j++)
        for (int c = 0; c < 2; c++) {
            memset(dead, 0, (size_t)g->n_vals * sizeof *dead);
            uint8_t *mask = r->dead + ((size_t)j * 2 + (size_t)c) * (size_t)p->n_order;
            for (int k = 0; k < p->n_order; k++) {
                const cg_node *n = &p->nodes[k];
                if (n->op == CG_IF && n->in[0] == r->cond[j]) {
                    int taken = n->in[c ? 1 : 2];
                    dead[n->out] = taken < 0 || dead[taken];
                } else {
                    int nd = 0;
                    for (int q = 0; q < n->n_in; q++) nd += n->in[q] >= 0 && dead[n->in[q]];
                    dead[n->out] = nd && !(n->op == CG_ADD && n->n_in == 2 && nd == 1); /* x + zeros = x */
                }
                mask[k] = dead[n->out];
            }
        }
    free(dead);
    return CATTR_OK;
}

/* Before node k runs: whether it writes zeros (dead under a condition read so far); at an If whose condition is not
 * read yet, reads it. */
static cattr_status rt_if_step(cx_plan *p, int k, bool *zero) {
    rt_if *r = p->rt;
    *zero = r->skip[k];
    const cg_node *n = &p->nodes[k];
    if (*zero || n->op != CG_IF) return CATTR_OK;
    int j = 0;
    while (j < r->n_cond && r->cond[j] != n->in[0]) j++;
    if (j == r->n_cond || r->state[j] >= 0) return CATTR_OK;
    const cx_view *cv = &p->views[n->in[0]];
    unsigned char buf[8] = {0};
    CX_CHECK(p->be->synchronize(p->be->ctx));
    CX_CHECK(cx_copy_out(p->be, buf, cv->data, cattr_dtype_size(cv->dtype)));
    bool truth = cv->dtype == CATTR_INT64 ? *(int64_t *)buf != 0
                 : cv->dtype == CATTR_FLOAT64 ? *(double *)buf != 0 : *(float *)buf != 0;
    r->state[j] = truth;
    const uint8_t *mask = r->dead + ((size_t)j * 2 + (truth ? 1 : 0)) * (size_t)r->n_order;
    for (int q = k; q < r->n_order; q++) r->skip[q] |= mask[q];
    *zero = r->skip[k];
    return CATTR_OK;
}

/* Runs MapRows node n (the plan's node k): its body's plan on each pass's rows of the inputs, read in place, each
 * pass's output written at its rows. */
static cattr_status run_map(cx_plan *p, const cg_node *n, const cx_view *in, cx_view *o) {
    const cg_map *m = n->a.map;
    cx_plan *sp = p->sub ? p->sub[n - p->nodes] : NULL;
    if (!sp) return cx_fail(CATTR_ERR_INTERNAL, "node '%s': no plan of its body", n->name);
    int64_t passes = in[0].shape[0] / m->in_rows[0];
    size_t step[CG_MAX_IN], ostep = passes ? (size_t)cx_view_numel(o) * cattr_dtype_size(o->dtype) / (size_t)passes : 0;
    for (int j = 0; j < n->n_in; j++)
        step[j] = passes ? (size_t)cx_view_numel(&in[j]) * cattr_dtype_size(in[j].dtype) / (size_t)passes : 0;
    for (int64_t q = 0; q < passes; q++) {
        void *ind[CG_MAX_IN], *od[1] = {(char *)o->data + (size_t)q * ostep};
        for (int j = 0; j < n->n_in; j++) ind[j] = (char *)in[j].data + (size_t)q * step[j];
        CX_CHECK(cx_plan_run_dev(sp, NULL, ind, NULL, od));
    }
    return CATTR_OK;
}

static cattr_status plan_new(const cg_graph *g, cx_consts *consts, bool eager, const int *in_ndim,
                             const int64_t (*in_shape)[CATTR_MAX_DIMS], const cattr_dtype *in_dtype, const int *outs,
                             int n_outs, cx_plan **out) {
    *out = NULL;
    if (g->n_inputs > CX_PLAN_MAX_IN) return cx_fail(CATTR_ERR_UNSUPPORTED, "graphs with more than %d inputs", CX_PLAN_MAX_IN);
    cx_plan *p = calloc(1, sizeof *p);
    if (!p) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    int nv = g->n_vals;
    p->g = g;
    p->consts = consts;
    p->be = consts->be;
    p->eager = eager;
    p->n_inputs = g->n_inputs;
    p->views = calloc((size_t)nv, sizeof *p->views);
    p->root = malloc((size_t)nv * sizeof *p->root);
    p->offset = calloc((size_t)nv, sizeof *p->offset);
    p->bytes = calloc((size_t)nv, sizeof *p->bytes);
    p->last_use = malloc((size_t)nv * sizeof *p->last_use);
    p->order = malloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *p->order);
    p->outs = malloc((size_t)(n_outs ? n_outs : 1) * sizeof *p->outs);
    bool *needed = calloc((size_t)nv, sizeof *needed);
    int *fused_into = NULL; /* per value: the value a fused Relu output aliases, else -1 */
    cattr_status st = CATTR_OK;
    if (!p->views || !p->root || !p->offset || !p->bytes || !p->last_use || !p->order || !p->outs || !needed) {
        st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        goto fail;
    }
    memcpy(p->outs, outs, (size_t)n_outs * sizeof *outs);
    p->n_outs = n_outs;
    p->consts_dtype = consts->dtype;
    for (int i = 0; i < g->n_inputs; i++) {
        p->in_ndim[i] = in_ndim[i];
        memcpy(p->in_shape[i], in_shape[i], sizeof p->in_shape[i]);
        p->in_dtype[i] = in_dtype ? in_dtype[i] : consts->dtype;
    }
    for (int v = 0; v < nv; v++) {
        p->root[v] = v;
        p->last_use[v] = -1;
    }
    /* views of inputs */
    for (int i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        cx_view *w = &p->views[v];
        w->dtype = in_dtype ? in_dtype[i] : consts->dtype;
        w->ndim = in_ndim[i];
        memcpy(w->shape, in_shape[i], sizeof w->shape);
        p->bytes[v] = (size_t)cx_view_numel(w) * cattr_dtype_size(w->dtype);
    }
    /* Ifs resolved (above): the nodes as planned */
    const cg_node *nodes = g->nodes;
    bool has_if = false;
    for (int i = 0; i < g->n_nodes && !has_if; i++) has_if = g->nodes[i].op == CG_IF;
    if (has_if) {
        if_ctx *c = calloc(1, sizeof *c);
        p->ifc = c;
        if (c) {
            c->state = calloc((size_t)nv, sizeof *c->state);
            c->stack = malloc((size_t)nv * sizeof *c->stack);
            c->choice = calloc((size_t)g->n_nodes, sizeof *c->choice);
            c->dead = calloc((size_t)nv, sizeof *c->dead);
        }
        cg_node *rw = malloc((size_t)g->n_nodes * sizeof *rw);
        if (!c || !c->state || !c->stack || !c->choice || !c->dead || !rw) {
            free(rw);
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            goto fail;
        }
        for (int i = 0; i < g->n_inputs; i++) c->state[g->inputs[i]] = 2;
        c->rw = rw;
        if_rewrite(p, g, rw);
        nodes = rw;
    }
    /* nodes needed by the outputs, in graph order; values that only give shapes are folded, not run (what their
     * Shape nodes read is needed for its shape) */
    bool *shape_needed = calloc((size_t)nv, sizeof *shape_needed);
    if (!shape_needed) {
        st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        goto fail;
    }
    for (int k = 0; k < n_outs; k++) needed[outs[k]] = true;
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        const cg_node *n = &nodes[i];
        if (has_if && (needed[n->out] || shape_needed[n->out]) &&
            (p->ifc->dead[n->out] || (n->op == CG_IF && p->ifc->choice[i] != IF_AT_RUN))) {
            free(shape_needed);
            if (n->op == CG_IF && !p->ifc->dead[n->out]) { /* the condition did not fold: its error again */
                p->ifc->choice[i] = 0;
                st = if_resolve(p, g, i);
                if (st == CATTR_OK) st = cx_fail(CATTR_ERR_INTERNAL, "node '%s' (op If) is unresolved", n->name);
            } else {
                st = cx_fail(CATTR_ERR_SHAPE, "value '%s' (node '%s', op %s) is needed but comes only from the branch "
                             "an If does not take", g->vals[n->out].name, n->name, cg_op_names[n->op]);
            }
            goto fail;
        }
        if (needed[n->out]) {
            for (int j = 0; j < n->n_in; j++)
                if (n->in[j] >= 0) (cx_shape_value_input(n, j) ? shape_needed : needed)[n->in[j]] = true;
        } else if (shape_needed[n->out]) {
            for (int j = 0; j < n->n_in; j++)
                if (n->in[j] >= 0) (n->op == CG_SHAPE ? needed : shape_needed)[n->in[j]] = true;
        }
    }
    free(shape_needed);
    for (int i = 0; i < g->n_nodes; i++)
        if (needed[nodes[i].out]) p->order[p->n_order++] = i;
    /* fusion (planned only): a Relu whose input comes from a Gemm, MatMul, Conv or elementwise Add/Sub that nothing
     * else reads becomes that node's epilogue; the Relu's output shares the producer's storage */
    p->nodes = malloc((size_t)(p->n_order ? p->n_order : 1) * sizeof *p->nodes);
    fused_into = malloc((size_t)nv * sizeof *fused_into);
    int *readers = calloc((size_t)nv, sizeof *readers);
    if (!p->nodes || !fused_into || !readers) {
        free(readers);
        st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        goto fail;
    }
    for (int v = 0; v < nv; v++) fused_into[v] = -1;
    for (int k = 0; k < p->n_order; k++) {
        const cg_node *n = &nodes[p->order[k]];
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] >= 0) readers[n->in[j]]++;
    }
    for (int k = 0; k < n_outs; k++) readers[outs[k]] += 2; /* a requested value must stay materialised */
    {
        int kept = 0;
        int *pos_of = malloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *pos_of);
        if (!pos_of) {
            free(readers);
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            goto fail;
        }
        for (int k = 0; k < p->n_order; k++) {
            const cg_node *n = &nodes[p->order[k]];
            int src = n->op == CG_RELU ? n->in[0] : -1;
            int prod = src >= 0 ? g->vals[src].producer : -1;
            cg_op pop = prod >= 0 ? nodes[prod].op : CG_OP_COUNT;
            bool fusible = !eager && src >= 0 && prod >= 0 && readers[src] == 1 &&
                           (pop == CG_GEMM || pop == CG_MATMUL || pop == CG_CONV || pop == CG_ADD || pop == CG_SUB);
            if (fusible) {
                p->nodes[pos_of[prod]].a.fuse_relu = 1;
                fused_into[n->out] = src;
                p->n_fused++;
                continue;
            }
            pos_of[p->order[k]] = kept;
            p->nodes[kept] = *n;
            p->order[kept++] = p->order[k];
        }
        p->n_order = kept;
        free(pos_of);
    }
    free(readers);

    /* views of constants */
    for (int v = 0; v < nv; v++) {
        if (g->vals[v].kind != CG_VAL_CONST || !needed[v]) continue;
        st = consts_get(consts, g, v, &p->views[v]);
        if (st != CATTR_OK) goto fail;
        p->bytes[v] = (size_t)cx_view_numel(&p->views[v]) * cattr_dtype_size(p->views[v].dtype);
    }
    /* shape inference and aliasing */
    for (int k = 0; k < p->n_order; k++) {
        st = infer_node(p, g, &p->nodes[k]);
        if (st != CATTR_OK) goto fail;
        const cg_node *n = &p->nodes[k];
        const cx_view *o = &p->views[n->out];
        if (p->ifc) p->ifc->state[n->out] = 2;
        p->bytes[n->out] = (size_t)cx_view_numel(o) * cattr_dtype_size(o->dtype);
        /* a ReduceSumLike that reduces nothing (the gradient of a same-shape operand) is a view as well */
        bool view = is_view_op(n->op) ||
                    (n->op == CG_REDUCE_SUM_LIKE && cx_view_numel(o) == cx_view_numel(&p->views[n->in[0]]));
        if (!eager && view && g->vals[n->in[0]].kind != CG_VAL_CONST) p->root[n->out] = p->root[n->in[0]];
        if (n->a.fuse_relu) { /* the fused Relu's output is this node's output */
            for (int v = 0; v < nv; v++)
                if (fused_into[v] == n->out) {
                    p->views[v] = *o;
                    p->bytes[v] = p->bytes[n->out];
                    p->root[v] = p->root[n->out];
                }
        }
    }
    free(fused_into);
    fused_into = NULL;
    st = plan_maps(p);
    if (st == CATTR_OK) st = plan_rt_ifs(p);
    if (st != CATTR_OK) goto fail;
    if_ctx_free(p->ifc); /* the Ifs are resolved into the plan's nodes */
    p->ifc = NULL;
    fmemo_free(p);
    /* liveness per root (an input read for its shape only does not keep its data alive: the backward of a
     * projection names its input for the shape, and keeping every layer's inputs for that cost a third of the
     * activation memory of an LLM path) */
    for (int k = 0; k < p->n_order; k++) {
        const cg_node *n = &p->nodes[k];
        for (int j = 0; j < n->n_in; j++)
            if (n->in[j] >= 0 && !shape_only_input(n->op, j)) {
                int r = p->root[n->in[j]];
                if (p->last_use[r] < k) p->last_use[r] = k;
            }
        int r = p->root[n->out];
        if (p->last_use[r] < k) p->last_use[r] = k;
    }
    for (int k = 0; k < n_outs; k++) p->last_use[p->root[outs[k]]] = p->n_order;
    for (int i = 0; i < g->n_inputs; i++)
        if (!needed[g->inputs[i]]) p->last_use[g->inputs[i]] = -1;
    if (!eager) {
        st = place(p); /* the arena itself is allocated by the first run: a plan used for shapes costs no memory */
        if (st != CATTR_OK) goto fail;
    }
    free(needed);
    *out = p;
    return CATTR_OK;
fail:
    free(needed);
    free(fused_into);
    cx_plan_free(p);
    return st;
}

void cx_plan_set_check_finite(cx_plan *p, bool on) { p->check_finite = on; }

enum { NF_NAN = 1, NF_INF = 2 };

/* NF_NAN / NF_INF bits of a float value in backend memory, copied out 1 MiB at a time to look at it; -1 when that
 * buffer cannot be allocated. */
static int scan_value(cx_plan *p, const cx_view *v, const void *data, size_t bytes) {
    if (!data || (v->dtype != CATTR_FLOAT32 && v->dtype != CATTR_FLOAT64) || !bytes) return 0;
    size_t es = cattr_dtype_size(v->dtype), chunk = ((size_t)1 << 20) / es * es;
    void *h = malloc(chunk < bytes ? chunk : bytes);
    if (!h) return -1;
    int bits = 0;
    for (size_t off = 0; off < bytes && bits != (NF_NAN | NF_INF); off += chunk) {
        size_t nb = bytes - off < chunk ? bytes - off : chunk;
        if (be_copy(p->be, p->prof, BE_COPY_OUT, h, (const char *)data + off, nb) != CATTR_OK) break;
        for (size_t i = 0; i < nb / es; i++) {
            double x = es == 4 ? (double)((const float *)h)[i] : ((const double *)h)[i];
            bits |= isnan(x) ? NF_NAN : isinf(x) ? NF_INF : 0;
        }
    }
    free(h);
    return bits;
}

/* "node 'X' (op Y)", or for the gradient nodes autodiff names "<forward node>/grad/<op>_<k>", "node 'X' (op Y, in
 * the backward pass of node 'Z')". */
static void node_desc(const cg_node *n, char *buf, size_t size) {
    const char *gr = strstr(n->name, "/grad/");
    if (gr)
        snprintf(buf, size, "node '%s' (op %s, in the backward pass of node '%.*s')", n->name, cg_op_names[n->op],
                 (int)(gr - n->name), n->name);
    else snprintf(buf, size, "node '%s' (op %s)", n->name, cg_op_names[n->op]);
}

/* A checked run. Per value: its NF_ bits, and where its NaN and its Inf came from: the position of the node that
 * made them from inputs without them (a source), SRC_OUTSIDE for the graph inputs and constants, -1 for none. Per
 * node position, for a NaN source: where the infinite values it was made from came from. */
#define SRC_OUTSIDE (-2)
typedef struct {
    int *nf, *nan_src, *inf_src, *nan_from_inf;
} fcheck;

static void fcheck_free(fcheck *fc) {
    free(fc->nf);
    free(fc->nan_src);
    free(fc->inf_src);
    free(fc->nan_from_inf);
    memset(fc, 0, sizeof *fc);
}

static cattr_status fcheck_nomem(fcheck *fc) {
    fcheck_free(fc);
    return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory checking for non-finite values");
}

/* Scans the graph inputs present now and the constants. */
static cattr_status fcheck_start(cx_plan *p, fcheck *fc) {
    const cg_graph *g = p->g;
    size_t nv = (size_t)g->n_vals;
    fc->nf = calloc(nv, sizeof *fc->nf);
    fc->nan_src = malloc(nv * sizeof *fc->nan_src);
    fc->inf_src = malloc(nv * sizeof *fc->inf_src);
    fc->nan_from_inf = malloc((size_t)(p->n_order ? p->n_order : 1) * sizeof *fc->nan_from_inf);
    if (!fc->nf || !fc->nan_src || !fc->inf_src || !fc->nan_from_inf) return fcheck_nomem(fc);
    for (int v = 0; v < g->n_vals; v++) {
        fc->nan_src[v] = fc->inf_src[v] = -1;
        if (g->vals[v].kind != CG_VAL_CONST && g->vals[v].kind != CG_VAL_INPUT) continue;
        int b = scan_value(p, &p->views[v], p->views[v].data, p->bytes[v]);
        if (b < 0) return fcheck_nomem(fc);
        fc->nf[v] = b;
        if (b & NF_NAN) fc->nan_src[v] = SRC_OUTSIDE;
        if (b & NF_INF) fc->inf_src[v] = SRC_OUTSIDE;
    }
    return CATTR_OK;
}

/* After node k ran: its output's bits, and the sources they carry. */
static cattr_status fcheck_node(cx_plan *p, fcheck *fc, int k) {
    const cg_graph *g = p->g;
    const cg_node *n = &p->nodes[k];
    int b = scan_value(p, &p->views[n->out], p->views[n->out].data, p->bytes[n->out]);
    if (b < 0) return fcheck_nomem(fc);
    int nan_in = -1, inf_in = -1; /* the first input holding NaN, and Inf */
    for (int j = 0; j < n->n_in; j++) {
        int v = n->in[j];
        if (v < 0) continue;
        if (nan_in < 0 && (fc->nf[v] & NF_NAN)) nan_in = v;
        if (inf_in < 0 && (fc->nf[v] & NF_INF)) inf_in = v;
    }
    int out = n->out, ns = -1, is = -1;
    fc->nan_from_inf[k] = -1;
    if (b & NF_NAN) {
        if (nan_in >= 0) ns = fc->nan_src[nan_in];
        else {
            ns = k;
            fc->nan_from_inf[k] = inf_in >= 0 ? fc->inf_src[inf_in] : -1;
        }
    }
    if (b & NF_INF) is = inf_in >= 0 ? fc->inf_src[inf_in] : nan_in >= 0 ? fc->nan_src[nan_in] : k;
    for (int v = 0; v < g->n_vals; v++) /* the output and, for a fused Relu, the Relu's value sharing it */
        if (v == out || (n->a.fuse_relu && p->root[v] == p->root[out])) {
            fc->nf[v] = b;
            fc->nan_src[v] = ns;
            fc->inf_src[v] = is;
        }
    return CATTR_OK;
}

/* "inf first appears at <node>", or that it came in with the inputs or constants. */
static void source_desc(const cx_plan *p, int src, const char *what, char *buf, size_t size) {
    if (src == SRC_OUTSIDE) {
        snprintf(buf, size, "%s comes from the inputs or the constants of the model", what);
        return;
    }
    char d[600];
    node_desc(&p->nodes[src], d, sizeof d);
    snprintf(buf, size, "%s first appears at %s", what, d);
}

/* The checked run's verdict: NaN (else Inf) in an output is an error naming the node that made the NaN (the Inf)
 * which reaches that output from inputs without it, and for a NaN made from infinities, where those came from.
 * Non-finite values that never reach an output (an attention mask of -inf) are not an error. */
static cattr_status finite_verdict(const cx_plan *p, const fcheck *fc) {
    int v_nan = -1, v_inf = -1;
    for (int k = 0; k < p->n_outs; k++) {
        int v = p->outs[k];
        if (v_nan < 0 && (fc->nf[v] & NF_NAN)) v_nan = v;
        if (v_inf < 0 && (fc->nf[v] & NF_INF)) v_inf = v;
    }
    char a[800], b[800];
    if (v_nan >= 0) {
        int s = fc->nan_src[v_nan];
        if (s == -1) return cx_fail(CATTR_ERR_NONFINITE, "nan reaches an output by an unknown way");
        source_desc(p, s, "nan", a, sizeof a);
        if (s >= 0 && fc->nan_from_inf[s] != -1) {
            source_desc(p, fc->nan_from_inf[s], "inf", b, sizeof b);
            return cx_fail(CATTR_ERR_NONFINITE, "%s, from infinite values; %s", a, b);
        }
        return cx_fail(CATTR_ERR_NONFINITE, "%s%s", a, s >= 0 ? ", from finite inputs" : "");
    }
    if (v_inf >= 0) {
        int s = fc->inf_src[v_inf];
        if (s == -1) return cx_fail(CATTR_ERR_NONFINITE, "inf reaches an output by an unknown way");
        source_desc(p, s, "inf", a, sizeof a);
        return cx_fail(CATTR_ERR_NONFINITE, "%s%s", a, s >= 0 ? ", from finite inputs" : "");
    }
    return CATTR_OK;
}

/* "[2,3]x[3,4]->[2,3]": the shapes of a node's inputs ("-" for an absent optional one) and of its output, for the
 * profiler (cut with "..." when longer than the buffer). Formatted by hand: snprintf per dimension cost more than
 * the small kernels it describes. */
static void shapes_text(const cx_plan *p, const cg_node *n, char *buf, size_t size) {
    size_t k = 0;
    char *end = buf + size - 4; /* room for "..." and the NUL */
#define PUT(ch) (buf + k < end ? (void)(buf[k++] = (ch)) : (void)(k = size))
    for (int j = 0; j <= n->n_in && k < size; j++) {
        const cx_view *v = j == n->n_in ? &p->views[n->out] : n->in[j] >= 0 ? &p->views[n->in[j]] : NULL;
        if (j == n->n_in) PUT('-'), PUT('>');
        else if (j) PUT('x');
        if (!v) {
            PUT('-');
            continue;
        }
        PUT('[');
        for (int d = 0; d < v->ndim && k < size; d++) {
            if (d) PUT(',');
            char dig[24];
            int nd = 0;
            uint64_t x = v->shape[d] < 0 ? (PUT('-'), (uint64_t)0 - (uint64_t)v->shape[d]) : (uint64_t)v->shape[d];
            do dig[nd++] = (char)('0' + x % 10);
            while ((x /= 10) && nd < 24);
            while (nd) PUT(dig[--nd]);
        }
        PUT(']');
    }
#undef PUT
    if (k >= size) memcpy(end, "...", 4);
    else buf[k] = '\0';
}

static cattr_status run_node(cx_plan *p, const cg_node *n) {
    cx_view in[CG_MAX_IN];
    for (int j = 0; j < n->n_in; j++) {
        if (n->in[j] < 0) memset(&in[j], 0, sizeof in[j]);
        else in[j] = p->views[n->in[j]];
    }
    cx_view *o = &p->views[n->out];
    if (n->n_in > 0 && o->data == in[0].data && (is_view_op(n->op) || n->op == CG_REDUCE_SUM_LIKE))
        return CATTR_OK; /* aliased view: no work */
    if (p->rt) {
        bool zero = false;
        CX_CHECK(rt_if_step(p, (int)(n - p->nodes), &zero));
        if (zero) return be_copy(p->be, p->prof, BE_ZERO, o->data, NULL, p->bytes[n->out]);
    }
    if (n->op == CG_MAP_ROWS) return run_map(p, n, in, o);
    if (!p->prof) return p->be->run_op(p->be->ctx, n, in, o);
    uint64_t t0 = cx_prof_now();
    cattr_status st = p->be->run_op(p->be->ctx, n, in, o);
    uint64_t t1 = cx_prof_now();
    char sh[256];
    shapes_text(p, n, sh, sizeof sh);
    cx_prof_op(p->be->name, cg_op_names[n->op], n->name, sh, t0, t1);
    return st;
}

/* CATTR_PROFILE=1: time per op kind of planned runs, summed over the process and logged (debug level) at exit.
 * Plans may run on several threads at once (IG's two halves): the switch is read once, the sums under a lock. */
static pthread_once_t g_profile_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_profile_mu = PTHREAD_MUTEX_INITIALIZER;
static bool g_profile;
static double g_prof_s[CG_OP_COUNT];
static long g_prof_n[CG_OP_COUNT];
static void profile_report(void) {
    double tot = 0;
    for (int i = 0; i < CG_OP_COUNT; i++) tot += g_prof_s[i];
    for (int i = 0; i < CG_OP_COUNT; i++)
        if (g_prof_n[i])
            cx_log(CATTR_LOG_DEBUG, "profile: %-22s %8ld runs %10.3f s %5.1f%%", cg_op_names[i], g_prof_n[i], g_prof_s[i],
                   tot > 0 ? 100 * g_prof_s[i] / tot : 0.0);
    cx_log(CATTR_LOG_DEBUG, "profile: total %.3f s", tot);
}
static void profile_init(void) {
    const char *e = getenv("CATTR_PROFILE");
    g_profile = e && *e && strcmp(e, "0");
    if (g_profile) atexit(profile_report);
}

cattr_status cx_plan_run(cx_plan *p, const void *const *in_host, void *const *out_host) {
    return cx_plan_run_watched(p, in_host, NULL, out_host, NULL, NULL);
}

cattr_status cx_plan_run_dev(cx_plan *p, const void *const *in_host, void *const *in_dev, void *const *out_host,
                             void *const *out_dev) {
    return cx_plan_run_watched(p, in_host, in_dev, out_host, out_dev, NULL);
}

/* ---- the watch of a run (cx_watch) ---------------------------------------------------------------------------- */

/* Per thread: the counts a progress callback last received (cx_watch_note), when it was last called (a chunk's call
 * or a beat) and when the last watched run on this thread ended, in CLOCK_MONOTONIC_COARSE nanoseconds (0: never). */
static _Thread_local struct {
    cattr_progress_fn fn;
    void *user;
    int64_t done, total;
    int64_t last_ns, run_end_ns;
} tl_beat;

static int64_t coarse_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#define BEAT_NS ((int64_t)CX_WATCH_BEAT_MS * 1000000)

void cx_watch_note(cattr_progress_fn fn, void *user, int64_t done, int64_t total) {
    tl_beat.fn = fn;
    tl_beat.user = user;
    tl_beat.done = done;
    tl_beat.total = total;
    tl_beat.last_ns = coarse_ns();
}

/* Whether this thread makes the beats of a watched run: OpenMP thread 0 (the caller's, unless the run is inside a
 * parallel region of another thread), and only for a watch with a progress callback. */
static bool beats_here(const cx_watch *w) { return w && w->progress && omp_get_thread_num() == 0; }

/* At the start of a watched run: after a pause outside watched runs (between calls, or host work between passes)
 * longer than a beat's period, the period starts anew, so that a call does not begin with a beat. */
static void watch_begin(const cx_watch *w) {
    if (!beats_here(w)) return;
    int64_t now = coarse_ns();
    if (!tl_beat.last_ns || now - tl_beat.run_end_ns > BEAT_NS) tl_beat.last_ns = now;
}

static void watch_end(const cx_watch *w) {
    if (beats_here(w)) tl_beat.run_end_ns = coarse_ns();
}

/* Before node n of a watched run: the beat when it is due, then the cancellation flag. */
static cattr_status watch_step(const cx_watch *w, const cg_node *n) {
    if (beats_here(w)) {
        int64_t now = coarse_ns();
        if (now - tl_beat.last_ns >= BEAT_NS) {
            bool same = tl_beat.fn == w->progress && tl_beat.user == w->progress_user;
            tl_beat.last_ns = now;
            w->progress(same ? tl_beat.done : 0, same ? tl_beat.total : 0, w->progress_user);
        }
    }
    if (*w->cancel)
        return cx_fail(CATTR_ERR_CANCELLED, "cancelled during a pass (before node '%s')", n->name ? n->name : "?");
    return CATTR_OK;
}

/* The watch of a run, NULL when it watches nothing (no cancel flag: beats are made only for one). */
static const cx_watch *active_watch(const cx_watch *w) { return w && w->cancel ? w : NULL; }

/* whether input i of this run is bound to backend memory of the caller */
#define BOUND(i) (in_dev && in_dev[i])

static cattr_status plan_run(cx_plan *p, const void *const *in_host, void *const *in_dev, void *const *out_host,
                             void *const *out_dev, const cx_watch *w);

cattr_status cx_plan_run_watched(cx_plan *p, const void *const *in_host, void *const *in_dev, void *const *out_host,
                                 void *const *out_dev, const cx_watch *watch) {
    const cx_watch *w = active_watch(watch);
    watch_begin(w);
    cattr_status st = plan_run(p, in_host, in_dev, out_host, out_dev, w);
    watch_end(w);
    return st;
}

/* The run (w: the active watch, or NULL). */
static cattr_status plan_run(cx_plan *p, const void *const *in_host, void *const *in_dev, void *const *out_host,
                             void *const *out_dev, const cx_watch *w) {
    const cg_graph *g = p->g;
    cx_backend *be = p->be;
    cattr_status st = CATTR_OK;
    size_t cur = 0;
    p->prof = cx_prof_on();
    if (p->rt) {
        memset(p->rt->state, -1, (size_t)p->rt->n_cond);
        memset(p->rt->skip, 0, (size_t)p->rt->n_order);
    }
    if (!p->eager) {
        if (!p->arena) {
            p->arena = be->alloc(be->ctx, p->arena_bytes ? p->arena_bytes : 64);
            if (!p->arena) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot allocate a %zu-byte activation arena", p->arena_bytes);
        }
        char *base = p->arena;
        for (int v = 0; v < g->n_vals; v++) {
            if (g->vals[v].kind == CG_VAL_CONST) continue;
            int r = p->root[v];
            if (p->last_use[r] < 0 && g->vals[v].kind == CG_VAL_INPUT) {
                p->views[v].data = NULL;
                continue;
            }
            /* an input bound in place, and every view of it, read the caller's memory */
            p->views[v].data = g->vals[r].kind == CG_VAL_INPUT && BOUND(g->vals[r].input_index)
                                   ? in_dev[g->vals[r].input_index] : base + p->offset[r];
        }
        for (int i = 0; i < g->n_inputs; i++) {
            int v = g->inputs[i];
            if (p->last_use[v] < 0) continue;
            if (BOUND(i)) continue; /* used in place (above) */
            if (!in_host || !in_host[i]) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "input '%s' is needed", g->vals[v].name);
            CX_CHECK(be_copy(be, p->prof, BE_COPY_IN, p->views[v].data, in_host[i], p->bytes[v]));
        }
        pthread_once(&g_profile_once, profile_init);
        if (p->check_finite) {
            fcheck fc = {0};
            CX_CHECK(fcheck_start(p, &fc));
            for (int k = 0; k < p->n_order && st == CATTR_OK; k++) {
                if (w && (st = watch_step(w, &p->nodes[k])) != CATTR_OK) break;
                st = run_node(p, &p->nodes[k]);
                if (st == CATTR_OK) st = fcheck_node(p, &fc, k);
            }
            if (st == CATTR_OK) st = finite_verdict(p, &fc);
            fcheck_free(&fc);
        } else if (!g_profile && !w) {
            for (int k = 0; k < p->n_order && st == CATTR_OK; k++) st = run_node(p, &p->nodes[k]);
        } else if (!g_profile) {
            for (int k = 0; k < p->n_order && st == CATTR_OK; k++) {
                st = watch_step(w, &p->nodes[k]);
                if (st == CATTR_OK) st = run_node(p, &p->nodes[k]);
            }
        } else {
            for (int k = 0; k < p->n_order && st == CATTR_OK; k++) {
                if (w && (st = watch_step(w, &p->nodes[k])) != CATTR_OK) break;
                struct timespec t0, t1;
                clock_gettime(CLOCK_MONOTONIC, &t0);
                st = run_node(p, &p->nodes[k]);
                clock_gettime(CLOCK_MONOTONIC, &t1);
                int op = p->nodes[k].op;
                pthread_mutex_lock(&g_profile_mu);
                g_prof_s[op] += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
                g_prof_n[op]++;
                pthread_mutex_unlock(&g_profile_mu);
            }
        }
    } else {
        for (int i = 0; i < g->n_inputs && st == CATTR_OK; i++) {
            int v = g->inputs[i];
            p->views[v].data = NULL;
            if (p->last_use[v] < 0) continue;
            if (BOUND(i)) { /* the caller's memory: never freed here */
                p->views[v].data = in_dev[i];
                continue;
            }
            if (!in_host || !in_host[i]) { /* the inputs copied in so far are freed below */
                st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "input '%s' is needed", g->vals[v].name);
                break;
            }
            p->views[v].data = be->alloc(be->ctx, p->bytes[v]);
            if (!p->views[v].data) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            else st = be_copy(be, p->prof, BE_COPY_IN, p->views[v].data, in_host[i], p->bytes[v]);
            cur += p->bytes[v];
        }
        fcheck fc = {0};
        if (st == CATTR_OK && p->check_finite) st = fcheck_start(p, &fc);
        for (int k = 0; k < p->n_order && st == CATTR_OK; k++) {
            const cg_node *n = &p->nodes[k];
            if (w && (st = watch_step(w, n)) != CATTR_OK) break;
            cx_view *o = &p->views[n->out];
            o->data = be->alloc(be->ctx, p->bytes[n->out]);
            if (!o->data) {
                st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory at node '%s'", n->name);
                break;
            }
            cur += p->bytes[n->out];
            if (cur > p->eager_peak) p->eager_peak = cur;
            st = run_node(p, n);
            if (st == CATTR_OK && fc.nf) st = fcheck_node(p, &fc, k);
            for (int j = 0; j < n->n_in; j++) { /* free inputs at their last use */
                int v = n->in[j];
                if (v < 0 || g->vals[v].kind == CG_VAL_CONST || p->last_use[v] != k || !p->views[v].data) continue;
                if (g->vals[v].kind == CG_VAL_INPUT && BOUND(g->vals[v].input_index)) continue;
                bool dup = false;
                for (int t = 0; t < j; t++) dup |= n->in[t] == v;
                if (dup) continue;
                be->free(be->ctx, p->views[v].data, p->bytes[v]);
                p->views[v].data = NULL;
                cur -= p->bytes[v];
            }
        }
        if (st == CATTR_OK && fc.nf) st = finite_verdict(p, &fc);
        fcheck_free(&fc);
    }
    if (st == CATTR_OK) st = be->synchronize(be->ctx);
    for (int k = 0; k < p->n_outs && st == CATTR_OK; k++) {
        int v = p->outs[k];
        const void *src = p->views[v].data;
        if (out_dev && out_dev[k]) st = be_copy(be, p->prof, BE_COPY_DEV, out_dev[k], src, p->bytes[v]);
        else if (out_host && out_host[k]) st = be_copy(be, p->prof, BE_COPY_OUT, out_host[k], src, p->bytes[v]);
    }
    if (p->eager) {
        for (int v = 0; v < g->n_vals; v++) {
            if (g->vals[v].kind == CG_VAL_CONST || !p->views[v].data) continue;
            if (g->vals[v].kind == CG_VAL_INPUT && BOUND(g->vals[v].input_index)) continue;
            be->free(be->ctx, p->views[v].data, p->bytes[v]);
            p->views[v].data = NULL;
        }
    }
    if (p->prof && be->peak_memory) cx_prof_peak(be->name, be->peak_memory(be->ctx));
    return st;
}
