/* gradient.c - the gradient family: Saliency, InputXGradient and IntegratedGradients (Captum semantics, see
 * shared/reference/captum_spec.md section 2). IG runs its whole integration path as one batched pass, or a few
 * chunks of steps when the memory budget (or Captum's internal_batch_size) asks for it. */
#include "attr/derive.h"
#include "attr/internal.h"

#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Saliency and InputXGradient -------------------------------------------------------------------------------- */
/* One derived graph: the model on x_i (and the additional inputs), its gradient seeded with the target mask of the
 * batch, and per input |g| (Saliency, abs), g (Saliency, signed) or g * x (InputXGradient). The inputs go up once and
 * the attributions come down once. */
typedef struct pg_state {
    cg_graph *g;
    int n, n_add;
    int outs[CX_MAX_IN];
    cx_consts *consts;
    cx_plan_cache pc;
    cx_dbuf x[CX_MAX_IN], add[CX_MAX_IN], seed;
} pg_state;

static void pg_release(cattr_explainer *e) {
    pg_state *s = e->method_state;
    if (!s) return;
    cx_plan_cache_clear(&s->pc);
    for (int i = 0; i < CX_MAX_IN; i++) {
        cx_dbuf_free(&s->x[i]);
        cx_dbuf_free(&s->add[i]);
    }
    cx_dbuf_free(&s->seed);
    cx_consts_free(s->consts);
    cg_free(s->g);
    free(s);
    e->method_state = NULL;
}

static cattr_status pg_build(cattr_explainer *e, pg_state *s) {
    const cg_graph *m = e->m->g;
    cg_graph *g = NULL;
    int *map = NULL;
    CX_CHECK(cx_derive_new(m, &g, &map));
    int in_map[2 * CX_MAX_IN], bad = 0;
    for (int k = 0; k < s->n + s->n_add; k++) bad |= (in_map[k] = cg_add_input(g, m->vals[m->inputs[k]].name)) < 0;
    int seed = cg_add_input(g, "__pg_seed");
    cattr_status st = bad || seed < 0 ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : CATTR_OK;
    if (st == CATTR_OK) st = cx_graph_append_model(g, m, in_map, map);
    int grads[CX_MAX_IN];
    if (st == CATTR_OK) st = cg_autodiff(g, map[cx_model_output(e->m)], seed, in_map, s->n, &e->rules, grads);
    for (int i = 0; i < s->n && st == CATTR_OK; i++) {
        if (e->p.method == CATTR_METHOD_INPUT_X_GRADIENT) s->outs[i] = cx_emit2(g, CG_MUL, "__pg_times_input", grads[i], in_map[i]);
        else if (e->p.abs) s->outs[i] = cg_emit(g, CG_ABS, "__pg_abs", &grads[i], 1, NULL);
        else s->outs[i] = grads[i];
        if (s->outs[i] < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    free(map);
    if (st != CATTR_OK) {
        cg_free(g);
        return st;
    }
    s->g = g;
    return CATTR_OK;
}

static cattr_status plain_gradient(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    pg_state *s = e->method_state;
    if (s && (s->n != c->n || s->n_add != c->n_add)) pg_release(e);
    if (!(s = e->method_state)) {
        if (!(s = calloc(1, sizeof *s))) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        e->method_state = s;
        s->n = c->n;
        s->n_add = c->n_add;
        cattr_status st = pg_build(e, s);
        if (st == CATTR_OK) st = cx_consts_new(e->be, c->dt, &s->consts);
        if (st != CATTR_OK) {
            pg_release(e);
            return st;
        }
    }
    cattr_tensor *seed = NULL;
    CX_CHECK(cx_seed_block(e, c, &seed));
    int nd[2 * CX_MAX_IN + 1];
    int64_t sh[2 * CX_MAX_IN + 1][CATTR_MAX_DIMS];
    cattr_dtype dt[2 * CX_MAX_IN + 1];
    void *in[2 * CX_MAX_IN + 1], *host[CX_MAX_IN];
    cattr_status st = CATTR_OK;
    for (int k = 0; k < s->n + s->n_add && st == CATTR_OK; k++) {
        const cattr_tensor *t = k < s->n ? c->x[k] : c->add[k - s->n];
        cx_dbuf *b = k < s->n ? &s->x[k] : &s->add[k - s->n];
        nd[k] = t->ndim;
        memcpy(sh[k], t->shape, sizeof sh[k]);
        dt[k] = t->dtype;
        st = cx_dbuf_fit(e->be, b, (size_t)t->numel * cattr_dtype_size(t->dtype), t->data, false);
        in[k] = b->p;
    }
    int si = s->n + s->n_add;
    nd[si] = seed->ndim;
    memcpy(sh[si], seed->shape, sizeof sh[si]);
    dt[si] = c->dt;
    if (st == CATTR_OK) st = cx_dbuf_fit(e->be, &s->seed, (size_t)seed->numel * cattr_dtype_size(c->dt), seed->data, false);
    in[si] = s->seed.p;
    for (int i = 0; i < c->n && st == CATTR_OK && !c->attr_dev[0]; i++) { /* else: left on the backend */
        attr[i] = cx_tensor_alloc(c->dt, c->x[i]->ndim, c->x[i]->shape);
        if (!attr[i]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else host[i] = attr[i]->data;
    }
    cx_plan *p = NULL;
    if (st == CATTR_OK)
        st = cx_plan_cache_get(&s->pc, s->g, s->consts, e->p.executor == CATTR_EXEC_EAGER, nd,
                               (const int64_t(*)[CATTR_MAX_DIMS])sh, dt, s->outs, s->n, &p);
    if (st == CATTR_OK && cx_plan_bytes(p) > e->peak) e->peak = cx_plan_bytes(p);
    if (st == CATTR_OK) st = cx_run_plan_dev(e, p, NULL, in, c->attr_dev[0] ? NULL : host, c->attr_dev[0] ? c->attr_dev : NULL);
    cattr_tensor_free(seed);
    return st;
}

const cx_method cx_method_saliency = {CATTR_METHOD_SALIENCY, "saliency", "Saliency", false, NULL, plain_gradient,
                                      pg_release};
const cx_method cx_method_input_x_gradient = {CATTR_METHOD_INPUT_X_GRADIENT, "input-x-gradient", "InputXGradient",
                                              false, NULL, plain_gradient, pg_release};

/* ---- Integrated Gradients ----------------------------------------------------------------------------------- */

/* IG's parameters (n_steps, quadrature, internal_batch_size) are checked by cx_params_check (methods.c). */

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
        cx_budget_warn(e, "the memory budget (%zu bytes) is below one step (%zu bytes); running one step per chunk",
                       budget, per_step);
        k = 1;
    }
    *out = (int)(k > (size_t)n_steps ? (size_t)n_steps : k);
    cx_log(CATTR_LOG_INFO, "%d of %d steps per chunk (%.1f MiB per step, budget %.1f MiB)", *out, n_steps,
           (double)per_step / 1048576.0, (double)budget / 1048576.0);
    return CATTR_OK;
}

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

/* ---- the IG graph --------------------------------------------------------------------------------------------
 * One derived graph computes a chunk of steps [s0, s1) on the backend (R = (s1 - s0) * B rows, step-major):
 *   inputs   x_i, b_i [B, ...] (n), the additional inputs a_j [B, ...], seed [B, out...] (the target mask of one
 *            block), rows [R] (int64: row r reads example r mod B), alpha_i and step_i [R, 1, ...] (per row: the
 *            step's alpha in the compute dtype and its float32 step size), acc_i [B, ...]
 *   prefix   scaled_i = Gather(b_i, rows) + alpha_i * (Gather(x_i, rows) - Gather(b_i, rows))   (Captum's order)
 *   model    on scaled_i and Gather(a_j, rows); its gradient seeded with Gather(seed, rows)
 *   suffix   tot_i = GatherGrad(grad_i * step_i, rows, x_i)   (the sum over the steps, in step order)
 *            out_i = acc_i + (multiply_by_inputs ? tot_i * (x_i - b_i) : tot_i)
 * A call uploads x, b, a, the seed block and the whole schedule (rows, alphas, steps) once, keeps acc on the
 * backend from chunk to chunk (each chunk's output overwrites its acc), and downloads the attributions once. Every
 * operation rounds as the host code it replaced did (and as Captum does), so the numbers are unchanged. */
/* What a call keeps on the backend. The buffers stay with the explainer and are reused by the next call when they
 * are large enough; the schedule (rows, alphas, step sizes) is uploaded again only when B, the steps or the rows
 * per chunk change. */
typedef struct ig_dev {
    cx_dbuf x[CX_MAX_IN], b[CX_MAX_IN], add[CX_MAX_IN], seed, rows, alpha, step;
    cx_dbuf acc_all;         /* every accumulator, zeroed at once */
    void *acc[3][CX_MAX_IN]; /* per slot and input, in acc_all (a third slot when parts are combined) */
    int64_t sched_B, sched_rows; /* what the schedule on the backend was made for (0: none) */
    int sched_steps;
    cattr_dtype sched_dt;
} ig_dev;

typedef struct ig_state {
    cg_graph *g; /* for n inputs and n_add additional ones */
    int n, n_add, mul;
    int outs[CX_MAX_IN];
    cx_consts *consts;
    cx_plan_cache pc[2]; /* per slot (the two halves run at once), each slot's plans sharing one arena */
    cg_graph *sum_g; /* out_i = a_i + b_i: the two halves added */
    int sum_outs[CX_MAX_IN];
    cx_plan_cache sum_pc;
    ig_dev d;
} ig_state;

static void ig_dev_free(ig_dev *d);

static void ig_release(cattr_explainer *e) {
    ig_state *s = e->method_state;
    if (!s) return;
    for (int k = 0; k < 2; k++) cx_plan_cache_clear(&s->pc[k]);
    cx_plan_cache_clear(&s->sum_pc);
    ig_dev_free(&s->d);
    cx_consts_free(s->consts);
    cg_free(s->g);
    cg_free(s->sum_g);
    free(s);
    e->method_state = NULL;
}

/* graph-input positions (5 n + n_add + 2 of them) */
#define IG_MAX_IN (6 * CX_MAX_IN + 2)
#define IG_X(i) (i)
#define IG_B(i) (s->n + (i))
#define IG_ADD(j) (2 * s->n + (j))
#define IG_SEED (2 * s->n + s->n_add)
#define IG_ROWS (IG_SEED + 1)
#define IG_ALPHA(i) (IG_ROWS + 1 + (i))
#define IG_STEP(i) (IG_ROWS + 1 + s->n + (i))
#define IG_ACC(i) (IG_ROWS + 1 + 2 * s->n + (i))
#define IG_N_IN (IG_ROWS + 1 + 3 * s->n)


static cattr_status ig_build(cattr_explainer *e, ig_state *s) {
    const cg_graph *m = e->m->g;
    cg_graph *g = NULL;
    int *map = NULL;
    CX_CHECK(cx_derive_new(m, &g, &map));
    static const char *const names[8] = {"__ig_x", "__ig_b", "__ig_add", "__ig_seed", "__ig_rows", "__ig_alpha",
                                         "__ig_step", "__ig_acc"};
    int v[IG_MAX_IN], bad = 0;
    for (int k = 0; k < IG_MAX_IN; k++) v[k] = -1;
    for (int k = 0; k < IG_N_IN; k++) {
        int kind = k < s->n ? 0 : k < 2 * s->n ? 1 : k < IG_SEED ? 2 : k == IG_SEED ? 3 : k == IG_ROWS ? 4
                 : k < IG_STEP(0) ? 5 : k < IG_ACC(0) ? 6 : 7;
        char nm[64];
        snprintf(nm, sizeof nm, "%s%d", names[kind], k);
        v[k] = cg_add_input(g, nm);
        bad |= v[k] < 0;
    }
    int in_map[CX_MAX_IN * 2], rows = v[IG_ROWS];
    for (int i = 0; i < s->n && !bad; i++) {
        in_map[i] = cx_emit_path_point(g, v[IG_X(i)], v[IG_B(i)], v[IG_ALPHA(i)], rows);
        bad |= in_map[i] < 0;
    }
    for (int j = 0; j < s->n_add && !bad; j++) bad |= (in_map[s->n + j] = cx_emit2(g, CG_GATHER, "__ig_at", v[IG_ADD(j)], rows)) < 0;
    cattr_status st = bad ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : CATTR_OK;
    if (st == CATTR_OK) st = cx_graph_append_model(g, m, in_map, map);
    int grads[CX_MAX_IN];
    if (st == CATTR_OK) {
        int seed = cx_emit2(g, CG_GATHER, "__ig_seed_rows", v[IG_SEED], rows);
        st = seed < 0 ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory")
                      : cg_autodiff(g, map[cx_model_output(e->m)], seed, in_map, s->n, &e->rules, grads);
    }
    for (int i = 0; i < s->n && st == CATTR_OK; i++) {
        int w = cx_emit2(g, CG_MUL, "__ig_weighted", grads[i], v[IG_STEP(i)]);
        int in3[3] = {w, rows, v[IG_X(i)]};
        int tot = w < 0 ? -1 : cg_emit(g, CG_GATHER_GRAD, "__ig_sum", in3, 3, NULL);
        int val = s->mul ? cx_emit2(g, CG_MUL, "__ig_times_diff", tot, cx_emit2(g, CG_SUB, "__ig_x_minus_b", v[IG_X(i)], v[IG_B(i)]))
                         : tot;
        s->outs[i] = cx_emit2(g, CG_ADD, "__ig_acc_out", v[IG_ACC(i)], val);
        if (w < 0 || tot < 0 || val < 0 || s->outs[i] < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    free(map);
    if (st != CATTR_OK) {
        cg_free(g);
        return st;
    }
    s->g = g;
    return CATTR_OK;
}

/* The state for this call's input counts: the graph (rebuilt when they change) and its constants. */
static cattr_status ig_state_for(cattr_explainer *e, cx_call *c, ig_state **out) {
    ig_state *s = e->method_state;
    if (s && (s->n != c->n || s->n_add != c->n_add)) ig_release(e);
    s = e->method_state;
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        e->method_state = s;
        s->n = c->n;
        s->n_add = c->n_add;
        s->mul = e->p.multiply_by_inputs;
        for (int k = 0; k < 2; k++) cx_plan_cache_share_arena(&s->pc[k], e->be);
        cattr_status st = ig_build(e, s);
        if (st == CATTR_OK) st = cx_consts_new(e->be, c->dt, &s->consts);
        if (st != CATTR_OK) {
            ig_release(e);
            return st;
        }
    }
    *out = s;
    return CATTR_OK;
}

/* Shapes and dtypes of the IG graph's inputs for chunks of R rows. */
static void ig_shapes(const ig_state *s, const cx_call *c, const cattr_tensor *seed, int64_t R, int *nd,
                      int64_t (*sh)[CATTR_MAX_DIMS], cattr_dtype *dt) {
    for (int k = 0; k < IG_N_IN; k++) dt[k] = c->dt;
    for (int i = 0; i < s->n; i++) {
        const cattr_tensor *x = c->x[i];
        nd[IG_X(i)] = nd[IG_B(i)] = nd[IG_ACC(i)] = nd[IG_ALPHA(i)] = nd[IG_STEP(i)] = x->ndim;
        for (int d = 0; d < x->ndim; d++) {
            sh[IG_X(i)][d] = sh[IG_B(i)][d] = sh[IG_ACC(i)][d] = x->shape[d];
            sh[IG_ALPHA(i)][d] = sh[IG_STEP(i)][d] = d ? 1 : R;
        }
    }
    for (int j = 0; j < s->n_add; j++) {
        nd[IG_ADD(j)] = c->add[j]->ndim;
        memcpy(sh[IG_ADD(j)], c->add[j]->shape, sizeof sh[0]);
        dt[IG_ADD(j)] = c->add[j]->dtype;
    }
    nd[IG_SEED] = seed->ndim;
    memcpy(sh[IG_SEED], seed->shape, sizeof sh[0]);
    nd[IG_ROWS] = 1;
    sh[IG_ROWS][0] = R;
    dt[IG_ROWS] = CATTR_INT64;
}

static void ig_dev_free(ig_dev *d) {
    for (int i = 0; i < CX_MAX_IN; i++) {
        cx_dbuf_free(&d->x[i]);
        cx_dbuf_free(&d->b[i]);
        cx_dbuf_free(&d->add[i]);
    }
    cx_dbuf_free(&d->acc_all);
    cx_dbuf_free(&d->seed);
    cx_dbuf_free(&d->rows);
    cx_dbuf_free(&d->alpha);
    cx_dbuf_free(&d->step);
}

/* Uploads the call: inputs, baselines, additional inputs, the seed block, and (when it changed) the schedule of
 * every step (rows of at most max_rows; alphas and step sizes per row, step-major); zeroed accumulators for `slots`
 * slots. */
static cattr_status ig_upload(cattr_explainer *e, cx_call *c, const cattr_tensor *seed, int64_t max_rows, int slots,
                              ig_dev *d) {
    cx_backend *be = e->be;
    int n = e->p.n_steps;
    int64_t B = c->B, all = (int64_t)n * B;
    size_t es = cattr_dtype_size(c->dt), acc_bytes = 0;
    for (int i = 0; i < c->n; i++) {
        size_t bytes = (size_t)c->x[i]->numel * es;
        CX_CHECK(cx_dbuf_fit(be, &d->x[i], bytes, c->x_dev[i] ? NULL : c->x[i]->data, false));
        if (c->x_dev[i]) CX_CHECK(cx_copy_dev(be, d->x[i].p, c->x_dev[i], bytes)); /* the inputs already there */
        CX_CHECK(cx_dbuf_fit(be, &d->b[i], bytes, c->base[i]->data, false));
        acc_bytes += (bytes + 63) / 64 * 64;
    }
    CX_CHECK(cx_dbuf_fit(be, &d->acc_all, acc_bytes * (size_t)slots, NULL, true));
    size_t off = 0;
    memset(d->acc, 0, sizeof d->acc); /* the slots not asked for stay NULL */
    for (int k = 0; k < slots; k++)
        for (int i = 0; i < c->n; i++) {
            d->acc[k][i] = (char *)d->acc_all.p + off;
            off += ((size_t)c->x[i]->numel * es + 63) / 64 * 64;
        }
    for (int j = 0; j < c->n_add; j++)
        CX_CHECK(cx_dbuf_fit(be, &d->add[j], (size_t)c->add[j]->numel * cattr_dtype_size(c->add[j]->dtype),
                          c->add[j]->data, false));
    CX_CHECK(cx_dbuf_fit(be, &d->seed, (size_t)seed->numel * es, seed->data, false));
    if (d->sched_B == B && d->sched_rows >= max_rows && d->sched_steps == n && d->sched_dt == c->dt) return CATTR_OK;
    d->sched_B = 0;
    int64_t *rows = malloc((size_t)(max_rows + 1) * sizeof *rows);
    cattr_tensor *al = cx_tensor_alloc(c->dt, 1, &all), *stp = cx_tensor_alloc(c->dt, 1, &all);
    cattr_status st = rows && al && stp ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) {
        for (int64_t r = 0; r < max_rows; r++) rows[r] = r % B;
        for (int64_t r = 0; r < all; r++) {
            cx_tensor_set(al, r, e->alphas[r / B]);
            cx_tensor_set(stp, r, e->steps[r / B]);
        }
        st = cx_dbuf_fit(be, &d->rows, (size_t)max_rows * sizeof *rows, rows, false);
    }
    if (st == CATTR_OK) st = cx_dbuf_fit(be, &d->alpha, (size_t)all * es, al->data, false);
    if (st == CATTR_OK) st = cx_dbuf_fit(be, &d->step, (size_t)all * es, stp->data, false);
    if (st == CATTR_OK) {
        d->sched_B = B;
        d->sched_rows = max_rows;
        d->sched_steps = n;
        d->sched_dt = c->dt;
    }
    free(rows);
    cattr_tensor_free(al);
    cattr_tensor_free(stp);
    return st;
}

/* The plan for chunks of R rows in `slot`, running in the slot's arena (grown when a plan needs more). With
 * run false only makes it. */
static cattr_status ig_plan(cattr_explainer *e, ig_state *s, cx_call *c, const cattr_tensor *seed, int64_t R, int slot,
                            cx_plan **out) {
    int nd[IG_MAX_IN];
    int64_t sh[IG_MAX_IN][CATTR_MAX_DIMS];
    cattr_dtype dt[IG_MAX_IN];
    ig_shapes(s, c, seed, R, nd, sh, dt);
    bool eager = e->p.executor == CATTR_EXEC_EAGER;
    cx_plan *p = NULL;
    CX_CHECK(cx_plan_cache_get(&s->pc[slot], s->g, s->consts, eager, nd, (const int64_t(*)[CATTR_MAX_DIMS])sh, dt,
                               s->outs, s->n, &p));
    size_t b = cx_plan_bytes(p);
    if (b > e->peak) e->peak = b;
    *out = p;
    return CATTR_OK;
}

/* Steps [s0, s1) added to the accumulators of slot `from` into those of `slot` (the same slot: in place). */
static cattr_status ig_chunk_from(cattr_explainer *e, ig_state *s, cx_call *c, const cattr_tensor *seed, ig_dev *d,
                                  int s0, int s1, int slot, int from) {
    int64_t R = (int64_t)(s1 - s0) * c->B;
    cx_plan *p = NULL;
    CX_CHECK(ig_plan(e, s, c, seed, R, slot, &p));
    size_t off = (size_t)s0 * (size_t)c->B * cattr_dtype_size(c->dt);
    void *in[IG_MAX_IN], *out[CX_MAX_IN];
    for (int i = 0; i < s->n; i++) {
        in[IG_X(i)] = d->x[i].p;
        in[IG_B(i)] = d->b[i].p;
        in[IG_ACC(i)] = d->acc[from][i];
        out[i] = d->acc[slot][i];
        in[IG_ALPHA(i)] = (char *)d->alpha.p + off;
        in[IG_STEP(i)] = (char *)d->step.p + off;
    }
    for (int j = 0; j < s->n_add; j++) in[IG_ADD(j)] = d->add[j].p;
    in[IG_SEED] = d->seed.p;
    in[IG_ROWS] = d->rows.p;
    return cx_run_plan_dev(e, p, NULL, in, NULL, out);
}

/* Steps [s0, s1) added into the accumulators of `slot`. */
static cattr_status ig_chunk(cattr_explainer *e, ig_state *s, cx_call *c, const cattr_tensor *seed, ig_dev *d,
                             int s0, int s1, int slot) {
    return ig_chunk_from(e, s, c, seed, d, s0, s1, slot, slot);
}

/* The attributions from the accumulators of slot 0 (plus those of slot 1 when `two`, added on the backend). */
static cattr_status ig_sum_plan(cattr_explainer *e, ig_state *s, cx_call *c, cx_plan **out);

static cattr_status ig_result(cattr_explainer *e, ig_state *s, cx_call *c, ig_dev *d, bool two, cattr_tensor **attr) {
    void *host[CX_MAX_IN];
    if (c->attr_dev[0]) { /* the caller takes the attributions on the backend */
        size_t es = cattr_dtype_size(c->dt);
        if (!two) {
            for (int i = 0; i < c->n; i++)
                CX_CHECK(cx_copy_dev(e->be, c->attr_dev[i], d->acc[0][i], (size_t)c->x[i]->numel * es));
            return CATTR_OK;
        }
        cx_plan *p = NULL;
        CX_CHECK(ig_sum_plan(e, s, c, &p));
        void *in[2 * CX_MAX_IN];
        for (int k = 0; k < 2 * s->n; k++) in[k] = d->acc[k / s->n][k % s->n];
        return cx_run_plan_dev(e, p, NULL, in, NULL, c->attr_dev);
    }
    for (int i = 0; i < c->n; i++) {
        attr[i] = cx_tensor_alloc(c->dt, c->x[i]->ndim, c->x[i]->shape);
        if (!attr[i]) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        host[i] = attr[i]->data;
    }
    if (!two) {
        for (int i = 0; i < c->n; i++)
            CX_CHECK(cx_copy_out(e->be, host[i], d->acc[0][i], (size_t)attr[i]->numel * cattr_dtype_size(c->dt)));
        return CATTR_OK;
    }
    cx_plan *p = NULL;
    CX_CHECK(ig_sum_plan(e, s, c, &p));
    void *in[2 * CX_MAX_IN];
    for (int k = 0; k < 2 * s->n; k++) in[k] = d->acc[k / s->n][k % s->n];
    if (!d->acc[2][0]) return cx_run_plan_dev(e, p, NULL, in, host, NULL);
    /* a third slot: the sum stays on the backend too (the convergence delta sums it there) */
    CX_CHECK(cx_run_plan_dev(e, p, NULL, in, NULL, d->acc[2]));
    for (int i = 0; i < c->n; i++)
        CX_CHECK(cx_copy_out(e->be, host[i], d->acc[2][i], (size_t)attr[i]->numel * cattr_dtype_size(c->dt)));
    return CATTR_OK;
}

/* The plan of out_i = a_i + b_i over the n inputs' shapes. */
static cattr_status ig_sum_plan(cattr_explainer *e, ig_state *s, cx_call *c, cx_plan **out) {
    if (!s->sum_g) { /* out_i = a_i + b_i */
        cg_graph *g = cg_new();
        if (!g) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        s->sum_g = g;
        int a[CX_MAX_IN], b[CX_MAX_IN];
        for (int i = 0; i < s->n; i++) a[i] = cg_add_input(g, "__ig_half_a");
        for (int i = 0; i < s->n; i++) b[i] = cg_add_input(g, "__ig_half_b");
        for (int i = 0; i < s->n; i++)
            if ((s->sum_outs[i] = cx_emit2(g, CG_ADD, "__ig_halves", a[i], b[i])) < 0)
                return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    int nd[2 * CX_MAX_IN];
    int64_t sh[2 * CX_MAX_IN][CATTR_MAX_DIMS];
    cattr_dtype dt[2 * CX_MAX_IN];
    for (int k = 0; k < 2 * s->n; k++) {
        const cattr_tensor *x = c->x[k % s->n];
        nd[k] = x->ndim;
        memcpy(sh[k], x->shape, sizeof sh[k]);
        dt[k] = c->dt;
    }
    return cx_plan_cache_get(&s->sum_pc, s->sum_g, s->consts, e->p.executor == CATTR_EXEC_EAGER, nd,
                             (const int64_t(*)[CATTR_MAX_DIMS])sh, dt, s->sum_outs, s->n, out);
}

/* Small paths run as two halves of the steps at once (on two cores when there are), each with its own plan: one fork
 * and join per call, where kernels too small to parallelise would fork per op. The halves are added in order: the same
 * numbers as running them one after the other as two chunks, whatever the thread count. */
static cattr_status ig_two_halves(cattr_explainer *e, ig_state *s, cx_call *c, const cattr_tensor *seed, ig_dev *d,
                                  cattr_tensor **attr, double *delta_sel) {
    int n = e->p.n_steps, h = (n + 1) / 2;
    cx_plan *pa = NULL, *pb = NULL;
    cattr_status st = ig_plan(e, s, c, seed, (int64_t)h * c->B, 0, &pa);
    if (st == CATTR_OK) st = ig_plan(e, s, c, seed, (int64_t)(n - h) * c->B, 1, &pb);
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
            ts[t] = t == 0   ? ig_chunk(e, s, c, seed, d, 0, h, 0)
                    : t == 1 ? ig_chunk(e, s, c, seed, d, h, n, 1)
                             : cx_delta_forward(e, c, c->base, delta_sel);
            if (ts[t] != CATTR_OK) snprintf(msg[t], sizeof msg[t], "%s", cattr_last_error());
        }
        for (int t = 0; t < tasks && st == CATTR_OK; t++)
            if (ts[t] != CATTR_OK) st = cx_fail(ts[t], "%s", msg[t]);
    }
    if (st == CATTR_OK) st = ig_result(e, s, c, d, true, attr);
    if (st == CATTR_OK) st = cx_chunk_done(&e->p, n, n);
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


/* ---- one call split into parts (cattr_explainer_run_part / cattr_explainer_combine) -----------------------------
 * A part computes a contiguous range of the call's chunks of steps, each from zeroed accumulators (acc + 0 is exact,
 * so a chunk's value is what one process adds for it), and sends them as bytes; combining adds them in chunk order
 * with the same Add on the backend, so the result is one process's with the same chunks. The bytes: */
#define SPLIT_MAGIC "cattrIG1"
typedef struct split_head {
    char magic[8];
    int64_t dtype, n_steps, quadrature, B, n, numel[CX_MAX_IN], mul;
    int64_t chunk, n_chunks, part, n_parts, first, count; /* steps per chunk, chunks in all; this part's */
} split_head;

int cattr_split_chunk_steps(const void *blob, size_t len) {
    split_head h;
    if (!blob || len < sizeof h) return 0;
    memcpy(&h, blob, sizeof h);
    return memcmp(h.magic, SPLIT_MAGIC, 8) == 0 && h.chunk > 0 && h.chunk <= INT32_MAX ? (int)h.chunk : 0;
}

static void split_fill(const cattr_explainer *e, const ig_state *s, const cx_call *c, split_head *h) {
    memset(h, 0, sizeof *h);
    memcpy(h->magic, SPLIT_MAGIC, 8);
    h->dtype = c->dt;
    h->n_steps = e->p.n_steps;
    h->quadrature = e->p.quadrature;
    h->B = c->B;
    h->n = c->n;
    for (int i = 0; i < c->n; i++) h->numel[i] = c->x[i]->numel;
    h->mul = s->mul;
}

static size_t chunk_bytes(const cx_call *c) {
    size_t b = 0;
    for (int i = 0; i < c->n; i++) b += (size_t)c->x[i]->numel * cattr_dtype_size(c->dt);
    return b;
}

static cattr_status ig_run_part(cattr_explainer *e, ig_state *s, cx_call *c, const cattr_tensor *seed, int chunk) {
    int n = e->p.n_steps, P = e->split.n_parts, part = e->split.part;
    int cap = (n + P - 1) / P;
    if (chunk > cap) chunk = cap;
    int64_t C = (n + chunk - 1) / chunk, first = part * C / P, last = (part + 1) * C / P;
    ig_dev *d = &s->d;
    split_head h;
    split_fill(e, s, c, &h);
    h.chunk = chunk;
    h.n_chunks = C;
    h.part = part;
    h.n_parts = P;
    h.first = first;
    h.count = last - first;
    size_t per = chunk_bytes(c), len = sizeof h + (size_t)h.count * per;
    char *blob = malloc(len);
    if (!blob) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory for a part of %zu bytes", len);
    memcpy(blob, &h, sizeof h);
    cattr_status st = h.count ? ig_upload(e, c, seed, (int64_t)chunk * c->B, 2, d) : CATTR_OK;
    size_t at = sizeof h;
    for (int64_t k = first; k < last && st == CATTR_OK; k++) {
        int s0 = (int)(k * chunk), s1 = s0 + chunk < n ? s0 + chunk : n;
        st = ig_chunk_from(e, s, c, seed, d, s0, s1, 0, 1); /* slot 1 stays zero */
        for (int i = 0; i < c->n && st == CATTR_OK; i++) {
            size_t b = (size_t)c->x[i]->numel * cattr_dtype_size(c->dt);
            st = cx_copy_out(e->be, blob + at, d->acc[0][i], b);
            at += b;
        }
        if (st == CATTR_OK) st = cx_chunk_done(&e->p, (int)(k - first + 1), (int)h.count);
    }
    if (st != CATTR_OK) {
        free(blob);
        return st;
    }
    *e->split.blob = blob;
    *e->split.len = len;
    return CATTR_OK;
}

static cattr_status ig_combine(cattr_explainer *e, ig_state *s, cx_call *c, const cattr_tensor *seed,
                               cattr_tensor **attr, cattr_tensor **delta) {
    int P = e->split.n_comb;
    split_head want, h0;
    split_fill(e, s, c, &want);
    size_t per = chunk_bytes(c);
    int64_t next = 0;
    for (int p = 0; p < P; p++) {
        split_head h;
        const void *b = e->split.parts[p];
        size_t len = e->split.lens[p];
        if (!b || len < sizeof h) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "part %d: %zu bytes, not a part", p, len);
        memcpy(&h, b, sizeof h);
        if (p == 0) h0 = h;
        /* the call's own fields, then the cut: the same in every part, and the parts in order */
        if (memcmp(&h, &want, offsetof(split_head, chunk)) != 0)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "part %d is not a part of this call (another method, dtype, "
                           "step count, batch or inputs)", p);
        if (p == 0 && (h.chunk < 1 || h.chunk > e->p.n_steps || h.n_chunks != (e->p.n_steps + h.chunk - 1) / h.chunk))
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "part 0 cuts the %d steps into %lld chunks of %lld steps: not "
                           "a cut of this call", e->p.n_steps, (long long)h.n_chunks, (long long)h.chunk);
        if (h.chunk != h0.chunk || h.n_chunks != h0.n_chunks || h.n_parts != P)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "part %d cut the steps differently (chunks of %lld and %lld "
                           "steps, %lld and %lld parts): give every part the same internal_batch_size", p,
                           (long long)h0.chunk, (long long)h.chunk, (long long)h0.n_parts, (long long)h.n_parts);
        if (h.part != p || h.first != next || h.count < 0 || h.count > h.n_chunks - next ||
            len != sizeof h + (size_t)h.count * per)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "part %d is out of order, overlaps another or is truncated "
                           "(it says part %lld, %lld chunks from chunk %lld of %lld; %zu bytes)", p, (long long)h.part,
                           (long long)h.count, (long long)h.first, (long long)h.n_chunks, len);
        next += h.count;
    }
    if (P < 1 || next != h0.n_chunks)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "the parts hold %lld of the %lld chunks", (long long)next,
                       (long long)(P < 1 ? 0 : h0.n_chunks));
    /* acc (slot 0 or 2, alternately) + the chunk (uploaded into slot 1), in chunk order */
    ig_dev *d = &s->d;
    cattr_status st = ig_upload(e, c, seed, (int64_t)h0.chunk * c->B, 3, d);
    cx_plan *sp = NULL;
    if (st == CATTR_OK) st = ig_sum_plan(e, s, c, &sp);
    int cur = 0;
    int64_t k = 0;
    for (int p = 0; p < P && st == CATTR_OK; p++) {
        split_head h;
        memcpy(&h, e->split.parts[p], sizeof h);
        const char *at = (const char *)e->split.parts[p] + sizeof h;
        for (int64_t q = 0; q < h.count && st == CATTR_OK; q++, k++) {
            void *in[2 * CX_MAX_IN], *out[CX_MAX_IN];
            for (int i = 0; i < c->n && st == CATTR_OK; i++) {
                size_t b = (size_t)c->x[i]->numel * cattr_dtype_size(c->dt);
                st = cx_copy_in(e->be, d->acc[1][i], at, b);
                at += b;
                in[i] = d->acc[cur][i];
                in[s->n + i] = d->acc[1][i];
                out[i] = d->acc[2 - cur][i];
            }
            if (st == CATTR_OK) st = cx_run_plan_dev(e, sp, NULL, in, NULL, out);
            cur = 2 - cur;
            if (st == CATTR_OK) st = cx_chunk_done(&e->p, (int)(k + 1), (int)h0.n_chunks);
        }
    }
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        attr[i] = cx_tensor_alloc(c->dt, c->x[i]->ndim, c->x[i]->shape);
        st = attr[i] ? cx_copy_out(e->be, attr[i]->data, d->acc[cur][i], (size_t)attr[i]->numel * cattr_dtype_size(c->dt))
                     : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK && delta && e->p.return_convergence_delta)
        st = cx_convergence_delta_dev(e, c, d->acc[cur], c->base, delta);
    return st;
}

static cattr_status integrated_gradients(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    int n = e->p.n_steps;
    ig_state *s = NULL;
    cattr_tensor *seed = NULL;
    int chunk = n;
    cattr_status st = ig_points(e);
    if (st == CATTR_OK) st = steps_per_chunk(e, c, n, &chunk);
    if (st == CATTR_OK) st = ig_state_for(e, c, &s);
    if (st == CATTR_OK) st = cx_seed_block(e, c, &seed);
    if (st == CATTR_OK && (e->split.n_parts > 0 || e->split.n_comb > 0)) {
        st = e->split.n_parts > 0 ? ig_run_part(e, s, c, seed, chunk) : ig_combine(e, s, c, seed, attr, delta);
        cattr_tensor_free(seed);
        return st;
    }
    bool halves = st == CATTR_OK && ig_split_pays(e, c, chunk);
    if (halves) chunk = (n + 1) / 2;
    ig_dev *d = s ? &s->d : NULL;
    bool want = delta && e->p.return_convergence_delta;
    /* a third slot for the delta to sum from, unless the caller takes the sum on the backend (attr_dev) */
    int slots = halves ? (want && !c->attr_dev[0] ? 3 : 2) : 1;
    if (st == CATTR_OK) st = ig_upload(e, c, seed, (int64_t)chunk * c->B, slots, d);
    if (st == CATTR_OK && halves) {
        double *sel = want ? malloc((size_t)(2 * c->B + 1) * sizeof *sel) : NULL;
        if (want && !sel) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK) st = ig_two_halves(e, s, c, seed, d, attr, sel);
        if (st == CATTR_OK && want) cx_keep_fx(e, sel, c->B);
        if (st == CATTR_OK && want) st = cx_delta_dev(e, c, c->n, c->x, c->attr_dev[0] ? c->attr_dev : d->acc[2], sel, delta);
        free(sel);
    } else {
        for (int s0 = 0; s0 < n && st == CATTR_OK; s0 += chunk) {
            int s1 = s0 + chunk < n ? s0 + chunk : n;
            st = ig_chunk(e, s, c, seed, d, s0, s1, 0);
            if (st == CATTR_OK) st = cx_chunk_done(&e->p, s1, n);
        }
        if (st == CATTR_OK) st = ig_result(e, s, c, d, false, attr);
        if (st == CATTR_OK && want) st = cx_convergence_delta_dev(e, c, d->acc[0], c->base, delta);
    }
    cattr_tensor_free(seed);
    return st;
}

const cx_method cx_method_integrated_gradients = {CATTR_METHOD_INTEGRATED_GRADIENTS, "integrated-gradients",
                                                  "IntegratedGradients", false, NULL, integrated_gradients,
                                                  ig_release};

