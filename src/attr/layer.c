/* layer.c - layer and neuron methods of the gradient family (Captum semantics, shared/reference/captum_spec.md §3,
 * §4, §1.7-§1.10): LayerActivation, LayerGradientXActivation, LayerGradCam, InternalInfluence, LayerConductance,
 * LayerIntegratedGradients, NeuronGradient, NeuronIntegratedGradients, NeuronConductance.
 *
 * The methods are graphs derived from the model, run on the backend:
 *   - the forward graph (the model itself): LayerActivation, and the shapes of the layer values;
 *   - the layer graph: the model plus the gradient of the target-selected output w.r.t. the layer values, with the
 *     suffixes of LayerGradientXActivation (g * a) and LayerGradCam (weights, weighted sum, ReLU) as ops;
 *   - the neuron graph: the model plus the gradient of the selected neuron (a seed over the layer value) w.r.t. the
 *     attributed inputs (NeuronGradient);
 *   - the path graph (lpath, below) of the integrated methods: the path points made from x, the baselines and the
 *     schedule, the gradient, and the weighted sum over the steps into accumulators kept on the backend.
 * Step sizes are float32 in every dtype and the alphas are cast to the compute dtype (as IntegratedGradients in
 * gradient.c); the sums over the steps are exact sums rounded once (GatherGrad).
 */
#include "attr/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LG_MAX_IN (2 * CX_MAX_IN + 2)
#define LG_MAX_OUT (2 * CATTR_MAX_OUTPUTS)
#define LG_CACHE 6

/* ---- graphs and their plans ------------------------------------------------------------------------------------ */


typedef struct {
    cg_graph *g; /* owned unless it is the model's own graph */
    bool owned;
    cx_plan_cache pc; /* LG_CACHE plans, by input shapes and outputs */
} lgraph;

typedef struct lpath lpath;
static void lpath_free(lpath *p);

typedef struct {
    int n_l;                     /* layer tensors */
    int lv[CATTR_MAX_OUTPUTS];   /* their value ids */
    lgraph gf;                   /* the model itself (forward passes) */
    lgraph ga;                   /* layer graph */
    int ga_grad[CATTR_MAX_OUTPUTS];
    lgraph gn;                   /* neuron graph, for gn_n attributed inputs */
    int gn_n, gn_grad[CX_MAX_IN];
    lpath *path;          /* the integrated methods' graph and buffers (lpath_run) */
    /* a method's suffix on the layer graph per layer tensor (layer_suffix): its key (0: none) and output */
    int sfx_key[CATTR_MAX_OUTPUTS], sfx_out[CATTR_MAX_OUTPUTS];
} lstate;

static void lgraph_free(lgraph *lg) {
    cx_plan_cache_clear(&lg->pc);
    if (lg->owned) cg_free(lg->g);
    memset(lg, 0, sizeof *lg);
}

static void layer_release(cattr_explainer *e) {
    lstate *s = e->method_state;
    if (!s) return;
    lgraph_free(&s->gf);
    lgraph_free(&s->ga);
    lgraph_free(&s->gn);
    lpath_free(s->path);
    free(s);
    e->method_state = NULL;
}

/* Inputs of one pass: the model inputs (attributed xs of reps*B rows, additional inputs expanded likewise), then
 * the graph's extra inputs (seeds, replaced layer values; nd 0 and NULL while not needed). */
typedef struct {
    int n;
    int nd[LG_MAX_IN];
    int64_t sh[LG_MAX_IN][CATTR_MAX_DIMS];
    cattr_dtype dt[LG_MAX_IN];
    const void *host[LG_MAX_IN];
    cattr_tensor *tmp[LG_MAX_IN];
} lpass;

static void lp_free(lpass *pi) {
    for (int i = 0; i < LG_MAX_IN; i++) cattr_tensor_free(pi->tmp[i]);
}

static void lp_set(lpass *pi, int i, const cattr_tensor *t) {
    pi->nd[i] = t->ndim;
    memcpy(pi->sh[i], t->shape, sizeof pi->sh[i]);
    pi->dt[i] = t->dtype;
    pi->host[i] = t->data;
}

static cattr_status lp_setup(const lgraph *lg, const cx_call *c, cattr_tensor *const *xs, int64_t reps,
                             cx_expand how, lpass *pi) {
    memset(pi, 0, sizeof *pi);
    pi->n = lg->g->n_inputs;
    if (pi->n > LG_MAX_IN) return cx_fail(CATTR_ERR_UNSUPPORTED, "too many graph inputs (%d)", pi->n);
    for (int i = 0; i < pi->n; i++) pi->dt[i] = c->dt;
    for (int i = 0; i < c->n; i++) lp_set(pi, i, xs[i]);
    for (int j = 0; j < c->n_add; j++) {
        const cattr_tensor *a = c->add[j];
        if (reps != 1) {
            pi->tmp[c->n + j] = cx_expand_rows(a, reps, how);
            if (!pi->tmp[c->n + j]) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            a = pi->tmp[c->n + j];
        }
        lp_set(pi, c->n + j, a);
    }
    return CATTR_OK;
}

static cattr_status lg_plan(cattr_explainer *e, lgraph *lg, const lpass *pi, const int *outs, int n_outs,
                            cx_plan **out) {
    const int64_t(*sh)[CATTR_MAX_DIMS] = (const int64_t(*)[CATTR_MAX_DIMS])pi->sh;
    lg->pc.cap = LG_CACHE;
    CX_CHECK(cx_plan_cache_get(&lg->pc, lg->g, e->consts, e->p.executor == CATTR_EXEC_EAGER, pi->nd, sh, pi->dt, outs,
                               n_outs, out));
    size_t b = cx_plan_bytes(*out);
    if (b > e->peak) e->peak = b;
    return CATTR_OK;
}

/* The inferred view of value v for these inputs (from a shape plan of v alone). */
static cattr_status lg_view(cattr_explainer *e, lgraph *lg, const lpass *pi, int v, cx_view *view) {
    cx_plan *p;
    CX_CHECK(lg_plan(e, lg, pi, &v, 1, &p));
    *view = *cx_plan_view(p, v);
    return CATTR_OK;
}

/* Runs outs[0..n_outs) of lg; res[k] are new tensors. */
static cattr_status lg_run(cattr_explainer *e, lgraph *lg, const lpass *pi, const int *outs, int n_outs,
                           cattr_tensor **res) {
    cx_plan *p;
    CX_CHECK(lg_plan(e, lg, pi, outs, n_outs, &p));
    void *dst[LG_MAX_OUT];
    cattr_status st = CATTR_OK;
    for (int k = 0; k < n_outs; k++) res[k] = NULL;
    for (int k = 0; k < n_outs && st == CATTR_OK; k++) {
        const cx_view *v = cx_plan_view(p, outs[k]);
        res[k] = cx_tensor_alloc(v->dtype, v->ndim, v->shape);
        if (!res[k]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else dst[k] = res[k]->data;
    }
    if (st == CATTR_OK) st = cx_run_plan(e, p, pi->host, dst);
    if (st != CATTR_OK)
        for (int k = 0; k < n_outs; k++) {
            cattr_tensor_free(res[k]);
            res[k] = NULL;
        }
    return st;
}

/* A clone of the model (cx_derive_clone) with one extra input, the seed, whose value id goes to *seed. */
static cattr_status clone_model(const cattr_explainer *e, lgraph *lg, const char *seed_name, int *seed) {
    lg->owned = true;
    return cx_derive_clone(e->m->g, 1, &seed_name, &lg->g, seed);
}

static void ensure_gf(cattr_explainer *e, lstate *s) {
    if (!s->gf.g) s->gf.g = (cg_graph *)e->m->g; /* borrowed: plans only read it */
}

/* The layer graph: model inputs, then the seed over the model output. */
static cattr_status ensure_ga(cattr_explainer *e, lstate *s) {
    if (s->ga.g) return CATTR_OK;
    int seed = -1;
    CX_CHECK(clone_model(e, &s->ga, "__cattr_seed__", &seed));
    cg_rules r;
    cg_rules_default(&r);
    return cg_autodiff(s->ga.g, cx_model_output(e->m), seed, s->lv, s->n_l, &r, s->ga_grad);
}

/* The neuron graph for n attributed inputs: model inputs, then the seed over the layer value. */
static cattr_status ensure_gn(cattr_explainer *e, lstate *s, int n) {
    if (s->gn.g && s->gn_n == n) return CATTR_OK;
    lgraph_free(&s->gn);
    int seed = -1;
    CX_CHECK(clone_model(e, &s->gn, "__cattr_neuron_seed__", &seed));
    int wrt[CX_MAX_IN];
    memcpy(wrt, s->gn.g->inputs, (size_t)n * sizeof *wrt);
    cg_rules r;
    cg_rules_default(&r);
    CX_CHECK(cg_autodiff(s->gn.g, s->lv[0], seed, wrt, n, &r, s->gn_grad));
    s->gn_n = n;
    return CATTR_OK;
}

/* ---- seeds: the target over the output, the neuron over the layer ----------------------------------------------- */

/* Seed of reps*B output rows of shape ov: 1 at the value the target selects in each row's example. The selected
 * position is found with cx_select over a tensor holding each position's index (one value per example). */
static cattr_status target_seed(const cx_call *c, const cx_view *ov, int64_t reps, cx_expand how,
                                cattr_tensor **out) {
    *out = NULL;
    if (ov->ndim < 1 || ov->shape[0] != reps * c->B) {
        char s[128];
        return cx_fail(CATTR_ERR_SHAPE, "the model output has shape %s; expected the batch (%lld) first",
                       cx_shape_str(ov->ndim, ov->shape, s, sizeof s), (long long)(reps * c->B));
    }
    int64_t blk[CATTR_MAX_DIMS], per = cx_numel(ov->ndim - 1, ov->shape + 1);
    memcpy(blk, ov->shape, sizeof blk);
    blk[0] = c->B;
    cattr_tensor *pos = cx_tensor_alloc(CATTR_FLOAT64, ov->ndim, blk);
    cattr_tensor *seed = cx_tensor_alloc(c->dt, ov->ndim, ov->shape);
    double *sel = malloc((size_t)(c->B + 1) * sizeof *sel);
    cattr_status st = pos && seed && sel ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) {
        for (int64_t k = 0; k < pos->numel; k++) cx_tensor_set(pos, k, (double)(k % (per ? per : 1)));
        st = cx_select(c, pos, 1, CX_TILE, sel);
    }
    if (st == CATTR_OK) {
        memset(seed->data, 0, (size_t)seed->numel * cattr_dtype_size(c->dt));
        for (int64_t r = 0; r < reps * c->B; r++) {
            int64_t b = how == CX_TILE ? r % c->B : r / reps;
            cx_tensor_set(seed, r * per + (int64_t)sel[b], 1.0);
        }
    }
    cattr_tensor_free(pos);
    free(sel);
    if (st != CATTR_OK) {
        cattr_tensor_free(seed);
        return st;
    }
    *out = seed;
    return CATTR_OK;
}

/* The neuron selector resolved against a layer of per-example shape sh[1..nd): the selected flat positions within
 * one example, in row-major order (Captum sums them when the selector holds slices or is a sum). */
typedef struct {
    int64_t per, n_sel;
    int64_t *sel;
} neuron_sel;

static cattr_status neuron_select(const cattr_attr_params *p, int nd, const int64_t *sh, neuron_sel *ns) {
    char s1[128];
    memset(ns, 0, sizeof *ns);
    ns->per = cx_numel(nd - 1, sh + 1);
    int64_t lo[CATTR_MAX_DIMS], cnt[CATTR_MAX_DIMS], step[CATTR_MAX_DIMS];
    for (int d = 0; d + 1 < nd; d++) {
        lo[d] = 0;
        cnt[d] = sh[d + 1];
        step[d] = 1;
    }
    if (p->neuron_kind == CATTR_NEURON_SUM) {
        bool summed[CATTR_MAX_DIMS] = {0};
        for (int k = 0; k < p->neuron_sum_ndim; k++) {
            int64_t d = p->neuron_sum_dims[k];
            if (d < 0) d += nd;
            if (d < 1 || d >= nd)
                return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                               "neuron selector: sum dim %lld is not a non-batch dim of the layer of shape %s",
                               (long long)p->neuron_sum_dims[k], cx_shape_str(nd, sh, s1, sizeof s1));
            summed[d] = true;
        }
        for (int d = 1; d < nd; d++)
            if (!summed[d] && sh[d] != 1)
                return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                               "neuron selector: the sum leaves dim %d of the layer of shape %s; it must leave one "
                               "value per example", d, cx_shape_str(nd, sh, s1, sizeof s1));
    } else if (p->neuron_kind == CATTR_NEURON_INDEX || p->neuron_kind == CATTR_NEURON_SLICES) {
        if (p->neuron_ndim > nd - 1)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                           "neuron selector has %d entries; the layer of shape %s has %d dims besides the batch",
                           p->neuron_ndim, cx_shape_str(nd, sh, s1, sizeof s1), nd - 1);
        for (int d = 0; d < p->neuron_ndim; d++) {
            int64_t n = sh[d + 1];
            bool index = p->neuron_kind == CATTR_NEURON_INDEX || p->neuron_slice_is_index[d];
            if (index) {
                int64_t v = p->neuron_kind == CATTR_NEURON_INDEX ? p->neuron_index[d] : p->neuron_slice[d][0];
                if (v < 0) v += n;
                if (v < 0 || v >= n)
                    return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                                   "neuron index %lld is out of range for dim %d (size %lld) of the layer",
                                   (long long)(p->neuron_kind == CATTR_NEURON_INDEX ? p->neuron_index[d]
                                                                                   : p->neuron_slice[d][0]),
                                   d + 1, (long long)n);
                lo[d] = v;
                cnt[d] = 1;
                continue;
            }
            int64_t a = p->neuron_slice[d][0], b = p->neuron_slice[d][1], st = p->neuron_slice[d][2];
            if (st < 1)
                return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "neuron selector: slice step %lld of dim %d is not "
                                                           "positive", (long long)st, d + 1);
            if (a < 0) a += n;
            if (b < 0) b += n;
            a = a < 0 ? 0 : (a > n ? n : a);
            b = b < 0 ? 0 : (b > n ? n : b);
            lo[d] = a;
            step[d] = st;
            cnt[d] = b > a ? 1 + (b - a - 1) / st : 0; /* no overflow for a huge step */
        }
    } else {
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "this method needs a neuron selector");
    }
    int64_t n_sel = 1;
    for (int d = 0; d + 1 < nd; d++) n_sel *= cnt[d];
    if (n_sel < 1) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "the neuron selector selects nothing");
    if (p->neuron_kind == CATTR_NEURON_INDEX && n_sel != 1)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                       "the neuron index (%d entries) selects %lld values of the layer of shape %s; give an index "
                       "for every dim", p->neuron_ndim, (long long)n_sel, cx_shape_str(nd, sh, s1, sizeof s1));
    ns->sel = malloc((size_t)n_sel * sizeof *ns->sel);
    if (!ns->sel) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t q = 0; q < n_sel; q++) { /* row-major enumeration of the selected box */
        int64_t rem = q, off = 0, stride = 1;
        for (int d = nd - 2; d >= 0; d--) {
            int64_t i = rem % cnt[d];
            rem /= cnt[d];
            off += (lo[d] + i * step[d]) * stride;
            stride *= sh[d + 1];
        }
        ns->sel[q] = off;
    }
    ns->n_sel = n_sel;
    return CATTR_OK;
}

/* ---- passes ------------------------------------------------------------------------------------------------- */

/* Layer activations (and, want_grad, the target's gradients w.r.t. them) for inputs xs of reps*B rows. */
static cattr_status layer_pass(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, int64_t reps, cx_expand how,
                               bool want_grad, cattr_tensor **acts, cattr_tensor **grads) {
    lstate *s = e->method_state;
    lgraph *lg = &s->gf;
    if (want_grad) {
        CX_CHECK(ensure_ga(e, s));
        lg = &s->ga;
    } else {
        ensure_gf(e, s);
    }
    lpass pi;
    cattr_tensor *seed = NULL, *res[LG_MAX_OUT] = {0};
    int outs[LG_MAX_OUT];
    cattr_status st = lp_setup(lg, c, xs, reps, how, &pi);
    if (st == CATTR_OK && want_grad) {
        cx_view ov;
        st = lg_view(e, lg, &pi, cx_model_output(e->m), &ov);
        if (st == CATTR_OK) st = target_seed(c, &ov, reps, how, &seed);
        if (st == CATTR_OK) lp_set(&pi, pi.n - 1, seed);
    }
    for (int k = 0; k < s->n_l; k++) {
        outs[k] = s->lv[k];
        outs[s->n_l + k] = s->ga_grad[k];
    }
    if (st == CATTR_OK) st = lg_run(e, lg, &pi, outs, want_grad ? 2 * s->n_l : s->n_l, res);
    lp_free(&pi);
    cattr_tensor_free(seed);
    if (st != CATTR_OK) return st;
    for (int k = 0; k < s->n_l; k++) {
        acts[k] = res[k];
        if (want_grad) grads[k] = res[s->n_l + k];
    }
    return CATTR_OK;
}

/* Gradients of the selected neuron w.r.t. the attributed inputs, for inputs xs of reps*B rows. */
static cattr_status neuron_pass(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, int64_t reps, cx_expand how,
                                cattr_tensor **gx) {
    lstate *s = e->method_state;
    CX_CHECK(ensure_gn(e, s, c->n));
    lpass pi;
    neuron_sel ns = {0};
    cattr_tensor *seed = NULL;
    cx_view lv;
    cattr_status st = lp_setup(&s->gn, c, xs, reps, how, &pi);
    if (st == CATTR_OK) st = lg_view(e, &s->gn, &pi, s->lv[0], &lv);
    if (st == CATTR_OK && (lv.ndim < 1 || lv.shape[0] != reps * c->B))
        st = cx_fail(CATTR_ERR_SHAPE, "the layer has %lld rows; expected the batch (%lld) first",
                     (long long)(lv.ndim ? lv.shape[0] : 0), (long long)(reps * c->B));
    if (st == CATTR_OK) st = neuron_select(&e->p, lv.ndim, lv.shape, &ns);
    if (st == CATTR_OK) {
        seed = cx_tensor_alloc(c->dt, lv.ndim, lv.shape);
        if (!seed) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK) {
        memset(seed->data, 0, (size_t)seed->numel * cattr_dtype_size(c->dt));
        for (int64_t r = 0; r < lv.shape[0]; r++)
            for (int64_t q = 0; q < ns.n_sel; q++) cx_tensor_set(seed, r * ns.per + ns.sel[q], 1.0);
        lp_set(&pi, pi.n - 1, seed);
        st = lg_run(e, &s->gn, &pi, s->gn_grad, c->n, gx);
    }
    free(ns.sel);
    lp_free(&pi);
    cattr_tensor_free(seed);
    return st;
}

/* ---- integration paths ---------------------------------------------------------------------------------------- */

/* Captum's points for n steps: alphas cast to the compute dtype, step sizes to float32 (in every dtype). */
static cattr_status quad_points(const cattr_explainer *e, int n, double **alphas, double **steps) {
    *alphas = malloc((size_t)n * sizeof **alphas);
    *steps = malloc((size_t)n * sizeof **steps);
    cattr_status st = *alphas && *steps ? cattr_quadrature_points(e->p.quadrature, n, *alphas, *steps)
                                        : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st != CATTR_OK) {
        free(*alphas);
        free(*steps);
        *alphas = *steps = NULL;
        return st;
    }
    for (int s = 0; s < n; s++) {
        (*steps)[s] = (double)(float)(*steps)[s];
        (*alphas)[s] = cx_rnd(e->p.dtype, (*alphas)[s]);
    }
    return CATTR_OK;
}

/* Points per chunk: Captum's internal_batch_size rule (at least `min`), else as many as the memory budget allows. */
static cattr_status points_per_chunk(cattr_explainer *e, cx_call *c, int n, int min, int *out) {
    int64_t B = c->B ? c->B : 1, k;
    if (e->p.internal_batch_size > 0) {
        k = e->p.internal_batch_size / B;
    } else {
        size_t row = 0;
        CX_CHECK(cx_row_bytes(e, c, true, &row));
        size_t per = row * (size_t)B;
        k = per ? (int64_t)(cx_memory_budget(e) / per) : n;
        if (k < 1 && min <= 1)
            cx_budget_warn(e, "the memory budget (%zu bytes) is below one point of the path (%zu bytes); running one "
                              "point per chunk", cx_memory_budget(e), per);
    }
    if (k < min) k = min;
    if (k < 1) k = 1;
    *out = (int)(k > n ? n : k);
    return CATTR_OK;
}

/* ---- LayerActivation, LayerGradientXActivation, LayerGradCam ------------------------------------------------- */

static cattr_status layer_activation(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    lstate *s = e->method_state;
    CX_CHECK(layer_pass(e, c, c->x, 1, CX_TILE, false, attr, NULL));
    c->n_out = s->n_l;
    return CATTR_OK;
}

/* ---- suffixes on the layer graph: LayerGradientXActivation, LayerGradCam ------------------------------------------
 * What these methods compute from a layer tensor's activation a and gradient g runs as ops after the layer graph's
 * gradient, so that a call uploads its inputs and the seed once and downloads only the attributions:
 *   LayerGradientXActivation   g * a (multiply_by_inputs), else g
 *   LayerGradCam               w = ReduceMean(g, dims >= 2, keepdims) (a 2-D layer: w = g), w * a, summed over dim 1
 *                              (keepdims) when attr_dim_summation, Relu when relu_attributions */
enum { SFX_GXA = 1, SFX_CAM = 2 };

/* The suffix's output for layer tensor k of rank nd, added to the layer graph when it is not there yet (the graph's
 * plans are dropped then: adding nodes may move the node array they read). */
static cattr_status layer_suffix(cattr_explainer *e, lstate *s, int k, int kind, int nd, int *out) {
    bool sum = e->p.attr_dim_summation != 0, relu = e->p.relu_attributions != 0, mul = e->p.multiply_by_inputs != 0;
    int key = 1 + (kind | nd << 4 | sum << 12 | relu << 13 | mul << 14);
    if (s->sfx_key[k] == key) {
        *out = s->sfx_out[k];
        return CATTR_OK;
    }
    if (kind == SFX_CAM && nd < 2) return cx_fail(CATTR_ERR_SHAPE, "LayerGradCam needs a layer with a dim besides the batch");
    cx_plan_cache_clear(&s->ga.pc);
    cg_graph *g = s->ga.g;
    int act = s->lv[k], grad = s->ga_grad[k], v = grad, in2[2];
    if (kind == SFX_GXA && mul) {
        in2[0] = grad, in2[1] = act;
        v = cg_emit(g, CG_MUL, "__layer_grad_x_act", in2, 2, NULL);
    } else if (kind == SFX_CAM) {
        if (nd > 2) { /* the channel weights: the gradient's mean over the spatial dims */
            cg_attrs a = cg_attrs_default();
            for (int d = 2; d < nd; d++) a.ints[a.n_ints++] = d;
            a.index = 1;
            v = cg_emit(g, CG_REDUCE_MEAN, "__gradcam_weights", &grad, 1, &a);
        }
        in2[0] = v, in2[1] = act;
        v = v < 0 ? -1 : cg_emit(g, CG_MUL, "__gradcam_weighted", in2, 2, NULL);
        if (sum && v >= 0) {
            cg_attrs a = cg_attrs_default();
            a.ints[a.n_ints++] = 1;
            a.index = 1;
            v = cg_emit(g, CG_REDUCE_SUM, "__gradcam_channels", &v, 1, &a);
        }
        if (relu && v >= 0) v = cg_emit(g, CG_RELU, "__gradcam_relu", &v, 1, NULL);
    }
    if (v < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    s->sfx_key[k] = key;
    s->sfx_out[k] = *out = v;
    return CATTR_OK;
}

/* The suffix `kind` of every layer tensor, for the call's inputs: one pass, attr[k] new tensors. */
static cattr_status layer_suffix_pass(cattr_explainer *e, cx_call *c, int kind, cattr_tensor **attr) {
    lstate *s = e->method_state;
    CX_CHECK(ensure_ga(e, s));
    lpass pi;
    cattr_tensor *seed = NULL;
    int outs[CATTR_MAX_OUTPUTS];
    cx_view ov, lv;
    cattr_status st = lp_setup(&s->ga, c, c->x, 1, CX_TILE, &pi);
    for (int k = 0; k < s->n_l && st == CATTR_OK; k++) {
        st = lg_view(e, &s->ga, &pi, s->lv[k], &lv);
        if (st == CATTR_OK) st = layer_suffix(e, s, k, kind, lv.ndim, &outs[k]);
    }
    if (st == CATTR_OK) st = lg_view(e, &s->ga, &pi, cx_model_output(e->m), &ov);
    if (st == CATTR_OK) st = target_seed(c, &ov, 1, CX_TILE, &seed);
    if (st == CATTR_OK) {
        lp_set(&pi, pi.n - 1, seed);
        st = lg_run(e, &s->ga, &pi, outs, s->n_l, attr);
    }
    lp_free(&pi);
    cattr_tensor_free(seed);
    if (st == CATTR_OK) c->n_out = s->n_l;
    return st;
}

static cattr_status layer_gradient_x_activation(cattr_explainer *e, cx_call *c, cattr_tensor **attr,
                                                cattr_tensor **delta) {
    (void)delta;
    return layer_suffix_pass(e, c, SFX_GXA, attr);
}

static cattr_status layer_gradcam(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    return layer_suffix_pass(e, c, SFX_CAM, attr);
}

/* ---- NeuronGradient ------------------------------------------------------------------------------------------ */

static cattr_status neuron_gradient(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    return neuron_pass(e, c, c->x, 1, CX_TILE, attr);
}

/* ---- integrated methods as one derived graph -----------------------------------------------------------------
 * InternalInfluence, LayerConductance, NeuronIntegratedGradients, NeuronConductance and LayerIntegratedGradients run
 * a chunk of path points as one graph on the backend, built like IG's (gradient.c) for the call's ranks (rows r of a
 * chunk are step-major, r = s*B + b; rows[r] = b):
 *   prefix   input-space path (all but LayerIG): p_i = Gather(b_i, rows) + alpha * (Gather(x_i, rows) - Gather(b_i, rows))
 *            LayerIG: the model on x and on the baselines gives the layer values a_k and a0_k; the path is
 *            p_k = Gather(a0_k, rows) + alpha * (Gather(a_k, rows) - Gather(a0_k, rows)), and the model runs on
 *            Gather(x_i, rows) with every use of layer value k reading p_k
 *   gradient InternalInfluence, LayerConductance: of the target w.r.t. the layer values; LayerIG: w.r.t. p_k;
 *            the neuron methods: of the neuron (seeded by the neuron mask over the layer) w.r.t. p_i, NeuronConductance
 *            times dF/dn per row (the target's gradient at the layer, summed over the neuron's positions)
 *   suffix   out = acc + GatherGrad(grad * step, rows, acc) (times (x - b) or (a - a0) for the IG forms with
 *            multiply_by_inputs); LayerConductance: acc + GatherGrad((a[next] - a[cur]) * grad[cur], pair, acc) over the
 *            chunk's consecutive points (chunks share their end points, as Captum's)
 * A call uploads x, b, the additional inputs, the seeds and the schedule (rows, alphas, step sizes, conductance's
 * pairs) once, keeps the accumulators on the backend from chunk to chunk, and downloads the attributions once. */

enum { PK_II = 1, PK_LC, PK_NIG, PK_NC, PK_LIG };

#define LP_MAX_IN (6 * CX_MAX_IN + 4 * CATTR_MAX_OUTPUTS + 8)

struct lpath {
    int kind, n, n_add, n_l, xr[CX_MAX_IN], lr[CATTR_MAX_OUTPUTS]; /* what the graph was built for */
    cattr_dtype dt;
    cg_graph *g;
    cx_consts *consts;
    cx_plan_cache pc;
    int n_in; /* graph inputs, positions below */
    int in_x, in_b, in_add, in_seed, in_nseed, in_rows, in_alpha, in_step, in_acc, in_cur, in_next, in_pair;
    int n_out, outs[CX_MAX_IN > CATTR_MAX_OUTPUTS ? CX_MAX_IN : CATTR_MAX_OUTPUTS];
    cx_dbuf x[CX_MAX_IN], b[CX_MAX_IN], add[CX_MAX_IN], seed, nseed, rows, alpha, step, cur, next, pair;
    cx_dbuf acc[CX_MAX_IN > CATTR_MAX_OUTPUTS ? CX_MAX_IN : CATTR_MAX_OUTPUTS];
};

static void lpath_free(lpath *p) {
    if (!p) return;
    cx_plan_cache_clear(&p->pc);
    cg_free(p->g);
    cx_consts_free(p->consts);
    for (int i = 0; i < CX_MAX_IN; i++) {
        cx_dbuf_free(&p->x[i]);
        cx_dbuf_free(&p->b[i]);
        cx_dbuf_free(&p->add[i]);
    }
    for (size_t k = 0; k < CX_ARRAY_LEN(p->acc); k++) cx_dbuf_free(&p->acc[k]);
    cx_dbuf *one[] = {&p->seed, &p->nseed, &p->rows, &p->alpha, &p->step, &p->cur, &p->next, &p->pair};
    for (size_t k = 0; k < CX_ARRAY_LEN(one); k++) cx_dbuf_free(one[k]);
    free(p);
}


static cattr_status lpath_build(cattr_explainer *e, lstate *s, lpath *p) {
    const cg_graph *m = e->m->g;
    int n = p->n, na = p->n_add, nl = p->n_l, kind = p->kind;
    bool lig = kind == PK_LIG, neuron = kind == PK_NIG || kind == PK_NC, lc = kind == PK_LC;
    int n_acc = neuron ? n : nl, n_step = neuron ? n : nl; /* alpha: per input, LayerIG per layer */
    int n_alpha = lig ? nl : n;
    p->in_x = 0;
    p->in_b = n;
    p->in_add = 2 * n;
    p->in_seed = 2 * n + na;
    p->in_nseed = p->in_seed + 1;
    p->in_rows = p->in_nseed + 1;
    p->in_alpha = p->in_rows + 1;
    p->in_step = p->in_alpha + n_alpha;
    p->in_acc = p->in_step + n_step;
    p->in_cur = p->in_acc + n_acc;
    p->in_next = p->in_cur + 1;
    p->in_pair = p->in_next + 1;
    p->n_in = p->in_pair + 1;
    cg_graph *g = NULL;
    int *map = NULL, *map_x = NULL, *map_b = NULL;
    CX_CHECK(cx_derive_new(m, &g, &map));
    int v[LP_MAX_IN], bad = 0;
    for (int k = 0; k < p->n_in; k++) {
        char nm[32];
        snprintf(nm, sizeof nm, "__lp_in%d", k);
        bad |= (v[k] = cg_add_input(g, nm)) < 0;
    }
    cattr_status st = bad ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : CATTR_OK;
    int rows = v[p->in_rows], in_map[2 * CX_MAX_IN], wrt[CATTR_MAX_OUTPUTS > CX_MAX_IN ? CATTR_MAX_OUTPUTS : CX_MAX_IN];
    int rep_by[CATTR_MAX_OUTPUTS], a[CATTR_MAX_OUTPUTS], a0[CATTR_MAX_OUTPUTS];
    if (st == CATTR_OK && lig) { /* the layer values at x and at the baselines */
        map_x = malloc((size_t)(m->n_vals + 1) * sizeof *map_x);
        map_b = malloc((size_t)(m->n_vals + 1) * sizeof *map_b);
        if (!map_x || !map_b) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        for (int i = 0; i < n + na; i++) in_map[i] = i < n ? v[p->in_x + i] : v[p->in_add + i - n];
        if (st == CATTR_OK) st = cx_graph_append_model(g, m, in_map, map_x);
        for (int i = 0; i < n; i++) in_map[i] = v[p->in_b + i];
        if (st == CATTR_OK) st = cx_graph_append_model(g, m, in_map, map_b);
        for (int k = 0; k < nl && st == CATTR_OK; k++) {
            a[k] = map_x[s->lv[k]];
            a0[k] = map_b[s->lv[k]];
            rep_by[k] = cx_emit_path_point(g, a[k], a0[k], v[p->in_alpha + k], rows);
            if (rep_by[k] < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        }
        for (int i = 0; i < n && st == CATTR_OK; i++)
            if ((in_map[i] = cx_emit2(g, CG_GATHER, "__lp_x_rows", v[p->in_x + i], rows)) < 0)
                st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    } else {
        for (int i = 0; i < n && st == CATTR_OK; i++)
            if ((in_map[i] = cx_emit_path_point(g, v[p->in_x + i], v[p->in_b + i], v[p->in_alpha + i], rows)) < 0)
                st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    for (int j = 0; j < na && st == CATTR_OK; j++)
        if ((in_map[n + j] = cx_emit2(g, CG_GATHER, "__lp_add_rows", v[p->in_add + j], rows)) < 0)
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) st = cx_graph_append_model_replacing(g, m, in_map, lig ? nl : 0, s->lv, rep_by, map);
    int y = st == CATTR_OK ? map[cx_model_output(e->m)] : -1;
    int seed = cx_emit2(g, CG_GATHER, "__lp_seed_rows", v[p->in_seed], rows);
    int grads[CATTR_MAX_OUTPUTS > CX_MAX_IN ? CATTR_MAX_OUTPUTS : CX_MAX_IN];
    cg_rules std;
    cg_rules_default(&std);
    if (st == CATTR_OK && seed < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK && neuron) {
        int nseed = cx_emit2(g, CG_GATHER, "__lp_neuron_rows", v[p->in_nseed], rows);
        st = nseed < 0 ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory")
                       : cg_autodiff(g, map[s->lv[0]], nseed, in_map, n, &std, grads);
        if (st == CATTR_OK && kind == PK_NC) { /* dF/dn per row, broadcast over each input's row */
            int gl = -1;
            st = cg_autodiff(g, y, seed, &map[s->lv[0]], 1, &std, &gl);
            cg_attrs ra = cg_attrs_default();
            for (int d = 1; d < p->lr[0]; d++) ra.ints[ra.n_ints++] = d;
            ra.index = 0;
            int sel = st == CATTR_OK ? cx_emit2(g, CG_MUL, "__lp_neuron_grad", gl, nseed) : -1;
            int mid = sel < 0 ? -1 : p->lr[0] > 1 ? cg_emit(g, CG_REDUCE_SUM, "__lp_dfdn", &sel, 1, &ra) : sel;
            for (int i = 0; i < n && st == CATTR_OK; i++) {
                cg_attrs ua = cg_attrs_default();
                for (int d = 1; d < p->xr[i]; d++) ua.ints[ua.n_ints++] = d;
                int mi = mid < 0 ? -1 : ua.n_ints ? cg_emit(g, CG_UNSQUEEZE, "__lp_dfdn_rows", &mid, 1, &ua) : mid;
                if ((grads[i] = cx_emit2(g, CG_MUL, "__lp_conductance", grads[i], mi)) < 0)
                    st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            }
        }
    } else if (st == CATTR_OK) {
        for (int k = 0; k < nl; k++) wrt[k] = lig ? rep_by[k] : map[s->lv[k]];
        st = cg_autodiff(g, y, seed, wrt, nl, &std, grads);
    }
    p->n_out = n_acc;
    for (int k = 0; k < n_acc && st == CATTR_OK; k++) {
        int acc = v[p->in_acc + k], val;
        if (lc) {
            int act = map[s->lv[k]];
            int d = cx_emit2(g, CG_SUB, "__lp_act_diff", cx_emit2(g, CG_GATHER, "__lp_act_next", act, v[p->in_next]),
                        cx_emit2(g, CG_GATHER, "__lp_act_cur", act, v[p->in_cur]));
            int prod = cx_emit2(g, CG_MUL, "__lp_diff_x_grad", d, cx_emit2(g, CG_GATHER, "__lp_grad_cur", grads[k], v[p->in_cur]));
            int in3[3] = {prod, v[p->in_pair], acc};
            val = prod < 0 ? -1 : cg_emit(g, CG_GATHER_GRAD, "__lp_point_sum", in3, 3, NULL);
        } else {
            int w = cx_emit2(g, CG_MUL, "__lp_weighted", grads[k], v[p->in_step + k]);
            int in3[3] = {w, rows, acc};
            val = w < 0 ? -1 : cg_emit(g, CG_GATHER_GRAD, "__lp_step_sum", in3, 3, NULL);
            if (e->p.multiply_by_inputs && kind != PK_II)
                val = lig ? cx_emit2(g, CG_MUL, "__lp_times_diff", val, cx_emit2(g, CG_SUB, "__lp_a_minus_a0", a[k], a0[k]))
                          : cx_emit2(g, CG_MUL, "__lp_times_diff", val, cx_emit2(g, CG_SUB, "__lp_x_minus_b", v[p->in_x + k], v[p->in_b + k]));
        }
        if ((p->outs[k] = cx_emit2(g, CG_ADD, "__lp_acc_out", acc, val)) < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    free(map);
    free(map_x);
    free(map_b);
    if (st != CATTR_OK) {
        cg_free(g);
        return st;
    }
    p->g = g;
    return CATTR_OK;
}

/* The state for this call: the graph of `kind` for these inputs, layer ranks and dtype (rebuilt when they change). */
static cattr_status lpath_for(cattr_explainer *e, lstate *s, cx_call *c, int kind, const int *lr, lpath **out) {
    lpath *p = s->path;
    bool same = p && p->kind == kind && p->n == c->n && p->n_add == c->n_add && p->dt == c->dt;
    for (int i = 0; same && i < c->n; i++) same = p->xr[i] == c->x[i]->ndim;
    for (int k = 0; same && k < s->n_l; k++) same = p->lr[k] == lr[k];
    if (!same) {
        lpath_free(p);
        s->path = p = calloc(1, sizeof *p);
        if (!p) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        p->kind = kind;
        p->n = c->n;
        p->n_add = c->n_add;
        p->n_l = s->n_l;
        p->dt = c->dt;
        for (int i = 0; i < c->n; i++) p->xr[i] = c->x[i]->ndim;
        for (int k = 0; k < s->n_l; k++) p->lr[k] = lr[k];
        cx_plan_cache_share_arena(&p->pc, e->be);
        cattr_status st = lpath_build(e, s, p);
        if (st == CATTR_OK) st = cx_consts_new(e->be, c->dt, &p->consts);
        if (st != CATTR_OK) {
            lpath_free(p);
            s->path = NULL;
            return st;
        }
    }
    *out = p;
    return CATTR_OK;
}

/* The integrated method `kind` over the call: attr[] new tensors (one per layer tensor, the neuron methods one per
 * input). */
static cattr_status lpath_run(cattr_explainer *e, cx_call *c, int kind, cattr_tensor **attr) {
    lstate *s = e->method_state;
    bool neuron = kind == PK_NIG || kind == PK_NC, lc = kind == PK_LC, lig = kind == PK_LIG;
    int nl = s->n_l, npts = lc ? e->p.n_steps + 1 : e->p.n_steps, chunk = npts;
    int64_t B = c->B;
    size_t es = cattr_dtype_size(c->dt);
    cx_view lv[CATTR_MAX_OUTPUTS], ov;
    int lr[CATTR_MAX_OUTPUTS];
    lpass pi;
    ensure_gf(e, s);
    cattr_status st = lp_setup(&s->gf, c, c->x, 1, CX_TILE, &pi);
    for (int k = 0; k < nl && st == CATTR_OK; k++) {
        st = lg_view(e, &s->gf, &pi, s->lv[k], &lv[k]);
        lr[k] = lv[k].ndim;
        if (st == CATTR_OK && (lv[k].ndim < 1 || lv[k].shape[0] != B))
            st = cx_fail(CATTR_ERR_SHAPE, "the layer has %lld rows; expected the batch (%lld) first",
                         (long long)(lv[k].ndim ? lv[k].shape[0] : 0), (long long)B);
    }
    if (st == CATTR_OK) st = lg_view(e, &s->gf, &pi, cx_model_output(e->m), &ov);
    lp_free(&pi);
    lpath *p = NULL;
    double *alphas = NULL, *steps = NULL;
    cattr_tensor *seed = NULL, *nseed = NULL, *al = NULL, *stp = NULL;
    int64_t *ib = NULL;
    neuron_sel ns = {0};
    if (st == CATTR_OK) st = lpath_for(e, s, c, kind, lr, &p);
    if (st == CATTR_OK) st = quad_points(e, npts, &alphas, &steps);
    if (st == CATTR_OK) st = points_per_chunk(e, c, npts, lc ? 2 : 1, &chunk);
    if (st == CATTR_OK && kind != PK_NIG) st = target_seed(c, &ov, 1, CX_TILE, &seed); /* NeuronIG has no target */
    if (st == CATTR_OK && neuron) st = neuron_select(&e->p, lv[0].ndim, lv[0].shape, &ns);
    if (st == CATTR_OK && neuron) { /* the neuron's mask over one block of the layer */
        nseed = cx_tensor_alloc(c->dt, lv[0].ndim, lv[0].shape);
        if (!nseed) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else {
            memset(nseed->data, 0, (size_t)nseed->numel * es);
            for (int64_t r = 0; r < B; r++)
                for (int64_t q = 0; q < ns.n_sel; q++) cx_tensor_set(nseed, r * ns.per + ns.sel[q], 1.0);
        }
    }
    /* the call and the schedule, uploaded once */
    int64_t all = (int64_t)npts * B, maxr = (int64_t)chunk * B;
    for (int i = 0; i < c->n && st == CATTR_OK; i++) { /* in their dtype: LayerIG takes integer ids too */
        size_t xb = (size_t)c->x[i]->numel * cattr_dtype_size(c->x[i]->dtype);
        st = cx_dbuf_fit(e->be, &p->x[i], xb, c->x[i]->data, false);
        if (st == CATTR_OK) st = cx_dbuf_fit(e->be, &p->b[i], xb, c->base[i]->data, false);
    }
    for (int j = 0; j < c->n_add && st == CATTR_OK; j++)
        st = cx_dbuf_fit(e->be, &p->add[j], (size_t)c->add[j]->numel * cattr_dtype_size(c->add[j]->dtype),
                         c->add[j]->data, false);
    if (st == CATTR_OK && seed) st = cx_dbuf_fit(e->be, &p->seed, (size_t)seed->numel * es, seed->data, false);
    if (st == CATTR_OK && neuron) st = cx_dbuf_fit(e->be, &p->nseed, (size_t)nseed->numel * es, nseed->data, false);
    for (int k = 0; st == CATTR_OK && k < p->n_out; k++) {
        int64_t cnt = neuron ? c->x[k]->numel : cx_view_numel(&lv[k]);
        st = cx_dbuf_fit(e->be, &p->acc[k], (size_t)cnt * es, NULL, true);
    }
    if (st == CATTR_OK) {
        ib = malloc((size_t)(3 * maxr + 1) * sizeof *ib);
        al = cx_tensor_alloc(c->dt, 1, &all);
        stp = cx_tensor_alloc(c->dt, 1, &all);
        if (!ib || !al || !stp) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK) {
        for (int64_t r = 0; r < all; r++) {
            cx_tensor_set(al, r, alphas[r / B]);
            cx_tensor_set(stp, r, steps[r / B]);
        }
        for (int64_t r = 0; r < maxr; r++) ib[r] = r % B;
        st = cx_dbuf_fit(e->be, &p->rows, (size_t)maxr * sizeof *ib, ib, false);
        if (st == CATTR_OK) st = cx_dbuf_fit(e->be, &p->alpha, (size_t)all * es, al->data, false);
        if (st == CATTR_OK) st = cx_dbuf_fit(e->be, &p->step, (size_t)all * es, stp->data, false);
    }
    if (st == CATTR_OK && lc) { /* consecutive points of a chunk: rows q*B + b and (q+1)*B + b, example b */
        int64_t np = maxr - B > 0 ? maxr - B : 1;
        for (int64_t r = 0; r < np; r++) {
            ib[r] = r;
            ib[np + r] = r + B;
            ib[2 * np + r] = r % B;
        }
        st = cx_dbuf_fit(e->be, &p->cur, (size_t)np * sizeof *ib, ib, false);
        if (st == CATTR_OK) st = cx_dbuf_fit(e->be, &p->next, (size_t)np * sizeof *ib, ib + np, false);
        if (st == CATTR_OK) st = cx_dbuf_fit(e->be, &p->pair, (size_t)np * sizeof *ib, ib + 2 * np, false);
    }
    /* a call split into parts (split.c): the chunks are the units, their values the accumulators' chunk sums */
    int acc_nd[CX_ACC_SPLIT_MAX];
    int64_t acc_sh[CX_ACC_SPLIT_MAX][CATTR_MAX_DIMS];
    for (int k = 0; p && k < p->n_out && k < CX_ACC_SPLIT_MAX; k++) {
        acc_nd[k] = neuron ? c->x[k]->ndim : lv[k].ndim;
        memcpy(acc_sh[k], neuron ? c->x[k]->shape : lv[k].shape, sizeof acc_sh[k]);
    }
    int64_t n_units = 0;
    for (int s0 = 0; s0 < (lc ? npts - 1 : npts); n_units++) {
        int s1 = s0 + chunk < npts ? s0 + chunk : npts;
        s0 = lc ? s1 - 1 : s1;
    }
    cx_vsplit v;
    cx_acc_split as;
    memset(&v, 0, sizeof v);
    memset(&as, 0, sizeof as);
    double *vals = NULL;
    if (st == CATTR_OK)
        st = cx_vsplit_begin(e, c, n_units, 1, cx_acc_split_width(p->n_out, acc_nd, (const int64_t(*)[CATTR_MAX_DIMS])acc_sh), &v);
    if (st == CATTR_OK)
        st = cx_acc_split_init(e, &v, p->n_out, acc_nd, (const int64_t(*)[CATTR_MAX_DIMS])acc_sh, c->dt, &as);
    if (st == CATTR_OK && v.mode != CX_VSPLIT_NONE && !(vals = malloc((size_t)(v.n_out + 1) * sizeof *vals)))
        st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    /* the chunks (LayerConductance's share their end points) */
    for (int s0 = 0, q = 0; st == CATTR_OK && s0 < (lc ? npts - 1 : npts); q++) {
        int s1 = s0 + chunk < npts ? s0 + chunk : npts, P = s1 - s0;
        int64_t R = (int64_t)P * B;
        if (!cx_vsplit_mine(&v, q)) { /* another part's chunk; combining: its sums added */
            if (v.mode == CX_VSPLIT_COMBINE) {
                void *accs[CX_ACC_SPLIT_MAX];
                for (int k = 0; k < p->n_out; k++) accs[k] = p->acc[k].p;
                st = cx_acc_split_chunk(e, &v, &as, p->consts, q, accs, vals, 0);
                if (st == CATTR_OK) st = cx_chunk_done(&e->p, lc ? s1 - 1 : s1, lc ? npts - 1 : npts);
            }
            s0 = lc ? s1 - 1 : s1;
            continue;
        }
        int nd[LP_MAX_IN];
        int64_t sh[LP_MAX_IN][CATTR_MAX_DIMS];
        cattr_dtype dt[LP_MAX_IN];
        void *in[LP_MAX_IN], *outp[CX_MAX_IN > CATTR_MAX_OUTPUTS ? CX_MAX_IN : CATTR_MAX_OUTPUTS];
        for (int k = 0; k < p->n_in; k++) { /* stand-ins for the inputs this kind does not read */
            nd[k] = 1;
            sh[k][0] = 1;
            dt[k] = CATTR_INT64;
            in[k] = p->rows.p;
        }
        for (int i = 0; i < c->n; i++) {
            nd[p->in_x + i] = nd[p->in_b + i] = c->x[i]->ndim;
            memcpy(sh[p->in_x + i], c->x[i]->shape, sizeof sh[0]);
            memcpy(sh[p->in_b + i], c->x[i]->shape, sizeof sh[0]);
            dt[p->in_x + i] = dt[p->in_b + i] = c->x[i]->dtype;
            in[p->in_x + i] = p->x[i].p;
            in[p->in_b + i] = p->b[i].p;
        }
        for (int j = 0; j < c->n_add; j++) {
            nd[p->in_add + j] = c->add[j]->ndim;
            memcpy(sh[p->in_add + j], c->add[j]->shape, sizeof sh[0]);
            dt[p->in_add + j] = c->add[j]->dtype;
            in[p->in_add + j] = p->add[j].p;
        }
        if (seed) {
            nd[p->in_seed] = seed->ndim;
            memcpy(sh[p->in_seed], seed->shape, sizeof sh[0]);
            dt[p->in_seed] = c->dt;
            in[p->in_seed] = p->seed.p;
        }
        if (neuron) {
            nd[p->in_nseed] = nseed->ndim;
            memcpy(sh[p->in_nseed], nseed->shape, sizeof sh[0]);
            dt[p->in_nseed] = c->dt;
            in[p->in_nseed] = p->nseed.p;
        }
        sh[p->in_rows][0] = R;
        size_t off = (size_t)s0 * (size_t)B * es;
        int n_alpha = lig ? nl : c->n, n_step = neuron ? c->n : nl;
        for (int k = 0; k < n_alpha; k++) {
            int r = lig ? lr[k] : c->x[k]->ndim, at = p->in_alpha + k;
            nd[at] = r;
            for (int d = 0; d < r; d++) sh[at][d] = d ? 1 : R;
            dt[at] = c->dt;
            in[at] = (char *)p->alpha.p + off;
        }
        for (int k = 0; k < n_step && !lc; k++) {
            int r = neuron ? c->x[k]->ndim : lr[k], at = p->in_step + k;
            nd[at] = r;
            for (int d = 0; d < r; d++) sh[at][d] = d ? 1 : R;
            dt[at] = c->dt;
            in[at] = (char *)p->step.p + off;
        }
        for (int k = 0; k < p->n_out; k++) {
            int at = p->in_acc + k;
            if (neuron) {
                nd[at] = c->x[k]->ndim;
                memcpy(sh[at], c->x[k]->shape, sizeof sh[0]);
            } else {
                nd[at] = lv[k].ndim;
                memcpy(sh[at], lv[k].shape, sizeof sh[0]);
            }
            dt[at] = c->dt;
            in[at] = outp[k] = p->acc[k].p;
            if (v.mode == CX_VSPLIT_PART) { /* the chunk's own sums, from zeros */
                in[at] = as.zero[k].p;
                outp[k] = as.chunk[k].p;
            }
        }
        if (lc) {
            sh[p->in_cur][0] = sh[p->in_next][0] = sh[p->in_pair][0] = R - B;
            in[p->in_cur] = p->cur.p;
            in[p->in_next] = p->next.p;
            in[p->in_pair] = p->pair.p;
        }
        cx_plan *pl = NULL;
        st = cx_plan_cache_get(&p->pc, p->g, p->consts, e->p.executor == CATTR_EXEC_EAGER, nd,
                               (const int64_t(*)[CATTR_MAX_DIMS])sh, dt, p->outs, p->n_out, &pl);
        if (st == CATTR_OK && cx_plan_bytes(pl) > e->peak) e->peak = cx_plan_bytes(pl);
        if (st == CATTR_OK) st = cx_run_plan_dev(e, pl, NULL, in, NULL, outp);
        if (st == CATTR_OK && v.mode == CX_VSPLIT_PART) st = cx_acc_split_chunk(e, &v, &as, p->consts, q, NULL, vals, 0);
        if (st == CATTR_OK) st = cx_chunk_done(&e->p, lc ? s1 - 1 : s1, lc ? npts - 1 : npts);
        s0 = lc ? s1 - 1 : s1;
    }
    st = cx_vsplit_end(&v, st);
    cx_acc_split_free(&as);
    free(vals);
    for (int k = 0; st == CATTR_OK && k < p->n_out; k++) { /* the attributions, down once */
        attr[k] = neuron ? cx_tensor_alloc(c->dt, c->x[k]->ndim, c->x[k]->shape) : cx_tensor_alloc(c->dt, lv[k].ndim, lv[k].shape);
        if (!attr[k]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else st = cx_copy_out(e->be, attr[k]->data, p->acc[k].p, (size_t)attr[k]->numel * es);
    }
    free(alphas);
    free(steps);
    free(ib);
    free(ns.sel);
    cattr_tensor_free(al);
    cattr_tensor_free(stp);
    cattr_tensor_free(seed);
    cattr_tensor_free(nseed);
    if (st != CATTR_OK) {
        for (int k = 0; p && k < p->n_out; k++) {
            cattr_tensor_free(attr[k]);
            attr[k] = NULL;
        }
        return st;
    }
    if (!neuron) c->n_out = nl;
    return CATTR_OK;
}

/* Convergence delta of layer attributions against the input-space endpoints (§1.11): the attributions' sums on the
 * backend, from the path's accumulators (lpath_run leaves them there). */
static cattr_status layer_delta(cattr_explainer *e, cx_call *c, cattr_tensor *const *attr, int n_attr,
                                cattr_tensor **delta) {
    lstate *s = e->method_state;
    void *dev[CATTR_MAX_OUTPUTS];
    for (int k = 0; k < n_attr; k++) dev[k] = s->path->acc[k].p;
    double *sel = malloc((size_t)(2 * c->B + 1) * sizeof *sel);
    if (!sel) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_status st = cx_delta_forward(e, c, c->base, sel);
    if (st == CATTR_OK) st = cx_delta_dev(e, c, n_attr, attr, dev, sel, delta);
    free(sel);
    return st;
}

static cattr_status internal_influence(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    return lpath_run(e, c, PK_II, attr);
}

static cattr_status layer_conductance(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    CX_CHECK(lpath_run(e, c, PK_LC, attr));
    if (delta && e->p.return_convergence_delta) CX_CHECK(layer_delta(e, c, attr, c->n_out, delta));
    return CATTR_OK;
}

static cattr_status neuron_integrated_gradients(cattr_explainer *e, cx_call *c, cattr_tensor **attr,
                                                cattr_tensor **delta) {
    (void)delta;
    return lpath_run(e, c, PK_NIG, attr);
}

static cattr_status neuron_conductance(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    return lpath_run(e, c, PK_NC, attr);
}

static cattr_status layer_integrated_gradients(cattr_explainer *e, cx_call *c, cattr_tensor **attr,
                                               cattr_tensor **delta) {
    CX_CHECK(lpath_run(e, c, PK_LIG, attr));
    if (delta && e->p.return_convergence_delta) CX_CHECK(layer_delta(e, c, attr, c->n_out, delta));
    return CATTR_OK;
}

/* ---- init and the method table ------------------------------------------------------------------------------- */

static bool is_neuron(cattr_method m) {
    return m == CATTR_METHOD_NEURON_GRADIENT || m == CATTR_METHOD_NEURON_INTEGRATED_GRADIENTS ||
           m == CATTR_METHOD_NEURON_CONDUCTANCE;
}

static cattr_status layer_init(cattr_explainer *e) {
    const cattr_attr_params *p = &e->p;
    lstate *s = calloc(1, sizeof *s);
    if (!s) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    e->method_state = s;
    int n = p->n_layers > 0 ? p->n_layers : 1; /* at most CATTR_MAX_OUTPUTS (cx_params_check) */
    for (int k = 0; k < n; k++) {
        const char *name = p->n_layers > 0 ? (p->layers ? p->layers[k] : NULL) : p->layer;
        CX_CHECK(cx_resolve_layer(e, name, p->attribute_to_layer_input != 0, &s->lv[k]));
    }
    s->n_l = n;
    /* the neuron selector's kind and the path methods' n_steps, quadrature and internal_batch_size: cx_params_check */
    if (is_neuron(p->method) && n != 1)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "%s takes a layer of one tensor (n_layers %d given)",
                       e->method->captum, n);
    return CATTR_OK;
}

#define LAYER_METHOD(var, id, cli, captum, fn)                                                                         \
    const cx_method var = {id, cli, captum, false, layer_init, fn, layer_release}

LAYER_METHOD(cx_method_layer_activation, CATTR_METHOD_LAYER_ACTIVATION, "layer-activation", "LayerActivation",
             layer_activation);
LAYER_METHOD(cx_method_layer_gradient_x_activation, CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION,
             "layer-gradient-x-activation", "LayerGradientXActivation", layer_gradient_x_activation);
LAYER_METHOD(cx_method_layer_gradcam, CATTR_METHOD_LAYER_GRADCAM, "layer-gradcam", "LayerGradCam", layer_gradcam);
LAYER_METHOD(cx_method_internal_influence, CATTR_METHOD_INTERNAL_INFLUENCE, "internal-influence", "InternalInfluence",
             internal_influence);
LAYER_METHOD(cx_method_layer_conductance, CATTR_METHOD_LAYER_CONDUCTANCE, "layer-conductance", "LayerConductance",
             layer_conductance);
LAYER_METHOD(cx_method_layer_integrated_gradients, CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS,
             "layer-integrated-gradients", "LayerIntegratedGradients", layer_integrated_gradients);
LAYER_METHOD(cx_method_neuron_gradient, CATTR_METHOD_NEURON_GRADIENT, "neuron-gradient", "NeuronGradient",
             neuron_gradient);
LAYER_METHOD(cx_method_neuron_integrated_gradients, CATTR_METHOD_NEURON_INTEGRATED_GRADIENTS,
             "neuron-integrated-gradients", "NeuronIntegratedGradients", neuron_integrated_gradients);
LAYER_METHOD(cx_method_neuron_conductance, CATTR_METHOD_NEURON_CONDUCTANCE, "neuron-conductance", "NeuronConductance",
             neuron_conductance);
