/* llm_impl.h - CPU kernels of the transformer ops (RMSNorm, rotary embedding, causal grouped-query attention,
 * log-softmax) and their gradients, instantiated for float and double like kernels_impl.h (T, K(name), EXP, SQRT).
 * Layouts: activations are [..., T, C] with the sequence in the second-to-last dim and heads packed in the last. */

/* Dot product in 16 independent lanes summed by a fixed tree: the same rounding at every vector width (the lanes
 * vectorise without reassociation, so results do not depend on the instruction set a clone was built for). */
static CX_INLINE T K(dot)(const T *a, const T *b, int64_t n) {
    T acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) acc[l] += a[i + l] * b[i + l];
    for (int l = 0; i < n; i++, l++) acc[l] += a[i] * b[i];
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) acc[l] += acc[l + w];
    return acc[0];
}

/* ---- RMSNorm: y = w * (x / sqrt(mean(x^2) + eps)) over groups of len(w) along the last dim ---------------------- */

static CX_CLONES void K(rmsnorm_row)(const T *xr, const T *w, T *yr, int64_t D, T eps) {
    T ss = K(dot)(xr, xr, D);
    T rms = SQRT(ss / (T)D + eps);
    for (int64_t i = 0; i < D; i++) yr[i] = w[i] * (xr[i] / rms);
}

static cattr_status K(rmsnorm)(const cg_node *n, const cx_view *in, cx_view *out) {
    const T *x = in[0].data, *w = in[1].data;
    T *y = out->data;
    int64_t D = cx_view_numel(&in[1]), rows = D ? cx_view_numel(&in[0]) / D : 0;
    const T eps = (T)n->a.alpha;
    PAR_FOR(rows * D > PAR_MIN,
    for (int64_t r = 0; r < rows; r++) K(rmsnorm_row)(x + r * D, w, y + r * D, D, eps););
    return CATTR_OK;
}

/* (X, W, gY) -> gX = w*g/rms - x * sum(x*w*g) / (D * rms^3) */
static CX_CLONES void K(rmsnorm_grad_row)(const T *xr, const T *w, const T *gr, T *o, int64_t D, T eps) {
    T a1[16] = {0}, a2[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= D; i += 16)
        for (int l = 0; l < 16; l++) {
            a1[l] += xr[i + l] * xr[i + l];
            a2[l] += xr[i + l] * w[i + l] * gr[i + l];
        }
    for (int l = 0; i < D; i++, l++) {
        a1[l] += xr[i] * xr[i];
        a2[l] += xr[i] * w[i] * gr[i];
    }
    for (int k = 8; k >= 1; k /= 2)
        for (int l = 0; l < k; l++) {
            a1[l] += a1[l + k];
            a2[l] += a2[l + k];
        }
    T ss = a1[0], dot = a2[0];
    T rms = SQRT(ss / (T)D + eps), inv = (T)1 / rms, c = dot * inv * inv * inv / (T)D;
    for (i = 0; i < D; i++) o[i] = w[i] * gr[i] * inv - xr[i] * c;
}

static cattr_status K(rmsnorm_grad)(const cg_node *n, const cx_view *in, cx_view *out) {
    const T *x = in[0].data, *w = in[1].data, *g = in[2].data;
    T *gx = out->data;
    int64_t D = cx_view_numel(&in[1]), rows = D ? cx_view_numel(&in[0]) / D : 0;
    const T eps = (T)n->a.alpha;
    PAR_FOR(rows * D > PAR_MIN,
    for (int64_t r = 0; r < rows; r++) K(rmsnorm_grad_row)(x + r * D, w, g + r * D, gx + r * D, D, eps););
    return CATTR_OK;
}

/* ---- rotary embedding, rotate-half layout; positions 0..T-1; a.ints[0] = head_dim; a.index = 1: inverse --------- */

static CX_CLONES void K(rope_row)(const T *xr, T *yr, const T *c, const T *s, int64_t heads, int64_t d) {
    int64_t half = d / 2;
    for (int64_t h = 0; h < heads; h++) {
        const T *x1 = xr + h * d, *x2 = x1 + half;
        T *y1 = yr + h * d, *y2 = y1 + half;
        for (int64_t m = 0; m < half; m++) {
            T u1 = x1[m], u2 = x2[m];
            y1[m] = u1 * c[m] - u2 * s[m];
            y2[m] = u2 * c[m] + u1 * s[m];
        }
    }
}

static cattr_status K(rope)(const cg_node *n, const cx_view *in, cx_view *out) {
    const T *x = in[0].data, *invf = in[1].data;
    T *y = out->data;
    int nd = in[0].ndim;
    int64_t d = n->a.ints[0], half = d / 2, C = in[0].shape[nd - 1], Tn = in[0].shape[nd - 2];
    int64_t rows = cx_view_numel(&in[0]) / C, heads = C / d;
    const T sgn = n->a.index ? (T)-1 : (T)1;
    /* an optional third input: the int64 positions of the rows (ragged batches); else row r is at r mod T */
    const int64_t *rpos = n->n_in > 2 && in[2].data ? in[2].data : NULL;
    int64_t np = Tn; /* table rows: positions 0..np-1 (with rpos: up to the largest) */
    if (rpos) {
        np = 0;
        for (int64_t r = 0; r < rows; r++) {
            if (rpos[r] < 0) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "node '%s': negative position", n->name);
            if (rpos[r] + 1 > np) np = rpos[r] + 1;
        }
    }
    /* the cos/sin table of every position, once: angle in double, rounded to T as before */
    T *tab = malloc((size_t)(2 * (np > 0 ? np : 1) * (half > 0 ? half : 1)) * sizeof(T));
    if (!tab) return cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': out of memory", n->name);
    for (int64_t t = 0; t < np; t++)
        for (int64_t m = 0; m < half; m++) {
            double a = (double)t * (double)invf[m];
            tab[(2 * t) * half + m] = (T)cos(a);
            tab[(2 * t + 1) * half + m] = sgn * (T)sin(a);
        }
    PAR_FOR(rows * C > PAR_MIN,
    for (int64_t r = 0; r < rows; r++) {
        int64_t t = rpos ? rpos[r] : r % Tn;
        K(rope_row)(x + r * C, y + r * C, tab + 2 * t * half, tab + (2 * t + 1) * half, heads, d);
    });
    free(tab);
    return CATTR_OK;
}

/* ---- causal grouped-query attention: ints = {n_heads, n_kv_heads, head_dim} --------------------------------------- */

/* kt[i * Wp + u] = key u's element i (the prefix's P keys, then the Tn own ones; columns W = P + Tn up to Wp are
 * zero): the gradient's layout (the forward packs in slices instead, pack_keys): scores of one query against all
 * keys then vectorise over the keys, each summed over i in order. */
static CX_INLINE void K(transpose_keys)(const T *pk, int64_t P, const T *k, int64_t Tn, int64_t ck, int64_t d, T *kt,
                                     int64_t Wp) {
    int64_t W = P + Tn;
    for (int64_t u = 0; u < W; u++) {
        const T *ku = u < P ? pk + u * ck : k + (u - P) * ck;
        for (int64_t i = 0; i < d; i++) kt[i * Wp + u] = ku[i];
    }
    for (int64_t i = 0; i < d; i++)
        for (int64_t u = W; u < Wp; u++) kt[i * Wp + u] = 0;
}

/* The forward attention's keys in slices of 16 keys: key u's element i at kp[(u / 16) * 16 d + i * 16 + u % 16]
 * (keys W = P + Tn up to Wp zero), so the scores of a block of queries against 16 keys read one contiguous run of
 * 16 d; the keys' own rows are ck apart (all heads' columns), which put a tile's loads on a few cache sets. */
static CX_INLINE void K(pack_keys)(const T *pk, int64_t P, const T *k, int64_t Tn, int64_t ck, int64_t d, T *kp,
                                 int64_t Wp) {
    int64_t W = P + Tn;
    for (int64_t u = 0; u < Wp; u++) {
        T *dst = kp + u / 16 * 16 * d + u % 16;
        const T *ku = u >= W ? NULL : u < P ? pk + u * ck : k + (u - P) * ck;
        for (int64_t i = 0; i < d; i++) dst[i * 16] = ku ? ku[i] : 0;
    }
}

/* ... and its values in slices of 16 elements: value u's element i at vp[(i / 16) * 16 Wp + u * 16 + i % 16], so a
 * tile of values is read as contiguous runs of 16 elements, key after key. */
static CX_INLINE void K(pack_values)(const T *pv, int64_t P, const T *v, int64_t Tn, int64_t ck, int64_t d, T *vp,
                                   int64_t Wp) {
    for (int64_t u = 0; u < P + Tn; u++) {
        const T *vu = u < P ? pv + u * ck : v + (u - P) * ck;
        for (int64_t i0 = 0; i0 < d; i0 += 16)
            memcpy(vp + i0 * Wp + u * 16, vu + i0, (size_t)(d - i0 < 16 ? d - i0 : 16) * sizeof(T));
    }
}

#define ATT_R 4 /* queries per block of the attention and its gradient */
#define ATT_QB 32 /* queries per super-block of the attention (a multiple of ATT_R) */
#define ATT_KT 64 /* keys per tile of the attention (a multiple of 16) */

/* pw[r * Wp + u] = softmax(scale x that row)[u] over u < nu0 + r for the rows r < nr of a block, as the
 * one-query-at-a-time form computed it: the maximum in 16 lanes (any order gives the same value), the sum of the
 * exponentials in order, then each divided by it; the rows' sums interleaved (independent chains, not one add at a
 * time) */
static CX_INLINE void K(softmax_block)(T *pw, int64_t Wp, int nr, int64_t nu0, T scale) {
    T sum[ATT_R];
    for (int r = 0; r < nr; r++) {
        T *pr = pw + r * Wp, mx = -(T)INFINITY, ml[16];
        int64_t nu = nu0 + r, u;
        for (u = 0; u < nu; u++) pr[u] *= scale;
        for (int l = 0; l < 16; l++) ml[l] = -(T)INFINITY;
        for (u = 0; u + 16 <= nu; u += 16)
            for (int l = 0; l < 16; l++) ml[l] = pr[u + l] > ml[l] ? pr[u + l] : ml[l];
        for (; u < nu; u++) mx = pr[u] > mx ? pr[u] : mx;
        for (int l = 0; l < 16; l++) mx = ml[l] > mx ? ml[l] : mx;
        VEXP_ROW(pr, nu, mx);
        sum[r] = 0;
    }
    if (nr == ATT_R) {
        for (int64_t u = 0; u < nu0; u++)
            for (int r = 0; r < ATT_R; r++) sum[r] += pw[r * Wp + u];
    } else {
        for (int r = 0; r < nr; r++)
            for (int64_t u = 0; u < nu0; u++) sum[r] += pw[r * Wp + u];
    }
    for (int r = 0; r < nr; r++) {
        T *pr = pw + r * Wp;
        for (int64_t u = nu0; u < nu0 + r; u++) sum[r] += pr[u];
        for (int64_t u = 0; u < nu0 + r; u++) pr[u] = pr[u] / sum[r];
    }
}

/* One row: softmax_block's with nr 1 */
static CX_INLINE void K(softmax_row)(T *pw, int64_t nu, T scale) { K(softmax_block)(pw, 0, 1, nu, scale); }

#define ATT_VL 16
#define KA(name) K(name##_w16)
#include "attn_impl.h"
#undef ATT_VL
#undef KA
#define ATT_VL 8
#define KA(name) K(name##_w8)
#include "attn_impl.h"
#undef ATT_VL
#undef KA

static cattr_status K(attention)(const cg_node *n, const cx_view *in, cx_view *out) {
    const T *q = in[0].data, *k = in[1].data, *v = in[2].data;
    T *o = out->data;
    int nd = in[0].ndim;
    const int64_t nh = n->a.ints[0], nkv = n->a.ints[1], d = n->a.ints[2], grp = nh / nkv;
    const int64_t Tn = in[0].shape[nd - 2], S = cx_view_numel(&in[0]) / (Tn * nh * d);
    const int64_t cq = nh * d, ck = nkv * d;
    const T scale = (T)1 / SQRT((T)d);
    const bool wide = cpu_att_wide(); /* the kernels' vector width, chosen once per call */
    if (n->n_in > 5 && in[5].data) { /* ragged: segments of one flattened sequence, each continuing its own prefix */
        const int64_t *seg = in[5].data, ns = in[5].shape[0];
        const T *pk = in[3].data, *pv = in[4].data;
        int64_t Lp = in[3].shape[0], maxw = 1;
        for (int64_t s = 0; s < ns; s++) {
            int64_t st0 = seg[3 * s], len = seg[3 * s + 1], P = seg[3 * s + 2];
            if (st0 < 0 || len < 0 || st0 + len > Tn || P < 0 || P > Lp)
                return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "node '%s': segment %lld out of range", n->name, (long long)s);
            if (P + len > maxw) maxw = P + len;
        }
        for (int64_t t = 0; t < Tn * cq; t++) o[t] = 0; /* rows outside every segment */
        int64_t wp = (maxw + 15) / 16 * 16, per = wp * (2 * d + 16 + ATT_QB); /* per thread: scores, packed keys, values */
        bool ok;
        /* dynamic: segments differ in length */
        PAR_FOR_SCRATCH(schedule(dynamic, 1), ns * nh * maxw * d * 16 > PAR_MIN, T, per, sc, ok,
        for (int64_t sg = 0; sg < ns * nkv; sg++) { /* (segment, kv head): its query heads share the keys */
            int64_t s = sg / nkv, g = sg % nkv, st0 = seg[3 * s], len = seg[3 * s + 1], P = seg[3 * s + 2];
            for (int64_t j = g * grp; j < (g + 1) * grp; j++)
                (wide ? K(attn_head_w16) : K(attn_head_w8))(q + st0 * cq + j * d, k + st0 * ck + g * d, v + st0 * ck + g * d, P ? pk + g * d : NULL,
                             P ? pv + g * d : NULL, P, o + st0 * cq + j * d, sc, sc + ATT_QB * wp, j > g * grp, len, cq, ck, d,
                             scale);
        });
        return ok ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': out of memory for the attention scratch", n->name);
    }
    int64_t W = (Tn + 15) / 16 * 16, per = (W > 0 ? W : 16) * (2 * d + 16 + ATT_QB); /* scores, packed keys, values */
    bool ok;
    PAR_FOR_SCRATCH(schedule(static), S * nh * Tn * Tn * d > PAR_MIN, T, per, sc, ok,
    for (int64_t sg = 0; sg < S * nkv; sg++) { /* (sequence, kv head): its query heads share the keys */
        int64_t s = sg / nkv, g = sg % nkv;
        for (int64_t j = g * grp; j < (g + 1) * grp; j++)
            (wide ? K(attn_head_w16) : K(attn_head_w8))(q + s * Tn * cq + j * d, k + s * Tn * ck + g * d, v + s * Tn * ck + g * d, NULL, NULL, 0,
                         o + s * Tn * cq + j * d, sc, sc + ATT_QB * W, j > g * grp, Tn, cq, ck, d, scale);
    });
    return ok ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': out of memory for the attention scratch", n->name);
}

/* (Q, K, V, gO) -> [dQ | dK | dV] packed along the last dim ([..., T, (nh + 2 nkv) * d]) */
static cattr_status K(attention_grad)(const cg_node *n, const cx_view *in, cx_view *out) {
    const T *q = in[0].data, *k = in[1].data, *v = in[2].data, *go = in[3].data;
    T *gp = out->data;
    int nd = in[0].ndim;
    const int64_t nh = n->a.ints[0], nkv = n->a.ints[1], d = n->a.ints[2], grp = nh / nkv;
    const int64_t Tn = in[0].shape[nd - 2], S = cx_view_numel(&in[0]) / (Tn * nh * d);
    const int64_t cq = nh * d, ck = nkv * d, cp = cq + 2 * ck;
    const T scale = (T)1 / SQRT((T)d);
    const bool wide = cpu_att_wide();
    memset(gp, 0, (size_t)cx_view_numel(out) * sizeof(T));
    int64_t ts = ((Tn + 15) / 16 * 16 + 16) * (2 * ATT_R + 2 * d); /* scratch per thread (see attn_head_grad) */
    bool ok;
    /* parallel over (s, kv head): dK and dV of a kv head gather from the query heads of its group, in head order */
    PAR_FOR_SCRATCH(schedule(static), S * nh * Tn * Tn * d > PAR_MIN, T, ts, pbuf, ok,
    for (int64_t sg = 0; sg < S * nkv; sg++) {
        int64_t s = sg / nkv, g = sg % nkv;
        for (int64_t j = g * grp; j < (g + 1) * grp; j++)
            (wide ? K(attn_head_grad_w16) : K(attn_head_grad_w8))(q + s * Tn * cq + j * d, k + s * Tn * ck + g * d, v + s * Tn * ck + g * d,
                              go + s * Tn * cq + j * d, gp + s * Tn * cp + j * d, gp + s * Tn * cp + cq + g * d,
                              gp + s * Tn * cp + cq + ck + g * d, pbuf, j > g * grp, Tn, cq, ck, cp, d, scale);
    });
    return ok ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': out of memory for the attention scratch", n->name);
}

/* ---- SwiGLU: y = g * sigmoid(g) * u, the same operations as Sigmoid, Mul, Mul; its gradient as autograd forms it --- */

static CX_CLONES void K(swiglu_run)(const T *gt, const T *u, const T *gy, T *y, int64_t cnt, int which) {
    if (!gy) {
        for (int64_t i = 0; i < cnt; i++) {
            T sg = (T)1 / ((T)1 + VEXP(-gt[i]));
            y[i] = (gt[i] * sg) * u[i];
        }
    } else if (which == 1) { /* dU = gY * silu(G) */
        for (int64_t i = 0; i < cnt; i++) {
            T sg = (T)1 / ((T)1 + VEXP(-gt[i]));
            y[i] = gy[i] * (gt[i] * sg);
        }
    } else { /* dG = dA * sg + (dA * G) * (1 - sg) * sg with dA = gY * U */
        for (int64_t i = 0; i < cnt; i++) {
            T sg = (T)1 / ((T)1 + VEXP(-gt[i])), da = gy[i] * u[i];
            y[i] = da * sg + (da * gt[i]) * ((T)1 - sg) * sg;
        }
    }
}

static cattr_status K(swiglu)(const cg_node *n, const cx_view *in, cx_view *out) {
    const T *gt = in[0].data, *u = in[1].data, *gy = n->op == CG_SWIGLU_GRAD ? in[2].data : NULL;
    T *y = out->data;
    int64_t cnt = cx_view_numel(out), blk = 4096, nb = (cnt + blk - 1) / blk;
    int which = n->a.index;
    PAR_FOR(cnt > PAR_MIN,
    for (int64_t b = 0; b < nb; b++) {
        int64_t lo = b * blk, len = cnt - lo < blk ? cnt - lo : blk;
        K(swiglu_run)(gt + lo, u + lo, gy ? gy + lo : NULL, y + lo, len, which);
    });
    return CATTR_OK;
}

/* ---- log-softmax over the last dim ------------------------------------------------------------------------------- */

static cattr_status K(logsoftmax)(const cg_node *n, const cx_view *in, cx_view *out) {
    (void)n;
    const T *x = in[0].data;
    T *y = out->data;
    int64_t D = in[0].shape[in[0].ndim - 1], rows = D ? cx_view_numel(&in[0]) / D : 0;
    PAR_FOR(rows * D > PAR_MIN,
    for (int64_t r = 0; r < rows; r++) {
        const T *xr = x + r * D;
        T *yr = y + r * D;
        T mx = xr[0];
        for (int64_t i = 1; i < D; i++)
            if (xr[i] > mx) mx = xr[i];
        double sum = 0; /* in double: float32 sums over a 150k vocabulary drift by many ulps */
        for (int64_t i = 0; i < D; i++) sum += (double)EXP(xr[i] - mx);
        T lse = mx + (T)log(sum);
        for (int64_t i = 0; i < D; i++) yr[i] = xr[i] - lse;
    });
    return CATTR_OK;
}

/* (Y, gY) -> gY - exp(Y) * sum(gY) */
static cattr_status K(logsoftmax_grad)(const cg_node *n, const cx_view *in, cx_view *out) {
    (void)n;
    const T *yv = in[0].data, *g = in[1].data;
    T *gx = out->data;
    int64_t D = in[0].shape[in[0].ndim - 1], rows = D ? cx_view_numel(&in[0]) / D : 0;
    PAR_FOR(rows * D > PAR_MIN,
    for (int64_t r = 0; r < rows; r++) {
        const T *yr = yv + r * D, *gr = g + r * D;
        T *o = gx + r * D;
        double sd = 0;
        for (int64_t i = 0; i < D; i++) sd += (double)gr[i];
        const T s = (T)sd;
        for (int64_t i = 0; i < D; i++) o[i] = gr[i] - EXP(yr[i]) * s;
    });
    return CATTR_OK;
}
