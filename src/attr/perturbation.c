/* perturbation.c - the perturbation methods' common parts (feature masks, the unperturbed output, the batched
 * passes: perturb_internal.h) and FeatureAblation and FeaturePermutation; Occlusion is in occlusion.c,
 * ShapleyValueSampling and ShapleyValues in shapley.c. All with Captum's semantics (shared/reference/captum_spec.md section 6; golden README sections 7, 8
 * and 11).
 *
 * Every method evaluates the model on perturbed copies of the inputs. One copy ("state") has the B rows of the
 * batch; states are independent of each other, so many of them run as one forward pass of reps*B rows (CX_TILE:
 * row r*B + b is state r of example b, which is also how Captum tiles with perturbations_per_eval). The number of
 * states per pass is params.perturbations_per_eval, or what the memory budget allows when it is 0. The outputs are
 * then combined one state at a time, in Captum's order of operations, so the result never depends on the batching:
 *  - FeatureAblation / FeaturePermutation: every element receives exactly one output difference, in the
 *    model-output dtype (Captum's attribution dtype).
 *  - Occlusion: overlapping windows are summed per chunk of perturbations_per_eval windows (Captum adds one chunk sum
 *    at a time), then the float32 total is divided by the float32 window count.
 *  - ShapleyValueSampling / ShapleyValues: one difference per feature and permutation, added into float32 totals in
 *    permutation order, then divided by the number of permutations in float32.
 * The unperturbed output (of the inputs, or of the baselines for the Shapley methods) is computed once.
 *
 * Result shapes: FeatureAblation, FeaturePermutation and Occlusion return [n, *input.shape[1:]] where n is the number
 * of values of the target-selected output (B with a target; every output element without one). The Shapley methods
 * return [*output.shape, *input.shape[1:]] for the target-selected output (the same numbers, Captum's shape).
 *
 * Random numbers: explicit draws of the call (a replay of a recorded Captum run) in Captum's consumption order, else
 * the Philox generator keyed by params.seed, one stream per purpose (and per feature for FeaturePermutation, so
 * that the draws never depend on the batching).
 */
#include "attr/perturb_internal.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PT_STREAM_FP 0x4650000000000000ull  /* FeaturePermutation: + feature ordinal */
#define SVS_MAX_FEATURES ((int64_t)1 << 26) /* ShapleyValueSampling numbers features 0..max id */

/* ---- small helpers ---------------------------------------------------------------------------------------------- */


static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Index of v in the ascending array a[n], or -1. */
static int64_t find_sorted(const int64_t *a, int64_t n, int64_t v) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (a[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && a[lo] == v ? lo : -1;
}

static bool is_identity(const int64_t *p, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (p[i] != i) return false;
    return true;
}

/* Per-example element count of a tensor (its shape without the batch dim). */


/* Copies an explicit permutation draw of `n` entries into out after checking it is one. */
cattr_status cx_pt_take_perm_draw(cx_call *c, const char *role, int64_t n, int64_t *out) {
    const cattr_tensor *t = NULL;
    CX_CHECK(cx_next_draw(c, role, NULL, &t));
    if (!t) return cx_fail(CATTR_ERR_INTERNAL, "no explicit '%s' draw", role);
    if (t->dtype != CATTR_INT64 || t->numel != n)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explicit draw '%s' must be %lld int64 values (a permutation)",
                       role, (long long)n);
    unsigned char *seen = calloc((size_t)n + 1, 1);
    if (!seen) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    const int64_t *v = t->data;
    for (int64_t k = 0; k < n; k++) {
        if (v[k] < 0 || v[k] >= n || seen[v[k]]) {
            free(seen);
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explicit draw '%s' is not a permutation of 0..%lld", role,
                           (long long)n - 1);
        }
        seen[v[k]] = 1;
        out[k] = v[k];
    }
    free(seen);
    return CATTR_OK;
}

/* ---- the forms of a call (perturb_forms.h) ---------------------------------------------------------------------- */

_Thread_local bool cx_pform_building_whole;

void cx_pform_free(cx_pform *f) {
    cx_call_free(&f->v);
    memset(f, 0, sizeof *f);
}

/* *out: a tensor over t's data with a leading dim of 1 (NULL for t NULL). */
static cattr_status view1(const cattr_tensor *t, const char *what, int i, cattr_tensor **out) {
    *out = NULL;
    if (!t) return CATTR_OK;
    if (t->ndim >= CATTR_MAX_DIMS)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "%s %d has %d dims: a model of the whole batch takes at most %d", what, i,
                       t->ndim, CATTR_MAX_DIMS - 1);
    int64_t sh[CATTR_MAX_DIMS];
    sh[0] = 1;
    memcpy(sh + 1, t->shape, (size_t)t->ndim * sizeof *sh);
    return cattr_tensor_wrap(t->dtype, t->ndim + 1, sh, t->data, out);
}

cattr_status cx_pform_get(cattr_explainer *e, cx_call *c, bool batched, bool one_value, cx_pform *f) {
    char s1[128];
    memset(f, 0, sizeof *f);
    bool whole = false, target = c->target && c->target->kind != CATTR_TARGET_NONE;
    for (int i = 0; i < c->n; i++) whole |= c->x[i]->shape[0] != c->B;
    for (int j = 0; j < c->n_add; j++) whole |= c->add[j]->ndim < 1 || c->add[j]->shape[0] != c->B;
    CX_CHECK(cx_output_shape(e, c, 1, &f->ond, f->osh, &f->odt));
    whole |= f->ond < 1 || f->osh[0] != c->B;
    int ppe = e->p.perturbations_per_eval;
    if (!whole && batched && ppe != 1 && c->B > 0) { /* copies of the batch share a pass: the output grows with it */
        int nd2 = 0;
        int64_t sh2[CATTR_MAX_DIMS];
        if (cx_output_shape(e, c, 2, &nd2, sh2, NULL) != CATTR_OK) /* a model that takes no other batch */
            whole = true;
        else
            whole = nd2 != f->ond || sh2[0] != 2 * f->osh[0] || !cx_shape_eq(nd2 - 1, sh2 + 1, f->ond - 1, f->osh + 1);
    }
    f->whole = whole;
    cx_shape_str(f->ond, f->osh, s1, sizeof s1);
    if (whole && target && f->ond < 1)
        return cx_fail(CATTR_ERR_TARGET, "the model output has shape %s (one value for the whole batch): there is "
                       "nothing for a target to select; give no target", s1);
    f->n_sel = !target ? cx_numel(f->ond, f->osh) : whole ? f->osh[0] : c->B;
    if (!whole) return CATTR_OK;
    if (one_value && f->n_sel != 1)
        return cx_fail(CATTR_ERR_SHAPE, "the model output has shape %s for inputs of batch %lld: Lime and KernelShap fit "
                       "one value per example (a model of the whole batch: one value, or a target that selects one)",
                       s1, (long long)c->B);
    if (e->p.nt_type != CATTR_NT_NONE)
        return cx_fail(CATTR_ERR_SHAPE, "the model output has shape %s for inputs of batch %lld: a noise tunnel needs a "
                       "model output with the batch first (one per example)", s1, (long long)c->B);
    if (batched && ppe > 1)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "perturbations_per_eval is %d, but the model output (shape %s for "
                       "inputs of batch %lld) does not grow with the batch: perturbed copies of a model of the whole "
                       "batch cannot share a forward pass; give perturbations_per_eval 1 (Captum asserts the same)",
                       ppe, s1, (long long)c->B);
    if (c->x_dev[0] || c->attr_dev[0])
        return cx_fail(CATTR_ERR_INTERNAL, "a model of the whole batch with inputs or results on the backend");
    cx_call *v = &f->v;
    v->n = c->n;
    v->B = 1;
    v->dt = c->dt;
    v->n_add = c->n_add;
    v->target = c->target;
    v->user = c->user;
    v->next_draw = c->next_draw;
    cattr_status st = CATTR_OK;
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        f->rows[i] = c->x[i]->shape[0];
        st = view1(c->x[i], "input", i, &v->x[i]);
        if (st == CATTR_OK) st = view1(c->base[i], "baseline", i, &v->base[i]);
    }
    for (int j = 0; j < c->n_add && st == CATTR_OK; j++) st = view1(c->add[j], "additional input", j, &v->add[j]);
    if (st != CATTR_OK) cx_pform_free(f);
    return st;
}

int cx_pform_model_input(cg_graph *g, bool whole, int v) {
    if (!whole || v < 0) return v;
    cg_attrs a = cg_attrs_default();
    a.n_ints = 1;
    a.ints[0] = 0;
    return cg_emit(g, CG_SQUEEZE, "__whole_batch", &v, 1, &a);
}

cattr_status cx_pform_target_rows(const cx_pform *f, const cx_call *c, int64_t *tidx) {
    int64_t rows = f->ond ? f->osh[0] : 1, per = f->ond ? cx_numel(f->ond - 1, f->osh + 1) : 1;
    double *mask = malloc((size_t)(rows * per + 1) * sizeof *mask);
    if (!mask) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_status st = cx_target_mask(c->target, f->ond, f->osh, mask);
    for (int64_t r = 0; r < rows && st == CATTR_OK; r++) {
        tidx[r] = 0;
        for (int64_t k = 0; k < per; k++)
            if (mask[r * per + k] != 0) tidx[r] = k;
    }
    free(mask);
    return st;
}

cattr_status cx_pform_id_rows(const cx_pform *f, int i, const int64_t *ids, int64_t per, int64_t n_out,
                              int64_t *id_rows) {
    int64_t rows = f->rows[i];
    *id_rows = 1;
    for (int64_t b = 1; b < rows && *id_rows == 1; b++)
        if (memcmp(ids, ids + b * per, (size_t)per * sizeof *ids)) *id_rows = rows;
    if (*id_rows > 1 && *id_rows != n_out) {
        char s[128];
        return cx_fail(CATTR_ERR_SHAPE, "feature mask %d differs between the %lld examples, but the model output (shape "
                       "%s) has %lld values for the whole batch: a mask per example needs one output value per "
                       "example (Captum: different masks for each example need an output per example)", i,
                       (long long)rows, cx_shape_str(f->ond, f->osh, s, sizeof s), (long long)n_out);
    }
    return CATTR_OK;
}

/* ---- feature masks ---------------------------------------------------------------------------------------------- */


void cx_pt_masks_free(pt_masks *pm) {
    for (int i = 0; i < CX_MAX_IN; i++) {
        free(pm->ids[i]);
        free(pm->start[i]);
        free(pm->pos[i]);
    }
    free(pm->by_id);
    free(pm->holds);
    memset(pm, 0, sizeof *pm);
}

/* Broadcasts mask m (right-aligned, each dim 1 or the input's; dim 0: 1 or the batch) to per-example ids. */
static cattr_status mask_expand(const cattr_tensor *m, const cattr_tensor *x, int i, int64_t B, int64_t per,
                                int64_t *rows, int64_t **ids) {
    char s1[128], s2[128];
    if (m->dtype != CATTR_INT64)
        return cx_fail(CATTR_ERR_DTYPE, "feature mask %d is %s; feature masks hold int64 ids", i,
                       cattr_dtype_name(m->dtype));
    int off = x->ndim - m->ndim;
    bool ok = off >= 0;
    int64_t mst[CATTR_MAX_DIMS] = {0}, st = 1; /* the mask's strides over the input's dims (0: broadcast) */
    for (int d = m->ndim - 1; ok && d >= 0; d--) {
        int64_t md = m->shape[d], xd = x->shape[d + off];
        if (md != 1 && md != xd) ok = false;
        mst[d + off] = md == 1 ? 0 : st;
        st *= md;
    }
    if (!ok)
        return cx_fail(CATTR_ERR_SHAPE,
                       "feature mask %d has shape %s; it must broadcast to input %d of shape %s (dim 0: 1 or the batch)",
                       i, cx_shape_str(m->ndim, m->shape, s1, sizeof s1), i, cx_shape_str(x->ndim, x->shape, s2, sizeof s2));
    *rows = mst[0] != 0 ? B : 1;
    *ids = malloc((size_t)(*rows * per + 1) * sizeof **ids);
    if (!*ids) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    const int64_t *v = m->data;
    for (int64_t r = 0; r < *rows; r++)
        for (int64_t k = 0; k < per; k++) {
            int64_t rem = k, o = r * mst[0];
            for (int d = x->ndim - 1; d >= 1; d--) {
                o += (rem % x->shape[d]) * mst[d];
                rem /= x->shape[d];
            }
            (*ids)[r * per + k] = v[o];
        }
    return CATTR_OK;
}

/* The call's feature masks, or Captum's default: every element its own feature, numbered consecutively across the
 * inputs (input 0: 0..n0-1, input 1: n0.., ...). A NULL entry among given masks numbers its elements the same way,
 * after the largest given id. On the view of a model of the whole batch (f whole; c is f->v), the default numbers
 * the elements of one example of the input (its dims but the first), the same in every row, as Captum's. */
cattr_status cx_pt_masks_load(const cx_call *c, const cx_pform *f, pt_masks *pm) {
    const cattr_tensor *const *um = c->user ? c->user->feature_masks : NULL;
    memset(pm, 0, sizeof *pm);
    pm->n = c->n;
    pm->B = c->B;
    int64_t next = 0;
    bool any = false;
    for (int i = 0; um && i < c->n; i++)
        if (um[i] && um[i]->dtype == CATTR_INT64)
            for (int64_t k = 0; k < um[i]->numel; k++) {
                int64_t v = ((const int64_t *)um[i]->data)[k];
                if (!any || v + 1 > next) next = v + 1;
                any = true;
            }
    for (int i = 0; i < c->n; i++) {
        const cattr_tensor *x = c->x[i];
        int64_t per = cx_pt_example_numel(x);
        pm->per[i] = per;
        if (um && um[i]) {
            CX_CHECK(mask_expand(um[i], x, i, c->B, per, &pm->rows[i], &pm->ids[i]));
            continue;
        }
        pm->rows[i] = 1;
        pm->ids[i] = malloc((size_t)(per + 1) * sizeof *pm->ids[i]);
        if (!pm->ids[i]) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        int64_t ex = f && f->whole ? (f->rows[i] ? per / f->rows[i] : 0) : per; /* elements of one example */
        for (int64_t k = 0; k < per; k++) pm->ids[i][k] = next + (ex ? k % ex : 0);
        next += ex;
    }
    return CATTR_OK;
}

/* Ordinal of feature id v, or -1 when it is not a feature. */
static int64_t feature_of(const pt_masks *pm, int64_t v) {
    if (pm->dense) return v >= 0 && v < pm->F ? v : -1;
    int64_t lo = 0, hi = pm->F;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (pm->by_id[2 * mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo < pm->F && pm->by_id[2 * lo] == v ? pm->by_id[2 * lo + 1] : -1;
}

static int cmp_pair(const void *a, const void *b) { return cmp_i64(a, b); }

/* FeatureAblation's order: the ids of input 0 ascending (torch.unique), then the ids of input 1 not seen yet, ... */
static cattr_status features_first_seen(pt_masks *pm) {
    int64_t *u[CX_MAX_IN] = {0}, nu[CX_MAX_IN] = {0}, total = 0;
    cattr_status st = CATTR_OK;
    for (int i = 0; i < pm->n && st == CATTR_OK; i++) {
        int64_t n = pm->rows[i] * pm->per[i];
        u[i] = malloc((size_t)(n + 1) * sizeof *u[i]);
        if (!u[i]) {
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            break;
        }
        memcpy(u[i], pm->ids[i], (size_t)n * sizeof *u[i]);
        qsort(u[i], (size_t)n, sizeof *u[i], cmp_i64);
        int64_t m = 0;
        for (int64_t k = 0; k < n; k++)
            if (m == 0 || u[i][m - 1] != u[i][k]) u[i][m++] = u[i][k];
        nu[i] = m;
        total += m;
    }
    if (st == CATTR_OK) {
        pm->by_id = malloc((size_t)(2 * total + 2) * sizeof *pm->by_id);
        if (!pm->by_id) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK) {
        int64_t F = 0;
        for (int i = 0; i < pm->n; i++)
            for (int64_t k = 0; k < nu[i]; k++) {
                bool seen = false;
                for (int j = 0; j < i && !seen; j++) seen = find_sorted(u[j], nu[j], u[i][k]) >= 0;
                if (seen) continue;
                pm->by_id[2 * F] = u[i][k];
                pm->by_id[2 * F + 1] = F;
                F++;
            }
        pm->F = F;
        qsort(pm->by_id, (size_t)F, 2 * sizeof *pm->by_id, cmp_pair);
    }
    for (int i = 0; i < CX_MAX_IN; i++) free(u[i]);
    return st;
}

/* The Shapley methods' features: ids 0..max id (negative ids are never added). */
cattr_status cx_pt_features_dense(pt_masks *pm) {
    int64_t mx = -1;
    for (int i = 0; i < pm->n; i++)
        for (int64_t k = 0; k < pm->rows[i] * pm->per[i]; k++)
            if (pm->ids[i][k] > mx) mx = pm->ids[i][k];
    if (mx >= SVS_MAX_FEATURES)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                       "feature id %lld is too large: the Shapley methods number the features 0..max id (at most %lld)",
                       (long long)mx, (long long)SVS_MAX_FEATURES - 1);
    pm->dense = true;
    pm->F = mx + 1;
    return CATTR_OK;
}

/* Groups every input's mask positions by feature and records which inputs hold each feature. */
cattr_status cx_pt_masks_index(pt_masks *pm) {
    int64_t F = pm->F;
    pm->holds = calloc((size_t)F + 1, sizeof *pm->holds);
    if (!pm->holds) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < pm->n; i++) {
        int64_t n = pm->rows[i] * pm->per[i];
        int64_t *q = malloc((size_t)(n + 1) * sizeof *q), *cur = malloc((size_t)(F + 1) * sizeof *cur);
        pm->start[i] = calloc((size_t)F + 2, sizeof *pm->start[i]);
        pm->pos[i] = malloc((size_t)(n + 1) * sizeof *pm->pos[i]);
        if (!q || !cur || !pm->start[i] || !pm->pos[i]) {
            free(q);
            free(cur);
            return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        }
        int64_t *start = pm->start[i];
        for (int64_t p = 0; p < n; p++) {
            q[p] = feature_of(pm, pm->ids[i][p]);
            if (q[p] < 0) continue;
            start[q[p] + 1]++;
            pm->holds[q[p]] |= 1u << i;
        }
        for (int64_t f = 0; f < F; f++) start[f + 1] += start[f];
        memcpy(cur, start, (size_t)F * sizeof *cur);
        for (int64_t p = 0; p < n; p++)
            if (q[p] >= 0) pm->pos[i][cur[q[p]]++] = p;
        free(q);
        free(cur);
    }
    return CATTR_OK;
}

/* ---- the unperturbed output and the batched passes -------------------------------------------------------------- */



/* The values of an output of reps states without a target (reps*n_out values, state-major). */
static cattr_status out_values(const cx_call *c, const cattr_tensor *out, int64_t reps, int64_t n_out, double *vals) {
    if (out->numel != reps * n_out) {
        char s[128];
        return cx_fail(CATTR_ERR_SHAPE, "the model output has shape %s for %lld perturbed copies of the batch; "
                                        "expected %lld values per copy",
                       cx_shape_str(out->ndim, out->shape, s, sizeof s), (long long)reps, (long long)n_out);
    }
    for (int64_t k = 0; k < out->numel; k++) vals[k] = cx_tensor_get(out, k);
    return CATTR_OK;
}

/* One forward pass of the batch xs (B rows): the reference every perturbation is compared with. */
cattr_status cx_pt_reference_output(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, pt_ref *ref) {
    cattr_tensor *out = NULL;
    memset(ref, 0, sizeof *ref);
    if (cx_pt_has_target(c)) { /* only the targets' values come down */
        ref->n_out = c->B;
        ref->ndim = 1;
        ref->shape[0] = c->B;
        ref->per_row = c->B ? 1 : 0;
        ref->y = malloc((size_t)(c->B + 1) * sizeof *ref->y);
        if (!ref->y) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        return cx_forward_select(e, c, xs, xs == c->x ? c->x_dev : NULL, 1, CX_TILE, ref->y, &ref->dt);
    }
    CX_CHECK(cx_forward(e, c, xs, xs == c->x ? c->x_dev : NULL, 1, CX_TILE, &out));
    ref->dt = out->dtype;
    if (cx_pt_has_target(c)) {
        ref->n_out = c->B;
        ref->ndim = 1;
        ref->shape[0] = c->B;
    } else {
        ref->n_out = out->numel;
        ref->ndim = out->ndim;
        memcpy(ref->shape, out->shape, sizeof ref->shape);
    }
    ref->per_row = c->B ? ref->n_out / c->B : 0;
    ref->y = malloc((size_t)(ref->n_out + 1) * sizeof *ref->y);
    cattr_status st = ref->y ? out_values(c, out, 1, ref->n_out, ref->y) : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_tensor_free(out);
    return st;
}

/* The first output row that mask row m of input i applies to, and one past the last. */
static inline void rows_of(const pt_masks *pm, int i, const pt_ref *ref, int64_t m, int64_t *r0, int64_t *r1) {
    if (pm->rows[i] == 1) {
        *r0 = 0;
        *r1 = ref->n_out;
    } else {
        *r0 = m * ref->per_row;
        *r1 = (m + 1) * ref->per_row;
    }
}

/* Attribution tensor [*lead, *x.shape[1:]], zero-filled. */
cattr_status cx_pt_alloc_attr(cattr_dtype dt, int lead_nd, const int64_t *lead, const cattr_tensor *x,
                               cattr_tensor **out) {
    int64_t sh[CATTR_MAX_DIMS];
    int nd = lead_nd + x->ndim - 1;
    if (nd > CATTR_MAX_DIMS)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "the attribution would have %d dims (more than %d)", nd, CATTR_MAX_DIMS);
    memcpy(sh, lead, (size_t)lead_nd * sizeof *sh);
    memcpy(sh + lead_nd, x->shape + 1, (size_t)(x->ndim - 1) * sizeof *sh);
    *out = cx_tensor_alloc(dt, nd, sh);
    if (!*out) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    memset((*out)->data, 0, (size_t)(*out)->numel * cattr_dtype_size(dt));
    return CATTR_OK;
}


/* Bytes of one element of input i (the compute dtype, or int64). */

/* A model of the whole batch: its n_sel target-selected output values for inputs xs (the call's own shapes). */
cattr_status cx_pt_whole_values(cattr_explainer *e, cx_call *c0, const cx_pform *f, cattr_tensor *const *xs,
                                 double *vals) {
    cattr_tensor *out = NULL;
    int64_t *tidx = NULL;
    cattr_status st = cx_forward_whole(e, c0, xs, &out);
    bool target = cx_pt_has_target(c0);
    if (st == CATTR_OK && out->numel != cx_numel(f->ond, f->osh))
        st = cx_fail(CATTR_ERR_SHAPE, "the model output changed its size between forward passes of one call");
    if (st == CATTR_OK && target) {
        tidx = malloc((size_t)(f->osh[0] + 1) * sizeof *tidx);
        st = tidx ? cx_pform_target_rows(f, c0, tidx) : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    int64_t per = f->ond ? cx_numel(f->ond - 1, f->osh + 1) : 1;
    for (int64_t r = 0; r < f->n_sel && st == CATTR_OK; r++) vals[r] = cx_tensor_get(out, target ? r * per + tidx[r] : r);
    free(tidx);
    cattr_tensor_free(out);
    return st;
}

/* States per forward pass: perturbations_per_eval, or as many as the memory budget allows. */
cattr_status cx_pt_states_per_pass(cattr_explainer *e, cx_call *c, int64_t n_states, int64_t *out) {
    int64_t k = e->p.perturbations_per_eval;
    if (k <= 0) {
        size_t row = 0;
        CX_CHECK(cx_row_bytes(e, c, false, &row));
        size_t per_state = row * (size_t)(c->B > 0 ? c->B : 1), budget = cx_memory_budget(e);
        size_t fit = per_state ? budget / per_state : (size_t)n_states;
        if (fit < 1)
            cx_budget_warn(e, "the memory budget (%zu bytes) is below one perturbed batch (%zu bytes); running one per "
                              "forward pass", budget, per_state);
        k = fit > (size_t)n_states ? n_states : (int64_t)fit;
    }
    *out = k < 1 ? 1 : (k > n_states ? n_states : k);
    return CATTR_OK;
}

/* Under a split (split.c): a chunk of cnt states from s0 that this process computed (its values kept by a part,
 * consumed in state order otherwise), or one it did not (combining consumes the parts' values; a part skips it). */
cattr_status cx_pt_computed(pt_pass *p, cx_vsplit *v, int64_t k, int64_t s0, int64_t cnt, const double *vals) {
    cattr_status st = cx_vsplit_put(v, k, vals, cnt * p->n_out);
    for (int64_t j = 0; j < cnt && st == CATTR_OK && v->mode != CX_VSPLIT_PART; j++)
        st = p->take(p, s0 + j, vals + j * p->n_out);
    return st == CATTR_OK ? cx_chunk_done(&p->e->p, s0 + cnt, p->n_states) : st;
}

cattr_status cx_pt_other(pt_pass *p, cx_vsplit *v, int64_t k, int64_t s0, int64_t cnt, double *vals) {
    if (v->mode != CX_VSPLIT_COMBINE) return CATTR_OK;
    CX_CHECK(cx_vsplit_get(v, k, vals, cnt * p->n_out));
    return cx_pt_computed(p, v, k, s0, cnt, vals);
}

cattr_status cx_pt_run_states(pt_pass *p) {
    cattr_explainer *e = p->e;
    cx_call *c = p->c;
    bool whole = p->f && p->f->whole;
    if (p->n_states <= 0) return CATTR_OK;
    int64_t per = 1, have = 0;
    if (!whole) CX_CHECK(cx_pt_states_per_pass(e, c, p->n_states, &per));
    cattr_tensor *xs[CX_MAX_IN] = {0}, *out = NULL;
    double *vals = malloc((size_t)(per * p->n_out + 1) * sizeof *vals);
    cattr_status st = vals ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cx_vsplit v;
    if (st == CATTR_OK) st = cx_vsplit_begin(e, c, p->n_states, per, p->n_out, &v);
    else memset(&v, 0, sizeof v);
    for (int64_t s0 = 0, k = 0; s0 < p->n_states && st == CATTR_OK; s0 += per, k++) {
        int64_t cnt = p->n_states - s0 < per ? p->n_states - s0 : per;
        bool mine = cx_vsplit_mine(&v, k);
        if (!mine && v.mode == CX_VSPLIT_COMBINE) { /* the parts' values, consumed as one process does */
            st = cx_pt_other(p, &v, k, s0, cnt, vals);
            continue;
        }
        for (int i = 0; i < c->n && st == CATTR_OK && cnt != have; i++) {
            /* cnt copies of the batch; a model of the whole batch: the input's own shape (its view's data) */
            const cattr_tensor *x = whole ? p->c0->x[i] : c->x[i];
            int64_t sh[CATTR_MAX_DIMS];
            memcpy(sh, x->shape, sizeof sh);
            if (!whole) sh[0] = cnt * c->B;
            cattr_tensor_free(xs[i]);
            xs[i] = cx_tensor_alloc(x->dtype, x->ndim, sh);
            if (!xs[i]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        }
        have = cnt;
        for (int64_t j = 0; j < cnt && st == CATTR_OK; j++) {
            char *slot[CX_MAX_IN];
            for (int i = 0; i < c->n; i++) slot[i] = (char *)xs[i]->data + (size_t)(j * c->x[i]->numel) * cx_pt_in_esz(c, i);
            st = p->fill(p, s0 + j, slot); /* in order even where a part skips the chunk: fills may build on it */
        }
        if (!mine) continue; /* another part's chunk */
        if (st == CATTR_OK && whole) {
            st = cx_pt_whole_values(e, p->c0, p->f, xs, vals);
        } else if (st == CATTR_OK && cx_pt_has_target(c)) { /* only the targets' values come down */
            st = cx_forward_select(e, c, xs, NULL, cnt, CX_TILE, vals, NULL);
        } else {
            if (st == CATTR_OK) st = cx_forward(e, c, xs, NULL, cnt, CX_TILE, &out);
            if (st == CATTR_OK) st = out_values(c, out, cnt, p->n_out, vals);
        }
        cattr_tensor_free(out);
        out = NULL;
        if (st == CATTR_OK) st = cx_pt_computed(p, &v, k, s0, cnt, vals);
    }
    st = cx_vsplit_end(&v, st);
    for (int i = 0; i < CX_MAX_IN; i++) cattr_tensor_free(xs[i]);
    free(vals);
    return st;
}

/* ---- FeatureAblation and FeaturePermutation --------------------------------------------------------------------- */

typedef struct fa_run {
    pt_masks *pm;
    pt_ref *ref;
    cattr_tensor **attr;
    bool permute;
    int64_t *perms;   /* replay: the recorded permutations, B each */
    int64_t *perm_at; /* replay: F x n offsets into perms (-1: none) */
    int64_t *scratch; /* the most rows of an input: a generated permutation */
    double *diff;     /* n_out */
    uint64_t seed;
    const cx_pform *f;            /* the call's form */
    int64_t aper[CX_MAX_IN];      /* elements of an attribution row of input i (its dims but the first) */
    int64_t arows[CX_MAX_IN];     /* whole: the rows of ids the attributions take (1, or one per output value) */
} fa_run;

/* The rows of input i that a permutation permutes: the batch, or (a model of the whole batch) its first dim. */
static int64_t perm_rows(const fa_run *f, const cx_call *c, int i) { return f->f->whole ? f->f->rows[i] : c->B; }

/* State q: feature q replaced by the baseline (ablation) or by other examples' values (permutation) in every input
 * holding it. */
static cattr_status fa_fill(pt_pass *p, int64_t q, char *const *slot) {
    fa_run *f = p->user;
    const pt_masks *pm = f->pm;
    const cx_call *c = p->c;
    int64_t B = c->B;
    cx_rng rng;
    if (f->permute && !f->perms) cx_rng_init(&rng, f->seed, PT_STREAM_FP + (uint64_t)q);
    for (int i = 0; i < c->n; i++) memcpy(slot[i], c->x[i]->data, (size_t)c->x[i]->numel * cx_pt_in_esz(c, i));
    for (int i = 0; i < c->n; i++) {
        size_t esz = cx_pt_in_esz(c, i);
        if (!(pm->holds[q] & (1u << i))) continue;
        const int64_t *perm = NULL;
        if (f->permute && f->perms) {
            perm = f->perms + f->perm_at[q * pm->n + i];
        } else if (f->permute) {
            do {
                cx_rng_permutation(&rng, B, f->scratch);
            } while (is_identity(f->scratch, B));
            perm = f->scratch;
        }
        const void *src = f->permute ? c->x[i]->data : c->base[i]->data;
        int64_t per = pm->per[i];
        for (int64_t t = pm->start[i][q]; t < pm->start[i][q + 1]; t++) {
            int64_t m = pm->pos[i][t] / per, k = pm->pos[i][t] % per;
            int64_t b0 = pm->rows[i] == 1 ? 0 : m, b1 = pm->rows[i] == 1 ? B : m + 1;
            for (int64_t b = b0; b < b1; b++) cx_pt_copy_el(slot[i], b * per + k, src, (perm ? perm[b] : b) * per + k, esz);
        }
    }
    return CATTR_OK;
}

/* attr[r, element of q] = y0[r] - y[r], in the model-output dtype. A model of the whole batch (the view: one mask row
 * over the whole input): every output value r takes row 0 of the input's ids, or row r (arows: one per value). */
static cattr_status fa_take(pt_pass *p, int64_t q, const double *y) {
    fa_run *f = p->user;
    const pt_masks *pm = f->pm;
    const pt_ref *ref = f->ref;
    bool whole = f->f->whole;
    for (int64_t r = 0; r < ref->n_out; r++) f->diff[r] = cx_rnd(ref->dt, ref->y[r] - y[r]);
    for (int i = 0; i < pm->n; i++) {
        if (!(pm->holds[q] & (1u << i))) continue;
        int64_t per = pm->per[i], ap = f->aper[i];
        for (int64_t t = pm->start[i][q]; t < pm->start[i][q + 1]; t++) {
            int64_t m = pm->pos[i][t] / per, k = pm->pos[i][t] % per, r0, r1;
            if (whole) { /* k = b * ap + element */
                int64_t b = ap ? k / ap : 0, el = ap ? k % ap : 0;
                if (f->arows[i] != 1) cx_tensor_set(f->attr[i], b * ap + el, f->diff[b]);
                else if (b == 0)
                    for (int64_t r = 0; r < ref->n_out; r++) cx_tensor_set(f->attr[i], r * ap + el, f->diff[r]);
                continue;
            }
            rows_of(pm, i, ref, m, &r0, &r1);
            for (int64_t r = r0; r < r1; r++) cx_tensor_set(f->attr[i], r * per + k, f->diff[r]);
        }
    }
    return CATTR_OK;
}

/* A replay's permutations in Captum's consumption order: features in chunks of perturbations_per_eval; per chunk,
 * for every input holding one of its features (ascending), one draw per feature of the chunk (used only where the
 * input holds that feature); an identity draw is discarded and the next one taken. */
static cattr_status fp_replay_perms(cattr_explainer *e, cx_call *c, fa_run *f) {
    const pt_masks *pm = f->pm;
    int64_t F = pm->F, need = 0, used = 0;
    int64_t k = e->p.perturbations_per_eval > 0 ? e->p.perturbations_per_eval : 1;
    for (int64_t q = 0; q < F; q++)
        for (int i = 0; i < pm->n; i++) need += ((pm->holds[q] >> i) & 1u) * perm_rows(f, c, i);
    f->perms = malloc((size_t)(need + 1) * sizeof *f->perms);
    f->perm_at = malloc((size_t)(F * pm->n + 1) * sizeof *f->perm_at);
    if (!f->perms || !f->perm_at) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t q0 = 0; q0 < F; q0 += k) {
        int64_t kc = F - q0 < k ? F - q0 : k;
        uint32_t in_chunk = 0;
        for (int64_t j = 0; j < kc; j++) in_chunk |= pm->holds[q0 + j];
        for (int i = 0; i < pm->n; i++) {
            if (!(in_chunk & (1u << i))) continue;
            int64_t B = perm_rows(f, c, i);
            for (int64_t j = 0; j < kc; j++) {
                do { /* an identity draw is thrown away */
                    CX_CHECK(cx_pt_take_perm_draw(c, "fp_batch_permutation", B, f->scratch));
                } while (is_identity(f->scratch, B));
                int64_t q = q0 + j;
                f->perm_at[q * pm->n + i] = -1;
                if (!(pm->holds[q] & (1u << i))) continue;
                memcpy(f->perms + used, f->scratch, (size_t)B * sizeof *f->perms);
                f->perm_at[q * pm->n + i] = used;
                used += B;
            }
        }
    }
    return CATTR_OK;
}

/* ---- FeatureAblation and FeaturePermutation as one derived graph --------------------------------------------------
 * A chunk of states [q0, q0 + cnt) (R = cnt * B rows, state-major) runs as one graph on the backend:
 *   inputs   x_i [B, ...]; src_i [B, ...] (the baselines, or x_i again for the permutation); srow_i [R] (the source
 *            row of each row: r mod B, or the permuted example); the additional inputs; M_i and ord_i [1 or B, ...]
 *            (int64 feature ids, and each element's feature ordinal or -1); mrow_i [R] (the mask row of each row);
 *            rows [R] (r mod B); fid [R] (each row's feature id); tidx [R] (the flat index of the example's target
 *            in its output); y0 [N] (the unperturbed outputs); q0 [1]; acc_i [N, ...]
 *   prefix   in_i = WhereId(x_i, src_i, M_i, fid; rows, srow_i, mrow_i)   (the perturbed rows, read in place)
 *   model    on in_i and Gather(a_j, rows)
 *   suffix   y = SeqPick(Reshape(model output, [R, -1, 1]), tidx) as [R]; diff = Gather(y0, rows) - y;
 *            out_i = PlaceRows(acc_i, diff, ord_i, q0); second output y
 * Every element belongs to one feature, so it receives one difference, in the output dtype (Captum's attribution
 * dtype: an int64 output gives int64 attributions), as in Captum; y0 comes from the same graph run once with a
 * feature id no mask holds (nothing perturbed, nothing placed). The call uploads the inputs (float, or int64 ablated
 * in their own dtype), masks and the whole schedule (with the permutations' draws) once and downloads the
 * attributions once.
 * Without a target every output value is attributed (N = n_out values per state, B * values per example): the
 * suffix is y = Reshape(output, [-1]) (cnt * N values), diff = Gather(y0, orows) - y with orows [cnt * N] the value
 * index of each (tidx's slot), acc_i and y0 have N rows, and ord_i has 1 row or one per value (its example's).
 * A model of the whole batch (perturb_forms.h) runs the same graph on the view of the call, one state per run: the
 * model inputs are its rows (Squeeze), a target is selected in each of the output's rows (tidx per row) and diff is
 * y0 - y; acc_i and ord_i have the attributions' shape [N, *input.shape[1:]] (ord_i: 1 or N rows); the permutation
 * permutes each input's own rows (src_i = Gather(x_i, srow_i) on dim 1, srow_i the input's rows per state). */
/* What a device call holds; kept with the explainer from call to call (buffers reused when large enough). */
typedef struct fa_dev {
    cx_dbuf x[CX_MAX_IN], src[CX_MAX_IN], add[CX_MAX_IN], mask[CX_MAX_IN], ord[CX_MAX_IN], srow[CX_MAX_IN];
    cx_dbuf rows, zrows, fid, tidx, y0, q0, acc, y; /* y: a chunk's outputs, for a part of a split call */
    void *accp[CX_MAX_IN];
    int64_t ord_rows[CX_MAX_IN]; /* rows of ord_i */
} fa_dev;

typedef struct fa_graph {
    cx_derived core; /* graph, call shape (target: one output per example, SeqPick; else every value), constants, plans */
    bool whole;      /* built for a model of the whole batch (perturb_forms.h) */
    int outs[CX_MAX_IN + 1];
    fa_dev d;
} fa_graph;

static void fa_dev_free(fa_dev *d);
static void fa_graph_free(fa_graph *s) {
    if (!s) return;
    fa_dev_free(&s->d);
    cx_derived_free(&s->core);
    free(s);
}
static void fa_release(cattr_explainer *e) {
    fa_graph_free(e->method_state);
    e->method_state = NULL;
}

#define FA_X(i) (i)
#define FA_SRC(i) (s->core.n + (i))
#define FA_SROW(i) (2 * s->core.n + (i))
#define FA_M(i) (3 * s->core.n + (i))
#define FA_ORD(i) (4 * s->core.n + (i))
#define FA_MROW(i) (5 * s->core.n + (i))
#define FA_ACC(i) (6 * s->core.n + (i))
#define FA_ADD(j) (7 * s->core.n + (j))
#define FA_ROWS (7 * s->core.n + s->core.n_add)
#define FA_FID (FA_ROWS + 1)
#define FA_TIDX (FA_ROWS + 2)
#define FA_Y0 (FA_ROWS + 3)
#define FA_Q0 (FA_ROWS + 4)
#define FA_N_IN (FA_ROWS + 5)
#define FA_MAX_IN (8 * CX_MAX_IN + 5)

static int fa_emit(cg_graph *g, cg_op op, const char *name, int n, const int *in, const cg_attrs *a) {
    for (int k = 0; k < n; k++)
        if (in[k] < 0) return -1;
    return cg_emit(g, op, name, in, n, a);
}
#define E2(op, name, a, b) fa_emit(g, op, name, 2, (int[]){a, b}, NULL)

static cattr_status fa_build(cattr_explainer *e, void *state) {
    fa_graph *s = state;
    const cg_graph *m = e->m->g;
    bool whole = s->whole = cx_pform_building_whole, permute = e->p.method == CATTR_METHOD_FEATURE_PERMUTATION;
    cg_graph *g = NULL;
    int *map = NULL;
    CX_CHECK(cx_derive_new(m, &g, &map));
    int v[FA_MAX_IN], bad = 0;
    for (int k = 0; k < FA_MAX_IN; k++) v[k] = -1;
    for (int k = 0; k < FA_N_IN; k++) {
        char nm[48];
        snprintf(nm, sizeof nm, "__fa_in%d", k);
        bad |= (v[k] = cg_add_input(g, nm)) < 0;
    }
    int rows = v[FA_ROWS], in_map[2 * CX_MAX_IN];
    cg_attrs ax1 = cg_attrs_default();
    ax1.axis = 1;
    for (int i = 0; i < s->core.n && !bad; i++) {
        int src = v[FA_SRC(i)], srow = v[FA_SROW(i)];
        if (whole && permute) { /* the input's own rows permuted (dim 1 of the view) */
            src = fa_emit(g, CG_GATHER, "__fa_permuted", 2, (int[]){v[FA_X(i)], srow}, &ax1);
            srow = rows;
        }
        int t = fa_emit(g, CG_WHERE_ID, "__fa_perturbed", 7,
                        (int[]){v[FA_X(i)], src, v[FA_M(i)], v[FA_FID], rows, srow, v[FA_MROW(i)]}, NULL);
        in_map[i] = cx_pform_model_input(g, whole, t);
        bad |= in_map[i] < 0;
    }
    for (int j = 0; j < s->core.n_add && !bad; j++)
        bad |= (in_map[s->core.n + j] = cx_pform_model_input(g, whole, E2(CG_GATHER, "__fa_at", v[FA_ADD(j)], rows))) < 0;
    cattr_status st = bad ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : CATTR_OK;
    if (st == CATTR_OK) st = cx_graph_append_model(g, m, in_map, map);
    if (st == CATTR_OK) {
        cg_attrs a = cg_attrs_default();
        a.n_ints = 3;
        a.ints[0] = 0, a.ints[1] = -1, a.ints[2] = 1;
        int ys = map[cx_model_output(e->m)];
        if (s->core.target) {
            int y3 = fa_emit(g, CG_RESHAPE, "__fa_out_rows", 1, (int[]){ys}, &a);
            ys = E2(CG_SEQ_PICK, "__fa_target", y3, v[FA_TIDX]);
        }
        a.n_ints = 1;
        a.ints[0] = -1;
        int y = fa_emit(g, CG_RESHAPE, "__fa_y", 1, (int[]){ys}, &a);
        int y0 = whole && s->core.target ? v[FA_Y0] /* one state: the values in order */
                                         : E2(CG_GATHER, "__fa_y0_rows", v[FA_Y0], s->core.target ? rows : v[FA_TIDX]);
        int diff = E2(CG_SUB, "__fa_diff", y0, y);
        for (int i = 0; i < s->core.n; i++) {
            s->outs[i] = fa_emit(g, CG_PLACE_ROWS, "__fa_placed", 4, (int[]){v[FA_ACC(i)], diff, v[FA_ORD(i)], v[FA_Q0]},
                                 NULL);
            bad |= s->outs[i] < 0;
        }
        s->outs[s->core.n] = y;
        if (bad || y < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    free(map);
    if (st != CATTR_OK) {
        cg_free(g);
        return st;
    }
    s->core.g = g;
    return CATTR_OK;
}
#undef E2

static void fa_dev_free(fa_dev *d) {
    for (int i = 0; i < CX_MAX_IN; i++) {
        cx_dbuf_free(&d->x[i]);
        cx_dbuf_free(&d->src[i]);
        cx_dbuf_free(&d->add[i]);
        cx_dbuf_free(&d->mask[i]);
        cx_dbuf_free(&d->ord[i]);
        cx_dbuf_free(&d->srow[i]);
    }
    cx_dbuf_free(&d->rows);
    cx_dbuf_free(&d->zrows);
    cx_dbuf_free(&d->fid);
    cx_dbuf_free(&d->tidx);
    cx_dbuf_free(&d->y0);
    cx_dbuf_free(&d->q0);
    cx_dbuf_free(&d->acc);
    cx_dbuf_free(&d->y);
}

cattr_status cx_pform_state(cattr_explainer *e, cx_call *c, bool target, bool whole, size_t size,
                            cattr_status (*build)(cattr_explainer *e, void *state),
                            void (*release)(cattr_explainer *e), size_t whole_at, void **state) {
    if (e->method_state && *(const bool *)((const char *)e->method_state + whole_at) != whole) release(e);
    cx_pform_building_whole = whole;
    return cx_derived_state(e, c, target, size, build, release, state);
}

/* Runs chunk k of cnt states starting at state q0 (k 0: the reference, whose y goes to d->y0; else to yout when not
 * NULL). Rows of state q are at (q + 1) * B in fid and srow (the reference's first); a model of the whole batch
 * permutes input i's rows from (q + 1) * rows_i in srow_i. */
static cattr_status fa_run_chunk(cattr_explainer *e, fa_graph *s, cx_call *c, const fa_run *f, const fa_dev *d,
                                 int64_t N, int64_t cnt, int64_t q0, int64_t k, void *yout) {
    const pt_masks *pm = f->pm;
    const cx_pform *pf = f->f;
    bool reference = k == 0, permute = f->permute;
    int64_t R = cnt * c->B;
    int nd[FA_MAX_IN];
    int64_t sh[FA_MAX_IN][CATTR_MAX_DIMS];
    cattr_dtype dt[FA_MAX_IN];
    void *in[FA_MAX_IN], *out[CX_MAX_IN + 1];
    size_t idx_off = reference ? 0 : (size_t)((q0 + 1) * c->B) * sizeof(int64_t);
    for (int j = 0; j < FA_N_IN; j++) {
        dt[j] = CATTR_INT64;
        nd[j] = 1;
        sh[j][0] = R;
    }
    for (int i = 0; i < s->core.n; i++) {
        const cattr_tensor *x = c->x[i], *xo = pf->whole ? x : NULL; /* the attributions' shape: the input's own */
        int rk[3] = {FA_X(i), FA_SRC(i), FA_M(i)};
        for (int t = 0; t < 3; t++) {
            nd[rk[t]] = x->ndim;
            memcpy(sh[rk[t]], x->shape, sizeof sh[0]);
            dt[rk[t]] = t < 2 ? x->dtype : CATTR_INT64;
        }
        int and = pf->whole ? xo->ndim - 1 : x->ndim;
        const int64_t *ash = pf->whole ? xo->shape + 1 : x->shape; /* [rows, *attribution row shape] */
        nd[FA_ORD(i)] = nd[FA_ACC(i)] = and;
        memcpy(sh[FA_ORD(i)], ash, (size_t)and * sizeof(int64_t));
        memcpy(sh[FA_ACC(i)], ash, (size_t)and * sizeof(int64_t));
        sh[FA_M(i)][0] = pm->rows[i];
        sh[FA_ORD(i)][0] = d->ord_rows[i];
        sh[FA_ACC(i)][0] = N;
        dt[FA_ACC(i)] = f->ref->dt;
        in[FA_X(i)] = d->x[i].p;
        in[FA_SRC(i)] = permute ? d->x[i].p : d->src[i].p;
        if (permute && pf->whole) { /* the input's rows, permuted per state */
            int64_t ri = pf->rows[i];
            sh[FA_SROW(i)][0] = ri;
            in[FA_SROW(i)] = (char *)d->srow[i].p + (size_t)(reference ? 0 : (q0 + 1) * ri) * sizeof(int64_t);
        } else {
            in[FA_SROW(i)] = permute ? (char *)d->srow[i].p + idx_off : d->rows.p;
        }
        in[FA_M(i)] = d->mask[i].p;
        in[FA_ORD(i)] = d->ord[i].p;
        in[FA_MROW(i)] = pm->rows[i] == 1 ? d->zrows.p : d->rows.p;
        in[FA_ACC(i)] = out[i] = d->accp[i];
    }
    for (int j = 0; j < s->core.n_add; j++) {
        nd[FA_ADD(j)] = c->add[j]->ndim;
        memcpy(sh[FA_ADD(j)], c->add[j]->shape, sizeof sh[0]);
        dt[FA_ADD(j)] = c->add[j]->dtype;
        in[FA_ADD(j)] = d->add[j].p;
    }
    in[FA_ROWS] = d->rows.p;
    in[FA_FID] = (char *)d->fid.p + idx_off;
    in[FA_TIDX] = d->tidx.p;
    if (!s->core.target) sh[FA_TIDX][0] = cnt * N;    /* the value index of every output value */
    else if (pf->whole) sh[FA_TIDX][0] = pf->osh[0]; /* the target of each output row */
    sh[FA_Y0][0] = N;
    dt[FA_Y0] = f->ref->dt;
    in[FA_Y0] = d->y0.p;
    sh[FA_Q0][0] = 1;
    in[FA_Q0] = (char *)d->q0.p + (size_t)k * sizeof(int64_t);
    out[s->core.n] = reference ? d->y0.p : yout;
    cx_plan *p = NULL;
    CX_CHECK(cx_plan_cache_get(&s->core.pc, s->core.g, s->core.consts, e->p.executor == CATTR_EXEC_EAGER, nd,
                               (const int64_t(*)[CATTR_MAX_DIMS])sh, dt, s->outs, s->core.n + 1, &p));
    if (cx_view_numel(cx_plan_view(p, s->outs[s->core.n])) != cnt * N)
        return cx_fail(CATTR_ERR_SHAPE, "the model output has %lld values for %lld perturbed copies of the inputs; "
                       "expected %lld per copy", (long long)cx_view_numel(cx_plan_view(p, s->outs[s->core.n])),
                       (long long)cnt, (long long)N);
    return cx_run_plan_dev(e, p, NULL, in, NULL, out);
}

/* FeatureAblation / FeaturePermutation on the backend (see above). */
static cattr_status fa_on_device(cattr_explainer *e, cx_call *c, const pt_masks *pm, fa_run *f, cattr_tensor **attr) {
    const cx_pform *pf = f->f;
    fa_graph *s = NULL;
    cattr_tensor *seed = NULL;
    bool target = cx_pt_has_target(c), whole = pf->whole;
    cattr_dtype odt = f->ref->dt;
    int64_t B = c->B, F = pm->F, per = 1, N = f->ref->n_out, per_row = !whole && B ? N / B : 0;
    int64_t *ord2id = NULL, *buf = NULL;
    cattr_status st = pt_state(e, c, target, whole, sizeof *s, fa_build, fa_release, offsetof(fa_graph, whole),
                               (void **)&s);
    fa_dev *dp = s ? &s->d : NULL;
    if (st == CATTR_OK && !whole) st = cx_pt_states_per_pass(e, c, F > 0 ? F : 1, &per);
    if (st == CATTR_OK && target && !whole) st = cx_seed_block(e, c, &seed);
    int64_t n_chunks = F > 0 ? (F + per - 1) / per : 0;
    int64_t rmax = (per > 1 ? per : 1) * B, n_sched = (F + 1) * B; /* fid, srow: the reference's rows, then states' */
    int64_t omax = (per > 1 ? per : 1) * N; /* output values per chunk */
    int64_t n_buf = n_sched > rmax ? n_sched : rmax;
    if (omax > n_buf) n_buf = omax;
    if (whole && pf->osh[0] > n_buf) n_buf = pf->osh[0];
    for (int i = 0; i < c->n; i++) {
        if (pm->rows[i] * pm->per[i] > n_buf) n_buf = pm->rows[i] * pm->per[i];
        if (N * f->aper[i] > n_buf) n_buf = N * f->aper[i];
        if (whole && (F + 1) * pf->rows[i] > n_buf) n_buf = (F + 1) * pf->rows[i];
    }
    if (st == CATTR_OK) {
        ord2id = malloc((size_t)(F + 1) * sizeof *ord2id);
        buf = malloc((size_t)(n_buf + n_chunks + 2) * sizeof *buf);
        if (!ord2id || !buf) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    /* a feature id no mask holds, for the unperturbed reference rows */
    int64_t lo = 0, hi = 0;
    bool any = false;
    for (int i = 0; i < pm->n && st == CATTR_OK; i++)
        for (int64_t k = 0; k < pm->rows[i] * pm->per[i]; k++) {
            int64_t id = pm->ids[i][k];
            if (!any || id < lo) lo = id;
            if (!any || id > hi) hi = id;
            any = true;
        }
    int64_t none = !any ? 0 : hi < INT64_MAX ? hi + 1 : lo - 1;
    if (st == CATTR_OK && any && hi == INT64_MAX && lo == INT64_MIN)
        st = cx_fail(CATTR_ERR_UNSUPPORTED, "feature masks that use both INT64_MIN and INT64_MAX");
    for (int64_t q = 0; q < F && st == CATTR_OK; q++) {
        if (pm->dense) ord2id[q] = q;
        else ord2id[pm->by_id[2 * q + 1]] = pm->by_id[2 * q];
    }
    size_t eo = cattr_dtype_size(odt);
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        int64_t nm = pm->rows[i] * pm->per[i];
        size_t xb = (size_t)c->x[i]->numel * cattr_dtype_size(c->x[i]->dtype);
        st = cx_dbuf_fit(e->be, &dp->x[i], xb, c->x_dev[i] ? NULL : c->x[i]->data, false);
        if (st == CATTR_OK && c->x_dev[i]) /* the inputs already on the backend (cx_call.x_dev) */
            st = cx_copy_dev(e->be, dp->x[i].p, c->x_dev[i], xb);
        if (st == CATTR_OK && !f->permute) st = cx_dbuf_fit(e->be, &dp->src[i], xb, c->base[i]->data, false);
        if (st == CATTR_OK) st = cx_dbuf_fit(e->be, &dp->mask[i], (size_t)nm * sizeof(int64_t), pm->ids[i], false);
        /* the ordinals of the attributions' elements: one row, or one per output value */
        int64_t ap = f->aper[i], orows = 1;
        if (whole) { /* the input's ids in its own layout; row 0, or row r for output value r */
            orows = f->arows[i];
            for (int64_t k = 0; k < orows * ap && st == CATTR_OK; k++) buf[k] = feature_of(pm, pm->ids[i][k]);
        } else {
            for (int64_t k = 0; k < nm && st == CATTR_OK; k++) buf[k] = feature_of(pm, pm->ids[i][k]);
            orows = pm->rows[i];
            if (st == CATTR_OK && !target && pm->rows[i] != 1) { /* one row per output value: its example's */
                for (int64_t o = N - 1; o >= 0; o--) memmove(buf + o * ap, buf + (o / per_row) * ap, (size_t)ap * sizeof *buf);
                orows = N;
            }
        }
        dp->ord_rows[i] = orows;
        if (st == CATTR_OK) st = cx_dbuf_fit(e->be, &dp->ord[i], (size_t)(orows * ap) * sizeof *buf, buf, false);
    }
    for (int j = 0; j < c->n_add && st == CATTR_OK; j++)
        st = cx_dbuf_fit(e->be, &dp->add[j], (size_t)c->add[j]->numel * cattr_dtype_size(c->add[j]->dtype), c->add[j]->data, false);
    if (st == CATTR_OK) { /* rows r mod B, zeros, the targets' flat indices (without a target: value indices) */
        for (int64_t r = 0; r < rmax; r++) buf[r] = r % B;
        st = cx_dbuf_fit(e->be, &dp->rows, (size_t)rmax * sizeof *buf, buf, false);
        if (st == CATTR_OK) st = cx_dbuf_fit(e->be, &dp->zrows, (size_t)rmax * sizeof *buf, NULL, true);
    }
    if (st == CATTR_OK && !target) {
        for (int64_t r = 0; r < omax; r++) buf[r] = r % N;
        st = cx_dbuf_fit(e->be, &dp->tidx, (size_t)omax * sizeof *buf, buf, false);
    } else if (st == CATTR_OK && whole) { /* the target of each output row */
        st = cx_pform_target_rows(pf, c, buf);
        if (st == CATTR_OK) st = cx_dbuf_fit(e->be, &dp->tidx, (size_t)pf->osh[0] * sizeof *buf, buf, false);
    } else if (st == CATTR_OK) {
        cx_target_rows(seed, B, rmax, buf);
        st = cx_dbuf_fit(e->be, &dp->tidx, (size_t)rmax * sizeof *buf, buf, false);
    }
    if (st == CATTR_OK) { /* feature ids per row: the reference's, then state q's at (q + 1) * B */
        for (int64_t r = 0; r < n_sched; r++) buf[r] = r < B ? none : ord2id[r / B - 1];
        st = cx_dbuf_fit(e->be, &dp->fid, (size_t)n_sched * sizeof *buf, buf, false);
    }
    if (st == CATTR_OK) { /* q0 per run: the reference places nothing (q0 = F), then the chunks' first states */
        buf[0] = F;
        for (int64_t k = 0; k < n_chunks; k++) buf[k + 1] = k * per;
        st = cx_dbuf_fit(e->be, &dp->q0, (size_t)(n_chunks + 1) * sizeof *buf, buf, false);
    }
    for (int i = 0; i < c->n && st == CATTR_OK && f->permute; i++) { /* the source rows of every state's rows */
        int64_t Bi = perm_rows(f, c, i), ns = (F + 1) * Bi;
        for (int64_t b = 0; b < Bi; b++) buf[b] = b;
        for (int64_t q = 0; q < F; q++) {
            const int64_t *perm = NULL;
            if (f->perms && (pm->holds[q] & (1u << i))) perm = f->perms + f->perm_at[q * pm->n + i];
            for (int64_t b = 0; b < Bi; b++) buf[(q + 1) * Bi + b] = perm ? perm[b] : b;
            if (f->perms) continue;
            /* generated: per state, one permutation for each input holding the feature, in input order */
            cx_rng rng;
            cx_rng_init(&rng, f->seed, PT_STREAM_FP + (uint64_t)q);
            for (int k = 0; k <= i; k++) {
                if (!(pm->holds[q] & (1u << k))) continue;
                int64_t Bk = perm_rows(f, c, k);
                do {
                    cx_rng_permutation(&rng, Bk, f->scratch);
                } while (is_identity(f->scratch, Bk));
                if (k == i) memcpy(buf + (q + 1) * Bi, f->scratch, (size_t)Bi * sizeof *buf);
            }
        }
        st = cx_dbuf_fit(e->be, &dp->srow[i], (size_t)ns * sizeof *buf, buf, false);
    }
    size_t acc_bytes = 0;
    for (int i = 0; i < c->n; i++) acc_bytes += ((size_t)(N * f->aper[i]) * eo + 63) / 64 * 64;
    if (st == CATTR_OK) st = cx_dbuf_fit(e->be, &dp->acc, acc_bytes, NULL, true);
    if (st == CATTR_OK) st = cx_dbuf_fit(e->be, &dp->y0, (size_t)N * eo, NULL, true);
    size_t off = 0;
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        dp->accp[i] = (char *)dp->acc.p + off;
        off += ((size_t)(N * f->aper[i]) * eo + 63) / 64 * 64;
    }
    /* the unperturbed outputs: the graph run with a feature id no mask holds (nothing perturbed, nothing placed) */
    if (st == CATTR_OK) st = fa_run_chunk(e, s, c, f, dp, N, 1, 0, 0, NULL);
    /* split into parts (split.c): a part runs its chunks and keeps their outputs; combining places the parts'
     * outputs on the host as the host path does (fa_take: y0 - y in the output dtype, the same subtraction) */
    cx_vsplit v;
    memset(&v, 0, sizeof v);
    double *vals = NULL;
    cattr_tensor *yt = NULL;
    if (st == CATTR_OK) st = cx_vsplit_begin(e, c, F, per, N, &v);
    if (st == CATTR_OK && v.mode != CX_VSPLIT_NONE) {
        int64_t len = omax > N ? omax : N;
        vals = malloc((size_t)(len + 1) * sizeof *vals);
        yt = cx_tensor_alloc(odt, 1, &len);
        if (!vals || !yt) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK && v.mode == CX_VSPLIT_PART) st = cx_dbuf_fit(e->be, &dp->y, (size_t)omax * eo, NULL, false);
        if (st == CATTR_OK && v.mode == CX_VSPLIT_COMBINE) { /* the reference outputs, for fa_take */
            free(f->ref->y);
            f->ref->y = malloc((size_t)(N + 1) * sizeof *f->ref->y);
            if (!f->ref->y) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            if (st == CATTR_OK) st = cx_copy_out(e->be, yt->data, dp->y0.p, (size_t)N * eo);
            for (int64_t o = 0; o < N && st == CATTR_OK; o++) f->ref->y[o] = cx_tensor_get(yt, o);
        }
    }
    for (int64_t k = 0; k < n_chunks && st == CATTR_OK; k++) {
        int64_t q0 = k * per, cnt = F - q0 < per ? F - q0 : per;
        if (cx_vsplit_mine(&v, k)) {
            st = fa_run_chunk(e, s, c, f, dp, N, cnt, q0, k + 1, v.mode == CX_VSPLIT_PART ? dp->y.p : NULL);
            if (st == CATTR_OK && v.mode == CX_VSPLIT_PART) {
                st = cx_copy_out(e->be, yt->data, dp->y.p, (size_t)(cnt * N) * eo);
                for (int64_t o = 0; o < cnt * N && st == CATTR_OK; o++) vals[o] = cx_tensor_get(yt, o);
                if (st == CATTR_OK) st = cx_vsplit_put(&v, k, vals, cnt * N);
            }
        } else if (v.mode == CX_VSPLIT_COMBINE) {
            st = cx_vsplit_get(&v, k, vals, cnt * N);
            pt_pass p = {e, c, F, N, fa_fill, fa_take, f, pf, NULL};
            for (int64_t j = 0; j < cnt && st == CATTR_OK; j++) st = fa_take(&p, q0 + j, vals + j * N);
        } else {
            continue;
        }
        if (st == CATTR_OK) st = cx_chunk_done(&e->p, q0 + cnt, F);
    }
    st = cx_vsplit_end(&v, st);
    for (int i = 0; i < c->n && st == CATTR_OK && v.mode == CX_VSPLIT_NONE; i++) {
        size_t bytes = (size_t)attr[i]->numel * eo;
        if (c->attr_dev[i]) { /* the caller takes them on the backend (cx_call.attr_dev) */
            st = cx_copy_dev(e->be, c->attr_dev[i], dp->accp[i], bytes);
            cattr_tensor_free(attr[i]);
            attr[i] = NULL;
        } else {
            st = cx_copy_out(e->be, attr[i]->data, dp->accp[i], bytes);
        }
    }
    free(vals);
    cattr_tensor_free(yt);
    cattr_tensor_free(seed);
    free(ord2id);
    free(buf);
    return st;
}

/* FeaturePermutation: Captum skips a feature group held by an input of fewer than 2 rows (it cannot be permuted):
 * its attributions stay 0. Drops those features (the others keep their order) and groups the positions anew;
 * *dropped: how many. */
static cattr_status features_drop_unpermutable(pt_masks *pm, const int64_t *rows, int64_t *dropped) {
    uint32_t small = 0;
    *dropped = 0;
    for (int i = 0; i < pm->n; i++)
        if (rows[i] < 2) small |= 1u << i;
    if (!small || pm->F == 0) return CATTR_OK;
    int64_t *nord = malloc((size_t)(pm->F + 1) * sizeof *nord), nf = 0, kept = 0;
    if (!nord) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t q = 0; q < pm->F; q++) nord[q] = pm->holds[q] & small ? -1 : nf++;
    for (int64_t k = 0; k < pm->F; k++) /* by_id stays ascending by id */
        if (nord[pm->by_id[2 * k + 1]] >= 0) {
            pm->by_id[2 * kept] = pm->by_id[2 * k];
            pm->by_id[2 * kept + 1] = nord[pm->by_id[2 * k + 1]];
            kept++;
        }
    free(nord);
    *dropped = pm->F - nf;
    pm->F = nf;
    for (int i = 0; i < CX_MAX_IN; i++) {
        free(pm->start[i]);
        free(pm->pos[i]);
        pm->start[i] = pm->pos[i] = NULL;
    }
    free(pm->holds);
    pm->holds = NULL;
    return cx_pt_masks_index(pm);
}

static cattr_status ablation_attribute(cattr_explainer *e, cx_call *c0, cattr_tensor **attr, bool permute) {
    pt_masks pm;
    pt_ref ref;
    fa_run f;
    cx_pform pf;
    memset(&f, 0, sizeof f);
    memset(&ref, 0, sizeof ref);
    memset(&pm, 0, sizeof pm);
    cattr_status st = cx_pform_get(e, c0, true, false, &pf);
    if (st != CATTR_OK) return st;
    cx_call *c = pf.whole ? &pf.v : c0; /* a model of the whole batch: its view (perturb_forms.h) */
    st = cx_pt_masks_load(c, &pf, &pm);
    if (st == CATTR_OK) st = features_first_seen(&pm);
    if (st == CATTR_OK) st = cx_pt_masks_index(&pm);
    int64_t rows[CX_MAX_IN], max_rows = c->B, dropped = 0;
    for (int i = 0; i < c->n; i++) {
        rows[i] = pf.whole ? pf.rows[i] : c->B;
        if (rows[i] > max_rows) max_rows = rows[i];
    }
    if (st == CATTR_OK && permute) st = features_drop_unpermutable(&pm, rows, &dropped);
    if (st == CATTR_OK && dropped) /* Captum skips the feature groups of an input below 2 rows */
        cx_log(CATTR_LOG_WARN, "FeaturePermutation permutes an input's rows: %lld feature group%s of an input with "
                               "fewer than 2 rows keep%s attribution 0", (long long)dropped, dropped == 1 ? "" : "s",
               dropped == 1 ? "s its" : " their");
    /* the attributions: [N, *input.shape[1:]] in the model output's dtype (Captum's) */
    ref.dt = pf.odt;
    ref.n_out = pf.n_sel;
    ref.per_row = !pf.whole && c->B ? ref.n_out / c->B : 0;
    int64_t lead = ref.n_out;
    for (int i = 0; i < c0->n && st == CATTR_OK; i++) {
        st = cx_pt_alloc_attr(ref.dt, 1, &lead, c0->x[i], &attr[i]);
        f.aper[i] = cx_pt_example_numel(c0->x[i]);
        f.arows[i] = 1;
        if (st == CATTR_OK && pf.whole) st = cx_pform_id_rows(&pf, i, pm.ids[i], f.aper[i], ref.n_out, &f.arows[i]);
    }
    if (st == CATTR_OK && ref.n_out > 0 && pm.F > 0) {
        f.pm = &pm;
        f.ref = &ref;
        f.attr = attr;
        f.permute = permute;
        f.seed = e->p.seed;
        f.f = &pf;
        f.scratch = malloc((size_t)(max_rows + 1) * sizeof *f.scratch);
        f.diff = malloc((size_t)(ref.n_out + 1) * sizeof *f.diff);
        if (!f.scratch || !f.diff) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK && permute && cx_pt_replaying(c)) st = fp_replay_perms(e, c, &f);
        if (st == CATTR_OK && (c->x_dev[0] || c->attr_dev[0]) && (permute || !cx_pt_has_target(c)))
            st = cx_fail(CATTR_ERR_INTERNAL, "FeatureAblation takes backend inputs only with a target");
        if (st == CATTR_OK) st = fa_on_device(e, c, &pm, &f, attr);
    } else if (st == CATTR_OK) { /* nothing to perturb or nothing to attribute: every attribution is 0 */
        for (int i = 0; i < c->n && st == CATTR_OK; i++)
            if (c->attr_dev[i]) {
                st = cx_zero(e->be, c->attr_dev[i], (size_t)attr[i]->numel * cattr_dtype_size(attr[i]->dtype));
                cattr_tensor_free(attr[i]);
                attr[i] = NULL;
            }
    }
    if (st != CATTR_OK)
        for (int i = 0; i < c0->n; i++) {
            cattr_tensor_free(attr[i]);
            attr[i] = NULL;
        }
    free(f.perms);
    free(f.perm_at);
    free(f.scratch);
    free(f.diff);
    free(ref.y);
    cx_pt_masks_free(&pm);
    cx_pform_free(&pf);
    return st;
}

static cattr_status feature_ablation(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    return ablation_attribute(e, c, attr, false);
}

static cattr_status feature_permutation(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    return ablation_attribute(e, c, attr, true);
}

/* ---- the method table entries ----------------------------------------------------------------------------------- */

const cx_method cx_method_feature_ablation = {CATTR_METHOD_FEATURE_ABLATION, "feature-ablation", "FeatureAblation",
                                              false, NULL, feature_ablation, fa_release};
const cx_method cx_method_feature_permutation = {CATTR_METHOD_FEATURE_PERMUTATION, "feature-permutation",
                                                 "FeaturePermutation", false, NULL, feature_permutation,
                                                 fa_release};
