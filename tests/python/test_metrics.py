"""cattr.metrics (issue 35): infidelity and sensitivity_max against their definitions written out in numpy here, against
Captum's own functions (../shared/captum-0.8, where present), exact cases (a linear model: a gradient attribution has
infidelity 0), Captum's sub-batching (max_examples_per_batch) and keyword expansion, and the C functions' errors.
Skipped as a whole without torch."""
import ctypes

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (Debian: python3-torch)")

import cattr  # noqa: E402
from cattr import _lib  # noqa: E402
from cattr.attr import IntegratedGradients, Saliency  # noqa: E402
from cattr.metrics import default_perturb_func, infidelity, infidelity_perturb_func_decorator, sensitivity_max  # noqa

import golden  # noqa: E402


def _captum_metrics():
    return golden.import_captum("captum.metrics"), golden.import_captum("captum.attr")


class TwoIn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.a = torch.nn.Linear(6, 5)
        self.b = torch.nn.Linear(4, 5)
        self.out = torch.nn.Linear(5, 3)

    def forward(self, x, y, scale):
        return self.out(torch.tanh(self.a(x) + self.b(y) * scale))


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))


def _noise(sd=0.1, seed=0):
    def pf(inputs):
        xs = inputs if isinstance(inputs, tuple) else (inputs,)
        rs = np.random.RandomState(seed)
        ps = tuple(torch.tensor(rs.normal(0, sd, x.shape)).float() for x in xs)
        px = tuple(x - p for x, p in zip(xs, ps))
        return (ps, px) if isinstance(inputs, tuple) else (ps[0], px[0])
    return pf


def _ref_infidelity(f, x, attr, pert, n, normalize):
    """The definition, in float64: x [B, F], pert [B * n, F] (repeat_interleave rows), f a numpy function."""
    B = x.shape[0]
    fx = np.repeat(f(x), n)
    fp = f(np.repeat(x, n, axis=0) - pert)
    d = (pert * np.repeat(attr, n, axis=0)).reshape(B * n, -1).sum(1).reshape(B, n)
    fd = (fx - fp).reshape(B, n)
    if not normalize:
        return ((d - fd) ** 2).mean(1)
    dd, df, ff = (d * d).sum(1), (d * fd).sum(1), (fd * fd).sum(1)
    beta = df / np.where(dd != 0, dd, 1.0)
    return (beta * beta * dd - 2 * beta * df + ff) / n


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("mepb", [None, 8, 100])
def test_infidelity_definition(normalize, mepb):
    net = _net().double()
    x = torch.randn(4, 6, dtype=torch.float64)
    attr = torch.randn(4, 6, dtype=torch.float64)
    n = 5
    got = infidelity(net, _noise(0.2), x, attr, target=1, n_perturb_samples=n, normalize=normalize,
                     max_examples_per_batch=mepb)
    # the perturbations as infidelity saw them: the same draws, sub-batch by sub-batch
    m = n if mepb is None else min(max(mepb // 4, 1), n)
    parts, done = [], 0
    while done < n:
        k = min(m, n - done)
        p = _noise(0.2)(torch.repeat_interleave(x, k, dim=0))[0].double().numpy().reshape(4, k, 6)
        parts.append(p)
        done += k
    pert = np.concatenate(parts, axis=1).reshape(4 * n, 6)

    def f(a):
        with torch.no_grad():
            return net(torch.from_numpy(np.ascontiguousarray(a)))[:, 1].numpy()

    want = _ref_infidelity(f, x.numpy(), attr.numpy(), pert, n, normalize)
    assert isinstance(got, torch.Tensor) and got.shape == (4,)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-9, atol=1e-15)


def test_infidelity_zero_for_a_linear_model_and_its_gradient():
    lin = torch.nn.Linear(5, 2).double()
    x = torch.randn(3, 5, dtype=torch.float64)
    attr = Saliency(lin).attribute(x, target=0, abs=False)
    got = infidelity(lin, _noise(0.5), x, attr, target=0, n_perturb_samples=7)
    assert np.abs(got.numpy()).max() < 1e-24
    # twice the gradient: (2f - f)^2 = f^2 on average; normalised, beta = 1/2 takes it back to 0
    got2 = infidelity(lin, _noise(0.5), x, 2 * attr, target=0, n_perturb_samples=7)
    assert got2.numpy().min() > 1e-6
    got3 = infidelity(lin, _noise(0.5), x, 2 * attr, target=0, n_perturb_samples=7, normalize=True)
    assert np.abs(got3.numpy()).max() < 1e-14 * got2.numpy().max()  # beta^2 dd - 2 beta df + ff cancels


@pytest.mark.parametrize("normalize", [False, True])
def test_infidelity_matches_captum(normalize):
    cm, ca = _captum_metrics()
    model = TwoIn()
    x, y = torch.randn(3, 6), torch.randn(3, 4)
    scale = torch.tensor([[0.5], [1.0], [2.0]])
    attr = ca.IntegratedGradients(model).attribute((x, y), target=[0, 2, 1], additional_forward_args=(scale,))
    for mepb in (None, 6):
        kw = dict(additional_forward_args=(scale,), target=[0, 2, 1], n_perturb_samples=4, normalize=normalize,
                  max_examples_per_batch=mepb)
        want = cm.infidelity(model, _noise(0.05, 1), (x, y), attr, **kw)
        got = infidelity(model, _noise(0.05, 1), (x, y), attr, **kw)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-4, atol=1e-7)


def test_infidelity_decorator_and_baselines():
    net = _net()
    x = torch.randn(2, 6) + 2

    @infidelity_perturb_func_decorator(True)
    def scaled(inputs, baselines):
        return inputs - 0.1 * (inputs - baselines)

    @infidelity_perturb_func_decorator(False)
    def shifted(inputs):
        return inputs - 0.25

    p, px = scaled(x, torch.ones(2, 6))
    np.testing.assert_allclose(p[0].numpy(), np.full((2, 6), 0.1), rtol=1e-5)  # (x - x') / (x - baseline)
    p, px = shifted(x)
    np.testing.assert_allclose(p[0].numpy(), np.full((2, 6), 0.25), rtol=1e-6)
    attr = torch.randn(2, 6)
    got = infidelity(net, scaled, x, attr, baselines=torch.ones(2, 6), target=0, n_perturb_samples=3)
    assert got.shape == (2,) and np.isfinite(got.numpy()).all()


def test_infidelity_errors():
    net = _net()
    x = torch.randn(2, 6)
    with pytest.raises(AssertionError, match="matching shapes"):
        infidelity(net, _noise(), x, torch.zeros(2, 5), target=0)
    with pytest.raises(AssertionError, match="must match"):
        infidelity(net, _noise(), x, (torch.zeros(2, 6), torch.zeros(2, 6)), target=0)
    with pytest.raises(_lib.ArgumentError, match="n_perturb_samples"):
        infidelity(net, _noise(), x, torch.zeros(2, 6), target=0, n_perturb_samples=0)
    with pytest.raises(Exception, match="target"):
        infidelity(net, _noise(), x, torch.zeros(2, 6), target=7)


def _ref_sens(e0, e1, n, order):
    B = e0.shape[0]
    d = np.repeat(e0.reshape(B, -1), n, axis=0) - e1.reshape(B * n, -1)
    norm = lambda a: np.linalg.norm(a, ord=order, axis=1)  # noqa: E731
    den = norm(e0.reshape(B, -1))
    den = np.where(den == 0, 1.0, den)
    return (norm(d) / np.repeat(den, n)).reshape(B, n).max(1)


@pytest.mark.parametrize("order", ["fro", 1, np.inf, -np.inf, 3])
def test_sensitivity_max_definition(order):
    net = _net().double()
    x = torch.randn(4, 6, dtype=torch.float64)
    sal = Saliency(net)

    def pf(inputs):
        xs = inputs if isinstance(inputs, tuple) else (inputs,)
        return tuple(a + 0.1 * torch.sin(torch.arange(a.numel(), dtype=a.dtype).view(a.shape)) for a in xs)

    got = sensitivity_max(sal.attribute, x, perturb_func=pf, n_perturb_samples=3, norm_ord=order, target=2)
    e0 = sal.attribute(x, target=2).numpy()
    e1 = sal.attribute(pf(torch.repeat_interleave(x, 3, dim=0))[0], target=2).numpy()
    want = _ref_sens(e0, e1, 3, 2 if order == "fro" else order)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10)


def test_sensitivity_max_matches_captum():
    cm, ca = _captum_metrics()
    net = _net()
    x = torch.randn(5, 6)
    for mepb in (None, 10, 12):
        kw = dict(n_perturb_samples=4, max_examples_per_batch=mepb, target=[0, 1, 2, 1, 0], baselines=torch.zeros(5, 6),
                  n_steps=6)
        torch.manual_seed(7)
        want = cm.sensitivity_max(ca.IntegratedGradients(net).attribute, x, **kw)
        torch.manual_seed(7)
        got = sensitivity_max(IntegratedGradients(net).attribute, x, **kw)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=5e-4, atol=1e-6)


def test_default_perturb_func_draws_like_captum():
    cm, _ = _captum_metrics()
    from captum.metrics._core.sensitivity import default_perturb_func as cdef

    x = torch.randn(3, 4)
    torch.manual_seed(5)
    a = cdef(x, 0.1)
    torch.manual_seed(5)
    b = default_perturb_func(x, 0.1)
    assert torch.equal(a[0], b[0])


def test_sensitivity_c_errors():
    e0 = np.ones((2, 3), np.float32)
    tl = cattr._core._TensorList()
    try:
        a = [tl.make(e0)]
        b = [tl.make(np.ones((5, 3), np.float32))]
        out = _lib.TensorP()
        st = _lib.lib.cattr_sensitivity_max(None, cattr._core._ptr_array(a), cattr._core._ptr_array(b), 1, 2, 2.0,
                                            ctypes.byref(out))
        assert st == _lib.ERR_SHAPE and "needs [4, 3]" in _lib.lib.cattr_last_error().decode()
        st = _lib.lib.cattr_sensitivity_max(None, cattr._core._ptr_array(a), cattr._core._ptr_array(b), 1, 2, 0.0,
                                            ctypes.byref(out))
        assert st == _lib.ERR_INVALID_ARGUMENT and "norm_ord" in _lib.lib.cattr_last_error().decode()
    finally:
        tl.free()


# --- deletion and insertion curves (beyond Captum) ----------------------------------------------------------------

def _ref_curve(net, x, attr, base, n_steps, mode, softmax, target, mask=None):
    """The definition written out: features ranked by summed attribution (ties: the first), the round(k F / n)
    first moved at step k, scored by torch."""
    from cattr.metrics import deletion_insertion  # noqa: F401 (the module under test is imported above)
    xb = x.reshape(len(x), -1).double().numpy()
    ab = attr.reshape(len(x), -1).double().numpy()
    bb = np.broadcast_to(np.asarray(base, dtype=np.float64), x.shape).reshape(len(x), -1)
    ids = np.arange(xb.shape[1]) if mask is None else np.broadcast_to(mask.numpy(), x.shape)[0].reshape(-1)
    u = np.unique(ids)
    out = np.zeros((len(x), n_steps + 1))
    for b in range(len(x)):
        score = np.array([ab[b][ids == v].sum() for v in u])
        order = sorted(range(len(u)), key=lambda f: (-score[f], f))
        rank = np.empty(len(u), int)
        rank[order] = np.arange(len(u))
        el = rank[np.searchsorted(u, ids)]
        for k in range(n_steps + 1):
            moved = el < (k * len(u) + n_steps // 2) // n_steps
            s = np.where(moved, bb[b], xb[b]) if mode == "deletion" else np.where(moved, xb[b], bb[b])
            y = net(torch.tensor(s.reshape((1,) + tuple(x.shape[1:])), dtype=x.dtype))
            out[b, k] = float((torch.softmax(y, 1) if softmax else y)[0, target])
    return out


@pytest.mark.parametrize("mode", ["deletion", "insertion"])
@pytest.mark.parametrize("softmax", [False, True])
def test_deletion_insertion_definition(mode, softmax):
    from cattr.metrics import deletion_insertion

    net = _net()
    torch.manual_seed(2)
    x, attr = torch.randn(3, 6), torch.randn(3, 6)
    curve, auc = deletion_insertion(net, x, attr, target=1, mode=mode, n_steps=4, softmax=softmax)
    ref = _ref_curve(net, x, attr, 0.0, 4, mode, softmax, 1)
    assert curve.shape == (3, 5) and auc.shape == (3,) and curve.dtype == torch.float32
    np.testing.assert_allclose(curve.numpy(), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(auc.numpy(), ((ref[:, 1:] + ref[:, :-1]) / 2).mean(1), rtol=1e-5, atol=1e-6)
    # the first point of deletion and the last of insertion are the model at the input
    full = net(x)
    sel = (torch.softmax(full, 1) if softmax else full)[:, 1].detach().numpy()
    np.testing.assert_allclose(curve.numpy()[:, 0 if mode == "deletion" else -1], sel, rtol=1e-5, atol=1e-6)


def test_deletion_insertion_masks_baselines_and_passes():
    from cattr.metrics import deletion_insertion

    net = _net().double()
    torch.manual_seed(3)
    x, attr = torch.randn(4, 6, dtype=torch.float64), torch.randn(4, 6, dtype=torch.float64)
    mask = torch.tensor([[0, 0, 1, 1, 2, 2]])
    one, area = deletion_insertion(net, x, attr, target=[0, 1, 2, 0], baselines=0.5, feature_mask=mask, n_steps=3)
    assert one.dtype == torch.float64
    ref = np.stack([_ref_curve(net, x[b:b + 1], attr[b:b + 1], 0.5, 3, "deletion", False, t, mask)[0]
                    for b, t in zip(range(4), [0, 1, 2, 0])])
    np.testing.assert_allclose(one.numpy(), ref, rtol=1e-12, atol=1e-12)
    # a pass of 2 steps at a time: the same numbers
    two, area2 = deletion_insertion(net, x, attr, target=[0, 1, 2, 0], baselines=0.5, feature_mask=mask, n_steps=3,
                                    steps_per_eval=2)
    np.testing.assert_array_equal(one.numpy(), two.numpy())
    np.testing.assert_array_equal(area.numpy(), area2.numpy())
    # numpy in, numpy out; a feature of more attribution is removed first (the curve's second point)
    c, _ = deletion_insertion(net, x.numpy(), np.tile(np.array([[0, 0, 0, 0, 5.0, 5.0]]), (4, 1)), target=0,
                              feature_mask=mask.numpy(), n_steps=3)
    assert isinstance(c, np.ndarray)
    x2 = x.clone()
    x2[:, 4:] = 0
    np.testing.assert_allclose(c[:, 1], net(x2)[:, 0].detach().numpy(), rtol=1e-12)


def test_deletion_insertion_errors():
    from cattr.metrics import deletion_insertion

    net = _net()
    x = torch.randn(2, 6)
    with pytest.raises(_lib.ArgumentError, match="deletion' or 'insertion"):
        deletion_insertion(net, x, x, target=0, mode="both")
    with pytest.raises(_lib.ArgumentError, match=r"attributions\[0\] has shape \[2, 5\]; input 0 has \[2, 6\]"):
        deletion_insertion(net, x, x[:, :5], target=0)
    with pytest.raises(_lib.ArgumentError, match="n_steps must be from 1"):
        deletion_insertion(net, x, x, target=0, n_steps=0)


# --- the model-randomisation check (beyond Captum) ------------------------------------------------------------------

def test_rank_correlation_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    from cattr.metrics import rank_correlation

    rs = np.random.RandomState(4)
    a = rs.randint(0, 4, (3, 2, 5)).astype(np.float64)  # ties
    b = rs.normal(size=(3, 2, 5))
    c = rs.normal(size=(3, 4))
    d = rs.normal(size=(3, 4))
    got = rank_correlation((a, c), (b, d))
    for i in range(3):
        ref = stats.spearmanr(np.concatenate([a[i].ravel(), c[i]]), np.concatenate([b[i].ravel(), d[i]])).correlation
        assert abs(got[i] - ref) < 1e-12
    got_abs = rank_correlation(b, -b, absolute=True)
    np.testing.assert_allclose(got_abs, 1.0)
    np.testing.assert_allclose(rank_correlation(b, -b), -1.0)


def test_model_randomization():
    from cattr.attr import LayerGradientXActivation, Saliency
    from cattr.metrics import model_randomization

    net = _net()
    torch.manual_seed(6)
    x = torch.randn(4, 6)
    casc = model_randomization(Saliency(net), x, target=1, seed=3)
    alone = model_randomization(Saliency(net), x, target=1, seed=3, cascade=False)
    assert casc["modules"] == ["2", "0"] and casc["spearman"].shape == (2, 4)
    np.testing.assert_array_equal(casc["spearman"][0], alone["spearman"][0])  # the output's module first, either way
    assert (np.abs(casc["spearman"]) <= 1).all() and (casc["spearman"] < 0.999).any()
    again = model_randomization(Saliency(net), x, target=1, seed=3)
    np.testing.assert_array_equal(casc["spearman"], again["spearman"])  # the seed fixes the draws
    # the gradient at the last layer's output is the target's one-hot, whatever the weights below: unchanged
    top = model_randomization(LayerGradientXActivation(net, "2", multiply_by_inputs=False), x, target=1, modules=["0"])
    np.testing.assert_allclose(top["spearman"], 1.0)
    with pytest.raises(_lib.ArgumentError, match="no weights in a module 'nothing'"):
        model_randomization(Saliency(net), x, target=1, modules=["nothing"])


def test_model_randomized_copies():
    m = cattr.load("models/digits/digits.onnx")
    assert m.weight_modules() == ["conv1", "conv2", "fc1", "fc2"]
    x = np.load("models/digits/samples/digit_3.npy").astype(np.float64)
    y = m(x)
    r1, r2, r3 = m.randomized(["fc2"], seed=1), m.randomized("fc2", seed=1), m.randomized(["fc2"], seed=2)
    assert not np.array_equal(y, r1(x)) and np.array_equal(r1(x), r2(x)) and not np.array_equal(r1(x), r3(x))
    del m  # the copy keeps its model alive
    assert r1(x).shape == y.shape
