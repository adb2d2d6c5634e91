"""Captum's captum.metrics on cattr: the same functions, names and arguments.

    from cattr.metrics import infidelity, infidelity_perturb_func_decorator, sensitivity_max

infidelity's perturbation function is the caller's Python function (called as Captum calls it: on the inputs
repeated per sample, in the same sub-batches, so that random draws come out the same); the model's passes at the
inputs and at every perturbed input, and the metric's sums, run in cattr (cattr_infidelity: batched forward passes
with the target selected on the device, torch's summation order). The forward function is what cattr's attribution
classes take: a cattr.Model, a torch.nn.Module or a callable of torch tensors.

sensitivity_max calls the explanation function (a cattr method's attribute, or any function of the inputs) on the
inputs and on each sub-batch of perturbed inputs with the target, baselines and additional arguments expanded as
Captum expands them; the norms and the maximum per example run in cattr (cattr_sensitivity_max).
"""
import copy
import ctypes
import inspect
import math
import warnings

import numpy as np

from . import _lib
from ._core import _TensorList, _is_torch, _ptr_array, tensor_to_numpy, to_numpy
from ._lib import check, lib
from .attr import Attribution, _to_tuple

__all__ = ["infidelity", "infidelity_perturb_func_decorator", "sensitivity_max", "default_perturb_func",
           "deletion_insertion", "model_randomization", "rank_correlation"]


def _safe_div(num, den, default=1.0):
    """num / den, with `default` where den is 0 (Captum's safe_div)."""
    if isinstance(den, (int, float)):
        return num / (den if den != 0 else default)
    if _is_torch(num) or _is_torch(den):
        import torch

        den = den if _is_torch(den) else torch.as_tensor(den)
        return num / torch.where(den != 0, den, torch.tensor(default, dtype=den.dtype, device=den.device))
    den = np.asarray(den)
    return num / np.where(den != 0, den, np.asarray(default, dtype=den.dtype))


def infidelity_perturb_func_decorator(multiply_by_inputs=True):
    """Makes a function that returns perturbed inputs into one that returns (perturbations, perturbed inputs), as
    Captum's decorator: perturbation = (input - perturbed) / (input - baseline) when multiply_by_inputs (a zero
    denominator taken as 1; the baseline 0 without baselines), else input - perturbed."""

    def deco(perturb_func):
        def default_perturb_func(inputs, baselines=None):
            perturbed = perturb_func(inputs, baselines) if baselines is not None else perturb_func(inputs)
            xs, _ = _to_tuple(inputs)
            ps, _ = _to_tuple(perturbed)
            if baselines is None:
                bs = (None,) * len(xs)
            else:
                bs, _ = _to_tuple(baselines)
                if len(bs) == 1 and len(xs) > 1:
                    bs = bs * len(xs)
            out = []
            for x, p, b in zip(xs, ps, bs):
                diff = x - p
                if not multiply_by_inputs:
                    out.append(diff)
                else:
                    out.append(_safe_div(diff, x if b is None else x - b, 1.0))
            return tuple(out), tuple(ps)

        return default_perturb_func

    return deco


def _repeat_interleave(x, n):
    if _is_torch(x):
        import torch

        return torch.repeat_interleave(x, n, dim=0)
    return np.repeat(np.asarray(x), n, axis=0)


def _chunks(bsz, n_perturb_samples, max_examples_per_batch):
    """The samples per sub-batch, as Captum's _divide_and_aggregate_metrics cuts them (with its warning)."""
    if max_examples_per_batch is not None and (max_examples_per_batch // bsz < 1 or
                                               max_examples_per_batch // bsz > n_perturb_samples):
        warnings.warn("`max_examples_per_batch` must be at least equal to the input batch size and at most to "
                      "`input batch size` * `n_perturb_samples`.`max_examples_per_batch` is: {} and the input batch "
                      "size is: {}. This is necessary because we require that each sub-batch that is used to compute "
                      "the metrics, contains at least an instance of the original example and doesn't exceed the "
                      "number of expanded n_perturb_samples.".format(max_examples_per_batch, bsz), stacklevel=3)
    m = n_perturb_samples if max_examples_per_batch is None else \
        min(max(max_examples_per_batch // bsz, 1), n_perturb_samples)
    out, done = [m], m
    while done < n_perturb_samples:
        k = min(m, n_perturb_samples - done)
        out.append(k)
        done += k
    return m, out


class _Forward(Attribution):
    """The model's forward passes for a metric: an explainer of a forward-only method (its passes, device, dtype and
    the call's target and additional inputs), whose method is not run."""

    _captum_name = "FeatureAblation"


def infidelity(forward_func, perturb_func, inputs, attributions, baselines=None, additional_forward_args=None,
               target=None, n_perturb_samples=10, max_examples_per_batch=None, normalize=False):
    """Captum's infidelity: per example, the mean over n_perturb_samples perturbations I of
    (I . attribution - (F(x) - F(x - I)))^2, with `normalize` the attribution scaled by the beta that minimises it.
    perturb_func(inputs[, baselines]) -> (perturbations, perturbed inputs), called on the inputs repeated per sample
    (repeat_interleave); returns a tensor [batch] (numpy for numpy inputs)."""
    xs, _ = _to_tuple(inputs)
    ats, _ = _to_tuple(attributions)
    assert len(xs) == len(ats), (
        "The number of tensors in the inputs and attributions must match. Found number of tensors in the inputs is: "
        "{} and in the attributions: {}".format(len(xs), len(ats)))
    for x, a in zip(xs, ats):
        assert tuple(np.shape(x)) == tuple(np.shape(a)), (
            "Inputs and attributions must have matching shapes. One of the input tensor's shape is {} and the "
            "attribution tensor's shape is: {}".format(tuple(np.shape(x)), tuple(np.shape(a))))
    if not isinstance(n_perturb_samples, (int, np.integer)) or isinstance(n_perturb_samples, bool) or \
            n_perturb_samples < 1:
        raise _lib.ArgumentError("cattr: n_perturb_samples must be a positive int (got %r)" % (n_perturb_samples,))
    bsz = int(np.shape(xs[0])[0])
    m, sizes = _chunks(bsz, int(n_perturb_samples), max_examples_per_batch)
    bs = None
    if baselines is not None:
        bs, _ = _to_tuple(baselines)
        if len(bs) == 1 and len(xs) > 1:
            bs = bs * len(xs)
    n = int(n_perturb_samples)
    full_p = [None] * len(xs)
    full_x = [None] * len(xs)
    s0 = 0
    for k in sizes:  # Captum's calls of perturb_func, sub-batch by sub-batch
        xe = tuple(_repeat_interleave(x, k) for x in xs)
        be = None if bs is None else tuple(
            _repeat_interleave(b, k) if (_is_torch(b) or isinstance(b, np.ndarray)) and np.ndim(b) > 0 and
            np.shape(b)[0] == np.shape(x)[0] and np.shape(b)[0] > 1 else b for x, b in zip(xs, bs))
        if be is not None:
            pert = perturb_func(xe[0] if len(xe) == 1 else xe, be[0] if len(be) == 1 else be)
        else:
            pert = perturb_func(xe[0] if len(xe) == 1 else xe)
        ps, _ = _to_tuple(pert[0])
        px, _ = _to_tuple(pert[1])
        assert len(ps) == len(xs), (
            "The number of perturbed inputs and corresponding perturbations must have the same number of elements. "
            "Found number of inputs is: {} and perturbations: {}".format(len(ps), len(xs)))
        for p, q in zip(ps, px):
            assert tuple(np.shape(p)[1:]) == tuple(np.shape(q)[1:]), (
                "Perturbed input and corresponding perturbation must have the same shape and dimensionality. Found "
                "perturbation shape is: {} and the input shape is: {}".format(tuple(np.shape(p)[1:]),
                                                                            tuple(np.shape(q)[1:])))
        for i, x in enumerate(xs):
            shape = (bsz, n) + tuple(np.shape(x)[1:])
            if full_p[i] is None:
                full_p[i] = np.empty(shape, dtype=np.float64)
                full_x[i] = np.empty(shape, dtype=np.float64)
            pa = np.broadcast_to(np.asarray(to_numpy(ps[i]), dtype=np.float64), (bsz * k,) + shape[2:])
            xa = np.broadcast_to(np.asarray(to_numpy(px[i]), dtype=np.float64), (bsz * k,) + shape[2:])
            full_p[i][:, s0:s0 + k] = pa.reshape((bsz, k) + shape[2:])
            full_x[i][:, s0:s0 + k] = xa.reshape((bsz, k) + shape[2:])
        s0 += k
    full_p = [a.reshape((bsz * n,) + a.shape[2:]) for a in full_p]
    full_x = [a.reshape((bsz * n,) + a.shape[2:]) for a in full_x]

    runner = _metric_runner(forward_func)

    def invoke(e, call, mk):
        a_p = [mk(to_numpy(a), "attributions %d" % i) for i, a in enumerate(ats)]
        p_p = [mk(a, "perturbations %d" % i) for i, a in enumerate(full_p)]
        x_p = [mk(a, "perturbed inputs %d" % i) for i, a in enumerate(full_x)]
        out = _lib.TensorP()
        e.intr.run(lib.cattr_infidelity, e.h, ctypes.byref(call), _ptr_array(a_p), _ptr_array(p_p), _ptr_array(x_p),
                   n, 1 if normalize else 0, m, ctypes.byref(out))
        return tensor_to_numpy(out)

    res, _, torch_out = runner._run(inputs, {}, target=target, additional_forward_args=additional_forward_args,
                                    invoke=invoke)
    if torch_out:
        import torch

        return torch.from_numpy(res)
    return res


def _metric_runner(forward_func):
    runner = getattr(forward_func, "_cattr_metric_forward", None)
    if runner is None:
        runner = _Forward(forward_func)
        try:
            forward_func._cattr_metric_forward = runner  # one explainer (and its plans) per forward function
        except (AttributeError, TypeError):
            pass
    return runner


def deletion_insertion(forward_func, inputs, attributions, target=None, baselines=None, feature_mask=None,
                       additional_forward_args=None, mode="deletion", n_steps=20, softmax=False, steps_per_eval=None):
    """Beyond Captum: the deletion or insertion curve of attributions (Petsiuk et al. 2018, "RISE"). The features
    (the feature_mask's groups, else every element) are ranked per example by their summed attribution, largest
    first; at step k of n_steps the round(k F / n_steps) first are replaced by the baseline (deletion; zeros without
    baselines) or put back into the baseline (insertion), and the model's output at the target (softmax=True: its
    softmax's) is the curve's value. Returns (curve [batch, n_steps + 1], area under it over [0, 1] [batch]), tensors
    for torch inputs. A faithful attribution has a low deletion area and a high insertion area. steps_per_eval: the
    steps of every example per forward pass (None: all)."""
    if mode not in ("deletion", "insertion"):
        raise _lib.ArgumentError("cattr: mode must be 'deletion' or 'insertion', not %r" % (mode,))
    xs, _ = _to_tuple(inputs)
    ats, _ = _to_tuple(attributions)
    if len(xs) != len(ats):
        raise _lib.ArgumentError("cattr: %d inputs and %d attributions" % (len(xs), len(ats)))
    runner = _metric_runner(forward_func)

    def invoke(e, call, mk):
        a_p = [mk(to_numpy(a), "attributions %d" % i) for i, a in enumerate(ats)]
        curve, auc = _lib.TensorP(), _lib.TensorP()
        e.intr.run(lib.cattr_deletion_curve, e.h, ctypes.byref(call), _ptr_array(a_p), 1 if mode == "insertion" else 0,
                   int(n_steps), 1 if softmax else 0, int(steps_per_eval or 0), ctypes.byref(curve), ctypes.byref(auc))
        return tensor_to_numpy(curve), tensor_to_numpy(auc)

    (curve, auc), _, torch_out = runner._run(inputs, {}, baselines, target, additional_forward_args, feature_mask,
                                             invoke=invoke)
    if torch_out:
        import torch

        return torch.from_numpy(curve), torch.from_numpy(auc)
    return curve, auc


def rank_correlation(a, b, absolute=False):
    """Spearman's rank correlation per example of a and b (arrays or tensors of one shape [batch, ...], or tuples of
    them: an example's elements of all together), ties given their average rank (scipy.stats.spearmanr); absolute:
    of |a| and |b|. A numpy float64 array [batch] (NaN where one side is constant)."""
    xa, _ = _to_tuple(a)
    xb, _ = _to_tuple(b)
    if len(xa) != len(xb):
        raise _lib.ArgumentError("cattr: %d tensors against %d" % (len(xa), len(xb)))
    tl = _TensorList()
    try:
        pa = [tl.make(np.asarray(to_numpy(x), dtype=np.float64), _lib.FLOAT64, "a %d" % i) for i, x in enumerate(xa)]
        pb = [tl.make(np.asarray(to_numpy(x), dtype=np.float64), _lib.FLOAT64, "b %d" % i) for i, x in enumerate(xb)]
        out = _lib.TensorP()
        check(lib.cattr_rank_correlation(_ptr_array(pa), _ptr_array(pb), len(pa), 1 if absolute else 0,
                                         ctypes.byref(out)))
    finally:
        tl.free()
    return tensor_to_numpy(out)


def _rebind(attribution, forward_func):
    """The same method with the same options on another model."""
    from .attr import _torch_forward

    other = copy.copy(attribution)
    other.forward_func = forward_func
    other._torch = _torch_forward(forward_func)
    other._model_ = None
    other._explainers = {}
    return other


def model_randomization(attribution, inputs, attributions=None, modules=None, cascade=True, seed=0, **kwargs):
    """Beyond Captum: the model-randomisation check (Adebayo et al., "Sanity Checks for Saliency Maps", NeurIPS 2018).
    `attribution` is a cattr method bound to its model (e.g. IntegratedGradients(net)); it runs on inputs (with
    **kwargs: target, baselines, n_steps, ...) on copies of the model whose weights are drawn anew
    (cattr.Model.randomized: each tensor from a normal distribution of its own mean and standard deviation, cattr's
    generator under `seed`), module by module from the output down (modules: the list to use, output first; default
    every module with weights) cumulatively (cascade) or one at a time, and each result is compared with
    `attributions` (default: the method's on the model) by Spearman's rank correlation per example, signed and of
    absolute values. A PyTorch model is randomised in its cattr export (its module paths). Returns {"modules": [...],
    "spearman": [n_modules, batch], "spearman_abs": [n_modules, batch]} (numpy)."""
    if attributions is None:
        attributions = attribution.attribute(inputs, **kwargs)
    model = _exported_model(attribution, inputs, kwargs)
    mods = list(modules) if modules is not None else list(reversed(model.weight_modules()))
    if not mods:
        raise _lib.ArgumentError("cattr: the model has no module with weights to randomise")
    rows, rows_abs = [], []
    for k, name in enumerate(mods):
        copy_k = model.randomized(mods[:k + 1] if cascade else [name], seed)
        again = _rebind(attribution, copy_k).attribute(inputs, **kwargs)
        rows.append(rank_correlation(attributions, again))
        rows_abs.append(rank_correlation(attributions, again, absolute=True))
    return {"modules": mods, "spearman": np.stack(rows), "spearman_abs": np.stack(rows_abs)}


def _exported_model(attribution, inputs, kwargs):
    """The cattr Model the method runs: the Model it was given, or the export of its PyTorch forward function for
    these inputs."""
    if attribution._torch is None:
        return attribution._model
    xs, _ = _to_tuple(inputs)
    attribution._use_model_for(xs, _to_tuple(kwargs["additional_forward_args"])[0]
                               if kwargs.get("additional_forward_args") is not None else None, None)
    m = attribution._model_
    if m is None or not hasattr(m, "weight_modules"):
        raise _lib.ArgumentError("cattr: the forward function could not be exported as a model with weights")
    return m


def default_perturb_func(inputs, perturb_radius=0.02):
    """Captum's default perturbation for sensitivity_max: uniform noise from the L-infinity ball of radius
    perturb_radius added to every input (torch's generator for torch tensors, as Captum draws; numpy's for arrays).
    Returns a tuple."""
    xs, _ = _to_tuple(inputs)
    out = []
    for x in xs:
        if _is_torch(x):
            import torch

            out.append(x + torch.FloatTensor(x.size()).uniform_(-perturb_radius, perturb_radius).to(x.device))
        else:
            x = np.asarray(x)
            out.append(x + np.random.uniform(-perturb_radius, perturb_radius, x.shape).astype(np.float32))
    return tuple(out)


def _expand_target(target, k):
    if isinstance(target, list):
        return [t for t in target for _ in range(k)]
    if (_is_torch(target) and target.numel() > 1) or (isinstance(target, np.ndarray) and target.size > 1):
        return _repeat_interleave(target, k)
    return target


def _expand_kwargs(kwargs, inputs, k):
    """Captum's expansion of an explanation function's keyword arguments for k samples per example."""
    kw = copy.deepcopy(kwargs)
    if kw.get("additional_forward_args") is not None:
        af = kw["additional_forward_args"]
        af = af if isinstance(af, tuple) else (af,)
        kw["additional_forward_args"] = tuple(
            _repeat_interleave(a, k) if (_is_torch(a) or isinstance(a, np.ndarray)) and np.ndim(a) > 0 else a
            for a in af)
    if "target" in kw:
        kw["target"] = _expand_target(kw["target"], k)
    if "baselines" in kwargs:
        bs = kwargs["baselines"]
        bs = bs if isinstance(bs, tuple) else (bs,)
        if len(bs) == 1 and len(inputs) > 1:
            bs = bs * len(inputs)
        if (_is_torch(bs[0]) or isinstance(bs[0], np.ndarray)) and tuple(np.shape(bs[0])) == tuple(np.shape(inputs[0])):
            kw["baselines"] = tuple(
                _repeat_interleave(b, k) if (_is_torch(b) or isinstance(b, np.ndarray)) and np.ndim(b) > 0 and
                np.shape(b)[0] == np.shape(x)[0] and np.shape(b)[0] > 1 else b for x, b in zip(inputs, bs))
    return kw


def _norm_order(norm_ord):
    if norm_ord == "fro" or norm_ord == 2:
        return 2.0
    if isinstance(norm_ord, str):
        raise _lib.ArgumentError("cattr: norm_ord %r: give 'fro', 1, 2, inf, -inf or a positive number" % norm_ord)
    return float(norm_ord)


def _device_of(explanation_func):
    owner = getattr(explanation_func, "__self__", None)
    dev = getattr(getattr(owner, "_model_", None), "device", None) if owner is not None else None
    return dev if isinstance(dev, str) else None


def sensitivity_max(explanation_func, inputs, perturb_func=default_perturb_func, perturb_radius=0.02,
                    n_perturb_samples=10, norm_ord="fro", max_examples_per_batch=None, **kwargs):
    """Captum's sensitivity_max: per example, the largest over n_perturb_samples perturbations of
    ||explanation(x) - explanation(perturbed x)|| / ||explanation(x)||. explanation_func(inputs, **kwargs) is called
    on the inputs (as a tuple) and on each sub-batch of perturbed inputs (repeat_interleave order, kwargs' target,
    baselines and additional_forward_args expanded to match); returns a tensor [batch] (numpy for numpy inputs)."""
    xs, _ = _to_tuple(inputs)
    if not isinstance(n_perturb_samples, (int, np.integer)) or isinstance(n_perturb_samples, bool) or \
            n_perturb_samples < 1:
        raise _lib.ArgumentError("cattr: n_perturb_samples must be a positive int (got %r)" % (n_perturb_samples,))
    order = _norm_order(norm_ord)
    bsz = int(np.shape(xs[0])[0])
    _, sizes = _chunks(bsz, int(n_perturb_samples), max_examples_per_batch)
    torch_out = _is_torch(xs[0])
    device = _device_of(explanation_func)
    takes_radius = len(inspect.signature(perturb_func).parameters) > 1
    e0, _ = _to_tuple(explanation_func(xs, **kwargs))
    e0_p = [np.ascontiguousarray(to_numpy(a)) for a in e0]
    best = None
    kw, kw_for = None, None
    for k in sizes:
        xe = tuple(_repeat_interleave(x, k) for x in xs)
        xe = xe[0] if len(xe) == 1 else xe
        pert = perturb_func(xe, perturb_radius) if takes_radius else perturb_func(xe)
        if kw_for != k:
            kw, kw_for = _expand_kwargs(kwargs, xs, k), k
        e1, _ = _to_tuple(explanation_func(pert, **kw))
        e1_p = [np.ascontiguousarray(to_numpy(a)) for a in e1]
        tl = _TensorList()
        try:
            out = _lib.TensorP()
            a0 = [tl.make(a, None, "explanation %d" % i) for i, a in enumerate(e0_p)]
            a1 = [tl.make(a, None, "explanation of the perturbed inputs %d" % i) for i, a in enumerate(e1_p)]
            _lib.check(lib.cattr_sensitivity_max(device.encode() if device else None, _ptr_array(a0), _ptr_array(a1),
                                                 len(a0), k, order, ctypes.byref(out)))
            part = tensor_to_numpy(out)
        finally:
            tl.free()
        best = part if best is None else np.maximum(best, part)  # Captum's torch.max of the sub-batches
    if torch_out:
        import torch

        return torch.from_numpy(best)
    return best
