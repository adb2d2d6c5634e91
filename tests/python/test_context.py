"""cattr.context.ContextAttribution (issue 36): leave-one-out scores equal the log-probability lost by building the
prompt without the source (a fresh prompt, no removal machinery), the surrogate is seeded and its LDS a correlation,
sentences as sources, the chat template of the golden qwen3-tiny checkpoint, and the refusals."""
import os

import pytest

import cattr
from cattr import _lib
from cattr.context import ContextAttribution

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TINY = os.path.join(ROOT, "tests", "data", "llm", "tiny")
GOLDEN = os.environ.get("CATTR_GOLDEN") or os.path.join(ROOT, "..", "shared", "golden")
TPL = "C: {context} Q: {question} A:"
DOCS = ["Sky is green. Sun is up.", " Sea is blue.", " Fish swim."]


@pytest.fixture(scope="module")
def ca():
    return ContextAttribution(cattr.load_llm(TINY))


def test_loo_is_the_logprob_without_the_source(ca):
    full = ca.attribute("sky?", DOCS, answer=" green", template=TPL, separator="")
    assert [s.text for s in full.sources] == DOCS and full.ablations == 3
    for k in range(3):
        rest = DOCS[:k] + DOCS[k + 1:]
        without = ca.attribute("sky?", rest, answer=" green", template=TPL, separator="")
        want = full.answer_logprob - without.answer_logprob
        assert abs(full.sources[k].score - want) <= 1e-5 * max(1, abs(full.answer_logprob)), (k, full, want)


def test_surrogate_sentences_quality(ca):
    a = ca.attribute("sky?", DOCS, answer=" green", template=TPL, method="surrogate", sources="sentences",
                     samples=24, seed=5, quality=True)
    b = ca.attribute("sky?", DOCS, answer=" green", template=TPL, method="surrogate", sources="sentences",
                     samples=24, seed=5, quality=True)
    assert [s.text for s in a.sources] == ["Sky is green. ", "Sun is up.", " Sea is blue.", " Fish swim."]
    assert [s.score for s in a.sources] == [s.score for s in b.sources]
    assert a.ablations == 24 and a.held_out == 32 and -1 <= a.lds <= 1 and set(a.top_k_drop) == {1, 3, 5}
    assert a.top(1)[0].score == max(s.score for s in a.sources)
    c = ca.attribute("sky?", DOCS, answer=" green", template=TPL, method="surrogate", samples=24, seed=6)
    assert [s.score for s in c.sources] != [s.score for s in a.sources][:3]
    g = ca.attribute("sky?", DOCS, template=TPL, max_new=3)  # a generated answer
    assert g.answer and len(g.sources) == 3


def test_gradient(ca):
    """gradient x activation per source: the sums of LLMGradientAttribution's per-token attributions (the tokens'
    segment ids: each source, and the rest)."""
    import numpy as np
    from cattr.attr import LayerGradientXActivation
    from cattr.llm import LLMGradientAttribution, TextTokenInput

    r = ca.attribute("sky?", DOCS, answer=" green", template=TPL, separator="", method="gradient", quality=True)
    assert r.ablations == 0 and len(r.sources) == 3 and set(r.top_k_drop) == {1, 3, 5}
    llm = ca.llm
    tok = llm.tokenizer
    pieces = ["C: "] + DOCS + [" Q: sky? A:"]
    ids = [i for piece in pieces for i in tok.encode(piece)]
    lga = LLMGradientAttribution(LayerGradientXActivation(llm, "hidden.embed"), tok)
    res = lga.attribute(TextTokenInput(ids, None), target=tok.encode(" green"))
    per_token = np.asarray(res.seq_attr, dtype=np.float64)
    at = len(tok.encode("C: "))
    for k, d in enumerate(DOCS):
        n = len(tok.encode(d))
        assert abs(per_token[at:at + n].sum() - r.sources[k].score) <= 1e-4 * max(1e-3, np.abs(per_token).max())
        at += n


def test_hierarchical(ca):
    """Documents first, then the sentences of the best one: its sentences' scores are leave-one-out's over sentences,
    the other documents' leave-one-out's over documents."""
    docs = ["Sky is green. Sun is up.", " Sea is blue. Fish swim.", " Rain."]
    h = ca.attribute("sky?", docs, answer=" green", template=TPL, separator="", method="hierarchical",
                     top_documents=1)
    by_doc = ca.attribute("sky?", docs, answer=" green", template=TPL, separator="")
    by_sent = ca.attribute("sky?", docs, answer=" green", template=TPL, separator="", sources="sentences")
    best = max(range(3), key=lambda d: by_doc.sources[d].score)
    want = []
    for d in range(3):
        if d == best:
            want += [(s.document, s.text, s.score) for s in by_sent.sources if s.document == d]
        else:
            want.append((d, docs[d], by_doc.sources[d].score))
    got = [(s.document, s.text, s.score) for s in h.sources]
    assert [g[:2] for g in got] == [w[:2] for w in want]
    for g, w in zip(got, want):
        assert abs(g[2] - w[2]) <= 1e-5 * max(1, abs(h.answer_logprob)), (got, want)
    assert h.ablations == 3 + sum(1 for s in by_sent.sources if s.document == best)


def test_chat_template():
    qwen = os.path.join(GOLDEN, "llm", "qwen3-tiny")
    if not os.path.isdir(qwen):
        pytest.skip("no golden qwen3-tiny (set CATTR_GOLDEN)")
    r = ContextAttribution(qwen).attribute("sky?", DOCS[:2], answer=" green", sources="sentences")
    assert len(r.sources) == 3 and r.ablations == 3


def test_errors(ca):
    with pytest.raises(_lib.ArgumentError, match="method must be 'loo', 'surrogate', 'gradient' or 'hierarchical'"):
        ca.attribute("q", DOCS, answer="a", template=TPL, method="shap")
    with pytest.raises(_lib.ArgumentError, match="template must hold"):
        ca.attribute("q", DOCS, answer="a", template="{context}")
    with pytest.raises(_lib.ArgumentError, match="document 1 is empty"):
        ca.attribute("q", ["a", ""], answer="a", template=TPL)
    with pytest.raises(Exception, match="no readable tokenizer_config.json"):
        ca.attribute("q", DOCS, answer="a")
