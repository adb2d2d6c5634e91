"""The language-model goldens (shared/golden/llm: cases.json, arch_cases.json, more_cases.json) replayed through
Captum's LLMAttribution / LLMGradientAttribution API of cattr.llm, in float32 against the float32 reference and in
float64 (llm.double()) against the float64 one, with the case's suggested_atol (as `cattr replay`); and the result
object (plots, HTML)."""
import json
import os

import numpy as np
import pytest

import cattr
from cattr import attr as A
from cattr.llm import (LLMAttribution, LLMGradientAttribution, LLMAttributionResult, TextTemplateInput,
                       TextTokenInput)

import golden

LLM_DIR = os.path.join(golden.GOLDEN_ROOT, "llm")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TINY = os.path.join(ROOT, "tests", "data", "llm", "tiny")


# float64 runs: one prompt of each method and each architecture (all of them take minutes on two cores)
F64 = ("france.", "tpl_capital.", "english.gxa", "llama.r12.", "qwen2.r14.", "mistral.r16.")


def _cases():
    out = []
    for index in ("cases.json", "arch_cases.json", "more_cases.json"):
        path = os.path.join(LLM_DIR, index)
        if not os.path.isfile(path):
            continue
        with open(path) as f:
            j = json.load(f)
        for c in j["cases"]:
            out.append(pytest.param(index, c["id"], "float32", id=c["id"] + "-float32"))
            if c["id"].startswith(F64):
                out.append(pytest.param(index, c["id"], "float64", id=c["id"] + "-float64"))
    return out


CASES = _cases()
_INDEX = {}
_LLMS = {}
_TENSORS = {}


def _index(name):
    if name not in _INDEX:
        with open(os.path.join(LLM_DIR, name)) as f:
            _INDEX[name] = json.load(f)
    return _INDEX[name]


def _llm(d):
    if d not in _LLMS:
        _LLMS[d] = cattr.load_llm(os.path.join(LLM_DIR, d))
    return _LLMS[d]


def _tensors(rel):
    if rel not in _TENSORS:
        _TENSORS[rel] = cattr.load_safetensors(os.path.join(LLM_DIR, rel))
    return _TENSORS[rel]


@pytest.mark.skipif(not CASES, reason="language-model golden data absent: set CATTR_GOLDEN (default ../shared/golden)")
@pytest.mark.parametrize("index,case_id,dtype", CASES or [("-", "-", "-")])
def test_llm_golden(index, case_id, dtype):
    j = _index(index)
    c = next(x for x in j["cases"] if x["id"] == case_id)
    prompt = next((p for p in j["prompts"] if p["id"] == c["prompt"]), None)
    mdir = c.get("model")
    if mdir:
        mdir = next(m["dir"] for m in j["models"] if m["id"] == mdir)
    else:
        mdir = j["model"]["dir"] if isinstance(j.get("model"), dict) else j.get("model", "qwen3-tiny")
    llm = _llm(mdir)
    if dtype == "float64":
        llm.double()
    else:
        llm.float()
    tok = llm.tokenizer
    T = _tensors(c["tensor_file"])
    args = c.get("args") or {}
    if isinstance(args, str):
        pytest.skip("arguments not machine-readable")
    method = c["method"]
    bl = c.get("baseline") or {}
    base_tok = bl.get("token_id") if bl.get("kind") == "token" else None
    target = c["target_ids"]
    kw = {}
    tpl = c.get("input")
    if tpl:
        inp = TextTemplateInput(tpl["template"], tpl["values"], baselines=tpl.get("baselines"))
    elif c.get("tokenize", True) is False or prompt is None or "text" not in prompt:
        ids = c.get("input_ids") or prompt["input_ids"]
        inp = TextTokenInput(ids, None if c.get("tokenize", True) is False else tok,
                             baselines=base_tok if base_tok is not None else 0)
    else:
        inp = TextTokenInput(prompt["text"], tok, baselines=base_tok if base_tok is not None else 0)
        assert inp.input_ids == prompt["input_ids"]
    if method in ("LayerIntegratedGradients", "LayerGradientXActivation"):
        obj = LLMGradientAttribution(getattr(A, method)(llm, "model.embed_tokens"), tok)
        if method == "LayerIntegratedGradients":
            kw.update(n_steps=args["n_steps"], method=args["method"])
            if base_tok is not None:
                kw["baselines"] = base_tok
    else:
        inner = getattr(A, method)(llm)
        obj = LLMAttribution(inner, tok)
        if "n_samples" in args:
            kw["n_samples"] = args["n_samples"]
        if c.get("permutations"):
            kw["_permutations"] = c["permutations"]
        rd = c.get("random_draws")
        if rd:
            fmt = rd["tensor_name_format"]
            kw["_draws"] = [(r, T[fmt % k]) for k, r in enumerate(rd["sequence"])]
    res = obj.attribute(inp, target=target, **kw)
    assert isinstance(res, LLMAttributionResult)
    atol = c["tolerance"]["suggested_atol"]
    ex = c["expected" if dtype == "float32" else "expected_f64"]
    for key in ("seq_attr", "token_attr"):
        name = ex.get(key)
        got = getattr(res, key)
        if name is None:
            continue
        e = np.asarray(T[name], dtype=np.float64)
        assert got is not None, key
        assert got.size == e.size, "%s: %s values, expected %s" % (key, got.size, e.size)
        err = float(np.max(np.abs(got.reshape(-1) - e.reshape(-1))))
        assert err <= atol, "%s: err %.3e > atol %.3e" % (key, err, atol)
    assert len(res.input_tokens) == res.seq_attr.shape[0]
    assert len(res.output_tokens) == len(target)


# -- the result object and argument forms, on the small test checkpoint ---------------------------------------------

@pytest.fixture(scope="module")
def tiny():
    if not os.path.isfile(os.path.join(TINY, "config.json")):
        pytest.skip("tests/data/llm/tiny absent")
    return cattr.load_llm(TINY)


def test_llm_result_and_forms(tiny):
    tok = tiny.tokenizer
    ids = tok.encode("The capital of France is")
    assert tok.decode(ids) == "The capital of France is"
    fa = LLMAttribution(A.FeatureAblation(tiny), tok)
    r = fa.attribute(TextTokenInput("The capital of France is", tok), target=" Paris")
    assert r.token_attr.shape == (len(r.output_tokens), len(ids))
    np.testing.assert_allclose(r.token_attr.sum(0), r.seq_attr, rtol=1e-6, atol=1e-7)
    # target as ids, and skip_tokens on the input: the skipped token's column is left out
    r2 = fa.attribute(TextTokenInput(ids, tok), target=tok.encode(" Paris"))
    np.testing.assert_array_equal(r2.seq_attr, r.seq_attr)
    r3 = fa.attribute(TextTokenInput("The capital of France is", tok, skip_tokens=[ids[0]]), target=" Paris")
    np.testing.assert_allclose(r3.seq_attr, r.seq_attr[1:], rtol=1e-6, atol=1e-7)
    html = r._repr_html_()
    import html as _h
    assert "<table" in html and _h.escape(r.input_tokens[-1]) in html
    lig = LLMGradientAttribution(A.LayerIntegratedGradients(tiny, "model.embed_tokens"), tok)
    g = lig.attribute(TextTokenInput("The capital of France is", tok), target=" Paris", n_steps=8)
    assert g.token_attr.shape == r.token_attr.shape
    # the layer as Captum gives it (llm.model.embed_tokens), and the explainer on token ids directly
    g2 = LLMGradientAttribution(A.LayerIntegratedGradients(tiny, tiny.model.embed_tokens), tok).attribute(
        TextTokenInput("The capital of France is", tok), target=" Paris", n_steps=8)
    np.testing.assert_array_equal(g2.token_attr, g.token_attr)
    pid = tok.encode(" Paris")[0]
    emb = A.LayerIntegratedGradients(tiny, tiny.model.embed_tokens).attribute(np.array([ids]), target=(0, pid),
                                                                              n_steps=4)
    assert emb.shape[:2] == (1, len(ids))
    act = A.LayerActivation(tiny, "model.embed_tokens").attribute(np.array([ids]))
    assert act.shape == emb.shape
    g64 = LLMGradientAttribution(A.LayerIntegratedGradients(tiny.double(), "model.embed_tokens"), tok).attribute(
        TextTokenInput("The capital of France is", tok), target=" Paris", n_steps=8)
    tiny.float()
    np.testing.assert_allclose(g64.seq_attr, g.seq_attr, atol=1e-4 * max(1.0, np.abs(g64.seq_attr).max()))
    t = LLMAttribution(A.FeatureAblation(tiny), tok).attribute(
        TextTemplateInput("{} is the capital of {}", ["Paris", "France"]), target=".")
    assert t.input_tokens == ["Paris", "France"] and t.seq_attr.shape == (2,)
    gen = LLMAttribution(A.FeatureAblation(tiny), tok).attribute(TextTokenInput("Hello", tok),
                                                                  gen_args={"max_new_tokens": 2})
    assert 1 <= len(gen.output_tokens) <= 2
    with pytest.raises(ValueError, match="layer must be the token embedding"):
        LLMGradientAttribution(A.LayerIntegratedGradients(tiny, "hidden.layer0"), tok)
    with pytest.raises(ValueError):
        fa.attribute(TextTokenInput("Hello", tok), target=[10 ** 9])


def test_llm_plots(tiny):
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    tok = tiny.tokenizer
    r = LLMAttribution(A.FeatureAblation(tiny), tok).attribute(TextTokenInput("a b c", tok), target=" d e")
    fig, ax = r.plot_token_attr()
    assert fig is not None and len(ax.get_xticklabels()) == len(r.input_tokens)
    fig, ax = r.plot_seq_attr()
    assert fig is not None


def test_decode_whole_characters():
    # a character whose bytes span several byte-level tokens comes out whole when the sequence is decoded together
    tok = cattr.load_llm(TINY).tokenizer
    text = "Caf\u00e9 \U0001F600 ok"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.decode([]) == ""
