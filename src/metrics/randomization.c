/* randomization.c - the model-randomisation check (Adebayo et al., "Sanity Checks for Saliency Maps", NeurIPS 2018):
 * a method's attributions on the trained model against those on copies whose weights are drawn anew, module by module
 * from the output down (cascading) or one module at a time, compared by Spearman's rank correlation per example
 * (cattr_rank_correlation). An attribution that barely changes when the weights it should explain are gone is not
 * explaining the model. The copies come from cattr_model_randomize; each runs the method with the caller's
 * parameters through a new explainer (its own plans), so the check costs one attribution call per module. */
#include "attr/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double v;
    int64_t i;
} ranked;

static int by_value(const void *pa, const void *pb) {
    const ranked *a = pa, *b = pb;
    if (a->v != b->v) return a->v < b->v ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

/* The ranks (1..F, ties averaged, as scipy.stats.rankdata) of x into r; tmp holds F entries. */
static void rank_of(const double *x, int64_t F, ranked *tmp, double *r) {
    for (int64_t k = 0; k < F; k++) tmp[k] = (ranked){x[k], k};
    qsort(tmp, (size_t)F, sizeof *tmp, by_value);
    for (int64_t k = 0; k < F;) {
        int64_t e = k;
        while (e + 1 < F && tmp[e + 1].v == tmp[k].v) e++;
        double avg = 0.5 * (double)(k + e) + 1.0;
        for (int64_t q = k; q <= e; q++) r[tmp[q].i] = avg;
        k = e + 1;
    }
}

cattr_status cattr_rank_correlation(const cattr_tensor *const *a, const cattr_tensor *const *b, int n, int absolute,
                                    cattr_tensor **out) {
    if (out) *out = NULL;
    if (!a || !b || !out) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "a, b and out are required");
    if (n < 1 || n > CATTR_MAX_INPUTS + CATTR_MAX_OUTPUTS)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n (tensors) must be from 1 to %d (got %d)",
                       CATTR_MAX_INPUTS + CATTR_MAX_OUTPUTS, n);
    int64_t B = -1, F = 0;
    char s1[128], s2[128];
    for (int i = 0; i < n; i++) {
        if (!a[i] || !b[i]) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "tensor %d is NULL", i);
        if (!cx_shape_eq(a[i]->ndim, a[i]->shape, b[i]->ndim, b[i]->shape))
            return cx_fail(CATTR_ERR_SHAPE, "tensor %d has shapes %s and %s", i,
                           cx_shape_str(a[i]->ndim, a[i]->shape, s1, sizeof s1),
                           cx_shape_str(b[i]->ndim, b[i]->shape, s2, sizeof s2));
        if (a[i]->ndim < 1) return cx_fail(CATTR_ERR_SHAPE, "tensor %d is a scalar: it needs a batch (dim 0)", i);
        if (B < 0) B = a[i]->shape[0];
        if (a[i]->shape[0] != B)
            return cx_fail(CATTR_ERR_SHAPE, "tensor %d has %lld examples, tensor 0 %lld", i, (long long)a[i]->shape[0],
                           (long long)B);
        F += B ? a[i]->numel / B : 0;
    }
    cattr_tensor *res = cx_tensor_alloc(CATTR_FLOAT64, 1, &B);
    double *x = malloc((size_t)(2 * F + 1) * sizeof *x), *rx = malloc((size_t)(2 * F + 1) * sizeof *rx);
    ranked *tmp = malloc((size_t)(F + 1) * sizeof *tmp);
    if (!res || !x || !rx || !tmp) {
        cattr_tensor_free(res);
        free(x);
        free(rx);
        free(tmp);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    for (int64_t e = 0; e < B; e++) {
        for (int side = 0; side < 2; side++) {
            int64_t at = 0;
            for (int i = 0; i < n; i++) {
                const cattr_tensor *t = side ? b[i] : a[i];
                int64_t per = t->numel / B;
                for (int64_t k = 0; k < per; k++) {
                    double v = cx_tensor_get(t, e * per + k);
                    x[side * F + at++] = absolute ? fabs(v) : v;
                }
            }
            rank_of(x + side * F, F, tmp, rx + side * F);
        }
        /* Pearson's correlation of the ranks (NaN where one side's ranks are all equal, as scipy's) */
        double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
        for (int64_t k = 0; k < F; k++) ma += rx[k], mb += rx[F + k];
        ma /= (double)F, mb /= (double)F;
        for (int64_t k = 0; k < F; k++) {
            double da = rx[k] - ma, db = rx[F + k] - mb;
            sab += da * db, saa += da * da, sbb += db * db;
        }
        ((double *)res->data)[e] = saa > 0 && sbb > 0 ? sab / sqrt(saa * sbb) : NAN;
    }
    free(x);
    free(rx);
    free(tmp);
    *out = res;
    return CATTR_OK;
}

cattr_status cattr_randomization_check(const cattr_model *m, const cattr_attr_params *p, const cattr_call *call,
                                       const cattr_tensor *const *attributions, int n_attr,
                                       const char *const *modules, int n_modules, int cascade, uint64_t seed,
                                       cattr_tensor **spearman, cattr_tensor **spearman_abs) {
    if (spearman) *spearman = NULL;
    if (spearman_abs) *spearman_abs = NULL;
    if (!m || !p || !call || !attributions || !modules || !spearman || !spearman_abs)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "model, params, call, attributions, modules and the outputs are "
                                                   "required");
    if (n_modules < 1) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "give at least one module to randomise");
    if (n_attr < 1 || n_attr > CATTR_MAX_OUTPUTS)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_attr must be from 1 to %d (got %d)", CATTR_MAX_OUTPUTS, n_attr);
    int64_t B = attributions[0] && attributions[0]->ndim ? attributions[0]->shape[0] : 0;
    cattr_tensor *sp = cx_tensor_alloc(CATTR_FLOAT64, 2, (int64_t[]){n_modules, B});
    cattr_tensor *sa = cx_tensor_alloc(CATTR_FLOAT64, 2, (int64_t[]){n_modules, B});
    cattr_status st = sp && sa ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int k = 0; k < n_modules && st == CATTR_OK; k++) {
        cattr_model *r = NULL;
        cattr_explainer *e = NULL;
        cattr_tensor *attr[CATTR_MAX_OUTPUTS] = {0}, *c1 = NULL, *c2 = NULL;
        /* cascading: the modules from the first given (the output's end) to this one; else this one alone */
        st = cascade ? cattr_model_randomize(m, modules, k + 1, seed, &r)
                     : cattr_model_randomize(m, modules + k, 1, seed, &r);
        if (st == CATTR_OK) st = cattr_explainer_new(r, p, &e);
        if (st == CATTR_OK) st = cattr_explainer_run(e, call, attr, NULL);
        int got = 0;
        while (st == CATTR_OK && got < CATTR_MAX_OUTPUTS && attr[got]) got++;
        if (st == CATTR_OK && got != n_attr)
            st = cx_fail(CATTR_ERR_SHAPE, "the randomised model gave %d attributions; the attributions given are %d",
                         got, n_attr);
        if (st == CATTR_OK) st = cattr_rank_correlation(attributions, (const cattr_tensor *const *)attr, n_attr, 0, &c1);
        if (st == CATTR_OK) st = cattr_rank_correlation(attributions, (const cattr_tensor *const *)attr, n_attr, 1, &c2);
        if (st == CATTR_OK && (c1->numel != B || c2->numel != B))
            st = cx_fail(CATTR_ERR_SHAPE, "the attributions have %lld examples; the call's %lld", (long long)c1->numel,
                         (long long)B);
        if (st == CATTR_OK) {
            memcpy((double *)sp->data + (size_t)k * (size_t)B, c1->data, (size_t)B * sizeof(double));
            memcpy((double *)sa->data + (size_t)k * (size_t)B, c2->data, (size_t)B * sizeof(double));
        } else {
            char why[512];
            snprintf(why, sizeof why, "%s", cattr_last_error());
            cx_fail(st, "randomising '%s': %s", modules[k] ? modules[k] : "(null)", why);
        }
        for (int i = 0; i < CATTR_MAX_OUTPUTS; i++) cattr_tensor_free(attr[i]);
        cattr_tensor_free(c1);
        cattr_tensor_free(c2);
        cattr_explainer_free(e);
        cattr_model_free(r);
    }
    if (st != CATTR_OK) {
        cattr_tensor_free(sp);
        cattr_tensor_free(sa);
        return st;
    }
    *spearman = sp;
    *spearman_abs = sa;
    return CATTR_OK;
}
