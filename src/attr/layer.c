/* layer.c - layer and neuron methods of the gradient family: LayerActivation, LayerGradientXActivation, LayerGradCam,
 * InternalInfluence, LayerConductance, LayerIntegratedGradients, NeuronGradient, NeuronIntegratedGradients,
 * NeuronConductance. Not implemented yet: the entries are registered with no attribute function. */
#include "attr/internal.h"

const cx_method cx_method_layer_activation = {CATTR_METHOD_LAYER_ACTIVATION, "layer-activation", "LayerActivation", false, NULL, NULL, NULL};
const cx_method cx_method_layer_gradient_x_activation = {CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION, "layer-gradient-x-activation", "LayerGradientXActivation", false, NULL, NULL, NULL};
const cx_method cx_method_layer_gradcam = {CATTR_METHOD_LAYER_GRADCAM, "layer-gradcam", "LayerGradCam", false, NULL, NULL, NULL};
const cx_method cx_method_internal_influence = {CATTR_METHOD_INTERNAL_INFLUENCE, "internal-influence", "InternalInfluence", false, NULL, NULL, NULL};
const cx_method cx_method_layer_conductance = {CATTR_METHOD_LAYER_CONDUCTANCE, "layer-conductance", "LayerConductance", false, NULL, NULL, NULL};
const cx_method cx_method_layer_integrated_gradients = {CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS, "layer-integrated-gradients", "LayerIntegratedGradients", false, NULL, NULL, NULL};
const cx_method cx_method_neuron_gradient = {CATTR_METHOD_NEURON_GRADIENT, "neuron-gradient", "NeuronGradient", false, NULL, NULL, NULL};
const cx_method cx_method_neuron_integrated_gradients = {CATTR_METHOD_NEURON_INTEGRATED_GRADIENTS, "neuron-integrated-gradients", "NeuronIntegratedGradients", false, NULL, NULL, NULL};
const cx_method cx_method_neuron_conductance = {CATTR_METHOD_NEURON_CONDUCTANCE, "neuron-conductance", "NeuronConductance", false, NULL, NULL, NULL};
