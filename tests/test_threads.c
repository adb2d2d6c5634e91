/* test_threads.c - the same numbers whatever the thread count: the digits model's forward pass over 40 rows (its
 * second convolution is an im2col product big enough for OpenBLAS to thread) and an IntegratedGradients call, in
 * float32, at 1, 2 and 3 OpenMP threads, bit for bit. (OpenBLAS's own threading rounds differently from one thread;
 * cattr cuts such products into blocks fixed by the problem, so a one-thread MPI rank agrees with a bigger process.) */
#include "cattr.h"
#include "test_util.h"

#include <omp.h>
#include <string.h>

int main(void) {
    cattr_model *m = NULL;
    cattr_tensor *x1 = NULL, *x = NULL;
    CHECK(cattr_model_load_onnx("models/digits/digits.onnx", &m) == CATTR_OK, "load digits.onnx");
    CHECK(cattr_tensor_load_npy("models/digits/samples/digit_3.npy", &x1) == CATTR_OK, "digit 3");
    int64_t sh[4] = {40, 1, 8, 8};
    CHECK(cattr_tensor_new(CATTR_FLOAT32, 4, sh, &x) == CATTR_OK, "batch");
    if (!m || !x1 || !x) return 1;
    float *xv = cattr_tensor_data(x);
    const float *x1v = cattr_tensor_data_const(x1);
    for (int r = 0; r < 40; r++)
        for (int k = 0; k < 64; k++) xv[r * 64 + k] = x1v[k] * (1.0f - 0.02f * (float)r) + 0.01f * (float)((r * 7 + k * 3) % 11);
    const cattr_tensor *in[1] = {x};
    cattr_tensor *y[3] = {0}, *a[3] = {0};
    int64_t tidx = 3;
    cattr_target t = {CATTR_TARGET_INDEX, 1, 0, &tidx};
    cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_INTEGRATED_GRADIENTS);
    p.n_steps = 16;
    cattr_explainer *e = NULL;
    CHECK(cattr_explainer_new(m, &p, &e) == CATTR_OK, "explainer");
    for (int k = 0; k < 3; k++) {
        omp_set_num_threads(k + 1);
        CHECK(cattr_model_forward(m, CATTR_FLOAT32, in, 1, &y[k]) == CATTR_OK, "forward at %d threads", k + 1);
        CHECK(e && cattr_explainer_attribute(e, in, 1, NULL, &t, NULL, 0, &a[k], NULL) == CATTR_OK,
              "IG at %d threads: %s", k + 1, cattr_last_error());
    }
    for (int k = 1; k < 3; k++) {
        CHECK(y[0] && y[k] && cattr_tensor_numel(y[0]) == cattr_tensor_numel(y[k]) &&
                  !memcmp(cattr_tensor_data_const(y[0]), cattr_tensor_data_const(y[k]),
                          (size_t)cattr_tensor_numel(y[0]) * sizeof(float)),
              "the forward pass at %d threads differs from 1 thread", k + 1);
        CHECK(a[0] && a[k] && cattr_tensor_numel(a[0]) == cattr_tensor_numel(a[k]) &&
                  !memcmp(cattr_tensor_data_const(a[0]), cattr_tensor_data_const(a[k]),
                          (size_t)cattr_tensor_numel(a[0]) * sizeof(float)),
              "IG at %d threads differs from 1 thread", k + 1);
    }
    for (int k = 0; k < 3; k++) {
        cattr_tensor_free(y[k]);
        cattr_tensor_free(a[k]);
    }
    cattr_explainer_free(e);
    cattr_tensor_free(x);
    cattr_tensor_free(x1);
    cattr_model_free(m);
    printf("test_threads: %d failed\n", g_failures);
    return g_failures ? 1 : 0;
}
