/* tunnel_dev.c - the noise tunnel on the backend: around the one-pass gradient methods and for GradientShap, the
 * whole tunnel as one derived graph per chunk of rows (noise, baselines and coefficients made on the backend or
 * uploaded), the sums and squares accumulated there; and its split into parts. The host tunnel is noise.c's. */
#include "attr/noise_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the tunnel on the backend ------------------------------------------------------------------------------
 * Around the gradient methods whose attribution is one gradient pass (Saliency, InputXGradient, GuidedBackprop,
 * Deconvolution) and for GradientShap, the whole tunnel is one derived graph: for a chunk of R rows of a partition
 * (row r = b*m + j, sample j of example b; rows[r] = b):
 *   inputs   x_i [B, ...], the additional inputs a_j [B, ...], seed [B, out...] (the target mask of one block),
 *            rows [R] (int64), noise_i [R, ...] (in the compute dtype), sum_i, sq_i [B, ...];
 *            GradientShap also src_i [n_ref, ...] (the baseline rows), bidx_i [R] (int64: each row's baseline row),
 *            coef_i, omc_i [R, 1, ...] (its coefficient c and 1 - c per row)
 *   prefix   xn_i = Gather(x_i, rows) + noise_i;  GradientShap: bg_i = Gather(src_i, bidx_i),
 *            p_i = c * xn_i + (1 - c) * bg_i  (Captum's order), else p_i = xn_i
 *   model    on p_i and Gather(a_j, rows), its gradient g_i seeded with Gather(seed, rows)
 *   suffix   a_i = g_i, |g_i| (Saliency, abs), g_i * xn_i (InputXGradient), (xn_i - bg_i) * g_i (GradientShap)
 *            sum_out_i = sum_i + GatherGrad(a_i, rows, x_i),  sq_out_i = sq_i + GatherGrad(a_i * a_i, rows, x_i)
 *            GradientShap's delta: rowsum_i = the sum of a_i over each row, and the model at xn_i and at bg_i
 * The noise is drawn on the backend into noise_i per partition (noise_on_backend: NormalNoise from each row's
 * generator stream and first block; a recorded run's noise is uploaded), the other draws (baseline rows,
 * coefficients) are made on the host and uploaded once per partition; the accumulators stay on the backend from chunk to chunk and partition to partition; a last small graph makes
 * smoothgrad (sum / n), smoothgrad_sq (sq / n) or vargrad (sq / n - (sum / n)^2), and the attributions come down
 * once. Captum accumulates each partition's sum in one reduction; this adds the rows of a chunk in row order, which
 * changes only the rounding. */



/* graph-input positions */
#define DT_X(i) (i)
#define DT_ADD(j) (s->n + (j))
#define DT_SEED (s->n + s->n_add)
#define DT_ROWS (DT_SEED + 1)
#define DT_NOISE(i) (DT_ROWS + 1 + (i))
#define DT_SUM(k) (DT_ROWS + 1 + s->n + (k))
#define DT_SQ(k) (DT_ROWS + 1 + s->n + s->n_acc + (k))
#define DT_GS0 (DT_ROWS + 1 + s->n + 2 * s->n_acc)
#define DT_SRC(i) (DT_GS0 + (i))
#define DT_BIDX(i) (DT_GS0 + s->n + (i))
#define DT_COEF(i) (DT_GS0 + 2 * s->n + (i))
#define DT_OMC(i) (DT_GS0 + 3 * s->n + (i))
#define DT_MAX_IN (8 * CX_MAX_IN + 2)
/* output positions in outs[] */
#define DO_SUM(k) (k)
#define DO_SQ(k) (s->n_acc + (k))
#define DO_ROWSUM(k) (2 * s->n_acc + (k))
#define DO_FX (3 * s->n_acc)
#define DO_FB (3 * s->n_acc + 1)

static void dev_tunnel_free(dev_tunnel *s) {
    if (!s) return;
    cg_free(s->ng);
    cg_free(s->ag);
    cx_buf *bufs[] = {s->x, s->add, s->noise, s->sum, s->sq, s->src, s->bidx, s->coef, s->omc};
    for (size_t k = 0; k < sizeof bufs / sizeof *bufs; k++)
        for (int i = 0; i < CX_MAX_IN; i++) cx_buf_free(&bufs[k][i]);
    cx_buf_free(&s->seed);
    cx_buf_free(&s->rows);
    cx_consts_free(s->consts);
    cg_free(s->g);
    cg_free(s->fin_g);
    free(s);
}

void cx_tunnel_release(cattr_explainer *e) {
    dev_tunnel_free(e->tunnel_state);
    e->tunnel_state = NULL;
    dev_tunnel_free(e->tunnel_io);
    e->tunnel_io = NULL;
}


static cattr_status dev_build(cattr_explainer *e, dev_tunnel *s) {
    const cg_graph *m = e->m->g;
    bool layer = s->kind == DEV_LAYER_GSHAP, gs = s->kind == DEV_GSHAP || layer;
    cg_graph *g = NULL;
    int *map = NULL, *map_x = NULL, *map_b = NULL;
    CX_CHECK(cx_derive_new(m, &g, &map));
    s->n_in = DT_GS0 + (gs ? 4 * s->n : 0);
    int v[DT_MAX_IN], bad = 0;
    for (int k = 0; k < DT_MAX_IN; k++) v[k] = -1;
    for (int k = 0; k < s->n_in; k++) {
        char nm[32];
        snprintf(nm, sizeof nm, "__nt_in%d", k);
        bad |= (v[k] = cg_add_input(g, nm)) < 0;
    }
    int rows = v[DT_ROWS], xn[CX_MAX_IN], bg[CX_MAX_IN], in_map[2 * CX_MAX_IN];
    for (int i = 0; i < s->n && !bad; i++) {
        xn[i] = cx_emit2(g, CG_ADD, "__nt_noisy", cx_emit2(g, CG_GATHER, "__nt_x_rows", v[DT_X(i)], rows), v[DT_NOISE(i)]);
        in_map[i] = xn[i];
        if (gs) {
            bg[i] = cx_emit2(g, CG_GATHER, "__nt_baseline_rows", v[DT_SRC(i)], v[DT_BIDX(i)]);
            in_map[i] = cx_emit2(g, CG_ADD, "__nt_point", cx_emit2(g, CG_MUL, "__nt_c_x", v[DT_COEF(i)], xn[i]),
                              cx_emit2(g, CG_MUL, "__nt_omc_b", v[DT_OMC(i)], bg[i]));
        }
        bad |= xn[i] < 0 || in_map[i] < 0;
    }
    for (int j = 0; j < s->n_add && !bad; j++)
        bad |= (in_map[s->n + j] = cx_emit2(g, CG_GATHER, "__nt_add_rows", v[DT_ADD(j)], rows)) < 0;
    cattr_status st = bad ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : CATTR_OK;
    int base = g->n_nodes; /* the model's nodes start here: GuidedBackprop's and Deconvolution's rules key on them */
    if (st == CATTR_OK) st = cx_graph_append_model(g, m, in_map, map);
    int grads[CX_MAX_IN];
    if (st == CATTR_OK) {
        int seed = cx_emit2(g, CG_GATHER, "__nt_seed_rows", v[DT_SEED], rows);
        int wrt[CX_MAX_IN];
        for (int k = 0; k < s->n_acc; k++) wrt[k] = layer ? map[s->lv[k]] : in_map[k];
        st = seed < 0 ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : cx_rules_bind(&e->rules, base);
        if (st == CATTR_OK) st = cg_autodiff(g, map[cx_model_output(e->m)], seed, wrt, s->n_acc, &e->rules, grads);
        cx_rules_bind(&e->rules, 0);
    }
    if (st == CATTR_OK && gs) { /* the model at the noisy inputs and at the baselines: the delta's f, the layer */
        map_x = malloc((size_t)(m->n_vals + 1) * sizeof *map_x);
        map_b = malloc((size_t)(m->n_vals + 1) * sizeof *map_b);
        if (!map_x || !map_b) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK) {
            for (int i = 0; i < s->n; i++) in_map[i] = xn[i];
            st = cx_graph_append_model(g, m, in_map, map_x);
        }
        if (st == CATTR_OK) {
            for (int i = 0; i < s->n; i++) in_map[i] = bg[i];
            st = cx_graph_append_model(g, m, in_map, map_b);
        }
        if (st == CATTR_OK) {
            s->outs[DO_FX] = map_x[cx_model_output(e->m)];
            s->outs[DO_FB] = map_b[cx_model_output(e->m)];
        }
    }
    for (int i = 0; i < s->n_acc && st == CATTR_OK; i++) {
        int a = grads[i];
        if (s->kind == DEV_GRAD_ABS) a = cg_emit(g, CG_ABS, "__nt_abs", &a, 1, NULL);
        else if (s->kind == DEV_GRAD_X) a = cx_emit2(g, CG_MUL, "__nt_times_input", a, xn[i]);
        else if (layer && s->mul)
            a = cx_emit2(g, CG_MUL, "__nt_times_diff", cx_emit2(g, CG_SUB, "__nt_a_minus_a0", map_x[s->lv[i]], map_b[s->lv[i]]), a);
        else if (gs && s->mul) a = cx_emit2(g, CG_MUL, "__nt_times_diff", cx_emit2(g, CG_SUB, "__nt_x_minus_b", xn[i], bg[i]), a);
        int in3[3] = {a, rows, v[DT_SUM(i)]}, sq = cx_emit2(g, CG_MUL, "__nt_square", a, a);
        int su = a < 0 ? -1 : cg_emit(g, CG_GATHER_GRAD, "__nt_sample_sum", in3, 3, NULL);
        in3[0] = sq;
        int ssq = sq < 0 ? -1 : cg_emit(g, CG_GATHER_GRAD, "__nt_sample_sq_sum", in3, 3, NULL);
        s->outs[DO_SUM(i)] = cx_emit2(g, CG_ADD, "__nt_sum_out", v[DT_SUM(i)], su);
        s->outs[DO_SQ(i)] = cx_emit2(g, CG_ADD, "__nt_sq_out", v[DT_SQ(i)], ssq);
        if (gs) { /* each row's sum */
            cg_attrs ra = cg_attrs_default();
            for (int d = 1; d < s->acc_nd[i]; d++) ra.ints[ra.n_ints++] = d;
            s->outs[DO_ROWSUM(i)] = a < 0 ? -1 : ra.n_ints ? cg_emit(g, CG_REDUCE_SUM, "__nt_row_sum", &a, 1, &ra) : a;
        }
        if (s->outs[DO_SUM(i)] < 0 || s->outs[DO_SQ(i)] < 0 || (gs && s->outs[DO_ROWSUM(i)] < 0))
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    free(map);
    free(map_x);
    free(map_b);
    if (st != CATTR_OK) {
        cg_free(g);
        return st;
    }
    s->g = g;
    return CATTR_OK;
}

/* The state for this call (rebuilt when the inputs or the kind change). */
/* The tunnel's state (e->tunnel_state; DEV_IO's in e->tunnel_io, so that a tunnel around GradientShap keeps both). */
cattr_status cx_nt_state(cattr_explainer *e, cx_call *c, int kind, const int *lv, int n_acc, const int *acc_nd,
                              dev_tunnel **out) {
    void **slot = kind == DEV_IO ? &e->tunnel_io : &e->tunnel_state;
    dev_tunnel *s = *slot;
    int mul = e->p.multiply_by_inputs != 0;
    bool same = s && s->n == c->n && s->n_add == c->n_add && s->kind == kind && s->mul == mul &&
                (kind == DEV_IO || s->n_acc == n_acc);
    for (int k = 0; same && kind != DEV_IO && k < n_acc; k++)
        same = s->acc_nd[k] == acc_nd[k] && (!lv || s->lv[k] == lv[k]);
    if (s && !same) {
        dev_tunnel_free(s);
        *slot = s = NULL;
    }
    if (!s) {
        if (!(s = calloc(1, sizeof *s))) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        *slot = s;
        s->kind = kind;
        s->n = c->n;
        s->n_add = c->n_add;
        s->mul = mul;
        s->n_acc = kind == DEV_IO ? 0 : n_acc; /* DEV_IO: set with its sums graph (io_acc_build) */
        for (int k = 0; k < n_acc && kind != DEV_IO; k++) {
            s->acc_nd[k] = acc_nd[k];
            s->lv[k] = lv ? lv[k] : -1;
        }
        s->fin_type = -1;
        cattr_status st = kind == DEV_IO ? cx_nt_io_build(s) : dev_build(e, s);
        if (st == CATTR_OK) st = cx_consts_new(e->be, c->dt, &s->consts);
        if (st != CATTR_OK) {
            dev_tunnel_free(s);
            *slot = NULL;
            return st;
        }
    }
    *out = s;
    return CATTR_OK;
}


/* The recorded noise of input i (draw nt_noise.input<i>) for the B*m rows of a partition, or NULL: the noise is
 * drawn from the generator. */
static cattr_status noise_draw(cx_call *c, int i, int64_t m, const cattr_tensor **d) {
    int64_t n = c->B * m * cx_nt_per_example(c, c->x[i]);
    char role[48];
    snprintf(role, sizeof role, "nt_noise.input%d", i);
    *d = NULL;
    CX_CHECK(cx_next_draw(c, role, NULL, d));
    if (*d && (*d)->numel != n)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explicit draw '%s' has %lld values; %lld are needed", role,
                       (long long)(*d)->numel, (long long)n);
    return CATTR_OK;
}

/* Row r = b*m + j (sample j0 + j of example b) of input i's noise: generator stream of example b, first block
 * (j0 + j) * per, one normal per block (the NormalNoise op's coordinates). */
static void noise_coords(const cx_call *c, uint64_t tag, int i, int64_t m, int64_t j0, int64_t *stream,
                         int64_t *first) {
    int64_t per = cx_nt_per_example(c, c->x[i]);
    for (int64_t r = 0; r < c->B * m; r++) {
        stream[r] = (int64_t)cx_nt_stream_id(tag, DRAW_NOISE, (uint64_t)i, 0, r / m);
        first[r] = (j0 + r % m) * per;
    }
}

/* Recorded noise d of input i (nt_noise.input<i>) for B*m rows, as Captum's float32 noise, in the compute dtype into
 * host buffer out [B*m*per]. */
static void noise_fill(const cx_call *c, int i, int64_t m, const cattr_tensor *d, void *out) {
    int64_t cnt = c->B * m * cx_nt_per_example(c, c->x[i]);
    for (int64_t k = 0; k < cnt; k++) {
        double v = (double)(float)cx_tensor_get(d, k);
        if (c->dt == CATTR_FLOAT32) ((float *)out)[k] = (float)v;
        else ((double *)out)[k] = v;
    }
}

/* Input i's noise for a partition's B*m rows into s->noise[i] on the backend: a recorded draw goes up; otherwise a
 * NormalNoise plan draws it there from each row's stream and first block (2 * B*m integers up instead of the
 * noise's B*m*per values). */
cattr_status cx_nt_noise_on_backend(cattr_explainer *e, dev_tunnel *s, cx_call *c, const tunnel *t, int i, int64_t m,
                                     int64_t j0) {
    int64_t R = c->B * m, per = cx_nt_per_example(c, c->x[i]);
    size_t bytes = (size_t)(R * per) * cattr_dtype_size(c->dt);
    const cattr_tensor *d = NULL;
    CX_CHECK(noise_draw(c, i, m, &d));
    if (d) { /* the recorded values */
        void *host = malloc(bytes + 1);
        if (!host) return cx_nt_oom();
        noise_fill(c, i, m, d, host);
        cattr_status st = cx_buf_fit(e->be, &s->noise[i], bytes, host, false);
        free(host);
        return st;
    }
    bool same = s->ng && s->ng_n == c->n && s->ng_seed == e->p.seed && s->ng_sd == t->stdev;
    for (int k = 0; same && k < c->n; k++)
        same = s->ng_nd[k] == c->x[k]->ndim - 1 &&
               memcmp(s->ng_row[k], c->x[k]->shape + 1, (size_t)s->ng_nd[k] * sizeof(int64_t)) == 0;
    if (!same) {
        cg_free(s->ng);
        s->ng = cg_new();
        if (!s->ng) return cx_nt_oom();
        for (int k = 0; k < c->n; k++) {
            cg_attrs a = cg_attrs_default();
            a.n_ints = c->x[k]->ndim - 1;
            memcpy(a.ints, c->x[k]->shape + 1, (size_t)a.n_ints * sizeof(int64_t));
            a.axis = (int64_t)e->p.seed;
            a.alpha = (double)(float)t->stdev;
            int sv = cg_add_input(s->ng, "__nt_noise_stream"), fv = cg_add_input(s->ng, "__nt_noise_first");
            s->ng_outs[k] = cg_emit(s->ng, CG_NORMAL_NOISE, "__nt_noise", (int[]){sv, fv}, 2, &a);
            if (s->ng_outs[k] < 0) return cx_nt_oom();
            s->ng_nd[k] = a.n_ints;
            memcpy(s->ng_row[k], a.ints, (size_t)a.n_ints * sizeof(int64_t));
        }
        s->ng_n = c->n;
        s->ng_seed = e->p.seed;
        s->ng_sd = t->stdev;
    }
    cx_arg arg[2 * CX_MAX_IN];
    for (int k = 0; k < 2 * c->n; k++) { /* the other inputs' coordinates: not read */
        cx_arg a = {.nd = 1, .sh = {R}, .dt = CATTR_INT64};
        arg[k] = a;
    }
    int64_t *coords = malloc((size_t)(2 * R + 1) * sizeof *coords);
    if (!coords) return cx_nt_oom();
    noise_coords(c, t->tag, i, m, j0, coords, coords + R);
    arg[2 * i].host = coords;
    arg[2 * i + 1].host = coords + R;
    cattr_status st = cx_buf_fit(e->be, &s->noise[i], bytes, NULL, false);
    void *out[1] = {s->noise[i].p};
    cx_job j = cx_job_for(e, s->ng, s->consts);
    j.n_in = 2 * c->n;
    j.in = arg;
    j.n_out = 1;
    j.outs = &s->ng_outs[i];
    j.out_dev = out;
    if (st == CATTR_OK) st = cx_run(&j);
    free(coords);
    return st;
}

/* GradientShap's coefficient of each of the B*m rows (gradshap_coeff, or the generator: row b*m + j is sample
 * j0 + j of example b), in the compute dtype. */
static cattr_status gs_coefs(cattr_explainer *e, cx_call *c, int64_t m, int64_t j0, double *coef) {
    int64_t R = c->B * m;
    const cattr_tensor *d = NULL;
    CX_CHECK(cx_next_draw(c, "gradshap_coeff", NULL, &d));
    if (d && d->numel != R)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explicit draw 'gradshap_coeff' has %lld values; %lld are needed",
                       (long long)d->numel, (long long)R);
    for (int64_t r = 0; r < R; r++) {
        double v;
        if (d) {
            v = cx_tensor_get(d, r);
        } else {
            cx_rng g;
            cx_rng_init(&g, e->p.seed, cx_nt_stream_id(TAG_GRADIENT_SHAP, DRAW_COEFF, 0, 0, r / m));
            g.index = (uint64_t)(j0 + r % m);
            v = cx_rng_uniform(&g);
        }
        coef[r] = cx_rnd(c->dt, v); /* numpy's float64 draw converted to the input dtype */
    }
    return CATTR_OK;
}

/* Each row's baseline row in input i's baseline source (the distribution, or the prepared baselines), as
 * cx_nt_derived_baseline expands them: the drawn rows idx, or the caller's per-example baselines interleaved, a
 * distribution of B*m rows kept, one row repeated. */
static cattr_status baseline_rows(const cx_call *c, int i, int64_t m, const int64_t *idx, int64_t *out) {
    const cattr_tensor *src = c->dist[i] ? c->dist[i] : c->base[i];
    int64_t R = c->B * m, n_src = src ? src->shape[0] : 0;
    if (!src) return cx_fail(CATTR_ERR_INTERNAL, "input %d has no prepared baseline", i);
    for (int64_t r = 0; r < R; r++) {
        if (idx) out[r] = idx[r];
        else if (!c->dist[i] || (n_src == c->B && c->B > 1)) out[r] = r / m;
        else if (n_src == R) out[r] = r;
        else if (n_src == 1) out[r] = 0;
        else
            return cx_fail(CATTR_ERR_SHAPE,
                           "baseline %d is a distribution of %lld rows: give one row, one per example, or draw the "
                           "baselines from the distribution (draw_baseline_from_distrib)",
                           i, (long long)n_src);
    }
    return CATTR_OK;
}

/* Uploads what stays for the whole call: inputs, additional inputs, the seed block, the baseline sources; zeroed
 * sums. */
static cattr_status dev_upload_call(cattr_explainer *e, dev_tunnel *s, cx_call *c, const cattr_tensor *seed) {
    size_t es = cattr_dtype_size(c->dt);
    for (int k = 0; k < s->n_acc; k++) {
        size_t bytes = (size_t)cx_numel(s->acc_nd[k], s->acc_sh[k]) * es;
        CX_CHECK(cx_buf_fit(e->be, &s->sum[k], bytes, NULL, true));
        CX_CHECK(cx_buf_fit(e->be, &s->sq[k], bytes, NULL, true));
    }
    for (int i = 0; i < c->n; i++) {
        size_t bytes = (size_t)c->x[i]->numel * es;
        CX_CHECK(cx_buf_fit(e->be, &s->x[i], bytes, c->x[i]->data, false));
        if (s->kind == DEV_GSHAP || s->kind == DEV_LAYER_GSHAP) {
            const cattr_tensor *src = c->dist[i] ? c->dist[i] : c->base[i];
            if (!src) return cx_fail(CATTR_ERR_INTERNAL, "input %d has no prepared baseline", i);
            CX_CHECK(cx_buf_fit(e->be, &s->src[i], (size_t)src->numel * es, src->data, false));
        }
    }
    for (int j = 0; j < c->n_add; j++)
        CX_CHECK(cx_buf_fit(e->be, &s->add[j], (size_t)c->add[j]->numel * cattr_dtype_size(c->add[j]->dtype),
                             c->add[j]->data, false));
    return cx_buf_fit(e->be, &s->seed, (size_t)seed->numel * es, seed->data, false);
}

/* Shapes and dtypes of the graph's inputs for a chunk of R rows. */
static void dev_shapes(const dev_tunnel *s, const cx_call *c, const cattr_tensor *seed, int64_t R, cx_arg *arg) {
    memset(arg, 0, (size_t)s->n_in * sizeof *arg);
    for (int k = 0; k < s->n_in; k++) arg[k].dt = c->dt;
    for (int i = 0; i < s->n; i++) {
        const cattr_tensor *x = c->x[i];
        arg[DT_X(i)].nd = arg[DT_NOISE(i)].nd = x->ndim;
        memcpy(arg[DT_X(i)].sh, x->shape, sizeof arg[0].sh);
        memcpy(arg[DT_NOISE(i)].sh, x->shape, sizeof arg[0].sh);
        arg[DT_NOISE(i)].sh[0] = R;
        if (s->kind == DEV_GSHAP || s->kind == DEV_LAYER_GSHAP) {
            const cattr_tensor *src = c->dist[i] ? c->dist[i] : c->base[i];
            arg[DT_SRC(i)].nd = src->ndim;
            memcpy(arg[DT_SRC(i)].sh, src->shape, sizeof arg[0].sh);
            arg[DT_BIDX(i)].nd = 1;
            arg[DT_BIDX(i)].sh[0] = R;
            arg[DT_BIDX(i)].dt = CATTR_INT64;
            arg[DT_COEF(i)].nd = arg[DT_OMC(i)].nd = x->ndim;
            for (int d = 0; d < x->ndim; d++) arg[DT_COEF(i)].sh[d] = arg[DT_OMC(i)].sh[d] = d ? 1 : R;
        }
    }
    for (int k = 0; k < s->n_acc; k++) {
        arg[DT_SUM(k)].nd = arg[DT_SQ(k)].nd = s->acc_nd[k];
        memcpy(arg[DT_SUM(k)].sh, s->acc_sh[k], sizeof arg[0].sh);
        memcpy(arg[DT_SQ(k)].sh, s->acc_sh[k], sizeof arg[0].sh);
    }
    for (int j = 0; j < s->n_add; j++) {
        arg[DT_ADD(j)].nd = c->add[j]->ndim;
        memcpy(arg[DT_ADD(j)].sh, c->add[j]->shape, sizeof arg[0].sh);
        arg[DT_ADD(j)].dt = c->add[j]->dtype;
    }
    arg[DT_SEED].nd = seed->ndim;
    memcpy(arg[DT_SEED].sh, seed->shape, sizeof arg[0].sh);
    arg[DT_ROWS].nd = 1;
    arg[DT_ROWS].sh[0] = R;
    arg[DT_ROWS].dt = CATTR_INT64;
}

/* Rows per chunk from the memory budget (the gradient pass of one row, twice for the tunnel's own values). */
static cattr_status dev_chunk_rows(cattr_explainer *e, cx_call *c, int64_t R, int64_t *out) {
    size_t budget = cx_memory_budget(e), row = 0;
    CX_CHECK(cx_row_bytes(e, c, true, &row));
    size_t k = row ? budget / (2 * row) : (size_t)R;
    if (k < 1) {
        cx_budget_warn(e, "the memory budget (%zu bytes) is below one row (%zu bytes); running one row per pass",
                       budget, 2 * row);
        k = 1;
    }
    *out = k > (size_t)R ? R : (int64_t)k;
    return CATTR_OK;
}

/* One partition of m samples (the first is sample j0): its draws, then its chunks added into the sums; GradientShap's
 * delta of each row into *delta (B*m values) when delta is not NULL. idx[i]: input i's drawn baseline rows or NULL. */
static cattr_status dev_partition(cattr_explainer *e, dev_tunnel *s, cx_call *c, const tunnel *t,
                                  const cattr_tensor *seed, const part_info *pi, bool redraw, int64_t **idx,
                                  int64_t chunk, int64_t *done, cattr_tensor **delta, cx_vsplit *v,
                                  cx_acc_split *as, int64_t *kg, double *vals) {
    int64_t m = pi->m, R = c->B * m, B = c->B;
    size_t es = cattr_dtype_size(c->dt);
    bool gs = s->kind == DEV_GSHAP || s->kind == DEV_LAYER_GSHAP;
    cattr_status st = CATTR_OK;
    void *host = NULL;
    int64_t *ib = malloc((size_t)(R + 1) * sizeof *ib), *tidx = NULL;
    double *coef = NULL;
    if (!ib) return cx_nt_oom();
    /* draws in Captum's order: the noise of each input, the remainder's baselines, the coefficients. A part of a
     * split call that runs none of this partition's chunks (and combining, which runs none) needs no noise; recorded
     * draws are consumed in order all the same */
    bool any_mine = c->user && c->user->n_draws > 0;
    for (int64_t k = *kg; k < *kg + (R + chunk - 1) / chunk && !any_mine; k++) any_mine = cx_vsplit_mine(v, k);
    for (int i = 0; i < c->n && st == CATTR_OK && any_mine; i++) st = cx_nt_noise_on_backend(e, s, c, t, i, m, pi->j0);
    if (gs) {
        if (redraw && st == CATTR_OK) st = cx_nt_draw_again(e, c, t, pi, idx);
        for (int i = 0; i < c->n && st == CATTR_OK; i++) {
            st = baseline_rows(c, i, m, idx[i], ib);
            if (st == CATTR_OK) st = cx_buf_fit(e->be, &s->bidx[i], (size_t)R * sizeof *ib, ib, false);
        }
        coef = malloc((size_t)(2 * R + 1) * sizeof *coef);
        if (st == CATTR_OK) st = coef ? gs_coefs(e, c, m, pi->j0, coef) : cx_nt_oom();
        if (st == CATTR_OK) {
            free(host);
            host = malloc((size_t)R * es + 1);
            if (!host) st = cx_nt_oom();
        }
        for (int pass = 0; pass < 2 && st == CATTR_OK; pass++) { /* c, then 1 - c (rounded as Captum does) */
            for (int64_t r = 0; r < R; r++) {
                double v = pass ? cx_rnd(c->dt, 1.0 - coef[r]) : coef[r];
                if (c->dt == CATTR_FLOAT32) ((float *)host)[r] = (float)v;
                else ((double *)host)[r] = v;
            }
            for (int i = 0; i < c->n && st == CATTR_OK; i++)
                st = cx_buf_fit(e->be, pass ? &s->omc[i] : &s->coef[i], (size_t)R * es, host, false);
        }
    }
    for (int64_t r = 0; r < R; r++) ib[r] = r / m;
    if (st == CATTR_OK) st = cx_buf_fit(e->be, &s->rows, (size_t)R * sizeof *ib, ib, false);
    bool want_delta = gs && delta;
    int64_t per_out = B && seed ? seed->numel / B : 0;
    double *fx = NULL, *fb = NULL, *rsum = NULL;
    if (st == CATTR_OK && want_delta) {
        int64_t len = R;
        *delta = cx_tensor_alloc(c->dt, 1, &len);
        tidx = malloc((size_t)(B + 1) * sizeof *tidx);
        fx = malloc((size_t)(2 * chunk * per_out + chunk + 1) * sizeof *fx);
        if (!*delta || !tidx || !fx) st = cx_nt_oom();
        else {
            fb = fx + chunk * per_out;
            rsum = fb + chunk * per_out;
            cx_target_rows(seed, B, B, tidx);
        }
    }
    for (int64_t r0 = 0; r0 < R && st == CATTR_OK; r0 += chunk, (*kg)++) {
        int64_t r1 = r0 + chunk < R ? r0 + chunk : R, n = r1 - r0;
        bool mine = cx_vsplit_mine(v, *kg);
        if (!mine) { /* another part's chunk; combining: its sums added, its deltas taken */
            if (v->mode == CX_VSPLIT_COMBINE) {
                void *accs[2 * CX_MAX_IN];
                for (int k = 0; k < s->n_acc; k++) accs[k] = s->sum[k].p, accs[s->n_acc + k] = s->sq[k].p;
                st = cx_acc_split_chunk(e, v, as, s->consts, *kg, accs, vals, 0);
                if (st == CATTR_OK && want_delta) {
                    const double *dv = vals + v->n_out - chunk;
                    for (int64_t r = r0; r < r1; r++) cx_tensor_set(*delta, r, dv[r - r0]);
                }
            }
            *done += n;
            if (st == CATTR_OK && v->mode == CX_VSPLIT_COMBINE) st = cx_chunk_done(&e->p, *done / B, t->n);
            continue;
        }
        cx_arg arg[DT_MAX_IN];
        dev_shapes(s, c, seed, n, arg);
        int n_outs = want_delta ? 3 * s->n_acc + 2 : 2 * s->n_acc;
        void *out[3 * CX_MAX_IN + 2] = {0}, *oh[3 * CX_MAX_IN + 2] = {0};
        for (int i = 0; i < s->n; i++) {
            size_t off = (size_t)(r0 * cx_nt_per_example(c, c->x[i])) * es;
            arg[DT_X(i)].dev = s->x[i].p;
            arg[DT_NOISE(i)].dev = (char *)s->noise[i].p + off;
            if (gs) {
                arg[DT_SRC(i)].dev = s->src[i].p;
                arg[DT_BIDX(i)].dev = (char *)s->bidx[i].p + (size_t)r0 * sizeof(int64_t);
                arg[DT_COEF(i)].dev = (char *)s->coef[i].p + (size_t)r0 * es;
                arg[DT_OMC(i)].dev = (char *)s->omc[i].p + (size_t)r0 * es;
            }
        }
        for (int k = 0; k < s->n_acc; k++) {
            arg[DT_SUM(k)].dev = out[DO_SUM(k)] = s->sum[k].p;
            arg[DT_SQ(k)].dev = out[DO_SQ(k)] = s->sq[k].p;
            if (v->mode == CX_VSPLIT_PART) { /* the chunk's own sums, from zeros */
                arg[DT_SUM(k)].dev = as->zero[k].p;
                arg[DT_SQ(k)].dev = as->zero[s->n_acc + k].p;
                out[DO_SUM(k)] = as->chunk[k].p;
                out[DO_SQ(k)] = as->chunk[s->n_acc + k].p;
            }
        }
        for (int j = 0; j < s->n_add; j++) arg[DT_ADD(j)].dev = s->add[j].p;
        arg[DT_SEED].dev = s->seed.p;
        arg[DT_ROWS].dev = (char *)s->rows.p + (size_t)r0 * sizeof(int64_t);
        /* with the delta: each accumulated attribution's row sums, f at the noisy inputs and at the baselines, down
         * to the host */
        char *tmp = want_delta ? malloc((size_t)(s->n_acc * n + 2 * n * per_out) * es + 1) : NULL;
        if (want_delta && !tmp) st = cx_nt_oom();
        for (int i = 0; i < s->n_acc && tmp; i++) oh[DO_ROWSUM(i)] = tmp + (size_t)(i * n) * es;
        if (tmp) {
            oh[DO_FX] = tmp + (size_t)(s->n_acc * n) * es;
            oh[DO_FB] = tmp + (size_t)(s->n_acc * n + n * per_out) * es;
        }
        cx_job j = cx_job_for(e, s->g, s->consts);
        j.share_arena = true; /* the partitions run one after the other */
        j.n_in = s->n_in;
        j.in = arg;
        j.n_out = n_outs;
        j.outs = s->outs;
        j.out_dev = out;
        j.out_host = oh;
        if (st == CATTR_OK) st = cx_run(&j);
        if (st == CATTR_OK && want_delta) { /* sum of the row's attributions - (f(xn) - f(bg)), rounded as cx_delta_dev */
            for (int i = 0; i <= s->n_acc + 1; i++) {
                int64_t cnt = i < s->n_acc ? n : n * per_out;
                const char *src = oh[i < s->n_acc ? DO_ROWSUM(i) : i == s->n_acc ? DO_FX : DO_FB];
                double *dst = i < s->n_acc ? rsum : i == s->n_acc ? fx : fb;
                for (int64_t k = 0; k < cnt; k++) {
                    double v = c->dt == CATTR_FLOAT32 ? (double)((const float *)src)[k] : ((const double *)src)[k];
                    if (i < s->n_acc) dst[k] = i ? cx_rnd(c->dt, dst[k] + v) : v;
                    else dst[k] = v;
                }
            }
            for (int64_t r = r0; r < r1; r++) {
                int64_t q = r - r0, at = q * per_out + tidx[r / m];
                double d = cx_rnd(c->dt, rsum[q] - cx_rnd(c->dt, cx_rnd(c->dt, fx[at]) - cx_rnd(c->dt, fb[at])));
                cx_tensor_set(*delta, r, d);
                if (v->mode == CX_VSPLIT_PART) vals[v->n_out - chunk + q] = d;
            }
        }
        free(tmp);
        if (st == CATTR_OK && v->mode == CX_VSPLIT_PART) st = cx_acc_split_chunk(e, v, as, s->consts, *kg, NULL, vals, 0);
        *done += n;
        if (st == CATTR_OK) st = cx_chunk_done(&e->p, *done / B, t->n);
    }
    if (st != CATTR_OK && want_delta) {
        cattr_tensor_free(*delta);
        *delta = NULL;
    }
    free(fx);
    free(tidx);
    free(coef);
    free(host);
    free(ib);
    return st;
}

/* The attributions from the sums: smoothgrad sum / n, smoothgrad_sq sq / n, vargrad sq / n - (sum / n)^2 (Captum's
 * (sum * 1) / n), run on the backend and brought back once. */
cattr_status cx_nt_finish(cattr_explainer *e, dev_tunnel *s, cx_call *c, const tunnel *t, cattr_tensor **attr) {
    if (s->fin_type != (int)t->type) {
        cg_free(s->fin_g);
        s->fin_type = -1;
        cg_graph *g = s->fin_g = cg_new();
        if (!g) return cx_nt_oom();
        int su[CX_MAX_IN], sq[CX_MAX_IN], bad = 0;
        for (int i = 0; i < s->n_acc; i++) bad |= (su[i] = cg_add_input(g, "__nt_sum")) < 0;
        for (int i = 0; i < s->n_acc; i++) bad |= (sq[i] = cg_add_input(g, "__nt_sq")) < 0;
        int nv = cg_add_input(g, "__nt_n");
        for (int i = 0; i < s->n_acc && !bad; i++) {
            int mean = cx_emit2(g, CG_DIV, "__nt_mean", su[i], nv), msq = cx_emit2(g, CG_DIV, "__nt_mean_sq", sq[i], nv);
            s->fin_outs[i] = t->type == CATTR_NT_SMOOTHGRAD      ? mean
                             : t->type == CATTR_NT_SMOOTHGRAD_SQ ? msq
                                                                 : cx_emit2(g, CG_SUB, "__nt_var", msq,
                                                                         cx_emit2(g, CG_MUL, "__nt_mean2", mean, mean));
            bad |= s->fin_outs[i] < 0;
        }
        if (bad || nv < 0) return cx_nt_oom();
        s->fin_type = (int)t->type;
    }
    double nd_ = (double)t->n;
    float nf = (float)t->n;
    cx_arg arg[2 * CX_MAX_IN + 1];
    void *host[CX_MAX_IN];
    int na = s->n_acc;
    for (int k = 0; k < 2 * na; k++) {
        cx_arg a = {.nd = s->acc_nd[k % na], .dt = c->dt, .dev = k < na ? s->sum[k].p : s->sq[k - na].p};
        memcpy(a.sh, s->acc_sh[k % na], sizeof a.sh);
        arg[k] = a;
    }
    cx_arg cnt = {.nd = 1, .sh = {1}, .dt = c->dt}; /* the sample count */
    cnt.host = c->dt == CATTR_FLOAT32 ? (const void *)&nf : (const void *)&nd_;
    arg[2 * na] = cnt;
    for (int k = 0; k < na; k++) {
        attr[k] = cx_tensor_alloc(c->dt, s->acc_nd[k], s->acc_sh[k]);
        if (!attr[k]) return cx_nt_oom();
        host[k] = attr[k]->data;
    }
    cx_job j = cx_job_for(e, s->fin_g, s->consts);
    j.n_in = 2 * na + 1;
    j.in = arg;
    j.n_out = na;
    j.outs = s->fin_outs;
    j.out_host = host;
    return cx_run(&j);
}

/* The tunnel of the one-pass gradient methods and GradientShap: partitions, draws and deltas, the work on the backend
 * as one graph per chunk of rows. */
cattr_status cx_nt_run_tunnel_dev(cattr_explainer *e, cx_call *c, const tunnel *t, int kind, const int *lv, int n_l,
                                   cattr_tensor **attr_out, cattr_tensor **delta_out) {
    int64_t bs = t->batch > 0 && t->batch < t->n ? t->batch : t->n;
    int64_t full = t->n / bs, rem = t->n - full * bs, done = 0, chunk = 1;
    int n_parts = (int)(full + (rem > 0));
    dev_tunnel *s = NULL;
    cattr_tensor *seed = NULL;
    int64_t *idx[CX_MAX_IN] = {0};
    /* what is summed: the inputs' attributions, or the layer tensors' (their shapes from a shape-only plan) */
    int n_acc = lv ? n_l : c->n, acc_nd[CX_MAX_IN];
    int64_t acc_sh[CX_MAX_IN][CATTR_MAX_DIMS];
    cattr_status st = CATTR_OK;
    if (lv) {
        cx_arg arg[2 * CX_MAX_IN];
        for (int k = 0; k < c->n + c->n_add; k++) {
            arg[k] = cx_arg_of(k < c->n ? c->x[k] : c->add[k - c->n]);
            arg[k].host = NULL; /* shapes only */
        }
        cx_job j = cx_job_for(e, e->m->g, e->consts);
        j.eager = true; /* never run: no arena */
        j.n_in = c->n + c->n_add;
        j.in = arg;
        j.n_out = n_l;
        j.outs = lv;
        for (int k = 0; k < n_l && st == CATTR_OK; k++) {
            cx_view v;
            st = cx_run_view(&j, lv[k], &v);
            acc_nd[k] = v.ndim;
            memcpy(acc_sh[k], v.shape, sizeof acc_sh[k]);
        }
    } else {
        for (int i = 0; i < c->n; i++) {
            acc_nd[i] = c->x[i]->ndim;
            memcpy(acc_sh[i], c->x[i]->shape, sizeof acc_sh[i]);
        }
    }
    cattr_tensor **deltas = calloc((size_t)n_parts + 1, sizeof *deltas);
    if (st == CATTR_OK) st = deltas ? cx_nt_state(e, c, kind, lv, n_acc, acc_nd, &s) : cx_nt_oom();
    if (st == CATTR_OK) {
        memcpy(s->acc_sh, acc_sh, sizeof acc_sh);
        st = cx_seed_block(e, c, &seed);
    }
    if (st == CATTR_OK) st = dev_upload_call(e, s, c, seed);
    if (st == CATTR_OK) st = dev_chunk_rows(e, c, c->B * bs, &chunk);
    if (st == CATTR_OK) st = cx_nt_draw_first(e, c, t, bs, idx);
    /* a split call's parts always carry the deltas' slots (a part does not know whether the combining call asks) */
    bool delta_slots = (kind == DEV_GSHAP || kind == DEV_LAYER_GSHAP) && e->p.return_convergence_delta;
    bool splitting = e->split.n_parts > 0 || e->split.n_comb > 0;
    bool want_delta = delta_slots && (delta_out || splitting);
    /* a call split into parts (split.c): the units are the chunks of every partition in turn, each chunk's values
     * its sums (2 x the accumulated elements) and, with a delta, `chunk` slots for its rows' deltas */
    cx_vsplit v;
    cx_acc_split as;
    memset(&v, 0, sizeof v);
    memset(&as, 0, sizeof as);
    double *vals = NULL;
    int nd2[2 * CX_MAX_IN]; /* the sums, then the sums of squares */
    int64_t sh2[2 * CX_MAX_IN][CATTR_MAX_DIMS];
    for (int k = 0; k < 2 * n_acc; k++) {
        nd2[k] = acc_nd[k % n_acc];
        memcpy(sh2[k], acc_sh[k % n_acc], sizeof sh2[k]);
    }
    int64_t kg = 0, n_units = 0;
    int64_t width = (want_delta ? chunk : 0) + cx_acc_split_width(2 * n_acc, nd2, (const int64_t(*)[CATTR_MAX_DIMS])sh2);
    for (int64_t p = 0; p < n_parts; p++) n_units += (c->B * (p < full ? bs : rem) + chunk - 1) / chunk;
    if (st == CATTR_OK) st = cx_vsplit_begin(e, c, n_units, 1, width, &v);
    if (st == CATTR_OK) st = cx_acc_split_init(e, &v, 2 * n_acc, nd2, (const int64_t(*)[CATTR_MAX_DIMS])sh2, c->dt, &as);
    if (st == CATTR_OK && v.mode != CX_VSPLIT_NONE && !(vals = calloc((size_t)width + 1, sizeof *vals))) st = cx_nt_oom();
    for (int64_t p = 0; p < n_parts && st == CATTR_OK; p++) {
        part_info pi = {p < full ? bs : rem, p * bs, (uint64_t)p};
        st = dev_partition(e, s, c, t, seed, &pi, p == full || t->split, idx, chunk, &done,
                           want_delta ? &deltas[p] : NULL, &v, &as, &kg, vals);
    }
    st = cx_vsplit_end(&v, st);
    cx_acc_split_free(&as);
    free(vals);
    if (v.mode == CX_VSPLIT_PART) { /* a part: its bytes are the result */
        for (int i = 0; i < CX_MAX_IN; i++) free(idx[i]);
        for (int p = 0; deltas && p < n_parts; p++) cattr_tensor_free(deltas[p]);
        free(deltas);
        cattr_tensor_free(seed);
        return st;
    }
    if (st == CATTR_OK) st = cx_nt_finish(e, s, c, t, attr_out);
    if (st == CATTR_OK && want_delta && delta_out) st = cx_nt_concat_deltas(t, c->B, bs, deltas, n_parts, delta_out);
    if (st != CATTR_OK)
        for (int k = 0; k < n_acc; k++) {
            cattr_tensor_free(attr_out[k]);
            attr_out[k] = NULL;
        }
    if (st == CATTR_OK && lv) c->n_out = n_l;
    for (int i = 0; i < CX_MAX_IN; i++) free(idx[i]);
    for (int p = 0; deltas && p < n_parts; p++) cattr_tensor_free(deltas[p]);
    free(deltas);
    cattr_tensor_free(seed);
    return st;
}

