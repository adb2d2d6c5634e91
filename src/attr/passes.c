/* passes.c - the batched passes that methods are built from: the gradient graph (the forward graph, a seed input and
 * the autodiff nodes for the attributed inputs under the method's rules) and its plans by input shape, gradient and
 * forward passes over reps x B rows with the additional inputs and the target expanded like the inputs, the seed
 * block, a row's bytes, the layer graph, explicit draws and Captum's sums. The memory budget is in memory.c; running
 * plans, the convergence delta and the other small graphs in helper_graphs.c. */
#include "attr/internal.h"
#include "attr/perturb_forms.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/resource.h>
#include <time.h>

#define MAX_IN CX_MAX_IN

void cx_drop_plans(cattr_explainer *e) {
    cg_free(e->gm); /* derived from g; its plans go with it */
    e->gm = NULL;
    cg_free(e->sel_g);
    e->sel_g = NULL;
}


cattr_status cx_build_grad_graph(cattr_explainer *e, int n_attr) {
    if (e->g && e->n_attr == n_attr) return CATTR_OK;
    cx_drop_plans(e);
    cg_free(e->g);
    static const char *const seed_name[1] = {"__cattr_seed__"};
    int seed = -1;
    CX_CHECK(cx_derive_clone(e->m->g, 1, seed_name, &e->g, &seed));
    e->seed_input = e->g->n_inputs - 1;
    CX_CHECK(cg_autodiff(e->g, cx_model_output(e->m), seed, e->g->inputs, n_attr, &e->rules, e->grads));
    e->n_attr = n_attr;
    return CATTR_OK;
}

/* ---- batched passes ------------------------------------------------------------------------------------------ */

/* Input shapes and host pointers for a pass over reps*B rows; additional inputs expanded into tmp. */
typedef struct {
    cx_arg in[MAX_IN];
    cattr_tensor *tmp[MAX_IN];
    int out; /* the model output's value id */
} pass_inputs;

static void pass_free(pass_inputs *pi) {
    for (int i = 0; i < MAX_IN; i++) cattr_tensor_free(pi->tmp[i]);
}

static cattr_status pass_setup(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, int64_t reps, cx_expand how,
                               pass_inputs *pi) {
    memset(pi, 0, sizeof *pi);
    for (int i = 0; i < c->n; i++) pi->in[i] = cx_arg_of(xs[i]);
    for (int j = 0; j < c->n_add; j++) {
        int gi = c->n + j;
        const cattr_tensor *a = c->add[j];
        if (reps != 1) {
            pi->tmp[gi] = cx_expand_rows(c->add[j], reps, how);
            if (!pi->tmp[gi]) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            a = pi->tmp[gi];
        }
        pi->in[gi] = cx_arg_of(a);
    }
    pi->in[e->seed_input].dt = c->dt; /* its shape: the output's (the forward job does not read it) */
    pi->out = cx_model_output(e->m);
    return CATTR_OK;
}

/* The job of a pass on pi: the gradient graph's gradients (fwd false; their plans share one arena) or the model's
 * output (fwd true). */
static cx_job pass_job(cattr_explainer *e, bool fwd, const pass_inputs *pi) {
    cx_job j = cx_job_for(e, e->g, e->consts);
    j.slot = fwd; /* the gradient's plans share one arena (they never run at once); the forward-only ones apart */
    j.share_arena = !fwd;
    j.n_in = e->g->n_inputs;
    j.in = pi->in;
    j.n_out = fwd ? 1 : e->n_attr;
    j.outs = fwd ? &pi->out : e->grads;
    return j;
}

/* Seed over reps*B output rows: the target mask of each row's example. */
static cattr_status make_seed(const cx_call *c, int ond, const int64_t *osh, int64_t reps, cx_expand how,
                              cattr_tensor **seed) {
    int64_t blk[CATTR_MAX_DIMS];
    memcpy(blk, osh, sizeof blk);
    blk[0] = c->B;
    int64_t per_ex = cx_numel(ond - 1, osh + 1);
    double *mask = malloc((size_t)(c->B * per_ex + 1) * sizeof *mask);
    cattr_tensor *s = cx_tensor_alloc(c->dt, ond, osh);
    if (!mask || !s) {
        free(mask);
        cattr_tensor_free(s);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    cattr_status st = cx_target_mask(c->target, ond, blk, mask);
    if (st == CATTR_OK) {
        int64_t rows = reps * c->B;
        for (int64_t r = 0; r < rows; r++) {
            int64_t b = how == CX_TILE ? r % c->B : r / reps;
            for (int64_t k = 0; k < per_ex; k++) cx_tensor_set(s, r * per_ex + k, mask[b * per_ex + k]);
        }
    }
    free(mask);
    if (st != CATTR_OK) {
        cattr_tensor_free(s);
        return st;
    }
    *seed = s;
    return CATTR_OK;
}

/* The model output's view for these inputs (from the forward plan), checked to have `rows` rows. */
static cattr_status output_shape(cattr_explainer *e, pass_inputs *pi, int64_t rows, cx_view *ov) {
    cx_job j = pass_job(e, true, pi);
    CX_CHECK(cx_run_view(&j, pi->out, ov));
    if (ov->ndim < 1 || ov->shape[0] != rows) {
        char s[128];
        return cx_fail(CATTR_ERR_SHAPE, "the model output has shape %s; expected the batch (%lld) first",
                       cx_shape_str(ov->ndim, ov->shape, s, sizeof s), (long long)rows);
    }
    return CATTR_OK;
}

/* The backend buffers of a pass's attributed inputs and results, when they live there: xs_dev[i] (not NULL) holds
 * xs[i]'s values (xs[i] then gives the shape only); res_dev[k] (not NULL, k < c->n) receives result k, which then
 * comes down into res[k] when res[k] is not NULL. */
typedef struct pass_dev {
    void *xs_dev[MAX_IN];
    void *res_dev[MAX_IN];
} pass_dev;

/* *pd for a pass whose attributed inputs are xs_dev (or none) and whose results have the shapes of like[k] with
 * `rows` rows: each result goes to the call's attr_dev (the caller takes them on the backend; rows must be B) or, to
 * keep it or to take a slice of it there, to e->kept. *used: whether anything of the pass is on the backend (else pd
 * is not needed). */
static cattr_status pass_dev_make(cattr_explainer *e, const cx_call *c, void *const *xs_dev,
                                  cattr_tensor *const *like, int64_t rows, bool keep, pass_dev *pd, bool *used) {
    memset(pd, 0, sizeof *pd);
    *used = keep || xs_dev || c->attr_dev[0];
    for (int i = 0; xs_dev && i < c->n; i++) pd->xs_dev[i] = xs_dev[i];
    for (int k = 0; k < c->n; k++) {
        if (c->attr_dev[k] && rows == c->B) {
            pd->res_dev[k] = c->attr_dev[k];
        } else if (keep || c->attr_dev[k]) {
            size_t bytes = (size_t)(like[k]->numel / (like[k]->shape[0] ? like[k]->shape[0] : 1) * rows) *
                           cattr_dtype_size(c->dt);
            CX_CHECK(cx_buf_fit(e->be, &e->kept[k], bytes, NULL, false));
            pd->res_dev[k] = e->kept[k].p;
        }
    }
    return CATTR_OK;
}

/* One pass of the gradient graph on xs (reps*B rows; the additional inputs and the seed expanded by `how`): e->g's
 * gradients (derived false), or outputs outs[0..n_outs) of e->gm, whose n_extra int64 [B] inputs after the seed hold
 * extra[k]. The outputs go to the caller's host tensors res[] and,
 * with pd, to or through backend buffers (pass_dev). */
static cattr_status grad_graph_run(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, int64_t reps, cx_expand how,
                                   bool derived, const int *outs, int n_outs, int n_extra,
                                   const int64_t *const *extra, const pass_dev *pd, cattr_tensor *const *res) {
    pass_inputs pi;
    cattr_tensor *seed = NULL;
    cx_view ov;
    int si = e->seed_input;
    if (si + n_extra >= MAX_IN) return cx_fail(CATTR_ERR_UNSUPPORTED, "too many model inputs");
    cattr_status st = pass_setup(e, c, xs, reps, how, &pi);
    if (st == CATTR_OK) st = output_shape(e, &pi, reps * c->B, &ov);
    if (st == CATTR_OK) st = make_seed(c, ov.ndim, ov.shape, reps, how, &seed);
    if (st == CATTR_OK) {
        pi.in[si] = cx_arg_of(seed);
        for (int k = 1; k <= n_extra; k++) {
            cx_arg x = {.nd = 1, .sh = {c->B}, .dt = CATTR_INT64, .host = extra[k - 1]};
            pi.in[si + k] = x;
        }
        cx_job j = pass_job(e, false, &pi);
        if (derived) {
            j = cx_job_for(e, e->gm, e->consts);
            j.n_in = e->gm->n_inputs;
            j.in = pi.in;
            j.n_out = n_outs;
            j.outs = outs;
        }
        void *dst[MAX_IN + 1], *dev[MAX_IN + 1] = {0};
        for (int k = 0; k < j.n_out; k++) dst[k] = res[k] ? res[k]->data : NULL;
        for (int k = 0; pd && k < c->n; k++) { /* inputs already on the backend; results kept there (and brought
                                                * down too where res[k] is given) */
            dev[k] = pd->res_dev[k];
            if (pd->xs_dev[k]) {
                pi.in[k].host = NULL;
                pi.in[k].dev = pd->xs_dev[k];
            }
        }
        j.out_host = dst;
        j.out_dev = dev;
        st = cx_run(&j);
    }
    pass_free(&pi);
    cattr_tensor_free(seed);
    return st;
}

/* res[k] = new tensors of the shapes of like[k] in the compute dtype (k < n); all or none. */
static cattr_status alloc_like(const cx_call *c, cattr_tensor *const *like, int n, cattr_tensor **res) {
    for (int k = 0; k < n; k++) res[k] = NULL;
    for (int k = 0; k < n; k++)
        if (!(res[k] = cx_tensor_alloc(c->dt, like[k]->ndim, like[k]->shape))) {
            for (int j = 0; j < k; j++) {
                cattr_tensor_free(res[j]);
                res[j] = NULL;
            }
            return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        }
    return CATTR_OK;
}

static void free_all(cattr_tensor **res, int n) {
    for (int k = 0; k < n; k++) {
        cattr_tensor_free(res[k]);
        res[k] = NULL;
    }
}

cattr_status cx_grad(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, int64_t reps, cx_expand how,
                     cattr_tensor **grads) {
    return cx_grad_keep(e, c, xs, NULL, reps, how, false, grads);
}

cattr_status cx_grad_keep(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, void *const *xs_dev, int64_t reps,
                          cx_expand how, bool keep, cattr_tensor **grads) {
    CX_CHECK(alloc_like(c, xs, c->n, grads));
    pass_dev pd;
    bool dev;
    cattr_status st = pass_dev_make(e, c, xs_dev, xs, c->n ? xs[0]->shape[0] : 0, keep, &pd, &dev);
    for (int i = 0; c->attr_dev[0] && i < c->n; i++) { /* the caller takes them from the backend: none come down */
        cattr_tensor_free(grads[i]);
        grads[i] = NULL;
    }
    if (st == CATTR_OK) st = grad_graph_run(e, c, xs, reps, how, false, NULL, 0, 0, NULL, dev ? &pd : NULL, grads);
    if (st != CATTR_OK) free_all(grads, c->n);
    return st;
}

/* e->gm: g, then per attributed input out_i = Mul(Sub(Gather(x_i, first), Gather(x_i, second)), Gather(grad_i,
 * first)) (Captum's (x - baseline) * multiplier, rounded as the host loop it replaced). */
static cattr_status build_times_diff(cattr_explainer *e) {
    if (e->gm && e->gm_kind == 1) return CATTR_OK;
    cg_free(e->gm);
    e->gm = NULL;
    static const char *const names[2] = {"__cattr_first__", "__cattr_second__"};
    int ex[2], bad = 0;
    cg_graph *g = NULL;
    CX_CHECK(cx_derive_clone(e->g, 2, names, &g, ex));
    int first = ex[0], second = ex[1];
    cg_attrs a = cg_attrs_default();
    for (int i = 0; i < e->n_attr && !bad; i++) {
        int x = g->inputs[i];
        int xa = cg_emit(g, CG_GATHER, "__cattr_x", (int[]){x, first}, 2, &a);
        int xb = cg_emit(g, CG_GATHER, "__cattr_reference", (int[]){x, second}, 2, &a);
        int gr = cg_emit(g, CG_GATHER, "__cattr_multiplier", (int[]){e->grads[i], first}, 2, &a);
        int d = xa < 0 || xb < 0 ? -1 : cg_emit(g, CG_SUB, "__cattr_difference", (int[]){xa, xb}, 2, NULL);
        e->gm_outs[i] = d < 0 || gr < 0 ? -1 : cg_emit(g, CG_MUL, "__cattr_times_difference", (int[]){d, gr}, 2, NULL);
        bad |= e->gm_outs[i] < 0;
    }
    if (bad) {
        cg_free(g);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    e->gm = g;
    e->gm_kind = 1;
    return CATTR_OK;
}

cattr_status cx_grad_times_diff(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, void *const *xs_dev, bool keep,
                                cattr_tensor **attr) {
    int64_t B = c->B, *rows = malloc((size_t)(2 * B + 1) * sizeof *rows);
    for (int i = 0; i < c->n; i++) attr[i] = NULL;
    cattr_status st = rows ? build_times_diff(e) : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t r = 0; st == CATTR_OK && r < 2 * B; r++) rows[r] = r; /* first: 0..B-1, second: B..2B-1 */
    if (st == CATTR_OK && !c->attr_dev[0]) st = alloc_like(c, c->x, c->n, attr); /* else: left on the backend */
    pass_dev pd;
    bool dev = false;
    if (st == CATTR_OK) st = pass_dev_make(e, c, xs_dev, c->x, B, keep, &pd, &dev);
    const int64_t *extra[2] = {rows, rows + B};
    if (st == CATTR_OK) st = grad_graph_run(e, c, xs, 2, CX_TILE, true, e->gm_outs, c->n, 2, extra, dev ? &pd : NULL, attr);
    if (st != CATTR_OK) free_all(attr, c->n);
    free(rows);
    return st;
}

/* A copy of e->g with one more input, tidx [rows] (int64), and the output
 * *sel = Reshape(SeqPick(Reshape(output, [rows, -1, 1]), tidx), [-1]): each row's target value. */
static cattr_status clone_with_select(cattr_explainer *e, cg_graph **out, int *sel) {
    static const char *const tname[1] = {"__cattr_tidx__"};
    int tidx = -1;
    cg_graph *g = NULL;
    CX_CHECK(cx_derive_clone(e->g, 1, tname, &g, &tidx));
    cg_attrs r3 = cg_attrs_default(), r1 = cg_attrs_default();
    r3.n_ints = 3;
    r3.ints[0] = 0, r3.ints[1] = -1, r3.ints[2] = 1;
    r1.n_ints = 1;
    r1.ints[0] = -1;
    int y3 = cg_emit(g, CG_RESHAPE, "__cattr_out_rows", (int[]){cx_model_output(e->m)}, 1, &r3);
    int ys = y3 < 0 ? -1 : cg_emit(g, CG_SEQ_PICK, "__cattr_target", (int[]){y3, tidx}, 2, NULL);
    *sel = ys < 0 ? -1 : cg_emit(g, CG_RESHAPE, "__cattr_selected", (int[]){ys}, 1, &r1);
    if (*sel < 0) {
        cg_free(g);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    *out = g;
    return CATTR_OK;
}

/* e->gm for LRP: sel = Reshape(SeqPick(Reshape(output, [B, -1, 1]), tidx), [-1]); per attributed input
 * out_i = Mul(g_i or Mul(g_i, x_i), Reshape(sel, [B, 1, ...])) (rank of x_i), rounded as the host loop it replaced;
 * outputs out_0.., then sel. */
static cattr_status build_lrp(cattr_explainer *e, const cx_call *c, unsigned mul) {
    bool same = e->gm && e->gm_kind == 2 && e->gm_mul == (int)mul;
    for (int i = 0; same && i < c->n; i++) same = e->gm_rank[i] == c->x[i]->ndim;
    if (same) return CATTR_OK;
    cg_free(e->gm);
    e->gm = NULL;
    int sel = -1, bad = 0;
    cg_graph *g = NULL;
    CX_CHECK(clone_with_select(e, &g, &sel));
    for (int i = 0; i < c->n && !bad; i++) {
        cg_attrs rr = cg_attrs_default();
        rr.n_ints = c->x[i]->ndim;
        rr.ints[0] = -1;
        for (int d = 1; d < rr.n_ints; d++) rr.ints[d] = 1;
        int sb = cg_emit(g, CG_RESHAPE, "__cattr_selected_rows", (int[]){sel}, 1, &rr);
        int gi = e->grads[i];
        if (mul & (1u << i)) gi = cg_emit(g, CG_MUL, "__cattr_times_input", (int[]){gi, g->inputs[i]}, 2, NULL);
        e->gm_outs[i] = sb < 0 || gi < 0 ? -1 : cg_emit(g, CG_MUL, "__cattr_relevance", (int[]){gi, sb}, 2, NULL);
        bad |= e->gm_outs[i] < 0;
        e->gm_rank[i] = c->x[i]->ndim;
    }
    if (bad) {
        cg_free(g);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    e->gm_outs[c->n] = sel;
    e->gm = g;
    e->gm_kind = 2;
    e->gm_mul = (int)mul;
    return CATTR_OK;
}

cattr_status cx_grad_lrp(cattr_explainer *e, cx_call *c, unsigned mul, bool keep, cattr_tensor **attr, double *sel) {
    cattr_tensor *seed = NULL, *res[MAX_IN + 1] = {0};
    int64_t B = c->B, *tidx = malloc((size_t)(B + 1) * sizeof *tidx);
    for (int i = 0; i < c->n; i++) attr[i] = NULL;
    cattr_status st = tidx ? build_lrp(e, c, mul) : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) st = cx_seed_block(e, c, &seed);
    if (st == CATTR_OK) cx_target_rows(seed, B, B, tidx);
    if (st == CATTR_OK) st = alloc_like(c, c->x, c->n, res);
    if (st == CATTR_OK && sel && !(res[c->n] = cx_tensor_alloc(c->dt, 1, &B)))
        st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    pass_dev pd;
    bool dev = false;
    if (st == CATTR_OK) st = pass_dev_make(e, c, c->x_dev[0] ? c->x_dev : NULL, c->x, B, keep, &pd, &dev);
    for (int i = 0; st == CATTR_OK && c->attr_dev[0] && i < c->n; i++) { /* left on the backend: no host copy */
        cattr_tensor_free(res[i]);
        res[i] = NULL;
    }
    const int64_t *extra[1] = {tidx};
    if (st == CATTR_OK) st = grad_graph_run(e, c, c->x, 1, CX_TILE, true, e->gm_outs, c->n + 1, 1, extra, dev ? &pd : NULL, res);
    for (int64_t b = 0; sel && b < B && st == CATTR_OK; b++) sel[b] = cx_tensor_get(res[c->n], b);
    for (int i = 0; i < c->n && st == CATTR_OK; i++) attr[i] = res[i];
    if (st != CATTR_OK) free_all(res, c->n);
    cattr_tensor_free(res[c->n]);
    cattr_tensor_free(seed);
    free(tidx);
    return st;
}

/* Whether derived state d was built for call c's shape (inputs and their ranks, additional inputs, target mode). */
static bool cx_derived_fits(const cx_derived *d, const cx_call *c, bool target) {
    bool same = d->g && d->n == c->n && d->n_add == c->n_add && d->target == target;
    for (int i = 0; same && i < c->n; i++) same = d->rank[i] == c->x[i]->ndim;
    return same;
}
/* Records call c's shape in d (before the method builds d->g for it). */
static void cx_derived_key(cx_derived *d, const cx_call *c, bool target) {
    d->n = c->n;
    d->n_add = c->n_add;
    d->target = target;
    for (int i = 0; i < c->n; i++) d->rank[i] = c->x[i]->ndim;
}

cattr_status cx_derived_state(cattr_explainer *e, cx_call *c, bool target, size_t size,
                              cattr_status (*build)(cattr_explainer *e, void *state),
                              void (*release)(cattr_explainer *e), void **state) {
    cx_derived *d = e->method_state; /* the first member of the state */
    if (d && !cx_derived_fits(d, c, target)) release(e);
    if (!e->method_state) {
        if (!(d = calloc(1, size))) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        e->method_state = d;
        cx_derived_key(d, c, target);
        cattr_status st = build(e, d);
        if (st == CATTR_OK) st = cx_consts_new(e->be, c->dt, &d->consts);
        if (st != CATTR_OK) {
            release(e);
            return st;
        }
    }
    *state = e->method_state;
    return CATTR_OK;
}

cattr_status cx_call_dev_fit(cattr_explainer *e, cx_call *c, cx_call_dev *d, int64_t rmax, bool target, int64_t n_y) {
    size_t es = cattr_dtype_size(c->dt);
    int64_t B = c->B;
    for (int i = 0; i < c->n; i++) { /* float inputs in the compute dtype, or int64 */
        size_t xb = (size_t)c->x[i]->numel * cattr_dtype_size(c->x[i]->dtype);
        CX_CHECK(cx_buf_fit(e->be, &d->x[i], xb, NULL, false));
        CX_CHECK(cx_buf_put(&d->x[i], 0, c->x[i]->data, c->x_dev[i], xb)); /* or from the backend (cx_call.x_dev) */
        CX_CHECK(cx_buf_fit(e->be, &d->base[i], xb, c->base[i]->data, false));
    }
    for (int j = 0; j < c->n_add; j++)
        CX_CHECK(cx_buf_fit(e->be, &d->add[j], (size_t)c->add[j]->numel * cattr_dtype_size(c->add[j]->dtype),
                             c->add[j]->data, false));
    int64_t *buf = malloc((size_t)(rmax + 1) * sizeof *buf);
    cattr_tensor *seed = NULL;
    cattr_status st = buf ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t r = 0; r < rmax && st == CATTR_OK; r++) buf[r] = r % B;
    if (st == CATTR_OK) st = cx_buf_fit(e->be, &d->rows, (size_t)rmax * sizeof *buf, buf, false);
    if (st == CATTR_OK && target) st = cx_seed_block(e, c, &seed);
    if (st == CATTR_OK && target) {
        cx_target_rows(seed, B, rmax, buf);
        st = cx_buf_fit(e->be, &d->tidx, (size_t)rmax * sizeof *buf, buf, false);
    }
    /* outputs of the compute dtype, or int64 (a model of integers): room for 8 bytes each */
    if (st == CATTR_OK) st = cx_buf_fit(e->be, &d->y, (size_t)n_y * (es > 8 ? es : 8), NULL, false);
    cattr_tensor_free(seed);
    free(buf);
    return st;
}

void cx_call_dev_free(cx_call_dev *d) {
    for (int i = 0; i < CX_MAX_IN; i++) {
        cx_buf_free(&d->x[i]);
        cx_buf_free(&d->base[i]);
        cx_buf_free(&d->add[i]);
    }
    cx_buf_free(&d->rows);
    cx_buf_free(&d->tidx);
    cx_buf_free(&d->y);
}

cattr_status cx_derived_values(cattr_explainer *e, cx_derived *dv, const cx_arg *in, int y, cx_call_dev *d, int64_t nv,
                               double *vals) {
    return cx_derived_values_n(e, dv, in, &y, 1, d, nv, vals);
}

cattr_status cx_derived_values_n(cattr_explainer *e, cx_derived *dv, const cx_arg *in, const int *ys, int n_ys,
                                 cx_call_dev *d, int64_t nv, double *vals) {
    if (n_ys > CX_MAX_IN) return cx_fail(CATTR_ERR_INTERNAL, "too many outputs");
    cx_job j = cx_job_for(e, dv->g, dv->consts);
    j.n_in = dv->g->n_inputs;
    j.in = in;
    j.n_out = n_ys;
    j.outs = ys;
    void *out[CX_MAX_IN];
    size_t off[CX_MAX_IN + 1], es[CX_MAX_IN];
    cattr_dtype odt[CX_MAX_IN];
    off[0] = 0;
    for (int k = 0; k < n_ys; k++) { /* each output in its own dtype (the model's may be int64) */
        cx_view yv;
        CX_CHECK(cx_run_view(&j, ys[k], &yv));
        int64_t got = cx_view_numel(&yv);
        if (got != nv)
            return cx_fail(CATTR_ERR_SHAPE, "the model output has %lld values for a chunk of perturbed copies of the "
                                            "batch; expected %lld",
                           (long long)got, (long long)nv);
        odt[k] = yv.dtype;
        es[k] = cattr_dtype_size(odt[k]);
        out[k] = (char *)d->y.p + off[k];
        off[k + 1] = off[k] + (size_t)nv * es[k];
    }
    char *host = malloc(off[n_ys] + 1);
    if (!host) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    void *oh[CX_MAX_IN];
    for (int k = 0; k < n_ys; k++) oh[k] = host + off[k];
    j.out_dev = out; /* into d->y, then down in one piece */
    j.out_host = oh;
    cattr_status st = cx_run(&j);
    for (int k = 0; k < n_ys && st == CATTR_OK; k++)
        for (int64_t i = 0; i < nv; i++) {
            const char *h = host + off[k] + (size_t)i * es[k];
            double v;
            if (odt[k] == CATTR_FLOAT32) v = (double)*(const float *)h;
            else if (odt[k] == CATTR_FLOAT64) v = *(const double *)h;
            else v = (double)*(const int64_t *)h;
            vals[k * nv + i] = v;
        }
    free(host);
    return st;
}

void cx_target_rows(const cattr_tensor *seed, int64_t B, int64_t n, int64_t *idx) {
    int64_t per_ex = B ? seed->numel / B : 0;
    for (int64_t b = 0; b < B && b < n; b++) {
        int64_t t = 0;
        for (int64_t k = 0; k < per_ex; k++)
            if (cx_tensor_get(seed, b * per_ex + k) != 0) t = k;
        idx[b] = t;
    }
    for (int64_t r = B; r < n; r++) idx[r] = idx[r % B];
}

/* The perturbation methods on the inputs (as call.c's perturbs_inputs): they also take a model output without the
 * batch first (a model of the whole batch, Captum's aggregation mode; perturbation.c, lime.c). */
static bool whole_batch_outputs(const cattr_explainer *e) {
    cattr_method m = e->p.method;
    return e->p.nt_type == CATTR_NT_NONE &&
           (m == CATTR_METHOD_FEATURE_ABLATION || m == CATTR_METHOD_FEATURE_PERMUTATION ||
            m == CATTR_METHOD_OCCLUSION || m == CATTR_METHOD_SHAPLEY_VALUE_SAMPLING ||
            m == CATTR_METHOD_SHAPLEY_VALUES || m == CATTR_METHOD_LIME || m == CATTR_METHOD_KERNEL_SHAP ||
            m == CATTR_METHOD_NEURON_FEATURE_ABLATION);
}

cattr_status cx_output_shape(cattr_explainer *e, const cx_call *c, int64_t reps, int *ndim, int64_t *shape,
                             cattr_dtype *dt) {
    pass_inputs pi = {0};
    for (int k = 0; k < c->n + c->n_add; k++) {
        pi.in[k] = cx_arg_of(k < c->n ? c->x[k] : c->add[k - c->n]);
        pi.in[k].host = NULL; /* shapes only */
        if (pi.in[k].nd) pi.in[k].sh[0] *= reps;
    }
    pi.in[e->seed_input].dt = c->dt;
    pi.out = cx_model_output(e->m);
    cx_job j = pass_job(e, true, &pi);
    cx_view ov;
    CX_CHECK(cx_run_view(&j, pi.out, &ov));
    *ndim = ov.ndim;
    memcpy(shape, ov.shape, (size_t)ov.ndim * sizeof *shape);
    if (dt) *dt = ov.dtype;
    return CATTR_OK;
}

cattr_status cx_seed_block(cattr_explainer *e, cx_call *c, cattr_tensor **seed) {
    pass_inputs pi;
    cx_view ovv;
    const cx_view *ov = NULL;
    *seed = NULL;
    cattr_status st = pass_setup(e, c, c->x, 1, CX_TILE, &pi);
    if (st == CATTR_OK && whole_batch_outputs(e)) { /* an output of the whole batch: the target picks from its rows */
        cx_job j = pass_job(e, true, &pi);
        st = cx_run_view(&j, pi.out, &ovv);
        ov = st == CATTR_OK ? &ovv : NULL;
        if (ov && (ov->ndim < 1 || ov->shape[0] != c->B)) {
            char s[128];
            int64_t per = ov->ndim ? cx_numel(ov->ndim - 1, ov->shape + 1) : 1;
            double *mask = malloc((size_t)(cx_view_numel(ov) + 1) * sizeof *mask);
            cattr_tensor *t = cx_tensor_alloc(c->dt, ov->ndim, ov->shape);
            if (!mask || !t) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            else if (ov->ndim < 1)
                st = cx_fail(CATTR_ERR_TARGET, "the model output has shape %s (one value for the batch): there is "
                             "nothing for a target to select; give no target",
                             cx_shape_str(ov->ndim, ov->shape, s, sizeof s));
            else
                st = cx_target_mask(c->target, ov->ndim, ov->shape, mask);
            for (int64_t k = 0; st == CATTR_OK && k < ov->shape[0] * per; k++) cx_tensor_set(t, k, mask[k]);
            free(mask);
            if (st == CATTR_OK) *seed = t;
            else cattr_tensor_free(t);
            pass_free(&pi);
            return st;
        }
    }
    if (st == CATTR_OK) st = output_shape(e, &pi, c->B, &ovv);
    if (st == CATTR_OK) st = make_seed(c, ovv.ndim, ovv.shape, 1, CX_TILE, seed);
    pass_free(&pi);
    return st;
}


/* cx_forward; with `whole`, xs are the inputs as they are (reps 1) and the output may have any shape. */
static cattr_status forward_run(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, void *const *xs_dev,
                                int64_t reps, cx_expand how, bool whole, cattr_tensor **out) {
    pass_inputs pi;
    cx_view ov;
    cattr_tensor *o = NULL;
    *out = NULL;
    cattr_status st = pass_setup(e, c, xs, reps, how, &pi);
    cx_job j = pass_job(e, true, &pi);
    if (st == CATTR_OK && whole) st = cx_run_view(&j, pi.out, &ov);
    else if (st == CATTR_OK) st = output_shape(e, &pi, reps * c->B, &ov);
    if (st == CATTR_OK) {
        o = cx_tensor_alloc(ov.dtype, ov.ndim, ov.shape);
        if (!o) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK) {
        void *dst = o->data;
        for (int i = 0; xs_dev && i < c->n; i++) /* inputs already on the backend */
            if (xs_dev[i]) {
                pi.in[i].host = NULL;
                pi.in[i].dev = xs_dev[i];
            }
        j.out_host = &dst;
        st = cx_run(&j);
    }
    pass_free(&pi);
    if (st != CATTR_OK) {
        cattr_tensor_free(o);
        return st;
    }
    *out = o;
    return CATTR_OK;
}

cattr_status cx_forward(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, void *const *xs_dev, int64_t reps,
                        cx_expand how, cattr_tensor **out) {
    return forward_run(e, c, xs, xs_dev, reps, how, false, out);
}

cattr_status cx_forward_whole(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, cattr_tensor **out) {
    return forward_run(e, c, xs, NULL, 1, CX_TILE, true, out);
}

/* e->sel_g: e->g with the target selection of clone_with_select, each row's target value. */
static cattr_status build_select(cattr_explainer *e) {
    if (e->sel_g) return CATTR_OK;
    int sel = -1;
    cg_graph *g = NULL;
    CX_CHECK(clone_with_select(e, &g, &sel));
    e->sel_g = g;
    e->sel_out = sel;
    return CATTR_OK;
}

cattr_status cx_forward_select(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, void *const *xs_dev,
                               int64_t reps, cx_expand how, double *sel, cattr_dtype *out_dt) {
    int si = e->seed_input;
    if (si + 1 >= MAX_IN) return cx_fail(CATTR_ERR_UNSUPPORTED, "too many model inputs");
    int64_t R = reps * c->B;
    pass_inputs pi;
    cx_view ovv;
    const cx_view *ov = &ovv;
    cattr_tensor *vals = NULL;
    int64_t *tidx = malloc((size_t)(R + 1) * sizeof *tidx);
    double *mask = NULL;
    cattr_status st = tidx ? build_select(e) : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) st = pass_setup(e, c, xs, reps, how, &pi);
    else memset(&pi, 0, sizeof pi);
    if (st == CATTR_OK) st = output_shape(e, &pi, R, &ovv);
    if (st == CATTR_OK && out_dt) *out_dt = ov->dtype;
    if (st == CATTR_OK && sel && !(vals = cx_tensor_alloc(ov->dtype, 1, &R)))
        st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    int64_t B = c->B, per_ex = st == CATTR_OK ? cx_numel(ov->ndim - 1, ov->shape + 1) : 0;
    if (st == CATTR_OK && sel) { /* each example's target: the flat index of its 1 in the target mask of one block */
        int64_t blk[CATTR_MAX_DIMS];
        memcpy(blk, ov->shape, sizeof blk);
        blk[0] = B;
        mask = malloc((size_t)(B * per_ex + B + 1) * sizeof *mask);
        st = mask ? cx_target_mask(c->target, ov->ndim, blk, mask) : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        double *tb = mask ? mask + B * per_ex : NULL; /* example b's target */
        for (int64_t b = 0; b < B && st == CATTR_OK; b++) {
            tb[b] = 0;
            for (int64_t k = 0; k < per_ex; k++)
                if (mask[b * per_ex + k] != 0) tb[b] = (double)k;
        }
        for (int64_t r = 0; r < R && st == CATTR_OK; r++) tidx[r] = (int64_t)tb[how == CX_TILE ? r % B : r / reps];
    } else if (st == CATTR_OK) { /* only the plan: the indices' shape */
        memset(tidx, 0, (size_t)R * sizeof *tidx);
    }
    cx_job j = cx_job_for(e, e->sel_g, e->consts);
    j.n_in = e->sel_g ? e->sel_g->n_inputs : 0;
    j.in = pi.in;
    j.n_out = 1;
    j.outs = &e->sel_out;
    if (st == CATTR_OK) {
        cx_arg t = {.nd = 1, .sh = {R}, .dt = CATTR_INT64, .host = tidx};
        pi.in[si + 1] = t;
        size_t bytes;
        st = cx_run_bytes(&j, true, &bytes); /* the plan, made now (sel NULL: for runs from several threads later) */
    }
    if (st == CATTR_OK && sel) {
        void *dst[1] = {vals->data};
        for (int i = 0; xs_dev && i < c->n; i++) /* inputs already on the backend */
            if (xs_dev[i]) {
                pi.in[i].host = NULL;
                pi.in[i].dev = xs_dev[i];
            }
        j.out_host = dst;
        st = cx_run(&j);
        for (int64_t r = 0; r < R && st == CATTR_OK; r++) sel[r] = cx_tensor_get(vals, r);
    }
    pass_free(&pi);
    cattr_tensor_free(vals);
    free(tidx);
    free(mask);
    return st;
}

cattr_status cx_select(const cx_call *c, const cattr_tensor *out, int64_t reps, cx_expand how, double *sel) {
    int64_t blk[CATTR_MAX_DIMS];
    memcpy(blk, out->shape, sizeof blk);
    blk[0] = c->B;
    int64_t per_ex = cx_numel(out->ndim - 1, out->shape + 1);
    double *mask = malloc((size_t)(c->B * per_ex + 1) * sizeof *mask);
    if (!mask) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_status st = cx_target_mask(c->target, out->ndim, blk, mask);
    if (st == CATTR_OK)
        for (int64_t r = 0; r < reps * c->B; r++) {
            int64_t b = how == CX_TILE ? r % c->B : r / reps;
            double s = 0;
            for (int64_t k = 0; k < per_ex; k++)
                if (mask[b * per_ex + k] != 0) s += cx_tensor_get(out, r * per_ex + k);
            sel[r] = s;
        }
    free(mask);
    return st;
}


cattr_status cx_row_bytes(cattr_explainer *e, cx_call *c, bool with_grad, size_t *bytes) {
    pass_inputs pi;
    cx_view ov;
    size_t act = 0;
    cattr_status st = pass_setup(e, c, c->x, 1, CX_TILE, &pi);
    if (st == CATTR_OK) st = output_shape(e, &pi, c->B, &ov);
    cx_job fj = pass_job(e, true, &pi);
    if (st == CATTR_OK) st = cx_run_bytes(&fj, true, &act);
    pass_free(&pi);
    if (st != CATTR_OK) return st;
    size_t host = 0;
    for (int i = 0; i < c->n; i++) host += (size_t)c->x[i]->numel * cattr_dtype_size(c->dt);
    if (with_grad && e->g) {
        /* the gradient plan keeps what the backward needs of every layer: plan it for one rep (a plan made for its
         * shapes allocates nothing) and take its arena; remembered for these shapes */
        bool same = e->rb_n == c->n && e->rb_bytes;
        for (int i = 0; i < c->n && same; i++) same = !memcmp(e->rb_sh[i], c->x[i]->shape, sizeof e->rb_sh[i]);
        if (!same) {
            st = pass_setup(e, c, c->x, 1, CX_TILE, &pi);
            size_t gb = 0;
            if (st == CATTR_OK) {
                pi.in[e->seed_input].nd = ov.ndim;
                memcpy(pi.in[e->seed_input].sh, ov.shape, sizeof ov.shape);
                cx_job gj = pass_job(e, false, &pi);
                gj.eager = false;
                st = cx_run_bytes(&gj, false, &gb);
            }
            pass_free(&pi);
            if (st != CATTR_OK) return st;
            e->rb_bytes = gb + 1;
            e->rb_n = c->n;
            for (int i = 0; i < c->n; i++) memcpy(e->rb_sh[i], c->x[i]->shape, sizeof e->rb_sh[i]);
        }
        act = e->rb_bytes;
    } else if (with_grad) {
        act *= 3;
    }
    size_t b = act + (with_grad ? 3 : 1) * host;
    *bytes = c->B ? b / (size_t)c->B : b;
    if (*bytes == 0) *bytes = 1;
    return CATTR_OK;
}

cattr_status cx_resolve_layer(const cattr_explainer *e, const char *layer, bool layer_input, int *value) {
    if (!layer || !*layer) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "this method needs a layer");
    const char *onnx = NULL;
    CX_CHECK(cattr_model_resolve_value(e->m, layer, &onnx));
    int v = cg_find_value(e->m->g, onnx);
    if (v < 0) return cx_fail(CATTR_ERR_INTERNAL, "layer '%s' resolved to an unknown value", layer);
    int pv = e->m->g->vals[v].producer;
    if (!layer_input && pv >= 0 && cx_conv_bn_folded(e->m->g, pv))
        cx_log(CATTR_LOG_WARN, "layer '%s': the export folded a BatchNorm into this Conv, so its output is the "
                               "BatchNorm's (export with do_constant_folding=False, or in training mode, to keep the "
                               "boundary)", layer);
    if (layer_input) {
        /* a module path: the first value the module reads from outside (a Linear exported as MatMul + Add reads the
         * MatMul's input, not the Add's); else the first non-constant input of the node producing the layer value */
        const char *in_name = NULL;
        if (cattr_model_module_values(e->m, layer, 1, &in_name, 1) >= 1 && in_name) {
            int u = cg_find_value(e->m->g, in_name);
            if (u >= 0) {
                *value = u;
                return CATTR_OK;
            }
        }
        int prod = e->m->g->vals[v].producer;
        int in = -1;
        for (int j = 0; prod >= 0 && j < e->m->g->nodes[prod].n_in && in < 0; j++) {
            int u = e->m->g->nodes[prod].in[j];
            if (u >= 0 && e->m->g->vals[u].kind != CG_VAL_CONST) in = u;
        }
        if (in < 0) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "layer '%s' has no input value", layer);
        v = in;
    }
    *value = v;
    return CATTR_OK;
}


cattr_attr_params cx_inner_params(const cattr_explainer *e, cattr_method method) {
    cattr_attr_params p = e->p;
    p.method = method;
    p.nt_type = CATTR_NT_NONE;
    p.device = e->be->name;
    p.precision = CATTR_PRECISION_HIGHEST;
    p.layer = NULL;
    p.layers = NULL;
    p.n_layers = 0;
    p.attribute_to_layer_input = 0;
    p.neuron_kind = CATTR_NEURON_NONE;
    p.return_convergence_delta = 0;
    return p;
}

cattr_call cx_call_rest(const cx_call *c) {
    cattr_call call = *c->user;
    if (call.n_draws > 0 && c->next_draw > 0) {
        call.draws += c->next_draw;
        if (call.draw_roles) call.draw_roles += c->next_draw;
        call.n_draws -= c->next_draw;
    }
    return call;
}

cattr_status cx_next_draw(cx_call *c, const char *role, const char *const *skip, const cattr_tensor **out) {
    *out = NULL;
    const cattr_call *u = c->user;
    if (!u || u->n_draws <= 0) return CATTR_OK;
    while (c->next_draw < u->n_draws) {
        const char *r = u->draw_roles ? u->draw_roles[c->next_draw] : NULL;
        bool skipped = false;
        for (int k = 0; skip && skip[k] && r; k++) skipped |= strcmp(r, skip[k]) == 0;
        if (skipped) {
            c->next_draw++;
            continue;
        }
        if (r && role && strcmp(r, role) != 0)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explicit draw %d has role '%s'; the method needs '%s'",
                           c->next_draw, r, role);
        *out = u->draws[c->next_draw++];
        return CATTR_OK;
    }
    return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "the %d explicit draws are used up; the method needs another '%s'",
                   u->n_draws, role ? role : "?");
}

/* st OK: res[0..n) into grads_out, extra into *extra_out (or freed); else all freed. Returns st. */
static cattr_status hand_over(cattr_status st, cattr_tensor **res, int n, cattr_tensor **grads_out, cattr_tensor *extra,
                              cattr_tensor **extra_out) {
    if (st != CATTR_OK) {
        free_all(res, MAX_IN);
        cattr_tensor_free(extra);
        return st;
    }
    for (int i = 0; i < n; i++) grads_out[i] = res[i];
    if (extra_out) *extra_out = extra;
    else cattr_tensor_free(extra);
    return CATTR_OK;
}

cattr_status cattr_explainer_vjp(cattr_explainer *e, const cattr_call *call, const cattr_tensor *seed,
                                 cattr_tensor **grads_out, cattr_tensor **output) {
    if (output) *output = NULL;
    if (!e || !call || !seed || !grads_out)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explainer, call, seed and grads_out are required");
    cx_call c;
    cattr_tensor *sd = NULL, *res[MAX_IN] = {0}, *out = NULL;
    pass_inputs pi = {0};
    cx_view ov;
    char s1[128], s2[128];
    cattr_status st = cx_prepare(e, call, &c);
    if (st == CATTR_OK) st = cx_build_grad_graph(e, call->n_inputs);
    if (st == CATTR_OK) st = pass_setup(e, &c, c.x, 1, CX_TILE, &pi);
    if (st == CATTR_OK) st = output_shape(e, &pi, c.B, &ov);
    if (st == CATTR_OK && !cx_shape_eq(seed->ndim, seed->shape, ov.ndim, ov.shape))
        st = cx_fail(CATTR_ERR_SHAPE, "the seed has shape %s; the model output for these inputs has %s",
                     cx_shape_str(seed->ndim, seed->shape, s1, sizeof s1), cx_shape_str(ov.ndim, ov.shape, s2, sizeof s2));
    if (st == CATTR_OK && seed->dtype != CATTR_FLOAT32 && seed->dtype != CATTR_FLOAT64)
        st = cx_fail(CATTR_ERR_DTYPE, "the seed is %s; give float32 or float64", cattr_dtype_name(seed->dtype));
    if (st == CATTR_OK) st = cattr_tensor_convert(seed, c.dt, &sd);
    if (st == CATTR_OK) st = alloc_like(&c, c.x, c.n, res);
    if (st == CATTR_OK && output && !(out = cx_tensor_alloc(ov.dtype, ov.ndim, ov.shape)))
        st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) { /* e->g's gradients for this seed, and with `output` the model output, in one run */
        pi.in[e->seed_input] = cx_arg_of(sd);
        cx_job j = pass_job(e, false, &pi);
        int outs[MAX_IN + 1];
        void *dst[MAX_IN + 1];
        for (int k = 0; k < c.n; k++) {
            outs[k] = e->grads[k];
            dst[k] = res[k]->data;
        }
        if (out) outs[c.n] = pi.out, dst[c.n] = out->data;
        j.n_out = c.n + (out ? 1 : 0);
        j.outs = outs;
        j.out_host = dst;
        st = cx_run(&j);
    }
    pass_free(&pi);
    cattr_tensor_free(sd);
    int n = c.n;
    cx_call_free(&c);
    return hand_over(st, res, n, grads_out, out, output);
}

/* e->gm for a loss (kind 3: -log(F[target]), 4: -log_softmax(F)[target]): the model, inputs tidx [B] and seed [B] after
 * its own, the losses l (gm_outs[n_attr]) and the gradients of sum(seed * l) (gm_outs[i]). */
static cattr_status build_loss(cattr_explainer *e, int n_attr, int kind) {
    if (e->gm && e->gm_kind == kind && e->gm_mul == n_attr) return CATTR_OK;
    cg_free(e->gm);
    e->gm = NULL;
    static const char *const names[2] = {"__cattr_loss_target__", "__cattr_loss_seed__"};
    int ex[2];
    cg_graph *g = NULL;
    CX_CHECK(cx_derive_clone(e->m->g, 2, names, &g, ex));
    cg_attrs rows = cg_attrs_default(), flat = cg_attrs_default();
    rows.n_ints = 3, rows.ints[0] = 0, rows.ints[1] = -1, rows.ints[2] = 1;
    flat.n_ints = 1, flat.ints[0] = -1;
    int y = cx_model_output(e->m);
    int src = kind == 4 ? cg_emit(g, CG_LOGSOFTMAX, "__cattr_loss_log_softmax", (int[]){y}, 1, NULL) : y;
    int y3 = src < 0 ? -1 : cg_emit(g, CG_RESHAPE, "__cattr_loss_rows", (int[]){src}, 1, &rows);
    int pick = cx_emit2(g, CG_SEQ_PICK, "__cattr_loss_target_value", y3, ex[0]);
    int p = pick < 0 ? -1 : cg_emit(g, CG_RESHAPE, "__cattr_loss_picked", (int[]){pick}, 1, &flat);
    int lg = kind == 4 || p < 0 ? p : cg_emit(g, CG_LOG, "__cattr_loss_log", (int[]){p}, 1, NULL);
    int l = lg < 0 ? -1 : cg_emit(g, CG_NEG, "__cattr_loss", (int[]){lg}, 1, NULL);
    cattr_status st = l < 0 ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory")
                            : cg_autodiff(g, l, ex[1], g->inputs, n_attr, &e->rules, e->gm_outs);
    if (st != CATTR_OK) {
        cg_free(g);
        return st;
    }
    e->gm_outs[n_attr] = l;
    e->gm = g;
    e->gm_kind = kind;
    e->gm_mul = n_attr;
    return CATTR_OK;
}

cattr_status cattr_explainer_loss_grad(cattr_explainer *e, const cattr_call *call, cattr_loss loss,
                                       cattr_tensor **grads_out, cattr_tensor **loss_out) {
    if (loss_out) *loss_out = NULL;
    if (!e || !call || !grads_out) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explainer, call and grads_out are required");
    if (loss != CATTR_LOSS_NLL_OUTPUT && loss != CATTR_LOSS_CROSS_ENTROPY)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "loss must be CATTR_LOSS_NLL_OUTPUT or CATTR_LOSS_CROSS_ENTROPY (got %d)",
                       (int)loss);
    if (!call->target || call->target->kind == CATTR_TARGET_NONE)
        return cx_fail(CATTR_ERR_TARGET, "a loss needs a target (the label of each example, or the class to reach)");
    cx_call c;
    cattr_tensor *sd = NULL, *res[MAX_IN] = {0}, *l = NULL, *tb = NULL;
    pass_inputs pi = {0};
    cx_view ov;
    char s1[128];
    cattr_status st = cx_prepare(e, call, &c);
    if (st == CATTR_OK) st = cx_build_grad_graph(e, call->n_inputs);
    if (st == CATTR_OK) st = pass_setup(e, &c, c.x, 1, CX_TILE, &pi);
    if (st == CATTR_OK) st = output_shape(e, &pi, c.B, &ov);
    if (st == CATTR_OK && loss == CATTR_LOSS_CROSS_ENTROPY && ov.ndim != 2)
        st = cx_fail(CATTR_ERR_UNSUPPORTED, "the cross-entropy loss takes a model output of [batch, classes]; this one "
                     "has shape %s", cx_shape_str(ov.ndim, ov.shape, s1, sizeof s1));
    int64_t B = c.B;
    int64_t *tidx = st == CATTR_OK ? malloc((size_t)(B + 1) * sizeof *tidx) : NULL;
    if (st == CATTR_OK && !tidx) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) st = cx_seed_block(e, &c, &tb); /* the target: one value per example, checked */
    if (st == CATTR_OK) cx_target_rows(tb, B, B, tidx);
    if (st == CATTR_OK) st = build_loss(e, c.n, loss == CATTR_LOSS_CROSS_ENTROPY ? 4 : 3);
    if (st == CATTR_OK && !(sd = cx_tensor_alloc(c.dt, 1, &B))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t b = 0; b < B && st == CATTR_OK; b++) cx_tensor_set(sd, b, 1);
    if (st == CATTR_OK) st = alloc_like(&c, c.x, c.n, res);
    if (st == CATTR_OK && !(l = cx_tensor_alloc(c.dt, 1, &B))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) {
        int si = e->seed_input;
        cx_arg t = {.nd = 1, .sh = {B}, .dt = CATTR_INT64, .host = tidx};
        pi.in[si] = t;
        pi.in[si + 1] = cx_arg_of(sd);
        cx_job j = cx_job_for(e, e->gm, e->consts);
        j.n_in = e->gm->n_inputs;
        j.in = pi.in;
        j.n_out = c.n + 1;
        j.outs = e->gm_outs;
        void *dst[MAX_IN + 1];
        for (int k = 0; k < c.n; k++) dst[k] = res[k]->data;
        dst[c.n] = l->data;
        j.out_host = dst;
        st = cx_run(&j);
    }
    pass_free(&pi);
    cattr_tensor_free(sd);
    cattr_tensor_free(tb);
    free(tidx);
    int n = c.n;
    cx_call_free(&c);
    return hand_over(st, res, n, grads_out, l, loss_out);
}
