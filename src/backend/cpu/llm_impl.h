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
 * zero): scores of one query against all keys then vectorise over the keys, each summed over i in order. */
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

#define ATT_R 4 /* queries per block of the attention and its gradient */

/* pr[r * Wp + u] = sum_i qs[r][i] kt[i][u] for r < ATT_R and u < nu rounded up to 16 (<= Wp): each score one chain
 * over i in order, as one query at a time would sum it, four queries at a time, each key row loaded once for all four
 * (GCC vectors of 16 lanes: the plain-array form was left partly scalar, its sums spilled to the stack) */
static CX_INLINE void K(scores_block)(const T *const *qs, const T *restrict kt, int64_t Wp, int64_t nu, int64_t d,
                                   T *restrict pr) {
    typedef T vec __attribute__((vector_size(16 * sizeof(T))));
    for (int64_t u0 = 0; u0 < nu; u0 += 16) {
        vec acc[ATT_R];
        for (int r = 0; r < ATT_R; r++) acc[r] = (vec){0};
        for (int64_t i = 0; i < d; i++) {
            vec kr;
            memcpy(&kr, kt + i * Wp + u0, sizeof kr);
            for (int r = 0; r < ATT_R; r++) acc[r] += qs[r][i] * kr;
        }
        for (int r = 0; r < ATT_R; r++) memcpy(pr + r * Wp + u0, &acc[r], sizeof acc[r]);
    }
}

/* ot_r[i] = sum over u < nu_r of pw[r * Wp + u] x value u's element i, r < nr, nu_r = nu0 + r, summed over u in order
 * (a chain from zero, as one query at a time): the block's outputs share each load of a value row, 32 elements at a
 * time, then 16; a head dim's remainder runs one element at a time. pw must hold ATT_R defined rows for u < nu0 even when nr < ATT_R (a
 * short block): the rows from nr on are summed with the others (no branch in the loop) but never stored. */
static CX_INLINE void K(values_block)(const T *restrict pw, int64_t Wp, int nr, int64_t nu0, const T *pv, int64_t P,
                                   const T *v, int64_t ck, int64_t d, T *const *ot) {
    typedef T vec __attribute__((vector_size(16 * sizeof(T))));
    int64_t i0 = 0;
    for (; i0 + 32 <= d; i0 += 32) {
        vec acc[ATT_R][2];
        for (int r = 0; r < ATT_R; r++) acc[r][0] = acc[r][1] = (vec){0};
        for (int64_t u = 0; u < nu0; u++) {
            const T *vu = (u < P ? pv + u * ck : v + (u - P) * ck) + i0;
            vec v0, v1;
            memcpy(&v0, vu, sizeof v0);
            memcpy(&v1, vu + 16, sizeof v1);
            for (int r = 0; r < ATT_R; r++) {
                const T a = pw[r * Wp + u];
                acc[r][0] += a * v0;
                acc[r][1] += a * v1;
            }
        }
        for (int64_t u = nu0; u < nu0 + nr - 1; u++) {
            const T *vu = (u < P ? pv + u * ck : v + (u - P) * ck) + i0;
            vec v0, v1;
            memcpy(&v0, vu, sizeof v0);
            memcpy(&v1, vu + 16, sizeof v1);
            for (int r = 0; r < nr; r++)
                if (u < nu0 + r) {
                    const T a = pw[r * Wp + u];
                    acc[r][0] += a * v0;
                    acc[r][1] += a * v1;
                }
        }
        for (int r = 0; r < nr; r++) {
            memcpy(ot[r] + i0, &acc[r][0], sizeof acc[r][0]);
            memcpy(ot[r] + i0 + 16, &acc[r][1], sizeof acc[r][1]);
        }
    }
    for (; i0 + 16 <= d; i0 += 16) { /* a head dim of 32 k + 16 (16, 80, ...): 16 elements at a time, as above */
        vec acc[ATT_R];
        for (int r = 0; r < ATT_R; r++) acc[r] = (vec){0};
        for (int64_t u = 0; u < nu0; u++) {
            vec v0;
            memcpy(&v0, (u < P ? pv + u * ck : v + (u - P) * ck) + i0, sizeof v0);
            for (int r = 0; r < ATT_R; r++) acc[r] += pw[r * Wp + u] * v0;
        }
        for (int64_t u = nu0; u < nu0 + nr - 1; u++) {
            vec v0;
            memcpy(&v0, (u < P ? pv + u * ck : v + (u - P) * ck) + i0, sizeof v0);
            for (int r = 0; r < nr; r++)
                if (u < nu0 + r) acc[r] += pw[r * Wp + u] * v0;
        }
        for (int r = 0; r < nr; r++) memcpy(ot[r] + i0, &acc[r], sizeof acc[r]);
    }
    for (; i0 < d; i0++) /* the rest of a head dim not a multiple of 16: one element at a time */
        for (int r = 0; r < nr; r++) {
            T acc = 0;
            for (int64_t u = 0; u < nu0 + r; u++) acc += pw[r * Wp + u] * (u < P ? pv + u * ck : v + (u - P) * ck)[i0];
            ot[r][i0] = acc;
        }
}

/* pw[u] = softmax(scale x pw)[u] over u < nu, as the one-query-at-a-time form computed it: the maximum in 16 lanes
 * (any order gives the same value), the sum of the exponentials in order, then each divided by it */
static CX_INLINE void K(softmax_row)(T *pw, int64_t nu, T scale) {
    T mx = -(T)INFINITY, sum = 0, ml[16];
    int64_t u = 0;
    for (u = 0; u < nu; u++) pw[u] *= scale;
    for (int l = 0; l < 16; l++) ml[l] = -(T)INFINITY;
    for (u = 0; u + 16 <= nu; u += 16)
        for (int l = 0; l < 16; l++) ml[l] = pw[u + l] > ml[l] ? pw[u + l] : ml[l];
    for (; u < nu; u++) mx = pw[u] > mx ? pw[u] : mx;
    for (int l = 0; l < 16; l++) mx = ml[l] > mx ? ml[l] : mx;
    for (u = 0; u < nu; u++) pw[u] = VEXP(pw[u] - mx);
    for (u = 0; u < nu; u++) sum += pw[u];
    for (u = 0; u < nu; u++) pw[u] = pw[u] / sum;
}

/* One (sequence, head): q, o at that head's columns (row stride cq); k, v at its kv head's (row stride ck); the
 * P prefix keys and values pk, pv (same strides) come before them. Scratch: pr holds ATT_R x Wp scores (Wp = P + Tn
 * rounded up to 16), kt the d x Wp transposed keys, written here when !keys_ready (the first query head of a kv
 * group) and reused by the group's other heads. Queries run in blocks of ATT_R (a short last block too); every
 * value is summed in the same order as one query at a time. */
static CX_CLONES void K(attn_head)(const T *q, const T *k, const T *v, const T *pk, const T *pv, int64_t P, T *o,
                                   T *pr, T *kt, bool keys_ready, int64_t Tn, int64_t cq, int64_t ck, int64_t d,
                                   T scale) {
    int64_t Wp = (P + Tn + 15) / 16 * 16;
    if (!keys_ready) K(transpose_keys)(pk, P, k, Tn, ck, d, kt, Wp);
    for (int64_t t0 = 0; t0 < Tn; t0 += ATT_R) {
        int nr = Tn - t0 < ATT_R ? (int)(Tn - t0) : ATT_R;
        const T *qs[ATT_R];
        T *ot[ATT_R];
        for (int r = 0; r < ATT_R; r++) { /* a short block's missing rows repeat its first (computed, not stored) */
            qs[r] = q + (t0 + (r < nr ? r : 0)) * cq;
            ot[r] = o + (t0 + (r < nr ? r : 0)) * cq;
        }
        K(scores_block)(qs, kt, Wp, P + t0 + nr, d, pr);
        for (int r = 0; r < nr; r++) K(softmax_row)(pr + r * Wp, P + t0 + r + 1, scale);
        K(values_block)(pr, Wp, nr, P + t0 + 1, pv, P, v, ck, d, ot);
    }
}

static cattr_status K(attention)(const cg_node *n, const cx_view *in, cx_view *out) {
    const T *q = in[0].data, *k = in[1].data, *v = in[2].data;
    T *o = out->data;
    int nd = in[0].ndim;
    const int64_t nh = n->a.ints[0], nkv = n->a.ints[1], d = n->a.ints[2], grp = nh / nkv;
    const int64_t Tn = in[0].shape[nd - 2], S = cx_view_numel(&in[0]) / (Tn * nh * d);
    const int64_t cq = nh * d, ck = nkv * d;
    const T scale = (T)1 / SQRT((T)d);
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
        int64_t wp = (maxw + 15) / 16 * 16, per = wp * (d + ATT_R); /* scratch per thread: scores, transposed keys */
        bool ok;
        /* dynamic: segments differ in length */
        PAR_FOR_SCRATCH(schedule(dynamic, 1), ns * nh * maxw * d * 16 > PAR_MIN, T, per, sc, ok,
        for (int64_t sg = 0; sg < ns * nkv; sg++) { /* (segment, kv head): its query heads share the keys */
            int64_t s = sg / nkv, g = sg % nkv, st0 = seg[3 * s], len = seg[3 * s + 1], P = seg[3 * s + 2];
            for (int64_t j = g * grp; j < (g + 1) * grp; j++)
                K(attn_head)(q + st0 * cq + j * d, k + st0 * ck + g * d, v + st0 * ck + g * d, P ? pk + g * d : NULL,
                             P ? pv + g * d : NULL, P, o + st0 * cq + j * d, sc, sc + ATT_R * wp, j > g * grp, len, cq, ck, d,
                             scale);
        });
        return ok ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': out of memory for the attention scratch", n->name);
    }
    int64_t W = (Tn + 15) / 16 * 16, per = (W > 0 ? W : 16) * (d + ATT_R); /* scratch per thread: scores, transposed keys */
    bool ok;
    PAR_FOR_SCRATCH(schedule(static), S * nh * Tn * Tn * d > PAR_MIN, T, per, sc, ok,
    for (int64_t sg = 0; sg < S * nkv; sg++) { /* (sequence, kv head): its query heads share the keys */
        int64_t s = sg / nkv, g = sg % nkv;
        for (int64_t j = g * grp; j < (g + 1) * grp; j++)
            K(attn_head)(q + s * Tn * cq + j * d, k + s * Tn * ck + g * d, v + s * Tn * ck + g * d, NULL, NULL, 0,
                         o + s * Tn * cq + j * d, sc, sc + ATT_R * W, j > g * grp, Tn, cq, ck, d, scale);
    });
    return ok ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': out of memory for the attention scratch", n->name);
}

/* The gradient of one (sequence, query head) into its dQ columns and its kv head's dK, dV columns (row stride cp).
 * Scratch p: 2 x ATT_R x Wp values (Wp = Tn rounded up to 16), then the d x Wp transposed keys and values (written
 * when !kv_ready, as in attn_head). Queries run in blocks of ATT_R as in the forward: each key and value row is
 * loaded once per block for the scores and for dQ, and each dK, dV row once per block; every sum runs in the order
 * of one query at a time (dK and dV of a key gather over the queries in order), so results are bit-identical to it. */
static CX_CLONES void K(attn_head_grad)(const T *q, const T *k, const T *v, const T *go, T *dqc, T *dkc, T *dvc, T *p,
                                        bool kv_ready, int64_t Tn, int64_t cq, int64_t ck, int64_t cp, int64_t d,
                                        T scale) {
    int64_t Wp = (Tn + 15) / 16 * 16;
    T *pp = p, *dp = p + ATT_R * Wp, *kt = p + 2 * ATT_R * Wp, *vt = kt + Wp * d;
    if (!kv_ready) {
        K(transpose_keys)(NULL, 0, k, Tn, ck, d, kt, Wp);
        K(transpose_keys)(NULL, 0, v, Tn, ck, d, vt, Wp);
    }
    for (int64_t t0 = 0; t0 < Tn; t0 += ATT_R) {
        int nr = Tn - t0 < ATT_R ? (int)(Tn - t0) : ATT_R;
        const T *qs[ATT_R], *gs[ATT_R];
        T *dq[ATT_R];
        for (int r = 0; r < ATT_R; r++) {
            int64_t t = t0 + (r < nr ? r : 0);
            qs[r] = q + t * cq;
            gs[r] = go + t * cq;
            dq[r] = dqc + (t0 + (r < nr ? r : 0)) * cp;
        }
        K(scores_block)(qs, kt, Wp, t0 + nr, d, pp);
        K(scores_block)(gs, vt, Wp, t0 + nr, d, dp);
        for (int r = 0; r < nr; r++) {
            T *pr = pp + r * Wp, *dr = dp + r * Wp, pdp = 0;
            int64_t nu = t0 + r + 1, u;
            K(softmax_row)(pr, nu, scale);
            for (u = 0; u < nu; u++) pdp += pr[u] * dr[u];
            for (u = 0; u < nu; u++) dr[u] = pr[u] * (dr[u] - pdp) * scale;
        }
        K(values_block)(dp, Wp, nr, t0 + 1, NULL, 0, k, ck, d, dq);
        for (int64_t u = 0; u < t0 + nr; u++) {
            int r0 = u > t0 ? (int)(u - t0) : 0;
            T *dk = dkc + u * cp, *dv = dvc + u * cp;
            typedef T vec __attribute__((vector_size(16 * sizeof(T))));
            int64_t i0 = 0;
            for (; i0 + 16 <= d; i0 += 16) {
                vec ak, av;
                memcpy(&ak, dk + i0, sizeof ak);
                memcpy(&av, dv + i0, sizeof av);
                for (int r = r0; r < nr; r++) {
                    vec qv, gv;
                    memcpy(&qv, qs[r] + i0, sizeof qv);
                    memcpy(&gv, gs[r] + i0, sizeof gv);
                    ak += dp[r * Wp + u] * qv;
                    av += pp[r * Wp + u] * gv;
                }
                memcpy(dk + i0, &ak, sizeof ak);
                memcpy(dv + i0, &av, sizeof av);
            }
            for (; i0 < d; i0++)
                for (int r = r0; r < nr; r++) { dk[i0] += dp[r * Wp + u] * qs[r][i0]; dv[i0] += pp[r * Wp + u] * gs[r][i0]; }
        }
    }
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
    memset(gp, 0, (size_t)cx_view_numel(out) * sizeof(T));
    int64_t ts = ((Tn + 15) / 16 * 16 + 16) * (2 * ATT_R + 2 * d); /* scratch per thread (see attn_head_grad) */
    bool ok;
    /* parallel over (s, kv head): dK and dV of a kv head gather from the query heads of its group, in head order */
    PAR_FOR_SCRATCH(schedule(static), S * nh * Tn * Tn * d > PAR_MIN, T, ts, pbuf, ok,
    for (int64_t sg = 0; sg < S * nkv; sg++) {
        int64_t s = sg / nkv, g = sg % nkv;
        for (int64_t j = g * grp; j < (g + 1) * grp; j++)
            K(attn_head_grad)(q + s * Tn * cq + j * d, k + s * Tn * ck + g * d, v + s * Tn * ck + g * d,
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
