"""cattr.influence (issue 35, item 4): TracInCP, TracInCPFast and SimilarityInfluence against Captum's own classes
(../shared/captum-0.8, where present) on a small network with several checkpoints and losses of each reduction, the
per-example gradients against torch's autograd one example at a time, the k most influential against a sort of the
scores, self influence against the squared gradient norms, and the errors. Skipped as a whole without torch."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (Debian: python3-torch)")

from cattr import influence as ci  # noqa: E402

import golden  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear1 = torch.nn.Linear(5, 4)
        self.act = torch.nn.Tanh()
        self.linear2 = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.linear2(self.act(self.linear1(x)))


def _setup(tmp_path, n=12, checkpoints=3):
    torch.manual_seed(0)
    net = Net().double()
    for c in range(checkpoints):
        for p in net.parameters():
            p.data.normal_(0, 1)
        state = dict(net.state_dict(), learning_rate=0.5 + c)
        torch.save(state, tmp_path / ("checkpoint-%d.pt" % c))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 5, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (n,), generator=g)
    xt = torch.randn(4, 5, generator=g, dtype=torch.float64)
    yt = torch.randint(0, 3, (4,), generator=g)
    return net, torch.utils.data.TensorDataset(x, y), (xt, yt)


def _load(net, path):
    """A checkpoint loader that takes the learning rate out of the state dict (Captum's default loader passes it on
    to load_state_dict, which refuses it)."""
    state = torch.load(path)
    lr = state.pop("learning_rate", 1.0)
    net.load_state_dict(state)
    return lr


def _per_example_grads(net, x, y, loss_fn, params):
    """Each example's gradient of its own loss, flattened, by torch's autograd one example at a time."""
    rows = []
    for i in range(len(x)):
        loss = loss_fn(net(x[i:i + 1]), y[i:i + 1]).sum()
        gs = torch.autograd.grad(loss, params)
        rows.append(torch.cat([g.reshape(-1) for g in gs]))
    return torch.stack(rows)


@pytest.mark.parametrize("layers", [None, ["linear2"], ["linear1"]])
def test_tracincp_definition(tmp_path, layers):
    net, train, test = _setup(tmp_path)
    loss = torch.nn.CrossEntropyLoss(reduction="none")
    tracin = ci.TracInCP(net, train, str(tmp_path), layers=layers, loss_fn=loss, batch_size=5)
    got = tracin.influence(test)
    ref = 0
    for c in range(3):
        lr = ci._load_flexible_state_dict(net, str(tmp_path / ("checkpoint-%d.pt" % c)))
        params = [p for n_, p in net.named_parameters() if layers is None or n_.split(".")[0] in layers]
        gt = _per_example_grads(net, test[0], test[1], loss, params)
        gx = _per_example_grads(net, train.tensors[0], train.tensors[1], loss, params)
        ref = ref + lr * gt @ gx.T
    assert got.shape == (4, 12)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-10, atol=1e-10)
    # self influence: the squared norms; the k most influential: the sorted scores
    si = tracin.self_influence()
    ref_si = 0
    for c in range(3):
        lr = ci._load_flexible_state_dict(net, str(tmp_path / ("checkpoint-%d.pt" % c)))
        params = [p for n_, p in net.named_parameters() if layers is None or n_.split(".")[0] in layers]
        ref_si = ref_si + lr * _per_example_grads(net, train.tensors[0], train.tensors[1], loss, params).pow(2).sum(1)
    np.testing.assert_allclose(si.numpy(), ref_si.numpy(), rtol=1e-10)
    top = tracin.influence(test, k=3, proponents=False)
    order = torch.argsort(got, dim=1)[:, :3]
    np.testing.assert_array_equal(top.indices.numpy(), order.numpy())
    np.testing.assert_allclose(top.influence_scores.numpy(), torch.gather(got, 1, order).numpy(), rtol=1e-12)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_tracincp_fast_matches_captum(tmp_path, reduction):
    cinf = golden.import_captum("captum.influence")
    net, train, test = _setup(tmp_path)
    loss = torch.nn.CrossEntropyLoss(reduction=reduction)
    ours = ci.TracInCPFast(net, "linear2", train, str(tmp_path), _load, loss_fn=loss, batch_size=4)
    theirs = cinf.TracInCPFast(net, net.linear2, train, str(tmp_path), _load, loss_fn=loss, batch_size=4)
    np.testing.assert_allclose(ours.influence(test).numpy(), theirs.influence(test).numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ours.self_influence().numpy(), theirs.self_influence().numpy(), rtol=1e-10)
    a, b = ours.influence(test, k=4), theirs.influence(test, k=4)
    np.testing.assert_array_equal(a.indices.numpy(), b.indices.numpy())


def test_tracincp_matches_captum_sample_wise(tmp_path):
    cinf = golden.import_captum("captum.influence")
    net, train, test = _setup(tmp_path)
    loss = torch.nn.MSELoss(reduction="sum")
    test = (test[0], torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3)))
    train = torch.utils.data.TensorDataset(train.tensors[0], torch.randn(12, 3, dtype=torch.float64))
    ours = ci.TracInCP(net, train, str(tmp_path), _load, loss_fn=loss, batch_size=5, sample_wise_grads_per_batch=True)
    theirs = cinf.TracInCP(net, train, str(tmp_path), _load, loss_fn=loss, batch_size=5,
                           sample_wise_grads_per_batch=True)
    np.testing.assert_allclose(ours.influence(test).numpy(), theirs.influence(test).numpy(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(ours.compute_intermediate_quantities(test).numpy(),
                               theirs.compute_intermediate_quantities(test).numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ours.influence(test, aggregate=True).numpy(),
                               theirs.influence(test, aggregate=True).numpy(), rtol=1e-9, atol=1e-9)


def test_similarity_influence_matches_captum(tmp_path):
    cinf = golden.import_captum("captum.influence")
    net, train, test = _setup(tmp_path)
    src = train.tensors[0]
    for metric in ("cosine", "euclidean"):
        res = []
        for lib, mod in (("cattr", ci), ("captum", cinf._core.similarity_influence)):
            kw = {} if metric == "cosine" else dict(similarity_metric=mod.euclidean_distance, similarity_direction="min")
            sim = (ci.SimilarityInfluence if lib == "cattr" else cinf.SimilarityInfluence)(
                net, ["linear1", "linear2"], src, str(tmp_path / lib / metric), batch_size=4, **kw)
            res.append(sim.influence(test[0], top_k=3))
        for layer in ("linear1", "linear2"):
            np.testing.assert_array_equal(res[0][layer][0].numpy(), res[1][layer][0].numpy())
            np.testing.assert_allclose(res[0][layer][1].numpy(), res[1][layer][1].numpy(), rtol=1e-10)
    # saved where Captum saves them, reloaded by a second call
    assert sorted(os.listdir(tmp_path / "cattr" / "cosine" / "av" / "src" / "linear1")) == ["0.pt", "1.pt", "2.pt"]


def test_checkpoints_reuse_their_exports(tmp_path):
    net, train, test = _setup(tmp_path)
    tracin = ci.TracInCPFast(net, "linear2", train, str(tmp_path), loss_fn=torch.nn.CrossEntropyLoss(reduction="sum"),
                             batch_size=4)
    tracin.influence(test)
    tf = tracin._passes._act[("linear2",)]._torch
    states = len(tf._states)
    tracin.influence(test)
    assert states == 3 and len(tf._states) == 3  # one set of exports per checkpoint, made once


def test_errors(tmp_path):
    net, train, test = _setup(tmp_path)
    emb = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Flatten(), torch.nn.Linear(8, 3)).double()
    with pytest.raises(NotImplementedError, match=r"the module 0 \(Embedding\) has parameters too \(a kind"):
        ci.TracInCP(emb, train, str(tmp_path), loss_fn=torch.nn.CrossEntropyLoss(reduction="none"))
    with pytest.raises(ValueError, match="Invalid checkpoints"):
        ci.TracInCP(net, train, str(tmp_path / "none"), loss_fn=torch.nn.CrossEntropyLoss(reduction="none"))
    with pytest.raises(ValueError, match='Invalid final_fc_layer str: "linear9"'):
        ci.TracInCPFast(net, "linear9", train, str(tmp_path), loss_fn=torch.nn.CrossEntropyLoss(reduction="sum"))
    with pytest.raises(AssertionError, match='must be "none" when `sample_wise_grads_per_batch` is False'):
        ci.TracInCP(net, train, str(tmp_path), loss_fn=torch.nn.CrossEntropyLoss(reduction="sum"))
    with pytest.raises(ValueError, match="sideways is not a valid value"):
        ci.SimilarityInfluence(net, "linear1", train.tensors[0], str(tmp_path), similarity_direction="sideways")


@pytest.mark.parametrize("projection_dim", [None, 4])
def test_tracincp_fast_rand_proj(tmp_path, projection_dim):
    net, train, test = _setup(tmp_path)
    loss = torch.nn.CrossEntropyLoss(reduction="sum")
    fast = ci.TracInCPFast(net, "linear2", train, str(tmp_path), _load, loss_fn=loss, batch_size=4)
    proj = ci.TracInCPFastRandProj(net, "linear2", train, str(tmp_path), _load, loss_fn=loss, batch_size=4,
                                   projection_dim=projection_dim, seed=3)
    scores = proj.influence(test, k=None)
    top = proj.influence(test, k=3)
    np.testing.assert_array_equal(top.indices.numpy(), torch.topk(scores, 3, dim=1).indices.numpy())
    if projection_dim is None:  # no projection: TracInCPFast's scores exactly
        np.testing.assert_allclose(scores.numpy(), fast.influence(test).numpy(), rtol=1e-10, atol=1e-12)
    else:  # 4 entries per checkpoint (2 x 2 of the 3 x 4 factors)
        assert proj.src_intermediate_quantities.shape == (12, 3 * 4)
        assert np.corrcoef(scores.numpy().ravel(), fast.influence(test).numpy().ravel())[0, 1] > 0.3
    with pytest.raises(NotImplementedError):
        proj.self_influence()


def test_fast_when_the_last_layer_is_not_the_output(tmp_path):
    """A softmax after the last Linear layer: the loss gradient is the model output's (Captum's), not the layer's."""
    cinf = golden.import_captum("captum.influence")
    net, train, test = _setup(tmp_path)
    soft = torch.nn.Sequential()
    soft.add_module("body", net)
    soft.add_module("soft", torch.nn.Softmax(dim=1))

    def load(model, path):
        return _load(model.body, path)

    loss = torch.nn.MSELoss(reduction="sum")
    onehot = (torch.nn.functional.one_hot(train.tensors[1], 3).double(),
              torch.nn.functional.one_hot(test[1], 3).double())
    tr = torch.utils.data.TensorDataset(train.tensors[0], onehot[0])
    ours = ci.TracInCPFast(soft, "body.linear2", tr, str(tmp_path), load, loss_fn=loss, batch_size=4)
    theirs = cinf.TracInCPFast(soft, soft.body.linear2, tr, str(tmp_path), load, loss_fn=loss, batch_size=4)
    t = (test[0], onehot[1])
    np.testing.assert_allclose(ours.influence(t).numpy(), theirs.influence(t).numpy(), rtol=1e-9, atol=1e-12)
    assert ours._fc_is_output == [False]
    # the plain network: its last layer's output is the model's, one pass a batch after the first
    plain = ci.TracInCPFast(net, "linear2", train, str(tmp_path), _load,
                            loss_fn=torch.nn.CrossEntropyLoss(reduction="sum"), batch_size=4)
    plain.influence(test)
    assert plain._fc_is_output == [True]


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1, stride=2)
        self.gconv = torch.nn.Conv2d(4, 4, 2, groups=2, dilation=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.conv1d = torch.nn.Conv1d(4, 3, 2)
        self.ln = torch.nn.LayerNorm(6)
        self.fc = torch.nn.Linear(6, 3)

    def forward(self, x):
        h = self.bn(torch.tanh(self.gconv(torch.relu(self.conv(x)))))  # [n, 4, 3, 3] (a BatchNorm the export
        h = torch.tanh(self.conv1d(h.flatten(2)))  # [n, 3, 8]              keeps: not right after a convolution)
        h = self.ln(h[:, :, :6])
        return self.fc(h).mean(1)


def test_tracincp_conv_batchnorm_layernorm(tmp_path):
    torch.manual_seed(2)
    net = ConvNet().double()
    with torch.no_grad():
        net.bn.running_mean.normal_(0, 0.5)
        net.bn.running_var.uniform_(0.5, 2)
    net.eval()
    torch.save(dict(net.state_dict()), tmp_path / "c0.pt")
    x = torch.randn(6, 2, 7, 7, dtype=torch.float64)
    y = torch.randint(0, 3, (6,))
    loss = torch.nn.CrossEntropyLoss(reduction="none")
    tracin = ci.TracInCP(net, torch.utils.data.TensorDataset(x, y), str(tmp_path), _load, loss_fn=loss,
                         batch_size=4)
    got = tracin.influence((x[:2], y[:2]))
    g = _per_example_grads(net, x, y, loss, list(net.parameters()))
    np.testing.assert_allclose(got.numpy(), (g[:2] @ g.T).numpy(), rtol=1e-9, atol=1e-10)
    folded = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3), torch.nn.Flatten(),
                                 torch.nn.Linear(75, 3)).double().eval()
    t2 = ci.TracInCP(folded, torch.utils.data.TensorDataset(x, y), str(tmp_path), lambda m, p: 1.0, loss_fn=loss)
    with pytest.raises(NotImplementedError, match="the module 1 has no node of its own in the model's export"):
        t2.influence((x[:2], y[:2]))
    net.bn.train()
    with pytest.raises(NotImplementedError, match=r"bn \(BatchNorm2d\) has parameters too \(in training mode"):
        ci.TracInCP(net, torch.utils.data.TensorDataset(x, y), str(tmp_path), _load, loss_fn=loss)


# ---- influence functions ------------------------------------------------------------------------------------------

class SigNet(torch.nn.Module):
    """Tanh, Sigmoid and Relu between Linear layers (one without bias): every second-order rule on the path."""

    def __init__(self):
        super().__init__()
        self.linear1 = torch.nn.Linear(5, 4)
        self.linear2 = torch.nn.Linear(4, 4, bias=False)
        self.linear3 = torch.nn.Linear(4, 3)

    def forward(self, x):
        h = torch.tanh(self.linear1(x))
        h = torch.sigmoid(self.linear2(h)) + torch.relu(h)
        return self.linear3(h)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 2e-5)])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_hessian_vector_products(tmp_path, dtype, tol, reduction):
    """The Hessian-vector product of a batch's total loss (cross-entropy: a loss with a Hessian of its own) with
    respect to every parameter against torch's autograd.functional.hvp."""
    torch.manual_seed(3)
    net = SigNet().to(dtype)
    torch.save(net.state_dict(), tmp_path / "final.pt")
    x = torch.randn(6, 5, dtype=dtype)
    y = torch.randint(0, 3, (6,))
    loss_fn = torch.nn.CrossEntropyLoss(reduction=reduction)
    inf = ci.NaiveInfluenceFunction(net, torch.utils.data.TensorDataset(x, y), str(tmp_path / "final.pt"),
                                    loss_fn=loss_fn, batch_size=3,
                                    sample_wise_grads_per_batch=reduction != "none")
    names = [n for n, _ in net.named_parameters()]
    params = tuple(p.detach() for p in net.parameters())
    vs = tuple(torch.randn_like(p) for p in params)

    def total(*ps):
        out = torch.nn.utils.stateless.functional_call(net, dict(zip(names, ps)), (x,))
        loss = loss_fn(out, y)
        return loss.sum() if reduction == "none" else loss * (len(x) if reduction == "mean" else 1)

    want = torch.autograd.functional.hvp(total, params, vs)[1]
    got = inf._hvp((x, y), vs, loss_fn, inf.reduction_type)
    scale = max(float(w.abs().max()) for w in want)
    for g, w in zip(got, want):
        assert g.dtype == dtype and g.shape == w.shape
        assert float((g - w).abs().max()) <= tol * scale
    # the Hessian formed whole is symmetric and its columns are those products
    H = inf._hessian(False)
    assert float((H - H.T).abs().max()) <= tol * float(H.abs().max())


@pytest.mark.parametrize("cls_name,kw", [("NaiveInfluenceFunction", {}),
                                         ("ArnoldiInfluenceFunction", {"arnoldi_dim": 40, "projection_dim": 20}),
                                         ("NaiveInfluenceFunction", {"layers": ["linear2"], "projection_dim": 5})])
def test_influence_functions_against_captum(tmp_path, cls_name, kw):
    """Influence, top k and self influence of both influence functions against Captum's, with cross-entropy (whose
    Hessian Captum's tests never exercise) and a model trained a little so that the Hessian is positive definite."""
    mod = golden.import_captum("captum.influence._core." + ("influence_function" if cls_name.startswith("Naive")
                                                             else "arnoldi_influence_function"))
    theirs_cls = getattr(mod, cls_name)
    net, train, test = _setup(tmp_path, checkpoints=1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = train.tensors
    for _ in range(100):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y, reduction="sum").backward()
        opt.step()
    path = str(tmp_path / "trained.pt")
    torch.save(net.state_dict(), path)
    loss_fn = torch.nn.CrossEntropyLoss(reduction="sum")
    args = dict(loss_fn=loss_fn, batch_size=4, sample_wise_grads_per_batch=True, **kw)
    theirs = theirs_cls(net, train, path, **args)
    mine = getattr(ci, cls_name)(net, train, path, **args)
    scale = float(theirs.influence(test).abs().max())
    assert float((mine.influence(test) - theirs.influence(test)).abs().max()) <= 1e-7 * scale
    a, b = mine.self_influence(), theirs.self_influence()
    assert float((a - b).abs().max()) <= 1e-7 * float(b.abs().max())
    top, want = mine.influence(test, k=3), theirs.influence(test, k=3)
    assert torch.equal(top.indices, want.indices)
    assert float((top.influence_scores - want.influence_scores).abs().max()) <= 1e-7 * scale


def test_influence_function_errors(tmp_path):
    net, train, test = _setup(tmp_path, checkpoints=1)
    path = str(tmp_path / "checkpoint-0.pt")
    conv = torch.nn.Sequential(torch.nn.Conv1d(1, 2, 3), torch.nn.Flatten(), torch.nn.Linear(6, 3)).double()
    torch.save(conv.state_dict(), tmp_path / "conv.pt")
    with pytest.raises(NotImplementedError, match=r"parameters of Linear layers .* the module 0 \(Conv1d\)"):
        ci.NaiveInfluenceFunction(conv, train, str(tmp_path / "conv.pt"), loss_fn=torch.nn.MSELoss(reduction="none"))
    with pytest.raises(AssertionError, match='must be "none" when `sample_wise_grads_per_batch` is False'):
        ci.ArnoldiInfluenceFunction(net, train, path, checkpoints_load_func=_load,
                                    loss_fn=torch.nn.CrossEntropyLoss(reduction="sum"))


def _cli():
    from cattr import _lib

    exe = os.environ.get("CATTR_CLI") or os.path.join(os.path.dirname(os.path.abspath(_lib.lib_path)), "cattr")
    if not os.path.isfile(exe) or not os.access(exe, os.X_OK):
        pytest.skip("no cattr command next to %s (set CATTR_CLI)" % _lib.lib_path)
    return exe


def _save_safetensors(path, tensors):
    import json
    import struct

    header, blobs, at = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().numpy().astype(np.float64).tobytes()
        header[name] = {"dtype": "F64", "shape": list(t.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


@pytest.mark.parametrize("ckpt_kind", ["safetensors", "onnx"])
def test_cli_influence_matches_tracincp(tmp_path, ckpt_kind):
    """`cattr influence` on the ONNX export of a network with checkpoints (safetensors of the weights, or ONNX files
    of the same graph) and learning rates gives TracInCP's scores (cattr.influence, which gives Captum's), and its
    self influence TracInCP's."""
    import subprocess

    exe = _cli()
    net, train, test = _setup(tmp_path, checkpoints=3)
    x, y = train.tensors
    np.save(tmp_path / "x.npy", x.numpy())
    np.save(tmp_path / "y.npy", y.numpy())
    np.save(tmp_path / "xt.npy", test[0].numpy())
    np.save(tmp_path / "yt.npy", test[1].numpy())
    model = str(tmp_path / "net.onnx")
    torch.onnx.export(net, (x[:2],), model, input_names=["x"], dynamic_axes={"x": {0: "batch"}})
    ckpts = []
    for c in range(3):
        lr = _load(net, tmp_path / ("checkpoint-%d.pt" % c))
        if ckpt_kind == "safetensors":
            path = tmp_path / ("ck%d.safetensors" % c)
            _save_safetensors(path, dict(net.state_dict()))
        else:
            path = tmp_path / ("ck%d.onnx" % c)
            torch.onnx.export(net, (x[:2],), str(path), input_names=["x"], dynamic_axes={"x": {0: "batch"}})
        ckpts += ["--checkpoint", "%s@%g" % (path, lr)]
    base = [exe, "influence", model, "--train", str(tmp_path / "x.npy"), "--train-labels", str(tmp_path / "y.npy"),
            "--dtype", "float64", "--batch", "5", "--quiet"] + ckpts
    r = subprocess.run(base + ["--test", str(tmp_path / "xt.npy"), "--test-labels", str(tmp_path / "yt.npy"),
                               "--output", str(tmp_path / "s.npy")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(base + ["--self-influence", "--output", str(tmp_path / "self.npy")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    tracin = ci.TracInCP(net, train, [str(tmp_path / ("checkpoint-%d.pt" % c)) for c in range(3)], _load,
                         loss_fn=torch.nn.CrossEntropyLoss(reduction="none"), batch_size=5)
    want = tracin.influence(test).numpy()
    got = np.load(tmp_path / "s.npy")
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-9 * np.abs(want).max()
    want_self = tracin.self_influence().numpy()
    got_self = np.load(tmp_path / "self.npy")
    assert np.abs(got_self - want_self).max() <= 1e-9 * np.abs(want_self).max()
