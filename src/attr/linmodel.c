/* linmodel.c - weighted Lasso and weighted least squares in float32, as sklearn 1.x fits them for Captum's Lime and
 * KernelShap (see linmodel.h). The operation order follows sklearn and numpy on float32 arrays: numpy's pairwise
 * float32 sums for the weighted means, the Cython coordinate descent of sklearn's _cd_fast.enet_coordinate_descent
 * with BLAS level-1 calls, and LAPACK's sgelsd for the minimum-norm least-squares solution, so the fits agree with
 * the recorded ones to float32 rounding (and, for Lasso, to the convergence tolerance).
 */
#include "attr/linmodel.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* LAPACK from OpenBLAS (32-bit integers). */
extern void sgelsd_(const int *m, const int *n, const int *nrhs, float *a, const int *lda, float *b, const int *ldb,
                    float *s, const float *rcond, int *rank, float *work, const int *lwork, int *iwork, int *info);

/* ---- numpy's float32 reductions ------------------------------------------------------------------------------ */

/* numpy's pairwise summation of n floats at stride `stride` (add.reduce over a contiguous axis): blocks of up to 128
 * summed with eight accumulators, larger ranges split in halves at multiples of 8. */
static float np_pairwise(const float *a, int64_t n, int64_t stride) {
    if (n < 8) {
        float r = -0.0f;
        for (int64_t i = 0; i < n; i++) r += a[i * stride];
        return r;
    }
    if (n <= 128) {
        float r[8], res;
        int64_t i;
        for (int k = 0; k < 8; k++) r[k] = a[k * stride];
        for (i = 8; i < n - (n % 8); i += 8)
            for (int k = 0; k < 8; k++) r[k] += a[(i + k) * stride];
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i * stride];
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return np_pairwise(a, n2, stride) + np_pairwise(a + n2 * stride, n - n2, stride);
}

/* ---- shared preprocessing ------------------------------------------------------------------------------------ */

/* The centred, sqrt(w)-scaled problem of sklearn's _preprocess_data + _rescale_data: Xc (column-major, n x m),
 * yc, and the weighted means x_off, y_off. `pairwise_cols`: the column means are pairwise sums (Lasso converts X to
 * Fortran order first); otherwise rows are added one after the other (LinearRegression keeps numpy's C order). */
typedef struct {
    float *Xc, *yc, *x_off;
    float y_off;
} centred;

static void centred_free(centred *c) { /* leaves it empty: freeing it again is harmless */
    free(c->Xc);
    free(c->yc);
    free(c->x_off);
    memset(c, 0, sizeof *c);
}

static cattr_status check_data(int64_t n, int64_t m, const float *X, const float *y, const float *w) {
    if (n < 1 || m < 1)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "a linear model needs samples and features (got %lld x %lld)",
                       (long long)n, (long long)m);
    if (!X || !y || !w) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "linear model data is NULL");
    bool any = false;
    for (int64_t i = 0; i < n; i++) {
        if (!(w[i] >= 0) || isinf(w[i]))
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "sample weight %lld is %g: weights must be finite and >= 0",
                           (long long)i, (double)w[i]);
        if (!isfinite(y[i]))
            return cx_fail(CATTR_ERR_NONFINITE, "the model output of sample %lld is %g", (long long)i, (double)y[i]);
        any |= w[i] > 0;
    }
    if (!any) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "every sample weight is 0");
    return CATTR_OK;
}

static cattr_status centre(int64_t n, int64_t m, const float *X, const float *y, const float *sw, bool pairwise_cols,
                           centred *c) {
    memset(c, 0, sizeof *c);
    c->Xc = malloc((size_t)(n * m) * sizeof(float));
    c->yc = malloc((size_t)n * sizeof(float));
    c->x_off = malloc((size_t)m * sizeof(float));
    float *tmp = calloc((size_t)n + 1, sizeof(float));
    if (!c->Xc || !c->yc || !c->x_off || !tmp) {
        free(tmp);
        centred_free(c);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory for a linear model of %lld x %lld", (long long)n,
                       (long long)m);
    }
    float scl = np_pairwise(sw, n, 1); /* np.average: sum(a * w) / sum(w), in float32 */
    for (int64_t j = 0; j < m; j++) {
        float s;
        if (pairwise_cols) {
            for (int64_t i = 0; i < n; i++) tmp[i] = X[i * m + j] * sw[i];
            s = np_pairwise(tmp, n, 1);
        } else {
            s = 0.0f;
            for (int64_t i = 0; i < n; i++) s += X[i * m + j] * sw[i];
        }
        c->x_off[j] = s / scl;
    }
    for (int64_t i = 0; i < n; i++) tmp[i] = y[i] * sw[i];
    c->y_off = np_pairwise(tmp, n, 1) / scl;
    for (int64_t i = 0; i < n; i++) tmp[i] = sqrtf(sw[i]);
    for (int64_t j = 0; j < m; j++)
        for (int64_t i = 0; i < n; i++) c->Xc[j * n + i] = (X[i * m + j] - c->x_off[j]) * tmp[i];
    for (int64_t i = 0; i < n; i++) c->yc[i] = (y[i] - c->y_off) * tmp[i];
    free(tmp);
    return CATTR_OK;
}

/* intercept = y_off - x_off . coef (np.dot in float32) */
static float intercept_of(const centred *c, int64_t m, const float *coef) {
    return c->y_off - cblas_sdot((int)m, c->x_off, 1, coef, 1);
}

/* ---- Lasso ---------------------------------------------------------------------------------------------------- */

/* sklearn's enet_coordinate_descent with l2 penalty 0, cyclic, not positive, in float32. X column-major n x m. */
static int lasso_cd(int n, int m, const float *X, const float *y, float alpha, int max_iter, float tol_in, float *w,
                    float *R, float *XtA, float *norm_cols) {
    const float d_w_tol = tol_in;
    for (int j = 0; j < m; j++) { /* np.square(X).sum(axis=0) on a Fortran array: pairwise per column */
        for (int i = 0; i < n; i++) R[i] = X[(size_t)j * n + i] * X[(size_t)j * n + i];
        norm_cols[j] = np_pairwise(R, n, 1);
    }
    memcpy(R, y, (size_t)n * sizeof *R); /* R = y - X w with w = 0 */
    float tol = tol_in * cblas_sdot(n, y, 1, y, 1);
    int n_iter = 0;
    for (n_iter = 0; n_iter < max_iter; n_iter++) {
        float w_max = 0.0f, d_w_max = 0.0f;
        for (int ii = 0; ii < m; ii++) {
            const float *col = X + (size_t)ii * n;
            if (norm_cols[ii] == 0.0f) continue;
            float w_ii = w[ii];
            if (w_ii != 0.0f) cblas_saxpy(n, w_ii, col, 1, R, 1);
            float tmp = cblas_sdot(n, col, 1, R, 1);
            /* fsign(tmp) * fmax(fabs(tmp) - alpha, 0) / (norm_cols[ii] + beta): double arithmetic, one rounding */
            double mag = fabs((double)tmp) - (double)alpha;
            double sgn = tmp == 0.0f ? 0.0 : (tmp > 0.0f ? 1.0 : -1.0);
            w[ii] = (float)(sgn * (mag > 0.0 ? mag : 0.0) / (double)norm_cols[ii]);
            if (w[ii] != 0.0f) cblas_saxpy(n, -w[ii], col, 1, R, 1);
            float d_w_ii = fabsf(w[ii] - w_ii);
            if (d_w_ii > d_w_max) d_w_max = d_w_ii;
            if (fabsf(w[ii]) > w_max) w_max = fabsf(w[ii]);
        }
        if (w_max == 0.0f || d_w_max / w_max < d_w_tol || n_iter == max_iter - 1) {
            /* the duality gap as the final stopping criterion */
            cblas_sgemv(CblasColMajor, CblasTrans, n, m, 1.0f, X, n, R, 1, 0.0f, XtA, 1);
            float dual_norm = 0.0f;
            for (int j = 0; j < m; j++)
                if (fabsf(XtA[j]) > dual_norm) dual_norm = fabsf(XtA[j]);
            float r_norm2 = cblas_sdot(n, R, 1, R, 1), cnst, gap;
            if (dual_norm > alpha) {
                cnst = alpha / dual_norm;
                float a_norm2 = r_norm2 * (cnst * cnst);
                gap = 0.5f * (r_norm2 + a_norm2);
            } else {
                cnst = 1.0f;
                gap = r_norm2;
            }
            float l1 = cblas_sasum(m, w, 1);
            gap += alpha * l1 - cnst * cblas_sdot(n, R, 1, y, 1);
            if (gap < tol) break;
        }
    }
    return n_iter < max_iter ? n_iter + 1 : max_iter;
}

cattr_status cx_lasso_fit(int64_t n, int64_t m, const float *X, const float *y, const float *w,
                          const cx_lasso_opts *opts, float *coef, float *intercept, int *n_iter) {
    CX_CHECK(check_data(n, m, X, y, w));
    if (!opts || !(opts->alpha >= 0) || !(opts->tol >= 0) || opts->max_iter < 1)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "Lasso needs alpha >= 0, tol >= 0 and max_iter >= 1");
    if (n > INT32_MAX || m > INT32_MAX)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "a linear model of %lld x %lld is too large", (long long)n, (long long)m);
    float *sw = malloc((size_t)n * sizeof *sw), *R = malloc((size_t)n * sizeof *R);
    float *XtA = malloc((size_t)m * sizeof *XtA), *nc = malloc((size_t)m * sizeof *nc);
    centred c;
    memset(&c, 0, sizeof c);
    cattr_status st = sw && R && XtA && nc ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) {
        /* sample_weight * (n_samples / np.sum(sample_weight)): the factor is a double, the product float32 */
        double f = (double)n / (double)np_pairwise(w, n, 1);
        for (int64_t i = 0; i < n; i++) sw[i] = (float)((double)w[i] * f);
        st = centre(n, m, X, y, sw, true, &c);
    }
    if (st == CATTR_OK) {
        memset(coef, 0, (size_t)m * sizeof *coef);
        float alpha = (float)(opts->alpha * (double)n); /* enet_path: alpha * l1_ratio * n_samples */
        int it = lasso_cd((int)n, (int)m, c.Xc, c.yc, alpha, opts->max_iter, (float)opts->tol, coef, R, XtA, nc);
        if (n_iter) *n_iter = it;
        *intercept = intercept_of(&c, m, coef);
    }
    centred_free(&c);
    free(sw);
    free(R);
    free(XtA);
    free(nc);
    return st;
}

/* ---- weighted least squares ----------------------------------------------------------------------------------- */

cattr_status cx_linreg_fit(int64_t n, int64_t m, const float *X, const float *y, const float *w, float *coef,
                           float *intercept) {
    CX_CHECK(check_data(n, m, X, y, w));
    if (n > INT32_MAX || m > INT32_MAX)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "a linear model of %lld x %lld is too large", (long long)n, (long long)m);
    centred c;
    CX_CHECK(centre(n, m, X, y, w, false, &c));
    int N = (int)n, M = (int)m, nrhs = 1, ldb = N > M ? N : M, rank = 0, info = 0, lwork = -1, iwq = 0;
    int kmin = N < M ? N : M;
    /* scipy.linalg.lstsq(X, y, cond=max(X.shape) * eps) as sklearn >= 1.6 calls it */
    float rcond = (float)ldb * FLT_EPSILON, wq = 0;
    float *b = calloc((size_t)ldb, sizeof *b), *s = malloc((size_t)kmin * sizeof *s), *work = NULL;
    int *iwork = NULL;
    cattr_status st = b && s ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) {
        memcpy(b, c.yc, (size_t)n * sizeof *b);
        sgelsd_(&N, &M, &nrhs, c.Xc, &N, b, &ldb, s, &rcond, &rank, &wq, &lwork, &iwq, &info);
        if (info != 0) st = cx_fail(CATTR_ERR_INTERNAL, "sgelsd workspace query failed (info %d)", info);
    }
    if (st == CATTR_OK) {
        lwork = (int)nextafterf(wq, INFINITY) + 1;
        work = malloc((size_t)lwork * sizeof *work);
        iwork = malloc((size_t)(iwq > 1 ? iwq : 1) * sizeof *iwork);
        if (!work || !iwork) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK) {
        sgelsd_(&N, &M, &nrhs, c.Xc, &N, b, &ldb, s, &rcond, &rank, work, &lwork, iwork, &info);
        if (info != 0)
            st = cx_fail(CATTR_ERR_INTERNAL,
                         "least squares (LAPACK sgelsd) did not converge for %lld samples x %lld features (info %d)",
                         (long long)n, (long long)m, info);
    }
    if (st == CATTR_OK) {
        memcpy(coef, b, (size_t)m * sizeof *coef);
        *intercept = intercept_of(&c, m, coef);
    }
    free(b);
    free(s);
    free(work);
    free(iwork);
    centred_free(&c);
    return st;
}
