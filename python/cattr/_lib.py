"""ctypes declarations of libcattr (include/cattr.h), the library loader and the error mapping.

Everything here mirrors the C header one to one; the rest of the package builds on these names. ctypes.CDLL
releases the GIL for the duration of every foreign call, so attributions run while other Python threads go on.
"""
import ctypes
import ctypes.util
import operator
import os
import threading
from _thread import get_ident as _get_ident

import numpy as np

try:  # the C functions behind the signal module (which adds enum conversions costing microseconds per call)
    import _signal
    _SIGINT = _signal.SIGINT
except ImportError:  # pragma: no cover
    import signal as _signal
    _SIGINT = _signal.SIGINT

_MAIN_IDENT = threading.main_thread().ident

MAX_DIMS = 8
MAX_INPUTS = 8
MAX_OUTPUTS = 16

# cattr_status
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_IO = 2
ERR_FORMAT = 3
ERR_UNSUPPORTED = 4
ERR_SHAPE = 5
ERR_DTYPE = 6
ERR_TARGET = 7
ERR_NONFINITE = 8
ERR_NO_MEMORY = 9
ERR_INTERNAL = 10
ERR_CANCELLED = 11

# cattr_dtype
FLOAT32 = 0
FLOAT64 = 1
INT64 = 2

# cattr_target_kind
TARGET_NONE = 0
TARGET_INDEX = 1
TARGET_PER_EXAMPLE = 2

# cattr_noise_tunnel
NT_NONE = 0
NT_SMOOTHGRAD = 1
NT_SMOOTHGRAD_SQ = 2
NT_VARGRAD = 3

STEPS_AUTO = -1  # n_steps: chosen from the convergence delta (cattr_attr_params.delta_tol)

# cattr_neuron_kind
NEURON_NONE = 0
NEURON_INDEX = 1
NEURON_SLICES = 2
NEURON_SUM = 3

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)

# ---------------------------------------------------------------------------------------------------------------
# integers crossing into the library: ctypes truncates silently (2**32 + 20 into a C int is 20, 2**64 + 3 into an
# int64 is 3), so every integer is checked against its C type here, with an exception naming the argument
# ---------------------------------------------------------------------------------------------------------------

_SIGNED_CODES = "bhilq"


def int_range(ctype):
    """(lo, hi) of a ctypes integer type."""
    bits = 8 * ctypes.sizeof(ctype)
    if ctype._type_ in _SIGNED_CODES:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def _is_int_ctype(t):
    return isinstance(t, type) and issubclass(t, ctypes._SimpleCData) and t._type_ in "bBhHiIlLqQ"


def _range_text(lo, hi):
    return "%d to %d" % (lo, hi)


def as_int(v, what, lo=INT64_MIN, hi=INT64_MAX, allow_bool=True):
    """v as a Python int within [lo, hi]: TypeError when v is not an integer (a bool counts as 0 or 1 where
    allow_bool; numpy integers and one-element integer tensors are integers), ValueError naming `what`, v and the
    range when out of it."""
    if isinstance(v, bool) or type(v).__name__ == "bool_":
        if not allow_bool:
            raise TypeError("cattr: %s must be an integer, not a bool (%r)" % (what, v))
        iv = int(v)
    else:
        try:  # ints, numpy integers, integer tensors of one element (what Python accepts as an index)
            iv = operator.index(v)
        except TypeError:
            raise TypeError("cattr: %s must be an integer, not %s (%r)" % (what, type(v).__name__, v)) from None
    if not lo <= iv <= hi:
        raise ArgumentError("cattr: %s = %d is out of range: it must be from %s" % (what, iv, _range_text(lo, hi)))
    return iv


def as_ctype_int(v, what, ctype):
    """as_int within the range of a ctypes integer type."""
    lo, hi = int_range(ctype)
    return as_int(v, what, lo, hi)


def int64_array(a, what):
    """A numpy array `a` (any shape) as int64 values, checked: integer arrays must fit int64 (uint64 above
    INT64_MAX would wrap), bool arrays give 0 and 1, float arrays must hold whole numbers within int64 (else
    TypeError), object arrays (Python lists holding ints too large for int64) must hold ints within int64. Returns
    an int64 array (`a` itself when it already is one)."""
    a = np.asarray(a)
    k = a.dtype.kind
    if k == "i":
        return a if a.dtype == np.int64 else a.astype(np.int64)
    if k == "b":
        return a.astype(np.int64)
    if k == "u":
        if a.size and a.dtype.itemsize >= 8:
            hi = int(a.max())
            if hi > INT64_MAX:
                raise ArgumentError("cattr: %s holds %d, out of range: its values must be from %s" %
                                 (what, hi, _range_text(INT64_MIN, INT64_MAX)))
        return a.astype(np.int64)
    if k == "f":
        if a.size:
            finite = np.isfinite(a)
            if not finite.all():
                raise TypeError("cattr: %s must hold integers, not %s" % (what, a[~finite].reshape(-1)[0]))
            frac = a != np.floor(a)
            if frac.any():
                raise TypeError("cattr: %s must hold integers, not %r" % (what, a[frac].reshape(-1)[0].item()))
            lo, hi = float(a.min()), float(a.max())
            # float64(2**63) is the first float above INT64_MAX; float64(-2**63) is INT64_MIN itself
            if hi >= 2.0 ** 63 or lo < -2.0 ** 63:
                bad = hi if hi >= 2.0 ** 63 else lo
                raise ArgumentError("cattr: %s holds %.17g, out of range: its values must be from %s" %
                                 (what, bad, _range_text(INT64_MIN, INT64_MAX)))
        return a.astype(np.int64)
    if k == "O":
        flat = a.reshape(-1)
        vals = [as_int(x, "%s value" % what) for x in flat.tolist()]
        return np.array(vals, dtype=np.int64).reshape(a.shape)
    raise TypeError("cattr: %s must hold integers, not %s values" % (what, a.dtype))


# The names under which the package's callers know the fields of cattr_attr_params (in the messages).
_ARG_NAMES = {"max_memory": "_max_memory", "seed": "_seed", "quadrature": "method",
              "sliding_window": "sliding_window_shapes"}


class CStruct(ctypes.Structure):
    """A ctypes Structure whose integer fields refuse values outside their C type (ValueError) and non-integers
    (TypeError), where plain ctypes would truncate them silently."""

    @classmethod
    def _ranges(cls):
        r = cls.__dict__.get("_int_ranges")
        if r is None:
            r = {name: int_range(t) for name, t, *_ in cls._fields_ if _is_int_ctype(t)}
            cls._int_ranges = r
        return r

    def __setattr__(self, name, value):
        r = self._ranges().get(name)
        if r is not None:
            value = as_int(value, _ARG_NAMES.get(name, name), *r)
        super().__setattr__(name, value)


def set_int(arr, i, value, what):
    """arr[i] = value for a ctypes array of integers, checked like CStruct's fields."""
    arr[i] = as_ctype_int(value, what, arr._type_)


_c_int64_p = ctypes.POINTER(ctypes.c_int64)
_c_double_p = ctypes.POINTER(ctypes.c_double)


class Tensor(ctypes.Structure):
    """Opaque cattr_tensor."""


TensorP = ctypes.POINTER(Tensor)
TensorPP = ctypes.POINTER(TensorP)


class ModelS(ctypes.Structure):
    """Opaque cattr_model."""


class ExplainerS(ctypes.Structure):
    """Opaque cattr_explainer."""


class TensorSetS(ctypes.Structure):
    """Opaque cattr_tensor_set."""


class LLMS(ctypes.Structure):
    """Opaque cattr_llm."""


ModelP = ctypes.POINTER(ModelS)
ExplainerP = ctypes.POINTER(ExplainerS)
TensorSetP = ctypes.POINTER(TensorSetS)
LLMP = ctypes.POINTER(LLMS)

PROGRESS_FN = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)


class Target(CStruct):
    _fields_ = [
        ("kind", ctypes.c_int),
        ("n_idx", ctypes.c_int),
        ("n_rows", ctypes.c_int64),
        ("idx", _c_int64_p),
    ]


class NodeRule(CStruct):
    _fields_ = [
        ("node", ctypes.c_char_p),
        ("rule", ctypes.c_char_p),
        ("epsilon", ctypes.c_double),
        ("gamma", ctypes.c_double),
        ("set_bias_to_zero", ctypes.c_int),
    ]


class AttrParams(CStruct):
    _fields_ = [
        ("method", ctypes.c_int),
        ("dtype", ctypes.c_int),
        ("n_steps", ctypes.c_int),
        ("quadrature", ctypes.c_int),
        ("internal_batch_size", ctypes.c_int),
        ("max_memory", ctypes.c_size_t),
        ("multiply_by_inputs", ctypes.c_int),
        ("abs", ctypes.c_int),
        ("return_convergence_delta", ctypes.c_int),
        ("executor", ctypes.c_int),
        ("device", ctypes.c_char_p),
        ("precision", ctypes.c_int),
        ("check_finite", ctypes.c_int),
        ("progress", PROGRESS_FN),
        ("progress_user", ctypes.c_void_p),
        ("eps", ctypes.c_double),
        ("perturbations_per_eval", ctypes.c_int),
        ("n_samples", ctypes.c_int),
        ("stdevs", ctypes.c_double),
        ("nt_type", ctypes.c_int),
        ("nt_samples", ctypes.c_int),
        ("nt_samples_batch_size", ctypes.c_int),
        ("draw_baseline_from_distrib", ctypes.c_int),
        ("seed", ctypes.c_uint64),
        ("sliding_window_ndim", ctypes.c_int * MAX_INPUTS),
        ("sliding_window", (ctypes.c_int64 * MAX_DIMS) * MAX_INPUTS),
        ("strides_ndim", ctypes.c_int * MAX_INPUTS),
        ("strides", (ctypes.c_int64 * MAX_DIMS) * MAX_INPUTS),
        ("lime_alpha", ctypes.c_double),
        ("kernel_width", ctypes.c_double),
        ("lime_euclidean", ctypes.c_int),
        ("return_coefficients", ctypes.c_int),
        ("layer", ctypes.c_char_p),
        ("attribute_to_layer_input", ctypes.c_int),
        ("layers", ctypes.POINTER(ctypes.c_char_p)),
        ("n_layers", ctypes.c_int),
        ("neuron_kind", ctypes.c_int),
        ("neuron_ndim", ctypes.c_int),
        ("neuron_index", ctypes.c_int64 * MAX_DIMS),
        ("neuron_slice", (ctypes.c_int64 * 3) * MAX_DIMS),
        ("neuron_slice_is_index", ctypes.c_int * MAX_DIMS),
        ("neuron_sum_ndim", ctypes.c_int),
        ("neuron_sum_dims", ctypes.c_int64 * MAX_DIMS),
        ("relu_attributions", ctypes.c_int),
        ("attr_dim_summation", ctypes.c_int),
        ("node_rules", ctypes.POINTER(NodeRule)),
        ("n_node_rules", ctypes.c_int),
        ("no_prefix_cache", ctypes.c_int),
        ("cancel", ctypes.POINTER(ctypes.c_int)),
        ("delta_tol", ctypes.c_double),
        ("max_steps", ctypes.c_int),
    ]


class Call(CStruct):
    _fields_ = [
        ("inputs", TensorPP),
        ("n_inputs", ctypes.c_int),
        ("baselines", TensorPP),
        ("target", ctypes.POINTER(Target)),
        ("additional", TensorPP),
        ("n_additional", ctypes.c_int),
        ("feature_masks", TensorPP),
        ("draws", TensorPP),
        ("draw_roles", ctypes.POINTER(ctypes.c_char_p)),
        ("n_draws", ctypes.c_int),
        ("layer_masks", TensorPP),
        ("n_layer_masks", ctypes.c_int),
        ("layer_baseline", TensorP),
    ]


class LLMCall(CStruct):
    _fields_ = [
        ("prompt", _c_int64_p),
        ("n_prompt", ctypes.c_int64),
        ("target", _c_int64_p),
        ("n_target", ctypes.c_int64),
        ("baseline_token", ctypes.c_int64),
        ("permutations", _c_int64_p),
        ("draws", TensorPP),
        ("draw_roles", ctypes.POINTER(ctypes.c_char_p)),
        ("n_draws", ctypes.c_int),
        ("segments", _c_int64_p),
        ("n_segments", ctypes.c_int64),
    ]


class ContextRequest(CStruct):
    _fields_ = [
        ("prefix", ctypes.c_char_p),
        ("suffix", ctypes.c_char_p),
        ("documents", ctypes.POINTER(ctypes.c_char_p)),
        ("n_documents", ctypes.c_int),
        ("separator", ctypes.c_char_p),
        ("answer", ctypes.c_char_p),
        ("max_new", ctypes.c_int),
        ("sources", ctypes.c_int),
        ("spans", _c_int64_p),
        ("n_spans", ctypes.c_int64),
        ("method", ctypes.c_int),
        ("samples", ctypes.c_int64),
        ("keep_prob", ctypes.c_double),
        ("alpha", ctypes.c_double),
        ("seed", ctypes.c_uint64),
        ("quality", ctypes.c_int),
        ("top_documents", ctypes.c_int),
        ("per_token", ctypes.c_int),
        ("proxy", LLMP),
        ("proxy_top", ctypes.c_int),
    ]


class ContextResult(CStruct):
    _fields_ = [
        ("answer", ctypes.c_void_p),
        ("n_answer", ctypes.c_int64),
        ("n_prompt", ctypes.c_int64),
        ("answer_logprob", ctypes.c_double),
        ("n_sources", ctypes.c_int64),
        ("document", ctypes.POINTER(ctypes.c_int)),
        ("start", _c_int64_p),
        ("end", _c_int64_p),
        ("score", ctypes.POINTER(ctypes.c_double)),
        ("top_k_drop", ctypes.c_double * 3),
        ("lds", ctypes.c_double),
        ("ablations", ctypes.c_int64),
        ("held_out", ctypes.c_int64),
        ("seconds_generation", ctypes.c_double),
        ("seconds_ablations", ctypes.c_double),
        ("seconds_quality", ctypes.c_double),
        ("token_score", ctypes.POINTER(ctypes.c_double)),
        ("rescored", ctypes.POINTER(ctypes.c_ubyte)),
        ("proxy_ablations", ctypes.c_int64),
        ("seconds_proxy", ctypes.c_double),
        ("answer_ids", _c_int64_p),
        ("n_rows", ctypes.c_int64),
        ("masks", ctypes.POINTER(ctypes.c_ubyte)),
        ("row_logprob", ctypes.POINTER(ctypes.c_double)),
    ]


def _candidates():
    env = os.environ.get("CATTR_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    out = [os.path.join(here, name) for name in ("libcattr.so", "libcattr.so.0", "libcattr.dylib")]
    try:  # written by `cmake --install`: where the library was installed
        from ._install_paths import LIBRARY
        out.append(LIBRARY)
    except ImportError:
        pass
    # a source tree: python/cattr/ -> ../../build/libcattr.so
    out.append(os.path.join(here, "..", "..", "build", "libcattr.so"))
    found = ctypes.util.find_library("cattr")
    if found:
        out.append(found)
    return out


def _load():
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path + " (absent)")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError("cattr: cannot find libcattr (set CATTR_LIB to the path of libcattr.so, or build it with "
                      "'sh scripts/build.sh'); tried: " + "; ".join(tried))


lib, lib_path = _load()


def _decl(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


def _check_layout():
    """The structs above are the header's: a library of another version (its structs of other sizes) is refused
    here rather than misread."""
    try:
        size_of = _decl("cattr_sizeof", ctypes.c_size_t, ctypes.c_char_p)
    except AttributeError:
        raise ImportError("cattr: the library %s is older than this package (it lacks cattr_sizeof); build this "
                          "tree's library, or set CATTR_LIB to it" % lib_path) from None
    for name, cls in (("cattr_attr_params", AttrParams), ("cattr_call", Call), ("cattr_target", Target),
                      ("cattr_node_rule", NodeRule), ("cattr_llm_call", LLMCall)):
        got = size_of(name.encode())
        if got != ctypes.sizeof(cls):
            raise ImportError("cattr: the library %s does not match this package: %s is %d bytes there and %d here "
                              "(a library of another version; build this tree's library, or set CATTR_LIB to it)"
                              % (lib_path, name, got, ctypes.sizeof(cls)))


_check_layout()

_st = ctypes.c_int
_decl("cattr_status_string", ctypes.c_char_p, _st)
_decl("cattr_last_error", ctypes.c_char_p)
_decl("cattr_version", ctypes.c_char_p)
_decl("cattr_dtype_name", ctypes.c_char_p, ctypes.c_int)
_decl("cattr_tensor_new", _st, ctypes.c_int, ctypes.c_int, _c_int64_p, ctypes.POINTER(TensorP))
_decl("cattr_tensor_from_data", _st, ctypes.c_int, ctypes.c_int, _c_int64_p, ctypes.c_void_p,
      ctypes.POINTER(TensorP))
_decl("cattr_tensor_wrap", _st, ctypes.c_int, ctypes.c_int, _c_int64_p, ctypes.c_void_p, ctypes.POINTER(TensorP))
_decl("cattr_tensor_free", None, TensorP)
_decl("cattr_tensor_dtype", ctypes.c_int, TensorP)
_decl("cattr_tensor_ndim", ctypes.c_int, TensorP)
_decl("cattr_tensor_shape", _c_int64_p, TensorP)
_decl("cattr_tensor_numel", ctypes.c_int64, TensorP)
_decl("cattr_tensor_data", ctypes.c_void_p, TensorP)
_decl("cattr_tensor_load_npy", _st, ctypes.c_char_p, ctypes.POINTER(TensorP))
_decl("cattr_tensor_set_load", _st, ctypes.c_char_p, ctypes.POINTER(TensorSetP))
_decl("cattr_tensor_set_free", None, TensorSetP)
_decl("cattr_tensor_set_count", ctypes.c_int, TensorSetP)
_decl("cattr_tensor_set_name", ctypes.c_char_p, TensorSetP, ctypes.c_int)
_decl("cattr_tensor_set_get", TensorP, TensorSetP, ctypes.c_char_p)
_decl("cattr_device_check", _st, ctypes.c_char_p)
_decl("cattr_device_names", ctypes.c_char_p)
_decl("cattr_model_load_onnx", _st, ctypes.c_char_p, ctypes.POINTER(ModelP))
_decl("cattr_model_free", None, ModelP)
_decl("cattr_model_n_inputs", ctypes.c_int, ModelP)
_decl("cattr_model_input_name", ctypes.c_char_p, ModelP, ctypes.c_int)
_decl("cattr_model_input_shape", ctypes.c_int, ModelP, ctypes.c_int, ctypes.c_int64 * MAX_DIMS)
_decl("cattr_model_n_outputs", ctypes.c_int, ModelP)
_decl("cattr_model_output_name", ctypes.c_char_p, ModelP, ctypes.c_int)
_decl("cattr_model_describe", ctypes.c_size_t, ModelP, ctypes.c_char_p, ctypes.c_size_t)
_decl("cattr_model_n_weight_modules", ctypes.c_int, ModelP)
_decl("cattr_model_weight_module", ctypes.c_size_t, ModelP, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t)
_decl("cattr_model_randomize", _st, ModelP, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, ctypes.c_uint64,
      ctypes.POINTER(ModelP))
_decl("cattr_rank_correlation", _st, TensorPP, TensorPP, ctypes.c_int, ctypes.c_int, ctypes.POINTER(TensorP))
_decl("cattr_model_resolve_value", _st, ModelP, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p))
_decl("cattr_model_module_values", ctypes.c_int, ModelP, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
      ctypes.c_int)
_decl("cattr_model_forward", _st, ModelP, ctypes.c_int, TensorPP, ctypes.c_int, ctypes.POINTER(TensorP))
_decl("cattr_model_set_device", _st, ModelP, ctypes.c_char_p)
_decl("cattr_method_from_name", ctypes.c_int, ctypes.c_char_p)
_decl("cattr_method_name", ctypes.c_char_p, ctypes.c_int)
_decl("cattr_method_implemented", ctypes.c_int, ctypes.c_int)
_decl("cattr_method_takes_target", ctypes.c_int, ctypes.c_int)
_decl("cattr_quadrature_from_name", ctypes.c_int, ctypes.c_char_p)
_decl("cattr_quadrature_name", ctypes.c_char_p, ctypes.c_int)
_decl("cattr_attr_default_params", AttrParams, ctypes.c_int)
_decl("cattr_explainer_new", _st, ModelP, ctypes.POINTER(AttrParams), ctypes.POINTER(ExplainerP))
_decl("cattr_explainer_free", None, ExplainerP)
_decl("cattr_explainer_run", _st, ExplainerP, ctypes.POINTER(Call), TensorPP, ctypes.POINTER(TensorP))
_decl("cattr_explainer_peak_memory", ctypes.c_size_t, ExplainerP)
_decl("cattr_explainer_steps_used", ctypes.c_int, ExplainerP)
_decl("cattr_sensitivity_max", _st, ctypes.c_char_p, TensorPP, TensorPP, ctypes.c_int, ctypes.c_int64,
      ctypes.c_double, ctypes.POINTER(TensorP))
_decl("cattr_explainer_vjp", _st, ExplainerP, ctypes.POINTER(Call), TensorP, TensorPP, ctypes.POINTER(TensorP))
_decl("cattr_explainer_param_hvp", _st, ExplainerP, ctypes.POINTER(Call), ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
      TensorPP, TensorP, TensorPP, TensorPP, ctypes.POINTER(TensorP), ctypes.POINTER(TensorP), TensorPP)
_decl("cattr_explainer_example_grads", _st, ExplainerP, ctypes.POINTER(Call), ctypes.c_int, TensorP, ctypes.c_int,
      ctypes.POINTER(ctypes.c_char_p), TensorPP, TensorPP, TensorPP, ctypes.POINTER(TensorP), ctypes.POINTER(TensorP),
      ctypes.POINTER(TensorP))
_decl("cattr_explainer_loss_grad", _st, ExplainerP, ctypes.POINTER(Call), ctypes.c_int, TensorPP,
      ctypes.POINTER(TensorP))
_decl("cattr_infidelity", _st, ExplainerP, ctypes.POINTER(Call), TensorPP, TensorPP, TensorPP, ctypes.c_int64,
      ctypes.c_int, ctypes.c_int64, ctypes.POINTER(TensorP))
_decl("cattr_deletion_curve", _st, ExplainerP, ctypes.POINTER(Call), TensorPP, ctypes.c_int, ctypes.c_int64,
      ctypes.c_int, ctypes.c_int64, ctypes.POINTER(TensorP), ctypes.POINTER(TensorP))
_decl("cattr_llm_steps_used", ctypes.c_int, LLMP)
_decl("cattr_llm_load", _st, ctypes.c_char_p, ctypes.POINTER(LLMP))
_decl("cattr_llm_free", None, LLMP)
_decl("cattr_llm_encode", _st, LLMP, ctypes.c_char_p, ctypes.POINTER(_c_int64_p), _c_int64_p)
_decl("cattr_llm_token_text", ctypes.c_size_t, LLMP, ctypes.c_int64, ctypes.c_char_p, ctypes.c_size_t)
_decl("cattr_llm_decode", _st, LLMP, _c_int64_p, ctypes.c_int64, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))
_decl("cattr_llm_token_spans", _st, LLMP, ctypes.c_char_p, _c_int64_p, ctypes.c_int64, _c_int64_p, _c_int64_p)
_decl("cattr_llm_segments", _st, LLMP, ctypes.c_char_p, _c_int64_p, ctypes.c_int64, ctypes.c_char_p, _c_int64_p,
      ctypes.c_int64, _c_int64_p, _c_int64_p)
_decl("cattr_llm_explain_context", _st, LLMP, ctypes.POINTER(AttrParams), ctypes.POINTER(ContextRequest),
      ctypes.POINTER(ctypes.POINTER(ContextResult)))
_decl("cattr_context_result_free", None, ctypes.POINTER(ContextResult))
_decl("cattr_context_rank", _st, ctypes.POINTER(ContextResult), _c_int64_p)
_decl("cattr_llm_chat_frame", _st, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
      ctypes.POINTER(ctypes.c_void_p))
_decl("cattr_llm_score_removals", _st, LLMP, ctypes.POINTER(AttrParams), _c_int64_p, ctypes.c_int64, _c_int64_p,
      ctypes.c_int64, ctypes.POINTER(ctypes.c_ubyte), ctypes.c_int64, ctypes.POINTER(ctypes.c_double))
_decl("cattr_llm_vocab_size", ctypes.c_int64, LLMP)
_decl("cattr_llm_max_positions", ctypes.c_int64, LLMP)
_decl("cattr_llm_eos_token", ctypes.c_int64, LLMP)
_decl("cattr_llm_pad_token", ctypes.c_int64, LLMP)
_decl("cattr_llm_model", _st, LLMP, ctypes.POINTER(ModelP))
_decl("cattr_llm_attribute", _st, LLMP, ctypes.POINTER(AttrParams), ctypes.POINTER(LLMCall), _c_double_p,
      _c_double_p, _c_double_p, _c_double_p)
_decl("cattr_llm_attribute_template", _st, LLMP, ctypes.POINTER(AttrParams), ctypes.c_char_p,
      ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, _c_int64_p, ctypes.c_int64,
      _c_double_p, _c_double_p)
_decl("cattr_llm_set_device", _st, LLMP, ctypes.c_char_p)
_decl("cattr_llm_generate", _st, LLMP, ctypes.c_int, _c_int64_p, ctypes.c_int64, ctypes.c_int,
      ctypes.POINTER(_c_int64_p), _c_int64_p)
_decl("cattr_llm_generate_params", _st, LLMP, ctypes.POINTER(AttrParams), _c_int64_p, ctypes.c_int64, ctypes.c_int,
      ctypes.POINTER(_c_int64_p), _c_int64_p)

# free() of the C runtime, for the malloc'd arrays cattr_llm_encode / cattr_llm_generate return
_libc = ctypes.CDLL(ctypes.util.find_library("c"))
c_free = _libc.free
c_free.restype = None
c_free.argtypes = [ctypes.c_void_p]


class CattrWarning(UserWarning):
    """A warning of the library (its log callback's warnings: a memory budget below one step, n_steps="auto" that
    reached max_steps above its tolerance, ...)."""


_LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


def _on_log(level, message, user):
    if level == 2:  # CATTR_LOG_WARN: a Python warning (info and debug are dropped; errors come back as exceptions)
        import warnings

        warnings.warn("cattr: " + (message or b"").decode("utf-8", "replace"), CattrWarning, stacklevel=2)


_log_cb = _LOG_FN(_on_log)  # kept alive for the process
_decl("cattr_set_log_callback", None, _LOG_FN, ctypes.c_void_p)
lib.cattr_set_log_callback(_log_cb, None)


class CattrError(Exception):
    """Mixin of every exception raised for a failing library call; `.status` is the cattr_status."""

    status = None


class ArgumentError(ValueError, AssertionError):
    """An invalid argument (a bad target, shape, dtype, option): a ValueError, and an AssertionError too, since
    Captum checks its arguments with assert statements and code written for Captum catches AssertionError."""


def _exc_class(status):
    if status in (ERR_INVALID_ARGUMENT, ERR_SHAPE, ERR_DTYPE, ERR_TARGET):
        return ArgumentError
    if status == ERR_NONFINITE:
        return ValueError
    if status in (ERR_IO, ERR_FORMAT):
        return OSError
    if status == ERR_NO_MEMORY:
        return MemoryError
    return RuntimeError


def error(status, what=None):
    """The exception for a failing status, carrying cattr_last_error()'s message."""
    msg = (lib.cattr_last_error() or b"").decode("utf-8", "replace")
    if not msg:
        msg = lib.cattr_status_string(status).decode()
    if what:
        msg = "%s: %s" % (what, msg)
    base = _exc_class(status)
    exc = base(msg)
    try:
        exc.status = status
    except AttributeError:  # pragma: no cover - built-in exceptions take attributes
        pass
    return exc


def check(status, what=None):
    if status != OK:
        raise error(status, what)


# Ctrl-C during a long library call. Swapping SIGINT's handler around every call costs microseconds (two
# sigaction calls), so the package installs one handler, the first time a call runs in the main thread, and keeps it:
# while a call runs it asks the library to cancel; otherwise it does what the handler before it did (Python's
# default: KeyboardInterrupt). A handler installed later by the program replaces it and is called as usual.
_active = None      # the Interruptible of the call running in the main thread, or None
_prev_sigint = None  # the handler ours replaced


def _on_sigint(signum, frame):
    a = _active
    if a is not None:
        a.flag.value = 1
        a.hit = True
        return
    prev = _prev_sigint
    if callable(prev):
        prev(signum, frame)
    elif prev != _signal.SIG_IGN:
        raise KeyboardInterrupt


class Interruptible:
    """Ctrl-C during a long library call. The call gets a cancel flag and a progress callback; while it runs in the
    main thread, SIGINT sets the flag (above). CPython runs the handler when the library calls back into Python (a
    callback executes bytecode in the main thread): after each chunk of work, and, while a chunk runs, about every
    0.1 s between the nodes of its passes (the executor's beats, which it makes for a call with a cancel flag). The
    library reads the flag before each node and stops the call with CATTR_ERR_CANCELLED, and `run` raises
    KeyboardInterrupt: within about 0.1 s plus the longest single node of the model."""

    __slots__ = ("flag", "hit", "reporter", "_cb")

    def __init__(self):
        self.flag = ctypes.c_int(0)
        self.hit = False
        self.reporter = None  # a call's progress display (show_progress=True): reporter(done, total)
        self._cb = None

    def install(self, p):
        self._cb = PROGRESS_FN(self._progress)
        p.progress = self._cb
        p.cancel = ctypes.pointer(self.flag)

    def _progress(self, done, total, user):
        r = self.reporter
        if r is not None:
            r(done, total)

    def run(self, fn, *args):
        """fn(*args) (a status) with Ctrl-C turned into cancellation; raises like check()."""
        global _active, _prev_sigint
        self.flag.value = 0
        self.hit = False
        main = _get_ident() == _MAIN_IDENT
        if main:
            cur = _signal.getsignal(_SIGINT)
            if cur is not _on_sigint:
                try:
                    _signal.signal(_SIGINT, _on_sigint)
                    _prev_sigint = cur
                except (ValueError, TypeError):  # not the main interpreter, or signals unavailable
                    main = False
        if main:
            _active = self
        try:
            st = fn(*args)
        finally:
            if main:
                _active = None
        if st == ERR_CANCELLED and self.hit:
            raise KeyboardInterrupt
        check(st)
        if self.hit:  # the signal came after the last chunk: deliver it now
            raise KeyboardInterrupt


_PROGRESS_NOOP = PROGRESS_FN(lambda done, total, user: None)


class ProgressBar:
    """Captum's show_progress on sys.stderr (as sys.stderr is when it draws): "Feature Ablation attribution:  50%|#####
    | 2/4", redrawn in place, ending at 100% with a newline. `name` is Captum's get_name() of the class."""

    def __init__(self, name):
        self.desc = "%s attribution" % name
        self.last = None

    def __call__(self, done, total):
        if total <= 0 or (done, total) == self.last:
            return
        self.last = (done, total)
        import sys

        pct = int(100 * done // total)
        fill = int(10 * done // total)
        sys.stderr.write("\r%s: %3d%%|%s%s| %d/%d" % (self.desc, pct, "#" * fill, " " * (10 - fill), done, total))
        sys.stderr.flush()

    def finish(self):
        import sys

        if self.last is None or self.last[0] != self.last[1]:
            t = self.last[1] if self.last else 1
            self.last = None
            self(t, t)
        sys.stderr.write("\n")
        sys.stderr.flush()


def captum_name(cls_name):
    """Captum's Attribution.get_name(): a space before every capital but the first ("Feature Ablation")."""
    return "".join(" " + c if c.isupper() and i else c for i, c in enumerate(cls_name))


def version():
    return lib.cattr_version().decode()
