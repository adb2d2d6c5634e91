/* graph.c - construction, copying and look-up of the cattr IR (see graph.h). */
#include "graph.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Atomic uint64_t next_uid = 1;
static void (*_Atomic free_hook)(const cg_graph *g);

cg_graph *cg_new(void) {
    cg_graph *g = calloc(1, sizeof(cg_graph));
    if (g) g->uid = atomic_fetch_add(&next_uid, 1);
    return g;
}

void cg_set_free_hook(void (*hook)(const cg_graph *g)) { atomic_store(&free_hook, hook); }

void cg_free(cg_graph *g) {
    if (!g) return;
    void (*hook)(const cg_graph *) = atomic_load(&free_hook);
    if (hook) hook(g);
    for (int i = 0; i < g->n_vals; i++) {
        free(g->vals[i].name);
        if (g->vals[i].owns_data) cattr_tensor_free(g->vals[i].data);
    }
    for (int i = 0; i < g->n_nodes; i++) free(g->nodes[i].name);
    free(g->vals);
    free(g->nodes);
    free(g->inputs);
    free(g->outputs);
    free(g);
}

static int add_value(cg_graph *g, const char *name, cg_value_kind kind) {
    if (g->n_vals == g->cap_vals) {
        int cap = g->cap_vals ? 2 * g->cap_vals : 64;
        cg_value *v = realloc(g->vals, (size_t)cap * sizeof *v);
        if (!v) return -1;
        g->vals = v;
        g->cap_vals = cap;
    }
    int id = g->n_vals;
    cg_value *v = &g->vals[id];
    memset(v, 0, sizeof *v);
    g->rev++;
    char buf[32];
    if (!name) {
        snprintf(buf, sizeof buf, "%%v%d", id);
        name = buf;
    }
    v->name = cx_strdup(name);
    if (!v->name) return -1;
    v->kind = kind;
    v->producer = -1;
    v->input_index = -1;
    g->n_vals++;
    return id;
}

int cg_add_input(cg_graph *g, const char *name) {
    int *in = realloc(g->inputs, (size_t)(g->n_inputs + 1) * sizeof *in);
    if (!in) return -1;
    g->inputs = in;
    int id = add_value(g, name, CG_VAL_INPUT);
    if (id < 0) return -1;
    g->vals[id].input_index = g->n_inputs;
    g->inputs[g->n_inputs++] = id;
    return id;
}

void cg_input_to_const(cg_graph *g, int i, cattr_tensor *t, bool owns) {
    cg_value *v = &g->vals[g->inputs[i]];
    g->rev++;
    v->kind = CG_VAL_CONST;
    v->input_index = -1;
    v->data = t;
    v->owns_data = owns;
    for (int k = i + 1; k < g->n_inputs; k++) {
        g->inputs[k - 1] = g->inputs[k];
        g->vals[g->inputs[k - 1]].input_index = k - 1;
    }
    g->n_inputs--;
}

int cg_const_to_input(cg_graph *g, int v) {
    int *in = realloc(g->inputs, (size_t)(g->n_inputs + 1) * sizeof *in);
    if (!in) return -1;
    g->inputs = in;
    cg_value *c = &g->vals[v];
    if (c->owns_data) cattr_tensor_free(c->data);
    g->rev++;
    c->kind = CG_VAL_INPUT;
    c->data = NULL;
    c->owns_data = false;
    c->input_index = g->n_inputs;
    g->inputs[g->n_inputs++] = v;
    return c->input_index;
}

int cg_add_const(cg_graph *g, const char *name, cattr_tensor *t, bool owns) {
    int id = add_value(g, name, CG_VAL_CONST);
    if (id < 0) return -1;
    g->vals[id].data = t;
    g->vals[id].owns_data = owns;
    return id;
}

int cg_add_node(cg_graph *g, cg_op op, const char *node_name, const int *in, int n_in, const cg_attrs *a,
                const char *out_name) {
    if (n_in > CG_MAX_IN) return -1;
    if (g->n_nodes == g->cap_nodes) {
        int cap = g->cap_nodes ? 2 * g->cap_nodes : 64;
        cg_node *nn = realloc(g->nodes, (size_t)cap * sizeof *nn);
        if (!nn) return -1;
        g->nodes = nn;
        g->cap_nodes = cap;
    }
    int out = add_value(g, out_name, CG_VAL_NODE);
    if (out < 0) return -1;
    cg_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    char buf[64];
    if (!node_name) {
        snprintf(buf, sizeof buf, "%s_%d", cg_op_names[op], g->n_nodes);
        node_name = buf;
    }
    n->name = cx_strdup(node_name);
    if (!n->name) return -1;
    n->op = op;
    n->n_in = n_in;
    for (int i = 0; i < n_in; i++) n->in[i] = in[i];
    n->out = out;
    n->a = a ? *a : cg_attrs_default();
    g->vals[out].producer = g->n_nodes;
    g->n_nodes++;
    return out;
}

int cg_add_output(cg_graph *g, int value) {
    g->rev++;
    int *o = realloc(g->outputs, (size_t)(g->n_outputs + 1) * sizeof *o);
    if (!o) return -1;
    g->outputs = o;
    g->outputs[g->n_outputs++] = value;
    return 0;
}

int cg_find_value(const cg_graph *g, const char *name) {
    for (int i = 0; i < g->n_vals; i++)
        if (strcmp(g->vals[i].name, name) == 0) return i;
    return -1;
}

int cg_mark_bf16(cg_graph *g) {
    int n = 0;
    g->rev++;
    for (int i = 0; i < g->n_nodes; i++) {
        cg_node *nd = &g->nodes[i];
        if ((nd->op != CG_MATMUL && nd->op != CG_GEMM) || nd->n_in < 2 || nd->in[1] < 0) continue;
        const cg_value *w = &g->vals[nd->in[1]];
        if (w->kind != CG_VAL_CONST || !w->data || w->data->ndim != 2 || w->data->dtype == CATTR_INT64) continue;
        if (nd->a.trans_a || nd->a.keep_precision) continue;
        nd->a.bf16 = 1;
        n++;
    }
    return n;
}

cg_graph *cg_clone(const cg_graph *g) {
    cg_graph *c = cg_new();
    if (!c) return NULL;
    c->vals = calloc((size_t)(g->n_vals ? g->n_vals : 1), sizeof *c->vals);
    c->nodes = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *c->nodes);
    c->inputs = calloc((size_t)(g->n_inputs ? g->n_inputs : 1), sizeof(int));
    c->outputs = calloc((size_t)(g->n_outputs ? g->n_outputs : 1), sizeof(int));
    if (!c->vals || !c->nodes || !c->inputs || !c->outputs) goto fail;
    c->cap_vals = g->n_vals ? g->n_vals : 1;
    c->cap_nodes = g->n_nodes ? g->n_nodes : 1;
    for (int i = 0; i < g->n_vals; i++) {
        c->vals[i] = g->vals[i];
        c->vals[i].owns_data = false;
        c->vals[i].name = cx_strdup(g->vals[i].name);
        c->n_vals = i + 1;
        if (!c->vals[i].name) goto fail;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        c->nodes[i] = g->nodes[i];
        c->nodes[i].name = cx_strdup(g->nodes[i].name);
        c->n_nodes = i + 1;
        if (!c->nodes[i].name) goto fail;
    }
    if (g->n_inputs) memcpy(c->inputs, g->inputs, (size_t)g->n_inputs * sizeof(int));
    c->n_inputs = g->n_inputs;
    if (g->n_outputs) memcpy(c->outputs, g->outputs, (size_t)g->n_outputs * sizeof(int));
    c->n_outputs = g->n_outputs;
    return c;
fail:
    cg_free(c);
    return NULL;
}
