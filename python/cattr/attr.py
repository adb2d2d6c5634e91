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
import numbers
import threading
from collections import namedtuple

import numpy as np

from . import _lib
from ._lib import lib, check
from . import _torch
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
    "DataLoaderAttribution",
]

NodeRule = namedtuple("NodeRule", "node rule epsilon gamma set_bias_to_zero")
NodeRule.__new__.__defaults__ = (1e-9, 0.25, False)
NodeRule.__doc__ = ("A rule for one ONNX node (`_node_rules=`): rule is 'deeplift_nonlinear', 'deeplift_maxpool', "
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
            self._model_ = self._torch.model_for(inputs, _to_tuple(additional_forward_args)[0]
                                                 if additional_forward_args is not None else None, dev)

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
             want_delta=False, extra=None, layer_mask=None, layer_baseline=None, int_inputs_ok=False, progress=False):
        """Runs the method; returns (list of numpy attributions, delta or None, inputs_were_tuple, torch_out)."""
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
        dtype = compute_dtype(arrs)
        fields["_n_inputs"] = len(arrs)
        fields["return_convergence_delta"] = 1 if want_delta else 0
        self._use_model_for(xs, additional_forward_args, extra)
        self._eff_layer = self._effective_layer(fields)[0]
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
            out = _OutArray()
            delta = _lib.TensorP()
            bar = _lib.ProgressBar(_lib.captum_name(type(self).__name__)) if progress else None
            with e.lock:
                e.intr.reporter = bar
                try:
                    e.intr.run(lib.cattr_explainer_run, e.h, ctypes.byref(call), out,
                               ctypes.byref(delta) if want_delta else None)
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

    def _result(self, res, want_delta):
        attrs, d, was_tuple, torch_out = res
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


class IntegratedGradients(Attribution):
    _captum_name = "IntegratedGradients"

    def __init__(self, forward_func, multiply_by_inputs=True):
        super().__init__(forward_func, multiply_by_inputs=1 if multiply_by_inputs else 0)

    def has_convergence_delta(self):
        return True

    def attribute(self, inputs, baselines=None, target=None, additional_forward_args=None, n_steps=_IG.n_steps,
                  method=_quad_name(_IG), internal_batch_size=None, return_convergence_delta=False, **kw):
        res = self._run(inputs, dict(n_steps=n_steps, method=method, internal_batch_size=internal_batch_size),
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


class DeepLift(Attribution):
    _captum_name = "DeepLift"

    def __init__(self, model, multiply_by_inputs=True, eps=_defaults("DeepLift").eps):
        super().__init__(model, multiply_by_inputs=1 if multiply_by_inputs else 0, eps=float(eps))

    def has_convergence_delta(self):
        return True

    def attribute(self, inputs, baselines=None, target=None, additional_forward_args=None,
                  return_convergence_delta=False, custom_attribution_func=None, **kw):
        _unsupported("custom_attribution_func", custom_attribution_func)
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
            raise _lib.ArgumentError("cattr: GuidedGradCam: interpolate_mode '%s' is not supported (nearest)" %
                             interpolate_mode)
        res = self._run(inputs, dict(attribute_to_layer_input=1 if attribute_to_layer_input else 0), None, target,
                        additional_forward_args, extra=kw)
        return self._result(res, False)


class LRP(Attribution):
    _captum_name = "LRP"
    _multiplies = True

    def has_convergence_delta(self):
        return True

    def attribute(self, inputs, target=None, additional_forward_args=None, return_convergence_delta=False,
                  verbose=False, **kw):
        res = self._run(inputs, {}, None, target, additional_forward_args, want_delta=return_convergence_delta,
                        extra=kw)
        return self._result(res, return_convergence_delta)


def _completed_future(value):
    """A torch.futures.Future already holding value (the result of attribute_future)."""
    import torch

    fut = torch.futures.Future()
    fut.set_result(value)
    return fut


class _FutureAttribution:
    """attribute_future for the perturbation methods: the attribution (the forward function may return Futures,
    which are awaited as the model is exported), as a completed Future."""

    def attribute_future(self, *args, **kwargs):
        return _completed_future(self.attribute(*args, **kwargs))


class FeatureAblation(_FutureAttribution, Attribution):
    _captum_name = "FeatureAblation"
    _multiplies = True

    def attribute(self, inputs, baselines=None, target=None, additional_forward_args=None, feature_mask=None,
                  perturbations_per_eval=None, show_progress=False, **kw):
        res = self._run(inputs, dict(perturbations_per_eval=perturbations_per_eval), baselines, target,
                        additional_forward_args, feature_mask, extra=_strip_perturb_kwargs(kw), progress=show_progress)
        return self._result(res, False)


def _strip_perturb_kwargs(kw):
    # FeatureAblation.attribute swallows unknown keywords (**kwargs) in Captum; enable_cross_tensor_attribution is
    # ignored by the Captum commit cattr follows (feature ids are global across inputs)
    kw = dict(kw)
    kw.pop("enable_cross_tensor_attribution", None)
    return kw


class FeaturePermutation(_FutureAttribution, Attribution):
    _captum_name = "FeaturePermutation"
    _multiplies = True

    def __init__(self, forward_func, perm_func=None):
        _unsupported("perm_func", perm_func)
        super().__init__(forward_func)

    def attribute(self, inputs, target=None, additional_forward_args=None, feature_mask=None,
                  perturbations_per_eval=None, show_progress=False, **kw):
        res = self._run(inputs, dict(perturbations_per_eval=perturbations_per_eval), None, target,
                        additional_forward_args, feature_mask, extra=_strip_perturb_kwargs(kw), progress=show_progress)
        return self._result(res, False)


class Occlusion(Attribution):
    _captum_name = "Occlusion"
    _multiplies = True

    def attribute(self, inputs, sliding_window_shapes, strides=None, baselines=None, target=None,
                  additional_forward_args=None, perturbations_per_eval=None, show_progress=False, **kw):
        res = self._run(inputs, dict(sliding_window=sliding_window_shapes, strides=strides,
                                     perturbations_per_eval=perturbations_per_eval),
                        baselines, target, additional_forward_args, extra=kw, progress=show_progress)
        return self._result(res, False)


_SVS = _defaults("ShapleyValueSampling")


class ShapleyValueSampling(_FutureAttribution, Attribution):
    _captum_name = "ShapleyValueSampling"
    _multiplies = True

    def attribute(self, inputs, baselines=None, target=None, additional_forward_args=None, feature_mask=None,
                  n_samples=_SVS.n_samples, perturbations_per_eval=None, show_progress=False, **kw):
        res = self._run(inputs, dict(n_samples=n_samples, perturbations_per_eval=perturbations_per_eval), baselines,
                        target, additional_forward_args, feature_mask, extra=kw, progress=show_progress)
        return self._result(res, False)


class ShapleyValues(_FutureAttribution, Attribution):
    _captum_name = "ShapleyValues"
    _multiplies = True

    def attribute(self, inputs, baselines=None, target=None, additional_forward_args=None, feature_mask=None,
                  perturbations_per_eval=None, show_progress=False, **kw):
        res = self._run(inputs, dict(perturbations_per_eval=perturbations_per_eval), baselines, target,
                        additional_forward_args, feature_mask, extra=kw, progress=show_progress)
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


def default_perturb_func(original_inp, **kwargs):  # pragma: no cover - a marker, run inside cattr
    """Captum's default Lime perturbation (uniform 0/1 interpretable samples): a marker for LimeBase."""
    raise NotImplementedError("cattr computes default_perturb_func itself")


def default_from_interp_rep_transform(curr_sample, original_inputs, **kwargs):  # pragma: no cover - a marker
    """Captum's default map from an interpretable sample to the input (baseline where 0): a marker for LimeBase."""
    raise NotImplementedError("cattr computes default_from_interp_rep_transform itself")


def _lime_fields(interpretable_model, similarity_func, perturb_func):
    f = {}
    if interpretable_model is not None:
        if not isinstance(interpretable_model, SkLearnLasso):
            raise _lib.ArgumentError("cattr: Lime: interpretable_model must be cattr.attr.SkLearnLasso(alpha) (others are not "
                             "supported yet)")
        f["lime_alpha"] = interpretable_model.alpha
    if similarity_func is not None:
        if not isinstance(similarity_func, _ExpKernel):
            raise _lib.ArgumentError("cattr: Lime: similarity_func must come from cattr.attr.get_exp_kernel_similarity_"
                             "function (a Python function cannot run inside cattr)")
        f["lime_euclidean"] = 1 if similarity_func.distance_mode == "euclidean" else 0
        f["kernel_width"] = similarity_func.kernel_width
    if perturb_func not in (None, default_perturb_func):
        raise _lib.ArgumentError("cattr: Lime: only the default perturb_func is supported")
    return f


class Lime(Attribution):
    """Captum's Lime: Lasso (SkLearnLasso(alpha), default alpha 0.01) fitted on float32 data, exponential kernel
    (get_exp_kernel_similarity_function(distance_mode, kernel_width), default cosine, width 1). Other interpretable
    models, similarity or perturbation functions (Python callables) are not supported."""

    _captum_name = "Lime"

    def __init__(self, forward_func, interpretable_model=None, similarity_func=None, perturb_func=None):
        super().__init__(forward_func)
        self._lime = _lime_fields(interpretable_model, similarity_func, perturb_func)

    def _run(self, inputs, fields, *a, **k):
        return Attribution._run(self, inputs, dict(fields, **getattr(self, "_lime", {})), *a, **k)

    def attribute(self, inputs, baselines=None, target=None, additional_forward_args=None, feature_mask=None,
                  n_samples=_LIME.n_samples, perturbations_per_eval=None, return_input_shape=True,
                  show_progress=False, **kw):
        res = self._run(inputs, dict(n_samples=n_samples, perturbations_per_eval=perturbations_per_eval,
                                     return_coefficients=0 if return_input_shape else 1),
                        baselines, target, additional_forward_args, feature_mask, extra=kw, progress=show_progress)
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
        if not perturb_interpretable_space or from_interp_rep_transform not in (
                None, default_from_interp_rep_transform) or to_interp_rep_transform is not None:
            raise _lib.ArgumentError("cattr: LimeBase: only Captum's default interpretable space and transforms are "
                             "supported")
        Lime.__init__(self, forward_func, interpretable_model, similarity_func, perturb_func)

    def attribute(self, inputs, target=None, additional_forward_args=None, n_samples=50, perturbations_per_eval=None,
                  show_progress=False, baselines=None, feature_mask=None, num_interp_features=None, **kw):
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
    """Captum's DataLoaderAttribution(FeatureAblation(model)) with reduce=None and to_metric=None: the attributed
    quantity is the concatenation of the model's outputs over all batches of `dataloader` (any iterable of
    tensors or tuples of tensors), each feature ablated in every batch at once. Returns a tuple (one attribution
    per input), [numel of that output, *input.shape[1:]]."""

    _captum_name = "FeatureAblation"

    def __init__(self, attr_method):
        if type(attr_method) is not FeatureAblation:
            raise _lib.ArgumentError("cattr: DataLoaderAttribution supports FeatureAblation only")
        super().__init__(attr_method.forward_func)
        self.attr_method = attr_method

    def attribute(self, dataloader, input_roles=None, baselines=None, feature_mask=None, reduce=None, to_metric=None,
                  perturbations_per_pass=1, show_progress=False, return_input_shape=True, **kw):
        _unsupported("reduce", reduce)
        _unsupported("to_metric", to_metric)
        if not return_input_shape:
            raise _lib.ArgumentError("cattr: DataLoaderAttribution: return_input_shape=False is not supported")
        batches = [b if isinstance(b, (tuple, list)) else (b,) for b in dataloader]
        if not batches:
            raise _lib.ArgumentError("cattr: DataLoaderAttribution: the dataloader gave no batch")
        n = len(batches[0])
        roles = tuple(input_roles) if input_roles else (0,) * n
        if len(roles) != n or any(r not in (0, 1) for r in roles):
            raise _lib.ArgumentError("cattr: DataLoaderAttribution: input_roles must hold one role (0: attributed, 1: "
                             "forwarded) per element of a batch")
        torch_out = _is_torch(batches[0][0])
        cols = [np.concatenate([to_numpy(b[i]) for b in batches]) for i in range(n)]
        inputs = tuple(c for c, r in zip(cols, roles) if r == 0)
        extra = tuple(c for c, r in zip(cols, roles) if r == 1)
        if torch_out:
            import torch
            inputs = tuple(torch.from_numpy(c) for c in inputs)
        res = self._run(inputs, dict(perturbations_per_eval=perturbations_per_pass), baselines, None,
                        extra or None, feature_mask, extra=kw)
        attrs, _, _, t = res
        return tuple(self._conv(a, t) for a in attrs)


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

    def _layer_path(self, layer):
        """A layer argument with torch modules (of a PyTorch forward function) turned into their module paths."""
        if isinstance(layer, list):
            return [self._layer_path(x) for x in layer]
        if isinstance(layer, tuple):
            return tuple(self._layer_path(x) for x in layer)
        if self._torch is not None and not isinstance(layer, str) and not isinstance(layer, ModuleRef):
            path = self._torch.module_path(layer)
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
                  attribute_to_layer_input=False, grad_kwargs=None, **kw):
        _unsupported("grad_kwargs", grad_kwargs)
        res = self._run(inputs, dict(n_steps=n_steps, method=method, internal_batch_size=internal_batch_size,
                                     attribute_to_layer_input=int(bool(attribute_to_layer_input))),
                        baselines, target, additional_forward_args, want_delta=return_convergence_delta, extra=kw,
                        int_inputs_ok=True)
        return self._layer_result(res, return_convergence_delta)


class LayerDeepLift(LayerAttribution):
    _captum_name = "LayerDeepLift"

    def __init__(self, model, layer, multiply_by_inputs=True):
        super().__init__(model, layer, None, multiply_by_inputs=1 if multiply_by_inputs else 0)

    def has_convergence_delta(self):
        return True

    def attribute(self, inputs, baselines=None, target=None, additional_forward_args=None,
                  return_convergence_delta=False, attribute_to_layer_input=False, custom_attribution_func=None,
                  grad_kwargs=None, **kw):
        _unsupported("custom_attribution_func", custom_attribution_func)
        _unsupported("grad_kwargs", grad_kwargs)
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

    def __init__(self, forward_func, layer, device_ids=None, multiply_by_inputs=True):
        super().__init__(forward_func, layer, device_ids, multiply_by_inputs=1 if multiply_by_inputs else 0)

    def has_convergence_delta(self):
        return True

    def attribute(self, inputs, baselines, n_samples=_GS.n_samples, stdevs=_GS.stdevs, target=None,
                  additional_forward_args=None, return_convergence_delta=False, attribute_to_layer_input=False,
                  **kw):
        res = self._run(inputs, dict(n_samples=n_samples, stdevs=stdevs,
                                     attribute_to_layer_input=int(bool(attribute_to_layer_input))),
                        baselines, target, additional_forward_args, want_delta=return_convergence_delta, extra=kw)
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
    _captum_name = "LayerLRP"
    _multiplies = True

    def __init__(self, model, layer):
        super().__init__(model, layer)

    def has_convergence_delta(self):
        return True

    def attribute(self, inputs, target=None, additional_forward_args=None, return_convergence_delta=False,
                  attribute_to_layer_input=False, verbose=False, **kw):
        res = self._run(inputs, dict(attribute_to_layer_input=int(bool(attribute_to_layer_input))), None, target,
                        additional_forward_args, want_delta=return_convergence_delta, extra=kw)
        return self._layer_result(res, return_convergence_delta)


# =================================================================================================================
# neuron methods
# =================================================================================================================

class NeuronAttribution(LayerAttribution):
    """Base of the neuron methods: attributions of one neuron of `layer` (neuron_selector: an int, a tuple of ints
    and slices, or neuron_sum(dims)) to the inputs."""

    _layer_method = False

    def _nrun(self, inputs, neuron_selector, fields, attribute_to_neuron_input, kw, **rest):
        fields = dict(fields, neuron_selector=neuron_selector,
                      attribute_to_layer_input=int(bool(attribute_to_neuron_input)))
        return self._result(self._run(inputs, fields, extra=kw, **rest), False)


class NeuronGradient(NeuronAttribution):
    _captum_name = "NeuronGradient"

    def attribute(self, inputs, neuron_selector, additional_forward_args=None, attribute_to_neuron_input=False,
                  **kw):
        return self._nrun(inputs, neuron_selector, {}, attribute_to_neuron_input, kw,
                          additional_forward_args=additional_forward_args)


class NeuronIntegratedGradients(NeuronAttribution):
    _captum_name = "NeuronIntegratedGradients"

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
        return self._nrun(inputs, neuron_selector, dict(n_steps=n_steps, method=method,
                                                        internal_batch_size=internal_batch_size),
                          attribute_to_neuron_input, kw, baselines=baselines, target=target,
                          additional_forward_args=additional_forward_args)


class NeuronDeepLift(NeuronAttribution):
    _captum_name = "NeuronDeepLift"

    def __init__(self, model, layer, multiply_by_inputs=True):
        super().__init__(model, layer, None, multiply_by_inputs=1 if multiply_by_inputs else 0)

    def attribute(self, inputs, neuron_selector, baselines=None, additional_forward_args=None,
                  attribute_to_neuron_input=False, custom_attribution_func=None, **kw):
        _unsupported("custom_attribution_func", custom_attribution_func)
        return self._nrun(inputs, neuron_selector, {}, attribute_to_neuron_input, kw, baselines=baselines,
                          additional_forward_args=additional_forward_args)


class NeuronDeepLiftShap(NeuronDeepLift):
    _captum_name = "NeuronDeepLiftShap"

    def attribute(self, inputs, neuron_selector, baselines, additional_forward_args=None,
                  attribute_to_neuron_input=False, custom_attribution_func=None, **kw):
        return NeuronDeepLift.attribute(self, inputs, neuron_selector, baselines, additional_forward_args,
                                        attribute_to_neuron_input, custom_attribution_func, **kw)


class NeuronGradientShap(NeuronAttribution):
    _captum_name = "NeuronGradientShap"

    def __init__(self, forward_func, layer, device_ids=None, multiply_by_inputs=True):
        super().__init__(forward_func, layer, device_ids, multiply_by_inputs=1 if multiply_by_inputs else 0)

    def attribute(self, inputs, neuron_selector, baselines, n_samples=_GS.n_samples, stdevs=_GS.stdevs,
                  additional_forward_args=None, attribute_to_neuron_input=False, **kw):
        return self._nrun(inputs, neuron_selector, dict(n_samples=n_samples, stdevs=stdevs),
                          attribute_to_neuron_input, kw, baselines=baselines,
                          additional_forward_args=additional_forward_args)


class NeuronGuidedBackprop(NeuronAttribution):
    _captum_name = "NeuronGuidedBackprop"

    def attribute(self, inputs, neuron_selector, additional_forward_args=None, attribute_to_neuron_input=False,
                  **kw):
        return self._nrun(inputs, neuron_selector, {}, attribute_to_neuron_input, kw,
                          additional_forward_args=additional_forward_args)


class NeuronDeconvolution(NeuronGuidedBackprop):
    _captum_name = "NeuronDeconvolution"


class NeuronFeatureAblation(NeuronAttribution):
    _captum_name = "NeuronFeatureAblation"
    _multiplies = True

    def attribute(self, inputs, neuron_selector, baselines=None, additional_forward_args=None, feature_mask=None,
                  attribute_to_neuron_input=False, perturbations_per_eval=None, **kw):
        return self._nrun(inputs, neuron_selector, dict(perturbations_per_eval=perturbations_per_eval),
                          attribute_to_neuron_input, kw, baselines=baselines,
                          additional_forward_args=additional_forward_args, feature_mask=feature_mask)
