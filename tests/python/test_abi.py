"""The ctypes mirrors of include/cattr.h's structs (cattr/_lib.py) against the header, as a C compiler lays them out
(skipped without a C compiler), and Ctrl-C during a long call."""
import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import numpy as np
import pytest

import cattr
from cattr import _lib

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
STRUCTS = [("cattr_attr_params", _lib.AttrParams), ("cattr_call", _lib.Call), ("cattr_target", _lib.Target),
           ("cattr_node_rule", _lib.NodeRule), ("cattr_llm_call", _lib.LLMCall),
           ("cattr_context_request", _lib.ContextRequest), ("cattr_context_result", _lib.ContextResult)]


def test_struct_layout_matches_header():
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("no C compiler to lay out include/cattr.h")
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "cattr.h"', "int main(void) {"]
    expect = []
    for cname, py in STRUCTS:
        lines.append('printf("%%zu\\n", sizeof(%s));' % cname)
        expect.append(("sizeof " + cname, ctypes.sizeof(py)))
        for fname, _ in py._fields_:
            lines.append('printf("%%zu\\n", offsetof(%s, %s));' % (cname, fname))
            expect.append(("%s.%s" % (cname, fname), getattr(py, fname).offset))
    lines.append("return 0; }")
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "abi.c"), os.path.join(d, "abi")
        with open(src, "w") as f:
            f.write("\n".join(lines))
        subprocess.run([cc, "-I", os.path.join(ROOT, "include"), src, "-o", exe], check=True)
        got = subprocess.run([exe], check=True, capture_output=True, text=True).stdout.split()
    assert len(got) == len(expect)
    bad = ["%s: C %s, ctypes %d" % (name, g, v) for (name, v), g in zip(expect, got) if int(g) != v]
    assert not bad, "cattr/_lib.py does not mirror include/cattr.h: " + "; ".join(bad)


def test_status_codes():
    for name in dir(_lib):
        if name.startswith("ERR_"):
            assert _lib.lib.cattr_status_string(getattr(_lib, name)) not in (None, b"", b"?")


def test_ctrl_c_cancels_a_long_call():
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    m = cattr.load(os.path.join(ROOT, "models", "digits", "digits.onnx"))
    ig = cattr.attr.IntegratedGradients(m)
    x = np.random.default_rng(0).uniform(size=(64, 1, 8, 8))
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            ig.attribute(x, target=3, n_steps=4000, internal_batch_size=640)
    finally:
        timer.cancel()
    # outside a call, Ctrl-C still raises KeyboardInterrupt (the package's handler passes it on)
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            time.sleep(0.001)
    # the explainer works again after the cancelled call
    a = ig.attribute(x[:2], target=3, n_steps=8)
    assert a.shape == (2, 1, 8, 8)


def test_struct_sizes_checked_at_import():
    # the package refuses a library whose structs differ (_lib._check_layout); here they agree, and an unknown name is 0
    assert _lib.lib.cattr_sizeof(b"cattr_attr_params") == ctypes.sizeof(_lib.AttrParams)
    assert _lib.lib.cattr_sizeof(b"cattr_call") == ctypes.sizeof(_lib.Call)
    assert _lib.lib.cattr_sizeof(b"no_such_struct") == 0
    assert _lib.lib.cattr_sizeof(None) == 0
