"""The default memory budget respects the process's limits (issue 30): the available memory is the least of the free
RAM, RLIMIT_AS (`ulimit -v`) minus the process's virtual size, and its cgroup's limit minus its usage. Under
`ulimit -v 2000000` (about 2 GB), IntegratedGradients on 20,000 rows of digits (50 steps) used to plan one 4.9 GB
arena from a quarter of the free RAM and fail; it now runs in chunks that fit."""
import os
import resource
import subprocess

import numpy as np
import pytest

import cattr
from cattr import _lib
from cattr import attr as A

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DIGITS = os.path.join(ROOT, "models", "digits", "digits.onnx")
LIMIT_KB = 2000000  # ulimit -v 2000000
ROWS = 20000


def _cli():
    exe = os.environ.get("CATTR_CLI") or os.path.join(os.path.dirname(os.path.abspath(_lib.lib_path)), "cattr")
    if not os.path.isfile(exe) or not os.access(exe, os.X_OK):
        pytest.skip("no cattr command next to %s (set CATTR_CLI)" % _lib.lib_path)
    return exe


def _sanitized():
    """AddressSanitizer reserves terabytes of virtual memory: no address-space limit can hold it."""
    for name in ("__asan_init", "__tsan_init", "__msan_init"):
        try:
            _lib.lib[name]
            return True
        except AttributeError:
            pass
    return False


def _limit_as():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_KB * 1024, LIMIT_KB * 1024))


def test_ulimit_v_shrinks_the_chunks(tmp_path):
    if _sanitized():
        pytest.skip("a sanitizer build reserves more virtual memory than any ulimit -v")
    exe = _cli()
    one = np.load(os.path.join(ROOT, "models", "digits", "samples", "digit_3.npy"))
    big = tmp_path / "big.npy"
    np.save(big, np.repeat(one, ROWS, axis=0))
    out = tmp_path / "out.npy"
    r = subprocess.run([exe, "explain", DIGITS, "--input", str(big), "--steps", "50", "--output", str(out),
                        "--quiet"], preexec_fn=_limit_as, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, "cattr explain under ulimit -v %d failed: %s" % (LIMIT_KB, r.stderr.strip())
    a = np.load(out)
    assert a.shape == (ROWS, 1, 8, 8) and a.dtype == np.float32
    # every row is digit 3's attribution, what the Python API computes for it alone (target: the predicted class)
    m = cattr.load(DIGITS)
    target = int(np.argmax(m(one)[0]))
    ref = A.IntegratedGradients(m).attribute(one, target=target, n_steps=50)
    np.testing.assert_allclose(a[0], ref[0], rtol=1e-4, atol=1e-6)
    assert (a == a[:1]).all()
