"""LRP and LayerLRP on torch modules against Captum's own LRP (issue 31, item 8): every way torch exports a linear
layer (Gemm with and without bias, Transpose + MatMul of a Linear without bias, MatMul + Add and MatMul on 3-d inputs,
Conv with and without bias), ReLU, Tanh, MaxPool, a skip connection through Captum's Addition_Module, under the
epsilon, gamma, alpha1-beta0 and identity rules that Captum users set as `module.rule`, and Captum's errors (a rule
that is not a PropagationRule, a leaf module without a rule, a module used twice). cattr computes from the rules the
modules carry; Captum runs on the same module. Skipped without torch or Captum (CATTR_CAPTUM_DIR, default
../shared/captum-0.8 next to the repository)."""
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (Debian: python3-torch)")
nn = torch.nn

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CAPTUM_DIR = os.environ.get("CATTR_CAPTUM_DIR", os.path.join(os.path.dirname(_ROOT), "shared", "captum-0.8"))
if os.path.isdir(_CAPTUM_DIR) and _CAPTUM_DIR not in sys.path:
    sys.path.insert(0, _CAPTUM_DIR)
captum_attr = pytest.importorskip("captum.attr", reason="Captum is not importable (set CATTR_CAPTUM_DIR to a Captum "
                                                        "0.8 checkout to compare with it)")
lrp_rules = pytest.importorskip("captum.attr._utils.lrp_rules", reason="Captum's lrp_rules are not importable")
custom_modules = pytest.importorskip("captum.attr._utils.custom_modules", reason="Captum's custom_modules")

import cattr  # noqa: E402
from cattr import attr as A  # noqa: E402

EpsilonRule, GammaRule = lrp_rules.EpsilonRule, lrp_rules.GammaRule
Alpha1_Beta0_Rule, IdentityRule = lrp_rules.Alpha1_Beta0_Rule, lrp_rules.IdentityRule

# rules by name: a fresh rule object each time (Captum's LRP deletes `.rule` after a call)
RULES = {
    "epsilon": lambda: EpsilonRule(),
    "epsilon_0.1": lambda: EpsilonRule(epsilon=0.1),
    "gamma": lambda: GammaRule(),
    "gamma_1_zero_bias": lambda: GammaRule(gamma=1.0, set_bias_to_zero=True),
    "alpha1_beta0": lambda: Alpha1_Beta0_Rule(),
    "alpha1_beta0_zero_bias": lambda: Alpha1_Beta0_Rule(set_bias_to_zero=True),
}


def _rnd(*shape, seed=0, positive=False):
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(*shape, generator=g, dtype=torch.float64)
    return t + 0.5 if positive else 2 * t - 1


class MLP(nn.Module):
    """lin1 -> ReLU -> lin2 -> Dropout; on [B, 4] (Gemm or Transpose + MatMul) or [B, T, 4] (MatMul + Add or
    MatMul)."""

    def __init__(self, bias, square=False):
        super().__init__()
        self.lin1 = nn.Linear(4, 4 if square else 5, bias=bias)
        self.relu = nn.ReLU()
        self.lin2 = nn.Linear(4 if square else 5, 3, bias=bias)
        self.dropout = nn.Dropout(0.1)
        with torch.no_grad():
            for k, p in enumerate(self.parameters()):
                p.copy_(_rnd(*p.shape, seed=10 + k).float())

    def forward(self, x):
        return self.dropout(self.lin2(self.relu(self.lin1(x))))


class ConvNet(nn.Module):
    """conv -> ReLU -> MaxPool2d -> view -> fc -> Tanh -> fc2"""

    def __init__(self, bias):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1, bias=bias)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(3 * 3 * 3, 4, bias=bias)
        self.tanh = nn.Tanh()
        self.fc2 = nn.Linear(4, 3, bias=bias)
        with torch.no_grad():
            for k, p in enumerate(self.parameters()):
                p.copy_(_rnd(*p.shape, seed=20 + k).float())

    def forward(self, x):
        h = self.pool(self.relu(self.conv(x)))
        return self.fc2(self.tanh(self.fc(h.view(h.shape[0], -1))))


class Skip(nn.Module):
    """lin(x) + x through Captum's Addition_Module (epsilon by default), then out."""

    def __init__(self, bias):
        super().__init__()
        self.lin = nn.Linear(3, 3, bias=bias)
        self.add = custom_modules.Addition_Module()
        self.out = nn.Linear(3, 2, bias=bias)
        with torch.no_grad():
            for k, p in enumerate(self.parameters()):
                p.copy_(_rnd(*p.shape, seed=30 + k).float())

    def forward(self, x):
        return self.out(self.add(self.lin(x), x))


def _prepare(model, rules, dtype):
    """model in eval mode and dtype with fresh rule objects on its modules ({path: rule name})."""
    model = model.to(dtype).eval()
    for path, name in rules.items():
        model.get_submodule(path).rule = RULES[name]() if name != "identity" else IdentityRule()
    return model


def _both(model, rules, x, target, dtype, layer=None, to_input=False):
    """(cattr's, Captum's) relevances of the same module under the same rules."""
    x = x.to(dtype)
    outs = []
    for lib in (A, captum_attr):
        m = _prepare(model, rules, dtype)
        if layer is None:
            r = lib.LRP(m).attribute(x, target=target)
        else:
            r = lib.LayerLRP(m, m.get_submodule(layer)).attribute(x, target=target, attribute_to_layer_input=to_input)
        outs.append((r[0] if isinstance(r, tuple) else r).detach().numpy())
    return outs


def _close(got, want, dtype):
    assert got.shape == want.shape
    rtol, atol = (1e-10, 1e-10) if dtype == torch.float64 else (2e-5, 2e-5)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * max(1.0, float(np.abs(want).max())))


def _parse_ops(line):
    words = line.split(": ", 1)[1].split()
    return {words[i]: int(words[i + 1][1:]) for i in range(0, len(words) - 1, 2)}


# ---- the forms of a linear layer ---------------------------------------------------------------------------------

FORMS = [  # (bias, input shape, target, the ops the export has)
    (True, (2, 4), 1, {"Gemm": 2}),
    (False, (2, 4), 1, {"Transpose": 2, "MatMul": 2}),
    (True, (2, 3, 4), (2, 1), {"MatMul": 2, "Add": 2}),
    (False, (2, 3, 4), (2, 1), {"MatMul": 2}),
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("rule1,rule2", [("epsilon", "epsilon"), ("epsilon_0.1", "gamma"), ("gamma", "alpha1_beta0"),
                                         ("gamma_1_zero_bias", "alpha1_beta0_zero_bias"), (None, None)])
@pytest.mark.parametrize("form", range(len(FORMS)), ids=["gemm", "transpose_matmul", "matmul_add", "matmul"])
def test_linear_forms(form, rule1, rule2, dtype):
    bias, shape, target, ops = FORMS[form]
    model = MLP(bias)
    x = _rnd(*shape, seed=1, positive=True)
    got_ops = _parse_ops(next(ln for ln in _export_text(model.to(dtype).eval(), x.to(dtype)).splitlines()
                              if ln.startswith("ops")))
    for op, n in ops.items():
        assert got_ops.get(op) == n, "export of %s: %s" % (FORMS[form], got_ops)
    rules = {k: v for k, v in (("lin1", rule1), ("lin2", rule2)) if v}
    got, want = _both(model, rules, x, target, dtype)
    _close(got, want, dtype)


def _export_text(model, x):
    from cattr._torch import TorchForward

    return TorchForward(model).model_for((x,), None).describe()


@pytest.mark.parametrize("form", range(len(FORMS)), ids=["gemm", "transpose_matmul", "matmul_add", "matmul"])
def test_identity_rule(form):
    bias, shape, target, _ = FORMS[form]
    model = MLP(bias, square=True)
    x = _rnd(*shape, seed=2, positive=True)
    got, want = _both(model, {"lin1": "identity", "lin2": "epsilon"}, x, target, torch.float64)
    _close(got, want, torch.float64)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("rules", [{}, {"conv": "gamma", "fc": "epsilon_0.1", "fc2": "alpha1_beta0"},
                                   {"conv": "alpha1_beta0_zero_bias", "pool": "epsilon_0.1"}],
                         ids=["default", "gamma_eps_ab", "ab_zero_bias"])
def test_conv_relu_maxpool_tanh(bias, rules):
    model = ConvNet(bias)
    x = _rnd(2, 2, 6, 6, seed=3)
    got, want = _both(model, rules, x, 2, torch.float64)
    _close(got, want, torch.float64)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("rule", [None, "gamma", "epsilon_0.1"])
def test_skip_connection(bias, rule):
    model = Skip(bias)
    x = _rnd(2, 3, seed=4, positive=True)
    got, want = _both(model, {"add": rule} if rule else {}, x, 1, torch.float64)
    _close(got, want, torch.float64)


# ---- LayerLRP: the layer's output and input ---------------------------------------------------------------------

@pytest.mark.parametrize("to_input", [False, True], ids=["output", "input"])
@pytest.mark.parametrize("layer", ["lin1", "lin2"])
@pytest.mark.parametrize("form", range(len(FORMS)), ids=["gemm", "transpose_matmul", "matmul_add", "matmul"])
def test_layer_lrp_linear_forms(form, layer, to_input):
    bias, shape, target, _ = FORMS[form]
    model = MLP(bias)
    x = _rnd(*shape, seed=5, positive=True)
    got, want = _both(model, {"lin1": "gamma", "lin2": "epsilon"}, x, target, torch.float64, layer=layer,
                      to_input=to_input)
    _close(got, want, torch.float64)


@pytest.mark.parametrize("to_input", [False, True], ids=["output", "input"])
@pytest.mark.parametrize("layer", ["conv", "pool", "fc", "fc2"])
def test_layer_lrp_conv(layer, to_input):
    model = ConvNet(False)
    x = _rnd(2, 2, 6, 6, seed=6)
    got, want = _both(model, {"conv": "alpha1_beta0"}, x, 0, torch.float64, layer=layer, to_input=to_input)
    _close(got, want, torch.float64)


def test_layer_lrp_input_is_multiplied():
    """attribute_to_layer_input: the relevance at lin2's input is lin1's output relevance (through the ReLU), the
    gradient there times the input (Captum's test_lrp_simple_attributions, with bias-free Linear layers)."""
    model = MLP(False).eval()
    x = _rnd(1, 4, seed=7, positive=True).float()
    upper = A.LayerLRP(model, model.lin2).attribute(x, target=0, attribute_to_layer_input=True)
    lower = A.LayerLRP(model, model.lin1).attribute(x, target=0)
    np.testing.assert_allclose(upper.numpy(), lower.numpy(), rtol=1e-6)
    assert np.abs(upper.numpy()).sum() > 0


# ---- Captum's SimpleLRPModel (bias-free Linear layers), by rules and as a cattr Model ---------------------------

def _simple():
    from captum.testing.helpers.basic_models import SimpleLRPModel

    return SimpleLRPModel(False).eval(), torch.tensor([[1.0, 2.0, 3.0]])


def test_simple_lrp_model_numbers():
    model, x = _simple()
    np.testing.assert_allclose(A.LRP(model).attribute(x).numpy(), [[18.0, 36.0, 54.0]], rtol=1e-6)
    # the exported model without torch rules: the default rules by op give the same (MatMul with a Transpose'd
    # constant weight is a Linear)
    m = cattr.from_torch(model, x)
    np.testing.assert_allclose(A.LRP(m).attribute(x.numpy()), [[18.0, 36.0, 54.0]], rtol=1e-6)
    # node rules on module paths of the cattr Model: GammaRule as Captum's test_lrp_simple_attributions_GammaRule
    with torch.no_grad():
        model.linear.weight[0][0] = -2
    m = cattr.from_torch(model, x)
    rules = (A.NodeRule("linear", "GammaRule", gamma=1.0), A.NodeRule("relu", "lrp_passthrough_nonlinear"),
             A.NodeRule("linear2", "GammaRule", gamma=0.25))
    np.testing.assert_allclose(A.LRP(m).attribute(x.numpy(), _node_rules=rules), [[28 / 3, 104 / 3, 52]], rtol=1e-5)


def test_rules_stay_and_modes_kept():
    """cattr reads the rules without removing them (Captum deletes `.rule` after a call) and leaves the model's
    modules in the mode they were in."""
    model, x = _simple()
    model.linear.rule = GammaRule()
    A.LRP(model).attribute(x)
    assert isinstance(model.linear.rule, GammaRule)
    assert not any(m.training for m in model.modules())
    before = model(x)
    A.LayerLRP(model, model.linear).attribute(x)
    assert torch.equal(before, model(x))


# ---- errors, as Captum's -----------------------------------------------------------------------------------------

def test_rule_not_a_propagation_rule():
    model = MLP(True)
    model.lin1.rule = 1
    for lib in (A, captum_attr):
        with pytest.raises(TypeError):
            lib.LRP(model)
        with pytest.raises(TypeError):
            lib.LayerLRP(model, model.lin1)


def test_leaf_without_rule():
    """A leaf module with no rule and no default one (here a Sigmoid the forward does not even call)."""
    def model(rule):
        m = MLP(True).eval()
        m.add_module("sigmoid", nn.Sigmoid())
        if rule:
            m.sigmoid.rule = EpsilonRule()
        return m

    x = _rnd(2, 4, seed=8).float()
    for lib in (A, captum_attr):  # (Captum leaves rules behind when it raises: a new model each time)
        with pytest.raises(TypeError, match="no rule"):
            lib.LRP(model(False)).attribute(x, target=0)
    # a rule on it: accepted (it is not called)
    got, want = [lib.LRP(model(True)).attribute(x, target=0).detach().numpy() for lib in (A, captum_attr)]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_repeated_module():
    from captum.testing.helpers.basic_models import BasicModelWithReusedLinear

    model = BasicModelWithReusedLinear().eval()
    for lib in (A, captum_attr):
        with pytest.raises(RuntimeError, match="more than once"):
            lib.LRP(model).attribute(torch.ones(2, 3), target=0)


def test_reused_activation():
    """A Tanh module called twice (torch names the second call's scope tanh_1): pass-through at both calls, as in
    Captum (the plain gradient there would give other numbers)."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin1, self.lin2, self.lin3 = nn.Linear(4, 5), nn.Linear(5, 5, bias=False), nn.Linear(5, 2)
            self.tanh = nn.Tanh()
            with torch.no_grad():
                for k, p in enumerate(self.parameters()):
                    p.copy_(_rnd(*p.shape, seed=40 + k).float())

        def forward(self, x):
            return self.lin3(self.tanh(self.lin2(self.tanh(self.lin1(x)))))

    x = _rnd(3, 4, seed=9, positive=True)
    got, want = _both(Net(), {"lin2": "gamma"}, x, 1, torch.float64)
    _close(got, want, torch.float64)
    lrp = A.LRP(_prepare(Net(), {"lin2": "gamma"}, torch.float64))
    rules = A.LRP._torch_rules(lrp, x, None, {})["_node_rules"]
    assert sorted(r.node for r in rules if r.rule == "lrp_passthrough_nonlinear") == ["tanh", "tanh_1"]
    plain = lrp.attribute(x, target=1, _node_rules=tuple(r for r in rules if r.node != "tanh_1")).numpy()
    assert np.abs(plain - got).max() > 1e-3


def test_unsupported_rule_class():
    class MyRule(EpsilonRule):
        def _manipulate_weights(self, module, inputs, outputs):
            module.weight.data = module.weight.data * 2

    model = MLP(True).eval()
    model.lin1.rule = MyRule()
    with pytest.raises(NotImplementedError, match="MyRule"):
        A.LRP(model).attribute(_rnd(1, 4).float(), target=0)


def test_op_without_rule_is_refused():
    """A cattr Model (default rules by op): LRP refuses a node it has no rule for, naming it and its op."""

    class Sig(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)
            self.act = nn.Sigmoid()

        def forward(self, x):
            return self.act(self.lin(x))

    x = torch.ones(1, 3)
    m = cattr.from_torch(Sig().eval(), x)
    with pytest.raises(RuntimeError, match=r"node '/act/Sigmoid' \(op Sigmoid\)"):
        A.LRP(m).attribute(x.numpy(), target=0)
    with pytest.raises(RuntimeError, match=r"node '/act/Sigmoid' \(op Sigmoid\)"):
        A.LayerLRP(m, "lin").attribute(x.numpy(), target=0)
