/* curves.c - deletion and insertion curves of attributions (Petsiuk, Das and Saenko, "RISE: Randomized Input Sampling
 * for Explanation of Black-box Models", BMVC 2018): the model's score at the target as the features are removed
 * (deletion: replaced by the baseline) or added (insertion: from the baseline), the most attributed first, and the
 * areas under the curves (cattr_deletion_curve).
 *
 * The features are the call's feature masks' groups (ids shared across inputs, as the perturbation methods read
 * them) or every element; a feature's score is the sum of its elements' attributions in the example. Ranking the
 * features is the host's part (a sort per example, like the permutations of the sampling methods); the states are
 * made on the backend by one small graph per pass (WhereId: an element takes the baseline's value, for insertion the
 * input's, where its feature's rank is below the step's cut), and the model's passes are the explainer's (the
 * target selected on the backend; with `softmax`, the softmax of the output first, as one more small graph). */
#include "attr/perturb_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IN CX_MAX_IN

/* For n inputs: X_i, BASE_i, M_i (int64 ranks, the input's shape), then the cut per row (int64 [R]: rank <= cut
 * takes BASE) and the example of each row (int64 [R]); outputs the n states [R, ...]. */
static cattr_status curve_build(cg_graph *g, int n, cattr_tensor *const *like, int *outs) {
    (void)like;
    int X[MAX_IN], BS[MAX_IN], M[MAX_IN];
    for (int i = 0; i < n; i++) {
        X[i] = cg_add_input(g, "__curve_keep");
        BS[i] = cg_add_input(g, "__curve_put");
        M[i] = cg_add_input(g, "__curve_rank");
    }
    int cut = cg_add_input(g, "__curve_cut"), rows = cg_add_input(g, "__curve_rows");
    cg_attrs a = cg_attrs_default();
    a.index = 1; /* M <= cut ? BASE : X */
    for (int i = 0; i < n; i++) {
        bool bad = X[i] < 0 || BS[i] < 0 || M[i] < 0 || cut < 0 || rows < 0;
        outs[i] = bad ? -1 : cg_emit(g, CG_WHERE_ID, "__curve_state", (int[]){X[i], BS[i], M[i], cut, rows, rows, rows},
                                     7, &a);
        if (outs[i] < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    return CATTR_OK;
}

static cattr_status softmax_build(cg_graph *g, int n, cattr_tensor *const *like, int *outs) {
    (void)n, (void)like;
    int y = cg_add_input(g, "__curve_output");
    cg_attrs a = cg_attrs_default();
    a.axis = -1;
    outs[0] = y < 0 ? -1 : cg_emit(g, CG_SOFTMAX, "__curve_softmax", &y, 1, &a);
    return outs[0] < 0 ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : CATTR_OK;
}

typedef struct {
    double s;
    int64_t f;
} scored;

static int by_score(const void *pa, const void *pb) { /* descending, ties by feature */
    const scored *a = pa, *b = pb;
    if (a->s != b->s) return a->s > b->s ? -1 : 1;
    return (a->f > b->f) - (a->f < b->f);
}

/* The rank of every element's feature per example: ranks[i] int64 of input i's shape; *F the number of features. */
static cattr_status feature_ranks(const cx_call *c, cattr_tensor *const *A, cattr_tensor **ranks, int64_t *F_out) {
    pt_masks pm;
    cattr_status st = cx_pt_masks_load(c, NULL, &pm);
    if (st == CATTR_OK) st = cx_pt_features_first_seen(&pm);
    int64_t F = pm.F, B = c->B;
    scored *sc = st == CATTR_OK ? malloc((size_t)(F + 1) * sizeof *sc) : NULL;
    int64_t *rank = st == CATTR_OK ? malloc((size_t)(F + 1) * sizeof *rank) : NULL;
    int64_t **fid = calloc(MAX_IN, sizeof *fid); /* the feature ordinal of each mask position */
    if (st == CATTR_OK && (!sc || !rank || !fid)) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        int64_t np = pm.rows[i] * pm.per[i];
        if (!(fid[i] = malloc((size_t)(np + 1) * sizeof *fid[i]))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        for (int64_t p = 0; p < np && st == CATTR_OK; p++) fid[i][p] = cx_pt_feature_of(&pm, pm.ids[i][p]);
        if (st == CATTR_OK && !(ranks[i] = cx_tensor_alloc(CATTR_INT64, c->x[i]->ndim, c->x[i]->shape)))
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    for (int64_t b = 0; b < B && st == CATTR_OK; b++) {
        for (int64_t f = 0; f < F; f++) sc[f] = (scored){0, f};
        for (int i = 0; i < c->n; i++) {
            const int64_t *q = fid[i] + (pm.rows[i] == 1 ? 0 : b * pm.per[i]);
            for (int64_t k = 0; k < pm.per[i]; k++)
                if (q[k] >= 0) sc[q[k]].s += cx_tensor_get(A[i], b * pm.per[i] + k);
        }
        qsort(sc, (size_t)F, sizeof *sc, by_score);
        for (int64_t r = 0; r < F; r++) rank[sc[r].f] = r;
        for (int i = 0; i < c->n; i++) {
            const int64_t *q = fid[i] + (pm.rows[i] == 1 ? 0 : b * pm.per[i]);
            int64_t *out = (int64_t *)ranks[i]->data + b * pm.per[i];
            for (int64_t k = 0; k < pm.per[i]; k++) out[k] = q[k] >= 0 ? rank[q[k]] : INT64_MAX; /* never moved */
        }
    }
    if (fid)
        for (int i = 0; i < MAX_IN; i++) free(fid[i]);
    free(fid);
    free(sc);
    free(rank);
    cx_pt_masks_free(&pm);
    *F_out = F;
    return st;
}

/* The scores of R = B * m states (rows b * m + s) at the target: the output's, or its softmax's. */
static cattr_status score_states(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, int64_t m, bool softmax,
                                 double *y) {
    if (!softmax) return cx_forward_select(e, c, xs, NULL, m, CX_INTERLEAVE, y, NULL);
    cattr_tensor *out = NULL, *p = NULL;
    cattr_status st = cx_forward(e, c, xs, NULL, m, CX_INTERLEAVE, &out);
    char s[128];
    if (st == CATTR_OK && out->ndim != 2)
        st = cx_fail(CATTR_ERR_UNSUPPORTED, "softmax scores need a [batch, classes] model output (it has shape %s)",
                     cx_shape_str(out->ndim, out->shape, s, sizeof s));
    cx_helper *h = NULL;
    if (st == CATTR_OK) st = cx_helper_get(e, CX_H_CURVE_SOFTMAX, c, 1, &out, softmax_build, &h);
    if (st == CATTR_OK && !(p = cx_tensor_alloc(out->dtype, out->ndim, out->shape)))
        st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) {
        cx_arg in = cx_arg_of(out);
        void *res[1] = {p->data};
        st = cx_small_run(e, &h->d, &in, 1, h->outs, 1, res, NULL);
    }
    if (st == CATTR_OK) st = cx_select(c, p, m, CX_INTERLEAVE, y);
    cattr_tensor_free(out);
    cattr_tensor_free(p);
    return st;
}

cattr_status cattr_deletion_curve(cattr_explainer *e, const cattr_call *call, const cattr_tensor *const *attributions,
                                  int insertion, int64_t n_steps, int softmax, int64_t steps_per_pass,
                                  cattr_tensor **curve, cattr_tensor **auc) {
    if (curve) *curve = NULL;
    if (auc) *auc = NULL;
    if (!e || !call || !attributions || !curve || !auc)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explainer, call, attributions, curve and auc are required");
    if (n_steps < 1 || n_steps > 100000)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_steps must be from 1 to 100000 (got %lld)", (long long)n_steps);
    if (steps_per_pass < 0)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "steps_per_pass must be >= 0 (0: every step in one pass; got %lld)",
                       (long long)steps_per_pass);
    cx_call c;
    cattr_status st = cx_prepare(e, call, &c);
    if (st == CATTR_OK) st = cx_build_grad_graph(e, call->n_inputs);
    int n = call->n_inputs;
    int64_t B = st == CATTR_OK ? c.B : 0, K = n_steps + 1; /* K points: 0, 1/n_steps, ..., 1 of the features */
    cattr_tensor *A[MAX_IN] = {0}, *M[MAX_IN] = {0}, *Z[MAX_IN] = {0}, *S[MAX_IN] = {0};
    char s1[128], s2[128];
    for (int i = 0; i < n && st == CATTR_OK; i++) {
        if (c.x[i]->dtype != CATTR_FLOAT32 && c.x[i]->dtype != CATTR_FLOAT64)
            st = cx_fail(CATTR_ERR_DTYPE, "input %d is %s: deletion and insertion curves need float inputs", i,
                         cattr_dtype_name(c.x[i]->dtype));
        else if (c.x[i]->ndim < 1)
            st = cx_fail(CATTR_ERR_SHAPE, "input %d is a scalar: the curves need a batch of examples (dim 0)", i);
        else if (!attributions[i]) st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "attributions[%d] is NULL", i);
        else if (!cx_shape_eq(attributions[i]->ndim, attributions[i]->shape, c.x[i]->ndim, c.x[i]->shape))
            st = cx_fail(CATTR_ERR_SHAPE, "attributions[%d] has shape %s; input %d has %s", i,
                         cx_shape_str(attributions[i]->ndim, attributions[i]->shape, s1, sizeof s1), i,
                         cx_shape_str(c.x[i]->ndim, c.x[i]->shape, s2, sizeof s2));
        if (st == CATTR_OK) st = cattr_tensor_convert(attributions[i], CATTR_FLOAT64, &A[i]);
        if (st == CATTR_OK && !c.base[i]) { /* a distribution method's explainer: zeros */
            if (!(Z[i] = cx_tensor_alloc(c.dt, c.x[i]->ndim, c.x[i]->shape)))
                st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            else memset(Z[i]->data, 0, (size_t)Z[i]->numel * cattr_dtype_size(c.dt));
        }
    }
    int64_t F = 0;
    if (st == CATTR_OK) st = feature_ranks(&c, A, M, &F);
    int64_t m = steps_per_pass == 0 || steps_per_pass > K ? K : steps_per_pass;
    double *y = st == CATTR_OK ? malloc((size_t)(B * m + 1) * sizeof *y) : NULL;
    int64_t *cut = st == CATTR_OK ? malloc((size_t)(B * m + 1) * sizeof *cut) : NULL;
    int64_t *rows = st == CATTR_OK ? malloc((size_t)(B * m + 1) * sizeof *rows) : NULL;
    cattr_tensor *cv = st == CATTR_OK ? cx_tensor_alloc(c.dt, 2, (int64_t[]){B, K}) : NULL;
    cattr_tensor *ar = st == CATTR_OK ? cx_tensor_alloc(c.dt, 1, &B) : NULL;
    if (st == CATTR_OK && (!y || !cut || !rows || !cv || !ar)) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cx_helper *h = NULL;
    if (st == CATTR_OK && B > 0) st = cx_helper_get(e, CX_H_CURVE, &c, n, c.x, curve_build, &h);
    for (int64_t k0 = 0; k0 < K && B > 0 && st == CATTR_OK; k0 += m) {
        int64_t mk = K - k0 < m ? K - k0 : m, R = B * mk;
        for (int64_t r = 0; r < R; r++) {
            int64_t k = k0 + r % mk;
            rows[r] = r / mk;
            cut[r] = (k * F + n_steps / 2) / n_steps - 1; /* the round(k F / n_steps) first features move */
        }
        cx_arg in[3 * MAX_IN + 2];
        for (int i = 0; i < n && st == CATTR_OK; i++) {
            const cattr_tensor *base = c.base[i] ? c.base[i] : Z[i];
            in[3 * i] = cx_arg_of(insertion ? base : c.x[i]);
            in[3 * i + 1] = cx_arg_of(insertion ? c.x[i] : base);
            in[3 * i + 2] = cx_arg_of(M[i]);
            int64_t sh[CATTR_MAX_DIMS];
            memcpy(sh, c.x[i]->shape, sizeof sh);
            sh[0] = R;
            if (!(S[i] = cx_tensor_alloc(c.dt, c.x[i]->ndim, sh))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        }
        if (st == CATTR_OK) {
            in[3 * n] = (cx_arg){.nd = 1, .sh = {R}, .dt = CATTR_INT64, .host = cut};
            in[3 * n + 1] = (cx_arg){.nd = 1, .sh = {R}, .dt = CATTR_INT64, .host = rows};
            void *res[MAX_IN];
            for (int i = 0; i < n; i++) res[i] = S[i]->data;
            st = cx_small_run(e, &h->d, in, 3 * n + 2, h->outs, n, res, NULL);
        }
        if (st == CATTR_OK) st = score_states(e, &c, S, mk, softmax != 0, y);
        for (int64_t r = 0; r < R && st == CATTR_OK; r++) cx_tensor_set(cv, (r / mk) * K + k0 + r % mk, y[r]);
        for (int i = 0; i < n; i++) {
            cattr_tensor_free(S[i]);
            S[i] = NULL;
        }
    }
    for (int64_t b = 0; b < B && st == CATTR_OK; b++) { /* the trapezoid rule over [0, 1] */
        double s = 0;
        for (int64_t k = 0; k + 1 < K; k++) s += 0.5 * (cx_tensor_get(cv, b * K + k) + cx_tensor_get(cv, b * K + k + 1));
        cx_tensor_set(ar, b, s / (double)n_steps);
    }
    if (st == CATTR_OK) {
        *curve = cv;
        *auc = ar;
    } else {
        cattr_tensor_free(cv);
        cattr_tensor_free(ar);
    }
    free(y);
    free(cut);
    free(rows);
    for (int i = 0; i < MAX_IN; i++) {
        cattr_tensor_free(A[i]);
        cattr_tensor_free(M[i]);
        cattr_tensor_free(Z[i]);
    }
    cx_call_free(&c);
    return st;
}
