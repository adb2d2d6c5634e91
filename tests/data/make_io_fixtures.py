#!/usr/bin/python3
"""make_io_fixtures.py - writes the small .npy / .safetensors fixtures under tests/data/io/ that tests/test_io.c reads.

Run with Debian's python3 (which has numpy 1.24): /usr/bin/python3 tests/data/make_io_fixtures.py
The outputs are committed; the test never runs Python. test_io.c checks the values written here.
"""
import json
import os
import struct

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "io")
os.makedirs(OUT, exist_ok=True)


def save(name, arr):
    np.save(os.path.join(OUT, name), arr)


def write_version(name, arr, version):
    with open(os.path.join(OUT, name), "wb") as f:
        np.lib.format.write_array(f, arr, version=version)


# Native dtypes (saved by cattr byte-identically to these files).
save("f4_2x3.npy", (np.arange(6, dtype="<f4").reshape(2, 3) * 0.5 - 1.0).astype("<f4"))
save("f8_scalar.npy", np.array(3.25, dtype="<f8"))
save("i8_0x3.npy", np.zeros((0, 3), dtype="<i8"))
save("i8_vec.npy", np.array([-5, 0, 7, 2**40], dtype="<i8"))
save("f4_2x1x3.npy", np.array([[[1.5, -2.0, 3.0]], [[0.0, 1e-3, -7.25]]], dtype="<f4"))
# Converted dtypes.
save("i4_vec.npy", np.array([-2147483648, -1, 0, 2147483647], dtype="<i4"))
save("b1_vec.npy", np.array([True, False, True]))
save("u1_vec.npy", np.array([0, 1, 255], dtype="u1"))
save("f2_vec.npy", np.array([1.0, -2.5, 65504.0, 2.0**-24, np.inf], dtype="<f2"))
# Header versions 2.0 and 3.0.
write_version("f8_v2.npy", np.array([[1.0, 2.0], [3.0, 4.0]], dtype="<f8"), (2, 0))
write_version("f4_v3.npy", np.array([0.5, -0.5, 8.0], dtype="<f4"), (3, 0))
# Unsupported layouts.
save("fortran_f4.npy", np.asfortranarray(np.arange(6, dtype="<f4").reshape(2, 3)))
save("be_f8.npy", np.array([1.0, 2.0], dtype=">f8"))

# A safetensors file with the converted dtypes, metadata first, keys deliberately not sorted.
tensors = [
    ("zeta.f16", "F16", np.array([1.0, -2.5, 2.0**-24], dtype="<f2")),
    ("alpha.bf16", "BF16", (np.array([1.0, -3.0, 0.15625], dtype="<f4").view("<u4") >> 16).astype("<u2")),
    ("mid.i32", "I32", np.array([[-7, 8]], dtype="<i4")),
    ("mid.u8", "U8", np.array([200, 3], dtype="u1")),
    ("mid.bool", "BOOL", np.array([True, False], dtype="?")),
    ("beta.f32", "F32", np.array(2.5, dtype="<f4")),
    ("empty.f64", "F64", np.zeros((2, 0), dtype="<f8")),
]
header = {"__metadata__": {"format": "test"}}
data = b""
for name, dt, arr in tensors:
    raw = arr.tobytes()
    header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [len(data), len(data) + len(raw)]}
    data += raw
hj = json.dumps(header).encode()
hj += b" " * ((8 - len(hj) % 8) % 8)
with open(os.path.join(OUT, "mixed.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(hj)) + hj + data)
