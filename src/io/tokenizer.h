/* tokenizer.h - Hugging Face `tokenizer.json` tokenizers (byte-level BPE, as used by Qwen2/Qwen3, Llama 3, GPT-2):
 * loading, encoding text to token ids and decoding ids back to text, matching Hugging Face's Rust `tokenizers`.
 *
 * Supported components (anything else is CATTR_ERR_UNSUPPORTED naming the JSON path of the component):
 *  - model: BPE (vocab; merges as "a b" strings or ["a", "b"] pairs; ignore_merges; unk_token/fuse_unk;
 *    byte_fallback false; empty continuing_subword_prefix / end_of_word_suffix; no dropout).
 *  - normalizer: null, NFC, NFD, NFKC, NFKD (utf8proc) or a Sequence of those.
 *  - pre_tokenizer: null, ByteLevel (use_regex true splits with GPT-2's regex), Split (Regex or String pattern,
 *    behavior Isolated or Removed, invert) or a Sequence of Splits optionally ending with one ByteLevel.
 *    Regexes are written for Oniguruma (what `tokenizers` compiles them with); they are translated to PCRE2 (see
 *    tokenizer.c for the differences handled, notably `\s` = Unicode White_Space).
 *  - added_tokens: special and non-special, matched leftmost-longest on the raw text before normalization
 *    (normalized: false) or on the normalized text (normalized: true), honouring lstrip, rstrip and single_word.
 *  - post_processor: null, ByteLevel, TemplateProcessing (single-sequence template), RobertaProcessing,
 *    BertProcessing, or a Sequence of those.
 *  - decoder: ByteLevel, or null (tokens joined with spaces, as Hugging Face does without a decoder).
 *  `truncation` and `padding` are ignored: cattr never truncates or pads.
 *
 * A loaded tokenizer is immutable: every function below may be called from several threads at once. */
#ifndef CATTR_IO_TOKENIZER_H
#define CATTR_IO_TOKENIZER_H

#include "core/core.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cx_tokenizer cx_tokenizer;

/* Loads a tokenizer. `dir_or_json_path` is either a checkpoint folder, from which "tokenizer.json" is read together
 * with "tokenizer_config.json" when that file exists (bos_token, eos_token, pad_token, add_bos_token,
 * add_eos_token), or the path of a tokenizer.json file (then no tokenizer_config.json is read).
 * On success *out owns a new tokenizer (release it with cx_tokenizer_free); on failure *out is NULL.
 * Errors: CATTR_ERR_INVALID_ARGUMENT (NULL argument), CATTR_ERR_IO (a file cannot be read; the message names it),
 * CATTR_ERR_FORMAT (not JSON, or missing/ill-typed fields, merges naming tokens absent from the vocabulary; the
 * message names the file and the JSON path), CATTR_ERR_UNSUPPORTED (a component or option listed as unsupported
 * above; the message names the file and the JSON path, e.g. "pre_tokenizer.pretokenizers[0]"),
 * CATTR_ERR_NO_MEMORY. */
cattr_status cx_tokenizer_load(const char *dir_or_json_path, cx_tokenizer **out);

/* Loads a tokenizer from the text of a tokenizer.json (`size` bytes, borrowed; no tokenizer_config.json). `what`
 * names it in messages. Errors: as cx_tokenizer_load. */
cattr_status cx_tokenizer_load_json(const char *json, size_t size, const char *what, cx_tokenizer **out);

/* Releases a tokenizer; NULL is allowed. */
void cx_tokenizer_free(cx_tokenizer *t);

/* Encodes `len` bytes of UTF-8 `text` (need not be NUL-terminated; may be empty). Added/special tokens written in
 * the text (e.g. "<|im_start|>") become their ids; everything else is normalized, pre-tokenized and BPE-encoded.
 * When `add_special` is true the post-processor's single-sequence template is applied (Qwen3's ByteLevel
 * post-processor adds nothing); when the tokenizer.json has no template but tokenizer_config.json sets
 * add_bos_token / add_eos_token, the bos / eos id is added instead.
 * On success *ids is a new malloc'd array of *n ids (the caller frees it with free(); it is a valid non-NULL
 * pointer even when *n is 0). On failure *ids is NULL and *n is 0.
 * Errors: CATTR_ERR_INVALID_ARGUMENT (NULL argument, or text that is not valid UTF-8: the message gives the byte
 * offset), CATTR_ERR_UNSUPPORTED (the pre-tokenizer regex exceeded PCRE2's matching limits on this text),
 * CATTR_ERR_NO_MEMORY. */
cattr_status cx_tokenizer_encode(const cx_tokenizer *t, const char *text, size_t len, bool add_special, int64_t **ids,
                                 int64_t *n);

/* Decodes `n` ids to UTF-8 text. `skip_special` drops the added tokens marked special (non-special added tokens
 * such as "<think>" are kept). Ids that name no token are skipped, as Hugging Face does. Byte sequences that are not
 * valid UTF-8 (e.g. from a partial multi-byte character) become U+FFFD, one per maximal invalid subpart, as Rust's
 * String::from_utf8_lossy does. On success *text is a new malloc'd NUL-terminated string (free with free()); on
 * failure it is NULL. Errors: CATTR_ERR_INVALID_ARGUMENT (NULL t or text, NULL ids with n > 0, n < 0),
 * CATTR_ERR_NO_MEMORY. */
cattr_status cx_tokenizer_decode(const cx_tokenizer *t, const int64_t *ids, int64_t n, bool skip_special, char **text);

/* The token string of `id` (byte-level form as in tokenizer.json, e.g. "Ġworld"; added tokens as written), owned
 * by the tokenizer and valid until cx_tokenizer_free; NULL if `id` names no token or t is NULL. */
const char *cx_tokenizer_id_to_token(const cx_tokenizer *t, int64_t id);

/* The id of a token string (added tokens first, then the model vocabulary, as Hugging Face), or -1 if there is
 * none (or t/tok is NULL). */
int64_t cx_tokenizer_token_to_id(const cx_tokenizer *t, const char *tok);

/* One more than the largest id of the vocabulary and the added tokens (151669 for Qwen3; the model's embedding
 * matrix may have more rows). 0 if t is NULL. */
int64_t cx_tokenizer_vocab_size(const cx_tokenizer *t);

/* The id of the "bos", "eos" or "pad" token named by tokenizer_config.json, or -1 if none is named, the name is not
 * a token, no tokenizer_config.json was read, or `which` is not one of those three words. */
int64_t cx_tokenizer_special_id(const cx_tokenizer *t, const char *which);

/* Whether `id` is an added token marked special (what cx_tokenizer_decode drops with skip_special). */
bool cx_tokenizer_is_special(const cx_tokenizer *t, int64_t id);

#endif
