/* explainer.c - the explainer: method dispatch, call preparation, plan caching, and the batched gradient and
 * forward passes that every attribution method is built from (see internal.h).
 *
 * One explainer holds the model's gradient graph (the forward graph, a seed input and the autodiff nodes for the
 * attributed inputs, under the method's backward rules), the constants uploaded in the compute dtype, and a small
 * cache of plans keyed by input shapes. Everything a call needs (batched inputs, expanded additional inputs, the
 * target mask that seeds the backward pass) is built as whole tensors and run as one batched pass per chunk.
 */
#include "attr/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdatomic.h>
#include <time.h>

#define MAX_IN CX_MAX_IN

const cx_method *const cx_methods[CATTR_METHOD_COUNT] = {
    [CATTR_METHOD_SALIENCY] = &cx_method_saliency,
    [CATTR_METHOD_INPUT_X_GRADIENT] = &cx_method_input_x_gradient,
    [CATTR_METHOD_INTEGRATED_GRADIENTS] = &cx_method_integrated_gradients,
    [CATTR_METHOD_GUIDED_GRADCAM] = &cx_method_guided_gradcam,
    [CATTR_METHOD_LAYER_ACTIVATION] = &cx_method_layer_activation,
    [CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION] = &cx_method_layer_gradient_x_activation,
    [CATTR_METHOD_LAYER_GRADCAM] = &cx_method_layer_gradcam,
    [CATTR_METHOD_INTERNAL_INFLUENCE] = &cx_method_internal_influence,
    [CATTR_METHOD_LAYER_CONDUCTANCE] = &cx_method_layer_conductance,
    [CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS] = &cx_method_layer_integrated_gradients,
    [CATTR_METHOD_NEURON_GRADIENT] = &cx_method_neuron_gradient,
    [CATTR_METHOD_NEURON_INTEGRATED_GRADIENTS] = &cx_method_neuron_integrated_gradients,
    [CATTR_METHOD_NEURON_CONDUCTANCE] = &cx_method_neuron_conductance,
    [CATTR_METHOD_LAYER_DEEPLIFT] = &cx_method_layer_deeplift,
    [CATTR_METHOD_LAYER_DEEPLIFT_SHAP] = &cx_method_layer_deeplift_shap,
    [CATTR_METHOD_LAYER_GRADIENT_SHAP] = &cx_method_layer_gradient_shap,
    [CATTR_METHOD_LAYER_FEATURE_ABLATION] = &cx_method_layer_feature_ablation,
    [CATTR_METHOD_LAYER_FEATURE_PERMUTATION] = &cx_method_layer_feature_permutation,
    [CATTR_METHOD_LAYER_LRP] = &cx_method_layer_lrp,
    [CATTR_METHOD_NEURON_DEEPLIFT] = &cx_method_neuron_deeplift,
    [CATTR_METHOD_NEURON_DEEPLIFT_SHAP] = &cx_method_neuron_deeplift_shap,
    [CATTR_METHOD_NEURON_GRADIENT_SHAP] = &cx_method_neuron_gradient_shap,
    [CATTR_METHOD_NEURON_GUIDED_BACKPROP] = &cx_method_neuron_guided_backprop,
    [CATTR_METHOD_NEURON_DECONVOLUTION] = &cx_method_neuron_deconvolution,
    [CATTR_METHOD_NEURON_FEATURE_ABLATION] = &cx_method_neuron_feature_ablation,
    [CATTR_METHOD_FEATURE_ABLATION] = &cx_method_feature_ablation,
    [CATTR_METHOD_FEATURE_PERMUTATION] = &cx_method_feature_permutation,
    [CATTR_METHOD_OCCLUSION] = &cx_method_occlusion,
    [CATTR_METHOD_SHAPLEY_VALUE_SAMPLING] = &cx_method_shapley_value_sampling,
    [CATTR_METHOD_SHAPLEY_VALUES] = &cx_method_shapley_values,
    [CATTR_METHOD_DEEPLIFT] = &cx_method_deeplift,
    [CATTR_METHOD_DEEPLIFT_SHAP] = &cx_method_deeplift_shap,
    [CATTR_METHOD_GUIDED_BACKPROP] = &cx_method_guided_backprop,
    [CATTR_METHOD_DECONVOLUTION] = &cx_method_deconvolution,
    [CATTR_METHOD_LRP] = &cx_method_lrp,
    [CATTR_METHOD_LIME] = &cx_method_lime,
    [CATTR_METHOD_KERNEL_SHAP] = &cx_method_kernel_shap,
    [CATTR_METHOD_GRADIENT_SHAP] = &cx_method_gradient_shap,
};

/* ---- names and defaults ------------------------------------------------------------------------------------ */

static const struct {
    cattr_method m;
    const char *cli, *captum;
} method_names[] = {
    {CATTR_METHOD_SALIENCY, "saliency", "Saliency"},
    {CATTR_METHOD_INPUT_X_GRADIENT, "input-x-gradient", "InputXGradient"},
    {CATTR_METHOD_INTEGRATED_GRADIENTS, "integrated-gradients", "IntegratedGradients"},
    {CATTR_METHOD_DEEPLIFT, "deeplift", "DeepLift"},
    {CATTR_METHOD_DEEPLIFT_SHAP, "deeplift-shap", "DeepLiftShap"},
    {CATTR_METHOD_GUIDED_BACKPROP, "guided-backprop", "GuidedBackprop"},
    {CATTR_METHOD_DECONVOLUTION, "deconvolution", "Deconvolution"},
    {CATTR_METHOD_GUIDED_GRADCAM, "guided-gradcam", "GuidedGradCam"},
    {CATTR_METHOD_LRP, "lrp", "LRP"},
    {CATTR_METHOD_GRADIENT_SHAP, "gradient-shap", "GradientShap"},
    {CATTR_METHOD_FEATURE_ABLATION, "feature-ablation", "FeatureAblation"},
    {CATTR_METHOD_FEATURE_PERMUTATION, "feature-permutation", "FeaturePermutation"},
    {CATTR_METHOD_OCCLUSION, "occlusion", "Occlusion"},
    {CATTR_METHOD_SHAPLEY_VALUE_SAMPLING, "shapley-value-sampling", "ShapleyValueSampling"},
    {CATTR_METHOD_SHAPLEY_VALUES, "shapley-values", "ShapleyValues"},
    {CATTR_METHOD_LIME, "lime", "Lime"},
    {CATTR_METHOD_KERNEL_SHAP, "kernel-shap", "KernelShap"},
    {CATTR_METHOD_LAYER_ACTIVATION, "layer-activation", "LayerActivation"},
    {CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION, "layer-gradient-x-activation", "LayerGradientXActivation"},
    {CATTR_METHOD_LAYER_GRADCAM, "layer-gradcam", "LayerGradCam"},
    {CATTR_METHOD_INTERNAL_INFLUENCE, "internal-influence", "InternalInfluence"},
    {CATTR_METHOD_LAYER_CONDUCTANCE, "layer-conductance", "LayerConductance"},
    {CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS, "layer-integrated-gradients", "LayerIntegratedGradients"},
    {CATTR_METHOD_LAYER_DEEPLIFT, "layer-deeplift", "LayerDeepLift"},
    {CATTR_METHOD_LAYER_DEEPLIFT_SHAP, "layer-deeplift-shap", "LayerDeepLiftShap"},
    {CATTR_METHOD_LAYER_GRADIENT_SHAP, "layer-gradient-shap", "LayerGradientShap"},
    {CATTR_METHOD_LAYER_FEATURE_ABLATION, "layer-feature-ablation", "LayerFeatureAblation"},
    {CATTR_METHOD_LAYER_FEATURE_PERMUTATION, "layer-feature-permutation", "LayerFeaturePermutation"},
    {CATTR_METHOD_LAYER_LRP, "layer-lrp", "LayerLRP"},
    {CATTR_METHOD_NEURON_GRADIENT, "neuron-gradient", "NeuronGradient"},
    {CATTR_METHOD_NEURON_INTEGRATED_GRADIENTS, "neuron-integrated-gradients", "NeuronIntegratedGradients"},
    {CATTR_METHOD_NEURON_CONDUCTANCE, "neuron-conductance", "NeuronConductance"},
    {CATTR_METHOD_NEURON_DEEPLIFT, "neuron-deeplift", "NeuronDeepLift"},
    {CATTR_METHOD_NEURON_DEEPLIFT_SHAP, "neuron-deeplift-shap", "NeuronDeepLiftShap"},
    {CATTR_METHOD_NEURON_GRADIENT_SHAP, "neuron-gradient-shap", "NeuronGradientShap"},
    {CATTR_METHOD_NEURON_GUIDED_BACKPROP, "neuron-guided-backprop", "NeuronGuidedBackprop"},
    {CATTR_METHOD_NEURON_DECONVOLUTION, "neuron-deconvolution", "NeuronDeconvolution"},
    {CATTR_METHOD_NEURON_FEATURE_ABLATION, "neuron-feature-ablation", "NeuronFeatureAblation"},
};
_Static_assert(sizeof method_names / sizeof method_names[0] == CATTR_METHOD_COUNT, "method_names out of step");

int cattr_method_from_name(const char *s) {
    if (!s) return -1;
    for (size_t i = 0; i < CATTR_METHOD_COUNT; i++) {
        if (!strcmp(s, method_names[i].cli) || !strcmp(s, method_names[i].captum)) return (int)method_names[i].m;
        /* also accept underscores for dashes */
        const char *a = s, *b = method_names[i].cli;
        while (*a && *b && (*a == *b || (*a == '_' && *b == '-'))) a++, b++;
        if (!*a && !*b) return (int)method_names[i].m;
    }
    if (!strcmp(s, "ig")) return CATTR_METHOD_INTEGRATED_GRADIENTS;
    return -1;
}

const char *cattr_method_name(cattr_method m) {
    return m >= 0 && m < CATTR_METHOD_COUNT ? method_names[m].cli : "?";
}

int cattr_method_implemented(cattr_method m) {
    return m >= 0 && m < CATTR_METHOD_COUNT && cx_methods[m] != NULL && cx_methods[m]->attribute != NULL;
}

cattr_attr_params cattr_attr_default_params(cattr_method method) {
    cattr_attr_params p;
    memset(&p, 0, sizeof p);
    p.method = method;
    p.dtype = CATTR_FLOAT32;
    p.n_steps = 50;
    p.quadrature = CATTR_QUAD_GAUSS_LEGENDRE;
    p.multiply_by_inputs = 1;
    p.abs = 1;
    p.return_convergence_delta = 1;
    p.executor = CATTR_EXEC_PLANNED;
    p.check_finite = 1;
    p.eps = 1e-10;
    p.n_samples = method == CATTR_METHOD_GRADIENT_SHAP ? 5 : 25;
    p.stdevs = method == CATTR_METHOD_GRADIENT_SHAP ? 0.0 : 1.0;
    p.nt_samples = 5;
    p.lime_alpha = 0.01;
    p.kernel_width = 1.0;
    p.attr_dim_summation = 1;
    if (method == CATTR_METHOD_NEURON_CONDUCTANCE) p.quadrature = CATTR_QUAD_RIEMANN_TRAPEZOID;
    if (method == CATTR_METHOD_LAYER_GRADIENT_SHAP || method == CATTR_METHOD_NEURON_GRADIENT_SHAP) {
        p.n_samples = 5;
        p.stdevs = 0.0;
    }
    return p;
}

/* ---- lifetime ---------------------------------------------------------------------------------------------- */

cattr_status cattr_explainer_new(const cattr_model *model, const cattr_attr_params *params, cattr_explainer **out) {
    if (!out) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    if (!model || !params) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "model and params are required");
    const cattr_attr_params *p = params;
    if (p->method < 0 || p->method >= CATTR_METHOD_COUNT)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "unknown method %d", (int)p->method);
    if (!cattr_method_implemented(p->method))
        return cx_fail(CATTR_ERR_UNSUPPORTED, "method %s is not implemented yet", cattr_method_name(p->method));
    if (p->dtype != CATTR_FLOAT32 && p->dtype != CATTR_FLOAT64)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "dtype must be float32 or float64");
    if (p->nt_type != CATTR_NT_NONE && !cx_noise_tunnel)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "NoiseTunnel is not implemented yet");
    cattr_explainer *e = calloc(1, sizeof *e);
    if (!e) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    e->m = model;
    e->p = *p;
    e->method = cx_methods[p->method];
    cg_rules_default(&e->rules);
    cattr_status st = p->device ? cx_backend_by_name(p->device, &e->be) : cx_model_backend(model, &e->be);
    e->p.device = NULL; /* borrowed for this call only; e->be keeps the choice */
    if (st == CATTR_OK && e->method->init) st = e->method->init(e);
    if (st == CATTR_OK) st = cx_consts_new(e->be, p->dtype, &e->consts);
    if (st != CATTR_OK) {
        cattr_explainer_free(e);
        return st;
    }
    *out = e;
    return CATTR_OK;
}

static void drop_plans(cattr_explainer *e) {
    for (int i = 0; i < CX_PLAN_CACHE; i++) {
        cx_plan_free(e->plans[i]);
        cx_plan_free(e->plans2[i]);
        cx_plan_free(e->fwd[i]);
        e->plans[i] = e->plans2[i] = e->fwd[i] = NULL;
    }
    for (int s = 0; s < 2 && e->be; s++) {
        e->be->free(e->be->ctx, e->arena[s], e->arena_bytes[s]);
        e->arena[s] = NULL;
        e->arena_bytes[s] = 0;
    }
}

static void drop_layer_graph(cattr_explainer *e) {
    for (int i = 0; i < CX_PLAN_CACHE; i++) {
        cx_plan_free(e->lplans[i]);
        e->lplans[i] = NULL;
    }
    cg_free(e->lg);
    e->lg = NULL;
}

void cattr_explainer_free(cattr_explainer *e) {
    if (!e) return;
    if (e->method && e->method->release) e->method->release(e);
    drop_plans(e);
    drop_layer_graph(e);
    cg_free(e->g);
    cx_consts_free(e->consts);
    free(e->alphas);
    free(e->steps);
    free(e->fx);
    free(e);
}

size_t cattr_explainer_peak_memory(const cattr_explainer *e) { return e ? e->peak : 0; }

/* Builds the gradient graph for the first n_attr model inputs under the method's rules. */
static cattr_status build_graph(cattr_explainer *e, int n_attr) {
    if (e->g && e->n_attr == n_attr) return CATTR_OK;
    drop_plans(e);
    cg_free(e->g);
    e->g = cg_clone(e->m->g);
    if (!e->g) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    int seed = cg_add_input(e->g, "__cattr_seed__");
    if (seed < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    e->seed_input = e->g->n_inputs - 1;
    CX_CHECK(cg_autodiff(e->g, cx_model_output(e->m), seed, e->g->inputs, n_attr, &e->rules, e->grads));
    e->n_attr = n_attr;
    return CATTR_OK;
}

/* Returns a cached plan for these input shapes, or makes one (evicting round-robin). */
static cattr_status get_plan_slot(cattr_explainer *e, bool fwd, int slot, const int *nd,
                                  const int64_t (*sh)[CATTR_MAX_DIMS], const cattr_dtype *dt, cx_plan **out) {
    cx_plan **cache = fwd ? e->fwd : slot ? e->plans2 : e->plans;
    int *next = fwd ? &e->fwd_next : slot ? &e->plan2_next : &e->plan_next;
    for (int i = 0; i < CX_PLAN_CACHE; i++)
        if (cache[i] && cx_plan_matches(cache[i], nd, sh, dt)) {
            *out = cache[i];
            return CATTR_OK;
        }
    int outs[MAX_IN], n_outs;
    if (fwd) {
        outs[0] = cx_model_output(e->m);
        n_outs = 1;
    } else {
        memcpy(outs, e->grads, (size_t)e->n_attr * sizeof(int));
        n_outs = e->n_attr;
    }
    cx_plan *p;
    CX_CHECK(cx_plan_new(e->g, e->consts, e->p.executor == CATTR_EXEC_EAGER, nd, sh, dt, outs, n_outs, &p));
    cx_plan_free(cache[*next]);
    cache[*next] = p;
    *next = (*next + 1) % CX_PLAN_CACHE;
    size_t b = cx_plan_bytes(p);
    if (b > e->peak) e->peak = b;
    cx_log(CATTR_LOG_DEBUG, "%s plan: %.1f MiB of activations", fwd ? "forward" : "gradient", (double)b / 1048576.0);
    *out = p;
    return CATTR_OK;
}

static cattr_status get_plan(cattr_explainer *e, bool fwd, const int *nd, const int64_t (*sh)[CATTR_MAX_DIMS],
                             const cattr_dtype *dt, cx_plan **out) {
    return get_plan_slot(e, fwd, 0, nd, sh, dt, out);
}

/* ---- validation ------------------------------------------------------------------------------------------- */

static cattr_status check_finite(const cattr_tensor *t, const char *what, int i) {
    for (int64_t k = 0; k < t->numel; k++) {
        double v = cx_tensor_get(t, k);
        if (!isfinite(v))
            return cx_fail(CATTR_ERR_NONFINITE, "%s %d has a non-finite value (%g) at flat index %lld", what, i, v,
                           (long long)k);
    }
    return CATTR_OK;
}

/* Selection mask over one example-block of the output (shape osh, osh[0] = B): 1 where the target picks. */
static cattr_status target_mask(const cattr_target *t, int ond, const int64_t *osh, double *mask) {
    int64_t B = osh[0], per = cx_numel(ond - 1, osh + 1);
    char sh[128];
    memset(mask, 0, (size_t)(B * per) * sizeof *mask);
    cattr_target_kind kind = t ? t->kind : CATTR_TARGET_NONE;
    if (kind == CATTR_TARGET_NONE) {
        if (per != 1)
            return cx_fail(CATTR_ERR_TARGET,
                           "the output has shape %s: give a target that selects one value per example",
                           cx_shape_str(ond, osh, sh, sizeof sh));
        for (int64_t b = 0; b < B; b++) mask[b] = 1;
        return CATTR_OK;
    }
    if (t->n_idx < 0 || t->n_idx > ond - 1 || (t->n_idx > 0 && !t->idx))
        return cx_fail(CATTR_ERR_TARGET, "a target of %d indices does not fit an output of shape %s", t->n_idx,
                       cx_shape_str(ond, osh, sh, sizeof sh));
    if (cx_numel(ond - 1 - t->n_idx, osh + 1 + t->n_idx) != 1)
        return cx_fail(CATTR_ERR_TARGET,
                       "a target of %d indices leaves more than one value per example of an output of shape %s",
                       t->n_idx, cx_shape_str(ond, osh, sh, sizeof sh));
    if (kind == CATTR_TARGET_PER_EXAMPLE && t->n_rows != B)
        return cx_fail(CATTR_ERR_TARGET, "%lld per-example targets given for a batch of %lld", (long long)t->n_rows,
                       (long long)B);
    for (int64_t b = 0; b < B; b++) {
        const int64_t *ix = kind == CATTR_TARGET_PER_EXAMPLE ? t->idx + b * t->n_idx : t->idx;
        int64_t off = 0;
        for (int k = 0; k < t->n_idx; k++) {
            int64_t d = osh[1 + k], v = ix[k];
            if (v < 0 && kind == CATTR_TARGET_INDEX) v += d;
            if (v < 0 || v >= d)
                return cx_fail(CATTR_ERR_TARGET, "target index %lld is out of range for dim %d of size %lld%s",
                               (long long)ix[k], k + 1, (long long)d,
                               kind == CATTR_TARGET_PER_EXAMPLE ? " (per-example target)" : "");
            off = off * d + v;
        }
        mask[b * per + off] = 1;
    }
    return CATTR_OK;
}

/* ---- call preparation ---------------------------------------------------------------------------------------- */

static void call_free(cx_call *c) {
    for (int i = 0; i < MAX_IN; i++) {
        cattr_tensor_free(c->x[i]);
        cattr_tensor_free(c->base[i]);
        cattr_tensor_free(c->dist[i]);
        cattr_tensor_free(c->add[i]);
    }
}

static cattr_status to_dtype(const cattr_tensor *t, cattr_dtype dt, cattr_tensor **out) {
    return cattr_tensor_convert(t, dt, out);
}

cattr_tensor *cx_expand_rows(const cattr_tensor *t, int64_t reps, cx_expand how) {
    int64_t sh[CATTR_MAX_DIMS];
    memcpy(sh, t->shape, sizeof sh);
    int64_t B = t->ndim ? t->shape[0] : 1;
    if (t->ndim) sh[0] *= reps;
    cattr_tensor *o = cx_tensor_alloc(t->dtype, t->ndim, sh);
    if (!o) return NULL;
    size_t bytes = (size_t)t->numel * cattr_dtype_size(t->dtype), row = B ? bytes / (size_t)B : 0;
    if (how == CX_TILE || B <= 1) {
        for (int64_t r = 0; r < reps; r++) memcpy((char *)o->data + (size_t)r * bytes, t->data, bytes);
    } else {
        for (int64_t b = 0; b < B; b++)
            for (int64_t r = 0; r < reps; r++)
                memcpy((char *)o->data + (size_t)(b * reps + r) * row, (const char *)t->data + (size_t)b * row, row);
    }
    return o;
}

static cattr_status prepare(cattr_explainer *e, const cattr_call *call, cx_call *c) {
    const cattr_tensor *const *inputs = call->inputs, *const *baselines = call->baselines;
    const cattr_tensor *const *additional = call->additional;
    int n_inputs = call->n_inputs, n_additional = call->n_additional;
    const cg_graph *mg = e->m->g;
    cattr_dtype dt = e->p.dtype;
    char s1[128], s2[128];
    memset(c, 0, sizeof *c);
    c->dt = dt;
    c->target = call->target;
    c->user = call;
    if (n_inputs > CATTR_MAX_INPUTS) return cx_fail(CATTR_ERR_UNSUPPORTED, "more than %d attributed inputs", CATTR_MAX_INPUTS);
    if (n_inputs < 1 || !inputs) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "at least one input is required");
    if (n_inputs + n_additional != mg->n_inputs)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                       "the model takes %d inputs; %d attributed + %d additional were given", mg->n_inputs, n_inputs,
                       n_additional);
    if (mg->n_inputs >= MAX_IN) return cx_fail(CATTR_ERR_UNSUPPORTED, "more than %d model inputs", MAX_IN - 1);
    c->n = n_inputs;
    c->n_add = n_additional;
    for (int i = 0; i < n_inputs; i++) {
        const cattr_tensor *x = inputs[i];
        const char *name = mg->vals[mg->inputs[i]].name;
        if (!x) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "input %d ('%s') is NULL", i, name);
        if (x->dtype == CATTR_INT64)
            return cx_fail(CATTR_ERR_DTYPE, "input %d ('%s') is int64: attributed inputs must be float", i, name);
        if (x->ndim < 1) return cx_fail(CATTR_ERR_SHAPE, "input %d ('%s') needs a batch dimension", i, name);
        if (x->numel == 0)
            return cx_fail(CATTR_ERR_SHAPE, "input %d ('%s') has no elements (shape with a 0): there is nothing to "
                           "attribute", i, name);
        if (i == 0) c->B = x->shape[0];
        else if (x->shape[0] != c->B)
            return cx_fail(CATTR_ERR_SHAPE, "input %d ('%s') has batch %lld, input 0 has %lld", i, name,
                           (long long)x->shape[0], (long long)c->B);
        CX_CHECK(cx_model_check_input(e->m, i, x, "input"));
        if (e->p.check_finite) CX_CHECK(check_finite(x, "input", i));
        CX_CHECK(to_dtype(x, dt, &c->x[i]));
        /* baseline */
        const cattr_tensor *b = baselines ? baselines[i] : NULL;
        if (e->method->baseline_distribution || (e->p.nt_type != CATTR_NT_NONE && e->p.draw_baseline_from_distrib)) {
            /* rows of baselines, kept as given (scalars become one row) */
            if (b && e->p.check_finite) CX_CHECK(check_finite(b, "baseline", i));
            if (b && b->numel == 1 && !(b->ndim == x->ndim && cx_shape_eq(b->ndim - 1, b->shape + 1, x->ndim - 1, x->shape + 1))) {
                int64_t sh[CATTR_MAX_DIMS];
                memcpy(sh, x->shape, sizeof sh);
                sh[0] = 1;
                c->dist[i] = cx_tensor_alloc(dt, x->ndim, sh);
                if (!c->dist[i]) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
                for (int64_t k = 0; k < c->dist[i]->numel; k++) cx_tensor_set(c->dist[i], k, cx_tensor_get(b, 0));
            } else if (b) {
                if (b->ndim != x->ndim || b->shape[0] < 1 || !cx_shape_eq(b->ndim - 1, b->shape + 1, x->ndim - 1, x->shape + 1))
                    return cx_fail(CATTR_ERR_SHAPE, "baseline %d has shape %s; a distribution needs rows of shape %s", i,
                                   cx_shape_str(b->ndim, b->shape, s1, sizeof s1),
                                   cx_shape_str(x->ndim - 1, x->shape + 1, s2, sizeof s2));
                CX_CHECK(to_dtype(b, dt, &c->dist[i]));
            } else {
                int64_t sh[CATTR_MAX_DIMS];
                memcpy(sh, x->shape, sizeof sh);
                sh[0] = 1;
                c->dist[i] = cx_tensor_alloc(dt, x->ndim, sh);
                if (!c->dist[i]) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
                memset(c->dist[i]->data, 0, (size_t)c->dist[i]->numel * cattr_dtype_size(dt));
            }
            continue;
        }
        c->base[i] = cx_tensor_alloc(dt, x->ndim, x->shape);
        if (!c->base[i]) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        int64_t n = x->numel;
        if (!b) {
            memset(c->base[i]->data, 0, (size_t)n * cattr_dtype_size(dt));
            continue;
        }
        if (e->p.check_finite) CX_CHECK(check_finite(b, "baseline", i));
        int64_t per = c->B ? n / c->B : 0;
        bool full = cx_shape_eq(b->ndim, b->shape, x->ndim, x->shape);
        bool row1 = !full && b->ndim == x->ndim && b->shape[0] == 1 &&
                    cx_shape_eq(b->ndim - 1, b->shape + 1, x->ndim - 1, x->shape + 1);
        bool scalar = !full && !row1 && b->numel == 1;
        if (!scalar && !full && !row1)
            return cx_fail(CATTR_ERR_SHAPE, "baseline %d has shape %s; use a scalar, the input's shape %s or batch 1",
                           i, cx_shape_str(b->ndim, b->shape, s1, sizeof s1), cx_shape_str(x->ndim, x->shape, s2, sizeof s2));
        for (int64_t k = 0; k < n; k++) {
            double v = cx_tensor_get(b, scalar ? 0 : (full ? k : k % per));
            cx_tensor_set(c->base[i], k, v);
        }
    }
    for (int j = 0; j < n_additional; j++) {
        const cattr_tensor *a = additional ? additional[j] : NULL;
        int gi = n_inputs + j;
        const char *name = mg->vals[mg->inputs[gi]].name;
        if (!a) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "additional input %d ('%s') is NULL", j, name);
        if (a->ndim < 1 || a->shape[0] != c->B)
            return cx_fail(CATTR_ERR_SHAPE, "additional input %d ('%s') must have the batch size %lld first", j, name,
                           (long long)c->B);
        CX_CHECK(to_dtype(a, a->dtype == CATTR_INT64 ? CATTR_INT64 : dt, &c->add[j]));
    }
    return CATTR_OK;
}

/* ---- batched passes ------------------------------------------------------------------------------------------ */

/* Input shapes and host pointers for a pass over reps*B rows; additional inputs expanded into tmp. */
typedef struct {
    int nd[MAX_IN];
    int64_t sh[MAX_IN][CATTR_MAX_DIMS];
    cattr_dtype dt[MAX_IN];
    const void *host[MAX_IN];
    cattr_tensor *tmp[MAX_IN];
} pass_inputs;

static void pass_free(pass_inputs *pi) {
    for (int i = 0; i < MAX_IN; i++) cattr_tensor_free(pi->tmp[i]);
}

static cattr_status pass_setup(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, int64_t reps, cx_expand how,
                               pass_inputs *pi) {
    memset(pi, 0, sizeof *pi);
    for (int i = 0; i < c->n; i++) {
        pi->nd[i] = xs[i]->ndim;
        memcpy(pi->sh[i], xs[i]->shape, sizeof pi->sh[i]);
        pi->dt[i] = c->dt;
        pi->host[i] = xs[i]->data;
    }
    for (int j = 0; j < c->n_add; j++) {
        int gi = c->n + j;
        const cattr_tensor *a = c->add[j];
        if (reps != 1) {
            pi->tmp[gi] = cx_expand_rows(c->add[j], reps, how);
            if (!pi->tmp[gi]) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            a = pi->tmp[gi];
        }
        pi->nd[gi] = a->ndim;
        memcpy(pi->sh[gi], a->shape, sizeof pi->sh[gi]);
        pi->dt[gi] = a->dtype;
        pi->host[gi] = a->data;
    }
    int si = e->seed_input;
    pi->nd[si] = 0;
    pi->dt[si] = c->dt;
    return CATTR_OK;
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
    cattr_status st = target_mask(c->target, ond, blk, mask);
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

/* The output view of a shape-only forward plan for these inputs, checked to have reps*B rows. */
static cattr_status output_shape(cattr_explainer *e, pass_inputs *pi, int64_t rows, cx_plan **fp, const cx_view **ov) {
    CX_CHECK(get_plan(e, true, pi->nd, (const int64_t(*)[CATTR_MAX_DIMS])pi->sh, pi->dt, fp));
    *ov = cx_plan_view(*fp, cx_model_output(e->m));
    if ((*ov)->ndim < 1 || (*ov)->shape[0] != rows) {
        char s[128];
        return cx_fail(CATTR_ERR_SHAPE, "the model output has shape %s; expected the batch (%lld) first",
                       cx_shape_str((*ov)->ndim, (*ov)->shape, s, sizeof s), (long long)rows);
    }
    return CATTR_OK;
}

/* The gradient pass; with grads NULL only makes its plans. */
static cattr_status grad_pass(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, int64_t reps, cx_expand how,
                              cattr_tensor **grads, int slot) {
    pass_inputs pi;
    cattr_tensor *seed = NULL;
    cx_plan *fp = NULL, *p = NULL;
    const cx_view *ov = NULL;
    int si = e->seed_input;
    cattr_status st = pass_setup(e, c, xs, reps, how, &pi);
    if (st == CATTR_OK) st = output_shape(e, &pi, reps * c->B, &fp, &ov);
    if (st == CATTR_OK) {
        pi.nd[si] = ov->ndim;
        memcpy(pi.sh[si], ov->shape, sizeof pi.sh[si]);
    }
    if (st == CATTR_OK) st = get_plan_slot(e, false, slot, pi.nd, (const int64_t(*)[CATTR_MAX_DIMS])pi.sh, pi.dt, &p);
    if (!grads) { /* plans only */
        pass_free(&pi);
        return st;
    }
    if (st == CATTR_OK && !e->p.executor && cx_plan_bytes(p) > e->arena_bytes[slot]) { /* grow the shared arena */
        cx_plan_use_arena(p, NULL);
        for (int i = 0; i < CX_PLAN_CACHE; i++) { /* no plan may keep the old block */
            cx_plan *q = slot ? e->plans2[i] : e->plans[i];
            if (q) cx_plan_use_arena(q, NULL);
        }
        e->be->free(e->be->ctx, e->arena[slot], e->arena_bytes[slot]);
        e->arena[slot] = e->be->alloc(e->be->ctx, cx_plan_bytes(p));
        e->arena_bytes[slot] = e->arena[slot] ? cx_plan_bytes(p) : 0;
        if (!e->arena[slot]) st = cx_fail(CATTR_ERR_NO_MEMORY, "cannot allocate a %zu-byte activation arena", cx_plan_bytes(p));
    }
    if (st == CATTR_OK && !e->p.executor) cx_plan_use_arena(p, e->arena[slot]);
    if (st == CATTR_OK) st = make_seed(c, ov->ndim, ov->shape, reps, how, &seed);
    if (st == CATTR_OK) pi.host[si] = seed->data;
    void *outs[MAX_IN];
    for (int i = 0; i < c->n; i++) grads[i] = NULL;
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        grads[i] = cx_tensor_alloc(c->dt, xs[i]->ndim, xs[i]->shape);
        if (!grads[i]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else outs[i] = grads[i]->data;
    }
    if (st == CATTR_OK) st = cx_run_plan(e, p, pi.host, outs);
    pass_free(&pi);
    cattr_tensor_free(seed);
    if (st != CATTR_OK)
        for (int i = 0; i < c->n; i++) {
            cattr_tensor_free(grads[i]);
            grads[i] = NULL;
        }
    return st;
}

cattr_status cx_seed_block(cattr_explainer *e, cx_call *c, cattr_tensor **seed) {
    pass_inputs pi;
    cx_plan *fp = NULL;
    const cx_view *ov = NULL;
    *seed = NULL;
    cattr_status st = pass_setup(e, c, c->x, 1, CX_TILE, &pi);
    if (st == CATTR_OK) st = output_shape(e, &pi, c->B, &fp, &ov);
    if (st == CATTR_OK) st = make_seed(c, ov->ndim, ov->shape, 1, CX_TILE, seed);
    pass_free(&pi);
    return st;
}

cattr_status cx_grad(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, int64_t reps, cx_expand how,
                     cattr_tensor **grads) {
    return grad_pass(e, c, xs, reps, how, grads, 0);
}

cattr_status cx_grad_slot(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, int64_t reps, cx_expand how,
                          cattr_tensor **grads, int slot) {
    return grad_pass(e, c, xs, reps, how, grads, slot);
}

cattr_status cx_grad_prepare(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, int64_t reps, cx_expand how,
                             int slot) {
    return grad_pass(e, c, xs, reps, how, NULL, slot);
}

cattr_status cx_forward(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, int64_t reps, cx_expand how,
                        cattr_tensor **out) {
    pass_inputs pi;
    cx_plan *fp = NULL;
    const cx_view *ov = NULL;
    cattr_tensor *o = NULL;
    *out = NULL;
    cattr_status st = pass_setup(e, c, xs, reps, how, &pi);
    if (st == CATTR_OK) st = output_shape(e, &pi, reps * c->B, &fp, &ov);
    if (st == CATTR_OK) {
        o = cx_tensor_alloc(ov->dtype, ov->ndim, ov->shape);
        if (!o) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK) {
        void *dst = o->data;
        st = cx_run_plan(e, fp, pi.host, &dst);
    }
    pass_free(&pi);
    if (st != CATTR_OK) {
        cattr_tensor_free(o);
        return st;
    }
    *out = o;
    return CATTR_OK;
}

cattr_status cx_select(const cx_call *c, const cattr_tensor *out, int64_t reps, cx_expand how, double *sel) {
    int64_t blk[CATTR_MAX_DIMS];
    memcpy(blk, out->shape, sizeof blk);
    blk[0] = c->B;
    int64_t per_ex = cx_numel(out->ndim - 1, out->shape + 1);
    double *mask = malloc((size_t)(c->B * per_ex + 1) * sizeof *mask);
    if (!mask) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_status st = target_mask(c->target, out->ndim, blk, mask);
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

size_t cx_avail_memory(void) {
    /* read at most every half second: small models call this per attribution and the query is a system call */
    static _Atomic long long last_ns = -1;
    static _Atomic size_t last;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    long long now = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, prev = last_ns;
    if (prev >= 0 && now - prev < 500000000LL) return last;
    long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    size_t v = pages <= 0 || psz <= 0 ? (size_t)1 << 30 : (size_t)pages * (size_t)psz;
    last = v;
    last_ns = now;
    return v;
}

size_t cx_memory_budget(const cattr_explainer *e) { return e->p.max_memory ? e->p.max_memory : cx_avail_memory() / 4; }

cattr_status cx_row_bytes(cattr_explainer *e, cx_call *c, bool with_grad, size_t *bytes) {
    pass_inputs pi;
    cx_plan *fp = NULL;
    const cx_view *ov = NULL;
    cattr_status st = pass_setup(e, c, c->x, 1, CX_TILE, &pi);
    if (st == CATTR_OK) st = output_shape(e, &pi, c->B, &fp, &ov);
    pass_free(&pi);
    if (st != CATTR_OK) return st;
    size_t host = 0, act = cx_plan_bytes(fp);
    for (int i = 0; i < c->n; i++) host += (size_t)c->x[i]->numel * cattr_dtype_size(c->dt);
    if (with_grad && e->g) {
        /* the gradient plan keeps what the backward needs of every layer: plan it for one rep (a plan made for its
         * shapes allocates nothing) and take its arena; remembered for these shapes */
        bool same = e->rb_n == c->n && e->rb_bytes;
        for (int i = 0; i < c->n && same; i++) same = !memcmp(e->rb_sh[i], c->x[i]->shape, sizeof e->rb_sh[i]);
        if (!same) {
            st = pass_setup(e, c, c->x, 1, CX_TILE, &pi);
            cx_plan *gp = NULL;
            if (st == CATTR_OK) {
                pi.nd[e->seed_input] = ov->ndim;
                memcpy(pi.sh[e->seed_input], ov->shape, sizeof pi.sh[e->seed_input]);
                st = cx_plan_new(e->g, e->consts, false, pi.nd, (const int64_t(*)[CATTR_MAX_DIMS])pi.sh, pi.dt, e->grads,
                                 e->n_attr, &gp);
            }
            pass_free(&pi);
            if (st != CATTR_OK) return st;
            e->rb_bytes = cx_plan_bytes(gp) + 1;
            cx_plan_free(gp);
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
    if (layer_input) { /* the first non-constant input of the node producing the layer value */
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

/* Builds the layer graph: the model, a seed input and the gradient w.r.t. `layer` under the default rules. */
static cattr_status build_layer_graph(cattr_explainer *e, int layer) {
    if (e->lg && e->lg_layer == layer) return CATTR_OK;
    drop_layer_graph(e);
    e->lg = cg_clone(e->m->g);
    if (!e->lg) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    int seed = cg_add_input(e->lg, "__cattr_seed__");
    if (seed < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    e->lg_seed_input = e->lg->n_inputs - 1;
    cg_rules rules;
    cg_rules_default(&rules);
    CX_CHECK(cg_autodiff(e->lg, cx_model_output(e->m), seed, &layer, 1, &rules, &e->lg_grad));
    e->lg_layer = layer;
    return CATTR_OK;
}

cattr_status cx_layer_pass(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, int64_t reps, cx_expand how,
                           int layer, bool want_grad, cattr_tensor **act, cattr_tensor **grad) {
    *act = NULL;
    if (grad) *grad = NULL;
    CX_CHECK(build_layer_graph(e, layer));
    pass_inputs pi;
    cattr_tensor *seed = NULL, *a = NULL, *gr = NULL;
    cx_plan *fp = NULL, *p = NULL;
    const cx_view *ov = NULL;
    int si = e->lg_seed_input;
    cattr_status st = pass_setup(e, c, xs, reps, how, &pi);
    pi.nd[si] = 0;
    pi.dt[si] = c->dt;
    if (st == CATTR_OK) st = output_shape(e, &pi, reps * c->B, &fp, &ov);
    if (st == CATTR_OK && want_grad) {
        pi.nd[si] = ov->ndim;
        memcpy(pi.sh[si], ov->shape, sizeof pi.sh[si]);
        st = make_seed(c, ov->ndim, ov->shape, reps, how, &seed);
        if (st == CATTR_OK) pi.host[si] = seed->data;
    }
    if (st == CATTR_OK) { /* plan: cached by input shapes */
        for (int i = 0; i < CX_PLAN_CACHE && !p; i++)
            if (e->lplans[i] && cx_plan_matches(e->lplans[i], pi.nd, (const int64_t(*)[CATTR_MAX_DIMS])pi.sh, pi.dt))
                p = e->lplans[i];
        if (!p) {
            int outs[2] = {layer, e->lg_grad};
            st = cx_plan_new(e->lg, e->consts, e->p.executor == CATTR_EXEC_EAGER, pi.nd,
                             (const int64_t(*)[CATTR_MAX_DIMS])pi.sh, pi.dt, outs, want_grad ? 2 : 1, &p);
            if (st == CATTR_OK) {
                cx_plan_free(e->lplans[e->lplan_next]);
                e->lplans[e->lplan_next] = p;
                e->lplan_next = (e->lplan_next + 1) % CX_PLAN_CACHE;
            }
        }
    }
    if (st == CATTR_OK) {
        const cx_view *lv = cx_plan_view(p, layer);
        a = cx_tensor_alloc(lv->dtype, lv->ndim, lv->shape);
        if (want_grad) gr = cx_tensor_alloc(lv->dtype, lv->ndim, lv->shape);
        if (!a || (want_grad && !gr)) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK) {
        void *outs[2] = {a->data, gr ? gr->data : NULL};
        st = cx_run_plan(e, p, pi.host, outs);
    }
    pass_free(&pi);
    cattr_tensor_free(seed);
    if (st != CATTR_OK) {
        cattr_tensor_free(a);
        cattr_tensor_free(gr);
        return st;
    }
    *act = a;
    if (grad) *grad = gr;
    else cattr_tensor_free(gr);
    return CATTR_OK;
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

/* ---- the public entry points ---------------------------------------------------------------------------------- */

cattr_status cx_run_plan(const cattr_explainer *e, cx_plan *p, const void *const *in_host, void *const *out_host) {
    cx_plan_set_check_finite(p, e->diagnose);
    return cx_plan_run(p, in_host, out_host);
}

cattr_status cx_run_plan_dev(const cattr_explainer *e, cx_plan *p, const void *const *in_host, void *const *in_dev,
                             void *const *out_host, void *const *out_dev) {
    cx_plan_set_check_finite(p, e->diagnose);
    return cx_plan_run_dev(p, in_host, in_dev, out_host, out_dev);
}

cattr_status cx_check_results(cattr_tensor *const *attr, int n, const cattr_tensor *delta) {
    for (int i = 0; i <= n; i++) {
        const cattr_tensor *t = i < n ? attr[i] : delta;
        if (!t || t->dtype == CATTR_INT64) continue;
        for (int64_t k = 0; k < t->numel; k++) {
            double v = cx_tensor_get(t, k);
            if (!isfinite(v)) {
                char what[64];
                if (i < n) snprintf(what, sizeof what, "attribution %d", i);
                else snprintf(what, sizeof what, "convergence delta");
                return cx_fail(CATTR_ERR_NONFINITE, "%s holds %s at flat index %lld", what, isnan(v) ? "nan" : "inf",
                               (long long)k);
            }
        }
    }
    return CATTR_OK;
}

cattr_status cx_diagnosis(cattr_status rerun, const char *found) {
    if (rerun != CATTR_OK) return cx_fail_context(rerun, "%s", found); /* where it appeared, or what stopped the search */
    return cx_fail(CATTR_ERR_NONFINITE, "%s; every pass of the model was finite: it comes from the method's arithmetic "
                   "on them (an overflow or 0/0)", found);
}

static cattr_status run_once(cattr_explainer *e, const cattr_call *call, cattr_tensor **attr_out,
                             cattr_tensor **delta_out, int *n_written) {
    cx_call c;
    cattr_tensor *attr[MAX_IN] = {0}, *delta = NULL;
    e->fx_n = 0;
    cattr_status st = prepare(e, call, &c);
    if (st == CATTR_OK) st = build_graph(e, call->n_inputs);
    if (st == CATTR_OK) {
        if (e->p.nt_type != CATTR_NT_NONE) st = cx_noise_tunnel(e, &c, attr, delta_out ? &delta : NULL);
        else st = e->method->attribute(e, &c, attr, delta_out ? &delta : NULL);
    }
    if (e->p.nt_type != CATTR_NT_NONE || st != CATTR_OK) e->fx_n = 0; /* f at noisy inputs is not f(x) */
    int c_n_out = c.n_out;
    call_free(&c);
    if (st != CATTR_OK) {
        for (int i = 0; i < MAX_IN; i++) cattr_tensor_free(attr[i]);
        cattr_tensor_free(delta);
        return st;
    }
    int n_out = c_n_out > 0 ? c_n_out : call->n_inputs;
    for (int i = 0; i < n_out; i++) attr_out[i] = attr[i];
    if (delta_out) *delta_out = delta;
    else cattr_tensor_free(delta);
    *n_written = n_out;
    return CATTR_OK;
}

cattr_status cattr_explainer_run(cattr_explainer *e, const cattr_call *call, cattr_tensor **attr_out,
                                 cattr_tensor **delta_out) {
    if (!e || !attr_out || !call) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explainer, call and attr_out are required");
    if (delta_out) *delta_out = NULL;
    cattr_tensor *attr[MAX_IN] = {0}, *delta = NULL;
    int n = 0;
    cattr_status st = run_once(e, call, attr, delta_out ? &delta : NULL, &n);
    if (st != CATTR_OK) return st;
    if (e->p.check_finite && cx_check_results(attr, n, delta) != CATTR_OK) {
        /* a NaN or Inf in the result is an error naming where it first appeared: the call runs again with every
         * pass checking its values (slow, and only on this path) */
        char found[1024];
        snprintf(found, sizeof found, "%s", cattr_last_error());
        for (int i = 0; i < MAX_IN; i++) cattr_tensor_free(attr[i]);
        cattr_tensor_free(delta);
        e->diagnose = true;
        cattr_tensor *a2[MAX_IN] = {0}, *d2 = NULL;
        int n2 = 0;
        st = run_once(e, call, a2, delta_out ? &d2 : NULL, &n2);
        e->diagnose = false;
        for (int i = 0; i < MAX_IN; i++) cattr_tensor_free(a2[i]);
        cattr_tensor_free(d2);
        return cx_diagnosis(st, found);
    }
    for (int i = 0; i < n; i++) attr_out[i] = attr[i];
    if (delta_out) *delta_out = delta;
    return CATTR_OK;
}

cattr_status cattr_explainer_attribute(cattr_explainer *e, const cattr_tensor *const *inputs, int n_inputs,
                                       const cattr_tensor *const *baselines, const cattr_target *target,
                                       const cattr_tensor *const *additional, int n_additional,
                                       cattr_tensor **attr_out, cattr_tensor **delta_out) {
    cattr_call call;
    memset(&call, 0, sizeof call);
    call.inputs = inputs;
    call.n_inputs = n_inputs;
    call.baselines = baselines;
    call.target = target;
    call.additional = additional;
    call.n_additional = n_additional;
    return cattr_explainer_run(e, &call, attr_out, delta_out);
}

/* Sums over the samples reproduce torch's CPU sum kernel (ReduceOps SumKernel.cpp, cascade_sum) in the dtype of the
 * attributions, so that float32 runs round like Captum's `attribution.view(B, m, -1).sum(1)`. */

/* multi_row_sum for one column: levels of 2^max(4, ceil(log2 n)/4) terms added into the next level up. */
static double cascade_sum(cattr_dtype dt, const double *v, int64_t stride, int64_t n) {
    enum { LEVELS = 4 };
    int64_t power = 4, lg = 0;
    while (((int64_t)1 << lg) < n) lg++;
    if (lg / LEVELS > power) power = lg / LEVELS;
    int64_t step = (int64_t)1 << power, mask = step - 1;
    double acc[LEVELS] = {0};
    int64_t i = 0;
    while (i + step <= n) {
        for (int64_t j = 0; j < step; j++, i++) acc[0] = cx_rnd(dt, acc[0] + v[i * stride]);
        for (int l = 1; l < LEVELS; l++) {
            acc[l] = cx_rnd(dt, acc[l] + acc[l - 1]);
            acc[l - 1] = 0;
            if ((i & (mask << (l * power))) != 0) break;
        }
    }
    for (; i < n; i++) acc[0] = cx_rnd(dt, acc[0] + v[i * stride]);
    for (int l = 1; l < LEVELS; l++) acc[0] = cx_rnd(dt, acc[0] + acc[l]);
    return acc[0];
}

/* row_sum: four interleaved cascades (instruction-level parallelism), the tail into the first, then combined. */
static double row_sum(cattr_dtype dt, const double *v, int64_t stride, int64_t n) {
    int64_t n4 = n / 4;
    double part[4];
    for (int k = 0; k < 4; k++) part[k] = cascade_sum(dt, v + k * stride, 4 * stride, n4);
    for (int64_t i = n4 * 4; i < n; i++) part[0] = cx_rnd(dt, part[0] + v[i * stride]);
    for (int k = 1; k < 4; k++) part[0] = cx_rnd(dt, part[0] + part[k]);
    return part[0];
}

/* The sum of the m samples col[0..m) of column k of `per` columns. torch picks the loop by layout and vector width
 * (W lanes: AVX2's 8 floats or 4 doubles): one column (per == 1) is a contiguous reduction, summed in W lanes of
 * row_sum each; otherwise columns are reduced four (or 4*W) at a time with multi_row_sum, the leftover columns one
 * at a time with row_sum. */
double cx_torch_sum(cattr_dtype dt, const double *col, int64_t m, int64_t k, int64_t per) {
    int64_t W = dt == CATTR_FLOAT32 ? 8 : 4;
    if (per == 1) {
        if (m < W) return row_sum(dt, col, 1, m);
        int64_t rows = m / W;
        double lanes[8], acc = 0;
        for (int64_t l = 0; l < W; l++) lanes[l] = row_sum(dt, col + l, W, rows);
        for (int64_t i = rows * W; i < m; i++) acc = cx_rnd(dt, acc + col[i]);
        for (int64_t l = 0; l < W; l++) acc = cx_rnd(dt, acc + lanes[l]);
        return acc;
    }
    int64_t group = per >= W ? 4 * W : 4;
    return k < per / group * group ? cascade_sum(dt, col, 1, m) : row_sum(dt, col, 1, m);
}

/* [x; start] for every input: the endpoints of the delta in one batch. */
static cattr_status delta_inputs(const cx_call *c, cattr_tensor *const *start, cattr_tensor **xs) {
    for (int i = 0; i < c->n; i++) {
        int64_t s2[CATTR_MAX_DIMS];
        memcpy(s2, c->x[i]->shape, sizeof s2);
        s2[0] *= 2;
        xs[i] = cx_tensor_alloc(c->dt, c->x[i]->ndim, s2);
        if (!xs[i]) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        size_t bytes = (size_t)c->x[i]->numel * cattr_dtype_size(c->dt);
        memcpy(xs[i]->data, c->x[i]->data, bytes);
        memcpy((char *)xs[i]->data + bytes, start[i]->data, bytes);
    }
    return CATTR_OK;
}

cattr_status cx_delta_prepare(cattr_explainer *e, cx_call *c, cattr_tensor *const *start) {
    cattr_tensor *xs[MAX_IN] = {0};
    pass_inputs pi;
    cx_plan *fp = NULL;
    const cx_view *ov = NULL;
    cattr_status st = delta_inputs(c, start, xs);
    if (st == CATTR_OK) st = pass_setup(e, c, xs, 2, CX_TILE, &pi);
    if (st == CATTR_OK) {
        st = output_shape(e, &pi, 2 * c->B, &fp, &ov);
        pass_free(&pi);
    }
    for (int i = 0; i < MAX_IN; i++) cattr_tensor_free(xs[i]);
    return st;
}

cattr_status cx_delta_forward(cattr_explainer *e, cx_call *c, cattr_tensor *const *start, double *sel) {
    cattr_tensor *xs[MAX_IN] = {0}, *out = NULL;
    cattr_status st = delta_inputs(c, start, xs);
    if (st == CATTR_OK) st = cx_forward(e, c, xs, 2, CX_TILE, &out);
    if (st == CATTR_OK) st = cx_select(c, out, 2, CX_TILE, sel);
    for (int i = 0; i < MAX_IN; i++) cattr_tensor_free(xs[i]);
    cattr_tensor_free(out);
    return st;
}

cattr_status cx_delta_finish(const cx_call *c, cattr_tensor *const *attr, const double *sel, cattr_tensor **delta) {
    cattr_dtype dt = c->dt;
    int64_t B = c->B, maxm = 1, len = B;
    for (int i = 0; i < c->n; i++)
        if (B && attr[i]->numel / B > maxm) maxm = attr[i]->numel / B;
    double *row = malloc((size_t)maxm * sizeof *row);
    *delta = cx_tensor_alloc(dt, 1, &len);
    if (!row || !*delta) {
        free(row);
        cattr_tensor_free(*delta);
        *delta = NULL;
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    for (int64_t b = 0; b < B; b++) {
        double attr_sum = 0;
        for (int i = 0; i < c->n; i++) {
            int64_t m = attr[i]->numel / B;
            for (int64_t k = 0; k < m; k++) row[k] = cx_tensor_get(attr[i], b * m + k);
            attr_sum = cx_rnd(dt, attr_sum + cx_torch_sum(attr[i]->dtype, row, m, 0, 1));
        }
        double fx = cx_rnd(dt, sel[b]), fb = cx_rnd(dt, sel[B + b]);
        cx_tensor_set(*delta, b, cx_rnd(dt, attr_sum - cx_rnd(dt, fx - fb)));
    }
    free(row);
    return CATTR_OK;
}

void cx_keep_fx(cattr_explainer *e, const double *sel, int64_t B) {
    double *f = realloc(e->fx, (size_t)(B > 0 ? B : 1) * sizeof *f);
    if (!f) {
        e->fx_n = 0;
        return;
    }
    memcpy(f, sel, (size_t)B * sizeof *f);
    e->fx = f;
    e->fx_n = B;
}

cattr_status cx_convergence_delta(cattr_explainer *e, cx_call *c, cattr_tensor *const *attr,
                                  cattr_tensor *const *start, cattr_tensor **delta) {
    double *sel = malloc((size_t)(2 * c->B + 1) * sizeof *sel);
    cattr_status st = sel ? cx_delta_forward(e, c, start, sel) : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) cx_keep_fx(e, sel, c->B);
    if (st == CATTR_OK) st = cx_delta_finish(c, attr, sel, delta);
    free(sel);
    return st;
}
