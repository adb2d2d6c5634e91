/* ablation_dev.c - FeatureAblation and FeaturePermutation with a target as one derived graph per chunk of states:
 * the perturbed rows made on the backend (WhereId), the differences placed there; the methods' entry points are
 * perturbation.c's. */
#include "attr/perturb_internal.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- FeatureAblation and FeaturePermutation as one derived graph --------------------------------------------------
 * A chunk of states [q0, q0 + cnt) (R = cnt * B rows, state-major) runs as one graph on the backend:
 *   inputs   x_i [B, ...]; src_i [B, ...] (the baselines, or x_i again for the permutation); srow_i [R] (the source
 *            row of each row: r mod B, or the permuted example); the additional inputs; M_i and ord_i [1 or B, ...]
 *            (int64 feature ids, and each element's feature ordinal or -1); mrow_i [R] (the mask row of each row);
 *            rows [R] (r mod B); fid [R] (each row's feature id); tidx [R] (the flat index of the example's target
 *            in its output); y0 [N] (the unperturbed outputs); q0 [1]; acc_i [N, ...]
 *   prefix   in_i = WhereId(x_i, src_i, M_i, fid; rows, srow_i, mrow_i)   (the perturbed rows, read in place)
 *   model    on in_i and Gather(a_j, rows)
 *   suffix   y = SeqPick(Reshape(model output, [R, -1, 1]), tidx) as [R]; diff = Gather(y0, rows) - y;
 *            out_i = PlaceRows(acc_i, diff, ord_i, q0); second output y
 * Every element belongs to one feature, so it receives one difference, in the output dtype (Captum's attribution
 * dtype: an int64 output gives int64 attributions), as in Captum; y0 comes from the same graph run once with a
 * feature id no mask holds (nothing perturbed, nothing placed). The call uploads the inputs (float, or int64 ablated
 * in their own dtype), masks and the whole schedule (with the permutations' draws) once and downloads the
 * attributions once.
 * Without a target every output value is attributed (N = n_out values per state, B * values per example): the
 * suffix is y = Reshape(output, [-1]) (cnt * N values), diff = Gather(y0, orows) - y with orows [cnt * N] the value
 * index of each (tidx's slot), acc_i and y0 have N rows, and ord_i has 1 row or one per value (its example's).
 * A model of the whole batch (perturb_forms.h) runs the same graph on the view of the call, one state per run: the
 * model inputs are its rows (Squeeze), a target is selected in each of the output's rows (tidx per row) and diff is
 * y0 - y; acc_i and ord_i have the attributions' shape [N, *input.shape[1:]] (ord_i: 1 or N rows); the permutation
 * permutes each input's own rows (src_i = Gather(x_i, srow_i) on dim 1, srow_i the input's rows per state). */
/* What a device call holds; kept with the explainer from call to call (buffers reused when large enough). */
typedef struct fa_dev {
    cx_buf x[CX_MAX_IN], src[CX_MAX_IN], add[CX_MAX_IN], mask[CX_MAX_IN], ord[CX_MAX_IN], srow[CX_MAX_IN];
    cx_buf rows, zrows, fid, tidx, y0, q0, acc, y; /* y: a chunk's outputs, for a part of a split call */
    size_t acco[CX_MAX_IN]; /* where input i's accumulator starts in acc */
    int64_t ord_rows[CX_MAX_IN]; /* rows of ord_i */
} fa_dev;

typedef struct fa_graph {
    cx_derived core; /* graph, call shape (target: one output per example, SeqPick; else every value), constants, plans */
    bool whole;      /* built for a model of the whole batch (perturb_forms.h) */
    int outs[CX_MAX_IN + 1];
    fa_dev d;
} fa_graph;

static void fa_dev_free(fa_dev *d);
static void fa_graph_free(fa_graph *s) {
    if (!s) return;
    fa_dev_free(&s->d);
    cx_derived_free(&s->core);
    free(s);
}
void cx_pt_fa_release(cattr_explainer *e) {
    fa_graph_free(e->method_state);
    e->method_state = NULL;
}

#define FA_X(i) (i)
#define FA_SRC(i) (s->core.n + (i))
#define FA_SROW(i) (2 * s->core.n + (i))
#define FA_M(i) (3 * s->core.n + (i))
#define FA_ORD(i) (4 * s->core.n + (i))
#define FA_MROW(i) (5 * s->core.n + (i))
#define FA_ACC(i) (6 * s->core.n + (i))
#define FA_ADD(j) (7 * s->core.n + (j))
#define FA_ROWS (7 * s->core.n + s->core.n_add)
#define FA_FID (FA_ROWS + 1)
#define FA_TIDX (FA_ROWS + 2)
#define FA_Y0 (FA_ROWS + 3)
#define FA_Q0 (FA_ROWS + 4)
#define FA_N_IN (FA_ROWS + 5)
#define FA_MAX_IN (8 * CX_MAX_IN + 5)
_Static_assert(FA_MAX_IN <= CX_RUN_MAX_IN, "a run takes at most CX_RUN_MAX_IN inputs");

static int fa_emit(cg_graph *g, cg_op op, const char *name, int n, const int *in, const cg_attrs *a) {
    for (int k = 0; k < n; k++)
        if (in[k] < 0) return -1;
    return cg_emit(g, op, name, in, n, a);
}
#define E2(op, name, a, b) fa_emit(g, op, name, 2, (int[]){a, b}, NULL)

static cattr_status fa_build(cattr_explainer *e, void *state) {
    fa_graph *s = state;
    const cg_graph *m = e->m->g;
    bool whole = s->whole = cx_pform_building_whole, permute = e->p.method == CATTR_METHOD_FEATURE_PERMUTATION;
    cg_graph *g = NULL;
    int *map = NULL;
    CX_CHECK(cx_derive_new(m, &g, &map));
    int v[FA_MAX_IN], bad = 0;
    for (int k = 0; k < FA_MAX_IN; k++) v[k] = -1;
    for (int k = 0; k < FA_N_IN; k++) {
        char nm[48];
        snprintf(nm, sizeof nm, "__fa_in%d", k);
        bad |= (v[k] = cg_add_input(g, nm)) < 0;
    }
    int rows = v[FA_ROWS], in_map[2 * CX_MAX_IN];
    cg_attrs ax1 = cg_attrs_default();
    ax1.axis = 1;
    for (int i = 0; i < s->core.n && !bad; i++) {
        int src = v[FA_SRC(i)], srow = v[FA_SROW(i)];
        if (whole && permute) { /* the input's own rows permuted (dim 1 of the view) */
            src = fa_emit(g, CG_GATHER, "__fa_permuted", 2, (int[]){v[FA_X(i)], srow}, &ax1);
            srow = rows;
        }
        int t = fa_emit(g, CG_WHERE_ID, "__fa_perturbed", 7,
                        (int[]){v[FA_X(i)], src, v[FA_M(i)], v[FA_FID], rows, srow, v[FA_MROW(i)]}, NULL);
        in_map[i] = cx_pform_model_input(g, whole, t);
        bad |= in_map[i] < 0;
    }
    for (int j = 0; j < s->core.n_add && !bad; j++)
        bad |= (in_map[s->core.n + j] = cx_pform_model_input(g, whole, E2(CG_GATHER, "__fa_at", v[FA_ADD(j)], rows))) < 0;
    cattr_status st = bad ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : CATTR_OK;
    if (st == CATTR_OK) st = cx_graph_append_model(g, m, in_map, map);
    if (st == CATTR_OK) {
        cg_attrs a = cg_attrs_default();
        a.n_ints = 3;
        a.ints[0] = 0, a.ints[1] = -1, a.ints[2] = 1;
        int ys = map[cx_model_output(e->m)];
        if (s->core.target) {
            int y3 = fa_emit(g, CG_RESHAPE, "__fa_out_rows", 1, (int[]){ys}, &a);
            ys = E2(CG_SEQ_PICK, "__fa_target", y3, v[FA_TIDX]);
        }
        a.n_ints = 1;
        a.ints[0] = -1;
        int y = fa_emit(g, CG_RESHAPE, "__fa_y", 1, (int[]){ys}, &a);
        int y0 = whole && s->core.target ? v[FA_Y0] /* one state: the values in order */
                                         : E2(CG_GATHER, "__fa_y0_rows", v[FA_Y0], s->core.target ? rows : v[FA_TIDX]);
        int diff = E2(CG_SUB, "__fa_diff", y0, y);
        for (int i = 0; i < s->core.n; i++) {
            s->outs[i] = fa_emit(g, CG_PLACE_ROWS, "__fa_placed", 4, (int[]){v[FA_ACC(i)], diff, v[FA_ORD(i)], v[FA_Q0]},
                                 NULL);
            bad |= s->outs[i] < 0;
        }
        s->outs[s->core.n] = y;
        if (bad || y < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    free(map);
    if (st != CATTR_OK) {
        cg_free(g);
        return st;
    }
    s->core.g = g;
    return CATTR_OK;
}
#undef E2

static void fa_dev_free(fa_dev *d) {
    for (int i = 0; i < CX_MAX_IN; i++) {
        cx_buf_free(&d->x[i]);
        cx_buf_free(&d->src[i]);
        cx_buf_free(&d->add[i]);
        cx_buf_free(&d->mask[i]);
        cx_buf_free(&d->ord[i]);
        cx_buf_free(&d->srow[i]);
    }
    cx_buf_free(&d->rows);
    cx_buf_free(&d->zrows);
    cx_buf_free(&d->fid);
    cx_buf_free(&d->tidx);
    cx_buf_free(&d->y0);
    cx_buf_free(&d->q0);
    cx_buf_free(&d->acc);
    cx_buf_free(&d->y);
}

cattr_status cx_pform_state(cattr_explainer *e, cx_call *c, bool target, bool whole, size_t size,
                            cattr_status (*build)(cattr_explainer *e, void *state),
                            void (*release)(cattr_explainer *e), size_t whole_at, void **state) {
    if (e->method_state && *(const bool *)((const char *)e->method_state + whole_at) != whole) release(e);
    cx_pform_building_whole = whole;
    return cx_derived_state(e, c, target, size, build, release, state);
}

/* Runs chunk k of cnt states starting at state q0 (k 0: the reference, whose y goes to d->y0; else to yout when not
 * NULL). Rows of state q are at (q + 1) * B in fid and srow (the reference's first); a model of the whole batch
 * permutes input i's rows from (q + 1) * rows_i in srow_i. */
static cattr_status fa_run_chunk(cattr_explainer *e, fa_graph *s, cx_call *c, const fa_run *f, const fa_dev *d,
                                 int64_t N, int64_t cnt, int64_t q0, int64_t k, void *yout) {
    const pt_masks *pm = f->pm;
    const cx_pform *pf = f->f;
    bool reference = k == 0, permute = f->permute;
    int64_t R = cnt * c->B;
    cx_arg arg[FA_MAX_IN];
    void *out[CX_MAX_IN + 1];
    memset(arg, 0, (size_t)s->core.g->n_inputs * sizeof *arg);
    size_t idx_off = reference ? 0 : (size_t)((q0 + 1) * c->B) * sizeof(int64_t);
    for (int j = 0; j < FA_N_IN; j++) {
        arg[j].dt = CATTR_INT64;
        arg[j].nd = 1;
        arg[j].sh[0] = R;
    }
    for (int i = 0; i < s->core.n; i++) {
        const cattr_tensor *x = c->x[i], *xo = pf->whole ? x : NULL; /* the attributions' shape: the input's own */
        int rk[3] = {FA_X(i), FA_SRC(i), FA_M(i)};
        for (int t = 0; t < 3; t++) {
            arg[rk[t]].nd = x->ndim;
            memcpy(arg[rk[t]].sh, x->shape, sizeof arg[0].sh);
            arg[rk[t]].dt = t < 2 ? x->dtype : CATTR_INT64;
        }
        int and = pf->whole ? xo->ndim - 1 : x->ndim;
        const int64_t *ash = pf->whole ? xo->shape + 1 : x->shape; /* [rows, *attribution row shape] */
        arg[FA_ORD(i)].nd = arg[FA_ACC(i)].nd = and;
        memcpy(arg[FA_ORD(i)].sh, ash, (size_t)and * sizeof(int64_t));
        memcpy(arg[FA_ACC(i)].sh, ash, (size_t)and * sizeof(int64_t));
        arg[FA_M(i)].sh[0] = pm->rows[i];
        arg[FA_ORD(i)].sh[0] = d->ord_rows[i];
        arg[FA_ACC(i)].sh[0] = N;
        arg[FA_ACC(i)].dt = f->ref->dt;
        arg[FA_X(i)].dev = d->x[i].p;
        arg[FA_SRC(i)].dev = permute ? d->x[i].p : d->src[i].p;
        if (permute && pf->whole) { /* the input's rows, permuted per state */
            int64_t ri = pf->rows[i];
            arg[FA_SROW(i)].sh[0] = ri;
            arg[FA_SROW(i)].dev = (char *)d->srow[i].p + (size_t)(reference ? 0 : (q0 + 1) * ri) * sizeof(int64_t);
        } else {
            arg[FA_SROW(i)].dev = permute ? (char *)d->srow[i].p + idx_off : d->rows.p;
        }
        arg[FA_M(i)].dev = d->mask[i].p;
        arg[FA_ORD(i)].dev = d->ord[i].p;
        arg[FA_MROW(i)].dev = pm->rows[i] == 1 ? d->zrows.p : d->rows.p;
        arg[FA_ACC(i)].dev = out[i] = (char *)d->acc.p + d->acco[i];
    }
    for (int j = 0; j < s->core.n_add; j++) {
        arg[FA_ADD(j)].nd = c->add[j]->ndim;
        memcpy(arg[FA_ADD(j)].sh, c->add[j]->shape, sizeof arg[0].sh);
        arg[FA_ADD(j)].dt = c->add[j]->dtype;
        arg[FA_ADD(j)].dev = d->add[j].p;
    }
    arg[FA_ROWS].dev = d->rows.p;
    arg[FA_FID].dev = (char *)d->fid.p + idx_off;
    arg[FA_TIDX].dev = d->tidx.p;
    if (!s->core.target) arg[FA_TIDX].sh[0] = cnt * N;    /* the value index of every output value */
    else if (pf->whole) arg[FA_TIDX].sh[0] = pf->osh[0]; /* the target of each output row */
    arg[FA_Y0].sh[0] = N;
    arg[FA_Y0].dt = f->ref->dt;
    arg[FA_Y0].dev = d->y0.p;
    arg[FA_Q0].sh[0] = 1;
    arg[FA_Q0].dev = (char *)d->q0.p + (size_t)k * sizeof(int64_t);
    out[s->core.n] = reference ? d->y0.p : yout;
    cx_job j = cx_job_for(e, s->core.g, s->core.consts);
    j.n_in = s->core.g->n_inputs;
    j.in = arg;
    j.n_out = s->core.n + 1;
    j.outs = s->outs;
    j.out_dev = out;
    cx_view yv;
    CX_CHECK(cx_run_view(&j, s->outs[s->core.n], &yv));
    if (cx_view_numel(&yv) != cnt * N)
        return cx_fail(CATTR_ERR_SHAPE, "the model output has %lld values for %lld perturbed copies of the inputs; "
                       "expected %lld per copy", (long long)cx_view_numel(&yv), (long long)cnt, (long long)N);
    return cx_run(&j);
}

/* FeatureAblation / FeaturePermutation on the backend (see above). */
static cattr_status fa_on_device(cattr_explainer *e, cx_call *c, const pt_masks *pm, fa_run *f, cattr_tensor **attr) {
    const cx_pform *pf = f->f;
    fa_graph *s = NULL;
    cattr_tensor *seed = NULL;
    bool target = cx_pt_has_target(c), whole = pf->whole;
    cattr_dtype odt = f->ref->dt;
    int64_t B = c->B, F = pm->F, per = 1, N = f->ref->n_out, per_row = !whole && B ? N / B : 0;
    int64_t *ord2id = NULL, *buf = NULL;
    cattr_status st = pt_state(e, c, target, whole, sizeof *s, fa_build, cx_pt_fa_release, offsetof(fa_graph, whole),
                               (void **)&s);
    fa_dev *dp = s ? &s->d : NULL;
    if (st == CATTR_OK && !whole) st = cx_pt_states_per_pass(e, c, F > 0 ? F : 1, &per);
    if (st == CATTR_OK && target && !whole) st = cx_seed_block(e, c, &seed);
    int64_t n_chunks = F > 0 ? (F + per - 1) / per : 0;
    int64_t rmax = (per > 1 ? per : 1) * B, n_sched = (F + 1) * B; /* fid, srow: the reference's rows, then states' */
    int64_t omax = (per > 1 ? per : 1) * N; /* output values per chunk */
    int64_t n_buf = n_sched > rmax ? n_sched : rmax;
    if (omax > n_buf) n_buf = omax;
    if (whole && pf->osh[0] > n_buf) n_buf = pf->osh[0];
    for (int i = 0; i < c->n; i++) {
        if (pm->rows[i] * pm->per[i] > n_buf) n_buf = pm->rows[i] * pm->per[i];
        if (N * f->aper[i] > n_buf) n_buf = N * f->aper[i];
        if (whole && (F + 1) * pf->rows[i] > n_buf) n_buf = (F + 1) * pf->rows[i];
    }
    if (st == CATTR_OK) {
        ord2id = malloc((size_t)(F + 1) * sizeof *ord2id);
        buf = malloc((size_t)(n_buf + n_chunks + 2) * sizeof *buf);
        if (!ord2id || !buf) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    /* a feature id no mask holds, for the unperturbed reference rows */
    int64_t lo = 0, hi = 0;
    bool any = false;
    for (int i = 0; i < pm->n && st == CATTR_OK; i++)
        for (int64_t k = 0; k < pm->rows[i] * pm->per[i]; k++) {
            int64_t id = pm->ids[i][k];
            if (!any || id < lo) lo = id;
            if (!any || id > hi) hi = id;
            any = true;
        }
    int64_t none = !any ? 0 : hi < INT64_MAX ? hi + 1 : lo - 1;
    if (st == CATTR_OK && any && hi == INT64_MAX && lo == INT64_MIN)
        st = cx_fail(CATTR_ERR_UNSUPPORTED, "feature masks that use both INT64_MIN and INT64_MAX");
    for (int64_t q = 0; q < F && st == CATTR_OK; q++) {
        if (pm->dense) ord2id[q] = q;
        else ord2id[pm->by_id[2 * q + 1]] = pm->by_id[2 * q];
    }
    size_t eo = cattr_dtype_size(odt);
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        int64_t nm = pm->rows[i] * pm->per[i];
        size_t xb = (size_t)c->x[i]->numel * cattr_dtype_size(c->x[i]->dtype);
        st = cx_buf_fit(e->be, &dp->x[i], xb, NULL, false);
        if (st == CATTR_OK) /* from the host, or from the backend (cx_call.x_dev) */
            st = cx_buf_put(&dp->x[i], 0, c->x[i]->data, c->x_dev[i], xb);
        if (st == CATTR_OK && !f->permute) st = cx_buf_fit(e->be, &dp->src[i], xb, c->base[i]->data, false);
        if (st == CATTR_OK) st = cx_buf_fit(e->be, &dp->mask[i], (size_t)nm * sizeof(int64_t), pm->ids[i], false);
        /* the ordinals of the attributions' elements: one row, or one per output value */
        int64_t ap = f->aper[i], orows = 1;
        if (whole) { /* the input's ids in its own layout; row 0, or row r for output value r */
            orows = f->arows[i];
            for (int64_t k = 0; k < orows * ap && st == CATTR_OK; k++) buf[k] = cx_pt_feature_of(pm, pm->ids[i][k]);
        } else {
            for (int64_t k = 0; k < nm && st == CATTR_OK; k++) buf[k] = cx_pt_feature_of(pm, pm->ids[i][k]);
            orows = pm->rows[i];
            if (st == CATTR_OK && !target && pm->rows[i] != 1) { /* one row per output value: its example's */
                for (int64_t o = N - 1; o >= 0; o--) memmove(buf + o * ap, buf + (o / per_row) * ap, (size_t)ap * sizeof *buf);
                orows = N;
            }
        }
        dp->ord_rows[i] = orows;
        if (st == CATTR_OK) st = cx_buf_fit(e->be, &dp->ord[i], (size_t)(orows * ap) * sizeof *buf, buf, false);
    }
    for (int j = 0; j < c->n_add && st == CATTR_OK; j++)
        st = cx_buf_fit(e->be, &dp->add[j], (size_t)c->add[j]->numel * cattr_dtype_size(c->add[j]->dtype), c->add[j]->data, false);
    if (st == CATTR_OK) { /* rows r mod B, zeros, the targets' flat indices (without a target: value indices) */
        for (int64_t r = 0; r < rmax; r++) buf[r] = r % B;
        st = cx_buf_fit(e->be, &dp->rows, (size_t)rmax * sizeof *buf, buf, false);
        if (st == CATTR_OK) st = cx_buf_fit(e->be, &dp->zrows, (size_t)rmax * sizeof *buf, NULL, true);
    }
    if (st == CATTR_OK && !target) {
        for (int64_t r = 0; r < omax; r++) buf[r] = r % N;
        st = cx_buf_fit(e->be, &dp->tidx, (size_t)omax * sizeof *buf, buf, false);
    } else if (st == CATTR_OK && whole) { /* the target of each output row */
        st = cx_pform_target_rows(pf, c, buf);
        if (st == CATTR_OK) st = cx_buf_fit(e->be, &dp->tidx, (size_t)pf->osh[0] * sizeof *buf, buf, false);
    } else if (st == CATTR_OK) {
        cx_target_rows(seed, B, rmax, buf);
        st = cx_buf_fit(e->be, &dp->tidx, (size_t)rmax * sizeof *buf, buf, false);
    }
    if (st == CATTR_OK) { /* feature ids per row: the reference's, then state q's at (q + 1) * B */
        for (int64_t r = 0; r < n_sched; r++) buf[r] = r < B ? none : ord2id[r / B - 1];
        st = cx_buf_fit(e->be, &dp->fid, (size_t)n_sched * sizeof *buf, buf, false);
    }
    if (st == CATTR_OK) { /* q0 per run: the reference places nothing (q0 = F), then the chunks' first states */
        buf[0] = F;
        for (int64_t k = 0; k < n_chunks; k++) buf[k + 1] = k * per;
        st = cx_buf_fit(e->be, &dp->q0, (size_t)(n_chunks + 1) * sizeof *buf, buf, false);
    }
    for (int i = 0; i < c->n && st == CATTR_OK && f->permute; i++) { /* the source rows of every state's rows */
        int64_t Bi = cx_pt_perm_rows(f, c, i), ns = (F + 1) * Bi;
        for (int64_t b = 0; b < Bi; b++) buf[b] = b;
        for (int64_t q = 0; q < F; q++) {
            const int64_t *perm = NULL;
            if (f->perms && (pm->holds[q] & (1u << i))) perm = f->perms + f->perm_at[q * pm->n + i];
            for (int64_t b = 0; b < Bi; b++) buf[(q + 1) * Bi + b] = perm ? perm[b] : b;
            if (f->perms) continue;
            /* generated: per state, one permutation for each input holding the feature, in input order */
            cx_rng rng;
            cx_rng_init(&rng, f->seed, PT_STREAM_FP + (uint64_t)q);
            for (int k = 0; k <= i; k++) {
                if (!(pm->holds[q] & (1u << k))) continue;
                int64_t Bk = cx_pt_perm_rows(f, c, k);
                do {
                    cx_rng_permutation(&rng, Bk, f->scratch);
                } while (cx_pt_is_identity(f->scratch, Bk));
                if (k == i) memcpy(buf + (q + 1) * Bi, f->scratch, (size_t)Bi * sizeof *buf);
            }
        }
        st = cx_buf_fit(e->be, &dp->srow[i], (size_t)ns * sizeof *buf, buf, false);
    }
    size_t acc_bytes = 0;
    for (int i = 0; i < c->n; i++) acc_bytes += ((size_t)(N * f->aper[i]) * eo + 63) / 64 * 64;
    if (st == CATTR_OK) st = cx_buf_fit(e->be, &dp->acc, acc_bytes, NULL, true);
    if (st == CATTR_OK) st = cx_buf_fit(e->be, &dp->y0, (size_t)N * eo, NULL, true);
    size_t off = 0;
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        dp->acco[i] = off;
        off += ((size_t)(N * f->aper[i]) * eo + 63) / 64 * 64;
    }
    /* the unperturbed outputs: the graph run with a feature id no mask holds (nothing perturbed, nothing placed) */
    if (st == CATTR_OK) st = fa_run_chunk(e, s, c, f, dp, N, 1, 0, 0, NULL);
    /* split into parts (split.c): a part runs its chunks and keeps their outputs; combining places the parts'
     * outputs on the host (cx_pt_fa_take: y0 - y in the output dtype, the graph's subtraction) */
    cx_vsplit v;
    memset(&v, 0, sizeof v);
    double *vals = NULL;
    cattr_tensor *yt = NULL;
    if (st == CATTR_OK) st = cx_vsplit_begin(e, c, F, per, N, &v);
    if (st == CATTR_OK && v.mode != CX_VSPLIT_NONE) {
        int64_t len = omax > N ? omax : N;
        vals = malloc((size_t)(len + 1) * sizeof *vals);
        yt = cx_tensor_alloc(odt, 1, &len);
        if (!vals || !yt) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK && v.mode == CX_VSPLIT_PART) st = cx_buf_fit(e->be, &dp->y, (size_t)omax * eo, NULL, false);
        if (st == CATTR_OK && v.mode == CX_VSPLIT_COMBINE) { /* the reference outputs, for cx_pt_fa_take */
            free(f->ref->y);
            f->ref->y = malloc((size_t)(N + 1) * sizeof *f->ref->y);
            if (!f->ref->y) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            if (st == CATTR_OK) st = cx_buf_get(&dp->y0, 0, yt->data, NULL, (size_t)N * eo);
            for (int64_t o = 0; o < N && st == CATTR_OK; o++) f->ref->y[o] = cx_tensor_get(yt, o);
        }
    }
    for (int64_t k = 0; k < n_chunks && st == CATTR_OK; k++) {
        int64_t q0 = k * per, cnt = F - q0 < per ? F - q0 : per;
        if (cx_vsplit_mine(&v, k)) {
            st = fa_run_chunk(e, s, c, f, dp, N, cnt, q0, k + 1, v.mode == CX_VSPLIT_PART ? dp->y.p : NULL);
            if (st == CATTR_OK && v.mode == CX_VSPLIT_PART) {
                st = cx_buf_get(&dp->y, 0, yt->data, NULL, (size_t)(cnt * N) * eo);
                for (int64_t o = 0; o < cnt * N && st == CATTR_OK; o++) vals[o] = cx_tensor_get(yt, o);
                if (st == CATTR_OK) st = cx_vsplit_put(&v, k, vals, cnt * N);
            }
        } else if (v.mode == CX_VSPLIT_COMBINE) {
            st = cx_vsplit_get(&v, k, vals, cnt * N);
            pt_pass p = {e, c, F, N, cx_pt_fa_take, f, pf, NULL};
            for (int64_t j = 0; j < cnt && st == CATTR_OK; j++) st = cx_pt_fa_take(&p, q0 + j, vals + j * N);
        } else {
            continue;
        }
        if (st == CATTR_OK) st = cx_chunk_done(&e->p, q0 + cnt, F);
    }
    st = cx_vsplit_end(&v, st);
    for (int i = 0; i < c->n && st == CATTR_OK && v.mode == CX_VSPLIT_NONE; i++) {
        size_t bytes = (size_t)attr[i]->numel * eo;
        /* to the host, or on the backend for the caller (cx_call.attr_dev) */
        st = cx_buf_get(&dp->acc, dp->acco[i], attr[i]->data, c->attr_dev[i], bytes);
        if (c->attr_dev[i]) {
            cattr_tensor_free(attr[i]);
            attr[i] = NULL;
        }
    }
    free(vals);
    cattr_tensor_free(yt);
    cattr_tensor_free(seed);
    free(ord2id);
    free(buf);
    return st;
}

/* FeaturePermutation: Captum skips a feature group held by an input of fewer than 2 rows (it cannot be permuted):
 * its attributions stay 0. Drops those features (the others keep their order) and groups the positions anew;
 * *dropped: how many. */
static cattr_status features_drop_unpermutable(pt_masks *pm, const int64_t *rows, int64_t *dropped) {
    uint32_t small = 0;
    *dropped = 0;
    for (int i = 0; i < pm->n; i++)
        if (rows[i] < 2) small |= 1u << i;
    if (!small || pm->F == 0) return CATTR_OK;
    int64_t *nord = malloc((size_t)(pm->F + 1) * sizeof *nord), nf = 0, kept = 0;
    if (!nord) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t q = 0; q < pm->F; q++) nord[q] = pm->holds[q] & small ? -1 : nf++;
    for (int64_t k = 0; k < pm->F; k++) /* by_id stays ascending by id */
        if (nord[pm->by_id[2 * k + 1]] >= 0) {
            pm->by_id[2 * kept] = pm->by_id[2 * k];
            pm->by_id[2 * kept + 1] = nord[pm->by_id[2 * k + 1]];
            kept++;
        }
    free(nord);
    *dropped = pm->F - nf;
    pm->F = nf;
    for (int i = 0; i < CX_MAX_IN; i++) {
        free(pm->start[i]);
        free(pm->pos[i]);
        pm->start[i] = pm->pos[i] = NULL;
    }
    free(pm->holds);
    pm->holds = NULL;
    return cx_pt_masks_index(pm);
}

static cattr_status ablation_attribute(cattr_explainer *e, cx_call *c0, cattr_tensor **attr, bool permute) {
    pt_masks pm;
    pt_ref ref;
    fa_run f;
    cx_pform pf;
    memset(&f, 0, sizeof f);
    memset(&ref, 0, sizeof ref);
    memset(&pm, 0, sizeof pm);
    cattr_status st = cx_pform_get(e, c0, true, false, &pf);
    if (st != CATTR_OK) return st;
    cx_call *c = pf.whole ? &pf.v : c0; /* a model of the whole batch: its view (perturb_forms.h) */
    st = cx_pt_masks_load(c, &pf, &pm);
    if (st == CATTR_OK) st = cx_pt_features_first_seen(&pm);
    if (st == CATTR_OK) st = cx_pt_masks_index(&pm);
    int64_t rows[CX_MAX_IN], max_rows = c->B, dropped = 0;
    for (int i = 0; i < c->n; i++) {
        rows[i] = pf.whole ? pf.rows[i] : c->B;
        if (rows[i] > max_rows) max_rows = rows[i];
    }
    if (st == CATTR_OK && permute) st = features_drop_unpermutable(&pm, rows, &dropped);
    if (st == CATTR_OK && dropped) /* Captum skips the feature groups of an input below 2 rows */
        cx_log(CATTR_LOG_WARN, "FeaturePermutation permutes an input's rows: %lld feature group%s of an input with "
                               "fewer than 2 rows keep%s attribution 0", (long long)dropped, dropped == 1 ? "" : "s",
               dropped == 1 ? "s its" : " their");
    /* the attributions: [N, *input.shape[1:]] in the model output's dtype (Captum's) */
    ref.dt = pf.odt;
    ref.n_out = pf.n_sel;
    ref.per_row = !pf.whole && c->B ? ref.n_out / c->B : 0;
    int64_t lead = ref.n_out;
    for (int i = 0; i < c0->n && st == CATTR_OK; i++) {
        st = cx_pt_alloc_attr(ref.dt, 1, &lead, c0->x[i], &attr[i]);
        f.aper[i] = cx_pt_example_numel(c0->x[i]);
        f.arows[i] = 1;
        if (st == CATTR_OK && pf.whole) st = cx_pform_id_rows(&pf, i, pm.ids[i], f.aper[i], ref.n_out, &f.arows[i]);
    }
    if (st == CATTR_OK && ref.n_out > 0 && pm.F > 0) {
        f.pm = &pm;
        f.ref = &ref;
        f.attr = attr;
        f.permute = permute;
        f.seed = e->p.seed;
        f.f = &pf;
        f.scratch = malloc((size_t)(max_rows + 1) * sizeof *f.scratch);
        f.diff = malloc((size_t)(ref.n_out + 1) * sizeof *f.diff);
        if (!f.scratch || !f.diff) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK && permute && cx_pt_replaying(c)) st = cx_pt_fp_replay_perms(e, c, &f);
        if (st == CATTR_OK && (c->x_dev[0] || c->attr_dev[0]) && (permute || !cx_pt_has_target(c)))
            st = cx_fail(CATTR_ERR_INTERNAL, "FeatureAblation takes backend inputs only with a target");
        if (st == CATTR_OK) st = fa_on_device(e, c, &pm, &f, attr);
    } else if (st == CATTR_OK) { /* nothing to perturb or nothing to attribute: every attribution is 0 */
        for (int i = 0; i < c->n && st == CATTR_OK; i++)
            if (c->attr_dev[i]) {
                st = cx_zero(e->be, c->attr_dev[i], (size_t)attr[i]->numel * cattr_dtype_size(attr[i]->dtype));
                cattr_tensor_free(attr[i]);
                attr[i] = NULL;
            }
    }
    if (st != CATTR_OK)
        for (int i = 0; i < c0->n; i++) {
            cattr_tensor_free(attr[i]);
            attr[i] = NULL;
        }
    free(f.perms);
    free(f.perm_at);
    free(f.scratch);
    free(f.diff);
    free(ref.y);
    cx_pt_masks_free(&pm);
    cx_pform_free(&pf);
    return st;
}

cattr_status cx_pt_feature_ablation(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    return ablation_attribute(e, c, attr, false);
}

cattr_status cx_pt_feature_permutation(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    return ablation_attribute(e, c, attr, true);
}
