"""Every golden Captum case (shared/golden/captum) replayed through the Python API, in float64 against the float64
reference and in float32 against the float32 reference, with the case's tolerances."""
import pytest

import golden

CASES = golden.case_dirs()


@pytest.mark.skipif(not CASES, reason="golden data absent: set CATTR_GOLDEN (default ../shared/golden)")
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", CASES or ["-"])
def test_golden_case(name, dtype):
    try:
        c, T, obj, kw = golden.build_call(name, dtype)
    except golden.Unsupported as e:
        pytest.skip(str(e))
    result = obj.attribute(**kw)
    delta = None
    if kw.get("return_convergence_delta"):
        result, delta = result
    assert golden.structure(result) == c["output_structure"], "returned structure differs from Captum's"
    fails = golden.compare(c, T, result, delta, dtype)
    assert not fails, "; ".join(fails)
