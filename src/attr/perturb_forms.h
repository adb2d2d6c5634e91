/* perturb_forms.h - the forms of a call the perturbation methods take besides one model output per example
 * (perturbation.c, lime.c; Captum's feature_ablation.py, shapley_value.py, lime.py).
 *
 * A model of the whole batch: its output does not have the batch first, or does not grow with it (a scalar loss, an
 * output [1] or [1, 3] for a batch of 2), or the inputs' first dims differ (a sparse index list beside a batch).
 * Captum then evaluates one perturbed copy of the inputs per forward pass (perturbations_per_eval must be 1) and
 * attributes to every element the change of every (target-selected) output value: the attributions are
 * [N, *input.shape[1:]] for the N output values (the Shapley methods: [*output.shape, *input.shape[1:]], a scalar
 * output as [1]); a feature mask with a row per example then needs one output value per example (row o for output
 * value o), as Captum's broadcasting does.
 *
 * cattr runs such a call as the same derived graphs on a view of it (cx_pform.v): every input, baseline and
 * additional input with a leading dim of 1 (one "example", the whole batch), B = 1; the graphs take each model input
 * from that row (Squeeze of dim 0) and, with a target, select it in every row of the output (SeqPick over the
 * output's own rows). */
#ifndef CATTR_PERTURB_FORMS_H
#define CATTR_PERTURB_FORMS_H

#include "attr/derive.h"
#include "attr/internal.h"

typedef struct cx_pform {
    bool whole;                       /* a model of the whole batch (above) */
    int ond;                          /* the model output for the call's inputs: rank, shape, dtype */
    int64_t osh[CATTR_MAX_DIMS];
    cattr_dtype odt;
    int64_t n_sel;                    /* values of the target-selected output (whole: per forward pass) */
    cx_call v;                        /* whole: the view of the call (B = 1; tensors over the caller's data) */
    int64_t rows[CX_MAX_IN];          /* whole: input i's first dim */
} cx_pform;

/* The form of call c for a perturbation method. `batched`: the method batches perturbed copies of the inputs (then
 * a model of the whole batch with perturbations_per_eval above 1 is CATTR_ERR_INVALID_ARGUMENT, Captum's assertion);
 * `one_value`: each forward pass must give one (target-selected) value per example (Lime, KernelShap). Errors:
 * those, CATTR_ERR_TARGET (a target on a scalar output), CATTR_ERR_UNSUPPORTED (an input of CATTR_MAX_DIMS dims of a
 * model of the whole batch), the planner's. */
cattr_status cx_pform_get(cattr_explainer *e, cx_call *c, bool batched, bool one_value, cx_pform *f);
void cx_pform_free(cx_pform *f);

/* A derived graph's model input from view row value v (whole: Squeeze of dim 0); -1 on failure. */
int cx_pform_model_input(cg_graph *g, bool whole, int v);

/* Whole, with a target: tidx[r] the flat index of the target in row r of the output (osh[0] rows). */
cattr_status cx_pform_target_rows(const cx_pform *f, const cx_call *c, int64_t *tidx);

/* Whole: the rows of mask ids (input i's ids in its own layout, rows[i] x per) that attributions use: 1 when every
 * row of the input holds the same ids, else one per output value (then the input's rows must equal n_out). Errors:
 * CATTR_ERR_SHAPE (a mask that differs per example for an output that does not have one value per example). */
cattr_status cx_pform_id_rows(const cx_pform *f, int i, const int64_t *ids, int64_t per, int64_t n_out,
                              int64_t *id_rows);

/* The thread's form for a derived graph being built (cx_derived_state's build callback reads it). */
extern _Thread_local bool cx_pform_building_whole;

/* cx_derived_state for a call of form `whole`: a method state (whose bool at offset whole_at records the form it was
 * built for) built for the other form is released first; build reads cx_pform_building_whole. */
cattr_status cx_pform_state(cattr_explainer *e, cx_call *c, bool target, bool whole, size_t size,
                            cattr_status (*build)(cattr_explainer *e, void *state),
                            void (*release)(cattr_explainer *e), size_t whole_at, void **state);

/* passes.c: the model output's rank, shape and dtype for the call's inputs tiled reps times (the additional inputs
 * likewise), from a shape-only plan, without requiring the batch first. */
cattr_status cx_output_shape(cattr_explainer *e, const cx_call *c, int64_t reps, int *ndim, int64_t *shape,
                             cattr_dtype *dt);
/* passes.c: one forward pass on inputs xs of the call's shapes as they are (no tiling); the output of any shape. */
cattr_status cx_forward_whole(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, cattr_tensor **out);

#endif
