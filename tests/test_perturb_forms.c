/* test_perturb_forms.c - the forms of a call Captum's perturbation methods take besides one float output per
 * example (issue 31; src/attr/perturb_forms.h), on the cpu and cpu-check devices (and cuda where it runs):
 *  - a model of the whole batch: a scalar output, an output [1, F] for a batch of 2, inputs whose first dims differ,
 *    an input without elements; attributions [N, *input.shape[1:]] (the Shapley methods [*output.shape, ...], Lime
 *    and KernelShap [1, ...]); perturbations_per_eval above 1, a target on a scalar and a mask per example then fail;
 *  - int64 inputs ablated in their own dtype: an integer model gives int64 attributions, a float one float; a
 *    fractional baseline for them fails, and so do the gradient methods;
 *  - baselines broadcast as torch broadcasts ([F] for [1, F], [B, 1] for [B, F]);
 *  - Occlusion's windows and strides for inputs the call does not have;
 *  - the int64 kernels these need: WhereId and PlaceRows on int64, Relu / Neg / Abs on int64, a planned Sub with
 *    its fused Relu on int64 (fast kernels against cpu-check's, planned against eager).
 * Expected numbers are computed here from the models' definitions. */
#include "attr/internal.h"
#include "backend/backend.h"
#include "cattr.h"
#include "core/core.h"
#include "exec/plan.h"
#include "graph/graph.h"
#include "models/model.h"
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SH(...) ((const int64_t[]){__VA_ARGS__})

static const char *g_dev = "cpu";

/* ---- models ------------------------------------------------------------------------------------------------- */

static cattr_model *model_of(cg_graph *g, int out, const cattr_dtype *in_dt) {
    cg_add_output(g, out);
    cattr_model *m = calloc(1, sizeof *m);
    int n = g->n_inputs;
    m->g = g;
    m->in_ndim = malloc((size_t)n * sizeof *m->in_ndim);
    m->in_shape = calloc((size_t)n, sizeof *m->in_shape);
    m->in_dtype = calloc((size_t)n, sizeof *m->in_dtype);
    for (int i = 0; i < n; i++) {
        m->in_ndim[i] = -1;
        m->in_dtype[i] = in_dt ? in_dt[i] : CATTR_FLOAT32;
    }
    return m;
}

static int konst(cg_graph *g, const char *name, cattr_dtype dt, int nd, const int64_t *sh, const double *v) {
    cattr_tensor *t = NULL;
    cattr_tensor_new(dt, nd, sh, &t);
    for (int64_t k = 0; k < cattr_tensor_numel(t); k++) cx_tensor_set(t, k, v[k]);
    return cg_add_const(g, name, t, true);
}

static const double W3[3] = {3, 1, 2};

/* y = sum(x * w) over the whole batch (a scalar): x [B, 3] */
static cattr_model *m_scalar(void) {
    cg_graph *g = cg_new();
    int x = cg_add_input(g, "x");
    int w = konst(g, "w", CATTR_FLOAT64, 1, SH(3), W3);
    int p = cg_add_node(g, CG_MUL, "mul", (int[]){x, w}, 2, NULL, "p");
    cg_attrs a = cg_attrs_default(); /* every axis, no kept dims */
    int y = cg_add_node(g, CG_REDUCE_SUM, "sum", &p, 1, &a, "y");
    return model_of(g, y, NULL);
}

/* y = x[0] as [1, 3] (the first example: an output of the whole batch with several values) */
static cattr_model *m_first_row(void) {
    cg_graph *g = cg_new();
    int x = cg_add_input(g, "x");
    int i0 = konst(g, "i0", CATTR_INT64, 0, NULL, (double[]){0});
    cg_attrs ga = cg_attrs_default(), ua = cg_attrs_default();
    int r = cg_add_node(g, CG_GATHER, "row0", (int[]){x, i0}, 2, &ga, "r");
    ua.n_ints = 1;
    ua.ints[0] = 0;
    int y = cg_add_node(g, CG_UNSQUEEZE, "unsq", &r, 1, &ua, "y");
    return model_of(g, y, NULL);
}

/* y = sum(x1 * w) + 2 * float(x2[0]): x1 [B, 3] float, x2 [K] int64 (a sparse index list beside the batch) */
static cattr_model *m_sparse(void) {
    cg_graph *g = cg_new();
    int x1 = cg_add_input(g, "x1"), x2 = cg_add_input(g, "x2");
    int w = konst(g, "w", CATTR_FLOAT64, 1, SH(3), W3);
    int i0 = konst(g, "i0", CATTR_INT64, 0, NULL, (double[]){0});
    int two = konst(g, "two", CATTR_FLOAT64, 0, NULL, (double[]){2});
    cg_attrs a = cg_attrs_default(), ga = cg_attrs_default(), ca = cg_attrs_default();
    int p = cg_add_node(g, CG_MUL, "mul", (int[]){x1, w}, 2, NULL, "p");
    int s = cg_add_node(g, CG_REDUCE_SUM, "sum", &p, 1, &a, "s");
    int e = cg_add_node(g, CG_GATHER, "first", (int[]){x2, i0}, 2, &ga, "e");
    int f = cg_add_node(g, CG_CAST, "float", &e, 1, &ca, "f");
    int t = cg_add_node(g, CG_MUL, "twice", (int[]){f, two}, 2, NULL, "t");
    int y = cg_add_node(g, CG_ADD, "add", (int[]){s, t}, 2, NULL, "y");
    return model_of(g, y, (const cattr_dtype[]){CATTR_FLOAT32, CATTR_INT64});
}

/* y = sum(x1 * w) + sum(x2): x2 may have no elements */
static cattr_model *m_two_sums(void) {
    cg_graph *g = cg_new();
    int x1 = cg_add_input(g, "x1"), x2 = cg_add_input(g, "x2");
    int w = konst(g, "w", CATTR_FLOAT64, 1, SH(3), W3);
    cg_attrs a = cg_attrs_default();
    int p = cg_add_node(g, CG_MUL, "mul", (int[]){x1, w}, 2, NULL, "p");
    int s1 = cg_add_node(g, CG_REDUCE_SUM, "sum1", &p, 1, &a, "s1");
    int s2 = cg_add_node(g, CG_REDUCE_SUM, "sum2", &x2, 1, &a, "s2");
    int y = cg_add_node(g, CG_ADD, "add", (int[]){s1, s2}, 2, NULL, "y");
    return model_of(g, y, NULL);
}

/* An integer model: y = relu(x[:, 0] - 1), [B] int64 (x int64 [B, 3]); the Sub's Relu is fused when planned. */
static cattr_model *m_int(void) {
    cg_graph *g = cg_new();
    int x = cg_add_input(g, "x");
    int i0 = konst(g, "i0", CATTR_INT64, 0, NULL, (double[]){0});
    int one = konst(g, "one", CATTR_INT64, 0, NULL, (double[]){1});
    cg_attrs ga = cg_attrs_default();
    ga.axis = 1;
    int c = cg_add_node(g, CG_GATHER, "col0", (int[]){x, i0}, 2, &ga, "c");
    int d = cg_add_node(g, CG_SUB, "sub", (int[]){c, one}, 2, NULL, "d");
    int y = cg_add_node(g, CG_RELU, "relu", &d, 1, NULL, "y");
    return model_of(g, y, (const cattr_dtype[]){CATTR_INT64});
}

/* A float model of an int64 input: y = float(x) @ W^T, [B, 2] (W [2, 3]) */
static const double W23[6] = {1, 2, 3, -1, 0.5, 4};
static cattr_model *m_int_to_float(void) {
    cg_graph *g = cg_new();
    int x = cg_add_input(g, "x");
    int w = konst(g, "W", CATTR_FLOAT64, 2, SH(2, 3), W23);
    cg_attrs ca = cg_attrs_default(), ga = cg_attrs_default();
    ga.trans_b = 1;
    int f = cg_add_node(g, CG_CAST, "float", &x, 1, &ca, "f");
    int y = cg_add_node(g, CG_GEMM, "fc", (int[]){f, w, -1}, 3, &ga, "y");
    return model_of(g, y, (const cattr_dtype[]){CATTR_INT64});
}

/* A float model: y = x @ W^T, [B, 2] */
static cattr_model *m_linear(void) {
    cg_graph *g = cg_new();
    int x = cg_add_input(g, "x");
    int w = konst(g, "W", CATTR_FLOAT64, 2, SH(2, 3), W23);
    cg_attrs ga = cg_attrs_default();
    ga.trans_b = 1;
    int y = cg_add_node(g, CG_GEMM, "fc", (int[]){x, w, -1}, 3, &ga, "y");
    return model_of(g, y, NULL);
}

/* ---- calls ------------------------------------------------------------------------------------------------------ */

static cattr_tensor *tens(cattr_dtype dt, int nd, const int64_t *sh, const double *v) {
    cattr_tensor *t = NULL;
    cattr_tensor_new(dt, nd, sh, &t);
    for (int64_t k = 0; v && k < cattr_tensor_numel(t); k++) cx_tensor_set(t, k, v[k]);
    return t;
}

typedef struct {
    cattr_method method;
    int ppe, n_samples;
    int win_nd[2];
    int64_t win[2][4];
} spec;

static size_t g_max_memory; /* the calls' memory budget (0: the default) */

/* Runs method on model m: attr[] new tensors; returns the status (the message in cattr_last_error()). */
static cattr_status run(cattr_model *m, spec s, int n, const cattr_tensor *const *x, const cattr_tensor *const *b,
                        const cattr_tensor *const *masks, const cattr_target *t, cattr_tensor **attr) {
    cattr_attr_params p = cattr_attr_default_params(s.method);
    p.dtype = CATTR_FLOAT32;
    p.device = g_dev;
    p.perturbations_per_eval = s.ppe;
    if (s.n_samples) p.n_samples = s.n_samples;
    p.max_memory = g_max_memory;
    for (int i = 0; i < 2; i++) {
        p.sliding_window_ndim[i] = s.win_nd[i];
        memcpy(p.sliding_window[i], s.win[i], sizeof s.win[i]);
    }
    cattr_explainer *e = NULL;
    cattr_status st = cattr_explainer_new(m, &p, &e);
    if (st != CATTR_OK) return st;
    cattr_call c;
    memset(&c, 0, sizeof c);
    c.inputs = x;
    c.n_inputs = n;
    c.baselines = b;
    c.target = t;
    c.feature_masks = masks;
    for (int i = 0; i < CATTR_MAX_OUTPUTS; i++) attr[i] = NULL;
    st = cattr_explainer_run(e, &c, attr, NULL);
    cattr_explainer_free(e);
    return st;
}

/* attr has shape sh (nd dims), dtype dt and values want (tolerance tol, relative to 1 + |want|) */
static void expect(const char *what, const cattr_tensor *a, cattr_dtype dt, int nd, const int64_t *sh,
                   const double *want, double tol) {
    CHECK(a != NULL, "%s [%s]: no attribution", what, g_dev);
    if (!a) return;
    CHECK(cattr_tensor_dtype(a) == dt, "%s [%s]: dtype %s, want %s", what, g_dev, cattr_dtype_name(cattr_tensor_dtype(a)),
          cattr_dtype_name(dt));
    bool same = cattr_tensor_ndim(a) == nd;
    for (int d = 0; same && d < nd; d++) same = cattr_tensor_shape(a)[d] == sh[d];
    char s1[128];
    CHECK(same, "%s [%s]: shape %s", what, g_dev, cx_shape_str(cattr_tensor_ndim(a), cattr_tensor_shape(a), s1, sizeof s1));
    if (!same) return;
    for (int64_t k = 0; k < cattr_tensor_numel(a); k++) {
        double v = cx_tensor_get(a, k);
        CHECK(fabs(v - want[k]) <= tol * (1 + fabs(want[k])), "%s [%s]: element %lld is %g, want %g", what, g_dev,
              (long long)k, v, want[k]);
    }
}

static void free_all(cattr_tensor **a) {
    for (int i = 0; i < CATTR_MAX_OUTPUTS; i++) {
        cattr_tensor_free(a[i]);
        a[i] = NULL;
    }
}

static void expect_error(const char *what, cattr_status st, cattr_status want, const char *needle) {
    CHECK(st == want, "%s [%s]: status %d, want %d (%s)", what, g_dev, (int)st, (int)want, cattr_last_error());
    CHECK(strstr(cattr_last_error(), needle) != NULL, "%s [%s]: the message lacks '%s': %s", what, g_dev, needle,
          cattr_last_error());
}

/* ---- the Shapley methods' rank table in windows ----------------------------------------------------------------- */

/* A budget that holds two rows of the rank table at a time (a window of the table, made again as the states move
 * on) gives the bits of the call that holds the whole table: the states per pass are the same (2). */
static void shapley_table_windows(void) {
    cattr_model *m = m_linear();
    static const double xv[6] = {1, -2, 3, 0.5, 4, -1}, bv[6] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6};
    cattr_tensor *x = tens(CATTR_FLOAT32, 2, SH(2, 3), xv), *b = tens(CATTR_FLOAT32, 2, SH(2, 3), bv);
    int64_t tv[2] = {1, 0};
    cattr_target t = {CATTR_TARGET_PER_EXAMPLE, 1, 2, tv};
    cattr_method ms[2] = {CATTR_METHOD_SHAPLEY_VALUES, CATTR_METHOD_SHAPLEY_VALUE_SAMPLING};
    for (int q = 0; q < 2; q++) {
        cattr_tensor *a[CATTR_MAX_OUTPUTS], *w[CATTR_MAX_OUTPUTS];
        spec sp = {.method = ms[q], .ppe = 2, .n_samples = 5};
        cattr_status st = run(m, sp, 1, (const cattr_tensor *const *)&x, (const cattr_tensor *const *)&b, NULL, &t, a);
        CHECK(st == CATTR_OK, "shapley table [%s] method %d: %s", g_dev, (int)ms[q], cattr_last_error());
        g_max_memory = 200; /* 50 bytes of table: two rows of 3 ids */
        st = run(m, sp, 1, (const cattr_tensor *const *)&x, (const cattr_tensor *const *)&b, NULL, &t, w);
        g_max_memory = 0;
        CHECK(st == CATTR_OK, "shapley table windows [%s] method %d: %s", g_dev, (int)ms[q], cattr_last_error());
        if (a[0] && w[0]) {
            double want[6];
            for (int k = 0; k < 6; k++) want[k] = cx_tensor_get(a[0], k);
            expect("shapley table windows", w[0], CATTR_FLOAT32, 2, SH(2, 3), want, 0);
        }
        free_all(a);
        free_all(w);
    }
    cattr_tensor_free(x);
    cattr_tensor_free(b);
    cattr_model_free(m);
}

/* ---- a model of the whole batch ------------------------------------------------------------------------------ */

static void whole_batch(void) {
    const double xv[6] = {2, 10, 3, 20, 50, 30};
    cattr_tensor *x = tens(CATTR_FLOAT32, 2, SH(2, 3), xv), *a[CATTR_MAX_OUTPUTS] = {0};
    cattr_tensor *mask = tens(CATTR_INT64, 2, SH(1, 3), (double[]){0, 0, 1});
    const cattr_tensor *in[1] = {x}, *mk[1] = {mask};
    cattr_model *ms = m_scalar();
    /* FeatureAblation of sum(x * w): each feature's share of the sum, [1, 3] (Captum's n_outputs 1) */
    double g0 = 3 * (2 + 20) + 1 * (10 + 50), g1 = 2 * (3 + 30);
    cattr_status st = run(ms, (spec){CATTR_METHOD_FEATURE_ABLATION, 1, 0, {0}, {{0}}}, 1, in, NULL, mk, NULL, a);
    CHECK(st == CATTR_OK, "FA scalar [%s]: %s", g_dev, cattr_last_error());
    expect("FA scalar", a[0], CATTR_FLOAT32, 2, SH(1, 3), (double[]){g0, g0, g1}, 1e-6);
    free_all(a);
    /* perturbations_per_eval 0 (from memory) runs one copy per pass too */
    st = run(ms, (spec){CATTR_METHOD_FEATURE_ABLATION, 0, 0, {0}, {{0}}}, 1, in, NULL, NULL, NULL, a);
    CHECK(st == CATTR_OK, "FA scalar, ppe 0 [%s]: %s", g_dev, cattr_last_error());
    expect("FA scalar, default mask", a[0], CATTR_FLOAT32, 2, SH(1, 3), (double[]){66, 60, 66}, 1e-6);
    free_all(a);
    /* Captum's errors: several copies per pass, a target on a scalar, a mask per example for one value */
    st = run(ms, (spec){CATTR_METHOD_FEATURE_ABLATION, 2, 0, {0}, {{0}}}, 1, in, NULL, NULL, NULL, a);
    expect_error("FA scalar, ppe 2", st, CATTR_ERR_INVALID_ARGUMENT, "perturbations_per_eval is 2");
    int64_t t0 = 0;
    cattr_target tg = {CATTR_TARGET_INDEX, 1, 0, &t0};
    st = run(ms, (spec){CATTR_METHOD_FEATURE_ABLATION, 1, 0, {0}, {{0}}}, 1, in, NULL, NULL, &tg, a);
    expect_error("FA scalar, target", st, CATTR_ERR_TARGET, "give no target");
    cattr_tensor *mask2 = tens(CATTR_INT64, 2, SH(2, 3), (double[]){0, 0, 1, 1, 2, 2});
    const cattr_tensor *mk2[1] = {mask2};
    st = run(ms, (spec){CATTR_METHOD_FEATURE_ABLATION, 1, 0, {0}, {{0}}}, 1, in, NULL, mk2, NULL, a);
    expect_error("FA scalar, mask per example", st, CATTR_ERR_SHAPE, "differs between the 2 examples");
    free_all(a);
    /* ShapleyValues, ShapleyValueSampling: exact for a linear model, [1, 3] (a scalar output as [1]) */
    cattr_method shap[2] = {CATTR_METHOD_SHAPLEY_VALUES, CATTR_METHOD_SHAPLEY_VALUE_SAMPLING};
    for (int k = 0; k < 2; k++) {
        st = run(ms, (spec){shap[k], 1, 5, {0}, {{0}}}, 1, in, NULL, mk, NULL, a);
        CHECK(st == CATTR_OK, "%s scalar [%s]: %s", k ? "SVS" : "SV", g_dev, cattr_last_error());
        expect(k ? "SVS scalar" : "SV scalar", a[0], CATTR_FLOAT32, 2, SH(1, 3), (double[]){g0, g0, g1}, 1e-6);
        free_all(a);
    }
    /* Occlusion, window 1: FeatureAblation per element */
    st = run(ms, (spec){CATTR_METHOD_OCCLUSION, 1, 0, {1}, {{1}}}, 1, in, NULL, NULL, NULL, a);
    CHECK(st == CATTR_OK, "Occlusion scalar [%s]: %s", g_dev, cattr_last_error());
    expect("Occlusion scalar", a[0], CATTR_FLOAT32, 2, SH(1, 3), (double[]){66, 60, 66}, 1e-6);
    free_all(a);
    /* KernelShap: one interpretable model for the batch, exact for a linear model; Lime: its shape */
    st = run(ms, (spec){CATTR_METHOD_KERNEL_SHAP, 1, 60, {0}, {{0}}}, 1, in, NULL, mk, NULL, a);
    CHECK(st == CATTR_OK, "KernelShap scalar [%s]: %s", g_dev, cattr_last_error());
    expect("KernelShap scalar", a[0], CATTR_FLOAT32, 2, SH(1, 3), (double[]){g0, g0, g1}, 1e-3);
    free_all(a);
    st = run(ms, (spec){CATTR_METHOD_LIME, 1, 20, {0}, {{0}}}, 1, in, NULL, mk, NULL, a);
    CHECK(st == CATTR_OK && a[0] && cattr_tensor_ndim(a[0]) == 2 && cattr_tensor_shape(a[0])[0] == 1,
          "Lime scalar [%s]: %s", g_dev, cattr_last_error());
    free_all(a);
    /* an output [1, 3] of the batch: its first example, each value attributed (Captum's multi_output_aggr) */
    cattr_model *mf = m_first_row();
    st = run(mf, (spec){CATTR_METHOD_FEATURE_ABLATION, 1, 0, {0}, {{0}}}, 1, in, NULL, NULL, NULL, a);
    CHECK(st == CATTR_OK, "FA first row [%s]: %s", g_dev, cattr_last_error());
    expect("FA first row", a[0], CATTR_FLOAT32, 2, SH(3, 3), (double[]){2, 0, 0, 0, 10, 0, 0, 0, 3}, 1e-6);
    free_all(a);
    st = run(mf, (spec){CATTR_METHOD_SHAPLEY_VALUES, 1, 0, {0}, {{0}}}, 1, in, NULL, mk, NULL, a);
    CHECK(st == CATTR_OK, "SV first row [%s]: %s", g_dev, cattr_last_error());
    expect("SV first row", a[0], CATTR_FLOAT32, 3, SH(1, 3, 3), (double[]){2, 2, 0, 10, 10, 0, 0, 0, 3}, 1e-6);
    free_all(a);
    cattr_tensor_free(x);
    cattr_tensor_free(mask);
    cattr_tensor_free(mask2);
    cattr_model_free(ms);
    cattr_model_free(mf);
}

/* A model of the whole batch split into parts (cattr_explainer_run_part / combine): one process's result. */
static void whole_batch_split(void) {
    cattr_model *m = m_sparse();
    cattr_tensor *x1 = tens(CATTR_FLOAT32, 2, SH(2, 3), (double[]){1, -2, 3, 2, -1, 3});
    cattr_tensor *x2 = tens(CATTR_INT64, 1, SH(4), (double[]){1, 7, 2, 4});
    const cattr_tensor *in[2] = {x1, x2};
    cattr_method ms[3] = {CATTR_METHOD_FEATURE_ABLATION, CATTR_METHOD_FEATURE_PERMUTATION,
                          CATTR_METHOD_SHAPLEY_VALUE_SAMPLING};
    for (int k = 0; k < 3; k++) {
        cattr_attr_params p = cattr_attr_default_params(ms[k]);
        p.device = g_dev;
        p.perturbations_per_eval = 1;
        p.n_samples = 3;
        cattr_explainer *e = NULL;
        CHECK(cattr_explainer_new(m, &p, &e) == CATTR_OK, "explainer: %s", cattr_last_error());
        if (!e) continue;
        cattr_call c;
        memset(&c, 0, sizeof c);
        c.inputs = in;
        c.n_inputs = 2;
        cattr_tensor *one[CATTR_MAX_OUTPUTS] = {0}, *comb[CATTR_MAX_OUTPUTS] = {0};
        void *blobs[3] = {0};
        size_t lens[3] = {0};
        cattr_status st = cattr_explainer_run(e, &c, one, NULL);
        CHECK(st == CATTR_OK, "%s split: one run [%s]: %s", cattr_method_name(ms[k]), g_dev, cattr_last_error());
        for (int q = 0; q < 3 && st == CATTR_OK; q++) {
            st = cattr_explainer_run_part(e, &c, q, 3, &blobs[q], &lens[q]);
            CHECK(st == CATTR_OK, "%s split: part %d [%s]: %s", cattr_method_name(ms[k]), q, g_dev, cattr_last_error());
        }
        if (st == CATTR_OK) st = cattr_explainer_combine(e, &c, (const void *const *)blobs, lens, 3, comb, NULL);
        CHECK(st == CATTR_OK, "%s split: combine [%s]: %s", cattr_method_name(ms[k]), g_dev, cattr_last_error());
        for (int i = 0; i < 2 && st == CATTR_OK; i++) {
            bool same = one[i] && comb[i] && cattr_tensor_numel(one[i]) == cattr_tensor_numel(comb[i]) &&
                        !memcmp(cattr_tensor_data_const(one[i]), cattr_tensor_data_const(comb[i]),
                                (size_t)cattr_tensor_numel(one[i]) * cattr_dtype_size(cattr_tensor_dtype(one[i])));
            CHECK(same, "%s split: input %d differs from one process's [%s]", cattr_method_name(ms[k]), i, g_dev);
        }
        for (int q = 0; q < 3; q++) free(blobs[q]);
        free_all(one);
        free_all(comb);
        cattr_explainer_free(e);
    }
    cattr_tensor_free(x1);
    cattr_tensor_free(x2);
    cattr_model_free(m);
}

/* Inputs whose first dims differ, and an input without elements (Captum's sparse features). */
static void sparse_inputs(void) {
    const double x1v[6] = {1, -2, 3, 2, -1, 3};
    cattr_tensor *x1 = tens(CATTR_FLOAT32, 2, SH(2, 3), x1v), *a[CATTR_MAX_OUTPUTS] = {0};
    cattr_tensor *x2 = tens(CATTR_INT64, 1, SH(7), (double[]){1, 7, 2, 4, 5, 3, 6});
    const cattr_tensor *in[2] = {x1, x2};
    cattr_model *m = m_sparse();
    cattr_status st = run(m, (spec){CATTR_METHOD_FEATURE_ABLATION, 1, 0, {0}, {{0}}}, 2, in, NULL, NULL, NULL, a);
    CHECK(st == CATTR_OK, "FA sparse [%s]: %s", g_dev, cattr_last_error());
    expect("FA sparse input 0", a[0], CATTR_FLOAT32, 2, SH(1, 3), (double[]){9, -3, 12}, 1e-6);
    expect("FA sparse input 1", a[1], CATTR_FLOAT32, 1, SH(1), (double[]){2}, 1e-6);
    free_all(a);
    /* FeaturePermutation permutes each input's own rows: the batch sum does not change for input 0 */
    st = run(m, (spec){CATTR_METHOD_FEATURE_PERMUTATION, 1, 0, {0}, {{0}}}, 2, in, NULL, NULL, NULL, a);
    CHECK(st == CATTR_OK, "FP sparse [%s]: %s", g_dev, cattr_last_error());
    expect("FP sparse input 0", a[0], CATTR_FLOAT32, 2, SH(1, 3), (double[]){0, 0, 0}, 0);
    double v = a[1] ? cx_tensor_get(a[1], 0) : 1;
    CHECK(a[1] && cattr_tensor_numel(a[1]) == 1 && v <= 0 && fmod(v, 2) == 0 && v >= -12,
          "FP sparse input 1 [%s]: %g (2 * (1 - another element))", g_dev, v);
    free_all(a);
    cattr_model_free(m);
    /* an input of shape [1, 0]: no features, zeros of [N, 0] */
    cattr_model *m2 = m_two_sums();
    cattr_tensor *e = tens(CATTR_FLOAT32, 2, SH(1, 0), NULL);
    const cattr_tensor *in2[2] = {x1, e};
    st = run(m2, (spec){CATTR_METHOD_FEATURE_ABLATION, 1, 0, {0}, {{0}}}, 2, in2, NULL, NULL, NULL, a);
    CHECK(st == CATTR_OK, "FA empty input [%s]: %s", g_dev, cattr_last_error());
    expect("FA empty input 0", a[0], CATTR_FLOAT32, 2, SH(1, 3), (double[]){9, -3, 12}, 1e-6);
    expect("FA empty input 1", a[1], CATTR_FLOAT32, 2, SH(1, 0), NULL, 0);
    free_all(a);
    st = run(m2, (spec){CATTR_METHOD_SHAPLEY_VALUE_SAMPLING, 1, 3, {0}, {{0}}}, 2, in2, NULL, NULL, NULL, a);
    CHECK(st == CATTR_OK, "SVS empty input [%s]: %s", g_dev, cattr_last_error());
    expect("SVS empty input 0", a[0], CATTR_FLOAT32, 2, SH(1, 3), (double[]){9, -3, 12}, 1e-6);
    expect("SVS empty input 1", a[1], CATTR_FLOAT32, 2, SH(1, 0), NULL, 0);
    free_all(a);
    /* FeaturePermutation of a one-row input: Captum skips its groups, attributions 0 */
    cattr_tensor *r1 = tens(CATTR_FLOAT32, 2, SH(1, 3), x1v);
    const cattr_tensor *in3[2] = {r1, x1};
    st = run(m2, (spec){CATTR_METHOD_FEATURE_PERMUTATION, 1, 0, {0}, {{0}}}, 2, in3, NULL, NULL, NULL, a);
    CHECK(st == CATTR_OK, "FP one-row input [%s]: %s", g_dev, cattr_last_error());
    expect("FP one-row input 0", a[0], CATTR_FLOAT32, 2, SH(1, 3), (double[]){0, 0, 0}, 0);
    expect("FP two-row input 1 (its sum does not change)", a[1], CATTR_FLOAT32, 2, SH(1, 3), (double[]){0, 0, 0}, 0);
    free_all(a);
    cattr_tensor_free(r1);
    cattr_tensor_free(e);
    cattr_model_free(m2);
    cattr_tensor_free(x1);
    cattr_tensor_free(x2);
}

/* ---- integer inputs ----------------------------------------------------------------------------------------- */

static void int_inputs(void) {
    cattr_tensor *x = tens(CATTR_INT64, 2, SH(2, 3), (double[]){-3, 1, 2, 5, 0, 7}), *a[CATTR_MAX_OUTPUTS] = {0};
    const cattr_tensor *in[1] = {x};
    cattr_model *mi = m_int();
    /* relu(x0 - 1) per example, int64: ablating x0 to 0 changes it by relu(x0 - 1) - 0 */
    for (int ppe = 1; ppe <= 3; ppe++) {
        cattr_status st = run(mi, (spec){CATTR_METHOD_FEATURE_ABLATION, ppe, 0, {0}, {{0}}}, 1, in, NULL, NULL, NULL, a);
        CHECK(st == CATTR_OK, "FA int->int [%s]: %s", g_dev, cattr_last_error());
        expect("FA int->int", a[0], CATTR_INT64, 2, SH(2, 3), (double[]){0, 0, 0, 4, 0, 0}, 0);
        free_all(a);
    }
    /* an int64 baseline (broadcast [1, 3]): relu(x0 - 1) - relu(b0 - 1) */
    cattr_tensor *b = tens(CATTR_INT64, 2, SH(1, 3), (double[]){3, 0, 0});
    const cattr_tensor *bl[1] = {b};
    cattr_status st = run(mi, (spec){CATTR_METHOD_OCCLUSION, 2, 0, {1}, {{1}}}, 1, in, bl, NULL, NULL, a);
    CHECK(st == CATTR_OK, "Occlusion int->int [%s]: %s", g_dev, cattr_last_error());
    expect("Occlusion int->int (float attributions)", a[0], CATTR_FLOAT32, 2, SH(2, 3), (double[]){-2, 0, 0, 2, 0, 0}, 0);
    free_all(a);
    st = run(mi, (spec){CATTR_METHOD_SHAPLEY_VALUES, 1, 0, {0}, {{0}}}, 1, in, bl, NULL, NULL, a);
    CHECK(st == CATTR_OK, "SV int->int [%s]: %s", g_dev, cattr_last_error());
    expect("SV int->int", a[0], CATTR_FLOAT32, 2, SH(2, 3), (double[]){-2, 0, 0, 2, 0, 0}, 0);
    free_all(a);
    /* a fraction for an integer input: Captum would compute in float; cattr asks for a float input */
    cattr_tensor *bf = tens(CATTR_FLOAT32, 0, NULL, (double[]){0.5});
    const cattr_tensor *blf[1] = {bf};
    st = run(mi, (spec){CATTR_METHOD_FEATURE_ABLATION, 1, 0, {0}, {{0}}}, 1, in, blf, NULL, NULL, a);
    expect_error("FA int, baseline 0.5", st, CATTR_ERR_DTYPE, "whole baselines");
    /* the gradient methods keep refusing integer inputs */
    st = run(mi, (spec){CATTR_METHOD_SALIENCY, 0, 0, {0}, {{0}}}, 1, in, NULL, NULL, NULL, a);
    expect_error("Saliency int", st, CATTR_ERR_DTYPE, "the gradient methods attribute float inputs");
    cattr_model_free(mi);
    /* a float model of an integer input: float attributions, x_k * W[t, k] per element */
    cattr_model *mf = m_int_to_float();
    int64_t t1 = 1;
    cattr_target tg = {CATTR_TARGET_INDEX, 1, 0, &t1};
    cattr_method ms[4] = {CATTR_METHOD_FEATURE_ABLATION, CATTR_METHOD_SHAPLEY_VALUES, CATTR_METHOD_OCCLUSION,
                          CATTR_METHOD_KERNEL_SHAP};
    double want[6];
    for (int k = 0; k < 6; k++) want[k] = cx_tensor_get(x, k) * W23[3 + k % 3];
    for (int k = 0; k < 4; k++) {
        st = run(mf, (spec){ms[k], 2, 80, {1}, {{1}}}, 1, in, NULL, NULL, &tg, a);
        CHECK(st == CATTR_OK, "method %d int->float [%s]: %s", (int)ms[k], g_dev, cattr_last_error());
        expect(cattr_method_name(ms[k]), a[0], CATTR_FLOAT32, 2, SH(2, 3), want, ms[k] == CATTR_METHOD_KERNEL_SHAP ? 1e-3 : 1e-6);
        free_all(a);
    }
    st = run(mf, (spec){CATTR_METHOD_LIME, 1, 30, {0}, {{0}}}, 1, in, NULL, NULL, &tg, a);
    CHECK(st == CATTR_OK && a[0] && cattr_tensor_numel(a[0]) == 6, "Lime int->float [%s]: %s", g_dev, cattr_last_error());
    free_all(a);
    cattr_model_free(mf);
    cattr_tensor_free(b);
    cattr_tensor_free(bf);
    cattr_tensor_free(x);
}

/* ---- baselines broadcast as torch does ---------------------------------------------------------------------- */

static void broadcast_baselines(void) {
    cattr_model *m = m_linear();
    int64_t t0 = 0;
    cattr_target tg = {CATTR_TARGET_INDEX, 1, 0, &t0};
    const double xv[6] = {20, 50, 30, 1, 2, 3};
    cattr_tensor *x = tens(CATTR_FLOAT32, 2, SH(2, 3), xv), *a[CATTR_MAX_OUTPUTS] = {0};
    cattr_tensor *bcol = tens(CATTR_FLOAT32, 2, SH(2, 1), (double[]){4, 6});
    cattr_tensor *brow = tens(CATTR_FLOAT32, 1, SH(3), (double[]){10, 11, 12});
    const cattr_tensor *in[1] = {x}, *b1[1] = {bcol}, *b2[1] = {brow};
    double want[6];
    for (int k = 0; k < 6; k++) want[k] = (xv[k] - (k < 3 ? 4 : 6)) * W23[k % 3];
    cattr_status st = run(m, (spec){CATTR_METHOD_FEATURE_ABLATION, 2, 0, {0}, {{0}}}, 1, in, b1, NULL, &tg, a);
    CHECK(st == CATTR_OK, "FA baseline [2, 1] [%s]: %s", g_dev, cattr_last_error());
    expect("FA baseline [2, 1]", a[0], CATTR_FLOAT32, 2, SH(2, 3), want, 1e-6);
    free_all(a);
    for (int k = 0; k < 6; k++) want[k] = (xv[k] - (10 + k % 3)) * W23[k % 3];
    st = run(m, (spec){CATTR_METHOD_OCCLUSION, 2, 0, {1}, {{1}}}, 1, in, b2, NULL, &tg, a);
    CHECK(st == CATTR_OK, "Occlusion baseline [3] [%s]: %s", g_dev, cattr_last_error());
    expect("Occlusion baseline [3]", a[0], CATTR_FLOAT32, 2, SH(2, 3), want, 1e-6);
    free_all(a);
    cattr_tensor *bad = tens(CATTR_FLOAT32, 1, SH(2), (double[]){1, 2});
    const cattr_tensor *b3[1] = {bad};
    st = run(m, (spec){CATTR_METHOD_FEATURE_ABLATION, 1, 0, {0}, {{0}}}, 1, in, b3, NULL, &tg, a);
    expect_error("FA baseline [2] for [2, 3]", st, CATTR_ERR_SHAPE, "must broadcast to input 0");
    /* Occlusion: a window for an input the call does not have */
    st = run(m, (spec){CATTR_METHOD_OCCLUSION, 1, 0, {1, 1}, {{1}, {1}}}, 1, in, NULL, NULL, &tg, a);
    expect_error("Occlusion, two windows for one input", st, CATTR_ERR_INVALID_ARGUMENT, "one sliding window per input");
    cattr_tensor_free(bad);
    cattr_tensor_free(bcol);
    cattr_tensor_free(brow);
    cattr_tensor_free(x);
    cattr_model_free(m);
}

/* ---- the int64 kernels -------------------------------------------------------------------------------------- */

/* y = op(in...) planned on device dev (eager or not): a new host tensor, or NULL. */
static cattr_tensor *op_run(const char *dev, bool eager, cg_op op, const cg_attrs *a, int n, cattr_tensor *const *in,
                            bool relu_after) {
    cg_graph *g = cg_new();
    int ids[8], nd[8];
    int64_t sh[8][CATTR_MAX_DIMS];
    cattr_dtype dt[8];
    const void *host[8];
    for (int i = 0; i < n; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "in%d", i);
        ids[i] = cg_add_input(g, nm);
        nd[i] = cattr_tensor_ndim(in[i]);
        memcpy(sh[i], cattr_tensor_shape(in[i]), (size_t)nd[i] * sizeof(int64_t));
        dt[i] = cattr_tensor_dtype(in[i]);
        host[i] = cattr_tensor_data_const(in[i]);
    }
    int y = cg_add_node(g, op, "node", ids, n, a, "y");
    if (relu_after) y = cg_add_node(g, CG_RELU, "relu", &y, 1, NULL, "r");
    cg_add_output(g, y);
    cx_backend *be = NULL;
    cx_consts *c = NULL;
    cx_plan *p = NULL;
    cattr_tensor *out = NULL;
    cattr_status st = cx_backend_by_name(dev, &be);
    if (st == CATTR_OK) st = cx_consts_new(be, CATTR_FLOAT32, &c);
    if (st == CATTR_OK) st = cx_plan_new(g, c, eager, nd, (const int64_t(*)[CATTR_MAX_DIMS])sh, dt, &y, 1, &p);
    if (st == CATTR_OK) {
        const cx_view *v = cx_plan_view(p, y);
        cattr_tensor_new(v->dtype, v->ndim, v->shape, &out);
        void *dst = cattr_tensor_data(out);
        st = cx_plan_run(p, host, &dst);
    }
    CHECK(st == CATTR_OK, "op %s on %s%s: %s", cg_op_names[op], dev, eager ? " (eager)" : "", cattr_last_error());
    if (st != CATTR_OK) {
        cattr_tensor_free(out);
        out = NULL;
    }
    cx_plan_free(p);
    cx_consts_free(c);
    cg_free(g);
    return out;
}

/* The devices under test: cpu, cpu-check, and cuda where this build has it and a device (or its emulation) runs. */
static const char *g_devs[3];
static int g_n_devs;

static void devices(void) {
    cx_backend *be = NULL;
    g_devs[g_n_devs++] = "cpu";
    g_devs[g_n_devs++] = "cpu-check";
    if (cx_backend_by_name("cuda", &be) == CATTR_OK) g_devs[g_n_devs++] = "cuda";
}

static void expect_op(const char *what, cg_op op, const cg_attrs *a, int n, cattr_tensor *const *in, bool relu_after,
                      int64_t nwant, const int64_t *want) {
    const char *const *devs = g_devs;
    for (int d = 0; d < g_n_devs; d++)
        for (int eager = 0; eager < 2; eager++) {
            cattr_tensor *y = op_run(devs[d], eager, op, a, n, in, relu_after);
            CHECK(y && cattr_tensor_dtype(y) == CATTR_INT64 && cattr_tensor_numel(y) == nwant, "%s on %s%s: %s", what,
                  devs[d], eager ? " (eager)" : "", y ? "wrong dtype or size" : "no result");
            for (int64_t k = 0; y && k < nwant && cattr_tensor_numel(y) == nwant; k++)
                CHECK(((const int64_t *)cattr_tensor_data_const(y))[k] == want[k], "%s on %s%s: element %lld is %lld, want %lld",
                      what, devs[d], eager ? " (eager)" : "", (long long)k, (long long)((const int64_t *)cattr_tensor_data_const(y))[k],
                      (long long)want[k]);
            cattr_tensor_free(y);
        }
}

static void int_kernels(void) {
    /* WhereId on int64 with row maps: row r reads A[arow], B[brow], M[mrow]; B where M == id */
    cattr_tensor *A = tens(CATTR_INT64, 2, SH(2, 3), (double[]){1, 2, 3, 4, 5, 6});
    cattr_tensor *B = tens(CATTR_INT64, 2, SH(2, 3), (double[]){-1, -2, -3, -4, -5, -6});
    cattr_tensor *M = tens(CATTR_INT64, 2, SH(1, 3), (double[]){7, 8, 7});
    cattr_tensor *id = tens(CATTR_INT64, 1, SH(3), (double[]){7, 8, 9});
    cattr_tensor *arow = tens(CATTR_INT64, 1, SH(3), (double[]){0, 1, 0}), *brow = tens(CATTR_INT64, 1, SH(3), (double[]){1, 0, 1});
    cattr_tensor *mrow = tens(CATTR_INT64, 1, SH(3), (double[]){0, 0, 0});
    cattr_tensor *win[7] = {A, B, M, id, arow, brow, mrow};
    expect_op("WhereId int64", CG_WHERE_ID, NULL, 7, win, false, 9, (const int64_t[]){-4, 2, -6, 4, -2, 6, 1, 2, 3});
    /* PlaceRows on int64: acc [2, 3], v [4] (two states of 2 rows), ord [1, 3], q0 */
    cattr_tensor *acc = tens(CATTR_INT64, 2, SH(2, 3), (double[]){0, 0, 0, 0, 0, 0});
    cattr_tensor *v = tens(CATTR_INT64, 1, SH(4), (double[]){10, 20, 30, 40});
    cattr_tensor *ord = tens(CATTR_INT64, 2, SH(1, 3), (double[]){1, 2, -1}), *q0 = tens(CATTR_INT64, 1, SH(1), (double[]){1});
    cattr_tensor *pin[4] = {acc, v, ord, q0};
    expect_op("PlaceRows int64", CG_PLACE_ROWS, NULL, 4, pin, false, 6, (const int64_t[]){10, 30, 0, 20, 40, 0});
    /* Relu, Neg, Abs of int64; Sub with its Relu (fused when planned) */
    cattr_tensor *x = tens(CATTR_INT64, 1, SH(4), (double[]){-3, 0, 2, -9});
    expect_op("Relu int64", CG_RELU, NULL, 1, &x, false, 4, (const int64_t[]){0, 0, 2, 0});
    expect_op("Neg int64", CG_NEG, NULL, 1, &x, false, 4, (const int64_t[]){3, 0, -2, 9});
    expect_op("Abs int64", CG_ABS, NULL, 1, &x, false, 4, (const int64_t[]){3, 0, 2, 9});
    cattr_tensor *one = tens(CATTR_INT64, 0, NULL, (double[]){1}), *sin[2] = {x, one};
    expect_op("Sub then Relu int64", CG_SUB, NULL, 2, sin, true, 4, (const int64_t[]){0, 0, 1, 0});
    cattr_tensor *all[] = {A, B, M, id, arow, brow, mrow, acc, v, ord, q0, x, one};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) cattr_tensor_free(all[k]);
}

int main(void) {
    devices();
    int_kernels();
    for (int d = 0; d < g_n_devs; d++) {
        g_dev = g_devs[d];
        whole_batch();
        whole_batch_split();
        sparse_inputs();
        int_inputs();
        broadcast_baselines();
        shapley_table_windows();
    }
    printf("test_perturb_forms: %s (devices:", g_failures ? "FAILED" : "ok");
    for (int d = 0; d < g_n_devs; d++) printf(" %s", g_devs[d]);
    printf(")\n");
    return g_failures ? 1 : 0;
}
