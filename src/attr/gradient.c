/* gradient.c - the gradient family: Saliency, InputXGradient and IntegratedGradients (Captum semantics, see
 * shared/reference/captum_spec.md section 2). IG runs its whole integration path as one batched pass, or a few
 * chunks of steps when the memory budget (or Captum's internal_batch_size) asks for it. */
#include "attr/internal.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Saliency and InputXGradient -------------------------------------------------------------------------------- */

static cattr_status plain_gradient(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    CX_CHECK(cx_grad(e, c, c->x, 1, CX_TILE, attr));
    for (int i = 0; i < c->n; i++)
        for (int64_t k = 0; k < attr[i]->numel; k++) {
            double g = cx_tensor_get(attr[i], k);
            if (e->p.method == CATTR_METHOD_SALIENCY) g = e->p.abs ? fabs(g) : g;
            else g = cx_rnd(c->dt, g * cx_tensor_get(c->x[i], k));
            cx_tensor_set(attr[i], k, g);
        }
    return CATTR_OK;
}

const cx_method cx_method_saliency = {CATTR_METHOD_SALIENCY, "saliency", "Saliency", false, NULL, plain_gradient, NULL};
const cx_method cx_method_input_x_gradient = {CATTR_METHOD_INPUT_X_GRADIENT, "input-x-gradient", "InputXGradient",
                                              false, NULL, plain_gradient, NULL};

/* ---- Integrated Gradients ----------------------------------------------------------------------------------- */

static cattr_status ig_init(cattr_explainer *e) {
    const cattr_attr_params *p = &e->p;
    if (p->n_steps < 1) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_steps must be at least 1 (got %d)", p->n_steps);
    if (p->quadrature < CATTR_QUAD_RIEMANN_LEFT || p->quadrature > CATTR_QUAD_GAUSS_LEGENDRE)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "unknown quadrature %d", (int)p->quadrature);
    if (p->quadrature != CATTR_QUAD_GAUSS_LEGENDRE && p->n_steps < 2)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "riemann rules need n_steps >= 2 (got %d)", p->n_steps);
    if (p->internal_batch_size < 0) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "internal_batch_size must be positive");
    return CATTR_OK;
}

/* Steps per chunk: Captum's rule for internal_batch_size, else as many as the memory budget allows. */
static cattr_status steps_per_chunk(cattr_explainer *e, cx_call *c, int n_steps, int *out) {
    if (e->p.internal_batch_size > 0) {
        int64_t k = e->p.internal_batch_size / (c->B ? c->B : 1);
        *out = (int)(k < 1 ? 1 : (k > n_steps ? n_steps : k));
        return CATTR_OK;
    }
    size_t budget = cx_memory_budget(e), row = 0;
    CX_CHECK(cx_row_bytes(e, c, true, &row));
    size_t per_step = row * (size_t)(c->B ? c->B : 1);
    size_t k = per_step ? budget / per_step : (size_t)n_steps;
    if (k < 1) {
        cx_log(CATTR_LOG_WARN, "the memory budget (%zu bytes) is below one step (%zu bytes); running one step per "
                               "chunk", budget, per_step);
        k = 1;
    }
    *out = (int)(k > (size_t)n_steps ? (size_t)n_steps : k);
    cx_log(CATTR_LOG_INFO, "%d of %d steps per chunk (%.1f MiB per step, budget %.1f MiB)", *out, n_steps,
           (double)per_step / 1048576.0, (double)budget / 1048576.0);
    return CATTR_OK;
}

/* The IG path in the compute dtype T, operation by operation as Captum/torch computes it:
 * scaled = b + alpha * (x - b); total = sum_s grad_s * step_s (sequential); attr = total * (x - b). */
#define DEFINE_IG_KERNELS(T, SFX)                                                                                      \
    static void ig_scale_##SFX(const T *x, const T *b, int64_t m, const double *alphas, int s0, int s1, T *xs) {     \
        for (int s = s0; s < s1; s++) {                                                                                \
            T a = (T)alphas[s];                                                                                        \
            T *dst = xs + (int64_t)(s - s0) * m;                                                                       \
            for (int64_t k = 0; k < m; k++) dst[k] = b[k] + a * (x[k] - b[k]);                                         \
        }                                                                                                              \
    }                                                                                                                  \
    static void ig_accumulate_##SFX(const T *gr, const T *x, const T *b, int64_t m, const double *steps, int s0,      \
                                    int s1, int mul, int first, T *attr) {                                             \
        for (int64_t k = 0; k < m; k++) {                                                                              \
            T tot = 0;                                                                                                 \
            for (int s = s0; s < s1; s++) tot = tot + gr[(int64_t)(s - s0) * m + k] * (T)steps[s];                    \
            T v = mul ? tot * (x[k] - b[k]) : tot;                                                                     \
            attr[k] = first ? v : attr[k] + v;                                                                         \
        }                                                                                                              \
    }
DEFINE_IG_KERNELS(float, f32)
DEFINE_IG_KERNELS(double, f64)

/* Captum's points for the explainer's rule, computed once: alphas cast to the dtype, step sizes to float32. */
static cattr_status ig_points(cattr_explainer *e) {
    int n = e->p.n_steps;
    if (e->alphas) return CATTR_OK;
    e->alphas = malloc((size_t)n * sizeof *e->alphas);
    e->steps = malloc((size_t)n * sizeof *e->steps);
    if (!e->alphas || !e->steps) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_status st = cattr_quadrature_points(e->p.quadrature, n, e->alphas, e->steps);
    if (st != CATTR_OK) {
        free(e->alphas);
        free(e->steps);
        e->alphas = e->steps = NULL;
        return st;
    }
    for (int s = 0; s < n; s++) {
        e->steps[s] = (double)(float)e->steps[s]; /* Captum multiplies with float32 step sizes in every dtype */
        e->alphas[s] = cx_rnd(e->p.dtype, e->alphas[s]); /* and casts alpha to the input dtype */
    }
    return CATTR_OK;
}

/* Scaled inputs of steps [s0, s1) for every input into xs (allocated). */
static cattr_status ig_scaled(cx_call *c, const double *alphas, int s0, int s1, cattr_tensor **xs) {
    for (int i = 0; i < c->n; i++) {
        int64_t sh[CATTR_MAX_DIMS];
        memcpy(sh, c->x[i]->shape, sizeof sh);
        sh[0] *= s1 - s0;
        xs[i] = cx_tensor_alloc(c->dt, c->x[i]->ndim, sh);
        if (!xs[i]) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        int64_t m = c->x[i]->numel;
        if (c->dt == CATTR_FLOAT32) ig_scale_f32(c->x[i]->data, c->base[i]->data, m, alphas, s0, s1, xs[i]->data);
        else ig_scale_f64(c->x[i]->data, c->base[i]->data, m, alphas, s0, s1, xs[i]->data);
    }
    return CATTR_OK;
}

/* part[i] = the contribution of steps [s0, s1) to input i's attribution (a new tensor). */
static cattr_status ig_part(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, int s0, int s1, int slot,
                            cattr_tensor **part) {
    cattr_tensor *gr[CX_MAX_IN] = {0};
    cattr_status st = cx_grad_slot(e, c, xs, s1 - s0, CX_TILE, gr, slot);
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        part[i] = cx_tensor_alloc(c->dt, c->x[i]->ndim, c->x[i]->shape);
        if (!part[i]) {
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            break;
        }
        int64_t m = c->x[i]->numel;
        if (c->dt == CATTR_FLOAT32)
            ig_accumulate_f32(gr[i]->data, c->x[i]->data, c->base[i]->data, m, e->steps, s0, s1, e->p.multiply_by_inputs,
                              1, part[i]->data);
        else
            ig_accumulate_f64(gr[i]->data, c->x[i]->data, c->base[i]->data, m, e->steps, s0, s1, e->p.multiply_by_inputs,
                              1, part[i]->data);
    }
    for (int i = 0; i < CX_MAX_IN; i++) cattr_tensor_free(gr[i]);
    return st;
}

/* Small paths run as two halves of the steps at once (on two cores when there are), each with its own plan: one fork
 * and join per call, where kernels too small to parallelise would fork per op. The halves are added in order: the same
 * numbers as running them one after the other as two chunks, whatever the thread count. */
static cattr_status ig_two_halves(cattr_explainer *e, cx_call *c, cattr_tensor **attr, double *delta_sel) {
    int n = e->p.n_steps, h = (n + 1) / 2;
    cattr_tensor *xa[CX_MAX_IN] = {0}, *xb[CX_MAX_IN] = {0}, *pa[CX_MAX_IN] = {0}, *pb[CX_MAX_IN] = {0};
    cattr_status st = ig_scaled(c, e->alphas, 0, h, xa);
    if (st == CATTR_OK) st = ig_scaled(c, e->alphas, h, n, xb);
    if (st == CATTR_OK) st = cx_grad_prepare(e, c, xa, h, CX_TILE, 0);
    if (st == CATTR_OK) st = cx_grad_prepare(e, c, xb, n - h, CX_TILE, 1);
    if (st == CATTR_OK && delta_sel) st = cx_delta_prepare(e, c, c->base);
    /* three tasks, taken by whichever thread is free: the two halves and the delta's forward pass */
    cattr_status ts[3] = {CATTR_OK, CATTR_OK, CATTR_OK};
    char msg[3][512] = {"", "", ""};
    int tasks = delta_sel ? 3 : 2;
    if (st == CATTR_OK) {
        /* two threads at most, one where the user limits OpenMP to one (OMP_NUM_THREADS=1): the kernels inside size
         * their per-thread scratch from the team they run in, so either count is safe, and the sums are the same */
        int nt = omp_get_max_threads() < 2 ? 1 : 2;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
        for (int t = 0; t < tasks; t++) {
            ts[t] = t == 0   ? ig_part(e, c, xa, 0, h, 0, pa)
                    : t == 1 ? ig_part(e, c, xb, h, n, 1, pb)
                             : cx_delta_forward(e, c, c->base, delta_sel);
            if (ts[t] != CATTR_OK) snprintf(msg[t], sizeof msg[t], "%s", cattr_last_error());
        }
        for (int t = 0; t < tasks && st == CATTR_OK; t++)
            if (ts[t] != CATTR_OK) st = cx_fail(ts[t], "%s", msg[t]);
    }
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        attr[i] = cx_tensor_alloc(c->dt, c->x[i]->ndim, c->x[i]->shape);
        if (!attr[i]) {
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            break;
        }
        for (int64_t k = 0; k < attr[i]->numel; k++)
            cx_tensor_set(attr[i], k, cx_rnd(c->dt, cx_tensor_get(pa[i], k) + cx_tensor_get(pb[i], k)));
    }
    for (int i = 0; i < CX_MAX_IN; i++) {
        cattr_tensor_free(xa[i]);
        cattr_tensor_free(xb[i]);
        cattr_tensor_free(pa[i]);
        cattr_tensor_free(pb[i]);
    }
    if (st == CATTR_OK && e->p.progress) e->p.progress(n, n, e->p.progress_user);
    return st;
}

/* Whether a path is small enough that its kernels run on one core each (see PAR_MIN), so that two halves at once
 * pay; big paths parallelise inside their kernels instead. */
static bool ig_split_pays(const cattr_explainer *e, const cx_call *c, int chunk) {
    /* decided by sizes alone, never by the thread count, so that the numbers do not depend on the machine */
    if (e->p.internal_batch_size > 0 || chunk < e->p.n_steps || e->p.n_steps < 4) return false;
    int64_t elems = 0;
    for (int i = 0; i < c->n; i++) elems += c->x[i]->numel;
    /* below ~1k input elements a fork costs more than the whole pass (an MLP on a few features) */
    return elems * e->p.n_steps >= 1024 && elems * e->p.n_steps <= ((int64_t)1 << 16);
}

static cattr_status integrated_gradients(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    int n = e->p.n_steps;
    cattr_dtype dt = c->dt;
    cattr_tensor *xs[CX_MAX_IN] = {0}, *gr[CX_MAX_IN] = {0};
    cattr_status st = ig_points(e);
    const double *alphas = e->alphas, *steps = e->steps;
    int chunk = n;
    if (st == CATTR_OK) st = steps_per_chunk(e, c, n, &chunk);
    if (st == CATTR_OK && ig_split_pays(e, c, chunk)) {
        bool want = delta && e->p.return_convergence_delta;
        double *sel = want ? malloc((size_t)(2 * c->B + 1) * sizeof *sel) : NULL;
        if (want && !sel) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        st = ig_two_halves(e, c, attr, sel);
        if (st == CATTR_OK && want) cx_keep_fx(e, sel, c->B);
        if (st == CATTR_OK && want) st = cx_delta_finish(c, attr, sel, delta);
        free(sel);
        return st;
    }
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        attr[i] = cx_tensor_alloc(dt, c->x[i]->ndim, c->x[i]->shape);
        if (!attr[i]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    for (int s0 = 0; s0 < n && st == CATTR_OK; s0 += chunk) {
        int s1 = s0 + chunk < n ? s0 + chunk : n, reps = s1 - s0;
        for (int i = 0; i < c->n && st == CATTR_OK; i++) {
            int64_t sh[CATTR_MAX_DIMS];
            memcpy(sh, c->x[i]->shape, sizeof sh);
            sh[0] *= reps;
            if (!xs[i] || xs[i]->shape[0] != sh[0]) {
                cattr_tensor_free(xs[i]);
                xs[i] = cx_tensor_alloc(dt, c->x[i]->ndim, sh);
                if (!xs[i]) {
                    st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
                    break;
                }
            }
            int64_t m = c->x[i]->numel;
            if (dt == CATTR_FLOAT32) ig_scale_f32(c->x[i]->data, c->base[i]->data, m, alphas, s0, s1, xs[i]->data);
            else ig_scale_f64(c->x[i]->data, c->base[i]->data, m, alphas, s0, s1, xs[i]->data);
        }
        if (st == CATTR_OK) st = cx_grad(e, c, xs, reps, CX_TILE, gr);
        for (int i = 0; i < c->n && st == CATTR_OK; i++) {
            int64_t m = c->x[i]->numel;
            if (dt == CATTR_FLOAT32)
                ig_accumulate_f32(gr[i]->data, c->x[i]->data, c->base[i]->data, m, steps, s0, s1,
                                  e->p.multiply_by_inputs, s0 == 0, attr[i]->data);
            else
                ig_accumulate_f64(gr[i]->data, c->x[i]->data, c->base[i]->data, m, steps, s0, s1,
                                  e->p.multiply_by_inputs, s0 == 0, attr[i]->data);
        }
        for (int i = 0; i < c->n; i++) {
            cattr_tensor_free(gr[i]);
            gr[i] = NULL;
        }
        if (st == CATTR_OK && e->p.progress) e->p.progress(s1, n, e->p.progress_user);
    }
    for (int i = 0; i < CX_MAX_IN; i++) cattr_tensor_free(xs[i]);
    if (st == CATTR_OK && delta && e->p.return_convergence_delta) st = cx_convergence_delta(e, c, attr, c->base, delta);
    return st;
}

const cx_method cx_method_integrated_gradients = {CATTR_METHOD_INTEGRATED_GRADIENTS, "integrated-gradients",
                                                  "IntegratedGradients", false, ig_init, integrated_gradients, NULL};

