/* metrics.c - Captum's captum.metrics on cattr's passes: infidelity (cattr_infidelity) and the measure of
 * sensitivity_max (cattr_sensitivity_max: the explanations come from any cattr method, run by the caller).
 *
 * Infidelity runs the model on the inputs once and on the perturbed inputs in passes of whole samples (the call's
 * forward pass with the target selected on the backend: cx_forward_select, Captum's repeat_interleave row order), and
 * the rest as one small graph per pass on the backend: for input i, P_i [B, m, F_i] (a pass's perturbations), A_i
 * [B, 1, F_i] (the attributions), y0 [B, 1] (F(x)) and y1 [B, m] (F at the perturbed rows):
 *   f = y0 - y1;  d = TorchSum(P_0 A_0, axis 2) + TorchSum(P_1 A_1, axis 2) + ...;
 *   plain: TorchSum((d - f)^2, axis 1);  normalised: TorchSum(d d, 1), TorchSum(d f, 1), TorchSum(f f, 1)
 * in torch's summation order and the compute dtype, the operations Captum does in that order, so that the metric
 * rounds as Captum's does for the same model outputs. The passes' sums add up on the host in the compute dtype (B
 * values a pass, Captum's aggregation), and the per-example formula of B values is the last step. */
#include "attr/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IN CX_MAX_IN

/* The graph for n inputs: inputs P_0..P_{n-1}, A_0..A_{n-1}, y0, y1; outputs as above (1 plain, 3 normalised). */
static cattr_status infid_build(cg_graph *g, int n, bool norm, int *outs) {
    int P[MAX_IN], A[MAX_IN];
    for (int i = 0; i < n; i++) P[i] = cg_add_input(g, "__infid_perturbation");
    for (int i = 0; i < n; i++) A[i] = cg_add_input(g, "__infid_attribution");
    int y0 = cg_add_input(g, "__infid_fx"), y1 = cg_add_input(g, "__infid_fx_perturbed");
    cg_attrs ax2 = cg_attrs_default(), ax1 = cg_attrs_default();
    ax2.n_ints = ax1.n_ints = 1;
    ax2.ints[0] = 2;
    ax1.ints[0] = 1;
    int f = cx_emit2(g, CG_SUB, "__infid_f", y0, y1), d = -1;
    for (int i = 0; i < n; i++) {
        int prod = cx_emit2(g, CG_MUL, "__infid_attr_times_perturbation", A[i], P[i]);
        int s = prod < 0 ? -1 : cg_emit(g, CG_TORCH_SUM, "__infid_d_input", (int[]){prod}, 1, &ax2);
        d = i == 0 ? s : cx_emit2(g, CG_ADD, "__infid_d", d, s);
    }
#define SUM1(name, v) ((v) < 0 ? -1 : cg_emit(g, CG_TORCH_SUM, name, (int[]){v}, 1, &ax1))
    if (norm) {
        outs[0] = SUM1("__infid_dd", cx_emit2(g, CG_MUL, "__infid_d2", d, d));
        outs[1] = SUM1("__infid_df", cx_emit2(g, CG_MUL, "__infid_d_f", d, f));
        outs[2] = SUM1("__infid_ff", cx_emit2(g, CG_MUL, "__infid_f2", f, f));
    } else {
        int r = cx_emit2(g, CG_SUB, "__infid_d_minus_f", d, f);
        outs[0] = SUM1("__infid_sq", cx_emit2(g, CG_MUL, "__infid_sq_terms", r, r));
    }
#undef SUM1
    for (int k = 0; k < (norm ? 3 : 1); k++)
        if (outs[k] < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    return CATTR_OK;
}
static cattr_status infid_build_plain(cg_graph *g, int n, cattr_tensor *const *like, int *outs) {
    (void)like;
    return infid_build(g, n, false, outs);
}
static cattr_status infid_build_norm(cg_graph *g, int n, cattr_tensor *const *like, int *outs) {
    (void)like;
    return infid_build(g, n, true, outs);
}

/* That t has x's shape but for dim 0, which is rows. */
static cattr_status check_rows(const char *what, int i, const cattr_tensor *t, const cattr_tensor *x, int64_t rows) {
    char s1[128], s2[128];
    if (!t) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "%s[%d] is NULL", what, i);
    bool ok = t->ndim == x->ndim && t->ndim >= 1 && t->shape[0] == rows;
    for (int d = 1; ok && d < t->ndim; d++) ok = t->shape[d] == x->shape[d];
    if (!ok) {
        int64_t want[CATTR_MAX_DIMS];
        memcpy(want, x->shape, sizeof want);
        if (x->ndim) want[0] = rows;
        return cx_fail(CATTR_ERR_SHAPE, "%s[%d] has shape %s; input %d (batch %lld) needs %s", what, i,
                       cx_shape_str(t->ndim, t->shape, s1, sizeof s1), i, (long long)x->shape[0],
                       cx_shape_str(x->ndim, want, s2, sizeof s2));
    }
    if (t->dtype != CATTR_FLOAT32 && t->dtype != CATTR_FLOAT64)
        return cx_fail(CATTR_ERR_DTYPE, "%s[%d] is %s; give float32 or float64", what, i, cattr_dtype_name(t->dtype));
    return CATTR_OK;
}

/* Rows b*n + s0 .. b*n + s0 + m - 1 of t ([B * n, ...]) for every b, as a new tensor [B * m, ...]. */
static cattr_status sample_rows(const cattr_tensor *t, int64_t B, int64_t n, int64_t s0, int64_t m, cattr_tensor **out) {
    int64_t sh[CATTR_MAX_DIMS];
    memcpy(sh, t->shape, sizeof sh);
    sh[0] = B * m;
    if (!(*out = cx_tensor_alloc(t->dtype, t->ndim, sh))) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    size_t row = (size_t)(B * n > 0 ? t->numel / (B * n) : 0) * cattr_dtype_size(t->dtype);
    for (int64_t b = 0; b < B; b++)
        memcpy((char *)(*out)->data + (size_t)(b * m) * row, (const char *)t->data + (size_t)(b * n + s0) * row,
               (size_t)m * row);
    return CATTR_OK;
}

cattr_status cattr_infidelity(cattr_explainer *e, const cattr_call *call, const cattr_tensor *const *attributions,
                              const cattr_tensor *const *perturbations, const cattr_tensor *const *perturbed,
                              int64_t n_samples, int normalize, int64_t samples_per_pass, cattr_tensor **out) {
    if (out) *out = NULL;
    if (!e || !call || !attributions || !perturbations || !perturbed || !out)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                       "explainer, call, attributions, perturbations, perturbed and out are required");
    if (n_samples < 1 || n_samples > CX_MAX_SAMPLES)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_samples (perturbations per example) must be from 1 to %d (got %lld)",
                       CX_MAX_SAMPLES, (long long)n_samples);
    if (samples_per_pass < 0)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "samples_per_pass must be >= 0 (0: every sample in one pass; got %lld)",
                       (long long)samples_per_pass);
    cx_call c;
    cattr_status st = cx_prepare(e, call, &c);
    if (st == CATTR_OK) st = cx_build_grad_graph(e, call->n_inputs);
    int n = call->n_inputs;
    int64_t B = st == CATTR_OK ? c.B : 0, N = B * n_samples;
    cattr_tensor *A[MAX_IN] = {0}, *P[MAX_IN] = {0}, *XP[MAX_IN] = {0};
    char s1[128], s2[128];
    for (int i = 0; i < n && st == CATTR_OK; i++) {
        if (!attributions[i]) st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "attributions[%d] is NULL", i);
        else if (!cx_shape_eq(attributions[i]->ndim, attributions[i]->shape, c.x[i]->ndim, c.x[i]->shape))
            st = cx_fail(CATTR_ERR_SHAPE, "attributions[%d] has shape %s; input %d has %s", i,
                         cx_shape_str(attributions[i]->ndim, attributions[i]->shape, s1, sizeof s1), i,
                         cx_shape_str(c.x[i]->ndim, c.x[i]->shape, s2, sizeof s2));
        if (st == CATTR_OK) st = check_rows("perturbations", i, perturbations[i], c.x[i], N);
        if (st == CATTR_OK) st = check_rows("perturbed", i, perturbed[i], c.x[i], N);
        if (st == CATTR_OK) st = cattr_tensor_convert(attributions[i], c.dt, &A[i]);
        if (st == CATTR_OK) st = cattr_tensor_convert(perturbations[i], c.dt, &P[i]);
        if (st == CATTR_OK) st = cattr_tensor_convert(perturbed[i], c.dt, &XP[i]);
    }
    if (st == CATTR_OK && c.x[0]->ndim == 0)
        st = cx_fail(CATTR_ERR_SHAPE, "input 0 is a scalar: infidelity needs a batch of examples (dim 0)");
    int64_t m = samples_per_pass == 0 || samples_per_pass > n_samples ? n_samples : samples_per_pass;
    double *y0 = st == CATTR_OK ? malloc((size_t)(B + B * m + 1) * sizeof *y0) : NULL, *y1 = y0 ? y0 + B : NULL;
    if (st == CATTR_OK && !y0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    /* F(x) at the target (one value per example) */
    if (st == CATTR_OK && B > 0) st = cx_forward_select(e, &c, c.x, NULL, 1, CX_TILE, y0, NULL);
    int n_s = normalize ? 3 : 1;
    cattr_tensor *acc = st == CATTR_OK ? cx_tensor_alloc(c.dt, 1, (int64_t[]){3 * B}) : NULL;
    if (st == CATTR_OK && !acc) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cx_helper *h = NULL;
    if (st == CATTR_OK && B > 0)
        st = cx_helper_get(e, normalize ? CX_H_INFIDELITY_NORM : CX_H_INFIDELITY, &c, n, c.x,
                           normalize ? infid_build_norm : infid_build_plain, &h);
    bool first = true;
    for (int64_t s0 = 0; s0 < n_samples && B > 0 && st == CATTR_OK; s0 += m) {
        int64_t ms = n_samples - s0 < m ? n_samples - s0 : m;
        cattr_tensor *pr[MAX_IN] = {0}, *xr[MAX_IN] = {0}, *ys = NULL, *fx = NULL, *part = NULL;
        bool whole = ms == n_samples; /* one pass: the given rows as they are */
        for (int i = 0; i < n && st == CATTR_OK && !whole; i++) {
            st = sample_rows(P[i], B, n_samples, s0, ms, &pr[i]);
            if (st == CATTR_OK) st = sample_rows(XP[i], B, n_samples, s0, ms, &xr[i]);
        }
        cattr_tensor *const *px = whole ? P : pr, *const *xx = whole ? XP : xr;
        /* F at the perturbed rows, Captum's repeat_interleave order (rows b*ms + s) */
        if (st == CATTR_OK) st = cx_forward_select(e, &c, xx, NULL, ms, CX_INTERLEAVE, y1, NULL);
        if (st == CATTR_OK && (!(fx = cx_tensor_alloc(c.dt, 2, (int64_t[]){B, 1})) ||
                               !(ys = cx_tensor_alloc(c.dt, 2, (int64_t[]){B, ms})) ||
                               !(part = cx_tensor_alloc(c.dt, 1, (int64_t[]){n_s * B}))))
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        for (int64_t b = 0; b < B && st == CATTR_OK; b++) cx_tensor_set(fx, b, y0[b]); /* values of dt already */
        for (int64_t r = 0; r < B * ms && st == CATTR_OK; r++) cx_tensor_set(ys, r, y1[r]);
        cx_arg in[2 * MAX_IN + 2];
        for (int i = 0; i < n && st == CATTR_OK; i++) { /* P_i as [B, ms, F_i], A_i as [B, 1, F_i] */
            int64_t F = c.x[i]->shape[0] ? c.x[i]->numel / c.x[i]->shape[0] : 0;
            in[i] = cx_arg_of(px[i]);
            in[i].nd = 3, in[i].sh[0] = B, in[i].sh[1] = ms, in[i].sh[2] = F;
            in[n + i] = cx_arg_of(A[i]);
            in[n + i].nd = 3, in[n + i].sh[0] = B, in[n + i].sh[1] = 1, in[n + i].sh[2] = F;
        }
        if (st == CATTR_OK) {
            in[2 * n] = cx_arg_of(fx);
            in[2 * n + 1] = cx_arg_of(ys);
            void *res[3];
            size_t es = cattr_dtype_size(c.dt);
            for (int k = 0; k < n_s; k++) res[k] = (char *)part->data + (size_t)(k * B) * es;
            st = cx_small_run(e, &h->d, in, 2 * n + 2, h->outs, n_s, res, NULL);
        }
        /* Captum adds each pass's sums to the running ones (the compute dtype's rounding) */
        for (int64_t k = 0; k < n_s * B && st == CATTR_OK; k++)
            cx_tensor_set(acc, k, first ? cx_tensor_get(part, k)
                                        : cx_rnd(c.dt, cx_tensor_get(acc, k) + cx_tensor_get(part, k)));
        first = false;
        for (int i = 0; i < n; i++) {
            cattr_tensor_free(pr[i]);
            cattr_tensor_free(xr[i]);
        }
        cattr_tensor_free(fx);
        cattr_tensor_free(ys);
        cattr_tensor_free(part);
    }
    cattr_tensor *res = st == CATTR_OK ? cx_tensor_alloc(c.dt, 1, &B) : NULL;
    if (st == CATTR_OK && !res) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_dtype dt = c.dt;
    for (int64_t b = 0; b < B && st == CATTR_OK; b++) { /* Captum's formula, operation by operation */
        double v = cx_tensor_get(acc, b);
        if (normalize) {
            double dd = v, df = cx_tensor_get(acc, B + b), ff = cx_tensor_get(acc, 2 * B + b);
            double beta = cx_rnd(dt, df / (dd != 0 ? dd : 1.0)); /* safe_div: 1 where the denominator is 0 */
            double t1 = cx_rnd(dt, cx_rnd(dt, beta * beta) * dd), t2 = cx_rnd(dt, cx_rnd(dt, 2 * beta) * df);
            v = cx_rnd(dt, cx_rnd(dt, t1 - t2) + ff);
        }
        cx_tensor_set(res, b, cx_rnd(dt, v / (double)n_samples));
    }
    if (st == CATTR_OK) *out = res;
    else cattr_tensor_free(res);
    cattr_tensor_free(acc);
    free(y0);
    for (int i = 0; i < MAX_IN; i++) {
        cattr_tensor_free(A[i]);
        cattr_tensor_free(P[i]);
        cattr_tensor_free(XP[i]);
    }
    cx_call_free(&c);
    return st;
}

/* ---- sensitivity ------------------------------------------------------------------------------------------------
 * The graph for n explanations and a norm: inputs E0_i [B, 1, F_i], E1_i [B, m, F_i], zero, one and the order p
 * ([1] each); per example and sample the norm of the differences over every explanation's elements, divided by the
 * norm of E0 (1 where that is 0), and the largest over the samples: [B]. */
enum { NORM_FRO, NORM_1, NORM_INF, NORM_NEG_INF, NORM_P };

static int sens_norm(cg_graph *g, int kind, int n, const int *x, int p, int invp) {
    cg_attrs ax2 = cg_attrs_default();
    ax2.n_ints = 1;
    ax2.ints[0] = 2;
    int acc = -1;
    for (int i = 0; i < n; i++) {
        int a = kind == NORM_FRO ? cx_emit2(g, CG_MUL, "__sens_sq", x[i], x[i])
                                 : x[i] < 0 ? -1 : cg_emit(g, CG_ABS, "__sens_abs", (int[]){x[i]}, 1, NULL);
        if (kind == NORM_P) a = cx_emit2(g, CG_POW, "__sens_pow", a, p);
        cg_op red = kind == NORM_INF ? CG_REDUCE_MAX : kind == NORM_NEG_INF ? CG_REDUCE_MIN : CG_REDUCE_SUM;
        int r = a < 0 ? -1 : cg_emit(g, red, "__sens_reduce", (int[]){a}, 1, &ax2);
        cg_op join = kind == NORM_INF ? CG_MAX : kind == NORM_NEG_INF ? CG_MIN : CG_ADD;
        acc = i == 0 ? r : cx_emit2(g, join, "__sens_join", acc, r);
    }
    if (kind == NORM_FRO) return acc < 0 ? -1 : cg_emit(g, CG_SQRT, "__sens_sqrt", (int[]){acc}, 1, NULL);
    if (kind == NORM_P) return cx_emit2(g, CG_POW, "__sens_root", acc, invp);
    return acc;
}

static cattr_status sens_build(cg_graph *g, int n, int kind, int *out) {
    int e0[MAX_IN], e1[MAX_IN], diff[MAX_IN];
    for (int i = 0; i < n; i++) e0[i] = cg_add_input(g, "__sens_expl");
    for (int i = 0; i < n; i++) e1[i] = cg_add_input(g, "__sens_expl_perturbed");
    int zero = cg_add_input(g, "__sens_zero"), one = cg_add_input(g, "__sens_one"), p = cg_add_input(g, "__sens_p"),
        invp = cg_add_input(g, "__sens_inv_p");
    for (int i = 0; i < n; i++) diff[i] = cx_emit2(g, CG_SUB, "__sens_diff", e0[i], e1[i]);
    int num = sens_norm(g, kind, n, diff, p, invp), den = sens_norm(g, kind, n, e0, p, invp);
    int is0 = cx_emit2(g, CG_EQUAL, "__sens_den_is_0", den, zero);
    int safe = is0 < 0 || one < 0 || den < 0 ? -1 : cg_emit(g, CG_WHERE, "__sens_den", (int[]){is0, one, den}, 3, NULL);
    int ratio = cx_emit2(g, CG_DIV, "__sens_ratio", num, safe);
    cg_attrs ax1 = cg_attrs_default();
    ax1.n_ints = 1;
    ax1.ints[0] = 1;
    *out = ratio < 0 ? -1 : cg_emit(g, CG_REDUCE_MAX, "__sens_max", (int[]){ratio}, 1, &ax1);
    return *out < 0 ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : CATTR_OK;
}

cattr_status cattr_sensitivity_max(const char *device, const cattr_tensor *const *expl,
                                   const cattr_tensor *const *expl_perturbed, int n, int64_t n_samples,
                                   double norm_ord, cattr_tensor **out) {
    if (out) *out = NULL;
    if (!expl || !expl_perturbed || !out)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "expl, expl_perturbed and out are required");
    if (n < 1 || n > CATTR_MAX_INPUTS)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n (explanation tensors) must be from 1 to %d (got %d)",
                       CATTR_MAX_INPUTS, n);
    if (n_samples < 1 || n_samples > CX_MAX_SAMPLES)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_samples must be from 1 to %d (got %lld)", CX_MAX_SAMPLES,
                       (long long)n_samples);
    int kind = norm_ord == 2 ? NORM_FRO : norm_ord == 1 ? NORM_1 : norm_ord == INFINITY ? NORM_INF
               : norm_ord == -INFINITY ? NORM_NEG_INF : NORM_P;
    if (kind == NORM_P && !(norm_ord > 0 && isfinite(norm_ord)))
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "norm_ord %g: give 'fro' (2), 1, inf, -inf or a positive order",
                       norm_ord);
    cattr_dtype dt = CATTR_FLOAT32;
    int64_t B = -1;
    char s1[128], s2[128];
    for (int i = 0; i < n; i++) {
        const cattr_tensor *a = expl[i], *b = expl_perturbed[i];
        if (!a || !b) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explanation %d is NULL", i);
        if (a->ndim < 1) return cx_fail(CATTR_ERR_SHAPE, "explanation %d is a scalar: it needs a batch (dim 0)", i);
        if (B < 0) B = a->shape[0];
        bool ok = a->shape[0] == B && b->ndim == a->ndim && b->shape[0] == B * n_samples;
        for (int d = 1; ok && d < a->ndim; d++) ok = a->shape[d] == b->shape[d];
        if (!ok) {
            int64_t want[CATTR_MAX_DIMS];
            memcpy(want, a->shape, sizeof want);
            want[0] = B * n_samples;
            return cx_fail(CATTR_ERR_SHAPE, "the explanation %d of the perturbed inputs has shape %s; for %lld samples "
                           "of %lld examples it needs %s", i, cx_shape_str(b->ndim, b->shape, s1, sizeof s1),
                           (long long)n_samples, (long long)B, cx_shape_str(b->ndim, want, s2, sizeof s2));
        }
        for (int k = 0; k < 2; k++) {
            cattr_dtype t = (k ? b : a)->dtype;
            if (t != CATTR_FLOAT32 && t != CATTR_FLOAT64)
                return cx_fail(CATTR_ERR_DTYPE, "explanation %d is %s; give float32 or float64", i, cattr_dtype_name(t));
            if (t == CATTR_FLOAT64) dt = CATTR_FLOAT64;
        }
    }
    cx_backend *be = NULL;
    CX_CHECK(cx_backend_by_name(device, &be));
    cattr_tensor *conv[2 * MAX_IN] = {0}, *sc[4] = {0}, *res = NULL;
    cg_graph *g = cg_new();
    cx_consts *consts = NULL;
    int y = -1;
    cattr_status st = g ? sens_build(g, n, kind, &y) : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) st = cx_consts_new(be, dt, &consts);
    for (int k = 0; k < 2 * n && st == CATTR_OK; k++)
        st = cattr_tensor_convert(k < n ? expl[k] : expl_perturbed[k - n], dt, &conv[k]);
    const double vals[4] = {0, 1, norm_ord, 1 / norm_ord};
    for (int k = 0; k < 4 && st == CATTR_OK; k++) {
        if (!(sc[k] = cx_tensor_alloc(dt, 1, (int64_t[]){1}))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else cx_tensor_set(sc[k], 0, vals[k]);
    }
    if (st == CATTR_OK && !(res = cx_tensor_alloc(dt, 1, &B))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK && B > 0) {
        cx_arg in[2 * MAX_IN + 4];
        for (int k = 0; k < 2 * n; k++) { /* E0_i as [B, 1, F_i], E1_i as [B, n_samples, F_i] */
            const cattr_tensor *t = conv[k];
            int64_t F = t->shape[0] ? t->numel / t->shape[0] : 0;
            in[k] = cx_arg_of(t);
            in[k].nd = 3, in[k].sh[0] = B, in[k].sh[1] = k < n ? 1 : n_samples, in[k].sh[2] = F;
        }
        for (int k = 0; k < 4; k++) in[2 * n + k] = cx_arg_of(sc[k]);
        void *dst[1] = {res->data};
        cx_job j = {.g = g, .consts = consts, .n_in = 2 * n + 4, .in = in, .n_out = 1, .outs = &y, .out_host = dst};
        st = cx_run(&j);
    }
    if (st == CATTR_OK) *out = res;
    else cattr_tensor_free(res);
    for (int k = 0; k < 2 * MAX_IN; k++) cattr_tensor_free(conv[k]);
    for (int k = 0; k < 4; k++) cattr_tensor_free(sc[k]);
    cx_consts_free(consts); /* and the plans made for it */
    cg_free(g);
    return st;
}
