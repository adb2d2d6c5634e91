/* test_digits.c - end-to-end checks on the bundled digits model: the forward pass reproduces PyTorch's logits and
 * Integrated Gradients reproduces a float64 PyTorch computation (models/digits/README.md), through the public API,
 * with both executors. Also runs the convergence-delta and several API error paths. */
#include "cattr.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
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

/* Progress callback that asks to cancel once `stop_at` units are done. */
typedef struct {
    volatile int flag;
    int64_t stop_at, calls, last;
} canceller;
static void cancel_after(int64_t done, int64_t total, void *user) {
    canceller *c = user;
    (void)total;
    c->calls++;
    c->last = done;
    if (done >= c->stop_at) c->flag = 1;
}

/* One call of `method` split into 1, 2, 3 and 5 parts and combined equals one process's call, bit for bit (the
 * perturbation and surrogate methods: every state's outputs kept by the part that evaluates it). */
static void split_check(cattr_model *m, cattr_method method, cattr_dtype dty, const cattr_call *call, int ppe,
                        cattr_noise_tunnel nt, bool want_delta) {
    cattr_attr_params p = cattr_attr_default_params(method);
    p.dtype = dty;
    p.perturbations_per_eval = ppe;
    if (nt != CATTR_NT_NONE) { /* 7 samples in partitions of 3, 4 rows per chunk (of the memory budget) */
        p.nt_type = nt;
        p.nt_samples = 7;
        p.nt_samples_batch_size = 3;
        p.stdevs = 0.2;
    }
    if (method == CATTR_METHOD_GRADIENT_SHAP) {
        p.n_samples = 11;
        p.stdevs = 0.1;
        p.return_convergence_delta = want_delta;
    }
    if (nt != CATTR_NT_NONE || method == CATTR_METHOD_GRADIENT_SHAP) p.max_memory = 64 << 10;
    bool layer = method == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS || method == CATTR_METHOD_LAYER_CONDUCTANCE ||
                 method == CATTR_METHOD_INTERNAL_INFLUENCE || method == CATTR_METHOD_NEURON_INTEGRATED_GRADIENTS ||
                 method == CATTR_METHOD_NEURON_CONDUCTANCE;
    if (layer) { /* 20 steps in chunks of 3 (of the 3 examples' rows) */
        p.layer = "conv2";
        p.n_steps = 20;
        p.internal_batch_size = 9;
        p.return_convergence_delta = want_delta;
        if (method == CATTR_METHOD_NEURON_INTEGRATED_GRADIENTS || method == CATTR_METHOD_NEURON_CONDUCTANCE) {
            p.neuron_kind = CATTR_NEURON_INDEX;
            p.neuron_ndim = 3;
            p.neuron_index[0] = 5, p.neuron_index[1] = 1, p.neuron_index[2] = 2;
        }
    }
    p.n_samples = method == CATTR_METHOD_SHAPLEY_VALUE_SAMPLING ? 3 : 40;
    if (method == CATTR_METHOD_OCCLUSION) { /* windows of 1x3x3, strides of 1x2x2 */
        p.sliding_window_ndim[0] = p.strides_ndim[0] = 3;
        memcpy(p.sliding_window[0], (const int64_t[]){1, 3, 3}, 3 * sizeof(int64_t));
        memcpy(p.strides[0], (const int64_t[]){1, 2, 2}, 3 * sizeof(int64_t));
    }
    cattr_explainer *e1 = NULL, *e2 = NULL;
    CHECK(cattr_explainer_new(m, &p, &e1) == CATTR_OK && cattr_explainer_new(m, &p, &e2) == CATTR_OK, "explainers");
    cattr_tensor *ref = NULL, *ref_d = NULL;
    CHECK(e1 && cattr_explainer_run(e1, call, &ref, want_delta ? &ref_d : NULL) == CATTR_OK, "method %d: one process: %s",
          (int)method, cattr_last_error());
    int counts[4] = {1, 2, 3, 5};
    for (int q = 0; q < 4 && ref && e2; q++) {
        int P = counts[q];
        void *blobs[5] = {0};
        size_t lens[5] = {0};
        for (int k = 0; k < P; k++)
            CHECK(cattr_explainer_run_part(e2, call, k, P, &blobs[k], &lens[k]) == CATTR_OK, "method %d: part %d of %d: %s",
                  (int)method, k, P, cattr_last_error());
        cattr_tensor *a = NULL, *d = NULL;
        CHECK(cattr_explainer_combine(e2, call, (const void *const *)blobs, lens, P, &a, want_delta ? &d : NULL) == CATTR_OK,
              "method %d: combine %d parts: %s", (int)method, P, cattr_last_error());
        CHECK(a && cattr_tensor_numel(a) == cattr_tensor_numel(ref) &&
                  memcmp(cattr_tensor_data_const(a), cattr_tensor_data_const(ref),
                         (size_t)cattr_tensor_numel(a) * cattr_dtype_size(cattr_tensor_dtype(ref))) == 0,
              "method %d, %d parts (%s): not one process's bits", (int)method, P, cattr_dtype_name(dty));
        if (want_delta)
            CHECK(d && ref_d && cattr_tensor_numel(d) == cattr_tensor_numel(ref_d) &&
                      memcmp(cattr_tensor_data_const(d), cattr_tensor_data_const(ref_d),
                             (size_t)cattr_tensor_numel(d) * cattr_dtype_size(cattr_tensor_dtype(d))) == 0,
                  "method %d, %d parts (%s): not one process's delta", (int)method, P, cattr_dtype_name(dty));
        cattr_tensor_free(a);
        cattr_tensor_free(d);
        a = NULL;
        if (P == 3) {
            const void *sw[3] = {blobs[1], blobs[0], blobs[2]};
            size_t sl[3] = {lens[1], lens[0], lens[2]};
            CHECK(cattr_explainer_combine(e2, call, sw, sl, 3, &a, NULL) == CATTR_ERR_INVALID_ARGUMENT && !a &&
                      strstr(cattr_last_error(), "part 0"), "method %d: parts out of order refused", (int)method);
            const size_t tl[3] = {lens[0], lens[1], lens[2] - 8};
            CHECK(cattr_explainer_combine(e2, call, (const void *const *)blobs, tl, 3, &a, NULL) ==
                      CATTR_ERR_INVALID_ARGUMENT && !a && strstr(cattr_last_error(), "part 2"),
                  "method %d: a truncated part refused", (int)method);
        }
        for (int k = 0; k < P; k++) free(blobs[k]);
    }
    cattr_tensor_free(ref);
    cattr_tensor_free(ref_d);
    cattr_explainer_free(e1);
    cattr_explainer_free(e2);
}

static void split_states_check(cattr_model *m, cattr_method method, cattr_dtype dty, const cattr_call *call,
                               int ppe) {
    split_check(m, method, dty, call, ppe, CATTR_NT_NONE, false);
}

/* The VJP and the loss on the graph (captum.robust's passes) on digit 3, float64: the VJP seeded with the target's
 * one-hot is Saliency's signed gradient (same bits) and returns the forward's output; the cross-entropy loss's
 * gradient equals the VJP seeded with softmax(y) - onehot (its derivative at the output), and the loss is
 * log(sum exp y) - y_t. */
static void vjp_loss_check(cattr_model *m, const cattr_tensor *x) {
    int64_t t3 = 3;
    cattr_target t = {CATTR_TARGET_INDEX, 1, 0, &t3};
    cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_SALIENCY);
    p.dtype = CATTR_FLOAT64;
    p.abs = false;
    cattr_explainer *e = NULL;
    CHECK(cattr_explainer_new(m, &p, &e) == CATTR_OK, "saliency explainer");
    const cattr_tensor *in[1] = {x};
    cattr_call call = {in, 1, NULL, &t, NULL, 0, NULL, NULL, NULL, 0, NULL, 0, NULL};
    cattr_tensor *sal = NULL, *y = NULL, *seed = NULL, *g[1] = {0}, *out = NULL, *gl[1] = {0}, *loss = NULL,
                 *g2[1] = {0};
    CHECK(e && cattr_explainer_attribute(e, in, 1, NULL, &t, NULL, 0, &sal, NULL) == CATTR_OK, "saliency");
    CHECK(cattr_model_forward(m, CATTR_FLOAT64, in, 1, &y) == CATTR_OK, "forward");
    int64_t sh[2] = {1, 10};
    CHECK(cattr_tensor_new(CATTR_FLOAT64, 2, sh, &seed) == CATTR_OK, "seed");
    if (!e || !sal || !y || !seed) goto done;
    double *sv = cattr_tensor_data(seed);
    for (int c = 0; c < 10; c++) sv[c] = c == 3;
    CHECK(cattr_explainer_vjp(e, &call, seed, g, &out) == CATTR_OK, "vjp: %s", cattr_last_error());
    CHECK(g[0] && !memcmp(cattr_tensor_data_const(g[0]), cattr_tensor_data_const(sal), 64 * sizeof(double)),
          "the VJP of the one-hot is not Saliency's gradient");
    CHECK(out && !memcmp(cattr_tensor_data_const(out), cattr_tensor_data_const(y), 10 * sizeof(double)),
          "the VJP's output is not the forward's");
    const double *yv = cattr_tensor_data_const(y);
    double mx = yv[0], s = 0;
    for (int c = 1; c < 10; c++) mx = fmax(mx, yv[c]);
    for (int c = 0; c < 10; c++) s += exp(yv[c] - mx);
    for (int c = 0; c < 10; c++) sv[c] = exp(yv[c] - mx) / s - (c == 3);
    CHECK(cattr_explainer_vjp(e, &call, seed, g2, NULL) == CATTR_OK, "vjp 2");
    CHECK(cattr_explainer_loss_grad(e, &call, CATTR_LOSS_CROSS_ENTROPY, gl, &loss) == CATTR_OK, "loss_grad: %s",
          cattr_last_error());
    if (g2[0] && gl[0] && loss) {
        CHECK(rel_err(gl[0], g2[0]) < 1e-10, "cross-entropy gradient differs from the VJP by %g", rel_err(gl[0], g2[0]));
        double want = mx + log(s) - yv[3], got = ((const double *)cattr_tensor_data_const(loss))[0];
        CHECK(fabs(got - want) < 1e-12, "cross-entropy loss %.17g, want %.17g", got, want);
    }
    /* errors: a seed of the wrong shape, a loss without a target */
    int64_t bad_sh[2] = {1, 9};
    cattr_tensor *bad = NULL, *gb[1] = {0};
    CHECK(cattr_tensor_new(CATTR_FLOAT64, 2, bad_sh, &bad) == CATTR_OK, "bad seed");
    CHECK(cattr_explainer_vjp(e, &call, bad, gb, NULL) == CATTR_ERR_SHAPE &&
              strstr(cattr_last_error(), "the seed has shape [1, 9]"), "vjp bad seed: %s", cattr_last_error());
    cattr_call nt = call;
    nt.target = NULL;
    CHECK(cattr_explainer_loss_grad(e, &nt, CATTR_LOSS_NLL_OUTPUT, gb, NULL) == CATTR_ERR_TARGET, "loss without target");
    cattr_tensor_free(bad);
done:
    cattr_tensor_free(sal);
    cattr_tensor_free(y);
    cattr_tensor_free(seed);
    cattr_tensor_free(g[0]);
    cattr_tensor_free(g2[0]);
    cattr_tensor_free(gl[0]);
    cattr_tensor_free(out);
    cattr_tensor_free(loss);
    cattr_explainer_free(e);
}

/* The deletion curve (cattr_deletion_curve) of digit 3's saliency, float64, on cpu and cpu-check: the first point is
 * the model at the input, the last at the baseline (zeros), the same values in one pass or in passes of 2 steps,
 * cpu-check within 1e-12 of cpu; the softmax scores lie in [0, 1]. */
static void curve_check(cattr_model *m, const cattr_tensor *x) {
    int64_t t3 = 3;
    cattr_target t = {CATTR_TARGET_INDEX, 1, 0, &t3};
    const cattr_tensor *in[1] = {x};
    cattr_call call = {in, 1, NULL, &t, NULL, 0, NULL, NULL, NULL, 0, NULL, 0, NULL};
    cattr_tensor *y = NULL, *y0 = NULL, *zeros = NULL, *curves[3] = {0}, *aucs[3] = {0}, *sm = NULL, *sma = NULL;
    CHECK(cattr_model_forward(m, CATTR_FLOAT64, in, 1, &y) == CATTR_OK, "forward");
    CHECK(cattr_tensor_new(CATTR_FLOAT64, cattr_tensor_ndim(x), cattr_tensor_shape(x), &zeros) == CATTR_OK, "zeros");
    const cattr_tensor *zin[1] = {zeros};
    CHECK(zeros && cattr_model_forward(m, CATTR_FLOAT64, zin, 1, &y0) == CATTR_OK, "forward at zeros");
    const char *devs[3] = {"cpu", "cpu", "cpu-check"};
    for (int k = 0; k < 3; k++) {
        cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_SALIENCY);
        p.dtype = CATTR_FLOAT64;
        p.device = devs[k];
        cattr_explainer *e = NULL;
        cattr_tensor *sal[1] = {0};
        CHECK(cattr_explainer_new(m, &p, &e) == CATTR_OK, "explainer on %s", devs[k]);
        CHECK(e && cattr_explainer_run(e, &call, sal, NULL) == CATTR_OK, "saliency on %s", devs[k]);
        if (e && sal[0])
            CHECK(cattr_deletion_curve(e, &call, (const cattr_tensor *const *)sal, 0, 4, 0, k == 1 ? 2 : 0, &curves[k],
                                       &aucs[k]) == CATTR_OK, "deletion curve on %s: %s", devs[k], cattr_last_error());
        if (k == 0 && e && sal[0]) {
            CHECK(cattr_deletion_curve(e, &call, (const cattr_tensor *const *)sal, 1, 4, 1, 0, &sm, &sma) == CATTR_OK,
                  "insertion with softmax: %s", cattr_last_error());
            cattr_tensor *c2 = NULL, *a2 = NULL;
            CHECK(cattr_deletion_curve(e, &call, (const cattr_tensor *const *)sal, 0, 0, 0, 0, &c2, &a2) ==
                      CATTR_ERR_INVALID_ARGUMENT && !c2 && !a2, "n_steps 0 accepted");
        }
        cattr_tensor_free(sal[0]);
        cattr_explainer_free(e);
    }
    if (curves[0] && curves[1] && curves[2] && y && y0) {
        const double *c = cattr_tensor_data_const(curves[0]);
        CHECK(cattr_tensor_numel(curves[0]) == 5, "curve points %lld", (long long)cattr_tensor_numel(curves[0]));
        CHECK(fabs(c[0] - ((const double *)cattr_tensor_data_const(y))[3]) < 1e-12, "the first point %.17g is not the model at the input %.17g", c[0], ((const double *)cattr_tensor_data_const(y))[3]);
        CHECK(fabs(c[4] - ((const double *)cattr_tensor_data_const(y0))[3]) < 1e-12,
              "the last point %.17g is not the model at the baseline %.17g", c[4],
              ((const double *)cattr_tensor_data_const(y0))[3]);
        CHECK(!memcmp(c, cattr_tensor_data_const(curves[1]), 5 * sizeof *c), "passes of 2 steps differ");
        CHECK(rel_err(curves[2], curves[0]) < 1e-12, "cpu-check differs by %g", rel_err(curves[2], curves[0]));
        double area = 0;
        for (int k = 0; k < 4; k++) area += (c[k] + c[k + 1]) / 8;
        CHECK(fabs(((const double *)cattr_tensor_data_const(aucs[0]))[0] - area) < 1e-12, "the area");
    }
    if (sm) {
        const double *v = cattr_tensor_data_const(sm);
        for (int k = 0; k < 5; k++) CHECK(v[k] >= 0 && v[k] <= 1, "softmax score %g", v[k]);
    }
    for (int k = 0; k < 3; k++) {
        cattr_tensor_free(curves[k]);
        cattr_tensor_free(aucs[k]);
    }
    cattr_tensor_free(sm);
    cattr_tensor_free(sma);
    cattr_tensor_free(y);
    cattr_tensor_free(y0);
    cattr_tensor_free(zeros);
}

/* The randomisation check's parts on the digits model: its modules with weights, copies with weights drawn anew
 * (deterministic per seed, the other modules' weights kept), Spearman's rank correlation on known cases, and the check
 * (cascading row 0 equals the first module alone; a module without weights refused by name). */
static void randomization_check(cattr_model *m, const cattr_tensor *x) {
    CHECK(cattr_model_n_weight_modules(m) == 4, "weight modules: %d", cattr_model_n_weight_modules(m));
    const char *want[4] = {"conv1", "conv2", "fc1", "fc2"};
    for (int k = 0; k < 4; k++) {
        char buf[64];
        cattr_model_weight_module(m, k, buf, sizeof buf);
        CHECK(!strcmp(buf, want[k]), "weight module %d is '%s', want '%s'", k, buf, want[k]);
    }
    const char *top[1] = {"fc2"}, *bad[1] = {"fc3"};
    cattr_model *r1 = NULL, *r2 = NULL, *r3 = NULL, *none = NULL;
    CHECK(cattr_model_randomize(m, top, 1, 5, &r1) == CATTR_OK, "randomize: %s", cattr_last_error());
    CHECK(cattr_model_randomize(m, top, 1, 5, &r2) == CATTR_OK, "randomize again");
    CHECK(cattr_model_randomize(m, top, 1, 6, &r3) == CATTR_OK, "randomize, another seed");
    CHECK(cattr_model_randomize(m, NULL, 0, 5, &none) == CATTR_OK, "randomize nothing");
    CHECK(cattr_model_randomize(m, bad, 1, 5, &(cattr_model *){NULL}) == CATTR_ERR_INVALID_ARGUMENT &&
              strstr(cattr_last_error(), "no weights in a module 'fc3'"), "fc3: %s", cattr_last_error());
    const cattr_tensor *in[1] = {x};
    cattr_tensor *y[5] = {0};
    cattr_model *ms[5] = {m, r1, r2, r3, none};
    for (int k = 0; k < 5; k++)
        CHECK(ms[k] && cattr_model_forward(ms[k], CATTR_FLOAT64, in, 1, &y[k]) == CATTR_OK, "forward %d", k);
    if (y[0] && y[1] && y[2] && y[3] && y[4]) {
        size_t sz = 10 * sizeof(double);
        CHECK(memcmp(cattr_tensor_data_const(y[0]), cattr_tensor_data_const(y[1]), sz), "fc2 drawn anew, same output");
        CHECK(!memcmp(cattr_tensor_data_const(y[1]), cattr_tensor_data_const(y[2]), sz), "the same seed differs");
        CHECK(memcmp(cattr_tensor_data_const(y[1]), cattr_tensor_data_const(y[3]), sz), "another seed, same output");
        CHECK(!memcmp(cattr_tensor_data_const(y[0]), cattr_tensor_data_const(y[4]), sz), "nothing drawn, output changed");
    }
    /* Spearman: 1 2 3 4 against 1 3 2 4 is 0.8; with ties (average ranks) 1 1 2 3 against 1 2 3 4: 0.9486832980505138 */
    const double va[2][4] = {{1, 2, 3, 4}, {1, 1, 2, 3}}, vb[2][4] = {{1, 3, 2, 4}, {1, 2, 3, 4}};
    int64_t sh[2] = {2, 4};
    cattr_tensor *ta = NULL, *tb = NULL, *rho = NULL;
    CHECK(cattr_tensor_new(CATTR_FLOAT64, 2, sh, &ta) == CATTR_OK && cattr_tensor_new(CATTR_FLOAT64, 2, sh, &tb) ==
          CATTR_OK, "tensors");
    if (ta && tb) {
        memcpy(cattr_tensor_data(ta), va, sizeof va);
        memcpy(cattr_tensor_data(tb), vb, sizeof vb);
        const cattr_tensor *A[1] = {ta}, *Bt[1] = {tb};
        CHECK(cattr_rank_correlation(A, Bt, 1, 0, &rho) == CATTR_OK, "rank correlation");
        const double *rv = rho ? cattr_tensor_data_const(rho) : NULL;
        CHECK(rv && fabs(rv[0] - 0.8) < 1e-15 && fabs(rv[1] - 0.9486832980505138) < 1e-15, "spearman %g %g",
              rv ? rv[0] : NAN, rv ? rv[1] : NAN);
    }
    /* the check: cascade row 0 (fc2) equals fc2 alone; two modules give two rows */
    cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_SALIENCY);
    p.dtype = CATTR_FLOAT64;
    int64_t t3 = 3;
    cattr_target t = {CATTR_TARGET_INDEX, 1, 0, &t3};
    cattr_call call = {in, 1, NULL, &t, NULL, 0, NULL, NULL, NULL, 0, NULL, 0, NULL};
    cattr_explainer *e = NULL;
    cattr_tensor *sal[1] = {0}, *c1 = NULL, *c1a = NULL, *c2 = NULL, *c2a = NULL;
    CHECK(cattr_explainer_new(m, &p, &e) == CATTR_OK && cattr_explainer_run(e, &call, sal, NULL) == CATTR_OK,
          "saliency");
    const char *two[2] = {"fc2", "fc1"};
    if (sal[0]) {
        CHECK(cattr_randomization_check(m, &p, &call, (const cattr_tensor *const *)sal, 1, two, 2, 1, 5, &c1, &c1a) ==
              CATTR_OK, "check: %s", cattr_last_error());
        CHECK(cattr_randomization_check(m, &p, &call, (const cattr_tensor *const *)sal, 1, two, 1, 0, 5, &c2, &c2a) ==
              CATTR_OK, "check alone: %s", cattr_last_error());
        cattr_tensor *dump[2] = {NULL, NULL};
        CHECK(cattr_randomization_check(m, &p, &call, (const cattr_tensor *const *)sal, 1, bad, 1, 1, 5, &dump[0],
                                        &dump[1]) == CATTR_ERR_INVALID_ARGUMENT &&
                  strstr(cattr_last_error(), "randomising 'fc3'") && !dump[0] && !dump[1],
              "check fc3: %s", cattr_last_error());
    }
    if (c1 && c2) {
        CHECK(cattr_tensor_numel(c1) == 2 && cattr_tensor_numel(c2) == 1, "rows");
        const double *a1 = cattr_tensor_data_const(c1), *a2 = cattr_tensor_data_const(c2);
        CHECK(a1[0] == a2[0] && a1[0] < 0.999 && a1[0] > -1, "cascade row 0 %g, fc2 alone %g", a1[0], a2[0]);
    }
    for (int k = 0; k < 5; k++) cattr_tensor_free(y[k]);
    cattr_tensor_free(ta);
    cattr_tensor_free(tb);
    cattr_tensor_free(rho);
    cattr_tensor_free(sal[0]);
    cattr_tensor_free(c1);
    cattr_tensor_free(c1a);
    cattr_tensor_free(c2);
    cattr_tensor_free(c2a);
    cattr_explainer_free(e);
    cattr_model_free(r1);
    cattr_model_free(r2);
    cattr_model_free(r3);
    cattr_model_free(none);
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
    if (x) vjp_loss_check(m, x);
    if (x) curve_check(m, x);
    if (x) randomization_check(m, x);
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

    /* a wrapped input (the caller's buffer, no copy) gives the same attribution and is left unchanged */
    if (x && ref) {
        float buf[64];
        memcpy(buf, cattr_tensor_data_const(x), sizeof buf);
        cattr_tensor *w = NULL;
        CHECK(cattr_tensor_wrap(CATTR_FLOAT32, cattr_tensor_ndim(x), cattr_tensor_shape(x), buf, &w) == CATTR_OK,
              "wrap");
        CHECK(cattr_tensor_data(w) == (void *)buf, "the wrapped tensor holds the caller's buffer");
        cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_INTEGRATED_GRADIENTS);
        cattr_explainer *e = NULL;
        CHECK(cattr_explainer_new(m, &p, &e) == CATTR_OK, "explainer");
        const cattr_tensor *in[1] = {w};
        cattr_tensor *a = NULL;
        CHECK(e && cattr_explainer_attribute(e, in, 1, NULL, &t, NULL, 0, &a, NULL) == CATTR_OK, "IG on a wrapped input");
        if (a) CHECK(rel_err(a, ref) < 1e-5, "IG on a wrapped input: rel err %g", rel_err(a, ref));
        CHECK(memcmp(buf, cattr_tensor_data_const(x), sizeof buf) == 0, "the caller's buffer changed");
        cattr_tensor_free(a);
        cattr_explainer_free(e);
        cattr_tensor_free(w); /* the handle only: buf is on the stack */
        CHECK(cattr_tensor_wrap(CATTR_FLOAT32, 1, (const int64_t[]){4}, NULL, &w) == CATTR_ERR_INVALID_ARGUMENT && !w,
              "NULL data refused");
    }

    /* one call split into parts: IG on 3 examples, 50 steps, cut into 1, 2, 3, 4 and 8 parts and combined: the
     * attributions and delta of the plain call, bit for bit, in float32 and float64; with internal_batch_size 21
     * (Captum's chunks of 7 steps: units of 7) and without (the plain call runs two halves at once; units of
     * ceil(50 / 16) = 4 steps) */
    if (x) {
        int64_t s3[4] = {3, 1, 8, 8};
        for (int dt = 0; dt < 4; dt++) {
            cattr_dtype dty = dt % 2 ? CATTR_FLOAT64 : CATTR_FLOAT32;
            int unit = dt < 2 ? 7 : 4;
            cattr_tensor *xb = NULL;
            CHECK(cattr_tensor_new(CATTR_FLOAT32, 4, s3, &xb) == CATTR_OK, "batch");
            if (!xb) break;
            for (int r = 0; r < 3; r++)
                for (int k = 0; k < 64; k++)
                    ((float *)cattr_tensor_data(xb))[r * 64 + k] = ((const float *)cattr_tensor_data_const(x))[k] * (1.0f - 0.25f * (float)r);
            int64_t tg[3] = {3, 5, 8};
            cattr_target t3 = {CATTR_TARGET_PER_EXAMPLE, 1, 3, tg};
            cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_INTEGRATED_GRADIENTS);
            p.dtype = dty;
            p.internal_batch_size = dt < 2 ? 7 * 3 : 0;
            p.return_convergence_delta = true;
            cattr_explainer *e1 = NULL, *e2 = NULL;
            CHECK(cattr_explainer_new(m, &p, &e1) == CATTR_OK && cattr_explainer_new(m, &p, &e2) == CATTR_OK, "explainers");
            const cattr_tensor *in[1] = {xb};
            cattr_call call = {in, 1, NULL, &t3, NULL, 0, NULL, NULL, NULL, 0, NULL, 0, NULL};
            cattr_tensor *ref_a = NULL, *ref_d = NULL;
            CHECK(e1 && cattr_explainer_run(e1, &call, &ref_a, &ref_d) == CATTR_OK, "one process");
            int counts[5] = {1, 2, 3, 4, 8};
            for (int q = 0; q < 5 && ref_a && e2; q++) {
                int P = counts[q];
                void *blobs[9] = {0};
                size_t lens[9] = {0};
                for (int k = 0; k < P; k++)
                    CHECK(cattr_explainer_run_part(e2, &call, k, P, &blobs[k], &lens[k]) == CATTR_OK, "part %d of %d", k, P);
                CHECK(cattr_split_chunk_steps(blobs[0], lens[0]) == unit, "steps per unit of the parts: %d",
                      cattr_split_chunk_steps(blobs[0], lens[0]));
                cattr_tensor *a = NULL, *d = NULL;
                CHECK(cattr_explainer_combine(e2, &call, (const void *const *)blobs, lens, P, &a, &d) == CATTR_OK,
                      "combine %d parts: %s", P, cattr_last_error());
                CHECK(a && d && memcmp(cattr_tensor_data_const(a), cattr_tensor_data_const(ref_a),
                                       (size_t)cattr_tensor_numel(a) * cattr_dtype_size(dty)) == 0 &&
                          memcmp(cattr_tensor_data_const(d), cattr_tensor_data_const(ref_d),
                                 (size_t)cattr_tensor_numel(d) * cattr_dtype_size(dty)) == 0,
                      "%d parts (%s, units of %d): not the plain call's bits", P, cattr_dtype_name(dty), unit);
                cattr_tensor_free(a);
                cattr_tensor_free(d);
                a = d = NULL;
                if (P == 3) { /* out of order, missing, foreign: refused with a message naming the part */
                    const void *sw[3] = {blobs[1], blobs[0], blobs[2]};
                    size_t sl[3] = {lens[1], lens[0], lens[2]};
                    CHECK(cattr_explainer_combine(e2, &call, sw, sl, 3, &a, &d) == CATTR_ERR_INVALID_ARGUMENT && !a &&
                              strstr(cattr_last_error(), "part 0"), "parts out of order refused");
                    CHECK(cattr_explainer_combine(e2, &call, (const void *const *)blobs, lens, 2, &a, &d) ==
                              CATTR_ERR_INVALID_ARGUMENT && !a, "a missing part refused");
                    size_t cut = lens[2] - 4;
                    const size_t tl[3] = {lens[0], lens[1], cut};
                    CHECK(cattr_explainer_combine(e2, &call, (const void *const *)blobs, tl, 3, &a, &d) ==
                              CATTR_ERR_INVALID_ARGUMENT && !a && strstr(cattr_last_error(), "part 2"),
                          "a truncated part refused");
                }
                for (int k = 0; k < P; k++) free(blobs[k]);
            }
            cattr_tensor_free(ref_a);
            cattr_tensor_free(ref_d);
            cattr_explainer_free(e1);
            cattr_explainer_free(e2);
            cattr_tensor_free(xb);
        }
        /* the methods of perturbed states and samples, over a batch of 3 with per-example targets, 3 perturbations
         * per pass; feature masks of 16 and 4 groups (ShapleyValues enumerates coalitions); FeatureAblation also
         * without a target and with a batched mask */
        {
            int64_t s3[4] = {3, 1, 8, 8}, ms[4] = {1, 1, 8, 8}, mb[4] = {3, 1, 8, 8};
            cattr_tensor *xb = NULL, *m16 = NULL, *m4 = NULL, *m3 = NULL;
            CHECK(cattr_tensor_new(CATTR_FLOAT32, 4, s3, &xb) == CATTR_OK && cattr_tensor_new(CATTR_INT64, 4, ms, &m16) == CATTR_OK &&
                      cattr_tensor_new(CATTR_INT64, 4, ms, &m4) == CATTR_OK && cattr_tensor_new(CATTR_INT64, 4, mb, &m3) == CATTR_OK,
                  "tensors");
            if (xb && m16 && m4 && m3) {
                for (int r = 0; r < 3; r++)
                    for (int k = 0; k < 64; k++) {
                        ((float *)cattr_tensor_data(xb))[r * 64 + k] =
                            ((const float *)cattr_tensor_data_const(x))[k] * (1.0f - 0.25f * (float)r);
                        ((int64_t *)cattr_tensor_data(m3))[r * 64 + k] = (k / 8 / 2) * 4 + (k % 8) / 2 + r;
                    }
                for (int k = 0; k < 64; k++) {
                    ((int64_t *)cattr_tensor_data(m16))[k] = (k / 8 / 2) * 4 + (k % 8) / 2;
                    ((int64_t *)cattr_tensor_data(m4))[k] = (k / 8 / 4) * 2 + (k % 8) / 4;
                }
                int64_t tg[3] = {3, 5, 8};
                cattr_target t3 = {CATTR_TARGET_PER_EXAMPLE, 1, 3, tg};
                const cattr_tensor *in[1] = {xb}, *k16[1] = {m16}, *k4[1] = {m4}, *k3[1] = {m3};
                cattr_call c16 = {in, 1, NULL, &t3, NULL, 0, k16, NULL, NULL, 0, NULL, 0, NULL};
                cattr_call c4 = {in, 1, NULL, &t3, NULL, 0, k4, NULL, NULL, 0, NULL, 0, NULL};
                cattr_call cn = {in, 1, NULL, NULL, NULL, 0, k16, NULL, NULL, 0, NULL, 0, NULL};
                cattr_call cb = {in, 1, NULL, &t3, NULL, 0, k3, NULL, NULL, 0, NULL, 0, NULL};
                for (int dt = 0; dt < 2; dt++) {
                    cattr_dtype dty = dt ? CATTR_FLOAT64 : CATTR_FLOAT32;
                    split_states_check(m, CATTR_METHOD_FEATURE_ABLATION, dty, &c16, 3);
                    split_states_check(m, CATTR_METHOD_FEATURE_ABLATION, dty, &cn, 3);
                    split_states_check(m, CATTR_METHOD_FEATURE_ABLATION, dty, &cb, 2);
                    split_states_check(m, CATTR_METHOD_FEATURE_PERMUTATION, dty, &c16, 3);
                    split_states_check(m, CATTR_METHOD_SHAPLEY_VALUE_SAMPLING, dty, &c16, 3);
                    split_states_check(m, CATTR_METHOD_SHAPLEY_VALUE_SAMPLING, dty, &cb, 4);
                    split_states_check(m, CATTR_METHOD_SHAPLEY_VALUES, dty, &c4, 3);
                    split_states_check(m, CATTR_METHOD_LIME, dty, &c16, 3);
                    split_states_check(m, CATTR_METHOD_KERNEL_SHAP, dty, &c16, 7);
                    split_states_check(m, CATTR_METHOD_KERNEL_SHAP, dty, &cb, 7);
                }
                cattr_call c0 = {in, 1, NULL, &t3, NULL, 0, NULL, NULL, NULL, 0, NULL, 0, NULL};
                split_states_check(m, CATTR_METHOD_OCCLUSION, CATTR_FLOAT32, &c0, 4);
                split_states_check(m, CATTR_METHOD_OCCLUSION, CATTR_FLOAT64, &c0, 4);
                /* the tunnels on the backend: NoiseTunnel around the one-pass gradient methods, GradientShap (a
                 * distribution of 4 baseline rows, with its delta) */
                const cattr_tensor *dist[1] = {xb};
                cattr_call cd = {in, 1, dist, &t3, NULL, 0, NULL, NULL, NULL, 0, NULL, 0, NULL};
                for (int dt = 0; dt < 2; dt++) {
                    cattr_dtype dty = dt ? CATTR_FLOAT64 : CATTR_FLOAT32;
                    split_check(m, CATTR_METHOD_SALIENCY, dty, &c0, 0, CATTR_NT_SMOOTHGRAD, false);
                    split_check(m, CATTR_METHOD_INPUT_X_GRADIENT, dty, &c0, 0, CATTR_NT_VARGRAD, false);
                    /* tunnels around the methods that run once per partition (host path): IG and DeepLift with
                     * their deltas, FeatureAblation with a mask, KernelShap */
                    split_check(m, CATTR_METHOD_INTEGRATED_GRADIENTS, dty, &c0, 0, CATTR_NT_SMOOTHGRAD_SQ, true);
                    split_check(m, CATTR_METHOD_DEEPLIFT, dty, &c0, 0, CATTR_NT_SMOOTHGRAD, true);
                    split_check(m, CATTR_METHOD_FEATURE_ABLATION, dty, &c16, 3, CATTR_NT_VARGRAD, false);
                    split_check(m, CATTR_METHOD_KERNEL_SHAP, dty, &c16, 7, CATTR_NT_SMOOTHGRAD, false);
                    split_check(m, CATTR_METHOD_GRADIENT_SHAP, dty, &cd, 0, CATTR_NT_NONE, true);
                    /* the path methods of layers and neurons (their chunks of steps) */
                    split_check(m, CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS, dty, &c0, 0, CATTR_NT_NONE, true);
                    split_check(m, CATTR_METHOD_LAYER_CONDUCTANCE, dty, &c0, 0, CATTR_NT_NONE, true);
                    split_check(m, CATTR_METHOD_INTERNAL_INFLUENCE, dty, &c0, 0, CATTR_NT_NONE, false);
                    split_check(m, CATTR_METHOD_NEURON_INTEGRATED_GRADIENTS, dty, &c0, 0, CATTR_NT_NONE, false);
                    split_check(m, CATTR_METHOD_NEURON_CONDUCTANCE, dty, &c0, 0, CATTR_NT_NONE, false);
                }
            }
            cattr_tensor_free(xb);
            cattr_tensor_free(m16);
            cattr_tensor_free(m4);
            cattr_tensor_free(m3);
        }
        cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_SALIENCY);
        cattr_explainer *es = NULL;
        CHECK(cattr_explainer_new(m, &p, &es) == CATTR_OK, "saliency");
        const cattr_tensor *in[1] = {x};
        cattr_call call = {in, 1, NULL, &t, NULL, 0, NULL, NULL, NULL, 0, NULL, 0, NULL};
        void *b = NULL;
        size_t bl = 0;
        CHECK(cattr_split_kind(&p) == NULL, "saliency is not split");
        cattr_attr_params pk = cattr_attr_default_params(CATTR_METHOD_OCCLUSION);
        CHECK(cattr_split_kind(&pk) && !strcmp(cattr_split_kind(&pk), "features"), "occlusion splits its features");
        pk.nt_type = CATTR_NT_SMOOTHGRAD;
        CHECK(cattr_split_kind(&pk) && !strcmp(cattr_split_kind(&pk), "samples"), "a tunnel splits its samples");
        CHECK(es && cattr_explainer_run_part(es, &call, 0, 2, &b, &bl) == CATTR_ERR_UNSUPPORTED && !b &&
                  strstr(cattr_last_error(), "integrated-gradients"), "a saliency part refused");
        cattr_explainer_free(es);
    }

    /* cancellation: IG in chunks of 10 of 50 steps, cancelled from the progress callback after the second chunk */
    if (x) {
        cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_INTEGRATED_GRADIENTS);
        p.internal_batch_size = 10;
        canceller cc = {0, 20, 0, 0};
        p.progress = cancel_after;
        p.progress_user = &cc;
        p.cancel = &cc.flag;
        cattr_explainer *e = NULL;
        CHECK(cattr_explainer_new(m, &p, &e) == CATTR_OK, "explainer");
        const cattr_tensor *in[1] = {x};
        cattr_tensor *a = NULL, *d = NULL;
        st = e ? cattr_explainer_attribute(e, in, 1, NULL, &t, NULL, 0, &a, &d) : CATTR_ERR_INTERNAL;
        CHECK(st == CATTR_ERR_CANCELLED && !a && !d, "cancelled IG: %s", cattr_status_string(st));
        CHECK(cc.calls == 2 && cc.last == 20, "cancelled after %lld progress calls, at %lld steps", (long long)cc.calls,
              (long long)cc.last);
        CHECK(strstr(cattr_last_error(), "cancelled after 20 of 50") != NULL, "message");
        cc.flag = 0; /* the explainer works again once the flag is cleared */
        cc.stop_at = 1000;
        st = e ? cattr_explainer_attribute(e, in, 1, NULL, &t, NULL, 0, &a, NULL) : CATTR_ERR_INTERNAL;
        CHECK(st == CATTR_OK && a && cc.last == 50, "IG after a cancelled call");
        cattr_tensor_free(a);
        cattr_explainer_free(e);
    }

    /* FeatureAblation without a target attributes every logit: attr[o, k] = logits(x)[o] - logits(x with the
     * feature of element k in o's example at 0)[o], here for 2 examples with per-example masks of 4 blocks each
     * (different ids per example), checked against forward passes of the ablated inputs */
    {
        cattr_tensor *x0 = NULL, *x1 = NULL, *xb = NULL, *mask = NULL, *a = NULL, *y0 = NULL;
        CHECK(cattr_tensor_load_npy("models/digits/samples/digit_0.npy", &x0) == CATTR_OK, "digit_0");
        CHECK(cattr_tensor_load_npy("models/digits/samples/digit_7.npy", &x1) == CATTR_OK, "digit_7");
        const int64_t *s1 = x0 ? cattr_tensor_shape(x0) : NULL;
        int64_t per = x0 ? cattr_tensor_numel(x0) : 0, shb[4] = {2, s1 ? s1[1] : 1, s1 ? s1[2] : 1, s1 ? s1[3] : 1};
        if (x0 && x1 && cattr_tensor_ndim(x0) == 4 && cattr_tensor_new(CATTR_FLOAT32, 4, shb, &xb) == CATTR_OK &&
            cattr_tensor_new(CATTR_INT64, 4, shb, &mask) == CATTR_OK) {
            memcpy(cattr_tensor_data(xb), cattr_tensor_data_const(x0), (size_t)per * sizeof(float));
            memcpy((float *)cattr_tensor_data(xb) + per, cattr_tensor_data_const(x1), (size_t)per * sizeof(float));
            int64_t *mv = cattr_tensor_data(mask);
            for (int64_t k = 0; k < per; k++) {
                mv[k] = k * 4 / per;              /* example 0: features 0..3 in order */
                mv[per + k] = 10 + (k % 4);       /* example 1: features 10..13 interleaved */
            }
            cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_FEATURE_ABLATION);
            p.perturbations_per_eval = 3; /* several chunks */
            cattr_explainer *e = NULL;
            CHECK(cattr_explainer_new(m, &p, &e) == CATTR_OK, "FA explainer");
            const cattr_tensor *in[1] = {xb}, *masks[1] = {mask};
            cattr_call call = {0};
            call.inputs = in;
            call.n_inputs = 1;
            call.feature_masks = masks;
            if (e) CHECK(cattr_explainer_run(e, &call, &a, NULL) == CATTR_OK, "FA without a target");
            CHECK(cattr_model_forward(m, CATTR_FLOAT32, in, 1, &y0) == CATTR_OK, "forward");
            if (a && y0) {
                int64_t N = cattr_tensor_numel(y0), O = N / 2;
                CHECK(cattr_tensor_ndim(a) == 4 && cattr_tensor_shape(a)[0] == N, "FA without a target: [%lld, ...]",
                      (long long)N);
                double worst = 0;
                for (int64_t f = 0; f < 8; f++) { /* feature f: example f / 4, block f % 4 */
                    int64_t b = f / 4, id = b ? 10 + f % 4 : f % 4;
                    cattr_tensor *xa = NULL, *ya = NULL;
                    cattr_tensor_convert(xb, CATTR_FLOAT32, &xa);
                    float *xv = cattr_tensor_data(xa);
                    for (int64_t k = 0; k < per; k++)
                        if (mv[b * per + k] == id) xv[b * per + k] = 0;
                    const cattr_tensor *ia[1] = {xa};
                    CHECK(cattr_model_forward(m, CATTR_FLOAT32, ia, 1, &ya) == CATTR_OK, "ablated forward");
                    const float *yv = ya ? cattr_tensor_data_const(ya) : NULL, *y0v = cattr_tensor_data_const(y0);
                    const float *av = cattr_tensor_data_const(a);
                    for (int64_t o = b * O; yv && o < (b + 1) * O; o++) /* the outputs of example b */
                        for (int64_t k = 0; k < per; k++)
                            if (mv[b * per + k] == id) {
                                double want = (double)(y0v[o] - yv[o]), got = av[o * per + k];
                                if (fabs(got - want) > worst) worst = fabs(got - want);
                            }
                    cattr_tensor_free(xa);
                    cattr_tensor_free(ya);
                }
                printf("FeatureAblation without a target: max |error| %.3e\n", worst);
                CHECK(worst < 1e-5, "FA without a target: max error %g", worst);
            }
            cattr_explainer_free(e);
            /* ShapleyValues with per-example masks (example 0: features 0, 1 in blocks, example 1: 2, 3 interleaved;
             * few features: the float32 totals over all M! orders round) and per-example targets: efficiency, the
             * features' values add up to f(x) - f(0) */
            for (int64_t k = 0; k < per; k++) {
                mv[k] = k * 2 / per;
                mv[per + k] = 2 + k % 2;
            }
            cattr_attr_params ps = cattr_attr_default_params(CATTR_METHOD_SHAPLEY_VALUES);
            ps.perturbations_per_eval = 4; /* several chunks */
            cattr_explainer *es = NULL;
            cattr_tensor *as = NULL, *zb = NULL, *yz = NULL;
            int64_t tg[2] = {3, 7};
            cattr_target t = {CATTR_TARGET_PER_EXAMPLE, 1, 2, tg};
            call.target = &t;
            CHECK(cattr_explainer_new(m, &ps, &es) == CATTR_OK, "ShapleyValues explainer");
            if (es) CHECK(cattr_explainer_run(es, &call, &as, NULL) == CATTR_OK, "ShapleyValues, per-example masks: %s",
                          cattr_last_error());
            CHECK(cattr_tensor_new(CATTR_FLOAT32, 4, shb, &zb) == CATTR_OK, "zeros");
            const cattr_tensor *iz[1] = {zb};
            CHECK(zb && cattr_model_forward(m, CATTR_FLOAT32, iz, 1, &yz) == CATTR_OK, "forward at 0");
            if (as && yz && y0) {
                const float *av = cattr_tensor_data_const(as), *y0v = cattr_tensor_data_const(y0);
                const float *yzv = cattr_tensor_data_const(yz);
                int64_t O = cattr_tensor_numel(y0) / 2;
                for (int64_t b = 0; b < 2; b++) {
                    double sum = 0, want = (double)y0v[b * O + tg[b]] - yzv[b * O + tg[b]];
                    for (int64_t f = 0; f < 2; f++) { /* one element of each feature */
                        int64_t id = 2 * b + f, k = 0;
                        while (k < per - 1 && mv[b * per + k] != id) k++;
                        sum += av[b * per + k];
                    }
                    printf("ShapleyValues, per-example masks, example %lld: sum %.6f, f(x) - f(0) %.6f\n", (long long)b,
                           sum, want);
                    CHECK(fabs(sum - want) < 1e-4 * (1 + fabs(want)), "ShapleyValues efficiency, example %lld: %g vs %g",
                          (long long)b, sum, want);
                }
            }
            cattr_tensor_free(as);
            cattr_tensor_free(zb);
            cattr_tensor_free(yz);
            cattr_explainer_free(es);
        }
        cattr_tensor_free(x0);
        cattr_tensor_free(x1);
        cattr_tensor_free(xb);
        cattr_tensor_free(mask);
        cattr_tensor_free(a);
        cattr_tensor_free(y0);
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
