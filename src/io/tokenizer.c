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
#include "io/tokenizer_internal.h"

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


/* ==== small growable buffers ================================================================================ */


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
bool cx_tk_bb_add(bbuf *b, const void *s, size_t n) {
    if (!bb_reserve(b, n)) return false;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return true;
}
bool cx_tk_bb_str(bbuf *b, const char *s) { return cx_tk_bb_add(b, s, strlen(s)); }


bool cx_tk_iv_push(ivec *v, int64_t x) {
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
size_t cx_tk_utf8_invalid_at(const unsigned char *s, size_t n) {
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
size_t cx_tk_utf8_len_at(const unsigned char *s, size_t n) {
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
        if (i > start && !cx_tk_bb_add(b, s + start, i - start)) return false;
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
        if (!cx_tk_bb_add(b, fffd, 3)) return false;
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
void cx_tk_byte_level_tables(uint32_t fwd[256], int16_t inv[324]) {
    for (int i = 0; i < 324; i++) inv[i] = -1;
    int next = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        fwd[b] = printable ? (uint32_t)b : (uint32_t)(256 + next++);
        inv[fwd[b]] = (int16_t)b;
    }
}

size_t cx_tk_utf8_put(uint32_t cp, char *out) {
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

bool cx_tk_sm_init(strmap *m, size_t expected) {
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
int64_t cx_tk_sm_get(const strmap *m, const char *key, size_t len) {
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
void cx_tk_sm_put(strmap *m, const char *key, size_t len, int32_t id) {
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

bool cx_tk_pm_init(pairmap *m, size_t expected) {
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
void cx_tk_pm_put(pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t merged) {
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


void cx_tk_trie_init(trie *tr) {
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
bool cx_tk_trie_add(trie *tr, const unsigned char *s, size_t n, int32_t tok) {
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
                size_t k = cx_tk_utf8_put(t->bl_fwd[s[i]], u);
                if (!cx_tk_bb_add(&c->tmp, u, k)) return enc_nomem();
            }
            key = c->tmp.p;
            kn = c->tmp.n;
        }
        int64_t id = cx_tk_sm_get(&t->vocab, key, kn);
        if (id >= 0) return cx_tk_iv_push(&c->out, id) ? CATTR_OK : enc_nomem();
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
            k = cx_tk_utf8_len_at(s + i, n - i);
            id = cx_tk_sm_get(&t->vocab, (const char *)s + i, k);
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
        if (!cx_tk_iv_push(&c->out, c->sym[i].id)) return enc_nomem();
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
            off = ms + cx_tk_utf8_len_at((const unsigned char *)s + ms, n - ms);
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
        if (!cx_tk_iv_push(&c->out, a->id)) return enc_nomem();
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
    if (!cx_tk_normalize(c->t, s, n, &ns, &nn, &owned)) return enc_nomem();
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
    size_t bad = cx_tk_utf8_invalid_at((const unsigned char *)text, len);
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
            if (!cx_tk_iv_push(&c.out, t->tpl_pre.p[i])) st = enc_nomem();
    if (st == CATTR_OK && cfg_bos && !cx_tk_iv_push(&c.out, t->bos_id)) st = enc_nomem();
    if (st == CATTR_OK && len) st = split_added(&c, &t->raw_trie, true, text, len);
    if (st == CATTR_OK && tpl)
        for (size_t i = 0; i < t->tpl_post.n && st == CATTR_OK; i++)
            if (!cx_tk_iv_push(&c.out, t->tpl_post.p[i])) st = enc_nomem();
    if (st == CATTR_OK && cfg_eos && !cx_tk_iv_push(&c.out, t->eos_id)) st = enc_nomem();
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
    bool ok = cx_tk_bb_add(&raw, "", 0);
    bool first = true;
    for (int64_t i = 0; i < n && ok; i++) {
        int64_t id = ids[i];
        if (id < 0 || id >= t->n_ids || !t->id_tok[id]) continue;
        if (skip_special && (t->id_flags[id] & 2)) continue;
        const char *tok = t->id_tok[id];
        size_t tl = strlen(tok);
        if (t->decoder == DEC_NONE) { /* no decoder: tokens joined by spaces */
            ok = (first || cx_tk_bb_add(&raw, " ", 1)) && cx_tk_bb_add(&raw, tok, tl);
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
            ok = cx_tk_bb_add(&raw, &byte, 1);
            j += (size_t)k;
        }
        if (ok && !mapped) {
            raw.n = mark;
            ok = cx_tk_bb_add(&raw, tok, tl);
        }
    }
    ok = ok && cx_tk_bb_add(&out, "", 0) && append_lossy(&out, (const unsigned char *)raw.p, raw.n);
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
    int64_t id = cx_tk_sm_get(&t->added_map, tok, n);
    return id >= 0 ? id : cx_tk_sm_get(&t->vocab, tok, n);
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

