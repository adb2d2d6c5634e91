"""Python forward functions that cattr runs itself, for the methods that only evaluate the model.

Captum runs any Python forward function. cattr exports a PyTorch forward function to ONNX (_torch.py), which fails
for a function that is not traceable: one returning a Python number (`model(x).sum().item()`), a Future completed
later by another thread, or one with Python control flow on the values. `callback_model(fn, example_inputs)` makes a
cattr Model whose forward pass is `fn` itself: its graph is one node, op HostCall (cattr_model_new_callback in
include/cattr.h), which the engine calls with the perturbed rows it made. The perturbation methods (FeatureAblation,
FeaturePermutation, Occlusion, ShapleyValueSampling, ShapleyValues, Lime, KernelShap, and the layer forms whose layer
is one of the inputs) run on it unchanged; a method that needs the gradient fails saying so.

    m = callback_model(lambda x: net(x).sum().item(), (x,))
    FeatureAblation(m).attribute(x)

What fn receives: the rows the engine asks for, as numpy arrays viewing the engine's memory (no copy on device
"cpu"; valid only during the call: copy what you keep, and never write into them), turned into torch tensors
(torch.from_numpy, no copy) unless the example inputs were numpy arrays or torch is not importable; integer inputs in
the example's dtype; then the non-tensor additional arguments where the example had them. What it may return: a
tensor, a numpy array, a Python or numpy number, a torch Future (waited for: a Future completed by another thread
works), or a one-element tuple or list of one of these. One call on the example inputs (the probe) gives the output's
shape rule: an output whose first dimension is the batch of input 0 scales with the rows asked for; any other (a
number, an aggregate of the batch) keeps its shape (`batch_output` overrides the guess).

An exception raised by fn fails the attribution with its message ("host function 'f' failed: ValueError: ..."), and
the exception itself is re-raised by the package (`raised_exception`); a KeyboardInterrupt inside fn cancels the call.
fn runs on the thread that called the attribution, while the library holds no lock of its own.
"""
import ctypes
import inspect
import threading

import numpy as np

from . import _lib
from ._core import Model, _is_torch

__all__ = ["callback_model", "raised_exception", "CALLBACK_FN", "SHAPE_FN"]

_st = ctypes.c_int
# cattr_callback_fn / cattr_callback_shape_fn (include/cattr.h)
CALLBACK_FN = ctypes.CFUNCTYPE(_st, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(_lib.TensorP),
                               ctypes.POINTER(_lib.TensorP))
SHAPE_FN = ctypes.CFUNCTYPE(_st, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int),
                            ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int64))
RELEASE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

_lib_h = _lib.lib
_new = _lib_h.cattr_model_new_callback
_new.restype = _st
_new.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_int),
                 CALLBACK_FN, SHAPE_FN, ctypes.c_void_p, RELEASE_FN, ctypes.POINTER(_lib.ModelP)]
_fail = _lib_h.cattr_callback_fail
_fail.restype = None
_fail.argtypes = [ctypes.c_char_p]

_ndim, _shape, _dtype, _data = (_lib_h.cattr_tensor_ndim, _lib_h.cattr_tensor_shape, _lib_h.cattr_tensor_dtype,
                                _lib_h.cattr_tensor_data)
_wrap = _lib_h.cattr_tensor_wrap
_NP_OF = {_lib.FLOAT32: np.dtype(np.float32), _lib.FLOAT64: np.dtype(np.float64), _lib.INT64: np.dtype(np.int64)}
_CATTR_OF = {np.dtype(np.float32): _lib.FLOAT32, np.dtype(np.float64): _lib.FLOAT64, np.dtype(np.int64): _lib.INT64}
_SHAPE = ctypes.c_int64 * _lib.MAX_DIMS

# ---------------------------------------------------------------------------------------------------------------
# the exception a callback raised, for the package to raise in place of the library's error
# ---------------------------------------------------------------------------------------------------------------

_raised = threading.local()  # .exc, .text: the last exception a callback on this thread turned into a failure


def _remember(exc, text):
    _raised.exc = exc
    _raised.text = text


def raised_exception(status, message):
    """The exception a forward function raised inside the failing library call that reported `message` (its
    cattr_last_error), or None: what the package raises instead of its own error for that status, so that code
    catching the function's exceptions (a ValueError, KeyboardInterrupt) sees them. Taken once."""
    exc = getattr(_raised, "exc", None)
    if exc is None:
        return None
    text = _raised.text
    _raised.exc = _raised.text = None
    if status == _lib.OK or not message or text not in message:
        return None
    return exc


# the status a Python exception fails the call with (what the package raises without raised_exception)
def _status_of(exc):
    if isinstance(exc, KeyboardInterrupt):
        return _lib.ERR_CANCELLED
    if isinstance(exc, MemoryError):
        return _lib.ERR_NO_MEMORY
    if isinstance(exc, (ValueError, TypeError, AssertionError, IndexError, KeyError)):
        return _lib.ERR_INVALID_ARGUMENT
    if isinstance(exc, OSError):
        return _lib.ERR_IO
    return _lib.ERR_INTERNAL


def _report(exc):
    """Turns an exception raised inside a callback into its failure: the message, remembered with the exception."""
    text = "%s: %s" % (type(exc).__name__, exc) if str(exc) else type(exc).__name__
    _remember(exc, text)
    try:
        _fail(text.encode("utf-8", "replace"))
    except BaseException:  # pragma: no cover - a second interrupt while reporting the first
        pass
    return _status_of(exc)


# ---------------------------------------------------------------------------------------------------------------
# values crossing the callback
# ---------------------------------------------------------------------------------------------------------------

def _view(t):
    """A numpy array viewing a cattr tensor's buffer (no copy)."""
    nd = _ndim(t)
    sh = _shape(t)
    shape = tuple(sh[k] for k in range(nd))
    dt = _NP_OF[_dtype(t)]
    n = 1
    for s in shape:
        n *= s
    if n == 0:
        return np.empty(shape, dtype=dt)
    buf = (ctypes.c_char * (n * dt.itemsize)).from_address(_data(t))
    return np.frombuffer(buf, dtype=dt).reshape(shape)


def _is_future(v):
    t = type(v)
    if t.__module__.startswith("torch") and t.__name__ == "Future":
        return True
    return callable(getattr(v, "wait", None)) and callable(getattr(v, "done", None)) and \
        callable(getattr(v, "set_result", None))


def result_array(out, what="the forward function"):
    """What a forward function returned as a numpy array (float32, float64 or int64, C-contiguous): a torch tensor
    (detached, on the CPU), a numpy array, a number, a Future (waited for) or a one-element tuple or list of these.
    TypeError for anything else."""
    for _ in range(8):
        if _is_future(out):
            out = out.wait()
        elif isinstance(out, (tuple, list)) and len(out) == 1:
            out = out[0]
        else:
            break
    if _is_torch(out):
        t = out.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.is_complex():
            raise TypeError("cattr: %s returned a complex tensor" % what)
        if t.dtype.is_floating_point and t.dtype not in (_torch_dtype("float32"), _torch_dtype("float64")):
            t = t.float()
        a = t.numpy()
    elif isinstance(out, np.ndarray) or isinstance(out, (bool, int, float, np.number, np.bool_)):
        a = np.asarray(out)
    else:
        kind = "a dict" if isinstance(out, dict) else "a tuple of %d values" % len(out) \
            if isinstance(out, (tuple, list)) else type(out).__name__
        raise TypeError("cattr: %s returned %s; it must return a tensor, an array or a number (or a Future of one, or "
                        "a one-element tuple of one)" % (what, kind))
    k = a.dtype.kind
    if k == "f":
        if a.dtype not in (np.float32, np.float64):
            a = a.astype(np.float32)
    elif k in "iub":
        a = a.astype(np.int64)
    else:
        raise TypeError("cattr: %s returned values of dtype %s, not numbers" % (what, a.dtype))
    return a if a.flags.c_contiguous else a.copy(order="C")  # (np.ascontiguousarray makes a 0-d array 1-d)


def _torch_dtype(name):
    import torch

    return getattr(torch, name)


def _torch_or_none():
    try:
        import torch
        return torch
    except ImportError:  # pragma: no cover - the package works without torch
        return None


class _Host:
    """The state of one callback model: the function, how its arguments are rebuilt, the shape rule, and the ctypes
    callbacks the library holds (alive as long as the Model)."""

    def __init__(self, fn, n_model, fixed, conv, as_torch, rule, name):
        self.fn = fn
        self.n_model = n_model  # model inputs: the attributed inputs, then the tensor additional arguments
        self.fixed = fixed      # the additional arguments in order: _TENSOR (the next model input) or a fixed value
        self.conv = conv        # per model input: None, or a function converting its array to what fn takes
        self.as_torch = as_torch
        self.rule = rule        # ("batch", tail) or ("fixed", shape)
        self.name = name
        self.last = threading.local()  # .out: the array the last output tensor wraps, per calling thread
        self.c_fn = CALLBACK_FN(self._call)
        self.c_shape = SHAPE_FN(self._shape)

    def args(self, arrays):
        torch = _torch_or_none() if self.as_torch else None
        vals = []
        for a, c in zip(arrays, self.conv):
            v = torch.from_numpy(a) if torch is not None else a
            vals.append(c(v) if c is not None else v)
        n_in = self.n_model - sum(1 for v in self.fixed if v is _TENSOR)
        args = vals[:n_in]
        it = iter(vals[n_in:])
        for v in self.fixed:
            args.append(next(it) if v is _TENSOR else v)
        return args

    def run(self, args):
        torch = _torch_or_none() if self.as_torch else None
        if torch is not None:
            with torch.no_grad():
                return result_array(self.fn(*args), "forward function '%s'" % self.name)
        return result_array(self.fn(*args), "forward function '%s'" % self.name)

    def _call(self, user, n, inputs, output):
        try:
            out = self.run(self.args([_view(inputs[i]) for i in range(n)]))
            self.last.out = out  # the library copies it when this returns; kept until the next call
            t = _lib.TensorP()
            shape = _SHAPE(*out.shape)
            st = _wrap(_CATTR_OF[out.dtype], out.ndim, shape, out.__array_interface__["data"][0], ctypes.byref(t))
            if st != _lib.OK:
                return st
            output[0] = t
            return _lib.OK
        except BaseException as e:  # everything: an exception must not cross into C
            return _report(e)

    def _shape(self, user, n, ndim, shapes, out_ndim, out_shape):
        try:
            kind, dims = self.rule
            if kind == "batch":
                if ndim[0] < 1:
                    raise ValueError("input 0 has no batch dimension")
                dims = (shapes[0],) + dims
            out_ndim[0] = len(dims)
            for d, s in enumerate(dims):
                out_shape[d] = s
            return _lib.OK
        except BaseException as e:
            return _report(e)


_TENSOR = object()  # the place of a tensor among the additional arguments


def _input_names(fn, n):
    """Names for the model's inputs: fn's positional parameters where it has them, else input<k>."""
    names = []
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        names = [p.name for p in params]
    except (TypeError, ValueError):
        pass
    out = []
    for k in range(n):
        nm = names[k] if k < len(names) else "input%d" % k
        if nm in out:
            nm = "input%d" % k
        out.append(nm)
    return out


def _converter(example, as_torch):
    """How an array of the engine (float32/float64/int64) becomes what fn took in the example: None (as it is), or a
    function of the tensor or array: back to the example's integer or bool dtype, to its float dtype when that is
    neither float32 nor float64, to its device."""
    if _is_torch(example):
        if not as_torch:
            return None
        torch = _torch_or_none()
        dt, dev = example.dtype, example.device
        keep_float = dt in (torch.float32, torch.float64)
        if (keep_float or dt == torch.int64) and dev.type == "cpu":
            return None
        return lambda t: t.to(device=dev) if keep_float else t.to(device=dev, dtype=dt)
    a = np.asarray(example)
    if a.dtype in (np.float32, np.float64, np.int64):
        return None
    dt = a.dtype
    if as_torch:
        torch = _torch_or_none()
        tdt = torch.from_numpy(np.zeros(0, dtype=dt)).dtype
        return lambda t: t.to(dtype=tdt)
    return lambda v: v.astype(dt)


def callback_model(fn, example_inputs, example_additional=None, name=None, batch_output=None, as_torch=None,
                   device="cpu"):
    """A cattr Model whose forward pass is `fn` (see the module's documentation).

    example_inputs: a tensor or array, or a tuple of them (the attributed inputs); example_additional: None, a value
    or a tuple (Captum's additional_forward_args: tensors and arrays become model inputs after the attributed ones,
    anything else is passed to fn as it is). fn is called once on them (the probe), to learn the output's shape rule.
    name: the name in messages ("host function '<name>' failed: ..."), default fn's name. batch_output: True when
    fn's output has the batch as its first dimension, False when it does not (an aggregate), None to decide from the
    probe. as_torch: whether fn receives torch tensors (None: unless the example inputs are numpy arrays or torch is
    not importable). device: the model's device."""
    if not callable(fn):
        raise TypeError("cattr: callback_model needs a callable, not %s" % type(fn).__name__)
    xs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    if not xs:
        raise _lib.ArgumentError("cattr: callback_model: no example input given")
    if example_additional is None:
        add = ()
    elif isinstance(example_additional, (tuple, list)):
        add = tuple(example_additional)
    else:
        add = (example_additional,)
    torch = _torch_or_none()
    if as_torch is None:
        as_torch = torch is not None and not all(isinstance(x, np.ndarray) for x in xs)
    elif as_torch and torch is None:
        raise ImportError("cattr: callback_model(as_torch=True) needs torch")
    tensors = list(xs)
    fixed = []
    for a in add:
        if _is_torch(a) or isinstance(a, np.ndarray):
            tensors.append(a)
            fixed.append(_TENSOR)
        else:
            fixed.append(a)
    n = len(tensors)
    if n > 8:
        raise _lib.ArgumentError("cattr: callback_model: %d tensors (inputs and additional tensors); at most 8" % n)
    arrays = []
    for k, t in enumerate(tensors):
        a = t.detach().cpu().numpy() if _is_torch(t) else np.asarray(t)
        if a.dtype.kind not in "fiub":
            raise _lib.ArgumentError("cattr: callback_model: input %d has dtype %s, not numbers" % (k, a.dtype))
        arrays.append(a)
    dtypes = [_lib.INT64 if a.dtype.kind in "iub" else (_lib.FLOAT64 if a.dtype == np.float64 else _lib.FLOAT32)
              for a in arrays]
    if name is None:
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    conv = [_converter(t, as_torch) for t in tensors]

    # the probe: fn on the examples as they were given
    host = _Host(fn, n, fixed, conv, as_torch, None, name)
    args = list(xs)
    it = iter(tensors[len(xs):])
    for v in fixed:
        args.append(next(it) if v is _TENSOR else v)
    if as_torch:
        with torch.no_grad():
            raw = fn(*args)
    else:
        raw = fn(*args)
    returned_future = _is_future(raw)
    out = result_array(raw, "forward function '%s'" % name)
    b0 = arrays[0].shape[0] if arrays[0].ndim >= 1 else None
    if batch_output is None:
        batch_output = out.ndim >= 1 and b0 is not None and out.shape[0] == b0
    elif batch_output and (out.ndim < 1 or b0 is None or out.shape[0] != b0):
        raise _lib.ArgumentError("cattr: callback_model(batch_output=True): the output of the example has shape %s, "
                                 "whose first dimension is not the batch %s of input 0" % (out.shape, b0))
    host.rule = ("batch", tuple(out.shape[1:])) if batch_output else ("fixed", tuple(out.shape))
    host.probe = out

    names = _input_names(fn, n)
    c_names = (ctypes.c_char_p * n)(*[s.encode() for s in names])
    c_dtypes = (ctypes.c_int * n)(*dtypes)
    h = _lib.ModelP()
    _lib.check(_new(name.encode("utf-8", "replace"), n, c_names, c_dtypes, host.c_fn, host.c_shape, None,
                    RELEASE_FN(), ctypes.byref(h)))
    m = Model(h, path=name)
    m._host = host  # the callbacks stay alive while the library may call them
    m._cattr_future = returned_future  # the function returns Futures (Captum takes them in attribute_future)
    # a Python int or float output: Captum's FeatureAblation (and its subclasses) attributes in torch.tensor(output)'s
    # dtype, int64 or float64 (attr.py _result)
    m._cattr_number_type = type(raw) if type(raw) in (int, float) else None
    if device and device != "cpu":
        m.to(device)
    return m


def is_callback_model(m):
    """Whether m is a Model made by callback_model."""
    return isinstance(m, Model) and getattr(m, "_host", None) is not None


# The classes of cattr.attr that only evaluate the model (no gradient, no layer inside it): a forward function that
# cannot be exported runs through callback_model for them.
FORWARD_ONLY_CLASSES = frozenset(("FeatureAblation", "FeaturePermutation", "Occlusion", "ShapleyValueSampling",
                                  "ShapleyValues", "Lime", "LimeBase", "KernelShap"))


def export_or_callback(export, fn, example_inputs, example_additional=None, device="cpu", allow=True):
    """The model of a PyTorch forward function for one kind of call: export() (the ONNX export, a Model) when it
    succeeds and its trace is sound, else, where `allow` (a class of FORWARD_ONLY_CLASSES), callback_model(fn, ...)
    (called outside the export, so that fn meets the real torch.futures.Future). The trace is unsound when torch warns
    that it converted a tensor to a Python number or bool (torch.jit.TracerWarning): the export then holds the branch
    the example took, which other inputs may not take. Without `allow`, the export's result or exception as they are.
    Warnings of the export other than those are shown as usual. Returns (model, reason): reason None for the export,
    else why the function runs as a callback (the export's exception, or the tracer's warning)."""
    import warnings

    torch = _torch_or_none()
    tracer = getattr(getattr(torch, "jit", None), "TracerWarning", None) if torch is not None else None
    model, reason = None, None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            model = export()
        except Exception as e:  # noqa: BLE001 - any failure of the export: the callback runs the function
            if not allow:
                raise
            reason = e
    unsound = [w for w in caught if tracer is not None and issubclass(w.category, tracer)]
    for w in caught:  # shown again, but the tracer's when the callback replaces the trace
        if not (allow and w in unsound):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if model is not None and (not unsound or not allow):
        return model, None
    if reason is None:
        reason = unsound[0].message
    return callback_model(fn, example_inputs, example_additional, device=device), reason
