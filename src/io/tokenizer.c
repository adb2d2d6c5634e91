/* tokenizer.c - Hugging Face tokenizer.json tokenizers: byte-level BPE with added tokens, Unicode normalization
 * (utf8proc), regex pre-tokenization (PCRE2) and the ByteLevel decoder, reproducing Hugging Face's Rust
 * `tokenizers` token for token (see tokenizer.h for the supported components).
 *
 * Encoding pipeline (as `tokenizers` does it):
 *   1. added tokens with normalized=false are cut out of the raw text (leftmost-longest, lstrip/rstrip/single_word);
 *   2. each remaining piece is normalized (NFC ...), then added tokens with normalized=true are cut out of it;
 *   3. each remaining piece goes through the pre-tokenizers in order (Split regexes, then ByteLevel, which may split
 *      with GPT-2's regex and maps every byte to a printable character);
 *   4. each pre-token is encoded by BPE: start from one symbol per character and repeatedly apply the adjacent pair
 *      merge of lowest rank (leftmost first among equal ranks), with a binary heap: O(n log n) per pre-token;
 *   5. the post-processor's template adds special tokens when asked.
 *
 * Regex semantics. `tokenizers` compiles Split patterns with Oniguruma (its default "onig" feature), not with
 * Rust's `regex` crate (the Qwen/Llama-3 pattern uses a look-ahead, `\s+(?!\S)`, that crate lacks). Oniguruma and
 * PCRE2 are both backtracking, leftmost-first engines, so alternation order and greedy/look-around behaviour
 * agree; the pattern is compiled with PCRE2_UTF | PCRE2_UCP and rewritten first where the two differ:
 *   - `\s` / `\S`: Oniguruma (UTF-8) uses the Unicode White_Space property: U+0009-000D, U+0020, U+0085, U+00A0,
 *     U+1680, U+2000-200A, U+2028, U+2029, U+202F, U+205F, U+3000 (so U+0085 NEL is a space and U+FEFF BOM,
 *     U+200B, U+180E are not). PCRE2 with UCP defines `\s` as \p{Z} | \h | \v, which also includes U+180E
 *     MONGOLIAN VOWEL SEPARATOR (via \h; checked against PCRE2 10.42). `\s` is therefore rewritten as an explicit
 *     class of the White_Space code points, and `\S` as its complement (inside a class: the complement ranges).
 *   - `\w` / `\W`: Oniguruma: Letter | Mark | Decimal_Number | Connector_Punctuation; PCRE2 10.42 UCP: \p{L} |
 *     \p{N} | '_'. Rewritten as [\p{L}\p{M}\p{Nd}\p{Pc}]. (`\b` keeps PCRE2's definition.)
 *   - `\h` / `\H`: hexadecimal digit in Oniguruma, horizontal space in PCRE2: rewritten as [0-9A-Fa-f].
 *   - `\uHHHH` (Oniguruma) becomes `\x{HHHH}`; `{,n}` (Oniguruma: 0 to n) becomes `{0,n}`.
 *   - `^` / `$` are line anchors in Oniguruma's default syntax: PCRE2_MULTILINE with LF newlines.
 *   - `(?i:'s|'t|...)`: both engines fold case with Unicode simple case folding ('S', and U+017F LONG S for 's').
 *   - `\d` and `\p{..}` mean the same in both (\d = \p{Nd}); both engines' Unicode tables may differ in version for
 *     code points assigned recently (PCRE2 10.42: Unicode 14).
 *   Unsupported Oniguruma-only constructs (nested classes `[a[b]]`, class intersection `&&`, `\W` inside a class)
 *   are rejected with CATTR_ERR_UNSUPPORTED.
 * Regex iteration follows onig's find_iter: an empty match right where the previous match ended is skipped by
 * advancing one character. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "io/tokenizer.h"

#include "io/fileutil.h"

#include <cjson/cJSON.h>
#include <pcre2.h>
#include <utf8proc.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TK_MAX_NORMS 16
#define TK_MAX_STEPS 16
#define TK_MAX_ID 0x7ffffffe

/* ==== small growable buffers ================================================================================ */

typedef struct {
    char *p;
    size_t n, cap;
} bbuf;

static bool bb_reserve(bbuf *b, size_t extra) {
    if (b->n + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return false;
    b->p = p;
    b->cap = cap;
    return true;
}
static bool bb_add(bbuf *b, const void *s, size_t n) {
    if (!bb_reserve(b, n)) return false;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return true;
}
static bool bb_str(bbuf *b, const char *s) { return bb_add(b, s, strlen(s)); }

typedef struct {
    int64_t *p;
    size_t n, cap;
} ivec;

static bool iv_push(ivec *v, int64_t x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int64_t *p = realloc(v->p, cap * sizeof *p);
        if (!p) return false;
        v->p = p;
        v->cap = cap;
    }
    v->p[v->n++] = x;
    return true;
}

/* ==== UTF-8 and Unicode helpers ============================================================================= */

/* Length of the well-formed UTF-8 sequence at s[0..n) (1-4) and its code point, or 0 if it is not well formed
 * (overlong forms, surrogates and values above U+10FFFF are rejected, as Rust's str requires). */
static int utf8_seq(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned char b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    int len;
    uint32_t c;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
        len = 2;
        c = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
        len = 3;
        c = b & 0x0F;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4;
        c = b & 0x07;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if ((size_t)len > n) return 0;
    for (int k = 1; k < len; k++) {
        unsigned char x = s[k];
        if (x < (k == 1 ? lo : 0x80) || x > (k == 1 ? hi : 0xBF)) return 0;
        c = (c << 6) | (x & 0x3F);
    }
    *cp = c;
    return len;
}

/* Offset of the first ill-formed byte of s[0..n), or n if it is all valid UTF-8. */
static size_t utf8_invalid_at(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int k = utf8_seq(s + i, n - i, &cp);
        if (!k) return i;
        i += (size_t)k;
    }
    return n;
}

/* Length of the character at s (valid UTF-8 assumed, at least 1). */
static size_t utf8_len_at(const unsigned char *s, size_t n) {
    uint32_t cp;
    int k = utf8_seq(s, n, &cp);
    return k ? (size_t)k : 1;
}

/* Appends s[0..n) to b as Rust's String::from_utf8_lossy does: each maximal ill-formed subpart becomes U+FFFD. */
static bool append_lossy(bbuf *b, const unsigned char *s, size_t n) {
    static const char fffd[] = "\xEF\xBF\xBD";
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        while (i < n) { /* copy the valid run */
            uint32_t cp;
            int k = utf8_seq(s + i, n - i, &cp);
            if (!k) break;
            i += (size_t)k;
        }
        if (i > start && !bb_add(b, s + start, i - start)) return false;
        if (i >= n) break;
        /* s[i] starts an ill-formed sequence: skip the longest prefix that could still begin a valid one */
        unsigned char c = s[i];
        size_t need = 0;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        }
        size_t k = 1;
        while (k <= need && i + k < n) {
            unsigned char x = s[i + k];
            if (x < (k == 1 ? lo : 0x80) || x > (k == 1 ? hi : 0xBF)) break;
            k++;
        }
        if (!bb_add(b, fffd, 3)) return false;
        i += k;
    }
    return true;
}

/* Unicode White_Space (Rust's char::is_whitespace, Oniguruma's \s). */
static bool is_white_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Rust regex's Unicode \w (approximately: Alphabetic is taken as L | Nl, plus marks, Nd, Pc, Join_Control). */
static bool is_word_char(uint32_t c) {
    if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (c == 0x200C || c == 0x200D) return true;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC: return true;
    default: return false;
    }
}

/* ==== GPT-2 byte <-> character table ======================================================================== */

/* Printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) map to the code point of the same value; the 68 others map, in
 * byte order, to U+0100, U+0101, ... (space -> U+0120 'Ġ', newline -> U+010A 'Ċ'). */
static void byte_level_tables(uint32_t fwd[256], int16_t inv[324]) {
    for (int i = 0; i < 324; i++) inv[i] = -1;
    int next = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        fwd[b] = printable ? (uint32_t)b : (uint32_t)(256 + next++);
        inv[fwd[b]] = (int16_t)b;
    }
}

static size_t utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ==== hash maps ============================================================================================== */

static uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
    return h ^ (h >> 29);
}
static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

/* String -> id. Keys point into storage owned elsewhere (the tokenizer's string arena). */
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

static bool sm_init(strmap *m, size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2 + 2) cap *= 2;
    m->slot = calloc(cap, sizeof *m->slot);
    m->e = malloc((expected + 1) * sizeof *m->e);
    m->n = 0;
    m->cap_e = expected + 1;
    m->mask = cap - 1;
    return m->slot && m->e;
}
static void sm_free(strmap *m) {
    free(m->slot);
    free(m->e);
}
static int64_t sm_get(const strmap *m, const char *key, size_t len) {
    if (!m->slot) return -1;
    for (size_t i = hash_bytes(key, len) & m->mask;; i = (i + 1) & m->mask) {
        uint32_t s = m->slot[i];
        if (!s) return -1;
        const sm_entry *e = &m->e[s - 1];
        if (e->len == len && memcmp(e->key, key, len) == 0) return e->id;
    }
}
/* Inserts or overwrites (the last definition wins, as in a Rust HashMap built from an iterator). The map was sized
 * for `expected` entries: no growth needed. */
static void sm_put(strmap *m, const char *key, size_t len, int32_t id) {
    for (size_t i = hash_bytes(key, len) & m->mask;; i = (i + 1) & m->mask) {
        uint32_t s = m->slot[i];
        if (!s) {
            if (m->n >= m->cap_e) return; /* cannot happen: sized by the caller */
            m->e[m->n] = (sm_entry){key, (uint32_t)len, id};
            m->slot[i] = (uint32_t)(++m->n);
            return;
        }
        sm_entry *e = &m->e[s - 1];
        if (e->len == len && memcmp(e->key, key, len) == 0) {
            e->id = id;
            return;
        }
    }
}

/* (left id, right id) -> (rank, merged id). */
typedef struct {
    uint64_t *key; /* UINT64_MAX = empty */
    int32_t *rank, *merged;
    size_t mask;
} pairmap;

static bool pm_init(pairmap *m, size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2 + 2) cap *= 2;
    m->key = malloc(cap * sizeof *m->key);
    m->rank = malloc(cap * sizeof *m->rank);
    m->merged = malloc(cap * sizeof *m->merged);
    m->mask = cap - 1;
    if (!m->key || !m->rank || !m->merged) return false;
    memset(m->key, 0xff, cap * sizeof *m->key);
    return true;
}
static void pm_free(pairmap *m) {
    free(m->key);
    free(m->rank);
    free(m->merged);
}
static inline uint64_t pm_pack(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }
static void pm_put(pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t merged) {
    uint64_t k = pm_pack(a, b);
    for (size_t i = hash_u64(k) & m->mask;; i = (i + 1) & m->mask) {
        if (m->key[i] == UINT64_MAX || m->key[i] == k) {
            m->key[i] = k;
            m->rank[i] = rank;
            m->merged[i] = merged;
            return;
        }
    }
}
/* Returns the rank (and *merged) of the merge of (a, b), or -1. */
static inline int32_t pm_get(const pairmap *m, int32_t a, int32_t b, int32_t *merged) {
    if (!m->key) return -1;
    uint64_t k = pm_pack(a, b);
    for (size_t i = hash_u64(k) & m->mask;; i = (i + 1) & m->mask) {
        if (m->key[i] == k) {
            *merged = m->merged[i];
            return m->rank[i];
        }
        if (m->key[i] == UINT64_MAX) return -1;
    }
}

/* ==== byte trie for added tokens (leftmost-longest matching) ================================================= */

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

static void trie_init(trie *tr) {
    memset(tr, 0, sizeof *tr);
    for (int i = 0; i < 256; i++) tr->root[i] = -1;
}
static int32_t trie_new_node(trie *tr, unsigned char byte) {
    if (tr->n == tr->cap) {
        size_t cap = tr->cap ? tr->cap * 2 : 64;
        trie_node *p = realloc(tr->node, cap * sizeof *p);
        if (!p) return -1;
        tr->node = p;
        tr->cap = cap;
    }
    tr->node[tr->n] = (trie_node){-1, -1, -1, byte};
    return (int32_t)tr->n++;
}
/* Adds `s` (n >= 1 bytes) as token index `tok`; returns false when out of memory. */
static bool trie_add(trie *tr, const unsigned char *s, size_t n, int32_t tok) {
    int32_t cur = tr->root[s[0]];
    if (cur < 0) {
        cur = trie_new_node(tr, s[0]);
        if (cur < 0) return false;
        tr->root[s[0]] = cur;
    }
    for (size_t i = 1; i < n; i++) {
        int32_t c = tr->node[cur].child;
        while (c >= 0 && tr->node[c].byte != s[i]) c = tr->node[c].sibling;
        if (c < 0) {
            c = trie_new_node(tr, s[i]);
            if (c < 0) return false;
            tr->node[c].sibling = tr->node[cur].child;
            tr->node[cur].child = c;
        }
        cur = c;
    }
    tr->node[cur].tok = tok;
    tr->any = true;
    return true;
}
/* Leftmost-longest match in s[from..n): returns the token index and sets *start and *end, or -1. */
static int32_t trie_find(const trie *tr, const unsigned char *s, size_t n, size_t from, size_t *start, size_t *end) {
    for (size_t i = from; i < n; i++) {
        int32_t cur = tr->root[s[i]];
        if (cur < 0) continue;
        int32_t best = -1;
        size_t best_end = 0;
        size_t j = i + 1;
        for (;;) {
            if (tr->node[cur].tok >= 0) {
                best = tr->node[cur].tok;
                best_end = j;
            }
            if (j >= n) break;
            int32_t c = tr->node[cur].child;
            while (c >= 0 && tr->node[c].byte != s[j]) c = tr->node[c].sibling;
            if (c < 0) break;
            cur = c;
            j++;
        }
        if (best >= 0) {
            *start = i;
            *end = best_end;
            return best;
        }
    }
    return -1;
}

/* ==== the tokenizer ========================================================================================== */

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

void cx_tokenizer_free(cx_tokenizer *t) {
    if (!t) return;
    free(t->id_tok);
    free(t->id_flags);
    free(t->arena);
    sm_free(&t->vocab);
    sm_free(&t->added_map);
    pm_free(&t->merges);
    for (int i = 0; i < t->n_steps; i++) pcre2_code_free(t->steps[i].re);
    free(t->added);
    free(t->raw_trie.node);
    free(t->norm_trie.node);
    free(t->tpl_pre.p);
    free(t->tpl_post.p);
    free(t);
}

/* ==== loading ================================================================================================ */

typedef struct {
    const char *file; /* for messages */
    cx_tokenizer *t;
} lctx;

static cattr_status lfail(const lctx *L, cattr_status st, const char *jpath, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static cattr_status lfail(const lctx *L, cattr_status st, const char *jpath, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return cx_fail(st, "tokenizer '%s': %s: %s", L->file, jpath, msg);
}
static cattr_status lnomem(const lctx *L) { return cx_fail(CATTR_ERR_NO_MEMORY, "tokenizer '%s': out of memory", L->file); }

/* An optional boolean member: absent or null gives `def`; another type is a FORMAT error. */
static cattr_status jbool(const lctx *L, const cJSON *obj, const char *key, bool def, const char *jpath, bool *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return CATTR_OK;
    }
    if (!cJSON_IsBool(v)) return lfail(L, CATTR_ERR_FORMAT, jpath, "\"%s\" must be a boolean", key);
    *out = cJSON_IsTrue(v);
    return CATTR_OK;
}

/* A JSON number that is an integer id in [0, TK_MAX_ID]. */
static bool jid(const cJSON *v, int32_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= TK_MAX_ID) || d != floor(d)) return false;
    *out = (int32_t)d;
    return true;
}

static const char *jtype(const cJSON *obj) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(obj, "type");
    return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

/* ---- regex translation (Oniguruma -> PCRE2, see the file comment) ---- */

#define RX_WS "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define RX_NWS                                                                                                         \
    "\\x{0}-\\x{8}\\x{E}-\\x{1F}\\x{21}-\\x{84}\\x{86}-\\x{9F}\\x{A1}-\\x{167F}\\x{1681}-\\x{1FFF}\\x{200B}-\\x{2027}" \
    "\\x{202A}-\\x{202E}\\x{2030}-\\x{205E}\\x{2060}-\\x{2FFF}\\x{3001}-\\x{10FFFF}"
#define RX_WORD "\\p{L}\\p{M}\\p{Nd}\\p{Pc}"
#define RX_HEX "0-9A-Fa-f"
#define RX_NHEX "\\x{0}-\\x{2F}\\x{3A}-\\x{40}\\x{47}-\\x{60}\\x{67}-\\x{10FFFF}"

static bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static cattr_status translate_regex(const lctx *L, const char *jpath, const char *src, bbuf *out) {
    bool in_class = false;
    size_t i = 0, n = strlen(src);
    bool ok = true;
    while (i < n && ok) {
        char c = src[i];
        if (c == '\\' && i + 1 < n) {
            char d = src[i + 1];
            const char *rep = NULL;
            switch (d) {
            case 's': rep = in_class ? RX_WS : "[" RX_WS "]"; break;
            case 'S': rep = in_class ? RX_NWS : "[^" RX_WS "]"; break;
            case 'w': rep = in_class ? RX_WORD : "[" RX_WORD "]"; break;
            case 'W':
                if (in_class)
                    return lfail(L, CATTR_ERR_UNSUPPORTED, jpath, "regex: \\W inside a character class is not supported");
                rep = "[^" RX_WORD "]";
                break;
            case 'h': rep = in_class ? RX_HEX : "[" RX_HEX "]"; break;
            case 'H': rep = in_class ? RX_NHEX : "[^" RX_HEX "]"; break;
            default: break;
            }
            if (rep) {
                ok = bb_str(out, rep);
                i += 2;
                continue;
            }
            if (d == 'u' && i + 5 < n && is_hex(src[i + 2]) && is_hex(src[i + 3]) && is_hex(src[i + 4]) &&
                is_hex(src[i + 5])) {
                ok = bb_str(out, "\\x{") && bb_add(out, src + i + 2, 4) && bb_str(out, "}");
                i += 6;
                continue;
            }
            if (strchr("pPxogkN", d) && i + 2 < n && src[i + 2] == '{') {
                const char *close = strchr(src + i + 2, '}');
                size_t end = close ? (size_t)(close - src) + 1 : n;
                ok = bb_add(out, src + i, end - i);
                i = end;
                continue;
            }
            size_t clen = utf8_len_at((const unsigned char *)src + i + 1, n - i - 1);
            ok = bb_add(out, src + i, 1 + clen);
            i += 1 + clen;
            continue;
        }
        if (c == '[') {
            if (in_class) {
                if (i + 1 < n && src[i + 1] == ':') {
                    const char *close = strstr(src + i + 2, ":]");
                    size_t end = close ? (size_t)(close - src) + 2 : n;
                    ok = bb_add(out, src + i, end - i);
                    i = end;
                    continue;
                }
                return lfail(L, CATTR_ERR_UNSUPPORTED, jpath, "regex: nested character classes are not supported");
            }
            in_class = true;
            ok = bb_add(out, "[", 1);
            i++;
            if (i < n && src[i] == '^') {
                ok = ok && bb_add(out, "^", 1);
                i++;
            }
            if (i < n && src[i] == ']') { /* a leading ']' is literal */
                ok = ok && bb_add(out, "\\]", 2);
                i++;
            }
            continue;
        }
        if (c == ']' && in_class) in_class = false;
        if (c == '&' && in_class && i + 1 < n && src[i + 1] == '&')
            return lfail(L, CATTR_ERR_UNSUPPORTED, jpath, "regex: class intersection '&&' is not supported");
        if (c == '{' && !in_class && i + 1 < n && src[i + 1] == ',') {
            size_t j = i + 2;
            while (j < n && src[j] >= '0' && src[j] <= '9') j++;
            if (j > i + 2 && j < n && src[j] == '}') {
                ok = bb_str(out, "{0");
                i++;
                continue;
            }
        }
        ok = bb_add(out, src + i, 1);
        i++;
    }
    if (!ok) return lnomem(L);
    if (!out->p && !bb_add(out, "", 0)) return lnomem(L);
    return CATTR_OK;
}

/* Compiles an Oniguruma-syntax pattern (literal when `literal`) for matching with PCRE2. */
static cattr_status compile_regex(const lctx *L, const char *jpath, const char *pattern, bool literal, pcre2_code **out) {
    *out = NULL;
    bbuf pat = {0};
    if (literal) {
        if (!bb_str(&pat, pattern)) return lnomem(L);
    } else {
        cattr_status st = translate_regex(L, jpath, pattern, &pat);
        if (st != CATTR_OK) {
            free(pat.p);
            return st;
        }
    }
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    if (!cc) {
        free(pat.p);
        return lnomem(L);
    }
    pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
    int err = 0;
    PCRE2_SIZE eoff = 0;
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP | PCRE2_MULTILINE);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat.p, pat.n, opts, &err, &eoff, cc);
    pcre2_compile_context_free(cc);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        cattr_status st = lfail(L, CATTR_ERR_UNSUPPORTED, jpath,
                                "regex '%s' cannot be compiled (as PCRE2 pattern '%s'): %s at offset %zu", pattern,
                                pat.p, (const char *)msg, (size_t)eoff);
        free(pat.p);
        return st;
    }
    free(pat.p);
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: the interpreter is used if JIT is unavailable */
    *out = re;
    return CATTR_OK;
}

/* ---- components ---- */

static cattr_status parse_normalizer(const lctx *L, const cJSON *node, const char *jpath) {
    cx_tokenizer *t = L->t;
    if (!node || cJSON_IsNull(node)) return CATTR_OK;
    if (!cJSON_IsObject(node)) return lfail(L, CATTR_ERR_FORMAT, jpath, "must be an object or null");
    const char *type = jtype(node);
    if (!type) return lfail(L, CATTR_ERR_FORMAT, jpath, "missing \"type\"");
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(node, "normalizers");
        if (!cJSON_IsArray(arr)) return lfail(L, CATTR_ERR_FORMAT, jpath, "Sequence without a \"normalizers\" array");
        int k = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, arr) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.normalizers[%d]", jpath, k++);
            CX_CHECK(parse_normalizer(L, it, sub));
        }
        return CATTR_OK;
    }
    int opts;
    if (strcmp(type, "NFC") == 0) opts = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    else if (strcmp(type, "NFD") == 0) opts = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
    else if (strcmp(type, "NFKC") == 0) opts = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    else if (strcmp(type, "NFKD") == 0) opts = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
    else return lfail(L, CATTR_ERR_UNSUPPORTED, jpath, "normalizer type '%s' is not supported (only NFC, NFD, NFKC, NFKD, Sequence)", type);
    if (t->n_norms >= TK_MAX_NORMS) return lfail(L, CATTR_ERR_UNSUPPORTED, jpath, "more than %d normalizers", TK_MAX_NORMS);
    t->norm_opts[t->n_norms++] = opts;
    return CATTR_OK;
}

static cattr_status add_step(const lctx *L, const char *jpath, pt_step s) {
    cx_tokenizer *t = L->t;
    if (t->n_steps >= TK_MAX_STEPS) {
        pcre2_code_free(s.re);
        return lfail(L, CATTR_ERR_UNSUPPORTED, jpath, "more than %d pre-tokenizers", TK_MAX_STEPS);
    }
    t->steps[t->n_steps++] = s;
    return CATTR_OK;
}

static const char GPT2_REGEX[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static cattr_status parse_pretokenizer(const lctx *L, const cJSON *node, const char *jpath) {
    if (!node || cJSON_IsNull(node)) return CATTR_OK;
    if (!cJSON_IsObject(node)) return lfail(L, CATTR_ERR_FORMAT, jpath, "must be an object or null");
    const char *type = jtype(node);
    if (!type) return lfail(L, CATTR_ERR_FORMAT, jpath, "missing \"type\"");
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(node, "pretokenizers");
        if (!cJSON_IsArray(arr)) return lfail(L, CATTR_ERR_FORMAT, jpath, "Sequence without a \"pretokenizers\" array");
        int k = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, arr) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.pretokenizers[%d]", jpath, k++);
            CX_CHECK(parse_pretokenizer(L, it, sub));
        }
        return CATTR_OK;
    }
    if (L->t->byte_level)
        return lfail(L, CATTR_ERR_UNSUPPORTED, jpath, "a pre-tokenizer after ByteLevel is not supported (ByteLevel must be last)");
    if (strcmp(type, "ByteLevel") == 0) {
        pt_step s = {.kind = STEP_BYTELEVEL};
        bool use_regex = true;
        CX_CHECK(jbool(L, node, "add_prefix_space", true, jpath, &s.prefix_space));
        CX_CHECK(jbool(L, node, "use_regex", true, jpath, &use_regex));
        if (use_regex) CX_CHECK(compile_regex(L, jpath, GPT2_REGEX, false, &s.re));
        L->t->byte_level = true;
        return add_step(L, jpath, s);
    }
    if (strcmp(type, "Split") == 0) {
        pt_step s = {.kind = STEP_SPLIT};
        char sub[300];
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(node, "pattern");
        const cJSON *rx = cJSON_IsObject(pat) ? cJSON_GetObjectItemCaseSensitive(pat, "Regex") : NULL;
        const cJSON *lit = cJSON_IsObject(pat) ? cJSON_GetObjectItemCaseSensitive(pat, "String") : NULL;
        if (!cJSON_IsString(rx) && !cJSON_IsString(lit))
            return lfail(L, CATTR_ERR_FORMAT, jpath, "Split needs \"pattern\": {\"Regex\": ...} or {\"String\": ...}");
        const cJSON *beh = cJSON_GetObjectItemCaseSensitive(node, "behavior");
        if (!cJSON_IsString(beh)) return lfail(L, CATTR_ERR_FORMAT, jpath, "Split needs a \"behavior\" string");
        snprintf(sub, sizeof sub, "%s.behavior", jpath);
        if (strcmp(beh->valuestring, "Removed") == 0) s.removed = true;
        else if (strcmp(beh->valuestring, "Isolated") != 0)
            return lfail(L, CATTR_ERR_UNSUPPORTED, sub, "Split behavior '%s' is not supported (only Isolated, Removed)",
                         beh->valuestring);
        CX_CHECK(jbool(L, node, "invert", false, jpath, &s.invert));
        snprintf(sub, sizeof sub, "%s.pattern", jpath);
        if (cJSON_IsString(rx)) CX_CHECK(compile_regex(L, sub, rx->valuestring, false, &s.re));
        else CX_CHECK(compile_regex(L, sub, lit->valuestring, true, &s.re));
        return add_step(L, jpath, s);
    }
    return lfail(L, CATTR_ERR_UNSUPPORTED, jpath, "pre-tokenizer type '%s' is not supported (only Split, ByteLevel, Sequence)", type);
}

static cattr_status parse_postprocessor(const lctx *L, const cJSON *node, const char *jpath) {
    cx_tokenizer *t = L->t;
    if (!node || cJSON_IsNull(node)) return CATTR_OK;
    if (!cJSON_IsObject(node)) return lfail(L, CATTR_ERR_FORMAT, jpath, "must be an object or null");
    const char *type = jtype(node);
    if (!type) return lfail(L, CATTR_ERR_FORMAT, jpath, "missing \"type\"");
    if (strcmp(type, "ByteLevel") == 0) return CATTR_OK; /* offsets only */
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(node, "processors");
        if (!cJSON_IsArray(arr)) return lfail(L, CATTR_ERR_FORMAT, jpath, "Sequence without a \"processors\" array");
        int k = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, arr) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.processors[%d]", jpath, k++);
            CX_CHECK(parse_postprocessor(L, it, sub));
        }
        return CATTR_OK;
    }
    /* Each processor wraps what the previous ones produced: new = pre ++ old ++ post. */
    ivec pre = {0}, post = {0};
    cattr_status st = CATTR_OK;
    if (strcmp(type, "RobertaProcessing") == 0 || strcmp(type, "BertProcessing") == 0) {
        const cJSON *cls = cJSON_GetObjectItemCaseSensitive(node, "cls");
        const cJSON *sep = cJSON_GetObjectItemCaseSensitive(node, "sep");
        int32_t cid, sid;
        if (!cJSON_IsArray(cls) || !cJSON_IsArray(sep) || !jid(cJSON_GetArrayItem(cls, 1), &cid) ||
            !jid(cJSON_GetArrayItem(sep, 1), &sid))
            return lfail(L, CATTR_ERR_FORMAT, jpath, "%s needs \"cls\" and \"sep\" as [token, id]", type);
        if (!iv_push(&pre, cid) || !iv_push(&post, sid)) st = lnomem(L);
    } else if (strcmp(type, "TemplateProcessing") == 0) {
        const cJSON *single = cJSON_GetObjectItemCaseSensitive(node, "single");
        const cJSON *specials = cJSON_GetObjectItemCaseSensitive(node, "special_tokens");
        if (!cJSON_IsArray(single)) return lfail(L, CATTR_ERR_FORMAT, jpath, "TemplateProcessing without a \"single\" array");
        bool seen_a = false;
        int k = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, single) {
            char sub[300];
            snprintf(sub, sizeof sub, "%s.single[%d]", jpath, k++);
            const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
            const cJSON *sq = cJSON_GetObjectItemCaseSensitive(it, "Sequence");
            if (cJSON_IsObject(sq)) {
                const cJSON *sid = cJSON_GetObjectItemCaseSensitive(sq, "id");
                if (!cJSON_IsString(sid) || strcmp(sid->valuestring, "A") != 0 || seen_a) {
                    st = lfail(L, CATTR_ERR_FORMAT, sub, "the single-sequence template must hold sequence \"A\" once");
                    break;
                }
                seen_a = true;
            } else if (cJSON_IsObject(sp)) {
                const cJSON *name = cJSON_GetObjectItemCaseSensitive(sp, "id");
                const cJSON *def = cJSON_IsString(name) && cJSON_IsObject(specials)
                                       ? cJSON_GetObjectItemCaseSensitive(specials, name->valuestring)
                                       : NULL;
                const cJSON *ids = def ? cJSON_GetObjectItemCaseSensitive(def, "ids") : NULL;
                if (!cJSON_IsArray(ids)) {
                    st = lfail(L, CATTR_ERR_FORMAT, sub, "special token '%s' is not defined in \"special_tokens\"",
                               cJSON_IsString(name) ? name->valuestring : "?");
                    break;
                }
                const cJSON *x;
                cJSON_ArrayForEach(x, ids) {
                    int32_t id;
                    if (!jid(x, &id)) {
                        st = lfail(L, CATTR_ERR_FORMAT, sub, "special token ids must be non-negative integers");
                        break;
                    }
                    if (!iv_push(seen_a ? &post : &pre, id)) {
                        st = lnomem(L);
                        break;
                    }
                }
                if (st != CATTR_OK) break;
            } else {
                st = lfail(L, CATTR_ERR_FORMAT, sub, "template items must be {\"SpecialToken\": ...} or {\"Sequence\": ...}");
                break;
            }
        }
        if (st == CATTR_OK && !seen_a) st = lfail(L, CATTR_ERR_FORMAT, jpath, "the single template has no sequence \"A\"");
    } else {
        return lfail(L, CATTR_ERR_UNSUPPORTED, jpath,
                     "post-processor type '%s' is not supported (only ByteLevel, TemplateProcessing, RobertaProcessing, "
                     "BertProcessing, Sequence)", type);
    }
    if (st == CATTR_OK) {
        for (size_t i = 0; i < t->tpl_pre.n && st == CATTR_OK; i++)
            if (!iv_push(&pre, t->tpl_pre.p[i])) st = lnomem(L);
        for (size_t i = 0; i < post.n && st == CATTR_OK; i++)
            if (!iv_push(&t->tpl_post, post.p[i])) st = lnomem(L);
    }
    if (st == CATTR_OK) {
        free(t->tpl_pre.p);
        t->tpl_pre = pre;
        t->has_template = true;
    } else {
        free(pre.p);
    }
    free(post.p);
    return st;
}

static cattr_status parse_decoder(const lctx *L, const cJSON *node, const char *jpath) {
    if (!node || cJSON_IsNull(node)) return CATTR_OK;
    if (!cJSON_IsObject(node)) return lfail(L, CATTR_ERR_FORMAT, jpath, "must be an object or null");
    const char *type = jtype(node);
    if (!type) return lfail(L, CATTR_ERR_FORMAT, jpath, "missing \"type\"");
    if (strcmp(type, "ByteLevel") == 0) {
        L->t->decoder = DEC_BYTELEVEL;
        return CATTR_OK;
    }
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(node, "decoders");
        if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != 1)
            return lfail(L, CATTR_ERR_UNSUPPORTED, jpath, "only a decoder Sequence holding one ByteLevel is supported");
        char sub[256];
        snprintf(sub, sizeof sub, "%s.decoders[0]", jpath);
        return parse_decoder(L, cJSON_GetArrayItem(arr, 0), sub);
    }
    return lfail(L, CATTR_ERR_UNSUPPORTED, jpath, "decoder type '%s' is not supported (only ByteLevel)", type);
}

/* Applies the normalizer chain to s[0..n). On success *out is s itself (when nothing changes; *owned false) or a
 * malloc'd string (*owned true). Input must be valid UTF-8. Returns false when out of memory. */
static bool normalize(const cx_tokenizer *t, const char *s, size_t n, const char **out, size_t *out_n, bool *owned) {
    *out = s;
    *out_n = n;
    *owned = false;
    if (n == 0 || t->n_norms == 0) return true;
    for (int k = 0; k < t->n_norms; k++) {
        int opts = t->norm_opts[k];
        const unsigned char *cur = (const unsigned char *)*out;
        size_t cn = *out_n;
        /* Fast paths: ASCII is invariant under every form; code points below U+0300 (lead bytes < 0xCC) are
         * invariant under NFC. */
        unsigned char limit = (opts == (UTF8PROC_STABLE | UTF8PROC_COMPOSE)) ? 0xCC : 0x80;
        size_t i = 0;
        while (i < cn && cur[i] < limit) i++;
        if (i == cn) continue;
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t r = utf8proc_map(cur, (utf8proc_ssize_t)cn, &dst, (utf8proc_option_t)opts);
        if (*owned) free((void *)*out);
        if (r < 0) { /* only UTF8PROC_ERROR_NOMEM is possible on validated input */
            free(dst);
            *out = NULL;
            *owned = false;
            return false;
        }
        *out = (const char *)dst;
        *out_n = (size_t)r;
        *owned = true;
    }
    return true;
}

static cattr_status parse_added(const lctx *L, const cJSON *arr, size_t *arena_pos, char *arena) {
    cx_tokenizer *t = L->t;
    size_t k = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        char jp[64];
        snprintf(jp, sizeof jp, "added_tokens[%zu]", k);
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        int32_t id;
        if (!cJSON_IsObject(it) || !cJSON_IsString(content) || !jid(cJSON_GetObjectItemCaseSensitive(it, "id"), &id))
            return lfail(L, CATTR_ERR_FORMAT, jp, "an added token needs a string \"content\" and an integer \"id\"");
        added_token a = {.id = id};
        CX_CHECK(jbool(L, it, "special", false, jp, &a.special));
        CX_CHECK(jbool(L, it, "lstrip", false, jp, &a.lstrip));
        CX_CHECK(jbool(L, it, "rstrip", false, jp, &a.rstrip));
        CX_CHECK(jbool(L, it, "single_word", false, jp, &a.single_word));
        CX_CHECK(jbool(L, it, "normalized", !a.special, jp, &a.normalized));
        size_t len = strlen(content->valuestring);
        k++;
        if (len == 0) continue; /* ignored by tokenizers too */
        if (utf8_invalid_at((const unsigned char *)content->valuestring, len) != len)
            return lfail(L, CATTR_ERR_FORMAT, jp, "content is not valid UTF-8");
        memcpy(arena + *arena_pos, content->valuestring, len + 1);
        a.content = arena + *arena_pos;
        a.len = len;
        *arena_pos += len + 1;
        t->added[t->n_added++] = a;
    }
    return CATTR_OK;
}

/* Builds the two added-token tries (normalized tokens are matched by their normalized form). */
static cattr_status build_tries(const lctx *L) {
    cx_tokenizer *t = L->t;
    trie_init(&t->raw_trie);
    trie_init(&t->norm_trie);
    for (size_t i = 0; i < t->n_added; i++) {
        const added_token *a = &t->added[i];
        if (!a->normalized) {
            if (!trie_add(&t->raw_trie, (const unsigned char *)a->content, a->len, (int32_t)i)) return lnomem(L);
            continue;
        }
        const char *s;
        size_t n;
        bool owned;
        if (!normalize(t, a->content, a->len, &s, &n, &owned)) return lnomem(L);
        bool ok = n == 0 || trie_add(&t->norm_trie, (const unsigned char *)s, n, (int32_t)i);
        if (owned) free((void *)s);
        if (!ok) return lnomem(L);
    }
    return CATTR_OK;
}

static const char *merge_path(char *buf, size_t size, int rank) {
    snprintf(buf, size, "model.merges[%d]", rank);
    return buf;
}

static cattr_status parse_model(const lctx *L, const cJSON *model, size_t *arena_pos, char *arena) {
    cx_tokenizer *t = L->t;
    if (!cJSON_IsObject(model)) return lfail(L, CATTR_ERR_FORMAT, "model", "missing or not an object");
    const char *type = jtype(model);
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (type && strcmp(type, "BPE") != 0)
        return lfail(L, CATTR_ERR_UNSUPPORTED, "model.type", "model type '%s' is not supported (only BPE)", type);
    if (!type && !merges) return lfail(L, CATTR_ERR_UNSUPPORTED, "model", "a model without \"type\" or \"merges\" is not supported (only BPE)");
    if (!cJSON_IsObject(vocab)) return lfail(L, CATTR_ERR_FORMAT, "model.vocab", "missing or not an object");
    if (merges && !cJSON_IsNull(merges) && !cJSON_IsArray(merges))
        return lfail(L, CATTR_ERR_FORMAT, "model.merges", "must be an array");

    bool byte_fallback = false;
    CX_CHECK(jbool(L, model, "byte_fallback", false, "model", &byte_fallback));
    if (byte_fallback) return lfail(L, CATTR_ERR_UNSUPPORTED, "model.byte_fallback", "byte_fallback is not supported");
    CX_CHECK(jbool(L, model, "ignore_merges", false, "model", &t->ignore_merges));
    CX_CHECK(jbool(L, model, "fuse_unk", false, "model", &t->fuse_unk));
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (dropout && !cJSON_IsNull(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0.0))
        return lfail(L, CATTR_ERR_UNSUPPORTED, "model.dropout", "BPE dropout is not supported");
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, affixes[k]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && v->valuestring[0] == '\0')) {
            char jp[64];
            snprintf(jp, sizeof jp, "model.%s", affixes[k]);
            return lfail(L, CATTR_ERR_UNSUPPORTED, jp, "a non-empty %s is not supported", affixes[k]);
        }
    }

    /* vocabulary */
    int n_vocab = cJSON_GetArraySize(vocab);
    if (!sm_init(&t->vocab, (size_t)n_vocab)) return lnomem(L);
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        int32_t id;
        if (!jid(it, &id))
            return lfail(L, CATTR_ERR_FORMAT, "model.vocab", "the id of token '%s' is not a non-negative integer", it->string);
        size_t len = strlen(it->string);
        memcpy(arena + *arena_pos, it->string, len + 1);
        sm_put(&t->vocab, arena + *arena_pos, len, id);
        *arena_pos += len + 1;
    }

    /* merges */
    int n_merges = cJSON_IsArray(merges) ? cJSON_GetArraySize(merges) : 0;
    if (!pm_init(&t->merges, (size_t)n_merges)) return lnomem(L);
    bbuf cat = {0};
    int rank = 0;
    cattr_status st = CATTR_OK;
    if (n_merges > 0) {
        cJSON_ArrayForEach(it, merges) {
            char jp[64]; /* the JSON path, formatted only for a message */
            const char *a = NULL, *b = NULL;
            size_t la = 0, lb = 0;
            if (cJSON_IsString(it)) {
                const char *s = it->valuestring;
                const char *sp = strchr(s, ' ');
                if (!sp || strchr(sp + 1, ' ')) {
                    st = lfail(L, CATTR_ERR_FORMAT, merge_path(jp, sizeof jp, rank), "merge '%s' is not two tokens separated by one space", s);
                    break;
                }
                a = s;
                la = (size_t)(sp - s);
                b = sp + 1;
                lb = strlen(b);
            } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
                       cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
                a = cJSON_GetArrayItem(it, 0)->valuestring;
                b = cJSON_GetArrayItem(it, 1)->valuestring;
                la = strlen(a);
                lb = strlen(b);
            } else {
                st = lfail(L, CATTR_ERR_FORMAT, merge_path(jp, sizeof jp, rank), "a merge must be \"a b\" or [\"a\", \"b\"]");
                break;
            }
            int64_t ia = sm_get(&t->vocab, a, la), ib = sm_get(&t->vocab, b, lb);
            cat.n = 0;
            if (!bb_add(&cat, a, la) || !bb_add(&cat, b, lb)) {
                st = lnomem(L);
                break;
            }
            int64_t im = sm_get(&t->vocab, cat.p, cat.n);
            if (ia < 0 || ib < 0 || im < 0) {
                st = lfail(L, CATTR_ERR_FORMAT, merge_path(jp, sizeof jp, rank), "token '%.*s' is not in the vocabulary",
                           (int)(ia < 0 ? la : ib < 0 ? lb : cat.n), ia < 0 ? a : ib < 0 ? b : cat.p);
                break;
            }
            pm_put(&t->merges, (int32_t)ia, (int32_t)ib, rank, (int32_t)im);
            rank++;
        }
    }
    free(cat.p);
    if (st != CATTR_OK) return st;

    /* unknown token: when absent from the vocabulary, unknown characters are dropped (tokenizers would fail on the
     * first one; this tokenizer is lenient) */
    t->unk_id = -1;
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    if (cJSON_IsString(unk)) {
        int64_t id = sm_get(&t->vocab, unk->valuestring, strlen(unk->valuestring));
        t->unk_id = (int32_t)id;
    }
    return CATTR_OK;
}

/* Sum of the lengths (+1) of every string the arena will hold. */
static size_t arena_size(const cJSON *root) {
    size_t total = 1;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *vocab = cJSON_IsObject(model) ? cJSON_GetObjectItemCaseSensitive(model, "vocab") : NULL;
    const cJSON *it;
    if (cJSON_IsObject(vocab)) cJSON_ArrayForEach(it, vocab) total += strlen(it->string) + 1;
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (cJSON_IsArray(added)) {
        cJSON_ArrayForEach(it, added) {
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "content");
            if (cJSON_IsString(c)) total += strlen(c->valuestring) + 1;
        }
    }
    return total;
}

static cattr_status parse_tokenizer_json(const lctx *L, const cJSON *root) {
    cx_tokenizer *t = L->t;
    if (!cJSON_IsObject(root)) return lfail(L, CATTR_ERR_FORMAT, "$", "the top level is not a JSON object");
    size_t asz = arena_size(root), apos = 0;
    t->arena = malloc(asz);
    if (!t->arena) return lnomem(L);

    CX_CHECK(parse_model(L, cJSON_GetObjectItemCaseSensitive(root, "model"), &apos, t->arena));

    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added))
        return lfail(L, CATTR_ERR_FORMAT, "added_tokens", "must be an array");
    int n_added = cJSON_IsArray(added) ? cJSON_GetArraySize(added) : 0;
    t->added = calloc((size_t)n_added + 1, sizeof *t->added);
    if (!t->added) return lnomem(L);
    if (n_added) CX_CHECK(parse_added(L, added, &apos, t->arena));

    CX_CHECK(parse_normalizer(L, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), "normalizer"));
    CX_CHECK(parse_pretokenizer(L, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), "pre_tokenizer"));
    CX_CHECK(parse_postprocessor(L, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), "post_processor"));
    CX_CHECK(parse_decoder(L, cJSON_GetObjectItemCaseSensitive(root, "decoder"), "decoder"));
    CX_CHECK(build_tries(L));

    /* id tables */
    int64_t max_id = -1;
    for (size_t i = 0; i < t->vocab.n; i++)
        if (t->vocab.e[i].id > max_id) max_id = t->vocab.e[i].id;
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].id > max_id) max_id = t->added[i].id;
    /* ids index a table: they may leave gaps, but not a table far larger than the tokens (a 40-byte file naming id
     * 2^31 - 2 would otherwise cost 16 GiB) */
    int64_t n_tokens = (int64_t)(t->vocab.n + t->n_added);
    if (max_id > 16 * n_tokens + 65536)
        return lfail(L, CATTR_ERR_FORMAT, "model.vocab", "token id %lld is far beyond the %lld tokens (ids must be "
                     "about as many as the tokens)", (long long)max_id, (long long)n_tokens);
    t->n_ids = max_id + 1;
    t->id_tok = calloc((size_t)t->n_ids + 1, sizeof *t->id_tok);
    t->id_flags = calloc((size_t)t->n_ids + 1, 1);
    if (!t->id_tok || !t->id_flags) return lnomem(L);
    for (size_t i = 0; i < t->vocab.n; i++) t->id_tok[t->vocab.e[i].id] = t->vocab.e[i].key;
    if (!sm_init(&t->added_map, t->n_added)) return lnomem(L);
    for (size_t i = 0; i < t->n_added; i++) {
        const added_token *a = &t->added[i];
        t->id_tok[a->id] = a->content;
        t->id_flags[a->id] = (unsigned char)(1 | (a->special ? 2 : 0));
        sm_put(&t->added_map, a->content, a->len, a->id);
    }

    /* byte-level initial symbols */
    byte_level_tables(t->bl_fwd, t->bl_inv);
    for (int b = 0; b < 256; b++) {
        char u[4];
        size_t k = utf8_put(t->bl_fwd[b], u);
        t->byte_id[b] = (int32_t)sm_get(&t->vocab, u, k);
    }
    return CATTR_OK;
}

/* Parses JSON text (`size` bytes); `path` names it in messages. */
static cattr_status parse_json(const char *data, size_t size, const char *path, cJSON **out) {
    *out = NULL;
    cJSON *root = cJSON_ParseWithLength(data, size);
    if (!root) {
        const char *ep = cJSON_GetErrorPtr();
        size_t off = (ep && ep >= data && ep <= data + size) ? (size_t)(ep - data) : 0;
        return cx_fail(CATTR_ERR_FORMAT, "'%s' is not valid JSON (error near byte %zu)", path, off);
    }
    *out = root;
    return CATTR_OK;
}

/* Reads and parses a JSON file. */
static cattr_status read_json(const char *path, cJSON **out) {
    *out = NULL;
    void *data = NULL;
    size_t size = 0;
    CX_CHECK(cx_read_file(path, &data, &size));
    cattr_status st = parse_json(data, size, path, out);
    free(data);
    return st;
}

/* bos_token / eos_token / pad_token of tokenizer_config.json: a string, {"content": ...}, or null. */
static int64_t config_token(const cx_tokenizer *t, const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (!cJSON_IsString(v)) return -1;
    return cx_tokenizer_token_to_id(t, v->valuestring);
}

static cattr_status parse_config(cx_tokenizer *t, const char *path) {
    cJSON *cfg = NULL;
    CX_CHECK(read_json(path, &cfg));
    lctx L = {path, t};
    cattr_status st = CATTR_OK;
    if (!cJSON_IsObject(cfg)) st = lfail(&L, CATTR_ERR_FORMAT, "$", "the top level is not a JSON object");
    if (st == CATTR_OK) st = jbool(&L, cfg, "add_bos_token", false, "add_bos_token", &t->cfg_add_bos);
    if (st == CATTR_OK) st = jbool(&L, cfg, "add_eos_token", false, "add_eos_token", &t->cfg_add_eos);
    if (st == CATTR_OK) {
        t->bos_id = config_token(t, cfg, "bos_token");
        t->eos_id = config_token(t, cfg, "eos_token");
        t->pad_id = config_token(t, cfg, "pad_token");
    }
    cJSON_Delete(cfg);
    return st;
}

static cx_tokenizer *tokenizer_new(void) {
    cx_tokenizer *t = calloc(1, sizeof *t);
    if (t) {
        t->bos_id = t->eos_id = t->pad_id = -1;
        t->unk_id = -1;
        trie_init(&t->raw_trie);
        trie_init(&t->norm_trie);
    }
    return t;
}

cattr_status cx_tokenizer_load_json(const char *json, size_t size, const char *what, cx_tokenizer **out) {
    if (out) *out = NULL;
    if (!json || !what || !out) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "no tokenizer text given");
    cx_tokenizer *t = tokenizer_new();
    if (!t) return cx_fail(CATTR_ERR_NO_MEMORY, "tokenizer '%s': out of memory", what);
    cJSON *root = NULL;
    cattr_status st = parse_json(json, size, what, &root);
    if (st == CATTR_OK) {
        lctx L = {what, t};
        st = parse_tokenizer_json(&L, root);
    }
    cJSON_Delete(root);
    if (st != CATTR_OK) {
        cx_tokenizer_free(t);
        return st;
    }
    *out = t;
    return CATTR_OK;
}

cattr_status cx_tokenizer_load(const char *dir_or_json_path, cx_tokenizer **out) {
    if (out) *out = NULL;
    if (!dir_or_json_path || !out) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "no tokenizer path given");
    const char *p = dir_or_json_path;
    struct stat sb;
    char *json_path = NULL, *cfg_path = NULL;
    size_t plen = strlen(p);
    if (stat(p, &sb) != 0) return cx_fail(CATTR_ERR_IO, "cannot open tokenizer '%s': %s", p, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        json_path = malloc(plen + 32);
        cfg_path = malloc(plen + 32);
        if (!json_path || !cfg_path) {
            free(json_path);
            free(cfg_path);
            return cx_fail(CATTR_ERR_NO_MEMORY, "tokenizer '%s': out of memory", p);
        }
        const char *sep = (plen && p[plen - 1] == '/') ? "" : "/";
        snprintf(json_path, plen + 32, "%s%stokenizer.json", p, sep);
        snprintf(cfg_path, plen + 32, "%s%stokenizer_config.json", p, sep);
        if (stat(cfg_path, &sb) != 0) {
            free(cfg_path);
            cfg_path = NULL;
        }
    } else {
        json_path = cx_strdup(p);
        if (!json_path) return cx_fail(CATTR_ERR_NO_MEMORY, "tokenizer '%s': out of memory", p);
    }

    cx_tokenizer *t = tokenizer_new();
    cJSON *root = NULL;
    cattr_status st = t ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "tokenizer '%s': out of memory", p);
    if (st == CATTR_OK) st = read_json(json_path, &root);
    if (st == CATTR_OK) {
        lctx L = {json_path, t};
        st = parse_tokenizer_json(&L, root);
    }
    cJSON_Delete(root);
    if (st == CATTR_OK && cfg_path) st = parse_config(t, cfg_path);
    free(json_path);
    free(cfg_path);
    if (st != CATTR_OK) {
        cx_tokenizer_free(t);
        return st;
    }
    *out = t;
    return CATTR_OK;
}

/* ==== encoding =============================================================================================== */

typedef struct {
    int32_t id, prev, next;
    bool alive;
} bpe_sym;

typedef struct {
    int32_t rank, pos, left, right, merged;
} bpe_cand;

typedef struct {
    const cx_tokenizer *t;
    pcre2_match_data *md;
    ivec out;
    bbuf tmp; /* ByteLevel prefix space / ignore_merges key */
    bpe_sym *sym;
    bpe_cand *heap;
    size_t sym_cap, heap_cap, heap_n;
} enc_ctx;

static inline bool cand_less(const bpe_cand *a, const bpe_cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}
static void heap_push(enc_ctx *c, bpe_cand x) {
    size_t i = c->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&x, &c->heap[p])) break;
        c->heap[i] = c->heap[p];
        i = p;
    }
    c->heap[i] = x;
}
static bpe_cand heap_pop(enc_ctx *c) {
    bpe_cand top = c->heap[0];
    bpe_cand x = c->heap[--c->heap_n];
    size_t i = 0, n = c->heap_n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= n) break;
        size_t m = (l + 1 < n && cand_less(&c->heap[l + 1], &c->heap[l])) ? l + 1 : l;
        if (!cand_less(&c->heap[m], &x)) break;
        c->heap[i] = c->heap[m];
        i = m;
    }
    if (n) c->heap[i] = x;
    return top;
}

static void push_pair(enc_ctx *c, int32_t pos) {
    const bpe_sym *s = c->sym;
    int32_t nx = s[pos].next;
    if (nx < 0) return;
    int32_t merged;
    int32_t rank = pm_get(&c->t->merges, s[pos].id, s[nx].id, &merged);
    if (rank >= 0) heap_push(c, (bpe_cand){rank, pos, s[pos].id, s[nx].id, merged});
}

static cattr_status enc_nomem(void) { return cx_fail(CATTR_ERR_NO_MEMORY, "tokenizer encode: out of memory"); }

/* BPE-encodes one pre-token s[0..n) (raw bytes; mapped through the byte-level table when the tokenizer has a
 * ByteLevel pre-tokenizer) and appends its ids. */
static cattr_status bpe_word(enc_ctx *c, const unsigned char *s, size_t n) {
    const cx_tokenizer *t = c->t;
    if (n == 0) return CATTR_OK;
    if (t->ignore_merges) {
        const char *key = (const char *)s;
        size_t kn = n;
        if (t->byte_level) {
            c->tmp.n = 0;
            for (size_t i = 0; i < n; i++) {
                char u[4];
                size_t k = utf8_put(t->bl_fwd[s[i]], u);
                if (!bb_add(&c->tmp, u, k)) return enc_nomem();
            }
            key = c->tmp.p;
            kn = c->tmp.n;
        }
        int64_t id = sm_get(&t->vocab, key, kn);
        if (id >= 0) return iv_push(&c->out, id) ? CATTR_OK : enc_nomem();
    }
    if (n > (size_t)INT32_MAX / 4)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "tokenizer encode: a single pre-token of %zu bytes is too long", n);
    if (n > c->sym_cap) {
        size_t cap = n < 64 ? 64 : n;
        bpe_sym *ns = realloc(c->sym, cap * sizeof *ns);
        if (!ns) return enc_nomem();
        c->sym = ns;
        c->sym_cap = cap;
        bpe_cand *nh = realloc(c->heap, 3 * cap * sizeof *nh);
        if (!nh) return enc_nomem();
        c->heap = nh;
        c->heap_cap = 3 * cap;
    }
    /* initial symbols: one per byte-level character (byte) or per Unicode character */
    int32_t m = 0;
    bool pending_unk = false;
    for (size_t i = 0; i < n;) {
        int64_t id;
        size_t k = 1;
        if (t->byte_level) {
            id = t->byte_id[s[i]];
        } else {
            k = utf8_len_at(s + i, n - i);
            id = sm_get(&t->vocab, (const char *)s + i, k);
        }
        i += k;
        if (id < 0) {
            if (t->unk_id < 0) continue; /* no unknown token: the character is dropped, as tokenizers does */
            if (pending_unk && t->fuse_unk) continue;
            id = t->unk_id;
            pending_unk = true;
        } else {
            pending_unk = false;
        }
        c->sym[m] = (bpe_sym){(int32_t)id, m - 1, m + 1, true};
        m++;
    }
    if (m == 0) return CATTR_OK;
    c->sym[m - 1].next = -1;
    c->heap_n = 0;
    for (int32_t i = 0; i + 1 < m; i++) push_pair(c, i);
    while (c->heap_n) {
        bpe_cand top = heap_pop(c);
        bpe_sym *a = &c->sym[top.pos];
        if (!a->alive || a->next < 0 || a->id != top.left) continue;
        bpe_sym *b = &c->sym[a->next];
        if (b->id != top.right) continue;
        a->id = top.merged;
        b->alive = false;
        a->next = b->next;
        if (b->next >= 0) c->sym[b->next].prev = top.pos;
        if (a->prev >= 0) push_pair(c, a->prev);
        push_pair(c, top.pos);
    }
    for (int32_t i = 0; i >= 0; i = c->sym[i].next)
        if (!iv_push(&c->out, c->sym[i].id)) return enc_nomem();
    return CATTR_OK;
}

/* One regex match at or after `off`: returns 1 (and sets *ms, *me), 0 (no match) or a failure status via *st. */
static int regex_find(enc_ctx *c, const pcre2_code *re, const char *s, size_t n, size_t off, size_t *ms, size_t *me,
                      cattr_status *st) {
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, c->md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, c->md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        *st = rc == PCRE2_ERROR_NOMEMORY ? enc_nomem()
                                          : cx_fail(CATTR_ERR_UNSUPPORTED,
                                                    "tokenizer encode: the pre-tokenizer regex failed on a %zu-byte "
                                                    "piece of text: %s", n, (const char *)msg);
        return -1;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
    *ms = ov[0];
    *me = ov[1] < ov[0] ? ov[0] : ov[1];
    return 1;
}

static cattr_status pretok(enc_ctx *c, int step, const char *s, size_t n);

/* Splits s[0..n) with `re` (onig find_iter semantics) and passes the pieces on: matches flagged true. With
 * bpe_direct the pieces go to BPE, else to pre-tokenizer step `next`. */
static cattr_status split_with(enc_ctx *c, const pcre2_code *re, bool removed, bool invert, int next, bool bpe_direct,
                               const char *s, size_t n) {
    size_t off = 0, prev = 0, last_end = SIZE_MAX;
    cattr_status st = CATTR_OK;
    while (off <= n) {
        size_t ms, me;
        int r = regex_find(c, re, s, n, off, &ms, &me, &st);
        if (r < 0) return st;
        if (r == 0) break;
        if (ms == me && ms == last_end) { /* empty match right after the previous one: step over one character */
            if (ms >= n) break;
            off = ms + utf8_len_at((const unsigned char *)s + ms, n - ms);
            continue;
        }
        for (int part = 0; part < 2; part++) {
            size_t a = part == 0 ? prev : ms, b = part == 0 ? ms : me;
            bool is_match = (part == 1) != invert;
            if (a >= b || (removed && is_match)) continue;
            st = bpe_direct ? bpe_word(c, (const unsigned char *)s + a, b - a) : pretok(c, next, s + a, b - a);
            if (st != CATTR_OK) return st;
        }
        prev = me;
        last_end = me;
        off = me;
    }
    if (prev < n && !(removed && invert)) {
        st = bpe_direct ? bpe_word(c, (const unsigned char *)s + prev, n - prev) : pretok(c, next, s + prev, n - prev);
    }
    return st;
}

/* Runs pre-tokenizer step `step` (and the following ones) on s[0..n), then BPE. */
static cattr_status pretok(enc_ctx *c, int step, const char *s, size_t n) {
    const cx_tokenizer *t = c->t;
    if (n == 0) return CATTR_OK;
    if (step >= t->n_steps) return bpe_word(c, (const unsigned char *)s, n);
    const pt_step *ps = &t->steps[step];
    if (ps->kind == STEP_SPLIT) return split_with(c, ps->re, ps->removed, ps->invert, step + 1, false, s, n);
    /* ByteLevel (always the last step) */
    char *copy = NULL;
    if (ps->prefix_space && s[0] != ' ') {
        copy = malloc(n + 1);
        if (!copy) return enc_nomem();
        copy[0] = ' ';
        memcpy(copy + 1, s, n);
        s = copy;
        n++;
    }
    cattr_status st = ps->re ? split_with(c, ps->re, false, false, 0, true, s, n) : bpe_word(c, (const unsigned char *)s, n);
    free(copy);
    return st;
}

static cattr_status normalized_piece(enc_ctx *c, const char *s, size_t n);

/* Cuts the added tokens of `tr` out of s[0..n) (tokenizers' AddedVocabulary::find_matches) and passes the rest on:
 * to normalization (raw stage) or to the pre-tokenizer (normalized stage). */
static cattr_status split_added(enc_ctx *c, const trie *tr, bool raw_stage, const char *s, size_t n) {
    const cx_tokenizer *t = c->t;
    const unsigned char *u = (const unsigned char *)s;
    size_t start_offset = 0, from = 0, ms, me;
    int32_t k;
    cattr_status st = CATTR_OK;
    while (tr->any && (k = trie_find(tr, u, n, from, &ms, &me)) >= 0) {
        const added_token *a = &t->added[k];
        from = me;
        size_t start = ms, stop = me;
        if (a->single_word) {
            bool start_ok = true, stop_ok = true;
            if (start > 0) {
                size_t p = start - 1;
                while (p > 0 && (u[p] & 0xC0) == 0x80) p--;
                uint32_t cp;
                start_ok = !(utf8_seq(u + p, n - p, &cp) && is_word_char(cp));
            }
            if (stop < n) {
                uint32_t cp;
                stop_ok = !(utf8_seq(u + stop, n - stop, &cp) && is_word_char(cp));
            }
            if (!start_ok || !stop_ok) continue;
        }
        if (a->lstrip) { /* extend over the whitespace before the token, not into the previous match */
            size_t p = start;
            while (p > start_offset) {
                size_t q = p - 1;
                while (q > 0 && (u[q] & 0xC0) == 0x80) q--;
                uint32_t cp;
                if (!utf8_seq(u + q, n - q, &cp) || !is_white_space(cp)) break;
                p = q;
            }
            start = p;
        }
        if (a->rstrip) {
            uint32_t cp;
            int len;
            while (stop < n && (len = utf8_seq(u + stop, n - stop, &cp)) > 0 && is_white_space(cp)) stop += (size_t)len;
            if (stop > from) from = stop;
        }
        if (start_offset < start) {
            st = raw_stage ? normalized_piece(c, s + start_offset, start - start_offset)
                           : pretok(c, 0, s + start_offset, start - start_offset);
            if (st != CATTR_OK) return st;
        }
        if (!iv_push(&c->out, a->id)) return enc_nomem();
        start_offset = stop;
    }
    if (start_offset < n)
        st = raw_stage ? normalized_piece(c, s + start_offset, n - start_offset) : pretok(c, 0, s + start_offset, n - start_offset);
    return st;
}

/* Normalizes a piece of raw text, then cuts out the normalized added tokens and pre-tokenizes the rest. */
static cattr_status normalized_piece(enc_ctx *c, const char *s, size_t n) {
    const char *ns;
    size_t nn;
    bool owned;
    if (!normalize(c->t, s, n, &ns, &nn, &owned)) return enc_nomem();
    cattr_status st = c->t->norm_trie.any ? split_added(c, &c->t->norm_trie, false, ns, nn) : pretok(c, 0, ns, nn);
    if (owned) free((void *)ns);
    return st;
}

cattr_status cx_tokenizer_encode(const cx_tokenizer *t, const char *text, size_t len, bool add_special, int64_t **ids,
                                 int64_t *n) {
    if (ids) *ids = NULL;
    if (n) *n = 0;
    if (!t || !ids || !n || (!text && len))
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "tokenizer: no text to encode");
    if (!text) text = "";
    size_t bad = utf8_invalid_at((const unsigned char *)text, len);
    if (bad != len)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "the text is not valid UTF-8 (byte %zu of %zu)",
                       bad, len);
    enc_ctx c = {.t = t};
    cattr_status st = CATTR_OK;
    c.md = pcre2_match_data_create(1, NULL);
    if (!c.md) st = enc_nomem();
    bool tpl = add_special && t->has_template;
    bool cfg_bos = add_special && !t->has_template && t->cfg_add_bos && t->bos_id >= 0;
    bool cfg_eos = add_special && !t->has_template && t->cfg_add_eos && t->eos_id >= 0;
    if (st == CATTR_OK && tpl)
        for (size_t i = 0; i < t->tpl_pre.n && st == CATTR_OK; i++)
            if (!iv_push(&c.out, t->tpl_pre.p[i])) st = enc_nomem();
    if (st == CATTR_OK && cfg_bos && !iv_push(&c.out, t->bos_id)) st = enc_nomem();
    if (st == CATTR_OK && len) st = split_added(&c, &t->raw_trie, true, text, len);
    if (st == CATTR_OK && tpl)
        for (size_t i = 0; i < t->tpl_post.n && st == CATTR_OK; i++)
            if (!iv_push(&c.out, t->tpl_post.p[i])) st = enc_nomem();
    if (st == CATTR_OK && cfg_eos && !iv_push(&c.out, t->eos_id)) st = enc_nomem();
    if (st == CATTR_OK && !c.out.p) {
        c.out.p = malloc(sizeof(int64_t));
        if (!c.out.p) st = enc_nomem();
    }
    pcre2_match_data_free(c.md);
    free(c.tmp.p);
    free(c.sym);
    free(c.heap);
    if (st != CATTR_OK) {
        free(c.out.p);
        return st;
    }
    *ids = c.out.p;
    *n = (int64_t)c.out.n;
    return CATTR_OK;
}

/* ==== decoding and look-ups =================================================================================== */

cattr_status cx_tokenizer_decode(const cx_tokenizer *t, const int64_t *ids, int64_t n, bool skip_special, char **text) {
    if (text) *text = NULL;
    if (!t || !text || n < 0 || (!ids && n > 0))
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "tokenizer: no ids to decode, or a negative count");
    bbuf raw = {0}, out = {0};
    bool ok = bb_add(&raw, "", 0);
    bool first = true;
    for (int64_t i = 0; i < n && ok; i++) {
        int64_t id = ids[i];
        if (id < 0 || id >= t->n_ids || !t->id_tok[id]) continue;
        if (skip_special && (t->id_flags[id] & 2)) continue;
        const char *tok = t->id_tok[id];
        size_t tl = strlen(tok);
        if (t->decoder == DEC_NONE) { /* no decoder: tokens joined by spaces */
            ok = (first || bb_add(&raw, " ", 1)) && bb_add(&raw, tok, tl);
            first = false;
            continue;
        }
        /* ByteLevel: every character back to its byte; a token with a character outside the table is kept as is */
        size_t mark = raw.n;
        const unsigned char *u = (const unsigned char *)tok;
        bool mapped = true;
        for (size_t j = 0; j < tl && ok;) {
            uint32_t cp;
            int k = utf8_seq(u + j, tl - j, &cp);
            if (!k || cp >= 324 || t->bl_inv[cp] < 0) {
                mapped = false;
                break;
            }
            unsigned char byte = (unsigned char)t->bl_inv[cp];
            ok = bb_add(&raw, &byte, 1);
            j += (size_t)k;
        }
        if (ok && !mapped) {
            raw.n = mark;
            ok = bb_add(&raw, tok, tl);
        }
    }
    ok = ok && bb_add(&out, "", 0) && append_lossy(&out, (const unsigned char *)raw.p, raw.n);
    free(raw.p);
    if (!ok) {
        free(out.p);
        return cx_fail(CATTR_ERR_NO_MEMORY, "tokenizer: out of memory decoding %lld ids", (long long)n);
    }
    *text = out.p;
    return CATTR_OK;
}

const char *cx_tokenizer_id_to_token(const cx_tokenizer *t, int64_t id) {
    if (!t || id < 0 || id >= t->n_ids) return NULL;
    return t->id_tok[id];
}

int64_t cx_tokenizer_token_to_id(const cx_tokenizer *t, const char *tok) {
    if (!t || !tok) return -1;
    size_t n = strlen(tok);
    int64_t id = sm_get(&t->added_map, tok, n);
    return id >= 0 ? id : sm_get(&t->vocab, tok, n);
}

int64_t cx_tokenizer_vocab_size(const cx_tokenizer *t) { return t ? t->n_ids : 0; }

int64_t cx_tokenizer_special_id(const cx_tokenizer *t, const char *which) {
    if (!t || !which) return -1;
    if (strcmp(which, "bos") == 0) return t->bos_id;
    if (strcmp(which, "eos") == 0) return t->eos_id;
    if (strcmp(which, "pad") == 0) return t->pad_id;
    return -1;
}

bool cx_tokenizer_is_special(const cx_tokenizer *t, int64_t id) {
    return t && id >= 0 && id < t->n_ids && (t->id_flags[id] & 2);
}
