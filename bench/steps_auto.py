#!/usr/bin/python3
"""--steps auto against the seed's 64 Riemann steps: how many Gauss-Legendre steps, and how much time, reach the
convergence delta that 64 riemann_right steps reach (issue 34, item 5).

Run from the repository root with Debian's Python (numpy; python3-torch and python3-torchvision for resnet18):

    /usr/bin/python3 bench/steps_auto.py [--workloads resnet18,qwen3-0.6b,digits] [--cattr build/cattr]

For each workload, each command in its own process (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset):
1. the reference: integrated-gradients (ONNX models) or explain-llm's layer-ig (the Qwen3-0.6B-shape random BF16
   checkpoint of bench/llm_qwen3_shape.py, a 42-token prompt, one target token) at --steps 64 --quadrature
   riemann_right (--ref-quadrature); its accuracy r64 = the largest |delta_b| / sum |attributions of b| over the examples (the
   measure --steps auto stops on);
2. --steps auto --delta-tol r64 (Gauss-Legendre, 8, 16, 32, ... steps): the steps it reached and its time (every try
   counted);
3. Gauss-Legendre at the steps reached, one call: the time had the count been known.
Times are the attribution call (`time: first=` of --runs 1), not the model load.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def run(cmd):
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit("failed (exit %d): %s\n%s" % (r.returncode, " ".join(cmd), r.stderr[-2000:]))
    m = re.search(r"time: first=([0-9.]+)", r.stdout + r.stderr)
    return float(m.group(1)), r.stdout + r.stderr


def worst_onnx(path):
    d = json.load(open(path))
    att = d["attributions"]
    att = att if isinstance(att, list) else [att]
    delta = np.abs(np.asarray(d["convergence_delta"]["data"], np.float64))
    B = len(delta)
    mass = sum(np.abs(np.asarray(a["data"], np.float64)).reshape(B, -1).sum(1) for a in att)
    return float(np.max(delta / mass)), d["args"]["n_steps"]


def worst_llm(path):
    d = json.load(open(path))
    tok = np.abs(np.asarray(d["token_attr"], np.float64))
    delta = np.abs(np.asarray(d["convergence_delta"], np.float64))
    return float(np.max(delta / tok.sum(1))), d["args"]["n_steps"]


def onnx_workload(name, tmp):
    if name == "digits":
        return os.path.join(REPO, "models", "digits", "digits.onnx"), os.path.join(REPO, "tests", "data", "cli",
                                                                                    "batch2.npy")
    import torch
    import torchvision.models as tvm

    torch.manual_seed(0)
    model = tvm.resnet18(weights=None).eval()
    x = torch.rand(1, 3, 224, 224)
    path, xp = os.path.join(tmp, "resnet18.onnx"), os.path.join(tmp, "resnet18.x.npy")
    torch.onnx.export(model, (x,), path, opset_version=14, do_constant_folding=True, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    np.save(xp, x.numpy())
    return path, xp


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cattr", default=os.path.join(REPO, "build", "cattr"))
    ap.add_argument("--workloads", default="digits,resnet18,qwen3-0.6b")
    ap.add_argument("--ref-steps", type=int, default=64)
    ap.add_argument("--ref-quadrature", default="riemann_right",
                    help="riemann_right (default): riemann_trapezoid and riemann_left evaluate the gradient at the "
                    "baseline itself, where a decoder with the zero embedding as its baseline has an all-zero "
                    "residual stream and RMSNorm gradients of 1/sqrt(eps) per layer: inf in float32, as in PyTorch")
    ap.add_argument("--max-steps", type=int, default=256, help="--steps auto's cap (default 256)")
    ap.add_argument("--tokens", type=int, default=42)
    ap.add_argument("--dir", default="/tmp/cattr-qwen3-0.6b-random", help="the 0.6B checkpoint (written once)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="cattr-steps-auto-")
    print("%-12s %-26s %8s %10s %10s %12s %8s" % ("workload", "run", "steps", "time s", "delta/|a|", "vs reference",
                                                  "GL only"))
    for w in [x for x in a.workloads.split(",") if x]:
        if w == "qwen3-0.6b":
            import llm_qwen3_shape as q

            q.SHAPE.clear()
            q.SHAPE.update(q.SHAPES["qwen3-0.6b"])
            q.write_checkpoint(a.dir)
            rng = np.random.default_rng(1)
            V = q.SHAPE["vocab_size"]
            prompt = ",".join(str(int(v)) for v in rng.integers(0, V, a.tokens))
            target = str(int(rng.integers(0, V)))
            base = [a.cattr, "explain-llm", a.dir, "--prompt-ids", prompt, "--target-ids", target, "--runs", "1",
                    "--quiet"]
            worst = worst_llm
        else:
            model, x = onnx_workload(w, tmp)
            base = [a.cattr, "explain", model, "--input", x, "--target", "0" if w == "resnet18" else "3", "--runs",
                    "1", "--quiet"]
            worst = worst_onnx
        out = os.path.join(tmp, w + ".json")
        t_ref, _ = run(base + ["--steps", str(a.ref_steps), "--quadrature", a.ref_quadrature, "--output", out])
        r_ref, _ = worst(out)
        print("%-12s %-26s %8d %10.3f %10.2e %12s %8s" % (w, "%s %d" % (a.ref_quadrature, a.ref_steps), a.ref_steps,
                                                        t_ref, r_ref, "1.00x", ""), flush=True)
        t_auto, _ = run(base + ["--steps", "auto", "--delta-tol", "%.6g" % (r_ref * (1 + 1e-6)), "--max-steps",
                                str(a.max_steps), "--output", out])
        r_auto, n_auto = worst(out)
        t_gl, _ = run(base + ["--steps", str(n_auto), "--output", out])
        reached = "" if r_auto <= r_ref * (1 + 1e-6) else " (not reached)"
        print("%-12s %-26s %8d %10.3f %10.2e %11.2fx %7.2fx%s" % (w, "auto (gausslegendre)", n_auto, t_auto, r_auto,
                                                                 t_ref / t_auto, t_ref / t_gl, reached), flush=True)


if __name__ == "__main__":
    main()
