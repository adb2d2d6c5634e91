/* decoder.cu - the CUDA backend's transformer ops: RoPE (arithmetic in double, as the reference kernels), and causal
 * grouped-query attention with its gradient and its ragged form (segments continuing a prefix: FeatureAblation's
 * prefix reuse) as flash-style block kernels in the tensors' dtype (cu.h's cu_blocks). */
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

/* ---- attention, flash-style: O(T^2 d) work, no [T x T] matrix -------------------------------------------------
 * One block per (sequence, query head, tile of bt queries): the tile's queries in shared memory, the keys and values
 * streamed through it bt at a time (causal: up to the tile's last query), the scores of a tile pair in shared memory,
 * and a running maximum and sum per query (the softmax rescaled as keys arrive). Computed in the tensors' dtype
 * (float32 in float32). The gradient: the forward's per-query statistics (maximum m, sum l and D = gO . O) first,
 * then dQ with a block per query tile (keys streamed) and dK, dV with a block per (kv head, key tile) that streams
 * the queries of its group's heads; every output element is written by one block, no atomics. */

template <class T> struct att_k {
    const T *q, *k, *v, *pk, *pv, *go; /* go: the output's gradient (gradient kernels) */
    T *y;                              /* forward: the output (row stride cq); gradient: [dQ | dK | dV] (row stride cp) */
    T *st;                             /* per (sequence, head, query): m, l, D */
    const int64_t *seg;                /* segments (start, len, P) on the device, or NULL: S sequences of T rows */
    int64_t S, Tn, nh, nkv, d, grp, cq, ck, cp, bt, ntile, Lp;
    T scale;
    int *err;
};

/* Sequence s's rows: row0.., len of them, after P prefix keys; false (and the error word) for a bad segment. */
template <class T> static inline CX_HD bool att_seq(const att_k<T> &a, int64_t s, int64_t *row0, int64_t *len,
                                                    int64_t *P) {
    if (!a.seg) {
        *row0 = s * a.Tn, *len = a.Tn, *P = 0;
        return true;
    }
    *row0 = a.seg[3 * s], *len = a.seg[3 * s + 1], *P = a.seg[3 * s + 2];
    if (*row0 < 0 || *len < 0 || *row0 + *len > a.Tn || *P < 0 || *P > a.Lp) {
        cu_flag(a.err, CU_ERR_SEGMENT);
        return false;
    }
    return true;
}
/* Element e of key (value) u of kv head g: prefix rows first, then the sequence's own. */
template <class T> static inline CX_HD T att_kv(const att_k<T> &a, bool value, int64_t row0, int64_t P, int64_t u,
                                                int64_t g, int64_t e) {
    if (u < P) return (value ? a.pv : a.pk)[u * a.ck + g * a.d + e];
    return (value ? a.v : a.k)[(row0 + u - P) * a.ck + g * a.d + e];
}

/* Forward: y (when a.y) and, when a.st, each query's m, l and (with a.go) D = gO . O. */
template <class T> static cattr_status att_forward(cu_ctx *c, const att_k<T> a) {
    int64_t bt = a.bt, d = a.d;
    size_t sh = (size_t)(4 * bt * d + bt * bt + 3 * bt) * sizeof(T);
    return cu_blocks(c, a.S * a.nh * a.ntile, sh, CU_BLK_FN {
        int64_t tile = blk.b % a.ntile, j = (blk.b / a.ntile) % a.nh, s = blk.b / (a.ntile * a.nh), g = j / a.grp;
        int64_t row0, len, P;
        if (!att_seq(a, s, &row0, &len, &P)) return;
        int64_t t0 = tile * bt;
        if (t0 >= len) return;
        int64_t nq = len - t0 < bt ? len - t0 : bt, W = P + t0 + nq;
        T *Qs = (T *)blk.sh, *Ks = Qs + bt * d, *Vs = Ks + bt * d, *Os = Vs + bt * d, *Ss = Os + bt * d;
        T *m = Ss + bt * bt, *l = m + bt, *al = l + bt;
        blk.each(nq * d, [&](int64_t i) {
            Qs[i] = a.q[(row0 + t0 + i / d) * a.cq + j * d + i % d];
            Os[i] = 0;
        });
        blk.each(nq, [&](int64_t i) { m[i] = (T)-INFINITY, l[i] = 0; });
        blk.sync();
        for (int64_t u0 = 0; u0 < W; u0 += bt) {
            int64_t nk = W - u0 < bt ? W - u0 : bt;
            blk.each(nk * d, [&](int64_t i) {
                Ks[i] = att_kv(a, false, row0, P, u0 + i / d, g, i % d);
                Vs[i] = att_kv(a, true, row0, P, u0 + i / d, g, i % d);
            });
            blk.sync();
            blk.each(nq * nk, [&](int64_t i) { /* scores; -inf past the causal limit */
                int64_t qi = i / nk, ki = i % nk;
                T sc = (T)-INFINITY;
                if (u0 + ki <= P + t0 + qi) {
                    T dot = 0;
                    for (int64_t e = 0; e < d; e++) dot += Qs[qi * d + e] * Ks[ki * d + e];
                    sc = dot * a.scale;
                }
                Ss[qi * bt + ki] = sc;
            });
            blk.count(nq * nk * d);
            blk.sync();
            blk.each(nq, [&](int64_t qi) { /* the running maximum and sum; the scores become exp(s - m) */
                T mx = m[qi], sum = 0;
                for (int64_t ki = 0; ki < nk; ki++) mx = Ss[qi * bt + ki] > mx ? Ss[qi * bt + ki] : mx;
                for (int64_t ki = 0; ki < nk; ki++) {
                    T sc = Ss[qi * bt + ki], p = sc == (T)-INFINITY ? (T)0 : (T)exp(sc - mx);
                    Ss[qi * bt + ki] = p;
                    sum += p;
                }
                al[qi] = m[qi] == (T)-INFINITY ? (T)0 : (T)exp(m[qi] - mx);
                l[qi] = l[qi] * al[qi] + sum;
                m[qi] = mx;
            });
            blk.sync();
            blk.each(nq * d, [&](int64_t i) {
                int64_t qi = i / d, e = i % d;
                T o = Os[i] * al[qi];
                for (int64_t ki = 0; ki < nk; ki++) o += Ss[qi * bt + ki] * Vs[ki * d + e];
                Os[i] = o;
            });
            blk.count(nq * nk * d);
            blk.sync();
        }
        if (a.y) blk.each(nq * d, [&](int64_t i) { a.y[(row0 + t0 + i / d) * a.cq + j * d + i % d] = Os[i] / l[i / d]; });
        if (a.st)
            blk.each(nq, [&](int64_t qi) {
                T *st = a.st + 3 * ((s * a.nh + j) * a.Tn + t0 + qi), dd = 0;
                if (a.go)
                    for (int64_t e = 0; e < d; e++) dd += a.go[(row0 + t0 + qi) * a.cq + j * d + e] * (Os[qi * d + e] / l[qi]);
                st[0] = m[qi], st[1] = l[qi], st[2] = dd;
            });
    });
}

/* p and ds of query t (statistics st) and key u, from their rows in shared memory: ds = p (gO . v - D) scale. */
template <class T> static inline CX_HD void att_pds(const att_k<T> &a, const T *q, const T *k, const T *go,
                                                    const T *v, const T *st, T *p, T *ds) {
    T dot = 0, dp = 0;
    for (int64_t e = 0; e < a.d; e++) dot += q[e] * k[e];
    for (int64_t e = 0; e < a.d; e++) dp += go[e] * v[e];
    *p = (T)exp(dot * a.scale - st[0]) / st[1];
    *ds = *p * (dp - st[2]) * a.scale;
}

/* dQ: a block per (sequence, head, query tile), the keys streamed. */
template <class T> static cattr_status att_dq(cu_ctx *c, const att_k<T> a) {
    int64_t bt = a.bt, d = a.d;
    size_t sh = (size_t)(5 * bt * d + bt * bt) * sizeof(T);
    return cu_blocks(c, a.S * a.nh * a.ntile, sh, CU_BLK_FN {
        int64_t tile = blk.b % a.ntile, j = (blk.b / a.ntile) % a.nh, s = blk.b / (a.ntile * a.nh), g = j / a.grp;
        int64_t row0 = s * a.Tn, t0 = tile * bt, nq = a.Tn - t0 < bt ? a.Tn - t0 : bt, W = t0 + nq;
        T *Qs = (T *)blk.sh, *Gs = Qs + bt * d, *Ks = Gs + bt * d, *Vs = Ks + bt * d, *dQ = Vs + bt * d,
          *Ds = dQ + bt * d;
        const T *st = a.st + 3 * ((s * a.nh + j) * a.Tn + t0);
        blk.each(nq * d, [&](int64_t i) {
            int64_t at = (row0 + t0 + i / d) * a.cq + j * d + i % d;
            Qs[i] = a.q[at], Gs[i] = a.go[at], dQ[i] = 0;
        });
        for (int64_t u0 = 0; u0 < W; u0 += bt) {
            int64_t nk = W - u0 < bt ? W - u0 : bt;
            blk.each(nk * d, [&](int64_t i) {
                int64_t at = (row0 + u0 + i / d) * a.ck + g * d + i % d;
                Ks[i] = a.k[at], Vs[i] = a.v[at];
            });
            blk.sync();
            blk.each(nq * nk, [&](int64_t i) {
                int64_t qi = i / nk, ki = i % nk;
                T p, ds = 0;
                if (u0 + ki <= t0 + qi) att_pds(a, Qs + qi * d, Ks + ki * d, Gs + qi * d, Vs + ki * d, st + 3 * qi, &p, &ds);
                Ds[qi * bt + ki] = ds;
            });
            blk.count(2 * nq * nk * d);
            blk.sync();
            blk.each(nq * d, [&](int64_t i) {
                int64_t qi = i / d, e = i % d;
                T acc = dQ[i];
                for (int64_t ki = 0; ki < nk; ki++) acc += Ds[qi * bt + ki] * Ks[ki * d + e];
                dQ[i] = acc;
            });
            blk.count(nq * nk * d);
            blk.sync();
        }
        blk.each(nq * d, [&](int64_t i) { a.y[(row0 + t0 + i / d) * a.cp + j * d + i % d] = dQ[i]; });
    });
}

/* dK and dV: a block per (sequence, kv head, key tile), the queries of the group's heads streamed. */
template <class T> static cattr_status att_dkv(cu_ctx *c, const att_k<T> a) {
    int64_t bt = a.bt, d = a.d;
    size_t sh = (size_t)(6 * bt * d + 2 * bt * bt + 3 * bt) * sizeof(T);
    return cu_blocks(c, a.S * a.nkv * a.ntile, sh, CU_BLK_FN {
        int64_t tile = blk.b % a.ntile, g = (blk.b / a.ntile) % a.nkv, s = blk.b / (a.ntile * a.nkv);
        int64_t row0 = s * a.Tn, u0 = tile * bt, nk = a.Tn - u0 < bt ? a.Tn - u0 : bt;
        T *Ks = (T *)blk.sh, *Vs = Ks + bt * d, *dK = Vs + bt * d, *dV = dK + bt * d, *Qs = dV + bt * d,
          *Gs = Qs + bt * d, *Ps = Gs + bt * d, *Ds = Ps + bt * bt, *St = Ds + bt * bt;
        blk.each(nk * d, [&](int64_t i) {
            int64_t at = (row0 + u0 + i / d) * a.ck + g * d + i % d;
            Ks[i] = a.k[at], Vs[i] = a.v[at], dK[i] = 0, dV[i] = 0;
        });
        for (int64_t j = g * a.grp; j < (g + 1) * a.grp; j++)
            for (int64_t t0 = u0 / bt * bt; t0 < a.Tn; t0 += bt) {
                int64_t nq = a.Tn - t0 < bt ? a.Tn - t0 : bt;
                blk.each(nq * d, [&](int64_t i) {
                    int64_t at = (row0 + t0 + i / d) * a.cq + j * d + i % d;
                    Qs[i] = a.q[at], Gs[i] = a.go[at];
                });
                blk.each(3 * nq, [&](int64_t i) { St[i] = a.st[3 * ((s * a.nh + j) * a.Tn + t0) + i]; });
                blk.sync();
                blk.each(nk * nq, [&](int64_t i) {
                    int64_t ki = i / nq, qi = i % nq;
                    T p = 0, ds = 0;
                    if (u0 + ki <= t0 + qi)
                        att_pds(a, Qs + qi * d, Ks + ki * d, Gs + qi * d, Vs + ki * d, St + 3 * qi, &p, &ds);
                    Ps[ki * bt + qi] = p, Ds[ki * bt + qi] = ds;
                });
                blk.count(2 * nq * nk * d);
                blk.sync();
                blk.each(nk * d, [&](int64_t i) {
                    int64_t ki = i / d, e = i % d;
                    T ak = dK[i], av = dV[i];
                    for (int64_t qi = 0; qi < nq; qi++) {
                        ak += Ds[ki * bt + qi] * Qs[qi * d + e];
                        av += Ps[ki * bt + qi] * Gs[qi * d + e];
                    }
                    dK[i] = ak, dV[i] = av;
                });
                blk.count(2 * nq * nk * d);
                blk.sync();
            }
        blk.each(nk * d, [&](int64_t i) {
            int64_t at = (row0 + u0 + i / d) * a.cp + a.cq + g * d + i % d;
            a.y[at] = dK[i], a.y[at + a.ck] = dV[i];
        });
    });
}

/* The tile: 32 queries (keys) while the gradient's largest block fits in 96 KiB of shared memory, else fewer. */
static int64_t att_tile(int64_t d, size_t es) {
    int64_t bt = 32;
    while (bt > 4 && (size_t)(6 * bt * d + 2 * bt * bt + 3 * bt) * es > 96 * 1024) bt /= 2;
    return bt;
}

template <class T> static cattr_status attention_t(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    int nd = in[0].ndim;
    att_k<T> a;
    memset(&a, 0, sizeof a);
    a.nh = n->a.ints[0], a.nkv = n->a.ints[1], a.d = n->a.ints[2], a.grp = a.nkv ? a.nh / a.nkv : 1;
    a.Tn = in[0].shape[nd - 2];
    a.cq = a.nh * a.d, a.ck = a.nkv * a.d, a.cp = a.cq + 2 * a.ck, a.scale = (T)(1 / sqrt((double)a.d));
    a.bt = att_tile(a.d, sizeof(T));
    a.ntile = (a.Tn + a.bt - 1) / a.bt;
    a.q = (const T *)in[0].data, a.k = (const T *)in[1].data, a.v = (const T *)in[2].data;
    a.err = c->err;
    bool grad = n->op == CG_ATTENTION_GRAD;
    if (!grad && n->n_in > 5 && in[5].data) { /* ragged: segments continuing prefixes; rows outside them are 0 */
        a.seg = (const int64_t *)in[5].data, a.S = in[5].shape[0], a.Lp = in[3].shape[0];
        a.pk = (const T *)in[3].data, a.pv = (const T *)in[4].data;
        cattr_status st = cu_zero(c, out->data, (size_t)cx_view_numel(out) * sizeof(T));
        if (st != CATTR_OK) return st;
    } else {
        a.S = a.Tn ? cx_view_numel(&in[0]) / (a.Tn * a.cq) : 0;
    }
    if (!grad) {
        a.y = (T *)out->data;
        return att_forward(c, a);
    }
    a.st = (T *)cu_scratch(c, (size_t)(3 * a.S * a.nh * a.Tn + 1) * sizeof(T));
    if (!a.st) return cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': out of device memory", n->name);
    a.go = (const T *)in[3].data;
    cattr_status st = att_forward(c, a);
    a.y = (T *)out->data;
    if (st == CATTR_OK) st = att_dq(c, a);
    if (st == CATTR_OK) st = att_dkv(c, a);
    return st;
}

static cattr_status attention(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    return out->dtype == CATTR_FLOAT32 ? attention_t<float>(c, n, in, out) : attention_t<double>(c, n, in, out);
}

cattr_status cu_run_decoder(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out, bool *done) {
    *done = out->dtype != CATTR_INT64;
    if (!*done) return CATTR_OK;
    switch (n->op) {
    case CG_ROPE: return rope(c, n, in, out);
    case CG_ATTENTION: case CG_ATTENTION_GRAD: return attention(c, n, in, out);
    default: break;
    }
    *done = false;
    return CATTR_OK;
}
