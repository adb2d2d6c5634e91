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

__all__ = ["FGSM", "PGD"]


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

