"""n_steps="auto" (issue 34, item 5): IntegratedGradients and LayerIntegratedGradients try 8, 16, 32, ... steps and
stop at the first count whose convergence delta is within delta_tol of every example's sum of |attributions|. The
result is the plain call at the steps reached, bit for bit; the count before it did not meet the tolerance; the
count is reported (n_steps_used); the options that make no sense with it are refused by name."""
import os

import numpy as np
import pytest

import cattr
from cattr import attr as A
from cattr.llm import LLMGradientAttribution, TextTokenInput

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DIGITS = os.path.join(ROOT, "models", "digits", "digits.onnx")
QWEN = os.path.join(ROOT, "..", "shared", "golden", "llm", "qwen3-tiny")


@pytest.fixture(scope="module")
def digits():
    return cattr.load(DIGITS)


def _x():
    return np.load(os.path.join(ROOT, "tests", "data", "cli", "batch2.npy")).astype(np.float32)


def _worst(attrs, delta):
    """The largest |delta_b| / sum_b |attr| over the examples."""
    mass = sum(np.abs(np.asarray(a, np.float64)).reshape(len(delta), -1).sum(1) for a in attrs)
    return float(np.max(np.abs(np.asarray(delta, np.float64)) / mass))


def _check_auto(make, run, tol, max_steps=512):
    """run(method, n_steps, **kw) -> (attrs list, delta); the auto call against the plain calls at its count and half."""
    m = make()
    attrs, delta = run(m, "auto", delta_tol=tol, max_steps=max_steps)
    n = m.n_steps_used
    assert n is not None and 8 <= n <= max_steps
    assert _worst(attrs, delta) <= tol or n == max_steps, (n, _worst(attrs, delta))
    plain, pdelta = run(make(), n)
    for a, b in zip(attrs, plain):
        assert np.array_equal(a, b), n  # the same call: the same bits
    assert np.array_equal(delta, pdelta)
    if n > 8:  # the count before did not meet the tolerance
        prev, prevd = run(make(), n // 2 if n // 2 >= 8 else 8)
        assert _worst(prev, prevd) > tol, n
    return n


@pytest.mark.parametrize("tol", [1e-1, 1e-2])
def test_ig_auto_is_the_plain_call_at_the_steps_reached(digits, tol):
    x = _x()

    def run(m, n, **kw):
        a, d = m.attribute(x, target=[3, 7], n_steps=n, return_convergence_delta=True, **kw)
        return [a], d

    n = _check_auto(lambda: A.IntegratedGradients(digits), run, tol)
    assert n >= 8


def test_layer_ig_auto(digits):
    x = _x()

    def run(m, n, **kw):
        a, d = m.attribute(x, target=[3, 7], n_steps=n, return_convergence_delta=True, **kw)
        return [a], d

    _check_auto(lambda: A.LayerIntegratedGradients(digits, "conv2"), run, 2e-2)


def test_auto_stops_at_max_steps_with_a_warning(digits):
    x = _x()
    ig = A.IntegratedGradients(digits)
    with pytest.warns(cattr.CattrWarning, match="max_steps = 20"):
        a, d = ig.attribute(x, target=[3, 7], n_steps="auto", delta_tol=1e-9, max_steps=20,
                            return_convergence_delta=True)
    assert ig.n_steps_used == 20  # 8, 16, then max_steps itself
    plain, pd = A.IntegratedGradients(digits).attribute(x, target=[3, 7], n_steps=20, return_convergence_delta=True)
    assert np.array_equal(a, plain) and np.array_equal(d, pd)


def test_auto_without_delta_asked(digits):
    """The tries stop on the delta even when the caller does not ask for it."""
    x = _x()
    ig = A.IntegratedGradients(digits)
    a = ig.attribute(x, target=[3, 7], n_steps="auto", delta_tol=1e-2)
    assert isinstance(a, np.ndarray) and ig.n_steps_used >= 8
    assert np.array_equal(a, A.IntegratedGradients(digits).attribute(x, target=[3, 7], n_steps=ig.n_steps_used))


def test_auto_refused_where_it_does_not_apply(digits):
    x = _x()
    with pytest.raises(ValueError, match="n_steps auto"):
        A.LayerConductance(digits, "conv2").attribute(x, target=3, n_steps="auto")
    with pytest.raises(ValueError, match="multiply_by_inputs"):
        A.IntegratedGradients(digits, multiply_by_inputs=False).attribute(x, target=3, n_steps="auto")
    with pytest.raises(ValueError, match="noise tunnel"):
        A.NoiseTunnel(A.IntegratedGradients(digits)).attribute(x, target=3, n_steps="auto", nt_samples=2)
    with pytest.raises(ValueError, match="delta_tol"):
        A.IntegratedGradients(digits).attribute(x, target=3, n_steps="auto", delta_tol=2.0)
    with pytest.raises(ValueError, match="max_steps"):
        A.IntegratedGradients(digits).attribute(x, target=3, n_steps="auto", max_steps=4)
    with pytest.raises(ValueError, match="go with n_steps='auto'"):
        A.IntegratedGradients(digits).attribute(x, target=3, n_steps=16, delta_tol=1e-2)
    with pytest.raises(TypeError, match="'auto'"):
        A.IntegratedGradients(digits).attribute(x, target=3, n_steps="many")


@pytest.mark.skipif(not os.path.isdir(QWEN), reason="../shared/golden/llm/qwen3-tiny is not beside the repository")
@pytest.mark.parametrize("double", [False, True], ids=["float32", "float64"])
def test_llm_layer_ig_auto(double):
    llm = cattr.load_llm(QWEN)
    if double:
        llm = llm.double()
    tok = llm.tokenizer
    inp = TextTokenInput("The capital of France is", tok)

    def make():
        return LLMGradientAttribution(A.LayerIntegratedGradients(llm, "model.embed_tokens"), tok)

    def run(m, n, **kw):
        r = m.attribute(inp, target=" Paris, the city", n_steps=n, **kw)
        tokn = np.asarray(r.token_attr)
        return [tokn], m._last_delta

    # the LLM result keeps no delta: read it through the C call's output (cattr_llm_attribute's convergence_delta)
    orig = LLMGradientAttribution._run

    def run_keep(self, *a, **k):
        out = orig(self, *a, **k)
        self._last_delta = out[3]
        return out

    LLMGradientAttribution._run = run_keep
    try:
        n = _check_auto(make, run, 0.1)
    finally:
        LLMGradientAttribution._run = orig
    assert 8 < n <= 512
