"""A checkpoint's weights in their own dtype: BF16 and F16 matrices stay 16-bit in memory (mapped from the file) and
the kernels widen them exactly as they read them, so a BF16 (F16) checkpoint gives the same bits as the same values
stored as F32, for every method, in float32 and float64, on cpu and cpu-check (and on cuda where there is one)."""
import json
import os
import shutil

import numpy as np
import pytest

import cattr
from cattr import _lib
from cattr import attr as A
from cattr.llm import LLMAttribution, LLMGradientAttribution, TextTokenInput

import golden

SRC = os.path.join(golden.GOLDEN_ROOT, "llm", "qwen3-tiny")
PROMPT, TARGET = "The capital of France is a city", " Paris is"


def _read_st(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in head.items():
        if name == "__metadata__":
            continue
        b, t = e["data_offsets"]
        raw = np.frombuffer(data[b:t], dtype={"BF16": "<u2", "F16": "<f2", "F32": "<f4"}[e["dtype"]])
        if e["dtype"] == "BF16":  # bfloat16 -> float32 is exact: the bits shifted up
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        out[name] = raw.astype(np.float32).reshape(e["shape"])
    return out


def _write_st(path, tensors, dtype, pad=0):
    """tensors as `dtype` (BF16 from float32 values that are bfloat16 already, F16, F32); `pad` bytes of padding
    before the data of the first tensor, so that later tensors can sit at odd offsets in the file."""
    head, blobs, off = {}, [], pad
    if pad:  # an unused byte tensor first (the format has no bytes outside its tensors)
        head["pad"] = {"dtype": "U8", "shape": [pad], "data_offsets": [0, pad]}
    for name, v in tensors.items():
        if dtype == "BF16":
            raw = (v.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
        else:
            raw = v.astype({"F16": "<f2", "F32": "<f4"}[dtype]).tobytes()
        head[name] = {"dtype": dtype, "shape": list(v.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + bytes(pad) + b"".join(blobs))


def _checkpoint(tmp, name, tensors, dtype, pad=0):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        if os.path.isfile(os.path.join(SRC, f)):
            shutil.copy(os.path.join(SRC, f), d)
    _write_st(os.path.join(d, "model.safetensors"), tensors, dtype, pad)
    return d


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    if not os.path.isfile(os.path.join(SRC, "model.safetensors")):
        pytest.skip("shared/golden/llm/qwen3-tiny absent")
    tmp = str(tmp_path_factory.mktemp("stored"))
    w = _read_st(os.path.join(SRC, "model.safetensors"))
    # F16 values: the bf16 weights rounded to half (small enough for half's range)
    h = {k: v.astype(np.float16).astype(np.float32) for k, v in w.items()}
    return {
        "bf16": SRC,
        "f32": _checkpoint(tmp, "f32", w, "F32"),
        "bf16_odd": _checkpoint(tmp, "bf16_odd", w, "BF16", pad=1),  # every tensor at an odd offset: copied
        "f16": _checkpoint(tmp, "f16", h, "F16", pad=2),
        "f16_as_f32": _checkpoint(tmp, "f16_as_f32", h, "F32"),
    }


def _run(path, method, double=False, device=None):
    llm = cattr.load_llm(path, device)
    if double:
        llm = llm.double()
    tok = llm.tokenizer
    inp = TextTokenInput(PROMPT, tok)
    if method == "lig":
        r = LLMGradientAttribution(A.LayerIntegratedGradients(llm, "model.embed_tokens"), tok).attribute(
            inp, target=TARGET, n_steps=12)
    elif method == "gxa":
        r = LLMGradientAttribution(A.LayerGradientXActivation(llm, "model.embed_tokens"), tok).attribute(
            inp, target=TARGET)
    else:
        r = LLMAttribution(A.FeatureAblation(llm), tok).attribute(inp, target=TARGET)
    return np.asarray(r.token_attr), np.asarray(r.seq_attr)


@pytest.mark.parametrize("method", ["lig", "gxa", "fa"])
@pytest.mark.parametrize("double", [False, True], ids=["float32", "float64"])
def test_bf16_checkpoint_equals_its_f32_copy(dirs, method, double):
    a = _run(dirs["bf16"], method, double)
    b = _run(dirs["f32"], method, double)
    assert np.isfinite(a[0]).all() and np.abs(a[0]).max() > 0
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


@pytest.mark.parametrize("method", ["lig", "fa"])
def test_f16_and_unaligned_checkpoints(dirs, method):
    np.testing.assert_array_equal(_run(dirs["f16"], method)[0], _run(dirs["f16_as_f32"], method)[0])
    np.testing.assert_array_equal(_run(dirs["bf16_odd"], method)[0], _run(dirs["bf16"], method)[0])


@pytest.mark.parametrize("device", ["cpu-check", "cuda"])
def test_reference_and_cuda_backends_read_stored_weights(dirs, device):
    """cpu-check and cuda keep the 16-bit matrices as stored too (uploaded as they are, widened by their kernels):
    cpu-check's reference sums give the float32 copy's bits; cuda (a GPU, or the emulated build) its cuBLAS blocks'
    results, within float32 rounding."""
    if device == "cuda" and ("cuda" not in cattr.devices() or _lib.lib.cattr_device_check(b"cuda") != _lib.OK):
        pytest.skip("no usable cuda device in this build or machine")
    for src, ref in (("bf16", "f32"), ("f16", "f16_as_f32")):
        a = _run(dirs[src], "lig", device=device)
        b = _run(dirs[ref], "lig", device=device)
        assert np.isfinite(a[0]).all() and np.abs(a[0]).max() > 0
        if device == "cpu-check":
            np.testing.assert_array_equal(a[0], b[0])
        else:
            np.testing.assert_allclose(a[0], b[0], rtol=1e-5, atol=1e-6 * np.abs(b[0]).max())


def test_checkpoint_too_large_is_refused_before_loading(tmp_path):
    """A checkpoint whose weights cannot fit in the available memory is refused with the numbers before any weight
    is read (a sparse 64 GiB file: nothing is written to disk), never killed by the kernel."""
    d = tmp_path / "huge"
    d.mkdir()
    cfg = json.load(open(os.path.join(SRC, "config.json")))
    cfg.update(vocab_size=1 << 24, hidden_size=2048)
    (d / "config.json").write_text(json.dumps(cfg))
    n = (1 << 24) * 2048 * 2
    h = json.dumps({"model.embed_tokens.weight": {"dtype": "BF16", "shape": [1 << 24, 2048],
                                                  "data_offsets": [0, n]}}).encode()
    h += b" " * (-len(h) % 8)
    st = d / "model.safetensors"
    with open(st, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h)
    os.truncate(st, 8 + len(h) + n)
    with pytest.raises(MemoryError, match=r"does not fit in this machine's memory: its weights "
                       r"take 64\.0 GiB loaded .* GiB is available"):
        cattr.load_llm(str(d))
