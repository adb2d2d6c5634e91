/* lime.c - the surrogate-model methods Lime and KernelShap (Captum semantics: shared/reference/captum_spec.md
 * section 7; shared/golden/README.md sections 7-9 for the random draws and the interpretable models).
 *
 * Both explain each example with a linear model over M interpretable features (the feature-mask groups, shared
 * across inputs; without masks every element is its own feature). For example b they draw n_samples 0/1 vectors z,
 * evaluate the model on "z_f ? x : baseline" for every element of feature f, weight each sample, and fit a linear
 * model of the target output on z; the attribution of an element is the coefficient of its feature.
 *  - Lime: z ~ Bernoulli(0.5) per feature; weight exp(-d^2 / (2 width^2)) with d the cosine distance between the
 *    flattened original and perturbed inputs (float32); weighted Lasso(alpha).
 *  - KernelShap: the all-ones and all-zeros samples first, then k ~ p(k) proportional to (M-1)/(k(M-k)) and the k
 *    features with the largest Gaussian scores; weights 1, and 1e6 for samples with none or all features;
 *    weighted least squares.
 * Captum fits one model per example (B > 1 with one output per example); the fit data are float32 and so are the
 * coefficients (attributions are float32 values in either compute dtype).
 *
 * All samples of all examples are drawn first (in Captum's consumption order: example 0's samples, then example
 * 1's, ...), then evaluated in batched forward passes of k samples x B examples (row r*B + b, CX_TILE), with k
 * from perturbations_per_eval or the memory budget. Random numbers come from the call's explicit draws when it has
 * them (replay of a recorded Captum run) and otherwise from the Philox generator keyed by params.seed, one stream
 * per example.
 *
 * The samples are evaluated on the backend as one derived graph per chunk (lm_build): the inputs, baselines, feature
 * ids (one list for every example, or per example) and every sample go up once per call; per chunk only the target
 * outputs come back, and for Lime the samples' weights (the LimeSimilarity op, from each example's input and its
 * perturbed input). The fits run on the host; the coefficients are spread onto the elements on the backend.
 */
#include "attr/derive.h"
#include "attr/internal.h"
#include "attr/linmodel.h"
#include "attr/perturb_forms.h"
#include "core/rng.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KS_INF_WEIGHT 1000000.0f /* KernelShap.inf_weight */

/* Draws of a recorded run that influence nothing (a DataLoader's seed, a torch Linear's initial weights). */
static const char *const unused_draws[] = {"dataloader_base_seed", "linear_model_init_unused", NULL};

static cattr_status oom(void) { return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory"); }

/* ---- interpretable features ---------------------------------------------------------------------------------- */

/* The feature id of every element of every example, per input ([B * per] ids), and their count M. */
typedef struct features {
    int64_t M;
    int64_t per[CX_MAX_IN];
    int64_t *ids[CX_MAX_IN];
} features;

static void features_free(features *f) {
    for (int i = 0; i < CX_MAX_IN; i++) free(f->ids[i]);
    memset(f, 0, sizeof *f);
}

/* Checks that mask i broadcasts to input i (same rank; each dim equal or 1; dim 0 equal to 1 or the batch). */
static cattr_status check_mask(const cattr_tensor *mask, const cattr_tensor *x, int i) {
    char s1[128], s2[128];
    if (mask->dtype != CATTR_INT64)
        return cx_fail(CATTR_ERR_DTYPE, "feature mask %d is %s: masks hold int64 feature ids", i,
                       cattr_dtype_name(mask->dtype));
    bool ok = mask->ndim == x->ndim;
    for (int d = 0; ok && d < x->ndim; d++) ok = mask->shape[d] == x->shape[d] || mask->shape[d] == 1;
    if (!ok)
        return cx_fail(CATTR_ERR_SHAPE,
                       "feature mask %d has shape %s; it must broadcast to input %d of shape %s (same rank, each dim "
                       "equal or 1, dim 0 equal to 1 or the batch)",
                       i, cx_shape_str(mask->ndim, mask->shape, s1, sizeof s1), i,
                       cx_shape_str(x->ndim, x->shape, s2, sizeof s2));
    return CATTR_OK;
}

/* Flat index into the mask of element k of x (broadcasting dims of size 1). */
static int64_t mask_index(const cattr_tensor *mask, const cattr_tensor *x, int64_t k) {
    int64_t idx = 0, stride = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        int64_t coord = k % x->shape[d];
        k /= x->shape[d];
        if (mask->shape[d] != 1) idx += coord * stride;
        stride *= mask->shape[d];
    }
    return idx;
}

/* Captum's construct_feature_mask: user masks shifted so that the smallest id is 0 (the minimum over all masks);
 * inputs without a mask get one id per element, after the masks' ids; M = largest id + 1. */
static cattr_status build_features(const cx_call *c, features *f) {
    memset(f, 0, sizeof *f);
    const cattr_tensor *const *masks = c->user ? c->user->feature_masks : NULL;
    int64_t lo = INT64_MAX, hi = -1;
    for (int i = 0; i < c->n; i++) {
        f->per[i] = cx_numel(c->x[i]->ndim - 1, c->x[i]->shape + 1); /* elements of one example (dims but the first) */
        const cattr_tensor *m = masks ? masks[i] : NULL;
        if (!m) continue;
        CX_CHECK(check_mask(m, c->x[i], i));
        const int64_t *v = m->data;
        for (int64_t k = 0; k < m->numel; k++) lo = v[k] < lo ? v[k] : lo;
    }
    for (int i = 0; i < c->n; i++) {
        f->ids[i] = malloc((size_t)(c->x[i]->numel + 1) * sizeof *f->ids[i]);
        if (!f->ids[i]) return oom();
        const cattr_tensor *m = masks ? masks[i] : NULL;
        if (!m) continue;
        const int64_t *v = m->data;
        for (int64_t k = 0; k < c->x[i]->numel; k++) {
            int64_t id = v[mask_index(m, c->x[i], k)] - lo;
            f->ids[i][k] = id;
            hi = id > hi ? id : hi;
        }
    }
    int64_t next = hi + 1; /* unmasked inputs: consecutive ids per element, the same for every example */
    for (int i = 0; i < c->n; i++) {
        if (masks && masks[i]) continue;
        for (int64_t k = 0; k < c->x[i]->numel; k++) f->ids[i][k] = next + (f->per[i] ? k % f->per[i] : 0);
        next += f->per[i];
    }
    f->M = next;
    if (f->M < 1) return cx_fail(CATTR_ERR_SHAPE, "the inputs have no elements: there is nothing to attribute to");
    if (f->M > 10000)
        cx_log(CATTR_LOG_WARN,
               "%lld interpretable features: the surrogate model may be slow and underdetermined; "
               "consider a feature mask that groups elements",
               (long long)f->M);
    return CATTR_OK;
}

/* ---- samples ------------------------------------------------------------------------------------------------- */

/* The samples z of every example: Z[(b * n + s) * M + f] in {0, 1}. */
typedef struct samples {
    int64_t n, M;
    unsigned char *Z;
} samples;

/* Lime's Bernoulli(0.5) sample (draw role lime_sample, F32 [1, M]). */
static cattr_status lime_sample(cx_call *c, cx_rng *g, int64_t M, unsigned char *z) {
    const cattr_tensor *d = NULL;
    CX_CHECK(cx_next_draw(c, "lime_sample", unused_draws, &d));
    if (d && d->numel != M)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                       "explicit draw 'lime_sample' has %lld values; %lld features need "
                       "one each",
                       (long long)d->numel, (long long)M);
    for (int64_t f = 0; f < M; f++) {
        if (!d) {
            z[f] = cx_rng_uniform(g) < 0.5;
            continue;
        }
        double v = cx_tensor_get(d, f);
        if (v != 0.0 && v != 1.0)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explicit draw 'lime_sample' holds %g; samples are 0 or 1", v);
        z[f] = v == 1.0;
    }
    return CATTR_OK;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* KernelShap's number of selected features: k ~ p(k) = (M-1) / (k (M-k)) for k = 1..M-1 (float32, as Captum
 * builds the Categorical), by inversion of one uniform. */
static int64_t ks_draw_count(cx_rng *g, int64_t M) {
    double total = 0;
    for (int64_t k = 1; k < M; k++) total += (double)((float)(M - 1) / ((float)k * (float)(M - k)));
    double u = cx_rng_uniform(g) * total, acc = 0;
    for (int64_t k = 1; k < M; k++) {
        acc += (double)((float)(M - 1) / ((float)k * (float)(M - k)));
        if (u < acc) return k;
    }
    return M - 1;
}

/* KernelShap's sample s: all ones, all zeros, then the features whose Gaussian score exceeds the (M-k)-th smallest
 * score (draws ks_num_selected, I64 [1,1], and ks_scores, F32 [1, M]). */
static cattr_status ks_sample(cx_call *c, cx_rng *g, int64_t M, int64_t s, float *scores, float *sorted,
                              unsigned char *z) {
    if (s < 2) {
        memset(z, s == 0, (size_t)M);
        return CATTR_OK;
    }
    if (M < 2)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                       "KernelShap needs at least 2 interpretable features to draw more "
                       "than 2 samples (there is %lld)",
                       (long long)M);
    const cattr_tensor *dk = NULL, *ds = NULL;
    CX_CHECK(cx_next_draw(c, "ks_num_selected", unused_draws, &dk));
    int64_t k;
    if (dk) {
        if (dk->numel != 1)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explicit draw 'ks_num_selected' has %lld values, not 1",
                           (long long)dk->numel);
        double v = cx_tensor_get(dk, 0);
        if (!(v >= 1 && v <= (double)(M - 1)))
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explicit draw 'ks_num_selected' is %g; it must be in 1..%lld",
                           v, (long long)(M - 1));
        k = (int64_t)v;
        CX_CHECK(cx_next_draw(c, "ks_scores", unused_draws, &ds));
        if (!ds || ds->numel != M)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                           "explicit draw 'ks_scores' is missing or does not have %lld "
                           "values",
                           (long long)M);
        for (int64_t f = 0; f < M; f++) scores[f] = (float)cx_tensor_get(ds, f);
    } else {
        k = ks_draw_count(g, M);
        for (int64_t f = 0; f < M; f++) scores[f] = (float)cx_rng_normal(g);
    }
    memcpy(sorted, scores, (size_t)M * sizeof *sorted);
    qsort(sorted, (size_t)M, sizeof *sorted, cmp_float);
    float thr = sorted[M - k - 1]; /* torch.kthvalue(scores, M - k): the (M-k)-th smallest */
    for (int64_t f = 0; f < M; f++) z[f] = scores[f] > thr;
    return CATTR_OK;
}

static cattr_status draw_samples(cattr_explainer *e, cx_call *c, bool kernel_shap, samples *S) {
    int64_t n = S->n, M = S->M;
    float *scores = kernel_shap ? malloc((size_t)(2 * M) * sizeof *scores) : NULL;
    if (kernel_shap && !scores) return oom();
    cattr_status st = CATTR_OK;
    for (int64_t b = 0; b < c->B && st == CATTR_OK; b++) {
        cx_rng g;
        cx_rng_init(&g, e->p.seed, (uint64_t)b);
        for (int64_t s = 0; s < n && st == CATTR_OK; s++) {
            unsigned char *z = S->Z + (size_t)(b * n + s) * (size_t)M;
            st = kernel_shap ? ks_sample(c, &g, M, s, scores, scores + M, z) : lime_sample(c, &g, M, z);
        }
    }
    free(scores);
    return st;
}

/* ---- sample weights -------------------------------------------------------------------------------------------- */

static float kernel_shap_weight(const unsigned char *z, int64_t M) {
    int64_t on = 0;
    for (int64_t f = 0; f < M; f++) on += z[f];
    return on == 0 || on == M ? KS_INF_WEIGHT : 1.0f;
}

/* ---- model evaluation ------------------------------------------------------------------------------------------- */

/* Samples per forward pass (each pass holds that many samples of every example). */
static cattr_status samples_per_pass(cattr_explainer *e, cx_call *c, int64_t n, int64_t *out) {
    if (e->p.perturbations_per_eval > 0) {
        *out = e->p.perturbations_per_eval < n ? e->p.perturbations_per_eval : n;
        return CATTR_OK;
    }
    size_t budget = cx_memory_budget(e), row = 0;
    CX_CHECK(cx_row_bytes(e, c, false, &row));
    size_t per_sample = row * (size_t)c->B, k = per_sample ? budget / per_sample : (size_t)n;
    if (k < 1) {
        cx_budget_warn(e, "the memory budget (%zu bytes) is below one sample of the batch (%zu bytes); running one "
                          "sample per pass", budget, per_sample);
        k = 1;
    }
    *out = k > (size_t)n ? n : (int64_t)k;
    return CATTR_OK;
}

/* ---- model evaluation on the backend ---------------------------------------------------------------------------
 * Y[b * n + s] = the target output of example b on its sample s (float32, as Captum casts it). A chunk of reps
 * samples of every example (R = reps * B rows, row r * B + b) runs as one graph:
 *   inputs   x_i, base_i [B, ...]; ids_i int64 [1 or B, ...] (each element's feature: one list for every example,
 *            or per example); the additional inputs; Z int64 [B * n, M] (every sample); zrow [R] (the sample of each
 *            row); rows [R] (r mod B); one [R]; tidx [R] (the flat index of the example's target in its output);
 *            idrow [R] (each row's ids row: 0, or r mod B)
 *   prefix   ids of the rows  d_i = Gather(ids_i, idrow) [R, ...]
 *            z of the elements s_i = ReshapeLike(SeqPick(Reshape(Gather(Z, zrow), [R, M, 1]), Reshape(d_i, [R, -1])), d_i)
 *            in_i = WhereId(base_i, x_i, s_i, one; rows, rows): z_f ? x : baseline per element, read in place
 *   model    on in_i and Gather(a_j, rows); suffix y = SeqPick(Reshape(output, [R, -1, 1]), tidx) as [R]
 *   weights  Lime: w = LimeSimilarity(Concat_i(Reshape(Gather(x_i, rows), [R, -1])), Concat_i(Reshape(in_i, [R, -1])))
 *            [R], each sample's weight from its example's input and its perturbed input (Captum's default kernel) */
typedef struct lm_graph {
    cx_derived core; /* graph, call shape, constants, plans */
    bool whole;      /* built for a model of the whole batch (perturb_forms.h) */
    int y, w;        /* w: Lime's weights (-1: KernelShap, whose weights are the samples' own) */
    cx_call_dev cd; /* inputs, baselines, additional inputs, rows, targets, outputs */
    cx_buf ids[CX_MAX_IN], z, one, idzero, xf[CX_MAX_IN], bf[CX_MAX_IN];
} lm_graph;

static void lm_release(cattr_explainer *e) {
    lm_graph *s = e->method_state;
    if (!s) return;
    cx_call_dev_free(&s->cd);
    for (int i = 0; i < CX_MAX_IN; i++) {
        cx_buf_free(&s->ids[i]);
        cx_buf_free(&s->xf[i]);
        cx_buf_free(&s->bf[i]);
    }
    cx_buf_free(&s->z);
    cx_buf_free(&s->one);
    cx_buf_free(&s->idzero);
    cx_derived_free(&s->core);
    free(s);
    e->method_state = NULL;
}

#define LM_X(i) (i)
#define LM_BASE(i) (s->core.n + (i))
#define LM_IDS(i) (2 * s->core.n + (i))
#define LM_ADD(j) (3 * s->core.n + (j))
#define LM_Z (3 * s->core.n + s->core.n_add)
#define LM_ZROW (LM_Z + 1)
#define LM_ROWS (LM_Z + 2)
#define LM_ONE (LM_Z + 3)
#define LM_TIDX (LM_Z + 4)
#define LM_IDROW (LM_Z + 5)
#define LM_XF(i) (LM_Z + 6 + (i))                 /* Lime: input i in the compute dtype (an int64 input's values) */
#define LM_BF(i) (LM_Z + 6 + s->core.n + (i))     /* and its baseline, for the samples' weights */
#define LM_N_IN (LM_Z + 6 + 2 * s->core.n)
#define LM_MAX_IN (6 * CX_MAX_IN + 6)
_Static_assert(LM_MAX_IN <= CX_RUN_MAX_IN, "a run takes at most CX_RUN_MAX_IN inputs");

/* Concat of values ids[0..n) (n >= 1) along a->axis, as a chain of nodes of at most CG_MAX_IN inputs; -1 on failure. */
static int concat_all(cg_graph *g, const char *name, const int *ids, int n, const cg_attrs *a) {
    int cur = ids[0];
    for (int i = 1; i < n && cur >= 0;) {
        int in[CG_MAX_IN], k = 0;
        in[k++] = cur;
        while (k < CG_MAX_IN && i < n) in[k++] = ids[i++];
        cur = cg_emit(g, CG_CONCAT, name, in, k, a);
    }
    return cur;
}

static cattr_status lm_build(cattr_explainer *e, void *state) {
    lm_graph *s = state;
    bool whole = s->whole = cx_pform_building_whole;
    const cg_graph *m = e->m->g;
    cg_graph *g = NULL;
    int *map = NULL;
    CX_CHECK(cx_derive_new(m, &g, &map));
    int v[LM_MAX_IN], in_map[2 * CX_MAX_IN], model_in[2 * CX_MAX_IN], sel_of[CX_MAX_IN], bad = 0;
    for (int k = 0; k < LM_N_IN; k++) {
        char nm[48];
        snprintf(nm, sizeof nm, "__lm_in%d", k);
        bad |= (v[k] = cg_add_input(g, nm)) < 0;
    }
    cg_attrs a0 = cg_attrs_default(), r3 = cg_attrs_default(), r2 = cg_attrs_default();
    r3.n_ints = 3;
    r3.ints[0] = 0, r3.ints[1] = -1, r3.ints[2] = 1;
    r2.n_ints = 2;
    r2.ints[0] = 0, r2.ints[1] = -1;
    int zr = bad ? -1 : cg_emit(g, CG_GATHER, "__lm_samples", (int[]){v[LM_Z], v[LM_ZROW]}, 2, &a0);
    int z3 = zr < 0 ? -1 : cg_emit(g, CG_RESHAPE, "__lm_samples_3d", (int[]){zr}, 1, &r3);
    bad |= z3 < 0;
    for (int i = 0; i < s->core.n && !bad; i++) {
        int d = cg_emit(g, CG_GATHER, "__lm_ids_of_rows", (int[]){v[LM_IDS(i)], v[LM_IDROW]}, 2, &a0);
        int df = d < 0 ? -1 : cg_emit(g, CG_RESHAPE, "__lm_ids_flat", (int[]){d}, 1, &r2);
        int pk = df < 0 ? -1 : cg_emit(g, CG_SEQ_PICK, "__lm_z_of_elements", (int[]){z3, df}, 2, NULL);
        int sel = pk < 0 ? -1 : cg_emit(g, CG_RESHAPE_LIKE, "__lm_selected", (int[]){pk, d}, 2, NULL);
        in_map[i] = sel < 0 ? -1
                            : cg_emit(g, CG_WHERE_ID, "__lm_sampled",
                                      (int[]){v[LM_BASE(i)], v[LM_X(i)], sel, v[LM_ONE], v[LM_ROWS], v[LM_ROWS], -1},
                                      7, NULL);
        sel_of[i] = sel;
        bad |= in_map[i] < 0;
    }
    for (int i = 0; i < s->core.n && !bad; i++) bad |= (model_in[i] = cx_pform_model_input(g, whole, in_map[i])) < 0;
    for (int j = 0; j < s->core.n_add && !bad; j++)
        bad |= (model_in[s->core.n + j] = cx_pform_model_input(
                    g, whole, cg_emit(g, CG_GATHER, "__lm_at", (int[]){v[LM_ADD(j)], v[LM_ROWS]}, 2, &a0))) < 0;
    cattr_status st = bad ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : CATTR_OK;
    if (st == CATTR_OK) st = cx_graph_append_model(g, m, model_in, map);
    if (st == CATTR_OK) {
        cg_attrs r3 = cg_attrs_default(), r1 = cg_attrs_default();
        r3.n_ints = 3;
        r3.ints[0] = 0, r3.ints[1] = -1, r3.ints[2] = 1;
        r1.n_ints = 1;
        r1.ints[0] = -1;
        int ys = map[cx_model_output(e->m)];
        if (!whole || s->core.target) { /* a model of the whole batch without a target: its one value */
            int y3 = cg_emit(g, CG_RESHAPE, "__lm_out_rows", (int[]){ys}, 1, &r3);
            ys = y3 < 0 ? -1 : cg_emit(g, CG_SEQ_PICK, "__lm_target", (int[]){y3, v[LM_TIDX]}, 2, NULL);
        }
        s->y = ys < 0 ? -1 : cg_emit(g, CG_RESHAPE, "__lm_y", (int[]){ys}, 1, &r1);
        if (s->y < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    s->w = -1;
    if (st == CATTR_OK && e->p.method == CATTR_METHOD_LIME) { /* the samples' weights (see above) */
        int xo[CX_MAX_IN], po[CX_MAX_IN], n = s->core.n;
        cg_attrs rf = cg_attrs_default(), cat = cg_attrs_default(), sim = cg_attrs_default();
        rf.n_ints = 2;
        rf.ints[0] = 0, rf.ints[1] = -1;
        cat.axis = 1;
        sim.alpha = e->p.kernel_width;
        sim.index = e->p.lime_euclidean != 0;
        for (int i = 0; i < n && !bad; i++) { /* in the compute dtype: an int64 input's values as floats */
            int xr = cg_emit(g, CG_GATHER, "__lm_inputs_of_rows", (int[]){v[LM_XF(i)], v[LM_ROWS]}, 2, &a0);
            xo[i] = xr < 0 ? -1 : cg_emit(g, CG_RESHAPE, "__lm_inputs_flat", (int[]){xr}, 1, &rf);
            int pf = cg_emit(g, CG_WHERE_ID, "__lm_sampled_float",
                             (int[]){v[LM_BF(i)], v[LM_XF(i)], sel_of[i], v[LM_ONE], v[LM_ROWS], v[LM_ROWS], -1}, 7, NULL);
            po[i] = pf < 0 ? -1 : cg_emit(g, CG_RESHAPE, "__lm_sampled_flat", (int[]){pf}, 1, &rf);
            bad |= xo[i] < 0 || po[i] < 0;
        }
        int xc = bad ? -1 : concat_all(g, "__lm_inputs_all", xo, n, &cat);
        int pc = bad ? -1 : concat_all(g, "__lm_sampled_all", po, n, &cat);
        s->w = xc < 0 || pc < 0 ? -1 : cg_emit(g, CG_LIME_SIMILARITY, "__lm_weight", (int[]){xc, pc}, 2, &sim);
        if (s->w < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    free(map);
    if (st != CATTR_OK) {
        cg_free(g);
        return st;
    }
    s->core.g = g;
    return CATTR_OK;
}

/* Whether every example has the same feature ids (the samples then select by one id list per input). */
static bool same_ids(const cx_call *c, const features *F) {
    for (int i = 0; i < c->n; i++)
        for (int64_t b = 1; b < c->B; b++)
            if (memcmp(F->ids[i], F->ids[i] + b * F->per[i], (size_t)F->per[i] * sizeof(int64_t))) return false;
    return true;
}

/* A model of the whole batch (f whole): c is the view of call c0 (perturb_forms.h), one sample per pass. */
static cattr_status evaluate(cattr_explainer *e, cx_call *c, cx_call *c0, const cx_pform *f, const features *F,
                             const samples *S, float *Y, float *W) {
    int64_t n = S->n, M = S->M, B = c->B, chunk = 1;
    bool whole = f->whole, target = c->target && c->target->kind != CATTR_TARGET_NONE;
    lm_graph *s = NULL;
    CX_CHECK(cx_pform_state(e, c, whole ? target : true, whole, sizeof *s, lm_build, lm_release,
                            offsetof(lm_graph, whole), (void **)&s));
    int ny = s->w >= 0 ? 2 : 1, ys[2] = {s->y, s->w}; /* per row its output, and Lime's weight */
    cattr_status st = whole ? CATTR_OK : samples_per_pass(e, c, n, &chunk);
    int64_t rmax = chunk * B, nz = B * n * M, nbuf = nz > rmax ? nz : rmax;
    if (whole && f->ond && f->osh[0] > nbuf) nbuf = f->osh[0];
    int64_t *buf = st == CATTR_OK ? malloc((size_t)(nbuf + 1) * sizeof *buf) : NULL;
    double *y = st == CATTR_OK ? malloc((size_t)(ny * rmax + 1) * sizeof *y) : NULL;
    if (st == CATTR_OK && (!buf || !y)) st = oom();
    if (st == CATTR_OK) st = cx_call_dev_fit(e, c, &s->cd, rmax, !whole, ny * rmax);
    if (st == CATTR_OK && whole && target) { /* the target of each row of the output */
        st = cx_pform_target_rows(f, c0, buf);
        if (st == CATTR_OK) st = cx_buf_fit(e->be, &s->cd.tidx, (size_t)f->osh[0] * sizeof *buf, buf, false);
    }
    for (int i = 0; i < c->n && st == CATTR_OK && s->w >= 0; i++) /* the weights' float copies of int64 inputs */
        if (c->x[i]->dtype == CATTR_INT64) {
            cattr_tensor *xf = NULL, *bf = NULL;
            st = cattr_tensor_convert(c->x[i], c->dt, &xf);
            if (st == CATTR_OK) st = cattr_tensor_convert(c->base[i], c->dt, &bf);
            size_t bytes = (size_t)c->x[i]->numel * cattr_dtype_size(c->dt);
            if (st == CATTR_OK) st = cx_buf_fit(e->be, &s->xf[i], bytes, xf->data, false);
            if (st == CATTR_OK) st = cx_buf_fit(e->be, &s->bf[i], bytes, bf->data, false);
            cattr_tensor_free(xf);
            cattr_tensor_free(bf);
        }
    bool shared = same_ids(c, F); /* one id list for every example, or one per example */
    for (int i = 0; i < c->n && st == CATTR_OK; i++)
        st = cx_buf_fit(e->be, &s->ids[i], (size_t)((shared ? 1 : B) * F->per[i]) * sizeof(int64_t), F->ids[i], false);
    if (st == CATTR_OK && shared) st = cx_buf_fit(e->be, &s->idzero, (size_t)rmax * sizeof *buf, NULL, true);
    if (st == CATTR_OK) { /* every sample */
        for (int64_t k = 0; k < nz; k++) buf[k] = S->Z[k];
        st = cx_buf_fit(e->be, &s->z, (size_t)nz * sizeof *buf, buf, false);
    }
    if (st == CATTR_OK) {
        for (int64_t r = 0; r < rmax; r++) buf[r] = 1;
        st = cx_buf_fit(e->be, &s->one, (size_t)rmax * sizeof *buf, buf, false);
    }
    cx_vsplit v; /* a call split into parts (split.c): a chunk's R outputs are its values */
    memset(&v, 0, sizeof v);
    if (st == CATTR_OK) st = cx_vsplit_begin(e, c, n, chunk, ny * B, &v);
    for (int64_t s0 = 0, q = 0; s0 < n && st == CATTR_OK; s0 += chunk, q++) {
        int64_t s1 = s0 + chunk < n ? s0 + chunk : n, reps = s1 - s0, R = reps * B;
        if (!cx_vsplit_mine(&v, q)) {
            if (v.mode != CX_VSPLIT_COMBINE) continue;
            st = cx_vsplit_get(&v, q, y, ny * R);
            for (int64_t r = 0; r < R && st == CATTR_OK; r++) {
                Y[(r % B) * n + s0 + r / B] = (float)y[r];
                if (ny == 2) W[(r % B) * n + s0 + r / B] = (float)y[R + r];
            }
            if (st == CATTR_OK) st = cx_chunk_done(&e->p, s1, n);
            continue;
        }
        for (int64_t r = 0; r < R; r++) buf[r] = (r % B) * n + s0 + r / B; /* Z's row of example b's sample */
        cx_arg arg[LM_MAX_IN];
        memset(arg, 0, (size_t)LM_N_IN * sizeof *arg);
        for (int k = 0; k < LM_N_IN; k++) {
            arg[k].nd = 1;
            arg[k].sh[0] = R;
            arg[k].dt = CATTR_INT64;
        }
        for (int i = 0; i < c->n; i++) {
            const cattr_tensor *x = c->x[i];
            arg[LM_X(i)].nd = arg[LM_BASE(i)].nd = arg[LM_IDS(i)].nd = x->ndim;
            memcpy(arg[LM_X(i)].sh, x->shape, sizeof arg[0].sh);
            memcpy(arg[LM_BASE(i)].sh, x->shape, sizeof arg[0].sh);
            memcpy(arg[LM_IDS(i)].sh, x->shape, sizeof arg[0].sh);
            arg[LM_IDS(i)].sh[0] = shared ? 1 : B;
            arg[LM_X(i)].dt = arg[LM_BASE(i)].dt = x->dtype;
            arg[LM_X(i)].dev = s->cd.x[i].p;
            arg[LM_BASE(i)].dev = s->cd.base[i].p;
            arg[LM_IDS(i)].dev = s->ids[i].p;
            bool ints = x->dtype == CATTR_INT64 && s->w >= 0;
            arg[LM_XF(i)].nd = arg[LM_BF(i)].nd = x->ndim;
            memcpy(arg[LM_XF(i)].sh, x->shape, sizeof arg[0].sh);
            memcpy(arg[LM_BF(i)].sh, x->shape, sizeof arg[0].sh);
            arg[LM_XF(i)].dt = arg[LM_BF(i)].dt = c->dt;
            arg[LM_XF(i)].dev = ints ? s->xf[i].p : s->cd.x[i].p;
            arg[LM_BF(i)].dev = ints ? s->bf[i].p : s->cd.base[i].p;
        }
        for (int j = 0; j < c->n_add; j++) {
            arg[LM_ADD(j)].nd = c->add[j]->ndim;
            memcpy(arg[LM_ADD(j)].sh, c->add[j]->shape, sizeof arg[0].sh);
            arg[LM_ADD(j)].dt = c->add[j]->dtype;
            arg[LM_ADD(j)].dev = s->cd.add[j].p;
        }
        arg[LM_Z].nd = 2;
        arg[LM_Z].sh[0] = B * n;
        arg[LM_Z].sh[1] = M;
        arg[LM_Z].dev = s->z.p;
        arg[LM_ZROW].host = buf; /* goes up with the run */
        arg[LM_ROWS].dev = s->cd.rows.p;
        arg[LM_ONE].dev = s->one.p;
        arg[LM_TIDX].dev = s->cd.tidx.p;
        if (whole) arg[LM_TIDX].sh[0] = target ? f->osh[0] : 1; /* unread without a target */
        arg[LM_IDROW].dev = shared ? s->idzero.p : s->cd.rows.p;
        if (st == CATTR_OK) /* the R target outputs (and Lime's R weights) come back */
            st = cx_derived_values_n(e, &s->core, arg, ys, ny, &s->cd,
                                     R, y);
        if (st == CATTR_OK) st = cx_vsplit_put(&v, q, y, ny * R);
        for (int64_t r = 0; r < R && st == CATTR_OK; r++) {
            Y[(r % B) * n + s0 + r / B] = (float)y[r];
            if (ny == 2) W[(r % B) * n + s0 + r / B] = (float)y[R + r];
        }
        if (st == CATTR_OK) st = cx_chunk_done(&e->p, s1, n);
    }
    st = cx_vsplit_end(&v, st);
    free(buf);
    free(y);
    return st;
}

/* ---- the methods ---------------------------------------------------------------------------------------------- */

/* Lime's and KernelShap's parameters (n_samples, perturbations_per_eval, lime_alpha, kernel_width) are checked by
 * cx_params_check (methods.c). */

/* A model of the whole batch (perturb_forms.h; one value per forward pass): one interpretable model for the whole
 * batch, evaluated on the view of the call, its coefficients spread by each input's first row of feature ids into
 * attributions [1, *input.shape[1:]] (Captum's leading_dim_one). */
static cattr_status surrogate(cattr_explainer *e, cx_call *c0, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta; /* no convergence delta */
    bool ks = e->p.method == CATTR_METHOD_KERNEL_SHAP;
    cx_pform pf;
    CX_CHECK(cx_pform_get(e, c0, true, true, &pf));
    cx_call *c = pf.whole ? &pf.v : c0;
    int64_t B = c->B, n = e->p.n_samples;
    features F, Fv; /* Fv: the features over the view's one example (the whole input) */
    samples S = {n, 0, NULL};
    float *X = NULL, *Y = NULL, *W = NULL, *coef = NULL;
    double *V = NULL; /* [B, M]: the coefficients of every example's model */
    int64_t *idrow = NULL;
    cattr_tensor *coefs = NULL; /* return_coefficients: [B, M] */
    cattr_status st = build_features(c0, &F);
    Fv = F;
    for (int i = 0; i < c0->n && pf.whole; i++) Fv.per[i] = c0->x[i]->numel;
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        if (!c->base[i]) st = cx_fail(CATTR_ERR_INTERNAL, "input %d has no prepared baseline", i);
        int64_t sh[CATTR_MAX_DIMS];
        memcpy(sh, c0->x[i]->shape, sizeof sh);
        if (pf.whole) sh[0] = 1;
        attr[i] = cx_tensor_alloc(c->dt, c0->x[i]->ndim, sh);
        if (st == CATTR_OK && !attr[i]) st = oom();
    }
    if (st == CATTR_OK && B > 0) {
        S.M = F.M;
        size_t nm = (size_t)n * (size_t)F.M;
        S.Z = malloc((size_t)B * nm);
        X = malloc(nm * sizeof *X);
        Y = malloc((size_t)(B * n) * sizeof *Y);
        W = malloc((size_t)(B * n) * sizeof *W);
        coef = malloc((size_t)F.M * sizeof *coef);
        V = malloc((size_t)(B * F.M) * sizeof *V);
        idrow = malloc((size_t)B * sizeof *idrow);
        if (e->p.return_coefficients) {
            int64_t csh[2] = {B, F.M};
            coefs = cx_tensor_alloc(c->dt, 2, csh);
        }
        if (!S.Z || !X || !Y || !W || !coef || !V || !idrow || (e->p.return_coefficients && !coefs))
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory for %lld samples of %lld interpretable features",
                         (long long)n, (long long)F.M);
    }
    if (st == CATTR_OK && B > 0) st = draw_samples(e, c, ks, &S);
    for (int64_t r = 0; r < B * n && st == CATTR_OK && ks && e->split.n_parts == 0; r++)
        W[r] = kernel_shap_weight(S.Z + (size_t)r * (size_t)S.M, S.M);
    if (st == CATTR_OK && B > 0) st = evaluate(e, c, c0, &pf, &Fv, &S, Y, W); /* Lime's weights come with the outputs */
    bool part = e->split.n_parts > 0; /* a part of a split call (split.c): its outputs are what it computes */
    for (int64_t b = 0; b < B && st == CATTR_OK && !part; b++) { /* one interpretable model per example */
        size_t nm = (size_t)n * (size_t)S.M;
        for (size_t k = 0; k < nm; k++) X[k] = S.Z[(size_t)b * nm + k];
        float intercept;
        if (ks) {
            st = cx_linreg_fit(n, S.M, X, Y + b * n, W + b * n, coef, &intercept);
        } else {
            cx_lasso_opts o = CX_LASSO_DEFAULTS(e->p.lime_alpha);
            st = cx_lasso_fit(n, S.M, X, Y + b * n, W + b * n, &o, coef, &intercept, NULL);
        }
        if (st != CATTR_OK) {
            cx_fail_context(st, "example %lld", (long long)b);
            break;
        }
        for (int64_t f = 0; f < S.M; f++) V[b * S.M + f] = coef[f];
    }
    if (st == CATTR_OK && e->p.return_coefficients)
        for (int64_t k = 0; k < B * S.M; k++) cx_tensor_set(coefs, k, V[k]);
    for (int64_t b = 0; b < B && st == CATTR_OK && !part; b++) idrow[b] = b;
    for (int i = 0; i < c->n && st == CATTR_OK && !part && !e->p.return_coefficients && B > 0; i++) {
        /* each element its feature's coefficient (left on the backend where the caller takes it there) */
        st = cx_spread(e, c, V, B, S.M, F.ids[i], pf.whole ? 1 : B, F.per[i], idrow, attr[i], c->attr_dev[i]);
        if (c->attr_dev[i]) {
            cattr_tensor_free(attr[i]);
            attr[i] = NULL;
        }
    }
    if (st == CATTR_OK && e->p.return_coefficients) { /* attr[0] = [B, M] coefficients, the rest empty */
        int64_t zero = 0;
        for (int i = 0; i < c->n && st == CATTR_OK; i++) {
            cattr_tensor_free(attr[i]);
            attr[i] = i == 0 ? coefs : cx_tensor_alloc(c->dt, 1, &zero);
            if (!attr[i]) st = oom();
        }
        coefs = NULL;
    }
    cattr_tensor_free(coefs);
    features_free(&F);
    free(S.Z);
    free(X);
    free(Y);
    free(W);
    free(coef);
    free(V);
    free(idrow);
    if (st != CATTR_OK)
        for (int i = 0; i < c0->n; i++) {
            cattr_tensor_free(attr[i]);
            attr[i] = NULL;
        }
    cx_pform_free(&pf);
    return st;
}

const cx_method cx_method_lime = {CATTR_METHOD_LIME, false, NULL, surrogate, lm_release};
const cx_method cx_method_kernel_shap = {CATTR_METHOD_KERNEL_SHAP, false,
                                         NULL,                     surrogate,     lm_release};
