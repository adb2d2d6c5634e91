/* example_grads.c - each example's gradient of its own loss with respect to named weights (TracIn, Pruthi et al.,
 * NeurIPS 2020; cattr_explainer_example_grads).
 *
 * The graph: the model's, its named weights turned into inputs (checkpoints are inputs, not reloads), the loss of each
 * example on the graph (cross-entropy, -log of the output at the label, or the squared error summed over the
 * output's elements), and the gradient of the losses' sum at the output of each node that reads a weight (cg_autodiff
 * with those node values as the "inputs"): since examples do not interact, row b of that gradient is example b's.
 * Each example's weight gradient is then built from it and the node's input, exactly and batched, with no backward
 * pass per example: a projection's (Gemm, MatMul) is gY_b^T A_b summed over a sequence's positions (one batched
 * MatMul), a bias's (Gemm's C, or an Add after a MatMul) the sum of gY_b over positions. With `against` the graph ends
 * in the dot products of those gradients with given rows (TracIn's scores) and the squared norms (self influence),
 * so only [B, M] and [B] numbers come down. */
#include "attr/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_P 64

typedef struct eg_state {
    cg_graph *g;
    cx_consts *consts;
    int n_p, loss;
    bool against;
    char *names[MAX_P];
    int grads[MAX_P], dots, self, losses;
} eg_state;

void cx_example_grads_free(cattr_explainer *e) {
    eg_state *s = e->example_grads;
    if (!s) return;
    cg_free(s->g);
    cx_consts_free(s->consts);
    for (int k = 0; k < s->n_p; k++) free(s->names[k]);
    free(s);
    e->example_grads = NULL;
}

static int emit1(cg_graph *g, cg_op op, const char *name, int x, const cg_attrs *a) {
    return x < 0 ? -1 : cg_emit(g, op, name, &x, 1, a);
}

static int reshape(cg_graph *g, int x, int n, const int64_t *dims) {
    cg_attrs a = cg_attrs_default();
    a.n_ints = n;
    for (int k = 0; k < n; k++) a.ints[k] = dims[k];
    return emit1(g, CG_RESHAPE, "__cattr_eg_reshape", x, &a);
}

static int reduce_axis1(cg_graph *g, int x) {
    cg_attrs a = cg_attrs_default();
    a.n_ints = 1, a.ints[0] = 1;
    return emit1(g, CG_REDUCE_SUM, "__cattr_eg_sum", x, &a);
}

static int scaled(cg_graph *g, int x, double f) {
    if (x < 0 || f == 1.0) return x;
    cattr_tensor *t = cx_tensor_alloc(CATTR_FLOAT64, 0, NULL);
    int c = t ? cg_add_const(g, "__cattr_eg_scale", t, true) : -1;
    if (c < 0) {
        cattr_tensor_free(t);
        return -1;
    }
    ((double *)t->data)[0] = f;
    return cx_emit2(g, CG_MUL, "__cattr_eg_scaled", x, c);
}

/* The node reading weight value w, with where it reads it; -1 (and a message) when w is read other than once by a
 * Gemm (weight or bias), a MatMul (its second operand, or through a Transpose: *flip) or an Add (a bias). */
static int only_reader(const cg_graph *g, int v, int *slot, int *count) {
    int node = -1;
    *count = 0;
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_in; j++)
            if (g->nodes[i].in[j] == v) node = i, *slot = j, (*count)++;
    return node;
}

static int reader_of(const cg_graph *g, int w, const char *name, int *slot, bool *flip) {
    int count, node = only_reader(g, w, slot, &count);
    *flip = false;
    const cg_node *t = node >= 0 ? &g->nodes[node] : NULL;
    if (count == 1 && t->op == CG_TRANSPOSE && g->vals[w].data->ndim == 2 &&
        (t->a.n_ints == 0 || (t->a.n_ints == 2 && t->a.ints[0] == 1 && t->a.ints[1] == 0))) {
        /* torch's Linear over more than two dims: MatMul(A, Transpose(W)) */
        int s2, c2, m = only_reader(g, t->out, &s2, &c2);
        if (c2 == 1 && g->nodes[m].op == CG_MATMUL && s2 == 1) node = m, *slot = 1, *flip = true;
    }
    if (count != 1) {
        cx_fail(CATTR_ERR_UNSUPPORTED, "weight '%s' is read by %d nodes; per-example gradients take a weight read once",
                name, count);
        return -1;
    }
    const cg_node *n = &g->nodes[node];
    bool ok = (n->op == CG_GEMM && (*slot == 1 || *slot == 2) && !n->a.trans_a) ||
              (n->op == CG_MATMUL && *slot == 1 && !n->a.trans_a && g->vals[w].data->ndim == 2 &&
               (!*flip || !n->a.trans_b)) ||
              (n->op == CG_ADD && n->n_in == 2);
    if (!ok) {
        cx_fail(CATTR_ERR_UNSUPPORTED, "weight '%s' is read by node '%s' (op %s): per-example gradients are computed for "
                "the weights and biases of Gemm and MatMul (Linear layers) and biases added after them", name, n->name,
                cg_op_names[n->op]);
        return -1;
    }
    return node;
}

/* Example b's gradient of a weight read by node `node` at `slot`, from gY, the gradient at the node's
 * output: [B, *w's shape] (wt: the weight's value, for its shape; flip: the node reads its transpose). */
static int example_grad(cg_graph *g, int node, int slot, bool flip, const cattr_tensor *wt, int gy) {
    const cg_node n = g->nodes[node];
    int64_t dims[CATTR_MAX_DIMS + 1];
    dims[0] = 0;
    for (int d = 0; d < wt->ndim; d++) dims[d + 1] = wt->shape[d];
    if (n.op == CG_ADD || (n.op == CG_GEMM && slot == 2)) { /* a bias: gY summed over the positions */
        int64_t out = wt->numel, r3[3] = {0, -1, out};
        int sum = reduce_axis1(g, reshape(g, gy, 3, r3));
        return reshape(g, scaled(g, sum, n.op == CG_GEMM ? n.a.beta : 1.0), wt->ndim + 1, dims);
    }
    /* Y = op(A) op(W): per example, sum over positions of A_t^T gY_t (W [in, out]) or gY_t^T A_t (W^T: [out, in]) */
    bool tw = n.a.trans_b || flip; /* flip: the node reads W^T (a Transpose's output) */
    int64_t in = tw ? wt->shape[1] : wt->shape[0], out = tw ? wt->shape[0] : wt->shape[1];
    int64_t ra[3] = {0, -1, in}, rg[3] = {0, -1, out};
    int a3 = reshape(g, n.in[0], 3, ra), g3 = reshape(g, gy, 3, rg);
    cg_attrs ta = cg_attrs_default();
    ta.trans_a = 1;
    int in2[2] = {tw ? g3 : a3, tw ? a3 : g3};
    int m = a3 < 0 || g3 < 0 ? -1 : cg_emit(g, CG_MATMUL, "__cattr_eg_outer", in2, 2, &ta);
    return scaled(g, m, n.op == CG_GEMM ? n.a.alpha : 1.0);
}

/* The losses l [B] of output y for labels (an input): 0, -log(y[label]); 1, -log_softmax(y)[label]; 2, the squared
 * error summed over each example's elements. */
static int losses(cg_graph *g, int y, int labels, int kind) {
    if (kind == CATTR_LOSS_MSE) {
        int d = cx_emit2(g, CG_SUB, "__cattr_eg_error", y, labels);
        int64_t r2[2] = {0, -1};
        return reduce_axis1(g, reshape(g, cx_emit2(g, CG_MUL, "__cattr_eg_square", d, d), 2, r2));
    }
    int src = kind == CATTR_LOSS_CROSS_ENTROPY ? emit1(g, CG_LOGSOFTMAX, "__cattr_eg_log_softmax", y, NULL) : y;
    int64_t rows[3] = {0, -1, 1}, flat[1] = {-1};
    int pick = reshape(g, cx_emit2(g, CG_SEQ_PICK, "__cattr_eg_label_value", reshape(g, src, 3, rows), labels), 1, flat);
    if (kind != CATTR_LOSS_CROSS_ENTROPY) pick = emit1(g, CG_LOG, "__cattr_eg_log", pick, NULL);
    return emit1(g, CG_NEG, "__cattr_eg_loss", pick, NULL);
}

static cattr_status build(cattr_explainer *e, int n_p, const char *const *names, int kind, bool against,
                          eg_state **out) {
    eg_state *s = e->example_grads;
    bool same = s && s->n_p == n_p && s->loss == kind && s->against == against;
    for (int k = 0; same && k < n_p; k++) same = !strcmp(s->names[k], names[k]);
    if (same) {
        *out = s;
        return CATTR_OK;
    }
    cx_example_grads_free(e);
    if (!(s = calloc(1, sizeof *s))) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    e->example_grads = s;
    s->loss = kind, s->against = against;
    int extra = 0;
    cattr_status st = cx_consts_new(e->be, e->p.dtype, &s->consts);
    if (st == CATTR_OK) st = cx_derive_clone(e->m->g, 0, NULL, &s->g, &extra);
    cg_graph *g = s->g;
    int w[MAX_P], node[MAX_P], slot[MAX_P], ys[MAX_P], n_y = 0, yk[MAX_P];
    bool flip[MAX_P];
    for (int k = 0; k < n_p && st == CATTR_OK; k++) {
        int id = cg_find_value(g, names[k]);
        if (id < 0 || g->vals[id].kind != CG_VAL_CONST || !g->vals[id].data) {
            st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "parameter %d: the model has no weight named '%s' (cattr info "
                         "lists the modules with weights)", k, names[k]);
            break;
        }
        for (int j = 0; j < k && st == CATTR_OK; j++)
            if (w[j] == id) st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "parameter %d: '%s' is given twice", k, names[k]);
        if (st == CATTR_OK && (node[k] = reader_of(g, id, names[k], &slot[k], &flip[k])) < 0) st = CATTR_ERR_UNSUPPORTED;
        if (st != CATTR_OK) break;
        w[k] = id;
        if (!(s->names[k] = cx_strdup(names[k]))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        s->n_p = k + 1;
        int y = g->nodes[node[k]].out, at = -1;
        for (int j = 0; j < n_y; j++)
            if (ys[j] == y) at = j;
        if (at < 0) ys[at = n_y++] = y;
        yk[k] = at;
    }
    for (int k = 0; k < n_p && st == CATTR_OK; k++)
        if (cg_const_to_input(g, w[k]) < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    int labels = st == CATTR_OK ? cg_add_input(g, "__cattr_eg_labels__") : -1, rows[MAX_P];
    for (int k = 0; against && k < n_p && st == CATTR_OK; k++) {
        char nm[48];
        snprintf(nm, sizeof nm, "__cattr_eg_against_%d", k);
        rows[k] = cg_add_input(g, nm);
    }
    int l = st == CATTR_OK ? losses(g, cx_model_output(e->m), labels, kind) : -1;
    cg_attrs all = cg_attrs_default();
    int total = emit1(g, CG_REDUCE_SUM, "__cattr_eg_total", l, &all);
    cattr_tensor *one = st == CATTR_OK ? cx_tensor_alloc(CATTR_FLOAT64, 0, NULL) : NULL;
    int one_id = one ? cg_add_const(g, "__cattr_eg_one__", one, true) : -1;
    if (one_id < 0) cattr_tensor_free(one);
    else ((double *)one->data)[0] = 1.0;
    if (st == CATTR_OK && (total < 0 || one_id < 0)) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cg_rules rules;
    cg_rules_default(&rules);
    int gys[MAX_P];
    if (st == CATTR_OK) st = cg_autodiff(g, total, one_id, ys, n_y, &rules, gys);
    int dots = -1, self = -1;
    for (int k = 0; k < n_p && st == CATTR_OK; k++) {
        s->grads[k] = example_grad(g, node[k], slot[k], flip[k], e->m->g->vals[w[k]].data, gys[yk[k]]);
        int64_t r2[2] = {0, -1};
        int gf = reshape(g, s->grads[k], 2, r2);
        int q = reduce_axis1(g, cx_emit2(g, CG_MUL, "__cattr_eg_square_norm", gf, gf));
        self = k ? cx_emit2(g, CG_ADD, "__cattr_eg_norms_sum", self, q) : q;
        if (!against) continue;
        int af = reshape(g, rows[k], 2, r2);
        cg_attrs tb = cg_attrs_default();
        tb.trans_b = 1;
        int d = gf < 0 || af < 0 ? -1 : cg_emit(g, CG_MATMUL, "__cattr_eg_dots", (int[]){gf, af}, 2, &tb);
        dots = k ? cx_emit2(g, CG_ADD, "__cattr_eg_dots_sum", dots, d) : d;
    }
    if (st == CATTR_OK && (self < 0 || (against && dots < 0))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int k = 0; k < n_p && st == CATTR_OK; k++)
        if (s->grads[k] < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st != CATTR_OK) {
        cx_example_grads_free(e);
        return st;
    }
    s->dots = dots, s->self = self, s->losses = l;
    *out = s;
    return CATTR_OK;
}

cattr_status cattr_explainer_example_grads(cattr_explainer *e, const cattr_call *call, cattr_loss loss,
                                           const cattr_tensor *labels, int n_params, const char *const *names,
                                           const cattr_tensor *const *params, const cattr_tensor *const *against,
                                           cattr_tensor **grads_out, cattr_tensor **dots_out, cattr_tensor **self_out,
                                           cattr_tensor **loss_out) {
    if (dots_out) *dots_out = NULL;
    if (self_out) *self_out = NULL;
    if (loss_out) *loss_out = NULL;
    if (!e || !call || !labels || !names || n_params < 1)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explainer, call, labels and names are required, with at least one "
                       "parameter");
    if (n_params > MAX_P) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "%d parameters given; at most %d", n_params, MAX_P);
    if (loss != CATTR_LOSS_NLL_OUTPUT && loss != CATTR_LOSS_CROSS_ENTROPY && loss != CATTR_LOSS_MSE)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "loss must be a cattr_loss (got %d)", (int)loss);
    if (!grads_out && !(against && dots_out) && !self_out && !loss_out)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "nothing asked: give grads_out, self_out, or against with dots_out");
    if (!against && dots_out) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "dots_out needs `against`");
    for (int k = 0; k < n_params; k++)
        if (!names[k] || !names[k][0]) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "parameter %d has no name", k);
    cx_call c;
    eg_state *s = NULL;
    cattr_tensor *tmp[2 * MAX_P + 1] = {0}, *res[MAX_P + 3] = {0};
    int n_tmp = 0, n_out = 0;
    cattr_status st = cx_prepare(e, call, &c);
    if (st != CATTR_OK) return st;
    int nm = c.n + c.n_add;
    char s1[128], s2[128];
    if (st == CATTR_OK) st = build(e, n_params, names, (int)loss, against != NULL, &s);
    cx_arg in[CX_RUN_MAX_IN];
    for (int i = 0; st == CATTR_OK && i < s->g->n_inputs; i++) in[i] = (cx_arg){.nd = 0, .dt = c.dt};
    for (int i = 0; i < c.n && st == CATTR_OK; i++) in[i] = cx_arg_of(c.x[i]);
    for (int j = 0; j < c.n_add && st == CATTR_OK; j++) in[c.n + j] = cx_arg_of(c.add[j]);
    for (int k = 0; k < n_params && st == CATTR_OK; k++) { /* the weights: given, or the model's own */
        const cattr_tensor *m = e->m->g->vals[cg_find_value(e->m->g, names[k])].data, *p = params ? params[k] : NULL;
        if (p && !cx_shape_eq(p->ndim, p->shape, m->ndim, m->shape))
            st = cx_fail(CATTR_ERR_SHAPE, "parameter '%s' has shape %s; the model's is %s", names[k],
                         cx_shape_str(p->ndim, p->shape, s1, sizeof s1), cx_shape_str(m->ndim, m->shape, s2, sizeof s2));
        if (st == CATTR_OK) st = cattr_tensor_convert(p ? p : m, c.dt, &tmp[n_tmp]);
        if (st == CATTR_OK) in[nm + k] = cx_arg_of(tmp[n_tmp++]);
    }
    /* the labels: int64 [B] class indices below the output's size per example, or the output's shape for the squared
     * error */
    cx_view ov = {0};
    if (st == CATTR_OK) {
        int y = cx_model_output(e->m);
        cx_job jv = cx_job_for(e, s->g, s->consts);
        jv.plans = CX_PLAN_CACHE_MAX;
        jv.n_in = s->g->n_inputs;
        jv.in = in;
        jv.n_out = 1;
        jv.outs = &y;
        st = cx_run_view(&jv, y, &ov);
    }
    int64_t classes = ov.ndim ? cx_numel(ov.ndim - 1, ov.shape + 1) : 0;
    if (st == CATTR_OK && loss == CATTR_LOSS_MSE && !cx_shape_eq(labels->ndim, labels->shape, ov.ndim, ov.shape))
        st = cx_fail(CATTR_ERR_SHAPE, "labels have shape %s; the squared error takes the output's, %s",
                     cx_shape_str(labels->ndim, labels->shape, s1, sizeof s1), cx_shape_str(ov.ndim, ov.shape, s2, sizeof s2));
    if (st == CATTR_OK && loss != CATTR_LOSS_MSE) {
        st = cattr_tensor_convert(labels, CATTR_INT64, &tmp[n_tmp]);
        if (st == CATTR_OK && tmp[n_tmp]->numel != c.B)
            st = cx_fail(CATTR_ERR_SHAPE, "labels: %lld values for %lld examples (one class index each)",
                         (long long)tmp[n_tmp]->numel, (long long)c.B);
        const int64_t *lv = st == CATTR_OK ? tmp[n_tmp]->data : NULL;
        n_tmp++;
        for (int64_t b = 0; lv && b < c.B && st == CATTR_OK; b++)
            if (lv[b] < 0 || lv[b] >= classes)
                st = cx_fail(CATTR_ERR_TARGET, "labels: example %lld has class %lld; the output has %lld per example",
                             (long long)b, (long long)lv[b], (long long)classes);
        if (st == CATTR_OK) in[nm + n_params] = cx_arg_of(tmp[n_tmp - 1]);
    } else if (st == CATTR_OK) {
        st = cattr_tensor_convert(labels, c.dt, &tmp[n_tmp]);
        if (st == CATTR_OK) in[nm + n_params] = cx_arg_of(tmp[n_tmp++]);
    }
    for (int k = 0; against && k < n_params && st == CATTR_OK; k++) {
        const cattr_tensor *a = against[k], *ref = tmp[k];
        if (!a || a->ndim != ref->ndim + 1 || !cx_shape_eq(a->ndim - 1, a->shape + 1, ref->ndim, ref->shape))
            st = cx_fail(CATTR_ERR_SHAPE, "against %d: give [rows, *%s's shape] (%s)", k, names[k],
                         cx_shape_str(ref->ndim, ref->shape, s1, sizeof s1));
        if (st == CATTR_OK) st = cattr_tensor_convert(a, c.dt, &tmp[n_tmp]);
        if (st == CATTR_OK) in[nm + n_params + 1 + k] = cx_arg_of(tmp[n_tmp++]);
    }
    cx_job j = {0};
    int outs[MAX_P + 3];
    void *dst[MAX_P + 3];
    if (st == CATTR_OK) {
        j = cx_job_for(e, s->g, s->consts);
        j.plans = CX_PLAN_CACHE_MAX;
        j.n_in = s->g->n_inputs;
        j.in = in;
        for (int k = 0; grads_out && k < n_params; k++) outs[n_out++] = s->grads[k];
        if (dots_out) outs[n_out++] = s->dots;
        if (self_out) outs[n_out++] = s->self;
        if (loss_out) outs[n_out++] = s->losses;
        j.n_out = n_out;
        j.outs = outs;
    }
    for (int k = 0; k < n_out && st == CATTR_OK; k++) { /* each output's shape from the plan */
        cx_view v;
        st = cx_run_view(&j, outs[k], &v);
        if (st == CATTR_OK && !(res[k] = cx_tensor_alloc(c.dt, v.ndim, v.shape)))
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK) dst[k] = res[k]->data;
    }
    if (st == CATTR_OK) {
        j.out_host = dst;
        st = cx_run(&j);
    }
    for (int k = 0; k < n_tmp; k++) cattr_tensor_free(tmp[k]);
    cx_call_free(&c);
    if (st != CATTR_OK) {
        for (int k = 0; k < n_out; k++) cattr_tensor_free(res[k]);
        return st;
    }
    int at = 0;
    for (int k = 0; grads_out && k < n_params; k++) grads_out[k] = res[at++];
    if (dots_out) *dots_out = res[at++];
    if (self_out) *self_out = res[at++];
    if (loss_out) *loss_out = res[at++];
    return CATTR_OK;
}
