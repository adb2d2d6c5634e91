/* perturbation.c - the perturbation methods: FeatureAblation, FeaturePermutation, Occlusion, ShapleyValueSampling
 * and ShapleyValues, with Captum's semantics (shared/reference/captum_spec.md section 6; golden README sections 7, 8
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
#include "attr/derive.h"
#include "attr/internal.h"
#include "attr/perturb_forms.h"
#include "core/rng.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PT_STREAM_FP 0x4650000000000000ull  /* FeaturePermutation: + feature ordinal */
#define PT_STREAM_SVS 0x5356530000000000ull /* ShapleyValueSampling: the n_samples orders, in turn */
#define SV_MAX_FEATURES 12                  /* ShapleyValues enumerates M! orders */
#define SVS_MAX_FEATURES ((int64_t)1 << 26) /* ShapleyValueSampling numbers features 0..max id */

/* ---- small helpers ---------------------------------------------------------------------------------------------- */

static inline void copy_el(void *dst, int64_t di, const void *src, int64_t si, size_t esz) {
    if (esz == 8) ((uint64_t *)dst)[di] = ((const uint64_t *)src)[si];
    else ((uint32_t *)dst)[di] = ((const uint32_t *)src)[si];
}

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
static int64_t example_numel(const cattr_tensor *x) { return cx_numel(x->ndim - 1, x->shape + 1); }

static bool replaying(const cx_call *c) { return c->user && c->user->n_draws > 0; }

/* Copies an explicit permutation draw of `n` entries into out after checking it is one. */
static cattr_status take_perm_draw(cx_call *c, const char *role, int64_t n, int64_t *out) {
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

/* Feature ids per input, expanded to `rows` x per-example elements, and for every feature the mask positions
 * (row*per + k) that hold it. */
typedef struct pt_masks {
    int n;
    int64_t B;
    int64_t per[CX_MAX_IN];  /* elements per example of input i */
    int64_t rows[CX_MAX_IN]; /* mask rows: 1 (shared by the examples) or B */
    int64_t *ids[CX_MAX_IN]; /* rows*per feature ids */
    int64_t F;               /* features, numbered 0..F-1 in visiting order */
    bool dense;              /* feature q has id q (Shapley methods); else looked up in by_id */
    int64_t *by_id;          /* F pairs (id, ordinal), ascending by id */
    uint32_t *holds;         /* F: bit i set when input i has elements of the feature */
    int64_t *start[CX_MAX_IN]; /* F+1 offsets into pos */
    int64_t *pos[CX_MAX_IN];   /* positions grouped by feature */
} pt_masks;

static void masks_free(pt_masks *pm) {
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
static cattr_status masks_load(const cx_call *c, const cx_pform *f, pt_masks *pm) {
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
        int64_t per = example_numel(x);
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
static cattr_status features_dense(pt_masks *pm) {
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
static cattr_status masks_index(pt_masks *pm) {
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

/* Target-selected output of one state: n_out values (B with a target, every output element without one). */
typedef struct pt_ref {
    double *y;
    int64_t n_out;
    int64_t per_row; /* values per example: n_out / B */
    cattr_dtype dt;  /* model-output dtype */
    int ndim;        /* shape of the target-selected output */
    int64_t shape[CATTR_MAX_DIMS];
} pt_ref;

static bool has_target(const cx_call *c) { return c->target && c->target->kind != CATTR_TARGET_NONE; }

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
static cattr_status reference_output(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, pt_ref *ref) {
    cattr_tensor *out = NULL;
    memset(ref, 0, sizeof *ref);
    if (has_target(c)) { /* only the targets' values come down */
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
    if (has_target(c)) {
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
static cattr_status alloc_attr(cattr_dtype dt, int lead_nd, const int64_t *lead, const cattr_tensor *x,
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

/* A sequence of perturbed states, evaluated many per forward pass and consumed in order. */
typedef struct pt_pass pt_pass;
struct pt_pass {
    cattr_explainer *e;
    cx_call *c;
    int64_t n_states;
    int64_t n_out;
    /* writes state s into slot[i] (the B rows of input i, compute dtype); called in state order */
    cattr_status (*fill)(pt_pass *p, int64_t s, char *const *slot);
    /* consumes the n_out target-selected output values of state s; called in state order */
    cattr_status (*take)(pt_pass *p, int64_t s, const double *y);
    void *user;
    /* a model of the whole batch: c is the view of the call c0 (perturb_forms.h) */
    const cx_pform *f;
    cx_call *c0;
};

/* Bytes of one element of input i (the compute dtype, or int64). */
static size_t in_esz(const cx_call *c, int i) { return cattr_dtype_size(c->x[i]->dtype); }

/* A model of the whole batch: its n_sel target-selected output values for inputs xs (the call's own shapes). */
static cattr_status whole_values(cattr_explainer *e, cx_call *c0, const cx_pform *f, cattr_tensor *const *xs,
                                 double *vals) {
    cattr_tensor *out = NULL;
    int64_t *tidx = NULL;
    cattr_status st = cx_forward_whole(e, c0, xs, &out);
    bool target = has_target(c0);
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
static cattr_status states_per_pass(cattr_explainer *e, cx_call *c, int64_t n_states, int64_t *out) {
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
static cattr_status pt_computed(pt_pass *p, cx_vsplit *v, int64_t k, int64_t s0, int64_t cnt, const double *vals) {
    cattr_status st = cx_vsplit_put(v, k, vals, cnt * p->n_out);
    for (int64_t j = 0; j < cnt && st == CATTR_OK && v->mode != CX_VSPLIT_PART; j++)
        st = p->take(p, s0 + j, vals + j * p->n_out);
    return st == CATTR_OK ? cx_chunk_done(&p->e->p, s0 + cnt, p->n_states) : st;
}

static cattr_status pt_other(pt_pass *p, cx_vsplit *v, int64_t k, int64_t s0, int64_t cnt, double *vals) {
    if (v->mode != CX_VSPLIT_COMBINE) return CATTR_OK;
    CX_CHECK(cx_vsplit_get(v, k, vals, cnt * p->n_out));
    return pt_computed(p, v, k, s0, cnt, vals);
}

static cattr_status run_states(pt_pass *p) {
    cattr_explainer *e = p->e;
    cx_call *c = p->c;
    bool whole = p->f && p->f->whole;
    if (p->n_states <= 0) return CATTR_OK;
    int64_t per = 1, have = 0;
    if (!whole) CX_CHECK(states_per_pass(e, c, p->n_states, &per));
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
            st = pt_other(p, &v, k, s0, cnt, vals);
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
            for (int i = 0; i < c->n; i++) slot[i] = (char *)xs[i]->data + (size_t)(j * c->x[i]->numel) * in_esz(c, i);
            st = p->fill(p, s0 + j, slot); /* in order even where a part skips the chunk: fills may build on it */
        }
        if (!mine) continue; /* another part's chunk */
        if (st == CATTR_OK && whole) {
            st = whole_values(e, p->c0, p->f, xs, vals);
        } else if (st == CATTR_OK && has_target(c)) { /* only the targets' values come down */
            st = cx_forward_select(e, c, xs, NULL, cnt, CX_TILE, vals, NULL);
        } else {
            if (st == CATTR_OK) st = cx_forward(e, c, xs, NULL, cnt, CX_TILE, &out);
            if (st == CATTR_OK) st = out_values(c, out, cnt, p->n_out, vals);
        }
        cattr_tensor_free(out);
        out = NULL;
        if (st == CATTR_OK) st = pt_computed(p, &v, k, s0, cnt, vals);
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
    for (int i = 0; i < c->n; i++) memcpy(slot[i], c->x[i]->data, (size_t)c->x[i]->numel * in_esz(c, i));
    for (int i = 0; i < c->n; i++) {
        size_t esz = in_esz(c, i);
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
            for (int64_t b = b0; b < b1; b++) copy_el(slot[i], b * per + k, src, (perm ? perm[b] : b) * per + k, esz);
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
                    CX_CHECK(take_perm_draw(c, "fp_batch_permutation", B, f->scratch));
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
#define pt_state cx_pform_state

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
    bool target = has_target(c), whole = pf->whole;
    cattr_dtype odt = f->ref->dt;
    int64_t B = c->B, F = pm->F, per = 1, N = f->ref->n_out, per_row = !whole && B ? N / B : 0;
    int64_t *ord2id = NULL, *buf = NULL;
    cattr_status st = pt_state(e, c, target, whole, sizeof *s, fa_build, fa_release, offsetof(fa_graph, whole),
                               (void **)&s);
    fa_dev *dp = s ? &s->d : NULL;
    if (st == CATTR_OK && !whole) st = states_per_pass(e, c, F > 0 ? F : 1, &per);
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
    return masks_index(pm);
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
    st = masks_load(c, &pf, &pm);
    if (st == CATTR_OK) st = features_first_seen(&pm);
    if (st == CATTR_OK) st = masks_index(&pm);
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
        st = alloc_attr(ref.dt, 1, &lead, c0->x[i], &attr[i]);
        f.aper[i] = example_numel(c0->x[i]);
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
        if (st == CATTR_OK && permute && replaying(c)) st = fp_replay_perms(e, c, &f);
        if (st == CATTR_OK && (c->x_dev[0] || c->attr_dev[0]) && (permute || !has_target(c)))
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
    masks_free(&pm);
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


/* ---- Occlusion -------------------------------------------------------------------------------------------------- */

/* Sliding windows over the per-example shape of one input. */
typedef struct occ_input {
    int nd;
    int64_t dim[CATTR_MAX_DIMS], win[CATTR_MAX_DIMS], stride[CATTR_MAX_DIMS], shift[CATTR_MAX_DIMS];
    int64_t P;     /* windows: prod shift */
    int64_t first; /* feature id of its first window (ids run consecutively over the inputs) */
    int64_t qmod;  /* Captum's window-number offset (the product of the earlier inputs' window counts) mod P */
} occ_input;

typedef struct occ_run {
    occ_input in[CX_MAX_IN];
    pt_ref *ref;
    int64_t G, chunk;          /* windows in all; Captum's perturbations_per_eval */
    double *total[CX_MAX_IN];  /* n_out x per, model-output dtype */
    double *part[CX_MAX_IN];   /* the current chunk's sums */
    unsigned char *hit[CX_MAX_IN];
    int64_t *touched[CX_MAX_IN], n_touched[CX_MAX_IN];
    double *weight[CX_MAX_IN]; /* per element: windows covering it */
    int64_t *box;              /* scratch: element offsets of one window */
    double *diff;
} occ_run;

/* The windows of every input (c: the call itself). A model of the whole batch (f whole) runs on the view of the
 * call, whose example is the whole input: its windows get a leading dim over the input's rows (window and size the
 * rows, stride 1: one position), so that each box covers its elements in every row. */
static cattr_status occ_setup(const cattr_explainer *e, const cx_call *c, const cx_pform *f, occ_run *o) {
    char s1[128], s2[128];
    int64_t first = 0;
    if (c->user && c->user->feature_masks)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "Occlusion takes sliding windows, not feature masks");
    for (int i = c->n; i < CATTR_MAX_INPUTS; i++) { /* one window (and strides) per input, as Captum asserts */
        if (e->p.sliding_window_ndim[i] != 0)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "a sliding window is given for input %d, but the call has %d "
                           "input%s: give one sliding window per input", i, c->n, c->n == 1 ? "" : "s");
        if (e->p.strides_ndim[i] > 0)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "strides are given for input %d, but the call has %d input%s: "
                           "give one int, or strides per input", i, c->n, c->n == 1 ? "" : "s");
    }
    for (int i = 0; i < c->n; i++) {
        occ_input *w = &o->in[i];
        const cattr_tensor *x = c->x[i];
        w->nd = x->ndim - 1;
        memcpy(w->dim, x->shape + 1, (size_t)w->nd * sizeof *w->dim);
        int wn = e->p.sliding_window_ndim[i], sn = e->p.strides_ndim[i];
        if (wn != w->nd)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                           "Occlusion needs a sliding window of %d dims for input %d (example shape %s); %d given",
                           w->nd, i, cx_shape_str(w->nd, w->dim, s1, sizeof s1), wn);
        if (!(sn == 0 || sn == -1 || sn == 1 || sn == w->nd))
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                           "the strides of input %d have %d dims; give one int or %d (one per dim of %s)", i, sn,
                           w->nd, cx_shape_str(w->nd, w->dim, s1, sizeof s1));
        w->P = 1;
        for (int d = 0; d < w->nd; d++) w->win[d] = e->p.sliding_window[i][d]; /* whole, for the messages */
        for (int d = 0; d < w->nd; d++) {
            w->stride[d] = sn == 0 ? 1 : (sn == w->nd ? e->p.strides[i][d] : e->p.strides[i][0]);
            if (w->win[d] < 1 || w->win[d] > w->dim[d])
                return cx_fail(CATTR_ERR_SHAPE, "sliding window %s does not fit input %d (example shape %s)",
                               cx_shape_str(w->nd, w->win, s1, sizeof s1), i, cx_shape_str(w->nd, w->dim, s2, sizeof s2));
            if (w->stride[d] < 1 || (w->stride[d] > w->win[d] && w->dim[d] != w->win[d]))
                return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                               "stride %lld of dim %d of input %d must be between 1 and the window size %lld",
                               (long long)w->stride[d], d + 1, i, (long long)w->win[d]);
            w->shift[d] = (w->dim[d] - w->win[d] + w->stride[d] - 1) / w->stride[d] + 1;
            w->P *= w->shift[d];
            if (w->P > INT32_MAX) return cx_fail(CATTR_ERR_UNSUPPORTED, "input %d has too many windows", i);
        }
        if (f->whole) { /* the leading dim of the view: every row, one position */
            memmove(w->dim + 1, w->dim, (size_t)w->nd * sizeof *w->dim);
            memmove(w->win + 1, w->win, (size_t)w->nd * sizeof *w->win);
            memmove(w->stride + 1, w->stride, (size_t)w->nd * sizeof *w->stride);
            memmove(w->shift + 1, w->shift, (size_t)w->nd * sizeof *w->shift);
            w->dim[0] = w->win[0] = x->shape[0];
            w->stride[0] = w->shift[0] = 1;
            w->nd++;
        }
        w->first = first;
        first += w->P;
        /* Captum numbers input i's windows from the product, not the sum, of the earlier inputs' window counts
         * (the same set of windows, visited in a rotated order when there are more than two inputs) */
        int64_t qm = i == 0 ? 0 : 1 % w->P;
        for (int j = 0; j < i; j++) qm = (qm * (o->in[j].P % w->P)) % w->P;
        w->qmod = qm;
    }
    o->G = first;
    return CATTR_OK;
}

/* Input of window g and the per-example element offsets its box covers. */
static void occ_window(const occ_run *o, int n_in, int64_t g, int *in, int64_t *box, int64_t *n_box) {
    int i = 0;
    while (i + 1 < n_in && g >= o->in[i].first + o->in[i].P) i++;
    const occ_input *w = &o->in[i];
    int64_t n = ((g - w->first - w->qmod) % w->P + w->P) % w->P; /* Python's modulo */
    int64_t lo[CATTR_MAX_DIMS], hi[CATTR_MAX_DIMS], idx[CATTR_MAX_DIMS];
    for (int d = 0; d < w->nd; d++) { /* first non-batch dim fastest */
        lo[d] = (n % w->shift[d]) * w->stride[d];
        hi[d] = lo[d] + w->win[d] < w->dim[d] ? lo[d] + w->win[d] : w->dim[d];
        n /= w->shift[d];
        idx[d] = lo[d];
    }
    *in = i;
    *n_box = 0;
    for (;;) {
        int64_t k = 0;
        for (int d = 0; d < w->nd; d++) k = k * w->dim[d] + idx[d];
        box[(*n_box)++] = k;
        int d = w->nd - 1;
        while (d >= 0 && ++idx[d] == hi[d]) idx[d] = lo[d], d--;
        if (d < 0) break;
    }
}

static cattr_status occ_fill(pt_pass *p, int64_t g, char *const *slot) {
    occ_run *o = p->user;
    const cx_call *c = p->c;
    int i;
    int64_t nb;
    for (int t = 0; t < c->n; t++) memcpy(slot[t], c->x[t]->data, (size_t)c->x[t]->numel * in_esz(c, t));
    occ_window(o, c->n, g, &i, o->box, &nb);
    size_t esz = in_esz(c, i);
    int64_t per = example_numel(c->x[i]);
    for (int64_t t = 0; t < nb; t++)
        for (int64_t b = 0; b < c->B; b++) copy_el(slot[i], b * per + o->box[t], c->base[i]->data, b * per + o->box[t], esz);
    return CATTR_OK;
}

/* Adds y0 - y to the chunk sums of the window's elements; at a chunk's end the sums go into the totals
 * (Captum: total += (diff * masks).sum(0) per chunk of perturbations_per_eval windows, summed in window order). */
static cattr_status occ_take(pt_pass *p, int64_t g, const double *y) {
    occ_run *o = p->user;
    const cx_call *c = p->c;
    const pt_ref *ref = o->ref;
    cattr_dtype dt = ref->dt;
    int i;
    int64_t nb, n_out = ref->n_out;
    for (int64_t r = 0; r < n_out; r++) o->diff[r] = cx_rnd(dt, ref->y[r] - y[r]);
    occ_window(o, c->n, g, &i, o->box, &nb);
    int64_t per = example_numel(c->x[i]);
    for (int64_t t = 0; t < nb; t++) {
        int64_t k = o->box[t];
        bool fresh = !o->hit[i][k];
        if (fresh) {
            o->hit[i][k] = 1;
            o->touched[i][o->n_touched[i]++] = k;
        }
        double *part = o->part[i];
        for (int64_t r = 0; r < n_out; r++)
            part[r * per + k] = fresh ? o->diff[r] : cx_rnd(dt, part[r * per + k] + o->diff[r]);
    }
    if ((g + 1) % o->chunk != 0 && g + 1 != o->G) return CATTR_OK;
    for (int t = 0; t < c->n; t++) {
        int64_t pt = example_numel(c->x[t]);
        for (int64_t u = 0; u < o->n_touched[t]; u++) {
            int64_t k = o->touched[t][u];
            for (int64_t r = 0; r < n_out; r++)
                o->total[t][r * pt + k] = cx_rnd(dt, o->total[t][r * pt + k] + o->part[t][r * pt + k]);
            o->hit[t][k] = 0;
        }
        o->n_touched[t] = 0;
    }
    return CATTR_OK;
}

/* ---- Occlusion's windows on the backend ------------------------------------------------------------------------
 * Window g of input j replaces a box of input j by the baseline. A chunk of windows (R = cnt * B rows) runs as one
 * graph whose prefix makes every input's rows from the uploaded inputs, baselines and per-element coordinate maps:
 * the box is the elements whose coordinate along each dim d lies in [lo_d, hi_d), so starting from the baseline,
 * each of the 2 * nd conditions keeps it only where it holds:
 *   t = base_i (rows r mod B); per dim d: t = WhereId[<=](x_i, t, coord_{i,d}, hi_d - 1), then
 *   t = WhereId[<=](x_i, t, -coord_{i,d}, -lo_d) (x_i and the maps read through row maps)
 * and a row whose window is in another input gets hi_d - 1 = -1 (nothing kept). The thresholds of a chunk's rows go
 * up per chunk; the target outputs (or every output value) come back and are summed over the windows on the host in
 * Captum's order, as on the host path. */
typedef struct occ_graph {
    cx_derived core; /* graph, call shape, constants, plans */
    bool whole;      /* built for a model of the whole batch (perturb_forms.h) */
    int n_in, y;
    cx_call_dev cd; /* inputs, baselines, additional inputs, rows, targets, outputs */
    cx_dbuf map[CX_MAX_IN], thr[CX_MAX_IN], zero;
} occ_graph;

/* Windows of input i span the dims of its example shape. */
#define OCC_ND(s, i) ((s)->core.rank[i] - 1)

static void occ_release(cattr_explainer *e) {
    occ_graph *s = e->method_state;
    if (!s) return;
    cx_call_dev_free(&s->cd);
    for (int i = 0; i < CX_MAX_IN; i++) {
        cx_dbuf_free(&s->map[i]);
        cx_dbuf_free(&s->thr[i]);
    }
    cx_dbuf_free(&s->zero);
    cx_derived_free(&s->core);
    free(s);
    e->method_state = NULL;
}

/* Graph inputs per input i: x, base, the coordinate maps [2 * nd, ...] (coord_d, then -coord_d, each of the example
 * shape, stacked: row 2d + k), the thresholds [2 * nd, R] (row 2d: hi_d - 1, row 2d + 1: -lo_d; read as Slices of
 * one input). */
static cattr_status occ_build(cattr_explainer *e, void *state) {
    occ_graph *s = state;
    bool whole = s->whole = cx_pform_building_whole;
    const cg_graph *m = e->m->g;
    cg_graph *g = NULL;
    int *map = NULL;
    CX_CHECK(cx_derive_new(m, &g, &map));
    int bad = 0, in_map[2 * CX_MAX_IN], k = 0;
    int i_x[CX_MAX_IN], i_base[CX_MAX_IN], i_map[CX_MAX_IN], i_thr[CX_MAX_IN], i_add[CX_MAX_IN], i_rows, i_zero,
        i_tidx = -1;
    char nm[48];
#define OCC_IN(var)                                                                                                    \
    do {                                                                                                               \
        snprintf(nm, sizeof nm, "__occ_in%d", k++);                                                                    \
        bad |= ((var) = cg_add_input(g, nm)) < 0;                                                                      \
    } while (0)
    for (int i = 0; i < s->core.n; i++) {
        OCC_IN(i_x[i]);
        OCC_IN(i_base[i]);
        OCC_IN(i_map[i]);
        OCC_IN(i_thr[i]);
    }
    for (int j = 0; j < s->core.n_add; j++) OCC_IN(i_add[j]);
    OCC_IN(i_rows);
    OCC_IN(i_zero);
    if (s->core.target) OCC_IN(i_tidx);
#undef OCC_IN
    s->n_in = k;
    cg_attrs a0 = cg_attrs_default(), le = cg_attrs_default();
    le.index = 1;
    for (int i = 0; i < s->core.n && !bad; i++) {
        /* the thresholds' rows and the maps' rows, as Gathers of one row each */
        int t = -1;
        for (int c = 0; c < 2 * OCC_ND(s, i) && !bad; c++) {
            int64_t ci = c;
            cattr_tensor *ct = cx_tensor_alloc(CATTR_INT64, 0, NULL);
            int cv = ct ? cg_add_const(g, "__occ_cond", ct, true) : -1;
            if (ct && cv < 0) cattr_tensor_free(ct);
            if (cv < 0) {
                bad = 1;
                break;
            }
            *(int64_t *)ct->data = ci;
            int th = cg_emit(g, CG_GATHER, "__occ_threshold", (int[]){i_thr[i], cv}, 2, &a0);
            cattr_tensor *c1 = cx_tensor_alloc(CATTR_INT64, 1, (int64_t[]){1});
            int cv1 = c1 ? cg_add_const(g, "__occ_cond_row", c1, true) : -1;
            if (c1 && cv1 < 0) cattr_tensor_free(c1);
            if (cv1 < 0 || th < 0) {
                bad = 1;
                break;
            }
            *(int64_t *)c1->data = ci;
            int mp = cg_emit(g, CG_GATHER, "__occ_coordinates", (int[]){i_map[i], cv1}, 2, &a0); /* [1, ...] */
            int prev = t < 0 ? i_base[i] : t;
            int brow = t < 0 ? i_rows : -1;
            t = mp < 0 ? -1
                       : cg_emit(g, CG_WHERE_ID, "__occ_window",
                                 (int[]){i_x[i], prev, mp, th, i_rows, brow, i_zero}, 7, &le);
            bad |= t < 0;
        }
        in_map[i] = cx_pform_model_input(g, whole, t);
        bad |= in_map[i] < 0;
    }
    for (int j = 0; j < s->core.n_add && !bad; j++)
        bad |= (in_map[s->core.n + j] = cx_pform_model_input(
                    g, whole, cg_emit(g, CG_GATHER, "__occ_at", (int[]){i_add[j], i_rows}, 2, &a0))) < 0;
    cattr_status st = bad ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : CATTR_OK;
    if (st == CATTR_OK) st = cx_graph_append_model(g, m, in_map, map);
    if (st == CATTR_OK) {
        cg_attrs r3 = cg_attrs_default(), r1 = cg_attrs_default();
        r3.n_ints = 3;
        r3.ints[0] = 0, r3.ints[1] = -1, r3.ints[2] = 1;
        r1.n_ints = 1;
        r1.ints[0] = -1;
        int ys = map[cx_model_output(e->m)];
        if (s->core.target) {
            int y3 = cg_emit(g, CG_RESHAPE, "__occ_out_rows", (int[]){ys}, 1, &r3);
            ys = y3 < 0 ? -1 : cg_emit(g, CG_SEQ_PICK, "__occ_target", (int[]){y3, i_tidx}, 2, NULL);
        }
        s->y = ys < 0 ? -1 : cg_emit(g, CG_RESHAPE, "__occ_y", (int[]){ys}, 1, &r1);
        if (s->y < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    free(map);
    if (st != CATTR_OK) {
        cg_free(g);
        return st;
    }
    s->core.g = g;
    return CATTR_OK;
}

/* run_states for Occlusion on the backend (see above). */
static cattr_status occ_run_states(pt_pass *p, occ_run *o) {
    cattr_explainer *e = p->e;
    cx_call *c = p->c;
    if (p->n_states <= 0) return CATTR_OK;
    bool target = has_target(c), whole = p->f->whole;
    occ_graph *s = NULL;
    CX_CHECK(pt_state(e, c, target, whole, sizeof *s, occ_build, occ_release, offsetof(occ_graph, whole), (void **)&s));
    int64_t per = 1, B = c->B;
    cattr_status st = whole ? CATTR_OK : states_per_pass(e, c, p->n_states, &per);
    int64_t rmax = per * B, nbuf = 2 * CATTR_MAX_DIMS * rmax;
    for (int i = 0; i < c->n; i++)
        if (2 * OCC_ND(s, i) * example_numel(c->x[i]) > nbuf) nbuf = 2 * OCC_ND(s, i) * example_numel(c->x[i]);
    if (whole && p->f->ond && p->f->osh[0] > nbuf) nbuf = p->f->osh[0];
    int64_t *buf = st == CATTR_OK ? malloc((size_t)(nbuf + 1) * sizeof *buf) : NULL;
    double *vals = st == CATTR_OK ? malloc((size_t)(per * p->n_out + 1) * sizeof *vals) : NULL;
    if (st == CATTR_OK && (!buf || !vals)) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) st = cx_call_dev_fit(e, c, &s->cd, rmax, target && !whole, per * p->n_out);
    if (st == CATTR_OK && target && whole) { /* the target of each row of the output */
        st = cx_pform_target_rows(p->f, p->c0, buf);
        if (st == CATTR_OK) st = cx_dbuf_fit(e->be, &s->cd.tidx, (size_t)p->f->osh[0] * sizeof *buf, buf, false);
    }
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        int64_t pe = example_numel(c->x[i]), nd = OCC_ND(s, i);
        for (int64_t k = 0; k < pe && st == CATTR_OK; k++) { /* coordinates of every element, first dim slowest */
            int64_t rem = k;
            for (int d = (int)nd - 1; d >= 0; d--) {
                int64_t cd = rem % o->in[i].dim[d];
                rem /= o->in[i].dim[d];
                buf[(2 * d) * pe + k] = cd;
                buf[(2 * d + 1) * pe + k] = -cd;
            }
        }
        if (st == CATTR_OK) st = cx_dbuf_fit(e->be, &s->map[i], (size_t)(2 * nd * pe) * sizeof *buf, buf, false);
        if (st == CATTR_OK) st = cx_dbuf_fit(e->be, &s->thr[i], (size_t)(2 * nd * rmax) * sizeof *buf, NULL, false);
    }
    if (st == CATTR_OK) st = cx_dbuf_fit(e->be, &s->zero, (size_t)rmax * sizeof *buf, NULL, true);
    cx_vsplit v;
    if (st == CATTR_OK) st = cx_vsplit_begin(e, c, p->n_states, per, p->n_out, &v);
    else memset(&v, 0, sizeof v);
    for (int64_t s0 = 0, q = 0; s0 < p->n_states && st == CATTR_OK; s0 += per, q++) {
        int64_t cnt = p->n_states - s0 < per ? p->n_states - s0 : per, R = cnt * B;
        if (!cx_vsplit_mine(&v, q)) { /* another part's chunk; combining: its values */
            st = pt_other(p, &v, q, s0, cnt, vals);
            continue;
        }
        for (int i = 0; i < c->n && st == CATTR_OK; i++) { /* the chunk's thresholds for input i */
            const occ_input *w = &o->in[i];
            int64_t nd = OCC_ND(s, i);
            for (int64_t j = 0; j < cnt; j++) {
                int64_t g = s0 + j, lo[CATTR_MAX_DIMS] = {0}, hi[CATTR_MAX_DIMS] = {0};
                bool mine = g >= w->first && g < w->first + w->P;
                if (mine) { /* as occ_window: first dim fastest */
                    int64_t n = ((g - w->first - w->qmod) % w->P + w->P) % w->P;
                    for (int d = 0; d < nd; d++) {
                        lo[d] = (n % w->shift[d]) * w->stride[d];
                        hi[d] = lo[d] + w->win[d] < w->dim[d] ? lo[d] + w->win[d] : w->dim[d];
                        n /= w->shift[d];
                    }
                }
                for (int d = 0; d < nd; d++)
                    for (int64_t b = 0; b < B; b++) {
                        buf[(2 * d) * R + j * B + b] = mine ? hi[d] - 1 : -1;
                        buf[(2 * d + 1) * R + j * B + b] = mine ? -lo[d] : 0;
                    }
            }
            st = cx_copy_in(e->be, s->thr[i].p, buf, (size_t)(2 * nd * R) * sizeof *buf);
        }
        int nd[4 * CX_MAX_IN + CX_MAX_IN + 3];
        int64_t sh[4 * CX_MAX_IN + CX_MAX_IN + 3][CATTR_MAX_DIMS];
        cattr_dtype dt[4 * CX_MAX_IN + CX_MAX_IN + 3];
        void *in[4 * CX_MAX_IN + CX_MAX_IN + 3];
        for (int k = 0; k < s->n_in; k++) {
            nd[k] = 1;
            sh[k][0] = R;
            dt[k] = CATTR_INT64;
        }
        for (int i = 0; i < c->n; i++) {
            const cattr_tensor *x = c->x[i];
            int kx = 4 * i, kb = 4 * i + 1, km = 4 * i + 2, kt = 4 * i + 3; /* graph-input positions (occ_build) */
            nd[kx] = nd[kb] = nd[km] = x->ndim;
            memcpy(sh[kx], x->shape, sizeof sh[0]);
            memcpy(sh[kb], x->shape, sizeof sh[0]);
            memcpy(sh[km], x->shape, sizeof sh[0]);
            sh[km][0] = 2 * OCC_ND(s, i);
            dt[kx] = dt[kb] = x->dtype;
            nd[kt] = 2;
            sh[kt][0] = 2 * OCC_ND(s, i);
            sh[kt][1] = R;
            in[kx] = s->cd.x[i].p;
            in[kb] = s->cd.base[i].p;
            in[km] = s->map[i].p;
            in[kt] = s->thr[i].p;
        }
        for (int j = 0; j < c->n_add; j++) {
            int ka = 4 * c->n + j;
            nd[ka] = c->add[j]->ndim;
            memcpy(sh[ka], c->add[j]->shape, sizeof sh[0]);
            dt[ka] = c->add[j]->dtype;
            in[ka] = s->cd.add[j].p;
        }
        int kr = 4 * c->n + c->n_add;
        in[kr] = s->cd.rows.p;
        in[kr + 1] = s->zero.p;
        if (target) in[kr + 2] = s->cd.tidx.p;
        if (target && whole) sh[kr + 2][0] = p->f->osh[0];
        if (st == CATTR_OK)
            st = cx_derived_values(e, &s->core, c, nd, (const int64_t(*)[CATTR_MAX_DIMS])sh, dt, in, s->y, &s->cd,
                                   cnt * p->n_out, vals);
        if (st == CATTR_OK) st = pt_computed(p, &v, q, s0, cnt, vals);
    }
    st = cx_vsplit_end(&v, st);
    free(buf);
    free(vals);
    return st;
}

/* The unperturbed outputs of inputs xs (the call's own shapes: its inputs, or its baselines) as ref: target-selected
 * (or every value); a model of the whole batch: its n_sel values, shape [O0] with a target, else the output's. */
static cattr_status pt_reference(cattr_explainer *e, cx_call *c0, const cx_pform *f, cattr_tensor *const *xs,
                                 pt_ref *ref) {
    if (!f->whole) return reference_output(e, c0, xs, ref);
    memset(ref, 0, sizeof *ref);
    ref->n_out = f->n_sel;
    ref->dt = f->odt;
    if (has_target(c0)) {
        ref->ndim = 1;
        ref->shape[0] = f->osh[0];
    } else {
        ref->ndim = f->ond;
        memcpy(ref->shape, f->osh, sizeof ref->shape);
    }
    ref->y = malloc((size_t)(ref->n_out + 1) * sizeof *ref->y);
    if (!ref->y) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    return whole_values(e, c0, f, xs, ref->y);
}

static cattr_status occlusion(cattr_explainer *e, cx_call *c0, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    occ_run o;
    pt_ref ref;
    cx_pform pf;
    memset(&o, 0, sizeof o);
    memset(&ref, 0, sizeof ref);
    int64_t max_box = 1;
    cattr_status st = cx_pform_get(e, c0, true, false, &pf);
    if (st != CATTR_OK) return st;
    cx_call *c = pf.whole ? &pf.v : c0; /* a model of the whole batch: its view (perturb_forms.h) */
    st = occ_setup(e, c0, &pf, &o);
    if (st == CATTR_OK) st = pt_reference(e, c0, &pf, c0->x, &ref);
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        int64_t per = example_numel(c->x[i]), nb = 1;
        for (int d = 0; d < o.in[i].nd; d++) nb *= o.in[i].win[d];
        if (nb > max_box) max_box = nb;
        o.total[i] = calloc((size_t)(ref.n_out * per) + 1, sizeof *o.total[i]);
        o.part[i] = calloc((size_t)(ref.n_out * per) + 1, sizeof *o.part[i]);
        o.hit[i] = calloc((size_t)per + 1, 1);
        o.touched[i] = malloc((size_t)(per + 1) * sizeof *o.touched[i]);
        o.weight[i] = calloc((size_t)per + 1, sizeof *o.weight[i]);
        if (!o.total[i] || !o.part[i] || !o.hit[i] || !o.touched[i] || !o.weight[i])
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK) {
        o.ref = &ref;
        o.chunk = e->p.perturbations_per_eval > 0 && !pf.whole ? e->p.perturbations_per_eval : 1;
        o.box = malloc((size_t)max_box * sizeof *o.box);
        o.diff = malloc((size_t)(ref.n_out + 1) * sizeof *o.diff);
        if (!o.box || !o.diff) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    for (int64_t g = 0; g < o.G && st == CATTR_OK; g++) { /* window counts (float32 in Captum, exact) */
        int i;
        int64_t nb;
        occ_window(&o, c->n, g, &i, o.box, &nb);
        for (int64_t t = 0; t < nb; t++) o.weight[i][o.box[t]] += 1;
    }
    pt_pass p = {e, c, o.G, ref.n_out, occ_fill, occ_take, &o, &pf, c0};
    bool device = c->B > 0 && ref.n_out > 0;
    for (int i = 0; i < c->n; i++) device &= o.in[i].nd > 0; /* windows over at least one dim */
    if (st == CATTR_OK && device) st = occ_run_states(&p, &o);
    else if (st == CATTR_OK && ref.n_out > 0 && (st = cx_inputs_to_host(e, c)) == CATTR_OK) st = run_states(&p); /* the host route */
    int64_t lead = ref.n_out;
    for (int i = 0; i < c0->n && st == CATTR_OK; i++) { /* total.float() / weight */
        st = alloc_attr(c->dt, 1, &lead, c0->x[i], &attr[i]);
        /* a model of the whole batch: the elements of the first row of the view (every row's are the same) */
        int64_t per = example_numel(c0->x[i]), vper = example_numel(c->x[i]);
        for (int64_t r = 0; r < ref.n_out && st == CATTR_OK; r++)
            for (int64_t k = 0; k < per; k++) {
                float tot = (float)o.total[i][r * vper + k];
                cx_tensor_set(attr[i], r * per + k, (double)(float)((double)tot / o.weight[i][k]));
            }
    }
    for (int i = 0; i < CX_MAX_IN; i++) {
        free(o.total[i]);
        free(o.part[i]);
        free(o.hit[i]);
        free(o.touched[i]);
        free(o.weight[i]);
    }
    free(o.box);
    free(o.diff);
    free(ref.y);
    cx_pform_free(&pf);
    return st;
}

/* The parameters of the perturbation methods (perturbations_per_eval, Occlusion's windows and strides,
 * ShapleyValueSampling's n_samples) are checked by cx_params_check (methods.c); the windows against the inputs' shapes
 * by each call (occ_setup). */

/* ---- ShapleyValueSampling and ShapleyValues --------------------------------------------------------------------- */

typedef struct sv_run {
    pt_masks *pm;
    pt_ref *ref;
    int64_t M;
    int64_t *perms;         /* SVS: n_samples x M feature orders */
    char *cur[CX_MAX_IN];   /* SVS: the state being built (B rows per input) */
    double *prev;           /* SVS: outputs of the previous state */
    double *coal;           /* ShapleyValues: outputs per coalition, 2^M x n_out */
    double *acc;            /* n_out x M float32 totals */
} sv_run;

/* Puts the inputs' values of feature f into the B-row state dst (the feature is "added"). */
static void add_feature(const pt_masks *pm, const cx_call *c, int64_t f, char *const *dst) {
    for (int i = 0; i < c->n; i++) {
        if (!(pm->holds[f] & (1u << i))) continue;
        size_t esz = in_esz(c, i);
        int64_t per = pm->per[i];
        for (int64_t t = pm->start[i][f]; t < pm->start[i][f + 1]; t++) {
            int64_t m = pm->pos[i][t] / per, k = pm->pos[i][t] % per;
            int64_t b0 = pm->rows[i] == 1 ? 0 : m, b1 = pm->rows[i] == 1 ? c->B : m + 1;
            for (int64_t b = b0; b < b1; b++) copy_el(dst[i], b * per + k, c->x[i]->data, b * per + k, esz);
        }
    }
}

/* total[r, f] += y_after - y_before in float32 (Captum's float32 totals; the difference in the output dtype). */
static void sv_accumulate(sv_run *s, int64_t f, const double *after, const double *before) {
    const pt_ref *ref = s->ref;
    for (int64_t r = 0; r < ref->n_out; r++) {
        double d = cx_rnd(ref->dt, after[r] - before[r]);
        double *a = &s->acc[r * s->M + f];
        *a = (double)(float)(*a + d);
    }
}

/* State t*M + j of ShapleyValueSampling: the baselines with the first j+1 features of order t added. */
static cattr_status svs_fill(pt_pass *p, int64_t s, char *const *slot) {
    sv_run *sv = p->user;
    const cx_call *c = p->c;
    if (s % sv->M == 0)
        for (int i = 0; i < c->n; i++) memcpy(sv->cur[i], c->base[i]->data, (size_t)c->x[i]->numel * in_esz(c, i));
    add_feature(sv->pm, c, sv->perms[s], sv->cur);
    for (int i = 0; i < c->n; i++) memcpy(slot[i], sv->cur[i], (size_t)c->x[i]->numel * in_esz(c, i));
    return CATTR_OK;
}

static cattr_status svs_take(pt_pass *p, int64_t s, const double *y) {
    sv_run *sv = p->user;
    sv_accumulate(sv, sv->perms[s], y, s % sv->M == 0 ? sv->ref->y : sv->prev);
    memcpy(sv->prev, y, (size_t)sv->ref->n_out * sizeof *y);
    return CATTR_OK;
}

/* State S-1 of ShapleyValues: the baselines with the features of coalition S (a bit set, S >= 1) added. */
static cattr_status sv_fill(pt_pass *p, int64_t s, char *const *slot) {
    sv_run *sv = p->user;
    const cx_call *c = p->c;
    int64_t S = s + 1;
    for (int i = 0; i < c->n; i++) memcpy(slot[i], c->base[i]->data, (size_t)c->x[i]->numel * in_esz(c, i));
    for (int64_t f = 0; f < sv->M; f++)
        if (S & ((int64_t)1 << f)) add_feature(sv->pm, c, f, slot);
    return CATTR_OK;
}

static cattr_status sv_take(pt_pass *p, int64_t s, const double *y) {
    sv_run *sv = p->user;
    memcpy(sv->coal + (s + 1) * sv->ref->n_out, y, (size_t)sv->ref->n_out * sizeof *y);
    return CATTR_OK;
}

/* ---- the Shapley methods' states on the backend ---------------------------------------------------------------
 * A state keeps the inputs' values on the features added so far and the baselines elsewhere. A chunk of states
 * (R = cnt * B rows) runs as one graph:
 *   inputs   x_i, base_i [B, ...]; rk_i int64 [T * I, ...] (row t * I + j: the rank of each element's feature in table
 *            row t, for id row j of I: one list of ids for every example, I = 1, or per example, I = B); the
 *            additional inputs; rkrow, thr [R] (each row's rank row and how many ranks are added: an element is added
 *            when its rank <= thr); rows [R] (r mod B); with a target tidx [R]
 *   prefix   in_i = WhereId[<=](base_i, x_i, rk_i, thr; rows, rows, rkrow): read in place
 *   model    on in_i and Gather(a_j, rows); suffix: the target output per row (SeqPick), or every output value
 * The rank rows are made on the backend once per call from a small table, tab int64 [T, M + 1] (per table row, the
 * rank of "no feature" (never added) then of each feature), and the feature ids, ids_i int64 [I, ...] (each element's
 * feature + 1, 0 for none): rk_i = ReshapeLike(SeqPick(Reshape(Gather(tab, tsel), [T I, M + 1, 1]),
 * Reshape(d_i, [T I, -1])), d_i) with d_i = Gather(ids_i, isel) (sv_table_build).
 * ShapleyValueSampling's table holds the rank of each feature in each order (state t * M + j: order t, thr j);
 * ShapleyValues' holds 0 for a coalition's features and 1 for the others (thr 0). The inputs, the ids and the table
 * go up once per call (a call whose rank rows would exceed SV_TABLE_BYTES stays on the host path); per chunk the
 * rows' rank rows and thresholds go up and the outputs come back, to be combined in Captum's order as on the host
 * path. */
typedef struct sv_graph {
    cx_derived core; /* graph, call shape, constants, plans */
    bool whole;      /* built for a model of the whole batch (perturb_forms.h) */
    int y;
    cx_call_dev cd; /* inputs, baselines, additional inputs, rows, targets, outputs */
    cx_dbuf rk[CX_MAX_IN], rkrow, thr;
    cx_derived tg; /* the rank rows' graph (sv_table_build) */
    int tg_outs[CX_MAX_IN];
} sv_graph;

static void sv_release(cattr_explainer *e) {
    sv_graph *s = e->method_state;
    if (!s) return;
    cx_call_dev_free(&s->cd);
    for (int i = 0; i < CX_MAX_IN; i++) cx_dbuf_free(&s->rk[i]);
    cx_dbuf_free(&s->rkrow);
    cx_dbuf_free(&s->thr);
    cx_derived_free(&s->tg);
    cx_derived_free(&s->core);
    free(s);
    e->method_state = NULL;
}

#define SG_X(i) (i)
#define SG_BASE(i) (s->core.n + (i))
#define SG_RK(i) (2 * s->core.n + (i))
#define SG_ADD(j) (3 * s->core.n + (j))
#define SG_TROW (3 * s->core.n + s->core.n_add)
#define SG_THR (SG_TROW + 1)
#define SG_ROWS (SG_TROW + 2)
#define SG_TIDX (SG_TROW + 3)
#define SG_N_IN (SG_TROW + 3 + (s->core.target ? 1 : 0))
#define SG_MAX_IN (4 * CX_MAX_IN + 4)
#define SV_TABLE_BYTES ((size_t)256 << 20) /* rank tables larger than this keep the Shapley states on the host */

static cattr_status sv_build(cattr_explainer *e, void *state) {
    sv_graph *s = state;
    bool whole = s->whole = cx_pform_building_whole;
    const cg_graph *m = e->m->g;
    cg_graph *g = NULL;
    int *map = NULL;
    CX_CHECK(cx_derive_new(m, &g, &map));
    int v[SG_MAX_IN], in_map[2 * CX_MAX_IN], bad = 0;
    for (int k = 0; k < SG_N_IN; k++) {
        char nm[48];
        snprintf(nm, sizeof nm, "__sv_in%d", k);
        bad |= (v[k] = cg_add_input(g, nm)) < 0;
    }
    cg_attrs a0 = cg_attrs_default(), le = cg_attrs_default();
    le.index = 1;
    for (int i = 0; i < s->core.n && !bad; i++) {
        in_map[i] = cg_emit(g, CG_WHERE_ID, "__sv_state",
                            (int[]){v[SG_BASE(i)], v[SG_X(i)], v[SG_RK(i)], v[SG_THR], v[SG_ROWS], v[SG_ROWS],
                                    v[SG_TROW]},
                            7, &le);
        in_map[i] = cx_pform_model_input(g, whole, in_map[i]);
        bad |= in_map[i] < 0;
    }
    for (int j = 0; j < s->core.n_add && !bad; j++)
        bad |= (in_map[s->core.n + j] = cx_pform_model_input(
                    g, whole, cg_emit(g, CG_GATHER, "__sv_at", (int[]){v[SG_ADD(j)], v[SG_ROWS]}, 2, &a0))) < 0;
    cattr_status st = bad ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : CATTR_OK;
    if (st == CATTR_OK) st = cx_graph_append_model(g, m, in_map, map);
    if (st == CATTR_OK) {
        cg_attrs r3 = cg_attrs_default(), r1 = cg_attrs_default();
        r3.n_ints = 3;
        r3.ints[0] = 0, r3.ints[1] = -1, r3.ints[2] = 1;
        r1.n_ints = 1;
        r1.ints[0] = -1;
        int out = map[cx_model_output(e->m)], ys = out;
        if (s->core.target) {
            int y3 = cg_emit(g, CG_RESHAPE, "__sv_out_rows", (int[]){out}, 1, &r3);
            ys = y3 < 0 ? -1 : cg_emit(g, CG_SEQ_PICK, "__sv_target", (int[]){y3, v[SG_TIDX]}, 2, NULL);
        }
        s->y = ys < 0 ? -1 : cg_emit(g, CG_RESHAPE, "__sv_y", (int[]){ys}, 1, &r1);
        if (s->y < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    free(map);
    if (st != CATTR_OK) {
        cg_free(g);
        return st;
    }
    s->core.g = g;
    return CATTR_OK;
}

/* Whether the states can run on the backend: rank rows for T table rows within SV_TABLE_BYTES. */
static bool sv_on_device_ok(const cx_call *c, const pt_masks *pm, int64_t T) {
    size_t bytes = 0;
    bool shared = true;
    for (int i = 0; i < c->n; i++) shared &= pm->rows[i] == 1;
    for (int i = 0; i < c->n; i++) bytes += (size_t)(T * (shared ? 1 : c->B) * pm->per[i]) * sizeof(int64_t);
    return c->B > 0 && bytes <= SV_TABLE_BYTES;
}

/* run_states for the Shapley methods on the backend: table tab [T, M + 1] (see above); state s of p reads table row
 * trow_of(s) with threshold thr_of(s); the outputs go to p->take in state order. */
/* The rank rows of every input on the backend, s->rk[i] [T * I, ...] (see above), from table tab [T, M + 1] and the
 * feature ids of I = id_rows rows, in one run of the table graph (the ids, the table and the row selections go up). */
static cattr_status sv_table_build(cattr_explainer *e, sv_graph *s, const cx_call *c, const pt_masks *pm,
                                   const int64_t *tab, int64_t T, int64_t M, int64_t id_rows) {
    int n = c->n;
    cx_derived *d = &s->tg;
    if (!d->g || d->n != n) {
        cx_derived_free(d);
        cg_graph *g = cg_new();
        if (!g) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        d->g = g;
        int ids[CX_MAX_IN], bad = 0;
        for (int i = 0; i < n; i++) bad |= (ids[i] = cg_add_input(g, "__sv_ids")) < 0;
        int tb = cg_add_input(g, "__sv_table"), tsel = cg_add_input(g, "__sv_table_row"),
            isel = cg_add_input(g, "__sv_ids_row");
        cg_attrs a0 = cg_attrs_default(), r3 = cg_attrs_default(), r2 = cg_attrs_default();
        r3.n_ints = 3;
        r3.ints[0] = 0, r3.ints[1] = -1, r3.ints[2] = 1;
        r2.n_ints = 2;
        r2.ints[0] = 0, r2.ints[1] = -1;
        int tr = bad || tb < 0 || tsel < 0 || isel < 0 ? -1
                                                        : cg_emit(g, CG_GATHER, "__sv_table_rows", (int[]){tb, tsel}, 2, &a0);
        int tr3 = tr < 0 ? -1 : cg_emit(g, CG_RESHAPE, "__sv_table_3d", (int[]){tr}, 1, &r3);
        bad |= tr3 < 0;
        for (int i = 0; i < n && !bad; i++) {
            int di = cg_emit(g, CG_GATHER, "__sv_ids_of_rows", (int[]){ids[i], isel}, 2, &a0);
            int df = di < 0 ? -1 : cg_emit(g, CG_RESHAPE, "__sv_ids_flat", (int[]){di}, 1, &r2);
            int pk = df < 0 ? -1 : cg_emit(g, CG_SEQ_PICK, "__sv_rank_of_elements", (int[]){tr3, df}, 2, NULL);
            s->tg_outs[i] = pk < 0 ? -1 : cg_emit(g, CG_RESHAPE_LIKE, "__sv_ranks", (int[]){pk, di}, 2, NULL);
            bad |= s->tg_outs[i] < 0;
        }
        if (bad) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        d->n = n;
        CX_CHECK(cx_consts_new(e->be, c->dt, &d->consts));
    }
    int64_t TR = T * id_rows, nid = 2 * TR;
    for (int i = 0; i < n; i++) nid += id_rows * pm->per[i];
    int64_t *buf = malloc((size_t)(nid + 1) * sizeof *buf), *at = buf;
    if (!buf) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    int nd[CX_MAX_IN + 3];
    int64_t sh[CX_MAX_IN + 3][CATTR_MAX_DIMS];
    cattr_dtype dt[CX_MAX_IN + 3];
    const void *host[CX_MAX_IN + 3];
    void *out[CX_MAX_IN];
    cattr_status st = CATTR_OK;
    for (int i = 0; i < n && st == CATTR_OK; i++) { /* each element's column in the table: its feature + 1 */
        int64_t per_i = pm->per[i];
        for (int64_t b = 0; b < id_rows; b++)
            for (int64_t k = 0; k < per_i; k++) {
                int64_t f = pm->ids[i][(pm->rows[i] == 1 ? 0 : b) * per_i + k];
                at[b * per_i + k] = f >= 0 && f < M ? f + 1 : 0;
            }
        nd[i] = c->x[i]->ndim;
        memcpy(sh[i], c->x[i]->shape, sizeof sh[i]);
        sh[i][0] = id_rows;
        dt[i] = CATTR_INT64;
        host[i] = at;
        at += id_rows * per_i;
        st = cx_dbuf_fit(e->be, &s->rk[i], (size_t)(TR * per_i) * sizeof *buf, NULL, false);
        out[i] = s->rk[i].p;
    }
    for (int64_t r = 0; r < TR; r++) at[r] = r / id_rows, at[TR + r] = r % id_rows; /* row t * I + j */
    nd[n] = 2, sh[n][0] = T, sh[n][1] = M + 1, dt[n] = CATTR_INT64, host[n] = tab;
    nd[n + 1] = nd[n + 2] = 1, sh[n + 1][0] = sh[n + 2][0] = TR, dt[n + 1] = dt[n + 2] = CATTR_INT64;
    host[n + 1] = at, host[n + 2] = at + TR;
    cx_plan *pl = NULL;
    if (st == CATTR_OK)
        st = cx_plan_cache_get(&d->pc, d->g, d->consts, e->p.executor == CATTR_EXEC_EAGER, nd,
                               (const int64_t(*)[CATTR_MAX_DIMS])sh, dt, s->tg_outs, n, &pl);
    if (st == CATTR_OK) st = cx_run_plan_dev(e, pl, host, NULL, NULL, out);
    free(buf);
    return st;
}

static cattr_status sv_run_states(pt_pass *p, const pt_masks *pm, const int64_t *tab, int64_t T, int64_t M,
                                  void (*row_of)(const sv_run *sv, int64_t s, int64_t *trow, int64_t *thr)) {
    cattr_explainer *e = p->e;
    cx_call *c = p->c;
    if (p->n_states <= 0) return CATTR_OK;
    bool target = has_target(c), whole = p->f->whole;
    sv_graph *s = NULL;
    CX_CHECK(pt_state(e, c, target, whole, sizeof *s, sv_build, sv_release, offsetof(sv_graph, whole), (void **)&s));
    int64_t per = 1, B = c->B;
    cattr_status st = whole ? CATTR_OK : states_per_pass(e, c, p->n_states, &per);
    bool shared = true; /* one id list for every example, or one per example (the shared lists repeated) */
    for (int i = 0; i < c->n; i++) shared &= pm->rows[i] == 1;
    int64_t rmax = per * B, nbuf = 2 * rmax, id_rows = shared ? 1 : B;
    if (whole && p->f->ond && p->f->osh[0] > nbuf) nbuf = p->f->osh[0];
    int64_t *buf = st == CATTR_OK ? malloc((size_t)(nbuf + 1) * sizeof *buf) : NULL;
    double *vals = st == CATTR_OK ? malloc((size_t)(per * p->n_out + 1) * sizeof *vals) : NULL;
    if (st == CATTR_OK && (!buf || !vals)) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) st = cx_call_dev_fit(e, c, &s->cd, rmax, target && !whole, per * p->n_out);
    if (st == CATTR_OK && target && whole) { /* the target of each row of the output */
        st = cx_pform_target_rows(p->f, p->c0, buf);
        if (st == CATTR_OK) st = cx_dbuf_fit(e->be, &s->cd.tidx, (size_t)p->f->osh[0] * sizeof *buf, buf, false);
    }
    if (st == CATTR_OK) st = sv_table_build(e, s, c, pm, tab, T, M, id_rows); /* the rank rows, made there once */
    if (st == CATTR_OK) st = cx_dbuf_fit(e->be, &s->rkrow, (size_t)rmax * sizeof *buf, NULL, false);
    if (st == CATTR_OK) st = cx_dbuf_fit(e->be, &s->thr, (size_t)rmax * sizeof *buf, NULL, false);
    const sv_run *sv = p->user;
    cx_vsplit v;
    if (st == CATTR_OK) st = cx_vsplit_begin(e, c, p->n_states, per, p->n_out, &v);
    else memset(&v, 0, sizeof v);
    for (int64_t s0 = 0, k = 0; s0 < p->n_states && st == CATTR_OK; s0 += per, k++) {
        int64_t cnt = p->n_states - s0 < per ? p->n_states - s0 : per, R = cnt * B;
        if (!cx_vsplit_mine(&v, k)) { /* another part's chunk; combining: its values */
            st = pt_other(p, &v, k, s0, cnt, vals);
            continue;
        }
        for (int64_t j = 0; j < cnt; j++) {
            int64_t tr, th;
            row_of(sv, s0 + j, &tr, &th);
            for (int64_t b = 0; b < B; b++) {
                buf[j * B + b] = tr * id_rows + (shared ? 0 : b); /* the row's rank row */
                buf[rmax + j * B + b] = th;
            }
        }
        st = cx_copy_in(e->be, s->rkrow.p, buf, (size_t)R * sizeof *buf);
        if (st == CATTR_OK) st = cx_copy_in(e->be, s->thr.p, buf + rmax, (size_t)R * sizeof *buf);
        int nd[SG_MAX_IN];
        int64_t sh[SG_MAX_IN][CATTR_MAX_DIMS];
        cattr_dtype dt[SG_MAX_IN];
        void *in[SG_MAX_IN];
        for (int k = 0; k < SG_N_IN; k++) {
            nd[k] = 1;
            sh[k][0] = R;
            dt[k] = CATTR_INT64;
        }
        for (int i = 0; i < c->n; i++) {
            const cattr_tensor *x = c->x[i];
            nd[SG_X(i)] = nd[SG_BASE(i)] = nd[SG_RK(i)] = x->ndim;
            memcpy(sh[SG_X(i)], x->shape, sizeof sh[0]);
            memcpy(sh[SG_BASE(i)], x->shape, sizeof sh[0]);
            memcpy(sh[SG_RK(i)], x->shape, sizeof sh[0]);
            sh[SG_RK(i)][0] = T * id_rows;
            dt[SG_X(i)] = dt[SG_BASE(i)] = x->dtype;
            in[SG_X(i)] = s->cd.x[i].p;
            in[SG_BASE(i)] = s->cd.base[i].p;
            in[SG_RK(i)] = s->rk[i].p;
        }
        for (int j = 0; j < c->n_add; j++) {
            nd[SG_ADD(j)] = c->add[j]->ndim;
            memcpy(sh[SG_ADD(j)], c->add[j]->shape, sizeof sh[0]);
            dt[SG_ADD(j)] = c->add[j]->dtype;
            in[SG_ADD(j)] = s->cd.add[j].p;
        }
        in[SG_TROW] = s->rkrow.p;
        in[SG_THR] = s->thr.p;
        in[SG_ROWS] = s->cd.rows.p;
        if (target) in[SG_TIDX] = s->cd.tidx.p;
        if (target && whole) sh[SG_TIDX][0] = p->f->osh[0];
        if (st == CATTR_OK)
            st = cx_derived_values(e, &s->core, c, nd, (const int64_t(*)[CATTR_MAX_DIMS])sh, dt, in, s->y, &s->cd,
                                   cnt * p->n_out, vals);
        if (st == CATTR_OK) st = pt_computed(p, &v, k, s0, cnt, vals);
    }
    st = cx_vsplit_end(&v, st);
    free(buf);
    free(vals);
    return st;
}

/* ShapleyValueSampling's state t * M + j: order t, ranks 0..j added. */
static void svs_row(const sv_run *sv, int64_t s, int64_t *trow, int64_t *thr) {
    *trow = s / sv->M;
    *thr = s % sv->M;
}

/* ShapleyValues' state S - 1: coalition S (its features have rank 0). */
static void sv_row(const sv_run *sv, int64_t s, int64_t *trow, int64_t *thr) {
    (void)sv;
    *trow = s + 1;
    *thr = 0;
}

/* Next permutation in lexicographic order (itertools.permutations of 0..n-1); false after the last. */
static bool next_permutation(int64_t *a, int64_t n) {
    int64_t i = n - 2;
    while (i >= 0 && a[i] >= a[i + 1]) i--;
    if (i < 0) return false;
    int64_t j = n - 1;
    while (a[j] <= a[i]) j--;
    int64_t t = a[i];
    a[i] = a[j];
    a[j] = t;
    for (int64_t l = i + 1, h = n - 1; l < h; l++, h--) t = a[l], a[l] = a[h], a[h] = t;
    return true;
}

/* attr[r, element] = total[r, feature of the element] / n_iter in float32 (0 for ids outside 0..M-1). */
/* A model of the whole batch (f whole, c its view, c0 the call): the attributions have the input's own shape but the
 * first ([*output.shape, *input.shape[1:]], a scalar output as [1]); output value r takes row 0 of the input's ids, or
 * row r when they differ per row (cx_pform_id_rows). */
static cattr_status sv_result(cattr_explainer *e, const cx_call *c, const cx_call *c0, const cx_pform *f,
                              const pt_masks *pm, const sv_run *sv, double n_iter, cattr_tensor **attr) {
    const pt_ref *ref = sv->ref;
    int64_t R = ref->n_out, M = sv->M, one = 1;
    double *V = malloc((size_t)(R * M + 1) * sizeof *V); /* the float32 mean per output and feature */
    int64_t *idrow = malloc((size_t)(R + 1) * sizeof *idrow);
    cattr_status st = V && idrow ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t k = 0; k < R * M && st == CATTR_OK; k++) V[k] = (double)(float)(sv->acc[k] / n_iter);
    for (int i = 0; i < c->n && st == CATTR_OK; i++) { /* spread onto the elements on the backend */
        int64_t rows = pm->rows[i], per = pm->per[i];
        if (f->whole) {
            st = alloc_attr(c->dt, ref->ndim ? ref->ndim : 1, ref->ndim ? ref->shape : &one, c0->x[i], &attr[i]);
            per = example_numel(c0->x[i]);
            if (st == CATTR_OK) st = cx_pform_id_rows(f, i, pm->ids[i], per, R, &rows);
            for (int64_t r = 0; r < R; r++) idrow[r] = rows == 1 ? 0 : r;
        } else {
            st = alloc_attr(c->dt, ref->ndim, ref->shape, c->x[i], &attr[i]);
            for (int64_t r = 0; r < R; r++) idrow[r] = rows == 1 ? 0 : r / ref->per_row;
        }
        bool dev = c->attr_dev[i] && attr[i] && attr[i]->numel == c->x[i]->numel; /* the caller takes them there */
        if (st == CATTR_OK)
            st = cx_spread(e, c, V, R, M, pm->ids[i], rows, per, idrow, attr[i], dev ? c->attr_dev[i] : NULL);
        if (dev) {
            cattr_tensor_free(attr[i]);
            attr[i] = NULL;
        }
    }
    free(V);
    free(idrow);
    return st;
}

static cattr_status shapley_attribute(cattr_explainer *e, cx_call *c0, cattr_tensor **attr, bool exact) {
    pt_masks pm;
    pt_ref ref;
    sv_run sv;
    cx_pform pf;
    memset(&sv, 0, sizeof sv);
    memset(&ref, 0, sizeof ref);
    cattr_status st = cx_pform_get(e, c0, true, false, &pf);
    if (st != CATTR_OK) return st;
    cx_call *c = pf.whole ? &pf.v : c0; /* a model of the whole batch: its view (perturb_forms.h) */
    st = masks_load(c, &pf, &pm);
    if (st == CATTR_OK) st = features_dense(&pm);
    if (st == CATTR_OK && exact && pm.F > SV_MAX_FEATURES)
        st = cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                     "ShapleyValues enumerates all orders of the %lld features (%lld!); group them with a feature "
                     "mask into at most %d, or use ShapleyValueSampling",
                     (long long)pm.F, (long long)pm.F, SV_MAX_FEATURES);
    if (st == CATTR_OK) st = masks_index(&pm);
    if (st == CATTR_OK) st = pt_reference(e, c0, &pf, c0->base, &ref);
    int64_t M = pm.F, n_out = ref.n_out, n_perm = exact ? 1 : e->p.n_samples;
    double n_iter = 1;
    if (st == CATTR_OK) {
        sv.pm = &pm;
        sv.ref = &ref;
        sv.M = M;
        sv.acc = calloc((size_t)(n_out * M) + 1, sizeof *sv.acc);
        if (!sv.acc) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK && !exact) { /* the orders, one per sample, drawn in turn */
        sv.perms = malloc(((size_t)(n_perm * M) + 1) * sizeof *sv.perms);
        sv.prev = malloc((size_t)(n_out + 1) * sizeof *sv.prev);
        if (!sv.perms || !sv.prev) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        cx_rng rng;
        cx_rng_init(&rng, e->p.seed, PT_STREAM_SVS);
        for (int64_t t = 0; t < n_perm && st == CATTR_OK; t++) {
            if (replaying(c)) st = take_perm_draw(c, "svs_permutation", M, sv.perms + t * M);
            else cx_rng_permutation(&rng, M, sv.perms + t * M);
        }
        for (int i = 0; i < c->n && st == CATTR_OK; i++) {
            sv.cur[i] = malloc((size_t)c->x[i]->numel * in_esz(c, i) + 1);
            if (!sv.cur[i]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        }
        pt_pass p = {e, c, n_perm * M, n_out, svs_fill, svs_take, &sv, &pf, c0};
        if (st == CATTR_OK && sv_on_device_ok(c, &pm, n_perm)) { /* the rank of every feature in every order */
            int64_t *tab = malloc((size_t)(n_perm * (M + 1)) * sizeof *tab);
            if (!tab) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            for (int64_t t = 0; t < n_perm && st == CATTR_OK; t++) {
                tab[t * (M + 1)] = INT64_MAX;
                for (int64_t j = 0; j < M; j++) tab[t * (M + 1) + 1 + sv.perms[t * M + j]] = j;
            }
            if (st == CATTR_OK) st = sv_run_states(&p, &pm, tab, n_perm, M, svs_row);
            free(tab);
        } else if (st == CATTR_OK && (st = cx_inputs_to_host(e, c)) == CATTR_OK) { /* the host route */
            st = run_states(&p);
        }
        n_iter = (double)n_perm;
    }
    bool part = e->split.n_parts > 0; /* a part of a split call (split.c): its outputs are what it computes */
    if (st == CATTR_OK && exact) { /* every coalition once, then all M! orders in lexicographic order */
        int64_t n_coal = (int64_t)1 << M;
        sv.coal = malloc(((size_t)(n_coal * n_out) + 1) * sizeof *sv.coal);
        int64_t *order = malloc((size_t)(M + 1) * sizeof *order);
        if (!sv.coal || !order) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK) {
            memcpy(sv.coal, ref.y, (size_t)n_out * sizeof *sv.coal);
            pt_pass p = {e, c, n_coal - 1, n_out, sv_fill, sv_take, &sv, &pf, c0};
            if (sv_on_device_ok(c, &pm, n_coal)) { /* per coalition: rank 0 for its features, 1 for the others */
                int64_t *tab = malloc((size_t)(n_coal * (M + 1)) * sizeof *tab);
                if (!tab) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
                for (int64_t S = 0; S < n_coal && st == CATTR_OK; S++) {
                    tab[S * (M + 1)] = INT64_MAX;
                    for (int64_t f = 0; f < M; f++) tab[S * (M + 1) + 1 + f] = (S >> f) & 1 ? 0 : 1;
                }
                if (st == CATTR_OK) st = sv_run_states(&p, &pm, tab, n_coal, M, sv_row);
                free(tab);
            } else if ((st = cx_inputs_to_host(e, c)) == CATTR_OK) { /* the host route */
                st = run_states(&p);
            }
        }
        if (st == CATTR_OK && !part) {
            for (int64_t j = 0; j < M; j++) order[j] = j;
            n_iter = 0;
            do {
                int64_t S = 0;
                for (int64_t j = 0; j < M; j++) {
                    int64_t T = S | ((int64_t)1 << order[j]);
                    sv_accumulate(&sv, order[j], sv.coal + T * n_out, sv.coal + S * n_out);
                    S = T;
                }
                n_iter += 1;
            } while (next_permutation(order, M));
        }
        free(order);
    }
    if (st == CATTR_OK && !part) st = sv_result(e, c, c0, &pf, &pm, &sv, n_iter, attr);
    for (int i = 0; i < CX_MAX_IN; i++) free(sv.cur[i]);
    free(sv.perms);
    free(sv.prev);
    free(sv.coal);
    free(sv.acc);
    free(ref.y);
    masks_free(&pm);
    cx_pform_free(&pf);
    return st;
}

static cattr_status shapley_value_sampling(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    return shapley_attribute(e, c, attr, false);
}

static cattr_status shapley_values(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    return shapley_attribute(e, c, attr, true);
}

/* ---- the method table entries ----------------------------------------------------------------------------------- */

const cx_method cx_method_feature_ablation = {CATTR_METHOD_FEATURE_ABLATION, "feature-ablation", "FeatureAblation",
                                              false, NULL, feature_ablation, fa_release};
const cx_method cx_method_feature_permutation = {CATTR_METHOD_FEATURE_PERMUTATION, "feature-permutation",
                                                 "FeaturePermutation", false, NULL, feature_permutation,
                                                 fa_release};
const cx_method cx_method_occlusion = {CATTR_METHOD_OCCLUSION, "occlusion", "Occlusion", false, NULL,
                                       occlusion, occ_release};
const cx_method cx_method_shapley_value_sampling = {CATTR_METHOD_SHAPLEY_VALUE_SAMPLING, "shapley-value-sampling",
                                                    "ShapleyValueSampling", false, NULL, shapley_value_sampling,
                                                    sv_release};
const cx_method cx_method_shapley_values = {CATTR_METHOD_SHAPLEY_VALUES, "shapley-values", "ShapleyValues", false,
                                            NULL, shapley_values, sv_release};
