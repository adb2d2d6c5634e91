/* helper_graphs.c - the check of a call's results for non-finite values, and the small graphs methods share on the
 * backend: the convergence delta, sums over the last axis, spreading values over features, the
 * mean over pairs of examples and baselines. */
#include "attr/internal.h"
#include "attr/perturb_forms.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IN CX_MAX_IN

cattr_status cx_check_results(cattr_tensor *const *attr, int n, const cattr_tensor *delta) {
    for (int i = 0; i <= n; i++) {
        const cattr_tensor *t = i < n ? attr[i] : delta;
        if (!t || t->dtype == CATTR_INT64) continue;
        int64_t k = cx_tensor_first_nonfinite(t);
        if (k >= 0) {
            char what[64];
            if (i < n) snprintf(what, sizeof what, "attribution %d", i);
            else snprintf(what, sizeof what, "convergence delta");
            return cx_fail(CATTR_ERR_NONFINITE, "%s holds %s at flat index %lld", what,
                           isnan(cx_tensor_get(t, k)) ? "nan" : "inf", (long long)k);
        }
    }
    return CATTR_OK;
}

cattr_status cx_diagnosis(cattr_status rerun, const char *found) {
    if (rerun != CATTR_OK) return cx_fail_context(rerun, "%s", found); /* where it appeared, or what stopped the search */
    return cx_fail(CATTR_ERR_NONFINITE, "%s; every pass of the model was finite: it comes from the method's arithmetic "
                   "on them (an overflow or 0/0)", found);
}

/* [x; start] for every input: the endpoints of the delta in one batch, as host tensors; their values are filled
 * only where fill[i] (else the tensor gives the shape: planning, or the values assembled on the backend). */
static cattr_status delta_inputs(const cx_call *c, cattr_tensor *const *start, const bool *fill, cattr_tensor **xs) {
    for (int i = 0; i < c->n; i++) {
        int64_t s2[CATTR_MAX_DIMS];
        memcpy(s2, c->x[i]->shape, sizeof s2);
        s2[0] *= 2;
        xs[i] = cx_tensor_alloc(c->x[i]->dtype, c->x[i]->ndim, s2);
        if (!xs[i]) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (!fill[i]) continue;
        size_t bytes = (size_t)c->x[i]->numel * cattr_dtype_size(c->x[i]->dtype);
        memcpy(xs[i]->data, c->x[i]->data, bytes);
        memcpy((char *)xs[i]->data + bytes, start[i]->data, bytes);
    }
    return CATTR_OK;
}

cattr_status cx_delta_prepare(cattr_explainer *e, cx_call *c, cattr_tensor *const *start) {
    return cx_delta_forward(e, c, start, NULL);
}

cattr_status cx_delta_forward(cattr_explainer *e, cx_call *c, cattr_tensor *const *start, double *sel) {
    cattr_tensor *xs[MAX_IN] = {0};
    void *xs_dev[MAX_IN] = {0};
    bool fill[MAX_IN];
    for (int i = 0; i < c->n; i++) /* host values for a run whose inputs and starts are on the host */
        fill[i] = sel && !c->x_dev[i] && !(start == c->base && c->base_dev[i]);
    cattr_status st = delta_inputs(c, start, fill, xs);
    for (int i = 0; i < c->n && st == CATTR_OK && sel; i++) { /* inputs on the backend: [x; start] made there */
        void *sdev = start == c->base ? c->base_dev[i] : NULL; /* the baselines on the backend (cx_call.base_dev) */
        if (fill[i]) continue;
        size_t bytes = (size_t)c->x[i]->numel * cattr_dtype_size(c->dt);
        st = cx_buf_fit(e->be, &e->dstaged[i], 2 * bytes, NULL, false);
        if (st == CATTR_OK) st = cx_buf_put(&e->dstaged[i], 0, c->x[i]->data, c->x_dev[i], bytes);
        if (st == CATTR_OK) st = cx_buf_put(&e->dstaged[i], bytes, start[i]->data, sdev, bytes);
        xs_dev[i] = e->dstaged[i].p;
    }
    /* only the target values come down */
    if (st == CATTR_OK) st = cx_forward_select(e, c, xs, xs_dev, 2, CX_TILE, sel, NULL);
    for (int i = 0; i < MAX_IN; i++) cattr_tensor_free(xs[i]);
    return st;
}

cattr_status cx_helper_get(cattr_explainer *e, int kind, const cx_call *c, int n, cattr_tensor *const *like,
                           cx_helper_build build, cx_helper **out) {
    cx_helper *lru = &e->helpers[0];
    for (int k = 0; k < CX_HELPER_CACHE; k++) {
        cx_helper *h = &e->helpers[k];
        bool same = h->kind == kind && h->dt == c->dt && h->d.n == n;
        for (int i = 0; same && i < n; i++) same = h->d.rank[i] == like[i]->ndim;
        if (same) {
            h->used = ++e->helpers_clock;
            *out = h;
            return CATTR_OK;
        }
        if (lru->kind && (!h->kind || h->used < lru->used)) lru = h;
    }
    cx_derived_free(&lru->d);
    memset(lru, 0, sizeof *lru);
    cattr_status st = (lru->d.g = cg_new()) ? build(lru->d.g, n, like, lru->outs)
                                            : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) st = cx_consts_new(e->be, c->dt, &lru->d.consts);
    if (st != CATTR_OK) {
        cx_derived_free(&lru->d);
        return st;
    }
    lru->d.n = n;
    for (int i = 0; i < n; i++) lru->d.rank[i] = like[i]->ndim;
    lru->kind = kind;
    lru->dt = c->dt;
    lru->used = ++e->helpers_clock;
    *out = lru;
    return CATTR_OK;
}

cattr_status cx_small_run(cattr_explainer *e, cx_derived *d, const cx_arg *in, int n_in, const int *outs,
                              int n_out, void *const *res, void *const *res_dev) {
    cx_job j = cx_job_for(e, d->g, d->consts);
    j.n_in = n_in;
    j.in = in;
    j.n_out = n_out;
    j.outs = outs;
    j.out_host = res;
    j.out_dev = res_dev;
    return cx_run(&j);
}

/* The delta graph for n inputs of these ranks: inputs attr_0..attr_{n-1}, then d [B] (f(x) - f(start), rounded as
 * the compute dtype); output Sub(TorchSum(Reshape(attr_0, [B, -1]), 1) + ... , d). */
static cattr_status delta_build(cg_graph *g, int n, cattr_tensor *const *like, int *outs) {
    (void)like;
    int in[MAX_IN];
    for (int i = 0; i < n; i++) in[i] = cg_add_input(g, "__delta_attr");
    int diff = cg_add_input(g, "__delta_endpoints");
    cg_attrs rows = cg_attrs_default(), sum = cg_attrs_default();
    rows.n_ints = 2;
    rows.ints[0] = 0, rows.ints[1] = -1;
    sum.n_ints = 1;
    sum.ints[0] = 1;
    int total = -1;
    for (int i = 0; i < n; i++) {
        int r = in[i] < 0 ? -1 : cg_emit(g, CG_RESHAPE, "__delta_rows", (int[]){in[i]}, 1, &rows);
        int t = r < 0 ? -1 : cg_emit(g, CG_TORCH_SUM, "__delta_row_sum", (int[]){r}, 1, &sum);
        total = i == 0 ? t : cx_emit2(g, CG_ADD, "__delta_sum", total, t);
    }
    outs[0] = cx_emit2(g, CG_SUB, "__delta", total, diff);
    return outs[0] < 0 ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : CATTR_OK;
}

cattr_status cx_delta_dev(cattr_explainer *e, const cx_call *c, int n, cattr_tensor *const *like,
                          void *const *attr_dev, const double *sel, cattr_tensor **delta) {
    int64_t B = c->B;
    *delta = cx_tensor_alloc(c->dt, 1, &B);
    if (!*delta) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (B == 0) return CATTR_OK;
    cx_helper *h = NULL;
    cattr_status st = cx_helper_get(e, CX_H_DELTA, c, n, like, delta_build, &h);
    cattr_tensor *diff = st == CATTR_OK ? cx_tensor_alloc(c->dt, 1, &B) : NULL;
    if (st == CATTR_OK && !diff) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t b = 0; b < B && st == CATTR_OK; b++)
        cx_tensor_set(diff, b, cx_rnd(c->dt, cx_rnd(c->dt, sel[b]) - cx_rnd(c->dt, sel[B + b])));
    cx_arg in[MAX_IN + 1];
    for (int i = 0; i < n; i++) {
        in[i] = cx_arg_dev(like[i], attr_dev[i]);
        in[i].dt = c->dt;
    }
    void *res[1] = {(*delta)->data};
    if (st == CATTR_OK) {
        in[n] = cx_arg_of(diff);
        st = cx_small_run(e, &h->d, in, n + 1, h->outs, 1, res, NULL);
    }
    cattr_tensor_free(diff);
    if (st != CATTR_OK) {
        cattr_tensor_free(*delta);
        *delta = NULL;
    }
    return st;
}

/* The graph of cx_sum_last for n attributions of these ranks: out_i = TorchSum(attr_i, its last axis). */
static cattr_status sum_last_build(cg_graph *g, int n, cattr_tensor *const *like, int *outs) {
    for (int i = 0; i < n; i++) {
        if (like[i]->ndim < 1) return cx_fail(CATTR_ERR_INTERNAL, "a scalar attribution has no last axis to sum");
        cg_attrs sum = cg_attrs_default();
        sum.n_ints = 1;
        sum.ints[0] = like[i]->ndim - 1;
        int in = cg_add_input(g, "__sum_attr");
        outs[i] = in < 0 ? -1 : cg_emit(g, CG_TORCH_SUM, "__sum_last", (int[]){in}, 1, &sum);
        if (outs[i] < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    return CATTR_OK;
}

cattr_status cx_sum_last(cattr_explainer *e, const cx_call *c, int n, cattr_tensor *const *like, void *const *dev,
                         cattr_tensor **out) {
    for (int i = 0; i < n; i++) out[i] = NULL;
    cx_helper *h = NULL;
    cattr_status st = cx_helper_get(e, CX_H_SUM_LAST, c, n, like, sum_last_build, &h);
    cx_arg in[MAX_IN];
    void *res[MAX_IN] = {0};
    for (int i = 0; i < n && st == CATTR_OK; i++) {
        in[i] = dev ? cx_arg_dev(like[i], dev[i]) : cx_arg_of(like[i]);
        in[i].dt = c->dt;
        out[i] = cx_tensor_alloc(c->dt, like[i]->ndim - 1, like[i]->shape);
        if (!out[i]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else res[i] = out[i]->data;
    }
    if (st == CATTR_OK) st = cx_small_run(e, &h->d, in, n, h->outs, n, res, NULL);
    for (int i = 0; i < n && st != CATTR_OK; i++) {
        cattr_tensor_free(out[i]);
        out[i] = NULL;
    }
    return st;
}

/* cx_spread's graph: inputs V [R, M + 1], ids int64 [id_rows, per], idrow int64 [R];
 * out = SeqPick(Reshape(V, [R, M + 1, 1]), Gather(ids, idrow)) [R, per, 1]. */
static cattr_status spread_build(cg_graph *g, int n, cattr_tensor *const *like, int *outs) {
    (void)n, (void)like;
    int v = cg_add_input(g, "__spread_values"), ids = cg_add_input(g, "__spread_ids");
    int idrow = cg_add_input(g, "__spread_id_rows");
    cg_attrs a0 = cg_attrs_default(), r3 = cg_attrs_default();
    r3.n_ints = 3;
    r3.ints[0] = 0, r3.ints[1] = -1, r3.ints[2] = 1;
    int rows = v < 0 || ids < 0 || idrow < 0
                   ? -1 : cg_emit(g, CG_GATHER, "__spread_ids_of_rows", (int[]){ids, idrow}, 2, &a0);
    int v3 = rows < 0 ? -1 : cg_emit(g, CG_RESHAPE, "__spread_values_3d", (int[]){v}, 1, &r3);
    outs[0] = cx_emit2(g, CG_SEQ_PICK, "__spread", v3, rows);
    return outs[0] < 0 ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : CATTR_OK;
}

cattr_status cx_spread(cattr_explainer *e, const cx_call *c, const double *V, int64_t R, int64_t M, const int64_t *ids,
                       int64_t id_rows, int64_t per, const int64_t *idrow, cattr_tensor *out, void *out_dev) {
    if (out->numel != R * per) return cx_fail(CATTR_ERR_INTERNAL, "cx_spread: the output has the wrong size");
    if (R == 0 || per == 0) return CATTR_OK;
    int64_t vsh[2] = {R, M + 1}, nid = id_rows * per;
    cattr_tensor *vt = cx_tensor_alloc(c->dt, 2, vsh);
    int64_t *iv = malloc((size_t)(nid + 1) * sizeof *iv);
    cx_helper *h = NULL;
    cattr_status st = vt && iv ? cx_helper_get(e, CX_H_SPREAD, c, 0, NULL, spread_build, &h)
                               : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) {
        for (int64_t r = 0; r < R; r++) { /* column M: the value of negative ids, 0 */
            for (int64_t f = 0; f < M; f++) cx_tensor_set(vt, r * (M + 1) + f, V[r * M + f]);
            cx_tensor_set(vt, r * (M + 1) + M, 0.0);
        }
        for (int64_t k = 0; k < nid; k++) iv[k] = ids[k] < 0 ? M : ids[k];
    }
    /* the ids go up unless the last call uploaded the same */
    bool same = st == CATTR_OK && e->spread_ids_host && e->spread_ids_n == nid &&
                !memcmp(e->spread_ids_host, iv, (size_t)nid * sizeof *iv);
    if (st == CATTR_OK && !same) {
        free(e->spread_ids_host);
        e->spread_ids_host = NULL;
        st = cx_buf_fit(e->be, &e->spread_ids, (size_t)nid * sizeof *iv, iv, false);
        if (st == CATTR_OK) {
            e->spread_ids_host = iv;
            e->spread_ids_n = nid;
            iv = NULL;
        }
    }
    cx_arg in[3] = {{.nd = 2, .sh = {R, M + 1}, .dt = c->dt, .host = vt ? vt->data : NULL},
                    {.nd = 2, .sh = {id_rows, per}, .dt = CATTR_INT64, .dev = e->spread_ids.p},
                    {.nd = 1, .sh = {R}, .dt = CATTR_INT64, .host = idrow}};
    void *res[1] = {out_dev ? NULL : out->data}, *res_dev[1] = {out_dev};
    if (st == CATTR_OK) st = cx_small_run(e, &h->d, in, 3, h->outs, 1, res, res_dev);
    cattr_tensor_free(vt);
    free(iv);
    return st;
}

/* cx_pairs_mean's graph: inputs X [B, nb, per] and nb [1] (dt); out = Div(TorchSum(X, 1), nb) [B, per]. */
static cattr_status pairs_mean_build(cg_graph *g, int n, cattr_tensor *const *like, int *outs) {
    (void)n, (void)like;
    cg_attrs sum = cg_attrs_default();
    sum.n_ints = 1;
    sum.ints[0] = 1;
    int x = cg_add_input(g, "__pairs"), nb = cg_add_input(g, "__pairs_count");
    int t = x < 0 ? -1 : cg_emit(g, CG_TORCH_SUM, "__pairs_sum", (int[]){x}, 1, &sum);
    outs[0] = cx_emit2(g, CG_DIV, "__pairs_mean", t, nb);
    return outs[0] < 0 ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : CATTR_OK;
}

cattr_status cx_pairs_mean(cattr_explainer *e, const cx_call *c, int64_t nb, int n, cattr_tensor *const *like,
                           void *const *dev, cattr_tensor **attr) {
    for (int i = 0; i < n; i++) attr[i] = NULL;
    int64_t one = 1;
    cattr_tensor *cnt = cx_tensor_alloc(c->dt, 1, &one);
    cx_helper *h = NULL;
    cattr_status st = cnt ? cx_helper_get(e, CX_H_PAIRS_MEAN, c, 0, NULL, pairs_mean_build, &h)
                          : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) cx_tensor_set(cnt, 0, (double)nb);
    for (int i = 0; i < n && st == CATTR_OK; i++) {
        int64_t sh[CATTR_MAX_DIMS], B = c->B, per = B > 0 && nb > 0 ? like[i]->numel / (B * nb) : 0;
        memcpy(sh, like[i]->shape, sizeof sh);
        sh[0] = B;
        attr[i] = cx_tensor_alloc(c->dt, like[i]->ndim, sh);
        if (!attr[i]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st != CATTR_OK || attr[i]->numel == 0) continue;
        cx_arg in[2] = {{.nd = 3, .sh = {B, nb, per}, .dt = c->dt, .dev = dev[i]}, cx_arg_of(cnt)};
        void *res[1] = {attr[i]->data};
        st = cx_small_run(e, &h->d, in, 2, h->outs, 1, res, NULL);
    }
    cattr_tensor_free(cnt);
    for (int i = 0; i < n && st != CATTR_OK; i++) {
        cattr_tensor_free(attr[i]);
        attr[i] = NULL;
    }
    return st;
}

cattr_status cx_convergence_delta_dev(cattr_explainer *e, cx_call *c, void *const *attr_dev,
                                      cattr_tensor *const *start, cattr_tensor **delta) {
    double *sel = malloc((size_t)(2 * c->B + 1) * sizeof *sel);
    cattr_status st = sel ? cx_delta_forward(e, c, start, sel) : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) cx_keep_fx(e, sel, c->B);
    if (st == CATTR_OK) st = cx_delta_dev(e, c, c->n, c->x, attr_dev, sel, delta);
    free(sel);
    return st;
}

void cx_keep_fx(cattr_explainer *e, const double *sel, int64_t B) {
    double *f = realloc(e->fx, (size_t)(B > 0 ? B : 1) * sizeof *f);
    if (!f) {
        e->fx_n = 0;
        return;
    }
    memcpy(f, sel, (size_t)B * sizeof *f);
    e->fx = f;
    e->fx_n = B;
}
