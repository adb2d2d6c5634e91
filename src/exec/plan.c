/* plan.c - the planned and eager executors (see plan.h). */
#include "exec/plan_internal.h"
#include "core/pool.h"

#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


cattr_status cx_pl_be_copy(cx_backend *be, bool prof, be_copy_kind kind, void *dst, const void *src, size_t bytes) {
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
    return cx_pl_be_copy(be, cx_prof_on(), BE_COPY_IN, dev, host, bytes);
}
cattr_status cx_copy_out(cx_backend *be, void *host, const void *dev, size_t bytes) {
    return cx_pl_be_copy(be, cx_prof_on(), BE_COPY_OUT, host, dev, bytes);
}
cattr_status cx_copy_dev(cx_backend *be, void *dst, const void *src, size_t bytes) {
    return cx_pl_be_copy(be, cx_prof_on(), BE_COPY_DEV, dst, src, bytes);
}
cattr_status cx_zero(cx_backend *be, void *dev, size_t bytes) {
    return cx_pl_be_copy(be, cx_prof_on(), BE_ZERO, dev, NULL, bytes);
}

/* ---- plans -------------------------------------------------------------------------------------------------- */



static void if_ctx_free(if_ctx *c) {
    if (!c) return;
    free(c->state);
    free(c->stack);
    free(c->choice);
    free(c->dead);
    free(c->rw);
    free(c);
}

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
/* Whether input j of n may be a checkpoint's 16-bit matrix as stored (CX_CAP_STORED_WEIGHTS): B of a product
 * whose A is not transposed, the data of a Gather (not its gradient). */
static bool reads_stored(const cg_node *n, int j) {
    if (n->op == CG_MATMUL || n->op == CG_GEMM) return j == 1 && !n->a.trans_a;
    return n->op == CG_GATHER && j == 0;
}

static bool shape_only_input(cg_op op, int j) {
    return (j == 1 && (op == CG_REDUCE_SUM_LIKE || op == CG_RESHAPE_LIKE || op == CG_SLICE_GRAD || op == CG_PAD_GRAD)) ||
           (j == 2 && op == CG_SEQ_PICK_GRAD) || (j == 0 && op == CG_ZEROS_LIKE);
}


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

bool cx_plan_input_is(const cx_plan *p, int i, int nd, const int64_t *sh, cattr_dtype dt) {
    return i < p->n_inputs && p->in_dtype[i] == dt && cx_shape_eq(p->in_ndim[i], p->in_shape[i], nd, sh);
}

int cx_plan_n_inputs(const cx_plan *p) { return p->n_inputs; }

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

cattr_status cx_pl_place(cx_plan *p) {
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
        cx_pl_if_rewrite(p, g, rw);
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
                st = cx_pl_if_resolve(p, g, i);
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

    /* views of constants; a checkpoint's 16-bit matrices are read as stored where every reader widens them itself
     * (a float32 call on a backend with CX_CAP_STORED_WEIGHTS: on the host in place, on a device uploaded as they
     * are), else through a float32 (float64) copy made once by the constants' cache */
    unsigned char *stored = NULL;
    if (consts->dtype == CATTR_FLOAT32 && p->be->has_cap && p->be->has_cap(p->be->ctx, CX_CAP_STORED_WEIGHTS) &&
        (stored = calloc((size_t)nv, 1)) != NULL) {
        for (int v = 0; v < nv; v++)
            stored[v] = g->vals[v].kind == CG_VAL_CONST && g->vals[v].data && cx_dtype_is_storage(g->vals[v].data->dtype);
        for (int k = 0; k < p->n_order; k++) {
            const cg_node *n = &p->nodes[k];
            for (int j = 0; j < n->n_in; j++)
                if (n->in[j] >= 0 && stored[n->in[j]] && !reads_stored(n, j)) stored[n->in[j]] = 0;
        }
    }
    for (int v = 0; v < nv; v++) {
        if (g->vals[v].kind != CG_VAL_CONST || !needed[v]) continue;
        if ((st = cx_pl_consts_get(consts, g, v, stored && stored[v], &p->views[v])) != CATTR_OK) {
            free(stored);
            goto fail;
        }
        p->bytes[v] = (size_t)cx_view_numel(&p->views[v]) * cattr_dtype_size(p->views[v].dtype);
    }
    free(stored);
    /* shape inference and aliasing */
    for (int k = 0; k < p->n_order; k++) {
        st = cx_pl_infer_node(p, g, &p->nodes[k]);
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
        st = cx_pl_place(p); /* the arena itself is allocated by the first run: a plan used for shapes costs no memory */
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
        if (zero) return cx_pl_be_copy(p->be, p->prof, BE_ZERO, o->data, NULL, p->bytes[n->out]);
    }
    if (n->op == CG_MAP_ROWS) return run_map(p, n, in, o);
    if (!p->prof) return p->be->run_op(p->be->ctx, n, in, o);
    uint64_t t0 = cx_prof_now();
    cattr_status st = p->be->run_op(p->be->ctx, n, in, o);
    uint64_t t1 = cx_prof_now();
    char sh[256];
    cx_pl_shapes_text(p, n, sh, sizeof sh);
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
 * parallel region of another thread) and not a helper of the task pool (core/pool.h), and only for a watch with a
 * progress callback. */
static bool beats_here(const cx_watch *w) {
    return w && w->progress && omp_get_thread_num() == 0 && !cx_pool_is_helper();
}

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
            CX_CHECK(cx_pl_be_copy(be, p->prof, BE_COPY_IN, p->views[v].data, in_host[i], p->bytes[v]));
        }
        pthread_once(&g_profile_once, profile_init);
        if (p->check_finite) {
            fcheck fc = {0};
            CX_CHECK(cx_pl_fcheck_start(p, &fc));
            for (int k = 0; k < p->n_order && st == CATTR_OK; k++) {
                if (w && (st = watch_step(w, &p->nodes[k])) != CATTR_OK) break;
                st = run_node(p, &p->nodes[k]);
                if (st == CATTR_OK) st = cx_pl_fcheck_node(p, &fc, k);
            }
            if (st == CATTR_OK) st = cx_pl_finite_verdict(p, &fc);
            cx_pl_fcheck_free(&fc);
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
            else st = cx_pl_be_copy(be, p->prof, BE_COPY_IN, p->views[v].data, in_host[i], p->bytes[v]);
            cur += p->bytes[v];
        }
        fcheck fc = {0};
        if (st == CATTR_OK && p->check_finite) st = cx_pl_fcheck_start(p, &fc);
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
            if (st == CATTR_OK && fc.nf) st = cx_pl_fcheck_node(p, &fc, k);
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
        if (st == CATTR_OK && fc.nf) st = cx_pl_finite_verdict(p, &fc);
        cx_pl_fcheck_free(&fc);
    }
    if (st == CATTR_OK) st = be->synchronize(be->ctx);
    for (int k = 0; k < p->n_outs && st == CATTR_OK; k++) {
        int v = p->outs[k];
        const void *src = p->views[v].data;
        if (out_dev && out_dev[k]) st = cx_pl_be_copy(be, p->prof, BE_COPY_DEV, out_dev[k], src, p->bytes[v]);
        else if (out_host && out_host[k]) st = cx_pl_be_copy(be, p->prof, BE_COPY_OUT, out_host[k], src, p->bytes[v]);
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

