/* rules.c - methods that replace backward rules: DeepLift, DeepLiftShap, GuidedBackprop, Deconvolution, LRP.
 * Not implemented yet: the entries are registered with no attribute function. */
#include "attr/internal.h"

const cx_method cx_method_deeplift = {CATTR_METHOD_DEEPLIFT, "deeplift", "DeepLift", false, NULL, NULL, NULL};
const cx_method cx_method_deeplift_shap = {CATTR_METHOD_DEEPLIFT_SHAP, "deeplift-shap", "DeepLiftShap", true, NULL, NULL, NULL};
const cx_method cx_method_guided_backprop = {CATTR_METHOD_GUIDED_BACKPROP, "guided-backprop", "GuidedBackprop", false, NULL, NULL, NULL};
const cx_method cx_method_deconvolution = {CATTR_METHOD_DECONVOLUTION, "deconvolution", "Deconvolution", false, NULL, NULL, NULL};
const cx_method cx_method_lrp = {CATTR_METHOD_LRP, "lrp", "LRP", false, NULL, NULL, NULL};
