/* layer_perturb.c - the layer methods built on rules, perturbations and the Shap family (Captum semantics:
 * shared/reference/captum_spec.md section 3): LayerFeatureAblation and LayerFeaturePermutation (FeatureAblation /
 * FeaturePermutation over the layer's activations, the model re-run from the perturbed layer), LayerDeepLift (the
 * target's gradient at the layer under DeepLift's rules on [x; x']), LayerLRP (the relevance arriving at the layer
 * times the target output), LayerDeepLiftShap (LayerDeepLift on every (example, baseline) pair, averaged) and
 * LayerGradientShap (GradientShap's noise tunnel around the layer's "input - baseline times the gradient at a random
 * point"). The neuron forms are in neuron.c.
 *
 * Every method works on its own graph (lp_graph): a clone of the model graph with, as extra graph inputs after the
 * model's, either a seed (gradient graphs: cg_autodiff of the model output) or one replacement input per layer
 * tensor (LayerFeatureAblation: the nodes that read the layer value read the replacement instead, while the layer's
 * own producer still computes the activation from the model inputs).
 */
#include "attr/internal.h"
#include "core/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* rules.c (not in internal.h) */

#define LP_MAX_LAYERS CX_MAX_IN
#define LP_MAX_OUTS (CX_MAX_IN + LP_MAX_LAYERS + 2)

/* ---- graphs and plans ------------------------------------------------------------------------------------------ */


typedef struct lp_graph {
    cg_graph *g;
    int n_model_in; /* graph inputs of the model; the extra inputs follow */
    int n_extra;
    int extra[LP_MAX_LAYERS]; /* value ids of the extra inputs */
    int grads[LP_MAX_OUTS];   /* gradient value ids (gradient graphs) */
    int n_grads;
    cx_plan_cache pc;
} lp_graph;

typedef struct lp_state {
    void *rules_state; /* rules.c state (NULL: default rules) */
    cg_rules rules;
    int layers[LP_MAX_LAYERS]; /* layer value ids, in the order of params.layers */
    int n_layers;
    lp_graph lg;
} lp_state;

static void graph_free(lp_graph *lg) {
    cx_plan_cache_clear(&lg->pc);
    cg_free(lg->g);
    memset(lg, 0, sizeof *lg);
}

static void lp_release(cattr_explainer *e) {
    lp_state *s = e->method_state;
    if (!s) return;
    graph_free(&s->lg);
    cx_rules_free(s->rules_state);
    free(s);
    e->method_state = NULL;
}

/* A new state: the layers resolved, and the backward rules of `rules_method` (CATTR_METHOD_COUNT: default rules). */
static cattr_status lp_init_common(cattr_explainer *e, cattr_method rules_method) {
    lp_state *s = calloc(1, sizeof *s);
    if (!s) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    e->method_state = s;
    const cattr_attr_params *p = &e->p;
    int n = p->n_layers > 0 ? p->n_layers : 1;
    if (n > LP_MAX_LAYERS) return cx_fail(CATTR_ERR_UNSUPPORTED, "more than %d layer tensors", LP_MAX_LAYERS);
    for (int k = 0; k < n; k++) {
        const char *name = p->n_layers > 0 ? p->layers[k] : p->layer;
        CX_CHECK(cx_resolve_layer(e, name, p->attribute_to_layer_input != 0, &s->layers[k]));
    }
    s->n_layers = n;
    cg_rules_default(&s->rules);
    if (rules_method != CATTR_METHOD_COUNT) CX_CHECK(cx_rules_new(e, rules_method, &s->rules, &s->rules_state));
    return CATTR_OK;
}

/* A clone of the model graph with n_extra new inputs. */
static cattr_status graph_clone(const cattr_explainer *e, lp_graph *lg, int n_extra) {
    lg->g = cg_clone(e->m->g);
    if (!lg->g) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    lg->n_model_in = e->m->g->n_inputs;
    for (int k = 0; k < n_extra; k++) {
        char name[48];
        snprintf(name, sizeof name, "__cattr_extra_%d__", k);
        lg->extra[k] = cg_add_input(lg->g, name);
        if (lg->extra[k] < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    lg->n_extra = n_extra;
    return CATTR_OK;
}

/* Gradient graph: d(sum(seed * y))/d(wrt) under the state's rules; the seed is the one extra input. */
static cattr_status graph_grad(cattr_explainer *e, lp_state *s, int y, const int *wrt, int n_wrt) {
    lp_graph *lg = &s->lg;
    if (lg->g) return CATTR_OK;
    CX_CHECK(graph_clone(e, lg, 1));
    CX_CHECK(cg_autodiff(lg->g, y, lg->extra[0], wrt, n_wrt, &s->rules, lg->grads));
    lg->n_grads = n_wrt;
    return CATTR_OK;
}

/* Ablation graph: one extra input per layer tensor, read instead of the layer value by every node. */
static cattr_status graph_replace_layers(cattr_explainer *e, lp_state *s) {
    lp_graph *lg = &s->lg;
    if (lg->g) return CATTR_OK;
    CX_CHECK(graph_clone(e, lg, s->n_layers));
    cg_graph *g = lg->g;
    for (int k = 0; k < s->n_layers; k++) {
        int v = s->layers[k];
        if (v == cx_model_output(e->m))
            return cx_fail(CATTR_ERR_UNSUPPORTED, "layer '%s' is the model output: nothing reads it to be ablated",
                           g->vals[v].name);
        for (int ni = 0; ni < g->n_nodes; ni++)
            for (int j = 0; j < g->nodes[ni].n_in; j++)
                if (g->nodes[ni].in[j] == v) g->nodes[ni].in[j] = lg->extra[k];
    }
    return CATTR_OK;
}

/* Runs (res != NULL) or only plans graph lg on the attributed inputs xs (reps*B rows; additional inputs expanded
 * like them) and the extra inputs (NULL: not given), writing the values outs[] to new tensors res[]. *plan receives
 * the plan (for the shapes of its values). */
static cattr_status graph_run(cattr_explainer *e, cx_call *c, lp_graph *lg, cattr_tensor *const *xs, int64_t reps,
                              cx_expand how, cattr_tensor *const *extra, const int *outs, int n_outs,
                              cattr_tensor **res, cx_plan **plan) {
    int nin = lg->n_model_in + lg->n_extra;
    int nd[LP_MAX_OUTS + 2] = {0};
    int64_t sh[LP_MAX_OUTS + 2][CATTR_MAX_DIMS];
    cattr_dtype dt[LP_MAX_OUTS + 2];
    const void *host[LP_MAX_OUTS + 2] = {0};
    cattr_tensor *tmp[CX_MAX_IN] = {0};
    cattr_status st = CATTR_OK;
    memset(sh, 0, sizeof sh);
    for (int i = 0; i < nin; i++) dt[i] = c->dt;
    for (int i = 0; i < c->n; i++) {
        nd[i] = xs[i]->ndim;
        memcpy(sh[i], xs[i]->shape, sizeof sh[i]);
        host[i] = xs[i]->data;
    }
    for (int j = 0; j < c->n_add && st == CATTR_OK; j++) {
        int gi = c->n + j;
        const cattr_tensor *a = c->add[j];
        if (reps != 1) {
            tmp[j] = cx_expand_rows(a, reps, how);
            if (!tmp[j]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            a = tmp[j];
        }
        if (st != CATTR_OK) break;
        nd[gi] = a->ndim;
        memcpy(sh[gi], a->shape, sizeof sh[gi]);
        dt[gi] = a->dtype;
        host[gi] = a->data;
    }
    for (int k = 0; k < lg->n_extra; k++) {
        int gi = lg->n_model_in + k;
        if (!extra || !extra[k]) continue;
        nd[gi] = extra[k]->ndim;
        memcpy(sh[gi], extra[k]->shape, sizeof sh[gi]);
        host[gi] = extra[k]->data;
    }
    cx_plan *p = NULL;
    if (st == CATTR_OK)
        st = cx_plan_cache_get(&lg->pc, lg->g, e->consts, e->p.executor == CATTR_EXEC_EAGER, nd,
                               (const int64_t(*)[CATTR_MAX_DIMS])sh, dt, outs, n_outs, &p);
    if (st == CATTR_OK && cx_plan_bytes(p) > e->peak) e->peak = cx_plan_bytes(p);
    if (plan) *plan = p;
    if (res && st == CATTR_OK) {
        void *oh[LP_MAX_OUTS];
        for (int k = 0; k < n_outs; k++) res[k] = NULL;
        for (int k = 0; k < n_outs && st == CATTR_OK; k++) {
            const cx_view *v = cx_plan_view(p, outs[k]);
            res[k] = cx_tensor_alloc(v->dtype, v->ndim, v->shape);
            if (!res[k]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            else oh[k] = res[k]->data;
        }
        if (st == CATTR_OK) st = cx_run_plan(e, p, host, oh);
        if (st != CATTR_OK)
            for (int k = 0; k < n_outs; k++) {
                cattr_tensor_free(res[k]);
                res[k] = NULL;
            }
    }
    for (int j = 0; j < CX_MAX_IN; j++) cattr_tensor_free(tmp[j]);
    return st;
}



/* ---- DeepLift on [x; x'] ------------------------------------------------------------------------------------------ */

static cattr_status deeplift_init(cattr_explainer *e) {
    if (!isfinite(e->p.eps) || e->p.eps < 0)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "eps must be a finite number >= 0 (got %g)", e->p.eps);
    e->p.eps = 1e-10; /* Captum's layer and neuron DeepLift fix eps at 1e-10 */
    return lp_init_common(e, CATTR_METHOD_DEEPLIFT);
}

/* [a; b] of every attributed input. */
static cattr_status stack2(const cx_call *c, cattr_tensor *const *a, cattr_tensor *const *b, cattr_tensor **xs) {
    for (int i = 0; i < c->n; i++) {
        int64_t sh[CATTR_MAX_DIMS];
        memcpy(sh, a[i]->shape, sizeof sh);
        sh[0] *= 2;
        xs[i] = cx_tensor_alloc(c->dt, a[i]->ndim, sh);
        if (!xs[i]) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        size_t bytes = (size_t)a[i]->numel * cattr_dtype_size(c->dt);
        memcpy(xs[i]->data, a[i]->data, bytes);
        memcpy((char *)xs[i]->data + bytes, b[i]->data, bytes);
    }
    return CATTR_OK;
}


/* ---- the target's gradient at the layer -------------------------------------------------------------------------- */

/* The seed of the model output for reps*B tiled rows: 1 where the target selects. The target mask is found with
 * cx_select on a probe output whose values are their flat index + 1 (a target selects one value per example). */
static cattr_status target_seed(const cx_call *c, const cx_view *ov, int64_t reps, cattr_tensor **seed) {
    cattr_tensor *probe = cx_tensor_alloc(CATTR_FLOAT64, ov->ndim, ov->shape);
    cattr_tensor *sd = cx_tensor_alloc(c->dt, ov->ndim, ov->shape);
    double *sel = malloc((size_t)(reps * c->B + 1) * sizeof *sel);
    cattr_status st = probe && sd && sel ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) {
        for (int64_t k = 0; k < probe->numel; k++) cx_tensor_set(probe, k, (double)(k + 1));
        memset(sd->data, 0, (size_t)sd->numel * cattr_dtype_size(c->dt));
        st = cx_select(c, probe, reps, CX_TILE, sel);
    }
    for (int64_t r = 0; r < reps * c->B && st == CATTR_OK; r++) {
        int64_t k = (int64_t)sel[r] - 1;
        if (k >= 0 && k < sd->numel) cx_tensor_set(sd, k, 1);
    }
    cattr_tensor_free(probe);
    free(sel);
    if (st != CATTR_OK) {
        cattr_tensor_free(sd);
        return st;
    }
    *seed = sd;
    return CATTR_OK;
}

/* Gradient graph of the model output w.r.t. the layer tensors, read through replacement inputs (extra inputs
 * 0..n-1; the seed is extra input n). The readers' rules then change the gradient each reader sends to the layer
 * tensor (as Captum's hooks on the module inputs change the gradient of the layer's output tensor). */
static cattr_status graph_grad_replaced(cattr_explainer *e, lp_state *s) {
    lp_graph *lg = &s->lg;
    if (lg->g) return CATTR_OK;
    int n = s->n_layers;
    CX_CHECK(graph_clone(e, lg, n + 1));
    cg_graph *g = lg->g;
    for (int k = 0; k < n; k++) {
        if (s->layers[k] == cx_model_output(e->m))
            return cx_fail(CATTR_ERR_UNSUPPORTED, "layer '%s' is the model output", g->vals[s->layers[k]].name);
        for (int ni = 0; ni < g->n_nodes; ni++)
            for (int j = 0; j < g->nodes[ni].n_in; j++)
                if (g->nodes[ni].in[j] == s->layers[k]) g->nodes[ni].in[j] = lg->extra[k];
    }
    CX_CHECK(cg_autodiff(g, cx_model_output(e->m), lg->extra[n], lg->extra, n, &s->rules, lg->grads));
    lg->n_grads = n;
    return CATTR_OK;
}

/* Layer activations act[k] and gradients grad[k] of the target at the layer tensors, for inputs xs of reps*B tiled
 * rows, under the state's rules; *out (optional) receives the model output. With `replaced`, the gradient is taken
 * at replacement inputs fed with the activations (graph_grad_replaced), else at the layer values themselves. */
static cattr_status layer_grad(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, int64_t reps, bool replaced,
                               cattr_tensor **act, cattr_tensor **grad, cattr_tensor **out) {
    lp_state *s = e->method_state;
    int y = cx_model_output(e->m), n = s->n_layers;
    lp_graph *lg = &s->lg;
    cx_plan *p = NULL;
    cattr_tensor *seed = NULL, *res[LP_MAX_OUTS] = {0}, *ext[LP_MAX_LAYERS + 1] = {0};
    int outs[LP_MAX_OUTS], no = 0;
    if (replaced) {
        CX_CHECK(graph_grad_replaced(e, s));
        CX_CHECK(graph_run(e, c, lg, xs, reps, CX_TILE, NULL, s->layers, n, act, NULL));
        for (int k = 0; k < n; k++) ext[k] = act[k];
    } else {
        CX_CHECK(graph_grad(e, s, y, s->layers, n));
    }
    cattr_status st = graph_run(e, c, lg, xs, reps, CX_TILE, ext, &y, 1, NULL, &p);
    if (st == CATTR_OK) st = target_seed(c, cx_plan_view(p, y), reps, &seed);
    ext[replaced ? n : 0] = seed;
    if (!replaced)
        for (int k = 0; k < n; k++) outs[no++] = s->layers[k];
    for (int k = 0; k < n; k++) outs[no++] = lg->grads[k];
    outs[no++] = y;
    if (st == CATTR_OK) st = graph_run(e, c, lg, xs, reps, CX_TILE, ext, outs, no, res, NULL);
    cattr_tensor_free(seed);
    if (st != CATTR_OK) {
        if (replaced)
            for (int k = 0; k < n; k++) {
                cattr_tensor_free(act[k]);
                act[k] = NULL;
            }
        return st;
    }
    int g0 = replaced ? 0 : n;
    for (int k = 0; k < n; k++) {
        if (!replaced) act[k] = res[k];
        grad[k] = res[g0 + k];
    }
    if (out) *out = res[no - 1];
    else cattr_tensor_free(res[no - 1]);
    return CATTR_OK;
}

/* Per-example sums of the layer attributions (attr[0..n)) minus, with sel != NULL, F(x) - F(x') (IG-style delta,
 * sel holding the 2B target values of [x; x']); with out != NULL, out - the sums (LRP's delta). */
static cattr_status layer_delta(const cx_call *c, int n, cattr_tensor *const *attr, const double *sel,
                                const double *out, cattr_tensor **delta) {
    cx_call c2 = *c;
    c2.n = n;
    if (sel) return cx_delta_finish(&c2, attr, sel, delta);
    cattr_dtype dt = c->dt;
    int64_t len = c->B, maxm = 1;
    for (int k = 0; k < n; k++)
        if (c->B && attr[k]->numel / c->B > maxm) maxm = attr[k]->numel / c->B;
    double *row = malloc((size_t)maxm * sizeof *row);
    *delta = cx_tensor_alloc(dt, 1, &len);
    if (!row || !*delta) {
        free(row);
        cattr_tensor_free(*delta);
        *delta = NULL;
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    for (int64_t b = 0; b < c->B; b++) {
        double total = 0;
        for (int k = 0; k < n; k++) {
            int64_t m = attr[k]->numel / c->B;
            for (int64_t j = 0; j < m; j++) row[j] = cx_tensor_get(attr[k], b * m + j);
            total = cx_rnd(dt, total + cx_torch_sum(dt, row, m, 0, 1));
        }
        cx_tensor_set(*delta, b, cx_rnd(dt, cx_rnd(dt, out[b]) - total));
    }
    free(row);
    return CATTR_OK;
}

/* ---- LayerDeepLift ------------------------------------------------------------------------------------------------ */

static cattr_status layer_deeplift(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    lp_state *s = e->method_state;
    cattr_tensor *xs[CX_MAX_IN] = {0}, *act[LP_MAX_LAYERS] = {0}, *gr[LP_MAX_LAYERS] = {0}, *out = NULL;
    double *sel = NULL;
    cattr_status st = stack2(c, c->x, c->base, xs);
    if (st == CATTR_OK) st = layer_grad(e, c, xs, 2, true, act, gr, &out);
    for (int k = 0; k < s->n_layers && st == CATTR_OK; k++) {
        int64_t sh[CATTR_MAX_DIMS];
        memcpy(sh, act[k]->shape, sizeof sh);
        sh[0] = c->B;
        attr[k] = cx_tensor_alloc(c->dt, act[k]->ndim, sh);
        if (!attr[k]) {
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            break;
        }
        int64_t half = attr[k]->numel;
        for (int64_t j = 0; j < half; j++) {
            double g = cx_tensor_get(gr[k], j);
            if (e->p.multiply_by_inputs)
                g = cx_rnd(c->dt, cx_rnd(c->dt, cx_tensor_get(act[k], j) - cx_tensor_get(act[k], half + j)) * g);
            cx_tensor_set(attr[k], j, g);
        }
    }
    c->n_out = s->n_layers;
    if (st == CATTR_OK && delta && e->p.return_convergence_delta) {
        sel = malloc((size_t)(2 * c->B + 1) * sizeof *sel);
        st = sel ? cx_delta_forward(e, c, c->base, sel) : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK) st = layer_delta(c, s->n_layers, attr, sel, NULL, delta);
    }
    free(sel);
    cattr_tensor_free(out);
    for (int i = 0; i < CX_MAX_IN; i++) cattr_tensor_free(xs[i]);
    for (int k = 0; k < LP_MAX_LAYERS; k++) {
        cattr_tensor_free(act[k]);
        cattr_tensor_free(gr[k]);
    }
    return st;
}

/* ---- LayerLRP ----------------------------------------------------------------------------------------------------- */

static cattr_status lrp_init(cattr_explainer *e) { return lp_init_common(e, CATTR_METHOD_LRP); }

/* relevance = (gradient of the target at the layer under the LRP rules) * the target output of the example. */
static cattr_status layer_lrp(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    lp_state *s = e->method_state;
    cattr_dtype dt = c->dt;
    cattr_tensor *act[LP_MAX_LAYERS] = {0}, *gr[LP_MAX_LAYERS] = {0}, *out = NULL;
    double *sel = malloc((size_t)(c->B + 1) * sizeof *sel);
    cattr_status st = sel ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) st = layer_grad(e, c, c->x, 1, false, act, gr, &out);
    if (st == CATTR_OK) st = cx_select(c, out, 1, CX_TILE, sel);
    for (int k = 0; k < s->n_layers && st == CATTR_OK; k++) {
        int64_t m = c->B ? gr[k]->numel / c->B : 1;
        for (int64_t j = 0; j < gr[k]->numel; j++)
            cx_tensor_set(gr[k], j, cx_rnd(dt, cx_tensor_get(gr[k], j) * cx_rnd(dt, sel[j / m])));
        attr[k] = gr[k];
        gr[k] = NULL;
    }
    c->n_out = s->n_layers;
    if (st == CATTR_OK && delta && e->p.return_convergence_delta) st = layer_delta(c, s->n_layers, attr, NULL, sel, delta);
    free(sel);
    cattr_tensor_free(out);
    for (int k = 0; k < LP_MAX_LAYERS; k++) {
        cattr_tensor_free(act[k]);
        cattr_tensor_free(gr[k]);
    }
    return st;
}

/* ---- feature ablation over any tensors ------------------------------------------------------------------------- */

/* Evaluates the B-row states in ts (cnt states, state-major, cnt*B rows): one value per row into vals. */
typedef cattr_status (*ablate_eval)(cattr_explainer *e, cx_call *c, cattr_tensor *const *ts, int64_t cnt,
                                    double *vals);

/* Feature ids of n tensors T (B rows): masks[i] (int64, broadcastable, dim 0 of 1 or B) or Captum's default (every
 * element its own feature, numbered consecutively across the tensors, after the largest given id). */
typedef struct ab_masks {
    int n;
    int64_t per[CX_MAX_IN], rows[CX_MAX_IN];
    int64_t *ids[CX_MAX_IN];
    int64_t *feat; /* features in FeatureAblation's order */
    int64_t F;
} ab_masks;

static void ab_masks_free(ab_masks *am) {
    for (int i = 0; i < CX_MAX_IN; i++) free(am->ids[i]);
    free(am->feat);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static cattr_status ab_masks_load(int n, cattr_tensor *const *T, int64_t B, const cattr_tensor *const *masks,
                                  const char *what, ab_masks *am) {
    char s1[128], s2[128];
    memset(am, 0, sizeof *am);
    am->n = n;
    int64_t next = 0;
    bool any = false;
    for (int i = 0; masks && i < n; i++)
        if (masks[i]) {
            if (masks[i]->dtype != CATTR_INT64)
                return cx_fail(CATTR_ERR_DTYPE, "%s %d is %s; masks hold int64 ids", what, i,
                               cattr_dtype_name(masks[i]->dtype));
            for (int64_t k = 0; k < masks[i]->numel; k++) {
                int64_t v = ((const int64_t *)masks[i]->data)[k];
                if (!any || v + 1 > next) next = v + 1;
                any = true;
            }
        }
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const cattr_tensor *x = T[i], *m = masks ? masks[i] : NULL;
        int64_t per = cx_numel(x->ndim - 1, x->shape + 1);
        am->per[i] = per;
        if (!m) {
            am->rows[i] = 1;
            am->ids[i] = malloc((size_t)(per + 1) * sizeof *am->ids[i]);
            if (!am->ids[i]) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            for (int64_t k = 0; k < per; k++) am->ids[i][k] = next + k;
            next += per;
            total += per;
            continue;
        }
        int off = x->ndim - m->ndim;
        bool ok = off >= 0;
        int64_t mst[CATTR_MAX_DIMS] = {0}, stride = 1;
        for (int d = m->ndim - 1; ok && d >= 0; d--) {
            int64_t md = m->shape[d], xd = x->shape[d + off];
            if (md != 1 && md != xd) ok = false;
            mst[d + off] = md == 1 ? 0 : stride;
            stride *= md;
        }
        if (!ok)
            return cx_fail(CATTR_ERR_SHAPE, "%s %d has shape %s; it must broadcast to shape %s (dim 0: 1 or the batch)",
                           what, i, cx_shape_str(m->ndim, m->shape, s1, sizeof s1),
                           cx_shape_str(x->ndim, x->shape, s2, sizeof s2));
        am->rows[i] = mst[0] != 0 ? B : 1;
        am->ids[i] = malloc((size_t)(am->rows[i] * per + 1) * sizeof *am->ids[i]);
        if (!am->ids[i]) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        const int64_t *v = m->data;
        for (int64_t r = 0; r < am->rows[i]; r++)
            for (int64_t k = 0; k < per; k++) {
                int64_t rem = k, o = r * mst[0];
                for (int d = x->ndim - 1; d >= 1; d--) {
                    o += (rem % x->shape[d]) * mst[d];
                    rem /= x->shape[d];
                }
                am->ids[i][r * per + k] = v[o];
            }
        total += am->rows[i] * per;
    }
    /* FeatureAblation's order: the ids of tensor 0 ascending, then the ids of tensor 1 not seen yet, ... */
    am->feat = malloc((size_t)(total + 1) * sizeof *am->feat);
    int64_t *u = malloc((size_t)(total + 1) * sizeof *u);
    if (!am->feat || !u) {
        free(u);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        int64_t cnt = am->rows[i] * am->per[i], nu = 0, before = am->F;
        memcpy(u, am->ids[i], (size_t)cnt * sizeof *u);
        qsort(u, (size_t)cnt, sizeof *u, cmp_i64);
        for (int64_t k = 0; k < cnt; k++)
            if (nu == 0 || u[nu - 1] != u[k]) u[nu++] = u[k];
        for (int64_t k = 0; k < nu; k++) {
            bool seen = false;
            for (int64_t q = 0; q < before && !seen; q++) seen = am->feat[q] == u[k];
            if (!seen) am->feat[am->F++] = u[k];
        }
    }
    free(u);
    return CATTR_OK;
}

/* FeaturePermutation's permutations of the B rows for every (feature q, tensor i) with tensor i holding feature q:
 * perm_at[q*n + i] is an offset into *perms (-1: none). A replay takes them in Captum's order (features in chunks of
 * perturbations_per_eval; per chunk, for every tensor holding one of its features, one fp_batch_permutation per
 * feature of the chunk, used only where the tensor holds it; an identity draw is thrown away and the next taken);
 * otherwise the Philox generator, one stream per feature and tensor, redrawing identities. */
static cattr_status ab_perms(cattr_explainer *e, cx_call *c, const ab_masks *am, int64_t k, int64_t **perms,
                             int64_t **perm_at) {
    int n = am->n;
    int64_t F = am->F, B = c->B, used = 0;
    bool *holds = calloc((size_t)(F * n + 1), sizeof *holds);
    int64_t *scratch = malloc((size_t)(B + 1) * sizeof *scratch);
    *perms = malloc((size_t)(F * n * B + 1) * sizeof **perms);
    *perm_at = malloc((size_t)(F * n + 1) * sizeof **perm_at);
    cattr_status st = holds && scratch && *perms && *perm_at ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t q = 0; q < F && st == CATTR_OK; q++)
        for (int i = 0; i < n; i++) {
            (*perm_at)[q * n + i] = -1;
            for (int64_t p = 0; p < am->rows[i] * am->per[i] && !holds[q * n + i]; p++)
                holds[q * n + i] = am->ids[i][p] == am->feat[q];
        }
    for (int64_t q0 = 0; q0 < F && st == CATTR_OK; q0 += k) {
        int64_t kc = F - q0 < k ? F - q0 : k;
        for (int i = 0; i < n && st == CATTR_OK; i++) {
            bool any = false;
            for (int64_t j = 0; j < kc; j++) any = any || holds[(q0 + j) * n + i];
            if (!any) continue;
            for (int64_t j = 0; j < kc && st == CATTR_OK; j++) {
                int64_t q = q0 + j;
                const cattr_tensor *d = NULL;
                cx_rng rng;
                bool identity = true;
                if (!(c->user && c->user->n_draws > 0)) {
                    if (!holds[q * n + i]) continue;
                    cx_rng_init(&rng, e->p.seed, ((uint64_t)0x4d << 56) | ((uint64_t)i << 40) | (uint64_t)q);
                }
                while (identity && st == CATTR_OK) {
                    if (c->user && c->user->n_draws > 0) {
                        st = cx_next_draw(c, "fp_batch_permutation", NULL, &d);
                        if (st != CATTR_OK) break;
                        if (!d || d->dtype != CATTR_INT64 || d->numel != B) {
                            st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explicit draw 'fp_batch_permutation' must be %lld "
                                                                     "int64 values (a permutation)", (long long)B);
                            break;
                        }
                        for (int64_t b = 0; b < B; b++) {
                            scratch[b] = ((const int64_t *)d->data)[b];
                            if (scratch[b] < 0 || scratch[b] >= B)
                                st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explicit draw 'fp_batch_permutation' holds "
                                                                         "row %lld of a batch of %lld",
                                             (long long)scratch[b], (long long)B);
                        }
                    } else {
                        cx_rng_permutation(&rng, B, scratch);
                    }
                    identity = true;
                    for (int64_t b = 0; b < B; b++)
                        if (scratch[b] != b) identity = false;
                }
                if (st != CATTR_OK || !holds[q * n + i]) continue;
                memcpy(*perms + used * B, scratch, (size_t)B * sizeof *scratch);
                (*perm_at)[q * n + i] = used * B;
                used++;
            }
        }
    }
    free(holds);
    free(scratch);
    return st;
}

/* FeatureAblation over tensors T (B rows each) with baselines base (T's shapes), or with `permute` FeaturePermutation
 * (the feature's values taken from other rows of T; base unused): attr[i] (T[i]'s shape) holds, at the elements of
 * each feature, eval(T) - eval(T with the feature ablated), in the dtype of the values. */
static cattr_status ablate(cattr_explainer *e, cx_call *c, int n, cattr_tensor *const *T, cattr_tensor *const *base,
                           const cattr_tensor *const *masks, const char *what, ablate_eval ev, bool permute,
                           int64_t n_out, cattr_tensor **attr) {
    int64_t B = c->B;
    cattr_dtype dt = c->dt;
    size_t esz = cattr_dtype_size(dt);
    ab_masks am;
    cattr_tensor *xs[CX_MAX_IN] = {0};
    double *y0 = malloc((size_t)(n_out + 1) * sizeof *y0), *y = NULL;
    int64_t k = e->p.perturbations_per_eval > 0 ? e->p.perturbations_per_eval : 1;
    cattr_status st = ab_masks_load(n, T, B, masks, what, &am);
    if (st == CATTR_OK && !y0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) st = ev(e, c, T, 1, y0);
    if (k > am.F && am.F > 0) k = am.F;
    int64_t *perms = NULL, *perm_at = NULL;
    if (st == CATTR_OK && permute) st = ab_perms(e, c, &am, k, &perms, &perm_at);
    for (int i = 0; i < n && st == CATTR_OK; i++)
        if (am.rows[i] != 1 && n_out != B)
            st = cx_fail(CATTR_ERR_SHAPE, "%s %d has one row per example, but the %lld attributed output values are "
                                          "not one per example: give a target", what, i, (long long)n_out);
    if (st == CATTR_OK && !(y = malloc((size_t)(k * n_out + 1) * sizeof *y))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < n && st == CATTR_OK; i++) {
        int64_t sh[CATTR_MAX_DIMS];
        memcpy(sh, T[i]->shape, sizeof sh);
        sh[0] = n_out; /* one row per example, or (no target) per model output value */
        attr[i] = cx_tensor_alloc(dt, T[i]->ndim, sh);
        if (!attr[i]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else memset(attr[i]->data, 0, (size_t)attr[i]->numel * esz);
    }
    int64_t have = 0;
    for (int64_t q0 = 0; q0 < am.F && st == CATTR_OK; q0 += k) {
        int64_t cnt = am.F - q0 < k ? am.F - q0 : k;
        for (int i = 0; i < n && st == CATTR_OK && cnt != have; i++) {
            int64_t sh[CATTR_MAX_DIMS];
            memcpy(sh, T[i]->shape, sizeof sh);
            sh[0] = cnt * B;
            cattr_tensor_free(xs[i]);
            xs[i] = cx_tensor_alloc(dt, T[i]->ndim, sh);
            if (!xs[i]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        }
        have = cnt;
        if (st != CATTR_OK) break;
        for (int64_t j = 0; j < cnt; j++) /* state j: feature q0 + j replaced by the baseline */
            for (int i = 0; i < n; i++) {
                char *slot = (char *)xs[i]->data + (size_t)(j * T[i]->numel) * esz;
                memcpy(slot, T[i]->data, (size_t)T[i]->numel * esz);
                int64_t per = am.per[i];
                for (int64_t p = 0; p < am.rows[i] * per; p++) {
                    if (am.ids[i][p] != am.feat[q0 + j]) continue;
                    int64_t m = p / per, e2 = p % per;
                    int64_t b0 = am.rows[i] == 1 ? 0 : m, b1 = am.rows[i] == 1 ? B : m + 1;
                    const int64_t *perm = permute ? perms + perm_at[(q0 + j) * n + i] : NULL;
                    const char *src = permute ? (const char *)T[i]->data : (const char *)base[i]->data;
                    for (int64_t b = b0; b < b1; b++)
                        memcpy(slot + (size_t)(b * per + e2) * esz, src + (size_t)((perm ? perm[b] : b) * per + e2) * esz, esz);
                }
            }
        st = ev(e, c, xs, cnt, y);
        for (int64_t j = 0; j < cnt && st == CATTR_OK; j++)
            for (int i = 0; i < n; i++) {
                int64_t per = am.per[i];
                for (int64_t p = 0; p < am.rows[i] * per; p++) {
                    if (am.ids[i][p] != am.feat[q0 + j]) continue;
                    int64_t m = p / per, e2 = p % per;
                    int64_t r0 = am.rows[i] == 1 ? 0 : m, r1 = am.rows[i] == 1 ? n_out : m + 1;
                    for (int64_t r = r0; r < r1; r++)
                        cx_tensor_set(attr[i], r * per + e2, cx_rnd(dt, y0[r] - y[j * n_out + r]));
                }
            }
    }
    for (int i = 0; i < CX_MAX_IN; i++) cattr_tensor_free(xs[i]);
    free(perms);
    free(perm_at);
    free(y0);
    free(y);
    ab_masks_free(&am);
    return st;
}

static cattr_status ablation_init(cattr_explainer *e) {
    if (e->p.perturbations_per_eval < 0)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "perturbations_per_eval must be positive, or 0 for one per forward "
                                                   "pass (got %d)", e->p.perturbations_per_eval);
    return lp_init_common(e, CATTR_METHOD_COUNT);
}


/* ---- LayerFeatureAblation -------------------------------------------------------------------------------------- */

static bool lp_has_target(const cx_call *c) { return c->target && c->target->kind != CATTR_TARGET_NONE; }

/* The target output (no target: every output value) with the layer tensors replaced by ts (cnt*B rows); the inputs tiled cnt times. */
static cattr_status layer_eval(cattr_explainer *e, cx_call *c, cattr_tensor *const *ts, int64_t cnt, double *vals) {
    lp_state *s = e->method_state;
    cattr_tensor *xs[CX_MAX_IN] = {0}, *out = NULL;
    int y = cx_model_output(e->m);
    cattr_status st = CATTR_OK;
    for (int i = 0; i < c->n && st == CATTR_OK; i++)
        if (!(xs[i] = cx_expand_rows(c->x[i], cnt, CX_TILE))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) st = graph_run(e, c, &s->lg, xs, cnt, CX_TILE, ts, &y, 1, &out, NULL);
    if (st == CATTR_OK && !lp_has_target(c)) /* every output value, state-major */
        for (int64_t k = 0; k < out->numel; k++) vals[k] = cx_tensor_get(out, k);
    else if (st == CATTR_OK)
        st = cx_select(c, out, cnt, CX_TILE, vals);
    cattr_tensor_free(out);
    for (int i = 0; i < CX_MAX_IN; i++) cattr_tensor_free(xs[i]);
    return st;
}

/* LayerFeatureAblation, or with `permute` LayerFeaturePermutation (no layer baseline; a batch below 2 leaves every
 * attribution 0, as Captum skips every feature group then). */
static cattr_status layer_ablate(cattr_explainer *e, cx_call *c, cattr_tensor **attr, bool permute) {
    lp_state *s = e->method_state;
    int n = s->n_layers;
    cattr_tensor *act[LP_MAX_LAYERS] = {0}, *base[LP_MAX_LAYERS] = {0};
    const cattr_tensor *lb = c->user ? c->user->layer_baseline : NULL;
    const cattr_call *u = c->user;
    char s1[128], s2[128];
    cattr_status st = graph_replace_layers(e, s);
    if (st == CATTR_OK && u && u->layer_masks && u->n_layer_masks != n)
        st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "%d layer masks given for a layer of %d tensors", u->n_layer_masks, n);
    if (st == CATTR_OK) st = graph_run(e, c, &s->lg, c->x, 1, CX_TILE, NULL, s->layers, n, act, NULL);
    for (int k = 0; k < n && st == CATTR_OK; k++) { /* the baseline of each layer tensor at full shape */
        const cattr_tensor *a = act[k];
        base[k] = cx_tensor_alloc(c->dt, a->ndim, a->shape);
        if (!base[k]) {
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            break;
        }
        int64_t per = c->B ? a->numel / c->B : 0;
        bool full = lb && cx_shape_eq(lb->ndim, lb->shape, a->ndim, a->shape);
        bool row1 = lb && !full && lb->ndim == a->ndim && lb->shape[0] == 1 &&
                    cx_shape_eq(lb->ndim - 1, lb->shape + 1, a->ndim - 1, a->shape + 1);
        bool scalar = lb && !full && !row1 && lb->numel == 1;
        if (lb && !full && !row1 && !scalar) {
            st = cx_fail(CATTR_ERR_SHAPE, "the layer baseline has shape %s; use a scalar, the layer's shape %s or batch 1",
                         cx_shape_str(lb->ndim, lb->shape, s1, sizeof s1), cx_shape_str(a->ndim, a->shape, s2, sizeof s2));
            break;
        }
        for (int64_t j = 0; j < a->numel; j++)
            cx_tensor_set(base[k], j, !lb ? 0.0 : cx_tensor_get(lb, scalar ? 0 : full ? j : j % per));
    }
    int64_t n_out = c->B; /* attributed output values: one per example, or with no target all of them */
    if (st == CATTR_OK && !lp_has_target(c)) {
        cattr_tensor *out = NULL;
        st = cx_forward(e, c, c->x, 1, CX_TILE, &out);
        if (st == CATTR_OK) n_out = out->numel;
        cattr_tensor_free(out);
    }
    if (st == CATTR_OK && permute && c->B < 2) { /* Captum skips every group: the attributions stay 0 */
        cx_log(CATTR_LOG_WARN, "LayerFeaturePermutation needs a batch of at least 2 examples (got %lld): every "
                               "attribution is 0", (long long)c->B);
        for (int k = 0; k < n && st == CATTR_OK; k++) {
            int64_t sh[CATTR_MAX_DIMS];
            memcpy(sh, act[k]->shape, sizeof sh);
            sh[0] = n_out;
            attr[k] = cx_tensor_alloc(c->dt, act[k]->ndim, sh);
            if (!attr[k]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            else memset(attr[k]->data, 0, (size_t)attr[k]->numel * cattr_dtype_size(c->dt));
        }
    } else if (st == CATTR_OK) {
        st = ablate(e, c, n, act, base, u ? u->layer_masks : NULL, "layer mask", layer_eval, permute, n_out, attr);
    }
    c->n_out = n;
    for (int k = 0; k < LP_MAX_LAYERS; k++) {
        cattr_tensor_free(act[k]);
        cattr_tensor_free(base[k]);
    }
    return st;
}

static cattr_status layer_feature_ablation(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    return layer_ablate(e, c, attr, false);
}

static cattr_status layer_feature_permutation(cattr_explainer *e, cx_call *c, cattr_tensor **attr,
                                              cattr_tensor **delta) {
    (void)delta;
    return layer_ablate(e, c, attr, true);
}

/* ---- LayerDeepLiftShap ---------------------------------------------------------------- */


/* The method on every (example, baseline) pair, then the mean over the baselines (torch.mean: the sum, then / nb);
 * the delta (layer method) has one entry per pair. */
static cattr_status deeplift_shap(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta,
                                  cattr_status (*pass)(cattr_explainer *, cx_call *, cattr_tensor **, cattr_tensor **)) {
    int64_t nb = c->dist[0] ? c->dist[0]->shape[0] : 0;
    for (int i = 0; i < c->n; i++) {
        int64_t ni = c->dist[i] ? c->dist[i]->shape[0] : 0;
        if (ni != nb)
            return cx_fail(CATTR_ERR_SHAPE, "baseline %d has %lld rows and baseline 0 has %lld: DeepLiftShap pairs "
                                            "every input with the same number of baselines", i, (long long)ni,
                           (long long)nb);
    }
    if (nb < 2)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "%s needs a distribution of at least 2 baseline rows (got %lld)",
                       e->method->captum, (long long)nb);
    cx_call p;
    cattr_target tgt;
    int64_t *tidx = NULL;
    cattr_tensor *pair_attr[CX_MAX_IN] = {0};
    cattr_status st = cx_pairs_make(c, nb, &p, &tgt, &tidx);
    if (st == CATTR_OK) st = pass(e, &p, pair_attr, delta);
    int n_out = p.n_out > 0 ? p.n_out : c->n;
    c->n_out = p.n_out;
    if (st == CATTR_OK) st = cx_pairs_mean(c, nb, pair_attr, n_out, attr);
    for (int i = 0; i < CX_MAX_IN; i++) cattr_tensor_free(pair_attr[i]);
    cx_pairs_free(&p, tidx);
    return st;
}

static cattr_status layer_deeplift_shap(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    return deeplift_shap(e, c, attr, delta, layer_deeplift);
}


/* ---- LayerGradientShap ----------------------------------------------------------------- */

/* Captum's GradientShap family: NoiseTunnel(smoothgrad, nt_samples = n_samples, stdevs, baselines drawn from the
 * distribution) around an "input-baseline x gradient at a random point" pass, all samples in one partition. The
 * derived call has B*n rows, example-major (row b*n + j = sample j of example b): noisy inputs, drawn baselines,
 * additional inputs and per-example targets interleaved. Draws (golden README section 7): nt_baseline_index per input
 * with a tensor baseline, nt_noise per input, then one gradshap_coeff per row; without explicit draws the Philox
 * generator (one stream per kind, input and example; the counter is the sample). */

enum { GS_TAG = 0x4c, GS_NOISE = 1, GS_BASELINE = 2, GS_COEFF = 3 };

static uint64_t gs_stream(uint64_t kind, uint64_t input, int64_t example) {
    return ((uint64_t)GS_TAG << 56) | (kind << 48) | ((input & 0xff) << 40) | ((uint64_t)example & 0xffffffffu);
}

/* The derived call of B*m rows, and what it owns. */
typedef struct gs_call {
    cx_call d;
    cattr_target tgt;
    int64_t *tidx;
    double *coef; /* B*m coefficients, in the compute dtype */
} gs_call;

static void gs_free(gs_call *g) {
    for (int i = 0; i < CX_MAX_IN; i++) {
        cattr_tensor_free(g->d.x[i]);
        cattr_tensor_free(g->d.base[i]);
        cattr_tensor_free(g->d.add[i]);
    }
    free(g->tidx);
    free(g->coef);
    memset(g, 0, sizeof *g);
}

/* Does the caller give input i's baseline as a tensor (rows are drawn only for tensor baselines)? */
static bool gs_tensor_baseline(const cx_call *c, int i) {
    const cattr_tensor *b = c->user && c->user->baselines ? c->user->baselines[i] : NULL;
    return b && b->ndim >= 1 && b->ndim == c->x[i]->ndim;
}

/* Baseline row indices of input i (B*m values in [0, rows of the distribution)). */
static cattr_status gs_indices(cattr_explainer *e, cx_call *c, int i, int64_t m, int64_t *idx) {
    int64_t n_ref = c->dist[i]->shape[0], rows = c->B * m;
    char role[48];
    snprintf(role, sizeof role, "nt_baseline_index.input%d", i);
    const cattr_tensor *d = NULL;
    CX_CHECK(cx_next_draw(c, role, NULL, &d));
    if (d && d->numel != rows)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explicit draw '%s' has %lld values; %lld are needed", role,
                       (long long)d->numel, (long long)rows);
    for (int64_t r = 0; r < rows; r++) {
        if (d) {
            double v = cx_tensor_get(d, r);
            if (!(v >= 0 && v < (double)n_ref))
                return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explicit draw '%s' holds index %g; baseline %d has %lld rows",
                               role, v, i, (long long)n_ref);
            idx[r] = (int64_t)v;
        } else {
            cx_rng g;
            cx_rng_init(&g, e->p.seed, gs_stream(GS_BASELINE, (uint64_t)i, r / m));
            g.index = (uint64_t)(r % m);
            idx[r] = cx_rng_below(&g, n_ref);
        }
    }
    return CATTR_OK;
}

/* Input i repeated m times per example plus float32 Gaussian noise of stdev (nt_noise.input<i>). */
static cattr_status gs_noisy(cattr_explainer *e, cx_call *c, int i, int64_t m, cattr_tensor **out) {
    uint64_t *streams = malloc((size_t)(c->B + 1) * sizeof *streams);
    if (!streams) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t b = 0; b < c->B; b++) streams[b] = gs_stream(GS_NOISE, (uint64_t)i, b);
    cattr_status st = cx_noisy_rows(c, i, m, e->p.stdevs, e->p.seed, streams, 0, out);
    free(streams);
    return st;
}

/* The derived call: baselines drawn, noise added, coefficients drawn, in Captum's order. */
static cattr_status gs_prepare(cattr_explainer *e, cx_call *c, gs_call *g) {
    int64_t m = e->p.n_samples, B = c->B, rows = B * m;
    cx_call *d = &g->d;
    memset(g, 0, sizeof *g);
    d->n = c->n;
    d->B = rows;
    d->dt = c->dt;
    d->n_add = c->n_add;
    d->user = c->user;
    d->target = c->target;
    int64_t *idx[CX_MAX_IN] = {0};
    cattr_status st = CATTR_OK;
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        if (!c->dist[i] || c->dist[i]->shape[0] < 1)
            st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "%s needs a baseline for input %d", e->method->captum, i);
        else if (!gs_tensor_baseline(c, i))
            continue;
        else if (!(idx[i] = malloc((size_t)(rows + 1) * sizeof *idx[i])))
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else
            st = gs_indices(e, c, i, m, idx[i]);
    }
    for (int i = 0; i < c->n && st == CATTR_OK; i++) st = gs_noisy(e, c, i, m, &d->x[i]);
    for (int i = 0; i < c->n && st == CATTR_OK; i++) { /* baselines: drawn rows, or the one row repeated */
        const cattr_tensor *src = c->dist[i];
        int64_t per = src->numel / src->shape[0];
        if (!idx[i] && src->shape[0] != 1) {
            st = cx_fail(CATTR_ERR_SHAPE, "baseline %d: give a tensor of baseline rows or one scalar", i);
            break;
        }
        if (!(d->base[i] = cx_tensor_alloc(c->dt, d->x[i]->ndim, d->x[i]->shape))) {
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            break;
        }
        size_t rb = (size_t)per * cattr_dtype_size(c->dt);
        for (int64_t r = 0; r < rows; r++)
            memcpy((char *)d->base[i]->data + (size_t)r * rb, (const char *)src->data + (size_t)(idx[i] ? idx[i][r] : 0) * rb, rb);
    }
    for (int j = 0; j < c->n_add && st == CATTR_OK; j++)
        if (!(d->add[j] = cx_expand_rows(c->add[j], m, CX_INTERLEAVE))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    const cattr_target *t = c->target;
    if (st == CATTR_OK && t && t->kind == CATTR_TARGET_PER_EXAMPLE) {
        if (t->n_rows != B || t->n_idx < 1 || !t->idx)
            st = cx_fail(CATTR_ERR_TARGET, "%lld per-example targets of %d indices given for a batch of %lld",
                         (long long)t->n_rows, t->n_idx, (long long)B);
        else if (!(g->tidx = malloc((size_t)(rows * t->n_idx) * sizeof *g->tidx)))
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else {
            for (int64_t r = 0; r < rows; r++)
                memcpy(g->tidx + r * t->n_idx, t->idx + (r / m) * t->n_idx, (size_t)t->n_idx * sizeof *g->tidx);
            g->tgt = *t;
            g->tgt.n_rows = rows;
            g->tgt.idx = g->tidx;
            d->target = &g->tgt;
        }
    }
    const cattr_tensor *cd = NULL;
    if (st == CATTR_OK && !(g->coef = malloc((size_t)(rows + 1) * sizeof *g->coef)))
        st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) st = cx_next_draw(c, "gradshap_coeff", NULL, &cd);
    if (st == CATTR_OK && cd && cd->numel != rows)
        st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explicit draw 'gradshap_coeff' has %lld values; %lld are needed",
                     (long long)cd->numel, (long long)rows);
    for (int64_t r = 0; r < rows && st == CATTR_OK; r++) {
        double v;
        if (cd) {
            v = cx_tensor_get(cd, r);
        } else {
            cx_rng rg;
            cx_rng_init(&rg, e->p.seed, gs_stream(GS_COEFF, 0, r / m));
            rg.index = (uint64_t)(r % m);
            v = cx_rng_uniform(&rg);
        }
        g->coef[r] = cx_rnd(c->dt, v); /* numpy's float64 draw converted to the input dtype */
    }
    d->next_draw = c->next_draw;
    for (int i = 0; i < CX_MAX_IN; i++) free(idx[i]);
    return st;
}

/* The random points c*x + (1-c)*x' of the derived call, in torch's operation order. */
static cattr_status gs_points(const gs_call *g, cattr_tensor **pts) {
    const cx_call *d = &g->d;
    cattr_dtype dt = d->dt;
    for (int i = 0; i < d->n; i++) {
        const cattr_tensor *x = d->x[i], *b = d->base[i];
        if (!(pts[i] = cx_tensor_alloc(dt, x->ndim, x->shape))) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        int64_t per = d->B ? x->numel / d->B : 0;
        for (int64_t r = 0; r < d->B; r++) {
            double cr = g->coef[r], om = cx_rnd(dt, 1.0 - cr);
            for (int64_t k = r * per; k < (r + 1) * per; k++)
                cx_tensor_set(pts[i], k, cx_rnd(dt, cx_rnd(dt, cr * cx_tensor_get(x, k)) + cx_rnd(dt, om * cx_tensor_get(b, k))));
        }
    }
    return CATTR_OK;
}

/* smoothgrad: per example, the sum over the m samples (torch's sum) / m, of each of the n attributions. */
static cattr_status gs_mean(const cx_call *c, int64_t m, int n, cattr_tensor *const *per_row, cattr_tensor **attr) {
    double *col = malloc((size_t)(m + 1) * sizeof *col);
    if (!col) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_status st = CATTR_OK;
    for (int i = 0; i < n && st == CATTR_OK; i++) {
        int64_t sh[CATTR_MAX_DIMS];
        memcpy(sh, per_row[i]->shape, sizeof sh);
        sh[0] = c->B;
        if (!(attr[i] = cx_tensor_alloc(c->dt, per_row[i]->ndim, sh))) {
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            break;
        }
        int64_t per = c->B ? attr[i]->numel / c->B : 0;
        for (int64_t b = 0; b < c->B; b++)
            for (int64_t f = 0; f < per; f++) {
                for (int64_t j = 0; j < m; j++) col[j] = cx_tensor_get(per_row[i], (b * m + j) * per + f);
                cx_tensor_set(attr[i], b * per + f, cx_rnd(c->dt, cx_torch_sum(c->dt, col, m, f, per) / (double)m));
            }
    }
    free(col);
    return st;
}

static cattr_status gshap_init(cattr_explainer *e) {
    if (e->p.n_samples < 1)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "%s needs n_samples >= 1 (got %d)", e->method->captum,
                       e->p.n_samples);
    if (!isfinite(e->p.stdevs) || e->p.stdevs < 0)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "stdevs must be a finite number >= 0 (got %g)", e->p.stdevs);
    return lp_init_common(e, CATTR_METHOD_COUNT);
}

/* LayerGradientShap: (a(noisy input) - a(baseline)) times the target's gradient at the layer at the random points;
 * the delta has one entry per derived row. */
static cattr_status layer_gradient_shap(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    lp_state *s = e->method_state;
    int n = s->n_layers;
    gs_call g;
    cattr_tensor *pts[CX_MAX_IN] = {0}, *ap[LP_MAX_LAYERS] = {0}, *gr[LP_MAX_LAYERS] = {0};
    cattr_tensor *ax[LP_MAX_LAYERS] = {0}, *ab[LP_MAX_LAYERS] = {0};
    cattr_dtype dt = c->dt;
    double *sel = NULL;
    cattr_status st = gs_prepare(e, c, &g);
    c->next_draw = g.d.next_draw;
    if (st == CATTR_OK) st = gs_points(&g, pts);
    if (st == CATTR_OK) st = layer_grad(e, &g.d, pts, 1, false, ap, gr, NULL);
    if (st == CATTR_OK && e->p.multiply_by_inputs) {
        st = graph_run(e, &g.d, &s->lg, g.d.x, 1, CX_TILE, NULL, s->layers, n, ax, NULL);
        if (st == CATTR_OK) st = graph_run(e, &g.d, &s->lg, g.d.base, 1, CX_TILE, NULL, s->layers, n, ab, NULL);
        for (int k = 0; k < n && st == CATTR_OK; k++)
            for (int64_t j = 0; j < gr[k]->numel; j++)
                cx_tensor_set(gr[k], j, cx_rnd(dt, cx_rnd(dt, cx_tensor_get(ax[k], j) - cx_tensor_get(ab[k], j)) *
                                                       cx_tensor_get(gr[k], j)));
    }
    if (st == CATTR_OK) st = gs_mean(c, e->p.n_samples, n, gr, attr);
    c->n_out = n;
    if (st == CATTR_OK && delta && e->p.return_convergence_delta) {
        sel = malloc((size_t)(2 * g.d.B + 1) * sizeof *sel);
        st = sel ? cx_delta_forward(e, &g.d, g.d.base, sel) : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK) st = layer_delta(&g.d, n, gr, sel, NULL, delta);
    }
    free(sel);
    for (int i = 0; i < CX_MAX_IN; i++) cattr_tensor_free(pts[i]);
    for (int k = 0; k < LP_MAX_LAYERS; k++) {
        cattr_tensor_free(ap[k]);
        cattr_tensor_free(gr[k]);
        cattr_tensor_free(ax[k]);
        cattr_tensor_free(ab[k]);
    }
    gs_free(&g);
    return st;
}

/* ---- the method table entries ------------------------------------------------------------------------------------ */

const cx_method cx_method_layer_deeplift = {CATTR_METHOD_LAYER_DEEPLIFT, "layer-deeplift", "LayerDeepLift", false,
                                            deeplift_init, layer_deeplift, lp_release};
const cx_method cx_method_layer_deeplift_shap = {CATTR_METHOD_LAYER_DEEPLIFT_SHAP, "layer-deeplift-shap",
                                                 "LayerDeepLiftShap", true, deeplift_init, layer_deeplift_shap,
                                                 lp_release};
const cx_method cx_method_layer_gradient_shap = {CATTR_METHOD_LAYER_GRADIENT_SHAP, "layer-gradient-shap", "LayerGradientShap", true, gshap_init, layer_gradient_shap, lp_release};
const cx_method cx_method_layer_feature_ablation = {CATTR_METHOD_LAYER_FEATURE_ABLATION, "layer-feature-ablation",
                                                    "LayerFeatureAblation", false, ablation_init,
                                                    layer_feature_ablation, lp_release};
const cx_method cx_method_layer_feature_permutation = {CATTR_METHOD_LAYER_FEATURE_PERMUTATION, "layer-feature-permutation", "LayerFeaturePermutation", false, ablation_init, layer_feature_permutation, lp_release};
const cx_method cx_method_layer_lrp = {CATTR_METHOD_LAYER_LRP, "layer-lrp", "LayerLRP", false, lrp_init, layer_lrp,
                                       lp_release};
