#!/usr/bin/python3
"""make_onnx_fixtures.py - writes the small ONNX models that tests/test_onnx_load.c loads, into tests/data/onnx/.

Run with Debian's interpreter, which has the `onnx` module:  /usr/bin/python3 tests/data/make_onnx_fixtures.py
The output is deterministic (fixed weights, fixed producer), so re-running it leaves the committed files unchanged.

Valid models (ok_*.onnx) pass onnx.checker with full shape inference; the err_*.onnx models are deliberately broken
in one way each and are written without the checker.
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "onnx")
F = TensorProto.FLOAT


def arange(shape, scale=0.1, dtype=np.float32):
    n = int(np.prod(shape))
    return (((np.arange(n) % 7) - 3) * scale).astype(dtype).reshape(shape)


def init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)  # raw_data


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, inits=(), opset=17, check=True, name="g"):
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="make_onnx_fixtures")
    m.ir_version = 8
    if check:
        onnx.checker.check_model(m, full_check=True)
    return m


def save(m, fname):
    with open(os.path.join(OUT, fname), "wb") as f:
        f.write(m.SerializeToString())  # no external-data handling: written exactly as built


def ok_mlp():
    nodes = [
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h1"], name="/fc1/Gemm", transB=1),
        helper.make_node("Relu", ["h1"], ["h2"], name="/relu/Relu"),
        helper.make_node("Gemm", ["h2", "fc2.weight"], ["logits"], name="/fc2/Gemm", alpha=0.5, beta=0.25),
        helper.make_node("Softmax", ["logits"], ["probs"], name="/softmax/Softmax", axis=1),
    ]
    inits = [init("fc1.weight", arange([8, 4])), init("fc1.bias", arange([8], 0.01)),
             init("fc2.weight", arange([8, 3]))]
    return model(nodes, [vi("x", F, ["batch", 4])], [vi("probs", F, ["batch", 3])], inits)


def ok_cnn():
    nodes = [
        helper.make_node("Conv", ["img", "conv1.weight", "conv1.bias"], ["c1"], name="/conv1/Conv",
                         kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1], group=1),
        helper.make_node("BatchNormalization", ["c1", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["b1"],
                         name="/bn/BatchNormalization", epsilon=1e-3, momentum=0.9),
        helper.make_node("Relu", ["b1"], ["r1"], name="/relu/Relu"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="/pool/MaxPool", kernel_shape=[2, 2], strides=[2, 2],
                         pads=[0, 0, 1, 1], ceil_mode=1),
        helper.make_node("Conv", ["p1", "conv2.weight"], ["c2"], name="/conv2/Conv", group=2, auto_pad="VALID",
                         strides=[1, 2]),
        helper.make_node("AveragePool", ["c2"], ["a1"], name="/avg/AveragePool", kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1], count_include_pad=1),
        helper.make_node("GlobalAveragePool", ["a1"], ["g1"], name="/gap/GlobalAveragePool"),
        helper.make_node("Flatten", ["g1"], ["f1"], name="/flatten/Flatten"),
        helper.make_node("Gemm", ["f1", "fc.weight", "fc.bias"], ["out"], name="/fc/Gemm", transB=1),
    ]
    inits = [init("conv1.weight", arange([4, 3, 3, 3])), init("conv1.bias", arange([4], 0.01)),
             init("bn.scale", np.ones(4, np.float32)), init("bn.bias", np.zeros(4, np.float32)),
             init("bn.mean", arange([4], 0.02)), init("bn.var", np.full(4, 2.0, np.float32)),
             init("conv2.weight", arange([4, 2, 1, 1])), init("fc.weight", arange([2, 4])),
             init("fc.bias", np.zeros(2, np.float32))]
    return model(nodes, [vi("img", F, [1, 3, 8, 8])], [vi("out", F, [1, 2])], inits)


def ok_conv1d():
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="/conv/Conv", kernel_shape=[3], strides=[2], pads=[1, 2],
                         dilations=[2]),
        helper.make_node("MaxPool", ["c"], ["m", "m_idx"], name="/pool/MaxPool", kernel_shape=[2], pads=[0, 1],
                         dilations=[1]),
        helper.make_node("AveragePool", ["m"], ["y"], name="/avg/AveragePool", kernel_shape=[2], strides=[2],
                         ceil_mode=1, count_include_pad=0),
    ]
    return model(nodes, [vi("x", F, [1, 2, 10])], [vi("y", F, [1, 3, 3])], [init("w", arange([3, 2, 3]))])


def ok_ops():
    t = helper.make_tensor
    nodes = [
        helper.make_node("Constant", [], ["shape_c"], name="/shape/Constant",
                         value=numpy_helper.from_array(np.array([0, 12], np.int64))),
        helper.make_node("Reshape", ["a", "shape_c"], ["r"], name="/reshape/Reshape", allowzero=0),
        helper.make_node("Unsqueeze", ["r", "axes_u"], ["u"], name="/unsqueeze/Unsqueeze"),
        helper.make_node("Squeeze", ["u"], ["s"]),  # no name: the loader generates "Squeeze_3"
        helper.make_node("Transpose", ["s"], ["t"], name="/transpose/Transpose", perm=[1, 0]),
        helper.make_node("Concat", ["t", "t"], ["cc"], name="/concat/Concat", axis=0),
        helper.make_node("Slice", ["cc", "sl.starts", "sl.ends", "sl.axes", "sl.steps"], ["sl"], name="/slice/Slice"),
        helper.make_node("Slice", ["cc", "sl2.starts", "sl2.ends"], ["sl2"], name="/slice2/Slice"),
        helper.make_node("Gather", ["cc", "idx"], ["ga"], name="/gather/Gather", axis=0),
        helper.make_node("Constant", [], ["cmin"], name="/cmin/Constant", value_float=-0.5),
        helper.make_node("Clip", ["sl", "cmin", ""], ["cl"], name="/clip/Clip"),
        helper.make_node("LeakyRelu", ["cl"], ["lr"], name="/lrelu/LeakyRelu"),
        helper.make_node("LeakyRelu", ["lr"], ["lr2"], name="/lrelu2/LeakyRelu", alpha=0.2),
        helper.make_node("Sigmoid", ["lr2"], ["sg"], name="/sigmoid/Sigmoid"),
        helper.make_node("Tanh", ["sg"], ["th"], name="/tanh/Tanh"),
        helper.make_node("Neg", ["th"], ["ng"], name="/neg/Neg"),
        helper.make_node("Add", ["ng", "sl"], ["ad"], name="/add/Add"),
        helper.make_node("Sub", ["ad", "sl"], ["sb"], name="/sub/Sub"),
        helper.make_node("Mul", ["sb", "sb"], ["ml"], name="/mul/Mul"),
        helper.make_node("Div", ["ml", "cl"], ["dv"], name="/div/Div"),
        helper.make_node("Identity", ["dv"], ["id"], name="/id/Identity"),
        helper.make_node("Dropout", ["id"], ["dr"], name="/drop/Dropout"),
        helper.make_node("Dropout", ["dr"], ["dr2", "dr2_mask"], name="/drop2/Dropout"),  # mask defined, unused
        helper.make_node("MatMul", ["a", "b"], ["mm"], name="/matmul/MatMul"),
        helper.make_node("Flatten", ["mm"], ["fl"], name="/flatten/Flatten", axis=2),
        helper.make_node("Softmax", ["fl"], ["sm"], name="/softmax/Softmax"),
        helper.make_node("Concat", ["ga", "sl2"], ["cc2"], name="/concat2/Concat", axis=-2),
        helper.make_node("Constant", [], ["cints"], name="/cints/Constant", value_ints=[3, 4]),
        helper.make_node("Constant", [], ["cint"], name="/cint/Constant", value_int=7),
        helper.make_node("Constant", [], ["cfloats"], name="/cfloats/Constant", value_floats=[1.5, 2.5]),
    ]
    inits = [
        t("axes_u", TensorProto.INT64, [1], [1], raw=False),  # int64_data
        init("sl.starts", np.array([0, 0], np.int64)), init("sl.ends", np.array([10, 2], np.int64)),
        init("sl.axes", np.array([0, 1], np.int64)), init("sl.steps", np.array([2, 1], np.int64)),
        init("sl2.starts", np.array([1], np.int64)), init("sl2.ends", np.array([5], np.int64)),
        init("idx", np.array([0, 2, 4], np.int32)),  # raw int32, widened to int64
        t("dscale", TensorProto.DOUBLE, [2], [0.25, -4.0], raw=False),  # double_data
        t("i32f", TensorProto.INT32, [2, 2], [-7, 0, 1, 2147483647], raw=False),  # int32_data
        init("i8", np.array([-1, 2, -128], np.int8)),  # raw, sign-extended
        init("u8", np.array([255, 1], np.uint8)),  # raw, zero-extended
        t("fdata", F, [3], [1.0, -2.0, 3.5], raw=False),  # float_data
        t("scalar", F, [], [2.0]),
    ]
    outs = [vi("dr2", F, [5, 2]), vi("sm", F, [6, 5]), vi("cc2", F, [7, 2])]
    return model(nodes, [vi("a", F, [2, 3, 4]), vi("b", F, [4, "n"])], outs, inits)


def ok_legacy():
    nodes = [
        helper.make_node("Softmax", ["x"], ["sm"], name="/softmax/Softmax"),
        helper.make_node("Unsqueeze", ["sm"], ["u"], name="/unsqueeze/Unsqueeze", axes=[0]),
        helper.make_node("Squeeze", ["u"], ["s"], name="/squeeze/Squeeze", axes=[0]),
        helper.make_node("Slice", ["s"], ["sl"], name="/slice/Slice", starts=[0], ends=[3], axes=[1]),
        helper.make_node("Clip", ["sl"], ["c1"], name="/clip1/Clip", min=-1.0, max=1.0),
        helper.make_node("Clip", ["c1"], ["c2"], name="/clip2/Clip"),
        helper.make_node("Dropout", ["c2"], ["y"], name="/drop/Dropout", ratio=0.3),
    ]
    return model(nodes, [vi("x", F, [2, 6])], [vi("y", F, [2, 3])], opset=9)


def ok_clip11():
    nodes = [
        helper.make_node("Constant", [], ["lo"], name="/lo/Constant", value=helper.make_tensor("lo", F, [], [0.0])),
        helper.make_node("Clip", ["x", "lo", "hi"], ["y"], name="/clip/Clip"),
        helper.make_node("Softmax", ["y"], ["z"], name="/softmax/Softmax", axis=-1),
    ]
    return model(nodes, [vi("x", F, [2, 6])], [vi("z", F, [2, 6])], [helper.make_tensor("hi", F, [], [6.0])],
                 opset=11)


def ok_reduce():
    """ReduceMean with its axes as an attribute (opset 17), ReduceSum with them as an input, and without any."""
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["m"], name="/gap/ReduceMean", axes=[2, -1]),
        helper.make_node("ReduceSum", ["m", "ax"], ["s"], name="/sum/ReduceSum", keepdims=0),
        helper.make_node("ReduceSum", ["s"], ["y"], name="/total/ReduceSum"),
    ]
    return model(nodes, [vi("x", F, [2, 3, 4, 5])], [vi("y", F, [1, 1, 1])], [init("ax", np.array([1], np.int64))])


def ok_reduce18():
    """ReduceMean's axes as an input (opset 18; written without the checker, which stops at opset 17)."""
    nodes = [helper.make_node("ReduceMean", ["x", "ax"], ["y"], name="/mean/ReduceMean", keepdims=0)]
    return model(nodes, [vi("x", F, [2, 3, 4])], [vi("y", F, [2, 4])], [init("ax", np.array([1], np.int64))],
                 opset=18, check=False)


def ok_elementwise():
    """The elementwise functions of exported models, chained (opset 17)."""
    H = helper.make_node
    nodes = [
        H("Abs", ["x"], ["ax"], name="/abs/Abs"),
        H("Sqrt", ["ax"], ["sq"], name="/sqrt/Sqrt"),
        H("Exp", ["sq"], ["ex"], name="/exp/Exp"),
        H("Log", ["ex"], ["lg"], name="/log/Log"),
        H("Erf", ["lg"], ["er"], name="/erf/Erf"),
        H("Reciprocal", ["ex"], ["rc"], name="/rec/Reciprocal"),
        H("HardSigmoid", ["er"], ["hs"], name="/hsig/HardSigmoid", alpha=0.25, beta=0.4),
        H("HardSwish", ["hs"], ["hw"], name="/hswish/HardSwish"),
        H("Softplus", ["hw"], ["sp"], name="/softplus/Softplus"),
        H("Elu", ["sp"], ["el"], name="/elu/Elu", alpha=0.5),
        H("Selu", ["el"], ["se"], name="/selu/Selu"),
        H("Pow", ["sq", "two"], ["pw"], name="/pow/Pow"),
        H("Max", ["se", "pw"], ["mx"], name="/max/Max"),
        H("Min", ["mx", "rc"], ["y"], name="/min/Min"),
    ]
    return model(nodes, [vi("x", F, [2, 3])], [vi("y", F, [2, 3])], [init("two", np.array(2.0, np.float32))])


def ok_pad_concat():
    """Pad (constant with its value as an input, reflect) and a Concat of ten inputs (DenseNet's blocks), opset 14."""
    H = helper.make_node
    nodes = [H("Pad", ["x", "pads", "cval"], ["p1"], name="/pad/Pad", mode="constant"),
             H("Pad", ["p1", "pads2"], ["p2"], name="/pad2/Pad", mode="reflect"),
             H("Concat", ["p2"] * 10, ["c"], name="/cat/Concat", axis=1),
             H("LogSoftmax", ["c"], ["y"], name="/logsm/LogSoftmax", axis=-1)]
    inits = [init("pads", np.array([0, 1, 0, 1], np.int64)), init("cval", np.array(-2.0, np.float32)),
             init("pads2", np.array([0, 1, 0, 0], np.int64))]
    return model(nodes, [vi("x", F, [1, 2])], [vi("y", F, [1, 50])], inits, opset=14)


def ok_gelu20():
    """Gelu (opset 20; written without the checker): exact and tanh-approximated."""
    nodes = [helper.make_node("Gelu", ["x"], ["g"], name="/gelu/Gelu"),
             helper.make_node("Gelu", ["g"], ["y"], name="/gelu2/Gelu", approximate="tanh")]
    return model(nodes, [vi("x", F, [2, 3])], [vi("y", F, [2, 3])], opset=20, check=False)


def ok_logic():
    """Comparisons and logic as masks (Greater, Less, GreaterOrEqual, LessOrEqual, And, Or, Xor, Not feeding Where),
    PRelu, ReduceMax / ReduceMin / ReduceL2 and Tile (opset 17); the input and the output numpy computes are saved
    beside (ok_logic.x.npy, ok_logic.y.npy)."""
    H = helper.make_node
    nodes = [H("Greater", ["x", "zero"], ["gt"], name="/gt/Greater"),
             H("Less", ["x", "half"], ["lt"], name="/lt/Less"),
             H("And", ["gt", "lt"], ["band"], name="/and/And"),
             H("Not", ["band"], ["nand"], name="/not/Not"),
             H("GreaterOrEqual", ["x", "half"], ["ge"], name="/ge/GreaterOrEqual"),
             H("LessOrEqual", ["x", "mhalf"], ["le"], name="/le/LessOrEqual"),
             H("Or", ["ge", "le"], ["bor"], name="/or/Or"),
             H("Xor", ["bor", "nand"], ["bxor"], name="/xor/Xor"),
             H("Where", ["bxor", "x", "three"], ["w"], name="/where/Where"),
             H("PRelu", ["w", "slope"], ["p"], name="/prelu/PRelu"),
             H("ReduceMax", ["p"], ["rmax"], name="/rmax/ReduceMax", axes=[1], keepdims=1),
             H("ReduceMin", ["p"], ["rmin"], name="/rmin/ReduceMin", axes=[1], keepdims=1),
             H("ReduceL2", ["p"], ["rl2"], name="/rl2/ReduceL2", axes=[1], keepdims=1),
             H("Tile", ["rl2", "reps"], ["tl"], name="/tile/Tile"),
             H("Concat", ["p", "rmax", "rmin", "tl"], ["y"], name="/cat/Concat", axis=1)]
    f = lambda v: np.array(v, np.float32)
    inits = [init("zero", f(0)), init("half", f(0.5)), init("mhalf", f(-0.5)), init("three", f(3)),
             init("slope", f([0.1, 0.2, 0.3, 0.4])), init("reps", np.array([1, 2], np.int64))]
    x = np.array([[-1.0, -0.5, 0.25, 0.75], [0.5, -0.25, 2.0, -3.0]], np.float32)
    gt, lt = x > 0, x < 0.5
    bxor = np.logical_xor(np.logical_or(x >= 0.5, x <= -0.5), np.logical_not(np.logical_and(gt, lt)))
    w = np.where(bxor, x, np.float32(3))
    p = np.where(w > 0, w, w * f([0.1, 0.2, 0.3, 0.4]))
    l2 = np.sqrt((p.astype(np.float64) ** 2).sum(1, keepdims=True))
    y = np.concatenate([p, p.max(1, keepdims=True), p.min(1, keepdims=True), np.tile(l2, (1, 2))], 1)
    np.save(os.path.join(OUT, "ok_logic.x.npy"), x)
    np.save(os.path.join(OUT, "ok_logic.y.npy"), y.astype(np.float32))
    return model(nodes, [vi("x", F, [2, 4])], [vi("y", F, [2, 8])], inits)


def ok_split():
    """Split without sizes (opset 13: equal parts of a dim known only from the input's shape, folded per call) and
    with sizes, the parts concatenated in another order; a LogSoftmax over axis 1 and a Softmax over axis 0."""
    H = helper.make_node
    nodes = [H("Split", ["x"], ["a", "b"], name="/split/Split", axis=1),
             H("Split", ["x", "sizes"], ["c", "d"], name="/split2/Split", axis=1),
             H("LogSoftmax", ["a"], ["la"], name="/lsm/LogSoftmax", axis=0),
             H("Softmax", ["d"], ["sd"], name="/sm/Softmax", axis=0),
             H("Concat", ["b", "la", "sd", "c"], ["y"], name="/cat/Concat", axis=1)]
    x = np.array([[1.0, -2.0, 0.5, 3.0], [0.25, 4.0, -1.0, 2.0]], np.float32)
    a, b = x[:, :2], x[:, 2:]
    la = a - a.max(0) - np.log(np.exp(a - a.max(0)).sum(0))
    d = x[:, 1:]
    sd = np.exp(d - d.max(0)) / np.exp(d - d.max(0)).sum(0)
    y = np.concatenate([b, la, sd, x[:, :1]], 1)
    np.save(os.path.join(OUT, "ok_split.x.npy"), x)
    np.save(os.path.join(OUT, "ok_split.y.npy"), y.astype(np.float32))
    return model(nodes, [vi("x", F, [2, 4])], [vi("y", F, [2, 8])], [init("sizes", np.array([1, 3], np.int64))],
                 opset=13)


def ok_einsum():
    """Einsum's two-operand patterns as MatMuls: batched products (transposed or not), a matrix-vector product, an
    elementwise product, a letter summed away, and the implicit output form; numpy's einsum gives the output."""
    H = helper.make_node
    eqs = ["bij,jk->bik", "bij,bkj->bik", "bij,bik->bjk", "bij,j->bi", "bij,bij->bij", "bij,kj->ki", "bij,jk"]
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    consts = {"bij,jk->bik": rng.standard_normal((4, 5)).astype(np.float32),
              "bij,j->bi": rng.standard_normal(4).astype(np.float32),
              "bij,kj->ki": rng.standard_normal((6, 4)).astype(np.float32),
              "bij,jk": rng.standard_normal((4, 2)).astype(np.float32)}
    nodes, inits, outs, flat = [], [], [], []
    for k, eq in enumerate(eqs):
        second = "x"
        if eq in consts:
            second = "w%d" % k
            inits.append(init(second, consts[eq]))
        nodes.append(H("Einsum", ["x", second], ["e%d" % k], name="/e%d/Einsum" % k, equation=eq))
        nodes.append(H("Reshape", ["e%d" % k, "flat"], ["f%d" % k], name="/f%d/Reshape" % k))
        outs.append(np.einsum(eq if "->" in eq else eq + "->bik", x, consts.get(eq, x)).reshape(-1))
        flat.append("f%d" % k)
    nodes.append(H("Concat", flat, ["y"], name="/cat/Concat", axis=0))
    inits.append(init("flat", np.array([-1], np.int64)))
    y = np.concatenate(outs)
    np.save(os.path.join(OUT, "ok_einsum.x.npy"), x)
    np.save(os.path.join(OUT, "ok_einsum.y.npy"), y.astype(np.float32))
    return model(nodes, [vi("x", F, [2, 3, 4])], [vi("y", F, [len(y)])], inits, opset=13)


def ok_if():
    """If on the batch size (Shape -> Gather -> Equal): batch 1 takes then_branch (x * w with w a branch initializer,
    then a nested If on the feature count adding 1), any other batch the else_branch (Tanh, then a Reshape to [2, -1]
    that only batch 2 can take: the branch not taken is never planned). Data for batch 1 and batch 2."""
    H = helper.make_node
    I64 = TensorProto.INT64
    inner_then = helper.make_graph([H("Add", ["t_mul", "one"], ["t_add"], name="/inner/Add")], "inner_then", [],
                                   [vi("t_add", F, ["r", "c"])], initializer=[init("one", np.float32(1))])
    inner_else = helper.make_graph([H("Neg", ["t_mul"], ["t_neg"], name="/inner/Neg")], "inner_else", [],
                                   [vi("t_neg", F, ["r", "c"])])
    then_g = helper.make_graph(
        [H("Mul", ["x", "t_w"], ["t_mul"], name="/then/Mul"),
         H("Gather", ["shape", "i1"], ["cols"], name="/then/Gather", axis=0),
         H("Greater", ["cols", "two"], ["wide"], name="/then/Greater"),
         H("If", ["wide"], ["t_out"], name="/then/If", then_branch=inner_then, else_branch=inner_else)],
        "then", [], [vi("t_out", F, ["r", "c"])],
        initializer=[init("t_w", np.array([0.5, -1.0, 2.0, 0.25], np.float32)), init("i1", np.int64(1)),
                     init("two", np.int64(2))])
    else_g = helper.make_graph(
        [H("Tanh", ["x"], ["e_tanh"], name="/else/Tanh"),
         H("Reshape", ["e_tanh", "to"], ["e_out"], name="/else/Reshape")],
        "else", [], [vi("e_out", F, ["r", "c"])], initializer=[init("to", np.array([2, -1], np.int64))])
    nodes = [H("Shape", ["x"], ["shape"], name="/Shape"),
             H("Gather", ["shape", "i0"], ["batch"], name="/Gather", axis=0),
             H("Equal", ["batch", "i1"], ["is_one"], name="/Equal"),
             H("If", ["is_one"], ["y"], name="/if/If", then_branch=then_g, else_branch=else_g)]
    w = np.array([0.5, -1.0, 2.0, 0.25], np.float32)
    x1 = np.array([[1.0, -2.0, 0.5, 3.0]], np.float32)
    x2 = np.array([[1.0, -2.0, 0.5, 3.0], [0.25, 4.0, -1.0, 2.0]], np.float32)
    np.save(os.path.join(OUT, "ok_if.x.npy"), x1)
    np.save(os.path.join(OUT, "ok_if.y.npy"), (x1 * w + 1).astype(np.float32))
    np.save(os.path.join(OUT, "ok_if_b2.x.npy"), x2)
    np.save(os.path.join(OUT, "ok_if_b2.y.npy"), np.tanh(x2).reshape(2, -1).astype(np.float32))
    return model(nodes, [vi("x", F, ["batch", 4])], [vi("y", F, ["r", "c"])],
                 [init("i0", np.int64(0)), init("i1", np.int64(1))], opset=13)


def ok_int_inputs():
    """Integer inputs known per call: a rate whose value chooses an If's branch (x * 2 at 16000, tanh(x) otherwise)
    and a shape for a Reshape."""
    H = helper.make_node
    I64 = TensorProto.INT64
    then_g = helper.make_graph([H("Mul", ["x", "two"], ["t"], name="/fast/Mul")], "then", [], [vi("t", F, ["b", 4])],
                               initializer=[init("two", np.float32(2))])
    else_g = helper.make_graph([H("Tanh", ["x"], ["e"], name="/slow/Tanh")], "else", [], [vi("e", F, ["b", 4])])
    nodes = [H("Equal", ["rate", "r16k"], ["is16k"], name="/rate/Equal"),
             H("If", ["is16k"], ["h"], name="/rate/If", then_branch=then_g, else_branch=else_g),
             H("Reshape", ["h", "shape"], ["y"], name="/view/Reshape")]
    return model(nodes, [vi("x", F, ["b", 4]), vi("rate", I64, []), vi("shape", I64, [2])], [vi("y", F, ["p", "q"])],
                 [init("r16k", np.int64(16000))], opset=13)


def ok_size_clip():
    """Size (the element count, a scalar) dividing the input, and Clip whose bounds are computed by other nodes (5% of
    the data's minimum and maximum): onnxruntime's min(max(x, lo), hi)."""
    H = helper.make_node
    nodes = [H("Size", ["x"], ["n"], name="/size/Size"),
             H("Cast", ["n"], ["nf"], name="/size/Cast", to=F),
             H("Div", ["x", "nf"], ["d"], name="/scale/Div"),
             H("ReduceMin", ["x"], ["mn"], name="/lo/ReduceMin", keepdims=0),
             H("Mul", ["mn", "k"], ["lo"], name="/lo/Mul"),
             H("ReduceMax", ["x"], ["mx"], name="/hi/ReduceMax", keepdims=0),
             H("Mul", ["mx", "k"], ["hi"], name="/hi/Mul"),
             H("Clip", ["d", "lo", "hi"], ["y"], name="/clip/Clip")]
    x = np.array([[1.0, -2.0, 0.5, 3.0], [0.25, 4.0, -1.0, 2.0]], np.float32)
    d = x / np.float32(x.size)
    y = np.minimum(np.maximum(d, np.float32(0.05) * x.min()), np.float32(0.05) * x.max())
    np.save(os.path.join(OUT, "ok_size_clip.x.npy"), x)
    np.save(os.path.join(OUT, "ok_size_clip.y.npy"), y.astype(np.float32))
    return model(nodes, [vi("x", F, ["batch", 4])], [vi("y", F, ["batch", 4])], [init("k", np.float32(0.05))],
                 opset=13)


def ok_fixed_batch_passes():
    """A model exported with a fixed batch of 1 whose batch cannot be followed (x^T w contracts it, the ReduceSum
    reduces over it): cattr runs it in passes of one row. y[b] = sum_i tanh(x[b, i] * w)."""
    H = helper.make_node
    nodes = [H("Transpose", ["x"], ["xt"], name="/t/Transpose", perm=[1, 0]),
             H("MatMul", ["xt", "w"], ["h"], name="/mm/MatMul"),
             H("Tanh", ["h"], ["a"], name="/act/Tanh"),
             H("ReduceSum", ["a", "ax0"], ["y"], name="/sum/ReduceSum", keepdims=1)]
    return model(nodes, [vi("x", F, [1, 4])], [vi("y", F, [1, 3])],
                 [init("w", np.array([[0.5, -1.0, 2.0]], np.float32)), init("ax0", np.array([0], np.int64))], opset=13)


def ok_if_zero_var():
    """A normalisation that checks for a zero variance, as exported models do: v = mean((x - mean(x))^2) over the
    whole input; If(v == 0): x - mean(x), else (x - mean(x)) / sqrt(v). The condition reads the data: cattr decides
    the If when the call runs (both branches planned), and the branch not taken adds nothing to the gradient, though
    its own values are not finite at a zero variance."""
    H = helper.make_node
    then_g = helper.make_graph([H("Identity", ["d"], ["t"], name="/then/Identity")], "then", [], [vi("t", F, None)])
    else_g = helper.make_graph([H("Sqrt", ["v"], ["sd"], name="/else/Sqrt"),
                                H("Div", ["d", "sd"], ["e"], name="/else/Div")], "else", [], [vi("e", F, None)])
    nodes = [H("ReduceMean", ["x"], ["m"], name="/mean/ReduceMean", axes=[1], keepdims=1),
             H("Sub", ["x", "m"], ["d"], name="/center/Sub"),
             H("Mul", ["d", "d"], ["d2"], name="/var/Mul"),
             H("ReduceMean", ["d2"], ["v"], name="/var/ReduceMean", keepdims=0),
             H("Equal", ["v", "zero"], ["flat"], name="/check/Equal"),
             H("If", ["flat"], ["y"], name="/norm/If", then_branch=then_g, else_branch=else_g)]
    return model(nodes, [vi("x", F, ["batch", 4])], [vi("y", F, ["batch", 4])], [init("zero", np.float32(0))],
                 opset=17)


# ---- broken models --------------------------------------------------------------------------------------------

def fuzz_fanout():
    """A shape computed through 30 levels of s = (s * s) / s: each level reads the one before three times, 3^30 paths
    to the Shape at the bottom. The importer's and the planner's walks over shape computations once followed every
    path (a fuzz_onnx timeout)."""
    nodes = [helper.make_node("Shape", ["x"], ["s0"])]
    for i in range(30):
        nodes.append(helper.make_node("Mul", [f"s{i}", f"s{i}"], [f"q{i}"]))
        nodes.append(helper.make_node("Div", [f"q{i}", f"s{i}"], [f"s{i + 1}"]))
    nodes.append(helper.make_node("Reshape", ["x", "s30"], ["y"]))
    return model(nodes, [vi("x", TensorProto.FLOAT, [2, 3])], [vi("y", TensorProto.FLOAT, [2, 3])])


def one_input(nodes, inits=(), opset=17, out="y", extra_inputs=()):
    return model(nodes, [vi("x", F, [1, 4])] + list(extra_inputs), [vi(out, F, None)], inits, opset=opset,
                 check=False)


def err_models():
    w = init("w", arange([2, 4, 1, 1]))
    ext = init("w", arange([4, 4]))
    ext.ClearField("raw_data")
    ext.data_location = TensorProto.EXTERNAL
    ext.external_data.add(key="location", value="weights.bin")
    bad_raw = init("w", arange([4, 4]))
    bad_raw.raw_data = bad_raw.raw_data[:-4]
    mp = helper.make_node("MaxPool", ["x"], ["m", "m_idx"], name="/pool/MaxPool", kernel_shape=[1])
    return {
        "err_unknown_op": one_input([helper.make_node("Hardmax", ["x"], ["y"], name="/foo/Hardmax", axis=1)]),
        "err_einsum_diag": one_input([helper.make_node("Einsum", ["x", "x"], ["y"], name="/foo/Einsum",
                                                       equation="ii,ij->j")]),
        "err_bad_attr": one_input([helper.make_node("Conv", ["x", "w"], ["y"], name="/conv1/Conv", xyz=1)], [w]),
        "err_auto_pad": one_input([helper.make_node("Conv", ["x", "w"], ["y"], name="/conv1/Conv",
                                                    auto_pad="SAME_UPPER")], [w]),
        "err_reshape_dynamic": one_input([helper.make_node("Cast", ["sf"], ["shape"], name="/cast/Cast",
                                                           to=TensorProto.INT64),
                                          helper.make_node("Reshape", ["x", "shape"], ["y"], name="/view/Reshape")],
                                         extra_inputs=[vi("sf", F, [2])]),
        "err_dangling": one_input([helper.make_node("Relu", ["x"], ["r"], name="/relu/Relu"),
                                   helper.make_node("Add", ["r", "ghost"], ["y"], name="/add/Add")]),
        "err_unsorted": one_input([helper.make_node("Add", ["r", "x"], ["y"], name="/add/Add"),
                                   helper.make_node("Relu", ["x"], ["r"], name="/relu/Relu")]),
        "err_maxpool_indices": one_input([mp, helper.make_node("Identity", ["m_idx"], ["y"], name="/use/Identity")]),
        "err_domain": one_input([helper.make_node("Relu", ["x"], ["y"], name="/ms/Relu", domain="com.microsoft")]),
        "err_opset6": one_input([helper.make_node("Relu", ["x"], ["y"], name="/relu/Relu")], opset=6),
        "err_external": one_input([helper.make_node("MatMul", ["x", "w"], ["y"], name="/mm/MatMul")], [ext]),
        "err_raw_size": one_input([helper.make_node("MatMul", ["x", "w"], ["y"], name="/mm/MatMul")], [bad_raw]),
        "err_empty": one_input([]),
        "err_if_on_data": one_input([helper.make_node("ReduceSum", ["x"], ["s"], name="/sum/ReduceSum", keepdims=0),
                                     helper.make_node("Greater", ["s", "zero"], ["pos"], name="/pos/Greater"),
                                     helper.make_node("If", ["pos"], ["y"], name="/sign/If",
                                                      then_branch=helper.make_graph(
                                                          [helper.make_node("Relu", ["x"], ["r"], name="/t/Relu")],
                                                          "t", [], [vi("r", F, None)]),
                                                      else_branch=helper.make_graph(
                                                          [helper.make_node("Neg", ["x"], ["n"], name="/e/Neg")],
                                                          "e", [], [vi("n", F, None)]))],
                                    [init("zero", np.float32(0))]),
        "err_dropout_mask": model([helper.make_node("Dropout", ["x"], ["y", "mask"], name="/drop/Dropout")],
                                  [vi("x", F, [1, 4])], [vi("y", F, None), vi("mask", TensorProto.BOOL, None)],
                                  check=False),
        "err_lstm_layout": one_input([helper.make_node("LSTM", ["x", "rw", "rr"], ["y"], name="/rnn/LSTM",
                                                       hidden_size=2, layout=1)],
                                     [init("rw", np.ones((1, 8, 4), np.float32)),
                                      init("rr", np.ones((1, 8, 2), np.float32))]),
        "err_gru_activations": one_input([helper.make_node("GRU", ["x", "rw", "rr"], ["y"], name="/rnn/GRU",
                                                           hidden_size=2, activations=["Relu", "Tanh"])],
                                         [init("rw", np.ones((1, 6, 4), np.float32)),
                                          init("rr", np.ones((1, 6, 2), np.float32))]),
        "err_lstm_seq_lens": one_input([helper.make_node("LSTM", ["x", "rw", "rr", "", "lens"], ["y"],
                                                         name="/rnn/LSTM", hidden_size=2)],
                                       [init("rw", np.ones((1, 8, 4), np.float32)),
                                        init("rr", np.ones((1, 8, 2), np.float32)),
                                        init("lens", np.ones(1, np.int32))]),
        "err_bn_training": one_input([helper.make_node("BatchNormalization", ["x", "s", "s", "s", "s"], ["y"],
                                                       name="/bn/BatchNormalization", training_mode=1)],
                                     [init("s", np.ones(4, np.float32))]),
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    for fn in (ok_mlp, ok_cnn, ok_conv1d, ok_ops, ok_legacy, ok_clip11, ok_reduce, ok_reduce18, ok_elementwise,
               ok_gelu20, ok_pad_concat, ok_logic, ok_split, ok_einsum, ok_if, ok_int_inputs, ok_size_clip,
               ok_fixed_batch_passes, ok_if_zero_var, fuzz_fanout):
        save(fn(), fn.__name__ + ".onnx")
    for name, m in err_models().items():
        save(m, name + ".onnx")


if __name__ == "__main__":
    main()
