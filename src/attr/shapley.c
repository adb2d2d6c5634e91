/* shapley.c - ShapleyValueSampling and ShapleyValues (Captum semantics: shared/reference/captum_spec.md section 6): one
 * difference per feature and permutation, added into float32 totals in permutation order, divided by the number of
 * permutations. The masks, states and passes are perturbation.c's (perturb_internal.h). */
#include "attr/perturb_internal.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- ShapleyValueSampling and ShapleyValues --------------------------------------------------------------------- */

typedef struct sv_run {
    pt_masks *pm;
    pt_ref *ref;
    int64_t M;
    int64_t *perms;         /* SVS: n_samples x M feature orders */
    double *prev;           /* SVS: outputs of the previous state */
    double *coal;           /* ShapleyValues: outputs per coalition, 2^M x n_out */
    double *acc;            /* n_out x M float32 totals */
} sv_run;

/* total[r, f] += y_after - y_before in float32 (Captum's float32 totals; the difference in the output dtype). */
static void sv_accumulate(sv_run *s, int64_t f, const double *after, const double *before) {
    const pt_ref *ref = s->ref;
    for (int64_t r = 0; r < ref->n_out; r++) {
        double d = cx_rnd(ref->dt, after[r] - before[r]);
        double *a = &s->acc[r * s->M + f];
        *a = (double)(float)(*a + d);
    }
}

static cattr_status svs_take(pt_pass *p, int64_t s, const double *y) {
    sv_run *sv = p->user;
    sv_accumulate(sv, sv->perms[s], y, s % sv->M == 0 ? sv->ref->y : sv->prev);
    memcpy(sv->prev, y, (size_t)sv->ref->n_out * sizeof *y);
    return CATTR_OK;
}

static cattr_status sv_take(pt_pass *p, int64_t s, const double *y) {
    sv_run *sv = p->user;
    memcpy(sv->coal + (s + 1) * sv->ref->n_out, y, (size_t)sv->ref->n_out * sizeof *y);
    return CATTR_OK;
}

/* ---- the Shapley methods' states on the backend ---------------------------------------------------------------
 * A state keeps the inputs' values on the features added so far and the baselines elsewhere. A chunk of states
 * (R = cnt * B rows) runs as one graph:
 *   inputs   x_i, base_i [B, ...]; rk_i int64 [T * I, ...] (row t * I + j: the rank of each element's feature in table
 *            row t, for id row j of I: one list of ids for every example, I = 1, or per example, I = B); the
 *            additional inputs; rkrow, thr [R] (each row's rank row and how many ranks are added: an element is added
 *            when its rank <= thr); rows [R] (r mod B); with a target tidx [R]
 *   prefix   in_i = WhereId[<=](base_i, x_i, rk_i, thr; rows, rows, rkrow): read in place
 *   model    on in_i and Gather(a_j, rows); suffix: the target output per row (SeqPick), or every output value
 * The rank rows are made on the backend once per call from a small table, tab int64 [T, M + 1] (per table row, the
 * rank of "no feature" (never added) then of each feature), and the feature ids, ids_i int64 [I, ...] (each element's
 * feature + 1, 0 for none): rk_i = ReshapeLike(SeqPick(Reshape(Gather(tab, tsel), [T I, M + 1, 1]),
 * Reshape(d_i, [T I, -1])), d_i) with d_i = Gather(ids_i, isel) (sv_table_build).
 * ShapleyValueSampling's table holds the rank of each feature in each order (state t * M + j: order t, thr j);
 * ShapleyValues' holds 0 for a coalition's features and 1 for the others (thr 0). The inputs, the ids and the table
 * go up once per call; the rank rows are made for a window of the table's rows at a time (a quarter of the memory
 * budget, at most SV_TABLE_BYTES), again when the states move past it; per chunk the rows' rank rows and thresholds
 * go up and the outputs come back, to be combined in Captum's order. */
typedef struct sv_graph {
    cx_derived core; /* graph, call shape, constants, plans */
    bool whole;      /* built for a model of the whole batch (perturb_forms.h) */
    int y;
    cx_call_dev cd; /* inputs, baselines, additional inputs, rows, targets, outputs */
    cx_buf rk[CX_MAX_IN];
    cx_derived tg; /* the rank rows' graph (sv_table_build) */
    int tg_outs[CX_MAX_IN];
} sv_graph;

static void sv_release(cattr_explainer *e) {
    sv_graph *s = e->method_state;
    if (!s) return;
    cx_call_dev_free(&s->cd);
    for (int i = 0; i < CX_MAX_IN; i++) cx_buf_free(&s->rk[i]);
    cx_derived_free(&s->tg);
    cx_derived_free(&s->core);
    free(s);
    e->method_state = NULL;
}

#define SG_X(i) (i)
#define SG_BASE(i) (s->core.n + (i))
#define SG_RK(i) (2 * s->core.n + (i))
#define SG_ADD(j) (3 * s->core.n + (j))
#define SG_TROW (3 * s->core.n + s->core.n_add)
#define SG_THR (SG_TROW + 1)
#define SG_ROWS (SG_TROW + 2)
#define SG_TIDX (SG_TROW + 3)
#define SG_N_IN (SG_TROW + 3 + (s->core.target ? 1 : 0))
#define SG_MAX_IN (4 * CX_MAX_IN + 4)
#define SV_TABLE_BYTES ((size_t)256 << 20) /* the rank rows on the backend at a time: a window of the table */

static cattr_status sv_build(cattr_explainer *e, void *state) {
    sv_graph *s = state;
    bool whole = s->whole = cx_pform_building_whole;
    const cg_graph *m = e->m->g;
    cg_graph *g = NULL;
    int *map = NULL;
    CX_CHECK(cx_derive_new(m, &g, &map));
    int v[SG_MAX_IN], in_map[2 * CX_MAX_IN], bad = 0;
    for (int k = 0; k < SG_N_IN; k++) {
        char nm[48];
        snprintf(nm, sizeof nm, "__sv_in%d", k);
        bad |= (v[k] = cg_add_input(g, nm)) < 0;
    }
    cg_attrs a0 = cg_attrs_default(), le = cg_attrs_default();
    le.index = 1;
    for (int i = 0; i < s->core.n && !bad; i++) {
        in_map[i] = cg_emit(g, CG_WHERE_ID, "__sv_state",
                            (int[]){v[SG_BASE(i)], v[SG_X(i)], v[SG_RK(i)], v[SG_THR], v[SG_ROWS], v[SG_ROWS],
                                    v[SG_TROW]},
                            7, &le);
        in_map[i] = cx_pform_model_input(g, whole, in_map[i]);
        bad |= in_map[i] < 0;
    }
    for (int j = 0; j < s->core.n_add && !bad; j++)
        bad |= (in_map[s->core.n + j] = cx_pform_model_input(
                    g, whole, cg_emit(g, CG_GATHER, "__sv_at", (int[]){v[SG_ADD(j)], v[SG_ROWS]}, 2, &a0))) < 0;
    cattr_status st = bad ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : CATTR_OK;
    if (st == CATTR_OK) st = cx_graph_append_model(g, m, in_map, map);
    if (st == CATTR_OK) {
        cg_attrs r3 = cg_attrs_default(), r1 = cg_attrs_default();
        r3.n_ints = 3;
        r3.ints[0] = 0, r3.ints[1] = -1, r3.ints[2] = 1;
        r1.n_ints = 1;
        r1.ints[0] = -1;
        int out = map[cx_model_output(e->m)], ys = out;
        if (s->core.target) {
            int y3 = cg_emit(g, CG_RESHAPE, "__sv_out_rows", (int[]){out}, 1, &r3);
            ys = y3 < 0 ? -1 : cg_emit(g, CG_SEQ_PICK, "__sv_target", (int[]){y3, v[SG_TIDX]}, 2, NULL);
        }
        s->y = ys < 0 ? -1 : cg_emit(g, CG_RESHAPE, "__sv_y", (int[]){ys}, 1, &r1);
        if (s->y < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    free(map);
    if (st != CATTR_OK) {
        cg_free(g);
        return st;
    }
    s->core.g = g;
    return CATTR_OK;
}

/* The Shapley methods' states on the backend: table tab [T, M + 1] (see above); state s of p reads table row
 * trow_of(s) with threshold thr_of(s); the outputs go to p->take in state order. */
/* The rank rows of every input on the backend, s->rk[i] [T * I, ...] (see above), from table tab [T, M + 1] and the
 * feature ids of I = id_rows rows, in one run of the table graph (the ids, the table and the row selections go up). */
static cattr_status sv_table_build(cattr_explainer *e, sv_graph *s, const cx_call *c, const pt_masks *pm,
                                   const int64_t *tab, int64_t T, int64_t M, int64_t id_rows) {
    int n = c->n;
    cx_derived *d = &s->tg;
    if (!d->g || d->n != n) {
        cx_derived_free(d);
        cg_graph *g = cg_new();
        if (!g) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        d->g = g;
        int ids[CX_MAX_IN], bad = 0;
        for (int i = 0; i < n; i++) bad |= (ids[i] = cg_add_input(g, "__sv_ids")) < 0;
        int tb = cg_add_input(g, "__sv_table"), tsel = cg_add_input(g, "__sv_table_row"),
            isel = cg_add_input(g, "__sv_ids_row");
        cg_attrs a0 = cg_attrs_default(), r3 = cg_attrs_default(), r2 = cg_attrs_default();
        r3.n_ints = 3;
        r3.ints[0] = 0, r3.ints[1] = -1, r3.ints[2] = 1;
        r2.n_ints = 2;
        r2.ints[0] = 0, r2.ints[1] = -1;
        int tr = bad || tb < 0 || tsel < 0 || isel < 0 ? -1
                                                        : cg_emit(g, CG_GATHER, "__sv_table_rows", (int[]){tb, tsel}, 2, &a0);
        int tr3 = tr < 0 ? -1 : cg_emit(g, CG_RESHAPE, "__sv_table_3d", (int[]){tr}, 1, &r3);
        bad |= tr3 < 0;
        for (int i = 0; i < n && !bad; i++) {
            int di = cg_emit(g, CG_GATHER, "__sv_ids_of_rows", (int[]){ids[i], isel}, 2, &a0);
            int df = di < 0 ? -1 : cg_emit(g, CG_RESHAPE, "__sv_ids_flat", (int[]){di}, 1, &r2);
            int pk = df < 0 ? -1 : cg_emit(g, CG_SEQ_PICK, "__sv_rank_of_elements", (int[]){tr3, df}, 2, NULL);
            s->tg_outs[i] = pk < 0 ? -1 : cg_emit(g, CG_RESHAPE_LIKE, "__sv_ranks", (int[]){pk, di}, 2, NULL);
            bad |= s->tg_outs[i] < 0;
        }
        if (bad) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        d->n = n;
        CX_CHECK(cx_consts_new(e->be, c->dt, &d->consts));
    }
    int64_t TR = T * id_rows, nid = 2 * TR;
    for (int i = 0; i < n; i++) nid += id_rows * pm->per[i];
    int64_t *buf = malloc((size_t)(nid + 1) * sizeof *buf), *at = buf;
    if (!buf) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cx_arg arg[CX_MAX_IN + 3];
    memset(arg, 0, sizeof arg);
    void *out[CX_MAX_IN];
    cattr_status st = CATTR_OK;
    for (int i = 0; i < n && st == CATTR_OK; i++) { /* each element's column in the table: its feature + 1 */
        int64_t per_i = pm->per[i];
        for (int64_t b = 0; b < id_rows; b++)
            for (int64_t k = 0; k < per_i; k++) {
                int64_t f = pm->ids[i][(pm->rows[i] == 1 ? 0 : b) * per_i + k];
                at[b * per_i + k] = f >= 0 && f < M ? f + 1 : 0;
            }
        arg[i].nd = c->x[i]->ndim;
        memcpy(arg[i].sh, c->x[i]->shape, sizeof arg[i].sh);
        arg[i].sh[0] = id_rows;
        arg[i].dt = CATTR_INT64;
        arg[i].host = at;
        at += id_rows * per_i;
        st = cx_buf_fit(e->be, &s->rk[i], (size_t)(TR * per_i) * sizeof *buf, NULL, false);
        out[i] = s->rk[i].p;
    }
    for (int64_t r = 0; r < TR; r++) at[r] = r / id_rows, at[TR + r] = r % id_rows; /* row t * I + j */
    cx_arg tabv = {.nd = 2, .sh = {T, M + 1}, .dt = CATTR_INT64, .host = tab};
    cx_arg trow = {.nd = 1, .sh = {TR}, .dt = CATTR_INT64, .host = at};
    cx_arg thr = {.nd = 1, .sh = {TR}, .dt = CATTR_INT64, .host = at + TR};
    arg[n] = tabv;
    arg[n + 1] = trow;
    arg[n + 2] = thr;
    cx_job j = cx_job_for(e, d->g, d->consts);
    j.n_in = d->g->n_inputs;
    j.in = arg;
    j.n_out = n;
    j.outs = s->tg_outs;
    j.out_dev = out;
    if (st == CATTR_OK) st = cx_run(&j);
    free(buf);
    return st;
}

static cattr_status sv_run_states(pt_pass *p, const pt_masks *pm, const int64_t *tab, int64_t T, int64_t M,
                                  void (*row_of)(const sv_run *sv, int64_t s, int64_t *trow, int64_t *thr)) {
    cattr_explainer *e = p->e;
    cx_call *c = p->c;
    if (p->n_states <= 0) return CATTR_OK;
    bool target = cx_pt_has_target(c), whole = p->f->whole;
    sv_graph *s = NULL;
    CX_CHECK(pt_state(e, c, target, whole, sizeof *s, sv_build, sv_release, offsetof(sv_graph, whole), (void **)&s));
    int64_t per = 1, B = c->B;
    cattr_status st = whole ? CATTR_OK : cx_pt_states_per_pass(e, c, p->n_states, &per);
    bool shared = true; /* one id list for every example, or one per example (the shared lists repeated) */
    for (int i = 0; i < c->n; i++) shared &= pm->rows[i] == 1;
    int64_t id_rows = shared ? 1 : B;
    /* the rank rows of at most tmax table rows are on the backend at a time (a quarter of the memory budget, at most
     * SV_TABLE_BYTES): a window of the table,
     * made again when a chunk reads rows past it. A chunk of cnt states reads at most cnt consecutive table rows (a
     * state's row never decreases, by one at most from one state to the next), so chunks hold at most tmax states. */
    size_t trow_bytes = 0;
    for (int i = 0; i < c->n; i++) trow_bytes += (size_t)(id_rows * pm->per[i]) * sizeof(int64_t);
    size_t tbytes = cx_memory_budget(e) / 4; /* a quarter of the budget, at most SV_TABLE_BYTES */
    if (tbytes > SV_TABLE_BYTES) tbytes = SV_TABLE_BYTES;
    int64_t tmax = trow_bytes ? (int64_t)(tbytes / trow_bytes) : T, tw0 = 0, tw_n = 0;
    if (tmax < 1) tmax = 1;
    if (tmax > T) tmax = T;
    if (per > tmax) per = tmax;
    bool idle = B == 0 || p->n_out == 0; /* no rows or no outputs: nothing to run, the chunks have no values */
    int64_t rmax = per * B, nbuf = 2 * rmax;
    if (whole && p->f->ond && p->f->osh[0] > nbuf) nbuf = p->f->osh[0];
    int64_t *buf = st == CATTR_OK ? malloc((size_t)(nbuf + 1) * sizeof *buf) : NULL;
    double *vals = st == CATTR_OK ? malloc((size_t)(per * p->n_out + 1) * sizeof *vals) : NULL;
    if (st == CATTR_OK && (!buf || !vals)) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK && !idle) st = cx_call_dev_fit(e, c, &s->cd, rmax, target && !whole, per * p->n_out);
    if (st == CATTR_OK && !idle && target && whole) { /* the target of each row of the output */
        st = cx_pform_target_rows(p->f, p->c0, buf);
        if (st == CATTR_OK) st = cx_buf_fit(e->be, &s->cd.tidx, (size_t)p->f->osh[0] * sizeof *buf, buf, false);
    }
    const sv_run *sv = p->user;
    cx_vsplit v;
    if (st == CATTR_OK) st = cx_vsplit_begin(e, c, p->n_states, per, p->n_out, &v);
    else memset(&v, 0, sizeof v);
    for (int64_t s0 = 0, k = 0; s0 < p->n_states && st == CATTR_OK; s0 += per, k++) {
        int64_t cnt = p->n_states - s0 < per ? p->n_states - s0 : per, R = cnt * B;
        if (!cx_vsplit_mine(&v, k)) { /* another part's chunk; combining: its values */
            st = cx_pt_other(p, &v, k, s0, cnt, vals);
            continue;
        }
        if (idle) {
            st = cx_pt_computed(p, &v, k, s0, cnt, vals);
            continue;
        }
        int64_t tr0, tr1, th0;
        row_of(sv, s0, &tr0, &th0);
        row_of(sv, s0 + cnt - 1, &tr1, &th0);
        if (tw_n == 0 || tr0 < tw0 || tr1 >= tw0 + tw_n) { /* the window of the table from this chunk's first row */
            tw0 = tr0;
            tw_n = T - tw0 < tmax ? T - tw0 : tmax;
            st = sv_table_build(e, s, c, pm, tab + tw0 * (M + 1), tw_n, M, id_rows);
            if (st != CATTR_OK) break;
        }
        for (int64_t j = 0; j < cnt; j++) {
            int64_t tr, th;
            row_of(sv, s0 + j, &tr, &th);
            for (int64_t b = 0; b < B; b++) {
                buf[j * B + b] = (tr - tw0) * id_rows + (shared ? 0 : b); /* the row's rank row */
                buf[rmax + j * B + b] = th;
            }
        }
        cx_arg arg[SG_MAX_IN];
        memset(arg, 0, (size_t)SG_N_IN * sizeof *arg);
        for (int k = 0; k < SG_N_IN; k++) {
            arg[k].nd = 1;
            arg[k].sh[0] = R;
            arg[k].dt = CATTR_INT64;
        }
        for (int i = 0; i < c->n; i++) {
            const cattr_tensor *x = c->x[i];
            arg[SG_X(i)].nd = arg[SG_BASE(i)].nd = arg[SG_RK(i)].nd = x->ndim;
            memcpy(arg[SG_X(i)].sh, x->shape, sizeof arg[0].sh);
            memcpy(arg[SG_BASE(i)].sh, x->shape, sizeof arg[0].sh);
            memcpy(arg[SG_RK(i)].sh, x->shape, sizeof arg[0].sh);
            arg[SG_RK(i)].sh[0] = tw_n * id_rows;
            arg[SG_X(i)].dt = arg[SG_BASE(i)].dt = x->dtype;
            arg[SG_X(i)].dev = s->cd.x[i].p;
            arg[SG_BASE(i)].dev = s->cd.base[i].p;
            arg[SG_RK(i)].dev = s->rk[i].p;
        }
        for (int j = 0; j < c->n_add; j++) {
            arg[SG_ADD(j)].nd = c->add[j]->ndim;
            memcpy(arg[SG_ADD(j)].sh, c->add[j]->shape, sizeof arg[0].sh);
            arg[SG_ADD(j)].dt = c->add[j]->dtype;
            arg[SG_ADD(j)].dev = s->cd.add[j].p;
        }
        arg[SG_TROW].host = buf; /* the rows' rank rows and thresholds go up with the run */
        arg[SG_THR].host = buf + rmax;
        arg[SG_ROWS].dev = s->cd.rows.p;
        if (target) arg[SG_TIDX].dev = s->cd.tidx.p;
        if (target && whole) arg[SG_TIDX].sh[0] = p->f->osh[0];
        if (st == CATTR_OK)
            st = cx_derived_values(e, &s->core, arg, s->y, &s->cd,
                                   cnt * p->n_out, vals);
        if (st == CATTR_OK) st = cx_pt_computed(p, &v, k, s0, cnt, vals);
    }
    st = cx_vsplit_end(&v, st);
    free(buf);
    free(vals);
    return st;
}

/* ShapleyValueSampling's state t * M + j: order t, ranks 0..j added. */
static void svs_row(const sv_run *sv, int64_t s, int64_t *trow, int64_t *thr) {
    *trow = s / sv->M;
    *thr = s % sv->M;
}

/* ShapleyValues' state S - 1: coalition S (its features have rank 0). */
static void sv_row(const sv_run *sv, int64_t s, int64_t *trow, int64_t *thr) {
    (void)sv;
    *trow = s + 1;
    *thr = 0;
}

/* Next permutation in lexicographic order (itertools.permutations of 0..n-1); false after the last. */
static bool next_permutation(int64_t *a, int64_t n) {
    int64_t i = n - 2;
    while (i >= 0 && a[i] >= a[i + 1]) i--;
    if (i < 0) return false;
    int64_t j = n - 1;
    while (a[j] <= a[i]) j--;
    int64_t t = a[i];
    a[i] = a[j];
    a[j] = t;
    for (int64_t l = i + 1, h = n - 1; l < h; l++, h--) t = a[l], a[l] = a[h], a[h] = t;
    return true;
}

/* attr[r, element] = total[r, feature of the element] / n_iter in float32 (0 for ids outside 0..M-1). */
/* A model of the whole batch (f whole, c its view, c0 the call): the attributions have the input's own shape but the
 * first ([*output.shape, *input.shape[1:]], a scalar output as [1]); output value r takes row 0 of the input's ids, or
 * row r when they differ per row (cx_pform_id_rows). */
static cattr_status sv_result(cattr_explainer *e, const cx_call *c, const cx_call *c0, const cx_pform *f,
                              const pt_masks *pm, const sv_run *sv, double n_iter, cattr_tensor **attr) {
    const pt_ref *ref = sv->ref;
    int64_t R = ref->n_out, M = sv->M, one = 1;
    double *V = malloc((size_t)(R * M + 1) * sizeof *V); /* the float32 mean per output and feature */
    int64_t *idrow = malloc((size_t)(R + 1) * sizeof *idrow);
    cattr_status st = V && idrow ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t k = 0; k < R * M && st == CATTR_OK; k++) V[k] = (double)(float)(sv->acc[k] / n_iter);
    for (int i = 0; i < c->n && st == CATTR_OK; i++) { /* spread onto the elements on the backend */
        int64_t rows = pm->rows[i], per = pm->per[i];
        if (f->whole) {
            st = cx_pt_alloc_attr(c->dt, ref->ndim ? ref->ndim : 1, ref->ndim ? ref->shape : &one, c0->x[i], &attr[i]);
            per = cx_pt_example_numel(c0->x[i]);
            if (st == CATTR_OK) st = cx_pform_id_rows(f, i, pm->ids[i], per, R, &rows);
            for (int64_t r = 0; r < R; r++) idrow[r] = rows == 1 ? 0 : r;
        } else {
            st = cx_pt_alloc_attr(c->dt, ref->ndim, ref->shape, c->x[i], &attr[i]);
            for (int64_t r = 0; r < R; r++) idrow[r] = rows == 1 ? 0 : r / ref->per_row;
        }
        bool dev = c->attr_dev[i] && attr[i] && attr[i]->numel == c->x[i]->numel; /* the caller takes them there */
        if (st == CATTR_OK)
            st = cx_spread(e, c, V, R, M, pm->ids[i], rows, per, idrow, attr[i], dev ? c->attr_dev[i] : NULL);
        if (dev) {
            cattr_tensor_free(attr[i]);
            attr[i] = NULL;
        }
    }
    free(V);
    free(idrow);
    return st;
}

static cattr_status shapley_attribute(cattr_explainer *e, cx_call *c0, cattr_tensor **attr, bool exact) {
    pt_masks pm;
    pt_ref ref;
    sv_run sv;
    cx_pform pf;
    memset(&sv, 0, sizeof sv);
    memset(&ref, 0, sizeof ref);
    cattr_status st = cx_pform_get(e, c0, true, false, &pf);
    if (st != CATTR_OK) return st;
    cx_call *c = pf.whole ? &pf.v : c0; /* a model of the whole batch: its view (perturb_forms.h) */
    st = cx_pt_masks_load(c, &pf, &pm);
    if (st == CATTR_OK) st = cx_pt_features_dense(&pm);
    if (st == CATTR_OK && exact && pm.F > SV_MAX_FEATURES)
        st = cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                     "ShapleyValues enumerates all orders of the %lld features (%lld!); group them with a feature "
                     "mask into at most %d, or use ShapleyValueSampling",
                     (long long)pm.F, (long long)pm.F, SV_MAX_FEATURES);
    if (st == CATTR_OK) st = cx_pt_masks_index(&pm);
    if (st == CATTR_OK) st = cx_pt_reference(e, c0, &pf, c0->base, &ref);
    int64_t M = pm.F, n_out = ref.n_out, n_perm = exact ? 1 : e->p.n_samples;
    double n_iter = 1;
    if (st == CATTR_OK) {
        sv.pm = &pm;
        sv.ref = &ref;
        sv.M = M;
        sv.acc = calloc((size_t)(n_out * M) + 1, sizeof *sv.acc);
        if (!sv.acc) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK && !exact) { /* the orders, one per sample, drawn in turn */
        sv.perms = malloc(((size_t)(n_perm * M) + 1) * sizeof *sv.perms);
        sv.prev = malloc((size_t)(n_out + 1) * sizeof *sv.prev);
        if (!sv.perms || !sv.prev) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        cx_rng rng;
        cx_rng_init(&rng, e->p.seed, PT_STREAM_SVS);
        for (int64_t t = 0; t < n_perm && st == CATTR_OK; t++) {
            if (cx_pt_replaying(c)) st = cx_pt_take_perm_draw(c, "svs_permutation", M, sv.perms + t * M);
            else cx_rng_permutation(&rng, M, sv.perms + t * M);
        }
        pt_pass p = {e, c, n_perm * M, n_out, svs_take, &sv, &pf, c0};
        if (st == CATTR_OK) { /* the rank of every feature in every order */
            int64_t *tab = malloc((size_t)(n_perm * (M + 1)) * sizeof *tab);
            if (!tab) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            for (int64_t t = 0; t < n_perm && st == CATTR_OK; t++) {
                tab[t * (M + 1)] = INT64_MAX;
                for (int64_t j = 0; j < M; j++) tab[t * (M + 1) + 1 + sv.perms[t * M + j]] = j;
            }
            if (st == CATTR_OK) st = sv_run_states(&p, &pm, tab, n_perm, M, svs_row);
            free(tab);
        }
        n_iter = (double)n_perm;
    }
    bool part = e->split.n_parts > 0; /* a part of a split call (split.c): its outputs are what it computes */
    if (st == CATTR_OK && exact) { /* every coalition once, then all M! orders in lexicographic order */
        int64_t n_coal = (int64_t)1 << M;
        sv.coal = malloc(((size_t)(n_coal * n_out) + 1) * sizeof *sv.coal);
        int64_t *order = malloc((size_t)(M + 1) * sizeof *order);
        if (!sv.coal || !order) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK) {
            memcpy(sv.coal, ref.y, (size_t)n_out * sizeof *sv.coal);
            pt_pass p = {e, c, n_coal - 1, n_out, sv_take, &sv, &pf, c0};
            { /* per coalition: rank 0 for its features, 1 for the others */
                int64_t *tab = malloc((size_t)(n_coal * (M + 1)) * sizeof *tab);
                if (!tab) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
                for (int64_t S = 0; S < n_coal && st == CATTR_OK; S++) {
                    tab[S * (M + 1)] = INT64_MAX;
                    for (int64_t f = 0; f < M; f++) tab[S * (M + 1) + 1 + f] = (S >> f) & 1 ? 0 : 1;
                }
                if (st == CATTR_OK) st = sv_run_states(&p, &pm, tab, n_coal, M, sv_row);
                free(tab);
            }
        }
        if (st == CATTR_OK && !part) {
            for (int64_t j = 0; j < M; j++) order[j] = j;
            n_iter = 0;
            do {
                int64_t S = 0;
                for (int64_t j = 0; j < M; j++) {
                    int64_t T = S | ((int64_t)1 << order[j]);
                    sv_accumulate(&sv, order[j], sv.coal + T * n_out, sv.coal + S * n_out);
                    S = T;
                }
                n_iter += 1;
            } while (next_permutation(order, M));
        }
        free(order);
    }
    if (st == CATTR_OK && !part) st = sv_result(e, c, c0, &pf, &pm, &sv, n_iter, attr);
    free(sv.perms);
    free(sv.prev);
    free(sv.coal);
    free(sv.acc);
    free(ref.y);
    cx_pt_masks_free(&pm);
    cx_pform_free(&pf);
    return st;
}

static cattr_status shapley_value_sampling(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    return shapley_attribute(e, c, attr, false);
}

static cattr_status shapley_values(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    return shapley_attribute(e, c, attr, true);
}

const cx_method cx_method_shapley_value_sampling = {CATTR_METHOD_SHAPLEY_VALUE_SAMPLING, false, NULL, shapley_value_sampling,
                                                    sv_release};
const cx_method cx_method_shapley_values = {CATTR_METHOD_SHAPLEY_VALUES, false,
                                            NULL, shapley_values, sv_release};
