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
    loo = ca.attribute("sky?", DOCS, answer=" green", template=TPL, separator="")
    assert abs(r.answer_logprob - loo.answer_logprob) <= 1e-9 * abs(loo.answer_logprob)
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
    with pytest.raises(_lib.ArgumentError, match="method must be 'loo', 'surrogate', 'gradient', 'hierarchical' or 'proxy'"):
        ca.attribute("q", DOCS, answer="a", template=TPL, method="shap")
    with pytest.raises(_lib.ArgumentError, match="template must hold"):
        ca.attribute("q", DOCS, answer="a", template="{context}")
    with pytest.raises(_lib.ArgumentError, match="document 1 is empty"):
        ca.attribute("q", ["a", ""], answer="a", template=TPL)
    with pytest.raises(Exception, match="no readable tokenizer_config.json"):
        ca.attribute("q", DOCS, answer="a")


def test_per_token_scores_sum_to_the_score(ca):
    """leave-one-out per answer token: the tokens' drops add up to the source's; gradient's likewise (linear)."""
    for method in ("loo", "gradient", "hierarchical"):
        r = ca.attribute("sky?", DOCS, answer=" green", template=TPL, method=method, per_token=True,
                         top_documents=1)
        assert len(r.answer_tokens) == len(r.sources[0].token_scores) >= 2, (method, r.answer_tokens)
        for s in r.sources:
            assert abs(sum(s.token_scores) - s.score) <= 1e-6 * max(1, abs(s.score)), (method, s)
    r = ca.attribute("sky?", DOCS, answer=" green", template=TPL, method="surrogate", samples=16, per_token=True)
    assert all(len(s.token_scores) == len(r.answer_tokens) for s in r.sources)


def test_proxy_with_itself_is_leave_one_out(ca):
    """the model as its own proxy: the top sources rescored are the top of leave-one-out, every score leave-one-out's
    (the same ablations), and the ranking puts the rescored first."""
    loo = ca.attribute("sky?", DOCS, answer=" green", template=TPL, sources="sentences")
    px = ca.attribute("sky?", DOCS, answer=" green", template=TPL, sources="sentences", method="proxy",
                      proxy=ca.llm, proxy_top=2)
    assert px.ablations == 2 and px.proxy_ablations == 4
    assert [s.score for s in px.sources] == pytest.approx([s.score for s in loo.sources], abs=1e-6)
    assert sorted(i for i, s in enumerate(px.sources) if s.rescored) == sorted(loo.ranking[:2])
    assert px.ranking == loo.ranking
    with pytest.raises(ValueError, match="proxy"):
        ca.attribute("sky?", DOCS, answer=" green", template=TPL, method="proxy")


def test_lines_and_spans(ca):
    docs = ["Sky is green.\nSun is up.", "Sea is blue."]
    r = ca.attribute("sky?", docs, answer=" green", template=TPL, sources="lines")
    assert [s.text for s in r.sources] == ["Sky is green.\n", "Sun is up.", "Sea is blue."]
    r = ca.attribute("sky?", docs, answer=" green", template=TPL, sources=[[(0, 13)], ["Sea is", " blue."]])
    assert [s.text for s in r.sources] == ["Sky is green.", "\nSun is up.", "Sea is", " blue."]
    with pytest.raises(ValueError, match="spell"):
        ca.attribute("sky?", docs, answer=" green", template=TPL, sources=[[], ["Sea"]])
    with pytest.raises(ValueError, match="one entry per document"):
        ca.attribute("sky?", docs, answer=" green", template=TPL, sources=[[(0, 3)]])


def _fresh(ca, question, docs, answer):
    """the answer's log-probability with a prompt built from scratch (no removal machinery, no cache)"""
    return ca.attribute(question, docs, answer=answer, template=TPL, separator="").answer_logprob


def test_surrogate_rows_are_brute_force(ca):
    """every random ablation the surrogate fits (and the held-out ones) is the log-probability of the prompt built
    from scratch with only the kept documents"""
    r = ca.attribute("sky?", DOCS, answer=" green", template=TPL, separator="", method="surrogate", samples=12,
                     seed=2, quality=True)
    assert len(r.ablation_rows) == 1 + 12 + 32
    seen = {}
    for kept, lp in r.ablation_rows:
        if not any(kept):
            continue
        key = tuple(kept)
        if key not in seen:
            seen[key] = _fresh(ca, "sky?", [d for d, k in zip(DOCS, kept) if k], " green")
        assert abs(lp - seen[key]) <= 1e-5 * max(1, abs(lp)), (kept, lp, seen[key])
    assert len(seen) >= 4


def test_hierarchical_is_brute_force(ca):
    """hierarchical: the refined document's sentences and the other documents whole, each scored by the prompt
    built from scratch without it"""
    docs = ["Sky is green. Sun is up.", " Sea is blue. Fish swim."]
    r = ca.attribute("sky?", docs, answer=" green", template=TPL, separator="", method="hierarchical",
                     top_documents=1)
    assert len(r.sources) == 3 and r.ablations == 4
    for s in r.sources:
        rest = list(docs)
        rest[s.document] = docs[s.document][:s.start] + docs[s.document][s.end:]
        rest = [d for d in rest if d]
        want = r.answer_logprob - _fresh(ca, "sky?", rest, " green")
        assert abs(s.score - want) <= 1e-5 * max(1, abs(r.answer_logprob)), (s, want)
