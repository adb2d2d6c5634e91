/* llm.c - token attribution for decoder-only language models (Captum's LLMAttribution and LLMGradientAttribution),
 * as adapters onto the explainer: LayerIntegratedGradients / LayerGradientXActivation on the embedding output are
 * the explainer's IG / InputXGradient on the embedding input of the decoder scored at the target positions; the
 * perturbation and surrogate methods (FeatureAblation, ShapleyValueSampling, Lime, KernelShap) are the explainer's
 * methods on the decoder's token-presence form (presence_attr). What stays here: the token bookkeeping, the
 * decoder's prefix reuse for FeatureAblation (one ragged pass continues the unablated prefix). Text templates and
 * greedy generation are in llm_text.c. */
#include "attr/llm_internal.h"
#include "io/tokenizer.h"
#include "models/decoder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>



/* Drops everything made for backend m->be (plans, uploaded constants, the explainer) and what the backend derived
 * from the weights, so that the next call starts afresh on another device. */
static void drop_device_state(cattr_llm *m) {
    cattr_explainer_free(m->ge);
    m->ge = NULL;
    cattr_explainer_free(m->pe);
    m->pe = NULL;
    cattr_explainer_free(m->xe);
    m->xe = NULL;
    for (int i = 0; i < 8; i++) {
        cx_consts_free(m->consts[i / 2][i % 2]);
        m->consts[i / 2][i % 2] = NULL;
    }
    if (m->be && m->be->forget_host)
        for (int v = 0; m->model && v < m->model->g->n_vals; v++) /* e.g. the bfloat16 panels of the weights */
            if (m->model->g->vals[v].kind == CG_VAL_CONST && m->model->g->vals[v].data)
                m->be->forget_host(m->be->ctx, m->model->g->vals[v].data->data);
    m->be = NULL;
}

/* Makes `device` (NULL: the checkpoint's device) the backend of this call. */
cattr_status cx_llm_use_device(cattr_llm *m, const char *device) {
    cx_backend *be = m->dev;
    if (device || !be) CX_CHECK(cx_backend_by_name(device, &be));
    if (be != m->be) {
        drop_device_state(m);
        m->be = be;
    }
    return CATTR_OK;
}

cattr_status cattr_llm_set_device(cattr_llm *m, const char *device) {
    if (!m) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_llm_set_device: checkpoint is NULL");
    cx_backend *be = NULL;
    CX_CHECK(cx_backend_by_name(device, &be));
    m->dev = be;
    return CATTR_OK;
}


/* cx_chunk_done for this file's own chunks of work, noting the counts that the beats of a watched run repeat. */
cattr_status cx_llm_chunk_done(const cattr_attr_params *p, int64_t done, int64_t total) {
    cx_watch_note(p->progress, p->progress_user, done, total);
    return cx_chunk_done(p, done, total);
}

/* The explainers of the language-model paths are kept between calls for parameters that compare equal but for the
 * budget and what a call watches (its progress callback and cancel flag, which the caller may give anew for every
 * call): copies them from the call's parameters p into the explainer and into its stored parameters. */
static void watch_fields(cattr_explainer *e, cattr_attr_params *stored, const cattr_attr_params *p) {
    e->p.progress = stored->progress = p->progress;
    e->p.progress_user = stored->progress_user = p->progress_user;
    e->p.cancel = stored->cancel = p->cancel;
}

/* Bytes a forward pass holds live per position of model c: the residual stream, the MLP's two projections and their
 * product, q/k/v, in double (the larger compute dtype), with a factor 2 for the arena's fragmentation. */
static size_t position_bytes(const cx_hf_config *c) {
    return 2 * (size_t)(3 * c->hidden_size + 3 * c->intermediate_size +
                        (c->num_attention_heads + 2 * c->num_key_value_heads) * c->head_dim) *
           sizeof(double);
}

/* The activation budget of the language-model paths without max_memory: a quarter of the available memory, capped at
 * what LLM_CAP_POSITIONS positions of the model c hold (at least LLM_CAP_FLOOR; c NULL: the floor). The cap keeps the
 * process near the size of its weights where more rows per pass would not make the products faster: at Qwen3-0.6B's
 * shapes the floor is 12 IG steps of 42 tokens per pass, where the GEMMs reach their rate. A model with wider layers
 * needs as many rows per product, so its cap grows with its layers (Qwen3-8B's: about 3 GiB; its LayerIG over 42 tokens
 * held 3 steps per pass under the fixed 896 MiB, products of 126 rows at two thirds of the GEMM rate). */
size_t cx_llm_default_budget(const cx_hf_config *c) {
    size_t b = cx_avail_memory() / 4, cap = c ? position_bytes(c) * LLM_CAP_POSITIONS : 0;
    if (cap < LLM_CAP_FLOOR) cap = LLM_CAP_FLOOR;
    return b < cap ? b : cap;
}

cattr_status cattr_llm_load(const char *dir, cattr_llm **out) {
    if (!dir || !out) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_llm_load: NULL argument");
    *out = NULL;
    cattr_llm *m = calloc(1, sizeof *m);
    if (!m) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cx_decoder_opts o = {.ids_input = false, .all_logits = false, .pos_input = false};
    const char *skip = getenv("CATTR_SKIP_MEMORY_CHECK");
    if (!skip || strcmp(skip, "1") != 0) { /* refused before loading when it cannot fit (never an OOM kill) */
        o.mem_avail = cx_avail_memory_for_load();
        o.mem_reserve = cx_llm_default_budget(NULL); /* what every model gets at least */
        if (!o.mem_avail) o.mem_avail = 1;
    }
    cattr_status st = cx_decoder_load(dir, &o, &m->model, &m->cfg);
    if (st == CATTR_OK) {
        int v = cg_find_value(m->model->g, "model.embed_tokens.weight");
        m->E = v >= 0 ? m->model->g->vals[v].data : NULL;
        if (!m->E) st = cx_fail(CATTR_ERR_INTERNAL, "no embedding matrix in the built model");
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    struct stat sb;
    if (st == CATTR_OK && stat(path, &sb) == 0) st = cx_tokenizer_load(dir, &m->tok);
    if (st != CATTR_OK) {
        cattr_llm_free(m);
        return st;
    }
    *out = m;
    return CATTR_OK;
}

cattr_status cattr_llm_model(cattr_llm *m, const cattr_model **out) {
    if (!m || !out) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_llm_model: NULL argument");
    *out = NULL;
    if (!m->ids_model) {
        cx_decoder_opts o = {.ids_input = true, .all_logits = false, .pos_input = false};
        CX_CHECK(cx_decoder_rebuild(m->model, &m->cfg, &o, &m->ids_model));
        m->ids_model->be = m->dev;
    }
    *out = m->ids_model;
    return CATTR_OK;
}

void cattr_llm_free(cattr_llm *m) {
    if (!m) return;
    /* the plans and the rebuilt graphs first: they borrow the model's weights */
    drop_device_state(m);
    cattr_model_free(m->pos_model);
    cattr_model_free(m->score_model);
    cattr_model_free(m->ids_model);
    for (int i = 0; i < 2; i++) cattr_model_free(m->pres_model[i]);
    for (int i = 0; i < 2; i++) cg_free(m->cached[i]);
    cattr_model_free(m->hi_model);
    cattr_model_free(m->model);
    cx_tokenizer_free(m->tok);
    free(m);
}

cattr_status cattr_llm_encode(const cattr_llm *m, const char *text, int64_t **ids, int64_t *n) {
    if (!m || !text || !ids || !n) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_llm_encode: NULL argument");
    if (!m->tok) return cx_fail(CATTR_ERR_UNSUPPORTED, "the checkpoint has no tokenizer.json: give token ids");
    return cx_tokenizer_encode(m->tok, text, strlen(text), false, ids, n);
}

size_t cattr_llm_token_text(const cattr_llm *m, int64_t id, char *buf, size_t size) {
    char *s = NULL;
    int n;
    if (m->tok && cx_tokenizer_decode(m->tok, &id, 1, false, &s) == CATTR_OK) n = snprintf(buf, size, "%s", s);
    else n = snprintf(buf, size, "<%lld>", (long long)id);
    free(s);
    return n > 0 ? (size_t)n : 0;
}

cattr_status cattr_llm_decode(const cattr_llm *m, const int64_t *ids, int64_t n, int skip_special, char **text) {
    if (text) *text = NULL;
    if (!m || !text || n < 0 || (n > 0 && !ids))
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_llm_decode: a NULL argument or a negative count");
    if (!m->tok) return cx_fail(CATTR_ERR_UNSUPPORTED, "the checkpoint has no tokenizer.json");
    return cx_tokenizer_decode(m->tok, ids, n, skip_special != 0, text);
}

int64_t cattr_llm_vocab_size(const cattr_llm *m) { return m->cfg.vocab_size; }
int64_t cattr_llm_max_positions(const cattr_llm *m) { return m->cfg.max_position_embeddings; }
int64_t cattr_llm_eos_token(const cattr_llm *m) {
    int64_t t = m->tok ? cx_tokenizer_special_id(m->tok, "eos") : -1;
    return t >= 0 ? t : m->cfg.eos_token_id;
}
int64_t cattr_llm_pad_token(const cattr_llm *m) {
    int64_t t = m->tok ? cx_tokenizer_special_id(m->tok, "pad") : -1;
    return t >= 0 ? t : cattr_llm_eos_token(m);
}

cattr_llm_call cattr_llm_call_make(const int64_t *prompt, int64_t T, const int64_t *target, int64_t n) {
    cattr_llm_call c;
    memset(&c, 0, sizeof c);
    c.prompt = prompt;
    c.n_prompt = T;
    c.target = target;
    c.n_target = n;
    c.baseline_token = -1;
    return c;
}

/* Embeddings of ids [R, L] as a float32 tensor [R, L, H]. */
cattr_tensor *cx_llm_embed(const cattr_llm *m, const int64_t *ids, int64_t R, int64_t L) {
    int64_t H = m->cfg.hidden_size, sh[3] = {R, L, H};
    cattr_tensor *t = cx_tensor_alloc(CATTR_FLOAT32, 3, sh);
    if (!t) return NULL;
    for (int64_t r = 0; r < R * L; r++) cx_tensor_row_f32(m->E, ids[r], (float *)t->data + r * H);
    return t;
}

/* The job of a forward pass of graph g (kind 0: the model, 1: the prefix-continuing decoder; + 2 for precision
 * "high") in dtype dt on inputs in[0..n_in) for outputs outs[0..n_outs): its plans cached per kind and dtype; while
 * m->diagnose is set it looks for the node where NaN or Inf first appears, and during an attribution it watches the
 * call's cancel flag between nodes (cx_watch). */
cattr_status cx_llm_job(cattr_llm *m, int kind, const cg_graph *g, cattr_dtype dt, int n_in, const cx_arg *in,
                        const int *outs, int n_outs, cx_job *j) {
    int di = dt == CATTR_FLOAT64;
    cx_consts **cs = &m->consts[kind][di];
    if (!m->be) CX_CHECK(cx_llm_use_device(m, NULL));
    if (!*cs) CX_CHECK(cx_consts_new(m->be, dt, cs));
    /* the plans of a graph share one arena: the passes run one after the other and leave nothing in it (their outputs
     * come down), and a pass of a new shape (every pass of context attribution has its own) then reuses the memory
     * already mapped instead of faulting in a fresh arena */
    cx_job z = {.g = g, .consts = *cs, .plans = LLM_PLAN_CACHE, .share_arena = true, .n_in = n_in, .in = in,
                .n_out = n_outs, .outs = outs, .check_finite = m->diagnose};
    if (m->call_p) z.watch = cx_watch_of(m->call_p);
    *j = z;
    return CATTR_OK;
}

/* Reads token y (or all V values when y < 0) of the log-probabilities [R, 1, V] in o into lp. */
static void take_logprobs(const cattr_tensor *o, int64_t R, int64_t y, double *lp) {
    int64_t V = o->shape[2];
    for (int64_t r = 0; r < R; r++) {
        if (y >= 0) lp[r] = cx_tensor_get(o, r * V + y);
        else
            for (int64_t v = 0; v < V; v++) lp[r * V + v] = cx_tensor_get(o, r * V + v);
    }
}

/* Log-probabilities at the last position of R sequences of length L, in one forward pass: lp[r * V + v] (all of
 * them when y < 0) or just token y: lp[r]. With kv (the keys and values of every layer, [L, kv_heads * head_dim]
 * each, 2 per layer, R = 1), the pass also returns them. */
cattr_status cx_llm_forward(cattr_llm *m, cattr_dtype dt, const int64_t *ids, int64_t R, int64_t L, int64_t y,
                                 double *lp, void **kv) {
    cattr_tensor *e = cx_llm_embed(m, ids, R, L), *ec = NULL, *o = NULL;
    if (!e) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_status st = cattr_tensor_convert(e, dt, &ec);
    cattr_tensor_free(e);
    int64_t nl = m->cfg.num_hidden_layers;
    int n_outs = kv ? (int)(1 + 2 * nl) : 1, nd = 3;
    const cattr_model *model = m->model;
    if (m->prec) model = m->hi_model; /* made by set_precision */
    int *outs = malloc((size_t)n_outs * sizeof *outs);
    void **dst = malloc((size_t)n_outs * sizeof *dst);
    if (st == CATTR_OK && (!outs || !dst)) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) {
        outs[0] = cx_model_output(model);
        for (int64_t l = 0; kv && l < nl && st == CATTR_OK; l++) {
            char nm[128];
            snprintf(nm, sizeof nm, "model.layers.%lld.self_attn.k_rope", (long long)l);
            outs[1 + 2 * l] = cg_find_value(model->g, nm);
            snprintf(nm, sizeof nm, "model.layers.%lld.self_attn.v_proj", (long long)l);
            outs[2 + 2 * l] = cg_find_value(model->g, nm);
            if (outs[1 + 2 * l] < 0 || outs[2 + 2 * l] < 0) st = cx_fail(CATTR_ERR_INTERNAL, "no key/value of layer %lld", (long long)l);
        }
    }
    cx_arg in = {.nd = nd, .sh = {R, L, m->cfg.hidden_size}, .dt = dt, .host = ec ? ec->data : NULL};
    cx_job j;
    cx_view v;
    if (st == CATTR_OK) st = cx_llm_job(m, 2 * m->prec, model->g, dt, 1, &in, outs, n_outs, &j);
    if (st == CATTR_OK) st = cx_run_view(&j, outs[0], &v);
    if (st == CATTR_OK && !(o = cx_tensor_alloc(v.dtype, v.ndim, v.shape)))
        st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) {
        dst[0] = o->data;
        for (int k = 1; k < n_outs; k++) dst[k] = kv[k - 1];
        j.out_host = dst;
        st = cx_run(&j);
    }
    if (st == CATTR_OK) take_logprobs(o, R, y, lp);
    free(outs);
    free(dst);
    cattr_tensor_free(ec);
    cattr_tensor_free(o);
    return st;
}

/* The activation budget of the language-model paths: max_memory, else llm_default_budget (a quarter of
 * cx_avail_memory: the free RAM, what ulimit -v and the cgroup limits leave; capped by the model's size). */
static size_t llm_budget(const cattr_llm *m, const cattr_attr_params *lp) {
    return lp->max_memory ? lp->max_memory : cx_llm_default_budget(&m->cfg);
}

/* Forward rows per pass: the perturbation batches are cut to the memory budget (or perturbations_per_eval). The
 * forward arena of a pass over `pos` positions is about pos times that of one position. */
int64_t cx_llm_rows_per_pass(cattr_llm *m, const cattr_attr_params *lp, int64_t R, int64_t L) {
    if (lp->perturbations_per_eval > 0) return lp->perturbations_per_eval < R ? lp->perturbations_per_eval : R;
    size_t budget = llm_budget(m, lp);
    const cx_hf_config *c = &m->cfg;
    size_t per = position_bytes(c);
    size_t row = per * (size_t)(L > 0 ? L : 1) + (size_t)c->vocab_size * 16, rows = budget / row;
    if (rows < 1) {
        if (!m->budget_warned)
            cx_log(CATTR_LOG_WARN, "the memory budget (%zu bytes) is below one sequence of %lld tokens (about %zu "
                                   "bytes); running one sequence per forward pass", budget, (long long)L, row);
        m->budget_warned = true;
        rows = 1;
    }
    return (int64_t)rows < R ? (int64_t)rows : R;
}

/* The prompt's features: G segments, token t in segment seg[t] (seg NULL: G = T, token t its own), the first token of
 * segment g at start[g] (NULL: g). */
typedef struct llm_feats {
    int64_t G;
    const int64_t *seg, *start;
} llm_feats;

static int64_t feat_of(const llm_feats *fe, int64_t t) { return fe->seg ? fe->seg[t] : t; }
static int64_t feat_start(const llm_feats *fe, int64_t g) { return fe->start ? fe->start[g] : g; }

cattr_status cx_llm_continue(cattr_llm *m, cattr_dtype dt, const int64_t *tids, const int64_t *tpos, int64_t N,
                             const int64_t *segs, int64_t S, const int64_t *last, int64_t P, void *const *kv,
                             int64_t L, cattr_tensor **out) {
    *out = NULL;
    int64_t nl = m->cfg.num_hidden_layers, ck = m->cfg.num_key_value_heads * m->cfg.head_dim, H = m->cfg.hidden_size;
    cg_graph **cg = &m->cached[m->prec];
    if (!m->cached[0]) CX_CHECK(cx_decoder_build_cached(m->model->g, &m->cfg, &m->cached[0]));
    if (!*cg) { /* precision "high": the same graph with its projections flagged */
        CX_CHECK(cx_derive_clone(m->cached[0], 0, NULL, cg, NULL));
        cg_mark_bf16(*cg);
    }
    int n_in = (int)(4 + 2 * nl);
    cx_arg *arg = calloc((size_t)n_in, sizeof *arg);
    cattr_tensor *e = cx_llm_embed(m, tids, 1, N), *ec = NULL, *o = NULL;
    cattr_status st = e && arg ? cattr_tensor_convert(e, dt, &ec) : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_tensor_free(e);
    for (int k = 0; arg && k < n_in; k++) arg[k].dt = k >= 1 && k <= 3 ? CATTR_INT64 : dt; /* positions, segments */
    if (st == CATTR_OK) {
        arg[0].nd = 3, arg[0].sh[0] = 1, arg[0].sh[1] = N, arg[0].sh[2] = H;
        arg[1].nd = 1, arg[1].sh[0] = N;
        arg[2].nd = 2, arg[2].sh[0] = S, arg[2].sh[1] = 3;
        arg[3].nd = 1, arg[3].sh[0] = P;
        arg[1].host = tpos, arg[2].host = segs, arg[3].host = last;
        for (int k = 4; k < n_in; k++) {
            arg[k].nd = 2;
            arg[k].sh[0] = L;
            arg[k].sh[1] = ck;
            arg[k].host = kv[k - 4];
        }
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
    cattr_tensor_free(ec);
    free(arg);
    if (st != CATTR_OK) {
        cattr_tensor_free(o);
        return st;
    }
    *out = o;
    return CATTR_OK;
}

/* FeatureAblation rows of one target token with the unchanged prefix computed once (issue: prefix reuse). seq is the
 * sequence (prompt + earlier targets, length L); f[0] = log p(y | seq) and f[1 + g] = the same with the prompt tokens
 * of feature g (fe: a token, or a segment) replaced by b. One pass over seq returns every layer's keys and values;
 * then the row that ablates feature g runs only positions start_g..L-1 (start_g its first token), attending to the
 * prefix 0..start_g-1 from that pass. Blocks hold about `target` positions (rows x suffix length) per pass. */
static cattr_status ablation_prefix(cattr_llm *m, const cattr_attr_params *lp, const int64_t *seq, int64_t T, int64_t L,
                                    int64_t b, int64_t y, double *f, const llm_feats *fe) {
    int64_t G = fe->G;
    cattr_dtype dt = lp->dtype;
    size_t es = cattr_dtype_size(dt);
    int64_t nl = m->cfg.num_hidden_layers, ck = m->cfg.num_key_value_heads * m->cfg.head_dim;
    int64_t budget_rows = cx_llm_rows_per_pass(m, lp, T, L) * L; /* positions per pass the memory budget allows */
    /* ~256 positions per pass: GEMMs near their peak rate, and little recomputation of positions before the
     * ablated token within a block */
    int64_t target = budget_rows < 256 ? budget_rows : 256;
    /* the first pass: the unablated sequence (row 0: its keys and values are the prefix of every later block) and
     * the rows ablating positions 0..first-1, all in full */
    int64_t first = target / L < 1 ? 1 : target / L;
    if (first > G) first = G;
    void **kv = calloc((size_t)(2 * nl), sizeof *kv);
    int64_t *ids = malloc((size_t)((T + 1) * L) * sizeof *ids);
    cattr_status st = kv && ids ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t i = 0; i < 2 * nl && st == CATTR_OK; i++)
        if (!(kv[i] = malloc((size_t)((first + 1) * L * ck) * es))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) {
        memcpy(ids, seq, (size_t)L * sizeof *ids);
        for (int64_t r = 0; r < first; r++) {
            memcpy(ids + (r + 1) * L, seq, (size_t)L * sizeof *ids);
            for (int64_t t = feat_start(fe, r); t < T; t++)
                if (feat_of(fe, t) == r) ids[(r + 1) * L + t] = b;
        }
        st = cx_llm_forward(m, dt, ids, first + 1, L, y, f, kv); /* f[0], f[1..first] */
    }
    /* the other rows as segments of ragged passes: row i runs positions i..L-1 only (token i replaced), attending to
     * the unablated prefix 0..i-1 */
    int64_t maxn = (G - first) * L + 1;
    int64_t *tpos = malloc((size_t)maxn * sizeof *tpos), *segs = malloc((size_t)(3 * G + 3) * sizeof *segs);
    int64_t *last = malloc((size_t)(G + 1) * sizeof *last), *tids = malloc((size_t)maxn * sizeof *tids);
    if (st == CATTR_OK && (!tpos || !segs || !last || !tids)) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    /* no recomputation in these passes: bigger ones only help the GEMMs (1024 positions measured 3-5% faster than
     * 384 at Qwen3-0.6B's shapes) */
    int64_t pass_target = target < 1024 ? 1024 : target;
    if (budget_rows < pass_target) pass_target = budget_rows;
    for (int64_t i0 = first; i0 < G && st == CATTR_OK;) {
        int64_t N = 0, S = 0, i = i0;
        while (i < G && (S == 0 || N + (L - feat_start(fe, i)) <= pass_target)) {
            int64_t a = feat_start(fe, i);
            segs[3 * S] = N;
            segs[3 * S + 1] = L - a;
            segs[3 * S + 2] = a;
            for (int64_t t = a; t < L; t++) {
                tids[N] = t < T && feat_of(fe, t) == i ? b : seq[t];
                tpos[N++] = t;
            }
            last[S++] = N - 1;
            i++;
        }
        cattr_tensor *o = NULL; /* row 0 of the first pass: the unablated sequence */
        if (st == CATTR_OK) st = cx_llm_continue(m, dt, tids, tpos, N, segs, S, last, S, kv, L, &o);
        if (st == CATTR_OK) take_logprobs(o, S, y, f + 1 + i0); /* [1, S, V]: row s at s * V */
        cattr_tensor_free(o);
        i0 = i;
    }
    free(tpos);
    free(segs);
    free(last);
    free(tids);
    for (int64_t i = 0; kv && i < 2 * nl; i++) free(kv[i]);
    free(kv);
    free(ids);
    return st;
}

cattr_status cx_llm_check_ids(const cattr_llm *m, const int64_t *ids, int64_t n, const char *what) {
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->cfg.vocab_size)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "%s token %lld has id %lld, outside the vocabulary of %lld", what,
                           (long long)i, (long long)ids[i], (long long)m->cfg.vocab_size);
    return CATTR_OK;
}

/* ---- gradient methods on the embedding output ------------------------------------------------------------------- */

/* All target tokens in one batched pass: example k is the teacher-forced sequence prompt + target[0..n-2] (length
 * T + n - 1) scored at position T - 1 + k for token target[k]. The model is causal, so positions after T - 1 + k do
 * not change that score: this is Captum's one call per target token (sequence prompt + target[0..k-1]) in one
 * batch. The explainer chunks the n x steps rows to the memory budget. */
static cattr_status gradient_attr(cattr_llm *m, const cattr_attr_params *lp, const cattr_llm_call *lc,
                                  double *token_attr, double *delta, double *logprobs, bool *have_logprobs) {
    const int64_t *ids = lc->prompt, *tg = lc->target;
    int64_t T = lc->n_prompt, n = lc->n_target;
    bool ig = lp->method == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS;
    cattr_attr_params p = cattr_attr_default_params(ig ? CATTR_METHOD_INTEGRATED_GRADIENTS : CATTR_METHOD_INPUT_X_GRADIENT);
    p.dtype = lp->dtype;
    p.n_steps = lp->n_steps;
    p.delta_tol = lp->delta_tol;
    p.max_steps = lp->max_steps;
    p.quadrature = lp->quadrature;
    p.internal_batch_size = lp->internal_batch_size;
    p.max_memory = llm_budget(m, lp);
    p.return_convergence_delta = ig && (delta != NULL || lp->n_steps == CATTR_STEPS_AUTO);
    p.progress = lp->progress;
    p.progress_user = lp->progress_user;
    p.cancel = lp->cancel;
    p.device = m->be->name;
    p.precision = lp->precision; /* the explainer makes the bfloat16 form of the model */
    if (!m->pos_model) {
        cx_decoder_opts o = {.ids_input = false, .all_logits = false, .pos_input = true};
        CX_CHECK(cx_decoder_rebuild(m->model, &m->cfg, &o, &m->pos_model));
    }
    cattr_attr_params cmp = p; /* the budget and what the call watches may change without a new explainer */
    cmp.max_memory = m->gp.max_memory;
    cmp.progress = m->gp.progress;
    cmp.progress_user = m->gp.progress_user;
    cmp.cancel = m->gp.cancel;
    if (!m->ge || memcmp(&m->gp, &cmp, sizeof p)) { /* params are memset and set field by field: memcmp is exact */
        cattr_explainer_free(m->ge);
        m->ge = NULL;
        CX_CHECK(cattr_explainer_new(m->pos_model, &p, &m->ge));
        m->ge->sum_last = true; /* the attribution of a token: its embedding's, summed (on the backend) */
        m->gp = p;
    }
    cattr_explainer *e = m->ge;
    e->p.max_memory = m->gp.max_memory = p.max_memory;
    watch_fields(e, &m->gp, &p);
    int64_t H = m->cfg.hidden_size, L = T + n - 1;
    cattr_status st = CATTR_OK;
    int64_t *seq = malloc((size_t)L * sizeof *seq), *tidx = malloc((size_t)(2 * n) * sizeof *tidx);
    int64_t psh[1] = {n}, ish[3] = {n, L, H};
    cattr_tensor *pos = cx_tensor_alloc(CATTR_INT64, 1, psh), *ein = cx_tensor_alloc(CATTR_FLOAT32, 3, ish);
    cattr_tensor *base = ig ? cx_tensor_alloc(CATTR_FLOAT32, 3, ish) : NULL, *one = NULL, *attr = NULL, *dl = NULL;
    if (!seq || !tidx || !pos || !ein || (ig && !base)) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) {
        memcpy(seq, ids, (size_t)T * sizeof *seq);
        memcpy(seq + T, tg, (size_t)(n - 1) * sizeof *seq);
        one = cx_llm_embed(m, seq, 1, L);
        if (!one) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    if (st == CATTR_OK) {
        size_t bytes = (size_t)(L * H) * sizeof(float);
        /* the baseline embedding of a prompt token: the baseline token's, or zeros */
        float *brow = lc->baseline_token >= 0 ? malloc((size_t)H * sizeof *brow) : NULL;
        if (brow) cx_tensor_row_f32(m->E, lc->baseline_token, brow);
        else if (lc->baseline_token >= 0) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        for (int64_t k = 0; k < n && st == CATTR_OK; k++) {
            memcpy((float *)ein->data + k * L * H, one->data, bytes);
            if (base) {
                float *bk = (float *)base->data + k * L * H;
                memcpy(bk, one->data, bytes);
                for (int64_t i = 0; i < T; i++) {
                    if (brow) memcpy(bk + i * H, brow, (size_t)H * sizeof(float));
                    else memset(bk + i * H, 0, (size_t)H * sizeof(float));
                }
            }
            ((int64_t *)pos->data)[k] = T - 1 + k;
            tidx[2 * k] = 0;
            tidx[2 * k + 1] = tg[k];
        }
        free(brow);
    }
    cattr_target t = {CATTR_TARGET_PER_EXAMPLE, 2, n, tidx};
    const cattr_tensor *in[1] = {ein}, *bs[1] = {base}, *add[1] = {pos};
    cattr_call call = {in, 1, ig ? bs : NULL, &t, add, 1, NULL, NULL, NULL, 0, NULL, 0, NULL};
    bool part = m->split.n_parts > 0;
    if (st == CATTR_OK && part)
        st = cattr_explainer_run_part(e, &call, m->split.part, m->split.n_parts, m->split.blob, m->split.len);
    else if (st == CATTR_OK && m->split.n_comb > 0)
        st = cattr_explainer_combine(e, &call, m->split.blobs, m->split.lens, m->split.n_comb, &attr,
                                     p.return_convergence_delta ? &dl : NULL);
    else if (st == CATTR_OK)
        st = cattr_explainer_run(e, &call, &attr, p.return_convergence_delta ? &dl : NULL);
    for (int64_t k = 0; k < n && st == CATTR_OK && !part; k++) {
        for (int64_t i = 0; i < T; i++) token_attr[k * T + i] = cx_tensor_get(attr, k * L + i); /* [n, L]: summed */
        if (delta) delta[k] = dl ? cx_tensor_get(dl, k) : NAN;
    }
    /* the delta's forward pass at the inputs scored every target token: f_k = log p(target k | prompt + earlier
     * targets), what a separate forward pass per target computes, equal up to the float rounding of GEMMs over
     * another batch shape (~1 ulp) */
    *have_logprobs = st == CATTR_OK && !part && logprobs && e->fx_n == n;
    for (int64_t k = 0; *have_logprobs && k < n; k++) logprobs[k] = e->fx[k];
    free(seq);
    free(tidx);
    cattr_tensor_free(pos);
    cattr_tensor_free(ein);
    cattr_tensor_free(base);
    cattr_tensor_free(one);
    cattr_tensor_free(attr);
    cattr_tensor_free(dl);
    return st;
}

/* ---- perturbations over prompt tokens (float32 accumulation, as Captum's LLMAttribution) ---------------------------- */

/* FeatureAblation over the prompt tokens with the decoder's prefix reuse (ablation_prefix): per target token k one
 * ragged evaluation of the sequence and its T ablations, in Captum's order of operations (each attribution one
 * difference of the log-probabilities or of their running totals, in float32 as LLMAttribution's). The same numbers
 * as the explainer's FeatureAblation over the presence form (presence_attr), which runs every sequence in full. */
static cattr_status ablation_attr(cattr_llm *m, const cattr_attr_params *lp, const cattr_llm_call *lc,
                                  const llm_feats *fe, double *token_attr, double *seq_attr, double *lp0) {
    const int64_t *ids = lc->prompt, *tg = lc->target;
    int64_t T = lc->n_prompt, n = lc->n_target, G = fe->G;
    int64_t b = lc->baseline_token >= 0 ? lc->baseline_token : cattr_llm_pad_token(m);
    if (b < 0 || b >= m->cfg.vocab_size) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "no valid baseline token (%lld)", (long long)b);
    cattr_dtype dt = lp->dtype;
    int64_t R = G + 1;
    int64_t *seq = malloc((size_t)(T + n) * sizeof *seq);
    double *f = malloc((size_t)(R * n) * sizeof *f);
    cattr_status st = seq && f ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) {
        memcpy(seq, ids, (size_t)T * sizeof *seq);
        memcpy(seq + T, tg, (size_t)n * sizeof *seq);
    }
    double *fk = st == CATTR_OK ? malloc((size_t)R * sizeof *fk) : NULL;
    if (st == CATTR_OK && !fk) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t k = 0; k < n && st == CATTR_OK; k++) { /* row 0 the sequence, row r feature r-1 replaced */
        st = ablation_prefix(m, lp, seq, T, T + k, b, tg[k], fk, fe);
        for (int64_t r = 0; r < R && st == CATTR_OK; r++) f[r * n + k] = fk[r];
        if (st == CATTR_OK && lp0) lp0[k] = fk[0];
        if (st == CATTR_OK) st = cx_llm_chunk_done(lp, k + 1, n);
    }
    for (int64_t r = 1; r < R && st == CATTR_OK; r++) {
        double tot_cur = 0, tot_prev = 0;
        for (int64_t k = 0; k < n; k++) {
            double cur = f[r * n + k], prev = f[k];
            tot_cur = cx_rnd(dt, tot_cur + cur);
            tot_prev = cx_rnd(dt, tot_prev + prev);
            token_attr[k * G + r - 1] = (double)(float)cx_rnd(dt, prev - cur);
        }
        seq_attr[r - 1] = (double)(float)cx_rnd(dt, tot_prev - tot_cur);
    }
    free(seq);
    free(f);
    free(fk);
    return st;
}

/* ---- the explainer's methods over the prompt tokens (Captum's LLMAttribution) ----------------------------------------
 * LLMAttribution perturbs a presence vector over the prompt's tokens (1: the token, 0: the baseline token) and
 * scores the target tokens by teacher forcing. The decoder's presence form (cx_decoder_opts.presence) is that
 * forward function as a model: input 0 the presence [S, T] (the attributed input, ones, baseline zeros: Captum's
 * interpretable representation), then the prompt ids, the baseline ids, the earlier target tokens (context) and
 * which log-probabilities are scored, as additional inputs; its output per row is [total, f_0, ..., f_{n-1}], f_k =
 * log p(target k | prompt, targets 0..k-1) and the total their sum in order (Captum's total log-probability). One
 * row scores every target token. FeatureAblation and ShapleyValueSampling then attribute every output (seq_attr =
 * the total's row, token_attr the others); Lime and KernelShap fit the total (target 0) and return the
 * coefficients. The numbers are Captum's: each attribution is one difference of outputs (FeatureAblation), or
 * float32 totals of them divided in float32 (ShapleyValueSampling), rounded to float32 as LLMAttribution's
 * float32 attributions are. */
static cattr_status presence_attr(cattr_llm *m, const cattr_attr_params *lp, const cattr_llm_call *lc,
                                  const llm_feats *fe, double *token_attr, double *seq_attr) {
    cattr_method meth = lp->method;
    bool surrogate = meth == CATTR_METHOD_LIME || meth == CATTR_METHOD_KERNEL_SHAP;
    int64_t T = lc->n_prompt, n = lc->n_target, V = m->cfg.vocab_size;
    int64_t b = lc->baseline_token >= 0 ? lc->baseline_token : cattr_llm_pad_token(m);
    if (b < 0 || b >= V) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "no valid baseline token (%lld)", (long long)b);
    if (lp->n_samples < 1 && meth != CATTR_METHOD_FEATURE_ABLATION)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_samples must be >= 1 (got %d)", lp->n_samples);
    int ctx = n > 1;
    if (!m->pres_model[ctx]) {
        cx_decoder_opts o = {.presence = true, .context = ctx != 0};
        CX_CHECK(cx_decoder_rebuild(m->model, &m->cfg, &o, &m->pres_model[ctx]));
    }
    cattr_attr_params p = cattr_attr_default_params(meth);
    p.dtype = lp->dtype;
    p.n_samples = lp->n_samples;
    p.seed = lp->seed;
    p.lime_alpha = lp->lime_alpha;
    p.perturbations_per_eval = lp->perturbations_per_eval;
    p.max_memory = llm_budget(m, lp);
    p.precision = lp->precision;
    p.device = m->be->name;
    p.progress = lp->progress;
    p.progress_user = lp->progress_user;
    p.cancel = lp->cancel;
    p.return_coefficients = surrogate;
    p.return_convergence_delta = 0;
    cattr_attr_params cmp = p; /* the budget and what the call watches may change without a new explainer */
    cmp.max_memory = m->pp.max_memory;
    cmp.progress = m->pp.progress;
    cmp.progress_user = m->pp.progress_user;
    cmp.cancel = m->pp.cancel;
    if (!m->pe || m->pe_ctx != ctx || memcmp(&m->pp, &cmp, sizeof p)) { /* memset and set field by field */
        cattr_explainer_free(m->pe);
        m->pe = NULL;
        CX_CHECK(cattr_explainer_new(m->pres_model[ctx], &p, &m->pe));
        m->pp = p;
        m->pe_ctx = ctx;
    }
    m->pe->p.max_memory = m->pp.max_memory = p.max_memory;
    watch_fields(m->pe, &m->pp, &p);
    int64_t sh1[2] = {1, T}, shc[2] = {1, n - 1}, shn[2] = {1, n};
    cattr_tensor *pres = cx_tensor_alloc(CATTR_FLOAT32, 2, sh1), *ids = cx_tensor_alloc(CATTR_INT64, 2, sh1);
    cattr_tensor *bids = cx_tensor_alloc(CATTR_INT64, 2, sh1), *pos = cx_tensor_alloc(CATTR_INT64, 2, shn);
    cattr_tensor *sidx = cx_tensor_alloc(CATTR_INT64, 2, shn), *cids = ctx ? cx_tensor_alloc(CATTR_INT64, 2, shc) : NULL;
    int64_t S = meth == CATTR_METHOD_SHAPLEY_VALUE_SAMPLING && lc->permutations ? lp->n_samples : 0, G = fe->G;
    /* segments: a feature mask over the presence vector (the segment ids) */
    cattr_tensor *fmask = fe->seg ? cx_tensor_alloc(CATTR_INT64, 2, sh1) : NULL;
    cattr_tensor **perms = S ? calloc((size_t)S, sizeof *perms) : NULL;
    const char **roles = S ? calloc((size_t)S, sizeof *roles) : NULL;
    cattr_tensor *attr[CATTR_MAX_OUTPUTS] = {0};
    cattr_status st = pres && ids && bids && pos && sidx && (cids || !ctx) && (!S || (perms && roles)) &&
                              (fmask || !fe->seg)
                          ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK && fmask) memcpy(fmask->data, fe->seg, (size_t)T * sizeof(int64_t));
    for (int64_t s = 0; s < S && st == CATTR_OK; s++) { /* recorded orders of the features: permutation draws */
        perms[s] = cx_tensor_alloc(CATTR_INT64, 1, &G);
        if (!perms[s]) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else memcpy(perms[s]->data, lc->permutations + s * G, (size_t)G * sizeof(int64_t));
        roles[s] = "svs_permutation";
    }
    if (st == CATTR_OK) {
        for (int64_t i = 0; i < T; i++) {
            ((float *)pres->data)[i] = 1.0f;
            ((int64_t *)ids->data)[i] = lc->prompt[i];
            ((int64_t *)bids->data)[i] = b;
        }
        for (int64_t k = 0; k < n; k++) {
            if (k < n - 1) ((int64_t *)cids->data)[k] = lc->target[k];
            ((int64_t *)pos->data)[k] = T - 1 + k;
            ((int64_t *)sidx->data)[k] = k * V + lc->target[k];
        }
        const cattr_tensor *in[1] = {pres}, *add[5];
        int na = 0;
        add[na++] = ids;
        add[na++] = bids;
        if (ctx) add[na++] = cids;
        add[na++] = pos;
        add[na++] = sidx;
        int64_t t0 = 0;
        cattr_target total = {CATTR_TARGET_INDEX, 1, 0, &t0};
        const cattr_tensor *masks[1] = {fmask};
        cattr_call call = {in, 1, NULL, surrogate ? &total : NULL, add, na, fmask ? masks : NULL, NULL, NULL, 0, NULL, 0,
                           NULL};
        if (S) {
            call.draws = (const cattr_tensor *const *)perms;
            call.draw_roles = roles;
            call.n_draws = (int)S;
        } else if (surrogate) {
            call.draws = lc->draws;
            call.draw_roles = lc->draw_roles;
            call.n_draws = lc->n_draws;
        }
        if (m->split.n_parts > 0) /* a part of a split call: its bytes are the result */
            st = cattr_explainer_run_part(m->pe, &call, m->split.part, m->split.n_parts, m->split.blob, m->split.len);
        else if (m->split.n_comb > 0)
            st = cattr_explainer_combine(m->pe, &call, m->split.blobs, m->split.lens, m->split.n_comb, attr, NULL);
        else
            st = cattr_explainer_run(m->pe, &call, attr, NULL);
    }
    /* FeatureAblation [1 + n, T], ShapleyValueSampling [1, 1 + n, T] (a feature's value at each of its tokens: read
     * at its first), Lime / KernelShap coefficients [1, G] */
    for (int64_t g = 0; g < G && st == CATTR_OK && m->split.n_parts == 0; g++) {
        int64_t i = surrogate ? g : feat_start(fe, g);
        seq_attr[g] = (double)(float)cx_tensor_get(attr[0], i);
        for (int64_t k = 0; k < n; k++)
            token_attr[k * G + g] = surrogate ? NAN : (double)(float)cx_tensor_get(attr[0], (1 + k) * T + i);
    }
    for (int k = 0; k < CATTR_MAX_OUTPUTS; k++) cattr_tensor_free(attr[k]);
    for (int64_t s = 0; perms && s < S; s++) cattr_tensor_free(perms[s]);
    free(perms);
    free(roles);
    cattr_tensor_free(pres);
    cattr_tensor_free(ids);
    cattr_tensor_free(bids);
    cattr_tensor_free(pos);
    cattr_tensor_free(sidx);
    cattr_tensor_free(cids);
    cattr_tensor_free(fmask);
    return st;
}

/* Sets the device and the precision of this call (params.device, params.precision). */
cattr_status cx_llm_set_precision(cattr_llm *m, const cattr_attr_params *p) {
    CX_CHECK(cx_llm_use_device(m, p->device));
    CX_CHECK(cx_precision_check(p->precision, p->dtype, m->be));
    if (p->precision == CATTR_PRECISION_HIGH && !m->hi_model)
        CX_CHECK(cx_model_with_precision(m->model, p->precision, p->dtype, m->be, &m->hi_model));
    m->prec = p->precision == CATTR_PRECISION_HIGH;
    return CATTR_OK;
}

static cattr_status llm_attribute(cattr_llm *m, const cattr_attr_params *p, const cattr_llm_call *c, double *seq_attr,
                                  double *token_attr, double *target_logprobs, double *convergence_delta);

/* The first NaN or Inf among n values named `what` (k: its index), else CATTR_OK. */
cattr_status cx_llm_finite(const double *v, int64_t n, const char *what) {
    for (int64_t k = 0; v && k < n; k++)
        if (!isfinite(v[k]))
            return cx_fail(CATTR_ERR_NONFINITE, "%s %lld is %s", what, (long long)k, isnan(v[k]) ? "nan" : "inf");
    return CATTR_OK;
}

cattr_status cattr_llm_attribute(cattr_llm *m, const cattr_attr_params *p, const cattr_llm_call *c, double *seq_attr,
                                 double *token_attr, double *target_logprobs, double *convergence_delta) {
    cattr_status st = llm_attribute(m, p, c, seq_attr, token_attr, target_logprobs, convergence_delta);
    if (st != CATTR_OK) return st;
    int64_t T = c->segments ? c->n_segments : c->n_prompt, n = c->n_target; /* the result's columns */
    bool surrogate = p->method == CATTR_METHOD_LIME || p->method == CATTR_METHOD_KERNEL_SHAP; /* no token_attr: NaN */
    st = cx_llm_finite(seq_attr, T, "seq_attr");
    if (st == CATTR_OK && !surrogate) st = cx_llm_finite(token_attr, n * T, "token_attr");
    if (st == CATTR_OK) st = cx_llm_finite(target_logprobs, n, "target log-probability");
    if (st == CATTR_OK && p->method == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS)
        st = cx_llm_finite(convergence_delta, n, "convergence delta");
    if (st == CATTR_OK) return CATTR_OK;
    /* a NaN or Inf in a result is an error naming where it first appeared: run again with every pass checked */
    char found[1024];
    snprintf(found, sizeof found, "%s", cattr_last_error());
    m->diagnose = true;
    st = llm_attribute(m, p, c, seq_attr, token_attr, target_logprobs, convergence_delta);
    m->diagnose = false;
    return cx_diagnosis(st, found);
}

int cattr_llm_steps_used(const cattr_llm *m) {
    return m && m->ge && m->gp.method == CATTR_METHOD_INTEGRATED_GRADIENTS ? cattr_explainer_steps_used(m->ge) : 0;
}

/* Whether cattr_llm_attribute_part can split p's method: LayerIG (its steps), and the methods that run on the
 * presence model's explainer (their perturbations or samples; FeatureAblation there only with perturbations_per_eval
 * or without the prefix cache, else it runs its own prefix-reusing passes). */
static cattr_status llm_split_supported(const cattr_attr_params *p) {
    cattr_method k = p->method;
    if (k == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS || k == CATTR_METHOD_SHAPLEY_VALUE_SAMPLING ||
        k == CATTR_METHOD_LIME || k == CATTR_METHOD_KERNEL_SHAP)
        return CATTR_OK;
    if (k == CATTR_METHOD_FEATURE_ABLATION) {
        if (p->perturbations_per_eval > 0 || p->no_prefix_cache) return CATTR_OK;
        return cx_fail(CATTR_ERR_UNSUPPORTED, "splitting a language model's feature-ablation into parts needs "
                       "perturbations_per_eval (the sequences per forward pass, the same in every part): without it "
                       "feature-ablation runs its own passes that reuse the prompt's prefix, which are not split");
    }
    return cx_fail(CATTR_ERR_UNSUPPORTED, "splitting a language-model attribution into parts is implemented for "
                   "layer-integrated-gradients, feature-ablation, shapley-value-sampling, lime and kernel-shap, not %s",
                   cattr_method_name(k));
}

cattr_status cattr_llm_attribute_part(cattr_llm *m, const cattr_attr_params *p, const cattr_llm_call *c, int part,
                                      int n_parts, void **blob, size_t *len) {
    if (blob) *blob = NULL;
    if (len) *len = 0;
    if (!m || !p || !c || !blob || !len) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_llm_attribute_part: NULL argument");
    if (n_parts < 1 || n_parts > 1000000)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_parts must be from 1 to 1000000 (got %d)", n_parts);
    if (part < 0 || part >= n_parts)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "part must be from 0 to n_parts - 1 = %d (got %d)", n_parts - 1, part);
    CX_CHECK(llm_split_supported(p));
    int64_t ctx = m->cfg.max_position_embeddings;
    if (c->n_prompt > ctx || c->n_target > ctx) /* the call's own checks name the problem; no huge buffers here */
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "prompt (%lld tokens) and target (%lld) exceed the model's context of "
                       "%lld", (long long)c->n_prompt, (long long)c->n_target, (long long)ctx);
    int64_t T = c->n_prompt > 0 ? c->n_prompt : 1, n = c->n_target > 0 ? c->n_target : 1;
    double *seq = calloc((size_t)T, sizeof *seq), *tok = calloc((size_t)(T * n), sizeof *tok);
    cattr_status st = seq && tok ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    m->split.part = part;
    m->split.n_parts = n_parts;
    m->split.blob = blob;
    m->split.len = len;
    if (st == CATTR_OK) st = llm_attribute(m, p, c, seq, tok, NULL, NULL);
    memset(&m->split, 0, sizeof m->split);
    free(seq);
    free(tok);
    return st;
}

cattr_status cattr_llm_combine(cattr_llm *m, const cattr_attr_params *p, const cattr_llm_call *c, const void *const *blobs,
                               const size_t *lens, int n_parts, double *seq_attr, double *token_attr,
                               double *target_logprobs, double *convergence_delta) {
    if (!m || !p || !blobs || !lens || n_parts < 1)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_llm_combine: NULL argument or no part");
    CX_CHECK(llm_split_supported(p));
    m->split.blobs = blobs;
    m->split.lens = lens;
    m->split.n_comb = n_parts;
    cattr_status st = cattr_llm_attribute(m, p, c, seq_attr, token_attr, target_logprobs, convergence_delta);
    memset(&m->split, 0, sizeof m->split);
    return st;
}

/* The methods of cattr_llm_attribute. */
static bool llm_method(cattr_method k) {
    return k == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS || k == CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION ||
           k == CATTR_METHOD_FEATURE_ABLATION || k == CATTR_METHOD_SHAPLEY_VALUE_SAMPLING || k == CATTR_METHOD_LIME ||
           k == CATTR_METHOD_KERNEL_SHAP;
}

static cattr_status llm_attribute_run(cattr_llm *m, const cattr_attr_params *p, const cattr_llm_call *c,
                                      double *seq_attr, double *token_attr, double *target_logprobs,
                                      double *convergence_delta);

/* llm_attribute_run with m->call_p set to p while it runs (its forward passes watch p's cancel flag). */
static cattr_status llm_attribute(cattr_llm *m, const cattr_attr_params *p, const cattr_llm_call *c, double *seq_attr,
                                  double *token_attr, double *target_logprobs, double *convergence_delta) {
    if (!m || !p) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_llm_attribute: NULL argument");
    const cattr_attr_params *outer = m->call_p;
    m->call_p = p;
    cx_watch_note(p->progress, p->progress_user, 0, 0); /* a new call: its beats report 0 of 0 until a chunk is done */
    cattr_status st = llm_attribute_run(m, p, c, seq_attr, token_attr, target_logprobs, convergence_delta);
    m->call_p = outer;
    return st;
}

/* c->segments checked (ids from 0 to n_segments - 1, each used) into fe, with each segment's first token (*start,
 * malloc'ed). */
static cattr_status check_segments(const cattr_llm_call *c, int64_t **start, llm_feats *fe) {
    int64_t T = c->n_prompt, G = c->n_segments;
    if (G < 1 || G > T)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_segments must be from 1 to n_prompt = %lld (got %lld)",
                       (long long)T, (long long)G);
    int64_t *s = malloc((size_t)G * sizeof *s);
    if (!s) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t g = 0; g < G; g++) s[g] = -1;
    for (int64_t t = 0; t < T; t++) {
        int64_t g = c->segments[t];
        if (g < 0 || g >= G) {
            free(s);
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "prompt token %lld is in segment %lld, outside 0 to n_segments - "
                           "1 = %lld", (long long)t, (long long)g, (long long)(G - 1));
        }
        if (s[g] < 0) s[g] = t;
    }
    for (int64_t g = 0; g < G; g++)
        if (s[g] < 0) {
            free(s);
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "segment %lld has no prompt token (every id from 0 to "
                           "n_segments - 1 = %lld must be used)", (long long)g, (long long)(G - 1));
        }
    *start = s;
    *fe = (llm_feats){G, c->segments, s};
    return CATTR_OK;
}

static cattr_status llm_attribute_run(cattr_llm *m, const cattr_attr_params *p, const cattr_llm_call *c,
                                      double *seq_attr, double *token_attr, double *target_logprobs,
                                      double *convergence_delta) {
    if (!m || !p || !c || !c->prompt || !c->target || !seq_attr || !token_attr)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_llm_attribute: NULL argument");
    if (!llm_method(p->method))
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                       "method %s does not attribute language models; use layer-integrated-gradients, "
                       "layer-gradient-x-activation, feature-ablation, shapley-value-sampling, lime or kernel-shap",
                       cattr_method_name(p->method));
    const int64_t *prompt = c->prompt, *target = c->target;
    int64_t T = c->n_prompt, n = c->n_target;
    m->budget_warned = false;
    int64_t ctx = m->cfg.max_position_embeddings;
    if (T < 1 || T > ctx)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_prompt must be from 1 to the model's context of %lld tokens (got "
                       "%lld)", (long long)ctx, (long long)T);
    if (n < 1 || n > ctx)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "n_target must be from 1 to the model's context of %lld tokens (got "
                       "%lld)", (long long)ctx, (long long)n);
    if (p->dtype != CATTR_FLOAT32 && p->dtype != CATTR_FLOAT64)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "dtype must be CATTR_FLOAT32 (0) or CATTR_FLOAT64 (1) (got %d)",
                       (int)p->dtype);
    if (T > ctx - n) /* T + n, never overflowing */
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "prompt (%lld tokens) and target (%lld) exceed the model's context of %lld",
                       (long long)T, (long long)n, (long long)ctx);
    CX_CHECK(cx_llm_check_ids(m, prompt, T, "prompt"));
    CX_CHECK(cx_llm_check_ids(m, target, n, "target"));
    CX_CHECK(cx_llm_set_precision(m, p));
    if (c->baseline_token < -1 || c->baseline_token >= m->cfg.vocab_size)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "baseline_token must be -1 (the method's default) or a token id from 0 "
                       "to %lld (got %lld)", (long long)m->cfg.vocab_size - 1, (long long)c->baseline_token);
    llm_feats fe = {T, NULL, NULL};
    int64_t *start = NULL;
    if (c->segments) CX_CHECK(check_segments(c, &start, &fe));
    cattr_status st;
    if (p->method == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS || p->method == CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION) {
        bool have = false;
        /* per token (into a scratch array where the features are segments), then summed per segment */
        double *tok = fe.seg ? malloc((size_t)(n * T) * sizeof *tok) : token_attr;
        st = tok ? gradient_attr(m, p, c, tok, convergence_delta, target_logprobs, &have)
                 : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK && m->split.n_parts == 0 && fe.seg) { /* in token order, in the compute dtype */
            for (int64_t x = 0; x < n * fe.G; x++) token_attr[x] = 0;
            for (int64_t k = 0; k < n; k++)
                for (int64_t i = 0; i < T; i++) {
                    double *a = &token_attr[k * fe.G + fe.seg[i]];
                    *a = cx_rnd(p->dtype, *a + tok[k * T + i]);
                }
        }
        if (tok != token_attr) free(tok);
        if (m->split.n_parts > 0) {
            free(start);
            return st; /* a part: its bytes are the result */
        }
        if (have) target_logprobs = NULL; /* already written */
        for (int64_t g = 0; g < fe.G && st == CATTR_OK; g++) {
            double s = 0;
            for (int64_t k = 0; k < n; k++) s = cx_rnd(p->dtype, s + token_attr[k * fe.G + g]);
            seq_attr[g] = s;
        }
    } else if (p->method == CATTR_METHOD_FEATURE_ABLATION && !p->no_prefix_cache && p->perturbations_per_eval == 0) {
        st = ablation_attr(m, p, c, &fe, token_attr, seq_attr, target_logprobs);
        target_logprobs = NULL; /* row 0 of every batch was the real sequence: already written */
        if (convergence_delta)
            for (int64_t k = 0; k < n; k++) convergence_delta[k] = NAN;
    } else { /* Captum returns no token_attr for Lime and KernelShap: NaN */
        st = presence_attr(m, p, c, &fe, token_attr, seq_attr);
        if (m->split.n_parts > 0) {
            free(start);
            return st; /* a part: its bytes are the result */
        }
        if (convergence_delta)
            for (int64_t k = 0; k < n; k++) convergence_delta[k] = NAN;
    }
    free(start);
    if (st == CATTR_OK && target_logprobs) { /* f_k at the real prompt */
        int64_t *seq = malloc((size_t)(T + n) * sizeof *seq);
        if (!seq) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        memcpy(seq, prompt, (size_t)T * sizeof *seq);
        memcpy(seq + T, target, (size_t)n * sizeof *seq);
        for (int64_t k = 0; k < n && st == CATTR_OK; k++) st = cx_llm_forward(m, p->dtype, seq, 1, T + k, target[k], &target_logprobs[k], NULL);
        free(seq);
    }
    return st;
}
