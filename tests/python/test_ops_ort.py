"""Every mode of the ops cattr loads, against onnxruntime: a table of one-node ONNX models over the attribute values
that change what an op computes (Resize's modes, coordinate transformations, nearest rounding, scales or sizes;
ConvTranspose's strides, pads, output padding, output shape, groups, dilations, auto_pad; Pad's modes; pooling's
ceil mode, count_include_pad, pads and dilations; Conv's auto_pad and groups; the activations' parameters; Softmax's
axis before and after opset 13; reductions' axes and keepdims; Gather, Slice, Split, Einsum, LayerNormalization...),
random inputs, cattr's forward pass against onnxruntime-node's (bench/ort_forward.js). Each case either agrees
(max |cattr - ort| <= 1e-5 * max(1, max |ort|)) or is refused when the model loads with a message that names the
attribute or value: never computed differently.

Needs Debian's python3-onnx (to write the models), node and npm: onnxruntime-node is installed into build/ort on first
use (`npm install --ignore-scripts`, its CPU build ships in the package; CATTR_ORT_NODE names another folder). Skipped
with a message where any of them is missing."""
import itertools
import json
import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx module is not installed (Debian: python3-onnx)")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import cattr  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ORT_VERSION = "1.31.1"
F = TensorProto.FLOAT


def _ort_node():
    mod = os.environ.get("CATTR_ORT_NODE")
    if not shutil.which("node") or (not mod and not shutil.which("npm")):
        pytest.skip("node and npm are needed for onnxruntime-node (Debian: nodejs, npm)")
    prefix = os.path.join(ROOT, "build", "ort")
    mod = mod or os.path.join(prefix, "node_modules", "onnxruntime-node")
    if not os.path.isdir(mod) and not os.environ.get("CATTR_ORT_NODE"):
        r = subprocess.run(["npm", "install", "--loglevel=error", "--ignore-scripts", "--no-audit", "--no-fund", "--prefix",
                            prefix, "onnxruntime-node@" + ORT_VERSION], capture_output=True, text=True)
        if r.returncode:
            pytest.skip("onnxruntime-node could not be installed from npm: " + r.stderr.strip()[-300:])
    r = subprocess.run(["node", "-e", "require(process.argv[1])", mod], capture_output=True, text=True)
    if r.returncode:  # a node too old for its binary, say
        pytest.skip("onnxruntime-node does not load in this node (%s): %s" %
                    (subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip(),
                     r.stderr.strip()[-300:]))
    return mod


# ---- the cases -------------------------------------------------------------------------------------------------

_rng = np.random.default_rng(11)


def rnd(*shape):
    return (2 * _rng.random(shape) - 1).astype(np.float32)


def case(label, op, inputs, attrs=None, consts=None, opset=17, n_out=1):
    """A one-node model: `inputs` the graph inputs [(name, array)], `consts` initializers [(name, array)] (the node's
    inputs in order are the names of both, as `order` gives: graph inputs first unless a name is listed in
    attrs['__order'])."""
    attrs = dict(attrs or {})
    order = attrs.pop("__order", None) or [n for n, _ in inputs] + [n for n, _ in (consts or [])]
    node = helper.make_node(op, order, ["y%d" % k for k in range(n_out)], name="/op/" + op, **attrs)
    g = helper.make_graph([node], label, [helper.make_tensor_value_info(n, F if a.dtype == np.float32 else
                                                                        TensorProto.INT64, list(a.shape))
                                          for n, a in inputs],
                          [helper.make_tensor_value_info("y%d" % k, F, None) for k in range(n_out)],
                          initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in (consts or [])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return label, m, inputs


def f32(*v):
    return np.array(v, np.float32)


def i64(*v):
    return np.array(v, np.int64)


def cases():
    out = []
    x4 = rnd(1, 2, 5, 7)
    # Resize: modes x coordinate transformations x nearest rounding, scales up and down, sizes
    coords = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric",
              "tf_crop_and_resize"]
    for mode, ct in itertools.product(["nearest", "linear", "cubic"], coords):
        for nm in (["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"] if mode == "nearest" else [None]):
            for how, val in (("up", f32(1, 1, 2, 1.5)), ("down", f32(1, 1, 0.6, 0.5)), ("sizes", i64(1, 2, 9, 4))):
                at = {"mode": mode, "coordinate_transformation_mode": ct}
                if nm:
                    at["nearest_mode"] = nm
                roi = f32(0, 0, 0.1, 0.2, 1, 1, 0.9, 0.8) if ct == "tf_crop_and_resize" else f32()
                consts = [("roi", roi), ("scales", val if how != "sizes" else f32())]
                if how == "sizes":
                    consts.append(("sizes", val))
                out.append(case("Resize %s %s %s %s" % (mode, ct, nm or "", how), "Resize", [("x", x4)], at, consts,
                                opset=13 if ct != "half_pixel_symmetric" else 18))
    # ConvTranspose
    for stride, pad, opad, group, dil in itertools.product([1, 2], [0, 1], [0, 1], [1, 2], [1, 2]):
        if opad >= max(stride, dil):
            continue
        w = rnd(4, 6 // group, 3, 2)
        out.append(case("ConvTranspose s%d p%d op%d g%d d%d" % (stride, pad, opad, group, dil), "ConvTranspose",
                        [("x", rnd(1, 4, 4, 5))], {"strides": [stride, stride], "pads": [pad, 0, pad, 1],
                                                   "output_padding": [opad, opad], "group": group,
                                                   "dilations": [dil, dil]}, [("w", w), ("b", rnd(6))]))
    for ap in ["SAME_UPPER", "SAME_LOWER", "VALID"]:
        out.append(case("ConvTranspose auto_pad " + ap, "ConvTranspose", [("x", rnd(1, 4, 4, 5))],
                        {"strides": [2, 2], "auto_pad": ap}, [("w", rnd(4, 3, 3, 3))]))
    out.append(case("ConvTranspose output_shape", "ConvTranspose", [("x", rnd(1, 4, 4, 5))],
                    {"strides": [2, 2], "output_shape": [9, 12]}, [("w", rnd(4, 3, 3, 3))]))
    out.append(case("ConvTranspose 1d", "ConvTranspose", [("x", rnd(1, 3, 6))], {"strides": [3]},
                    [("w", rnd(3, 2, 4))]))
    # Conv
    for ap in ["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]:
        for stride, dil, group in itertools.product([1, 2], [1, 2], [1, 2]):
            at = {"strides": [stride, stride], "dilations": [dil, dil], "group": group, "auto_pad": ap}
            if ap == "NOTSET":
                at["pads"] = [1, 0, 0, 2]
            out.append(case("Conv %s s%d d%d g%d" % (ap, stride, dil, group), "Conv", [("x", rnd(1, 4, 7, 8))], at,
                            [("w", rnd(6, 4 // group, 3, 3)), ("b", rnd(6))]))
    # pooling
    for op, ceil, cip, pad, stride in itertools.product(["MaxPool", "AveragePool"], [0, 1], [0, 1], [0, 1], [1, 2]):
        if op == "MaxPool" and cip:
            continue
        at = {"kernel_shape": [3, 2], "strides": [stride, stride], "pads": [pad, pad, pad, 0], "ceil_mode": ceil}
        if op == "AveragePool":
            at["count_include_pad"] = cip
        out.append(case("%s ceil%d cip%d p%d s%d" % (op, ceil, cip, pad, stride), op, [("x", rnd(1, 2, 7, 6))], at))
    out.append(case("MaxPool dilations", "MaxPool", [("x", rnd(1, 2, 9, 8))], {"kernel_shape": [2, 2],
                                                                                "dilations": [2, 2]}))
    for ap in ["SAME_UPPER", "SAME_LOWER", "VALID"]:
        for op in ["MaxPool", "AveragePool"]:
            out.append(case("%s auto_pad %s" % (op, ap), op, [("x", rnd(1, 2, 7, 6))],
                            {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": ap}))
    out.append(case("GlobalAveragePool", "GlobalAveragePool", [("x", x4)]))
    out.append(case("GlobalMaxPool", "GlobalMaxPool", [("x", x4)]))
    # Pad
    for mode in ["constant", "reflect", "edge", "wrap"]:
        for pads in (i64(0, 1, 2, 1, 0, 0, 1, 3), i64(0, 0, -1, 1, 0, 0, 2, -2)):
            out.append(case("Pad %s %s" % (mode, pads.tolist()), "Pad", [("x", x4)], {"mode": mode},
                            [("pads", pads), ("value", f32(0.5) if mode == "constant" else f32(0))], opset=13))
    # activations and their parameters
    for op, at in [("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.1666667, "beta": 0.5}), ("HardSwish", {}),
                   ("LeakyRelu", {"alpha": 0.2}), ("Elu", {"alpha": 0.7}), ("Selu", {}),
                   ("Selu", {"alpha": 1.5, "gamma": 1.1}), ("Gelu", {}), ("Gelu", {"approximate": "tanh"}),
                   ("Softplus", {}), ("Sigmoid", {}), ("Tanh", {}), ("Relu", {}), ("Erf", {}), ("Abs", {}),
                   ("Neg", {}), ("Exp", {}), ("Softsign", {}), ("Celu", {"alpha": 0.5}), ("ThresholdedRelu", {}),
                   ("Mish", {}), ("Sin", {}), ("Floor", {}), ("Round", {}), ("Sign", {})]:
        opset = 20 if op == "Gelu" else 18 if op == "Mish" else 17
        out.append(case("%s %s" % (op, at), op, [("x", 3 * rnd(2, 3, 4))], at, opset=opset))
    out.append(case("Clip constants", "Clip", [("x", rnd(2, 5))], {}, [("lo", f32(-0.3)), ("hi", f32(0.4))]))
    out.append(case("Clip no max", "Clip", [("x", rnd(2, 5))], {"__order": ["x", "lo", ""]}, [("lo", f32(-0.3))]))
    out.append(case("PRelu", "PRelu", [("x", rnd(2, 3, 4))], {}, [("s", rnd(3, 1))]))
    # Softmax / LogSoftmax axes, before and after opset 13
    for op, axis, opset in itertools.product(["Softmax", "LogSoftmax"], [0, 1, 2, -1], [11, 13]):
        out.append(case("%s axis %d opset %d" % (op, axis, opset), op, [("x", rnd(2, 3, 4))], {"axis": axis},
                        opset=opset))
    # reductions
    for op in ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceProd", "ReduceL1",
               "ReduceLogSumExp", "ReduceSumSquare"]:
        for axes, keep in itertools.product([[1], [0, 2], [-1], None], [0, 1]):
            at = {"keepdims": keep}
            consts = []
            if axes is not None:
                consts = [("axes", i64(*axes))]
            out.append(case("%s axes %s keepdims %d" % (op, axes, keep), op, [("x", rnd(2, 3, 4))], at, consts,
                            opset=18))
    out.append(case("ArgMax", "ArgMax", [("x", rnd(2, 3, 4))], {"axis": 1}))
    # indexing and shapes
    out.append(case("Gather negative", "Gather", [("x", rnd(4, 3))], {"axis": 0}, [("i", i64(-1, 0, 2))]))
    out.append(case("Gather axis 1", "Gather", [("x", rnd(2, 5, 3))], {"axis": 1}, [("i", i64(4, -2))]))
    out.append(case("GatherElements", "GatherElements", [("x", rnd(3, 4))], {"axis": 1},
                    [("i", i64(0, 3, 1, 2, 2, 0, 3, 1, 0, 0, 1, 2).reshape(3, 4))]))
    for st, en, ax, sp in [((1,), (4,), (1,), (1,)), ((-1,), (-6,), (2,), (-2,)), ((0, 1), (9, 9), (1, 2), (2, 3))]:
        out.append(case("Slice %s %s %s %s" % (st, en, ax, sp), "Slice", [("x", rnd(2, 5, 6))], {},
                        [("s", i64(*st)), ("e", i64(*en)), ("a", i64(*ax)), ("p", i64(*sp))]))
    out.append(case("Split", "Split", [("x", rnd(2, 7))], {"axis": 1}, [("sp", i64(3, 4))], n_out=2))
    out.append(case("Transpose", "Transpose", [("x", rnd(2, 3, 4))], {"perm": [2, 0, 1]}))
    out.append(case("Flatten axis 2", "Flatten", [("x", rnd(2, 3, 4))], {"axis": 2}))
    out.append(case("Tile", "Tile", [("x", rnd(2, 3))], {}, [("r", i64(2, 3))]))
    out.append(case("Expand", "Expand", [("x", rnd(3, 1))], {}, [("s", i64(2, 3, 4))]))
    out.append(case("DepthToSpace DCR", "DepthToSpace", [("x", rnd(1, 8, 2, 3))], {"blocksize": 2}))
    out.append(case("DepthToSpace CRD", "DepthToSpace", [("x", rnd(1, 8, 2, 3))], {"blocksize": 2, "mode": "CRD"}))
    out.append(case("SpaceToDepth", "SpaceToDepth", [("x", rnd(1, 2, 4, 6))], {"blocksize": 2}))
    for eq in ["bij,bjk->bik", "bhqd,bhkd->bhqk", "ij->ji", "bi,i->b", "ii->i"]:
        shapes = {"bij,bjk->bik": [(2, 3, 4), (2, 4, 5)], "bhqd,bhkd->bhqk": [(1, 2, 3, 4), (1, 2, 5, 4)],
                  "ij->ji": [(3, 4)], "bi,i->b": [(2, 5), (5,)], "ii->i": [(4, 4)]}[eq]
        ins = [("x%d" % k, rnd(*s)) for k, s in enumerate(shapes)]
        out.append(case("Einsum " + eq, "Einsum", ins[:1], {"equation": eq}, ins[1:]))
    # normalisations
    for axis in [-1, 1]:
        out.append(case("LayerNormalization axis %d" % axis, "LayerNormalization", [("x", rnd(2, 3, 4))],
                        {"axis": axis, "epsilon": 1e-3},
                        [("s", rnd(*((4,) if axis == -1 else (3, 4)))), ("b", rnd(*((4,) if axis == -1 else (3, 4))))]))
    out.append(case("BatchNormalization", "BatchNormalization", [("x", x4)], {"epsilon": 1e-3},
                    [("s", rnd(2)), ("b", rnd(2)), ("m", rnd(2)), ("v", np.abs(rnd(2)) + 0.5)]))
    out.append(case("InstanceNormalization", "InstanceNormalization", [("x", x4)], {},
                    [("s", rnd(2)), ("b", rnd(2))]))
    out.append(case("LRN", "LRN", [("x", x4)], {"size": 3}))
    # arithmetic with broadcasting, Mod's two signs, Pow, Where
    out.append(case("Mod fmod 0", "Mod", [("x", 5 * rnd(3, 4))], {"fmod": 1}, [("d", f32(1.5, -2, 0.7, -0.9))]))
    out.append(case("Pow", "Pow", [("x", np.abs(rnd(3, 4)) + 0.1)], {}, [("p", f32(0.5, 2, -1, 3))]))
    out.append(case("Gemm transA transB", "Gemm", [("a", rnd(4, 3))], {"transA": 1, "transB": 1, "alpha": 0.5,
                                                                         "beta": 2.0},
                    [("b", rnd(5, 4)), ("c", rnd(5))]))
    out.append(case("MatMul batch broadcast", "MatMul", [("a", rnd(2, 1, 3, 4))], {}, [("b", rnd(3, 4, 2))]))
    return out


def _run_ort(items, work, mod):
    specs = []
    for k, (label, m, inputs) in enumerate(items):
        d = os.path.join(work, "c%d" % k)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "m.onnx")
        onnx.save(m, path)
        spec = {"model": path, "outdir": d, "inputs": []}
        for j, (n, a) in enumerate(inputs):
            f = os.path.join(d, "in%d.bin" % j)
            a.tofile(f)
            spec["inputs"].append({"name": n, "dtype": str(a.dtype), "shape": list(a.shape), "file": f})
        specs.append(spec)
    with open(os.path.join(work, "specs.json"), "w") as f:
        json.dump(specs, f)
    r = subprocess.run(["node", os.path.join(ROOT, "bench", "ort_forward.js"), os.path.join(work, "specs.json")],
                       env=dict(os.environ, ORT_NODE=mod), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return specs


def test_every_op_mode_against_onnxruntime():
    mod = _ort_node()
    items = cases()
    work = tempfile.mkdtemp(prefix="cattr-ort-")
    try:
        specs = _run_ort(items, work, mod)
        agree, refused, ort_refused, wrong = [], [], [], []
        for (label, m, inputs), spec in zip(items, specs):
            res = json.load(open(os.path.join(spec["outdir"], "outputs.json")))
            if isinstance(res, dict):  # onnxruntime does not run it either: nothing to compare
                ort_refused.append(label)
                continue
            want = np.fromfile(res[0]["file"], np.float32 if res[0]["dtype"] == "float32" else np.int64)
            want = want.reshape(res[0]["shape"])
            try:
                cm = cattr.load(spec["model"])
            except Exception as e:  # noqa: BLE001 - a refusal must name what it refuses
                msg = str(e)
                named = any(str(v) in msg or k in msg for k, v in
                            [(a.name, helper.get_attribute_value(a)) for a in m.graph.node[0].attribute]) or \
                    m.graph.node[0].op_type in msg
                (refused if named else wrong).append("%s: refused: %s" % (label, msg[:160]))
                continue
            try:
                got = np.asarray(cm.forward(*[a for _, a in inputs]))
            except Exception as e:  # noqa: BLE001 - loaded, then failed: not a refusal at load
                wrong.append("%s: loads, then fails: %s" % (label, str(e)[:160]))
                continue
            scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
            if got.shape != want.shape:
                wrong.append("%s: shape %s, onnxruntime %s" % (label, got.shape, want.shape))
            elif want.size and float(np.max(np.abs(got.astype(np.float64) - want))) > 1e-5 * scale:
                wrong.append("%s: max difference %.3g (onnxruntime's max %.3g)" %
                             (label, float(np.max(np.abs(got.astype(np.float64) - want))), scale))
            else:
                agree.append(label)
        print("\n%d cases: %d agree with onnxruntime, %d refused at load naming the attribute, %d that onnxruntime "
              "does not run either" % (len(items), len(agree), len(refused), len(ort_refused)))
        for r_ in refused:
            print("  refused: " + r_)
        assert not wrong, "computed differently from onnxruntime, or not refused at load:\n  " + "\n  ".join(wrong)
        assert len(agree) > len(items) // 2
    finally:
        shutil.rmtree(work, ignore_errors=True)
