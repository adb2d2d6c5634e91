/* serve_req.c - `cattr serve`'s request decoder (serve.h): a KServe V1 body into input tensors and explain's command
 * line. Everything the body says is checked here or by explain's own parser, whose messages the answer carries. */
#define _POSIX_C_SOURCE 200809L
#include "serve.h"
#include "cli.h"

#include "io/tensorio.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The explanation's fields: Captum's argument names where Captum has one (IntegratedGradients.attribute's n_steps,
 * baselines, internal_batch_size, ...; "quadrature" for IG's own "method", which names the attribution method here),
 * each to explain's option. Kinds: 's' a string, 'i' an integer or a string (n_steps "auto", max_memory "2G"),
 * 'n' a number, 'l' an integer or a list of integers (joined with commas), 'b' a flag given when true, 'B' a flag
 * given when false, 't' the target, 'T' a number or (one-input models) nested lists of numbers: one instance's shape
 * (every instance's) or the instances' (a float32 tensor), 'M' the same lists of integers (an int64 tensor). */
typedef struct {
    const char *key, *flag;
    char kind;
} opt_map;

static const opt_map OPTS[] = {
    {"method", "--method", 's'},
    {"target", NULL, 't'},
    {"n_steps", "--steps", 'i'},
    {"delta_tol", "--delta-tol", 'n'},
    {"max_steps", "--max-steps", 'i'},
    {"quadrature", "--quadrature", 's'},
    {"internal_batch_size", "--internal-batch-size", 'i'},
    {"max_memory", "--max-memory", 'i'},
    {"dtype", "--dtype", 's'},
    {"precision", "--precision", 's'},
    {"n_samples", "--n-samples", 'i'},
    {"perturbations_per_eval", "--perturbations-per-eval", 'i'},
    {"seed", "--seed", 'i'},
    {"baselines", "--baseline", 'T'},
    {"feature_mask", "--feature-mask", 'M'},
    {"layer", "--layer", 's'},
    {"neuron_selector", "--neuron", 'l'},
    {"attribute_to_layer_input", "--layer-input", 'b'},
    {"eps", "--eps", 'n'},
    {"sliding_window_shapes", "--sliding-window", 'l'},
    {"strides", "--strides", 'l'},
    {"stdevs", "--stdevs", 'n'},
    {"nt_type", "--noise-tunnel", 's'},
    {"nt_samples", "--nt-samples", 'i'},
    {"nt_samples_batch_size", "--nt-samples-batch-size", 'i'},
    {"draw_baseline_from_distrib", "--draw-baseline-from-distrib", 'b'},
    {"abs", "--signed", 'B'},
    {"multiply_by_inputs", "--no-multiply-by-inputs", 'B'},
    {"return_convergence_delta", "--no-delta", 'B'},
};
#define N_OPTS (int)(sizeof OPTS / sizeof OPTS[0])

const char *serve_known_options(void) {
    static char list[1024];
    if (!list[0]) {
        size_t off = 0;
        for (int i = 0; i < N_OPTS && off < sizeof list; i++)
            off += (size_t)snprintf(list + off, sizeof list - off, "%s%s", i ? ", " : "", OPTS[i].key);
    }
    return list;
}

static int fail(char *err, size_t errsz, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errsz, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errsz, fmt, ap);
    va_end(ap);
    return 400;
}

static bool add_arg(serve_req *r, const char *s) {
    if (r->argc >= SERVE_MAXARG) return false;
    char *c = strdup(s);
    if (!c) return false;
    r->argv[r->argc++] = c;
    return true;
}

void serve_req_free(serve_req *r) {
    for (int i = 0; i < r->argc; i++) free(r->argv[i]);
    for (int i = 0; i < r->n_inputs; i++) cattr_tensor_free(r->inputs[i]);
    for (int i = 0; i < r->n_side; i++) cattr_tensor_free(r->side[i]);
    memset(r, 0, sizeof *r);
}

/* The shape of nested lists, along their first entries; -1 past CATTR_MAX_DIMS - 1 dims (the batch dim comes on top) */
static int json_shape(const cJSON *v, int64_t *shape) {
    int nd = 0;
    while (cJSON_IsArray(v)) {
        if (nd >= CATTR_MAX_DIMS - 1) return -1;
        shape[nd++] = cJSON_GetArraySize(v);
        v = v->child;
        if (!v) break;
    }
    return nd;
}

static const char *json_kind(const cJSON *v) {
    return cJSON_IsNumber(v) ? "a number" : cJSON_IsString(v) ? "a string" : cJSON_IsArray(v) ? "a list"
           : cJSON_IsObject(v) ? "an object" : cJSON_IsBool(v) ? "a boolean" : "null";
}

/* Writes the numbers of v, which must have shape[0..nd), at out + *k; where names v in messages */
static bool json_fill(const cJSON *v, const int64_t *shape, int nd, float *out, int64_t *k, char *where, size_t wsz,
                      char *err, size_t errsz) {
    if (nd == 0) {
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
            fail(err, errsz, "%s: %s where a finite number belongs", where, cJSON_IsNumber(v) ? "not finite" : json_kind(v));
            return false;
        }
        out[(*k)++] = (float)v->valuedouble;
        return true;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != shape[0]) {
        fail(err, errsz, "%s: %s%s where a list of %lld belongs (every instance needs the first one's shape)", where,
             json_kind(v), cJSON_IsArray(v) ? " of another length" : "", (long long)shape[0]);
        return false;
    }
    size_t len = strlen(where);
    int i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        snprintf(where + len, wsz - len, "[%d]", i);
        if (!json_fill(c, shape + 1, nd - 1, out, k, where, wsz, err, errsz)) return false;
    }
    where[len] = '\0';
    return true;
}

/* Input j of every instance (ins[b] itself, or its member `name`) stacked into a float32 [B, ...] tensor. */
static int stack_input(const cJSON *inst, int64_t B, const char *name, size_t body_len, cattr_tensor **out, char *err,
                       size_t errsz) {
    const cJSON *first = name ? cJSON_GetObjectItemCaseSensitive(inst->child, name) : inst->child;
    int64_t shape[CATTR_MAX_DIMS];
    shape[0] = B;
    int nd = json_shape(first, shape + 1);
    if (nd < 0) return fail(err, errsz, "instances[0]%s%s%s: more than %d dims", name ? "[\"" : "", name ? name : "",
                            name ? "\"]" : "", CATTR_MAX_DIMS - 1);
    /* a whole tensor takes at least two bytes a number ("0,"): more elements than that are ragged lists */
    double total = (double)B;
    for (int d = 1; d <= nd; d++) total *= (double)shape[d];
    if (total > (double)(body_len / 2 + 1))
        return fail(err, errsz, "instances%s%s%s: the lists are ragged (instance 0's first entries give shape %lld x ...)",
                    name ? "[...][\"" : "", name ? name : "", name ? "\"]" : "", (long long)shape[1 <= nd ? 1 : 0]);
    cattr_tensor *t = NULL;
    if (cattr_tensor_new(CATTR_FLOAT32, nd + 1, shape, &t) != CATTR_OK)
        return fail(err, errsz, "instances: cannot make the tensor: %s", cattr_last_error());
    float *data = cattr_tensor_data(t);
    int64_t k = 0, b = 0;
    char where[256];
    for (const cJSON *e = inst->child; e; e = e->next, b++) {
        const cJSON *v = e;
        if (name) {
            if (!cJSON_IsObject(e)) {
                cattr_tensor_free(t);
                return fail(err, errsz, "instances[%lld]: %s where an object with a value per input belongs",
                            (long long)b, json_kind(e));
            }
            v = cJSON_GetObjectItemCaseSensitive(e, name);
            if (!v) {
                cattr_tensor_free(t);
                return fail(err, errsz, "instances[%lld]: no value for input '%s'", (long long)b, name);
            }
            snprintf(where, sizeof where, "instances[%lld][\"%.64s\"]", (long long)b, name);
        } else {
            snprintf(where, sizeof where, "instances[%lld]", (long long)b);
        }
        if (!json_fill(v, shape + 1, nd, data, &k, where, sizeof where, err, errsz)) {
            cattr_tensor_free(t);
            return 400;
        }
    }
    *out = t;
    return 0;
}

/* A baseline or feature mask given as nested lists (kind 'T' or 'M'): a tensor of one instance's shape ([1, ...]: every
 * instance's) or of the instances' ([B, ...]), kept in r->side; *name its "@S<k>" */
static int side_tensor(serve_req *r, const opt_map *o, const cJSON *v, char *name, size_t nsz, char *err, size_t errsz) {
    if (r->n_inputs != 1)
        return fail(err, errsz, "explanation.%s: lists are for a one-input model (this one has %d inputs): give a "
                                "number", o->key, r->n_inputs);
    if (r->n_side >= (int)(sizeof r->side / sizeof r->side[0])) return fail(err, errsz, "explanation: too many tensors");
    int64_t shape[CATTR_MAX_DIMS];
    int in_nd = cattr_tensor_ndim(r->inputs[0]), nd = json_shape(v, shape + 1);
    if (nd < 0 || (nd != in_nd - 1 && nd != in_nd))
        return fail(err, errsz, "explanation.%s: nested lists of %d dims: give one instance's shape (%d dims) or the "
                                "instances' (%d dims)", o->key, nd, in_nd - 1, in_nd);
    int off = 1;
    if (nd == in_nd - 1) shape[0] = 1; /* one instance's: broadcast over the batch */
    else off = 0, memmove(shape, shape + 1, (size_t)nd * sizeof *shape);
    double total = 1;
    for (int d = 0; d < in_nd; d++) total *= (double)shape[d];
    if (total > (double)(r->body_len / 2 + 1)) return fail(err, errsz, "explanation.%s: the lists are ragged", o->key);
    cattr_tensor *t = NULL, *ti = NULL;
    if (cattr_tensor_new(CATTR_FLOAT32, in_nd, shape, &t) != CATTR_OK)
        return fail(err, errsz, "explanation.%s: cannot make the tensor: %s", o->key, cattr_last_error());
    char where[256];
    snprintf(where, sizeof where, "explanation.%s", o->key);
    int64_t k = 0;
    if (!json_fill(v, shape + off, nd, cattr_tensor_data(t), &k, where, sizeof where, err, errsz)) {
        cattr_tensor_free(t);
        return 400;
    }
    if (o->kind == 'M') { /* feature groups: integers */
        const float *f = cattr_tensor_data_const(t);
        for (int64_t i = 0; i < k; i++)
            if (f[i] != floorf(f[i]) || fabsf(f[i]) > 16777216.0f) {
                fail(err, errsz, "explanation.%s: entry %lld is %g: feature groups are integers", o->key, (long long)i,
                     (double)f[i]);
                cattr_tensor_free(t); /* after the message that reads it */
                return 400;
            }
        cattr_status st = cattr_tensor_convert(t, CATTR_INT64, &ti);
        cattr_tensor_free(t);
        if (st != CATTR_OK) return fail(err, errsz, "out of memory");
        t = ti;
    }
    snprintf(name, nsz, "@S%d", r->n_side);
    r->side[r->n_side++] = t;
    return 0;
}

static int add_option(serve_req *r, const opt_map *o, const cJSON *v, char *err, size_t errsz) {
    char buf[1024];
    const char *val = NULL;
    bool integral = cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble) &&
                    fabs(v->valuedouble) < 9e15;
    switch (o->kind) {
    case 's':
        if (!cJSON_IsString(v)) return fail(err, errsz, "explanation.%s: a string belongs here, not %s", o->key, json_kind(v));
        val = v->valuestring;
        break;
    case 'i':
        if (cJSON_IsString(v)) val = v->valuestring;
        else if (integral) snprintf(buf, sizeof buf, "%lld", (long long)v->valuedouble), val = buf;
        else return fail(err, errsz, "explanation.%s: an integer belongs here, not %s", o->key, json_kind(v));
        break;
    case 'T':
    case 'M':
        if (cJSON_IsArray(v)) {
            int rc = side_tensor(r, o, v, buf, sizeof buf, err, errsz);
            if (rc) return rc;
            val = buf;
            break;
        }
        if (o->kind == 'M')
            return fail(err, errsz, "explanation.%s: nested lists of integers belong here, not %s", o->key, json_kind(v));
        __attribute__((fallthrough)); /* a number */
    case 'n':
        if (!cJSON_IsNumber(v)) return fail(err, errsz, "explanation.%s: a number belongs here, not %s", o->key, json_kind(v));
        snprintf(buf, sizeof buf, "%.17g", v->valuedouble);
        val = buf;
        break;
    case 'l':
        if (integral) {
            snprintf(buf, sizeof buf, "%lld", (long long)v->valuedouble);
        } else if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > 0 && cJSON_GetArraySize(v) <= CATTR_MAX_DIMS) {
            size_t off = 0;
            for (const cJSON *c = v->child; c; c = c->next) {
                if (!cJSON_IsNumber(c) || c->valuedouble != floor(c->valuedouble) || fabs(c->valuedouble) > 9e15)
                    return fail(err, errsz, "explanation.%s: a list of integers belongs here", o->key);
                off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%lld", off ? "," : "", (long long)c->valuedouble);
            }
        } else {
            return fail(err, errsz, "explanation.%s: an integer or a list of 1 to %d integers belongs here, not %s",
                        o->key, CATTR_MAX_DIMS, json_kind(v));
        }
        val = buf;
        break;
    case 'b':
    case 'B':
        if (!cJSON_IsBool(v)) return fail(err, errsz, "explanation.%s: true or false belongs here, not %s", o->key, json_kind(v));
        if (cJSON_IsTrue(v) != (o->kind == 'b')) return 0; /* the default: no flag */
        return add_arg(r, o->flag) ? 0 : fail(err, errsz, "explanation: too many options");
    case 't': {
        if (integral) {
            snprintf(buf, sizeof buf, "%lld", (long long)v->valuedouble);
            return add_arg(r, "--target") && add_arg(r, buf) ? 0 : fail(err, errsz, "explanation: too many options");
        }
        if (!cJSON_IsArray(v))
            return fail(err, errsz, "explanation.target: an integer (every instance) or a list (one per instance) "
                                    "belongs here, not %s", json_kind(v));
        if (cJSON_GetArraySize(v) != r->n_instances)
            return fail(err, errsz, "explanation.target: %d targets for %lld instances (a list gives one per instance)",
                        cJSON_GetArraySize(v), (long long)r->n_instances);
        size_t cap = 64, off = 0;
        char *s = malloc(cap);
        if (!s) return fail(err, errsz, "out of memory");
        s[0] = '\0';
        for (const cJSON *c = v->child; c; c = c->next) {
            const cJSON *e = cJSON_IsArray(c) ? c->child : c;
            int n = 0;
            for (; e; e = cJSON_IsArray(c) ? e->next : NULL, n++) {
                if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || fabs(e->valuedouble) > 9e15 ||
                    n >= CATTR_MAX_DIMS) {
                    free(s);
                    return fail(err, errsz, "explanation.target: each target is an integer or a list of up to %d "
                                            "integers", CATTR_MAX_DIMS);
                }
                if (off + 32 >= cap) {
                    char *g = realloc(s, cap *= 2);
                    if (!g) {
                        free(s);
                        return fail(err, errsz, "out of memory");
                    }
                    s = g;
                }
                off += (size_t)snprintf(s + off, cap - off, "%s%lld", n ? "," : off ? ";" : "", (long long)e->valuedouble);
            }
            if (n == 0) {
                free(s);
                return fail(err, errsz, "explanation.target: an empty target");
            }
        }
        bool ok = add_arg(r, "--targets") && add_arg(r, s);
        free(s);
        return ok ? 0 : fail(err, errsz, "explanation: too many options");
    }
    }
    return add_arg(r, o->flag) && add_arg(r, val) ? 0 : fail(err, errsz, "explanation: too many options");
}

/* The body as JSON (len bytes), or NULL with where it stops being JSON in err */
static cJSON *parse_body(const char *body, size_t len, char *err, size_t errsz) {
    const char *endp = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &endp, false);
    if (!root) {
        size_t at = endp && endp >= body && endp <= body + len ? (size_t)(endp - body) : 0;
        fail(err, errsz, "the body is not JSON (near byte %zu)", at);
    }
    return root;
}

/* explain's command line: the model's name, an --input per tensor, --quiet, then the explanation's options */
static int add_explanation(serve_req *r, const char *model, const cJSON *ex, char *err, size_t errsz) {
    char at[16];
    if (!add_arg(r, "explain") || !add_arg(r, model)) return fail(err, errsz, "out of memory");
    for (int j = 0; j < r->n_inputs; j++) {
        snprintf(at, sizeof at, "@%d", j);
        if (!add_arg(r, "--input") || !add_arg(r, at)) return fail(err, errsz, "out of memory");
    }
    if (!add_arg(r, "--quiet")) return fail(err, errsz, "out of memory");
    if (ex && !cJSON_IsObject(ex))
        return fail(err, errsz, "\"explanation\" must be an object ({\"method\": ..., \"target\": ...})");
    for (const cJSON *f = ex ? ex->child : NULL; f; f = f->next) {
        int k = 0;
        while (k < N_OPTS && strcmp(OPTS[k].key, f->string)) k++;
        if (k == N_OPTS)
            return fail(err, errsz, "explanation: unknown option '%.64s' (known: %s)", f->string, serve_known_options());
        for (const cJSON *g = ex->child; g != f; g = g->next)
            if (!strcmp(g->string, f->string)) return fail(err, errsz, "explanation: '%.64s' given twice", f->string);
        int rc = add_option(r, &OPTS[k], f, err, errsz);
        if (rc) return rc;
    }
    return 0;
}

int serve_decode(const char *body, size_t len, const char *model, const char *const *names, int n_names, bool explain,
                 serve_req *r, char *err, size_t errsz) {
    memset(r, 0, sizeof *r);
    r->body_len = len;
    err[0] = '\0';
    if (!len) return fail(err, errsz, "the body is empty: send {\"instances\": [...]%s}", explain ? ", \"explanation\": {...}" : "");
    cJSON *root = parse_body(body, len, err, errsz);
    if (!root) return 400;
    int rc = 0;
    if (!cJSON_IsObject(root)) {
        rc = fail(err, errsz, "the body must be a JSON object with \"instances\"%s", explain ? " and \"explanation\"" : "");
        goto done;
    }
    for (const cJSON *f = root->child; f; f = f->next)
        if (strcmp(f->string, "instances") && strcmp(f->string, "id") && strcmp(f->string, "explanation")) {
            rc = fail(err, errsz, "unknown field '%.64s' (known: instances, explanation, id)", f->string);
            goto done;
        }
    const cJSON *inst = cJSON_GetObjectItemCaseSensitive(root, "instances");
    if (!cJSON_IsArray(inst) || cJSON_GetArraySize(inst) < 1) {
        rc = fail(err, errsz, "\"instances\" must be a list of one or more examples");
        goto done;
    }
    r->n_instances = cJSON_GetArraySize(inst);
    if (n_names < 1 || n_names > CATTR_MAX_INPUTS) {
        rc = fail(err, errsz, "the model has %d inputs", n_names);
        goto done;
    }
    bool objects = cJSON_IsObject(inst->child);
    if (!objects && n_names > 1) {
        rc = fail(err, errsz, "the model takes %d inputs: give each instance as an object with a value per input name",
                  n_names);
        goto done;
    }
    for (int j = 0; j < n_names; j++) {
        if ((rc = stack_input(inst, r->n_instances, objects ? names[j] : NULL, len, &r->inputs[j], err, errsz))) goto done;
        r->n_inputs++;
    }
    if (objects)
        for (const cJSON *f = inst->child->child; f; f = f->next) {
            int j = 0;
            while (j < n_names && strcmp(names[j], f->string)) j++;
            if (j == n_names) {
                rc = fail(err, errsz, "instances[0]: the model has no input called '%.64s'", f->string);
                goto done;
            }
        }
    if (explain) rc = add_explanation(r, model, cJSON_GetObjectItemCaseSensitive(root, "explanation"), err, errsz);
done:
    cJSON_Delete(root);
    return rc;
}

int serve_decode_tensors(const void *body, size_t len, bool safetensors, const char *model, const char *const *names,
                         int n_names, bool explain, const char *const *keys, const char *const *values, int n_query,
                         serve_req *r, char *err, size_t errsz) {
    memset(r, 0, sizeof *r);
    r->body_len = len;
    err[0] = '\0';
    int side_of[2] = {-1, -1}; /* the body's tensors baselines and feature_mask, as r->side indexes */
    if (n_names < 1 || n_names > CATTR_MAX_INPUTS) return fail(err, errsz, "the model has %d inputs", n_names);
    if (!safetensors) {
        if (n_names > 1)
            return fail(err, errsz, "the model takes %d inputs: send them as one .safetensors body (a tensor per input "
                                    "name), or JSON", n_names);
        if (cx_npy_parse(body, len, "the .npy body", &r->inputs[0]) != CATTR_OK)
            return fail(err, errsz, "%s", cattr_last_error());
        r->n_inputs = 1;
    } else {
        cattr_tensor_set *set = NULL;
        if (cx_tensor_set_parse(body, len, "the .safetensors body", &set) != CATTR_OK)
            return fail(err, errsz, "%s", cattr_last_error());
        int rc = 0;
        for (int i = 0; i < cattr_tensor_set_count(set) && !rc; i++) {
            const char *nm = cattr_tensor_set_name(set, i);
            int j = 0;
            while (j < n_names && strcmp(names[j], nm)) j++;
            if (j < n_names) continue;
            int k = !strcmp(nm, "baselines") ? 0 : !strcmp(nm, "feature_mask") ? 1 : -1;
            if (k < 0 || !explain)
                rc = fail(err, errsz, "the .safetensors body: the model has no input called '%.64s'%s", nm,
                          explain ? " (beside the inputs: baselines, feature_mask)" : "");
            else if (cattr_tensor_convert(cattr_tensor_set_get(set, nm), k ? CATTR_INT64 : CATTR_FLOAT32,
                                          &r->side[r->n_side]) != CATTR_OK)
                rc = fail(err, errsz, "the .safetensors body's %s: %s", nm, cattr_last_error());
            else side_of[k] = r->n_side++;
        }
        for (int j = 0; j < n_names && !rc; j++) {
            const cattr_tensor *t = cattr_tensor_set_get(set, names[j]);
            if (!t) rc = fail(err, errsz, "the .safetensors body: no tensor for input '%.64s'", names[j]);
            else if (cattr_tensor_convert(t, cattr_tensor_dtype(t), &r->inputs[j]) != CATTR_OK)
                rc = fail(err, errsz, "%s", cattr_last_error());
            else r->n_inputs++;
        }
        cattr_tensor_set_free(set);
        if (rc) return rc;
    }
    for (int j = 0; j < r->n_inputs; j++) {
        const cattr_tensor *t = r->inputs[j];
        if (cattr_tensor_ndim(t) < 1 || cattr_tensor_shape(t)[0] < 1)
            return fail(err, errsz, "input '%.64s': a tensor with the instances along its first dim, not of %d dims",
                        names[j], cattr_tensor_ndim(t));
        if (j && cattr_tensor_shape(t)[0] != r->n_instances)
            return fail(err, errsz, "input '%.64s' holds %lld instances, input '%.64s' %lld", names[j],
                        (long long)cattr_tensor_shape(t)[0], names[0], (long long)r->n_instances);
        r->n_instances = cattr_tensor_shape(t)[0];
    }
    if (!explain) return 0;
    /* the explanation's options from the query: a value that reads as JSON (a number, a list, true) is that, else a
     * string */
    cJSON *ex = cJSON_CreateObject();
    if (!ex) return fail(err, errsz, "out of memory");
    for (int q = 0; q < n_query; q++) {
        cJSON *v = cJSON_Parse(values[q] ? values[q] : "");
        if (!v || cJSON_IsObject(v) || cJSON_IsNull(v)) {
            cJSON_Delete(v);
            v = cJSON_CreateString(values[q] ? values[q] : "");
        }
        if (!v) {
            cJSON_Delete(ex);
            return fail(err, errsz, "out of memory");
        }
        cJSON_AddItemToObject(ex, keys[q], v);
    }
    int rc = add_explanation(r, model, ex, err, errsz);
    for (int k = 0; k < 2 && !rc; k++) { /* the body's baselines and feature mask */
        if (side_of[k] < 0) continue;
        const char *key = k ? "feature_mask" : "baselines";
        char at[16];
        snprintf(at, sizeof at, "@S%d", side_of[k]);
        if (cJSON_GetObjectItemCaseSensitive(ex, key))
            rc = fail(err, errsz, "%s: given in the body and in the query", key);
        else if (!add_arg(r, k ? "--feature-mask" : "--baseline") || !add_arg(r, at))
            rc = fail(err, errsz, "explanation: too many options");
    }
    cJSON_Delete(ex);
    return rc;
}

int serve_decode_llm(const char *body, size_t len, cJSON **rq, char *err, size_t errsz) {
    *rq = NULL;
    err[0] = '\0';
    if (!len) return fail(err, errsz, "the body is empty: send {\"prompt\": ..., \"target\": ...}");
    cJSON *root = parse_body(body, len, err, errsz);
    if (!root) return 400;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return fail(err, errsz, "the body must be a JSON object: {\"prompt\": ..., \"target\": ..., \"method\": ...}");
    }
    const cJSON *sg = cJSON_GetObjectItemCaseSensitive(root, "segments");
    if (sg && !(cJSON_IsString(sg) && (!strcmp(sg->valuestring, "tokens") || !strcmp(sg->valuestring, "words") ||
                                       !strcmp(sg->valuestring, "sentences") || !strcmp(sg->valuestring, "lines")))) {
        cJSON_Delete(root);
        return fail(err, errsz, "'segments' must be tokens, words, sentences or lines here (a file of spans is the "
                                "command line's)");
    }
    *rq = root;
    return 0;
}

/* max_new_tokens of v (NULL: dflt) into *out; where names it in the message */
static int max_new_of(const cJSON *v, int dflt, const char *where, int *out, char *err, size_t errsz) {
    *out = dflt;
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 ||
        v->valuedouble > SERVE_MAX_NEW)
        return fail(err, errsz, "%s: max_new_tokens must be an integer from 1 to %d", where, SERVE_MAX_NEW);
    *out = (int)v->valuedouble;
    return 0;
}

int serve_decode_llm_predict(const char *body, size_t len, cJSON **rq, char *err, size_t errsz) {
    *rq = NULL;
    err[0] = '\0';
    if (!len) return fail(err, errsz, "the body is empty: send {\"instances\": [\"a prompt\", ...]}");
    cJSON *root = parse_body(body, len, err, errsz);
    if (!root) return 400;
    int rc = 0, dflt = 16;
    const cJSON *inst = cJSON_GetObjectItemCaseSensitive(root, "instances");
    if (!cJSON_IsObject(root)) {
        rc = fail(err, errsz, "the body must be a JSON object: {\"instances\": [\"a prompt\", ...], \"max_new_tokens\": 16}");
        goto done;
    }
    for (const cJSON *f = root->child; f && !rc; f = f->next)
        if (strcmp(f->string, "instances") && strcmp(f->string, "max_new_tokens") && strcmp(f->string, "id"))
            rc = fail(err, errsz, "unknown field '%.64s' (known: instances, max_new_tokens, id)", f->string);
    if (!rc) rc = max_new_of(cJSON_GetObjectItemCaseSensitive(root, "max_new_tokens"), 16, "the body", &dflt, err, errsz);
    if (!rc && (!cJSON_IsArray(inst) || cJSON_GetArraySize(inst) < 1 || cJSON_GetArraySize(inst) > 64))
        rc = fail(err, errsz, "\"instances\" must be a list of 1 to 64 prompts");
    if (rc) goto done;
    *rq = cJSON_CreateArray();
    int i = 0;
    for (const cJSON *e = inst->child; e && !rc; e = e->next, i++) {
        char where[48];
        snprintf(where, sizeof where, "instances[%d]", i);
        const cJSON *pr = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "prompt") : e;
        int mx = dflt;
        for (const cJSON *f = cJSON_IsObject(e) ? e->child : NULL; f && !rc; f = f->next)
            if (strcmp(f->string, "prompt") && strcmp(f->string, "max_new_tokens"))
                rc = fail(err, errsz, "%s: unknown field '%.64s' (known: prompt, max_new_tokens)", where, f->string);
        if (!rc && cJSON_IsObject(e)) rc = max_new_of(cJSON_GetObjectItemCaseSensitive(e, "max_new_tokens"), dflt, where, &mx, err, errsz);
        if (!rc && (!cJSON_IsString(pr) || !pr->valuestring[0]))
            rc = fail(err, errsz, "%s: a prompt is a non-empty string (or {\"prompt\": ..., \"max_new_tokens\": ...})", where);
        if (rc) break;
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddStringToObject(o, "prompt", pr->valuestring) || !cJSON_AddNumberToObject(o, "max_new_tokens", mx)) {
            cJSON_Delete(o);
            rc = fail(err, errsz, "out of memory");
            break;
        }
        cJSON_AddItemToArray(*rq, o);
    }
    if (rc) {
        cJSON_Delete(*rq);
        *rq = NULL;
    }
done:
    cJSON_Delete(root);
    return rc;
}

int cli_serve_fuzz(const unsigned char *data, size_t size) {
    static const char *const one[] = {"x"}, *const two[] = {"image", "mask"};
    char err[512];
    for (int k = 0; k < 4; k++) {
        serve_req r;
        serve_decode((const char *)data, size, "model", k & 1 ? two : one, k & 1 ? 2 : 1, k >= 2, &r, err, sizeof err);
        serve_req_free(&r);
    }
    cJSON *rq = NULL;
    serve_decode_llm((const char *)data, size, &rq, err, sizeof err);
    cJSON_Delete(rq);
    rq = NULL;
    serve_decode_llm_predict((const char *)data, size, &rq, err, sizeof err);
    cJSON_Delete(rq);
    /* binary bodies, with query options split from the bytes' first line ("method=saliency&target=3") */
    size_t nl = 0;
    while (nl < size && nl < 256 && data[nl] != '\n') nl++;
    char line[257], *keys[8], *vals[8];
    int nq = 0;
    memcpy(line, data, nl);
    line[nl] = '\0';
    for (char *save = NULL, *kv = strtok_r(line, "&", &save); kv && nq < 8; kv = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(kv, '=');
        if (eq) *eq = '\0';
        keys[nq] = kv;
        vals[nq++] = eq ? eq + 1 : NULL;
    }
    const unsigned char *rest = nl < size ? data + nl + 1 : data + size;
    for (int k = 0; k < 4; k++) {
        serve_req r;
        serve_decode_tensors(rest, size - (size_t)(rest - data), k & 1, "model", k & 1 ? two : one, k & 1 ? 2 : 1,
                             k >= 2, (const char *const *)keys, (const char *const *)vals, nq, &r, err, sizeof err);
        serve_req_free(&r);
    }
    return 0;
}
