/* op.c - the op names, the default attributes and the message of a failed host function (op.h). */
#include "ops/op.h"

#include <stdio.h>
#include <string.h>

const char *const cg_op_names[CG_OP_COUNT] = {
    "Identity", "Gemm", "MatMul", "Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "Relu", "LeakyRelu",
    "Sigmoid", "Tanh", "Softmax", "Clip", "Add", "Sub", "Mul", "Div", "Neg", "Reshape", "Flatten", "Concat",
    "Unsqueeze", "Squeeze", "Transpose", "Gather", "Slice", "BatchNormalization",
    "ReluGrad", "LeakyReluGrad", "SigmoidGrad", "TanhGrad", "SoftmaxGrad", "ClipGrad", "MaxPoolGrad",
    "AveragePoolGrad", "GlobalAveragePoolGrad", "ConvGradInput", "ReshapeLike", "ReduceSumLike", "ConcatGrad",
    "GatherGrad", "SliceGrad", "BatchNormGrad", "ZerosLike", "RMSNorm", "RMSNormGrad", "RoPE", "Attention", "AttentionGrad", "LogSoftmax",
    "LogSoftmaxGrad", "SwiGLU", "SwiGLUGrad", "SeqPick", "SeqPickGrad", "DlDelta", "DlRescale", "DlCenter", "DlMaxPool",
    "LrpDiv", "WhereId", "PlaceRows", "Abs", "AbsGrad",
    "ReduceSum", "ReduceMean", "ReduceGrad",
    "Sqrt", "Exp", "Log", "Erf", "Reciprocal", "HardSigmoid", "HardSwish", "Softplus", "Elu", "Selu", "Gelu",
    "UnaryGrad", "Pow", "Max", "Min", "BinaryGrad", "Pad", "PadGrad", "Shape", "Cast",
    "ConstantOfShape", "Equal", "Where", "Expand", "Mod", "Range", "ScatterND", "ReduceMax", "ReduceMin", "ReduceExtGrad", "Resize", "ResizeGrad", "Tile", "TileGrad", "RNN", "RNNGrad", "If",
    "TorchSum", "NormalNoise", "LimeSimilarity", "HostCall", "MapRows",
};
_Static_assert(sizeof cg_op_names / sizeof cg_op_names[0] == CG_OP_COUNT, "cg_op_names out of step with cg_op");

/* What a host function said when it failed (cattr_callback_fail), per thread: the kernel and the shape rule clear it
 * before they call the function and read it after. */
static _Thread_local char tl_host_msg[1024];
static _Thread_local bool tl_host_set;

void cattr_callback_fail(const char *message) {
    snprintf(tl_host_msg, sizeof tl_host_msg, "%s", message ? message : "");
    tl_host_set = true;
}

const char *cg_host_error(void) { return tl_host_set ? tl_host_msg : NULL; }

void cg_host_clear_error(void) {
    tl_host_set = false;
    tl_host_msg[0] = '\0';
}

cg_attrs cg_attrs_default(void) {
    cg_attrs a;
    memset(&a, 0, sizeof a);
    a.alpha = 1.0;
    a.beta = 1.0;
    a.group = 1;
    for (int i = 0; i < CG_MAX_SP; i++) {
        a.stride[i] = 1;
        a.dilation[i] = 1;
        a.kernel[i] = 1;
    }
    return a;
}
