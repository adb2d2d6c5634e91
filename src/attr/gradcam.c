/* gradcam.c - GuidedGradCam: guided backprop attributions multiplied by the layer's Grad-CAM map, upsampled to the
 * input by nearest neighbour and broadcast over channels (Captum's GuidedGradCam, relu_attributions=True). An input
 * without spatial dims cannot take the map: its attribution is an empty tensor, as in Captum.
 *
 * One derived graph on the backend:
 *   inputs   x_i, the additional inputs a_j, seed [B, out...] (the target mask), and per input i and spatial dim d
 *            idx_i_d [in_d] (int64: the map's row that each input position takes, nearest neighbour)
 *   model    on x_i; gb_i = its gradient under guided backprop's rules; gl = its gradient w.r.t. the layer (the
 *            standard rules)
 *   suffix   map = Relu(ReduceSum(ReduceMean(gl, dims >= 2, keepdims) * layer, dim 1, keepdims))   [B, 1, sp...]
 *            up_i = Gather(... Gather(map, idx_i_0, axis 2) ..., idx_i_last, axis nd-1)            [B, 1, in sp...]
 *            out_i = gb_i * up_i
 * The graph is built for the call's ranks (the map's reductions and the upsampling depend on them); the inputs and the
 * upsampling tables go up once, the attributions come down once. */
#include "attr/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int layer;
    cg_rules rules; /* guided backprop's */
    void *rules_state;
    cg_graph *g; /* for n inputs, n_add additional ones and the ranks in rank[] / layer_rank (0: not built) */
    int n, n_add, rank[CX_MAX_IN], layer_rank;
    int n_in, y_layer, gl, gb[CX_MAX_IN], outs[CX_MAX_IN];
    bool empty[CX_MAX_IN]; /* input i cannot take the map: an empty attribution */
    cx_consts *consts;
} ggc_state;

static void ggc_graph_free(ggc_state *s) {
    cg_free(s->g);
    s->g = NULL;
}

static void ggc_release(cattr_explainer *e) {
    ggc_state *s = e->method_state;
    if (!s) return;
    ggc_graph_free(s);
    cx_rules_free(s->rules_state);
    cx_consts_free(s->consts);
    free(s);
    e->method_state = NULL;
}

static cattr_status ggc_init(cattr_explainer *e) {
    ggc_state *s = calloc(1, sizeof *s);
    if (!s) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    e->method_state = s;
    cg_rules_default(&s->rules);
    CX_CHECK(cx_resolve_layer(e, e->p.layer, e->p.attribute_to_layer_input != 0, &s->layer));
    CX_CHECK(cx_rules_new(e, CATTR_METHOD_GUIDED_GRADCAM, &s->rules, &s->rules_state));
    return cx_consts_new(e->be, e->p.dtype, &s->consts);
}


/* graph-input positions */
#define GG_ADD(j) (s->n + (j))
#define GG_SEED (s->n + s->n_add)
#define GG_IDX(i, d) (GG_SEED + 1 + (i) * CG_MAX_SP + (d))
#define GG_MAX_IN (2 * CX_MAX_IN + 1 + CX_MAX_IN * CG_MAX_SP)
_Static_assert(GG_MAX_IN <= CX_RUN_MAX_IN, "a run takes at most CX_RUN_MAX_IN inputs");

/* The model and its two gradients (the map's suffix comes with the ranks, in ggc_suffix). */
static cattr_status ggc_build(cattr_explainer *e, ggc_state *s, cx_call *c) {
    const cg_graph *m = e->m->g;
    cg_graph *g = NULL;
    int *map = NULL;
    CX_CHECK(cx_derive_new(m, &g, &map));
    s->n = c->n;
    s->n_add = c->n_add;
    s->n_in = GG_IDX(s->n, 0);
    int v[GG_MAX_IN], bad = 0;
    for (int k = 0; k < s->n_in; k++) {
        char nm[32];
        snprintf(nm, sizeof nm, "__ggc_in%d", k);
        bad |= (v[k] = cg_add_input(g, nm)) < 0;
    }
    cattr_status st = bad ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : CATTR_OK;
    int base = g->n_nodes, gl = -1;
    if (st == CATTR_OK) st = cx_graph_append_model(g, m, v, map);
    if (st == CATTR_OK) st = cx_rules_bind(&s->rules, base);
    if (st == CATTR_OK) st = cg_autodiff(g, map[cx_model_output(e->m)], v[GG_SEED], v, s->n, &s->rules, s->gb);
    cx_rules_bind(&s->rules, 0);
    if (st == CATTR_OK) {
        cg_rules std;
        cg_rules_default(&std);
        s->y_layer = map[s->layer];
        st = cg_autodiff(g, map[cx_model_output(e->m)], v[GG_SEED], &s->y_layer, 1, &std, &gl);
    }
    free(map);
    if (st != CATTR_OK) {
        cg_free(g);
        return st;
    }
    s->g = g;
    s->gl = gl;
    s->layer_rank = 0;
    return CATTR_OK;
}

/* The map and each input's product for these ranks (nd of the layer; the inputs' ranks in c). */
static cattr_status ggc_suffix(ggc_state *s, cx_call *c, int nd) {
    cg_graph *g = s->g;
    int gl = s->gl, w = gl;
    if (nd < 2) return cx_fail(CATTR_ERR_SHAPE, "GuidedGradCam needs a layer with a dim besides the batch");
    if (nd > 2) {
        cg_attrs a = cg_attrs_default();
        for (int d = 2; d < nd; d++) a.ints[a.n_ints++] = d;
        a.index = 1;
        w = cg_emit(g, CG_REDUCE_MEAN, "__ggc_weights", &gl, 1, &a);
    }
    int mp = cx_emit2(g, CG_MUL, "__ggc_weighted", w, s->y_layer);
    cg_attrs a = cg_attrs_default();
    a.ints[a.n_ints++] = 1;
    a.index = 1;
    mp = mp < 0 ? -1 : cg_emit(g, CG_REDUCE_SUM, "__ggc_channels", &mp, 1, &a);
    mp = mp < 0 ? -1 : cg_emit(g, CG_RELU, "__ggc_map", &mp, 1, NULL);
    if (mp < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < s->n; i++) {
        int xr = c->x[i]->ndim;
        s->rank[i] = xr;
        s->empty[i] = xr < 3 || xr != nd || xr - 2 > CG_MAX_SP;
        if (s->empty[i]) continue;
        int up = mp;
        for (int d = 0; d < xr - 2 && up >= 0; d++) {
            cg_attrs ga = cg_attrs_default();
            ga.axis = 2 + d;
            int in2[2] = {up, s->g->inputs[GG_IDX(i, d)]};
            up = cg_emit(g, CG_GATHER, "__ggc_upsample", in2, 2, &ga);
        }
        s->outs[i] = cx_emit2(g, CG_MUL, "__ggc_out", s->gb[i], up);
        if (s->outs[i] < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    s->layer_rank = nd;
    return CATTR_OK;
}

/* Nearest-neighbour rows: for each of `out` positions, floor(j * in / out) (torch computes the scale in float). */
static void nearest_rows(int64_t in, int64_t out, int64_t *idx) {
    float scale = (float)in / (float)out;
    for (int64_t j = 0; j < out; j++) {
        int64_t r = (int64_t)floorf((float)j * scale);
        idx[j] = r > in - 1 ? in - 1 : r;
    }
}

static cattr_status guided_gradcam(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    ggc_state *s = e->method_state;
    if (s->g && (s->n != c->n || s->n_add != c->n_add)) ggc_graph_free(s);
    if (!s->g) CX_CHECK(ggc_build(e, s, c));
    cattr_tensor *seed = NULL;
    CX_CHECK(cx_seed_block(e, c, &seed));
    cx_arg in[GG_MAX_IN];
    void *host[CX_MAX_IN];
    int64_t *idx[CX_MAX_IN][CG_MAX_SP] = {{0}};
    cattr_status st = CATTR_OK;
    for (int k = 0; k < s->n_in; k++) { /* the inputs the chosen outputs do not read: a one-value shape */
        cx_arg none = {.nd = 1, .sh = {1}, .dt = CATTR_INT64};
        in[k] = none;
    }
    for (int k = 0; k < s->n + s->n_add; k++) in[k] = cx_arg_of(k < s->n ? c->x[k] : c->add[k - s->n]);
    in[GG_SEED] = cx_arg_of(seed);
    /* the layer's shape, then the suffix for its rank and the inputs' */
    cx_job j = cx_job_for(e, s->g, s->consts);
    j.n_in = s->n_in;
    j.in = in;
    j.n_out = 1;
    j.outs = &s->y_layer;
    cx_view lview;
    st = cx_run_view(&j, s->y_layer, &lview);
    const cx_view *lv = st == CATTR_OK ? &lview : NULL;
    bool same = st == CATTR_OK && s->layer_rank == lv->ndim;
    for (int i = 0; i < c->n && same; i++) same = s->rank[i] == c->x[i]->ndim;
    int lnd = lv ? lv->ndim : 0;
    int64_t lsh[CATTR_MAX_DIMS];
    if (lv) memcpy(lsh, lv->shape, sizeof lsh);
    if (st == CATTR_OK && !same) { /* a new graph, or new nodes (the runner plans the changed graph afresh) */
        if (s->layer_rank) {
            cg_free(s->g);
            s->g = NULL;
            st = ggc_build(e, s, c);
        }
        if (st == CATTR_OK) st = ggc_suffix(s, c, lnd);
    }
    int outs[CX_MAX_IN], n_outs = 0;
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        if (s->empty[i]) {
            int64_t zero = 0;
            attr[i] = cx_tensor_alloc(c->dt, 1, &zero);
            if (!attr[i]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            cx_log(CATTR_LOG_WARN, "GuidedGradCam: the layer's map cannot be upsampled to an input of rank %d; its "
                                   "attribution is empty (as in Captum)", c->x[i]->ndim);
            continue;
        }
        for (int d = 0; d < c->x[i]->ndim - 2 && st == CATTR_OK; d++) {
            int64_t n_out = c->x[i]->shape[2 + d];
            if (!(idx[i][d] = malloc((size_t)(n_out + 1) * sizeof *idx[i][d]))) {
                st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
                break;
            }
            nearest_rows(lsh[2 + d], n_out, idx[i][d]);
            cx_arg a = {.nd = 1, .sh = {n_out}, .dt = CATTR_INT64, .host = idx[i][d]};
            in[GG_IDX(i, d)] = a;
        }
        attr[i] = cx_tensor_alloc(c->dt, c->x[i]->ndim, c->x[i]->shape);
        if (!attr[i]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else host[n_outs] = attr[i]->data;
        outs[n_outs++] = s->outs[i];
    }
    j = cx_job_for(e, s->g, s->consts); /* the graph may be new */
    j.n_in = s->n_in;
    j.in = in;
    j.n_out = n_outs;
    j.outs = outs;
    j.out_host = host;
    if (st == CATTR_OK && n_outs > 0) st = cx_run(&j);
    for (int i = 0; i < CX_MAX_IN; i++)
        for (int d = 0; d < CG_MAX_SP; d++) free(idx[i][d]);
    cattr_tensor_free(seed);
    return st;
}

const cx_method cx_method_guided_gradcam = {CATTR_METHOD_GUIDED_GRADCAM, false,
                                            ggc_init, guided_gradcam, ggc_release};
