/* torch_sum_impl.h - the body of cx_torch_sum (torch_sum.c), written once for every place that sums like torch's CPU
 * kernel: the includer defines the type TS_SRC and TS_GET(src, i), element i of the column being summed, before
 * including this file (torch_sum.c: a double array; the CUDA backend: a strided view of device memory). Functions are
 * static and CX_HD. */
#include "core/hd.h"

static inline CX_HD double ts_rnd(cattr_dtype dt, double v) { return dt == CATTR_FLOAT32 ? (double)(float)v : v; }

/* multi_row_sum for one column: levels of 2^max(4, ceil(log2 n)/4) terms added into the next level up. */
static inline CX_HD double ts_cascade(cattr_dtype dt, TS_SRC src, int64_t at, int64_t stride, int64_t n) {
    enum { LEVELS = 4 };
    int64_t power = 4, lg = 0;
    while (((int64_t)1 << lg) < n) lg++;
    if (lg / LEVELS > power) power = lg / LEVELS;
    int64_t step = (int64_t)1 << power, mask = step - 1;
    double acc[LEVELS] = {0, 0, 0, 0};
    int64_t i = 0;
    while (i + step <= n) {
        for (int64_t j = 0; j < step; j++, i++) acc[0] = ts_rnd(dt, acc[0] + TS_GET(src, at + i * stride));
        for (int l = 1; l < LEVELS; l++) {
            acc[l] = ts_rnd(dt, acc[l] + acc[l - 1]);
            acc[l - 1] = 0;
            if ((i & (mask << (l * power))) != 0) break;
        }
    }
    for (; i < n; i++) acc[0] = ts_rnd(dt, acc[0] + TS_GET(src, at + i * stride));
    for (int l = 1; l < LEVELS; l++) acc[0] = ts_rnd(dt, acc[0] + acc[l]);
    return acc[0];
}

/* row_sum: four interleaved cascades (instruction-level parallelism), the tail into the first, then combined. */
static inline CX_HD double ts_row(cattr_dtype dt, TS_SRC src, int64_t at, int64_t stride, int64_t n) {
    int64_t n4 = n / 4;
    double part[4];
    for (int k = 0; k < 4; k++) part[k] = ts_cascade(dt, src, at + k * stride, 4 * stride, n4);
    for (int64_t i = n4 * 4; i < n; i++) part[0] = ts_rnd(dt, part[0] + TS_GET(src, at + i * stride));
    for (int k = 1; k < 4; k++) part[0] = ts_rnd(dt, part[0] + part[k]);
    return part[0];
}

/* torch picks the loop by layout and vector width (W lanes: AVX2's 8 floats or 4 doubles): one column (per == 1) is
 * a contiguous reduction, summed in W lanes of row_sum each; otherwise columns are reduced four (or 4*W) at a time
 * with multi_row_sum, the leftover columns one at a time with row_sum. Column k of per, m values. */
static inline CX_HD double ts_sum(cattr_dtype dt, TS_SRC src, int64_t m, int64_t k, int64_t per) {
    int64_t W = dt == CATTR_FLOAT32 ? 8 : 4;
    if (per == 1) {
        if (m < W) return ts_row(dt, src, 0, 1, m);
        int64_t rows = m / W;
        double lanes[8], acc = 0;
        for (int64_t l = 0; l < W; l++) lanes[l] = ts_row(dt, src, l, W, rows);
        for (int64_t i = rows * W; i < m; i++) acc = ts_rnd(dt, acc + TS_GET(src, i));
        for (int64_t l = 0; l < W; l++) acc = ts_rnd(dt, acc + lanes[l]);
        return acc;
    }
    int64_t group = per >= W ? 4 * W : 4;
    return k < per / group * group ? ts_cascade(dt, src, 0, 1, m) : ts_row(dt, src, 0, 1, m);
}
