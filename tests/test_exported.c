/* test_exported.c - models exported from PyTorch by tools/export_test_models.py (torch.onnx.export at opsets 14 and
 * 17 with constant folding: LayerNorm decomposed and as LayerNormalization, GELU through Erf, Hardswish and
 * Hardsigmoid in a squeeze-and-excitation block with its BatchNorm folded into the Conv, ELU / SELU / Softplus, Pow,
 * Sqrt, shapes computed from shapes: a channel shuffle and chunk, ViT's expanded class token) load, and cattr's
 * forward pass and input gradient of the target output (Saliency, signed) agree with what
 * PyTorch computed, in float32 (1e-5 of the largest value) and float64 (the same bound: PyTorch ran in float32), on
 * the cpu and cpu-check devices. */
#include "test_util.h"

#include "cattr.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define DIR "tests/data/exported/"

static double max_abs_t(const cattr_tensor *t) {
    double m = 0;
    for (int64_t i = 0; i < cattr_tensor_numel(t); i++) {
        double v = cattr_tensor_dtype(t) == CATTR_FLOAT64 ? ((const double *)cattr_tensor_data((cattr_tensor *)t))[i]
                                                           : ((const float *)cattr_tensor_data((cattr_tensor *)t))[i];
        m = fmax(m, fabs(v));
    }
    return m;
}

/* max |a - b| (a in any float dtype, b float32) */
static double max_diff_t(const cattr_tensor *a, const cattr_tensor *b) {
    double m = 0;
    for (int64_t i = 0; i < cattr_tensor_numel(b); i++) {
        double va = cattr_tensor_dtype(a) == CATTR_FLOAT64 ? ((const double *)cattr_tensor_data((cattr_tensor *)a))[i]
                                                            : ((const float *)cattr_tensor_data((cattr_tensor *)a))[i];
        m = fmax(m, fabs(va - ((const float *)cattr_tensor_data((cattr_tensor *)b))[i]));
    }
    return m;
}

static cattr_tensor *load(const char *name, const char *part) {
    char path[256];
    snprintf(path, sizeof path, DIR "%s.%s.npy", name, part);
    cattr_tensor *t = NULL;
    CHECK(cattr_tensor_load_npy(path, &t) == CATTR_OK, "%s: %s", path, cattr_last_error());
    return t;
}

static void check_model(const char *name) {
    char path[256];
    snprintf(path, sizeof path, DIR "%s.onnx", name);
    cattr_model *m = NULL;
    CHECK(cattr_model_load_onnx(path, &m) == CATTR_OK, "load %s: %s", path, cattr_last_error());
    cattr_tensor *x = load(name, "x"), *y = load(name, "y"), *g = load(name, "g"), *t = load(name, "t");
    if (!m || !x || !y || !g || !t) goto done;
    const cattr_tensor *in[1] = {x};
    for (int dev = 0; dev < 2; dev++)
        for (int d = 0; d < 2; d++) {
            cattr_dtype dt = d ? CATTR_FLOAT64 : CATTR_FLOAT32;
            const char *device = dev ? "cpu-check" : "cpu";
            CHECK(cattr_model_set_device(m, device) == CATTR_OK, "device %s", device);
            cattr_tensor *out = NULL, *attr = NULL;
            CHECK(cattr_model_forward(m, dt, in, 1, &out) == CATTR_OK, "%s forward: %s", name, cattr_last_error());
            if (out) {
                double e = max_diff_t(out, y), s = max_abs_t(y);
                printf("%s %s %s: forward error %.2e of %.3f", name, device, cattr_dtype_name(dt), e, s);
                CHECK(e <= 1e-5 * s, "%s %s %s: forward differs from PyTorch by %.2e", name, device, cattr_dtype_name(dt), e);
            }
            cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_SALIENCY);
            p.abs = 0;
            p.dtype = dt;
            cattr_explainer *ex = NULL;
            CHECK(cattr_explainer_new(m, &p, &ex) == CATTR_OK, "%s explainer: %s", name, cattr_last_error());
            cattr_target tg = {CATTR_TARGET_PER_EXAMPLE, 1, cattr_tensor_numel(t), cattr_tensor_data(t)};
            if (ex) CHECK(cattr_explainer_attribute(ex, in, 1, NULL, &tg, NULL, 0, &attr, NULL) == CATTR_OK,
                          "%s gradient: %s", name, cattr_last_error());
            if (attr) {
                double e = max_diff_t(attr, g), s = max_abs_t(g);
                printf(", gradient error %.2e of %.3f\n", e, s);
                CHECK(e <= 1e-5 * s, "%s %s %s: gradient differs from PyTorch's by %.2e", name, device,
                      cattr_dtype_name(dt), e);
            } else {
                printf("\n");
            }
            cattr_explainer_free(ex);
            cattr_tensor_free(out);
            cattr_tensor_free(attr);
        }
done:
    cattr_tensor_free(x);
    cattr_tensor_free(y);
    cattr_tensor_free(g);
    cattr_tensor_free(t);
    cattr_model_free(m);
}

/* PyTorch module paths of nested modules resolve (torch 1.13's scopes "/block/block.1/fc/Gemm"), and layer methods
 * take them. */
static void check_paths(void) {
    cattr_model *m = NULL;
    CHECK(cattr_model_load_onnx(DIR "nested_op14.onnx", &m) == CATTR_OK, "load nested: %s", cattr_last_error());
    if (!m) return;
    static const char *const paths[4] = {"block.0", "block.1.fc", "block.1", "block.1.mlp.0"};
    for (int k = 0; k < 4; k++) {
        const char *v = NULL;
        CHECK(cattr_model_resolve_value(m, paths[k], &v) == CATTR_OK, "module path '%s': %s", paths[k], cattr_last_error());
        if (v) printf("module path %s -> %s\n", paths[k], v);
    }
    const char *v = NULL;
    CHECK(cattr_model_resolve_value(m, "block.block.1.fc", &v) != CATTR_OK, "the scope-joined name must not resolve");
    CHECK(cattr_model_resolve_value(m, "block.1.mlp.mlp.0", &v) != CATTR_OK, "the scope-joined name must not resolve");
    cattr_model_free(m);
    /* a BatchNorm the export folded into its Conv is named in the description (and only there) */
    static char buf[16384];
    m = NULL;
    CHECK(cattr_model_load_onnx(DIR "mobile_block_op14.onnx", &m) == CATTR_OK, "load: %s", cattr_last_error());
    if (m) {
        cattr_model_describe(m, buf, sizeof buf);
        const char *line = strstr(buf, "\n  conv ");
        CHECK(line && strstr(line, "BatchNorm folded") && strstr(line, "BatchNorm folded") < strchr(line + 1, '\n'),
              "conv's line must say a BatchNorm was folded in:\n%s", buf);
        CHECK(strstr(buf, "do_constant_folding=False") != NULL, "the description must say how to keep the boundary");
        cattr_model_free(m);
    }
    CHECK(cattr_model_load_onnx(DIR "act_mlp_op14.onnx", &m) == CATTR_OK, "load");
    if (m) {
        cattr_model_describe(m, buf, sizeof buf);
        CHECK(!strstr(buf, "folded"), "no BatchNorm was folded in act_mlp:\n%s", buf);
        cattr_model_free(m);
    }
}

/* A graph whose reshapes and slices take shapes computed from the input's shape plans per batch size: one example
 * alone gives that example's outputs. */
static void check_batch_one(const char *name) {
    char path[256];
    snprintf(path, sizeof path, DIR "%s.onnx", name);
    cattr_model *m = NULL;
    cattr_tensor *x = load(name, "x"), *y = load(name, "y"), *x1 = NULL, *y1 = NULL;
    CHECK(cattr_model_load_onnx(path, &m) == CATTR_OK, "load %s: %s", path, cattr_last_error());
    if (m && x && y) {
        int64_t sh[CATTR_MAX_DIMS];
        int nd = cattr_tensor_ndim(x);
        for (int d = 0; d < nd; d++) sh[d] = cattr_tensor_shape(x)[d];
        sh[0] = 1;
        CHECK(cattr_tensor_new(CATTR_FLOAT32, nd, sh, &x1) == CATTR_OK, "tensor");
        if (x1) memcpy(cattr_tensor_data(x1), cattr_tensor_data(x), (size_t)cattr_tensor_numel(x1) * sizeof(float));
        const cattr_tensor *in[1] = {x1};
        CHECK(x1 && cattr_model_forward(m, CATTR_FLOAT32, in, 1, &y1) == CATTR_OK, "%s batch 1: %s", name, cattr_last_error());
        if (y1) {
            int64_t per = cattr_tensor_numel(y1);
            double e = 0;
            for (int64_t k = 0; k < per; k++)
                e = fmax(e, fabs(((float *)cattr_tensor_data(y1))[k] - ((float *)cattr_tensor_data(y))[k]));
            printf("%s batch 1 vs the first row of batch 2: %.2e\n", name, e);
            CHECK(e <= 1e-5 * max_abs_t(y), "%s: batch 1 differs from batch 2's first row by %.2e", name, e);
        }
    }
    cattr_tensor_free(x);
    cattr_tensor_free(y);
    cattr_tensor_free(x1);
    cattr_tensor_free(y1);
    cattr_model_free(m);
}

int main(void) {
    check_paths();
    check_model("shape_ops_op14");
    check_batch_one("shape_ops_op14");
    check_model("token_cat_op14");
    check_batch_one("token_cat_op14");
    check_model("nested_op14");
    check_model("gelu_ln_mlp_op14");
    check_model("gelu_ln_mlp_op17");
    check_model("mobile_block_op14");
    check_model("act_mlp_op14");
    check_model("lstm_op14");
    check_batch_one("lstm_op14");
    check_model("gru_op14");
    check_batch_one("gru_op14");
    check_model("shift_window_op14");
    check_batch_one("shift_window_op14");
    check_model("upsampler_op14");
    check_batch_one("upsampler_op14");
    check_model("interp_op14");
    check_batch_one("interp_op14");
    check_model("misc_op14");
    check_batch_one("misc_op14");
    check_model("scripted_if_op14"); /* Ifs on the batch size and the width: batch 2 and batch 1 take other paths */
    check_batch_one("scripted_if_op14");
    return g_failures ? 1 : 0;
}
