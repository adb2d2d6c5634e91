/* replay_metric.c - `cattr replay` of the golden cases of Captum's metrics (tests/golden_metrics, written by its
 * make_cases.py from Captum 0.8): case.json with "kind": "metric" names the metric, its arguments, the tensors in
 * tensors.safetensors (float64 ones, and f32.* for a float32 replay) and the expected values with their tolerances.
 *   infidelity:       cattr_infidelity of the given attributions, perturbations and perturbed inputs;
 *   sensitivity_max:  the explanation method (Saliency) run by cattr at the inputs and at the given perturbed inputs
 *                     (each example's target repeated per sample), then cattr_sensitivity_max.
 * The expected tensor is compared as the Captum cases' are: the largest difference against rtol x the largest
 * expected value + atol. */
#include "replay.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tensor `name` of the case (its f32.* twin in a float32 replay), or NULL with why set. */
static const cattr_tensor *get(const cattr_tensor_set *set, const char *name, bool f32, char *why, size_t n) {
    char key[256];
    snprintf(key, sizeof key, "%s%s", f32 ? "f32." : "", name);
    const cattr_tensor *t = cattr_tensor_set_get(set, key);
    if (!t) snprintf(why, n, "tensors.safetensors has no tensor '%s'", key);
    return t;
}

static int64_t int_arg(const cJSON *args, const char *k, int64_t dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, k);
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : dflt;
}

/* Runs the metric of case c; *res receives its values. Returns false with why set on a case that cannot run. */
static bool run_metric(const cJSON *c, const cattr_tensor_set *set, cattr_model *m, const replay_opts *o,
                       cattr_tensor **res, char *why, size_t n) {
    bool f32 = o->dtype == CATTR_FLOAT32;
    const char *metric = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "metric"));
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(c, "args");
    int64_t ns = int_arg(args, "n_perturb_samples", 0);
    const cattr_tensor *x = get(set, "input.0", f32, why, n), *tg = cattr_tensor_set_get(set, "target");
    if (!x) return false;
    if (!tg || cattr_tensor_dtype(tg) != CATTR_INT64 || cattr_tensor_ndim(tg) != 1) {
        snprintf(why, n, "the case needs an int64 [batch] tensor 'target'");
        return false;
    }
    if (ns < 1 || ns > 100000) {
        snprintf(why, n, "args.n_perturb_samples must be from 1 to 100000 (got %lld)", (long long)ns);
        return false;
    }
    int64_t B = cattr_tensor_numel(tg);
    cattr_target t = {CATTR_TARGET_PER_EXAMPLE, 1, B, cattr_tensor_data_const(tg)};
    const cattr_tensor *in[1] = {x};
    cattr_call call = {in, 1, NULL, &t, NULL, 0, NULL, NULL, NULL, 0, NULL, 0, NULL};
    bool infid = metric && !strcmp(metric, "infidelity"), sens = metric && !strcmp(metric, "sensitivity_max");
    if (!infid && !sens) {
        snprintf(why, n, "metric must be infidelity or sensitivity_max (got '%s')", metric ? metric : "?");
        return false;
    }
    cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_SALIENCY);
    p.dtype = o->dtype;
    p.device = o->device;
    if (sens) {
        const cJSON *ex = cJSON_GetObjectItemCaseSensitive(args, "explanation");
        const char *meth = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ex, "method"));
        if (!meth || strcmp(meth, "Saliency")) {
            snprintf(why, n, "args.explanation.method must be Saliency (got '%s')", meth ? meth : "?");
            return false;
        }
        p.abs = cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(ex, "abs")) ? false : true;
    }
    cattr_explainer *e = NULL;
    cattr_status st = cattr_explainer_new(m, &p, &e);
    if (st == CATTR_OK && infid) {
        const cattr_tensor *a = get(set, "attributions.0", f32, why, n), *pt = get(set, "perturbations.0", f32, why, n),
                           *pd = get(set, "perturbed.0", f32, why, n);
        if (!a || !pt || !pd) {
            cattr_explainer_free(e);
            return false;
        }
        const cattr_tensor *A[1] = {a}, *P[1] = {pt}, *X[1] = {pd};
        st = cattr_infidelity(e, &call, A, P, X, ns, cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(args, "normalize")),
                              0, res);
    } else if (st == CATTR_OK) {
        const cattr_tensor *pd = get(set, "perturbed.0", f32, why, n);
        if (!pd) {
            cattr_explainer_free(e);
            return false;
        }
        int64_t *rep = malloc((size_t)(B * ns + 1) * sizeof *rep); /* each example's target, once per sample */
        cattr_tensor *e0[1] = {0}, *e1[1] = {0};
        if (!rep) st = CATTR_ERR_NO_MEMORY;
        for (int64_t r = 0; rep && r < B * ns; r++) rep[r] = ((const int64_t *)cattr_tensor_data_const(tg))[r / ns];
        cattr_target t2 = {CATTR_TARGET_PER_EXAMPLE, 1, B * ns, rep};
        const cattr_tensor *in2[1] = {pd};
        cattr_call call2 = {in2, 1, NULL, &t2, NULL, 0, NULL, NULL, NULL, 0, NULL, 0, NULL};
        if (st == CATTR_OK) st = cattr_explainer_run(e, &call, e0, NULL);
        if (st == CATTR_OK) st = cattr_explainer_run(e, &call2, e1, NULL);
        if (st == CATTR_OK)
            st = cattr_sensitivity_max(o->device, (const cattr_tensor *const *)e0, (const cattr_tensor *const *)e1, 1,
                                       ns, 2.0, res);
        cattr_tensor_free(e0[0]);
        cattr_tensor_free(e1[0]);
        free(rep);
    }
    cattr_explainer_free(e);
    if (st != CATTR_OK) {
        snprintf(why, n, "%s", cattr_last_error());
        return false;
    }
    return true;
}

int replay_metric_case(const char *dir, const char *file, const cJSON *c, replay_opts *o) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "name"));
    if (!name) name = dir;
    bool f32 = o->dtype == CATTR_FLOAT32;
    char path[4096], why[2048] = "";
    snprintf(path, sizeof path, "%s/tensors.safetensors", dir);
    cattr_tensor_set *set = NULL;
    cattr_status st = cattr_tensor_set_load(path, &set);
    if (st != CATTR_OK) {
        (void)cli_usage_error("%s", cattr_last_error());
        return -1;
    }
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    cattr_model *m = NULL;
    cattr_tensor *res = NULL;
    st = cattr_model_load_onnx(path, &m);
    if (st == CATTR_OK) st = cattr_model_set_device(m, o->device);
    const cJSON *ex = cJSON_GetObjectItemCaseSensitive(c, "expected");
    const char *en = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ex, f32 ? "f32_name" : "name"));
    const cJSON *tol = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ex, "tolerance"),
                                                        f32 ? "vs_f32_reference" : "vs_f64_reference");
    const cJSON *rt = cJSON_GetObjectItemCaseSensitive(tol, "rtol"), *at = cJSON_GetObjectItemCaseSensitive(tol, "atol");
    const cattr_tensor *et = en ? cattr_tensor_set_get(set, en) : NULL;
    if (st != CATTR_OK) {
        printf("FAIL %s model err=load allowed=0 (%s)\n", name, cattr_last_error());
        o->failed++;
    } else if (!et || !cJSON_IsNumber(rt) || !cJSON_IsNumber(at)) {
        printf("FAIL %s expected err=data allowed=0 (%s: expected.%s and its tolerance (rtol, atol) are required)\n",
               name, file, f32 ? "f32_name" : "name");
        o->failed++;
    } else if (!run_metric(c, set, m, o, &res, why, sizeof why)) {
        printf("FAIL %s metric err=run allowed=0 (%s: %s)\n", name, file, why);
        o->failed++;
    } else if (cattr_tensor_numel(res) != cattr_tensor_numel(et)) {
        printf("FAIL %s %s err=shape allowed=0\n", name, en);
        o->failed++;
    } else {
        double me, allowed;
        replay_compare(res, et, rt->valuedouble, at->valuedouble, &me, &allowed);
        if (me <= allowed) {
            printf("PASS %s %.3e\n", name, allowed > 0 ? me / allowed : 0.0);
            o->passed++;
        } else {
            printf("FAIL %s %s err=%.3e allowed=%.3e\n", name, en, me, allowed);
            o->failed++;
        }
    }
    cattr_tensor_free(res);
    cattr_model_free(m);
    cattr_tensor_set_free(set);
    return 0;
}
