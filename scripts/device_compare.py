#!/usr/bin/env python3
"""cpu against a second device (cuda) on every golden case, for scripts/device_check.sh.

    python3 scripts/device_compare.py CATTR GOLDEN_DIR DEVICE LOG_DIR

Runs `cattr compare --devices cpu,DEVICE` on the captum cases in float64 (limit: max_rel <= 1e-6) and float32
(<= 1e-4) and on the language-model cases in float32 (<= 1e-5). max_rel is max|a - b| / max|a| over a case's
results, so a case whose results are rounding noise (values that cancel to ~1e-16 in float64, or differences of
log-probabilities near float32's resolution) cannot meet a relative limit on any pair of devices. For every case
over its limit, the same comparison is made between the two CPU backends (cpu vs cpu-check: OpenBLAS kernels
against the scalar reference kernels): the case passes only when that spread is over the limit too (the limit is
below what the case can show) and DEVICE is within 10 times of it. Prints a table per method and the verdicts;
exit 1 when a case fails. Standard library only.
"""
import json
import os
import subprocess
import sys


def compare(cattr, paths, devices, dtype, json_path, log_path):
    cmd = [cattr, "compare"] + paths + ["--devices", devices, "--dtype", dtype, "--json", json_path]
    with open(log_path, "w") as log:
        p = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)
    if not os.path.exists(json_path):
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}, no table (see {log_path})")
    with open(json_path) as f:
        return json.load(f)["rows"]


def over(rel, lim):
    return rel < 0 or rel > lim  # -1: infinite or NaN


def judge(name, rows, floor, lim):
    """Prints the per-method table; returns the failing cases."""
    worst, noise, bad = {}, [], []
    for r in rows:
        rel, case, m = r["max_rel"], r["case"], r["method"]
        if over(rel, lim):
            fl = floor.get(case)
            if fl is not None and over(fl, lim) and fl >= 0 and rel <= 10 * fl:
                noise.append(f"{case} {m}: {rel:.1e} (cpu vs cpu-check {fl:.1e})")
                continue
            bad.append(f"{case} {m}: {rel:.1e}" + (f" (cpu vs cpu-check {fl:.1e})" if fl is not None else ""))
        if m not in worst or (worst[m][0] >= 0 and (rel < 0 or rel > worst[m][0])):
            worst[m] = (rel, case)
    print(f"{name}: {len(rows)} cases, {len(worst)} methods, limit {lim:g}: "
          + (f"{len(bad)} FAIL" if bad else "all within (or at the reference backends' own spread)"))
    for m, (rel, case) in sorted(worst.items()):
        print(f"    {m:<36} {rel:9.2e}  {case}")
    if noise:
        print(f"  {name}: over the limit, and so are the two CPU backends on the same case (rounding noise):")
        for n in noise:
            print("    " + n)
    for b in bad:
        print("  FAIL " + b)
    return bad


def main():
    cattr, golden, dev, logs = sys.argv[1:5]
    failed = []
    # captum: every case folder at once; the floor on the cases over the limit
    for dtype, lim in (("float64", 1e-6), ("float32", 1e-4)):
        rows = compare(cattr, [os.path.join(golden, "captum")], f"cpu,{dev}", dtype,
                       os.path.join(logs, f"compare_captum_{dtype}.json"), os.path.join(logs, f"compare_captum_{dtype}.log"))
        hard = sorted({r["case"] for r in rows if over(r["max_rel"], lim)})
        floor = {}
        if hard:
            for r in compare(cattr, [os.path.join(golden, "captum", c) for c in hard], "cpu,cpu-check", dtype,
                             os.path.join(logs, f"floor_captum_{dtype}.json"), os.path.join(logs, f"floor_captum_{dtype}.log")):
                floor[r["case"]] = r["max_rel"]
        failed += judge(f"captum {dtype}", rows, floor, lim)
    # language models: index by index (a subset index of the cases over the limit, beside the original, for the floor)
    lim, rows_all, floor = 1e-5, [], {}
    llm = os.path.join(golden, "llm")
    for index in sorted(f for f in os.listdir(llm) if f.endswith("cases.json")):
        stem = index[:-len(".json")]
        rows = compare(cattr, [os.path.join(llm, index)], f"cpu,{dev}", "float32",
                       os.path.join(logs, f"compare_llm_{stem}.json"), os.path.join(logs, f"compare_llm_{stem}.log"))
        rows_all += rows
        hard = {r["case"] for r in rows if over(r["max_rel"], lim)}
        if not hard:
            continue
        with open(os.path.join(llm, index)) as f:
            doc = json.load(f)
        doc["cases"] = [c for c in doc["cases"] if c.get("id") in hard]
        sub = os.path.join(llm, f"floor_{index}")
        try:
            with open(sub, "w") as f:
                json.dump(doc, f)
        except OSError as e:
            print(f"llm: no cpu vs cpu-check floor for {index} ({e})")
            continue
        try:
            for r in compare(cattr, [sub], "cpu,cpu-check", "float32", os.path.join(logs, f"floor_llm_{stem}.json"),
                             os.path.join(logs, f"floor_llm_{stem}.log")):
                floor[r["case"]] = r["max_rel"]
        finally:
            os.remove(sub)
    failed += judge("llm float32", rows_all, floor, lim)
    print(f"compare: {len(failed)} case(s) failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
