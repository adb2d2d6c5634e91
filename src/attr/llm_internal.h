/* llm_internal.h - what the language-model files (llm.c, llm_text.c) share: the handle and its forward passes. */
#ifndef CATTR_ATTR_LLM_INTERNAL_H
#define CATTR_ATTR_LLM_INTERNAL_H

#include "attr/internal.h"
#include "io/tokenizer.h"
#include "models/decoder.h"

#define LLM_PLAN_CACHE 6 /* plans per graph and dtype */

/* The activation budget without max_memory: a quarter of the available memory (cx_avail_memory), capped at what
 * LLM_CAP_POSITIONS positions of model c's forward pass hold, and that cap at least LLM_CAP_FLOOR (c NULL: the floor);
 * see llm.c. */
#define LLM_CAP_FLOOR ((size_t)896 << 20)
#define LLM_CAP_POSITIONS 3584
size_t cx_llm_default_budget(const cx_hf_config *c);

struct cattr_llm {
    cattr_model *model; /* embeddings [S, L, H] -> log-probabilities [S, 1, V] */
    cx_hf_config cfg;
    const cattr_tensor *E;
    cx_tokenizer *tok;
    cx_consts *consts[4][2]; /* per graph (the model, the prefix-continuing one: constants are keyed by value id)
                              * and compute dtype, uploaded on first use */
    /* kept between calls so that repeated attributions reuse their plans and working memory */
    int prec;                  /* precision of the current call: 0 highest, 1 high (bfloat16 projections) */
    cattr_model *hi_model;     /* the decoder at precision "high" (cx_model_with_precision), built on first use */
    cattr_model *pos_model;    /* the decoder scored at given positions, for the gradients */
    cattr_model *score_model;  /* the decoder scoring an answer's tokens on embeddings (cx_decoder_opts.scores) */
    cattr_explainer *ge;  /* the gradient methods' explainer, for the parameters in gp */
    cattr_attr_params gp;
    cattr_explainer *xe;  /* context attribution's gradient x activation on score_model, for the parameters in xp */
    cattr_attr_params xp;
    cattr_model *pres_model[2]; /* the token-presence form (cx_decoder_opts.presence), without and with context */
    cattr_model *ids_model;     /* token ids -> log-probabilities (cattr_llm_model), built on first use */
    cattr_explainer *pe;        /* the perturbation and surrogate methods' explainer, for pp on pres_model[pe_ctx] */
    cattr_attr_params pp;
    int pe_ctx;
    cg_graph *cached[2]; /* per precision: the decoder continuing a shared prefix, built on first use */
    bool diagnose;       /* re-running a call to find where a non-finite result came from (see llm_run_plan) */
    const cattr_attr_params *call_p; /* the parameters of the attribution running (its cancel flag and progress
                                      * callback, which llm_run_plan watches), NULL outside one */
    bool budget_warned;  /* the warning that the memory budget is below one sequence, once per call */
    cx_backend *dev;     /* cattr_llm_set_device (NULL: the default device) */
    cx_backend *be;      /* the backend the plans, constants and explainer above belong to */
    /* set while cattr_llm_attribute_part or cattr_llm_combine runs: LayerIG's explainer computes a part, or combines
     * parts, instead of the whole call (cattr_explainer_run_part / cattr_explainer_combine) */
    struct {
        int part, n_parts; /* n_parts > 0: a part, into *blob (*len bytes) */
        void **blob;
        size_t *len;
        const void *const *blobs; /* n_comb > 0: the parts to combine */
        const size_t *lens;
        int n_comb;
    } split;
};

/* (llm.c) Log-probabilities at the last position of R sequences of length L in one forward pass: lp[r * V + v]
 * (all of them when y < 0) or token y's, lp[r] (kv: the layers' keys and values too, R = 1); the ids' range check
 * naming `what`; the backend for the next calls; the precision of p's call; a check that n values are finite naming
 * `what`; the progress and cancellation after a chunk. */
cattr_status cx_llm_forward(cattr_llm *m, cattr_dtype dt, const int64_t *ids, int64_t R, int64_t L, int64_t y,
                            double *lp, void **kv);
/* (llm.c) Embeddings of ids [R, L] as a float32 tensor [R, L, H] (NULL when out of memory). */
cattr_tensor *cx_llm_embed(const cattr_llm *m, const int64_t *ids, int64_t R, int64_t L);
/* Gradient x activation at the prompt's embeddings (each token's, summed over the hidden axis) for the answer's total
 * log-probability, sum_k log p(tg[k] | ids, tg[0..k-1]): one forward and backward pass over ids and the answer
 * (cx_decoder_opts.scores). tok[T]. */
cattr_status cx_llm_grad_x_act_total(cattr_llm *m, const cattr_attr_params *lp, const int64_t *ids, int64_t T,
                                     const int64_t *tg, int64_t n, double *tok);
/* (llm.c) The job of a pass of graph g (kind 0: the model, 1: the prefix-continuing decoder; + 2 for precision
 * "high"), its plans and constants kept per kind and dtype, watching the call's cancel flag. */
cattr_status cx_llm_job(cattr_llm *m, int kind, const cg_graph *g, cattr_dtype dt, int n_in, const cx_arg *in,
                        const int *outs, int n_outs, cx_job *j);
/* (llm.c) How many of R sequences of length L one forward pass holds within the memory budget (at least 1). */
int64_t cx_llm_rows_per_pass(cattr_llm *m, const cattr_attr_params *lp, int64_t R, int64_t L);
/* (llm.c) One pass of the decoder continuing a shared prefix (FeatureAblation's prefix reuse, context attribution's
 * removals): N tokens tids at positions tpos in S segments (segs [S, 3]: start, length, prefix length), attending to
 * the prefix's keys and values kv (2 per layer, [L, kv heads x head dim] each); *out the log-probabilities [1, P, V]
 * at the P positions last (of the N). */
cattr_status cx_llm_continue(cattr_llm *m, cattr_dtype dt, const int64_t *tids, const int64_t *tpos, int64_t N,
                             const int64_t *segs, int64_t S, const int64_t *last, int64_t P, void *const *kv,
                             int64_t L, cattr_tensor **out);
/* (llm_context.c) cattr_llm_chat_frame on the text of a tokenizer_config.json (json NULL: none could be read; `what`
 * names it in messages). */
cattr_status cx_chat_frame_parse(const char *json, size_t len, const char *what, const char *question, char **prefix,
                                 char **suffix);
cattr_status cx_llm_check_ids(const cattr_llm *m, const int64_t *ids, int64_t n, const char *what);
cattr_status cx_llm_use_device(cattr_llm *m, const char *device);
cattr_status cx_llm_set_precision(cattr_llm *m, const cattr_attr_params *p);
cattr_status cx_llm_finite(const double *v, int64_t n, const char *what);
cattr_status cx_llm_chunk_done(const cattr_attr_params *p, int64_t done, int64_t total);

#endif
