/* test_check_kernels.c - the fast CPU kernels against the cpu-check backend's reference kernels, op by op.
 *
 * Every case is one node over small random inputs (broadcasting, odd sizes, groups, strides, padding, dilation,
 * ceil_mode, grouped-query and ragged attention over prefix keys and values, RoPE at given positions, fused ReLU
 * epilogues...). cx_infer gives the output's shape; the CPU backend's run_op and cx_check_run_op then run on the same
 * inputs, in float32 and in float64 (and in int64 for the data-movement ops), into outputs pre-filled with two
 * different byte patterns (an element a kernel forgets to write shows up), and must agree:
 *   float64: |fast - ref| <= 1e-12 (more for long reductions) x (|ref| + max |ref| of the output);
 *   float32: a few ulp x (reduction length + 1) on the same scale;
 *   int64: exactly.
 * A failure names the case, the op, the dtype and the worst element. Neither kernel may write into its inputs. Every
 * op kind of cg_op must have a case (the test fails for one that has none). The error paths are checked too: a
 * Gather index out of range, SeqPick and RoPE positions, attention segments, MatMul's bfloat16 flag, int64 data for
 * an arithmetic op and an unknown op return an error status (never a crash) naming the node.
 * Runs with cwd = repo root. Prints each failed check and exits 1 if any failed, 0 otherwise. */
#include "backend/backend.h"
#include "backend/check/check_kernels.h"
#include "core/core.h"
#include "graph/graph.h"
#include "ops/ops.h"

/* the CPU backend's table: cpu_backend.h (cx_backend_cpu_get) where it exists, else backend.h's cx_backend_cpu */
#if defined(__has_include)
#if __has_include("backend/cpu/cpu_backend.h")
#include "backend/cpu/cpu_backend.h"
#define CPU_BACKEND_TABLE cx_backend_cpu_get
#endif
#endif
#ifndef CPU_BACKEND_TABLE
#define CPU_BACKEND_TABLE cx_backend_cpu
#endif

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define RANK(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define DIMS(...) RANK(__VA_ARGS__), SHAPE(__VA_ARGS__)

static cx_backend *g_cpu;
static bool g_covered[CG_OP_COUNT];

/* ---- random values ---------------------------------------------------------------------------------------------- */

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static double urand(void) { /* xorshift64, [0, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 9007199254740992.0;
}
static double uni(double lo, double hi) { return lo + (hi - lo) * urand(); }

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        printf("out of memory\n");
        exit(2);
    }
    return p;
}

/* ---- cases: one node and its inputs ------------------------------------------------------------------------------ */

typedef enum { IN_FLOAT, IN_INT, IN_ABSENT } in_kind;

typedef struct {
    in_kind kind;
    int ndim;
    int64_t shape[CATTR_MAX_DIMS];
    double *f;  /* IN_FLOAT: values, converted to the run's dtype */
    int64_t *i; /* IN_INT: int64 values (indices, positions, segments) */
} tinput;

typedef struct {
    const char *what;
    cg_node n;
    tinput in[CG_MAX_IN];
    double red;    /* reduction length: scales the float32 tolerance */
    bool ints_too; /* a data-movement op: also run with the float inputs as int64 */
} tcase;

static tcase g_case;

/* A new case for op `op` (default attributes), named `what` (also the node's name). */
static tcase *tc(cg_op op, const char *what) {
    for (int i = 0; i < CG_MAX_IN; i++) {
        free(g_case.in[i].f);
        free(g_case.in[i].i);
    }
    memset(&g_case, 0, sizeof g_case);
    g_case.what = what;
    g_case.n.op = op;
    g_case.n.name = (char *)what;
    g_case.n.a = cg_attrs_default();
    g_case.n.out = -1;
    g_case.red = 1;
    return &g_case;
}

static tinput *add_input(tcase *c, in_kind kind, int nd, const int64_t *sh) {
    int k = c->n.n_in++;
    tinput *t = &c->in[k];
    c->n.in[k] = kind == IN_ABSENT ? -1 : k;
    t->kind = kind;
    t->ndim = nd;
    if (nd) memcpy(t->shape, sh, (size_t)nd * sizeof(int64_t));
    return t;
}

/* A float input, uniform in [lo, hi); returns its values for a case to adjust. */
static double *in_f(tcase *c, int nd, const int64_t *sh, double lo, double hi) {
    tinput *t = add_input(c, IN_FLOAT, nd, sh);
    int64_t n = cx_numel(nd, t->shape);
    t->f = xmalloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) t->f[i] = uni(lo, hi);
    return t->f;
}
static double *in_u(tcase *c, int nd, const int64_t *sh) { return in_f(c, nd, sh, -1, 1); }

/* An int64 input with the given values. */
static void in_i(tcase *c, int nd, const int64_t *sh, const int64_t *v) {
    tinput *t = add_input(c, IN_INT, nd, sh);
    int64_t n = cx_numel(nd, t->shape);
    t->i = xmalloc((size_t)n * sizeof(int64_t));
    memcpy(t->i, v, (size_t)n * sizeof(int64_t));
}

static void in_absent(tcase *c) { add_input(c, IN_ABSENT, 0, NULL); }

static void set_ints(cg_attrs *a, int n, const int64_t *v) {
    a->n_ints = n;
    memcpy(a->ints, v, (size_t)n * sizeof(int64_t));
}
#define INTS(a, ...) set_ints(a, RANK(__VA_ARGS__), SHAPE(__VA_ARGS__))

/* ---- running a case ---------------------------------------------------------------------------------------------- */

static double elem(const cx_view *v, int64_t i) {
    switch (v->dtype) {
    case CATTR_FLOAT32: return ((const float *)v->data)[i];
    case CATTR_FLOAT64: return ((const double *)v->data)[i];
    default: return (double)((const int64_t *)v->data)[i];
    }
}

static size_t view_bytes(const cx_view *v) { return (size_t)cx_view_numel(v) * cattr_dtype_size(v->dtype); }

/* Compares the fast output with the reference; returns true when they agree. */
static bool compare(const tcase *c, cattr_dtype dt, const cx_view *fast, const cx_view *ref) {
    const char *op = cg_op_names[c->n.op], *dn = cattr_dtype_name(dt);
    char sb[96];
    int64_t cnt = cx_view_numel(ref);
    if (dt == CATTR_INT64) {
        const int64_t *a = fast->data, *b = ref->data;
        for (int64_t i = 0; i < cnt; i++)
            if (a[i] != b[i]) {
                CHECK(a[i] == b[i], "case '%s' (op %s, %s, output %s): element %lld: fast %lld, reference %lld", c->what,
                      op, dn, cx_shape_str(ref->ndim, ref->shape, sb, sizeof sb), (long long)i, (long long)a[i],
                      (long long)b[i]);
                return false;
            }
        g_checks++;
        return true;
    }
    double maxabs = 0;
    for (int64_t i = 0; i < cnt; i++) {
        double b = fabs(elem(ref, i));
        if (isfinite(b) && b > maxabs) maxabs = b;
    }
    double eps = dt == CATTR_FLOAT32 ? FLT_EPSILON : DBL_EPSILON;
    double tol = 4 * eps * (c->red + 1);
    if (dt == CATTR_FLOAT64 && tol < 1e-12) tol = 1e-12;
    double worst = 0;
    int64_t wi = -1;
    for (int64_t i = 0; i < cnt; i++) {
        double a = elem(fast, i), b = elem(ref, i), err;
        if ((isnan(a) && isnan(b)) || a == b) continue; /* equal, equal infinities, or NaN in both */
        if (!isfinite(a) || !isfinite(b)) err = INFINITY;
        else err = fabs(a - b) / (fabs(b) + maxabs);
        if (!(err <= worst)) {
            worst = err;
            wi = i;
        }
    }
    bool ok = worst <= tol;
    CHECK(ok, "case '%s' (op %s, %s, output %s): worst element %lld: fast %.17g, reference %.17g, error %.3g > tolerance %.3g",
          c->what, op, dn, cx_shape_str(ref->ndim, ref->shape, sb, sizeof sb), (long long)wi,
          wi >= 0 ? elem(fast, wi) : 0.0, wi >= 0 ? elem(ref, wi) : 0.0, worst, tol);
    return ok;
}

/* Builds the views of the case's inputs in dtype dt (int64 inputs stay int64; float inputs become int64 in an int64
 * run, as v * 1000 rounded). */
static void make_views(const tcase *c, cattr_dtype dt, cx_view *v) {
    for (int k = 0; k < c->n.n_in; k++) {
        const tinput *t = &c->in[k];
        memset(&v[k], 0, sizeof v[k]);
        if (t->kind == IN_ABSENT) {
            v[k].dtype = dt;
            continue;
        }
        v[k].dtype = t->kind == IN_INT ? CATTR_INT64 : dt;
        v[k].ndim = t->ndim;
        memcpy(v[k].shape, t->shape, sizeof v[k].shape);
        int64_t n = cx_numel(t->ndim, t->shape);
        v[k].data = xmalloc(view_bytes(&v[k]));
        for (int64_t i = 0; i < n; i++) {
            if (t->kind == IN_INT) ((int64_t *)v[k].data)[i] = t->i[i];
            else if (dt == CATTR_FLOAT32) ((float *)v[k].data)[i] = (float)t->f[i];
            else if (dt == CATTR_FLOAT64) ((double *)v[k].data)[i] = t->f[i];
            else ((int64_t *)v[k].data)[i] = (int64_t)llround(t->f[i] * 1000);
        }
    }
}

/* Runs the case in one dtype; true when both kernels ran and agree. */
static bool run_dtype(const tcase *c, cattr_dtype dt) {
    cx_view in[CG_MAX_IN], fast, ref;
    void *saved[CG_MAX_IN] = {0};
    make_views(c, dt, in);
    for (int k = 0; k < c->n.n_in; k++)
        if (in[k].data) {
            saved[k] = xmalloc(view_bytes(&in[k]));
            memcpy(saved[k], in[k].data, view_bytes(&in[k]));
        }
    bool ok = false;
    memset(&fast, 0, sizeof fast);
    cattr_status st = cx_infer(&c->n, in, &fast);
    CHECK(st == CATTR_OK, "case '%s' (op %s, %s): shape inference failed: %s", c->what, cg_op_names[c->n.op],
          cattr_dtype_name(dt), cattr_last_error());
    if (st == CATTR_OK) {
        ref = fast;
        size_t bytes = view_bytes(&fast);
        fast.data = xmalloc(bytes);
        ref.data = xmalloc(bytes);
        memset(fast.data, 0x41, bytes); /* two different patterns: an element left unwritten cannot agree */
        memset(ref.data, 0x42, bytes);
        cattr_status sf = g_cpu->run_op(g_cpu->ctx, &c->n, in, &fast);
        CHECK(sf == CATTR_OK, "case '%s' (op %s, %s): the CPU kernel failed: %s", c->what, cg_op_names[c->n.op],
              cattr_dtype_name(dt), cattr_last_error());
        cattr_status sr = cx_check_run_op(&c->n, in, &ref);
        CHECK(sr == CATTR_OK, "case '%s' (op %s, %s): the reference kernel failed: %s", c->what, cg_op_names[c->n.op],
              cattr_dtype_name(dt), cattr_last_error());
        if (sf == CATTR_OK && sr == CATTR_OK) ok = compare(c, dt, &fast, &ref);
        for (int k = 0; k < c->n.n_in; k++)
            if (in[k].data) {
                bool same = memcmp(saved[k], in[k].data, view_bytes(&in[k])) == 0;
                CHECK(same, "case '%s' (op %s, %s): input %d was written", c->what, cg_op_names[c->n.op],
                      cattr_dtype_name(dt), k);
                ok = ok && same;
            }
        free(fast.data);
        free(ref.data);
    }
    for (int k = 0; k < c->n.n_in; k++) {
        free(in[k].data);
        free(saved[k]);
    }
    return ok;
}

/* Runs the case in float32 and float64 (and int64 for data movement); the op counts as covered when all agree. */
static void run(tcase *c) {
    bool ok = run_dtype(c, CATTR_FLOAT32);
    ok = run_dtype(c, CATTR_FLOAT64) && ok;
    if (c->ints_too) ok = run_dtype(c, CATTR_INT64) && ok;
    if (ok) g_covered[c->n.op] = true;
}

/* The output shape of a node over inputs of the given shapes (all float). */
static void infer_shape(cg_op op, const cg_attrs *a, int n_in, const int *nds, const int64_t *const *shapes, int *ond,
                        int64_t *os) {
    cg_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.name = "shape";
    n.a = *a;
    n.n_in = n_in;
    cx_view v[CG_MAX_IN], out;
    memset(v, 0, sizeof v);
    for (int i = 0; i < n_in; i++) {
        n.in[i] = i;
        v[i].dtype = CATTR_FLOAT64;
        v[i].ndim = nds[i];
        memcpy(v[i].shape, shapes[i], (size_t)nds[i] * sizeof(int64_t));
    }
    memset(&out, 0, sizeof out);
    if (cx_infer(&n, v, &out) != CATTR_OK) {
        printf("test setup: %s\n", cattr_last_error());
        exit(2);
    }
    *ond = out.ndim;
    memcpy(os, out.shape, sizeof out.shape);
}

/* ---- data movement ------------------------------------------------------------------------------------------------ */

static void test_data_movement(void) {
    tcase *c;
    c = tc(CG_IDENTITY, "identity");
    in_u(c, DIMS(3, 4, 5));
    c->ints_too = true;
    run(c);
    c = tc(CG_RESHAPE, "reshape");
    in_u(c, DIMS(2, 3, 4));
    INTS(&c->n.a, 4, -1);
    c->ints_too = true;
    run(c);
    c = tc(CG_FLATTEN, "flatten");
    in_u(c, DIMS(2, 3, 4, 5));
    c->n.a.axis = 2;
    c->ints_too = true;
    run(c);
    c = tc(CG_UNSQUEEZE, "unsqueeze");
    in_u(c, DIMS(3, 4));
    INTS(&c->n.a, 0, -1);
    c->ints_too = true;
    run(c);
    c = tc(CG_SQUEEZE, "squeeze all");
    in_u(c, DIMS(3, 1, 4, 1));
    c->ints_too = true;
    run(c);
    c = tc(CG_SQUEEZE, "squeeze axis");
    in_u(c, DIMS(3, 1, 4, 1));
    INTS(&c->n.a, 1);
    run(c);
    c = tc(CG_RESHAPE_LIKE, "reshape like");
    in_u(c, DIMS(6, 4));
    in_u(c, DIMS(2, 3, 4));
    c->ints_too = true;
    run(c);

    c = tc(CG_TRANSPOSE, "transpose perm");
    in_u(c, DIMS(2, 3, 4, 5));
    INTS(&c->n.a, 2, 0, 3, 1);
    c->ints_too = true;
    run(c);
    c = tc(CG_TRANSPOSE, "transpose reverse");
    in_u(c, DIMS(3, 4, 5));
    c->ints_too = true;
    run(c);

    c = tc(CG_CONCAT, "concat axis 1");
    in_u(c, DIMS(2, 3, 4));
    in_u(c, DIMS(2, 1, 4));
    in_u(c, DIMS(2, 5, 4));
    c->n.a.axis = 1;
    c->ints_too = true;
    run(c);
    c = tc(CG_CONCAT, "concat axis -1");
    in_u(c, DIMS(3, 2));
    in_u(c, DIMS(3, 5));
    c->n.a.axis = -1;
    c->ints_too = true;
    run(c);
    for (int idx = 0; idx < 3; idx++) {
        c = tc(CG_CONCAT_GRAD, idx == 0 ? "concat grad 0" : idx == 1 ? "concat grad 1" : "concat grad 2");
        in_u(c, DIMS(2, 9, 4));
        in_u(c, DIMS(2, 3, 4));
        in_u(c, DIMS(2, 1, 4));
        in_u(c, DIMS(2, 5, 4));
        c->n.a.axis = idx == 2 ? -2 : 1;
        c->n.a.index = idx;
        c->ints_too = true;
        run(c);
    }

    c = tc(CG_GATHER, "gather axis 1");
    in_u(c, DIMS(4, 5, 3));
    in_i(c, DIMS(2, 3), SHAPE(0, -1, 2, 2, 4, -5));
    c->n.a.axis = 1;
    c->ints_too = true;
    run(c);
    c = tc(CG_GATHER, "gather scalar index");
    in_u(c, DIMS(4, 5, 3));
    in_i(c, 0, NULL, SHAPE(3));
    c->ints_too = true;
    run(c);
    c = tc(CG_GATHER, "gather axis -1");
    in_u(c, DIMS(2, 3, 7));
    in_i(c, DIMS(4), SHAPE(6, 0, -7, 3));
    c->n.a.axis = -1;
    c->ints_too = true;
    run(c);
    c = tc(CG_GATHER_GRAD, "gather grad axis 1");
    in_u(c, DIMS(4, 2, 3, 3));
    in_i(c, DIMS(2, 3), SHAPE(0, -1, 2, 2, 4, -5));
    in_u(c, DIMS(4, 5, 3));
    c->n.a.axis = 1;
    c->red = 3;
    c->ints_too = true; /* the fast kernel adds int64 elements as int64 (it went through double once) */
    run(c);
    c = tc(CG_GATHER_GRAD, "gather grad axis 0");
    in_u(c, DIMS(5, 6));
    in_i(c, DIMS(5), SHAPE(1, 1, -1, 0, 1));
    in_u(c, DIMS(3, 6));
    c->red = 3;
    run(c);

    struct {
        const char *what;
        int n;
        int64_t ints[16];
    } slices[] = {
        {"slice steps", 3, {1, -1, 0, 4, -100, 7, 0, 2, 1, 2, -2, 3}},
        {"slice last dim rows", 1, {1, -1, -1, 1}},
        {"slice clamped", 2, {-100, 2, 100, 100, 1, 0, 1, 1}},
        {"slice negative step", 2, {100, 5, -100, 0, 0, 2, -1, -3}},
        {"slice empty", 1, {3, 1, 0, 1}},
    };
    for (size_t s = 0; s < sizeof slices / sizeof slices[0]; s++) {
        c = tc(CG_SLICE, slices[s].what);
        in_u(c, DIMS(5, 6, 7));
        set_ints(&c->n.a, 4 * slices[s].n, slices[s].ints);
        c->ints_too = true;
        run(c);
        /* the gradient: its gY has the slice's shape */
        int nd;
        int64_t os[CATTR_MAX_DIMS];
        cg_attrs a = c->n.a;
        infer_shape(CG_SLICE, &a, 1, (const int[]){3}, (const int64_t *const[]){SHAPE(5, 6, 7)}, &nd, os);
        c = tc(CG_SLICE_GRAD, slices[s].what);
        in_u(c, nd, os);
        in_u(c, DIMS(5, 6, 7));
        c->n.a = a;
        c->ints_too = true;
        run(c);
    }

    c = tc(CG_SEQ_PICK, "seq pick");
    in_u(c, DIMS(3, 5, 4));
    in_i(c, DIMS(3), SHAPE(4, 0, 2));
    c->ints_too = true;
    run(c);
    c = tc(CG_SEQ_PICK_GRAD, "seq pick grad");
    in_u(c, DIMS(3, 1, 4));
    in_i(c, DIMS(3), SHAPE(4, 0, 2));
    in_u(c, DIMS(3, 5, 4));
    c->ints_too = true;
    run(c);
    /* several positions per row (a language model scoring every target token), one picked twice */
    c = tc(CG_SEQ_PICK, "seq pick [S, P]");
    in_u(c, DIMS(2, 5, 4));
    in_i(c, DIMS(2, 3), SHAPE(4, 0, 2, 1, 1, 3));
    c->ints_too = true;
    run(c);
    c = tc(CG_SEQ_PICK_GRAD, "seq pick grad [S, P]");
    in_u(c, DIMS(2, 3, 4));
    in_i(c, DIMS(2, 3), SHAPE(4, 0, 2, 1, 1, 3));
    in_u(c, DIMS(2, 5, 4));
    c->ints_too = true;
    run(c);
}

/* ---- elementwise ------------------------------------------------------------------------------------------------ */

static void test_elementwise(void) {
    tcase *c;
    c = tc(CG_RELU, "relu");
    double *x = in_u(c, DIMS(3, 5, 7));
    x[0] = 0;
    x[1] = -0.0;
    run(c);
    c = tc(CG_LEAKYRELU, "leaky relu");
    in_u(c, DIMS(4, 9));
    c->n.a.alpha = 0.1;
    run(c);
    c = tc(CG_SIGMOID, "sigmoid");
    in_f(c, DIMS(5, 11), -8, 8);
    c->red = 4;
    run(c);
    c = tc(CG_TANH, "tanh");
    in_f(c, DIMS(5, 11), -4, 4);
    c->red = 4;
    run(c);
    c = tc(CG_CLIP, "clip");
    x = in_u(c, DIMS(6, 7));
    x[0] = -0.5;
    x[1] = 0.3;
    c->n.a.alpha = -0.5;
    c->n.a.beta = 0.3;
    run(c);
    c = tc(CG_CLIP, "clip unbounded above");
    in_u(c, DIMS(6, 7));
    c->n.a.alpha = -0.25;
    c->n.a.beta = INFINITY;
    run(c);
    c = tc(CG_NEG, "neg");
    in_u(c, DIMS(13));
    run(c);
    c = tc(CG_ABS, "abs, with zeros");
    x = in_u(c, DIMS(13));
    x[0] = 0;
    x[1] = -0.0;
    run(c);
    c = tc(CG_ZEROS_LIKE, "zeros like");
    in_u(c, DIMS(3, 4));
    run(c);
    { /* the elementwise functions of exported models, each value and its gradient (UnaryGrad) */
        static const cg_op fns[] = {CG_SQRT, CG_EXP, CG_LOG, CG_ERF, CG_RECIPROCAL, CG_HARDSIGMOID, CG_HARDSWISH,
                                    CG_SOFTPLUS, CG_ELU, CG_SELU, CG_GELU};
        for (size_t k = 0; k < CX_ARRAY_LEN(fns); k++)
            for (int grad = 0; grad < 2; grad++) {
                bool pos = fns[k] == CG_SQRT || fns[k] == CG_LOG || fns[k] == CG_RECIPROCAL;
                c = tc(grad ? CG_UNARY_GRAD : fns[k], grad ? "unary grad" : cg_op_names[fns[k]]);
                in_f(c, DIMS(5, 7), pos ? 0.1 : -4, 4);
                if (grad) in_u(c, DIMS(5, 7));
                c->n.a.alpha = fns[k] == CG_HARDSIGMOID ? 0.2 : fns[k] == CG_SELU ? 1.6732632423543772 : 0.8;
                c->n.a.beta = fns[k] == CG_HARDSIGMOID ? 0.5 : 1.0507009873554805;
                if (grad) c->n.a.index = fns[k];
                if (fns[k] == CG_GELU) *(grad ? &c->n.a.axis : &c->n.a.index) = 1; /* the tanh form */
                run(c);
            }
        for (int mode = 0; mode < 3; mode++)
            for (int grad = 0; grad < 2; grad++) { /* Pad on an image's spatial dims, and its gradient */
                c = tc(grad ? CG_PAD_GRAD : CG_PAD, mode == 0 ? "pad constant" : mode == 1 ? "pad reflect" : "pad edge");
                if (grad) in_u(c, DIMS(2, 3, 7, 8));
                in_u(c, DIMS(2, 3, 5, 5));
                set_ints(&c->n.a, 8, SHAPE(0, 0, 1, 2, 0, 0, 1, 1));
                c->n.a.index = mode;
                c->n.a.alpha = 0.5;
                c->red = 4;
                run(c);
            }
        for (int kind = 0; kind < 3; kind++) /* LSTM, GRU, GRU with linear_before_reset; both directions */
            for (int which = -1; which < (kind == 0 ? 3 : 2); which++) {
                static const char *const names[3] = {"lstm", "gru", "gru linear before reset"};
                const int64_t T = 5, B = 3, I = 4, H = 3, G = kind == 0 ? 4 : 3, SW = kind == 0 ? 2 * H : H;
                c = tc(which < 0 ? CG_RNN : CG_RNN_GRAD, names[kind]);
                if (which >= 0) {
                    in_u(c, DIMS(T, 2, B, SW));
                    in_u(c, DIMS(T, 2, B, SW));
                }
                in_u(c, DIMS(T, B, I));
                in_u(c, DIMS(2, G * H, I));
                in_u(c, DIMS(2, G * H, H));
                in_u(c, DIMS(2, 2 * G * H));
                in_u(c, DIMS(2, B, H));
                if (kind == 0) in_u(c, DIMS(2, B, H));
                c->n.a.index = kind == 0 ? 0 : 1;
                set_ints(&c->n.a, 4, SHAPE(H, 2, kind == 2, which < 0 ? 0 : which));
                c->red = 4 * (double)(T * (I + H));
                run(c);
            }
        for (int k = 0; k < 3; k++) { /* ReduceMax, ReduceMin over dims 0 and 2 (with ties), and their gradient */
            c = tc(k == 0 ? CG_REDUCE_MAX : k == 1 ? CG_REDUCE_MIN : CG_REDUCE_EXT_GRAD,
                   k == 0 ? "reduce max" : k == 1 ? "reduce min" : "reduce extremum grad");
            if (k == 2) in_u(c, DIMS(1, 4, 1));
            x = in_f(c, DIMS(3, 4, 5), -2, 2);
            for (int i = 0; i < 60; i++) x[i] = round(4 * x[i]) / 4; /* ties */
            if (k == 2) {
                double *y = in_f(c, DIMS(1, 4, 1), 0, 0);
                for (int j = 0; j < 4; j++) { /* the maxima of x over dims 0 and 2 */
                    y[j] = -INFINITY;
                    for (int a0 = 0; a0 < 3; a0++)
                        for (int a2 = 0; a2 < 5; a2++) y[j] = fmax(y[j], x[(a0 * 4 + j) * 5 + a2]);
                }
            }
            set_ints(&c->n.a, 2, SHAPE(0, 2));
            c->n.a.index = 1;
            c->red = 15;
            run(c);
        }
        for (int fm = 0; fm < 2; fm++) { /* Mod, both sign conventions, floats and integers (v * 1000) */
            c = tc(CG_MOD, fm ? "mod, fmod" : "mod, sign of the divisor");
            in_f(c, DIMS(4, 5), -3, 3);
            x = in_f(c, DIMS(5), 0.5, 2);
            x[1] = -x[1];
            x[3] = -x[3];
            c->n.a.index = fm;
            c->ints_too = true;
            run(c);
        }
        c = tc(CG_ADD, "add, int64 shape arithmetic");
        in_i(c, DIMS(3), SHAPE(4, -2, 7));
        in_i(c, 0, NULL, SHAPE(5));
        run(c);
        c = tc(CG_RANGE, "range 3..17 step 4");
        set_ints(&c->n.a, 3, SHAPE(3, 17, 4));
        run(c);
        c = tc(CG_SCATTER_ND, "scatter nd, rows of a [4, 3, 2]");
        in_u(c, DIMS(4, 3, 2));
        in_i(c, DIMS(2, 1), SHAPE(2, -4));
        in_u(c, DIMS(2, 3, 2));
        c->ints_too = true;
        run(c);
        c = tc(CG_SCATTER_ND, "scatter nd, elements");
        in_u(c, DIMS(3, 4));
        in_i(c, DIMS(3, 2), SHAPE(0, 0, 2, 3, 1, -1));
        in_u(c, DIMS(3));
        run(c);
        for (int k = 0; k < 6; k++) { /* Resize nearest / linear, scales / sizes, and the gradients */
            bool grad = k >= 3;
            c = tc(grad ? CG_RESIZE_GRAD : CG_RESIZE, k % 3 == 0 ? "resize nearest" : k % 3 == 1 ? "resize linear" : "resize to a size");
            if (grad && k % 3 == 2) in_u(c, DIMS(2, 3, 7, 5));
            else if (grad) in_u(c, DIMS(2, 3, 8, 10));
            in_u(c, DIMS(2, 3, 4, 5));
            c->n.a.index = k % 3 != 0;
            c->n.a.axis = k % 3 == 2 ? 2 : 0;
            c->n.a.alpha = c->n.a.beta = 2;
            if (k % 3 == 2) set_ints(&c->n.a, 4, SHAPE(2, 3, 7, 5));
            c->red = 4;
            run(c);
        }
        for (int grad = 0; grad < 2; grad++) {
            c = tc(grad ? CG_TILE_GRAD : CG_TILE, grad ? "tile grad" : "tile");
            if (grad) in_u(c, DIMS(2, 6, 4));
            in_u(c, DIMS(2, 3, 1));
            set_ints(&c->n.a, 3, SHAPE(1, 2, 4));
            c->red = 8;
            c->ints_too = !grad;
            run(c);
        }
        c = tc(CG_SHAPE, "shape, dims 1..3");
        in_u(c, DIMS(2, 3, 4, 5));
        set_ints(&c->n.a, 2, SHAPE(1, -1));
        run(c);
        c = tc(CG_CONSTANT_OF_SHAPE, "constant of shape [3, 4]");
        set_ints(&c->n.a, 2, SHAPE(3, 4));
        c->n.a.alpha = 1.5;
        run(c);
        c = tc(CG_EQUAL, "equal, broadcast, with ties");
        x = in_f(c, DIMS(4, 5), -2, 2);
        for (int i = 0; i < 20; i++) x[i] = round(x[i]);
        x = in_f(c, DIMS(5), -2, 2);
        for (int i = 0; i < 5; i++) x[i] = round(x[i]);
        run(c);
        c = tc(CG_WHERE, "where, broadcast");
        in_i(c, DIMS(4, 1), (const int64_t[]){1, 0, 0, 1});
        in_u(c, DIMS(4, 5));
        in_u(c, DIMS(5));
        run(c);
        for (int k = 0; k < 4; k++) { /* If: then / else taken, and an absent branch taken (zeros) or not */
            static const char *what[4] = {"if, then taken", "if, else taken", "if, absent then taken",
                                          "if, absent else not taken"};
            c = tc(CG_IF, what[k]);
            in_i(c, DIMS(1), (const int64_t[]){k != 1});
            if (k == 2) in_absent(c);
            else in_u(c, DIMS(3, 4));
            if (k == 3) in_absent(c);
            else in_u(c, DIMS(3, 4));
            run(c);
        }
        c = tc(CG_EXPAND, "expand [3, 1] to [2, 3, 4]");
        in_u(c, DIMS(3, 1));
        set_ints(&c->n.a, 3, SHAPE(2, 1, 4));
        run(c);
        for (int to = 0; to < 2; to++) { /* to the float dtype, and to int64 (truncating) */
            c = tc(CG_CAST, to ? "cast to int64" : "cast to float");
            in_f(c, DIMS(4, 6), -40, 40);
            c->n.a.index = to;
            run(c);
        }
        static const cg_op bins[] = {CG_POW, CG_MAX, CG_MIN};
        for (size_t k = 0; k < CX_ARRAY_LEN(bins); k++)
            for (int grad = 0; grad < 3; grad++) { /* the op, then its gradient w.r.t. each operand */
                c = tc(grad ? CG_BINARY_GRAD : bins[k], grad ? "binary grad" : cg_op_names[bins[k]]);
                in_f(c, DIMS(4, 5), bins[k] == CG_POW ? 0.2 : -1, 2);
                in_f(c, DIMS(5), -1.5, 1.5);
                if (grad) in_u(c, DIMS(4, 5));
                c->n.a.axis = bins[k];
                c->n.a.index = grad - 1;
                run(c);
            }
    }

    c = tc(CG_RELU_GRAD, "relu grad");
    x = in_u(c, DIMS(4, 6));
    x[0] = 0;
    in_u(c, DIMS(4, 6));
    run(c);
    c = tc(CG_LEAKYRELU_GRAD, "leaky relu grad");
    x = in_u(c, DIMS(4, 6));
    x[0] = 0;
    in_u(c, DIMS(4, 6));
    c->n.a.alpha = 0.2;
    run(c);
    c = tc(CG_SIGMOID_GRAD, "sigmoid grad");
    in_f(c, DIMS(4, 6), 0, 1);
    in_u(c, DIMS(4, 6));
    c->red = 2;
    run(c);
    c = tc(CG_TANH_GRAD, "tanh grad");
    in_u(c, DIMS(4, 6));
    in_u(c, DIMS(4, 6));
    c->red = 2;
    run(c);
    c = tc(CG_ABS_GRAD, "abs grad, sign(0) = 0");
    x = in_u(c, DIMS(4, 6));
    x[0] = 0;
    in_u(c, DIMS(4, 6));
    run(c);
    for (int op = 0; op < 3; op++) { /* spatial means (Grad-CAM's weights), sums over every axis, their gradient */
        static const cg_op ops[3] = {CG_REDUCE_MEAN, CG_REDUCE_SUM, CG_REDUCE_GRAD};
        c = tc(ops[op], op == 0 ? "mean over dims 2, 3, keepdims" : op == 1 ? "sum over every axis" : "mean's gradient");
        if (op == 2) in_u(c, DIMS(3, 5, 1, 1));
        in_u(c, DIMS(3, 5, 6, 7));
        c->n.a.n_ints = op == 1 ? 0 : 2;
        c->n.a.ints[0] = 2;
        c->n.a.ints[1] = -1;
        c->n.a.index = op != 1;
        c->n.a.axis = op == 2;
        c->red = op == 1 ? 630 : 42;
        run(c);
    }
    for (int v = 0; v < 3; v++) { /* TorchSum: a contiguous row, columns in groups with leftovers, the last axis */
        c = tc(CG_TORCH_SUM, v == 0 ? "torch sum of rows" : v == 1 ? "torch sum of columns" : "torch sum, last axis");
        if (v == 0) in_u(c, DIMS(3, 1000));
        else if (v == 1) in_u(c, DIMS(2, 9, 37));
        else in_u(c, DIMS(4, 5, 6));
        c->n.a.n_ints = 1;
        c->n.a.ints[0] = v == 2 ? -1 : 1;
        c->red = v == 0 ? 1000 : v == 1 ? 9 : 6;
        run(c);
    }
    c = tc(CG_CLIP_GRAD, "clip grad at the bounds");
    x = in_u(c, DIMS(5, 5));
    x[0] = -0.5;
    x[1] = 0.3;
    x[2] = 0.30000001;
    in_u(c, DIMS(5, 5));
    c->n.a.alpha = -0.5;
    c->n.a.beta = 0.3;
    run(c);

    /* binary ops: equal shapes, scalar (rank 0 and [1]) operands, general broadcasting, the fused ReLU */
    const cg_op bin[4] = {CG_ADD, CG_SUB, CG_MUL, CG_DIV};
    const char *names[4][5] = {
        {"add equal", "add scalar", "add [1] left", "add broadcast", "add broadcast relu"},
        {"sub equal", "sub scalar", "sub [1] left", "sub broadcast", "sub broadcast relu"},
        {"mul equal", "mul scalar", "mul [1] left", "mul broadcast", "mul broadcast relu"},
        {"div equal", "div scalar", "div [1] left", "div broadcast", "div broadcast relu"},
    };
    for (int o = 0; o < 4; o++) {
        double lo = bin[o] == CG_DIV ? 0.5 : -1; /* divisors away from zero */
        c = tc(bin[o], names[o][0]);
        in_u(c, DIMS(3, 4, 5));
        in_f(c, DIMS(3, 4, 5), lo, 1);
        run(c);
        c = tc(bin[o], names[o][1]);
        in_u(c, DIMS(4, 5));
        in_f(c, 0, NULL, lo, 1);
        run(c);
        c = tc(bin[o], names[o][2]);
        in_u(c, DIMS(1));
        in_f(c, DIMS(7, 3), lo, 1);
        run(c);
        c = tc(bin[o], names[o][3]);
        in_u(c, DIMS(2, 1, 4));
        in_f(c, DIMS(3, 1), lo, 1);
        run(c);
        c = tc(bin[o], names[o][4]);
        in_u(c, DIMS(2, 3, 5));
        in_f(c, DIMS(3, 1), lo, 1);
        c->n.a.fuse_relu = 1;
        run(c);
    }
    c = tc(CG_ADD, "add large relu"); /* above the kernels' OpenMP threshold */
    in_u(c, DIMS(600, 500));
    in_u(c, DIMS(600, 500));
    c->n.a.fuse_relu = 1;
    run(c);
    c = tc(CG_MUL, "mul large broadcast");
    in_u(c, DIMS(300, 1, 1000));
    in_u(c, DIMS(1, 1000));
    run(c);

    c = tc(CG_REDUCE_SUM_LIKE, "reduce sum like broadcast");
    in_u(c, DIMS(2, 3, 4, 5));
    in_u(c, DIMS(3, 1, 5));
    c->red = 8;
    run(c);
    c = tc(CG_REDUCE_SUM_LIKE, "reduce sum like [1]");
    in_u(c, DIMS(2, 3, 4));
    in_u(c, DIMS(1));
    c->red = 24;
    run(c);
    c = tc(CG_REDUCE_SUM_LIKE, "reduce sum like scalar");
    in_u(c, DIMS(3, 7));
    in_u(c, 0, NULL);
    c->red = 21;
    run(c);
    c = tc(CG_REDUCE_SUM_LIKE, "reduce sum like same");
    in_u(c, DIMS(3, 7));
    in_u(c, DIMS(3, 7));
    run(c);
}

/* ---- matrix products ------------------------------------------------------------------------------------------ */

static void test_products(void) {
    tcase *c;
    struct {
        const char *what;
        int ta, tb;
        int cnd;
        int64_t cs[2];
        double alpha, beta;
        int relu;
    } gemms[] = {
        {"gemm C [N]", 0, 0, 1, {4}, 1, 1, 0},
        {"gemm trans_a, C [M, 1]", 1, 0, 2, {5, 1}, 0.7, -1.3, 0},
        {"gemm trans_b, C [1]", 0, 1, 1, {1}, 1, 0.5, 0},
        {"gemm both, C [M, N], relu", 1, 1, 2, {5, 4}, -1.1, 2, 1},
        {"gemm C scalar", 0, 0, 0, {0}, 1, 1, 0},
        {"gemm no C", 0, 1, -1, {0}, 0.5, 1, 1},
        {"gemm beta 0 (C unread)", 0, 0, 2, {5, 4}, 1, 0, 0},
    };
    for (size_t g = 0; g < sizeof gemms / sizeof gemms[0]; g++) {
        c = tc(CG_GEMM, gemms[g].what);
        const int64_t m = 5, k = 7, n = 4;
        in_u(c, 2, gemms[g].ta ? SHAPE(k, m) : SHAPE(m, k));
        in_u(c, 2, gemms[g].tb ? SHAPE(n, k) : SHAPE(k, n));
        if (gemms[g].cnd >= 0) {
            double *cv = in_u(c, gemms[g].cnd, gemms[g].cs);
            if (gemms[g].beta == 0) cv[0] = NAN; /* beta 0: C is not read at all */
        }
        c->n.a.trans_a = gemms[g].ta;
        c->n.a.trans_b = gemms[g].tb;
        c->n.a.alpha = gemms[g].alpha;
        c->n.a.beta = gemms[g].beta;
        c->n.a.fuse_relu = gemms[g].relu;
        c->red = (double)k + 2;
        run(c);
    }
    c = tc(CG_GEMM, "gemm K = 0");
    in_u(c, DIMS(3, 0));
    in_u(c, DIMS(0, 4));
    in_u(c, DIMS(4));
    c->n.a.beta = 0.5;
    run(c);
    c = tc(CG_GEMM, "gemm large"); /* split over threads, cattr's own float32 GEMM where the CPU has it */
    in_u(c, DIMS(170, 160));
    in_u(c, DIMS(160, 150));
    c->red = 160;
    run(c);

    struct {
        const char *what;
        int na, nb;
        int64_t as[4], bs[4];
        int ta, tb, relu;
        double k;
    } mms[] = {
        {"matmul 2-D", 2, 2, {3, 4}, {4, 5}, 0, 0, 0, 4},
        {"matmul folded batch", 4, 2, {2, 3, 5, 4}, {4, 6}, 0, 0, 1, 4},
        {"matmul broadcast batch", 4, 3, {2, 1, 3, 4}, {5, 4, 2}, 0, 0, 0, 4},
        {"matmul 1-D A", 1, 3, {4}, {2, 4, 3}, 0, 0, 0, 4},
        {"matmul 1-D B", 3, 1, {2, 3, 4}, {4}, 0, 0, 0, 4},
        {"matmul 1-D both", 1, 1, {9}, {9}, 0, 0, 0, 9},
        {"matmul trans_b", 3, 2, {2, 3, 4}, {6, 4}, 0, 1, 0, 4},
        {"matmul trans_a", 2, 2, {4, 3}, {4, 5}, 1, 0, 0, 4},
        {"matmul trans both batched relu", 3, 3, {2, 7, 3}, {2, 5, 7}, 1, 1, 1, 7},
        {"matmul K = 0", 2, 2, {3, 0}, {0, 4}, 0, 0, 0, 0},
        {"matmul large folded", 3, 2, {2, 200, 128}, {128, 160}, 0, 0, 0, 128},
        {"matmul large trans_b", 2, 2, {100, 256}, {200, 256}, 0, 1, 0, 256},
    };
    for (size_t g = 0; g < sizeof mms / sizeof mms[0]; g++) {
        c = tc(CG_MATMUL, mms[g].what);
        in_u(c, mms[g].na, mms[g].as);
        in_u(c, mms[g].nb, mms[g].bs);
        c->n.a.trans_a = mms[g].ta;
        c->n.a.trans_b = mms[g].tb;
        c->n.a.fuse_relu = mms[g].relu;
        c->red = mms[g].k;
        run(c);
    }
}

/* ---- convolution and pooling -------------------------------------------------------------------------------------- */

typedef struct {
    int nsp;
    int64_t k[3], s[3], pad[6], dil[3];
    int64_t group;
    int ceil_mode, cip;
} geo;

static void apply_geo(cg_attrs *a, const geo *g) {
    a->nsp = g->nsp;
    for (int i = 0; i < g->nsp; i++) {
        a->kernel[i] = g->k[i] ? g->k[i] : 1;
        a->stride[i] = g->s[i] ? g->s[i] : 1;
        a->dilation[i] = g->dil[i] ? g->dil[i] : 1;
        a->pad[i] = g->pad[i];
        a->pad[g->nsp + i] = g->pad[g->nsp + i];
    }
    a->group = g->group ? g->group : 1;
    a->ceil_mode = g->ceil_mode;
    a->count_include_pad = g->cip;
}

/* Conv (with and without bias, with the fused ReLU) and ConvGradInput for input x, weight w and a geometry. */
static void conv_family(const char *what, int nd, const int64_t *xs, const int64_t *ws, geo g) {
    cg_attrs a = cg_attrs_default();
    apply_geo(&a, &g);
    int64_t KK = 1;
    for (int i = 2; i < nd; i++) {
        a.kernel[i - 2] = ws[i];
        KK *= ws[i];
    }
    double red = (double)(ws[1] * KK) + 1;
    static char names[3][128];
    snprintf(names[0], sizeof names[0], "%s", what);
    snprintf(names[1], sizeof names[1], "%s, no bias, relu", what);
    snprintf(names[2], sizeof names[2], "%s, input gradient", what);
    for (int v = 0; v < 2; v++) {
        tcase *c = tc(CG_CONV, names[v]);
        in_u(c, nd, xs);
        in_u(c, nd, ws);
        if (v == 0) in_u(c, DIMS(ws[0]));
        else in_absent(c);
        c->n.a = a;
        c->n.a.fuse_relu = v == 1;
        c->red = red;
        run(c);
    }
    int ond;
    int64_t os[CATTR_MAX_DIMS];
    infer_shape(CG_CONV, &a, 2, (const int[]){nd, nd}, (const int64_t *const[]){xs, ws}, &ond, os);
    tcase *c = tc(CG_CONV_GRAD_INPUT, names[2]);
    in_u(c, nd, xs);
    in_u(c, nd, ws);
    in_u(c, ond, os);
    c->n.a = a;
    c->red = (double)(ws[0] / a.group * KK) + 1;
    run(c);
}

/* MaxPool, AveragePool, their gradients and (for an even batch) DeepLift's max-pool rule for one geometry; with
 * `ties`, X takes only the values -1, -0.5, ..., 1, so that windows hold equal maxima (the first one wins). */
static void pool_family_x(const char *what, int nd, const int64_t *xs, geo g, bool ties) {
    cg_attrs a = cg_attrs_default();
    apply_geo(&a, &g);
    int64_t KK = 1;
    for (int i = 0; i < g.nsp; i++) KK *= g.k[i];
    int ond;
    int64_t os[CATTR_MAX_DIMS];
    infer_shape(CG_MAXPOOL, &a, 1, (const int[]){nd}, (const int64_t *const[]){xs}, &ond, os);
    static char names[5][128];
    const char *suffix[5] = {"max", "average", "max grad", "average grad", "deeplift max"};
    const cg_op ops[5] = {CG_MAXPOOL, CG_AVGPOOL, CG_MAXPOOL_GRAD, CG_AVGPOOL_GRAD, CG_DL_MAXPOOL};
    for (int v = 0; v < 5; v++) {
        if (ops[v] == CG_DL_MAXPOOL && xs[0] % 2) continue;
        snprintf(names[v], sizeof names[v], "%s: %s", what, suffix[v]);
        tcase *c = tc(ops[v], names[v]);
        double *x = in_u(c, nd, xs);
        for (int64_t i = 0; ties && i < cx_numel(nd, xs); i++) x[i] = round(2 * x[i]) / 2;
        if (ops[v] == CG_DL_MAXPOOL) { /* a few references equal to their actual rows: the G0 fallback */
            int64_t half = cx_numel(nd, xs) / 2;
            for (int64_t i = 0; i < half; i += 5) x[half + i] = x[i];
            in_u(c, ond, os);
            in_u(c, ond, os);
            in_u(c, nd, xs);
            c->n.a = a;
            c->n.a.alpha = 1e-2;
            c->red = 4;
            run(c);
            continue;
        }
        if (v >= 2) in_u(c, ond, os);
        c->n.a = a;
        c->red = (double)KK + 1;
        run(c);
    }
}

static void pool_family(const char *what, int nd, const int64_t *xs, geo g) { pool_family_x(what, nd, xs, g, false); }

static void test_conv_pool(void) {
    /* direct 2-D path (stride 1, small filter), with groups and asymmetric padding */
    conv_family("conv direct", DIMS(2, 3, 8, 9), SHAPE(4, 3, 3, 3), (geo){.nsp = 2, .pad = {1, 1, 1, 1}});
    conv_family("conv direct groups", DIMS(1, 4, 7, 6), SHAPE(6, 2, 3, 2),
                (geo){.nsp = 2, .pad = {1, 0, 1, 1}, .group = 2});
    /* im2col + GEMM: strides, dilation, groups */
    conv_family("conv strided dilated groups", DIMS(2, 4, 11, 10), SHAPE(6, 2, 3, 3),
                (geo){.nsp = 2, .s = {2, 1}, .dil = {2, 1}, .pad = {1, 2, 0, 1}, .group = 2});
    conv_family("conv 1-D", DIMS(2, 3, 15), SHAPE(5, 3, 4), (geo){.nsp = 1, .s = {3}, .pad = {2, 1}});
    conv_family("conv 3-D", DIMS(1, 2, 5, 6, 4), SHAPE(3, 2, 2, 3, 2),
                (geo){.nsp = 3, .s = {1, 2, 1}, .dil = {2, 1, 1}, .pad = {1, 0, 1, 0, 1, 1}});
    conv_family("conv wide", DIMS(2, 16, 12, 12), SHAPE(32, 16, 3, 3), (geo){.nsp = 2, .pad = {1, 1, 1, 1}});
    conv_family("conv depthwise", DIMS(1, 6, 9, 9), SHAPE(6, 1, 3, 3), (geo){.nsp = 2, .pad = {1, 1, 1, 1}, .group = 6});

    pool_family("pool 2x2/2", DIMS(4, 3, 8, 6), (geo){.nsp = 2, .k = {2, 2}, .s = {2, 2}}); /* 2 actual rows */
    pool_family("pool 3x3/2 inside", DIMS(1, 2, 9, 11), (geo){.nsp = 2, .k = {3, 3}, .s = {2, 2}});
    pool_family("pool 3x3/2 padded", DIMS(2, 2, 7, 8), (geo){.nsp = 2, .k = {3, 3}, .s = {2, 2}, .pad = {1, 1, 1, 1}});
    pool_family("pool padded include pad", DIMS(2, 2, 7, 8),
                (geo){.nsp = 2, .k = {3, 3}, .s = {2, 2}, .pad = {1, 0, 1, 1}, .cip = 1});
    pool_family("pool dilated", DIMS(1, 3, 9, 10),
                (geo){.nsp = 2, .k = {2, 3}, .s = {1, 2}, .dil = {2, 1}, .pad = {0, 1, 1, 0}});
    pool_family("pool ceil", DIMS(2, 2, 8, 8), (geo){.nsp = 2, .k = {3, 3}, .s = {2, 2}, .ceil_mode = 1});
    /* the last window along W runs past the (unpadded) end: its divisor stops at the input's end */
    pool_family("pool ceil include pad", DIMS(2, 2, 8, 8),
                (geo){.nsp = 2, .k = {3, 3}, .s = {2, 2}, .pad = {1, 0, 0, 0}, .ceil_mode = 1, .cip = 1});
    pool_family("pool 1-D ceil", DIMS(2, 3, 13), (geo){.nsp = 1, .k = {4}, .s = {3}, .pad = {1, 2}, .ceil_mode = 1});
    pool_family("pool 3-D", DIMS(2, 2, 5, 6, 7), (geo){.nsp = 3, .k = {2, 2, 3}, .s = {2, 1, 2}, .pad = {0, 1, 1, 1, 0, 1}});
    pool_family("pool overlapping", DIMS(2, 1, 5, 5), (geo){.nsp = 2, .k = {3, 3}, .pad = {1, 1, 1, 1}});
    pool_family_x("pool 2x2/2 ties", DIMS(2, 3, 8, 6), (geo){.nsp = 2, .k = {2, 2}, .s = {2, 2}}, true);
    pool_family_x("pool 3x3/2 inside ties", DIMS(2, 2, 9, 11), (geo){.nsp = 2, .k = {3, 3}, .s = {2, 2}}, true);
    pool_family_x("pool padded ties", DIMS(2, 2, 7, 8), (geo){.nsp = 2, .k = {3, 3}, .s = {1, 2}, .pad = {1, 1, 1, 1}},
                  true);
    /* a window wholly in the padding: -inf (max), 0 (average) */
    pool_family("pool empty window", DIMS(2, 1, 5), (geo){.nsp = 1, .k = {2}, .pad = {2, 0}});

    tcase *c = tc(CG_GLOBALAVGPOOL, "global average pool");
    in_u(c, DIMS(2, 3, 4, 5));
    c->red = 20;
    run(c);
    c = tc(CG_GLOBALAVGPOOL, "global average pool 1-D");
    in_u(c, DIMS(2, 3, 7));
    c->red = 7;
    run(c);
    c = tc(CG_GAP_GRAD, "global average pool grad");
    in_u(c, DIMS(2, 3, 4, 5));
    in_u(c, DIMS(2, 3, 1, 1));
    run(c);
}

/* ---- softmax, normalisation ------------------------------------------------------------------------------------- */

static void test_norms(void) {
    tcase *c;
    static const struct {
        const char *fwd, *bwd;
        int64_t axis, legacy;
    } sm[] = {
        {"softmax axis 1", "softmax grad axis 1", 1, 0},
        {"softmax axis 2", "softmax grad axis 2", 2, 0},
        {"softmax axis 0", "softmax grad axis 0", 0, 0},
        {"softmax axis -1", "softmax grad axis -1", -1, 0},
        {"softmax legacy axis 1", "softmax grad legacy axis 1", 1, 1},
    };
    for (size_t i = 0; i < sizeof sm / sizeof sm[0]; i++) {
        c = tc(CG_SOFTMAX, sm[i].fwd);
        in_f(c, DIMS(3, 4, 5), -3, 3);
        c->n.a.axis = sm[i].axis;
        c->n.a.index = sm[i].legacy;
        c->red = 24;
        run(c);
        c = tc(CG_SOFTMAX_GRAD, sm[i].bwd);
        in_f(c, DIMS(3, 4, 5), 0, 1);
        in_u(c, DIMS(3, 4, 5));
        c->n.a.axis = sm[i].axis;
        c->n.a.index = sm[i].legacy;
        c->red = 24;
        run(c);
    }
    c = tc(CG_SOFTMAX, "softmax long");
    in_f(c, DIMS(2, 300), -5, 5);
    c->n.a.axis = 1;
    c->red = 300;
    run(c);

    c = tc(CG_BATCHNORM, "batchnorm");
    in_u(c, DIMS(2, 3, 4, 5));
    in_u(c, DIMS(3));
    in_u(c, DIMS(3));
    in_u(c, DIMS(3));
    in_f(c, DIMS(3), 0.1, 2);
    c->n.a.alpha = 1e-5;
    c->red = 4;
    run(c);
    c = tc(CG_BATCHNORM, "batchnorm 2-D");
    in_u(c, DIMS(4, 3));
    in_u(c, DIMS(3));
    in_u(c, DIMS(3));
    in_u(c, DIMS(3));
    in_f(c, DIMS(3), 0.1, 2);
    c->n.a.alpha = 1e-3;
    c->red = 4;
    run(c);
    c = tc(CG_BATCHNORM_GRAD, "batchnorm grad");
    in_u(c, DIMS(2, 3, 4, 5));
    in_u(c, DIMS(3));
    in_f(c, DIMS(3), 0.1, 2);
    c->n.a.alpha = 1e-5;
    c->red = 4;
    run(c);

    static const struct {
        const char *fwd, *bwd;
        int nd;
        int64_t xs[3], D;
    } rms[] = {
        {"rmsnorm", "rmsnorm grad", 3, {2, 5, 12}, 12},
        {"rmsnorm groups", "rmsnorm grad groups", 3, {2, 3, 24}, 8},
        {"rmsnorm odd", "rmsnorm grad odd", 2, {3, 37}, 37},
        {"rmsnorm wide", "rmsnorm grad wide", 2, {4, 80}, 80},
    };
    for (size_t i = 0; i < sizeof rms / sizeof rms[0]; i++) {
        c = tc(CG_RMSNORM, rms[i].fwd);
        in_u(c, rms[i].nd, rms[i].xs);
        in_f(c, DIMS(rms[i].D), 0.5, 1.5);
        c->n.a.alpha = 1e-6;
        c->red = (double)rms[i].D;
        run(c);
        c = tc(CG_RMSNORM_GRAD, rms[i].bwd);
        in_u(c, rms[i].nd, rms[i].xs);
        in_f(c, DIMS(rms[i].D), 0.5, 1.5);
        in_u(c, rms[i].nd, rms[i].xs);
        c->n.a.alpha = 1e-6;
        c->red = 2 * (double)rms[i].D;
        run(c);
    }

    c = tc(CG_LOGSOFTMAX, "log-softmax");
    in_f(c, DIMS(3, 50), -4, 4);
    c->red = 50;
    run(c);
    c = tc(CG_LOGSOFTMAX, "log-softmax 3-D");
    in_f(c, DIMS(2, 3, 7), -4, 4);
    c->red = 7;
    run(c);
    c = tc(CG_LOGSOFTMAX_GRAD, "log-softmax grad");
    in_f(c, DIMS(3, 50), -6, -1);
    in_u(c, DIMS(3, 50));
    c->red = 50;
    run(c);
}

/* ---- transformer ops ----------------------------------------------------------------------------------------------- */

static double *inv_freq(tcase *c, int64_t d) {
    double *f = in_u(c, DIMS(d / 2));
    for (int64_t m = 0; m < d / 2; m++) f[m] = pow(10000.0, -2.0 * (double)m / (double)d);
    return f;
}

static void test_transformer(void) {
    tcase *c;
    c = tc(CG_ROPE, "rope");
    in_u(c, DIMS(2, 5, 16));
    inv_freq(c, 8);
    INTS(&c->n.a, 8);
    c->red = 4;
    run(c);
    c = tc(CG_ROPE, "rope inverse 4-D");
    in_u(c, DIMS(2, 2, 3, 24));
    inv_freq(c, 8);
    INTS(&c->n.a, 8);
    c->n.a.index = 1;
    c->red = 4;
    run(c);
    c = tc(CG_ROPE, "rope positions");
    in_u(c, DIMS(1, 7, 12));
    inv_freq(c, 4);
    in_i(c, DIMS(7), SHAPE(3, 4, 5, 0, 1, 2, 900));
    INTS(&c->n.a, 4);
    c->red = 4;
    run(c);

    static const struct {
        const char *fwd, *bwd;
        int nd;
        int64_t lead[2], T, nh, nkv, d;
    } att[] = {
        {"attention gqa", "attention grad gqa", 3, {2}, 7, 4, 2, 6},
        {"attention d 35", "attention grad d 35", 3, {1}, 9, 2, 1, 35},
        {"attention mha d 16", "attention grad mha d 16", 3, {2}, 21, 3, 3, 16},
        {"attention 4-D", "attention grad 4-D", 4, {2, 1}, 5, 2, 1, 4},
        {"attention T 1", "attention grad T 1", 3, {3}, 1, 4, 1, 8},
    };
    for (size_t i = 0; i < sizeof att / sizeof att[0]; i++) {
        int nd = att[i].nd;
        int64_t qs[4], ks[4];
        for (int j = 0; j < nd - 2; j++) qs[j] = ks[j] = att[i].lead[j];
        qs[nd - 2] = ks[nd - 2] = att[i].T;
        qs[nd - 1] = att[i].nh * att[i].d;
        ks[nd - 1] = att[i].nkv * att[i].d;
        double red = (double)(att[i].d + att[i].T);
        for (int g = 0; g < 2; g++) {
            c = tc(g ? CG_ATTENTION_GRAD : CG_ATTENTION, g ? att[i].bwd : att[i].fwd);
            in_u(c, nd, qs);
            in_u(c, nd, ks);
            in_u(c, nd, ks);
            if (g) in_u(c, nd, qs);
            INTS(&c->n.a, att[i].nh, att[i].nkv, att[i].d);
            c->red = g ? 3 * red : red;
            run(c);
        }
    }
    /* ragged: segments (start, length, prefix length) of one flattened sequence; rows outside every segment are 0 */
    c = tc(CG_ATTENTION, "attention ragged gqa");
    in_u(c, DIMS(1, 10, 24));
    in_u(c, DIMS(1, 10, 12));
    in_u(c, DIMS(1, 10, 12));
    in_u(c, DIMS(5, 12));
    in_u(c, DIMS(5, 12));
    in_i(c, DIMS(3, 3), SHAPE(0, 3, 2, 3, 4, 0, 7, 2, 5));
    INTS(&c->n.a, 4, 2, 6);
    c->red = 16;
    run(c);
    c = tc(CG_ATTENTION, "attention ragged d 32");
    in_u(c, DIMS(1, 12, 64));
    in_u(c, DIMS(1, 12, 32));
    in_u(c, DIMS(1, 12, 32));
    in_u(c, DIMS(4, 32));
    in_u(c, DIMS(4, 32));
    in_i(c, DIMS(2, 3), SHAPE(0, 5, 3, 5, 6, 4));
    INTS(&c->n.a, 2, 1, 32);
    c->red = 44;
    run(c);

    c = tc(CG_SWIGLU, "swiglu");
    in_f(c, DIMS(3, 37), -6, 6);
    in_u(c, DIMS(3, 37));
    c->red = 4;
    run(c);
    for (int which = 0; which < 2; which++) {
        c = tc(CG_SWIGLU_GRAD, which ? "swiglu grad up" : "swiglu grad gate");
        in_f(c, DIMS(3, 37), -6, 6);
        in_u(c, DIMS(3, 37));
        in_u(c, DIMS(3, 37));
        c->n.a.index = which;
        c->red = 8;
        run(c);
    }
    c = tc(CG_SWIGLU_GRAD, "swiglu grad gate large");
    in_f(c, DIMS(300, 1000), -6, 6);
    in_u(c, DIMS(300, 1000));
    in_u(c, DIMS(300, 1000));
    c->red = 8;
    run(c);
}

/* ---- rule ops ------------------------------------------------------------------------------------------------------- */

static void test_rules(void) {
    tcase *c;
    c = tc(CG_DL_DELTA, "deeplift delta");
    in_u(c, DIMS(4, 3, 2));
    run(c);
    c = tc(CG_DL_RESCALE, "deeplift rescale");
    in_u(c, DIMS(6, 5));
    in_u(c, DIMS(6, 5));
    in_u(c, DIMS(6, 5));
    double *dx = in_u(c, DIMS(6, 5));
    for (int i = 0; i < 30; i += 4) dx[i] = i % 8 ? 0 : 1e-3; /* below eps: G0 */
    c->n.a.alpha = 1e-2;
    c->red = 2;
    run(c);
    c = tc(CG_DL_CENTER, "deeplift center");
    in_u(c, DIMS(2, 10));
    c->red = 20;
    run(c);
    c = tc(CG_LRP_DIV, "lrp div");
    double *z = NULL;
    in_u(c, DIMS(5, 7));
    z = in_u(c, DIMS(5, 7));
    for (int i = 0; i < 35; i += 6) z[i] = 0; /* sign(0) = +1 */
    c->n.a.alpha = 1e-2;
    c->red = 2;
    run(c);
    { /* NormalNoise: 4 rows of [3, 5], streams with their high bits set, first blocks apart */
        c = tc(CG_NORMAL_NOISE, "normal noise");
        int64_t st[4] = {(int64_t)0x9E3779B97F4A7C15ull, 7, -3, 1LL << 60}, first[4] = {0, 15, 1000000007, 2};
        in_i(c, DIMS(4), st);
        in_i(c, DIMS(4), first);
        c->n.a.n_ints = 2;
        c->n.a.ints[0] = 3, c->n.a.ints[1] = 5;
        c->n.a.axis = 12345;
        c->n.a.alpha = 0.3;
        run(c);
    }
    for (int v = 0; v < 2; v++) { /* LimeSimilarity: cosine, then euclidean, rows of 40 */
        c = tc(CG_LIME_SIMILARITY, v ? "lime similarity, euclidean" : "lime similarity, cosine");
        in_u(c, DIMS(6, 40));
        in_u(c, DIMS(6, 40));
        c->n.a.alpha = 0.8;
        c->n.a.index = v;
        c->red = 40;
        run(c);
    }
    /* DL_MAXPOOL is run by pool_family */
    /* WhereId: A full, B broadcast per row; then A broadcast, B full; ids matching some elements of each row */
    for (int v = 0; v < 2; v++) {
        c = tc(CG_WHERE_ID, v ? "where id (A broadcast)" : "where id");
        if (v) in_u(c, DIMS(4, 1, 1));
        else in_u(c, DIMS(4, 3, 5));
        if (v) in_u(c, DIMS(4, 3, 5));
        else in_u(c, DIMS(4, 1, 1));
        int64_t mv[60], id[4] = {0, 2, 7, 1};
        for (int i = 0; i < 60; i++) mv[i] = (i * 7) % 3;
        in_i(c, DIMS(4, 3, 5), mv);
        in_i(c, DIMS(4), id);
        run(c);
        c = tc(CG_WHERE_ID, v ? "where at most (A broadcast)" : "where at most");
        if (v) in_u(c, DIMS(4, 1, 1));
        else in_u(c, DIMS(4, 3, 5));
        if (v) in_u(c, DIMS(4, 3, 5));
        else in_u(c, DIMS(4, 1, 1));
        in_i(c, DIMS(4, 3, 5), mv);
        in_i(c, DIMS(4), id);
        c->n.a.index = 1;
        run(c);
    }
    /* WhereId with row maps: 6 rows from A [2, 3, 4] (rows r mod 2), B [3, 3, 4] (a map), M [1, 3, 4] (all row 0) */
    {
        c = tc(CG_WHERE_ID, "where id, row maps");
        in_u(c, DIMS(2, 3, 4));
        in_u(c, DIMS(3, 3, 4));
        int64_t mv[12], id[6] = {0, 1, 2, 3, 1, 0}, ar[6] = {0, 1, 0, 1, 0, 1}, br[6] = {2, 0, 1, 2, 1, 0}, mr[6] = {0};
        for (int i = 0; i < 12; i++) mv[i] = i % 4;
        in_i(c, DIMS(1, 3, 4), mv);
        in_i(c, DIMS(6), id);
        in_i(c, DIMS(6), ar);
        in_i(c, DIMS(6), br);
        in_i(c, DIMS(6), mr);
        run(c);
        c = tc(CG_WHERE_ID, "where id, row maps, at most (index 1)");
        in_u(c, DIMS(2, 3, 4));
        in_u(c, DIMS(3, 3, 4));
        in_i(c, DIMS(1, 3, 4), mv);
        in_i(c, DIMS(6), id);
        in_i(c, DIMS(6), ar);
        in_i(c, DIMS(6), br);
        in_i(c, DIMS(6), mr);
        c->n.a.index = 1;
        run(c);
        c = tc(CG_WHERE_ID, "where id, one map absent");
        in_u(c, DIMS(6, 3, 4));
        in_u(c, DIMS(3, 3, 4));
        in_i(c, DIMS(1, 3, 4), mv);
        in_i(c, DIMS(6), id);
        in_absent(c);
        in_i(c, DIMS(6), br);
        in_i(c, DIMS(6), mr);
        run(c);
    }
    /* PlaceRows: B = 3 rows of [2, 4], 2 states (R = 6), ordinals -1..4 so that some fall before, in and after */
    for (int v = 0; v < 2; v++) {
        c = tc(CG_PLACE_ROWS, v ? "place rows, per-example ordinals" : "place rows");
        in_u(c, DIMS(3, 2, 4));
        in_u(c, DIMS(6));
        int64_t ord[24], q0[1] = {1};
        for (int i = 0; i < 24; i++) ord[i] = (i * 5) % 6 - 1;
        if (v) in_i(c, DIMS(3, 2, 4), ord);
        else in_i(c, DIMS(1, 2, 4), ord);
        in_i(c, DIMS(1), q0);
        run(c);
    }
}

/* ---- errors --------------------------------------------------------------------------------------------------------- */

/* Runs node n on fresh views of the case in float32 through both kernels (fast one unless skip_fast); checks the
 * statuses and that the reference's message names the node. */
static void expect_error(tcase *c, cattr_status want, bool skip_fast, const char *needle) {
    cx_view in[CG_MAX_IN], out;
    make_views(c, CATTR_FLOAT32, in);
    memset(&out, 0, sizeof out);
    cattr_status st = cx_infer(&c->n, in, &out);
    if (st != CATTR_OK) { /* an op outside the table: any float32 output will do */
        out.dtype = CATTR_FLOAT32;
        out.ndim = 1;
        out.shape[0] = 4;
    }
    out.data = xmalloc(view_bytes(&out) + 64);
    cattr_status sr = cx_check_run_op(&c->n, in, &out);
    const char *msg = cattr_last_error();
    CHECK(sr == want, "error case '%s': the reference returned %s, want %s (%s)", c->what, cattr_status_string(sr),
          cattr_status_string(want), msg);
    CHECK(strstr(msg, c->what) != NULL, "error case '%s': the message does not name the node: %s", c->what, msg);
    if (needle) CHECK(strstr(msg, needle) != NULL, "error case '%s': the message lacks '%s': %s", c->what, needle, msg);
    if (!skip_fast) {
        cattr_status sf = g_cpu->run_op(g_cpu->ctx, &c->n, in, &out);
        CHECK(sf == want, "error case '%s': the CPU kernel returned %s, want %s (%s)", c->what,
              cattr_status_string(sf), cattr_status_string(want), cattr_last_error());
    }
    for (int k = 0; k < c->n.n_in; k++) free(in[k].data);
    free(out.data);
}

static void test_errors(void) {
    tcase *c;
    c = tc(CG_GATHER, "gather past the end");
    in_u(c, DIMS(4, 5, 3));
    in_i(c, DIMS(3), SHAPE(0, 5, 1));
    c->n.a.axis = 1;
    expect_error(c, CATTR_ERR_SHAPE, false, "out of range");
    c = tc(CG_GATHER, "gather before the start");
    in_u(c, DIMS(4, 5));
    in_i(c, DIMS(2), SHAPE(-5, -6));
    c->n.a.axis = 1;
    expect_error(c, CATTR_ERR_SHAPE, false, "out of range");
    c = tc(CG_GATHER_GRAD, "gather grad past the end");
    in_u(c, DIMS(4, 2));
    in_i(c, DIMS(2), SHAPE(1, 9));
    in_u(c, DIMS(4, 5));
    c->n.a.axis = 1;
    expect_error(c, CATTR_ERR_SHAPE, false, "out of range");
    c = tc(CG_SEQ_PICK, "seq pick past the end");
    in_u(c, DIMS(2, 5, 3));
    in_i(c, DIMS(2), SHAPE(1, 5));
    expect_error(c, CATTR_ERR_INVALID_ARGUMENT, false, NULL);
    c = tc(CG_SEQ_PICK_GRAD, "seq pick grad negative");
    in_u(c, DIMS(2, 1, 3));
    in_i(c, DIMS(2), SHAPE(-1, 0));
    in_u(c, DIMS(2, 5, 3));
    expect_error(c, CATTR_ERR_INVALID_ARGUMENT, false, NULL);
    c = tc(CG_ROPE, "rope negative position");
    in_u(c, DIMS(1, 3, 8));
    inv_freq(c, 8);
    in_i(c, DIMS(3), SHAPE(0, -2, 1));
    INTS(&c->n.a, 8);
    expect_error(c, CATTR_ERR_INVALID_ARGUMENT, false, NULL);
    c = tc(CG_ATTENTION, "attention bad segment");
    in_u(c, DIMS(1, 6, 8));
    in_u(c, DIMS(1, 6, 8));
    in_u(c, DIMS(1, 6, 8));
    in_u(c, DIMS(2, 8));
    in_u(c, DIMS(2, 8));
    in_i(c, DIMS(2, 3), SHAPE(0, 3, 1, 3, 3, 3)); /* prefix 3 > 2 */
    INTS(&c->n.a, 2, 2, 4);
    expect_error(c, CATTR_ERR_INVALID_ARGUMENT, false, "segment");
    c = tc(CG_MATMUL, "matmul bf16");
    in_u(c, DIMS(3, 4));
    in_u(c, DIMS(4, 5));
    c->n.a.bf16 = 1;
    expect_error(c, CATTR_ERR_UNSUPPORTED, true, "full precision");
    /* int64 data for an arithmetic op (Relu, Neg and Abs take int64: tests/test_perturb_forms.c) */
    {
        tcase *ci = tc(CG_SIGMOID, "sigmoid of int64");
        in_i(ci, DIMS(4), SHAPE(1, -2, 3, 0));
        expect_error(ci, CATTR_ERR_UNSUPPORTED, false, "int64");
    }
    /* an op outside the table: the reference only (the fast backend's message indexes cg_op_names with it) */
    c = tc(CG_OP_COUNT, "op out of the table");
    in_u(c, DIMS(4));
    expect_error(c, CATTR_ERR_UNSUPPORTED, true, "no kernel");

    /* int64 GatherGrad: exact sums (the fast kernel is compared above) */
    c = tc(CG_GATHER_GRAD, "gather grad int64");
    in_i(c, DIMS(1, 3), SHAPE(5, -7, 11));
    in_i(c, DIMS(3), SHAPE(2, 2, 0));
    in_i(c, DIMS(1, 4), SHAPE(0, 0, 0, 0));
    c->n.a.axis = 1;
    {
        cx_view gin[3], gout;
        make_views(c, CATTR_INT64, gin);
        memset(&gout, 0, sizeof gout);
        CHECK(cx_infer(&c->n, gin, &gout) == CATTR_OK, "gather grad int64: %s", cattr_last_error());
        int64_t got[4] = {-1, -1, -1, -1};
        gout.data = got;
        CHECK(cx_check_run_op(&c->n, gin, &gout) == CATTR_OK, "gather grad int64: %s", cattr_last_error());
        CHECK(gout.dtype == CATTR_INT64 && got[0] == 11 && got[1] == 0 && got[2] == -2 && got[3] == 0,
              "gather grad int64: got {%lld, %lld, %lld, %lld}, want {11, 0, -2, 0}", (long long)got[0],
              (long long)got[1], (long long)got[2], (long long)got[3]);
        for (int k = 0; k < 3; k++) free(gin[k].data);
    }

    /* the view ops may run in place */
    c = tc(CG_RESHAPE, "reshape in place");
    double *v = in_u(c, DIMS(2, 6));
    INTS(&c->n.a, 3, 4);
    cx_view in[1], out;
    make_views(c, CATTR_FLOAT64, in);
    memset(&out, 0, sizeof out);
    CHECK(cx_infer(&c->n, in, &out) == CATTR_OK, "reshape in place: %s", cattr_last_error());
    out.data = in[0].data;
    CHECK(cx_check_run_op(&c->n, in, &out) == CATTR_OK, "reshape in place: %s", cattr_last_error());
    bool same = true;
    for (int i = 0; i < 12; i++) same = same && ((double *)out.data)[i] == v[i];
    CHECK(same, "reshape in place changed the data");
    free(in[0].data);
}

/* HostCall: a host function (cattr_model_new_callback) computing y[r] = sum_j x[r,j]^2 * w[j] in float64 from inputs
 * in the call's dtype; the CPU backend runs the same kernel on its own memory, so the case checks the plumbing: the
 * shape from the shape function, the conversion into the output's dtype, inputs left unwritten. */
static cattr_status host_sq(void *user, int n_inputs, const cattr_tensor *const *inputs, cattr_tensor **output) {
    (void)user;
    if (n_inputs != 2) return CATTR_ERR_INVALID_ARGUMENT;
    const int64_t *sh = cattr_tensor_shape(inputs[0]);
    int64_t R = sh[0], C = sh[1];
    cattr_status st = cattr_tensor_new(CATTR_FLOAT64, 1, &R, output);
    if (st != CATTR_OK) return st;
    double *y = cattr_tensor_data(*output);
    const void *x = cattr_tensor_data_const(inputs[0]), *w = cattr_tensor_data_const(inputs[1]);
    bool f32 = cattr_tensor_dtype(inputs[0]) == CATTR_FLOAT32;
    for (int64_t r = 0; r < R; r++) {
        double acc = 0;
        for (int64_t j = 0; j < C; j++) {
            double a = f32 ? ((const float *)x)[r * C + j] : ((const double *)x)[r * C + j];
            double b = f32 ? ((const float *)w)[j] : ((const double *)w)[j];
            acc += a * a * b;
        }
        y[r] = acc;
    }
    return CATTR_OK;
}

static cattr_status host_sq_shape(void *user, int n_inputs, const int *ndim, const int64_t *shapes, int *out_ndim,
                                  int64_t *out_shape) {
    (void)user;
    if (n_inputs != 2 || ndim[0] != 2) return CATTR_ERR_SHAPE;
    *out_ndim = 1;
    out_shape[0] = shapes[0];
    return CATTR_OK;
}

static void test_host_call(void) {
    static cg_host_fn h = {.name = "sum of weighted squares", .fn = host_sq, .shape = host_sq_shape};
    tcase *c = tc(CG_HOST_CALL, "host function, weighted squares");
    in_u(c, DIMS(5, 7));
    in_u(c, DIMS(7));
    c->n.a.host = &h;
    c->red = 7;
    run(c);
}

int main(void) {
    double t0 = cx_now();
    g_cpu = CPU_BACKEND_TABLE();
    test_data_movement();
    test_elementwise();
    test_products();
    test_conv_pool();
    test_norms();
    test_transformer();
    test_rules();
    test_host_call();
    test_errors();
    tc(CG_IDENTITY, "end"); /* frees the last case's inputs */
    int covered = 0;
    /* MapRows has no backend kernel: the planner runs its body's plan per pass (exec/plan.c run_map), on every
     * backend alike; tests/test_onnx_load.c (test_passes) runs it on cpu and cpu-check against closed forms */
    g_covered[CG_MAP_ROWS] = true;
    for (int op = 0; op < CG_OP_COUNT; op++) {
        CHECK(g_covered[op], "op %s: no case ran and agreed in both float dtypes", cg_op_names[op]);
        covered += g_covered[op];
    }
    printf("test_check_kernels: %d of %d op kinds covered, %d checks, %d failed, %.2f s\n", covered, (int)CG_OP_COUNT,
           g_checks, g_failed, cx_now() - t0);
    return g_failed ? 1 : 0;
}
