/* layer_internal.h - what the layer and neuron methods' files share (layer.c: the graphs, seeds, passes and the
 * one-pass methods; layer_path.c: the integrated methods' path graph). */
#ifndef CATTR_ATTR_LAYER_INTERNAL_H
#define CATTR_ATTR_LAYER_INTERNAL_H

#include "attr/internal.h"

#define LG_MAX_IN (2 * CX_MAX_IN + 2)
#define LG_MAX_OUT (2 * CATTR_MAX_OUTPUTS)
#define LG_CACHE 6

typedef struct {
    cg_graph *g; /* owned unless it is the model's own graph */
    bool owned;
} lgraph;

typedef struct lpath lpath;

typedef struct {
    int n_l;                     /* layer tensors */
    int lv[CATTR_MAX_OUTPUTS];   /* their value ids */
    lgraph gf;                   /* the model itself (forward passes) */
    lgraph ga;                   /* layer graph */
    int ga_grad[CATTR_MAX_OUTPUTS];
    lgraph gn;                   /* neuron graph, for gn_n attributed inputs */
    int gn_n, gn_grad[CX_MAX_IN];
    lpath *path;          /* the integrated methods' graph and buffers (lpath_run) */
    /* a method's suffix on the layer graph per layer tensor (layer_suffix): its key (0: none) and output */
    int sfx_key[CATTR_MAX_OUTPUTS], sfx_out[CATTR_MAX_OUTPUTS];
} lstate;

/* Inputs of one pass: the model inputs (attributed xs of reps*B rows, additional inputs expanded likewise), then
 * the graph's extra inputs (seeds, replaced layer values; nd 0 and NULL while not needed). */
typedef struct {
    int n;
    cx_arg in[LG_MAX_IN];
    cattr_tensor *tmp[LG_MAX_IN];
} lpass;

/* The neuron selector resolved against a layer of per-example shape sh[1..nd): the selected flat positions within
 * one example, in row-major order (Captum sums them when the selector holds slices or is a sum). */
typedef struct {
    int64_t per, n_sel;
    int64_t *sel;
} neuron_sel;

void cx_lg_ensure_gf(cattr_explainer *e, lstate *s);
cattr_status cx_lg_internal_influence(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta);
cattr_status cx_lg_layer_conductance(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta);
cattr_status cx_lg_layer_integrated_gradients(cattr_explainer *e, cx_call *c, cattr_tensor **attr,
                                              cattr_tensor **delta);
cattr_status cx_lg_lg_view(cattr_explainer *e, lgraph *lg, const lpass *pi, int v, cx_view *view);
void cx_lg_lp_free(lpass *pi);
cattr_status cx_lg_lp_setup(const lgraph *lg, const cx_call *c, cattr_tensor *const *xs, int64_t reps, cx_expand how,
                            lpass *pi);
void cx_lg_lpath_free(lpath *p);
cattr_status cx_lg_neuron_conductance(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta);
cattr_status cx_lg_neuron_integrated_gradients(cattr_explainer *e, cx_call *c, cattr_tensor **attr,
                                               cattr_tensor **delta);
cattr_status cx_lg_neuron_select(const cattr_attr_params *p, int nd, const int64_t *sh, neuron_sel *ns);
cattr_status cx_lg_points_per_chunk(cattr_explainer *e, cx_call *c, int n, int min, int *out);
cattr_status cx_lg_quad_points(const cattr_explainer *e, int n, double **alphas, double **steps);
cattr_status cx_lg_target_seed(const cx_call *c, const cx_view *ov, int64_t reps, cx_expand how, cattr_tensor **out);

#endif
