"""PyTorch forward functions given where Captum takes them: a `torch.nn.Module`, its bound `forward`, or any callable of
torch tensors (a lambda around a module, a function of several modules). cattr runs them by exporting them to ONNX
with `from_torch` for the shapes, dtypes and non-tensor arguments of a call (once per distinct such call; the exports
are kept), so that `IntegratedGradients(net)` works as in Captum.

Layers given as torch modules (`net.conv2`, `net.layer4[1].conv2`) become their module paths ("conv2",
"layer4.1.conv2") in the exported model; a layer of a module that the function reaches only through a closure or a
global is found by its path under that module (`m0.conv2` for the first such module).
"""
import numbers

import numpy as np

from ._core import _is_torch, from_torch


def is_torch_callable(f):
    """Whether f is something this module runs: a torch.nn.Module, or a callable when torch is importable."""
    try:
        import torch
    except ImportError:  # pragma: no cover - without torch nothing here applies
        return False
    return isinstance(f, torch.nn.Module) or callable(f)


def _modules_of(fn):
    """The torch modules a callable reaches: its bound object, its closure cells, its defaults, and the globals its
    code names (recursively for nested functions), in a stable order."""
    import torch

    found, seen_fns = [], set()

    def add(m):
        if isinstance(m, torch.nn.Module) and all(m is not x for x in found):
            found.append(m)

    def walk(f):
        if id(f) in seen_fns:
            return
        seen_fns.add(id(f))
        if isinstance(f, torch.nn.Module):
            add(f)
            return
        obj = getattr(f, "__self__", None)
        if isinstance(obj, torch.nn.Module):
            add(obj)
        func = getattr(f, "__func__", f)
        code = getattr(func, "__code__", None)
        for cell in getattr(func, "__closure__", None) or ():
            try:
                v = cell.cell_contents
            except ValueError:
                continue
            add(v)
            if callable(v) and not isinstance(v, type):
                walk(v)
        for v in getattr(func, "__defaults__", None) or ():
            add(v)
        g = getattr(func, "__globals__", {})
        for name in getattr(code, "co_names", ()) if code is not None else ():
            v = g.get(name)
            add(v)
            if callable(v) and getattr(v, "__code__", None) is not None:
                walk(v)

    walk(fn)
    return found


class TorchForward:
    """A PyTorch forward function and the cattr Models exported from it, one per kind of call."""

    def __init__(self, fn):
        import torch

        self.fn = fn
        if isinstance(fn, torch.nn.Module):
            self.root, self.prefix = fn, {}
        elif isinstance(getattr(fn, "__self__", None), torch.nn.Module) and \
                getattr(fn, "__name__", None) == "forward":
            self.root, self.prefix = fn.__self__, {}
        else:  # a function: a module holding the modules it reaches, as m0, m1, ...
            mods = _modules_of(fn)
            holder = torch.nn.Module()
            for k, m in enumerate(mods):
                holder.add_module("m%d" % k, m)
            self.root = holder
            self.prefix = {id(m): "m%d" % k for k, m in enumerate(mods)}
        self._models = {}

    # -- layers -------------------------------------------------------------------------------------------------
    def module_path(self, module):
        """The path of a torch module in the exported model, or None when it is not one of the function's."""
        for name, m in self.root.named_modules():
            if m is module:
                return name if name else None
        return None

    # -- the exported models --------------------------------------------------------------------------------------
    def model_for(self, inputs, additional_forward_args, device="cpu"):
        """The cattr Model for a call: inputs (a tuple of arrays or tensors) and the additional forward arguments
        (a tuple; tensors become model inputs, anything else is fixed in the export)."""
        import torch

        add = tuple(additional_forward_args) if additional_forward_args is not None else ()
        tensors = [x if _is_torch(x) else torch.as_tensor(np.asarray(x)) for x in inputs]
        fixed, add_t = [], []
        for a in add:
            if _is_torch(a) or isinstance(a, np.ndarray):
                t = a if _is_torch(a) else torch.as_tensor(a)
                add_t.append(t)
                fixed.append(_TENSOR)
            else:
                fixed.append(a)
        key = (tuple((tuple(t.shape[1:]), str(t.dtype)) for t in tensors + add_t),
               tuple(_freeze(v) for v in fixed), device)
        m = self._models.get(key)
        if m is not None:
            return m
        n_in = len(tensors)
        # the root's children are registered in the traced module; the root itself is not (a module called during a
        # trace must be registered), so a module is run through its forward
        fn = self.fn.forward if isinstance(self.fn, torch.nn.Module) else self.fn

        class _Call(torch.nn.Module):
            def __init__(self, root, keep=()):
                super().__init__()
                # the root's modules keep their paths: registered under no prefix
                for name, child in root.named_children():
                    self.add_module(name, child)
                self.keep = tuple(keep)

            def forward(self, *ts):
                args = list(ts[:n_in])
                it = iter(ts[n_in:])
                for v in fixed:
                    args.append(next(it) if v is _TENSOR else v)
                out = fn(*args)
                # a forward function that returns a Future (Captum's attribute_future): its value
                if isinstance(out, (_ValueFuture, torch.futures.Future)):
                    out = out.wait()
                # inputs the function does not read stay inputs of the model (the export would drop them): a zero
                # made from each is added to the output (x + 0 is x; its gradient and its ablation change nothing)
                for k in self.keep:
                    if torch.is_tensor(out):
                        out = out + (ts[k] * 0).sum().to(out.dtype)
                return out

        # always through _Call, whose forward takes exactly the tensors given: exporting a module directly would
        # add its forward's defaulted parameters as inputs of the model (torch.onnx's input format)
        wrapper = _Call(self.root)
        with _traceable_futures():
            m = from_torch(wrapper, tuple(tensors + add_t), device=device)
            names = ["input%d" % k for k in range(len(tensors) + len(add_t))]
            have = set(m.input_names)
            unused = [k for k, nm in enumerate(names) if nm not in have]
            if unused:  # exported again, keeping them
                m = from_torch(_Call(self.root, unused), tuple(tensors + add_t), device=device)
        self._models[key] = m
        return m


_TENSOR = object()  # the place of a tensor among the additional forward arguments


class _ValueFuture:
    """What torch.futures.Future is while a forward function is exported: a plain holder of its value, which the
    tracer follows (a torch Future is opaque to it). Captum's futures API completes them at once
    (captum._utils.common._construct_future_forward); one completed later by another thread cannot be exported."""

    def __init__(self, *args, **kwargs):
        self._value, self._set = None, False

    def set_result(self, value):
        self._value, self._set = value, True

    def wait(self):
        if not self._set:
            raise RuntimeError("cattr: a forward function returned a Future that is not completed when it returns "
                               "(set by another thread later): cattr cannot export it to run inside the engine")
        return self._value

    value = wait

    def done(self):
        return self._set

    def then(self, callback):
        out = _ValueFuture()
        out.set_result(callback(self))
        return out

    def __class_getitem__(cls, item):
        return cls


class _traceable_futures:
    """Within: torch.futures.Future is _ValueFuture (see there)."""

    def __enter__(self):
        import torch.futures

        self._saved = torch.futures.Future
        torch.futures.Future = _ValueFuture
        return self

    def __exit__(self, *exc):
        import torch.futures

        torch.futures.Future = self._saved
        return False


def _freeze(v):
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if v is _TENSOR:
        return ("tensor",)
    if isinstance(v, (numbers.Number, str, bytes, type(None), bool)):
        return v
    return ("id", id(v))
