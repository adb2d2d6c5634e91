/* neuron.c - the neuron forms of the input methods: NeuronGuidedBackprop, NeuronDeconvolution, NeuronDeepLift,
 * NeuronDeepLiftShap, NeuronGradientShap and NeuronFeatureAblation (Captum semantics, shared/reference/captum_spec.md
 * section 4, neuron selectors in 1.8).
 *
 * Each is its input method (GuidedBackprop, Deconvolution, DeepLift, DeepLiftShap, GradientShap, FeatureAblation) on
 * a model derived from the caller's, whose output is the selected neuron: the model graph with the layer value times
 * the selector's 0/1 mask and a ReduceSum over the layer's dims appended, [B, 1], attributed at target 0. So the
 * neuron methods run wherever their input methods run (as derived graphs on the backend, the rules keyed to the
 * model's nodes, which keep their ids), with their draws, chunking and checks. The derived model and the explainer of
 * the input method on it are made at the first call (the mask needs the layer's shape) and kept while the layer's
 * per-example shape stays the same. Captum's NeuronDeepLift and NeuronDeepLiftShap fix eps at 1e-10.
 */
#include "attr/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct nstate {
    int layer;
    cattr_method inner_method;
    int nd;           /* the layer's rank and per-example shape the model was made for (0: none yet) */
    int64_t shape[CATTR_MAX_DIMS];
    cattr_model *nm;
    cattr_explainer *inner;
} nstate;

static void neuron_release(cattr_explainer *e) {
    nstate *s = e->method_state;
    if (!s) return;
    cattr_explainer_free(s->inner);
    cattr_model_free(s->nm);
    free(s);
    e->method_state = NULL;
}

/* Python slice bounds of a dim of size n (step > 0). */
static void slice_bounds(int64_t n, int64_t start, int64_t stop, int64_t *lo, int64_t *hi) {
    if (start < 0) start += n;
    if (start < 0) start = 0;
    if (start > n) start = n;
    if (stop != INT64_MAX && stop < 0) stop += n;
    if (stop < 0) stop = 0;
    if (stop > n) stop = n;
    *lo = start;
    *hi = stop;
}

/* The per-example selection mask (1 on the selected elements) of params' neuron selector over a layer value of
 * shape (ndim, shape) with the batch first. Errors: CATTR_ERR_INVALID_ARGUMENT naming the problem. */
static cattr_status neuron_mask(const cattr_attr_params *p, int ndim, const int64_t *shape, double *mask) {
    int64_t m = cx_numel(ndim - 1, shape + 1);
    char s1[128];
    cx_shape_str(ndim, shape, s1, sizeof s1);
    switch (p->neuron_kind) {
    case CATTR_NEURON_INDEX: {
        /* an index shorter than the layer's dims picks the value at the front when the dims it leaves are of size 1
         * (Captum's output[(slice(None), *index)] of one element per example) */
        int64_t rest = p->neuron_ndim < ndim - 1 ? cx_numel(ndim - 1 - p->neuron_ndim, shape + 1 + p->neuron_ndim) : 1;
        if (p->neuron_ndim > ndim - 1 || p->neuron_ndim < 1 || rest != 1)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "a neuron index of %d entries does not pick one value of a layer "
                                                       "of shape %s (give %d)", p->neuron_ndim, s1, ndim - 1);
        int64_t off = 0;
        for (int d = 0; d < ndim - 1; d++) {
            int64_t n = shape[d + 1], v = d < p->neuron_ndim ? p->neuron_index[d] : 0;
            if (v < 0) v += n;
            if (v < 0 || v >= n)
                return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "neuron index %lld is out of range for dim %d of the layer "
                                                           "of shape %s", (long long)v, d + 1, s1);
            off = off * n + v;
        }
        memset(mask, 0, (size_t)m * sizeof *mask);
        mask[off] = 1;
        return CATTR_OK;
    }
    case CATTR_NEURON_SLICES: {
        if (p->neuron_ndim > ndim - 1 || p->neuron_ndim < 1)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "a neuron selector of %d entries does not fit a layer of shape %s",
                           p->neuron_ndim, s1);
        int64_t lo[CATTR_MAX_DIMS], hi[CATTR_MAX_DIMS], step[CATTR_MAX_DIMS];
        for (int d = 0; d < ndim - 1; d++) {
            int64_t n = shape[d + 1];
            lo[d] = 0, hi[d] = n, step[d] = 1;
            if (d >= p->neuron_ndim) continue;
            if (p->neuron_slice_is_index[d]) {
                int64_t v = p->neuron_slice[d][0];
                if (v < 0) v += n;
                if (v < 0 || v >= n)
                    return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "neuron index %lld is out of range for dim %d of the "
                                                               "layer of shape %s", (long long)p->neuron_slice[d][0],
                                   d + 1, s1);
                lo[d] = v, hi[d] = v + 1;
                continue;
            }
            if (p->neuron_slice[d][2] < 1)
                return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "neuron slice step %lld on dim %d: steps must be positive",
                               (long long)p->neuron_slice[d][2], d + 1);
            slice_bounds(n, p->neuron_slice[d][0], p->neuron_slice[d][1], &lo[d], &hi[d]);
            step[d] = p->neuron_slice[d][2];
        }
        for (int64_t k = 0; k < m; k++) {
            int64_t rem = k;
            bool in = true;
            for (int d = ndim - 2; d >= 0; d--) {
                int64_t v = rem % shape[d + 1];
                rem /= shape[d + 1];
                in &= v >= lo[d] && v < hi[d] && (v - lo[d]) % step[d] == 0;
            }
            mask[k] = in ? 1 : 0;
        }
        return CATTR_OK;
    }
    case CATTR_NEURON_SUM: {
        bool covered[CATTR_MAX_DIMS] = {false};
        for (int k = 0; k < p->neuron_sum_ndim; k++) {
            int64_t d = p->neuron_sum_dims[k];
            if (d < 0) d += ndim;
            if (d < 1 || d >= ndim)
                return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "the neuron selector sums over dim %lld, which is not a "
                                                           "non-batch dim of the layer of shape %s",
                               (long long)p->neuron_sum_dims[k], s1);
            covered[d] = true;
        }
        for (int d = 1; d < ndim; d++)
            if (!covered[d] && shape[d] != 1)
                return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "the neuron selector leaves dim %d of the layer of shape %s: "
                                                           "it must give one value per example", d, s1);
        for (int64_t k = 0; k < m; k++) mask[k] = 1;
        return CATTR_OK;
    }
    case CATTR_NEURON_NONE: break;
    }
    return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "this method needs a neuron selector");
}

static cattr_status neuron_init(cattr_explainer *e) {
    const cattr_attr_params *p = &e->p;
    nstate *s = calloc(1, sizeof *s);
    if (!s) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    e->method_state = s;
    switch (p->method) {
    case CATTR_METHOD_NEURON_GUIDED_BACKPROP: s->inner_method = CATTR_METHOD_GUIDED_BACKPROP; break;
    case CATTR_METHOD_NEURON_DECONVOLUTION: s->inner_method = CATTR_METHOD_DECONVOLUTION; break;
    case CATTR_METHOD_NEURON_DEEPLIFT: s->inner_method = CATTR_METHOD_DEEPLIFT; break;
    case CATTR_METHOD_NEURON_DEEPLIFT_SHAP: s->inner_method = CATTR_METHOD_DEEPLIFT_SHAP; break;
    case CATTR_METHOD_NEURON_GRADIENT_SHAP: s->inner_method = CATTR_METHOD_GRADIENT_SHAP; break;
    default: s->inner_method = CATTR_METHOD_FEATURE_ABLATION; break;
    }
    /* the selector's kind and sizes, eps, n_samples, stdevs, perturbations_per_eval: cx_params_check */
    if (p->n_layers > 1)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "a neuron selector needs a layer with one output tensor (n_layers %d "
                       "given)", p->n_layers);
    const char *name = p->n_layers > 0 ? (p->layers ? p->layers[0] : NULL) : p->layer;
    return cx_resolve_layer(e, name, p->attribute_to_layer_input != 0, &s->layer);
}

/* The model whose output is the neuron, for a layer of rank nd and shape sh, and the input method's explainer on it. */
static cattr_status neuron_model(cattr_explainer *e, nstate *s, int nd, const int64_t *sh) {
    cattr_explainer_free(s->inner);
    cattr_model_free(s->nm);
    s->inner = NULL;
    s->nm = NULL;
    s->nd = 0;
    int64_t msh[CATTR_MAX_DIMS], m = cx_numel(nd - 1, sh + 1);
    memcpy(msh, sh, sizeof msh);
    msh[0] = 1;
    cattr_tensor *mask = cx_tensor_alloc(CATTR_FLOAT64, nd, msh);
    if (!mask) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_status st = neuron_mask(&e->p, nd, sh, (double *)mask->data);
    (void)m;
    if (st == CATTR_OK) st = cx_model_derive(e->m, &s->nm);
    if (st != CATTR_OK) {
        cattr_tensor_free(mask);
        return st;
    }
    cg_graph *g = s->nm->g;
    int mk = cg_add_const(g, "__neuron_mask", mask, true);
    if (mk < 0) {
        cattr_tensor_free(mask);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    int in2[2] = {s->layer, mk};
    int v = cg_add_node(g, CG_MUL, "__neuron_masked", in2, 2, NULL, "__neuron_masked");
    cg_attrs ra = cg_attrs_default(), ua = cg_attrs_default();
    for (int d = 1; d < nd; d++) ra.ints[ra.n_ints++] = d;
    ra.index = 0;
    if (v >= 0 && nd > 1) v = cg_add_node(g, CG_REDUCE_SUM, "__neuron_sum", &v, 1, &ra, "__neuron_sum");
    ua.ints[ua.n_ints++] = 1;
    if (v >= 0) v = cg_add_node(g, CG_UNSQUEEZE, "__neuron", &v, 1, &ua, "__neuron");
    if (v < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    g->outputs[0] = v;
    cattr_attr_params p = cx_inner_params(e, s->inner_method);
    if (p.method == CATTR_METHOD_DEEPLIFT || p.method == CATTR_METHOD_DEEPLIFT_SHAP) p.eps = 1e-10;
    CX_CHECK(cattr_explainer_new(s->nm, &p, &s->inner));
    s->nd = nd;
    memcpy(s->shape, sh, sizeof s->shape);
    return CATTR_OK;
}

static cattr_status neuron_attribute(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    nstate *s = e->method_state;
    /* the layer's shape for this call (a shape-only plan of the model) */
    cx_arg in[2 * CX_MAX_IN];
    for (int k = 0; k < c->n + c->n_add; k++) in[k] = cx_arg_of(k < c->n ? c->x[k] : c->add[k - c->n]);
    cx_job j = cx_job_for(e, e->m->g, e->consts);
    j.eager = true; /* never run: no arena */
    j.n_in = c->n + c->n_add;
    j.in = in;
    j.n_out = 1;
    j.outs = &s->layer;
    cx_view view;
    CX_CHECK(cx_run_view(&j, s->layer, &view));
    const cx_view *lv = &view;
    if (lv->ndim < 1 || lv->shape[0] != c->B)
        return cx_fail(CATTR_ERR_SHAPE, "the layer has %lld rows; expected the batch (%lld) first",
                       (long long)(lv->ndim ? lv->shape[0] : 0), (long long)c->B);
    bool same = s->inner && s->nd == lv->ndim && cx_shape_eq(lv->ndim - 1, lv->shape + 1, s->nd - 1, s->shape + 1);
    if (!same) CX_CHECK(neuron_model(e, s, lv->ndim, lv->shape));
    /* the caller's call, at the neuron (target 0 of the [B, 1] output) */
    static const int64_t zero = 0;
    cattr_target t0 = {CATTR_TARGET_INDEX, 1, 0, &zero};
    cattr_call call = cx_call_rest(c);
    call.target = &t0;
    return cattr_explainer_run(s->inner, &call, attr, NULL);
}

const cx_method cx_method_neuron_deeplift = {CATTR_METHOD_NEURON_DEEPLIFT, false,
                                             neuron_init, neuron_attribute, neuron_release};
const cx_method cx_method_neuron_deeplift_shap = {CATTR_METHOD_NEURON_DEEPLIFT_SHAP, true, neuron_init, neuron_attribute,
                                                  neuron_release};
const cx_method cx_method_neuron_gradient_shap = {CATTR_METHOD_NEURON_GRADIENT_SHAP, true, neuron_init, neuron_attribute,
                                                  neuron_release};
const cx_method cx_method_neuron_guided_backprop = {CATTR_METHOD_NEURON_GUIDED_BACKPROP, false, neuron_init, neuron_attribute,
                                                    neuron_release};
const cx_method cx_method_neuron_deconvolution = {CATTR_METHOD_NEURON_DECONVOLUTION, false, neuron_init, neuron_attribute,
                                                  neuron_release};
const cx_method cx_method_neuron_feature_ablation = {CATTR_METHOD_NEURON_FEATURE_ABLATION, false, neuron_init, neuron_attribute,
                                                     neuron_release};
