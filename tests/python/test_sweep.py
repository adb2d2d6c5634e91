"""Every attribution class of cattr.attr (issue 30) on the bundled digits model, with an out-of-range target (10 of a
10-class output, and other forms of it) and with a NaN input (and NaN baselines where the class takes baselines):
each raises a clear Python exception, never a silent result or a crash of the interpreter. Methods without a
target (LayerActivation, the neuron methods but NeuronConductance, DataLoaderAttribution) get the NaN cases only."""
import inspect
import os

import numpy as np
import pytest

import cattr
from cattr import attr as A

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DIGITS = os.path.join(ROOT, "models", "digits", "digits.onnx")
LAYER = "conv2"
NEURON = (0, 1, 1)
SHAPE = (1, 8, 8)
MASK = np.arange(64).reshape(1, 1, 8, 8) // 16  # four features, so that ShapleyValues stays small
DIST = np.stack([np.zeros(SHAPE, np.float32), np.full(SHAPE, 0.1, np.float32)])  # baselines of the Shap methods


def _lime_base(m):
    return A.LimeBase(m, A.SkLearnLasso(0.01), A.get_exp_kernel_similarity_function(), A.default_perturb_func, True,
                      None, None)


class _DataLoader:
    """DataLoaderAttribution(FeatureAblation) behind the sweep's call form: the input as a one-batch loader."""

    def __init__(self, m):
        self.obj = A.DataLoaderAttribution(A.FeatureAblation(m))

    def attribute(self, x, feature_mask=None):
        return self.obj.attribute([x], feature_mask=feature_mask)


# name -> (constructor(model), keyword arguments, takes a target, baselines keyword or None)
CASES = {
    "IntegratedGradients": (A.IntegratedGradients, dict(n_steps=4), True, "baselines"),
    "Saliency": (A.Saliency, {}, True, None),
    "DeepLift": (A.DeepLift, {}, True, "baselines"),
    "DeepLiftShap": (A.DeepLiftShap, dict(baselines=DIST), True, "baselines"),
    "GradientShap": (A.GradientShap, dict(baselines=DIST, n_samples=2), True, "baselines"),
    "InputXGradient": (A.InputXGradient, {}, True, None),
    "GuidedBackprop": (A.GuidedBackprop, {}, True, None),
    "Deconvolution": (A.Deconvolution, {}, True, None),
    "GuidedGradCam": (lambda m: A.GuidedGradCam(m, LAYER), {}, True, None),
    "LRP": (A.LRP, {}, True, None),
    "FeatureAblation": (A.FeatureAblation, {}, True, "baselines"),
    "FeaturePermutation": (A.FeaturePermutation, dict(feature_mask=MASK), True, None),
    "Occlusion": (A.Occlusion, dict(sliding_window_shapes=(1, 4, 4), strides=(1, 4, 4)), True, "baselines"),
    "ShapleyValueSampling": (A.ShapleyValueSampling, dict(feature_mask=MASK, n_samples=2), True, "baselines"),
    "ShapleyValues": (A.ShapleyValues, dict(feature_mask=MASK), True, "baselines"),
    "Lime": (A.Lime, dict(feature_mask=MASK, n_samples=10), True, "baselines"),
    "KernelShap": (A.KernelShap, dict(feature_mask=MASK, n_samples=10), True, "baselines"),
    "LimeBase": (_lime_base, dict(feature_mask=MASK, n_samples=10), True, "baselines"),
    "DataLoaderAttribution": (_DataLoader, dict(feature_mask=MASK), False, None),
    "NoiseTunnel(IntegratedGradients)": (lambda m: A.NoiseTunnel(A.IntegratedGradients(m)),
                                         dict(n_steps=4, nt_samples=2), True, "baselines"),
    "NoiseTunnel(Saliency)": (lambda m: A.NoiseTunnel(A.Saliency(m)), dict(nt_samples=2, nt_type="vargrad"), True,
                              None),
    "NoiseTunnel(DeepLift)": (lambda m: A.NoiseTunnel(A.DeepLift(m)), dict(nt_samples=2), True, "baselines"),
    "NoiseTunnel(FeatureAblation)": (lambda m: A.NoiseTunnel(A.FeatureAblation(m)),
                                     dict(nt_samples=2, feature_mask=MASK), True, "baselines"),
    "NoiseTunnel(LayerGradCam)": (lambda m: A.NoiseTunnel(A.LayerGradCam(m, LAYER)), dict(nt_samples=2), True,
                                  None),
    "NoiseTunnel(NeuronGradient)": (lambda m: A.NoiseTunnel(A.NeuronGradient(m, LAYER)),
                                    dict(nt_samples=2, neuron_selector=NEURON), False, None),
    "LayerActivation": (lambda m: A.LayerActivation(m, LAYER), {}, False, None),
    "LayerGradientXActivation": (lambda m: A.LayerGradientXActivation(m, LAYER), {}, True, None),
    "LayerGradCam": (lambda m: A.LayerGradCam(m, LAYER), {}, True, None),
    "InternalInfluence": (lambda m: A.InternalInfluence(m, LAYER), dict(n_steps=4), True, "baselines"),
    "LayerConductance": (lambda m: A.LayerConductance(m, LAYER), dict(n_steps=4), True, "baselines"),
    "LayerIntegratedGradients": (lambda m: A.LayerIntegratedGradients(m, LAYER), dict(n_steps=4), True,
                                 "baselines"),
    "LayerDeepLift": (lambda m: A.LayerDeepLift(m, LAYER), {}, True, "baselines"),
    "LayerDeepLiftShap": (lambda m: A.LayerDeepLiftShap(m, LAYER), dict(baselines=DIST), True, "baselines"),
    "LayerGradientShap": (lambda m: A.LayerGradientShap(m, LAYER), dict(baselines=DIST, n_samples=2), True,
                          "baselines"),
    "LayerFeatureAblation": (lambda m: A.LayerFeatureAblation(m, LAYER), {}, True, "layer_baselines"),
    "LayerFeaturePermutation": (lambda m: A.LayerFeaturePermutation(m, LAYER), {}, True, None),
    "LayerLRP": (lambda m: A.LayerLRP(m, LAYER), {}, True, None),
    "NeuronGradient": (lambda m: A.NeuronGradient(m, LAYER), dict(neuron_selector=NEURON), False, None),
    "NeuronIntegratedGradients": (lambda m: A.NeuronIntegratedGradients(m, LAYER),
                                  dict(neuron_selector=NEURON, n_steps=4), False, "baselines"),
    "NeuronConductance": (lambda m: A.NeuronConductance(m, LAYER), dict(neuron_selector=NEURON, n_steps=4), True,
                          "baselines"),
    "NeuronDeepLift": (lambda m: A.NeuronDeepLift(m, LAYER), dict(neuron_selector=NEURON), False, "baselines"),
    "NeuronDeepLiftShap": (lambda m: A.NeuronDeepLiftShap(m, LAYER), dict(neuron_selector=NEURON, baselines=DIST),
                           False, "baselines"),
    "NeuronGradientShap": (lambda m: A.NeuronGradientShap(m, LAYER),
                           dict(neuron_selector=NEURON, baselines=DIST, n_samples=2), False, "baselines"),
    "NeuronGuidedBackprop": (lambda m: A.NeuronGuidedBackprop(m, LAYER), dict(neuron_selector=NEURON), False, None),
    "NeuronDeconvolution": (lambda m: A.NeuronDeconvolution(m, LAYER), dict(neuron_selector=NEURON), False, None),
    "NeuronFeatureAblation": (lambda m: A.NeuronFeatureAblation(m, LAYER), dict(neuron_selector=NEURON), False,
                              "baselines"),
}

# out-of-range targets for two examples, and the index the library's message names
TARGETS = {"int": (10, 10), "negative": (-11, -11), "tuple": ((10,), 10), "per-example": ([3, 10], 10),
           "array": (np.array([10, 3]), 10)}


@pytest.fixture(scope="module")
def digits():
    return cattr.load(DIGITS)


def _x(dtype=np.float32):
    return np.load(os.path.join(ROOT, "tests", "data", "cli", "batch2.npy")).astype(dtype)


def _call(name, digits, x, **kw):
    ctor, base_kw, _, _ = CASES[name]
    args = dict(base_kw)
    args.update(kw)
    return ctor(digits).attribute(x, **args)


def test_the_sweep_covers_every_class():
    """A class added to cattr.attr must be added to CASES."""
    covered = {n.split("(")[0] for n in CASES} | {n[n.index("(") + 1:-1] for n in CASES if "(" in n}
    classes = {n for n in A.__all__ if inspect.isclass(getattr(A, n)) and
               (issubclass(getattr(A, n), A.Attribution) or getattr(A, n) is A.NoiseTunnel)}
    abstract = {"Attribution", "LayerAttribution"}
    assert classes - abstract - covered == set()


def test_every_case_runs_when_valid(digits):
    """The sweep's arguments are valid: with a good target and finite inputs each case gives finite values, so the
    errors below come from the bad value alone."""
    x = _x()
    for name, (_, _, takes_target, _) in CASES.items():
        res = _call(name, digits, x, **({"target": 3} if takes_target else {}))
        arrs = res if isinstance(res, (tuple, list)) else [res]
        assert arrs and all(np.isfinite(np.asarray(a)).all() for a in arrs), name


@pytest.mark.parametrize("form", sorted(TARGETS))
@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c[2]])
def test_out_of_range_target(digits, name, form):
    target, index = TARGETS[form]
    with pytest.raises(ValueError, match="target index %d is out of range for dim 1 of size 10" % index):
        _call(name, digits, _x(), target=target)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("value", [np.nan, np.inf])
@pytest.mark.parametrize("name", list(CASES))
def test_non_finite_input(digits, name, value, dtype):
    x = _x(dtype)
    x[1, 0, 3, 3] = value
    kw = {"target": 3} if CASES[name][2] else {}
    with pytest.raises(ValueError, match=r"input 0 has a non-finite value \(%s\) at flat index 91" %
                       ("nan" if np.isnan(value) else "inf")):
        _call(name, digits, x, **kw)


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c[3]])
def test_nan_baselines(digits, name):
    _, base_kw, takes_target, key = CASES[name]
    kw = {"target": 3} if takes_target else {}
    if key == "layer_baselines":
        kw[key] = float("nan")
    elif "baselines" in base_kw:  # a distribution of baselines
        b = DIST.copy()
        b[1, 0, 0, 0] = np.nan
        kw[key] = b
    else:
        b = np.zeros((2,) + SHAPE, np.float32)
        b[1, 0, 2, 2] = np.nan
        kw[key] = b
    with pytest.raises(ValueError, match=r"non-finite value \(nan\)"):
        _call(name, digits, _x(), **kw)
