/* torch_sum.c - a sum as torch's CPU sum kernel computes it (ATen's ReduceOps SumKernel.cpp, cascade_sum), in the
 * dtype of the values: the order Captum's sums round in (its convergence deltas, NoiseTunnel's and DeepLiftShap's
 * means over samples), shared by the TorchSum kernel of every backend and the host code that sums on the host. The
 * algorithm is torch_sum_impl.h (the CUDA backend includes it too). */
#include "ops.h"

#define TS_SRC const double *
#define TS_GET(src, i) ((src)[i])
#include "ops/torch_sum_impl.h"

double cx_torch_sum(cattr_dtype dt, const double *col, int64_t m, int64_t k, int64_t per) {
    return ts_sum(dt, col, m, k, per);
}
