"""cattr.robust (issue 35): FGSM and PGD against their definitions (the gradient of the loss from torch's autograd on
the same model), against Captum's own classes (../shared/captum-0.8, where present: the same adversarial inputs), and
their options (targeted, masks, bounds, a loss function, additional inputs, L2 and Linf, random start). Skipped as a
whole without torch."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (Debian: python3-torch)")

from cattr.robust import FGSM, PGD  # noqa: E402

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
