/* torch_sum.c - a sum as torch's CPU sum kernel computes it (ATen's ReduceOps SumKernel.cpp, cascade_sum), in the
 * dtype of the values: the order Captum's sums round in (its convergence deltas, NoiseTunnel's and DeepLiftShap's
 * means over samples), shared by the TorchSum kernel of every backend and the host code that sums on the host. */
#include "ops.h"

static double rnd(cattr_dtype dt, double v) { return dt == CATTR_FLOAT32 ? (double)(float)v : v; }

/* multi_row_sum for one column: levels of 2^max(4, ceil(log2 n)/4) terms added into the next level up. */
static double cascade_sum(cattr_dtype dt, const double *v, int64_t stride, int64_t n) {
    enum { LEVELS = 4 };
    int64_t power = 4, lg = 0;
    while (((int64_t)1 << lg) < n) lg++;
    if (lg / LEVELS > power) power = lg / LEVELS;
    int64_t step = (int64_t)1 << power, mask = step - 1;
    double acc[LEVELS] = {0};
    int64_t i = 0;
    while (i + step <= n) {
        for (int64_t j = 0; j < step; j++, i++) acc[0] = rnd(dt, acc[0] + v[i * stride]);
        for (int l = 1; l < LEVELS; l++) {
            acc[l] = rnd(dt, acc[l] + acc[l - 1]);
            acc[l - 1] = 0;
            if ((i & (mask << (l * power))) != 0) break;
        }
    }
    for (; i < n; i++) acc[0] = rnd(dt, acc[0] + v[i * stride]);
    for (int l = 1; l < LEVELS; l++) acc[0] = rnd(dt, acc[0] + acc[l]);
    return acc[0];
}

/* row_sum: four interleaved cascades (instruction-level parallelism), the tail into the first, then combined. */
static double row_sum(cattr_dtype dt, const double *v, int64_t stride, int64_t n) {
    int64_t n4 = n / 4;
    double part[4];
    for (int k = 0; k < 4; k++) part[k] = cascade_sum(dt, v + k * stride, 4 * stride, n4);
    for (int64_t i = n4 * 4; i < n; i++) part[0] = rnd(dt, part[0] + v[i * stride]);
    for (int k = 1; k < 4; k++) part[0] = rnd(dt, part[0] + part[k]);
    return part[0];
}

/* torch picks the loop by layout and vector width (W lanes: AVX2's 8 floats or 4 doubles): one column (per == 1) is
 * a contiguous reduction, summed in W lanes of row_sum each; otherwise columns are reduced four (or 4*W) at a time
 * with multi_row_sum, the leftover columns one at a time with row_sum. */
double cx_torch_sum(cattr_dtype dt, const double *col, int64_t m, int64_t k, int64_t per) {
    int64_t W = dt == CATTR_FLOAT32 ? 8 : 4;
    if (per == 1) {
        if (m < W) return row_sum(dt, col, 1, m);
        int64_t rows = m / W;
        double lanes[8], acc = 0;
        for (int64_t l = 0; l < W; l++) lanes[l] = row_sum(dt, col + l, W, rows);
        for (int64_t i = rows * W; i < m; i++) acc = rnd(dt, acc + col[i]);
        for (int64_t l = 0; l < W; l++) acc = rnd(dt, acc + lanes[l]);
        return acc;
    }
    int64_t group = per >= W ? 4 * W : 4;
    return k < per / group * group ? cascade_sum(dt, col, 1, m) : row_sum(dt, col, 1, m);
}
