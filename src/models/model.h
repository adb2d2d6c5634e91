/* model.h - the cattr_model handle: a graph plus what its loader learnt about it (ONNX files here in model.c,
 * Hugging Face checkpoints in decoder.c), its device, describe and a plain forward pass. */
#ifndef CATTR_MODEL_H
#define CATTR_MODEL_H

#include "backend/backend.h"
#include "graph/graph.h"

struct cattr_model {
    cg_graph *g;
    char *path;
    int opset;
    int *in_ndim;                      /* declared input rank, -1 unknown */
    int64_t (*in_shape)[CATTR_MAX_DIMS]; /* declared input shapes, -1 dynamic */
    cattr_dtype *in_dtype;
    int *in_batch_axis; /* NULL: all 0. The dim of each input that holds the batch: 0, or another where the first is fixed (a
                         * recurrent state [2, B, H]: cx_onnx_batch_axis); the explainer hands the methods such an
                         * input batch-first */
    cx_backend *be; /* the model's device (cattr_model_set_device; NULL: the default device) */
    /* a graph exported with a fixed batch (a declared input batch, shapes folded with it: cx_model_rebatch) */
    int64_t batch_exported; /* the declared batch; 0: the inputs' batch is dynamic */
    int64_t batch_rows;     /* > 0: the batch could not be followed through the graph: it runs this many rows a pass */
    int batch_rewrites;     /* the shapes and shared values re-batched */
    char batch_note[400];   /* why the batch could not be followed */
    struct cx_passes *passes; /* the model as exported and its gradient, run in passes (owned; NULL in derived models,
                               * whose MapRows nodes borrow the maps of the model they come from) */
    cg_host_fn *host; /* cattr_model_new_callback: the host function its HostCall node calls (owned; NULL otherwise,
                       * also in the models derived from it, which borrow their clone's pointer) */
};

/* The backend of the model's device. Errors: as cx_backend_by_name. */
cattr_status cx_model_backend(const cattr_model *m, cx_backend **out);

/* Checks tensor x against model input i: its declared rank and static sizes, and a float dtype for inputs declared
 * float. `what` names the role in messages ("input", "additional input"). Errors: CATTR_ERR_SHAPE, CATTR_ERR_DTYPE. */
cattr_status cx_model_check_input(const cattr_model *m, int i, const cattr_tensor *x, const char *what);

/* cattr_model_load_onnx from a serialized ModelProto in memory (borrowed); `what` names it in messages and
 * descriptions. Errors: as cattr_model_load_onnx. */
cattr_status cx_model_load_onnx_buffer(const void *data, size_t size, const char *what, cattr_model **out);

/* A new model holding a clone of m's graph (constants borrowed: m must outlive it), its path, inputs and device: the
 * start of a model derived from m (a precision variant, a neuron's model). Errors: CATTR_ERR_NO_MEMORY. */
cattr_status cx_model_derive(const cattr_model *m, cattr_model **out);

/* A model over graph g (owned from the call on, also on error) derived from m: g's input k declared as m's input
 * from[k] (rank, shape, dtype), or undeclared (from[k] < 0: any rank, float). Path and device are m's. Errors:
 * CATTR_ERR_NO_MEMORY. */
cattr_status cx_model_wrap(const cattr_model *m, cg_graph *g, const int *from, cattr_model **out);

/* Marks fold[k] (one entry per model input) for the int64 inputs whose values give shapes or If conditions (the
 * planner folds those when a call is planned: a sample rate, a length, a mode flag), and for every input declared a
 * scalar (rank 0: it has no batch; a sample rate used as a value). Returns how many, or -1 when out of memory. */
int cx_model_fold_inputs(const cattr_model *m, bool *fold);

/* The model with each input k where fold[k] replaced by a constant copy of values[k] (int64 for an int64 input, else
 * in its own dtype; the inputs that stay keep their order): one model per distinct value of such inputs, whose planner folds through them. Shares m's weights (m must
 * outlive it). Errors: CATTR_ERR_SHAPE / CATTR_ERR_DTYPE (a value that does not fit its input), CATTR_ERR_NO_MEMORY. */
cattr_status cx_model_specialize(const cattr_model *m, const bool *fold, const cattr_tensor *const *values,
                                 cattr_model **out);

/* CATTR_OK when precision `prec` can run in dtype dt on backend be. Errors: CATTR_ERR_INVALID_ARGUMENT (unknown
 * precision, HIGH with float64), CATTR_ERR_UNSUPPORTED (HIGH on a device without bfloat16 products). */
cattr_status cx_precision_check(cattr_precision prec, cattr_dtype dt, const cx_backend *be);

/* The model at precision `prec` on backend `be` for compute dtype dt: *out NULL for CATTR_PRECISION_HIGHEST (use m);
 * for CATTR_PRECISION_HIGH a new model sharing m's weights (m must outlive it) whose products by constant weights
 * are flagged for bfloat16 (cg_mark_bf16); a model without such products gets a warning and computes at full
 * precision. Errors: CATTR_ERR_INVALID_ARGUMENT (unknown precision, HIGH with float64), CATTR_ERR_UNSUPPORTED (a
 * device without bfloat16 products), CATTR_ERR_NO_MEMORY. */
cattr_status cx_model_with_precision(const cattr_model *m, cattr_precision prec, cattr_dtype dt, const cx_backend *be,
                                     cattr_model **out);

/* Whether node `node` is a Conv whose weight the exporter computed by folding a BatchNorm into it (its weight is a
 * generated constant, not "<module>.weight"): the Conv's output is then the BatchNorm's. */
bool cx_conv_bn_folded(const cg_graph *g, int node);

/* A graph exported with a fixed batch (torch.onnx.export without dynamic_axes: each input's declared batch, and
 * every shape the exporter computed from it folded into a constant) made to run any batch: the batch is followed
 * from the inputs through every node (src/models/rebatch.c), each constant shape that holds it multiplied by the
 * call's batch factor (computed in the graph from the value's shape, folded by the planner per call), each value
 * every example shares joined with batched ones tiled to the batch; the inputs' batch becomes dynamic. Where the
 * batch cannot be followed, m->batch_rows is the exported batch, batch_note says
 * why, and the graph becomes MapRows nodes over the graph as exported (one per output, the gradient of output 0 as
 * the body of their gradient): every method that needs only the model's outputs and input gradients runs, in
 * passes of the exported batch, each pass planned once; the methods with their own backward rules and the layer
 * methods, which need the graph's nodes, cannot (a clear error). Where even that cannot be (inputs with dynamic dims
 * besides the batch, more than 7 inputs), the graph stays as exported. Models with a dynamic batch are left as they are. Errors: CATTR_ERR_NO_MEMORY. */
cattr_status cx_model_rebatch(cattr_model *m);
/* Frees m->passes (cattr_model_free). */
void cx_passes_free(struct cx_passes *ps);

/* The dim of model input i that holds the batch (in_batch_axis; 0 when the model has none recorded). */
static inline int cx_model_batch_axis(const cattr_model *m, int i) { return m->in_batch_axis ? m->in_batch_axis[i] : 0; }

/* Value id of the model output 0. */
static inline int cx_model_output(const cattr_model *m) { return m->g->outputs[0]; }

#endif
