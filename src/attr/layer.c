/* layer.c - layer and neuron methods of the gradient family (Captum semantics, shared/reference/captum_spec.md §3,
 * §4, §1.7-§1.10): LayerActivation, LayerGradientXActivation, LayerGradCam, InternalInfluence, LayerConductance,
 * LayerIntegratedGradients, NeuronGradient, NeuronIntegratedGradients, NeuronConductance.
 *
 * Every method is built from three graphs derived from the model, each run as one batched pass per chunk:
 *   - the layer graph: the model plus the gradient of the target-selected output w.r.t. the layer values;
 *   - the neuron graph: the model plus the gradient of the selected neuron (a seed over the layer value) w.r.t. the
 *     attributed inputs;
 *   - the replaced-layer graph (LayerIntegratedGradients): the model with the layer values read from new graph
 *     inputs (the uses of each layer value rewired), plus the gradient of the output w.r.t. those inputs.
 * Float32 runs reproduce Captum's float32 arithmetic: every +, -, * is done in double and rounded with cx_rnd, sums
 * over the integration steps follow torch's sum kernel (cx_torch_sum), step sizes are float32 in every dtype and the
 * alphas are cast to the compute dtype (as IntegratedGradients in gradient.c).
 */
#include "attr/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LG_MAX_IN (2 * CX_MAX_IN + 2)
#define LG_MAX_OUT (2 * CATTR_MAX_OUTPUTS)
#define LG_CACHE 6

/* ---- graphs and their plans ------------------------------------------------------------------------------------ */


typedef struct {
    cg_graph *g; /* owned unless it is the model's own graph */
    bool owned;
    cx_plan_cache pc; /* LG_CACHE plans, by input shapes and outputs */
} lgraph;

typedef struct {
    int n_l;                     /* layer tensors */
    int lv[CATTR_MAX_OUTPUTS];   /* their value ids */
    lgraph gf;                   /* the model itself (forward passes) */
    lgraph ga;                   /* layer graph */
    int ga_grad[CATTR_MAX_OUTPUTS];
    lgraph gn;                   /* neuron graph, for gn_n attributed inputs */
    int gn_n, gn_grad[CX_MAX_IN];
    lgraph gi;                   /* replaced-layer graph */
    int gi_in[CATTR_MAX_OUTPUTS], gi_grad[CATTR_MAX_OUTPUTS], gi_y;
    /* a method's suffix on the layer graph per layer tensor (layer_suffix): its key (0: none) and output */
    int sfx_key[CATTR_MAX_OUTPUTS], sfx_out[CATTR_MAX_OUTPUTS];
} lstate;

static void lgraph_free(lgraph *lg) {
    cx_plan_cache_clear(&lg->pc);
    if (lg->owned) cg_free(lg->g);
    memset(lg, 0, sizeof *lg);
}

static void layer_release(cattr_explainer *e) {
    lstate *s = e->method_state;
    if (!s) return;
    lgraph_free(&s->gf);
    lgraph_free(&s->ga);
    lgraph_free(&s->gn);
    lgraph_free(&s->gi);
    free(s);
    e->method_state = NULL;
}

/* Inputs of one pass: the model inputs (attributed xs of reps*B rows, additional inputs expanded likewise), then
 * the graph's extra inputs (seeds, replaced layer values; nd 0 and NULL while not needed). */
typedef struct {
    int n;
    int nd[LG_MAX_IN];
    int64_t sh[LG_MAX_IN][CATTR_MAX_DIMS];
    cattr_dtype dt[LG_MAX_IN];
    const void *host[LG_MAX_IN];
    cattr_tensor *tmp[LG_MAX_IN];
} lpass;

static void lp_free(lpass *pi) {
    for (int i = 0; i < LG_MAX_IN; i++) cattr_tensor_free(pi->tmp[i]);
}

static void lp_set(lpass *pi, int i, const cattr_tensor *t) {
    pi->nd[i] = t->ndim;
    memcpy(pi->sh[i], t->shape, sizeof pi->sh[i]);
    pi->dt[i] = t->dtype;
    pi->host[i] = t->data;
}

static cattr_status lp_setup(const lgraph *lg, const cx_call *c, cattr_tensor *const *xs, int64_t reps,
                             cx_expand how, lpass *pi) {
    memset(pi, 0, sizeof *pi);
    pi->n = lg->g->n_inputs;
    if (pi->n > LG_MAX_IN) return cx_fail(CATTR_ERR_UNSUPPORTED, "too many graph inputs (%d)", pi->n);
    for (int i = 0; i < pi->n; i++) pi->dt[i] = c->dt;
    for (int i = 0; i < c->n; i++) lp_set(pi, i, xs[i]);
    for (int j = 0; j < c->n_add; j++) {
        const cattr_tensor *a = c->add[j];
        if (reps != 1) {
            pi->tmp[c->n + j] = cx_expand_rows(a, reps, how);
            if (!pi->tmp[c->n + j]) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            a = pi->tmp[c->n + j];
        }
        lp_set(pi, c->n + j, a);
    }
    return CATTR_OK;
}

static cattr_status lg_plan(cattr_explainer *e, lgraph *lg, const lpass *pi, const int *outs, int n_outs,
                            cx_plan **out) {
    const int64_t(*sh)[CATTR_MAX_DIMS] = (const int64_t(*)[CATTR_MAX_DIMS])pi->sh;
    lg->pc.cap = LG_CACHE;
    CX_CHECK(cx_plan_cache_get(&lg->pc, lg->g, e->consts, e->p.executor == CATTR_EXEC_EAGER, pi->nd, sh, pi->dt, outs,
                               n_outs, out));
    size_t b = cx_plan_bytes(*out);
    if (b > e->peak) e->peak = b;
    return CATTR_OK;
}

/* The inferred view of value v for these inputs (from a shape plan of v alone). */
static cattr_status lg_view(cattr_explainer *e, lgraph *lg, const lpass *pi, int v, cx_view *view) {
    cx_plan *p;
    CX_CHECK(lg_plan(e, lg, pi, &v, 1, &p));
    *view = *cx_plan_view(p, v);
    return CATTR_OK;
}

/* Runs outs[0..n_outs) of lg; res[k] are new tensors. */
static cattr_status lg_run(cattr_explainer *e, lgraph *lg, const lpass *pi, const int *outs, int n_outs,
                           cattr_tensor **res) {
    cx_plan *p;
    CX_CHECK(lg_plan(e, lg, pi, outs, n_outs, &p));
    void *dst[LG_MAX_OUT];
    cattr_status st = CATTR_OK;
    for (int k = 0; k < n_outs; k++) res[k] = NULL;
    for (int k = 0; k < n_outs && st == CATTR_OK; k++) {
        const cx_view *v = cx_plan_view(p, outs[k]);
        res[k] = cx_tensor_alloc(v->dtype, v->ndim, v->shape);
        if (!res[k]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else dst[k] = res[k]->data;
    }
    if (st == CATTR_OK) st = cx_run_plan(e, p, pi->host, dst);
    if (st != CATTR_OK)
        for (int k = 0; k < n_outs; k++) {
            cattr_tensor_free(res[k]);
            res[k] = NULL;
        }
    return st;
}

static cattr_status clone_model(const cattr_explainer *e, lgraph *lg) {
    lg->g = cg_clone(e->m->g);
    lg->owned = true;
    if (!lg->g) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    return CATTR_OK;
}

static void ensure_gf(cattr_explainer *e, lstate *s) {
    if (!s->gf.g) s->gf.g = (cg_graph *)e->m->g; /* borrowed: plans only read it */
}

/* The layer graph: model inputs, then the seed over the model output. */
static cattr_status ensure_ga(cattr_explainer *e, lstate *s) {
    if (s->ga.g) return CATTR_OK;
    CX_CHECK(clone_model(e, &s->ga));
    int seed = cg_add_input(s->ga.g, "__cattr_seed__");
    if (seed < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cg_rules r;
    cg_rules_default(&r);
    return cg_autodiff(s->ga.g, cx_model_output(e->m), seed, s->lv, s->n_l, &r, s->ga_grad);
}

/* The neuron graph for n attributed inputs: model inputs, then the seed over the layer value. */
static cattr_status ensure_gn(cattr_explainer *e, lstate *s, int n) {
    if (s->gn.g && s->gn_n == n) return CATTR_OK;
    lgraph_free(&s->gn);
    CX_CHECK(clone_model(e, &s->gn));
    int seed = cg_add_input(s->gn.g, "__cattr_neuron_seed__");
    if (seed < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    int wrt[CX_MAX_IN];
    memcpy(wrt, s->gn.g->inputs, (size_t)n * sizeof *wrt);
    cg_rules r;
    cg_rules_default(&r);
    CX_CHECK(cg_autodiff(s->gn.g, s->lv[0], seed, wrt, n, &r, s->gn_grad));
    s->gn_n = n;
    return CATTR_OK;
}

/* The replaced-layer graph: model inputs, then one input per layer value (its uses rewired to it), then the seed. */
static cattr_status ensure_gi(cattr_explainer *e, lstate *s) {
    if (s->gi.g) return CATTR_OK;
    CX_CHECK(clone_model(e, &s->gi));
    cg_graph *g = s->gi.g;
    int y = cx_model_output(e->m);
    for (int k = 0; k < s->n_l; k++) {
        char name[64];
        snprintf(name, sizeof name, "__cattr_layer_%d__", k);
        int r = cg_add_input(g, name);
        if (r < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        s->gi_in[k] = r;
        for (int i = 0; i < g->n_nodes; i++)
            for (int j = 0; j < g->nodes[i].n_in; j++)
                if (g->nodes[i].in[j] == s->lv[k]) g->nodes[i].in[j] = r;
        if (y == s->lv[k]) y = r;
    }
    int seed = cg_add_input(g, "__cattr_seed__");
    if (seed < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    s->gi_y = y;
    cg_rules r;
    cg_rules_default(&r);
    return cg_autodiff(g, y, seed, s->gi_in, s->n_l, &r, s->gi_grad);
}

/* ---- seeds: the target over the output, the neuron over the layer ----------------------------------------------- */

/* Seed of reps*B output rows of shape ov: 1 at the value the target selects in each row's example. The selected
 * position is found with cx_select over a tensor holding each position's index (one value per example). */
static cattr_status target_seed(const cx_call *c, const cx_view *ov, int64_t reps, cx_expand how,
                                cattr_tensor **out) {
    *out = NULL;
    if (ov->ndim < 1 || ov->shape[0] != reps * c->B) {
        char s[128];
        return cx_fail(CATTR_ERR_SHAPE, "the model output has shape %s; expected the batch (%lld) first",
                       cx_shape_str(ov->ndim, ov->shape, s, sizeof s), (long long)(reps * c->B));
    }
    int64_t blk[CATTR_MAX_DIMS], per = cx_numel(ov->ndim - 1, ov->shape + 1);
    memcpy(blk, ov->shape, sizeof blk);
    blk[0] = c->B;
    cattr_tensor *pos = cx_tensor_alloc(CATTR_FLOAT64, ov->ndim, blk);
    cattr_tensor *seed = cx_tensor_alloc(c->dt, ov->ndim, ov->shape);
    double *sel = malloc((size_t)(c->B + 1) * sizeof *sel);
    cattr_status st = pos && seed && sel ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) {
        for (int64_t k = 0; k < pos->numel; k++) cx_tensor_set(pos, k, (double)(k % (per ? per : 1)));
        st = cx_select(c, pos, 1, CX_TILE, sel);
    }
    if (st == CATTR_OK) {
        memset(seed->data, 0, (size_t)seed->numel * cattr_dtype_size(c->dt));
        for (int64_t r = 0; r < reps * c->B; r++) {
            int64_t b = how == CX_TILE ? r % c->B : r / reps;
            cx_tensor_set(seed, r * per + (int64_t)sel[b], 1.0);
        }
    }
    cattr_tensor_free(pos);
    free(sel);
    if (st != CATTR_OK) {
        cattr_tensor_free(seed);
        return st;
    }
    *out = seed;
    return CATTR_OK;
}

/* The neuron selector resolved against a layer of per-example shape sh[1..nd): the selected flat positions within
 * one example, in row-major order (Captum sums them when the selector holds slices or is a sum). */
typedef struct {
    int64_t per, n_sel;
    int64_t *sel;
} neuron_sel;

static cattr_status neuron_select(const cattr_attr_params *p, int nd, const int64_t *sh, neuron_sel *ns) {
    char s1[128];
    memset(ns, 0, sizeof *ns);
    ns->per = cx_numel(nd - 1, sh + 1);
    int64_t lo[CATTR_MAX_DIMS], cnt[CATTR_MAX_DIMS], step[CATTR_MAX_DIMS];
    for (int d = 0; d + 1 < nd; d++) {
        lo[d] = 0;
        cnt[d] = sh[d + 1];
        step[d] = 1;
    }
    if (p->neuron_kind == CATTR_NEURON_SUM) {
        bool summed[CATTR_MAX_DIMS] = {0};
        for (int k = 0; k < p->neuron_sum_ndim; k++) {
            int64_t d = p->neuron_sum_dims[k];
            if (d < 0) d += nd;
            if (d < 1 || d >= nd)
                return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                               "neuron selector: sum dim %lld is not a non-batch dim of the layer of shape %s",
                               (long long)p->neuron_sum_dims[k], cx_shape_str(nd, sh, s1, sizeof s1));
            summed[d] = true;
        }
        for (int d = 1; d < nd; d++)
            if (!summed[d] && sh[d] != 1)
                return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                               "neuron selector: the sum leaves dim %d of the layer of shape %s; it must leave one "
                               "value per example", d, cx_shape_str(nd, sh, s1, sizeof s1));
    } else if (p->neuron_kind == CATTR_NEURON_INDEX || p->neuron_kind == CATTR_NEURON_SLICES) {
        if (p->neuron_ndim > nd - 1)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                           "neuron selector has %d entries; the layer of shape %s has %d dims besides the batch",
                           p->neuron_ndim, cx_shape_str(nd, sh, s1, sizeof s1), nd - 1);
        for (int d = 0; d < p->neuron_ndim; d++) {
            int64_t n = sh[d + 1];
            bool index = p->neuron_kind == CATTR_NEURON_INDEX || p->neuron_slice_is_index[d];
            if (index) {
                int64_t v = p->neuron_kind == CATTR_NEURON_INDEX ? p->neuron_index[d] : p->neuron_slice[d][0];
                if (v < 0) v += n;
                if (v < 0 || v >= n)
                    return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                                   "neuron index %lld is out of range for dim %d (size %lld) of the layer",
                                   (long long)(p->neuron_kind == CATTR_NEURON_INDEX ? p->neuron_index[d]
                                                                                   : p->neuron_slice[d][0]),
                                   d + 1, (long long)n);
                lo[d] = v;
                cnt[d] = 1;
                continue;
            }
            int64_t a = p->neuron_slice[d][0], b = p->neuron_slice[d][1], st = p->neuron_slice[d][2];
            if (st < 1)
                return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "neuron selector: slice step %lld of dim %d is not "
                                                           "positive", (long long)st, d + 1);
            if (a < 0) a += n;
            if (b < 0) b += n;
            a = a < 0 ? 0 : (a > n ? n : a);
            b = b < 0 ? 0 : (b > n ? n : b);
            lo[d] = a;
            step[d] = st;
            cnt[d] = b > a ? (b - a + st - 1) / st : 0;
        }
    } else {
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "this method needs a neuron selector");
    }
    int64_t n_sel = 1;
    for (int d = 0; d + 1 < nd; d++) n_sel *= cnt[d];
    if (n_sel < 1) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "the neuron selector selects nothing");
    if (p->neuron_kind == CATTR_NEURON_INDEX && n_sel != 1)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                       "the neuron index (%d entries) selects %lld values of the layer of shape %s; give an index "
                       "for every dim", p->neuron_ndim, (long long)n_sel, cx_shape_str(nd, sh, s1, sizeof s1));
    ns->sel = malloc((size_t)n_sel * sizeof *ns->sel);
    if (!ns->sel) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t q = 0; q < n_sel; q++) { /* row-major enumeration of the selected box */
        int64_t rem = q, off = 0, stride = 1;
        for (int d = nd - 2; d >= 0; d--) {
            int64_t i = rem % cnt[d];
            rem /= cnt[d];
            off += (lo[d] + i * step[d]) * stride;
            stride *= sh[d + 1];
        }
        ns->sel[q] = off;
    }
    ns->n_sel = n_sel;
    return CATTR_OK;
}

/* The selected neuron's value in row r of a layer tensor t (the sum of the selection, in torch's order). */
static double neuron_value(cattr_dtype dt, const neuron_sel *ns, const cattr_tensor *t, int64_t r, double *buf) {
    if (ns->n_sel == 1) return cx_tensor_get(t, r * ns->per + ns->sel[0]);
    for (int64_t q = 0; q < ns->n_sel; q++) buf[q] = cx_tensor_get(t, r * ns->per + ns->sel[q]);
    return cx_torch_sum(dt, buf, ns->n_sel, 0, 1);
}

/* ---- passes ------------------------------------------------------------------------------------------------- */

/* Layer activations (and, want_grad, the target's gradients w.r.t. them) for inputs xs of reps*B rows. */
static cattr_status layer_pass(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, int64_t reps, cx_expand how,
                               bool want_grad, cattr_tensor **acts, cattr_tensor **grads) {
    lstate *s = e->method_state;
    lgraph *lg = &s->gf;
    if (want_grad) {
        CX_CHECK(ensure_ga(e, s));
        lg = &s->ga;
    } else {
        ensure_gf(e, s);
    }
    lpass pi;
    cattr_tensor *seed = NULL, *res[LG_MAX_OUT] = {0};
    int outs[LG_MAX_OUT];
    cattr_status st = lp_setup(lg, c, xs, reps, how, &pi);
    if (st == CATTR_OK && want_grad) {
        cx_view ov;
        st = lg_view(e, lg, &pi, cx_model_output(e->m), &ov);
        if (st == CATTR_OK) st = target_seed(c, &ov, reps, how, &seed);
        if (st == CATTR_OK) lp_set(&pi, pi.n - 1, seed);
    }
    for (int k = 0; k < s->n_l; k++) {
        outs[k] = s->lv[k];
        outs[s->n_l + k] = s->ga_grad[k];
    }
    if (st == CATTR_OK) st = lg_run(e, lg, &pi, outs, want_grad ? 2 * s->n_l : s->n_l, res);
    lp_free(&pi);
    cattr_tensor_free(seed);
    if (st != CATTR_OK) return st;
    for (int k = 0; k < s->n_l; k++) {
        acts[k] = res[k];
        if (want_grad) grads[k] = res[s->n_l + k];
    }
    return CATTR_OK;
}

/* Gradients of the selected neuron w.r.t. the attributed inputs, for inputs xs of reps*B rows. */
static cattr_status neuron_pass(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, int64_t reps, cx_expand how,
                                cattr_tensor **gx) {
    lstate *s = e->method_state;
    CX_CHECK(ensure_gn(e, s, c->n));
    lpass pi;
    neuron_sel ns = {0};
    cattr_tensor *seed = NULL;
    cx_view lv;
    cattr_status st = lp_setup(&s->gn, c, xs, reps, how, &pi);
    if (st == CATTR_OK) st = lg_view(e, &s->gn, &pi, s->lv[0], &lv);
    if (st == CATTR_OK && (lv.ndim < 1 || lv.shape[0] != reps * c->B))
        st = cx_fail(CATTR_ERR_SHAPE, "the layer has %lld rows; expected the batch (%lld) first",
                     (long long)(lv.ndim ? lv.shape[0] : 0), (long long)(reps * c->B));
    if (st == CATTR_OK) st = neuron_select(&e->p, lv.ndim, lv.shape, &ns);
    if (st == CATTR_OK) {
        seed = cx_tensor_alloc(c->dt, lv.ndim, lv.shape);
        if (!seed) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK) {
        memset(seed->data, 0, (size_t)seed->numel * cattr_dtype_size(c->dt));
        for (int64_t r = 0; r < lv.shape[0]; r++)
            for (int64_t q = 0; q < ns.n_sel; q++) cx_tensor_set(seed, r * ns.per + ns.sel[q], 1.0);
        lp_set(&pi, pi.n - 1, seed);
        st = lg_run(e, &s->gn, &pi, s->gn_grad, c->n, gx);
    }
    free(ns.sel);
    lp_free(&pi);
    cattr_tensor_free(seed);
    return st;
}

/* ---- integration paths ---------------------------------------------------------------------------------------- */

/* Captum's points for n steps: alphas cast to the compute dtype, step sizes to float32 (in every dtype). */
static cattr_status quad_points(const cattr_explainer *e, int n, double **alphas, double **steps) {
    *alphas = malloc((size_t)n * sizeof **alphas);
    *steps = malloc((size_t)n * sizeof **steps);
    cattr_status st = *alphas && *steps ? cattr_quadrature_points(e->p.quadrature, n, *alphas, *steps)
                                        : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st != CATTR_OK) {
        free(*alphas);
        free(*steps);
        *alphas = *steps = NULL;
        return st;
    }
    for (int s = 0; s < n; s++) {
        (*steps)[s] = (double)(float)(*steps)[s];
        (*alphas)[s] = cx_rnd(e->p.dtype, (*alphas)[s]);
    }
    return CATTR_OK;
}

/* Points per chunk: Captum's internal_batch_size rule (at least `min`), else as many as the memory budget allows. */
static cattr_status points_per_chunk(cattr_explainer *e, cx_call *c, int n, int min, int *out) {
    int64_t B = c->B ? c->B : 1, k;
    if (e->p.internal_batch_size > 0) {
        k = e->p.internal_batch_size / B;
    } else {
        size_t row = 0;
        CX_CHECK(cx_row_bytes(e, c, true, &row));
        size_t per = row * (size_t)B;
        k = per ? (int64_t)(cx_memory_budget(e) / per) : n;
        if (k < 1 && min <= 1)
            cx_log(CATTR_LOG_WARN, "the memory budget (%zu bytes) is below one point of the path (%zu bytes); running "
                                   "one point per chunk", cx_memory_budget(e), per);
    }
    if (k < min) k = min;
    if (k < 1) k = 1;
    *out = (int)(k > n ? n : k);
    return CATTR_OK;
}

/* The path points [s0, s1) of start + alpha * (end - start), step-major (rows s*B + b), in the dtype's arithmetic. */
static cattr_tensor *path_points(cattr_dtype dt, const cattr_tensor *end, const cattr_tensor *start,
                                 const double *alphas, int s0, int s1) {
    int64_t sh[CATTR_MAX_DIMS], m = end->numel;
    memcpy(sh, end->shape, sizeof sh);
    sh[0] *= s1 - s0;
    cattr_tensor *o = cx_tensor_alloc(dt, end->ndim, sh);
    if (!o) return NULL;
    for (int64_t k = 0; k < m; k++) {
        double b = cx_tensor_get(start, k), d = cx_rnd(dt, cx_tensor_get(end, k) - b);
        for (int s = s0; s < s1; s++) cx_tensor_set(o, (int64_t)(s - s0) * m + k, cx_rnd(dt, b + cx_rnd(dt, alphas[s] * d)));
    }
    return o;
}

/* part[j] = torch's sum over the steps s of g[s*M + j] * w[s] (Captum's _reshape_and_sum of the scaled grads). */
static cattr_status weighted_step_sum(cattr_dtype dt, const cattr_tensor *g, const double *w, int reps, double *part) {
    int64_t M = g->numel / reps;
    double *col = malloc((size_t)(reps + 1) * sizeof *col);
    if (!col) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t j = 0; j < M; j++) {
        for (int s = 0; s < reps; s++) col[s] = cx_rnd(dt, cx_tensor_get(g, (int64_t)s * M + j) * w[s]);
        part[j] = cx_torch_sum(dt, col, reps, j, M);
    }
    free(col);
    return CATTR_OK;
}

/* attr (allocated on the first chunk with shape sh, batch B) += part, in the dtype (chunk results are added, §1.10). */
static cattr_status accumulate(cattr_dtype dt, int nd, const int64_t *sh, int64_t B, const double *part, bool first,
                               cattr_tensor **attr) {
    if (first) {
        int64_t s2[CATTR_MAX_DIMS];
        memcpy(s2, sh, sizeof s2);
        s2[0] = B;
        *attr = cx_tensor_alloc(dt, nd, s2);
        if (!*attr) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    for (int64_t j = 0; j < (*attr)->numel; j++)
        cx_tensor_set(*attr, j, first ? part[j] : cx_rnd(dt, cx_tensor_get(*attr, j) + part[j]));
    return CATTR_OK;
}

/* part[j] *= (end[j] - start[j]) in the dtype (IG's multiply by inputs). */
static void times_diff(cattr_dtype dt, const cattr_tensor *end, const cattr_tensor *start, double *part) {
    for (int64_t j = 0; j < end->numel; j++)
        part[j] = cx_rnd(dt, part[j] * cx_rnd(dt, cx_tensor_get(end, j) - cx_tensor_get(start, j)));
}

static double *alloc_parts(int64_t n) { return malloc((size_t)(n + 1) * sizeof(double)); }

/* Convergence delta of layer attributions against the input-space endpoints (§1.11). */
static cattr_status layer_delta(cattr_explainer *e, cx_call *c, cattr_tensor *const *attr, int n_attr,
                                cattr_tensor **delta) {
    double *sel = malloc((size_t)(2 * c->B + 1) * sizeof *sel);
    if (!sel) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_status st = cx_delta_forward(e, c, c->base, sel);
    cx_call c2 = *c;
    c2.n = n_attr;
    if (st == CATTR_OK) st = cx_delta_finish(&c2, attr, sel, delta);
    free(sel);
    return st;
}

/* ---- LayerActivation, LayerGradientXActivation, LayerGradCam ------------------------------------------------- */

static void free_all(cattr_tensor **t, int n) {
    for (int i = 0; i < n; i++) {
        cattr_tensor_free(t[i]);
        t[i] = NULL;
    }
}

static cattr_status layer_activation(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    lstate *s = e->method_state;
    CX_CHECK(layer_pass(e, c, c->x, 1, CX_TILE, false, attr, NULL));
    c->n_out = s->n_l;
    return CATTR_OK;
}

/* ---- suffixes on the layer graph: LayerGradientXActivation, LayerGradCam ------------------------------------------
 * What these methods compute from a layer tensor's activation a and gradient g runs as ops after the layer graph's
 * gradient, so that a call uploads its inputs and the seed once and downloads only the attributions:
 *   LayerGradientXActivation   g * a (multiply_by_inputs), else g
 *   LayerGradCam               w = ReduceMean(g, dims >= 2, keepdims) (a 2-D layer: w = g), w * a, summed over dim 1
 *                              (keepdims) when attr_dim_summation, Relu when relu_attributions */
enum { SFX_GXA = 1, SFX_CAM = 2 };

/* The suffix's output for layer tensor k of rank nd, added to the layer graph when it is not there yet (the graph's
 * plans are dropped then: adding nodes may move the node array they read). */
static cattr_status layer_suffix(cattr_explainer *e, lstate *s, int k, int kind, int nd, int *out) {
    bool sum = e->p.attr_dim_summation != 0, relu = e->p.relu_attributions != 0, mul = e->p.multiply_by_inputs != 0;
    int key = 1 + (kind | nd << 4 | sum << 12 | relu << 13 | mul << 14);
    if (s->sfx_key[k] == key) {
        *out = s->sfx_out[k];
        return CATTR_OK;
    }
    if (kind == SFX_CAM && nd < 2) return cx_fail(CATTR_ERR_SHAPE, "LayerGradCam needs a layer with a dim besides the batch");
    cx_plan_cache_clear(&s->ga.pc);
    cg_graph *g = s->ga.g;
    int act = s->lv[k], grad = s->ga_grad[k], v = grad, in2[2];
    if (kind == SFX_GXA && mul) {
        in2[0] = grad, in2[1] = act;
        v = cg_emit(g, CG_MUL, "__layer_grad_x_act", in2, 2, NULL);
    } else if (kind == SFX_CAM) {
        if (nd > 2) { /* the channel weights: the gradient's mean over the spatial dims */
            cg_attrs a = cg_attrs_default();
            for (int d = 2; d < nd; d++) a.ints[a.n_ints++] = d;
            a.index = 1;
            v = cg_emit(g, CG_REDUCE_MEAN, "__gradcam_weights", &grad, 1, &a);
        }
        in2[0] = v, in2[1] = act;
        v = v < 0 ? -1 : cg_emit(g, CG_MUL, "__gradcam_weighted", in2, 2, NULL);
        if (sum && v >= 0) {
            cg_attrs a = cg_attrs_default();
            a.ints[a.n_ints++] = 1;
            a.index = 1;
            v = cg_emit(g, CG_REDUCE_SUM, "__gradcam_channels", &v, 1, &a);
        }
        if (relu && v >= 0) v = cg_emit(g, CG_RELU, "__gradcam_relu", &v, 1, NULL);
    }
    if (v < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    s->sfx_key[k] = key;
    s->sfx_out[k] = *out = v;
    return CATTR_OK;
}

/* The suffix `kind` of every layer tensor, for the call's inputs: one pass, attr[k] new tensors. */
static cattr_status layer_suffix_pass(cattr_explainer *e, cx_call *c, int kind, cattr_tensor **attr) {
    lstate *s = e->method_state;
    CX_CHECK(ensure_ga(e, s));
    lpass pi;
    cattr_tensor *seed = NULL;
    int outs[CATTR_MAX_OUTPUTS];
    cx_view ov, lv;
    cattr_status st = lp_setup(&s->ga, c, c->x, 1, CX_TILE, &pi);
    for (int k = 0; k < s->n_l && st == CATTR_OK; k++) {
        st = lg_view(e, &s->ga, &pi, s->lv[k], &lv);
        if (st == CATTR_OK) st = layer_suffix(e, s, k, kind, lv.ndim, &outs[k]);
    }
    if (st == CATTR_OK) st = lg_view(e, &s->ga, &pi, cx_model_output(e->m), &ov);
    if (st == CATTR_OK) st = target_seed(c, &ov, 1, CX_TILE, &seed);
    if (st == CATTR_OK) {
        lp_set(&pi, pi.n - 1, seed);
        st = lg_run(e, &s->ga, &pi, outs, s->n_l, attr);
    }
    lp_free(&pi);
    cattr_tensor_free(seed);
    if (st == CATTR_OK) c->n_out = s->n_l;
    return st;
}

static cattr_status layer_gradient_x_activation(cattr_explainer *e, cx_call *c, cattr_tensor **attr,
                                                cattr_tensor **delta) {
    (void)delta;
    return layer_suffix_pass(e, c, SFX_GXA, attr);
}

static cattr_status layer_gradcam(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    return layer_suffix_pass(e, c, SFX_CAM, attr);
}

/* ---- NeuronGradient ------------------------------------------------------------------------------------------ */

static cattr_status neuron_gradient(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    return neuron_pass(e, c, c->x, 1, CX_TILE, attr);
}

/* ---- InternalInfluence, LayerConductance ---------------------------------------------------------------------- */

/* InternalInfluence: sum_k step_k * dF/da(x' + alpha_k (x - x')), no multiply. */
static cattr_status internal_influence(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    lstate *s = e->method_state;
    int n = e->p.n_steps, chunk = n;
    double *alphas = NULL, *steps = NULL, *part = NULL;
    cattr_tensor *xs[CX_MAX_IN] = {0}, *acts[CATTR_MAX_OUTPUTS] = {0}, *grads[CATTR_MAX_OUTPUTS] = {0};
    cattr_status st = quad_points(e, n, &alphas, &steps);
    if (st == CATTR_OK) st = points_per_chunk(e, c, n, 1, &chunk);
    for (int s0 = 0; s0 < n && st == CATTR_OK; s0 += chunk) {
        int s1 = s0 + chunk < n ? s0 + chunk : n;
        for (int i = 0; i < c->n && st == CATTR_OK; i++)
            if (!(xs[i] = path_points(c->dt, c->x[i], c->base[i], alphas, s0, s1)))
                st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK) st = layer_pass(e, c, xs, s1 - s0, CX_TILE, true, acts, grads);
        for (int k = 0; k < s->n_l && st == CATTR_OK; k++) {
            int64_t M = grads[k]->numel / (s1 - s0);
            free(part);
            part = alloc_parts(M);
            if (!part) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            if (st == CATTR_OK) st = weighted_step_sum(c->dt, grads[k], steps + s0, s1 - s0, part);
            if (st == CATTR_OK) st = accumulate(c->dt, acts[k]->ndim, acts[k]->shape, c->B, part, s0 == 0, &attr[k]);
        }
        free_all(xs, c->n);
        free_all(acts, s->n_l);
        free_all(grads, s->n_l);
        if (st == CATTR_OK && e->p.progress) e->p.progress(s1, n, e->p.progress_user);
    }
    free(alphas);
    free(steps);
    free(part);
    if (st != CATTR_OK) return st;
    c->n_out = s->n_l;
    return CATTR_OK;
}

/* LayerConductance: n_steps+1 points; sum_{k<n} dF/da(alpha_k) * (a(alpha_{k+1}) - a(alpha_k)). Chunks share their
 * endpoints (Captum's include_endpoint). */
static cattr_status layer_conductance(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    lstate *s = e->method_state;
    int n = e->p.n_steps + 1, chunk = n;
    double *alphas = NULL, *steps = NULL, *part = NULL, *col = NULL;
    cattr_tensor *xs[CX_MAX_IN] = {0}, *acts[CATTR_MAX_OUTPUTS] = {0}, *grads[CATTR_MAX_OUTPUTS] = {0};
    cattr_status st = quad_points(e, n, &alphas, &steps);
    if (st == CATTR_OK) st = points_per_chunk(e, c, n, 2, &chunk);
    if (st == CATTR_OK && !(col = alloc_parts(chunk))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    bool first = true;
    for (int s0 = 0; s0 < n - 1 && st == CATTR_OK;) {
        int s1 = s0 + chunk < n ? s0 + chunk : n, P = s1 - s0;
        for (int i = 0; i < c->n && st == CATTR_OK; i++)
            if (!(xs[i] = path_points(c->dt, c->x[i], c->base[i], alphas, s0, s1)))
                st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK) st = layer_pass(e, c, xs, P, CX_TILE, true, acts, grads);
        for (int k = 0; k < s->n_l && st == CATTR_OK; k++) {
            int64_t M = acts[k]->numel / P;
            free(part);
            part = alloc_parts(M);
            if (!part) {
                st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
                break;
            }
            for (int64_t j = 0; j < M; j++) {
                for (int q = 0; q + 1 < P; q++) {
                    double d = cx_rnd(c->dt, cx_tensor_get(acts[k], (int64_t)(q + 1) * M + j) -
                                                 cx_tensor_get(acts[k], (int64_t)q * M + j));
                    col[q] = cx_rnd(c->dt, d * cx_tensor_get(grads[k], (int64_t)q * M + j));
                }
                part[j] = cx_torch_sum(c->dt, col, P - 1, j, M);
            }
            st = accumulate(c->dt, acts[k]->ndim, acts[k]->shape, c->B, part, first, &attr[k]);
        }
        first = false;
        free_all(xs, c->n);
        free_all(acts, s->n_l);
        free_all(grads, s->n_l);
        if (st == CATTR_OK && e->p.progress) e->p.progress(s1 - 1, n - 1, e->p.progress_user);
        s0 = s1 - 1;
    }
    free(alphas);
    free(steps);
    free(part);
    free(col);
    if (st != CATTR_OK) return st;
    c->n_out = s->n_l;
    if (delta && e->p.return_convergence_delta) CX_CHECK(layer_delta(e, c, attr, s->n_l, delta));
    return CATTR_OK;
}

/* ---- NeuronIntegratedGradients, NeuronConductance ------------------------------------------------------------ */

/* IG over the input path with the gradient of the neuron (conductance: times dF/dn, the target's gradient at the
 * neuron): sum_k step_k * grad_k, times (x - x') when multiply_by_inputs. */
static cattr_status neuron_path(cattr_explainer *e, cx_call *c, bool conductance, cattr_tensor **attr) {
    lstate *s = e->method_state;
    int n = e->p.n_steps, chunk = n;
    double *alphas = NULL, *steps = NULL, *part = NULL, *mid = NULL, *buf = NULL;
    cattr_tensor *xs[CX_MAX_IN] = {0}, *gx[CX_MAX_IN] = {0}, *acts[CATTR_MAX_OUTPUTS] = {0},
                 *grads[CATTR_MAX_OUTPUTS] = {0};
    neuron_sel ns = {0};
    cattr_status st = quad_points(e, n, &alphas, &steps);
    if (st == CATTR_OK) st = points_per_chunk(e, c, n, 1, &chunk);
    for (int s0 = 0; s0 < n && st == CATTR_OK; s0 += chunk) {
        int s1 = s0 + chunk < n ? s0 + chunk : n, reps = s1 - s0;
        for (int i = 0; i < c->n && st == CATTR_OK; i++)
            if (!(xs[i] = path_points(c->dt, c->x[i], c->base[i], alphas, s0, s1)))
                st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK) st = neuron_pass(e, c, xs, reps, CX_TILE, gx);
        if (st == CATTR_OK && conductance) { /* dF/dn per row: the selection of the layer gradient */
            st = layer_pass(e, c, xs, reps, CX_TILE, true, acts, grads);
            free(ns.sel);
            ns.sel = NULL;
            if (st == CATTR_OK) st = neuron_select(&e->p, grads[0]->ndim, grads[0]->shape, &ns);
            free(mid);
            free(buf);
            mid = alloc_parts(grads[0]->shape[0]);
            buf = ns.sel ? alloc_parts(ns.n_sel) : NULL;
            if (st == CATTR_OK && (!mid || !buf)) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            for (int64_t r = 0; st == CATTR_OK && r < grads[0]->shape[0]; r++)
                mid[r] = neuron_value(c->dt, &ns, grads[0], r, buf);
        }
        for (int i = 0; i < c->n && st == CATTR_OK; i++) {
            int64_t M = c->x[i]->numel, per = c->B ? M / c->B : 0;
            if (conductance)
                for (int64_t q = 0; q < gx[i]->numel; q++)
                    cx_tensor_set(gx[i], q, cx_rnd(c->dt, cx_tensor_get(gx[i], q) * mid[per ? q / per : 0]));
            free(part);
            part = alloc_parts(M);
            if (!part) {
                st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
                break;
            }
            st = weighted_step_sum(c->dt, gx[i], steps + s0, reps, part);
            if (st == CATTR_OK && e->p.multiply_by_inputs) times_diff(c->dt, c->x[i], c->base[i], part);
            if (st == CATTR_OK) st = accumulate(c->dt, c->x[i]->ndim, c->x[i]->shape, c->B, part, s0 == 0, &attr[i]);
        }
        free_all(xs, c->n);
        free_all(gx, c->n);
        free_all(acts, s->n_l);
        free_all(grads, s->n_l);
        if (st == CATTR_OK && e->p.progress) e->p.progress(s1, n, e->p.progress_user);
    }
    free(alphas);
    free(steps);
    free(part);
    free(mid);
    free(buf);
    free(ns.sel);
    return st;
}

static cattr_status neuron_integrated_gradients(cattr_explainer *e, cx_call *c, cattr_tensor **attr,
                                                cattr_tensor **delta) {
    (void)delta;
    return neuron_path(e, c, false, attr);
}

static cattr_status neuron_conductance(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    return neuron_path(e, c, true, attr);
}

/* ---- LayerIntegratedGradients ------------------------------------------------------------------------------- */

/* IG in layer space: a = layer(x), a' = layer(x'); the model runs on x (tiled) with the layer values replaced by
 * a' + alpha (a - a'); attribution = sum_k step_k * grad_k * (a - a'). */
static cattr_status layer_integrated_gradients(cattr_explainer *e, cx_call *c, cattr_tensor **attr,
                                               cattr_tensor **delta) {
    lstate *s = e->method_state;
    int n = e->p.n_steps, chunk = n, nl = s->n_l;
    double *alphas = NULL, *steps = NULL, *part = NULL;
    cattr_tensor *a[CATTR_MAX_OUTPUTS] = {0}, *a0[CATTR_MAX_OUTPUTS] = {0}, *sc[CATTR_MAX_OUTPUTS] = {0},
                 *gr[CATTR_MAX_OUTPUTS] = {0}, *xs[CX_MAX_IN] = {0}, *seed = NULL;
    cattr_status st = ensure_gi(e, s);
    if (st == CATTR_OK) st = quad_points(e, n, &alphas, &steps);
    if (st == CATTR_OK) st = layer_pass(e, c, c->x, 1, CX_TILE, false, a, NULL);
    if (st == CATTR_OK) st = layer_pass(e, c, c->base, 1, CX_TILE, false, a0, NULL);
    if (st == CATTR_OK) st = points_per_chunk(e, c, n, 1, &chunk);
    for (int s0 = 0; s0 < n && st == CATTR_OK; s0 += chunk) {
        int s1 = s0 + chunk < n ? s0 + chunk : n, reps = s1 - s0;
        lpass pi;
        memset(&pi, 0, sizeof pi);
        for (int i = 0; i < c->n && st == CATTR_OK; i++)
            if (!(xs[i] = cx_expand_rows(c->x[i], reps, CX_TILE))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        for (int k = 0; k < nl && st == CATTR_OK; k++)
            if (!(sc[k] = path_points(c->dt, a[k], a0[k], alphas, s0, s1)))
                st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK) st = lp_setup(&s->gi, c, xs, reps, CX_TILE, &pi);
        for (int k = 0; k < nl && st == CATTR_OK; k++) lp_set(&pi, c->n + c->n_add + k, sc[k]);
        if (st == CATTR_OK) {
            cx_view ov;
            st = lg_view(e, &s->gi, &pi, s->gi_y, &ov);
            if (st == CATTR_OK) st = target_seed(c, &ov, reps, CX_TILE, &seed);
            if (st == CATTR_OK) lp_set(&pi, pi.n - 1, seed);
        }
        if (st == CATTR_OK) st = lg_run(e, &s->gi, &pi, s->gi_grad, nl, gr);
        lp_free(&pi);
        for (int k = 0; k < nl && st == CATTR_OK; k++) {
            int64_t M = a[k]->numel;
            free(part);
            part = alloc_parts(M);
            if (!part) {
                st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
                break;
            }
            st = weighted_step_sum(c->dt, gr[k], steps + s0, reps, part);
            if (st == CATTR_OK && e->p.multiply_by_inputs) times_diff(c->dt, a[k], a0[k], part);
            if (st == CATTR_OK) st = accumulate(c->dt, a[k]->ndim, a[k]->shape, c->B, part, s0 == 0, &attr[k]);
        }
        free_all(xs, c->n);
        free_all(sc, nl);
        free_all(gr, nl);
        cattr_tensor_free(seed);
        seed = NULL;
        if (st == CATTR_OK && e->p.progress) e->p.progress(s1, n, e->p.progress_user);
    }
    free_all(a, nl);
    free_all(a0, nl);
    free(alphas);
    free(steps);
    free(part);
    if (st != CATTR_OK) return st;
    c->n_out = nl;
    if (delta && e->p.return_convergence_delta) CX_CHECK(layer_delta(e, c, attr, nl, delta));
    return CATTR_OK;
}

/* ---- init and the method table ------------------------------------------------------------------------------- */

static bool is_neuron(cattr_method m) {
    return m == CATTR_METHOD_NEURON_GRADIENT || m == CATTR_METHOD_NEURON_INTEGRATED_GRADIENTS ||
           m == CATTR_METHOD_NEURON_CONDUCTANCE;
}

static bool is_integrated(cattr_method m) {
    return m == CATTR_METHOD_INTERNAL_INFLUENCE || m == CATTR_METHOD_LAYER_CONDUCTANCE ||
           m == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS || m == CATTR_METHOD_NEURON_INTEGRATED_GRADIENTS ||
           m == CATTR_METHOD_NEURON_CONDUCTANCE;
}

static cattr_status layer_init(cattr_explainer *e) {
    const cattr_attr_params *p = &e->p;
    lstate *s = calloc(1, sizeof *s);
    if (!s) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    e->method_state = s;
    int n = p->n_layers > 0 ? p->n_layers : 1;
    if (n > CATTR_MAX_OUTPUTS)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "%d layer tensors given; at most %d", n, CATTR_MAX_OUTPUTS);
    for (int k = 0; k < n; k++) {
        const char *name = p->n_layers > 0 ? (p->layers ? p->layers[k] : NULL) : p->layer;
        CX_CHECK(cx_resolve_layer(e, name, p->attribute_to_layer_input != 0, &s->lv[k]));
    }
    s->n_l = n;
    if (is_neuron(p->method)) {
        if (p->neuron_kind == CATTR_NEURON_NONE)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "%s needs a neuron selector", e->method->captum);
        if (n != 1)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "%s takes a layer of one tensor (%d given)", e->method->captum,
                           n);
    }
    if (is_integrated(p->method)) {
        if (p->n_steps < 1)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_steps must be at least 1 (got %d)", p->n_steps);
        if (p->quadrature < CATTR_QUAD_RIEMANN_LEFT || p->quadrature > CATTR_QUAD_GAUSS_LEGENDRE)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "unknown quadrature %d", (int)p->quadrature);
        int points = p->method == CATTR_METHOD_LAYER_CONDUCTANCE ? p->n_steps + 1 : p->n_steps;
        if (p->quadrature != CATTR_QUAD_GAUSS_LEGENDRE && points < 2)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "riemann rules need n_steps >= 2 (got %d)", p->n_steps);
        if (p->internal_batch_size < 0)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "internal_batch_size must be positive");
    }
    return CATTR_OK;
}

#define LAYER_METHOD(var, id, cli, captum, fn)                                                                         \
    const cx_method var = {id, cli, captum, false, layer_init, fn, layer_release}

LAYER_METHOD(cx_method_layer_activation, CATTR_METHOD_LAYER_ACTIVATION, "layer-activation", "LayerActivation",
             layer_activation);
LAYER_METHOD(cx_method_layer_gradient_x_activation, CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION,
             "layer-gradient-x-activation", "LayerGradientXActivation", layer_gradient_x_activation);
LAYER_METHOD(cx_method_layer_gradcam, CATTR_METHOD_LAYER_GRADCAM, "layer-gradcam", "LayerGradCam", layer_gradcam);
LAYER_METHOD(cx_method_internal_influence, CATTR_METHOD_INTERNAL_INFLUENCE, "internal-influence", "InternalInfluence",
             internal_influence);
LAYER_METHOD(cx_method_layer_conductance, CATTR_METHOD_LAYER_CONDUCTANCE, "layer-conductance", "LayerConductance",
             layer_conductance);
LAYER_METHOD(cx_method_layer_integrated_gradients, CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS,
             "layer-integrated-gradients", "LayerIntegratedGradients", layer_integrated_gradients);
LAYER_METHOD(cx_method_neuron_gradient, CATTR_METHOD_NEURON_GRADIENT, "neuron-gradient", "NeuronGradient",
             neuron_gradient);
LAYER_METHOD(cx_method_neuron_integrated_gradients, CATTR_METHOD_NEURON_INTEGRATED_GRADIENTS,
             "neuron-integrated-gradients", "NeuronIntegratedGradients", neuron_integrated_gradients);
LAYER_METHOD(cx_method_neuron_conductance, CATTR_METHOD_NEURON_CONDUCTANCE, "neuron-conductance", "NeuronConductance",
             neuron_conductance);
