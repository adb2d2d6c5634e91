/* onnx.h - ONNX importer: parses a serialized ModelProto (protobuf-c bindings generated from onnx.proto) into a
 * cg_graph.
 *
 * What the graph holds after a successful load:
 *  - inputs:  the ONNX graph inputs that are not initializers, in file order;
 *  - outputs: the ONNX graph outputs, in file order;
 *  - constants: every initializer and every Constant node output, as a CG_VAL_CONST owning its tensor. FLOAT ->
 *    CATTR_FLOAT32, DOUBLE -> CATTR_FLOAT64, INT64 / INT32 / INT16 / INT8 / UINT32 / UINT16 / UINT8 / BOOL ->
 *    CATTR_INT64. Data comes from raw_data (little-endian) or the typed fields (float_data, int64_data, ...);
 *  - nodes: one per ONNX node other than Constant, in file order (ONNX requires topological order). Value names are
 *    the ONNX tensor names; node names the ONNX node names, or "<op_type>_<i>" (i = index among the ONNX nodes) when
 *    empty. Only output 0 of an ONNX node becomes a value; a model that uses another output (MaxPool's Indices,
 *    Dropout's mask, BatchNormalization's running statistics) is rejected.
 *
 * Op mapping (ONNX op -> cg_op, attributes as documented in graph.h):
 *   Gemm, MatMul, Conv, MaxPool, AveragePool, GlobalAveragePool, Relu, LeakyRelu, Sigmoid, Tanh, Softmax, Clip,
 *   Add, Sub, Mul, Div, Neg, Reshape, Flatten, Concat, Unsqueeze, Squeeze, Transpose, Gather, Slice,
 *   BatchNormalization (inference), Identity and Dropout (-> CG_IDENTITY), Constant (-> a constant value).
 * Shape-like inputs are folded into cg_attrs at import time and must be constants (an initializer or a Constant
 * output): Reshape's shape, Unsqueeze/Squeeze axes (opset >= 13), Slice starts/ends/axes/steps, Clip min/max
 * (opset >= 11). Gather's indices stay a node input.
 * Conventions worth knowing:
 *  - Conv / pools: a.pad keeps ONNX order: pad[0..nsp-1] are the begins, pad[nsp..2*nsp-1] the ends. A Conv without
 *    kernel_shape takes it from its (constant) weight. auto_pad VALID means zero pads; SAME_* is unsupported.
 *  - Softmax: a.axis is the raw ONNX axis (default -1 from opset 13, 1 before). For opset < 13 a.index = 1 flags
 *    ONNX's legacy semantics (the input is coerced to 2-D [prod(dims < axis), prod(dims >= axis)] and the softmax
 *    runs over the second dimension); a.index = 0 otherwise.
 *  - Clip: a.alpha = min, a.beta = max; an absent bound is -INFINITY / +INFINITY.
 *  - Slice: ints = starts(n), ends(n), axes(n), steps(n), n_ints = 4n, n <= 8; axes default 0..n-1, steps 1.
 *  - BatchNormalization: a.alpha = epsilon (default 1e-5).
 *
 * Errors (the message names the file, and the node and op where there is one):
 *   CATTR_ERR_IO          the file cannot be opened or read;
 *   CATTR_ERR_FORMAT      protobuf parse failure, no graph or an empty one, a node input or graph output that no
 *                         earlier node, initializer or input defines, duplicate value names, attributes of the wrong
 *                         type or size, tensors whose data does not match their shape;
 *   CATTR_ERR_UNSUPPORTED an op or attribute cattr does not implement, a node domain other than "" / "ai.onnx",
 *                         opset < 7, a non-constant shape-like input, external or sparse tensor data, a tensor data
 *                         type with no cattr equivalent, use of a node output other than output 0;
 *   CATTR_ERR_NO_MEMORY, CATTR_ERR_INVALID_ARGUMENT (NULL arguments).
 * On failure *out is set to NULL (and *info_out too) and nothing is leaked.
 */
#ifndef CATTR_IO_ONNX_H
#define CATTR_IO_ONNX_H

#include "graph/graph.h"

/* Declared type and shape of one graph input, read from its ValueInfo. */
typedef struct cx_onnx_input_info {
    int ndim;                      /* declared rank; -1 when the ValueInfo carries no shape */
    int64_t shape[CATTR_MAX_DIMS]; /* declared sizes; -1 for a dynamic dimension (dim_param or unset) */
    char dim_param[CATTR_MAX_DIMS][64]; /* a dynamic dimension's name ("batch"), "" when unnamed or static */
    cattr_dtype dtype;             /* FLOAT64 for double; INT64 for integer and bool types; FLOAT32 otherwise */
} cx_onnx_input_info;

/* What the loader learnt besides the graph. Entry i of `inputs` describes graph->inputs[i]. */
typedef struct cx_onnx_info {
    int opset;        /* version of the default ("" / "ai.onnx") operator set */
    int64_t ir_version;
    int n_inputs;     /* equals graph->n_inputs */
    cx_onnx_input_info *inputs;
} cx_onnx_info;

/* Loads an ONNX model file into a new graph (caller frees with cg_free). opset_out may be NULL. */
cattr_status cx_onnx_load_file(const char *path, cg_graph **out, int *opset_out);

/* Same from a serialized ModelProto in memory (borrowed; not kept). `what` names the source in messages. */
cattr_status cx_onnx_load_buffer(const void *data, size_t size, const char *what, cg_graph **out, int *opset_out);

/* As above, also returning the declared input types and shapes in *info_out (caller frees with cx_onnx_info_free).
 * info_out may be NULL. */
cattr_status cx_onnx_load_file_info(const char *path, cg_graph **out, cx_onnx_info **info_out);
cattr_status cx_onnx_load_buffer_info(const void *data, size_t size, const char *what, cg_graph **out,
                                      cx_onnx_info **info_out);

void cx_onnx_info_free(cx_onnx_info *info);

/* The axis of graph input i that holds the batch: 0, or for an input whose first dim is fixed (a recurrent state
 * [2, batch, H]) the dim named as the first batched input's first dim, else its first dynamic dim; 0 when its first
 * dim is dynamic, when no input has a dynamic first dim, or when it has no dynamic dim. */
int cx_onnx_batch_axis(const cx_onnx_info *info, int i);

/* Declared shape of graph input i (dynamic dims as -1) copied into `shape`. Returns ndim, or -1 if info is NULL,
 * i is out of range, or the input has no declared shape. */
int cx_onnx_input_shape(const cx_onnx_info *info, int i, int64_t shape[CATTR_MAX_DIMS]);

#endif
