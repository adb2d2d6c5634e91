/* derive.c - derived graphs, the plan cache and a call's backend memory (see derive.h). */
#include "attr/derive.h"

#include <stdio.h>
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

cattr_status cx_derive_clone(const cg_graph *m, int n_extra, const char *const *names, cg_graph **g, int *extra) {
    *g = cg_clone(m);
    if (!*g) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int k = 0; k < n_extra; k++) {
        char nm[48];
        snprintf(nm, sizeof nm, "__extra_%d", k);
        extra[k] = cg_add_input(*g, names && names[k] ? names[k] : nm);
        if (extra[k] < 0) {
            cg_free(*g);
            *g = NULL;
            return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        }
    }
    return CATTR_OK;
}

cattr_status cx_graph_append_model(cg_graph *g, const cg_graph *m, const int *in_map, int *map) {
    return cx_graph_append_model_replacing(g, m, in_map, 0, NULL, NULL, map);
}

cattr_status cx_graph_append_model_replacing(cg_graph *g, const cg_graph *m, const int *in_map, int n_rep,
                                             const int *rep, const int *rep_by, int *map) {
    for (int v = 0; v < m->n_vals; v++) map[v] = -1;
    for (int i = 0; i < m->n_inputs; i++) map[m->inputs[i]] = in_map[i];
    int first = -1; /* g's first value that is one of m's constants: a second copy of m shares them */
    for (int v = 0; v < g->n_vals && first < 0; v++)
        if (g->vals[v].kind == CG_VAL_CONST && m->n_vals > 0) {
            for (int u = 0; u < m->n_vals && first < 0; u++)
                if (m->vals[u].kind == CG_VAL_CONST && m->vals[u].data == g->vals[v].data) first = v;
        }
    for (int v = 0, at = first; v < m->n_vals; v++) {
        if (m->vals[v].kind != CG_VAL_CONST) continue;
        /* the constants of an earlier copy lie in m's order from `first`: found in one pass */
        while (at >= 0 && at < g->n_vals && !(g->vals[at].kind == CG_VAL_CONST && g->vals[at].data == m->vals[v].data))
            at++;
        if (at >= 0 && at < g->n_vals) {
            map[v] = at++;
            continue;
        }
        at = -1;
        map[v] = cg_add_const(g, m->vals[v].name, m->vals[v].data, false);
        if (map[v] < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    for (int k = 0; k < n_rep; k++)
        if (m->vals[rep[k]].kind == CG_VAL_INPUT) map[rep[k]] = rep_by[k];
    for (int k = 0; k < m->n_nodes; k++) {
        const cg_node *n = &m->nodes[k];
        int in[CG_MAX_IN];
        for (int j = 0; j < n->n_in; j++) in[j] = n->in[j] < 0 ? -1 : map[n->in[j]];
        int out = cg_add_node(g, n->op, n->name, in, n->n_in, &n->a, m->vals[n->out].name);
        if (out < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        map[n->out] = out;
        for (int r = 0; r < n_rep; r++)
            if (rep[r] == n->out) map[n->out] = rep_by[r]; /* later readers read the replacement */
    }
    return CATTR_OK;
}

void cx_plan_cache_share_arena(cx_plan_cache *pc, cx_backend *be) { pc->arena_be = be; }

/* Lends plan p the shared arena, grown to its size first (no plan may keep the old block). */
static cattr_status lend_arena(cx_plan_cache *pc, cx_plan *p) {
    size_t b = cx_plan_bytes(p);
    if (b > pc->arena_bytes) {
        for (int i = 0; i < CX_PLAN_CACHE_MAX; i++)
            if (pc->e[i].p) cx_plan_use_arena(pc->e[i].p, NULL);
        if (pc->arena) pc->arena_be->free(pc->arena_be->ctx, pc->arena, pc->arena_bytes);
        pc->arena = pc->arena_be->alloc(pc->arena_be->ctx, b);
        pc->arena_bytes = pc->arena ? b : 0;
        if (!pc->arena) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot allocate a %zu-byte activation arena", b);
    }
    cx_plan_use_arena(p, pc->arena);
    return CATTR_OK;
}

cattr_status cx_plan_cache_get(cx_plan_cache *pc, const cg_graph *g, cx_consts *consts, bool eager, const int *nd,
                               const int64_t (*sh)[CATTR_MAX_DIMS], const cattr_dtype *dt, const int *outs, int n_outs,
                               cx_plan **out) {
    int cap = pc->cap > 0 ? (pc->cap < CX_PLAN_CACHE_MAX ? pc->cap : CX_PLAN_CACHE_MAX) : CX_PLAN_CACHE_DEFAULT;
    int lru = 0;
    for (int i = 0; i < cap; i++) {
        if (pc->e[i].p && pc->e[i].n_outs == n_outs && !memcmp(pc->e[i].outs, outs, (size_t)n_outs * sizeof *outs) &&
            cx_plan_matches(pc->e[i].p, nd, sh, dt)) {
            pc->e[i].used = ++pc->clock;
            *out = pc->e[i].p;
            return pc->arena_be && !eager ? lend_arena(pc, *out) : CATTR_OK;
        }
        if (!pc->e[i].p || (pc->e[lru].p && pc->e[i].used < pc->e[lru].used)) lru = i;
    }
    int *o = malloc((size_t)(n_outs > 0 ? n_outs : 1) * sizeof *o);
    if (!o) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    memcpy(o, outs, (size_t)n_outs * sizeof *o);
    cx_plan *p = NULL;
    cattr_status st = cx_plan_new(g, consts, eager, nd, sh, dt, outs, n_outs, &p);
    if (st != CATTR_OK) {
        free(o);
        return st;
    }
    cx_plan_free(pc->e[lru].p);
    free(pc->e[lru].outs);
    pc->e[lru].p = p;
    pc->e[lru].outs = o;
    pc->e[lru].n_outs = n_outs;
    pc->e[lru].used = ++pc->clock;
    *out = p;
    return pc->arena_be && !eager ? lend_arena(pc, p) : CATTR_OK;
}

void cx_plan_cache_clear(cx_plan_cache *pc) {
    for (int i = 0; i < CX_PLAN_CACHE_MAX; i++) {
        cx_plan_free(pc->e[i].p);
        free(pc->e[i].outs);
        pc->e[i].p = NULL;
        pc->e[i].outs = NULL;
    }
    if (pc->arena) pc->arena_be->free(pc->arena_be->ctx, pc->arena, pc->arena_bytes);
    pc->arena = NULL;
    pc->arena_bytes = 0;
}

void cx_derived_free(cx_derived *d) {
    cx_plan_cache_clear(&d->pc);
    cx_consts_free(d->consts);
    cg_free(d->g);
    memset(d, 0, sizeof *d);
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
