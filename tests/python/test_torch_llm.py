"""Captum's language-model classes over a PyTorch model (python/cattr/_torch_llm.py): LLMAttribution with the
perturbation methods (the model's passes as a host function), LLMGradientAttribution (exported per target
position), RemoteLLMAttribution over a provider, with cattr's own TextTokenInput / TextTemplateInput, against Captum
on the same model. Skipped without torch or Captum (CATTR_CAPTUM_DIR, default ../shared/captum-0.8)."""
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from cattr import llm as L  # noqa: E402
from cattr import attr as A  # noqa: E402

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CAPTUM_DIR = os.environ.get("CATTR_CAPTUM_DIR", os.path.join(os.path.dirname(_ROOT), "shared", "captum-0.8"))


def _captum():
    if os.path.isdir(_CAPTUM_DIR) and _CAPTUM_DIR not in sys.path:
        sys.path.insert(0, _CAPTUM_DIR)
    try:
        import captum.attr as ca
    except ImportError:
        pytest.skip("Captum is not importable (CATTR_CAPTUM_DIR)")
    return ca


class CharTokenizer:
    """Words of one character; id 0 starts every encoding; offsets as Hugging Face tokenizers give them."""

    def encode(self, text, add_special_tokens=True, return_tensors=None):
        ids = ([0] if add_special_tokens else []) + [ord(w[0]) % 64 for w in text.split(" ") if w]
        return torch.tensor([ids]) if return_tensors == "pt" else ids

    def decode(self, ids):
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        return " ".join(self.convert_ids_to_tokens(ids))

    def convert_ids_to_tokens(self, ids):
        if isinstance(ids, int):
            return "<s>" if ids == 0 else chr(ids + 64)
        return [self.convert_ids_to_tokens(int(i)) for i in ids]

    def convert_tokens_to_ids(self, tokens):
        return [0 if t == "<s>" else ord(t) % 64 for t in tokens]

    def __call__(self, text, add_special_tokens=True, return_offsets_mapping=False):
        words = text.split(" ")
        out = {"input_ids": self.encode(text, add_special_tokens)}
        if return_offsets_mapping:
            offs, at = ([(0, 0)] if add_special_tokens else []), 0
            for w in words:
                offs.append((at, at + len(w)))
                at += len(w) + 1
            out["offset_mapping"] = offs
        return out


class Out:
    def __init__(self, logits):
        self.logits = logits


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.emb = torch.nn.Embedding(64, 8)
        self.mix = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 64)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)

    def forward(self, input_ids, attention_mask=None):
        e = self.emb(input_ids)
        h = torch.tanh(self.mix(e))
        return Out(self.head(h + h.mean(1, keepdim=True)))  # each position sees the whole prompt


@pytest.fixture(scope="module")
def lm():
    m = TinyLM()
    m.eval()
    return m


def test_feature_ablation_matches_captum(lm):
    ca = _captum()
    tok = CharTokenizer()
    ours = L.LLMAttribution(A.FeatureAblation(lm), tok).attribute(
        L.TextTemplateInput("{} b {} e", ["a", "c"]), "m n o", skip_tokens=[0], use_cached_outputs=False)
    ref = ca.LLMAttribution(ca.FeatureAblation(lm), tok).attribute(
        ca.TextTemplateInput("{} b {} e", ["a", "c"]), "m n o", skip_tokens=[0], use_cached_outputs=False)
    assert ours.input_tokens == ["a", "c"] and ours.output_tokens == ["m", "n", "o"]
    assert torch.is_tensor(ours.seq_attr) and tuple(ours.token_attr.shape) == (3, 2)
    np.testing.assert_allclose(ours.seq_attr.numpy(), ref.seq_attr.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours.token_attr.numpy(), ref.token_attr.numpy(), rtol=1e-5, atol=1e-6)
    # a token input with skipped tokens: the baseline token replaces each feature token
    inp = L.TextTokenInput("a b c", tok, skip_tokens=[0])
    ours = L.LLMAttribution(A.FeatureAblation(lm), tok).attribute(inp, "m n", skip_tokens=[0])  # cached: plain
    ref = ca.LLMAttribution(ca.FeatureAblation(lm), tok).attribute(
        ca.TextTokenInput("a b c", tok, skip_tokens=[0]), "m n", skip_tokens=[0], use_cached_outputs=False)
    assert ours.input_tokens == ["a", "b", "c"]
    np.testing.assert_allclose(ours.token_attr.numpy(), ref.token_attr.numpy(), rtol=1e-5, atol=1e-6)


def test_gradient_matches_captum(lm):
    ca = _captum()
    tok = CharTokenizer()
    ours = L.LLMGradientAttribution(A.LayerIntegratedGradients(lm, lm.emb), tok).attribute(
        L.TextTokenInput("a b c", tok), "m n", skip_tokens=[0], n_steps=20)
    ref = ca.LLMGradientAttribution(ca.LayerIntegratedGradients(lm, lm.emb), tok).attribute(
        ca.TextTokenInput("a b c", tok), "m n", skip_tokens=[0], n_steps=20)
    assert tuple(ours.token_attr.shape) == (2, 4)
    np.testing.assert_allclose(ours.token_attr.numpy(), ref.token_attr.numpy(), rtol=1e-4, atol=1e-6)


def test_remote_provider_and_errors(lm):
    tok = CharTokenizer()

    class Provider:
        def generate(self, prompt, **kw):
            return "x y"

        def get_logprobs(self, input_prompt, target_str, tokenizer=None):
            n = len(tokenizer.encode(target_str, add_special_tokens=False))
            return [-0.5 - (0.25 if "a" not in input_prompt else 0.0)] * n

    fa = A.FeatureAblation(L.RemoteLLMAttribution.placeholder_model)
    res = L.RemoteLLMAttribution(fa, tok, Provider()).attribute(L.TextTemplateInput("{} {}", ["a", "b"]))
    assert res.output_tokens == ["x", "y"]
    # ablating "a" lowers each of the two target log-probs by 0.25: attribution 0.25 each, 0.5 for the sequence
    np.testing.assert_allclose(res.token_attr.numpy(), [[0.25, 0.0], [0.25, 0.0]], atol=1e-6)
    np.testing.assert_allclose(res.seq_attr.numpy(), [0.5, 0.0], atol=1e-6)
    with pytest.raises(AssertionError, match="does not support"):
        L.LLMAttribution(A.Saliency(lm), tok)
    with pytest.raises(AssertionError, match="input type"):
        L.LLMAttribution(A.FeatureAblation(lm), tok).attribute("a b c", "m")
    with pytest.raises(NotImplementedError):
        L.LLMAttribution(A.FeatureAblation(lm), tok).attribute_future()
