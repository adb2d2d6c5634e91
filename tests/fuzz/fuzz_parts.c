/* fuzz_parts.c - libFuzzer harness: the bytes of a split call's parts (cattr_explainer_combine), as they arrive from
 * other processes or machines, for the two kinds of parts: IntegratedGradients' unit sums (integrated_gradients.c) and the
 * state outputs of the perturbation and surrogate methods (split.c: FeatureAblation, KernelShap,
 * ShapleyValueSampling) and the accumulators of a layer method (split.c: LayerIntegratedGradients), on the bundled
 * digits model.
 *
 * The input: [u8 method][u8 number of parts] then per part [u32 little-endian length][bytes]. Method 0 IG (16 steps in
 * chunks of 5), 1 FeatureAblation (3 perturbations per pass), 2 KernelShap (20 samples, 7 per pass), 3
 * ShapleyValueSampling (2 permutations, 9 per pass), 4 LayerIntegratedGradients on conv2 (16 steps in chunks of 5),
 * each on digit_3 with target 3; parts 1 to 4. Seeds in
 * tests/fuzz/seeds/parts are real parts of these calls (made by running this harness's calls with
 * CATTR_FUZZ_PARTS_SEEDS=DIR, see LLVMFuzzerInitialize). */
#include "cattr.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_METHODS 5
static cattr_model *g_model;
static cattr_explainer *g_e[N_METHODS];
static cattr_tensor *g_x;
static int64_t g_tidx = 3;
static cattr_target g_t = {CATTR_TARGET_INDEX, 1, 0, &g_tidx};

static cattr_call the_call(const cattr_tensor *const *in) {
    cattr_call c = {in, 1, NULL, &g_t, NULL, 0, NULL, NULL, NULL, 0, NULL, 0, NULL};
    return c;
}

/* With CATTR_FUZZ_PARTS_SEEDS=DIR: writes DIR/m<method>-p<parts> for every method and 1-3 parts (real parts). */
static void write_seeds(const char *dir) {
    const cattr_tensor *in[1] = {g_x};
    cattr_call c = the_call(in);
    for (int k = 0; k < N_METHODS; k++)
        for (int n = 1; n <= 3; n++) {
            char path[4200];
            snprintf(path, sizeof path, "%s/m%d-p%d", dir, k, n);
            FILE *f = fopen(path, "wb");
            if (!f) continue;
            fputc(k, f);
            fputc(n, f);
            for (int p = 0; p < n; p++) {
                void *b = NULL;
                size_t len = 0;
                if (cattr_explainer_run_part(g_e[k], &c, p, n, &b, &len) != CATTR_OK) len = 0;
                uint8_t l4[4] = {(uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16), (uint8_t)(len >> 24)};
                fwrite(l4, 1, 4, f);
                if (len) fwrite(b, 1, len, f);
                free(b);
            }
            fclose(f);
        }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    if (cattr_model_load_onnx(CATTR_SOURCE_DIR "/models/digits/digits.onnx", &g_model) != CATTR_OK ||
        cattr_tensor_load_npy(CATTR_SOURCE_DIR "/models/digits/samples/digit_3.npy", &g_x) != CATTR_OK) {
        fprintf(stderr, "fuzz_parts: %s\n", cattr_last_error());
        exit(1);
    }
    cattr_method ms[N_METHODS] = {CATTR_METHOD_INTEGRATED_GRADIENTS, CATTR_METHOD_FEATURE_ABLATION,
                                  CATTR_METHOD_KERNEL_SHAP, CATTR_METHOD_SHAPLEY_VALUE_SAMPLING,
                                  CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS};
    for (int k = 0; k < N_METHODS; k++) {
        cattr_attr_params p = cattr_attr_default_params(ms[k]);
        p.n_steps = 16;
        p.internal_batch_size = 5;
        p.perturbations_per_eval = k == 1 ? 3 : k == 2 ? 7 : 9;
        p.n_samples = k == 2 ? 20 : 2;
        p.return_convergence_delta = k == 0 || k == 4;
        if (k == 4) p.layer = "conv2";
        if (cattr_explainer_new(g_model, &p, &g_e[k]) != CATTR_OK) {
            fprintf(stderr, "fuzz_parts: %s\n", cattr_last_error());
            exit(1);
        }
    }
    const char *dir = getenv("CATTR_FUZZ_PARTS_SEEDS");
    if (dir) write_seeds(dir);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    int k = data[0] % N_METHODS, n = data[1] % 4 + 1;
    const void *blobs[4] = {0};
    size_t lens[4] = {0};
    size_t at = 2;
    for (int p = 0; p < n; p++) { /* a short input gives empty parts */
        size_t len = 0;
        if (at + 4 <= size) {
            len = (size_t)data[at] | (size_t)data[at + 1] << 8 | (size_t)data[at + 2] << 16 | (size_t)data[at + 3] << 24;
            at += 4;
        }
        if (len > size - (at < size ? at : size)) len = size - (at < size ? at : size);
        blobs[p] = data + (at < size ? at : size);
        lens[p] = len;
        at += len;
    }
    const cattr_tensor *in[1] = {g_x};
    cattr_call c = the_call(in);
    cattr_tensor *attr = NULL, *delta = NULL;
    cattr_status st = cattr_explainer_combine(g_e[k], &c, blobs, lens, n, &attr, k == 0 || k == 4 ? &delta : NULL);
    if (st == CATTR_OK && (!attr || cattr_tensor_numel(attr) != (k == 4 ? 256 : 64))) abort(); /* one result */
    if (st != CATTR_OK && attr) abort();                                      /* a failure leaves nothing */
    cattr_tensor_free(attr);
    cattr_tensor_free(delta);
    return 0;
}
