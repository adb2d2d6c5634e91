/* layer_path.c - the integrated layer and neuron methods (InternalInfluence, LayerConductance,
 * LayerIntegratedGradients, NeuronIntegratedGradients, NeuronConductance) as one derived graph per chunk of path
 * points, with accumulators on the backend (lpath_run); the graphs, seeds and passes they share are layer.c's. */
#include "attr/layer_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- integrated methods as one derived graph -----------------------------------------------------------------
 * InternalInfluence, LayerConductance, NeuronIntegratedGradients, NeuronConductance and LayerIntegratedGradients run
 * a chunk of path points as one graph on the backend, built like IG's (integrated_gradients.c) for the call's ranks (rows r of a
 * chunk are step-major, r = s*B + b; rows[r] = b):
 *   prefix   input-space path (all but LayerIG): p_i = Gather(b_i, rows) + alpha * (Gather(x_i, rows) - Gather(b_i, rows))
 *            LayerIG: the model on x and on the baselines gives the layer values a_k and a0_k; the path is
 *            p_k = Gather(a0_k, rows) + alpha * (Gather(a_k, rows) - Gather(a0_k, rows)), and the model runs on
 *            Gather(x_i, rows) with every use of layer value k reading p_k
 *   gradient InternalInfluence, LayerConductance: of the target w.r.t. the layer values; LayerIG: w.r.t. p_k;
 *            the neuron methods: of the neuron (seeded by the neuron mask over the layer) w.r.t. p_i, NeuronConductance
 *            times dF/dn per row (the target's gradient at the layer, summed over the neuron's positions)
 *   suffix   out = acc + GatherGrad(grad * step, rows, acc) (times (x - b) or (a - a0) for the IG forms with
 *            multiply_by_inputs); LayerConductance: acc + GatherGrad((a[next] - a[cur]) * grad[cur], pair, acc) over the
 *            chunk's consecutive points (chunks share their end points, as Captum's)
 * A call uploads x, b, the additional inputs, the seeds and the schedule (rows, alphas, step sizes, conductance's
 * pairs) once, keeps the accumulators on the backend from chunk to chunk, and downloads the attributions once. */

enum { PK_II = 1, PK_LC, PK_NIG, PK_NC, PK_LIG };

#define LP_MAX_IN (6 * CX_MAX_IN + 4 * CATTR_MAX_OUTPUTS + 8)
_Static_assert(LP_MAX_IN <= CX_RUN_MAX_IN, "a run takes at most CX_RUN_MAX_IN inputs");

struct lpath {
    int kind, n, n_add, n_l, xr[CX_MAX_IN], lr[CATTR_MAX_OUTPUTS]; /* what the graph was built for */
    cattr_dtype dt;
    cg_graph *g;
    cx_consts *consts;
    int n_in; /* graph inputs, positions below */
    int in_x, in_b, in_add, in_seed, in_nseed, in_rows, in_alpha, in_step, in_acc, in_cur, in_next, in_pair;
    int n_out, outs[CX_MAX_IN > CATTR_MAX_OUTPUTS ? CX_MAX_IN : CATTR_MAX_OUTPUTS];
    cx_buf x[CX_MAX_IN], b[CX_MAX_IN], add[CX_MAX_IN], seed, nseed, rows, alpha, step, cur, next, pair;
    cx_buf acc[CX_MAX_IN > CATTR_MAX_OUTPUTS ? CX_MAX_IN : CATTR_MAX_OUTPUTS];
};

void cx_lg_lpath_free(lpath *p) {
    if (!p) return;
    cg_free(p->g);
    cx_consts_free(p->consts);
    for (int i = 0; i < CX_MAX_IN; i++) {
        cx_buf_free(&p->x[i]);
        cx_buf_free(&p->b[i]);
        cx_buf_free(&p->add[i]);
    }
    for (size_t k = 0; k < CX_ARRAY_LEN(p->acc); k++) cx_buf_free(&p->acc[k]);
    cx_buf *one[] = {&p->seed, &p->nseed, &p->rows, &p->alpha, &p->step, &p->cur, &p->next, &p->pair};
    for (size_t k = 0; k < CX_ARRAY_LEN(one); k++) cx_buf_free(one[k]);
    free(p);
}


static cattr_status lpath_build(cattr_explainer *e, lstate *s, lpath *p) {
    const cg_graph *m = e->m->g;
    int n = p->n, na = p->n_add, nl = p->n_l, kind = p->kind;
    bool lig = kind == PK_LIG, neuron = kind == PK_NIG || kind == PK_NC, lc = kind == PK_LC;
    int n_acc = neuron ? n : nl, n_step = neuron ? n : nl; /* alpha: per input, LayerIG per layer */
    int n_alpha = lig ? nl : n;
    p->in_x = 0;
    p->in_b = n;
    p->in_add = 2 * n;
    p->in_seed = 2 * n + na;
    p->in_nseed = p->in_seed + 1;
    p->in_rows = p->in_nseed + 1;
    p->in_alpha = p->in_rows + 1;
    p->in_step = p->in_alpha + n_alpha;
    p->in_acc = p->in_step + n_step;
    p->in_cur = p->in_acc + n_acc;
    p->in_next = p->in_cur + 1;
    p->in_pair = p->in_next + 1;
    p->n_in = p->in_pair + 1;
    cg_graph *g = NULL;
    int *map = NULL, *map_x = NULL, *map_b = NULL;
    CX_CHECK(cx_derive_new(m, &g, &map));
    int v[LP_MAX_IN], bad = 0;
    for (int k = 0; k < p->n_in; k++) {
        char nm[32];
        snprintf(nm, sizeof nm, "__lp_in%d", k);
        bad |= (v[k] = cg_add_input(g, nm)) < 0;
    }
    cattr_status st = bad ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : CATTR_OK;
    int rows = v[p->in_rows], in_map[2 * CX_MAX_IN], wrt[CATTR_MAX_OUTPUTS > CX_MAX_IN ? CATTR_MAX_OUTPUTS : CX_MAX_IN];
    int rep_by[CATTR_MAX_OUTPUTS], a[CATTR_MAX_OUTPUTS], a0[CATTR_MAX_OUTPUTS];
    if (st == CATTR_OK && lig) { /* the layer values at x and at the baselines */
        map_x = malloc((size_t)(m->n_vals + 1) * sizeof *map_x);
        map_b = malloc((size_t)(m->n_vals + 1) * sizeof *map_b);
        if (!map_x || !map_b) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        for (int i = 0; i < n + na; i++) in_map[i] = i < n ? v[p->in_x + i] : v[p->in_add + i - n];
        if (st == CATTR_OK) st = cx_graph_append_model(g, m, in_map, map_x);
        for (int i = 0; i < n; i++) in_map[i] = v[p->in_b + i];
        if (st == CATTR_OK) st = cx_graph_append_model(g, m, in_map, map_b);
        for (int k = 0; k < nl && st == CATTR_OK; k++) {
            a[k] = map_x[s->lv[k]];
            a0[k] = map_b[s->lv[k]];
            rep_by[k] = cx_emit_path_point(g, a[k], a0[k], v[p->in_alpha + k], rows);
            if (rep_by[k] < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        }
        for (int i = 0; i < n && st == CATTR_OK; i++)
            if ((in_map[i] = cx_emit2(g, CG_GATHER, "__lp_x_rows", v[p->in_x + i], rows)) < 0)
                st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    } else {
        for (int i = 0; i < n && st == CATTR_OK; i++)
            if ((in_map[i] = cx_emit_path_point(g, v[p->in_x + i], v[p->in_b + i], v[p->in_alpha + i], rows)) < 0)
                st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    for (int j = 0; j < na && st == CATTR_OK; j++)
        if ((in_map[n + j] = cx_emit2(g, CG_GATHER, "__lp_add_rows", v[p->in_add + j], rows)) < 0)
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) st = cx_graph_append_model_replacing(g, m, in_map, lig ? nl : 0, s->lv, rep_by, map);
    int y = st == CATTR_OK ? map[cx_model_output(e->m)] : -1;
    int seed = cx_emit2(g, CG_GATHER, "__lp_seed_rows", v[p->in_seed], rows);
    int grads[CATTR_MAX_OUTPUTS > CX_MAX_IN ? CATTR_MAX_OUTPUTS : CX_MAX_IN];
    cg_rules std;
    cg_rules_default(&std);
    if (st == CATTR_OK && seed < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK && neuron) {
        int nseed = cx_emit2(g, CG_GATHER, "__lp_neuron_rows", v[p->in_nseed], rows);
        st = nseed < 0 ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory")
                       : cg_autodiff(g, map[s->lv[0]], nseed, in_map, n, &std, grads);
        if (st == CATTR_OK && kind == PK_NC) { /* dF/dn per row, broadcast over each input's row */
            int gl = -1;
            st = cg_autodiff(g, y, seed, &map[s->lv[0]], 1, &std, &gl);
            cg_attrs ra = cg_attrs_default();
            for (int d = 1; d < p->lr[0]; d++) ra.ints[ra.n_ints++] = d;
            ra.index = 0;
            int sel = st == CATTR_OK ? cx_emit2(g, CG_MUL, "__lp_neuron_grad", gl, nseed) : -1;
            int mid = sel < 0 ? -1 : p->lr[0] > 1 ? cg_emit(g, CG_REDUCE_SUM, "__lp_dfdn", &sel, 1, &ra) : sel;
            for (int i = 0; i < n && st == CATTR_OK; i++) {
                cg_attrs ua = cg_attrs_default();
                for (int d = 1; d < p->xr[i]; d++) ua.ints[ua.n_ints++] = d;
                int mi = mid < 0 ? -1 : ua.n_ints ? cg_emit(g, CG_UNSQUEEZE, "__lp_dfdn_rows", &mid, 1, &ua) : mid;
                if ((grads[i] = cx_emit2(g, CG_MUL, "__lp_conductance", grads[i], mi)) < 0)
                    st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            }
        }
    } else if (st == CATTR_OK) {
        for (int k = 0; k < nl; k++) wrt[k] = lig ? rep_by[k] : map[s->lv[k]];
        st = cg_autodiff(g, y, seed, wrt, nl, &std, grads);
    }
    p->n_out = n_acc;
    for (int k = 0; k < n_acc && st == CATTR_OK; k++) {
        int acc = v[p->in_acc + k], val;
        if (lc) {
            int act = map[s->lv[k]];
            int d = cx_emit2(g, CG_SUB, "__lp_act_diff", cx_emit2(g, CG_GATHER, "__lp_act_next", act, v[p->in_next]),
                        cx_emit2(g, CG_GATHER, "__lp_act_cur", act, v[p->in_cur]));
            int prod = cx_emit2(g, CG_MUL, "__lp_diff_x_grad", d, cx_emit2(g, CG_GATHER, "__lp_grad_cur", grads[k], v[p->in_cur]));
            int in3[3] = {prod, v[p->in_pair], acc};
            val = prod < 0 ? -1 : cg_emit(g, CG_GATHER_GRAD, "__lp_point_sum", in3, 3, NULL);
        } else {
            int w = cx_emit2(g, CG_MUL, "__lp_weighted", grads[k], v[p->in_step + k]);
            int in3[3] = {w, rows, acc};
            val = w < 0 ? -1 : cg_emit(g, CG_GATHER_GRAD, "__lp_step_sum", in3, 3, NULL);
            if (e->p.multiply_by_inputs && kind != PK_II)
                val = lig ? cx_emit2(g, CG_MUL, "__lp_times_diff", val, cx_emit2(g, CG_SUB, "__lp_a_minus_a0", a[k], a0[k]))
                          : cx_emit2(g, CG_MUL, "__lp_times_diff", val, cx_emit2(g, CG_SUB, "__lp_x_minus_b", v[p->in_x + k], v[p->in_b + k]));
        }
        if ((p->outs[k] = cx_emit2(g, CG_ADD, "__lp_acc_out", acc, val)) < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    free(map);
    free(map_x);
    free(map_b);
    if (st != CATTR_OK) {
        cg_free(g);
        return st;
    }
    p->g = g;
    return CATTR_OK;
}

/* The state for this call: the graph of `kind` for these inputs, layer ranks and dtype (rebuilt when they change). */
static cattr_status lpath_for(cattr_explainer *e, lstate *s, cx_call *c, int kind, const int *lr, lpath **out) {
    lpath *p = s->path;
    bool same = p && p->kind == kind && p->n == c->n && p->n_add == c->n_add && p->dt == c->dt;
    for (int i = 0; same && i < c->n; i++) same = p->xr[i] == c->x[i]->ndim;
    for (int k = 0; same && k < s->n_l; k++) same = p->lr[k] == lr[k];
    if (!same) {
        cx_lg_lpath_free(p);
        s->path = p = calloc(1, sizeof *p);
        if (!p) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        p->kind = kind;
        p->n = c->n;
        p->n_add = c->n_add;
        p->n_l = s->n_l;
        p->dt = c->dt;
        for (int i = 0; i < c->n; i++) p->xr[i] = c->x[i]->ndim;
        for (int k = 0; k < s->n_l; k++) p->lr[k] = lr[k];
        cattr_status st = lpath_build(e, s, p);
        if (st == CATTR_OK) st = cx_consts_new(e->be, c->dt, &p->consts);
        if (st != CATTR_OK) {
            cx_lg_lpath_free(p);
            s->path = NULL;
            return st;
        }
    }
    *out = p;
    return CATTR_OK;
}

/* The integrated method `kind` over the call: attr[] new tensors (one per layer tensor, the neuron methods one per
 * input). */
static cattr_status lpath_run(cattr_explainer *e, cx_call *c, int kind, cattr_tensor **attr) {
    lstate *s = e->method_state;
    bool neuron = kind == PK_NIG || kind == PK_NC, lc = kind == PK_LC, lig = kind == PK_LIG;
    int nl = s->n_l, npts = lc ? e->p.n_steps + 1 : e->p.n_steps, chunk = npts;
    int64_t B = c->B;
    size_t es = cattr_dtype_size(c->dt);
    cx_view lv[CATTR_MAX_OUTPUTS], ov;
    int lr[CATTR_MAX_OUTPUTS];
    lpass pi;
    cx_lg_ensure_gf(e, s);
    cattr_status st = cx_lg_lp_setup(&s->gf, c, c->x, 1, CX_TILE, &pi);
    for (int k = 0; k < nl && st == CATTR_OK; k++) {
        st = cx_lg_lg_view(e, &s->gf, &pi, s->lv[k], &lv[k]);
        lr[k] = lv[k].ndim;
        if (st == CATTR_OK && (lv[k].ndim < 1 || lv[k].shape[0] != B))
            st = cx_fail(CATTR_ERR_SHAPE, "the layer has %lld rows; expected the batch (%lld) first",
                         (long long)(lv[k].ndim ? lv[k].shape[0] : 0), (long long)B);
    }
    if (st == CATTR_OK) st = cx_lg_lg_view(e, &s->gf, &pi, cx_model_output(e->m), &ov);
    cx_lg_lp_free(&pi);
    lpath *p = NULL;
    double *alphas = NULL, *steps = NULL;
    cattr_tensor *seed = NULL, *nseed = NULL, *al = NULL, *stp = NULL;
    int64_t *ib = NULL;
    neuron_sel ns = {0};
    if (st == CATTR_OK) st = lpath_for(e, s, c, kind, lr, &p);
    if (st == CATTR_OK) st = cx_lg_quad_points(e, npts, &alphas, &steps);
    if (st == CATTR_OK) st = cx_lg_points_per_chunk(e, c, npts, lc ? 2 : 1, &chunk);
    if (st == CATTR_OK && kind != PK_NIG) st = cx_lg_target_seed(c, &ov, 1, CX_TILE, &seed); /* NeuronIG has no target */
    if (st == CATTR_OK && neuron) st = cx_lg_neuron_select(&e->p, lv[0].ndim, lv[0].shape, &ns);
    if (st == CATTR_OK && neuron) { /* the neuron's mask over one block of the layer */
        nseed = cx_tensor_alloc(c->dt, lv[0].ndim, lv[0].shape);
        if (!nseed) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else {
            memset(nseed->data, 0, (size_t)nseed->numel * es);
            for (int64_t r = 0; r < B; r++)
                for (int64_t q = 0; q < ns.n_sel; q++) cx_tensor_set(nseed, r * ns.per + ns.sel[q], 1.0);
        }
    }
    /* the call and the schedule, uploaded once */
    int64_t all = (int64_t)npts * B, maxr = (int64_t)chunk * B;
    for (int i = 0; i < c->n && st == CATTR_OK; i++) { /* in their dtype: LayerIG takes integer ids too */
        size_t xb = (size_t)c->x[i]->numel * cattr_dtype_size(c->x[i]->dtype);
        st = cx_buf_fit(e->be, &p->x[i], xb, c->x[i]->data, false);
        if (st == CATTR_OK) st = cx_buf_fit(e->be, &p->b[i], xb, c->base[i]->data, false);
    }
    for (int j = 0; j < c->n_add && st == CATTR_OK; j++)
        st = cx_buf_fit(e->be, &p->add[j], (size_t)c->add[j]->numel * cattr_dtype_size(c->add[j]->dtype),
                         c->add[j]->data, false);
    if (st == CATTR_OK && seed) st = cx_buf_fit(e->be, &p->seed, (size_t)seed->numel * es, seed->data, false);
    if (st == CATTR_OK && neuron) st = cx_buf_fit(e->be, &p->nseed, (size_t)nseed->numel * es, nseed->data, false);
    for (int k = 0; st == CATTR_OK && k < p->n_out; k++) {
        int64_t cnt = neuron ? c->x[k]->numel : cx_view_numel(&lv[k]);
        st = cx_buf_fit(e->be, &p->acc[k], (size_t)cnt * es, NULL, true);
    }
    if (st == CATTR_OK) {
        ib = malloc((size_t)(3 * maxr + 1) * sizeof *ib);
        al = cx_tensor_alloc(c->dt, 1, &all);
        stp = cx_tensor_alloc(c->dt, 1, &all);
        if (!ib || !al || !stp) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK) {
        for (int64_t r = 0; r < all; r++) {
            cx_tensor_set(al, r, alphas[r / B]);
            cx_tensor_set(stp, r, steps[r / B]);
        }
        for (int64_t r = 0; r < maxr; r++) ib[r] = r % B;
        st = cx_buf_fit(e->be, &p->rows, (size_t)maxr * sizeof *ib, ib, false);
        if (st == CATTR_OK) st = cx_buf_fit(e->be, &p->alpha, (size_t)all * es, al->data, false);
        if (st == CATTR_OK) st = cx_buf_fit(e->be, &p->step, (size_t)all * es, stp->data, false);
    }
    if (st == CATTR_OK && lc) { /* consecutive points of a chunk: rows q*B + b and (q+1)*B + b, example b */
        int64_t np = maxr - B > 0 ? maxr - B : 1;
        for (int64_t r = 0; r < np; r++) {
            ib[r] = r;
            ib[np + r] = r + B;
            ib[2 * np + r] = r % B;
        }
        st = cx_buf_fit(e->be, &p->cur, (size_t)np * sizeof *ib, ib, false);
        if (st == CATTR_OK) st = cx_buf_fit(e->be, &p->next, (size_t)np * sizeof *ib, ib + np, false);
        if (st == CATTR_OK) st = cx_buf_fit(e->be, &p->pair, (size_t)np * sizeof *ib, ib + 2 * np, false);
    }
    /* a call split into parts (split.c): the chunks are the units, their values the accumulators' chunk sums */
    int acc_nd[CX_ACC_SPLIT_MAX];
    int64_t acc_sh[CX_ACC_SPLIT_MAX][CATTR_MAX_DIMS];
    for (int k = 0; p && k < p->n_out && k < CX_ACC_SPLIT_MAX; k++) {
        acc_nd[k] = neuron ? c->x[k]->ndim : lv[k].ndim;
        memcpy(acc_sh[k], neuron ? c->x[k]->shape : lv[k].shape, sizeof acc_sh[k]);
    }
    int64_t n_units = 0;
    for (int s0 = 0; s0 < (lc ? npts - 1 : npts); n_units++) {
        int s1 = s0 + chunk < npts ? s0 + chunk : npts;
        s0 = lc ? s1 - 1 : s1;
    }
    cx_vsplit v;
    cx_acc_split as;
    memset(&v, 0, sizeof v);
    memset(&as, 0, sizeof as);
    double *vals = NULL;
    if (st == CATTR_OK)
        st = cx_vsplit_begin(e, c, n_units, 1, cx_acc_split_width(p->n_out, acc_nd, (const int64_t(*)[CATTR_MAX_DIMS])acc_sh), &v);
    if (st == CATTR_OK)
        st = cx_acc_split_init(e, &v, p->n_out, acc_nd, (const int64_t(*)[CATTR_MAX_DIMS])acc_sh, c->dt, &as);
    if (st == CATTR_OK && v.mode != CX_VSPLIT_NONE && !(vals = malloc((size_t)(v.n_out + 1) * sizeof *vals)))
        st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    /* the chunks (LayerConductance's share their end points) */
    for (int s0 = 0, q = 0; st == CATTR_OK && s0 < (lc ? npts - 1 : npts); q++) {
        int s1 = s0 + chunk < npts ? s0 + chunk : npts, P = s1 - s0;
        int64_t R = (int64_t)P * B;
        if (!cx_vsplit_mine(&v, q)) { /* another part's chunk; combining: its sums added */
            if (v.mode == CX_VSPLIT_COMBINE) {
                void *accs[CX_ACC_SPLIT_MAX];
                for (int k = 0; k < p->n_out; k++) accs[k] = p->acc[k].p;
                st = cx_acc_split_chunk(e, &v, &as, p->consts, q, accs, vals, 0);
                if (st == CATTR_OK) st = cx_chunk_done(&e->p, lc ? s1 - 1 : s1, lc ? npts - 1 : npts);
            }
            s0 = lc ? s1 - 1 : s1;
            continue;
        }
        cx_arg arg[LP_MAX_IN];
        void *outp[CX_MAX_IN > CATTR_MAX_OUTPUTS ? CX_MAX_IN : CATTR_MAX_OUTPUTS];
        memset(arg, 0, (size_t)p->n_in * sizeof *arg);
        for (int k = 0; k < p->n_in; k++) { /* stand-ins for the inputs this kind does not read */
            arg[k].nd = 1;
            arg[k].sh[0] = 1;
            arg[k].dt = CATTR_INT64;
            arg[k].dev = p->rows.p;
        }
        for (int i = 0; i < c->n; i++) {
            arg[p->in_x + i].nd = arg[p->in_b + i].nd = c->x[i]->ndim;
            memcpy(arg[p->in_x + i].sh, c->x[i]->shape, sizeof arg[0].sh);
            memcpy(arg[p->in_b + i].sh, c->x[i]->shape, sizeof arg[0].sh);
            arg[p->in_x + i].dt = arg[p->in_b + i].dt = c->x[i]->dtype;
            arg[p->in_x + i].dev = p->x[i].p;
            arg[p->in_b + i].dev = p->b[i].p;
        }
        for (int j = 0; j < c->n_add; j++) {
            arg[p->in_add + j].nd = c->add[j]->ndim;
            memcpy(arg[p->in_add + j].sh, c->add[j]->shape, sizeof arg[0].sh);
            arg[p->in_add + j].dt = c->add[j]->dtype;
            arg[p->in_add + j].dev = p->add[j].p;
        }
        if (seed) {
            arg[p->in_seed].nd = seed->ndim;
            memcpy(arg[p->in_seed].sh, seed->shape, sizeof arg[0].sh);
            arg[p->in_seed].dt = c->dt;
            arg[p->in_seed].dev = p->seed.p;
        }
        if (neuron) {
            arg[p->in_nseed].nd = nseed->ndim;
            memcpy(arg[p->in_nseed].sh, nseed->shape, sizeof arg[0].sh);
            arg[p->in_nseed].dt = c->dt;
            arg[p->in_nseed].dev = p->nseed.p;
        }
        arg[p->in_rows].sh[0] = R;
        size_t off = (size_t)s0 * (size_t)B * es;
        int n_alpha = lig ? nl : c->n, n_step = neuron ? c->n : nl;
        for (int k = 0; k < n_alpha; k++) {
            int r = lig ? lr[k] : c->x[k]->ndim, at = p->in_alpha + k;
            arg[at].nd = r;
            for (int d = 0; d < r; d++) arg[at].sh[d] = d ? 1 : R;
            arg[at].dt = c->dt;
            arg[at].dev = (char *)p->alpha.p + off;
        }
        for (int k = 0; k < n_step && !lc; k++) {
            int r = neuron ? c->x[k]->ndim : lr[k], at = p->in_step + k;
            arg[at].nd = r;
            for (int d = 0; d < r; d++) arg[at].sh[d] = d ? 1 : R;
            arg[at].dt = c->dt;
            arg[at].dev = (char *)p->step.p + off;
        }
        for (int k = 0; k < p->n_out; k++) {
            int at = p->in_acc + k;
            if (neuron) {
                arg[at].nd = c->x[k]->ndim;
                memcpy(arg[at].sh, c->x[k]->shape, sizeof arg[0].sh);
            } else {
                arg[at].nd = lv[k].ndim;
                memcpy(arg[at].sh, lv[k].shape, sizeof arg[0].sh);
            }
            arg[at].dt = c->dt;
            arg[at].dev = outp[k] = p->acc[k].p;
            if (v.mode == CX_VSPLIT_PART) { /* the chunk's own sums, from zeros */
                arg[at].dev = as.zero[k].p;
                outp[k] = as.chunk[k].p;
            }
        }
        if (lc) {
            arg[p->in_cur].sh[0] = arg[p->in_next].sh[0] = arg[p->in_pair].sh[0] = R - B;
            arg[p->in_cur].dev = p->cur.p;
            arg[p->in_next].dev = p->next.p;
            arg[p->in_pair].dev = p->pair.p;
        }
        cx_job j = cx_job_for(e, p->g, p->consts);
        j.share_arena = true; /* the chunks run one after the other */
        j.n_in = p->n_in;
        j.in = arg;
        j.n_out = p->n_out;
        j.outs = p->outs;
        j.out_dev = outp;
        st = cx_run(&j);
        if (st == CATTR_OK && v.mode == CX_VSPLIT_PART) st = cx_acc_split_chunk(e, &v, &as, p->consts, q, NULL, vals, 0);
        if (st == CATTR_OK) st = cx_chunk_done(&e->p, lc ? s1 - 1 : s1, lc ? npts - 1 : npts);
        s0 = lc ? s1 - 1 : s1;
    }
    st = cx_vsplit_end(&v, st);
    cx_acc_split_free(&as);
    free(vals);
    for (int k = 0; st == CATTR_OK && k < p->n_out; k++) { /* the attributions, down once */
        attr[k] = neuron ? cx_tensor_alloc(c->dt, c->x[k]->ndim, c->x[k]->shape) : cx_tensor_alloc(c->dt, lv[k].ndim, lv[k].shape);
        if (!attr[k]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else st = cx_buf_get(&p->acc[k], 0, attr[k]->data, NULL, (size_t)attr[k]->numel * es);
    }
    free(alphas);
    free(steps);
    free(ib);
    free(ns.sel);
    cattr_tensor_free(al);
    cattr_tensor_free(stp);
    cattr_tensor_free(seed);
    cattr_tensor_free(nseed);
    if (st != CATTR_OK) {
        for (int k = 0; p && k < p->n_out; k++) {
            cattr_tensor_free(attr[k]);
            attr[k] = NULL;
        }
        return st;
    }
    if (!neuron) c->n_out = nl;
    return CATTR_OK;
}

/* Convergence delta of layer attributions against the input-space endpoints (§1.11): the attributions' sums on the
 * backend, from the path's accumulators (lpath_run leaves them there). */
static cattr_status layer_delta(cattr_explainer *e, cx_call *c, cattr_tensor *const *attr, int n_attr,
                                cattr_tensor **delta) {
    lstate *s = e->method_state;
    void *dev[CATTR_MAX_OUTPUTS];
    for (int k = 0; k < n_attr; k++) dev[k] = s->path->acc[k].p;
    double *sel = malloc((size_t)(2 * c->B + 1) * sizeof *sel);
    if (!sel) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_status st = cx_delta_forward(e, c, c->base, sel);
    if (st == CATTR_OK) st = cx_delta_dev(e, c, n_attr, attr, dev, sel, delta);
    free(sel);
    return st;
}

cattr_status cx_lg_internal_influence(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    return lpath_run(e, c, PK_II, attr);
}

cattr_status cx_lg_layer_conductance(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    CX_CHECK(lpath_run(e, c, PK_LC, attr));
    if (delta && e->p.return_convergence_delta) CX_CHECK(layer_delta(e, c, attr, c->n_out, delta));
    return CATTR_OK;
}

cattr_status cx_lg_neuron_integrated_gradients(cattr_explainer *e, cx_call *c, cattr_tensor **attr,
                                                cattr_tensor **delta) {
    (void)delta;
    return lpath_run(e, c, PK_NIG, attr);
}

cattr_status cx_lg_neuron_conductance(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    return lpath_run(e, c, PK_NC, attr);
}

cattr_status cx_lg_layer_integrated_gradients(cattr_explainer *e, cx_call *c, cattr_tensor **attr,
                                               cattr_tensor **delta) {
    CX_CHECK(lpath_run(e, c, PK_LIG, attr));
    if (delta && e->p.return_convergence_delta) CX_CHECK(layer_delta(e, c, attr, c->n_out, delta));
    return CATTR_OK;
}
