"""cattr._rng: Captum's random draws ("torch" mode, project issue 31).

(a) TorchCPUGenerator, the numpy reimplementation of torch's CPU generator, gives torch's draws bit for bit (many
    seeds, sizes below and above the 16-value vectorised normal path, every function Captum uses), and leaves the
    generator in torch's state.
(b) captum_draws reproduces the recorded draws of every golden Captum case that has random draws. The golden runs
    seeded torch and numpy with 1234 right before attribute() (case.json does not record it; the draws of every
    case start at that seed's first numbers), so `set_rng("torch", seed=1234)` must give the stored tensors.
(c) captum_draws against Captum itself (when importable) for configurations the golden cases do not have:
    NoiseTunnel partitions with draw_baseline_from_distrib, stochastic inner methods, GradientShap with several
    inputs, FeaturePermutation's identity redraw and perturbations_per_eval, Lime/KernelShap with several
    examples and 16+ features; the numbers Captum's torch and numpy calls return are recorded by wrapping them, and
    both generators must be left where Captum leaves them.
(d) cattr given those draws (`_draws=`) computes Captum's attributions (models exported with cattr.from_torch).
Parts needing torch or Captum skip with a message where they are absent (Captum: PYTHONPATH or CATTR_CAPTUM naming
a checkout such as ../shared/captum-0.8)."""
import json
import os
import sys

import numpy as np
import pytest

from cattr import _rng

try:
    import torch
except Exception:  # noqa: BLE001 - any import failure: no torch here
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed (Debian: python3-torch)")

SEEDS = [0, 1, 42, 1234, 2 ** 32 + 7, 123456789, 2 ** 63 + 5]


@pytest.fixture(autouse=True)
def _restore_mode():
    yield
    _rng.set_rng("cattr")


def same(a, b):
    """Bit-identical arrays (dtype, shape and every bit; NaNs included)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "f":
        return np.array_equal(a.view(np.dtype("u%d" % a.dtype.itemsize)), b.view(np.dtype("u%d" % b.dtype.itemsize)))
    return np.array_equal(a, b)


def gen(seed):
    torch.manual_seed(seed)
    return _rng.TorchCPUGenerator(seed)


# =================================================================================================================
# (a) the reimplementation against torch
# =================================================================================================================

@needs_torch
@pytest.mark.parametrize("seed", SEEDS)
def test_randn_float32_every_size(seed):
    # one stream: the scalar path's cached second value carries from call to call, as in torch
    g = gen(seed)
    sizes = [(n,) for n in range(1, 41)] + [(47,), (64,), (100,), (255,), (1000,), (4099,), (2, 3), (3, 16),
                                             (2, 3, 4), (5, 1, 7), (1, 15), (1, 17)]
    for s in sizes:
        assert same(torch.randn(*s).numpy(), g.randn(*s)), s
    assert same(torch.rand(5).numpy(), g.rand(5))


@needs_torch
@pytest.mark.parametrize("seed", SEEDS[:4])
def test_randn_large(seed):
    g = gen(seed)
    for n in (100003, 65536):
        assert same(torch.randn(n).numpy(), g.randn(n)), n


@needs_torch
@pytest.mark.parametrize("seed", SEEDS)
def test_randn_float64_and_normal(seed):
    g = gen(seed)
    for n in (1, 3, 15, 16, 17, 33, 200):
        assert same(torch.randn(n, dtype=torch.float64).numpy(), g.randn(n, dtype=np.float64)), n
    for n in (1, 2, 5, 16, 21, 100):  # Tensor.normal_ with a mean and a standard deviation, both paths
        assert same(torch.empty(n).normal_(0.5, 2.5).numpy(), g.normal_((n,), 0.5, 2.5)), n
        assert same(torch.empty(n, dtype=torch.float64).normal_(-1.25, 0.3).numpy(),
                    g.normal_((n,), -1.25, 0.3, np.float64)), n
    for shape, sd in (((6, 5), 0.09), ((2, 3), 1.0), ((4, 1, 3, 3), 0.0), ((1,), 0.5)):
        std = torch.tensor(sd).repeat(shape)  # NoiseTunnel's torch.normal(0, stdev tensor)
        assert same(torch.normal(0, std).numpy(), g.normal(0.0, std.numpy())), shape
    assert same(torch.randn(3).numpy(), g.randn(3))


@needs_torch
@pytest.mark.parametrize("seed", SEEDS)
def test_rand_uniform(seed):
    g = gen(seed)
    for n in (1, 7, 16, 100):
        assert same(torch.rand(n).numpy(), g.rand(n))
        assert same(torch.rand(n, dtype=torch.float64).numpy(), g.rand(n, dtype=np.float64))
    for lo, hi in ((-0.3779645, 0.3779645), (-1.0, 1.0), (2.0, 5.5), (-0.1, 0.1)):
        assert same(torch.empty(3, 17).uniform_(lo, hi).numpy(), g.uniform_((3, 17), lo, hi))
        assert same(torch.empty(9, dtype=torch.float64).uniform_(lo, hi).numpy(),
                    g.uniform_((9,), lo, hi, np.float64))
    # torch.nn.Linear's initialisation (what LinearModel consumes)
    for m in (1, 3, 20):
        lin = torch.nn.Linear(m, 1)
        w, b = _rng._NumpyOps(g).linear_init(m)
        assert same(lin.weight.detach().numpy(), w) and same(lin.bias.detach().numpy(), b)


@needs_torch
@pytest.mark.parametrize("seed", SEEDS)
def test_randint_randperm_random(seed):
    g = gen(seed)
    for lo, hi, size in ((0, 10, (7,)), (-5, 5, (2, 3)), (0, 2 ** 32 - 1, (4,)), (0, 2 ** 32, (4,)),
                         (-2 ** 40, 2 ** 40, (5,)), (3, 4, (2,))):
        assert same(torch.randint(lo, hi, size).numpy(), g.randint(lo, hi, size)), (lo, hi)
    for n in (0, 1, 2, 3, 5, 12, 16, 100, 1000, 5000):
        assert same(torch.randperm(n).numpy(), g.randperm(n)), n
    for _ in range(3):
        assert same(torch.empty((), dtype=torch.int64).random_().numpy(), g.random_(()))
    assert same(torch.empty(4, dtype=torch.int64).random_().numpy(), g.random_((4,)))
    assert same(torch.rand(3).numpy(), g.rand(3))


@needs_torch
@pytest.mark.parametrize("seed", SEEDS)
def test_bernoulli_exponential_multinomial(seed):
    g = gen(seed)
    for m in (1, 3, 16, 50):
        assert same(torch.bernoulli(torch.ones(1, m) * 0.5).numpy(), g.bernoulli(np.full((1, m), 0.5, np.float32)))
    p = np.random.RandomState(seed % 2 ** 32).rand(3, 7)
    assert same(torch.bernoulli(torch.from_numpy(p.astype(np.float32))).numpy(), g.bernoulli(p.astype(np.float32)))
    assert same(torch.bernoulli(torch.from_numpy(p)).numpy(), g.bernoulli(p))
    for n in (1, 5, 40):
        assert same(torch.empty(n).exponential_().numpy(), g.exponential_((n,)))
        assert same(torch.empty(n, dtype=torch.float64).exponential_(2.5).numpy(),
                    g.exponential_((n,), 2.5, np.float64))
    for k in (2, 3, 10, 100):
        q = np.random.RandomState(k).rand(2, k).astype(np.float32)
        assert same(torch.multinomial(torch.from_numpy(q), 3, True).numpy(), g.multinomial(q, 3))
        assert same(torch.multinomial(torch.from_numpy(q[0]), 1, True).numpy(), g.multinomial(q[0], 1))
    # KernelShap's Categorical over the number of selected features (its float32 normalisation included)
    from torch.distributions import Categorical
    for m in (2, 3, 4, 7, 16, 33, 100, 257):
        k = torch.arange(m, dtype=torch.float)
        probs = torch.tensor(m - 1) / (k * (m - k))
        probs[0] = 0.0
        cat = Categorical(probs)
        sample = _rng._NumpyOps(g).ks_sampler(m)
        for _ in range(4):
            assert same(cat.sample().reshape(1, 1).numpy(), sample()), m
    assert same(torch.randn(5).numpy(), g.randn(5))


@needs_torch
def test_torch_float32_sum():
    rs = np.random.RandomState(0)
    for n in list(range(1, 140)) + [255, 256, 257, 1000, 4095, 4096, 4097, 70001]:
        x = (rs.randn(n) * rs.choice([1.0, 1e3, 1e-3], n)).astype(np.float32)
        assert np.float32(torch.from_numpy(x).sum().item()) == _rng._torch_sum_f32(x), n


@needs_torch
@pytest.mark.parametrize("seed", SEEDS)
def test_state_after_mixed_calls(seed):
    """Interleaved calls leave the reimplementation in torch's state (mt19937 position and cached normal)."""
    g = gen(seed)
    torch.randn(3), g.randn(3)  # leaves a cached normal value
    torch.randperm(7), g.randperm(7)
    torch.randn(20), g.randn(20)
    torch.bernoulli(torch.ones(1, 5) * 0.5), g.bernoulli(np.full((1, 5), 0.5, np.float32))
    torch.randn(1), g.randn(1)
    torch.empty((), dtype=torch.int64).random_(), g.random_(())
    torch.rand(2, dtype=torch.float64), g.rand(2, dtype=np.float64)
    assert same(torch.randn(5).numpy(), g.randn(5))
    assert same(torch.randint(0, 1000, (6,)).numpy(), g.randint(0, 1000, (6,)))
    st = g.get_state()
    a = g.randn(7)
    g.set_state(st)
    assert same(a, g.randn(7))
    g.manual_seed(seed)
    torch.manual_seed(seed)
    assert same(torch.randn(9).numpy(), g.randn(9)) and g.initial_seed() == torch.initial_seed()


# =================================================================================================================
# the mode
# =================================================================================================================

def test_mode_switch():
    assert _rng.get_rng() == "cattr"
    _rng.set_rng("torch", backend="numpy")
    assert _rng.get_rng() == "torch" and _rng.get_backend() == "numpy"
    _rng.set_rng("cattr")
    assert _rng.get_rng() == "cattr"
    with pytest.raises(ValueError):
        _rng.set_rng("philox")
    with pytest.raises(ValueError):
        _rng.set_rng("torch", backend="cuda")
    assert _rng.is_stochastic("GradientShap") and _rng.is_stochastic("NoiseTunnel+Saliency")
    assert not _rng.is_stochastic("IntegratedGradients") and not _rng.is_stochastic("DeepLiftShap")
    assert _rng.captum_draws("IntegratedGradients", (np.zeros((2, 3)),)) == []

    class Lime:
        pass

    class KernelShap(Lime):
        pass

    class MyShap(KernelShap):
        pass

    class IntegratedGradients:
        _captum_name = "IntegratedGradients"

    class NoiseTunnel:
        def __init__(self, m):
            self.attribution_method = m

    assert _rng.method_name(MyShap()) == "KernelShap" and _rng.method_name(Lime()) == "Lime"
    assert _rng.method_name(NoiseTunnel(IntegratedGradients())) == "NoiseTunnel+IntegratedGradients"
    assert _rng.method_name(NoiseTunnel(MyShap())) == "NoiseTunnel+KernelShap"


def test_numpy_backend_seeded_and_without_torch(monkeypatch):
    """Without torch, "torch" mode falls back to the reimplementation; a seed reproduces the draws."""
    monkeypatch.setattr(_rng, "_torch", lambda: None)
    _rng.set_rng("torch", seed=5)
    assert _rng.get_backend() == "numpy"
    x = np.zeros((3, 4), np.float32)
    kw = dict(n_samples=4, stdevs=0.3)
    a = _rng.captum_draws("GradientShap", (x,), (np.ones((5, 4)),), kw)
    _rng.set_rng("torch", seed=5)
    b = _rng.captum_draws("GradientShap", (x,), (np.ones((5, 4)),), kw)
    assert [r for r, _ in a] == ["nt_baseline_index.input0", "nt_noise.input0", "gradshap_coeff"]
    assert all(ra == rb and same(da, db) for (ra, da), (rb, db) in zip(a, b))
    assert a[1][1].shape == (12, 4) and a[1][1].dtype == np.float32 and a[2][1].dtype == np.float64
    with pytest.raises(ImportError):
        _rng.set_rng("torch", backend="torch")


# =================================================================================================================
# (b) the golden Captum cases
# =================================================================================================================

def _golden_cases():
    try:
        import golden
    except Exception:  # noqa: BLE001
        return []
    out = []
    for name in golden.case_dirs():
        with open(os.path.join(golden.CAPTUM_DIR, name, "case.json")) as f:
            c = json.load(f)
        if c.get("random_draws") and c["method"] != "DataLoaderAttribution":
            out.append(name)
    return out


GOLDEN = _golden_cases()


@pytest.mark.skipif(not GOLDEN, reason="golden data absent: set CATTR_GOLDEN (default ../shared/golden)")
@pytest.mark.parametrize("backend", ["torch", "numpy"])
@pytest.mark.parametrize("name", GOLDEN or ["-"])
def test_golden_draws(name, backend):
    import golden
    if backend == "torch" and torch is None:
        pytest.skip("torch is not installed (Debian: python3-torch)")
    c, T, obj, kw = golden.build_call(name, "float64")
    params = {k: v for k, v in kw.items() if k not in ("inputs", "baselines", "_draws")}
    if c["method"] == "LayerFeaturePermutation":  # attributions are [outputs, *layer shape[1:]]
        x0 = kw["inputs"][0] if isinstance(kw["inputs"], tuple) else kw["inputs"]
        params["layer_shapes"] = lambda: [(x0.shape[0],) + tuple(e["shape"][1:]) for e in c["expected"]]
    _rng.set_rng("torch", seed=1234, backend=backend)
    got = _rng.captum_draws(_rng.method_name(obj), kw["inputs"], kw.get("baselines"), params)
    want = kw["_draws"]
    assert [r for r, _ in got] == [r for r, _ in want]
    for k, ((role, a), (_, b)) in enumerate(zip(got, want)):
        assert same(a, b), "draw %d (%s) differs" % (k, role)


# =================================================================================================================
# (c) Captum itself
# =================================================================================================================

def _captum():
    if torch is None:
        pytest.skip("torch is not installed (Debian: python3-torch)")
    try:
        import captum.attr as ca
    except Exception:  # noqa: BLE001 - CATTR_CAPTUM may name a checkout to import (read only)
        path = os.environ.get("CATTR_CAPTUM")
        if not path or not os.path.isdir(os.path.join(path, "captum")):
            pytest.skip("Captum is not importable; set PYTHONPATH (or CATTR_CAPTUM) to a Captum checkout, e.g. "
                        "../shared/captum-0.8")
        sys.dont_write_bytecode = True
        sys.path.append(path)
        try:
            import captum.attr as ca
        except Exception as e:  # noqa: BLE001
            pytest.skip("Captum is not importable (%s)" % e)
    return ca


# the function Captum calls for each role
_FN = {"nt_noise": "torch.normal", "nt_baseline_index": "np.random.choice", "gradshap_coeff": "np.random.uniform",
       "svs_permutation": "torch.randperm", "fp_batch_permutation": "torch.randperm",
       "lime_sample": "torch.bernoulli", "ks_num_selected": "torch.multinomial", "ks_scores": "torch.randn",
       "dataloader_base_seed": "Tensor.random_", "linear_model_init_unused": "Tensor.uniform_"}


class _Recorder:
    """Records what the random functions Captum calls return (module attributes patched while recording)."""

    def __init__(self):
        self.calls = []

    def __enter__(self):
        self._saved = []
        rec = self.calls

        def wrap(owner, attr, name, inplace=False):
            orig = getattr(owner, attr)

            def f(*a, **k):
                r = orig(*a, **k)
                v = a[0] if inplace else r
                rec.append((name, np.array(v.detach().numpy() if hasattr(v, "detach") else v)))
                return r

            self._saved.append((owner, attr, orig))
            setattr(owner, attr, f)

        for attr in ("normal", "randperm", "bernoulli", "multinomial", "randn"):
            wrap(torch, attr, "torch." + attr)
        wrap(torch.Tensor, "random_", "Tensor.random_", inplace=True)
        wrap(torch.Tensor, "uniform_", "Tensor.uniform_", inplace=True)
        wrap(np.random, "choice", "np.random.choice")
        wrap(np.random, "uniform", "np.random.uniform")
        return self

    def __exit__(self, *exc):
        for owner, attr, orig in reversed(self._saved):
            setattr(owner, attr, orig)


class _Net(torch.nn.Module if torch is not None else object):
    """forward(x [B, 5]) or forward(x [B, 5], y [B, 2, 2]) -> [B, 3]."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(99)
        self.lin1 = torch.nn.Linear(9, 6)
        self.relu = torch.nn.ReLU()
        self.lin2 = torch.nn.Linear(6, 3)

    def forward(self, x, y=None):
        y = torch.zeros(x.shape[0], 2, 2, dtype=x.dtype) if y is None else y
        return self.lin2(self.relu(self.lin1(torch.cat([x, y.reshape(y.shape[0], -1)], 1))))


class _Wide(torch.nn.Module if torch is not None else object):
    """forward(x [B, 20]) -> [B, 2]: 20 interpretable features (KernelShap's randn takes the 16+ path)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(98)
        self.lin = torch.nn.Linear(20, 2)

    def forward(self, x):
        return self.lin(x)


def _data(B, seed=3):
    rs = np.random.RandomState(seed)
    return (torch.from_numpy(rs.randn(B, 5).astype(np.float32)),
            torch.from_numpy(rs.randn(B, 2, 2).astype(np.float32)))


def _configs():
    """(id, make(ca, net, wide) -> (captum call, captum_draws arguments))."""
    C = []

    def add(name, f):
        C.append(pytest.param(f, id=name))

    def nt_ig_partitions(ca, net, wide):
        x, y = _data(3)
        bx, by = _data(4, 5)
        nt = ca.NoiseTunnel(ca.IntegratedGradients(net))
        kw = dict(nt_type="smoothgrad_sq", nt_samples=7, nt_samples_batch_size=3, stdevs=(0.2, 0.05),
                  draw_baseline_from_distrib=True, target=1, n_steps=4)
        return (lambda: nt.attribute((x, y), baselines=(bx, 0.5), **kw),
                ("NoiseTunnel+IntegratedGradients", (x, y), (bx, 0.5), kw))
    add("NoiseTunnel_IG_partitions_distrib", nt_ig_partitions)

    def nt_deeplift_distrib(ca, net, wide):
        x, y = _data(2)
        bx, by = _data(5, 6)
        nt = ca.NoiseTunnel(ca.DeepLift(net))
        kw = dict(nt_samples=5, nt_samples_batch_size=2, stdevs=0.1, draw_baseline_from_distrib=True, target=0)
        return (lambda: nt.attribute((x, y), baselines=(bx, by), **kw),
                ("NoiseTunnel+DeepLift", (x, y), (bx, by), kw))
    add("NoiseTunnel_DeepLift_two_distributions", nt_deeplift_distrib)

    def nt_saliency(ca, net, wide):
        x, _ = _data(4)
        nt = ca.NoiseTunnel(ca.Saliency(net))
        kw = dict(nt_type="vargrad", nt_samples=9, nt_samples_batch_size=4, stdevs=0.3, target=2)
        return lambda: nt.attribute(x, **kw), ("NoiseTunnel+Saliency", (x,), None, kw)
    add("NoiseTunnel_Saliency_remainder", nt_saliency)

    def nt_fp(ca, net, wide):
        x, _ = _data(2)
        nt = ca.NoiseTunnel(ca.FeaturePermutation(net))
        kw = dict(nt_samples=3, nt_samples_batch_size=2, stdevs=0.1, target=1)
        return lambda: nt.attribute(x, **kw), ("NoiseTunnel+FeaturePermutation", (x,), None, kw)
    add("NoiseTunnel_FeaturePermutation", nt_fp)

    def nt_svs(ca, net, wide):
        x, _ = _data(2)
        nt = ca.NoiseTunnel(ca.ShapleyValueSampling(net))
        kw = dict(nt_samples=2, stdevs=0.1, target=1, n_samples=3)
        return lambda: nt.attribute(x, **kw), ("NoiseTunnel+ShapleyValueSampling", (x,), None, kw)
    add("NoiseTunnel_ShapleyValueSampling", nt_svs)

    def nt_gs(ca, net, wide):
        x, _ = _data(3)
        bx, _ = _data(3, 7)  # one baseline per example: the tunnel repeats it per sample for the inner method
        nt = ca.NoiseTunnel(ca.GradientShap(net))
        kw = dict(nt_samples=4, nt_samples_batch_size=3, stdevs=0.1, target=1, n_samples=2)
        return (lambda: nt.attribute(x, baselines=bx, **kw),
                ("NoiseTunnel+GradientShap", (x,), (bx,), dict(kw, inner_params={"stdevs": 0.0})))
    add("NoiseTunnel_GradientShap", nt_gs)

    def gs_two(ca, net, wide):
        x, y = _data(3)
        bx, _ = _data(6, 8)
        _, by = _data(2, 9)
        gs = ca.GradientShap(net)
        kw = dict(n_samples=6, stdevs=(0.1, 0.2), target=2)
        return (lambda: gs.attribute((x, y), baselines=(bx, by), **kw),
                ("GradientShap", (x, y), (bx, by), kw))
    add("GradientShap_two_inputs", gs_two)

    def gs_layer(ca, net, wide):
        x, _ = _data(4)
        bx, _ = _data(3, 8)
        lgs = ca.LayerGradientShap(net, net.lin1)
        kw = dict(n_samples=3, stdevs=0.25, target=0)
        return lambda: lgs.attribute(x, baselines=bx, **kw), ("LayerGradientShap", (x,), (bx,), kw)
    add("LayerGradientShap", gs_layer)

    def gs_neuron(ca, net, wide):
        x, _ = _data(2)
        bx, _ = _data(5, 8)
        ngs = ca.NeuronGradientShap(net, net.lin1)
        kw = dict(n_samples=4, stdevs=0.5)
        return (lambda: ngs.attribute(x, neuron_selector=1, baselines=bx, **kw),
                ("NeuronGradientShap", (x,), (bx,), kw))
    add("NeuronGradientShap", gs_neuron)

    def svs(ca, net, wide):
        x, y = _data(2)
        fm = (torch.tensor([[0, 0, 1, 2, 2]]), torch.tensor([[[3, 1], [4, 4]]]))
        s = ca.ShapleyValueSampling(net)
        kw = dict(n_samples=6, target=1, feature_mask=fm)
        return lambda: s.attribute((x, y), **kw), ("ShapleyValueSampling", (x, y), None, kw)
    add("ShapleyValueSampling_masks", svs)

    def fp_two(ca, net, wide):
        x, y = _data(2)  # batch 2: half the permutations are the identity, drawn again
        fm = (torch.tensor([[0, 0, 1, 2, 2]]), torch.tensor([[[3, 1], [4, 4]]]))
        fp = ca.FeaturePermutation(net)
        kw = dict(feature_mask=fm, target=0)
        return lambda: fp.attribute((x, y), **kw), ("FeaturePermutation", (x, y), None, kw)
    add("FeaturePermutation_identity_redraw", fp_two)

    def fp_ppe(ca, net, wide):
        x, y = _data(3)
        fm = (torch.tensor([[0, 0, 1, 2, 2]]), torch.tensor([[[3, 1], [4, 4]]]))
        fp = ca.FeaturePermutation(net)
        kw = dict(feature_mask=fm, target=2, perturbations_per_eval=3)
        return lambda: fp.attribute((x, y), **kw), ("FeaturePermutation", (x, y), None, kw)
    add("FeaturePermutation_perturbations_per_eval", fp_ppe)

    def fp_default(ca, net, wide):
        x, y = _data(2)
        fp = ca.FeaturePermutation(net)
        kw = dict(target=1, perturbations_per_eval=2)
        return lambda: fp.attribute((x, y), **kw), ("FeaturePermutation", (x, y), None, kw)
    add("FeaturePermutation_default_mask", fp_default)

    def lfp(ca, net, wide):
        x, _ = _data(2)
        lf = ca.LayerFeaturePermutation(net, net.relu)
        return (lambda: lf.attribute(x),
                ("LayerFeaturePermutation", (x,), None, dict(layer_shapes=[(2, 6)])))
    add("LayerFeaturePermutation_default_mask", lfp)

    def lfp_mask(ca, net, wide):
        x, _ = _data(3)
        lf = ca.LayerFeaturePermutation(net, net.lin1)
        kw = dict(layer_mask=torch.tensor([[0, 1, 1, 2, 0, 2]]), perturbations_per_eval=2)
        return lambda: lf.attribute(x, **kw), ("LayerFeaturePermutation", (x,), None, kw)
    add("LayerFeaturePermutation_mask", lfp_mask)

    def lime(ca, net, wide):
        x, y = _data(3)
        fm = (torch.tensor([[0, 0, 1, 2, 2]]), torch.tensor([[[3, 1], [1, 3]]]))
        lm = ca.Lime(net)
        kw = dict(feature_mask=fm, target=1, n_samples=12, perturbations_per_eval=4)
        return lambda: lm.attribute((x, y), **kw), ("Lime", (x, y), None, kw)
    add("Lime_three_examples", lime)

    def lime_one(ca, net, wide):
        x, _ = _data(1)
        lm = ca.Lime(net)
        kw = dict(target=0, n_samples=8, baselines=0.1)
        return lambda: lm.attribute(x, **kw), ("Lime", (x,), 0.1, kw)
    add("Lime_one_example_default_mask", lime_one)

    def ks(ca, net, wide):
        x, y = _data(2)
        fm = (torch.tensor([[1, 1, 2, 3, 3]]), torch.tensor([[[4, 2], [2, 4]]]))  # ids from 1: shifted
        k = ca.KernelShap(net)
        kw = dict(feature_mask=fm, target=2, n_samples=10)
        return lambda: k.attribute((x, y), **kw), ("KernelShap", (x, y), None, kw)
    add("KernelShap_two_examples", ks)

    def ks_wide(ca, net, wide):
        x = torch.from_numpy(np.random.RandomState(4).randn(3, 20).astype(np.float32))
        k = ca.KernelShap(wide)
        kw = dict(target=1, n_samples=9)
        return lambda: k.attribute(x, **kw), ("KernelShap", (x,), None, kw)
    add("KernelShap_20_features", ks_wide)

    return C


@pytest.mark.parametrize("backend", ["torch", "numpy"])
@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize("make", _configs())
def test_against_captum(make, seed, backend):
    ca = _captum()
    import warnings
    net, wide = _Net(), _Wide()
    run, (method, inputs, baselines, kw) = make(ca, net, wide)
    # Captum's run, recorded
    torch.manual_seed(seed)
    np.random.seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with _Recorder() as rec:
            run()
    torch_after, np_after = torch.get_rng_state(), np.random.get_state()
    # the same draws from captum_draws
    params = {k: v for k, v in kw.items() if k not in ("target", "n_steps", "nt_type")}
    _rng.set_rng("torch", seed=seed, backend=backend)
    got = _rng.captum_draws(method, inputs, baselines, params)
    assert len(got) == len(rec.calls), "%d draws, Captum made %d" % (len(got), len(rec.calls))
    if make.__name__ == "fp_two":  # the identity was drawn (and drawn again)
        assert any(r == "fp_batch_permutation" and np.array_equal(a, np.arange(a.size)) for r, a in got)
    for k, ((role, a), (fn, b)) in enumerate(zip(got, rec.calls)):
        assert _FN[role.split(".")[0]] == fn, "draw %d: %s, Captum called %s" % (k, role, fn)
        if role == "dataloader_base_seed":
            a = a.reshape(())
        assert same(a, b.astype(a.dtype) if fn.startswith("np.") else b), "draw %d (%s) differs" % (k, role)
    # both generators are where Captum left them
    st = np.random.get_state()
    assert all(np.array_equal(u, v) for u, v in zip(st[1:], np_after[1:])) and st[0] == np_after[0]
    if backend == "torch":
        assert torch.equal(torch.get_rng_state(), torch_after)
    else:
        g = _rng.torch_generator()
        torch.set_rng_state(torch_after)
        assert same(torch.randn(3).numpy(), g.randn(3)) and same(torch.rand(20).numpy(), g.rand(20))


# =================================================================================================================
# (d) the whole chain: captum_draws given to cattr as _draws gives Captum's attributions
# =================================================================================================================

def _e2e_configs():
    fm = (np.array([[0, 0, 1, 2, 2]]), np.array([[[3, 1], [4, 4]]]))
    C = []

    def add(name, method, cattr_cls, captum_cls, kw, baselines=None, batch=3, wide=False, ctor=(), rtol=1e-9):
        C.append(pytest.param(method, cattr_cls, captum_cls, kw, baselines, batch, wide, ctor, rtol, id=name))

    nt = dict(nt_type="smoothgrad_sq", nt_samples=7, nt_samples_batch_size=3, stdevs=0.2,
              draw_baseline_from_distrib=True, target=1, n_steps=4)
    add("NoiseTunnel_IG", "NoiseTunnel+IntegratedGradients", "IntegratedGradients", "IntegratedGradients", nt,
        baselines=((4, 5), 0.5))
    add("GradientShap", "GradientShap", "GradientShap", "GradientShap", dict(n_samples=6, stdevs=0.1, target=2),
        baselines=((6, 5), (2, 9)))
    add("LayerGradientShap", "LayerGradientShap", "LayerGradientShap", "LayerGradientShap",
        dict(n_samples=3, stdevs=0.25, target=0), baselines=((3, 8), (3, 9)), ctor=("lin1",))
    add("ShapleyValueSampling", "ShapleyValueSampling", "ShapleyValueSampling", "ShapleyValueSampling",
        dict(n_samples=6, target=1, feature_mask=fm))
    add("FeaturePermutation_batch2", "FeaturePermutation", "FeaturePermutation", "FeaturePermutation",
        dict(target=0, feature_mask=fm), batch=2)
    add("FeaturePermutation_ppe3", "FeaturePermutation", "FeaturePermutation", "FeaturePermutation",
        dict(target=2, feature_mask=fm, perturbations_per_eval=3))
    add("Lime", "Lime", "Lime", "Lime", dict(target=1, feature_mask=fm, n_samples=12), rtol=1e-4)
    add("KernelShap", "KernelShap", "KernelShap", "KernelShap", dict(target=2, feature_mask=fm, n_samples=10),
        rtol=1e-5)
    add("KernelShap_20_features", "KernelShap", "KernelShap", "KernelShap", dict(target=1, n_samples=30),
        wide=True, rtol=1e-5)
    return C


@pytest.mark.parametrize("method,cattr_cls,captum_cls,kw,baselines,batch,wide,ctor,rtol", _e2e_configs())
def test_cattr_with_captum_draws_gives_captum_attributions(method, cattr_cls, captum_cls, kw, baselines, batch,
                                                          wide, ctor, rtol):
    ca = _captum()
    import warnings
    import cattr
    from cattr import attr as A
    net = (_Wide() if wide else _Net()).double()
    if wide:
        xs = (torch.from_numpy(np.random.RandomState(4).randn(batch, 20)),)
    else:
        xs = tuple(t.double() for t in _data(batch))
    model = cattr.from_torch(net, xs if len(xs) > 1 else xs[0])
    bl = None
    if baselines is not None:  # (rows, data seed) per input, or a scalar
        bl = []
        for i, b in enumerate(baselines):
            bl.append(b if np.ndim(b) == 0 else _data(b[0], b[1])[i].double())
        bl = tuple(bl)
    inner = captum_cls
    cap = getattr(ca, inner)(net, *[getattr(net, c) for c in ctor])
    mine = getattr(A, cattr_cls)(model, *ctor)
    if method.startswith("NoiseTunnel+"):
        cap, mine = ca.NoiseTunnel(cap), A.NoiseTunnel(mine)
    ckw = {k: (tuple(torch.from_numpy(m) for m in v) if k == "feature_mask" else v) for k, v in kw.items()}
    if bl is not None:
        ckw["baselines"] = bl
    torch.manual_seed(11)
    np.random.seed(11)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = cap.attribute(xs if len(xs) > 1 else xs[0], **ckw)
    _rng.set_rng("torch", seed=11)
    nbl = None if bl is None else tuple(b if np.ndim(b) == 0 else b.numpy() for b in bl)
    draws = _rng.captum_draws(method, xs, nbl, kw)
    args = dict(kw)
    if nbl is not None:
        args["baselines"] = nbl
    got = mine.attribute(tuple(t.numpy() for t in xs) if len(xs) > 1 else xs[0].numpy(), _draws=draws, **args)
    ref = ref if isinstance(ref, tuple) else (ref,)
    got = got if isinstance(got, tuple) else (got,)
    for g, r in zip(got, ref):
        r = r.detach().numpy()
        assert np.max(np.abs(np.asarray(g) - r)) <= rtol * np.max(np.abs(r)) + 1e-12
