"""Language models: Captum's LLMAttribution / LLMGradientAttribution over cattr's Hugging Face checkpoints.

    import cattr
    from cattr.attr import FeatureAblation, LayerIntegratedGradients
    from cattr.llm import LLMAttribution, LLMGradientAttribution, TextTokenInput, TextTemplateInput

    llm = cattr.load_llm("Qwen3-0.6B")                  # config.json, model.safetensors, tokenizer.json
    fa = LLMAttribution(FeatureAblation(llm), llm.tokenizer)
    res = fa.attribute(TextTokenInput("The capital of France is", llm.tokenizer), target=" Paris")
    res.seq_attr, res.token_attr, res.input_tokens, res.output_tokens
    res.plot_token_attr()                                 # matplotlib; in a notebook `res` shows an HTML heatmap

    lig = LLMGradientAttribution(LayerIntegratedGradients(llm, "model.embed_tokens"), llm.tokenizer)
    res = lig.attribute(TextTokenInput("The capital of France is", llm.tokenizer), target=" Paris", n_steps=16)

The score of target token k is its log-probability after the prompt and target tokens 0..k-1 (Captum's
attr_target="log_prob"). Attributions are numpy arrays (float64 holding the engine's float32 or float64 results).
"""
import ctypes
import html
import math
import os
import weakref

import numpy as np

from . import _lib
from ._lib import lib, check
from ._core import Model, _is_torch, to_numpy
from . import attr as A
from ._torch_llm import RemoteLLMAttribution

__all__ = ["LLM", "load_llm", "Tokenizer", "TextTokenInput", "TextTemplateInput", "LLMAttribution",
           "LLMGradientAttribution", "RemoteLLMAttribution", "LLMAttributionResult"]

DEFAULT_GEN_ARGS = {"max_new_tokens": 25, "do_sample": False}


class Tokenizer:
    """The checkpoint's tokenizer.json (byte-level BPE), with the methods Captum's LLM classes call: encode, decode,
    convert_ids_to_tokens, convert_tokens_to_ids. No special tokens are added (as Qwen's tokenizer does)."""

    def __init__(self, llm):
        self._llm = llm

    def encode(self, text, add_special_tokens=False, return_tensors=None, **kwargs):
        ids = ctypes.POINTER(ctypes.c_int64)()
        n = ctypes.c_int64()
        check(lib.cattr_llm_encode(self._llm._h, text.encode("utf-8"), ctypes.byref(ids), ctypes.byref(n)))
        try:
            out = [ids[i] for i in range(n.value)]
        finally:
            _lib.c_free(ids)
        if return_tensors == "pt":
            import torch
            return torch.tensor([out])
        if return_tensors == "np":
            return np.array([out], dtype=np.int64)
        return out

    __call__ = encode

    def _token_bytes_text(self, i):
        i = _lib.as_int(i, "token id", allow_bool=False)
        n = lib.cattr_llm_token_text(self._llm._h, i, None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        lib.cattr_llm_token_text(self._llm._h, i, buf, n + 1)
        return buf.raw[:n]

    def decode(self, ids, skip_special_tokens=False, **kwargs):
        """Text of a sequence of ids, decoded together (a character split over several tokens comes out whole)."""
        ids = _ids(ids, "token ids")
        arr = (ctypes.c_int64 * max(len(ids), 1))(*ids)
        out = ctypes.c_void_p()
        check(lib.cattr_llm_decode(self._llm._h, arr, len(ids), 1 if skip_special_tokens else 0, ctypes.byref(out)))
        try:
            return ctypes.string_at(out.value).decode("utf-8", "replace") if out.value else ""
        finally:
            _lib.c_free(out)

    def convert_ids_to_tokens(self, ids):
        if isinstance(ids, (int, np.integer)):
            return self._token_bytes_text(ids).decode("utf-8", "replace")
        return [self._token_bytes_text(i).decode("utf-8", "replace") for i in _ids(ids, "token ids")]

    def convert_tokens_to_ids(self, tokens):
        one = isinstance(tokens, str)
        out = []
        for t in [tokens] if one else tokens:
            ids = self.encode(t)
            if len(ids) != 1:
                raise ValueError("cattr: '%s' is not one token (it encodes to %s)" % (t, ids))
            out.append(ids[0])
        return out[0] if one else out

    @property
    def pad_token_id(self):
        v = lib.cattr_llm_pad_token(self._llm._h)
        return None if v < 0 else v

    @property
    def eos_token_id(self):
        v = lib.cattr_llm_eos_token(self._llm._h)
        return None if v < 0 else v


def _ids(x, what="token ids"):
    """Token ids (a list, an array or a tensor) as a list of ints, each checked to fit int64 (TypeError for
    non-integers, ValueError naming `what` beyond int64); the library checks them against the vocabulary."""
    if _is_torch(x) or isinstance(x, np.ndarray):
        return _lib.int64_array(to_numpy(x).reshape(-1), what).tolist()
    return [_lib.as_int(v, what, allow_bool=False) for v in x]


class LLM:
    """A Hugging Face decoder checkpoint loaded by cattr (qwen3, llama, qwen2, mistral). `llm.tokenizer` has
    Captum-compatible encode/decode; the attribution classes of cattr.attr take `llm` as their model (its input is
    token ids, its output the log-probabilities of the next token). `llm.double()` computes in float64."""

    def __init__(self, handle, path):
        self._h = handle
        self.path = path
        self.tokenizer = Tokenizer(self)
        self.dtype = _lib.FLOAT32
        self._model_ref = None  # a weak reference: the Model holds this LLM (its owner), not the other way round
        # Ctrl-C of its attributions: one flag for the checkpoint's life, since the explainers it keeps between calls
        # hold the flag's address
        self._intr = _lib.Interruptible()

    def __del__(self):
        h = getattr(self, "_h", None)
        if h:
            lib.cattr_llm_free(h)
            self._h = None

    def __repr__(self):
        return "<cattr.llm.LLM %s: vocab %d, context %d>" % (self.path, self.vocab_size, self.max_positions)

    @property
    def vocab_size(self):
        return lib.cattr_llm_vocab_size(self._h)

    @property
    def max_positions(self):
        return lib.cattr_llm_max_positions(self._h)

    def to(self, device):
        check(lib.cattr_llm_set_device(self._h, device.encode()))
        return self

    def double(self):
        self.dtype = _lib.FLOAT64
        return self

    def float(self):
        self.dtype = _lib.FLOAT32
        return self

    @property
    def _cattr_model(self):
        """The checkpoint as a cattr Model (input_ids -> next-token log-probabilities [batch, 1, vocab])."""
        m = self._model_ref() if self._model_ref is not None else None
        if m is None:
            h = _lib.ModelP()
            check(lib.cattr_llm_model(self._h, ctypes.byref(h)))
            m = Model(h, path=self.path, owner=self)
            self._model_ref = weakref.ref(m)
        return m

    def __call__(self, input_ids):
        return self._cattr_model(input_ids)

    def __getattr__(self, name):
        # llm.model.embed_tokens: the checkpoint's modules (Captum's layer arguments), through its cattr Model
        if name.startswith("_") or self.__dict__.get("_h") is None:
            raise AttributeError(name)
        return getattr(self._cattr_model, name)

    def generate(self, input_ids, max_new_tokens=DEFAULT_GEN_ARGS["max_new_tokens"], do_sample=False, **kwargs):
        """Greedy continuation (ids), stopping after the end-of-sequence token."""
        if do_sample:
            raise ValueError("cattr: generate: only greedy decoding (do_sample=False) is supported")
        ids = np.ascontiguousarray(_ids(input_ids, "input_ids"), dtype=np.int64)
        max_new = _lib.as_int(max_new_tokens, "max_new_tokens", 0, _lib.int_range(ctypes.c_int)[1],
                              allow_bool=False)
        out = ctypes.POINTER(ctypes.c_int64)()
        n = ctypes.c_int64()
        p = lib.cattr_attr_default_params(0)
        p.dtype = self.dtype
        self._intr.install(p)  # Ctrl-C stops it between two tokens (KeyboardInterrupt)
        self._intr.run(lib.cattr_llm_generate_params, self._h, ctypes.byref(p),
                       ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), ids.size, max_new, ctypes.byref(out),
                       ctypes.byref(n))
        try:
            return [out[i] for i in range(n.value)]
        finally:
            _lib.c_free(out)


def load_llm(path, device=None):
    h = _lib.LLMP()
    check(lib.cattr_llm_load(os.fsencode(path), ctypes.byref(h)))
    m = LLM(h, str(path))
    if device:
        m.to(device)
    return m


# ---------------------------------------------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------------------------------------------

class TextTokenInput:
    """Captum's TextTokenInput: the prompt's tokens are the features. `baselines` is the replacement token (an id
    or a token string; Captum's default 0) for the perturbation methods; `skip_tokens` are prompt tokens that are
    not features (not attributed). cattr also takes a list of token ids as `text` (then `tokenizer` may be None).

    Beyond Captum, `segments` makes segments of the prompt the features (every method; gradient attributions are
    summed over a segment's tokens, perturbations replace all its tokens at once): "words", "sentences", "lines"
    (cattr_llm_segments' rules), a list of strings that spell the text, a list of (start, end) character spans
    (the text around them forms segments of its own), or one segment id per token. The result's input_tokens are
    then the segments' texts, and `token_segment` on the result maps each token to its segment."""

    def __init__(self, text, tokenizer, baselines=0, skip_tokens=None, segments=None):
        self.text = text if isinstance(text, str) else None
        self.segments = segments
        if segments is not None and skip_tokens:
            raise ValueError("cattr: TextTokenInput: give segments or skip_tokens, not both")
        if isinstance(text, str):
            if tokenizer is None:
                raise ValueError("cattr: TextTokenInput: a tokenizer is needed for text")
            self.input_ids = tokenizer.encode(text)
        else:
            self.input_ids = _ids(text, "TextTokenInput token ids")
        self.tokenizer = tokenizer
        if isinstance(baselines, str):
            baselines = tokenizer.convert_tokens_to_ids(baselines)
        # a token id (the library checks it against the vocabulary; -1 would mean "the pad token" there)
        self.baselines = _lib.as_int(baselines, "TextTokenInput baselines", 0, _lib.INT64_MAX, allow_bool=False)
        if skip_tokens and isinstance(skip_tokens[0], str):
            skip_tokens = tokenizer.convert_tokens_to_ids(skip_tokens)
        skip = set(skip_tokens or [])
        self.itp_mask = None if not skip else np.array([i not in skip for i in self.input_ids])
        kept = [i for i in self.input_ids if i not in skip]
        if tokenizer is not None:
            self.values = tokenizer.convert_ids_to_tokens(kept)
        else:
            self.values = [str(i) for i in kept]
        self.n_itp_features = len(self.values)

    # Captum's interpretable-input protocol (the torch models' path, _torch_llm.py)
    def to_tensor(self):
        """The interpretable row: ones, one per feature token (int64, as Captum's)."""
        import torch

        return torch.ones((1, self.n_itp_features), dtype=torch.int64)

    def to_model_input(self, perturbed_tensor=None):
        """The prompt's token ids [rows, T] (a torch tensor) with every feature token whose entry in
        perturbed_tensor is not 1 replaced by the baseline token."""
        import torch

        ids = torch.tensor([self.input_ids], dtype=torch.int64)
        if perturbed_tensor is None:
            return ids
        p = perturbed_tensor if torch.is_tensor(perturbed_tensor) else torch.as_tensor(perturbed_tensor)
        rows = ids.expand(p.shape[0], -1).clone().to(p.device)
        cols = torch.arange(ids.shape[1]) if self.itp_mask is None else \
            torch.nonzero(torch.as_tensor(self.itp_mask)).reshape(-1)
        feat = rows[:, cols]
        rows[:, cols] = torch.where(p != 1, torch.full_like(feat, self.baselines), feat)
        return rows

    def format_attr(self, itp_attr):
        return itp_attr


class TextTemplateInput:
    """Captum's TextTemplateInput: a template with "{}" slots filled by `values`; the slots are the features
    (FeatureAblation replaces slot i by baselines[i], default ""). `mask` is not supported."""

    def __init__(self, template, values, baselines=None, mask=None):
        if mask is not None:
            raise ValueError("cattr: TextTemplateInput: mask is not supported")
        if not isinstance(template, str) or isinstance(values, dict):
            raise ValueError("cattr: TextTemplateInput: give a template string with '{}' slots and a list of values")
        values = [str(v) for v in values]
        if baselines is None:
            baselines = [""] * len(values)
        elif isinstance(baselines, str):
            baselines = [baselines] * len(values)
        baselines = [str(b) for b in baselines]
        if len(baselines) != len(values):
            raise ValueError("cattr: TextTemplateInput: %d baselines for %d values" % (len(baselines), len(values)))
        self.template = template
        self.values = values
        self.baselines = baselines
        self.n_itp_features = len(values)

    def to_text(self):
        return self.template.format(*self.values)

    # Captum's interpretable-input protocol (the torch models' path, _torch_llm.py)
    def to_tensor(self):
        import torch

        return torch.ones((1, self.n_itp_features), dtype=torch.float32)

    def to_model_input(self, perturbed_tensor=None):
        """The prompt text with slot i's baseline wherever perturbed_tensor[0][i] is 0."""
        if perturbed_tensor is None:
            return self.to_text()
        return self.template.format(*[v if perturbed_tensor[0][i] else b
                                      for i, (v, b) in enumerate(zip(self.values, self.baselines))])

    def format_attr(self, itp_attr):
        return itp_attr


# ---------------------------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------------------------

def _np(a):
    """A result array as numpy (a torch tensor from the torch models' path comes to the host)."""
    return a.detach().cpu().numpy() if _is_torch(a) else np.asarray(a)


def _rgb(v, m):
    """Red for negative, green for positive, white for 0 (|v| relative to the largest m)."""
    a = 0.0 if m <= 0 or not math.isfinite(v) else max(-1.0, min(1.0, v / m))
    if a >= 0:
        return "rgb(%d,%d,%d)" % (int(255 - 155 * a), 255, int(255 - 155 * a))
    a = -a
    return "rgb(%d,%d,%d)" % (255, int(255 - 155 * a), int(255 - 155 * a))


class LLMAttributionResult:
    """Captum's LLMAttributionResult: seq_attr [n_input_features], token_attr [n_output_tokens, n_input_features]
    (None for Lime and KernelShap), input_tokens, output_tokens."""

    def __init__(self, *, input_tokens, output_tokens, seq_attr, token_attr=None, output_probs=None):
        self.input_tokens = list(input_tokens)
        self.output_tokens = list(output_tokens)
        # torch tensors stay tensors (the torch models' path, as Captum); anything else becomes a numpy array
        self.seq_attr = seq_attr if _is_torch(seq_attr) else np.asarray(seq_attr)
        self.token_attr = None if token_attr is None else token_attr if _is_torch(token_attr) else \
            np.asarray(token_attr)
        self.output_probs = output_probs
        if tuple(self.seq_attr.shape) != (len(self.input_tokens),):
            raise ValueError("seq_attr and input_tokens must have the same length")
        if self.token_attr is not None and tuple(self.token_attr.shape) != (len(self.output_tokens),
                                                                            len(self.input_tokens)):
            raise ValueError("token_attr must have shape (n_output_tokens, n_input_tokens)")

    @property
    def seq_attr_dict(self):
        return {k: v for v, k in zip(_np(self.seq_attr).tolist(), self.input_tokens)}

    def __repr__(self):
        return "LLMAttributionResult(input_tokens=%r, output_tokens=%r, seq_attr=%r)" % (
            self.input_tokens, self.output_tokens, self.seq_attr)

    def plot_token_attr(self, show=False):
        """Heatmap of token_attr (rows: output tokens, columns: input tokens); returns (fig, ax) unless show."""
        if self.token_attr is None:
            raise ValueError("token_attr is None (no token-level attribution was performed), please use "
                             "plot_seq_attr instead for the sequence-level attribution plot")
        import matplotlib.pyplot as plt

        t = _np(self.token_attr)
        m = float(np.nanmax(np.abs(t))) if t.size else 1.0
        m = m if m > 0 else 1.0
        fig, ax = plt.subplots(figsize=(max(4, 0.6 * t.shape[1] + 2), max(2, 0.5 * t.shape[0] + 1.5)))
        im = ax.imshow(t, cmap="RdYlGn", vmax=m, vmin=-m, aspect="auto")
        fig.colorbar(im, ax=ax, label="Token Attribution")
        ax.set_xticks(np.arange(len(self.input_tokens)), labels=self.input_tokens, rotation=45, ha="right")
        ax.set_yticks(np.arange(len(self.output_tokens)), labels=self.output_tokens)
        for i in range(t.shape[0]):
            for j in range(t.shape[1]):
                ax.text(j, i, "%.4f" % t[i, j], ha="center", va="center", fontsize=7)
        if show:
            plt.show()
            return None
        return fig, ax

    def plot_seq_attr(self, show=False):
        """Bar plot of seq_attr; returns (fig, ax) unless show."""
        import matplotlib.pyplot as plt

        seq = _np(self.seq_attr)
        fig, ax = plt.subplots(figsize=(max(4, 0.6 * len(self.input_tokens) + 2), 3))
        ax.bar(np.arange(len(self.input_tokens)), seq, color=["#2a9d3a" if v >= 0 else "#d33" for v in seq])
        ax.set_xticks(np.arange(len(self.input_tokens)), labels=self.input_tokens, rotation=45, ha="right")
        ax.set_ylabel("Sequence Attribution")
        if show:
            plt.show()
            return None
        return fig, ax

    def _repr_html_(self):
        """An HTML heatmap (notebooks show it for a result at the end of a cell)."""
        rows = [("(sequence)", _np(self.seq_attr))]
        if self.token_attr is not None:
            rows += list(zip(self.output_tokens, _np(self.token_attr)))
        vals = np.concatenate([np.asarray(r, dtype=np.float64).reshape(-1) for _, r in rows])
        vals = vals[np.isfinite(vals)]
        m = float(np.abs(vals).max()) if vals.size else 1.0
        out = ['<table style="border-collapse:collapse;font-family:monospace;font-size:12px">',
               "<tr><th></th>" + "".join("<th style='padding:2px 6px'>%s</th>" % html.escape(t)
                                         for t in self.input_tokens) + "</tr>"]
        for name, r in rows:
            cells = "".join("<td style='padding:2px 6px;background:%s' title='%.6g'>%.4f</td>" % (_rgb(v, m), v, v)
                            for v in np.asarray(r, dtype=np.float64))
            out.append("<tr><th style='padding:2px 6px;text-align:right'>%s</th>%s</tr>" % (html.escape(name), cells))
        out.append("</table>")
        return "\n".join(out)


# ---------------------------------------------------------------------------------------------------------------
# the attribution wrappers
# ---------------------------------------------------------------------------------------------------------------

def _llm_of(attr_method):
    ff = getattr(attr_method, "forward_func", None)
    if not isinstance(ff, LLM):
        raise TypeError("cattr: the attribution method must be built on a cattr LLM (cattr.load_llm)")
    return ff


def _pretty(tokenizer, ids):
    out = []
    for t in tokenizer.convert_ids_to_tokens(ids):
        s = t.strip()
        out.append(s if s else t)
    return out


class _BaseLLMAttribution:
    def __init__(self, attr_method, tokenizer):
        self.attr_method = attr_method
        self.model = _llm_of(attr_method)
        self.tokenizer = tokenizer

    def _targets(self, inp, target, skip_tokens, gen_args):
        if target is None:
            if isinstance(inp, TextTemplateInput):
                prompt = self.tokenizer.encode(inp.to_text())
            else:
                prompt = inp.input_ids
            args = dict(DEFAULT_GEN_ARGS)
            args.update(gen_args or {})
            return self.model.generate(prompt, **args)
        if gen_args is not None:
            raise ValueError("gen_args must be None when target is given")
        if skip_tokens and isinstance(skip_tokens[0], str):
            skip_tokens = self.tokenizer.convert_tokens_to_ids(skip_tokens)
        skip = set(skip_tokens or [])
        ids = self.tokenizer.encode(target) if isinstance(target, str) else _ids(target, "target token ids")
        return [i for i in ids if i not in skip]

    def _params(self, method, fields, extra):
        p = A._defaults(method)
        p.dtype = self.model.dtype
        for k, v in fields.items():
            if v is None:
                continue
            if k == "method":
                p.quadrature = A._quadrature(v)
            elif k == "n_steps" and isinstance(v, str):
                if v != "auto":
                    raise TypeError("cattr: n_steps must be an int or 'auto', not str %r" % v)
                p.n_steps = _lib.STEPS_AUTO
            elif k in A._INT_FIELDS:
                setattr(p, k, v)  # checked against the field's C type (_lib.CStruct)
            else:
                setattr(p, k, float(v))
        for k in extra:
            if k not in ("_draws", "_permutations", "_seed", "_max_memory", "_device"):
                raise TypeError("attribute() got an unexpected keyword argument '%s'" % k)
        if extra.get("_seed") is not None:
            p.seed = extra["_seed"]
        if extra.get("_max_memory") is not None:
            p.max_memory = extra["_max_memory"]
        return p

    def _segments(self, inp):
        """(segment id per token, the segments' texts) of a TextTokenInput with segments, else (None, None)."""
        spec = getattr(inp, "segments", None)
        if spec is None:
            return None, None
        h = self.model._h
        ids = np.ascontiguousarray(_lib.int64_array(np.asarray(inp.input_ids), "prompt token ids"))
        T = len(ids)
        ip = ctypes.POINTER(ctypes.c_int64)
        text = inp.text
        if text is None:
            out = ctypes.c_void_p()
            check(lib.cattr_llm_decode(h, ids.ctypes.data_as(ip), T, 0, ctypes.byref(out)))
            text = ctypes.string_at(out.value).decode("utf-8", "replace")
            _lib.c_free(out)
        tb = text.encode("utf-8")
        seg = np.zeros(T, dtype=np.int64)
        if isinstance(spec, str) or (len(spec) and (isinstance(spec[0], str) or np.ndim(spec[0]) == 1)):
            spans = None
            if isinstance(spec, str):
                kind = spec
            elif isinstance(spec[0], str):
                if "".join(spec) != text or any(not x for x in spec):
                    raise ValueError("cattr: segments: the strings must be non-empty and spell the prompt's text")
                at, spans = 0, []
                for x in spec:
                    n_ = len(x.encode("utf-8"))
                    spans += [at, at + n_]
                    at += n_
                kind = "spans"
            else:
                spans = []
                for a, b in spec:
                    spans += [len(text[:int(a)].encode("utf-8")), len(text[:int(b)].encode("utf-8"))]
                kind = "spans"
            sp = np.ascontiguousarray(np.asarray(spans if spans else [0], dtype=np.int64))
            G = ctypes.c_int64()
            check(lib.cattr_llm_segments(h, tb, ids.ctypes.data_as(ip), T, kind.encode(), sp.ctypes.data_as(ip),
                                         len(spans) // 2 if spans else 0, seg.ctypes.data_as(ip), ctypes.byref(G)))
        else:
            ids_ = _lib.int64_array(np.asarray(spec).reshape(-1), "segments")
            if len(ids_) != T:
                raise ValueError("cattr: segments: %d ids for %d prompt tokens" % (len(ids_), T))
            seg[:] = ids_
        st, en = np.zeros(T, dtype=np.int64), np.zeros(T, dtype=np.int64)
        check(lib.cattr_llm_token_spans(h, tb, ids.ctypes.data_as(ip), T, st.ctypes.data_as(ip),
                                        en.ctypes.data_as(ip)))
        G = int(seg.max()) + 1 if T else 0
        texts = []
        for g in range(G):
            where = np.nonzero(seg == g)[0]
            texts.append(tb[st[where[0]]:en[where[-1]]].decode("utf-8", "replace") if len(where) else "")
        return seg, texts

    def _result(self, seq, tok, inp, segs, seg_texts, target_ids):
        """The result; with segments, input_tokens are the segments' texts and token_segment maps the tokens."""
        res = LLMAttributionResult(seq_attr=seq, token_attr=tok,
                                   input_tokens=seg_texts if segs is not None else inp.values,
                                   output_tokens=_pretty(self.tokenizer, target_ids))
        if segs is not None:
            res.token_segment = segs
        return res

    def _run(self, p, prompt, target, baseline_token, extra, keep, want_token=True, segments=None):
        T, n = len(prompt), len(target)
        if n == 0:
            raise ValueError("cattr: the target has no tokens")
        pr = np.ascontiguousarray(_lib.int64_array(np.asarray(prompt), "prompt token ids"))
        tg = np.ascontiguousarray(_lib.int64_array(np.asarray(target), "target token ids"))
        c = _lib.LLMCall()
        c.prompt = pr.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
        c.n_prompt = T
        c.target = tg.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
        c.n_target = n
        c.baseline_token = -1 if baseline_token is None else _lib.as_int(baseline_token, "baselines", 0,
                                                                          _lib.INT64_MAX, allow_bool=False)
        G = T
        if segments is not None:
            sg = np.ascontiguousarray(segments, dtype=np.int64)
            keep.append(sg)
            c.segments = sg.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
            G = c.n_segments = int(sg.max()) + 1 if len(sg) else 0
        perms = extra.get("_permutations")
        if perms is not None:
            pa = np.ascontiguousarray(_lib.int64_array(np.asarray(perms), "_permutations").reshape(-1))
            if pa.size != p.n_samples * T:
                raise ValueError("cattr: _permutations: %d values for n_samples=%d orders of %d tokens" %
                                 (pa.size, p.n_samples, T))
            keep.append(pa)
            c.permutations = pa.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
        from ._core import _TensorList, _ptr_array
        tl = _TensorList()
        try:
            draws = extra.get("_draws")
            if draws:
                dp = [tl.make(to_numpy(a), None, "_draws %d" % k) for k, (_, a) in enumerate(draws)]
                roles = [r.encode() if r else None for r, _ in draws]
                ra = (ctypes.c_char_p * len(roles))(*roles)
                keep.extend([roles, ra])
                arr = _ptr_array(dp)
                keep.append(arr)
                c.draws = arr
                c.draw_roles = ra
                c.n_draws = len(dp)
            seq = np.zeros(T, dtype=np.float64)
            tok = np.zeros((n, T), dtype=np.float64)
            lp = np.zeros(n, dtype=np.float64)
            dl = np.zeros(n, dtype=np.float64)
            dp_ = ctypes.POINTER(ctypes.c_double)
            intr = self.model._intr
            intr.install(p)
            intr.run(lib.cattr_llm_attribute, self.model._h, ctypes.byref(p), ctypes.byref(c),
                     seq.ctypes.data_as(dp_), tok.ctypes.data_as(dp_), lp.ctypes.data_as(dp_), dl.ctypes.data_as(dp_))
            self.n_steps_used = lib.cattr_llm_steps_used(self.model._h) or None
        finally:
            tl.free()
        return seq[:G], tok.reshape(-1)[:n * G].reshape(n, G).copy(), lp, dl  # n x G values, row-major


class LLMAttribution(_BaseLLMAttribution):
    """Captum's LLMAttribution around FeatureAblation, ShapleyValueSampling, Lime or KernelShap of a cattr LLM
    (attr_target "log_prob"). Keyword arguments of attribute() go to the method (n_samples,
    perturbations_per_eval); cattr-specific: _draws (Lime/KernelShap recorded draws), _permutations
    (ShapleyValueSampling recorded orders, [n_samples, T]), _seed."""

    SUPPORTED_METHODS = (A.FeatureAblation, A.ShapleyValueSampling, A.Lime, A.KernelShap)
    SUPPORTED_INPUTS = (TextTemplateInput, TextTokenInput)

    def __new__(cls, attr_method, tokenizer, attr_target="log_prob"):
        if cls is LLMAttribution and not isinstance(getattr(attr_method, "forward_func", None), LLM):
            from ._torch_llm import TorchLLMAttribution  # a torch model: Captum's loop, its passes in torch

            return TorchLLMAttribution(attr_method, tokenizer, attr_target)
        return super().__new__(cls)

    def __init__(self, attr_method, tokenizer, attr_target="log_prob"):
        if not isinstance(attr_method, self.SUPPORTED_METHODS) or isinstance(attr_method, A.LimeBase):
            raise TypeError("cattr: LLMAttribution does not support %s" % type(attr_method).__name__)
        if attr_target != "log_prob":
            raise ValueError("cattr: LLMAttribution: only attr_target='log_prob' is supported")
        super().__init__(attr_method, tokenizer)
        self.attr_target = attr_target

    def attribute(self, inp, target=None, skip_tokens=None, num_trials=1, gen_args=None, use_cached_outputs=True,
                  _inspect_forward=None, **kwargs):
        if not isinstance(inp, self.SUPPORTED_INPUTS):
            raise ValueError("LLMAttribution does not support input type %s" % type(inp).__name__)
        extra = {k: kwargs.pop(k) for k in list(kwargs) if k.startswith("_")}
        method = self.attr_method._captum_name
        fields = {}
        for k in ("n_samples", "perturbations_per_eval"):
            if k in kwargs:
                fields[k] = kwargs.pop(k)
        kwargs.pop("show_progress", None)
        if kwargs.pop("feature_mask", None) is not None:
            raise ValueError("cattr: LLMAttribution: feature_mask is not supported (the features are the tokens or "
                             "the template's slots)")
        if kwargs:
            raise TypeError("attribute() got unexpected keyword arguments %s" % sorted(kwargs))
        fields.update(getattr(self.attr_method, "_lime", {}))
        target_ids = self._targets(inp, target, skip_tokens, gen_args)
        segs, seg_texts = (None, None) if isinstance(inp, TextTemplateInput) else self._segments(inp)
        seqs, toks = [], []
        for trial in range(int(num_trials)):
            ex = dict(extra)
            if num_trials > 1 and ex.get("_seed") is None:
                ex["_seed"] = trial
            p = self._params(method, fields, ex)
            keep = []
            if isinstance(inp, TextTemplateInput):
                if method != "FeatureAblation":
                    raise ValueError("cattr: TextTemplateInput is supported with FeatureAblation only")
                seq, tok = self._template(p, inp, target_ids)
            else:
                if inp.itp_mask is not None and method != "FeatureAblation":
                    raise ValueError("cattr: skip_tokens of a TextTokenInput are supported with FeatureAblation and "
                                     "the gradient methods only")
                seq, tok, _, _ = self._run(p, inp.input_ids, target_ids, inp.baselines, ex, keep, segments=segs)
                if inp.itp_mask is not None:
                    seq, tok = seq[inp.itp_mask], tok[:, inp.itp_mask]
            seqs.append(seq)
            toks.append(tok)
        seq = np.mean(seqs, axis=0)
        tok = np.mean(toks, axis=0)
        token_attr = None if method in ("Lime", "KernelShap") else tok
        return self._result(seq, token_attr, inp, segs, seg_texts, target_ids)

    def _template(self, p, inp, target_ids):
        n, S = len(target_ids), len(inp.values)
        vals = [v.encode("utf-8") for v in inp.values]
        bls = [b.encode("utf-8") for b in inp.baselines]
        va = (ctypes.c_char_p * S)(*vals)
        ba = (ctypes.c_char_p * S)(*bls)
        tg = np.ascontiguousarray(_lib.int64_array(np.asarray(target_ids), "target token ids"))
        seq = np.zeros(S, dtype=np.float64)
        tok = np.zeros((n, S), dtype=np.float64)
        dp = ctypes.POINTER(ctypes.c_double)
        intr = self.model._intr
        intr.install(p)
        intr.run(lib.cattr_llm_attribute_template, self.model._h, ctypes.byref(p), inp.template.encode("utf-8"), va,
                 ba, S, tg.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), n, seq.ctypes.data_as(dp),
                 tok.ctypes.data_as(dp))
        return seq, tok


class LLMGradientAttribution(_BaseLLMAttribution):
    """Captum's LLMGradientAttribution around LayerIntegratedGradients or LayerGradientXActivation at the
    embedding layer of a cattr LLM ("model.embed_tokens"). Keyword arguments: n_steps, method,
    internal_batch_size, and baselines (None: the zero embedding; a token id: that token's embedding). Beyond
    Captum: n_steps="auto" with delta_tol and max_steps (as IntegratedGradients.attribute's); self.n_steps_used
    tells the steps of the last call."""

    SUPPORTED_METHODS = (A.LayerIntegratedGradients, A.LayerGradientXActivation)
    SUPPORTED_INPUTS = (TextTokenInput,)

    def __new__(cls, attr_method, tokenizer):
        if cls is LLMGradientAttribution and not isinstance(getattr(attr_method, "forward_func", None), LLM):
            from ._torch_llm import TorchLLMGradientAttribution  # a torch model: exported per target position

            return TorchLLMGradientAttribution(attr_method, tokenizer)
        return super().__new__(cls)

    def __init__(self, attr_method, tokenizer):
        if not isinstance(attr_method, self.SUPPORTED_METHODS):
            raise TypeError("cattr: LLMGradientAttribution does not support %s" % type(attr_method).__name__)
        super().__init__(attr_method, tokenizer)
        layer = attr_method.layer
        if not isinstance(layer, str):
            raise ValueError("cattr: LLMGradientAttribution: one layer (the embedding)")
        m = self.model._cattr_model if layer != "hidden.embed" else None
        if m is not None and m.resolve(layer) != m.resolve("hidden.embed"):
            raise ValueError("cattr: LLMGradientAttribution: the layer must be the token embedding "
                             "('model.embed_tokens'), not '%s'" % layer)
        if not attr_method._ctor.get("multiply_by_inputs", 1):
            raise ValueError("cattr: LLMGradientAttribution: multiply_by_inputs=False is not supported")

    def attribute(self, inp, target=None, skip_tokens=None, gen_args=None, **kwargs):
        if not isinstance(inp, self.SUPPORTED_INPUTS):
            raise ValueError("LLMGradientAttribution does not support input type %s" % type(inp).__name__)
        extra = {k: kwargs.pop(k) for k in list(kwargs) if k.startswith("_")}
        method = self.attr_method._captum_name
        fields = {}
        if method == "LayerIntegratedGradients":
            fields = {k: kwargs.pop(k) for k in ("n_steps", "method", "internal_batch_size", "delta_tol", "max_steps")
                      if k in kwargs}
            if fields.get("n_steps") != "auto" and ("delta_tol" in fields or "max_steps" in fields):
                raise _lib.ArgumentError("cattr: delta_tol and max_steps go with n_steps='auto'")
        baselines = kwargs.pop("baselines", None)
        if baselines is not None:
            b = sorted(set(_ids([baselines] if isinstance(baselines, (int, np.integer)) else baselines,
                                "baselines")))
            if len(b) != 1:
                raise ValueError("cattr: LLMGradientAttribution: baselines must be one token id (for every "
                                 "position)")
            baselines = b[0]
        if kwargs:
            raise TypeError("attribute() got unexpected keyword arguments %s" % sorted(kwargs))
        target_ids = self._targets(inp, target, skip_tokens, gen_args)
        p = self._params(method, fields, extra)
        segs, seg_texts = self._segments(inp)
        seq, tok, _, _ = self._run(p, inp.input_ids, target_ids, baselines, extra, [], segments=segs)
        if inp.itp_mask is not None:
            tok = tok[:, inp.itp_mask]
            seq = tok.sum(0)
        return self._result(seq, tok, inp, segs, seg_texts, target_ids)
