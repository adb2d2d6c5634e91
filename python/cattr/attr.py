"""Captum's attribution classes (captum.attr) over cattr: the same class names, constructor and `attribute()`
arguments, defaults and return conventions, with a cattr Model in place of the PyTorch module.

    import cattr
    from cattr.attr import IntegratedGradients
    model = cattr.load("model.onnx")
    ig = IntegratedGradients(model)
    attr, delta = ig.attribute(x, target=3, return_convergence_delta=True)

Results are numpy arrays, or torch tensors when the inputs are torch tensors; a tuple when the inputs are a tuple.
Defaults that are numbers (n_steps, method, n_samples, stdevs, nt_samples, ...) are read from the library
(cattr_attr_default_params), which holds Captum's. Differences from Captum are listed in docs/python.md; the
cattr-specific keywords all start with an underscore:

    _draws=[(role, array), ...]   recorded random draws, in consumption order (shared/golden/README.md section 7),
                                  used instead of cattr's generator (stochastic methods: NoiseTunnel, GradientShap,
                                  ShapleyValueSampling, FeaturePermutation, Lime, KernelShap)
    _seed=int                     key of cattr's counter-based generator (default 0)
    _node_rules=[NodeRule(...)]   backward/propagation rules per ONNX node (replaces the method's default rules)
    _max_memory=bytes             activation memory budget (default: a quarter of the memory available to the
                                  process: free RAM, ulimit -v and cgroup limits considered)
    _device=str                   the device of this call's explainer (default: the model's)
"""
import ctypes
import functools
import numbers
import threading
from collections import namedtuple

import numpy as np

from . import _lib
from ._lib import lib, check
from . import _rng, _torch
from ._rng import get_rng, set_rng
from ._core import Model, ModuleRef, _TensorList, _is_torch, _ptr_array, compute_dtype, layer_name, tensor_to_numpy, \
    to_numpy
from ._torch import TorchForward as _TorchForward

__all__ = [
    "Attribution", "IntegratedGradients", "Saliency", "DeepLift", "DeepLiftShap", "GradientShap", "InputXGradient",
    "GuidedBackprop", "Deconvolution", "GuidedGradCam", "LRP", "FeatureAblation", "FeaturePermutation", "Occlusion",
    "ShapleyValueSampling", "ShapleyValues", "Lime", "KernelShap", "NoiseTunnel", "LayerActivation",
    "LayerGradientXActivation", "LayerGradCam", "InternalInfluence", "LayerConductance", "LayerIntegratedGradients",
    "LayerDeepLift", "LayerDeepLiftShap", "LayerGradientShap", "LayerFeatureAblation", "LayerFeaturePermutation",
    "LayerLRP", "NeuronGradient", "NeuronIntegratedGradients", "NeuronConductance", "NeuronDeepLift",
    "NeuronDeepLiftShap", "NeuronGradientShap", "NeuronGuidedBackprop", "NeuronDeconvolution",
    "NeuronFeatureAblation", "LayerAttribution", "NodeRule", "neuron_sum", "LimeBase", "SkLearnLasso",
    "get_exp_kernel_similarity_function", "default_perturb_func", "default_from_interp_rep_transform",
    "DataLoaderAttribution", "set_rng", "get_rng",
]

NodeRule = namedtuple("NodeRule", "node rule epsilon gamma set_bias_to_zero")
NodeRule.__new__.__defaults__ = (1e-9, 0.25, False)
NodeRule.__doc__ = ("A rule for one ONNX node or module path (`_node_rules=`): rule is 'deeplift_nonlinear', 'deeplift_maxpool', "
                    "'deeplift_softmax', 'guided_backprop_relu', 'deconvolution_relu', 'EpsilonRule', 'GammaRule', "
                    "'Alpha1_Beta0_Rule', 'IdentityRule' or 'lrp_passthrough_nonlinear'.")

_NO_EXTRA = {}
_INT_FIELDS = _lib.AttrParams._ranges()  # the integer fields of cattr_attr_params: name -> (lo, hi)
_OutArray = _lib.TensorP * _lib.MAX_OUTPUTS
_EXTRA = ("_draws", "_seed", "_node_rules", "_max_memory", "_device", "_nt")
_NT_TYPES = {"smoothgrad": _lib.NT_SMOOTHGRAD, "smoothgrad_sq": _lib.NT_SMOOTHGRAD_SQ, "vargrad": _lib.NT_VARGRAD}


def _method_id(name):
    m = lib.cattr_method_from_name(name.encode())
    if m < 0:
        raise _lib.ArgumentError("cattr: unknown method '%s'" % name)
    return m


def _defaults(name):
    """The library's default params (Captum's defaults) of a method, by Captum class name."""
    return lib.cattr_attr_default_params(_method_id(name))


def _quad_name(p):
    return lib.cattr_quadrature_name(p.quadrature).decode()


class neuron_sum:
    """A neuron selector summing the layer over `dims` (counted with the batch, as Captum's
    `lambda x: x.sum(dim=...)`): `neuron_selector=neuron_sum(1)`. Callable like the lambda it stands for."""

    def __init__(self, *dims):
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        self.dims = tuple(_lib.as_int(d, "neuron_sum dims", allow_bool=False) for d in dims)

    def __call__(self, x):
        return x.sum(self.dims)

    def __repr__(self):
        return "neuron_sum%r" % (self.dims,)

    def __eq__(self, other):
        return isinstance(other, neuron_sum) and other.dims == self.dims

    def __hash__(self):
        return hash(("neuron_sum", self.dims))


def _model_of(forward_func):
    if isinstance(forward_func, Model):
        return forward_func
    m = getattr(forward_func, "_cattr_model", None)
    if isinstance(m, Model):
        return m
    raise TypeError("cattr: the forward_func / model must be a cattr.Model (cattr.load, cattr.from_torch), a "
                    "torch.nn.Module or a callable of torch tensors, not %s" % type(forward_func).__name__)


def _torch_forward(forward_func):
    """A TorchForward for a PyTorch forward function (a torch.nn.Module, its forward, a callable of tensors), or
    None for a cattr Model or a language model."""
    if isinstance(forward_func, Model) or hasattr(type(forward_func), "_cattr_model") or \
            isinstance(getattr(forward_func, "_cattr_model", None), Model):
        return None
    if isinstance(forward_func, _TorchForward):
        return forward_func
    if _torch.is_torch_callable(forward_func):
        return _TorchForward(forward_func)
    return None


def _hashable(v):
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    if isinstance(v, slice):
        return ("slice", v.start, v.stop, v.step)
    return v


def _is_scalar(x):
    return isinstance(x, numbers.Number) and not isinstance(x, bool) or isinstance(x, np.generic)


def _to_tuple(x):
    if isinstance(x, (tuple, list)):
        return tuple(x), True
    return (x,), False


def _int(v, what, lo=_lib.INT64_MIN, hi=_lib.INT64_MAX):
    """An integer argument (an int, a numpy integer, a tensor or array of one integer) within [lo, hi] (default:
    int64): TypeError for anything else, ValueError naming it when out of range."""
    if _is_torch(v) or isinstance(v, np.ndarray):
        a = to_numpy(v)
        if a.size == 1 and a.dtype.kind in "iu":
            v = a.reshape(())[()]
    return _lib.as_int(v, what, lo, hi, allow_bool=False)


def _call_baselines(baselines, inputs):
    """Captum's baselines given as a function (DeepLiftShap, GradientShap): called with the inputs' tuple when it
    takes a parameter, else with none."""
    if baselines is None or not callable(baselines) or _is_torch(baselines) or isinstance(baselines, np.ndarray):
        return baselines
    import inspect

    try:
        takes = len(inspect.signature(baselines).parameters) > 0
    except (TypeError, ValueError):
        takes = False
    out = baselines(inputs) if takes else baselines()
    first = inputs[0] if isinstance(inputs, tuple) else inputs
    if _is_torch(first) and any(isinstance(b, np.ndarray) for b in (out if isinstance(out, tuple) else (out,))):
        # Captum asserts what a baselines function returns for torch inputs: tensors or numbers
        raise _lib.ArgumentError("cattr: the baselines function returned a numpy array for torch inputs: return "
                                 "tensors or numbers")
    return out


def _select_target(out, target, n):
    """Captum's _select_targets on a model output (numpy): the values each example's target picks."""
    if target is None:
        return out
    if _is_torch(target) or isinstance(target, np.ndarray):
        t = to_numpy(target).reshape(-1)
        target = int(t[0]) if t.size == 1 else [int(v) for v in t]
    if isinstance(target, (int, np.integer)):
        return out[:, int(target)]
    if isinstance(target, tuple):
        return out[(slice(None),) + tuple(int(v) for v in target)]
    if isinstance(target, list):
        if len(target) != n:
            raise _lib.ArgumentError("cattr: target: %d targets for %d examples" % (len(target), n))
        rows = [out[(b,) + (tuple(int(v) for v in t) if isinstance(t, tuple) else (int(t),))]
                for b, t in enumerate(target)]
        return np.stack(rows)
    raise TypeError("cattr: target: %s is not a target form" % type(target).__name__)


def _target(target, keep):
    """A cattr_target for Captum's target forms: None, int, tuple of ints, list of ints (per example), list of
    tuples (per example), a tensor/array with one element or one per example. Every index is checked to fit int64
    (ctypes would wrap 2**64 + 3 to 3); the library checks it against the model's output."""
    t = _lib.Target()
    if target is None:
        return t
    if type(target) is int:
        v = (ctypes.c_int64 * 1)(_lib.as_int(target, "target"))
        keep.append(v)
        t.kind = _lib.TARGET_INDEX
        t.n_idx = 1
        t.idx = v
        return t
    if _is_torch(target) or isinstance(target, np.ndarray):
        a = to_numpy(target)
        if a.dtype.kind not in "iu":
            raise TypeError("cattr: target: a tensor target must hold integers, not %s" % a.dtype)
        a = np.ascontiguousarray(_lib.int64_array(a.reshape(-1), "target"))
        if a.size == 1:
            rows, n_idx, kind = 0, 1, _lib.TARGET_INDEX
        elif target.ndim == 1:
            rows, n_idx, kind = a.size, 1, _lib.TARGET_PER_EXAMPLE
        else:
            raise _lib.ArgumentError("cattr: target: a tensor target must have one element or one per example (1-D), not "
                             "shape %s" % (tuple(target.shape),))
        vals = a
    elif isinstance(target, tuple):
        vals = np.array([_int(v, "target") for v in target], dtype=np.int64)
        rows, n_idx, kind = 0, len(vals), _lib.TARGET_INDEX
    elif isinstance(target, list):
        if not target:
            raise _lib.ArgumentError("cattr: target: an empty list")
        if all(isinstance(v, tuple) for v in target):
            k = len(target[0])
            if any(len(v) != k for v in target):
                raise _lib.ArgumentError("cattr: target: the tuples of a list of tuples must have the same length")
            vals = np.array([_int(x, "target") for v in target for x in v], dtype=np.int64)
            rows, n_idx, kind = len(target), k, _lib.TARGET_PER_EXAMPLE
        else:
            vals = np.array([_int(v, "target") for v in target], dtype=np.int64)
            rows, n_idx, kind = len(target), 1, _lib.TARGET_PER_EXAMPLE
    else:
        vals = np.array([_int(target, "target")], dtype=np.int64)
        rows, n_idx, kind = 0, 1, _lib.TARGET_INDEX
    keep.append(vals)
    t.kind = kind
    t.n_idx = n_idx
    t.n_rows = rows
    t.idx = vals.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
    return t


def _neuron(p, sel):
    """Fills the neuron selector fields of params p from Captum's neuron_selector."""
    if sel is None:
        raise _lib.ArgumentError("cattr: this method needs a neuron_selector")
    if isinstance(sel, neuron_sum):
        if len(sel.dims) > _lib.MAX_DIMS:
            raise _lib.ArgumentError("cattr: neuron_selector: too many dims")
        p.neuron_kind = _lib.NEURON_SUM
        p.neuron_sum_ndim = len(sel.dims)
        for i, d in enumerate(sel.dims):
            _lib.set_int(p.neuron_sum_dims, i, d, "neuron_sum dims")
        return
    if callable(sel):
        raise _lib.ArgumentError("cattr: neuron_selector: a Python function cannot run inside cattr; use an int, a tuple of "
                         "ints and slices, or cattr.attr.neuron_sum(dims) for `lambda x: x.sum(dims)`")
    idx = sel if isinstance(sel, tuple) else (sel,)
    if len(idx) > _lib.MAX_DIMS:
        raise _lib.ArgumentError("cattr: neuron_selector: too many dims")
    slices = any(isinstance(v, slice) for v in idx)
    p.neuron_kind = _lib.NEURON_SLICES if slices else _lib.NEURON_INDEX
    p.neuron_ndim = len(idx)
    what = "neuron_selector"
    for k, v in enumerate(idx):
        s = p.neuron_slice[k]
        if isinstance(v, slice):
            _lib.set_int(s, 0, 0 if v.start is None else _int(v.start, what + " slice start"), what)
            _lib.set_int(s, 1, _lib.INT64_MAX if v.stop is None else _int(v.stop, what + " slice stop"), what)
            _lib.set_int(s, 2, 1 if v.step is None else _int(v.step, what + " slice step"), what)
        else:
            i = _int(v, what, hi=_lib.INT64_MAX - 1)  # i + 1 is the slice's stop
            p.neuron_index[k] = i
            s[0] = i
            s[1] = i + 1
            s[2] = 1
            p.neuron_slice_is_index[k] = 1


def _quadrature(v):
    """The cattr_quadrature of Captum's `method` argument of IG-style methods."""
    q = lib.cattr_quadrature_from_name(str(v).encode())
    if q < 0:
        raise _lib.ArgumentError("cattr: method: unknown integration method '%s' (riemann_left, riemann_right, "
                         "riemann_middle, riemann_trapezoid, gausslegendre)" % v)
    return q


def _window(p, field, value, n_inputs):
    """sliding_window_shapes / strides as Captum takes them: one tuple for a single input (its dims without the
    batch), a tuple of tuples (one per input), an int (strides: every dim), or a flat tuple of ints, one per input
    (strides with several inputs)."""
    nd_field = field + "_ndim"
    arr, nd = getattr(p, field), getattr(p, nd_field)
    what = "sliding_window_shapes" if field == "sliding_window" else field
    if value is None:
        return
    if isinstance(value, numbers.Integral):
        if field != "strides":
            raise _lib.ArgumentError("cattr: sliding_window_shapes must be a tuple")
        v = _int(value, what)
        for t in range(_lib.MAX_INPUTS):
            nd[t] = -1
            arr[t][0] = v
        return
    value = tuple(value)
    flat = len(value) > 0 and all(isinstance(v, numbers.Integral) for v in value)
    if flat and (field == "sliding_window" or n_inputs <= 1):
        if len(value) > _lib.MAX_DIMS:
            raise _lib.ArgumentError("cattr: %s: too many dims" % what)
        for i, v in enumerate(value):
            _lib.set_int(arr[0], i, _int(v, what), what)
        nd[0] = len(value)
        return
    if len(value) > _lib.MAX_INPUTS:
        raise _lib.ArgumentError("cattr: %s: too many inputs" % what)
    for i, per in enumerate(value):
        if isinstance(per, numbers.Integral):
            _lib.set_int(arr[i], 0, _int(per, what), what)
            nd[i] = 1
        else:
            per = tuple(per)
            if len(per) > _lib.MAX_DIMS:
                raise _lib.ArgumentError("cattr: %s: too many dims for input %d" % (what, i))
            for k, v in enumerate(per):
                _lib.set_int(arr[i], k, _int(v, what), what)
            nd[i] = len(per)


def _flat_layers(layer):
    """The value names of a layer argument: a name, a tuple of names (one module's tensors) or a list of either."""
    if isinstance(layer, str):
        return [layer]
    out = []
    for item in layer:
        out.extend([item] if isinstance(item, str) else list(item))
    return out


class _Explainer:
    """A cattr explainer with what its params borrow; one call at a time (the lock), since an explainer keeps the
    buffers of its plans between calls."""

    __slots__ = ("h", "keep", "intr", "lock")

    def __init__(self, h, keep, intr):
        self.h = h
        self.keep = keep
        self.intr = intr
        self.lock = threading.Lock()

    def __del__(self):
        if self.h:
            lib.cattr_explainer_free(self.h)
            self.h = None


class Attribution:
    """Base of every class: binds a cattr Model to a method and keeps one cattr explainer per parameter set (its
    plans and memory are reused by calls of the same shapes)."""

    _captum_name = None
    _promotes_int_inputs = False
    _floats_int_inputs = False  # LayerGradientShap: integer inputs are attributed as floats (Captum's sampling)
    _truncates_baselines = False  # the Shapley methods: a number baseline of an integer input is truncated
    _layer_method = False

    def __init__(self, forward_func, **ctor):
        tf = getattr(self, "_torch", None) or _torch_forward(forward_func)
        if tf is None and not isinstance(forward_func, Model) and not hasattr(type(forward_func), "_cattr_model"):
            _model_of(forward_func)  # raises the TypeError
        self.forward_func = forward_func
        self._torch = tf  # a PyTorch forward function: exported per kind of call (_torch.py)
        self._model_ = None
        self._ctor = ctor
        self._explainers = {}

    @property
    def _model(self):
        if self._model_ is None:  # a language model builds its cattr Model on first use
            self._model_ = _model_of(self.forward_func)
        return self._model_

    def _effective_layer(self, fields):
        """The layer as the explainer takes it, and attribute_to_layer_input when that changes (else None): for a
        PyTorch forward function, a module that returns several tensors is the tuple of their values (Captum returns
        a tuple), and with attribute_to_layer_input a module called with several tensors is the tuple of the values
        it reads (then attributed as values)."""
        layer = self._ctor.get("layer")
        if layer is None or self._torch is None:
            return layer, None
        to_input = bool(fields.get("attribute_to_layer_input"))
        m = self._model
        changed = [False]

        def one(path):
            if not isinstance(path, str):
                return path
            path = self._torch.exported_path(m, path)
            vals = m.module_values(path, to_input)
            if vals is None or len(vals) < 2:
                return path
            changed[0] = True
            return tuple(vals)

        if isinstance(layer, list):
            eff = [x if isinstance(x, tuple) else one(x) for x in layer]
        else:
            eff = one(layer)
        if to_input and changed[0]:  # every module as the values it reads, attributed as values
            def values(x):
                if not isinstance(x, str):
                    return x
                x = self._torch.exported_path(m, x)
                vals = m.module_values(x, True)
                if not vals:
                    raise _lib.ArgumentError("cattr: the layer '%s' reads no tensor from outside it" % x)
                return vals[0] if len(vals) == 1 else tuple(vals)

            eff = [values(x) for x in eff] if isinstance(eff, list) else values(eff)
            return eff, 0
        return eff, None

    def _use_model_for(self, inputs, additional_forward_args, extra):
        """A PyTorch forward function: the exported Model for this call's inputs becomes the model."""
        if self._torch is not None:
            dev = (extra or _NO_EXTRA).get("_device") or "cpu"
            from ._callback import FORWARD_ONLY_CLASSES

            fwd_only = (getattr(type(self), "_captum_name", None) or type(self).__name__) in FORWARD_ONLY_CLASSES
            self._model_ = self._torch.model_for(inputs, _to_tuple(additional_forward_args)[0]
                                                 if additional_forward_args is not None else None, dev, fwd_only)

    def _output(self, xs, add=()):
        """The model's output at inputs xs (a tuple), the tensors among add fed to its next inputs, run in cattr on
        the model this call uses (a PyTorch function's export for these inputs): a torch tensor for torch inputs."""
        self._use_model_for(xs, add if add else None, None)
        tensors = [a for a in add if _is_torch(a) or isinstance(a, np.ndarray)]
        return self._model.forward(*(list(xs) + tensors))

    # Captum's multiplies_by_inputs: the constructor's multiply_by_inputs where the class takes one; otherwise fixed
    # per class (True for the perturbation methods, InputXGradient, LRP, LayerActivation, LayerConductance)
    _multiplies = False

    @property
    def multiplies_by_inputs(self):
        if "multiply_by_inputs" in self._ctor:
            return bool(self._ctor["multiply_by_inputs"])
        return self._multiplies

    def has_convergence_delta(self):
        return False

    def attribute_future(self, *args, **kwargs):
        """Captum 0.8's futures API: only the perturbation methods have it (FeatureAblation, FeaturePermutation,
        ShapleyValueSampling, ShapleyValues); Captum's other classes raise NotImplementedError, as here."""
        raise NotImplementedError("attribute_future is not implemented for %s" % (self._captum_name or
                                                                                 type(self).__name__))

    def compute_convergence_delta(self, attributions, start_point, end_point, target=None,
                                  additional_forward_args=None):
        """Captum's GradientAttribution.compute_convergence_delta: per example, the sum of its attributions minus
        the difference of the model's (target) outputs at end_point and start_point. The forward passes run in
        cattr."""
        ends, _ = _to_tuple(end_point)
        if start_point is None:
            starts = (0.0,) * len(ends)
        else:
            starts, _ = _to_tuple(start_point)
            if len(starts) == 1 and len(ends) > 1 and _is_scalar(starts[0]):
                starts = starts * len(ends)
        if len(starts) != len(ends):
            raise _lib.ArgumentError("cattr: start_point: %d given for %d inputs" % (len(starts), len(ends)))
        torch_out = _is_torch(ends[0])
        e_arr = [to_numpy(x) for x in ends]
        s_arr = []
        for st, en in zip(starts, e_arr):
            a = np.asarray(float(st), dtype=en.dtype) if _is_scalar(st) else to_numpy(st)
            if a.ndim and a.shape[0] not in (1, en.shape[0]):  # Captum's _validate_input asserts
                raise _lib.ArgumentError("cattr: start_point has %d examples for an end_point of %d: give one per "
                                         "example, one for all, or a number" % (a.shape[0], en.shape[0]))
            s_arr.append(np.ascontiguousarray(np.broadcast_to(a, en.shape)) if a.shape != en.shape else a)
        attrs, _ = _to_tuple(attributions)
        n = e_arr[0].shape[0]
        for a in attrs:
            if to_numpy(a).shape[0] != n:
                raise _lib.ArgumentError("cattr: attributions and end_point must have the same batch size (%d and %d)"
                                 % (to_numpy(a).shape[0], n))
        add = [] if additional_forward_args is None else [
            to_numpy(x) for x in _to_tuple(additional_forward_args)[0] if _is_torch(x) or isinstance(x, np.ndarray)]
        self._use_model_for(tuple(ends), additional_forward_args, None)
        m = self._model
        f_end = _select_target(np.asarray(m.forward(*(e_arr + add))), target, n)
        f_start = _select_target(np.asarray(m.forward(*(s_arr + add))), target, n)
        attr_sum = sum(to_numpy(a).reshape(n, -1).sum(1) for a in attrs)
        delta = attr_sum - (f_end.reshape(n, -1).sum(1) - f_start.reshape(n, -1).sum(1))
        return self._conv(np.ascontiguousarray(delta), torch_out)

    # -- the call ---------------------------------------------------------------------------------------------
    def _params(self, dtype, fields, extra, keep):
        p = _defaults(self._captum_name)
        p.dtype = dtype
        for k, v in self._ctor.items():
            if k in ("multiply_by_inputs", "eps"):
                setattr(p, k, v)
        layer, to_input = self._effective_layer(fields)
        if to_input is not None:
            p.attribute_to_layer_input = to_input
        if layer is not None:
            names = _flat_layers(layer)
            enc = [n.encode() for n in names]
            keep.append(enc)
            p.layer = enc[0]
            if len(enc) > 1:
                arr = (ctypes.c_char_p * len(enc))(*enc)
                keep.append(arr)
                p.layers = arr
                p.n_layers = len(enc)
        for k, v in fields.items():
            if v is None:
                continue
            if k == "method":
                p.quadrature = _quadrature(v)
            elif k == "n_steps" and isinstance(v, str):
                if v != "auto":
                    raise TypeError("cattr: n_steps must be an int or 'auto', not str %r" % v)
                p.n_steps = _lib.STEPS_AUTO
            elif k == "nt_type":
                if v not in _NT_TYPES:
                    raise _lib.ArgumentError("cattr: nt_type: '%s' is not one of smoothgrad, smoothgrad_sq, vargrad" % v)
                p.nt_type = _NT_TYPES[v]
            elif k in ("sliding_window", "strides"):
                _window(p, k, v, fields.get("_n_inputs", 1))
            elif k == "neuron_selector":
                _neuron(p, v)
            elif k == "_n_inputs" or (k == "attribute_to_layer_input" and to_input is not None):
                pass
            elif k in ("stdevs",):
                if isinstance(v, (tuple, list)):
                    if len(set(float(x) for x in v)) != 1:
                        raise _lib.ArgumentError("cattr: stdevs: one standard deviation per input is not supported yet; give "
                                         "one number")
                    v = v[0]
                p.stdevs = float(v)
            elif k in _INT_FIELDS:
                setattr(p, k, v)  # checked against the field's C type (_lib.CStruct)
            else:
                setattr(p, k, float(v))
        if extra.get("_seed") is not None:
            p.seed = extra["_seed"]
        if extra.get("_max_memory") is not None:
            p.max_memory = extra["_max_memory"]
        if extra.get("_device") is not None:
            dev = extra["_device"].encode()
            keep.append(dev)
            p.device = dev
        rules = extra.get("_node_rules")
        if rules:
            arr = (_lib.NodeRule * len(rules))()
            for i, r in enumerate(rules):
                r = r if isinstance(r, NodeRule) else NodeRule(*r)
                n, ru = r.node.encode(), r.rule.encode()
                keep.append((n, ru))
                arr[i].node, arr[i].rule = n, ru
                arr[i].epsilon, arr[i].gamma = float(r.epsilon), float(r.gamma)
                arr[i].set_bias_to_zero = 1 if r.set_bias_to_zero else 0
            keep.append(arr)
            p.node_rules = arr
            p.n_node_rules = len(rules)
        return p

    def _explainer(self, dtype, fields, extra):
        # the fields come in a fixed order from each attribute(); the key is built cheaply when every value hashes
        key = (id(self._model), dtype, tuple(fields.items()))
        if extra:
            key += tuple((k, extra.get(k)) for k in ("_seed", "_max_memory", "_device", "_node_rules", "_nt"))
        try:
            e = self._explainers.get(key)
        except TypeError:  # lists, slices: made hashable
            key = (id(self._model), dtype, tuple((k, _hashable(v)) for k, v in fields.items()),
                   tuple((k, _hashable(extra.get(k))) for k in ("_seed", "_max_memory", "_device", "_node_rules",
                                                                 "_nt")))
            e = self._explainers.get(key)
        if e is not None:
            return e
        keep = [self._model]  # the explainer borrows the model: it must outlive the explainer
        p = self._params(dtype, fields, extra, keep)
        intr = _lib.Interruptible()
        intr.install(p)
        h = _lib.ExplainerP()
        check(lib.cattr_explainer_new(self._model._h, ctypes.byref(p), ctypes.byref(h)))
        e = _Explainer(h, keep, intr)
        if len(self._explainers) > 16:
            self._explainers.clear()
        self._explainers[key] = e
        return e

    def _run(self, inputs, fields, baselines=None, target=None, additional_forward_args=None, feature_mask=None,
             want_delta=False, extra=None, layer_mask=None, layer_baseline=None, int_inputs_ok=False, progress=False,
             invoke=None):
        """Runs the method; returns (list of numpy attributions, delta or None, inputs_were_tuple, torch_out).
        invoke (cattr.metrics): called as invoke(explainer, call, mk) in place of the method's run, with the call
        made for these inputs, target and additional arguments and mk(array, what) for more tensors in the compute
        dtype; _run then returns (its result, inputs_were_tuple, torch_out)."""
        if extra:
            for k in extra:
                if k not in _EXTRA:
                    raise TypeError("attribute() got an unexpected keyword argument '%s'" % k)
            nt = extra.get("_nt")
            if nt:
                fields = dict(fields, **nt)
        else:
            extra = _NO_EXTRA
        xs, was_tuple = _to_tuple(inputs)
        if not xs:
            raise _lib.ArgumentError("cattr: inputs: no input given")
        torch_out = _is_torch(xs[0])
        arrs = [to_numpy(x) for x in xs]
        for i, a in enumerate(arrs):
            if a.dtype.kind == "O":  # a list holding ints too large for int64, or not numbers
                arrs[i] = a = _lib.int64_array(a, "input %d" % i)
            if a.dtype.kind not in "fiub":
                raise _lib.ArgumentError("cattr: input %d: dtype %s is not a number type" % (i, a.dtype))
            if a.dtype.kind != "f" and not int_inputs_ok:
                raise _lib.ArgumentError("cattr: input %d: %s is attributed as a float tensor (give float32 or float64 "
                                 "values)" % (i, a.dtype))
            if a.ndim == 0:
                raise _lib.ArgumentError("cattr: input %d: a 0-d tensor has no batch dimension" % i)
        if int_inputs_ok and type(self)._floats_int_inputs and any(a.dtype.kind in "iub" for a in arrs):
            # Captum's GradientShap samples inputs between baseline and input (baseline + rand * (input - baseline)):
            # the forward function sees float values even for integer inputs (token positions of an LLM input)
            xs = tuple(x.float() if _is_torch(x) and a.dtype.kind in "iub" else
                       (a.astype(np.float32) if a.dtype.kind in "iub" else x) for x, a in zip(xs, arrs))
            arrs = [a.astype(np.float32) if a.dtype.kind in "iub" else a for a in arrs]
        if baselines is not None and int_inputs_ok and type(self)._promotes_int_inputs:
            # Captum's type promotion: an integer input ablated by a float baseline is computed in float
            bs0, _ = _to_tuple(baselines)
            if len(bs0) == 1 and len(arrs) > 1 and _is_scalar(bs0[0]):
                bs0 = bs0 * len(arrs)
            xs = list(xs)
            for i, b in enumerate(bs0[:len(arrs)]):
                if arrs[i].dtype.kind in "iub" and b is not None and (
                        (_is_scalar(b) and isinstance(b, (float, np.floating))) or
                        (not _is_scalar(b) and to_numpy(b).dtype.kind == "f")):
                    arrs[i] = arrs[i].astype(np.float32)
                    xs[i] = xs[i].float() if _is_torch(xs[i]) else arrs[i]
            xs = tuple(xs)
        dtype = compute_dtype(arrs)
        fields["_n_inputs"] = len(arrs)
        fields["return_convergence_delta"] = 1 if want_delta else 0
        self._use_model_for(xs, additional_forward_args, extra)
        if self._torch is not None and getattr(self._model, "_cattr_future", False) != \
                bool(getattr(self, "_future_call", False)):
            # Captum's rule: a forward function that returns Futures goes with attribute_future, and only such a one
            raise _lib.ArgumentError(
                "cattr: the forward function returns a Future: call attribute_future" if not getattr(
                    self, "_future_call", False) else
                "cattr: attribute_future needs a forward function that returns a Future; call attribute")
        self._eff_layer = self._effective_layer(fields)[0]
        # Captum calls a baselines function with the inputs as given (a tensor stays a tensor), but LayerDeepLiftShap
        # with their tuple
        baselines = _call_baselines(baselines, xs if was_tuple or self._captum_name == "LayerDeepLiftShap" else xs[0])
        if _rng.get_rng() == "torch" and not extra.get("_draws"):  # Captum's draws from torch's generator (_rng.py)
            d = _rng.draws_for_call(
                self, xs, fields, baselines, feature_mask, layer_mask, noise_tunnel=bool(extra.get("_nt")),
                layer_shapes=lambda: [np.shape(a) for a in _to_tuple(
                    LayerActivation(self._model, self._eff_layer).attribute(inputs, additional_forward_args))[0]])
            if d is not None:
                extra = dict(extra, _draws=d)
        e = self._explainer(dtype, fields, extra)
        tl = _TensorList()
        keep = []
        try:
            def mk(a, what, like=None):
                a = to_numpy(a)
                if a.dtype.kind == "f" or (like is not None and like.dtype.kind == "f"):
                    return tl.make(a, dtype)
                return tl.make(a, _lib.INT64, what)

            in_p = [mk(a, "input %d" % i) for i, a in enumerate(arrs)]
            n = len(in_p)
            call = _lib.Call()
            call.inputs = _ptr_array(in_p)
            call.n_inputs = n
            if baselines is not None:
                bs, b_tuple = _to_tuple(baselines)
                if len(bs) == 1 and n > 1 and _is_scalar(bs[0]):
                    bs = bs * n
                if len(bs) != n:
                    raise _lib.ArgumentError("cattr: baselines: %d given for %d inputs" % (len(bs), n))
                bp = []
                for i, b in enumerate(bs):
                    if b is None:
                        bp.append(None)
                    elif _is_scalar(b):
                        if arrs[i].dtype.kind == "f":
                            v = np.array(float(b), dtype=np.float64)
                        elif self._truncates_baselines:  # Captum's full_like: the input's dtype
                            v = np.array(int(b), dtype=np.int64)
                        else:
                            v = np.array(_lib.as_int(b, "baselines %d" % i), dtype=np.int64)
                        bp.append(tl.make(v))
                    else:
                        bp.append(mk(b, "baselines %d" % i, arrs[i]))
                call.baselines = _ptr_array(bp)
            t = _target(target, keep)
            call.target = ctypes.pointer(t)
            if additional_forward_args is not None:
                af, _ = _to_tuple(additional_forward_args)
                # non-tensor arguments (ints, bools, None) were fixed when the model was exported
                ap = [mk(a, "additional_forward_args %d" % j) for j, a in enumerate(af)
                      if isinstance(a, np.ndarray) or _is_torch(a)]
                if ap:
                    call.additional = _ptr_array(ap)
                    call.n_additional = len(ap)
            if feature_mask is not None:
                fm, _ = _to_tuple(feature_mask)
                if len(fm) != n:
                    raise _lib.ArgumentError("cattr: feature_mask: %d masks given for %d inputs" % (len(fm), n))
                call.feature_masks = _ptr_array([None if m is None else
                                                 tl.make(to_numpy(m), _lib.INT64, "feature_mask %d" % i)
                                                 for i, m in enumerate(fm)])
            draws = extra.get("_draws")
            if draws:
                dp = [tl.make(to_numpy(a), None, "_draws %d" % k) for k, (_, a) in enumerate(draws)]
                roles = [r.encode() if r else None for r, _ in draws]
                keep.append(roles)
                call.draws = _ptr_array(dp)
                ra = (ctypes.c_char_p * len(roles))(*roles)
                keep.append(ra)
                call.draw_roles = ra
                call.n_draws = len(dp)
            if layer_mask is not None:
                lm, _ = _to_tuple(layer_mask)
                call.layer_masks = _ptr_array([None if m is None else
                                               tl.make(to_numpy(m), _lib.INT64, "layer_mask %d" % i)
                                               for i, m in enumerate(lm)])
                call.n_layer_masks = len(lm)
            if layer_baseline is not None:
                if _is_scalar(layer_baseline):
                    call.layer_baseline = tl.make(np.array(float(layer_baseline), dtype=np.float64))
                else:
                    lb, _ = _to_tuple(layer_baseline)
                    if len(lb) != 1:
                        raise _lib.ArgumentError("cattr: layer_baselines: one baseline per layer tensor is not supported "
                                         "yet; give one tensor or a scalar")
                    call.layer_baseline = mk(lb[0], "layer_baselines")
            if invoke is not None:
                with e.lock:
                    return invoke(e, call, mk), was_tuple, torch_out
            out = _OutArray()
            delta = _lib.TensorP()
            bar = _lib.ProgressBar(_lib.captum_name(type(self).__name__)) if progress else None
            with e.lock:
                e.intr.reporter = bar
                try:
                    e.intr.run(lib.cattr_explainer_run, e.h, ctypes.byref(call), out,
                               ctypes.byref(delta) if want_delta else None)
                    self.n_steps_used = lib.cattr_explainer_steps_used(e.h) or None
                finally:
                    e.intr.reporter = None
            if bar is not None:
                bar.finish()
        finally:
            tl.free()
        attrs = []
        for t in out:  # the results are the first entries (one per input or layer tensor), then NULLs
            if not t:
                break
            attrs.append(tensor_to_numpy(t))
        d = tensor_to_numpy(delta) if want_delta and delta else None
        return attrs, d, was_tuple, torch_out

    # -- results ----------------------------------------------------------------------------------------------
    @staticmethod
    def _conv(a, torch_out):
        if torch_out and a is not None:
            import torch
            return torch.from_numpy(a)
        return a

    # Captum's FeatureAblation and its subclasses attribute in the dtype of the forward function's output: a Python
    # int or float (a host-function model, _callback.py) gives int64 or float64 attributions
    _output_dtype_follows = False

    def _result(self, res, want_delta):
        attrs, d, was_tuple, torch_out = res
        num = getattr(getattr(self, "_model_", None), "_cattr_number_type", None)
        if self._output_dtype_follows and num is not None:
            attrs = [np.rint(a).astype(np.int64) if num is int else a.astype(np.float64) for a in attrs]
        attrs = [self._conv(a, torch_out) for a in attrs]
        out = tuple(attrs) if was_tuple else attrs[0]
        if want_delta:
            return out, self._conv(d, torch_out)
        return out

    def _layer_result(self, res, want_delta):
        """Layer methods: one result per layer tensor; a list when the layer was given as a list, a tuple when one
        layer has several tensors (a tuple of value names), else the tensor."""
        attrs, d, _, torch_out = res
        attrs = [self._conv(a, torch_out) for a in attrs]
        layer = getattr(self, "_eff_layer", None) or self._ctor.get("layer")
        if isinstance(layer, list):
            out, k = [], 0
            for item in layer:
                if isinstance(item, tuple):
                    out.append(tuple(attrs[k:k + len(item)]))
                    k += len(item)
                else:
                    out.append(attrs[k])
                    k += 1
        elif isinstance(layer, tuple):
            out = tuple(attrs)
        else:
            out = attrs[0]
        if want_delta:
            return out, self._conv(d, torch_out)
        return out


def _unsupported(name, value, default=None):
    if value is not default:
        raise _lib.ArgumentError("cattr: %s is not supported (it must be %r)" % (name, default))


# =================================================================================================================
# primary methods
# =================================================================================================================

_IG = _defaults("IntegratedGradients")


def _steps_fields(n_steps, method, internal_batch_size, delta_tol, max_steps):
    """The path fields of IG and LayerIG; delta_tol and max_steps go with n_steps="auto"."""
    if n_steps != "auto" and (delta_tol is not None or max_steps is not None):
        raise _lib.ArgumentError("cattr: delta_tol and max_steps go with n_steps='auto'")
    f = dict(n_steps=n_steps, method=method, internal_batch_size=internal_batch_size)
    if n_steps == "auto":
        f.update(delta_tol=delta_tol, max_steps=max_steps)
    return f


class IntegratedGradients(Attribution):
    _captum_name = "IntegratedGradients"

    def __init__(self, forward_func, multiply_by_inputs=True):
        super().__init__(forward_func, multiply_by_inputs=1 if multiply_by_inputs else 0)

    def has_convergence_delta(self):
        return True

    def attribute(self, inputs, baselines=None, target=None, additional_forward_args=None, n_steps=_IG.n_steps,
                  method=_quad_name(_IG), internal_batch_size=None, return_convergence_delta=False, delta_tol=None,
                  max_steps=None, **kw):
        """Captum's IntegratedGradients.attribute. Beyond Captum: n_steps="auto" runs 8, 16, 32, ... steps (at most
        max_steps, default 512) until every example's |convergence delta| <= delta_tol (default 1e-3) x its sum of
        |attributions|; self.n_steps_used tells the steps of the last call."""
        res = self._run(inputs, _steps_fields(n_steps, method, internal_batch_size, delta_tol, max_steps),
                        baselines, target, additional_forward_args, want_delta=return_convergence_delta, extra=kw)
        return self._result(res, return_convergence_delta)


class Saliency(Attribution):
    _captum_name = "Saliency"

    def attribute(self, inputs, target=None, abs=True, additional_forward_args=None, **kw):
        res = self._run(inputs, dict(abs=1 if abs else 0), None, target, additional_forward_args, extra=kw)
        return self._result(res, False)


class InputXGradient(Attribution):
    _captum_name = "InputXGradient"
    _multiplies = True

    def attribute(self, inputs, target=None, additional_forward_args=None, **kw):
        return self._result(self._run(inputs, {}, None, target, additional_forward_args, extra=kw), False)


def _call_custom_func(func, multipliers, inputs, baselines):
    """Captum's _call_custom_attribution_func: func(multipliers[, inputs[, baselines]]) by its parameter count."""
    import inspect

    if not callable(func):
        raise _lib.ArgumentError("cattr: custom_attribution_func must be a callable function, not %s" %
                                 type(func).__name__)
    n = len(inspect.signature(func).parameters)
    if n == 1:
        return func(multipliers)
    if n == 2:
        return func(multipliers, inputs)
    if n == 3:
        return func(multipliers, inputs, baselines)
    raise _lib.ArgumentError("`custom_attribution_func` must take at least one and at most 3 arguments.")


def _as_tensors(arrs, torch_out):
    if torch_out:
        import torch

        return tuple(a if _is_torch(a) else torch.as_tensor(np.asarray(a)) for a in arrs)
    return tuple(to_numpy(a) for a in arrs)


def _tensorize_baselines(xs, baselines):
    """Captum's _tensorize_baseline: a number becomes a tensor of the input's shape, a one-row baseline the batch's."""
    bs, _ = _to_tuple(0.0 if baselines is None else baselines)
    if len(bs) == 1 and len(xs) > 1:
        bs = bs * len(xs)
    out = []
    for x, b in zip(xs, bs):
        xa = to_numpy(x)
        if _is_scalar(b):
            out.append(np.full(xa.shape, float(b), dtype=xa.dtype))
        else:
            ba = to_numpy(b)
            if ba.shape[0] == 1 and xa.shape[0] > 1:
                ba = np.concatenate([ba] * xa.shape[0])
            out.append(ba)
    return out


class _CustomDeepLift:
    """custom_attribution_func for the DeepLift family, applied in Python to what the engine returns: the
    multipliers (the method without multiplying by inputs) and, for the layer forms, the layer's values at the inputs
    and baselines (LayerActivation); the Shap forms pair every example with every baseline and average the pairs'
    attributions, as Captum does."""

    def _custom(self, inputs, baselines, target, add, func, want_delta, extra, layer=False, to_layer_input=False,
                neuron=None, shap=False):
        xs, was_tuple = _to_tuple(inputs)
        torch_out = _is_torch(xs[0])
        baselines = _call_baselines(baselines, xs if was_tuple or layer else xs[0])
        bts = _tensorize_baselines(xs, baselines)
        b = to_numpy(xs[0]).shape[0]
        nb = bts[0].shape[0] if shap else 1
        if shap:  # every example with every baseline: inputs repeat-interleaved, baselines tiled
            xs_e = [np.repeat(to_numpy(x), nb, axis=0) for x in xs]
            bts_e = [np.tile(bb, (b,) + (1,) * (bb.ndim - 1)) for bb in bts]
            tgt = target
            if isinstance(target, list):
                tgt = [t for t in target for _ in range(nb)]
            elif _is_torch(target) or isinstance(target, np.ndarray):
                tv = to_numpy(target).reshape(-1)
                tgt = np.repeat(tv, nb) if tv.size == b and b > 1 else target
            af = None if add is None else tuple(
                np.repeat(to_numpy(a), nb, axis=0) if (_is_torch(a) or isinstance(a, np.ndarray)) else a
                for a in _to_tuple(add)[0])
        else:
            xs_e, bts_e, tgt, af = [to_numpy(x) for x in xs], bts, target, add
        ins_t, bas_t = _as_tensors(xs_e, torch_out), _as_tensors(bts_e, torch_out)
        # the multipliers: the same method without multiplying (and without the Shap pairing, done here)
        base_cls = {"DeepLiftShap": DeepLift, "LayerDeepLiftShap": LayerDeepLift,
                    "NeuronDeepLiftShap": NeuronDeepLift}.get(self._captum_name, type(self))
        inner = base_cls.__new__(base_cls)
        inner.__dict__.update(self.__dict__)
        inner._ctor = dict(self._ctor, multiply_by_inputs=0)
        inner._explainers = {}
        kw = dict(extra)
        if neuron is not None:
            mult = inner.attribute(ins_t, neuron, bas_t, af, to_layer_input, **kw)
        elif layer:
            mult = inner.attribute(ins_t, bas_t, tgt, af, False, to_layer_input, **kw)
        else:
            mult = inner.attribute(ins_t, bas_t, tgt, af, False, **kw)
        mults = mult if isinstance(mult, tuple) else (mult,)
        if layer:  # the layer's values at the inputs and at the baselines
            act = LayerActivation.__new__(LayerActivation)
            act.__dict__.update(self.__dict__)
            act._explainers = {}
            a_in = act.attribute(ins_t, af, to_layer_input)
            a_base = act.attribute(bas_t, af, to_layer_input)
            a_in = a_in if isinstance(a_in, tuple) else (a_in,)
            a_base = a_base if isinstance(a_base, tuple) else (a_base,)
            attrs = _call_custom_func(func, mults, a_in, a_base)
        else:
            attrs = _call_custom_func(func, mults, ins_t, bas_t)
        attrs = attrs if isinstance(attrs, tuple) else (attrs,)
        delta = None
        if want_delta:
            delta = self.compute_convergence_delta(attrs, bas_t, ins_t, tgt, af)
        if shap:
            attrs = tuple(self._conv(to_numpy(a).reshape((b, nb) + to_numpy(a).shape[1:]).mean(1), torch_out)
                          for a in attrs)
        out = (attrs if len(attrs) > 1 else attrs[0]) if layer else (attrs if was_tuple else attrs[0])
        return (out, delta) if want_delta else out


class DeepLift(_CustomDeepLift, Attribution):
    _captum_name = "DeepLift"

    def __init__(self, model, multiply_by_inputs=True, eps=_defaults("DeepLift").eps):
        super().__init__(model, multiply_by_inputs=1 if multiply_by_inputs else 0, eps=float(eps))

    def has_convergence_delta(self):
        return True

    def attribute(self, inputs, baselines=None, target=None, additional_forward_args=None,
                  return_convergence_delta=False, custom_attribution_func=None, **kw):
        if custom_attribution_func is not None:
            return self._custom(inputs, baselines, target, additional_forward_args, custom_attribution_func,
                                return_convergence_delta, kw, shap=self._captum_name == "DeepLiftShap")
        res = self._run(inputs, {}, baselines, target, additional_forward_args, want_delta=return_convergence_delta,
                        extra=kw)
        return self._result(res, return_convergence_delta)


class DeepLiftShap(DeepLift):
    _captum_name = "DeepLiftShap"

    def __init__(self, model, multiply_by_inputs=True):
        Attribution.__init__(self, model, multiply_by_inputs=1 if multiply_by_inputs else 0)

    def attribute(self, inputs, baselines, target=None, additional_forward_args=None, return_convergence_delta=False,
                  custom_attribution_func=None, **kw):
        return DeepLift.attribute(self, inputs, baselines, target, additional_forward_args, return_convergence_delta,
                                  custom_attribution_func, **kw)


_GS = _defaults("GradientShap")


class GradientShap(Attribution):
    _captum_name = "GradientShap"

    def __init__(self, forward_func, multiply_by_inputs=True):
        super().__init__(forward_func, multiply_by_inputs=1 if multiply_by_inputs else 0)

    def has_convergence_delta(self):
        return True

    def attribute(self, inputs, baselines, n_samples=_GS.n_samples, stdevs=_GS.stdevs, target=None,
                  additional_forward_args=None, return_convergence_delta=False, **kw):
        res = self._run(inputs, dict(n_samples=n_samples, stdevs=stdevs), baselines, target, additional_forward_args,
                        want_delta=return_convergence_delta, extra=kw)
        return self._result(res, return_convergence_delta)


class GuidedBackprop(Attribution):
    _captum_name = "GuidedBackprop"

    def attribute(self, inputs, target=None, additional_forward_args=None, **kw):
        return self._result(self._run(inputs, {}, None, target, additional_forward_args, extra=kw), False)


class Deconvolution(GuidedBackprop):
    _captum_name = "Deconvolution"


class GuidedGradCam(Attribution):
    _captum_name = "GuidedGradCam"

    def __init__(self, model, layer, device_ids=None):
        self._torch = _torch_forward(model)
        layer = LayerAttribution._layer_path(self, layer)
        if not isinstance(layer, str):
            raise TypeError("cattr: GuidedGradCam takes one layer")
        super().__init__(model, layer=layer)

    def attribute(self, inputs, target=None, additional_forward_args=None, interpolate_mode="nearest",
                  attribute_to_layer_input=False, **kw):
        if interpolate_mode != "nearest":
            return self._other_mode(inputs, target, additional_forward_args, interpolate_mode,
                                    attribute_to_layer_input, kw)
        res = self._run(inputs, dict(attribute_to_layer_input=1 if attribute_to_layer_input else 0), None, target,
                        additional_forward_args, extra=kw)
        return self._result(res, False)


    def _other_mode(self, inputs, target, add, mode, to_input, kw):
        """interpolate_mode other than nearest (the engine's): guided backprop and GradCAM from the engine, GradCAM
        upsampled by torch (LayerAttribution.interpolate) and multiplied here, as Captum does; an input whose
        upsampling fails (an unknown mode, an input without spatial dims) gets an empty tensor and a warning."""
        import warnings

        gb = GuidedBackprop(self.forward_func).attribute(inputs, target=target, additional_forward_args=add, **kw)
        gc = LayerGradCam(self.forward_func, self._ctor["layer"]).attribute(
            inputs, target=target, additional_forward_args=add, attribute_to_layer_input=to_input,
            relu_attributions=True, **kw)
        xs, was_tuple = _to_tuple(inputs)
        gbs = gb if was_tuple else (gb,)
        out = []
        for x, g in zip(xs, gbs):
            try:
                up = LayerAttribution.interpolate(gc, tuple(x.shape[2:]), interpolate_mode=mode)
                out.append(g * up)
            except Exception:  # noqa: BLE001 - Captum's rule: any failure leaves that input's attribution empty
                warnings.warn("Couldn't appropriately interpolate GradCAM attributions for some input tensors, "
                              "returning empty tensor for corresponding attributions.", stacklevel=3)
                if _is_torch(x):
                    import torch
                    out.append(torch.empty(0))
                else:
                    out.append(np.empty(0, dtype=np.float32))
        return tuple(out) if was_tuple else out[0]


class LRP(Attribution):
    """Captum's LRP. A torch model's rules are Captum's: the `.rule` of its leaf modules (EpsilonRule, GammaRule,
    Alpha1_Beta0_Rule, IdentityRule of captum.attr._utils.lrp_rules), else Captum's default for the module's type,
    read at each call and given to the library as node rules on the modules' paths (`_node_rules=` replaces them);
    a cattr Model gets the default rules by op (docs/python.md)."""
    _captum_name = "LRP"
    _multiplies = True

    def __init__(self, model):
        super().__init__(model)
        if self._torch is not None:
            _torch.lrp_check_rules(self._torch.root)  # Captum: TypeError for a rule that is not a PropagationRule

    def has_convergence_delta(self):
        return True

    @staticmethod
    def _torch_rules(a, inputs, additional_forward_args, kw):
        """kw with `_node_rules`: the rules of the torch modules of attribution a (LRP, LayerLRP) for this call's
        export, unless a is not a torch model or kw gives them."""
        if a._torch is None or kw.get("_node_rules"):
            return kw
        _torch.lrp_check_rules(a._torch.root)
        a._use_model_for(_to_tuple(inputs)[0], additional_forward_args, kw)
        rules = _torch.lrp_node_rules(a._torch.root, a._model)
        return dict(kw, _node_rules=tuple(NodeRule(*r) for r in rules))

    def attribute(self, inputs, target=None, additional_forward_args=None, return_convergence_delta=False,
                  verbose=False, **kw):
        if self._torch is None:
            res = self._run(inputs, {}, None, target, additional_forward_args, want_delta=return_convergence_delta,
                            extra=kw)
        else:
            with _torch.keep_training_modes(self._torch.root):  # the export leaves every module's mode as it was
                kw = LRP._torch_rules(self, inputs, additional_forward_args, kw)
                res = self._run(inputs, {}, None, target, additional_forward_args,
                                want_delta=return_convergence_delta, extra=kw)
        return self._result(res, return_convergence_delta)


def _completed_future(value):
    """A torch.futures.Future already holding value (the result of attribute_future)."""
    import torch

    fut = torch._C.Future([])  # torch.Future, the type Captum's futures have (`type(f) is torch.Future`)
    fut.set_result(value)
    return fut


class _FutureAttribution:
    """attribute_future for the perturbation methods: the attribution (the forward function may return Futures,
    which are awaited as the model is exported), as a completed Future."""

    def attribute_future(self, *args, **kwargs):
        self._future_call = True
        try:
            return _completed_future(self.attribute(*args, **kwargs))
        finally:
            self._future_call = False


class FeatureAblation(_FutureAttribution, Attribution):
    _captum_name = "FeatureAblation"
    _promotes_int_inputs = True
    _multiplies = True

    _output_dtype_follows = True

    def attribute(self, inputs, baselines=None, target=None, additional_forward_args=None, feature_mask=None,
                  perturbations_per_eval=None, show_progress=False, **kw):
        res = self._run(inputs, dict(perturbations_per_eval=perturbations_per_eval), baselines, target,
                        additional_forward_args, feature_mask, extra=_strip_perturb_kwargs(kw), progress=show_progress, int_inputs_ok=True)
        return self._result(res, False)


def _strip_perturb_kwargs(kw):
    # FeatureAblation.attribute swallows unknown keywords (**kwargs) in Captum; enable_cross_tensor_attribution is
    # ignored by the Captum commit cattr follows (feature ids are global across inputs)
    kw = dict(kw)
    kw.pop("enable_cross_tensor_attribution", None)
    return kw


class FeaturePermutation(_FutureAttribution, Attribution):
    _captum_name = "FeaturePermutation"
    _min_examples_per_batch_grouped = 2
    _multiplies = True

    _output_dtype_follows = True

    def __init__(self, forward_func, perm_func=None):
        _unsupported("perm_func", perm_func)
        super().__init__(forward_func)

    def attribute(self, inputs, target=None, additional_forward_args=None, feature_mask=None,
                  perturbations_per_eval=None, show_progress=False, **kw):
        m = self._min_examples_per_batch_grouped
        if m is None or m < 2:  # Captum permutes an input of one row then, and asserts
            for x in _to_tuple(inputs)[0]:
                a = to_numpy(x)
                if a.size and a.ndim and a.shape[0] < 2:
                    raise AssertionError("cannot permute features with batch_size = 1")
        res = self._run(inputs, dict(perturbations_per_eval=perturbations_per_eval), None, target,
                        additional_forward_args, feature_mask, extra=_strip_perturb_kwargs(kw), progress=show_progress, int_inputs_ok=True)
        return self._result(res, False)


class Occlusion(Attribution):
    _captum_name = "Occlusion"
    _promotes_int_inputs = True
    _multiplies = True

    _output_dtype_follows = True

    def attribute(self, inputs, sliding_window_shapes, strides=None, baselines=None, target=None,
                  additional_forward_args=None, perturbations_per_eval=None, show_progress=False, **kw):
        res = self._run(inputs, dict(sliding_window=sliding_window_shapes, strides=strides,
                                     perturbations_per_eval=perturbations_per_eval),
                        baselines, target, additional_forward_args, extra=kw, progress=show_progress, int_inputs_ok=True)
        return self._result(res, False)


_SVS = _defaults("ShapleyValueSampling")


class ShapleyValueSampling(_FutureAttribution, Attribution):
    _captum_name = "ShapleyValueSampling"
    _truncates_baselines = True
    _multiplies = True

    def attribute(self, inputs, baselines=None, target=None, additional_forward_args=None, feature_mask=None,
                  n_samples=_SVS.n_samples, perturbations_per_eval=None, show_progress=False, **kw):
        res = self._run(inputs, dict(n_samples=n_samples, perturbations_per_eval=perturbations_per_eval), baselines,
                        target, additional_forward_args, feature_mask, extra=kw, progress=show_progress, int_inputs_ok=True)
        return self._result(res, False)


class ShapleyValues(_FutureAttribution, Attribution):
    _captum_name = "ShapleyValues"
    _truncates_baselines = True
    _multiplies = True

    def attribute(self, inputs, baselines=None, target=None, additional_forward_args=None, feature_mask=None,
                  perturbations_per_eval=None, show_progress=False, **kw):
        res = self._run(inputs, dict(perturbations_per_eval=perturbations_per_eval), baselines, target,
                        additional_forward_args, feature_mask, extra=kw, progress=show_progress, int_inputs_ok=True)
        return self._result(res, False)


_LIME = _defaults("Lime")
_KS = _defaults("KernelShap")


class SkLearnLasso:
    """Captum's captum._utils.models.SkLearnLasso, as a description: the interpretable model cattr fits (weighted
    Lasso, cyclic coordinate descent as scikit-learn's) with this alpha."""

    def __init__(self, alpha=_LIME.lime_alpha, **kwargs):
        if kwargs:
            raise _lib.ArgumentError("cattr: SkLearnLasso: only alpha is supported, not %s" % sorted(kwargs))
        self.alpha = float(alpha)


class _ExpKernel:
    def __init__(self, distance_mode, kernel_width):
        if distance_mode not in ("cosine", "euclidean"):
            raise _lib.ArgumentError("cattr: distance_mode '%s' is not one of cosine, euclidean" % distance_mode)
        self.distance_mode = distance_mode
        self.kernel_width = float(kernel_width)

    def __call__(self, original_inp, perturbed_inp, perturbed_interpretable_inp, **kwargs):
        a = np.asarray(to_numpy(original_inp), dtype=np.float64).reshape(-1)
        b = np.asarray(to_numpy(perturbed_inp), dtype=np.float64).reshape(-1)
        if self.distance_mode == "cosine":
            d = 1.0 - float(a @ b) / max(float(np.linalg.norm(a) * np.linalg.norm(b)), 1e-8)
        else:
            d = float(np.linalg.norm(a - b))
        return float(np.exp(-d * d / (2.0 * self.kernel_width ** 2)))


def get_exp_kernel_similarity_function(distance_mode="cosine", kernel_width=_LIME.kernel_width):
    """Captum's exponential kernel exp(-d^2 / (2 width^2)) on the cosine or euclidean distance; cattr recognises
    the returned function and computes the kernel itself."""
    return _ExpKernel(distance_mode, kernel_width)


def default_perturb_func(original_inp, **kwargs):
    """Captum's default Lime perturbation: each interpretable feature kept (1) or not (0) with probability 1/2, drawn
    with torch's generator (as Captum). Inside the engine (cattr's components) the samples are drawn there."""
    import torch

    probs = torch.ones(1, int(kwargs["num_interp_features"])) * 0.5
    return torch.bernoulli(probs).long()


def default_from_interp_rep_transform(curr_sample, original_inputs, **kwargs):
    """Captum's default map from an interpretable sample to the input: each element of a kept feature is the input's,
    the others the baseline's (kwargs feature_mask and baselines)."""
    mask, base = kwargs["feature_mask"], kwargs["baselines"]
    if not isinstance(mask, (tuple, list)):
        keep = curr_sample[0][mask].bool()
        return keep.to(original_inputs.dtype) * original_inputs + (~keep).to(original_inputs.dtype) * base
    keep = [curr_sample[0][m].bool() for m in mask]
    return tuple(k.to(x.dtype) * x + (~k).to(x.dtype) * b for k, x, b in zip(keep, original_inputs, base))


class _Python(Exception):
    """A Lime component that only Python can run (the loop of _pylime.py then)."""


def _captum_fn(f, name):
    return callable(f) and getattr(f, "__name__", None) == name and \
        str(getattr(f, "__module__", "")).startswith("captum.")


def _native_model(m):
    """The alpha of a Lasso the engine fits: cattr's SkLearnLasso, or Captum's with no argument but alpha."""
    if isinstance(m, SkLearnLasso):
        return m.alpha
    if type(m).__name__ == "SkLearnLasso" and type(m).__module__.startswith("captum."):
        kw = dict(getattr(m, "construct_kwargs", {}) or {})
        if set(kw) <= {"alpha"}:
            return float(kw.get("alpha", 1.0))
    raise _Python()


def _native_kernel(f):
    """(euclidean, width) of an exponential kernel the engine computes: cattr's, or the one Captum's
    get_exp_kernel_similarity_function returns."""
    if isinstance(f, _ExpKernel):
        return f.distance_mode == "euclidean", f.kernel_width
    if _captum_fn(f, "default_exp_kernel") and f.__closure__:
        env = dict(zip(f.__code__.co_freevars, (c.cell_contents for c in f.__closure__)))
        if env.get("distance_mode") in ("cosine", "euclidean") and "kernel_width" in env:
            return env["distance_mode"] == "euclidean", float(env["kernel_width"])
    raise _Python()


def _lime_fields(interpretable_model, similarity_func, perturb_func):
    """The engine's fields for cattr's (or Captum's standard) components; _Python when one is a Python function."""
    f = {}
    if interpretable_model is not None:
        f["lime_alpha"] = _native_model(interpretable_model)
    if similarity_func is not None:
        euclid, width = _native_kernel(similarity_func)
        f["lime_euclidean"] = 1 if euclid else 0
        f["kernel_width"] = width
    if perturb_func not in (None, default_perturb_func) and not _captum_fn(perturb_func, "default_perturb_func"):
        raise _Python()
    return f


class Lime(Attribution):
    """Captum's Lime: Lasso (SkLearnLasso(alpha), default alpha 0.01) fitted on float32 data, exponential kernel
    (get_exp_kernel_similarity_function(distance_mode, kernel_width), default cosine, width 1). Other interpretable
    models, similarity or perturbation functions (Python callables) are not supported."""

    _captum_name = "Lime"
    _promotes_int_inputs = True

    def __init__(self, forward_func, interpretable_model=None, similarity_func=None, perturb_func=None):
        super().__init__(forward_func)
        self._py = None
        try:
            self._lime = _lime_fields(interpretable_model, similarity_func, perturb_func)
        except _Python:  # a Python component: the loop runs in Python, the forward passes in cattr (_pylime.py)
            self._py = self._python_loop(interpretable_model, similarity_func, perturb_func, True,
                                         default_from_interp_rep_transform, None)

    def _python_loop(self, model, similarity_func, perturb_func, interp_space, from_interp, to_interp):
        from ._pylime import LimeLoop

        if model is None or isinstance(model, SkLearnLasso):
            raise _lib.ArgumentError("cattr: Lime with Python components needs an interpretable model that fits in "
                                     "Python (one of captum._utils.models, e.g. SkLearnLasso(alpha=0.01)), not "
                                     "cattr.attr.SkLearnLasso")
        return LimeLoop(self, model, similarity_func or get_exp_kernel_similarity_function(),
                        perturb_func or default_perturb_func, interp_space,
                        from_interp or default_from_interp_rep_transform, to_interp)

    def _run(self, inputs, fields, *a, **k):
        return Attribution._run(self, inputs, dict(fields, **getattr(self, "_lime", {})), *a, **k)

    def attribute(self, inputs, baselines=None, target=None, additional_forward_args=None, feature_mask=None,
                  n_samples=_LIME.n_samples, perturbations_per_eval=None, return_input_shape=True,
                  show_progress=False, **kw):
        if getattr(self, "_py", None) is not None:
            return self._py.lime(inputs, baselines, target, additional_forward_args, feature_mask, n_samples,
                                 perturbations_per_eval or 1, return_input_shape, show_progress, **kw)
        res = self._run(inputs, dict(n_samples=n_samples, perturbations_per_eval=perturbations_per_eval,
                                     return_coefficients=0 if return_input_shape else 1),
                        baselines, target, additional_forward_args, feature_mask, extra=kw, progress=show_progress, int_inputs_ok=True)
        if not return_input_shape:
            attrs, d, _, torch_out = res
            return self._conv(attrs[0], torch_out)
        return self._result(res, False)


class KernelShap(Lime):
    _captum_name = "KernelShap"

    def __init__(self, forward_func):
        Attribution.__init__(self, forward_func)

    def attribute(self, inputs, baselines=None, target=None, additional_forward_args=None, feature_mask=None,
                  n_samples=_KS.n_samples, perturbations_per_eval=None, return_input_shape=True, show_progress=False,
                  **kw):
        return Lime.attribute(self, inputs, baselines, target, additional_forward_args, feature_mask, n_samples,
                              perturbations_per_eval, return_input_shape, show_progress, **kw)


class LimeBase(Lime):
    """Captum's LimeBase with Captum's own building blocks (SkLearnLasso, get_exp_kernel_similarity_function,
    default_perturb_func with perturb_interpretable_space=True, default_from_interp_rep_transform): returns the
    interpretable model's coefficients, [batch, num_interp_features]. `baselines` and `feature_mask` are passed
    as keyword arguments, as Captum passes them to those functions."""

    _captum_name = "Lime"

    def __init__(self, forward_func, interpretable_model, similarity_func, perturb_func,
                 perturb_interpretable_space, from_interp_rep_transform, to_interp_rep_transform):
        standard = perturb_interpretable_space and to_interp_rep_transform is None and (
            from_interp_rep_transform in (None, default_from_interp_rep_transform) or
            _captum_fn(from_interp_rep_transform, "default_from_interp_rep_transform"))
        Lime.__init__(self, forward_func, interpretable_model, similarity_func, perturb_func)
        if not standard:  # Lime.__init__ may have made a loop with Lime's transforms: LimeBase's own replace them
            self._py = self._python_loop(interpretable_model, similarity_func, perturb_func,
                                         perturb_interpretable_space, from_interp_rep_transform,
                                         to_interp_rep_transform)

    def attribute(self, inputs, target=None, additional_forward_args=None, n_samples=50, perturbations_per_eval=None,
                  show_progress=False, baselines=None, feature_mask=None, num_interp_features=None, **kw):
        if self._py is not None:
            extra = {k: v for k, v in dict(baselines=baselines, feature_mask=feature_mask,
                                           num_interp_features=num_interp_features).items() if v is not None}
            extra.update(kw)
            return self._py.base(inputs, target, additional_forward_args, n_samples, perturbations_per_eval or 1,
                                 show_progress, **extra)
        res = self._run(inputs, dict(n_samples=n_samples, perturbations_per_eval=perturbations_per_eval,
                                     return_coefficients=1),
                        baselines, target, additional_forward_args, feature_mask, extra=kw, progress=show_progress)
        attrs, d, _, torch_out = res
        coef = attrs[0]
        if num_interp_features is not None and coef.shape[-1] != num_interp_features:
            raise _lib.ArgumentError("cattr: LimeBase: the feature mask has %d features, num_interp_features is %d" %
                             (coef.shape[-1], num_interp_features))
        return self._conv(coef, torch_out)


_NT = _defaults("NoiseTunnel") if lib.cattr_method_from_name(b"NoiseTunnel") >= 0 else _defaults("Saliency")


class NoiseTunnel:
    """NoiseTunnel(attribution_method): smoothgrad, smoothgrad_sq or vargrad around any cattr.attr method object
    (the noise is drawn by cattr's generator, or given with _draws=)."""

    def __init__(self, attribution_method):
        if not isinstance(attribution_method, Attribution):
            raise TypeError("cattr: NoiseTunnel takes an attribution object of cattr.attr")
        self.attribution_method = attribution_method
        self.is_delta_supported = attribution_method.has_convergence_delta()
        self.forward_func = attribution_method.forward_func

    @property
    def multiplies_by_inputs(self):
        return self.attribution_method.multiplies_by_inputs

    def has_convergence_delta(self):
        return self.is_delta_supported

    def attribute(self, inputs, nt_type="smoothgrad", nt_samples=_NT.nt_samples, nt_samples_batch_size=None,
                  stdevs=_NT.stdevs, draw_baseline_from_distrib=False, **kwargs):
        nt = dict(nt_type=nt_type, nt_samples=nt_samples, nt_samples_batch_size=nt_samples_batch_size,
                  stdevs=stdevs, draw_baseline_from_distrib=1 if draw_baseline_from_distrib else 0)
        return self.attribution_method.attribute(inputs, _nt=nt, **kwargs)


class DataLoaderAttribution(Attribution):
    """Captum's DataLoaderAttribution(FeatureAblation(forward_func)): each feature (a feature_mask with batch dim 1,
    shared by every batch of `dataloader`, any iterable of tensors or tuples of tensors) is ablated in all batches at
    once, and the attributed quantity is reduce() of the forward function's outputs over the batches (default: their
    concatenation), through to_metric() when given. Input roles as Captum's InputRole: 0 attributed, 1 forwarded, 2
    neither (given to reduce only). With the default reduce and no to_metric the whole dataset is one native call;
    otherwise the dataloader loop runs in Python as Captum's does (a host-function model, _callback.py), its forward
    passes and arithmetic in torch, the ablations and sums in cattr."""

    _captum_name = "FeatureAblation"

    def __init__(self, attr_method):
        if type(attr_method) is not FeatureAblation:
            raise _lib.ArgumentError("cattr: DataLoaderAttribution supports FeatureAblation only")
        super().__init__(attr_method.forward_func)
        self.attr_method = attr_method

    def attribute(self, dataloader, input_roles=None, baselines=None, feature_mask=None, reduce=None, to_metric=None,
                  perturbations_per_pass=1, show_progress=False, return_input_shape=True, **kw):
        first = next(iter(dataloader), None)
        if first is None:
            raise _lib.ArgumentError("cattr: DataLoaderAttribution: the dataloader gave no batch")
        was_tuple = isinstance(first, (tuple, list))
        n = len(first) if was_tuple else 1
        roles = tuple(input_roles) if input_roles else (0,) * n
        if len(roles) != n or any(r not in (0, 1, 2) for r in roles) or 0 not in roles:
            raise _lib.ArgumentError("cattr: DataLoaderAttribution: input_roles must hold one role (0: attributed, 1: "
                                     "forwarded, 2: neither) per element of a batch (%d), at least one of them 0" % n)
        # a cattr Model: the whole dataset is one native call (one traversal). A PyTorch forward function with
        # perturbations_per_pass > 1 asks for Captum's traversals (ceil(features / per_pass) passes over the data,
        # each holding per_pass accumulations), and reduce / to_metric / input role 2 / return_input_shape=False for
        # Captum's loop
        default = reduce is None and to_metric is None and return_input_shape and 2 not in roles and not kw
        if self._torch is None:
            if not default:
                raise _lib.ArgumentError("cattr: DataLoaderAttribution over a cattr Model takes the default reduce, no "
                                         "to_metric, input roles 0 and 1 and return_input_shape=True (the others "
                                         "need a PyTorch forward function)")
            return self._whole_dataset(dataloader, roles, baselines, feature_mask, perturbations_per_pass,
                                       show_progress)
        if default and perturbations_per_pass == 1:
            return self._whole_dataset(dataloader, roles, baselines, feature_mask, perturbations_per_pass,
                                       show_progress)
        return self._loop(dataloader, first, was_tuple, roles, baselines, feature_mask, reduce, to_metric,
                          perturbations_per_pass, show_progress, return_input_shape, kw)

    def _whole_dataset(self, dataloader, roles, baselines, feature_mask, perturbations_per_pass, show_progress):
        batches = [b if isinstance(b, (tuple, list)) else (b,) for b in dataloader]
        n = len(batches[0])
        torch_out = _is_torch(batches[0][0])
        cols = [np.concatenate([to_numpy(b[i]) for b in batches]) for i in range(n)]
        # Captum ablates an attributed input as x * mask + baseline * (1 - mask), a float mask: in float
        inputs = tuple(c if c.dtype.kind == "f" else c.astype(np.float32) for c, r in zip(cols, roles) if r == 0)
        extra = tuple(c for c, r in zip(cols, roles) if r == 1)
        if torch_out:
            import torch
            inputs = tuple(torch.from_numpy(c) for c in inputs)
        res = self._run(inputs, dict(perturbations_per_eval=perturbations_per_pass), baselines, None,
                        extra or None, feature_mask, progress=show_progress, int_inputs_ok=True)
        attrs, _, _, t = res
        return tuple(self._conv(a, t) for a in attrs)

    def _loop(self, dataloader, first, was_tuple, roles, baselines, feature_mask, reduce, to_metric, per_pass,
              show_progress, return_input_shape, kw):
        import torch
        from ._callback import callback_model

        if kw:
            raise TypeError("cattr: DataLoaderAttribution.attribute() got unexpected keyword arguments: %s"
                            % ", ".join(sorted(kw)))
        first = tuple(first) if was_tuple else (first,)
        attr_in = [x for x, r in zip(first, roles) if r == 0]
        na = len(attr_in)
        # baselines: one per attributed input, a number or a tensor with batch dim 1
        if baselines is None:
            bases = (0,) * na
        else:
            bases = tuple(baselines) if isinstance(baselines, (tuple, list)) else (baselines,)
        if len(bases) != na:
            raise _lib.ArgumentError("cattr: DataLoaderAttribution: %d baselines for %d attributed inputs"
                                     % (len(bases), na))
        bases = tuple(b if _is_scalar(b) or torch.is_tensor(b) else torch.as_tensor(np.asarray(b)) for b in bases)
        for k, b in enumerate(bases):
            if torch.is_tensor(b) and (b.dim() == 0 or b.shape[0] != 1):
                raise _lib.ArgumentError("cattr: DataLoaderAttribution: baselines[%d] has shape %s; its first dim must "
                                         "be 1 (one baseline for every batch)" % (k, tuple(b.shape)))
        # feature masks: batch dim 1; by default every element its own feature, numbered across the inputs
        if feature_mask is None:
            masks, start = [], 0
            for x in attr_in:
                cnt = int(np.prod(x.shape[1:], dtype=np.int64))
                masks.append(torch.arange(start, start + cnt).reshape((1,) + tuple(x.shape[1:])))
                start += cnt
        else:
            masks = list(feature_mask) if isinstance(feature_mask, (tuple, list)) else [feature_mask]
            masks = [m if torch.is_tensor(m) else torch.as_tensor(np.asarray(m)) for m in masks]
        if len(masks) != na:
            raise _lib.ArgumentError("cattr: DataLoaderAttribution: %d feature masks for %d attributed inputs"
                                     % (len(masks), na))
        for k, m in enumerate(masks):
            if m.dim() == 0 or m.shape[0] != 1:
                raise _lib.ArgumentError("cattr: DataLoaderAttribution: feature_mask[%d] has shape %s; its first dim "
                                         "must be 1 (one mask for every batch)" % (k, tuple(m.shape)))
        n_feat = int(max(int(m.max()) for m in masks if m.numel())) + 1
        owners = [set(int(v) for v in torch.unique(m).tolist()) for m in masks]
        if reduce is None:
            def reduce(acc, out, _inputs):
                return out if acc is None else torch.cat([acc, out])
        fwd = self.forward_func
        probe = []

        def dataset_metric(ind):
            """The metric of the dataset for each row of `ind` ([k, n_feat], 0 where a feature is ablated)."""
            ind = torch.as_tensor(ind)
            if ind.shape[0] == 1 and bool((ind == 1).all()) and probe:  # the probe's pass, asked again
                return probe[0]
            pmasks = []
            for row in ind:
                off = {f for f in range(n_feat) if not row[f]}
                pmasks.append(tuple(row[m] if owners[k] & off else None for k, m in enumerate(masks)))
            acc = [None] * len(pmasks)
            for batch in dataloader:
                batch = tuple(batch) if was_tuple else (batch,)
                for j, pm in enumerate(pmasks):
                    pert, a = [], 0
                    for x, r in zip(batch, roles):
                        if r != 0:
                            pert.append(x)
                            continue
                        pert.append(x if pm[a] is None else x * pm[a] + bases[a] * (1 - pm[a]))
                        a += 1
                    out = fwd(*[x for x, r in zip(pert, roles) if r != 2])
                    acc[j] = reduce(acc[j], out, tuple(pert))
            res = [to_metric(a) if to_metric is not None else a for a in acc]
            for r in res:
                if not torch.is_tensor(r):
                    raise _lib.ArgumentError("cattr: DataLoaderAttribution: the metric to attribute must be a tensor, "
                                             "not %s" % type(r).__name__)
            return torch.stack(res, 0)

        ones = torch.ones((1, n_feat), dtype=torch.float32)
        probe.append(dataset_metric(ones))  # the unablated pass: the shape rule's probe and the method's reference
        model = callback_model(dataset_metric, (ones,), batch_output=True, name="DataLoaderAttribution's forward")
        unique = FeatureAblation(model).attribute(ones, perturbations_per_eval=per_pass, show_progress=show_progress)
        if not return_input_shape:
            return unique
        lead = tuple(unique.shape[:-1])
        out = []
        for x, m in zip(attr_in, masks):
            idx = m.expand(lead + tuple(x.shape[1:])).to(torch.int64)
            src = unique.reshape(lead + (1,) * (x.dim() - 2) + (n_feat,)).expand(lead + tuple(x.shape[1:-1]) +
                                                                                 (n_feat,)) \
                if x.dim() > 2 else unique
            out.append(torch.gather(src, -1, idx))
        return tuple(out) if was_tuple else out[0]

    def attribute_future(self, *args, **kwargs):
        raise NotImplementedError("attribute_future is not implemented for DataLoaderAttribution")


# =================================================================================================================
# layer methods
# =================================================================================================================

class LayerAttribution(Attribution):
    """Base of the layer methods: `layer` is a PyTorch module path ("conv2", "layer4.1.conv2") or an ONNX value
    name; a list of them where Captum takes a list of layers (the result is then a list); a tuple of value names
    for one module with several output tensors (the result is then a tuple)."""

    _layer_method = True

    def __init__(self, forward_func, layer, device_ids=None, **ctor):
        self._torch = _torch_forward(forward_func)
        layer = self._layer_path(layer)
        ok = isinstance(layer, str) or (
            isinstance(layer, (list, tuple)) and layer and all(
                isinstance(x, str) or (isinstance(layer, list) and isinstance(x, tuple) and x and
                                       all(isinstance(y, str) for y in x)) for x in layer))
        if not ok:
            raise TypeError("cattr: layer must be a module path or value name (str), or a list of them")
        if len(_flat_layers(layer)) > _lib.MAX_OUTPUTS:
            raise _lib.ArgumentError("cattr: at most %d layer tensors" % _lib.MAX_OUTPUTS)
        super().__init__(forward_func, layer=layer, **ctor)
        self.layer = layer

    def _with_layer(self, layer):
        """The same method with the same forward function and options at another layer (TCAV's per-layer
        attributions with a caller's layer method)."""
        import copy

        other = copy.copy(self)
        other.layer = other._layer_path(layer)
        other._ctor = dict(self._ctor, layer=other.layer)
        other._explainers = {}
        return other

    def _layer_path(self, layer):
        """A layer argument with torch modules (of a PyTorch forward function) turned into their module paths."""
        if isinstance(layer, list):
            return [self._layer_path(x) for x in layer]
        if isinstance(layer, tuple):
            return tuple(self._layer_path(x) for x in layer)
        if self._torch is not None and not isinstance(layer, str) and not isinstance(layer, ModuleRef):
            path = self._torch.use_layer(layer)
            if path is None:
                raise _lib.ArgumentError("cattr: the layer %s is not a module of the forward function (nor reached by it)"
                                 % type(layer).__name__)
            return path
        return layer_name(layer)

    @staticmethod
    def interpolate(layer_attribution, interpolate_dims, interpolate_mode="nearest"):
        """Captum's LayerAttribution.interpolate: upsamples [N, C, *spatial] attributions to interpolate_dims
        (nearest, or bilinear / linear / bicubic through torch when available)."""
        torch_in = _is_torch(layer_attribution)
        if torch_in or interpolate_mode != "nearest":
            import torch
            import torch.nn.functional as F

            t = layer_attribution if torch_in else torch.from_numpy(np.ascontiguousarray(layer_attribution))
            out = F.interpolate(t, interpolate_dims, mode=interpolate_mode)
            return out if torch_in else out.numpy()
        a = np.asarray(layer_attribution)
        dims = (interpolate_dims,) if isinstance(interpolate_dims, numbers.Integral) else tuple(interpolate_dims)
        nsp = a.ndim - 2
        if len(dims) == 1 and nsp > 1:
            dims = dims * nsp
        if len(dims) != nsp:
            raise _lib.ArgumentError("cattr: interpolate_dims has %d sizes for %d spatial dims" % (len(dims), nsp))
        idx = []
        for k, out_n in enumerate(dims):
            in_n = a.shape[2 + k]
            # torch's nearest: src = floor(dst * in / out)
            idx.append(np.minimum((np.arange(out_n) * (in_n / out_n)).astype(np.int64), in_n - 1))
        out = a
        for k, ix in enumerate(idx):
            out = np.take(out, ix, axis=2 + k)
        return np.ascontiguousarray(out)


class LayerActivation(LayerAttribution):
    _captum_name = "LayerActivation"
    _multiplies = True

    def attribute(self, inputs, additional_forward_args=None, attribute_to_layer_input=False, **kw):
        res = self._run(inputs, dict(attribute_to_layer_input=int(bool(attribute_to_layer_input))), None, None,
                        additional_forward_args, extra=kw, int_inputs_ok=True)
        return self._layer_result(res, False)


class LayerGradientXActivation(LayerAttribution):
    _captum_name = "LayerGradientXActivation"

    def __init__(self, forward_func, layer, device_ids=None, multiply_by_inputs=True):
        super().__init__(forward_func, layer, device_ids, multiply_by_inputs=1 if multiply_by_inputs else 0)

    def attribute(self, inputs, target=None, additional_forward_args=None, attribute_to_layer_input=False,
                  grad_kwargs=None, **kw):
        _unsupported("grad_kwargs", grad_kwargs)
        res = self._run(inputs, dict(attribute_to_layer_input=int(bool(attribute_to_layer_input))), None, target,
                        additional_forward_args, extra=kw, int_inputs_ok=True)
        return self._layer_result(res, False)


class LayerGradCam(LayerAttribution):
    _captum_name = "LayerGradCam"

    def attribute(self, inputs, target=None, additional_forward_args=None, attribute_to_layer_input=False,
                  relu_attributions=False, attr_dim_summation=True, grad_kwargs=None, **kw):
        _unsupported("grad_kwargs", grad_kwargs)
        res = self._run(inputs, dict(attribute_to_layer_input=int(bool(attribute_to_layer_input)),
                                     relu_attributions=int(bool(relu_attributions)),
                                     attr_dim_summation=int(bool(attr_dim_summation))),
                        None, target, additional_forward_args, extra=kw, int_inputs_ok=True)
        return self._layer_result(res, False)


class InternalInfluence(LayerAttribution):
    _captum_name = "InternalInfluence"

    def attribute(self, inputs, baselines=None, target=None, additional_forward_args=None, n_steps=_IG.n_steps,
                  method=_quad_name(_IG), internal_batch_size=None, attribute_to_layer_input=False, grad_kwargs=None,
                  **kw):
        _unsupported("grad_kwargs", grad_kwargs)
        res = self._run(inputs, dict(n_steps=n_steps, method=method, internal_batch_size=internal_batch_size,
                                     attribute_to_layer_input=int(bool(attribute_to_layer_input))),
                        baselines, target, additional_forward_args, extra=kw)
        return self._layer_result(res, False)


class LayerConductance(LayerAttribution):
    _captum_name = "LayerConductance"
    _multiplies = True

    def has_convergence_delta(self):
        return True

    def attribute(self, inputs, baselines=None, target=None, additional_forward_args=None, n_steps=_IG.n_steps,
                  method=_quad_name(_IG), internal_batch_size=None, return_convergence_delta=False,
                  attribute_to_layer_input=False, grad_kwargs=None, **kw):
        _unsupported("grad_kwargs", grad_kwargs)
        res = self._run(inputs, dict(n_steps=n_steps, method=method, internal_batch_size=internal_batch_size,
                                     attribute_to_layer_input=int(bool(attribute_to_layer_input))),
                        baselines, target, additional_forward_args, want_delta=return_convergence_delta, extra=kw)
        return self._layer_result(res, return_convergence_delta)


class LayerIntegratedGradients(LayerAttribution):
    _captum_name = "LayerIntegratedGradients"

    def __init__(self, forward_func, layer, device_ids=None, multiply_by_inputs=True):
        super().__init__(forward_func, layer, device_ids, multiply_by_inputs=1 if multiply_by_inputs else 0)

    def has_convergence_delta(self):
        return True

    def attribute(self, inputs, baselines=None, target=None, additional_forward_args=None, n_steps=_IG.n_steps,
                  method=_quad_name(_IG), internal_batch_size=None, return_convergence_delta=False,
                  attribute_to_layer_input=False, grad_kwargs=None, delta_tol=None, max_steps=None, **kw):
        """Captum's LayerIntegratedGradients.attribute; n_steps="auto", delta_tol and max_steps as
        IntegratedGradients.attribute's (self.n_steps_used tells the steps of the last call)."""
        _unsupported("grad_kwargs", grad_kwargs)
        f = _steps_fields(n_steps, method, internal_batch_size, delta_tol, max_steps)
        f["attribute_to_layer_input"] = int(bool(attribute_to_layer_input))
        res = self._run(inputs, f, baselines, target, additional_forward_args, want_delta=return_convergence_delta,
                        extra=kw, int_inputs_ok=True)
        return self._layer_result(res, return_convergence_delta)


class LayerDeepLift(_CustomDeepLift, LayerAttribution):
    _captum_name = "LayerDeepLift"

    def __init__(self, model, layer, multiply_by_inputs=True):
        super().__init__(model, layer, None, multiply_by_inputs=1 if multiply_by_inputs else 0)

    def has_convergence_delta(self):
        return True

    def attribute(self, inputs, baselines=None, target=None, additional_forward_args=None,
                  return_convergence_delta=False, attribute_to_layer_input=False, custom_attribution_func=None,
                  grad_kwargs=None, **kw):
        _unsupported("grad_kwargs", grad_kwargs)
        if custom_attribution_func is not None:
            return self._custom(inputs, baselines, target, additional_forward_args, custom_attribution_func,
                                return_convergence_delta, kw, layer=True,
                                to_layer_input=bool(attribute_to_layer_input),
                                shap=self._captum_name == "LayerDeepLiftShap")
        res = self._run(inputs, dict(attribute_to_layer_input=int(bool(attribute_to_layer_input))), baselines,
                        target, additional_forward_args, want_delta=return_convergence_delta, extra=kw)
        return self._layer_result(res, return_convergence_delta)


class LayerDeepLiftShap(LayerDeepLift):
    _captum_name = "LayerDeepLiftShap"

    def attribute(self, inputs, baselines, target=None, additional_forward_args=None, return_convergence_delta=False,
                  attribute_to_layer_input=False, custom_attribution_func=None, **kw):
        return LayerDeepLift.attribute(self, inputs, baselines, target, additional_forward_args,
                                       return_convergence_delta, attribute_to_layer_input, custom_attribution_func,
                                       **kw)


class LayerGradientShap(LayerAttribution):
    _captum_name = "LayerGradientShap"
    _floats_int_inputs = True

    def __init__(self, forward_func, layer, device_ids=None, multiply_by_inputs=True):
        super().__init__(forward_func, layer, device_ids, multiply_by_inputs=1 if multiply_by_inputs else 0)

    def has_convergence_delta(self):
        return True

    def attribute(self, inputs, baselines, n_samples=_GS.n_samples, stdevs=_GS.stdevs, target=None,
                  additional_forward_args=None, return_convergence_delta=False, attribute_to_layer_input=False,
                  **kw):
        res = self._run(inputs, dict(n_samples=n_samples, stdevs=stdevs,
                                     attribute_to_layer_input=int(bool(attribute_to_layer_input))),
                        baselines, target, additional_forward_args, want_delta=return_convergence_delta, extra=kw,
                        int_inputs_ok=True)
        return self._layer_result(res, return_convergence_delta)


class LayerFeatureAblation(LayerAttribution):
    _captum_name = "LayerFeatureAblation"
    _multiplies = True

    def attribute(self, inputs, layer_baselines=None, target=None, additional_forward_args=None, layer_mask=None,
                  attribute_to_layer_input=False, perturbations_per_eval=None, **kw):
        res = self._run(inputs, dict(attribute_to_layer_input=int(bool(attribute_to_layer_input)),
                                     perturbations_per_eval=perturbations_per_eval),
                        None, target, additional_forward_args, extra=kw, layer_mask=layer_mask,
                        layer_baseline=layer_baselines, int_inputs_ok=True)
        return self._layer_result(res, False)


class LayerFeaturePermutation(LayerAttribution):
    _captum_name = "LayerFeaturePermutation"
    _multiplies = True

    def attribute(self, inputs, target=None, additional_forward_args=None, layer_mask=None,
                  perturbations_per_eval=None, **kw):
        res = self._run(inputs, dict(perturbations_per_eval=perturbations_per_eval), None, target,
                        additional_forward_args, extra=kw, layer_mask=layer_mask, int_inputs_ok=True)
        return self._layer_result(res, False)


class LayerLRP(LayerAttribution):
    """Captum's LayerLRP: LRP's rules (a torch model's as in LRP), the relevance at the layer's output, or with
    attribute_to_layer_input at its input (the gradient there times the input, as the layer's hook records it)."""
    _captum_name = "LayerLRP"
    _multiplies = True

    def __init__(self, model, layer):
        super().__init__(model, layer)
        if self._torch is not None:
            _torch.lrp_check_rules(self._torch.root)  # Captum: TypeError for a rule that is not a PropagationRule

    def has_convergence_delta(self):
        return True

    def attribute(self, inputs, target=None, additional_forward_args=None, return_convergence_delta=False,
                  attribute_to_layer_input=False, verbose=False, **kw):
        fields = dict(attribute_to_layer_input=int(bool(attribute_to_layer_input)))
        if self._torch is None:
            res = self._run(inputs, fields, None, target, additional_forward_args,
                            want_delta=return_convergence_delta, extra=kw)
        else:
            with _torch.keep_training_modes(self._torch.root):  # the export leaves every module's mode as it was
                kw = LRP._torch_rules(self, inputs, additional_forward_args, kw)
                res = self._run(inputs, fields, None, target, additional_forward_args,
                                want_delta=return_convergence_delta, extra=kw)
        return self._layer_result(res, return_convergence_delta)


# =================================================================================================================
# neuron methods
# =================================================================================================================

class NeuronAttribution(LayerAttribution):
    """Base of the neuron methods: attributions of one neuron of `layer` (neuron_selector: an int, a tuple of ints
    and slices, or neuron_sum(dims)) to the inputs."""

    _layer_method = False

    # the method a neuron method is when its selector is a function: the primary method on the derived function
    # `selector(layer value)` (NeuronConductance has none: it needs the layer)
    _primary = None

    def _nrun(self, inputs, neuron_selector, fields, attribute_to_neuron_input, kw, **rest):
        if callable(neuron_selector) and not isinstance(neuron_selector, neuron_sum) and self._torch is not None:
            return self._selector_fn_run(inputs, neuron_selector, fields, attribute_to_neuron_input, kw, rest)
        fields = dict(fields, neuron_selector=neuron_selector,
                      attribute_to_layer_input=int(bool(attribute_to_neuron_input)))
        return self._result(self._run(inputs, fields, extra=kw, int_inputs_ok=self._int_inputs, **rest), False)

    _int_inputs = False  # NeuronFeatureAblation ablates integer inputs

    def _selector_fn_run(self, inputs, selector, fields, to_input, kw, rest):
        """A neuron_selector given as a Python function (`lambda x: x[:, 0]`, `lambda x: torch.sum(x, dim=1)`): the
        function from the inputs to selector(the layer's output, or its input) is traced with torch into one model
        (the layer's value computed by the forward function, captured by a hook, then the selector), and the
        neuron method is its primary method with no target: the gradient of, the integrated gradients of, ... that
        value per example, as Captum computes it."""
        import torch

        prim = self._primary
        if prim is None:
            raise _lib.ArgumentError("cattr: %s: a neuron_selector function is not supported (give an int, a tuple "
                                     "of ints and slices, or cattr.attr.neuron_sum(dims))" % self._captum_name)
        layer = self._ctor.get("layer")
        mod = None
        for name, m in self._torch.root.named_modules():
            if name == layer:
                mod = m
        if mod is None or isinstance(layer, (list, tuple)):
            raise _lib.ArgumentError("cattr: a neuron_selector function needs the layer as one torch module")
        key = (id(selector), bool(to_input))
        cache = self.__dict__.setdefault("_selector_methods", {})
        inner = cache.get(key)
        if inner is None:
            fn = self.forward_func

            def derived(*args):
                store = []

                def hook(m, inp, out):
                    # a copy, as Captum's hooks keep: a later in-place op (ReLU(inplace=True)) must not change it
                    v = inp if to_input else out
                    store.append(tuple(t.clone() for t in v) if isinstance(v, tuple) else v.clone())

                h = mod.register_forward_hook(hook)
                try:
                    fn(*args)
                finally:
                    h.remove()
                v = store[0]
                if to_input and isinstance(v, tuple) and len(v) == 1:
                    v = v[0]
                out = selector(v)
                if torch.is_tensor(out) and out.dim() == 0:
                    # one value for the whole batch (`torch.sum(x)`): spread over the examples, which sum to it, so
                    # that its gradient (Captum differentiates the one value) is each example's
                    b = args[0].shape[0]
                    out = out.expand(b) / b
                return out

            derived._cattr_modules = (mod,)
            ctor = {}
            if "multiply_by_inputs" in self._ctor and prim not in (Saliency, GuidedBackprop, Deconvolution,
                                                                  FeatureAblation):
                ctor["multiply_by_inputs"] = bool(self._ctor["multiply_by_inputs"])
            inner = cache[key] = prim(derived, **ctor)
        args = dict(rest)
        for k, v in fields.items():
            if v is not None:
                args[k] = v
        if prim is Saliency:
            args["abs"] = False
        if prim is IntegratedGradients and "method" not in args:
            args["method"] = _quad_name(_defaults(self._captum_name))
        args.update(kw)
        return inner.attribute(inputs, **args)


class NeuronGradient(NeuronAttribution):
    _captum_name = "NeuronGradient"
    _primary = Saliency

    def attribute(self, inputs, neuron_selector, additional_forward_args=None, attribute_to_neuron_input=False,
                  **kw):
        return self._nrun(inputs, neuron_selector, {}, attribute_to_neuron_input, kw,
                          additional_forward_args=additional_forward_args)


class NeuronIntegratedGradients(NeuronAttribution):
    _captum_name = "NeuronIntegratedGradients"
    _primary = IntegratedGradients

    def __init__(self, forward_func, layer, device_ids=None, multiply_by_inputs=True):
        super().__init__(forward_func, layer, device_ids, multiply_by_inputs=1 if multiply_by_inputs else 0)

    def attribute(self, inputs, neuron_selector, baselines=None, additional_forward_args=None, n_steps=_IG.n_steps,
                  method=_quad_name(_IG), internal_batch_size=None, attribute_to_neuron_input=False, **kw):
        return self._nrun(inputs, neuron_selector, dict(n_steps=n_steps, method=method,
                                                        internal_batch_size=internal_batch_size),
                          attribute_to_neuron_input, kw, baselines=baselines,
                          additional_forward_args=additional_forward_args)


_NC = _defaults("NeuronConductance")


class NeuronConductance(NeuronAttribution):
    _captum_name = "NeuronConductance"

    def __init__(self, forward_func, layer, device_ids=None, multiply_by_inputs=True):
        super().__init__(forward_func, layer, device_ids, multiply_by_inputs=1 if multiply_by_inputs else 0)

    def attribute(self, inputs, neuron_selector, baselines=None, target=None, additional_forward_args=None,
                  n_steps=_NC.n_steps, method=_quad_name(_NC), internal_batch_size=None,
                  attribute_to_neuron_input=False, grad_kwargs=None, **kw):
        _unsupported("grad_kwargs", grad_kwargs)
        if callable(neuron_selector) and not isinstance(neuron_selector, neuron_sum) and self._torch is not None:
            return self._selector_fn_conductance(inputs, neuron_selector, baselines, target, additional_forward_args,
                                                 n_steps, method, attribute_to_neuron_input, kw)
        return self._nrun(inputs, neuron_selector, dict(n_steps=n_steps, method=method,
                                                        internal_batch_size=internal_batch_size),
                          attribute_to_neuron_input, kw, baselines=baselines, target=target,
                          additional_forward_args=additional_forward_args)

    def _selector_fn_conductance(self, inputs, selector, baselines, target, add, n_steps, method, to_input, kw):
        """A neuron_selector function: Captum's conductance from two results of the engine at the path's points
        x_k = b + alpha_k (x - b): the layer gradients of the target output (LayerGradientXActivation without the
        multiplication), through the selector (the neuron's share of the output's gradient), times the gradient of
        the selected neuron with respect to the inputs (NeuronGradient with the selector traced after the layer),
        weighted by the quadrature's step sizes and summed over the path, times (x - b)."""
        import torch

        if kw:
            raise TypeError("cattr: NeuronConductance.attribute() with a neuron_selector function got unexpected "
                            "keyword arguments: %s" % ", ".join(sorted(kw)))
        xs, was_tuple = _to_tuple(inputs)
        xs = tuple(x if _is_torch(x) else torch.as_tensor(np.asarray(x)) for x in xs)
        if baselines is None:
            bs = (0.0,) * len(xs)
        else:
            bs, _ = _to_tuple(baselines)
            if len(bs) == 1 and len(xs) > 1:
                bs = bs * len(xs)
        bs = tuple(torch.zeros_like(x) + (b if _is_scalar(b) or _is_torch(b) else torch.as_tensor(np.asarray(b)))
                   for x, b in zip(xs, bs))
        steps, alphas = _quadrature_points(method, int(n_steps))
        n = len(alphas)
        scaled = tuple(torch.cat([b + a * (x - b) for a in alphas], 0).detach() for x, b in zip(xs, bs))
        if _is_torch(target) and target.numel() > 1 or isinstance(target, list):
            target = (target.repeat(n) if _is_torch(target) else list(target) * n)
        if add is not None:
            add = tuple(torch.cat([a] * n, 0) if _is_torch(a) and a.dim() > 0 else a for a in _to_tuple(add)[0])
        layer = self._ctor["layer"]
        grads = LayerGradientXActivation(self.forward_func, layer, multiply_by_inputs=False).attribute(
            scaled, target=target, additional_forward_args=add, attribute_to_layer_input=to_input)
        mid = selector(grads)
        ngrad = NeuronGradient(self.forward_func, layer).attribute(
            scaled, selector, additional_forward_args=add, attribute_to_neuron_input=to_input)
        ngrad = ngrad if isinstance(ngrad, tuple) else (ngrad,)
        rows = scaled[0].shape[0]
        w = torch.as_tensor(steps, dtype=mid.dtype)
        out = []
        for g, x, b in zip(ngrad, xs, bs):
            sg = (g * mid.reshape((rows,) + (1,) * (g.dim() - 1))).reshape(n, -1) * w.reshape(n, 1)
            tot = sg.sum(0).reshape(x.shape)
            out.append(tot * (x - b) if self.multiplies_by_inputs else tot)
        return tuple(out) if was_tuple else out[0]


def _quadrature_points(method, n):
    """Captum's step sizes and points on [0, 1] of the quadrature `method` with n points."""
    if method == "gausslegendre":
        x, wts = np.polynomial.legendre.leggauss(n)
        return (0.5 * wts).tolist(), (0.5 * (1 + x)).tolist()
    kinds = {"riemann_left": (0.0, 1 - 1 / n), "riemann_right": (1 / n, 1.0),
             "riemann_middle": (1 / (2 * n), 1 - 1 / (2 * n)), "riemann_trapezoid": (0.0, 1.0)}
    if method not in kinds or n < 2:
        raise _lib.ArgumentError("cattr: method must be one of gausslegendre, %s, with n_steps > 1 (got %r, %d)"
                                 % (", ".join(sorted(kinds)), method, n))
    steps = [1 / n] * n
    if method == "riemann_trapezoid":
        steps[0] /= 2
        steps[-1] /= 2
    return steps, np.linspace(kinds[method][0], kinds[method][1], n).tolist()


class NeuronDeepLift(_CustomDeepLift, NeuronAttribution):
    _captum_name = "NeuronDeepLift"
    _primary = DeepLift

    def __init__(self, model, layer, multiply_by_inputs=True):
        super().__init__(model, layer, None, multiply_by_inputs=1 if multiply_by_inputs else 0)

    def attribute(self, inputs, neuron_selector, baselines=None, additional_forward_args=None,
                  attribute_to_neuron_input=False, custom_attribution_func=None, **kw):
        if custom_attribution_func is not None:
            return self._custom(inputs, baselines, None, additional_forward_args, custom_attribution_func, False, kw,
                                neuron=neuron_selector, to_layer_input=bool(attribute_to_neuron_input),
                                shap=self._captum_name == "NeuronDeepLiftShap")
        return self._nrun(inputs, neuron_selector, {}, attribute_to_neuron_input, kw, baselines=baselines,
                          additional_forward_args=additional_forward_args)


class NeuronDeepLiftShap(NeuronDeepLift):
    _captum_name = "NeuronDeepLiftShap"
    _primary = DeepLiftShap

    def attribute(self, inputs, neuron_selector, baselines, additional_forward_args=None,
                  attribute_to_neuron_input=False, custom_attribution_func=None, **kw):
        return NeuronDeepLift.attribute(self, inputs, neuron_selector, baselines, additional_forward_args,
                                        attribute_to_neuron_input, custom_attribution_func, **kw)


class NeuronGradientShap(NeuronAttribution):
    _captum_name = "NeuronGradientShap"
    _primary = GradientShap

    def __init__(self, forward_func, layer, device_ids=None, multiply_by_inputs=True):
        super().__init__(forward_func, layer, device_ids, multiply_by_inputs=1 if multiply_by_inputs else 0)

    def attribute(self, inputs, neuron_selector, baselines, n_samples=_GS.n_samples, stdevs=_GS.stdevs,
                  additional_forward_args=None, attribute_to_neuron_input=False, **kw):
        return self._nrun(inputs, neuron_selector, dict(n_samples=n_samples, stdevs=stdevs),
                          attribute_to_neuron_input, kw, baselines=baselines,
                          additional_forward_args=additional_forward_args)


class NeuronGuidedBackprop(NeuronAttribution):
    _captum_name = "NeuronGuidedBackprop"
    _primary = GuidedBackprop

    def attribute(self, inputs, neuron_selector, additional_forward_args=None, attribute_to_neuron_input=False,
                  **kw):
        return self._nrun(inputs, neuron_selector, {}, attribute_to_neuron_input, kw,
                          additional_forward_args=additional_forward_args)


class NeuronDeconvolution(NeuronGuidedBackprop):
    _captum_name = "NeuronDeconvolution"
    _primary = Deconvolution


class NeuronFeatureAblation(NeuronAttribution):
    _captum_name = "NeuronFeatureAblation"
    _int_inputs = True
    _primary = FeatureAblation
    _multiplies = True

    def attribute(self, inputs, neuron_selector, baselines=None, additional_forward_args=None, feature_mask=None,
                  attribute_to_neuron_input=False, perturbations_per_eval=None, **kw):
        return self._nrun(inputs, neuron_selector, dict(perturbations_per_eval=perturbations_per_eval),
                          attribute_to_neuron_input, kw, baselines=baselines,
                          additional_forward_args=additional_forward_args, feature_mask=feature_mask)


# =================================================================================================================
# Captum's attribute methods are wrapped (log_usage, functools.wraps): code that inspects them reaches the function
# itself through __wrapped__ (inspect.getfullargspec(m.attribute.__wrapped__)), so cattr's are wrapped alike
# =================================================================================================================

def _wrapped(f):
    @functools.wraps(f)
    def attribute(*args, **kwargs):
        return f(*args, **kwargs)

    return attribute


for _cls in list(globals().values()):
    if isinstance(_cls, type) and _cls.__module__ == __name__:
        for _meth in ("attribute", "attribute_future"):
            if _meth in vars(_cls) and not hasattr(vars(_cls)[_meth], "__wrapped__"):
                setattr(_cls, _meth, _wrapped(vars(_cls)[_meth]))
del _cls

# Captum's language-model classes, as captum.attr exports them (defined in cattr.llm, which imports this module)
_LLM_NAMES = ("LLMAttribution", "LLMGradientAttribution", "RemoteLLMAttribution", "LLMAttributionResult",
              "TextTokenInput", "TextTemplateInput")
__all__ += list(_LLM_NAMES)


def __getattr__(name):
    if name in _LLM_NAMES:
        from . import llm

        return getattr(llm, name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
