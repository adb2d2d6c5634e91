/* attn_impl.h - the causal attention's blocked kernels and their gradient (llm_impl.h), instantiated per T (float,
 * double) and per vector width ATT_VL (KA(name)): 16 lanes where that is a native vector (AVX-512), 8 elsewhere,
 * where 16-lane vectors spill their accumulators (AVX2 has 16 registers of 8 floats). Every sum runs over the same
 * terms in the same order at either width (the lanes are independent elements), so both give the same bits. */

/* pr[r * Wp + u] = sum_i qs[r][i] kt[i][u] for r < ATT_R and u < nu rounded up to 16 (<= Wp): each score one chain
 * over i in order, as one query at a time would sum it, four queries at a time, each key row loaded once for all four
 * (GCC vectors of 16 lanes: the plain-array form was left partly scalar, its sums spilled to the stack) */
static CX_INLINE void KA(scores_block)(const T *const *qs, const T *restrict kt, int64_t Wp, int64_t nu, int64_t d,
                                   T *restrict pr) {
    typedef T vec __attribute__((vector_size(ATT_VL * sizeof(T))));
    for (int64_t u0 = 0; u0 < nu; u0 += ATT_VL) {
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
static CX_INLINE void KA(values_block)(const T *restrict pw, int64_t Wp, int nr, int64_t nu0, const T *pv, int64_t P,
                                   const T *v, int64_t ck, int64_t d, T *const *ot) {
    typedef T vec __attribute__((vector_size(ATT_VL * sizeof(T))));
    int64_t i0 = 0;
    for (; i0 + 2 * ATT_VL <= d; i0 += 2 * ATT_VL) {
        vec acc[ATT_R][2];
        for (int r = 0; r < ATT_R; r++) acc[r][0] = acc[r][1] = (vec){0};
        for (int64_t u = 0; u < nu0; u++) {
            const T *vu = (u < P ? pv + u * ck : v + (u - P) * ck) + i0;
            vec v0, v1;
            memcpy(&v0, vu, sizeof v0);
            memcpy(&v1, vu + ATT_VL, sizeof v1);
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
            memcpy(&v1, vu + ATT_VL, sizeof v1);
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

/* One (sequence, head): q, o at that head's columns (row stride cq); k, v at its kv head's (row stride ck); the
 * P prefix keys and values pk, pv (same strides) come before them. Scratch: pr holds ATT_R x Wp scores (Wp = P + Tn
 * rounded up to 16), kt the d x Wp transposed keys, written here when !keys_ready (the first query head of a kv
 * group) and reused by the group's other heads. Queries run in blocks of ATT_R (a short last block too); every
 * value is summed in the same order as one query at a time. */
static CX_CLONES void KA(attn_head)(const T *q, const T *k, const T *v, const T *pk, const T *pv, int64_t P, T *o,
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
        KA(scores_block)(qs, kt, Wp, P + t0 + nr, d, pr);
        for (int r = 0; r < nr; r++) K(softmax_row)(pr + r * Wp, P + t0 + r + 1, scale);
        KA(values_block)(pr, Wp, nr, P + t0 + 1, pv, P, v, ck, d, ot);
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
        KA(scores_block)(qs, kt, Wp, t0 + nr, d, pp);
        KA(scores_block)(gs, vt, Wp, t0 + nr, d, dp);
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

