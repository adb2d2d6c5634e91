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

void cx_derived_free(cx_derived *d) {
    cx_consts_free(d->consts);
    cg_free(d->g);
    memset(d, 0, sizeof *d);
}
