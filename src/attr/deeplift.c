/* deeplift.c - DeepLift and DeepLiftShap (Captum semantics: shared/reference/captum_spec.md section 8): the model's
 * backward under DeepLift's rules (rules.c) on [x; x'] (2B rows, the CG_DL_* ops pairing row r with row r + B), and
 * DeepLiftShap pairing every example with every baseline on B * n_baselines rows. */
#include "attr/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- DeepLift ----------------------------------------------------------------------------------------------------- */

static cattr_status deeplift_init(cattr_explainer *e) { return cx_rules_init(e); } /* eps: cx_params_check */

/* DeepLift multipliers on [x; base] (2B rows, additional inputs and target tiled as Captum does), then
 * attr = (x - base) * multiplier, or the multiplier alone without multiply_by_inputs. */
static cattr_status deeplift_pass(cattr_explainer *e, cx_call *c, cattr_tensor *const *base, bool keep,
                                  cattr_tensor **attr) {
    cattr_tensor *xs[CX_MAX_IN] = {0}, *gr[CX_MAX_IN] = {0};
    void *xs_dev[CX_MAX_IN] = {0};
    bool any_dev = false;
    cattr_status st = CATTR_OK;
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        int64_t sh[CATTR_MAX_DIMS];
        memcpy(sh, c->x[i]->shape, sizeof sh);
        sh[0] *= 2;
        xs[i] = cx_tensor_alloc(c->dt, c->x[i]->ndim, sh);
        if (!xs[i]) {
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            break;
        }
        size_t bytes = (size_t)c->x[i]->numel * cattr_dtype_size(c->dt);
        if (!c->x_dev[i] && !c->base_dev[i]) { /* on the host: [x; base] goes up with the pass */
            memcpy(xs[i]->data, c->x[i]->data, bytes);
            memcpy((char *)xs[i]->data + bytes, base[i]->data, bytes);
            continue;
        }
        /* an input or baseline on the backend (cx_call.x_dev, base_dev): [x; base] assembled there, in e->staged */
        st = cx_buf_fit(e->be, &e->staged[i], 2 * bytes, NULL, false);
        if (st == CATTR_OK) st = cx_buf_put(&e->staged[i], 0, c->x[i]->data, c->x_dev[i], bytes);
        if (st == CATTR_OK) st = cx_buf_put(&e->staged[i], bytes, base[i]->data, c->base_dev[i], bytes);
        xs_dev[i] = e->staged[i].p;
        any_dev = true;
    }
    void *const *xd = any_dev ? xs_dev : NULL;
    if (st == CATTR_OK && e->p.multiply_by_inputs) { /* (x - base) * multiplier, on the backend */
        st = cx_grad_times_diff(e, c, xs, xd, keep, attr);
    } else if (st == CATTR_OK) { /* the multipliers of the first block */
        st = cx_grad_keep(e, c, xs, xd, 2, CX_TILE, keep, gr); /* kept: the first block leads each buffer */
        for (int i = 0; i < c->n && st == CATTR_OK; i++) {
            size_t bytes = (size_t)c->x[i]->numel * cattr_dtype_size(c->dt);
            if (c->attr_dev[i]) { /* left on the backend for the caller */
                st = cx_buf_get(&e->kept[i], 0, NULL, c->attr_dev[i], bytes);
                continue;
            }
            attr[i] = cx_tensor_alloc(c->dt, c->x[i]->ndim, c->x[i]->shape);
            if (!attr[i]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            else memcpy(attr[i]->data, gr[i]->data, bytes);
        }
    }
    for (int i = 0; i < CX_MAX_IN; i++) {
        cattr_tensor_free(xs[i]);
        cattr_tensor_free(gr[i]);
    }
    return st;
}

static cattr_status deeplift(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    bool want = delta && e->p.return_convergence_delta;
    CX_CHECK(deeplift_pass(e, c, c->base, want, attr));
    if (!want) return CATTR_OK;
    void *dev[CX_MAX_IN];
    for (int i = 0; i < c->n; i++) dev[i] = c->attr_dev[i] ? c->attr_dev[i] : e->kept[i].p; /* where the pass left them */
    return cx_convergence_delta_dev(e, c, dev, c->base, delta);
}

/* ---- DeepLiftShap ------------------------------------------------------------------------------------------------ */

void cx_pairs_free(cx_call *p, int64_t *tidx) {
    for (int i = 0; i < CX_MAX_IN; i++) {
        cattr_tensor_free(p->x[i]);
        cattr_tensor_free(p->base[i]);
        cattr_tensor_free(p->add[i]);
    }
    free(tidx);
}

/* The call of every (example, baseline) pair: row b * nb + k pairs example b with baseline row k (inputs, additional
 * inputs and per-example targets repeated per example, baselines tiled), as Captum's DeepLiftShap expands them. */
cattr_status cx_pairs_make(const cx_call *c, int64_t nb, cx_call *p, cattr_target *tgt, int64_t **tidx) {
    memset(p, 0, sizeof *p);
    *tidx = NULL;
    p->n = c->n;
    p->B = c->B * nb;
    p->dt = c->dt;
    p->n_add = c->n_add;
    p->user = c->user;
    p->target = c->target;
    for (int j = 0; j < c->n_add; j++)
        if (!(p->add[j] = cx_expand_rows(c->add[j], nb, CX_INTERLEAVE)))
            return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    const cattr_target *t = c->target;
    if (t && t->kind == CATTR_TARGET_PER_EXAMPLE) {
        if (t->n_rows != c->B || t->n_idx < 1 || !t->idx)
            return cx_fail(CATTR_ERR_TARGET, "%lld per-example targets of %d indices given for a batch of %lld",
                           (long long)t->n_rows, t->n_idx, (long long)c->B);
        *tidx = malloc((size_t)(p->B * t->n_idx) * sizeof **tidx);
        if (!*tidx) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        for (int64_t r = 0; r < p->B; r++)
            memcpy(*tidx + r * t->n_idx, t->idx + (r / nb) * t->n_idx, (size_t)t->n_idx * sizeof **tidx);
        *tgt = *t;
        tgt->n_rows = p->B;
        tgt->idx = *tidx;
        p->target = tgt;
    }
    return CATTR_OK;
}

/* DeepLiftShap as one derived graph: every (example b, baseline row k) pair, row r = b*nb + k of R = B*nb, built on
 * the backend from the uploaded inputs and distribution (ix[r] = b, ib[r] = k):
 *   prefix   xs_i = Concat(Gather(x_i, ix), Gather(dist_i, ib)) (the 2-block pass of DeepLift), the additional inputs
 *            and the seed gathered by [ix; ix]
 *   model    under DeepLift's rules (bound to the model's nodes after the prefix), gradient w.r.t. xs_i
 *   suffix   pair_i = (x_p - b_p) * g_i[first R rows] (or g_i without multiply_by_inputs);
 *            attr_i = GatherGrad(pair_i, ix, x_i) / nb (torch.mean over the baselines);
 *            the delta's parts: each pair's sum (ReduceSum) and the model output at both blocks
 * The inputs go up once and the attributions come down once. */
typedef struct dls_graph {
    cg_graph *g;
    int n, n_add, mul, rank[CX_MAX_IN];
    int n_in, outs[2 * CX_MAX_IN + 1];
    cx_consts *consts;
} dls_graph;

void cx_dls_free(struct dls_graph *d) {
    if (!d) return;
    cg_free(d->g);
    cx_consts_free(d->consts);
    free(d);
}


/* graph-input positions */
#define DL_X(i) (i)
#define DL_D(i) (d->n + (i))
#define DL_ADD(j) (2 * d->n + (j))
#define DL_SEED (2 * d->n + d->n_add)
#define DL_IX (DL_SEED + 1)
#define DL_IB (DL_SEED + 2)
#define DL_I2 (DL_SEED + 3)
#define DL_FIRST (DL_SEED + 4)
#define DL_NB (DL_SEED + 5)
#define DL_MAX_IN (3 * CX_MAX_IN + 6)

static cattr_status dls_build(cattr_explainer *e, dls_graph *d) {
    const cg_graph *m = e->m->g;
    cg_graph *g = NULL;
    int *map = NULL;
    CX_CHECK(cx_derive_new(m, &g, &map));
    d->n_in = DL_NB + 1;
    int v[DL_MAX_IN], bad = 0;
    for (int k = 0; k < d->n_in; k++) {
        char nm[32];
        snprintf(nm, sizeof nm, "__dls_in%d", k);
        bad |= (v[k] = cg_add_input(g, nm)) < 0;
    }
    int xp[CX_MAX_IN], bp[CX_MAX_IN], in_map[2 * CX_MAX_IN], grads[CX_MAX_IN];
    cg_attrs ca = cg_attrs_default();
    ca.axis = 0;
    for (int i = 0; i < d->n && !bad; i++) {
        xp[i] = cx_emit2(g, CG_GATHER, "__dls_x_pairs", v[DL_X(i)], v[DL_IX]);
        bp[i] = cx_emit2(g, CG_GATHER, "__dls_baseline_pairs", v[DL_D(i)], v[DL_IB]);
        int two[2] = {xp[i], bp[i]};
        in_map[i] = xp[i] < 0 || bp[i] < 0 ? -1 : cg_emit(g, CG_CONCAT, "__dls_blocks", two, 2, &ca);
        bad |= in_map[i] < 0;
    }
    for (int j = 0; j < d->n_add && !bad; j++)
        bad |= (in_map[d->n + j] = cx_emit2(g, CG_GATHER, "__dls_add_rows", v[DL_ADD(j)], v[DL_I2])) < 0;
    cattr_status st = bad ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : CATTR_OK;
    int base = g->n_nodes;
    if (st == CATTR_OK) st = cx_graph_append_model(g, m, in_map, map);
    int seed = st == CATTR_OK ? cx_emit2(g, CG_GATHER, "__dls_seed_rows", v[DL_SEED], v[DL_I2]) : -1;
    if (st == CATTR_OK) st = seed < 0 ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : cx_rules_bind(&e->rules, base);
    if (st == CATTR_OK) st = cg_autodiff(g, map[cx_model_output(e->m)], seed, in_map, d->n, &e->rules, grads);
    cx_rules_bind(&e->rules, 0);
    for (int i = 0; i < d->n && st == CATTR_OK; i++) {
        int g1 = cx_emit2(g, CG_GATHER, "__dls_first_block", grads[i], v[DL_FIRST]);
        int pair = d->mul ? cx_emit2(g, CG_MUL, "__dls_pair", cx_emit2(g, CG_SUB, "__dls_x_minus_b", xp[i], bp[i]), g1) : g1;
        int in3[3] = {pair, v[DL_IX], v[DL_X(i)]};
        int sum = pair < 0 ? -1 : cg_emit(g, CG_GATHER_GRAD, "__dls_pair_sum", in3, 3, NULL);
        d->outs[i] = cx_emit2(g, CG_DIV, "__dls_mean", sum, v[DL_NB]);
        cg_attrs ra = cg_attrs_default();
        for (int r = 1; r < d->rank[i]; r++) ra.ints[ra.n_ints++] = r;
        d->outs[d->n + i] = pair < 0 ? -1 : ra.n_ints ? cg_emit(g, CG_REDUCE_SUM, "__dls_row_sum", &pair, 1, &ra) : pair;
        if (d->outs[i] < 0 || d->outs[d->n + i] < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK) d->outs[2 * d->n] = map[cx_model_output(e->m)];
    free(map);
    if (st != CATTR_OK) {
        cg_free(g);
        return st;
    }
    d->g = g;
    return CATTR_OK;
}

static cattr_status deeplift_shap(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    int64_t nb = c->dist[0] ? c->dist[0]->shape[0] : 0, B = c->B, R = B * nb;
    for (int i = 0; i < c->n; i++) {
        int64_t ni = c->dist[i] ? c->dist[i]->shape[0] : 0;
        if (ni != nb)
            return cx_fail(CATTR_ERR_SHAPE, "baseline %d has %lld rows and baseline 0 has %lld: DeepLiftShap pairs "
                                            "every input with the same number of baselines", i, (long long)ni,
                           (long long)nb);
    }
    if (nb < 2)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                       "DeepLiftShap needs a distribution of at least 2 baseline rows (got %lld); use DeepLift for a "
                       "single baseline", (long long)nb);
    struct dls_graph **slot = cx_rules_dls(e->method_state);
    dls_graph *d = *slot;
    int mul = e->p.multiply_by_inputs != 0;
    bool same = d && d->n == c->n && d->n_add == c->n_add && d->mul == mul;
    for (int i = 0; same && i < c->n; i++) same = d->rank[i] == c->x[i]->ndim;
    if (!same) {
        cx_dls_free(d);
        *slot = d = calloc(1, sizeof *d);
        if (!d) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        d->n = c->n;
        d->n_add = c->n_add;
        d->mul = mul;
        for (int i = 0; i < c->n; i++) d->rank[i] = c->x[i]->ndim;
        cattr_status st = dls_build(e, d);
        if (st == CATTR_OK) st = cx_consts_new(e->be, c->dt, &d->consts);
        if (st != CATTR_OK) {
            cx_dls_free(d);
            *slot = NULL;
            return st;
        }
    }
    size_t es = cattr_dtype_size(c->dt);
    cattr_tensor *seed = NULL;
    int64_t *ix = malloc((size_t)(5 * R + B + 1) * sizeof *ix), *ib = ix ? ix + R : NULL, *i2 = ix ? ib + R : NULL;
    int64_t *first = ix ? i2 + 2 * R : NULL, *tidx = ix ? first + R : NULL;
    cattr_status st = ix ? cx_seed_block(e, c, &seed) : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cx_arg arg[DL_MAX_IN];
    memset(arg, 0, (size_t)d->g->n_inputs * sizeof *arg);
    void *host[2 * CX_MAX_IN + 1] = {0};
    for (int i = 0; i < c->n; i++) {
        arg[DL_X(i)] = cx_arg_of(c->x[i]);
        arg[DL_D(i)] = cx_arg_of(c->dist[i]);
        arg[DL_X(i)].dt = arg[DL_D(i)].dt = c->dt;
    }
    for (int j = 0; j < c->n_add; j++) arg[DL_ADD(j)] = cx_arg_of(c->add[j]);
    if (st == CATTR_OK) {
        arg[DL_SEED] = cx_arg_of(seed);
        arg[DL_SEED].dt = c->dt;
        for (int64_t r = 0; r < R; r++) {
            ix[r] = i2[r] = i2[R + r] = r / nb;
            ib[r] = r % nb;
            first[r] = r;
        }
        cx_target_rows(seed, B, B, tidx);
    }
    struct {
        int at;
        const int64_t *v;
        int64_t cnt;
    } idx[4] = {{DL_IX, ix, R}, {DL_IB, ib, R}, {DL_I2, i2, 2 * R}, {DL_FIRST, first, R}};
    for (int k = 0; k < 4; k++) {
        cx_arg a = {.nd = 1, .sh = {idx[k].cnt}, .dt = CATTR_INT64, .host = idx[k].v};
        arg[idx[k].at] = a;
    }
    double nbd = (double)nb;
    float nbf = (float)nb;
    cx_arg nba = {.nd = 1, .sh = {1}, .dt = c->dt};
    nba.host = c->dt == CATTR_FLOAT32 ? (const void *)&nbf : (const void *)&nbd;
    arg[DL_NB] = nba;
    bool want = delta && e->p.return_convergence_delta;
    int n_outs = want ? 2 * c->n + 1 : c->n;
    int64_t per_out = B && seed ? seed->numel / B : 0;
    /* with the delta: each input's row sums of the pairs' attributions, then the outputs at [x; baseline] */
    char *tmp = want ? malloc((size_t)(c->n * R + 2 * R * per_out + 1) * es) : NULL;
    if (want && !tmp && st == CATTR_OK) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        attr[i] = cx_tensor_alloc(c->dt, c->x[i]->ndim, c->x[i]->shape);
        if (!attr[i]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else host[i] = attr[i]->data;
        if (want) host[c->n + i] = tmp + (size_t)(i * R) * es;
    }
    if (want) host[2 * c->n] = tmp + (size_t)(c->n * R) * es;
    cx_job j = cx_job_for(e, d->g, d->consts);
    j.n_in = d->g->n_inputs;
    j.in = arg;
    j.n_out = n_outs;
    j.outs = d->outs;
    j.out_host = host;
    if (st == CATTR_OK) st = cx_run(&j);
    if (st == CATTR_OK && want) { /* per pair: its sum - (f(x) - f(baseline)), rounded as cx_delta_dev */
        int64_t len = R;
        double *part = malloc((size_t)(2 * R * per_out + R + 1) * sizeof *part), *yv = part ? part + R : NULL;
        *delta = cx_tensor_alloc(c->dt, 1, &len);
        if (!part || !*delta) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        for (int i = 0; i <= c->n && st == CATTR_OK; i++) {
            int64_t cnt = i < c->n ? R : 2 * R * per_out;
            const char *src = tmp + (size_t)(i * R) * es;
            for (int64_t k = 0; k < cnt; k++) {
                double v = c->dt == CATTR_FLOAT32 ? (double)((const float *)src)[k] : ((const double *)src)[k];
                if (i == c->n) yv[k] = v;
                else part[k] = i ? cx_rnd(c->dt, part[k] + v) : v;
            }
        }
        for (int64_t r = 0; r < R && st == CATTR_OK; r++) {
            int64_t t = tidx[r / nb];
            double fx = cx_rnd(c->dt, yv[r * per_out + t]), fb = cx_rnd(c->dt, yv[(R + r) * per_out + t]);
            cx_tensor_set(*delta, r, cx_rnd(c->dt, part[r] - cx_rnd(c->dt, fx - fb)));
        }
        free(part);
        if (st != CATTR_OK) {
            cattr_tensor_free(*delta);
            *delta = NULL;
        }
    }
    free(tmp);
    if (st != CATTR_OK)
        for (int i = 0; i < c->n; i++) {
            cattr_tensor_free(attr[i]);
            attr[i] = NULL;
        }
    cattr_tensor_free(seed);
    free(ix);
    return st;
}

/* ---- the method table entries ------------------------------------------------------------------------------------ */

const cx_method cx_method_deeplift = {CATTR_METHOD_DEEPLIFT, false, deeplift_init, deeplift,
                                      cx_rules_release};
const cx_method cx_method_deeplift_shap = {CATTR_METHOD_DEEPLIFT_SHAP, true,
                                           deeplift_init, deeplift_shap, cx_rules_release};
