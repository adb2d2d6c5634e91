/* test_digits.c - end-to-end checks on the bundled digits model: the forward pass reproduces PyTorch's logits and
 * Integrated Gradients reproduces a float64 PyTorch computation (models/digits/README.md), through the public API,
 * with both executors. Also runs the convergence-delta and several API error paths. */
#include "cattr.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int checks, fails;
#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        checks++;                                                                                                      \
        if (!(cond)) {                                                                                                 \
            fails++;                                                                                                   \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                                \
            printf(__VA_ARGS__);                                                                                       \
            printf(" (last error: %s)\n", cattr_last_error());                                                        \
        }                                                                                                              \
    } while (0)

/* max |a-b| / max |b| */
static double rel_err(const cattr_tensor *a, const cattr_tensor *b) {
    cattr_tensor *x = NULL, *y = NULL;
    cattr_tensor_convert(a, CATTR_FLOAT64, &x);
    cattr_tensor_convert(b, CATTR_FLOAT64, &y);
    const double *p = cattr_tensor_data_const(x), *q = cattr_tensor_data_const(y);
    double e = 0, m = 0;
    for (int64_t i = 0; i < cattr_tensor_numel(y); i++) {
        if (fabs(p[i] - q[i]) > e) e = fabs(p[i] - q[i]);
        if (fabs(q[i]) > m) m = fabs(q[i]);
    }
    cattr_tensor_free(x);
    cattr_tensor_free(y);
    return m > 0 ? e / m : e;
}

int main(void) {
    cattr_model *m = NULL;
    cattr_status st = cattr_model_load_onnx("models/digits/digits.onnx", &m);
    CHECK(st == CATTR_OK, "load digits.onnx");
    if (st != CATTR_OK) return 1;
    CHECK(cattr_model_n_inputs(m) == 1 && !strcmp(cattr_model_input_name(m, 0), "input"), "input name");

    /* forward: 5 samples against PyTorch's float32 logits */
    const char *names[5] = {"0", "3", "5", "7", "9"};
    cattr_tensor *logits = NULL;
    CHECK(cattr_tensor_load_npy("models/digits/expected_logits.npy", &logits) == CATTR_OK, "expected logits");
    for (int k = 0; k < 5 && logits; k++) {
        char path[128];
        snprintf(path, sizeof path, "models/digits/samples/digit_%s.npy", names[k]);
        cattr_tensor *x = NULL, *y = NULL;
        CHECK(cattr_tensor_load_npy(path, &x) == CATTR_OK, "load %s", path);
        if (!x) continue;
        const cattr_tensor *in[1] = {x};
        CHECK(cattr_model_forward(m, CATTR_FLOAT32, in, 1, &y) == CATTR_OK, "forward %s", path);
        if (y) {
            const float *yv = cattr_tensor_data_const(y), *ev = (const float *)cattr_tensor_data_const(logits) + 10 * k;
            double e = 0;
            for (int c = 0; c < 10; c++) e = fmax(e, fabs(yv[c] - ev[c]));
            CHECK(e < 1e-4, "logits of digit %s differ by %g", names[k], e);
        }
        cattr_tensor_free(x);
        cattr_tensor_free(y);
    }
    cattr_tensor_free(logits);

    /* IG on digit 3 against the float64 PyTorch reference */
    cattr_tensor *x = NULL, *ref = NULL;
    CHECK(cattr_tensor_load_npy("models/digits/samples/digit_3.npy", &x) == CATTR_OK, "digit_3");
    CHECK(cattr_tensor_load_npy("models/digits/ig_expected.npy", &ref) == CATTR_OK, "ig_expected");
    int64_t tidx = 3;
    cattr_target t = {CATTR_TARGET_INDEX, 1, 0, &tidx};
    for (int dt = 0; dt < 2 && x && ref; dt++) {
        for (int ex = 0; ex < 2; ex++) {
            cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_INTEGRATED_GRADIENTS);
            p.dtype = dt ? CATTR_FLOAT64 : CATTR_FLOAT32;
            p.executor = ex ? CATTR_EXEC_EAGER : CATTR_EXEC_PLANNED;
            cattr_explainer *e = NULL;
            CHECK(cattr_explainer_new(m, &p, &e) == CATTR_OK, "explainer");
            const cattr_tensor *in[1] = {x};
            cattr_tensor *a = NULL, *d = NULL;
            for (int rep = 0; rep < 2; rep++) { /* the second call reuses the plans */
                cattr_tensor_free(a);
                cattr_tensor_free(d);
                a = d = NULL;
                st = cattr_explainer_attribute(e, in, 1, NULL, &t, NULL, 0, &a, &d);
                CHECK(st == CATTR_OK, "attribute dtype %d executor %d", dt, ex);
            }
            if (a) {
                double err = rel_err(a, ref);
                CHECK(err < (dt ? 1e-9 : 1e-5), "IG dtype %d executor %d: rel err %g", dt, ex, err);
                /* completeness up to the path's quadrature error: the delta is small against the logit gap (10.45) */
                double dv = cattr_tensor_dtype(d) == CATTR_FLOAT32 ? ((const float *)cattr_tensor_data_const(d))[0]
                                                                   : ((const double *)cattr_tensor_data_const(d))[0];
                CHECK(fabs(dv) < 0.2, "convergence delta %g", dv);
            }
            cattr_tensor_free(a);
            cattr_tensor_free(d);
            cattr_explainer_free(e);
        }
    }

    /* precision "high": bfloat16 inputs to the Gemm layers (the convolutions stay exact); refused in float64 and on a
     * device without bfloat16 products */
    if (x && ref) {
        cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_INTEGRATED_GRADIENTS);
        p.precision = CATTR_PRECISION_HIGH;
        cattr_explainer *e = NULL;
        st = cattr_explainer_new(m, &p, &e);
        if (st == CATTR_ERR_UNSUPPORTED) {
            printf("SKIP precision high: %s\n", cattr_last_error());
        } else {
            CHECK(st == CATTR_OK, "precision high explainer: %s", cattr_last_error());
            const cattr_tensor *in[1] = {x};
            cattr_tensor *a = NULL;
            CHECK(cattr_explainer_attribute(e, in, 1, NULL, &t, NULL, 0, &a, NULL) == CATTR_OK, "high: %s",
                  cattr_last_error());
            if (a) {
                double err = rel_err(a, ref);
                printf("precision high: IG rel err %.3e against the float64 reference\n", err);
                CHECK(err > 1e-5 && err < 3e-2, "precision high: rel err %g (bfloat16 products expected)", err);
            }
            cattr_tensor_free(a);
        }
        cattr_explainer_free(e);
        e = NULL;
        p.dtype = CATTR_FLOAT64;
        CHECK(cattr_explainer_new(m, &p, &e) == CATTR_ERR_INVALID_ARGUMENT && !e, "high with float64 refused");
        p.dtype = CATTR_FLOAT32;
        p.device = "cpu-check";
        CHECK(cattr_explainer_new(m, &p, &e) == CATTR_ERR_UNSUPPORTED && !e, "high on cpu-check refused");
        p.precision = (cattr_precision)7;
        p.device = NULL;
        CHECK(cattr_explainer_new(m, &p, &e) == CATTR_ERR_INVALID_ARGUMENT && !e, "unknown precision refused");
    }

    /* API errors */
    cattr_explainer *e = NULL;
    cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_INTEGRATED_GRADIENTS);
    p.n_steps = 0;
    CHECK(cattr_explainer_new(m, &p, &e) == CATTR_ERR_INVALID_ARGUMENT && !e, "n_steps 0 rejected");
    p = cattr_attr_default_params(CATTR_METHOD_SALIENCY);
    CHECK(cattr_explainer_new(m, &p, &e) == CATTR_OK, "saliency explainer");
    if (e && x) {
        cattr_tensor *a = NULL;
        const cattr_tensor *in[1] = {x};
        int64_t bad = 10;
        cattr_target tb = {CATTR_TARGET_INDEX, 1, 0, &bad};
        CHECK(cattr_explainer_attribute(e, in, 1, NULL, &tb, NULL, 0, &a, NULL) == CATTR_ERR_TARGET && !a,
              "target 10 rejected");
        CHECK(strstr(cattr_last_error(), "out of range") != NULL, "message names the range");
        CHECK(cattr_explainer_attribute(e, in, 1, NULL, NULL, NULL, 0, &a, NULL) == CATTR_ERR_TARGET,
              "missing target on a 10-class output rejected");
        CHECK(cattr_explainer_attribute(e, in, 2, NULL, &t, NULL, 0, &a, NULL) == CATTR_ERR_INVALID_ARGUMENT,
              "two inputs for a one-input model rejected");
    }
    cattr_explainer_free(e);
    cattr_explainer_free(NULL);
    cattr_model_free(NULL);
    cattr_tensor_free(NULL);
    cattr_tensor_free(x);
    cattr_tensor_free(ref);
    cattr_model_free(m);
    printf("test_digits: %d checks, %d failed\n", checks, fails);
    return fails ? 1 : 0;
}
