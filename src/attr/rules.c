/* rules.c - backward rules that replace the gradient's, and the methods made of them alone: GuidedBackprop,
 * Deconvolution and LRP (DeepLift and DeepLiftShap, which also pair the inputs with baselines, are in deeplift.c)
 * (Captum semantics: shared/reference/captum_spec.md sections 2, 8 and 14; shared/golden/README.md section 5).
 *
 * Captum implements these methods with hooks on PyTorch modules. For a hooked module M with input tensor X and
 * output Y (captum._utils.common._register_backward_hook):
 *   - a hook on Y records grad_out, the gradient of Y as it arrives, before any hook that a later module put on
 *     the same tensor (hooks run in registration order, which is forward order);
 *   - a hook on X replaces the *total* gradient of X (all of X's readers summed) by the method's rule, given that
 *     total and grad_out.
 * LRP layers add two more tensor hooks: the gradient of Y is divided by (Y + eps * sign(Y)), and the total gradient
 * of each input tensor is multiplied by the input (once per tensor, by the first layer that reads it).
 *
 * On the graph, a node's backward rule gets gy, the summed gradient of its output. Changes to a value's total
 * gradient ("xforms") are registered by the value's readers and applied by the value's producer, in forward order
 * of the readers; the producer's own rule then sees both gy (what Captum's grad_out recorded) and the changed
 * gradient (what flows on). This matters when hooked modules follow each other (ReLU -> MaxPool: the ReLU's rescale
 * multiplier uses the max-pool gradient before DeepLift's max-pool rule replaced it). A value autodiff differentiates
 * against (an attributed input, a layer of LayerLRP) has no producer that autodiff visits: its xforms are applied to
 * its summed gradient by cg_rules.wrt_grad (rules_wrt_grad). So every node of the model goes through rule_wrapper: it
 * applies the pending xforms of the node's output, then runs the node's rule or the standard one.
 *
 * LRP's layers are Captum's modules: one node, or several (a Linear exported as Transpose + MatMul of its weight, or
 * as MatMul + Add of its bias; every node of a module given by its path), see rules_state.
 *
 * DeepLift runs the model on [x; x'] (2B rows) and its ops (CG_DL_*, see graph.h) pair row r with row r + B.
 * DeepLiftShap pairs every example with every baseline and reruns DeepLift on B * n_baselines rows.
 */
#include "attr/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- rules and their state --------------------------------------------------------------------------------- */

typedef enum rule_kind {
    RULE_NONE = 0,
    RULE_DL_NONLINEAR, /* Relu, LeakyRelu, Sigmoid, Tanh: rescale */
    RULE_DL_MAXPOOL,
    RULE_DL_SOFTMAX,
    RULE_GUIDED_RELU,
    RULE_DECONV_RELU,
    RULE_LRP_EPSILON,
    RULE_LRP_GAMMA,
    RULE_LRP_ALPHA1_BETA0,
    RULE_LRP_IDENTITY,
    RULE_LRP_PASS,   /* relevance passes through a nonlinearity unchanged */
    RULE_LRP_REFUSE, /* LRP has no rule for the node's op: an error naming it when the relevance reaches it */
} rule_kind;

typedef struct node_rule {
    rule_kind kind;
    double eps, gamma; /* LRP stabiliser and GammaRule's gamma */
    bool zero_bias;
} node_rule;

/* A change to the total gradient of `value`, registered by its reader `node`. */
typedef enum xf_kind {
    XF_DL_RESCALE, /* DL_RESCALE(t, a0 = grad_out, a1 = dY, a2 = dX) */
    XF_DL_SOFTMAX, /* DL_CENTER of the above */
    XF_DL_MAXPOOL, /* DL_MAXPOOL(a0 = X, a1 = Y, a2 = grad_out, t) with node's pool attributes */
    XF_RELU,       /* relu(t) */
    XF_REPLACE,    /* a0 */
    XF_MUL_SELF,   /* t * value */
} xf_kind;

typedef struct xform {
    int value, node;
    xf_kind kind;
    int a[3];
    double eps;
} xform;

/* LRP layers. Captum hooks a module: the gradient of its output is divided by the output (+ eps sign), and the total
 * gradient of each of its input tensors is multiplied by the input. An LRP layer here is the nodes of one such
 * module: one node (Gemm, Conv, a MatMul with a constant weight, a pool, BatchNormalization, an Add), a Linear
 * exported as MatMul + Add of its bias, or every node of a module named by its path. Its nodes are numbered by its
 * tail, the node that makes the layer's output. */
typedef struct rules_state {
    cattr_dtype dt;
    double dl_eps;
    int n_nodes;         /* of the model graph; the gradient graph is a clone with the same node and value ids */
    int n_vals;
    int node_base;       /* where the model's nodes start in the graph being differentiated (cx_rules_bind) */
    node_rule *rule;     /* per node; an LRP layer's rule is on its tail */
    int *layer_of;       /* per node: the tail of the LRP layer it belongs to, else -1 */
    int *first_of;       /* per tail: the layer's first node */
    int *lrp_owner;      /* per value: the tail of the first LRP layer (graph order) that has it as an input, else -1 */
    unsigned char *konst; /* per value: a constant or computed from constants only (a weight, its Transpose) */
    cg_rules std;        /* the standard rules */
    /* per cg_autodiff run */
    const cg_graph *run_g;
    int last_ni;
    bool emit_failed;
    xform *xf;
    int n_xf, cap_xf;
    int *clone_of; /* LRP: per node of a layer whose rule changes its weights, its copy's output (Captum's 2nd pass) */
    int *tail_gy;  /* LRP: per tail, the gradient that reached the layer's output */
    struct dls_graph *dls; /* DeepLiftShap's derived graph (deeplift_shap), when the method is DeepLiftShap */
} rules_state;


static bool is_lrp_layer(rule_kind k) {
    return k == RULE_LRP_EPSILON || k == RULE_LRP_GAMMA || k == RULE_LRP_ALPHA1_BETA0 || k == RULE_LRP_IDENTITY;
}

#define CHAIN_MAX 8

/* The constant behind value v through layout ops of constants (Identity of a shared weight, the Transpose torch
 * exports for the weight of a Linear without bias, Reshape, Unsqueeze, Squeeze, Flatten), or -1. chain (may be
 * NULL) receives those nodes from the constant outward, *n (may be NULL) their number. */
static int const_chain(const cg_graph *g, int v, int *chain, int *n) {
    int k = 0, nodes[CHAIN_MAX];
    while (v >= 0 && g->vals[v].kind == CG_VAL_NODE) {
        int p = g->vals[v].producer;
        const cg_node *nd = &g->nodes[p];
        bool layout = nd->op == CG_IDENTITY || nd->op == CG_TRANSPOSE || nd->op == CG_RESHAPE ||
                      nd->op == CG_UNSQUEEZE || nd->op == CG_SQUEEZE || nd->op == CG_FLATTEN;
        if (!layout || k == CHAIN_MAX || nd->n_in < 1) return -1;
        for (int j = 1; j < nd->n_in; j++)
            if (nd->in[j] >= 0 && g->vals[nd->in[j]].kind != CG_VAL_CONST) return -1;
        nodes[k++] = p;
        v = nd->in[0];
    }
    if (v < 0 || g->vals[v].kind != CG_VAL_CONST) return -1;
    for (int i = 0; chain && i < k; i++) chain[i] = nodes[k - 1 - i];
    if (n) *n = k;
    return v;
}

/* Whether node `node` (of the graph being differentiated) belongs to the LRP layer of tail t. */
static bool in_layer(const rules_state *s, int node, int t) {
    int m = node - s->node_base;
    return m >= 0 && m < s->n_nodes && s->layer_of[m] == t;
}

/* Whether input slot j of node nd, a node of the LRP layer of tail t, reads an input of the layer (a tensor Captum
 * hooks): not a weight (a constant or what is computed from constants only; the weight and bias slots of Gemm,
 * Conv and BatchNormalization) nor a value made inside the layer. */
static bool layer_input(const rules_state *s, const cg_graph *g, int t, const cg_node *nd, int j) {
    int v = nd->in[j];
    if (v < 0 || (v < s->n_vals && s->konst[v])) return false;
    if ((nd->op == CG_GEMM || nd->op == CG_CONV || nd->op == CG_BATCHNORM) && j != 0) return false;
    return g->vals[v].kind != CG_VAL_NODE || !in_layer(s, g->vals[v].producer, t);
}

/* The slots of node nd holding the weight and the bias an LRP rule changes (through const_chain), or -1: inputs 1 and
 * 2 of Gemm, Conv and BatchNormalization, input 1 of MatMul, and the constant operand of an Add in a layer of several
 * nodes (`multi`: the bias of a Linear exported as MatMul + Add). */
static void weight_slots(const cg_graph *g, const cg_node *nd, bool multi, int *w, int *b) {
    *w = *b = -1;
    switch (nd->op) {
    case CG_GEMM: case CG_CONV: case CG_BATCHNORM:
        *w = 1;
        *b = nd->n_in > 2 && nd->in[2] >= 0 ? 2 : -1;
        break;
    case CG_MATMUL: *w = 1; break;
    case CG_ADD:
        for (int j = 0; multi && j < 2 && *b < 0; j++)
            if (const_chain(g, nd->in[j], NULL, NULL) >= 0) *b = j;
        break;
    default: break;
    }
    if (*w >= 0 && (nd->n_in <= *w || const_chain(g, nd->in[*w], NULL, NULL) < 0)) *w = -1;
    if (*b >= 0 && const_chain(g, nd->in[*b], NULL, NULL) < 0) *b = -1;
}

/* ---- emitting nodes ------------------------------------------------------------------------------------------ */

static int emit(rules_state *s, cg_graph *g, const char *base, cg_op op, const cg_attrs *a, int n, const int *in) {
    int v = cg_emit(g, op, base, in, n, a);
    if (v < 0) s->emit_failed = true;
    return v;
}
static int emit1(rules_state *s, cg_graph *g, const char *base, cg_op op, const cg_attrs *a, int x) {
    return emit(s, g, base, op, a, 1, &x);
}
static cg_attrs eps_attrs(double eps) {
    cg_attrs a = cg_attrs_default();
    a.alpha = eps;
    return a;
}

/* The standard backward rule of node ni. */
static cattr_status standard(rules_state *s, cg_graph *g, int ni, int gy, const bool *need, int *gx) {
    cg_backward_fn fn = s->std.by_op[g->nodes[ni].op];
    if (!fn)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "node '%s' (op %s): no backward rule", g->nodes[ni].name,
                       cg_op_names[g->nodes[ni].op]);
    return fn(g, ni, gy, need, gx, NULL);
}

/* t transformed by x; the new value id (or -1 with emit_failed set). */
static int apply_xform(rules_state *s, cg_graph *g, const xform *x, int t) {
    const char *base = g->nodes[x->node].name;
    cg_attrs a = eps_attrs(x->eps);
    switch (x->kind) {
    case XF_DL_RESCALE:
    case XF_DL_SOFTMAX: {
        int in[4] = {t, x->a[0], x->a[1], x->a[2]};
        int u = emit(s, g, base, CG_DL_RESCALE, &a, 4, in);
        return x->kind == XF_DL_RESCALE ? u : emit1(s, g, base, CG_DL_CENTER, NULL, u);
    }
    case XF_DL_MAXPOOL: {
        cg_attrs pa = g->nodes[x->node].a;
        pa.alpha = x->eps;
        int in[4] = {x->a[0], x->a[1], x->a[2], t};
        return emit(s, g, base, CG_DL_MAXPOOL, &pa, 4, in);
    }
    case XF_RELU: return emit1(s, g, base, CG_RELU, NULL, t);
    case XF_REPLACE: return x->a[0];
    case XF_MUL_SELF: {
        int in[2] = {t, x->value};
        return emit(s, g, base, CG_MUL, NULL, 2, in);
    }
    }
    return -1;
}

/* Registers x for the total gradient of x.value, whose contribution from this reader is *slot (-1: none, nothing to
 * change). The value's producer applies it (apply_pending); for a value autodiff differentiates against (a graph
 * input, a layer), whose producer it does not visit, rules_wrt_grad applies it to the summed gradient. */
static cattr_status add_xform(rules_state *s, cg_graph *g, xform x, int *slot) {
    (void)g;
    if (*slot < 0) return CATTR_OK;
    if (s->n_xf == s->cap_xf) {
        int cap = s->cap_xf ? 2 * s->cap_xf : 16;
        xform *p = realloc(s->xf, (size_t)cap * sizeof *p);
        if (!p) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory while building the backward graph");
        s->xf = p;
        s->cap_xf = cap;
    }
    s->xf[s->n_xf++] = x;
    return CATTR_OK;
}

/* Applies the xforms queued for value v to its total gradient *t, in forward order of their readers. */
static void apply_pending(rules_state *s, cg_graph *g, int v, int *t) {
    for (;;) {
        int best = -1;
        for (int k = 0; k < s->n_xf; k++)
            if (s->xf[k].value == v && (best < 0 || s->xf[k].node < s->xf[best].node)) best = k;
        if (best < 0) return;
        xform x = s->xf[best];
        s->xf[best] = s->xf[--s->n_xf];
        *t = apply_xform(s, g, &x, *t);
    }
}

/* ---- LRP layers ------------------------------------------------------------------------------------------------ */

/* A copy of the weight behind value v (through const_chain) in the compute dtype, changed by an LRP rule (Captum's
 * _manipulate_weights, in the model's dtype): gamma: W + gamma * max(W, 0); alpha1-beta0: max(W, 0); zero: 0; the
 * chain's layout ops applied to it as to the original (a bias-free Linear's Transpose). */
static int lrp_const(rules_state *s, cg_graph *g, int v, const char *node, rule_kind kind, double gamma, bool zero) {
    int chain[CHAIN_MAX], n = 0, c = const_chain(g, v, chain, &n);
    const cattr_tensor *w = g->vals[c].data;
    cattr_tensor *t = cx_tensor_alloc(s->dt, w->ndim, w->shape);
    if (!t) {
        s->emit_failed = true;
        cx_fail(CATTR_ERR_NO_MEMORY, "out of memory while building the backward graph");
        return -1;
    }
    for (int64_t k = 0; k < w->numel; k++) {
        double x = cx_tensor_get(w, k), y;
        if (zero) {
            y = 0;
        } else if (kind == RULE_LRP_ALPHA1_BETA0) {
            y = x < 0 ? 0 : x; /* clamp(min=0) keeps NaN */
        } else if (s->dt == CATTR_FLOAT32) {
            float xf = (float)x, cl = xf < 0 ? 0.0f : xf, gm = (float)gamma * cl;
            y = (double)(xf + gm);
        } else {
            y = x + gamma * (x < 0 ? 0 : x);
        }
        cx_tensor_set(t, k, y);
    }
    char name[320];
    snprintf(name, sizeof name, "%s/lrp/%s", node, zero ? "zero_bias" : "weight");
    int id = cg_add_const(g, name, t, true);
    if (id < 0) {
        cattr_tensor_free(t);
        s->emit_failed = true;
        cx_fail(CATTR_ERR_NO_MEMORY, "out of memory while building the backward graph");
    }
    for (int k = 0; k < n && id >= 0; k++) {
        cg_node cn = g->nodes[chain[k]]; /* a copy: emitting may move the node array */
        int in[CG_MAX_IN];
        memcpy(in, cn.in, sizeof in);
        in[0] = id;
        id = emit(s, g, node, cn.op, &cn.a, cn.n_in, in);
    }
    return id;
}

/* Captum's second forward pass through a layer whose rule changes its weights (gamma, alpha1-beta0, a bias set to
 * zero): each node of the layer copied in graph order with the changed weights, reading the copies of the layer's
 * earlier nodes (the layer's inputs stay the activations of the first pass); s->clone_of holds the copies. */
static cattr_status lrp_pass2(rules_state *s, cg_graph *g, int t) {
    node_rule r = s->rule[t];
    if (r.kind != RULE_LRP_GAMMA && r.kind != RULE_LRP_ALPHA1_BETA0) return CATTR_OK;
    bool multi = s->first_of[t] != t;
    for (int m = s->first_of[t]; m <= t; m++) {
        if (s->layer_of[m] != t) continue;
        cg_node nd = g->nodes[m + s->node_base];
        int in[CG_MAX_IN], ws, bs;
        bool changed = false;
        memcpy(in, nd.in, sizeof in);
        weight_slots(g, &nd, multi, &ws, &bs);
        bool weighted = nd.op == CG_GEMM || nd.op == CG_CONV || nd.op == CG_MATMUL || nd.op == CG_BATCHNORM;
        if (weighted && ws < 0 && nd.n_in > 1 && nd.in[1] >= 0 && nd.in[1] < s->n_vals && s->konst[nd.in[1]])
            return cx_fail(CATTR_ERR_UNSUPPORTED,
                           "node '%s' (op %s): LRP's %s changes a constant weight, and this one is computed (by node "
                           "'%s'); export the model without folding it",
                           nd.name, cg_op_names[nd.op], r.kind == RULE_LRP_GAMMA ? "GammaRule" : "Alpha1_Beta0_Rule",
                           g->nodes[g->vals[nd.in[1]].producer].name);
        if (ws >= 0) {
            in[ws] = lrp_const(s, g, nd.in[ws], nd.name, r.kind, r.gamma, false);
            changed = true;
        }
        if (bs >= 0 && r.zero_bias) {
            in[bs] = lrp_const(s, g, nd.in[bs], nd.name, r.kind, r.gamma, true);
            changed = true;
        }
        for (int j = 0; j < nd.n_in; j++) {
            int v = nd.in[j];
            if (v < 0 || g->vals[v].kind != CG_VAL_NODE || !in_layer(s, g->vals[v].producer, t)) continue;
            int c = s->clone_of[g->vals[v].producer - s->node_base];
            if (c >= 0) {
                in[j] = c;
                changed = true;
            }
        }
        if (s->emit_failed) return CATTR_ERR_NO_MEMORY;
        if (changed && (s->clone_of[m] = emit(s, g, nd.name, nd.op, &nd.a, nd.n_in, in)) < 0)
            return CATTR_ERR_NO_MEMORY;
    }
    return CATTR_OK;
}

/* The backward of node ni of an LRP layer. At the tail: relevance gy / (z + eps sign z), z the layer's output (of the
 * second pass when the rule changes weights); every node: its standard gradient (of its copy with the rule's
 * weights); each input tensor of the layer that this layer hooks first gets its total gradient multiplied by the
 * input (IdentityRule: replaced by the gradient of the layer's output). */
static cattr_status lrp_member(rules_state *s, cg_graph *g, int ni, int gy, const bool *need, int *gx) {
    cg_node nd = g->nodes[ni];
    int mi = ni - s->node_base, t = s->layer_of[mi];
    node_rule r = s->rule[t];
    int gin = gy;
    if (mi == t) { /* visited before the layer's other nodes (reverse graph order) */
        s->tail_gy[t] = gy;
        CX_CHECK(lrp_pass2(s, g, t));
        int z = s->clone_of[t] >= 0 ? s->clone_of[t] : nd.out;
        cg_attrs a = eps_attrs(r.eps);
        int in2[2] = {gy, z};
        if ((gin = emit(s, g, nd.name, CG_LRP_DIV, &a, 2, in2)) < 0) return CATTR_ERR_NO_MEMORY;
    }
    int back = s->clone_of[mi] >= 0 ? g->vals[s->clone_of[mi]].producer : ni;
    CX_CHECK(standard(s, g, back, gin, need, gx));
    for (int j = 0; j < nd.n_in; j++) {
        int v = nd.in[j];
        if (!need[j] || !layer_input(s, g, t, &nd, j) || s->lrp_owner[v] != t) continue;
        bool again = false; /* once per layer and input: another of its nodes (or slots) may have registered it */
        for (int k = 0; k < s->n_xf && !again; k++) again = s->xf[k].value == v && s->xf[k].node == t;
        if (again) continue;
        xform x = r.kind == RULE_LRP_IDENTITY ? (xform){v, t, XF_REPLACE, {s->tail_gy[t], -1, -1}, 0}
                                              : (xform){v, t, XF_MUL_SELF, {-1, -1, -1}, 0};
        CX_CHECK(add_xform(s, g, x, &gx[j]));
    }
    return CATTR_OK;
}

/* ---- the wrapper every node's backward goes through ------------------------------------------------------------ */

static cattr_status rule_wrapper(cg_graph *g, int ni, int gy, const bool *need, int *gx, void *user) {
    rules_state *s = user;
    cg_node nd = g->nodes[ni];
    int gt = gy; /* gy after the hooks of later modules on this output; gy itself is what Captum's grad_out saw */
    s->emit_failed = false;
    apply_pending(s, g, nd.out, &gt);
    if (s->emit_failed) return CATTR_ERR_NO_MEMORY;
    node_rule r = s->rule[ni - s->node_base];
    int X = nd.in[0], dx, dy;
    cattr_status st = CATTR_OK;
    if (s->layer_of[ni - s->node_base] >= 0) {
        st = lrp_member(s, g, ni, gt, need, gx);
        if (st == CATTR_OK && s->emit_failed) st = CATTR_ERR_NO_MEMORY;
        return st;
    }
    switch (r.kind) {
    case RULE_NONE: st = standard(s, g, ni, gt, need, gx); break;
    case RULE_DL_NONLINEAR:
    case RULE_DL_SOFTMAX:
        st = standard(s, g, ni, gt, need, gx);
        if (st != CATTR_OK || !need[0]) break;
        dx = emit1(s, g, nd.name, CG_DL_DELTA, NULL, X);
        dy = emit1(s, g, nd.name, CG_DL_DELTA, NULL, nd.out);
        st = add_xform(s, g, (xform){X, ni, r.kind == RULE_DL_SOFTMAX ? XF_DL_SOFTMAX : XF_DL_RESCALE, {gy, dy, dx},
                                     s->dl_eps}, &gx[0]);
        break;
    case RULE_DL_MAXPOOL:
        st = standard(s, g, ni, gt, need, gx);
        if (st != CATTR_OK || !need[0]) break;
        st = add_xform(s, g, (xform){X, ni, XF_DL_MAXPOOL, {X, nd.out, gy}, s->dl_eps}, &gx[0]);
        break;
    case RULE_GUIDED_RELU:
        st = standard(s, g, ni, gt, need, gx);
        if (st != CATTR_OK || !need[0]) break;
        st = add_xform(s, g, (xform){X, ni, XF_RELU, {-1, -1, -1}, 0}, &gx[0]);
        break;
    case RULE_DECONV_RELU:
        st = standard(s, g, ni, gt, need, gx);
        if (st != CATTR_OK || !need[0]) break;
        st = add_xform(s, g, (xform){X, ni, XF_REPLACE, {emit1(s, g, nd.name, CG_RELU, NULL, gy), -1, -1}, 0}, &gx[0]);
        break;
    case RULE_LRP_PASS:
        if (!need[0]) break;
        gx[0] = gt;
        st = add_xform(s, g, (xform){X, ni, XF_REPLACE, {gt, -1, -1}, 0}, &gx[0]);
        break;
    case RULE_LRP_REFUSE:
        st = cx_fail(CATTR_ERR_UNSUPPORTED,
                     "LRP has no rule for node '%s' (op %s), which the relevance reaches: Captum's LRP has rules for "
                     "Linear (Gemm, MatMul with a constant weight), Conv, pools, BatchNorm and Add (epsilon rule) and "
                     "ReLU, Tanh, Dropout (pass-through); reshaping and other linear ops pass the relevance on. Give "
                     "rules for the model's nodes or modules explicitly (node_rules)",
                     nd.name, cg_op_names[nd.op]);
        break;
    case RULE_LRP_EPSILON:
    case RULE_LRP_GAMMA:
    case RULE_LRP_ALPHA1_BETA0:
    case RULE_LRP_IDENTITY: /* always on a layer's tail (layer_of) */
        st = cx_fail(CATTR_ERR_INTERNAL, "node '%s': an LRP rule outside an LRP layer", nd.name);
        break;
    }
    if (st == CATTR_OK && s->emit_failed) st = CATTR_ERR_NO_MEMORY;
    return st;
}

static cg_backward_fn rules_by_node(const cg_graph *g, int ni, void *user) {
    rules_state *s = user;
    /* cg_autodiff visits nodes in decreasing order: a new graph or a non-decreasing index is a new run */
    if (g != s->run_g || ni >= s->last_ni) {
        s->run_g = g;
        s->n_xf = 0;
        for (int i = 0; i < s->n_nodes; i++) s->clone_of[i] = s->tail_gy[i] = -1;
    }
    s->last_ni = ni;
    return ni >= s->node_base && ni - s->node_base < s->n_nodes ? rule_wrapper : NULL;
}

/* cg_rules.wrt_grad: the changes registered for the total gradient of a value autodiff differentiates against (an
 * attributed input, a layer of LayerLRP), whose producer it does not visit. */
static cattr_status rules_wrt_grad(cg_graph *g, int v, int *grad, void *user) {
    rules_state *s = user;
    if (g != s->run_g) return CATTR_OK; /* no rule of this run registered anything */
    s->emit_failed = false;
    apply_pending(s, g, v, grad);
    return s->emit_failed ? CATTR_ERR_NO_MEMORY : CATTR_OK;
}

/* ---- set-up: which rule on which node -------------------------------------------------------------------------- */

typedef enum family { FAM_DEEPLIFT, FAM_GUIDED, FAM_DECONV, FAM_LRP } family;

static const struct {
    const char *name;
    bool prefix;
    rule_kind kind;
    family fam;
} k_rule_names[] = {
    {"deeplift_nonlinear", false, RULE_DL_NONLINEAR, FAM_DEEPLIFT},
    {"deeplift_maxpool", true, RULE_DL_MAXPOOL, FAM_DEEPLIFT}, /* deeplift_maxpool1d/2d/3d */
    {"deeplift_softmax", false, RULE_DL_SOFTMAX, FAM_DEEPLIFT},
    {"guided_backprop_relu", false, RULE_GUIDED_RELU, FAM_GUIDED},
    {"deconvolution_relu", false, RULE_DECONV_RELU, FAM_DECONV},
    {"EpsilonRule", false, RULE_LRP_EPSILON, FAM_LRP},
    {"GammaRule", false, RULE_LRP_GAMMA, FAM_LRP},
    {"Alpha1_Beta0_Rule", false, RULE_LRP_ALPHA1_BETA0, FAM_LRP},
    {"IdentityRule", false, RULE_LRP_IDENTITY, FAM_LRP},
    {"lrp_passthrough_nonlinear", false, RULE_LRP_PASS, FAM_LRP},
};

/* Whether a rule can act on an op (the module kinds Captum applies it to, as they appear in ONNX). */
static bool rule_fits(rule_kind k, cg_op op) {
    switch (k) {
    case RULE_DL_NONLINEAR:
        return op == CG_RELU || op == CG_LEAKYRELU || op == CG_SIGMOID || op == CG_TANH || op == CG_ELU ||
               op == CG_SOFTPLUS;
    case RULE_DL_MAXPOOL: return op == CG_MAXPOOL;
    case RULE_DL_SOFTMAX: return op == CG_SOFTMAX;
    case RULE_GUIDED_RELU: case RULE_DECONV_RELU: return op == CG_RELU;
    case RULE_LRP_PASS: return op == CG_RELU || op == CG_TANH || op == CG_IDENTITY;
    case RULE_LRP_EPSILON: case RULE_LRP_GAMMA: case RULE_LRP_ALPHA1_BETA0: case RULE_LRP_IDENTITY:
        return op == CG_GEMM || op == CG_CONV || op == CG_MATMUL || op == CG_MAXPOOL || op == CG_AVGPOOL ||
               op == CG_GLOBALAVGPOOL || op == CG_BATCHNORM || op == CG_ADD;
    case RULE_NONE: case RULE_LRP_REFUSE: break;
    }
    return false;
}

/* Ops whose standard gradient carries LRP's relevance on unchanged in kind (linear in the attributed value: layout,
 * indexing, sums; a product or quotient by a constant), which Captum's LRP leaves to autograd. */
static bool lrp_plain_op(const cg_node *nd, const unsigned char *konst) {
    switch (nd->op) {
    case CG_IDENTITY: case CG_RESHAPE: case CG_FLATTEN: case CG_TRANSPOSE: case CG_SQUEEZE: case CG_UNSQUEEZE:
    case CG_CONCAT: case CG_SLICE: case CG_GATHER: case CG_PAD: case CG_EXPAND: case CG_TILE: case CG_ADD:
    case CG_SUB: case CG_NEG: case CG_REDUCE_SUM: case CG_REDUCE_MEAN: case CG_RESIZE: case CG_IF: case CG_CAST:
    case CG_WHERE: case CG_SHAPE:
        return true;
    case CG_MUL: return nd->n_in == 2 && nd->in[0] >= 0 && nd->in[1] >= 0 && (konst[nd->in[0]] || konst[nd->in[1]]);
    case CG_DIV: return nd->n_in == 2 && nd->in[1] >= 0 && konst[nd->in[1]];
    default: return false;
    }
}

/* The method's rule for a node when no node rules are given (Captum's choice per module type, by op), or RULE_NONE. */
static void default_rule(family fam, const cg_graph *g, const cg_node *nd, const unsigned char *konst, node_rule *r) {
    cg_op op = nd->op;
    memset(r, 0, sizeof *r);
    switch (fam) {
    case FAM_DEEPLIFT:
        r->kind = op == CG_MAXPOOL ? RULE_DL_MAXPOOL : op == CG_SOFTMAX ? RULE_DL_SOFTMAX
                  : rule_fits(RULE_DL_NONLINEAR, op) ? RULE_DL_NONLINEAR : RULE_NONE;
        break;
    case FAM_GUIDED: r->kind = op == CG_RELU ? RULE_GUIDED_RELU : RULE_NONE; break;
    case FAM_DECONV: r->kind = op == CG_RELU ? RULE_DECONV_RELU : RULE_NONE; break;
    case FAM_LRP:
        if (op == CG_GEMM || op == CG_CONV || op == CG_MAXPOOL || op == CG_AVGPOOL || op == CG_GLOBALAVGPOOL ||
            op == CG_BATCHNORM || (op == CG_MATMUL && nd->n_in == 2 && const_chain(g, nd->in[1], NULL, NULL) >= 0)) {
            r->kind = RULE_LRP_EPSILON; /* a MatMul with a constant weight is a Linear (a bias-free one: Transpose) */
            r->eps = 1e-9;
        } else if (op == CG_RELU || op == CG_TANH) {
            r->kind = RULE_LRP_PASS;
        } else if (!lrp_plain_op(nd, konst)) {
            r->kind = RULE_LRP_REFUSE;
        }
        break;
    }
}

/* Whether node names a and b are in the same torch scope ("/linear/MatMul", "/linear/Add"). */
static bool same_scope(const char *a, const char *b) {
    const char *ea = strrchr(a, '/'), *eb = strrchr(b, '/');
    return a[0] == '/' && ea && eb && ea != a && ea - a == eb - b && !strncmp(a, b, (size_t)(ea - a));
}

static bool same_rule(const node_rule *a, const node_rule *b) {
    return a->kind == b->kind && a->eps == b->eps && a->gamma == b->gamma && a->zero_bias == b->zero_bias;
}

/* A Linear exported as MatMul + Add of its bias is one LRP layer, as Captum's hooks see the module: the division at
 * the Add's output, the weight rules on the MatMul, a bias set to zero on the Add. Fused: an Add of a constant and the
 * output of a one-node MatMul layer that nothing else reads, where the Add has the MatMul's rule (node rules, which
 * list both nodes of the module), or no rule and the MatMul's torch scope or a "<module>.bias" (default rules). */
static void fuse_bias(rules_state *s, const cg_graph *g, bool explicit_rules) {
    for (int a = 0; a < g->n_nodes; a++) {
        const cg_node *nd = &g->nodes[a];
        if (nd->op != CG_ADD || nd->n_in != 2 || nd->in[0] < 0 || nd->in[1] < 0) continue;
        int j = s->konst[nd->in[0]] ? 0 : s->konst[nd->in[1]] ? 1 : -1, v = j < 0 ? -1 : nd->in[1 - j];
        if (v < 0 || s->konst[v] || g->vals[v].kind != CG_VAL_NODE) continue;
        int p = g->vals[v].producer, readers = 0;
        if (g->nodes[p].op != CG_MATMUL || s->layer_of[p] != p || s->first_of[p] != p) continue;
        for (int k = 0; k < g->n_nodes; k++)
            for (int q = 0; q < g->nodes[k].n_in; q++) readers += g->nodes[k].in[q] == v;
        for (int k = 0; k < g->n_outputs; k++) readers += g->outputs[k] == v;
        if (readers != 1) continue;
        if (explicit_rules) {
            if (s->layer_of[a] != a || s->first_of[a] != a || !same_rule(&s->rule[a], &s->rule[p])) continue;
        } else {
            int c = const_chain(g, nd->in[j], NULL, NULL);
            const char *bn = c >= 0 ? g->vals[c].name : "";
            size_t bl = strlen(bn);
            bool bias = bl > 5 && !strcmp(bn + bl - 5, ".bias");
            if (s->rule[a].kind != RULE_NONE || !(same_scope(g->nodes[p].name, nd->name) || bias)) continue;
        }
        s->rule[a] = s->rule[p];
        memset(&s->rule[p], 0, sizeof s->rule[p]);
        s->layer_of[a] = s->layer_of[p] = a;
        s->first_of[a] = p;
    }
}

/* The nodes of module `path` (node_rules[k], a PyTorch module path: cattr_model_module_values): from the node that
 * makes the module's one output tensor back through the values made inside it, not through its inputs nor its
 * weights. member[] (n_nodes, cleared here) marks them; *tail is the last, *count their number. */
static cattr_status module_nodes(const cattr_explainer *e, const rules_state *s, int k, const char *path,
                                 unsigned char *member, int *tail, int *count) {
    enum { MAXV = 64 };
    const cg_graph *g = e->m->g;
    const char *names[MAXV];
    int n = cattr_model_module_values(e->m, path, 0, names, MAXV);
    if (n < 0)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "node_rules[%d]: the model has no node or module '%s'", k, path);
    if (n != 1)
        return cx_fail(CATTR_ERR_UNSUPPORTED,
                       "node_rules[%d]: module '%s' has %d output tensors: a rule acts on a module with one", k, path,
                       n);
    int y = cg_find_value(g, names[0]);
    if (y < 0 || g->vals[y].kind != CG_VAL_NODE)
        return cx_fail(CATTR_ERR_INTERNAL, "node_rules[%d]: module '%s': its output '%s' is not a node's", k, path,
                       names[0]);
    int nin = cattr_model_module_values(e->m, path, 1, names, MAXV), in_ids[MAXV];
    if (nin > MAXV)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "node_rules[%d]: module '%s' reads %d tensors (at most %d)", k, path,
                       nin, MAXV);
    for (int i = 0; i < nin; i++) in_ids[i] = cg_find_value(g, names[i]);
    int *stack = malloc((size_t)(g->n_nodes + 1) * sizeof *stack), sp = 0;
    if (!stack) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    memset(member, 0, (size_t)g->n_nodes);
    *tail = g->vals[y].producer;
    member[*tail] = 1;
    *count = 1;
    stack[sp++] = *tail;
    while (sp > 0) {
        const cg_node *nd = &g->nodes[stack[--sp]];
        for (int j = 0; j < nd->n_in; j++) {
            int v = nd->in[j];
            bool outside = v < 0 || s->konst[v] || g->vals[v].kind != CG_VAL_NODE;
            for (int i = 0; i < nin && !outside; i++) outside = in_ids[i] == v;
            if (outside || member[g->vals[v].producer]) continue;
            member[g->vals[v].producer] = 1;
            ++*count;
            stack[sp++] = g->vals[v].producer;
        }
    }
    free(stack);
    return CATTR_OK;
}

static cattr_status assign_rules(const cattr_explainer *e, family fam, rules_state *s) {
    const cg_graph *g = e->m->g;
    const cattr_attr_params *p = &e->p;
    if (p->n_node_rules < 0 || (p->n_node_rules > 0 && !p->node_rules))
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "node_rules: %d rules given without an array", p->n_node_rules);
    if (p->n_node_rules == 0) {
        for (int i = 0; i < g->n_nodes; i++) {
            default_rule(fam, g, &g->nodes[i], s->konst, &s->rule[i]);
            if (is_lrp_layer(s->rule[i].kind)) s->layer_of[i] = s->first_of[i] = i;
        }
        if (fam == FAM_LRP) fuse_bias(s, g, false);
        return CATTR_OK;
    }
    unsigned char *member = malloc((size_t)g->n_nodes + 1);
    if (!member) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_status st = CATTR_OK;
    for (int k = 0; k < p->n_node_rules && st == CATTR_OK; k++) {
        const cattr_node_rule *nr = &p->node_rules[k];
        if (!nr->node || !nr->rule) {
            st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "node_rules[%d]: the node name and the rule are required", k);
            break;
        }
        int ri = -1;
        for (int q = 0; q < (int)CX_ARRAY_LEN(k_rule_names) && ri < 0; q++) {
            size_t len = strlen(k_rule_names[q].name);
            if (k_rule_names[q].prefix ? !strncmp(nr->rule, k_rule_names[q].name, len)
                                        : !strcmp(nr->rule, k_rule_names[q].name))
                ri = q;
        }
        if (ri < 0) {
            st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "node_rules[%d]: unknown rule '%s'", k, nr->rule);
            break;
        }
        if (k_rule_names[ri].fam != fam) {
            st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "node_rules[%d]: rule '%s' does not belong to method %s", k,
                         nr->rule, cattr_method_name(p->method));
            break;
        }
        rule_kind kind = k_rule_names[ri].kind;
        if (is_lrp_layer(kind) && (!isfinite(nr->epsilon) || (kind == RULE_LRP_GAMMA && !isfinite(nr->gamma)))) {
            st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "node_rules[%d]: rule '%s' on '%s' needs a finite epsilon%s", k,
                         nr->rule, nr->node, kind == RULE_LRP_GAMMA ? " and gamma" : "");
            break;
        }
        node_rule r = {kind, nr->epsilon, nr->gamma, nr->set_bias_to_zero != 0};
        int ni = -1, count = 1;
        for (int i = 0; i < g->n_nodes && ni < 0; i++)
            if (!strcmp(g->nodes[i].name, nr->node)) ni = i;
        if (ni >= 0) { /* an ONNX node */
            if (s->konst[g->nodes[ni].out]) continue; /* a module's node of its weight (a Linear's Transpose) */
            memset(member, 0, (size_t)g->n_nodes);
            member[ni] = 1;
        } else { /* a module path: its nodes */
            st = module_nodes(e, s, k, nr->node, member, &ni, &count);
            if (st != CATTR_OK) break;
        }
        if (!is_lrp_layer(kind) && count != 1) {
            st = cx_fail(CATTR_ERR_UNSUPPORTED, "node_rules[%d]: module '%s' is %d nodes: rule '%s' acts on one", k,
                         nr->node, count, nr->rule);
            break;
        }
        if (count == 1 && !rule_fits(kind, g->nodes[ni].op)) {
            st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "node_rules[%d]: rule '%s' cannot act on node '%s' (op %s)", k,
                         nr->rule, g->nodes[ni].name, cg_op_names[g->nodes[ni].op]);
            break;
        }
        for (int i = 0; i < g->n_nodes && st == CATTR_OK; i++)
            if (member[i] && (s->rule[i].kind != RULE_NONE || s->layer_of[i] >= 0))
                st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "node_rules[%d]: node '%s' (of '%s') already has a rule", k,
                             g->nodes[i].name, nr->node);
        if (st != CATTR_OK) break;
        s->rule[ni] = r;
        if (!is_lrp_layer(kind)) continue;
        s->first_of[ni] = ni;
        for (int i = g->n_nodes - 1; i >= 0; i--)
            if (member[i]) {
                s->layer_of[i] = ni;
                s->first_of[ni] = i;
            }
    }
    free(member);
    if (st == CATTR_OK && fam == FAM_LRP) fuse_bias(s, g, true);
    return st;
}

/* ---- installing the rules ---------------------------------------------------------------------------------------- */

void cx_rules_free(void *state) {
    rules_state *s = state;
    if (!s) return;
    free(s->rule);
    free(s->layer_of);
    free(s->first_of);
    free(s->lrp_owner);
    free(s->konst);
    free(s->clone_of);
    free(s->tail_gy);
    free(s->xf);
    cx_dls_free(s->dls);
    free(s);
}

/* The rule state for explainer e's model and params (node_rules, or the family's defaults). */
static cattr_status rules_new(const cattr_explainer *e, family fam, rules_state **out) {
    const cg_graph *g = e->m->g;
    rules_state *s = calloc(1, sizeof *s);
    cattr_status st = s ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) {
        size_t nn = (size_t)g->n_nodes + 1, nv = (size_t)g->n_vals + 1;
        s->dt = e->p.dtype;
        s->dl_eps = e->p.eps;
        s->n_nodes = g->n_nodes;
        s->n_vals = g->n_vals;
        s->rule = calloc(nn, sizeof *s->rule);
        s->layer_of = malloc(nn * sizeof *s->layer_of);
        s->first_of = malloc(nn * sizeof *s->first_of);
        s->clone_of = malloc(nn * sizeof *s->clone_of);
        s->tail_gy = malloc(nn * sizeof *s->tail_gy);
        s->lrp_owner = malloc(nv * sizeof *s->lrp_owner);
        s->konst = calloc(nv, 1);
        if (!s->rule || !s->layer_of || !s->first_of || !s->clone_of || !s->tail_gy || !s->lrp_owner || !s->konst)
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK) {
        for (int i = 0; i < g->n_nodes; i++) s->layer_of[i] = s->first_of[i] = s->clone_of[i] = s->tail_gy[i] = -1;
        for (int v = 0; v < g->n_vals; v++) {
            s->konst[v] = g->vals[v].kind == CG_VAL_CONST;
            s->lrp_owner[v] = -1;
        }
        for (int i = 0; i < g->n_nodes; i++) { /* nodes are in topological order */
            const cg_node *nd = &g->nodes[i];
            bool all = nd->n_in > 0;
            for (int j = 0; j < nd->n_in && all; j++) all = nd->in[j] < 0 || s->konst[nd->in[j]];
            if (all) s->konst[nd->out] = 1;
        }
        st = assign_rules(e, fam, s);
    }
    if (st != CATTR_OK) {
        cx_rules_free(s);
        return st;
    }
    for (int t = 0; t < g->n_nodes; t++) { /* in the order of the layers' tails: Captum's order of forward hooks */
        if (s->layer_of[t] != t) continue;
        for (int m = s->first_of[t]; m <= t; m++) {
            if (s->layer_of[m] != t) continue;
            for (int j = 0; j < g->nodes[m].n_in; j++)
                if (layer_input(s, g, t, &g->nodes[m], j) && s->lrp_owner[g->nodes[m].in[j]] < 0)
                    s->lrp_owner[g->nodes[m].in[j]] = t;
        }
    }
    cg_rules_default(&s->std);
    *out = s;
    return CATTR_OK;
}

/* For the Layer and Neuron variants of these methods: installs into *rules (filled by cg_rules_default) the backward
 * rules of `method`'s family (DeepLift and DeepLiftShap, GuidedBackprop and GuidedGradCam, Deconvolution, LRP) for
 * explainer e's model and params, and returns the state they use (free it with cx_rules_free after the last
 * cg_autodiff with these rules). Errors: CATTR_ERR_INVALID_ARGUMENT (bad node_rules), CATTR_ERR_UNSUPPORTED (a rule
 * on a module of several outputs), CATTR_ERR_NO_MEMORY. LRP refuses a node without a rule when it differentiates
 * through it (CATTR_ERR_UNSUPPORTED from cg_autodiff, naming the node and its op). */
cattr_status cx_rules_new(const cattr_explainer *e, cattr_method method, cg_rules *rules, void **state) {
    family fam;
    switch (method) {
    case CATTR_METHOD_DEEPLIFT: case CATTR_METHOD_DEEPLIFT_SHAP: fam = FAM_DEEPLIFT; break;
    case CATTR_METHOD_GUIDED_BACKPROP: case CATTR_METHOD_GUIDED_GRADCAM: fam = FAM_GUIDED; break;
    case CATTR_METHOD_DECONVOLUTION: fam = FAM_DECONV; break;
    case CATTR_METHOD_LRP: fam = FAM_LRP; break;
    default:
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "method %s replaces no backward rules", cattr_method_name(method));
    }
    rules_state *s = NULL;
    CX_CHECK(rules_new(e, fam, &s));
    rules->by_node = rules_by_node;
    rules->wrt_grad = rules_wrt_grad;
    rules->user = s;
    *state = s;
    return CATTR_OK;
}

cattr_status cx_rules_bind(const cg_rules *rules, int node_base) {
    if (rules->by_node != rules_by_node) return CATTR_OK;
    rules_state *s = rules->user;
    bool lrp = false;
    for (int i = 0; i < s->n_nodes && !lrp; i++) lrp = s->layer_of[i] >= 0;
    if (lrp && node_base != 0) /* its owners are the model's value ids */
        return cx_fail(CATTR_ERR_INTERNAL, "LRP's rules need the model's nodes and values at their own ids");
    s->node_base = node_base;
    return CATTR_OK;
}

struct dls_graph **cx_rules_dls(void *state) { return &((rules_state *)state)->dls; }

cattr_status cx_rules_init(cattr_explainer *e) {
    return cx_rules_new(e, e->p.method, &e->rules, &e->method_state);
}

void cx_rules_release(cattr_explainer *e) {
    cx_rules_free(e->method_state);
    e->method_state = NULL;
}

/* ---- GuidedBackprop and Deconvolution ---------------------------------------------------------------------------- */


static cattr_status modified_gradient(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    return cx_grad(e, c, c->x, 1, CX_TILE, attr);
}

/* ---- LRP ------------------------------------------------------------------------------------------------------- */

/* relevance = (gradient under the rules, x where an LRP layer reads x) * the target output of the example;
 * delta = output - the sum of every relevance of the example. */
static cattr_status lrp(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    double *sel = malloc((size_t)(c->B + 1) * sizeof *sel);
    cattr_status st = sel ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    /* relevance = gradient x the selected output, in one pass on the backend; the gradient graph has multiplied each
     * input's total gradient by the input already (Captum's hook on the input: rules_wrt_grad) */
    unsigned mul = 0;
    bool want = delta && e->p.return_convergence_delta;
    if (st == CATTR_OK) st = cx_grad_lrp(e, c, mul, want, attr, want ? sel : NULL);
    if (st == CATTR_OK && want) { /* output - the relevances' sum: -(sum - output), the sum on the backend */
        double *ends = malloc((size_t)(2 * c->B + 1) * sizeof *ends);
        void *dev[CX_MAX_IN];
        for (int i = 0; i < c->n; i++) dev[i] = c->attr_dev[i] ? c->attr_dev[i] : e->kept[i].p; /* where the pass left them */
        st = ends ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        for (int64_t b = 0; b < c->B && st == CATTR_OK; b++) ends[b] = sel[b], ends[c->B + b] = 0;
        if (st == CATTR_OK) st = cx_delta_dev(e, c, c->n, c->x, dev, ends, delta);
        for (int64_t b = 0; b < c->B && st == CATTR_OK; b++) cx_tensor_set(*delta, b, -cx_tensor_get(*delta, b));
        free(ends);
    }
    free(sel);
    return st;
}

/* ---- the method table entries ------------------------------------------------------------------------------------ */

const cx_method cx_method_guided_backprop = {CATTR_METHOD_GUIDED_BACKPROP, false,
                                             cx_rules_init, modified_gradient, cx_rules_release};
const cx_method cx_method_deconvolution = {CATTR_METHOD_DECONVOLUTION, false,
                                           cx_rules_init, modified_gradient, cx_rules_release};
const cx_method cx_method_lrp = {CATTR_METHOD_LRP, false, cx_rules_init, lrp, cx_rules_release};
