/* noise.c - GradientShap (and NoiseTunnel, later). Not implemented yet: the entry is registered with no attribute
 * function. */
#include "attr/internal.h"

const cx_method cx_method_gradient_shap = {CATTR_METHOD_GRADIENT_SHAP, "gradient-shap", "GradientShap", true, NULL, NULL, NULL};

cattr_status (*const cx_noise_tunnel)(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) = NULL;
