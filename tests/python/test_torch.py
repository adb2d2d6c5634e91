"""cattr.from_torch on small torch.nn models: the same numbers as the ONNX path, and as Captum where it is importable
(CI has no Captum: those tests skip). Skipped as a whole without torch."""
import os
import tempfile

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (Debian: python3-torch)")
nn = torch.nn

import cattr  # noqa: E402
from cattr import attr as A  # noqa: E402


def _captum():
    try:
        import captum.attr as ca
    except Exception as e:  # noqa: BLE001 - any import failure means: no Captum here
        pytest.skip("Captum is not importable (%s); set PYTHONPATH to a Captum checkout to compare" % e)
    return ca


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.relu1 = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(4, 6, 3)
        self.relu2 = nn.ReLU()
        self.flat = nn.Flatten()
        self.fc = nn.Linear(6 * 2 * 2, 5)

    def forward(self, x):
        return self.fc(self.flat(self.relu2(self.conv2(self.pool(self.relu1(self.conv1(x)))))))


class TwoInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 4)
        self.b = nn.Linear(2, 4)
        self.relu = nn.ReLU()
        self.out = nn.Linear(4, 3)

    def forward(self, x1, x2):
        return self.out(self.relu(self.a(x1) + self.b(x2)))


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3)).eval()


def _cnn():
    torch.manual_seed(1)
    return CNN().eval()


def test_from_torch_matches_onnx_path_and_forward():
    net = _mlp()
    x = torch.randn(4, 5, dtype=torch.float64)
    m = cattr.from_torch(net, x.float())
    with torch.no_grad():
        np.testing.assert_allclose(m(x).numpy(), net.double()(x).numpy(), rtol=1e-10, atol=1e-12)
    net.float()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "mlp.onnx")
        torch.onnx.export(net, (x.float(),), path, input_names=["input0"], output_names=["output"],
                          dynamic_axes={"input0": {0: "b"}, "output": {0: "b"}}, opset_version=14,
                          do_constant_folding=False)
        m2 = cattr.load(path)
    a1 = A.IntegratedGradients(m).attribute(x, target=1)
    a2 = A.IntegratedGradients(m2).attribute(x, target=1)
    assert isinstance(a1, torch.Tensor)
    np.testing.assert_array_equal(a1.numpy(), a2.numpy())
    # module paths survive the export: nn.Sequential's children are "0", "1", ...
    assert m.resolve("2").startswith("/2/")
    lc = A.LayerConductance(m, "3").attribute(x, target=1, n_steps=10)
    assert tuple(lc.shape) == (4, 8)


def test_from_torch_cnn_layers():
    net = _cnn()
    x = torch.randn(2, 1, 8, 8)
    m = cattr.from_torch(net, x)
    gc = A.LayerGradCam(m, "conv2").attribute(x, target=2)
    assert tuple(gc.shape) == (2, 1, 2, 2) and gc.dtype == torch.float32


def test_two_inputs_tuple():
    torch.manual_seed(2)
    net = TwoInput().eval()
    x1, x2 = torch.randn(3, 3, dtype=torch.float64), torch.randn(3, 2, dtype=torch.float64)
    m = cattr.from_torch(net, (x1.float(), x2.float()))
    a = A.IntegratedGradients(m).attribute((x1, x2), baselines=(0.0, 0.5), target=[0, 1, 2])
    assert isinstance(a, tuple) and tuple(a[0].shape) == (3, 3) and tuple(a[1].shape) == (3, 2)
    fa = A.FeatureAblation(m).attribute((x1, x2), target=0)
    assert isinstance(fa, tuple)


# -- against Captum (float64, <= 1e-6 relative) --------------------------------------------------------------------

def _close(ours, ref, rtol=1e-6):
    ours, ref = np.asarray(ours, dtype=np.float64), ref.detach().numpy().astype(np.float64)
    assert ours.shape == ref.shape
    err = np.abs(ours - ref).max() if ref.size else 0.0
    assert err <= rtol * max(np.abs(ref).max(), 1e-30) + 1e-12, "max error %.3e" % err


def test_against_captum_script():
    """The issue's Captum script, unchanged except for the import and the model line."""
    ca = _captum()
    net = _cnn().double()
    torch.manual_seed(3)
    x = torch.rand(2, 1, 8, 8, dtype=torch.float64)
    m = cattr.from_torch(net.float(), x.float())
    net.double()
    runs = [
        ("IntegratedGradients", (), dict(target=1, n_steps=30, return_convergence_delta=True)),
        ("IntegratedGradients", (), dict(target=[1, 3], method="riemann_trapezoid", n_steps=20)),
        ("DeepLift", (), dict(target=2, baselines=0.1, return_convergence_delta=True)),
        ("Occlusion", (), dict(target=1, sliding_window_shapes=(1, 2, 2), strides=(1, 2, 2))),
        ("LayerGradCam", ("conv2",), dict(target=1)),
        ("LayerGradCam", ("conv1",), dict(target=4, relu_attributions=True)),
        ("Saliency", (), dict(target=0)),
        ("InputXGradient", (), dict(target=0)),
        ("GuidedBackprop", (), dict(target=0)),
        ("FeatureAblation", (), dict(target=[0, 2])),
    ]
    for name, args, kw in runs:
        ref_obj = getattr(ca, name)(net, *[getattr(net, a) for a in args])
        ours_obj = getattr(A, name)(m, *args)
        ref = ref_obj.attribute(x, **kw)
        ours = ours_obj.attribute(x, **kw)
        if kw.get("return_convergence_delta"):
            _close(ours[1], ref[1].reshape(-1), rtol=1e-5)
            ref, ours = ref[0], ours[0]
        assert isinstance(ours, torch.Tensor) and ours.dtype == torch.float64, name
        _close(ours, ref)
    # NoiseTunnel without noise (stdevs 0) is deterministic in both
    ref = ca.NoiseTunnel(ca.IntegratedGradients(net)).attribute(x, nt_samples=3, stdevs=0.0, target=1, n_steps=10)
    ours = A.NoiseTunnel(A.IntegratedGradients(m)).attribute(x, nt_samples=3, stdevs=0.0, target=1, n_steps=10)
    _close(ours, ref)


CAPTUM_SCRIPT = """
model.eval()
ig = IntegratedGradients(model)
a1, d1 = ig.attribute(x, baselines=x * 0, target=1, n_steps=40, method="gausslegendre",
                      return_convergence_delta=True)
dl = DeepLift(model)
a2 = dl.attribute(x, baselines=0.0, target=[2, 0])
occ = Occlusion(model)
a3 = occ.attribute(x, sliding_window_shapes=(1, 3, 3), strides=(1, 2, 2), baselines=0, target=1)
gc = LayerGradCam(model, model.conv2)
a4 = gc.attribute(x, target=1, relu_attributions=True)
a4u = LayerAttribution.interpolate(a4, x.shape[2:])
nt = NoiseTunnel(IntegratedGradients(model))
a5 = nt.attribute(x, nt_type="smoothgrad", nt_samples=4, stdevs=0.0, target=1, n_steps=10)
results = [a1, d1, a2, a3, a4, a4u, a5]
"""


def test_captum_script_runs_unchanged():
    """The issue's script: the same source with Captum's import and the torch model, then cattr's import and the
    loaded model; the numbers agree to 1e-6 in float64."""
    ca = _captum()
    net = _cnn()
    torch.manual_seed(6)
    x = torch.rand(2, 1, 8, 8, dtype=torch.float64)
    names = ["IntegratedGradients", "DeepLift", "Occlusion", "LayerGradCam", "LayerAttribution", "NoiseTunnel"]
    ours = dict({n: getattr(A, n) for n in names}, x=x, model=cattr.from_torch(net, x.float()))
    ref = dict({n: getattr(ca, n) for n in names}, x=x, model=net.double())
    exec(CAPTUM_SCRIPT, ref)
    exec(CAPTUM_SCRIPT, ours)
    for o, r in zip(ours["results"], ref["results"]):
        assert isinstance(o, torch.Tensor) and o.dtype == torch.float64
        _close(o, r.reshape(o.shape) if r.numel() == o.numel() else r)


def test_more_classes_against_captum():
    ca = _captum()
    net = _cnn()
    torch.manual_seed(4)
    x = torch.rand(2, 1, 8, 8, dtype=torch.float64)
    m = cattr.from_torch(net, x.float())
    net.double()
    bl = torch.rand(3, 1, 8, 8, dtype=torch.float64) * 0.1
    runs = [
        ("DeepLiftShap", (), dict(baselines=bl, target=1)),
        ("Deconvolution", (), dict(target=2)),
        ("GuidedGradCam", ("conv2",), dict(target=2)),
        ("ShapleyValues", (), dict(target=0, feature_mask=(torch.arange(64).reshape(1, 1, 8, 8) // 16))),
        ("LayerIntegratedGradients", ("conv1",), dict(target=1, n_steps=12)),
        ("LayerConductance", ("relu1",), dict(target=1, n_steps=12)),
        ("InternalInfluence", ("pool",), dict(target=3, n_steps=12)),
        ("LayerActivation", ("conv2",), dict()),
        ("LayerGradientXActivation", ("fc",), dict(target=0)),
        ("LayerDeepLift", ("relu2",), dict(target=0)),
        ("LayerFeatureAblation", ("relu2",), dict(target=0)),
        ("NeuronGradient", ("conv2",), dict(neuron_selector=(1, 0, 1))),
        ("NeuronIntegratedGradients", ("fc",), dict(neuron_selector=2, n_steps=12)),
        ("NeuronConductance", ("relu1",), dict(neuron_selector=(0, 3, 3), target=1, n_steps=12)),
        ("NeuronDeepLift", ("relu2",), dict(neuron_selector=(2, 1, 0))),
        ("NeuronGuidedBackprop", ("conv2",), dict(neuron_selector=(1, slice(0, 2), 1))),
    ]
    for name, args, kw in runs:
        ref = getattr(ca, name)(net, *[getattr(net, a) for a in args]).attribute(x, **kw)
        ours = getattr(A, name)(m, *args).attribute(x, **kw)
        _close(ours, ref)


class WithExtra(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 4)
        self.b = nn.Linear(2, 4)
        self.relu = nn.ReLU()  # a module: Captum's DeepLift rules act on modules, cattr's on every Relu node
        self.out = nn.Linear(4, 3)

    def forward(self, x1, x2, scale):
        return self.out(self.relu(self.a(x1) + self.b(x2)) * scale)


def test_tuple_inputs_and_additional_args_against_captum():
    ca = _captum()
    torch.manual_seed(5)
    net = WithExtra().eval()
    x1, x2 = torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 2, dtype=torch.float64)
    scale = torch.rand(4, 4, dtype=torch.float64) + 0.5
    m = cattr.from_torch(net, (x1.float(), x2.float(), scale.float()))
    net.double()
    for name, kw in [("IntegratedGradients", dict(baselines=(0.1, torch.zeros(1, 2, dtype=torch.float64)),
                                                   target=[0, 1, 2, 0], n_steps=16)),
                     ("FeatureAblation", dict(target=(1,), feature_mask=(torch.tensor([[0, 0, 1]]),
                                                                         torch.tensor([[1, 2]])))),
                     ("Saliency", dict(target=torch.tensor([2, 2, 1, 0]))),
                     ("DeepLift", dict(target=1))]:
        ref = getattr(ca, name)(net).attribute((x1, x2), additional_forward_args=(scale,), **kw)
        ours = getattr(A, name)(m).attribute((x1, x2), additional_forward_args=(scale,), **kw)
        assert isinstance(ours, tuple) and len(ours) == 2
        for o, r in zip(ours, ref):
            _close(o, r)


def test_interpolate_matches_captum():
    ca = _captum()
    t = torch.rand(2, 1, 3, 3, dtype=torch.float64)
    ref = ca.LayerAttribution.interpolate(t, (7, 7))
    ours = A.LayerAttribution.interpolate(t.numpy(), (7, 7))
    np.testing.assert_array_equal(ours, ref.numpy())


def test_weights_changed_in_place_are_seen():
    """An attribution object keeps its exports; weights changed since (in place, by load_state_dict, by an optimizer
    step) are exported again, never explained as they were."""
    from cattr.attr import IntegratedGradients, Saliency

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    x = torch.randn(5, 4)
    sal, ig = Saliency(net), IntegratedGradients(net)

    def ref():
        xr = x.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(net(xr)[:, 1].sum(), xr)
        return g.abs()

    np.testing.assert_allclose(sal.attribute(x, target=1).numpy(), ref().numpy(), rtol=1e-5, atol=1e-7)
    ig.attribute(x, target=1)
    with torch.no_grad():
        net[0].weight.mul_(-2.0)  # in place
    np.testing.assert_allclose(sal.attribute(x, target=1).numpy(), ref().numpy(), rtol=1e-5, atol=1e-7)
    state = {k: v + 0.5 for k, v in net.state_dict().items()}
    net.load_state_dict(state)  # copied in place
    np.testing.assert_allclose(sal.attribute(x, target=1).numpy(), ref().numpy(), rtol=1e-5, atol=1e-7)
    opt = torch.optim.SGD(net.parameters(), lr=0.3)
    net(x).sum().backward()
    opt.step()
    np.testing.assert_allclose(sal.attribute(x, target=1).numpy(), ref().numpy(), rtol=1e-5, atol=1e-7)
    net[2].weight = torch.nn.Parameter(torch.randn(2, 3))  # replaced
    np.testing.assert_allclose(sal.attribute(x, target=1).numpy(), ref().numpy(), rtol=1e-5, atol=1e-7)
    # weights seen before (a checkpoint loaded again) reuse their export; their numbers are theirs
    tf = sal._torch
    first = {k: v.clone() for k, v in net.state_dict().items()}
    m1 = tf.model_for((x,), None)
    net.load_state_dict({k: v * 0.5 for k, v in first.items()})
    m2 = tf.model_for((x,), None)
    net.load_state_dict(first)
    assert tf.model_for((x,), None) is m1 and m2 is not m1
    np.testing.assert_allclose(sal.attribute(x, target=1).numpy(), ref().numpy(), rtol=1e-5, atol=1e-7)
    # IntegratedGradients sees the last weights too (its sum is F(x) - F(0))
    a, d = ig.attribute(x, target=1, return_convergence_delta=True, n_steps=200)
    assert np.abs(d.numpy()).max() < 1e-3
    np.testing.assert_allclose(a.sum(1).numpy(), (net(x) - net(torch.zeros_like(x)))[:, 1].detach().numpy(), atol=2e-3)
