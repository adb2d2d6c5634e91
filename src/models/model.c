/* model.c - loading models, describing them, resolving value names, a plain forward pass, and the modules holding
 * weights with copies of the model whose weights there are drawn anew (the model-randomisation check). */
#include "models/model.h"

#include "core/rng.h"
#include "exec/run.h"
#include "io/onnx.h"

#include <math.h>
#include <stdio.h>

#define CX_MAX_MODEL_INPUTS 256
#include <stdlib.h>
#include <string.h>

/* A model from a loaded graph (both g and info are consumed). */
static cattr_status model_from_graph(cg_graph *g, cx_onnx_info *info, const char *path, cattr_model **out) {
    cattr_model *m = calloc(1, sizeof *m);
    int n = g->n_inputs;
    if (m) {
        m->in_ndim = calloc((size_t)(n ? n : 1), sizeof *m->in_ndim);
        m->in_shape = calloc((size_t)(n ? n : 1), sizeof *m->in_shape);
        m->in_dtype = calloc((size_t)(n ? n : 1), sizeof *m->in_dtype);
        m->in_batch_axis = calloc((size_t)(n ? n : 1), sizeof *m->in_batch_axis);
        m->path = cx_strdup(path);
    }
    if (!m || !m->in_ndim || !m->in_shape || !m->in_dtype || !m->in_batch_axis || !m->path) {
        cx_onnx_info_free(info);
        cg_free(g);
        cattr_model_free(m);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory loading '%s'", path);
    }
    m->g = g;
    m->opset = info->opset;
    for (int i = 0; i < n; i++) {
        m->in_ndim[i] = cx_onnx_input_shape(info, i, m->in_shape[i]);
        m->in_dtype[i] = info->inputs[i].dtype;
        m->in_batch_axis[i] = cx_onnx_batch_axis(info, i);
    }
    cx_onnx_info_free(info);
    if (g->n_outputs < 1) {
        cattr_model_free(m);
        return cx_fail(CATTR_ERR_FORMAT, "'%s': the model has no output", path);
    }
    cattr_status st = cx_model_rebatch(m);
    if (st != CATTR_OK) {
        cattr_model_free(m);
        return st;
    }
    *out = m;
    return CATTR_OK;
}

cattr_status cattr_model_load_onnx(const char *path, cattr_model **out) {
    if (!out || !path) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_model_load_onnx: NULL argument");
    *out = NULL;
    cg_graph *g = NULL;
    cx_onnx_info *info = NULL;
    CX_CHECK(cx_onnx_load_file_info(path, &g, &info));
    return model_from_graph(g, info, path, out);
}

cattr_status cx_model_load_onnx_buffer(const void *data, size_t size, const char *what, cattr_model **out) {
    *out = NULL;
    cg_graph *g = NULL;
    cx_onnx_info *info = NULL;
    CX_CHECK(cx_onnx_load_buffer_info(data, size, what, &g, &info));
    return model_from_graph(g, info, what, out);
}

void cattr_model_free(cattr_model *m) {
    if (!m) return;
    cg_free(m->g);
    free(m->path);
    free(m->in_ndim);
    free(m->in_shape);
    free(m->in_dtype);
    free(m->in_batch_axis);
    cx_passes_free(m->passes);
    if (m->host) {
        if (m->host->release) m->host->release(m->host->user);
        free(m->host->name);
        free(m->host);
    }
    free(m);
}

/* ---- a forward pass computed by the caller ----------------------------------------------------------------- */

cattr_status cattr_model_new_callback(const char *name, int n_inputs, const char *const *input_names,
                                      const cattr_dtype *input_dtypes, cattr_callback_fn fn,
                                      cattr_callback_shape_fn shape, void *user, void (*release)(void *user),
                                      cattr_model **out) {
    if (out) *out = NULL;
    if (!out || !name || !fn || !shape)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_model_new_callback: %s is NULL",
                       !out ? "out" : !name ? "name" : !fn ? "fn" : "shape");
    if (n_inputs < 1 || n_inputs > CG_MAX_IN)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_model_new_callback ('%s'): n_inputs = %d: it must be from 1 "
                       "to %d", name, n_inputs, CG_MAX_IN);
    if (!input_dtypes) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_model_new_callback ('%s'): input_dtypes is NULL", name);
    for (int i = 0; i < n_inputs; i++)
        if (input_dtypes[i] != CATTR_FLOAT32 && input_dtypes[i] != CATTR_FLOAT64 && input_dtypes[i] != CATTR_INT64)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_model_new_callback ('%s'): input %d has dtype %d (0 float32, "
                           "1 float64, 2 int64)", name, i, (int)input_dtypes[i]);
    cattr_model *m = calloc(1, sizeof *m);
    cg_graph *g = cg_new();
    cg_host_fn *h = calloc(1, sizeof *h);
    if (m) {
        m->in_ndim = malloc((size_t)n_inputs * sizeof *m->in_ndim);
        m->in_shape = calloc((size_t)n_inputs, sizeof *m->in_shape);
        m->in_dtype = malloc((size_t)n_inputs * sizeof *m->in_dtype);
        m->path = cx_strdup(name);
    }
    if (h) h->name = cx_strdup(name);
    bool ok = m && g && h && m->in_ndim && m->in_shape && m->in_dtype && m->path && h->name;
    int in[CG_MAX_IN];
    for (int i = 0; ok && i < n_inputs; i++) {
        char buf[32];
        const char *nm = input_names && input_names[i] ? input_names[i] : (snprintf(buf, sizeof buf, "input%d", i), buf);
        in[i] = cg_add_input(g, nm);
        ok = in[i] >= 0;
        if (ok) {
            m->in_ndim[i] = -1; /* any rank */
            m->in_dtype[i] = input_dtypes[i];
        }
    }
    cg_attrs a = cg_attrs_default();
    a.host = h;
    int y = ok ? cg_add_node(g, CG_HOST_CALL, name, in, n_inputs, &a, "output") : -1;
    if (y < 0 || cg_add_output(g, y) != 0) {
        if (h) free(h->name);
        free(h);
        cg_free(g);
        if (m) m->g = NULL;
        cattr_model_free(m);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory making the model of host function '%s'", name);
    }
    h->fn = fn;
    h->shape = shape;
    h->user = user;
    h->release = release;
    m->g = g;
    m->host = h;
    *out = m;
    return CATTR_OK;
}

cattr_status cx_precision_check(cattr_precision prec, cattr_dtype dt, const cx_backend *be) {
    if (prec != CATTR_PRECISION_HIGHEST && prec != CATTR_PRECISION_HIGH)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "unknown precision %d (0 highest, 1 high)", (int)prec);
    if (prec == CATTR_PRECISION_HIGHEST) return CATTR_OK;
    if (dt != CATTR_FLOAT32)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "precision 'high' (bfloat16 matmul inputs) needs dtype float32");
    if (!be->has_cap || !be->has_cap(be->ctx, CX_CAP_BF16_GEMM))
        return cx_fail(CATTR_ERR_UNSUPPORTED, "precision 'high' needs bfloat16 products, which device '%s' lacks "
                                              "(on the CPU: AVX-512 BF16); use 'highest'", be->name);
    return CATTR_OK;
}

cattr_status cx_model_derive(const cattr_model *m, cattr_model **out) {
    *out = NULL;
    int n_in = m->g->n_inputs;
    cattr_model *v = calloc(1, sizeof *v);
    if (v) {
        v->g = cg_clone(m->g);
        v->path = cx_strdup(m->path ? m->path : "");
        v->in_ndim = malloc((size_t)(n_in ? n_in : 1) * sizeof *v->in_ndim);
        v->in_shape = malloc((size_t)(n_in ? n_in : 1) * sizeof *v->in_shape);
        v->in_dtype = malloc((size_t)(n_in ? n_in : 1) * sizeof *v->in_dtype);
    }
    if (!v || !v->g || !v->path || !v->in_ndim || !v->in_shape || !v->in_dtype) {
        cattr_model_free(v);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (n_in) {
        memcpy(v->in_ndim, m->in_ndim, (size_t)n_in * sizeof *v->in_ndim);
        memcpy(v->in_shape, m->in_shape, (size_t)n_in * sizeof *v->in_shape);
        memcpy(v->in_dtype, m->in_dtype, (size_t)n_in * sizeof *v->in_dtype);
    }
    if (m->in_batch_axis && n_in && (v->in_batch_axis = malloc((size_t)n_in * sizeof *v->in_batch_axis)) == NULL) {
        cattr_model_free(v);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (v->in_batch_axis) memcpy(v->in_batch_axis, m->in_batch_axis, (size_t)n_in * sizeof *v->in_batch_axis);
    v->opset = m->opset;
    v->be = m->be;
    v->batch_exported = m->batch_exported;
    v->batch_rows = m->batch_rows;
    v->batch_rewrites = m->batch_rewrites;
    memcpy(v->batch_note, m->batch_note, sizeof v->batch_note);
    *out = v;
    return CATTR_OK;
}

cattr_status cattr_model_reorder_inputs(const cattr_model *m, const int *order, int n, cattr_model **out) {
    if (!out) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_model_reorder_inputs: NULL out");
    *out = NULL;
    if (!m || (n && !order)) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_model_reorder_inputs: NULL argument");
    int ni = m->g->n_inputs;
    if (n != ni) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "the model has %d inputs; the order has %d", ni, n);
    bool seen[CX_MAX_MODEL_INPUTS] = {0};
    if (ni > CX_MAX_MODEL_INPUTS) return cx_fail(CATTR_ERR_UNSUPPORTED, "more than %d inputs", CX_MAX_MODEL_INPUTS);
    for (int k = 0; k < n; k++) {
        if (order[k] < 0 || order[k] >= ni || seen[order[k]])
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "the order is not a permutation of the %d inputs (entry %d is %d)",
                           ni, k, order[k]);
        seen[order[k]] = true;
    }
    cattr_model *v = NULL;
    CX_CHECK(cx_model_derive(m, &v));
    for (int k = 0; k < n; k++) { /* nodes name values, not positions: the input list alone changes */
        int i = order[k];
        v->g->inputs[k] = m->g->inputs[i];
        v->g->vals[m->g->inputs[i]].input_index = k;
        v->in_ndim[k] = m->in_ndim[i];
        memcpy(v->in_shape[k], m->in_shape[i], sizeof v->in_shape[k]);
        v->in_dtype[k] = m->in_dtype[i];
        if (v->in_batch_axis) v->in_batch_axis[k] = m->in_batch_axis[i];
    }
    *out = v;
    return CATTR_OK;
}

cattr_status cx_model_wrap(const cattr_model *m, cg_graph *g, const int *from, cattr_model **out) {
    *out = NULL;
    int n_in = g->n_inputs;
    cattr_model *v = calloc(1, sizeof *v);
    if (v) {
        v->path = cx_strdup(m->path ? m->path : "");
        v->in_ndim = malloc((size_t)(n_in ? n_in : 1) * sizeof *v->in_ndim);
        v->in_shape = calloc((size_t)(n_in ? n_in : 1), sizeof *v->in_shape);
        v->in_dtype = malloc((size_t)(n_in ? n_in : 1) * sizeof *v->in_dtype);
    }
    if (!v || !v->path || !v->in_ndim || !v->in_shape || !v->in_dtype) {
        cattr_model_free(v);
        cg_free(g);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    v->g = g;
    if (m->in_batch_axis && (v->in_batch_axis = calloc((size_t)(n_in ? n_in : 1), sizeof *v->in_batch_axis)) == NULL) {
        cattr_model_free(v);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    for (int k = 0; k < n_in; k++) {
        int i = from[k];
        v->in_ndim[k] = i >= 0 ? m->in_ndim[i] : -1;
        if (i >= 0) memcpy(v->in_shape[k], m->in_shape[i], sizeof v->in_shape[k]);
        v->in_dtype[k] = i >= 0 ? m->in_dtype[i] : CATTR_FLOAT32;
        if (v->in_batch_axis && i >= 0) v->in_batch_axis[k] = m->in_batch_axis[i];
    }
    v->opset = m->opset;
    v->be = m->be;
    *out = v;
    return CATTR_OK;
}

int cx_model_fold_inputs(const cattr_model *m, bool *fold) {
    const cg_graph *g = m->g;
    int nv = g->n_vals, sp = 0, count = 0;
    for (int k = 0; k < g->n_inputs; k++) fold[k] = false;
    bool *seen = calloc((size_t)nv + 1, sizeof *seen);
    int *stack = malloc(((size_t)nv + 1) * sizeof *stack);
    if (!seen || !stack) {
        free(seen);
        free(stack);
        return -1;
    }
    for (int i = 0; i < g->n_nodes; i++) { /* the values folded: shape inputs and If conditions */
        const cg_node *n = &g->nodes[i];
        for (int j = 0; j < n->n_in; j++) {
            int v = n->in[j];
            if (v >= 0 && !seen[v] && (cx_shape_value_input(n, j) || (n->op == CG_IF && j == 0))) {
                seen[v] = true;
                stack[sp++] = v;
            }
        }
    }
    while (sp > 0) { /* what they are computed from, up to the Shape nodes (which read shapes only) */
        const cg_value *val = &g->vals[stack[--sp]];
        if (val->kind == CG_VAL_INPUT) {
            int k = val->input_index;
            if (m->in_dtype[k] == CATTR_INT64 && !fold[k]) {
                fold[k] = true;
                count++;
            }
            continue;
        }
        if (val->kind != CG_VAL_NODE) continue;
        const cg_node *nd = &g->nodes[val->producer];
        if (nd->op == CG_SHAPE) continue;
        for (int j = 0; j < nd->n_in; j++)
            if (nd->in[j] >= 0 && !seen[nd->in[j]]) {
                seen[nd->in[j]] = true;
                stack[sp++] = nd->in[j];
            }
    }
    free(seen);
    free(stack);
    for (int k = 0; k < g->n_inputs; k++) /* a scalar (a sample rate used as a value) has no batch: one per call */
        if (m->in_ndim[k] == 0 && !fold[k]) {
            fold[k] = true;
            count++;
        }
    return count;
}

cattr_status cx_model_specialize(const cattr_model *m, const bool *fold, const cattr_tensor *const *values,
                                 cattr_model **out) {
    *out = NULL;
    const cg_graph *g0 = m->g;
    for (int k = 0; k < g0->n_inputs; k++)
        if (fold[k]) CX_CHECK(cx_model_check_input(m, k, values[k], "input"));
    cg_graph *g = cg_clone(g0);
    int *from = malloc((size_t)(g0->n_inputs + 1) * sizeof *from);
    if (!g || !from) {
        cg_free(g);
        free(from);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    int n = 0;
    for (int k = 0; k < g0->n_inputs; k++)
        if (!fold[k]) from[n++] = k;
    for (int k = g0->n_inputs - 1; k >= 0; k--) {
        if (!fold[k]) continue;
        cattr_tensor *t = NULL;
        if (cattr_tensor_convert(values[k], m->in_dtype[k] == CATTR_INT64 ? CATTR_INT64 : values[k]->dtype, &t) !=
            CATTR_OK) {
            cg_free(g);
            free(from);
            return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        }
        cg_input_to_const(g, k, t, true);
    }
    cattr_status st = cx_model_wrap(m, g, from, out);
    free(from);
    return st;
}

cattr_status cx_model_with_precision(const cattr_model *m, cattr_precision prec, cattr_dtype dt, const cx_backend *be,
                                     cattr_model **out) {
    *out = NULL;
    CX_CHECK(cx_precision_check(prec, dt, be));
    if (prec == CATTR_PRECISION_HIGHEST) return CATTR_OK;
    cattr_model *v = NULL;
    CX_CHECK(cx_model_derive(m, &v));
    if (cg_mark_bf16(v->g) == 0)
        cx_log(CATTR_LOG_WARN, "precision 'high': model '%s' has no MatMul or Gemm by a constant weight; it computes at "
                               "full precision", m->path ? m->path : "?");
    *out = v;
    return CATTR_OK;
}

int cattr_model_n_inputs(const cattr_model *m) { return m ? m->g->n_inputs : 0; }
const char *cattr_model_input_name(const cattr_model *m, int i) {
    return m && i >= 0 && i < m->g->n_inputs ? m->g->vals[m->g->inputs[i]].name : NULL;
}
int cattr_model_input_shape(const cattr_model *m, int i, int64_t shape[CATTR_MAX_DIMS]) {
    if (!m || i < 0 || i >= m->g->n_inputs) return -1;
    if (m->in_ndim[i] > 0) memcpy(shape, m->in_shape[i], (size_t)m->in_ndim[i] * sizeof(int64_t));
    return m->in_ndim[i];
}
int cattr_model_n_outputs(const cattr_model *m) { return m ? m->g->n_outputs : 0; }
const char *cattr_model_output_name(const cattr_model *m, int i) {
    return m && i >= 0 && i < m->g->n_outputs ? m->g->vals[m->g->outputs[i]].name : NULL;
}

/* ---- module paths ------------------------------------------------------------------------------------------ */

/* Whether a node before nd (in g's order) reads value v. */
static bool read_before(const cg_graph *g, const cg_node *nd, int v) {
    for (const cg_node *p = g->nodes; p < nd; p++)
        for (int j = 0; j < p->n_in; j++)
            if (p->in[j] == v) return true;
    return false;
}

/* PyTorch module path of a node, written to buf; false for nodes outside any module. Exporters from torch 1.13 name
 * nodes by their scopes, "/layer4/layer4.1/conv2/Conv", where a scope is either the child's attribute name or the
 * scope before it, a dot and the child's name ("layer4.1" inside "layer4", "mlp.0" inside "mlp"): the path grows by
 * the child's name -> "layer4.1.conv2", "features.1.0.mlp.0". Older exporters name nodes "Conv_12": their module is
 * the one owning the node's weight ("layer4.1.conv2.weight" -> "layer4.1.conv2"), when the export kept that name (not
 * for nodes of constants only, such as the Identity an exporter writes for a shared weight, nor for a later reader of
 * a weight an earlier node read: a language model's output head tied to its embedding is not the embedding). */
static bool node_module_of(const cg_graph *g, const cg_node *nd, char *buf, size_t size) {
    const char *name = nd->name;
    if (name[0] != '/') {
        bool data = false; /* a node of constants only (an exporter's Identity sharing a weight) is no module's */
        for (int j = 0; g && j < nd->n_in; j++) data |= nd->in[j] >= 0 && g->vals[nd->in[j]].kind != CG_VAL_CONST;
        if (!data) return false;
        for (int j = 0; g && j < nd->n_in; j++) {
            if (nd->in[j] < 0 || g->vals[nd->in[j]].kind != CG_VAL_CONST) continue;
            if (read_before(g, nd, nd->in[j])) continue; /* a shared weight: its module is its first reader's */
            const char *w = g->vals[nd->in[j]].name;
            size_t n = strlen(w);
            const char *suf = n > 7 && !strcmp(w + n - 7, ".weight") ? ".weight" : n > 5 && !strcmp(w + n - 5, ".bias") ? ".bias" : NULL;
            if (!suf || n - strlen(suf) + 1 > size) continue;
            memcpy(buf, w, n - strlen(suf));
            buf[n - strlen(suf)] = 0;
            return true;
        }
        return false;
    }
    const char *last = strrchr(name, '/');
    if (last == name) return false;
    size_t len = 0, pl = 0;
    const char *prev = NULL; /* the scope before: a scope named "<prev>.<child>" is prev's child */
    buf[0] = 0;
    for (const char *p = name + 1; p < last;) {
        const char *e = strchr(p, '/');
        size_t cl = (size_t)(e - p);
        const char *add = p;
        size_t al = cl;
        if (prev && cl > pl && !strncmp(p, prev, pl) && p[pl] == '.') { /* "mlp.0" under "mlp": the child "0" */
            add = p + pl + 1;
            al = cl - pl - 1;
        }
        if (len + (len > 0) + al + 1 > size) return false;
        if (len > 0) buf[len++] = '.';
        memcpy(buf + len, add, al);
        len += al;
        buf[len] = 0;
        prev = p;
        pl = cl;
        p = e + 1;
    }
    return len > 0;
}

static bool node_module(const cg_graph *g, int i, char *buf, size_t size) {
    return node_module_of(g, &g->nodes[i], buf, size);
}

bool cx_conv_bn_folded(const cg_graph *g, int node) {
    const cg_node *n = &g->nodes[node];
    if (n->op != CG_CONV || n->n_in < 2 || n->in[1] < 0) return false;
    int w = n->in[1];
    while (g->vals[w].kind == CG_VAL_NODE && g->nodes[g->vals[w].producer].op == CG_IDENTITY)
        w = g->nodes[g->vals[w].producer].in[0]; /* torch writes shared weights through Identity nodes */
    if (g->vals[w].kind != CG_VAL_CONST) return false;
    const char *name = g->vals[w].name;
    size_t len = strlen(name);
    /* torch names a parameter it exports as it is "<module>.weight"; a weight its constant folding computed (the
     * Conv's weight times the BatchNorm's scale) gets a generated name, "onnx::Conv_193" */
    return !strncmp(name, "onnx::", 6) || !(len > 7 && !strcmp(name + len - 7, ".weight"));
}

/* Output value of the last node inside module `path` (or one of its submodules), or -1. */
static int module_output(const cg_graph *g, const char *path) {
    char mod[512];
    size_t pl = strlen(path);
    int found = -1;
    for (int i = 0; i < g->n_nodes; i++) {
        if (!node_module(g, i, mod, sizeof mod)) continue;
        if (strncmp(mod, path, pl) == 0 && (mod[pl] == 0 || mod[pl] == '.')) found = g->nodes[i].out;
    }
    return found;
}

static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 200 || lb > 200) return (size_t)-1;
    size_t row[201];
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t prev = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t cur = row[j];
            size_t best = prev + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            prev = cur;
        }
    }
    return row[lb];
}

static bool in_module(const cg_graph *g, int i, const char *path, size_t pl) {
    char mod[512];
    return node_module(g, i, mod, sizeof mod) && strncmp(mod, path, pl) == 0 && (mod[pl] == 0 || mod[pl] == '.');
}

int cattr_model_module_values(const cattr_model *m, const char *path, int inputs, const char **names, int max) {
    if (!m || !path) return -1;
    const cg_graph *g = m->g;
    size_t pl = strlen(path);
    int n = 0, seen_module = 0;
    unsigned char *taken = calloc((size_t)g->n_vals + 1, 1); /* values listed already */
    unsigned char *konst = calloc((size_t)g->n_vals + 1, 1); /* values computed from constants only (weights) */
    if (!taken || !konst) {
        free(taken);
        free(konst);
        return -1;
    }
    for (int v = 0; v < g->n_vals; v++) konst[v] = g->vals[v].kind == CG_VAL_CONST;
    for (int i = 0; i < g->n_nodes; i++) { /* nodes are in topological order */
        const cg_node *nd = &g->nodes[i];
        bool all = nd->n_in > 0;
        for (int j = 0; j < nd->n_in && all; j++) all = nd->in[j] < 0 || konst[nd->in[j]];
        if (all) konst[nd->out] = 1;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        if (!in_module(g, i, path, pl)) continue;
        seen_module = 1;
        const cg_node *nd = &g->nodes[i];
        if (inputs) { /* read inside, made outside (a model input or another module's value), in order of first use */
            for (int j = 0; j < nd->n_in; j++) {
                int v = nd->in[j];
                if (v < 0 || konst[v]) continue;
                if (g->vals[v].kind == CG_VAL_NODE && in_module(g, g->vals[v].producer, path, pl)) continue;
                if (taken[v]) continue;
                taken[v] = 1;
                if (names && n < max) names[n] = g->vals[v].name;
                n++;
            }
        } else { /* made inside, read outside (or a model output), in the order of the nodes that make them */
            int v = nd->out;
            bool used = false;
            for (int k = 0; k < g->n_outputs && !used; k++) used = g->outputs[k] == v;
            for (int k = i + 1; k < g->n_nodes && !used; k++) {
                if (in_module(g, k, path, pl)) continue;
                for (int j = 0; j < g->nodes[k].n_in && !used; j++) used = g->nodes[k].in[j] == v;
            }
            if (!used) continue;
            if (names && n < max) names[n] = g->vals[v].name;
            n++;
        }
    }
    free(taken);
    free(konst);
    return seen_module ? n : -1;
}

cattr_status cattr_model_resolve_value(const cattr_model *m, const char *name, const char **onnx) {
    if (!m || !name || !onnx) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_model_resolve_value: NULL argument");
    const cg_graph *g = m->g;
    int v = cg_find_value(g, name);
    if (v < 0) v = module_output(g, name);
    if (v >= 0) {
        *onnx = g->vals[v].name;
        return CATTR_OK;
    }
    /* suggest the three closest module paths or value names */
    const char *best[3] = {0};
    size_t bd[3] = {(size_t)-1, (size_t)-1, (size_t)-1};
    char mod[512];
    for (int i = 0; i < g->n_nodes + g->n_vals; i++) {
        const char *cand;
        if (i < g->n_nodes) {
            if (!node_module(g, i, mod, sizeof mod)) continue;
            cand = mod;
        } else {
            cand = g->vals[i - g->n_nodes].name;
        }
        size_t d = edit_distance(name, cand);
        for (int k = 0; k < 3; k++) {
            if (best[k] && strcmp(best[k], cand) == 0) break;
            if (d < bd[k]) {
                for (int t = 2; t > k; t--) {
                    bd[t] = bd[t - 1];
                    best[t] = best[t - 1];
                }
                bd[k] = d;
                best[k] = i < g->n_nodes ? g->nodes[i].name : cand; /* node name is stable storage */
                break;
            }
        }
    }
    char sugg[1024] = "";
    size_t off = 0;
    for (int k = 0; k < 3 && best[k]; k++) {
        const char *s = best[k];
        char tmp[512];
        cg_node nn = {0};
        nn.name = (char *)s;
        if (s[0] == '/' && node_module_of(NULL, &nn, tmp, sizeof tmp)) s = tmp;
        off += (size_t)snprintf(sugg + off, off < sizeof sugg ? sizeof sugg - off : 0, "%s'%s'", k ? ", " : "", s);
    }
    if (m->passes)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "no layer or value named '%s' in '%s': the model was exported with a "
                       "fixed batch of %lld and could not be re-batched (%s), so it runs in passes and only its inputs "
                       "and outputs are in reach; export it with dynamic_axes for the batch", name, m->path,
                       (long long)m->batch_exported, m->batch_note);
    return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "no layer or value named '%s' in '%s'%s%s%s", name, m->path,
                   off ? " (closest: " : "", sugg, off ? ")" : "");
}

/* ---- description ------------------------------------------------------------------------------------------- */

typedef struct {
    char *buf;
    size_t size, len;
} sbuf;

static void sb_printf(sbuf *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(s->buf ? s->buf + (s->len < s->size ? s->len : s->size) : NULL,
                      s->len < s->size ? s->size - s->len : 0, fmt, ap);
    va_end(ap);
    if (n > 0) s->len += (size_t)n;
}

size_t cattr_model_describe(const cattr_model *m, char *buf, size_t size) {
    sbuf s = {buf, size, 0};
    if (buf && size) buf[0] = 0;
    if (!m) return 0;
    const cg_graph *g = m->g;
    char sh[256];
    if (m->host) sb_printf(&s, "model: %s (a host function)\ninputs:\n", m->path);
    else sb_printf(&s, "model: %s (ONNX opset %d)\ninputs:\n", m->path, m->opset);
    for (int i = 0; i < g->n_inputs; i++) {
        if (m->in_ndim[i] >= 0) {
            cx_shape_str(m->in_ndim[i], m->in_shape[i], sh, sizeof sh);
            for (char *c = sh; (c = strstr(c, "-1")) != NULL;) { /* show dynamic dims as '?' */
                c[0] = '?';
                memmove(c + 1, c + 2, strlen(c + 2) + 1);
            }
        } else {
            snprintf(sh, sizeof sh, "(unknown shape)");
        }
        sb_printf(&s, "  %d: %s %s %s", i, g->vals[g->inputs[i]].name, cattr_dtype_name(m->in_dtype[i]), sh);
        if (cx_model_batch_axis(m, i)) sb_printf(&s, " (the batch on dim %d)", cx_model_batch_axis(m, i));
        sb_printf(&s, "\n");
    }
    if (m->batch_exported && !m->batch_rows)
        sb_printf(&s, "batch: exported fixed at %lld; re-batched (%d shapes and shared values made to follow the "
                      "batch): any batch runs in one pass\n", (long long)m->batch_exported, m->batch_rewrites);
    else if (m->batch_rows)
        sb_printf(&s, "batch: exported fixed at %lld and not re-batched (%s): %s\n", (long long)m->batch_exported,
                  m->batch_note, m->passes ? "batched work runs in passes of the exported batch, each planned once; "
                                             "layers and methods with their own backward rules are out of reach"
                                           : "only calls of the exported batch run");
    sb_printf(&s, "outputs:\n");
    for (int i = 0; i < g->n_outputs; i++) sb_printf(&s, "  %d: %s\n", i, g->vals[g->outputs[i]].name);
    int counts[CG_OP_COUNT] = {0};
    for (int i = 0; i < g->n_nodes; i++) counts[g->nodes[i].op]++;
    sb_printf(&s, "ops (%d nodes):", g->n_nodes);
    for (int op = 0; op < CG_OP_COUNT; op++)
        if (counts[op]) sb_printf(&s, " %s x%d", cg_op_names[op], counts[op]);
    sb_printf(&s, "\nlayers (module path -> ONNX value, shape for one example):\n");
    /* shapes: a plan (never run) for one example of the declared input shapes */
    cx_consts *cc = NULL;
    cx_plan *pl = NULL;
    cx_backend *be = NULL;
    {
        int nd[16];
        int64_t sh[16][CATTR_MAX_DIMS];
        bool known = g->n_inputs <= 16;
        for (int i = 0; known && i < g->n_inputs; i++) {
            nd[i] = m->in_ndim[i];
            known = nd[i] >= 0;
            for (int d = 0; known && d < nd[i]; d++) sh[i][d] = m->in_shape[i][d] < 0 ? 1 : m->in_shape[i][d];
        }
        int *outs = malloc((size_t)(g->n_nodes ? g->n_nodes : 1) * sizeof *outs);
        for (int i = 0; outs && i < g->n_nodes; i++) outs[i] = g->nodes[i].out;
        if (known && outs && cx_model_backend(m, &be) == CATTR_OK && cx_consts_new(be, CATTR_FLOAT32, &cc) == CATTR_OK &&
            cx_plan_new(g, cc, true, nd, (const int64_t(*)[CATTR_MAX_DIMS])sh, m->in_dtype, outs, g->n_nodes, &pl) != CATTR_OK)
            pl = NULL;
        free(outs);
    }
    char mod[512], prev[512] = "";
    for (int i = 0; i < g->n_nodes; i++) {
        if (!node_module(g, i, mod, sizeof mod) || strcmp(mod, prev) == 0) continue;
        /* list each module once, at its last node */
        int out = module_output(g, mod);
        if (out != g->nodes[i].out) {
            bool later = false;
            for (int j = i + 1; j < g->n_nodes; j++) {
                char m2[512];
                if (node_module(g, j, m2, sizeof m2) && strcmp(m2, mod) == 0) later = true;
            }
            if (later) continue;
        }
        snprintf(prev, sizeof prev, "%s", mod);
        char shs[128] = "";
        if (pl) {
            const cx_view *v = cx_plan_view(pl, out);
            if (v->ndim > 0) cx_shape_str(v->ndim - 1, v->shape + 1, shs, sizeof shs);
        }
        int prod = g->vals[out].producer;
        bool folded = prod >= 0 && cx_conv_bn_folded(g, prod);
        sb_printf(&s, "  %-28s %-36s %-14s (%s%s)\n", mod, g->vals[out].name, shs, cg_op_names[g->nodes[i].op],
                  folded ? "; a BatchNorm folded in by the export" : "");
    }
    bool any_folded = false;
    for (int i = 0; i < g->n_nodes && !any_folded; i++) any_folded = cx_conv_bn_folded(g, i);
    if (any_folded)
        sb_printf(&s, "note: the export folded BatchNorms into their Convs (constant folding): such a Conv's output is "
                      "the BatchNorm's; export with do_constant_folding=False, or in training mode, to keep the layer "
                      "boundary\n");
    cx_plan_free(pl);
    cx_consts_free(cc);
    return s.len;
}

cattr_status cx_model_check_input(const cattr_model *m, int i, const cattr_tensor *x, const char *what) {
    const char *name = m->g->vals[m->g->inputs[i]].name;
    char s1[128], s2[128];
    if (x->dtype == CATTR_INT64 && m->in_dtype[i] != CATTR_INT64)
        return cx_fail(CATTR_ERR_DTYPE, "%s %d ('%s') is int64; the model expects float values", what, i, name);
    int dn = m->in_ndim[i];
    if (dn < 0) return CATTR_OK;
    bool ok = dn == x->ndim;
    for (int d = 0; ok && d < dn; d++) ok = m->in_shape[i][d] < 0 || m->in_shape[i][d] == x->shape[d];
    if (!ok) {
        cx_shape_str(dn, m->in_shape[i], s1, sizeof s1);
        for (char *c = s1; (c = strstr(c, "-1")) != NULL;) { /* dynamic dims as '?' */
            c[0] = '?';
            memmove(c + 1, c + 2, strlen(c + 2) + 1);
        }
        return cx_fail(CATTR_ERR_SHAPE, "%s %d ('%s') has shape %s; the model expects %s (? = any size)", what, i, name,
                       cx_shape_str(x->ndim, x->shape, s2, sizeof s2), s1);
    }
    return CATTR_OK;
}

/* ---- forward ----------------------------------------------------------------------------------------------- */

cattr_status cattr_model_forward(const cattr_model *m, cattr_dtype dtype, const cattr_tensor *const *inputs,
                                 int n_inputs, cattr_tensor **out) {
    if (!m || !out || (n_inputs && !inputs)) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_model_forward: NULL");
    *out = NULL;
    if (dtype != CATTR_FLOAT32 && dtype != CATTR_FLOAT64)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "compute dtype must be float32 or float64");
    const cg_graph *g = m->g;
    if (n_inputs != g->n_inputs)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "the model has %d inputs; %d given", g->n_inputs, n_inputs);
    cx_arg in[16];
    cattr_tensor *conv[16] = {0};
    cattr_status st = CATTR_OK;
    if (n_inputs > 16) return cx_fail(CATTR_ERR_UNSUPPORTED, "more than 16 inputs");
    for (int i = 0; i < n_inputs; i++)
        if (!inputs[i]) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "input %d is NULL", i);
    bool fold[16];
    int n_fold = cx_model_fold_inputs(m, fold);
    if (n_fold < 0) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (n_fold > 0) { /* integer inputs that give shapes or If conditions: the model for their values */
        cattr_model *sm = NULL;
        const cattr_tensor *rest[16];
        int n_rest = 0;
        for (int i = 0; i < n_inputs; i++)
            if (!fold[i]) rest[n_rest++] = inputs[i];
        st = cx_model_specialize(m, fold, inputs, &sm);
        if (st == CATTR_OK) st = cattr_model_forward(sm, dtype, rest, n_rest, out);
        cattr_model_free(sm);
        return st;
    }
    for (int i = 0; i < n_inputs && st == CATTR_OK; i++) {
        const cattr_tensor *t = inputs[i];
        if (!t) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "input %d is NULL", i);
        if (t->numel == 0)
            return cx_fail(CATTR_ERR_SHAPE, "input %d ('%s') has no elements (%s)", i, g->vals[g->inputs[i]].name,
                           t->ndim && t->shape[0] == 0 ? "0 rows: an empty batch" : "a dimension of size 0");
        CX_CHECK(cx_model_check_input(m, i, t, "input"));
        in[i] = cx_arg_of(t);
        in[i].dt = t->dtype == CATTR_INT64 ? CATTR_INT64 : dtype;
        if (t->dtype != in[i].dt) {
            st = cattr_tensor_convert(t, in[i].dt, &conv[i]);
            if (st == CATTR_OK) in[i].host = conv[i]->data;
        }
    }
    cx_consts *c = NULL;
    cattr_tensor *res = NULL;
    int outv = cx_model_output(m);
    cx_backend *be = NULL;
    cx_view v;
    if (st == CATTR_OK) st = cx_model_backend(m, &be);
    if (st == CATTR_OK) st = cx_consts_new(be, dtype, &c);
    cx_job j = {.g = g, .consts = c, .n_in = n_inputs, .in = in, .n_out = 1, .outs = &outv};
    if (st == CATTR_OK) st = cx_run_view(&j, outv, &v);
    if (st == CATTR_OK && !(res = cx_tensor_alloc(v.dtype, v.ndim, v.shape)))
        st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) {
        void *dst = res->data;
        j.out_host = &dst;
        st = cx_run(&j);
    }
    cx_consts_free(c);
    for (int i = 0; i < n_inputs; i++) cattr_tensor_free(conv[i]);
    if (st != CATTR_OK) {
        cattr_tensor_free(res);
        return st;
    }
    *out = res;
    return CATTR_OK;
}

cattr_status cx_model_backend(const cattr_model *m, cx_backend **out) {
    if (m && m->be) {
        *out = m->be;
        return CATTR_OK;
    }
    return cx_backend_by_name(NULL, out);
}

cattr_status cattr_model_set_device(cattr_model *m, const char *device) {
    if (!m) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_model_set_device: model is NULL");
    cx_backend *be = NULL;
    CX_CHECK(cx_backend_by_name(device, &be));
    m->be = be;
    return CATTR_OK;
}

cattr_status cattr_device_check(const char *device) {
    cx_backend *be = NULL;
    return cx_backend_by_name(device, &be);
}

const char *cattr_device_names(void) { return cx_backend_names(); }

/* ---- weights by module: the model-randomisation check ---------------------------------------------------------- */

/* Whether value v is a weight: a float constant of 2 elements or more. */
static bool is_weight(const cg_value *val) {
    return val->kind == CG_VAL_CONST && val->data && val->data->numel >= 2 &&
           (val->data->dtype == CATTR_FLOAT32 || val->data->dtype == CATTR_FLOAT64);
}

/* The modules owning weights, in the order of their first use (a weight's module is its first reader's): a new array
 * of *n paths (caller frees), NULL when out of memory. */
static char (*weight_modules(const cg_graph *g, int *n))[256] {
    unsigned char *seen = calloc((size_t)g->n_vals + 1, 1);
    char (*mods)[256] = malloc((size_t)(g->n_nodes + 1) * sizeof *mods); /* at most one module a node */
    *n = 0;
    char mod[256];
    for (int i = 0; seen && mods && i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_in; j++) {
            int v = g->nodes[i].in[j];
            if (v < 0 || seen[v] || !is_weight(&g->vals[v])) continue;
            seen[v] = 1;
            if (!node_module(g, i, mod, sizeof mod)) continue;
            bool have = false;
            for (int k = 0; k < *n && !have; k++) have = !strcmp(mods[k], mod);
            if (!have) snprintf(mods[(*n)++], sizeof mods[0], "%s", mod);
        }
    if (!seen) {
        free(mods);
        mods = NULL;
    }
    free(seen);
    return mods;
}

int cattr_model_n_weight_modules(const cattr_model *m) {
    int n = 0;
    free(m ? weight_modules(m->g, &n) : NULL);
    return n;
}

const cattr_tensor *cattr_model_weight(const cattr_model *m, const char *name) {
    int v = m && name ? cg_find_value(m->g, name) : -1;
    return v >= 0 && m->g->vals[v].kind == CG_VAL_CONST ? m->g->vals[v].data : NULL;
}

int cattr_model_module_weights(const cattr_model *m, const char *path, const char **names, int max) {
    if (!m) return 0;
    const cg_graph *g = m->g;
    unsigned char *seen = calloc((size_t)g->n_vals + 1, 1);
    size_t pl = path ? strlen(path) : 0;
    int n = 0;
    char mod[256];
    for (int i = 0; seen && i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_in; j++) {
            int v = g->nodes[i].in[j];
            if (v < 0 || seen[v] || !is_weight(&g->vals[v])) continue;
            seen[v] = 1; /* a weight's module is its first reader's */
            if (pl && (!node_module(g, i, mod, sizeof mod) || strncmp(mod, path, pl) || (mod[pl] && mod[pl] != '.')))
                continue;
            if (names && n < max) names[n] = g->vals[v].name;
            n++;
        }
    free(seen);
    return n;
}

size_t cattr_model_weight_module(const cattr_model *m, int k, char *buf, size_t size) {
    int n = 0;
    char (*mods)[256] = m ? weight_modules(m->g, &n) : NULL;
    int len = snprintf(buf, size, "%s", mods && k >= 0 && k < n ? mods[k] : "");
    free(mods);
    return len < 0 ? 0 : (size_t)len;
}

cattr_status cattr_model_randomize(const cattr_model *m, const char *const *modules, int n, uint64_t seed,
                                   cattr_model **out) {
    if (out) *out = NULL;
    if (!m || !out || n < 0 || (n > 0 && !modules))
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "model, modules (n >= 0) and out are required");
    bool *hit = calloc((size_t)n + 1, sizeof *hit);
    unsigned char *seen = calloc((size_t)m->g->n_vals + 1, 1);
    cattr_model *r = NULL;
    cattr_status st = hit && seen ? cx_model_derive(m, &r) : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cg_graph *g = r ? r->g : NULL;
    char mod[256];
    int64_t ordinal = 0; /* the weight's ordinal in the order of first use: its stream */
    for (int i = 0; st == CATTR_OK && i < g->n_nodes; i++)
        for (int j = 0; st == CATTR_OK && j < g->nodes[i].n_in; j++) {
            int v = g->nodes[i].in[j];
            if (v < 0 || seen[v] || !is_weight(&g->vals[v])) continue;
            seen[v] = 1;
            uint64_t stream = (uint64_t)ordinal++;
            if (!node_module(g, i, mod, sizeof mod)) continue;
            bool take = false;
            for (int k = 0; k < n; k++) {
                size_t pl = modules[k] ? strlen(modules[k]) : 0;
                if (pl && !strncmp(mod, modules[k], pl) && (mod[pl] == 0 || mod[pl] == '.')) take = hit[k] = true;
            }
            if (!take) continue;
            const cattr_tensor *w = g->vals[v].data;
            double s = 0, s2 = 0;
            for (int64_t e = 0; e < w->numel; e++) s += cx_tensor_get(w, e);
            double mean = s / (double)w->numel;
            for (int64_t e = 0; e < w->numel; e++) s2 += (cx_tensor_get(w, e) - mean) * (cx_tensor_get(w, e) - mean);
            double sd = sqrt(s2 / (double)w->numel);
            cattr_tensor *nw = cx_tensor_alloc(w->dtype, w->ndim, w->shape);
            if (!nw) {
                st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
                break;
            }
            cx_rng rng;
            cx_rng_init(&rng, seed, stream);
            for (int64_t e = 0; e < w->numel; e++) cx_tensor_set(nw, e, mean + sd * cx_rng_normal(&rng));
            if (g->vals[v].owns_data) cattr_tensor_free(g->vals[v].data);
            g->vals[v].data = nw;
            g->vals[v].owns_data = true;
            cg_touch(g);
        }
    for (int k = 0; st == CATTR_OK && k < n; k++)
        if (!hit[k])
            st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "the model has no weights in a module '%s' (see `cattr info`: "
                         "the modules with weights)", modules[k] ? modules[k] : "(null)");
    free(hit);
    free(seen);
    if (st != CATTR_OK) {
        cattr_model_free(r);
        return st;
    }
    *out = r;
    return CATTR_OK;
}
