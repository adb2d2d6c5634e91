/* test_noise.c - NoiseTunnel's noise drawn on the backend (the NormalNoise op) is the documented generator's: a
 * SmoothGrad around Saliency (the tunnel on the backend) over 2 examples, 5 samples in partitions of 2, 2 and 1,
 * equals the mean of Saliency over noisy inputs this test builds itself from cx_rng_normal_at at each sample's
 * stream and blocks (cx_tunnel_noise_stream); float64, so only the order of the 5-term means can differ. */
#include "attr/internal.h"
#include "cattr.h"
#include "core/rng.h"
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    cattr_model *m = NULL;
    CHECK(cattr_model_load_onnx("models/digits/digits.onnx", &m) == CATTR_OK, "load digits.onnx");
    cattr_tensor *x1 = NULL;
    CHECK(cattr_tensor_load_npy("models/digits/samples/digit_3.npy", &x1) == CATTR_OK, "digit 3");
    if (!m || !x1) return 1;
    enum { B = 2, N = 5, PER = 64 };
    const uint64_t seed = 7;
    const float sd = 0.3f;
    int64_t sx[4] = {B, 1, 8, 8}, sn[4] = {B * N, 1, 8, 8};
    cattr_tensor *x = NULL, *noisy = NULL;
    CHECK(cattr_tensor_new(CATTR_FLOAT64, 4, sx, &x) == CATTR_OK && cattr_tensor_new(CATTR_FLOAT64, 4, sn, &noisy) ==
          CATTR_OK, "tensors");
    double *xv = cattr_tensor_data(x), *nv = cattr_tensor_data(noisy);
    const float *x1v = cattr_tensor_data_const(x1);
    for (int b = 0; b < B; b++)
        for (int k = 0; k < PER; k++) xv[b * PER + k] = (double)x1v[k] * (b ? 0.5 : 1.0);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < N; j++)
            for (int k = 0; k < PER; k++) {
                float z = (float)cx_rng_normal_at(seed, cx_tunnel_noise_stream(0, b), (uint64_t)(j * PER + k));
                nv[(b * N + j) * PER + k] = xv[b * PER + k] + (double)(float)((double)sd * (double)z);
            }
    int64_t tidx = 3;
    cattr_target t = {CATTR_TARGET_INDEX, 1, 0, &tidx};
    cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_SALIENCY);
    p.dtype = CATTR_FLOAT64;
    cattr_explainer *plain = NULL, *tunnel = NULL;
    CHECK(cattr_explainer_new(m, &p, &plain) == CATTR_OK, "saliency");
    p.nt_type = CATTR_NT_SMOOTHGRAD;
    p.nt_samples = N;
    p.nt_samples_batch_size = 2;
    p.stdevs = sd;
    p.seed = seed;
    CHECK(cattr_explainer_new(m, &p, &tunnel) == CATTR_OK, "smoothgrad");
    cattr_tensor *g = NULL, *a = NULL;
    const cattr_tensor *in_n[1] = {noisy}, *in_x[1] = {x};
    CHECK(plain && cattr_explainer_attribute(plain, in_n, 1, NULL, &t, NULL, 0, &g, NULL) == CATTR_OK,
          "saliency on the noisy inputs: %s", cattr_last_error());
    CHECK(tunnel && cattr_explainer_attribute(tunnel, in_x, 1, NULL, &t, NULL, 0, &a, NULL) == CATTR_OK,
          "smoothgrad: %s", cattr_last_error());
    if (g && a) {
        const double *gv = cattr_tensor_data_const(g), *av = cattr_tensor_data_const(a);
        double worst = 0, scale = 0;
        for (int b = 0; b < B; b++)
            for (int k = 0; k < PER; k++) {
                double s = 0;
                for (int j = 0; j < N; j++) s += gv[(b * N + j) * PER + k];
                worst = fmax(worst, fabs(av[b * PER + k] - s / N));
                scale = fmax(scale, fabs(s / N));
            }
        CHECK(scale > 0 && worst <= 1e-12 * scale, "smoothgrad differs from the mean over the generator's noise by %g "
              "(largest value %g)", worst, scale);
    }
    cattr_tensor_free(g);
    cattr_tensor_free(a);
    /* NoiseTunnel around IntegratedGradients: the noisy inputs, IG's passes, its convergence deltas and the sums stay
     * on the backend (run_tunnel_io); the host route (run_tunnel) runs for a call cut into one part and combined. Same
     * numbers, attributions and deltas (==: a sum starting from zero may turn -0 into +0), for every tunnel type, both
     * dtypes, IG in two halves (the default here) and in chunks; and around DeepLift (with and without
     * multiply_by_inputs: "chunks" 1 turns it off there), FeatureAblation, Occlusion, ShapleyValueSampling, KernelShap
     * and Lime (no delta; Occlusion's window sums are made on the host and go up into the sums; Lime's weights, cosine
     * and in chunks euclidean, on the backend). LRP's tunnel does not split:
     * its attributions with and without deltas are compared, and its deltas checked to be one per sample row. */
    static const cattr_method wrapped[8] = {CATTR_METHOD_INTEGRATED_GRADIENTS, CATTR_METHOD_DEEPLIFT, CATTR_METHOD_LRP,
                                            CATTR_METHOD_FEATURE_ABLATION, CATTR_METHOD_OCCLUSION,
                                            CATTR_METHOD_SHAPLEY_VALUE_SAMPLING, CATTR_METHOD_KERNEL_SHAP,
                                            CATTR_METHOD_LIME};
    for (int dl = 0; dl < 8; dl++)
    for (int dt = 0; dt < 2; dt++)
        for (int type = CATTR_NT_SMOOTHGRAD; type <= CATTR_NT_VARGRAD; type++)
            for (int chunks = 0; chunks < 2; chunks++) {
                cattr_attr_params q = cattr_attr_default_params(wrapped[dl]);
                q.dtype = dt ? CATTR_FLOAT64 : CATTR_FLOAT32;
                q.nt_type = (cattr_noise_tunnel)type;
                q.nt_samples = N;
                q.nt_samples_batch_size = 2;
                q.stdevs = sd;
                q.seed = seed;
                q.n_steps = 8;
                if (chunks && !dl) q.internal_batch_size = 3 * B * 2; /* 3 steps of the 2 samples' examples per chunk */
                if (chunks && dl == 1) q.multiply_by_inputs = false;
                if (chunks && dl >= 3) q.perturbations_per_eval = 5;
                if (dl == 4) { /* 2 x 2 windows at stride 2 (1 x 3 x 3 at stride 2 in chunks: overlapping) */
                    q.sliding_window_ndim[0] = q.strides_ndim[0] = 3;
                    q.sliding_window[0][0] = q.strides[0][0] = 1;
                    q.sliding_window[0][1] = q.sliding_window[0][2] = chunks ? 3 : 2;
                    q.strides[0][1] = q.strides[0][2] = 2;
                }
                if (dl == 5) q.n_samples = 2;
                if (dl >= 6) q.n_samples = 30;
                if (dl == 7 && chunks) q.lime_euclidean = 1;
                bool deltas = dl < 3;
                q.return_convergence_delta = deltas;
                cattr_explainer *e1 = NULL, *e2 = NULL;
                CHECK(cattr_explainer_new(m, &q, &e1) == CATTR_OK, "tunnel IG");
                if (dl == 2) q.return_convergence_delta = false;
                CHECK(cattr_explainer_new(m, &q, &e2) == CATTR_OK, "tunnel on the host route");
                cattr_tensor *a1 = NULL, *a2 = NULL, *d1 = NULL, *d2 = NULL;
                CHECK(e1 && cattr_explainer_attribute(e1, in_x, 1, NULL, &t, NULL, 0, &a1, deltas ? &d1 : NULL) ==
                          CATTR_OK, "tunnel on the backend: %s", cattr_last_error());
                if (dl == 2) {
                    CHECK(e2 && cattr_explainer_attribute(e2, in_x, 1, NULL, &t, NULL, 0, &a2, NULL) == CATTR_OK,
                          "tunnel without deltas: %s", cattr_last_error());
                    CHECK(d1 && cattr_tensor_numel(d1) == B * N, "LRP's tunnel: one delta per sample row");
                } else if (e2) {
                    cattr_call call = {in_x, 1, NULL, &t, NULL, 0, NULL, NULL, NULL, 0, NULL, 0, NULL};
                    void *blob = NULL;
                    size_t len = 0;
                    CHECK(cattr_explainer_run_part(e2, &call, 0, 1, &blob, &len) == CATTR_OK &&
                              cattr_explainer_combine(e2, &call, (const void *const *)&blob, &len, 1, &a2,
                                                      deltas ? &d2 : NULL) == CATTR_OK,
                          "tunnel in one part: %s", cattr_last_error());
                    free(blob);
                }
                for (int w = 0; w < 2; w++) { /* the attributions, then the deltas */
                    const cattr_tensor *u1 = w ? d1 : a1, *u2 = w ? d2 : a2;
                    if (w && dl == 2) continue;
                    if (w && !deltas) {
                        CHECK(!d1 && !d2, "a delta where none was asked");
                        continue;
                    }
                    CHECK(u1 && u2, "tunnel %d: %s missing", dl, w ? "deltas" : "attributions");
                    if (!u1 || !u2) continue;
                    int64_t bad = 0, n_el = cattr_tensor_numel(u1);
                    for (int64_t k = 0; k < n_el && k < cattr_tensor_numel(u2); k++) {
                        double v1 = dt ? ((const double *)cattr_tensor_data_const(u1))[k] : ((const float *)cattr_tensor_data_const(u1))[k];
                        double v2 = dt ? ((const double *)cattr_tensor_data_const(u2))[k] : ((const float *)cattr_tensor_data_const(u2))[k];
                        bad += !(v1 == v2);
                    }
                    CHECK(n_el == (w ? B * N : B * PER) && n_el == cattr_tensor_numel(u2) && bad == 0,
                          "tunnel %s (%s, type %d, variant %d): %lld of %lld %s differ between the backend and the "
                          "host route",
                          cattr_method_name(wrapped[dl]),
                          dt ? "float64" : "float32", type, chunks, (long long)bad, (long long)n_el,
                          w ? "deltas" : "values");
                }
                cattr_tensor_free(a1);
                cattr_tensor_free(a2);
                cattr_tensor_free(d1);
                cattr_tensor_free(d2);
                cattr_explainer_free(e1);
                cattr_explainer_free(e2);
            }
    { /* ShapleyValues' tunnel (on the backend route; it does not split) at standard deviation 0: every sample is the
       * input, so smoothgrad is ShapleyValues itself, to the rounding of a mean of equal values */
        cattr_attr_params q = cattr_attr_default_params(CATTR_METHOD_SHAPLEY_VALUES);
        cattr_explainer *e1 = NULL, *e2 = NULL;
        CHECK(cattr_explainer_new(m, &q, &e2) == CATTR_OK, "ShapleyValues");
        q.nt_type = CATTR_NT_SMOOTHGRAD;
        q.nt_samples = 3;
        q.nt_samples_batch_size = 2;
        q.stdevs = 0;
        CHECK(cattr_explainer_new(m, &q, &e1) == CATTR_OK, "ShapleyValues' tunnel");
        int64_t msh[4] = {1, 1, 8, 8};
        cattr_tensor *mask = NULL, *a1 = NULL, *a2 = NULL;
        CHECK(cattr_tensor_new(CATTR_INT64, 4, msh, &mask) == CATTR_OK, "mask");
        for (int k = 0; mask && k < 64; k++) ((int64_t *)cattr_tensor_data(mask))[k] = k / 16; /* 4 features */
        const cattr_tensor *masks[1] = {mask};
        cattr_call call = {in_x, 1, NULL, &t, NULL, 0, masks, NULL, NULL, 0, NULL, 0, NULL};
        CHECK(e1 && e2 && cattr_explainer_run(e1, &call, &a1, NULL) == CATTR_OK &&
                  cattr_explainer_run(e2, &call, &a2, NULL) == CATTR_OK,
              "ShapleyValues with and without the tunnel: %s", cattr_last_error());
        double worst = 0, scale = 0;
        for (int64_t k = 0; a1 && a2 && k < cattr_tensor_numel(a1); k++) {
            double u = ((const float *)cattr_tensor_data_const(a1))[k], w = ((const float *)cattr_tensor_data_const(a2))[k];
            worst = fmax(worst, fabs(u - w));
            scale = fmax(scale, fabs(w));
        }
        CHECK(a1 && a2 && scale > 0 && worst <= 1e-6 * scale, "ShapleyValues' tunnel at stdev 0 differs by %g (of %g)",
              worst, scale);
        cattr_tensor_free(mask);
        cattr_tensor_free(a1);
        cattr_tensor_free(a2);
        cattr_explainer_free(e1);
        cattr_explainer_free(e2);
    }
    cattr_explainer_free(plain);
    cattr_explainer_free(tunnel);
    cattr_tensor_free(x);
    cattr_tensor_free(noisy);
    cattr_tensor_free(x1);
    cattr_model_free(m);
    printf("test_noise: %d failed\n", g_failures);
    return g_failures ? 1 : 0;
}
