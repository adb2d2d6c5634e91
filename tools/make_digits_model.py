#!/usr/bin/python3
"""Build the bundled demo model models/digits/ (small CNN on sklearn's 8x8 digits).

Run from the repository root with Debian's Python (needs torch, scikit-learn,
numpy, onnx):

    /usr/bin/python3 tools/make_digits_model.py [--out models/digits]

Outputs (all under --out):
    digits.onnx            ONNX opset 17, input "input" [B,1,8,8] float32,
                           output "logits" [B,10]; dynamic batch axis
    samples/digit_<c>.npy  first test-split digit of class c (c in 0,3,5,7,9),
                           float32 [1,1,8,8], pixels in [0,1]
    samples/labels.json    file -> label / predicted class, row order of
                           expected_logits.npy
    expected_logits.npy    float32 [5,10] logits of the samples (rows in the
                           order 0,3,5,7,9)
    ig_expected.npy        float64 [1,1,8,8] Integrated Gradients of digit_3
                           (zero baseline, 50-point Gauss-Legendre, target =
                           predicted class), computed with plain autograd on
                           the float64 copy of the model

Everything is deterministic (fixed seeds, fixed split, single thread).
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

SAMPLE_CLASSES = (0, 3, 5, 7, 9)
ALLOWED_OPS = {"Conv", "Relu", "MaxPool", "Flatten", "Gemm"}
IG_STEPS = 50
EPOCHS = 30
BATCH = 32
LR = 1e-2
SPLIT_SEED = 0
TEST_SIZE = 0.25


class DigitsCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.relu2 = nn.ReLU()
        self.pool2 = nn.MaxPool2d(2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(64, 32)
        self.relu3 = nn.ReLU()
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = self.pool1(self.relu1(self.conv1(x)))
        x = self.pool2(self.relu2(self.conv2(x)))
        x = self.flatten(x)
        x = self.relu3(self.fc1(x))
        return self.fc2(x)


def load_split():
    d = load_digits()
    X = (d.data.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = d.target.astype(np.int64)
    Xtr, Xte, ytr, yte = train_test_split(
        X, y, test_size=TEST_SIZE, random_state=SPLIT_SEED, stratify=y)
    return Xtr, Xte, ytr, yte


def train(Xtr, ytr):
    torch.manual_seed(0)
    model = DigitsCNN()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    loss_fn = nn.CrossEntropyLoss()
    Xt, yt = torch.from_numpy(Xtr), torch.from_numpy(ytr)
    gen = torch.Generator().manual_seed(0)
    n = len(Xt)
    for epoch in range(EPOCHS):
        model.train()
        perm = torch.randperm(n, generator=gen)
        total = 0.0
        for i in range(0, n, BATCH):
            idx = perm[i:i + BATCH]
            opt.zero_grad()
            loss = loss_fn(model(Xt[idx]), yt[idx])
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        if epoch % 5 == 4 or epoch == EPOCHS - 1:
            print(f"epoch {epoch + 1:2d}  train loss {total / n:.4f}")
    model.eval()
    return model


def accuracy(model, X, y):
    with torch.no_grad():
        pred = model(torch.from_numpy(X)).argmax(1).numpy()
    return float((pred == y).mean())


def export_onnx(model, path):
    dummy = torch.zeros(1, 1, 8, 8)
    torch.onnx.export(
        model, dummy, path, opset_version=17, do_constant_folding=True,
        input_names=["input"], output_names=["logits"],
        dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    import onnx
    m = onnx.load(path)
    onnx.checker.check_model(m)
    ops = [n.op_type for n in m.graph.node]
    bad = sorted(set(ops) - ALLOWED_OPS)
    assert not bad, f"unexpected ONNX ops {bad} (allowed {sorted(ALLOWED_OPS)})"
    assert [i.name for i in m.graph.input] == ["input"], m.graph.input
    assert [o.name for o in m.graph.output] == ["logits"], m.graph.output
    return ops


def integrated_gradients_f64(model, x, target, n_steps):
    """IG with zero baseline, Gauss-Legendre on [0,1], float64 throughout."""
    m64 = DigitsCNN().double()
    m64.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
    m64.eval()
    nodes, w = np.polynomial.legendre.leggauss(n_steps)
    alphas = 0.5 * (1.0 + nodes)
    weights = 0.5 * w
    x64 = torch.from_numpy(x).double()                      # [1,1,8,8]
    baseline = torch.zeros_like(x64)
    scaled = torch.cat([baseline + a * (x64 - baseline) for a in alphas])
    scaled.requires_grad_(True)
    out = m64(scaled)                                       # [S,10]
    grads = torch.autograd.grad(out[:, target].sum(), scaled)[0]
    total = (grads * torch.from_numpy(weights).view(-1, 1, 1, 1)).sum(0, keepdim=True)
    attr = (x64 - baseline) * total
    # completeness check: sum(attr) ~ f(x) - f(baseline)
    with torch.no_grad():
        delta = attr.sum().item() - (m64(x64)[0, target] - m64(baseline)[0, target]).item()
    return attr.numpy(), delta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out", default=os.path.join(root, "models", "digits"))
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    np.random.seed(0)

    Xtr, Xte, ytr, yte = load_split()
    print(f"train {len(Xtr)}  test {len(Xte)}")
    model = train(Xtr, ytr)
    train_acc = accuracy(model, Xtr, ytr)
    test_acc = accuracy(model, Xte, yte)
    print(f"train accuracy {train_acc:.4f}  test accuracy {test_acc:.4f}")
    assert test_acc > 0.95, f"test accuracy too low: {test_acc}"

    out = args.out
    os.makedirs(os.path.join(out, "samples"), exist_ok=True)
    onnx_path = os.path.join(out, "digits.onnx")
    ops = export_onnx(model, onnx_path)
    print(f"ONNX ops: {ops}")

    samples, labels = [], {"order": [], "files": {}}
    for c in SAMPLE_CLASSES:
        i = int(np.nonzero(yte == c)[0][0])
        x = Xte[i:i + 1].astype(np.float32)                # [1,1,8,8]
        fname = f"digit_{c}.npy"
        np.save(os.path.join(out, "samples", fname), x)
        samples.append(x)
        labels["order"].append(fname)
        labels["files"][fname] = {"label": c, "test_index": i}
    xs = np.concatenate(samples)
    with torch.no_grad():
        logits = model(torch.from_numpy(xs)).numpy().astype(np.float32)
    np.save(os.path.join(out, "expected_logits.npy"), logits)
    for fname, row in zip(labels["order"], logits):
        labels["files"][fname]["predicted"] = int(row.argmax())
    labels["note"] = ("rows of expected_logits.npy follow 'order'; pixels are "
                      "sklearn digits / 16, shape [1,1,8,8] float32")
    with open(os.path.join(out, "samples", "labels.json"), "w") as f:
        json.dump(labels, f, indent=1)
        f.write("\n")

    x3 = samples[SAMPLE_CLASSES.index(3)]
    target = int(logits[SAMPLE_CLASSES.index(3)].argmax())
    attr, delta = integrated_gradients_f64(model, x3, target, IG_STEPS)
    np.save(os.path.join(out, "ig_expected.npy"), attr)
    print(f"IG digit_3: target {target}  sum {attr.sum():.6f}  "
          f"convergence delta {delta:.3e}")

    for fname in labels["order"]:
        info = labels["files"][fname]
        print(f"  {fname}: label {info['label']} predicted {info['predicted']}")
    print(f"ONNX size {os.path.getsize(onnx_path)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
