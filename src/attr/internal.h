/* internal.h - what attribution methods share: the explainer, a prepared call, the method table and the batched
 * gradient / forward passes every method is built from.
 *
 * A method is a cx_method: `init` checks the parameters and may replace backward rules (DeepLift, guided
 * backprop, LRP); `attribute` builds whatever batched inputs it needs (integration paths, perturbations, samples)
 * and runs them through cx_grad / cx_forward, which expand the additional inputs and the target like the inputs.
 */
#ifndef CATTR_ATTR_INTERNAL_H
#define CATTR_ATTR_INTERNAL_H

#include "models/model.h"
#include "graph/autodiff.h"
#include "exec/plan.h"
#include "attr/derive.h"
#include "ops/ops.h"


typedef struct cx_method cx_method;

/* The upper limits of cattr_attr_params' counts (documented beside the fields in include/cattr.h; the command line
 * and `cattr replay` use the same): beyond them a call's memory or time explodes, and such values are almost always
 * a caller's overflow or a misread file. */
#define CX_MAX_STEPS 1000000                  /* n_steps */
#define CX_MAX_INTERNAL_BATCH 1000000000      /* internal_batch_size */
#define CX_MAX_PERTURBATIONS 100000000        /* perturbations_per_eval */
#define CX_MAX_SAMPLES 100000000              /* n_samples */
#define CX_MAX_NT_SAMPLES 1000000             /* nt_samples, nt_samples_batch_size */
#define CX_MAX_NODE_RULES 1000000             /* n_node_rules */

/* Every field of params that its method (and its NoiseTunnel) reads, checked against its range: one place for what
 * needs no model (the method's init hook checks what does: layers, rules, neuron indices against shapes). Errors:
 * CATTR_ERR_INVALID_ARGUMENT naming the field, the value given and the allowed range or names. */
cattr_status cx_params_check(const cattr_attr_params *p);
/* Method m's Captum class name ("IntegratedGradients"; "?" out of range). */
const char *cx_method_captum_name(cattr_method m);
/* Whether method m's attributions depend on a target (every method but LayerActivation and the neuron methods other
 * than NeuronConductance, whose Captum classes take none). */
bool cx_method_takes_target(cattr_method m);

/* A small graph of helper_graphs.c kept by the explainer: its kind (0: empty), the compute dtype of its constants, the
 * graph with its key (d.n attributions of the ranks in d.rank), constants and plans, and its outputs. */
#define CX_HELPER_CACHE 8
typedef struct cx_helper {
    int kind;
    cattr_dtype dt;
    cx_derived d;
    int outs[CX_MAX_IN];
    uint64_t used;
} cx_helper;
/* The kinds of small graphs (cx_helper.kind; 0: an empty entry): helper_graphs.c's, metrics.c's infidelity sums
 * (plain and normalised), curves.c's states and softmax. */
enum { CX_H_DELTA = 1, CX_H_SUM_LAST, CX_H_SPREAD, CX_H_PAIRS_MEAN, CX_H_INFIDELITY, CX_H_INFIDELITY_NORM, CX_H_CURVE,
       CX_H_CURVE_SOFTMAX };

/* inner explainers kept per explainer for distinct values of integer inputs that give shapes */
#define CX_FOLD_CACHE 8

struct cattr_explainer {
    const cattr_model *m; /* the caller's model, or own_model, or bf_model */
    const cattr_model *user_model; /* the caller's model */
    cattr_model *own_model; /* the model at params.precision when it is not the highest (cx_model_with_precision) */
    cattr_model *bf_model;  /* the model with its inputs batch-first, where one holds its batch on another dim (a
                             * recurrent state [2, B, H]): a Transpose puts it back (explainer.c, batch_first) */
    int *batch_axis;        /* then: the dim of each input of the caller's layout that holds the batch (call.c moves
                             * it first); NULL otherwise */
    cattr_attr_params p;
    const cx_method *method;
    cg_rules rules; /* backward rules of the gradient graph (set by the method's init) */
    cx_backend *be;
    cx_consts *consts;
    cg_graph *g; /* gradient graph; built for n_attr attributed inputs */
    int n_attr;
    int seed_input; /* graph-input index of the seed */
    int grads[CX_MAX_IN];
    /* g with a suffix (built on first use, rebuilt when the kind changes): 1, the gradient of the first block of a
     * 2-block pass times the blocks' difference (cx_grad_times_diff; inputs first, second [B] after the seed); 2,
     * LRP's scaling (cx_grad_lrp; input tidx [B] after the seed, a second output per input: the selected outputs) */
    cg_graph *gm;
    int gm_kind, gm_mul, gm_rank[CX_MAX_IN];
    int gm_outs[CX_MAX_IN + 1];
    /* g with a tidx input [rows] and the output sel [rows]: each row's target value (cx_forward_select; built on first
     * use) */
    cg_graph *sel_g;
    int sel_out;
    size_t peak;
    double *alphas, *steps; /* IG points, computed once (for p.n_steps; freed when an auto call changes it) */
    int steps_used;         /* the n_steps of the last call that finished (cattr_explainer_steps_used) */
    void *method_state;     /* owned by the method; released by its `release` */
    void *tunnel_state;     /* NoiseTunnel's and GradientShap's graph and buffers on the backend (tunnel_dev.c) */
    void *tunnel_io;        /* the same for a NoiseTunnel around a method that runs whole per partition */
    void *second_order;     /* cattr_explainer_param_hvp's graph, for one list of weights (second_order.c) */
    void *example_grads;    /* cattr_explainer_example_grads' graph (example_grads.c) */
    /* cx_row_bytes with gradients: the gradient plan's bytes for one row, for the one-rep input shapes in rb_sh */
    int rb_n;
    int64_t rb_sh[CX_MAX_IN][CATTR_MAX_DIMS];
    size_t rb_bytes;
    /* what the last call's cx_convergence_delta_dev (or IG's two-halves path) selected at its first B rows: for IG and
     * DeepLift f(x) of each example at its input (fx_n = B; 0 when the call computed none or used a noise tunnel);
     * GradientShap and DeepLiftShap run their deltas over other points (noisy inputs, example x baseline pairs).
     * Only the LLM IG path reads it, for its target log-probabilities. */
    double *fx;
    int64_t fx_n;
    /* set by the language-model adapter (llm.c): every attribution comes back summed over its last axis in torch's
     * order (a token's attribution: its embedding's, summed), on the backend (cx_sum_last), from attributions the
     * method leaves there (cx_call.attr_dev) where it honours that (run_once) */
    bool sum_last;
    /* the small graphs methods share (helper_graphs.c: the convergence delta, the sum over the last axis, cx_spread,
     * cx_pairs_mean), cached by kind, the attributions' ranks and the compute dtype */
    cx_helper helpers[CX_HELPER_CACHE];
    uint64_t helpers_clock;
    cx_buf spread_ids; /* the ids it last uploaded (a copy in spread_ids_host, spread_ids_n values): calls with the
                         * same feature ids (a tunnel's partitions, the inputs of one call) upload them once */
    int64_t *spread_ids_host, spread_ids_n;
    cx_buf kept[CX_MAX_IN];   /* attributions a pass left on the backend for the delta (cx_grad_keep and kin) */
    cx_buf dstaged[CX_MAX_IN]; /* the delta's [x; start] assembled on the backend (cx_delta_forward, from x_dev) */
    cx_buf staged[CX_MAX_IN]; /* a pass's inputs assembled on the backend (DeepLift's [x; x'] from cx_call.x_dev) */
    /* set while a call is re-run to find where a non-finite attribution came from: every plan run checks its
     * values (cx_job_for) */
    bool diagnose;
    /* the warning that the memory budget is below one step, point, row or sample was logged (cx_budget_warn): once
     * per explainer, not once per call (a command's batches run on one explainer) */
    bool budget_warned;
    /* integer model inputs whose values give shapes or If conditions (cx_model_fold_inputs; NULL when none): a call
     * runs on an inner explainer of the model with their values as constants, one per distinct value (explainer.c) */
    bool *fold;
    struct cx_fold_entry {
        cattr_explainer *e;
        cattr_model *m;
        cattr_tensor **vals; /* per model input: a copy of the value where fold, else NULL */
        uint64_t used;
    } spec[CX_FOLD_CACHE];
    uint64_t spec_clock;
    /* set while cattr_explainer_run_part or cattr_explainer_combine runs (explainer.c): the part to compute and where
     * its bytes go, or the parts to combine; the method reads them instead of running the whole call (IG in
     * integrated_gradients.c; the methods of perturbed states and samples through cx_vsplit, split.c) */
    struct cx_split {
        int part, n_parts;      /* n_parts > 0: compute part `part` only */
        void **blob;            /* its bytes (malloc'ed), *len */
        size_t *len;
        const void *const *parts; /* n_comb > 0: combine these parts' bytes, in order */
        const size_t *lens;
        int n_comb;
    } split;
};

/* How a batch of reps*B rows relates to the B examples: step-major tiling (row r*B + b, IG and perturbations) or
 * per-example interleaving (row b*reps + r, NoiseTunnel and the Shap methods). */
typedef enum cx_expand { CX_TILE = 0, CX_INTERLEAVE = 1 } cx_expand;

/* A prepared call: inputs and baselines converted to the compute dtype. */
typedef struct cx_call {
    int n; /* attributed inputs */
    int64_t B;
    cattr_dtype dt;
    cattr_tensor *x[CX_MAX_IN];    /* inputs */
    cattr_tensor *base[CX_MAX_IN]; /* baselines broadcast to the inputs' shapes (NULL for distribution methods) */
    cattr_tensor *dist[CX_MAX_IN]; /* distribution methods: the baseline rows as given */
    int n_add;
    cattr_tensor *add[CX_MAX_IN]; /* additional inputs (dt, or int64) */
    const cattr_target *target;
    const cattr_call *user; /* the caller's call (feature masks, draws) */
    int next_draw;          /* explicit draws consumed so far */
    int n_out;              /* attributions written (layer methods: one per layer tensor); 0 means one per input */
    /* A call between passes on the backend (NoiseTunnel's noisy inputs; IntegratedGradients, DeepLift and LRP honour
     * it, with their convergence deltas, when not split into parts (noise.c's takes_dev_io), FeatureAblation with a
     * target, Saliency and InputXGradient attr_dev): x_dev[i], when not NULL, holds input i's values in backend memory
     * (x[i] then gives its shape only; its host values are NaN), and attr_dev[i], when not NULL, is where the method
     * leaves attribution i (x[i]'s shape, dt) instead of returning a host tensor (attr[i] stays NULL). */
    void *x_dev[CX_MAX_IN];
    void *attr_dev[CX_MAX_IN];
    /* DeepLift only (the layer DeepLift pipeline, layer_perturb.c): base_dev[i], when not NULL, holds baseline i's
     * values in backend memory (base[i] then gives its shape only). x_dev may then be set for some inputs only. */
    void *base_dev[CX_MAX_IN];
} cx_call;

struct cx_method {
    cattr_method id;    /* its names: cattr_method_name (CLI), cx_method_captum_name (methods.c's table) */
    bool baseline_distribution;
    cattr_status (*init)(cattr_explainer *e);
    cattr_status (*attribute)(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta);
    void (*release)(cattr_explainer *e); /* may be NULL */
};

/* The table of implemented methods, indexed by cattr_method (NULL: not implemented). */
extern const cx_method *const cx_methods[CATTR_METHOD_COUNT];
extern const cx_method cx_method_saliency, cx_method_input_x_gradient, cx_method_integrated_gradients;
extern const cx_method cx_method_guided_gradcam;
/* layer and neuron methods: src/attr/layer.c (gradient family) and src/attr/layer_perturb.c (rules, perturbations,
 * Shap family); attribute == NULL while not implemented */
extern const cx_method cx_method_layer_activation, cx_method_layer_gradient_x_activation, cx_method_layer_gradcam,
    cx_method_internal_influence, cx_method_layer_conductance, cx_method_layer_integrated_gradients,
    cx_method_neuron_gradient, cx_method_neuron_integrated_gradients, cx_method_neuron_conductance;
extern const cx_method cx_method_layer_deeplift, cx_method_layer_deeplift_shap, cx_method_layer_gradient_shap,
    cx_method_layer_feature_ablation, cx_method_layer_feature_permutation, cx_method_layer_lrp,
    cx_method_neuron_deeplift, cx_method_neuron_deeplift_shap, cx_method_neuron_gradient_shap,
    cx_method_neuron_guided_backprop, cx_method_neuron_deconvolution, cx_method_neuron_feature_ablation;
/* One per method of src/attr/{rules,perturbation,lime,noise}.c; attribute == NULL means not implemented yet. */
extern const cx_method cx_method_feature_ablation, cx_method_feature_permutation, cx_method_occlusion, cx_method_shapley_value_sampling, cx_method_shapley_values, cx_method_deeplift, cx_method_deeplift_shap, cx_method_guided_backprop, cx_method_deconvolution, cx_method_lrp, cx_method_lime, cx_method_kernel_shap, cx_method_gradient_shap;

/* Rounds to the compute dtype: double arithmetic followed by this rounding reproduces float32 arithmetic exactly for
 * one +, - or * (53 >= 2*24 + 2 bits), which is how float32 paths mimic torch's float32 kernels. */
static inline double cx_rnd(cattr_dtype dt, double v) { return dt == CATTR_FLOAT32 ? (double)(float)v : v; }

/* The method state for call c, a struct of `size` bytes whose first member is its cx_derived: *state is kept when it
 * fits the call (inputs and their ranks, additional inputs, target mode), else released (release) and made anew: zeroed, keyed to the call, its graph built
 * by build and its constants made in the compute dtype. On error the state is released. */
cattr_status cx_derived_state(cattr_explainer *e, cx_call *c, bool target, size_t size,
                              cattr_status (*build)(cattr_explainer *e, void *state),
                              void (*release)(cattr_explainer *e), void **state);

/* The backend copies of a call that the perturbation methods' graphs read: inputs, baselines and additional
 * inputs, rows (r mod B) and, with a target, each row's target index (cx_target_rows) for chunks of up to rmax rows,
 * and room y for n_y output values. Buffers are kept from call to call and grown when too small. */
/* A method's sequence of n_states states (perturbations, samples) evaluated per chunk of `per` states, whose n_out
 * output values per state are consumed in order on the host, under a split (split.c): one process computes and
 * consumes every chunk; a part (cattr_explainer_run_part) computes its range of chunks and keeps their values
 * (cx_vsplit_put) instead of consuming them; combining computes none and consumes the parts' values (cx_vsplit_get).
 * Use: begin; for each chunk k: if cx_vsplit_mine(k) compute the values, and put them; if combining get them; if
 * v.mode != CX_VSPLIT_PART consume them; then end (which hands a part its bytes). */
typedef enum { CX_VSPLIT_NONE = 0, CX_VSPLIT_PART, CX_VSPLIT_COMBINE } cx_vsplit_mode;
typedef struct cx_vsplit {
    cattr_explainer *e;
    cx_vsplit_mode mode;
    int64_t n_states, per, n_out, n_chunks, first, last; /* last: one past this process's chunks */
    char *blob;                                           /* a part's bytes */
    size_t len, at, part_end;                             /* write or read position; end of the part read */
    int part;                                             /* combining: the part being read */
} cx_vsplit;
/* Errors: CATTR_ERR_INVALID_ARGUMENT (combining parts of another call or cut, missing, out of order or truncated,
 * naming the part), CATTR_ERR_NO_MEMORY. */
cattr_status cx_vsplit_begin(cattr_explainer *e, const cx_call *c, int64_t n_states, int64_t per, int64_t n_out,
                             cx_vsplit *v);
bool cx_vsplit_mine(const cx_vsplit *v, int64_t k);
cattr_status cx_vsplit_put(cx_vsplit *v, int64_t k, const double *vals, int64_t n);
cattr_status cx_vsplit_get(cx_vsplit *v, int64_t k, double *vals, int64_t n);
/* Hands a part its bytes when st is CATTR_OK, frees what is left; returns st (or an internal error). */
cattr_status cx_vsplit_end(cx_vsplit *v, cattr_status st);

/* A split call (split.c, cx_vsplit) of a method whose chunks add into n accumulators on the backend (acc_q += the
 * chunk's value, in the compute dtype): a part runs each of its chunks with `zero` accumulators into `chunk` and
 * keeps them as the chunk's values; combining uploads each chunk's values into `chunk` and adds them with an Add
 * graph, in chunk order: the additions one process does. */
#define CX_ACC_SPLIT_MAX 16
typedef struct cx_acc_split {
    int n;
    cattr_dtype dt;
    int nd[CX_ACC_SPLIT_MAX];
    int64_t sh[CX_ACC_SPLIT_MAX][CATTR_MAX_DIMS], numel[CX_ACC_SPLIT_MAX];
    cx_buf zero[CX_ACC_SPLIT_MAX], chunk[CX_ACC_SPLIT_MAX];
    cg_graph *g;
    int outs[CX_ACC_SPLIT_MAX];
} cx_acc_split;
/* The values per chunk of n accumulators of these shapes (their element counts). */
int64_t cx_acc_split_width(int n, const int *nd, const int64_t (*sh)[CATTR_MAX_DIMS]);
/* Allocates what v's mode needs (nothing for one process). Errors: CATTR_ERR_NO_MEMORY, the backend's. */
cattr_status cx_acc_split_init(cattr_explainer *e, const cx_vsplit *v, int n, const int *nd,
                               const int64_t (*sh)[CATTR_MAX_DIMS], cattr_dtype dt, cx_acc_split *a);
/* Chunk k: a part downloads a->chunk into vals[at0...] and keeps vals (cx_vsplit_put; anything else the caller put
 * in vals goes along); combining reads vals (cx_vsplit_get) and adds vals[at0...] into acc[q] on the backend. */
cattr_status cx_acc_split_chunk(cattr_explainer *e, cx_vsplit *v, cx_acc_split *a, cx_consts *consts, int64_t k,
                                void *const *acc, double *vals, int64_t at0);
void cx_acc_split_free(cx_acc_split *a);

typedef struct cx_call_dev {
    cx_buf x[CX_MAX_IN], base[CX_MAX_IN], add[CX_MAX_IN], rows, tidx, y;
} cx_call_dev;
cattr_status cx_call_dev_fit(cattr_explainer *e, cx_call *c, cx_call_dev *d, int64_t rmax, bool target, int64_t n_y);
void cx_call_dev_free(cx_call_dev *d);

/* Runs output y of derived graph dv for one chunk (its inputs in[], every input of dv->g) into d->y and brings its nv
 * values back as doubles into vals. Errors: CATTR_ERR_SHAPE when the output does not have nv values, and the plan's
 * and the backend's. */
cattr_status cx_derived_values(cattr_explainer *e, cx_derived *dv, const cx_arg *in, int y, cx_call_dev *d, int64_t nv,
                               double *vals);
/* cx_derived_values for n_ys outputs ys[] of nv values each (d->y holds room for them all), their values one after
 * the other in vals, in one run. */
cattr_status cx_derived_values_n(cattr_explainer *e, cx_derived *dv, const cx_arg *in, const int *ys, int n_ys,
                                 cx_call_dev *d, int64_t nv, double *vals);

/* The explainer's pieces across files: call preparation (call.c), the gradient graph and plan caches (passes.c). */
cattr_status cx_prepare(cattr_explainer *e, const cattr_call *call, cx_call *c);
void cx_call_free(cx_call *c);
/* The target as a 0/1 mask over one block of B output rows of shape osh (ond dims): one 1 per example. Errors:
 * CATTR_ERR_TARGET (out of range, not one value per example). */
cattr_status cx_target_mask(const cattr_target *t, int ond, const int64_t *osh, double *mask);
cattr_status cx_build_grad_graph(cattr_explainer *e, int n_attr);
void cx_drop_plans(cattr_explainer *e);
/* Frees cattr_explainer_param_hvp's graph and plans (second_order.c). */
void cx_second_order_free(cattr_explainer *e);
/* Frees cattr_explainer_example_grads' graph and plans (example_grads.c). */
void cx_example_grads_free(cattr_explainer *e);

/* A run of graph g (its constants consts; its plans in slot 0, not sharing an arena, unless the caller says) for
 * explainer e: e's executor, e's call's cancel flag and progress beat, the non-finite diagnosis while e->diagnose is
 * set, and the plan's bytes raising e->peak. The caller sets the inputs and outputs, then cx_run. */
static inline cx_job cx_job_for(cattr_explainer *e, const cg_graph *g, cx_consts *consts) {
    cx_job j = {.g = g, .consts = consts, .eager = e->p.executor == CATTR_EXEC_EAGER,
                .watch = cx_watch_of(&e->p), .check_finite = e->diagnose, .peak = &e->peak};
    return j;
}

/* The seed of one block of B rows: the target mask over the model output for the call's inputs (a new tensor). */
cattr_status cx_seed_block(cattr_explainer *e, cx_call *c, cattr_tensor **seed);
/* The flat index of each example's target within its output (where its row of the seed block is 1), for n rows:
 * idx[r] for example r mod B (the index the derived graphs' SeqPick reads). */
void cx_target_rows(const cattr_tensor *seed, int64_t B, int64_t n, int64_t *idx);

/* Builds a small graph for n attributions of like's ranks (n 0: a graph of the dtype alone) into g, its outputs into
 * outs. Errors: CATTR_ERR_NO_MEMORY, CATTR_ERR_INTERNAL. */
typedef cattr_status (*cx_helper_build)(cg_graph *g, int n, cattr_tensor *const *like, int *outs);
/* The explainer's small graph of this kind for n attributions of like's ranks in c's dtype: the cache entry that has
 * it, or the least recently used entry made into it (graph, constants; its plans come with its runs). */
cattr_status cx_helper_get(cattr_explainer *e, int kind, const cx_call *c, int n, cattr_tensor *const *like,
                           cx_helper_build build, cx_helper **out);
/* A run of small graph d's outputs outs[0..n_out) for inputs in[0..n_in) (results to host memory res, or to backend
 * memory res_dev where set). */
cattr_status cx_small_run(cattr_explainer *e, cx_derived *d, const cx_arg *in, int n_in, const int *outs, int n_out,
                          void *const *res, void *const *res_dev);

/* Scans the attributions (n tensors) and the delta (may be NULL) of a finished call for NaN and Inf; when there is
 * one, returns CATTR_ERR_NONFINITE naming the tensor and index (and what to do), else CATTR_OK. */
cattr_status cx_check_results(cattr_tensor *const *attr, int n, const cattr_tensor *delta);

/* The error after a call that found NaN or Inf in its results (message `found`) was re-run with every pass checked:
 * the re-run's error (where it appeared) prefixed by `found`, or, when every pass was finite, that the method's own
 * arithmetic made it. */
cattr_status cx_diagnosis(cattr_status rerun, const char *found);

/* Gradients of the target-selected outputs (summed over rows) w.r.t. the attributed inputs, for batched inputs
 * xs[i] of reps*B rows; additional inputs and the target are expanded the same way. grads[i] are new tensors of
 * xs[i]'s shapes. */
cattr_status cx_grad(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, int64_t reps, cx_expand how,
                     cattr_tensor **grads);
/* cx_grad; with keep, the gradients also stay on the backend in e->kept[i] (for a convergence delta summed there:
 * cx_delta_dev; the same for the two below). xs_dev (optional): backend buffers holding xs[i]'s values (xs[i] then
 * gives the shape only). */
cattr_status cx_grad_keep(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, void *const *xs_dev, int64_t reps,
                          cx_expand how, bool keep, cattr_tensor **grads);


/* DeepLift's product on the backend: for xs[i] = [x_i; r_i] (2B rows, CX_TILE), attr[i] = (x_i - r_i) * the gradient
 * of the first B rows (new tensors of x_i's shape), as cx_grad's pass followed by those ops, one upload and one
 * download. */
cattr_status cx_grad_times_diff(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, void *const *xs_dev, bool keep,
                                cattr_tensor **attr);

/* LRP's relevances on the backend, in one pass: attr[i] = g_i (times x_i where the bit i of mul is set) times the
 * target-selected output of the example; sel[b] (when sel is not NULL) receives that output (for the delta). */
cattr_status cx_grad_lrp(cattr_explainer *e, cx_call *c, unsigned mul, bool keep, cattr_tensor **attr, double *sel);

/* Forward pass on batched inputs xs[i] of reps*B rows (additional inputs expanded likewise); writes the model output
 * to *out (a new tensor). xs_dev (optional): backend buffers holding xs[i]'s values where not NULL. */
cattr_status cx_forward(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, void *const *xs_dev, int64_t reps,
                        cx_expand how, cattr_tensor **out);

/* Target selection of a batched output of reps*B rows: sel[r] = sum over the selected values of row r (one value
 * per row). Errors: CATTR_ERR_TARGET. */
cattr_status cx_select(const cx_call *c, const cattr_tensor *out, int64_t reps, cx_expand how, double *sel);

/* cx_select of cx_forward's output made on the backend (e->sel_g: the forward pass and a SeqPick of each row's target),
 * so that only the reps*B selected values come down into sel; sel NULL: only make the plan (for running it from
 * several threads later). xs_dev (optional): backend buffers holding xs[i]'s values where not NULL. *out_dt
 * (optional): the model output's dtype. Errors: those of the passes, CATTR_ERR_TARGET. */
cattr_status cx_forward_select(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, void *const *xs_dev,
                               int64_t reps, cx_expand how, double *sel, cattr_dtype *out_dt);

/* Rows of t repeated: tiled [t; t; ...] or interleaved [t0, t0, ..., t1, t1, ...]. NULL on allocation failure. */
cattr_tensor *cx_expand_rows(const cattr_tensor *t, int64_t reps, cx_expand how);


/* Bytes of memory available to this process now: the least of the free RAM (_SC_AVPHYS_PAGES), what RLIMIT_AS leaves
 * above its current size and what its cgroups' limits leave (passes.c); 1 GiB when unknown. Cached for 0.5 s. */
size_t cx_avail_memory(void);
/* What a checkpoint being loaded may take: the RAM the kernel can give (/proc/meminfo's MemAvailable: free memory
 * and reclaimable cache, of which a mapped checkpoint's own cached pages are part), within ulimit -v and the cgroup
 * limits. */
size_t cx_avail_memory_for_load(void);

/* Memory budget for a method's batches (params.max_memory, else a quarter of the available RAM). */
size_t cx_memory_budget(const cattr_explainer *e);

/* Logs the warning that the memory budget is below one unit of work (a printf format and its arguments) at
 * CATTR_LOG_WARN, the first time only for explainer e (e->budget_warned). */
void cx_budget_warn(cattr_explainer *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* After a chunk of work (`done` of `total` units): the progress callback, then the cancellation flag. Errors:
 * CATTR_ERR_CANCELLED. */
static inline cattr_status cx_chunk_done(const cattr_attr_params *p, int64_t done, int64_t total) {
    cx_watch_note(p->progress, p->progress_user, done, total); /* what a pass's beat repeats until the next chunk */
    if (p->progress) p->progress(done, total, p->progress_user);
    if (p->cancel && *p->cancel)
        return cx_fail(CATTR_ERR_CANCELLED, "cancelled after %lld of %lld units of work", (long long)done,
                       (long long)total);
    return CATTR_OK;
}

/* Bytes one row of the forward pass (with_grad: forward and backward) needs, from a shape-only plan. */
cattr_status cx_row_bytes(cattr_explainer *e, cx_call *c, bool with_grad, size_t *bytes);

/* The next explicit draw of the call, which must have role `role` (draws whose role is in `skip` are passed over);
 * NULL in *out when the call has no explicit draws (the method then uses the generator).
 * Errors: CATTR_ERR_INVALID_ARGUMENT (draws exhausted, or a role other than expected). */
cattr_status cx_next_draw(cx_call *c, const char *role, const char *const *skip, const cattr_tensor **out);

/* NoiseTunnel around the explainer's method (params.nt_type != CATTR_NT_NONE), in noise.c. NULL while not
 * implemented. */
extern cattr_status (*const cx_noise_tunnel)(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta);

/* The backward rules of a method family (rules.c): cx_rules_new installs into *rules (filled by cg_rules_default)
 * the rules of `method`'s family (DeepLift and DeepLiftShap, GuidedBackprop and GuidedGradCam, Deconvolution, LRP)
 * for e's model and params and returns their state (free with cx_rules_free after the last cg_autodiff with them).
 * Errors: CATTR_ERR_INVALID_ARGUMENT (bad node_rules), CATTR_ERR_UNSUPPORTED (LRP without a default rule for an op),
 * CATTR_ERR_NO_MEMORY. */
cattr_status cx_rules_new(const cattr_explainer *e, cattr_method method, cg_rules *rules, void **state);
void cx_rules_free(void *state);
/* A rule method's init and release (rules.c): the explainer's rules and their state, for e->p.method. */
cattr_status cx_rules_init(cattr_explainer *e);
void cx_rules_release(cattr_explainer *e);
/* DeepLiftShap's derived graph (deeplift.c), kept in the rules' state: its slot there, and its release. */
struct dls_graph;
struct dls_graph **cx_rules_dls(void *state);
void cx_dls_free(struct dls_graph *d);
/* Tells rules (when they are a family's) that the model's nodes start at node_base in the graph the next
 * cg_autodiff differentiates (a derived graph with a prefix); 0 again for the model's own clone. Errors:
 * CATTR_ERR_INTERNAL for LRP's rules at a base other than 0 (they key on the model's value ids). */
cattr_status cx_rules_bind(const cg_rules *rules, int node_base);

/* LayerGradientShap (noise.c): GradientShap's tunnel with the attributions at layer values layers[0..n_l): per sample
 * (a(noisy x) - a(baseline)) times the target's gradient at the layer at the random point, averaged per example;
 * attr[k] new tensors of the layers' shapes, c->n_out = n_l; the delta has one entry per sample row. */
cattr_status cx_layer_gradient_shap(cattr_explainer *e, cx_call *c, const int *layers, int n_l, cattr_tensor **attr,
                                    cattr_tensor **delta);

/* The params of an explainer of `method` that e's method runs on a model derived from e's (the neuron and layer
 * forms): e's params with that method, no NoiseTunnel (an enclosing one wraps e's method), e's device, the highest
 * precision (e's model is already at the asked one), no layer, no neuron, no delta. */
cattr_attr_params cx_inner_params(const cattr_explainer *e, cattr_method method);
/* The caller's call behind c, without the draws an enclosing NoiseTunnel has already taken. */
cattr_call cx_call_rest(const cx_call *c);

/* Frees e->tunnel_state and e->tunnel_io. */
void cx_tunnel_release(cattr_explainer *e);

/* The value id a layer name (module path or ONNX value; with attribute_to_layer_input, the module's input) refers
 * to. Errors: CATTR_ERR_INVALID_ARGUMENT naming the layer and suggesting close names. */
cattr_status cx_resolve_layer(const cattr_explainer *e, const char *layer, bool layer_input, int *value);



/* The call of every (example, baseline-row) pair of a distribution method (LayerDeepLiftShap): row b * nb + k pairs
 * example b with baseline row k. The additional inputs and the per-example target are expanded (tgt/tidx hold the
 * target); the inputs and baselines are left to the caller (p->x[i], p->base[i] NULL). Release with cx_pairs_free
 * (which frees what p holds). */
cattr_status cx_pairs_make(const cx_call *c, int64_t nb, cx_call *p, cattr_target *tgt, int64_t **tidx);
void cx_pairs_free(cx_call *p, int64_t *tidx);
/* attr[i] (new host tensors, batch c->B) = the mean over the nb baseline rows of the pairs' attributions dev[i] (in
 * backend memory, like[i]'s shape with batch c->B * nb), in torch's order (TorchSum over the baselines, then / nb),
 * made on the backend, for i < n. Errors: CATTR_ERR_NO_MEMORY, the backend's. */
cattr_status cx_pairs_mean(cattr_explainer *e, const cx_call *c, int64_t nb, int n, cattr_tensor *const *like,
                           void *const *dev, cattr_tensor **attr);

/* The IG-style convergence delta, delta[b] = the sum of example b's attributions - (F(x_b) - F(start_b)), in parts so
 * that its forward pass can run beside other work: make the plan (cx_delta_prepare), run the forward of [x; start]
 * into sel[2B] (cx_delta_forward: cx_forward_select), then combine with the attributions (cx_delta_dev). */
cattr_status cx_delta_prepare(cattr_explainer *e, cx_call *c, cattr_tensor *const *start);
cattr_status cx_delta_forward(cattr_explainer *e, cx_call *c, cattr_tensor *const *start, double *sel);
/* The delta for n attributions in backend memory (attr_dev[i]: the shape of host tensor like[i], B rows, c->dt): the
 * sums of each example's attributions (TorchSum, in torch's order) and the difference run as ops, and only the B
 * deltas come back. Errors: CATTR_ERR_NO_MEMORY, a kernel's. */
cattr_status cx_delta_dev(cattr_explainer *e, const cx_call *c, int n, cattr_tensor *const *like,
                          void *const *attr_dev, const double *sel, cattr_tensor **delta);
/* The generator stream of NoiseTunnel's noise for attributed input `input` of example `example`: sample j's element
 * k (of per per example) is the float32 standard deviation times the float32 of cx_rng_normal_at(seed, stream,
 * j * per + k) (what the backend's NormalNoise op draws; test_noise checks it from outside). */
uint64_t cx_tunnel_noise_stream(int input, int64_t example);
/* The n attributions (shapes of host tensors like[i], dtype c->dt) summed over their last axis in torch's order
 * (TorchSum) on the backend: from backend memory where dev (dev[i]: like[i]'s values), else from like[i]'s host values.
 * out[i]: new host tensors, like[i]'s shape without its last dim (the caller owns them; NULL on failure). */
cattr_status cx_sum_last(cattr_explainer *e, const cx_call *c, int n, cattr_tensor *const *like, void *const *dev,
                         cattr_tensor **out);

/* Per-feature values spread onto the elements on the backend: out[r, k] = V[r, ids[idrow[r], k]] (0 where that id is
 * negative), for R rows of M feature values (V: R*M host doubles, taken at c->dt), ids: id_rows x per host int64
 * (each at most M - 1), idrow: R host int64 (< id_rows). out: a host tensor of c->dt with R*per values (any shape),
 * written; or with out_dev (not NULL) only its size, the values left in that backend buffer. Uploads V, the ids and
 * idrow and downloads out, once. Errors: CATTR_ERR_NO_MEMORY, the backend's. */
cattr_status cx_spread(cattr_explainer *e, const cx_call *c, const double *V, int64_t R, int64_t M, const int64_t *ids,
                       int64_t id_rows, int64_t per, const int64_t *idrow, cattr_tensor *out, void *out_dev);

/* The convergence delta of attributions in backend memory: the forward pass at the start points, then cx_delta_dev. */
cattr_status cx_convergence_delta_dev(cattr_explainer *e, cx_call *c, void *const *attr_dev,
                                      cattr_tensor *const *start, cattr_tensor **delta);
/* Keeps sel[0..B) (f at the inputs, as cx_delta_forward selects them) in e->fx; e->fx_n = 0 without memory. */
void cx_keep_fx(cattr_explainer *e, const double *sel, int64_t B);


#endif
