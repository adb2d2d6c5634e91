/* optable.c - what is known of each op apart from its shape rule and kernels (see docs/ADDING.md): whether it is
 * differentiable, which ops the executor runs itself, and which ops the cuda backend runs on the host.
 * tests/test_op_table.c holds every op to these lists and to its rule and kernel cases. */
#include "ops/ops.h"

bool cx_op_differentiable(cg_op op) {
    switch (op) {
    /* the gradient ops autodiff emits without a rule of their own (a gradient of a gradient runs through ReluGrad,
     * LeakyReluGrad, SigmoidGrad, TanhGrad, ReshapeLike and ZerosLike only: cattr_explainer_param_hvp) */
    case CG_SOFTMAX_GRAD: case CG_CLIP_GRAD: case CG_MAXPOOL_GRAD: case CG_AVGPOOL_GRAD: case CG_GAP_GRAD: case CG_CONCAT_GRAD:
    case CG_GATHER_GRAD: case CG_SLICE_GRAD: case CG_BATCHNORM_GRAD: case CG_RMSNORM_GRAD: case CG_ATTENTION_GRAD:
    case CG_LOGSOFTMAX_GRAD: case CG_SWIGLU_GRAD: case CG_SEQ_PICK_GRAD: case CG_ABS_GRAD: case CG_REDUCE_GRAD:
    case CG_UNARY_GRAD: case CG_BINARY_GRAD: case CG_PAD_GRAD: case CG_REDUCE_EXT_GRAD: case CG_RESIZE_GRAD:
    case CG_TILE_GRAD: case CG_RNN_GRAD:
    /* the rules' ops (DeepLift's and LRP's backward, emitted by src/attr/rules.c) */
    case CG_DL_DELTA: case CG_DL_RESCALE: case CG_DL_CENTER: case CG_DL_MAXPOOL: case CG_LRP_DIV:
        return false;
    default:
        return (unsigned)op < (unsigned)CG_OP_COUNT;
    }
}

bool cx_op_run_by_executor(cg_op op) { return op == CG_MAP_ROWS; }

bool cx_op_cuda_on_host(cg_op op) {
    switch (op) {
    case CG_DL_MAXPOOL: case CG_PAD_GRAD: case CG_MOD: case CG_RANGE: case CG_SCATTER_ND: case CG_REDUCE_MAX:
    case CG_REDUCE_MIN: case CG_REDUCE_EXT_GRAD: case CG_RESIZE: case CG_RESIZE_GRAD: case CG_RNN: case CG_RNN_GRAD:
    case CG_IF: case CG_LIME_SIMILARITY:
    case CG_HOST_CALL: /* a host function, by definition */
        return true;
    default:
        return false;
    }
}
