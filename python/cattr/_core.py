"""Models, tensor conversion and the generic attribution call shared by every class of cattr.attr."""
import ctypes
import os
import tempfile

import numpy as np

from . import _lib
from ._lib import lib, check

_NP_OF = {_lib.FLOAT32: np.float32, _lib.FLOAT64: np.float64, _lib.INT64: np.int64}


# ---------------------------------------------------------------------------------------------------------------
# arrays and tensors
# ---------------------------------------------------------------------------------------------------------------

def _is_torch(x):
    t = type(x)
    return t.__module__.startswith("torch") and t.__name__ in ("Tensor", "Parameter")


def to_numpy(x):
    """A numpy view of an array, a torch tensor (detached, on the CPU) or a number, without copying where possible."""
    if isinstance(x, np.ndarray):
        return x
    if _is_torch(x):
        x = x.detach()
        if x.device.type != "cpu":
            x = x.cpu()
        return x.numpy()
    return np.asarray(x)


_F64 = np.dtype(np.float64)
_I64 = np.dtype(np.int64)


def compute_dtype(arrays):
    """Captum computes in the inputs' dtype: float64 inputs give CATTR_FLOAT64, anything else float32."""
    for a in arrays:
        if a.dtype == _F64:
            return _lib.FLOAT64
    return _lib.FLOAT32


class _TensorList:
    """cattr tensors made from arrays for one call, freed together."""

    __slots__ = ("ptrs", "arrays")

    def __init__(self):
        self.ptrs = []
        self.arrays = []  # the buffers the tensors borrow, alive until free()

    def make(self, a, dtype=None, what="an array"):
        """A cattr tensor over `a` (converted to the cattr dtype `dtype`, else float -> float32/64 as it is,
        integers -> int64): an array already C-contiguous in that dtype is not copied (cattr_tensor_wrap borrows its
        buffer; the library never writes into a call's inputs). Values that become int64 are checked
        (_lib.int64_array: TypeError or ValueError naming `what`) rather than wrapped or truncated."""
        if dtype is None:
            if a.dtype == np.float64:
                dtype = _lib.FLOAT64
            elif a.dtype.kind in "iubO":  # object arrays: Python ints too large for int64, or not numbers
                dtype = _lib.INT64
            else:
                dtype = _lib.FLOAT32
        if dtype == _lib.INT64 and a.dtype != _I64:
            a = _lib.int64_array(a, what)
        a = np.asarray(a, dtype=_NP_OF[dtype])
        if not a.flags.c_contiguous:  # (np.ascontiguousarray would make a 0-d array, a scalar input, 1-d)
            a = a.copy(order="C")
        nd = a.ndim
        if nd > _lib.MAX_DIMS:
            raise ValueError("cattr: an array of %d dimensions (at most %d)" % (nd, _lib.MAX_DIMS))
        shape = _SHAPE(*a.shape)
        out = _lib.TensorP()
        check(_wrap(dtype, nd, shape, a.__array_interface__["data"][0], _byref(out)))
        self.ptrs.append(out)
        self.arrays.append(a)
        return out

    def free(self):
        for p in self.ptrs:
            lib.cattr_tensor_free(p)
        self.ptrs = []
        self.arrays = []


_SHAPE = ctypes.c_int64 * _lib.MAX_DIMS
_wrap = lib.cattr_tensor_wrap
_byref = ctypes.byref


def tensor_to_numpy(t, free=True):
    """Copies a cattr tensor into a new numpy array (and frees the tensor)."""
    try:
        a = np.empty(_shape(t)[:_ndim(t)], dtype=_NP_OF[_dtype(t)])
        n = a.nbytes
        if n:
            _memmove(a.__array_interface__["data"][0], _data(t), n)
        return a
    finally:
        if free:
            _free(t)


_shape, _ndim, _dtype, _data, _free = (lib.cattr_tensor_shape, lib.cattr_tensor_ndim, lib.cattr_tensor_dtype,
                                       lib.cattr_tensor_data, lib.cattr_tensor_free)
_memmove = ctypes.memmove


_PTR_ARRAYS = [_lib.TensorP * n for n in range(1, 17)]


def _ptr_array(ptrs):
    n = len(ptrs)
    arr = (_PTR_ARRAYS[n - 1] if 0 < n <= 16 else _lib.TensorP * max(n, 1))()
    for i, p in enumerate(ptrs):
        if p is not None:
            arr[i] = p
    return arr


# ---------------------------------------------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------------------------------------------

class ModuleRef:
    """A module of a loaded model by its PyTorch path, reached as in PyTorch: `model.conv2`, `model.layer4[1].conv2`
    (what Captum's layer arguments take; cattr's classes also take the path as a string)."""

    __slots__ = ("_model", "path")

    def __init__(self, model, path):
        self._model = model
        self.path = path

    def _child(self, name):
        path = "%s.%s" % (self.path, name)
        self._model.resolve(path)  # ValueError naming the closest modules when there is none
        return ModuleRef(self._model, path)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._child(name)
        except ValueError as e:
            raise AttributeError(str(e)) from None

    def __getitem__(self, i):
        try:
            return self._child(int(i))
        except ValueError as e:
            raise IndexError(str(e)) from None

    def __str__(self):
        return self.path

    def __repr__(self):
        return "<cattr module %s -> %s>" % (self.path, self._model.resolve(self.path))

    def __eq__(self, other):
        return isinstance(other, ModuleRef) and other._model is self._model and other.path == self.path

    def __hash__(self):
        return hash(self.path)


def layer_name(layer):
    """A layer argument as cattr takes it: a path string, a ModuleRef, or a list/tuple of these."""
    if isinstance(layer, ModuleRef):
        return layer.path
    if isinstance(layer, list):
        return [layer_name(x) for x in layer]
    if isinstance(layer, tuple):
        return tuple(layer_name(x) for x in layer)
    return layer


class Model:
    """An ONNX model loaded by cattr: what the attribution classes take in place of Captum's `forward_func`.

    Calling it runs the forward pass (`model(x)` -> output 0 as a numpy array, or a torch tensor for torch inputs)
    in the inputs' dtype."""

    def __init__(self, handle, path=None, owner=None, device=None):
        self._h = handle
        self._owner = owner  # an LLM whose borrowed model this is: keeps it alive
        self.path = path
        self._device = device or "cpu"
        self._rules = {}

    @classmethod
    def _load(cls, path, device="cpu"):
        h = _lib.ModelP()
        check(lib.cattr_model_load_onnx(os.fsencode(path), ctypes.byref(h)))
        m = cls(h, path=str(path))
        if device:
            m.to(device)
        return m

    def __del__(self):
        h = getattr(self, "_h", None)
        if h and self._owner is None:
            lib.cattr_model_free(h)
            self._h = None

    # -- description ------------------------------------------------------------------------------------------
    @property
    def input_names(self):
        return [lib.cattr_model_input_name(self._h, i).decode() for i in range(lib.cattr_model_n_inputs(self._h))]

    @property
    def output_names(self):
        return [lib.cattr_model_output_name(self._h, i).decode() for i in range(lib.cattr_model_n_outputs(self._h))]

    @property
    def input_shapes(self):
        """Declared input shapes, None for a dynamic dimension."""
        out = []
        for i in range(lib.cattr_model_n_inputs(self._h)):
            buf = (ctypes.c_int64 * _lib.MAX_DIMS)()
            nd = lib.cattr_model_input_shape(self._h, i, buf)
            out.append(tuple(None if buf[k] < 0 else buf[k] for k in range(nd)))
        return out

    def describe(self):
        """Inputs, outputs, op counts and addressable layers (module path -> ONNX value), as `cattr info` prints."""
        n = lib.cattr_model_describe(self._h, None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        lib.cattr_model_describe(self._h, buf, n + 1)
        return buf.value.decode("utf-8", "replace")

    def resolve(self, name):
        """The ONNX value name of a PyTorch module path ("conv1") or value name."""
        out = ctypes.c_char_p()
        check(lib.cattr_model_resolve_value(self._h, name.encode(), ctypes.byref(out)))
        return out.value.decode()

    def module_values(self, path, inputs=False):
        """The ONNX values that cross the boundary of a module: its outputs (made inside, read outside), or with
        inputs=True the values it reads from outside; None when no node belongs to the module."""
        n = lib.cattr_model_module_values(self._h, path.encode(), 1 if inputs else 0, None, 0)
        if n < 0:
            return None
        buf = (ctypes.c_char_p * max(n, 1))()
        lib.cattr_model_module_values(self._h, path.encode(), 1 if inputs else 0, buf, n)
        return [buf[k].decode() for k in range(n)]

    def __repr__(self):
        return "<cattr.Model %s on %s: inputs %s>" % (self.path or "?", self._device, self.input_names)

    # -- device -----------------------------------------------------------------------------------------------
    @property
    def device(self):
        return self._device

    def weight_modules(self):
        """The modules that hold weights, in the order of their first use (what `randomized` draws anew)."""
        out = []
        for k in range(lib.cattr_model_n_weight_modules(self._h)):
            buf = ctypes.create_string_buffer(512)
            lib.cattr_model_weight_module(self._h, k, buf, len(buf))
            out.append(buf.value.decode())
        return out

    def randomized(self, modules, seed=0):
        """A copy whose weights in `modules` (paths of weight_modules, or their parents) are drawn anew from a normal
        distribution of each tensor's mean and standard deviation (cattr's generator under `seed`): the
        model-randomisation check's copies. It shares this model's other weights."""
        names = [os.fsencode(m) for m in ([modules] if isinstance(modules, str) else list(modules))]
        arr = (ctypes.c_char_p * max(len(names), 1))(*names)
        h = _lib.ModelP()
        check(lib.cattr_model_randomize(self._h, arr, len(names), int(seed), ctypes.byref(h)))
        m = Model(h, path=self.path, device=self._device)
        m._base = self  # the copy borrows this model's weights: kept alive while the copy is
        return m

    def to(self, device):
        """Sets the model's device ("cpu", "cpu-check", "cuda:N" where built); returns the model."""
        check(lib.cattr_model_set_device(self._h, device.encode()))
        self._device = device
        return self

    def module(self, path):
        """The module at a PyTorch path ("layer4.1.conv2"), as `model.layer4[1].conv2` reaches it."""
        self.resolve(path)
        return ModuleRef(self, path)

    def __getattr__(self, name):
        # model.conv2, model.layer4: the model's modules, as on a torch.nn.Module (for Captum's layer arguments)
        if name.startswith("_") or self.__dict__.get("_h") is None:
            raise AttributeError(name)
        try:
            return self.module(name)
        except ValueError as e:
            raise AttributeError("'%s': %s" % (name, e)) from None

    def eval(self):
        """No-op returning the model (a loaded model is always in inference mode), so `model.eval()` in Captum code
        runs unchanged."""
        return self

    # -- forward ----------------------------------------------------------------------------------------------
    def forward(self, *inputs):
        arrs = [to_numpy(x) for x in inputs]
        dt = compute_dtype([a for a in arrs if a.dtype.kind == "f"])
        tl = _TensorList()
        try:
            ptrs = [tl.make(a, dt if a.dtype.kind == "f" else _lib.INT64, "input %d" % i) for i, a in enumerate(arrs)]
            out = _lib.TensorP()
            check(lib.cattr_model_forward(self._h, dt, _ptr_array(ptrs), len(ptrs), ctypes.byref(out)))
        finally:
            tl.free()
        y = tensor_to_numpy(out)
        if inputs and _is_torch(inputs[0]):
            import torch
            return torch.from_numpy(y)
        return y

    __call__ = forward


def load(path, device="cpu"):
    """Loads an ONNX model (exported with torch.onnx.export, or any opset >= 7 model of supported ops)."""
    return Model._load(path, device)


def from_torch(module, example_inputs, device="cpu", opset_version=14, keep_file=None, **export_kwargs):
    """Exports a torch.nn.Module with torch.onnx.export (constant folding off so that every module keeps its
    boundary and its path: `conv1`, `layer4.1.conv2`) and loads it. `example_inputs`: a tensor or a tuple of tensors
    (the attributed inputs, then the additional forward tensors); the batch dimension (0) stays dynamic.
    `keep_file`: a path to keep the exported model at (default: a temporary file, deleted after loading)."""
    import torch

    if not isinstance(example_inputs, tuple):
        example_inputs = (example_inputs,)
    names = ["input%d" % i for i in range(len(example_inputs))]
    axes = {n: {0: "batch"} for n in names}
    axes["output"] = {0: "batch"}
    kw = dict(input_names=names, output_names=["output"], dynamic_axes=axes, opset_version=opset_version,
              do_constant_folding=False)
    kw.update(export_kwargs)
    modes = [(m, m.training) for m in module.modules()]  # every module's flag, restored as it was
    module.eval()
    path = keep_file
    tmpdir = None
    try:
        if path is None:
            tmpdir = tempfile.TemporaryDirectory(prefix="cattr-")
            path = os.path.join(tmpdir.name, "model.onnx")
        # gradients on while tracing, with every parameter requiring one (restored after): torch's fused inference
        # kernels (TransformerEncoderLayer, MultiheadAttention), which the exporter cannot export, are then not taken
        frozen = [p for p in module.parameters() if not p.requires_grad]
        try:
            for p in frozen:
                p.requires_grad_(True)
            with torch.enable_grad():
                torch.onnx.export(module, example_inputs, path, **kw)
        finally:
            for p in frozen:
                p.requires_grad_(False)
        m = load(path, device)
        if keep_file is None:
            m.path = "<%s from torch>" % type(module).__name__
        return m
    finally:
        for m_, t in modes:
            m_.training = t
        if tmpdir is not None:
            tmpdir.cleanup()


def devices():
    """The devices of this build."""
    return [d.strip() for d in lib.cattr_device_names().decode().split(",")]


def load_safetensors(path):
    """Reads a .safetensors file into a dict of numpy arrays (F16/BF16 as float32, I32/BOOL/U8 as int64)."""
    s = _lib.TensorSetP()
    check(lib.cattr_tensor_set_load(os.fsencode(path), ctypes.byref(s)))
    try:
        out = {}
        for i in range(lib.cattr_tensor_set_count(s)):
            name = lib.cattr_tensor_set_name(s, i)
            out[name.decode()] = tensor_to_numpy(lib.cattr_tensor_set_get(s, name), free=False)
        return out
    finally:
        lib.cattr_tensor_set_free(s)
