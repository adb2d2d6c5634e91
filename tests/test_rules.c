/* test_rules.c - the rule ops of the IR and the methods that replace backward rules (src/attr/rules.c):
 *
 *  1. ops: DlDelta, DlRescale, DlCenter, DlMaxPool and LrpDiv as one-node graphs, float32 and float64, planned and
 *     eager, against reference loops (the |dX| < eps fallback, the first-row fallback of the max-pool rule,
 *     overlapping windows where the last unpooled window wins, padding, sign(0) = +1);
 *  2. methods on small in-memory models: DeepLift's summation-to-delta on ReLU networks (with and without a max
 *     pool), DeepLiftShap as the mean of DeepLift over the baselines, GuidedBackprop, Deconvolution and LRP
 *     (epsilon and gamma rules) against hand-written references, LRP conservation with zero biases, and the
 *     method's default rules giving the same numbers as explicit per-node rules; LRP on the forms torch exports a
 *     Linear as (Transpose + MatMul without bias, MatMul + Add) as on Gemm, by default rules and by rules on module
 *     paths or on the module's nodes (gamma, alpha1-beta0 with the bias set to zero), LayerLRP at a layer's output
 *     and input;
 *  3. errors: an unknown node, a rule of another method, a rule on an op it cannot act on, one DeepLiftShap
 *     baseline, a negative DeepLift eps, LRP reaching an op without a rule (a sigmoid, a product of activations),
 *     a rule on an unknown module.
 * Prints each failed check and exits 1 if any failed, 0 otherwise. */
#include "models/model.h"
#include "backend/backend.h"
#include "core/core.h"
#include "graph/graph.h"
#include "exec/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_checks, g_failed;

/* the backend under test: CATTR_TEST_DEVICE (default cpu) */
static cx_backend *cx_test_backend(void) {
    cx_backend *be = NULL;
    cattr_status st = cx_backend_by_name(getenv("CATTR_TEST_DEVICE"), &be);
    if (st == CATTR_ERR_UNSUPPORTED) { /* e.g. cuda in a build with the backend, on a machine without a GPU */
        printf("SKIP: CATTR_TEST_DEVICE: %s\n", cattr_last_error());
        exit(77);
    }
    if (st != CATTR_OK) {
        fprintf(stderr, "CATTR_TEST_DEVICE: %s\n", cattr_last_error());
        exit(2);
    }
    return be;
}

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        g_checks++;                                                                                                    \
        if (!(cond)) {                                                                                                 \
            g_failed++;                                                                                                \
            printf("FAIL %s:%d: (%s) ", __FILE__, __LINE__, #cond);                                                    \
            printf(__VA_ARGS__);                                                                                       \
            printf("\n");                                                                                              \
        }                                                                                                              \
    } while (0)

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define RANK(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define DIMS(...) RANK(__VA_ARGS__), SHAPE(__VA_ARGS__)

/* ---- tensors ------------------------------------------------------------------------------------------------ */

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static double urand(void) { /* xorshift64, [0, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 9007199254740992.0;
}

static cattr_tensor *alloc_or_die(cattr_dtype dt, int nd, const int64_t *sh) {
    cattr_tensor *t = cx_tensor_alloc(dt, nd, sh);
    if (!t) {
        printf("out of memory\n");
        exit(2);
    }
    return t;
}
static double *D(cattr_tensor *t) { return (double *)t->data; }

/* float64, uniform in [-1, 1], rounded to float32 so that both dtypes see the same numbers */
static cattr_tensor *rnd(int nd, const int64_t *sh) {
    cattr_tensor *t = alloc_or_die(CATTR_FLOAT64, nd, sh);
    for (int64_t i = 0; i < t->numel; i++) D(t)[i] = (double)(float)(2 * urand() - 1);
    return t;
}

/* Compares got with want (float64 values), tolerance relative to 1 + |want| by dtype. */
static void expect(const char *what, const cattr_tensor *got, const double *want, int64_t n) {
    CHECK(got && got->numel == n, "%s: %lld elements, want %lld", what, got ? (long long)got->numel : -1LL,
          (long long)n);
    if (!got || got->numel != n) return;
    double tol = got->dtype == CATTR_FLOAT32 ? 2e-5 : 1e-12;
    for (int64_t i = 0; i < n; i++) {
        double v = cx_tensor_get(got, i), e = fabs(v - want[i]) / (1 + fabs(want[i]));
        if (!(e <= tol)) {
            CHECK(e <= tol, "%s: element %lld = %.12g, want %.12g", what, (long long)i, v, want[i]);
            return;
        }
    }
    CHECK(true, "%s", what);
}

/* ---- one-node graphs ----------------------------------------------------------------------------------------- */

/* Runs y = op(in[0..n-1]) (graph inputs) in dtype dt: a new tensor, or NULL with the status in *st. */
static cattr_tensor *try_op(cg_op op, const cg_attrs *a, int n, cattr_tensor *const *in, cattr_dtype dt, bool eager,
                            cattr_status *st_out) {
    cg_graph *g = cg_new();
    int ids[CG_MAX_IN], nd[CG_MAX_IN];
    int64_t sh[CG_MAX_IN][CATTR_MAX_DIMS];
    const void *host[CG_MAX_IN];
    cattr_tensor *conv[CG_MAX_IN] = {0}, *out = NULL;
    char name[16];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "in%d", i);
        ids[i] = cg_add_input(g, name);
        nd[i] = in[i]->ndim;
        memcpy(sh[i], in[i]->shape, sizeof sh[i]);
    }
    int y = cg_add_node(g, op, "node", ids, n, a, "y");
    cg_add_output(g, y);
    cx_consts *c = NULL;
    cx_plan *p = NULL;
    cattr_status st = cx_consts_new(cx_test_backend(), dt, &c);
    if (st == CATTR_OK) st = cx_plan_new(g, c, eager, nd, (const int64_t(*)[CATTR_MAX_DIMS])sh, NULL, &y, 1, &p);
    for (int i = 0; i < n && st == CATTR_OK; i++) {
        st = cattr_tensor_convert(in[i], dt, &conv[i]);
        if (st == CATTR_OK) host[i] = conv[i]->data;
    }
    if (st == CATTR_OK) {
        const cx_view *v = cx_plan_view(p, y);
        out = alloc_or_die(v->dtype, v->ndim, v->shape);
        void *dst = out->data;
        st = cx_plan_run(p, host, &dst);
    }
    if (st != CATTR_OK) {
        cattr_tensor_free(out);
        out = NULL;
    }
    for (int i = 0; i < n; i++) cattr_tensor_free(conv[i]);
    cx_plan_free(p);
    cx_consts_free(c);
    cg_free(g);
    *st_out = st;
    return out;
}

/* try_op that must succeed: NULL after a failed check. */
static cattr_tensor *run_op(const char *what, cg_op op, const cg_attrs *a, int n, cattr_tensor *const *in,
                            cattr_dtype dt, bool eager) {
    cattr_status st;
    cattr_tensor *out = try_op(op, a, n, in, dt, eager, &st);
    CHECK(st == CATTR_OK, "%s: %s: %s", what, cattr_status_string(st), cattr_last_error());
    return out;
}

/* Checks op(in) against want in both dtypes and both executors. */
static void op_case(const char *what, cg_op op, const cg_attrs *a, int n, cattr_tensor *const *in, const double *want,
                    int64_t numel) {
    for (int d = 0; d < 2; d++)
        for (int eager = 0; eager < 2; eager++) {
            cattr_dtype dt = d ? CATTR_FLOAT64 : CATTR_FLOAT32;
            char name[160];
            snprintf(name, sizeof name, "%s [%s, %s]", what, cattr_dtype_name(dt), eager ? "eager" : "planned");
            cattr_tensor *out = run_op(name, op, a, n, in, dt, eager);
            if (out) expect(name, out, want, numel);
            cattr_tensor_free(out);
        }
}

static void test_dl_delta_rescale_center(void) {
    cattr_tensor *x = rnd(DIMS(4, 3)), *g0 = rnd(DIMS(4, 3)), *gy = rnd(DIMS(4, 3)), *dy = rnd(DIMS(4, 3));
    cattr_tensor *dx = rnd(DIMS(4, 3));
    D(x)[4] = D(x)[6 + 4]; /* equal actual and reference values: a zero delta */
    double want[12];
    for (int i = 0; i < 12; i++) want[i] = D(x)[i % 6] - D(x)[6 + i % 6];
    cattr_tensor *in1[1] = {x};
    op_case("DlDelta", CG_DL_DELTA, NULL, 1, in1, want, 12);

    D(dx)[2] = 0;
    D(dx)[7] = 1e-12; /* below eps: the fallback */
    D(dx)[9] = -1e-12;
    cg_attrs a = cg_attrs_default();
    a.alpha = 1e-10;
    for (int i = 0; i < 12; i++)
        want[i] = fabs(D(dx)[i]) < 1e-10 ? D(g0)[i] : D(gy)[i] * D(dy)[i] / D(dx)[i];
    cattr_tensor *in4[4] = {g0, gy, dy, dx};
    op_case("DlRescale", CG_DL_RESCALE, &a, 4, in4, want, 12);

    double s = 0;
    for (int i = 0; i < 12; i++) s += D(g0)[i];
    for (int i = 0; i < 12; i++) want[i] = D(g0)[i] - s / 12;
    cattr_tensor *inc[1] = {g0};
    op_case("DlCenter", CG_DL_CENTER, NULL, 1, inc, want, 12);

    cattr_tensor *odd = rnd(DIMS(3, 2));
    cattr_tensor *ino[1] = {odd};
    cattr_status st;
    cattr_tensor *bad = try_op(CG_DL_DELTA, NULL, 1, ino, CATTR_FLOAT64, false, &st);
    CHECK(st == CATTR_ERR_SHAPE && strstr(cattr_last_error(), "even batch"), "DlDelta on an odd batch: %s",
          cattr_last_error());
    cattr_tensor_free(bad);
    cattr_tensor_free(odd);
    cattr_tensor_free(x);
    cattr_tensor_free(g0);
    cattr_tensor_free(gy);
    cattr_tensor_free(dy);
    cattr_tensor_free(dx);
}

typedef struct {
    int k, s, p;
} pool2d;

static int64_t pool_out(int64_t in, const pool2d *q) { return (in + 2 * q->p - q->k) / q->s + 1; }

/* Reference DeepLift max-pool rule on X [2N, C, H, W] (Captum's maxpool(): max_pool2d with indices,
 * max_unpool2d, halves added, fallback to the first row of G0). */
static void ref_dl_maxpool(const pool2d *q, const int64_t *xs, const double *x, const double *gy, const double *g0,
                           double eps, double *out) {
    int64_t N2 = xs[0], C = xs[1], H = xs[2], W = xs[3], OH = pool_out(H, q), OW = pool_out(W, q);
    int64_t half = N2 / 2, plane = H * W, oplane = OH * OW, row = C * plane;
    double *y = calloc((size_t)(N2 * C * oplane), sizeof *y);
    int64_t *arg = calloc((size_t)(N2 * C * oplane), sizeof *arg);
    double *u = calloc((size_t)(N2 * row), sizeof *u);
    for (int64_t nc = 0; nc < N2 * C; nc++)
        for (int64_t oy = 0; oy < OH; oy++)
            for (int64_t ox = 0; ox < OW; ox++) {
                double best = -INFINITY;
                int64_t bi = -1;
                for (int ky = 0; ky < q->k; ky++)
                    for (int kx = 0; kx < q->k; kx++) {
                        int64_t iy = oy * q->s - q->p + ky, ix = ox * q->s - q->p + kx;
                        if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                        double v = x[nc * plane + iy * W + ix];
                        if (bi < 0 || v > best) {
                            best = v;
                            bi = iy * W + ix;
                        }
                    }
                y[nc * oplane + oy * OW + ox] = best;
                arg[nc * oplane + oy * OW + ox] = bi;
            }
    for (int64_t nc = 0; nc < N2 * C; nc++) {
        bool actual = nc / C < half;
        int64_t a = actual ? nc : nc - half * C, r = a + half * C;
        for (int64_t o = 0; o < oplane; o++) {
            double m = fmax(y[a * oplane + o], y[r * oplane + o]);
            double d = actual ? m - y[r * oplane + o] : y[a * oplane + o] - m;
            u[nc * plane + arg[nc * oplane + o]] = gy[nc * oplane + o] * d; /* assignment: the last window wins */
        }
    }
    int64_t hn = half * row;
    for (int64_t i = 0; i < hn; i++) {
        double s = u[i] + u[hn + i], d = x[i] - x[hn + i];
        out[i] = out[hn + i] = fabs(d) < eps ? g0[i % row] : s / d;
    }
    free(y);
    free(arg);
    free(u);
}

static void dl_maxpool_case(const char *what, const pool2d *q, int64_t N2, int64_t C, int64_t H, int64_t W) {
    int64_t xs[4] = {N2, C, H, W}, OH = pool_out(H, q), OW = pool_out(W, q);
    cattr_tensor *x = alloc_or_die(CATTR_FLOAT64, 4, xs);
    /* distinct values 1/64 apart (exact in float32), shuffled: no near-ties in the windows */
    for (int64_t i = 0; i < x->numel; i++) D(x)[i] = -1 + (double)i / 64;
    for (int64_t i = x->numel - 1; i > 0; i--) {
        int64_t j = (int64_t)(urand() * (double)(i + 1));
        double v = D(x)[i];
        D(x)[i] = D(x)[j];
        D(x)[j] = v;
    }
    int64_t hn = x->numel / 2;
    for (int64_t i = 0; i < hn; i += 7) D(x)[hn + i] = D(x)[i]; /* zero deltas: the fallback */
    /* Y is the pool of X (the kernel checks only its shape, the reference recomputes it) */
    cg_attrs a = cg_attrs_default();
    a.nsp = 2;
    for (int d = 0; d < 2; d++) {
        a.kernel[d] = q->k;
        a.stride[d] = q->s;
        a.pad[d] = a.pad[2 + d] = q->p;
    }
    cattr_tensor *pin[1] = {x};
    cattr_tensor *y = run_op(what, CG_MAXPOOL, &a, 1, pin, CATTR_FLOAT64, false);
    cattr_tensor *gy = rnd(DIMS(N2, C, OH, OW)), *g0 = rnd(DIMS(N2, C, H, W));
    if (!y) goto done;
    a.alpha = 1e-10;
    double *want = malloc((size_t)x->numel * sizeof *want);
    ref_dl_maxpool(q, xs, D(x), D(gy), D(g0), 1e-10, want);
    cattr_tensor *in[4] = {x, y, gy, g0};
    op_case(what, CG_DL_MAXPOOL, &a, 4, in, want, x->numel);
    free(want);
done:
    cattr_tensor_free(x);
    cattr_tensor_free(y);
    cattr_tensor_free(gy);
    cattr_tensor_free(g0);
}

static void test_dl_maxpool(void) {
    dl_maxpool_case("DlMaxPool 2x2 stride 2", &(pool2d){2, 2, 0}, 4, 2, 4, 6);
    dl_maxpool_case("DlMaxPool 3x3 stride 1 pad 1 (overlapping windows)", &(pool2d){3, 1, 1}, 2, 3, 5, 5);
    dl_maxpool_case("DlMaxPool 3x3 stride 2", &(pool2d){3, 2, 0}, 6, 1, 7, 7);
}

static void test_lrp_div(void) {
    cattr_tensor *g = rnd(DIMS(2, 5)), *z = rnd(DIMS(2, 5));
    D(z)[0] = 0;
    D(z)[3] = -0.0;
    D(z)[6] = 1e-12;
    cg_attrs a = cg_attrs_default();
    a.alpha = 1e-2;
    double want[10];
    for (int i = 0; i < 10; i++) want[i] = D(g)[i] / (D(z)[i] + (D(z)[i] < 0 ? -1e-2 : 1e-2));
    cattr_tensor *in[2] = {g, z};
    op_case("LrpDiv", CG_LRP_DIV, &a, 2, in, want, 10);
    cattr_tensor_free(g);
    cattr_tensor_free(z);
}

/* ---- small models ------------------------------------------------------------------------------------------------ */

static int add_const(cg_graph *g, const char *name, cattr_tensor *t) { return cg_add_const(g, name, t, true); }

static cattr_model *model_of(cg_graph *g, int out) {
    cg_add_output(g, out);
    cattr_model *m = calloc(1, sizeof *m);
    int n = g->n_inputs;
    m->g = g;
    m->in_ndim = malloc((size_t)n * sizeof *m->in_ndim);
    m->in_shape = calloc((size_t)n, sizeof *m->in_shape);
    m->in_dtype = calloc((size_t)n, sizeof *m->in_dtype);
    for (int i = 0; i < n; i++) m->in_ndim[i] = -1;
    return m;
}

/* MLP: x [B, 4] -> fc1 (Gemm, W1 [5, 4], b1) -> relu -> fc2 (Gemm, W2 [3, 5], b2) -> [B, 3] */
typedef struct {
    cattr_tensor *w1, *b1, *w2, *b2; /* borrowed from the model's constants */
} mlp_w;

static cattr_model *mlp(mlp_w *w, bool zero_bias, cg_op act) {
    cg_graph *g = cg_new();
    int x = cg_add_input(g, "x");
    w->w1 = rnd(DIMS(5, 4));
    w->b1 = rnd(DIMS(5));
    w->w2 = rnd(DIMS(3, 5));
    w->b2 = rnd(DIMS(3));
    if (zero_bias) {
        memset(w->b1->data, 0, 5 * sizeof(double));
        memset(w->b2->data, 0, 3 * sizeof(double));
    }
    cg_attrs a = cg_attrs_default();
    a.trans_b = 1;
    int h = cg_add_node(g, CG_GEMM, "/fc1/Gemm", (int[]){x, add_const(g, "W1", w->w1), add_const(g, "b1", w->b1)}, 3,
                        &a, "h");
    int r = cg_add_node(g, act, "/relu/Relu", &h, 1, NULL, "r");
    int y = cg_add_node(g, CG_GEMM, "/fc2/Gemm", (int[]){r, add_const(g, "W2", w->w2), add_const(g, "b2", w->b2)}, 3,
                        &a, "y");
    return model_of(g, y);
}

/* CNN: x [B, 1, 6, 6] -> conv (2 ch, 3x3, pad 1) -> relu -> maxpool 2x2 -> flatten -> fc (Gemm [3, 18]), or with
 * `split` conv -> maxpool -> flatten -> fc1 (Gemm [4, 18]) -> relu -> fc2 (Gemm [3, 4]): no two hooked modules in a
 * row, where Captum's DeepLift keeps summation-to-delta (a ReLU feeding a max pool sees the pool's plain gradient
 * as grad_out and breaks it, see rules.c) */
static cattr_model *cnn(bool split) {
    cg_graph *g = cg_new();
    int x = cg_add_input(g, "x");
    cg_attrs ca = cg_attrs_default();
    ca.nsp = 2;
    for (int d = 0; d < 2; d++) {
        ca.kernel[d] = 3;
        ca.pad[d] = ca.pad[2 + d] = 1;
    }
    int wc = add_const(g, "Wc", rnd(DIMS(2, 1, 3, 3))), bc = add_const(g, "bc", rnd(DIMS(2)));
    int c = cg_add_node(g, CG_CONV, "/conv/Conv", (int[]){x, wc, bc}, 3, &ca, "c");
    if (!split) c = cg_add_node(g, CG_RELU, "/relu/Relu", &c, 1, NULL, "r");
    cg_attrs pa = cg_attrs_default();
    pa.nsp = 2;
    for (int d = 0; d < 2; d++) pa.kernel[d] = pa.stride[d] = 2;
    int p = cg_add_node(g, CG_MAXPOOL, "/pool/MaxPool", &c, 1, &pa, "p");
    cg_attrs fa = cg_attrs_default();
    fa.axis = 1;
    int f = cg_add_node(g, CG_FLATTEN, "/Flatten", &p, 1, &fa, "f");
    cg_attrs ga = cg_attrs_default();
    ga.trans_b = 1;
    int w1 = add_const(g, "Wf", rnd(DIMS(split ? 4 : 3, 18))), b1 = add_const(g, "bf", rnd(DIMS(split ? 4 : 3)));
    int y = cg_add_node(g, CG_GEMM, "/fc/Gemm", (int[]){f, w1, b1}, 3, &ga, "y");
    if (split) {
        int r = cg_add_node(g, CG_RELU, "/relu/Relu", &y, 1, NULL, "r");
        int w2 = add_const(g, "W2", rnd(DIMS(3, 4))), b2 = add_const(g, "b2", rnd(DIMS(3)));
        y = cg_add_node(g, CG_GEMM, "/fc2/Gemm", (int[]){r, w2, b2}, 3, &ga, "y2");
    }
    return model_of(g, y);
}

typedef struct {
    cattr_tensor *attr, *delta;
} result;

/* One attribution of input x (baseline b or NULL) for target `t`, float64; attr NULL after a failed check unless
 * `expect_fail`, whose status is returned through *st. */
static result attribute(const char *what, const cattr_model *m, const cattr_attr_params *p, cattr_tensor *x,
                        cattr_tensor *b, int64_t t, cattr_status *st_out) {
    result r = {0};
    const cattr_tensor *in[1] = {x}, *base[1] = {b};
    int64_t idx[1] = {t};
    cattr_target tg = {CATTR_TARGET_INDEX, 1, 0, idx};
    cattr_explainer *e = NULL;
    cattr_status st = cattr_explainer_new(m, p, &e);
    if (st == CATTR_OK) st = cattr_explainer_attribute(e, in, 1, b ? base : NULL, &tg, NULL, 0, &r.attr, &r.delta);
    if (st_out) *st_out = st;
    else CHECK(st == CATTR_OK, "%s: %s: %s", what, cattr_status_string(st), cattr_last_error());
    cattr_explainer_free(e);
    return r;
}

static void result_free(result *r) {
    cattr_tensor_free(r->attr);
    cattr_tensor_free(r->delta);
}

static cattr_attr_params params(cattr_method m) {
    cattr_attr_params p = cattr_attr_default_params(m);
    p.dtype = CATTR_FLOAT64;
    return p;
}

static void expect_same(const char *what, const cattr_tensor *a, const cattr_tensor *b) {
    bool same = a && b && a->numel == b->numel &&
                !memcmp(a->data, b->data, (size_t)a->numel * cattr_dtype_size(a->dtype));
    CHECK(same, "%s: results differ", what);
}

static void max_abs(const char *what, const cattr_tensor *t, double tol) {
    double m = 0;
    for (int64_t i = 0; t && i < t->numel; i++) m = fmax(m, fabs(cx_tensor_get(t, i)));
    CHECK(t && m <= tol, "%s: max |value| %.3g > %.3g", what, m, tol);
}

static void test_deeplift(void) {
    mlp_w w;
    cattr_model *m = mlp(&w, false, CG_RELU), *c = cnn(false), *cs = cnn(true);
    cattr_tensor *x = rnd(DIMS(3, 4)), *b = rnd(DIMS(3, 4)), *xc = rnd(DIMS(2, 1, 6, 6)), *bc = rnd(DIMS(2, 1, 6, 6));
    cattr_attr_params p = params(CATTR_METHOD_DEEPLIFT);
    result r = attribute("DeepLift MLP", m, &p, x, b, 1, NULL);
    max_abs("DeepLift MLP summation-to-delta", r.delta, 1e-12);
    /* explicit rules on the same nodes: the same numbers */
    cattr_node_rule nr[2] = {{"/relu/Relu", "deeplift_nonlinear", 1e-9, 0.25, 0}};
    cattr_attr_params pe = p;
    pe.node_rules = nr;
    pe.n_node_rules = 1;
    result re = attribute("DeepLift MLP explicit rules", m, &pe, x, b, 1, NULL);
    expect_same("DeepLift default rules == node rules", r.attr, re.attr);
    result_free(&re);
    /* without rules DeepLift would be (x - x') * gradient at x: the rescale rule must differ from that */
    cattr_attr_params pg = params(CATTR_METHOD_INPUT_X_GRADIENT);
    result rg = attribute("InputXGradient MLP", m, &pg, x, NULL, 1, NULL);
    double diff = 0;
    for (int64_t i = 0; r.attr && rg.attr && i < r.attr->numel; i++)
        diff = fmax(diff, fabs(D(r.attr)[i] - D(rg.attr)[i]));
    CHECK(diff > 1e-6, "DeepLift equals InputXGradient: the rule was not applied");
    result_free(&rg);
    result_free(&r);

    /* CNN with a max pool between plain ops: the rescale and max-pool rules keep summation-to-delta */
    r = attribute("DeepLift CNN", cs, &p, xc, bc, 2, NULL);
    max_abs("DeepLift CNN summation-to-delta", r.delta, 1e-12);
    result_free(&r);
    r = attribute("DeepLift CNN, ReLU into MaxPool", c, &p, xc, bc, 2, NULL);
    nr[0] = (cattr_node_rule){"/relu/Relu", "deeplift_nonlinear", 1e-9, 0.25, 0};
    nr[1] = (cattr_node_rule){"/pool/MaxPool", "deeplift_maxpool2d", 1e-9, 0.25, 0};
    pe = p;
    pe.node_rules = nr;
    pe.n_node_rules = 2;
    re = attribute("DeepLift CNN explicit rules", c, &pe, xc, bc, 2, NULL);
    expect_same("DeepLift CNN default rules == node rules", r.attr, re.attr);
    result_free(&re);
    result_free(&r);

    /* DeepLiftShap over 3 baselines = mean of DeepLift with each baseline (no cross-row rule in an MLP) */
    cattr_tensor *dist = rnd(DIMS(3, 4)), *one = alloc_or_die(CATTR_FLOAT64, 2, SHAPE(1, 4));
    cattr_attr_params ps = params(CATTR_METHOD_DEEPLIFT_SHAP);
    result rs = attribute("DeepLiftShap MLP", m, &ps, x, dist, 0, NULL);
    double want[12] = {0};
    for (int k = 0; k < 3; k++) {
        memcpy(one->data, D(dist) + 4 * k, 4 * sizeof(double));
        result rk = attribute("DeepLift MLP one baseline", m, &p, x, one, 0, NULL);
        for (int i = 0; rk.attr && i < 12; i++) want[i] += D(rk.attr)[i] / 3;
        result_free(&rk);
    }
    if (rs.attr) expect("DeepLiftShap = mean of DeepLift", rs.attr, want, 12);
    CHECK(rs.delta && rs.delta->numel == 9, "DeepLiftShap delta: one entry per (example, baseline) pair");
    max_abs("DeepLiftShap summation-to-delta", rs.delta, 1e-12);
    result_free(&rs);

    /* errors */
    cattr_status st;
    result bad = attribute("DeepLiftShap with one baseline", m, &ps, x, one, 0, &st);
    CHECK(st == CATTR_ERR_INVALID_ARGUMENT, "one DeepLiftShap baseline: status %s", cattr_status_string(st));
    result_free(&bad);
    pe = p;
    pe.eps = -1;
    bad = attribute("DeepLift negative eps", m, &pe, x, b, 0, &st);
    CHECK(st == CATTR_ERR_INVALID_ARGUMENT, "negative eps: status %s", cattr_status_string(st));
    result_free(&bad);
    nr[0] = (cattr_node_rule){"/nothere/Relu", "deeplift_nonlinear", 1e-9, 0.25, 0};
    pe = p;
    pe.node_rules = nr;
    pe.n_node_rules = 1;
    bad = attribute("unknown node", m, &pe, x, b, 0, &st);
    CHECK(st == CATTR_ERR_INVALID_ARGUMENT && strstr(cattr_last_error(), "/nothere/Relu"), "unknown node: %s",
          cattr_last_error());
    result_free(&bad);
    nr[0] = (cattr_node_rule){"/relu/Relu", "guided_backprop_relu", 1e-9, 0.25, 0};
    bad = attribute("foreign rule", m, &pe, x, b, 0, &st);
    CHECK(st == CATTR_ERR_INVALID_ARGUMENT && strstr(cattr_last_error(), "guided_backprop_relu"), "foreign rule: %s",
          cattr_last_error());
    result_free(&bad);
    nr[0] = (cattr_node_rule){"/fc1/Gemm", "deeplift_nonlinear", 1e-9, 0.25, 0};
    bad = attribute("rule on a wrong op", m, &pe, x, b, 0, &st);
    CHECK(st == CATTR_ERR_INVALID_ARGUMENT && strstr(cattr_last_error(), "Gemm"), "rule on a wrong op: %s",
          cattr_last_error());
    result_free(&bad);

    cattr_tensor_free(dist);
    cattr_tensor_free(one);
    cattr_tensor_free(x);
    cattr_tensor_free(b);
    cattr_tensor_free(xc);
    cattr_tensor_free(bc);
    cattr_model_free(m);
    cattr_model_free(c);
    cattr_model_free(cs);
}

/* h = W1 x + b1 for example e of x [B, 4] */
static void mlp_hidden(const mlp_w *w, const double *xe, double *h) {
    for (int j = 0; j < 5; j++) {
        h[j] = D(w->b1)[j];
        for (int i = 0; i < 4; i++) h[j] += D(w->w1)[j * 4 + i] * xe[i];
    }
}

static void test_guided_deconv(void) {
    mlp_w w;
    cattr_model *m = mlp(&w, false, CG_RELU);
    cattr_tensor *x = rnd(DIMS(3, 4));
    const int t = 2;
    for (int deconv = 0; deconv < 2; deconv++) {
        cattr_attr_params p = params(deconv ? CATTR_METHOD_DECONVOLUTION : CATTR_METHOD_GUIDED_BACKPROP);
        result r = attribute(deconv ? "Deconvolution" : "GuidedBackprop", m, &p, x, NULL, t, NULL);
        double want[12];
        for (int e = 0; e < 3; e++) {
            double h[5], gz[5];
            mlp_hidden(&w, D(x) + 4 * e, h);
            for (int j = 0; j < 5; j++) {
                double g = D(w.w2)[t * 5 + j]; /* d out_t / d relu_j */
                if (!deconv) g = h[j] > 0 ? g : 0;
                gz[j] = g > 0 ? g : 0;
            }
            for (int i = 0; i < 4; i++) {
                want[4 * e + i] = 0;
                for (int j = 0; j < 5; j++) want[4 * e + i] += D(w.w1)[j * 4 + i] * gz[j];
            }
        }
        if (r.attr) expect(deconv ? "Deconvolution MLP" : "GuidedBackprop MLP", r.attr, want, 12);
        CHECK(r.delta == NULL, "no delta for guided backprop / deconvolution");
        result_free(&r);
    }
    cattr_tensor_free(x);
    cattr_model_free(m);
}

/* Reference LRP on the MLP for target t: epsilon rules (fc1 optionally gamma), ReLU pass-through. */
static void ref_lrp(const mlp_w *w, const double *xe, int t, double eps, double gamma1, double *rel, double *out) {
    double h[5], a[5], z2[3], w1[20];
    mlp_hidden(w, xe, h);
    for (int j = 0; j < 5; j++) a[j] = h[j] > 0 ? h[j] : 0;
    for (int k = 0; k < 3; k++) {
        z2[k] = D(w->b2)[k];
        for (int j = 0; j < 5; j++) z2[k] += D(w->w2)[k * 5 + j] * a[j];
    }
    *out = z2[t];
    double gz2 = 1 / (z2[t] + (z2[t] < 0 ? -eps : eps)), ga[5], z1[5];
    for (int j = 0; j < 5; j++) ga[j] = D(w->w2)[t * 5 + j] * gz2 * a[j];
    for (int q = 0; q < 20; q++) w1[q] = D(w->w1)[q] + gamma1 * fmax(D(w->w1)[q], 0);
    for (int j = 0; j < 5; j++) {
        z1[j] = D(w->b1)[j];
        for (int i = 0; i < 4; i++) z1[j] += w1[j * 4 + i] * xe[i];
        ga[j] /= z1[j] + (z1[j] < 0 ? -eps : eps);
    }
    for (int i = 0; i < 4; i++) {
        double g = 0;
        for (int j = 0; j < 5; j++) g += w1[j * 4 + i] * ga[j];
        rel[i] = g * xe[i] * *out;
    }
}

static void test_lrp(void) {
    mlp_w w;
    cattr_model *m = mlp(&w, false, CG_RELU);
    cattr_tensor *x = rnd(DIMS(3, 4));
    const int t = 1;
    cattr_attr_params p = params(CATTR_METHOD_LRP);
    result r = attribute("LRP default rules", m, &p, x, NULL, t, NULL);
    double want[12], out[3], dwant[3];
    for (int e = 0; e < 3; e++) {
        ref_lrp(&w, D(x) + 4 * e, t, 1e-9, 0, want + 4 * e, &out[e]);
        dwant[e] = out[e];
        for (int i = 0; i < 4; i++) dwant[e] -= want[4 * e + i];
    }
    if (r.attr) expect("LRP epsilon rules", r.attr, want, 12);
    if (r.delta) expect("LRP delta", r.delta, dwant, 3);
    cattr_node_rule nr[3] = {{"/fc1/Gemm", "EpsilonRule", 1e-9, 0.25, 0},
                             {"/relu/Relu", "lrp_passthrough_nonlinear", 1e-9, 0.25, 0},
                             {"/fc2/Gemm", "EpsilonRule", 1e-9, 0.25, 0}};
    cattr_attr_params pe = p;
    pe.node_rules = nr;
    pe.n_node_rules = 3;
    result re = attribute("LRP explicit rules", m, &pe, x, NULL, t, NULL);
    expect_same("LRP default rules == node rules", r.attr, re.attr);
    result_free(&re);
    result_free(&r);

    nr[0] = (cattr_node_rule){"/fc1/Gemm", "GammaRule", 1e-9, 0.5, 0};
    re = attribute("LRP gamma rule", m, &pe, x, NULL, t, NULL);
    for (int e = 0; e < 3; e++) ref_lrp(&w, D(x) + 4 * e, t, 1e-9, 0.5, want + 4 * e, &out[e]);
    if (re.attr) expect("LRP gamma rule on fc1", re.attr, want, 12);
    result_free(&re);

    nr[0] = (cattr_node_rule){"/relu/Relu", "EpsilonRule", 1e-9, 0.25, 0};
    cattr_status st;
    re = attribute("LRP rule on a wrong op", m, &pe, x, NULL, t, &st);
    CHECK(st == CATTR_ERR_INVALID_ARGUMENT, "EpsilonRule on Relu: %s", cattr_status_string(st));
    result_free(&re);

    /* zero biases: relevance is conserved up to the epsilon stabiliser */
    mlp_w w0;
    cattr_model *m0 = mlp(&w0, true, CG_RELU);
    r = attribute("LRP zero biases", m0, &p, x, NULL, t, NULL);
    max_abs("LRP conservation with zero biases", r.delta, 1e-7);
    result_free(&r);

    /* no default rule for a sigmoid module */
    mlp_w ws;
    cattr_model *ms = mlp(&ws, false, CG_SIGMOID);
    r = attribute("LRP on a sigmoid", ms, &p, x, NULL, t, &st);
    CHECK(st == CATTR_ERR_UNSUPPORTED && strstr(cattr_last_error(), "/relu/Relu"), "LRP on a sigmoid: %s",
          cattr_last_error());
    result_free(&r);
    cattr_tensor_free(x);
    cattr_model_free(m);
    cattr_model_free(m0);
    cattr_model_free(ms);
}

/* Reference LRP on the MLP for target t with fc1's rule (0 epsilon, 1 gamma, 2 alpha1-beta0; its bias set to zero
 * with zero_b1), fc2 epsilon, ReLU pass-through: rel[4] the input relevances, hid[5] those of fc1's output (= fc2's
 * input), *out the target output. */
static void ref_lrp_rule(const mlp_w *w, const double *xe, int t, double eps, int rule1, double gamma1, bool zero_b1,
                         double *rel, double *hid, double *out) {
    double h[5], a[5], z2[3], w1[20];
    mlp_hidden(w, xe, h);
    for (int j = 0; j < 5; j++) a[j] = h[j] > 0 ? h[j] : 0;
    for (int k = 0; k < 3; k++) {
        z2[k] = D(w->b2)[k];
        for (int j = 0; j < 5; j++) z2[k] += D(w->w2)[k * 5 + j] * a[j];
    }
    *out = z2[t];
    double gz2 = 1 / (z2[t] + (z2[t] < 0 ? -eps : eps)), ga[5], z1[5];
    for (int j = 0; j < 5; j++) {
        ga[j] = D(w->w2)[t * 5 + j] * gz2 * a[j];
        hid[j] = ga[j] * *out;
    }
    for (int q = 0; q < 20; q++) {
        double v = D(w->w1)[q];
        w1[q] = rule1 == 1 ? v + gamma1 * fmax(v, 0) : rule1 == 2 ? fmax(v, 0) : v;
    }
    for (int j = 0; j < 5; j++) {
        z1[j] = zero_b1 ? 0 : D(w->b1)[j];
        for (int i = 0; i < 4; i++) z1[j] += w1[j * 4 + i] * xe[i];
        ga[j] /= z1[j] + (z1[j] < 0 ? -eps : eps);
    }
    for (int i = 0; i < 4; i++) {
        double g = 0;
        for (int j = 0; j < 5; j++) g += w1[j * 4 + i] * ga[j];
        rel[i] = g * xe[i] * *out;
    }
}

/* ref_lrp_rule for the 3 examples of x [3, 4]: want[12], hid[15] */
static void ref_lrp_all(const mlp_w *w, cattr_tensor *x, int t, int rule1, double gamma1, bool zero_b1, double *want,
                        double *hid) {
    double out;
    for (int e = 0; e < 3; e++)
        ref_lrp_rule(w, D(x) + 4 * e, t, 1e-9, rule1, gamma1, zero_b1, want + 4 * e, hid + 5 * e, &out);
}

static cattr_tensor *copy_of(const cattr_tensor *t) {
    cattr_tensor *c = alloc_or_die(t->dtype, t->ndim, t->shape);
    memcpy(c->data, t->data, (size_t)t->numel * cattr_dtype_size(t->dtype));
    return c;
}

/* The MLP of w as torch exports its Linear layers without constant folding: Transpose of the weight + MatMul, then
 * Add of the bias when `bias` (a 3-d input's Linear; a bias-free one is Transpose + MatMul); torch's scope names. */
static cattr_model *mlp_matmul(const mlp_w *w, bool bias) {
    cg_graph *g = cg_new();
    int x = cg_add_input(g, "x");
    cg_attrs ta = cg_attrs_default();
    ta.n_ints = 2;
    ta.ints[0] = 1;
    ta.ints[1] = 0;
    int t1 = cg_add_node(g, CG_TRANSPOSE, "/fc1/Transpose", (int[]){add_const(g, "fc1.weight", copy_of(w->w1))}, 1,
                         &ta, "t1");
    int h = cg_add_node(g, CG_MATMUL, "/fc1/MatMul", (int[]){x, t1}, 2, NULL, "mm1");
    if (bias)
        h = cg_add_node(g, CG_ADD, "/fc1/Add", (int[]){h, add_const(g, "fc1.bias", copy_of(w->b1))}, 2, NULL, "h");
    int r = cg_add_node(g, CG_RELU, "/relu/Relu", &h, 1, NULL, "r");
    int t2 = cg_add_node(g, CG_TRANSPOSE, "/fc2/Transpose", (int[]){add_const(g, "fc2.weight", copy_of(w->w2))}, 1,
                         &ta, "t2");
    int y = cg_add_node(g, CG_MATMUL, "/fc2/MatMul", (int[]){r, t2}, 2, NULL, "mm2");
    if (bias) /* the bias first: the layer's input is not the Add's first operand */
        y = cg_add_node(g, CG_ADD, "/fc2/Add", (int[]){add_const(g, "fc2.bias", copy_of(w->b2)), y}, 2, NULL, "y");
    return model_of(g, y);
}

/* The MLP of w with Gemm nodes without their bias input (w's biases unused) */
static cattr_model *mlp_gemm_no_bias(const mlp_w *w) {
    cg_graph *g = cg_new();
    int x = cg_add_input(g, "x");
    cg_attrs a = cg_attrs_default();
    a.trans_b = 1;
    int h = cg_add_node(g, CG_GEMM, "/fc1/Gemm", (int[]){x, add_const(g, "fc1.weight", copy_of(w->w1))}, 2, &a, "h");
    int r = cg_add_node(g, CG_RELU, "/relu/Relu", &h, 1, NULL, "r");
    int y = cg_add_node(g, CG_GEMM, "/fc2/Gemm", (int[]){r, add_const(g, "fc2.weight", copy_of(w->w2))}, 2, &a, "y");
    return model_of(g, y);
}

/* LRP on every form of a Linear layer (Transpose + MatMul, MatMul + Add) as on Gemm: the default rules, rules on
 * module paths and on the module's nodes, gamma, alpha1-beta0 with the bias set to zero; LayerLRP at a layer's
 * output and input (multiplied by the input) and at the graph input; an op without a rule refused. */
static void test_lrp_linear_forms(void) {
    mlp_w w, w0;
    cattr_model *mg = mlp(&w, false, CG_RELU), *mm = mlp_matmul(&w, true), *m0g = mlp(&w0, true, CG_RELU);
    cattr_model *m0 = mlp_matmul(&w0, false);
    cattr_tensor *x = rnd(DIMS(3, 4));
    const int t = 2;
    double want[12], hid[15];
    cattr_attr_params p = params(CATTR_METHOD_LRP);
    ref_lrp_all(&w, x, t, 0, 0, false, want, hid);
    result r = attribute("LRP MatMul + Add, default rules", mm, &p, x, NULL, t, NULL);
    if (r.attr) expect("LRP MatMul + Add, default rules", r.attr, want, 12);
    result_free(&r);
    ref_lrp_all(&w0, x, t, 0, 0, false, want, hid);
    r = attribute("LRP Transpose + MatMul, default rules", m0, &p, x, NULL, t, NULL);
    if (r.attr) expect("LRP Transpose + MatMul (a Linear without bias), default rules", r.attr, want, 12);
    result_free(&r);

    /* rules on module paths, and on the module's nodes as a replay lists them (the Transpose of the weight too) */
    cattr_node_rule by_path[3] = {{"fc1", "GammaRule", 1e-9, 0.5, 0},
                                  {"relu", "lrp_passthrough_nonlinear", 1e-9, 0.25, 0},
                                  {"fc2", "EpsilonRule", 1e-9, 0.25, 0}};
    cattr_node_rule by_node[7] = {{"/fc1/Transpose", "GammaRule", 1e-9, 0.5, 0},
                                  {"/fc1/MatMul", "GammaRule", 1e-9, 0.5, 0},
                                  {"/fc1/Add", "GammaRule", 1e-9, 0.5, 0},
                                  {"/relu/Relu", "lrp_passthrough_nonlinear", 1e-9, 0.25, 0},
                                  {"/fc2/Transpose", "EpsilonRule", 1e-9, 0.25, 0},
                                  {"/fc2/MatMul", "EpsilonRule", 1e-9, 0.25, 0},
                                  {"/fc2/Add", "EpsilonRule", 1e-9, 0.25, 0}};
    cattr_attr_params pe = p;
    ref_lrp_all(&w, x, t, 1, 0.5, false, want, hid);
    pe.node_rules = by_path;
    pe.n_node_rules = 3;
    r = attribute("LRP gamma on a module path", mm, &pe, x, NULL, t, NULL);
    if (r.attr) expect("LRP gamma on module fc1 (MatMul + Add)", r.attr, want, 12);
    result_free(&r);
    pe.node_rules = by_node;
    pe.n_node_rules = 7;
    r = attribute("LRP gamma on a module's nodes", mm, &pe, x, NULL, t, NULL);
    if (r.attr) expect("LRP gamma on fc1's nodes (MatMul + Add)", r.attr, want, 12);
    result_free(&r);
    by_path[0] = (cattr_node_rule){"fc1", "Alpha1_Beta0_Rule", 1e-9, 0.25, 1};
    ref_lrp_all(&w, x, t, 2, 0, true, want, hid);
    pe.node_rules = by_path;
    pe.n_node_rules = 3;
    r = attribute("LRP alpha1-beta0, bias set to zero (MatMul + Add)", mm, &pe, x, NULL, t, NULL);
    if (r.attr) expect("LRP alpha1-beta0 with the bias set to zero (MatMul + Add)", r.attr, want, 12);
    result_free(&r);
    r = attribute("LRP alpha1-beta0, bias set to zero (Gemm)", mg, &pe, x, NULL, t, NULL);
    if (r.attr) expect("LRP alpha1-beta0 with the bias set to zero (Gemm)", r.attr, want, 12);
    result_free(&r);
    by_path[0] = (cattr_node_rule){"fc1", "GammaRule", 1e-9, 0.5, 0};
    ref_lrp_all(&w0, x, t, 1, 0.5, false, want, hid);
    r = attribute("LRP gamma (Transpose + MatMul)", m0, &pe, x, NULL, t, NULL);
    if (r.attr) expect("LRP gamma on fc1 (Transpose + MatMul): the Transpose'd weight changed", r.attr, want, 12);
    result_free(&r);
    r = attribute("LRP gamma (Gemm with zero biases)", m0g, &pe, x, NULL, t, NULL);
    if (r.attr) expect("LRP gamma on fc1 (Gemm with zero biases)", r.attr, want, 12);
    result_free(&r);
    cattr_model *mgn = mlp_gemm_no_bias(&w0);
    r = attribute("LRP gamma (Gemm without a bias input)", mgn, &pe, x, NULL, t, NULL);
    if (r.attr) expect("LRP gamma on fc1 (Gemm without a bias input)", r.attr, want, 12);
    result_free(&r);
    cattr_model_free(mgn);

    /* LayerLRP: fc1's output, fc2's input (the gradient there times the input) and the graph input */
    ref_lrp_all(&w, x, t, 0, 0, false, want, hid);
    cattr_model *forms[2] = {mg, mm};
    for (int f = 0; f < 2; f++) {
        cattr_attr_params pl = params(CATTR_METHOD_LAYER_LRP);
        pl.layer = "fc1";
        r = attribute("LayerLRP at fc1", forms[f], &pl, x, NULL, t, NULL);
        if (r.attr) expect(f ? "LayerLRP at fc1's output (MatMul + Add)" : "LayerLRP at fc1's output (Gemm)", r.attr,
                           hid, 15);
        result_free(&r);
        /* fc2's input: by module path and attribute_to_layer_input (what the module reads from outside: for
         * MatMul + Add the MatMul's input), in both forms */
        pl.layer = "fc2";
        pl.attribute_to_layer_input = 1;
        r = attribute("LayerLRP at fc2's input", forms[f], &pl, x, NULL, t, NULL);
        if (r.attr) expect(f ? "LayerLRP at fc2's input value (MatMul + Add)" : "LayerLRP at fc2's input (Gemm)",
                           r.attr, hid, 15);
        result_free(&r);
        pl.layer = "x";
        pl.attribute_to_layer_input = 0;
        r = attribute("LayerLRP at the input", forms[f], &pl, x, NULL, t, NULL);
        if (r.attr) expect(f ? "LayerLRP at the graph input = LRP (MatMul + Add)" : "LayerLRP at the graph input = LRP",
                           r.attr, want, 12);
        result_free(&r);
    }

    /* errors: an op LRP has no rule for, reached; a rule on an unknown module */
    cg_graph *g = cg_new();
    int xi = cg_add_input(g, "x");
    cg_attrs ga = cg_attrs_default();
    ga.trans_b = 1;
    int h = cg_add_node(g, CG_GEMM, "/fc1/Gemm", (int[]){xi, add_const(g, "W1", copy_of(w.w1))}, 2, &ga, "h");
    int sq = cg_add_node(g, CG_MUL, "/square/Mul", (int[]){h, h}, 2, NULL, "sq");
    int y = cg_add_node(g, CG_GEMM, "/fc2/Gemm", (int[]){sq, add_const(g, "W2", copy_of(w.w2))}, 2, &ga, "y");
    cattr_model *msq = model_of(g, y);
    cattr_status st;
    r = attribute("LRP through a product of two activations", msq, &p, x, NULL, t, &st);
    CHECK(st == CATTR_ERR_UNSUPPORTED && strstr(cattr_last_error(), "'/square/Mul' (op Mul)"), "LRP on x * x: %s",
          cattr_last_error());
    result_free(&r);
    by_path[0] = (cattr_node_rule){"fc9", "EpsilonRule", 1e-9, 0.25, 0};
    r = attribute("LRP rule on an unknown module", mm, &pe, x, NULL, t, &st);
    CHECK(st == CATTR_ERR_INVALID_ARGUMENT && strstr(cattr_last_error(), "'fc9'"), "unknown module: %s",
          cattr_last_error());
    result_free(&r);

    cattr_tensor_free(x);
    cattr_model_free(mg);
    cattr_model_free(mm);
    cattr_model_free(m0g);
    cattr_model_free(m0);
    cattr_model_free(msq);
}

int main(void) {
    test_dl_delta_rescale_center();
    test_dl_maxpool();
    test_lrp_div();
    test_deeplift();
    test_guided_deconv();
    test_lrp();
    test_lrp_linear_forms();
    printf("%d checks, %d failed\n", g_checks, g_failed);
    return g_failed ? 1 : 0;
}
