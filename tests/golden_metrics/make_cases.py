#!/usr/bin/python3
"""Writes the golden cases of Captum's metrics (issue 35 item 5) that `cattr replay tests/golden_metrics` replays:
a small seeded CNN exported to ONNX, its inputs and the perturbations drawn here (numpy, seeded), and Captum 0.8's
numbers in float64 and float32 for

  * infidelity of Saliency's signed attributions (Gaussian perturbations I, perturbed inputs x - I), plain and
    normalised;
  * sensitivity_max of Saliency (absolute values, Captum's default) at perturbed inputs x + U(-r, r).

Each case folder holds case.json (what to run, the tensors' names, the tolerances), model.onnx and
tensors.safetensors. The float32 tolerance is ten times the float32 run's difference from the float64 one (at least
1e-5 of the largest value); the float64 one 1e-9 of the largest value.

    /usr/bin/python3 tests/golden_metrics/make_cases.py     (needs python3-torch and ../shared/captum-0.8)
"""
import json
import os
import shutil
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.environ.get("CATTR_CAPTUM_DIR", os.path.join(os.path.dirname(ROOT), "shared", "captum-0.8")))

from captum.attr import Saliency  # noqa: E402
from captum.metrics import infidelity, sensitivity_max  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3)
        self.pool = torch.nn.MaxPool2d(2)
        self.fc = torch.nn.Linear(4 * 3 * 3, 3)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(torch.relu(self.conv(x))), 1))


def save_safetensors(path, tensors):
    """The safetensors format (a JSON header, then the raw little-endian data)."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        dt = {np.dtype(np.float64): "F64", np.dtype(np.float32): "F32", np.dtype(np.int64): "I64"}[a.dtype]
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def tolerance(e64, e32):
    scale = float(np.abs(e64).max()) or 1.0
    d = float(np.abs(e32.astype(np.float64) - e64).max())
    return {"vs_f64_reference": {"rtol": 1e-9, "atol": 1e-9 * scale},
            "vs_f32_reference": {"rtol": 0.0, "atol": max(10 * d, 1e-5 * scale)}}


def main():
    torch.manual_seed(7)
    net64 = Net().double().eval()
    net32 = Net().eval()
    net32.load_state_dict({k: v.float() for k, v in net64.state_dict().items()})
    rs = np.random.RandomState(11)
    B, n = 3, 5
    x = rs.rand(B, 1, 8, 8)
    target = [0, 2, 1]
    cases = []
    for normalize in (False, True):
        pert = rs.normal(0, 0.05, (B * n, 1, 8, 8))  # rows b * n + s (Captum's repeat_interleave order)
        out = {}
        for tag, net, dt in (("", net64, torch.float64), ("f32.", net32, torch.float32)):
            xt = torch.tensor(x, dtype=dt)
            attr = Saliency(net).attribute(xt, target=target, abs=False)
            p = torch.tensor(pert, dtype=dt)

            def perturb(inputs, p=p):
                return p, inputs - p

            val = infidelity(net, perturb, xt, attr, target=target, n_perturb_samples=n, normalize=normalize)
            out[tag + "input.0"] = xt.numpy()
            out[tag + "attributions.0"] = attr.detach().numpy()
            out[tag + "perturbations.0"] = p.numpy()
            out[tag + "perturbed.0"] = (xt.repeat_interleave(n, 0) - p).numpy()
            out[tag + "expected"] = val.detach().numpy()
        cases.append(("cnn_infidelity%s" % ("_normalize" if normalize else ""), "infidelity",
                      {"n_perturb_samples": n, "normalize": normalize}, out))
    noise = rs.uniform(-0.02, 0.02, (B * n, 1, 8, 8))
    out = {}
    for tag, net, dt in (("", net64, torch.float64), ("f32.", net32, torch.float32)):
        xt = torch.tensor(x, dtype=dt)
        perturbed = xt.repeat_interleave(n, 0) + torch.tensor(noise, dtype=dt)

        def perturb(inputs, perturb_radius=0.02, perturbed=perturbed):
            return perturbed

        val = sensitivity_max(Saliency(net).attribute, xt, perturb_func=perturb, n_perturb_samples=n, target=target)
        out[tag + "input.0"] = xt.numpy()
        out[tag + "perturbed.0"] = perturbed.numpy()
        out[tag + "expected"] = val.detach().numpy()
    cases.append(("cnn_sensitivity_max_saliency", "sensitivity_max",
                  {"n_perturb_samples": n, "norm_ord": "fro", "explanation": {"method": "Saliency", "abs": True}},
                  out))
    for name, metric, args, tensors in cases:
        d = os.path.join(HERE, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        torch.onnx.export(net64.float(), torch.tensor(x, dtype=torch.float32), os.path.join(d, "model.onnx"),
                          input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, opset_version=17)
        net64.double()
        tensors["target"] = np.array(target, dtype=np.int64)
        save_safetensors(os.path.join(d, "tensors.safetensors"), tensors)
        case = {"format_version": 1, "kind": "metric", "name": name, "metric": metric, "inputs": ["input.0"],
                "target": "target", "args": args,
                "tensors": {k: k for k in tensors if not k.startswith("f32.") and k not in ("expected", "target")},
                "expected": {"name": "expected", "f32_name": "f32.expected",
                             "tolerance": tolerance(tensors["expected"], tensors["f32.expected"])},
                "source": "tests/golden_metrics/make_cases.py: Captum 0.8's captum.metrics.%s on Net (seed 7), "
                          "torch %s" % (metric, torch.__version__)}
        with open(os.path.join(d, "case.json"), "w") as f:
            json.dump(case, f, indent=1)
            f.write("\n")
        print("wrote", d)


if __name__ == "__main__":
    main()
