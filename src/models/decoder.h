/* decoder.h - decoder-only transformers (qwen3, llama, qwen2, mistral) built from a Hugging Face checkpoint folder
 * into the cattr IR, driven by config.json (io/hf.h). */
#ifndef CATTR_MODELS_DECODER_H
#define CATTR_MODELS_DECODER_H

#include "models/model.h"
#include "io/hf.h"

typedef struct cx_decoder_opts {
    bool ids_input;    /* graph input "input_ids" int64 [S, T] (else "inputs_embeds" [S, T, hidden]) */
    bool all_logits;   /* output 0: logits at every position [S, T, vocab] (else log-probabilities at the last
                        * position, [S, 1, vocab]: what attribution scores) */
    bool pos_input;    /* a second input "positions" int64 [S]: the log-probabilities are taken at position
                        * positions[s] of row s (else at the last position) */
    /* The token-presence form LLMAttribution perturbs (ids_input, all_logits and pos_input ignored): inputs
     * "presence" [S, T] (1 keeps prompt token t, 0 replaces it by its baseline token; embeddings p * E[id] +
     * (1 - p) * E[baseline]), "input_ids" and "baseline_ids" int64 [S, T], with `context` "context_ids" int64 [S, C]
     * (tokens after the prompt: earlier target tokens), "positions" int64 [S, P] and "score_index" int64 [S, P]
     * (k * vocab + token: which log-probability of position positions[s, k] is scored); output [S, 1 + P]: the sum of
     * the P scores (added in order), then the scores. */
    bool presence;
    bool context;
    /* The scoring of the presence form on embeddings (ids_input, all_logits, pos_input and presence ignored): inputs
     * "inputs_embeds" [S, T, hidden], "positions" and "score_index" int64 [S, P] as above; output [S, 1 + P], the
     * sum of the P scores, then the scores (one backward pass gives the gradient of an answer's whole
     * log-probability). */
    bool scores;
    /* cx_decoder_load: refuse, before reading any weight, a checkpoint whose weights in memory (16-bit matrices as
     * stored, the rest as float32) and `mem_reserve` bytes (the activations) exceed `mem_avail` (0: no check) */
    size_t mem_avail, mem_reserve;
} cx_decoder_opts;

/* The decoder of `base` (a model from cx_decoder_load) rebuilt with other options, borrowing its weights (`base`
 * must outlive the result). */
cattr_status cx_decoder_rebuild(const cattr_model *base, const cx_hf_config *cfg, const cx_decoder_opts *opts,
                                cattr_model **out);

/* The same decoder as a graph that continues prefixes of one sequence, ragged: inputs "inputs_embeds" [1, N, hidden]
 * (S segments of tokens, flattened), "tok_pos" int64 [N] (each token's position), "segs" int64 [S, 3] (start, length,
 * prefix length of each segment), "last_idx" int64 [S] (the flattened index of each segment's last token), then per
 * layer l "past.<l>.k" and "past.<l>.v" [L, kv_heads * head_dim] (the rotated keys and values of the full sequence;
 * segment s attends to its first prefix-length rows, then to its own tokens causally); output the
 * log-probabilities at each segment's last token, [1, S, vocab]. Weights are borrowed from `base` (a graph built by
 * cx_decoder_load), which must outlive the result. The prefix's
 * keys and values are the values "model.layers.<l>.self_attn.k_rope" and "model.layers.<l>.self_attn.v_proj" of
 * `base`. */
cattr_status cx_decoder_build_cached(const cg_graph *base, const cx_hf_config *cfg, cg_graph **out);

/* Builds the model (at full precision: cg_mark_bf16 makes the precision "high" form, leaving the output head, which
 * is marked keep_precision, at full precision). BF16/F16 matrices stay as stored, mapped from the file
 * (cx_hf_weight_stored); vectors and F32/F64 weights are converted to float32 once (the checkpoint's own mapped pages
 * are released afterwards); a float64 explainer upcasts them. With opts->mem_avail, a checkpoint that cannot fit is
 * refused first (CATTR_ERR_NO_MEMORY, with the numbers). Values named "hidden.embed", "hidden.layer<i>" and "hidden.final_norm" hold the residual
 * stream. *cfg_out (may be NULL) receives the config. Errors: as cx_hf_config_load / cx_hf_weights_open, and
 * CATTR_ERR_FORMAT for a missing weight or one whose shape does not fit the config (naming it). */
cattr_status cx_decoder_load(const char *dir, const cx_decoder_opts *opts, cattr_model **out, cx_hf_config *cfg_out);

/* The RoPE inverse frequencies of the config (llama3 rescaling included), head_dim/2 values, in float64. */

#endif
