/* test_callback.c - models whose forward pass is a host function (cattr_model_new_callback, op HostCall): the
 * function and its shape function as the planner and both executors call them, on every device of the build; the
 * perturbation methods through it against closed forms; the failures a function reports, a wrong output shape, a
 * shape function that fails; the refusal of gradients; the thread the function runs on. */
#include "test_util.h"

#include "exec/plan.h"
#include "graph/autodiff.h"
#include "models/model.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define B 3
#define F 4

/* The function: x [R, F] float and k [R] int64 -> y [R, 2]: y[r, 0] = sum_j w_j x[r, j]^2, y[r, 1] = sum_j x[r, j]
 * + k[r] (additive in the features, so that FeatureAblation and the Shapley methods have closed forms). `mode` makes
 * it misbehave. */
typedef struct {
    int mode;
    int calls, shape_calls, released;
    int other_thread; /* calls made on a thread other than the test's */
    pthread_t main;
    double wrapped[64]; /* mode 7: the output wraps this buffer */
} fn_state;

enum { OK_, FAIL_IO, WRONG_SHAPE, NO_OUTPUT, CANCEL, BAD_STATUS, INT_OUTPUT, WRAPPED, SHAPE_FAILS, AGGREGATE };

static const double W[F] = {0.5, -1.0, 2.0, 0.25};

static cattr_status fn(void *user, int n, const cattr_tensor *const *in, cattr_tensor **out) {
    fn_state *s = user;
    s->calls++;
    if (!pthread_equal(pthread_self(), s->main)) s->other_thread++;
    if (n != 2) {
        cattr_callback_fail("expected 2 inputs");
        return CATTR_ERR_INVALID_ARGUMENT;
    }
    const cattr_tensor *x = in[0], *k = in[1];
    if (cattr_tensor_dtype(k) != CATTR_INT64 || cattr_tensor_ndim(x) != 2) {
        cattr_callback_fail("unexpected dtypes or ranks");
        return CATTR_ERR_INVALID_ARGUMENT;
    }
    int64_t R = cattr_tensor_shape(x)[0];
    switch (s->mode) {
    case FAIL_IO: cattr_callback_fail("the disk is gone"); return CATTR_ERR_IO;
    case CANCEL: cattr_callback_fail("KeyboardInterrupt"); return CATTR_ERR_CANCELLED;
    case BAD_STATUS: return (cattr_status)99;
    case NO_OUTPUT: return CATTR_OK;
    default: break;
    }
    int64_t shape[2] = {R, 2};
    cattr_dtype odt = s->mode == INT_OUTPUT ? CATTR_INT64 : CATTR_FLOAT64;
    cattr_tensor *y = NULL;
    cattr_status st;
    if (s->mode == AGGREGATE) st = cattr_tensor_new(CATTR_FLOAT64, 0, shape, &y);
    else if (s->mode == WRAPPED) st = cattr_tensor_wrap(CATTR_FLOAT64, 2, shape, s->wrapped, &y);
    else st = cattr_tensor_new(odt, s->mode == WRONG_SHAPE ? 1 : 2, shape, &y);
    if (st != CATTR_OK) return st;
    const void *xd = cattr_tensor_data_const(x);
    bool f32 = cattr_tensor_dtype(x) == CATTR_FLOAT32;
    const int64_t *kd = cattr_tensor_data_const(k);
    double total = 0;
    for (int64_t r = 0; r < R && s->mode != WRONG_SHAPE; r++) {
        double a = 0, b = 0;
        for (int j = 0; j < F; j++) {
            double v = f32 ? ((const float *)xd)[r * F + j] : ((const double *)xd)[r * F + j];
            a += W[j] * v * v;
            b += v;
        }
        b += (double)kd[r];
        total += a;
        if (s->mode == AGGREGATE) continue;
        if (odt == CATTR_INT64) {
            ((int64_t *)cattr_tensor_data(y))[2 * r] = (int64_t)a;
            ((int64_t *)cattr_tensor_data(y))[2 * r + 1] = (int64_t)b;
        } else {
            ((double *)cattr_tensor_data(y))[2 * r] = a;
            ((double *)cattr_tensor_data(y))[2 * r + 1] = b;
        }
    }
    if (s->mode == AGGREGATE) *(double *)cattr_tensor_data(y) = total;
    *out = y;
    return CATTR_OK;
}

static cattr_status shape_fn(void *user, int n, const int *nd, const int64_t *sh, int *ond, int64_t *os) {
    fn_state *s = user;
    s->shape_calls++;
    if (!pthread_equal(pthread_self(), s->main)) s->other_thread++;
    if (s->mode == SHAPE_FAILS) {
        cattr_callback_fail("no shape today");
        return CATTR_ERR_SHAPE;
    }
    if (n != 2 || nd[0] != 2) return CATTR_ERR_INVALID_ARGUMENT;
    if (s->mode == AGGREGATE) {
        *ond = 0;
        return CATTR_OK;
    }
    *ond = 2;
    os[0] = sh[0]; /* the rows of x */
    os[1] = 2;
    return CATTR_OK;
}

static void release(void *user) { ((fn_state *)user)->released++; }

static cattr_model *make_model(fn_state *s) {
    static const cattr_dtype dts[2] = {CATTR_FLOAT32, CATTR_INT64};
    static const char *const names[2] = {"x", NULL};
    memset(s, 0, sizeof *s);
    s->main = pthread_self();
    cattr_model *m = NULL;
    cattr_status st = cattr_model_new_callback("quad", 2, names, dts, fn, shape_fn, s, release, &m);
    CHECK(st == CATTR_OK && m, "cattr_model_new_callback: %s", cattr_last_error());
    return m;
}

static double xval(int b, int j) { return 0.3 * (b + 1) - 0.2 * j + 0.05 * b * j; }

static void make_inputs(cattr_tensor **x, cattr_tensor **k) {
    int64_t sx[2] = {B, F}, sk[1] = {B};
    cattr_tensor_new(CATTR_FLOAT64, 2, sx, x);
    cattr_tensor_new(CATTR_INT64, 1, sk, k);
    for (int b = 0; b < B; b++) {
        for (int j = 0; j < F; j++) ((double *)cattr_tensor_data(*x))[b * F + j] = xval(b, j);
        ((int64_t *)cattr_tensor_data(*k))[b] = 10 * b;
    }
}

static bool contains(const char *s, const char *part) { return s && strstr(s, part) != NULL; }

/* ---- construction ---------------------------------------------------------------------------------------------- */

static void test_new(void) {
    fn_state s;
    memset(&s, 0, sizeof s);
    cattr_dtype dts[9] = {CATTR_FLOAT32};
    cattr_model *m = (cattr_model *)1;
    CHECK(cattr_model_new_callback("f", 0, NULL, dts, fn, shape_fn, &s, NULL, &m) == CATTR_ERR_INVALID_ARGUMENT &&
              m == NULL && contains(cattr_last_error(), "n_inputs = 0"),
          "0 inputs: %s", cattr_last_error());
    CHECK(cattr_model_new_callback("f", 9, NULL, dts, fn, shape_fn, &s, NULL, &m) == CATTR_ERR_INVALID_ARGUMENT,
          "9 inputs accepted");
    CHECK(cattr_model_new_callback("f", 1, NULL, dts, NULL, shape_fn, &s, NULL, &m) == CATTR_ERR_INVALID_ARGUMENT &&
              contains(cattr_last_error(), "fn is NULL"),
          "NULL fn: %s", cattr_last_error());
    CHECK(cattr_model_new_callback("f", 1, NULL, dts, fn, NULL, &s, NULL, &m) == CATTR_ERR_INVALID_ARGUMENT,
          "NULL shape accepted");
    CHECK(cattr_model_new_callback(NULL, 1, NULL, dts, fn, shape_fn, &s, NULL, &m) == CATTR_ERR_INVALID_ARGUMENT,
          "NULL name accepted");
    dts[0] = (cattr_dtype)7;
    CHECK(cattr_model_new_callback("f", 1, NULL, dts, fn, shape_fn, &s, release, &m) == CATTR_ERR_INVALID_ARGUMENT &&
              contains(cattr_last_error(), "input 0 has dtype 7") && s.released == 0,
          "bad dtype: %s", cattr_last_error());

    m = make_model(&s);
    CHECK(cattr_model_n_inputs(m) == 2 && !strcmp(cattr_model_input_name(m, 0), "x") &&
              !strcmp(cattr_model_input_name(m, 1), "input1") && cattr_model_n_outputs(m) == 1,
          "inputs and outputs of the callback model");
    char desc[1024];
    cattr_model_describe(m, desc, sizeof desc);
    CHECK(contains(desc, "quad (a host function)") && contains(desc, "HostCall x1"), "describe: %s", desc);
    cattr_model_free(m);
    CHECK(s.released == 1 && s.calls == 0, "release called %d times, fn %d times", s.released, s.calls);
}

/* ---- the forward pass on each device --------------------------------------------------------------------------- */

static void test_forward(const char *dev) {
    fn_state s;
    cattr_model *m = make_model(&s);
    CHECK(cattr_model_set_device(m, dev) == CATTR_OK, "device %s: %s", dev, cattr_last_error());
    cattr_tensor *x, *k, *y = NULL;
    make_inputs(&x, &k);
    const cattr_tensor *in[2] = {x, k};
    for (int mode = OK_; mode <= WRAPPED; mode++) {
        if (mode != OK_ && mode != INT_OUTPUT && mode != WRAPPED) continue;
        s.mode = mode;
        for (int dt = 0; dt < 2; dt++) {
            cattr_dtype cdt = dt ? CATTR_FLOAT64 : CATTR_FLOAT32;
            cattr_status st = cattr_model_forward(m, cdt, in, 2, &y);
            CHECK(st == CATTR_OK, "%s mode %d: forward: %s", dev, mode, cattr_last_error());
            if (st != CATTR_OK) continue;
            CHECK(cattr_tensor_ndim(y) == 2 && cattr_tensor_shape(y)[0] == B && cattr_tensor_shape(y)[1] == 2 &&
                      cattr_tensor_dtype(y) == cdt,
                  "%s: output shape or dtype", dev);
            for (int b = 0; b < B; b++) {
                double a = 0, c = 10.0 * b;
                for (int j = 0; j < F; j++) {
                    double v = cdt == CATTR_FLOAT32 ? (double)(float)xval(b, j) : xval(b, j);
                    a += W[j] * v * v;
                    c += v;
                }
                if (mode == INT_OUTPUT) a = (double)(int64_t)a, c = (double)(int64_t)c;
                double ga = cx_tensor_get(y, 2 * b), gc = cx_tensor_get(y, 2 * b + 1);
                double tol = cdt == CATTR_FLOAT32 ? 1e-6 : 1e-14;
                CHECK(fabs(ga - a) <= tol * (1 + fabs(a)) && fabs(gc - c) <= tol * (1 + fabs(c)),
                      "%s mode %d %s: row %d = (%g, %g), want (%g, %g)", dev, mode, cattr_dtype_name(cdt), b, ga, gc, a,
                      c);
            }
            cattr_tensor_free(y);
            y = NULL;
        }
    }
    CHECK(s.calls == 6 && s.shape_calls >= 1, "%s: fn called %d times, shape %d times", dev, s.calls, s.shape_calls);
    CHECK(s.other_thread == 0, "%s: %d calls on another thread", dev, s.other_thread);

    /* failures of the function, each naming it */
    struct {
        int mode;
        cattr_status st;
        const char *a, *b;
    } bad[] = {
        {FAIL_IO, CATTR_ERR_IO, "host function 'quad' failed: the disk is gone", NULL},
        {CANCEL, CATTR_ERR_CANCELLED, "host function 'quad' failed: KeyboardInterrupt", NULL},
        {BAD_STATUS, CATTR_ERR_INVALID_ARGUMENT, "host function 'quad' failed", NULL},
        {NO_OUTPUT, CATTR_ERR_INVALID_ARGUMENT, "host function 'quad' returned no output", NULL},
        {WRONG_SHAPE, CATTR_ERR_SHAPE, "returned an output of shape [3]; its shape function gave [3, 2]",
         "input shapes [3, 4], [3]"},
        {SHAPE_FAILS, CATTR_ERR_SHAPE, "host function 'quad': its shape function failed: no shape today", NULL},
    };
    for (size_t t = 0; t < sizeof bad / sizeof bad[0]; t++) {
        s.mode = bad[t].mode;
        y = (cattr_tensor *)1;
        cattr_status st = cattr_model_forward(m, CATTR_FLOAT32, in, 2, &y);
        const char *msg = cattr_last_error();
        CHECK(st == bad[t].st && y == NULL && contains(msg, bad[t].a) && (!bad[t].b || contains(msg, bad[t].b)),
              "%s mode %d: status %d (want %d): %s", dev, bad[t].mode, (int)st, (int)bad[t].st, msg);
    }
    cattr_tensor_free(x);
    cattr_tensor_free(k);
    cattr_model_free(m);
    CHECK(s.released == 1, "%s: released %d times", dev, s.released);
}

/* ---- the perturbation methods through it ----------------------------------------------------------------------- */

static cattr_status run_method(cattr_model *m, const char *dev, cattr_method meth, cattr_executor_kind ex, int t,
                               cattr_tensor **attr) {
    cattr_attr_params p = cattr_attr_default_params(meth);
    p.dtype = CATTR_FLOAT64;
    p.device = dev;
    p.executor = ex;
    p.n_samples = 6;
    p.sliding_window_ndim[0] = 1; /* Occlusion: windows of one feature */
    p.sliding_window[0][0] = 1;
    cattr_explainer *e = NULL;
    cattr_status st = cattr_explainer_new(m, &p, &e);
    if (st != CATTR_OK) return st;
    cattr_tensor *x, *k;
    make_inputs(&x, &k);
    const cattr_tensor *in[1] = {x}, *add[1] = {k};
    int64_t idx[1] = {t};
    cattr_target tg = {CATTR_TARGET_INDEX, 1, 0, idx};
    cattr_call c;
    memset(&c, 0, sizeof c);
    c.inputs = in;
    c.n_inputs = 1;
    c.target = &tg;
    c.additional = add;
    c.n_additional = 1;
    cattr_tensor *out[CATTR_MAX_OUTPUTS] = {0};
    st = cattr_explainer_run(e, &c, out, NULL);
    *attr = out[0];
    cattr_tensor_free(x);
    cattr_tensor_free(k);
    cattr_explainer_free(e);
    return st;
}

static void test_methods(const char *dev) {
    fn_state s;
    cattr_model *m = make_model(&s);
    static const cattr_method meths[] = {CATTR_METHOD_FEATURE_ABLATION, CATTR_METHOD_OCCLUSION,
                                         CATTR_METHOD_SHAPLEY_VALUE_SAMPLING, CATTR_METHOD_SHAPLEY_VALUES};
    for (size_t q = 0; q < sizeof meths / sizeof meths[0]; q++) {
        for (int t = 0; t < 2; t++) {
            cattr_tensor *a[2] = {NULL, NULL};
            for (int ex = 0; ex < 2; ex++) {
                cattr_status st = run_method(m, dev, meths[q], ex ? CATTR_EXEC_EAGER : CATTR_EXEC_PLANNED, t, &a[ex]);
                CHECK(st == CATTR_OK && a[ex], "%s %s target %d %s: %s", dev, cattr_method_name(meths[q]), t,
                      ex ? "eager" : "planned", cattr_last_error());
            }
            if (!a[0] || !a[1]) {
                cattr_tensor_free(a[0]);
                cattr_tensor_free(a[1]);
                continue;
            }
            /* additive in the features, baselines 0: each feature's attribution is its term */
            double worst = 0;
            for (int b = 0; b < B; b++)
                for (int j = 0; j < F; j++) {
                    double v = xval(b, j), want = t == 0 ? W[j] * v * v : v;
                    double d = fabs(cx_tensor_get(a[0], b * F + j) - want);
                    worst = d > worst ? d : worst;
                }
            /* FeatureAblation exactly; the Shapley methods total their marginals, and Occlusion its window sums, in
             * float32 as Captum does */
            bool exact = meths[q] == CATTR_METHOD_FEATURE_ABLATION;
            CHECK(worst < (exact ? 1e-12 : 1e-6), "%s %s target %d: off by %g from the closed form", dev,
                  cattr_method_name(meths[q]), t, worst);
            CHECK(cattr_tensor_numel(a[0]) == cattr_tensor_numel(a[1]) &&
                      !memcmp(cattr_tensor_data(a[0]), cattr_tensor_data(a[1]),
                              (size_t)cattr_tensor_numel(a[0]) * sizeof(double)),
                  "%s %s: planned and eager differ", dev, cattr_method_name(meths[q]));
            cattr_tensor_free(a[0]);
            cattr_tensor_free(a[1]);
        }
    }
    /* Lime and KernelShap run through it (their fits are tested elsewhere) */
    for (int q = 0; q < 2; q++) {
        cattr_tensor *a = NULL;
        cattr_method mt = q ? CATTR_METHOD_KERNEL_SHAP : CATTR_METHOD_LIME;
        cattr_status st = run_method(m, dev, mt, CATTR_EXEC_PLANNED, 1, &a);
        CHECK(st == CATTR_OK && a && cattr_tensor_numel(a) == B * F, "%s %s: %s", dev, cattr_method_name(mt),
              cattr_last_error());
        cattr_tensor_free(a);
    }
    CHECK(s.other_thread == 0, "%s: %d calls on another thread", dev, s.other_thread);
    /* a failure inside a method's pass is the call's error */
    s.mode = FAIL_IO;
    cattr_tensor *a = NULL;
    cattr_status st = run_method(m, dev, CATTR_METHOD_FEATURE_ABLATION, CATTR_EXEC_PLANNED, 0, &a);
    CHECK(st == CATTR_ERR_IO && !a && contains(cattr_last_error(), "host function 'quad' failed: the disk is gone"),
          "%s: a failing function in FeatureAblation: %d %s", dev, (int)st, cattr_last_error());
    cattr_tensor_free(a);
    /* gradients are refused, naming why */
    s.mode = OK_;
    static const cattr_method grads[] = {CATTR_METHOD_SALIENCY, CATTR_METHOD_INTEGRATED_GRADIENTS,
                                         CATTR_METHOD_DEEPLIFT};
    for (size_t q = 0; q < sizeof grads / sizeof grads[0]; q++) {
        a = NULL;
        st = run_method(m, dev, grads[q], CATTR_EXEC_PLANNED, 0, &a);
        CHECK(st == CATTR_ERR_UNSUPPORTED && !a && contains(cattr_last_error(), "runs a host function ('quad') has no "
                                                                                "gradient: use a perturbation method"),
              "%s %s: %d %s", dev, cattr_method_name(grads[q]), (int)st, cattr_last_error());
        cattr_tensor_free(a);
    }
    cattr_model_free(m);
}

/* ---- the graph level: autodiff's rule, planning ---------------------------------------------------------------- */

static void test_graph(void) {
    fn_state s;
    cattr_model *m = make_model(&s);
    cg_graph *g = cg_clone(m->g);
    int seed = cg_add_input(g, "seed");
    cg_rules r;
    cg_rules_default(&r);
    int grads[2] = {-1, -1};
    cattr_status st = cg_autodiff(g, g->outputs[0], seed, g->inputs, 1, &r, grads);
    CHECK(st == CATTR_OK && grads[0] >= 0, "autodiff over a HostCall: %s", cattr_last_error());
    cx_backend *be = NULL;
    cx_consts *cc = NULL;
    CHECK(cx_backend_by_name("cpu", &be) == CATTR_OK && cx_consts_new(be, CATTR_FLOAT32, &cc) == CATTR_OK, "consts");
    int nd[3] = {2, 1, 2};
    int64_t sh[3][CATTR_MAX_DIMS] = {{5, F}, {5}, {5, 2}};
    cattr_dtype dt[3] = {CATTR_FLOAT32, CATTR_INT64, CATTR_FLOAT32};
    for (int eager = 0; eager < 2; eager++) {
        cx_plan *p = NULL;
        st = cx_plan_new(g, cc, eager, nd, (const int64_t(*)[CATTR_MAX_DIMS])sh, dt, &g->outputs[0], 1, &p);
        CHECK(st == CATTR_OK && cx_plan_view(p, g->outputs[0])->shape[0] == 5 &&
                  cx_plan_view(p, g->outputs[0])->dtype == CATTR_FLOAT32,
              "planning the forward of a graph holding the refused gradient: %s", cattr_last_error());
        cx_plan_free(p);
        p = NULL;
        st = cx_plan_new(g, cc, eager, nd, (const int64_t(*)[CATTR_MAX_DIMS])sh, dt, grads, 1, &p);
        CHECK(st == CATTR_ERR_UNSUPPORTED && !p && contains(cattr_last_error(), "has no gradient") &&
                  contains(cattr_last_error(), "quad/grad/HostCall"),
              "planning the gradient: %d %s", (int)st, cattr_last_error());
        cx_plan_free(p);
    }
    CHECK(s.calls == 0 && s.shape_calls >= 2, "planning called fn %d times, shape %d times", s.calls, s.shape_calls);
    cx_consts_free(cc);
    cg_free(g);
    cattr_model_free(m);
}

/* ---- threads: never inside a parallel region --------------------------------------------------------------------- */

static void test_parallel_region(void) {
    fn_state s;
    cattr_model *m = make_model(&s);
    cattr_tensor *x, *k;
    make_inputs(&x, &k);
    const cattr_tensor *in[2] = {x, k};
    int refused = 0, ran = 0, team = 1;
#pragma omp parallel num_threads(2) reduction(+ : refused, ran)
    {
#pragma omp single
        team = omp_get_num_threads();
#pragma omp barrier
        if (omp_get_thread_num() == 0) {
            cattr_tensor *y = NULL;
            cattr_status st = cattr_model_forward(m, CATTR_FLOAT32, in, 2, &y);
            if (st == CATTR_ERR_INTERNAL && contains(cattr_last_error(), "inside a parallel region")) refused++;
            if (st == CATTR_OK) ran++;
            cattr_tensor_free(y);
        }
    }
    if (team > 1) CHECK(refused == 1 && s.calls == 0, "inside a team of %d: refused %d, ran %d", team, refused, ran);
    else CHECK(ran == 1, "a team of one thread (no parallel region): ran %d", ran);
    cattr_tensor_free(x);
    cattr_tensor_free(k);
    cattr_model_free(m);
}

int main(void) {
    test_new();
    test_graph();
    test_parallel_region();
    char devs[256];
    snprintf(devs, sizeof devs, "%s", cattr_device_names());
    int n_dev = 0;
    for (char *tok = strtok(devs, ", "); tok; tok = strtok(NULL, ", ")) {
        if (cattr_device_check(tok) != CATTR_OK) continue; /* a device this machine lacks (a GPU) */
        test_forward(tok);
        test_methods(tok);
        n_dev++;
    }
    CHECK(n_dev >= 2, "ran on %d devices", n_dev);
    printf("test_callback: %d devices, %d failures\n", n_dev, g_failures);
    return g_failures ? 1 : 0;
}
