#!/usr/bin/python3
"""Small attribution calls on a loaded machine: fresh processes with and without a busy process beside them.

A call that takes 0.1 ms alone can take milliseconds when another process keeps a core busy, if a parallel region
waits for a worker thread the scheduler has not run yet. For each case (the golden CNN's and MLP's IG, 20 steps),
this runs `cattr explain ... --runs R` in N fresh processes on a quiet machine, then N more with one process
spinning beside them (a busy loop in a child of this script), and reports per process the first call and the warm
median (the CLI's `time: first=... warm_median=...` line): the medians over the quiet processes, the slowest loaded
process, and their ratios.

    /usr/bin/python3 bench/under_load.py [--cattr build/cattr] [--procs 8] [--runs 30] [--threads T] [--llm] [--json FILE]

--llm adds the language-model path's parallel regions: explain-llm on the golden qwen3-tiny checkpoint
(layer-integrated-gradients, 50 steps, and feature-ablation), same conditions.

OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for every timed command (see bench/README.md).
"""
import argparse
import json
import multiprocessing
import os
import re
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = ("custom_cnn__IntegratedGradients_gausslegendre", "custom_mlp__IntegratedGradients_gausslegendre")


def spin():
    x = 0
    while True:
        x += 1


def env_for(threads):
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def one_process(cattr, case_dir, runs, out, env):
    """(first, warm median) in seconds of one fresh `cattr explain` (or, for an LLM case, explain-llm) process."""
    if case_dir.startswith("llm:"):  # llm:METHOD:CHECKPOINT_DIR
        _, method, ckpt = case_dir.split(":", 2)
        cmd = [cattr, "explain-llm", ckpt, "--prompt", "The capital of France is", "--target", " Paris", "--method",
               method, "--output", out + ".json", "--runs", str(runs), "-q"]
    else:
        t = os.path.join(case_dir, "tensors.safetensors")
        cmd = [cattr, "explain", os.path.join(case_dir, "model.onnx"), "--input", t + ":input.0", "--baseline",
               t + ":baseline.0", "--target", "0", "--steps", "20", "--quadrature", "gausslegendre", "--output", out,
               "--runs", str(runs)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    m = re.search(r"time: first=([0-9.e+-]+) warm_median=([0-9.e+-]+)", r.stdout + r.stderr)
    if r.returncode != 0 or not m:
        sys.exit("cattr failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stderr[-2000:]))
    return float(m.group(1)), float(m.group(2))


def measure(cattr, case_dir, procs, runs, out, env, loaded):
    spinner = None
    if loaded:
        spinner = multiprocessing.Process(target=spin, daemon=True)
        spinner.start()
    try:
        return [one_process(cattr, case_dir, runs, out, env) for _ in range(procs)]
    finally:
        if spinner:
            spinner.terminate()
            spinner.join()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cattr", default=os.path.join(REPO, "build", "cattr"))
    ap.add_argument("--golden", default=os.path.normpath(os.path.join(REPO, "..", "shared", "golden")))
    ap.add_argument("--procs", type=int, default=8, help="fresh processes per condition (default 8)")
    ap.add_argument("--runs", type=int, default=30, help="calls per process (default 30)")
    ap.add_argument("--threads", type=int, default=0, help="OMP_NUM_THREADS (default: unset, all cores)")
    ap.add_argument("--json", default="", help="write the numbers to this file")
    ap.add_argument("--llm", action="store_true", help="also the language-model path: explain-llm on the golden "
                    "qwen3-tiny checkpoint (layer-integrated-gradients, 50 steps, and feature-ablation)")
    a = ap.parse_args()
    env = env_for(a.threads)
    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), "cattr_under_load_%d.npy" % os.getpid())
    rows = []
    print("cores=%d procs=%d runs=%d threads=%s  (times in ms)" % (os.cpu_count(), a.procs, a.runs, a.threads or "all"))
    print("%-46s %10s %10s %12s %12s %8s %8s" % ("case", "quiet 1st", "quiet warm", "loaded 1st*", "loaded warm*",
                                                  "1st x", "warm x"))
    cases = [(c, os.path.join(a.golden, "captum", c)) for c in CASES]
    if a.llm:
        ckpt = os.path.join(a.golden, "llm", "qwen3-tiny")
        cases += [("qwen3-tiny " + m, "llm:%s:%s" % (m, ckpt)) for m in ("layer-integrated-gradients",
                                                                         "feature-ablation")]
    for case, d in cases:
        quiet = measure(a.cattr, d, a.procs, a.runs, out, env, False)
        loaded = measure(a.cattr, d, a.procs, a.runs, out, env, True)
        q1, qw = statistics.median(f for f, _ in quiet), statistics.median(w for _, w in quiet)
        l1, lw = max(f for f, _ in loaded), max(w for _, w in loaded)
        rows.append({"case": case, "quiet_first_ms": q1 * 1e3, "quiet_warm_ms": qw * 1e3,
                     "loaded_first_max_ms": l1 * 1e3, "loaded_warm_max_ms": lw * 1e3,
                     "loaded_first": [f * 1e3 for f, _ in loaded], "loaded_warm": [w * 1e3 for _, w in loaded]})
        print("%-46s %10.3f %10.3f %12.3f %12.3f %8.1f %8.1f" % (case, q1 * 1e3, qw * 1e3, l1 * 1e3, lw * 1e3,
                                                                l1 / q1, lw / qw))
    print("* the slowest of the loaded processes; quiet: the median process. x: loaded / quiet")
    for f in (out, out + ".json"):
        if os.path.exists(f):
            os.remove(f)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
