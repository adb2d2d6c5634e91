/* llm_context.c - the log-probability of an answer with parts of the prompt removed (cattr_llm_score_removals), the
 * pass that context attribution (leave-one-source-out, ContextCite's random ablations) is made of.
 *
 * A removed token is taken out of the sequence (the kept tokens close up, their positions renumbered), as ContextCite
 * and AttriBoT do, not replaced by a baseline token. One forward pass over the whole prompt returns every layer's keys
 * and values; a row then runs only the positions from its first removed token on (or from its last kept token, when
 * it removes the prompt's end), attending to the unchanged prefix before them (the prefix-continuing decoder of
 * FeatureAblation's prefix reuse, segments of several rows per pass), and the log-probabilities of all the answer's
 * tokens are read at once (one gathered position per answer token and row). Context attribution itself
 * (cattr_llm_explain_context) builds the prompt piece by piece (every source a run of whole tokens), the rows of source
 * masks (leave-one-out, or ContextCite's random masks and Lasso fit) and the quality numbers over it. */
#include "attr/linmodel.h"
#include "attr/llm_internal.h"
#include "core/rng.h"
#include "io/fileutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* (length, row) pairs by length, longest first, then by row */
static int cmp_len_desc(const void *x, const void *y) {
    const int64_t *a = x, *b = y;
    return a[0] != b[0] ? (a[0] < b[0] ? 1 : -1) : (a[1] > b[1]) - (a[1] < b[1]);
}

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
        if (last < 0) {
            st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "row %lld removes the whole prompt", (long long)r);
            break;
        }
        start[r] = first < last ? first : last;
        cnt[r] = 0; /* kept prompt tokens from start[r] on */
        for (int64_t t = start[r]; t < T; t++) cnt[r] += k[t] != 0;
    }
    const cattr_attr_params *outer = m->call_p;
    m->call_p = p;
    if (st == CATTR_OK) st = cx_llm_set_precision(m, p);
    cattr_dtype dt = p->dtype;
    size_t es = cattr_dtype_size(dt);
    int64_t nl = m->cfg.num_hidden_layers, ck = m->cfg.num_key_value_heads * m->cfg.head_dim;
    int64_t V = m->cfg.vocab_size;
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
    int64_t maxn = 0;
    for (int64_t r = 0; r < R; r++)
        if (cnt[r] + n - 1 > maxn) maxn = cnt[r] + n - 1;
    int64_t cap_rows = R, cap_n = maxn * R + 1;
    int64_t *tpos = malloc((size_t)cap_n * sizeof *tpos), *tids = malloc((size_t)cap_n * sizeof *tids);
    int64_t *segs = malloc((size_t)(3 * cap_rows + 3) * sizeof *segs), *last = malloc((size_t)(cap_rows * n + 1) * sizeof *last);
    if (st == CATTR_OK && (!tpos || !tids || !segs || !last)) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    /* the rows longest first: the first pass is the largest, so the passes' shared arena is sized once (growing it
     * for each longer pass faulted in gigabytes of fresh pages), and rows of like length share passes */
    int64_t *ord = malloc((size_t)R * 2 * sizeof *ord);
    if (st == CATTR_OK && !ord) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t r = 0; ord && r < R; r++) ord[2 * r] = cnt[r], ord[2 * r + 1] = r;
    if (ord) qsort(ord, (size_t)R, 2 * sizeof *ord, cmp_len_desc);
    for (int64_t r0 = 0; r0 < R && st == CATTR_OK;) {
        int64_t N = 0, S = 0, P = 0, r = r0;
        while (r < R && (S == 0 || (N + cnt[ord[2 * r + 1]] + n - 1 <= target_pos && P + n <= max_out))) {
            int64_t row = ord[2 * r + 1];
            const unsigned char *k = keep + row * T;
            int64_t a = start[row], at = N;
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
            for (int64_t q = 0; q < n; q++) last[P++] = at + cnt[row] - 1 + q; /* the token before answer token q */
            S++;
            r++;
        }
        cattr_tensor *o = NULL;
        if (st == CATTR_OK) st = cx_llm_continue(m, dt, tids, tpos, N, segs, S, last, P, kv, T, &o);
        for (int64_t q = 0; q < P && st == CATTR_OK; q++) /* [1, P, V]: read position q at q * V */
            lp[ord[2 * (r0 + q / n) + 1] * n + q % n] = cx_tensor_get(o, q * V + target[q % n]);
        for (int64_t j = r0; j < r && st == CATTR_OK; j++)
            st = cx_llm_finite(lp + ord[2 * j + 1] * n, n, "the answer's log-probabilities");
        if (st == CATTR_OK) st = cx_llm_chunk_done(p, r, R);
        cattr_tensor_free(o);
        r0 = r;
    }
    free(ord);
    m->call_p = outer;
    free(tpos);
    free(tids);
    free(segs);
    free(last);
    for (int64_t i = 0; kv && i < 2 * nl; i++) free(kv[i]);
    free(kv);
    free(start);
    free(cnt);
    return st;
}

/* ---- gradient x activation for a whole answer ------------------------------------------------------------- */

cattr_status cx_llm_grad_x_act_total(cattr_llm *m, const cattr_attr_params *lp, const int64_t *ids, int64_t T,
                                     const int64_t *tg, int64_t n, double *tok) {
    if (!m->score_model) {
        cx_decoder_opts o = {.scores = true};
        CX_CHECK(cx_decoder_rebuild(m->model, &m->cfg, &o, &m->score_model));
    }
    cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_INPUT_X_GRADIENT);
    p.dtype = lp->dtype;
    p.device = m->be->name;
    p.precision = lp->precision;
    /* the explainer is kept between calls (its plans and memory) while these compare equal: params are memset and set
     * field by field, so memcmp is exact; the budget and what the call watches are the call's own */
    if (!m->xe || memcmp(&m->xp, &p, sizeof p)) {
        cattr_explainer_free(m->xe);
        m->xe = NULL;
        CX_CHECK(cattr_explainer_new(m->score_model, &p, &m->xe));
        m->xe->sum_last = true; /* a token's attribution: its embedding's, summed (on the backend) */
        m->xp = p;
    }
    cattr_explainer *e = m->xe;
    e->p.max_memory = lp->max_memory ? lp->max_memory : cx_llm_default_budget(&m->cfg);
    e->p.progress = lp->progress;
    e->p.progress_user = lp->progress_user;
    e->p.cancel = lp->cancel;
    int64_t L = T + n - 1, shn[2] = {1, n};
    int64_t *seq = malloc((size_t)L * sizeof *seq);
    cattr_tensor *pos = cx_tensor_alloc(CATTR_INT64, 2, shn), *sidx = cx_tensor_alloc(CATTR_INT64, 2, shn);
    cattr_tensor *ein = NULL, *attr = NULL;
    cattr_status st = seq && pos && sidx ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) {
        memcpy(seq, ids, (size_t)T * sizeof *seq);
        memcpy(seq + T, tg, (size_t)(n - 1) * sizeof *seq);
        for (int64_t k = 0; k < n; k++) {
            ((int64_t *)pos->data)[k] = T - 1 + k;
            ((int64_t *)sidx->data)[k] = k * m->cfg.vocab_size + tg[k];
        }
        if (!(ein = cx_llm_embed(m, seq, 1, L))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    int64_t t0 = 0;
    cattr_target t = {CATTR_TARGET_INDEX, 1, 0, &t0}; /* output column 0: the answer's total log-probability */
    const cattr_tensor *in[1] = {ein}, *add[2] = {pos, sidx};
    cattr_call call = {in, 1, NULL, &t, add, 2, NULL, NULL, NULL, 0, NULL, 0, NULL};
    if (st == CATTR_OK) st = cattr_explainer_run(e, &call, &attr, NULL);
    for (int64_t i = 0; i < T && st == CATTR_OK; i++) tok[i] = cx_tensor_get(attr, i); /* [1, L]: summed */
    if (st != CATTR_OK) { /* a failed (or cancelled) call's explainer is not kept */
        cattr_explainer_free(m->xe);
        m->xe = NULL;
    }
    free(seq);
    cattr_tensor_free(pos);
    cattr_tensor_free(sidx);
    cattr_tensor_free(ein);
    cattr_tensor_free(attr);
    return st;
}

/* ---- context attribution: sources, ablations, scores -------------------------------------------------------- */

#define CTX_STREAM 0x4354580000000000ull /* "CTX": the surrogate's masks, then the held-out ones */
#define HELD_OUT 32                      /* the quality numbers' held-out random masks (the LDS) */

cattr_status cx_chat_frame_parse(const char *json, size_t len, const char *what, const char *question, char **prefix,
                                 char **suffix) {
    *prefix = *suffix = NULL;
    cJSON *cfg = json ? cJSON_ParseWithLength(json, len) : NULL;
    const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(cfg, "chat_template"));
    const char *pre = NULL, *post = NULL;
    if (t && strstr(t, "<|im_start|>")) { /* ChatML (Qwen); Qwen3's thinking switched off, as for a plain answer */
        pre = "<|im_start|>user\n";
        post = strstr(t, "enable_thinking") ? "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
                                            : "<|im_end|>\n<|im_start|>assistant\n";
    } else if (t && strstr(t, "<|start_header_id|>")) { /* Llama 3 */
        pre = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n";
        post = "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
    } else if (t && strstr(t, "[INST]")) { /* Mistral */
        pre = "<s>[INST] ";
        post = " [/INST]";
    }
    cattr_status st = CATTR_OK;
    if (!pre)
        st = cx_fail(CATTR_ERR_UNSUPPORTED, "%s: %s", what,
                     !cfg ? "no readable tokenizer_config.json" : !t ? "no chat_template"
                     : "a chat_template of a form cattr cannot render (it renders ChatML, Llama 3 and Mistral's)");
    cJSON_Delete(cfg);
    if (st != CATTR_OK) return st;
    *prefix = cx_strdup(pre);
    *suffix = malloc(strlen(post) + strlen(question) + 3);
    if (*suffix) sprintf(*suffix, "\n\n%s%s", question, post);
    if (*prefix && *suffix) return CATTR_OK;
    free(*prefix), free(*suffix);
    *prefix = *suffix = NULL;
    return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
}

cattr_status cattr_llm_chat_frame(const char *dir, const char *question, char **prefix, char **suffix) {
    if (!dir || !question || !prefix || !suffix) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_llm_chat_frame: NULL argument");
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    void *text = NULL;
    size_t len = 0;
    bool read = cx_read_file(path, &text, &len) == CATTR_OK;
    cattr_status st = cx_chat_frame_parse(read ? text : NULL, len, path, question, prefix, suffix);
    free(text);
    return st;
}

void cattr_context_result_free(cattr_context_result *r) {
    if (!r) return;
    free(r->answer);
    free(r->document);
    free(r->start);
    free(r->end);
    free(r->score);
    free(r->token_score);
    free(r->rescored);
    free(r->answer_ids);
    free(r->masks);
    free(r->row_logprob);
    free(r);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Appends the tokens of text to the prompt (grown); *k receives how many. */
static cattr_status append_text(const cattr_llm *m, const char *text, int64_t **p, int64_t *T, int64_t *cap,
                                int64_t **ids, int64_t *k) {
    CX_CHECK(cattr_llm_encode(m, text, ids, k));
    if (*T + *k > *cap) {
        int64_t c = (*T + *k) * 2 + 16, *q = realloc(*p, (size_t)c * sizeof *q);
        if (!q) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        *p = q, *cap = c;
    }
    memcpy(*p + *T, *ids, (size_t)*k * sizeof **ids);
    *T += *k;
    return CATTR_OK;
}

/* Spearman's rank correlation of x and y (n values; average ranks for ties). */
static double spearman(const double *x, const double *y, int64_t n) {
    double *r = malloc((size_t)(2 * n) * sizeof *r);
    if (!r) return NAN;
    const double *v[2] = {x, y};
    for (int s = 0; s < 2; s++)
        for (int64_t i = 0; i < n; i++) {
            double less = 0, eq = 0;
            for (int64_t j = 0; j < n; j++) less += v[s][j] < v[s][i], eq += v[s][j] == v[s][i];
            r[s * n + i] = less + (eq + 1) / 2;
        }
    double mx = (n + 1) / 2.0, sxy = 0, sxx = 0, syy = 0;
    for (int64_t i = 0; i < n; i++) {
        sxy += (r[i] - mx) * (r[n + i] - mx);
        sxx += (r[i] - mx) * (r[i] - mx);
        syy += (r[n + i] - mx) * (r[n + i] - mx);
    }
    free(r);
    return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : NAN;
}

typedef struct ctx_state {
    int64_t *prompt, T, cap, *ans, n, S, *t0, *t1;
    unsigned char *keep, *mask;
    double *lp, *y, *lpt; /* lpt: the rows' per-token log-probabilities, when scores per token are asked */
} ctx_state;

/* The rows' token masks from their source masks (mask [R, S]: kept sources) into keep [R, T]. */
static void token_masks(ctx_state *c, const unsigned char *mask, int64_t R, unsigned char *keep) {
    for (int64_t r = 0; r < R; r++) {
        memset(keep + r * c->T, 1, (size_t)c->T);
        for (int64_t s = 0; s < c->S; s++)
            if (!mask[r * c->S + s]) memset(keep + r * c->T + c->t0[s], 0, (size_t)(c->t1[s] - c->t0[s]));
    }
}

/* Total log-probabilities of R rows of source masks into y (and, when lpt is not NULL, each answer token's: [R, n]). */
static cattr_status score_rows(cattr_llm *m, const cattr_attr_params *p, ctx_state *c, const unsigned char *mask,
                               int64_t R, double *y, double *lpt) {
    unsigned char *keep = malloc((size_t)(R * c->T));
    double *lp = malloc((size_t)(R * c->n) * sizeof *lp);
    cattr_status st = keep && lp ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) token_masks(c, mask, R, keep);
    if (st == CATTR_OK) st = cattr_llm_score_removals(m, p, c->prompt, c->T, c->ans, c->n, keep, R, lp);
    for (int64_t r = 0; st == CATTR_OK && r < R; r++) {
        y[r] = 0;
        for (int64_t q = 0; q < c->n; q++) y[r] += lp[r * c->n + q];
    }
    if (st == CATTR_OK && lpt) memcpy(lpt, lp, (size_t)(R * c->n) * sizeof *lp);
    free(keep);
    free(lp);
    return st;
}

/* The prompt and the sources: every document's tokens, or its pieces of kind `kind` (NULL: the documents whole;
 * "sentences", "lines", or "spans": r's; each a run of tokens; bytes in res). */
static cattr_status build_sources(cattr_llm *m, const cattr_context_request *r, const char *kind, ctx_state *c,
                                  cattr_context_result *res) {
    int64_t *ids = NULL, k = 0, cap_s = 0;
    cattr_status st = append_text(m, r->prefix ? r->prefix : "", &c->prompt, &c->T, &c->cap, &ids, &k);
    free(ids), ids = NULL;
    for (int d = 0; d < r->n_documents && st == CATTR_OK; d++) {
        if (!r->documents[d] || !r->documents[d][0]) {
            st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "document %d is empty", d);
            break;
        }
        if (d > 0) st = append_text(m, r->separator ? r->separator : "\n\n", &c->prompt, &c->T, &c->cap, &ids, &k);
        free(ids), ids = NULL;
        int64_t base = c->T;
        if (st == CATTR_OK) st = append_text(m, r->documents[d], &c->prompt, &c->T, &c->cap, &ids, &k);
        int64_t *seg = st == CATTR_OK ? calloc((size_t)k + 1, sizeof *seg) : NULL, G = 1;
        int64_t *bs = st == CATTR_OK ? malloc((size_t)(k + 1) * sizeof *bs) : NULL;
        int64_t *be = st == CATTR_OK ? malloc((size_t)(k + 1) * sizeof *be) : NULL;
        if (st == CATTR_OK && (!seg || !bs || !be)) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        int64_t sp0 = 0, nsp = 0, *sp = NULL; /* this document's spans */
        while (kind && !strcmp(kind, "spans") && sp0 < r->n_spans && r->spans[3 * sp0] < d) sp0++;
        while (kind && !strcmp(kind, "spans") && sp0 + nsp < r->n_spans && r->spans[3 * (sp0 + nsp)] == d) nsp++;
        if (st == CATTR_OK && nsp && !(sp = malloc((size_t)(2 * nsp) * sizeof *sp))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        for (int64_t q = 0; sp && q < nsp; q++) sp[2 * q] = r->spans[3 * (sp0 + q) + 1], sp[2 * q + 1] = r->spans[3 * (sp0 + q) + 2];
        if (st == CATTR_OK && kind) {
            st = cattr_llm_segments(m, r->documents[d], ids, k, kind, sp, nsp, seg, &G);
            if (st != CATTR_OK) st = cx_fail_context(st, "document %d", d);
        }
        free(sp);
        if (st == CATTR_OK) st = cattr_llm_token_spans(m, r->documents[d], ids, k, bs, be);
        if (st == CATTR_OK && c->S + G > cap_s) { /* grow the per-source arrays */
            cap_s = (c->S + G) * 2;
            int *dd = realloc(res->document, (size_t)cap_s * sizeof *dd);
            if (dd) res->document = dd;
            int64_t **arr[4] = {&res->start, &res->end, &c->t0, &c->t1};
            for (int q = 0; q < 4 && dd; q++) {
                int64_t *g2 = realloc(*arr[q], (size_t)cap_s * sizeof *g2);
                if (g2) *arr[q] = g2;
                else dd = NULL;
            }
            if (!dd) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        }
        for (int64_t g = 0; st == CATTR_OK && g < G; g++) {
            res->document[c->S + g] = d;
            c->t0[c->S + g] = -1;
        }
        for (int64_t t = 0; st == CATTR_OK && t < k; t++) {
            int64_t s = c->S + seg[t];
            if (c->t0[s] < 0) c->t0[s] = base + t, res->start[s] = bs[t];
            c->t1[s] = base + t + 1, res->end[s] = be[t];
        }
        if (st == CATTR_OK) c->S += G;
        free(seg), free(bs), free(be), free(ids), ids = NULL;
    }
    if (st == CATTR_OK) st = append_text(m, r->suffix ? r->suffix : "", &c->prompt, &c->T, &c->cap, &ids, &k);
    free(ids);
    return st;
}

/* The answer: given, or greedy (trailing special tokens, end of turn or of text, dropped). */
static cattr_status make_answer(cattr_llm *m, const cattr_attr_params *p, const cattr_context_request *r, ctx_state *c) {
    if (r->answer) {
        CX_CHECK(cattr_llm_encode(m, r->answer, &c->ans, &c->n));
    } else {
        cattr_attr_params gp = *p; /* the call's cancel flag; its progress counts ablations, not tokens */
        gp.progress = NULL;
        CX_CHECK(cattr_llm_generate_params(m, &gp, c->prompt, c->T, r->max_new > 0 ? r->max_new : 64, &c->ans, &c->n));
        while (c->n > 0) {
            char *txt = NULL;
            if (cattr_llm_decode(m, c->ans + c->n - 1, 1, 1, &txt) != CATTR_OK) break;
            bool special = !txt[0];
            free(txt);
            if (!special && c->ans[c->n - 1] != cattr_llm_eos_token(m)) break;
            c->n--;
        }
    }
    if (c->n < 1)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, r->answer ? "the answer encodes to no token"
                                                            : "the generated answer is empty; give the answer");
    return CATTR_OK;
}

static int cmp_desc(const void *x, const void *y) {
    double a = ((const double *)x)[0], b = ((const double *)y)[0];
    return a < b ? 1 : a > b ? -1 : 0;
}

/* The sources in ranking order into order[2 * S] (key, index pairs): by score, the proxy's rescored ones first. */
static void rank_sources(const cattr_context_result *res, int64_t S, double *order) {
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t s = 0; s < S; s++) lo = fmin(lo, res->score[s]), hi = fmax(hi, res->score[s]);
    for (int64_t s = 0; s < S; s++) { /* the proxy's scores below every rescored one, in their own order */
        double v = res->score[s];
        if (res->rescored && !res->rescored[s]) v = lo - 1 - (hi - v);
        order[2 * s] = v, order[2 * s + 1] = (double)s;
    }
    qsort(order, (size_t)S, 2 * sizeof *order, cmp_desc);
}

cattr_status cattr_context_rank(const cattr_context_result *r, int64_t *order) {
    if (!r || !order) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_context_rank: NULL argument");
    double *o = malloc((size_t)(2 * r->n_sources + 1) * sizeof *o);
    if (!o) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    rank_sources(r, r->n_sources, o);
    for (int64_t s = 0; s < r->n_sources; s++) order[s] = (int64_t)o[2 * s + 1];
    free(o);
    return CATTR_OK;
}

/* A leave-one-out over the sources `which` (count k; NULL: all of c's), scored by m: row 0 keeps everything, row
 * 1 + i drops source which[i]. y[1 + k] and, when lpt is not NULL, lpt[(1 + k) * n]. */
static cattr_status loo_rows(cattr_llm *m, const cattr_attr_params *p, ctx_state *c, const int64_t *which, int64_t k,
                             double *y, double *lpt) {
    unsigned char *mask = malloc((size_t)((1 + k) * c->S) + 1);
    if (!mask) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    memset(mask, 1, (size_t)((1 + k) * c->S));
    for (int64_t i = 0; i < k; i++) mask[(1 + i) * c->S + (which ? which[i] : i)] = 0;
    cattr_status st = score_rows(m, p, c, mask, 1 + k, y, lpt);
    free(mask);
    return st;
}

/* AttriBoT's hierarchy over the fine sources of c: leave-one-out over the documents (all their pieces removed), then
 * over the pieces of the top_documents best; the sources become those pieces and the other documents whole (c's token
 * runs and res's spans and scores rewritten), c->y[0] the whole context's log-probability (and c->lpt row 0 with
 * res->token_score when per token). */
static cattr_status hierarchical(cattr_llm *m, const cattr_attr_params *p, const cattr_context_request *r,
                                 ctx_state *c, cattr_context_result *res) {
    int D = r->n_documents, top = r->top_documents > 0 ? r->top_documents : 3;
    int64_t S = c->S, n = c->n;
    bool pt = r->per_token;
    unsigned char *mask = malloc((size_t)((D + 1 + S) * S) + 1);
    double *y = malloc((size_t)(D + 1 + S) * sizeof *y), *ds = malloc((size_t)(2 * D) * sizeof *ds);
    double *lpt = pt ? malloc((size_t)((D + 1 + S) * n) * sizeof *lpt) : NULL;
    double *ts = pt ? malloc((size_t)((S + D) * n) * sizeof *ts) : NULL;
    bool *refine = calloc((size_t)D, sizeof *refine);
    int64_t *t0 = malloc((size_t)(S + D) * sizeof *t0), *t1 = malloc((size_t)(S + D) * sizeof *t1);
    int64_t *b0 = malloc((size_t)(S + D) * sizeof *b0), *b1 = malloc((size_t)(S + D) * sizeof *b1);
    int *doc = malloc((size_t)(S + D) * sizeof *doc);
    double *sc = malloc((size_t)(S + D) * sizeof *sc);
    cattr_status st = mask && y && ds && refine && t0 && t1 && b0 && b1 && doc && sc && (!pt || (lpt && ts))
                          ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t row = 0; st == CATTR_OK && row <= D; row++) /* row 0 keeps everything; row 1 + d drops document d */
        for (int64_t s = 0; s < S; s++) mask[row * S + s] = row == 0 || res->document[s] != row - 1;
    if (st == CATTR_OK) st = score_rows(m, p, c, mask, D + 1, y, lpt);
    for (int d = 0; st == CATTR_OK && d < D; d++) ds[2 * d] = y[0] - y[1 + d], ds[2 * d + 1] = d;
    if (st == CATTR_OK) qsort(ds, (size_t)D, 2 * sizeof *ds, cmp_desc);
    for (int q = 0; st == CATTR_OK && q < top && q < D; q++) refine[(int)ds[2 * q + 1]] = true;
    int64_t R2 = 0;
    for (int64_t s = 0; st == CATTR_OK && s < S; s++) /* one row per piece of a refined document */
        if (refine[res->document[s]]) {
            for (int64_t q = 0; q < S; q++) mask[R2 * S + q] = q != s;
            R2++;
        }
    double *y2 = y + D + 1, *lpt2 = pt ? lpt + (D + 1) * n : NULL;
    if (st == CATTR_OK && R2) st = score_rows(m, p, c, mask, R2, y2, lpt2);
    int64_t ns = 0, at = 0;
    for (int d = 0; st == CATTR_OK && d < D; d++) {
        int64_t first = -1, last = -1;
        for (int64_t s = 0; s < S; s++) {
            if (res->document[s] != d) continue;
            if (first < 0) first = s;
            last = s;
            if (refine[d]) {
                doc[ns] = d, t0[ns] = c->t0[s], t1[ns] = c->t1[s], b0[ns] = res->start[s], b1[ns] = res->end[s];
                for (int64_t q = 0; pt && q < n; q++) ts[ns * n + q] = lpt[q] - lpt2[at * n + q];
                sc[ns++] = y[0] - y2[at++];
            }
        }
        if (!refine[d] && first >= 0) {
            doc[ns] = d, t0[ns] = c->t0[first], t1[ns] = c->t1[last], b0[ns] = res->start[first], b1[ns] = res->end[last];
            for (int64_t q = 0; pt && q < n; q++) ts[ns * n + q] = lpt[q] - lpt[(1 + d) * n + q];
            sc[ns++] = y[0] - y[1 + d];
        }
    }
    if (st == CATTR_OK) { /* the new sources in place of the pieces */
        memcpy(c->t0, t0, (size_t)ns * sizeof *t0), memcpy(c->t1, t1, (size_t)ns * sizeof *t1);
        memcpy(res->start, b0, (size_t)ns * sizeof *b0), memcpy(res->end, b1, (size_t)ns * sizeof *b1);
        memcpy(res->document, doc, (size_t)ns * sizeof *doc);
        free(res->score);
        res->score = sc, sc = NULL;
        res->token_score = ts, ts = NULL;
        c->S = ns;
        c->y = calloc(4, sizeof *c->y);
        if (!c->y) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else c->y[0] = y[0];
        res->ablations = D + R2;
    }
    free(mask), free(y), free(ds), free(lpt), free(ts), free(refine), free(t0), free(t1), free(b0), free(b1), free(doc);
    free(sc);
    return st;
}

/* AttriBoT's proxy: leave-one-out over every source with r->proxy (its tokens must be this model's), then with m over
 * the proxy_top best. res->score, token_score (per token), rescored; c->y[0] the whole context's log-probability. */
static cattr_status proxy(cattr_llm *m, const cattr_attr_params *p, const cattr_context_request *r, const char *kind,
                          ctx_state *c, cattr_context_result *res) {
    int64_t S = c->S, n = c->n, K = r->proxy_top > 0 ? r->proxy_top : (S / 5 > 5 ? S / 5 : 5);
    if (K > S) K = S;
    bool pt = r->per_token;
    ctx_state pc = {0};
    cattr_context_result pr = {0};
    cattr_status st = build_sources(r->proxy, r, kind, &pc, &pr); /* the same prompt, tokenized by the proxy */
    if (st != CATTR_OK) st = cx_fail_context(st, "the proxy model");
    if (st == CATTR_OK && (pc.T != c->T || pc.S != S || memcmp(pc.prompt, c->prompt, (size_t)c->T * sizeof *c->prompt) ||
                           memcmp(pc.t0, c->t0, (size_t)S * sizeof *c->t0))) {
        int64_t t = 0;
        while (t < pc.T && t < c->T && pc.prompt[t] == c->prompt[t]) t++;
        st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "the proxy model's tokenizer gives other tokens than the model's "
                     "(first at token %lld of %lld): a proxy must share the model's tokenizer", (long long)t,
                     (long long)c->T);
    }
    pc.ans = c->ans, pc.n = n; /* borrowed */
    double *py = malloc((size_t)(1 + S) * sizeof *py), *ty = malloc((size_t)(1 + K) * sizeof *ty);
    double *plp = pt ? malloc((size_t)((1 + S) * n) * sizeof *plp) : NULL;
    double *tlp = pt ? malloc((size_t)((1 + K) * n) * sizeof *tlp) : NULL;
    double *order = malloc((size_t)(2 * S) * sizeof *order);
    int64_t *top = malloc((size_t)K * sizeof *top);
    res->score = calloc((size_t)S, sizeof *res->score);
    res->rescored = calloc((size_t)S, 1);
    res->token_score = pt ? malloc((size_t)(S * n) * sizeof *res->token_score) : NULL;
    c->y = calloc(4, sizeof *c->y);
    if (st == CATTR_OK && (!py || !ty || !order || !top || !res->score || !res->rescored || !c->y ||
                           (pt && (!plp || !tlp || !res->token_score))))
        st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    double t0 = now_s();
    if (st == CATTR_OK) st = loo_rows(r->proxy, p, &pc, NULL, S, py, plp);
    res->seconds_proxy = now_s() - t0;
    for (int64_t s = 0; st == CATTR_OK && s < S; s++) order[2 * s] = py[0] - py[1 + s], order[2 * s + 1] = (double)s;
    if (st == CATTR_OK) qsort(order, (size_t)S, 2 * sizeof *order, cmp_desc);
    for (int64_t i = 0; st == CATTR_OK && i < K; i++) top[i] = (int64_t)order[2 * i + 1];
    if (st == CATTR_OK) st = loo_rows(m, p, c, top, K, ty, tlp);
    for (int64_t s = 0; st == CATTR_OK && s < S; s++) {
        res->score[s] = py[0] - py[1 + s];
        for (int64_t q = 0; pt && q < n; q++) res->token_score[s * n + q] = plp[q] - plp[(1 + s) * n + q];
    }
    for (int64_t i = 0; st == CATTR_OK && i < K; i++) {
        int64_t s = top[i];
        res->score[s] = ty[0] - ty[1 + i], res->rescored[s] = 1;
        for (int64_t q = 0; pt && q < n; q++) res->token_score[s * n + q] = tlp[q] - tlp[(1 + i) * n + q];
    }
    if (st == CATTR_OK) c->y[0] = ty[0], res->ablations = K, res->proxy_ablations = S;
    free(pc.prompt), free(pc.t0), free(pc.t1), free(pr.document), free(pr.start), free(pr.end);
    free(py), free(ty), free(plp), free(tlp), free(order), free(top);
    return st;
}

/* ContextCite's fit: a Lasso of the rows' values y [n_main] (stride ys) on their masks (c->mask rows 1..), float32 as
 * Lime's, into coef [S]. */
static cattr_status surrogate_fit(const ctx_state *c, int64_t n_main, const double *y, int64_t ys, double alpha,
                                  double *coef) {
    int64_t S = c->S;
    float *X = malloc((size_t)(n_main * S + 1) * sizeof *X), *Y = malloc((size_t)n_main * sizeof *Y);
    float *W = malloc((size_t)n_main * sizeof *W), *cf = malloc((size_t)S * sizeof *cf), icpt = 0;
    cattr_status st = X && Y && W && cf ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t row = 0; st == CATTR_OK && row < n_main; row++) {
        for (int64_t s = 0; s < S; s++) X[row * S + s] = c->mask[(1 + row) * S + s];
        Y[row] = (float)y[row * ys], W[row] = 1;
    }
    cx_lasso_opts lo = CX_LASSO_DEFAULTS(alpha);
    if (st == CATTR_OK) st = cx_lasso_fit(n_main, S, X, Y, W, &lo, cf, &icpt, NULL);
    for (int64_t s = 0; st == CATTR_OK && s < S; s++) coef[s] = cf[s];
    free(X), free(Y), free(W), free(cf);
    return st;
}

/* The sources' kind for build_sources: NULL (whole documents) or cattr_llm_segments' kind. */
static const char *source_kind(const cattr_context_request *r) {
    static const char *const kinds[] = {NULL, "sentences", "lines", "spans"};
    if (r->method == CATTR_CONTEXT_HIERARCHICAL && r->sources == CATTR_CONTEXT_DOCUMENTS) return "sentences";
    return kinds[r->sources];
}

static cattr_status check_request(const cattr_context_request *r) {
    if (r->n_documents < 1) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "no document given");
    if ((unsigned)r->method > CATTR_CONTEXT_PROXY)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "method must be CATTR_CONTEXT_LOO, _SURROGATE, _GRADIENT, "
                       "_HIERARCHICAL or _PROXY (got %d)", (int)r->method);
    if ((unsigned)r->sources > CATTR_CONTEXT_SPANS)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "sources must be CATTR_CONTEXT_DOCUMENTS, _SENTENCES, _LINES or "
                       "_SPANS (got %d)", (int)r->sources);
    if (r->method == CATTR_CONTEXT_PROXY && !r->proxy)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "the proxy method needs a proxy model");
    if (!(r->keep_prob < 1)) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "keep_prob must be between 0 and 1");
    if (r->sources == CATTR_CONTEXT_SPANS && (r->n_spans < 0 || (r->n_spans && !r->spans)))
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "sources CATTR_CONTEXT_SPANS: no spans given");
    for (int64_t q = 0; r->sources == CATTR_CONTEXT_SPANS && q < r->n_spans; q++)
        if (r->spans[3 * q] < 0 || r->spans[3 * q] >= r->n_documents || (q && r->spans[3 * q] < r->spans[3 * q - 3]))
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "span %lld: its document %lld is out of range or out of order "
                           "(spans come in the documents' order)", (long long)q, (long long)r->spans[3 * q]);
    return CATTR_OK;
}

cattr_status cattr_llm_explain_context(cattr_llm *m, const cattr_attr_params *p, const cattr_context_request *r,
                                       cattr_context_result **out) {
    if (!m || !p || !r || !out || (!r->documents && r->n_documents))
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_llm_explain_context: NULL argument");
    *out = NULL;
    CX_CHECK(check_request(r));
    double keep_p = r->keep_prob > 0 ? r->keep_prob : 0.5, alpha = r->alpha >= 0 ? r->alpha : 0.01;
    bool sur = r->method == CATTR_CONTEXT_SURROGATE, pt = r->per_token;
    int64_t n_main = 0, R = 0;
    cattr_context_result *res = calloc(1, sizeof *res);
    ctx_state c = {0};
    if (!res) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    res->lds = NAN;
    for (int q = 0; q < 3; q++) res->top_k_drop[q] = NAN;
    bool hier = r->method == CATTR_CONTEXT_HIERARCHICAL, grad = r->method == CATTR_CONTEXT_GRADIENT;
    bool prox = r->method == CATTR_CONTEXT_PROXY, rows = !grad && !hier && !prox;
    cattr_status st = build_sources(m, r, source_kind(r), &c, res);
    double t0 = now_s();
    if (st == CATTR_OK) st = make_answer(m, p, r, &c);
    res->seconds_generation = r->answer ? 0 : now_s() - t0;
    t0 = now_s();
    if (st == CATTR_OK && hier) st = hierarchical(m, p, r, &c, res);
    if (st == CATTR_OK && prox) st = proxy(m, p, r, source_kind(r), &c, res);
    if (st == CATTR_OK && grad) { /* gradient x activation summed per source: one pass (one per token with per_token) */
        res->score = calloc((size_t)c.S + 1, sizeof *res->score);
        res->token_score = pt ? malloc((size_t)(c.S * c.n) * sizeof *res->token_score) : NULL;
        c.y = calloc(4, sizeof *c.y);
        int64_t *seg = malloc((size_t)c.T * sizeof *seg), G = c.S;
        double *tok = malloc((size_t)(c.n * (c.S + 1) + c.T) * sizeof *tok), *lpt = malloc((size_t)c.n * sizeof *lpt);
        if (!res->score || !c.y || !seg || !tok || !lpt || (pt && !res->token_score))
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        for (int64_t t = 0; st == CATTR_OK && t < c.T; t++) seg[t] = -1;
        for (int64_t s = 0; st == CATTR_OK && s < c.S; s++)
            for (int64_t t = c.t0[s]; t < c.t1[s]; t++) seg[t] = s;
        for (int64_t t = 0; st == CATTR_OK && t < c.T; t++)
            if (seg[t] < 0) seg[t] = c.S, G = c.S + 1;
        if (st == CATTR_OK && pt) { /* the answer's tokens one by one: LayerGradientXActivation's rows */
            cattr_attr_params gp = cattr_attr_default_params(CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION);
            gp.dtype = p->dtype, gp.device = p->device, gp.max_memory = p->max_memory, gp.precision = p->precision;
            gp.progress = p->progress, gp.progress_user = p->progress_user, gp.cancel = p->cancel;
            cattr_llm_call call = cattr_llm_call_make(c.prompt, c.T, c.ans, c.n);
            call.segments = seg, call.n_segments = G;
            st = cattr_llm_attribute(m, &gp, &call, res->score, tok, lpt, NULL);
            for (int64_t q = 0; st == CATTR_OK && q < c.n; q++) c.y[0] += lpt[q];
            for (int64_t s = 0; st == CATTR_OK && s < c.S; s++)
                for (int64_t q = 0; q < c.n; q++) res->token_score[s * c.n + q] = tok[q * G + s];
        } else if (st == CATTR_OK) { /* the whole answer at once; its log-probability from the unablated row */
            unsigned char *all = malloc((size_t)c.S + 1);
            if (!all) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            if (st == CATTR_OK) st = cx_llm_set_precision(m, p);
            if (st == CATTR_OK) st = cx_llm_grad_x_act_total(m, p, c.prompt, c.T, c.ans, c.n, tok);
            for (int64_t t = 0; st == CATTR_OK && t < c.T; t++) /* summed per source in token order */
                if (seg[t] < c.S) res->score[seg[t]] = cx_rnd(p->dtype, res->score[seg[t]] + tok[t]);
            if (all) memset(all, 1, (size_t)c.S + 1);
            if (st == CATTR_OK) st = score_rows(m, p, &c, all, 1, c.y, NULL);
            free(all);
        }
        free(seg), free(tok), free(lpt);
    }
    /* the rows: 0 keeps everything; then one per source (loo) or the random masks (room for the held-out ones) */
    cx_rng g;
    cx_rng_init(&g, r->seed, CTX_STREAM);
    if (st == CATTR_OK && rows) {
        n_main = sur ? (r->samples > 0 ? r->samples : 64) : c.S;
        R = 1 + n_main;
        c.mask = malloc((size_t)((R + HELD_OUT) * c.S) + 1);
        c.y = malloc((size_t)(R + HELD_OUT) * sizeof *c.y);
        c.lpt = pt ? malloc((size_t)(R * c.n) * sizeof *c.lpt) : NULL;
        res->score = calloc((size_t)c.S, sizeof *res->score);
        res->token_score = pt ? malloc((size_t)(c.S * c.n) * sizeof *res->token_score) : NULL;
        if (!c.mask || !c.y || !res->score || (pt && (!c.lpt || !res->token_score)))
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK && rows) {
        memset(c.mask, 1, (size_t)c.S);
        for (int64_t row = 1; row < R; row++)
            for (int64_t s = 0; s < c.S; s++)
                c.mask[row * c.S + s] = sur ? cx_rng_uniform(&g) < keep_p : s != row - 1;
        st = score_rows(m, p, &c, c.mask, R, c.y, c.lpt);
    }
    if (st == CATTR_OK && rows && !sur) {
        for (int64_t s = 0; s < c.S; s++) {
            res->score[s] = c.y[0] - c.y[1 + s];
            for (int64_t q = 0; pt && q < c.n; q++) res->token_score[s * c.n + q] = c.lpt[q] - c.lpt[(1 + s) * c.n + q];
        }
    } else if (st == CATTR_OK && sur) { /* the Lasso fit of the masks' log-probabilities (and one per answer token) */
        double *cf = malloc((size_t)c.S * sizeof *cf);
        if (!cf) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK) st = surrogate_fit(&c, n_main, c.y + 1, 1, alpha, res->score);
        for (int64_t q = 0; st == CATTR_OK && pt && q < c.n; q++) {
            st = surrogate_fit(&c, n_main, c.lpt + c.n + q, c.n, alpha, cf);
            for (int64_t s = 0; st == CATTR_OK && s < c.S; s++) res->token_score[s * c.n + q] = cf[s];
        }
        free(cf);
    }
    res->seconds_ablations = now_s() - t0;
    if (st == CATTR_OK && r->quality) { /* the top 1, 3 and 5 sources removed; the held-out random masks (the LDS) */
        double tq = now_s();
        int64_t S = c.S, Q = 4 + HELD_OUT;
        double *order = malloc((size_t)(2 * S) * sizeof *order), *yq = malloc((size_t)Q * sizeof *yq);
        double *pred = malloc(HELD_OUT * sizeof *pred);
        unsigned char *tk = malloc((size_t)(Q * S));
        if (!order || !yq || !pred || !tk) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK) rank_sources(res, S, order);
        static const int ks[3] = {1, 3, 5};
        if (st == CATTR_OK) memset(tk, 1, (size_t)(4 * S));
        for (int q = 0; st == CATTR_OK && q < 3; q++)
            for (int64_t s = 0; s < ks[q] && s < S; s++) tk[(q + 1) * S + (int64_t)order[2 * s + 1]] = 0;
        for (int64_t h = 0; st == CATTR_OK && h < HELD_OUT; h++) { /* (the surrogate's: its masks' stream goes on) */
            pred[h] = 0;
            for (int64_t s = 0; s < S; s++) {
                tk[(4 + h) * S + s] = cx_rng_uniform(&g) < keep_p;
                pred[h] += res->score[s] * tk[(4 + h) * S + s];
            }
        }
        if (st == CATTR_OK) st = score_rows(m, p, &c, tk, Q, yq, NULL);
        for (int q = 0; st == CATTR_OK && q < 3; q++) res->top_k_drop[q] = yq[0] - yq[q + 1];
        if (st == CATTR_OK) res->lds = spearman(pred, yq + 4, HELD_OUT), res->held_out = HELD_OUT;
        if (st == CATTR_OK && rows) { /* the held-out rows join the result's ablation rows */
            memcpy(c.mask + R * S, tk + 4 * S, (size_t)(HELD_OUT * S));
            memcpy(c.y + R, yq + 4, HELD_OUT * sizeof *yq);
            R += HELD_OUT;
        }
        free(order), free(yq), free(pred), free(tk);
        res->seconds_quality = now_s() - tq;
    }
    if (st == CATTR_OK) st = cattr_llm_decode(m, c.ans, c.n, 1, &res->answer);
    if (st == CATTR_OK) {
        res->n_answer = c.n, res->n_prompt = c.T, res->answer_logprob = c.y[0], res->n_sources = c.S;
        if (rows) res->ablations = n_main;
        res->answer_ids = c.ans, c.ans = NULL;
        if (rows) res->n_rows = R, res->row_logprob = c.y, c.y = NULL, res->masks = c.mask, c.mask = NULL;
        *out = res;
    } else {
        cattr_context_result_free(res);
    }
    free(c.prompt), free(c.ans), free(c.t0), free(c.t1), free(c.mask), free(c.y), free(c.lpt);
    return st;
}
