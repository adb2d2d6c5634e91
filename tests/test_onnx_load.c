/* test_onnx_load.c - tests of the ONNX importer (src/io/onnx.c): the fixtures in tests/data/onnx (written by
 * tests/data/make_onnx_fixtures.py), the error contract (codes and message contents), and, when the golden data is
 * present ($CATTR_GOLDEN, default ../shared/golden), that every golden Captum model imports with all nodes mapped.
 * Run from the repository root. Exits 1 on any failed check. */
#define _POSIX_C_SOURCE 200809L
#include "io/onnx.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#define FIX "tests/data/onnx/"

static int g_fail, g_checks;

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        g_checks++;                                                                                                    \
        if (!(cond)) {                                                                                                 \
            printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                                                     \
            g_fail++;                                                                                                  \
        }                                                                                                              \
    } while (0)

#define CHECK_INTS(got, n, ...)                                                                                        \
    do {                                                                                                               \
        const int64_t want_[] = {__VA_ARGS__};                                                                         \
        CHECK((n) == (int)CX_ARRAY_LEN(want_) && memcmp((got), want_, sizeof want_) == 0);                             \
    } while (0)

static void forward_fixture(const char *name, int64_t count);
static void forward_fixture_data(const char *name, const char *data, int64_t count);
static void test_if_on_data(void);
static void test_int_inputs(void);
static void test_passes(void);

static bool near(double a, double b) { return isinf(b) ? a == b : fabs(a - b) <= 1e-6 * (1 + fabs(b)); }

/* Every node input is a defined value or -1, node outputs are produced in order, inputs/outputs are valid. */
static bool well_formed(const cg_graph *g) {
    for (int i = 0; i < g->n_nodes; i++) {
        const cg_node *n = &g->nodes[i];
        if (n->op >= CG_OP_COUNT || n->n_in < 0 || n->n_in > CG_MAX_IN) return false;
        if (n->out < 0 || n->out >= g->n_vals || g->vals[n->out].producer != i) return false;
        for (int k = 0; k < n->n_in; k++) {
            int v = n->in[k];
            if (v < -1 || v >= g->n_vals) return false;
            if (v >= 0 && g->vals[v].kind == CG_VAL_NODE && g->vals[v].producer >= i) return false;
            if (v >= 0 && g->vals[v].kind == CG_VAL_CONST && !g->vals[v].data) return false;
        }
    }
    for (int i = 0; i < g->n_inputs; i++)
        if (g->inputs[i] < 0 || g->inputs[i] >= g->n_vals || g->vals[g->inputs[i]].kind != CG_VAL_INPUT) return false;
    for (int i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] < 0 || g->outputs[i] >= g->n_vals) return false;
    return true;
}

static cg_graph *load_ok(const char *file, int want_opset, cx_onnx_info **info) {
    cg_graph *g = NULL;
    cattr_status st = cx_onnx_load_file_info(file, &g, info);
    if (st != CATTR_OK) {
        printf("FAIL load %s: %s: %s\n", file, cattr_status_string(st), cattr_last_error());
        g_fail++;
        return NULL;
    }
    CHECK(g && *info);
    CHECK((*info)->opset == want_opset);
    CHECK((*info)->n_inputs == g->n_inputs);
    CHECK(well_formed(g));
    return g;
}

static const cg_node *node(const cg_graph *g, const char *name, cg_op op) {
    for (int i = 0; i < g->n_nodes; i++)
        if (strcmp(g->nodes[i].name, name) == 0) {
            if (g->nodes[i].op != op) break;
            return &g->nodes[i];
        }
    printf("FAIL: no node '%s' of op %s\n", name, cg_op_names[op]);
    g_fail++;
    static cg_node dummy;
    dummy.a = cg_attrs_default();
    return &dummy;
}

static const char *in_name(const cg_graph *g, const cg_node *n, int k) {
    return k < n->n_in && n->in[k] >= 0 ? g->vals[n->in[k]].name : "";
}

/* The constant `name`, checked for dtype and shape. */
static const cattr_tensor *konst(const cg_graph *g, const char *name, cattr_dtype dt, int ndim, const int64_t *shape) {
    int v = cg_find_value(g, name);
    if (v < 0 || g->vals[v].kind != CG_VAL_CONST || !g->vals[v].owns_data) {
        printf("FAIL: no owned constant '%s'\n", name);
        g_fail++;
        return NULL;
    }
    const cattr_tensor *t = g->vals[v].data;
    CHECK(t->dtype == dt && cx_shape_eq(t->ndim, t->shape, ndim, shape));
    return t;
}

static void expect_err(const char *file, cattr_status want, const char *sub1, const char *sub2) {
    cg_graph *g = (cg_graph *)1;
    cx_onnx_info *info = (cx_onnx_info *)1;
    cattr_status st = cx_onnx_load_file_info(file, &g, &info);
    const char *msg = cattr_last_error();
    g_checks++;
    if (st != want || g || info || !strstr(msg, sub1) || (sub2 && !strstr(msg, sub2))) {
        printf("FAIL %s: got %s '%s', want %s with '%s'%s%s\n", file, cattr_status_string(st), msg,
               cattr_status_string(want), sub1, sub2 ? " and " : "", sub2 ? sub2 : "");
        g_fail++;
    }
    cg_free(st == CATTR_OK ? g : NULL);
}

/* ---- valid fixtures ------------------------------------------------------------------------------------------ */

static void test_mlp(void) {
    cx_onnx_info *info = NULL;
    cg_graph *g = load_ok(FIX "ok_mlp.onnx", 17, &info);
    if (!g) return;
    int64_t shape[CATTR_MAX_DIMS];
    CHECK(g->n_inputs == 1 && strcmp(g->vals[g->inputs[0]].name, "x") == 0);
    CHECK(cx_onnx_input_shape(info, 0, shape) == 2 && shape[0] == -1 && shape[1] == 4);
    CHECK(info->inputs[0].dtype == CATTR_FLOAT32);
    CHECK(cx_onnx_input_shape(info, 1, shape) == -1 && cx_onnx_input_shape(NULL, 0, shape) == -1);
    CHECK(g->n_outputs == 1 && strcmp(g->vals[g->outputs[0]].name, "probs") == 0);
    CHECK(g->n_nodes == 4);
    const cg_node *n = node(g, "/fc1/Gemm", CG_GEMM);
    CHECK(n->n_in == 3 && n->a.trans_b == 1 && n->a.trans_a == 0 && n->a.alpha == 1 && n->a.beta == 1);
    CHECK(strcmp(in_name(g, n, 0), "x") == 0 && strcmp(in_name(g, n, 1), "fc1.weight") == 0);
    CHECK(strcmp(g->vals[n->out].name, "h1") == 0);
    n = node(g, "/fc2/Gemm", CG_GEMM);
    CHECK(n->n_in == 2 && n->a.trans_b == 0 && near(n->a.alpha, 0.5) && near(n->a.beta, 0.25));
    node(g, "/relu/Relu", CG_RELU);
    n = node(g, "/softmax/Softmax", CG_SOFTMAX);
    CHECK(n->a.axis == 1 && n->a.index == 0);
    const cattr_tensor *t = konst(g, "fc1.weight", CATTR_FLOAT32, 2, (int64_t[]){8, 4});
    CHECK(t && ((const float *)t->data)[1] == -0.2f && ((const float *)t->data)[31] == 0.0f);
    cx_onnx_info_free(info);
    cg_free(g);
}

static void test_cnn(void) {
    cx_onnx_info *info = NULL;
    cg_graph *g = load_ok(FIX "ok_cnn.onnx", 17, &info);
    if (!g) return;
    int64_t shape[CATTR_MAX_DIMS];
    CHECK(cx_onnx_input_shape(info, 0, shape) == 4 && shape[0] == 1 && shape[1] == 3 && shape[3] == 8);
    CHECK(g->n_nodes == 9);
    const cg_node *n = node(g, "/conv1/Conv", CG_CONV);
    CHECK(n->n_in == 3 && n->a.nsp == 2 && n->a.group == 1);
    CHECK_INTS(n->a.kernel, 2, 3, 3);
    CHECK_INTS(n->a.pad, 4, 1, 1, 1, 1);
    CHECK_INTS(n->a.stride, 2, 1, 1);
    n = node(g, "/bn/BatchNormalization", CG_BATCHNORM);
    CHECK(n->n_in == 5 && near(n->a.alpha, 1e-3) && strcmp(in_name(g, n, 4), "bn.var") == 0);
    n = node(g, "/pool/MaxPool", CG_MAXPOOL);
    CHECK(n->a.nsp == 2 && n->a.ceil_mode == 1 && n->n_in == 1);
    CHECK_INTS(n->a.kernel, 2, 2, 2);
    CHECK_INTS(n->a.stride, 2, 2, 2);
    CHECK_INTS(n->a.pad, 4, 0, 0, 1, 1);
    n = node(g, "/conv2/Conv", CG_CONV); /* kernel_shape inferred from the weight, auto_pad VALID */
    CHECK(n->n_in == 2 && n->a.nsp == 2 && n->a.group == 2);
    CHECK_INTS(n->a.kernel, 2, 1, 1);
    CHECK_INTS(n->a.stride, 2, 1, 2);
    CHECK_INTS(n->a.pad, 4, 0, 0, 0, 0);
    n = node(g, "/avg/AveragePool", CG_AVGPOOL);
    CHECK(n->a.count_include_pad == 1 && n->a.ceil_mode == 0);
    CHECK_INTS(n->a.kernel, 2, 3, 3);
    CHECK_INTS(n->a.pad, 4, 1, 1, 1, 1);
    node(g, "/gap/GlobalAveragePool", CG_GLOBALAVGPOOL);
    CHECK(node(g, "/flatten/Flatten", CG_FLATTEN)->a.axis == 1);
    CHECK(node(g, "/fc/Gemm", CG_GEMM)->n_in == 3);
    konst(g, "conv1.weight", CATTR_FLOAT32, 4, (int64_t[]){4, 3, 3, 3});
    cx_onnx_info_free(info);
    cg_free(g);
}

static void test_conv1d(void) {
    cx_onnx_info *info = NULL;
    cg_graph *g = load_ok(FIX "ok_conv1d.onnx", 17, &info);
    if (!g) return;
    CHECK(g->n_nodes == 3);
    const cg_node *n = node(g, "/conv/Conv", CG_CONV);
    CHECK(n->a.nsp == 1 && n->a.kernel[0] == 3 && n->a.stride[0] == 2 && n->a.dilation[0] == 2);
    CHECK_INTS(n->a.pad, 2, 1, 2);
    n = node(g, "/pool/MaxPool", CG_MAXPOOL); /* its unused Indices output is not imported */
    CHECK(n->a.nsp == 1 && n->a.kernel[0] == 2 && n->a.stride[0] == 1 && n->a.pad[0] == 0 && n->a.pad[1] == 1);
    CHECK(cg_find_value(g, "m_idx") < 0);
    n = node(g, "/avg/AveragePool", CG_AVGPOOL);
    CHECK(n->a.ceil_mode == 1 && n->a.count_include_pad == 0 && n->a.stride[0] == 2);
    cx_onnx_info_free(info);
    cg_free(g);
}

static void test_ops(void) {
    cx_onnx_info *info = NULL;
    cg_graph *g = load_ok(FIX "ok_ops.onnx", 17, &info);
    if (!g) return;
    int64_t shape[CATTR_MAX_DIMS];
    CHECK(g->n_inputs == 2 && cx_onnx_input_shape(info, 1, shape) == 2 && shape[0] == 4 && shape[1] == -1);
    CHECK(g->n_outputs == 3 && strcmp(g->vals[g->outputs[2]].name, "cc2") == 0);
    CHECK(g->n_nodes == 25); /* 30 ONNX nodes, 5 of them Constant */
    const cg_node *n = node(g, "/reshape/Reshape", CG_RESHAPE);
    CHECK(n->n_in == 1 && n->a.allowzero == 0);
    CHECK_INTS(n->a.ints, n->a.n_ints, 0, 12);
    n = node(g, "/unsqueeze/Unsqueeze", CG_UNSQUEEZE);
    CHECK_INTS(n->a.ints, n->a.n_ints, 1);
    CHECK(node(g, "Squeeze_3", CG_SQUEEZE)->a.n_ints == 0);
    n = node(g, "/transpose/Transpose", CG_TRANSPOSE);
    CHECK_INTS(n->a.ints, n->a.n_ints, 1, 0);
    n = node(g, "/concat/Concat", CG_CONCAT);
    CHECK(n->n_in == 2 && n->a.axis == 0 && n->in[0] == n->in[1]);
    n = node(g, "/slice/Slice", CG_SLICE);
    CHECK(n->n_in == 1);
    CHECK_INTS(n->a.ints, n->a.n_ints, 0, 0, 10, 2, 0, 1, 2, 1);
    n = node(g, "/slice2/Slice", CG_SLICE);
    CHECK_INTS(n->a.ints, n->a.n_ints, 1, 5, 0, 1);
    n = node(g, "/gather/Gather", CG_GATHER);
    CHECK(n->n_in == 2 && n->a.axis == 0 && strcmp(in_name(g, n, 1), "idx") == 0);
    const cattr_tensor *t = konst(g, "idx", CATTR_INT64, 1, (int64_t[]){3});
    CHECK(t && ((const int64_t *)t->data)[2] == 4);
    n = node(g, "/clip/Clip", CG_CLIP);
    CHECK(n->n_in == 1 && n->a.alpha == -0.5 && n->a.beta == INFINITY);
    CHECK(near(node(g, "/lrelu/LeakyRelu", CG_LEAKYRELU)->a.alpha, 0.01));
    CHECK(near(node(g, "/lrelu2/LeakyRelu", CG_LEAKYRELU)->a.alpha, 0.2));
    node(g, "/sigmoid/Sigmoid", CG_SIGMOID);
    node(g, "/tanh/Tanh", CG_TANH);
    CHECK(node(g, "/neg/Neg", CG_NEG)->n_in == 1);
    CHECK(node(g, "/add/Add", CG_ADD)->n_in == 2);
    node(g, "/sub/Sub", CG_SUB);
    node(g, "/mul/Mul", CG_MUL);
    node(g, "/div/Div", CG_DIV);
    node(g, "/id/Identity", CG_IDENTITY);
    CHECK(node(g, "/drop/Dropout", CG_IDENTITY)->n_in == 1);
    node(g, "/drop2/Dropout", CG_IDENTITY);
    CHECK(cg_find_value(g, "dr2_mask") < 0);
    CHECK(node(g, "/matmul/MatMul", CG_MATMUL)->n_in == 2);
    CHECK(node(g, "/flatten/Flatten", CG_FLATTEN)->a.axis == 2);
    n = node(g, "/softmax/Softmax", CG_SOFTMAX);
    CHECK(n->a.axis == -1 && n->a.index == 0);
    CHECK(node(g, "/concat2/Concat", CG_CONCAT)->a.axis == -2);
    /* constants: every storage form */
    konst(g, "shape_c", CATTR_INT64, 1, (int64_t[]){2});
    t = konst(g, "axes_u", CATTR_INT64, 1, (int64_t[]){1});
    CHECK(t && ((const int64_t *)t->data)[0] == 1);
    t = konst(g, "cmin", CATTR_FLOAT32, 0, NULL);
    CHECK(t && ((const float *)t->data)[0] == -0.5f);
    t = konst(g, "cints", CATTR_INT64, 1, (int64_t[]){2});
    CHECK(t && ((const int64_t *)t->data)[1] == 4);
    t = konst(g, "cint", CATTR_INT64, 0, NULL);
    CHECK(t && ((const int64_t *)t->data)[0] == 7);
    t = konst(g, "cfloats", CATTR_FLOAT32, 1, (int64_t[]){2});
    CHECK(t && ((const float *)t->data)[1] == 2.5f);
    t = konst(g, "dscale", CATTR_FLOAT64, 1, (int64_t[]){2});
    CHECK(t && ((const double *)t->data)[0] == 0.25 && ((const double *)t->data)[1] == -4.0);
    t = konst(g, "i32f", CATTR_INT64, 2, (int64_t[]){2, 2});
    CHECK(t && ((const int64_t *)t->data)[0] == -7 && ((const int64_t *)t->data)[3] == 2147483647);
    t = konst(g, "i8", CATTR_INT64, 1, (int64_t[]){3});
    CHECK(t && ((const int64_t *)t->data)[0] == -1 && ((const int64_t *)t->data)[2] == -128);
    t = konst(g, "u8", CATTR_INT64, 1, (int64_t[]){2});
    CHECK(t && ((const int64_t *)t->data)[0] == 255);
    t = konst(g, "fdata", CATTR_FLOAT32, 1, (int64_t[]){3});
    CHECK(t && ((const float *)t->data)[2] == 3.5f);
    t = konst(g, "scalar", CATTR_FLOAT32, 0, NULL);
    CHECK(t && ((const float *)t->data)[0] == 2.0f);
    cx_onnx_info_free(info);
    cg_free(g);
}

static void test_legacy(void) {
    cx_onnx_info *info = NULL;
    cg_graph *g = load_ok(FIX "ok_legacy.onnx", 9, &info);
    if (g) {
        const cg_node *n = node(g, "/softmax/Softmax", CG_SOFTMAX);
        CHECK(n->a.axis == 1 && n->a.index == 1);
        n = node(g, "/unsqueeze/Unsqueeze", CG_UNSQUEEZE);
        CHECK_INTS(n->a.ints, n->a.n_ints, 0);
        n = node(g, "/squeeze/Squeeze", CG_SQUEEZE);
        CHECK_INTS(n->a.ints, n->a.n_ints, 0);
        n = node(g, "/slice/Slice", CG_SLICE);
        CHECK_INTS(n->a.ints, n->a.n_ints, 0, 3, 1, 1);
        n = node(g, "/clip1/Clip", CG_CLIP);
        CHECK(n->a.alpha == -1 && n->a.beta == 1);
        n = node(g, "/clip2/Clip", CG_CLIP);
        CHECK(n->a.alpha == -INFINITY && n->a.beta == INFINITY);
        node(g, "/drop/Dropout", CG_IDENTITY);
    }
    cx_onnx_info_free(info);
    cg_free(g);
    info = NULL;
    g = load_ok(FIX "ok_reduce.onnx", 17, &info);
    if (g) {
        const cg_node *n = node(g, "/gap/ReduceMean", CG_REDUCE_MEAN);
        CHECK(n->n_in == 1 && n->a.index == 1);
        CHECK_INTS(n->a.ints, n->a.n_ints, 2, -1);
        n = node(g, "/sum/ReduceSum", CG_REDUCE_SUM);
        CHECK(n->n_in == 1 && n->a.index == 0);
        CHECK_INTS(n->a.ints, n->a.n_ints, 1);
        n = node(g, "/total/ReduceSum", CG_REDUCE_SUM);
        CHECK(n->n_in == 1 && n->a.index == 1 && n->a.n_ints == 0);
    }
    cx_onnx_info_free(info);
    cg_free(g);
    info = NULL;
    g = load_ok(FIX "ok_reduce18.onnx", 18, &info);
    if (g) {
        const cg_node *n = node(g, "/mean/ReduceMean", CG_REDUCE_MEAN);
        CHECK(n->n_in == 1 && n->a.index == 0);
        CHECK_INTS(n->a.ints, n->a.n_ints, 1);
    }
    cx_onnx_info_free(info);
    cg_free(g);
    info = NULL;
    g = load_ok(FIX "ok_elementwise.onnx", 17, &info);
    if (g) {
        static const struct {
            const char *name;
            cg_op op;
        } want[] = {{"/sqrt/Sqrt", CG_SQRT},         {"/exp/Exp", CG_EXP},           {"/log/Log", CG_LOG},
                    {"/erf/Erf", CG_ERF},            {"/rec/Reciprocal", CG_RECIPROCAL}, {"/hswish/HardSwish", CG_HARDSWISH},
                    {"/softplus/Softplus", CG_SOFTPLUS}, {"/pow/Pow", CG_POW},       {"/max/Max", CG_MAX},
                    {"/min/Min", CG_MIN}};
        for (size_t k = 0; k < sizeof want / sizeof *want; k++) node(g, want[k].name, want[k].op);
        const cg_node *n = node(g, "/hsig/HardSigmoid", CG_HARDSIGMOID);
        CHECK(near(n->a.alpha, 0.25) && near(n->a.beta, 0.4));
        CHECK(near(node(g, "/elu/Elu", CG_ELU)->a.alpha, 0.5));
        n = node(g, "/selu/Selu", CG_SELU);
        CHECK(near(n->a.alpha, 1.6732632) && near(n->a.beta, 1.0507010));
        CHECK(node(g, "/pow/Pow", CG_POW)->n_in == 2 && node(g, "/max/Max", CG_MAX)->n_in == 2);
    }
    cx_onnx_info_free(info);
    cg_free(g);
    info = NULL;
    g = load_ok(FIX "ok_pad_concat.onnx", 14, &info);
    if (g) {
        const cg_node *n = node(g, "/pad/Pad", CG_PAD);
        CHECK(n->n_in == 1 && n->a.index == 0 && near(n->a.alpha, -2));
        CHECK_INTS(n->a.ints, n->a.n_ints, 0, 1, 0, 1);
        CHECK(node(g, "/pad2/Pad", CG_PAD)->a.index == 1);
        CHECK(node(g, "/cat/Concat", CG_CONCAT)->n_in <= CG_MAX_IN - 1); /* ten inputs as a chain of Concats */
        node(g, "/logsm/LogSoftmax", CG_LOGSOFTMAX);
    }
    cx_onnx_info_free(info);
    cg_free(g);
    { /* and the chain computes the ten-fold concatenation of the padded row */
        cattr_model *m = NULL;
        cattr_tensor *x = NULL, *y = NULL;
        int64_t sh[2] = {1, 2};
        CHECK(cattr_model_load_onnx(FIX "ok_pad_concat.onnx", &m) == CATTR_OK && cattr_tensor_new(CATTR_FLOAT32, 2, sh, &x) == CATTR_OK);
        if (m && x) {
            float *xv = cattr_tensor_data(x);
            xv[0] = 3, xv[1] = 5;
            const cattr_tensor *in[1] = {x};
            CHECK(cattr_model_forward(m, CATTR_FLOAT32, in, 1, &y) == CATTR_OK && cattr_tensor_numel(y) == 50);
            static const float want[5] = {3, -2, 3, 5, -2}; /* then LogSoftmax over the 50 values */
            double z = 0;
            for (int k = 0; k < 50; k++) z += exp(want[k % 5]);
            for (int k = 0; y && k < 50; k++)
                CHECK(fabs(((float *)cattr_tensor_data(y))[k] - (want[k % 5] - log(z))) < 1e-5);
        }
        cattr_tensor_free(x);
        cattr_tensor_free(y);
        cattr_model_free(m);
    }
    /* comparisons and logic as masks, PRelu, ReduceMax / ReduceMin / ReduceL2, Tile; Split (equal parts from the
     * shape, and sizes), LogSoftmax and Softmax over axis 0: the outputs numpy computed */
    forward_fixture("ok_logic", 16);
    forward_fixture("ok_split", 16);
    forward_fixture("ok_einsum", 30 + 18 + 32 + 6 + 24 + 18 + 12);
    forward_fixture("ok_if", 4);            /* batch 1: then_branch and its nested If */
    forward_fixture_data("ok_if", "ok_if_b2", 8); /* batch 2: else_branch */
    test_if_on_data();
    test_int_inputs();
    forward_fixture("ok_size_clip", 8); /* Size, and Clip with bounds computed by nodes */
    test_passes();
    info = NULL;
    g = load_ok(FIX "ok_gelu20.onnx", 20, &info);
    if (g) {
        CHECK(node(g, "/gelu/Gelu", CG_GELU)->a.index == 0);
        CHECK(node(g, "/gelu2/Gelu", CG_GELU)->a.index == 1);
    }
    cx_onnx_info_free(info);
    cg_free(g);
    info = NULL;
    g = load_ok(FIX "ok_clip11.onnx", 11, &info);
    if (g) {
        const cg_node *n = node(g, "/clip/Clip", CG_CLIP);
        CHECK(n->n_in == 1 && n->a.alpha == 0 && n->a.beta == 6);
        n = node(g, "/softmax/Softmax", CG_SOFTMAX);
        CHECK(n->a.axis == -1 && n->a.index == 1);
    }
    cx_onnx_info_free(info);
    cg_free(g);
}

/* ---- failures ------------------------------------------------------------------------------------------------ */

static unsigned char *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n > 0 ? (size_t)n : 1);
    *size = b ? fread(b, 1, (size_t)n, f) : 0;
    fclose(f);
    return b;
}

static void test_errors(void) {
    expect_err(FIX "does_not_exist.onnx", CATTR_ERR_IO, FIX "does_not_exist.onnx", "No such file");
    expect_err(FIX, CATTR_ERR_IO, "not a regular file", NULL);

    size_t size = 0;
    unsigned char *buf = read_all(FIX "ok_cnn.onnx", &size);
    CHECK(buf && size > 100);
    if (buf) {
        char tmp[64];
        snprintf(tmp, sizeof tmp, "/tmp/cattr_test_onnx_%ld.onnx", (long)getpid());
        FILE *f = fopen(tmp, "wb");
        CHECK(f && fwrite(buf, 1, size / 2, f) == size / 2);
        if (f) fclose(f);
        expect_err(tmp, CATTR_ERR_FORMAT, "not a valid ONNX model (protobuf parse failed)", tmp);
        remove(tmp);
        /* the whole buffer loads through the buffer API, and opset_out is written */
        cg_graph *g = NULL;
        int opset = 0;
        CHECK(cx_onnx_load_buffer(buf, size, "mem", &g, &opset) == CATTR_OK && g && opset == 17 && g->n_nodes == 9);
        cg_free(g);
        free(buf);
    }
    unsigned char junk[512];
    unsigned x = 12345;
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)((x = x * 1103515245u + 12345u) >> 16);
    junk[0] = 0xff; /* a field tag with wire type 7, which does not exist */
    cg_graph *g = (cg_graph *)1;
    CHECK(cx_onnx_load_buffer(junk, sizeof junk, "junk", &g, NULL) == CATTR_ERR_FORMAT && !g);
    CHECK(strstr(cattr_last_error(), "'junk'") != NULL);
    CHECK(cx_onnx_load_buffer("", 0, "nothing", &g, NULL) == CATTR_ERR_FORMAT && !g);
    CHECK(cx_onnx_load_file(NULL, &g, NULL) == CATTR_ERR_INVALID_ARGUMENT);
    CHECK(cx_onnx_load_file(FIX "ok_mlp.onnx", NULL, NULL) == CATTR_ERR_INVALID_ARGUMENT);

    expect_err(FIX "err_unknown_op.onnx", CATTR_ERR_UNSUPPORTED, "node '/foo/Hardmax' (op Hardmax): unsupported op",
               "err_unknown_op.onnx");
    expect_err(FIX "err_bad_attr.onnx", CATTR_ERR_UNSUPPORTED,
               "node '/conv1/Conv' (op Conv): unsupported attribute 'xyz'", NULL);
    { /* auto_pad SAME_UPPER loads (its name from when it was refused): the pads follow from each call's shapes */
        cx_onnx_info *ai = NULL;
        cg_graph *ag = load_ok(FIX "err_auto_pad.onnx", 17, &ai);
        if (ag) CHECK(node(ag, "/conv1/Conv", CG_CONV)->a.auto_pad == 1);
        cg_free(ag);
        cx_onnx_info_free(ai);
    }
    expect_err(FIX "err_reshape_dynamic.onnx", CATTR_ERR_UNSUPPORTED, "node '/view/Reshape' (op Reshape)",
               "input 'shape' (shape) is not a constant"); /* computed from a float input's values */
    expect_err(FIX "err_dangling.onnx", CATTR_ERR_FORMAT, "node '/add/Add' (op Add): input 'ghost'", "not defined");
    expect_err(FIX "err_unsorted.onnx", CATTR_ERR_FORMAT, "node '/add/Add'", "topological order");
    expect_err(FIX "err_maxpool_indices.onnx", CATTR_ERR_UNSUPPORTED, "input 'm_idx' is output 1 of node "
               "'/pool/MaxPool'", "/use/Identity");
    expect_err(FIX "err_domain.onnx", CATTR_ERR_UNSUPPORTED, "domain 'com.microsoft'", "/ms/Relu");
    expect_err(FIX "err_opset6.onnx", CATTR_ERR_UNSUPPORTED, "opset 6", NULL);
    expect_err(FIX "err_external.onnx", CATTR_ERR_UNSUPPORTED, "tensor 'w': external data", NULL);
    expect_err(FIX "err_raw_size.onnx", CATTR_ERR_FORMAT, "tensor 'w': raw_data holds 60 bytes", NULL);
    expect_err(FIX "err_empty.onnx", CATTR_ERR_FORMAT, "empty", NULL);
    expect_err(FIX "err_dropout_mask.onnx", CATTR_ERR_UNSUPPORTED, "graph output 'mask' is output 1 of node "
               "'/drop/Dropout'", NULL);
    expect_err(FIX "err_bn_training.onnx", CATTR_ERR_UNSUPPORTED, "training_mode", "/bn/BatchNormalization");
    expect_err(FIX "err_einsum_diag.onnx", CATTR_ERR_UNSUPPORTED, "node '/foo/Einsum' (op Einsum)", "repeated");
    expect_err(FIX "err_lstm_layout.onnx", CATTR_ERR_UNSUPPORTED, "node '/rnn/LSTM' (op LSTM): layout=1", "time first");
    expect_err(FIX "err_gru_activations.onnx", CATTR_ERR_UNSUPPORTED, "node '/rnn/GRU' (op GRU)",
               "only the default activations");
    expect_err(FIX "err_lstm_seq_lens.onnx", CATTR_ERR_UNSUPPORTED, "node '/rnn/LSTM' (op LSTM)", "sequence_lens");
}

/* Runs fixture NAME.onnx on NAME.x.npy in float32 and float64 and compares with NAME.y.npy (count elements). */
static void forward_fixture(const char *name, int64_t count) { forward_fixture_data(name, name, count); }

/* Ifs whose condition reads the data, decided when the call runs. err_if_on_data (its name from when it was refused):
 * If(sum(x) > 0): relu(x), else -x, exported with a fixed batch of 1: it runs in passes of one row, so each example
 * takes its own branch. ok_if_zero_var (a dynamic batch, the condition over the whole input as an eager run computes
 * it): a zero variance takes x - mean(x), whose gradient stays exact and finite though the branch not taken divides
 * by sqrt(0); a non-zero one the normalised branch. On cpu and cpu-check. */
static void test_if_on_data(void) {
    static const char *const devs[2] = {"cpu", "cpu-check"};
    for (int dv = 0; dv < 2; dv++) {
        cattr_model *m = NULL;
        cattr_tensor *x = NULL, *y = NULL, *a[CATTR_MAX_OUTPUTS] = {0};
        CHECK(cattr_model_load_onnx(FIX "err_if_on_data.onnx", &m) == CATTR_OK);
        CHECK(m && cattr_model_set_device(m, devs[dv]) == CATTR_OK);
        const double xv[8] = {1.0, -2.0, 0.5, 3.0, -1.0, 0.25, -2.0, 0.5}; /* sums 2.5 and -2.25 */
        CHECK(cattr_tensor_from_data(CATTR_FLOAT64, 2, (const int64_t[]){2, 4}, xv, &x) == CATTR_OK);
        const cattr_tensor *in[1] = {x};
        CHECK(m && x && cattr_model_forward(m, CATTR_FLOAT64, in, 1, &y) == CATTR_OK);
        if (!y) printf("If on data (%s): %s\n", devs[dv], cattr_last_error());
        for (int k = 0; y && k < 8; k++)
            CHECK(((double *)cattr_tensor_data(y))[k] == (k < 4 ? (xv[k] > 0 ? xv[k] : 0) : -xv[k]));
        cattr_tensor_free(y);
        y = NULL;
        cattr_model_free(m);
        cattr_tensor_free(x);
        x = NULL;

        m = NULL;
        CHECK(cattr_model_load_onnx(FIX "ok_if_zero_var.onnx", &m) == CATTR_OK);
        CHECK(m && cattr_model_set_device(m, devs[dv]) == CATTR_OK);
        cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_SALIENCY);
        p.abs = 0;
        p.dtype = CATTR_FLOAT64;
        cattr_explainer *e = NULL;
        CHECK(m && cattr_explainer_new(m, &p, &e) == CATTR_OK);
        int64_t tidx = 1;
        cattr_target t = {CATTR_TARGET_INDEX, 1, 0, &tidx};
        for (int flat = 0; flat < 2 && e; flat++) {
            double v[8], mean[2], var = 0;
            for (int k = 0; k < 8; k++) v[k] = flat ? 1.0 : xv[k];
            for (int b = 0; b < 2; b++) mean[b] = (v[4 * b] + v[4 * b + 1] + v[4 * b + 2] + v[4 * b + 3]) / 4;
            for (int k = 0; k < 8; k++) var += (v[k] - mean[k / 4]) * (v[k] - mean[k / 4]) / 8;
            CHECK(cattr_tensor_from_data(CATTR_FLOAT64, 2, (const int64_t[]){2, 4}, v, &x) == CATTR_OK);
            in[0] = x;
            CHECK(cattr_model_forward(m, CATTR_FLOAT64, in, 1, &y) == CATTR_OK);
            CHECK(cattr_explainer_attribute(e, in, 1, NULL, &t, NULL, 0, a, NULL) == CATTR_OK);
            if (!y || !a[0]) printf("zero-variance If (%s): %s\n", devs[dv], cattr_last_error());
            for (int k = 0; y && k < 8; k++) {
                double d = v[k] - mean[k / 4];
                CHECK(fabs(((double *)cattr_tensor_data(y))[k] - (flat ? d : d / sqrt(var))) < 1e-12);
            }
            if (flat) /* d(x[b, 1] - mean(x[b])) / dx[b, i]: exact, no NaN from the branch not taken */
                for (int k = 0; a[0] && k < 8; k++)
                    CHECK(((double *)cattr_tensor_data(a[0]))[k] == (k % 4 == 1 ? 0.75 : -0.25));
            else
                for (int k = 0; a[0] && k < 8; k++) CHECK(isfinite(((double *)cattr_tensor_data(a[0]))[k]));
            cattr_tensor_free(y);
            cattr_tensor_free(a[0]);
            cattr_tensor_free(x);
            y = a[0] = x = NULL;
        }
        cattr_explainer_free(e);
        cattr_model_free(m);
    }
}

/* Integer inputs known per call (ok_int_inputs: a rate choosing an If's branch, a shape for a Reshape): the forward
 * pass and Saliency, each with two rates, the explainer keeping a model per value. */
static void test_int_inputs(void) {
    cattr_model *m = NULL;
    CHECK(cattr_model_load_onnx(FIX "ok_int_inputs.onnx", &m) == CATTR_OK);
    if (!m) {
        printf("ok_int_inputs: %s\n", cattr_last_error());
        return;
    }
    const float xv[8] = {0.5f, -1.0f, 2.0f, 0.25f, -0.5f, 1.5f, -2.0f, 0.75f};
    const int64_t xs[2] = {2, 4}, two = 2;
    cattr_tensor *x = NULL, *rate = NULL, *shape = NULL;
    CHECK(cattr_tensor_from_data(CATTR_FLOAT32, 2, xs, xv, &x) == CATTR_OK);
    CHECK(cattr_tensor_new(CATTR_INT64, 0, NULL, &rate) == CATTR_OK);
    CHECK(cattr_tensor_from_data(CATTR_INT64, 1, &two, (const int64_t[]){2, 4}, &shape) == CATTR_OK);
    cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_SALIENCY);
    p.abs = 0;
    cattr_explainer *e = NULL;
    CHECK(cattr_explainer_new(m, &p, &e) == CATTR_OK);
    int64_t tidx = 1;
    cattr_target t = {CATTR_TARGET_INDEX, 1, 0, &tidx};
    for (int rep = 0; rep < 3 && x && rate && shape && e; rep++) {
        int64_t r = rep == 1 ? 8000 : 16000; /* 16000, 8000, 16000 again (the first model, kept) */
        *(int64_t *)cattr_tensor_data(rate) = r;
        const cattr_tensor *in[3] = {x, rate, shape}, *add[2] = {rate, shape};
        cattr_tensor *y = NULL, *a[CATTR_MAX_OUTPUTS] = {0};
        CHECK(cattr_model_forward(m, CATTR_FLOAT64, in, 3, &y) == CATTR_OK);
        CHECK(cattr_explainer_attribute(e, in, 1, NULL, &t, add, 2, a, NULL) == CATTR_OK);
        if (!y || !a[0]) printf("ok_int_inputs rate %lld: %s\n", (long long)r, cattr_last_error());
        for (int k = 0; y && a[0] && k < 8; k++) {
            double v = xv[k], want = r == 16000 ? 2 * v : tanh(v);
            double g = k % 4 != 1 ? 0 : r == 16000 ? 2 : 1 - tanh(v) * tanh(v);
            CHECK(fabs(((double *)cattr_tensor_data(y))[k] - want) < 1e-6);
            CHECK(fabs(((float *)cattr_tensor_data(a[0]))[k] - g) < 1e-6);
        }
        cattr_tensor_free(y);
        cattr_tensor_free(a[0]);
    }
    /* a value that does not fit its declared integer input is refused by name */
    cattr_tensor *fr = NULL;
    const int64_t three = 3;
    CHECK(cattr_tensor_new(CATTR_INT64, 1, &three, &fr) == CATTR_OK);
    const cattr_tensor *bad[3] = {x, rate, fr};
    cattr_tensor *y = NULL;
    CHECK(fr && cattr_model_forward(m, CATTR_FLOAT32, bad, 3, &y) == CATTR_ERR_SHAPE && !y);
    CHECK(strstr(cattr_last_error(), "input 2 ('shape') has shape [3]") != NULL);
    cattr_tensor_free(fr);
    cattr_explainer_free(e);
    cattr_tensor_free(x);
    cattr_tensor_free(rate);
    cattr_tensor_free(shape);
    cattr_model_free(m);
}

/* A model exported with a fixed batch of 1 that cannot be re-batched (ok_fixed_batch_passes: x^T w contracts the
 * batch) runs in passes of one row (MapRows): cattr info says why; on cpu and cpu-check, the forward pass of a batch of
 * 3 and Saliency (the MapRows gradient) against the closed forms y[b, j] = sum_i tanh(x[b, i] w[j]) and
 * dy[b, 1] / dx[b, i] = w[1] (1 - tanh^2(x[b, i] w[1])). */
static void test_passes(void) {
    static const char *const devs[2] = {"cpu", "cpu-check"};
    const double w[3] = {0.5, -1.0, 2.0};
    const double xv[12] = {0.5, -1.0, 2.0, 0.25, -0.5, 1.5, -2.0, 0.75, 0.1, 0.2, -0.3, 1.2};
    for (int d = 0; d < 2; d++) {
        cattr_model *m = NULL;
        CHECK(cattr_model_load_onnx(FIX "ok_fixed_batch_passes.onnx", &m) == CATTR_OK);
        if (!m) {
            printf("ok_fixed_batch_passes: %s\n", cattr_last_error());
            return;
        }
        char desc[4096];
        cattr_model_describe(m, desc, sizeof desc);
        CHECK(strstr(desc, "not re-batched (node '/mm/MatMul' (op MatMul) contracts the batch)") &&
              strstr(desc, "runs in passes of the exported batch"));
        CHECK(cattr_model_set_device(m, devs[d]) == CATTR_OK);
        cattr_tensor *x = NULL, *y = NULL, *a[CATTR_MAX_OUTPUTS] = {0};
        CHECK(cattr_tensor_from_data(CATTR_FLOAT64, 2, (const int64_t[]){3, 4}, xv, &x) == CATTR_OK);
        const cattr_tensor *in[1] = {x};
        CHECK(cattr_model_forward(m, CATTR_FLOAT64, in, 1, &y) == CATTR_OK);
        if (!y) printf("passes forward on %s: %s\n", devs[d], cattr_last_error());
        CHECK(y && cattr_tensor_numel(y) == 9);
        for (int b = 0; y && b < 3; b++)
            for (int j = 0; j < 3; j++) {
                double want = 0;
                for (int i = 0; i < 4; i++) want += tanh(xv[4 * b + i] * w[j]);
                CHECK(fabs(((double *)cattr_tensor_data(y))[3 * b + j] - want) < 1e-12);
            }
        cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_SALIENCY);
        p.abs = 0;
        p.dtype = CATTR_FLOAT64;
        cattr_explainer *e = NULL;
        CHECK(cattr_explainer_new(m, &p, &e) == CATTR_OK);
        int64_t tidx = 1;
        cattr_target t = {CATTR_TARGET_INDEX, 1, 0, &tidx};
        CHECK(e && cattr_explainer_attribute(e, in, 1, NULL, &t, NULL, 0, a, NULL) == CATTR_OK);
        if (!a[0]) printf("passes saliency on %s: %s\n", devs[d], cattr_last_error());
        for (int k = 0; a[0] && k < 12; k++) {
            double th = tanh(xv[k] * w[1]);
            CHECK(fabs(((double *)cattr_tensor_data(a[0]))[k] - w[1] * (1 - th * th)) < 1e-12);
        }
        /* a batch that is not a multiple of the exported one cannot be: here 1 divides every batch; DeepLift's own
         * rules cannot see inside the passes */
        cattr_attr_params pd = cattr_attr_default_params(CATTR_METHOD_DEEPLIFT);
        cattr_explainer *ed = NULL;
        cattr_tensor *ad[CATTR_MAX_OUTPUTS] = {0};
        cattr_status st = cattr_explainer_new(m, &pd, &ed);
        if (st == CATTR_OK) st = cattr_explainer_attribute(ed, in, 1, NULL, &t, NULL, 0, ad, NULL);
        CHECK(st == CATTR_ERR_UNSUPPORTED && strstr(cattr_last_error(), "runs in passes"));
        cattr_tensor_free(ad[0]);
        cattr_explainer_free(ed);
        cattr_explainer_free(e);
        cattr_tensor_free(a[0]);
        cattr_tensor_free(y);
        cattr_tensor_free(x);
        cattr_model_free(m);
    }
}

/* Model tests/data/onnx/<name>.onnx on input <data>.x.npy gives <data>.y.npy (count values), float32 and float64. */
static void forward_fixture_data(const char *name, const char *data, int64_t count) {
    char path[512], xp[512], yp[512];
    snprintf(path, sizeof path, FIX "%s.onnx", name);
    snprintf(xp, sizeof xp, FIX "%s.x.npy", data);
    snprintf(yp, sizeof yp, FIX "%s.y.npy", data);
    cattr_model *m = NULL;
    cattr_tensor *x = NULL, *want = NULL, *y = NULL;
    CHECK(cattr_model_load_onnx(path, &m) == CATTR_OK);
    if (!m) printf("%s: %s\n", name, cattr_last_error());
    CHECK(cattr_tensor_load_npy(xp, &x) == CATTR_OK && cattr_tensor_load_npy(yp, &want) == CATTR_OK);
    for (int d = 0; m && x && want && d < 2; d++) {
        const cattr_tensor *in[1] = {x};
        CHECK(cattr_model_forward(m, d ? CATTR_FLOAT64 : CATTR_FLOAT32, in, 1, &y) == CATTR_OK);
        if (!y) printf("%s: %s\n", name, cattr_last_error());
        CHECK(y && cattr_tensor_numel(y) == count);
        for (int64_t k = 0; y && k < count && k < cattr_tensor_numel(y); k++) {
            double got = d ? ((double *)cattr_tensor_data(y))[k] : ((float *)cattr_tensor_data(y))[k];
            double w = ((float *)cattr_tensor_data(want))[k];
            CHECK(fabs(got - w) < 1e-6 * (1 + fabs(w)));
        }
        cattr_tensor_free(y);
        y = NULL;
    }
    cattr_tensor_free(x);
    cattr_tensor_free(want);
    cattr_model_free(m);
}

/* ---- golden models ------------------------------------------------------------------------------------------- */

static void test_golden(void) {
    const char *root = getenv("CATTR_GOLDEN");
    if (!root || !*root) root = "../shared/golden";
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/captum", root);
    DIR *d = opendir(dir);
    if (!d) {
        printf("SKIP golden: %s not found\n", dir);
        return;
    }
    int models = 0, nodes = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[2048];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s/model.onnx", dir, e->d_name);
        if (stat(path, &sb) != 0) continue;
        cg_graph *g = NULL;
        cx_onnx_info *info = NULL;
        cattr_status st = cx_onnx_load_file_info(path, &g, &info);
        g_checks++;
        if (st != CATTR_OK) {
            printf("FAIL golden %s: %s\n", path, cattr_last_error());
            g_fail++;
            continue;
        }
        CHECK(g->n_nodes > 0 && g->n_inputs > 0 && g->n_outputs > 0 && well_formed(g));
        for (int i = 0; i < info->n_inputs; i++) CHECK(info->inputs[i].ndim >= 1);
        models++;
        nodes += g->n_nodes;
        cx_onnx_info_free(info);
        cg_free(g);
    }
    closedir(d);
    CHECK(models > 0);
    printf("golden: %d models imported, %d nodes mapped\n", models, nodes);
}

/* Inputs found by fuzz_onnx that once crashed a kernel: the model loads, and its forward pass is refused. */
static void test_fuzz_findings(void) {
    cattr_model *m = NULL;
    CHECK(cattr_model_load_onnx(FIX "fuzz_transpose_perm.onnx", &m) == CATTR_OK);
    if (!m) return;
    /* its Transpose repeats an axis: the kernel read past the input */
    int64_t sa[3] = {10, 11, 4}, sb[2] = {4, 3};
    cattr_tensor *a = NULL, *b = NULL, *out = NULL;
    CHECK(cattr_tensor_new(CATTR_FLOAT32, 3, sa, &a) == CATTR_OK && cattr_tensor_new(CATTR_FLOAT32, 2, sb, &b) == CATTR_OK);
    const cattr_tensor *in[2] = {a, b};
    cattr_status st = cattr_model_forward(m, CATTR_FLOAT32, in, 2, &out);
    CHECK(st == CATTR_ERR_SHAPE && strstr(cattr_last_error(), "not a permutation") && !out);
    cattr_tensor_free(a);
    cattr_tensor_free(b);
    cattr_tensor_free(out);
    cattr_model_free(m);

    /* a shape computed through 30 levels of s = (s * s) / s (3^30 paths): loading and planning it once
     * followed every path (a timeout); each value is visited once now */
    m = NULL;
    clock_t t0 = clock();
    CHECK(cattr_model_load_onnx(FIX "fuzz_fanout.onnx", &m) == CATTR_OK);
    if (!m) return;
    int64_t sx[2] = {2, 3};
    cattr_tensor *x = NULL;
    out = NULL;
    CHECK(cattr_tensor_new(CATTR_FLOAT32, 2, sx, &x) == CATTR_OK);
    for (int i = 0; x && i < 6; i++) cx_tensor_set(x, i, i);
    const cattr_tensor *xin[1] = {x};
    cattr_status fst = cattr_model_forward(m, CATTR_FLOAT32, xin, 1, &out);
    if (fst != CATTR_OK) printf("fuzz_fanout: %s\n", cattr_last_error());
    CHECK(fst == CATTR_OK);
    CHECK(out && out->ndim == 2 && out->shape[0] == 2 && out->shape[1] == 3 && cx_tensor_get(out, 5) == 5);
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    CHECK(secs < 2.0);
    printf("fuzz_fanout: loaded and run in %.3f s\n", secs);
    cattr_tensor_free(x);
    cattr_tensor_free(out);
    cattr_model_free(m);
}

int main(void) {
    test_fuzz_findings();
    test_mlp();
    test_cnn();
    test_conv1d();
    test_ops();
    test_legacy();
    test_errors();
    test_golden();
    printf("test_onnx_load: %d checks, %d failed\n", g_checks, g_fail);
    return g_fail ? 1 : 0;
}
