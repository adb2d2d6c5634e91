/* metrics_cli.c - explain's --metrics: Captum's infidelity and sensitivity_max of the attributions a call just made,
 * and the deletion and insertion curves (cattr_deletion_curve; their plot with --curve-png),
 * with Captum's default forms of perturbation: Gaussian noise N(0, noise^2) as the infidelity perturbation I (the
 * perturbed input x - I, the example of Captum's documentation) and uniform noise from the L-infinity ball of radius r
 * added for sensitivity (Captum's default_perturb_func); draws from cattr's generator under the call's seed. */
#include "cli.h"
#include "attr/internal.h"
#include "core/core.h"
#include "core/rng.h"
#include "viz/heatmap.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXT (CATTR_MAX_INPUTS + CATTR_MAX_OUTPUTS)
#define METRIC_STREAM 0x4d45545200000000ull /* "METR" + input ordinal */

void cli_metric_defaults(cli_metric_opts *mo) {
    memset(mo, 0, sizeof *mo);
    mo->samples = 10;
    mo->noise = 0.003;
    mo->radius = 0.02;
    mo->curve_steps = 20;
}

int cli_metric_option(const char *o, const char *v, int *i, cli_metric_opts *mo) {
    if (!strcmp(o, "--metric")) o = "--metrics"; /* (cattr evaluate's word; the same list) */
    bool takes = !strcmp(o, "--metrics") || !strcmp(o, "--metric-samples") || !strcmp(o, "--metric-noise") ||
                 !strcmp(o, "--metric-radius") || !strcmp(o, "--curve-steps") || !strcmp(o, "--curve-png") ||
                 !strcmp(o, "--randomize-modules");
    if (!takes) {
        bool *flag = !strcmp(o, "--metric-normalize")        ? &mo->normalize
                     : !strcmp(o, "--curve-softmax")         ? &mo->curve_softmax
                     : !strcmp(o, "--randomize-independent") ? &mo->independent
                                                             : NULL;
        if (!flag) return 0;
        *flag = true;
        return 1;
    }
    if (!v) return cli_usage_error("%s needs a value (see cattr explain --help)", o), -1;
    (*i)++;
    if (!strcmp(o, "--metrics")) {
        char buf[128];
        snprintf(buf, sizeof buf, "%s", v);
        for (char *s = strtok(buf, ","); s; s = strtok(NULL, ",")) {
            if (!strcmp(s, "infidelity")) mo->infidelity = true;
            else if (!strcmp(s, "sensitivity") || !strcmp(s, "sensitivity_max")) mo->sensitivity = true;
            else if (!strcmp(s, "deletion")) mo->deletion = true;
            else if (!strcmp(s, "insertion")) mo->insertion = true;
            else if (!strcmp(s, "randomization") || !strcmp(s, "randomisation")) mo->randomization = true;
            else
                return cli_usage_error("--metrics: unknown metric '%s' (infidelity, sensitivity, deletion, insertion, "
                                       "randomization)", s), -1;
        }
        return 1;
    }
    if (!strcmp(o, "--randomize-modules")) {
        if (!*v) return cli_usage_error("--randomize-modules needs module paths, comma-separated"), -1;
        mo->randomize = v;
        return 1;
    }
    if (!strcmp(o, "--curve-png")) {
        size_t len = strlen(v);
        if (len < 5 || strcmp(v + len - 4, ".png")) return cli_usage_error("--curve-png must name a .png file: '%s'", v), -1;
        mo->curve_png = v;
        return 1;
    }
    if (!strcmp(o, "--curve-steps")) {
        long long n;
        if (!cli_int_arg(o, v, 1, 100000, &n)) return -1;
        mo->curve_steps = n;
        return 1;
    }
    if (!strcmp(o, "--metric-samples")) {
        long long n;
        if (!cli_int_arg(o, v, 1, 1000000, &n)) return -1;
        mo->samples = n;
        return 1;
    }
    double *dst = !strcmp(o, "--metric-noise") ? &mo->noise : &mo->radius;
    if (!cli_parse_double(v, dst) || !(*dst > 0) || !isfinite(*dst))
        return cli_usage_error("%s must be a positive number, not '%s'", o, v), -1;
    return 1;
}

/* Rows of t repeated n times each (Captum's repeat_interleave, cx_expand_rows): [B * n, ...]; t itself when it is
 * not per example (NULL, a scalar, or rows that are not B; with `always` false also a batch of one, which
 * broadcasts). */
static cattr_status interleave(const cattr_tensor *t, int64_t B, int64_t n, bool always, bool *made,
                               cattr_tensor **out) {
    *made = false;
    *out = (cattr_tensor *)t;
    if (!t || cattr_tensor_ndim(t) < 1 || cattr_tensor_shape(t)[0] != B || (B < 2 && !always)) return CATTR_OK;
    if (!(*out = cx_expand_rows(t, n, CX_INTERLEAVE))) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    *made = true;
    return CATTR_OK;
}

/* Input i's rows repeated n times, each element plus (sign) a draw: Gaussian (scale = std) or uniform in
 * [-scale, scale]; the draws (the perturbation) into *pert when pert is not NULL. */
static cattr_status perturbed_rows(const cattr_tensor *x, int64_t B, int64_t n, bool gauss, double scale, double sign,
                                   uint64_t seed, int i, cattr_tensor **pert, cattr_tensor **out) {
    bool made;
    cattr_tensor *r = NULL, *p = NULL;
    cattr_tensor *x64 = NULL;
    CX_CHECK(cattr_tensor_convert(x, CATTR_FLOAT64, &x64));
    cattr_status st = interleave(x64, B, n, true, &made, &r);
    if (st == CATTR_OK && !made) st = cx_fail(CATTR_ERR_SHAPE, "input %d does not have the batch (dim 0) of input 0", i);
    if (st == CATTR_OK && pert) st = cattr_tensor_new(CATTR_FLOAT64, cattr_tensor_ndim(r), cattr_tensor_shape(r), &p);
    cattr_tensor_free(x64);
    if (st != CATTR_OK) {
        cattr_tensor_free(r);
        return st;
    }
    cx_rng g;
    cx_rng_init(&g, seed, METRIC_STREAM + (uint64_t)i);
    double *v = cattr_tensor_data(r), *pv = p ? cattr_tensor_data(p) : NULL;
    for (int64_t k = 0; k < cattr_tensor_numel(r); k++) {
        double d = gauss ? scale * cx_rng_normal(&g) : scale * (2 * cx_rng_uniform(&g) - 1);
        if (pv) pv[k] = d;
        v[k] += sign * d;
    }
    *out = r;
    if (pert) *pert = p;
    return CATTR_OK;
}

static cJSON *values_json(const cattr_tensor *t, double *mean) {
    cJSON *a = cJSON_CreateArray();
    double s = 0;
    int64_t n = cattr_tensor_numel(t);
    for (int64_t k = 0; k < n; k++) {
        double v = cx_tensor_get(t, k);
        cJSON_AddItemToArray(a, cJSON_CreateNumber(v));
        s += v;
    }
    *mean = n ? s / (double)n : NAN;
    return a;
}

/* root[name] = {"values": [...], "mean": m, "n_perturb_samples": ns}, the object returned for the settings */
static cJSON *metric_json(cJSON *root, const char *name, const cattr_tensor *res, long long ns, double *mean) {
    cJSON *m = cJSON_AddObjectToObject(root, name);
    cJSON_AddItemToObject(m, "values", values_json(res, mean));
    cJSON_AddNumberToObject(m, "mean", *mean);
    cJSON_AddNumberToObject(m, "n_perturb_samples", (double)ns);
    return m;
}

const char *cli_metric_label(const char *name) {
    if (!strcmp(name, "infidelity")) return "Gaussian perturbations";
    if (!strcmp(name, "sensitivity_max")) return "L-inf ball perturbations";
    if (!strcmp(name, "randomization")) return "Spearman rank correlation, every module randomised";
    return "area under the curve"; /* deletion, insertion */
}

void cli_print_randomization(const cJSON *r) {
    const cJSON *mods = cJSON_GetObjectItem(r, "modules"), *mean = cJSON_GetObjectItem(r, "means"),
                *mabs = cJSON_GetObjectItem(r, "means_abs");
    int n = cJSON_GetArraySize(mods), B = cJSON_GetArraySize(cJSON_GetObjectItem(r, "values"));
    bool cascade = cJSON_IsTrue(cJSON_GetObjectItem(r, "cascade"));
    printf("randomization (%s; Spearman rank correlation with the attributions, mean over %d example%s; near 1: the "
           "attributions did not notice):\n", cascade ? "the modules randomised from the output down, cumulatively"
                                                    : "each module randomised alone", B, B == 1 ? "" : "s");
    int w = 6;
    for (int k = 0; k < n; k++) {
        int l = (int)strlen(cJSON_GetStringValue(cJSON_GetArrayItem(mods, k)));
        if (l > w) w = l;
    }
    printf("  %-*s %10s %10s\n", w, "module", "signed", "absolute");
    for (int k = 0; k < n; k++)
        printf("  %-*s %10.4f %10.4f\n", w, cJSON_GetStringValue(cJSON_GetArrayItem(mods, k)),
               cJSON_GetNumberValue(cJSON_GetArrayItem(mean, k)), cJSON_GetNumberValue(cJSON_GetArrayItem(mabs, k)));
}

/* The model-randomisation check (cattr_randomization_check) into root: the modules (given, or every module with
 * weights from the output down), the correlations per module and example, their means; the mean printed as the
 * metric's value is that of the last row (every module randomised when cascading). */
static int randomization_run(const cli_metric_opts *mo, const cattr_model *m, const cattr_attr_params *p,
                             const cattr_call *call, cattr_tensor *const *attr, int n_attr, cJSON *root) {
    char **names = NULL, *list = NULL;
    int n = 0, rc = CLI_OK;
    if (mo->randomize) {
        list = cx_strdup(mo->randomize);
        names = calloc(strlen(mo->randomize) / 2 + 2, sizeof *names);
        for (char *s = list && names ? strtok(list, ",") : NULL; s; s = strtok(NULL, ",")) names[n++] = s;
    } else {
        int total = cattr_model_n_weight_modules(m);
        names = calloc((size_t)total + 1, sizeof *names);
        for (int k = total - 1; names && k >= 0; k--) { /* from the output down */
            char buf[256];
            cattr_model_weight_module(m, k, buf, sizeof buf);
            if (!(names[n++] = cx_strdup(buf))) break;
        }
    }
    if (!names || (mo->randomize && !list)) rc = cli_error(cx_fail(CATTR_ERR_NO_MEMORY, "out of memory"), "randomization failed");
    else if (n == 0)
        rc = cli_error(cx_fail(CATTR_ERR_UNSUPPORTED, "the model has no module with weights to randomise"),
                       "randomization failed");
    cattr_tensor *sp = NULL, *sa = NULL;
    if (rc == CLI_OK) {
        cattr_status st = cattr_randomization_check(m, p, call, (const cattr_tensor *const *)attr, n_attr,
                                                    (const char *const *)names, n, !mo->independent, p->seed, &sp, &sa);
        if (st != CATTR_OK) rc = cli_error(st, "randomization failed");
    }
    if (rc == CLI_OK) {
        int64_t B = cattr_tensor_shape(sp)[1];
        cJSON *r = cJSON_AddObjectToObject(root, "randomization");
        cJSON *mods = cJSON_AddArrayToObject(r, "modules"), *rows = cJSON_AddArrayToObject(r, "spearman"),
              *rows_abs = cJSON_AddArrayToObject(r, "spearman_abs"), *means = cJSON_AddArrayToObject(r, "means"),
              *means_abs = cJSON_AddArrayToObject(r, "means_abs");
        double last = NAN;
        for (int k = 0; k < n; k++) {
            cJSON_AddItemToArray(mods, cJSON_CreateString(names[k]));
            for (int side = 0; side < 2; side++) {
                const cattr_tensor *t = side ? sa : sp;
                cJSON *row = cJSON_CreateArray();
                double s = 0;
                for (int64_t b = 0; b < B; b++) {
                    double v = cx_tensor_get(t, k * B + b);
                    cJSON_AddItemToArray(row, cJSON_CreateNumber(v));
                    s += v;
                }
                cJSON_AddItemToArray(side ? rows_abs : rows, row);
                cJSON_AddItemToArray(side ? means_abs : means, cJSON_CreateNumber(B ? s / (double)B : NAN));
                if (!side) last = B ? s / (double)B : NAN;
            }
        }
        cJSON *vals = cJSON_AddArrayToObject(r, "values"); /* the last row: the summary printed */
        for (int64_t b = 0; b < B; b++) cJSON_AddItemToArray(vals, cJSON_CreateNumber(cx_tensor_get(sp, (n - 1) * B + b)));
        cJSON_AddNumberToObject(r, "mean", last);
        cJSON_AddBoolToObject(r, "cascade", !mo->independent);
        cJSON_AddNumberToObject(r, "seed", (double)p->seed);
    }
    cattr_tensor_free(sp);
    cattr_tensor_free(sa);
    if (!mo->randomize)
        for (int k = 0; names && k < n; k++) free(names[k]);
    free(names);
    free(list);
    return rc;
}

/* The deletion and insertion curves (cattr_deletion_curve) into root, and their plot. */
static int curves_run(const cli_metric_opts *mo, cattr_explainer *e, const cattr_call *call, cattr_tensor *const *attr,
                      int n_attr, cJSON *root) {
    if (n_attr != call->n_inputs)
        return cli_error(cx_fail(CATTR_ERR_SHAPE, "the curves need one attribution per input (the method gave %d for "
                                 "%d inputs: a layer method's attributions are not of the inputs)", n_attr,
                                 call->n_inputs), "deletion / insertion failed");
    int64_t K = mo->curve_steps + 1, B = 0;
    double *plot = NULL; /* every example's curve, then the mean, per mode */
    int n_curves = 0, rc = CLI_OK;
    unsigned char rgb[3 * 2 * 17];
    int thick[2 * 17];
    for (int ins = 0; ins < 2 && rc == CLI_OK; ins++) {
        if (!(ins ? mo->insertion : mo->deletion)) continue;
        cattr_tensor *curve = NULL, *auc = NULL;
        cattr_status st = cattr_deletion_curve(e, call, (const cattr_tensor *const *)attr, ins, mo->curve_steps,
                                               mo->curve_softmax, 0, &curve, &auc);
        if (st != CATTR_OK) {
            rc = cli_error(st, ins ? "insertion failed" : "deletion failed");
            break;
        }
        double mean;
        cJSON *m = cJSON_AddObjectToObject(root, ins ? "insertion" : "deletion");
        cJSON_AddItemToObject(m, "values", values_json(auc, &mean));
        cJSON_AddNumberToObject(m, "mean", mean);
        cJSON_AddNumberToObject(m, "n_steps", (double)mo->curve_steps);
        cJSON_AddStringToObject(m, "score", mo->curve_softmax ? "softmax at the target" : "output at the target");
        B = cattr_tensor_shape(curve)[0];
        cJSON *cs = cJSON_AddArrayToObject(m, "curves");
        int shown = B < 16 ? (int)B : 16;
        double *grown = realloc(plot, (size_t)(n_curves + shown + 1) * (size_t)K * sizeof *plot);
        if (!grown) rc = cli_error(cx_fail(CATTR_ERR_NO_MEMORY, "out of memory"), "deletion / insertion failed");
        else plot = grown;
        double *avg = rc == CLI_OK ? plot + (size_t)(n_curves + shown) * (size_t)K : NULL;
        for (int64_t k = 0; avg && k < K; k++) avg[k] = 0;
        for (int64_t b = 0; b < B && rc == CLI_OK; b++) {
            cJSON *row = cJSON_CreateArray();
            for (int64_t k = 0; k < K; k++) {
                double v = cx_tensor_get(curve, b * K + k);
                cJSON_AddItemToArray(row, cJSON_CreateNumber(v));
                avg[k] += v / (double)B;
                if (b < shown) plot[(size_t)(n_curves + b) * (size_t)K + (size_t)k] = v;
            }
            cJSON_AddItemToArray(cs, row);
        }
        /* deletion blue, insertion red: the examples' curves light, their mean dark and thick */
        static const unsigned char dark[2][3] = {{33, 102, 172}, {178, 24, 43}}, light[2][3] = {{170, 200, 230},
                                                                                                  {235, 170, 175}};
        for (int c = 0; c <= shown && rc == CLI_OK; c++) {
            memcpy(rgb + 3 * (n_curves + c), c < shown ? light[ins] : dark[ins], 3);
            thick[n_curves + c] = c == shown;
        }
        n_curves += shown + 1;
        cattr_tensor_free(curve);
        cattr_tensor_free(auc);
    }
    if (rc == CLI_OK && mo->curve_png) {
        cattr_status st = cx_png_curves(mo->curve_png, plot, n_curves, (int)K, rgb, thick, 480, 320);
        if (st != CATTR_OK) rc = cli_error(st, "--curve-png failed");
    }
    free(plot);
    return rc;
}

int cli_metrics_run(const cli_metric_opts *mo, const cattr_model *m, cattr_explainer *e, const cattr_attr_params *p,
                    const cattr_call *call, cattr_tensor *const *attr, int n_attr, cJSON **out) {
    *out = NULL;
    if (!cli_metrics_any(mo)) return CLI_OK;
    int n = call->n_inputs;
    int64_t B = cattr_tensor_ndim(call->inputs[0]) ? cattr_tensor_shape(call->inputs[0])[0] : 1, ns = mo->samples;
    cJSON *root = cJSON_CreateObject();
    cattr_status st = CATTR_OK;
    int rc = CLI_OK;
    if (mo->infidelity) {
        cattr_tensor *pert[MAXT] = {0}, *xp[MAXT] = {0}, *res = NULL;
        for (int i = 0; i < n && st == CATTR_OK; i++)
            st = perturbed_rows(call->inputs[i], B, ns, true, mo->noise, -1, p->seed, i, &pert[i], &xp[i]);
        if (st == CATTR_OK && n_attr != n)
            st = cx_fail(CATTR_ERR_SHAPE, "infidelity needs one attribution per input (the method gave %d for "
                                 "%d inputs: a layer method's attributions are not of the inputs)", n_attr, n);
        if (st == CATTR_OK)
            st = cattr_infidelity(e, call, (const cattr_tensor *const *)attr, (const cattr_tensor *const *)pert,
                                  (const cattr_tensor *const *)xp, ns, mo->normalize, 0, &res);
        if (st == CATTR_OK) {
            double mean;
            cJSON *m = metric_json(root, "infidelity", res, ns, &mean);
            cJSON_AddStringToObject(m, "perturbation", "gaussian");
            cJSON_AddNumberToObject(m, "noise_std", mo->noise);
            cJSON_AddBoolToObject(m, "normalize", mo->normalize);
        } else {
            rc = cli_error(st, "infidelity failed");
        }
        cattr_tensor_free(res);
        for (int i = 0; i < MAXT; i++) {
            cattr_tensor_free(pert[i]);
            cattr_tensor_free(xp[i]);
        }
    }
    if (mo->sensitivity && rc == CLI_OK) {
        cattr_tensor *xp[MAXT] = {0}, *bl[MAXT] = {0}, *ad[MAXT] = {0}, *fm[MAXT] = {0}, *attr2[MAXT] = {0}, *res = NULL;
        bool made_b[MAXT] = {0}, made_a[MAXT] = {0}, made_m[MAXT] = {0};
        int64_t *tidx = NULL;
        cattr_target t2 = call->target ? *call->target : (cattr_target){0};
        for (int i = 0; i < n && st == CATTR_OK; i++)
            st = perturbed_rows(call->inputs[i], B, ns, false, mo->radius, 1, p->seed, MAXT + i, NULL, &xp[i]);
        for (int i = 0; i < n && st == CATTR_OK && call->baselines; i++)
            st = interleave(call->baselines[i], B, ns, false, &made_b[i], &bl[i]);
        for (int j = 0; j < call->n_additional && st == CATTR_OK; j++)
            st = interleave(call->additional[j], B, ns, true, &made_a[j], &ad[j]);
        for (int i = 0; i < n && st == CATTR_OK && call->feature_masks; i++)
            st = interleave(call->feature_masks[i], B, ns, false, &made_m[i], &fm[i]);
        if (st == CATTR_OK && t2.kind == CATTR_TARGET_PER_EXAMPLE) { /* each example's target, once per sample */
            tidx = malloc((size_t)(B * ns * (t2.n_idx > 0 ? t2.n_idx : 1)) * sizeof *tidx);
            if (!tidx) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            for (int64_t r = 0; tidx && r < B * ns; r++)
                memcpy(tidx + r * t2.n_idx, t2.idx + (r / ns) * t2.n_idx, (size_t)t2.n_idx * sizeof *tidx);
            t2.idx = tidx;
            t2.n_rows = B * ns;
        }
        cattr_call c2 = *call;
        c2.inputs = (const cattr_tensor *const *)xp;
        if (call->baselines) c2.baselines = (const cattr_tensor *const *)bl;
        if (call->n_additional) c2.additional = (const cattr_tensor *const *)ad;
        if (call->feature_masks) c2.feature_masks = (const cattr_tensor *const *)fm;
        if (call->target) c2.target = &t2;
        cattr_tensor *x2[MAXT] = {0};
        for (int i = 0; i < n && st == CATTR_OK; i++) /* in the inputs' dtype */
            if (cattr_tensor_dtype(call->inputs[i]) != CATTR_FLOAT64) {
                st = cattr_tensor_convert(xp[i], cattr_tensor_dtype(call->inputs[i]), &x2[i]);
                if (st == CATTR_OK) {
                    cattr_tensor_free(xp[i]);
                    xp[i] = x2[i];
                }
            }
        if (st == CATTR_OK) st = cattr_explainer_run(e, &c2, attr2, NULL);
        if (st == CATTR_OK)
            st = cattr_sensitivity_max(p->device, (const cattr_tensor *const *)attr, (const cattr_tensor *const *)attr2,
                                       n_attr, ns, 2.0, &res);
        if (st == CATTR_OK) {
            double mean;
            cJSON *m = metric_json(root, "sensitivity_max", res, ns, &mean);
            cJSON_AddNumberToObject(m, "perturb_radius", mo->radius);
            cJSON_AddStringToObject(m, "norm_ord", "fro");
        } else {
            rc = cli_error(st, "sensitivity failed");
        }
        cattr_tensor_free(res);
        free(tidx);
        for (int i = 0; i < MAXT; i++) {
            cattr_tensor_free(xp[i]);
            cattr_tensor_free(attr2[i]);
            if (made_b[i]) cattr_tensor_free(bl[i]);
            if (made_a[i]) cattr_tensor_free(ad[i]);
            if (made_m[i]) cattr_tensor_free(fm[i]);
        }
    }
    if (rc == CLI_OK && (mo->deletion || mo->insertion)) rc = curves_run(mo, e, call, attr, n_attr, root);
    if (rc == CLI_OK && mo->randomization) rc = randomization_run(mo, m, p, call, attr, n_attr, root);
    if (rc != CLI_OK) {
        cJSON_Delete(root);
        return rc;
    }
    *out = root;
    return CLI_OK;
}
