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

