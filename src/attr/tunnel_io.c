/* tunnel_io.c - the noise tunnel around a method that runs whole on each partition of the samples: IntegratedGradients,
 * DeepLift, LRP, the perturbation methods, the layer and neuron methods, GuidedGradCam, DeepLiftShap, GradientShap.
 * The noisy inputs and the sums live on the backend (the state of tunnel_dev.c, in e->tunnel_io). */
#include "attr/internal.h"
#include "attr/noise_internal.h"

#include <stdlib.h>
#include <string.h>

/* The DEV_IO graphs (cx_nt_run_tunnel_io), planned apart (cx_nt_io_build,
 * io_acc_build):
 *   noisy inputs  (g) inputs x_i [B, ...], rows [R], noise_i [R, ...]: outs[i] = Gather(x_i, rows) + noise_i
 *   sums          (ag, for the n_acc attributions the method returns) inputs a_k [B, m, per] (a partition's
 *                 attributions), sum_k, sq_k [B, per]: ag_outs[k] = sum_k + TorchSum(a_k, 1),
 *                 ag_outs[n_acc + k] = sq_k + TorchSum(a_k * a_k, 1) (the samples of each example summed in torch's
 *                 order, as Captum's partition sum, then added to the sums of the partitions before) */
cattr_status cx_nt_io_build(dev_tunnel *s) {
    cg_graph *g = s->g = cg_new();
    if (!g) return cx_nt_oom();
    int n = s->n, x[CX_MAX_IN], nz[CX_MAX_IN], bad = 0;
    for (int i = 0; i < n; i++) bad |= (x[i] = cg_add_input(g, "__nt_x")) < 0;
    int rows = cg_add_input(g, "__nt_rows");
    for (int i = 0; i < n; i++) bad |= (nz[i] = cg_add_input(g, "__nt_noise")) < 0;
    s->n_in = 2 * n + 1;
    for (int i = 0; i < n && !bad && rows >= 0; i++) {
        s->outs[i] = cx_emit2(g, CG_ADD, "__nt_noisy", cx_emit2(g, CG_GATHER, "__nt_rows_of", x[i], rows), nz[i]);
        bad |= s->outs[i] < 0;
    }
    return bad || rows < 0 ? cx_nt_oom() : CATTR_OK;
}

/* The sums graph of DEV_IO for n_acc attributions of these ranks (rebuilt, with the finishing graph, when they
 * change). */
static cattr_status io_acc_build(dev_tunnel *s, int n_acc, const int *acc_nd) {
    bool same = s->ag && s->n_acc == n_acc;
    for (int k = 0; same && k < n_acc; k++) same = s->acc_nd[k] == acc_nd[k];
    if (same) return CATTR_OK;
    cg_free(s->ag);
    cg_free(s->fin_g);
    s->fin_g = NULL;
    s->fin_type = -1;
    s->n_acc = n_acc;
    for (int k = 0; k < n_acc; k++) s->acc_nd[k] = acc_nd[k];
    cg_graph *g = s->ag = cg_new();
    if (!g) return cx_nt_oom();
    int a[CX_MAX_IN], su[CX_MAX_IN], sq[CX_MAX_IN], bad = 0;
    for (int k = 0; k < n_acc; k++) bad |= (a[k] = cg_add_input(g, "__nt_attr")) < 0;
    for (int k = 0; k < n_acc; k++) bad |= (su[k] = cg_add_input(g, "__nt_sum")) < 0;
    for (int k = 0; k < n_acc; k++) bad |= (sq[k] = cg_add_input(g, "__nt_sq")) < 0;
    cg_attrs ax = cg_attrs_default();
    ax.n_ints = 1;
    ax.ints[0] = 1;
    for (int k = 0; k < n_acc && !bad; k++) {
        int ts = cg_emit(g, CG_TORCH_SUM, "__nt_sample_sum", (int[]){a[k]}, 1, &ax);
        int a2 = cx_emit2(g, CG_MUL, "__nt_square", a[k], a[k]);
        int ts2 = a2 < 0 ? -1 : cg_emit(g, CG_TORCH_SUM, "__nt_sample_sum_sq", (int[]){a2}, 1, &ax);
        s->ag_outs[k] = cx_emit2(g, CG_ADD, "__nt_sum_out", su[k], ts);
        s->ag_outs[n_acc + k] = cx_emit2(g, CG_ADD, "__nt_sq_out", sq[k], ts2);
        bad |= s->ag_outs[k] < 0 || s->ag_outs[n_acc + k] < 0;
    }
    return bad ? cx_nt_oom() : CATTR_OK;
}

/* Whether the explainer's method takes its inputs from and leaves its attributions in backend memory (cx_call's x_dev
 * and attr_dev) for call c: IntegratedGradients, DeepLift and LRP when no convergence delta is wanted (their deltas
 * read host inputs), and FeatureAblation (which has none) with a target (its backend path). */
bool cx_nt_takes_dev_io(const cattr_explainer *e, const cx_call *c) {
    const cx_method *m = e->method;
    if (m == &cx_method_integrated_gradients || m == &cx_method_deeplift || m == &cx_method_lrp) return true;
    /* the perturbation methods whose states and samples are made on the backend from backend inputs, with a target
     * (one attribution per input element) */
    bool perturb = m == &cx_method_feature_ablation || m == &cx_method_occlusion ||
                   m == &cx_method_shapley_value_sampling || m == &cx_method_shapley_values ||
                   m == &cx_method_kernel_shap || m == &cx_method_lime;
    return perturb && c->target && c->target->kind != CATTR_TARGET_NONE && !e->p.return_coefficients;
}

/* The sums of the n_acc attributions of these shapes, zeroed (with their graph, io_acc_build). */
static cattr_status io_acc_setup(cattr_explainer *e, dev_tunnel *s, const cx_call *c, int n_acc, const int *nd,
                                 const int64_t (*sh)[CATTR_MAX_DIMS]) {
    CX_CHECK(io_acc_build(s, n_acc, nd));
    size_t es = cattr_dtype_size(c->dt);
    for (int k = 0; k < n_acc; k++) {
        memcpy(s->acc_sh[k], sh[k], sizeof s->acc_sh[k]);
        size_t bytes = (size_t)cx_numel(nd[k], sh[k]) * es;
        CX_CHECK(cx_buf_fit(e->be, &s->sum[k], bytes, NULL, true));
        CX_CHECK(cx_buf_fit(e->be, &s->sq[k], bytes, NULL, true));
    }
    return CATTR_OK;
}

/* The tunnel around a method that runs whole on each partition of the samples (IntegratedGradients, DeepLift, the
 * perturbation methods, the layer and neuron methods, ...). Per partition: the noisy inputs are made on the backend
 * (Gather(x, rows) + the noise drawn there, cx_nt_io_build) and left there for a method that cx_nt_takes_dev_io, or
 * brought to the host for the others; the method runs on them (its baselines and additional inputs as Captum's derived
 * call), and its attributions (left on the backend, or uploaded) are added to the sums there (io_acc_build); the
 * result comes down once (cx_nt_finish), the method's convergence deltas (B per sample) once per partition. A call
 * split into parts (split.c): the partitions are the units, a unit's values its sums from zeros (cx_acc_split) and
 * then whether it has deltas and its B x bs delta slots; combining adds the sums in partition order. A split call
 * needs attributions of the inputs' shapes (what every rank knows before running). */
cattr_status cx_nt_run_tunnel_io(cattr_explainer *e, cx_call *c, const tunnel *t, cattr_tensor **attr_out,
                                  cattr_tensor **delta_out) {
    int64_t bs = t->batch > 0 && t->batch < t->n ? t->batch : t->n;
    int64_t full = t->n / bs, rem = t->n - full * bs, B = c->B;
    int n_parts = (int)(full + (rem > 0)), n = c->n;
    size_t es = cattr_dtype_size(c->dt);
    bool dev_io = cx_nt_takes_dev_io(e, c), splitting = e->split.n_parts > 0 || e->split.n_comb > 0;
    if (splitting && c->user && c->user->n_draws > 0)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "a noise tunnel with explicit random draws (a replay) is not split into "
                       "parts: its draws are consumed in order");
    dev_tunnel *s = NULL;
    int64_t *idx[CX_MAX_IN] = {0}, *ib = malloc((size_t)(B * bs + 1) * sizeof *ib);
    cx_buf nx[CX_MAX_IN], at[CX_MAX_IN];
    memset(nx, 0, sizeof nx);
    memset(at, 0, sizeof at);
    cattr_tensor **deltas = calloc((size_t)n_parts + 1, sizeof *deltas);
    cattr_status st = ib && deltas ? cx_nt_state(e, c, DEV_IO, NULL, 0, NULL, &s) : cx_nt_oom();
    for (int i = 0; i < n && st == CATTR_OK; i++)
        st = cx_buf_fit(e->be, &s->x[i], (size_t)c->x[i]->numel * es, c->x[i]->data, false);
    /* the attributions summed: the inputs' shapes where known before running (a method that leaves them on the
     * backend, a split call), else those of the first partition's */
    bool acc_known = dev_io || splitting;
    int acc_nd[CX_MAX_IN], nd2[2 * CX_MAX_IN];
    int64_t acc_sh[CX_MAX_IN][CATTR_MAX_DIMS], sh2[2 * CX_MAX_IN][CATTR_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        acc_nd[i] = c->x[i]->ndim;
        memcpy(acc_sh[i], c->x[i]->shape, sizeof acc_sh[i]);
    }
    if (st == CATTR_OK && acc_known) st = io_acc_setup(e, s, c, n, acc_nd, (const int64_t(*)[CATTR_MAX_DIMS])acc_sh);
    for (int k = 0; k < 2 * n; k++) {
        nd2[k] = acc_nd[k % n];
        memcpy(sh2[k], acc_sh[k % n], sizeof sh2[k]);
    }
    cx_vsplit v;
    cx_acc_split as;
    memset(&v, 0, sizeof v);
    memset(&as, 0, sizeof as);
    double *vals = NULL;
    int64_t acc_w = cx_acc_split_width(2 * n, nd2, (const int64_t(*)[CATTR_MAX_DIMS])sh2), width = acc_w + 1 + B * bs;
    if (st == CATTR_OK) st = cx_vsplit_begin(e, c, n_parts, 1, width, &v);
    if (st == CATTR_OK) st = cx_acc_split_init(e, &v, 2 * n, nd2, (const int64_t(*)[CATTR_MAX_DIMS])sh2, c->dt, &as);
    if (st == CATTR_OK && v.mode != CX_VSPLIT_NONE && !(vals = calloc((size_t)width + 1, sizeof *vals))) st = cx_nt_oom();
    if (st == CATTR_OK) st = cx_nt_draw_first(e, c, t, bs, idx);
    for (int64_t p = 0; p < n_parts && st == CATTR_OK; p++) {
        part_info pi = {p < full ? bs : rem, p * bs, (uint64_t)p};
        int64_t m = pi.m, R = B * m;
        bool redraw = p < full ? t->split : true;
        if (!cx_vsplit_mine(&v, p)) { /* another part's partition; combining: its sums added, its deltas taken */
            if (v.mode != CX_VSPLIT_COMBINE) continue;
            void *accs[2 * CX_MAX_IN];
            for (int k = 0; k < n; k++) accs[k] = s->sum[k].p, accs[n + k] = s->sq[k].p;
            st = cx_acc_split_chunk(e, &v, &as, s->consts, p, accs, vals, 0);
            if (st == CATTR_OK && vals[acc_w] != 0 && delta_out) {
                if (!(deltas[p] = cx_tensor_alloc(c->dt, 1, &R))) st = cx_nt_oom();
                for (int64_t r = 0; r < R && st == CATTR_OK; r++) cx_tensor_set(deltas[p], r, vals[acc_w + 1 + r]);
            }
            continue;
        }
        /* draws in Captum's order: the noise of each input, then the remainder's baselines */
        for (int i = 0; i < n && st == CATTR_OK; i++) st = cx_nt_noise_on_backend(e, s, c, t, i, m, pi.j0);
        if (redraw && st == CATTR_OK) st = cx_nt_draw_again(e, c, t, &pi, idx);
        for (int64_t r = 0; r < R; r++) ib[r] = r / m;
        if (st == CATTR_OK) st = cx_buf_fit(e->be, &s->rows, (size_t)R * sizeof *ib, ib, false);
        /* the noisy inputs: on the backend for the method, or on the host (hx) */
        cattr_tensor *hx[CX_MAX_IN] = {0};
        cx_arg arg[3 * CX_MAX_IN + 1];
        void *out[2 * CX_MAX_IN] = {0}, *oh[CX_MAX_IN] = {0};
        for (int i = 0; i < n && st == CATTR_OK; i++) {
            arg[i] = cx_arg_dev(c->x[i], s->x[i].p);
            arg[i].dt = c->dt;
            arg[n + 1 + i] = arg[i];
            arg[n + 1 + i].sh[0] = R;
            arg[n + 1 + i].dev = s->noise[i].p;
            int64_t per = cx_nt_per_example(c, c->x[i]);
            if (dev_io) {
                st = cx_buf_fit(e->be, &nx[i], (size_t)(R * per) * es, NULL, false);
                if (st == CATTR_OK) st = cx_buf_fit(e->be, &at[i], (size_t)(R * per) * es, NULL, false);
                out[i] = nx[i].p;
            } else if (!(hx[i] = cx_nt_alloc_rows(c->x[i], c->dt, R))) {
                st = cx_nt_oom();
            } else {
                oh[i] = hx[i]->data;
            }
        }
        cx_arg rows = {.nd = 1, .sh = {R}, .dt = CATTR_INT64, .dev = s->rows.p};
        arg[n] = rows;
        cx_job j = cx_job_for(e, s->g, s->consts);
        j.share_arena = true;
        j.n_in = 2 * n + 1;
        j.in = arg;
        j.n_out = n;
        j.outs = s->outs;
        j.out_dev = dev_io ? out : NULL;
        j.out_host = dev_io ? NULL : oh;
        if (st == CATTR_OK) st = cx_run(&j);
        /* the method on them: its attributions left in at (dev_io; the host inputs hold NaN, never read), or on the
         * host */
        derived d;
        cattr_tensor *attr[CX_MAX_IN] = {0};
        if (st == CATTR_OK) st = cx_nt_derived_init(c, m, &d);
        else memset(&d, 0, sizeof d);
        for (int i = 0; i < n && st == CATTR_OK; i++) {
            if (!dev_io) {
                d.c.x[i] = hx[i];
                hx[i] = NULL;
            } else if (!(d.c.x[i] = cx_nt_alloc_rows(c->x[i], c->dt, R))) {
                st = cx_nt_oom();
            } else {
                memset(d.c.x[i]->data, 0xff, (size_t)d.c.x[i]->numel * es); /* all-ones bits: NaN in either dtype */
                d.c.x_dev[i] = nx[i].p;
                d.c.attr_dev[i] = at[i].p;
            }
            d.in[i] = d.c.x[i];
        }
        for (int i = 0; i < n; i++) cattr_tensor_free(hx[i]);
        for (int i = 0; i < n && st == CATTR_OK; i++) st = cx_nt_derived_baseline(c, t, i, m, idx[i], &d);
        if (st == CATTR_OK) {
            struct cx_split saved = e->split; /* the wrapped method runs whole */
            memset(&e->split, 0, sizeof e->split);
            d.c.next_draw = c->next_draw;
            bool want = delta_out || (v.mode == CX_VSPLIT_PART && e->p.return_convergence_delta);
            st = t->inner(e, &d.c, &pi, attr, want ? &deltas[p] : NULL);
            c->next_draw = d.c.next_draw;
            e->split = saved;
        }
        /* what it returned: the attributions of the inputs (dev_io: in at unless it finished on the host), or the
         * first partition's tell what is summed */
        int got = 0;
        while (got < CX_MAX_IN && attr[got]) got++;
        if (st == CATTR_OK && !acc_known) {
            int nd[CX_MAX_IN];
            int64_t sh[CX_MAX_IN][CATTR_MAX_DIMS];
            for (int k = 0; k < got && st == CATTR_OK; k++) {
                if (attr[k]->ndim < 1 || attr[k]->shape[0] % m != 0 || attr[k]->dtype != c->dt)
                    st = cx_fail(CATTR_ERR_SHAPE, "the wrapped method's attribution %d has %lld rows, not a multiple "
                                 "of the %lld samples", k, (long long)(attr[k]->ndim ? attr[k]->shape[0] : 0),
                                 (long long)m);
                nd[k] = attr[k]->ndim;
                memcpy(sh[k], attr[k]->shape, sizeof sh[k]);
                sh[k][0] /= m;
            }
            if (st == CATTR_OK && got == 0) st = cx_fail(CATTR_ERR_INTERNAL, "the wrapped method returned no attribution");
            if (st == CATTR_OK) st = io_acc_setup(e, s, c, got, nd, (const int64_t(*)[CATTR_MAX_DIMS])sh);
            acc_known = st == CATTR_OK;
            if (st == CATTR_OK && d.c.n_out > 0) c->n_out = d.c.n_out; /* a layer or neuron method's outputs */
        }
        for (int k = 0; k < s->n_acc && st == CATTR_OK; k++) {
            int64_t numel = cx_numel(s->acc_nd[k], s->acc_sh[k]) * m;
            if (!attr[k]) {
                if (!dev_io || k >= n) st = cx_fail(CATTR_ERR_INTERNAL, "the wrapped method returned no attribution %d", k);
                continue; /* left in at[k] */
            }
            if (attr[k]->numel != numel || attr[k]->dtype != c->dt)
                st = splitting ? cx_fail(CATTR_ERR_UNSUPPORTED, "a split noise tunnel needs attributions of the inputs' "
                                         "shapes and dtype (attribution %d)", k)
                               : cx_fail(CATTR_ERR_SHAPE, "the wrapped method's attribution %d changed shape between "
                                         "partitions", k);
            if (st == CATTR_OK) st = cx_buf_fit(e->be, &at[k], (size_t)numel * es, attr[k]->data, false);
        }
        if (st == CATTR_OK && got > s->n_acc) st = cx_fail(CATTR_ERR_INTERNAL, "the wrapped method returned %d "
                                                           "attributions, %d before", got, s->n_acc);
        for (int k = 0; k < CX_MAX_IN; k++) cattr_tensor_free(attr[k]);
        cx_nt_derived_free(&d);
        /* the partition's attributions added into the sums (a part: its own sums, from zeros): a_k read as
         * [B, m, per], the sums as [B, per] */
        int na = s->n_acc;
        cx_arg aa[3 * CX_MAX_IN];
        void *ao[2 * CX_MAX_IN];
        for (int k = 0; k < na && st == CATTR_OK; k++) {
            int64_t bsz = s->acc_sh[k][0], per = bsz ? cx_numel(s->acc_nd[k], s->acc_sh[k]) / bsz : 0;
            cx_arg a = {.nd = 3, .sh = {bsz, m, per}, .dt = c->dt, .dev = at[k].p};
            cx_arg su = {.nd = 2, .sh = {bsz, per}, .dt = c->dt, .dev = s->sum[k].p};
            cx_arg sq = su;
            sq.dev = s->sq[k].p;
            ao[k] = s->sum[k].p;
            ao[na + k] = s->sq[k].p;
            if (v.mode == CX_VSPLIT_PART) {
                su.dev = as.zero[k].p;
                sq.dev = as.zero[na + k].p;
                ao[k] = as.chunk[k].p;
                ao[na + k] = as.chunk[na + k].p;
            }
            aa[k] = a;
            aa[na + k] = su;
            aa[2 * na + k] = sq;
        }
        cx_job ja = cx_job_for(e, s->ag, s->consts);
        ja.share_arena = true;
        ja.n_in = 3 * na;
        ja.in = aa;
        ja.n_out = 2 * na;
        ja.outs = s->ag_outs;
        ja.out_dev = ao;
        if (st == CATTR_OK) st = cx_run(&ja);
        if (st == CATTR_OK && v.mode == CX_VSPLIT_PART) { /* the part's values: its sums, then its deltas */
            const cattr_tensor *dl = deltas[p];
            if (dl && dl->numel != R)
                st = cx_fail(CATTR_ERR_UNSUPPORTED, "a split noise tunnel needs one convergence delta per sample");
            vals[acc_w] = dl != NULL;
            for (int64_t r = 0; dl && r < R && st == CATTR_OK; r++) vals[acc_w + 1 + r] = cx_tensor_get(dl, r);
            if (st == CATTR_OK) st = cx_acc_split_chunk(e, &v, &as, s->consts, p, NULL, vals, 0);
        }
    }
    st = cx_vsplit_end(&v, st);
    cx_acc_split_free(&as);
    free(vals);
    bool part = v.mode == CX_VSPLIT_PART; /* a part: its bytes are the result */
    if (st == CATTR_OK && !part) st = cx_nt_finish(e, s, c, t, attr_out);
    if (st == CATTR_OK && delta_out && !part) st = cx_nt_concat_deltas(t, B, bs, deltas, n_parts, delta_out);
    if (st != CATTR_OK)
        for (int i = 0; i < CX_MAX_IN; i++) {
            cattr_tensor_free(attr_out[i]);
            attr_out[i] = NULL;
        }
    for (int i = 0; i < CX_MAX_IN; i++) {
        free(idx[i]);
        cx_buf_free(&nx[i]);
        cx_buf_free(&at[i]);
    }
    for (int p = 0; deltas && p < n_parts; p++) cattr_tensor_free(deltas[p]);
    free(deltas);
    free(ib);
    return st;
}
