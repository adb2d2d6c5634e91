/* finite.c - the diagnosis of non-finite values (cx_plan_set_check_finite): the first node of a run whose output
 * holds NaN or Inf, with the source of its inputs' values and their shapes. */
#include "exec/plan_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cx_plan_set_check_finite(cx_plan *p, bool on) { p->check_finite = on; }


/* NF_NAN / NF_INF bits of a float value in backend memory, copied out 1 MiB at a time to look at it; -1 when that
 * buffer cannot be allocated. */
static int scan_value(cx_plan *p, const cx_view *v, const void *data, size_t bytes) {
    if (!data || (v->dtype != CATTR_FLOAT32 && v->dtype != CATTR_FLOAT64) || !bytes) return 0;
    size_t es = cattr_dtype_size(v->dtype), chunk = ((size_t)1 << 20) / es * es;
    void *h = malloc(chunk < bytes ? chunk : bytes);
    if (!h) return -1;
    int bits = 0;
    for (size_t off = 0; off < bytes && bits != (NF_NAN | NF_INF); off += chunk) {
        size_t nb = bytes - off < chunk ? bytes - off : chunk;
        if (cx_pl_be_copy(p->be, p->prof, BE_COPY_OUT, h, (const char *)data + off, nb) != CATTR_OK) break;
        for (size_t i = 0; i < nb / es; i++) {
            double x = es == 4 ? (double)((const float *)h)[i] : ((const double *)h)[i];
            bits |= isnan(x) ? NF_NAN : isinf(x) ? NF_INF : 0;
        }
    }
    free(h);
    return bits;
}

/* "node 'X' (op Y)", or for the gradient nodes autodiff names "<forward node>/grad/<op>_<k>", "node 'X' (op Y, in
 * the backward pass of node 'Z')". */
static void node_desc(const cg_node *n, char *buf, size_t size) {
    const char *gr = strstr(n->name, "/grad/");
    if (gr)
        snprintf(buf, size, "node '%s' (op %s, in the backward pass of node '%.*s')", n->name, cg_op_names[n->op],
                 (int)(gr - n->name), n->name);
    else snprintf(buf, size, "node '%s' (op %s)", n->name, cg_op_names[n->op]);
}

/* A checked run. Per value: its NF_ bits, and where its NaN and its Inf came from: the position of the node that
 * made them from inputs without them (a source), SRC_OUTSIDE for the graph inputs and constants, -1 for none. Per
 * node position, for a NaN source: where the infinite values it was made from came from. */

void cx_pl_fcheck_free(fcheck *fc) {
    free(fc->nf);
    free(fc->nan_src);
    free(fc->inf_src);
    free(fc->nan_from_inf);
    memset(fc, 0, sizeof *fc);
}

static cattr_status fcheck_nomem(fcheck *fc) {
    cx_pl_fcheck_free(fc);
    return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory checking for non-finite values");
}

/* Scans the graph inputs present now and the constants. */
cattr_status cx_pl_fcheck_start(cx_plan *p, fcheck *fc) {
    const cg_graph *g = p->g;
    size_t nv = (size_t)g->n_vals;
    fc->nf = calloc(nv, sizeof *fc->nf);
    fc->nan_src = malloc(nv * sizeof *fc->nan_src);
    fc->inf_src = malloc(nv * sizeof *fc->inf_src);
    fc->nan_from_inf = malloc((size_t)(p->n_order ? p->n_order : 1) * sizeof *fc->nan_from_inf);
    if (!fc->nf || !fc->nan_src || !fc->inf_src || !fc->nan_from_inf) return fcheck_nomem(fc);
    for (int v = 0; v < g->n_vals; v++) {
        fc->nan_src[v] = fc->inf_src[v] = -1;
        if (g->vals[v].kind != CG_VAL_CONST && g->vals[v].kind != CG_VAL_INPUT) continue;
        int b = scan_value(p, &p->views[v], p->views[v].data, p->bytes[v]);
        if (b < 0) return fcheck_nomem(fc);
        fc->nf[v] = b;
        if (b & NF_NAN) fc->nan_src[v] = SRC_OUTSIDE;
        if (b & NF_INF) fc->inf_src[v] = SRC_OUTSIDE;
    }
    return CATTR_OK;
}

/* After node k ran: its output's bits, and the sources they carry. */
cattr_status cx_pl_fcheck_node(cx_plan *p, fcheck *fc, int k) {
    const cg_graph *g = p->g;
    const cg_node *n = &p->nodes[k];
    int b = scan_value(p, &p->views[n->out], p->views[n->out].data, p->bytes[n->out]);
    if (b < 0) return fcheck_nomem(fc);
    int nan_in = -1, inf_in = -1; /* the first input holding NaN, and Inf */
    for (int j = 0; j < n->n_in; j++) {
        int v = n->in[j];
        if (v < 0) continue;
        if (nan_in < 0 && (fc->nf[v] & NF_NAN)) nan_in = v;
        if (inf_in < 0 && (fc->nf[v] & NF_INF)) inf_in = v;
    }
    int out = n->out, ns = -1, is = -1;
    fc->nan_from_inf[k] = -1;
    if (b & NF_NAN) {
        if (nan_in >= 0) ns = fc->nan_src[nan_in];
        else {
            ns = k;
            fc->nan_from_inf[k] = inf_in >= 0 ? fc->inf_src[inf_in] : -1;
        }
    }
    if (b & NF_INF) is = inf_in >= 0 ? fc->inf_src[inf_in] : nan_in >= 0 ? fc->nan_src[nan_in] : k;
    for (int v = 0; v < g->n_vals; v++) /* the output and, for a fused Relu, the Relu's value sharing it */
        if (v == out || (n->a.fuse_relu && p->root[v] == p->root[out])) {
            fc->nf[v] = b;
            fc->nan_src[v] = ns;
            fc->inf_src[v] = is;
        }
    return CATTR_OK;
}

/* "inf first appears at <node>", or that it came in with the inputs or constants. */
static void source_desc(const cx_plan *p, int src, const char *what, char *buf, size_t size) {
    if (src == SRC_OUTSIDE) {
        snprintf(buf, size, "%s comes from the inputs or the constants of the model", what);
        return;
    }
    char d[600];
    node_desc(&p->nodes[src], d, sizeof d);
    snprintf(buf, size, "%s first appears at %s", what, d);
}

/* The checked run's verdict: NaN (else Inf) in an output is an error naming the node that made the NaN (the Inf)
 * which reaches that output from inputs without it, and for a NaN made from infinities, where those came from.
 * Non-finite values that never reach an output (an attention mask of -inf) are not an error. */
cattr_status cx_pl_finite_verdict(const cx_plan *p, const fcheck *fc) {
    int v_nan = -1, v_inf = -1;
    for (int k = 0; k < p->n_outs; k++) {
        int v = p->outs[k];
        if (v_nan < 0 && (fc->nf[v] & NF_NAN)) v_nan = v;
        if (v_inf < 0 && (fc->nf[v] & NF_INF)) v_inf = v;
    }
    char a[800], b[800];
    if (v_nan >= 0) {
        int s = fc->nan_src[v_nan];
        if (s == -1) return cx_fail(CATTR_ERR_NONFINITE, "nan reaches an output by an unknown way");
        source_desc(p, s, "nan", a, sizeof a);
        if (s >= 0 && fc->nan_from_inf[s] != -1) {
            source_desc(p, fc->nan_from_inf[s], "inf", b, sizeof b);
            return cx_fail(CATTR_ERR_NONFINITE, "%s, from infinite values; %s", a, b);
        }
        return cx_fail(CATTR_ERR_NONFINITE, "%s%s", a, s >= 0 ? ", from finite inputs" : "");
    }
    if (v_inf >= 0) {
        int s = fc->inf_src[v_inf];
        if (s == -1) return cx_fail(CATTR_ERR_NONFINITE, "inf reaches an output by an unknown way");
        source_desc(p, s, "inf", a, sizeof a);
        return cx_fail(CATTR_ERR_NONFINITE, "%s%s", a, s >= 0 ? ", from finite inputs" : "");
    }
    return CATTR_OK;
}

/* "[2,3]x[3,4]->[2,3]": the shapes of a node's inputs ("-" for an absent optional one) and of its output, for the
 * profiler (cut with "..." when longer than the buffer). Formatted by hand: snprintf per dimension cost more than
 * the small kernels it describes. */
void cx_pl_shapes_text(const cx_plan *p, const cg_node *n, char *buf, size_t size) {
    size_t k = 0;
    char *end = buf + size - 4; /* room for "..." and the NUL */
#define PUT(ch) (buf + k < end ? (void)(buf[k++] = (ch)) : (void)(k = size))
    for (int j = 0; j <= n->n_in && k < size; j++) {
        const cx_view *v = j == n->n_in ? &p->views[n->out] : n->in[j] >= 0 ? &p->views[n->in[j]] : NULL;
        if (j == n->n_in) PUT('-'), PUT('>');
        else if (j) PUT('x');
        if (!v) {
            PUT('-');
            continue;
        }
        PUT('[');
        for (int d = 0; d < v->ndim && k < size; d++) {
            if (d) PUT(',');
            char dig[24];
            int nd = 0;
            uint64_t x = v->shape[d] < 0 ? (PUT('-'), (uint64_t)0 - (uint64_t)v->shape[d]) : (uint64_t)v->shape[d];
            do dig[nd++] = (char)('0' + x % 10);
            while ((x /= 10) && nd < 24);
            while (nd) PUT(dig[--nd]);
        }
        PUT(']');
    }
#undef PUT
    if (k >= size) memcpy(end, "...", 4);
    else buf[k] = '\0';
}
