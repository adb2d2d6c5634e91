/* layer_perturb.c - layer and neuron methods built on rules, perturbations and the Shap family: LayerDeepLift,
 * LayerDeepLiftShap, LayerGradientShap, LayerFeatureAblation, LayerFeaturePermutation, LayerLRP, NeuronDeepLift,
 * NeuronDeepLiftShap, NeuronGradientShap, NeuronGuidedBackprop, NeuronDeconvolution, NeuronFeatureAblation. Not
 * implemented yet: the entries are registered with no attribute function. */
#include "attr/internal.h"

const cx_method cx_method_layer_deeplift = {CATTR_METHOD_LAYER_DEEPLIFT, "layer-deeplift", "LayerDeepLift", false, NULL, NULL, NULL};
const cx_method cx_method_layer_deeplift_shap = {CATTR_METHOD_LAYER_DEEPLIFT_SHAP, "layer-deeplift-shap", "LayerDeepLiftShap", true, NULL, NULL, NULL};
const cx_method cx_method_layer_gradient_shap = {CATTR_METHOD_LAYER_GRADIENT_SHAP, "layer-gradient-shap", "LayerGradientShap", true, NULL, NULL, NULL};
const cx_method cx_method_layer_feature_ablation = {CATTR_METHOD_LAYER_FEATURE_ABLATION, "layer-feature-ablation", "LayerFeatureAblation", false, NULL, NULL, NULL};
const cx_method cx_method_layer_feature_permutation = {CATTR_METHOD_LAYER_FEATURE_PERMUTATION, "layer-feature-permutation", "LayerFeaturePermutation", false, NULL, NULL, NULL};
const cx_method cx_method_layer_lrp = {CATTR_METHOD_LAYER_LRP, "layer-lrp", "LayerLRP", false, NULL, NULL, NULL};
const cx_method cx_method_neuron_deeplift = {CATTR_METHOD_NEURON_DEEPLIFT, "neuron-deeplift", "NeuronDeepLift", false, NULL, NULL, NULL};
const cx_method cx_method_neuron_deeplift_shap = {CATTR_METHOD_NEURON_DEEPLIFT_SHAP, "neuron-deeplift-shap", "NeuronDeepLiftShap", true, NULL, NULL, NULL};
const cx_method cx_method_neuron_gradient_shap = {CATTR_METHOD_NEURON_GRADIENT_SHAP, "neuron-gradient-shap", "NeuronGradientShap", true, NULL, NULL, NULL};
const cx_method cx_method_neuron_guided_backprop = {CATTR_METHOD_NEURON_GUIDED_BACKPROP, "neuron-guided-backprop", "NeuronGuidedBackprop", false, NULL, NULL, NULL};
const cx_method cx_method_neuron_deconvolution = {CATTR_METHOD_NEURON_DECONVOLUTION, "neuron-deconvolution", "NeuronDeconvolution", false, NULL, NULL, NULL};
const cx_method cx_method_neuron_feature_ablation = {CATTR_METHOD_NEURON_FEATURE_ABLATION, "neuron-feature-ablation", "NeuronFeatureAblation", false, NULL, NULL, NULL};
