#!/usr/bin/python3
"""conv_layers.py - cattr's convolution and its input gradient per layer shape, against the sgemm rate (issue 33,
item 8).

Run from the repository root with Debian's Python (numpy and onnx):

    /usr/bin/python3 bench/conv_layers.py [--cattr build/cattr] [--batch 16] [--runs 5] [--nets resnet18,...]
        [--json FILE]

For each distinct convolution of ResNet-18, MobileNet v2 and EfficientNet-B0 at 224x224 (in channels, out channels,
kernel, stride, groups, input size), a one-node model is written (Conv with random weights, then ReduceSum of every
output value of an example, so that each example has one output and its gradient seeds every output value) and
`cattr explain MODEL --method saliency --runs R` times the forward pass and the input gradient on a batch of
--batch examples (the work of --batch IG steps). FLOPs = 2 x (multiply-adds of the convolution) for the forward
pass, the same again for the input gradient; the rate is FLOPs / warm median, and its share of the float32 GEMM
roofline measured in the same run: the higher of OpenBLAS's sgemm at 2048^3 and cattr's own AVX-512F GEMM at 2048^3
(`sgemm_rate 2048 5` and `sgemm_rate 2048 5 own`, built with cattr: the same BLAS and threads; cattr's products run
on its own GEMM where the CPU has AVX-512F). The last column counts
how many times the layer occurs in its network. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for every timed
command (see bench/README.md).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (net, cin, cout, k, stride, groups, input h = w, count in the net)
LAYERS = [
    ("resnet18", 3, 64, 7, 2, 1, 224, 1),
    ("resnet18", 64, 64, 3, 1, 1, 56, 4),
    ("resnet18", 64, 128, 3, 2, 1, 56, 1),
    ("resnet18", 128, 128, 3, 1, 1, 28, 3),
    ("resnet18", 64, 128, 1, 2, 1, 56, 1),
    ("resnet18", 128, 256, 3, 2, 1, 28, 1),
    ("resnet18", 256, 256, 3, 1, 1, 14, 3),
    ("resnet18", 256, 512, 3, 2, 1, 14, 1),
    ("resnet18", 512, 512, 3, 1, 1, 7, 3),
    ("mobilenet_v2", 3, 32, 3, 2, 1, 224, 1),
    ("mobilenet_v2", 32, 32, 3, 1, 32, 112, 1),
    ("mobilenet_v2", 96, 96, 3, 2, 96, 112, 1),
    ("mobilenet_v2", 144, 144, 3, 1, 144, 56, 1),
    ("mobilenet_v2", 144, 24, 1, 1, 1, 56, 1),
    ("mobilenet_v2", 24, 144, 1, 1, 1, 56, 1),
    ("mobilenet_v2", 192, 32, 1, 1, 1, 28, 2),
    ("mobilenet_v2", 384, 64, 1, 1, 1, 14, 3),
    ("mobilenet_v2", 960, 160, 1, 1, 1, 7, 2),
    ("mobilenet_v2", 320, 1280, 1, 1, 1, 7, 1),
    ("efficientnet_b0", 3, 32, 3, 2, 1, 224, 1),
    ("efficientnet_b0", 96, 96, 3, 2, 96, 112, 1),
    ("efficientnet_b0", 144, 144, 5, 2, 144, 56, 1),
    ("efficientnet_b0", 240, 240, 3, 2, 240, 28, 1),
    ("efficientnet_b0", 480, 480, 5, 1, 480, 14, 2),
    ("efficientnet_b0", 672, 672, 5, 2, 672, 14, 1),
    ("efficientnet_b0", 1152, 1152, 5, 1, 1152, 7, 3),
    ("efficientnet_b0", 240, 40, 1, 1, 1, 28, 1),
    ("efficientnet_b0", 672, 112, 1, 1, 1, 14, 3),
    ("efficientnet_b0", 1152, 192, 1, 1, 1, 7, 4),
    ("efficientnet_b0", 320, 1280, 1, 1, 1, 7, 1),
]


def env():
    e = dict(os.environ)
    e.pop("OPENBLAS_CORETYPE", None)
    e.pop("OPENBLAS_L2_SIZE", None)
    return e


def write_model(path, cin, cout, k, stride, groups, hw, rng):
    pad = k // 2
    w = numpy_helper.from_array((rng.standard_normal((cout, cin // groups, k, k)) * 0.05).astype(np.float32), "w")
    axes = numpy_helper.from_array(np.array([1, 2, 3], dtype=np.int64), "axes")
    conv = helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[k, k], strides=[stride, stride],
                            pads=[pad, pad, pad, pad], group=groups)
    red = helper.make_node("ReduceSum", ["c", "axes"], ["y"], keepdims=0)
    g = helper.make_graph([conv, red], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                             ["N", cin, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])], [w, axes])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cattr", default=os.path.join(REPO, "build", "cattr"))
    ap.add_argument("--sgemm", default=None, help="the sgemm_rate binary (default: next to --cattr)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--nets", default="resnet18,mobilenet_v2,efficientnet_b0")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    nets = set(a.nets.split(","))
    sg = a.sgemm or os.path.join(os.path.dirname(a.cattr), "sgemm_rate")
    def gemm_rates():
        rates = []
        for extra in ([], ["own"]):
            r = subprocess.run([sg, "2048", "5"] + extra, capture_output=True, text=True, env=env())
            m = re.search(r"gflops=([0-9.]+)", r.stdout)
            if r.returncode != 0 and not extra:
                sys.exit("sgemm_rate failed: %s" % (r.stderr or r.stdout))
            rates.append(float(m.group(1)) if r.returncode == 0 and m else 0.0)
        return rates

    # the roofline is the best of three measurements (a busy neighbour lowers one, never raises it)
    rates = [max(col) for col in zip(*(gemm_rates() for _ in range(3)))]
    rate = max(rates)
    print("GEMM 2048^3: OpenBLAS %.1f GFLOP/s, cattr's own %s; roofline %.1f GFLOP/s; batch %d, warm median of %d "
          "calls" % (rates[0], "%.1f GFLOP/s" % rates[1] if rates[1] else "not available", rate, a.batch, a.runs))
    print("%-16s %5s %5s %2s %2s %5s %4s %9s %9s %8s %6s %3s" % ("net", "cin", "cout", "k", "s", "group", "hw",
                                                                 "GFLOP", "ms", "GFLOP/s", "roof", "x"))
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for net, cin, cout, k, s, groups, hw, count in LAYERS:
            if net not in nets:
                continue
            model, x, out = os.path.join(d, "m.onnx"), os.path.join(d, "x.npy"), os.path.join(d, "o.npy")
            write_model(model, cin, cout, k, s, groups, hw, rng)
            np.save(x, rng.standard_normal((a.batch, cin, hw, hw)).astype(np.float32))
            cmd = [a.cattr, "explain", model, "--method", "saliency", "--input", x, "--output", out, "--dtype",
                   "float32", "--runs", str(a.runs)]
            r = subprocess.run(cmd, capture_output=True, text=True, env=env())
            m = re.search(r"warm_median=([0-9.e+-]+)", r.stdout + r.stderr)
            if r.returncode != 0 or not m:
                sys.exit("cattr failed: %s\n%s" % (" ".join(cmd), r.stderr[-2000:]))
            t = float(m.group(1))
            ho = (hw + 2 * (k // 2) - k) // s + 1
            flops = 2 * 2 * a.batch * cout * ho * ho * (cin // groups) * k * k  # forward + input gradient
            g = flops / t / 1e9
            rows.append({"net": net, "cin": cin, "cout": cout, "k": k, "stride": s, "groups": groups, "hw": hw,
                         "count": count, "gflop": flops / 1e9, "ms": t * 1e3, "gflops": g, "roof_share": g / rate})
            print("%-16s %5d %5d %2d %2d %5d %4d %9.3f %9.2f %8.1f %5.0f%% %3d" % (
                net, cin, cout, k, s, groups, hw, flops / 1e9, t * 1e3, g, 100 * g / rate, count))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"openblas_gflops": rates[0], "own_gflops": rates[1], "roof_gflops": rate, "batch": a.batch,
                       "layers": rows}, f, indent=1)


if __name__ == "__main__":
    main()
