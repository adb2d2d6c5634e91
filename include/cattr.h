/*
 * cattr.h - the public API of cattr, a native attribution engine.
 *
 * Conventions (every function below follows them):
 *  - Handles are opaque. Objects returned through an `out` pointer are owned by the caller and released with the
 *    matching *_free function; every *_free accepts NULL.
 *  - Functions that can fail return a cattr_status. On failure nothing is written to `*out` (it is set to NULL where
 *    it is an object pointer) and cattr_last_error() holds a message naming the offending thing (file, node, input,
 *    target). The message is thread-local and valid until the next failing call on the same thread.
 *  - Input pointers are borrowed: the library never keeps them after the call returns unless the function says so.
 *  - The library never exits the process and never prints; diagnostics go to the log callback, if one is set.
 */
#ifndef CATTR_H
#define CATTR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CATTR_VERSION_MAJOR 0
#define CATTR_VERSION_MINOR 1
#define CATTR_VERSION_PATCH 0
#define CATTR_MAX_DIMS 8

/* ------------------------------------------------------------------------------------------------------------ */
/* Status, errors, logging                                                                                       */
/* ------------------------------------------------------------------------------------------------------------ */

typedef enum cattr_status {
    CATTR_OK = 0,
    CATTR_ERR_INVALID_ARGUMENT = 1, /* a NULL pointer, a bad parameter value, an unknown name */
    CATTR_ERR_IO = 2,               /* a file could not be opened, read or written */
    CATTR_ERR_FORMAT = 3,           /* a file is truncated, malformed or inconsistent */
    CATTR_ERR_UNSUPPORTED = 4,      /* an op, attribute, dtype or feature cattr does not implement */
    CATTR_ERR_SHAPE = 5,            /* tensor shapes that do not fit the model or each other */
    CATTR_ERR_DTYPE = 6,            /* a tensor of the wrong element type */
    CATTR_ERR_TARGET = 7,           /* a target that does not select one value per example, or is out of range */
    CATTR_ERR_NONFINITE = 8,        /* NaN or Inf in an input or baseline */
    CATTR_ERR_NO_MEMORY = 9,        /* an allocation failed or the memory budget is too small */
    CATTR_ERR_INTERNAL = 10,        /* a broken invariant inside cattr: a bug, please report it */
    CATTR_ERR_CANCELLED = 11        /* the caller cancelled the call (cattr_attr_params.cancel) */
} cattr_status;

/* A static, human-readable name for a status ("ok", "invalid argument", ...). Never NULL. */
const char *cattr_status_string(cattr_status status);

/* The message of the last failure on this thread ("" if none). Owned by the library; valid until the next failing
 * call on the same thread. */
const char *cattr_last_error(void);

typedef enum cattr_log_level { CATTR_LOG_DEBUG = 0, CATTR_LOG_INFO = 1, CATTR_LOG_WARN = 2, CATTR_LOG_ERROR = 3 } cattr_log_level;

/* Log callback: `message` is valid only during the call. */
typedef void (*cattr_log_fn)(cattr_log_level level, const char *message, void *user);

/* Sets the process-wide log callback (NULL: discard all messages, the default). `user` is passed back verbatim. */
void cattr_set_log_callback(cattr_log_fn fn, void *user);

/* The library version as "MAJOR.MINOR.PATCH". Static string. */
const char *cattr_version(void);
/* sizeof the public struct named `type` ("cattr_attr_params", "cattr_call", "cattr_target", "cattr_node_rule",
 * "cattr_llm_call") in this library, 0 for another name: bindings that mirror the structs (the Python package) check
 * that they were written for this library before they pass one. */
size_t cattr_sizeof(const char *type);

/* ------------------------------------------------------------------------------------------------------------ */
/* Tensors (host memory, C-contiguous)                                                                           */
/* ------------------------------------------------------------------------------------------------------------ */

typedef enum cattr_dtype { CATTR_FLOAT32 = 0, CATTR_FLOAT64 = 1, CATTR_INT64 = 2 } cattr_dtype;

/* Static name of a dtype ("float32", "float64", "int64"); "?" for an invalid value. */
const char *cattr_dtype_name(cattr_dtype dtype);
/* Bytes per element (4, 8, 8), 0 for an invalid value. */
size_t cattr_dtype_size(cattr_dtype dtype);

typedef struct cattr_tensor cattr_tensor;

/* Creates a zero-filled tensor. ndim 0 makes a scalar (one element). A dimension of 0 is allowed.
 * Errors: CATTR_ERR_INVALID_ARGUMENT (bad dtype, ndim > CATTR_MAX_DIMS, negative size), CATTR_ERR_NO_MEMORY (also when
 * the byte size overflows). */
cattr_status cattr_tensor_new(cattr_dtype dtype, int ndim, const int64_t *shape, cattr_tensor **out);

/* Creates a tensor holding a copy of `data` (numel * element size bytes). Errors as cattr_tensor_new. */
cattr_status cattr_tensor_from_data(cattr_dtype dtype, int ndim, const int64_t *shape, const void *data,
                                    cattr_tensor **out);

/* Creates a copy of `src` converted to `dtype` (float <-> int64 conversion truncates toward zero).
 * Errors: CATTR_ERR_INVALID_ARGUMENT, CATTR_ERR_NO_MEMORY. */
cattr_status cattr_tensor_convert(const cattr_tensor *src, cattr_dtype dtype, cattr_tensor **out);
/* A tensor over the caller's buffer `data` (C-contiguous, numel times the dtype's size bytes), without a copy: the
 * caller keeps the buffer alive and unchanged while the tensor is in use and frees it after cattr_tensor_free (which
 * frees the handle only). For the inputs, baselines, masks and additional inputs of a call: inputs already in the
 * compute dtype are then not copied at all (the language bindings pass arrays so). The library never writes into a
 * call's input tensors. Errors: as cattr_tensor_new; CATTR_ERR_INVALID_ARGUMENT (NULL data with elements). */
cattr_status cattr_tensor_wrap(cattr_dtype dtype, int ndim, const int64_t *shape, void *data, cattr_tensor **out);

void cattr_tensor_free(cattr_tensor *t);

cattr_dtype cattr_tensor_dtype(const cattr_tensor *t);
int cattr_tensor_ndim(const cattr_tensor *t);
/* Pointer to ndim sizes, owned by the tensor. */
const int64_t *cattr_tensor_shape(const cattr_tensor *t);
int64_t cattr_tensor_numel(const cattr_tensor *t);
/* The element buffer, owned by the tensor, numel * element size bytes, row-major. */
void *cattr_tensor_data(cattr_tensor *t);
const void *cattr_tensor_data_const(const cattr_tensor *t);

/* Reads a NumPy .npy file (format 1.0-3.0, little-endian <f4, <f8, <i8; also <i4, |b1, |u1 converted to int64).
 * Errors: CATTR_ERR_IO, CATTR_ERR_FORMAT (bad magic, header or truncated data), CATTR_ERR_UNSUPPORTED (dtype,
 * Fortran order). */
cattr_status cattr_tensor_load_npy(const char *path, cattr_tensor **out);

/* Writes `t` as .npy, atomically (a temporary beside `path`, then rename). Errors: CATTR_ERR_IO. */
cattr_status cattr_tensor_save_npy(const cattr_tensor *t, const char *path);

/* A set of named tensors as read from or written to a .safetensors file. */
typedef struct cattr_tensor_set cattr_tensor_set;

/* Reads every tensor of a .safetensors file (F32, F64, I64; F16/BF16 converted to float32; I32/BOOL/U8 to int64).
 * Every header size and offset is checked. Errors: CATTR_ERR_IO, CATTR_ERR_FORMAT, CATTR_ERR_UNSUPPORTED. */
cattr_status cattr_tensor_set_load(const char *path, cattr_tensor_set **out);
/* An empty set. Errors: CATTR_ERR_NO_MEMORY. */
cattr_status cattr_tensor_set_new(cattr_tensor_set **out);
void cattr_tensor_set_free(cattr_tensor_set *s);
int cattr_tensor_set_count(const cattr_tensor_set *s);
/* Name of the i-th tensor (file order), owned by the set; NULL if i is out of range. */
const char *cattr_tensor_set_name(const cattr_tensor_set *s, int i);
/* The tensor called `name`, owned by the set; NULL if absent. */
const cattr_tensor *cattr_tensor_set_get(const cattr_tensor_set *s, const char *name);
/* Adds a copy of `t` under `name` (replacing one of the same name). Errors: CATTR_ERR_NO_MEMORY. */
cattr_status cattr_tensor_set_add(cattr_tensor_set *s, const char *name, const cattr_tensor *t);
/* Writes the set as .safetensors, atomically. Errors: CATTR_ERR_IO. */
cattr_status cattr_tensor_set_save(const cattr_tensor_set *s, const char *path);

/* ------------------------------------------------------------------------------------------------------------ */
/* Devices                                                                                                       */
/* ------------------------------------------------------------------------------------------------------------ */

/* A device is named by a string: "cpu" (the default; NULL and "" mean it too), "cpu-check" (scalar reference kernels
 * behind memory only the backend may touch: slow, for testing that every op has a kernel and nothing reads device
 * memory), and "cuda" / "cuda:N" in builds with the CUDA backend. A model has a device (cattr_model_set_device) for
 * its own passes and as the default of its explainers; cattr_attr_params.device chooses one per explainer or
 * language-model call. Tensors given to and returned by the API always live on the host. */

/* CATTR_OK when `device` names a device of this build and machine. Errors: CATTR_ERR_INVALID_ARGUMENT (unknown name;
 * the message lists the devices), CATTR_ERR_UNSUPPORTED (a device this build or machine lacks, e.g. CUDA). */
cattr_status cattr_device_check(const char *device);
/* The devices of this build, comma-separated (static string). */
const char *cattr_device_names(void);

/* ------------------------------------------------------------------------------------------------------------ */
/* Models                                                                                                        */
/* ------------------------------------------------------------------------------------------------------------ */

typedef struct cattr_model cattr_model;

/* Loads an ONNX model (default-domain opset 7 or later). Every node is checked at load time: an op or attribute cattr does not
 * implement is an error naming the node and the op. Errors: CATTR_ERR_IO, CATTR_ERR_FORMAT (malformed protobuf,
 * dangling value names), CATTR_ERR_UNSUPPORTED. */
cattr_status cattr_model_load_onnx(const char *path, cattr_model **out);
void cattr_model_free(cattr_model *m);

/* Graph inputs that are not initializers, in order. Names are owned by the model. */
int cattr_model_n_inputs(const cattr_model *m);
const char *cattr_model_input_name(const cattr_model *m, int i);
/* Declared shape of input i; a dynamic dimension is reported as -1. Returns ndim, or -1 if i is out of range. */
int cattr_model_input_shape(const cattr_model *m, int i, int64_t shape[CATTR_MAX_DIMS]);
int cattr_model_n_outputs(const cattr_model *m);
const char *cattr_model_output_name(const cattr_model *m, int i);

/* Writes a human-readable description (inputs, outputs, op counts, addressable layers) into buf with snprintf
 * semantics: returns the length the full text needs (excluding the NUL), whatever `size` is. */
size_t cattr_model_describe(const cattr_model *m, char *buf, size_t size);

/* Resolves a value name: an ONNX tensor name, or a PyTorch module path (`conv1`, `model.relu`) mapped to the
 * module's output by torch.onnx.export's naming (`/conv1/...`). Writes the ONNX name (owned by the model) to *onnx.
 * Errors: CATTR_ERR_INVALID_ARGUMENT (unknown name; the message suggests the closest names). */
cattr_status cattr_model_resolve_value(const cattr_model *m, const char *name, const char **onnx);
/* The values that cross the boundary of a module (a PyTorch module path, as cattr_model_resolve_value takes it): with
 * inputs 0, those made inside it and read outside it (or model outputs), in the order of the nodes that make them
 * (a module returning a tuple has several); with inputs 1, those read inside it and made outside it (model inputs and
 * other modules' values, not constants nor what is computed from constants only), in order of first use (a module called with several tensors). Writes up to
 * max names (borrowed: valid as long as the model) to names (may be NULL) and returns how many there are, or -1 when
 * no node belongs to the module. */
int cattr_model_module_values(const cattr_model *m, const char *path, int inputs, const char **names, int max);

/* The modules that hold weights (float constants of 2 elements or more; a weight belongs to the module of the node
 * that reads it first), in the order of their first use in the graph: their number, and the path of module k written
 * into buf with snprintf semantics (returns the length; "" when k is out of range). */
int cattr_model_n_weight_modules(const cattr_model *m);
size_t cattr_model_weight_module(const cattr_model *m, int k, char *buf, size_t size);

/* The weights (float constants of 2 elements or more) of module `path` (as cattr_model_weight_module gives it, or a
 * parent; NULL or "": every module), in the order of their first use: up to max names (borrowed: valid as long as the
 * model) into names (may be NULL); returns how many there are (0: none, or no such module). */
int cattr_model_module_weights(const cattr_model *m, const char *path, const char **names, int max);
/* The model's weight (a constant) called `name`, or NULL (borrowed: valid as long as the model). */
const cattr_tensor *cattr_model_weight(const cattr_model *m, const char *name);

/* A copy of m whose weights in the n modules (paths as cattr_model_weight_module gives them, or a parent module of
 * several) are drawn anew for the model-randomisation check (Adebayo et al., "Sanity Checks for Saliency Maps", NeurIPS
 * 2018): each weight tensor from a normal distribution of its own mean and standard deviation (a tensor of one
 * repeated value stays as it is), by cattr's generator under `seed` (the weight's ordinal in the order of first use
 * its stream). The copy shares m's other weights: free it before m. Errors: CATTR_ERR_INVALID_ARGUMENT (a module
 * that holds no weight, named), CATTR_ERR_NO_MEMORY. */
cattr_status cattr_model_randomize(const cattr_model *m, const char *const *modules, int n, uint64_t seed,
                                   cattr_model **out);

/* Runs the forward pass on `inputs` (n_inputs tensors in model-input order, float32 or float64; int64 inputs
 * stay int64) in `dtype` and returns output 0 in *out (caller frees). Errors: CATTR_ERR_SHAPE, CATTR_ERR_DTYPE,
 * CATTR_ERR_INVALID_ARGUMENT, CATTR_ERR_NO_MEMORY. */
cattr_status cattr_model_forward(const cattr_model *m, cattr_dtype dtype, const cattr_tensor *const *inputs,
                                 int n_inputs, cattr_tensor **out);

/* A model whose input k is m's input order[k] (order: a permutation of m's n inputs), sharing m's weights (m must
 * outlive it; free both): so that any inputs are the attributed ones, which come first, and the others are given as
 * additional inputs (`cattr explain --additional NAME=FILE`). Errors: CATTR_ERR_INVALID_ARGUMENT (n is not m's input
 * count, order is not a permutation), CATTR_ERR_NO_MEMORY. */
cattr_status cattr_model_reorder_inputs(const cattr_model *m, const int *order, int n, cattr_model **out);

/* Sets the model's device (see Devices): used by cattr_model_forward and by explainers whose params leave `device`
 * NULL. Set it before making explainers of the model. Errors: as cattr_device_check (the device stays unchanged). */
cattr_status cattr_model_set_device(cattr_model *m, const char *device);

/* ---- models whose forward pass is a host function ------------------------------------------------------------ */

/* A model whose forward pass the caller computes (a Python function that cannot be exported to ONNX, a model cattr
 * cannot load): its graph is one node, op HostCall, that calls fn with the node's inputs. Every method that only
 * evaluates the model runs on it unchanged (FeatureAblation, FeaturePermutation, Occlusion, ShapleyValueSampling,
 * ShapleyValues, Lime, KernelShap, and LayerFeatureAblation / LayerFeaturePermutation with one of its inputs as the
 * layer): the perturbed rows are made on the device as for any model, come to the host for fn, and fn's outputs go
 * back. A method that needs the model's gradient fails when it plans it, with CATTR_ERR_UNSUPPORTED ("a model that
 * runs a host function has no gradient").
 *
 * fn computes output 0 for the n_inputs tensors inputs[0..n_inputs): host memory, C-contiguous, float inputs in the
 * call's compute dtype and int64 inputs as int64. They are borrowed for the call only: valid until fn returns, never
 * to be written nor freed (on device "cpu" they are the engine's own buffers, not copies). fn stores a new tensor in
 * *output (made with cattr_tensor_new, _from_data or _wrap; float32, float64 or int64, converted to the compute
 * dtype), which the library owns from then on and frees; a buffer given to cattr_tensor_wrap must stay valid until
 * fn is called next or the model is released (the library copies it when fn returns). Its shape must be the one
 * `shape` gave for these input shapes: another is an error (CATTR_ERR_SHAPE) naming the model and both shapes. fn
 * returns CATTR_OK, or the status the call fails with (CATTR_ERR_CANCELLED cancels it; a value that is no
 * cattr_status becomes CATTR_ERR_INVALID_ARGUMENT; a tensor stored in *output is freed) after calling
 * cattr_callback_fail with a message, which the call's error quotes: "host function '<name>' failed: <message>".
 *
 * shape gives the output's shape for inputs of shapes ndim[i], shapes[i * CATTR_MAX_DIMS + d] (d < ndim[i]), in
 * *out_ndim (0 to CATTR_MAX_DIMS) and out_shape[0..*out_ndim), without computing anything: the planner calls it for
 * every set of input shapes it plans (a chunk of perturbed rows, the unperturbed batch), so fn's output shape must
 * follow from the input shapes alone. A caller learns the rule from one call of its function: an output whose first
 * dim is the batch scales with the rows; an aggregate (one value for the whole batch, Captum's aggregation mode)
 * keeps its shape. It returns like fn.
 *
 * Threads: fn and shape run on the thread that called the library (the executor runs the node there; a HostCall
 * node met inside an active OpenMP parallel region, whether one of cattr's own or the caller's, is refused with
 * CATTR_ERR_INTERNAL instead of being called from a worker), one call at a time per calling thread; calls on
 * several threads (an explainer each) may run them at once. On device "cpu-check" fn receives host copies of the
 * inputs (that device's memory stays closed to outside code); on "cuda" the inputs come down and the output goes up.
 *
 * `name` (copied) names the model in messages and descriptions; input_names (NULL, or n_inputs names, copied: NULL
 * entries and a NULL array give "input<i>") name its inputs, which a layer method may take as its layer;
 * input_dtypes (n_inputs entries) is CATTR_FLOAT32 or CATTR_FLOAT64 for a float input (given in the compute dtype,
 * whichever is named) and CATTR_INT64 for an integer one. `user` is passed back to fn and shape; release (may be NULL)
 * is called with it once, when the model is freed (not when this function fails). The model's declared input shapes
 * are unknown (any rank); its device is cpu until cattr_model_set_device. Every model and explainer derived from it
 * borrows the function: free them before the model.
 * Errors: CATTR_ERR_INVALID_ARGUMENT (NULL name, fn, shape or out; n_inputs outside 1 to 8; a dtype that is not
 * one of the three), CATTR_ERR_NO_MEMORY. */
typedef cattr_status (*cattr_callback_fn)(void *user, int n_inputs, const cattr_tensor *const *inputs,
                                          cattr_tensor **output);
typedef cattr_status (*cattr_callback_shape_fn)(void *user, int n_inputs, const int *ndim, const int64_t *shapes,
                                                int *out_ndim, int64_t *out_shape);
cattr_status cattr_model_new_callback(const char *name, int n_inputs, const char *const *input_names,
                                      const cattr_dtype *input_dtypes, cattr_callback_fn fn,
                                      cattr_callback_shape_fn shape, void *user, void (*release)(void *user),
                                      cattr_model **out);
/* Called by a failing callback (fn or shape above) before it returns its status, on the thread it runs on: `message`
 * (copied; at most 1023 bytes are kept; NULL is "") is quoted by the error of the call that ran it. */
void cattr_callback_fail(const char *message);

/* ------------------------------------------------------------------------------------------------------------ */
/* Attribution                                                                                                   */
/* ------------------------------------------------------------------------------------------------------------ */

typedef enum cattr_method {
    CATTR_METHOD_SALIENCY = 0,
    CATTR_METHOD_INPUT_X_GRADIENT = 1,
    CATTR_METHOD_INTEGRATED_GRADIENTS = 2,
    CATTR_METHOD_DEEPLIFT = 3,
    CATTR_METHOD_DEEPLIFT_SHAP = 4,
    CATTR_METHOD_GUIDED_BACKPROP = 5,
    CATTR_METHOD_DECONVOLUTION = 6,
    CATTR_METHOD_GUIDED_GRADCAM = 7,
    CATTR_METHOD_LRP = 8,
    CATTR_METHOD_GRADIENT_SHAP = 9,
    CATTR_METHOD_FEATURE_ABLATION = 10,
    CATTR_METHOD_FEATURE_PERMUTATION = 11,
    CATTR_METHOD_OCCLUSION = 12,
    CATTR_METHOD_SHAPLEY_VALUE_SAMPLING = 13,
    CATTR_METHOD_SHAPLEY_VALUES = 14,
    CATTR_METHOD_LIME = 15,
    CATTR_METHOD_KERNEL_SHAP = 16,
    /* layer methods: attributions of (or to) a layer's value */
    CATTR_METHOD_LAYER_ACTIVATION = 17,
    CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION = 18,
    CATTR_METHOD_LAYER_GRADCAM = 19,
    CATTR_METHOD_INTERNAL_INFLUENCE = 20,
    CATTR_METHOD_LAYER_CONDUCTANCE = 21,
    CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS = 22,
    CATTR_METHOD_LAYER_DEEPLIFT = 23,
    CATTR_METHOD_LAYER_DEEPLIFT_SHAP = 24,
    CATTR_METHOD_LAYER_GRADIENT_SHAP = 25,
    CATTR_METHOD_LAYER_FEATURE_ABLATION = 26,
    CATTR_METHOD_LAYER_FEATURE_PERMUTATION = 27,
    CATTR_METHOD_LAYER_LRP = 28,
    /* neuron methods: attributions of one neuron of a layer to the inputs */
    CATTR_METHOD_NEURON_GRADIENT = 29,
    CATTR_METHOD_NEURON_INTEGRATED_GRADIENTS = 30,
    CATTR_METHOD_NEURON_CONDUCTANCE = 31,
    CATTR_METHOD_NEURON_DEEPLIFT = 32,
    CATTR_METHOD_NEURON_DEEPLIFT_SHAP = 33,
    CATTR_METHOD_NEURON_GRADIENT_SHAP = 34,
    CATTR_METHOD_NEURON_GUIDED_BACKPROP = 35,
    CATTR_METHOD_NEURON_DECONVOLUTION = 36,
    CATTR_METHOD_NEURON_FEATURE_ABLATION = 37,
    CATTR_METHOD_COUNT
} cattr_method;

/* Parses a method name: the CLI spelling ("integrated-gradients", "feature-ablation") or Captum's class name
 * ("IntegratedGradients"). Returns -1 if unknown. */
int cattr_method_from_name(const char *name);
/* The CLI spelling of a method ("?" if invalid). */
const char *cattr_method_name(cattr_method m);
/* 1 if this build implements the method, else 0. */
int cattr_method_implemented(cattr_method m);
/* 1 if the method attributes a target of the model's output (Captum's `target` argument), 0 if it takes none
 * (LayerActivation and the neuron methods but NeuronConductance, which attribute a layer's or a neuron's value; a
 * target given to them is not read), and 0 for an invalid method. */
int cattr_method_takes_target(cattr_method m);

typedef enum cattr_quadrature {
    CATTR_QUAD_RIEMANN_LEFT = 0,
    CATTR_QUAD_RIEMANN_RIGHT = 1,
    CATTR_QUAD_RIEMANN_MIDDLE = 2,
    CATTR_QUAD_RIEMANN_TRAPEZOID = 3,
    CATTR_QUAD_GAUSS_LEGENDRE = 4
} cattr_quadrature;

/* Parses Captum's names ("riemann_left", ..., "gausslegendre"; '-' accepted for '_'). Returns -1 if unknown. */
int cattr_quadrature_from_name(const char *name);
const char *cattr_quadrature_name(cattr_quadrature q);

/* Computes Captum's integration points: alphas[n] and step sizes[n] in float64, exactly as Captum does (riemann
 * alphas float32-rounded via float32 linspace, Gauss-Legendre as numpy.polynomial.legendre.leggauss). The step sizes
 * are returned unrounded; Captum rounds them to float32 before use and cattr does the same internally.
 * Errors: CATTR_ERR_INVALID_ARGUMENT (an unknown rule; n outside 1 to 1000001, or 2 to 1000001 for a riemann rule). */
cattr_status cattr_quadrature_points(cattr_quadrature q, int n, double *alphas, double *step_sizes);

/* Matmul precision: HIGHEST (default) computes in the compute dtype throughout; HIGH rounds the inputs of the
 * products by constant weights (MatMul and Gemm with a 2-D constant second operand: a model's linear layers and a
 * language model's projections, not its output head) to bfloat16 and accumulates in float32 (on the CPU: AVX-512
 * BF16), about twice as fast on large layers, with errors of about 1e-2 relative on attributions (measure them:
 * cattr explain --precision-error, cattr explain-llm --precision-error). HIGH needs dtype float32. */
typedef enum cattr_precision { CATTR_PRECISION_HIGHEST = 0, CATTR_PRECISION_HIGH = 1 } cattr_precision;

typedef enum cattr_executor_kind { CATTR_EXEC_PLANNED = 0, CATTR_EXEC_EAGER = 1 } cattr_executor_kind;

/* Target: which output value of each example is explained (Captum semantics, see docs/CLI.md).
 *  - CATTR_TARGET_NONE: the output must already hold one value per example.
 *  - CATTR_TARGET_INDEX: the same index tuple for every example: output[b, idx[0], ..., idx[n_idx-1]].
 *  - CATTR_TARGET_PER_EXAMPLE: one tuple per example: output[b, idx[b*n_idx + 0], ...]; idx has batch*n_idx ints.
 * `idx` is borrowed. n_idx is from 0 to CATTR_MAX_DIMS - 1 (and the output's rank - 1); a kind, n_idx or n_rows out of
 * its range is CATTR_ERR_TARGET naming the field and the value. A target given is checked against the model output
 * for the call's inputs before any work (an index out of range names the allowed range); a method whose attributions
 * do not depend on a target (LayerActivation, and the neuron methods other than NeuronConductance, whose Captum
 * classes take none) does not read it beyond those fields. */
typedef enum cattr_target_kind { CATTR_TARGET_NONE = 0, CATTR_TARGET_INDEX = 1, CATTR_TARGET_PER_EXAMPLE = 2 } cattr_target_kind;
typedef struct cattr_target {
    cattr_target_kind kind;
    int n_idx;
    int64_t n_rows; /* PER_EXAMPLE: number of tuples in idx (must equal the batch) */
    const int64_t *idx;
} cattr_target;

/* Progress callback: `done` of `total` units of work (IG steps) are finished. Called from the calling thread. */
typedef void (*cattr_progress_fn)(int64_t done, int64_t total, void *user);

/* NoiseTunnel around any method (Captum's nt_type). */
typedef enum cattr_noise_tunnel {
    CATTR_NT_NONE = 0,
    CATTR_NT_SMOOTHGRAD = 1,
    CATTR_NT_SMOOTHGRAD_SQ = 2,
    CATTR_NT_VARGRAD = 3
} cattr_noise_tunnel;

/* A backward or propagation rule for one graph node (by ONNX node name) or a PyTorch module path (the rule then acts on
 * all of the module's nodes), e.g. from a recorded Captum run: rule is
 * "deeplift_nonlinear", "deeplift_maxpool", "deeplift_softmax", "guided_backprop_relu", "deconvolution_relu",
 * "EpsilonRule", "GammaRule", "Alpha1_Beta0_Rule", "IdentityRule", "lrp_passthrough_nonlinear". Strings are
 * borrowed for the lifetime of the explainer. */
typedef struct cattr_node_rule {
    const char *node;
    const char *rule;
    double epsilon;       /* LRP stabiliser (EpsilonRule default 1e-9) */
    double gamma;         /* GammaRule (default 0.25) */
    int set_bias_to_zero; /* LRP rules */
} cattr_node_rule;

#define CATTR_MAX_INPUTS 8
/* attr_out arrays hold at most this many tensors (one per input, or one per layer tensor for layer methods) */
#define CATTR_MAX_OUTPUTS 16

/* Neuron selector (Captum's neuron_selector), applied to the layer value of each example. */
typedef enum cattr_neuron_kind {
    CATTR_NEURON_NONE = 0,
    CATTR_NEURON_INDEX = 1,  /* layer[b, index...] */
    CATTR_NEURON_SLICES = 2, /* the sum over layer[b, slice...] (a dim whose slice is an index keeps one entry) */
    CATTR_NEURON_SUM = 3     /* layer[b].sum over sum_dims (dims counted with the batch, as in Captum) */
} cattr_neuron_kind;

typedef struct cattr_attr_params {
    cattr_method method;
    cattr_dtype dtype;            /* compute dtype: CATTR_FLOAT32 (default) or CATTR_FLOAT64 */
    int n_steps;                  /* IG: integration steps (default 50), 1 to 1000000, or CATTR_STEPS_AUTO
                                   * (IntegratedGradients and LayerIntegratedGradients: see delta_tol) */
    cattr_quadrature quadrature;  /* IG: default gausslegendre */
    int internal_batch_size;      /* IG: rows per chunk as in Captum (0: choose from max_memory), 0 to 10^9 */
    size_t max_memory;            /* activation memory budget in bytes (0: a quarter of the memory available to the
                                   * process: the least of free RAM, what ulimit -v (RLIMIT_AS) leaves and what its
                                   * cgroups' limits leave); one below a single step, row or sample runs one per pass
                                   * with a warning, logged once per explainer */
    int multiply_by_inputs;       /* IG, DeepLift, GradientShap: 1 (default) multiplies by (input - baseline) */
    int abs;                      /* Saliency: 1 (default) returns |gradient| */
    int return_convergence_delta; /* methods with a delta: 1 computes it (default 1) */
    cattr_executor_kind executor; /* planned (default) or eager */
    const char *device;           /* NULL (default): the model's device (see Devices); read by cattr_explainer_new */
    cattr_precision precision;    /* default CATTR_PRECISION_HIGHEST; HIGH needs float32 and a device with bfloat16
                                   * products */
    int check_finite;             /* 1 (default): NaN/Inf in inputs or baselines is an error */
    cattr_progress_fn progress;   /* NULL (default) or called after each chunk of work; while `cancel` is set, also
                                   * every 100 ms during a pass (from the calling thread, with the last counts again),
                                   * so that a caller whose signal handlers run only in callbacks (Python) sees Ctrl-C */
    void *progress_user;
    /* ---- methods beyond the gradient family ---- */
    double eps;                   /* DeepLift: |delta in| below which the plain gradient is used (default 1e-10) */
    int perturbations_per_eval;   /* perturbation methods: perturbations per forward pass (0: from max_memory), 0 to
                                   * 10^8 */
    int n_samples;                /* ShapleyValueSampling 25, Lime 25, KernelShap 25, GradientShap 5; 1 to 10^8 */
    double stdevs;                /* GradientShap / NoiseTunnel noise standard deviation (default 0 / 1), finite, >= 0 */
    cattr_noise_tunnel nt_type;   /* NoiseTunnel around the method (default none) */
    int nt_samples;               /* default 5; 1 to 10^6 */
    int nt_samples_batch_size;    /* 0: all samples in one batch; 0 to 10^6 */
    int draw_baseline_from_distrib;
    uint64_t seed;                /* counter-based generator key for stochastic methods (default 0) */
    /* Occlusion: window shape and strides per input (without the batch dim); ndim 0 = not given (strides of 1), from 0
     * to CATTR_MAX_DIMS; strides_ndim 1 or -1: strides[i][0] for every dim. Sizes are >= 1 (a window at most the
     * input's size and a stride at most the window's, checked by each call) */
    int sliding_window_ndim[CATTR_MAX_INPUTS];
    int64_t sliding_window[CATTR_MAX_INPUTS][CATTR_MAX_DIMS];
    int strides_ndim[CATTR_MAX_INPUTS];
    int64_t strides[CATTR_MAX_INPUTS][CATTR_MAX_DIMS];
    /* Lime: Lasso alpha (default 0.01) and kernel width of the exponential cosine kernel (default 1.0) */
    double lime_alpha;
    double kernel_width;
    int lime_euclidean; /* Lime's kernel distance: 0 cosine (Lime's default), 1 euclidean (LimeBase's option) */
    /* Lime/KernelShap: 1 returns the interpretable model's coefficients, [batch, features], as attr[0] (Captum's
     * return_input_shape=False, and LimeBase); the other attr entries are then empty tensors */
    int return_coefficients;
    /* Layer and GradCAM methods: the layer, as a PyTorch module path ("conv2") or an ONNX value name; borrowed */
    const char *layer;
    int attribute_to_layer_input; /* use the layer's input instead of its output (and the neuron's input) */
    /* several layers, or the several output tensors of one module, as value names (n_layers 0: `layer` alone) */
    const char *const *layers;
    int n_layers; /* 0 to CATTR_MAX_OUTPUTS */
    /* neuron methods */
    cattr_neuron_kind neuron_kind;
    int neuron_ndim;                              /* entries of neuron_index / neuron_slice: 1 to CATTR_MAX_DIMS (the
                                                   * layer's dims without the batch); the indices are checked against
                                                   * the layer's shape by each call */
    int64_t neuron_index[CATTR_MAX_DIMS];         /* INDEX */
    int64_t neuron_slice[CATTR_MAX_DIMS][3];      /* SLICES: start, stop, step (stop INT64_MAX: to the end) */
    int neuron_slice_is_index[CATTR_MAX_DIMS];    /* SLICES: this dim is a plain index (start) */
    int neuron_sum_ndim;                          /* 0 to CATTR_MAX_DIMS */
    int64_t neuron_sum_dims[CATTR_MAX_DIMS];      /* SUM */
    int relu_attributions;                        /* LayerGradCam: ReLU on the map (default 0) */
    int attr_dim_summation;                       /* LayerGradCam: sum over channels (default 1) */
    /* Rules for named nodes (replaying a Captum run); n_node_rules 0: the method's rule on every node of the op
     * kinds it acts on */
    const cattr_node_rule *node_rules;
    int n_node_rules; /* 0 to 10^6 */
    /* Language models (cattr_llm_attribute), perturbation methods: 0 (default) computes the unchanged prefix of the
     * ablated sequences once (ablating token i changes nothing before position i) and runs only the positions from
     * i on, when perturbations_per_eval is 0; 1 runs every sequence in full. */
    int no_prefix_cache;
    /* NULL (default), or a flag the call reads after each chunk of work and between the operations of a pass: a
     * non-zero value stops the call with CATTR_ERR_CANCELLED within one operation, nothing written to its outputs. Set
     * it from another thread (a UI, a signal handler's flag, Python's Ctrl-C); borrowed for the call. */
    const volatile int *cancel;
    /* n_steps CATTR_STEPS_AUTO (IntegratedGradients and LayerIntegratedGradients, multiplied by the inputs, without a
     * noise tunnel or a split): the call runs at 8, 16, 32, ... steps of its quadrature, at most max_steps (the last
     * try max_steps itself), and returns the first whose convergence delta is within delta_tol of the attributions'
     * total for every example (|delta_b| <= delta_tol * the sum of |attribution| over example b: not the signed sum,
     * which is near 0 for a target that barely moves from the baseline), or max_steps' with a warning.
     * cattr_explainer_steps_used (cattr_llm_steps_used) tells the count. Each try is a whole call (Gauss-Legendre
     * points of one count are not among another's): at most about twice the work of the count reached. */
    double delta_tol; /* default 1e-3; finite, > 0 and < 1 */
    int max_steps;    /* default 512; 8 to 1000000 */
} cattr_attr_params;

/* n_steps value: choose the steps from the convergence delta (cattr_attr_params.delta_tol) */
#define CATTR_STEPS_AUTO (-1)

/* Default parameters for a method (Captum's defaults). */
cattr_attr_params cattr_attr_default_params(cattr_method method);

/* An explainer binds a model to a method and keeps its plans and memory between calls: a call with the same shapes
 * reuses them. The explainer borrows the model: the model must outlive it. */
typedef struct cattr_explainer cattr_explainer;

/* Every field of params that the method (and its NoiseTunnel) reads is checked against its range (the limits are
 * beside the fields: beyond them memory or time would explode, and such values are a caller's overflow or a misread
 * file); fields the method does not read are not. Enums must be one of their values.
 * Errors: CATTR_ERR_INVALID_ARGUMENT (NULL model, a field out of its range: the message names the field, the value
 * given and the allowed range or names), CATTR_ERR_UNSUPPORTED (float64 on a backend without it),
 * CATTR_ERR_NO_MEMORY. */
cattr_status cattr_explainer_new(const cattr_model *model, const cattr_attr_params *params, cattr_explainer **out);
void cattr_explainer_free(cattr_explainer *e);

/* Everything one attribution call takes. Pointers are borrowed for the duration of the call. */
typedef struct cattr_call {
    /* n_inputs tensors, the first model inputs, batch first; float32/float64, or int64 for the perturbation methods
     * (FeatureAblation, FeaturePermutation, Occlusion, ShapleyValueSampling, ShapleyValues, Lime, KernelShap,
     * NeuronFeatureAblation: ablated in their own dtype) and the layer methods that take token ids. The perturbation
     * methods also take inputs whose dim 0 differs and inputs with no elements, for a model of the whole batch (see
     * cattr_explainer_run) */
    const cattr_tensor *const *inputs;
    int n_inputs; /* 1 to CATTR_MAX_INPUTS; n_additional, n_draws and n_layer_masks (0 to CATTR_MAX_OUTPUTS) are >= 0,
                   * their arrays not NULL when they are not 0: out of range is CATTR_ERR_INVALID_ARGUMENT */
    /* NULL (zeros), or n_inputs entries each NULL (zero), a 0-d tensor (scalar), a tensor of the input's shape, or
     * a tensor with batch 1 (broadcast); for the perturbation methods any shape that broadcasts to the input as torch
     * broadcasts (dims aligned from the last, each 1 or the input's: [F] for [1, F], [B, 1] for [B, F]), and for an
     * int64 input int64 values or whole floats (CATTR_ERR_DTYPE otherwise); for DeepLiftShap and GradientShap, any
     * number of rows (a distribution) */
    const cattr_tensor *const *baselines;
    const cattr_target *target;             /* NULL: no target */
    const cattr_tensor *const *additional;  /* n_additional tensors fed to the next model inputs */
    int n_additional;
    /* perturbation methods: NULL, or n_inputs int64 masks (NULL entry: every element its own feature), broadcastable
     * to the input with dim 0 equal to 1 or the batch; equal ids across inputs are perturbed together */
    const cattr_tensor *const *feature_masks;
    /* explicit random draws in consumption order, with their roles (shared/golden/README.md section 7), used
     * instead of the generator when n_draws > 0 */
    const cattr_tensor *const *draws;
    const char *const *draw_roles;
    int n_draws;
    /* LayerFeatureAblation / LayerFeaturePermutation: masks over the layer tensors (NULL entries: default), and the
     * layer baseline (NULL: 0; a 0-d tensor: a scalar; else a tensor of the layer's shape or batch 1) */
    const cattr_tensor *const *layer_masks;
    int n_layer_masks;
    const cattr_tensor *layer_baseline;
} cattr_call;

/* Attributes the target output to the inputs of `call`.
 *  attr_out:  receives one new tensor (caller frees each) per input, in the compute dtype (FeatureAblation and
 *             FeaturePermutation: the model output's dtype, int64 for a model of integers, as Captum); for layer
 *             methods one per layer tensor instead (give an array of CATTR_MAX_OUTPUTS entries). Shapes are the
 *             inputs' for gradient methods, [n, *input.shape[1:]] for perturbation methods (Captum's rule), the layer
 *             tensors' for layer methods.
 *             A model of the whole batch (perturbation methods; Captum's aggregation mode): when the model output
 *             does not have the batch first or does not grow with it (a scalar, [1, 3] for a batch of 2), or the
 *             inputs' dim 0 differ, each perturbed copy of the inputs is one forward pass and every target-selected
 *             output value is attributed: [n_outputs, *input.shape[1:]] (the Shapley methods [*output.shape,
 *             *input.shape[1:]], a scalar output as [1]; Lime and KernelShap, which need one value, [1,
 *             *input.shape[1:]]); perturbations_per_eval above 1 is then CATTR_ERR_INVALID_ARGUMENT, a target on a
 *             scalar output CATTR_ERR_TARGET, and a feature mask that differs per example CATTR_ERR_SHAPE unless the
 *             output has one value per example. An input with no elements gets zero attributions of its shape.
 *  delta_out: NULL, or receives a new tensor with the convergence delta where the method has one (NULL otherwise).
 * Errors: CATTR_ERR_INVALID_ARGUMENT, CATTR_ERR_SHAPE (inputs, baselines, masks or additional tensors of a wrong
 * shape), CATTR_ERR_DTYPE, CATTR_ERR_TARGET (a target that is out of range or leaves more than one value per
 * example), CATTR_ERR_NONFINITE, CATTR_ERR_NO_MEMORY, CATTR_ERR_UNSUPPORTED. On error nothing is written to attr_out
 * or delta_out. */
cattr_status cattr_explainer_run(cattr_explainer *e, const cattr_call *call, cattr_tensor **attr_out,
                                 cattr_tensor **delta_out);

/* The n_steps of the explainer's last call that finished (the count an n_steps CATTR_STEPS_AUTO call reached; 0
 * before the first call or for NULL). */
int cattr_explainer_steps_used(const cattr_explainer *e);

/* Shorthand for cattr_explainer_run without feature masks or explicit draws. */
cattr_status cattr_explainer_attribute(cattr_explainer *e, const cattr_tensor *const *inputs, int n_inputs,
                                       const cattr_tensor *const *baselines, const cattr_target *target,
                                       const cattr_tensor *const *additional, int n_additional,
                                       cattr_tensor **attr_out, cattr_tensor **delta_out);

/* Splitting one attribution over processes or machines. The work of one call is cut into n_parts parts computed
 * apart (each by an explainer with the same params on the same model, in another process or on another machine: the
 * command's `explain --split steps` under mpirun), whose bytes are combined, in part order, into the attributions (and
 * delta) one process gives, bit for bit. Implemented for IntegratedGradients without a noise tunnel: its steps are
 * cut into units fixed by the call (ceil(n_steps / 16) steps; Captum's chunks of internal_batch_size rows; the steps
 * one pass holds when max_memory holds fewer), part p computing the contiguous units p*G/n_parts to
 * (p+1)*G/n_parts - 1 of the G units and keeping each unit's sum; combining adds them in unit order on the backend,
 * as the plain call (cattr_explainer_run) adds them: the plain call's bits at any n_parts (cattr_split_chunk_steps
 * tells the unit). Every part and the combining call must be given the same call and cut the steps alike: give
 * internal_batch_size, or the same max_memory, where processes could see different free memory.
 * Also implemented for FeatureAblation, FeaturePermutation, Occlusion, ShapleyValueSampling, ShapleyValues, Lime
 * and KernelShap (without a noise tunnel): their perturbed states or samples are evaluated in chunks of
 * perturbations_per_eval (or what max_memory allows), part p evaluates chunks p*C/n_parts to (p+1)*C/n_parts - 1
 * and keeps the model outputs of their states; combining consumes the outputs in chunk order as one process does
 * (differences, totals, the surrogate fit): one process's result, bit for bit. Give perturbations_per_eval (or the
 * same max_memory) to every part, and the same seed. And for GradientShap and a noise tunnel around Saliency,
 * InputXGradient, GuidedBackprop or Deconvolution: their noisy samples run in chunks of rows (from max_memory: give
 * every part the same), a part computes its chunks' sums (and GradientShap's deltas) from zeros, combining adds them
 * in chunk order with the same addition; likewise the path methods of layers and neurons (LayerIntegratedGradients,
 * LayerConductance, InternalInfluence, NeuronIntegratedGradients, NeuronConductance) with their chunks of steps,
 * and a noise tunnel around IntegratedGradients, DeepLift, FeatureAblation, Occlusion, ShapleyValueSampling, Lime or
 * KernelShap with its partitions of samples (not when replaying explicit draws).
 *
 * cattr_explainer_run_part computes part `part` (0 <= part < n_parts, n_parts >= 1) of the call; *blob (malloc'ed, the caller
 * frees it with free()) receives *len bytes (a part with no chunk is a few bytes). cattr_explainer_combine takes the
 * n_parts blobs in part order and writes what cattr_explainer_run would (attr_out, delta_out).
 * Errors: CATTR_ERR_UNSUPPORTED (another method, a noise tunnel around another method or replaying draws, a model
 * with integer inputs that give shapes),
 * CATTR_ERR_INVALID_ARGUMENT (part out of range; blobs of another call, cut differently, missing or out of order,
 * naming the part), and cattr_explainer_run's. */
cattr_status cattr_explainer_run_part(cattr_explainer *e, const cattr_call *call, int part, int n_parts, void **blob,
                                      size_t *len);
cattr_status cattr_explainer_combine(cattr_explainer *e, const cattr_call *call, const void *const *blobs,
                                     const size_t *lens, int n_parts, cattr_tensor **attr_out,
                                     cattr_tensor **delta_out);
/* What cattr_explainer_run_part cuts for these params: "steps" (IntegratedGradients and the layer and neuron path
 * methods), "features" (FeatureAblation, FeaturePermutation, Occlusion), "samples" (the Shapley methods, Lime,
 * KernelShap, GradientShap, a noise tunnel's samples), or NULL when the method (with its noise tunnel) is not split.
 * A static string; NULL for p NULL. */
const char *cattr_split_kind(const cattr_attr_params *p);
/* The steps per unit of an IntegratedGradients part blob (0 for bytes that are not one). */
int cattr_split_chunk_steps(const void *blob, size_t len);

/* Peak bytes of backend memory used by the explainer's plans so far. */
size_t cattr_explainer_peak_memory(const cattr_explainer *e);

/* The vector-Jacobian product of the model at the call's inputs (and additional inputs; its target, baselines and
 * masks are not read): grads_out[i] = the gradient of sum(seed * F(x)) with respect to input i (one new tensor per
 * input, the inputs' shapes, the compute dtype), seed of the model output's shape; with `output` (may be NULL) the
 * model output too, from the same pass. The gradient of a loss of the output: seed = dloss/doutput (Captum's robust
 * attacks). Errors: as cattr_explainer_run, CATTR_ERR_SHAPE (a seed not of the output's shape), CATTR_ERR_DTYPE. */
cattr_status cattr_explainer_vjp(cattr_explainer *e, const cattr_call *call, const cattr_tensor *seed,
                                 cattr_tensor **grads_out, cattr_tensor **output);

/* Derivatives with respect to the model's weights, to second order (Captum's influence functions): the weights named
 * names[0..n_params) (the model's constants by name: an ONNX initializer's, e.g. "fc1.weight") take the values
 * params[k] (of their shapes; float32 or float64) in place of the model's, at the call's inputs and additional inputs
 * (its target, baselines and masks are not read). With u = seed (of the model output's shape):
 *   grads_out[k] = d/dw_k sum(u * F(x; w))                                   (the weights' gradient, J^T u)
 *   output_out   = F(x; w)                                                  (may be NULL)
 * and with directions v_k (the weights' shapes; NULL: none of these):
 *   hv_out[k]    = d/dw_k sum_j <(J^T u)_j, v_j> = sum_o u_o H(F_o) v          (the seeded Hessian-vector product)
 *   jv_out       = sum_j J_j v_j, the output's derivative along v (the output's shape; may be NULL)
 * computed in one pass of a graph that differentiates the gradient graph (each gradient op's own rule: exact, no
 * finite differences). The Hessian-vector product of a loss L(F): hv for u = dL/dF plus grads_out for
 * u = H(L) jv (a second call). New tensors in the compute dtype. At most 100 weights. Errors: as cattr_explainer_run,
 * CATTR_ERR_INVALID_ARGUMENT (a name that is not a weight of the model, named with the model's weights; a name given
 * twice), CATTR_ERR_SHAPE, CATTR_ERR_DTYPE, CATTR_ERR_UNSUPPORTED (an op of the model whose gradient has no rule of
 * its own yet: second order runs through Gemm, MatMul, the elementwise arithmetic, Relu, LeakyRelu, Sigmoid, Tanh,
 * reshapes, Concat, Slice and sums). */
cattr_status cattr_explainer_param_hvp(cattr_explainer *e, const cattr_call *call, int n_params,
                                       const char *const *names, const cattr_tensor *const *params,
                                       const cattr_tensor *seed, const cattr_tensor *const *directions,
                                       cattr_tensor **grads_out, cattr_tensor **output_out, cattr_tensor **jv_out,
                                       cattr_tensor **hv_out);

/* A loss of the model output at the call's target (cattr_explainer_loss_grad). */
typedef enum cattr_loss {
    CATTR_LOSS_NLL_OUTPUT = 0,   /* -log(F(x)[target]): Captum's robust attacks' default, for a model of probabilities */
    CATTR_LOSS_CROSS_ENTROPY = 1, /* -log_softmax(F(x))[target]: torch's CrossEntropyLoss of logits ([batch, classes]) */
    CATTR_LOSS_MSE = 2            /* sum over each example's elements of (F(x) - label)^2 (cattr_explainer_example_grads) */
} cattr_loss;

/* The gradient of the per-example losses' sum with respect to the call's inputs, the loss on the graph (one pass):
 * grads_out[i] new tensors of the inputs' shapes in the compute dtype; loss_out (may be NULL) the losses [B]. The
 * call's target (required: one value per example) is each example's label (or the class an attack aims at); its
 * baselines and masks are not read. Errors: as cattr_explainer_run, CATTR_ERR_TARGET (no target),
 * CATTR_ERR_UNSUPPORTED (cross-entropy of an output that is not [batch, classes]), CATTR_ERR_INVALID_ARGUMENT. */
cattr_status cattr_explainer_loss_grad(cattr_explainer *e, const cattr_call *call, cattr_loss loss,
                                       cattr_tensor **grads_out, cattr_tensor **loss_out);

/* Each example's gradient of its own loss with respect to named weights (TracIn's per-example gradients; Pruthi et
 * al., NeurIPS 2020): the weights names[0..n_params) (the model's constants by name, e.g. "fc1.weight"; each read once,
 * by a Gemm as its weight or bias, a MatMul as its second operand, or an Add of a bias after a MatMul: Linear layers)
 * take params[k] (their shapes; params NULL or params[k] NULL: the model's own) at the call's inputs and additional
 * inputs. The loss of example b: CATTR_LOSS_CROSS_ENTROPY or CATTR_LOSS_NLL_OUTPUT at labels[b] (int64 [B]), or
 * CATTR_LOSS_MSE against labels of the output's shape. grads_out[k] (may be NULL): new [B, *weight shape] tensors,
 * example b's gradient in row b, computed batched and exactly from the layer's input and the gradient at its output
 * (one pass). self_out (may be NULL): [B] sum_k |grad_k[b]|^2; with against[k] ([M, *weight shape] each; NULL:
 * none), dots_out [B, M] = sum_k <grad_k[b], against_k[m]>: both computed in the same graph, so that only they come
 * down when grads_out is NULL. loss_out (may be NULL): the losses [B]. Compute dtype. At most 64 weights. Errors: as cattr_explainer_run,
 * CATTR_ERR_INVALID_ARGUMENT (an unknown weight, named twice, nothing asked), CATTR_ERR_UNSUPPORTED (a weight read
 * otherwise: a convolution's, a shared one), CATTR_ERR_SHAPE (params, labels or against of the wrong shape),
 * CATTR_ERR_TARGET (a negative label). */
cattr_status cattr_explainer_example_grads(cattr_explainer *e, const cattr_call *call, cattr_loss loss,
                                           const cattr_tensor *labels, int n_params, const char *const *names,
                                           const cattr_tensor *const *params, const cattr_tensor *const *against,
                                           cattr_tensor **grads_out, cattr_tensor **dots_out, cattr_tensor **self_out,
                                           cattr_tensor **loss_out);

/* ------------------------------------------------------------------------------------------------------------ */
/* Metrics of attributions (Captum's captum.metrics)                                                            */
/* ------------------------------------------------------------------------------------------------------------ */

/* Infidelity (Yeh et al., "On the (In)fidelity and Sensitivity of Explanations", NeurIPS 2019; Captum's
 * captum.metrics.infidelity) of `attributions` (one per input, the inputs' shapes) for the inputs of `call`, with its
 * target and additional inputs (its baselines, masks and draws are not read). e is any explainer of the model: it
 * gives the device, the dtype and the passes; its method is not used. n_samples perturbations per example in Captum's
 * layout: perturbations[i] and perturbed[i] have B * n_samples rows, example b's at rows b * n_samples to
 * b * n_samples + n_samples - 1 (perturbed = input - perturbation for Captum's perturbation functions; the values are
 * taken as given). Per example, with d_s = the sum over every input's elements of perturbation_s * attribution and
 * f_s = F(x) - F(perturbed_s) at the target:
 *   infidelity = mean over s of (d_s - f_s)^2; with normalize, of (beta d_s - f_s)^2 where
 *   beta = sum_s d_s f_s / sum_s d_s^2 (a zero denominator taken as 1, as Captum's safe_div),
 * computed in the compute dtype with Captum's operations and torch's summation order. The model runs on
 * samples_per_pass perturbed samples of every example per pass (0: all of them in one pass; Captum's
 * max_examples_per_batch is B times it). *out: a new [B] tensor in the compute dtype.
 * Errors: those of cattr_explainer_run (inputs, target: one model value per example), CATTR_ERR_SHAPE (an
 * attribution, perturbation or perturbed input of the wrong shape, named), CATTR_ERR_DTYPE, CATTR_ERR_INVALID_ARGUMENT
 * (n_samples from 1 to 10^8, samples_per_pass >= 0). */
cattr_status cattr_infidelity(cattr_explainer *e, const cattr_call *call, const cattr_tensor *const *attributions,
                              const cattr_tensor *const *perturbations, const cattr_tensor *const *perturbed,
                              int64_t n_samples, int normalize, int64_t samples_per_pass, cattr_tensor **out);

/* The measure of Captum's sensitivity_max (Yeh et al. 2019) for one batch of perturbations: per example b, the largest
 * over its n_samples perturbations s of ||expl_b - expl'_{b,s}|| / ||expl_b|| (a zero denominator taken as 1), the
 * norm over the elements of all n explanation tensors together. expl[i]: the explanations of the inputs [B, ...];
 * expl_perturbed[i]: those of the perturbed inputs [B * n_samples, ...] in Captum's order (example b's at rows
 * b * n_samples ...). norm_ord: 2 (Captum's 'fro'), 1, INFINITY, -INFINITY or another positive order. Computed on
 * `device` (NULL: cpu) in float64 when any tensor is float64, else float32. *out: a new [B] tensor.
 * Errors: CATTR_ERR_INVALID_ARGUMENT (n from 1 to CATTR_MAX_INPUTS, n_samples from 1 to 10^8, the order), CATTR_ERR_SHAPE,
 * CATTR_ERR_DTYPE, a device error. */
cattr_status cattr_sensitivity_max(const char *device, const cattr_tensor *const *expl,
                                   const cattr_tensor *const *expl_perturbed, int n, int64_t n_samples,
                                   double norm_ord, cattr_tensor **out);

/* Deletion or insertion curve (Petsiuk, Das and Saenko, "RISE", BMVC 2018; beyond Captum) of `attributions` (one per
 * input, the inputs' shapes, any float dtype) for the inputs of `call`, with its target, baselines, feature masks and
 * additional inputs. e is any explainer of the model (its device, dtype and passes; its method is not run). The
 * features are the call's feature-mask groups (ids shared across inputs) or every element; per example they are
 * ranked by the sum of their elements' attributions, largest first (ties: the first feature first). At step k of
 * n_steps the round(k F / n_steps) first features are moved: deletion (insertion 0) replaces them by the baseline
 * (zeros without baselines), insertion starts from the baseline and puts them back from the input. The score is the
 * model output at the target (softmax != 0: the softmax of a [batch, classes] output at the target). The model runs
 * on steps_per_pass steps of every example per pass (0: every step in one pass).
 * *curve: a new [B, n_steps + 1] tensor of the scores (column 0: no feature moved); *auc: a new [B] tensor, the area
 * under each curve over [0, 1] by the trapezoid rule. Both in the compute dtype.
 * Errors: those of cattr_explainer_run (inputs, target, masks), CATTR_ERR_SHAPE (an attribution of the wrong shape,
 * named), CATTR_ERR_DTYPE (an integer input), CATTR_ERR_UNSUPPORTED (softmax of an output that is not 2-d),
 * CATTR_ERR_INVALID_ARGUMENT (n_steps from 1 to 100000, steps_per_pass >= 0). */
cattr_status cattr_deletion_curve(cattr_explainer *e, const cattr_call *call, const cattr_tensor *const *attributions,
                                  int insertion, int64_t n_steps, int softmax, int64_t steps_per_pass,
                                  cattr_tensor **curve, cattr_tensor **auc);

/* Spearman's rank correlation per example of a and b (n tensors each, pairwise of one shape [B, ...]; an example's
 * elements of all n tensors together), ties given their average rank (scipy.stats.spearmanr); absolute != 0: of |a|
 * and |b|. NaN for an example whose values are all equal on one side. *out: a new float64 [B] tensor.
 * Errors: CATTR_ERR_SHAPE, CATTR_ERR_INVALID_ARGUMENT. */
cattr_status cattr_rank_correlation(const cattr_tensor *const *a, const cattr_tensor *const *b, int n, int absolute,
                                    cattr_tensor **out);

/* The model-randomisation check (Adebayo et al., "Sanity Checks for Saliency Maps", NeurIPS 2018; beyond Captum):
 * for k = 0 .. n_modules - 1 the method of p runs `call` on a copy of m whose weights are drawn anew
 * (cattr_model_randomize under `seed`) in modules[0..k] (cascade != 0: list the modules from the output down, as
 * the paper does) or in modules[k] alone (cascade 0), and its attributions are compared with `attributions` (the n_attr
 * tensors the method gave on m) by cattr_rank_correlation, signed and of absolute values. *spearman and
 * *spearman_abs: new float64 [n_modules, B] tensors (row k: the copy k). Errors: those of cattr_model_randomize (a
 * module without weights), cattr_explainer_new and cattr_explainer_run (prefixed with the module), CATTR_ERR_SHAPE
 * (attributions that are not the method's), CATTR_ERR_INVALID_ARGUMENT. */
cattr_status cattr_randomization_check(const cattr_model *m, const cattr_attr_params *p, const cattr_call *call,
                                       const cattr_tensor *const *attributions, int n_attr,
                                       const char *const *modules, int n_modules, int cascade, uint64_t seed,
                                       cattr_tensor **spearman, cattr_tensor **spearman_abs);

/* ------------------------------------------------------------------------------------------------------------ */
/* Language models (Hugging Face checkpoint folders: qwen3, llama, qwen2, mistral)                              */
/* ------------------------------------------------------------------------------------------------------------ */

typedef struct cattr_llm cattr_llm;

/* Loads DIR: config.json, model.safetensors (or shards with model.safetensors.index.json), and tokenizer.json when
 * present. Weights are converted once to float32. Errors: CATTR_ERR_IO, CATTR_ERR_FORMAT (a truncated or malicious
 * safetensors header, a weight missing or of the wrong shape), CATTR_ERR_UNSUPPORTED (a model_type or config key
 * that changes the math in a way cattr does not implement, naming it). */
cattr_status cattr_llm_load(const char *dir, cattr_llm **out);
void cattr_llm_free(cattr_llm *m);

/* Token ids of UTF-8 text (no special tokens added, as Qwen's tokenizer does); *ids is malloc'd (caller frees).
 * Errors: CATTR_ERR_UNSUPPORTED (the folder has no tokenizer.json), CATTR_ERR_INVALID_ARGUMENT (invalid UTF-8). */
cattr_status cattr_llm_encode(const cattr_llm *m, const char *text, int64_t **ids, int64_t *n);
/* The text of one token (decoded alone) into buf with snprintf semantics; "<id>" without a tokenizer. */
size_t cattr_llm_token_text(const cattr_llm *m, int64_t id, char *buf, size_t size);
/* The UTF-8 text of n tokens decoded together (a character whose bytes span several byte-level tokens comes out
 * whole; ids outside the vocabulary are skipped; skip_special != 0 drops the special tokens); *text is malloc'd
 * (caller frees). Errors: CATTR_ERR_INVALID_ARGUMENT (NULL arguments, n < 0), CATTR_ERR_UNSUPPORTED (no
 * tokenizer.json), CATTR_ERR_NO_MEMORY. */
cattr_status cattr_llm_decode(const cattr_llm *m, const int64_t *ids, int64_t n, int skip_special, char **text);

/* Each token's bytes [start[t], end[t]) in `text`, which ids[T] encode (cattr_llm_encode's ids of it): the decoded
 * prefix of t + 1 tokens agrees with the text up to end[t] (a token ending inside a multi-byte character has an empty
 * span, and the token that completes the character holds it). Errors: CATTR_ERR_INVALID_ARGUMENT (NULL arguments,
 * T < 1, tokens that do not decode to the text, naming the byte where they differ), CATTR_ERR_UNSUPPORTED (no
 * tokenizer), CATTR_ERR_NO_MEMORY. */
cattr_status cattr_llm_token_spans(const cattr_llm *m, const char *text, const int64_t *ids, int64_t T, int64_t *start,
                                   int64_t *end);

/* Segments of a prompt for cattr_llm_call.segments: `kind` is "tokens" (each its own), "words" (runs of
 * non-white-space), "sentences" (a sentence ends at . ! or ? , after any closing quotes or brackets, followed by
 * white space; a blank line ends one too), "lines" (each ends after its newline) or "spans" (n_spans byte ranges
 * [spans[2s], spans[2s+1]) of the text, in order and not overlapping; the text between and around them forms
 * segments of its own). A token belongs to the segment holding its first byte that is not white space (its first
 * byte if it is all white space): " Paris" to the word "Paris", "\n" to the line it ends. Segments that hold no
 * token are dropped and the ids renumbered in order. Writes segments[T] and *n_segments. Errors: as
 * cattr_llm_token_spans, and CATTR_ERR_INVALID_ARGUMENT for another kind or spans out of order or outside the
 * text. */
cattr_status cattr_llm_segments(const cattr_llm *m, const char *text, const int64_t *ids, int64_t T, const char *kind,
                                const int64_t *spans, int64_t n_spans, int64_t *segments, int64_t *n_segments);
/* Vocabulary size of the model, its maximum context, and its end-of-sequence token (-1 if none). */
int64_t cattr_llm_vocab_size(const cattr_llm *m);
int64_t cattr_llm_max_positions(const cattr_llm *m);
int64_t cattr_llm_eos_token(const cattr_llm *m);
/* The padding token used as the default ablation baseline: the tokenizer's pad token, else eos, else -1. */
int64_t cattr_llm_pad_token(const cattr_llm *m);

/* One attribution of a language model: the prompt's tokens are the features, the score of target token k is its
 * log-probability after the prompt and target tokens 0..k-1 (teacher forcing). Pointers are borrowed for the call. */
typedef struct cattr_llm_call {
    const int64_t *prompt; /* T token ids */
    int64_t n_prompt;
    const int64_t *target; /* n token ids */
    int64_t n_target;
    /* LayerIntegratedGradients: -1 (default) the zero embedding, else that token's embedding as the baseline of
     * every prompt token; perturbation and surrogate methods: the replacement token (-1: the model's pad token) */
    int64_t baseline_token;
    /* ShapleyValueSampling: NULL, or params.n_samples recorded orders of the T prompt positions (row-major) */
    const int64_t *permutations;
    /* Lime / KernelShap: recorded draws in Captum's order (roles lime_sample, ks_num_selected, ks_scores; others are
     * skipped), or n_draws 0 for the generator (keyed by params.seed) */
    const cattr_tensor *const *draws;
    const char *const *draw_roles;
    int n_draws;
    /* NULL (default): every prompt token is a feature. Else n_prompt segment ids from 0 to n_segments - 1, each used
     * by at least one token: the features are the segments (words, sentences, a document's parts). Gradient methods
     * sum their token attributions over each segment (in token order, in the compute dtype); the perturbation and
     * surrogate methods replace every token of a segment at once (FeatureAblation's prefix reuse starts at the
     * segment's first token); ShapleyValueSampling's recorded permutations are then orders of the segments. The
     * results have n_segments columns: seq_attr[n_segments], token_attr[n * n_segments]. */
    const int64_t *segments;
    int64_t n_segments;
} cattr_llm_call;

/* The checkpoint as a cattr_model for the explainer (the same methods as any model): input 0 "input_ids" int64
 * [batch, tokens], output 0 the log-probabilities of the token after the last position, [batch, 1, vocab] (target
 * (0, token id)). Its values include "hidden.embed" (the embedding output), "hidden.layer<i>", "hidden.final_norm" and
 * the checkpoint's module paths. Token ids are attributed with the layer methods that take integer inputs
 * (LayerIntegratedGradients, LayerActivation, LayerGradientXActivation, LayerGradCam, LayerFeatureAblation,
 * LayerFeaturePermutation; baselines are ids): LayerIntegratedGradients at "hidden.embed" with baseline ids is
 * cattr_llm_attribute's LayerIG per embedding dim. *out is borrowed (valid until cattr_llm_free), built on the first
 * call, weights shared with m. Errors: CATTR_ERR_INVALID_ARGUMENT (NULL), CATTR_ERR_NO_MEMORY. */
cattr_status cattr_llm_model(cattr_llm *m, const cattr_model **out);

/* A call with every field at its default for prompt[T] and target[n] (baseline_token -1, no recorded draws). */
cattr_llm_call cattr_llm_call_make(const int64_t *prompt, int64_t T, const int64_t *target, int64_t n);


/* Attributes the log-probability of each target token to the prompt tokens with params p (cattr_attr_default_params
 * of the method; Captum's LLMGradientAttribution and LLMAttribution): p->method is
 * CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS or CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION (the layer is the embedding
 * output; a token's attribution is the sum over its embedding), CATTR_METHOD_FEATURE_ABLATION,
 * CATTR_METHOD_SHAPLEY_VALUE_SAMPLING, CATTR_METHOD_LIME or CATTR_METHOD_KERNEL_SHAP (features are the prompt tokens,
 * replaced by c->baseline_token). Fields that apply: dtype, n_steps, quadrature, internal_batch_size, max_memory (0:
 * a quarter of the memory available to the process, at most what 3584 positions of the model's forward pass hold and
 * at least that cap's floor of 896 MiB: 896 MiB at Qwen3-0.6B's shapes, about 3 GiB at Qwen3-8B's), n_samples, seed, lime_alpha,
 * perturbations_per_eval (0: as many sequences per forward pass as max_memory allows; 1: one per pass, as Captum),
 * no_prefix_cache, precision, device (NULL: the checkpoint's), progress, cancel. Writes seq_attr[T] (the sum over target tokens; T is c->n_segments where c->segments is given), token_attr[n*T] (row k = target
 * token k; NaN for Lime and KernelShap, which Captum attributes as a whole only) and, if not NULL,
 * target_logprobs[n] and convergence_delta[n] (LayerIntegratedGradients only; NaN otherwise). Caller-owned buffers.
 * Errors: CATTR_ERR_INVALID_ARGUMENT (another method, an empty prompt or target, an id outside the vocabulary, a
 * sequence longer than the model's context), CATTR_ERR_UNSUPPORTED (precision HIGH on a device without bfloat16
 * products), CATTR_ERR_NONFINITE (naming where a NaN or Inf first appeared), CATTR_ERR_NO_MEMORY. */
cattr_status cattr_llm_attribute(cattr_llm *m, const cattr_attr_params *p, const cattr_llm_call *c, double *seq_attr,
                                 double *token_attr, double *target_logprobs, double *convergence_delta);

/* One attribution of a language model split into parts, as cattr_explainer_run_part and cattr_explainer_combine for
 * a model: LayerIntegratedGradients (the IG steps over every target token, cut into chunks; give
 * internal_batch_size), and FeatureAblation, ShapleyValueSampling, Lime and KernelShap (their perturbed or sampled
 * prompts, in chunks of perturbations_per_eval; FeatureAblation only with perturbations_per_eval > 0 or
 * no_prefix_cache, as without them it runs its own prefix-reusing passes): part p of n_parts into *blob (malloc'ed,
 * freed by the caller with free(), *len bytes), and the n_parts blobs, in part order, into what cattr_llm_attribute
 * writes for the same call, bit for bit when the work is cut alike.
 * Errors: CATTR_ERR_UNSUPPORTED (another method, FeatureAblation with its prefix passes), CATTR_ERR_INVALID_ARGUMENT
 * (blobs of another call or cut, missing or out of order, naming the part), and cattr_llm_attribute's. */
/* The n_steps of the last LayerIntegratedGradients call of cattr_llm_attribute on m (the count an n_steps
 * CATTR_STEPS_AUTO call reached; 0 before one, or for NULL). */
int cattr_llm_steps_used(const cattr_llm *m);

cattr_status cattr_llm_attribute_part(cattr_llm *m, const cattr_attr_params *p, const cattr_llm_call *c, int part,
                                      int n_parts, void **blob, size_t *len);
cattr_status cattr_llm_combine(cattr_llm *m, const cattr_attr_params *p, const cattr_llm_call *c, const void *const *blobs,
                               const size_t *lens, int n_parts, double *seq_attr, double *token_attr,
                               double *target_logprobs, double *convergence_delta);

/* FeatureAblation over the slots of a text template (Captum's TextTemplateInput): `tmpl` holds n_slots "{}" slots;
 * the prompt fills them with values, and ablating slot i fills it with baselines[i] (NULL: the empty string) instead;
 * every text is tokenized from scratch. Writes seq_attr[n_slots] and token_attr[n * n_slots]. Errors: as
 * cattr_llm_attribute, and CATTR_ERR_INVALID_ARGUMENT for a template whose slot count differs from n_slots. */
cattr_status cattr_llm_attribute_template(cattr_llm *m, const cattr_attr_params *p, const char *tmpl,
                                          const char *const *values, const char *const *baselines, int n_slots,
                                          const int64_t *target, int64_t n, double *seq_attr, double *token_attr);

/* Sets the checkpoint's device (see Devices): used by cattr_llm_generate and by calls whose params leave `device`
 * NULL. Errors: as cattr_device_check (the device stays unchanged). */
cattr_status cattr_llm_set_device(cattr_llm *m, const char *device);

/* Greedy continuation of the prompt: up to max_new tokens, on the checkpoint's device, stopping after the
 * end-of-sequence token. *out is malloc'd (caller frees). */
cattr_status cattr_llm_generate(cattr_llm *m, cattr_dtype dtype, const int64_t *prompt, int64_t T, int max_new,
                                int64_t **out, int64_t *n);
/* The same, watched: p gives the dtype (float32 or float64), the cancel flag (read after each token: a set flag stops
 * the call with CATTR_ERR_CANCELLED, nothing returned) and the progress callback (called after each token with the
 * tokens so far and max_new); its other fields are not read. */
cattr_status cattr_llm_generate_params(cattr_llm *m, const cattr_attr_params *p, const int64_t *prompt, int64_t T,
                                       int max_new, int64_t **out, int64_t *n);

/* The answer's log-probabilities with parts of the prompt removed (context attribution: leave-one-source-out,
 * ContextCite's random ablations). For each of R rows, keep[r * T + t] != 0 keeps prompt token t; the removed tokens
 * are taken out of the sequence (the kept ones close up and are renumbered), not replaced. lp[r * n + q] = log p(
 * target[q] | the kept prompt, target[0..q-1]). One forward pass over the prompt gives every layer's keys and values;
 * each row then recomputes only the positions from its first removed token on (its last kept one when it removes the
 * prompt's end) against that unchanged prefix, several rows per pass within p's memory budget; p gives the dtype,
 * the precision, the device, the budget, the progress callback and the cancel flag. Errors:
 * CATTR_ERR_INVALID_ARGUMENT (a row that removes the whole prompt, ids out of range, too long for the context),
 * CATTR_ERR_NONFINITE, CATTR_ERR_CANCELLED, the backend's. */
cattr_status cattr_llm_score_removals(cattr_llm *m, const cattr_attr_params *p, const int64_t *prompt, int64_t T,
                                      const int64_t *target, int64_t n, const unsigned char *keep, int64_t R,
                                      double *lp);

/* Context attribution (retrieval-augmented answers): which documents, or sentences, of the context an answer is built
 * on. The prompt is prefix + documents (joined by separator) + suffix, each piece tokenized on its own so that every
 * source is a run of whole tokens. */
typedef enum cattr_context_method {
    CATTR_CONTEXT_LOO = 0,      /* leave one source out: score = the answer's log-probability it holds up */
    CATTR_CONTEXT_SURROGATE = 1, /* ContextCite: random keep/drop masks, a Lasso fit of the log-probability; score = weight */
    CATTR_CONTEXT_GRADIENT = 2,  /* gradient x activation at the embeddings summed over each source's tokens: one pass */
    CATTR_CONTEXT_HIERARCHICAL = 3, /* AttriBoT: leave-one-out over the documents, then over the sentences of the top
                                     * top_documents; the sources: those sentences and the other documents whole */
    CATTR_CONTEXT_PROXY = 4 /* AttriBoT's proxy: leave-one-out with a smaller model of the same tokenizer (proxy) over
                             * every source, then with this model over the proxy_top best; the rest keep the proxy's
                             * scores (result.rescored says which) */
} cattr_context_method;

/* What the sources are: whole documents, their sentences or lines (cattr_llm_segments' splitters), or the caller's
 * byte spans (the text between and around them forms sources of its own). */
typedef enum cattr_context_sources {
    CATTR_CONTEXT_DOCUMENTS = 0,
    CATTR_CONTEXT_SENTENCES = 1,
    CATTR_CONTEXT_LINES = 2,
    CATTR_CONTEXT_SPANS = 3
} cattr_context_sources;

typedef struct cattr_context_request {
    const char *prefix;                 /* the prompt before the documents (cattr_llm_chat_frame, or the caller's) */
    const char *suffix;                 /* after them: the question and the assistant's start */
    const char *const *documents;       /* the documents' texts (UTF-8), in order */
    int n_documents;
    const char *separator;              /* between documents (NULL: a blank line, "\n\n") */
    const char *answer;                 /* the answer to explain (NULL: generated greedily, up to max_new tokens) */
    int max_new;
    cattr_context_sources sources;      /* documents (0), sentences (1), lines (2) or the spans below (3) */
    const int64_t *spans;               /* CATTR_CONTEXT_SPANS: n_spans triples (document, start byte, end byte), in
                                         * the documents' order and, within one, in order and not overlapping */
    int64_t n_spans;
    cattr_context_method method;
    int64_t samples;                    /* surrogate: random ablations (0: 64) */
    double keep_prob;                   /* surrogate: a source's chance to be kept (0: 0.5) */
    double alpha;                       /* surrogate: the Lasso's regularisation (negative: 0.01) */
    uint64_t seed;                      /* surrogate: the masks' seed (cattr's generator) */
    int quality;                        /* also the top-k drops and the LDS over 32 held-out random masks */
    int top_documents;                  /* hierarchical: the documents refined into sentences (0: 3) */
    int per_token;                      /* also a score per source and answer token (result.token_score) */
    cattr_llm *proxy;                   /* CATTR_CONTEXT_PROXY: the smaller model (its tokenizer must give the same
                                         * tokens); borrowed */
    int proxy_top;                      /* proxy: the sources rescored by this model (0: 5 or a fifth, the larger) */
} cattr_context_request;

typedef struct cattr_context_result {
    char *answer;                       /* the answer's text (special tokens skipped) */
    int64_t n_answer, n_prompt;         /* tokens */
    double answer_logprob;              /* its total log-probability with the whole context */
    int64_t n_sources;
    int *document;                      /* per source: its document, */
    int64_t *start, *end;               /* its bytes [start, end) in that document, */
    double *score;                      /* and its score */
    double top_k_drop[3];               /* quality: the log-probability drop with the top 1, 3, 5 removed (NaN: not asked) */
    double lds;                         /* quality: the linear datamodeling score, Spearman's correlation of the sum of
                                         * the kept sources' scores with the log-probability over 32 held-out random
                                         * masks (keep_prob; NaN: not computed) */
    int64_t ablations, held_out;        /* the ablated prompts scored (held-out ones for the LDS apart) */
    double seconds_generation, seconds_ablations, seconds_quality; /* ablations: the method's own, quality apart */
    double *token_score;                /* per_token: [n_sources * n_answer], row s the score of source s for each answer
                                         * token (the surrogate: a fit per token); NULL when not asked */
    unsigned char *rescored;            /* proxy: 1 where this model scored the source, 0 where the proxy's score stands
                                         * (the ranking: the rescored ones first); NULL for the other methods */
    int64_t proxy_ablations;            /* proxy: the ablated prompts the proxy scored */
    double seconds_proxy;
    int64_t *answer_ids;                /* the answer's tokens [n_answer] */
    int64_t n_rows;                     /* loo and surrogate: the ablations scored, row 0 the whole context, then one
                                         * per source (loo) or the random masks, then the held-out ones (quality) */
    unsigned char *masks;               /* [n_rows * n_sources]: 1 where the row keeps the source */
    double *row_logprob;                /* [n_rows]: the answer's total log-probability under each row */
} cattr_context_result;

/* Scores the sources of r (cattr_llm_score_removals: sources removed from the token sequence, the unchanged prefix
 * computed once) under p (dtype, device, budget, progress, cancel flag). *out: a new result (cattr_context_result_free).
 * Errors: CATTR_ERR_INVALID_ARGUMENT (no document, an empty one, an empty answer, too long for the context), the
 * tokenizer's and the passes'. */
cattr_status cattr_llm_explain_context(cattr_llm *m, const cattr_attr_params *p, const cattr_context_request *r,
                                       cattr_context_result **out);
void cattr_context_result_free(cattr_context_result *r);
/* The sources of r in ranking order into order[n_sources] (indices): by score, highest first; for the proxy method the
 * rescored sources first, then the others by the proxy's scores. Errors: CATTR_ERR_INVALID_ARGUMENT (NULL),
 * CATTR_ERR_NO_MEMORY. */
cattr_status cattr_context_rank(const cattr_context_result *r, int64_t *order);
/* The prompt around a user turn "<documents>\n\n<question>" from the checkpoint's chat template (tokenizer_config.json's
 * chat_template in dir): the ChatML form (Qwen; Qwen3 as with enable_thinking=False), Llama 3's and Mistral's. *prefix
 * and *suffix are malloc'd (caller frees). Errors: CATTR_ERR_UNSUPPORTED (no tokenizer_config.json, no chat template,
 * or one of another form: cattr renders these three, it has no Jinja engine), CATTR_ERR_NO_MEMORY. */
cattr_status cattr_llm_chat_frame(const char *dir, const char *question, char **prefix, char **suffix);

/* ------------------------------------------------------------------------------------------------------------ */
/* Profiling                                                                                                     */
/* ------------------------------------------------------------------------------------------------------------ */

/* A process-wide profiler, off by default (a hook then costs one relaxed atomic load). While it is on, every backend
 * op the executors run (category "op": the op kind, with the backend, the node and the shapes), every copy through a
 * backend (category "copy": "in" to the backend, "out" of it, "zero"; with the bytes), every plan build (category
 * "plan") and the peak of backend memory are recorded, from every thread. Times are CLOCK_MONOTONIC.
 *
 * Starts collecting; clears the events of an earlier session (also one that was never ended). Never fails. */
cattr_status cattr_profile_begin(void);

/* Stops collecting (whatever else happens) and, if json_path is not NULL, writes the session as a Chrome trace
 * (JSON Trace Event Format, loaded by Perfetto and chrome://tracing: complete "X" events with ts and dur in
 * microseconds, and a "memory" counter "C" event with args {"peak_bytes": N} where the peak rose) atomically
 * (a temporary beside json_path, then rename). If summary is not NULL it receives a malloc'd text table (caller
 * frees with free()): per op kind the count, total ms and share; copies per direction, count and bytes; plan builds,
 * count and ms; the peak memory. The first 2^21 events are kept for the trace; later ones are counted in the summary.
 * Errors: CATTR_ERR_INVALID_ARGUMENT (the profiler was not started, or json_path is ""), CATTR_ERR_IO (naming the
 * path), CATTR_ERR_NO_MEMORY. On error *summary is NULL. */
cattr_status cattr_profile_end(const char *json_path, char **summary);

/* Events recorded in `category` ("op", "copy", "plan", "memory"; NULL: all) since the last cattr_profile_begin (after
 * cattr_profile_end: those of the ended session). 0 before the first session. */
int cattr_profile_count(const char *category);

#ifdef __cplusplus
}
#endif
#endif /* CATTR_H */
