/* decoder.cu - the CUDA backend's transformer ops: RoPE and causal grouped-query attention with its gradient
 * (segments with a prefix, FeatureAblation's prefix reuse, run on the host for now). The attention kernels keep no
 * [heads x T x T] matrix: each output element recomputes the scores it needs from a row's statistics (its maximum
 * and softmax sum, and for the gradient sum_u p_u dp_u), which a first kernel writes, three doubles per query row.
 * Arithmetic in double, as the reference kernels (check_kernels.c). */
#include "backend/cuda/cu.h"

extern "C" {
#include "ops/ops.h"
}

/* RoPE: each head's halves rotated by position * inv_freq[m] (index 1: the inverse rotation); row r at position
 * pos[r], or r mod T without positions. One thread per (row, head, m). */
static cattr_status rope(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    int nd = in[0].ndim;
    int64_t d = n->a.ints[0], half = d / 2, C = in[0].shape[nd - 1], T = in[0].shape[nd - 2];
    int64_t rows = C ? cx_view_numel(&in[0]) / C : 0, heads = d ? C / d : 0;
    bool has_pos = n->n_in > 2 && in[2].data;
    if (has_pos && cx_view_numel(&in[2]) != rows)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "node '%s': %lld positions for %lld rows", n->name,
                       (long long)cx_view_numel(&in[2]), (long long)rows);
    dv x = cu_dv(&in[0]), f = cu_dv(&in[1]), y = cu_dv(out), pos = has_pos ? cu_dv(&in[2]) : y;
    double sgn = n->a.index ? -1 : 1;
    int *err = c->err;
    cu_each(c, rows * heads * half, CU_FN {
        int64_t m = i % half, h = (i / half) % heads, r = i / (half * heads);
        int64_t t = has_pos ? ldi(pos, r) : r % T;
        if (t < 0) {
            cu_flag(err, CU_ERR_ROPE_POS);
            t = 0;
        }
        double angle = (double)t * ld(f, m), cs = cos(angle), sn = sgn * sin(angle);
        int64_t i1 = r * C + h * d + m, i2 = i1 + half;
        double x1 = ld(x, i1), x2 = ld(x, i2);
        sto(y, i1, x1 * cs - x2 * sn);
        sto(y, i2, x2 * cs + x1 * sn);
    });
    return CATTR_OK;
}

/* The attention geometry by value: S sequences of T rows; Q rows of nh heads, K and V rows of nkv heads, d each. */
typedef struct ageo {
    int64_t S, T, nh, nkv, d, grp, cq, ck;
    double scale;
} ageo;

static inline CX_HD double att_score(const ageo &a, const dv &q, const dv &k, int64_t s, int64_t j, int64_t t,
                                     int64_t u) {
    int64_t qb = (s * a.T + t) * a.cq + j * a.d, kb = (s * a.T + u) * a.ck + (j / a.grp) * a.d;
    double dot = 0;
    for (int64_t e = 0; e < a.d; e++) dot += ld(q, qb + e) * ld(k, kb + e);
    return dot * a.scale;
}

/* Row statistics of query t of head j in sequence s: st[0] the maximum score, st[1] the softmax's sum; with gO
 * (grad), st[2] = sum_u p_u dp_u with dp_u = gO_t . v_u. */
static void att_stats(cu_ctx *c, const ageo &a, const dv &q, const dv &k, const dv &v, const dv *go, double *stats) {
    bool grad = go != NULL;
    dv g = grad ? *go : q;
    cu_each(c, a.S * a.nh * a.T, CU_FN {
        int64_t t = i % a.T, j = (i / a.T) % a.nh, s = i / (a.T * a.nh);
        double mx = -INFINITY, sum = 0, pdp = 0;
        for (int64_t u = 0; u <= t; u++) {
            double sc = att_score(a, q, k, s, j, t, u);
            if (sc > mx) mx = sc;
        }
        for (int64_t u = 0; u <= t; u++) sum += exp(att_score(a, q, k, s, j, t, u) - mx);
        if (grad) {
            int64_t gb = (s * a.T + t) * a.cq + j * a.d;
            for (int64_t u = 0; u <= t; u++) {
                int64_t vb = (s * a.T + u) * a.ck + (j / a.grp) * a.d;
                double dp = 0;
                for (int64_t e = 0; e < a.d; e++) dp += ld(g, gb + e) * ld(v, vb + e);
                pdp += exp(att_score(a, q, k, s, j, t, u) - mx) / sum * dp;
            }
        }
        stats[3 * i] = mx;
        stats[3 * i + 1] = sum;
        stats[3 * i + 2] = pdp;
    });
}

static cattr_status attention(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    int nd = in[0].ndim;
    ageo a;
    a.nh = n->a.ints[0], a.nkv = n->a.ints[1], a.d = n->a.ints[2], a.grp = a.nkv ? a.nh / a.nkv : 1;
    a.T = in[0].shape[nd - 2], a.S = a.T ? cx_view_numel(&in[0]) / (a.T * a.nh * a.d) : 0;
    a.cq = a.nh * a.d, a.ck = a.nkv * a.d, a.scale = 1 / sqrt((double)a.d);
    double *stats = (double *)cu_scratch(c, (size_t)(3 * a.S * a.nh * a.T + 1) * sizeof(double));
    if (!stats) return cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': out of device memory", n->name);
    dv q = cu_dv(&in[0]), k = cu_dv(&in[1]), v = cu_dv(&in[2]), y = cu_dv(out);
    bool grad = n->op == CG_ATTENTION_GRAD;
    dv go = grad ? cu_dv(&in[3]) : y;
    att_stats(c, a, q, k, v, grad ? &go : NULL, stats);
    if (!grad) { /* out[s, t, j, e] = sum_u p_u v_u */
        cu_each(c, cx_view_numel(out), CU_FN {
            int64_t e = i % a.d, j = (i / a.d) % a.nh, t = (i / a.cq) % a.T, s = i / (a.cq * a.T);
            const double *rs = stats + 3 * ((s * a.nh + j) * a.T + t);
            double o = 0;
            for (int64_t u = 0; u <= t; u++)
                o += exp(att_score(a, q, k, s, j, t, u) - rs[0]) / rs[1] *
                     ld(v, (s * a.T + u) * a.ck + (j / a.grp) * a.d + e);
            sto(y, i, o);
        });
        return CATTR_OK;
    }
    /* [dQ | dK | dV] per row: ds_u(t, j) = p_u (dp_u - pdp) scale; dQ_t = sum_u ds_u k_u; dK_u = sum over the group's
     * heads and t >= u of ds_u(t, j) q_t; dV_u = sum of p_u(t, j) gO_t */
    int64_t cp = a.cq + 2 * a.ck;
    cu_each(c, cx_view_numel(out), CU_FN {
        int64_t col = i % cp, row = i / cp, s = row / a.T, r = row % a.T;
        double acc = 0;
        if (col < a.cq) { /* dQ of query r, head j */
            int64_t j = col / a.d, e = col % a.d, t = r;
            const double *rs = stats + 3 * ((s * a.nh + j) * a.T + t);
            int64_t gb = (s * a.T + t) * a.cq + j * a.d;
            for (int64_t u = 0; u <= t; u++) {
                int64_t kb = (s * a.T + u) * a.ck + (j / a.grp) * a.d;
                double dp = 0;
                for (int64_t f = 0; f < a.d; f++) dp += ld(go, gb + f) * ld(v, kb + f);
                double p = exp(att_score(a, q, k, s, j, t, u) - rs[0]) / rs[1];
                acc += p * (dp - rs[2]) * a.scale * ld(k, kb + e);
            }
        } else { /* dK or dV of key r, kv head g */
            bool val = col >= a.cq + a.ck;
            int64_t cc = col - a.cq - (val ? a.ck : 0), g = cc / a.d, e = cc % a.d, u = r;
            int64_t vb = (s * a.T + u) * a.ck + g * a.d;
            for (int64_t j = g * a.grp; j < (g + 1) * a.grp; j++)
                for (int64_t t = u; t < a.T; t++) {
                    const double *rs = stats + 3 * ((s * a.nh + j) * a.T + t);
                    int64_t gb = (s * a.T + t) * a.cq + j * a.d;
                    double p = exp(att_score(a, q, k, s, j, t, u) - rs[0]) / rs[1];
                    if (val) {
                        acc += p * ld(go, gb + e);
                    } else {
                        double dp = 0;
                        for (int64_t f = 0; f < a.d; f++) dp += ld(go, gb + f) * ld(v, vb + f);
                        acc += p * (dp - rs[2]) * a.scale * ld(q, gb + e);
                    }
                }
        }
        sto(y, i, acc);
    });
    return CATTR_OK;
}

cattr_status cu_run_decoder(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out, bool *done) {
    *done = out->dtype != CATTR_INT64;
    if (!*done) return CATTR_OK;
    switch (n->op) {
    case CG_ROPE: return rope(c, n, in, out);
    case CG_ATTENTION:
        if (n->n_in > 5 && in[5].data) break; /* segments with a prefix: on the host for now */
        return attention(c, n, in, out);
    case CG_ATTENTION_GRAD: return attention(c, n, in, out);
    default: break;
    }
    *done = false;
    return CATTR_OK;
}
