#!/usr/bin/python3
"""Benchmark cattr's perturbation methods against a PyTorch loop doing the same.

Run with Debian's Python (needs numpy, onnx, torch):

    /usr/bin/python3 bench/perturbation_vs_torch.py [--cattr build-dev/cattr]
        [--golden DIR] [--runs 5] [--threads 2]
        [--methods feature-ablation,shapley-value-sampling,kernel-shap] [--json FILE]

Model and data: the golden custom CNN (GOLDEN/captum/custom_cnn__FeatureAblation_default:
model.onnx, tensors.safetensors "input.0" [2,1,10,10], targets from case.json).
Every input element is its own feature (100 features), baseline 0.

* torch: the ONNX graph run by the small torch interpreter of ig_vs_torch.py,
  float32, under torch.no_grad(), one forward per perturbation (Captum's
  default perturbations_per_eval=1):
  - FeatureAblation: 1 forward of the input, then per feature one forward of
    the batch with that element set to 0 in every example (1 + F forwards of
    batch B); attribution = f(x)[target] - f(ablated)[target].
  - ShapleyValueSampling (--svs-samples, 25): numpy permutations; as Captum,
    1 forward of the all-baseline batch, then per permutation F forwards of
    the batch, adding the features one at a time (1 + n*F forwards of batch B);
    attribution = mean over permutations of the marginal output differences.
  - KernelShap (--ks-samples, 200): per example (Captum's Lime loops over a
    batch), n samples drawn as Captum's KernelShap does (number of selected
    features k in 1..F-1 with probability ~ (F-1)/(k(F-k)), then k random
    features; similarity weight 1), one forward of batch 1 per sample, then a
    weighted least squares with intercept via numpy.linalg.lstsq.
* cattr: `cattr explain MODEL --method M --input x.npy --target-file t.npy
  --output out.npy --runs R+1 [--n-samples K] --dtype float32` (cattr batches
  the perturbations itself); its line `time: first=<s> warm_median=<s>` is
  parsed. A method that cattr reports as "not implemented yet" becomes an n/a
  row.

Each side of each method runs in its own fresh subprocess; peak RSS is the
child's ru_maxrss from os.wait4. See bench/README.md.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)
import ig_vs_torch as ig  # noqa: E402  (numpy check, safetensors reader, interpreter, helpers)

np = ig.np
REPO = ig.REPO
CASE = "custom_cnn__FeatureAblation_default"
RESULT_TAG = "RESULT "
METHODS = ("feature-ablation", "shapley-value-sampling", "kernel-shap")
ALIASES = {"fa": "feature-ablation", "featureablation": "feature-ablation",
           "svs": "shapley-value-sampling", "shapleyvaluesampling": "shapley-value-sampling",
           "ks": "kernel-shap", "kernelshap": "kernel-shap"}
SHORT = {"feature-ablation": "FeatureAblation", "shapley-value-sampling": "ShapleyValueSampling",
         "kernel-shap": "KernelShap"}


# --------------------------------------------------------------------------
# torch side (worker process)

def torch_feature_ablation(model, x, targets, n_samples, rng):
    """Captum FeatureAblation, default mask, baseline 0, perturbations_per_eval=1."""
    import torch
    B = x.shape[0]
    rows = torch.arange(B)
    flat = x.reshape(B, -1)
    F = flat.shape[1]
    base = model(x)[rows, targets]
    attr = torch.empty(B, F, dtype=x.dtype)
    for f in range(F):
        xa = flat.clone()
        xa[:, f] = 0.0
        attr[:, f] = base - model(xa.view_as(x))[rows, targets]
    return attr.view_as(x)


def torch_shapley_value_sampling(model, x, targets, n_samples, rng):
    """Captum ShapleyValueSampling, default mask, baseline 0, perturbations_per_eval=1."""
    import torch
    B = x.shape[0]
    rows = torch.arange(B)
    flat = x.reshape(B, -1)
    F = flat.shape[1]
    start = torch.zeros_like(flat)
    initial = model(start.view_as(x))[rows, targets]     # once, as Captum's initial_eval
    attr = torch.zeros(B, F, dtype=x.dtype)
    for _ in range(n_samples):
        perm = rng.permutation(F)
        cur, prev = start, initial
        for f in perm.tolist():
            cur = cur.clone()
            cur[:, f] = flat[:, f]
            out = model(cur.view_as(x))[rows, targets]
            attr[:, f] += out - prev
            prev = out
    return (attr / n_samples).view_as(x)


def torch_kernel_shap(model, x, targets, n_samples, rng):
    """Captum KernelShap (Lime per example), default mask, baseline 0, ppe=1."""
    import torch
    B = x.shape[0]
    flat = x.reshape(B, -1)
    F = flat.shape[1]
    k = np.arange(F, dtype=np.float64)
    probs = np.zeros(F)
    probs[1:] = (F - 1) / (k[1:] * (F - k[1:]))          # Captum: probs[0] = 0
    probs /= probs.sum()
    one_shape = (1,) + tuple(x.shape[1:])
    attr = np.empty((B, F), dtype=np.float64)
    for b in range(B):
        xb = flat[b:b + 1]
        t = int(targets[b])
        Z = np.zeros((n_samples, F), dtype=np.float32)
        y = np.empty(n_samples, dtype=np.float64)
        w = np.ones(n_samples, dtype=np.float64)
        for s in range(n_samples):
            kk = int(rng.choice(F, p=probs))
            Z[s, rng.permutation(F)[:kk]] = 1.0
            if kk == 0 or kk == F:
                w[s] = 1e6                                   # Captum's kernel (never drawn)
            inp = xb * torch.from_numpy(Z[s:s + 1])          # input*mask + 0*(1-mask)
            y[s] = float(model(inp.view(one_shape))[0, t])
        A = np.concatenate([Z.astype(np.float64), np.ones((n_samples, 1))], axis=1)
        sw = np.sqrt(w)
        coef = np.linalg.lstsq(A * sw[:, None], y * sw, rcond=None)[0]
        attr[b] = coef[:F]
    return torch.from_numpy(attr.astype(np.float32)).view_as(x)


TORCH_FNS = {"feature-ablation": torch_feature_ablation,
             "shapley-value-sampling": torch_shapley_value_sampling,
             "kernel-shap": torch_kernel_shap}


def torch_worker(a):
    """Runs in its own process; progress on stderr, one RESULT json line on stdout."""
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

    x = torch.from_numpy(np.load(a._input).astype(np.float32))
    t = torch.from_numpy(np.load(a._targets).astype(np.int64))
    t0 = time.perf_counter()
    forward, _ = ig.build_torch_model(a._model)
    t_setup = time.perf_counter() - t0
    n_fwd = [0]

    def model(inp):
        n_fwd[0] += 1
        return forward(inp)

    fn = TORCH_FNS[a._method]
    rng = np.random.default_rng(a.seed)
    label = f"  torch {a._method}"
    with torch.no_grad():
        pred = forward(x)                                     # like the CLI's prediction pass
        t_pred = time.perf_counter() - t0 - t_setup
        t0 = time.perf_counter()
        attr = fn(model, x, t, a._n_samples, rng)
        t_first = time.perf_counter() - t0
        fwd_per_call = n_fwd[0]
        print(f"{label}: first call {t_first:.3f} s ({fwd_per_call} forwards)", file=sys.stderr,
              flush=True)
        warm, last = [], attr
        for r in range(a.runs):
            t0 = time.perf_counter()
            last = fn(model, x, t, a._n_samples, rng)
            warm.append(time.perf_counter() - t0)
            print(f"{label}: warm {r + 1}/{a.runs} {warm[-1]:.3f} s", file=sys.stderr, flush=True)
    np.save(a._output, attr.numpy())
    np.save(a._output2, last.numpy())
    res = {
        "import_s": t_import, "setup_s": t_setup, "predict_s": t_pred, "first_s": t_first,
        "warm_median_s": statistics.median(warm) if warm else float("nan"),
        "warm_min_s": min(warm) if warm else float("nan"), "warm_s": warm,
        "forwards_per_call": fwd_per_call, "rss_after_import_kb": rss_after_import,
        "threads": torch.get_num_threads(), "torch": torch.__version__,
        "f_x": pred[torch.arange(x.shape[0]), t].tolist(),
        "f_0": forward(torch.zeros_like(x))[torch.arange(x.shape[0]), t].tolist(),
    }
    print(RESULT_TAG + json.dumps(res), flush=True)


# --------------------------------------------------------------------------
# parent side

def run_torch_worker(cmd, env):
    """Like ig.run_measured, but the child's stderr (progress) goes straight through."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as fo:
        p = subprocess.Popen(cmd, stdout=fo, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        out = fo.read().decode("utf-8", "replace")
    return p.returncode, out, wall, ru.ru_maxrss


def corr(a, b):
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.size != b.size or a.size < 2 or np.std(a) == 0 or np.std(b) == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def load_case(case_dir):
    with open(os.path.join(case_dir, "case.json")) as f:
        case = json.load(f)
    tens = ig.read_safetensors(os.path.join(case_dir, "tensors.safetensors"))
    name = case["attribute_args"]["inputs"]["tensors"][0]
    x = tens[name].astype(np.float32)
    tpe = case.get("target_per_example")
    if tpe is None or any(len(v) != 1 for v in tpe):
        raise ValueError(f"{case['name']}: need one scalar target per example")
    targets = np.array([v[0] for v in tpe], dtype=np.int64)
    golden = None
    if case["method"] == "FeatureAblation" and case["attribute_args"].get("feature_mask") is None \
            and case["attribute_args"].get("baselines") is None:
        e = case["expected"][0]
        tol = e["tolerance"]["vs_f32_reference"]
        golden = (tens[e["f32_name"]].astype(np.float64), tol["rtol"], tol["atol"])
    return {"name": case["name"], "model": os.path.join(case_dir, case["model"]["file"]),
            "x": x, "targets": targets, "golden": golden}


def golden_check(attr, golden):
    exp, rtol, atol = golden
    d = float(np.max(np.abs(np.asarray(attr, np.float64).reshape(exp.shape) - exp)))
    return ig.rel_diff(attr, exp), bool(d <= rtol * np.max(np.abs(exp)) + atol)


def run_method(method, c, a, tmp, files, help_txt):
    env = ig.thread_env(a.threads)
    n = {"feature-ablation": None, "shapley-value-sampling": a.svs_samples,
         "kernel-shap": a.ks_samples}[method]
    row = {"method": method, "n_samples": n, "batch": int(c["x"].shape[0]),
           "features": int(c["x"][0].size)}
    stem = os.path.join(tmp, method)

    # torch side
    tout, tout2 = stem + ".torch.npy", stem + ".torch_last.npy"
    cmd = [sys.executable, os.path.abspath(__file__), "--_worker", "--_method", method,
           "--_model", c["model"], "--_input", files["x"], "--_targets", files["t"],
           "--_output", tout, "--_output2", tout2, "--_n_samples", str(n or 0),
           "--runs", str(a.runs), "--threads", str(a.threads), "--seed", str(a.seed)]
    rc, out, wall, rss = run_torch_worker(cmd, env)
    res = None
    for line in out.splitlines():
        if line.startswith(RESULT_TAG):
            res = json.loads(line[len(RESULT_TAG):])
    if rc != 0 or res is None:
        raise RuntimeError(f"torch worker for {method} failed (rc={rc}):\n{out}")
    torch_attr, torch_last = np.load(tout), np.load(tout2)
    row["torch"] = dict(res, wall_s=wall, peak_rss_kb=rss)
    B = c["x"].shape[0]
    completeness = np.array(res["f_x"]) - np.array(res["f_0"])
    if method == "feature-ablation":
        if c["golden"] is not None:
            row["torch_vs_golden_rel"], row["torch_vs_golden_pass"] = golden_check(torch_attr, c["golden"])
    else:
        row["torch_self_corr"] = corr(torch_attr, torch_last)   # two independent draws
        if method == "shapley-value-sampling":                  # sum = f(x) - f(0) per example
            row["torch_efficiency_err"] = float(np.max(np.abs(
                torch_attr.reshape(B, -1).sum(1) - completeness)))

    if a.torch_only:
        return row

    # cattr side
    cout = stem + ".cattr.npy"
    cmd = [a.cattr, "explain", c["model"], "--method", method, "--input", files["x"],
           "--target-file", files["t"], "--output", cout, "--runs", str(a.runs + 1),
           "--dtype", "float32", "--quiet"]
    if n is not None:
        cmd += ["--n-samples", str(n)]
    if "--threads" in help_txt:
        cmd += ["--threads", str(a.threads)]
    print(f"  cattr {method}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    rc, out, err, wall, rss = ig.run_measured(cmd, env)
    m = ig.TIME_RE.search(out) or ig.TIME_RE.search(err)
    row["cattr"] = {"command": cmd, "wall_s": wall, "peak_rss_kb": rss, "rc": rc}
    if rc != 0 or m is None:
        msg = (err.strip() or out.strip()).splitlines()
        msg = msg[-1] if msg else f"rc={rc}, no output"
        row["cattr"]["status"] = "not implemented" if "not implemented" in (out + err) else "failed"
        row["cattr"]["message"] = msg
        print(f"  cattr {method}: {row['cattr']['status']}: {msg}", file=sys.stderr, flush=True)
        return row
    row["cattr"].update(status="ok", first_s=float(m.group(1)), warm_median_s=float(m.group(2)))
    print(f"  cattr {method}: first {row['cattr']['first_s']:.4f} s, "
          f"warm median {row['cattr']['warm_median_s']:.4f} s", file=sys.stderr, flush=True)
    cattr_attr = np.load(cout)
    if method == "feature-ablation":
        row["cattr_vs_torch_rel"] = ig.rel_diff(cattr_attr, torch_attr)
        if c["golden"] is not None:
            row["cattr_vs_golden_rel"], row["cattr_vs_golden_pass"] = golden_check(cattr_attr, c["golden"])
    else:
        row["corr_cattr_torch"] = corr(cattr_attr, torch_attr)
        if method == "shapley-value-sampling":
            row["cattr_efficiency_err"] = float(np.max(np.abs(
                cattr_attr.reshape(B, -1).sum(1) - completeness)))
    return row


def fmt_s(v, w=11):
    return f"{v:>{w}.5f}" if isinstance(v, float) and v == v else f"{'n/a':>{w}}"


def agreement(r):
    if r["method"] == "feature-ablation":
        s = ""
        if "cattr_vs_torch_rel" in r:
            s += f"max|c-t|/max|t| {r['cattr_vs_torch_rel']:.1e}"
        if "torch_vs_golden_rel" in r:
            s += (" " if s else "") + f"golden t {r['torch_vs_golden_rel']:.1e}"
            if "cattr_vs_golden_rel" in r:
                s += f" c {r['cattr_vs_golden_rel']:.1e}"
            ok = r["torch_vs_golden_pass"] and r.get("cattr_vs_golden_pass", True)
            s += " PASS" if ok else " FAIL"
        return s
    s = ""
    if "corr_cattr_torch" in r:
        s += f"corr(c,t) {r['corr_cattr_torch']:.3f} "
    s += f"corr(t,t') {r['torch_self_corr']:.3f}"
    if "torch_efficiency_err" in r:
        s += f" sum-err t {r['torch_efficiency_err']:.0e}"
        if "cattr_efficiency_err" in r:
            s += f" c {r['cattr_efficiency_err']:.0e}"
    return s


def print_table(rows, a):
    print()
    print(f"threads={a.threads} runs={a.runs}  (times in s, RSS in MiB; ratio = torch/cattr, "
          "> 1 means cattr is faster)")
    hdr = (f"{'method':<22}{'n':>5}{'fwd':>6}{'torch warm':>11}{'cattr warm':>11}{'ratio':>8}"
           f"{'torch 1st':>11}{'cattr 1st':>11}{'ratio':>8}{'torch RSS':>10}{'cattr RSS':>10}"
           f"{'proc s t/c':>13}  agreement")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        t = r["torch"]
        c = r.get("cattr", {})
        ok = c.get("status") == "ok"
        cw, cf = (c["warm_median_s"], c["first_s"]) if ok else (None, None)
        rw = f"{t['warm_median_s'] / cw:>8.1f}" if ok and cw > 0 else f"{'n/a':>8}"
        rf = f"{t['first_s'] / cf:>8.1f}" if ok and cf > 0 else f"{'n/a':>8}"
        crss = f"{c['peak_rss_kb'] / 1024:>10.1f}" if ok else f"{'n/a':>10}"
        cwall = f"{c['wall_s']:<6.2f}" if ok else f"{'n/a':<6}"
        print(f"{SHORT[r['method']]:<22}{r['n_samples'] or '-':>5}{t['forwards_per_call']:>6}"
              f"{fmt_s(t['warm_median_s'])}{fmt_s(cw)}{rw}{fmt_s(t['first_s'])}{fmt_s(cf)}{rf}"
              f"{t['peak_rss_kb'] / 1024:>10.1f}{crss}{t['wall_s']:>6.2f}/{cwall}  {agreement(r)}")
        if c and not ok:
            print(f"{'':<22}cattr {c['status']}: {c.get('message', '')}")
    print("n = samples (permutations / KernelShap samples); fwd = torch forward passes per call; "
          "1st = first attribution call (model loaded, one prediction forward done);\n"
          "corr(c,t) = Pearson correlation cattr vs torch; corr(t,t') = torch first vs last call "
          "(independent draws: the sampling-noise floor); sum-err = max|sum(attr) - (f(x)-f(0))|")


def default_cattr():
    for d in ("build-dev", "build"):
        p = os.path.join(REPO, d, "cattr")
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return os.path.join(REPO, "build", "cattr")


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="FeatureAblation / ShapleyValueSampling / KernelShap: cattr vs a PyTorch loop")
    ap.add_argument("--cattr", default=None,
                    help="cattr CLI binary (default: build-dev/cattr if present, else build/cattr)")
    ap.add_argument("--golden", default=os.path.normpath(os.path.join(REPO, "..", "shared", "golden")),
                    help="golden directory (default: ../shared/golden from the repo root)")
    ap.add_argument("--case", default=CASE,
                    help=f"case name under GOLDEN/captum or a case directory (default {CASE})")
    ap.add_argument("--runs", type=int, default=5,
                    help="warm calls per side after the first (default 5); cattr gets --runs N+1")
    ap.add_argument("--threads", type=int, default=2, help="threads per side (default 2)")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help="comma list of " + ", ".join(METHODS) + " (or fa, svs, ks)")
    ap.add_argument("--svs-samples", type=int, default=25,
                    help="ShapleyValueSampling permutations (default 25)")
    ap.add_argument("--ks-samples", type=int, default=200, help="KernelShap samples (default 200)")
    ap.add_argument("--seed", type=int, default=0, help="numpy seed of the torch side (default 0)")
    ap.add_argument("--torch-only", action="store_true", help="skip the cattr side")
    ap.add_argument("--json", metavar="FILE", help="also write all results as JSON")
    ap.add_argument("--keep-tmp", action="store_true", help="keep the temporary .npy files")
    for k in ("--_method", "--_model", "--_input", "--_targets", "--_output", "--_output2"):
        ap.add_argument(k, help=argparse.SUPPRESS)
    ap.add_argument("--_n_samples", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--_worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.runs < 1 or a.threads < 1 or a.svs_samples < 1 or a.ks_samples < 2:
        ap.error("--runs, --threads, --svs-samples must be >= 1, --ks-samples >= 2")

    if a._worker:
        torch_worker(a)
        return 0

    methods = []
    for m in [s.strip() for s in a.methods.split(",") if s.strip()]:
        m = ALIASES.get(m.lower().replace("_", "").replace("-", ""), m) \
            if m not in METHODS else m
        if m not in METHODS:
            ap.error(f"unknown method {m!r}; choose from {', '.join(METHODS)}")
        methods.append(m)

    help_txt = ""
    if not a.torch_only:
        a.cattr = a.cattr or default_cattr()
        if not (os.path.isfile(a.cattr) and os.access(a.cattr, os.X_OK)):
            print(f"error: cattr binary not found or not executable: {a.cattr}\n"
                  "build it first or use --torch-only", file=sys.stderr)
            return 2
        a.cattr = os.path.abspath(a.cattr)
        help_txt = ig.cattr_help(a.cattr)

    d = a.case if os.path.isdir(a.case) else os.path.join(a.golden, "captum", a.case)
    if not os.path.isdir(d):
        print(f"error: case directory not found: {d}", file=sys.stderr)
        return 2
    c = load_case(d)
    print(f"{c['name']}: input {list(c['x'].shape)}, targets {c['targets'].tolist()}, "
          f"{c['x'][0].size} features (one per element), baseline 0; threads {a.threads}, "
          f"runs {a.runs}" + ("" if a.torch_only else f"; cattr {a.cattr}"), flush=True)

    rows = []
    tmp = tempfile.mkdtemp(prefix="cattr_bench_pert_")
    try:
        files = {"x": os.path.join(tmp, "x.npy"), "t": os.path.join(tmp, "targets.npy")}
        np.save(files["x"], c["x"])
        np.save(files["t"], c["targets"])
        for m in methods:
            print(f"{SHORT[m]}:", file=sys.stderr, flush=True)
            rows.append(run_method(m, c, a, tmp, files, help_txt))
    finally:
        if a.keep_tmp:
            print(f"temporary files kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    print_table(rows, a)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"case": c["name"], "threads": a.threads, "runs": a.runs,
                       "svs_samples": a.svs_samples, "ks_samples": a.ks_samples, "seed": a.seed,
                       "cattr": None if a.torch_only else a.cattr, "rows": rows}, f, indent=1)
    rc = 0
    if any(r.get("torch_vs_golden_pass") is False for r in rows):
        print("warning: torch FeatureAblation disagrees with the golden reference", file=sys.stderr)
        rc = 1
    if any(r.get("cattr", {}).get("status") == "failed" for r in rows):
        print("warning: cattr failed for some method (see above)", file=sys.stderr)
        rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
