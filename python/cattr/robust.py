"""Captum's captum.robust attacks on cattr: FGSM and PGD, with Captum's classes, arguments and results.

    from cattr.robust import FGSM, PGD

The model's forward pass and the loss's gradient run in cattr: with Captum's default loss (-log(output) at the target)
the loss is on the graph, one pass per step (cattr_explainer_loss_grad); a loss_func (a function of (outputs,
target), e.g. torch.nn.CrossEntropyLoss(reduction="none")) is evaluated by torch on the output alone and its gradient
there seeds the gradient through the model (cattr_explainer_vjp: two passes a step), so any loss Captum takes works
and gives Captum's gradient at the output. The sign steps, projections and bounds are Captum's
elementwise formulas on the inputs; PGD's random start draws from torch's generator as Captum's does.
"""
import ctypes

import numpy as np

from . import _lib
from ._core import _is_torch, tensor_to_numpy, to_numpy
from ._lib import lib
from .attr import Attribution, _to_tuple

__all__ = ["FGSM", "PGD", "MinParamPerturbation", "AttackComparator"]


class _Gradient(Attribution):
    """The model's passes for an attack: an explainer of a gradient method (its passes, device and dtype, the call's
    additional inputs), whose method is not run."""

    _captum_name = "Saliency"


def _select(out, target):
    """Captum's _select_targets on a torch tensor."""
    import torch

    if target is None:
        return out
    if isinstance(target, (int, np.integer)):
        return out[:, int(target)]
    if isinstance(target, tuple):
        return out[(slice(None),) + tuple(target)]
    if _is_torch(target):
        if target.numel() == 1:
            return _select(out, int(target.item()))
        assert target.dim() == 1 and len(target) == len(out), "target must be one index per example"
        return out[torch.arange(len(out)), target.long()]
    if isinstance(target, list):
        assert len(target) == len(out), "Target list length does not match output!"
        if all(isinstance(t, (int, np.integer)) for t in target):
            return out[torch.arange(len(out)), torch.tensor(target)]
        return torch.stack([out[(i,) + tuple(t)] for i, t in enumerate(target)])
    raise AssertionError("Target type %r is not valid." % (type(target),))


def _clamp(x, lo, hi):
    """x within [lo, hi] (Captum's Perturbation.bound), torch or numpy."""
    if _is_torch(x):
        import torch

        return torch.clamp(x, min=lo, max=hi)
    return np.clip(x, lo, hi)


class FGSM:
    """Captum's Fast Gradient Sign Method: x' = x + epsilon * sign(grad of the loss) (minus for a targeted attack),
    where the gradient is above zero_thresh, times the mask; then the bounds."""

    def __init__(self, forward_func, loss_func=None, lower_bound=float("-inf"), upper_bound=float("inf")):
        self.forward_func = forward_func
        self.loss_func = loss_func
        self.lower_bound, self.upper_bound = lower_bound, upper_bound
        self.zero_thresh = 10 ** -6
        self._grad = None

    def bound(self, x):
        return _clamp(x, self.lower_bound, self.upper_bound)

    def __call__(self, *args, **kwargs):  # Captum's Perturbation: an attack is called as its perturb
        return self.perturb(*args, **kwargs)

    def _loss_grad(self, y, target):
        """d(sum of the per-example losses) / d(output) at output y (numpy), in y's dtype."""
        import torch

        yt = torch.from_numpy(np.array(y)).requires_grad_(True)
        with torch.enable_grad():
            if self.loss_func is not None:
                tgt = torch.as_tensor(target) if isinstance(target, (list, np.ndarray)) and \
                    all(isinstance(t, (int, np.integer)) for t in np.ravel(target)) else target
                loss = self.loss_func(yt, tgt)
            else:
                loss = _select(-torch.log(yt), target)
            loss = loss.sum() if loss.dim() > 0 else loss
            (g,) = torch.autograd.grad(loss, yt)
        return g.detach().numpy()

    def _graph_loss(self):
        """The loss as cattr computes it on the graph (cattr_loss), or None for a loss evaluated by torch on the output.
        Only Captum's default loss goes on the graph: torch's CrossEntropyLoss subtracts the maximum before the
        log-sum (its float32 log-probabilities round differently from the graph's LogSoftmax), and Captum's tests
        compare gradients with a 1e-6 threshold where the two cancel; on the output, torch gives Captum's exact
        gradient there."""
        return 0 if self.loss_func is None else None  # CATTR_LOSS_NLL_OUTPUT: -log(output) at the target

    def _gradients(self, xs, target, additional_forward_args):
        """The gradient of the loss with respect to every input (numpy): one pass in cattr with the loss on the graph
        (Captum's default loss, CrossEntropyLoss), else two (the output, then the gradient seeded with the loss's
        gradient at it, from torch's autograd on the output alone)."""
        if self._grad is None:
            self._grad = _Gradient(self.forward_func)
        runner = self._grad
        kind = self._graph_loss() if target is not None else None  # (the graph's loss needs a target)
        if kind is not None:
            def on_graph(e, call, mk):
                n = call.n_inputs
                grads = (_lib.TensorP * max(n, 1))()
                e.intr.run(lib.cattr_explainer_loss_grad, e.h, ctypes.byref(call), kind, grads, None)
                return [tensor_to_numpy(grads[i]) for i in range(n)]

            res, _, _ = runner._run(xs, {}, target=target, additional_forward_args=additional_forward_args,
                                    invoke=on_graph)
            return res

        def invoke(e, call, mk):
            n = call.n_inputs
            add = [] if additional_forward_args is None else [
                to_numpy(a) for a in _to_tuple(additional_forward_args)[0] if _is_torch(a) or isinstance(a, np.ndarray)]
            y = np.asarray(runner._model.forward(*([to_numpy(x) for x in xs] + add)))
            seed = self._loss_grad(y, target)
            grads = (_lib.TensorP * max(n, 1))()
            e.intr.run(lib.cattr_explainer_vjp, e.h, ctypes.byref(call), mk(seed, "the loss gradient"), grads, None)
            return [tensor_to_numpy(grads[i]) for i in range(n)]

        res, _, _ = runner._run(xs, {}, additional_forward_args=additional_forward_args, invoke=invoke)
        return res

    def perturb(self, inputs, epsilon, target, additional_forward_args=None, targeted=False, mask=None):
        xs, was_tuple = _to_tuple(inputs)
        masks = _to_tuple(mask)[0] if mask is not None else (1,) * len(xs)
        grads = self._gradients(xs, target, additional_forward_args)
        sign = -1 if targeted else 1
        out = []
        for x, g, m in zip(xs, grads, masks):
            if _is_torch(x):
                import torch

                gt = torch.from_numpy(g).to(x.dtype)
                mt = m.to(x.dtype) if _is_torch(m) else m
                out.append(self.bound(torch.where(torch.abs(gt) > self.zero_thresh,
                                                  x.detach() + sign * epsilon * torch.sign(gt) * mt, x.detach())))
            else:
                xa = np.asarray(x)
                out.append(self.bound(np.where(np.abs(g) > self.zero_thresh,
                                               xa + sign * epsilon * np.sign(g).astype(xa.dtype) * np.asarray(m), xa)))
        return tuple(out) if was_tuple else out[0]


class PGD:
    """Captum's Projected Gradient Descent: step_num FGSM steps of step_size from the inputs (or a random point of the
    radius' ball), each projected back into the L-infinity or L2 ball of the radius around the inputs, then
    bounded."""

    def __init__(self, forward_func, loss_func=None, lower_bound=float("-inf"), upper_bound=float("inf")):
        self.forward_func = forward_func
        self.fgsm = FGSM(forward_func, loss_func)
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def bound(self, x):
        return _clamp(x, self.lower_bound, self.upper_bound)

    def __call__(self, *args, **kwargs):
        return self.perturb(*args, **kwargs)

    @staticmethod
    def _clip(x, y, radius, norm):
        import torch

        d = y - x
        if norm == "Linf":
            return x + torch.clamp(d, -radius, radius)
        if norm == "L2":
            return x + torch.renorm(d, 2, 0, radius)
        raise AssertionError("Norm constraint must be L2 or Linf.")

    @staticmethod
    def _random_point(center, radius, norm, mask):
        import torch

        if norm == "L2":
            u = torch.randn_like(center)
            unit = torch.nn.functional.normalize(u.view(u.size(0), -1)).view(u.size())
            d = torch.numel(center[0])
            r = (torch.rand(u.size(0)) ** (1.0 / d)) * radius
            r = r[(...,) + (None,) * (r.dim() - 1)]
            return center + r * unit * mask
        if norm == "Linf":
            return center + (torch.rand_like(center) * radius * 2 - radius) * mask
        raise AssertionError("Norm constraint must be L2 or Linf.")

    def perturb(self, inputs, radius, step_size, step_num, target, additional_forward_args=None, targeted=False,
                random_start=False, norm="Linf", mask=None):
        import torch

        xs, was_tuple = _to_tuple(inputs)
        numpy_in = not _is_torch(xs[0])
        xs = tuple(torch.as_tensor(np.asarray(x)) if not _is_torch(x) else x.detach() for x in xs)
        masks = _to_tuple(mask)[0] if mask is not None else (1,) * len(xs)
        cur = xs
        if random_start:
            cur = tuple(self.bound(self._random_point(x, radius, norm, m)) for x, m in zip(xs, masks))
        for _ in range(step_num):
            cur = _to_tuple(self.fgsm.perturb(cur, step_size, target, additional_forward_args, targeted, masks))[0]
            cur = tuple(self._clip(x, y, radius, norm) for x, y in zip(xs, cur))
            cur = tuple(self.bound(y).detach() for y in cur)
        if numpy_in:
            cur = tuple(y.numpy() for y in cur)
        return tuple(cur) if was_tuple else cur[0]



# =================================================================================================================
# MinParamPerturbation and AttackComparator: Captum's robustness metrics, the model's passes in cattr
# =================================================================================================================

class _ModelRunner:
    """The model's forward pass for the robustness metrics: a PyTorch forward function (module, function of
    tensors) or a cattr Model runs in cattr (exported once per input shape, as the attribution methods do); any
    other callable (one that takes strings, a remote service) is called as it is."""

    def __init__(self, forward_func):
        self.forward_func = forward_func
        self._runners = {}
        from .attr import _model_of, _torch_forward

        try:
            _model_of(forward_func)
            self._cattr = True
        except TypeError:
            self._cattr = _torch_forward(forward_func) is not None

    def __call__(self, inputs, additional_forward_args):
        add = tuple(additional_forward_args) if additional_forward_args is not None else ()
        xs, was_tuple = _to_tuple(inputs)
        if not self._cattr or not all(_is_torch(x) or isinstance(x, np.ndarray) for x in xs):
            return self.forward_func(inputs, *add)
        # Captum calls forward_func(inputs, *additional_forward_args): a tuple of inputs is one argument, so the
        # exported function takes its tensors and passes them on as that tuple
        key = len(xs) if was_tuple else 0
        runner = self._runners.get(key)
        if runner is None:
            f = self.forward_func
            fn = f if not was_tuple else _tuple_argument(f, len(xs))
            runner = self._runners[key] = _Gradient(fn)
        out = runner._output(xs, add)
        return out if _is_torch(xs[0]) else np.asarray(out)


def _tuple_argument(f, n):
    """f(inputs_tuple, *rest) as a function of the tuple's tensors and the rest (what the exporter traces; a closure,
    so that the exporter finds the modules f reaches)."""
    def call(*ts):
        return f(tuple(ts[:n]), *ts[n:])

    return call


def _cat(items):
    """Captum's _reduce_list with concatenation: tensors (or arrays) along dim 0, tuples element by element."""
    first = items[0]
    if isinstance(first, (tuple, list)):
        return type(first)(_cat([it[i] for it in items]) for i in range(len(first)))
    if _is_torch(first):
        import torch

        return torch.cat([x.to(first.device) for x in items])
    return np.concatenate([np.asarray(x) for x in items])


def _expand_args(args, n):
    """Captum's expansion of additional forward arguments for n inputs evaluated together: tensors repeated n times
    along dim 0 (0-d ones kept), anything else as it is."""
    if args is None:
        return None
    out = []
    for a in args:
        if _is_torch(a) and a.dim() > 0:
            import torch

            out.append(torch.cat([a] * n))
        elif isinstance(a, np.ndarray) and a.ndim > 0:
            out.append(np.concatenate([a] * n))
        else:
            out.append(a)
    return tuple(out)


def _rows(x):
    return x.shape[0] if hasattr(x, "shape") else x[0].shape[0]


def _format_args(a):
    return None if a is None else (a if isinstance(a, tuple) else (a,))


def default_correct_fn(model_out, target):
    """Captum's default: the prediction (argmax of a [N, C] output, a tensor or an array) equals the target for every
    example."""
    assert (_is_torch(model_out) or isinstance(model_out, np.ndarray)) and model_out.ndim == 2, \
        "Model output must be a 2D tensor to use default correct function; otherwise custom correct function " \
        "must be provided"
    pred = to_numpy(model_out).argmax(axis=1)
    return bool(np.all(pred == np.asarray(to_numpy(target) if _is_torch(target) else target)))


def _drange(lo, hi, step):
    v = lo
    while v < hi:
        yield v
        v += step


class MinParamPerturbationMode:
    LINEAR = "LINEAR"
    BINARY = "BINARY"


class MinParamPerturbation:
    """Captum's MinParamPerturbation: the smallest value of an attack's argument `arg_name` in [arg_min, arg_max)
    by arg_step (linear search, or binary search over the steps) for which the model's prediction on the attacked
    input is no longer correct (`correct_fn`, default: argmax equals the target). `evaluate` returns (the attacked
    input, the value), or (None, None) when no value changes the prediction. perturbations_per_eval attacked inputs
    are evaluated in one forward pass of the model (in cattr for a PyTorch function or a cattr Model)."""

    def __init__(self, forward_func, attack, arg_name, arg_min, arg_max, arg_step, mode="linear", num_attempts=1,
                 preproc_fn=None, apply_before_preproc=False, correct_fn=None):
        if not arg_max > arg_min + arg_step:
            raise AssertionError("Step size cannot be smaller than range between min and max")
        if str(mode).upper() not in ("LINEAR", "BINARY"):
            raise AssertionError("Provided perturb mode %s is not valid - must be linear or binary" % (mode,))
        self.forward_func = forward_func
        self.attack = attack
        self.arg_name, self.arg_min, self.arg_max, self.arg_step = arg_name, arg_min, arg_max, arg_step
        self.mode = str(mode).upper()
        self.num_attempts = num_attempts
        self.preproc_fn = preproc_fn
        self.apply_before_preproc = apply_before_preproc
        self.correct_fn = correct_fn if correct_fn is not None else default_correct_fn
        self._run = _ModelRunner(forward_func)

    def _first_incorrect(self, batch, add, correct_fn_kwargs, target):
        """The index of the first attacked input whose prediction is not correct, or None."""
        kw = {} if target is None else {"target": target}
        kw.update(correct_fn_kwargs or {})
        if len(batch) == 1:
            return None if self.correct_fn(self._run(batch[0], add), **kw) else 0
        out = self._run(_cat(batch), _expand_args(add, len(batch)))
        at = 0
        for i, x in enumerate(batch):
            n = _rows(x)
            if not self.correct_fn(out[at:at + n], **kw):
                return i
            at += n
        return None

    def _attacked(self, inputs, preproc_input, attack_kwargs, value):
        """(the attacked input as the model takes it, the attacked input as returned)"""
        kw = dict(attack_kwargs or {}, **{self.arg_name: value})
        if self.apply_before_preproc:
            x = self.attack(inputs, **kw)
            return (self.preproc_fn(x) if self.preproc_fn else x), x
        x = self.attack(preproc_input, **kw)
        return x, x

    def _linear(self, inputs, pre, attack_kwargs, add, correct_fn_kwargs, target, per_eval):
        batch, kept, values = [], [], []
        for v in _drange(self.arg_min, self.arg_max, self.arg_step):
            for _ in range(self.num_attempts):
                model_in, x = self._attacked(inputs, pre, attack_kwargs, v)
                batch.append(model_in)
                kept.append(x)
                values.append(v)
                if len(batch) == per_eval:
                    i = self._first_incorrect(batch, add, correct_fn_kwargs, target)
                    if i is not None:
                        return kept[i], values[i]
                    batch, kept, values = [], [], []
        if batch:
            i = self._first_incorrect(batch, add, correct_fn_kwargs, target)
            if i is not None:
                return kept[i], values[i]
        return None, None

    def _binary(self, inputs, pre, attack_kwargs, add, correct_fn_kwargs, target, per_eval):
        import math

        lo, hi = self.arg_min, self.arg_max
        best, best_input = None, None
        while hi > lo:
            k = ((hi - lo) // self.arg_step) // 2
            if k == 0 and lo + self.arg_step < hi:
                k = 1
            mid = lo + k * self.arg_step
            batch, kept = [], []
            found = False
            for a in range(self.num_attempts):
                model_in, x = self._attacked(inputs, pre, attack_kwargs, mid)
                batch.append(model_in)
                kept.append(x)
                if len(batch) == per_eval or a == self.num_attempts - 1:
                    i = self._first_incorrect(batch, add, correct_fn_kwargs, target)
                    if i is not None:
                        found = True
                        hi = mid
                        if best is None or best > mid:
                            best, best_input = mid, kept[i]
                        break
                    batch, kept = [], []
            if math.isclose(lo, mid):
                break
            if not found:
                lo = mid
        return best_input, best

    def evaluate(self, inputs, additional_forward_args=None, target=None, perturbations_per_eval=1,
                 attack_kwargs=None, correct_fn_kwargs=None):
        if perturbations_per_eval < 1:
            raise _lib.ArgumentError("cattr: perturbations_per_eval must be at least 1")
        add = _format_args(additional_forward_args)
        pre = self.preproc_fn(inputs) if self.preproc_fn else inputs
        search = self._linear if self.mode == MinParamPerturbationMode.LINEAR else self._binary
        return search(inputs, pre, attack_kwargs, add, correct_fn_kwargs, target, perturbations_per_eval)


def _float_tensor(x):
    """A number as Captum's Summarizer keeps it: a float32 tensor (numpy's float32 without torch)."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        return np.float32(x)
    return torch.tensor(x, dtype=torch.float)


class _Stats:
    """The running mean (and min and max) of a metric's values: numbers, tensors, arrays, or tuples of them
    (namedtuples keep their type in the summaries)."""

    def __init__(self, extremes):
        self.extremes = extremes
        self.n = 0
        self.mean = self.min = self.max = None

    def update(self, v):
        self.n += 1
        def keep(x):  # tensors and numpy values as they are; Python numbers as Captum's Summarizer keeps them
            return _is_torch(x) or isinstance(x, (np.ndarray, np.generic))

        if not isinstance(v, tuple) and not keep(v):
            v = _float_tensor(v)
        elif isinstance(v, tuple):
            v = type(v)(*(x if keep(x) else _float_tensor(x) for x in v)) if hasattr(v, "_fields") else \
                tuple(x if keep(x) else _float_tensor(x) for x in v)
        if isinstance(v, tuple):
            if self.mean is None:
                self.mean, self.min, self.max = [None] * len(v), [None] * len(v), [None] * len(v)
            for i, x in enumerate(v):
                self.mean[i], self.min[i], self.max[i] = self._one(self.mean[i], self.min[i], self.max[i], x)
            self._fields = v
        else:
            self.mean, self.min, self.max = self._one(self.mean, self.min, self.max, v)

    def _one(self, mean, lo, hi, x):
        x = x.detach() if _is_torch(x) else x
        if mean is None:
            # (Captum's Mean: a float tensor, double for an integer one)
            if _is_torch(x):
                return (x.clone() if x.is_floating_point() else x.double()), x, x
            return x, x, x
        mean = mean + (x - mean) / self.n
        if _is_torch(x):
            import torch

            return mean, torch.minimum(lo, x), torch.maximum(hi, x)
        return mean, np.minimum(lo, x), np.maximum(hi, x)

    def summary(self):
        keys = ("mean", "min", "max") if self.extremes else ("mean",)
        vals = {"mean": self.mean, "min": self.min, "max": self.max}
        if isinstance(self.mean, list):
            like = getattr(self, "_fields", None)
            make = type(like) if like is not None and hasattr(like, "_fields") else None
            return {k: (make(*vals[k]) if make else tuple(vals[k])) for k in keys}
        return {k: vals[k] for k in keys}


def _agg(v):
    """Captum's agg_metric: a tensor's mean over the batch, a tuple element by element, a number as it is."""
    if _is_torch(v):
        return v.mean(dim=0)
    if isinstance(v, np.ndarray):
        return v.mean(axis=0)
    if isinstance(v, tuple):
        return type(v)(*(_agg(x) for x in v)) if hasattr(v, "_fields") else tuple(_agg(x) for x in v)
    return v


ORIGINAL_KEY = "Original"


class AttackComparator:
    """Captum's AttackComparator: evaluates `metric(model_out, **kwargs)` on the original inputs and on each added
    attack's (or transform's) output, num_attempts times each; `evaluate` returns {"Original": mean, attack name:
    {"mean"} or, with several attempts, {"mean", "min", "max"}}, and `summary()` the means of these over every
    evaluate call since the last `reset()`. perturbations_per_eval inputs are evaluated in one forward pass of the
    model (in cattr for a PyTorch function or a cattr Model)."""

    def __init__(self, forward_func, metric, preproc_fn=None):
        self.forward_func = forward_func
        self.metric = metric
        self.preproc_fn = preproc_fn
        self.attacks = {}
        self.summary_results = {}
        self._run = _ModelRunner(forward_func)

    def add_attack(self, attack, name=None, num_attempts=1, apply_before_preproc=True, attack_kwargs=None,
                   additional_attack_arg_names=None):
        name = attack.__class__.__name__ if name is None else name
        if name in self.attacks:
            raise RuntimeError("Cannot add attack with same name as existing attack {}".format(name))
        self.attacks[name] = dict(fn=attack, name=name, num_attempts=num_attempts,
                                  apply_before_preproc=apply_before_preproc, kwargs=dict(attack_kwargs or {}),
                                  extra=list(additional_attack_arg_names or []))

    def _evaluate(self, batch, keys, add, stats, metric_kwargs):
        if len(batch) == 1:
            stats[keys[0]].update(self.metric(self._run(batch[0], add), **metric_kwargs))
            return
        out = self._run(_cat(batch), add)  # (add: expanded for the batch by the caller)
        at = 0
        for x, key in zip(batch, keys):
            n = _rows(x)
            stats[key].update(self.metric(out[at:at + n], **metric_kwargs))
            at += n

    def evaluate(self, inputs, additional_forward_args=None, perturbations_per_eval=1, **kwargs):
        import warnings

        if perturbations_per_eval < 1:
            raise _lib.ArgumentError("cattr: perturbations_per_eval must be at least 1")
        add = _format_args(additional_forward_args)
        full = _expand_args(add, perturbations_per_eval) if perturbations_per_eval > 1 else add
        pre = self.preproc_fn(inputs) if self.preproc_fn is not None else inputs
        stats = {ORIGINAL_KEY: _Stats(False)}
        batch, keys = [pre], [ORIGINAL_KEY]

        def flush_if_full():
            if len(batch) == perturbations_per_eval:
                self._evaluate(batch, keys, full, stats, kwargs)
                batch.clear()
                keys.clear()

        flush_if_full()
        for a in self.attacks.values():
            stats[a["name"]] = _Stats(a["num_attempts"] > 1)
            extra = {}
            for k in a["extra"]:
                if k not in kwargs:
                    warnings.warn("Additional sample arg %s not provided for %s" % (k, a["name"]), stacklevel=2)
                else:
                    extra[k] = kwargs[k]
            for _ in range(a["num_attempts"]):
                if a["apply_before_preproc"]:
                    x = a["fn"](inputs, **extra, **a["kwargs"])
                    x = self.preproc_fn(x) if self.preproc_fn else x
                else:
                    x = a["fn"](pre, **extra, **a["kwargs"])
                batch.append(x)
                keys.append(a["name"])
                flush_if_full()
        if batch:
            self._evaluate(batch, keys, _expand_args(add, len(batch)), stats, kwargs)
        results = {ORIGINAL_KEY: stats[ORIGINAL_KEY].summary()["mean"]}
        self._add(ORIGINAL_KEY, results[ORIGINAL_KEY])
        for a in self.attacks.values():
            res = stats[a["name"]].summary()
            results[a["name"]] = res
            if len(res) == 1:
                self._add(a["name"], res["mean"])
            else:
                for k, v in res.items():
                    self._add("%s %s Attempt" % (a["name"], k.title()), v)
        return results

    def _add(self, key, value):
        if key not in self.summary_results:
            self.summary_results[key] = _Stats(False)
        self.summary_results[key].update(_agg(value))

    def summary(self):
        return {k: s.summary() for k, s in self.summary_results.items()}

    def reset(self):
        self.summary_results = {}
