/* second_order.c - derivatives with respect to the model's weights, to second order (cattr_explainer_param_hvp).
 *
 * The graph: the model's, with the named weights turned into inputs (cg_const_to_input), a seed u of the output's
 * shape and a direction v_k per weight; the weights' gradient g_k of sum(u * F) (cg_autodiff, the standard rules);
 * s = sum_k sum(g_k * v_k); and the gradient of s with respect to the weights and to u (cg_autodiff applied to the
 * gradient graph itself: each gradient op's own rule, as torch's double backward). Since g is linear in u,
 * ds/du = J v (the output's derivative along v), and ds/dw_k = sum_o u_o H(F_o) v (the Hessian-vector product of the
 * seeded output). Built once per explainer and set of weight names; its plans are the runner's. */
#include "attr/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_P 100 /* weights per call: the graph takes 2 x MAX_P + the model's inputs + 1 (CX_PLAN_MAX_IN) */

typedef struct so_state {
    cg_graph *g;
    cx_consts *consts;
    int n_p;
    char *names[MAX_P];
    int y, grads[MAX_P], hv[MAX_P], jv;
} so_state;

void cx_second_order_free(cattr_explainer *e) {
    so_state *s = e->second_order;
    if (!s) return;
    cg_free(s->g);
    cx_consts_free(s->consts);
    for (int k = 0; k < s->n_p; k++) free(s->names[k]);
    free(s);
    e->second_order = NULL;
}

/* A list of the model's weights (constants of more than one element read by a node) for the error message. */
static void weight_names(const cg_graph *g, char *buf, size_t size) {
    size_t at = 0;
    int shown = 0, more = 0;
    buf[0] = 0;
    for (int v = 0; v < g->n_vals; v++) {
        const cg_value *c = &g->vals[v];
        if (c->kind != CG_VAL_CONST || !c->name || !c->data || c->data->numel < 2 || c->name[0] == '_') continue;
        if (shown == 8) {
            more++;
            continue;
        }
        int n = snprintf(buf + at, size - at, "%s'%s'", shown ? ", " : "", c->name);
        if (n < 0 || (size_t)n >= size - at) break;
        at += (size_t)n;
        shown++;
    }
    if (more && at + 32 < size) snprintf(buf + at, size - at, " and %d more", more);
}

static cattr_status build(cattr_explainer *e, int n_p, const char *const *names, so_state **out) {
    so_state *s = e->second_order;
    bool same = s && s->n_p == n_p;
    for (int k = 0; same && k < n_p; k++) same = !strcmp(s->names[k], names[k]);
    if (same) {
        *out = s;
        return CATTR_OK;
    }
    cx_second_order_free(e);
    s = calloc(1, sizeof *s);
    if (!s) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    e->second_order = s;
    cattr_status st = cx_consts_new(e->be, e->p.dtype, &s->consts);
    int extra = 0;
    if (st == CATTR_OK) st = cx_derive_clone(e->m->g, 0, NULL, &s->g, &extra);
    cg_graph *g = s->g;
    int w[MAX_P + 1], v[MAX_P];
    for (int k = 0; k < n_p && st == CATTR_OK; k++) {
        int id = cg_find_value(g, names[k]);
        if (id < 0 || g->vals[id].kind != CG_VAL_CONST) {
            char list[512];
            weight_names(g, list, sizeof list);
            st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "parameter %d: the model has no weight named '%s'%s%s%s", k,
                         names[k], list[0] ? " (its weights: " : "", list, list[0] ? ")" : "");
            break;
        }
        for (int j = 0; j < k && st == CATTR_OK; j++)
            if (w[j] == id) st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "parameter %d: '%s' is given twice", k, names[k]);
        if (st != CATTR_OK) break;
        if (cg_const_to_input(g, id) < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        w[k] = id;
        s->names[k] = cx_strdup(names[k]);
        s->n_p = k + 1;
        if (!s->names[k]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    int u = st == CATTR_OK ? cg_add_input(g, "__cattr_hvp_seed__") : -1;
    for (int k = 0; k < n_p && st == CATTR_OK; k++) {
        char nm[48];
        snprintf(nm, sizeof nm, "__cattr_hvp_direction_%d", k);
        if ((v[k] = cg_add_input(g, nm)) < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK && u < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cg_rules rules;
    cg_rules_default(&rules);
    s->y = cx_model_output(e->m);
    if (st == CATTR_OK) st = cg_autodiff(g, s->y, u, w, n_p, &rules, s->grads);
    int sum = -1;
    if (st == CATTR_OK) { /* s = sum_k ReduceSum(g_k * v_k) over every axis, a scalar */
        cg_attrs all = cg_attrs_default();
        for (int k = 0; k < n_p; k++) {
            int r = cx_emit2(g, CG_MUL, "__cattr_hvp_dot", s->grads[k], v[k]);
            r = r < 0 ? -1 : cg_emit(g, CG_REDUCE_SUM, "__cattr_hvp_dot_sum", &r, 1, &all);
            sum = k == 0 ? r : cx_emit2(g, CG_ADD, "__cattr_hvp_dots", sum, r);
        }
        if (sum < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK) {
        cattr_tensor *one = cx_tensor_alloc(CATTR_FLOAT64, 0, NULL);
        int one_id = one ? cg_add_const(g, "__cattr_hvp_one__", one, true) : -1;
        if (one_id < 0) {
            cattr_tensor_free(one);
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        } else {
            ((double *)one->data)[0] = 1.0;
            int d2[MAX_P + 1];
            w[n_p] = u;
            st = cg_autodiff(g, sum, one_id, w, n_p + 1, &rules, d2);
            if (st == CATTR_OK) {
                memcpy(s->hv, d2, (size_t)n_p * sizeof *d2);
                s->jv = d2[n_p];
            }
        }
    }
    if (st != CATTR_OK) {
        cx_second_order_free(e);
        return st;
    }
    *out = s;
    return CATTR_OK;
}

static cattr_status check_like(const char *what, int k, const cattr_tensor *t, int nd, const int64_t *sh) {
    char s1[128], s2[128];
    if (!t) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "%s %d is missing", what, k);
    if (t->dtype != CATTR_FLOAT32 && t->dtype != CATTR_FLOAT64)
        return cx_fail(CATTR_ERR_DTYPE, "%s %d is %s; give float32 or float64", what, k, cattr_dtype_name(t->dtype));
    if (!cx_shape_eq(t->ndim, t->shape, nd, sh))
        return cx_fail(CATTR_ERR_SHAPE, "%s %d has shape %s; expected %s", what, k,
                       cx_shape_str(t->ndim, t->shape, s1, sizeof s1), cx_shape_str(nd, sh, s2, sizeof s2));
    return CATTR_OK;
}

cattr_status cattr_explainer_param_hvp(cattr_explainer *e, const cattr_call *call, int n_params,
                                       const char *const *names, const cattr_tensor *const *params,
                                       const cattr_tensor *seed, const cattr_tensor *const *directions,
                                       cattr_tensor **grads_out, cattr_tensor **output_out, cattr_tensor **jv_out,
                                       cattr_tensor **hv_out) {
    if (output_out) *output_out = NULL;
    if (jv_out) *jv_out = NULL;
    if (!e || !call || !names || !params || !seed || !grads_out || n_params < 1)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explainer, call, names, params, seed and grads_out are required, "
                       "with at least one parameter");
    if (n_params > MAX_P)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "%d parameters given; at most %d", n_params, MAX_P);
    if (directions && !hv_out)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "directions given without hv_out");
    for (int k = 0; k < n_params; k++)
        if (!names[k] || !names[k][0]) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "parameter %d has no name", k);
    cx_call c;
    so_state *s = NULL;
    cattr_tensor *tmp[2 * MAX_P + 1] = {0}, *res[2 * MAX_P + 2] = {0};
    int n_tmp = 0;
    cattr_status st = cx_prepare(e, call, &c);
    if (st != CATTR_OK) return st;
    int nm = c.n + c.n_add;
    if (nm + 2 * n_params + 1 > 256)
        st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "%d inputs and %d parameters are too many for one graph", nm, n_params);
    if (st == CATTR_OK) st = build(e, n_params, names, &s);
    /* every input of the graph is given; those a run does not read (the seed and directions for the output's shape,
     * the directions for the gradients alone) as scalars */
    cx_arg in[256];
    for (int i = 0; i < nm + 2 * n_params + 1; i++) in[i] = (cx_arg){.nd = 0, .dt = c.dt};
    for (int i = 0; i < c.n && st == CATTR_OK; i++) in[i] = cx_arg_of(c.x[i]);
    for (int j = 0; j < c.n_add && st == CATTR_OK; j++) in[c.n + j] = cx_arg_of(c.add[j]);
    /* the weights, as given (converted to the compute dtype), in place of the model's */
    for (int k = 0; k < n_params && st == CATTR_OK; k++) {
        const cattr_tensor *m = e->m->g->vals[cg_find_value(e->m->g, names[k])].data;
        st = check_like("parameter", k, params[k], m->ndim, m->shape);
        if (st == CATTR_OK) st = cattr_tensor_convert(params[k], c.dt, &tmp[n_tmp]);
        if (st == CATTR_OK) in[nm + k] = cx_arg_of(tmp[n_tmp++]);
    }
    cx_view ov;
    cx_job j = {0};
    if (st == CATTR_OK) {
        j = cx_job_for(e, s->g, s->consts);
        j.plans = CX_PLAN_CACHE_MAX; /* the output's shape, the gradients, the products; a last smaller batch */
        j.n_in = nm + 2 * n_params + 1;
        j.in = in;
        j.n_out = 1;
        j.outs = &s->y;
        st = cx_run_view(&j, s->y, &ov);
    }
    if (st == CATTR_OK) st = check_like("the seed:", 0, seed, ov.ndim, ov.shape);
    if (st == CATTR_OK) st = cattr_tensor_convert(seed, c.dt, &tmp[n_tmp]);
    if (st == CATTR_OK) in[nm + n_params] = cx_arg_of(tmp[n_tmp++]);
    for (int k = 0; directions && k < n_params && st == CATTR_OK; k++) {
        st = check_like("direction", k, directions[k], params[k]->ndim, params[k]->shape);
        if (st == CATTR_OK) st = cattr_tensor_convert(directions[k], c.dt, &tmp[n_tmp]);
        if (st == CATTR_OK) in[nm + n_params + 1 + k] = cx_arg_of(tmp[n_tmp++]);
    }
    /* outputs: the weights' gradients, then with directions their Hessian-vector products and J v, then the output */
    int outs[2 * MAX_P + 2], n_out = 0;
    void *dst[2 * MAX_P + 2];
    for (int k = 0; k < n_params && st == CATTR_OK; k++) {
        res[n_out] = cx_tensor_alloc(c.dt, params[k]->ndim, params[k]->shape);
        outs[n_out++] = s->grads[k];
    }
    for (int k = 0; directions && k < n_params && st == CATTR_OK; k++) {
        res[n_out] = cx_tensor_alloc(c.dt, params[k]->ndim, params[k]->shape);
        outs[n_out++] = s->hv[k];
    }
    if (st == CATTR_OK && directions && jv_out) {
        res[n_out] = cx_tensor_alloc(c.dt, ov.ndim, ov.shape);
        outs[n_out++] = s->jv;
    }
    if (st == CATTR_OK && output_out) {
        res[n_out] = cx_tensor_alloc(c.dt, ov.ndim, ov.shape);
        outs[n_out++] = s->y;
    }
    for (int k = 0; k < n_out && st == CATTR_OK; k++) {
        if (!res[k]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else dst[k] = res[k]->data;
    }
    if (st == CATTR_OK) {
        j.n_out = n_out;
        j.outs = outs;
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
    for (int k = 0; k < n_params; k++) grads_out[k] = res[at++];
    for (int k = 0; directions && k < n_params; k++) hv_out[k] = res[at++];
    if (directions && jv_out) *jv_out = res[at++];
    if (output_out) *output_out = res[at++];
    return CATTR_OK;
}
