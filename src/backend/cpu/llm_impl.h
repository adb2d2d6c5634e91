/* llm_impl.h - CPU kernels of the transformer ops (RMSNorm, rotary embedding, causal grouped-query attention,
 * log-softmax) and their gradients, instantiated for float and double like kernels_impl.h (T, K(name), EXP, SQRT).
 * Layouts: activations are [..., T, C] with the sequence in the second-to-last dim and heads packed in the last. */

/* ---- RMSNorm: y = w * (x / sqrt(mean(x^2) + eps)) over groups of len(w) along the last dim ---------------------- */

static cattr_status K(rmsnorm)(const cg_node *n, const cx_view *in, cx_view *out) {
    const T *x = in[0].data, *w = in[1].data;
    T *y = out->data;
    int64_t D = cx_view_numel(&in[1]), rows = D ? cx_view_numel(&in[0]) / D : 0;
    const T eps = (T)n->a.alpha;
    PAR_FOR(rows * D > PAR_MIN,
    for (int64_t r = 0; r < rows; r++) {
        const T *xr = x + r * D;
        T *yr = y + r * D;
        T ss = 0;
        for (int64_t i = 0; i < D; i++) ss += xr[i] * xr[i];
        T rms = SQRT(ss / (T)D + eps);
        for (int64_t i = 0; i < D; i++) yr[i] = w[i] * (xr[i] / rms);
    });
    return CATTR_OK;
}

/* (X, W, gY) -> gX = w*g/rms - x * sum(x*w*g) / (D * rms^3) */
static cattr_status K(rmsnorm_grad)(const cg_node *n, const cx_view *in, cx_view *out) {
    const T *x = in[0].data, *w = in[1].data, *g = in[2].data;
    T *gx = out->data;
    int64_t D = cx_view_numel(&in[1]), rows = D ? cx_view_numel(&in[0]) / D : 0;
    const T eps = (T)n->a.alpha;
    PAR_FOR(rows * D > PAR_MIN,
    for (int64_t r = 0; r < rows; r++) {
        const T *xr = x + r * D, *gr = g + r * D;
        T *o = gx + r * D;
        T ss = 0, dot = 0;
        for (int64_t i = 0; i < D; i++) {
            ss += xr[i] * xr[i];
            dot += xr[i] * w[i] * gr[i];
        }
        T rms = SQRT(ss / (T)D + eps), inv = (T)1 / rms, c = dot * inv * inv * inv / (T)D;
        for (int64_t i = 0; i < D; i++) o[i] = w[i] * gr[i] * inv - xr[i] * c;
    });
    return CATTR_OK;
}

/* ---- rotary embedding, rotate-half layout; positions 0..T-1; a.ints[0] = head_dim; a.index = 1: inverse --------- */

static cattr_status K(rope)(const cg_node *n, const cx_view *in, cx_view *out) {
    const T *x = in[0].data, *invf = in[1].data;
    T *y = out->data;
    int nd = in[0].ndim;
    int64_t d = n->a.ints[0], half = d / 2, C = in[0].shape[nd - 1], Tn = in[0].shape[nd - 2];
    int64_t rows = cx_view_numel(&in[0]) / C, heads = C / d;
    const T sgn = n->a.index ? (T)-1 : (T)1;
    PAR_FOR(rows * C > PAR_MIN,
    for (int64_t r = 0; r < rows; r++) {
        int64_t t = r % Tn;
        const T *xr = x + r * C;
        T *yr = y + r * C;
        for (int64_t m = 0; m < half; m++) {
            double a = (double)t * (double)invf[m];
            T c = (T)cos(a), s = sgn * (T)sin(a);
            for (int64_t h = 0; h < heads; h++) {
                T u1 = xr[h * d + m], u2 = xr[h * d + half + m];
                yr[h * d + m] = u1 * c - u2 * s;
                yr[h * d + half + m] = u2 * c + u1 * s;
            }
        }
    });
    return CATTR_OK;
}

/* ---- causal grouped-query attention: ints = {n_heads, n_kv_heads, head_dim} --------------------------------------- */

static cattr_status K(attention)(const cg_node *n, const cx_view *in, cx_view *out) {
    const T *q = in[0].data, *k = in[1].data, *v = in[2].data;
    T *o = out->data;
    int nd = in[0].ndim;
    const int64_t nh = n->a.ints[0], nkv = n->a.ints[1], d = n->a.ints[2], grp = nh / nkv;
    const int64_t Tn = in[0].shape[nd - 2], S = cx_view_numel(&in[0]) / (Tn * nh * d);
    const int64_t cq = nh * d, ck = nkv * d;
    const T scale = (T)1 / SQRT((T)d);
    T *p = malloc((size_t)(Tn > 0 ? Tn : 1) * sizeof(T) * (size_t)(S * nh));
    if (!p) return cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': out of memory", n->name);
    PAR_FOR(S * nh * Tn * Tn * d > PAR_MIN,
    for (int64_t sh = 0; sh < S * nh; sh++) {
        int64_t s = sh / nh, j = sh % nh, g = j / grp;
        T *pr = p + sh * Tn;
        for (int64_t t = 0; t < Tn; t++) {
            const T *qt = q + (s * Tn + t) * cq + j * d;
            T mx = -(T)INFINITY;
            for (int64_t u = 0; u <= t; u++) {
                const T *ku = k + (s * Tn + u) * ck + g * d;
                T dot = 0;
                for (int64_t i = 0; i < d; i++) dot += qt[i] * ku[i];
                pr[u] = dot * scale;
                if (pr[u] > mx) mx = pr[u];
            }
            T sum = 0;
            for (int64_t u = 0; u <= t; u++) {
                pr[u] = EXP(pr[u] - mx);
                sum += pr[u];
            }
            T *ot = o + (s * Tn + t) * cq + j * d;
            for (int64_t i = 0; i < d; i++) ot[i] = 0;
            for (int64_t u = 0; u <= t; u++) {
                T pu = pr[u] / sum;
                const T *vu = v + (s * Tn + u) * ck + g * d;
                for (int64_t i = 0; i < d; i++) ot[i] += pu * vu[i];
            }
        }
    });
    free(p);
    return CATTR_OK;
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
    T *p = malloc((size_t)(Tn > 0 ? 2 * Tn : 2) * sizeof(T));
    if (!p) return cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': out of memory", n->name);
    T *dp = p + Tn;
    /* serial over (s, j): dK and dV of a kv head gather from every query head of its group */
    for (int64_t s = 0; s < S; s++)
        for (int64_t j = 0; j < nh; j++) {
            int64_t g = j / grp;
            for (int64_t t = 0; t < Tn; t++) {
                const T *qt = q + (s * Tn + t) * cq + j * d, *got = go + (s * Tn + t) * cq + j * d;
                T mx = -(T)INFINITY, sum = 0;
                for (int64_t u = 0; u <= t; u++) {
                    const T *ku = k + (s * Tn + u) * ck + g * d;
                    T dot = 0;
                    for (int64_t i = 0; i < d; i++) dot += qt[i] * ku[i];
                    p[u] = dot * scale;
                    if (p[u] > mx) mx = p[u];
                }
                for (int64_t u = 0; u <= t; u++) {
                    p[u] = EXP(p[u] - mx);
                    sum += p[u];
                }
                T pdp = 0;
                for (int64_t u = 0; u <= t; u++) {
                    p[u] /= sum;
                    const T *vu = v + (s * Tn + u) * ck + g * d;
                    T dot = 0;
                    for (int64_t i = 0; i < d; i++) dot += got[i] * vu[i];
                    dp[u] = dot;
                    pdp += p[u] * dot;
                }
                T *dq = gp + (s * Tn + t) * cp + j * d;
                for (int64_t u = 0; u <= t; u++) {
                    T ds = p[u] * (dp[u] - pdp) * scale;
                    const T *ku = k + (s * Tn + u) * ck + g * d;
                    T *dk = gp + (s * Tn + u) * cp + cq + g * d, *dv = gp + (s * Tn + u) * cp + cq + ck + g * d;
                    for (int64_t i = 0; i < d; i++) {
                        dq[i] += ds * ku[i];
                        dk[i] += ds * qt[i];
                        dv[i] += p[u] * got[i];
                    }
                }
            }
        }
    free(p);
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
