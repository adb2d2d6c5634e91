#!/usr/bin/python3
"""architectures.py - the architectures of issue 14 exported from PyTorch (random weights) and run by cattr.

Run from the repository root with Debian's Python (python3-torch, python3-torchvision, python3-numpy):

    /usr/bin/python3 bench/architectures.py [--cattr build/cattr] [--models a,b,...] [--size 64] [--keep DIR]

For each model: torch.onnx.export at opset 14 with constant folding (eval mode, batch 1, dynamic batch), then cattr's
forward pass (`cattr explain --method layer-activation --layer y`: the activation of the output) on one input.
Reports one line per model: whether it loads (else cattr's error, which names the missing op),
max |cattr - torch| / max |torch| of the logits, the same for InputXGradient of output 0 against torch autograd, and
for IntegratedGradients (16 steps, zero baseline, output 0) against Captum's when Captum's source is on PYTHONPATH
(it needs python3-tqdm and python3-matplotlib), in float32 and in float64 (model and input converted on both sides).
--time-ig STEPS adds warm IG times of both; --layers checks that the PyTorch path of every leaf module whose forward
runs resolves as a --layer (issue 14's module paths).
"""
import argparse
import copy
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from torch import nn

try:  # Captum's source, fetched beside (PYTHONPATH), never vendored: the IG column needs it
    from captum.attr import IntegratedGradients
except ImportError:  # pragma: no cover
    IntegratedGradients = None

try:
    import torchvision.models as tvm
except ImportError:  # pragma: no cover
    tvm = None


class LstmClassifier(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn = cell(16, 32, batch_first=True)
        self.head = nn.Linear(32, 5)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(32, 5)

    def forward(self, x):
        return self.head(self.enc(x).mean(dim=1))


def models(size):
    img = torch.randn(1, 3, size, size)
    seq = torch.randn(1, 12, 16)
    out = {}
    if tvm is not None:
        for name in ["resnet18", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "densenet121",
                     "shufflenet_v2_x1_0", "squeezenet1_1", "convnext_tiny", "regnet_y_400mf", "mnasnet0_5",
                     "vgg11", "alexnet", "googlenet"]:
            if hasattr(tvm, name):
                kw = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
                out[name] = (lambda n=name, kw=kw: getattr(tvm, n)(num_classes=10, **kw), img)
        if hasattr(tvm, "vit_b_16"):
            out["vit_b_16"] = (lambda: tvm.vit_b_16(num_classes=10, image_size=224), torch.randn(1, 3, 224, 224))
        if hasattr(tvm, "swin_t"):
            out["swin_t"] = (lambda: tvm.swin_t(num_classes=10), torch.randn(1, 3, 224, 224))
    out["transformer_encoder"] = (Encoder, torch.randn(1, 12, 32))
    out["lstm"] = (lambda: LstmClassifier(nn.LSTM), seq)
    out["gru"] = (lambda: LstmClassifier(nn.GRU), seq)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cattr", default="build/cattr")
    ap.add_argument("--models", default="")
    ap.add_argument("--size", type=int, default=64, help="image side for the CNNs (default 64)")
    ap.add_argument("--keep", default="", help="keep the exported models in DIR")
    ap.add_argument("--default-export", action="store_true",
                    help="export as torch.onnx.export does by default (no dynamic_axes: the batch of 1 is baked into "
                         "the graph's shapes), as most users export")
    ap.add_argument("--time-ig", type=int, default=0, metavar="STEPS",
                    help="also time IntegratedGradients with STEPS steps (batch 1, target 0): cattr's warm median of "
                         "--runs 5 against Captum's (two calls, the second timed, then three more: the median), "
                         "both with OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE unset and on the same threads")
    ap.add_argument("--layers", action="store_true",
                    help="also check that every leaf module's PyTorch path (but BatchNorms folded into convolutions, "
                         "Dropouts and Identities, which the export removes) resolves as a --layer")
    a = ap.parse_args()
    torch.manual_seed(0)
    want = [m for m in a.models.split(",") if m]
    tmp = a.keep or tempfile.mkdtemp(prefix="cattr-arch-")
    os.makedirs(tmp, exist_ok=True)
    print("%-22s %-8s %-10s %-10s %-19s %s" % ("model", "loads", "fwd err", "grad err", "IG err f32 f64", "note"))
    for name, (make, x) in models(a.size).items():
        if want and name not in want:
            continue
        model = make().eval()
        with torch.no_grad():  # zero-initialised heads (ViT's) would make every output 0: nothing to compare
            for prm in model.parameters():
                if prm.dim() > 1 and not prm.any():
                    prm.normal_(0, 0.02)
        path = os.path.join(tmp, name + ".onnx")
        try:
            torch.onnx.export(model, (x,), path, opset_version=14, do_constant_folding=True, input_names=["x"],
                              output_names=["y"],
                              **({} if a.default_export else {"dynamic_axes": {"x": {0: "batch"}, "y": {0: "batch"}}}))
        except Exception as e:  # an exporter failure is the exporter's, not cattr's
            print("%-22s %-8s %-10s export failed: %s" % (name, "-", "-", str(e).splitlines()[0][:80]))
            continue
        with torch.no_grad():
            y = model(x).numpy()
        xp, yp = os.path.join(tmp, name + ".x.npy"), os.path.join(tmp, name + ".y.npy")
        np.save(xp, x.numpy())
        r = subprocess.run([a.cattr, "explain", path, "--method", "layer-activation", "--layer", "y", "--input", xp,
                            "--output", yp, "--quiet"], capture_output=True, text=True)
        if r.returncode != 0:
            msg = (r.stderr.strip().splitlines() or ["?"])[-1]
            print("%-22s %-8s %-10s %s" % (name, "no", "-", msg[:110]))
            continue
        yc = np.load(yp)
        err = float(np.max(np.abs(yc - y)) / max(np.max(np.abs(y)), 1e-30))
        # the input gradient of the first output (InputXGradient: x * dy[0]/dx) against torch autograd
        xg = x.clone().requires_grad_(True)
        (gt,) = torch.autograd.grad(model(xg)[0, 0], xg)
        ixg = (gt * x).numpy()
        gp = os.path.join(tmp, name + ".ixg.npy")
        r = subprocess.run([a.cattr, "explain", path, "--method", "input-x-gradient", "--input", xp, "--target", "0",
                            "--output", gp, "--quiet"], capture_output=True, text=True)
        if r.returncode != 0:
            msg = (r.stderr.strip().splitlines() or ["?"])[-1]
            print("%-22s %-8s %-10.2e %-10s %s" % (name, "yes", err, "-", msg[:100]), flush=True)
            continue
        gerr = float(np.max(np.abs(np.load(gp) - ixg)) / max(np.max(np.abs(ixg)), 1e-30))
        igerr = "-"
        if IntegratedGradients is not None:  # Captum's IG, 16 steps (Gauss-Legendre), zero baseline, target 0
            ref = IntegratedGradients(model).attribute(x, target=0, n_steps=16).detach().numpy()
            ip = os.path.join(tmp, name + ".ig.npy")
            r = subprocess.run([a.cattr, "explain", path, "--method", "integrated-gradients", "--steps", "16",
                                "--input", xp, "--target", "0", "--output", ip, "--quiet"], capture_output=True,
                               text=True)
            igerr = ("%.2e" % (float(np.max(np.abs(np.load(ip) - ref)) / max(np.max(np.abs(ref)), 1e-30)))
                     if r.returncode == 0 else "failed")
            # and in float64 (float32 results can differ at near-ties of max pooling or ReLU, float64 ones cannot)
            ref = IntegratedGradients(copy.deepcopy(model).double()).attribute(x.double(), target=0, n_steps=16)
            ref = ref.detach().numpy()
            r = subprocess.run([a.cattr, "explain", path, "--method", "integrated-gradients", "--steps", "16",
                                "--input", xp, "--target", "0", "--dtype", "float64", "--output", ip, "--quiet"],
                               capture_output=True, text=True)
            igerr += (" %.2e" % (float(np.max(np.abs(np.load(ip) - ref)) / max(np.max(np.abs(ref)), 1e-30)))
                      if r.returncode == 0 else " failed")
        if a.layers:  # every leaf module that the export keeps resolves as a --layer by its PyTorch path
            igerr += "  " + layer_paths(model, x, path)
        timing = ""
        if a.time_ig and IntegratedGradients is not None:
            timing = time_ig(a, model, x, path, xp, tmp, name)
        print("%-22s %-8s %-10.2e %-10.2e %-19s %s" % (name, "yes", err, gerr, igerr, timing), flush=True)


def layer_paths(model, x, path):
    """'layers K/N' (the leaf modules whose path cattr resolves), and the first ones it does not. A leaf counts when
    its forward runs (a forward hook fires: Captum's layer methods hook it the same way; a module whose weights
    another module reads directly, as nn.MultiheadAttention's out_proj or Swin's qkv, has no output of its own) and
    the export keeps it (not a BatchNorm folded into a convolution, a Dropout, StochasticDepth or an Identity, which
    are identities in eval mode)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import cattr  # the package of this source tree

    m = cattr.load(path)
    gone = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.Dropout, nn.Dropout2d, nn.Identity)
    called, hooks = set(), []
    for n, mod in model.named_modules():
        if n and not list(mod.children()):
            hooks.append(mod.register_forward_hook(lambda mod_, i_, o_, n=n: called.add(n)))
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    leaves = [n for n, mod in model.named_modules() if n in called and not isinstance(mod, gone) and
              type(mod).__name__ != "StochasticDepth"]
    missing = []
    for n in leaves:
        try:
            m.resolve(n)
        except Exception:  # ValueError naming the closest modules
            missing.append(n)
    note = "layers %d/%d" % (len(leaves) - len(missing), len(leaves))
    return note + (" (not: %s)" % ", ".join(missing[:3]) if missing else "")


CAPTUM_TIMER = r"""
import statistics, sys, time, numpy as np, torch
from captum.attr import IntegratedGradients
torch.set_num_threads(int(sys.argv[3]))
model = torch.load(sys.argv[1]).eval()
x = torch.from_numpy(np.load(sys.argv[2]))
ig = IntegratedGradients(model)
times = []
for _ in range(5):
    t = time.perf_counter()
    ig.attribute(x, target=0, n_steps=int(sys.argv[4]))
    times.append(time.perf_counter() - t)
print(statistics.median(times[1:]))
"""


def time_ig(a, model, x, path, xp, tmp, name):
    """cattr's and Captum's warm IG times, each in a fresh process with the BLAS variables unset."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    threads = str(os.cpu_count() or 1)
    mp = os.path.join(tmp, name + ".pt")
    torch.save(model, mp)
    r = subprocess.run([sys.executable, "-c", CAPTUM_TIMER, mp, xp, threads, str(a.time_ig)], capture_output=True,
                       text=True, env=env)
    captum = float(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else float("nan")
    env["OMP_NUM_THREADS"] = threads
    r = subprocess.run([a.cattr, "explain", path, "--method", "integrated-gradients", "--steps", str(a.time_ig),
                        "--input", xp, "--target", "0", "--output", os.path.join(tmp, name + ".t.npy"), "--runs", "5"],
                       capture_output=True, text=True, env=env)
    import re
    m = re.search(r"warm_median=([0-9.e+-]+)", r.stdout + r.stderr)
    ours = float(m.group(1)) if m else float("nan")
    return "IG%d: cattr %.3f s, Captum %.3f s, %.2fx" % (a.time_ig, ours, captum, captum / ours)


if __name__ == "__main__":
    sys.exit(main())
