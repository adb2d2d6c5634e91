/* tokenizer_load.c - loading a Hugging Face tokenizer.json (and tokenizer_config.json): the normalizers, the
 * pre-tokenizers (their Oniguruma regexes translated to PCRE2, see tokenizer.c's file comment), the BPE model, the
 * added tokens, the post-processor and the decoder, each checked and refused by its JSON path when not supported. */
#include "io/tokenizer_internal.h"

#include "io/fileutil.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>

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
                ok = cx_tk_bb_str(out, rep);
                i += 2;
                continue;
            }
            if (d == 'u' && i + 5 < n && is_hex(src[i + 2]) && is_hex(src[i + 3]) && is_hex(src[i + 4]) &&
                is_hex(src[i + 5])) {
                ok = cx_tk_bb_str(out, "\\x{") && cx_tk_bb_add(out, src + i + 2, 4) && cx_tk_bb_str(out, "}");
                i += 6;
                continue;
            }
            if (strchr("pPxogkN", d) && i + 2 < n && src[i + 2] == '{') {
                const char *close = strchr(src + i + 2, '}');
                size_t end = close ? (size_t)(close - src) + 1 : n;
                ok = cx_tk_bb_add(out, src + i, end - i);
                i = end;
                continue;
            }
            size_t clen = cx_tk_utf8_len_at((const unsigned char *)src + i + 1, n - i - 1);
            ok = cx_tk_bb_add(out, src + i, 1 + clen);
            i += 1 + clen;
            continue;
        }
        if (c == '[') {
            if (in_class) {
                if (i + 1 < n && src[i + 1] == ':') {
                    const char *close = strstr(src + i + 2, ":]");
                    size_t end = close ? (size_t)(close - src) + 2 : n;
                    ok = cx_tk_bb_add(out, src + i, end - i);
                    i = end;
                    continue;
                }
                return lfail(L, CATTR_ERR_UNSUPPORTED, jpath, "regex: nested character classes are not supported");
            }
            in_class = true;
            ok = cx_tk_bb_add(out, "[", 1);
            i++;
            if (i < n && src[i] == '^') {
                ok = ok && cx_tk_bb_add(out, "^", 1);
                i++;
            }
            if (i < n && src[i] == ']') { /* a leading ']' is literal */
                ok = ok && cx_tk_bb_add(out, "\\]", 2);
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
                ok = cx_tk_bb_str(out, "{0");
                i++;
                continue;
            }
        }
        ok = cx_tk_bb_add(out, src + i, 1);
        i++;
    }
    if (!ok) return lnomem(L);
    if (!out->p && !cx_tk_bb_add(out, "", 0)) return lnomem(L);
    return CATTR_OK;
}

/* Compiles an Oniguruma-syntax pattern (literal when `literal`) for matching with PCRE2. */
static cattr_status compile_regex(const lctx *L, const char *jpath, const char *pattern, bool literal, pcre2_code **out) {
    *out = NULL;
    bbuf pat = {0};
    if (literal) {
        if (!cx_tk_bb_str(&pat, pattern)) return lnomem(L);
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
        if (!cx_tk_iv_push(&pre, cid) || !cx_tk_iv_push(&post, sid)) st = lnomem(L);
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
                    if (!cx_tk_iv_push(seen_a ? &post : &pre, id)) {
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
            if (!cx_tk_iv_push(&pre, t->tpl_pre.p[i])) st = lnomem(L);
        for (size_t i = 0; i < post.n && st == CATTR_OK; i++)
            if (!cx_tk_iv_push(&t->tpl_post, post.p[i])) st = lnomem(L);
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
bool cx_tk_normalize(const cx_tokenizer *t, const char *s, size_t n, const char **out, size_t *out_n, bool *owned) {
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
        if (cx_tk_utf8_invalid_at((const unsigned char *)content->valuestring, len) != len)
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
    cx_tk_trie_init(&t->raw_trie);
    cx_tk_trie_init(&t->norm_trie);
    for (size_t i = 0; i < t->n_added; i++) {
        const added_token *a = &t->added[i];
        if (!a->normalized) {
            if (!cx_tk_trie_add(&t->raw_trie, (const unsigned char *)a->content, a->len, (int32_t)i)) return lnomem(L);
            continue;
        }
        const char *s;
        size_t n;
        bool owned;
        if (!cx_tk_normalize(t, a->content, a->len, &s, &n, &owned)) return lnomem(L);
        bool ok = n == 0 || cx_tk_trie_add(&t->norm_trie, (const unsigned char *)s, n, (int32_t)i);
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
    if (!cx_tk_sm_init(&t->vocab, (size_t)n_vocab)) return lnomem(L);
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        int32_t id;
        if (!jid(it, &id))
            return lfail(L, CATTR_ERR_FORMAT, "model.vocab", "the id of token '%s' is not a non-negative integer", it->string);
        size_t len = strlen(it->string);
        memcpy(arena + *arena_pos, it->string, len + 1);
        cx_tk_sm_put(&t->vocab, arena + *arena_pos, len, id);
        *arena_pos += len + 1;
    }

    /* merges */
    int n_merges = cJSON_IsArray(merges) ? cJSON_GetArraySize(merges) : 0;
    if (!cx_tk_pm_init(&t->merges, (size_t)n_merges)) return lnomem(L);
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
            int64_t ia = cx_tk_sm_get(&t->vocab, a, la), ib = cx_tk_sm_get(&t->vocab, b, lb);
            cat.n = 0;
            if (!cx_tk_bb_add(&cat, a, la) || !cx_tk_bb_add(&cat, b, lb)) {
                st = lnomem(L);
                break;
            }
            int64_t im = cx_tk_sm_get(&t->vocab, cat.p, cat.n);
            if (ia < 0 || ib < 0 || im < 0) {
                st = lfail(L, CATTR_ERR_FORMAT, merge_path(jp, sizeof jp, rank), "token '%.*s' is not in the vocabulary",
                           (int)(ia < 0 ? la : ib < 0 ? lb : cat.n), ia < 0 ? a : ib < 0 ? b : cat.p);
                break;
            }
            cx_tk_pm_put(&t->merges, (int32_t)ia, (int32_t)ib, rank, (int32_t)im);
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
        int64_t id = cx_tk_sm_get(&t->vocab, unk->valuestring, strlen(unk->valuestring));
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
    if (!cx_tk_sm_init(&t->added_map, t->n_added)) return lnomem(L);
    for (size_t i = 0; i < t->n_added; i++) {
        const added_token *a = &t->added[i];
        t->id_tok[a->id] = a->content;
        t->id_flags[a->id] = (unsigned char)(1 | (a->special ? 2 : 0));
        cx_tk_sm_put(&t->added_map, a->content, a->len, a->id);
    }

    /* byte-level initial symbols */
    cx_tk_byte_level_tables(t->bl_fwd, t->bl_inv);
    for (int b = 0; b < 256; b++) {
        char u[4];
        size_t k = cx_tk_utf8_put(t->bl_fwd[b], u);
        t->byte_id[b] = (int32_t)cx_tk_sm_get(&t->vocab, u, k);
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
        cx_tk_trie_init(&t->raw_trie);
        cx_tk_trie_init(&t->norm_trie);
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
