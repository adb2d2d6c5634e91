"""Segments as features of a language-model attribution (issue 34, item 4): words, sentences, lines, a user's
strings or spans, or ids per token. Gradient methods give the sum of their token attributions over each segment (in
token order, in the compute dtype); FeatureAblation's prefix-reusing passes give the same numbers as the explainer's
FeatureAblation with the segments as a feature mask; a one-token segment's ablation is that token's; every method
returns one column per segment."""
import os

import numpy as np
import pytest

import cattr
from cattr import attr as A
from cattr.llm import LLMAttribution, LLMGradientAttribution, TextTokenInput

QWEN = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "golden", "llm", "qwen3-tiny")
TEXT = "The capital of France is Paris. It is big!\nNew line here, and more.\n\nCafé déjà vu (à Ñandú)? Yes."

pytestmark = pytest.mark.skipif(not os.path.isdir(QWEN), reason="../shared/golden/llm/qwen3-tiny is not beside the "
                                "repository")


@pytest.fixture(scope="module")
def llm():
    return cattr.load_llm(QWEN)


def _grad(llm, method, inp, double=False):
    m = llm.double() if double else llm.float()  # in place, as torch's Module.double()
    try:
        lay = A.LayerIntegratedGradients(m, "model.embed_tokens") if method == "lig" else \
            A.LayerGradientXActivation(m, "model.embed_tokens")
        kw = dict(n_steps=8) if method == "lig" else {}
        return LLMGradientAttribution(lay, m.tokenizer).attribute(inp, target=" Paris is", **kw)
    finally:
        llm.float()


def test_segment_texts(llm):
    tok = llm.tokenizer
    sent = _grad(llm, "gxa", TextTokenInput(TEXT, tok, segments="sentences")).input_tokens
    assert sent == ["The capital of France is Paris.", " It is big!\n", "New line here, and more.\n\n",
                    "Café déjà vu (à Ñandú)?", " Yes."]
    lines = _grad(llm, "gxa", TextTokenInput(TEXT, tok, segments="lines")).input_tokens
    assert lines == ["The capital of France is Paris. It is big!\n", "New line here, and more.\n\n",
                     "Café déjà vu (à Ñandú)? Yes."]
    words = _grad(llm, "gxa", TextTokenInput(TEXT, tok, segments="words")).input_tokens
    assert "".join(words) == TEXT and [w.strip() for w in words][:6] == ["The", "capital", "of", "France", "is",
                                                                          "Paris."]
    # a user's strings, and character spans (the text around them forms segments of its own)
    cut = TEXT.index("Café")
    parts = ["The capital of France is Paris.", TEXT[31:cut], TEXT[cut:]]
    assert "".join(parts) == TEXT
    assert _grad(llm, "gxa", TextTokenInput(TEXT, tok, segments=parts)).input_tokens == parts
    d = TEXT.index("déjà")
    got = _grad(llm, "gxa", TextTokenInput(TEXT, tok, segments=[(4, 11), (d, d + 4)])).input_tokens
    assert got[1].strip() == "capital" and "".join(got) == TEXT and len(got) == 5
    assert [g for g in got if "déjà" in g][0].strip() == "déjà"


@pytest.mark.parametrize("method", ["lig", "gxa"])
@pytest.mark.parametrize("double", [False, True], ids=["float32", "float64"])
@pytest.mark.parametrize("kind", ["words", "sentences", "lines"])
def test_gradient_segments_sum_their_tokens(llm, method, double, kind):
    tok = llm.tokenizer
    seg = _grad(llm, method, TextTokenInput(TEXT, tok, segments=kind), double)
    per = _grad(llm, method, TextTokenInput(TEXT, tok), double)
    ids = seg.token_segment
    G = len(seg.input_tokens)
    dt = np.float64 if double else np.float32
    want = np.zeros((per.token_attr.shape[0], G), dtype=dt)
    for k in range(want.shape[0]):  # in token order, rounded in the compute dtype
        for i, g in enumerate(ids):
            want[k, g] = dt(want[k, g] + dt(per.token_attr[k, i]))
    assert np.array_equal(seg.token_attr.astype(dt), want)
    s = np.zeros(G, dtype=dt)
    for k in range(want.shape[0]):
        s = (s + want[k]).astype(dt)
    assert np.array_equal(seg.seq_attr.astype(dt), s)


@pytest.mark.parametrize("kind", ["words", "sentences"])
def test_feature_ablation_prefix_equals_the_mask_form(llm, kind):
    tok = llm.tokenizer
    inp = TextTokenInput(TEXT, tok, segments=kind)
    fa = LLMAttribution(A.FeatureAblation(llm), tok)
    a = fa.attribute(inp, target=" Paris is")  # prefix-reusing passes
    b = fa.attribute(inp, target=" Paris is", perturbations_per_eval=3)  # the explainer, segments as a feature mask
    assert a.seq_attr.shape == (len(a.input_tokens),) and a.token_attr.shape == (2, len(a.input_tokens))
    assert np.array_equal(a.seq_attr, b.seq_attr) and np.array_equal(a.token_attr, b.token_attr)
    assert np.abs(a.seq_attr).max() > 0
    # a one-token segment's ablation is that token's
    per = fa.attribute(TextTokenInput(TEXT, tok), target=" Paris is")
    ids = a.token_segment
    one = [g for g in range(len(a.input_tokens)) if (ids == g).sum() == 1]
    assert one or kind == "sentences"
    for g in one:
        i = int(np.nonzero(ids == g)[0][0])
        assert a.seq_attr[g] == per.seq_attr[i] and np.array_equal(a.token_attr[:, g], per.token_attr[:, i])


def test_identity_segments_are_the_tokens(llm):
    tok = llm.tokenizer
    T = len(TextTokenInput(TEXT, tok).input_ids)
    inp = TextTokenInput(TEXT, tok, segments=np.arange(T))
    for make in (A.FeatureAblation, A.KernelShap):
        fa = LLMAttribution(make(llm), tok)
        a = fa.attribute(inp, target=" Paris", n_samples=20) if make is A.KernelShap else fa.attribute(inp, target=" Paris")
        b = fa.attribute(TextTokenInput(TEXT, tok), target=" Paris", n_samples=20) if make is A.KernelShap else \
            fa.attribute(TextTokenInput(TEXT, tok), target=" Paris")
        assert np.array_equal(a.seq_attr, b.seq_attr), make.__name__


def test_sampling_methods_give_a_column_per_segment(llm):
    tok = llm.tokenizer
    inp = TextTokenInput(TEXT, tok, segments="sentences")
    for make, kw in ((A.ShapleyValueSampling, dict(n_samples=2)), (A.Lime, dict(n_samples=20)),
                     (A.KernelShap, dict(n_samples=20))):
        r = LLMAttribution(make(llm), tok).attribute(inp, target=" Paris", **kw)
        assert r.seq_attr.shape == (5,), make.__name__
        assert np.all(np.isfinite(r.seq_attr)) and np.abs(r.seq_attr).max() > 0


def test_bad_segments_are_refused(llm):
    tok = llm.tokenizer
    T = len(TextTokenInput(TEXT, tok).input_ids)
    ig = LLMAttribution(A.FeatureAblation(llm), tok)
    with pytest.raises(ValueError, match="segment 1 has no prompt token"):
        ig.attribute(TextTokenInput(TEXT, tok, segments=np.r_[np.zeros(T - 1), 2]), target=" Paris")
    with pytest.raises(ValueError, match="ids for"):
        ig.attribute(TextTokenInput(TEXT, tok, segments=np.zeros(T - 1)), target=" Paris")
    with pytest.raises(ValueError, match="spell"):
        ig.attribute(TextTokenInput(TEXT, tok, segments=["The capital", "of France"]), target=" Paris")
    with pytest.raises(ValueError, match="tokens, words, sentences, lines or spans"):
        ig.attribute(TextTokenInput(TEXT, tok, segments="paragraphs"), target=" Paris")
    with pytest.raises(ValueError, match="in order"):
        ig.attribute(TextTokenInput(TEXT, tok, segments=[(10, 20), (5, 8)]), target=" Paris")
    with pytest.raises(ValueError, match="segments or skip_tokens"):
        TextTokenInput(TEXT, tok, segments="words", skip_tokens=["The"])
