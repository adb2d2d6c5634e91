#!/usr/bin/python3
"""Captum 0.8's own unit tests against cattr (issue 31): runs them through the pytest plugin captum_plugin.py and
prints a table per test file: collected / pass with Captum / pass with cattr (of those that pass with Captum).

    python3 tests/captum_suite/run.py                 the suite on cattr; Captum's column from recorded.json
    python3 tests/captum_suite/run.py --captum        also run the suite on Captum itself (the baseline)
    python3 tests/captum_suite/run.py --record        run both and write recorded.json (after an improvement)
    python3 tests/captum_suite/run.py --check         exit 1 when fewer tests pass with cattr than recorded.json
                                                      says, naming each test that passed there and fails now
    python3 tests/captum_suite/run.py FILE...         only these test files (paths under Captum's tests/)

The measure is the share of the tests that pass with Captum itself which pass with cattr. Captum's source is read
from CATTR_CAPTUM_DIR (default ../shared/captum-0.8); it needs Debian's python3-torch, python3-parameterized,
python3-sklearn, python3-tqdm and python3-matplotlib. Exit 77 (skipped) when Captum or torch is not there.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CAPTUM = os.environ.get("CATTR_CAPTUM_DIR", os.path.join(os.path.dirname(ROOT), "shared", "captum-0.8"))
RECORDED = os.path.join(HERE, "recorded.json")
DIRS = ["tests/attr", "tests/attr/layer", "tests/attr/neuron", "tests/metrics", "tests/robust", "tests/concept",
        "tests/influence/_core", "tests/influence/_utils"]


def test_files():
    out = []
    for d in DIRS:
        out += sorted(os.path.relpath(p, CAPTUM) for p in glob.glob(os.path.join(CAPTUM, d, "test_*.py")))
    return out


def run(mode, files, jobs_note=""):
    """{nodeid: outcome} of the files on `mode` (cattr or captum), and the seconds it took."""
    with tempfile.TemporaryDirectory(prefix="cattr-captum-") as tmp:
        res = os.path.join(tmp, "results.json")
        env = dict(os.environ)
        env["CATTR_CAPTUM_MODE"] = mode
        env["CATTR_CAPTUM_RESULTS"] = res
        env["CATTR_CAPTUM_DIR"] = CAPTUM
        env["PYTHONPATH"] = os.pathsep.join([HERE, os.path.join(ROOT, "python"), CAPTUM] +
                                            ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env.setdefault("CATTR_LIB", os.path.join(ROOT, os.environ.get("CATTR_BUILD_DIR", "build"), "libcattr.so"))
        env["CATTR_NO_PTH"] = "1"
        # a module that fails to collect (another process holding a port Captum's test_data_parallel binds at
        # import) must not stop the others: it is counted as one failure
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "captum_plugin", "-p", "no:cacheprovider",
               "--continue-on-collection-errors", "--rootdir", CAPTUM, "-o", "python_files=test_*.py", "--tb=no",
               "-rN"] + files
        t0 = time.time()
        p = subprocess.run(cmd, cwd=CAPTUM, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        dt = time.time() - t0
        if not os.path.exists(res):
            sys.stdout.write(p.stdout[-4000:])
            raise SystemExit("captum suite: pytest on %s wrote no results (exit %d)" % (mode, p.returncode))
        with open(res) as f:
            data = json.load(f)
    return data["outcomes"], dt, data.get("messages", {})


def file_of(nodeid):
    return nodeid.split("::", 1)[0]


def table(files, cattr, captum_pass):
    """Prints the table; returns (passing with Captum, of those passing with cattr)."""
    rows, tot = [], [0, 0, 0]
    for fn in files:
        ids = [n for n in cattr if file_of(n) == fn]
        # the tests that pass with Captum, whether or not the cattr run has them (one it lost, by a module that no
        # longer collects or a renamed test, counts as failing)
        base = [n for n in captum_pass if file_of(n) == fn]
        both = [n for n in base if cattr.get(n) == "passed"]
        rows.append((fn, len(ids), len(base), len(both)))
        tot[0] += len(ids)
        tot[1] += len(base)
        tot[2] += len(both)
    w = max(len(r[0]) for r in rows) if rows else 10
    print("%-*s %9s %12s %12s" % (w, "file", "collected", "pass Captum", "pass cattr"))
    for fn, n, b, c in rows:
        print("%-*s %9d %12d %12d" % (w, fn, n, b, c))
    pct = 100.0 * tot[2] / tot[1] if tot[1] else 0.0
    print("%-*s %9d %12d %12d  (%.1f%% of the tests that pass with Captum pass with cattr)" %
          (w, "total", tot[0], tot[1], tot[2], pct))
    return tot[1], tot[2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--captum", action="store_true", help="also run the suite on Captum itself")
    ap.add_argument("--record", action="store_true", help="run both and write recorded.json")
    ap.add_argument("--check", action="store_true", help="exit 1 below the recorded count")
    ap.add_argument("--json", help="write the outcomes of this run to this file")
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("captum suite: skipped: torch is not importable (apt-get install python3-torch)")
        return 77
    for mod, pkg in (("parameterized", "python3-parameterized"), ("sklearn", "python3-sklearn"),
                     ("tqdm", "python3-tqdm"), ("matplotlib", "python3-matplotlib"), ("pytest", "python3-pytest")):
        try:
            __import__(mod)
        except ImportError:
            print("captum suite: skipped: %s is not importable (apt-get install %s)" % (mod, pkg))
            return 77
    if not os.path.isdir(os.path.join(CAPTUM, "captum")):
        print("captum suite: skipped: Captum's source is not at %s (CATTR_CAPTUM_DIR)" % CAPTUM)
        return 77
    files = a.files or test_files()
    rec = {}
    if os.path.exists(RECORDED):
        with open(RECORDED) as f:
            rec = json.load(f)
    if a.captum or a.record or not rec.get("captum_pass"):
        cap, dt, _ = run("captum", files)
        captum_pass = {n for n, o in cap.items() if o == "passed"}
        print("captum suite: Captum itself: %d of %d tests pass (%.0f s)" % (len(captum_pass), len(cap), dt))
    else:
        captum_pass = set(rec["captum_pass"])
    cattr, dt, messages = run("cattr", files)
    print("captum suite: cattr: %d tests run (%.0f s)" % (len(cattr), dt))
    base, good = table(files, cattr, captum_pass)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cattr": cattr, "messages": messages, "captum_pass": sorted(captum_pass)}, f, indent=0,
                      sort_keys=True)
    if a.record:
        with open(RECORDED, "w") as f:
            json.dump({"captum_pass": sorted(captum_pass),
                       "cattr_pass": sorted(n for n, o in cattr.items() if o == "passed" and n in captum_pass),
                       "base": base, "pass": good}, f, indent=0, sort_keys=True)
            f.write("\n")
        print("captum suite: recorded %d of %d in %s" % (good, base, os.path.relpath(RECORDED, ROOT)))
    if a.check and rec:
        lost = sorted(n for n in rec.get("cattr_pass", []) if file_of(n) in files and cattr.get(n) != "passed")
        for n in lost:
            print("captum suite: REGRESSION: %s passed before and %s now" % (n, cattr.get(n, "is missing")))
        want = sum(1 for n in rec.get("cattr_pass", []) if file_of(n) in files)  # recorded, for these files
        if good < want or lost:
            print("captum suite: FAIL: %d pass with cattr, %d recorded" % (good, want))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
