/* explain_digits.c - the smallest complete use of the C API: Integrated Gradients for the bundled digits model.
 * Build: cc explain_digits.c $(pkg-config --cflags --libs cattr)   Run from the repository root. */
#include <cattr.h>

#include <stdio.h>

int main(void) {
    cattr_model *m = NULL;
    cattr_tensor *x = NULL, *attr = NULL, *delta = NULL;
    cattr_explainer *e = NULL;
    int rc = 1;
    if (cattr_model_load_onnx("models/digits/digits.onnx", &m) != CATTR_OK ||
        cattr_tensor_load_npy("models/digits/samples/digit_3.npy", &x) != CATTR_OK)
        goto done;
    cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_INTEGRATED_GRADIENTS);
    if (cattr_explainer_new(m, &p, &e) != CATTR_OK) goto done;
    int64_t cls = 3;
    cattr_target t = {CATTR_TARGET_INDEX, 1, 0, &cls};
    const cattr_tensor *inputs[1] = {x};
    if (cattr_explainer_attribute(e, inputs, 1, NULL, &t, NULL, 0, &attr, &delta) != CATTR_OK) goto done;
    const float *a = cattr_tensor_data_const(attr);
    double sum = 0;
    for (int64_t i = 0; i < cattr_tensor_numel(attr); i++) sum += a[i];
    printf("sum of attributions %.4f, convergence delta %.4f\n", sum, ((const float *)cattr_tensor_data_const(delta))[0]);
    rc = 0;
done:
    if (rc) fprintf(stderr, "error: %s\n", cattr_last_error());
    cattr_tensor_free(attr);
    cattr_tensor_free(delta);
    cattr_tensor_free(x);
    cattr_explainer_free(e);
    cattr_model_free(m);
    return rc;
}
