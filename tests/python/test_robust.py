"""cattr.robust (issue 35): FGSM and PGD against their definitions (the gradient of the loss from torch's autograd on
the same model), against Captum's own classes (../shared/captum-0.8, where present: the same adversarial inputs), and
their options (targeted, masks, bounds, a loss function, additional inputs, L2 and Linf, random start);
MinParamPerturbation and AttackComparator against Captum's classes, with the model's passes in cattr (the PyTorch
forward runs only when it is exported). Skipped as a whole without torch."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (Debian: python3-torch)")

from cattr.robust import FGSM, PGD, AttackComparator, MinParamPerturbation  # noqa: E402

import golden  # noqa: E402


def _captum_robust():
    return golden.import_captum("captum.robust")


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Tanh(), torch.nn.Flatten(),
                               torch.nn.Linear(2 * 4 * 4, 3), torch.nn.Softmax(dim=1)).double()


class TwoIn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.a, self.b = torch.nn.Linear(5, 3), torch.nn.Linear(4, 3)

    def forward(self, x, y, w):
        return torch.softmax(self.a(x) * w + self.b(y), dim=1)


def _torch_grad(model, xs, target, loss_func=None, add=()):
    xs = tuple(x.clone().requires_grad_(True) for x in xs)
    out = model(*xs, *add)
    if loss_func is None:
        loss = -torch.log(out)[torch.arange(len(out)), torch.as_tensor(target)] if not isinstance(target, int) \
            else -torch.log(out)[:, target]
    else:
        loss = loss_func(out, torch.as_tensor(target))
    return torch.autograd.grad(loss.sum(), xs)


@pytest.mark.parametrize("targeted", [False, True])
def test_fgsm_definition(targeted):
    net = _net()
    x = torch.randn(3, 1, 6, 6, dtype=torch.float64)
    mask = (torch.rand(3, 1, 6, 6) > 0.3).double()
    got = FGSM(net, lower_bound=-1.5, upper_bound=1.5).perturb(x, 0.2, [0, 2, 1], targeted=targeted, mask=mask)
    (g,) = _torch_grad(net, (x,), [0, 2, 1])
    want = torch.where(g.abs() > 1e-6, x + (-1 if targeted else 1) * 0.2 * torch.sign(g) * mask, x).clamp(-1.5, 1.5)
    assert torch.allclose(got, want, rtol=0, atol=1e-12)
    assert (got != x).any()


def test_fgsm_loss_func_and_additional_inputs():
    model = TwoIn().double()
    x, y = torch.randn(4, 5, dtype=torch.float64), torch.randn(4, 4, dtype=torch.float64)
    w = torch.rand(4, 1, dtype=torch.float64) + 0.5
    ce = torch.nn.CrossEntropyLoss(reduction="none")
    got = FGSM(model, ce).perturb((x, y), 0.1, torch.tensor([0, 1, 2, 0]), additional_forward_args=(w,))
    gx, gy = _torch_grad(model, (x, y), [0, 1, 2, 0], ce, (w,))
    assert isinstance(got, tuple) and len(got) == 2
    assert torch.allclose(got[0], x + 0.1 * torch.sign(gx), atol=1e-12)
    assert torch.allclose(got[1], y + 0.1 * torch.sign(gy), atol=1e-12)


def test_loss_functions():
    """CrossEntropyLoss, the same loss as a Python function, and a loss of its own (squared error to a one-hot): the
    output's gradient from torch and the vector-Jacobian product through the model, against torch's autograd."""
    model = TwoIn().double()
    x, y = torch.randn(4, 5, dtype=torch.float64), torch.randn(4, 4, dtype=torch.float64)
    w = torch.rand(4, 1, dtype=torch.float64) + 0.5
    t = torch.tensor([2, 0, 1, 1])
    ce = torch.nn.CrossEntropyLoss(reduction="none")
    a = FGSM(model, ce).perturb((x, y), 0.1, t, additional_forward_args=(w,))
    b = FGSM(model, lambda out, tg: ce(out, tg)).perturb((x, y), 0.1, t, additional_forward_args=(w,))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])

    def sq(out, tg):
        return ((out - torch.nn.functional.one_hot(tg, 3).to(out.dtype)) ** 2).sum(1)

    got = FGSM(model, sq).perturb((x, y), 0.1, t, additional_forward_args=(w,))
    gx, gy = _torch_grad(model, (x, y), t, sq, (w,))
    assert torch.allclose(got[0], x + 0.1 * torch.sign(gx), atol=1e-12)
    assert torch.allclose(got[1], y + 0.1 * torch.sign(gy), atol=1e-12)


@pytest.mark.parametrize("norm", ["Linf", "L2"])
def test_pgd_stays_in_the_ball_and_raises_the_loss(norm):
    net = _net()
    x = torch.rand(2, 1, 6, 6, dtype=torch.float64)
    adv = PGD(net, lower_bound=0, upper_bound=1).perturb(x, 0.25, 0.05, 8, [1, 2], norm=norm,
                                                          random_start=norm == "Linf")
    d = (adv - x).view(2, -1)
    size = d.abs().max(1).values if norm == "Linf" else d.norm(dim=1)
    assert (size <= 0.25 + 1e-12).all() and adv.min() >= 0 and adv.max() <= 1
    with torch.no_grad():
        before, after = net(x)[[0, 1], [1, 2]], net(adv)[[0, 1], [1, 2]]
    assert (after < before).all()  # the true class's probability fell (the loss -log p rose)


def test_attacks_match_captum():
    cr = _captum_robust()
    net = _net().float()
    x = torch.randn(4, 1, 6, 6)
    for targeted in (False, True):
        a = cr.FGSM(net, lower_bound=-1, upper_bound=1).perturb(x, 0.1, 2, targeted=targeted)
        b = FGSM(net, lower_bound=-1, upper_bound=1).perturb(x, 0.1, 2, targeted=targeted)
        assert torch.equal(a, b)
    for norm in ("Linf", "L2"):
        torch.manual_seed(4)
        a = cr.PGD(net).perturb(x, 0.3, 0.04, 5, [0, 1, 2, 0], norm=norm, random_start=norm == "Linf")
        torch.manual_seed(4)
        b = PGD(net).perturb(x, 0.3, 0.04, 5, [0, 1, 2, 0], norm=norm, random_start=norm == "Linf")
        assert torch.allclose(a, b, rtol=0, atol=1e-6)


def test_numpy_inputs():
    net = _net().float()
    x = np.random.RandomState(0).rand(2, 1, 6, 6).astype(np.float32)
    a = FGSM(net).perturb(x, 0.1, 1)
    assert isinstance(a, np.ndarray) and a.shape == x.shape and np.abs(a - x).max() <= 0.1 + 1e-6
    b = PGD(net).perturb(x, 0.2, 0.05, 3, 1)
    assert isinstance(b, np.ndarray) and np.abs(b - x).max() <= 0.2 + 1e-6


class Counted(torch.nn.Module):
    """A classifier that counts its forward calls (torch's); cattr calls it only to export it."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(4)
        self.fc = torch.nn.Linear(6, 3)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.fc(x)


def _shift(x, ind=0, amount=0.0):
    y = x.clone()
    y[:, ind] -= amount
    return y


@pytest.mark.parametrize("mode,per_eval", [("linear", 1), ("linear", 7), ("binary", 1), ("binary", 4)])
def test_min_param_perturbation_matches_captum(mode, per_eval):
    crob = _captum_robust()
    net = Counted()
    x = torch.tensor([[0.5, -1.0, 2.0, 0.3, 1.0, -0.2]])
    target = int(net(x).argmax())
    ours = MinParamPerturbation(net, _shift, "amount", 0.0, 40.0, 0.25, mode=mode)
    calls = net.calls
    adv, value = ours.evaluate(x, target=target, attack_kwargs={"ind": 2}, perturbations_per_eval=per_eval)
    # the search's forward passes ran in cattr: torch's forward only for the exports (a batch shape each)
    assert net.calls - calls <= 3
    ref_adv, ref_value = crob.MinParamPerturbation(net, _shift, "amount", 0.0, 40.0, 0.25, mode=mode).evaluate(
        x, target=target, attack_kwargs={"ind": 2}, perturbations_per_eval=per_eval)
    assert value is not None and value == ref_value
    torch.testing.assert_close(adv, ref_adv)
    assert int(net(adv).argmax()) != target and int(net(_shift(x, 2, value - 0.25)).argmax()) == target or \
        mode == "binary"


def test_min_param_perturbation_none_and_errors():
    net = Counted()
    x = torch.tensor([[0.5, -1.0, 2.0, 0.3, 1.0, -0.2]])
    target = int(net(x).argmax())
    m = MinParamPerturbation(net, _shift, "amount", 0.0, 0.01, 0.001)
    assert m.evaluate(x, target=target, attack_kwargs={"ind": 0}) == (None, None)
    with pytest.raises(AssertionError, match="Step size"):
        MinParamPerturbation(net, _shift, "amount", 0.0, 1.0, 2.0)
    with pytest.raises(AssertionError, match="linear or binary"):
        MinParamPerturbation(net, _shift, "amount", 0.0, 1.0, 0.1, mode="golden")


def _metric(out, target):
    return torch.softmax(out, dim=1)[:, target]


def test_attack_comparator_matches_captum():
    crob = _captum_robust()
    net = _net()
    torch.manual_seed(7)
    x = torch.rand(4, 1, 6, 6, dtype=torch.float64)
    results = []
    for lib in ("cattr", "captum"):
        mod = crob if lib == "captum" else None
        F_, P_, AC = (FGSM, PGD, AttackComparator) if mod is None else (mod.FGSM, mod.PGD, mod.AttackComparator)
        if mod is not None:  # Captum's attacks, so that only the comparator differs
            F_, P_ = FGSM, PGD
        comp = AC(net, _metric)
        comp.add_attack(F_(net), "fgsm", attack_kwargs={"epsilon": 0.1, "target": 1})
        comp.add_attack(P_(net), "pgd", attack_kwargs={"radius": 0.1, "step_size": 0.03, "step_num": 3, "target": 1})
        comp.add_attack(lambda inp: inp + 0.05 * torch.sign(torch.sin(inp * 50)), "ripple", num_attempts=3)
        first = comp.evaluate(x, target=1, perturbations_per_eval=3)
        second = comp.evaluate(x * 0.5, target=1)
        results.append((first, second, comp.summary()))
    (a1, a2, asum), (b1, b2, bsum) = results
    for got, ref in ((a1, b1), (a2, b2)):
        torch.testing.assert_close(got["Original"], ref["Original"])
        torch.testing.assert_close(got["fgsm"]["mean"], ref["fgsm"]["mean"])
        torch.testing.assert_close(got["pgd"]["mean"], ref["pgd"]["mean"])
        for k in ("mean", "min", "max"):
            torch.testing.assert_close(got["ripple"][k], ref["ripple"][k])
    assert sorted(asum) == sorted(bsum)
    for k in asum:
        torch.testing.assert_close(asum[k]["mean"], bsum[k]["mean"])


def test_attack_comparator_other_callables():
    # a forward function of strings is called as it is; float metrics are summarised as float32 tensors
    comp = AttackComparator(lambda words: torch.tensor([[float(len(w)) for w in words]]),
                            lambda out: float(out.sum()))
    comp.add_attack(lambda words: [w + "!" for w in words], "bang")
    res = comp.evaluate(["ab", "cde"])
    assert float(res["Original"]) == 5.0 and float(res["bang"]["mean"]) == 7.0
    assert res["Original"].dtype == torch.float32
    with pytest.raises(RuntimeError, match="same name"):
        comp.add_attack(lambda w: w, "bang")
    comp.reset()
    assert comp.summary() == {}


def test_min_param_and_comparator_on_a_cattr_model():
    """A cattr Model (ONNX) with numpy inputs: the default correct function reads numpy outputs; the results stay
    numpy."""
    import cattr

    m = cattr.load("models/digits/digits.onnx")
    x = np.load("models/digits/samples/digit_3.npy").astype(np.float32)
    mp = MinParamPerturbation(m, lambda inp, amount=0.0: inp + amount, "amount", 0.0, 20.0, 0.5)
    adv, value = mp.evaluate(x, target=3, perturbations_per_eval=4)
    assert value == mp.evaluate(x, target=3)[1] and value is not None
    assert int(np.asarray(m(adv)).argmax()) != 3 and int(np.asarray(m(x + value - 0.5)).argmax()) == 3
    ac = AttackComparator(m, lambda out, target: out[:, target])
    ac.add_attack(lambda inp: inp * 0.5, "half")
    res = ac.evaluate(x, target=3)
    assert isinstance(res["Original"], np.ndarray) and isinstance(ac.summary()["half"]["mean"], (np.ndarray, np.generic))
    np.testing.assert_allclose(res["half"]["mean"], np.asarray(m(x * 0.5))[:, 3], rtol=1e-6)
