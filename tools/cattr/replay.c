/* replay.c - `cattr replay`: re-runs golden Captum cases (format: shared/golden/README.md) and compares.
 *
 * One line per case on stdout: PASS <name> <ratio> | FAIL <name> <tensor> err=<e> allowed=<a> | SKIP <name> <why>,
 * then "N passed, N failed, N skipped". Exit 0 when nothing failed and at least one case passed, 1 when a case
 * failed, 2 for usage or I/O errors.
 */
#define _POSIX_C_SOURCE 200809L
#include "replay.h"

#include "attr/internal.h" /* the parameters' limits (CX_MAX_STEPS, ...), the C API's */
#include "core/core.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>


static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

/* attribute_args[key], else attribute_defaults[key], else NULL */
static const cJSON *arg(const cJSON *c, const char *key) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "attribute_args"), key);
    if (a && !cJSON_IsNull(a)) return a;
    a = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "attribute_defaults"), key);
    if (a && !cJSON_IsNull(a)) return a;
    a = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "noise_tunnel_attribute_defaults"), key);
    return a && !cJSON_IsNull(a) ? a : NULL;
}

/* The largest magnitude of an index read from a case (a target, a neuron, a window): every such integer is exact in a
 * JSON number (a double) up to 2^53; the library checks it against the shapes. */
#define CASE_MAX_INDEX 9007199254740992LL

/* Integer `field` of case file `file` from JSON value v, from lo to hi; false with `why` naming the file, the field
 * and the value when v is not such a number (a count beyond the C API's limits, a fraction, a string). */
static bool case_int(const char *file, const char *field, const cJSON *v, long long lo, long long hi, long long *out,
                     char *why, size_t wn) {
    if (!cJSON_IsNumber(v)) {
        char *txt = v ? cJSON_PrintUnformatted(v) : NULL;
        snprintf(why, wn, "%s: %s must be an integer from %lld to %lld (got %s)", file, field, lo, hi,
                 txt ? txt : "nothing");
        cJSON_free(txt);
        return false;
    }
    double x = v->valuedouble;
    if (!(x >= (double)lo && x <= (double)hi) || x != floor(x)) {
        snprintf(why, wn, "%s: %s must be an integer from %lld to %lld (got %.17g)", file, field, lo, hi, x);
        return false;
    }
    *out = (long long)x;
    return true;
}

/* false, with "out of memory" in why */
static bool no_memory(char *why, size_t wn) {
    snprintf(why, wn, "out of memory");
    return false;
}

/* case_int for an int field of cattr_attr_params. */
static bool case_int_param(const char *file, const char *field, const cJSON *v, long long lo, long long hi, int *out,
                           char *why, size_t wn) {
    long long x = 0;
    if (!case_int(file, field, v, lo, hi, &x, why, wn)) return false;
    *out = (int)x;
    return true;
}

/* A list in a case holds at most `max` entries (the fixed arrays of cattr_attr_params and of the replay). */
static bool case_count(const char *file, const char *field, const cJSON *list, int max, char *why, size_t wn) {
    int n = cJSON_GetArraySize(list);
    if (n <= max) return true;
    snprintf(why, wn, "%s: %s has %d entries; at most %d are allowed", file, field, n, max);
    return false;
}

typedef struct {
    cattr_tensor *inputs[16], *baselines[16], *additional[16], *masks[16], *layer_masks[16], *layer_baseline;
    int n_in, n_add, n_layer_masks;
    bool have_masks, have_layer_masks;
    const char *layer_names[16]; /* borrowed from the case JSON */
    int n_layer_names;
    int64_t *tidx;
    cattr_target target;
    const cattr_tensor **draws; /* borrowed from the tensor set */
    const char **roles;         /* borrowed from the case JSON */
    int n_draws;
    cattr_node_rule *rules; /* node and rule strings borrowed from the case JSON */
    int n_rules;
} case_data;

static void case_free(case_data *d) {
    for (int i = 0; i < 16; i++) {
        cattr_tensor_free(d->inputs[i]);
        cattr_tensor_free(d->baselines[i]);
        cattr_tensor_free(d->additional[i]);
        cattr_tensor_free(d->masks[i]);
        cattr_tensor_free(d->layer_masks[i]);
    }
    cattr_tensor_free(d->layer_baseline);
    free(d->tidx);
    free(d->draws);
    free(d->roles);
    free(d->rules);
}

static const cattr_tensor *need(const cattr_tensor_set *set, const char *name, char *why, size_t n) {
    const cattr_tensor *t = cattr_tensor_set_get(set, name);
    if (!t) snprintf(why, n, "tensors.safetensors has no tensor '%s'", name);
    return t;
}

/* Feature masks, recorded random draws (of the run in `dtype`) and per-node rules of a case. */
static bool load_extras(const char *file, const cJSON *c, const cattr_tensor_set *set, cattr_dtype dtype, case_data *d,
                        char *why, size_t wn) {
    const cJSON *it;
    const cJSON *fm = cJSON_GetObjectItemCaseSensitive(arg(c, "feature_mask"), "tensors");
    if (!case_count(file, "feature_mask.tensors", fm, CATTR_MAX_INPUTS, why, wn)) return false;
    int i = 0;
    cJSON_ArrayForEach(it, fm) {
        if (i >= 16) break;
        if (cJSON_IsString(it)) {
            const cattr_tensor *t = need(set, it->valuestring, why, wn);
            if (!t) return false;
            cattr_tensor_convert(t, CATTR_INT64, &d->masks[i]);
        }
        d->have_masks = true;
        i++;
    }
    const cJSON *lm = cJSON_GetObjectItemCaseSensitive(arg(c, "layer_mask"), "tensors");
    if (!case_count(file, "layer_mask.tensors", lm, CATTR_MAX_OUTPUTS, why, wn)) return false;
    i = 0;
    cJSON_ArrayForEach(it, lm) {
        if (i >= 16) break;
        if (cJSON_IsString(it)) {
            const cattr_tensor *t = need(set, it->valuestring, why, wn);
            if (!t) return false;
            cattr_tensor_convert(t, CATTR_INT64, &d->layer_masks[i]);
        }
        d->have_layer_masks = true;
        d->n_layer_masks = ++i;
    }
    const cJSON *lb = arg(c, "layer_baselines");
    if (lb) {
        const cJSON *tn = cJSON_GetObjectItemCaseSensitive(lb, "tensor"), *sc = cJSON_GetObjectItemCaseSensitive(lb, "scalar");
        if (cJSON_IsString(tn)) {
            const cattr_tensor *t = need(set, tn->valuestring, why, wn);
            if (!t) return false;
            cattr_tensor_convert(t, cattr_tensor_dtype(t), &d->layer_baseline);
        } else if (cJSON_IsNumber(sc)) {
            double v = sc->valuedouble;
            cattr_tensor_from_data(CATTR_FLOAT64, 0, NULL, &v, &d->layer_baseline);
        }
    }
    /* the layer(s): the exact ONNX tensors of the module outputs (or inputs) the case names */
    const cJSON *ly = cJSON_GetObjectItemCaseSensitive(c, "layer");
    bool to_input = cJSON_IsTrue(arg(c, "attribute_to_layer_input")) || cJSON_IsTrue(arg(c, "attribute_to_neuron_input"));
    const cJSON *lo;
    cJSON_ArrayForEach(lo, cJSON_GetObjectItemCaseSensitive(ly, "onnx")) {
        const cJSON *tn;
        cJSON_ArrayForEach(tn, cJSON_GetObjectItemCaseSensitive(lo, to_input ? "input_tensors" : "output_tensors")) {
            if (!cJSON_IsString(tn)) continue;
            if (d->n_layer_names >= CATTR_MAX_OUTPUTS) {
                snprintf(why, wn, "%s: layer.onnx names more than %d layer tensors", file, CATTR_MAX_OUTPUTS);
                return false;
            }
            d->layer_names[d->n_layer_names++] = tn->valuestring;
        }
    }
    const cJSON *rd = cJSON_GetObjectItemCaseSensitive(c, "random_draws");
    if (rd && !cJSON_IsNull(rd)) {
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(rd, "sequence");
        bool same = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rd, "f32_run_uses_same_draws"));
        const char *fmt = "draw.%04d";
        if (dtype == CATTR_FLOAT32 && !same) fmt = "f32.draw.%04d";
        int n = cJSON_GetArraySize(seq);
        /* every draw is a tensor of the set: no more draws than tensors */
        int max_draws = cattr_tensor_set_count(set);
        if (n > max_draws) {
            snprintf(why, wn, "%s: random_draws.sequence has %d draws; tensors.safetensors holds only %d tensors", file,
                     n, max_draws);
            return false;
        }
        if (dtype == CATTR_FLOAT32 && !same) {
            const cJSON *fc = cJSON_GetObjectItemCaseSensitive(rd, "f32_count");
            long long fn = 0;
            if (fc && !case_int(file, "random_draws.f32_count", fc, 0, max_draws, &fn, why, wn)) return false;
            if (fc) n = (int)fn;
            const cJSON *fs = cJSON_GetObjectItemCaseSensitive(rd, "f32_sequence");
            if (fs && cJSON_IsArray(fs)) seq = fs;
        }
        d->draws = calloc((size_t)(n ? n : 1), sizeof *d->draws);
        d->roles = calloc((size_t)(n ? n : 1), sizeof *d->roles);
        if (!d->draws || !d->roles) return false;
        for (int k = 0; k < n; k++) {
            char name[64];
            snprintf(name, sizeof name, fmt, k);
            d->draws[k] = need(set, name, why, wn);
            if (!d->draws[k]) return false;
            const cJSON *r = cJSON_GetArrayItem(seq, k);
            d->roles[k] = r && cJSON_IsString(r) ? r->valuestring : NULL;
        }
        d->n_draws = n;
    }
    const cJSON *mods = cJSON_GetObjectItemCaseSensitive(c, "modules");
    int nr = 0;
    cJSON_ArrayForEach(it, mods) {
        const cJSON *rule = cJSON_GetObjectItemCaseSensitive(it, "rule");
        if (cJSON_IsString(rule)) nr += cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(it, "onnx_nodes"));
    }
    if (nr > CX_MAX_NODE_RULES) {
        snprintf(why, wn, "%s: modules name %d nodes with rules; at most %d", file, nr, CX_MAX_NODE_RULES);
        return false;
    }
    if (nr) {
        d->rules = calloc((size_t)nr, sizeof *d->rules);
        if (!d->rules) return false;
        cJSON_ArrayForEach(it, mods) {
            const cJSON *rule = cJSON_GetObjectItemCaseSensitive(it, "rule");
            if (!cJSON_IsString(rule)) continue;
            const cJSON *rp = cJSON_GetObjectItemCaseSensitive(it, "rule_params"), *v;
            const cJSON *node;
            cJSON_ArrayForEach(node, cJSON_GetObjectItemCaseSensitive(it, "onnx_nodes")) {
                if (!cJSON_IsString(node)) {
                    snprintf(why, wn, "%s: modules[].onnx_nodes holds a node name that is not a string", file);
                    return false;
                }
                cattr_node_rule *r = &d->rules[d->n_rules++];
                r->node = node->valuestring;
                r->rule = rule->valuestring;
                r->epsilon = (v = cJSON_GetObjectItemCaseSensitive(rp, "epsilon")) && cJSON_IsNumber(v) ? v->valuedouble : 1e-9;
                r->gamma = (v = cJSON_GetObjectItemCaseSensitive(rp, "gamma")) && cJSON_IsNumber(v) ? v->valuedouble : 0.25;
                r->set_bias_to_zero = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rp, "set_bias_to_zero"));
            }
        }
    }
    return true;
}

/* Reads inputs, baselines, additional inputs and the target. Returns false with `why` on malformed data. */
static bool load_case(const char *file, const cJSON *c, const cattr_tensor_set *set, case_data *d, char *why,
                      size_t wn) {
    memset(d, 0, sizeof *d);
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(arg(c, "inputs"), "tensors");
    if (!ins) /* DataLoaderAttribution: the whole dataset, attributed at once (reduce=None) */
        ins = cJSON_GetObjectItemCaseSensitive(arg(c, "dataloader"), "dataset");
    if (!case_count(file, "inputs.tensors", ins, CATTR_MAX_INPUTS, why, wn)) return false;
    const cJSON *it;
    cJSON_ArrayForEach(it, ins) {
        if (!cJSON_IsString(it)) {
            snprintf(why, wn, "%s: inputs.tensors holds an entry that is not a tensor name", file);
            return false;
        }
        const cattr_tensor *t = need(set, it->valuestring, why, wn);
        if (!t) return false;
        cattr_tensor_convert(t, cattr_tensor_dtype(t), &d->inputs[d->n_in++]);
    }
    const cJSON *bl = arg(c, "baselines");
    if (bl) {
        int i = 0;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(bl, "per_input")) {
            const cJSON *tn = cJSON_GetObjectItemCaseSensitive(it, "tensor");
            const cJSON *sc = cJSON_GetObjectItemCaseSensitive(it, "scalar");
            if (i >= d->n_in) break;
            if (tn && cJSON_IsString(tn)) {
                const cattr_tensor *t = need(set, tn->valuestring, why, wn);
                if (!t) return false;
                cattr_tensor_convert(t, cattr_tensor_dtype(t), &d->baselines[i]);
            } else if (sc && cJSON_IsNumber(sc)) {
                double v = sc->valuedouble;
                cattr_tensor_from_data(CATTR_FLOAT64, 0, NULL, &v, &d->baselines[i]);
            }
            i++;
        }
    }
    const cJSON *af = arg(c, "additional_forward_args");
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(af, "items")) {
        const cJSON *tn = cJSON_GetObjectItemCaseSensitive(it, "tensor");
        if (!tn || !cJSON_IsString(tn)) continue; /* constants were baked into the ONNX graph */
        if (d->n_add >= 15) {
            snprintf(why, wn, "%s: additional_forward_args holds more than 15 tensors", file);
            return false;
        }
        const cattr_tensor *t = need(set, tn->valuestring, why, wn);
        if (!t) return false;
        cattr_tensor_convert(t, cattr_tensor_dtype(t), &d->additional[d->n_add++]);
    }
    const cJSON *tg = cJSON_GetObjectItemCaseSensitive(c, "target");
    const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(tg, "kind"));
    const cJSON *val = cJSON_GetObjectItemCaseSensitive(tg, "value");
    cattr_target *T = &d->target;
    T->kind = CATTR_TARGET_NONE;
    if (!kind || !strcmp(kind, "none")) return true;
    /* the indices: integers (their range against the model output is the library's check) */
    long long x = 0;
    char field[64];
    if (!strcmp(kind, "int")) {
        if (!case_int(file, "target.value", val, -CASE_MAX_INDEX, CASE_MAX_INDEX, &x, why, wn)) return false;
        if (!(d->tidx = malloc(sizeof(int64_t)))) return no_memory(why, wn);
        d->tidx[0] = (int64_t)x;
        *T = (cattr_target){CATTR_TARGET_INDEX, 1, 0, d->tidx};
    } else if (!strcmp(kind, "tuple") || !strcmp(kind, "list")) {
        bool tuple = !strcmp(kind, "tuple");
        int n = cJSON_GetArraySize(val);
        if (tuple && !case_count(file, "target.value (a tuple)", val, CATTR_MAX_DIMS - 1, why, wn)) return false;
        if (!(d->tidx = malloc((size_t)(n ? n : 1) * sizeof(int64_t)))) return no_memory(why, wn);
        for (int i = 0; i < n; i++) {
            snprintf(field, sizeof field, "target.value[%d]", i);
            if (!case_int(file, field, cJSON_GetArrayItem(val, i), -CASE_MAX_INDEX, CASE_MAX_INDEX, &x, why, wn))
                return false;
            d->tidx[i] = (int64_t)x;
        }
        if (tuple) *T = (cattr_target){CATTR_TARGET_INDEX, n, 0, d->tidx};
        else *T = (cattr_target){CATTR_TARGET_PER_EXAMPLE, 1, n, d->tidx};
    } else if (!strcmp(kind, "list_of_tuples")) {
        int n = cJSON_GetArraySize(val), k = n ? cJSON_GetArraySize(cJSON_GetArrayItem(val, 0)) : 0;
        if (n && !case_count(file, "target.value[0] (a tuple)", cJSON_GetArrayItem(val, 0), CATTR_MAX_DIMS - 1, why,
                             wn))
            return false;
        if (!(d->tidx = malloc((size_t)(n * k + 1) * sizeof(int64_t)))) return no_memory(why, wn);
        for (int i = 0; i < n; i++) {
            const cJSON *row = cJSON_GetArrayItem(val, i);
            if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != k) {
                snprintf(why, wn, "%s: target.value[%d] must be a tuple of %d indices, as target.value[0]", file, i, k);
                return false;
            }
            for (int j = 0; j < k; j++) {
                snprintf(field, sizeof field, "target.value[%d][%d]", i, j);
                if (!case_int(file, field, cJSON_GetArrayItem(row, j), -CASE_MAX_INDEX, CASE_MAX_INDEX, &x, why, wn))
                    return false;
                d->tidx[i * k + j] = (int64_t)x;
            }
        }
        *T = (cattr_target){CATTR_TARGET_PER_EXAMPLE, k, n, d->tidx};
    } else if (!strcmp(kind, "tensor")) {
        const char *tn = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(tg, "tensor"));
        const cattr_tensor *t = need(set, tn ? tn : "target", why, wn);
        if (!t) return false;
        int64_t n = cattr_tensor_numel(t);
        d->tidx = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
        cattr_tensor *ti = NULL;
        if (!d->tidx || cattr_tensor_convert(t, CATTR_INT64, &ti) != CATTR_OK) {
            snprintf(why, wn, "%s: target tensor: %s", file, cattr_last_error());
            return false;
        }
        memcpy(d->tidx, cattr_tensor_data(ti), (size_t)n * sizeof(int64_t));
        cattr_tensor_free(ti);
        if (n == 1) *T = (cattr_target){CATTR_TARGET_INDEX, 1, 0, d->tidx};
        else *T = (cattr_target){CATTR_TARGET_PER_EXAMPLE, 1, n, d->tidx};
    } else {
        snprintf(why, wn, "%s: unknown target kind '%s' (none, int, tuple, list, list_of_tuples or tensor)", file, kind);
        return false;
    }
    return true;
}

/* err = max|a - e|; allowed = rtol * max|e| + atol */
void replay_compare(const cattr_tensor *a, const cattr_tensor *e, double rtol, double atol, double *err,
                    double *allowed) {
    double me = 0, mx = 0;
    int64_t n = cattr_tensor_numel(e);
    cattr_tensor *ad = NULL, *ed = NULL;
    cattr_tensor_convert(a, CATTR_FLOAT64, &ad);
    cattr_tensor_convert(e, CATTR_FLOAT64, &ed);
    const double *av = cattr_tensor_data_const(ad), *ev = cattr_tensor_data_const(ed);
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(av[i] - ev[i]);
        if (!(d <= me)) me = isnan(d) ? INFINITY : d;
        if (fabs(ev[i]) > mx) mx = fabs(ev[i]);
    }
    cattr_tensor_free(ad);
    cattr_tensor_free(ed);
    *err = me;
    *allowed = rtol * mx + atol;
}

static bool implemented(const char *method) {
    int m = cattr_method_from_name(method);
    return m >= 0 && cattr_method_implemented((cattr_method)m);
}

/* FNV-1a over the dtype, shape and bytes of each result tensor (NULL ones skipped): two runs print the same digest
 * exactly when they computed the same bits. */
static uint64_t digest_of(cattr_tensor *const *t, int n, uint64_t h) {
    for (int i = 0; i < n; i++) {
        if (!t[i]) continue;
        int64_t hdr[2 + CATTR_MAX_DIMS] = {cattr_tensor_dtype(t[i]), cattr_tensor_ndim(t[i])};
        for (int d = 0; d < (int)hdr[1] && d < CATTR_MAX_DIMS; d++) hdr[2 + d] = cattr_tensor_shape(t[i])[d];
        const unsigned char *b[2] = {(const unsigned char *)hdr, cattr_tensor_data(t[i])};
        size_t len[2] = {sizeof hdr, (size_t)cattr_tensor_numel(t[i]) * cattr_dtype_size(cattr_tensor_dtype(t[i]))};
        for (int k = 0; k < 2; k++)
            for (size_t j = 0; j < len[k]; j++) h = (h ^ b[k][j]) * 1099511628211ull;
    }
    return h;
}

static void print_time(double *t, int n) {
    double first = t[0];
    double med = n >= 2 ? cli_median(t + 1, n - 1) : NAN;
    printf("time: first=%.6f warm_median=%.6f\n", first, med);
}

/* Runs one case folder; returns -1 for an I/O error that should stop the run. */
/* All of a call's results as one vector of doubles (the attributions in order, then the delta). */
static double *flatten(cattr_tensor *const *attr, const cattr_tensor *delta, int64_t *n) {
    int64_t total = 0;
    for (int i = 0; i < 16; i++) total += attr[i] ? cattr_tensor_numel(attr[i]) : 0;
    total += delta ? cattr_tensor_numel(delta) : 0;
    double *v = malloc((size_t)(total + 1) * sizeof *v);
    if (!v) return NULL;
    int64_t k = 0;
    for (int i = 0; i <= 16; i++) {
        const cattr_tensor *t = i < 16 ? attr[i] : delta;
        for (int64_t j = 0; t && j < cattr_tensor_numel(t); j++) v[k++] = cx_tensor_get(t, j);
    }
    *n = total;
    return v;
}

/* Compare mode: runs the call of a case again on device B and records the differences. */
static void cmp_case(replay_opts *o, const char *name, const cattr_model *m, const cattr_attr_params *p,
                     const case_data *d, cattr_tensor *const *attr, const cattr_tensor *delta, bool want_delta) {
    cattr_attr_params pb = *p;
    pb.device = o->cmp->device_b;
    cattr_explainer *e = NULL;
    cattr_tensor *attr_b[16] = {0}, *delta_b = NULL;
    cattr_status st = cattr_explainer_new(m, &pb, &e);
    if (st == CATTR_OK) {
        cattr_call call = {(const cattr_tensor *const *)d->inputs, d->n_in, (const cattr_tensor *const *)d->baselines,
                           &d->target, (const cattr_tensor *const *)d->additional, d->n_add,
                           d->have_masks ? (const cattr_tensor *const *)d->masks : NULL,
                           d->draws, (const char *const *)d->roles, d->n_draws,
                           d->have_layer_masks ? (const cattr_tensor *const *)d->layer_masks : NULL, d->n_layer_masks,
                           d->layer_baseline};
        st = cattr_explainer_run(e, &call, attr_b, want_delta ? &delta_b : NULL);
    }
    if (st != CATTR_OK) {
        printf("FAIL %s on %s: %s\n", name, o->cmp->device_b, cattr_last_error());
        o->failed++;
    } else {
        int64_t na = 0, nb = 0;
        double *a = flatten(attr, delta, &na), *b = flatten(attr_b, delta_b, &nb);
        if (!a || !b || na != nb) {
            printf("FAIL %s on %s: results of different sizes (%lld and %lld values)\n", name, o->cmp->device_b,
                   (long long)na, (long long)nb);
            o->failed++;
        } else {
            cmp_record(o->cmp, &o->passed, &o->failed, name, cattr_method_name(p->method), a, b, na);
        }
        free(a);
        free(b);
    }
    for (int i = 0; i < 16; i++) cattr_tensor_free(attr_b[i]);
    cattr_tensor_free(delta_b);
    cattr_explainer_free(e);
}

static int replay_case(const char *dir, replay_opts *o) {
    char path[4096], file[4096], why[5120] = "";
    snprintf(path, sizeof path, "%s/case.json", dir);
    snprintf(file, sizeof file, "%s", path); /* the case file, for the messages */
    char *text = read_text(path);
    if (!text) {
        (void)cli_usage_error("cannot read '%s'", path);
        return -1;
    }
    cJSON *c = cJSON_Parse(text);
    free(text);
    if (!c) {
        (void)cli_usage_error("'%s' is not valid JSON", path);
        return -1;
    }
    const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "kind"));
    if (kind && !strcmp(kind, "metric")) { /* a golden case of Captum's metrics (replay_metric.c) */
        int mrc = replay_metric_case(dir, file, c, o);
        cJSON_Delete(c);
        return mrc;
    }
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "name"));
    const char *method = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "method"));
    const char *inner_m = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "inner_method"));
    if (method && !strcmp(method, "NoiseTunnel")) method = inner_m; /* nt_type is a parameter of the method */
    if (method && !strcmp(method, "DataLoaderAttribution")) { /* the wrapped method over the concatenated dataset */
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(c, "constructor");
        const cJSON *am = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(k, "args"), "attr_method");
        method = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(am, "class"));
    }
    bool lime_base = method && !strcmp(method, "LimeBase"); /* Lime with the kernel and model named in the case */
    if (lime_base) method = "Lime";
    if (!name) name = dir;
    if (!method || !implemented(method)) {
        printf("SKIP %s method %s not implemented yet\n", name, method ? method : "?");
        o->skipped++;
        cJSON_Delete(c);
        return 0;
    }
    snprintf(path, sizeof path, "%s/tensors.safetensors", dir);
    cattr_tensor_set *set = NULL;
    cattr_status st = cattr_tensor_set_load(path, &set);
    if (st != CATTR_OK) {
        (void)cli_usage_error("%s", cattr_last_error());
        cJSON_Delete(c);
        return -1;
    }
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    cattr_model *m = NULL;
    case_data d;
    memset(&d, 0, sizeof d);
    cattr_explainer *e = NULL;
    cattr_tensor *attr[16] = {0}, *delta = NULL;
    double *times = NULL;
    int rc = 0;
    st = cattr_model_load_onnx(path, &m);
    if (st == CATTR_OK) st = cattr_model_set_device(m, o->device);
    if (st != CATTR_OK) {
        printf("FAIL %s model err=load allowed=0 (%s)\n", name, cattr_last_error());
        o->failed++;
        goto done;
    }
    if (!load_case(file, c, set, &d, why, sizeof why)) {
        printf("FAIL %s case err=data allowed=0 (%s)\n", name, why);
        o->failed++;
        goto done;
    }
    cattr_attr_params p = cattr_attr_default_params((cattr_method)cattr_method_from_name(method));
    p.dtype = o->dtype;
    const cJSON *v;
    /* every count read from the case within the C API's limits (and the command line's: docs/CLI.md), so that a
     * misread or hostile case is refused with the file, the field and the value instead of running for hours */
    bool ok = true;
    if (ok && (v = arg(c, "n_steps"))) ok = case_int_param(file, "n_steps", v, 1, CX_MAX_STEPS, &p.n_steps, why, sizeof why);
    if (ok && (v = arg(c, "method")) && cJSON_IsString(v)) {
        int q = cattr_quadrature_from_name(v->valuestring);
        if (q < 0) {
            snprintf(why, sizeof why, "%s: method (the quadrature) must be one of riemann_left, riemann_right, "
                     "riemann_middle, riemann_trapezoid or gausslegendre (got '%s')", file, v->valuestring);
            ok = false;
        }
        p.quadrature = (cattr_quadrature)q;
    }
    if (ok && (v = arg(c, "internal_batch_size")))
        ok = case_int_param(file, "internal_batch_size", v, 1, CX_MAX_INTERNAL_BATCH, &p.internal_batch_size, why,
                            sizeof why);
    if (!ok) {
        printf("FAIL %s case err=data allowed=0 (%s)\n", name, why);
        o->failed++;
        goto done;
    }
    if ((v = arg(c, "abs"))) p.abs = cJSON_IsTrue(v);
    if ((v = arg(c, "attribute_to_layer_input"))) p.attribute_to_layer_input = cJSON_IsTrue(v);
    {
        const cJSON *ly = cJSON_GetObjectItemCaseSensitive(c, "layer");
        const cJSON *paths = cJSON_GetObjectItemCaseSensitive(ly, "paths");
        if (cJSON_IsArray(paths) && cJSON_GetArraySize(paths) == 1) p.layer = cJSON_GetArrayItem(paths, 0)->valuestring;
    }
    if ((v = arg(c, "return_input_shape")) && cJSON_IsFalse(v)) p.return_coefficients = 1;
    if (ok && (v = arg(c, "perturbations_per_eval")))
        ok = case_int_param(file, "perturbations_per_eval", v, 1, CX_MAX_PERTURBATIONS, &p.perturbations_per_eval, why,
                            sizeof why);
    if (ok && (v = arg(c, "perturbations_per_pass")))
        ok = case_int_param(file, "perturbations_per_pass", v, 1, CX_MAX_PERTURBATIONS, &p.perturbations_per_eval, why,
                            sizeof why);
    if (ok && (v = arg(c, "n_samples")))
        ok = case_int_param(file, "n_samples", v, 1, CX_MAX_SAMPLES, &p.n_samples, why, sizeof why);
    if ((v = arg(c, "stdevs")) && cJSON_IsNumber(v)) p.stdevs = v->valuedouble;
    if (ok && (v = arg(c, "nt_samples")))
        ok = case_int_param(file, "nt_samples", v, 1, CX_MAX_NT_SAMPLES, &p.nt_samples, why, sizeof why);
    if (ok && (v = arg(c, "nt_samples_batch_size")))
        ok = case_int_param(file, "nt_samples_batch_size", v, 1, CX_MAX_NT_SAMPLES, &p.nt_samples_batch_size, why,
                            sizeof why);
    if ((v = arg(c, "draw_baseline_from_distrib"))) p.draw_baseline_from_distrib = cJSON_IsTrue(v);
    if ((v = arg(c, "nt_type")) && cJSON_IsString(v))
        p.nt_type = !strcmp(v->valuestring, "smoothgrad_sq") ? CATTR_NT_SMOOTHGRAD_SQ
                    : !strcmp(v->valuestring, "vargrad")     ? CATTR_NT_VARGRAD
                                                             : CATTR_NT_SMOOTHGRAD;
    for (int k = 0; k < 2; k++) { /* sliding_window_shapes / strides: one list (or int) per input */
        const cJSON *w = arg(c, k ? "strides" : "sliding_window_shapes");
        if (!w) continue;
        int idx = 0;
        const cJSON *per;
        if (cJSON_IsNumber(w)) w = NULL; /* a single int stride applies to every dim: handled below */
        /* Captum takes a single (non-tuple) input's window and strides as one flat tuple, (1, 3, 3): all numbers, with
         * one input, are that input's dims (with several inputs, a flat strides tuple holds one int per input) */
        bool flat = w && cJSON_GetArraySize(w) > 0;
        cJSON_ArrayForEach(per, w) flat = flat && cJSON_IsNumber(per);
        const cJSON *ins = cJSON_GetObjectItemCaseSensitive(arg(c, "inputs"), "tensors");
        const char *wname = k ? "strides" : "sliding_window_shapes";
        char field[96];
        long long x = 0;
        /* each size from 1 (its bound, the input's size, is the library's check) */
        if (flat && (k == 0 || cJSON_GetArraySize(ins) <= 1)) {
            int nd = 0;
            ok = ok && case_count(file, wname, w, CATTR_MAX_DIMS, why, sizeof why);
            cJSON_ArrayForEach(per, w) {
                snprintf(field, sizeof field, "%s[%d]", wname, nd);
                if (!ok || !(ok = case_int(file, field, per, 1, CASE_MAX_INDEX, &x, why, sizeof why))) break;
                (k ? p.strides : p.sliding_window)[0][nd++] = (int64_t)x;
            }
            (k ? p.strides_ndim : p.sliding_window_ndim)[0] = nd;
            continue;
        }
        ok = ok && case_count(file, wname, w, CATTR_MAX_INPUTS, why, sizeof why);
        cJSON_ArrayForEach(per, w) {
            if (!ok) break;
            int nd = 0;
            const cJSON *dim;
            if (cJSON_IsNumber(per)) {
                snprintf(field, sizeof field, "%s[%d]", wname, idx);
                if (!(ok = case_int(file, field, per, 1, CASE_MAX_INDEX, &x, why, sizeof why))) break;
                (k ? p.strides : p.sliding_window)[idx][nd++] = (int64_t)x;
            } else {
                snprintf(field, sizeof field, "%s[%d]", wname, idx);
                if (!(ok = case_count(file, field, per, CATTR_MAX_DIMS, why, sizeof why))) break;
                cJSON_ArrayForEach(dim, per) {
                    snprintf(field, sizeof field, "%s[%d][%d]", wname, idx, nd);
                    if (!(ok = case_int(file, field, dim, 1, CASE_MAX_INDEX, &x, why, sizeof why))) break;
                    (k ? p.strides : p.sliding_window)[idx][nd++] = (int64_t)x;
                }
            }
            (k ? p.strides_ndim : p.sliding_window_ndim)[idx++] = nd;
        }
        if (ok && k && !w && (v = arg(c, "strides")) && cJSON_IsNumber(v)) {
            ok = case_int(file, "strides", v, 1, CASE_MAX_INDEX, &x, why, sizeof why);
            for (int t = 0; t < CATTR_MAX_INPUTS && ok; t++) {
                p.strides_ndim[t] = -1; /* -1: one stride for every dim */
                p.strides[t][0] = (int64_t)x;
            }
        }
    }
    if (!ok) {
        printf("FAIL %s case err=data allowed=0 (%s)\n", name, why);
        o->failed++;
        goto done;
    }
    /* constructor arguments: of the wrapped method for NoiseTunnel */
    const cJSON *ctor = cJSON_GetObjectItemCaseSensitive(c, "constructor");
    const cJSON *inner = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ctor, "args"), "attribution_method");
    const cJSON *cargs = inner ? inner : ctor;
    const cJSON *ca = cJSON_GetObjectItemCaseSensitive(cargs, "args"), *cd = cJSON_GetObjectItemCaseSensitive(cargs, "defaults");
    if ((v = cJSON_GetObjectItemCaseSensitive(ca, "multiply_by_inputs")) || (v = cJSON_GetObjectItemCaseSensitive(cd, "multiply_by_inputs")))
        p.multiply_by_inputs = cJSON_IsTrue(v);
    if (((v = cJSON_GetObjectItemCaseSensitive(ca, "eps")) || (v = cJSON_GetObjectItemCaseSensitive(cd, "eps"))) && cJSON_IsNumber(v))
        p.eps = v->valuedouble;
    if (lime_base) {
        const cJSON *sim = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ca, "similarity_func"), "args");
        const cJSON *im = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ca, "interpretable_model"), "args");
        const char *dm = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sim, "distance_mode"));
        p.lime_euclidean = dm && !strcmp(dm, "euclidean");
        p.return_coefficients = 1; /* LimeBase returns the interpretable model's coefficients */
        if ((v = cJSON_GetObjectItemCaseSensitive(sim, "kernel_width")) && cJSON_IsNumber(v)) p.kernel_width = v->valuedouble;
        if ((v = cJSON_GetObjectItemCaseSensitive(im, "alpha")) && cJSON_IsNumber(v)) p.lime_alpha = v->valuedouble;
    }
    if (!load_extras(file, c, set, o->dtype, &d, why, sizeof why)) {
        printf("FAIL %s case err=data allowed=0 (%s)\n", name, why);
        o->failed++;
        goto done;
    }
    p.node_rules = d.rules;
    p.n_node_rules = d.n_rules;
    if (d.n_layer_names) {
        p.layers = d.layer_names;
        p.n_layers = d.n_layer_names;
        p.layer = d.layer_names[0];
        p.attribute_to_layer_input = 0; /* the names already are the inputs' tensors where asked */
    }
    if ((v = arg(c, "relu_attributions"))) p.relu_attributions = cJSON_IsTrue(v);
    if ((v = arg(c, "attr_dim_summation"))) p.attr_dim_summation = cJSON_IsTrue(v);
    const cJSON *ns = arg(c, "neuron_selector");
    if (ns) {
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ns, "kind"));
        const cJSON *ix = cJSON_GetObjectItemCaseSensitive(ns, "index"), *it2;
        char field[96];
        long long x = 0;
        if (kind && !strcmp(kind, "function")) {
            p.neuron_kind = CATTR_NEURON_SUM;
            const cJSON *dims = cJSON_GetObjectItemCaseSensitive(ns, "dims");
            ok = case_count(file, "neuron_selector.dims", dims, CATTR_MAX_DIMS, why, sizeof why);
            cJSON_ArrayForEach(it2, dims) {
                snprintf(field, sizeof field, "neuron_selector.dims[%d]", p.neuron_sum_ndim);
                if (!ok || !(ok = case_int(file, field, it2, -CATTR_MAX_DIMS, CATTR_MAX_DIMS, &x, why, sizeof why))) break;
                p.neuron_sum_dims[p.neuron_sum_ndim++] = (int64_t)x;
            }
        } else {
            bool slices = kind && !strcmp(kind, "slices");
            p.neuron_kind = slices ? CATTR_NEURON_SLICES : CATTR_NEURON_INDEX;
            ok = case_count(file, "neuron_selector.index", ix, CATTR_MAX_DIMS, why, sizeof why);
            cJSON_ArrayForEach(it2, ix) {
                int k = p.neuron_ndim;
                if (!ok) break;
                const cJSON *sl = cJSON_GetObjectItemCaseSensitive(it2, "slice");
                if (cJSON_IsArray(sl)) {
                    for (int q = 0; q < 3 && ok; q++) {
                        const cJSON *e3 = cJSON_GetArrayItem(sl, q);
                        snprintf(field, sizeof field, "neuron_selector.index[%d].slice[%d]", k, q);
                        if (cJSON_IsNumber(e3))
                            ok = case_int(file, field, e3, q == 2 ? 1 : -CASE_MAX_INDEX, CASE_MAX_INDEX, &x, why,
                                          sizeof why);
                        p.neuron_slice[k][q] = cJSON_IsNumber(e3) ? (int64_t)x : (q == 1 ? INT64_MAX : q == 2 ? 1 : 0);
                    }
                } else {
                    snprintf(field, sizeof field, "neuron_selector.index[%d]", k);
                    if (!(ok = case_int(file, field, it2, -CASE_MAX_INDEX, CASE_MAX_INDEX, &x, why, sizeof why))) break;
                    p.neuron_index[k] = (int64_t)x;
                    p.neuron_slice[k][0] = p.neuron_index[k];
                    p.neuron_slice[k][1] = p.neuron_index[k] + 1;
                    p.neuron_slice[k][2] = 1;
                    p.neuron_slice_is_index[k] = 1;
                }
                p.neuron_ndim++;
            }
        }
        if (!ok) {
            printf("FAIL %s case err=data allowed=0 (%s)\n", name, why);
            o->failed++;
            goto done;
        }
    }
    bool want_delta = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "return_convergence_delta"));
    p.return_convergence_delta = want_delta;
    st = cattr_explainer_new(m, &p, &e);
    if (st == CATTR_ERR_UNSUPPORTED) { /* e.g. NoiseTunnel around a method, before the engine has it */
        printf("SKIP %s %s\n", name, cattr_last_error());
        o->skipped++;
        goto done;
    }
    int runs = o->runs > 0 ? o->runs : 1;
    times = calloc((size_t)runs, sizeof *times);
    for (int r = 0; r < runs && st == CATTR_OK; r++) {
        for (int i = 0; i < 16; i++) {
            cattr_tensor_free(attr[i]);
            attr[i] = NULL;
        }
        cattr_tensor_free(delta);
        delta = NULL;
        double t0 = now_s();
        cattr_call call = {(const cattr_tensor *const *)d.inputs, d.n_in, (const cattr_tensor *const *)d.baselines,
                           &d.target, (const cattr_tensor *const *)d.additional, d.n_add,
                           d.have_masks ? (const cattr_tensor *const *)d.masks : NULL,
                           d.draws, (const char *const *)d.roles, d.n_draws,
                           d.have_layer_masks ? (const cattr_tensor *const *)d.layer_masks : NULL, d.n_layer_masks,
                           d.layer_baseline};
        st = cattr_explainer_run(e, &call, attr, want_delta ? &delta : NULL);
        times[r] = now_s() - t0;
    }
    if (st != CATTR_OK) {
        printf("FAIL %s attribute err=error allowed=0 (%s)\n", name, cattr_last_error());
        o->failed++;
        goto done;
    }
    if (o->cmp) { /* the same call on the second device, every result tensor against device A's */
        cmp_case(o, name, m, &p, &d, attr, delta, want_delta);
        goto done;
    }
    /* compare every expected tensor, then the delta */
    bool f32 = o->dtype == CATTR_FLOAT32;
    const char *tolkey = f32 ? "vs_f32_reference" : "vs_f64_reference";
    double worst = 0;
    char worst_name[128] = "", fail_name[128] = "";
    double fail_err = 0, fail_allowed = 0;
    bool failed = false;
    const cJSON *ex;
    int ordinal = 0; /* layer methods: expected tensors in the order of the layers' tensors */
    cJSON_ArrayForEach(ex, cJSON_GetObjectItemCaseSensitive(c, "expected")) {
        const char *en = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ex, f32 ? "f32_name" : "name"));
        const cJSON *tol = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ex, "tolerance"), tolkey);
        const cJSON *ii = cJSON_GetObjectItemCaseSensitive(ex, "input_index");
        int idx = cJSON_IsNumber(ii) ? (ii->valuedouble >= 0 && ii->valuedouble < 16 ? (int)ii->valuedouble : -1)
                                     : ordinal;
        ordinal++;
        const cattr_tensor *et = en ? cattr_tensor_set_get(set, en) : NULL;
        if (!et || !tol || idx < 0 || idx >= 16 || !attr[idx]) {
            printf("FAIL %s %s err=missing allowed=0\n", name, en ? en : "?");
            o->failed++;
            goto done;
        }
        const cJSON *rt = cJSON_GetObjectItemCaseSensitive(tol, "rtol"), *at = cJSON_GetObjectItemCaseSensitive(tol, "atol");
        if (!cJSON_IsNumber(rt) || !cJSON_IsNumber(at)) {
            printf("FAIL %s %s err=data allowed=0 (%s: its tolerance %s needs numbers rtol and atol)\n", name, en, file,
                   tolkey);
            o->failed++;
            goto done;
        }
        double rtol = rt->valuedouble, atol = at->valuedouble;
        double err, allowed;
        if (cattr_tensor_numel(et) != cattr_tensor_numel(attr[idx])) {
            printf("FAIL %s %s err=shape allowed=0\n", name, en);
            o->failed++;
            goto done;
        }
        replay_compare(attr[idx], et, rtol, atol, &err, &allowed);
        double ratio = allowed > 0 ? err / allowed : (err > 0 ? INFINITY : 0);
        if (!(err <= allowed) && (!failed || ratio > fail_err / (fail_allowed > 0 ? fail_allowed : 1))) {
            failed = true;
            snprintf(fail_name, sizeof fail_name, "%s", en);
            fail_err = err;
            fail_allowed = allowed;
        }
        if (ratio >= worst) {
            worst = ratio;
            snprintf(worst_name, sizeof worst_name, "%s", en);
        }
    }
    const cJSON *dj = cJSON_GetObjectItemCaseSensitive(c, "delta");
    if (want_delta && dj && !cJSON_IsNull(dj)) {
        const char *dn = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(dj, f32 ? "f32_name" : "name"));
        const cJSON *tol = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(dj, "tolerance"), tolkey);
        const cattr_tensor *et = dn ? cattr_tensor_set_get(set, dn) : NULL;
        if (!et || !tol || !delta || cattr_tensor_numel(et) != cattr_tensor_numel(delta)) {
            printf("FAIL %s delta err=missing allowed=0\n", name);
            o->failed++;
            goto done;
        }
        const cJSON *at = cJSON_GetObjectItemCaseSensitive(tol, "atol");
        if (!cJSON_IsNumber(at)) {
            printf("FAIL %s delta err=data allowed=0 (%s: the delta's tolerance %s needs a number atol)\n", name, file,
                   tolkey);
            o->failed++;
            goto done;
        }
        double atol = at->valuedouble, err, allowed;
        replay_compare(delta, et, 0.0, atol, &err, &allowed);
        double ratio = allowed > 0 ? err / allowed : (err > 0 ? INFINITY : 0);
        if (!(err <= allowed) && (!failed || ratio > fail_err / (fail_allowed > 0 ? fail_allowed : 1))) {
            failed = true;
            snprintf(fail_name, sizeof fail_name, "%s", dn);
            fail_err = err;
            fail_allowed = allowed;
        }
        if (ratio >= worst) worst = ratio;
    }
    if (failed) {
        printf("FAIL %s %s err=%.3e allowed=%.3e\n", name, fail_name, fail_err, fail_allowed);
        o->failed++;
    } else {
        printf("PASS %s %.3e\n", name, worst);
        o->passed++;
    }
    if (o->runs > 0) print_time(times, runs);
    if (o->digest)
        printf("digest %s %016llx\n", name,
               (unsigned long long)digest_of(&delta, 1, digest_of(attr, 16, 14695981039346656037ull)));
done:
    fflush(stdout);
    free(times);
    for (int i = 0; i < 16; i++) cattr_tensor_free(attr[i]);
    cattr_tensor_free(delta);
    cattr_explainer_free(e);
    case_free(&d);
    cattr_model_free(m);
    cattr_tensor_set_free(set);
    cJSON_Delete(c);
    return rc;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* A case folder, or a folder holding case folders (sorted by name). */
int replay_path(const char *path, replay_opts *o) {
    char buf[4096];
    struct stat sb;
    if (stat(path, &sb) != 0) {
        (void)cli_usage_error("'%s': no such file or directory", path);
        return -1;
    }
    if (ends_with(path, ".jsonl")) {
        if (!o->tokenizer) {
            (void)cli_usage_error("'%s' holds tokenizer cases: give --tokenizer DIR (a folder with tokenizer.json)",
                    path);
            return -1;
        }
        return replay_tokenizer(path, o->tokenizer, &o->passed, &o->failed);
    }
    if (ends_with(path, "cases.json")) return replay_llm_index(path, o);
    snprintf(buf, sizeof buf, "%s/case.json", path);
    if (stat(buf, &sb) == 0) return replay_case(path, o);
    DIR *dir = opendir(path);
    if (dir) { /* a language-model golden folder: every *cases.json index in it */
        char **idx = NULL;
        int ni = 0;
        struct dirent *de;
        while ((de = readdir(dir)))
            if (ends_with(de->d_name, "cases.json")) {
                char **nn = realloc(idx, (size_t)(ni + 1) * sizeof *nn);
                if (!nn) break;
                idx = nn;
                idx[ni++] = strdup(de->d_name);
            }
        closedir(dir);
        if (ni) {
            qsort(idx, (size_t)ni, sizeof *idx, cmp_str);
            int rc = 0;
            for (int i = 0; i < ni && rc == 0; i++) {
                snprintf(buf, sizeof buf, "%s/%s", path, idx[i]);
                rc = replay_llm_index(buf, o);
            }
            for (int i = 0; i < ni; i++) free(idx[i]);
            free(idx);
            return rc;
        }
        free(idx);
        dir = opendir(path);
    }
    if (!dir) {
        (void)cli_usage_error("'%s' is neither a case folder nor a folder of cases", path);
        return -1;
    }
    char **names = NULL;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        if (de->d_name[0] == '.') continue;
        snprintf(buf, sizeof buf, "%s/%s/case.json", path, de->d_name);
        if (stat(buf, &sb) != 0) continue;
        char **nn = realloc(names, (size_t)(n + 1) * sizeof *nn);
        if (!nn) break;
        names = nn;
        names[n++] = strdup(de->d_name);
    }
    closedir(dir);
    if (n == 0) {
        (void)cli_usage_error("'%s' holds no case folders (no */case.json)", path);
        free(names);
        return -1;
    }
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        snprintf(buf, sizeof buf, "%s/%s", path, names[i]);
        rc = replay_case(buf, o);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

static void replay_help(FILE *f) {
    fprintf(f, "usage: cattr replay PATH... [--dtype float64|float32] [--device NAME] [--runs N] [--digest] [--tokenizer DIR]\n"
               "\n"
               "Re-runs recorded Captum attributions (golden case folders: case.json, model.onnx,\n"
               "tensors.safetensors) and compares cattr's numbers with them.\n"
               "  PATH            a case folder, or a folder holding case folders; a language-model golden\n"
               "                  folder or one of its *cases.json indexes; a tokenizer .jsonl (with --tokenizer)\n"
               "  --dtype D       float64 (default): compare with the float64 reference and its tolerances;\n"
               "                  float32: compare with the f32.* tensors\n"
               "  --device NAME   cpu (default) | cpu-check (reference kernels, protected memory) | cuda[:N]\n"
               "  --runs N        run each attribution N times and print 'time: first=<s> warm_median=<s>'\n"
               "  --digest        after each case, print 'digest <case> <hash>' (Captum cases): a hash of the result bits\n"
               "                  (attributions and delta), equal exactly when two builds or machines agree\n"
               "Output: PASS <case> <ratio> | FAIL <case> <tensor> err=<e> allowed=<a> | SKIP <case> <reason>,\n"
               "then 'N passed, N failed, N skipped'. Exit 0: no failure and at least one pass; 1: a failure;\n"
               "2: usage or I/O error.\n");
}

int cmd_replay(int argc, char **argv) {
    replay_opts o = {CATTR_FLOAT64, 0, 0, 0, 0, NULL, NULL, NULL, false};
    const char *paths[256];
    int np = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            replay_help(stdout);
            return CLI_OK;
        } else if (!strcmp(a, "--dtype")) {
            if (++i >= argc) return cli_usage_error("--dtype needs a value");
            if (!strcmp(argv[i], "float64")) o.dtype = CATTR_FLOAT64;
            else if (!strcmp(argv[i], "float32")) o.dtype = CATTR_FLOAT32;
            else return cli_usage_error("--dtype must be float64 or float32, not '%s'", argv[i]);
        } else if (!strcmp(a, "--device")) {
            if (++i >= argc) return cli_usage_error("--device needs a name");
            if (!cli_device_arg(argv[i])) return CLI_USAGE;
            o.device = argv[i];
        } else if (!strcmp(a, "--tokenizer")) {
            if (++i >= argc) return cli_usage_error("--tokenizer needs a folder");
            o.tokenizer = argv[i];
        } else if (!strcmp(a, "--digest")) {
            o.digest = true;
        } else if (!strcmp(a, "--runs")) {
            long long n;
            if (++i >= argc) return cli_usage_error("--runs needs a value");
            if (!cli_int_arg(a, argv[i], 1, 1000000, &n)) return CLI_USAGE;
            o.runs = (int)n;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("replay: unknown option '%s' (see cattr replay --help)", a);
        } else if (np < 256) {
            paths[np++] = a;
        }
    }
    if (np == 0) {
        replay_help(stderr);
        return CLI_USAGE;
    }
    for (int i = 0; i < np; i++)
        if (replay_path(paths[i], &o) != 0) return CLI_USAGE;
    printf("%d passed, %d failed, %d skipped\n", o.passed, o.failed, o.skipped);
    if (o.failed) return CLI_FAIL;
    return o.passed > 0 ? CLI_OK : CLI_FAIL;
}
