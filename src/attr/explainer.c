/* explainer.c - the explainer's lifetime and its public entry points: make one for a model, a method and a device,
 * run a call (preparation in call.c, the method's work through the batched passes of passes.c and the method
 * files, a NaN in the result diagnosed by running it again in check mode), free it. */
#include "attr/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdatomic.h>
#include <time.h>

#define MAX_IN CX_MAX_IN

/* ---- lifetime ---------------------------------------------------------------------------------------------- */

/* Model m with every input whose batch is on another dim than the first (cx_model_batch_axis) taken batch-first: a
 * graph input of the permuted shape, a Transpose back to the declared layout, then m's nodes (constants borrowed: m
 * outlives it). *out NULL when every input is batch-first. */
static cattr_status batch_first(const cattr_model *m, cattr_model **out) {
    *out = NULL;
    const cg_graph *mg = m->g;
    int n = mg->n_inputs, moved = 0;
    for (int i = 0; i < n; i++) moved += cx_model_batch_axis(m, i) != 0;
    if (!moved) return CATTR_OK;
    cg_graph *g = NULL;
    int *map = NULL, in_map[CX_MAX_IN], from[CX_MAX_IN];
    if (n > CX_MAX_IN) return cx_fail(CATTR_ERR_UNSUPPORTED, "more than %d model inputs", CX_MAX_IN);
    CX_CHECK(cx_derive_new(mg, &g, &map));
    cattr_status st = CATTR_OK;
    for (int i = 0; i < n && st == CATTR_OK; i++) {
        from[i] = i;
        int k = cx_model_batch_axis(m, i), v = cg_add_input(g, mg->vals[mg->inputs[i]].name);
        in_map[i] = v;
        if (v >= 0 && k) { /* [B, d0, .., d(k-1), d(k+1), ..] -> the declared [d0, .., B, ..] */
            cg_attrs a = cg_attrs_default();
            int nd = m->in_ndim[i];
            a.n_ints = nd;
            for (int d = 0; d < nd; d++) a.ints[d] = d < k ? d + 1 : d == k ? 0 : d;
            char nm[300];
            snprintf(nm, sizeof nm, "%s:batch_dim_%d", mg->vals[mg->inputs[i]].name, k);
            in_map[i] = cg_add_node(g, CG_TRANSPOSE, nm, &v, 1, &a, nm);
        }
        if (in_map[i] < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK) st = cx_graph_append_model(g, mg, in_map, map);
    for (int k = 0; st == CATTR_OK && k < mg->n_outputs; k++)
        if (cg_add_output(g, map[mg->outputs[k]]) != 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    free(map);
    if (st != CATTR_OK) {
        cg_free(g);
        return st;
    }
    CX_CHECK(cx_model_wrap(m, g, from, out));
    for (int i = 0; i < n; i++) { /* the declared shape, batch-first */
        int k = cx_model_batch_axis(m, i);
        if (!k) continue;
        int64_t b = (*out)->in_shape[i][k];
        memmove(&(*out)->in_shape[i][1], &(*out)->in_shape[i][0], (size_t)k * sizeof(int64_t));
        (*out)->in_shape[i][0] = b;
        (*out)->in_batch_axis[i] = 0;
    }
    return CATTR_OK;
}

cattr_status cattr_explainer_new(const cattr_model *model, const cattr_attr_params *params, cattr_explainer **out) {
    if (!out) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    if (!model || !params) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "model and params are required");
    const cattr_attr_params *p = params;
    CX_CHECK(cx_params_check(p)); /* every field the method reads, in its range (methods.c) */
    if (!cattr_method_implemented(p->method))
        return cx_fail(CATTR_ERR_UNSUPPORTED, "method %s is not implemented yet", cattr_method_name(p->method));
    if (p->nt_type != CATTR_NT_NONE && !cx_noise_tunnel)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "NoiseTunnel is not implemented yet");
    cattr_explainer *e = calloc(1, sizeof *e);
    if (!e) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    e->m = e->user_model = model;
    e->p = *p;
    e->method = cx_methods[p->method];
    cg_rules_default(&e->rules);
    cattr_status st = p->device ? cx_backend_by_name(p->device, &e->be) : cx_model_backend(model, &e->be);
    e->p.device = NULL; /* borrowed for this call only; e->be keeps the choice */
    if (st == CATTR_OK) st = cx_model_with_precision(model, p->precision, p->dtype, e->be, &e->own_model);
    if (e->own_model) e->m = e->own_model;
    if (st == CATTR_OK) st = batch_first(e->m, &e->bf_model);
    if (e->bf_model) {
        int n = e->m->g->n_inputs;
        e->batch_axis = malloc((size_t)n * sizeof *e->batch_axis);
        if (!e->batch_axis) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        for (int i = 0; e->batch_axis && i < n; i++) e->batch_axis[i] = cx_model_batch_axis(e->m, i);
        e->m = e->bf_model;
    }
    int n_model = model->g->n_inputs;
    e->fold = st == CATTR_OK ? malloc((size_t)(n_model + 1) * sizeof *e->fold) : NULL;
    if (st == CATTR_OK && !e->fold) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) {
        int n_fold = cx_model_fold_inputs(model, e->fold);
        if (n_fold < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (n_fold == 0) {
            free(e->fold);
            e->fold = NULL;
        }
    }
    if (st == CATTR_OK && e->method->init) st = e->method->init(e);
    if (st == CATTR_OK) st = cx_consts_new(e->be, p->dtype, &e->consts);
    if (st != CATTR_OK) {
        cattr_explainer_free(e);
        return st;
    }
    *out = e;
    return CATTR_OK;
}

static void fold_entry_free(const cattr_explainer *e, struct cx_fold_entry *f) {
    cattr_explainer_free(f->e);
    cattr_model_free(f->m);
    for (int k = 0; f->vals && k < e->m->g->n_inputs; k++) cattr_tensor_free(f->vals[k]);
    free(f->vals);
    memset(f, 0, sizeof *f);
}

void cattr_explainer_free(cattr_explainer *e) {
    if (!e) return;
    if (e->method && e->method->release) e->method->release(e);
    cx_tunnel_release(e);
    cx_drop_plans(e);
    cx_second_order_free(e);
    cx_example_grads_free(e);
    for (int k = 0; k < CX_HELPER_CACHE; k++) cx_derived_free(&e->helpers[k].d);
    cx_buf_free(&e->spread_ids);
    free(e->spread_ids_host);
    for (int i = 0; i < CX_MAX_IN; i++) {
        cx_buf_free(&e->kept[i]);
        cx_buf_free(&e->staged[i]);
        cx_buf_free(&e->dstaged[i]);
    }
    cg_free(e->g);
    cx_consts_free(e->consts);
    free(e->alphas);
    free(e->steps);
    free(e->fx);
    for (int k = 0; k < CX_FOLD_CACHE; k++) fold_entry_free(e, &e->spec[k]); /* reads e->m; borrows its weights */
    cattr_model_free(e->bf_model); /* borrows own_model's constants */
    free(e->batch_axis);
    cattr_model_free(e->own_model);
    free(e->fold);
    free(e);
}

size_t cattr_explainer_peak_memory(const cattr_explainer *e) { return e ? e->peak : 0; }

void cx_budget_warn(cattr_explainer *e, const char *fmt, ...) {
    if (e->budget_warned) return;
    e->budget_warned = true;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cx_log(CATTR_LOG_WARN, "%s", msg);
}

/* Builds the gradient graph for the first n_attr model inputs under the method's rules. */
/* Methods that leave their attributions on the backend when the call asks (cx_call.attr_dev), deltas included. */
static bool takes_attr_dev(const cx_method *m) {
    return m == &cx_method_integrated_gradients || m == &cx_method_saliency || m == &cx_method_input_x_gradient;
}

static cattr_status run_once(cattr_explainer *e, const cattr_call *call, cattr_tensor **attr_out,
                             cattr_tensor **delta_out, int *n_written) {
    cx_call c;
    cattr_tensor *attr[MAX_IN] = {0}, *delta = NULL;
    e->fx_n = 0;
    cx_watch_note(e->p.progress, e->p.progress_user, 0, 0); /* a pass's beat before the first chunk: 0 of 0 */
    cattr_status st = cx_prepare(e, call, &c);
    if (st == CATTR_OK) st = cx_build_grad_graph(e, call->n_inputs);
    /* a target given: against the model output for these inputs, before any work, so that every method (and every
     * part of a split call, also one that computes no chunk) refuses an out-of-range target alike. (No target is
     * checked by each method: the perturbation methods take a model output of several values per example.) */
    if (st == CATTR_OK && c.target && c.target->kind != CATTR_TARGET_NONE && cx_method_takes_target(e->p.method)) {
        cattr_tensor *seed = NULL;
        st = cx_seed_block(e, &c, &seed);
        cattr_tensor_free(seed);
    }
    /* summed over the last axis (e->sum_last): from the backend where the method leaves its attributions there */
    bool sum = st == CATTR_OK && e->sum_last && e->split.n_parts == 0;
    bool dev = sum && e->p.nt_type == CATTR_NT_NONE && e->split.n_comb == 0 && takes_attr_dev(e->method);
    cx_buf ad[MAX_IN];
    memset(ad, 0, sizeof ad);
    for (int i = 0; dev && i < c.n && st == CATTR_OK; i++) {
        st = cx_buf_fit(e->be, &ad[i], (size_t)c.x[i]->numel * cattr_dtype_size(c.dt), NULL, false);
        c.attr_dev[i] = ad[i].p;
    }
    if (st == CATTR_OK) {
        if (e->p.nt_type != CATTR_NT_NONE) st = cx_noise_tunnel(e, &c, attr, delta_out ? &delta : NULL);
        else st = e->method->attribute(e, &c, attr, delta_out ? &delta : NULL);
    }
    if (st == CATTR_OK && sum) {
        cattr_tensor *like[MAX_IN] = {0}, *summed[MAX_IN] = {0};
        for (int i = 0; i < c.n; i++) like[i] = dev ? c.x[i] : attr[i];
        st = c.n_out > 0 ? cx_fail(CATTR_ERR_INTERNAL, "sum_last is for attributions of the inputs")
                         : cx_sum_last(e, &c, c.n, like, dev ? c.attr_dev : NULL, summed);
        for (int i = 0; i < c.n; i++) {
            cattr_tensor_free(attr[i]);
            attr[i] = summed[i];
        }
    }
    for (int i = 0; i < MAX_IN; i++) cx_buf_free(&ad[i]);
    if (e->p.nt_type != CATTR_NT_NONE || st != CATTR_OK) e->fx_n = 0; /* f at noisy inputs is not f(x) */
    int c_n_out = c.n_out;
    cx_call_free(&c);
    if (st != CATTR_OK) {
        for (int i = 0; i < MAX_IN; i++) cattr_tensor_free(attr[i]);
        cattr_tensor_free(delta);
        return st;
    }
    int n_out = c_n_out > 0 ? c_n_out : call->n_inputs;
    for (int i = 0; i < n_out; i++) attr_out[i] = attr[i];
    if (delta_out) *delta_out = delta;
    else cattr_tensor_free(delta);
    *n_written = n_out;
    return CATTR_OK;
}

static bool same_tensor(const cattr_tensor *a, const cattr_tensor *b) {
    return a->dtype == b->dtype && cx_shape_eq(a->ndim, a->shape, b->ndim, b->shape) &&
           memcmp(a->data, b->data, (size_t)a->numel * cattr_dtype_size(a->dtype)) == 0;
}

/* The explainer's n_steps for the next call (the IG points are recomputed when it changes). */
static void set_steps(cattr_explainer *e, int n) {
    if (e->p.n_steps == n) return;
    free(e->alphas);
    free(e->steps);
    e->alphas = e->steps = NULL;
    e->p.n_steps = n;
}

/* A call to a model with integer inputs that give shapes (e->fold): the inner explainer of the model with the call's
 * values of those inputs as constants (made on first use, the least recently used of CX_FOLD_CACHE evicted), run on
 * the call without them. Calls that do not give those inputs as additional inputs run as they are (and fail there
 * with the planner's message). */
static cattr_status run_folded(cattr_explainer *e, const cattr_call *call, cattr_tensor **attr_out,
                               cattr_tensor **delta_out, bool *handled) {
    int n_model = e->m->g->n_inputs;
    *handled = false;
    for (int k = 0; k < n_model; k++)
        if (e->fold[k] && (k < call->n_inputs || k - call->n_inputs >= call->n_additional || !call->additional ||
                           !call->additional[k - call->n_inputs]))
            return CATTR_OK;
    *handled = true;
    struct cx_fold_entry *f = NULL, *lru = &e->spec[0]; /* the match, else an empty entry or the least used */
    for (int s = 0; s < CX_FOLD_CACHE && !f; s++) {
        struct cx_fold_entry *c = &e->spec[s];
        if (!c->e || (lru->e && c->used < lru->used)) lru = c;
        bool same = c->e != NULL;
        for (int k = 0; k < n_model && same; k++)
            if (e->fold[k]) same = same_tensor(c->vals[k], call->additional[k - call->n_inputs]);
        if (same) f = c;
    }
    if (!f) {
        f = lru;
        fold_entry_free(e, f);
        const cattr_tensor **vals = calloc((size_t)n_model + 1, sizeof *vals);
        f->vals = calloc((size_t)n_model + 1, sizeof *f->vals);
        cattr_status st = vals && f->vals ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        for (int k = 0; k < n_model && st == CATTR_OK; k++)
            if (e->fold[k]) {
                vals[k] = call->additional[k - call->n_inputs];
                st = cattr_tensor_convert(vals[k], vals[k]->dtype, &f->vals[k]);
            }
        /* the model in the caller's layout (its own explainer takes inputs batch-first in turn) */
        const cattr_model *base = e->bf_model ? (e->own_model ? e->own_model : e->user_model) : e->m;
        if (st == CATTR_OK) st = cx_model_specialize(base, e->fold, vals, &f->m);
        cattr_attr_params p = e->p;
        p.device = e->be->name;
        p.precision = CATTR_PRECISION_HIGHEST; /* e->m is already at the precision asked for */
        if (st == CATTR_OK) st = cattr_explainer_new(f->m, &p, &f->e);
        free(vals);
        if (st != CATTR_OK) {
            fold_entry_free(e, f);
            return st;
        }
    }
    f->used = ++e->spec_clock;
    set_steps(f->e, e->p.n_steps); /* an auto call's count of this try */
    const cattr_tensor **rest = calloc((size_t)call->n_additional + 1, sizeof *rest);
    if (!rest) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_call c2 = *call;
    c2.n_additional = 0;
    for (int j = 0; j < call->n_additional; j++)
        if (call->n_inputs + j >= n_model || !e->fold[call->n_inputs + j]) rest[c2.n_additional++] = call->additional[j];
    c2.additional = rest;
    cattr_status st = cattr_explainer_run(f->e, &c2, attr_out, delta_out);
    if (f->e->peak > e->peak) e->peak = f->e->peak;
    free(rest);
    return st;
}

/* One call at the explainer's n_steps: the folded model's explainer or run_once, and the NaN diagnosis. */
static cattr_status run_checked(cattr_explainer *e, const cattr_call *call, cattr_tensor **attr_out,
                                cattr_tensor **delta_out) {
    if (e->fold) {
        bool handled;
        cattr_status fs = run_folded(e, call, attr_out, delta_out, &handled);
        if (handled) {
            if (fs == CATTR_OK) e->steps_used = e->p.n_steps;
            return fs;
        }
    }
    cattr_tensor *attr[MAX_IN] = {0}, *delta = NULL;
    int n = 0;
    cattr_status st = run_once(e, call, attr, delta_out ? &delta : NULL, &n);
    if (st != CATTR_OK) return st;
    if (e->p.check_finite && cx_check_results(attr, n, delta) != CATTR_OK) {
        /* a NaN or Inf in the result is an error naming where it first appeared: the call runs again with every
         * pass checking its values (slow, and only on this path) */
        char found[1024];
        snprintf(found, sizeof found, "%s", cattr_last_error());
        for (int i = 0; i < MAX_IN; i++) cattr_tensor_free(attr[i]);
        cattr_tensor_free(delta);
        e->diagnose = true;
        cattr_tensor *a2[MAX_IN] = {0}, *d2 = NULL;
        int n2 = 0;
        st = run_once(e, call, a2, delta_out ? &d2 : NULL, &n2);
        e->diagnose = false;
        for (int i = 0; i < MAX_IN; i++) cattr_tensor_free(a2[i]);
        cattr_tensor_free(d2);
        return cx_diagnosis(st, found);
    }
    for (int i = 0; i < n; i++) attr_out[i] = attr[i];
    if (delta_out) *delta_out = delta;
    e->steps_used = e->p.n_steps;
    return CATTR_OK;
}

/* ---- n_steps auto --------------------------------------------------------------------------------------------------
 * IG and LayerIG with n_steps CATTR_STEPS_AUTO run at 8, 16, 32, ... steps (at most max_steps, the last try max_steps
 * itself) and stop at the first count whose convergence delta is within delta_tol of the attributions' total for
 * every example: |delta_b| <= delta_tol * (the sum of |attribution| over example b). (Not of the signed sum: a target
 * whose output barely moves from the baseline has a signed sum near 0 and attributions that are not.) Gauss-Legendre points of one count are not
 * among those of another, so each try is a whole call (the plans, constants and uploads of the call are reused); the
 * work is at most about twice that of the count reached. */

/* Example b's sum of |attribution| over the n tensors (the batch on dim axis[i] of tensor i). */
static double example_abs_sum(cattr_tensor *const *attr, int n, const int *axis, int64_t b) {
    double s = 0;
    for (int i = 0; i < n; i++) {
        const cattr_tensor *t = attr[i];
        int k = axis ? axis[i] : 0;
        if (!t || t->ndim <= k) continue;
        int64_t pre = 1, post = 1;
        for (int d = 0; d < k; d++) pre *= t->shape[d];
        for (int d = k + 1; d < t->ndim; d++) post *= t->shape[d];
        if (b >= t->shape[k]) continue;
        for (int64_t p = 0; p < pre; p++)
            for (int64_t q = 0; q < post; q++) s += fabs(cx_tensor_get(t, (p * t->shape[k] + b) * post + q));
    }
    return s;
}

/* The largest |delta_b| / sum_b |attr| of a call (0 when every delta is 0; inf where the attributions are 0 and the
 * delta is not). */
static double worst_relative_delta(const cattr_explainer *e, cattr_tensor *const *attr, int n,
                                   const cattr_tensor *delta) {
    bool inputs = e->p.method == CATTR_METHOD_INTEGRATED_GRADIENTS;
    double worst = 0;
    for (int64_t b = 0; b < delta->numel; b++) {
        double d = fabs(cx_tensor_get(delta, b)), s = example_abs_sum(attr, n, inputs ? e->batch_axis : NULL, b);
        double r = d == 0 ? 0 : (s > 0 ? d / s : INFINITY);
        if (!(r <= worst)) worst = r; /* NaN stays the worst */
    }
    return worst;
}

static cattr_status run_auto_steps(cattr_explainer *e, const cattr_call *call, cattr_tensor **attr_out,
                                   cattr_tensor **delta_out) {
    int max = e->p.max_steps, n = max < 8 ? max : 8, want_delta = e->p.return_convergence_delta;
    cattr_status st = CATTR_OK;
    e->p.return_convergence_delta = 1; /* what the tries stop on */
    for (;;) {
        set_steps(e, n);
        cattr_tensor *attr[MAX_IN] = {0}, *delta = NULL;
        st = run_checked(e, call, attr, &delta);
        if (st == CATTR_OK && !delta)
            st = cx_fail(CATTR_ERR_INTERNAL, "n_steps auto: %s gave no convergence delta", cattr_method_name(e->method->id));
        int k = 0;
        while (k < MAX_IN && attr[k]) k++;
        double worst = st == CATTR_OK ? worst_relative_delta(e, attr, k, delta) : 0;
        bool done = st != CATTR_OK || worst <= e->p.delta_tol || n >= max;
        if (st == CATTR_OK)
            cx_log(CATTR_LOG_INFO, "n_steps auto: %d steps, largest |delta| / sum |attribution| %.3g (tolerance %.3g)",
                   n, worst, e->p.delta_tol);
        if (done && st == CATTR_OK && !(worst <= e->p.delta_tol))
            cx_log(CATTR_LOG_WARN, "n_steps auto: the convergence delta is still %.3g of the sum of |attribution| at "
                   "max_steps = %d (tolerance %.3g); the attributions of %d steps are returned", worst, max,
                   e->p.delta_tol, n);
        if (done && st == CATTR_OK) {
            for (int i = 0; i < k; i++) attr_out[i] = attr[i];
            if (delta_out && want_delta) *delta_out = delta;
            else cattr_tensor_free(delta);
            e->steps_used = n;
        } else {
            for (int i = 0; i < MAX_IN; i++) cattr_tensor_free(attr[i]);
            cattr_tensor_free(delta);
        }
        if (done) break;
        n = n > max / 2 ? max : 2 * n;
    }
    set_steps(e, CATTR_STEPS_AUTO);
    e->p.return_convergence_delta = want_delta;
    return st;
}

cattr_status cattr_explainer_run(cattr_explainer *e, const cattr_call *call, cattr_tensor **attr_out,
                                 cattr_tensor **delta_out) {
    if (!e || !attr_out || !call) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explainer, call and attr_out are required");
    if (delta_out) *delta_out = NULL;
    if (e->p.n_steps == CATTR_STEPS_AUTO) return run_auto_steps(e, call, attr_out, delta_out);
    return run_checked(e, call, attr_out, delta_out);
}

int cattr_explainer_steps_used(const cattr_explainer *e) { return e ? e->steps_used : 0; }

const char *cattr_split_kind(const cattr_attr_params *p) {
    if (!p) return NULL;
    cattr_method m = p->method;
    if (p->nt_type != CATTR_NT_NONE) /* a tunnel splits its samples */
        return m == CATTR_METHOD_SALIENCY || m == CATTR_METHOD_INPUT_X_GRADIENT || m == CATTR_METHOD_GUIDED_BACKPROP ||
                       m == CATTR_METHOD_DECONVOLUTION || m == CATTR_METHOD_INTEGRATED_GRADIENTS ||
                       m == CATTR_METHOD_DEEPLIFT || m == CATTR_METHOD_FEATURE_ABLATION || m == CATTR_METHOD_OCCLUSION ||
                       m == CATTR_METHOD_SHAPLEY_VALUE_SAMPLING || m == CATTR_METHOD_LIME || m == CATTR_METHOD_KERNEL_SHAP
                   ? "samples"
                   : NULL;
    switch (m) {
    case CATTR_METHOD_INTEGRATED_GRADIENTS: case CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS:
    case CATTR_METHOD_LAYER_CONDUCTANCE: case CATTR_METHOD_INTERNAL_INFLUENCE:
    case CATTR_METHOD_NEURON_INTEGRATED_GRADIENTS: case CATTR_METHOD_NEURON_CONDUCTANCE: return "steps";
    case CATTR_METHOD_FEATURE_ABLATION: case CATTR_METHOD_FEATURE_PERMUTATION: case CATTR_METHOD_OCCLUSION:
        return "features";
    case CATTR_METHOD_SHAPLEY_VALUE_SAMPLING: case CATTR_METHOD_SHAPLEY_VALUES: case CATTR_METHOD_LIME:
    case CATTR_METHOD_KERNEL_SHAP: case CATTR_METHOD_GRADIENT_SHAP: return "samples";
    default: return NULL;
    }
}

/* Whether the explainer's call can be split into parts (cattr_explainer_run_part). */
static cattr_status split_supported(const cattr_explainer *e) {
    bool ok = cattr_split_kind(&e->p) != NULL, tunnel = e->p.nt_type != CATTR_NT_NONE;
    if (!ok)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "splitting one attribution into parts is implemented for "
                       "integrated-gradients, feature-ablation, feature-permutation, occlusion, "
                       "shapley-value-sampling, shapley-values, lime, kernel-shap, gradient-shap, the path methods of "
                       "layers and neurons (layer-integrated-gradients, layer-conductance, internal-influence, "
                       "neuron-integrated-gradients, neuron-conductance), and a noise tunnel around saliency, "
                       "input-x-gradient, guided-backprop, deconvolution, integrated-gradients, deeplift, "
                       "feature-ablation, occlusion, shapley-value-sampling, lime or kernel-shap (not %s%s)",
                       cattr_method_name(e->method->id), tunnel ? " with a noise tunnel" : "");
    if (e->fold)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "splitting one attribution into parts: the model has integer inputs that "
                       "give shapes");
    if (e->p.n_steps == CATTR_STEPS_AUTO)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "splitting one attribution into parts needs a number of steps, not auto "
                       "(every part must cut the same steps)");
    return CATTR_OK;
}

cattr_status cattr_explainer_run_part(cattr_explainer *e, const cattr_call *call, int part, int n_parts, void **blob,
                                      size_t *len) {
    if (blob) *blob = NULL;
    if (len) *len = 0;
    if (!e || !call || !blob || !len) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explainer, call, blob and len are required");
    if (n_parts < 1) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_parts must be >= 1 (got %d)", n_parts);
    if (part < 0 || part >= n_parts)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "part must be from 0 to n_parts - 1 = %d (got %d)", n_parts - 1,
                       part);
    CX_CHECK(split_supported(e));
    e->split = (struct cx_split){part, n_parts, blob, len, NULL, NULL, 0};
    cattr_tensor *attr[MAX_IN] = {0};
    int n = 0;
    cattr_status st = run_once(e, call, attr, NULL, &n);
    memset(&e->split, 0, sizeof e->split);
    for (int i = 0; i < MAX_IN; i++) cattr_tensor_free(attr[i]);
    if (st != CATTR_OK) {
        free(*blob);
        *blob = NULL;
        *len = 0;
    }
    return st;
}

cattr_status cattr_explainer_combine(cattr_explainer *e, const cattr_call *call, const void *const *blobs,
                                     const size_t *lens, int n_parts, cattr_tensor **attr_out,
                                     cattr_tensor **delta_out) {
    if (delta_out) *delta_out = NULL;
    if (!e || !call || !attr_out || !blobs || !lens)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explainer, call, attr_out, blobs and lens are required");
    if (n_parts < 1) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_parts must be >= 1 (got %d)", n_parts);
    CX_CHECK(split_supported(e));
    e->split = (struct cx_split){0, 0, NULL, NULL, blobs, lens, n_parts};
    cattr_tensor *attr[MAX_IN] = {0}, *delta = NULL;
    int n = 0;
    cattr_status st = run_once(e, call, attr, delta_out ? &delta : NULL, &n);
    memset(&e->split, 0, sizeof e->split);
    if (st != CATTR_OK) return st;
    for (int i = 0; i < n; i++) attr_out[i] = attr[i];
    if (delta_out) *delta_out = delta;
    return CATTR_OK;
}

cattr_status cattr_explainer_attribute(cattr_explainer *e, const cattr_tensor *const *inputs, int n_inputs,
                                       const cattr_tensor *const *baselines, const cattr_target *target,
                                       const cattr_tensor *const *additional, int n_additional,
                                       cattr_tensor **attr_out, cattr_tensor **delta_out) {
    cattr_call call;
    memset(&call, 0, sizeof call);
    call.inputs = inputs;
    call.n_inputs = n_inputs;
    call.baselines = baselines;
    call.target = target;
    call.additional = additional;
    call.n_additional = n_additional;
    return cattr_explainer_run(e, &call, attr_out, delta_out);
}

