"""Captum's LLMAttribution, LLMGradientAttribution and RemoteLLMAttribution over a PyTorch language model or a
remote provider (cattr.llm dispatches here when the attribution method's forward function is not a cattr LLM).

The features are the interpretable input's (TextTemplateInput slots, TextTokenInput tokens): the method attributes
`inp.to_tensor()` (a row of ones; 0 where a feature is replaced by its baseline). The forward function that turns a
perturbed row into the target's log-probabilities runs the torch model token by token in Python, as Captum's does, so
the perturbation methods run it as a host function (_callback.py): the perturbed rows, the sampling, the fits and the
sums are cattr's, the model's forward passes torch's. The gradient methods (LayerIntegratedGradients,
LayerGradientXActivation, LayerGradientShap at the embedding) run through the export of a function per target
position (_torch.py): the whole computation in cattr.
"""
import copy

import numpy as np

from . import _lib

DEFAULT_GEN_ARGS = {"max_new_tokens": 25, "do_sample": False}


def _torch():
    import torch

    return torch


class PlaceholderModel:
    """RemoteLLMAttribution.placeholder_model: the forward function an attribution method is built on when the model
    is a remote provider (it is never called; `device` says where results go)."""

    def __init__(self):
        self.device = "cpu"

    def __call__(self, *args, **kwargs):
        return 0


def _device_of(model):
    torch = _torch()
    d = getattr(model, "device", None)
    if d is None:
        try:
            d = next(model.parameters()).device
        except (AttributeError, StopIteration, TypeError):
            d = "cpu"
    return torch.device(d)


def pretty_tokens(ids, tokenizer):
    """Output tokens as text pieces: the ids decoded together, then split by the tokenizer's offsets (no byte-level
    markers such as 'Ġ'); where the tokenizer gives no offsets or re-encoding differs, each id's token, stripped."""
    ids = [int(i) for i in (ids.tolist() if hasattr(ids, "tolist") else ids)]
    try:
        txt = tokenizer.decode(_torch().tensor(ids))
        enc = tokenizer(txt, return_offsets_mapping=True, add_special_tokens=False)
        got, offs = list(enc["input_ids"]), list(enc["offset_mapping"])
    except Exception:  # noqa: BLE001 - a tokenizer without offsets: the plain tokens
        got, offs = None, None
    if got is not None and len(got) == len(offs) == len(ids) and got == ids:
        out = []
        for k, (s, e) in enumerate(offs):
            if s == e:  # a token with no text of its own reaches to the next one
                e = offs[k + 1][0] if k + 1 < len(offs) else len(txt)
            out.append(txt[s:e].replace("\n", "\\n").strip())
        return out
    from .llm import _pretty

    return _pretty(tokenizer, ids)


def target_tokens(owner, inp, target, skip_tokens, gen_args, generate=None):
    """Captum's target token ids (a 1-d int64 tensor): the target's tokens without skip_tokens, or what the model
    (or the provider, `generate`) generates after the prompt when target is None."""
    torch = _torch()
    if target is None:
        if generate is not None:
            return generate(gen_args or DEFAULT_GEN_ARGS)
        gen = getattr(owner.model, "generate", None)
        if not callable(gen):
            raise _lib.ArgumentError("cattr: the model has no generate(): give the target")
        model_inp = owner.format_model_input(inp.to_model_input())
        out = gen(model_inp, **(gen_args or DEFAULT_GEN_ARGS))
        return out[0][model_inp.shape[1]:]
    if gen_args is not None:
        raise _lib.ArgumentError("cattr: gen_args must be None when target is given")
    skip = list(skip_tokens or [])
    if skip and isinstance(skip[0], str):
        skip = owner.tokenizer.convert_tokens_to_ids(skip)
    if isinstance(target, str):
        return torch.tensor([t for t in owner.tokenizer.encode(target) if t not in set(skip)], dtype=torch.int64)
    if torch.is_tensor(target):
        keep = ~torch.isin(target, torch.tensor(skip, dtype=target.dtype, device=target.device))
        return target[keep]
    raise TypeError("cattr: target must be a str or a tensor of token ids, not %s" % type(target).__name__)


class _Base:
    SUPPORTED_INPUTS = ()
    SUPPORTED_METHODS = ()
    NAME = "LLMAttribution"

    def __init__(self, attr_method, tokenizer):
        names = tuple(c._captum_name for c in self.SUPPORTED_METHODS)
        if getattr(type(attr_method), "_captum_name", None) not in names or type(attr_method).__name__ == "LimeBase":
            raise _lib.ArgumentError("%s does not support %s" % (self.NAME, type(attr_method)))
        self.attr_method = attr_method
        self.model = attr_method.forward_func
        self.tokenizer = tokenizer
        self.device = _device_of(self.model)

    def format_model_input(self, model_input):
        if isinstance(model_input, str):
            return self.tokenizer.encode(model_input, return_tensors="pt").to(self.device)
        return model_input.to(self.device)

    def check_input(self, inp):
        if not any(type(inp).__name__ == c for c in self.SUPPORTED_INPUTS) or not hasattr(inp, "to_tensor"):
            raise _lib.ArgumentError("%s does not support input type %s" % (self.NAME, type(inp)))

    def attribute_future(self, *args, **kwargs):
        raise NotImplementedError("attribute_future is not implemented for %s" % self.NAME)


class TorchLLMAttribution(_Base):
    """LLMAttribution over a torch model: FeatureAblation, ShapleyValueSampling, ShapleyValues, Lime, KernelShap."""

    SUPPORTED_INPUTS = ("TextTemplateInput", "TextTokenInput")
    NAME = "LLMAttribution"

    def __init__(self, attr_method, tokenizer, attr_target="log_prob"):
        from . import attr as A

        self.SUPPORTED_METHODS = (A.FeatureAblation, A.ShapleyValueSampling, A.ShapleyValues, A.Lime,
                                  A.KernelShap)
        super().__init__(attr_method, tokenizer)
        if attr_target not in ("log_prob", "prob"):
            raise _lib.ArgumentError("cattr: attr_target should be either 'log_prob' or 'prob'")
        self.attr_target = attr_target
        self.per_token = attr_method._captum_name in ("FeatureAblation", "ShapleyValueSampling", "ShapleyValues")

    # -- the score of one perturbed row --------------------------------------------------------------------------
    def _log_probs(self, row, inp, targets, use_cached_outputs):
        """The log-probability of each target token after the prompt `row` makes and the target tokens before it."""
        torch = _torch()
        model_inp = self.format_model_input(inp.to_model_input(row))
        kwargs = {"attention_mask": torch.ones([1, model_inp.shape[1]], dtype=torch.long, device=model_inp.device)}
        cached = use_cached_outputs and callable(getattr(self.model, "prepare_inputs_for_generation", None)) and \
            callable(getattr(self.model, "_update_model_kwargs_for_generation", None))
        outs, lps = None, []
        with torch.no_grad():
            for tok in targets:
                if cached:
                    if outs is not None:
                        kwargs = self.model._update_model_kwargs_for_generation(outs, kwargs)
                    outs = self.model.forward(**self.model.prepare_inputs_for_generation(model_inp, **kwargs))
                else:
                    kwargs["attention_mask"] = torch.ones([1, model_inp.shape[1]], dtype=torch.long,
                                                          device=model_inp.device)
                    outs = self.model.forward(model_inp, **kwargs)
                lp = torch.nn.functional.log_softmax(outs.logits[:, -1], dim=1)
                lps.append(lp[0][tok].detach())
                model_inp = torch.cat((model_inp, torch.tensor([[int(tok)]], device=model_inp.device)), dim=1)
        return model_inp, lps

    def _score(self, row, inp, targets, use_cached_outputs, inspect):
        torch = _torch()
        model_inp, lps = self._log_probs(row, inp, targets, use_cached_outputs)
        return self._finish(lps, inspect, lambda: self.tokenizer.decode(model_inp[0][:model_inp.shape[1] -
                                                                                     len(targets)]), targets)

    def _finish(self, lps, inspect, prompt, targets):
        torch = _torch()
        total = torch.sum(torch.stack(lps), dim=0)
        out = torch.stack([total, *lps], dim=0).unsqueeze(0) if self.per_token else total.reshape(1)
        probs = torch.exp(out)
        if inspect:
            inspect(prompt(), self.tokenizer.decode(targets), probs[0].tolist() if self.per_token else
                    probs.tolist())
        return (out if self.attr_target == "log_prob" else probs).to(torch.float64)

    def _forward_rows(self, inp, targets, use_cached_outputs, inspect):
        torch = _torch()

        def forward(rows):
            return torch.cat([self._score(rows[k:k + 1], inp, targets, use_cached_outputs, inspect)
                              for k in range(rows.shape[0])], 0)

        return forward

    def _targets(self, inp, target, skip_tokens, gen_args):
        return target_tokens(self, inp, target, skip_tokens, gen_args)

    def attribute(self, inp, target=None, skip_tokens=None, num_trials=1, gen_args=None, use_cached_outputs=True,
                  _inspect_forward=None, **kwargs):
        from ._callback import callback_model

        torch = _torch()
        self.check_input(inp)
        targets = self._targets(inp, target, skip_tokens, gen_args)
        n = int(targets.shape[0])
        shape = (1 + n if self.per_token else 1, inp.n_itp_features)
        attr_input = inp.to_tensor().to(torch.float32)
        fwd = self._forward_rows(inp, targets, use_cached_outputs, _inspect_forward)
        model = callback_model(fwd, (attr_input,), batch_output=True, name="%s's forward" % self.NAME)
        inner = copy.copy(self.attr_method)
        inner.forward_func, inner._torch, inner._model_, inner._explainers = model, None, model, {}
        total = None
        for _ in range(int(num_trials)):
            cur = inner.attribute(attr_input, **kwargs)
            cur = cur.reshape(shape).to(torch.float32)
            total = cur if total is None else total + cur
        attr = inp.format_attr(total / int(num_trials)).to(self.device)
        from .llm import LLMAttributionResult

        return LLMAttributionResult(seq_attr=attr[0], token_attr=attr[1:] if self.per_token else None,
                                    input_tokens=inp.values, output_tokens=pretty_tokens(targets, self.tokenizer))


class RemoteLLMAttribution(TorchLLMAttribution):
    """Captum's RemoteLLMAttribution: the log-probabilities come from `provider.get_logprobs(input_prompt,
    target_str, tokenizer)` (a remote model, e.g. vLLM), the generated target from `provider.generate`."""

    NAME = "RemoteLLMAttribution"
    placeholder_model = PlaceholderModel()

    def __init__(self, attr_method, tokenizer, provider, attr_target="log_prob"):
        super().__init__(attr_method, tokenizer, attr_target)
        self.provider = provider

    @staticmethod
    def _text(tokenizer, model_input):
        return tokenizer.decode(model_input.flatten()) if hasattr(model_input, "flatten") else model_input

    def _targets(self, inp, target, skip_tokens, gen_args):
        def generate(args):
            if not callable(getattr(self.provider, "generate", None)):
                raise _lib.ArgumentError("cattr: the provider has no generate(): give the target")
            txt = self.provider.generate(self._text(self.tokenizer, inp.to_model_input()), **args)
            return self.tokenizer.encode(txt, return_tensors="pt", add_special_tokens=False)[0]

        return target_tokens(self, inp, target, skip_tokens, gen_args, generate if target is None else None)

    def _score(self, row, inp, targets, use_cached_outputs, inspect):
        torch = _torch()
        prompt = self._text(self.tokenizer, inp.to_model_input(row))
        lps = self.provider.get_logprobs(input_prompt=prompt, target_str=self.tokenizer.decode(targets),
                                         tokenizer=self.tokenizer)
        if len(lps) != targets.shape[0]:
            raise ValueError("Number of token logprobs from provider (%d) does not match expected target token "
                             "length (%d)" % (len(lps), targets.shape[0]))
        return self._finish([torch.tensor(v) for v in lps], inspect, lambda: prompt, targets)


class TorchLLMGradientAttribution(_Base):
    """LLMGradientAttribution over a torch model: LayerIntegratedGradients, LayerGradientXActivation and
    LayerGradientShap at a layer of the model (its token embedding), one attribution per target token: the
    log-probability of target token k after the prompt and target tokens 0..k-1, exported as one function."""

    SUPPORTED_INPUTS = ("TextTokenInput",)
    NAME = "LLMGradientAttribution"

    def __init__(self, attr_method, tokenizer):
        from . import attr as A

        self.SUPPORTED_METHODS = (A.LayerGradientShap, A.LayerGradientXActivation, A.LayerIntegratedGradients)
        super().__init__(attr_method, tokenizer)

    def _function(self, inp, targets, k):
        """The log-probability of target token k as a function of the perturbed interpretable row (traceable)."""
        torch = _torch()
        model, owner = self.model, self
        prefix = targets[:k].to(torch.int64)
        tok = int(targets[k])

        def llm_target_log_prob(perturbed):
            ids = owner.format_model_input(inp.to_model_input(perturbed))
            if k:
                ids = torch.cat([ids, prefix.unsqueeze(0).expand(ids.shape[0], -1).to(ids.device)], dim=1)
            logits = model(ids).logits[:, -1]
            return torch.nn.functional.log_softmax(logits, dim=1)[..., tok]

        return llm_target_log_prob

    def attribute(self, inp, target=None, skip_tokens=None, gen_args=None, **kwargs):
        torch = _torch()
        self.check_input(inp)
        targets = target_tokens(self, inp, target, skip_tokens, gen_args)
        attr_inp = inp.to_tensor().to(self.device)
        rows = []
        for k in range(int(targets.shape[0])):
            inner = copy.copy(self.attr_method)
            fn = self._function(inp, targets, k)
            from ._torch import TorchForward

            inner.forward_func = fn
            inner._torch = TorchForward(fn)
            inner._model_, inner._explainers = None, {}
            layer = self.attr_method._ctor.get("layer")
            mod = self.attr_method._torch.root.get_submodule(layer) if self.attr_method._torch is not None \
                and isinstance(layer, str) else None
            if mod is not None:
                path = inner._torch.use_layer(mod)
                inner._ctor = dict(inner._ctor, layer=path)
                inner.layer = path
            a = inner.attribute(attr_inp, **kwargs)
            a = a.detach() if torch.is_tensor(a) else torch.as_tensor(np.asarray(a))
            if k:
                a = a[:, :-k]
            rows.append(a.sum(-1))
        attr = torch.cat(rows, 0)
        mask = getattr(inp, "itp_mask", None)
        if mask is not None:
            mask = torch.as_tensor(mask).to(attr.device).reshape(1, -1).expand_as(attr)
            attr = attr[mask].view(attr.shape[0], -1)
        from .llm import LLMAttributionResult

        return LLMAttributionResult(seq_attr=attr.sum(0), token_attr=attr, input_tokens=inp.values,
                                    output_tokens=pretty_tokens(targets, self.tokenizer))

