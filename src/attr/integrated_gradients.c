/* integrated_gradients.c - IntegratedGradients (Captum semantics, shared/reference/captum_spec.md section 2).
 *
 * The whole integration path runs as batched passes on the backend. How the steps are summed is fixed by the call
 * alone, never by how it is run: the n steps are cut into G units of u consecutive steps (u = ceil(n / IG_UNITS),
 * or the steps one pass may hold when the memory budget or internal_batch_size allows fewer), each unit's weighted
 * gradients are summed in step order, the units' sums are added one after the other from zero
 * (((0 + U_0) + U_1) + U_2 ...), a chain of Adds, and the total is multiplied by (x - b) once (Captum's order).
 * A pass computes whole units (as many as the budget allows) and adds them to the chain; small paths run two halves of
 * the units at once; a call split into parts (cattr_explainer_run_part) sends its units' sums and the combining call
 * adds them in the same chain. So the plain call, the two halves and a split over any number of parts give the
 * same bits (test_digits, mpi_test.sh).
 */
#include "attr/derive.h"
#include "attr/internal.h"
#include "core/pool.h"

#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IG_UNITS 16        /* the units a call's steps are cut into, at most (unless the budget asks for smaller) */
#define FOLD_MAX IG_UNITS  /* units one run of the fold graph adds */

/* IG's parameters (n_steps, quadrature, internal_batch_size) are checked by cx_params_check (methods.c). */

/* Steps per pass: Captum's rule for internal_batch_size, else as many as the memory budget allows. */
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

/* The cut of a call's steps: u steps per unit, G units (the last may be shorter), k units per pass. With
 * internal_batch_size a unit is Captum's chunk (Captum sums each chunk's steps, then adds the chunks' sums in order:
 * the same chain); else u = ceil(n / IG_UNITS), or the steps one pass may hold when the budget allows fewer, and a
 * pass holds as many whole units as the budget allows (at most IG_UNITS = FOLD_MAX). */
typedef struct ig_cut {
    int n, u, G, k;
} ig_cut;

static ig_cut ig_cut_for(int n, int chunk, bool captum_chunks) {
    ig_cut t;
    t.n = n;
    t.u = (n + IG_UNITS - 1) / IG_UNITS;
    if (captum_chunks || t.u > chunk) t.u = chunk > 0 ? chunk : 1;
    t.G = (n + t.u - 1) / t.u;
    t.k = chunk / t.u;
    if (t.k > t.G) t.k = t.G;
    if (t.k > FOLD_MAX) t.k = FOLD_MAX; /* not reached: chunk <= n, so chunk / u <= IG_UNITS */
    if (t.k < 1) t.k = 1;
    return t;
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

/* ---- the IG graphs ------------------------------------------------------------------------------------------
 * The pass graph computes k units of steps (R rows, step-major, R = steps * B):
 *   inputs   x_i, b_i [B, ...] (n), the additional inputs a_j [B, ...], seed [B, out...] (the target mask of one
 *            block), rows [R] (int64: row r reads example r mod B), alpha_i and step_i [R, 1, ...] (per row: the
 *            step's alpha in the compute dtype and its float32 step size), urows [R] (row r's unit in the pass
 *            times B plus r mod B), krows [k B] (the first k B entries of rows)
 *   prefix   scaled_i = Gather(b_i, rows) + alpha_i * (Gather(x_i, rows) - Gather(b_i, rows))   (Captum's order)
 *   model    on scaled_i and Gather(a_j, rows); its gradient seeded with Gather(seed, rows)
 *   suffix   U_i = GatherGrad(grad_i * step_i, urows, Gather(x_i, krows))   [k B, ...]: each unit's sum, in step order
 * The fold graph adds units to the chain: inputs acc_i, U_{j,i} (j < FOLD_MAX) and x_i, b_i, all [B, ...]; the
 * value after k units is ((acc_i + U_{0,i}) + U_{1,i}) ... + U_{k-1,i}, and the finished one that times (x_i - b_i)
 * (multiply_by_inputs; else the same value). A call uploads x, b, a, the seed block and the whole schedule once, keeps
 * the chain on the backend from pass to pass, and downloads the attributions once. */
typedef struct ig_dev {
    cx_buf x[CX_MAX_IN], b[CX_MAX_IN], add[CX_MAX_IN], seed, rows, urows, alpha, step;
    cx_buf units;           /* the units' sums: per slot and input, room for kmax units */
    cx_buf accs;            /* the chain's two accumulators per input (it alternates between them) */
    void *u[2][CX_MAX_IN];   /* slot s, input i: unit j at u[s][i] + j * numel_i (the two halves: a slot each) */
    void *acc[2][CX_MAX_IN]; /* acc[0] is zero at the start of a call */
    int cur;                 /* the accumulator holding the chain */
    int64_t sched_B, sched_rows; /* what the schedule on the backend was made for (0: none) */
    int sched_steps, sched_u;
    cattr_dtype sched_dt;
} ig_dev;

/* Where unit j of input i (b bytes) of slot 0 lies in d->units. */
static size_t unit_off(const ig_dev *d, int i, int64_t j, size_t b) {
    return (size_t)((const char *)d->u[0][i] - (const char *)d->units.p) + (size_t)j * b;
}

typedef struct ig_state {
    cg_graph *g; /* the pass, for n inputs and n_add additional ones */
    int n, n_add, mul;
    int outs[CX_MAX_IN];
    cx_consts *consts;
    cg_graph *fold_g;
    int fold_out[FOLD_MAX + 1][CX_MAX_IN], fin_out[FOLD_MAX + 1][CX_MAX_IN]; /* after k units; finished */
    ig_dev d;
} ig_state;

static void ig_dev_free(ig_dev *d) {
    for (int i = 0; i < CX_MAX_IN; i++) {
        cx_buf_free(&d->x[i]);
        cx_buf_free(&d->b[i]);
        cx_buf_free(&d->add[i]);
    }
    cx_buf_free(&d->units);
    cx_buf_free(&d->accs);
    cx_buf_free(&d->seed);
    cx_buf_free(&d->rows);
    cx_buf_free(&d->urows);
    cx_buf_free(&d->alpha);
    cx_buf_free(&d->step);
}

static void ig_release(cattr_explainer *e) {
    ig_state *s = e->method_state;
    if (!s) return;
    ig_dev_free(&s->d);
    cx_consts_free(s->consts);
    cg_free(s->g);
    cg_free(s->fold_g);
    free(s);
    e->method_state = NULL;
}

/* pass-graph input positions (5 n + n_add + 4 of them) */
#define IG_MAX_IN (6 * CX_MAX_IN + 4)
_Static_assert(IG_MAX_IN <= CX_RUN_MAX_IN, "a run takes at most CX_RUN_MAX_IN inputs");
#define IG_X(i) (i)
#define IG_B(i) (s->n + (i))
#define IG_ADD(j) (2 * s->n + (j))
#define IG_SEED (2 * s->n + s->n_add)
#define IG_ROWS (IG_SEED + 1)
#define IG_ALPHA(i) (IG_ROWS + 1 + (i))
#define IG_STEP(i) (IG_ROWS + 1 + s->n + (i))
#define IG_UROWS (IG_ROWS + 1 + 2 * s->n)
#define IG_KROWS (IG_UROWS + 1)
#define IG_N_IN (IG_KROWS + 1)
/* fold-graph input positions (n (FOLD_MAX + 3) of them) */
#define F_MAX_IN (CX_MAX_IN * (FOLD_MAX + 3))
_Static_assert(F_MAX_IN <= CX_RUN_MAX_IN, "a run takes at most CX_RUN_MAX_IN inputs");
#define F_ACC(i) (i)
#define F_U(j, i) (s->n + (j) * s->n + (i))
#define F_X(i) (s->n * (FOLD_MAX + 1) + (i))
#define F_B(i) (s->n * (FOLD_MAX + 2) + (i))
#define F_N_IN (s->n * (FOLD_MAX + 3))

static cattr_status ig_build(cattr_explainer *e, ig_state *s) {
    const cg_graph *m = e->m->g;
    cg_graph *g = NULL;
    int *map = NULL;
    CX_CHECK(cx_derive_new(m, &g, &map));
    int v[IG_MAX_IN], bad = 0;
    for (int k = 0; k < IG_MAX_IN; k++) v[k] = -1;
    for (int k = 0; k < IG_N_IN; k++) {
        const char *kind = k < s->n ? "__ig_x" : k < 2 * s->n ? "__ig_b" : k < IG_SEED ? "__ig_add" : k == IG_SEED ? "__ig_seed"
                         : k == IG_ROWS ? "__ig_rows" : k < IG_STEP(0) ? "__ig_alpha" : k < IG_UROWS ? "__ig_step"
                         : k == IG_UROWS ? "__ig_urows" : "__ig_krows";
        char nm[64];
        snprintf(nm, sizeof nm, "%s%d", kind, k);
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
        int like = cx_emit2(g, CG_GATHER, "__ig_unit_shape", v[IG_X(i)], v[IG_KROWS]);
        int in3[3] = {w, v[IG_UROWS], like};
        s->outs[i] = w < 0 || like < 0 ? -1 : cg_emit(g, CG_GATHER_GRAD, "__ig_unit_sum", in3, 3, NULL);
        if (s->outs[i] < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    free(map);
    if (st != CATTR_OK) {
        cg_free(g);
        return st;
    }
    s->g = g;
    /* the fold: the chain of Adds, each prefix of it an output */
    cg_graph *f = cg_new();
    if (!f) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    s->fold_g = f;
    int fv[F_MAX_IN];
    for (int k = 0; k < F_N_IN; k++) bad |= (fv[k] = cg_add_input(f, "__ig_fold_in")) < 0;
    for (int i = 0; i < s->n && !bad; i++) {
        int a = fv[F_ACC(i)], diff = s->mul ? cx_emit2(f, CG_SUB, "__ig_x_minus_b", fv[F_X(i)], fv[F_B(i)]) : -1;
        bad |= s->mul && diff < 0;
        s->fold_out[0][i] = s->fin_out[0][i] = a;
        for (int j = 0; j < FOLD_MAX && !bad; j++) {
            a = cx_emit2(f, CG_ADD, "__ig_chain", a, fv[F_U(j, i)]);
            s->fold_out[j + 1][i] = a;
            s->fin_out[j + 1][i] = s->mul ? cx_emit2(f, CG_MUL, "__ig_times_diff", a, diff) : a;
            bad |= a < 0 || s->fin_out[j + 1][i] < 0;
        }
    }
    return bad ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : CATTR_OK;
}

/* The state for this call's input counts: the graphs (rebuilt when they change) and their constants. */
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

/* Shapes and dtypes of the pass graph's inputs for R rows holding k units. */
/* Uploads the call: inputs, baselines, additional inputs, the seed block, and (when it changed) the schedule of
 * every step (rows, unit rows of at most max_rows; alphas and step sizes per row, step-major); room for kmax units
 * in `slots` slots and the chain's accumulators, acc[0] zeroed. */
static cattr_status ig_upload(cattr_explainer *e, cx_call *c, const cattr_tensor *seed, const ig_cut *t,
                              int64_t max_rows, int64_t kmax, int slots, ig_dev *d) {
    cx_backend *be = e->be;
    int n = e->p.n_steps;
    int64_t B = c->B, all = (int64_t)n * B;
    size_t es = cattr_dtype_size(c->dt), one = 0;
    for (int i = 0; i < c->n; i++) {
        size_t bytes = (size_t)c->x[i]->numel * es;
        CX_CHECK(cx_buf_fit(be, &d->x[i], bytes, NULL, false));
        CX_CHECK(cx_buf_put(&d->x[i], 0, c->x[i]->data, c->x_dev[i], bytes)); /* or from the backend (x_dev) */
        CX_CHECK(cx_buf_fit(be, &d->b[i], bytes, c->base[i]->data, false));
        one += (bytes + 63) / 64 * 64;
    }
    CX_CHECK(cx_buf_fit(be, &d->accs, one * 2, NULL, true));
    CX_CHECK(cx_buf_fit(be, &d->units, one * (size_t)kmax * (size_t)slots, NULL, false));
    size_t off = 0, uoff = 0;
    memset(d->u, 0, sizeof d->u); /* the slots not asked for stay NULL */
    for (int i = 0; i < c->n; i++) {
        size_t bytes = ((size_t)c->x[i]->numel * es + 63) / 64 * 64;
        d->acc[0][i] = (char *)d->accs.p + off;
        d->acc[1][i] = (char *)d->accs.p + one + off;
        off += bytes;
        for (int k = 0; k < slots; k++) d->u[k][i] = (char *)d->units.p + (size_t)k * one * (size_t)kmax + uoff;
        uoff += bytes * (size_t)kmax;
    }
    d->cur = 0;
    for (int j = 0; j < c->n_add; j++)
        CX_CHECK(cx_buf_fit(be, &d->add[j], (size_t)c->add[j]->numel * cattr_dtype_size(c->add[j]->dtype),
                             c->add[j]->data, false));
    CX_CHECK(cx_buf_fit(be, &d->seed, (size_t)seed->numel * es, seed->data, false));
    if (d->sched_B == B && d->sched_rows >= max_rows && d->sched_steps == n && d->sched_u == t->u &&
        d->sched_dt == c->dt)
        return CATTR_OK;
    d->sched_B = 0;
    int64_t *rows = malloc((size_t)(2 * max_rows + 1) * sizeof *rows), *urows = rows ? rows + max_rows : NULL;
    cattr_tensor *al = cx_tensor_alloc(c->dt, 1, &all), *stp = cx_tensor_alloc(c->dt, 1, &all);
    cattr_status st = rows && al && stp ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) {
        for (int64_t r = 0; r < max_rows; r++) {
            rows[r] = r % B;
            urows[r] = (r / B / t->u) * B + r % B; /* a pass starts at a unit: its step r / B, unit (r / B) / u */
        }
        for (int64_t r = 0; r < all; r++) {
            cx_tensor_set(al, r, e->alphas[r / B]);
            cx_tensor_set(stp, r, e->steps[r / B]);
        }
        st = cx_buf_fit(be, &d->rows, (size_t)max_rows * sizeof *rows, rows, false);
    }
    if (st == CATTR_OK) st = cx_buf_fit(be, &d->urows, (size_t)max_rows * sizeof *rows, urows, false);
    if (st == CATTR_OK) st = cx_buf_fit(be, &d->alpha, (size_t)all * es, al->data, false);
    if (st == CATTR_OK) st = cx_buf_fit(be, &d->step, (size_t)all * es, stp->data, false);
    if (st == CATTR_OK) {
        d->sched_B = B;
        d->sched_rows = max_rows;
        d->sched_steps = n;
        d->sched_u = t->u;
        d->sched_dt = c->dt;
    }
    free(rows);
    cattr_tensor_free(al);
    cattr_tensor_free(stp);
    return st;
}

/* The job of the pass over units [j0, j1) in slot `slot` (its inputs in arg[IG_MAX_IN], read where ig_upload put
 * them), computing the units into the slot's unit buffers (unit j0 first). */
static cx_job ig_job(cattr_explainer *e, ig_state *s, cx_call *c, const cattr_tensor *seed, const ig_cut *t,
                     int64_t j0, int64_t j1, int slot, cx_arg *arg) {
    ig_dev *d = &s->d;
    int64_t s0 = j0 * t->u, s1 = j1 * t->u < t->n ? j1 * t->u : t->n, R = (s1 - s0) * c->B;
    size_t off = (size_t)s0 * (size_t)c->B * cattr_dtype_size(c->dt);
    memset(arg, 0, (size_t)IG_N_IN * sizeof *arg); /* the inputs of the graph only: a pass runs per call */
    for (int i = 0; i < s->n; i++) {
        const cattr_tensor *x = c->x[i];
        cx_arg *a[4] = {&arg[IG_X(i)], &arg[IG_B(i)], &arg[IG_ALPHA(i)], &arg[IG_STEP(i)]};
        for (int q = 0; q < 4; q++) {
            a[q]->nd = x->ndim;
            a[q]->dt = c->dt;
            for (int k = 0; k < x->ndim; k++) a[q]->sh[k] = q < 2 ? x->shape[k] : k ? 1 : R;
        }
        arg[IG_X(i)].dev = d->x[i].p;
        arg[IG_B(i)].dev = d->b[i].p;
        arg[IG_ALPHA(i)].dev = (char *)d->alpha.p + off;
        arg[IG_STEP(i)].dev = (char *)d->step.p + off;
    }
    for (int j = 0; j < s->n_add; j++) arg[IG_ADD(j)] = cx_arg_dev(c->add[j], d->add[j].p);
    arg[IG_SEED] = cx_arg_dev(seed, d->seed.p);
    arg[IG_SEED].dt = c->dt;
    cx_arg rows = {.nd = 1, .sh = {R}, .dt = CATTR_INT64, .dev = d->rows.p};
    arg[IG_ROWS] = arg[IG_UROWS] = arg[IG_KROWS] = rows;
    arg[IG_UROWS].dev = d->urows.p;
    arg[IG_KROWS].sh[0] = (j1 - j0) * c->B;
    cx_job j = cx_job_for(e, s->g, s->consts);
    j.slot = slot; /* the two halves run at once: a slot each, each slot's plans sharing one arena */
    j.share_arena = true;
    j.n_in = IG_N_IN;
    j.in = arg;
    j.n_out = s->n;
    j.outs = s->outs;
    j.out_dev = d->u[slot];
    return j;
}

/* Makes the plan of the pass over units [j0, j1) in slot `slot` (before any pass runs beside another: making a plan
 * shares the constants). */
static cattr_status ig_pass_plan(cattr_explainer *e, ig_state *s, cx_call *c, const cattr_tensor *seed,
                                 const ig_cut *t, int64_t j0, int64_t j1, int slot) {
    cx_arg arg[IG_MAX_IN];
    cx_job j = ig_job(e, s, c, seed, t, j0, j1, slot, arg);
    size_t bytes;
    return cx_run_bytes(&j, true, &bytes);
}

/* Units [j0, j1) computed into slot `slot`'s unit buffers (unit j0 first); `planned`: ig_pass_plan made the plan
 * (the pass may then run beside the other slot's: it neither makes a plan nor writes the explainer's peak). */
static cattr_status ig_pass(cattr_explainer *e, ig_state *s, cx_call *c, const cattr_tensor *seed, const ig_cut *t,
                            int64_t j0, int64_t j1, int slot, bool planned) {
    cx_arg arg[IG_MAX_IN];
    cx_job j = ig_job(e, s, c, seed, t, j0, j1, slot, arg);
    if (planned) j.peak = NULL;
    return cx_run(&j);
}

/* Adds k units (unit j of input i at units[j * n + i]) to the chain; `fin`: the last of them, the attributions
 * written to out (backend buffers; NULL: the chain's next accumulator). */
static cattr_status ig_fold(cattr_explainer *e, ig_state *s, cx_call *c, void *const *units, int k, bool fin,
                            void *const *out) {
    ig_dev *d = &s->d;
    cx_arg arg[F_MAX_IN];
    for (int q = 0; q < F_N_IN; q++) {
        arg[q] = cx_arg_dev(c->x[q % s->n], d->acc[d->cur][q % s->n]); /* the units past k are not read */
        arg[q].dt = c->dt;
    }
    for (int j = 0; j < k; j++)
        for (int i = 0; i < s->n; i++) arg[F_U(j, i)].dev = units[j * s->n + i];
    for (int i = 0; i < s->n; i++) {
        arg[F_X(i)].dev = d->x[i].p;
        arg[F_B(i)].dev = d->b[i].p;
    }
    cx_job j = cx_job_for(e, s->fold_g, s->consts);
    j.plans = CX_PLAN_CACHE_MAX; /* a pass's, the last pass's and the finishing fold, per batch */
    j.n_in = F_N_IN;
    j.in = arg;
    j.n_out = s->n;
    j.outs = fin ? s->fin_out[k] : s->fold_out[k];
    j.out_dev = out ? out : d->acc[1 - d->cur];
    CX_CHECK(cx_run(&j));
    if (!out) d->cur = 1 - d->cur;
    return CATTR_OK;
}

/* The k units of slot `slot` as the fold's pointer list (units[j * n + i]). */
static void slot_units(const ig_state *s, const cx_call *c, int slot, int k, void **units) {
    size_t es = cattr_dtype_size(c->dt);
    for (int j = 0; j < k; j++)
        for (int i = 0; i < s->n; i++)
            units[j * s->n + i] = (char *)s->d.u[slot][i] + (size_t)j * (size_t)c->x[i]->numel * es;
}

/* Where the finished chain goes: the caller's backend buffers (attr_dev), else the accumulator not holding it. */
static void *const *fin_target(ig_state *s, const cx_call *c) {
    return c->attr_dev[0] ? (void *const *)c->attr_dev : (void *const *)s->d.acc[1 - s->d.cur];
}

/* The finished attributions on the backend (after the finishing fold) and, unless the caller takes them there, on
 * the host. */
static cattr_status ig_download(const ig_dev *d, cx_call *c, void *const *res, cattr_tensor **attr) {
    if (c->attr_dev[0]) return CATTR_OK;
    for (int i = 0; i < c->n; i++) { /* res: an accumulator of d->accs */
        attr[i] = cx_tensor_alloc(c->dt, c->x[i]->ndim, c->x[i]->shape);
        if (!attr[i]) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        size_t off = (size_t)((const char *)res[i] - (const char *)d->accs.p);
        CX_CHECK(cx_buf_get(&d->accs, off, attr[i]->data, NULL, (size_t)attr[i]->numel * cattr_dtype_size(c->dt)));
    }
    return CATTR_OK;
}

/* The tasks of the two halves (cx_pool_run): each half's pass, and the delta's forward pass. */
typedef struct halves_job {
    cattr_explainer *e;
    ig_state *s;
    cx_call *c;
    const cattr_tensor *seed;
    const ig_cut *t;
    int64_t h;
    double *delta_sel;
    cattr_status ts[3];
    char msg[3][512];
} halves_job;

static void halves_task(void *user, int q) {
    halves_job *j = user;
    j->ts[q] = q == 0   ? ig_pass(j->e, j->s, j->c, j->seed, j->t, 0, j->h, 0, true)
               : q == 1 ? ig_pass(j->e, j->s, j->c, j->seed, j->t, j->h, j->t->G, 1, true)
                        : cx_delta_forward(j->e, j->c, j->c->base, j->delta_sel);
    if (j->ts[q] != CATTR_OK) snprintf(j->msg[q], sizeof j->msg[q], "%s", cattr_last_error());
}

/* Small paths run as two halves of the units at once (on two cores when there are), each with its own plan: one
 * fork and join per call, where kernels too small to parallelise would fork per op. The fold then adds every unit
 * in order: the same chain as passes one after the other, whatever the thread count. */
static cattr_status ig_two_halves(cattr_explainer *e, ig_state *s, cx_call *c, const cattr_tensor *seed,
                                  const ig_cut *t, void *const **res, double *delta_sel) {
    int64_t h = (t->G + 1) / 2;
    cattr_status st = ig_pass_plan(e, s, c, seed, t, 0, h, 0);
    if (st == CATTR_OK) st = ig_pass_plan(e, s, c, seed, t, h, t->G, 1);
    if (st == CATTR_OK && delta_sel) st = cx_delta_prepare(e, c, c->base);
    /* three tasks, taken by whichever thread is free: the two halves and the delta's forward pass */
    halves_job hj = {e, s, c, seed, t, h, delta_sel, {CATTR_OK, CATTR_OK, CATTR_OK}, {"", "", ""}};
    int tasks = delta_sel ? 3 : 2;
    if (st == CATTR_OK) {
        /* two threads at most, one where the user limits OpenMP to one (OMP_NUM_THREADS=1); the sums are the same */
        cx_pool_run(tasks, omp_get_max_threads() < 2 ? 1 : 2, halves_task, &hj);
        for (int q = 0; q < tasks && st == CATTR_OK; q++)
            if (hj.ts[q] != CATTR_OK) st = cx_fail(hj.ts[q], "%s", hj.msg[q]);
    }
    void *units[FOLD_MAX * CX_MAX_IN];
    slot_units(s, c, 0, (int)h, units);
    slot_units(s, c, 1, (int)(t->G - h), units + h * s->n);
    *res = fin_target(s, c);
    if (st == CATTR_OK) st = ig_fold(e, s, c, units, t->G, true, *res);
    if (st == CATTR_OK) st = cx_chunk_done(&e->p, t->n, t->n);
    return st;
}

/* Whether a path is small enough that its kernels run on one core each (see PAR_MIN), so that two halves at once
 * pay; big paths parallelise inside their kernels instead. */
static bool ig_split_pays(const cattr_explainer *e, const cx_call *c, const ig_cut *t) {
    /* decided by sizes alone, never by the thread count, so that the numbers do not depend on the machine (and they
     * would not: the halves fold the same units in the same order) */
    if (e->p.internal_batch_size > 0 || t->k < t->G || t->G < 2 || t->G > FOLD_MAX || e->p.n_steps < 4) return false;
    int64_t elems = 0;
    for (int i = 0; i < c->n; i++) elems += c->x[i]->numel;
    /* below ~1k input elements a fork costs more than the whole pass (an MLP on a few features) */
    return elems * e->p.n_steps >= 1024 && elems * e->p.n_steps <= ((int64_t)1 << 16);
}

/* ---- one call split into parts (cattr_explainer_run_part / cattr_explainer_combine) -----------------------------
 * A part computes a contiguous range of the call's units and sends their sums as bytes; combining adds every unit to
 * the chain in order, with the fold one process runs, so the result is one process's, bit for bit. The cut into units
 * depends on the call (its steps, and the memory budget or internal_batch_size when they allow fewer steps per pass
 * than a unit), never on the number of parts. The bytes: */
#define SPLIT_MAGIC "cattrIG2"
typedef struct split_head {
    char magic[8];
    int64_t dtype, n_steps, quadrature, B, n, numel[CX_MAX_IN], mul;
    int64_t chunk, n_chunks, part, n_parts, first, count; /* steps per unit, units in all; this part's */
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

static size_t unit_bytes(const cx_call *c) {
    size_t b = 0;
    for (int i = 0; i < c->n; i++) b += (size_t)c->x[i]->numel * cattr_dtype_size(c->dt);
    return b;
}

static cattr_status ig_run_part(cattr_explainer *e, ig_state *s, cx_call *c, const cattr_tensor *seed,
                                const ig_cut *t) {
    int64_t P = e->split.n_parts, part = e->split.part;
    int64_t first = part * t->G / P, last = (part + 1) * t->G / P;
    split_head h;
    split_fill(e, s, c, &h);
    h.chunk = t->u;
    h.n_chunks = t->G;
    h.part = part;
    h.n_parts = P;
    h.first = first;
    h.count = last - first;
    size_t len = sizeof h + (size_t)h.count * unit_bytes(c), es = cattr_dtype_size(c->dt);
    char *blob = malloc(len);
    if (!blob) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory for a part of %zu bytes", len);
    memcpy(blob, &h, sizeof h);
    cattr_status st = h.count ? ig_upload(e, c, seed, t, (int64_t)t->k * t->u * c->B, t->k, 1, &s->d) : CATTR_OK;
    size_t at = sizeof h;
    for (int64_t j0 = first; j0 < last && st == CATTR_OK; j0 += t->k) {
        int64_t j1 = j0 + t->k < last ? j0 + t->k : last;
        st = ig_pass(e, s, c, seed, t, j0, j1, 0, false);
        for (int64_t j = 0; j < j1 - j0 && st == CATTR_OK; j++)
            for (int i = 0; i < c->n && st == CATTR_OK; i++) {
                size_t b = (size_t)c->x[i]->numel * es;
                st = cx_buf_get(&s->d.units, unit_off(&s->d, i, j, b), blob + at, NULL, b);
                at += b;
            }
        if (st == CATTR_OK) st = cx_chunk_done(&e->p, j1 - first, h.count);
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
                               const ig_cut *t, cattr_tensor **attr, cattr_tensor **delta) {
    int P = e->split.n_comb;
    split_head want, h0;
    split_fill(e, s, c, &want);
    size_t per = unit_bytes(c), es = cattr_dtype_size(c->dt);
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
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "part 0 cuts the %d steps into %lld units of %lld steps: not "
                           "a cut of this call", e->p.n_steps, (long long)h.n_chunks, (long long)h.chunk);
        if (h.chunk != h0.chunk || h.n_chunks != h0.n_chunks || h.n_parts != P)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "part %d cut the steps differently (units of %lld and %lld "
                           "steps, %lld and %lld parts): give every part the same internal_batch_size or memory "
                           "budget", p, (long long)h0.chunk, (long long)h.chunk, (long long)h0.n_parts,
                           (long long)h.n_parts);
        if (h.part != p || h.first != next || h.count < 0 || h.count > h.n_chunks - next ||
            len != sizeof h + (size_t)h.count * per)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "part %d is out of order, overlaps another or is truncated "
                           "(it says part %lld, %lld units from unit %lld of %lld; %zu bytes)", p, (long long)h.part,
                           (long long)h.count, (long long)h.first, (long long)h.n_chunks, len);
        next += h.count;
    }
    if (P < 1 || next != h0.n_chunks)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "the parts hold %lld of the %lld units", (long long)next,
                       (long long)(P < 1 ? 0 : h0.n_chunks));
    /* the units uploaded FOLD_MAX at a time into slot 0, each group added to the chain, the last one finishing */
    ig_cut ct = *t;
    ct.u = (int)h0.chunk;
    ct.G = (int)h0.n_chunks;
    int64_t kmax = ct.G < FOLD_MAX ? ct.G : FOLD_MAX;
    cattr_status st = ig_upload(e, c, seed, &ct, (int64_t)ct.u * c->B, kmax, 1, &s->d);
    void *units[FOLD_MAX * CX_MAX_IN];
    void *const *res = NULL;
    int p = 0;
    const char *at = (const char *)e->split.parts[0] + sizeof(split_head);
    int64_t left = 0; /* units of part p not read yet */
    memcpy(&h0, e->split.parts[0], sizeof h0);
    left = h0.count;
    for (int64_t j0 = 0; j0 < ct.G && st == CATTR_OK; j0 += kmax) {
        int k = (int)(ct.G - j0 < kmax ? ct.G - j0 : kmax);
        for (int j = 0; j < k && st == CATTR_OK; j++) {
            while (left == 0) { /* the next part holding units */
                split_head h;
                memcpy(&h, e->split.parts[++p], sizeof h);
                at = (const char *)e->split.parts[p] + sizeof h;
                left = h.count;
            }
            for (int i = 0; i < c->n && st == CATTR_OK; i++) {
                size_t b = (size_t)c->x[i]->numel * es;
                st = cx_buf_put(&s->d.units, unit_off(&s->d, i, j, b), at, NULL, b);
                at += b;
            }
            left--;
        }
        slot_units(s, c, 0, k, units);
        bool fin = j0 + k >= ct.G;
        if (fin) res = fin_target(s, c);
        if (st == CATTR_OK) st = ig_fold(e, s, c, units, k, fin, fin ? res : NULL);
        if (st == CATTR_OK) st = cx_chunk_done(&e->p, j0 + k, ct.G);
    }
    if (st == CATTR_OK) st = ig_download(&s->d, c, res, attr);
    if (st == CATTR_OK && delta && e->p.return_convergence_delta)
        st = cx_convergence_delta_dev(e, c, res, c->base, delta);
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
    ig_cut t = ig_cut_for(n, chunk, e->p.internal_batch_size > 0);
    if (st == CATTR_OK && (e->split.n_parts > 0 || e->split.n_comb > 0)) {
        st = e->split.n_parts > 0 ? ig_run_part(e, s, c, seed, &t) : ig_combine(e, s, c, seed, &t, attr, delta);
        cattr_tensor_free(seed);
        return st;
    }
    bool halves = st == CATTR_OK && ig_split_pays(e, c, &t);
    int64_t kmax = halves ? (t.G + 1) / 2 : t.k;
    bool want = delta && e->p.return_convergence_delta;
    if (st == CATTR_OK) st = ig_upload(e, c, seed, &t, kmax * t.u * c->B, kmax, halves ? 2 : 1, &s->d);
    void *const *res = NULL;
    if (st == CATTR_OK && halves) {
        double *sel = want ? malloc((size_t)(2 * c->B + 1) * sizeof *sel) : NULL;
        if (want && !sel) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK) st = ig_two_halves(e, s, c, seed, &t, &res, sel);
        if (st == CATTR_OK) st = ig_download(&s->d, c, res, attr);
        if (st == CATTR_OK && want) cx_keep_fx(e, sel, c->B);
        if (st == CATTR_OK && want) st = cx_delta_dev(e, c, c->n, c->x, res, sel, delta);
        free(sel);
    } else {
        void *units[FOLD_MAX * CX_MAX_IN];
        for (int64_t j0 = 0; j0 < t.G && st == CATTR_OK; j0 += t.k) {
            int64_t j1 = j0 + t.k < t.G ? j0 + t.k : t.G;
            bool fin = j1 == t.G;
            st = ig_pass(e, s, c, seed, &t, j0, j1, 0, false);
            slot_units(s, c, 0, (int)(j1 - j0), units);
            if (fin) res = fin_target(s, c);
            if (st == CATTR_OK) st = ig_fold(e, s, c, units, (int)(j1 - j0), fin, fin ? res : NULL);
            if (st == CATTR_OK) st = cx_chunk_done(&e->p, j1 * t.u < n ? j1 * t.u : n, n);
        }
        if (st == CATTR_OK) st = ig_download(&s->d, c, res, attr);
        if (st == CATTR_OK && want) st = cx_convergence_delta_dev(e, c, res, c->base, delta);
    }
    cattr_tensor_free(seed);
    return st;
}

const cx_method cx_method_integrated_gradients = {CATTR_METHOD_INTEGRATED_GRADIENTS, false, NULL, integrated_gradients,
                                                  ig_release};
