"""Captum's captum.influence on cattr: TracInCP, TracInCPFast and SimilarityInfluence, with Captum's classes,
arguments and results.

    from cattr.influence import TracInCP, TracInCPFast

    tracin = TracInCPFast(net, "fc", train_dataset, "checkpoints/", loss_fn=nn.CrossEntropyLoss(reduction="sum"))
    scores = tracin.influence((x_test, y_test))                  # [test examples, training examples]
    top = tracin.influence((x_test, y_test), k=5)                # KMostInfluentialResults(indices, influence_scores)
    self_scores = tracin.self_influence()                        # [training examples]

TracIn (Pruthi et al., NeurIPS 2020) scores a training example's influence on a test example by the dot products of
their loss gradients with respect to the model's parameters, summed over checkpoints and weighted by each
checkpoint's learning rate. The model's passes run in cattr: the output, the layer inputs and the gradients at the
layer outputs of each batch (the PyTorch model exported once per set of weights; a checkpoint seen before reuses its
export). The gradient of the loss at the output comes from torch's autograd on the output alone, so any loss Captum
takes works. Per-example parameter gradients of a Linear layer are the outer products of its output gradient and its
input (summed over the positions of a sequence), computed from those two: exact, and batched, with no per-example
backward pass. TracInCP takes Linear layers (a layer of another kind is refused, naming it); TracInCPFast the last
fully-connected layer as Captum's does. SimilarityInfluence ranks training examples by the similarity of their layer
activations (computed by cattr) to the test examples'.
"""
import ctypes
import glob
import os
import re
import warnings
from typing import NamedTuple

import numpy as np

from . import _lib
from ._core import _is_torch, tensor_to_numpy
from ._lib import lib

__all__ = ["DataInfluence", "KMostInfluentialResults", "TracInCPBase", "TracInCP", "TracInCPFast",
           "TracInCPFastRandProj", "NearestNeighbors", "ExactNearestNeighbors", "SimilarityInfluence",
           "euclidean_distance", "cosine_similarity", "NaiveInfluenceFunction", "ArnoldiInfluenceFunction"]


class KMostInfluentialResults(NamedTuple):
    """The k most influential training examples of each test example: their indices and influence scores, each
    [test examples, k], in decreasing order of influence (proponents) or increasing (opponents)."""

    indices: object
    influence_scores: object


class DataInfluence:
    """Base of the influence classes (Captum's): the model and the training data."""

    def __init__(self, model, train_dataset, **kwargs):
        self.model = model
        self.train_dataset = train_dataset

    def influence(self, inputs=None, **kwargs):
        raise NotImplementedError

    @classmethod
    def get_name(cls):
        return cls.__name__


# =================================================================================================================
# Helpers with Captum's behaviour
# =================================================================================================================

def _natural(paths):
    return sorted(paths, key=lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p)])


def _load_flexible_state_dict(model, path):
    """Captum's default checkpoint loader: torch.load of a state dict (a DataParallel one's "module." prefixes
    handled), loaded into the model; returns its "learning_rate" entry (1.0 without one)."""
    import torch

    checkpoint = torch.load(path)
    lr = checkpoint.get("learning_rate", 1.0)
    state = {k: v for k, v in checkpoint.items() if k != "learning_rate"}
    target = model.module if isinstance(model, torch.nn.DataParallel) else model
    if any(k.startswith("module.") for k in state):
        state = {k[len("module."):] if k.startswith("module.") else k: v for k, v in state.items()}
    target.load_state_dict(state)
    return lr


class _OneBatch:
    """A batch given as a tuple, as a data loader of that one batch."""

    def __init__(self, batch):
        self.batch = batch

    def __iter__(self):
        return iter([self.batch])

    def __len__(self):
        return 1


def _batches(inputs):
    """inputs as an iterable of batches: a DataLoader as it is, anything else (a tuple, a DataLoader's batch) as one
    batch (Captum's _format_inputs_dataset)."""
    from torch.utils.data import DataLoader

    return inputs if isinstance(inputs, DataLoader) else _OneBatch(inputs)


def _loader(dataset, batch_size, name):
    """A DataLoader as it is; a Dataset batched by batch_size without shuffling (Captum's check and message)."""
    from torch.utils.data import DataLoader

    if isinstance(dataset, DataLoader):
        return dataset
    assert isinstance(batch_size, int), "since the `%s` argument was a `Dataset`, `batch_size` must be an int." % name
    return DataLoader(dataset, batch_size, shuffle=False)


def _length(it):
    try:
        return len(it)
    except TypeError:
        return None


class _Progress:
    """A progress bar on stderr (tqdm's when it is installed, as Captum's; else a line per update)."""

    def __init__(self, iterable=None, desc=None, total=None):
        self.iterable, self.desc, self.total = iterable, desc, total
        try:
            from tqdm.auto import tqdm

            self.bar = tqdm(iterable, desc=desc, total=total, mininterval=0.0)
        except ImportError:  # pragma: no cover - Debian's python3-tqdm is there where Captum's tests run
            self.bar = None
            self.n = 0

    def __iter__(self):
        if self.bar is not None:
            yield from self.bar
            return
        for x in self.iterable:
            yield x
            self.update()

    def update(self, n=1):
        if self.bar is not None:
            self.bar.update(n)
            return
        import sys

        self.n += n
        pct = " %d%%" % (100 * self.n // self.total) if self.total else ""
        sys.stderr.write("%s:%s %d/%s\n" % (self.desc, pct, self.n, self.total if self.total else "?"))

    def close(self):
        if self.bar is not None:
            self.bar.close()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


def _maybe_progress(iterable, show, desc, total=None):
    return _Progress(iterable, desc, total if total is not None else _length(iterable)) if show else iterable


def _check_loss_fn(loss_fn, name, sample_wise_grads_per_batch=True):
    """The reduction of a loss ("sum", "mean" or "none"), with Captum's checks and warnings."""
    if loss_fn is None:
        return "sum"
    assert callable(loss_fn)
    if hasattr(loss_fn, "reduction"):
        reduction = loss_fn.reduction
        if sample_wise_grads_per_batch:
            assert reduction in ("sum", "mean"), (
                'reduction for `loss_fn` must be "sum" or "mean" when `sample_wise_grads_per_batch` is True (i.e. '
                "the default value) ")
            return str(reduction)
        assert reduction == "none", 'reduction for `loss_fn` must be "none" when `sample_wise_grads_per_batch` is False'
        return "none"
    if sample_wise_grads_per_batch:
        warnings.warn("Since `%s` has no 'reduction' attribute, and `sample_wise_grads_per_batch` is True, the "
                      "implementation assumes that `%s` is a 'reduction' loss function that reduces the per-example "
                      "losses by taking their *sum*. If `%s` instead reduces the per-example losses by taking their "
                      "mean, please set the reduction attribute of `%s` to \"mean\"." % (name, name, name, name),
                      stacklevel=3)
        return "sum"
    warnings.warn('Since `%s` has no "reduction" attribute, and `sample_wise_grads_per_batch` is False, the '
                  'implementation assumes that `%s` is a "per-example" loss function. Please ensure that this is the '
                  "case." % (name, name), stacklevel=3)
    return "none"


def _batch_dot(a, b):
    """[n, ...] . [m, ...] -> [n, m] (each example flattened), Captum's _tensor_batch_dot."""
    assert a[0].numel() == b[0].numel() if len(a) and len(b) else True, (
        "Please ensure each batch member has the same feature dimension.")
    return a.reshape(a.shape[0], -1) @ b.reshape(b.shape[0], -1).T


def _top_k(blocks, k, proponents):
    """The k most influential training examples from the score blocks of the training batches in order ([n, b]
    each), the running top k kept as Captum keeps it (torch.topk of each block, merged with the top so far)."""
    import torch

    sign = 1.0 if proponents else -1.0
    idx = scores = None
    seen = 0
    for s in blocks:
        s = s * sign
        b = s.shape[1]
        top_s, top_i = torch.topk(s, min(b, k), dim=1)
        top_i = top_i + seen
        seen += b
        idx = top_i if idx is None else torch.cat([idx, top_i], dim=1)
        scores = top_s if scores is None else torch.cat([scores, top_s], dim=1)
        scores, order = torch.topk(scores, min(k, idx.shape[1]), dim=1)
        idx = torch.gather(idx, 1, order)
    if idx is None:
        idx, scores = torch.zeros(0, 0, dtype=torch.long), torch.zeros(0, 0)
    return KMostInfluentialResults(idx, scores * sign)


def _warn_no_length(what, of):
    """Captum's warning for data whose number of batches is unknown, when progress is shown."""
    warnings.warn("Unable to determine the number of batches in %s. Therefore, if showing the progress of %s, only "
                  "the number of batches processed can be displayed, and not the percentage completion of the "
                  "computation, nor any time estimates." % (what, of), stacklevel=3)


def _self_influence_by_batches(fn, name, inputs, show_progress):
    """Self influence batch by batch (each over every checkpoint), concatenated."""
    import torch

    loader = _batches(inputs)
    if show_progress and _length(loader) is None:
        _warn_no_length("`inputs_dataset`", "the computation of self influence scores")
    desc = "Using %s to compute self influence. Processing batch" % name
    return torch.cat([fn(batch, show_progress=False) for batch in _maybe_progress(loader, show_progress, desc)])


# =================================================================================================================
# The model's passes in cattr
# =================================================================================================================

def _module_path(model, module):
    for name, m in model.named_modules():
        if m is module:
            return name
    raise _lib.ArgumentError("cattr: the layer %s is not a module of the model" % type(module).__name__)


def _module_of(model, path):
    m = model
    for part in path.split("."):
        m = m[int(part)] if part.isdigit() and isinstance(m, (list, tuple)) else getattr(m, part)
    return m


class _Passes:
    """One model's passes for the influence methods: its output, the inputs of some layers, and the gradient of a
    seeded sum of the output at the layers' outputs (a module around the model: sum over the output of output x
    seed, one per example, whose layer gradients are each example's), each a cattr call on the model's export."""

    def __init__(self, model):
        import torch

        self.model = model
        self._fwd = None

        class Seeded(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, *args):
                y = self.inner(*args[:-1])
                return (y * args[-1]).reshape(y.shape[0], -1).sum(1, keepdim=True)

        self.seeded = Seeded(model)
        self._act = {}
        self._grad = {}

    def output(self, xs):
        """model(*xs) in cattr."""
        from .robust import _Gradient

        if self._fwd is None:
            self._fwd = _Gradient(self.model)
        out = self._fwd._output(xs)
        if not _is_torch(out):
            import torch

            out = torch.from_numpy(np.asarray(out))
        return out

    def param_products(self, xs, names, params, jobs):
        """For each (seed, dirs) of jobs, with u = seed (the output's shape): the gradient of sum(u * model(*xs))
        with respect to the named parameters, and with directions dirs (the parameters' shapes; None: none) J v (the
        output's shape) and sum_o u_o H(F_o) v: one cattr call each (cattr_explainer_param_hvp), all within one
        call setup; a list of (grads, jv, hv) of torch tensors (jv and hv None without dirs)."""
        import torch
        from .robust import _Gradient

        if self._fwd is None:
            self._fwd = _Gradient(self.model)
        n = len(names)
        dtype = params[0].dtype
        as_t = lambda t: torch.from_numpy(np.ascontiguousarray(tensor_to_numpy(t))).to(dtype)

        def invoke(e, call, mk):
            nm = (ctypes.c_char_p * n)(*[a.encode() for a in names])
            ps = (_lib.TensorP * n)(*[mk(p.detach(), "parameter %s" % a) for p, a in zip(params, names)])
            out = []
            for seed, dirs in jobs:
                vs = (_lib.TensorP * n)(*[mk(v.detach(), "direction %s" % a) for v, a in zip(dirs, names)]) \
                    if dirs is not None else None
                grads, hv, jv = (_lib.TensorP * n)(), (_lib.TensorP * n)(), _lib.TensorP()
                e.intr.run(lib.cattr_explainer_param_hvp, e.h, ctypes.byref(call), n, nm, ps, mk(seed, "the seed"),
                           vs, grads, None, ctypes.byref(jv) if dirs is not None else None,
                           hv if dirs is not None else None)
                g = [as_t(grads[k]) for k in range(n)]
                if dirs is None:
                    out.append((g, None, None))
                else:
                    out.append((g, as_t(jv), [as_t(hv[k]) for k in range(n)]))
            return out

        res, _, _ = self._fwd._run(xs, {}, invoke=invoke)
        return res

    def layer_inputs(self, xs, paths):
        from .attr import LayerActivation

        m = self._act.get(tuple(paths))
        if m is None:
            m = self._act[tuple(paths)] = LayerActivation(self.model, list(paths))
        res = m.attribute(xs if len(xs) > 1 else xs[0], attribute_to_layer_input=True)
        return [r[0] if isinstance(r, tuple) else r for r in res]

    def output_grads(self, xs, paths, seed):
        from .attr import LayerGradientXActivation

        m = self._grad.get(tuple(paths))
        if m is None:
            m = self._grad[tuple(paths)] = LayerGradientXActivation(self.seeded, ["inner." + p for p in paths],
                                                                    multiply_by_inputs=False)
        res = m.attribute(xs if len(xs) > 1 else xs[0], target=0, additional_forward_args=(seed.detach(),))
        return [r[0] if isinstance(r, tuple) else r for r in res]


def _output_from_layer(state, passes, xs, module, a):
    """The model's output for a batch whose last Linear layer `module` has input a: the layer applied to a by torch
    when that is the model's output (checked once, on the first batch, against the model run in cattr: state is a
    one-element list holding True, False or None), saving a pass per batch; else the model run in cattr."""
    import torch

    if state[0] is False:
        return passes.output(xs)
    with torch.no_grad():
        mine = module(a)
    if state[0] is None:
        out = passes.output(xs)
        scale = float(out.abs().max()) if out.numel() else 0.0
        state[0] = bool(mine.shape == out.shape and torch.allclose(mine.to(out.dtype), out, rtol=1e-5,
                                                                    atol=1e-6 * max(scale, 1e-30)))
        return out
    return mine


def _loss_seed(loss_fn, reduction, out, targets):
    """d(sum over the examples of each one's loss) / d(output), from torch's autograd on the output alone: Captum's
    per-example loss gradients (a "mean" loss scaled by the batch size, as Captum's sample-wise gradients are; no
    loss: the output itself)."""
    import torch

    out = out.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        if loss_fn is None:
            return torch.ones_like(out)
        loss = loss_fn(out, targets)
        if reduction == "none":
            assert loss.dim() != 0 and loss.shape[0] == out.shape[0], (
                "Loss function is applying a reduction. Please ensure Output shape: %s and Loss shape: %s are "
                "matching." % (tuple(out.shape), tuple(loss.shape)))
            loss = loss.sum()
        else:
            assert loss.dim() == 0 or loss.numel() == 1, "Please ensure custom loss function is applying either a " \
                                                         "sum or mean reduction."
        (g,) = torch.autograd.grad(loss, out)
    return g * out.shape[0] if reduction == "mean" else g


def _total_loss(loss_fn, out, targets, reduction):
    """A batch's total loss, as Captum's influence functions take it for the Hessian: the per-example losses summed
    (reduction "none"), the loss as it is ("sum"), the mean times the batch size ("mean"); no loss: the output's
    sum."""
    if loss_fn is None:
        return out.sum()
    loss = loss_fn(out, targets)
    if reduction == "none":
        return loss.sum()
    if reduction == "mean":
        return loss * out.shape[0]
    return loss


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


# =================================================================================================================
# TracIn
# =================================================================================================================

class TracInCPBase(DataInfluence):
    """Captum's TracInCPBase: the model, the training data (a Dataset, batched by batch_size without shuffling, or
    a DataLoader whose batches end with the labels), the checkpoints (a folder, whose files are taken in natural
    order, or a list of paths), checkpoints_load_func(model, path) -> learning rate, and the losses."""

    def __init__(self, model, train_dataset, checkpoints, checkpoints_load_func=_load_flexible_state_dict,
                 loss_fn=None, batch_size=1, test_loss_fn=None):
        self.model = model
        self.checkpoints = checkpoints
        self.checkpoints_load_func = checkpoints_load_func
        self.loss_fn = loss_fn
        self.test_loss_fn = loss_fn if test_loss_fn is None else test_loss_fn
        self.batch_size = batch_size
        self.train_dataloader = _loader(train_dataset, batch_size, "train_dataset")
        self.train_dataloader_len = _length(self.train_dataloader)
        if self.train_dataloader_len is None:
            _warn_no_length("training dataset `train_dataset`", "computations")
        self._passes = _Passes(model)

    @property
    def checkpoints(self):
        return self._checkpoints

    @checkpoints.setter
    def checkpoints(self, checkpoints):
        if isinstance(checkpoints, str):
            found = _natural(glob.glob(os.path.join(checkpoints, "*")))
        elif isinstance(checkpoints, list) and checkpoints and isinstance(checkpoints[0], str):
            found = _natural(checkpoints)
        else:
            found = list(checkpoints)
        if len(found) <= 0:
            raise ValueError("Invalid checkpoints provided for TracIn class: %s!" % (checkpoints,))
        self._checkpoints = found

    def _load(self, checkpoint):
        assert checkpoint is not None, "None returned from `checkpoints`, cannot load."
        return self.checkpoints_load_func(self.model, checkpoint)

    def _score_blocks(self, test, show_progress, desc):
        """The scores of the training batches ([test examples, batch] each, in order): each checkpoint loaded once,
        its test quantities made once (_test_side), every training batch's (_train_side) dotted with them and
        summed over the checkpoints in their order (Captum's sums, Captum's loop turned inside out)."""
        blocks = []
        total = self.train_dataloader_len * len(self.checkpoints) if self.train_dataloader_len else None
        bar = _Progress(None, desc, total) if show_progress else None
        for c, checkpoint in enumerate(self.checkpoints):
            lr = self._load(checkpoint)
            t = self._test_side(test)
            for b, batch in enumerate(self.train_dataloader):
                sc = self._dot(t, self._train_side(batch)) * lr
                if c == 0:
                    blocks.append(sc)
                else:
                    blocks[b] = blocks[b] + sc
                if bar is not None:
                    bar.update()
        if bar is not None:
            bar.close()
        return blocks

    def _influence_or_top(self, test, k, proponents, show_progress):
        import torch

        if k is None:
            desc = "Using %s to compute influence for training batches" % self.get_name()
            return torch.cat(self._score_blocks(test, show_progress, desc), dim=1)
        desc = "Using %s to perform computation for getting %s. Processing training batches" % (
            self.get_name(), "proponents" if proponents else "opponents")
        return _top_k(self._score_blocks(test, show_progress, desc), k, proponents)

    def _self_influence_by_checkpoints(self, inputs, show_progress=False):
        """Per checkpoint, every batch's squared gradient norms (self._self_batch), summed over checkpoints."""
        loader = _batches(inputs)
        if show_progress and _length(loader) is None:
            _warn_no_length("`inputs`", "the computation of self influence scores")
        import torch

        total = None
        bar = _Progress(None, "Using %s to compute self influence. Processing checkpoint" % self.get_name(),
                        len(self.checkpoints)) if show_progress else None
        for checkpoint in self.checkpoints:
            lr = self._load(checkpoint)
            desc = "Using %s to compute self influence. Processing batch" % self.get_name()
            part = torch.cat([self._self_batch(batch) * lr
                              for batch in _maybe_progress(loader, show_progress, desc)], dim=0)
            total = part if total is None else total + part
            if bar is not None:
                bar.update()
        if bar is not None:
            bar.close()
        return total

    def self_influence(self, inputs=None, show_progress=False, outer_loop_by_checkpoints=False):
        """The influence of each example on itself (the sum over checkpoints of its squared loss-gradient norm
        times the learning rate); inputs default to the training data."""
        inputs = inputs if inputs is not None else self.train_dataloader
        if outer_loop_by_checkpoints:
            return self._self_influence_by_checkpoints(inputs, show_progress)
        return _self_influence_by_batches(self._self_influence_by_checkpoints, self.get_name(), inputs,
                                          show_progress)


def _unsupported(m):
    """Why module m's per-example parameter gradients cannot be formed from its input and output gradient ("" when
    they can)."""
    import torch

    if isinstance(m, torch.nn.Linear):
        return ""
    if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d)):
        if isinstance(m.padding, str) and m.padding != "valid":
            return " (padding '%s')" % m.padding
        return "" if m.padding_mode == "zeros" else " (padding_mode '%s')" % m.padding_mode
    if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
        return "" if not m.training and m.track_running_stats else " (in training mode: the batch's statistics " \
                                                                   "tie the examples together)"
    if isinstance(m, torch.nn.LayerNorm):
        return ""
    return " (a kind cattr has no per-example rule for)"


def _per_example(m, a, g):
    """{parameter name: [batch, *parameter shape]}: each example's gradient of module m's parameters from its input a
    and the gradient g at its output (the same example's rows), exactly."""
    import torch
    import torch.nn.functional as F

    n = a.shape[0]
    if isinstance(m, torch.nn.Linear):  # y = x W^T + b over every leading position
        a3, g3 = a.reshape(n, -1, a.shape[-1]), g.reshape(n, -1, g.shape[-1])
        return {"weight": g3.transpose(1, 2) @ a3, "bias": g3.sum(1)}
    if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d)):  # the weight's gradient: output gradient x unfolded input
        two = isinstance(m, torch.nn.Conv2d)
        a4, g4 = (a, g) if two else (a.unsqueeze(2), g.unsqueeze(2))
        k = m.kernel_size if two else (1,) + tuple(m.kernel_size)
        pad = (0, 0) if m.padding == "valid" else (m.padding if two else (0,) + tuple(m.padding))
        u = F.unfold(a4, k, dilation=m.dilation if two else (1,) + tuple(m.dilation), padding=pad,
                     stride=m.stride if two else (1,) + tuple(m.stride))  # [n, in * kh * kw, L]
        grp = m.groups
        u = u.reshape(n, grp, -1, u.shape[-1])
        go = g4.reshape(n, grp, -1, u.shape[-1])  # [n, groups, out / groups, L]
        w = (go @ u.transpose(2, 3)).reshape((n,) + tuple(m.weight.shape))
        return {"weight": w, "bias": g4.reshape(n, g4.shape[1], -1).sum(2)}
    if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):  # eval mode: y = (x - mean) / sqrt(var + eps) w + b
        shape = (1, -1) + (1,) * (a.dim() - 2)
        xh = (a - m.running_mean.reshape(shape)) / torch.sqrt(m.running_var.reshape(shape) + m.eps)
        dims = tuple(d for d in range(a.dim()) if d not in (0, 1))
        return {"weight": (g * xh).sum(dims) if dims else g * xh, "bias": g.sum(dims) if dims else g}
    if isinstance(m, torch.nn.LayerNorm):  # over the last len(normalized_shape) dims of each position
        nd = len(m.normalized_shape)
        red = tuple(range(a.dim() - nd, a.dim()))
        mean = a.mean(red, keepdim=True)
        var = a.var(red, unbiased=False, keepdim=True)
        xh = (a - mean) / torch.sqrt(var + m.eps)
        lead = tuple(range(1, a.dim() - nd))
        return {"weight": (g * xh).sum(lead) if lead else g * xh, "bias": g.sum(lead) if lead else g}
    raise NotImplementedError("cattr: no per-example gradient rule for %s" % type(m).__name__)


class _ParamGrads:
    """Each example's gradients with respect to the parameters of the model's layers (self.model, self.layer_modules:
    None for every parameter), from the layers' inputs and output gradients computed in cattr (self._passes), and
    second derivatives with respect to the same parameters (Hessian-vector products, cattr_explainer_param_hvp)."""

    def _linear_layers(self):
        """The Linear modules whose parameters the gradients are of, in the order of the parameters (Captum's:
        model.parameters(), or each layer's), with their paths."""
        import torch

        roots = self.layer_modules if self.layer_modules is not None else [self.model]
        out = []
        for root in roots:
            for m in root.modules():
                own = list(m.parameters(recurse=False))
                if not own:
                    continue
                why = _unsupported(m)
                if why:
                    raise NotImplementedError(
                        "cattr: TracInCP computes per-example parameter gradients of Linear, Conv1d, Conv2d, "
                        "BatchNorm (in eval mode) and LayerNorm layers; the module %s (%s) has parameters too%s: give "
                        "`layers` of those kinds" % (_module_path(self.model, m), type(m).__name__, why))
                if all(m is not o for o, _ in out):
                    out.append((m, _module_path(self.model, m)))
        assert out, "No parameters are available for modules for provided input `layers`"
        return out

    def _jacobians(self, batch, loss_fn, reduction):
        """The per-example gradients of each parameter (weight, then bias, of each Linear layer in order), each
        [batch, *parameter shape]."""
        xs, targets = _as_tuple(batch[0:-1]), batch[-1]
        paths = [p for _, p in self._linears]
        try:
            acts = self._passes.layer_inputs(xs, paths)
        except _lib.ArgumentError as e:
            gone = [p for p in paths if "named '%s'" % p in str(e)]
            if not gone:
                raise
            raise NotImplementedError(
                "cattr: the module %s has no node of its own in the model's export (the exporter folded it: a "
                "BatchNorm right after a convolution becomes part of it in eval mode), so its gradients cannot be "
                "taken apart: give `layers` without it" % gone[0]) from e
        out = _output_from_layer(self._last_is_output, self._passes, xs, self._linears[-1][0], acts[-1])
        seed = _loss_seed(loss_fn if targets is not None else None, reduction, out, targets)
        grads = self._passes.output_grads(xs, paths, seed)
        res = []
        for (m, _), a, g in zip(self._linears, acts, grads):
            per = _per_example(m, a, g)
            res += [per[name] for name, _p in m.named_parameters(recurse=False)]
        return tuple(r.to(self._dtype(r)) for r in res)

    def _dtype(self, r):
        return next(self.model.parameters()).dtype

    def _init_params(self, model, loss_fn, test_loss_fn, sample_wise_grads_per_batch, layers):
        """The losses' reductions (Captum's checks), the layers' modules and their parameters' layers."""
        self.reduction_type = _check_loss_fn(loss_fn, "loss_fn", sample_wise_grads_per_batch)
        self.test_reduction_type = self.reduction_type if test_loss_fn is None else \
            _check_loss_fn(test_loss_fn, "test_loss_fn", sample_wise_grads_per_batch)
        self.layer_modules = None
        if layers is not None:
            assert isinstance(layers, list), "`layers` should be a list!"
            assert len(layers) > 0, "`layers` cannot be empty!"
            assert isinstance(layers[0], str), "`layers` should contain str layer names."
            self.layer_modules = [_module_of(model, p) for p in layers]
        self._linears = self._linear_layers()
        self._last_is_output = [None]  # whether the last Linear layer's output is the model's (_output_from_layer)

    def _param_names(self):
        """The parameters' names in the model (module path + "." + parameter name: the names of the export's
        weights) and the parameters, in the order of the jacobians."""
        names, params = [], []
        for m, path in self._linears:
            for name, prm in m.named_parameters(recurse=False):
                names.append(path + "." + name if path else name)
                params.append(prm)
        return names, params

    def _hvp(self, batch, vs, loss_fn, reduction):
        """The Hessian of the batch's total loss (Captum's: the per-example losses summed, a "mean" loss times the
        batch size) with respect to the parameters, times the direction vs (a tuple of the parameters' shapes)."""
        return self._hvp_many(batch, [vs], loss_fn, reduction)[0]

    def _hvp_many(self, batch, directions, loss_fn, reduction):
        """_hvp for each direction of a list, exactly: H v = J^T H_L J v + sum_o dL/dF_o H(F_o) v, the two model
        terms from cattr's double backward (cattr_explainer_param_hvp: J v and the seeded product in one pass, J^T w
        in a second), the loss's own Hessian H_L by torch's autograd on the output alone (any loss Captum takes;
        formed whole once per batch when the output is small). The cattr passes of all directions share one call
        setup per batch."""
        import torch

        xs, targets = _as_tuple(batch[0:-1]), batch[-1]
        names, params = self._param_names()
        out = self._passes.output(xs)
        o = out.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            total = _total_loss(loss_fn, o, targets, reduction)
            (g,) = torch.autograd.grad(total, o, create_graph=True)
        first = self._passes.param_products(xs, names, params, [(g.detach(), vs) for vs in directions])
        if not g.requires_grad:  # a loss linear in the output: no term of its own
            return [tuple(hv) for _, _, hv in first]
        H = None
        if o.numel() < len(directions) and o.numel() <= 4096:  # the loss's Hessian at the output, formed once
            rows = []
            for i in range(o.numel()):
                (r,) = torch.autograd.grad(g.reshape(-1)[i], o, retain_graph=True, allow_unused=True)
                rows.append(torch.zeros_like(o).reshape(-1) if r is None else r.reshape(-1))
            H = torch.stack(rows)
        ws = []
        for _, jv, _ in first:
            if H is not None:
                ws.append((H @ jv.to(H.dtype).reshape(-1)).reshape(o.shape))
            else:
                (w,) = torch.autograd.grad(g, o, grad_outputs=jv.to(g.dtype), retain_graph=True, allow_unused=True)
                ws.append(torch.zeros_like(o) if w is None else w)
        second = self._passes.param_products(xs, names, params, [(w.detach(), None) for w in ws])
        return [tuple(a + b for a, b in zip(hv, jtw)) for (_, _, hv), (jtw, _, _) in zip(first, second)]


class TracInCP(TracInCPBase, _ParamGrads):
    """Captum's TracInCP: the gradients with respect to the parameters of `layers` (module paths; default every
    parameter of the model), which must be those of Linear, Conv1d, Conv2d, BatchNorm (eval mode) or LayerNorm
    layers (each example's gradient formed from the layer's input and the gradient at its output, exactly)."""

    def __init__(self, model, train_dataset, checkpoints, checkpoints_load_func=_load_flexible_state_dict,
                 layers=None, loss_fn=None, batch_size=1, test_loss_fn=None, sample_wise_grads_per_batch=False):
        TracInCPBase.__init__(self, model, train_dataset, checkpoints, checkpoints_load_func, loss_fn, batch_size,
                              test_loss_fn)
        self.sample_wise_grads_per_batch = sample_wise_grads_per_batch
        self._init_params(model, loss_fn, test_loss_fn, sample_wise_grads_per_batch, layers)

    def _sum_jacobians(self, loader, loss_fn, reduction):
        total = None
        for batch in loader:
            js = tuple(j.sum(0, keepdim=True) for j in self._jacobians(batch, loss_fn, reduction))
            total = js if total is None else tuple(t + j for t, j in zip(total, js))
        return total

    def _concat_jacobians(self, loader, loss_fn, reduction):
        import torch

        parts = [self._jacobians(batch, loss_fn, reduction) for batch in loader]
        return tuple(torch.cat(p, dim=0) for p in zip(*parts))

    def compute_intermediate_quantities(self, inputs, aggregate=False):
        """Each example's gradients, flattened and concatenated over the parameters and then the checkpoints (each
        times its learning rate): [examples (1 with aggregate: their sum), parameters x checkpoints]."""
        import torch

        loader = _batches(inputs)
        parts = []
        for checkpoint in self.checkpoints:
            lr = self._load(checkpoint)
            js = self._sum_jacobians(loader, self.loss_fn, self.reduction_type) if aggregate else \
                self._concat_jacobians(loader, self.loss_fn, self.reduction_type)
            parts.append(lr * torch.cat([j.flatten(start_dim=1) for j in js], dim=1))
        return torch.cat(parts, dim=1)

    def _test_side(self, test):
        loader, aggregate = test
        # (Captum's: the test loss with the training loss's reduction)
        return self._sum_jacobians(loader, self.test_loss_fn, self.reduction_type) if aggregate else \
            self._concat_jacobians(loader, self.test_loss_fn, self.reduction_type)

    def _train_side(self, batch):
        return self._jacobians(batch, self.loss_fn, self.reduction_type)

    @staticmethod
    def _dot(test, train):
        return sum(_batch_dot(a, b) for a, b in zip(test, train))

    def influence(self, inputs, k=None, proponents=True, show_progress=False, aggregate=False):
        """Influence scores of every training example on each example of inputs (a tuple whose last element is the
        labels, or a DataLoader of such batches): [test examples (1 with aggregate), training examples]; with k,
        the k most influential (proponents, or opponents) as KMostInfluentialResults."""
        assert inputs is not None, "`inputs` argument is required.If you wish to calculate self influence scores, " \
                                   "please use the `self_influence` method instead."
        return self._influence_or_top((_batches(inputs), aggregate), k, proponents, show_progress)

    def _self_batch(self, batch):
        import torch

        js = self._jacobians(batch, self.loss_fn, self.reduction_type)
        return torch.stack([j.reshape(j.shape[0], -1).pow(2).sum(1) for j in js]).sum(0)


class TracInCPFast(TracInCPBase):
    """Captum's TracInCPFast: the gradients with respect to the last fully-connected layer (`final_fc_layer`, a
    module or its path), whose output is the model's: each example's is the outer product of the loss gradient at
    the output and the layer's input, so that two examples' dot product is the product of those two dot products."""

    def __init__(self, model, final_fc_layer, train_dataset, checkpoints,
                 checkpoints_load_func=_load_flexible_state_dict, loss_fn=None, batch_size=1, test_loss_fn=None,
                 vectorize=False):
        TracInCPBase.__init__(self, model, train_dataset, checkpoints, checkpoints_load_func, loss_fn, batch_size,
                              test_loss_fn)
        self.vectorize = vectorize
        self.final_fc_layer = final_fc_layer
        assert loss_fn is not None, "loss function must not be none"
        self.reduction_type = _check_loss_fn(loss_fn, "loss_fn")
        self.test_reduction_type = self.reduction_type if test_loss_fn is None else \
            _check_loss_fn(test_loss_fn, "test_loss_fn")

    @property
    def final_fc_layer(self):
        return self._final_fc_layer

    @final_fc_layer.setter
    def final_fc_layer(self, layer):
        import torch

        if isinstance(layer, str):
            try:
                module = _module_of(self.model, layer)
                if not isinstance(module, torch.nn.Module):
                    raise ValueError("No module found for final_fc_layer")
            except Exception as ex:
                raise ValueError('Invalid final_fc_layer str: "%s" provided!' % layer) from ex
            layer = module
        self._final_fc_layer = layer
        self._fc_path = _module_path(self.model, layer)
        self._fc_is_output = [None]  # whether its output is the model's (_output_from_layer)

    def _basic(self, batch, loss_fn, reduction):
        """(the loss gradients at the output [batch, outputs], the final layer's inputs [batch, inputs])."""
        assert loss_fn is not None, "loss function is required"
        assert reduction in ("sum", "mean"), 'reduction_type must be either "mean" or "sum"'
        if hasattr(loss_fn, "reduction"):
            assert loss_fn.reduction == reduction, ("loss_fn.reduction `%s` does not matchreduction type `%s`. Please "
                                                    "ensure they are matching." % (loss_fn.reduction, reduction))
        xs, targets = _as_tuple(batch[0:-1]), batch[-1]
        (a,) = self._passes.layer_inputs(xs, [self._fc_path])
        out = _output_from_layer(self._fc_is_output, self._passes, xs, self._final_fc_layer, a)
        seed = _loss_seed(loss_fn, reduction, out, targets)
        assert seed.dim() == 2, "the loss gradient at the output must be [batch, outputs]"
        return seed.to(a.dtype), a.reshape(a.shape[0], -1)

    def _test_side(self, test):
        return self._basic(test, self.test_loss_fn, self.test_reduction_type)

    def _train_side(self, batch):
        return self._basic(batch, self.loss_fn, self.reduction_type)

    @staticmethod
    def _dot(test, train):
        return _batch_dot(test[0], train[0]) * _batch_dot(test[1], train[1])

    def influence(self, inputs, k=None, proponents=True, show_progress=False):
        """As TracInCP.influence (inputs: a tuple whose last element is the labels)."""
        assert inputs is not None, "`inputs` argument is required.If you wish to calculate self influence scores, " \
                                   "please use the `self_influence` method instead."
        return self._influence_or_top(inputs, k, proponents, show_progress)

    def _self_batch(self, batch):
        g, a = self._basic(batch, self.loss_fn, self.reduction_type)
        return g.pow(2).sum(1) * a.pow(2).sum(1)


class NearestNeighbors:
    """Captum's interface for the k nearest neighbours by dot product of TracInCPFastRandProj: setup(data [n, d]),
    get_nearest_neighbors(query [m, d], k) -> (indices [m, k], dot products [m, k])."""

    def setup(self, data):
        raise NotImplementedError

    def get_nearest_neighbors(self, query, k):
        raise NotImplementedError


class ExactNearestNeighbors(NearestNeighbors):
    """The k largest dot products, exactly (torch.topk over every stored row): cattr's default for
    TracInCPFastRandProj, where Captum's is Annoy's approximate index (not a Debian package)."""

    def setup(self, data):
        self.data = data.reshape(len(data), -1)

    def get_nearest_neighbors(self, query, k):
        import torch

        scores = query.reshape(len(query), -1) @ self.data.T
        vals, idx = torch.topk(scores, min(k, scores.shape[1]), dim=1)
        return idx, vals


class TracInCPFastRandProj(TracInCPFast):
    """Captum's TracInCPFastRandProj: TracInCPFast with every training example's gradient (the outer product of its
    loss gradient at the output and the last layer's input, times the square root of each checkpoint's learning
    rate) computed once, at construction, and kept; with projection_dim, both factors first projected by Gaussian
    matrices (torch's generator seeded with `seed`, as Captum draws them) so that the kept vectors have about
    projection_dim entries. influence() is then one product with them, and the k most influential come from
    nearest_neighbors (default: ExactNearestNeighbors, exact; Captum's default is Annoy's approximate index)."""

    def __init__(self, model, final_fc_layer, train_dataset, checkpoints,
                 checkpoints_load_func=_load_flexible_state_dict, loss_fn=None, batch_size=1, test_loss_fn=None,
                 vectorize=False, nearest_neighbors=None, projection_dim=None, seed=0):
        import torch

        TracInCPFast.__init__(self, model, final_fc_layer, train_dataset, checkpoints, checkpoints_load_func,
                              loss_fn, batch_size, test_loss_fn, vectorize)
        warnings.warn("WARNING: Using this implementation stores quantities related to the entire `train_dataset` in "
                      "memory, and may results in running out of memory. If this happens, consider using "
                      "`TracInCPFast` instead, for which each call to `influence` to compute influence scores or "
                      "proponents will be slower, but may avoid running out of memory.", stacklevel=2)
        self.nearest_neighbors = ExactNearestNeighbors() if nearest_neighbors is None else nearest_neighbors
        self.projection_dim = projection_dim
        torch.manual_seed(seed)
        self.projection_quantities = self._projections()
        self.src_intermediate_quantities = self._quantities(self.train_dataloader, test=False)
        self.nearest_neighbors.setup(self.src_intermediate_quantities)

    def _projections(self):
        """The two Gaussian projections (of the loss gradients and of the layer inputs), or None."""
        import torch

        d = self.projection_dim
        if d is None:
            return None
        self._load(next(iter(self.checkpoints)))
        g, a = self._basic(next(iter(self.train_dataloader)), self.loss_fn, self.reduction_type)
        jd, ad = g.shape[1], a.shape[1]
        if jd * ad <= d:
            return None
        jp, ap = min(int(d ** 0.5), jd), min(int(d ** 0.5), ad)
        pj = torch.normal(torch.zeros(jd, jp), 1.0 / jp ** 0.5)
        pa = torch.normal(torch.zeros(ad, ap), 1.0 / ap ** 0.5)
        return pj.to(dtype=g.dtype), pa.to(dtype=a.dtype)

    def _quantities(self, inputs, test=False):
        """Every example's (projected) gradient, each checkpoint's times the square root of its learning rate,
        concatenated over the checkpoints: [examples, ...]."""
        import torch

        loader = _batches(inputs)
        loss_fn, red = (self.test_loss_fn, self.test_reduction_type) if test else (self.loss_fn, self.reduction_type)
        per_ckpt = []
        for checkpoint in self.checkpoints:
            root = self._load(checkpoint) ** 0.5
            rows = []
            for batch in loader:
                g, a = self._basic(batch, loss_fn, red)
                if self.projection_quantities is not None:
                    g, a = g @ self.projection_quantities[0], a @ self.projection_quantities[1]
                rows.append((g.unsqueeze(2) @ a.unsqueeze(1)).flatten(start_dim=1) * root)
            per_ckpt.append(torch.cat(rows, dim=0))
        return torch.cat(per_ckpt, dim=1)

    def compute_intermediate_quantities(self, inputs):
        return self._quantities(inputs, test=False)

    def influence(self, inputs=None, k=5, proponents=True):
        """Influence scores [test examples, training examples] (k=None), or the k most influential (default 5)."""
        assert inputs is not None, ("`inputs` argument is required.`TracInCPFastRandProj` does not support computing "
                                    "self influence scoresEven if it did, one would use the `self_influence` method.")
        q = self._quantities(inputs, test=True)
        if k is None:
            return q @ self.src_intermediate_quantities.T
        sign = 1 if proponents else -1
        idx, dist = self.nearest_neighbors.get_nearest_neighbors(q * sign, k)
        return KMostInfluentialResults(idx, dist * sign)

    def self_influence(self, inputs=None, show_progress=False, outer_loop_by_checkpoints=False):
        warnings.warn("WARNING: If calculating self influence scores, when only considering gradients with respect to "
                      "the last fully-connected layer, `TracInCPFastRandProj` should not be used. Instead, please use "
                      "`TracInCPFast`.", stacklevel=2)
        raise NotImplementedError


# =================================================================================================================
# Influence functions
# =================================================================================================================

def _top_eigen(H, k, hessian_reg, hessian_inverse_tol):
    """Captum's low-rank square root's eigenpairs: the eigenvalues of H + hessian_reg I (ascending, real parts of
    torch.linalg.eig's, as Captum's) above hessian_inverse_tol, the top k of them, each eigenvector's sign chosen so
    that its entries sum above zero."""
    import torch

    H = H + torch.eye(len(H), dtype=H.dtype) * hessian_reg
    ls, vs = torch.linalg.eig(H)
    ls, vs = ls.real, vs.real
    order = torch.argsort(ls)
    ls, vs = ls[order], vs[:, order]
    keep = ls > hessian_inverse_tol
    ls, vs = ls[keep], vs[:, keep]
    if k is not None:
        ls, vs = ls[-k:], vs[:, -k:]
    return ls, vs * (2 * (torch.sum(vs, dim=0) > 0) - 1).unsqueeze(0)


def _pdot(a, b):
    return sum(float((x * y).sum()) for x, y in zip(a, b))


class InfluenceFunctionBase(DataInfluence, _ParamGrads):
    """Captum's InfluenceFunctionBase: one checkpoint (loaded at construction by checkpoints_load_func), the training
    data and the data of the Hessian (hessian_dataset, default the training data), the losses and the layers whose
    parameters the Hessian is of (default every parameter; Linear, Conv1d, Conv2d, BatchNorm in eval mode and
    LayerNorm layers, as TracInCP's)."""

    def __init__(self, model, train_dataset, checkpoint, checkpoints_load_func=_load_flexible_state_dict,
                 layers=None, loss_fn=None, batch_size=1, hessian_dataset=None, test_loss_fn=None,
                 sample_wise_grads_per_batch=False):
        import torch

        self.model = model
        self.checkpoint = checkpoint
        self.checkpoints_load_func = checkpoints_load_func
        checkpoints_load_func(model, checkpoint)
        self.loss_fn = loss_fn
        self.test_loss_fn = loss_fn if test_loss_fn is None else test_loss_fn
        self.sample_wise_grads_per_batch = sample_wise_grads_per_batch
        self.batch_size = batch_size
        self.train_dataloader = _loader(train_dataset, batch_size, "train_dataset")
        self.hessian_dataloader = self.train_dataloader if hessian_dataset is None else \
            _loader(hessian_dataset, batch_size, "shared_dataset")  # (Captum's message names it so)
        self._passes = _Passes(model)
        self._init_params(model, loss_fn, test_loss_fn, sample_wise_grads_per_batch, layers)
        for m, path in self._linears:
            if not isinstance(m, torch.nn.Linear):
                raise NotImplementedError(
                    "cattr: the influence functions take the Hessian with respect to the parameters of Linear layers "
                    "(their second derivatives run through cattr's double backward); the module %s (%s) has "
                    "parameters too: give `layers` of Linear modules" % (path, type(m).__name__))
        self.model_device = next(model.parameters()).device

    def _dataset_hvp(self, vs, show_progress):
        """The Hessian of the Hessian data's total loss times vs, summed over its batches."""
        total = None
        loader = _maybe_progress(self.hessian_dataloader, show_progress, "processing `hessian_dataset` batch")
        for batch in loader:
            hv = self._hvp(batch, vs, self.loss_fn, self.reduction_type)
            total = hv if total is None else tuple(a + b for a, b in zip(total, hv))
        return total

    def _embeddings(self, inputs, aggregate, test, show_progress):
        import torch

        loader = _batches(inputs)
        loss_fn = self.test_loss_fn if test else self.loss_fn
        reduction = self.test_reduction_type if test else self.reduction_type
        if show_progress and _length(loader) is None:
            _warn_no_length("`inputs_dataset`", "the computation of intermediate quantities")
        desc = "Using %s to compute intermediate quantities. Processing batch" % self.get_name()
        parts = [self._batch_embeddings(self._jacobians(batch, loss_fn, reduction))
                 for batch in _maybe_progress(loader, show_progress, desc)]
        if aggregate:
            return torch.stack([p.sum(0) for p in parts]).sum(0, keepdim=True)
        return torch.cat(parts, dim=0)

    def compute_intermediate_quantities(self, inputs_dataset, aggregate=False, show_progress=False,
                                        return_on_cpu=True, test=False):
        """Each example's vector (its loss gradient projected on the inverse Hessian's square root), such that two
        examples' influence is the dot product of their vectors: [examples (1 with aggregate: their sum),
        projection dim]. test: with the test loss."""
        return self._embeddings(inputs_dataset, aggregate, test, show_progress)

    def influence(self, inputs, k=None, proponents=True, show_progress=False):
        """The influence of every training example on each example of inputs (a tuple whose last element is the
        labels, or a DataLoader of such batches): [test examples, training examples]; with k, the k most
        influential (proponents, or opponents) as KMostInfluentialResults."""
        import torch

        if k is None:
            test = self.compute_intermediate_quantities(inputs, show_progress=show_progress, test=True)
            loader = _maybe_progress(self.train_dataloader, show_progress,
                                     "Using %s to compute influence for training batches" % self.get_name())
            return torch.cat([test @ self.compute_intermediate_quantities(b).T for b in loader], dim=1)
        # (Captum's: the test examples' vectors with the training loss here)
        test = self.compute_intermediate_quantities(inputs)
        desc = "Using %s to perform computation for getting %s. Processing training batches" % (
            self.get_name(), "proponents" if proponents else "opponents")
        blocks = (test @ self.compute_intermediate_quantities(b).T
                  for b in _maybe_progress(self.train_dataloader, show_progress, desc))
        return _top_k(blocks, k, proponents)

    def self_influence(self, inputs_dataset=None, show_progress=False):
        """Each example's influence on itself (its vector's squared norm); inputs default to the training data."""
        import torch

        loader = _batches(inputs_dataset if inputs_dataset is not None else self.train_dataloader)
        desc = "Using %s to compute self influence scores. Processing batch" % self.get_name()
        return torch.cat([(self.compute_intermediate_quantities(b) ** 2).sum(1)
                          for b in _maybe_progress(loader, show_progress, desc)])


class NaiveInfluenceFunction(InfluenceFunctionBase):
    """Captum's NaiveInfluenceFunction: the Hessian of the total loss over the Hessian data with respect to the
    parameters formed whole (a Hessian-vector product per parameter, each exact: cattr's double backward), then its
    top projection_dim eigenpairs above hessian_inverse_tol (after adding hessian_reg) give R with H^-1 ~ R R^T; an
    example's vector is its loss gradient times R."""

    def __init__(self, model, train_dataset, checkpoint, checkpoints_load_func=_load_flexible_state_dict,
                 layers=None, loss_fn=None, batch_size=1, hessian_dataset=None, test_loss_fn=None,
                 sample_wise_grads_per_batch=False, projection_dim=50, seed=42, hessian_reg=1e-6,
                 hessian_inverse_tol=1e-5, projection_on_cpu=True, show_progress=False):
        import torch

        InfluenceFunctionBase.__init__(self, model, train_dataset, checkpoint, checkpoints_load_func, layers,
                                       loss_fn, batch_size, hessian_dataset, test_loss_fn,
                                       sample_wise_grads_per_batch)
        self.projection_dim = projection_dim
        torch.manual_seed(seed)
        self.hessian_reg = hessian_reg
        self.hessian_inverse_tol = hessian_inverse_tol
        H = self._hessian(show_progress)
        ls, vs = _top_eigen(H, projection_dim, hessian_reg, hessian_inverse_tol)
        if len(ls) == 0:
            raise Exception("Hessian has no positive eigenvalues, so cannot take its square root.")
        self.R = ((1.0 / ls) ** 0.5).unsqueeze(0) * vs

    def _hessian(self, show_progress):
        """H, [parameters, parameters] flattened in the jacobians' order: column i the Hessian-vector product of
        the i-th unit vector."""
        import torch

        _, params = self._param_names()
        shapes = [p.shape for p in params]
        sizes = [p.numel() for p in params]
        n = sum(sizes)
        dtype = params[0].dtype
        H = torch.zeros(n, n, dtype=dtype)
        chunk = 256  # directions per round of passes (their products are held at once)
        nb = _length(self.hessian_dataloader)
        bar = _Progress(None, "Forming the Hessian (one product per parameter and batch)",
                        nb * ((n + chunk - 1) // chunk) if nb else None) if show_progress else None
        for batch in self.hessian_dataloader:
            for c0 in range(0, n, chunk):
                dirs = []
                for i in range(c0, min(n, c0 + chunk)):
                    e = torch.zeros(n, dtype=dtype)
                    e[i] = 1
                    dirs.append(tuple(t.reshape(s) for t, s in zip(torch.split(e, sizes), shapes)))
                hv = self._hvp_many(batch, dirs, self.loss_fn, self.reduction_type)
                H[:, c0:c0 + len(dirs)] += torch.stack([torch.cat([h.reshape(-1) for h in col]) for col in hv], dim=1)
                if bar is not None:
                    bar.update()
        if bar is not None:
            bar.close()
        return H

    def _batch_embeddings(self, jacobians):
        import torch

        flat = torch.cat([j.reshape(j.shape[0], -1) for j in jacobians], dim=1)
        return flat @ self.R.to(flat.dtype)


class ArnoldiInfluenceFunction(InfluenceFunctionBase):
    """Captum's ArnoldiInfluenceFunction: the Arnoldi iteration (Schioppa et al., "Scaling up influence functions",
    AAAI 2022) over Hessian-vector products of the Hessian data's total loss (each exact: cattr's double backward),
    from a random start (torch's generator seeded with `seed`, as Captum's), at most arnoldi_dim steps, stopping when
    a new vector's norm falls below arnoldi_tol; the top projection_dim eigenpairs of the Krylov restriction (after
    hessian_reg, above hessian_inverse_tol) give the projections."""

    def __init__(self, model, train_dataset, checkpoint, checkpoints_load_func=_load_flexible_state_dict,
                 layers=None, loss_fn=None, batch_size=1, hessian_dataset=None, test_loss_fn=None,
                 sample_wise_grads_per_batch=False, projection_dim=50, seed=0, arnoldi_dim=200, arnoldi_tol=1e-1,
                 hessian_reg=1e-3, hessian_inverse_tol=1e-4, projection_on_cpu=True, show_progress=False):
        import torch

        InfluenceFunctionBase.__init__(self, model, train_dataset, checkpoint, checkpoints_load_func, layers,
                                       loss_fn, batch_size, hessian_dataset, test_loss_fn,
                                       sample_wise_grads_per_batch)
        self.projection_dim = projection_dim
        torch.manual_seed(seed)
        self.arnoldi_dim = arnoldi_dim
        self.arnoldi_tol = arnoldi_tol
        self.hessian_reg = hessian_reg
        self.hessian_inverse_tol = hessian_inverse_tol
        _, params = self._param_names()
        b = tuple(torch.randn_like(p) for p in params)
        qs, H = self._arnoldi(b, arnoldi_dim, arnoldi_tol, show_progress)
        qs, H = qs[:-1], H[:-1]
        if len(qs) == 0:
            raise Exception("Arnoldi basis is empty. Consider increasing the `arnoldi_tol` argument")
        ls, vs = _top_eigen(H, projection_dim, hessian_reg, hessian_inverse_tol)
        if vs.shape[1] == 0:
            raise Exception("Restriction of Hessian to Krylov subspace has no positive eigenvalues, so cannot take "
                            "its square root.")
        scale = (1.0 / ls) ** 0.5
        self.R = []
        for c, l in zip(vs.T, scale):
            v = tuple(sum(float(ck) * q[j] for ck, q in zip(c, qs)) for j in range(len(b)))
            self.R.append(tuple(t * l for t in v))

    def _arnoldi(self, b, n, tol, show_progress):
        """The Arnoldi iteration on parameter tuples (Trefethen and Bau, lecture 33): the orthonormal basis qs of
        the Krylov space of b and the (n + 1) x n upper Hessenberg H with A Q_n = Q_{n+1} H, both cut where a new
        vector's norm fell below tol."""
        import torch

        H = torch.zeros(n + 1, n, dtype=b[0].dtype)
        norm = _pdot(b, b) ** 0.5
        qs = [tuple(t / norm for t in b)]
        bar = _Progress(None, "Running Arnoldi Iteration for step", n) if show_progress else None
        k = 1
        for k in range(1, n + 1):
            v = self._dataset_hvp(qs[k - 1], False)
            for i in range(k):
                H[i, k - 1] = _pdot(qs[i], v)
                v = tuple(a - H[i, k - 1] * q for a, q in zip(v, qs[i]))
            H[k, k - 1] = _pdot(v, v) ** 0.5
            if bar is not None:
                bar.update()
            if H[k, k - 1] < tol:
                break
            qs.append(tuple(a / H[k, k - 1] for a in v))
        if bar is not None:
            bar.close()
        return qs[:k], H[:k, :k - 1]

    def _batch_embeddings(self, jacobians):
        import torch

        cols = []
        for r in self.R:
            c = None
            for j, p in zip(jacobians, r):
                t = (j * p.to(j.dtype).unsqueeze(0)).sum(dim=tuple(range(1, j.dim())))
                c = t if c is None else c + t
            cols.append(c)
        return torch.stack(cols, dim=1)



# =================================================================================================================
# SimilarityInfluence
# =================================================================================================================

def euclidean_distance(test, train):
    """Captum's: the Euclidean distance of every test example's activation to every training example's: [test,
    train]."""
    import torch

    return torch.cdist(test.reshape(test.shape[0], -1).unsqueeze(0),
                       train.reshape(train.shape[0], -1).unsqueeze(0)).squeeze(0)


def cosine_similarity(test, train, replace_nan=0):
    """Captum's: the cosine similarity of every test example's activation to every training example's, [test,
    train]; a zero vector's entries become replace_nan."""
    import torch

    t, s = test.reshape(test.shape[0], -1), train.reshape(train.shape[0], -1)
    tn = torch.linalg.norm(t, ord=2, dim=1, keepdim=True)
    sn = torch.linalg.norm(s, ord=2, dim=1, keepdim=True)
    fill = torch.tensor([float(replace_nan)], dtype=t.dtype)
    t = torch.where(tn != 0.0, t / tn, fill)
    s = torch.where(sn != 0.0, s / sn, fill).T
    return t @ s


class SimilarityInfluence(DataInfluence):
    """Captum's SimilarityInfluence: the training examples whose activations at `layers` are the most similar
    (similarity_metric; similarity_direction "max" for a similarity, "min" for a distance) to each test example's.
    The training data's activations are computed by cattr batch by batch (batch_size) and saved where Captum saves
    them (activation_dir/av/MODEL_ID/src/LAYER/N.pt) for later calls (load_src_from_disk). With the cosine
    similarity, the pairs involving a zero activation vector are listed under "zero_acts-LAYER", as Captum does."""

    def __init__(self, module, layers, influence_src_dataset, activation_dir, model_id="",
                 similarity_metric=cosine_similarity, similarity_direction="max", batch_size=1, **kwargs):
        from functools import partial

        from torch.utils.data import DataLoader

        self.module = module
        self.layers = [layers] if isinstance(layers, str) else list(layers)
        self.influence_src_dataset = influence_src_dataset
        self.activation_dir = activation_dir
        self.model_id = model_id
        self.batch_size = batch_size
        if similarity_direction not in ("max", "min"):
            raise ValueError("%s is not a valid value. Must be either 'max' or 'min'" % similarity_direction)
        self.similarity_direction = similarity_direction
        if similarity_metric is cosine_similarity:
            self.replace_nan = kwargs.get("replace_nan", -2 if similarity_direction == "max" else 2)
            similarity_metric = partial(cosine_similarity, replace_nan=self.replace_nan)
        self.similarity_metric = similarity_metric
        self.influence_src_dataloader = DataLoader(influence_src_dataset, batch_size, shuffle=False)
        self._acts = {}

    def _activations(self, x, layers, additional_forward_args=None):
        """The activations at the layers (a list), one cattr pass."""
        from .attr import LayerActivation

        m = self._acts.get(tuple(layers))
        if m is None:
            m = self._acts[tuple(layers)] = LayerActivation(self.module, list(layers))
        return m.attribute(x, additional_forward_args=additional_forward_args)

    def _folder(self, layer):
        return os.path.join(self.activation_dir, "av", self.model_id, "src", layer)

    def _src_files(self, load_src_from_disk):
        """{layer: the training activations' files, one per batch}: computed and saved where missing (every layer
        when not load_src_from_disk), all the layers a batch needs in one pass."""
        import torch

        todo = [l for l in self.layers
                if not load_src_from_disk or not glob.glob(os.path.join(self._folder(l), "*.pt"))]
        if todo:
            if not load_src_from_disk:
                warnings.warn("Overwriting activations: load_from_disk is set to False. Removing all activations "
                              "matching specified parameters {path: %s, model_id: %s, layers: %s, identifier: src} "
                              "before generating new activations." % (self.activation_dir, self.model_id, todo),
                              stacklevel=3)
            for layer in todo:
                for f in glob.glob(os.path.join(self._folder(layer), "*.pt")):
                    os.remove(f)
            for i, batch in enumerate(self.influence_src_dataloader):
                for layer, a in zip(todo, self._activations(batch, todo)):
                    os.makedirs(self._folder(layer), exist_ok=True)
                    torch.save(a.detach(), os.path.join(self._folder(layer), "%d.pt" % i))
        return {l: _natural(glob.glob(os.path.join(self._folder(l), "*.pt"))) for l in self.layers}

    def influence(self, inputs, top_k=1, additional_forward_args=None, load_src_from_disk=True, **kwargs):
        """{layer: (indices [test, top_k], similarities [test, top_k])} of the most similar training examples."""
        import torch

        n = inputs[0].shape[0] if isinstance(inputs, tuple) else inputs.shape[0]
        files = self._src_files(load_src_from_disk)
        test = self._activations(inputs, self.layers, additional_forward_args)
        largest = self.similarity_direction == "max"
        out = {}
        for layer, t in zip(self.layers, test):
            vals = torch.Tensor()
            idx = torch.Tensor().long()
            zero = torch.Tensor().long()
            for j, f in enumerate(files[layer]):
                src = torch.load(f)
                sim = self.similarity_metric(t, src)
                assert sim.shape == (n, src.shape[0]), (
                    "Output of custom similarity does not meet required dimensions. Your output has shape %s.\n"
                    "Please ensure the output shape matches (inputs_batch_size, src_dataset_batch_size), which "
                    "should be %s." % (sim.shape, (n, self.batch_size)))
                if hasattr(self, "replace_nan"):
                    zero = torch.cat((zero, (sim == self.replace_nan).nonzero()))
                v, i = torch.topk(sim, min(top_k, src.shape[0]), dim=1, largest=largest)
                i = i + j * self.batch_size
                vals = torch.cat((vals.to(v.dtype), v), dim=1)
                idx = torch.cat((idx, i), dim=1)
                order = torch.argsort(vals, dim=1, descending=largest)
                vals = torch.gather(vals, 1, order[:, :top_k])
                idx = torch.gather(idx, 1, order[:, :top_k])
            out[layer] = (idx, vals)
            if zero.numel():
                warnings.warn("Layer %s has zero-vector activations for some inputs. This may cause undefined "
                              "behavior for cosine similarity. The indices for the offending inputs will be included "
                              "under the key 'zero_acts-%s' in the output dictionary. Indices are returned as a "
                              "tensor with [inputs_idx, src_dataset_idx] pairs which may have corrupted similarity "
                              "scores." % (layer, layer), RuntimeWarning, stacklevel=2)
                out["zero_acts-" + layer] = zero
        return out
