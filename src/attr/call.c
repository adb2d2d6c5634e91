/* call.c - a call's preparation: inputs and baselines checked (float, one batch, the declared shapes, finite),
 * converted to the compute dtype and broadcast; additional inputs checked; targets turned into masks. */
#include "attr/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdatomic.h>
#include <time.h>

#define MAX_IN CX_MAX_IN

/* ---- validation ------------------------------------------------------------------------------------------- */

static cattr_status check_finite(const cattr_tensor *t, const char *what, int i) {
    int64_t k = cx_tensor_first_nonfinite(t);
    if (k >= 0)
        return cx_fail(CATTR_ERR_NONFINITE, "%s %d has a non-finite value (%g) at flat index %lld", what, i,
                       cx_tensor_get(t, k), (long long)k);
    return CATTR_OK;
}

/* The target's own fields (its indices against the output are checked by cx_target_mask): the kind, the number of
 * indices per example, the array, and a per-example target's rows against the batch B. */
static cattr_status check_target(const cattr_target *t, int64_t B) {
    if (!t || t->kind == CATTR_TARGET_NONE) return CATTR_OK;
    if (t->kind != CATTR_TARGET_INDEX && t->kind != CATTR_TARGET_PER_EXAMPLE)
        return cx_fail(CATTR_ERR_TARGET, "target kind must be one of CATTR_TARGET_NONE (0), CATTR_TARGET_INDEX (1) or "
                       "CATTR_TARGET_PER_EXAMPLE (2) (got %d)", (int)t->kind);
    if (t->n_idx < 0 || t->n_idx > CATTR_MAX_DIMS - 1)
        return cx_fail(CATTR_ERR_TARGET, "target n_idx (indices per example) must be from 0 to %d (got %d)",
                       CATTR_MAX_DIMS - 1, t->n_idx);
    if (t->n_idx > 0 && !t->idx)
        return cx_fail(CATTR_ERR_TARGET, "target n_idx is %d but its idx array is NULL", t->n_idx);
    if (t->kind == CATTR_TARGET_PER_EXAMPLE && t->n_rows != B)
        return cx_fail(CATTR_ERR_TARGET, "a per-example target needs n_rows equal to the batch, %lld (got %lld)",
                       (long long)B, (long long)t->n_rows);
    return CATTR_OK;
}

/* Selection mask over one example-block of the output (shape osh, osh[0] = B): 1 where the target picks. */
cattr_status cx_target_mask(const cattr_target *t, int ond, const int64_t *osh, double *mask) {
    int64_t B = osh[0], per = cx_numel(ond - 1, osh + 1);
    char sh[128];
    memset(mask, 0, (size_t)(B * per) * sizeof *mask);
    cattr_target_kind kind = t ? t->kind : CATTR_TARGET_NONE;
    if (kind == CATTR_TARGET_NONE) {
        if (per != 1)
            return cx_fail(CATTR_ERR_TARGET,
                           "the output has shape %s: give a target that selects one value per example",
                           cx_shape_str(ond, osh, sh, sizeof sh));
        for (int64_t b = 0; b < B; b++) mask[b] = 1;
        return CATTR_OK;
    }
    if (t->n_idx < 0 || t->n_idx > ond - 1 || (t->n_idx > 0 && !t->idx))
        return cx_fail(CATTR_ERR_TARGET, "a target of %d indices does not fit an output of shape %s (it takes from 0 "
                       "to %d indices per example)", t->n_idx, cx_shape_str(ond, osh, sh, sizeof sh), ond - 1);
    if (cx_numel(ond - 1 - t->n_idx, osh + 1 + t->n_idx) != 1)
        return cx_fail(CATTR_ERR_TARGET,
                       "a target of %d indices leaves more than one value per example of an output of shape %s",
                       t->n_idx, cx_shape_str(ond, osh, sh, sizeof sh));
    if (kind == CATTR_TARGET_PER_EXAMPLE && t->n_rows != B)
        return cx_fail(CATTR_ERR_TARGET, "%lld per-example targets given for a batch of %lld", (long long)t->n_rows,
                       (long long)B);
    if (kind != CATTR_TARGET_INDEX && kind != CATTR_TARGET_PER_EXAMPLE)
        return cx_fail(CATTR_ERR_TARGET, "target kind must be one of CATTR_TARGET_NONE (0), CATTR_TARGET_INDEX (1) or "
                       "CATTR_TARGET_PER_EXAMPLE (2) (got %d)", (int)kind);
    for (int64_t b = 0; b < B; b++) {
        const int64_t *ix = kind == CATTR_TARGET_PER_EXAMPLE ? t->idx + b * t->n_idx : t->idx;
        int64_t off = 0;
        for (int k = 0; k < t->n_idx; k++) {
            int64_t d = osh[1 + k], v = ix[k];
            if (v < 0 && kind == CATTR_TARGET_INDEX) v += d;
            if (v < 0 || v >= d) {
                if (kind == CATTR_TARGET_PER_EXAMPLE)
                    return cx_fail(CATTR_ERR_TARGET, "target index %lld is out of range for dim %d of size %lld "
                                   "(per-example target of example %lld: it must be from 0 to %lld)", (long long)ix[k],
                                   k + 1, (long long)d, (long long)b, (long long)d - 1);
                return cx_fail(CATTR_ERR_TARGET, "target index %lld is out of range for dim %d of size %lld (it must "
                               "be from %lld to %lld)", (long long)ix[k], k + 1, (long long)d, -(long long)d,
                               (long long)d - 1);
            }
            off = off * d + v;
        }
        mask[b * per + off] = 1;
    }
    return CATTR_OK;
}

/* ---- call preparation ---------------------------------------------------------------------------------------- */

void cx_call_free(cx_call *c) {
    for (int i = 0; i < MAX_IN; i++) {
        cattr_tensor_free(c->x[i]);
        cattr_tensor_free(c->base[i]);
        cattr_tensor_free(c->dist[i]);
        cattr_tensor_free(c->add[i]);
    }
}

/* t in dtype dt: a handle over t's data when it has that dtype already (no copy: nothing writes into a call's
 * tensors), else a converted copy. */
static cattr_status to_dtype(const cattr_tensor *t, cattr_dtype dt, cattr_tensor **out) {
    if (t->dtype != dt) return cattr_tensor_convert(t, dt, out);
    *out = cx_tensor_borrow(t);
    return *out ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
}

/* t with its dim k moved first (the other dims in order): an input whose batch is on dim k, for the explainer's
 * batch-first model (explainer.c, batch_first). */
static cattr_status move_dim_first(const cattr_tensor *t, int k, cattr_tensor **out) {
    int64_t sh[CATTR_MAX_DIMS];
    sh[0] = t->shape[k];
    for (int d = 0, j = 1; d < t->ndim; d++)
        if (d != k) sh[j++] = t->shape[d];
    cattr_tensor *o = cx_tensor_alloc(t->dtype, t->ndim, sh);
    if (!o) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    size_t es = cattr_dtype_size(t->dtype);
    int64_t outer = 1, inner = 1, K = t->shape[k];
    for (int d = 0; d < k; d++) outer *= t->shape[d];
    for (int d = k + 1; d < t->ndim; d++) inner *= t->shape[d];
    for (int64_t b = 0; b < K; b++) /* out[b, o, i] = t[o, b, i] */
        for (int64_t q = 0; q < outer; q++)
            memcpy((char *)o->data + (size_t)((b * outer + q) * inner) * es,
                   (const char *)t->data + (size_t)((q * K + b) * inner) * es, (size_t)inner * es);
    *out = o;
    return CATTR_OK;
}

cattr_tensor *cx_expand_rows(const cattr_tensor *t, int64_t reps, cx_expand how) {
    int64_t sh[CATTR_MAX_DIMS];
    memcpy(sh, t->shape, sizeof sh);
    int64_t B = t->ndim ? t->shape[0] : 1;
    if (t->ndim) sh[0] *= reps;
    cattr_tensor *o = cx_tensor_alloc(t->dtype, t->ndim, sh);
    if (!o) return NULL;
    size_t bytes = (size_t)t->numel * cattr_dtype_size(t->dtype), row = B ? bytes / (size_t)B : 0;
    if (how == CX_TILE || B <= 1) {
        for (int64_t r = 0; r < reps; r++) memcpy((char *)o->data + (size_t)r * bytes, t->data, bytes);
    } else {
        for (int64_t b = 0; b < B; b++)
            for (int64_t r = 0; r < reps; r++)
                memcpy((char *)o->data + (size_t)(b * reps + r) * row, (const char *)t->data + (size_t)b * row, row);
    }
    return o;
}

/* Methods that never perturb or differentiate the attributed inputs themselves (they work at a layer): their inputs
 * may be integer ids, kept as int64 (a language model's token ids, attributed at its embedding layer). */
static bool ids_attributable(cattr_method m) {
    return m == CATTR_METHOD_LAYER_ACTIVATION || m == CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION ||
           m == CATTR_METHOD_LAYER_GRADCAM || m == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS ||
           m == CATTR_METHOD_LAYER_FEATURE_ABLATION || m == CATTR_METHOD_LAYER_FEATURE_PERMUTATION;
}

/* The perturbation methods on the inputs themselves take Captum's other forms (perturbation.c, lime.c): int64
 * inputs (ablated in their own dtype, baselines of that dtype), baselines that broadcast to the input as torch
 * broadcasts, inputs whose first dims differ and inputs without elements (for a model whose output is one value,
 * or several, for the whole batch: Captum's aggregation mode). */
static bool perturbs_inputs(cattr_method m) {
    return m == CATTR_METHOD_FEATURE_ABLATION || m == CATTR_METHOD_FEATURE_PERMUTATION ||
           m == CATTR_METHOD_OCCLUSION || m == CATTR_METHOD_SHAPLEY_VALUE_SAMPLING ||
           m == CATTR_METHOD_SHAPLEY_VALUES || m == CATTR_METHOD_LIME || m == CATTR_METHOD_KERNEL_SHAP ||
           m == CATTR_METHOD_NEURON_FEATURE_ABLATION;
}

/* Baseline b broadcast to x's shape into *out (a new tensor of x's shape in dtype dt), as torch broadcasts (b's dims
 * right-aligned with x's, each 1 or x's size); an int64 input (dt int64) takes int64 values, or float values that
 * are whole numbers. Errors: CATTR_ERR_SHAPE, CATTR_ERR_DTYPE (a fraction for an int64 input), CATTR_ERR_NO_MEMORY. */
static cattr_status broadcast_baseline(const cattr_tensor *b, const cattr_tensor *x, cattr_dtype dt, int i,
                                       cattr_tensor **out) {
    char s1[128], s2[128];
    int off = x->ndim - b->ndim;
    bool ok = off >= 0;
    int64_t st[CATTR_MAX_DIMS] = {0}, r = 1; /* b's strides along x's dims (0 where broadcast) */
    for (int d = b->ndim - 1; ok && d >= 0; d--) {
        ok = b->shape[d] == 1 || b->shape[d] == x->shape[d + off];
        st[d + off] = b->shape[d] == 1 ? 0 : r;
        r *= b->shape[d];
    }
    if (!ok)
        return cx_fail(CATTR_ERR_SHAPE, "baseline %d has shape %s; it must broadcast to input %d of shape %s (a scalar, "
                       "or each dim, aligned from the last, 1 or the input's)", i,
                       cx_shape_str(b->ndim, b->shape, s1, sizeof s1), i, cx_shape_str(x->ndim, x->shape, s2, sizeof s2));
    cattr_tensor *t = cx_tensor_alloc(dt, x->ndim, x->shape);
    if (!t) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t k = 0; k < x->numel; k++) {
        int64_t rem = k, o = 0;
        for (int d = x->ndim - 1; d >= 0; d--) {
            o += (rem % x->shape[d]) * st[d];
            rem /= x->shape[d];
        }
        if (dt == CATTR_INT64 && b->dtype == CATTR_INT64) {
            ((int64_t *)t->data)[k] = ((const int64_t *)b->data)[o];
            continue;
        }
        double v = cx_tensor_get(b, o);
        if (dt == CATTR_INT64 && !(v == floor(v) && fabs(v) <= 9007199254740992.0)) {
            cattr_tensor_free(t);
            return cx_fail(CATTR_ERR_DTYPE, "baseline %d holds %g for the int64 input %d: an integer input takes whole "
                           "baselines (Captum computes an input ablated by a fraction in float: give the input as "
                           "float)", i, v, i);
        }
        cx_tensor_set(t, k, v);
    }
    *out = t;
    return CATTR_OK;
}

cattr_status cx_prepare(cattr_explainer *e, const cattr_call *call, cx_call *c) {
    const cattr_tensor *const *inputs = call->inputs, *const *baselines = call->baselines;
    const cattr_tensor *const *additional = call->additional;
    int n_inputs = call->n_inputs, n_additional = call->n_additional;
    const cg_graph *mg = e->m->g;
    cattr_dtype dt = e->p.dtype;
    char s1[128], s2[128];
    memset(c, 0, sizeof *c);
    c->dt = dt;
    c->target = call->target;
    c->user = call;
    if (n_inputs > CATTR_MAX_INPUTS)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "n_inputs (attributed inputs) must be from 1 to %d (got %d)",
                       CATTR_MAX_INPUTS, n_inputs);
    if (n_inputs < 1)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_inputs (attributed inputs) must be from 1 to %d (got %d)",
                       CATTR_MAX_INPUTS, n_inputs);
    if (!inputs) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_inputs is %d but inputs is NULL", n_inputs);
    if (n_additional < 0 || n_additional > MAX_IN - 1)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_additional must be from 0 to %d (got %d)", MAX_IN - 1,
                       n_additional);
    if (n_additional > 0 && !additional)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_additional is %d but additional is NULL", n_additional);
    if (call->n_draws < 0)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_draws must be >= 0 (got %d)", call->n_draws);
    if (call->n_draws > 0 && !call->draws)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_draws is %d but draws is NULL", call->n_draws);
    for (int k = 0; k < call->n_draws; k++)
        if (!call->draws[k]) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "draws[%d] is NULL", k);
    if (call->n_layer_masks < 0 || call->n_layer_masks > CATTR_MAX_OUTPUTS)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_layer_masks must be from 0 to %d (got %d)", CATTR_MAX_OUTPUTS,
                       call->n_layer_masks);
    if (call->n_layer_masks > 0 && !call->layer_masks)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_layer_masks is %d but layer_masks is NULL",
                       call->n_layer_masks);
    if (n_inputs + n_additional != mg->n_inputs)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                       "the model takes %d inputs; %d attributed + %d additional were given", mg->n_inputs, n_inputs,
                       n_additional);
    if (mg->n_inputs >= MAX_IN) return cx_fail(CATTR_ERR_UNSUPPORTED, "more than %d model inputs", MAX_IN - 1);
    c->n = n_inputs;
    c->n_add = n_additional;
    for (int i = 0; i < n_inputs; i++) {
        const cattr_tensor *x = inputs[i];
        const char *name = mg->vals[mg->inputs[i]].name;
        if (!x) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "input %d ('%s') is NULL", i, name);
        bool ids = x->dtype == CATTR_INT64, pert = perturbs_inputs(e->p.method);
        bool whole = pert && e->p.nt_type == CATTR_NT_NONE; /* may be a model of the whole batch */
        if (ids && e->p.nt_type != CATTR_NT_NONE)
            return cx_fail(CATTR_ERR_DTYPE, "input %d ('%s') is int64: a noise tunnel adds noise to float inputs only",
                           i, name);
        if (ids && !ids_attributable(e->p.method) && !pert)
            return cx_fail(CATTR_ERR_DTYPE, "input %d ('%s') is int64: the gradient methods attribute float inputs "
                           "(integer inputs can be attributed by the perturbation methods: FeatureAblation, "
                           "FeaturePermutation, Occlusion, ShapleyValueSampling, ShapleyValues, Lime, KernelShap, "
                           "NeuronFeatureAblation; and at a layer: LayerIntegratedGradients, LayerActivation, "
                           "LayerGradientXActivation, LayerGradCam, LayerFeatureAblation, LayerFeaturePermutation)",
                           i, name);
        if (x->ndim < 1) return cx_fail(CATTR_ERR_SHAPE, "input %d ('%s') needs a batch dimension", i, name);
        if (x->numel == 0 && !whole)
            return cx_fail(CATTR_ERR_SHAPE, "input %d ('%s') has no elements (shape with a 0): there is nothing to "
                           "attribute", i, name);
        if (i == 0) c->B = x->shape[0];
        else if (x->shape[0] != c->B && !whole) /* the perturbation methods: a model of the whole batch */
            return cx_fail(CATTR_ERR_SHAPE, "input %d ('%s') has batch %lld, input 0 has %lld", i, name,
                           (long long)x->shape[0], (long long)c->B);
        CX_CHECK(cx_model_check_input(e->m, i, x, "input"));
        if (e->p.check_finite && !ids) CX_CHECK(check_finite(x, "input", i));
        CX_CHECK(to_dtype(x, ids ? CATTR_INT64 : dt, &c->x[i]));
        /* baseline */
        const cattr_tensor *b = baselines ? baselines[i] : NULL;
        if (e->method->baseline_distribution || (e->p.nt_type != CATTR_NT_NONE && e->p.draw_baseline_from_distrib)) {
            /* rows of baselines, kept as given (scalars become one row) */
            if (b && e->p.check_finite) CX_CHECK(check_finite(b, "baseline", i));
            if (b && b->numel == 1 && !(b->ndim == x->ndim && cx_shape_eq(b->ndim - 1, b->shape + 1, x->ndim - 1, x->shape + 1))) {
                int64_t sh[CATTR_MAX_DIMS];
                memcpy(sh, x->shape, sizeof sh);
                sh[0] = 1;
                c->dist[i] = cx_tensor_alloc(dt, x->ndim, sh);
                if (!c->dist[i]) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
                for (int64_t k = 0; k < c->dist[i]->numel; k++) cx_tensor_set(c->dist[i], k, cx_tensor_get(b, 0));
            } else if (b) {
                if (b->ndim != x->ndim || b->shape[0] < 1 || !cx_shape_eq(b->ndim - 1, b->shape + 1, x->ndim - 1, x->shape + 1))
                    return cx_fail(CATTR_ERR_SHAPE, "baseline %d has shape %s; a distribution needs rows of shape %s", i,
                                   cx_shape_str(b->ndim, b->shape, s1, sizeof s1),
                                   cx_shape_str(x->ndim - 1, x->shape + 1, s2, sizeof s2));
                CX_CHECK(to_dtype(b, dt, &c->dist[i]));
            } else {
                int64_t sh[CATTR_MAX_DIMS];
                memcpy(sh, x->shape, sizeof sh);
                sh[0] = 1;
                c->dist[i] = cx_tensor_alloc(dt, x->ndim, sh);
                if (!c->dist[i]) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
                memset(c->dist[i]->data, 0, (size_t)c->dist[i]->numel * cattr_dtype_size(dt));
            }
            continue;
        }
        cattr_dtype bdt = ids ? CATTR_INT64 : dt; /* ids: the baseline is ids too (a padding token) */
        c->base[i] = cx_tensor_alloc(bdt, x->ndim, x->shape);
        if (!c->base[i]) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        int64_t n = x->numel;
        if (!b) {
            memset(c->base[i]->data, 0, (size_t)n * cattr_dtype_size(bdt));
            continue;
        }
        if (e->p.check_finite && b->dtype != CATTR_INT64) CX_CHECK(check_finite(b, "baseline", i));
        if (perturbs_inputs(e->p.method)) { /* as torch broadcasts, in the input's dtype */
            cattr_tensor_free(c->base[i]);
            c->base[i] = NULL;
            CX_CHECK(broadcast_baseline(b, x, bdt, i, &c->base[i]));
            continue;
        }
        int64_t per = c->B ? n / c->B : 0;
        bool full = cx_shape_eq(b->ndim, b->shape, x->ndim, x->shape);
        bool row1 = !full && b->ndim == x->ndim && b->shape[0] == 1 &&
                    cx_shape_eq(b->ndim - 1, b->shape + 1, x->ndim - 1, x->shape + 1);
        bool scalar = !full && !row1 && b->numel == 1;
        if (!scalar && !full && !row1)
            return cx_fail(CATTR_ERR_SHAPE, "baseline %d has shape %s; use a scalar, the input's shape %s or batch 1",
                           i, cx_shape_str(b->ndim, b->shape, s1, sizeof s1), cx_shape_str(x->ndim, x->shape, s2, sizeof s2));
        for (int64_t k = 0; k < n; k++) {
            double v = cx_tensor_get(b, scalar ? 0 : (full ? k : k % per));
            cx_tensor_set(c->base[i], k, v);
        }
    }
    CX_CHECK(check_target(call->target, c->B));
    for (int j = 0; j < n_additional; j++) {
        const cattr_tensor *a = additional ? additional[j] : NULL;
        int gi = n_inputs + j;
        const char *name = mg->vals[mg->inputs[gi]].name;
        if (!a) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "additional input %d ('%s') is NULL", j, name);
        int k = e->batch_axis ? e->batch_axis[gi] : 0; /* a recurrent state [2, B, H]: its batch on dim 1 */
        if (k) {
            if (a->ndim != e->m->in_ndim[gi] || a->shape[k] != c->B)
                return cx_fail(CATTR_ERR_SHAPE, "additional input %d ('%s') has shape %s: it must have the batch size "
                               "%lld on dim %d, as the model declares", j, name,
                               cx_shape_str(a->ndim, a->shape, s1, sizeof s1), (long long)c->B, k);
            cattr_tensor *moved = NULL;
            CX_CHECK(move_dim_first(a, k, &moved));
            cattr_dtype want = moved->dtype == CATTR_INT64 ? CATTR_INT64 : dt;
            if (moved->dtype == want) { /* ours: kept, not borrowed */
                c->add[j] = moved;
                continue;
            }
            cattr_status st = cattr_tensor_convert(moved, want, &c->add[j]);
            cattr_tensor_free(moved);
            CX_CHECK(st);
            continue;
        }
        /* the perturbation methods take any shape (one that is not the batch's makes a model of the whole batch) */
        if ((a->ndim < 1 || a->shape[0] != c->B) && !(perturbs_inputs(e->p.method) && e->p.nt_type == CATTR_NT_NONE))
            return cx_fail(CATTR_ERR_SHAPE, "additional input %d ('%s') must have the batch size %lld first", j, name,
                           (long long)c->B);
        CX_CHECK(to_dtype(a, a->dtype == CATTR_INT64 ? CATTR_INT64 : dt, &c->add[j]));
    }
    return CATTR_OK;
}

