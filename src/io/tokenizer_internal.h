/* tokenizer_internal.h - what the tokenizer's files share (tokenizer.c: buffers, UTF-8, maps, tries, encoding and
 * decoding; tokenizer_load.c: loading tokenizer.json). */
#ifndef CATTR_IO_TOKENIZER_INTERNAL_H
#define CATTR_IO_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include "io/tokenizer.h"

#include <cjson/cJSON.h>
#include <pcre2.h>
#include <utf8proc.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TK_MAX_NORMS 16
#define TK_MAX_STEPS 16
#define TK_MAX_ID 0x7ffffffe

typedef struct {
    char *p;
    size_t n, cap;
} bbuf;

typedef struct {
    int64_t *p;
    size_t n, cap;
} ivec;

typedef struct {
    const char *key;
    uint32_t len;
    int32_t id;
} sm_entry;

typedef struct {
    sm_entry *e;
    size_t n, cap_e;
    uint32_t *slot; /* entry index + 1, 0 = empty */
    size_t mask;
} strmap;

typedef struct {
    uint64_t *key; /* UINT64_MAX = empty */
    int32_t *rank, *merged;
    size_t mask;
} pairmap;

typedef struct {
    int32_t child, sibling, tok;
    unsigned char byte;
} trie_node;

typedef struct {
    trie_node *node;
    size_t n, cap;
    int32_t root[256]; /* node of each first byte, -1 if none */
    bool any;
} trie;

typedef struct {
    const char *content; /* in the arena */
    size_t len;
    int32_t id;
    bool special, lstrip, rstrip, single_word, normalized;
} added_token;

enum { STEP_SPLIT = 0, STEP_BYTELEVEL = 1 };
typedef struct {
    int kind;
    pcre2_code *re;    /* Split: the pattern; ByteLevel: GPT-2's regex if use_regex, else NULL */
    bool removed;      /* Split behavior Removed (else Isolated) */
    bool invert;       /* Split invert */
    bool prefix_space; /* ByteLevel add_prefix_space */
} pt_step;

enum { DEC_NONE = 0, DEC_BYTELEVEL = 1 };

struct cx_tokenizer {
    /* ids */
    int64_t n_ids;           /* max id + 1 */
    const char **id_tok;     /* [n_ids], NULL where no token */
    unsigned char *id_flags; /* [n_ids]: 1 = added token, 2 = special */
    char *arena;             /* every token string, NUL-terminated */
    strmap vocab;            /* model vocabulary */
    strmap added_map;        /* added tokens' contents */
    /* model */
    pairmap merges;
    int32_t byte_id[256]; /* ByteLevel: id of the one-byte token of each byte, -1 if absent */
    int32_t unk_id;
    bool fuse_unk, ignore_merges;
    /* normalizer: utf8proc option sets applied in order */
    int n_norms;
    int norm_opts[TK_MAX_NORMS];
    /* pre-tokenizer */
    int n_steps;
    pt_step steps[TK_MAX_STEPS];
    bool byte_level;
    /* added tokens */
    added_token *added;
    size_t n_added;
    trie raw_trie, norm_trie;
    /* post-processor */
    bool has_template;
    ivec tpl_pre, tpl_post;
    bool cfg_add_bos, cfg_add_eos;
    /* decoder */
    int decoder;
    /* tokenizer_config.json */
    int64_t bos_id, eos_id, pad_id;
    /* byte-level tables */
    uint32_t bl_fwd[256];
    int16_t bl_inv[324];
};

bool cx_tk_bb_add(bbuf *b, const void *s, size_t n);
bool cx_tk_bb_str(bbuf *b, const char *s);
void cx_tk_byte_level_tables(uint32_t fwd[256], int16_t inv[324]);
bool cx_tk_iv_push(ivec *v, int64_t x);
bool cx_tk_normalize(const cx_tokenizer *t, const char *s, size_t n, const char **out, size_t *out_n, bool *owned);
bool cx_tk_pm_init(pairmap *m, size_t expected);
void cx_tk_pm_put(pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t merged);
int64_t cx_tk_sm_get(const strmap *m, const char *key, size_t len);
bool cx_tk_sm_init(strmap *m, size_t expected);
void cx_tk_sm_put(strmap *m, const char *key, size_t len, int32_t id);
bool cx_tk_trie_add(trie *tr, const unsigned char *s, size_t n, int32_t tok);
void cx_tk_trie_init(trie *tr);
size_t cx_tk_utf8_invalid_at(const unsigned char *s, size_t n);
size_t cx_tk_utf8_len_at(const unsigned char *s, size_t n);
size_t cx_tk_utf8_put(uint32_t cp, char *out);

#endif
