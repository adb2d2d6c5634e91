"""NoiseTunnel around methods that run whole on each partition of the samples (the tunnel's one route for them,
issue 33): methods that take host inputs (the neuron and layer methods, GuidedGradCam, DeepLiftShap),
attributions of a layer's shape, partitions with a remainder, and a tunnel around GradientShap (a tunnel inside a
tunnel). Without noise (stdevs 0) every sample is the input itself, so smoothgrad is the method's attribution,
smoothgrad_sq its square and vargrad zero, up to the rounding of the mean."""
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
MASK = np.arange(64).reshape(1, 1, 8, 8) // 16
DIST = np.stack([np.zeros(SHAPE, np.float32), np.full(SHAPE, 0.1, np.float32)])

# name -> (constructor(model), keyword arguments of attribute)
METHODS = {
    "NeuronGradient": (lambda m: A.NeuronGradient(m, LAYER), dict(neuron_selector=NEURON)),
    "LayerGradCam": (lambda m: A.LayerGradCam(m, LAYER), dict(target=3)),
    "LayerGradientXActivation": (lambda m: A.LayerGradientXActivation(m, LAYER), dict(target=3)),
    "GuidedGradCam": (lambda m: A.GuidedGradCam(m, LAYER), dict(target=3)),
    "DeepLiftShap": (A.DeepLiftShap, dict(baselines=DIST, target=3)),
    "NeuronFeatureAblation": (lambda m: A.NeuronFeatureAblation(m, LAYER), dict(neuron_selector=NEURON)),
    "IntegratedGradients": (A.IntegratedGradients, dict(n_steps=4, target=3)),
}


@pytest.fixture(scope="module")
def digits():
    return cattr.load(DIGITS)


def _x():
    return np.load(os.path.join(ROOT, "tests", "data", "cli", "batch2.npy")).astype(np.float32)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_tunnel_without_noise_is_the_method(digits, name):
    ctor, kw = METHODS[name]
    x = _x()
    plain = ctor(digits).attribute(x, **kw)
    # 5 samples in partitions of 2: two full partitions and a remainder
    for nt_type, want in (("smoothgrad", plain), ("smoothgrad_sq", plain * plain), ("vargrad", 0 * plain)):
        got = A.NoiseTunnel(ctor(digits)).attribute(x, nt_type=nt_type, nt_samples=5, nt_samples_batch_size=2,
                                                     stdevs=0.0, **kw)
        assert got.shape == plain.shape, (name, nt_type)
        scale = max(float(np.abs(want).max()), float(np.abs(plain * plain).max()) if nt_type == "vargrad" else 0,
                    1e-6)  # vargrad: E[a^2] - E[a]^2, each rounded at the scale of a^2
        assert np.abs(got - want).max() <= 1e-5 * scale + 1e-7, (name, nt_type, np.abs(got - want).max())


def test_tunnel_with_noise_differs_and_repeats(digits):
    """With noise the samples differ (vargrad is not zero), and the same seed gives the same bits."""
    x = _x()
    ctor, kw = METHODS["NeuronGradient"]
    a = A.NoiseTunnel(ctor(digits)).attribute(x, nt_type="vargrad", nt_samples=4, stdevs=0.5, **kw)
    b = A.NoiseTunnel(ctor(digits)).attribute(x, nt_type="vargrad", nt_samples=4, stdevs=0.5, **kw)
    assert np.array_equal(a, b)
    assert np.isfinite(a).all() and np.abs(a).max() > 0


def test_tunnel_around_gradient_shap(digits):
    """GradientShap is a tunnel of its own: the outer tunnel's state and the inner one's live side by side."""
    x = _x()
    nt = A.NoiseTunnel(A.GradientShap(digits))
    kw = dict(baselines=DIST, n_samples=3, target=3, nt_samples=3, nt_samples_batch_size=2, stdevs=0.1)
    a = nt.attribute(x, **kw)
    b = A.NoiseTunnel(A.GradientShap(digits)).attribute(x, **kw)
    assert a.shape == x.shape
    assert np.isfinite(a).all() and np.abs(a).max() > 0
    assert np.array_equal(a, b)
