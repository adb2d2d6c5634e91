"""A neuron_selector function reads the layer's value as the layer returned it, even when a later module changes that
tensor in place (ReLU(inplace=True)): the value is copied when the hook sees it, as Captum's hooks do. Before, the
function saw the ReLU'd value and the attributions were wrong without a word."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from cattr import attr as A  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear1 = torch.nn.Linear(3, 4)
        self.relu = torch.nn.ReLU(inplace=True)
        self.linear2 = torch.nn.Linear(4, 2)
        with torch.no_grad():
            self.linear1.weight.copy_(torch.tensor([[1.0, -1.0, 0.5], [0.5, 1.0, -1.0], [-1.0, 0.5, 1.0],
                                                    [1.0, 1.0, 1.0]]))
            self.linear1.bias.copy_(torch.tensor([-30.0, 0.5, 0.0, -1.0]))  # neuron 0 negative: ReLU zeroes it
            self.linear2.weight.fill_(0.25)
            self.linear2.bias.zero_()

    def forward(self, x):
        return self.linear2(self.relu(self.linear1(x)))


def test_selector_function_sees_the_layer_output_before_an_inplace_relu():
    net = Net().eval()
    x = torch.tensor([[1.0, 2.0, 3.0]])
    b = torch.zeros(1, 3)
    by_index = A.NeuronIntegratedGradients(net, net.linear1).attribute(x, (0,), baselines=b)
    by_fn = A.NeuronIntegratedGradients(net, net.linear1).attribute(x, lambda v: v[:, 0], baselines=b)
    # the neuron is linear in x: its IG is w * (x - b) whatever ReLU does after it
    np.testing.assert_allclose(by_index.numpy(), [[1.0, -2.0, 1.5]], rtol=1e-6)
    np.testing.assert_allclose(by_fn.numpy(), by_index.numpy(), rtol=1e-6)
    g = A.NeuronGradient(net, net.linear1).attribute(x, lambda v: v[:, 0:1].sum(1))
    np.testing.assert_allclose(g.numpy(), [[1.0, -1.0, 0.5]], rtol=1e-6)


def test_neuron_conductance_selector_function_matches_the_index():
    """NeuronConductance with a selector function (layer gradients through the selector, times the selected neuron's
    input gradients, summed along the path) gives the native result of the same neuron by index."""
    net = Net().eval()
    x = torch.tensor([[1.0, 2.0, 3.0], [3.0, -1.0, 0.5]])
    for layer, idx, fn in ((net.linear1, (1,), lambda v: v[:, 1]), (net.relu, (3,), lambda v: v[:, 3])):
        for method in ("gausslegendre", "riemann_trapezoid"):
            nc = A.NeuronConductance(net, layer)
            by_index = nc.attribute(x, idx, target=1, n_steps=64, method=method)
            by_fn = nc.attribute(x, fn, target=1, n_steps=64, method=method)
            np.testing.assert_allclose(by_fn.numpy(), by_index.numpy(), rtol=1e-4, atol=1e-5)
            assert np.abs(by_index.numpy()).max() > 0.01
