#!/usr/bin/python3
"""The cost of the PyTorch path's weights check (TorchForward re-exports a model whose weights changed): Saliency.attribute
on a small MLP and on ResNet-18 (1 x 3 x 32 x 32), median of 30 warm calls with the check and with it replaced by a
constant, in one run.   /usr/bin/python3 bench/torch_weights_check.py   (OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset)"""
import time, statistics, torch, torchvision, numpy as np
from cattr.attr import Saliency
from cattr import _torch as T
torch.manual_seed(0)
for name, net, x in (("mlp", torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)), torch.randn(2, 16)),
                     ("resnet18", torchvision.models.resnet18(num_classes=10).eval(), torch.rand(1, 3, 32, 32))):
    sal = Saliency(net); sal.attribute(x, target=0)
    def run(n=30):
        ts = []
        for _ in range(n):
            t = time.perf_counter(); sal.attribute(x, target=0); ts.append(time.perf_counter() - t)
        return statistics.median(ts)
    orig = T.TorchForward._weights
    a = run()
    fixed = sal._torch._weights()
    T.TorchForward._weights = lambda self: fixed
    b = run()
    T.TorchForward._weights = orig
    print("%-9s with the weights check %.3f ms, without %.3f ms, ratio %.3f" % (name, a * 1e3, b * 1e3, a / b))
