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
 *   - the path graph (lpath, layer_path.c) of the integrated methods: the path points made from x, the baselines and
 *     the schedule, the gradient, and the weighted sum over the steps into accumulators kept on the backend.
 * Step sizes are float32 in every dtype and the alphas are cast to the compute dtype (as IntegratedGradients in
 * integrated_gradients.c); the sums over the steps are exact sums rounded once (GatherGrad).
 */
#include "attr/layer_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* ---- graphs and their plans ------------------------------------------------------------------------------------ */





static void lgraph_free(lgraph *lg) {
    if (lg->owned) cg_free(lg->g);
    memset(lg, 0, sizeof *lg);
}

static void layer_release(cattr_explainer *e) {
    lstate *s = e->method_state;
    if (!s) return;
    lgraph_free(&s->gf);
    lgraph_free(&s->ga);
    lgraph_free(&s->gn);
    cx_lg_lpath_free(s->path);
    free(s);
    e->method_state = NULL;
}


void cx_lg_lp_free(lpass *pi) {
    for (int i = 0; i < LG_MAX_IN; i++) cattr_tensor_free(pi->tmp[i]);
}

cattr_status cx_lg_lp_setup(const lgraph *lg, const cx_call *c, cattr_tensor *const *xs, int64_t reps,
                             cx_expand how, lpass *pi) {
    memset(pi, 0, sizeof *pi);
    pi->n = lg->g->n_inputs;
    if (pi->n > LG_MAX_IN) return cx_fail(CATTR_ERR_UNSUPPORTED, "too many graph inputs (%d)", pi->n);
    for (int i = 0; i < pi->n; i++) pi->in[i].dt = c->dt;
    for (int i = 0; i < c->n; i++) pi->in[i] = cx_arg_of(xs[i]);
    for (int j = 0; j < c->n_add; j++) {
        const cattr_tensor *a = c->add[j];
        if (reps != 1) {
            pi->tmp[c->n + j] = cx_expand_rows(a, reps, how);
            if (!pi->tmp[c->n + j]) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            a = pi->tmp[c->n + j];
        }
        pi->in[c->n + j] = cx_arg_of(a);
    }
    return CATTR_OK;
}

/* The run of outs[0..n_outs) of lg for these inputs. */
static cx_job lg_job(cattr_explainer *e, lgraph *lg, const lpass *pi, const int *outs, int n_outs) {
    cx_job j = cx_job_for(e, lg->g, e->consts);
    j.plans = LG_CACHE;
    j.n_in = pi->n;
    j.in = pi->in;
    j.n_out = n_outs;
    j.outs = outs;
    return j;
}

/* The inferred view of value v for these inputs (from a shape plan of v alone). */
cattr_status cx_lg_lg_view(cattr_explainer *e, lgraph *lg, const lpass *pi, int v, cx_view *view) {
    cx_job j = lg_job(e, lg, pi, &v, 1);
    return cx_run_view(&j, v, view);
}

/* Runs outs[0..n_outs) of lg; res[k] are new tensors. */
static cattr_status lg_run(cattr_explainer *e, lgraph *lg, const lpass *pi, const int *outs, int n_outs,
                           cattr_tensor **res) {
    void *dst[LG_MAX_OUT];
    cattr_status st = CATTR_OK;
    for (int k = 0; k < n_outs; k++) res[k] = NULL;
    cx_job j = lg_job(e, lg, pi, outs, n_outs);
    for (int k = 0; k < n_outs && st == CATTR_OK; k++) {
        cx_view v;
        st = cx_run_view(&j, outs[k], &v);
        if (st == CATTR_OK && !(res[k] = cx_tensor_alloc(v.dtype, v.ndim, v.shape)))
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK) dst[k] = res[k]->data;
    }
    j.out_host = dst;
    if (st == CATTR_OK) st = cx_run(&j);
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

void cx_lg_ensure_gf(cattr_explainer *e, lstate *s) {
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
cattr_status cx_lg_target_seed(const cx_call *c, const cx_view *ov, int64_t reps, cx_expand how,
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


cattr_status cx_lg_neuron_select(const cattr_attr_params *p, int nd, const int64_t *sh, neuron_sel *ns) {
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
        cx_lg_ensure_gf(e, s);
    }
    lpass pi;
    cattr_tensor *seed = NULL, *res[LG_MAX_OUT] = {0};
    int outs[LG_MAX_OUT];
    cattr_status st = cx_lg_lp_setup(lg, c, xs, reps, how, &pi);
    if (st == CATTR_OK && want_grad) {
        cx_view ov;
        st = cx_lg_lg_view(e, lg, &pi, cx_model_output(e->m), &ov);
        if (st == CATTR_OK) st = cx_lg_target_seed(c, &ov, reps, how, &seed);
        if (st == CATTR_OK) pi.in[pi.n - 1] = cx_arg_of(seed);
    }
    for (int k = 0; k < s->n_l; k++) {
        outs[k] = s->lv[k];
        outs[s->n_l + k] = s->ga_grad[k];
    }
    if (st == CATTR_OK) st = lg_run(e, lg, &pi, outs, want_grad ? 2 * s->n_l : s->n_l, res);
    cx_lg_lp_free(&pi);
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
    cattr_status st = cx_lg_lp_setup(&s->gn, c, xs, reps, how, &pi);
    if (st == CATTR_OK) st = cx_lg_lg_view(e, &s->gn, &pi, s->lv[0], &lv);
    if (st == CATTR_OK && (lv.ndim < 1 || lv.shape[0] != reps * c->B))
        st = cx_fail(CATTR_ERR_SHAPE, "the layer has %lld rows; expected the batch (%lld) first",
                     (long long)(lv.ndim ? lv.shape[0] : 0), (long long)(reps * c->B));
    if (st == CATTR_OK) st = cx_lg_neuron_select(&e->p, lv.ndim, lv.shape, &ns);
    if (st == CATTR_OK) {
        seed = cx_tensor_alloc(c->dt, lv.ndim, lv.shape);
        if (!seed) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK) {
        memset(seed->data, 0, (size_t)seed->numel * cattr_dtype_size(c->dt));
        for (int64_t r = 0; r < lv.shape[0]; r++)
            for (int64_t q = 0; q < ns.n_sel; q++) cx_tensor_set(seed, r * ns.per + ns.sel[q], 1.0);
        pi.in[pi.n - 1] = cx_arg_of(seed);
        st = lg_run(e, &s->gn, &pi, s->gn_grad, c->n, gx);
    }
    free(ns.sel);
    cx_lg_lp_free(&pi);
    cattr_tensor_free(seed);
    return st;
}

/* ---- integration paths ---------------------------------------------------------------------------------------- */

/* Captum's points for n steps: alphas cast to the compute dtype, step sizes to float32 (in every dtype). */
cattr_status cx_lg_quad_points(const cattr_explainer *e, int n, double **alphas, double **steps) {
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
cattr_status cx_lg_points_per_chunk(cattr_explainer *e, cx_call *c, int n, int min, int *out) {
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
    cattr_status st = cx_lg_lp_setup(&s->ga, c, c->x, 1, CX_TILE, &pi);
    for (int k = 0; k < s->n_l && st == CATTR_OK; k++) {
        st = cx_lg_lg_view(e, &s->ga, &pi, s->lv[k], &lv);
        if (st == CATTR_OK) st = layer_suffix(e, s, k, kind, lv.ndim, &outs[k]);
    }
    if (st == CATTR_OK) st = cx_lg_lg_view(e, &s->ga, &pi, cx_model_output(e->m), &ov);
    if (st == CATTR_OK) st = cx_lg_target_seed(c, &ov, 1, CX_TILE, &seed);
    if (st == CATTR_OK) {
        pi.in[pi.n - 1] = cx_arg_of(seed);
        st = lg_run(e, &s->ga, &pi, outs, s->n_l, attr);
    }
    cx_lg_lp_free(&pi);
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
                       cx_method_captum_name(e->method->id), n);
    return CATTR_OK;
}

#define LAYER_METHOD(var, id, fn) const cx_method var = {id, false, layer_init, fn, layer_release}

LAYER_METHOD(cx_method_layer_activation, CATTR_METHOD_LAYER_ACTIVATION, layer_activation);
LAYER_METHOD(cx_method_layer_gradient_x_activation, CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION, layer_gradient_x_activation);
LAYER_METHOD(cx_method_layer_gradcam, CATTR_METHOD_LAYER_GRADCAM, layer_gradcam);
LAYER_METHOD(cx_method_internal_influence, CATTR_METHOD_INTERNAL_INFLUENCE, cx_lg_internal_influence);
LAYER_METHOD(cx_method_layer_conductance, CATTR_METHOD_LAYER_CONDUCTANCE, cx_lg_layer_conductance);
LAYER_METHOD(cx_method_layer_integrated_gradients, CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS, cx_lg_layer_integrated_gradients);
LAYER_METHOD(cx_method_neuron_gradient, CATTR_METHOD_NEURON_GRADIENT, neuron_gradient);
LAYER_METHOD(cx_method_neuron_integrated_gradients, CATTR_METHOD_NEURON_INTEGRATED_GRADIENTS, cx_lg_neuron_integrated_gradients);
LAYER_METHOD(cx_method_neuron_conductance, CATTR_METHOD_NEURON_CONDUCTANCE, cx_lg_neuron_conductance);

