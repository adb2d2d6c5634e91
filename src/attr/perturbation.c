/* perturbation.c - the perturbation methods' common parts (feature masks, the unperturbed output, the batched
 * passes: perturb_internal.h) and FeatureAblation and FeaturePermutation (their derived graph in ablation_dev.c; the
 * forms of a call in perturb_forms.c); Occlusion is in occlusion.c, ShapleyValueSampling and ShapleyValues in
 * shapley.c. All with Captum's semantics (shared/reference/captum_spec.md section 6; golden README sections 7, 8 and
 * 11).
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

bool cx_pt_is_identity(const int64_t *p, int64_t n) {
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
int64_t cx_pt_feature_of(const pt_masks *pm, int64_t v) {
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
cattr_status cx_pt_features_first_seen(pt_masks *pm) {
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
            q[p] = cx_pt_feature_of(pm, pm->ids[i][p]);
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

/* The rows of input i that a permutation permutes: the batch, or (a model of the whole batch) its first dim. */
int64_t cx_pt_perm_rows(const fa_run *f, const cx_call *c, int i) { return f->f->whole ? f->f->rows[i] : c->B; }

/* ---- FeatureAblation and FeaturePermutation --------------------------------------------------------------------- */

/* attr[r, element of q] = y0[r] - y[r], in the model-output dtype. A model of the whole batch (the view: one mask row
 * over the whole input): every output value r takes row 0 of the input's ids, or row r (arows: one per value). */
cattr_status cx_pt_fa_take(pt_pass *p, int64_t q, const double *y) {
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
cattr_status cx_pt_fp_replay_perms(cattr_explainer *e, cx_call *c, fa_run *f) {
    const pt_masks *pm = f->pm;
    int64_t F = pm->F, need = 0, used = 0;
    int64_t k = e->p.perturbations_per_eval > 0 ? e->p.perturbations_per_eval : 1;
    for (int64_t q = 0; q < F; q++)
        for (int i = 0; i < pm->n; i++) need += ((pm->holds[q] >> i) & 1u) * cx_pt_perm_rows(f, c, i);
    f->perms = malloc((size_t)(need + 1) * sizeof *f->perms);
    f->perm_at = malloc((size_t)(F * pm->n + 1) * sizeof *f->perm_at);
    if (!f->perms || !f->perm_at) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t q0 = 0; q0 < F; q0 += k) {
        int64_t kc = F - q0 < k ? F - q0 : k;
        uint32_t in_chunk = 0;
        for (int64_t j = 0; j < kc; j++) in_chunk |= pm->holds[q0 + j];
        for (int i = 0; i < pm->n; i++) {
            if (!(in_chunk & (1u << i))) continue;
            int64_t B = cx_pt_perm_rows(f, c, i);
            for (int64_t j = 0; j < kc; j++) {
                do { /* an identity draw is thrown away */
                    CX_CHECK(cx_pt_take_perm_draw(c, "fp_batch_permutation", B, f->scratch));
                } while (cx_pt_is_identity(f->scratch, B));
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

/* ---- the method table entries ----------------------------------------------------------------------------------- */

const cx_method cx_method_feature_ablation = {CATTR_METHOD_FEATURE_ABLATION, false, NULL, cx_pt_feature_ablation, cx_pt_fa_release};
const cx_method cx_method_feature_permutation = {CATTR_METHOD_FEATURE_PERMUTATION, false, NULL, cx_pt_feature_permutation,
                                                 cx_pt_fa_release};

