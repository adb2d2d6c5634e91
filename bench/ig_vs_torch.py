#!/usr/bin/python3
"""Benchmark cattr's Integrated Gradients against PyTorch autograd doing the same.

Run with Debian's Python (needs numpy, onnx, torch):

    /usr/bin/python3 bench/ig_vs_torch.py [--cattr build/cattr] [--golden DIR]
        [--runs 20] [--threads 2] [--torch-only]

For each golden case (default: the custom CNN and MLP Gauss-Legendre IG cases)
both sides run in their own fresh subprocess, so that the peak RSS of each can
be read from the kernel (os.wait4 -> ru_maxrss of exactly that child):

* torch: the ONNX graph is interpreted with torch.nn.functional (small
  interpreter below), float32, torch.set_num_threads(T); IG is batched the way
  Captum does it: all scaled inputs in one step-major batch, one forward, one
  autograd.grad of the sum of the target-selected outputs, gradients times the
  quadrature weights (float32), summed over steps, times (x - baseline).
* cattr: `cattr explain MODEL --method integrated-gradients --input x.npy
  --target T --steps N --quadrature Q --dtype float32 --output out.npy
  --runs R`, with OMP_NUM_THREADS / OPENBLAS_NUM_THREADS = T; its line
  `time: first=<s> warm_median=<s>` is parsed.

See bench/README.md.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
except ImportError:  # pragma: no cover
    sys.exit("numpy missing: run this script with /usr/bin/python3 (Debian's Python)")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CASES = ("custom_cnn__IntegratedGradients_gausslegendre",
                 "custom_mlp__IntegratedGradients_gausslegendre")
RESULT_TAG = "RESULT "


# --------------------------------------------------------------------------
# helpers shared by both processes

def read_safetensors(path):
    """Minimal safetensors reader (F32/F64/I64/...) -> dict name -> ndarray."""
    dtypes = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8",
              "I32": "<i4", "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        arr = np.frombuffer(data[b:e], dtype=dtypes[info["dtype"]])
        out[name] = arr.reshape(info["shape"]).copy()
    return out


def quadrature(method, n):
    """(alphas, step_sizes) as Captum's approximation_parameters builds them.

    Captum's riemann_* alphas come from torch.linspace in float32; here they
    are float64, so prefer the golden file's quad.* tensors when present.
    """
    if method == "gausslegendre":
        x, w = np.polynomial.legendre.leggauss(n)
        return [float(v) for v in 0.5 * (1.0 + x)], [float(v) for v in 0.5 * w]
    kinds = {"riemann_left": (0.0, 1.0 - 1.0 / n), "riemann_right": (1.0 / n, 1.0),
             "riemann_middle": (1.0 / (2 * n), 1.0 - 1.0 / (2 * n)),
             "riemann_trapezoid": (0.0, 1.0)}
    if method not in kinds:
        raise ValueError(f"unknown quadrature {method}")
    if n < 2:
        raise ValueError("Riemann quadrature needs n_steps > 1 (as in Captum)")
    alphas = [float(v) for v in np.linspace(*kinds[method], n)]
    if method == "riemann_trapezoid":
        steps = [1.0 / (n - 1)] * n
        steps[0] /= 2
        steps[-1] /= 2
    else:
        steps = [1.0 / n] * n
    return alphas, steps


# --------------------------------------------------------------------------
# torch side (only imported inside the worker process)

def build_torch_model(onnx_path, device="cpu"):
    """Tiny ONNX interpreter: returns a callable x -> first graph output (weights on `device`)."""
    import onnx
    import onnx.numpy_helper
    import torch
    import torch.nn.functional as F

    m = onnx.load(onnx_path)
    g = m.graph
    consts = {}
    for init in g.initializer:
        a = onnx.numpy_helper.to_array(init)
        consts[init.name] = torch.from_numpy(np.array(a, copy=True)).to(device)
    inputs = [i.name for i in g.input if i.name not in consts]
    if len(inputs) != 1:
        raise NotImplementedError(f"need exactly one graph input, got {inputs}")
    in_name = inputs[0]
    out_name = g.output[0].name
    nodes = []
    for n in g.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        nodes.append((n.op_type, list(n.input), list(n.output), attrs))

    def pads_for(x, attrs, k, strides, dil):
        nd = len(k)
        auto = attrs.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        if auto in ("NOTSET", ""):
            return list(attrs.get("pads", [0] * (2 * nd)))
        if auto == "VALID":
            return [0] * (2 * nd)
        pb, pe = [], []
        for i in range(nd):
            size = x.shape[2 + i]
            outsz = -(-size // strides[i])
            tot = max(0, (outsz - 1) * strides[i] + (k[i] - 1) * dil[i] + 1 - size)
            lo = tot // 2 if auto == "SAME_UPPER" else tot - tot // 2
            pb.append(lo)
            pe.append(tot - lo)
        return pb + pe

    def explicit_pad(x, pads, value):
        nd = len(pads) // 2
        if pads[:nd] == pads[nd:]:
            return x, list(pads[:nd])
        fp = []
        for i in reversed(range(nd)):
            fp += [pads[i], pads[nd + i]]
        return F.pad(x, fp, value=value), [0] * nd

    def conv(x, w, b, a):
        nd = w.dim() - 2
        k = list(a.get("kernel_shape", w.shape[2:]))
        s = list(a.get("strides", [1] * nd))
        d = list(a.get("dilations", [1] * nd))
        x, p = explicit_pad(x, pads_for(x, a, k, s, d), 0.0)
        fn = (F.conv1d, F.conv2d, F.conv3d)[nd - 1]
        return fn(x, w, b, stride=s, padding=p, dilation=d, groups=a.get("group", 1))

    def maxpool(x, a):
        k = list(a["kernel_shape"])
        nd = len(k)
        s = list(a.get("strides", [1] * nd))
        d = list(a.get("dilations", [1] * nd))
        x, p = explicit_pad(x, pads_for(x, a, k, s, d), float("-inf"))
        fn = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[nd - 1]
        return fn(x, k, s, p, d, ceil_mode=bool(a.get("ceil_mode", 0)))

    def avgpool(x, a):
        k = list(a["kernel_shape"])
        nd = len(k)
        s = list(a.get("strides", [1] * nd))
        x, p = explicit_pad(x, pads_for(x, a, k, s, [1] * nd), 0.0)
        fn = (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)[nd - 1]
        return fn(x, k, s, p, ceil_mode=bool(a.get("ceil_mode", 0)),
                  count_include_pad=bool(a.get("count_include_pad", 0)))

    def gemm(A, B, C, a):
        if a.get("transA", 0):
            A = A.t()
        if a.get("transB", 0):
            B = B.t()
        y = A @ B
        alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
        if alpha != 1.0:
            y = y * alpha
        if C is not None:
            y = y + (C * beta if beta != 1.0 else C)
        return y

    def reshape(x, shape, a):
        shape = [int(v) for v in shape.tolist()]
        if not a.get("allowzero", 0):
            shape = [x.shape[i] if v == 0 else v for i, v in enumerate(shape)]
        return x.reshape(shape)

    def axes_of(ins, a, idx=1):
        if len(ins) > idx and ins[idx] is not None:
            return [int(v) for v in ins[idx].tolist()]
        return a.get("axes")

    def unsqueeze(x, axes):
        r = x.dim() + len(axes)
        for ax in sorted(v % r for v in axes):
            x = x.unsqueeze(ax)
        return x

    def sl(x, ins):
        starts, ends = ins[1].tolist(), ins[2].tolist()
        axes = ins[3].tolist() if len(ins) > 3 and ins[3] is not None else range(len(starts))
        steps = ins[4].tolist() if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
        idx = [slice(None)] * x.dim()
        for st, en, ax, sp in zip(starts, ends, axes, steps):
            if sp < 0:
                raise NotImplementedError("Slice with negative step")
            idx[ax] = slice(st, min(en, x.shape[ax]) if en >= 0 else en, sp)
        return x[tuple(idx)]

    def reduce(fn, x, ins, a):
        axes = axes_of(ins, a)
        keep = bool(a.get("keepdims", 1))
        if not axes:
            if a.get("noop_with_empty_axes", 0):
                return x
            axes = list(range(x.dim()))
        return fn(x, dim=axes, keepdim=keep)

    onnx2torch_dtype = {1: torch.float32, 11: torch.float64, 7: torch.int64,
                        6: torch.int32, 9: torch.bool, 10: torch.float16}

    def run_node(op, ins, a):
        x = ins[0] if ins else None
        if op == "Conv":
            return conv(x, ins[1], ins[2] if len(ins) > 2 else None, a)
        if op == "Relu":
            return torch.relu(x)
        if op == "MaxPool":
            return maxpool(x, a)
        if op == "AveragePool":
            return avgpool(x, a)
        if op == "GlobalAveragePool":
            return x.mean(dim=tuple(range(2, x.dim())), keepdim=True)
        if op == "GlobalMaxPool":
            return x.amax(dim=tuple(range(2, x.dim())), keepdim=True)
        if op == "Flatten":
            ax = a.get("axis", 1) % max(x.dim(), 1)
            lead = 1
            for v in x.shape[:ax]:
                lead *= v
            return x.reshape(lead, -1)
        if op == "Gemm":
            return gemm(x, ins[1], ins[2] if len(ins) > 2 else None, a)
        if op == "MatMul":
            return torch.matmul(x, ins[1])
        if op == "Add":
            return x + ins[1]
        if op == "Sub":
            return x - ins[1]
        if op == "Mul":
            return x * ins[1]
        if op == "Div":
            return x / ins[1]
        if op == "Pow":
            return torch.pow(x, ins[1])
        if op == "Neg":
            return -x
        if op == "Abs":
            return torch.abs(x)
        if op == "Exp":
            return torch.exp(x)
        if op == "Log":
            return torch.log(x)
        if op == "Sqrt":
            return torch.sqrt(x)
        if op == "Erf":
            return torch.erf(x)
        if op == "Sigmoid":
            return torch.sigmoid(x)
        if op == "Tanh":
            return torch.tanh(x)
        if op == "LeakyRelu":
            return F.leaky_relu(x, a.get("alpha", 0.01))
        if op == "Elu":
            return F.elu(x, a.get("alpha", 1.0))
        if op == "Softmax":
            return torch.softmax(x, dim=a.get("axis", -1))
        if op == "LogSoftmax":
            return torch.log_softmax(x, dim=a.get("axis", -1))
        if op in ("Identity", "Dropout"):
            return x
        if op == "Constant":
            if "value" in a:
                return torch.from_numpy(np.array(onnx.numpy_helper.to_array(a["value"]), copy=True)).to(device)
            for key in ("value_float", "value_int"):
                if key in a:
                    return torch.tensor(a[key])
            for key in ("value_floats", "value_ints"):
                if key in a:
                    return torch.tensor(list(a[key]))
            raise NotImplementedError(f"Constant attrs {list(a)}")
        if op == "Reshape":
            return reshape(x, ins[1], a)
        if op == "Transpose":
            perm = a.get("perm", list(reversed(range(x.dim()))))
            return x.permute(*perm)
        if op == "Concat":
            return torch.cat(ins, dim=a["axis"])
        if op == "Unsqueeze":
            return unsqueeze(x, axes_of(ins, a))
        if op == "Squeeze":
            axes = axes_of(ins, a)
            if axes is None:
                return x.squeeze()
            for ax in sorted((v % x.dim() for v in axes), reverse=True):
                x = x.squeeze(ax)
            return x
        if op == "Shape":
            return torch.tensor(list(x.shape), dtype=torch.int64)
        if op == "Gather":
            idx = ins[1]
            return torch.index_select(x, a.get("axis", 0), idx.reshape(-1).long()).reshape(
                x.shape[:a.get("axis", 0) % x.dim()] + idx.shape
                + x.shape[a.get("axis", 0) % x.dim() + 1:])
        if op == "Cast":
            return x.to(onnx2torch_dtype[a["to"]])
        if op == "Slice":
            return sl(x, ins)
        if op == "ReduceSum":
            return reduce(torch.sum, x, ins, a)
        if op == "ReduceMean":
            return reduce(torch.mean, x, ins, a)
        if op == "BatchNormalization":
            return F.batch_norm(x, ins[3], ins[4], ins[1], ins[2], False, 0.0,
                                a.get("epsilon", 1e-5))
        if op == "Clip":
            lo = ins[1] if len(ins) > 1 and ins[1] is not None else None
            hi = ins[2] if len(ins) > 2 and ins[2] is not None else None
            return torch.clamp(x, lo, hi)
        if op == "Max":
            y = ins[0]
            for t in ins[1:]:
                y = torch.maximum(y, t)
            return y
        if op == "Min":
            y = ins[0]
            for t in ins[1:]:
                y = torch.minimum(y, t)
            return y
        if op == "Where":
            return torch.where(ins[0].bool(), ins[1], ins[2])
        if op == "Equal":
            return torch.eq(x, ins[1])
        if op == "Expand":
            shape = [int(v) for v in ins[1].tolist()]
            return x * torch.ones(shape, dtype=x.dtype)
        if op == "ConstantOfShape":
            v = a.get("value")
            val = torch.from_numpy(np.array(onnx.numpy_helper.to_array(v), copy=True)) \
                if v is not None else torch.zeros(1)
            return val.reshape(()).expand([int(s) for s in x.tolist()]).clone()
        raise NotImplementedError(f"ONNX op {op} not supported by the bench interpreter")

    def forward(x):
        env = dict(consts)
        env[in_name] = x
        for op, ins, outs, a in nodes:
            vals = [env[i] if i else None for i in ins]
            y = run_node(op, vals, a)
            env[outs[0]] = y
        return env[out_name]

    return forward, [n[0] for n in nodes]


def torch_ig(model, x, baseline, targets, alphas, step_sizes):
    """Batched IG exactly as Captum: step-major batch, one fwd, one grad."""
    import torch
    n_steps, batch = len(alphas), x.shape[0]
    scaled = torch.cat([baseline + a * (x - baseline) for a in alphas]).requires_grad_()
    out = model(scaled)
    tgt = targets.repeat(n_steps).view(-1, 1)
    sel = torch.gather(out, 1, tgt)
    grads = torch.autograd.grad(sel.sum(), scaled)[0]
    w = torch.tensor(step_sizes).view(n_steps, 1).to(grads.dtype)  # float32, like Captum
    scaled_grads = grads.contiguous().view(n_steps, -1) * w
    total = scaled_grads.reshape((n_steps, batch) + tuple(x.shape[1:])).sum(0)
    return total * (x - baseline)


def torch_worker(a):
    """Runs in its own process; prints one RESULT json line."""
    import resource
    t_start = time.perf_counter()
    import torch
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    t_import = time.perf_counter() - t_start
    rss_after_import = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    x = torch.from_numpy(np.load(a.input).astype(np.float32))
    b = torch.from_numpy(np.load(a.baseline).astype(np.float32))
    t = torch.from_numpy(np.load(a.targets).astype(np.int64))
    q = np.load(a.quad)                 # [2, n_steps] float64: alphas, step sizes
    alphas, step_sizes = [float(v) for v in q[0]], [float(v) for v in q[1]]

    t0 = time.perf_counter()
    model, ops = build_torch_model(a.model)
    t_setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    attr = torch_ig(model, x, b, t, alphas, step_sizes)
    t_first_call = time.perf_counter() - t0
    warm = []
    for _ in range(a.runs):
        t0 = time.perf_counter()
        attr2 = torch_ig(model, x, b, t, alphas, step_sizes)
        warm.append(time.perf_counter() - t0)
    if not torch.equal(attr, attr2):
        print("warning: torch IG not bitwise reproducible between calls", file=sys.stderr)
    np.save(a.output, attr.detach().numpy())
    res = {
        "import_s": t_import, "setup_s": t_setup, "first_call_s": t_first_call,
        "first_s": t_setup + t_first_call,
        "warm_median_s": statistics.median(warm) if warm else float("nan"),
        "warm_min_s": min(warm) if warm else float("nan"),
        "rss_after_import_kb": rss_after_import,
        "threads": torch.get_num_threads(), "torch": torch.__version__, "ops": ops,
    }
    print(RESULT_TAG + json.dumps(res), flush=True)


# --------------------------------------------------------------------------
# parent side

def run_measured(cmd, env):
    """Run cmd in a fresh child; return (rc, stdout, stderr, wall_s, peak_rss_kb)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)  # keep Popen from re-waiting
        fo.seek(0)
        fe.seek(0)
        out = fo.read().decode("utf-8", "replace")
        err = fe.read().decode("utf-8", "replace")
    return p.returncode, out, err, wall, ru.ru_maxrss


def thread_env(threads):
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(threads)
    return env


def load_case(case_dir, baseline_mode, target_mode):
    with open(os.path.join(case_dir, "case.json")) as f:
        case = json.load(f)
    if case["method"] != "IntegratedGradients":
        raise ValueError(f"{case['name']}: method {case['method']} is not IntegratedGradients")
    aa, ad = case["attribute_args"], case["attribute_defaults"]
    steps = aa.get("n_steps", ad.get("n_steps", 50))
    quad = aa.get("method", ad.get("method", "gausslegendre"))
    if aa.get("internal_batch_size", ad.get("internal_batch_size")) is not None:
        raise ValueError("internal_batch_size not supported by this benchmark")
    if aa.get("additional_forward_args") is not None:
        raise ValueError("additional_forward_args not supported by this benchmark")
    tens = read_safetensors(os.path.join(case_dir, "tensors.safetensors"))
    inames = aa["inputs"]["tensors"]
    if len(inames) != 1:
        raise ValueError("only single-input cases are supported")
    x = tens[inames[0]].astype(np.float32)
    batch = x.shape[0]

    # baseline as given to Captum
    bl = aa.get("baselines")
    if bl is None:
        case_baseline = np.zeros_like(x)
    else:
        spec = bl["per_input"][0]
        if "scalar" in spec:
            case_baseline = np.full_like(x, spec["scalar"])
        else:
            case_baseline = np.broadcast_to(tens[spec["tensor"]].astype(np.float32), x.shape).copy()

    tpe = case.get("target_per_example")
    if tpe is None:
        raise ValueError("case without per-example target")
    if any(len(t) != 1 for t in tpe):
        raise ValueError("only targets that index a 2-D output are supported")
    case_targets = np.array([t[0] for t in tpe], dtype=np.int64)
    assert len(case_targets) == batch

    alphas, steps_w = quadrature(quad, steps)
    q = case.get("quadrature")
    if q and q.get("alphas") in tens and q.get("step_sizes") in tens:
        ga, gw = tens[q["alphas"]].astype(np.float64), tens[q["step_sizes"]].astype(np.float64)
        if ga.shape != (steps,) or np.max(np.abs(ga - alphas)) > 1e-6 \
                or np.max(np.abs(gw - steps_w)) > 1e-6:
            raise ValueError(f"{case['name']}: golden quadrature differs from {quad}({steps})")
        alphas, steps_w = [float(v) for v in ga], [float(v) for v in gw]  # Captum's exact values

    baseline = case_baseline if baseline_mode == "case" else np.zeros_like(x)
    if target_mode == "first":
        targets = np.full(batch, case_targets[0], dtype=np.int64)
    else:
        targets = case_targets
    exact_case = (baseline_mode == "case" or not np.any(case_baseline)) and \
        np.array_equal(targets, case_targets)
    expected = None
    if exact_case:
        e = case["expected"][0]
        tol = e["tolerance"]["vs_f32_reference"]
        expected = (tens[e["f32_name"]].astype(np.float64), tol["rtol"], tol["atol"])
    return {
        "name": case["name"], "model": os.path.join(case_dir, case["model"]["file"]),
        "x": x, "baseline": baseline, "targets": targets, "steps": steps, "quadrature": quad,
        "quad": np.array([alphas, steps_w], dtype=np.float64),
        "expected": expected,
    }


def rel_diff(a, ref):
    a = np.asarray(a, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if a.shape != ref.shape:
        if a.size == ref.size:
            a = a.reshape(ref.shape)
        else:
            return float("inf")
    m = np.max(np.abs(ref)) if ref.size else 0.0
    d = np.max(np.abs(a - ref)) if ref.size else 0.0
    return d / m if m > 0 else d


def cattr_help(cattr):
    txt = ""
    for cmd in ([cattr, "explain", "--help"], [cattr, "--help"]):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
            txt += r.stdout + r.stderr
        except (OSError, subprocess.TimeoutExpired):
            pass
    return txt


TIME_RE = re.compile(r"time:\s*first\s*=\s*([0-9.eE+-]+)\s*s?\s+warm_median\s*=\s*([0-9.eE+-]+)")


def run_case(c, a, tmp, help_txt):
    stem = os.path.join(tmp, c["name"])
    xin, bin_, tin = stem + ".x.npy", stem + ".baseline.npy", stem + ".targets.npy"
    qin = stem + ".quad.npy"
    np.save(qin, c["quad"])
    np.save(xin, c["x"])
    np.save(bin_, c["baseline"])
    np.save(tin, c["targets"])
    env = thread_env(a.threads)
    row = {"case": c["name"], "steps": c["steps"], "quadrature": c["quadrature"],
           "batch": int(c["x"].shape[0]), "targets": c["targets"].tolist()}

    # torch side
    tout = stem + ".torch.npy"
    cmd = [sys.executable, os.path.abspath(__file__), "--_worker",
           "--_model", c["model"], "--_input", xin, "--_baseline", bin_, "--_targets", tin,
           "--_quad", qin, "--_output", tout,
           "--runs", str(a.runs), "--threads", str(a.threads)]
    rc, out, err, wall, rss = run_measured(cmd, env)
    res = None
    for line in out.splitlines():
        if line.startswith(RESULT_TAG):
            res = json.loads(line[len(RESULT_TAG):])
    if rc != 0 or res is None:
        raise RuntimeError(f"torch worker failed (rc={rc}):\n{out}\n{err}")
    if err.strip():
        print(err.strip(), file=sys.stderr)
    torch_attr = np.load(tout)
    row["torch"] = dict(res, wall_s=wall, peak_rss_kb=rss)
    if c["expected"] is not None:
        exp, rtol, atol = c["expected"]
        err_abs = float(np.max(np.abs(torch_attr - exp)))
        row["torch_vs_golden_rel"] = rel_diff(torch_attr, exp)
        row["torch_vs_golden_pass"] = bool(err_abs <= rtol * np.max(np.abs(exp)) + atol)

    if a.torch_only:
        return row

    # cattr side
    cout = stem + ".cattr.npy"
    cmd = [a.cattr, "explain", c["model"], "--method", "integrated-gradients",
           "--input", xin, "--target-file", tin, "--steps", str(c["steps"]),
           "--quadrature", c["quadrature"], "--dtype", "float32", "--output", cout,
           "--runs", str(a.runs)]
    if np.any(c["baseline"]):
        cmd += ["--baseline", bin_]
    if "--threads" in help_txt:
        cmd += ["--threads", str(a.threads)]
    rc, out, err, wall, rss = run_measured(cmd, env)
    m = TIME_RE.search(out) or TIME_RE.search(err)
    if rc != 0 or m is None:
        raise RuntimeError(f"cattr failed (rc={rc}) or printed no 'time:' line\n"
                           f"command: {' '.join(cmd)}\nstdout:\n{out}\nstderr:\n{err}")
    row["cattr"] = {"first_s": float(m.group(1)), "warm_median_s": float(m.group(2)),
                    "wall_s": wall, "peak_rss_kb": rss, "command": cmd}
    cattr_attr = np.load(cout)
    row["cattr_vs_torch_rel"] = rel_diff(cattr_attr, torch_attr)
    if c["expected"] is not None:
        row["cattr_vs_golden_rel"] = rel_diff(cattr_attr, c["expected"][0])
    return row


def fmt_ms(s):
    return f"{s * 1e3:9.3f}"


def print_table(rows, a):
    short = lambda n: n.split("__")[0]  # noqa: E731
    print()
    print(f"threads={a.threads} runs={a.runs}  (times in ms, RSS in MiB; ratio = torch/cattr)")
    if a.torch_only:
        hdr = (f"{'model':<12}{'steps':>6}{'batch':>6}{'warm':>10}{'min':>10}{'first':>10}"
               f"{'setup':>10}{'import':>10}{'proc_s':>8}{'RSS':>8}{'RSS0':>8}  vs golden")
        print(hdr)
        print("-" * len(hdr))
        for r in rows:
            t = r["torch"]
            g = ""
            if "torch_vs_golden_rel" in r:
                g = f"{r['torch_vs_golden_rel']:.2e} {'PASS' if r['torch_vs_golden_pass'] else 'FAIL'}"
            print(f"{short(r['case']):<12}{r['steps']:>6}{r['batch']:>6}"
                  f"{fmt_ms(t['warm_median_s']):>10}{fmt_ms(t['warm_min_s']):>10}"
                  f"{fmt_ms(t['first_s']):>10}{fmt_ms(t['setup_s']):>10}{fmt_ms(t['import_s']):>10}"
                  f"{t['wall_s']:>8.2f}{t['peak_rss_kb'] / 1024:>8.1f}"
                  f"{t['rss_after_import_kb'] / 1024:>8.1f}  {g}")
        print("warm = median per-call IG, min = fastest call, first = ONNX load/interpreter "
              "build + first call, RSS = peak RSS of the worker, RSS0 = after `import torch`")
        return
    hdr = (f"{'model':<12}{'torch warm':>11}{'cattr warm':>11}{'ratio':>8}"
           f"{'torch 1st':>11}{'cattr 1st':>11}{'ratio':>8}"
           f"{'torch RSS':>10}{'cattr RSS':>10}{'proc s t/c':>13}  {'max|d|/max|t|':>13}  golden t/c")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        t, c = r["torch"], r["cattr"]
        g = ""
        if "torch_vs_golden_rel" in r:
            g = f"{r['torch_vs_golden_rel']:.1e}/{r.get('cattr_vs_golden_rel', float('nan')):.1e}"
        rw = t["warm_median_s"] / c["warm_median_s"] if c["warm_median_s"] > 0 else float("inf")
        rf = t["first_s"] / c["first_s"] if c["first_s"] > 0 else float("inf")
        print(f"{short(r['case']):<12}{fmt_ms(t['warm_median_s']):>11}{fmt_ms(c['warm_median_s']):>11}"
              f"{rw:>8.2f}{fmt_ms(t['first_s']):>11}{fmt_ms(c['first_s']):>11}{rf:>8.2f}"
              f"{t['peak_rss_kb'] / 1024:>10.1f}{c['peak_rss_kb'] / 1024:>10.1f}"
              f"{t['wall_s']:>6.2f}/{c['wall_s']:<6.2f}  {r['cattr_vs_torch_rel']:>13.2e}  {g}")
    print("torch 1st = ONNX load + interpreter build + first call (import torch excluded, see "
          "proc s = whole-process wall time); cattr 1st as printed by the CLI")


def main(argv=None):
    ap = argparse.ArgumentParser(description="Integrated Gradients: cattr vs PyTorch autograd")
    ap.add_argument("--cattr", default=os.path.join(REPO, "build", "cattr"),
                    help="cattr CLI binary (default: build/cattr)")
    ap.add_argument("--golden", default=os.path.normpath(os.path.join(REPO, "..", "shared", "golden")),
                    help="golden directory (default: ../shared/golden from the repo root)")
    ap.add_argument("--runs", type=int, default=20, help="warm runs per side (default 20)")
    ap.add_argument("--threads", type=int, default=2, help="threads per side (default 2)")
    ap.add_argument("--torch-only", action="store_true", help="skip the cattr side")
    ap.add_argument("--cases", default=",".join(DEFAULT_CASES),
                    help="comma-separated case names under GOLDEN/captum, or case directories")
    ap.add_argument("--baseline-mode", choices=("auto", "case", "zero"), default="auto",
                    help="case: the golden baseline (cattr gets --baseline FILE); zero: zero "
                         "baseline on both sides; auto: case if `cattr explain --help` mentions "
                         "--baseline (always case with --torch-only), else zero")
    ap.add_argument("--target-mode", choices=("case", "first"), default="case",
                    help="case: the golden per-example targets (cattr gets --target a,b,... when "
                         "they differ); first: the first example's target for every example")
    ap.add_argument("--json", metavar="FILE", help="also write all results as JSON")
    ap.add_argument("--keep-tmp", action="store_true", help="keep the temporary .npy files")
    # private: worker mode
    for k in ("--_model", "--_input", "--_baseline", "--_targets", "--_quad", "--_output"):
        ap.add_argument(k, help=argparse.SUPPRESS)
    ap.add_argument("--_worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.runs < 1 or a.threads < 1:
        ap.error("--runs and --threads must be >= 1")

    if a._worker:
        a.model, a.input, a.baseline, a.targets = a._model, a._input, a._baseline, a._targets
        a.quad, a.output = a._quad, a._output
        torch_worker(a)
        return 0

    help_txt = ""
    if not a.torch_only:
        if not (os.path.isfile(a.cattr) and os.access(a.cattr, os.X_OK)):
            print(f"error: cattr binary not found or not executable: {a.cattr}\n"
                  "build it first (cmake -B build && cmake --build build) or use --torch-only",
                  file=sys.stderr)
            return 2
        a.cattr = os.path.abspath(a.cattr)
        help_txt = cattr_help(a.cattr)
    baseline_mode = a.baseline_mode
    if baseline_mode == "auto":
        baseline_mode = "case" if (a.torch_only or "--baseline" in help_txt) else "zero"
    if not a.torch_only and baseline_mode == "zero" and a.baseline_mode == "auto":
        print("note: `cattr explain --help` does not mention --baseline; "
              "using a zero baseline on both sides", file=sys.stderr)

    rows = []
    tmp = tempfile.mkdtemp(prefix="cattr_bench_")
    try:
        for name in [s for s in a.cases.split(",") if s]:
            d = name if os.path.isdir(name) else os.path.join(a.golden, "captum", name)
            if not os.path.isdir(d):
                print(f"error: case directory not found: {d}", file=sys.stderr)
                return 2
            c = load_case(d, baseline_mode, a.target_mode)
            print(f"{c['name']}: batch {c['x'].shape[0]}, {c['steps']} steps {c['quadrature']}, "
                  f"targets {c['targets'].tolist()}, "
                  f"{'golden' if baseline_mode == 'case' else 'zero'} baseline", flush=True)
            rows.append(run_case(c, a, tmp, help_txt))
    finally:
        if a.keep_tmp:
            print(f"temporary files kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    print_table(rows, a)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"threads": a.threads, "runs": a.runs, "rows": rows}, f, indent=1)
    bad = [r["case"] for r in rows if r.get("torch_vs_golden_pass") is False]
    if bad:
        print(f"warning: torch side disagrees with the golden reference for {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
