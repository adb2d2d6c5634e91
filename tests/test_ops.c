/* test_ops.c - per-op tests of the IR, the CPU kernels, autodiff and both executors.
 *
 *  1. forward: every op as a one-node graph, float32 and float64, planned and eager, against reference loops;
 *  2. backward: autodiff of L = sum(s * y) against central finite differences (float64, h = 1e-6) for every
 *     differentiable op, a composed graph with fan-out, and a zero gradient for an input y does not depend on;
 *     second order: the gradient ops' own rules and a network's weight gradient differentiated again;
 *     plus PyTorch's conventions at kinks (Relu/LeakyRelu at 0, Clip at its bounds, MaxPool ties);
 *  3. executors: a small CNN and its backward give bitwise-identical results eager vs planned (and on a re-run);
 *  4. errors: shape errors and a missing backward rule return the right status and name the node; constants and
 *     inputs as plan outputs; cg_clone of an empty graph.
 * Runs with cwd = repo root. Prints each failed check and exits 1 if any failed, 0 otherwise. */
#include "backend/cpu/cpu_backend.h"
#include "backend/backend.h"
#include "core/core.h"
#include "graph/autodiff.h"
#include "graph/graph.h"
#include "exec/plan.h"
#include "ops/ops.h"
#include "core/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the backend under test: CATTR_TEST_DEVICE (default cpu); g_device_override while a test computes a reference on
 * another backend */
static const char *g_device_override;
static cx_backend *cx_test_backend(void) {
    cx_backend *be = NULL;
    cattr_status st = cx_backend_by_name(g_device_override ? g_device_override : getenv("CATTR_TEST_DEVICE"), &be);
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


static int g_checks, g_failed;

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

#define MAXIO 16
#define FD_H 1e-6
#define FD_TOL 1e-6

/* ---- tensors ------------------------------------------------------------------------------------------------ */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double urand(void) { /* xorshift64, [0, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 9007199254740992.0;
}

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define RANK(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define DIMS(...) RANK(__VA_ARGS__), SHAPE(__VA_ARGS__)

static cattr_tensor *alloc_or_die(cattr_dtype dt, int nd, const int64_t *sh) {
    cattr_tensor *t = cx_tensor_alloc(dt, nd, sh);
    if (!t) {
        printf("out of memory\n");
        exit(2);
    }
    return t;
}
static double *D(cattr_tensor *t) { return (double *)t->data; }

/* float64 tensor from values */
static cattr_tensor *mk(int nd, const int64_t *sh, const double *v) {
    cattr_tensor *t = alloc_or_die(CATTR_FLOAT64, nd, sh);
    memcpy(t->data, v, (size_t)t->numel * sizeof(double));
    return t;
}
/* uniform in [-1, 1] */
static cattr_tensor *rnd(int nd, const int64_t *sh) {
    cattr_tensor *t = alloc_or_die(CATTR_FLOAT64, nd, sh);
    for (int64_t i = 0; i < t->numel; i++) D(t)[i] = 2 * urand() - 1;
    return t;
}
/* |v| in [lo, 1], random sign: away from kinks at 0 and from zero denominators */
static cattr_tensor *rnd_away(int nd, const int64_t *sh, double lo) {
    cattr_tensor *t = alloc_or_die(CATTR_FLOAT64, nd, sh);
    for (int64_t i = 0; i < t->numel; i++) D(t)[i] = (lo + (1 - lo) * urand()) * (urand() < 0.5 ? -1 : 1);
    return t;
}
/* distinct values at least 0.01 apart (shuffled), for max pooling without near-ties */
static cattr_tensor *rnd_distinct(int nd, const int64_t *sh) {
    cattr_tensor *t = alloc_or_die(CATTR_FLOAT64, nd, sh);
    for (int64_t i = 0; i < t->numel; i++) D(t)[i] = -1 + 0.02 * (double)i + 0.005 * urand();
    for (int64_t i = t->numel - 1; i > 0; i--) {
        int64_t j = (int64_t)(urand() * (double)(i + 1));
        double v = D(t)[i];
        D(t)[i] = D(t)[j];
        D(t)[j] = v;
    }
    return t;
}
static cattr_tensor *idx64(int nd, const int64_t *sh, const int64_t *v) {
    cattr_tensor *t = alloc_or_die(CATTR_INT64, nd, sh);
    memcpy(t->data, v, (size_t)t->numel * sizeof(int64_t));
    return t;
}
static void set_ints(cg_attrs *a, int n, const int64_t *v) {
    a->n_ints = n;
    memcpy(a->ints, v, (size_t)n * sizeof(int64_t));
}

/* Compares got (any float dtype) with want; tolerance relative to 1 + |want|, by dtype. */
static void expect(const char *what, const cattr_tensor *got, int nd, const int64_t *sh, const double *want) {
    char b1[96], b2[96];
    for (int64_t i = 0; i < got->numel && i < cx_numel(nd, sh); i++) /* a NaN wanted is a NaN got, and only there */
        if (isnan(want[i]) || isnan(cx_tensor_get(got, i))) {
            CHECK(isnan(want[i]) && isnan(cx_tensor_get(got, i)), "%s: element %lld = %g, want %g", what, (long long)i,
                  cx_tensor_get(got, i), want[i]);
        }
    CHECK(cx_shape_eq(got->ndim, got->shape, nd, sh), "%s: shape %s, want %s", what,
          cx_shape_str(got->ndim, got->shape, b1, sizeof b1), cx_shape_str(nd, sh, b2, sizeof b2));
    if (!cx_shape_eq(got->ndim, got->shape, nd, sh)) return;
    double tol = got->dtype == CATTR_FLOAT32 ? 1e-5 : 1e-12, worst = 0;
    int64_t bad = -1;
    for (int64_t i = 0; i < got->numel; i++) {
        if (isnan(want[i])) continue;
        double e = fabs(cx_tensor_get(got, i) - want[i]) / (1 + fabs(want[i]));
        if (!(e <= tol) && bad < 0) bad = i;
        if (!(e <= worst)) worst = e;
    }
    CHECK(bad < 0, "%s: element %lld = %.10g, want %.10g (max rel err %.3g)", what, (long long)bad,
          bad >= 0 ? cx_tensor_get(got, bad) : 0.0, bad >= 0 ? want[bad] : 0.0, worst);
}

/* ---- graphs and runs ---------------------------------------------------------------------------------------- */

/* One operand of a single-op graph: a graph input or a constant. t == NULL: an absent optional input. */
typedef struct {
    cattr_tensor *t;
    int cnst;
} opnd;
#define IN(t) ((opnd){(t), 0})
#define CST(t) ((opnd){(t), 1})

/* Graph y = op(operands) with the node called "node". The graph borrows the constants. */
static cg_graph *op_graph(cg_op op, const cg_attrs *a, int n, const opnd *ops, int *y) {
    cg_graph *g = cg_new();
    int ids[CG_MAX_IN];
    char name[16];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "in%d", i);
        ids[i] = !ops[i].t ? -1 : ops[i].cnst ? cg_add_const(g, name, ops[i].t, false) : cg_add_input(g, name);
    }
    *y = cg_add_node(g, op, "node", ids, n, a, "y");
    cg_add_output(g, *y);
    return g;
}
/* The host tensors of op_graph's graph inputs, in order; returns their count. */
static int op_inputs(int n, const opnd *ops, cattr_tensor **in) {
    int k = 0;
    for (int i = 0; i < n; i++)
        if (ops[i].t && !ops[i].cnst) in[k++] = ops[i].t;
    return k;
}

/* A plan with its constants. Inputs are host tensors in graph-input order (NULL: not needed), converted to the
 * compute dtype on each run. */
typedef struct {
    cx_consts *c;
    cx_plan *p;
    cattr_dtype dt;
    int n_in, n_out, outs[MAXIO];
} runner;

static cattr_status runner_new(runner *r, const cg_graph *g, cattr_tensor *const *in, cattr_dtype dt, bool eager,
                               const int *outs, int n_out) {
    int nd[MAXIO] = {0};
    int64_t sh[MAXIO][CATTR_MAX_DIMS];
    memset(r, 0, sizeof *r);
    memset(sh, 0, sizeof sh);
    r->dt = dt;
    r->n_in = g->n_inputs;
    r->n_out = n_out;
    memcpy(r->outs, outs, (size_t)n_out * sizeof *outs);
    for (int i = 0; i < g->n_inputs; i++)
        if (in[i]) {
            nd[i] = in[i]->ndim;
            memcpy(sh[i], in[i]->shape, sizeof sh[i]);
        }
    cattr_status st = cx_consts_new(cx_test_backend(), dt, &r->c);
    if (st == CATTR_OK)
        st = cx_plan_new(g, r->c, eager, nd, (const int64_t(*)[CATTR_MAX_DIMS])sh, NULL, outs, n_out, &r->p);
    return st;
}

static void runner_free(runner *r) {
    cx_plan_free(r->p);
    cx_consts_free(r->c);
    memset(r, 0, sizeof *r);
}

/* Runs the plan; out[k] receives a new tensor (compute dtype) for output k, or NULL on failure. */
static cattr_status runner_run(runner *r, cattr_tensor *const *in, cattr_tensor **out) {
    const void *host[MAXIO] = {0};
    cattr_tensor *conv[MAXIO] = {0};
    void *dst[MAXIO];
    cattr_status st = CATTR_OK;
    for (int i = 0; i < r->n_in && st == CATTR_OK; i++) {
        if (!in[i]) continue;
        if (in[i]->dtype == r->dt) host[i] = in[i]->data;
        else if ((st = cattr_tensor_convert(in[i], r->dt, &conv[i])) == CATTR_OK) host[i] = conv[i]->data;
    }
    for (int k = 0; k < r->n_out; k++) {
        const cx_view *v = cx_plan_view(r->p, r->outs[k]);
        out[k] = alloc_or_die(v->dtype, v->ndim, v->shape);
        dst[k] = out[k]->data;
    }
    if (st == CATTR_OK) st = cx_plan_run(r->p, host, dst);
    for (int i = 0; i < r->n_in; i++) cattr_tensor_free(conv[i]);
    if (st != CATTR_OK)
        for (int k = 0; k < r->n_out; k++) {
            cattr_tensor_free(out[k]);
            out[k] = NULL;
        }
    return st;
}

/* Plans and runs graph g once for output y; NULL (and a failed check) on error. */
static cattr_tensor *run_graph(const char *what, const cg_graph *g, int y, cattr_tensor *const *in, cattr_dtype dt,
                               bool eager) {
    runner r;
    cattr_tensor *out = NULL;
    cattr_status st = runner_new(&r, g, in, dt, eager, &y, 1);
    if (st == CATTR_OK) st = runner_run(&r, in, &out);
    CHECK(st == CATTR_OK, "%s: %s: %s", what, cattr_status_string(st), cattr_last_error());
    runner_free(&r);
    return out;
}

/* Forward check of y = op(operands) in float32 and float64, planned and eager. */
static void fwd_case(const char *what, cg_op op, const cg_attrs *a, int n, const opnd *ops, int nd, const int64_t *sh,
                     const double *want) {
    int y;
    cg_graph *g = op_graph(op, a, n, ops, &y);
    cattr_tensor *in[MAXIO];
    op_inputs(n, ops, in);
    for (int d = 0; d < 2; d++)
        for (int eager = 0; eager < 2; eager++) {
            cattr_dtype dt = d ? CATTR_FLOAT64 : CATTR_FLOAT32;
            char name[160];
            snprintf(name, sizeof name, "%s [%s, %s]", what, cattr_dtype_name(dt), eager ? "eager" : "planned");
            cattr_tensor *out = run_graph(name, g, y, in, dt, eager);
            if (out) {
                CHECK(out->dtype == dt, "%s: output dtype %s", name, cattr_dtype_name(out->dtype));
                expect(name, out, nd, sh, want);
            }
            cattr_tensor_free(out);
        }
    cg_free(g);
}

/* Gradients of sum(seed * y) w.r.t. every graph input of g (on a clone; g is not modified). */
static cattr_status autodiff_run_dt(const cg_graph *g0, int y, cattr_tensor *const *in, cattr_tensor *seed,
                                    const cg_rules *rules, cattr_dtype dt, cattr_tensor **grads) {
    cg_graph *g = cg_clone(g0);
    int n = g->n_inputs, wrt[MAXIO], gid[MAXIO];
    memcpy(wrt, g->inputs, (size_t)n * sizeof(int));
    int s = cg_add_input(g, "seed");
    cattr_status st = cg_autodiff(g, y, s, wrt, n, rules, gid);
    if (st == CATTR_OK) {
        cattr_tensor *in2[MAXIO];
        memcpy(in2, in, (size_t)n * sizeof *in);
        in2[n] = seed;
        runner r;
        st = runner_new(&r, g, in2, dt, false, gid, n);
        if (st == CATTR_OK) st = runner_run(&r, in2, grads);
        runner_free(&r);
    }
    cg_free(g);
    return st;
}

static cattr_status autodiff_run(const cg_graph *g0, int y, cattr_tensor *const *in, cattr_tensor *seed,
                                 const cg_rules *rules, cattr_tensor **grads) {
    return autodiff_run_dt(g0, y, in, seed, rules, CATTR_FLOAT64, grads);
}

static double loss(runner *fw, cattr_tensor *const *in, const cattr_tensor *seed) {
    cattr_tensor *y = NULL;
    if (runner_run(fw, in, &y) != CATTR_OK) return NAN;
    double L = 0;
    for (int64_t i = 0; i < y->numel; i++) L += D(y)[i] * cx_tensor_get(seed, i);
    cattr_tensor_free(y);
    return L;
}

/* Checks the autodiff gradient of L = sum(s * y), s random, w.r.t. every graph input of g (float64 host tensors
 * in[], perturbed in place and restored) against central differences on every element. gmax (optional) receives
 * the largest |gradient| per input. */
static void grad_check(const char *what, const cg_graph *g, int y, cattr_tensor *const *in, double *gmax) {
    int n = g->n_inputs;
    runner fw;
    cattr_status st = runner_new(&fw, g, in, CATTR_FLOAT64, false, &y, 1);
    CHECK(st == CATTR_OK, "%s: forward plan: %s", what, cattr_last_error());
    if (st != CATTR_OK) return;
    const cx_view *yv = cx_plan_view(fw.p, y);
    cattr_tensor *seed = rnd(yv->ndim, yv->shape);
    cg_rules rules;
    cg_rules_default(&rules);
    cattr_tensor *grads[MAXIO] = {0};
    st = autodiff_run(g, y, in, seed, &rules, grads);
    CHECK(st == CATTR_OK, "%s: backward: %s: %s", what, cattr_status_string(st), cattr_last_error());
    for (int k = 0; k < n && st == CATTR_OK; k++) {
        char b1[96], b2[96];
        cattr_tensor *x = in[k], *gr = grads[k];
        bool same = cx_shape_eq(gr->ndim, gr->shape, x->ndim, x->shape);
        CHECK(same, "%s: gradient %d has shape %s, input %s", what, k, cx_shape_str(gr->ndim, gr->shape, b1, sizeof b1),
              cx_shape_str(x->ndim, x->shape, b2, sizeof b2));
        if (!same) continue;
        double maxdiff = 0, maxfd = 0, gm = 0, wg = 0, wfd = 0;
        int64_t worst = -1;
        for (int64_t i = 0; i < x->numel; i++) {
            double v = D(x)[i], xp = v + FD_H, xm = v - FD_H;
            D(x)[i] = xp;
            double lp = loss(&fw, in, seed);
            D(x)[i] = xm;
            double lm = loss(&fw, in, seed);
            D(x)[i] = v;
            double fd = (lp - lm) / (xp - xm), gi = D(gr)[i], diff = fabs(gi - fd);
            if (!(diff <= maxdiff)) {
                maxdiff = diff;
                worst = i;
                wg = gi;
                wfd = fd;
            }
            if (fabs(fd) > maxfd) maxfd = fabs(fd);
            if (fabs(gi) > gm) gm = fabs(gi);
        }
        double rel = maxdiff / (maxfd > 1 ? maxfd : 1);
        CHECK(rel < FD_TOL, "%s: d/d(input %d): rel err %.3g at element %lld (autodiff %.12g, finite diff %.12g)", what,
              k, rel, (long long)worst, wg, wfd);
        if (gmax) gmax[k] = gm;
    }
    for (int k = 0; k < n; k++) cattr_tensor_free(grads[k]);
    cattr_tensor_free(seed);
    runner_free(&fw);
}

static void grad_op(const char *what, cg_op op, const cg_attrs *a, int n, const opnd *ops) {
    int y;
    cg_graph *g = op_graph(op, a, n, ops, &y);
    cattr_tensor *in[MAXIO];
    op_inputs(n, ops, in);
    char name[160];
    snprintf(name, sizeof name, "grad %s", what);
    grad_check(name, g, y, in, NULL);
    cg_free(g);
}

static void free_ops(int n, opnd *ops) {
    for (int i = 0; i < n; i++) cattr_tensor_free(ops[i].t);
}

/* ---- reference implementations ----------------------------------------------------------------------------- */

static void ref_gemm(const double *A, const double *B, const double *C, int cm, int cn, int M, int K, int N, int ta,
                     int tb, double alpha, double beta, double *Y) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (ta ? A[k * M + i] : A[i * K + k]) * (tb ? B[j * K + k] : B[k * N + j]);
            Y[i * N + j] = alpha * s + (C ? beta * C[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)] : 0);
        }
}

/* [ba, M, K] @ [bb, K, N] with ba, bb in {1, b} */
static void ref_matmul(const double *A, const double *B, int ba, int bb, int M, int K, int N, double *Y) {
    int bo = ba > bb ? ba : bb;
    for (int b = 0; b < bo; b++)
        ref_gemm(A + (ba == 1 ? 0 : b) * M * K, B + (bb == 1 ? 0 : b) * K * N, NULL, 0, 0, M, K, N, 0, 0, 1, 0,
                 Y + b * M * N);
}

typedef struct {
    int N, C, H, W, CO, KH, KW, G, s[2], p[2], d[2], OH, OW; /* p: begin pads (end pads only change OH, OW) */
} conv_geo;

static void ref_conv(const conv_geo *c, const double *x, const double *w, const double *b, double *y) {
    int cig = c->C / c->G, cog = c->CO / c->G;
    for (int n = 0; n < c->N; n++)
        for (int co = 0; co < c->CO; co++)
            for (int oh = 0; oh < c->OH; oh++)
                for (int ow = 0; ow < c->OW; ow++) {
                    double s = b ? b[co] : 0;
                    for (int ci = 0; ci < cig; ci++)
                        for (int kh = 0; kh < c->KH; kh++)
                            for (int kw = 0; kw < c->KW; kw++) {
                                int ih = oh * c->s[0] - c->p[0] + kh * c->d[0], iw = ow * c->s[1] - c->p[1] + kw * c->d[1];
                                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                                s += x[((n * c->C + co / cog * cig + ci) * c->H + ih) * c->W + iw] *
                                     w[((co * cig + ci) * c->KH + kh) * c->KW + kw];
                            }
                    y[((n * c->CO + co) * c->OH + oh) * c->OW + ow] = s;
                }
}

typedef struct {
    int NC, H, W, k[2], s[2], pb[2], pe[2], cip, OH, OW, d[2]; /* d: dilation (max pooling; 0 means 1) */
} pool_geo;

static void ref_pool(const pool_geo *p, bool maxp, const double *x, double *y) {
    for (int nc = 0; nc < p->NC; nc++)
        for (int oh = 0; oh < p->OH; oh++)
            for (int ow = 0; ow < p->OW; ow++) {
                int h0 = oh * p->s[0] - p->pb[0], w0 = ow * p->s[1] - p->pb[1], seen = 0;
                int dh = p->d[0] ? p->d[0] : 1, dw = p->d[1] ? p->d[1] : 1;
                double best = 0, sum = 0;
                for (int ih = h0; ih < h0 + p->k[0] * dh; ih += dh)
                    for (int iw = w0; iw < w0 + p->k[1] * dw; iw += dw) {
                        if (ih < 0 || ih >= p->H || iw < 0 || iw >= p->W) continue;
                        double v = x[(nc * p->H + ih) * p->W + iw];
                        if (!seen++ || v > best) best = v;
                        sum += v;
                    }
                int eh = h0 + p->k[0] < p->H + p->pe[0] ? h0 + p->k[0] : p->H + p->pe[0];
                int ew = w0 + p->k[1] < p->W + p->pe[1] ? w0 + p->k[1] : p->W + p->pe[1];
                int div = p->cip ? (eh - h0) * (ew - w0) : seen;
                y[(nc * p->OH + oh) * p->OW + ow] = maxp ? best : sum / div;
            }
}

static void pool_attrs(cg_attrs *a, const pool_geo *p) {
    a->nsp = 2;
    for (int i = 0; i < 2; i++) {
        a->kernel[i] = p->k[i];
        a->stride[i] = p->s[i];
        a->pad[i] = p->pb[i];
        a->pad[2 + i] = p->pe[i];
        a->dilation[i] = p->d[i] ? p->d[i] : 1;
    }
    a->count_include_pad = p->cip;
}

static void ref_softmax(const double *x, int outer, int len, int inner, double *y) {
    for (int o = 0; o < outer; o++)
        for (int i = 0; i < inner; i++) {
            double s = 0;
            for (int j = 0; j < len; j++) s += exp(x[(o * len + j) * inner + i]);
            for (int j = 0; j < len; j++) y[(o * len + j) * inner + i] = exp(x[(o * len + j) * inner + i]) / s;
        }
}

/* ---- 1 + 2: per-op forward and backward ------------------------------------------------------------------- */

static void test_gemm(void) {
    enum { M = 2, K = 3, N = 4 };
    const struct {
        const char *name;
        int nd;
        int64_t sh[2];
        int cm, cn;
    } cs[] = {{"no C", -1, {0}, 0, 0},     {"C[N]", 1, {N}, 1, N},    {"C[1,N]", 2, {1, N}, 1, N},
              {"C[M,N]", 2, {M, N}, M, N}, {"C scalar", 0, {0}, 1, 1}, {"C[M,1]", 2, {M, 1}, M, 1}};
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (size_t c = 0; c < CX_ARRAY_LEN(cs); c++) {
                opnd ops[3] = {IN(ta ? rnd(DIMS(K, M)) : rnd(DIMS(M, K))), IN(tb ? rnd(DIMS(N, K)) : rnd(DIMS(K, N))),
                               IN(cs[c].nd >= 0 ? rnd(cs[c].nd, cs[c].sh) : NULL)};
                cg_attrs a = cg_attrs_default();
                a.trans_a = ta;
                a.trans_b = tb;
                a.alpha = 0.5;
                a.beta = cs[c].nd >= 0 ? 2.0 : 1.0;
                double want[M * N];
                ref_gemm(D(ops[0].t), D(ops[1].t), ops[2].t ? D(ops[2].t) : NULL, cs[c].cm, cs[c].cn, M, K, N, ta, tb,
                         a.alpha, a.beta, want);
                char what[96];
                snprintf(what, sizeof what, "Gemm trans_a=%d trans_b=%d %s", ta, tb, cs[c].name);
                int n = ops[2].t ? 3 : 2;
                fwd_case(what, CG_GEMM, &a, n, ops, DIMS(M, N), want);
                grad_op(what, CG_GEMM, &a, n, ops);
                ops[1].cnst = 1; /* B as a weight: gradients w.r.t. A and C only */
                grad_op(what, CG_GEMM, &a, n, ops);
                free_ops(3, ops);
            }
    /* beta = 0: C is ignored and gets a zero gradient */
    opnd ops[3] = {IN(rnd(DIMS(M, K))), CST(rnd(DIMS(K, N))), IN(rnd(DIMS(M, N)))};
    cg_attrs a = cg_attrs_default();
    a.beta = 0;
    double want[M * N];
    ref_gemm(D(ops[0].t), D(ops[1].t), NULL, 0, 0, M, K, N, 0, 0, 1, 0, want);
    fwd_case("Gemm beta=0", CG_GEMM, &a, 3, ops, DIMS(M, N), want);
    grad_op("Gemm beta=0", CG_GEMM, &a, 3, ops);
    free_ops(3, ops);
}

static void test_matmul(void) {
    const struct {
        int nda;
        int64_t as[3];
        int ndb;
        int64_t bs[3];
    } cs[] = {{2, {3, 4}, 2, {4, 5}},       {3, {2, 3, 4}, 3, {2, 4, 5}}, {3, {2, 3, 4}, 2, {4, 5}},
              {3, {1, 3, 4}, 3, {2, 4, 5}}, {2, {3, 4}, 3, {2, 4, 5}},    {3, {2, 3, 4}, 3, {1, 4, 5}}};
    for (size_t c = 0; c < CX_ARRAY_LEN(cs); c++) {
        opnd ops[2] = {IN(rnd(cs[c].nda, cs[c].as)), IN(rnd(cs[c].ndb, cs[c].bs))};
        int ba = cs[c].nda == 3 ? (int)cs[c].as[0] : 1, bb = cs[c].ndb == 3 ? (int)cs[c].bs[0] : 1;
        int bo = ba > bb ? ba : bb;
        double want[2 * 3 * 5];
        ref_matmul(D(ops[0].t), D(ops[1].t), ba, bb, 3, 4, 5, want);
        char what[64];
        snprintf(what, sizeof what, "MatMul case %zu", c);
        if (cs[c].nda == 2 && cs[c].ndb == 2) fwd_case(what, CG_MATMUL, NULL, 2, ops, DIMS(3, 5), want);
        else fwd_case(what, CG_MATMUL, NULL, 2, ops, DIMS(bo, 3, 5), want);
        grad_op(what, CG_MATMUL, NULL, 2, ops);
        free_ops(2, ops);
    }
    /* 1-D operands (numpy: a vector is a row on the left, a column on the right) */
    double want[6];
    opnd mv[2] = {IN(rnd(DIMS(2, 3, 4))), CST(rnd(DIMS(4)))};
    ref_matmul(D(mv[0].t), D(mv[1].t), 1, 1, 6, 4, 1, want);
    fwd_case("MatMul [2,3,4] @ [4]", CG_MATMUL, NULL, 2, mv, DIMS(2, 3), want);
    grad_op("MatMul [2,3,4] @ [4] (vector weight)", CG_MATMUL, NULL, 2, mv);
    opnd vm[2] = {IN(rnd(DIMS(4))), IN(rnd(DIMS(4, 5)))};
    ref_matmul(D(vm[0].t), D(vm[1].t), 1, 1, 1, 4, 5, want);
    fwd_case("MatMul [4] @ [4,5]", CG_MATMUL, NULL, 2, vm, DIMS(5), want);
    vm[0].cnst = 1;
    grad_op("MatMul [4] @ [4,5] (vector weight)", CG_MATMUL, NULL, 2, vm);
    free_ops(2, mv);
    free_ops(2, vm);
    opnd b4[2] = {IN(rnd(DIMS(2, 1, 3, 4))), IN(rnd(DIMS(3, 4, 5)))}; /* both sides broadcast: [2, 3, 3, 5] */
    grad_op("MatMul [2,1,3,4] @ [3,4,5]", CG_MATMUL, NULL, 2, b4);
    free_ops(2, b4);
}

static void conv_case(const char *what, const conv_geo *c, int nsp, const int64_t *pe, bool bias) {
    cg_attrs a = cg_attrs_default();
    a.nsp = nsp;
    a.group = c->G;
    for (int i = 0; i < nsp; i++) { /* a 1-D conv is the W axis of the 2-D reference (H = 1) */
        int r = nsp == 1 ? 1 : i;
        a.stride[i] = c->s[r];
        a.dilation[i] = c->d[r];
        a.pad[i] = c->p[r];
        a.pad[nsp + i] = pe[i];
    }
    int64_t xs[4] = {c->N, c->C, c->H, c->W}, ws[4] = {c->CO, c->C / c->G, c->KH, c->KW};
    int64_t ys[4] = {c->N, c->CO, c->OH, c->OW};
    if (nsp == 1) xs[2] = xs[3], ws[2] = ws[3], ys[2] = ys[3];
    opnd ops[3] = {IN(rnd(2 + nsp, xs)), CST(rnd(2 + nsp, ws)), CST(bias ? rnd(DIMS(c->CO)) : NULL)};
    double *want = malloc((size_t)(c->N * c->CO * c->OH * c->OW) * sizeof(double));
    ref_conv(c, D(ops[0].t), D(ops[1].t), bias ? D(ops[2].t) : NULL, want);
    fwd_case(what, CG_CONV, &a, bias ? 3 : 2, ops, 2 + nsp, ys, want);
    grad_op(what, CG_CONV, &a, bias ? 3 : 2, ops);
    free(want);
    free_ops(3, ops);
}

static void test_conv(void) {
    /* 1-D: L 7, k 3, stride 2, pads (1, 2), dilation 2 -> (7 + 3 - 4 - 1) / 2 + 1 = 3 */
    conv_geo c1 = {2, 2, 1, 7, 3, 1, 3, 1, {1, 2}, {0, 1}, {1, 2}, 1, 3};
    conv_case("Conv 1-D stride/pad/dilation", &c1, 1, SHAPE(2), true);
    /* 2-D: [5, 6], k [3, 2], stride (2, 1), pads (1, 0 | 1, 1), dilation (1, 2) -> [3, 5] */
    conv_geo c2 = {1, 2, 5, 6, 4, 3, 2, 1, {2, 1}, {1, 0}, {1, 2}, 3, 5};
    conv_case("Conv 2-D stride/pad/dilation", &c2, 2, SHAPE(1, 1), true);
    /* groups = 2, no bias, pads 1 */
    conv_geo c3 = {2, 4, 4, 4, 6, 3, 3, 2, {1, 1}, {1, 1}, {1, 1}, 4, 4};
    conv_case("Conv 2-D groups=2 no bias", &c3, 2, SHAPE(1, 1), false);
    /* groups = 2, stride 2, 1-D */
    conv_geo c4 = {1, 4, 1, 8, 2, 1, 2, 2, {1, 2}, {0, 0}, {1, 1}, 1, 4};
    conv_case("Conv 1-D groups=2 stride 2", &c4, 1, SHAPE(0), true);
    /* dilation along H: [6, 5], k [2, 3], stride (1, 2), pads (2, 1 | 0, 1), dilation (2, 1) -> [6, 3] */
    conv_geo c5 = {1, 2, 6, 5, 2, 2, 3, 1, {1, 2}, {2, 1}, {2, 1}, 6, 3};
    conv_case("Conv 2-D dilation along H", &c5, 2, SHAPE(0, 1), true);
    /* stride 1, asymmetric pads below the kernel size: the direct (padded-plane) kernels */
    conv_geo c6 = {2, 3, 5, 6, 4, 3, 2, 1, {1, 1}, {1, 0}, {1, 1}, 6, 6};
    conv_case("Conv 2-D stride 1 asymmetric pads (direct)", &c6, 2, SHAPE(2, 1), true);
    /* stride 1 but a filter too large for the direct kernels (16 x 3 x 3 x 8 taps): im2col + GEMM */
    conv_geo c7 = {1, 16, 4, 4, 8, 3, 3, 1, {1, 1}, {1, 1}, {1, 1}, 4, 4};
    conv_case("Conv 2-D stride 1 large filter (im2col)", &c7, 2, SHAPE(1, 1), true);
    /* depthwise (groups = channels in = channels out: the direct per-plane kernels): stride 2 with pads, dilation 2
     * with pads as large as the dilated taps reach, and 1-D with stride 2 */
    conv_geo c9 = {2, 3, 7, 6, 3, 3, 3, 3, {2, 2}, {1, 1}, {1, 1}, 4, 3};
    conv_case("Conv 2-D depthwise stride 2", &c9, 2, SHAPE(1, 1), true);
    conv_geo c10 = {1, 4, 9, 8, 4, 3, 3, 4, {1, 1}, {2, 2}, {2, 2}, 9, 8};
    conv_case("Conv 2-D depthwise dilation 2", &c10, 2, SHAPE(2, 2), false);
    conv_geo c11 = {2, 3, 1, 9, 3, 1, 3, 3, {1, 2}, {0, 1}, {1, 1}, 1, 4};
    conv_case("Conv 1-D depthwise stride 2", &c11, 1, SHAPE(0), true);
    /* stride 1 with pads as large as the kernel (the output reads only padding at its edges): im2col + GEMM */
    conv_geo c8 = {1, 1, 3, 3, 2, 2, 2, 1, {1, 1}, {2, 2}, {1, 1}, 6, 6};
    conv_case("Conv 2-D pads = kernel (im2col)", &c8, 2, SHAPE(2, 2), true);
    /* auto_pad SAME_UPPER / SAME_LOWER (pads from the input's shape): the same numbers as the explicit pads they
     * come to (7 x 8, kernel 3, stride 2: out 4 x 4, pads H 1 + 1, W 0 + 1 upper or 1 + 0 lower), and finite
     * differences; the pools likewise (onnxruntime agreement: tests/python/test_ops_ort.py) */
    for (int mode = 1; mode <= 2; mode++) {
        cg_attrs a = cg_attrs_default(), e = cg_attrs_default();
        a.nsp = e.nsp = 2;
        for (int i = 0; i < 2; i++) a.stride[i] = e.stride[i] = 2;
        a.auto_pad = mode;
        int64_t pads[4] = {1, mode == 1 ? 0 : 1, 1, mode == 1 ? 1 : 0};
        memcpy(e.pad, pads, sizeof pads);
        opnd ops[2] = {IN(rnd(DIMS(1, 2, 7, 8))), CST(rnd(DIMS(3, 2, 3, 3)))};
        int y;
        cg_graph *ge = op_graph(CG_CONV, &e, 2, ops, &y);
        cattr_tensor *in[1] = {ops[0].t};
        cattr_tensor *want = run_graph("Conv explicit pads", ge, y, in, CATTR_FLOAT64, false);
        const char *what = mode == 1 ? "Conv auto_pad SAME_UPPER" : "Conv auto_pad SAME_LOWER";
        if (want) fwd_case(what, CG_CONV, &a, 2, ops, DIMS(1, 3, 4, 4), D(want));
        grad_op(what, CG_CONV, &a, 2, ops);
        cattr_tensor_free(want);
        cg_free(ge);
        for (int k = 0; k < 2; k++) {
            cg_attrs pa = cg_attrs_default();
            pa.nsp = 2;
            pa.auto_pad = mode;
            for (int i = 0; i < 2; i++) pa.stride[i] = 2, pa.kernel[i] = 3;
            opnd x = IN(rnd_distinct(DIMS(1, 2, 7, 8)));
            grad_op(k ? "AveragePool auto_pad" : "MaxPool auto_pad", k ? CG_AVGPOOL : CG_MAXPOOL, &pa, 1, &x);
            free_ops(1, &x);
        }
        free_ops(2, ops);
    }
}

static void pool_case(const char *what, cg_op op, const pool_geo *p, int ceil_mode, bool negative) {
    cg_attrs a = cg_attrs_default();
    pool_attrs(&a, p);
    a.ceil_mode = ceil_mode;
    opnd x = IN(rnd_distinct(DIMS(1, p->NC, p->H, p->W)));
    if (negative) /* all-negative input: padding must not act as a 0 in max pooling */
        for (int64_t i = 0; i < x.t->numel; i++) D(x.t)[i] -= 2;
    double want[64];
    ref_pool(p, op == CG_MAXPOOL, D(x.t), want);
    fwd_case(what, op, &a, 1, &x, DIMS(1, p->NC, p->OH, p->OW), want);
    grad_op(what, op, &a, 1, &x);
    free_ops(1, &x);
}

static void test_pools(void) {
    pool_geo p1 = {2, 4, 4, {2, 2}, {2, 2}, {0, 0}, {0, 0}, 0, 2, 2, {1, 1}};
    pool_case("MaxPool 2x2/2", CG_MAXPOOL, &p1, 0, false);
    pool_geo p2 = {1, 5, 5, {3, 3}, {2, 2}, {1, 1}, {1, 1}, 0, 3, 3, {1, 1}};
    pool_case("MaxPool 3x3/2 pad 1", CG_MAXPOOL, &p2, 0, true);
    pool_geo p3 = {1, 5, 5, {2, 2}, {2, 2}, {0, 0}, {0, 0}, 0, 3, 3, {1, 1}};
    pool_case("MaxPool ceil_mode", CG_MAXPOOL, &p3, 1, false);
    pool_geo p4 = {2, 4, 5, {3, 2}, {2, 2}, {1, 0}, {1, 1}, 0, 2, 3, {1, 1}};
    pool_case("MaxPool asymmetric pads", CG_MAXPOOL, &p4, 0, true);
    /* dilation (2, 3): extent 5 x 7 on [7, 9] with pads 1 -> [(9 - 5) / 2 + 1, (11 - 7) / 1 + 1] = [3, 5] */
    pool_geo p5 = {1, 7, 9, {3, 3}, {2, 1}, {1, 1}, {1, 1}, 0, 3, 5, {2, 3}};
    pool_case("MaxPool dilation", CG_MAXPOOL, &p5, 0, true);
    pool_geo p6 = {2, 7, 8, {3, 3}, {3, 3}, {1, 1}, {1, 1}, 0, 3, 3, {1, 1}}; /* a stride other than 1 and 2 */
    pool_case("MaxPool 3x3/3 pad 1", CG_MAXPOOL, &p6, 0, true);
    for (int cip = 0; cip < 2; cip++) {
        char what[64];
        pool_geo q1 = {2, 4, 4, {3, 3}, {2, 2}, {1, 1}, {1, 1}, cip, 2, 2, {1, 1}};
        snprintf(what, sizeof what, "AveragePool pad 1 count_include_pad=%d", cip);
        pool_case(what, CG_AVGPOOL, &q1, 0, false);
        pool_geo q2 = {1, 5, 5, {2, 2}, {2, 2}, {0, 0}, {0, 0}, cip, 3, 3, {1, 1}};
        snprintf(what, sizeof what, "AveragePool ceil_mode count_include_pad=%d", cip);
        pool_case(what, CG_AVGPOOL, &q2, 1, false);
        pool_geo q3 = {1, 4, 5, {2, 3}, {1, 2}, {0, 1}, {1, 1}, cip, 4, 3, {1, 1}};
        snprintf(what, sizeof what, "AveragePool asymmetric pads count_include_pad=%d", cip);
        pool_case(what, CG_AVGPOOL, &q3, 0, false);
    }
    /* first-maximum rule: forward picks the max, backward routes each window's gradient to its first maximum */
    pool_geo pt = {1, 2, 4, {2, 2}, {2, 2}, {0, 0}, {0, 0}, 0, 1, 2, {1, 1}};
    cg_attrs a = cg_attrs_default();
    pool_attrs(&a, &pt);
    opnd x = IN(mk(DIMS(1, 1, 2, 4), (const double[]){0.5, 0.9, 1, 1, 0.9, 0.1, 1, 1}));
    fwd_case("MaxPool ties", CG_MAXPOOL, &a, 1, &x, DIMS(1, 1, 1, 2), (const double[]){0.9, 1});
    int y;
    cg_graph *g = op_graph(CG_MAXPOOL, &a, 1, &x, &y);
    cattr_tensor *seed = mk(DIMS(1, 1, 1, 2), (const double[]){3, 5}), *gr = NULL;
    cg_rules rules;
    cg_rules_default(&rules);
    cattr_status st = autodiff_run(g, y, &x.t, seed, &rules, &gr);
    CHECK(st == CATTR_OK, "MaxPool ties backward: %s", cattr_last_error());
    if (gr) expect("MaxPool ties backward", gr, DIMS(1, 1, 2, 4), (const double[]){0, 3, 5, 0, 0, 0, 0, 0});
    cattr_tensor_free(gr);
    cattr_tensor_free(seed);
    cg_free(g);
    free_ops(1, &x);

    opnd gx = IN(rnd(DIMS(2, 3, 2, 2)));
    double want[6];
    for (int i = 0; i < 6; i++) want[i] = (D(gx.t)[4 * i] + D(gx.t)[4 * i + 1] + D(gx.t)[4 * i + 2] + D(gx.t)[4 * i + 3]) / 4;
    fwd_case("GlobalAveragePool", CG_GLOBALAVGPOOL, NULL, 1, &gx, DIMS(2, 3, 1, 1), want);
    grad_op("GlobalAveragePool", CG_GLOBALAVGPOOL, NULL, 1, &gx);
    free_ops(1, &gx);
    /* a NaN in a window is the maximum (PyTorch), whatever comes after it: 2x2 windows (the unrolled kernel) and 3x1 */
    {
        opnd x = IN(mk(DIMS(1, 1, 2, 4), (const double[]){NAN, 1, 2, 0.5, 0, 3, NAN, 9}));
        cg_attrs a = cg_attrs_default();
        a.nsp = 2;
        a.kernel[0] = a.kernel[1] = 2;
        a.stride[0] = a.stride[1] = 2;
        fwd_case("MaxPool 2x2 NaN", CG_MAXPOOL, &a, 1, &x, DIMS(1, 1, 1, 2), (const double[]){NAN, NAN});
        a.kernel[0] = 1, a.kernel[1] = 3;
        a.stride[0] = a.stride[1] = 1;
        fwd_case("MaxPool 1x3 NaN", CG_MAXPOOL, &a, 1, &x, DIMS(1, 1, 2, 2), (const double[]){NAN, 2, NAN, NAN});
        free_ops(1, &x);
    }
    /* padded windows (the row kernel): a NaN stays the maximum, -inf values are maxima only when alone */
    {
        opnd x = IN(mk(DIMS(1, 1, 3, 4), (const double[]){-INFINITY, -INFINITY, NAN, 1, -INFINITY, 2, 0.5, -INFINITY, 3,
                                                           -INFINITY, NAN, 0}));
        cg_attrs a = cg_attrs_default();
        a.nsp = 2;
        a.kernel[0] = a.kernel[1] = 3;
        a.stride[0] = a.stride[1] = 2;
        for (int i = 0; i < 4; i++) a.pad[i] = 1;
        fwd_case("MaxPool 3x3/2 pad 1 NaN", CG_MAXPOOL, &a, 1, &x, DIMS(1, 1, 2, 2), (const double[]){2, NAN, 3, NAN});
        free_ops(1, &x);
        /* every window all -inf: each one's gradient goes to its first element in scan order, (0, 0) for all four */
        opnd xi = IN(mk(DIMS(1, 1, 2, 2), (const double[]){-INFINITY, -INFINITY, -INFINITY, -INFINITY}));
        a.stride[0] = a.stride[1] = 1;
        int yi;
        cg_graph *gi = op_graph(CG_MAXPOOL, &a, 1, &xi, &yi);
        cattr_tensor *sd = mk(DIMS(1, 1, 2, 2), (const double[]){1, 2, 4, 8}), *gri = NULL;
        cg_rules ri;
        cg_rules_default(&ri);
        cattr_status sti = autodiff_run(gi, yi, &xi.t, sd, &ri, &gri);
        CHECK(sti == CATTR_OK, "MaxPool all -inf backward: %s", cattr_last_error());
        if (gri) expect("MaxPool all -inf backward", gri, DIMS(1, 1, 2, 2), (const double[]){15, 0, 0, 0});
        cattr_tensor_free(gri);
        cattr_tensor_free(sd);
        cg_free(gi);
        free_ops(1, &xi);
    }
}

static void test_unary(void) {
    opnd x = IN(rnd_away(DIMS(2, 3, 4), 0.05));
    double want[24], lo = -0.5, hi = 0.3;
    const cg_op ops[] = {CG_RELU, CG_LEAKYRELU, CG_SIGMOID, CG_TANH, CG_NEG, CG_ABS, CG_CLIP};
    for (size_t k = 0; k < CX_ARRAY_LEN(ops); k++) {
        cg_attrs a = cg_attrs_default();
        if (ops[k] == CG_LEAKYRELU) a.alpha = 0.1;
        if (ops[k] == CG_CLIP) a.alpha = lo, a.beta = hi;
        for (int i = 0; i < 24; i++) {
            double v = D(x.t)[i];
            switch (ops[k]) {
            case CG_RELU: want[i] = v > 0 ? v : 0; break;
            case CG_LEAKYRELU: want[i] = v > 0 ? v : 0.1 * v; break;
            case CG_SIGMOID: want[i] = 1 / (1 + exp(-v)); break;
            case CG_TANH: want[i] = tanh(v); break;
            case CG_NEG: want[i] = -v; break;
            case CG_ABS: want[i] = fabs(v); break;
            default: want[i] = v < lo ? lo : v > hi ? hi : v; break;
            }
        }
        if (ops[k] == CG_CLIP) /* keep the finite-difference points away from the bounds */
            for (int i = 0; i < 24; i++)
                if (fabs(D(x.t)[i] - lo) < 0.01 || fabs(D(x.t)[i] - hi) < 0.01) D(x.t)[i] += 0.02;
        if (ops[k] != CG_CLIP) fwd_case(cg_op_names[ops[k]], ops[k], &a, 1, &x, DIMS(2, 3, 4), want);
        grad_op(cg_op_names[ops[k]], ops[k], &a, 1, &x);
    }
    /* Clip forward on exact values (bounds included) and with one bound absent */
    opnd c = IN(mk(DIMS(5), (const double[]){-1, -0.5, 0, 0.3, 2}));
    cg_attrs a = cg_attrs_default();
    a.alpha = lo, a.beta = hi;
    fwd_case("Clip", CG_CLIP, &a, 1, &c, DIMS(5), (const double[]){-0.5, -0.5, 0, 0.3, 0.3});
    a.beta = INFINITY;
    fwd_case("Clip no max", CG_CLIP, &a, 1, &c, DIMS(5), (const double[]){-0.5, -0.5, 0, 0.3, 2});
    free_ops(1, &c);
    free_ops(1, &x);
}

/* The elementwise functions of exported models: forward against libm formulas written out here, gradient against
 * finite differences (inputs kept away from the kinks; positive where the function needs it). */
static void test_elementwise(void) {
    const cg_op ops[] = {CG_SQRT,     CG_EXP,  CG_LOG, CG_ERF,  CG_RECIPROCAL, CG_HARDSIGMOID, CG_HARDSWISH,
                         CG_SOFTPLUS, CG_ELU,  CG_SELU, CG_GELU, CG_GELU};
    for (size_t k = 0; k < CX_ARRAY_LEN(ops); k++) {
        cg_op op = ops[k];
        bool positive = op == CG_SQRT || op == CG_LOG || op == CG_RECIPROCAL;
        opnd x = IN(rnd_away(DIMS(2, 3, 4), 0.05));
        for (int i = 0; i < 24; i++) {
            double *v = &D(x.t)[i];
            if (positive) *v = fabs(*v) + 0.2;
            if (op == CG_HARDSIGMOID || op == CG_HARDSWISH) *v *= 8; /* both flat sides and the slope */
            if (op == CG_HARDSIGMOID && fabs(fabs(0.2 * *v + 0.5) - 0.5) < 0.02) *v += 0.3;
            if (op == CG_HARDSWISH && fabs(fabs(*v) - 3) < 0.05) *v += 0.2;
        }
        cg_attrs a = cg_attrs_default();
        if (op == CG_HARDSIGMOID) a.alpha = 0.2, a.beta = 0.5;
        if (op == CG_ELU) a.alpha = 0.7;
        if (op == CG_SELU) a.alpha = 1.6732632423543772, a.beta = 1.0507009873554805;
        if (op == CG_GELU && k == CX_ARRAY_LEN(ops) - 1) a.index = 1;
        double want[24];
        for (int i = 0; i < 24; i++) {
            double v = D(x.t)[i], h;
            switch (op) {
            case CG_SQRT: want[i] = sqrt(v); break;
            case CG_EXP: want[i] = exp(v); break;
            case CG_LOG: want[i] = log(v); break;
            case CG_ERF: want[i] = erf(v); break;
            case CG_RECIPROCAL: want[i] = 1 / v; break;
            case CG_HARDSIGMOID: want[i] = fmin(1, fmax(0, 0.2 * v + 0.5)); break;
            case CG_HARDSWISH: want[i] = v * fmin(1, fmax(0, v / 6 + 0.5)); break;
            case CG_SOFTPLUS: want[i] = log(1 + exp(v)); break;
            case CG_ELU: want[i] = v > 0 ? v : 0.7 * (exp(v) - 1); break;
            case CG_SELU: want[i] = 1.0507009873554805 * (v > 0 ? v : 1.6732632423543772 * (exp(v) - 1)); break;
            default:
                h = a.index ? 0.5 * v * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (v + 0.044715 * v * v * v)))
                            : 0.5 * v * (1 + erf(v / sqrt(2)));
                want[i] = h;
                break;
            }
        }
        char what[64];
        snprintf(what, sizeof what, "%s%s", cg_op_names[op], a.index ? " (tanh)" : "");
        fwd_case(what, op, &a, 1, &x, DIMS(2, 3, 4), want);
        grad_op(what, op, &a, 1, &x);
        free_ops(1, &x);
    }
    /* Pow (positive bases; a scalar exponent and a broadcast one), Max, Min (no ties, where the gradient is split) */
    const cg_op bops[] = {CG_POW, CG_POW, CG_MAX, CG_MIN};
    for (size_t k = 0; k < CX_ARRAY_LEN(bops); k++) {
        opnd in[2] = {IN(rnd_away(DIMS(2, 3), 0.05)), IN(k == 0 ? mk(0, NULL, (const double[]){2.5}) : rnd_away(DIMS(3), 0.05))};
        if (bops[k] == CG_POW)
            for (int i = 0; i < 6; i++) D(in[0].t)[i] = fabs(D(in[0].t)[i]) + 0.3;
        double want[6];
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++) {
                double a = D(in[0].t)[i * 3 + j], b = k == 0 ? 2.5 : D(in[1].t)[j];
                want[i * 3 + j] = bops[k] == CG_POW ? pow(a, b) : bops[k] == CG_MAX ? fmax(a, b) : fmin(a, b);
            }
        char what[64];
        snprintf(what, sizeof what, "%s %s", cg_op_names[bops[k]], k == 0 ? "scalar exponent" : "[2,3] . [3]");
        fwd_case(what, bops[k], NULL, 2, in, DIMS(2, 3), want);
        grad_op(what, bops[k], NULL, 2, in);
        free_ops(2, in);
    }
    /* Max's tie: the gradient is split between the operands (torch) */
    {
        opnd in[2] = {IN(mk(DIMS(2), (const double[]){1, 2})), IN(mk(DIMS(2), (const double[]){1, 3}))};
        int y;
        cg_graph *g = op_graph(CG_MAX, NULL, 2, in, &y);
        cattr_tensor *t[2] = {in[0].t, in[1].t}, *seed = mk(DIMS(2), (const double[]){1, 1}), *gr[2] = {0};
        cg_rules rules;
        cg_rules_default(&rules);
        CHECK(autodiff_run(g, y, t, seed, &rules, gr) == CATTR_OK, "Max tie: %s", cattr_last_error());
        if (gr[0] && gr[1]) {
            expect("Max tie dA", gr[0], DIMS(2), (const double[]){0.5, 0});
            expect("Max tie dB", gr[1], DIMS(2), (const double[]){0.5, 1});
        }
        cattr_tensor_free(gr[0]);
        cattr_tensor_free(gr[1]);
        cattr_tensor_free(seed);
        cg_free(g);
        free_ops(2, in);
    }
}

/* Pad in its three modes (and a negative pad that crops): forward against numpy's pad written out, gradient against
 * finite differences. x = [[1, 2, 3], [4, 5, 6]]. */
static void test_pad(void) {
    opnd x = IN(mk(DIMS(2, 3), (const double[]){1, 2, 3, 4, 5, 6}));
    cg_attrs a = cg_attrs_default();
    set_ints(&a, 4, SHAPE(1, 2, 0, 1)); /* rows: 1 before, 0 after; cols: 2 before, 1 after */
    a.alpha = -1;
    fwd_case("Pad constant", CG_PAD, &a, 1, &x, DIMS(3, 6),
             (const double[]){-1, -1, -1, -1, -1, -1, -1, -1, 1, 2, 3, -1, -1, -1, 4, 5, 6, -1});
    grad_op("Pad constant", CG_PAD, &a, 1, &x);
    a.index = 1; /* reflect: np.pad(x, ((1, 0), (2, 1)), 'reflect') */
    fwd_case("Pad reflect", CG_PAD, &a, 1, &x, DIMS(3, 6),
             (const double[]){6, 5, 4, 5, 6, 5, 3, 2, 1, 2, 3, 2, 6, 5, 4, 5, 6, 5});
    grad_op("Pad reflect", CG_PAD, &a, 1, &x);
    a.index = 2; /* edge */
    fwd_case("Pad edge", CG_PAD, &a, 1, &x, DIMS(3, 6),
             (const double[]){1, 1, 1, 2, 3, 3, 1, 1, 1, 2, 3, 3, 4, 4, 4, 5, 6, 6});
    grad_op("Pad edge", CG_PAD, &a, 1, &x);
    a.index = 0;
    set_ints(&a, 4, SHAPE(0, -1, 0, 0)); /* crop the first column */
    fwd_case("Pad crop", CG_PAD, &a, 1, &x, DIMS(2, 2), (const double[]){2, 3, 5, 6});
    grad_op("Pad crop", CG_PAD, &a, 1, &x);
    free_ops(1, &x);
}

/* If: forward and finite differences with a constant condition (either branch), and in a graph whose condition
 * comes from the input's shape (batch 1 or not): only the branch taken is planned, so the other branch may be invalid
 * for the shapes at hand (a Reshape to [2, -1] of 3 values); an input only the other branch reads gets zeros; a
 * condition computed from data is decided when the plan runs. */
static void test_if(void) {
    for (int k = 0; k < 2; k++) {
        opnd w[3] = {CST(idx64(DIMS(1), (const int64_t[]){1 - k})), IN(rnd(DIMS(2, 3))), IN(rnd(DIMS(2, 3)))};
        const char *what = k ? "If else" : "If then";
        fwd_case(what, CG_IF, NULL, 3, w, DIMS(2, 3), D(w[1 + k].t));
        grad_op(what, CG_IF, NULL, 3, w);
        free_ops(3, w);
    }
    cg_graph *g = cg_new();
    int x = cg_add_input(g, "x"), z = cg_add_input(g, "z");
    int sh = cg_add_node(g, CG_SHAPE, "shape", &x, 1, NULL, NULL);
    int64_t zero = 0, one = 1, tgt[2] = {2, -1};
    int c0 = cg_add_const(g, "c0", idx64(0, NULL, &zero), true), c1 = cg_add_const(g, "c1", idx64(0, NULL, &one), true);
    int b = cg_add_node(g, CG_GATHER, "batch", (const int[]){sh, c0}, 2, NULL, NULL);
    int cond = cg_add_node(g, CG_EQUAL, "is_one", (const int[]){b, c1}, 2, NULL, NULL);
    int two = cg_add_const(g, "two", mk(0, NULL, (const double[]){2}), true);
    int th = cg_add_node(g, CG_MUL, "then", (const int[]){x, two}, 2, NULL, NULL);
    int t = cg_add_node(g, CG_TANH, "else_tanh", (const int[]){x}, 1, NULL, NULL);
    int tz = cg_add_node(g, CG_MUL, "else_z", (const int[]){t, z}, 2, NULL, NULL);
    int shp = cg_add_const(g, "to", idx64(DIMS(2), tgt), true);
    int el = cg_add_node(g, CG_RESHAPE, "else", (const int[]){tz, shp}, 2, NULL, NULL);
    int y = cg_add_node(g, CG_IF, "if", (const int[]){cond, th, el}, 3, NULL, NULL);
    cg_add_output(g, y);
    for (int batch = 1; batch <= 2; batch++) {
        cattr_tensor *in[2] = {rnd(DIMS(batch, 3)), rnd(DIMS(batch, 3))};
        char what[64];
        snprintf(what, sizeof what, "If on the batch size, batch %d", batch);
        cattr_tensor *out = run_graph(what, g, y, in, CATTR_FLOAT64, false);
        if (out) {
            double want[6];
            for (int i = 0; i < 3 * batch; i++) want[i] = batch == 1 ? 2 * D(in[0])[i] : tanh(D(in[0])[i]) * D(in[1])[i];
            expect(what, out, 2, (const int64_t[]){batch, 3}, want);
        }
        cattr_tensor_free(out);
        grad_check(what, g, y, in, NULL); /* batch 1: z's gradient is zeros (it only feeds the branch not taken) */
        cattr_tensor_free(in[0]);
        cattr_tensor_free(in[1]);
    }
    /* a condition from data (int(z[0, 0]) != 0): decided when the plan runs, each value taking its branch, the
     * gradient through the branch taken (finite differences: z[0, 0] = 2.5 or 0.5 stays on its side) */
    int d = cg_add_node(g, CG_CAST, "data_cond", (const int[]){z}, 1, &(cg_attrs){.index = 1}, NULL);
    int dg = cg_add_node(g, CG_GATHER, "data_first", (const int[]){d, c0}, 2, NULL, NULL);
    int dg2 = cg_add_node(g, CG_GATHER, "data_first2", (const int[]){dg, c0}, 2, NULL, NULL);
    int neg = cg_add_node(g, CG_MUL, "data_else", (const int[]){t, z}, 2, NULL, NULL);
    int y2 = cg_add_node(g, CG_IF, "if_on_data", (const int[]){dg2, th, neg}, 3, NULL, NULL);
    for (int side = 0; side < 2; side++) {
        cattr_tensor *in[2] = {rnd(DIMS(2, 3)), rnd(DIMS(2, 3))};
        D(in[1])[0] = side ? 2.5 : 0.5;
        const char *what = side ? "If on data, then" : "If on data, else";
        cattr_tensor *out = run_graph(what, g, y2, in, CATTR_FLOAT64, false);
        if (out) {
            double want[6];
            for (int i = 0; i < 6; i++) want[i] = side ? 2 * D(in[0])[i] : tanh(D(in[0])[i]) * D(in[1])[i];
            expect(what, out, 2, (const int64_t[]){2, 3}, want);
        }
        cattr_tensor_free(out);
        grad_check(what, g, y2, in, NULL);
        cattr_tensor_free(in[0]);
        cattr_tensor_free(in[1]);
    }
    cg_free(g);
}

/* Expand (numpy broadcasting with a given shape) and Where (a fixed condition): forward and finite differences. */
static void test_expand_where(void) {
    opnd x = IN(mk(DIMS(3, 1), (const double[]){1, 2, 3}));
    cg_attrs a = cg_attrs_default();
    set_ints(&a, 3, SHAPE(2, 1, 2));
    fwd_case("Expand", CG_EXPAND, &a, 1, &x, DIMS(2, 3, 2), (const double[]){1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3});
    grad_op("Expand", CG_EXPAND, &a, 1, &x);
    free_ops(1, &x);
    opnd w[3] = {CST(idx64(DIMS(2, 1), (const int64_t[]){1, 0})), IN(rnd(DIMS(2, 3))), IN(rnd(DIMS(3)))};
    double want[6];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) want[i * 3 + j] = i == 0 ? D(w[1].t)[i * 3 + j] : D(w[2].t)[j];
    fwd_case("Where", CG_WHERE, NULL, 3, w, DIMS(2, 3), want);
    grad_op("Where", CG_WHERE, NULL, 3, w);
    free_ops(3, w);
}

/* ReduceSum and ReduceMean over chosen axes (negative too, none: all), with and without keepdims: forward against a
 * plain loop, gradient against finite differences. */
static void test_reduce(void) {
    opnd x = IN(rnd(DIMS(2, 3, 4)));
    const struct {
        int n;
        int64_t axes[3];
    } cases[] = {{1, {1}}, {2, {2, 0}}, {1, {-1}}, {0, {0}}, {3, {0, 1, 2}}};
    for (size_t k = 0; k < CX_ARRAY_LEN(cases); k++)
        for (int mean = 0; mean < 2; mean++)
            for (int keep = 0; keep < 2; keep++) {
                cg_attrs a = cg_attrs_default();
                set_ints(&a, cases[k].n, cases[k].axes);
                a.index = keep;
                bool red[3] = {cases[k].n == 0, cases[k].n == 0, cases[k].n == 0};
                for (int q = 0; q < cases[k].n; q++) red[(cases[k].axes[q] + 3) % 3] = true;
                int64_t sh[3], ksh[3], cnt = 1;
                int nd = 0;
                for (int d = 0; d < 3; d++) {
                    int64_t full = d == 0 ? 2 : d == 1 ? 3 : 4;
                    ksh[d] = red[d] ? 1 : full;
                    cnt *= red[d] ? full : 1;
                    if (!red[d] || keep) sh[nd++] = ksh[d];
                }
                double want[24] = {0};
                for (int i = 0; i < 24; i++) {
                    int c0 = i / 12, c1 = i / 4 % 3, c2 = i % 4;
                    int o = ((red[0] ? 0 : c0) * (int)ksh[1] + (red[1] ? 0 : c1)) * (int)ksh[2] + (red[2] ? 0 : c2);
                    want[o] += D(x.t)[i] / (mean ? (double)cnt : 1.0);
                }
                char what[64];
                snprintf(what, sizeof what, "%s case %zu keepdims %d", mean ? "ReduceMean" : "ReduceSum", k, keep);
                cg_op op = mean ? CG_REDUCE_MEAN : CG_REDUCE_SUM;
                fwd_case(what, op, &a, 1, &x, nd, sh, want);
                grad_op(what, op, &a, 1, &x);
            }
    free_ops(1, &x);
}

/* TorchSum (ReduceSum over one axis in torch's CPU order): forward against a plain loop and its gradient against
 * finite differences on [2, 3, 4] for every axis; then, in float32, bit for bit the host's cx_torch_sum of each
 * column, over shapes that take every path of torch's kernel (a contiguous row shorter and longer than the vector
 * width, cascades deeper than one level, columns in groups of 4 and 4 * 8 with leftovers). */
static void test_torch_sum(void) {
    opnd x = IN(rnd(DIMS(2, 3, 4)));
    const int64_t full[3] = {2, 3, 4};
    for (int axis = -1; axis < 3; axis++)
        for (int keep = 0; keep < 2; keep++) {
            int ax = (axis + 3) % 3;
            cg_attrs a = cg_attrs_default();
            set_ints(&a, 1, (const int64_t[]){axis});
            a.index = keep;
            int64_t sh[3], ksh[3];
            int nd = 0;
            for (int d = 0; d < 3; d++) {
                ksh[d] = d == ax ? 1 : full[d];
                if (d != ax || keep) sh[nd++] = ksh[d];
            }
            double want[24] = {0};
            for (int i = 0; i < 24; i++) {
                int c[3] = {i / 12, i / 4 % 3, i % 4};
                c[ax] = 0;
                want[(c[0] * (int)ksh[1] + c[1]) * (int)ksh[2] + c[2]] += D(x.t)[i];
            }
            char what[64];
            snprintf(what, sizeof what, "TorchSum axis %d keepdims %d", axis, keep);
            fwd_case(what, CG_TORCH_SUM, &a, 1, &x, nd, sh, want);
            grad_op(what, CG_TORCH_SUM, &a, 1, &x);
        }
    free_ops(1, &x);
    const int64_t shapes[][3] = {{3, 5, 1}, {2, 700, 1}, {1, 70000, 1}, {2, 9, 37}, {3, 40, 3}, {1, 300, 70}};
    for (size_t k = 0; k < CX_ARRAY_LEN(shapes); k++) {
        cattr_tensor *t = rnd(3, shapes[k]);
        for (int64_t i = 0; i < t->numel; i++) D(t)[i] = (double)(float)(D(t)[i] * 1e3);
        opnd xo = IN(t);
        cg_attrs a = cg_attrs_default();
        set_ints(&a, 1, (const int64_t[]){1});
        int y;
        cg_graph *g = op_graph(CG_TORCH_SUM, &a, 1, &xo, &y);
        char name[96];
        snprintf(name, sizeof name, "TorchSum [%lld, %lld, %lld] in float32 order", (long long)shapes[k][0],
                 (long long)shapes[k][1], (long long)shapes[k][2]);
        cattr_tensor *out = run_graph(name, g, y, &t, CATTR_FLOAT32, false);
        int64_t m = shapes[k][1], per = shapes[k][2], bad = 0;
        double *col = malloc((size_t)m * sizeof *col);
        CHECK(col != NULL, "%s: out of memory", name);
        for (int64_t o = 0; out && col && o < shapes[k][0]; o++)
            for (int64_t c = 0; c < per; c++) {
                for (int64_t i = 0; i < m; i++) col[i] = D(t)[(o * m + i) * per + c];
                float w = (float)cx_torch_sum(CATTR_FLOAT32, col, m, c, per);
                bad += ((const float *)out->data)[o * per + c] != w;
            }
        CHECK(out && bad == 0, "%s: %lld columns differ from cx_torch_sum", name, (long long)bad);
        free(col);
        cattr_tensor_free(out);
        cg_free(g);
        free_ops(1, &xo);
    }
}

/* NormalNoise: every element the host generator's normal at its block (cx_rng_normal_at), scaled in float32; a zero
 * standard deviation gives zeros. */
static void test_normal_noise(void) {
    const int64_t st[3] = {(int64_t)0xDEADBEEFCAFEF00Dull, 11, 3}, first[3] = {0, 40, 7};
    opnd o[2] = {CST(idx64(DIMS(3), st)), CST(idx64(DIMS(3), first))};
    for (int zero = 0; zero < 2; zero++) {
        cg_attrs a = cg_attrs_default();
        set_ints(&a, 2, (const int64_t[]){2, 4});
        a.axis = (int64_t)0x0123456789ABCDEFull;
        a.alpha = zero ? 0.0 : 0.7;
        double want[24];
        for (int r = 0; r < 3; r++)
            for (int k = 0; k < 8; k++) {
                float z = (float)cx_rng_normal_at((uint64_t)a.axis, (uint64_t)st[r], (uint64_t)(first[r] + k));
                want[r * 8 + k] = zero ? 0.0 : (double)(float)((double)(float)a.alpha * (double)z);
            }
        fwd_case(zero ? "NormalNoise, standard deviation 0" : "NormalNoise", CG_NORMAL_NOISE, &a, 2, o, DIMS(3, 2, 4),
                 want);
    }
    free_ops(2, o);
}

/* LimeSimilarity: each row pair's exp(-d^2 / (2 width^2)), d the cosine distance or the euclidean norm of the
 * difference, against the formula in double (the op rounds through float32, as Captum's float32 weights) */
static void test_lime_similarity(void) {
    cattr_tensor *x = rnd(DIMS(3, 5)), *p = alloc_or_die(CATTR_FLOAT64, DIMS(3, 5));
    for (int64_t i = 0; i < 15; i++) D(p)[i] = (i * 7) % 3 ? D(x)[i] : 0.0; /* some elements at the baseline 0 */
    for (int k = 0; k < 5; k++) D(p)[10 + k] = 0.0; /* a row all at the baseline: the cosine's eps */
    opnd o[2] = {IN(x), IN(p)};
    for (int euclid = 0; euclid < 2; euclid++) {
        cg_attrs a = cg_attrs_default();
        a.alpha = 0.75;
        a.index = euclid;
        double want[3];
        for (int r = 0; r < 3; r++) {
            double xx = 0, pp = 0, xp = 0, dd = 0;
            for (int k = 0; k < 5; k++) {
                double u = (float)D(x)[r * 5 + k], v = (float)D(p)[r * 5 + k];
                xx += u * u, pp += v * v, xp += u * v, dd += (u - v) * (u - v);
            }
            double dist = euclid ? sqrt(dd) : 1 - xp / (fmax(sqrt(xx), 1e-8) * fmax(sqrt(pp), 1e-8));
            want[r] = exp(-dist * dist / (2 * 0.75 * 0.75));
        }
        int y;
        cg_graph *g = op_graph(CG_LIME_SIMILARITY, &a, 2, o, &y);
        cattr_tensor *in[2] = {x, p};
        for (int d = 0; d < 2; d++) { /* a float32 weight in either dtype: within float32 rounding of the formula */
            cattr_dtype dt = d ? CATTR_FLOAT64 : CATTR_FLOAT32;
            char name[96];
            snprintf(name, sizeof name, "LimeSimilarity %s [%s]", euclid ? "euclidean" : "cosine", cattr_dtype_name(dt));
            cattr_tensor *out = run_graph(name, g, y, in, dt, false);
            CHECK(out && out->numel == 3 && out->dtype == dt, "%s: output", name);
            for (int r = 0; out && r < 3; r++) {
                double got = cx_tensor_get(out, r);
                CHECK(fabs(got - want[r]) <= 1e-6 * want[r] && got == (double)(float)got, "%s: row %d = %.9g, want %.9g",
                      name, r, got, want[r]);
            }
            cattr_tensor_free(out);
        }
        cg_free(g);
    }
    free_ops(2, o);
}

/* Gradient conventions at kinks (PyTorch's): Relu'(0) = 0, LeakyRelu'(0) = alpha, Clip passes the gradient at
 * both bounds. Seed = 1 everywhere, so the gradient is the derivative. */
static void kink_case(const char *what, cg_op op, const cg_attrs *a, const double *x, const double *want) {
    opnd in = IN(mk(DIMS(5), x));
    cattr_tensor *seed = mk(DIMS(5), (const double[]){1, 1, 1, 1, 1}), *gr = NULL;
    int y;
    cg_graph *g = op_graph(op, a, 1, &in, &y);
    cg_rules rules;
    cg_rules_default(&rules);
    cattr_status st = autodiff_run(g, y, &in.t, seed, &rules, &gr);
    CHECK(st == CATTR_OK, "%s: %s", what, cattr_last_error());
    if (gr) expect(what, gr, DIMS(5), want);
    cattr_tensor_free(gr);
    cattr_tensor_free(seed);
    free_ops(1, &in);
    cg_free(g);
}

static void test_kinks(void) {
    cg_attrs a = cg_attrs_default();
    kink_case("Relu gradient at 0", CG_RELU, &a, (const double[]){-1, -0.0, 0, 1e-300, 2},
              (const double[]){0, 0, 0, 1, 1});
    a.alpha = 0.25;
    kink_case("LeakyRelu gradient at 0", CG_LEAKYRELU, &a, (const double[]){-1, -0.0, 0, 1e-300, 2},
              (const double[]){0.25, 0.25, 0.25, 1, 1});
    a.alpha = -0.5, a.beta = 0.3;
    kink_case("Clip gradient at the bounds", CG_CLIP, &a, (const double[]){-0.6, -0.5, 0, 0.3, 0.4},
              (const double[]){0, 1, 1, 1, 0});
}

static void test_softmax(void) {
    opnd x = IN(rnd(DIMS(2, 3, 4)));
    double want[24];
    struct {
        const char *what;
        int64_t axis, legacy;
        int outer, len, inner;
    } cs[] = {{"Softmax axis 1", 1, 0, 2, 3, 4},
              {"Softmax axis -1", -1, 0, 6, 4, 1},
              {"Softmax axis 2", 2, 0, 6, 4, 1},
              {"Softmax legacy axis 1", 1, 1, 2, 12, 1}};
    for (size_t k = 0; k < CX_ARRAY_LEN(cs); k++) {
        cg_attrs a = cg_attrs_default();
        a.axis = cs[k].axis;
        a.index = cs[k].legacy;
        ref_softmax(D(x.t), cs[k].outer, cs[k].len, cs[k].inner, want);
        fwd_case(cs[k].what, CG_SOFTMAX, &a, 1, &x, DIMS(2, 3, 4), want);
        grad_op(cs[k].what, CG_SOFTMAX, &a, 1, &x);
    }
    free_ops(1, &x);
}

static void test_binary(void) {
    const cg_op ops[] = {CG_ADD, CG_SUB, CG_MUL, CG_DIV};
    const struct {
        const char *what;
        int nda;
        int64_t as[2];
        int ndb;
        int64_t bs[2];
    } cs[] = {{"[2,3] . [3]", 2, {2, 3}, 1, {3}},       {"[2,1] . [1,3]", 2, {2, 1}, 2, {1, 3}},
              {"[2,3] . scalar", 2, {2, 3}, 0, {0}},    {"scalar . [2,3]", 0, {0}, 2, {2, 3}},
              {"[2,3] . [2,3]", 2, {2, 3}, 2, {2, 3}},  {"[3] . [2,1]", 1, {3}, 2, {2, 1}}};
    for (size_t k = 0; k < CX_ARRAY_LEN(ops); k++)
        for (size_t c = 0; c < CX_ARRAY_LEN(cs); c++) {
            opnd in[2] = {IN(rnd(cs[c].nda, cs[c].as)), IN(rnd_away(cs[c].ndb, cs[c].bs, 0.5))};
            double want[6];
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 3; j++) { /* index each operand by its own broadcast strides */
                    const int64_t *s[2] = {cs[c].as, cs[c].bs};
                    int nd[2] = {cs[c].nda, cs[c].ndb};
                    double v[2];
                    for (int o = 0; o < 2; o++) {
                        int64_t rows = nd[o] == 2 ? s[o][0] : 1, cols = nd[o] >= 1 ? s[o][nd[o] - 1] : 1;
                        v[o] = D(in[o].t)[(rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j)];
                    }
                    want[i * 3 + j] = ops[k] == CG_ADD ? v[0] + v[1] : ops[k] == CG_SUB ? v[0] - v[1]
                                    : ops[k] == CG_MUL ? v[0] * v[1] : v[0] / v[1];
                }
            char what[64];
            snprintf(what, sizeof what, "%s %s", cg_op_names[ops[k]], cs[c].what);
            fwd_case(what, ops[k], NULL, 2, in, DIMS(2, 3), want);
            grad_op(what, ops[k], NULL, 2, in);
            free_ops(2, in);
        }
}

static void test_shape_ops(void) {
    opnd x = IN(rnd(DIMS(2, 3, 4)));
    const double *xv = D(x.t);
    cg_attrs a = cg_attrs_default();
    /* Reshape, Flatten, Unsqueeze, Squeeze keep the data and change the shape */
    set_ints(&a, 2, SHAPE(0, -1));
    fwd_case("Reshape [0,-1]", CG_RESHAPE, &a, 1, &x, DIMS(2, 12), xv);
    grad_op("Reshape [0,-1]", CG_RESHAPE, &a, 1, &x);
    set_ints(&a, 3, SHAPE(4, 0, -1));
    fwd_case("Reshape [4,0,-1]", CG_RESHAPE, &a, 1, &x, DIMS(4, 3, 2), xv);
    a = cg_attrs_default();
    a.axis = 2;
    fwd_case("Flatten axis 2", CG_FLATTEN, &a, 1, &x, DIMS(6, 4), xv);
    grad_op("Flatten axis 2", CG_FLATTEN, &a, 1, &x);
    a.axis = 0;
    fwd_case("Flatten axis 0", CG_FLATTEN, &a, 1, &x, DIMS(1, 24), xv);
    a = cg_attrs_default();
    set_ints(&a, 2, SHAPE(0, 4));
    fwd_case("Unsqueeze [0,4]", CG_UNSQUEEZE, &a, 1, &x, DIMS(1, 2, 3, 4, 1), xv);
    grad_op("Unsqueeze [0,4]", CG_UNSQUEEZE, &a, 1, &x);
    set_ints(&a, 1, SHAPE(-1));
    fwd_case("Unsqueeze [-1]", CG_UNSQUEEZE, &a, 1, &x, DIMS(2, 3, 4, 1), xv);
    opnd s = IN(rnd(DIMS(1, 3, 1, 4)));
    set_ints(&a, 1, SHAPE(2));
    fwd_case("Squeeze [2]", CG_SQUEEZE, &a, 1, &s, DIMS(1, 3, 4), D(s.t));
    grad_op("Squeeze [2]", CG_SQUEEZE, &a, 1, &s);
    a.n_ints = 0;
    fwd_case("Squeeze all", CG_SQUEEZE, &a, 1, &s, DIMS(3, 4), D(s.t));
    free_ops(1, &s);

    /* Transpose */
    double want[24];
    set_ints(&a, 3, SHAPE(2, 0, 1));
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++) want[(k * 2 + i) * 3 + j] = xv[(i * 3 + j) * 4 + k];
    fwd_case("Transpose [2,0,1]", CG_TRANSPOSE, &a, 1, &x, DIMS(4, 2, 3), want);
    grad_op("Transpose [2,0,1]", CG_TRANSPOSE, &a, 1, &x);
    a.n_ints = 0;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++) want[(k * 3 + j) * 2 + i] = xv[(i * 3 + j) * 4 + k];
    fwd_case("Transpose reverse", CG_TRANSPOSE, &a, 1, &x, DIMS(4, 3, 2), want);
    grad_op("Transpose reverse", CG_TRANSPOSE, &a, 1, &x);

    /* Concat: axis 0 and 1 (= -1), gradients to all inputs */
    opnd c0[2] = {IN(rnd(DIMS(2, 3))), IN(rnd(DIMS(1, 3)))};
    a = cg_attrs_default();
    memcpy(want, D(c0[0].t), 6 * sizeof(double));
    memcpy(want + 6, D(c0[1].t), 3 * sizeof(double));
    fwd_case("Concat axis 0", CG_CONCAT, &a, 2, c0, DIMS(3, 3), want);
    grad_op("Concat axis 0", CG_CONCAT, &a, 2, c0);
    opnd c1[3] = {IN(rnd(DIMS(2, 3))), IN(rnd(DIMS(2, 1))), IN(rnd(DIMS(2, 2)))};
    for (int i = 0; i < 2; i++) {
        double *w = want + 6 * i;
        memcpy(w, D(c1[0].t) + 3 * i, 3 * sizeof(double));
        w[3] = D(c1[1].t)[i];
        memcpy(w + 4, D(c1[2].t) + 2 * i, 2 * sizeof(double));
    }
    for (int ax = 1; ax >= -1; ax -= 2) {
        a.axis = ax;
        fwd_case(ax == 1 ? "Concat axis 1" : "Concat axis -1", CG_CONCAT, &a, 3, c1, DIMS(2, 6), want);
        grad_op(ax == 1 ? "Concat axis 1" : "Concat axis -1", CG_CONCAT, &a, 3, c1);
    }
    free_ops(2, c0);
    free_ops(3, c1);
    free_ops(1, &x);
}

static void test_gather_slice(void) {
    opnd d = IN(rnd(DIMS(4, 3)));
    const double *dv = D(d.t);
    double want[24];
    cg_attrs a = cg_attrs_default();
    /* axis 0, 2-D indices with a negative and a repeated index */
    opnd g0[2] = {d, CST(idx64(DIMS(2, 2), SHAPE(3, -1, 0, 3)))};
    const int r0[4] = {3, 3, 0, 3};
    for (int i = 0; i < 4; i++) memcpy(want + 3 * i, dv + 3 * r0[i], 3 * sizeof(double));
    fwd_case("Gather axis 0", CG_GATHER, &a, 2, g0, DIMS(2, 2, 3), want);
    grad_op("Gather axis 0 repeated", CG_GATHER, &a, 2, g0);
    /* axis 1 */
    opnd g1[2] = {d, CST(idx64(DIMS(3), SHAPE(-1, 1, 2)))};
    a.axis = 1;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) want[i * 3 + j] = dv[i * 3 + (j == 1 ? 1 : 2)];
    fwd_case("Gather axis 1", CG_GATHER, &a, 2, g1, DIMS(4, 3), want);
    grad_op("Gather axis 1 repeated", CG_GATHER, &a, 2, g1);
    /* scalar index removes the axis */
    opnd g2[2] = {d, CST(idx64(0, NULL, SHAPE(-2)))};
    a.axis = 0;
    fwd_case("Gather scalar index", CG_GATHER, &a, 2, g2, DIMS(3), dv + 6);
    grad_op("Gather scalar index", CG_GATHER, &a, 2, g2);
    cattr_tensor_free(g0[1].t);
    cattr_tensor_free(g1[1].t);
    cattr_tensor_free(g2[1].t);
    /* SeqPick: one position per row [S], and several [S, P] with one picked twice (its gradient adds both) */
    opnd x3 = IN(rnd(DIMS(2, 5, 3)));
    const double *xv = D(x3.t);
    opnd sp1[2] = {x3, CST(idx64(DIMS(2), SHAPE(4, 1)))};
    for (int c = 0; c < 3; c++) {
        want[c] = xv[4 * 3 + c];
        want[3 + c] = xv[(5 + 1) * 3 + c];
    }
    fwd_case("SeqPick [S]", CG_SEQ_PICK, &a, 2, sp1, DIMS(2, 1, 3), want);
    grad_op("SeqPick [S]", CG_SEQ_PICK, &a, 2, sp1);
    const int64_t pp[6] = {0, 3, 3, 2, 4, 1};
    opnd sp2[2] = {x3, CST(idx64(DIMS(2, 3), pp))};
    for (int i = 0; i < 6; i++)
        for (int c = 0; c < 3; c++) want[i * 3 + c] = xv[((i / 3) * 5 + pp[i]) * 3 + c];
    fwd_case("SeqPick [S, P]", CG_SEQ_PICK, &a, 2, sp2, DIMS(2, 3, 3), want);
    grad_op("SeqPick [S, P] repeated", CG_SEQ_PICK, &a, 2, sp2);
    cattr_tensor_free(sp1[1].t);
    cattr_tensor_free(sp2[1].t);
    /* ReduceSumLike (a language model's total log-probability): its gradient broadcasts back */
    opnd rs[2] = {IN(rnd(DIMS(3, 4))), CST(rnd(DIMS(3, 1)))};
    for (int r = 0; r < 3; r++) want[r] = D(rs[0].t)[4 * r] + D(rs[0].t)[4 * r + 1] + D(rs[0].t)[4 * r + 2] + D(rs[0].t)[4 * r + 3];
    fwd_case("ReduceSumLike [3,4] -> [3,1]", CG_REDUCE_SUM_LIKE, &a, 2, rs, DIMS(3, 1), want);
    grad_op("ReduceSumLike [3,4] -> [3,1]", CG_REDUCE_SUM_LIKE, &a, 2, rs);
    free_ops(2, rs);
    free_ops(1, &x3);
    free_ops(1, &d);

    /* WhereId on [3, 4]: A full, B one value per row; ids select some elements of rows 0 and 2, none of row 1 */
    {
        opnd w[4] = {IN(rnd(DIMS(3, 4))), IN(rnd(DIMS(3, 1))), CST(idx64(DIMS(3, 4), SHAPE(1, 2, 1, 0, 5, 5, 5, 5, 0, 0, 9, 0))),
                     CST(idx64(DIMS(3), SHAPE(1, 2, 0)))};
        const double *av = D(w[0].t), *bv = D(w[1].t);
        const int64_t mk_[12] = {1, 2, 1, 0, 5, 5, 5, 5, 0, 0, 9, 0}, id_[3] = {1, 2, 0};
        double wv[12];
        for (int i = 0; i < 12; i++) wv[i] = mk_[i] == id_[i / 4] ? bv[i / 4] : av[i];
        cg_attrs aw = cg_attrs_default();
        fwd_case("WhereId", CG_WHERE_ID, &aw, 4, w, DIMS(3, 4), wv);
        grad_op("WhereId", CG_WHERE_ID, &aw, 4, w);
        aw.index = 1; /* M <= id: the Shapley methods' "added so far" */
        for (int i = 0; i < 12; i++) wv[i] = mk_[i] <= id_[i / 4] ? bv[i / 4] : av[i];
        fwd_case("WhereId at most", CG_WHERE_ID, &aw, 4, w, DIMS(3, 4), wv);
        grad_op("WhereId at most", CG_WHERE_ID, &aw, 4, w);
        cattr_tensor_free(w[2].t);
        cattr_tensor_free(w[3].t);
        free_ops(2, w);
    }
    /* WhereId with row maps: 4 rows read from A [2, 3] (rows 1, 0, 1, 1), B [3, 3] (no map: rows... B has 3 rows, so
     * a map 2, 2, 0, 1), M [1, 3] (row 0 for all) */
    {
        opnd w[7] = {IN(rnd(DIMS(2, 3))), IN(rnd(DIMS(3, 3))), CST(idx64(DIMS(1, 3), SHAPE(4, 5, 4))),
                     CST(idx64(DIMS(4), SHAPE(4, 5, 0, 4))), CST(idx64(DIMS(4), SHAPE(1, 0, 1, 1))),
                     CST(idx64(DIMS(4), SHAPE(2, 2, 0, 1))), CST(idx64(DIMS(4), SHAPE(0, 0, 0, 0)))};
        const double *av = D(w[0].t), *bv = D(w[1].t);
        const int64_t mk_[3] = {4, 5, 4}, id_[4] = {4, 5, 0, 4}, ar_[4] = {1, 0, 1, 1}, br_[4] = {2, 2, 0, 1};
        double wv[12];
        for (int r = 0; r < 4; r++)
            for (int k = 0; k < 3; k++) wv[r * 3 + k] = mk_[k] == id_[r] ? bv[br_[r] * 3 + k] : av[ar_[r] * 3 + k];
        cg_attrs aw = cg_attrs_default();
        fwd_case("WhereId row maps", CG_WHERE_ID, &aw, 7, w, DIMS(4, 3), wv);
        grad_op("WhereId row maps", CG_WHERE_ID, &aw, 7, w);
        for (int k = 2; k < 7; k++) cattr_tensor_free(w[k].t);
        free_ops(2, w);
    }
    /* PlaceRows: acc [2, 3], v [4] (2 states), ordinals per element, q0 = 1: states 1 and 2 are placed */
    {
        opnd w[4] = {IN(rnd(DIMS(2, 3))), IN(rnd(DIMS(4))), CST(idx64(DIMS(1, 3), SHAPE(0, 1, 2))),
                     CST(idx64(DIMS(1), SHAPE(1)))};
        const double *av = D(w[0].t), *vv = D(w[1].t);
        double wv[6];
        for (int b = 0; b < 2; b++)
            for (int k = 0; k < 3; k++) wv[b * 3 + k] = k == 0 ? av[b * 3 + k] : vv[(k - 1) * 2 + b];
        cg_attrs aw = cg_attrs_default();
        fwd_case("PlaceRows", CG_PLACE_ROWS, &aw, 4, w, DIMS(2, 3), wv);
        /* the gradient of acc only (v's is refused): v as a constant */
        opnd wc[4] = {w[0], CST(w[1].t), w[2], w[3]};
        grad_op("PlaceRows", CG_PLACE_ROWS, &aw, 4, wc);
        for (int k = 2; k < 4; k++) cattr_tensor_free(w[k].t);
        free_ops(2, w);
    }

    /* Slice on [4, 5]: steps 2 and -1, negative starts, out-of-range ends */
    opnd s = IN(rnd(DIMS(4, 5)));
    const double *sv = D(s.t);
    a = cg_attrs_default();
    set_ints(&a, 8, SHAPE(0, -3, /* ends */ 100, 4, /* axes */ 1, 0, /* steps */ 2, 1));
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) want[i * 3 + j] = sv[(1 + i) * 5 + 2 * j];
    fwd_case("Slice step 2", CG_SLICE, &a, 1, &s, DIMS(3, 3), want);
    grad_op("Slice step 2", CG_SLICE, &a, 1, &s);
    set_ints(&a, 8, SHAPE(-1, 2, /* ends */ INT64_MIN, 0, /* axes */ -1, 0, /* steps */ -1, -1));
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 5; j++) want[i * 5 + j] = sv[(2 - i) * 5 + (4 - j)];
    fwd_case("Slice step -1", CG_SLICE, &a, 1, &s, DIMS(2, 5), want);
    grad_op("Slice step -1", CG_SLICE, &a, 1, &s);
    set_ints(&a, 4, SHAPE(-2, -5, 1, -2));
    for (int i = 0; i < 4; i++) {
        want[2 * i] = sv[i * 5 + 3];
        want[2 * i + 1] = sv[i * 5 + 1];
    }
    fwd_case("Slice step -2", CG_SLICE, &a, 1, &s, DIMS(4, 2), want);
    grad_op("Slice step -2", CG_SLICE, &a, 1, &s);
    free_ops(1, &s);
}

static void test_batchnorm(void) {
    opnd ops[5] = {IN(rnd(DIMS(2, 3, 2, 2))), CST(rnd(DIMS(3))), CST(rnd(DIMS(3))), CST(rnd(DIMS(3))),
                   CST(mk(DIMS(3), (const double[]){0.5, 1.5, 0.01}))};
    cg_attrs a = cg_attrs_default();
    a.alpha = 1e-3;
    double want[24];
    for (int i = 0; i < 24; i++) {
        int c = (i / 4) % 3;
        want[i] = (D(ops[0].t)[i] - D(ops[3].t)[c]) / sqrt(D(ops[4].t)[c] + 1e-3) * D(ops[1].t)[c] + D(ops[2].t)[c];
    }
    fwd_case("BatchNormalization", CG_BATCHNORM, &a, 5, ops, DIMS(2, 3, 2, 2), want);
    grad_op("BatchNormalization", CG_BATCHNORM, &a, 5, ops);
    free_ops(5, ops);
}

/* y = Concat(Tanh(x)^2 + Sigmoid(x), x, Tanh(x)): x and Tanh(x) feed several consumers (gradient accumulation,
 * including a Mul whose two inputs are the same value). A second input z is unused: its gradient must be zeros. */
static void test_composed(void) {
    cg_graph *g = cg_new();
    int x = cg_add_input(g, "x");
    cg_add_input(g, "z");
    int t = cg_add_node(g, CG_TANH, "tanh", &x, 1, NULL, NULL);
    int sg = cg_add_node(g, CG_SIGMOID, "sigmoid", &x, 1, NULL, NULL);
    int m = cg_add_node(g, CG_MUL, "square", (const int[]){t, t}, 2, NULL, NULL);
    int s = cg_add_node(g, CG_ADD, "add", (const int[]){m, sg}, 2, NULL, NULL);
    cg_attrs a = cg_attrs_default();
    a.axis = 1;
    int y = cg_add_node(g, CG_CONCAT, "concat", (const int[]){s, x, t}, 3, &a, NULL);
    cg_add_output(g, y);
    cattr_tensor *in[2] = {rnd(DIMS(2, 3)), rnd(DIMS(4))};
    double gmax[2] = {-1, -1};
    grad_check("grad composed fan-out", g, y, in, gmax);
    CHECK(gmax[0] > 0, "composed: gradient w.r.t. x is zero");
    CHECK(gmax[1] == 0, "composed: gradient w.r.t. the unused input is not zero (max %g)", gmax[1]);
    cattr_tensor_free(in[0]);
    cattr_tensor_free(in[1]);
    cg_free(g);
}

/* Second order (cattr_explainer_param_hvp's graph): MatMul with transposed operands and the gradient ops' own rules
 * against finite differences, then a network's weight gradient for a seed u differentiated again: the graph's output
 * is s = sum_k <dL/dw_k, v_k> with L = sum(u * y), so that its gradient is the Hessian-vector product for the weights
 * and J v for u, both checked by finite differences of s. */
static void test_second_order(void) {
    static const int tr[3][2] = {{1, 0}, {0, 1}, {1, 1}};
    for (int c = 0; c < 3; c++) {
        cg_attrs a = cg_attrs_default();
        a.trans_a = tr[c][0], a.trans_b = tr[c][1];
        opnd ops[2] = {IN(a.trans_a ? rnd(DIMS(2, 4, 3)) : rnd(DIMS(2, 3, 4))),
                       IN(a.trans_b ? rnd(DIMS(5, 4)) : rnd(DIMS(4, 5)))};
        char what[64];
        snprintf(what, sizeof what, "MatMul trans_a %d trans_b %d", a.trans_a, a.trans_b);
        grad_op(what, CG_MATMUL, &a, 2, ops);
        free_ops(2, ops);
    }
    static const cg_op gops[] = {CG_TANH_GRAD, CG_SIGMOID_GRAD, CG_RELU_GRAD, CG_LEAKYRELU_GRAD};
    for (size_t k = 0; k < sizeof gops / sizeof *gops; k++) {
        cg_attrs a = cg_attrs_default();
        a.alpha = 0.1;
        opnd ops[2] = {IN(rnd_away(DIMS(3, 4), 0.1)), IN(rnd(DIMS(3, 4)))};
        grad_op(cg_op_names[gops[k]], gops[k], &a, 2, ops);
        free_ops(2, ops);
    }
    opnd rl[2] = {IN(rnd(DIMS(2, 6))), CST(rnd(DIMS(3, 4)))};
    grad_op("ReshapeLike", CG_RESHAPE_LIKE, NULL, 2, rl);
    free_ops(2, rl);

    /* y = Sigmoid(MatMul(Tanh(Gemm(x, W1, b1, trans_b)), W2, trans_b)) + Relu(x W3) */
    cg_graph *g = cg_new();
    int x = cg_add_input(g, "x"), w1 = cg_add_input(g, "w1"), b1 = cg_add_input(g, "b1"), w2 = cg_add_input(g, "w2");
    int w3 = cg_add_input(g, "w3"), u = cg_add_input(g, "u");
    int v[4] = {cg_add_input(g, "v1"), cg_add_input(g, "vb"), cg_add_input(g, "v2"), cg_add_input(g, "v3")};
    cg_attrs tb = cg_attrs_default();
    tb.trans_b = 1;
    int h = cg_add_node(g, CG_GEMM, "fc1", (const int[]){x, w1, b1}, 3, &tb, NULL);
    h = cg_add_node(g, CG_TANH, "tanh", &h, 1, NULL, NULL);
    int o = cg_add_node(g, CG_MATMUL, "fc2", (const int[]){h, w2}, 2, &tb, NULL);
    o = cg_add_node(g, CG_SIGMOID, "sigmoid", &o, 1, NULL, NULL);
    int r = cg_add_node(g, CG_MATMUL, "fc3", (const int[]){x, w3}, 2, NULL, NULL);
    r = cg_add_node(g, CG_RELU, "relu", &r, 1, NULL, NULL);
    int y = cg_add_node(g, CG_ADD, "y", (const int[]){o, r}, 2, NULL, NULL);
    cg_rules rules;
    cg_rules_default(&rules);
    int w[4] = {w1, b1, w2, w3}, gw[4];
    cattr_status st = cg_autodiff(g, y, u, w, 4, &rules, gw);
    CHECK(st == CATTR_OK, "second order: first autodiff: %s", cattr_last_error());
    int sum = -1;
    cg_attrs all = cg_attrs_default();
    for (int k = 0; k < 4 && st == CATTR_OK; k++) {
        int m = cg_add_node(g, CG_MUL, "dot", (const int[]){gw[k], v[k]}, 2, NULL, NULL);
        m = cg_add_node(g, CG_REDUCE_SUM, "dot_sum", &m, 1, &all, NULL);
        sum = k ? cg_add_node(g, CG_ADD, "dots", (const int[]){sum, m}, 2, NULL, NULL) : m;
    }
    if (st == CATTR_OK) {
        cattr_tensor *in[10] = {rnd(DIMS(3, 4)), rnd(DIMS(5, 4)), rnd(DIMS(5)), rnd(DIMS(2, 5)), rnd(DIMS(4, 2)),
                                rnd(DIMS(3, 2)), rnd(DIMS(5, 4)), rnd(DIMS(5)), rnd(DIMS(2, 5)), rnd(DIMS(4, 2))};
        double gmax[10] = {0};
        grad_check("second order: a network's Hessian-vector products", g, sum, in, gmax);
        CHECK(gmax[1] > 0 && gmax[3] > 0 && gmax[5] > 0, "second order: a zero Hessian-vector product or J v");
        for (int k = 0; k < 10; k++) cattr_tensor_free(in[k]);
    }
    cg_free(g);
}

/* ---- 3: eager vs planned ------------------------------------------------------------------------------------ */

/* x[2,2,6,6] -> Conv(3x3, pad 1, 3 out) -> Relu -> MaxPool(2x2/2) -> Reshape[0,-1] -> Gemm(trans_b, [4,27]) ->
 * Softmax(axis 1); constants owned by the graph. */
static cg_graph *cnn_graph(int *y) {
    cg_graph *g = cg_new();
    int x = cg_add_input(g, "x");
    int w = cg_add_const(g, "conv.w", rnd(DIMS(3, 2, 3, 3)), true), b = cg_add_const(g, "conv.b", rnd(DIMS(3)), true);
    int fw = cg_add_const(g, "fc.w", rnd(DIMS(4, 27)), true), fb = cg_add_const(g, "fc.b", rnd(DIMS(4)), true);
    cg_attrs a = cg_attrs_default();
    a.nsp = 2;
    for (int i = 0; i < 4; i++) a.pad[i] = 1;
    int c = cg_add_node(g, CG_CONV, "conv", (const int[]){x, w, b}, 3, &a, NULL);
    int r = cg_add_node(g, CG_RELU, "relu", &c, 1, NULL, NULL);
    a = cg_attrs_default();
    a.nsp = 2;
    a.kernel[0] = a.kernel[1] = a.stride[0] = a.stride[1] = 2;
    int p = cg_add_node(g, CG_MAXPOOL, "pool", &r, 1, &a, NULL);
    a = cg_attrs_default();
    set_ints(&a, 2, SHAPE(0, -1));
    int f = cg_add_node(g, CG_RESHAPE, "flatten", &p, 1, &a, NULL);
    a = cg_attrs_default();
    a.trans_b = 1;
    int l = cg_add_node(g, CG_GEMM, "fc", (const int[]){f, fw, fb}, 3, &a, NULL);
    a = cg_attrs_default();
    a.axis = 1;
    *y = cg_add_node(g, CG_SOFTMAX, "softmax", &l, 1, &a, NULL);
    cg_add_output(g, *y);
    return g;
}

static void test_executors(void) {
    int y;
    cg_graph *g = cnn_graph(&y);
    cattr_tensor *x = rnd(DIMS(2, 2, 6, 6)), *seed = rnd(DIMS(2, 4));
    grad_check("grad CNN", g, y, &x, NULL);
    cg_graph *gg = cg_clone(g);
    int s = cg_add_input(gg, "seed"), gx;
    cg_rules rules;
    cg_rules_default(&rules);
    cattr_status st = cg_autodiff(gg, y, s, &gg->inputs[0], 1, &rules, &gx);
    CHECK(st == CATTR_OK, "CNN autodiff: %s", cattr_last_error());
    cattr_tensor *in[2] = {x, seed};
    for (int d = 0; d < 2 && st == CATTR_OK; d++) {
        cattr_dtype dt = d ? CATTR_FLOAT64 : CATTR_FLOAT32;
        const char *dn = cattr_dtype_name(dt);
        runner pl = {0}, eg = {0};
        cattr_tensor *r1[2] = {0}, *r2[2] = {0}, *re[2] = {0};
        st = runner_new(&pl, gg, in, dt, false, (const int[]){y, gx}, 2);
        if (st == CATTR_OK) st = runner_new(&eg, gg, in, dt, true, (const int[]){y, gx}, 2);
        if (st == CATTR_OK) st = runner_run(&pl, in, r1);
        if (st == CATTR_OK) st = runner_run(&eg, in, re);
        if (st == CATTR_OK) st = runner_run(&pl, in, r2);
        CHECK(st == CATTR_OK, "CNN %s: %s", dn, cattr_last_error());
        for (int k = 0; k < 2 && st == CATTR_OK; k++) {
            const char *what = k ? "gradient" : "output";
            size_t bytes = (size_t)r1[k]->numel * cattr_dtype_size(dt);
            CHECK(r1[k]->dtype == dt && r1[k]->numel == (k ? x->numel : 8), "CNN %s %s: dtype/size", dn, what);
            CHECK(cx_shape_eq(r1[k]->ndim, r1[k]->shape, re[k]->ndim, re[k]->shape) &&
                      memcmp(r1[k]->data, re[k]->data, bytes) == 0,
                  "CNN %s %s: eager and planned results differ", dn, what);
            CHECK(memcmp(r1[k]->data, r2[k]->data, bytes) == 0, "CNN %s %s: a second planned run differs", dn, what);
        }
        if (st == CATTR_OK) /* sanity: softmax rows sum to one, gradient not all zero */
            for (int b = 0; b < 2; b++) {
                double sum = 0, gs = 0;
                for (int j = 0; j < 4; j++) sum += cx_tensor_get(r1[0], b * 4 + j);
                for (int64_t j = 0; j < x->numel; j++) gs += fabs(cx_tensor_get(r1[1], j));
                CHECK(fabs(sum - 1) < 1e-5 && gs > 0, "CNN %s: row %d sums to %g, |grad| %g", dn, b, sum, gs);
            }
        for (int k = 0; k < 2; k++) {
            cattr_tensor_free(r1[k]);
            cattr_tensor_free(r2[k]);
            cattr_tensor_free(re[k]);
        }
        runner_free(&pl);
        runner_free(&eg);
    }
    cg_free(gg);
    cg_free(g);
    cattr_tensor_free(x);
    cattr_tensor_free(seed);
}

/* ---- 4: errors ---------------------------------------------------------------------------------------------- */

static void expect_shape_error(const char *what, cg_op op, const cg_attrs *a, int n, const opnd *ops) {
    cg_graph *g = cg_new();
    int ids[CG_MAX_IN];
    for (int i = 0; i < n; i++) ids[i] = ops[i].cnst ? cg_add_const(g, NULL, ops[i].t, false) : cg_add_input(g, NULL);
    int y = cg_add_node(g, op, "bad_node_7", ids, n, a, NULL);
    cattr_tensor *in[MAXIO];
    op_inputs(n, ops, in);
    for (int eager = 0; eager < 2; eager++) {
        runner r;
        cattr_status st = runner_new(&r, g, in, CATTR_FLOAT64, eager, &y, 1);
        CHECK(st == CATTR_ERR_SHAPE, "%s: got %s (%s), want a shape error", what, cattr_status_string(st),
              cattr_last_error());
        CHECK(r.p == NULL, "%s: a plan was returned on error", what);
        CHECK(strstr(cattr_last_error(), "bad_node_7") != NULL, "%s: message '%s' does not name the node", what,
              cattr_last_error());
        runner_free(&r);
    }
    cg_free(g);
}

/* A plan output that is a constant or a graph input is copied out whole. */
static void test_plan_outputs(void) {
    cg_graph *g = cg_new();
    cattr_tensor *c = rnd(DIMS(2, 3)), *x = rnd(DIMS(4));
    int xv = cg_add_input(g, "x"), cv = cg_add_const(g, "c", c, false);
    for (int eager = 0; eager < 2; eager++) {
        cattr_tensor *o1 = run_graph("constant output", g, cv, &x, CATTR_FLOAT64, eager);
        cattr_tensor *o2 = run_graph("input output", g, xv, &x, CATTR_FLOAT64, eager);
        if (o1) expect(eager ? "constant as plan output [eager]" : "constant as plan output [planned]", o1, DIMS(2, 3), D(c));
        if (o2) expect(eager ? "input as plan output [eager]" : "input as plan output [planned]", o2, DIMS(4), D(x));
        cattr_tensor_free(o1);
        cattr_tensor_free(o2);
    }
    cattr_tensor_free(c);
    cattr_tensor_free(x);
    cg_free(g);
}

/* cg_clone of a graph with no inputs and no outputs (under UBSan: no memcpy from a NULL array). */
static void test_clone_empty(void) {
    cg_graph *g = cg_new(), *c = cg_clone(g);
    CHECK(c && c->n_inputs == 0 && c->n_outputs == 0 && c->n_nodes == 0, "cg_clone of an empty graph");
    cg_free(c);
    cg_free(g);
}

static void test_errors(void) {
    opnd gm[2] = {IN(rnd(DIMS(2, 3))), CST(rnd(DIMS(4, 5)))};
    expect_shape_error("Gemm inner-dim mismatch", CG_GEMM, NULL, 2, gm);
    free_ops(2, gm);
    opnd ad[2] = {IN(rnd(DIMS(2, 3))), IN(rnd(DIMS(4)))};
    expect_shape_error("Add not broadcastable", CG_ADD, NULL, 2, ad);
    free_ops(2, ad);
    opnd rs = IN(rnd(DIMS(2, 3)));
    cg_attrs a = cg_attrs_default();
    set_ints(&a, 2, SHAPE(4, 2));
    expect_shape_error("Reshape element count", CG_RESHAPE, &a, 1, &rs);
    set_ints(&a, 2, SHAPE(4, -1));
    expect_shape_error("Reshape -1 not inferable", CG_RESHAPE, &a, 1, &rs);
    /* a crafted target shape whose product overflows an int64 (fuzzing found the signed overflow) */
    set_ints(&a, 3, SHAPE(INT64_C(6875986619556429824), INT64_C(1701080941), 2));
    expect_shape_error("Reshape element count overflows", CG_RESHAPE, &a, 1, &rs);
    set_ints(&a, 9, SHAPE(1, 1, 1, 1, 1, 1, 1, 2, 3)); /* more dims than a shape holds */
    expect_shape_error("Reshape to 9 dims", CG_RESHAPE, &a, 1, &rs);
    set_ints(&a, 2, SHAPE(1, 1)); /* a perm repeating an axis read past the input (fuzzing found it) */
    expect_shape_error("Transpose perm repeats an axis", CG_TRANSPOSE, &a, 1, &rs);

    /* autodiff through an op without a rule */
    cg_graph *g = cg_new();
    int x = cg_add_input(g, "x"), s = cg_add_input(g, "seed"), gx = -1;
    int r = cg_add_node(g, CG_RELU, "the_relu", &x, 1, NULL, NULL);
    int y = cg_add_node(g, CG_TANH, "the_tanh", &r, 1, NULL, NULL);
    cg_rules rules;
    cg_rules_default(&rules);
    rules.by_op[CG_RELU] = NULL;
    cattr_status st = cg_autodiff(g, y, s, &x, 1, &rules, &gx);
    CHECK(st == CATTR_ERR_UNSUPPORTED, "autodiff without a Relu rule: got %s", cattr_status_string(st));
    CHECK(strstr(cattr_last_error(), "the_relu") != NULL, "autodiff error '%s' does not name the node",
          cattr_last_error());
    cg_free(g);
    free_ops(1, &rs);
}

/* Causal grouped-query attention at a head dim of 48 (the kernels' 32-wide vector loop and its remainder) and 7
 * positions (a block of four queries and a short block of three): the forward against a direct float64 reference in
 * both dtypes, the gradient against finite differences (float64) and float32's gradient against float64's. */
static void ref_attention(const double *q, const double *k, const double *v, int S, int T, int nh, int nkv, int d,
                          double *o) {
    int grp = nh / nkv;
    double sc[128];
    for (int s = 0; s < S; s++)
        for (int j = 0; j < nh; j++)
            for (int t = 0; t < T; t++) {
                const double *qt = q + ((int64_t)s * T + t) * nh * d + j * d;
                double mx = -INFINITY, sum = 0;
                for (int u = 0; u <= t; u++) {
                    const double *ku = k + ((int64_t)s * T + u) * nkv * d + (j / grp) * d;
                    double a = 0;
                    for (int i = 0; i < d; i++) a += qt[i] * ku[i];
                    sc[u] = a / sqrt((double)d);
                    mx = fmax(mx, sc[u]);
                }
                for (int u = 0; u <= t; u++) sum += (sc[u] = exp(sc[u] - mx));
                double *ot = o + ((int64_t)s * T + t) * nh * d + j * d;
                for (int i = 0; i < d; i++) {
                    double a = 0;
                    for (int u = 0; u <= t; u++) a += sc[u] / sum * v[((int64_t)s * T + u) * nkv * d + (j / grp) * d + i];
                    ot[i] = a;
                }
            }
}

/* Random Q [S, T, nh hd], K and V [S, T, nkv hd] as operands, and the Attention attributes; qs gets Q's shape. */
static void att_operands(int S, int T, int nh, int nkv, int hd, opnd *ops, cg_attrs *a, int64_t *qs) {
    int64_t ks[3] = {S, T, nkv * hd};
    qs[0] = S, qs[1] = T, qs[2] = nh * hd;
    ops[0] = IN(rnd(3, qs));
    ops[1] = IN(rnd(3, ks));
    ops[2] = IN(rnd(3, ks));
    *a = cg_attrs_default();
    set_ints(a, 3, (int64_t[]){nh, nkv, hd});
}

static void test_attention(void) {
    enum { S = 2, T = 7, NH = 4, NKV = 2, HD = 48 };
    int64_t qs[3];
    opnd ops[3];
    cg_attrs a;
    att_operands(S, T, NH, NKV, HD, ops, &a, qs);
    double *want = malloc(sizeof(double) * S * T * NH * HD);
    if (!want) {
        CHECK(0, "attention: out of memory");
        free_ops(3, ops);
        return;
    }
    ref_attention(D(ops[0].t), D(ops[1].t), D(ops[2].t), S, T, NH, NKV, HD, want);
    fwd_case("attention d=48 T=7", CG_ATTENTION, &a, 3, ops, 3, qs, want);
    free(want);
    grad_op("attention d=48 T=7", CG_ATTENTION, &a, 3, ops);
    /* float32's gradient kernel against float64's */
    int y;
    cg_graph *g = op_graph(CG_ATTENTION, &a, 3, ops, &y);
    cattr_tensor *in[MAXIO];
    op_inputs(3, ops, in);
    cattr_tensor *seed = rnd(3, qs), *g32[MAXIO] = {0}, *g64[MAXIO] = {0};
    cg_rules rules;
    cg_rules_default(&rules);
    cattr_status s32 = autodiff_run_dt(g, y, in, seed, &rules, CATTR_FLOAT32, g32);
    cattr_status s64 = autodiff_run_dt(g, y, in, seed, &rules, CATTR_FLOAT64, g64);
    CHECK(s32 == CATTR_OK && s64 == CATTR_OK, "attention gradients: %s", cattr_last_error());
    for (int k = 0; k < 3 && s32 == CATTR_OK && s64 == CATTR_OK; k++) {
        double worst = 0;
        for (int64_t i = 0; i < g64[k]->numel; i++)
            worst = fmax(worst, fabs(cx_tensor_get(g32[k], i) - D(g64[k])[i]) / (1 + fabs(D(g64[k])[i])));
        CHECK(worst < 1e-5, "attention gradient %d: float32 differs from float64 by %.3g", k, worst);
    }
    /* the kernels' two vector widths (8 and 16 lanes: AVX2 and AVX-512 blocking) give the same bits, forward and
     * gradient, in both dtypes */
    for (int dt = 0; dt < 2 && s32 == CATTR_OK && s64 == CATTR_OK; dt++) {
        cattr_dtype cd = dt ? CATTR_FLOAT64 : CATTR_FLOAT32;
        cattr_tensor *w[2][MAXIO] = {{0}}, *f[2] = {0};
        for (int l = 0; l < 2; l++) {
            cx_cpu_att_lanes_for_tests(l ? 16 : 8);
            cattr_status st = autodiff_run_dt(g, y, in, seed, &rules, cd, w[l]);
            if (st == CATTR_OK && !(f[l] = run_graph("attention lanes", g, y, in, cd, false))) st = CATTR_ERR_INTERNAL;
            CHECK(st == CATTR_OK, "attention at %d lanes: %s", l ? 16 : 8, cattr_last_error());
        }
        cx_cpu_att_lanes_for_tests(0);
        for (int k = 0; k < 3 && w[0][k] && w[1][k]; k++)
            CHECK(!memcmp(w[0][k]->data, w[1][k]->data, (size_t)w[0][k]->numel * cattr_dtype_size(cd)),
                  "attention gradient %d (%s): 8 and 16 lanes differ", k, cattr_dtype_name(cd));
        CHECK(f[0] && f[1] && !memcmp(f[0]->data, f[1]->data, (size_t)f[0]->numel * cattr_dtype_size(cd)),
              "attention forward (%s): 8 and 16 lanes differ", cattr_dtype_name(cd));
        for (int l = 0; l < 2; l++) {
            cattr_tensor_free(f[l]);
            for (int k = 0; k < 3; k++) cattr_tensor_free(w[l][k]);
        }
    }
    for (int k = 0; k < 3; k++) {
        cattr_tensor_free(g32[k]);
        cattr_tensor_free(g64[k]);
    }
    cattr_tensor_free(seed);
    cg_free(g);
    free_ops(3, ops);
}

/* Largest relative difference (to 1 + |b|) between two tensors of one shape; INFINITY when either is missing. */
static double rel_diff(const cattr_tensor *a, const cattr_tensor *b) {
    if (!a || !b || a->numel != b->numel) return INFINITY;
    double worst = 0;
    for (int64_t i = 0; i < a->numel; i++) {
        double x = cx_tensor_get(a, i), y = cx_tensor_get(b, i);
        worst = fmax(worst, isnan(x) || isnan(y) ? INFINITY : fabs(x - y) / (1 + fabs(y)));
    }
    return worst;
}

int64_t cx_backend_cuda_emulated_work(void) __attribute__((weak)); /* in builds with the cuda backend */

/* Attention over several tiles of the block kernels (70 positions: the cuda kernels' tiles of 32, the last partial;
 * grouped heads 4 / 2, head dim 24): the forward against the direct float64 reference in both dtypes; the gradient
 * in both dtypes against the reference backend's (cpu-check); the ragged form (segments continuing prefix keys, rows
 * outside every segment 0) against the reference backend's. On the emulated cuda backend, the work its kernels count
 * grows as T^2 d: x3.5-4.3 for twice the positions (causal tiles: 36 -> 136 tile pairs), x2 for twice the head dim,
 * and at most 2 T^2 d per head forward (the old kernels' recomputed scores were T^2 d^2). */
static double att_work(int T, int hd, bool grad) {
    int64_t qs[3];
    opnd ops[3];
    cg_attrs a;
    att_operands(1, T, 2, 1, hd, ops, &a, qs);
    int y;
    cg_graph *g = op_graph(CG_ATTENTION, &a, 3, ops, &y);
    cattr_tensor *in[MAXIO], *gr[MAXIO] = {0}, *seed = rnd(3, qs), *f = NULL;
    op_inputs(3, ops, in);
    cg_rules rules;
    cg_rules_default(&rules);
    int64_t w0 = cx_backend_cuda_emulated_work();
    cattr_status st = CATTR_OK;
    if (grad) st = autodiff_run_dt(g, y, in, seed, &rules, CATTR_FLOAT64, gr);
    else f = run_graph("attention work", g, y, in, CATTR_FLOAT64, false);
    CHECK(st == CATTR_OK && (grad || f), "attention work T=%d d=%d: %s", T, hd, cattr_last_error());
    /* the gradient's forward also runs the forward op once */
    double w = (double)(cx_backend_cuda_emulated_work() - w0);
    cattr_tensor_free(f);
    for (int k = 0; k < 3; k++) cattr_tensor_free(gr[k]);
    cattr_tensor_free(seed);
    cg_free(g);
    free_ops(3, ops);
    return w;
}

static void test_attention_tiles(void) {
    enum { S = 2, T = 70, NH = 4, NKV = 2, HD = 24 };
    int64_t qs[3];
    opnd ops[3];
    cg_attrs a;
    /* the CPU forward's tile bounds: one query; 65 positions (the last super-block's last key opens a tile of its own,
     * a case the forward once skipped); 128 */
    static const int lens[3] = {1, 65, 128}; /* (ref_attention holds at most 128 scores) */
    for (int li = 0; li < 3; li++) {
        att_operands(1, lens[li], NH, NKV, HD, ops, &a, qs);
        double *w = malloc(sizeof(double) * lens[li] * NH * HD);
        char nm[64];
        snprintf(nm, sizeof nm, "attention d=24 T=%d", lens[li]);
        if (w) {
            ref_attention(D(ops[0].t), D(ops[1].t), D(ops[2].t), 1, lens[li], NH, NKV, HD, w);
            fwd_case(nm, CG_ATTENTION, &a, 3, ops, 3, qs, w);
        }
        CHECK(w, "%s: out of memory", nm);
        free(w);
        free_ops(3, ops);
    }
    att_operands(S, T, NH, NKV, HD, ops, &a, qs);
    double *want = malloc(sizeof(double) * S * T * NH * HD);
    if (want) {
        ref_attention(D(ops[0].t), D(ops[1].t), D(ops[2].t), S, T, NH, NKV, HD, want);
        fwd_case("attention d=24 T=70", CG_ATTENTION, &a, 3, ops, 3, qs, want);
    }
    CHECK(want, "attention T=70: out of memory");
    free(want);
    int y;
    cg_graph *g = op_graph(CG_ATTENTION, &a, 3, ops, &y);
    cattr_tensor *in[MAXIO], *seed = rnd(3, qs);
    op_inputs(3, ops, in);
    cg_rules rules;
    cg_rules_default(&rules);
    for (int dt = 0; dt < 2; dt++) {
        cattr_dtype cd = dt ? CATTR_FLOAT64 : CATTR_FLOAT32;
        cattr_tensor *got[MAXIO] = {0}, *ref[MAXIO] = {0};
        cattr_status s1 = autodiff_run_dt(g, y, in, seed, &rules, cd, got);
        g_device_override = "cpu-check";
        cattr_status s2 = autodiff_run_dt(g, y, in, seed, &rules, CATTR_FLOAT64, ref);
        g_device_override = NULL;
        CHECK(s1 == CATTR_OK && s2 == CATTR_OK, "attention T=70 gradient: %s", cattr_last_error());
        for (int k = 0; k < 3; k++) {
            double e = rel_diff(got[k], ref[k]);
            CHECK(e < (dt ? 1e-12 : 1e-5), "attention T=70 gradient %d (%s) differs from the reference by %.3g", k,
                  cattr_dtype_name(cd), e);
            cattr_tensor_free(got[k]);
            cattr_tensor_free(ref[k]);
        }
    }
    cattr_tensor_free(seed);
    cg_free(g);
    free_ops(3, ops);

    /* ragged: 3 segments of one flattened sequence of 80 rows (rows 75..79 in none) over 40 prefix rows */
    enum { N = 80, LP = 40 };
    int64_t rq[3] = {1, N, NH * HD}, rk[3] = {1, N, NKV * HD}, pk[2] = {LP, NKV * HD};
    opnd r[6] = {IN(rnd(3, rq)), IN(rnd(3, rk)), IN(rnd(3, rk)), IN(rnd(2, pk)), IN(rnd(2, pk)),
                 CST(idx64(DIMS(3, 3), (const int64_t[]){0, 33, 40, 33, 40, 0, 73, 2, 7}))};
    g = op_graph(CG_ATTENTION, &a, 6, r, &y);
    op_inputs(6, r, in);
    for (int dt = 0; dt < 2; dt++) {
        cattr_dtype cd = dt ? CATTR_FLOAT64 : CATTR_FLOAT32;
        cattr_tensor *got = run_graph("ragged attention", g, y, in, cd, false);
        g_device_override = "cpu-check";
        cattr_tensor *ref = run_graph("ragged attention (reference)", g, y, in, CATTR_FLOAT64, false);
        g_device_override = NULL;
        double e = rel_diff(got, ref);
        CHECK(e < (dt ? 1e-12 : 1e-5), "ragged attention (%s) differs from the reference by %.3g",
              cattr_dtype_name(cd), e);
        cattr_tensor_free(got);
        cattr_tensor_free(ref);
    }
    cg_free(g);
    free_ops(6, r);

    const char *dev = getenv("CATTR_TEST_DEVICE");
    if (!dev || strncmp(dev, "cuda", 4) || !cx_backend_cuda_emulated_work || cx_backend_cuda_emulated_work() < 0)
        return;
    for (int grad = 0; grad < 2; grad++) {
        double w1 = att_work(256, 16, grad), w2 = att_work(512, 16, grad), w3 = att_work(256, 32, grad);
        CHECK(w2 / w1 > 3.5 && w2 / w1 < 4.3, "attention%s work x%.2f for twice the positions", grad ? " gradient" : "",
              w2 / w1);
        CHECK(w3 / w1 > 1.9 && w3 / w1 < 2.1, "attention%s work x%.2f for twice the head dim", grad ? " gradient" : "",
              w3 / w1);
        CHECK(w1 <= (grad ? 8.0 : 2.0) * 2 * 256.0 * 256 * 16, "attention%s work %.0f at T=256, d=16, 2 heads",
              grad ? " gradient" : "", w1);
        printf("attention%s work (multiply-adds): T=256 d=16 %.0f, T=512 %.0f, d=32 %.0f\n", grad ? " gradient" : "",
               w1, w2, w3);
    }
}

/* Long rows (the cuda backend's block-per-row kernels: a row spread over 256 threads and 8 warps, with partial
 * warps): Softmax, LogSoftmax, RMSNorm and ReduceSum / ReduceMean of the trailing axis over rows of 1000 and 3001
 * elements, forward and gradient in both dtypes, against the reference backend (cpu-check) in float64. */
static void rows_case(const char *what, cg_op op, const cg_attrs *a, int n, const opnd *ops) {
    int y;
    cg_graph *g = op_graph(op, a, n, ops, &y);
    cattr_tensor *in[MAXIO];
    int k = op_inputs(n, ops, in);
    cg_rules rules;
    cg_rules_default(&rules);
    g_device_override = "cpu-check";
    cattr_tensor *ref = run_graph(what, g, y, in, CATTR_FLOAT64, false);
    g_device_override = NULL;
    cattr_tensor *seed = ref ? alloc_or_die(CATTR_FLOAT64, ref->ndim, ref->shape) : NULL;
    for (int64_t i = 0; seed && i < seed->numel; i++) D(seed)[i] = 2 * urand() - 1;
    cattr_tensor *gref[MAXIO] = {0};
    g_device_override = "cpu-check";
    cattr_status sr = seed ? autodiff_run_dt(g, y, in, seed, &rules, CATTR_FLOAT64, gref) : CATTR_ERR_INTERNAL;
    g_device_override = NULL;
    CHECK(ref && sr == CATTR_OK, "%s (reference): %s", what, cattr_last_error());
    for (int dt = 0; dt < 2 && ref && sr == CATTR_OK; dt++) {
        cattr_dtype cd = dt ? CATTR_FLOAT64 : CATTR_FLOAT32;
        double tol = dt ? 1e-12 : 1e-5;
        cattr_tensor *got = run_graph(what, g, y, in, cd, false), *gg[MAXIO] = {0};
        double e = rel_diff(got, ref);
        CHECK(e < tol, "%s (%s): forward differs from the reference by %.3g", what, cattr_dtype_name(cd), e);
        cattr_status st = autodiff_run_dt(g, y, in, seed, &rules, cd, gg);
        CHECK(st == CATTR_OK, "%s (%s) gradient: %s", what, cattr_dtype_name(cd), cattr_last_error());
        for (int i = 0; i < k; i++) {
            e = rel_diff(gg[i], gref[i]);
            CHECK(e < tol, "%s (%s): gradient %d differs from the reference by %.3g", what, cattr_dtype_name(cd), i, e);
            cattr_tensor_free(gg[i]);
        }
        cattr_tensor_free(got);
    }
    for (int i = 0; i < k; i++) cattr_tensor_free(gref[i]);
    cattr_tensor_free(seed);
    cattr_tensor_free(ref);
    cg_free(g);
}

static void test_long_rows(void) {
    const int64_t lens[2] = {1000, 3001};
    for (int l = 0; l < 2; l++) {
        int64_t L = lens[l], sh[2] = {3, L}, wsh[1] = {L};
        char what[64];
        opnd x = IN(rnd(2, sh));
        for (int64_t i = 0; i < L; i++) D(x.t)[i] *= 20; /* a spread row: the maximum matters */
        cg_attrs a = cg_attrs_default();
        a.axis = -1;
        snprintf(what, sizeof what, "Softmax rows of %lld", (long long)L);
        rows_case(what, CG_SOFTMAX, &a, 1, &x);
        snprintf(what, sizeof what, "LogSoftmax rows of %lld", (long long)L);
        rows_case(what, CG_LOGSOFTMAX, &a, 1, &x);
        a = cg_attrs_default();
        set_ints(&a, 1, (int64_t[]){1});
        snprintf(what, sizeof what, "ReduceSum rows of %lld", (long long)L);
        rows_case(what, CG_REDUCE_SUM, &a, 1, &x);
        snprintf(what, sizeof what, "ReduceMean rows of %lld", (long long)L);
        rows_case(what, CG_REDUCE_MEAN, &a, 1, &x);
        a = cg_attrs_default();
        a.alpha = 1e-6;
        opnd r[2] = {x, CST(rnd(1, wsh))};
        snprintf(what, sizeof what, "RMSNorm rows of %lld", (long long)L);
        rows_case(what, CG_RMSNORM, &a, 2, r);
        free_ops(2, r);
    }
}

/* A checkpoint's 16-bit matrices read as stored (CX_CAP_STORED_WEIGHTS): MatMul's B (both orientations), Gemm's B and
 * Gather's table as bfloat16 and half constants in a float32 call give the bits of the same graph with float32
 * copies of the values (every backend with the capability; cuda's cuBLAS blocks within 1e-6, the largest B widened
 * in two column blocks), and the plan's view of the constant keeps the 16-bit dtype (no float32 copy is made). */
static cattr_tensor *to16(const cattr_tensor *f, cattr_dtype dt) { /* float64 values -> 16-bit storage (bfloat16: their
                                                                    * leading bits; half: random bits of the same sign) */
    cattr_tensor *t = alloc_or_die(dt, f->ndim, f->shape);
    for (int64_t i = 0; i < f->numel; i++) {
        float x = (float)D((cattr_tensor *)f)[i];
        uint32_t u;
        memcpy(&u, &x, 4);
        /* half: a random sign, exponent 5..15 (2^-10 .. 1.999) and mantissa, and a subnormal now and then */
        uint16_t h = (uint16_t)((u >> 31) << 15 | (uint32_t)(i % 13 ? 5 + urand() * 11 : 0) << 10 |
                                (uint32_t)(urand() * 1024));
        ((uint16_t *)t->data)[i] = dt == CX_BFLOAT16 ? (uint16_t)(u >> 16) : h;
    }
    return t;
}
static cattr_tensor *widen16(const cattr_tensor *t) { /* 16-bit storage -> float32 copy */
    cattr_tensor *f = alloc_or_die(CATTR_FLOAT32, t->ndim, t->shape);
    for (int64_t i = 0; i < t->numel; i++) {
        uint16_t h = ((const uint16_t *)t->data)[i];
        ((float *)f->data)[i] = t->dtype == CX_BFLOAT16 ? cx_bf16_to_f32(h) : cx_f16_to_f32(h);
    }
    return f;
}

/* op(X, W[, ...]) with W a constant (its storage dtype or its float32 copy): the output, and W's view dtype. */
static cattr_tensor *stored_run(cg_op op, const cg_attrs *a, cattr_tensor *x, cattr_tensor *w, cattr_tensor *idx,
                                int *wdt) {
    cg_graph *g = cg_new();
    int ids[2], y;
    if (op == CG_GATHER) {
        ids[0] = cg_add_const(g, "w", w, false);
        ids[1] = cg_add_const(g, "idx", idx, false);
    } else {
        ids[0] = cg_add_input(g, "x");
        ids[1] = cg_add_const(g, "w", w, false);
    }
    y = cg_add_node(g, op, "node", ids, 2, a, "y");
    cg_add_output(g, y);
    cattr_tensor *in[1] = {x}, *out = NULL;
    runner r;
    cattr_status st = runner_new(&r, g, in, CATTR_FLOAT32, false, &y, 1);
    if (st == CATTR_OK) st = runner_run(&r, in, &out);
    CHECK(st == CATTR_OK, "stored weights (%s): %s", cg_op_names[op], cattr_last_error());
    *wdt = st == CATTR_OK ? (int)cx_plan_view(r.p, op == CG_GATHER ? ids[0] : ids[1])->dtype : -1;
    runner_free(&r);
    cg_free(g);
    return out;
}

static void test_stored_weights(void) {
    cx_backend *be = cx_test_backend();
    if (!be->has_cap || !be->has_cap(be->ctx, CX_CAP_STORED_WEIGHTS)) {
        printf("stored weights: %s reads float32 copies\n", be->name);
        return;
    }
    bool exact = strncmp(be->name, "cuda", 4) != 0;
    struct {
        const char *what;
        cg_op op;
        int tb;
        int64_t m, k, n; /* X [m, k]; W [k, n] or [n, k] */
    } cs[] = {{"MatMul", CG_MATMUL, 0, 5, 70, 33},       {"MatMul B^T", CG_MATMUL, 1, 5, 70, 33},
              {"Gemm B^T", CG_GEMM, 1, 4, 37, 19},        {"MatMul two blocks", CG_MATMUL, 0, 3, 4096, 4097},
              {"MatMul B^T two blocks", CG_MATMUL, 1, 3, 4096, 4097}, {"Gather", CG_GATHER, 0, 7, 50, 16}};
    for (size_t c = 0; c < CX_ARRAY_LEN(cs); c++)
        for (int d = 0; d < 2; d++) {
            cattr_dtype dt = d ? CX_FLOAT16 : CX_BFLOAT16;
            cg_attrs a = cg_attrs_default();
            a.trans_b = cs[c].tb;
            bool gather = cs[c].op == CG_GATHER;
            int64_t wsh[2] = {cs[c].tb ? cs[c].n : cs[c].k, cs[c].tb ? cs[c].k : cs[c].n}, xsh[2] = {cs[c].m, cs[c].k};
            cattr_tensor *wf = rnd(2, wsh), *w16 = to16(wf, dt), *w32 = widen16(w16), *x = gather ? NULL : rnd(2, xsh);
            int64_t iv[7] = {3, 0, 49, 3, -1, 17, 8}, ish[1] = {7};
            cattr_tensor *idx = gather ? idx64(1, ish, iv) : NULL;
            int dt16 = -1, dt32 = -1;
            cattr_tensor *y16 = stored_run(cs[c].op, &a, x, w16, idx, &dt16), *y32 = stored_run(cs[c].op, &a, x, w32, idx, &dt32);
            char what[96];
            snprintf(what, sizeof what, "%s %s on %s", cs[c].what, d ? "half" : "bfloat16", be->name);
            CHECK(dt16 == (int)dt && dt32 == CATTR_FLOAT32, "%s: the constant's view is dtype %d (want %d)", what, dt16,
                  (int)dt);
            if (y16 && y32) {
                bool same = y16->numel == y32->numel &&
                            !memcmp(y16->data, y32->data, (size_t)y16->numel * cattr_dtype_size(y16->dtype));
                double e = rel_diff(y16, y32);
                CHECK(exact || gather ? same : e < 1e-6, "%s: differs from the float32 copy's result (%.3g)", what, e);
            }
            cattr_tensor_free(y16);
            cattr_tensor_free(y32);
            cattr_tensor_free(wf);
            cattr_tensor_free(w16);
            cattr_tensor_free(w32);
            cattr_tensor_free(x);
            cattr_tensor_free(idx);
        }
}

/* Tile: [[1, 2, 3], [4, 5, 6]] repeated 2 x 2 times and 1 x 3 times, against the definition; its gradient (each
 * element's copies summed) against finite differences. */
static void test_tile(void) {
    opnd x = IN(mk(DIMS(2, 3), (const double[]){1, 2, 3, 4, 5, 6}));
    cg_attrs a = cg_attrs_default();
    set_ints(&a, 2, SHAPE(2, 2));
    fwd_case("Tile 2x2", CG_TILE, &a, 1, &x, DIMS(4, 6),
             (const double[]){1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6, 1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6});
    grad_op("Tile 2x2", CG_TILE, &a, 1, &x);
    set_ints(&a, 2, SHAPE(1, 3));
    fwd_case("Tile 1x3", CG_TILE, &a, 1, &x, DIMS(2, 9),
             (const double[]){1, 2, 3, 1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6, 4, 5, 6});
    grad_op("Tile 1x3", CG_TILE, &a, 1, &x);
    free_ops(1, &x);
}

/* ReduceMax / ReduceMin over dims 1 of [[3, 1, 2], [4, 6, 5]] and over every dim; their gradients against finite
 * differences (distinct values: no ties), and the gradient shared between tied maxima. */
static void test_reduce_ext(void) {
    opnd x = IN(mk(DIMS(2, 3), (const double[]){3, 1, 2, 4, 6, 5}));
    cg_attrs a = cg_attrs_default();
    set_ints(&a, 1, SHAPE(1));
    a.index = 1;
    fwd_case("ReduceMax axis 1", CG_REDUCE_MAX, &a, 1, &x, DIMS(2, 1), (const double[]){3, 6});
    fwd_case("ReduceMin axis 1", CG_REDUCE_MIN, &a, 1, &x, DIMS(2, 1), (const double[]){1, 4});
    cg_attrs all = cg_attrs_default();
    fwd_case("ReduceMax all", CG_REDUCE_MAX, &all, 1, &x, 0, NULL, (const double[]){6});
    opnd r = IN(rnd_distinct(DIMS(3, 4, 2)));
    set_ints(&a, 2, SHAPE(0, 2));
    grad_op("ReduceMax axes 0, 2", CG_REDUCE_MAX, &a, 1, &r);
    grad_op("ReduceMin axes 0, 2", CG_REDUCE_MIN, &a, 1, &r);
    { /* ties: [2, 5, 5] -> the gradient 1 shared as [0, 0.5, 0.5] */
        cattr_tensor *t = mk(DIMS(1, 3), (const double[]){2, 5, 5});
        cg_graph *g = cg_new();
        int in = cg_add_input(g, "x");
        int y = cg_add_node(g, CG_REDUCE_MAX, "max", &in, 1, &all, "y");
        cg_add_output(g, y);
        cattr_tensor *seed = mk(0, NULL, (const double[]){1}), *gr = NULL;
        cg_rules rules;
        cg_rules_default(&rules);
        CHECK(autodiff_run(g, y, &t, seed, &rules, &gr) == CATTR_OK, "ReduceMax ties: %s", cattr_last_error());
        CHECK(gr && D(gr)[0] == 0 && D(gr)[1] == 0.5 && D(gr)[2] == 0.5, "ReduceMax ties: gradient not shared");
        cattr_tensor_free(gr);
        cattr_tensor_free(seed);
        cattr_tensor_free(t);
        cg_free(g);
    }
    free_ops(1, &x);
    free_ops(1, &r);
}

/* Mod with both sign conventions against the definition, its gradient (1 for the dividend) against finite
 * differences; ScatterND of rows and its gradient for the data (zero where overwritten). */
static void test_mod_scatter(void) {
    opnd m[2] = {IN(mk(DIMS(4), (const double[]){5.5, -5.5, 5.5, -5.5})), CST(mk(DIMS(4), (const double[]){2, 2, -2, -2}))};
    cg_attrs a = cg_attrs_default();
    fwd_case("Mod (sign of the divisor)", CG_MOD, &a, 2, m, DIMS(4), (const double[]){1.5, 0.5, -0.5, -1.5});
    grad_op("Mod", CG_MOD, &a, 2, m);
    a.index = 1;
    fwd_case("Mod (fmod)", CG_MOD, &a, 2, m, DIMS(4), (const double[]){1.5, -1.5, 1.5, -1.5});
    cattr_tensor *ix = alloc_or_die(CATTR_INT64, 2, SHAPE(2, 1));
    ((int64_t *)ix->data)[0] = 2;
    ((int64_t *)ix->data)[1] = 0;
    opnd s[3] = {IN(mk(DIMS(3, 2), (const double[]){1, 2, 3, 4, 5, 6})), CST(ix),
                 IN(mk(DIMS(2, 2), (const double[]){-1, -2, -3, -4}))};
    cg_attrs sa = cg_attrs_default();
    fwd_case("ScatterND rows", CG_SCATTER_ND, &sa, 3, s, DIMS(3, 2), (const double[]){-3, -4, 3, 4, -1, -2});
    opnd sd[3] = {s[0], s[1], CST(s[2].t)}; /* the data's gradient (the updates' has no rule) */
    grad_op("ScatterND rows", CG_SCATTER_ND, &sa, 3, sd);
    free_ops(2, m);
    free_ops(3, s);
}

/* Resize: nearest (asymmetric, floor) of [[1, 2], [3, 4]] by 2 against its definition; linear (half-pixel and
 * align_corners, scales and sizes, rank 4 and 3) gradients against finite differences. */
static void test_resize(void) {
    opnd x = IN(mk(DIMS(1, 1, 2, 2), (const double[]){1, 2, 3, 4}));
    cg_attrs a = cg_attrs_default();
    a.axis = 1;    /* asymmetric */
    a.trans_a = 2; /* floor */
    a.alpha = a.beta = 2;
    fwd_case("Resize nearest x2", CG_RESIZE, &a, 1, &x, DIMS(1, 1, 4, 4),
             (const double[]){1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
    a.index = 1; /* linear, half-pixel: row 0 = 1, 1.25, 1.75, 2 */
    a.axis = 0;
    fwd_case("Resize linear x2", CG_RESIZE, &a, 1, &x, DIMS(1, 1, 4, 4),
             (const double[]){1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4});
    opnd r = IN(rnd(DIMS(2, 3, 3, 4)));
    grad_op("Resize linear x2", CG_RESIZE, &a, 1, &r);
    cg_attrs s = a;
    s.axis = 2; /* align_corners to a size */
    set_ints(&s, 4, SHAPE(2, 3, 5, 7));
    grad_op("Resize linear to a size", CG_RESIZE, &s, 1, &r);
    cg_attrs n = cg_attrs_default();
    n.alpha = 1.5;
    opnd r3 = IN(rnd(DIMS(2, 2, 5)));
    grad_op("Resize nearest rank 3", CG_RESIZE, &n, 1, &r3);
    free_ops(1, &x);
    free_ops(1, &r);
    free_ops(1, &r3);
}

/* ConvGradInput as a forward op (ONNX ConvTranspose: stride 2, padding 1, groups 2): its gradient, a Conv of the
 * output's gradient, against finite differences. */
static void test_conv_transpose(void) {
    cg_attrs a = cg_attrs_default();
    a.nsp = 2;
    a.kernel[0] = a.kernel[1] = 3;
    a.stride[0] = a.stride[1] = 2;
    for (int i = 0; i < 4; i++) a.pad[i] = 1;
    a.group = 2;
    opnd ops[3] = {CST(rnd(DIMS(2, 4, 7, 8))), CST(rnd(DIMS(4, 2, 3, 3))), IN(rnd(DIMS(2, 4, 4, 4)))};
    grad_op("ConvTranspose (ConvGradInput)", CG_CONV_GRAD_INPUT, &a, 3, ops);
    free_ops(3, ops);
}

/* Images of over a thousand output positions (one image per product, written in place: the CPU kernels'
 * CONV_DIRECT_OUT), groups 2, stride 2: the forward with a bias and the fused ReLU against the reference, and
 * ConvGradInput against the explicit adjoint sum, dx[ci, iy, ix] = sum of w[co, ci, ky, kx] gy[co, oy, ox]. */
static void test_conv_large_images(void) {
    conv_geo c = {2, 4, 65, 66, 6, 3, 3, 2, {2, 2}, {1, 1}, {1, 1}, 33, 33};
    cg_attrs a = cg_attrs_default();
    a.nsp = 2;
    a.group = c.G;
    a.kernel[0] = c.KH, a.kernel[1] = c.KW;
    for (int i = 0; i < 2; i++) a.stride[i] = c.s[i], a.dilation[i] = c.d[i], a.pad[i] = a.pad[2 + i] = c.p[i];
    a.fuse_relu = 1;
    opnd ops[3] = {IN(rnd(DIMS(c.N, c.C, c.H, c.W))), CST(rnd(DIMS(c.CO, c.C / c.G, c.KH, c.KW))), CST(rnd(DIMS(c.CO)))};
    int64_t ny = (int64_t)c.N * c.CO * c.OH * c.OW, nx = (int64_t)c.N * c.C * c.H * c.W;
    double *want = malloc((size_t)ny * sizeof *want), *dx = calloc((size_t)nx, sizeof *dx);
    CHECK(want && dx, "out of memory");
    if (want && dx) {
        ref_conv(&c, D(ops[0].t), D(ops[1].t), D(ops[2].t), want);
        for (int64_t i = 0; i < ny; i++) want[i] = want[i] > 0 ? want[i] : 0;
        fwd_case("Conv large images, bias + fused ReLU", CG_CONV, &a, 3, ops, DIMS(c.N, c.CO, c.OH, c.OW), want);
        a.fuse_relu = 0;
        opnd gops[3] = {CST(rnd(DIMS(c.N, c.C, c.H, c.W))), CST(rnd(DIMS(c.CO, c.C / c.G, c.KH, c.KW))),
                        IN(rnd(DIMS(c.N, c.CO, c.OH, c.OW)))};
        const double *w = D(gops[1].t), *gy = D(gops[2].t);
        int cig = c.C / c.G, cog = c.CO / c.G;
        for (int n = 0; n < c.N; n++)
            for (int co = 0; co < c.CO; co++)
                for (int oh = 0; oh < c.OH; oh++)
                    for (int ow = 0; ow < c.OW; ow++)
                        for (int ci = 0; ci < cig; ci++)
                            for (int kh = 0; kh < c.KH; kh++)
                                for (int kw = 0; kw < c.KW; kw++) {
                                    int ih = oh * c.s[0] - c.p[0] + kh * c.d[0], iw = ow * c.s[1] - c.p[1] + kw * c.d[1];
                                    if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                                    dx[((n * c.C + co / cog * cig + ci) * c.H + ih) * c.W + iw] +=
                                        w[((co * cig + ci) * c.KH + kh) * c.KW + kw] *
                                        gy[((n * c.CO + co) * c.OH + oh) * c.OW + ow];
                                }
        fwd_case("ConvGradInput large images", CG_CONV_GRAD_INPUT, &a, 3, gops, DIMS(c.N, c.C, c.H, c.W), dx);
        free_ops(3, gops);
    }
    free(want);
    free(dx);
    free_ops(3, ops);
}

/* ---- recurrent layers ------------------------------------------------------------------------------------------- */

static double sigmoid_d(double x) { return 1 / (1 + exp(-x)); }

/* ONNX's LSTM (G = 4, gates i o f c) or GRU (G = 3, gates z r h) written from the operator's definition, one
 * direction, into states [T, D, B, S] at direction slot d. */
static void ref_rnn(bool lstm, bool lbr, bool rev, int d, int D, int T, int B, int I, int H, const double *X,
                    const double *W, const double *R, const double *Bi, const double *h0, const double *c0, double *S) {
    int G = lstm ? 4 : 3, GH = G * H, SW = lstm ? 2 * H : H;
    W += d * GH * I;
    R += d * GH * H;
    if (Bi) Bi += d * 2 * GH;
    for (int b = 0; b < B; b++) {
        double h[64] = {0}, c[64] = {0}, hn[64], a[256], rh[256];
        for (int j = 0; j < H; j++) {
            h[j] = h0 ? h0[(d * B + b) * H + j] : 0;
            c[j] = c0 ? c0[(d * B + b) * H + j] : 0;
        }
        for (int k = 0; k < T; k++) {
            int t = rev ? T - 1 - k : k;
            for (int g = 0; g < GH; g++) {
                double xs = Bi ? Bi[g] : 0, hs = Bi ? Bi[GH + g] : 0;
                for (int i = 0; i < I; i++) xs += W[g * I + i] * X[(t * B + b) * I + i];
                for (int i = 0; i < H; i++) hs += R[g * H + i] * h[i];
                a[g] = xs;
                rh[g] = hs;
            }
            for (int j = 0; j < H; j++) {
                if (lstm) {
                    double ig = sigmoid_d(a[j] + rh[j]), og = sigmoid_d(a[H + j] + rh[H + j]);
                    double fg = sigmoid_d(a[2 * H + j] + rh[2 * H + j]), cg = tanh(a[3 * H + j] + rh[3 * H + j]);
                    c[j] = fg * c[j] + ig * cg;
                    hn[j] = og * tanh(c[j]);
                } else {
                    double z = sigmoid_d(a[j] + rh[j]), r = sigmoid_d(a[H + j] + rh[H + j]), rec = rh[2 * H + j];
                    if (!lbr) { /* (r * h) R_h^T + Rb_h */
                        rec = Bi ? Bi[GH + 2 * H + j] : 0;
                        for (int i = 0; i < H; i++)
                            rec += R[(2 * H + j) * H + i] * sigmoid_d(a[H + i] + rh[H + i]) * h[i];
                    }
                    double ht = tanh(a[2 * H + j] + (lbr ? r * rec : rec));
                    hn[j] = (1 - z) * ht + z * h[j];
                }
            }
            for (int j = 0; j < H; j++) {
                h[j] = hn[j];
                S[((t * D + d) * B + b) * SW + j] = h[j];
                if (lstm) S[((t * D + d) * B + b) * SW + H + j] = c[j];
            }
        }
    }
}

/* RNN: LSTM and GRU (linear_before_reset 0 and 1), forward, reverse and both directions, with and without biases
 * and initial states, against the definition; the gradients of X, h0 and c0 through time against finite
 * differences. */
static void test_rnn(void) {
    const int T = 4, B = 2, I = 3, H = 3;
    for (int kind = 0; kind < 3; kind++)
        for (int dir = 0; dir < 3; dir++)
            for (int full = 0; full < 2; full++) {
                bool lstm = kind == 0, lbr = kind == 2;
                int ND = dir == 2 ? 2 : 1, G = lstm ? 4 : 3, SW = lstm ? 2 * H : H;
                opnd ops[6] = {IN(rnd(DIMS(T, B, I))), CST(rnd(DIMS(ND, G * H, I))), CST(rnd(DIMS(ND, G * H, H))),
                               CST(full ? rnd(DIMS(ND, 2 * G * H)) : NULL), IN(full ? rnd(DIMS(ND, B, H)) : NULL),
                               IN(full && lstm ? rnd(DIMS(ND, B, H)) : NULL)};
                cg_attrs a = cg_attrs_default();
                a.index = lstm ? 0 : 1;
                set_ints(&a, 3, SHAPE(H, dir, lbr));
                double want[4 * 2 * 2 * 6];
                for (int d = 0; d < ND; d++)
                    ref_rnn(lstm, lbr, dir == 1 || d == 1, d, ND, T, B, I, H, D(ops[0].t), D(ops[1].t), D(ops[2].t),
                            ops[3].t ? D(ops[3].t) : NULL, ops[4].t ? D(ops[4].t) : NULL, ops[5].t ? D(ops[5].t) : NULL,
                            want);
                char what[96];
                snprintf(what, sizeof what, "RNN %s dir %d%s", lstm ? "LSTM" : lbr ? "GRU lbr" : "GRU",
                         dir, full ? " bias+states" : "");
                int n = lstm ? 6 : 5;
                fwd_case(what, CG_RNN, &a, n, ops, DIMS(T, ND, B, SW), want);
                grad_op(what, CG_RNN, &a, n, ops);
                free_ops(6, ops);
            }
}

int main(void) {
    test_gemm();
    test_matmul();
    test_conv();
    test_pools();
    test_unary();
    test_reduce();
    test_torch_sum();
    test_normal_noise();
    test_lime_similarity();
    test_elementwise();
    test_pad();
    test_rnn();
    test_tile();
    test_reduce_ext();
    test_mod_scatter();
    test_resize();
    test_conv_transpose();
    test_conv_large_images();
    test_expand_where();
    test_if();
    test_kinks();
    test_softmax();
    test_attention();
    test_attention_tiles();
    test_long_rows();
    test_stored_weights();
    test_binary();
    test_shape_ops();
    test_gather_slice();
    test_batchnorm();
    test_composed();
    test_second_order();
    test_executors();
    test_plan_outputs();
    test_errors();
    test_clone_empty();
    printf("test_ops: %d checks, %d failed\n", g_checks, g_failed);
    return g_failed ? 1 : 0;
}
