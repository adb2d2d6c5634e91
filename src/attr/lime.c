/* lime.c - interpretable-model methods: Lime and KernelShap. Not implemented yet: the entries are registered with
 * no attribute function. */
#include "attr/internal.h"

const cx_method cx_method_lime = {CATTR_METHOD_LIME, "lime", "Lime", false, NULL, NULL, NULL};
const cx_method cx_method_kernel_shap = {CATTR_METHOD_KERNEL_SHAP, "kernel-shap", "KernelShap", false, NULL, NULL, NULL};
