/* op.h - what an op is: the op set of the IR (cg_op) with its names, the attributes a node carries (cg_attrs), and a
 * node (cg_node: an op over value ids with its attributes). The graph (graph/graph.h) holds nodes; the shape rules
 * (ops.h), the autodiff rules and the backends' kernels read them. Nothing here knows a graph: ops/ sits below
 * graph/ in the layers of docs/ARCHITECTURE.md. How to add an op: docs/ADDING.md.
 */
#ifndef CATTR_OPS_OP_H
#define CATTR_OPS_OP_H

#include "core/core.h"

/* Keep in step with cg_op_names[] in op.c (a static assertion checks the count). */
typedef enum cg_op {
    /* ---- forward ops (ONNX) ---- */
    CG_IDENTITY = 0, /* also Dropout in inference */
    CG_GEMM,         /* Y = alpha * op(A) op(B) + beta * C ; trans_a, trans_b, alpha, beta; C optional (n_in 2|3) */
    CG_MATMUL,       /* numpy matmul with batch broadcasting */
    CG_CONV,         /* X, W, [B]; nsp, kernel, stride, pad, dilation, group */
    CG_MAXPOOL,      /* nsp, kernel, stride, pad, dilation, ceil_mode */
    CG_AVGPOOL,      /* nsp, kernel, stride, pad, ceil_mode, count_include_pad */
    CG_GLOBALAVGPOOL,
    CG_RELU,
    CG_LEAKYRELU, /* alpha */
    CG_SIGMOID,
    CG_TANH,
    CG_SOFTMAX, /* axis (normalised to >= 0 by the planner) */
    CG_CLIP,    /* alpha = min, beta = max (+-INFINITY when absent) */
    CG_ADD,     /* numpy broadcasting for the binary ops; index 1 (autodiff, in graphs with If): zeros of an input's
                 * shape plus its gradient, which the planner reduces to one of the two (exec/plan.c, If) */
    CG_SUB,
    CG_MUL,
    CG_DIV,
    CG_NEG,
    CG_RESHAPE,   /* ints = target shape (ONNX rules: 0 copies unless allowzero, one -1 inferred) */
    CG_FLATTEN,   /* axis */
    CG_CONCAT,    /* axis; n_in inputs */
    CG_UNSQUEEZE, /* ints = axes */
    CG_SQUEEZE,   /* ints = axes (n_ints 0: every dim of size 1) */
    CG_TRANSPOSE, /* ints = perm (n_ints 0: reverse) */
    CG_GATHER,    /* data, indices (int64); axis */
    CG_SLICE,     /* ints = [starts(n), ends(n), axes(n), steps(n)], n = n_ints / 4 */
    CG_BATCHNORM, /* X, scale, bias, mean, var; alpha = epsilon */
    /* ---- internal ops emitted by autodiff and methods ---- */
    CG_RELU_GRAD,       /* (X or Y, gY) -> gY * (X > 0); the standard rule passes Y = relu(X) (same mask) */
    CG_LEAKYRELU_GRAD,  /* (X, gY); alpha */
    CG_SIGMOID_GRAD,    /* (Y, gY) -> gY * Y * (1 - Y) */
    CG_TANH_GRAD,       /* (Y, gY) -> gY * (1 - Y^2) */
    CG_SOFTMAX_GRAD,    /* (Y, gY); axis -> Y * (gY - sum(gY * Y, axis)) */
    CG_CLIP_GRAD,       /* (X, gY); alpha, beta -> gY where min <= X <= max (torch's rule) */
    CG_MAXPOOL_GRAD,    /* (X, gY); pool attrs -> gradient routed to the first maximum of each window */
    CG_AVGPOOL_GRAD,    /* (X, gY); pool attrs */
    CG_GAP_GRAD,        /* (X, gY) */
    CG_CONV_GRAD_INPUT, /* (X, W, gY); conv attrs -> dX (X used for its shape only) */
    CG_RESHAPE_LIKE,    /* (gY, X) -> gY reshaped to X's shape */
    CG_REDUCE_SUM_LIKE, /* (gY, X) -> gY summed over the broadcast dims down to X's shape */
    CG_CONCAT_GRAD,     /* (gY, X0..Xn-1); axis, index -> the slice of gY that belongs to input `index` */
    CG_GATHER_GRAD,     /* (gY, indices, X); axis -> scatter-add into zeros of X's shape; each element the exact sum
                         * of its contributions rounded once (float32 summed in double) */
    CG_SLICE_GRAD,      /* (gY, X); slice ints -> zeros of X's shape with gY written into the slice */
    CG_BATCHNORM_GRAD,  /* (gY, scale, var); alpha = epsilon -> gY * scale / sqrt(var + eps) per channel */
    CG_ZEROS_LIKE,      /* (X) -> zeros of X's shape */
    /* transformer ops (src/models/decoder.c); activations [..., T, C], sequence in the second-to-last dim */
    CG_RMSNORM,         /* (X, W); alpha = eps -> w * x / sqrt(mean(x^2) + eps) over groups of len(W) of the last dim */
    CG_RMSNORM_GRAD,    /* (X, W, gY); alpha = eps -> gX */
    CG_ROPE,            /* (X, inv_freq[, int64 positions of the rows]); ints[0] = head_dim; index 1: the inverse
                         * rotation -> rotate-half RoPE (row r at position r mod T without positions) */
    CG_ATTENTION,       /* (Q, K, V[, prefix K, prefix V, int64 segments [S, 3]]); ints = {heads, kv heads, head_dim}
                         * -> causal grouped-query attention (ragged: segments of [1, N, C] continuing their prefixes) */
    CG_ATTENTION_GRAD,  /* (Q, K, V, gO) -> [dQ | dK | dV] packed along the last dim */
    CG_LOGSOFTMAX,      /* (X) -> log-softmax over the last dim */
    CG_LOGSOFTMAX_GRAD, /* (Y, gY) -> gY - exp(Y) * sum(gY) */
    CG_SWIGLU,          /* (G, U) -> G * sigmoid(G) * U (the gated MLP's activation, one pass; keeps only G and U) */
    CG_SWIGLU_GRAD,     /* (G, U, gY); index 0: dG, 1: dU */
    CG_SEQ_PICK,        /* (X [S, L, C], pos int64 [S] or [S, P]) -> [S, P, C]: row s at positions pos[s, :] */
    CG_SEQ_PICK_GRAD,   /* (gY [S, P, C], pos, X) -> zeros of X's shape with gY added at those positions */
    /* rule ops (src/attr/rules.c). The DeepLift ops see a batch of 2N rows: N actual rows, then their N references
     * (Captum's cat([x, x'])); "cat2(v)" below is [v; v]. */
    CG_DL_DELTA,        /* (X) -> cat2(X[:N] - X[N:]) */
    CG_DL_RESCALE,      /* (G0, gY, dY, dX); alpha = eps -> where(|dX| < eps, G0, gY * dY / dX) */
    CG_DL_CENTER,       /* (U) -> U - sum(U) / numel(U) (DeepLift's softmax rule) */
    CG_DL_MAXPOOL,      /* (X, Y, gY, G0); pool attrs, alpha = eps -> DeepLift's max-pool multipliers (see kernel) */
    CG_LRP_DIV,         /* (gY, Z); alpha = eps -> gY / (Z + eps * sign(Z)), sign(0) = +1 */
    /* method ops (src/attr/perturbation.c) */
    CG_WHERE_ID,        /* (A, B, M int64 [R, ...], id int64 [R]) -> M[r, ...] == id[r] (index 1: M[r, ...] <= id[r])
                         * ? B : A, of M's shape (A and B
                         * broadcast to it); with row maps (A, B, M, id, arow, brow, mrow; each map int64 [R] or
                         * absent: row r itself) row r reads A[arow[r]], B[brow[r]], M[mrow[r]] (A and B then of M's
                         * row shape) and the result is [R, *M.shape[1:]]: the perturbation methods' inputs */
    CG_PLACE_ROWS,      /* (acc [B, ...], v [R], ord int64 [1 or B, ...], q0 int64 [1]) -> acc with element (b, k) replaced
                         * by v[(ord[b, k] - q0) * B + b] where 0 <= ord - q0 < R / B: a chunk of perturbation states'
                         * differences placed on the elements of their features */
    CG_ABS,             /* |X| (ONNX Abs; Saliency's absolute gradient) */
    CG_ABS_GRAD,        /* (X, gY) -> gY * sign(X), sign(0) = 0 (torch's rule) */
    CG_REDUCE_SUM,      /* (X); ints = axes (none: every axis), index = keepdims (ONNX ReduceSum) */
    CG_REDUCE_MEAN,     /* (X); as ReduceSum, divided by the number of values each output sums (ONNX ReduceMean) */
    CG_REDUCE_GRAD,     /* (gY, X); ints and index of the reduction, axis = 1 for a mean -> gY broadcast back to X's
                         * shape (divided by the count for a mean) */
    /* elementwise functions of exported models (ops/elementwise.h defines them and their derivatives) */
    CG_SQRT,
    CG_EXP,
    CG_LOG,
    CG_ERF,
    CG_RECIPROCAL,
    CG_HARDSIGMOID, /* alpha, beta */
    CG_HARDSWISH,
    CG_SOFTPLUS,
    CG_ELU,         /* alpha */
    CG_SELU,        /* alpha, beta = gamma */
    CG_GELU,        /* index 1: the tanh approximation */
    CG_UNARY_GRAD,  /* (X, gY); index = the forward op (one of the above), its alpha, beta and approximation in axis ->
                     * gY * f'(X) */
    CG_POW,         /* numpy broadcasting, as Add */
    CG_MAX,
    CG_MIN,
    CG_BINARY_GRAD, /* (A, B, gY); axis = the forward op (Pow, Max, Min), index = the operand (0: A, 1: B) -> the
                     * operand's gradient at the broadcast shape (ReduceSumLike brings it to the operand's shape) */
    CG_PAD,         /* (X); ints = ONNX pads [begin per dim, end per dim] (negative: crop), index = mode (0 constant,
                     * 1 reflect, 2 edge), alpha = the constant */
    CG_PAD_GRAD,    /* (gY, X); Pad's attributes -> each element of X gets the gradients of the outputs it fills */
    CG_SHAPE,       /* (X) -> int64 [dims]: X's shape, dims start..end of ints [start, end] (none: all; index 1: ONNX Size, the
                     * element count, a scalar); the planner
                     * folds it where a shape input reads it (exec/plan.c) */
    CG_CAST,        /* (X); index 1: to int64 (truncating), 0: to float (X's float dtype, float32 from int64) */
    CG_CONSTANT_OF_SHAPE, /* (shape); ints = the shape (folded when planning), alpha = the value, index 1: int64 */
    CG_EQUAL,       /* (A, B) -> int64 0/1, numpy broadcasting; index = the relation (ops/elementwise.h, cx_compare: ==,
                     * >, <, >=, <=, and, or, xor) */
    CG_WHERE,       /* (C int64, X, Y) -> X where C != 0 else Y, numpy broadcasting of the three */
    CG_EXPAND,      /* (X[, shape]); ints = the shape (folded when planning) -> X broadcast with it (ONNX Expand) */
    CG_MOD,         /* (A, B), numpy broadcasting, float or int64; index 1: C's fmod (the sign of A), 0: the sign of B
                     * (ONNX Mod's fmod attribute) */
    CG_RANGE,       /* ([start, limit, delta]); ints = {start, limit, delta} (folded when planning) -> int64 [n] */
    CG_SCATTER_ND,  /* (data, indices int64 [..., k], updates) -> data with updates written at the indexed slices
                     * (ONNX ScatterND without reduction) */
    CG_REDUCE_MAX,  /* (X); as ReduceSum: the largest value (NaN when one is NaN) */
    CG_REDUCE_MIN,  /* (X); as ReduceSum: the smallest value */
    CG_REDUCE_EXT_GRAD, /* (gY, X, Y); ints and index of the reduction -> gY shared evenly among the elements equal
                         * to their reduction's result (torch's amax / amin gradient), zero elsewhere */
    CG_RESIZE,      /* (X[, sizes]) of rank 3 or 4, the last 1 or 2 dims resized; index = mode (0 nearest, 1 linear),
                     * axis = coordinate transformation (0 half_pixel, 1 asymmetric, 2 align_corners,
                     * 3 pytorch_half_pixel), trans_a = nearest rounding (0 round_prefer_floor, 1 round_prefer_ceil,
                     * 2 floor, 3 ceil); the output shape in ints (sizes, folded when planning) or scales in alpha
                     * (dim -2 of 4, dim -1 of 3) and beta (dim -1 of 4) (ops.h, cx_resize_src) */
    CG_RESIZE_GRAD, /* (gY, X); Resize's attributes -> each element of X gets the weighted gradients of the outputs
                     * that read it */
    CG_TILE,        /* (X[, repeats]); ints = the repeats per dim (folded when planning) -> X tiled (ONNX Tile) */
    CG_TILE_GRAD,   /* (gY, X) -> gX: the sum of gY over the copies of each element (repeats = gY's dims / X's) */
    CG_RNN,         /* (X [T, B, I], W [D, G*H, I], R [D, G*H, H], bias [D, 2*G*H] or -1, h0 [D, B, H] or -1, c0 or -1);
                     * index 0: LSTM (G = 4, gates i o f c), 1: GRU (G = 3, gates z r h); ints = {H, direction (0
                     * forward, 1 reverse, 2 both; D = 2 for both), linear_before_reset} -> the states [T, D, B, S]:
                     * the hidden state h (S = H; LSTM: h then the cell state c, S = 2H) after each step, in X's time
                     * order (ONNX's LSTM/GRU with the default activations, unrolled over the concrete T) */
    CG_RNN_GRAD,    /* (gS, S, X, W, R, bias, h0, c0); RNN's index and ints, ints[3] = which gradient (0: X, 1: h0,
                     * 2: c0) -> that gradient, through time */
    CG_IF,          /* (C, A, B): A when C's one element is non-zero, else B; A or B may be absent (-1): zeros of the
                     * other's shape (the gradients autodiff gives the two branches). ONNX If, its branches imported
                     * into the graph: the planner folds C from shapes and constants and keeps only the branch taken
                     * (exec/plan.c); the kernel runs an If whose condition is known only at run time */
    CG_TORCH_SUM,   /* (X); ints = the one axis, index = keepdims: ReduceSum over that axis in torch's CPU order and
                     * X's dtype (cx_torch_sum: X as [outer, m, per], column k of per), the order Captum's sums round
                     * in (convergence deltas, means over samples). Gradient: ReduceGrad */
    CG_NORMAL_NOISE, /* (S int64 [R], I int64 [R]); ints = the dims of one row, axis = the seed (its 64 bits), alpha =
                      * the standard deviation -> [R, ints...] in the call's float dtype: element k of row r is
                      * float32(alpha * float32(cx_rng_normal_at(seed, S[r], I[r] + k))) (0 when alpha is 0), the
                      * Gaussian noise NoiseTunnel adds, drawn where it is used. No gradient (nothing float in) */
    CG_LIME_SIMILARITY, /* (X [R, n], P [R, n]); alpha = the kernel width, index 1: the euclidean distance, else the
                         * cosine -> [R] in X's dtype: row r's Lime sample weight cx_lime_similarity(X[r], P[r]),
                         * Captum's default similarity in float32. No gradient (a weight of the fit) */
    CG_HOST_CALL,   /* (X0..Xn-1) -> a.host's function of the inputs (cattr_model_new_callback: a forward pass the caller
                     * computes), the shape from its shape function, float outputs in the call's float dtype; run on
                     * the host, on the thread that called cattr. index 1: the gradient of such a node (autodiff's
                     * rule), which has none: its shape rule refuses it, so only a method that plans a gradient fails */
    CG_MAP_ROWS,    /* (X0..Xn-1) -> a.map's body graph run on the inputs in passes of map->in_rows[k] rows of input k
                     * (its output's passes stacked along dim 0): a model exported with a fixed batch that
                     * cx_model_rebatch could not re-batch. Planned once per plan (exec/plan.c runs the body's own plan
                     * for each pass); its gradient is a MapRows of the body's gradient graph (map->grad) */
    CG_OP_COUNT
} cg_op;

extern const char *const cg_op_names[CG_OP_COUNT];

#define CG_MAX_IN 8
#define CG_MAX_SP 3
#define CG_MAX_INTS 32
#define CG_MAX_IN_MAP CG_MAX_IN

/* The host function of a HostCall node (cattr_model_new_callback): owned by the model that made it (cattr_model_free
 * releases it), borrowed by the node and by every copy of it (the methods' derived graphs copy the model's nodes), so
 * the model outlives them, as it outlives the graphs that share its constants. */
typedef struct cg_host_fn {
    char *name;                     /* in messages: "host function '<name>'" */
    cattr_callback_fn fn;           /* the forward pass */
    cattr_callback_shape_fn shape;  /* its output shape for given input shapes */
    void *user;
    void (*release)(void *user);    /* may be NULL */
} cg_host_fn;

/* The message a host function left with cattr_callback_fail on this thread since cg_host_clear_error, or NULL when it
 * left none. */
const char *cg_host_error(void);
void cg_host_clear_error(void);

/* The body of a MapRows node: one pass of a model whose batch is fixed (src/models/rebatch.c). Owned by the model
 * that made it, borrowed by the nodes and every copy of them, as cg_host_fn. */
typedef struct cg_map {
    const struct cg_graph *g;      /* the body graph (the model as exported) */
    int out;                       /* which of g's outputs the node gives */
    int n_in;                      /* the node's inputs: g's inputs in order */
    int64_t in_rows[CG_MAX_IN_MAP]; /* rows of input k per pass (its dim 0 in one pass) */
    int in_ndim[CG_MAX_IN_MAP];
    int64_t in_shape[CG_MAX_IN_MAP][CATTR_MAX_DIMS]; /* one pass's input shapes */
    int int_in[CG_MAX_IN_MAP];     /* 1: an int64 input */
    int out_ndim;
    int64_t out_shape[CATTR_MAX_DIMS]; /* one pass's output */
    const struct cg_map *grad[CG_MAX_IN_MAP]; /* per input: the map of its gradient (inputs X0..Xn-1 then the output's
                                               * gradient), NULL when it has none (an int input; a gradient map) */
} cg_map;

typedef struct cg_attrs {
    int64_t axis;
    int64_t index;
    int trans_a, trans_b;
    double alpha, beta;
    int nsp; /* number of spatial dims (Conv, pools) */
    int64_t kernel[CG_MAX_SP], stride[CG_MAX_SP], dilation[CG_MAX_SP];
    int64_t pad[2 * CG_MAX_SP]; /* begins for each spatial dim, then ends */
    int64_t group;
    int ceil_mode;
    int auto_pad; /* Conv and the pools: 1 SAME_UPPER, 2 SAME_LOWER: the pads follow from the input's shape, the output
                   * ceil(in / stride) (cx_geom_init); 0: the pads above */
    int count_include_pad;
    int allowzero;
    int fuse_relu; /* set by the planner only: apply ReLU to the result (a fused Relu node) */
    int bf16;      /* MatMul/Gemm by a constant 2-D weight: bfloat16 inputs, float32 accumulation (precision "high") */
    int keep_precision; /* set by a loader: cg_mark_bf16 leaves this product at full precision (an LLM's output head) */
    const cg_host_fn *host; /* HostCall: the host function (borrowed) */
    const cg_map *map;      /* MapRows: the body (borrowed) */
    int n_ints;
    int64_t ints[CG_MAX_INTS];
} cg_attrs;

/* Default attributes: alpha = beta = 1, group 1, strides and dilations 1, everything else 0. */
cg_attrs cg_attrs_default(void);

typedef struct cg_node {
    cg_op op;
    char *name; /* ONNX node name or a generated one */
    int n_in;
    int in[CG_MAX_IN]; /* value ids; -1 for an absent optional input */
    int out;           /* value id */
    cg_attrs a;
} cg_node;

#endif
