"""Captum's argument forms through the Python API: baselines, inputs, targets, deltas, dtypes, errors."""
import os
import threading

import numpy as np
import pytest

import cattr
from cattr.attr import (IntegratedGradients, Saliency, DeepLift, FeatureAblation, Occlusion, NoiseTunnel,
                        LayerGradCam, LayerConductance, LayerAttribution, NeuronGradient, InputXGradient,
                        GradientShap, ShapleyValueSampling, Lime, neuron_sum)

import golden

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DIGITS = os.path.join(ROOT, "models", "digits", "digits.onnx")
SAMPLES = os.path.join(ROOT, "models", "digits", "samples")


@pytest.fixture(scope="module")
def digits():
    return cattr.load(DIGITS)


def sample(d, dtype=np.float64):
    return np.load(os.path.join(SAMPLES, "digit_%d.npy" % d)).astype(dtype)


def batch(dtype=np.float64):
    return np.concatenate([sample(3, dtype), sample(7, dtype)])


def golden_model(name):
    d = os.path.join(golden.CAPTUM_DIR, name)
    if not os.path.isfile(os.path.join(d, "model.onnx")):
        pytest.skip("golden data absent (%s): set CATTR_GOLDEN" % d)
    return cattr.load(os.path.join(d, "model.onnx")), cattr.load_safetensors(os.path.join(d, "tensors.safetensors"))


# -- models --------------------------------------------------------------------------------------------------------

def test_model_description(digits):
    assert digits.input_names == ["input"]
    assert digits.input_shapes == [(None, 1, 8, 8)]
    assert digits.resolve("conv1") == "/conv1/Conv_output_0"
    assert "conv2" in digits.describe()
    assert "cpu" in cattr.devices()
    assert cattr.__version__.count(".") == 2


def test_forward_dtype(digits):
    y64 = digits(batch())
    y32 = digits(batch(np.float32))
    assert y64.dtype == np.float64 and y32.dtype == np.float32 and y64.shape == (2, 10)
    np.testing.assert_allclose(y32, y64, rtol=1e-4, atol=1e-4)


# -- inputs and results ---------------------------------------------------------------------------------------------

def test_tuple_inputs_return_tuple(digits):
    x = batch()
    ig = IntegratedGradients(digits)
    single = ig.attribute(x, target=3)
    tup = ig.attribute((x,), target=3)
    assert isinstance(single, np.ndarray) and single.shape == x.shape and single.dtype == np.float64
    assert isinstance(tup, tuple) and len(tup) == 1
    np.testing.assert_array_equal(tup[0], single)


def test_convergence_delta(digits):
    x = batch()
    ig = IntegratedGradients(digits)
    a, d = ig.attribute(x, target=3, return_convergence_delta=True)
    assert d.shape == (2,)
    np.testing.assert_array_equal(a, ig.attribute(x, target=3))
    # completeness: sum of attributions = F(x) - F(0) - delta
    f = digits(x)[:, 3] - digits(np.zeros_like(x))[:, 3]
    np.testing.assert_allclose(a.reshape(2, -1).sum(1) - f, d, atol=1e-9)
    a2, d2 = DeepLift(digits).attribute(x, target=3, return_convergence_delta=True)
    assert a2.shape == x.shape and d2.shape == (2,)


def test_float32_and_float64(digits):
    ig = IntegratedGradients(digits)
    a64 = ig.attribute(batch(np.float64), target=3, n_steps=20)
    a32 = ig.attribute(batch(np.float32), target=3, n_steps=20)
    assert a64.dtype == np.float64 and a32.dtype == np.float32
    np.testing.assert_allclose(a32, a64, rtol=1e-3, atol=1e-5 * np.abs(a64).max())


def test_non_contiguous_input(digits):
    x = batch()
    xf = np.asfortranarray(x)
    ig = IntegratedGradients(digits)
    np.testing.assert_array_equal(ig.attribute(xf, target=3), ig.attribute(x, target=3))


# -- baselines -------------------------------------------------------------------------------------------------------

def test_scalar_baseline(digits):
    x = batch()
    ig = IntegratedGradients(digits)
    a_s = ig.attribute(x, baselines=0.25, target=3)
    a_t = ig.attribute(x, baselines=np.full_like(x, 0.25), target=3)
    a_1 = ig.attribute(x, baselines=np.full_like(x[:1], 0.25), target=3)  # batch 1: broadcast
    np.testing.assert_allclose(a_s, a_t, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(a_1, a_t, rtol=1e-12, atol=1e-15)
    a0 = ig.attribute(x, target=3)
    np.testing.assert_allclose(ig.attribute(x, baselines=0, target=3), a0, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(ig.attribute(x, baselines=(None,), target=3), a0, rtol=1e-12, atol=1e-15)


# -- targets -------------------------------------------------------------------------------------------------------

def test_target_forms(digits):
    x = batch()
    sal = Saliency(digits)
    one = [sal.attribute(x[i:i + 1], target=t)[0] for i, t in enumerate((3, 7))]
    per = sal.attribute(x, target=[3, 7])
    # one example alone and in a batch of two differ only by the GEMM's rounding
    np.testing.assert_allclose(per[0], one[0], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(per[1], one[1], rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(sal.attribute(x, target=np.array([3, 7])), per)
    np.testing.assert_array_equal(sal.attribute(x, target=[(3,), (7,)]), per)
    np.testing.assert_array_equal(sal.attribute(x, target=(3,)), sal.attribute(x, target=3))
    np.testing.assert_array_equal(sal.attribute(x, target=np.int64(3)), sal.attribute(x, target=3))
    np.testing.assert_array_equal(sal.attribute(x, target=np.array([3])), sal.attribute(x, target=3))


def test_list_of_tuples_target():
    m, T = golden_model("basic_multiple_tuple_target__IntegratedGradients")
    x = T["input.0"].astype(np.float64)
    n = x.shape[0]
    out = m(x)
    assert out.ndim >= 3
    targets = [tuple(int(v) for v in np.unravel_index(i % out[0].size, out.shape[1:])) for i in range(n)]
    sal = Saliency(m)
    per = sal.attribute(x, target=targets)
    for i in range(n):
        np.testing.assert_allclose(per[i], sal.attribute(x[i:i + 1], target=targets[i])[0], rtol=1e-12,
                                   atol=1e-13)


def test_additional_forward_args():
    m, T = golden_model("basic_multi_input_multi_target__IntegratedGradients")
    import json
    with open(os.path.join(golden.CAPTUM_DIR, "basic_multi_input_multi_target__IntegratedGradients",
                           "case.json")) as f:
        c = json.load(f)
    assert len(m.input_names) >= 2
    xs = tuple(T[n].astype(np.float64) for n in c["attribute_args"]["inputs"]["tensors"])
    res = IntegratedGradients(m).attribute(xs, target=0, n_steps=10,
                                           additional_forward_args=_additional(c, T))
    assert isinstance(res, tuple) and len(res) == len(xs)


def _additional(c, T):
    af = c["attribute_args"].get("additional_forward_args")
    if not af:
        return None
    items = [T[it["tensor"]].astype(np.float64) if it.get("tensor") else it.get("constant_baked_into_onnx")
             for it in af["items"]]
    return tuple(items)


# -- perturbation, layer and neuron forms --------------------------------------------------------------------------

def test_feature_mask_and_occlusion(digits):
    x = batch()
    mask = np.zeros((1, 1, 8, 8), dtype=np.int64)
    mask[..., 4:, :] = 1
    fa = FeatureAblation(digits).attribute(x, target=3, feature_mask=mask)
    assert fa.shape == x.shape
    assert len(np.unique(fa[0])) <= 2
    occ = Occlusion(digits).attribute(x, sliding_window_shapes=(1, 2, 2), strides=(1, 2, 2), target=3)
    assert occ.shape == x.shape
    occ_pe = Occlusion(digits).attribute(x, sliding_window_shapes=(1, 2, 2), strides=(1, 2, 2), target=3,
                                         perturbations_per_eval=1)
    np.testing.assert_allclose(occ, occ_pe, rtol=1e-6)


def test_layer_and_neuron(digits):
    x = batch()
    gc = LayerGradCam(digits, "conv2").attribute(x, target=3)
    assert gc.shape == (2, 1, 4, 4)
    up = LayerAttribution.interpolate(gc, (8, 8))
    assert up.shape == (2, 1, 8, 8)
    np.testing.assert_array_equal(up[:, :, ::2, ::2], gc)
    lc, d = LayerConductance(digits, "relu2").attribute(x, target=3, n_steps=10, return_convergence_delta=True)
    assert lc.shape == (2, 16, 4, 4) and d.shape == (2,)
    both = LayerConductance(digits, ["relu1", "relu2"]).attribute(x, target=3, n_steps=10)
    assert isinstance(both, list) and [b.shape for b in both] == [(2, 8, 8, 8), (2, 16, 4, 4)]
    np.testing.assert_allclose(both[1], lc, rtol=1e-9, atol=1e-12)
    ng = NeuronGradient(digits, "fc1").attribute(x, neuron_selector=5)
    assert ng.shape == x.shape
    ng_sl = NeuronGradient(digits, "fc1").attribute(x, neuron_selector=(slice(5, 6),))
    np.testing.assert_allclose(ng_sl, ng, rtol=1e-12)
    ns = NeuronGradient(digits, "fc1").attribute(x, neuron_selector=neuron_sum(1))
    assert ns.shape == x.shape


def test_noise_tunnel_and_seed(digits):
    x = batch()
    nt = NoiseTunnel(Saliency(digits))
    a = nt.attribute(x, nt_type="smoothgrad", nt_samples=4, stdevs=0.1, target=3, _seed=7)
    b = nt.attribute(x, nt_type="smoothgrad", nt_samples=4, stdevs=0.1, target=3, _seed=7)
    np.testing.assert_array_equal(a, b)
    # no noise: the tunnel is the method
    z = NoiseTunnel(IntegratedGradients(digits)).attribute(x, nt_samples=3, stdevs=0.0, target=3, n_steps=8)
    np.testing.assert_allclose(z, IntegratedGradients(digits).attribute(x, target=3, n_steps=8), rtol=1e-9,
                               atol=1e-12)
    vg = nt.attribute(x, nt_type="vargrad", nt_samples=3, target=3)
    assert vg.shape == x.shape
    gs, d = GradientShap(digits).attribute(x, baselines=np.zeros((3, 1, 8, 8)), target=3,
                                            return_convergence_delta=True)
    assert gs.shape == x.shape and d.shape == (2 * 5,)
    assert ShapleyValueSampling(digits).attribute(x[:1], target=3, n_samples=2,
                                                  feature_mask=np.arange(64).reshape(1, 1, 8, 8) // 16).shape \
        == (1, 1, 8, 8)
    assert Lime(digits).attribute(x[:1], target=3, n_samples=10,
                                  feature_mask=np.arange(64).reshape(1, 1, 8, 8) // 16).shape == (1, 1, 8, 8)


# -- errors --------------------------------------------------------------------------------------------------------

def test_errors(digits):
    x = batch()
    ig = IntegratedGradients(digits)
    with pytest.raises(ValueError, match="target"):
        ig.attribute(x, target=12)
    with pytest.raises(ValueError, match="target"):
        ig.attribute(x, target=[1, 2, 3])
    with pytest.raises(ValueError):
        ig.attribute(np.zeros((2, 1, 5, 5)), target=3)
    with pytest.raises(ValueError, match="gausslegendre"):
        ig.attribute(x, target=3, method="simpson")
    with pytest.raises(ValueError, match="conv9"):
        LayerGradCam(digits, "conv9").attribute(x, target=3)
    with pytest.raises(ValueError, match="neuron_sum"):
        NeuronGradient(digits, "fc1").attribute(x, neuron_selector=lambda t: t.sum(1))
    bad = x.copy()
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(ValueError):
        ig.attribute(bad, target=3)
    with pytest.raises(OSError, match="no_such_model.onnx"):
        cattr.load("no_such_model.onnx")
    with pytest.raises(OSError):
        cattr.load(os.path.join(SAMPLES, "digit_3.npy"))
    with pytest.raises(TypeError):
        ig.attribute(x, target=3, n_stepz=3)
    with pytest.raises(TypeError):  # neither a cattr Model nor a callable (a PyTorch forward function)
        IntegratedGradients(42)
    with pytest.raises(ValueError):
        cattr.load(DIGITS, device="no-such-device")


def test_threads(digits):
    """Explainers of one model run from several threads at once (ctypes releases the GIL during the call)."""
    x = batch()
    ref = IntegratedGradients(digits).attribute(x, target=3)
    out = [None] * 4

    shared = IntegratedGradients(digits)

    def work(i):  # two threads on their own objects, two on one shared object (its explainer runs one call at a time)
        out[i] = (IntegratedGradients(digits) if i < 2 else shared).attribute(x, target=3)

    th = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    for o in out:
        np.testing.assert_array_equal(o, ref)


def test_input_x_gradient_torch_tensors(digits):
    torch = pytest.importorskip("torch")
    x = batch()
    a = InputXGradient(digits).attribute(torch.from_numpy(x), target=torch.tensor([3, 7]))
    assert isinstance(a, torch.Tensor) and a.dtype == torch.float64
    np.testing.assert_array_equal(a.numpy(), InputXGradient(digits).attribute(x, target=[3, 7]))
