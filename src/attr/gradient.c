/* gradient.c - Saliency and InputXGradient (Captum semantics, see shared/reference/captum_spec.md section 2): one
 * pass of the model and its gradient. IntegratedGradients is in integrated_gradients.c. */
#include "attr/derive.h"
#include "attr/internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- Saliency and InputXGradient -------------------------------------------------------------------------------- */
/* One derived graph: the model on x_i (and the additional inputs), its gradient seeded with the target mask of the
 * batch, and per input |g| (Saliency, abs), g (Saliency, signed) or g * x (InputXGradient). The inputs go up once and
 * the attributions come down once. */
typedef struct pg_state {
    cg_graph *g;
    int n, n_add;
    int outs[CX_MAX_IN];
    cx_consts *consts;
} pg_state;

static void pg_release(cattr_explainer *e) {
    pg_state *s = e->method_state;
    if (!s) return;
    cx_consts_free(s->consts);
    cg_free(s->g);
    free(s);
    e->method_state = NULL;
}

static cattr_status pg_build(cattr_explainer *e, pg_state *s) {
    const cg_graph *m = e->m->g;
    cg_graph *g = NULL;
    int *map = NULL;
    CX_CHECK(cx_derive_new(m, &g, &map));
    int in_map[2 * CX_MAX_IN], bad = 0;
    for (int k = 0; k < s->n + s->n_add; k++) bad |= (in_map[k] = cg_add_input(g, m->vals[m->inputs[k]].name)) < 0;
    int seed = cg_add_input(g, "__pg_seed");
    cattr_status st = bad || seed < 0 ? cx_fail(CATTR_ERR_NO_MEMORY, "out of memory") : CATTR_OK;
    if (st == CATTR_OK) st = cx_graph_append_model(g, m, in_map, map);
    int grads[CX_MAX_IN];
    if (st == CATTR_OK) st = cg_autodiff(g, map[cx_model_output(e->m)], seed, in_map, s->n, &e->rules, grads);
    for (int i = 0; i < s->n && st == CATTR_OK; i++) {
        if (e->p.method == CATTR_METHOD_INPUT_X_GRADIENT) s->outs[i] = cx_emit2(g, CG_MUL, "__pg_times_input", grads[i], in_map[i]);
        else if (e->p.abs) s->outs[i] = cg_emit(g, CG_ABS, "__pg_abs", &grads[i], 1, NULL);
        else s->outs[i] = grads[i];
        if (s->outs[i] < 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    free(map);
    if (st != CATTR_OK) {
        cg_free(g);
        return st;
    }
    s->g = g;
    return CATTR_OK;
}

static cattr_status plain_gradient(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    pg_state *s = e->method_state;
    if (s && (s->n != c->n || s->n_add != c->n_add)) pg_release(e);
    if (!(s = e->method_state)) {
        if (!(s = calloc(1, sizeof *s))) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        e->method_state = s;
        s->n = c->n;
        s->n_add = c->n_add;
        cattr_status st = pg_build(e, s);
        if (st == CATTR_OK) st = cx_consts_new(e->be, c->dt, &s->consts);
        if (st != CATTR_OK) {
            pg_release(e);
            return st;
        }
    }
    cattr_tensor *seed = NULL;
    CX_CHECK(cx_seed_block(e, c, &seed));
    cx_arg in[2 * CX_MAX_IN + 1];
    void *host[CX_MAX_IN];
    for (int k = 0; k < s->n + s->n_add; k++) in[k] = cx_arg_of(k < s->n ? c->x[k] : c->add[k - s->n]);
    in[s->n + s->n_add] = cx_arg_of(seed);
    cattr_status st = CATTR_OK;
    for (int i = 0; i < c->n && st == CATTR_OK && !c->attr_dev[0]; i++) { /* else: left on the backend */
        attr[i] = cx_tensor_alloc(c->dt, c->x[i]->ndim, c->x[i]->shape);
        if (!attr[i]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else host[i] = attr[i]->data;
    }
    cx_job j = cx_job_for(e, s->g, s->consts);
    j.n_in = s->n + s->n_add + 1;
    j.in = in;
    j.n_out = s->n;
    j.outs = s->outs;
    j.out_host = c->attr_dev[0] ? NULL : host;
    j.out_dev = c->attr_dev[0] ? c->attr_dev : NULL;
    if (st == CATTR_OK) st = cx_run(&j);
    cattr_tensor_free(seed);
    return st;
}

const cx_method cx_method_saliency = {CATTR_METHOD_SALIENCY, false, NULL, plain_gradient,
                                      pg_release};
const cx_method cx_method_input_x_gradient = {CATTR_METHOD_INPUT_X_GRADIENT, false, NULL, plain_gradient, pg_release};
