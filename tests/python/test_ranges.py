"""Integers crossing from the Python package into the C library are range-checked (issue 30): ctypes would silently
truncate them into the C types (n_steps=2**32+20 ran 20 steps, target=2**64+3 explained class 3). Each bad value
raises a Python exception naming the argument, its value and the allowed range (ValueError), or TypeError for a
non-integer, before anything runs."""
import os

import numpy as np
import pytest

import cattr
from cattr import _lib
from cattr import attr as A
from cattr.llm import LLMAttribution, LLMGradientAttribution, TextTemplateInput, TextTokenInput

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DIGITS = os.path.join(ROOT, "models", "digits", "digits.onnx")
TINY = os.path.join(ROOT, "tests", "data", "llm", "tiny")

I64 = 2 ** 63 - 1
INT_RANGE = "-2147483648 to 2147483647"
I64_RANGE = "-9223372036854775808 to 9223372036854775807"
U64_RANGE = "0 to 18446744073709551615"


@pytest.fixture(scope="module")
def digits():
    return cattr.load(DIGITS)


@pytest.fixture(scope="module")
def tiny():
    return cattr.load_llm(TINY)


@pytest.fixture
def x():
    return np.load(os.path.join(ROOT, "models", "digits", "samples", "digit_3.npy")).astype(np.float32)


@pytest.fixture
def never_runs(monkeypatch):
    """Fails the test if a library call of an attribution starts (every one goes through Interruptible.run)."""
    calls = []
    real = _lib.Interruptible.run

    def spy(self, fn, *args):
        calls.append(getattr(fn, "__name__", fn))
        return real(self, fn, *args)

    monkeypatch.setattr(_lib.Interruptible, "run", spy)
    yield calls
    assert calls == [], "the library ran: %s" % calls


def _raises(exc, *parts):
    """pytest.raises whose message must hold each of `parts` (literally)."""
    import re
    return pytest.raises(exc, match="(?s)" + ".*".join(re.escape(str(p)) for p in parts))


# -- cattr_attr_params fields ----------------------------------------------------------------------------------------

def test_n_steps_does_not_wrap(digits, x, never_runs):
    with _raises(ValueError, "n_steps", 2 ** 32 + 20, INT_RANGE):
        A.IntegratedGradients(digits).attribute(x, target=3, n_steps=2 ** 32 + 20)
    with _raises(ValueError, "n_steps", -2 ** 31 - 1):
        A.LayerIntegratedGradients(digits, "conv2").attribute(x, target=3, n_steps=-2 ** 31 - 1)


def test_batch_and_sample_counts_do_not_wrap(digits, x, never_runs):
    with _raises(ValueError, "internal_batch_size", 2 ** 31, INT_RANGE):
        A.IntegratedGradients(digits).attribute(x, target=3, internal_batch_size=2 ** 31)
    with _raises(ValueError, "n_samples", 2 ** 31, INT_RANGE):
        A.GradientShap(digits).attribute(x, np.zeros((2,) + x.shape[1:], np.float32), target=3, n_samples=2 ** 31)
    with _raises(ValueError, "n_samples", 2 ** 31):
        A.ShapleyValueSampling(digits).attribute(x, target=3, n_samples=2 ** 31)
    with _raises(ValueError, "n_samples", 2 ** 32 + 25):
        A.Lime(digits).attribute(x, target=3, n_samples=2 ** 32 + 25)
    with _raises(ValueError, "perturbations_per_eval", 2 ** 40, INT_RANGE):
        A.FeatureAblation(digits).attribute(x, target=3, perturbations_per_eval=2 ** 40)
    with _raises(ValueError, "nt_samples", 2 ** 32 + 5):
        A.NoiseTunnel(A.Saliency(digits)).attribute(x, target=3, nt_samples=2 ** 32 + 5)
    with _raises(ValueError, "nt_samples_batch_size", 2 ** 32 + 1):
        A.NoiseTunnel(A.Saliency(digits)).attribute(x, target=3, nt_samples=2, nt_samples_batch_size=2 ** 32 + 1)


def test_seed_and_memory_are_unsigned(digits, x, never_runs):
    nt = A.NoiseTunnel(A.Saliency(digits))
    with _raises(ValueError, "_seed", -1, U64_RANGE):
        nt.attribute(x, target=3, _seed=-1)
    with _raises(ValueError, "_seed", 2 ** 64, U64_RANGE):
        nt.attribute(x, target=3, _seed=2 ** 64)
    with _raises(ValueError, "_max_memory", -1, U64_RANGE):
        A.IntegratedGradients(digits).attribute(x, target=3, _max_memory=-1)


def test_non_integers_are_type_errors(digits, x, never_runs):
    ig = A.IntegratedGradients(digits)
    with _raises(TypeError, "n_steps", "float"):
        ig.attribute(x, target=3, n_steps=2.5)
    with _raises(TypeError, "n_steps", "str"):
        ig.attribute(x, target=3, n_steps="50")
    with _raises(TypeError, "target", "float"):
        ig.attribute(x, target=3.0)
    with _raises(TypeError, "target"):
        ig.attribute(x, target=np.array([3.0]))
    with _raises(TypeError, "_seed"):
        A.NoiseTunnel(A.Saliency(digits)).attribute(x, target=3, _seed=1.5)


def test_valid_integer_forms_still_run(digits, x):
    ig = A.IntegratedGradients(digits)
    ref = ig.attribute(x, target=3, n_steps=8)
    np.testing.assert_array_equal(ig.attribute(x, target=np.int64(3), n_steps=np.int32(8)), ref)
    np.testing.assert_array_equal(ig.attribute(x, target=np.array([3], dtype=np.uint64), n_steps=8), ref)
    # bools where Captum takes them
    s1 = A.Saliency(digits).attribute(x, target=3, abs=False)
    s2 = A.Saliency(digits).attribute(x, target=3, abs=True)
    np.testing.assert_allclose(np.abs(s1), s2)
    # a float mask of whole numbers is the integer mask
    m = np.arange(64).reshape(1, 1, 8, 8) // 16
    fa = A.FeatureAblation(digits)
    np.testing.assert_array_equal(fa.attribute(x, target=3, feature_mask=m.astype(np.float64)),
                                  fa.attribute(x, target=3, feature_mask=m))


# -- targets ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target,value", [
    (2 ** 64 + 3, 2 ** 64 + 3), (-(2 ** 63) - 1, -(2 ** 63) - 1), ((2 ** 64 + 3,), 2 ** 64 + 3),
    ([3, 2 ** 64 + 3], 2 ** 64 + 3), ([(0,), (2 ** 63,)], 2 ** 63),
    (np.array([3, 2 ** 64 - 1], dtype=np.uint64), 2 ** 64 - 1), (np.uint64(2 ** 64 - 1), 2 ** 64 - 1),
])
def test_target_does_not_wrap(digits, x, never_runs, target, value):
    xx = np.concatenate([x, x])
    with _raises(ValueError, "target", value, I64_RANGE):
        A.Saliency(digits).attribute(xx, target=target)


def test_target_in_int64_but_outside_the_output(digits, x):
    # in the C type's range, refused by the library with the index and the dim
    for t in (I64, -(2 ** 63), 10, -11):
        with _raises(ValueError, "target index %d" % t, "size 10"):
            A.Saliency(digits).attribute(x, target=t)


# -- arrays of int64 the package builds ------------------------------------------------------------------------------

def test_feature_masks_do_not_wrap(digits, x, never_runs):
    fa = A.FeatureAblation(digits)
    big = [[[[2 ** 64 + 1] * 8] * 8]]  # a Python list: an object array of ints beyond int64
    with _raises(ValueError, "feature_mask 0", 2 ** 64 + 1, I64_RANGE):
        fa.attribute(x, target=3, feature_mask=(big,))
    with _raises(ValueError, "feature_mask 0", 2 ** 64 - 1, I64_RANGE):
        fa.attribute(x, target=3, feature_mask=np.full((1, 1, 8, 8), 2 ** 64 - 1, dtype=np.uint64))
    with _raises(ValueError, "feature_mask 0", I64_RANGE):
        fa.attribute(x, target=3, feature_mask=np.full((1, 1, 8, 8), 2.0 ** 70))
    with _raises(TypeError, "feature_mask 0", "0.5"):
        fa.attribute(x, target=3, feature_mask=np.full((1, 1, 8, 8), 0.5))
    with _raises(TypeError, "feature_mask 0", "nan"):
        fa.attribute(x, target=3, feature_mask=np.full((1, 1, 8, 8), np.nan))
    with _raises(ValueError, "layer_mask 0", 2 ** 64 - 1):
        A.LayerFeatureAblation(digits, "conv2").attribute(
            x, target=3, layer_mask=np.full((1, 16, 4, 4), 2 ** 64 - 1, dtype=np.uint64))


def test_windows_and_neurons_do_not_wrap(digits, x, never_runs):
    occ = A.Occlusion(digits)
    with _raises(ValueError, "sliding_window_shapes", 2 ** 64 + 2, I64_RANGE):
        occ.attribute(x, sliding_window_shapes=(1, 2 ** 64 + 2, 2), target=3)
    with _raises(ValueError, "strides", 2 ** 64 + 1):
        occ.attribute(x, sliding_window_shapes=(1, 2, 2), strides=(1, 2 ** 64 + 1, 1), target=3)
    with _raises(ValueError, "strides", 2 ** 64):
        occ.attribute(x, sliding_window_shapes=(1, 2, 2), strides=2 ** 64, target=3)
    ng = A.NeuronGradient(digits, "conv2")
    with _raises(ValueError, "neuron_selector", 2 ** 64):
        ng.attribute(x, neuron_selector=(0, 2 ** 64, 1))
    with _raises(ValueError, "neuron_selector", I64):  # its stop, I64 + 1, would not fit
        ng.attribute(x, neuron_selector=(0, I64, 1))
    with _raises(ValueError, "neuron_selector slice step", 2 ** 64):
        ng.attribute(x, neuron_selector=(slice(0, 2, 2 ** 64), 0, 0))
    with _raises(ValueError, "neuron_sum dims", 2 ** 64 + 1):
        A.neuron_sum(2 ** 64 + 1)
    with _raises(TypeError, "neuron_selector", "float"):
        ng.attribute(x, neuron_selector=(0, 1.0, 1))


def test_integer_inputs_and_baselines_do_not_wrap(tiny, never_runs):
    lig = A.LayerIntegratedGradients(tiny, "model.embed_tokens")
    with _raises(ValueError, "input 0", 2 ** 64 - 1, I64_RANGE):
        lig.attribute(np.array([[1, 2 ** 64 - 1]], dtype=np.uint64), target=(0, 1), n_steps=2)
    with _raises(ValueError, "input 0", 2 ** 64):
        lig.attribute([[1, 2 ** 64]], target=(0, 1), n_steps=2)
    with _raises(ValueError, "baselines 0", 2 ** 64):
        lig.attribute(np.array([[1, 2]]), baselines=2 ** 64, target=(0, 1), n_steps=2)
    with _raises(ValueError, "input 0", 2 ** 64 - 1):
        tiny(np.array([[1, 2 ** 64 - 1]], dtype=np.uint64))


# -- the language-model classes --------------------------------------------------------------------------------------

def test_llm_token_ids_do_not_wrap(tiny, never_runs):
    tok = tiny.tokenizer
    fa = LLMAttribution(A.FeatureAblation(tiny), tok)
    ids = tok.encode("Hello")
    with _raises(ValueError, "token ids", 2 ** 63, I64_RANGE):
        TextTokenInput([1, 2 ** 63], None)
    with _raises(ValueError, "token ids", 2 ** 64 - 1):
        TextTokenInput(np.array([1, 2 ** 64 - 1], dtype=np.uint64), None)
    with _raises(ValueError, "target token ids", 2 ** 63):
        fa.attribute(TextTokenInput(ids, tok), target=[2 ** 63])
    with _raises(ValueError, "target token ids", 2 ** 64 + 1):
        fa.attribute(TextTokenInput(ids, tok), target=np.array([2 ** 64 + 1], dtype=object))
    with _raises(ValueError, "target token ids", 2 ** 63):
        LLMAttribution(A.FeatureAblation(tiny), tok).attribute(TextTemplateInput("{} is", ["Paris"]),
                                                               target=[2 ** 63])
    with _raises(ValueError, "baselines", -5, "0 to %d" % I64):  # -1 would mean "the pad token" in the library
        TextTokenInput(ids, tok, baselines=-5)
    with _raises(ValueError, "baselines", 2 ** 64):
        LLMGradientAttribution(A.LayerIntegratedGradients(tiny, "model.embed_tokens"), tok).attribute(
            TextTokenInput(ids, tok), target=[1], baselines=2 ** 64)
    with _raises(TypeError, "token ids", "float"):
        TextTokenInput([1, 2.5], None)


def test_llm_parameters_do_not_wrap(tiny, never_runs):
    tok = tiny.tokenizer
    ids = tok.encode("Hello")
    lig = LLMGradientAttribution(A.LayerIntegratedGradients(tiny, "model.embed_tokens"), tok)
    with _raises(ValueError, "n_steps", 2 ** 32 + 20, INT_RANGE):
        lig.attribute(TextTokenInput(ids, tok), target=[1], n_steps=2 ** 32 + 20)
    svs = LLMAttribution(A.ShapleyValueSampling(tiny), tok)
    with _raises(ValueError, "n_samples", 2 ** 31):
        svs.attribute(TextTokenInput(ids, tok), target=[1], n_samples=2 ** 31)
    with _raises(ValueError, "_permutations", 2 ** 64):
        svs.attribute(TextTokenInput(ids, tok), target=[1], n_samples=1, _permutations=[[2 ** 64] + [0] * 4])
    fa = LLMAttribution(A.FeatureAblation(tiny), tok)
    with _raises(ValueError, "perturbations_per_eval", 2 ** 40):
        fa.attribute(TextTokenInput(ids, tok), target=[1], perturbations_per_eval=2 ** 40)
    with _raises(ValueError, "_seed", -1):
        fa.attribute(TextTokenInput(ids, tok), target=[1], _seed=-1)


def test_llm_tokenizer_and_generate_do_not_wrap(tiny):
    tok = tiny.tokenizer
    with _raises(ValueError, "token ids", 2 ** 64 + 1):
        tok.decode([2 ** 64 + 1])
    with _raises(ValueError, "token id", 2 ** 64):
        tok.convert_ids_to_tokens(2 ** 64)
    with _raises(ValueError, "max_new_tokens", 2 ** 32 + 1, "0 to 2147483647"):
        tiny.generate(tok.encode("Hello"), max_new_tokens=2 ** 32 + 1)
    with _raises(ValueError, "max_new_tokens", -5):
        tiny.generate(tok.encode("Hello"), max_new_tokens=-5)
    with _raises(ValueError, "input_ids", 2 ** 64):
        tiny.generate([1, 2 ** 64], max_new_tokens=1)
    assert len(tiny.generate(tok.encode("Hello"), max_new_tokens=np.int64(1))) == 1


# -- the checked struct itself ---------------------------------------------------------------------------------------

def test_every_integer_field_of_the_structs_is_checked():
    for cls in (_lib.AttrParams, _lib.Call, _lib.Target, _lib.NodeRule, _lib.LLMCall):
        s = cls()
        ranges = cls._ranges()
        ints = [f for f, t, *_ in cls._fields_ if _lib._is_int_ctype(t)]
        assert sorted(ranges) == sorted(ints) and ints, cls.__name__
        for f in ints:
            lo, hi = ranges[f]
            setattr(s, f, hi)
            assert getattr(s, f) == hi
            with pytest.raises(ValueError, match=str(hi + 1)):
                setattr(s, f, hi + 1)
            with pytest.raises(ValueError, match=str(lo - 1).replace("-", "\\-")):
                setattr(s, f, lo - 1)
            with pytest.raises(TypeError):
                setattr(s, f, 1.0)
