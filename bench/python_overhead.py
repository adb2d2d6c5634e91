#!/usr/bin/env python3
"""Per-call overhead of the Python package (python/cattr) over the C library.

For a few small calls (the digits classifier, batch 1), it times `attribute()` through cattr.attr and the same
explainer run through the bare C API (cattr_explainer_run on tensors made once), and reports the difference: what
the Python layer adds per call (argument conversion, the explainer cache look-up, wrapping each input (no copy when
it is C-contiguous in the compute dtype) and one copy of each result out). The issue's target is under 20 us.

    PYTHONPATH=python CATTR_LIB=build/libcattr.so python3 bench/python_overhead.py [--calls N] [--json FILE]
"""
import argparse
import ctypes
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

import cattr  # noqa: E402
from cattr import _lib  # noqa: E402
from cattr.attr import InputXGradient, IntegratedGradients, Saliency  # noqa: E402
from cattr._core import _TensorList, _ptr_array  # noqa: E402


def best_of(fn, calls, repeats=7):
    """The best of `repeats` rounds: the mean time of one call (seconds) in the fastest round."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls)
    return float(min(times))


def bare(obj, x, target, **kw):
    """A function running obj's cached explainer directly through the C API on tensors made once."""
    obj.attribute(x, target=target, **kw)  # makes and caches the explainer
    (e,) = obj._explainers.values()
    tl = _TensorList()
    xin = tl.make(x)
    inputs = _ptr_array([xin])
    tv = np.array([target], dtype=np.int64)
    t = _lib.Target(_lib.TARGET_INDEX, 1, 0, tv.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)))
    call = _lib.Call()
    call.inputs = inputs
    call.n_inputs = 1
    call.target = ctypes.pointer(t)
    out = (_lib.TensorP * _lib.MAX_OUTPUTS)()
    run, free = _lib.lib.cattr_explainer_run, _lib.lib.cattr_tensor_free

    def fn():
        _lib.check(run(e.h, ctypes.byref(call), out, None))
        free(out[0])
        out[0] = None

    fn.keep = (tl, inputs, tv, t, call, out)
    return fn


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    m = cattr.load(os.path.join(ROOT, "models", "digits", "digits.onnx"))
    x = np.load(os.path.join(ROOT, "models", "digits", "samples", "digit_3.npy")).astype(np.float32)
    rows = []
    for name, obj, kw, calls in [
        ("Saliency", Saliency(m), {}, a.calls),
        ("InputXGradient", InputXGradient(m), {}, a.calls),
        ("IntegratedGradients n_steps=4", IntegratedGradients(m), {"n_steps": 4}, max(1, a.calls // 4)),
    ]:
        fn_c = bare(obj, x, 3, **kw)
        t_c = best_of(fn_c, calls)
        t_py = best_of(lambda: obj.attribute(x, target=3, **kw), calls)
        rows.append({"call": name, "c_us": t_c * 1e6, "python_us": t_py * 1e6, "overhead_us": (t_py - t_c) * 1e6})
    print("%-32s %10s %10s %10s" % ("call (digits, batch 1, float32)", "C us", "Python us", "overhead"))
    for r in rows:
        print("%-32s %10.1f %10.1f %10.1f" % (r["call"], r["c_us"], r["python_us"], r["overhead_us"]))
    worst = max(r["overhead_us"] for r in rows)
    print("largest overhead: %.1f us per call (target: under 20 us)" % worst)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "worst_overhead_us": worst}, f, indent=1)


if __name__ == "__main__":
    main()
