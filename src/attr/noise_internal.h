/* noise_internal.h - what the noise tunnel's files share (noise.c: draws, the derived call, NoiseTunnel and
 * GradientShap; tunnel_dev.c: the state on the backend and the one-graph tunnel of the one-pass gradient methods and
 * GradientShap; tunnel_io.c: the tunnel around a method run whole per partition). */
#ifndef CATTR_ATTR_NOISE_INTERNAL_H
#define CATTR_ATTR_NOISE_INTERNAL_H

#include "attr/internal.h"
#include "core/rng.h"

/* A partition: m samples per example, the first being sample j0 of nt_samples; `part` counts partitions. */
typedef struct part_info {
    int64_t m, j0;
    uint64_t part;
} part_info;

typedef cattr_status (*inner_fn)(cattr_explainer *e, cx_call *c, const part_info *pi, cattr_tensor **attr,
                                 cattr_tensor **delta);

/* One tunnel: Captum's NoiseTunnel.attribute arguments and the method it wraps. */
typedef struct tunnel {
    cattr_noise_tunnel type;
    int64_t n;     /* nt_samples */
    int64_t batch; /* samples per full partition */
    double stdev;
    bool draw_baselines; /* draw_baseline_from_distrib */
    /* partitions made only to bound memory (GradientShap, generator only): the result is that of one partition,
     * baseline rows drawn for each sample (Captum draws them once for all full partitions and again for the
     * remainder) and deltas in one partition's order */
    bool split;
    inner_fn inner;
    bool inner_dist; /* the wrapped method takes its baselines as a distribution (cx_call.dist) */
    uint64_t tag;    /* generator stream family, so that nested tunnels draw independent numbers */
} tunnel;

/* Generator streams: a family (tag), a kind of draw, the input, a draw number and the example; within a stream the
 * counter is the sample, so that the numbers do not depend on how the samples are cut into partitions. */
enum { TAG_NOISE_TUNNEL = 1, TAG_GRADIENT_SHAP = 2 };
enum { DRAW_NOISE = 1, DRAW_BASELINE = 2, DRAW_COEFF = 3 };

/* The call the wrapped method sees for a partition of m samples: B*m rows, everything interleaved per example. */
typedef struct derived {
    cx_call c;
    cattr_call user;
    cattr_target target;
    int64_t *tidx;
    cattr_tensor *masks[CX_MAX_IN]; /* expanded feature masks (owned), or NULL */
    const cattr_tensor *in[CX_MAX_IN], *bl[CX_MAX_IN], *add[CX_MAX_IN], *fm[CX_MAX_IN];
} derived;

/* DEV_IO: not a graph of the tunnel's own but the one around a method that takes its inputs and leaves its
 * attributions on the backend (cx_nt_run_tunnel_io) */
enum { DEV_GRAD = 1, DEV_GRAD_ABS, DEV_GRAD_X, DEV_GSHAP, DEV_LAYER_GSHAP, DEV_IO };

/* The tunnel's graphs and buffers on the backend (tunnel_dev.c; DEV_IO's in tunnel_io.c). */
typedef struct dev_tunnel {
    int kind, n, n_add, mul;
    /* the attributions it sums: one per input, or (DEV_LAYER_GSHAP) one per layer tensor lv[k]; their shapes for the
     * call (acc_nd is part of what the graph was built for) */
    int n_acc, lv[CX_MAX_IN], acc_nd[CX_MAX_IN];
    int64_t acc_sh[CX_MAX_IN][CATTR_MAX_DIMS];
    cg_graph *g;
    int n_in, outs[3 * CX_MAX_IN + 2];
    cx_consts *consts;
    cg_graph *ag; /* DEV_IO: the partition sums of its n_acc attributions (io_acc_build) */
    int ag_outs[2 * CX_MAX_IN];
    cg_graph *fin_g; /* smoothgrad / smoothgrad_sq / vargrad from the sums */
    int fin_type, fin_outs[CX_MAX_IN];
    cx_buf x[CX_MAX_IN], add[CX_MAX_IN], seed, rows, noise[CX_MAX_IN], sum[CX_MAX_IN], sq[CX_MAX_IN];
    cx_buf src[CX_MAX_IN], bidx[CX_MAX_IN], coef[CX_MAX_IN], omc[CX_MAX_IN];
    /* the noise drawn on the backend (noise_on_backend): NormalNoise of every input, inputs (streams, first blocks)
     * per input, built for these row shapes, seed and standard deviation */
    cg_graph *ng;
    int ng_n, ng_nd[CX_MAX_IN], ng_outs[CX_MAX_IN];
    int64_t ng_row[CX_MAX_IN][CATTR_MAX_DIMS];
    uint64_t ng_seed;
    double ng_sd;
} dev_tunnel;

cattr_tensor *cx_nt_alloc_rows(const cattr_tensor *t, cattr_dtype dt, int64_t rows);
cattr_status cx_nt_concat_deltas(const tunnel *t, int64_t B, int64_t bs, cattr_tensor **parts, int n_parts,
                                 cattr_tensor **out);
cattr_status cx_nt_derived_baseline(const cx_call *c, const tunnel *t, int i, int64_t m, const int64_t *idx,
                                    derived *d);
void cx_nt_derived_free(derived *d);
cattr_status cx_nt_derived_init(const cx_call *c, int64_t m, derived *d);
cattr_status cx_nt_draw_again(cattr_explainer *e, cx_call *c, const tunnel *t, const part_info *pi, int64_t **idx);
cattr_status cx_nt_draw_first(cattr_explainer *e, cx_call *c, const tunnel *t, int64_t bs, int64_t **idx);
cattr_status cx_nt_oom(void);
/* The tunnel's state for this call, made or rebuilt when the inputs or the kind change (tunnel_dev.c). */
cattr_status cx_nt_state(cattr_explainer *e, cx_call *c, int kind, const int *lv, int n_acc, const int *acc_nd,
                         dev_tunnel **out);
/* Input i's noise for a partition's B*m rows (the first sample j0) into s->noise[i] on the backend. */
cattr_status cx_nt_noise_on_backend(cattr_explainer *e, dev_tunnel *s, cx_call *c, const tunnel *t, int i, int64_t m,
                                    int64_t j0);
/* The attributions from the sums (smoothgrad, smoothgrad_sq or vargrad), brought back once. */
cattr_status cx_nt_finish(cattr_explainer *e, dev_tunnel *s, cx_call *c, const tunnel *t, cattr_tensor **attr);
/* The DEV_IO state's noisy-input graph (tunnel_io.c). */
cattr_status cx_nt_io_build(dev_tunnel *s);
/* Input i's per-example size. */
static inline int64_t cx_nt_per_example(const cx_call *c, const cattr_tensor *t) { return c->B ? t->numel / c->B : 0; }
cattr_status cx_nt_run_tunnel_dev(cattr_explainer *e, cx_call *c, const tunnel *t, int kind, const int *lv, int n_l,
                                  cattr_tensor **attr_out, cattr_tensor **delta_out);
cattr_status cx_nt_run_tunnel_io(cattr_explainer *e, cx_call *c, const tunnel *t, cattr_tensor **attr_out,
                                 cattr_tensor **delta_out);
uint64_t cx_nt_stream_id(uint64_t tag, uint64_t kind, uint64_t input, uint64_t no, int64_t example);
bool cx_nt_takes_dev_io(const cattr_explainer *e, const cx_call *c);

#endif
