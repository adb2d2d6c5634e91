/* attn_impl.h - the causal attention's blocked kernels and their gradient (llm_impl.h), instantiated per T (float,
 * double) and per vector width ATT_VL (KA(name)): 16 lanes where that is a native vector (AVX-512), 8 elsewhere,
 * where 16-lane vectors spill their accumulators (AVX2 has 16 registers of 8 floats). Every sum runs over the same
 * terms in the same order at either width (the lanes are independent elements), so both give the same bits. */

/* pr[r * Wp + u] = sum_i qs[r][i] kt[i][u] for r < ATT_R and u < nu rounded up to ATT_VL (<= Wp): each score one
 * chain over i in order, as one query at a time would sum it, four queries at a time, each key row loaded once for
 * all four, two vectors of keys at once where there are (eight independent chains: four would wait on the adds'
 * latency) (GCC vectors: the plain-array form was left partly scalar, its sums spilled to the stack) */
static CX_INLINE void KA(scores_block)(const T *const *qs, const T *restrict kt, int64_t is, int64_t us, int64_t Wp,
                                   int64_t nu, int64_t d, T *restrict pr) {
    typedef T vec __attribute__((vector_size(ATT_VL * sizeof(T))));
    int64_t end = (nu + ATT_VL - 1) / ATT_VL * ATT_VL, u0 = 0;
    for (; u0 + 2 * ATT_VL <= end; u0 += 2 * ATT_VL) {
        const T *k0p = kt + u0 / 16 * us + u0 % 16, *k1p = kt + (u0 + ATT_VL) / 16 * us + (u0 + ATT_VL) % 16;
        vec acc[ATT_R][2];
        for (int r = 0; r < ATT_R; r++) acc[r][0] = acc[r][1] = (vec){0};
        for (int64_t i = 0; i < d; i++) {
            vec k0, k1;
            memcpy(&k0, k0p + i * is, sizeof k0);
            memcpy(&k1, k1p + i * is, sizeof k1);
            for (int r = 0; r < ATT_R; r++) {
                const T a = qs[r][i];
                acc[r][0] += a * k0;
                acc[r][1] += a * k1;
            }
        }
        for (int r = 0; r < ATT_R; r++) {
            memcpy(pr + r * Wp + u0, &acc[r][0], sizeof acc[r][0]);
            memcpy(pr + r * Wp + u0 + ATT_VL, &acc[r][1], sizeof acc[r][1]);
        }
    }
    for (; u0 < nu; u0 += ATT_VL) {
        const T *kp = kt + u0 / 16 * us + u0 % 16;
        vec acc[ATT_R];
        for (int r = 0; r < ATT_R; r++) acc[r] = (vec){0};
        for (int64_t i = 0; i < d; i++) {
            vec kr;
            memcpy(&kr, kp + i * is, sizeof kr);
            for (int r = 0; r < ATT_R; r++) acc[r] += qs[r][i] * kr;
        }
        for (int r = 0; r < ATT_R; r++) memcpy(pr + r * Wp + u0, &acc[r], sizeof acc[r]);
    }
}

/* ot_r[i] += sum over u in [ua, ub) with u < nu_r of pw[r * Wp + u] x value u's element i, r < nr, nu_r = nu0 + r
 * (from zero when `first`): each output a chain over u in order, as one query at a time sums it, continued tile after
 * tile (the partial sums go through ot unchanged), so the tiles give the bits of one pass over u. The block's outputs
 * share each load of a value row, 32 elements at a time, then 16; a head dim's remainder runs one element at a time.
 * pw must hold ATT_R defined rows for u < nu0 even when nr < ATT_R (a short block): the rows from nr on are summed
 * with the others (no branch in the loop) but never stored. */
static CX_INLINE void KA(values_tile)(const T *restrict pw, int64_t Wp, int nr, int64_t nu0, int64_t ua, int64_t ub,
                                  bool first, const T *pv, int64_t P, const T *v, int64_t ck, int64_t sl, int64_t d,
                                  T *const *ot) {
    typedef T vec __attribute__((vector_size(ATT_VL * sizeof(T))));
    int64_t i0 = 0, full = ub < nu0 ? ub : nu0, tri = ua > nu0 ? ua : nu0;
    for (; i0 + 2 * ATT_VL <= d; i0 += 2 * ATT_VL) {
        const int64_t c0 = i0 / 16 * sl + i0 % 16, c1 = (i0 + ATT_VL) / 16 * sl + (i0 + ATT_VL) % 16;
        vec acc[ATT_R][2];
        for (int r = 0; r < ATT_R; r++) {
            if (first) {
                acc[r][0] = acc[r][1] = (vec){0};
            } else {
                memcpy(&acc[r][0], ot[r < nr ? r : 0] + i0, sizeof acc[r][0]);
                memcpy(&acc[r][1], ot[r < nr ? r : 0] + i0 + ATT_VL, sizeof acc[r][1]);
            }
        }
        for (int64_t u = ua; u < full; u++) {
            const T *vu = u < P ? pv + u * ck : v + (u - P) * ck;
            vec v0, v1;
            memcpy(&v0, vu + c0, sizeof v0);
            memcpy(&v1, vu + c1, sizeof v1);
            for (int r = 0; r < ATT_R; r++) {
                const T a = pw[r * Wp + u];
                acc[r][0] += a * v0;
                acc[r][1] += a * v1;
            }
        }
        for (int64_t u = tri; u < ub; u++) {
            const T *vu = u < P ? pv + u * ck : v + (u - P) * ck;
            vec v0, v1;
            memcpy(&v0, vu + c0, sizeof v0);
            memcpy(&v1, vu + c1, sizeof v1);
            for (int r = 0; r < nr; r++)
                if (u < nu0 + r) {
                    const T a = pw[r * Wp + u];
                    acc[r][0] += a * v0;
                    acc[r][1] += a * v1;
                }
        }
        for (int r = 0; r < nr; r++) {
            memcpy(ot[r] + i0, &acc[r][0], sizeof acc[r][0]);
            memcpy(ot[r] + i0 + ATT_VL, &acc[r][1], sizeof acc[r][1]);
        }
    }
    for (; i0 + ATT_VL <= d; i0 += ATT_VL) { /* a head dim with ATT_VL elements left (16, 80, ...): one vector */
        const int64_t c0 = i0 / 16 * sl + i0 % 16;
        vec acc[ATT_R];
        for (int r = 0; r < ATT_R; r++) {
            if (first) acc[r] = (vec){0};
            else memcpy(&acc[r], ot[r < nr ? r : 0] + i0, sizeof acc[r]);
        }
        for (int64_t u = ua; u < full; u++) {
            vec v0;
            memcpy(&v0, (u < P ? pv + u * ck : v + (u - P) * ck) + c0, sizeof v0);
            for (int r = 0; r < ATT_R; r++) acc[r] += pw[r * Wp + u] * v0;
        }
        for (int64_t u = tri; u < ub; u++) {
            vec v0;
            memcpy(&v0, (u < P ? pv + u * ck : v + (u - P) * ck) + c0, sizeof v0);
            for (int r = 0; r < nr; r++)
                if (u < nu0 + r) acc[r] += pw[r * Wp + u] * v0;
        }
        for (int r = 0; r < nr; r++) memcpy(ot[r] + i0, &acc[r], sizeof acc[r]);
    }
    for (; i0 < d; i0++) /* the rest of a head dim not a multiple of 16: one element at a time */
        for (int r = 0; r < nr; r++) {
            const int64_t c = i0 / 16 * sl + i0 % 16;
            T acc = first ? 0 : ot[r][i0];
            for (int64_t u = ua; u < ub && u < nu0 + r; u++) acc += pw[r * Wp + u] * (u < P ? pv + u * ck : v + (u - P) * ck)[c];
            ot[r][i0] = acc;
        }
}

/* The values of one block over all its keys at once (the gradient's form: one tile). */
static CX_INLINE void KA(values_block)(const T *restrict pw, int64_t Wp, int nr, int64_t nu0, const T *pv, int64_t P,
                                   const T *v, int64_t ck, int64_t d, T *const *ot) {
    KA(values_tile)(pw, Wp, nr, nu0, 0, nu0 + nr - 1, true, pv, P, v, ck, 16, d, ot);
}

/* One (sequence, head): q, o at that head's columns (row stride cq); k, v at its kv head's (row stride ck); the
 * P prefix keys and values pk, pv (same strides) come before them. Scratch: pr holds ATT_QB x Wp scores (Wp = P + Tn
 * rounded up to 16), kt the keys and then the values packed in slices of 16 (pack_keys, pack_values: Wp x d and
 * Wp x d rounded up to 16), written here when !keys_ready (the first query head of a kv group) and reused by the
 * group's other heads. Queries run in super-blocks of ATT_QB, blocks of ATT_R in them (a
 * short last block too); the keys and then the values are visited in tiles of ATT_KT, each tile once per
 * super-block for all its blocks (while it is in cache: a long context's keys and values are megabytes per head);
 * every score and value is summed in the same order as one query at a time. */
static CX_CLONES void KA(attn_head)(const T *q, const T *k, const T *v, const T *pk, const T *pv, int64_t P, T *o,
                                   T *pr, T *kt, bool keys_ready, int64_t Tn, int64_t cq, int64_t ck, int64_t d,
                                   T scale) {
    int64_t Wp = (P + Tn + 15) / 16 * 16;
    T *vp = kt + Wp * d;
    if (!keys_ready) {
        K(pack_keys)(pk, P, k, Tn, ck, d, kt, Wp);
        K(pack_values)(pv, P, v, Tn, ck, d, vp, Wp);
    }
    for (int64_t b0 = 0; b0 < Tn; b0 += ATT_QB) {
        int64_t nq = Tn - b0 < ATT_QB ? Tn - b0 : ATT_QB, nb = (nq + ATT_R - 1) / ATT_R;
        const T *qs[ATT_QB / ATT_R][ATT_R];
        T *ot[ATT_QB / ATT_R][ATT_R];
        int nrb[ATT_QB / ATT_R];
        for (int64_t b = 0; b < nb; b++) {
            int64_t t0 = b0 + b * ATT_R;
            nrb[b] = Tn - t0 < ATT_R ? (int)(Tn - t0) : ATT_R;
            for (int r = 0; r < ATT_R; r++) { /* a short block's missing rows repeat its first (computed, not stored) */
                qs[b][r] = q + (t0 + (r < nrb[b] ? r : 0)) * cq;
                ot[b][r] = o + (t0 + (r < nrb[b] ? r : 0)) * cq;
            }
        }
        for (int64_t ua = 0; ua < P + b0 + nq; ua += ATT_KT) /* the scores, a tile of keys at a time */
            for (int64_t b = 0; b < nb; b++) {
                int64_t nu = P + b0 + b * ATT_R + nrb[b] - ua;
                if (nu > 0) KA(scores_block)(qs[b], kt + ua * d, 16, 16 * d, Wp, nu < ATT_KT ? nu : ATT_KT, d,
                                              pr + b * ATT_R * Wp + ua);
            }
        for (int64_t b = 0; b < nb; b++) K(softmax_block)(pr + b * ATT_R * Wp, Wp, nrb[b], P + b0 + b * ATT_R + 1, scale);
        for (int64_t ua = 0; ua < P + b0 + nq; ua += ATT_KT) /* the values, a tile at a time (to the last row's own key) */
            for (int64_t b = 0; b < nb; b++) {
                int64_t nu0 = P + b0 + b * ATT_R + 1, end = nu0 + nrb[b] - 1;
                if (ua < end)
                    KA(values_tile)(pr + b * ATT_R * Wp, Wp, nrb[b], nu0, ua, ua + ATT_KT < end ? ua + ATT_KT : end,
                                    ua == 0, NULL, 0, vp, 16, 16 * Wp, d, ot[b]);
            }
    }
}

/* The gradient of one (sequence, query head) into its dQ columns and its kv head's dK, dV columns (row stride cp).
 * Scratch p: 2 x ATT_R x Wp values (Wp = Tn rounded up to 16), then the d x Wp transposed keys and values (written
 * when !kv_ready, as in attn_head). Queries run in blocks of ATT_R as in the forward: each key and value row is
 * loaded once per block for the scores and for dQ, and each dK, dV row once per block; every sum runs in the order
 * of one query at a time (dK and dV of a key gather over the queries in order), so results are bit-identical to it. */
static CX_CLONES void KA(attn_head_grad)(const T *q, const T *k, const T *v, const T *go, T *dqc, T *dkc, T *dvc, T *p,
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
        KA(scores_block)(qs, kt, Wp, 16, Wp, t0 + nr, d, pp);
        KA(scores_block)(gs, vt, Wp, 16, Wp, t0 + nr, d, dp);
        for (int r = 0; r < nr; r++) {
            T *pr = pp + r * Wp, *dr = dp + r * Wp, pdp = 0;
            int64_t nu = t0 + r + 1, u;
            K(softmax_row)(pr, nu, scale);
            for (u = 0; u < nu; u++) pdp += pr[u] * dr[u];
            for (u = 0; u < nu; u++) dr[u] = pr[u] * (dr[u] - pdp) * scale;
        }
        KA(values_block)(dp, Wp, nr, t0 + 1, NULL, 0, k, ck, d, dq);
        for (int64_t u = 0; u < t0 + nr; u++) {
            int r0 = u > t0 ? (int)(u - t0) : 0;
            T *dk = dkc + u * cp, *dv = dvc + u * cp;
            typedef T vec __attribute__((vector_size(ATT_VL * sizeof(T))));
            int64_t i0 = 0;
            for (; i0 + ATT_VL <= d; i0 += ATT_VL) {
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

