/* perturbation.c - perturbation methods: FeatureAblation, FeaturePermutation, Occlusion, ShapleyValueSampling,
 * ShapleyValues (Captum semantics: shared/reference/captum_spec.md). Not implemented yet: the entries are
 * registered with no attribute function. */
#include "attr/internal.h"

const cx_method cx_method_feature_ablation = {CATTR_METHOD_FEATURE_ABLATION, "feature-ablation", "FeatureAblation", false, NULL, NULL, NULL};
const cx_method cx_method_feature_permutation = {CATTR_METHOD_FEATURE_PERMUTATION, "feature-permutation", "FeaturePermutation", false, NULL, NULL, NULL};
const cx_method cx_method_occlusion = {CATTR_METHOD_OCCLUSION, "occlusion", "Occlusion", false, NULL, NULL, NULL};
const cx_method cx_method_shapley_value_sampling = {CATTR_METHOD_SHAPLEY_VALUE_SAMPLING, "shapley-value-sampling", "ShapleyValueSampling", false, NULL, NULL, NULL};
const cx_method cx_method_shapley_values = {CATTR_METHOD_SHAPLEY_VALUES, "shapley-values", "ShapleyValues", false, NULL, NULL, NULL};
