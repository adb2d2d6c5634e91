/* layer_perturb.c - the layer methods built on rules, perturbations and the Shap family (Captum semantics:
 * shared/reference/captum_spec.md section 3). Each runs on the backend through a graph derived from the model:
 *   - LayerFeatureAblation, LayerFeaturePermutation and LayerDeepLift (and so LayerDeepLiftShap, on every (example,
 *     baseline) pair, averaged) are their input methods on the layer model (below), whose first inputs are the layer
 *     tensors;
 *   - LayerLRP is the model's clone with the gradient at the layer under the LRP rules and the target-output scaling
 *     as ops (lp_graph; LRP's rules key on the model's value ids, which the clone keeps);
 *   - LayerGradientShap is noise.c's GradientShap tunnel with the attributions at the layer.
 * The neuron forms are in neuron.c.
 */
#include "attr/internal.h"

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
} lp_graph;

typedef struct lp_state {
    void *rules_state; /* rules.c state (NULL: default rules) */
    cg_rules rules;
    int layers[LP_MAX_LAYERS]; /* layer value ids, in the order of params.layers */
    int n_layers;
    lp_graph lg;
    cattr_model *lm;          /* the layer model (layer_model) */
    cattr_explainer *inner;   /* the input method on it */
    cattr_method inner_method;
    int lrp_rank[LP_MAX_LAYERS]; /* LayerLRP: the layer ranks its suffix was built for (0: none) */
    int lrp_out[LP_MAX_LAYERS + 1];
    /* LayerDeepLift on the backend: the layer values at the inputs and at the baselines, and the inner DeepLift's
     * attributions (the layers', then the model inputs') */
    cx_buf act[LP_MAX_LAYERS], act0[LP_MAX_LAYERS], la[LP_MAX_LAYERS + CX_MAX_IN];
    /* LayerDeepLiftShap: the graph that makes the (example, baseline) pairs' inputs and baselines on the backend
     * (pairs_graph), and those */
    cx_derived pg;
    int pg_outs[2 * CX_MAX_IN];
    cx_buf px[CX_MAX_IN], pb[CX_MAX_IN];
} lp_state;

static void graph_free(lp_graph *lg) {
    cg_free(lg->g);
    memset(lg, 0, sizeof *lg);
}

static void lp_release(cattr_explainer *e) {
    lp_state *s = e->method_state;
    if (!s) return;
    graph_free(&s->lg);
    for (int k = 0; k < LP_MAX_LAYERS; k++) {
        cx_buf_free(&s->act[k]);
        cx_buf_free(&s->act0[k]);
    }
    for (int k = 0; k < LP_MAX_LAYERS + CX_MAX_IN; k++) cx_buf_free(&s->la[k]);
    cx_derived_free(&s->pg);
    for (int i = 0; i < CX_MAX_IN; i++) {
        cx_buf_free(&s->px[i]);
        cx_buf_free(&s->pb[i]);
    }
    cattr_explainer_free(s->inner);
    cattr_model_free(s->lm);
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
    CX_CHECK(cx_derive_clone(e->m->g, n_extra, NULL, &lg->g, lg->extra));
    lg->n_model_in = e->m->g->n_inputs;
    lg->n_extra = n_extra;
    return CATTR_OK;
}

/* Runs (res != NULL) or only plans graph lg on the attributed inputs xs (reps*B rows; additional inputs expanded
 * like them) and the extra inputs (NULL: not given), writing the values outs[] to new tensors res[] (the first
 * `keep` also stay on the backend, in e->kept, for a delta summed there). views (not NULL): the shapes and dtypes of
 * outs[]. */
static cattr_status graph_run(cattr_explainer *e, cx_call *c, lp_graph *lg, cattr_tensor *const *xs, int64_t reps,
                              cx_expand how, cattr_tensor *const *extra, const int *outs, int n_outs, int keep,
                              cattr_tensor **res, cx_view *views) {
    int nin = lg->n_model_in + lg->n_extra;
    cx_arg arg[LP_MAX_OUTS + 2];
    cattr_tensor *tmp[CX_MAX_IN] = {0};
    cattr_status st = CATTR_OK;
    memset(arg, 0, sizeof arg);
    for (int i = 0; i < nin; i++) arg[i].dt = c->dt;
    for (int i = 0; i < c->n; i++) {
        arg[i] = cx_arg_of(xs[i]);
        arg[i].dt = c->dt;
    }
    for (int j = 0; j < c->n_add && st == CATTR_OK; j++) {
        const cattr_tensor *a = c->add[j];
        if (reps != 1) {
            tmp[j] = cx_expand_rows(a, reps, how);
            if (!tmp[j]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            a = tmp[j];
        }
        if (st == CATTR_OK) arg[c->n + j] = cx_arg_of(a);
    }
    for (int k = 0; k < lg->n_extra; k++)
        if (extra && extra[k]) arg[lg->n_model_in + k] = cx_arg_of(extra[k]);
    cx_job j = cx_job_for(e, lg->g, e->consts);
    j.n_in = nin;
    j.in = arg;
    j.n_out = n_outs;
    j.outs = outs;
    for (int k = 0; k < n_outs && st == CATTR_OK && views; k++) st = cx_run_view(&j, outs[k], &views[k]);
    if (res && st == CATTR_OK) {
        void *oh[LP_MAX_OUTS], *od[LP_MAX_OUTS] = {0};
        for (int k = 0; k < n_outs; k++) res[k] = NULL;
        for (int k = 0; k < n_outs && st == CATTR_OK; k++) {
            cx_view v;
            st = cx_run_view(&j, outs[k], &v);
            if (st == CATTR_OK && !(res[k] = cx_tensor_alloc(v.dtype, v.ndim, v.shape)))
                st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            if (st == CATTR_OK) oh[k] = res[k]->data;
        }
        for (int k = 0; k < keep && st == CATTR_OK; k++) { /* kept on the backend and brought down */
            st = cx_buf_fit(e->be, &e->kept[k], (size_t)res[k]->numel * cattr_dtype_size(res[k]->dtype), NULL, false);
            od[k] = e->kept[k].p;
        }
        j.out_host = oh;
        j.out_dev = od;
        if (st == CATTR_OK) st = cx_run(&j);
        if (st != CATTR_OK)
            for (int k = 0; k < n_outs; k++) {
                cattr_tensor_free(res[k]);
                res[k] = NULL;
            }
    }
    for (int k = 0; k < CX_MAX_IN; k++) cattr_tensor_free(tmp[k]);
    return st;
}



/* ---- LayerDeepLift's parameters ------------------------------------------------------------------------------------ */

static cattr_status deeplift_init(cattr_explainer *e) {
    /* eps was checked by cx_params_check */
    e->p.eps = 1e-10; /* Captum's layer DeepLift fixes eps at 1e-10 (the rules are the inner DeepLift's) */
    return lp_init_common(e, CATTR_METHOD_COUNT);
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

/* ---- the layer model ---------------------------------------------------------------------------------------------
 * LayerDeepLift (and so LayerDeepLiftShap), LayerFeatureAblation and LayerFeaturePermutation are their input methods
 * on a model derived from the caller's whose first inputs are the layer tensors: every reader of layer value k reads
 * a new input instead (the layer's producer is left without readers and never runs), and the model's own inputs
 * follow. LayerFeatureAblation / Permutation attribute the layer inputs (the model's inputs passed as additional
 * inputs: the other branches see x, as Captum's hooks leave them); LayerDeepLift attributes the layer inputs and the
 * model's (baselines: the layer at x' and x', so every branch sees [x; x'] as in Captum's forward) and keeps the
 * layer's attributions. The input methods run as derived graphs on the backend. */

/* The layer model (once). A layer that is the model output makes a model whose output is its layer input (Captum
 * accepts such layers, e.g. LayerDeepLiftShap on the last Linear). */
static cattr_status layer_model(cattr_explainer *e, lp_state *s) {
    if (s->lm) return CATTR_OK;
    const cg_graph *m = e->m->g;
    int nl = s->n_layers, n_in = m->n_inputs, lin[LP_MAX_LAYERS], in_map[2 * CX_MAX_IN + LP_MAX_LAYERS];
    int from[2 * CX_MAX_IN + LP_MAX_LAYERS], bad = 0;
    if (nl + n_in > 2 * CX_MAX_IN + LP_MAX_LAYERS) return cx_fail(CATTR_ERR_UNSUPPORTED, "too many inputs");
    cg_graph *g = NULL;
    int *map = NULL;
    CX_CHECK(cx_derive_new(m, &g, &map));
    for (int k = 0; k < nl; k++) {
        char nm[48];
        snprintf(nm, sizeof nm, "__layer_%d", k);
        bad |= (lin[k] = cg_add_input(g, nm)) < 0;
        from[k] = -1;
    }
    for (int i = 0; i < n_in; i++) {
        bad |= (in_map[i] = cg_add_input(g, m->vals[m->inputs[i]].name)) < 0;
        from[nl + i] = i;
    }
    cattr_status st = bad ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : CATTR_OK;
    if (st == CATTR_OK) st = cx_graph_append_model_replacing(g, m, in_map, nl, s->layers, lin, map);
    for (int o = 0; o < m->n_outputs && st == CATTR_OK; o++)
        if (cg_add_output(g, map[m->outputs[o]]) < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    free(map);
    if (st != CATTR_OK) {
        cg_free(g);
        return st;
    }
    return cx_model_wrap(e->m, g, from, &s->lm);
}

/* The explainer of input method `method` on the layer model (kept while the method is the same). */
static cattr_status layer_inner(cattr_explainer *e, lp_state *s, cattr_method method) {
    CX_CHECK(layer_model(e, s));
    if (s->inner && s->inner_method == method) return CATTR_OK;
    cattr_explainer_free(s->inner);
    s->inner = NULL;
    cattr_attr_params p = cx_inner_params(e, method);
    CX_CHECK(cattr_explainer_new(s->lm, &p, &s->inner));
    s->inner_method = method;
    return CATTR_OK;
}

/* The layer tensors at inputs xs (B rows; the call's additional inputs): act[k] new tensors, holding the values, or
 * with dev their shapes only (contents undefined), the values left in backend buffers dev[k]. */
static cattr_status layer_values(cattr_explainer *e, lp_state *s, cx_call *c, cattr_tensor *const *xs,
                                 void *const *xs_dev, cattr_tensor **act, cx_buf *dev) {
    cx_arg arg[2 * CX_MAX_IN];
    for (int k = 0; k < c->n + c->n_add; k++) {
        arg[k] = cx_arg_of(k < c->n ? xs[k] : c->add[k - c->n]);
        if (k < c->n && xs_dev && xs_dev[k]) { /* inputs already on the backend */
            arg[k].host = NULL;
            arg[k].dev = xs_dev[k];
        }
    }
    cx_job j = cx_job_for(e, e->m->g, e->consts);
    j.n_in = c->n + c->n_add;
    j.in = arg;
    j.n_out = s->n_layers;
    j.outs = s->layers;
    void *dst[LP_MAX_LAYERS], *ddev[LP_MAX_LAYERS];
    cattr_status st = CATTR_OK;
    for (int k = 0; k < s->n_layers && st == CATTR_OK; k++) {
        cx_view v;
        st = cx_run_view(&j, s->layers[k], &v);
        if (st == CATTR_OK && !(act[k] = cx_tensor_alloc(v.dtype, v.ndim, v.shape)))
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK) dst[k] = act[k]->data;
        if (st == CATTR_OK && dev) { /* the host tensor gives the shape: all-ones bits (NaN) where values were */
            memset(act[k]->data, 0xff, (size_t)act[k]->numel * cattr_dtype_size(act[k]->dtype));
            st = cx_buf_fit(e->be, &dev[k], (size_t)act[k]->numel * cattr_dtype_size(act[k]->dtype), NULL, false);
        }
        if (st == CATTR_OK && dev) ddev[k] = dev[k].p;
    }
    if (dev) j.out_dev = ddev;
    else j.out_host = dst;
    if (st == CATTR_OK) st = cx_run(&j);
    return st;
}

/* ---- LayerDeepLift ------------------------------------------------------------------------------------------------ */

/* LayerDeepLift on the backend: the layer values at x and at x' stay there (layer_values), the inner DeepLift on the
 * layer model reads them in place (cx_call.x_dev / base_dev) with the model's own inputs and baselines (from the host,
 * or from the backend where the call has them there), leaves its attributions there (s->la: the layers' first), and
 * the delta sums the layer attributions there (cx_delta_dev). like[k]: new host tensors of the layer attributions'
 * shapes (contents undefined); with `down` they hold the attributions. */
static cattr_status layer_deeplift_run(cattr_explainer *e, cx_call *c, bool down, cattr_tensor **like,
                                       cattr_tensor **delta) {
    lp_state *s = e->method_state;
    int nl = s->n_layers, n = c->n;
    cattr_tensor *act[LP_MAX_LAYERS] = {0}, *act0[LP_MAX_LAYERS] = {0}, *none[LP_MAX_LAYERS + CX_MAX_IN] = {0};
    double *sel = NULL;
    cattr_status st = layer_inner(e, s, CATTR_METHOD_DEEPLIFT);
    if (st == CATTR_OK) st = layer_values(e, s, c, c->x, c->x_dev, act, s->act);
    if (st == CATTR_OK) st = layer_values(e, s, c, c->base, c->base_dev, act0, s->act0);
    for (int k = 0; k < nl && st == CATTR_OK; k++)
        if (act[k]->dtype != c->dt)
            st = cx_fail(CATTR_ERR_UNSUPPORTED, "LayerDeepLift: layer tensor %d is %s, not the compute dtype %s", k,
                         cattr_dtype_name(act[k]->dtype), cattr_dtype_name(c->dt));
    cattr_explainer *in = s->inner;
    if (st == CATTR_OK) st = cx_build_grad_graph(in, nl + n);
    cx_call c2;
    memset(&c2, 0, sizeof c2);
    c2.n = nl + n;
    c2.B = c->B;
    c2.dt = c->dt;
    c2.n_add = c->n_add;
    c2.target = c->target;
    for (int k = 0; k < nl + n && st == CATTR_OK; k++) { /* the layers' values read in place */
        c2.x[k] = k < nl ? act[k] : c->x[k - nl];
        c2.base[k] = k < nl ? act0[k] : c->base[k - nl];
        c2.x_dev[k] = k < nl ? s->act[k].p : c->x_dev[k - nl];
        c2.base_dev[k] = k < nl ? s->act0[k].p : c->base_dev[k - nl];
        st = cx_buf_fit(in->be, &s->la[k], (size_t)c2.x[k]->numel * cattr_dtype_size(c->dt), NULL, false);
        c2.attr_dev[k] = s->la[k].p;
    }
    for (int j = 0; j < c->n_add; j++) c2.add[j] = c->add[j];
    if (st == CATTR_OK) st = in->method->attribute(in, &c2, none, NULL);
    for (int k = 0; k < LP_MAX_LAYERS + CX_MAX_IN; k++)
        if (none[k]) {
            cattr_tensor_free(none[k]);
            if (st == CATTR_OK) st = cx_fail(CATTR_ERR_INTERNAL, "the inner DeepLift returned a host attribution");
        }
    if (in->peak > e->peak) e->peak = in->peak;
    for (int k = 0; k < nl && st == CATTR_OK; k++) { /* the layers' attributions (down when asked) */
        like[k] = cx_tensor_alloc(c->dt, act[k]->ndim, act[k]->shape);
        if (!like[k]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else if (down)
            st = cx_buf_get(&s->la[k], 0, like[k]->data, NULL, (size_t)like[k]->numel * cattr_dtype_size(c->dt));
    }
    if (st == CATTR_OK && delta && e->p.return_convergence_delta) {
        void *dev[LP_MAX_LAYERS];
        for (int k = 0; k < nl; k++) dev[k] = s->la[k].p;
        sel = malloc((size_t)(2 * c->B + 1) * sizeof *sel);
        st = sel ? cx_delta_forward(e, c, c->base, sel) : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK) st = cx_delta_dev(e, c, nl, like, dev, sel, delta);
    }
    free(sel);
    for (int k = 0; k < LP_MAX_LAYERS; k++) {
        cattr_tensor_free(act[k]);
        cattr_tensor_free(act0[k]);
    }
    return st;
}

static cattr_status layer_deeplift(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    lp_state *s = e->method_state;
    c->n_out = s->n_layers;
    return layer_deeplift_run(e, c, true, attr, delta);
}

/* ---- LayerLRP ----------------------------------------------------------------------------------------------------- */

static cattr_status lrp_init(cattr_explainer *e) { return lp_init_common(e, CATTR_METHOD_LRP); }

/* relevance = (gradient of the target at the layer under the LRP rules) * the target output of the example, in one
 * pass on the backend: the model's clone with the seed and the target's flat index per example as extra inputs, the
 * gradient w.r.t. the layer tensors under the rules, and a suffix (as cx_grad_lrp's): sel = the target output per
 * example (SeqPick), relevance_k = gradient_k * sel broadcast over the layer's dims; sel comes back for the delta. */
static cattr_status lrp_suffix(lp_state *s, const int *rank, int y) {
    bool same = true;
    for (int k = 0; k < s->n_layers; k++) same = same && s->lrp_rank[k] == rank[k];
    if (same) return CATTR_OK;
    lp_graph *lg = &s->lg;
    cg_graph *g = lg->g;
    cg_attrs r3 = cg_attrs_default(), r1 = cg_attrs_default();
    r3.n_ints = 3;
    r3.ints[0] = 0, r3.ints[1] = -1, r3.ints[2] = 1;
    r1.n_ints = 1;
    r1.ints[0] = -1;
    int y3 = cg_emit(g, CG_RESHAPE, "__lrp_out_rows", (int[]){y}, 1, &r3);
    int ys = y3 < 0 ? -1 : cg_emit(g, CG_SEQ_PICK, "__lrp_target", (int[]){y3, lg->extra[1]}, 2, NULL);
    int sel = ys < 0 ? -1 : cg_emit(g, CG_RESHAPE, "__lrp_selected", (int[]){ys}, 1, &r1);
    for (int k = 0; k < s->n_layers && sel >= 0; k++) {
        cg_attrs rr = cg_attrs_default();
        rr.n_ints = rank[k];
        rr.ints[0] = -1;
        for (int d = 1; d < rr.n_ints; d++) rr.ints[d] = 1;
        int sb = cg_emit(g, CG_RESHAPE, "__lrp_selected_rows", (int[]){sel}, 1, &rr);
        s->lrp_out[k] = sb < 0 ? -1 : cg_emit(g, CG_MUL, "__lrp_relevance", (int[]){lg->grads[k], sb}, 2, NULL);
        if (s->lrp_out[k] < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        s->lrp_rank[k] = rank[k];
    }
    if (sel < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    s->lrp_out[s->n_layers] = sel;
    return CATTR_OK;
}

static cattr_status layer_lrp(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    lp_state *s = e->method_state;
    lp_graph *lg = &s->lg;
    int n = s->n_layers, y = cx_model_output(e->m), outs[LP_MAX_LAYERS + 1], rank[LP_MAX_LAYERS];
    int64_t B = c->B;
    if (!lg->g) { /* the clone with two extra inputs (seed, target index) and the gradient at the layer */
        CX_CHECK(graph_clone(e, lg, 2));
        CX_CHECK(cg_autodiff(lg->g, y, lg->extra[0], s->layers, n, &s->rules, lg->grads));
        lg->n_grads = n;
    }
    cx_view views[LP_MAX_LAYERS + 1];
    cattr_tensor *seed = NULL, *tidx = NULL, *res[LP_MAX_LAYERS + 1] = {0}, *ext[2] = {0};
    outs[0] = y;
    for (int k = 0; k < n; k++) outs[1 + k] = s->layers[k];
    cattr_status st = graph_run(e, c, lg, c->x, 1, CX_TILE, NULL, outs, n + 1, 0, NULL, views);
    for (int k = 0; k < n && st == CATTR_OK; k++) rank[k] = views[1 + k].ndim;
    if (st == CATTR_OK) st = target_seed(c, &views[0], 1, &seed);
    if (st == CATTR_OK && !(tidx = cx_tensor_alloc(CATTR_INT64, 1, &B))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) cx_target_rows(seed, B, B, (int64_t *)tidx->data);
    if (st == CATTR_OK) st = lrp_suffix(s, rank, y);
    ext[0] = seed;
    ext[1] = tidx;
    bool want = delta && e->p.return_convergence_delta;
    if (st == CATTR_OK) st = graph_run(e, c, lg, c->x, 1, CX_TILE, ext, s->lrp_out, n + 1, want ? n : 0, res, NULL);
    for (int k = 0; k < n && st == CATTR_OK; k++) {
        attr[k] = res[k];
        res[k] = NULL;
    }
    c->n_out = n;
    if (st == CATTR_OK && want) { /* output - the relevances' sum: -(sum - output), the sum on the backend */
        double *ends = malloc((size_t)(2 * B + 1) * sizeof *ends);
        void *dev[LP_MAX_LAYERS];
        for (int k = 0; k < n; k++) dev[k] = e->kept[k].p;
        st = ends ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        for (int64_t b = 0; b < B && st == CATTR_OK; b++) ends[b] = cx_tensor_get(res[n], b), ends[B + b] = 0;
        if (st == CATTR_OK) st = cx_delta_dev(e, c, n, attr, dev, ends, delta);
        for (int64_t b = 0; b < B && st == CATTR_OK; b++) cx_tensor_set(*delta, b, -cx_tensor_get(*delta, b));
        free(ends);
    }
    for (int k = 0; k <= n; k++) cattr_tensor_free(res[k]);
    cattr_tensor_free(seed);
    cattr_tensor_free(tidx);
    return st;
}

static cattr_status ablation_init(cattr_explainer *e) { /* perturbations_per_eval: cx_params_check */
    return lp_init_common(e, CATTR_METHOD_COUNT);
}

/* ---- LayerFeatureAblation -------------------------------------------------------------------------------------- */

/* LayerFeatureAblation, or with `permute` LayerFeaturePermutation: FeatureAblation / FeaturePermutation of the layer
 * tensors on the layer model, the model's inputs passed as additional inputs, the layer masks as feature masks and
 * the layer baseline for every layer tensor (a batch below 2 leaves every permutation attribution 0, as Captum skips
 * every feature group then). */
static cattr_status layer_ablate(cattr_explainer *e, cx_call *c, cattr_tensor **attr, bool permute) {
    lp_state *s = e->method_state;
    int n = s->n_layers;
    cattr_tensor *act[LP_MAX_LAYERS] = {0};
    const cattr_tensor *lb = c->user ? c->user->layer_baseline : NULL;
    const cattr_call *u = c->user;
    char s1[128], s2[128];
    cattr_status st = layer_inner(e, s, permute ? CATTR_METHOD_FEATURE_PERMUTATION : CATTR_METHOD_FEATURE_ABLATION);
    if (st == CATTR_OK && u && u->layer_masks && u->n_layer_masks != n)
        st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "%d layer masks given for a layer of %d tensors", u->n_layer_masks, n);
    if (st == CATTR_OK) st = layer_values(e, s, c, c->x, NULL, act, NULL);
    for (int k = 0; k < n && st == CATTR_OK && lb; k++) { /* the layer baseline: broadcast to the layer as torch does */
        const cattr_tensor *a = act[k];
        bool ok = lb->ndim <= a->ndim; /* dims aligned from the last, each 1 or the layer's (a scalar, batch 1, ...) */
        for (int d = 1; ok && d <= lb->ndim; d++)
            ok = lb->shape[lb->ndim - d] == 1 || lb->shape[lb->ndim - d] == a->shape[a->ndim - d];
        if (!ok)
            st = cx_fail(CATTR_ERR_SHAPE, "the layer baseline has shape %s; it must broadcast to the layer's shape %s (a "
                         "scalar, or each dim, aligned from the last, 1 or the layer's)",
                         cx_shape_str(lb->ndim, lb->shape, s1, sizeof s1), cx_shape_str(a->ndim, a->shape, s2, sizeof s2));
    }
    if (st == CATTR_OK && permute && c->B < 2) { /* Captum skips every group: the attributions stay 0 */
        int64_t n_out = c->B;
        if (!(c->target && c->target->kind != CATTR_TARGET_NONE)) {
            cattr_tensor *out = NULL;
            st = cx_forward(e, c, c->x, NULL, 1, CX_TILE, &out);
            if (st == CATTR_OK) n_out = out->numel;
            cattr_tensor_free(out);
        }
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
        const cattr_tensor *in[LP_MAX_LAYERS], *bl[LP_MAX_LAYERS], *add[2 * CX_MAX_IN];
        for (int k = 0; k < n; k++) in[k] = act[k], bl[k] = lb;
        for (int i = 0; i < c->n; i++) add[i] = c->x[i];
        for (int j = 0; j < c->n_add; j++) add[c->n + j] = c->add[j];
        cattr_call call = cx_call_rest(c);
        call.inputs = in;
        call.n_inputs = n;
        call.baselines = lb ? bl : NULL;
        call.target = c->target;
        call.additional = add;
        call.n_additional = c->n + c->n_add;
        call.feature_masks = u->layer_masks;
        call.layer_masks = NULL;
        call.n_layer_masks = 0;
        call.layer_baseline = NULL;
        st = cattr_explainer_run(s->inner, &call, attr, NULL);
    }
    c->n_out = n;
    for (int k = 0; k < LP_MAX_LAYERS; k++) cattr_tensor_free(act[k]);
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

/* ---- LayerDeepLiftShap ------------------------------------------------------------------------------------------- */


/* The pairs graph for n inputs: inputs x_i [B, ...], dist_i [nb, ...], then prow, brow [R] (int64; row r = b * nb + k
 * pairs example prow[r] = b with baseline row brow[r] = k); outputs Gather(x_i, prow) then Gather(dist_i, brow). */
static cattr_status pairs_graph(cattr_explainer *e, lp_state *s, const cx_call *c) {
    cx_derived *d = &s->pg;
    if (d->g && d->n == c->n && d->consts) return CATTR_OK;
    cx_derived_free(d);
    cg_graph *g = cg_new();
    if (!g) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    d->g = g;
    int x[CX_MAX_IN], di[CX_MAX_IN], bad = 0;
    for (int i = 0; i < c->n; i++) bad |= (x[i] = cg_add_input(g, "__pair_x")) < 0;
    for (int i = 0; i < c->n; i++) bad |= (di[i] = cg_add_input(g, "__pair_dist")) < 0;
    int prow = cg_add_input(g, "__pair_example"), brow = cg_add_input(g, "__pair_baseline");
    bad |= prow < 0 || brow < 0;
    cg_attrs a0 = cg_attrs_default();
    for (int i = 0; i < c->n && !bad; i++) {
        s->pg_outs[i] = cg_emit(g, CG_GATHER, "__pair_inputs", (int[]){x[i], prow}, 2, &a0);
        s->pg_outs[c->n + i] = cg_emit(g, CG_GATHER, "__pair_baselines", (int[]){di[i], brow}, 2, &a0);
        bad |= s->pg_outs[i] < 0 || s->pg_outs[c->n + i] < 0;
    }
    if (bad) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    d->n = c->n;
    return cx_consts_new(e->be, c->dt, &d->consts);
}

/* LayerDeepLiftShap: LayerDeepLift on every (example, baseline) pair, then the mean over the baselines (torch.mean:
 * the sum, then / nb); the delta has one entry per pair. The pairs' inputs and baselines are gathered on the backend
 * from the inputs and the distribution (pairs_graph), LayerDeepLift reads them there (cx_call.x_dev / base_dev) and
 * leaves the pairs' layer attributions there, and their mean is made there (cx_pairs_mean): the inputs and the
 * distribution go up once, the mean comes down once. */
static cattr_status layer_deeplift_shap(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    lp_state *s = e->method_state;
    int64_t nb = c->dist[0] ? c->dist[0]->shape[0] : 0, B = c->B, R = B * nb;
    for (int i = 0; i < c->n; i++) {
        int64_t ni = c->dist[i] ? c->dist[i]->shape[0] : 0;
        if (ni != nb)
            return cx_fail(CATTR_ERR_SHAPE, "baseline %d has %lld rows and baseline 0 has %lld: DeepLiftShap pairs "
                                            "every input with the same number of baselines", i, (long long)ni,
                           (long long)nb);
    }
    if (nb < 2)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "%s needs a distribution of at least 2 baseline rows (got %lld)",
                       cx_method_captum_name(e->method->id), (long long)nb);
    cx_call p;
    cattr_target tgt;
    int64_t *tidx = NULL, *rows = malloc((size_t)(2 * R + 1) * sizeof *rows);
    cattr_tensor *like[LP_MAX_LAYERS] = {0};
    cattr_status st = cx_pairs_make(c, nb, &p, &tgt, &tidx);
    if (st == CATTR_OK && !rows) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) st = pairs_graph(e, s, c);
    cx_arg arg[2 * CX_MAX_IN + 2];
    memset(arg, 0, sizeof arg);
    void *out[2 * CX_MAX_IN];
    int n = c->n;
    for (int64_t r = 0; r < R && rows; r++) rows[r] = r / nb, rows[R + r] = r % nb;
    for (int k = 0; k < 2 * n && st == CATTR_OK; k++) { /* the pairs' inputs and baselines, made on the backend */
        const cattr_tensor *t = k < n ? c->x[k] : c->dist[k - n];
        arg[k].nd = t->ndim;
        memcpy(arg[k].sh, t->shape, sizeof arg[k].sh);
        arg[k].dt = c->dt;
        arg[k].host = t->data;
        int64_t psh[CATTR_MAX_DIMS];
        memcpy(psh, t->shape, sizeof psh);
        psh[0] = R;
        cattr_tensor **ph = k < n ? &p.x[k] : &p.base[k - n]; /* host tensors of the pairs' shapes: NaN, never read */
        if (!(*ph = cx_tensor_alloc(c->dt, t->ndim, psh))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else memset((*ph)->data, 0xff, (size_t)(*ph)->numel * cattr_dtype_size(c->dt));
        cx_buf *b = k < n ? &s->px[k] : &s->pb[k - n];
        if (st == CATTR_OK) st = cx_buf_fit(e->be, b, (size_t)(*ph)->numel * cattr_dtype_size(c->dt), NULL, false);
        out[k] = b->p;
        if (k < n) p.x_dev[k] = b->p;
        else p.base_dev[k - n] = b->p;
    }
    for (int k = 2 * n; k < 2 * n + 2; k++) {
        arg[k].nd = 1;
        arg[k].sh[0] = R;
        arg[k].dt = CATTR_INT64;
        arg[k].host = rows ? rows + (k - 2 * n) * R : NULL;
    }
    cx_job j = cx_job_for(e, s->pg.g, s->pg.consts);
    j.n_in = 2 * n + 2;
    j.in = arg;
    j.n_out = 2 * n;
    j.outs = s->pg_outs;
    j.out_dev = out;
    if (st == CATTR_OK) st = cx_run(&j);
    if (st == CATTR_OK) st = layer_deeplift_run(e, &p, false, like, delta); /* the pairs' attributions stay there */
    c->n_out = s->n_layers;
    void *dev[LP_MAX_LAYERS];
    for (int k = 0; k < s->n_layers; k++) dev[k] = s->la[k].p;
    if (st == CATTR_OK) st = cx_pairs_mean(e, c, nb, s->n_layers, like, dev, attr);
    for (int k = 0; k < LP_MAX_LAYERS; k++) cattr_tensor_free(like[k]);
    free(rows);
    cx_pairs_free(&p, tidx);
    return st;
}

/* ---- LayerGradientShap ------------------------------------------------------------------------------------------- */

static cattr_status gshap_init(cattr_explainer *e) { /* n_samples and stdevs: cx_params_check */
    return lp_init_common(e, CATTR_METHOD_COUNT);
}

/* LayerGradientShap: (a(noisy input) - a(baseline)) times the target's gradient at the layer at the random points,
 * as one derived graph on the backend (noise.c's tunnel); the delta has one entry per sample row. */
static cattr_status layer_gradient_shap(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    lp_state *s = e->method_state;
    return cx_layer_gradient_shap(e, c, s->layers, s->n_layers, attr, delta);
}

/* ---- the method table entries ------------------------------------------------------------------------------------ */

const cx_method cx_method_layer_deeplift = {CATTR_METHOD_LAYER_DEEPLIFT, false,
                                            deeplift_init, layer_deeplift, lp_release};
const cx_method cx_method_layer_deeplift_shap = {CATTR_METHOD_LAYER_DEEPLIFT_SHAP, true, deeplift_init, layer_deeplift_shap,
                                                 lp_release};
const cx_method cx_method_layer_gradient_shap = {CATTR_METHOD_LAYER_GRADIENT_SHAP, true, gshap_init, layer_gradient_shap, lp_release};
const cx_method cx_method_layer_feature_ablation = {CATTR_METHOD_LAYER_FEATURE_ABLATION, false, ablation_init,
                                                    layer_feature_ablation, lp_release};
const cx_method cx_method_layer_feature_permutation = {CATTR_METHOD_LAYER_FEATURE_PERMUTATION, false, ablation_init, layer_feature_permutation, lp_release};
const cx_method cx_method_layer_lrp = {CATTR_METHOD_LAYER_LRP, false, lrp_init, layer_lrp,
                                       lp_release};
