/* linmodel.h - the interpretable models behind Lime and KernelShap, fitted the way Captum fits them: the data (0/1
 * samples X, model outputs y, similarities w) are float32 and sklearn keeps them float32, so both solvers work in
 * float32 with sklearn's operation order (see shared/reference/captum_spec.md section 7).
 *
 *  - cx_lasso_fit: sklearn.linear_model.Lasso(alpha).fit(X, y, sample_weight=w): weights rescaled to sum to n,
 *    weighted centering, rows scaled by sqrt(w), cyclic coordinate descent with soft thresholding at alpha * n
 *    (tol 1e-4 on the duality gap, max_iter 1000), intercept = y_mean - x_mean . coef.
 *  - cx_linreg_fit: sklearn.linear_model.LinearRegression().fit(X, y, sample_weight=w): weighted centering, rows
 *    scaled by sqrt(w), minimum-norm least squares by LAPACK sgelsd (as scipy.linalg.lstsq), same intercept.
 *
 * X is n x m, row-major. Both write m coefficients to coef and the intercept to *intercept. */
#ifndef CATTR_ATTR_LINMODEL_H
#define CATTR_ATTR_LINMODEL_H

#include "core/core.h"

/* Lasso's solver settings (sklearn's defaults: tol 1e-4, max_iter 1000). */
typedef struct cx_lasso_opts {
    double alpha;
    double tol;
    int max_iter;
} cx_lasso_opts;

#define CX_LASSO_DEFAULTS(a) ((cx_lasso_opts){(a), 1e-4, 1000})

/* Errors: CATTR_ERR_INVALID_ARGUMENT (n or m < 1, a negative or all-zero weight, alpha < 0), CATTR_ERR_NO_MEMORY.
 * *n_iter (may be NULL) receives the number of coordinate-descent sweeps. */
cattr_status cx_lasso_fit(int64_t n, int64_t m, const float *X, const float *y, const float *w,
                          const cx_lasso_opts *opts, float *coef, float *intercept, int *n_iter);

/* Errors: CATTR_ERR_INVALID_ARGUMENT (n or m < 1, a negative or all-zero weight), CATTR_ERR_NO_MEMORY,
 * CATTR_ERR_INTERNAL (LAPACK failed to converge). */
cattr_status cx_linreg_fit(int64_t n, int64_t m, const float *X, const float *y, const float *w, float *coef,
                           float *intercept);

#endif
