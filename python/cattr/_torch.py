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


_DIGESTS = {}  # (identity, version, pointer) of the tensors -> (digest of their values, bytes): the last few


def _digest(tensors, stamp):
    """A digest of the tensors' values (their shapes, dtypes and bytes), and their size in bytes; the functions
    exported from one model share it while the tensors are unchanged (the stamp: their identities and versions)."""
    import hashlib

    import torch

    hit = _DIGESTS.get(stamp)
    if hit is not None:
        return hit
    h = hashlib.blake2b(digest_size=16)
    size = 0
    for t in tensors:
        a = t.detach().cpu().contiguous()
        h.update(str((tuple(a.shape), str(a.dtype))).encode())
        if a.numel():
            h.update(memoryview((a.float() if a.dtype == torch.bfloat16 else a).numpy().reshape(-1)).cast("B"))
        size += a.numel() * a.element_size()
    if len(_DIGESTS) >= 16:
        _DIGESTS.pop(next(iter(_DIGESTS)))
    _DIGESTS[stamp] = (h.digest(), size)
    return _DIGESTS[stamp]


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
        self._weights_at = None  # _weights() when the exports in _models were made
        self._states = {}  # exports per content of the weights (_switch_weights), the most recent last
        self.layers = []  # the torch modules given as layers: each must be found in the exports

    def _tensors(self):
        import torch

        if not isinstance(self.root, torch.nn.Module):
            return []
        return list(self.root.parameters()) + list(self.root.buffers())

    def _weights(self):
        """The identity and in-place version of every parameter and buffer the function reaches."""
        return tuple((id(t), t._version, t.data_ptr()) for t in self._tensors())

    def _switch_weights(self):
        """Makes _models the exports of the weights as they are now: those kept for the same values, or none. At
        most 8 sets of weights are kept (and no more than about 1 GiB of them)."""
        digest, size = _digest(self._tensors(), self._weights())
        states = self._states
        if digest not in states:
            states[digest] = {}
            keep = max(1, min(8, (1 << 30) // max(size, 1)))
            while len(states) > keep:
                states.pop(next(iter(states)))  # the oldest
        else:
            states[digest] = states.pop(digest)  # the most recent
        self._models = states[digest]

    def use_layer(self, module):
        """A torch module given as a layer: its path in the exports (see module_path), which it is made to keep."""
        if all(module is not m for m in self.layers):
            self.layers.append(module)
        return self.module_path(module)

    # -- layers -------------------------------------------------------------------------------------------------
    def exported_path(self, model, path):
        """A module path in an exported model: the path as named_modules() gives it, or, for a module inside a
        ModuleDict (which the exporter's scopes leave out: `input_maps.input` of ModelInputWrapper is scoped `input`),
        that path without the ModuleDict's names; the path itself when neither names a module of the model."""
        import torch

        if model.module_values(path) is not None:
            return path
        mod, keep = self.root, []
        for seg in path.split("."):
            if isinstance(mod, torch.nn.ModuleDict):
                child = mod[seg] if seg in mod else None
                if keep:
                    keep.pop()  # the dict's own name leaves no scope
            else:
                child = getattr(mod, seg, None)
            if not isinstance(child, torch.nn.Module):
                return path
            keep.append(seg)
            mod = child
        alt = ".".join(keep)
        return alt if alt and model.module_values(alt) is not None else path

    def module_path(self, module):
        """The path of a torch module in the exported model, or None when it is not one of the function's."""
        for name, m in self.root.named_modules():
            if m is module:
                return name if name else None
        return None

    # -- the exported models --------------------------------------------------------------------------------------
    def model_for(self, inputs, additional_forward_args, device="cpu", forward_only=False):
        """The cattr Model for a call: inputs (a tuple of arrays or tensors) and the additional forward arguments
        (a tuple; tensors become model inputs, anything else is fixed in the export). forward_only: the method only
        evaluates the model (_callback.FORWARD_ONLY_CLASSES), so a function the exporter cannot trace soundly (one
        returning a Python number, a Future another thread completes, control flow on values) runs as a host
        function instead (_callback.callback_model)."""
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
               tuple(_freeze(v) for v in fixed), device, bool(forward_only))
        # the exports hold the weights as they were: a weight changed in place since (an optimizer step,
        # load_state_dict, a checkpoint loaded) or replaced makes them stale. The exports are kept per content of
        # the weights, so that going back to weights seen before (checkpoints loaded in turn) reuses their exports.
        weights = self._weights()
        if weights != self._weights_at:
            self._switch_weights()
            self._weights_at = weights
        m = self._models.get(key)
        if m is not None:
            return m
        n_in = len(tensors)
        # the root's children are registered in the traced module; the root itself is not (a module called during a
        # trace must be registered), so a module is run through its forward
        fn = self.fn.forward if isinstance(self.fn, torch.nn.Module) else self.fn

        class _Call(torch.nn.Module):
            returned_future = False

            def __init__(self, root, keep=()):
                super().__init__()
                # the root's modules keep their paths: registered under no prefix
                for name, child in root.named_children():
                    self.add_module(name, child)
                # the root's own parameters and buffers (a bare torch.nn.Linear): without them the export would
                # meet them as constants that require grad
                if isinstance(root, torch.nn.Module):
                    for name, prm in root.named_parameters(recurse=False):
                        self.register_parameter(name, prm)
                    for name, buf in root.named_buffers(recurse=False):
                        self.register_buffer(name, buf)
                self.keep = tuple(keep)

            def forward(self, *ts):
                args = list(ts[:n_in])
                it = iter(ts[n_in:])
                for v in fixed:
                    args.append(next(it) if v is _TENSOR else v)
                out = fn(*args)
                # a forward function that returns a Future (Captum's attribute_future): its value
                if isinstance(out, (_ValueFuture, torch._C.Future)):
                    _Call.returned_future = True
                    out = out.wait()
                # inputs the function does not read stay inputs of the model (the export would drop them): a zero
                # made from each is added to the output (x + 0 is x; its gradient and its ablation change nothing)
                for k in self.keep:
                    if torch.is_tensor(out):
                        out = out + (ts[k] * 0).sum().to(out.dtype)
                return out

        # always through _Call, whose forward takes exactly the tensors given: exporting a module directly would
        # add its forward's defaulted parameters as inputs of the model (torch.onnx's input format)
        def export():
            with _traceable_futures():
                m = from_torch(_Call(self.root), tuple(tensors + add_t), device=device)
                names = ["input%d" % k for k in range(len(tensors) + len(add_t))]
                have = set(m.input_names)
                unused = [k for k, nm in enumerate(names) if nm not in have]
                # layers that left no node (identities): made visible
                hidden = [mod for mod in self.layers if (lambda p: p is not None and m.module_values(
                    self.exported_path(m, p)) is None)(self.module_path(mod))]
                if unused or hidden:  # exported again, keeping the unused inputs and the hidden layers
                    with _visible_modules(hidden):
                        m = from_torch(_Call(self.root, unused), tuple(tensors + add_t), device=device)
            m._cattr_future = _Call.returned_future  # the function returns Futures (for attribute_future only)
            return m

        if forward_only:
            from ._callback import export_or_callback

            m, _ = export_or_callback(export, self.fn, tuple(tensors), add, device=device)
        else:
            m = export()
        self._models[key] = m
        self._weights_at = self._weights()  # (a module in training mode may update its buffers while exported)
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


class _visible_modules:
    """Within: each of the given modules adds a zero of its output's dtype to its output (x + 0 is x), so that it keeps a
    node of its own in the export, which drops a module that computes nothing (an identity: Captum's
    ModelInputWrapper maps each input through one): a layer argument that is such a module is then found by its
    path."""

    def __init__(self, mods):
        self.mods = [m for m in mods if "forward" not in vars(m)]

    def __enter__(self):
        import torch

        def visible(m):
            cls_forward = type(m).forward

            def fwd(*args, **kwargs):
                out = cls_forward(m, *args, **kwargs)
                if torch.is_tensor(out):
                    return out + torch.zeros((), dtype=out.dtype)
                if isinstance(out, tuple):
                    return tuple(o + torch.zeros((), dtype=o.dtype) if torch.is_tensor(o) else o for o in out)
                return out

            return fwd

        for m in self.mods:
            m.forward = visible(m)
        return self

    def __exit__(self, *exc):
        for m in self.mods:
            vars(m).pop("forward", None)
        return False


class _traceable_futures:
    """Within: torch.futures.Future is _ValueFuture (see there)."""

    def __enter__(self):
        import sys

        import torch.futures

        real = torch.futures.Future
        self._patched = []  # (module dict, name): also the `from torch.futures import Future` of every module
        for mod in list(sys.modules.values()):
            d = getattr(mod, "__dict__", None)
            if not isinstance(d, dict):
                continue
            for name, v in list(d.items()):
                if v is real:
                    d[name] = _ValueFuture
                    self._patched.append((d, name, real))
        return self

    def __exit__(self, *exc):
        for d, name, real in self._patched:
            d[name] = real
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


# -- LRP: Captum's propagation rules on torch modules ----------------------------------------------------------------
# Captum's LRP reads `module.rule` (captum.attr._utils.lrp_rules: EpsilonRule, GammaRule, Alpha1_Beta0_Rule,
# IdentityRule) on the leaf modules of the model, or a default rule per module type (captum.attr._core.lrp:
# SUPPORTED_LAYERS_WITH_RULES, SUPPORTED_NON_LINEAR_LAYERS). These become cattr node rules on the modules' paths in
# the exported model (src/attr/rules.c applies a rule to every node of a module: Transpose + MatMul of a Linear
# without bias, MatMul + Add of one on a 3-d input, Gemm, Conv, ...).

# Captum's rule classes, the derived before their bases (IdentityRule is an EpsilonRule)
_LRP_RULES = ("IdentityRule", "Alpha1_Beta0_Rule", "GammaRule", "EpsilonRule")
# what a rule class may not redefine for cattr to compute it: the hooks and the weight change of Captum's classes
_LRP_RULE_HOOKS = ("forward_hook", "backward_hook_activation", "_create_backward_hook_input",
                   "_create_backward_hook_output", "forward_hook_weights", "_manipulate_weights",
                   "forward_pre_hook_activations")
_LRP_MORE_THAN_ONCE = ("Module {} is being used more than once in the network, which is not supported by LRP. Please "
                       "ensure that module is being used only once in the network.")


def _is_propagation_rule(rule):
    return any(c.__name__ == "PropagationRule" for c in type(rule).__mro__)


def lrp_check_rules(root):
    """Captum's LRP._check_rules: TypeError for a module of root whose `.rule` is neither None nor a
    PropagationRule."""
    for m in root.modules():
        rule = getattr(m, "rule", None)
        if rule is not None and not _is_propagation_rule(rule):
            raise TypeError("Please select propagation rules inherited from class PropagationRule for module: %s" % m)


def _lrp_default(module):
    """Captum's default for a leaf module's type (exactly that type, as Captum looks it up): 'EpsilonRule',
    'nonlinear' (ReLU, Dropout, Tanh: relevance passes through) or None."""
    import torch.nn as nn

    t = type(module)
    addition = t.__name__ == "Addition_Module" and t.__module__ == "captum.attr._utils.custom_modules"
    if addition or t in (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.Conv2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d,
                         nn.Linear, nn.BatchNorm2d):
        return "EpsilonRule"
    if t in (nn.ReLU, nn.Dropout, nn.Tanh):
        return "nonlinear"
    return None


def _lrp_rule_params(rule, module):
    """(rule name, epsilon, gamma, set_bias_to_zero) of a Captum rule object set on a module."""
    base = next((c for c in type(rule).__mro__ if c.__name__ in _LRP_RULES), None)
    if base is None:
        raise NotImplementedError("cattr: module %s has rule %s: cattr computes Captum's EpsilonRule, GammaRule, "
                                  "Alpha1_Beta0_Rule and IdentityRule" % (module, type(rule).__name__))
    for h in _LRP_RULE_HOOKS:
        if getattr(type(rule), h, None) is not getattr(base, h, None):
            raise NotImplementedError("cattr: module %s has rule %s, which redefines %s of Captum's %s: cattr computes "
                                      "Captum's rules as they are" % (module, type(rule).__name__, h, base.__name__))
    eps = float(getattr(rule, "STABILITY_FACTOR", 1e-9))
    gamma = float(getattr(rule, "gamma", 0.25)) if base.__name__ == "GammaRule" else 0.25
    zero = bool(getattr(rule, "set_bias_to_zero", False))
    return base.__name__, eps, gamma, zero


def _leaf_layers(root):
    """Captum's LRP._get_layers: the modules without children under root's children, depth first, each once."""
    out = []

    def walk(m):
        for c in m.children():
            if next(iter(c.children()), None) is None:
                if all(c is not x for x in out):
                    out.append(c)
            else:
                walk(c)

    walk(root)
    return out


def _module_calls(model, path, paths):
    """The module paths of a module's calls in an exported model: `path`, then torch's scope names of its later
    calls (`path_1`, `path_2`, ...), those that hold nodes and are not paths of other modules."""
    from ._lib import lib

    def has(p):
        return lib.cattr_model_module_values(model._h, p.encode(), 0, None, 0) > 0

    out = [path] if has(path) else []
    k = 1
    while True:
        p = "%s_%d" % (path, k)
        if p in paths or not has(p):
            return out
        out.append(p)
        k += 1


def lrp_node_rules(root, model):
    """Captum's LRP rules for the leaf modules of root (a torch module: TorchForward.root) as node rules of the model
    exported from it (a cattr Model): a tuple of (module path, rule, epsilon, gamma, set_bias_to_zero). Raises what
    Captum's LRP.attribute raises: TypeError for a leaf module with no rule and no default one for its type (one that
    the forward function does not call too), RuntimeError for a module with a rule called more than once."""
    layers = []
    for layer in _leaf_layers(root):
        rule = getattr(layer, "rule", None)
        kind = _lrp_default(layer)
        if kind == "nonlinear":  # Captum propagates through them whatever their rule
            layers.append((layer, ("lrp_passthrough_nonlinear", 1e-9, 0.25, False), rule is not None))
        elif rule is not None:
            layers.append((layer, _lrp_rule_params(rule, layer), True))
        elif kind is not None and not hasattr(layer, "rule"):
            layers.append((layer, (kind, 1e-9, 0.25, False), True))
        else:
            raise TypeError("Module of type %s has no rule defined and no default rule exists for this module type. "
                            "Please, set a rule explicitly for this module and assure that it is appropriate for this "
                            "type of layer." % type(layer))
    names, paths = {}, set()
    for name, m in root.named_modules():
        names.setdefault(id(m), name)
        paths.add(name)
    out = []
    for layer, entry, weighted in layers:
        path = names.get(id(layer))
        if not path:
            continue
        calls = _module_calls(model, path, paths)
        if weighted and len(calls) > 1:
            raise RuntimeError(_LRP_MORE_THAN_ONCE.format(layer))
        out.extend((p,) + entry for p in calls)
    return tuple(out)


class keep_training_modes:
    """Within: each module of root keeps its training flag (restored on exit, module by module)."""

    def __init__(self, root):
        self.root = root

    def __enter__(self):
        self._modes = [(m, m.training) for m in self.root.modules()]
        return self

    def __exit__(self, *exc):
        for m, t in self._modes:
            m.training = t
        return False
