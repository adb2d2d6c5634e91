/* influence.c - `cattr influence`: TracIn (Pruthi et al., NeurIPS 2020; Captum's TracInCP) on an ONNX model from the
 * command line: the influence of each training example on each test example is the sum over the checkpoints of the
 * learning rate times the dot product of their loss gradients with respect to the weights of the layers asked. Each
 * pass is one call of the library (cattr_explainer_example_grads: the test examples' gradients once per checkpoint,
 * then per training batch the dot products with them, or the squared norms for self influence, in the graph); this
 * file reads the data and the checkpoints, adds the checkpoints' terms and writes the scores. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "core/core.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_CKPT 64
#define MAX_W 64

static void influence_help(FILE *f) {
    fprintf(f,
        "usage: cattr influence MODEL.onnx --train X.npy --train-labels Y.npy --test X.npy --test-labels Y.npy\n"
        "                       --output SCORES.npy [options]\n"
        "       cattr influence MODEL.onnx --train X.npy --train-labels Y.npy --self-influence --output S.npy\n"
        "\n"
        "TracIn (Captum's TracInCP): the influence of each training example on each test example, the sum over the\n"
        "checkpoints of the learning rate times the dot product of the two examples' loss gradients with respect to\n"
        "the weights of --layers. A large positive score (a proponent) pushed the model towards the test example's\n"
        "label; a negative one (an opponent) away from it. Self influence (an example on itself) finds unusual or\n"
        "mislabelled training examples.\n"
        "\n"
        "  --train FILE         the training examples (.npy, the batch first)\n"
        "  --train-labels FILE  their labels (.npy): class indices, or for --loss mse the output's shape\n"
        "  --test FILE, --test-labels FILE   the test examples and their labels\n"
        "  --checkpoint F[@LR]  the weights at a checkpoint: a .safetensors of tensors named as the model's weights\n"
        "                       (cattr info --weights lists them; those it lacks keep the model's) or an .onnx of the\n"
        "                       same graph; @LR its learning rate (default 1). Repeat for each; none: the model's own\n"
        "  --layers L1,L2       the modules whose weights the gradients are of: Linear layers (Gemm, MatMul and their\n"
        "                       biases; default every module with weights)\n"
        "  --loss L             cross-entropy (default: of logits, labels are class indices), nll (-log of the output\n"
        "                       at the label), mse (the squared error summed over each example's outputs)\n"
        "  --self-influence     each training example's influence on itself (no --test): [train]\n"
        "  --k K                print (and with --json write) the K most influential training examples per test example\n"
        "  --opponents          with --k: the K most negative instead\n"
        "  --batch N            training examples per pass (default 64)\n"
        "  --json FILE          the scores' summary: per test example the top K (indices and scores)\n"
        "  --device D, --dtype T  where and in what the passes run (cpu, float32)\n"
        "  --output FILE        the scores (.npy): [test, train], or [train] with --self-influence\n"
        "  --quiet              print nothing but errors\n");
}

typedef struct {
    const char *model, *train, *train_labels, *test, *test_labels, *output, *json, *layers, *device;
    const char *ckpt[MAX_CKPT];
    double lr[MAX_CKPT];
    int n_ckpt;
    cattr_loss loss;
    bool self, opponents, quiet;
    long long k, batch;
    cattr_dtype dtype;
} infl_args;

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a > b && !strcmp(s + a - b, suf);
}

static int parse(int argc, char **argv, infl_args *a) {
    memset(a, 0, sizeof *a);
    a->batch = 64;
    a->dtype = CATTR_FLOAT32;
    a->loss = CATTR_LOSS_CROSS_ENTROPY;
    static const char *const valued[] = {"--train", "--train-labels", "--test", "--test-labels", "--output", "--json",
                                         "--layers", "--device", "--dtype", "--checkpoint", "--loss", "--k", "--batch"};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool val = false;
        for (size_t q = 0; q < sizeof valued / sizeof *valued; q++) val |= !strcmp(o, valued[q]);
        if (val && !v) return cli_usage_error("%s needs a value (see cattr influence --help)", o);
        if (val) i++;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            influence_help(stdout);
            return -1;
        } else if (!strcmp(o, "--train")) {
            a->train = v;
        } else if (!strcmp(o, "--train-labels")) {
            a->train_labels = v;
        } else if (!strcmp(o, "--test")) {
            a->test = v;
        } else if (!strcmp(o, "--test-labels")) {
            a->test_labels = v;
        } else if (!strcmp(o, "--output")) {
            a->output = v;
        } else if (!strcmp(o, "--json")) {
            a->json = v;
        } else if (!strcmp(o, "--layers")) {
            a->layers = v;
        } else if (!strcmp(o, "--checkpoint")) {
            if (a->n_ckpt >= MAX_CKPT) return cli_usage_error("at most %d --checkpoint", MAX_CKPT);
            const char *at = strrchr(v, '@');
            double lr = 1;
            if (at && (!cli_parse_double(at + 1, &lr) || !isfinite(lr)))
                return cli_usage_error("--checkpoint %s: the learning rate after '@' must be a number", v);
            a->lr[a->n_ckpt] = lr;
            a->ckpt[a->n_ckpt++] = v;
        } else if (!strcmp(o, "--loss")) {
            if (!strcmp(v, "cross-entropy")) a->loss = CATTR_LOSS_CROSS_ENTROPY;
            else if (!strcmp(v, "nll")) a->loss = CATTR_LOSS_NLL_OUTPUT;
            else if (!strcmp(v, "mse")) a->loss = CATTR_LOSS_MSE;
            else return cli_usage_error("--loss must be cross-entropy, nll or mse, not '%s'", v);
        } else if (!strcmp(o, "--k")) {
            if (!cli_int_arg(o, v, 1, 1000000, &a->k)) return CLI_USAGE;
        } else if (!strcmp(o, "--batch")) {
            if (!cli_int_arg(o, v, 1, 1 << 24, &a->batch)) return CLI_USAGE;
        } else if (!strcmp(o, "--device")) {
            if (!cli_device_arg(v)) return CLI_USAGE;
            a->device = v;
        } else if (!strcmp(o, "--dtype")) {
            if (!cli_dtype_arg(v, &a->dtype)) return CLI_USAGE;
        } else if (!strcmp(o, "--self-influence")) {
            a->self = true;
        } else if (!strcmp(o, "--opponents")) {
            a->opponents = true;
        } else if (!strcmp(o, "--quiet") || !strcmp(o, "-q")) {
            a->quiet = true;
        } else if (o[0] == '-' && o[1]) {
            return cli_usage_error("influence: unknown option '%s' (see cattr influence --help)", o);
        } else if (!a->model) {
            a->model = o;
        } else {
            return cli_usage_error("influence: unexpected argument '%s'", o);
        }
    }
    if (!a->model) return cli_usage_error("influence: no model given (see cattr influence --help)");
    if (!a->train || !a->train_labels) return cli_usage_error("influence: --train and --train-labels are required");
    if (a->self && (a->test || a->test_labels))
        return cli_usage_error("influence: --self-influence scores the training examples; leave out --test");
    if (!a->self && (!a->test || !a->test_labels))
        return cli_usage_error("influence: give --test and --test-labels (or --self-influence)");
    if (a->self && (a->k || a->opponents)) return cli_usage_error("influence: --k and --opponents go with --test");
    if (a->opponents && !a->k) return cli_usage_error("influence: --opponents goes with --k");
    if (a->json && !a->k) return cli_usage_error("influence: --json writes the top --k; give --k");
    if (!a->output) return cli_usage_error("influence: --output FILE.npy is required");
    if (!ends_with(a->output, ".npy")) return cli_usage_error("--output must end in .npy: '%s'", a->output);
    const char *ins[4] = {a->train, a->train_labels, a->test, a->test_labels};
    for (int i = 0; i < 4; i++)
        if (ins[i] && !cli_file_in(ins[i], i % 2 ? "--train-labels/--test-labels" : "--train/--test")) return CLI_USAGE;
    for (int c = 0; c < a->n_ckpt; c++) {
        char path[4096];
        const char *at = strrchr(a->ckpt[c], '@');
        snprintf(path, sizeof path, "%.*s", at ? (int)(at - a->ckpt[c]) : (int)strlen(a->ckpt[c]), a->ckpt[c]);
        if (!ends_with(path, ".safetensors") && !ends_with(path, ".onnx"))
            return cli_usage_error("--checkpoint must be a .safetensors or an .onnx file: '%s'", path);
        if (!cli_file_in(path, "--checkpoint")) return CLI_USAGE;
    }
    if (!cli_file_out(a->output, "--output") || (a->json && !cli_file_out(a->json, "--json"))) return CLI_USAGE;
    return 0;
}

/* Rows [r0, r1) of t (the batch first), a new tensor. */
static cattr_tensor *rows_of(const cattr_tensor *t, int64_t r0, int64_t r1) {
    int nd = cattr_tensor_ndim(t);
    int64_t sh[CATTR_MAX_DIMS];
    memcpy(sh, cattr_tensor_shape(t), (size_t)nd * sizeof *sh);
    int64_t per = sh[0] ? cattr_tensor_numel(t) / sh[0] : 0;
    sh[0] = r1 - r0;
    cattr_tensor *r = NULL;
    if (cattr_tensor_new(cattr_tensor_dtype(t), nd, sh, &r) != CATTR_OK) return NULL;
    size_t es = cattr_dtype_size(cattr_tensor_dtype(t));
    memcpy(cattr_tensor_data(r), (const char *)cattr_tensor_data_const(t) + (size_t)(r0 * per) * es,
           (size_t)((r1 - r0) * per) * es);
    return r;
}

/* The weights of checkpoint c for names[0..n) into w[] (borrowed from *set or *model, which the caller frees; NULL:
 * the model's own). */
static cattr_status load_checkpoint(const infl_args *a, int c, const cattr_model *m, const char *const *names, int n,
                                    cattr_tensor_set **set, cattr_model **model, const cattr_tensor **w) {
    char path[4096];
    const char *spec = a->ckpt[c], *at = strrchr(spec, '@');
    snprintf(path, sizeof path, "%.*s", at ? (int)(at - spec) : (int)strlen(spec), spec);
    cattr_status st;
    if (ends_with(path, ".onnx")) st = cattr_model_load_onnx(path, model);
    else st = cattr_tensor_set_load(path, set);
    if (st != CATTR_OK) return st;
    int found = 0;
    for (int k = 0; k < n; k++) {
        w[k] = *model ? cattr_model_weight(*model, names[k]) : cattr_tensor_set_get(*set, names[k]);
        if (w[k]) found++;
        else w[k] = cattr_model_weight(m, names[k]);
    }
    if (!found)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "%s holds none of the weights of --layers (e.g. '%s')", path,
                       names[0]);
    return CATTR_OK;
}

static int cmp_desc(const void *x, const void *y) {
    double a = ((const double *)x)[0], b = ((const double *)y)[0];
    return a < b ? 1 : a > b ? -1 : 0;
}

int cmd_influence(int argc, char **argv) {
    infl_args a;
    int rc = parse(argc, argv, &a);
    if (rc) return rc < 0 ? CLI_OK : rc;
    cattr_model *m = NULL;
    cattr_explainer *e = NULL;
    cattr_tensor *xtr = NULL, *ytr = NULL, *xte = NULL, *yte = NULL, *scores = NULL;
    cattr_tensor *tg[MAX_W] = {0};
    const char *names[MAX_W];
    int n_w = 0;
    cattr_status st = cattr_model_load_onnx(a.model, &m);
    if (st == CATTR_OK && a.device) st = cattr_model_set_device(m, a.device);
    if (st != CATTR_OK) return cli_error(st, "cannot load model");
    /* the weights of --layers */
    const char *layer_list = a.layers ? a.layers : "";
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", layer_list);
    for (char *tok = strtok(buf, ","); rc == CLI_OK && (tok || (!a.layers && n_w == 0)); tok = strtok(NULL, ",")) {
        const char *got[MAX_W];
        int cnt = cattr_model_module_weights(m, tok, got, MAX_W);
        if (cnt == 0) {
            rc = tok ? cli_usage_error("--layers: '%s' is no module with weights of the model (cattr info lists them)",
                                       tok)
                     : cli_usage_error("influence: the model has no weights");
            break;
        }
        if (n_w + cnt > MAX_W) {
            rc = cli_usage_error("--layers: more than %d weight tensors; name fewer layers", MAX_W);
            break;
        }
        for (int k = 0; k < cnt; k++) names[n_w++] = got[k];
        if (!tok) break;
    }
    if (rc == CLI_OK) {
        st = cli_load_tensor(a.train, &xtr);
        if (st == CATTR_OK) st = cli_load_tensor(a.train_labels, &ytr);
        if (st == CATTR_OK && a.test) st = cli_load_tensor(a.test, &xte);
        if (st == CATTR_OK && a.test) st = cli_load_tensor(a.test_labels, &yte);
        if (st != CATTR_OK) rc = cli_error(st, "cannot read the data");
    }
    int64_t N = rc == CLI_OK && cattr_tensor_ndim(xtr) ? cattr_tensor_shape(xtr)[0] : 0;
    int64_t T = rc == CLI_OK && xte && cattr_tensor_ndim(xte) ? cattr_tensor_shape(xte)[0] : 0;
    if (rc == CLI_OK && (N < 1 || (cattr_tensor_ndim(ytr) ? cattr_tensor_shape(ytr)[0] : 1) != N))
        rc = cli_usage_error("--train-labels has %lld rows for %lld training examples",
                             (long long)(cattr_tensor_ndim(ytr) ? cattr_tensor_shape(ytr)[0] : 1), (long long)N);
    if (rc == CLI_OK && xte && (T < 1 || (cattr_tensor_ndim(yte) ? cattr_tensor_shape(yte)[0] : 1) != T))
        rc = cli_usage_error("--test-labels has %lld rows for %lld test examples",
                             (long long)(cattr_tensor_ndim(yte) ? cattr_tensor_shape(yte)[0] : 1), (long long)T);
    cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_SALIENCY);
    p.dtype = a.dtype;
    p.device = a.device;
    if (rc == CLI_OK && (st = cattr_explainer_new(m, &p, &e)) != CATTR_OK) rc = cli_error(st, "bad parameters");
    int64_t osh[2] = {a.self ? N : T, N};
    if (rc == CLI_OK && cattr_tensor_new(CATTR_FLOAT64, a.self ? 1 : 2, a.self ? osh + 1 : osh, &scores) != CATTR_OK)
        rc = cli_error(CATTR_ERR_NO_MEMORY, "out of memory");
    double *sv = rc == CLI_OK ? cattr_tensor_data(scores) : NULL;
    int n_ck = a.n_ckpt ? a.n_ckpt : 1;
    cli_progress_state prog = {0};
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    prog.start = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    int64_t done = 0, total = (int64_t)n_ck * ((N + a.batch - 1) / a.batch);
    for (int c = 0; c < n_ck && rc == CLI_OK; c++) {
        cattr_tensor_set *set = NULL;
        cattr_model *cm = NULL;
        const cattr_tensor *w[MAX_W] = {0};
        double lr = a.n_ckpt ? a.lr[c] : 1.0;
        if (a.n_ckpt && (st = load_checkpoint(&a, c, m, names, n_w, &set, &cm, w)) != CATTR_OK)
            rc = cli_error(st, "cannot read --checkpoint");
        if (rc == CLI_OK && !a.self) { /* the test examples' gradients at this checkpoint */
            cattr_call call = {(const cattr_tensor *const *)&xte, 1, NULL, NULL, NULL, 0, NULL, NULL, NULL, 0, NULL, 0,
                               NULL};
            for (int k = 0; k < n_w; k++) cattr_tensor_free(tg[k]), tg[k] = NULL;
            st = cattr_explainer_example_grads(e, &call, a.loss, yte, n_w, names, a.n_ckpt ? w : NULL, NULL, tg, NULL,
                                               NULL, NULL);
            if (st != CATTR_OK) rc = cli_error(st, "the test examples' gradients failed");
        }
        for (int64_t r0 = 0; r0 < N && rc == CLI_OK; r0 += a.batch) {
            int64_t r1 = r0 + a.batch < N ? r0 + a.batch : N;
            cattr_tensor *xb = rows_of(xtr, r0, r1), *yb = rows_of(ytr, r0, r1), *out = NULL;
            if (!xb || !yb) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            cattr_call call = {(const cattr_tensor *const *)&xb, 1, NULL, NULL, NULL, 0, NULL, NULL, NULL, 0, NULL, 0,
                               NULL};
            if (st == CATTR_OK)
                st = cattr_explainer_example_grads(e, &call, a.loss, yb, n_w, names, a.n_ckpt ? w : NULL,
                                                   a.self ? NULL : (const cattr_tensor *const *)tg, NULL,
                                                   a.self ? NULL : &out, a.self ? &out : NULL, NULL);
            if (st != CATTR_OK) {
                rc = cli_error(st, "the training examples' gradients failed");
            } else if (a.self) { /* [b]: each example's squared norm */
                for (int64_t b = r0; b < r1; b++) sv[b] += lr * cx_tensor_get(out, b - r0);
            } else { /* [b, T]: into scores [T, N] */
                for (int64_t b = r0; b < r1; b++)
                    for (int64_t t = 0; t < T; t++) sv[t * N + b] += lr * cx_tensor_get(out, (b - r0) * T + t);
            }
            cattr_tensor_free(out);
            cattr_tensor_free(xb);
            cattr_tensor_free(yb);
            if (!a.quiet && rc == CLI_OK) cli_progress(++done, total, &prog);
        }
        cattr_tensor_set_free(set);
        cattr_model_free(cm);
    }
    cJSON *root = NULL;
    if (rc == CLI_OK && a.k) { /* the top K per test example */
        root = cJSON_CreateObject();
        cJSON *tests = cJSON_AddArrayToObject(root, "tests");
        cJSON_AddStringToObject(root, "kind", a.opponents ? "opponents" : "proponents");
        int64_t K = a.k < N ? a.k : N;
        double *pair = malloc((size_t)N * 2 * sizeof *pair);
        for (int64_t t = 0; pair && t < T; t++) {
            for (int64_t b = 0; b < N; b++) {
                pair[2 * b] = a.opponents ? -sv[t * N + b] : sv[t * N + b];
                pair[2 * b + 1] = (double)b;
            }
            qsort(pair, (size_t)N, 2 * sizeof *pair, cmp_desc);
            cJSON *one = cJSON_CreateObject(), *idx = cJSON_AddArrayToObject(one, "indices"),
                  *sc = cJSON_AddArrayToObject(one, "scores");
            for (int64_t q = 0; q < K; q++) {
                cJSON_AddItemToArray(idx, cJSON_CreateNumber(pair[2 * q + 1]));
                cJSON_AddItemToArray(sc, cJSON_CreateNumber(sv[t * N + (int64_t)pair[2 * q + 1]]));
            }
            cJSON_AddItemToArray(tests, one);
            if (!a.quiet) {
                printf("test %lld: %s", (long long)t, a.opponents ? "opponents" : "proponents");
                for (int64_t q = 0; q < K && q < 10; q++)
                    printf(" %lld (%.4g)", (long long)pair[2 * q + 1], sv[t * N + (int64_t)pair[2 * q + 1]]);
                printf(K > 10 ? " ...\n" : "\n");
            }
        }
        if (!pair) rc = cli_error(CATTR_ERR_NO_MEMORY, "out of memory");
        free(pair);
    }
    if (rc == CLI_OK && (st = cattr_tensor_save_npy(scores, a.output)) != CATTR_OK)
        rc = cli_error(st, "cannot write --output");
    if (rc == CLI_OK && root && a.json) {
        char *text = cJSON_Print(root);
        st = text ? cli_write_text_file(a.json, text) : CATTR_ERR_NO_MEMORY;
        free(text);
        if (st != CATTR_OK) {
            rc = cli_error(st, "cannot write --json");
            remove(a.output);
        }
    }
    if (rc == CLI_OK && !a.quiet) {
        printf("TracIn over %lld training examples, %d checkpoint%s, %d weight tensors (%s%s), %s loss\n",
               (long long)N, n_ck, n_ck == 1 ? "" : "s", n_w, names[0], n_w > 1 ? ", ..." : "",
               a.loss == CATTR_LOSS_MSE ? "mse" : a.loss == CATTR_LOSS_NLL_OUTPUT ? "nll" : "cross-entropy");
        printf("wrote %s%s%s\n", a.output, a.json ? " and " : "", a.json ? a.json : "");
    }
    cJSON_Delete(root);
    for (int k = 0; k < MAX_W; k++) cattr_tensor_free(tg[k]);
    cattr_tensor_free(xtr);
    cattr_tensor_free(ytr);
    cattr_tensor_free(xte);
    cattr_tensor_free(yte);
    cattr_tensor_free(scores);
    cattr_explainer_free(e);
    cattr_model_free(m);
    return rc;
}
