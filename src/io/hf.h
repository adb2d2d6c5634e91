/* hf.h - Hugging Face checkpoint folders: config.json (the keys that change the math of decoder-only
 * transformers) and safetensors weights (one file or shards listed in model.safetensors.index.json), mapped rather
 * than copied, with every header size and offset checked before use. */
#ifndef CATTR_IO_HF_H
#define CATTR_IO_HF_H

#include "core/core.h"

typedef struct cx_hf_config {
    char model_type[32]; /* "qwen3", "llama", "qwen2", "mistral" */
    int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers;
    int64_t num_attention_heads, num_key_value_heads, head_dim, max_position_embeddings;
    double rms_norm_eps, rope_theta;
    bool tie_word_embeddings;
    bool attention_bias, mlp_bias; /* llama: biases on q/k/v/o and on the MLP */
    bool qkv_bias;                 /* derived: q/k/v projections carry a bias */
    bool o_bias;                   /* derived: o_proj carries a bias */
    bool qk_norm;                  /* derived: qwen3's q_norm / k_norm */
    /* rope_scaling: type "" (none) or "llama3" */
    char rope_type[16];
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int64_t rope_original_max_position_embeddings;
    int64_t bos_token_id, eos_token_id; /* -1 when absent */
} cx_hf_config;

/* Reads DIR/config.json. A model_type or a key that changes the math in a way cattr does not implement (another
 * rope_scaling type, a hidden_act other than silu, sliding-window attention in use) is CATTR_ERR_UNSUPPORTED naming
 * it. Errors: CATTR_ERR_IO, CATTR_ERR_FORMAT (missing or mistyped keys), CATTR_ERR_UNSUPPORTED. */
cattr_status cx_hf_config_load(const char *dir, cx_hf_config *cfg);
/* The same from the text of a config.json (`size` bytes, borrowed); `what` names it in messages. Besides the types,
 * values that make the math meaningless are refused (CATTR_ERR_FORMAT naming the key): sizes outside 1..2^24 (layers
 * and heads 1..2^16), rms_norm_eps, rope_theta and the llama3 rope_scaling factors not finite and > 0, a
 * high_freq_factor not above low_freq_factor, rotary frequencies that are not finite and > 0. (Token ids may lie outside the vocabulary: shrunken test models keep
 * their tokenizer's.) */
cattr_status cx_hf_config_parse(const char *text, size_t size, const char *what, cx_hf_config *cfg);

/* The rotary embedding's inverse frequencies inv[m] (m < head_dim / 2) of a config: rope_theta^(-2m/head_dim),
 * with the llama3 rope_scaling applied. cx_hf_config_parse has checked that they are finite and above 0. */
void cx_hf_rope_inv_freq(const cx_hf_config *cfg, double *inv);

/* The mapped weights of a checkpoint. */
typedef struct cx_hf_weights cx_hf_weights;

/* Maps DIR/model.safetensors, or every shard named by DIR/model.safetensors.index.json. Errors: CATTR_ERR_IO,
 * CATTR_ERR_FORMAT (a truncated or malicious header: sizes, offsets, dtypes, shapes are all checked). */
cattr_status cx_hf_weights_open(const char *dir, cx_hf_weights **out);
void cx_hf_weights_free(cx_hf_weights *w);
bool cx_hf_weights_has(const cx_hf_weights *w, const char *name);
/* A new tensor holding weight `name` converted to `dtype` (float32 or float64; BF16/F16/F32/F64 sources). Expected
 * shape is checked when exp_ndim >= 0. Errors: CATTR_ERR_FORMAT (missing weight or wrong shape, naming both). */
cattr_status cx_hf_weight(const cx_hf_weights *w, const char *name, cattr_dtype dtype, int exp_ndim,
                          const int64_t *exp_shape, cattr_tensor **out);
/* Weight `name` as the checkpoint stores it when that is 16-bit (BF16 or F16: a tensor of dtype CX_BFLOAT16 or
 * CX_FLOAT16 over a read-only mapping of the file, which the tensor owns, so it may outlive w), else a float32 copy
 * as cx_hf_weight makes. A non-finite value is refused as there. Errors: as cx_hf_weight. */
cattr_status cx_hf_weight_stored(const cx_hf_weights *w, const char *name, int exp_ndim, const int64_t *exp_shape,
                                 cattr_tensor **out);
/* The memory the float weights take once loaded: 2-D BF16/F16 tensors as stored (cx_hf_weight_stored), the rest as
 * float32 copies. */
int64_t cx_hf_weights_resident_bytes(const cx_hf_weights *w);
/* Advises the kernel that the mapped pages are no longer needed (after conversion to float32). */
void cx_hf_weights_release_pages(cx_hf_weights *w);

#endif
