/* methods.c - the method registry: the table of implemented methods (indexed by cattr_method), the one table of
 * their CLI and Captum names, and Captum's default parameters. */
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

const char *cx_method_captum_name(cattr_method m) {
    return m >= 0 && m < CATTR_METHOD_COUNT ? method_names[m].captum : "?";
}

int cattr_method_takes_target(cattr_method m) { return m >= 0 && m < CATTR_METHOD_COUNT && cx_method_takes_target(m); }

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
    p.delta_tol = 1e-3;
    p.max_steps = 512;
    if (method == CATTR_METHOD_NEURON_CONDUCTANCE) p.quadrature = CATTR_QUAD_RIEMANN_TRAPEZOID;
    if (method == CATTR_METHOD_LAYER_GRADIENT_SHAP || method == CATTR_METHOD_NEURON_GRADIENT_SHAP) {
        p.n_samples = 5;
        p.stdevs = 0.0;
    }
    return p;
}


/* ---- the parameters' ranges -------------------------------------------------------------------------------------- */

static bool m_steps(cattr_method m) { /* the path methods: n_steps, quadrature, internal_batch_size */
    return m == CATTR_METHOD_INTEGRATED_GRADIENTS || m == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS ||
           m == CATTR_METHOD_LAYER_CONDUCTANCE || m == CATTR_METHOD_INTERNAL_INFLUENCE ||
           m == CATTR_METHOD_NEURON_INTEGRATED_GRADIENTS || m == CATTR_METHOD_NEURON_CONDUCTANCE;
}

static bool m_perturbations(cattr_method m) { /* perturbations_per_eval */
    return m == CATTR_METHOD_FEATURE_ABLATION || m == CATTR_METHOD_FEATURE_PERMUTATION ||
           m == CATTR_METHOD_OCCLUSION || m == CATTR_METHOD_SHAPLEY_VALUE_SAMPLING ||
           m == CATTR_METHOD_SHAPLEY_VALUES || m == CATTR_METHOD_LIME || m == CATTR_METHOD_KERNEL_SHAP ||
           m == CATTR_METHOD_LAYER_FEATURE_ABLATION || m == CATTR_METHOD_LAYER_FEATURE_PERMUTATION ||
           m == CATTR_METHOD_NEURON_FEATURE_ABLATION;
}

static bool m_samples(cattr_method m) { /* n_samples */
    return m == CATTR_METHOD_SHAPLEY_VALUE_SAMPLING || m == CATTR_METHOD_LIME || m == CATTR_METHOD_KERNEL_SHAP ||
           m == CATTR_METHOD_GRADIENT_SHAP || m == CATTR_METHOD_LAYER_GRADIENT_SHAP ||
           m == CATTR_METHOD_NEURON_GRADIENT_SHAP;
}

static bool m_eps(cattr_method m) { /* eps */
    return m == CATTR_METHOD_DEEPLIFT || m == CATTR_METHOD_DEEPLIFT_SHAP || m == CATTR_METHOD_LAYER_DEEPLIFT ||
           m == CATTR_METHOD_LAYER_DEEPLIFT_SHAP || m == CATTR_METHOD_NEURON_DEEPLIFT ||
           m == CATTR_METHOD_NEURON_DEEPLIFT_SHAP;
}

static bool m_gradient_shap(cattr_method m) { /* stdevs (and n_samples) */
    return m == CATTR_METHOD_GRADIENT_SHAP || m == CATTR_METHOD_LAYER_GRADIENT_SHAP ||
           m == CATTR_METHOD_NEURON_GRADIENT_SHAP;
}

static bool m_neuron(cattr_method m) { return m >= CATTR_METHOD_NEURON_GRADIENT && m < CATTR_METHOD_COUNT; }

bool cx_method_takes_target(cattr_method m) {
    return m != CATTR_METHOD_LAYER_ACTIVATION && (!m_neuron(m) || m == CATTR_METHOD_NEURON_CONDUCTANCE);
}

/* An int field against [lo, hi]. */
static cattr_status in_range(const char *field, long long v, long long lo, long long hi, const char *what) {
    if (v >= lo && v <= hi) return CATTR_OK;
    return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "%s must be from %lld to %lld%s (got %lld)", field, lo, hi,
                   what ? what : "", v);
}

/* A double field: finite and >= 0 (or > 0 with positive). */
static cattr_status finite_nonneg(const char *field, double v, bool positive, const char *method) {
    if (isfinite(v) && (positive ? v > 0 : v >= 0)) return CATTR_OK;
    return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "%s%s%s must be a finite number %s 0 (got %g)", method ? method : "",
                   method ? "'s " : "", field, positive ? ">" : ">=", v);
}

cattr_status cx_params_check(const cattr_attr_params *p) {
    if (!p) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "params is NULL");
    cattr_method m = p->method;
    if ((int)m < 0 || m >= CATTR_METHOD_COUNT)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "method must be from 0 to %d, a cattr_method such as "
                       "CATTR_METHOD_INTEGRATED_GRADIENTS (got %d)", CATTR_METHOD_COUNT - 1, (int)m);
    const char *name = method_names[m].captum;
    if (p->dtype != CATTR_FLOAT32 && p->dtype != CATTR_FLOAT64)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "dtype must be CATTR_FLOAT32 (0) or CATTR_FLOAT64 (1) (got %d)",
                       (int)p->dtype);
    if (p->executor != CATTR_EXEC_PLANNED && p->executor != CATTR_EXEC_EAGER)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "executor must be CATTR_EXEC_PLANNED (0) or CATTR_EXEC_EAGER (1) "
                       "(got %d)", (int)p->executor);
    if (p->precision != CATTR_PRECISION_HIGHEST && p->precision != CATTR_PRECISION_HIGH)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "precision must be CATTR_PRECISION_HIGHEST (0) or "
                       "CATTR_PRECISION_HIGH (1) (got %d)", (int)p->precision);
    /* the NoiseTunnel around the method */
    if ((int)p->nt_type < CATTR_NT_NONE || p->nt_type > CATTR_NT_VARGRAD)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "nt_type must be one of CATTR_NT_NONE (0), CATTR_NT_SMOOTHGRAD (1), "
                       "CATTR_NT_SMOOTHGRAD_SQ (2) or CATTR_NT_VARGRAD (3) (got %d)", (int)p->nt_type);
    if (p->nt_type != CATTR_NT_NONE) {
        CX_CHECK(in_range("nt_samples", p->nt_samples, 1, CX_MAX_NT_SAMPLES, NULL));
        CX_CHECK(in_range("nt_samples_batch_size", p->nt_samples_batch_size, 0, CX_MAX_NT_SAMPLES,
                          " (0: all samples in one batch)"));
        CX_CHECK(finite_nonneg("NoiseTunnel stdevs", p->stdevs, false, NULL));
    }
    /* the path methods */
    if (m_steps(m) && p->n_steps == CATTR_STEPS_AUTO) {
        if (m != CATTR_METHOD_INTEGRATED_GRADIENTS && m != CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_steps auto (CATTR_STEPS_AUTO) is implemented for "
                           "IntegratedGradients and LayerIntegratedGradients (not %s)", name);
        if (!p->multiply_by_inputs)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_steps auto (CATTR_STEPS_AUTO) stops on the convergence delta, "
                           "which needs multiply_by_inputs = 1");
        if (p->nt_type != CATTR_NT_NONE)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_steps auto (CATTR_STEPS_AUTO) is not implemented inside a "
                           "noise tunnel: give a number of steps");
        if (!isfinite(p->delta_tol) || p->delta_tol <= 0 || p->delta_tol >= 1)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "delta_tol must be a finite number > 0 and < 1 (got %g)",
                           p->delta_tol);
        CX_CHECK(in_range("max_steps", p->max_steps, 8, CX_MAX_STEPS, NULL));
    }
    if (m_steps(m)) {
        if (p->n_steps != CATTR_STEPS_AUTO) 
            CX_CHECK(in_range("n_steps", p->n_steps, 1, CX_MAX_STEPS,
                              m == CATTR_METHOD_INTEGRATED_GRADIENTS || m == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS
                                  ? ", or -1 (CATTR_STEPS_AUTO)"
                                  : NULL));
        if ((int)p->quadrature < CATTR_QUAD_RIEMANN_LEFT || p->quadrature > CATTR_QUAD_GAUSS_LEGENDRE)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "quadrature must be one of riemann_left (0), riemann_right (1), "
                           "riemann_middle (2), riemann_trapezoid (3) or gausslegendre (4) (got %d)",
                           (int)p->quadrature);
        /* LayerConductance takes n_steps + 1 points */
        int points = m == CATTR_METHOD_LAYER_CONDUCTANCE ? p->n_steps + 1 : p->n_steps == CATTR_STEPS_AUTO ? 8 : p->n_steps;
        if (p->quadrature != CATTR_QUAD_GAUSS_LEGENDRE && points < 2)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "%s's quadrature %s needs n_steps from 2 to %d (got %d)", name,
                           cattr_quadrature_name(p->quadrature), CX_MAX_STEPS, p->n_steps);
        CX_CHECK(in_range("internal_batch_size", p->internal_batch_size, 0, CX_MAX_INTERNAL_BATCH,
                          " (0: chosen from max_memory)"));
    }
    if (m_perturbations(m))
        CX_CHECK(in_range("perturbations_per_eval", p->perturbations_per_eval, 0, CX_MAX_PERTURBATIONS,
                          " (0: chosen from max_memory)"));
    if (m_samples(m)) CX_CHECK(in_range("n_samples", p->n_samples, 1, CX_MAX_SAMPLES, NULL));
    if (m_eps(m)) CX_CHECK(finite_nonneg("eps", p->eps, false, name));
    if (m_gradient_shap(m)) CX_CHECK(finite_nonneg("stdevs", p->stdevs, false, name));
    if (m == CATTR_METHOD_LIME) {
        CX_CHECK(finite_nonneg("lime_alpha", p->lime_alpha, false, name));
        CX_CHECK(finite_nonneg("kernel_width", p->kernel_width, true, name));
    }
    /* Occlusion's windows and strides (their sizes against the inputs' are checked by each call) */
    if (m == CATTR_METHOD_OCCLUSION)
        for (int i = 0; i < CATTR_MAX_INPUTS; i++) {
            char f[64];
            snprintf(f, sizeof f, "sliding_window_ndim[%d]", i);
            CX_CHECK(in_range(f, p->sliding_window_ndim[i], 0, CATTR_MAX_DIMS, " (0: input not given)"));
            for (int d = 0; d < p->sliding_window_ndim[i]; d++)
                if (p->sliding_window[i][d] < 1)
                    return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "sliding_window[%d][%d] must be >= 1, and at most the "
                                   "input's size in that dim (got %lld)", i, d, (long long)p->sliding_window[i][d]);
            snprintf(f, sizeof f, "strides_ndim[%d]", i);
            CX_CHECK(in_range(f, p->strides_ndim[i], -1, CATTR_MAX_DIMS,
                              " (0: strides of 1; -1 or 1: strides[i][0] for every dim)"));
            int sn = p->strides_ndim[i] < 0 ? 1 : p->strides_ndim[i];
            for (int d = 0; d < sn; d++)
                if (p->strides[i][d] < 1)
                    return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "strides[%d][%d] must be >= 1, and at most the window's "
                                   "size in that dim (got %lld)", i, d, (long long)p->strides[i][d]);
        }
    /* layers and neurons */
    CX_CHECK(in_range("n_layers", p->n_layers, 0, CATTR_MAX_OUTPUTS, " (0: the one layer `layer`)"));
    if (p->n_layers > 0 && !p->layers)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_layers is %d but layers is NULL", p->n_layers);
    if (m_neuron(m)) {
        if (p->neuron_kind < CATTR_NEURON_INDEX || p->neuron_kind > CATTR_NEURON_SUM)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "%s needs a neuron selector: neuron_kind must be one of "
                           "CATTR_NEURON_INDEX (1), CATTR_NEURON_SLICES (2) or CATTR_NEURON_SUM (3) (got %d)", name,
                           (int)p->neuron_kind);
        if (p->neuron_kind == CATTR_NEURON_SUM) {
            CX_CHECK(in_range("neuron_sum_ndim", p->neuron_sum_ndim, 0, CATTR_MAX_DIMS, NULL));
        } else {
            CX_CHECK(in_range("neuron_ndim", p->neuron_ndim, 1, CATTR_MAX_DIMS, " (the layer's dims besides the batch)"));
            for (int d = 0; p->neuron_kind == CATTR_NEURON_SLICES && d < p->neuron_ndim; d++)
                if (!p->neuron_slice_is_index[d] && p->neuron_slice[d][2] < 1)
                    return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "neuron_slice[%d] step must be >= 1 (got %lld)", d,
                                   (long long)p->neuron_slice[d][2]);
        }
    } else if ((int)p->neuron_kind < CATTR_NEURON_NONE || p->neuron_kind > CATTR_NEURON_SUM) {
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "neuron_kind must be one of CATTR_NEURON_NONE (0), "
                       "CATTR_NEURON_INDEX (1), CATTR_NEURON_SLICES (2) or CATTR_NEURON_SUM (3) (got %d)",
                       (int)p->neuron_kind);
    }
    /* rules for named nodes */
    CX_CHECK(in_range("n_node_rules", p->n_node_rules, 0, CX_MAX_NODE_RULES, NULL));
    if (p->n_node_rules > 0 && !p->node_rules)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_node_rules is %d but node_rules is NULL", p->n_node_rules);
    return CATTR_OK;
}
