/* compare.c - `cattr compare`: the same attributions on two devices, and how far apart they are.
 *
 * Runs every golden case under PATH (Captum cases, language-model indexes) on device A and again on device B, and
 * prints per case "<case> <method> max_abs=<e> max_rel=<e>", then the matrix per method (cases, worst absolute and
 * relative difference, the worst case). Given an ONNX model and --input instead, every method that runs with its
 * defaults (and the layer methods with --layer); given a language-model checkpoint and --prompt / --target, every
 * token-attribution method. --json FILE writes the rows and the matrix. --max-rel X makes a case above X a failure
 * (exit 1), so that CI can hold two devices to each other.
 */
#define _POSIX_C_SOURCE 200809L
#include "replay.h"

#include "core/core.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The header line ("devices: A ..., B ...; dtype"), printed once, just before the first work: a command that fails on
 * its arguments, its paths or its first model prints nothing but the error. */
static bool header_shown;
static void show_header(const replay_opts *o) {
    if (header_shown) return;
    header_shown = true;
    printf("devices: A %s, B %s; %s\n", o->device, o->cmp->device_b, cattr_dtype_name(o->dtype));
}

/* ---- a model: every method that runs with its defaults --------------------------------------------------------- */

static void free_attr(cattr_tensor **a, cattr_tensor *d) {
    for (int i = 0; i < 16; i++) cattr_tensor_free(a[i]);
    cattr_tensor_free(d);
}

/* The method on device dev; *vals (malloc'd) holds every value of the attributions, then the delta. */
static cattr_status model_run(const cattr_model *m, const cattr_attr_params *p, const char *dev, const cattr_call *call,
                              double **vals, int64_t *n) {
    cattr_attr_params q = *p;
    q.device = dev;
    cattr_explainer *e = NULL;
    cattr_tensor *a[16] = {0}, *d = NULL;
    cattr_status st = cattr_explainer_new(m, &q, &e);
    if (st == CATTR_OK) st = cattr_explainer_run(e, call, a, q.return_convergence_delta ? &d : NULL);
    cattr_explainer_free(e);
    int64_t total = 0;
    for (int i = 0; i <= 16 && st == CATTR_OK; i++) {
        const cattr_tensor *t = i < 16 ? a[i] : d;
        total += t ? cattr_tensor_numel(t) : 0;
    }
    double *v = st == CATTR_OK ? malloc((size_t)(total + 1) * sizeof *v) : NULL;
    if (st == CATTR_OK && !v) st = CATTR_ERR_NO_MEMORY;
    int64_t k = 0;
    for (int i = 0; i <= 16 && v; i++) {
        const cattr_tensor *t = i < 16 ? a[i] : d;
        for (int64_t j = 0; t && j < cattr_tensor_numel(t); j++)
            v[k++] = cattr_tensor_dtype(t) == CATTR_FLOAT32 ? ((const float *)cattr_tensor_data_const(t))[j]
                                                            : ((const double *)cattr_tensor_data_const(t))[j];
    }
    free_attr(a, d);
    *vals = v;
    *n = total;
    return st;
}

static int compare_model(const char *path, const char *input, const char *layer, int64_t target, replay_opts *o) {
    cattr_model *m = NULL;
    cattr_tensor *x = NULL, *base2 = NULL;
    cattr_status st = cattr_model_load_onnx(path, &m);
    if (st != CATTR_OK) return cli_error(st, "cannot load model");
    if ((st = cli_load_tensor(input, &x)) != CATTR_OK) {
        cattr_model_free(m);
        return cli_error(st, "cannot load the input");
    }
    int64_t sh[CATTR_MAX_DIMS];
    int nd = cattr_tensor_ndim(x);
    memcpy(sh, cattr_tensor_shape(x), (size_t)nd * sizeof *sh);
    sh[0] = 2; /* the distribution methods' baselines: two rows of zeros */
    if (cattr_tensor_new(cattr_tensor_dtype(x), nd, sh, &base2) != CATTR_OK) {
        cattr_model_free(m);
        cattr_tensor_free(x);
        return cli_error(CATTR_ERR_NO_MEMORY, "compare");
    }
    memset(cattr_tensor_data(base2), 0, (size_t)cattr_tensor_numel(base2) * cattr_dtype_size(cattr_tensor_dtype(x)));
    show_header(o);
    cattr_target t = {CATTR_TARGET_INDEX, 1, 0, &target};
    const cattr_tensor *in[1] = {x}, *dist[1] = {base2};
    for (int mi = 0; mi < CATTR_METHOD_COUNT; mi++) {
        if (!cattr_method_implemented((cattr_method)mi)) continue;
        bool layer_method = mi >= CATTR_METHOD_LAYER_ACTIVATION && mi <= CATTR_METHOD_LAYER_LRP;
        const char *name = cattr_method_name((cattr_method)mi);
        if (mi >= CATTR_METHOD_NEURON_GRADIENT || (layer_method && !layer)) {
            printf("SKIP %s %s\n", name, layer_method ? "needs --layer" : "needs a neuron");
            o->skipped++;
            continue;
        }
        cattr_attr_params p = cattr_attr_default_params((cattr_method)mi);
        p.dtype = o->dtype;
        p.layer = layer;
        if (mi == CATTR_METHOD_GUIDED_GRADCAM || mi == CATTR_METHOD_LAYER_GRADCAM) p.layer = layer;
        bool distribution = mi == CATTR_METHOD_DEEPLIFT_SHAP || mi == CATTR_METHOD_GRADIENT_SHAP ||
                            mi == CATTR_METHOD_LAYER_DEEPLIFT_SHAP || mi == CATTR_METHOD_LAYER_GRADIENT_SHAP;
        cattr_call call;
        memset(&call, 0, sizeof call);
        call.inputs = in;
        call.n_inputs = 1;
        call.baselines = distribution ? dist : NULL;
        call.target = &t;
        double *a = NULL, *b = NULL;
        int64_t na = 0, nb = 0;
        st = model_run(m, &p, o->device, &call, &a, &na);
        if (st != CATTR_OK) { /* a method that does not run with its defaults here (a window, a layer, a rule) */
            printf("SKIP %s %s\n", name, cattr_last_error());
            o->skipped++;
            continue;
        }
        st = model_run(m, &p, o->cmp->device_b, &call, &b, &nb);
        if (st != CATTR_OK || na != nb) {
            printf("FAIL %s on %s: %s\n", name, o->cmp->device_b, st != CATTR_OK ? cattr_last_error() : "sizes differ");
            o->failed++;
        } else {
            cmp_record(o->cmp, &o->passed, &o->failed, path, name, a, b, na);
        }
        free(a);
        free(b);
    }
    cattr_tensor_free(base2);
    cattr_tensor_free(x);
    cattr_model_free(m);
    return CLI_OK;
}

/* ---- a language-model checkpoint: every token-attribution method -------------------------------------------- */

static int compare_llm(const char *dir, const char *prompt, const char *target, replay_opts *o) {
    static const char *const names[] = {"layer-ig", "layer-gradient-x-activation", "feature-ablation",
                                        "shapley-value-sampling", "lime", "kernel-shap"};
    cattr_llm *m = NULL;
    int64_t *ids = NULL, *tg = NULL, T = 0, n = 0;
    cattr_status st = cattr_llm_load(dir, &m);
    if (st == CATTR_OK) st = cattr_llm_encode(m, prompt, &ids, &T);
    if (st == CATTR_OK) st = cattr_llm_encode(m, target, &tg, &n);
    if (st != CATTR_OK) {
        int rc = cli_error(st, "cannot load the checkpoint or encode the texts");
        free(ids);
        free(tg);
        cattr_llm_free(m);
        return rc;
    }
    show_header(o);
    double *r[2] = {malloc((size_t)(n * T + T + 1) * sizeof(double)), malloc((size_t)(n * T + T + 1) * sizeof(double))};
    static const cattr_method methods[] = {CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS, CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION,
                                           CATTR_METHOD_FEATURE_ABLATION, CATTR_METHOD_SHAPLEY_VALUE_SAMPLING,
                                           CATTR_METHOD_LIME, CATTR_METHOD_KERNEL_SHAP};
    cattr_llm_call c = cattr_llm_call_make(ids, T, tg, n);
    for (int mi = 0; mi < 6 && r[0] && r[1]; mi++) {
        cattr_attr_params p = cattr_attr_default_params(methods[mi]);
        p.dtype = o->dtype;
        bool seq_only = methods[mi] == CATTR_METHOD_LIME || methods[mi] == CATTR_METHOD_KERNEL_SHAP;
        for (int k = 0; k < 2 && st == CATTR_OK; k++) {
            p.device = k ? o->cmp->device_b : o->device;
            st = cattr_llm_attribute(m, &p, &c, r[k], r[k] + T, NULL, NULL);
        }
        if (st != CATTR_OK) {
            printf("FAIL %s: %s\n", names[mi], cattr_last_error());
            o->failed++;
            st = CATTR_OK;
            continue;
        }
        cmp_record(o->cmp, &o->passed, &o->failed, dir, names[mi], seq_only ? r[0] : r[0] + T, seq_only ? r[1] : r[1] + T,
                   seq_only ? T : n * T);
    }
    free(r[0]);
    free(r[1]);
    free(ids);
    free(tg);
    cattr_llm_free(m);
    return CLI_OK;
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* Whether the JSON file at path reads and parses. */
static bool json_file_ok(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 65536 + 1 > cap) {
            char *t = realloc(text, cap = 2 * cap + 65536 + 1);
            if (!t) break;
            text = t;
        }
        size_t k = fread(text + len, 1, cap - len - 1, f);
        len += k;
        if (k == 0) break;
    }
    fclose(f);
    cJSON *j = text ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    bool ok = j != NULL;
    cJSON_Delete(j);
    return ok;
}

/* What each PATH is and what it needs, before anything runs or prints (a usage error names the path); the same
 * kinds as replay_path, except tokenizer cases, which have no attributions to compare. */
static int check_path(const char *path, const char *input, const char *prompt, const char *ttext) {
    char buf[4200];
    struct stat sb;
    if (stat(path, &sb) != 0) return cli_usage_error("compare: '%s': no such file or directory", path);
    snprintf(buf, sizeof buf, "%s/config.json", path);
    bool checkpoint = S_ISDIR(sb.st_mode) && stat(buf, &sb) == 0;
    stat(path, &sb);
    if (ends_with(path, ".onnx")) {
        if (!input) return cli_usage_error("compare: a model needs --input FILE");
        return stat(input, &sb) == 0 ? CLI_OK : cli_usage_error("compare: --input '%s': no such file", input);
    }
    if (checkpoint)
        return prompt && ttext ? CLI_OK
                               : cli_usage_error("compare: a checkpoint needs --prompt TEXT and --target-text TEXT");
    if (ends_with(path, ".jsonl"))
        return cli_usage_error("compare: '%s' holds tokenizer cases, which have no attributions to compare", path);
    if (!S_ISDIR(sb.st_mode)) {
        if (ends_with(path, "cases.json"))
            return json_file_ok(path) ? CLI_OK : cli_usage_error("compare: '%s' is not a readable JSON file", path);
        return cli_usage_error("compare: '%s' is neither a model (.onnx), a checkpoint folder, a case folder, a folder "
                               "of cases nor a *cases.json index", path);
    }
    snprintf(buf, sizeof buf, "%s/case.json", path);
    if (stat(buf, &sb) == 0)
        return json_file_ok(buf) ? CLI_OK : cli_usage_error("compare: '%s' is not a readable JSON file", buf);
    DIR *dir = opendir(path);
    if (!dir) return cli_usage_error("compare: cannot read the folder '%s'", path);
    int found = 0, rc = CLI_OK;
    struct dirent *de;
    while ((de = readdir(dir)) && rc == CLI_OK) {
        if (de->d_name[0] == '.') continue;
        if (ends_with(de->d_name, "cases.json")) {
            snprintf(buf, sizeof buf, "%s/%s", path, de->d_name);
            if (!json_file_ok(buf)) rc = cli_usage_error("compare: '%s' is not a readable JSON file", buf);
            found++;
            continue;
        }
        snprintf(buf, sizeof buf, "%s/%s/case.json", path, de->d_name);
        if (stat(buf, &sb) != 0) continue;
        if (!json_file_ok(buf)) rc = cli_usage_error("compare: '%s' is not a readable JSON file", buf);
        found++;
    }
    closedir(dir);
    if (rc == CLI_OK && !found)
        rc = cli_usage_error("compare: '%s' holds no case folders (no */case.json) and no *cases.json index", path);
    return rc;
}

/* --devices A,B: two device names of this build, each non-empty, without spaces, separated by one comma. */
static bool parse_devices(const char *devices, char *buf, size_t size, const char **a, const char **b) {
    snprintf(buf, size, "%s", devices);
    char *comma = strchr(buf, ',');
    bool ok = comma && !strchr(comma + 1, ',') && comma != buf && comma[1] && !strpbrk(buf, " \t\n") &&
              strlen(devices) < size;
    if (!ok) {
        (void)cli_usage_error("--devices needs two device names separated by one comma, such as cpu,cpu-check "
                              "(see cattr info --devices), not '%s'", devices);
        return false;
    }
    *comma = 0;
    *a = buf;
    *b = comma + 1;
    if (!cli_device_arg(*a) || !cli_device_arg(*b)) {
        fprintf(stderr, "cattr: in --devices '%s'\n", devices);
        return false;
    }
    return true;
}

static void compare_help(FILE *f) {
    fprintf(f, "usage: cattr compare PATH... [--devices A,B] [--dtype float32|float64] [--max-rel X] [--json FILE]\n"
               "       cattr compare MODEL.onnx --input FILE [--target N] [--layer L] [...]\n"
               "       cattr compare CHECKPOINT_DIR --prompt TEXT --target-text TEXT [...]\n"
               "\n"
               "Runs the same attributions on two devices and prints how far apart they are.\n"
               "  PATH            a Captum case folder or a folder of them; a language-model golden folder or one\n"
               "                  of its *cases.json indexes\n"
               "  MODEL.onnx      every method that runs with its defaults on --input (target --target, default 0;\n"
               "                  the layer methods with --layer; the others are SKIPped with the reason)\n"
               "  CHECKPOINT_DIR  every token-attribution method on --prompt and --target-text\n"
               "  --devices A,B   the two devices (default cpu,cpu-check; see cattr info --devices)\n"
               "  --dtype D       float64 (default) | float32\n"
               "  --max-rel X     a case whose max_rel exceeds X fails (exit 1); default 0: report only\n"
               "  --json FILE     also write {devices, dtype, rows: [{case, method, numel, max_abs, max_rel}],\n"
               "                  methods: [{method, cases, max_abs, max_rel, worst_case}]} (-1: infinite or NaN)\n"
               "Output: PASS|FAIL <case> <method> max_abs=<e> max_rel=<e> per case, where max_rel is\n"
               "max|a - b| / max|a| over every value of the results (attributions, then the convergence delta;\n"
               "token_attr for language models), then a table per method. A result that is NaN on one device only\n"
               "counts as infinitely far.\n");
}

int cmd_compare(int argc, char **argv) {
    static char devbuf[256];
    const char *devices = "cpu,cpu-check", *json = NULL, *input = NULL, *layer = NULL, *prompt = NULL, *ttext = NULL;
    long long target = 0;
    cmp_tally tally;
    memset(&tally, 0, sizeof tally);
    replay_opts o = {CATTR_FLOAT64, 0, 0, 0, 0, NULL, NULL, &tally, false};
    const char *paths[256];
    int np = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            compare_help(stdout);
            return CLI_OK;
        } else if (!strcmp(a, "--devices")) {
            if (++i >= argc) return cli_usage_error("--devices needs two names, such as cpu,cpu-check");
            devices = argv[i];
        } else if (!strcmp(a, "--dtype")) {
            if (++i >= argc) return cli_usage_error("--dtype needs a value");
            if (!strcmp(argv[i], "float64")) o.dtype = CATTR_FLOAT64;
            else if (!strcmp(argv[i], "float32")) o.dtype = CATTR_FLOAT32;
            else return cli_usage_error("--dtype must be float64 or float32, not '%s'", argv[i]);
        } else if (!strcmp(a, "--max-rel")) {
            if (++i >= argc) return cli_usage_error("--max-rel needs a value");
            if (!cli_parse_double(argv[i], &tally.max_rel) || !(tally.max_rel >= 0))
                return cli_usage_error("--max-rel needs a number >= 0, not '%s'", argv[i]);
        } else if (!strcmp(a, "--json")) {
            if (++i >= argc) return cli_usage_error("--json needs a file name");
            json = argv[i];
        } else if (!strcmp(a, "--input") || !strcmp(a, "--layer") || !strcmp(a, "--prompt") || !strcmp(a, "--target-text")) {
            if (++i >= argc) return cli_usage_error("%s needs a value", a);
            *(!strcmp(a, "--input") ? &input : !strcmp(a, "--layer") ? &layer : !strcmp(a, "--prompt") ? &prompt : &ttext) =
                argv[i];
        } else if (!strcmp(a, "--target")) {
            if (++i >= argc) return cli_usage_error("--target needs a value");
            if (!cli_int_arg(a, argv[i], 0, INT64_MAX, &target)) return CLI_USAGE;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("compare: unknown option '%s' (see cattr compare --help)", a);
        } else if (np < 256) {
            paths[np++] = a;
        }
    }
    if (np == 0) {
        compare_help(stderr);
        return CLI_USAGE;
    }
    if (!parse_devices(devices, devbuf, sizeof devbuf, &o.device, &tally.device_b)) return CLI_USAGE;
    for (int i = 0; i < np; i++) /* every path, before anything runs or prints */
        if (check_path(paths[i], input, prompt, ttext) != CLI_OK || !cli_file_in(paths[i], "a compared path") ||
            !cli_folder_in(paths[i], "a compared case"))
            return CLI_USAGE;
    if (!cli_file_in(input, "--input") || !cli_file_out(json, "--json")) return CLI_USAGE;
    tally.json_rows = cJSON_CreateArray();
    if (!tally.json_rows) return cli_usage_error("out of memory");
    header_shown = false;
    int rc = CLI_OK;
    for (int i = 0; i < np && rc == CLI_OK; i++) {
        size_t len = strlen(paths[i]);
        char cfg[4200];
        snprintf(cfg, sizeof cfg, "%s/config.json", paths[i]);
        FILE *cf = fopen(cfg, "r");
        bool checkpoint = cf != NULL;
        if (cf) fclose(cf);
        if (len > 5 && !strcmp(paths[i] + len - 5, ".onnx")) {
            if (!input) rc = cli_usage_error("compare: a model needs --input FILE");
            else rc = compare_model(paths[i], input, layer, target, &o);
        } else if (checkpoint) {
            if (!prompt || !ttext) rc = cli_usage_error("compare: a checkpoint needs --prompt TEXT and --target-text TEXT");
            else rc = compare_llm(paths[i], prompt, ttext, &o);
        } else {
            show_header(&o);
            if (replay_path(paths[i], &o) != 0) rc = CLI_USAGE;
        }
    }
    if (rc == CLI_OK) {
        show_header(&o);
        printf("\n%-34s %6s %11s %11s  %s\n", "method", "cases", "max_abs", "max_rel", "worst case");
        for (int k = 0; k < tally.n_methods; k++)
            printf("%-34s %6d %11.3e %11.3e  %s\n", tally.m[k].method, tally.m[k].cases, tally.m[k].max_abs,
                   tally.m[k].max_rel, tally.m[k].worst_case);
        printf("%d passed, %d failed, %d skipped\n", o.passed, o.failed, o.skipped);
        if (json) {
            cJSON *root = cJSON_CreateObject(), *ms = cJSON_CreateArray();
            cJSON *dv = cJSON_CreateArray();
            cJSON_AddItemToArray(dv, cJSON_CreateString(o.device));
            cJSON_AddItemToArray(dv, cJSON_CreateString(tally.device_b));
            cJSON_AddItemToObject(root, "devices", dv);
            cJSON_AddStringToObject(root, "dtype", cattr_dtype_name(o.dtype));
            cJSON_AddItemToObject(root, "rows", tally.json_rows);
            tally.json_rows = NULL;
            for (int k = 0; k < tally.n_methods; k++) {
                cJSON *m = cJSON_CreateObject();
                cJSON_AddStringToObject(m, "method", tally.m[k].method);
                cJSON_AddNumberToObject(m, "cases", tally.m[k].cases);
                cJSON_AddNumberToObject(m, "max_abs", isfinite(tally.m[k].max_abs) ? tally.m[k].max_abs : -1);
                cJSON_AddNumberToObject(m, "max_rel", isfinite(tally.m[k].max_rel) ? tally.m[k].max_rel : -1);
                cJSON_AddStringToObject(m, "worst_case", tally.m[k].worst_case);
                cJSON_AddItemToArray(ms, m);
            }
            cJSON_AddItemToObject(root, "methods", ms);
            char *text = cJSON_Print(root);
            cattr_status st = text ? cli_write_text_file(json, text)
                                   : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            free(text);
            cJSON_Delete(root);
            if (st != CATTR_OK) rc = cli_error(st, "--json");
        }
        if (rc == CLI_OK && o.failed) rc = CLI_FAIL;
        if (rc == CLI_OK && o.passed == 0) {
            fprintf(stderr, "cattr: compare: no case ran on both devices\n");
            rc = CLI_FAIL;
        }
    }
    cJSON_Delete(tally.json_rows);
    return rc;
}
