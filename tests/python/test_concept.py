"""cattr.concept (issue 35, item 3): TCAV against Captum's own TCAV (../shared/captum-0.8, where present) with the
same deterministic classifier, the scores against their definition in numpy (cattr's layer gradients against
torch's autograd), saving and reloading of activations and CAVs in Captum's layout (a second TCAV trains nothing),
the default classifier (sklearn's, and cattr's linear SGD where sklearn is absent), concepts from arrays and .npy
folders, the significance test (Welch's t-test against scipy's), and the errors. Skipped as a whole without torch."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (Debian: python3-torch)")

from cattr import _lib  # noqa: E402
from cattr import concept as cc  # noqa: E402
from cattr.attr import LayerIntegratedGradients  # noqa: E402

import golden  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.conv1 = torch.nn.Conv2d(1, 2, 3)
        self.relu1 = torch.nn.ReLU()
        self.fc1 = torch.nn.Linear(2 * 6 * 6, 8)
        self.relu2 = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        h = self.relu1(self.conv1(x))
        return self.fc2(self.relu2(self.fc1(h.reshape(h.shape[0], -1))))


def _examples(seed, n=20, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 1, 8, 8, generator=g) + shift


def _concepts():
    return {name: cc.concept_from_arrays(i, name, _examples(10 + i, shift=0.5 * (name == "striped")), batch_size=8)
            for i, name in enumerate(["striped", "random_0", "random_1", "random_2", "random_3"])}


class FixedClassifier(cc.Classifier):
    """Deterministic CAVs: each concept's mean activation minus the mean of the concepts' means."""

    calls = 0

    def train_and_eval(self, dataloader, **kwargs):
        FixedClassifier.calls += 1
        sums, counts = {}, {}
        for x, y in dataloader:
            for label in torch.unique(y).tolist():
                sel = x[y == label].double()
                sums[label] = sums.get(label, 0) + sel.sum(0)
                counts[label] = counts.get(label, 0) + len(sel)
        self._classes = sorted(sums)
        means = torch.stack([sums[c] / counts[c] for c in self._classes])
        self._w = means - means.mean(0)
        return {"accs": torch.tensor(0.75)}

    def weights(self):
        return self._w

    def classes(self):
        return self._classes


def _layer_grads(model, layer, x, target):
    acts = {}
    mod = dict(model.named_modules())[layer]
    h = mod.register_forward_hook(lambda m, i, o: acts.__setitem__("a", o))
    out = model(x)
    h.remove()
    (g,) = torch.autograd.grad(out[:, target].sum(), acts["a"])
    return g.reshape(len(x), -1).double().numpy()


def test_tcav_scores_match_their_definition(tmp_path):
    model = Net().eval()
    con = _concepts()
    sets = [[con["striped"], con["random_0"]], [con["random_1"], con["random_2"], con["striped"]]]
    tcav = cc.TCAV(model, ["conv1", "fc1"], classifier=FixedClassifier(), save_path=str(tmp_path))
    x = _examples(99, n=7)
    scores = tcav.interpret(x, sets, target=1)
    for layer in ("conv1", "fc1"):
        g = _layer_grads(model, layer, x, 1)
        for s in sets:
            key = cc.concepts_to_str(s)
            stats = tcav.cavs[key][layer].stats
            w = stats["weights"].double().numpy()
            classes = list(stats["classes"])
            ref = g @ w[[classes.index(c.id) for c in s]].T
            got = scores[key][layer]
            assert torch.is_tensor(got["sign_count"]) and got["sign_count"].shape == (len(s),)
            np.testing.assert_allclose(got["sign_count"].numpy(), (ref > 0).mean(0), atol=1e-7)
            np.testing.assert_allclose(got["magnitude"].numpy(), ref.mean(0), rtol=1e-5, atol=1e-6)
            # a two-concept set's scores are complementary ([-w, w])
            if len(s) == 2:
                assert abs(float(got["magnitude"][0] + got["magnitude"][1])) < 1e-5


def test_tcav_matches_captum(tmp_path):
    ccon = golden.import_captum("captum.concept")
    model = Net().eval()
    x = _examples(98, n=9)
    names = ["striped", "random_0", "random_1"]
    out = {}
    for lib in ("cattr", "captum"):
        if lib == "cattr":
            con = _concepts()
            tcav = cc.TCAV(model, ["conv1", "fc1"], classifier=FixedClassifier(), save_path=str(tmp_path / lib))
        else:
            from torch.utils.data import DataLoader

            con = {n: ccon.Concept(i, n, DataLoader(_examples(10 + i, shift=0.5 * (n == "striped")), batch_size=8))
                   for i, n in enumerate(names)}
            tcav = ccon.TCAV(model, ["conv1", "fc1"], classifier=FixedClassifier(), save_path=str(tmp_path / lib))
        sets = [[con["striped"], con["random_0"]], [con["random_1"], con["striped"]]]
        out[lib] = tcav.interpret(x, sets, target=2)
    for key in ("0-1", "2-0"):
        for layer in ("conv1", "fc1"):
            for score in ("sign_count", "magnitude"):
                np.testing.assert_allclose(out["cattr"][key][layer][score].numpy(),
                                           out["captum"][key][layer][score].numpy(), rtol=1e-5, atol=1e-6)


def test_saved_activations_and_cavs_are_reloaded(tmp_path):
    model = Net().eval()
    con = _concepts()
    sets = [[con["striped"], con["random_0"]]]
    x = _examples(97, n=5)
    FixedClassifier.calls = 0
    first = cc.TCAV(model, "fc1", model_id="net", classifier=FixedClassifier(), save_path=str(tmp_path))
    a = first.interpret(x, sets, target=0)
    assert FixedClassifier.calls == 1
    # Captum's layout: activations per batch, the CAV as a pickle per concepts and layer
    assert sorted(os.listdir(tmp_path / "av" / "net" / "striped-0" / "fc1")) == ["0.pt", "1.pt", "2.pt"]
    assert (tmp_path / "net" / "0-1-fc1.pkl").exists()
    act = torch.load(tmp_path / "av" / "net" / "striped-0" / "fc1" / "2.pt")
    assert tuple(act.shape) == (4, 8)  # 20 examples in batches of 8
    second = cc.TCAV(model, "fc1", model_id="net", classifier=FixedClassifier(), save_path=str(tmp_path))
    b = second.interpret(x, sets, target=0)
    assert FixedClassifier.calls == 1  # reloaded, not trained
    loaded = cc.CAV.load(str(tmp_path), "net", sets[0], "fc1")
    assert [c.name for c in loaded.concepts] == ["striped", "random_0"] and loaded.layer == "fc1"
    assert float(loaded.stats["accs"]) == 0.75
    np.testing.assert_array_equal(a["0-1"]["fc1"]["magnitude"].numpy(), b["0-1"]["fc1"]["magnitude"].numpy())
    # force_train trains again
    second.compute_cavs(sets, force_train=True)
    assert FixedClassifier.calls == 2


def test_caller_layer_method(tmp_path):
    model = Net().eval()
    con = _concepts()
    sets = [[con["striped"], con["random_0"]]]
    x = _examples(96, n=4)
    lig = LayerIntegratedGradients(model, "fc1", multiply_by_inputs=False)
    tcav = cc.TCAV(model, ["conv1", "fc1"], classifier=FixedClassifier(), layer_attr_method=lig,
                   save_path=str(tmp_path))
    got = tcav.interpret(x, sets, target=1, n_steps=8)
    for layer in ("conv1", "fc1"):
        a = LayerIntegratedGradients(model, layer, multiply_by_inputs=False).attribute(x, target=1, n_steps=8)
        w = tcav.cavs["0-1"][layer].stats["weights"].float()
        s = a.reshape(len(x), -1).float() @ w.t()
        np.testing.assert_allclose(got["0-1"][layer]["magnitude"].numpy(), s.mean(0).numpy(), rtol=1e-5, atol=1e-6)
    assert lig.layer == "fc1"  # the caller's instance is not changed


def test_default_classifier_separates(tmp_path):
    model = Net().eval()
    con = _concepts()
    tcav = cc.TCAV(model, "fc1", save_path=str(tmp_path))
    cavs = tcav.compute_cavs([[con["striped"], con["random_0"]]])
    stats = cavs["0-1"]["fc1"].stats
    assert tuple(stats["weights"].shape) == (2, 8)
    np.testing.assert_array_equal(stats["weights"][0].numpy(), -stats["weights"][1].numpy())
    assert list(stats["classes"]) == [0, 1]
    assert 0.0 <= float(stats["accs"]) <= 1.0


def test_linear_sgd_without_sklearn():
    rs = np.random.RandomState(0)
    x = np.concatenate([rs.normal(-1, 0.3, (40, 5)), rs.normal(1, 0.3, (40, 5))])
    y = np.array([3] * 40 + [7] * 40)
    m = cc._LinearSGD(seed=1).fit(x, y)
    pred = np.where(m.decision(x)[:, 0] > 0, 7, 3)
    assert (pred == y).mean() == 1.0
    assert list(m.classes_) == [3, 7] and m.coef_.shape == (1, 5) and (m.coef_ > 0).all()
    # three classes: one row per class, each separating its class from the rest
    x3 = np.concatenate([x, rs.normal((0, 0, 3, 0, 0), 0.3, (40, 5))])
    y3 = np.concatenate([y, [9] * 40])
    m3 = cc._LinearSGD(seed=1).fit(x3, y3)
    assert m3.coef_.shape == (3, 5)
    assert (np.array([3, 7, 9])[np.argmax(m3.decision(x3), axis=1)] == y3).mean() > 0.95
    with pytest.raises(_lib.ArgumentError, match="two concepts"):
        cc._LinearSGD().fit(x[:5], y[:5])


def test_concept_from_npy_folder(tmp_path):
    for i in range(5):
        np.save(tmp_path / ("%d.npy" % i), np.full((1, 8, 8), float(i), np.float32))
    c = cc.concept_from_arrays(4, "ones", str(tmp_path), batch_size=2)
    batches = list(c.data_iter)
    assert [len(b) for b in batches] == [2, 2, 1] and batches[2][0, 0, 0, 0] == 4.0
    assert c.identifier == "ones-4"
    np.save(tmp_path / "9.npy", np.zeros((2, 2), np.float32))
    with pytest.raises(_lib.ArgumentError, match="9.npy"):
        cc.concept_from_arrays(4, "ones", str(tmp_path))
    with pytest.raises(_lib.ArgumentError, match="no .npy or image"):
        cc.concept_from_arrays(4, "none", str(tmp_path / "sub") if os.makedirs(tmp_path / "sub") is None else "")


def test_welch_ttest_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    rs = np.random.RandomState(5)
    for na, nb, shift in ((5, 5, 0.3), (8, 3, 1.0), (20, 17, 0.05), (4, 9, 3.0)):
        a, b = rs.normal(0, 1, na), rs.normal(shift, 2, nb)
        t, p = cc._ttest(a, b)
        ref = stats.ttest_ind(a, b, equal_var=False)
        assert abs(t - ref.statistic) < 1e-10 and abs(p - ref.pvalue) < 1e-10


def test_significance(tmp_path):
    model = Net().eval()
    con = _concepts()
    tcav = cc.TCAV(model, ["fc1"], classifier=FixedClassifier(), save_path=str(tmp_path))
    res = cc.significance(tcav, _examples(95, n=6), con["striped"],
                          [con["random_0"], con["random_1"], con["random_2"], con["random_3"]], target=0,
                          score="magnitude")
    r = res["fc1"]
    assert 0.0 <= r["p_value"] <= 1.0 and len(r["scores"]) == 4 and len(r["random_scores"]) == 3
    assert r["significant"] == (r["p_value"] < 0.05)
    assert abs(r["mean"] - np.mean(r["scores"])) < 1e-12
    with pytest.raises(_lib.ArgumentError, match="at least 3"):
        cc.significance(tcav, _examples(95, n=6), con["striped"], [con["random_0"]], target=0)


def test_errors(tmp_path):
    model = Net().eval()
    con = _concepts()
    with pytest.raises(_lib.ArgumentError, match="model_id"):
        cc.TCAV(model, "fc1", model_id="", save_path=str(tmp_path))
    tcav = cc.TCAV(model, "fc1", classifier=FixedClassifier(), save_path=str(tmp_path))
    with pytest.raises(_lib.ArgumentError, match="constructor"):
        tcav.interpret(_examples(1, n=2), [[con["striped"], con["random_0"]]], target=0,
                       attribute_to_layer_input=True)
    twin = cc.Concept(0, "striped_again", None)
    with pytest.raises(AssertionError, match="id 0"):
        tcav.compute_cavs([[con["striped"], con["random_0"]], [twin, con["random_1"]]])
    empty = cc.TCAV(model, "fc1", classifier=FixedClassifier(), save_path=str(tmp_path / "b"))
    with pytest.raises(_lib.ArgumentError, match="no data_iter"):
        empty.compute_cavs([[cc.Concept(5, "nothing", None), con["random_0"]]])


def test_concept_from_image_folder(tmp_path):
    Image = pytest.importorskip("PIL.Image")
    for i in range(3):
        a = np.zeros((5, 4, 3), np.uint8)
        a[..., 0] = 40 * i  # red grows with the file's number
        Image.fromarray(a).save(tmp_path / ("img%d.png" % i))
    c = cc.concept_from_arrays(0, "red", str(tmp_path), batch_size=2)
    (b0, b1) = list(c.data_iter)
    assert b0.shape == (2, 3, 5, 4) and b0.dtype == np.float32 and b1.shape == (1, 3, 5, 4)
    np.testing.assert_allclose(b1[0, 0], 80 / 255.0, rtol=1e-6)
    assert float(b0[1, 1].max()) == 0.0
    c2 = cc.concept_from_arrays(1, "half", str(tmp_path), transform=lambda im: np.asarray(im.resize((2, 2))))
    assert next(iter(c2.data_iter)).shape == (3, 2, 2, 3)
