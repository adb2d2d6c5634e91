/* llm_context.c - the log-probability of an answer with parts of the prompt removed (cattr_llm_score_removals), the
 * pass that context attribution (leave-one-source-out, ContextCite's random ablations) is made of.
 *
 * A removed token is taken out of the sequence (the kept tokens close up, their positions renumbered), as ContextCite
 * and AttriBoT do, not replaced by a baseline token. One forward pass over the whole prompt returns every layer's keys
 * and values; a row then runs only the positions from its first removed token on (or from its last kept token, when
 * it removes the prompt's end), attending to the unchanged prefix before them (the prefix-continuing decoder of
 * FeatureAblation's prefix reuse, segments of several rows per pass), and the log-probabilities of all the answer's
 * tokens are read at once (one gathered position per answer token and row). */
#include "attr/llm_internal.h"

#include <stdlib.h>
#include <string.h>

cattr_status cattr_llm_score_removals(cattr_llm *m, const cattr_attr_params *p, const int64_t *prompt, int64_t T,
                                      const int64_t *target, int64_t n, const unsigned char *keep, int64_t R,
                                      double *lp) {
    if (!m || !p || !prompt || !target || !keep || !lp || R < 1)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_llm_score_removals: NULL argument or no row");
    int64_t ctx = m->cfg.max_position_embeddings;
    if (T < 1 || n < 1 || T > ctx - n)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "the prompt (%lld tokens) and the answer (%lld) must each have a "
                       "token and fit the model's context of %lld", (long long)T, (long long)n, (long long)ctx);
    if (p->dtype != CATTR_FLOAT32 && p->dtype != CATTR_FLOAT64)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "dtype must be float32 or float64");
    CX_CHECK(cx_llm_check_ids(m, prompt, T, "prompt"));
    CX_CHECK(cx_llm_check_ids(m, target, n, "answer"));
    /* each row's start a (the positions it recomputes: from its first removed token, or its last kept one) */
    int64_t *start = malloc((size_t)R * sizeof *start), *cnt = malloc((size_t)R * sizeof *cnt);
    if (!start || !cnt) {
        free(start);
        free(cnt);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    cattr_status st = CATTR_OK;
    for (int64_t r = 0; r < R && st == CATTR_OK; r++) {
        const unsigned char *k = keep + r * T;
        int64_t first = T, last = -1;
        for (int64_t t = 0; t < T; t++) {
            if (!k[t] && first == T) first = t;
            if (k[t]) last = t;
        }
        if (last < 0) st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "row %lld removes the whole prompt", (long long)r);
        start[r] = first < last ? first : last;
        cnt[r] = 0; /* kept prompt tokens from start[r] on */
        for (int64_t t = start[r]; t < T; t++) cnt[r] += k[t] != 0;
    }
    const cattr_attr_params *outer = m->call_p;
    m->call_p = p;
    if (st == CATTR_OK) st = cx_llm_set_precision(m, p);
    cattr_dtype dt = p->dtype;
    size_t es = cattr_dtype_size(dt);
    int64_t nl = m->cfg.num_hidden_layers, ck = m->cfg.num_key_value_heads * m->cfg.head_dim, H = m->cfg.hidden_size;
    int64_t V = m->cfg.vocab_size;
    cg_graph **cg = &m->cached[m->prec];
    if (st == CATTR_OK && !m->cached[0]) st = cx_decoder_build_cached(m->model->g, &m->cfg, &m->cached[0]);
    if (st == CATTR_OK && !*cg) { /* precision "high": the same graph with its projections flagged */
        st = cx_derive_clone(m->cached[0], 0, NULL, cg, NULL);
        if (st == CATTR_OK) cg_mark_bf16(*cg);
    }
    /* the unchanged prompt's keys and values */
    void **kv = calloc((size_t)(2 * nl), sizeof *kv);
    if (st == CATTR_OK && !kv) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t i = 0; i < 2 * nl && st == CATTR_OK; i++)
        if (!(kv[i] = malloc((size_t)(T * ck) * es))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    double one;
    if (st == CATTR_OK) st = cx_llm_forward(m, dt, prompt, 1, T, prompt[0], &one, kv);
    /* passes of whole rows: about `target_pos` positions each (the budget's), and at most `max_out` read positions
     * (their log-probabilities over the vocabulary come down) */
    int64_t budget_pos = cx_llm_rows_per_pass(m, p, 1, T + n) * (T + n);
    int64_t target_pos = budget_pos < 1024 ? budget_pos : 1024;
    int64_t max_out = (int64_t)(((size_t)256 << 20) / ((size_t)V * es + 1));
    if (max_out < n) max_out = n;
    int n_in = (int)(4 + 2 * nl);
    int64_t maxn = 0;
    for (int64_t r = 0; r < R; r++)
        if (cnt[r] + n - 1 > maxn) maxn = cnt[r] + n - 1;
    cx_arg *arg = calloc((size_t)n_in, sizeof *arg);
    int64_t cap_rows = R, cap_n = maxn * R + 1;
    int64_t *tpos = malloc((size_t)cap_n * sizeof *tpos), *tids = malloc((size_t)cap_n * sizeof *tids);
    int64_t *segs = malloc((size_t)(3 * cap_rows + 3) * sizeof *segs), *last = malloc((size_t)(cap_rows * n + 1) * sizeof *last);
    if (st == CATTR_OK && (!arg || !tpos || !tids || !segs || !last)) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int k = 0; arg && k < n_in; k++) arg[k].dt = k >= 1 && k <= 3 ? CATTR_INT64 : dt; /* positions, segments */
    for (int64_t r0 = 0; r0 < R && st == CATTR_OK;) {
        int64_t N = 0, S = 0, P = 0, r = r0;
        while (r < R && (S == 0 || (N + cnt[r] + n - 1 <= target_pos && P + n <= max_out))) {
            const unsigned char *k = keep + r * T;
            int64_t a = start[r], at = N;
            segs[3 * S] = N;
            for (int64_t t = a; t < T; t++)
                if (k[t]) {
                    tids[N] = prompt[t];
                    tpos[N] = a + (N - at);
                    N++;
                }
            for (int64_t q = 0; q + 1 < n; q++) {
                tids[N] = target[q];
                tpos[N] = a + (N - at);
                N++;
            }
            segs[3 * S + 1] = N - at;
            segs[3 * S + 2] = a;
            for (int64_t q = 0; q < n; q++) last[P++] = at + cnt[r] - 1 + q; /* the token before answer token q */
            S++;
            r++;
        }
        cattr_tensor *e = cx_llm_embed(m, tids, 1, N), *ec = NULL, *o = NULL;
        st = e ? cattr_tensor_convert(e, dt, &ec) : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        cattr_tensor_free(e);
        arg[0].nd = 3, arg[0].sh[0] = 1, arg[0].sh[1] = N, arg[0].sh[2] = H;
        arg[1].nd = 1, arg[1].sh[0] = N;
        arg[2].nd = 2, arg[2].sh[0] = S, arg[2].sh[1] = 3;
        arg[3].nd = 1, arg[3].sh[0] = P;
        arg[1].host = tpos, arg[2].host = segs, arg[3].host = last;
        for (int k = 4; k < n_in; k++) {
            arg[k].nd = 2;
            arg[k].sh[0] = T;
            arg[k].sh[1] = ck;
            arg[k].host = kv[k - 4];
        }
        int outv = (*cg)->outputs[0];
        cx_job j;
        cx_view v;
        if (st == CATTR_OK) st = cx_llm_job(m, 1 + 2 * m->prec, *cg, dt, n_in, arg, &outv, 1, &j);
        if (st == CATTR_OK) st = cx_run_view(&j, outv, &v);
        if (st == CATTR_OK && !(o = cx_tensor_alloc(v.dtype, v.ndim, v.shape)))
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK) {
            arg[0].host = ec->data;
            void *dst = o->data;
            j.out_host = &dst;
            st = cx_run(&j);
        }
        for (int64_t q = 0; q < P && st == CATTR_OK; q++) /* [1, P, V]: read position q at q * V */
            lp[r0 * n + q] = cx_tensor_get(o, q * V + target[q % n]);
        if (st == CATTR_OK) st = cx_llm_finite(lp + r0 * n, P, "the answer's log-probabilities");
        if (st == CATTR_OK) st = cx_llm_chunk_done(p, r, R);
        cattr_tensor_free(ec);
        cattr_tensor_free(o);
        r0 = r;
    }
    m->call_p = outer;
    free(tpos);
    free(tids);
    free(segs);
    free(last);
    free(arg);
    for (int64_t i = 0; kv && i < 2 * nl; i++) free(kv[i]);
    free(kv);
    free(start);
    free(cnt);
    return st;
}
