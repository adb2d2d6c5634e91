"""Models exported as torch.onnx.export does by default (no dynamic_axes: the batch of the example, 1, baked into the
graph's shapes), the way most people export: small versions of torchvision's ShuffleNetV2, VisionTransformer and
SwinTransformer (the code of shufflenet_v2_x1_0, vit_b_16 and swin_t) and an nn.TransformerEncoder classifier, random
weights. cattr re-batches them at load (src/models/rebatch.c): the forward pass at any batch matches PyTorch's,
IntegratedGradients (16 steps, batched) matches Captum's in float32 and float64, each example of a batch gets the
numbers it gets alone, and the modules' PyTorch paths resolve as layers. Skipped without torch and torchvision (Debian:
python3-torch, python3-torchvision); the Captum comparison needs Captum's source (../shared/captum-0.8 beside the
repository, or on PYTHONPATH)."""
import atexit
import copy
import os
import shutil
import sys
import tempfile

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (Debian: python3-torch)")
tvm = pytest.importorskip("torchvision.models", reason="torchvision is not installed (Debian: python3-torchvision)")
nn = torch.nn

import cattr  # noqa: E402
from cattr import attr as A  # noqa: E402


def _tmpdir(prefix):
    """A folder for exported models, removed when the tests end."""
    d = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, d, True)
    return d

_SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "captum-0.8")


def _captum_ig():
    if os.path.isdir(_SHARED) and _SHARED not in sys.path:
        sys.path.append(_SHARED)
    try:
        from captum.attr import IntegratedGradients
    except Exception as e:  # noqa: BLE001 - any import failure means: no Captum here
        pytest.skip("Captum is not importable (%s)" % e)
    return IntegratedGradients


class Encoder(nn.Module):
    """A text classifier over embedded tokens: nn.TransformerEncoder (batch_first), mean over the sequence."""

    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.enc(x).mean(dim=1))


def _models():
    return {
        "shufflenet": (lambda: tvm.ShuffleNetV2([1, 1, 1], [8, 16, 32, 48, 64], num_classes=4), (1, 3, 32, 32)),
        "vit": (lambda: tvm.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16,
                                              mlp_dim=32, num_classes=4), (1, 3, 32, 32)),
        "swin": (lambda: tvm.SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 2],
                                             window_size=[2, 2], num_classes=4), (1, 3, 32, 32)),
        "encoder": (Encoder, (1, 6, 16)),
    }


_cache = {}


def _exported(name):
    """The model (eval, seed 0), its example input and its file, exported with torch.onnx.export's defaults."""
    if name not in _cache:
        torch.manual_seed(0)
        make, shape = _models()[name]
        model = make().eval()
        with torch.no_grad():  # zero-initialised heads (ViT's) would make every output 0: nothing to compare
            for p in model.parameters():
                if p.dim() > 1 and not p.any():
                    p.normal_(0, 0.2)
        x = torch.randn(*shape)
        d = _tmpdir("cattr-fixed-batch-")
        path = os.path.join(d, name + ".onnx")
        torch.onnx.export(model, (x,), path)  # the defaults: batch 1 baked in (with grad on: no fused attention op)
        _cache[name] = (model, x, path)
    return _cache[name]


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


@pytest.mark.parametrize("name", ["shufflenet", "vit", "swin", "encoder"])
def test_default_export_runs_any_batch(name):
    model, x, path = _exported(name)
    m = cattr.load(path)
    desc = m.describe()
    assert "batch: exported fixed at 1; re-batched" in desc, desc
    assert m.input_shapes[0][0] in (None, -1), m.input_shapes  # the batch is dynamic now
    xb = torch.randn(3, *x.shape[1:])
    with torch.no_grad():
        want = model(xb).numpy()
    got = np.asarray(m.forward(xb.numpy()))
    assert got.shape == want.shape
    assert _rel(got, want) <= 1e-4, _rel(got, want)


@pytest.mark.parametrize("name", ["shufflenet", "vit", "swin", "encoder"])
def test_default_export_ig_matches_captum(name):
    IG = _captum_ig()
    model, x, path = _exported(name)
    xb = torch.randn(2, *x.shape[1:], generator=torch.Generator().manual_seed(1))
    m = cattr.load(path)
    for dtype, tol in ((torch.float32, 5e-3), (torch.float64, 1e-6)):
        ref_model = copy.deepcopy(model).to(dtype)
        want = IG(ref_model).attribute(xb.to(dtype), target=1, n_steps=16).detach().numpy()
        got = A.IntegratedGradients(m).attribute(xb.numpy().astype(np.float32 if dtype == torch.float32 else
                                                                    np.float64), target=1, n_steps=16)
        got = np.asarray(got)
        assert _rel(got, want) <= tol, (dtype, _rel(got, want))
        # each example gets alone the numbers it gets in the batch (to rounding: the products' blocking differs)
        alone = np.asarray(A.IntegratedGradients(m).attribute(xb[1:].numpy().astype(got.dtype), target=1, n_steps=16))
        scale = np.abs(got).max()
        assert np.max(np.abs(alone[0] - got[1])) <= (1e-5 if dtype == torch.float32 else 1e-12) * scale


@pytest.mark.parametrize("name", ["shufflenet", "vit", "swin", "encoder"])
def test_default_export_module_paths(name):
    model, x, path = _exported(name)
    m = cattr.load(path)
    gone = (nn.BatchNorm2d, nn.Dropout, nn.Identity)
    called = set()
    hooks = [mod.register_forward_hook(lambda mod_, i_, o_, n=n: called.add(n))
             for n, mod in model.named_modules() if n and not list(mod.children())]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    leaves = [n for n, mod in model.named_modules() if n in called and not isinstance(mod, gone) and
              type(mod).__name__ != "StochasticDepth"]
    assert leaves
    missing = []
    for n in leaves:
        try:
            m.resolve(n)
        except ValueError:
            missing.append(n)
    # nn.MultiheadAttention's out_proj and Swin's qkv/proj are read as weights by their parent's forward (no output
    # of their own: Captum cannot hook them either); every other leaf resolves
    missing = [n for n in missing if not n.endswith(("out_proj", ".qkv", ".proj"))]
    assert not missing, missing


class Mixer(nn.Module):
    """A model whose batch cannot be followed: x.t() @ w contracts the batch (of 1) and sum(0) reduces over it. It
    only runs at batch 1 in PyTorch too."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(1, 3))
        self.lin = nn.Linear(3, 2)

    def forward(self, x):
        return self.lin(torch.tanh(x.t() @ self.w)).sum(0, keepdim=True)


def _mixer():
    if "mixer" not in _cache:
        torch.manual_seed(0)
        model = Mixer().eval()
        x = torch.randn(1, 4)
        path = os.path.join(_tmpdir("cattr-fixed-batch-"), "mixer.onnx")
        torch.onnx.export(model, (x,), path)
        _cache["mixer"] = (model, x, path)
    return _cache["mixer"]


def test_untrackable_batch_runs_in_passes():
    model, x, path = _mixer()
    m = cattr.load(path)
    desc = m.describe()
    assert "not re-batched (node '/MatMul' (op MatMul) contracts the batch)" in desc, desc
    assert "runs in passes of the exported batch" in desc, desc
    xb = torch.randn(3, 4, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():  # PyTorch itself runs it one example at a time
        want = torch.cat([model(xb[i:i + 1]) for i in range(3)]).numpy()
    assert _rel(m.forward(xb.numpy()), want) <= 1e-6
    # the gradient through the passes against finite differences of the forward (float64)
    x64 = xb.numpy().astype(np.float64)
    sal = np.asarray(A.Saliency(m).attribute(x64, target=1, abs=False))
    h, fd = 1e-6, np.zeros_like(x64)
    for b in range(3):
        for k in range(4):
            xp, xm = x64.copy(), x64.copy()
            xp[b, k] += h
            xm[b, k] -= h
            fd[b, k] = (np.asarray(m.forward(xp))[b, 1] - np.asarray(m.forward(xm))[b, 1]) / (2 * h)
    np.testing.assert_allclose(sal, fd, rtol=1e-6, atol=1e-8)
    # perturbation methods: forward passes only
    fa = np.asarray(A.FeatureAblation(m).attribute(xb.numpy(), target=1))
    with torch.no_grad():
        ref = np.zeros((3, 4), np.float32)
        for b in range(3):
            base = model(xb[b:b + 1])[0, 1]
            for k in range(4):
                xz = xb[b:b + 1].clone()
                xz[0, k] = 0
                ref[b, k] = base - model(xz)[0, 1]
    np.testing.assert_allclose(fa, ref, rtol=0, atol=1e-6)
    # what needs the graph's nodes is refused, saying why
    with pytest.raises(Exception, match="runs in passes"):
        A.DeepLift(m).attribute(xb.numpy(), target=1)
    with pytest.raises(Exception, match="could not be re-batched"):
        A.LayerIntegratedGradients(m, "lin").attribute(xb.numpy(), target=1)


def test_untrackable_batch_ig_matches_captum():
    IG = _captum_ig()
    model, x, path = _mixer()
    m = cattr.load(path)
    xb = torch.randn(3, 4, generator=torch.Generator().manual_seed(3))
    for dtype, tol in ((torch.float32, 5e-3), (torch.float64, 1e-6)):
        ref_model = copy.deepcopy(model).to(dtype)
        want = np.concatenate([IG(ref_model).attribute(xb[i:i + 1].to(dtype), target=0, n_steps=16,
                                                       internal_batch_size=1).detach().numpy() for i in range(3)])
        got = np.asarray(A.IntegratedGradients(m).attribute(xb.numpy().astype(want.dtype), target=0, n_steps=16))
        assert _rel(got, want) <= tol, (dtype, _rel(got, want))


@pytest.mark.parametrize("name", ["shufflenet", "encoder"])
def test_passes_give_the_re_batched_numbers(name, monkeypatch):
    """The same model re-batched and run in passes (CATTR_BATCH_PASSES=1 forces them): identical numbers."""
    model, x, path = _exported(name)
    xb = torch.randn(3, *x.shape[1:], generator=torch.Generator().manual_seed(4)).numpy().astype(np.float64)
    one = np.asarray(A.IntegratedGradients(cattr.load(path)).attribute(xb, target=2, n_steps=8))
    monkeypatch.setenv("CATTR_BATCH_PASSES", "1")
    m = cattr.load(path)
    assert "runs in passes" in m.describe()
    two = np.asarray(A.IntegratedGradients(m).attribute(xb, target=2, n_steps=8))
    np.testing.assert_array_equal(one, two)


def test_scalar_input_keeps_its_shape():
    """A 0-d array (a sample rate declared []) reaches the model as a scalar, not as [1]."""
    x = torch.randn(2, 4)
    rate = torch.tensor(3, dtype=torch.int64)

    class Rate(nn.Module):
        def forward(self, x, r):
            return x * r.float()

    path = os.path.join(_tmpdir("cattr-scalar-"), "rate.onnx")
    torch.onnx.export(Rate(), (x, rate), path, input_names=["x", "r"], dynamic_axes={"x": {0: "b"}})
    m = cattr.load(path)
    np.testing.assert_allclose(m.forward(x.numpy(), np.array(3, np.int64)), 3 * x.numpy(), rtol=1e-6)


class StatefulGRU(nn.Module):
    """A recurrent model that takes its state as an input, [layers, batch, hidden] as PyTorch's GRU wants it (Silero
    VAD's form): the batch is on dim 1 of the state."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(3, 5, num_layers=2, batch_first=True)
        self.head = nn.Linear(5, 2)

    def forward(self, x, h):
        y, _ = self.rnn(x, h)
        return self.head(y[:, -1])


def test_state_with_the_batch_on_dim_1():
    IG = _captum_ig()
    torch.manual_seed(0)
    model = StatefulGRU().eval()
    x, h = torch.randn(2, 4, 3), torch.randn(2, 2, 5)
    path = os.path.join(_tmpdir("cattr-state-"), "gru.onnx")
    torch.onnx.export(model, (x, h), path, input_names=["x", "h"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "h": {1: "batch"}, "y": {0: "batch"}})
    m = cattr.load(path)
    assert "h float32 [2, ?, 5] (the batch on dim 1)" in m.describe(), m.describe()
    x64, h64 = x.double(), h.double()
    ref_model = copy.deepcopy(model).double()
    # Saliency against autograd with the state held
    xg = x64.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(ref_model(xg, h64)[:, 1].sum(), xg)
    got = A.Saliency(m).attribute(x64.numpy(), target=1, abs=False, additional_forward_args=(h64.numpy(),))
    np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-9, atol=1e-12)
    # IG against Captum's on the model with the state held (each step's rows get their example's state)
    want = IG(lambda xb: ref_model(xb, h64.repeat(1, xb.shape[0] // 2, 1))).attribute(  # rows step-major
        x64, target=1, n_steps=16).detach().numpy()
    got = A.IntegratedGradients(m).attribute(x64.numpy(), target=1, n_steps=16, additional_forward_args=(h64.numpy(),))
    assert _rel(got, want) <= 1e-9, _rel(got, want)
    # a state of the wrong batch is refused, naming the dim
    with pytest.raises(Exception, match="batch size 2 on dim 1"):
        A.Saliency(m).attribute(x64.numpy(), target=1, additional_forward_args=(np.zeros((2, 3, 5)),))
