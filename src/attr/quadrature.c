/* quadrature.c - Captum's integration rules for Integrated Gradients and its relatives (captum.attr._utils.
 * approximation_methods), reproduced bit for bit:
 *  - riemann_{left,right,middle,trapezoid}: step sizes 1/n as doubles (trapezoid halves the two ends); alphas from a
 *    float32 torch.linspace, emulating the exact operation order of torch 1.13's CPU kernel;
 *  - gausslegendre: numpy.polynomial.legendre.leggauss(n) (eigenvalues of the symmetric companion matrix, one Newton
 *    step, weights from P_{n-1} and P_n', symmetrised and rescaled), then alphas = 0.5*(1+x), steps = 0.5*w.
 * Every floating-point operation below is written in the order the reference performs it; contraction of a*b+c into
 * a fused multiply-add is switched off (the one fused operation torch performs is spelled out with fmaf). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "core/core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* LAPACK (OpenBLAS exports it, 32-bit integers): eigenvalues of a symmetric tridiagonal matrix, ascending.
 * d[n]: diagonal (overwritten by the eigenvalues); e[n-1]: off-diagonal (destroyed). */
extern void dsterf_(const int *n, double *d, double *e, int *info);

/* ------------------------------------------------------------------------------------------------------------ */
/* Names                                                                                                         */
/* ------------------------------------------------------------------------------------------------------------ */

static const char *const k_quad_names[] = {
    [CATTR_QUAD_RIEMANN_LEFT] = "riemann_left",
    [CATTR_QUAD_RIEMANN_RIGHT] = "riemann_right",
    [CATTR_QUAD_RIEMANN_MIDDLE] = "riemann_middle",
    [CATTR_QUAD_RIEMANN_TRAPEZOID] = "riemann_trapezoid",
    [CATTR_QUAD_GAUSS_LEGENDRE] = "gausslegendre",
};
_Static_assert(CX_ARRAY_LEN(k_quad_names) == CATTR_QUAD_GAUSS_LEGENDRE + 1, "quadrature name table out of step");

/* Compares `name` with `ref`, treating '-' in `name` as '_'. */
static int name_matches(const char *name, const char *ref) {
    for (; *name && *ref; name++, ref++) {
        char c = *name == '-' ? '_' : *name;
        if (c != *ref) return 0;
    }
    return *name == '\0' && *ref == '\0';
}

int cattr_quadrature_from_name(const char *name) {
    if (!name) return -1;
    for (size_t i = 0; i < CX_ARRAY_LEN(k_quad_names); i++)
        if (name_matches(name, k_quad_names[i])) return (int)i;
    /* "gauss_legendre" / "gauss-legendre": the natural spelling of Captum's "gausslegendre". */
    if (name_matches(name, "gauss_legendre")) return CATTR_QUAD_GAUSS_LEGENDRE;
    return -1;
}

const char *cattr_quadrature_name(cattr_quadrature q) {
    if ((unsigned)q < CX_ARRAY_LEN(k_quad_names)) return k_quad_names[q];
    return "?";
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Riemann rules: torch.linspace(start, end, n) in float32                                                        */
/* ------------------------------------------------------------------------------------------------------------ */

/* Correctly rounded float32 product and sum. A product of two floats is exact in double and the sum of two floats
 * rounded once to double and then to float equals the correctly rounded float sum (53 >= 2*24+2), so these give
 * IEEE float arithmetic whatever the compiler's contraction or excess-precision settings. */
static float f32_mul(float a, float b) { return (float)((double)a * (double)b); }
static float f32_add(float a, float b) { return (float)((double)a + (double)b); }
static float f32_sub(float a, float b) { return (float)((double)a - (double)b); }

/* torch 1.13 CPU linspace_kernel for float32 as the AVX2 build dispatches it (verified against torch for every n up
 * to 3000):
 *   step = (end - start) / (n - 1)                          (float)
 *   value(i) = i < n/2 ? start + step*i : end - step*(n-1-i)  (one fused multiply-add: the AVX2 kernel is compiled
 *                                                               with FMA contraction)
 * The output is filled by cpu_serial_kernel_vec: pairs of 8-float vectors while at least 16 elements remain, each
 * vector being arange(value(i0), step) = value(i0) + j*step (j = 0..7, multiply and add rounded separately, the
 * branch taken once per vector at its first index), then the scalar value(i) for the tail. With more than 32768
 * points torch splits the range over threads (at::parallel_for grain size), which makes its result depend on the
 * thread count; this emulates one thread for every n. */
static float linspace_value(float start, float end, float step, int64_t n, int64_t i) {
    if (i < n / 2) return fmaf(step, (float)i, start);
    return fmaf(-step, (float)(n - 1 - i), end);
}

static void torch_linspace_f32(double start_d, double end_d, int64_t n, double *out) {
    enum { VEC = 8 }; /* Vectorized<float>::size() under AVX2 */
    const float start = (float)start_d, end = (float)end_d;
    const float step = f32_sub(end, start) / (float)(n - 1);
    int64_t i = 0;
    for (; i <= n - 2 * VEC; i += 2 * VEC) {
        for (int64_t v = i; v < i + 2 * VEC; v += VEC) {
            const float base = linspace_value(start, end, step, n, v);
            for (int j = 0; j < VEC; j++) out[v + j] = (double)f32_add(base, f32_mul((float)j, step));
        }
    }
    for (; i < n; i++) out[i] = (double)linspace_value(start, end, step, n, i);
}

static void riemann_points(cattr_quadrature q, int n, double *alphas, double *steps) {
    if (steps) {
        const double d = 1.0 / (double)n;
        for (int i = 0; i < n; i++) steps[i] = d;
        if (q == CATTR_QUAD_RIEMANN_TRAPEZOID) {
            steps[0] /= 2.0;
            steps[n - 1] /= 2.0;
        }
    }
    if (!alphas) return;
    const double dn = (double)n;
    switch (q) {
    case CATTR_QUAD_RIEMANN_TRAPEZOID: torch_linspace_f32(0.0, 1.0, n, alphas); break;
    case CATTR_QUAD_RIEMANN_LEFT: torch_linspace_f32(0.0, 1.0 - 1.0 / dn, n, alphas); break;
    case CATTR_QUAD_RIEMANN_MIDDLE: torch_linspace_f32(1.0 / (2.0 * dn), 1.0 - 1.0 / (2.0 * dn), n, alphas); break;
    case CATTR_QUAD_RIEMANN_RIGHT: torch_linspace_f32(1.0 / dn, 1.0, n, alphas); break;
    case CATTR_QUAD_GAUSS_LEGENDRE: break;
    }
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Gauss-Legendre: numpy.polynomial.legendre.leggauss                                                             */
/* ------------------------------------------------------------------------------------------------------------ */

/* numpy legval(x, c) for one point: Clenshaw recurrence on Legendre coefficients c[0..len-1], in numpy's order. */
static double np_legval(double x, const double *c, int len) {
    double c0, c1;
    if (len == 1) {
        c0 = c[0];
        c1 = 0.0;
    } else if (len == 2) {
        c0 = c[0];
        c1 = c[1];
    } else {
        int nd = len;
        c0 = c[len - 2];
        c1 = c[len - 1];
        for (int i = 3; i <= len; i++) {
            const double tmp = c0;
            nd = nd - 1;
            c0 = c[len - i] - (c1 * (double)(nd - 1)) / (double)nd;
            c1 = tmp + (c1 * x * (double)(2 * nd - 1)) / (double)nd;
        }
    }
    return c0 + c1 * x;
}

/* numpy legder(c) (first derivative, scl = 1): c[0..len-1] -> der[0..len-2]; c is used as scratch. len >= 2. All
 * values are small integers, so this is exact. */
static void np_legder(double *c, int len, double *der) {
    const int n = len - 1;
    for (int j = n; j > 2; j--) {
        der[j - 1] = (double)(2 * j - 1) * c[j];
        c[j - 2] += c[j];
    }
    if (n > 1) der[1] = 3.0 * c[2];
    der[0] = c[1];
}

/* numpy's pairwise summation of a contiguous double array (DOUBLE_pairwise_sum, block 128, 8 accumulators), as
 * np.add.reduce uses it; the reduction starts from the identity 0.0. */
static double np_pairwise_sum(const double *a, size_t n) {
    if (n < 8) {
        double res = 0.0;
        for (size_t i = 0; i < n; i++) res += a[i];
        return res;
    }
    if (n <= 128) {
        double r[8];
        for (int k = 0; k < 8; k++) r[k] = a[k];
        size_t i = 8;
        for (; i < n - (n % 8); i += 8)
            for (int k = 0; k < 8; k++) r[k] += a[i + k];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    }
    size_t n2 = n / 2;
    n2 -= n2 % 8;
    return np_pairwise_sum(a, n2) + np_pairwise_sum(a + n2, n - n2);
}

static double max_abs(const double *a, int n) {
    double m = fabs(a[0]);
    for (int i = 1; i < n; i++)
        if (fabs(a[i]) > m) m = fabs(a[i]);
    return m;
}

/* leggauss(n) as numpy 1.24 computes it (legendre.py), followed by Captum's scaling to [0, 1]. Verified bit-exact
 * (alphas and unrounded steps) against numpy with Debian's OpenBLAS LAPACK for every n up to 1000. */
static cattr_status gauss_legendre_points(int n, double *alphas, double *steps) {
    /* Scratch (doubles): c[n+1] = [0]*n + [1] (P_n as a Legendre series), cd[n+1] (legder's copy of c), der[n]
     * (P_n'), x[n], df[n], fm[n], w[n], e[n] (companion off-diagonal). */
    const size_t un = (size_t)n;
    double *buf = cx_malloc(sizeof(double) * (un * 8 + 2));
    if (!buf) return cx_fail(CATTR_ERR_NO_MEMORY, "gausslegendre: cannot allocate scratch for %d points", n);
    double *c = buf, *cd = c + un + 1, *der = cd + un + 1, *x = der + un, *df = x + un, *fm = df + un, *w = fm + un,
           *e = w + un;

    /* 1. x = eigvalsh(legcompanion(c)). For n == 1 the companion is the 1x1 matrix [-c[0]/c[1]] = [-0.0]. Otherwise
     *    it is symmetric tridiagonal with a zero diagonal and off-diagonal k*scl[k-1]*scl[k], scl[j] = 1/sqrt(2j+1)
     *    (the last-column correction subtracts zeros). numpy's eigvalsh runs LAPACK dsyevd, whose tridiagonal
     *    reduction leaves such a matrix as it is (every Householder reflector is the identity) before calling
     *    dsterf, so calling dsterf on the diagonal and off-diagonal gives the same eigenvalues in O(n) memory. */
    if (n == 1) {
        x[0] = -0.0;
    } else {
        for (int k = 1; k < n; k++) {
            const double s0 = 1.0 / sqrt((double)(2 * (k - 1) + 1));
            const double s1 = 1.0 / sqrt((double)(2 * k + 1));
            e[k - 1] = (double)k * s0 * s1;
        }
        for (int i = 0; i < n; i++) x[i] = 0.0;
        int info = 0;
        dsterf_(&n, x, e, &info);
        if (info != 0) {
            free(buf);
            return cx_fail(CATTR_ERR_INTERNAL, "gausslegendre: LAPACK dsterf failed for n=%d (info %d)", n, info);
        }
    }

    /* 2. One Newton step: dy = legval(x, c), df = legval(x, legder(c)), x -= dy/df. */
    for (int i = 0; i < n; i++) c[i] = 0.0;
    c[n] = 1.0;
    memcpy(cd, c, sizeof(double) * (un + 1));
    np_legder(cd, n + 1, der);
    for (int i = 0; i < n; i++) {
        const double dy = np_legval(x[i], c, n + 1);
        df[i] = np_legval(x[i], der, n);
        x[i] -= dy / df[i];
    }

    /* 3. Weights: fm = legval(x, c[1:]) (P_{n-1} at the refined nodes), df (P_n' at the unrefined nodes), each
     *    divided by its largest magnitude, w = 1/(fm*df). */
    for (int i = 0; i < n; i++) fm[i] = np_legval(x[i], c + 1, n);
    const double fm_max = max_abs(fm, n), df_max = max_abs(df, n);
    for (int i = 0; i < n; i++) {
        fm[i] /= fm_max;
        df[i] /= df_max;
        w[i] = 1.0 / (fm[i] * df[i]);
    }

    /* 4. Symmetrise: w = (w + w[::-1])/2, x = (x - x[::-1])/2 (into new arrays, as numpy does). */
    double *ws = e, *xs = cd; /* e and cd are free now; cd has n+1 >= n entries */
    for (int i = 0; i < n; i++) {
        ws[i] = (w[i] + w[n - 1 - i]) / 2.0;
        xs[i] = (x[i] - x[n - 1 - i]) / 2.0;
    }

    /* 5. Rescale: w *= 2/w.sum(). Then Captum: alphas = 0.5*(1 + x), steps = 0.5*w. */
    const double scale = 2.0 / (0.0 + np_pairwise_sum(ws, un));
    for (int i = 0; i < n; i++) {
        if (alphas) alphas[i] = 0.5 * (1.0 + xs[i]);
        if (steps) steps[i] = 0.5 * (ws[i] * scale);
    }
    free(buf);
    return CATTR_OK;
}

/* The most points a rule computes: the C API's limit of n_steps (CX_MAX_STEPS in attr/internal.h), plus the one more
 * point of LayerConductance */
#define QUAD_MAX_POINTS 1000001

cattr_status cattr_quadrature_points(cattr_quadrature q, int n, double *alphas, double *step_sizes) {
    if ((unsigned)q >= CX_ARRAY_LEN(k_quad_names))
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "quadrature must be one of riemann_left (0), riemann_right (1), "
                       "riemann_middle (2), riemann_trapezoid (3) or gausslegendre (4) (got %d)", (int)q);
    int lo = q == CATTR_QUAD_GAUSS_LEGENDRE ? 1 : 2;
    if (n < lo || n > QUAD_MAX_POINTS)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "quadrature %s needs n_steps from %d to %d (got %d)",
                       cattr_quadrature_name(q), lo, QUAD_MAX_POINTS, n);
    if (q == CATTR_QUAD_GAUSS_LEGENDRE) return gauss_legendre_points(n, alphas, step_sizes);
    riemann_points(q, n, alphas, step_sizes);
    return CATTR_OK;
}
