/* similarity.c - Lime's default sample weight as Captum computes it (captum.attr._core.lime
 * get_exp_kernel_similarity_function): the flattened original and perturbed inputs cast to float32, the distance
 * between them, exp(-d^2 / (2 width^2)). Shared by the LimeSimilarity op's kernels on every backend. */
#include "ops/ops.h"

#include <math.h>

#define COSINE_EPS 1e-8 /* torch.nn.CosineSimilarity's eps */

static inline float at(const void *v, cattr_dtype dt, int64_t k) {
    return dt == CATTR_FLOAT32 ? ((const float *)v)[k] : (float)((const double *)v)[k];
}

double cx_lime_similarity(const void *o, const void *p, cattr_dtype dt, int64_t n, double width, bool euclidean) {
    if (euclidean) { /* torch.norm of the float32 difference (accumulated in double, as torch's CPU norm), then the
                      * exponential kernel in float32 */
        double ss = 0;
        for (int64_t k = 0; k < n; k++) {
            float d = at(o, dt, k) - at(p, dt, k);
            ss += (double)d * d;
        }
        float d = (float)sqrt(ss);
        float t = -(d * d) / (float)(2.0 * width * width);
        return expf(t);
    }
    /* torch's cosine_similarity: each vector divided by max(its norm, eps), then the dot product; d = 1 - cos */
    double n1 = 0, n2 = 0;
    for (int64_t k = 0; k < n; k++) {
        float a = at(o, dt, k), b = at(p, dt, k);
        n1 += (double)a * a;
        n2 += (double)b * b;
    }
    float r1 = (float)sqrt(n1), r2 = (float)sqrt(n2);
    r1 = r1 < (float)COSINE_EPS ? (float)COSINE_EPS : r1;
    r2 = r2 < (float)COSINE_EPS ? (float)COSINE_EPS : r2;
    double dot = 0;
    for (int64_t k = 0; k < n; k++) dot += (double)((at(o, dt, k) / r1) * (at(p, dt, k) / r2));
    float d = 1.0f - (float)dot;
    float t = -(d * d) / (float)(2.0 * width * width);
    return (float)exp((double)t);
}
