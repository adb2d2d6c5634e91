/* llm_text.c - language models driven by text (Captum's LLMAttribution over TextTemplateInput): a template whose
 * slots are filled with values or baselines, every text tokenized afresh and scored; and greedy generation. */
#include "attr/llm_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The template with slot j filled by fill(j); NULL on a slot-count mismatch or allocation failure. */
static char *fill_template(const char *tmpl, int n_slots, const char *const *vals, int skip, const char *repl) {
    size_t len = strlen(tmpl) + 1;
    for (int j = 0; j < n_slots; j++) len += strlen(j == skip ? (repl ? repl : "") : vals[j]);
    char *out = malloc(len), *o = out;
    int slot = 0;
    if (!out) return NULL;
    for (const char *c = tmpl; *c;) {
        if (c[0] == '{' && c[1] == '}') {
            if (slot >= n_slots) {
                free(out);
                return NULL;
            }
            const char *v = slot == skip ? (repl ? repl : "") : vals[slot];
            size_t l = strlen(v);
            memcpy(o, v, l);
            o += l;
            slot++;
            c += 2;
        } else {
            *o++ = *c++;
        }
    }
    *o = 0;
    if (slot != n_slots) {
        free(out);
        return NULL;
    }
    return out;
}

/* f_k (k = 0..n-1) of the text's tokens followed by the target (teacher forcing). */
static cattr_status text_logprobs(cattr_llm *m, cattr_dtype dt, const char *text, const int64_t *tg, int64_t n,
                                  double *f) {
    int64_t *ids = NULL, T = 0;
    CX_CHECK(cattr_llm_encode(m, text, &ids, &T));
    int64_t *seq = realloc(ids, (size_t)(T + n + 1) * sizeof *seq);
    if (!seq) {
        free(ids);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (T == 0) {
        free(seq);
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "the text '%s' tokenizes to nothing", text);
    }
    memcpy(seq + T, tg, (size_t)n * sizeof *seq);
    cattr_status st = CATTR_OK;
    for (int64_t k = 0; k < n && st == CATTR_OK; k++) st = cx_llm_forward(m, dt, seq, 1, T + k, tg[k], &f[k], NULL);
    free(seq);
    return st;
}

static cattr_status llm_attribute_template(cattr_llm *m, const cattr_attr_params *p, const char *tmpl,
                                           const char *const *values, const char *const *baselines, int n_slots,
                                           const int64_t *target, int64_t n, double *seq_attr, double *token_attr);

cattr_status cattr_llm_attribute_template(cattr_llm *m, const cattr_attr_params *p, const char *tmpl,
                                          const char *const *values, const char *const *baselines, int n_slots,
                                          const int64_t *target, int64_t n, double *seq_attr, double *token_attr) {
    cattr_status st = llm_attribute_template(m, p, tmpl, values, baselines, n_slots, target, n, seq_attr, token_attr);
    if (st != CATTR_OK) return st;
    st = cx_llm_finite(seq_attr, n_slots, "seq_attr");
    if (st == CATTR_OK) st = cx_llm_finite(token_attr, n * n_slots, "token_attr");
    if (st == CATTR_OK) return CATTR_OK;
    char found[1024];
    snprintf(found, sizeof found, "%s", cattr_last_error());
    m->diagnose = true;
    st = llm_attribute_template(m, p, tmpl, values, baselines, n_slots, target, n, seq_attr, token_attr);
    m->diagnose = false;
    return cx_diagnosis(st, found);
}

static cattr_status llm_template_run(cattr_llm *m, const cattr_attr_params *p, const char *tmpl,
                                     const char *const *values, const char *const *baselines, int n_slots,
                                     const int64_t *target, int64_t n, double *seq_attr, double *token_attr);

/* llm_template_run with m->call_p set to p while it runs (as llm_attribute). */
static cattr_status llm_attribute_template(cattr_llm *m, const cattr_attr_params *p, const char *tmpl,
                                           const char *const *values, const char *const *baselines, int n_slots,
                                           const int64_t *target, int64_t n, double *seq_attr, double *token_attr) {
    if (!m || !p) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_llm_attribute_template: NULL model or params");
    const cattr_attr_params *outer = m->call_p;
    m->call_p = p;
    cx_watch_note(p->progress, p->progress_user, 0, 0);
    cattr_status st = llm_template_run(m, p, tmpl, values, baselines, n_slots, target, n, seq_attr, token_attr);
    m->call_p = outer;
    return st;
}

static cattr_status llm_template_run(cattr_llm *m, const cattr_attr_params *p, const char *tmpl,
                                     const char *const *values, const char *const *baselines, int n_slots,
                                     const int64_t *target, int64_t n, double *seq_attr, double *token_attr) {
    if (!tmpl || !values || !target || !seq_attr || !token_attr)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_llm_attribute_template: NULL template, values, target or "
                       "result array");
    if (n_slots < 1 || n_slots > 4096)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_slots must be from 1 to 4096 (got %d)", n_slots);
    if (n < 1 || n > m->cfg.max_position_embeddings)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_target must be from 1 to the model's context of %lld tokens (got "
                       "%lld)", (long long)m->cfg.max_position_embeddings, (long long)n);
    for (int i = 0; i < n_slots; i++)
        if (!values[i] || (baselines && !baselines[i]))
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "slot %d's %s is NULL", i, values[i] ? "baseline" : "value");
    if (p->dtype != CATTR_FLOAT32 && p->dtype != CATTR_FLOAT64)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "dtype must be CATTR_FLOAT32 (0) or CATTR_FLOAT64 (1) (got %d)",
                       (int)p->dtype);
    if (p->method != CATTR_METHOD_FEATURE_ABLATION)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "a text template is attributed with feature-ablation only (got %s)",
                       cattr_method_name(p->method));
    CX_CHECK(cx_llm_check_ids(m, target, n, "target"));
    CX_CHECK(cx_llm_set_precision(m, p));
    double *f0 = malloc((size_t)n * sizeof *f0), *fi = malloc((size_t)n * sizeof *fi);
    char *text = fill_template(tmpl, n_slots, values, -1, NULL);
    cattr_status st = f0 && fi ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK && !text)
        st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "the template '%s' does not hold %d slots '{}'", tmpl, n_slots);
    if (st == CATTR_OK) st = text_logprobs(m, p->dtype, text, target, n, f0);
    free(text);
    for (int i = 0; i < n_slots && st == CATTR_OK; i++) {
        char *ti = fill_template(tmpl, n_slots, values, i, baselines ? baselines[i] : NULL);
        st = ti ? text_logprobs(m, p->dtype, ti, target, n, fi) : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        free(ti);
        for (int64_t k = 0; k < n && st == CATTR_OK; k++) /* float32 accumulation, as Captum's LLMAttribution */
            token_attr[k * n_slots + i] = (double)(float)cx_rnd(p->dtype, f0[k] - fi[k]);
        if (st == CATTR_OK) {
            double a = 0, b2 = 0;
            for (int64_t k = 0; k < n; k++) {
                a = cx_rnd(p->dtype, a + f0[k]);
                b2 = cx_rnd(p->dtype, b2 + fi[k]);
            }
            seq_attr[i] = (double)(float)cx_rnd(p->dtype, a - b2);
        }
        if (st == CATTR_OK) st = cx_llm_chunk_done(p, i + 1, n_slots);
    }
    free(f0);
    free(fi);
    return st;
}

cattr_status cattr_llm_generate(cattr_llm *m, cattr_dtype dtype, const int64_t *prompt, int64_t T, int max_new,
                                int64_t **out, int64_t *n) {
    cattr_attr_params p;
    memset(&p, 0, sizeof p);
    p.dtype = dtype;
    return cattr_llm_generate_params(m, &p, prompt, T, max_new, out, n);
}

cattr_status cattr_llm_generate_params(cattr_llm *m, const cattr_attr_params *p, const int64_t *prompt, int64_t T,
                                       int max_new, int64_t **out, int64_t *n) {
    if (!m || !p || !prompt || !out || !n)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_llm_generate: NULL argument");
    cattr_dtype dtype = p->dtype;
    *out = NULL;
    *n = 0;
    if (T < 1 || T > m->cfg.max_position_embeddings)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "the prompt must hold from 1 to the model's context of %lld tokens "
                       "(got %lld)", (long long)m->cfg.max_position_embeddings, (long long)T);
    if (max_new < 0)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "max_new must be 0 or more (got %d)", max_new);
    if (dtype != CATTR_FLOAT32 && dtype != CATTR_FLOAT64)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "dtype must be CATTR_FLOAT32 (0) or CATTR_FLOAT64 (1) (got %d)",
                       (int)dtype);
    CX_CHECK(cx_llm_check_ids(m, prompt, T, "prompt"));
    CX_CHECK(cx_llm_use_device(m, NULL));
    m->prec = 0; /* greedy generation in full precision */
    int64_t V = m->cfg.vocab_size, eos = cattr_llm_eos_token(m), nl = m->cfg.num_hidden_layers;
    int64_t ck = m->cfg.num_key_value_heads * m->cfg.head_dim;
    int64_t *gen = malloc((size_t)(max_new + 1) * sizeof *gen), *pos = malloc((size_t)(max_new + 1) * sizeof *pos);
    double *lp = malloc((size_t)V * sizeof *lp);
    void **kv = calloc((size_t)(2 * nl + 1), sizeof *kv);
    cattr_status st = gen && pos && lp && kv ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t i = 0; i < 2 * nl && st == CATTR_OK; i++)
        if (!(kv[i] = malloc((size_t)(T * ck) * cattr_dtype_size(dtype)))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    /* the prompt once (its keys and values kept); then each step runs only the tokens generated so far against them
     * (the prefix-continuing decoder): a step costs the answer's length, not the prompt's */
    if (st == CATTR_OK) st = cx_llm_forward(m, dtype, prompt, 1, T, -1, lp, kv);
    int64_t k = 0;
    while (st == CATTR_OK && k < max_new && T + k < m->cfg.max_position_embeddings) {
        int64_t best = 0;
        for (int64_t v = 1; v < V; v++)
            if (lp[v] > lp[best]) best = v;
        pos[k] = T + k;
        gen[k++] = best;
        if ((st = cx_llm_chunk_done(p, k, max_new)) != CATTR_OK) break; /* progress; a set cancel flag stops here */
        if (best == eos || k == max_new || T + k >= m->cfg.max_position_embeddings) break;
        int64_t segs[3] = {0, k, T}, last = k - 1;
        cattr_tensor *o = NULL;
        st = cx_llm_continue(m, dtype, gen, pos, k, segs, 1, &last, 1, kv, T, &o);
        for (int64_t v = 0; v < V && st == CATTR_OK; v++) lp[v] = cx_tensor_get(o, v);
        cattr_tensor_free(o);
    }
    for (int64_t i = 0; kv && i < 2 * nl; i++) free(kv[i]);
    free(kv);
    free(pos);
    free(lp);
    if (st != CATTR_OK) {
        free(gen);
        return st;
    }
    *out = gen;
    *n = k;
    return CATTR_OK;
}
