/* test_sweep.c - bad input through every method: each method of cattr_method (and NoiseTunnel around each method it
 * takes) on the bundled digits model with an out-of-range target (10, -11, a per-example list with one bad entry, a
 * tuple of the wrong length), a NaN in the input and a NaN in the baseline. Every such call must fail with a status
 * other than CATTR_OK and a message naming the problem, and write no output (no attribution, no delta, no part
 * blob); never a signal (the sanitizer build runs this at 1 and 3 OpenMP threads). Also: every integer parameter out
 * of its range is refused by cattr_explainer_new naming the field, the value and the range; the memory-budget warning
 * is logged once per explainer, not once per call; and the language-model API refuses token ids outside the
 * vocabulary (tests/data/llm/tiny). */
#include "cattr.h"
#include "test_util.h"

#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* case-insensitive substring */
static bool has(const char *s, const char *sub) {
    if (!s || !sub) return false;
    size_t n = strlen(sub);
    for (; *s; s++) {
        size_t k = 0;
        while (k < n && s[k] && tolower((unsigned char)s[k]) == tolower((unsigned char)sub[k])) k++;
        if (k == n) return true;
    }
    return false;
}

static bool is_layer(cattr_method m) { return m >= CATTR_METHOD_LAYER_ACTIVATION && m <= CATTR_METHOD_LAYER_LRP; }
static bool is_neuron(cattr_method m) { return m >= CATTR_METHOD_NEURON_GRADIENT && m < CATTR_METHOD_COUNT; }
/* the methods whose attributions do not depend on a target (Captum's take none) */
static bool takes_no_target(cattr_method m) {
    return m == CATTR_METHOD_LAYER_ACTIVATION || (is_neuron(m) && m != CATTR_METHOD_NEURON_CONDUCTANCE);
}

static cattr_attr_params sweep_params(cattr_method m, cattr_noise_tunnel nt) {
    cattr_attr_params p = cattr_attr_default_params(m);
    p.n_steps = 4;
    p.n_samples = 3;
    if (is_layer(m) || is_neuron(m) || m == CATTR_METHOD_GUIDED_GRADCAM) p.layer = "conv2";
    if (is_neuron(m)) {
        p.neuron_kind = CATTR_NEURON_INDEX;
        p.neuron_ndim = 3;
        p.neuron_index[0] = 0, p.neuron_index[1] = 1, p.neuron_index[2] = 1;
    }
    if (m == CATTR_METHOD_OCCLUSION) {
        p.sliding_window_ndim[0] = 3;
        memcpy(p.sliding_window[0], (const int64_t[]){1, 3, 3}, 3 * sizeof(int64_t));
    }
    if (nt != CATTR_NT_NONE) {
        p.nt_type = nt;
        p.nt_samples = 2;
        p.stdevs = 0.1;
    }
    return p;
}

/* Runs the call; checks that it fails (not CATTR_OK), with a message holding `want` (and `want2` when not NULL), and
 * writes nothing. With a split kind, cattr_explainer_run_part is tried too (part 0 of 2). */
static void expect_refused(cattr_explainer *e, const cattr_attr_params *p, const cattr_call *call, const char *what,
                           const char *want, const char *want2) {
    const char *mn = cattr_method_name(p->method), *nt = p->nt_type != CATTR_NT_NONE ? " (noise tunnel)" : "";
    cattr_tensor *attr[CATTR_MAX_OUTPUTS];
    cattr_tensor *delta = (cattr_tensor *)(uintptr_t)1;
    for (int i = 0; i < CATTR_MAX_OUTPUTS; i++) attr[i] = NULL;
    cattr_status st = cattr_explainer_run(e, call, attr, &delta);
    const char *msg = cattr_last_error();
    CHECK(st != CATTR_OK, "%s%s, %s: accepted", mn, nt, what);
    CHECK(has(msg, want) && (!want2 || has(msg, want2)), "%s%s, %s: status %s, message '%s' lacks '%s'%s%s", mn, nt,
          what, cattr_status_string(st), msg, want, want2 ? " / " : "", want2 ? want2 : "");
    bool none = delta == NULL;
    for (int i = 0; i < CATTR_MAX_OUTPUTS; i++) none = none && attr[i] == NULL;
    CHECK(none, "%s%s, %s: failed but wrote outputs", mn, nt, what);
    for (int i = 0; i < CATTR_MAX_OUTPUTS; i++) cattr_tensor_free(attr[i]);
    if (delta != (cattr_tensor *)(uintptr_t)1) cattr_tensor_free(delta);
    if (cattr_split_kind(p)) {
        void *blob = (void *)(uintptr_t)1;
        size_t len = 7;
        st = cattr_explainer_run_part(e, call, 0, 2, &blob, &len);
        msg = cattr_last_error();
        CHECK(st != CATTR_OK && has(msg, want), "%s%s, %s, part 0 of 2: status %s, message '%s'", mn, nt, what,
              cattr_status_string(st), msg);
        CHECK(blob == NULL && len == 0, "%s%s, %s, part 0 of 2: failed but wrote a blob", mn, nt, what);
        if (blob != (void *)(uintptr_t)1) free(blob);
    }
}

static int n_swept, n_tunnels;

/* One method (with or without a noise tunnel) through every bad input. x: [2,1,8,8]. */
static void sweep_method(cattr_model *model, cattr_method m, cattr_noise_tunnel nt, cattr_tensor *x, cattr_tensor *xnan,
                         cattr_tensor *zeros, cattr_tensor *bnan) {
    cattr_attr_params p = sweep_params(m, nt);
    const char *mn = cattr_method_name(m);
    cattr_explainer *e = NULL;
    cattr_status st = cattr_explainer_new(model, &p, &e);
    if (nt == CATTR_NT_NONE) CHECK(st == CATTR_OK, "%s: explainer: %s", mn, cattr_last_error());
    if (st != CATTR_OK) {
        cattr_explainer_free(e);
        return;
    }
    const cattr_tensor *in[1] = {x}, *in_nan[1] = {xnan}, *base[1] = {zeros}, *base_nan[1] = {bnan};
    static const int64_t t3 = 3, t10 = 10, tm11 = -11, per_bad[2] = {3, 10}, tup[2] = {1, 2};
    cattr_target good = {CATTR_TARGET_INDEX, 1, 0, &t3};
    cattr_call call;
    memset(&call, 0, sizeof call);
    call.inputs = in;
    call.n_inputs = 1;
    call.baselines = base;
    call.target = &good;
    /* ShapleyValues: the 64 pixels in 4 groups (quadrants), not 64! orders */
    int64_t msh[4] = {1, 1, 8, 8};
    cattr_tensor *mask = NULL;
    const cattr_tensor *masks[1] = {NULL};
    if (m == CATTR_METHOD_SHAPLEY_VALUES) {
        cattr_tensor_new(CATTR_INT64, 4, msh, &mask);
        int64_t *mv = cattr_tensor_data(mask);
        for (int k = 0; k < 64; k++) mv[k] = (k / 8) / 4 * 2 + (k % 8) / 4;
        masks[0] = mask;
        call.feature_masks = masks;
    }
    /* the valid call first: it runs (a noise tunnel the library does not take around this method is skipped) */
    cattr_tensor *attr[CATTR_MAX_OUTPUTS] = {0}, *delta = NULL;
    st = cattr_explainer_run(e, &call, attr, &delta);
    if (nt != CATTR_NT_NONE && st == CATTR_ERR_UNSUPPORTED) {
        printf("note: no noise tunnel around %s: %s\n", mn, cattr_last_error());
        cattr_explainer_free(e);
        cattr_tensor_free(mask);
        return;
    }
    CHECK(st == CATTR_OK && attr[0], "%s%s: the valid call: %s", mn, nt ? " (noise tunnel)" : "", cattr_last_error());
    for (int i = 0; i < CATTR_MAX_OUTPUTS; i++) cattr_tensor_free(attr[i]);
    cattr_tensor_free(delta);
    if (nt != CATTR_NT_NONE) n_tunnels++;
    else n_swept++;
    /* (a) out-of-range targets */
    if (!takes_no_target(m)) {
        cattr_target bad[4] = {{CATTR_TARGET_INDEX, 1, 0, &t10},
                               {CATTR_TARGET_INDEX, 1, 0, &tm11},
                               {CATTR_TARGET_PER_EXAMPLE, 1, 2, per_bad},
                               {CATTR_TARGET_INDEX, 2, 0, tup}};
        const char *names[4] = {"target 10", "target -11", "per-example targets {3, 10}", "target tuple (1, 2)"};
        for (int k = 0; k < 4; k++) {
            call.target = &bad[k];
            expect_refused(e, &p, &call, names[k], "target", NULL);
        }
        call.target = &good;
    }
    /* (b) a NaN in the input */
    call.inputs = in_nan;
    expect_refused(e, &p, &call, "NaN in the input", "NaN", "input");
    call.inputs = in;
    /* (c) a NaN in the baseline */
    call.baselines = base_nan;
    expect_refused(e, &p, &call, "NaN in the baseline", "NaN", "baseline");
    call.baselines = base;
    cattr_explainer_free(e);
    cattr_tensor_free(mask);
}

/* What a method that takes no target does with one today: the target is not read (Captum's classes take none). */
static void ignored_target(cattr_model *model, cattr_tensor *x, cattr_tensor *zeros) {
    static const int64_t t10 = 10;
    cattr_target bad = {CATTR_TARGET_INDEX, 1, 0, &t10};
    const cattr_tensor *in[1] = {x}, *base[1] = {zeros};
    for (int m = 0; m < CATTR_METHOD_COUNT; m++) {
        if (!takes_no_target((cattr_method)m)) continue;
        cattr_attr_params p = sweep_params((cattr_method)m, CATTR_NT_NONE);
        cattr_explainer *e = NULL;
        cattr_tensor *attr[CATTR_MAX_OUTPUTS] = {0};
        cattr_status st = cattr_explainer_new(model, &p, &e);
        if (st == CATTR_OK) st = cattr_explainer_attribute(e, in, 1, base, &bad, NULL, 0, attr, NULL);
        CHECK(st == CATTR_OK && attr[0], "%s ignores the target (Captum's takes none): %s", cattr_method_name(m),
              cattr_last_error());
        for (int i = 0; i < CATTR_MAX_OUTPUTS; i++) cattr_tensor_free(attr[i]);
        cattr_explainer_free(e);
    }
}

/* ---- parameters out of range --------------------------------------------------------------------------------- */

typedef struct {
    const char *what; /* the field, as the message must name it */
    const char *value;  /* the value, as the message must print it */
    cattr_method method;
    void (*set)(cattr_attr_params *p);
} bad_param;

#define SETTER(name, ...)                                                                                             \
    static void name(cattr_attr_params *p) { __VA_ARGS__; }
SETTER(s_steps0, p->n_steps = 0)
SETTER(s_steps_neg, p->n_steps = -727379968)
SETTER(s_steps_big, p->n_steps = 1000001)
SETTER(s_quad, p->quadrature = (cattr_quadrature)-1)
SETTER(s_quad_big, p->quadrature = (cattr_quadrature)9)
SETTER(s_ibs, p->internal_batch_size = -1)
SETTER(s_ibs_big, p->internal_batch_size = 2000000000)
SETTER(s_ppe, p->perturbations_per_eval = -2)
SETTER(s_ppe_big, p->perturbations_per_eval = 100000001)
SETTER(s_ns, p->n_samples = 0)
SETTER(s_ns_big, p->n_samples = 100000001)
SETTER(s_nt_type, { p->nt_type = (cattr_noise_tunnel)7; })
SETTER(s_nts, { p->nt_type = CATTR_NT_SMOOTHGRAD; p->nt_samples = 0; })
SETTER(s_nts_big, { p->nt_type = CATTR_NT_SMOOTHGRAD; p->nt_samples = 1000001; })
SETTER(s_ntbs, { p->nt_type = CATTR_NT_SMOOTHGRAD; p->nt_samples_batch_size = -1; })
SETTER(s_ntbs_big, { p->nt_type = CATTR_NT_SMOOTHGRAD; p->nt_samples_batch_size = 1000001; })
SETTER(s_dtype, p->dtype = (cattr_dtype)2)
SETTER(s_exec, p->executor = (cattr_executor_kind)5)
SETTER(s_prec, p->precision = (cattr_precision)-3)
SETTER(s_method, p->method = (cattr_method)99)
SETTER(s_win_nd, { p->sliding_window_ndim[0] = 9; })
SETTER(s_win_val, {
    p->sliding_window_ndim[0] = 3;
    p->sliding_window[0][0] = 1, p->sliding_window[0][1] = 0, p->sliding_window[0][2] = 3;
})
SETTER(s_stride_nd, {
    p->sliding_window_ndim[0] = 3;
    p->sliding_window[0][0] = 1, p->sliding_window[0][1] = 3, p->sliding_window[0][2] = 3;
    p->strides_ndim[0] = -2;
})
SETTER(s_stride_val, {
    p->sliding_window_ndim[0] = 3;
    p->sliding_window[0][0] = 1, p->sliding_window[0][1] = 3, p->sliding_window[0][2] = 3;
    p->strides_ndim[0] = 1;
    p->strides[0][0] = -4;
})
SETTER(s_nlayers, { p->n_layers = -1; })
SETTER(s_nlayers_big, { p->n_layers = 17; })
SETTER(s_nkind, { p->neuron_kind = (cattr_neuron_kind)4; })
SETTER(s_nndim, { p->neuron_ndim = 9; })
SETTER(s_nsum, { p->neuron_kind = CATTR_NEURON_SUM; p->neuron_sum_ndim = -1; })
SETTER(s_rules, { p->n_node_rules = -1; })
SETTER(s_eps, { p->eps = -1; })
SETTER(s_stdevs, { p->stdevs = NAN; })

static void bad_params(cattr_model *model) {
    const bad_param cases[] = {
        {"n_steps", "0", CATTR_METHOD_INTEGRATED_GRADIENTS, s_steps0},
        {"n_steps", "-727379968", CATTR_METHOD_LAYER_CONDUCTANCE, s_steps_neg},
        {"n_steps", "1000001", CATTR_METHOD_NEURON_INTEGRATED_GRADIENTS, s_steps_big},
        {"quadrature", "-1", CATTR_METHOD_INTEGRATED_GRADIENTS, s_quad},
        {"quadrature", "9", CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS, s_quad_big},
        {"internal_batch_size", "-1", CATTR_METHOD_INTEGRATED_GRADIENTS, s_ibs},
        {"internal_batch_size", "2000000000", CATTR_METHOD_INTERNAL_INFLUENCE, s_ibs_big},
        {"perturbations_per_eval", "-2", CATTR_METHOD_FEATURE_ABLATION, s_ppe},
        {"perturbations_per_eval", "100000001", CATTR_METHOD_LIME, s_ppe_big},
        {"n_samples", "0", CATTR_METHOD_SHAPLEY_VALUE_SAMPLING, s_ns},
        {"n_samples", "100000001", CATTR_METHOD_GRADIENT_SHAP, s_ns_big},
        {"nt_type", "7", CATTR_METHOD_SALIENCY, s_nt_type},
        {"nt_samples", "0", CATTR_METHOD_SALIENCY, s_nts},
        {"nt_samples", "1000001", CATTR_METHOD_INTEGRATED_GRADIENTS, s_nts_big},
        {"nt_samples_batch_size", "-1", CATTR_METHOD_SALIENCY, s_ntbs},
        {"nt_samples_batch_size", "1000001", CATTR_METHOD_SALIENCY, s_ntbs_big},
        {"dtype", "2", CATTR_METHOD_SALIENCY, s_dtype},
        {"executor", "5", CATTR_METHOD_SALIENCY, s_exec},
        {"precision", "-3", CATTR_METHOD_SALIENCY, s_prec},
        {"method", "99", CATTR_METHOD_SALIENCY, s_method},
        {"sliding_window_ndim[0]", "9", CATTR_METHOD_OCCLUSION, s_win_nd},
        {"sliding_window[0][1]", "0", CATTR_METHOD_OCCLUSION, s_win_val},
        {"strides_ndim[0]", "-2", CATTR_METHOD_OCCLUSION, s_stride_nd},
        {"strides[0][0]", "-4", CATTR_METHOD_OCCLUSION, s_stride_val},
        {"n_layers", "-1", CATTR_METHOD_LAYER_ACTIVATION, s_nlayers},
        {"n_layers", "17", CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION, s_nlayers_big},
        {"neuron_kind", "4", CATTR_METHOD_NEURON_GRADIENT, s_nkind},
        {"neuron_ndim", "9", CATTR_METHOD_NEURON_DEEPLIFT, s_nndim},
        {"neuron_sum_ndim", "-1", CATTR_METHOD_NEURON_FEATURE_ABLATION, s_nsum},
        {"n_node_rules", "-1", CATTR_METHOD_DEEPLIFT, s_rules},
        {"eps", "-1", CATTR_METHOD_DEEPLIFT, s_eps},
        {"stdevs", "nan", CATTR_METHOD_GRADIENT_SHAP, s_stdevs},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const bad_param *c = &cases[k];
        cattr_attr_params p = sweep_params(c->method, CATTR_NT_NONE);
        c->set(&p);
        cattr_explainer *e = (cattr_explainer *)(uintptr_t)1;
        cattr_status st = cattr_explainer_new(model, &p, &e);
        const char *msg = cattr_last_error();
        CHECK(st == CATTR_ERR_INVALID_ARGUMENT && e == NULL, "%s = %s for %s: status %s", c->what, c->value,
              cattr_method_name(c->method), cattr_status_string(st));
        char got[64];
        snprintf(got, sizeof got, "(got %s)", c->value);
        /* the field, the value as given, and the allowed range or names ("from", "or", "at most", ">=") */
        CHECK(has(msg, c->what) && has(msg, got) &&
                  (has(msg, " from ") || has(msg, " or ") || has(msg, "at most") || has(msg, ">=") || has(msg, "one of")),
              "%s = %s: message '%s' does not name the field, the value and the allowed range", c->what, c->value,
              msg);
        if (st == CATTR_OK) cattr_explainer_free(e);
    }
    /* the quadrature's message lists the valid names */
    cattr_attr_params p = sweep_params(CATTR_METHOD_INTEGRATED_GRADIENTS, CATTR_NT_NONE);
    p.quadrature = (cattr_quadrature)-1;
    cattr_explainer *e = NULL;
    cattr_explainer_new(model, &p, &e);
    CHECK(has(cattr_last_error(), "riemann_left") && has(cattr_last_error(), "gausslegendre"),
          "unknown quadrature: '%s' lacks the valid names", cattr_last_error());
    cattr_explainer_free(e);
    /* the limits themselves are accepted */
    p = sweep_params(CATTR_METHOD_INTEGRATED_GRADIENTS, CATTR_NT_NONE);
    p.n_steps = 1000000;
    p.internal_batch_size = 1000000000;
    e = NULL;
    CHECK(cattr_explainer_new(model, &p, &e) == CATTR_OK, "n_steps 1000000 is allowed: %s", cattr_last_error());
    cattr_explainer_free(e);
    /* a field the method does not read is not checked (Saliency and n_steps) */
    p = sweep_params(CATTR_METHOD_SALIENCY, CATTR_NT_NONE);
    p.n_steps = 0;
    e = NULL;
    CHECK(cattr_explainer_new(model, &p, &e) == CATTR_OK, "Saliency ignores n_steps: %s", cattr_last_error());
    cattr_explainer_free(e);
}

/* ---- calls out of range ----------------------------------------------------------------------------------------- */

static void bad_calls(cattr_model *model, cattr_tensor *x) {
    cattr_attr_params p = sweep_params(CATTR_METHOD_FEATURE_ABLATION, CATTR_NT_NONE);
    cattr_explainer *e = NULL;
    CHECK(cattr_explainer_new(model, &p, &e) == CATTR_OK, "explainer: %s", cattr_last_error());
    if (!e) return;
    const cattr_tensor *in[1] = {x};
    static const int64_t t3[2] = {3, 3};
    struct {
        const char *what, *want;
        cattr_call call;
        cattr_target t;
    } cases[] = {
        {"n_inputs -1", "n_inputs", {in, -1, NULL, NULL, NULL, 0, NULL, NULL, NULL, 0, NULL, 0, NULL}, {0}},
        {"n_additional -2", "n_additional", {in, 1, NULL, NULL, NULL, -2, NULL, NULL, NULL, 0, NULL, 0, NULL}, {0}},
        {"n_draws -1", "n_draws", {in, 1, NULL, NULL, NULL, 0, NULL, NULL, NULL, -1, NULL, 0, NULL}, {0}},
        {"n_draws 2 without draws", "draws", {in, 1, NULL, NULL, NULL, 0, NULL, NULL, NULL, 2, NULL, 0, NULL}, {0}},
        {"n_layer_masks -1", "n_layer_masks", {in, 1, NULL, NULL, NULL, 0, NULL, NULL, NULL, 0, NULL, -1, NULL}, {0}},
        {"target kind 9", "kind", {in, 1, NULL, NULL, NULL, 0, NULL, NULL, NULL, 0, NULL, 0, NULL},
         {(cattr_target_kind)9, 1, 0, t3}},
        {"target n_idx -1", "n_idx", {in, 1, NULL, NULL, NULL, 0, NULL, NULL, NULL, 0, NULL, 0, NULL},
         {CATTR_TARGET_INDEX, -1, 0, t3}},
        {"target n_idx 1 without idx", "idx", {in, 1, NULL, NULL, NULL, 0, NULL, NULL, NULL, 0, NULL, 0, NULL},
         {CATTR_TARGET_INDEX, 1, 0, NULL}},
        {"per-example n_rows -5", "n_rows", {in, 1, NULL, NULL, NULL, 0, NULL, NULL, NULL, 0, NULL, 0, NULL},
         {CATTR_TARGET_PER_EXAMPLE, 1, -5, t3}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        cattr_call call = cases[k].call;
        cattr_target t = cases[k].t;
        call.target = t.kind || t.n_idx || t.idx ? &t : NULL;
        cattr_tensor *attr[CATTR_MAX_OUTPUTS] = {0};
        cattr_status st = cattr_explainer_run(e, &call, attr, NULL);
        CHECK(st != CATTR_OK && has(cattr_last_error(), cases[k].want) && !attr[0], "%s: status %s, message '%s'",
              cases[k].what, cattr_status_string(st), cattr_last_error());
        cattr_tensor_free(attr[0]);
    }
    void *blob = NULL;
    size_t len = 0;
    cattr_call ok_call;
    memset(&ok_call, 0, sizeof ok_call);
    ok_call.inputs = in;
    ok_call.n_inputs = 1;
    cattr_target good = {CATTR_TARGET_INDEX, 1, 0, t3};
    ok_call.target = &good;
    CHECK(cattr_explainer_run_part(e, &ok_call, 2, 2, &blob, &len) == CATTR_ERR_INVALID_ARGUMENT &&
              has(cattr_last_error(), "part") && has(cattr_last_error(), "(got 2)") && !blob,
          "part 2 of 2: '%s'", cattr_last_error());
    CHECK(cattr_explainer_run_part(e, &ok_call, 0, 0, &blob, &len) == CATTR_ERR_INVALID_ARGUMENT &&
              has(cattr_last_error(), "n_parts") && !blob,
          "0 parts: '%s'", cattr_last_error());
    cattr_explainer_free(e);
}

/* ---- the memory-budget warning: once per explainer ------------------------------------------------------------ */

static int n_budget_warnings;
static void count_warnings(cattr_log_level level, const char *message, void *user) {
    (void)user;
    if (level == CATTR_LOG_WARN && strstr(message, "memory budget")) n_budget_warnings++;
}

static void warning_once(cattr_model *model, cattr_tensor *x, cattr_tensor *zeros) {
    const struct {
        cattr_method m;
        cattr_noise_tunnel nt;
    } cases[] = {{CATTR_METHOD_INTEGRATED_GRADIENTS, CATTR_NT_NONE},   {CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS, CATTR_NT_NONE},
                 {CATTR_METHOD_SALIENCY, CATTR_NT_SMOOTHGRAD},         {CATTR_METHOD_GRADIENT_SHAP, CATTR_NT_NONE},
                 {CATTR_METHOD_LIME, CATTR_NT_NONE},                   {CATTR_METHOD_FEATURE_ABLATION, CATTR_NT_NONE}};
    const cattr_tensor *in[1] = {x}, *base[1] = {zeros};
    static const int64_t t3 = 3;
    cattr_target good = {CATTR_TARGET_INDEX, 1, 0, &t3};
    cattr_set_log_callback(count_warnings, NULL);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        cattr_attr_params p = sweep_params(cases[k].m, cases[k].nt);
        p.max_memory = 1; /* below one step, row, point or sample: the warning, and one per chunk */
        cattr_explainer *e = NULL;
        CHECK(cattr_explainer_new(model, &p, &e) == CATTR_OK, "explainer: %s", cattr_last_error());
        n_budget_warnings = 0;
        for (int run = 0; run < 2 && e; run++) {
            cattr_tensor *attr[CATTR_MAX_OUTPUTS] = {0};
            CHECK(cattr_explainer_attribute(e, in, 1, base, &good, NULL, 0, attr, NULL) == CATTR_OK, "%s run %d: %s",
                  cattr_method_name(cases[k].m), run, cattr_last_error());
            for (int i = 0; i < CATTR_MAX_OUTPUTS; i++) cattr_tensor_free(attr[i]);
        }
        CHECK(n_budget_warnings == 1, "%s%s: %d memory-budget warnings over two runs on one explainer (want 1)",
              cattr_method_name(cases[k].m), cases[k].nt ? " (noise tunnel)" : "", n_budget_warnings);
        cattr_explainer_free(e);
    }
    cattr_set_log_callback(NULL, NULL);
}

/* ---- the language-model API ------------------------------------------------------------------------------------ */

static void llm_sweep(void) {
    cattr_llm *m = NULL;
    if (cattr_llm_load("tests/data/llm/tiny", &m) != CATTR_OK) {
        CHECK(false, "tests/data/llm/tiny: %s", cattr_last_error());
        return;
    }
    int64_t V = cattr_llm_vocab_size(m);
    const cattr_method methods[] = {CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS, CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION,
                                    CATTR_METHOD_FEATURE_ABLATION, CATTR_METHOD_SHAPLEY_VALUE_SAMPLING,
                                    CATTR_METHOD_LIME, CATTR_METHOD_KERNEL_SHAP};
    int64_t prompt[3] = {5, 6, 7}, target[2] = {8, 9}, bad_prompt[3] = {5, V, 7}, bad_target[2] = {8, -1};
    double seq[8], tok[16];
    for (size_t k = 0; k < sizeof methods / sizeof methods[0]; k++) {
        const char *mn = cattr_method_name(methods[k]);
        cattr_attr_params p = cattr_attr_default_params(methods[k]);
        p.n_steps = 4;
        p.n_samples = 3;
        cattr_llm_call c = cattr_llm_call_make(prompt, 3, target, 2);
        CHECK(cattr_llm_attribute(m, &p, &c, seq, tok, NULL, NULL) == CATTR_OK, "llm %s: the valid call: %s", mn,
              cattr_last_error());
        c = cattr_llm_call_make(bad_prompt, 3, target, 2);
        cattr_status st = cattr_llm_attribute(m, &p, &c, seq, tok, NULL, NULL);
        CHECK(st == CATTR_ERR_INVALID_ARGUMENT && has(cattr_last_error(), "prompt") && has(cattr_last_error(), "vocabulary"),
              "llm %s, prompt id %lld: %s '%s'", mn, (long long)V, cattr_status_string(st), cattr_last_error());
        c = cattr_llm_call_make(prompt, 3, bad_target, 2);
        st = cattr_llm_attribute(m, &p, &c, seq, tok, NULL, NULL);
        CHECK(st == CATTR_ERR_INVALID_ARGUMENT && has(cattr_last_error(), "target") && has(cattr_last_error(), "vocabulary"),
              "llm %s, target id -1: %s '%s'", mn, cattr_status_string(st), cattr_last_error());
        c = cattr_llm_call_make(prompt, 3, target, 2);
        c.baseline_token = V + 5;
        st = cattr_llm_attribute(m, &p, &c, seq, tok, NULL, NULL);
        CHECK(st == CATTR_ERR_INVALID_ARGUMENT && has(cattr_last_error(), "baseline"), "llm %s, baseline token %lld: %s '%s'",
              mn, (long long)(V + 5), cattr_status_string(st), cattr_last_error());
        /* the split form refuses them too, writing no blob */
        if (methods[k] != CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION) {
            p.perturbations_per_eval = methods[k] == CATTR_METHOD_FEATURE_ABLATION ? 2 : 0;
            void *blob = NULL;
            size_t len = 0;
            c = cattr_llm_call_make(prompt, 3, bad_target, 2);
            st = cattr_llm_attribute_part(m, &p, &c, 0, 2, &blob, &len);
            CHECK(st != CATTR_OK && has(cattr_last_error(), "target") && !blob && len == 0,
                  "llm %s part, target id -1: %s '%s'", mn, cattr_status_string(st), cattr_last_error());
            free(blob);
        }
    }
    /* the template form, generation, decoding */
    cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_FEATURE_ABLATION);
    const char *vals[1] = {"a"};
    cattr_status st = cattr_llm_attribute_template(m, &p, "x {} y", vals, NULL, 1, bad_target, 2, seq, tok);
    CHECK(st == CATTR_ERR_INVALID_ARGUMENT && has(cattr_last_error(), "target"), "llm template, target id -1: %s '%s'",
          cattr_status_string(st), cattr_last_error());
    int64_t *gen = NULL, ng = 0;
    st = cattr_llm_generate(m, CATTR_FLOAT32, bad_prompt, 3, 2, &gen, &ng);
    CHECK(st == CATTR_ERR_INVALID_ARGUMENT && has(cattr_last_error(), "prompt") && !gen, "llm generate, prompt id %lld: %s '%s'",
          (long long)V, cattr_status_string(st), cattr_last_error());
    free(gen);
    char buf[64];
    cattr_llm_token_text(m, V + 3, buf, sizeof buf);
    cattr_llm_token_text(m, -4, buf, sizeof buf); /* no crash: ids outside the vocabulary have no text */
    char *text = NULL;
    st = cattr_llm_decode(m, bad_prompt, 3, 0, &text);
    CHECK(st == CATTR_OK && text, "llm decode skips ids outside the vocabulary: %s", cattr_last_error());
    free(text);
    cattr_llm_free(m);
}

int main(void) {
    cattr_model *model = NULL;
    if (cattr_model_load_onnx("models/digits/digits.onnx", &model) != CATTR_OK) {
        printf("FAIL cannot load models/digits/digits.onnx: %s\n", cattr_last_error());
        return 1;
    }
    cattr_tensor *a = NULL, *b = NULL, *x = NULL, *xnan = NULL, *zeros = NULL, *bnan = NULL;
    CHECK(cattr_tensor_load_npy("models/digits/samples/digit_3.npy", &a) == CATTR_OK &&
              cattr_tensor_load_npy("models/digits/samples/digit_7.npy", &b) == CATTR_OK,
          "samples: %s", cattr_last_error());
    if (!a || !b) return 1;
    const int64_t sh[4] = {2, 1, 8, 8};
    cattr_tensor_new(CATTR_FLOAT32, 4, sh, &x);
    cattr_tensor_new(CATTR_FLOAT32, 4, sh, &zeros);
    memcpy(cattr_tensor_data(x), cattr_tensor_data(a), 64 * sizeof(float));
    memcpy((float *)cattr_tensor_data(x) + 64, cattr_tensor_data(b), 64 * sizeof(float));
    cattr_tensor_convert(x, CATTR_FLOAT32, &xnan);
    cattr_tensor_convert(zeros, CATTR_FLOAT32, &bnan);
    ((float *)cattr_tensor_data(xnan))[64 + 27] = NAN; /* example 1 */
    ((float *)cattr_tensor_data(bnan))[10] = NAN;
    for (int m = 0; m < CATTR_METHOD_COUNT; m++) {
        if (!cattr_method_implemented((cattr_method)m)) continue;
        sweep_method(model, (cattr_method)m, CATTR_NT_NONE, x, xnan, zeros, bnan);
        sweep_method(model, (cattr_method)m, CATTR_NT_SMOOTHGRAD, x, xnan, zeros, bnan);
    }
    CHECK(n_swept == CATTR_METHOD_COUNT, "%d of %d methods swept", n_swept, CATTR_METHOD_COUNT);
    CHECK(n_tunnels > 0, "no method took a noise tunnel");
    printf("%d methods, %d in a noise tunnel\n", n_swept, n_tunnels);
    ignored_target(model, x, zeros);
    bad_params(model);
    bad_calls(model, x);
    warning_once(model, x, zeros);
    llm_sweep();
    cattr_tensor_free(a);
    cattr_tensor_free(b);
    cattr_tensor_free(x);
    cattr_tensor_free(xnan);
    cattr_tensor_free(zeros);
    cattr_tensor_free(bnan);
    cattr_model_free(model);
    if (g_failures) printf("%d failures\n", g_failures);
    else printf("sweep: all passed\n");
    return g_failures ? 1 : 0;
}
