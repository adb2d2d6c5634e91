/* explainer.c - gradient attribution methods over a model: Saliency, InputXGradient and IntegratedGradients.
 *
 * One explainer holds the model's gradient graph (the forward graph, a seed input and the autodiff nodes for the
 * attributed inputs), the constants uploaded in the compute dtype, and a small cache of plans keyed by input
 * shapes. Everything a call needs (scaled inputs for all steps, the tiled additional inputs, the target mask that
 * seeds the backward pass) is built as whole tensors and run as one batched pass per chunk of steps.
 */
#include "attr/model.h"
#include "graph/autodiff.h"
#include "graph/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PLAN_CACHE 4
#define MAX_IN 16

struct cattr_explainer {
    const cattr_model *m;
    cattr_attr_params p;
    cx_backend *be;
    cx_consts *consts;
    cg_graph *g; /* gradient graph; built for n_attr attributed inputs */
    int n_attr;
    int seed_input; /* graph-input index of the seed */
    int grads[MAX_IN];
    cx_plan *plans[PLAN_CACHE]; /* gradient plans */
    int plan_next;
    cx_plan *fwd[PLAN_CACHE]; /* forward-only plans (delta) */
    int fwd_next;
    size_t peak;
    const cattr_target *cur_target; /* during a call */
    double *alphas, *steps;         /* IG points, computed once */
};

/* ---- names and defaults ------------------------------------------------------------------------------------ */

int cattr_method_from_name(const char *s) {
    if (!s) return -1;
    if (!strcmp(s, "saliency") || !strcmp(s, "Saliency")) return CATTR_METHOD_SALIENCY;
    if (!strcmp(s, "input-x-gradient") || !strcmp(s, "InputXGradient") || !strcmp(s, "input_x_gradient"))
        return CATTR_METHOD_INPUT_X_GRADIENT;
    if (!strcmp(s, "integrated-gradients") || !strcmp(s, "IntegratedGradients") || !strcmp(s, "ig") ||
        !strcmp(s, "integrated_gradients"))
        return CATTR_METHOD_INTEGRATED_GRADIENTS;
    return -1;
}

const char *cattr_method_name(cattr_method m) {
    switch (m) {
    case CATTR_METHOD_SALIENCY: return "saliency";
    case CATTR_METHOD_INPUT_X_GRADIENT: return "input-x-gradient";
    case CATTR_METHOD_INTEGRATED_GRADIENTS: return "integrated-gradients";
    }
    return "?";
}

cattr_attr_params cattr_attr_default_params(cattr_method method) {
    cattr_attr_params p;
    memset(&p, 0, sizeof p);
    p.method = method;
    p.dtype = CATTR_FLOAT32;
    p.n_steps = 50;
    p.quadrature = CATTR_QUAD_GAUSS_LEGENDRE;
    p.internal_batch_size = 0;
    p.max_memory = 0;
    p.multiply_by_inputs = 1;
    p.abs = 1;
    p.return_convergence_delta = 1;
    p.executor = CATTR_EXEC_PLANNED;
    p.check_finite = 1;
    return p;
}

cattr_status cattr_explainer_new(const cattr_model *model, const cattr_attr_params *params, cattr_explainer **out) {
    if (!out) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    if (!model || !params) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "model and params are required");
    const cattr_attr_params *p = params;
    if (p->method < CATTR_METHOD_SALIENCY || p->method > CATTR_METHOD_INTEGRATED_GRADIENTS)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "unknown method %d", (int)p->method);
    if (p->dtype != CATTR_FLOAT32 && p->dtype != CATTR_FLOAT64)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "dtype must be float32 or float64");
    if (p->method == CATTR_METHOD_INTEGRATED_GRADIENTS) {
        if (p->n_steps < 1) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_steps must be at least 1 (got %d)", p->n_steps);
        if (p->quadrature < CATTR_QUAD_RIEMANN_LEFT || p->quadrature > CATTR_QUAD_GAUSS_LEGENDRE)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "unknown quadrature %d", (int)p->quadrature);
        if (p->quadrature != CATTR_QUAD_GAUSS_LEGENDRE && p->n_steps < 2)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "riemann rules need n_steps >= 2 (got %d)", p->n_steps);
        if (p->internal_batch_size < 0)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "internal_batch_size must be positive");
    }
    cattr_explainer *e = calloc(1, sizeof *e);
    if (!e) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    e->m = model;
    e->p = *p;
    e->be = cx_backend_cpu();
    cattr_status st = cx_consts_new(e->be, p->dtype, &e->consts);
    if (st != CATTR_OK) {
        free(e);
        return st;
    }
    *out = e;
    return CATTR_OK;
}

static void drop_plans(cattr_explainer *e) {
    for (int i = 0; i < PLAN_CACHE; i++) {
        cx_plan_free(e->plans[i]);
        cx_plan_free(e->fwd[i]);
        e->plans[i] = e->fwd[i] = NULL;
    }
}

void cattr_explainer_free(cattr_explainer *e) {
    if (!e) return;
    drop_plans(e);
    cg_free(e->g);
    cx_consts_free(e->consts);
    free(e->alphas);
    free(e->steps);
    free(e);
}

size_t cattr_explainer_peak_memory(const cattr_explainer *e) { return e ? e->peak : 0; }

/* Builds the gradient graph for the first n_attr model inputs. */
static cattr_status build_graph(cattr_explainer *e, int n_attr) {
    if (e->g && e->n_attr == n_attr) return CATTR_OK;
    drop_plans(e);
    cg_free(e->g);
    e->g = cg_clone(e->m->g);
    if (!e->g) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    int seed = cg_add_input(e->g, "__cattr_seed__");
    if (seed < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    e->seed_input = e->g->n_inputs - 1;
    cg_rules rules;
    cg_rules_default(&rules);
    CX_CHECK(cg_autodiff(e->g, cx_model_output(e->m), seed, e->g->inputs, n_attr, &rules, e->grads));
    e->n_attr = n_attr;
    return CATTR_OK;
}

/* Returns a cached plan for these input shapes, or makes one (evicting round-robin). */
static cattr_status get_plan(cattr_explainer *e, bool fwd, const int *nd, const int64_t (*sh)[CATTR_MAX_DIMS],
                             const cattr_dtype *dt, cx_plan **out) {
    cx_plan **cache = fwd ? e->fwd : e->plans;
    int *next = fwd ? &e->fwd_next : &e->plan_next;
    for (int i = 0; i < PLAN_CACHE; i++)
        if (cache[i] && cx_plan_matches(cache[i], nd, sh)) {
            *out = cache[i];
            return CATTR_OK;
        }
    int outs[MAX_IN], n_outs;
    if (fwd) {
        outs[0] = cx_model_output(e->m);
        n_outs = 1;
    } else {
        memcpy(outs, e->grads, (size_t)e->n_attr * sizeof(int));
        n_outs = e->n_attr;
    }
    cx_plan *p;
    CX_CHECK(cx_plan_new(e->g, e->consts, e->p.executor == CATTR_EXEC_EAGER, nd, sh, dt, outs, n_outs, &p));
    cx_plan_free(cache[*next]);
    cache[*next] = p;
    *next = (*next + 1) % PLAN_CACHE;
    size_t b = cx_plan_bytes(p);
    if (b > e->peak) e->peak = b;
    *out = p;
    return CATTR_OK;
}

/* ---- validation ------------------------------------------------------------------------------------------- */

static cattr_status check_finite(const cattr_tensor *t, const char *what, int i) {
    for (int64_t k = 0; k < t->numel; k++) {
        double v = cx_tensor_get(t, k);
        if (!isfinite(v))
            return cx_fail(CATTR_ERR_NONFINITE, "%s %d has a non-finite value (%g) at flat index %lld", what, i, v,
                           (long long)k);
    }
    return CATTR_OK;
}

/* Selection mask over one block of B rows of the output (shape osh): 1 where the target picks. */
static cattr_status target_mask(const cattr_target *t, int ond, const int64_t *osh, double *mask) {
    int64_t B = osh[0], per = cx_numel(ond - 1, osh + 1);
    char sh[128];
    memset(mask, 0, (size_t)(B * per) * sizeof *mask);
    cattr_target_kind kind = t ? t->kind : CATTR_TARGET_NONE;
    if (kind == CATTR_TARGET_NONE) {
        if (per != 1)
            return cx_fail(CATTR_ERR_TARGET,
                           "the output has shape %s: give a target that selects one value per example",
                           cx_shape_str(ond, osh, sh, sizeof sh));
        for (int64_t b = 0; b < B; b++) mask[b] = 1;
        return CATTR_OK;
    }
    if (t->n_idx < 0 || t->n_idx > ond - 1 || (t->n_idx > 0 && !t->idx))
        return cx_fail(CATTR_ERR_TARGET, "a target of %d indices does not fit an output of shape %s", t->n_idx,
                       cx_shape_str(ond, osh, sh, sizeof sh));
    if (cx_numel(ond - 1 - t->n_idx, osh + 1 + t->n_idx) != 1)
        return cx_fail(CATTR_ERR_TARGET,
                       "a target of %d indices leaves more than one value per example of an output of shape %s",
                       t->n_idx, cx_shape_str(ond, osh, sh, sizeof sh));
    if (kind == CATTR_TARGET_PER_EXAMPLE && t->n_rows != B)
        return cx_fail(CATTR_ERR_TARGET, "%lld per-example targets given for a batch of %lld", (long long)t->n_rows,
                       (long long)B);
    for (int64_t b = 0; b < B; b++) {
        const int64_t *ix = kind == CATTR_TARGET_PER_EXAMPLE ? t->idx + b * t->n_idx : t->idx;
        int64_t off = 0;
        for (int k = 0; k < t->n_idx; k++) {
            int64_t d = osh[1 + k], v = ix[k];
            if (v < 0 && kind == CATTR_TARGET_INDEX) v += d;
            if (v < 0 || v >= d)
                return cx_fail(CATTR_ERR_TARGET, "target index %lld is out of range for dim %d of size %lld%s",
                               (long long)ix[k], k + 1, (long long)d,
                               kind == CATTR_TARGET_PER_EXAMPLE ? " (per-example target)" : "");
            off = off * d + v;
        }
        mask[b * per + off] = 1;
    }
    return CATTR_OK;
}

/* ---- the attribution ------------------------------------------------------------------------------------- */

typedef struct {
    int n; /* attributed inputs */
    int64_t B;
    cattr_dtype dt;
    cattr_tensor *x[MAX_IN];    /* inputs in dt */
    cattr_tensor *base[MAX_IN]; /* baselines expanded to the inputs' shapes, in dt */
    int n_add;
    cattr_tensor *add[MAX_IN]; /* additional inputs (dt, or int64) */
} call_data;

static void call_free(call_data *c) {
    for (int i = 0; i < MAX_IN; i++) {
        cattr_tensor_free(c->x[i]);
        cattr_tensor_free(c->base[i]);
        cattr_tensor_free(c->add[i]);
    }
}

static cattr_status to_dtype(const cattr_tensor *t, cattr_dtype dt, cattr_tensor **out) {
    return cattr_tensor_convert(t, dt, out);
}

/* Tiles rows of t (batch-major block) `reps` times: out = [t; t; ...]. */
static cattr_tensor *tile_rows(const cattr_tensor *t, int64_t reps) {
    int64_t sh[CATTR_MAX_DIMS];
    memcpy(sh, t->shape, sizeof sh);
    sh[0] *= reps;
    cattr_tensor *o = cx_tensor_alloc(t->dtype, t->ndim, sh);
    if (!o) return NULL;
    size_t bytes = (size_t)t->numel * cattr_dtype_size(t->dtype);
    for (int64_t r = 0; r < reps; r++) memcpy((char *)o->data + r * bytes, t->data, bytes);
    return o;
}

static cattr_status prepare(cattr_explainer *e, const cattr_tensor *const *inputs, int n_inputs,
                            const cattr_tensor *const *baselines, const cattr_tensor *const *additional,
                            int n_additional, call_data *c) {
    const cg_graph *mg = e->m->g;
    cattr_dtype dt = e->p.dtype;
    char s1[128], s2[128];
    memset(c, 0, sizeof *c);
    c->dt = dt;
    if (n_inputs < 1 || !inputs) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "at least one input is required");
    if (n_inputs + n_additional != mg->n_inputs)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                       "the model takes %d inputs; %d attributed + %d additional were given", mg->n_inputs, n_inputs,
                       n_additional);
    if (mg->n_inputs >= MAX_IN) return cx_fail(CATTR_ERR_UNSUPPORTED, "more than %d model inputs", MAX_IN - 1);
    c->n = n_inputs;
    c->n_add = n_additional;
    for (int i = 0; i < n_inputs; i++) {
        const cattr_tensor *x = inputs[i];
        const char *name = mg->vals[mg->inputs[i]].name;
        if (!x) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "input %d ('%s') is NULL", i, name);
        if (x->dtype == CATTR_INT64)
            return cx_fail(CATTR_ERR_DTYPE, "input %d ('%s') is int64: attributed inputs must be float", i, name);
        if (x->ndim < 1) return cx_fail(CATTR_ERR_SHAPE, "input %d ('%s') needs a batch dimension", i, name);
        if (i == 0) c->B = x->shape[0];
        else if (x->shape[0] != c->B)
            return cx_fail(CATTR_ERR_SHAPE, "input %d ('%s') has batch %lld, input 0 has %lld", i, name,
                           (long long)x->shape[0], (long long)c->B);
        /* declared shape check (dynamic dims are -1) */
        int dn = e->m->in_ndim[i];
        if (dn >= 0) {
            bool ok = dn == x->ndim;
            for (int d = 0; ok && d < dn; d++) ok = e->m->in_shape[i][d] < 0 || e->m->in_shape[i][d] == x->shape[d];
            if (!ok) {
                cx_shape_str(dn, e->m->in_shape[i], s1, sizeof s1);
                return cx_fail(CATTR_ERR_SHAPE, "input %d ('%s') has shape %s; the model expects %s (-1 = any)", i,
                               name, cx_shape_str(x->ndim, x->shape, s2, sizeof s2), s1);
            }
        }
        if (e->p.check_finite) CX_CHECK(check_finite(x, "input", i));
        CX_CHECK(to_dtype(x, dt, &c->x[i]));
        /* baseline */
        const cattr_tensor *b = baselines ? baselines[i] : NULL;
        c->base[i] = cx_tensor_alloc(dt, x->ndim, x->shape);
        if (!c->base[i]) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        int64_t n = x->numel;
        if (!b) {
            memset(c->base[i]->data, 0, (size_t)n * cattr_dtype_size(dt));
            continue;
        }
        if (e->p.check_finite) CX_CHECK(check_finite(b, "baseline", i));
        int64_t per = c->B ? n / c->B : 0;
        bool full = cx_shape_eq(b->ndim, b->shape, x->ndim, x->shape);
        bool row1 = !full && b->ndim == x->ndim && b->shape[0] == 1 &&
                    cx_shape_eq(b->ndim - 1, b->shape + 1, x->ndim - 1, x->shape + 1);
        bool scalar = !full && !row1 && b->numel == 1;
        if (!scalar && !full && !row1)
            return cx_fail(CATTR_ERR_SHAPE, "baseline %d has shape %s; use a scalar, the input's shape %s or batch 1",
                           i, cx_shape_str(b->ndim, b->shape, s1, sizeof s1), cx_shape_str(x->ndim, x->shape, s2, sizeof s2));
        for (int64_t k = 0; k < n; k++) {
            double v = cx_tensor_get(b, scalar ? 0 : (full ? k : k % per));
            cx_tensor_set(c->base[i], k, v);
        }
    }
    for (int j = 0; j < n_additional; j++) {
        const cattr_tensor *a = additional ? additional[j] : NULL;
        int gi = n_inputs + j;
        const char *name = mg->vals[mg->inputs[gi]].name;
        if (!a) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "additional input %d ('%s') is NULL", j, name);
        if (a->ndim < 1 || a->shape[0] != c->B)
            return cx_fail(CATTR_ERR_SHAPE, "additional input %d ('%s') must have the batch size %lld first", j, name,
                           (long long)c->B);
        CX_CHECK(to_dtype(a, a->dtype == CATTR_INT64 ? CATTR_INT64 : dt, &c->add[j]));
    }
    return CATTR_OK;
}

/* Runs the gradient plan on `rows` = reps*B rows: scaled inputs given, additional inputs and the mask tiled. */
static cattr_status run_grad(cattr_explainer *e, call_data *c, cattr_tensor **xs, int64_t reps, cattr_tensor **grads) {
    const cg_graph *g = e->g;
    int nin = g->n_inputs;
    int nd[MAX_IN];
    int64_t sh[MAX_IN][CATTR_MAX_DIMS];
    cattr_dtype dt[MAX_IN];
    const void *host[MAX_IN];
    cattr_tensor *tmp[MAX_IN] = {0};
    cattr_tensor *seed = NULL;
    cattr_status st = CATTR_OK;
    for (int i = 0; i < c->n; i++) {
        nd[i] = xs[i]->ndim;
        memcpy(sh[i], xs[i]->shape, sizeof sh[i]);
        dt[i] = c->dt;
        host[i] = xs[i]->data;
    }
    for (int j = 0; j < c->n_add && st == CATTR_OK; j++) {
        int gi = c->n + j;
        tmp[gi] = reps == 1 ? NULL : tile_rows(c->add[j], reps);
        const cattr_tensor *a = tmp[gi] ? tmp[gi] : c->add[j];
        if (reps != 1 && !tmp[gi]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        nd[gi] = a->ndim;
        memcpy(sh[gi], a->shape, sizeof sh[gi]);
        dt[gi] = a->dtype;
        host[gi] = a->data;
    }
    /* the seed's shape is the output's: plan once with a placeholder, then read the inferred output shape */
    int si = e->seed_input, outv = cx_model_output(e->m);
    nd[si] = 0;
    dt[si] = c->dt;
    cx_plan *p = NULL;
    if (st == CATTR_OK) {
        /* infer the output shape through a forward plan (cached as well) */
        cx_plan *fp = NULL;
        st = get_plan(e, true, nd, (const int64_t(*)[CATTR_MAX_DIMS])sh, dt, &fp);
        if (st == CATTR_OK) {
            const cx_view *ov = cx_plan_view(fp, outv);
            nd[si] = ov->ndim;
            memcpy(sh[si], ov->shape, sizeof sh[si]);
            int64_t blk[CATTR_MAX_DIMS];
            memcpy(blk, ov->shape, sizeof blk);
            if (ov->ndim < 1 || blk[0] != reps * c->B) {
                char s[128];
                st = cx_fail(CATTR_ERR_SHAPE, "the model output has shape %s; expected the batch (%lld) first",
                             cx_shape_str(ov->ndim, ov->shape, s, sizeof s), (long long)(reps * c->B));
            }
        }
    }
    if (st == CATTR_OK) st = get_plan(e, false, nd, (const int64_t(*)[CATTR_MAX_DIMS])sh, dt, &p);
    double *mask = NULL;
    if (st == CATTR_OK) {
        int64_t blk[CATTR_MAX_DIMS];
        memcpy(blk, sh[si], sizeof blk);
        blk[0] = c->B;
        int64_t per = cx_numel(nd[si], blk);
        mask = malloc((size_t)(per ? per : 1) * sizeof *mask);
        seed = cx_tensor_alloc(c->dt, nd[si], sh[si]);
        if (!mask || !seed) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK) st = target_mask(e->cur_target, nd[si], blk, mask);
        if (st == CATTR_OK)
            for (int64_t r = 0; r < reps; r++)
                for (int64_t k = 0; k < per; k++) cx_tensor_set(seed, r * per + k, mask[k]);
        host[si] = seed ? seed->data : NULL;
    }
    free(mask);
    void *outs[MAX_IN];
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        grads[i] = cx_tensor_alloc(c->dt, xs[i]->ndim, xs[i]->shape);
        if (!grads[i]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else outs[i] = grads[i]->data;
    }
    if (st == CATTR_OK) st = cx_plan_run(p, host, outs);
    (void)nin;
    for (int i = 0; i < MAX_IN; i++) cattr_tensor_free(tmp[i]);
    cattr_tensor_free(seed);
    if (st != CATTR_OK)
        for (int i = 0; i < c->n; i++) {
            cattr_tensor_free(grads[i]);
            grads[i] = NULL;
        }
    return st;
}

/* Rounds to the compute dtype: double arithmetic followed by this rounding reproduces float32 arithmetic exactly for
 * one +, - or * (53 >= 2*24 + 2 bits), which is how the float32 path mimics torch's float32 kernels. */
static inline double rnd(cattr_dtype dt, double v) { return dt == CATTR_FLOAT32 ? (double)(float)v : v; }

static size_t avail_memory(void) {
    long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || psz <= 0) return (size_t)1 << 30;
    return (size_t)pages * (size_t)psz;
}

/* Steps per chunk: Captum's rule for internal_batch_size, else as many as the memory budget allows. */
static cattr_status steps_per_chunk(cattr_explainer *e, call_data *c, int n_steps, int *out) {
    if (e->p.internal_batch_size > 0) {
        int64_t k = e->p.internal_batch_size / (c->B ? c->B : 1);
        *out = (int)(k < 1 ? 1 : (k > n_steps ? n_steps : k));
        return CATTR_OK;
    }
    size_t budget = e->p.max_memory ? e->p.max_memory : avail_memory() / 4;
    /* bytes of one step: the plan's arena for B rows plus the host copies of inputs and gradients */
    size_t host = 0;
    for (int i = 0; i < c->n; i++) host += 3 * (size_t)c->x[i]->numel * cattr_dtype_size(c->dt);
    size_t per_step = host;
    {
        int nd[MAX_IN];
        int64_t sh[MAX_IN][CATTR_MAX_DIMS];
        cattr_dtype dt[MAX_IN];
        /* a forward plan for one step bounds activations; the backward roughly doubles them */
        for (int i = 0; i < c->n; i++) {
            nd[i] = c->x[i]->ndim;
            memcpy(sh[i], c->x[i]->shape, sizeof sh[i]);
            dt[i] = c->dt;
        }
        for (int j = 0; j < c->n_add; j++) {
            nd[c->n + j] = c->add[j]->ndim;
            memcpy(sh[c->n + j], c->add[j]->shape, sizeof sh[0]);
            dt[c->n + j] = c->add[j]->dtype;
        }
        nd[e->seed_input] = 0;
        dt[e->seed_input] = c->dt;
        cx_plan *fp;
        CX_CHECK(get_plan(e, true, nd, (const int64_t(*)[CATTR_MAX_DIMS])sh, dt, &fp));
        per_step += 3 * cx_plan_bytes(fp);
    }
    size_t k = per_step ? budget / per_step : (size_t)n_steps;
    if (k < 1) {
        cx_log(CATTR_LOG_WARN, "the memory budget (%zu bytes) is below one step (%zu bytes); running one step per "
                               "chunk", budget, per_step);
        k = 1;
    }
    *out = (int)(k > (size_t)n_steps ? (size_t)n_steps : k);
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
        e->alphas[s] = rnd(e->p.dtype, e->alphas[s]); /* and casts alpha to the input dtype */
    }
    return CATTR_OK;
}

static cattr_status integrated_gradients(cattr_explainer *e, call_data *c, cattr_tensor **attr) {
    int n = e->p.n_steps;
    cattr_dtype dt = c->dt;
    cattr_tensor *xs[MAX_IN] = {0}, *gr[MAX_IN] = {0};
    cattr_status st = ig_points(e);
    const double *alphas = e->alphas, *steps = e->steps;
    int chunk = n;
    if (st == CATTR_OK) st = steps_per_chunk(e, c, n, &chunk);
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
        if (st == CATTR_OK) st = run_grad(e, c, xs, reps, gr);
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
    for (int i = 0; i < MAX_IN; i++) cattr_tensor_free(xs[i]);
    return st;
}

/* delta[b] = sum of attributions of example b - (F(x_b) - F(baseline_b)), F target-selected and row-summed */
static cattr_status convergence_delta(cattr_explainer *e, call_data *c, cattr_tensor **attr, cattr_tensor **delta) {
    cattr_dtype dt = c->dt;
    int64_t B = c->B;
    int nd[MAX_IN];
    int64_t sh[MAX_IN][CATTR_MAX_DIMS];
    cattr_dtype dty[MAX_IN];
    const void *host[MAX_IN] = {0};
    cattr_tensor *tmp[MAX_IN] = {0}, *outt = NULL;
    double *mask = NULL;
    cattr_status st = CATTR_OK;
    for (int i = 0; i < c->n + c->n_add && st == CATTR_OK; i++) {
        cattr_tensor *t;
        if (i < c->n) { /* [x; baseline] */
            int64_t s2[CATTR_MAX_DIMS];
            memcpy(s2, c->x[i]->shape, sizeof s2);
            s2[0] *= 2;
            t = cx_tensor_alloc(dt, c->x[i]->ndim, s2);
            if (t) {
                size_t bytes = (size_t)c->x[i]->numel * cattr_dtype_size(dt);
                memcpy(t->data, c->x[i]->data, bytes);
                memcpy((char *)t->data + bytes, c->base[i]->data, bytes);
            }
        } else {
            t = tile_rows(c->add[i - c->n], 2);
        }
        if (!t) {
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            break;
        }
        tmp[i] = t;
        nd[i] = t->ndim;
        memcpy(sh[i], t->shape, sizeof sh[i]);
        dty[i] = t->dtype;
        host[i] = t->data;
    }
    nd[e->seed_input] = 0;
    dty[e->seed_input] = dt;
    cx_plan *fp = NULL;
    int outv = cx_model_output(e->m);
    if (st == CATTR_OK) st = get_plan(e, true, nd, (const int64_t(*)[CATTR_MAX_DIMS])sh, dty, &fp);
    if (st == CATTR_OK) {
        const cx_view *ov = cx_plan_view(fp, outv);
        outt = cx_tensor_alloc(ov->dtype, ov->ndim, ov->shape);
        int64_t blk[CATTR_MAX_DIMS];
        memcpy(blk, ov->shape, sizeof blk);
        blk[0] = B;
        mask = malloc((size_t)(cx_numel(ov->ndim, blk) + 1) * sizeof *mask);
        if (!outt || !mask) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK) st = target_mask(e->cur_target, ov->ndim, blk, mask);
        void *dst = outt ? outt->data : NULL;
        if (st == CATTR_OK) st = cx_plan_run(fp, host, &dst);
    }
    if (st == CATTR_OK) {
        int64_t len = B;
        *delta = cx_tensor_alloc(dt, 1, &len);
        if (!*delta) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK) {
        int64_t per = outt->numel / (2 * (B ? B : 1));
        for (int64_t b = 0; b < B; b++) {
            double attr_sum = 0;
            for (int i = 0; i < c->n; i++) {
                int64_t m = attr[i]->numel / B;
                double rs = 0;
                for (int64_t k = 0; k < m; k++) rs += cx_tensor_get(attr[i], b * m + k);
                attr_sum = rnd(dt, attr_sum + rnd(dt, rs));
            }
            double fx = 0, fb = 0;
            for (int64_t k = 0; k < per; k++) {
                fx += mask[b * per + k] * cx_tensor_get(outt, b * per + k);
                fb += mask[b * per + k] * cx_tensor_get(outt, (B + b) * per + k);
            }
            cx_tensor_set(*delta, b, rnd(dt, attr_sum - rnd(dt, rnd(dt, fx) - rnd(dt, fb))));
        }
    }
    for (int i = 0; i < MAX_IN; i++) cattr_tensor_free(tmp[i]);
    cattr_tensor_free(outt);
    free(mask);
    return st;
}

cattr_status cattr_explainer_attribute(cattr_explainer *e, const cattr_tensor *const *inputs, int n_inputs,
                                       const cattr_tensor *const *baselines, const cattr_target *target,
                                       const cattr_tensor *const *additional, int n_additional,
                                       cattr_tensor **attr_out, cattr_tensor **delta_out) {
    if (!e || !attr_out) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explainer and attr_out are required");
    if (delta_out) *delta_out = NULL;
    call_data c;
    cattr_tensor *attr[MAX_IN] = {0}, *delta = NULL;
    cattr_status st = prepare(e, inputs, n_inputs, baselines, additional, n_additional, &c);
    if (st == CATTR_OK) st = build_graph(e, n_inputs);
    e->cur_target = target;
    if (st == CATTR_OK) {
        if (e->p.method == CATTR_METHOD_INTEGRATED_GRADIENTS) {
            st = integrated_gradients(e, &c, attr);
            if (st == CATTR_OK && delta_out && e->p.return_convergence_delta)
                st = convergence_delta(e, &c, attr, &delta);
        } else {
            st = run_grad(e, &c, c.x, 1, attr);
            for (int i = 0; i < c.n && st == CATTR_OK; i++)
                for (int64_t k = 0; k < attr[i]->numel; k++) {
                    double gv = cx_tensor_get(attr[i], k);
                    if (e->p.method == CATTR_METHOD_SALIENCY) gv = e->p.abs ? fabs(gv) : gv;
                    else gv = rnd(c.dt, gv * cx_tensor_get(c.x[i], k));
                    cx_tensor_set(attr[i], k, gv);
                }
        }
    }
    e->cur_target = NULL;
    call_free(&c);
    if (st != CATTR_OK) {
        for (int i = 0; i < MAX_IN; i++) cattr_tensor_free(attr[i]);
        cattr_tensor_free(delta);
        return st;
    }
    for (int i = 0; i < n_inputs; i++) attr_out[i] = attr[i];
    if (delta_out) *delta_out = delta;
    return CATTR_OK;
}
