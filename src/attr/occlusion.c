/* occlusion.c - Occlusion (Captum semantics: shared/reference/captum_spec.md section 6): every sliding window of the
 * inputs replaced by the baseline, the output differences summed over the windows covering each element, per chunk of
 * perturbations_per_eval windows, then divided by the window count (float32). The states and passes are
 * perturbation.c's (perturb_internal.h). */
#include "attr/perturb_internal.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Occlusion -------------------------------------------------------------------------------------------------- */

/* Sliding windows over the per-example shape of one input. */
typedef struct occ_input {
    int nd;
    int64_t dim[CATTR_MAX_DIMS], win[CATTR_MAX_DIMS], stride[CATTR_MAX_DIMS], shift[CATTR_MAX_DIMS];
    int64_t P;     /* windows: prod shift */
    int64_t first; /* feature id of its first window (ids run consecutively over the inputs) */
    int64_t qmod;  /* Captum's window-number offset (the product of the earlier inputs' window counts) mod P */
} occ_input;

typedef struct occ_run {
    occ_input in[CX_MAX_IN];
    pt_ref *ref;
    int64_t G, chunk;          /* windows in all; Captum's perturbations_per_eval */
    double *total[CX_MAX_IN];  /* n_out x per, model-output dtype */
    double *part[CX_MAX_IN];   /* the current chunk's sums */
    unsigned char *hit[CX_MAX_IN];
    int64_t *touched[CX_MAX_IN], n_touched[CX_MAX_IN];
    double *weight[CX_MAX_IN]; /* per element: windows covering it */
    int64_t *box;              /* scratch: element offsets of one window */
    double *diff;
} occ_run;

/* The windows of every input (c: the call itself). A model of the whole batch (f whole) runs on the view of the
 * call, whose example is the whole input: its windows get a leading dim over the input's rows (window and size the
 * rows, stride 1: one position), so that each box covers its elements in every row. */
static cattr_status occ_setup(const cattr_explainer *e, const cx_call *c, const cx_pform *f, occ_run *o) {
    char s1[128], s2[128];
    int64_t first = 0;
    if (c->user && c->user->feature_masks)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "Occlusion takes sliding windows, not feature masks");
    for (int i = c->n; i < CATTR_MAX_INPUTS; i++) { /* one window (and strides) per input, as Captum asserts */
        if (e->p.sliding_window_ndim[i] != 0)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "a sliding window is given for input %d, but the call has %d "
                           "input%s: give one sliding window per input", i, c->n, c->n == 1 ? "" : "s");
        if (e->p.strides_ndim[i] > 0)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "strides are given for input %d, but the call has %d input%s: "
                           "give one int, or strides per input", i, c->n, c->n == 1 ? "" : "s");
    }
    for (int i = 0; i < c->n; i++) {
        occ_input *w = &o->in[i];
        const cattr_tensor *x = c->x[i];
        w->nd = x->ndim - 1;
        memcpy(w->dim, x->shape + 1, (size_t)w->nd * sizeof *w->dim);
        int wn = e->p.sliding_window_ndim[i], sn = e->p.strides_ndim[i];
        if (wn != w->nd)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                           "Occlusion needs a sliding window of %d dims for input %d (example shape %s); %d given",
                           w->nd, i, cx_shape_str(w->nd, w->dim, s1, sizeof s1), wn);
        if (!(sn == 0 || sn == -1 || sn == 1 || sn == w->nd))
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                           "the strides of input %d have %d dims; give one int or %d (one per dim of %s)", i, sn,
                           w->nd, cx_shape_str(w->nd, w->dim, s1, sizeof s1));
        w->P = 1;
        for (int d = 0; d < w->nd; d++) w->win[d] = e->p.sliding_window[i][d]; /* whole, for the messages */
        for (int d = 0; d < w->nd; d++) {
            w->stride[d] = sn == 0 ? 1 : (sn == w->nd ? e->p.strides[i][d] : e->p.strides[i][0]);
            if (w->win[d] < 1 || w->win[d] > w->dim[d])
                return cx_fail(CATTR_ERR_SHAPE, "sliding window %s does not fit input %d (example shape %s)",
                               cx_shape_str(w->nd, w->win, s1, sizeof s1), i, cx_shape_str(w->nd, w->dim, s2, sizeof s2));
            if (w->stride[d] < 1 || (w->stride[d] > w->win[d] && w->dim[d] != w->win[d]))
                return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                               "stride %lld of dim %d of input %d must be between 1 and the window size %lld",
                               (long long)w->stride[d], d + 1, i, (long long)w->win[d]);
            w->shift[d] = (w->dim[d] - w->win[d] + w->stride[d] - 1) / w->stride[d] + 1;
            w->P *= w->shift[d];
            if (w->P > INT32_MAX) return cx_fail(CATTR_ERR_UNSUPPORTED, "input %d has too many windows", i);
        }
        if (w->nd == 0 && !f->whole) { /* one value per example: one window over a dim of 1 (on the backend: the
                                          * coordinate map of one dim, all 0) */
            w->nd = 1;
            w->dim[0] = w->win[0] = w->stride[0] = w->shift[0] = 1;
        }
        if (f->whole) { /* the leading dim of the view: every row, one position */
            memmove(w->dim + 1, w->dim, (size_t)w->nd * sizeof *w->dim);
            memmove(w->win + 1, w->win, (size_t)w->nd * sizeof *w->win);
            memmove(w->stride + 1, w->stride, (size_t)w->nd * sizeof *w->stride);
            memmove(w->shift + 1, w->shift, (size_t)w->nd * sizeof *w->shift);
            w->dim[0] = w->win[0] = x->shape[0];
            w->stride[0] = w->shift[0] = 1;
            w->nd++;
        }
        w->first = first;
        first += w->P;
        /* Captum numbers input i's windows from the product, not the sum, of the earlier inputs' window counts
         * (the same set of windows, visited in a rotated order when there are more than two inputs) */
        int64_t qm = i == 0 ? 0 : 1 % w->P;
        for (int j = 0; j < i; j++) qm = (qm * (o->in[j].P % w->P)) % w->P;
        w->qmod = qm;
    }
    o->G = first;
    return CATTR_OK;
}

/* Input of window g and the per-example element offsets its box covers. */
static void occ_window(const occ_run *o, int n_in, int64_t g, int *in, int64_t *box, int64_t *n_box) {
    int i = 0;
    while (i + 1 < n_in && g >= o->in[i].first + o->in[i].P) i++;
    const occ_input *w = &o->in[i];
    int64_t n = ((g - w->first - w->qmod) % w->P + w->P) % w->P; /* Python's modulo */
    int64_t lo[CATTR_MAX_DIMS], hi[CATTR_MAX_DIMS], idx[CATTR_MAX_DIMS];
    for (int d = 0; d < w->nd; d++) { /* first non-batch dim fastest */
        lo[d] = (n % w->shift[d]) * w->stride[d];
        hi[d] = lo[d] + w->win[d] < w->dim[d] ? lo[d] + w->win[d] : w->dim[d];
        n /= w->shift[d];
        idx[d] = lo[d];
    }
    *in = i;
    *n_box = 0;
    for (;;) {
        int64_t k = 0;
        for (int d = 0; d < w->nd; d++) k = k * w->dim[d] + idx[d];
        box[(*n_box)++] = k;
        int d = w->nd - 1;
        while (d >= 0 && ++idx[d] == hi[d]) idx[d] = lo[d], d--;
        if (d < 0) break;
    }
}

/* Adds y0 - y to the chunk sums of the window's elements; at a chunk's end the sums go into the totals
 * (Captum: total += (diff * masks).sum(0) per chunk of perturbations_per_eval windows, summed in window order). */
static cattr_status occ_take(pt_pass *p, int64_t g, const double *y) {
    occ_run *o = p->user;
    const cx_call *c = p->c;
    const pt_ref *ref = o->ref;
    cattr_dtype dt = ref->dt;
    int i;
    int64_t nb, n_out = ref->n_out;
    for (int64_t r = 0; r < n_out; r++) o->diff[r] = cx_rnd(dt, ref->y[r] - y[r]);
    occ_window(o, c->n, g, &i, o->box, &nb);
    int64_t per = cx_pt_example_numel(c->x[i]);
    for (int64_t t = 0; t < nb; t++) {
        int64_t k = o->box[t];
        bool fresh = !o->hit[i][k];
        if (fresh) {
            o->hit[i][k] = 1;
            o->touched[i][o->n_touched[i]++] = k;
        }
        double *part = o->part[i];
        for (int64_t r = 0; r < n_out; r++)
            part[r * per + k] = fresh ? o->diff[r] : cx_rnd(dt, part[r * per + k] + o->diff[r]);
    }
    if ((g + 1) % o->chunk != 0 && g + 1 != o->G) return CATTR_OK;
    for (int t = 0; t < c->n; t++) {
        int64_t pt = cx_pt_example_numel(c->x[t]);
        for (int64_t u = 0; u < o->n_touched[t]; u++) {
            int64_t k = o->touched[t][u];
            for (int64_t r = 0; r < n_out; r++)
                o->total[t][r * pt + k] = cx_rnd(dt, o->total[t][r * pt + k] + o->part[t][r * pt + k]);
            o->hit[t][k] = 0;
        }
        o->n_touched[t] = 0;
    }
    return CATTR_OK;
}

/* ---- Occlusion's windows on the backend ------------------------------------------------------------------------
 * Window g of input j replaces a box of input j by the baseline. A chunk of windows (R = cnt * B rows) runs as one
 * graph whose prefix makes every input's rows from the uploaded inputs, baselines and per-element coordinate maps:
 * the box is the elements whose coordinate along each dim d lies in [lo_d, hi_d), so starting from the baseline,
 * each of the 2 * nd conditions keeps it only where it holds:
 *   t = base_i (rows r mod B); per dim d: t = WhereId[<=](x_i, t, coord_{i,d}, hi_d - 1), then
 *   t = WhereId[<=](x_i, t, -coord_{i,d}, -lo_d) (x_i and the maps read through row maps)
 * and a row whose window is in another input gets hi_d - 1 = -1 (nothing kept). The thresholds of a chunk's rows go
 * up per chunk; the target outputs (or every output value) come back and are summed over the windows on the host in
 * Captum's order. */
typedef struct occ_graph {
    cx_derived core; /* graph, call shape, constants, plans */
    bool whole;      /* built for a model of the whole batch (perturb_forms.h) */
    int n_in, y;
    cx_call_dev cd; /* inputs, baselines, additional inputs, rows, targets, outputs */
    cx_buf map[CX_MAX_IN], zero;
} occ_graph;

/* Windows of input i span the dims of its example shape (an example of one value: one dim of 1, occ_setup). */
#define OCC_ND(s, i) ((s)->core.rank[i] > 1 ? (s)->core.rank[i] - 1 : 1)

static void occ_release(cattr_explainer *e) {
    occ_graph *s = e->method_state;
    if (!s) return;
    cx_call_dev_free(&s->cd);
    for (int i = 0; i < CX_MAX_IN; i++) cx_buf_free(&s->map[i]);
    cx_buf_free(&s->zero);
    cx_derived_free(&s->core);
    free(s);
    e->method_state = NULL;
}

/* Graph inputs per input i: x, base, the coordinate maps [2 * nd, ...] (coord_d, then -coord_d, each of the example
 * shape, stacked: row 2d + k), the thresholds [2 * nd, R] (row 2d: hi_d - 1, row 2d + 1: -lo_d; read as Slices of
 * one input). */
static cattr_status occ_build(cattr_explainer *e, void *state) {
    occ_graph *s = state;
    bool whole = s->whole = cx_pform_building_whole;
    const cg_graph *m = e->m->g;
    cg_graph *g = NULL;
    int *map = NULL;
    CX_CHECK(cx_derive_new(m, &g, &map));
    int bad = 0, in_map[2 * CX_MAX_IN], k = 0;
    int i_x[CX_MAX_IN], i_base[CX_MAX_IN], i_map[CX_MAX_IN], i_thr[CX_MAX_IN], i_add[CX_MAX_IN], i_rows, i_zero,
        i_tidx = -1;
    char nm[48];
#define OCC_IN(var)                                                                                                    \
    do {                                                                                                               \
        snprintf(nm, sizeof nm, "__occ_in%d", k++);                                                                    \
        bad |= ((var) = cg_add_input(g, nm)) < 0;                                                                      \
    } while (0)
    for (int i = 0; i < s->core.n; i++) {
        OCC_IN(i_x[i]);
        OCC_IN(i_base[i]);
        OCC_IN(i_map[i]);
        OCC_IN(i_thr[i]);
    }
    for (int j = 0; j < s->core.n_add; j++) OCC_IN(i_add[j]);
    OCC_IN(i_rows);
    OCC_IN(i_zero);
    if (s->core.target) OCC_IN(i_tidx);
#undef OCC_IN
    s->n_in = k;
    cg_attrs a0 = cg_attrs_default(), le = cg_attrs_default();
    le.index = 1;
    for (int i = 0; i < s->core.n && !bad; i++) {
        /* the thresholds' rows and the maps' rows, as Gathers of one row each */
        int t = -1;
        for (int c = 0; c < 2 * OCC_ND(s, i) && !bad; c++) {
            int64_t ci = c;
            cattr_tensor *ct = cx_tensor_alloc(CATTR_INT64, 0, NULL);
            int cv = ct ? cg_add_const(g, "__occ_cond", ct, true) : -1;
            if (ct && cv < 0) cattr_tensor_free(ct);
            if (cv < 0) {
                bad = 1;
                break;
            }
            *(int64_t *)ct->data = ci;
            int th = cg_emit(g, CG_GATHER, "__occ_threshold", (int[]){i_thr[i], cv}, 2, &a0);
            cattr_tensor *c1 = cx_tensor_alloc(CATTR_INT64, 1, (int64_t[]){1});
            int cv1 = c1 ? cg_add_const(g, "__occ_cond_row", c1, true) : -1;
            if (c1 && cv1 < 0) cattr_tensor_free(c1);
            if (cv1 < 0 || th < 0) {
                bad = 1;
                break;
            }
            *(int64_t *)c1->data = ci;
            int mp = cg_emit(g, CG_GATHER, "__occ_coordinates", (int[]){i_map[i], cv1}, 2, &a0); /* [1, ...] */
            int prev = t < 0 ? i_base[i] : t;
            int brow = t < 0 ? i_rows : -1;
            t = mp < 0 ? -1
                       : cg_emit(g, CG_WHERE_ID, "__occ_window",
                                 (int[]){i_x[i], prev, mp, th, i_rows, brow, i_zero}, 7, &le);
            bad |= t < 0;
        }
        in_map[i] = cx_pform_model_input(g, whole, t);
        bad |= in_map[i] < 0;
    }
    for (int j = 0; j < s->core.n_add && !bad; j++)
        bad |= (in_map[s->core.n + j] = cx_pform_model_input(
                    g, whole, cg_emit(g, CG_GATHER, "__occ_at", (int[]){i_add[j], i_rows}, 2, &a0))) < 0;
    cattr_status st = bad ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : CATTR_OK;
    if (st == CATTR_OK) st = cx_graph_append_model(g, m, in_map, map);
    if (st == CATTR_OK) {
        cg_attrs r3 = cg_attrs_default(), r1 = cg_attrs_default();
        r3.n_ints = 3;
        r3.ints[0] = 0, r3.ints[1] = -1, r3.ints[2] = 1;
        r1.n_ints = 1;
        r1.ints[0] = -1;
        int ys = map[cx_model_output(e->m)];
        if (s->core.target) {
            int y3 = cg_emit(g, CG_RESHAPE, "__occ_out_rows", (int[]){ys}, 1, &r3);
            ys = y3 < 0 ? -1 : cg_emit(g, CG_SEQ_PICK, "__occ_target", (int[]){y3, i_tidx}, 2, NULL);
        }
        s->y = ys < 0 ? -1 : cg_emit(g, CG_RESHAPE, "__occ_y", (int[]){ys}, 1, &r1);
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

/* Occlusion's windows run as states on the backend (see above). */
static cattr_status occ_run_states(pt_pass *p, occ_run *o) {
    cattr_explainer *e = p->e;
    cx_call *c = p->c;
    if (p->n_states <= 0) return CATTR_OK;
    bool target = cx_pt_has_target(c), whole = p->f->whole;
    occ_graph *s = NULL;
    CX_CHECK(pt_state(e, c, target, whole, sizeof *s, occ_build, occ_release, offsetof(occ_graph, whole), (void **)&s));
    int64_t per = 1, B = c->B;
    cattr_status st = whole ? CATTR_OK : cx_pt_states_per_pass(e, c, p->n_states, &per);
    int64_t rmax = per * B, nbuf = 2 * CATTR_MAX_DIMS * rmax;
    for (int i = 0; i < c->n; i++)
        if (2 * OCC_ND(s, i) * cx_pt_example_numel(c->x[i]) > nbuf) nbuf = 2 * OCC_ND(s, i) * cx_pt_example_numel(c->x[i]);
    if (whole && p->f->ond && p->f->osh[0] > nbuf) nbuf = p->f->osh[0];
    int64_t *buf = st == CATTR_OK ? malloc((size_t)(nbuf + 1) * sizeof *buf) : NULL;
    double *vals = st == CATTR_OK ? malloc((size_t)(per * p->n_out + 1) * sizeof *vals) : NULL;
    /* a chunk's thresholds, input i's at thr + toff[i] (they go up with the chunk's run) */
    int64_t toff[CX_MAX_IN + 1] = {0};
    for (int i = 0; i < c->n; i++) toff[i + 1] = toff[i] + 2 * OCC_ND(s, i) * rmax;
    int64_t *thr = st == CATTR_OK ? malloc((size_t)(toff[c->n] + 1) * sizeof *thr) : NULL;
    if (st == CATTR_OK && (!buf || !vals || !thr)) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) st = cx_call_dev_fit(e, c, &s->cd, rmax, target && !whole, per * p->n_out);
    if (st == CATTR_OK && target && whole) { /* the target of each row of the output */
        st = cx_pform_target_rows(p->f, p->c0, buf);
        if (st == CATTR_OK) st = cx_buf_fit(e->be, &s->cd.tidx, (size_t)p->f->osh[0] * sizeof *buf, buf, false);
    }
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        int64_t pe = cx_pt_example_numel(c->x[i]), nd = OCC_ND(s, i);
        for (int64_t k = 0; k < pe && st == CATTR_OK; k++) { /* coordinates of every element, first dim slowest */
            int64_t rem = k;
            for (int d = (int)nd - 1; d >= 0; d--) {
                int64_t cd = rem % o->in[i].dim[d];
                rem /= o->in[i].dim[d];
                buf[(2 * d) * pe + k] = cd;
                buf[(2 * d + 1) * pe + k] = -cd;
            }
        }
        if (st == CATTR_OK) st = cx_buf_fit(e->be, &s->map[i], (size_t)(2 * nd * pe) * sizeof *buf, buf, false);
    }
    if (st == CATTR_OK) st = cx_buf_fit(e->be, &s->zero, (size_t)rmax * sizeof *buf, NULL, true);
    cx_vsplit v;
    if (st == CATTR_OK) st = cx_vsplit_begin(e, c, p->n_states, per, p->n_out, &v);
    else memset(&v, 0, sizeof v);
    for (int64_t s0 = 0, q = 0; s0 < p->n_states && st == CATTR_OK; s0 += per, q++) {
        int64_t cnt = p->n_states - s0 < per ? p->n_states - s0 : per, R = cnt * B;
        if (!cx_vsplit_mine(&v, q)) { /* another part's chunk; combining: its values */
            st = cx_pt_other(p, &v, q, s0, cnt, vals);
            continue;
        }
        for (int i = 0; i < c->n; i++) { /* the chunk's thresholds for input i */
            const occ_input *w = &o->in[i];
            int64_t nd = OCC_ND(s, i), *ti = thr + toff[i];
            for (int64_t j = 0; j < cnt; j++) {
                int64_t g = s0 + j, lo[CATTR_MAX_DIMS] = {0}, hi[CATTR_MAX_DIMS] = {0};
                bool mine = g >= w->first && g < w->first + w->P;
                if (mine) { /* as occ_window: first dim fastest */
                    int64_t n = ((g - w->first - w->qmod) % w->P + w->P) % w->P;
                    for (int d = 0; d < nd; d++) {
                        lo[d] = (n % w->shift[d]) * w->stride[d];
                        hi[d] = lo[d] + w->win[d] < w->dim[d] ? lo[d] + w->win[d] : w->dim[d];
                        n /= w->shift[d];
                    }
                }
                for (int d = 0; d < nd; d++)
                    for (int64_t b = 0; b < B; b++) {
                        ti[(2 * d) * R + j * B + b] = mine ? hi[d] - 1 : -1;
                        ti[(2 * d + 1) * R + j * B + b] = mine ? -lo[d] : 0;
                    }
            }
        }
        cx_arg arg[4 * CX_MAX_IN + CX_MAX_IN + 3];
        memset(arg, 0, (size_t)s->n_in * sizeof *arg);
        for (int k = 0; k < s->n_in; k++) {
            arg[k].nd = 1;
            arg[k].sh[0] = R;
            arg[k].dt = CATTR_INT64;
        }
        for (int i = 0; i < c->n; i++) {
            const cattr_tensor *x = c->x[i];
            int kx = 4 * i, kb = 4 * i + 1, km = 4 * i + 2, kt = 4 * i + 3; /* graph-input positions (occ_build) */
            arg[kx].nd = arg[kb].nd = arg[km].nd = x->ndim;
            memcpy(arg[kx].sh, x->shape, sizeof arg[0].sh);
            memcpy(arg[kb].sh, x->shape, sizeof arg[0].sh);
            memcpy(arg[km].sh, x->shape, sizeof arg[0].sh);
            arg[km].sh[0] = 2 * OCC_ND(s, i);
            arg[kx].dt = arg[kb].dt = x->dtype;
            arg[kt].nd = 2;
            arg[kt].sh[0] = 2 * OCC_ND(s, i);
            arg[kt].sh[1] = R;
            arg[kx].dev = s->cd.x[i].p;
            arg[kb].dev = s->cd.base[i].p;
            arg[km].dev = s->map[i].p;
            arg[kt].host = thr + toff[i];
        }
        for (int j = 0; j < c->n_add; j++) {
            int ka = 4 * c->n + j;
            arg[ka].nd = c->add[j]->ndim;
            memcpy(arg[ka].sh, c->add[j]->shape, sizeof arg[0].sh);
            arg[ka].dt = c->add[j]->dtype;
            arg[ka].dev = s->cd.add[j].p;
        }
        int kr = 4 * c->n + c->n_add;
        arg[kr].dev = s->cd.rows.p;
        arg[kr + 1].dev = s->zero.p;
        if (target) arg[kr + 2].dev = s->cd.tidx.p;
        if (target && whole) arg[kr + 2].sh[0] = p->f->osh[0];
        if (st == CATTR_OK)
            st = cx_derived_values(e, &s->core, arg, s->y, &s->cd,
                                   cnt * p->n_out, vals);
        if (st == CATTR_OK) st = cx_pt_computed(p, &v, q, s0, cnt, vals);
    }
    st = cx_vsplit_end(&v, st);
    free(buf);
    free(thr);
    free(vals);
    return st;
}

/* The unperturbed outputs of inputs xs (the call's own shapes: its inputs, or its baselines) as ref: target-selected
 * (or every value); a model of the whole batch: its n_sel values, shape [O0] with a target, else the output's. */
cattr_status cx_pt_reference(cattr_explainer *e, cx_call *c0, const cx_pform *f, cattr_tensor *const *xs,
                                 pt_ref *ref) {
    if (!f->whole) return cx_pt_reference_output(e, c0, xs, ref);
    memset(ref, 0, sizeof *ref);
    ref->n_out = f->n_sel;
    ref->dt = f->odt;
    if (cx_pt_has_target(c0)) {
        ref->ndim = 1;
        ref->shape[0] = f->osh[0];
    } else {
        ref->ndim = f->ond;
        memcpy(ref->shape, f->osh, sizeof ref->shape);
    }
    ref->y = malloc((size_t)(ref->n_out + 1) * sizeof *ref->y);
    if (!ref->y) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    return cx_pt_whole_values(e, c0, f, xs, ref->y);
}

static cattr_status occlusion(cattr_explainer *e, cx_call *c0, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    occ_run o;
    pt_ref ref;
    cx_pform pf;
    memset(&o, 0, sizeof o);
    memset(&ref, 0, sizeof ref);
    int64_t max_box = 1;
    cattr_status st = cx_pform_get(e, c0, true, false, &pf);
    if (st != CATTR_OK) return st;
    cx_call *c = pf.whole ? &pf.v : c0; /* a model of the whole batch: its view (perturb_forms.h) */
    st = occ_setup(e, c0, &pf, &o);
    if (st == CATTR_OK) st = cx_pt_reference(e, c0, &pf, c0->x, &ref);
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        int64_t per = cx_pt_example_numel(c->x[i]), nb = 1;
        for (int d = 0; d < o.in[i].nd; d++) nb *= o.in[i].win[d];
        if (nb > max_box) max_box = nb;
        o.total[i] = calloc((size_t)(ref.n_out * per) + 1, sizeof *o.total[i]);
        o.part[i] = calloc((size_t)(ref.n_out * per) + 1, sizeof *o.part[i]);
        o.hit[i] = calloc((size_t)per + 1, 1);
        o.touched[i] = malloc((size_t)(per + 1) * sizeof *o.touched[i]);
        o.weight[i] = calloc((size_t)per + 1, sizeof *o.weight[i]);
        if (!o.total[i] || !o.part[i] || !o.hit[i] || !o.touched[i] || !o.weight[i])
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK) {
        o.ref = &ref;
        o.chunk = e->p.perturbations_per_eval > 0 && !pf.whole ? e->p.perturbations_per_eval : 1;
        o.box = malloc((size_t)max_box * sizeof *o.box);
        o.diff = malloc((size_t)(ref.n_out + 1) * sizeof *o.diff);
        if (!o.box || !o.diff) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    for (int64_t g = 0; g < o.G && st == CATTR_OK; g++) { /* window counts (float32 in Captum, exact) */
        int i;
        int64_t nb;
        occ_window(&o, c->n, g, &i, o.box, &nb);
        for (int64_t t = 0; t < nb; t++) o.weight[i][o.box[t]] += 1;
    }
    pt_pass p = {e, c, o.G, ref.n_out, occ_take, &o, &pf, c0};
    if (st == CATTR_OK && c->B > 0 && ref.n_out > 0) st = occ_run_states(&p, &o);
    int64_t lead = ref.n_out;
    for (int i = 0; i < c0->n && st == CATTR_OK; i++) { /* total.float() / weight */
        st = cx_pt_alloc_attr(c->dt, 1, &lead, c0->x[i], &attr[i]);
        /* a model of the whole batch: the elements of the first row of the view (every row's are the same) */
        int64_t per = cx_pt_example_numel(c0->x[i]), vper = cx_pt_example_numel(c->x[i]);
        for (int64_t r = 0; r < ref.n_out && st == CATTR_OK; r++)
            for (int64_t k = 0; k < per; k++) {
                float tot = (float)o.total[i][r * vper + k];
                cx_tensor_set(attr[i], r * per + k, (double)(float)((double)tot / o.weight[i][k]));
            }
    }
    for (int i = 0; i < CX_MAX_IN; i++) {
        free(o.total[i]);
        free(o.part[i]);
        free(o.hit[i]);
        free(o.touched[i]);
        free(o.weight[i]);
    }
    free(o.box);
    free(o.diff);
    free(ref.y);
    cx_pform_free(&pf);
    return st;
}

/* The parameters of the perturbation methods (perturbations_per_eval, Occlusion's windows and strides,
 * ShapleyValueSampling's n_samples) are checked by cx_params_check (methods.c); the windows against the inputs' shapes
 * by each call (occ_setup). */

const cx_method cx_method_occlusion = {CATTR_METHOD_OCCLUSION, false, NULL,
                                       occlusion, occ_release};
