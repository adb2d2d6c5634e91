"""Lime and LimeBase with Python components (Captum's interpretable models other than a Lasso, similarity or
perturbation functions, transforms between the interpretable and the input space): the loop of Captum's LimeBase
runs here, in Python, calling the caller's functions where Captum calls them, and every forward pass of the model
runs in cattr (the batched perturbed inputs through the cattr Model of the call). With cattr's own components (a
Lasso, the exponential kernel, the default perturbations) the whole method runs inside the engine instead
(src/attr/lime.c); this module is the path for what only Python can run.

Data follow Captum: the interpretable samples, the outputs for the call's target and the similarities are gathered in
float32 and handed to interpretable_model.fit(DataLoader(TensorDataset(samples, outputs, weights), batch_size=all));
the result is interpretable_model.representation()."""
import inspect
import warnings

import numpy as np


def _torch():
    import torch

    return torch


def _tuple(x):
    return (tuple(x), True) if isinstance(x, (tuple, list)) else ((x,), False)


def default_mask(inputs):
    """Every scalar of every input its own feature, numbered across the inputs: (masks, number of features)."""
    torch = _torch()
    masks, k = [], 0
    for x in inputs:
        n = int(np.prod(x.shape[1:])) if x.dim() > 1 else 1
        masks.append((torch.arange(n, device=x.device) + k).reshape((1,) + tuple(x.shape[1:])))
        k += n
    return tuple(masks), k


def feature_mask_of(mask, inputs):
    """Captum's construct_feature_mask: the masks (ids shifted to start at 0) and the number of features."""
    torch = _torch()
    if mask is None:
        return default_mask(inputs)
    masks, _ = _tuple(mask)
    masks = tuple(torch.as_tensor(np.asarray(m)) if not torch.is_tensor(m) else m for m in masks)
    lo = min(int(torch.min(m).item()) for m in masks if m.numel())
    if lo != 0:
        warnings.warn("Minimum element in feature mask is not 0, shifting indices to start at 0.", stacklevel=3)
        masks = tuple(m - lo for m in masks)
    return masks, max(int(torch.max(m).item()) for m in masks if m.numel()) + 1


class LimeLoop:
    """The loop of LimeBase over an attribution object `owner` of cattr (its model runs the forward passes)."""

    def __init__(self, owner, interpretable_model, similarity_func, perturb_func, perturb_interpretable_space,
                 from_interp_rep_transform, to_interp_rep_transform):
        self.owner = owner
        self.model = interpretable_model
        self.similarity_func = similarity_func
        self.perturb_func = perturb_func
        self.interp_space = perturb_interpretable_space
        self.from_interp = from_interp_rep_transform
        self.to_interp = to_interp_rep_transform

    # -- the model, through cattr ----------------------------------------------------------------------------------
    def forward(self, inputs, target, add, n_rows):
        """The model's outputs for `target` on a batch (torch tensors), computed by cattr."""
        torch = _torch()
        from .attr import _select_target, _to_tuple

        o = self.owner
        xs = tuple(inputs)
        o._use_model_for(xs, add, None)
        extra = [a for a in (_to_tuple(add)[0] if add is not None else ()) if torch.is_tensor(a) or
                 isinstance(a, np.ndarray)]
        out = o._model.forward(*(list(xs) + list(extra)))
        out = out if torch.is_tensor(out) else torch.as_tensor(np.asarray(out))
        sel = _select_target(out.detach().numpy(), target, n_rows)
        return torch.as_tensor(np.asarray(sel))

    @staticmethod
    def expand_target(target, n):
        torch = _torch()
        if isinstance(target, list):
            return target * n
        if torch.is_tensor(target) and target.numel() > 1:
            return target.repeat(n)
        return target

    @staticmethod
    def expand_add(add, n):
        torch = _torch()
        if add is None:
            return None
        args, _ = _tuple(add)
        return tuple(a.repeat((n,) + (1,) * (a.dim() - 1)) if torch.is_tensor(a) and a.dim() > 0 else a
                     for a in args)

    def evaluate(self, batch, target, add):
        """One forward pass over the perturbed inputs gathered (Captum's _evaluate_batch)."""
        torch = _torch()
        n = len(batch)
        if isinstance(batch[0], (tuple, list)):
            inputs = tuple(torch.cat([b[j] for b in batch]) for j in range(len(batch[0])))
        else:
            inputs = (torch.cat(list(batch)),)
        rows = inputs[0].shape[0]
        out = self.forward(inputs, self.expand_target(target, n), self.expand_add(add, n), rows)
        if out.numel() != n and out.dim() > 0:
            raise AssertionError("Number of outputs is not appropriate, must return one output per perturbed input")
        return out.flatten()

    # -- LimeBase.attribute -------------------------------------------------------------------------------------------
    def base(self, inputs, target=None, additional_forward_args=None, n_samples=50, perturbations_per_eval=1,
             show_progress=False, **kwargs):
        torch = _torch()
        from torch.utils.data import DataLoader, TensorDataset

        with torch.no_grad():
            return self._base(inputs, target, additional_forward_args, n_samples, perturbations_per_eval,
                              show_progress, DataLoader, TensorDataset, **kwargs)

    def _base(self, inputs, target, additional_forward_args, n_samples, perturbations_per_eval, show_progress,
              DataLoader, TensorDataset, **kwargs):
        torch = _torch()
        from . import _lib

        if inspect.isgeneratorfunction(self.perturb_func):
            gen = self.perturb_func(inputs, **kwargs)
            draw = lambda: next(gen)  # noqa: E731
        else:
            draw = lambda: self.perturb_func(inputs, **kwargs)  # noqa: E731
        bar = _lib.ProgressBar(_lib.captum_name(type(self.owner).__name__)) if show_progress else None
        total = -(-n_samples // perturbations_per_eval)
        interp, sims, outs, batch = [], [], [], []
        for _ in range(n_samples):
            try:
                sample = draw()
            except StopIteration:
                warnings.warn("Generator completed prior to given n_samples iterations!", stacklevel=2)
                break
            if self.interp_space:
                interp_inp, model_inp = sample, self.from_interp(sample, inputs, **kwargs)
            else:
                model_inp, interp_inp = sample, self.to_interp(sample, inputs, **kwargs)
            interp.append(interp_inp)
            batch.append(model_inp)
            sim = self.similarity_func(inputs, model_inp, interp_inp, **kwargs)
            sims.append(sim.flatten() if torch.is_tensor(sim) else torch.tensor([sim]))
            if len(batch) == perturbations_per_eval:
                outs.append(self.evaluate(batch, target, additional_forward_args))
                batch = []
                if bar:
                    bar(len(outs), total)
        if batch:
            outs.append(self.evaluate(batch, target, additional_forward_args))
            if bar:
                bar(len(outs), total)
        if bar:
            bar.finish()
        x = torch.cat(interp).float()
        y = (torch.cat(outs) if outs[0].dim() > 0 else torch.stack(outs)).float()
        w = (torch.cat(sims) if sims[0].dim() > 0 else torch.stack(sims)).float()
        self.model.fit(DataLoader(TensorDataset(x, y, w), batch_size=len(interp)))
        return self.model.representation()

    # -- Lime.attribute --------------------------------------------------------------------------------------------
    def lime(self, inputs, baselines=None, target=None, additional_forward_args=None, feature_mask=None,
             n_samples=25, perturbations_per_eval=1, return_input_shape=True, show_progress=False, **kwargs):
        torch = _torch()
        from .attr import _to_tuple, _is_scalar

        xs, was_tuple = _tuple(inputs)
        xs = tuple(x if torch.is_tensor(x) else torch.as_tensor(np.asarray(x)) for x in xs)
        if baselines is None:
            bases = tuple(0.0 for _ in xs)
        else:
            bases, _ = _tuple(baselines)
            if len(bases) == 1 and len(xs) > 1:
                bases = bases * len(xs)
        bases = tuple(b if _is_scalar(b) or torch.is_tensor(b) else torch.as_tensor(np.asarray(b)) for b in bases)
        bsz = xs[0].shape[0]
        masks, n_feat = feature_mask_of(feature_mask, xs)

        def one(cur_in, cur_t, cur_add, cur_b, cur_m, lead_one):
            coefs = self.base(cur_in if was_tuple else cur_in[0], target=cur_t, additional_forward_args=cur_add,
                              n_samples=n_samples, perturbations_per_eval=perturbations_per_eval,
                              baselines=cur_b if was_tuple else cur_b[0],
                              feature_mask=cur_m if was_tuple else cur_m[0], num_interp_features=n_feat,
                              show_progress=show_progress, **kwargs)
            if not return_input_shape:
                return coefs
            return self.to_input_shape(cur_in, cur_m, coefs, lead_one)

        per_example = False
        if bsz > 1:
            out = self.forward(xs, target, additional_forward_args, bsz)
            per_example = out.numel() == bsz and out.numel() > 1
        if not per_example:
            res = one(xs, target, additional_forward_args, bases, masks, bsz > 1)
            return res if not return_input_shape else (res if was_tuple else res[0])
        parts = []
        for b in range(bsz):
            sl = slice(b, b + 1)
            cur_in = tuple(x[sl] for x in xs)
            cur_t = target
            if isinstance(target, list) or (torch.is_tensor(target) and target.numel() == bsz and bsz > 1):
                cur_t = target[b]
                cur_t = int(cur_t) if torch.is_tensor(cur_t) and cur_t.numel() == 1 else cur_t
            cur_add = None
            if additional_forward_args is not None:
                cur_add = tuple(a[sl] if torch.is_tensor(a) and a.dim() > 0 and a.shape[0] == bsz else a
                                for a in _to_tuple(additional_forward_args)[0])
            cur_b = tuple(b_[sl] if torch.is_tensor(b_) and b_.dim() > 0 and b_.shape[0] == bsz else b_ for b_ in bases)
            cur_m = tuple(m[sl] if m.dim() > 0 and m.shape[0] == bsz else m for m in masks)
            parts.append(one(cur_in, cur_t, cur_add, cur_b, cur_m, False))
        if not return_input_shape:
            return torch.cat(parts)
        out = tuple(torch.cat([p[j] for p in parts]) for j in range(len(xs)))
        return out if was_tuple else out[0]

    @staticmethod
    def to_input_shape(inputs, masks, coefs, lead_one):
        """The coefficient of each element's feature, in the inputs' shapes (one row when lead_one)."""
        torch = _torch()
        c = coefs.reshape(-1)
        out = []
        for x, m in zip(inputs, masks):
            a = c[m.long()].to(coefs.dtype)
            shape = ((1,) if lead_one else (x.shape[0],)) + tuple(x.shape[1:])
            out.append(torch.broadcast_to(a, shape).clone() if a.shape != shape else a)
        return tuple(out)
