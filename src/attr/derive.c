/* derive.c - derived graphs, the plan cache and a call's backend memory (see derive.h). */
#include "attr/derive.h"

#include <stdlib.h>
#include <string.h>

cattr_status cx_derive_new(const cg_graph *m, cg_graph **g, int **map) {
    *g = cg_new();
    *map = malloc((size_t)(m->n_vals ? m->n_vals : 1) * sizeof **map);
    if (*g && *map) return CATTR_OK;
    cg_free(*g);
    free(*map);
    *g = NULL;
    *map = NULL;
    return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
}

cattr_status cx_graph_append_model(cg_graph *g, const cg_graph *m, const int *in_map, int *map) {
    for (int v = 0; v < m->n_vals; v++) map[v] = -1;
    for (int i = 0; i < m->n_inputs; i++) map[m->inputs[i]] = in_map[i];
    for (int v = 0; v < m->n_vals; v++) {
        if (m->vals[v].kind != CG_VAL_CONST) continue;
        map[v] = cg_add_const(g, m->vals[v].name, m->vals[v].data, false);
        if (map[v] < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    for (int k = 0; k < m->n_nodes; k++) {
        const cg_node *n = &m->nodes[k];
        int in[CG_MAX_IN];
        for (int j = 0; j < n->n_in; j++) in[j] = n->in[j] < 0 ? -1 : map[n->in[j]];
        int out = cg_add_node(g, n->op, n->name, in, n->n_in, &n->a, m->vals[n->out].name);
        if (out < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        map[n->out] = out;
    }
    return CATTR_OK;
}

cattr_status cx_plan_cache_get(cx_plan_cache *pc, const cg_graph *g, cx_consts *consts, bool eager, const int *nd,
                               const int64_t (*sh)[CATTR_MAX_DIMS], const cattr_dtype *dt, const int *outs, int n_outs,
                               cx_plan **out) {
    for (int i = 0; i < CX_PLAN_CACHE_SIZE; i++)
        if (pc->p[i] && cx_plan_matches(pc->p[i], nd, sh, dt)) {
            *out = pc->p[i];
            return CATTR_OK;
        }
    cx_plan *p = NULL;
    CX_CHECK(cx_plan_new(g, consts, eager, nd, sh, dt, outs, n_outs, &p));
    cx_plan_free(pc->p[pc->next]);
    pc->p[pc->next] = p;
    pc->next = (pc->next + 1) % CX_PLAN_CACHE_SIZE;
    *out = p;
    return CATTR_OK;
}

void cx_plan_cache_clear(cx_plan_cache *pc) {
    for (int i = 0; i < CX_PLAN_CACHE_SIZE; i++) {
        cx_plan_free(pc->p[i]);
        pc->p[i] = NULL;
    }
    pc->next = 0;
}

cattr_status cx_dbuf_alloc(cx_backend *be, size_t bytes, bool zero, cx_dbuf *out) {
    out->be = be;
    out->bytes = bytes ? bytes : 1;
    out->p = be->alloc(be->ctx, out->bytes);
    if (!out->p) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot allocate %zu bytes on device '%s'", bytes, be->name);
    if (zero) {
        cattr_status st = cx_zero(be, out->p, out->bytes);
        if (st != CATTR_OK) {
            cx_dbuf_free(out);
            return st;
        }
    }
    return CATTR_OK;
}

cattr_status cx_dbuf_upload_raw(cx_backend *be, const void *host, size_t bytes, cx_dbuf *out) {
    CX_CHECK(cx_dbuf_alloc(be, bytes, false, out));
    cattr_status st = bytes ? cx_copy_in(be, out->p, host, bytes) : CATTR_OK;
    if (st != CATTR_OK) cx_dbuf_free(out);
    return st;
}

cattr_status cx_dbuf_upload(cx_backend *be, const cattr_tensor *t, cx_dbuf *out) {
    return cx_dbuf_upload_raw(be, t->data, (size_t)t->numel * cattr_dtype_size(t->dtype), out);
}

void cx_dbuf_free(cx_dbuf *b) {
    if (b->p) b->be->free(b->be->ctx, b->p, b->bytes);
    b->p = NULL;
    b->bytes = 0;
}

cattr_status cx_dbuf_fit(cx_backend *be, cx_dbuf *b, size_t bytes, const void *host, bool zero) {
    if (b->p && b->bytes < bytes) cx_dbuf_free(b);
    if (!b->p) CX_CHECK(cx_dbuf_alloc(be, bytes, false, b));
    if (host && bytes) return cx_copy_in(be, b->p, host, bytes);
    if (zero) return cx_zero(be, b->p, bytes);
    return CATTR_OK;
}
