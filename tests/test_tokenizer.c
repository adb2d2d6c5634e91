/* test_tokenizer.c - tests of the tokenizer.json tokenizer (src/io/tokenizer.c):
 *  - the Qwen3 golden (${CATTR_GOLDEN:-../shared/golden}/tokenizer/qwen3_cases.jsonl with the tokenizer of
 *    ../llm/qwen3-tiny): for every case encode(text) == ids, the token strings == tokens, decode(ids) == decoded;
 *    plus look-ups, special ids, skip_special, partial UTF-8 decoding, `\s` semantics on real text and the speed of
 *    encoding 1 MB;
 *  - small tokenizer.json files written at test time (merge ranks, added tokens with lstrip/rstrip/single_word,
 *    templates, tokenizer_config.json, Split behaviours, `\s` = Unicode White_Space, literal patterns);
 *  - error paths (missing file, non-JSON, unsupported components named by JSON path, bad merges, bad config).
 * Runs with cwd = repo root. Prints every failure and a summary; exits 1 on any failure, 77 (skip) if the golden data
 * is absent and everything else passed, 0 otherwise. */
#define _XOPEN_SOURCE 700
#include "core/core.h"
#include "io/tokenizer.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

static char g_dir[64];

static void check_status(int line, cattr_status got, cattr_status want, const char *needle, const char *what) {
    if (got != want) {
        g_failures++;
        printf("FAIL %s:%d: %s: got %s, want %s; message: %s\n", __FILE__, line, what, cattr_status_string(got),
               cattr_status_string(want), cattr_last_error());
    } else if (got != CATTR_OK && needle && !strstr(cattr_last_error(), needle)) {
        g_failures++;
        printf("FAIL %s:%d: %s: message '%s' does not mention '%s'\n", __FILE__, line, what, cattr_last_error(), needle);
    }
}
#define CHECK_STATUS(st, want, needle, what) check_status(__LINE__, (st), (want), (needle), (what))

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f || fputs(text, f) < 0) {
        printf("FAIL: cannot write test file %s\n", path);
        g_failures++;
    }
    if (f) fclose(f);
}

static void print_ids(const int64_t *ids, int64_t n) {
    printf("[");
    for (int64_t i = 0; i < n; i++) printf("%s%lld", i ? ", " : "", (long long)ids[i]);
    printf("]");
}

static bool ids_eq(const int64_t *a, int64_t na, const int64_t *b, int64_t nb) {
    if (na != nb) return false;
    for (int64_t i = 0; i < na; i++)
        if (a[i] != b[i]) return false;
    return true;
}

/* Encodes `text` and compares with the expected ids (terminated by -1). */
static void expect_encode(int line, const cx_tokenizer *t, const char *text, bool add_special, const int64_t *want) {
    int64_t nw = 0;
    while (want[nw] >= 0) nw++;
    int64_t *ids = NULL, n = 0;
    cattr_status st = cx_tokenizer_encode(t, text, strlen(text), add_special, &ids, &n);
    if (st != CATTR_OK) {
        g_failures++;
        printf("FAIL %s:%d: encode '%s': %s\n", __FILE__, line, text, cattr_last_error());
        return;
    }
    if (!ids_eq(ids, n, want, nw)) {
        g_failures++;
        printf("FAIL %s:%d: encode '%s' (add_special %d): expected ", __FILE__, line, text, add_special);
        print_ids(want, nw);
        printf(" got ");
        print_ids(ids, n);
        printf("\n");
    }
    free(ids);
}
#define EXPECT_ENCODE(t, text, add, ...)                                                                               \
    do {                                                                                                               \
        const int64_t want_[] = {__VA_ARGS__, -1};                                                                     \
        expect_encode(__LINE__, (t), (text), (add), want_);                                                            \
    } while (0)

static void expect_decode(int line, const cx_tokenizer *t, const int64_t *ids, int64_t n, bool skip, const char *want) {
    char *s = NULL;
    cattr_status st = cx_tokenizer_decode(t, ids, n, skip, &s);
    if (st != CATTR_OK) {
        g_failures++;
        printf("FAIL %s:%d: decode: %s\n", __FILE__, line, cattr_last_error());
        return;
    }
    if (strcmp(s, want) != 0) {
        g_failures++;
        printf("FAIL %s:%d: decode (skip_special %d): expected '%s' got '%s'\n", __FILE__, line, skip, want, s);
    }
    free(s);
}
#define EXPECT_DECODE(t, skip, want, ...)                                                                              \
    do {                                                                                                               \
        const int64_t ids_[] = {__VA_ARGS__};                                                                          \
        expect_decode(__LINE__, (t), ids_, (int64_t)CX_ARRAY_LEN(ids_), (skip), (want));                               \
    } while (0)

/* ---- synthetic tokenizer.json files ---------------------------------------------------------------------------- */

/* GPT-2's byte -> code point table (the test's own copy). */
static unsigned byte_cp(int b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return (unsigned)b;
    int n = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) n++;
    return 256u + (unsigned)n;
}

/* Writes a tokenizer.json whose vocabulary maps the byte-level character of byte b to id b (so the id of 'a' is
 * 97), then `extra` tokens (comma-separated JSON members, e.g. "\"ab\": 256") and the given components (JSON text).
 */
static void write_tokenizer(const char *path, const char *model_type, const char *extra, const char *merges,
                            const char *added, const char *normalizer, const char *pre, const char *post,
                            const char *decoder) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        printf("FAIL: cannot write %s\n", path);
        g_failures++;
        return;
    }
    fprintf(f, "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": %s,\n", added);
    fprintf(f, "\"normalizer\": %s, \"pre_tokenizer\": %s, \"post_processor\": %s, \"decoder\": %s,\n", normalizer,
            pre, post, decoder);
    fprintf(f, "\"model\": {\"type\": \"%s\", \"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": \"\", "
               "\"end_of_word_suffix\": \"\", \"fuse_unk\": false, \"byte_fallback\": false, \"ignore_merges\": false,\n"
               "\"vocab\": {",
            model_type);
    for (int b = 0; b < 256; b++) {
        unsigned cp = byte_cp(b);
        char u[4];
        int k;
        if (cp < 0x80) {
            u[0] = (char)cp;
            k = 1;
        } else {
            u[0] = (char)(0xC0 | (cp >> 6));
            u[1] = (char)(0x80 | (cp & 0x3F));
            k = 2;
        }
        fprintf(f, "%s\"%s%.*s\": %d", b ? ", " : "", (cp == '"' || cp == '\\') ? "\\" : "", k, u, b);
    }
    if (extra && *extra) fprintf(f, ", %s", extra);
    fprintf(f, "},\n\"merges\": %s}}\n", merges);
    fclose(f);
}

#define BL_PRE "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false, \"use_regex\": true}"
#define BL_PRE_NOREGEX "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false, \"use_regex\": false}"
#define BL_DEC "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false, \"use_regex\": false}"
#define SPLIT_SEQ(split) "{\"type\": \"Sequence\", \"pretokenizers\": [" split ", " BL_PRE_NOREGEX "]}"

static cx_tokenizer *load_ok(int line, const char *path) {
    cx_tokenizer *t = NULL;
    cattr_status st = cx_tokenizer_load(path, &t);
    if (st != CATTR_OK) {
        g_failures++;
        printf("FAIL %s:%d: loading %s: %s\n", __FILE__, line, path, cattr_last_error());
        return NULL;
    }
    return t;
}

static void test_synthetic_bpe(void) {
    const char *added =
        "[{\"id\": 300, \"content\": \"<s>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
        "\"normalized\": false, \"special\": true},"
        " {\"id\": 301, \"content\": \"[X]\", \"single_word\": false, \"lstrip\": true, \"rstrip\": true, "
        "\"normalized\": false, \"special\": false},"
        " {\"id\": 302, \"content\": \"tok\", \"single_word\": true, \"lstrip\": false, \"rstrip\": false, "
        "\"normalized\": false, \"special\": false},"
        " {\"id\": 303, \"content\": \"<s>x\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
        "\"normalized\": false, \"special\": true}]";
    const char *post = "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}},"
                       " {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"<e>\", \"type_id\": 0}}],"
                       " \"pair\": [], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [300], \"tokens\": [\"<s>\"]},"
                       " \"<e>\": {\"id\": \"<e>\", \"ids\": [300, 301], \"tokens\": [\"<s>\", \"[X]\"]}}}";
    mkdir(tmp_path("bpe"), 0755);
    const char *path = tmp_path("bpe/tokenizer.json");
    /* merges as strings and as pairs; rank 0 "b c" beats rank 1 "a b" */
    write_tokenizer(path, "BPE", "\"bc\": 256, \"ab\": 257, \"aa\": 258, \"abc\": 259",
                    "[\"b c\", [\"a\", \"b\"], \"a a\", [\"ab\", \"c\"]]", added, "{\"type\": \"NFC\"}", BL_PRE, post,
                    BL_DEC);
    cx_tokenizer *t = load_ok(__LINE__, path);
    if (!t) return;
    CHECK(cx_tokenizer_vocab_size(t) == 304, "vocab size %lld", (long long)cx_tokenizer_vocab_size(t));
    CHECK(cx_tokenizer_token_to_id(t, "<s>") == 300, "token_to_id <s>");
    CHECK(cx_tokenizer_token_to_id(t, "ab") == 257, "token_to_id ab");
    CHECK(cx_tokenizer_token_to_id(t, "nope") == -1, "token_to_id of an unknown token");
    CHECK(cx_tokenizer_id_to_token(t, 256) && strcmp(cx_tokenizer_id_to_token(t, 256), "bc") == 0, "id_to_token 256");
    CHECK(cx_tokenizer_id_to_token(t, 32) && strcmp(cx_tokenizer_id_to_token(t, 32), "\xC4\xA0") == 0, "space is 'Ġ'");
    CHECK(cx_tokenizer_id_to_token(t, 304) == NULL && cx_tokenizer_id_to_token(t, -1) == NULL, "out-of-range ids");
    CHECK(cx_tokenizer_special_id(t, "bos") == -1, "no tokenizer_config.json read for a file path");
    CHECK(cx_tokenizer_is_special(t, 300) && !cx_tokenizer_is_special(t, 301), "special flags");

    EXPECT_ENCODE(t, "abc", false, 97, 256);              /* "b c" (rank 0) first, then no "a bc" merge */
    EXPECT_ENCODE(t, "abc", true, 300, 97, 256, 300, 301); /* template: <s> A <e> where <e> has two ids */
    EXPECT_ENCODE(t, "aaa", false, 258, 97);              /* equal ranks: leftmost first */
    EXPECT_ENCODE(t, "abd", false, 257, 100);
    EXPECT_ENCODE(t, "abcabc", false, 97, 256, 97, 256);
    EXPECT_ENCODE(t, "a [X] b", false, 97, 301, 98);             /* lstrip / rstrip swallow the spaces */
    EXPECT_ENCODE(t, "a tok b", false, 97, 32, 302, 32, 98);     /* single word */
    EXPECT_ENCODE(t, "atok", false, 97, 116, 111, 107);          /* not a single word: plain text */
    EXPECT_ENCODE(t, "<s>xy", false, 303, 121);                  /* longest added token wins */
    EXPECT_ENCODE(t, "<s><s>", false, 300, 300);
    EXPECT_ENCODE(t, "e\xCC\x81", false, 195, 169);              /* NFC: e + U+0301 -> U+00E9 = C3 A9 */
    {
        int64_t *ids = NULL, n = -1;
        CHECK_STATUS(cx_tokenizer_encode(t, "", 0, false, &ids, &n), CATTR_OK, NULL, "encode empty");
        CHECK(ids != NULL && n == 0, "empty text gives 0 ids and a non-NULL array");
        free(ids);
        CHECK_STATUS(cx_tokenizer_encode(t, "a\xFF", 2, false, &ids, &n), CATTR_ERR_INVALID_ARGUMENT, "UTF-8",
                     "invalid UTF-8");
        CHECK(ids == NULL && n == 0, "outputs cleared on failure");
        CHECK_STATUS(cx_tokenizer_encode(t, "a\xED\xA0\x80", 4, false, &ids, &n), CATTR_ERR_INVALID_ARGUMENT, "UTF-8",
                     "encoded surrogate");
        CHECK_STATUS(cx_tokenizer_encode(NULL, "a", 1, false, &ids, &n), CATTR_ERR_INVALID_ARGUMENT, NULL, "NULL t");
        /* text with an embedded NUL (length given explicitly) */
        CHECK_STATUS(cx_tokenizer_encode(t, "a\0b", 3, false, &ids, &n), CATTR_OK, NULL, "embedded NUL");
        CHECK(n >= 2 && ids[0] == 97 && ids[n - 1] == 98, "embedded NUL keeps both sides");
        free(ids);
    }

    EXPECT_DECODE(t, false, "<s>abc", 300, 97, 256);
    EXPECT_DECODE(t, true, "abc", 300, 97, 256);
    EXPECT_DECODE(t, true, "[X]", 301);             /* non-special added tokens are kept */
    EXPECT_DECODE(t, false, "a tok b", 97, 32, 302, 32, 98);
    EXPECT_DECODE(t, false, "\xEF\xBF\xBD", 0xF0);  /* lone lead byte */
    EXPECT_DECODE(t, false, "\xF0\x9F\x98\x80", 0xF0, 0x9F, 0x98, 0x80);
    EXPECT_DECODE(t, false, "\xEF\xBF\xBD" "A", 0xF0, 0x9F, 'A'); /* one U+FFFD for a truncated sequence */
    EXPECT_DECODE(t, false, "\xEF\xBF\xBD\xEF\xBF\xBD", 0xC0, 0x80);
    EXPECT_DECODE(t, false, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", 0xED, 0xA0, 0x80); /* surrogate: 3 subparts */
    EXPECT_DECODE(t, false, "ab", 97, 999, -5, 98);  /* ids naming no token are skipped */
    {
        char *s = NULL;
        CHECK_STATUS(cx_tokenizer_decode(t, NULL, 0, false, &s), CATTR_OK, NULL, "decode nothing");
        CHECK(s && s[0] == '\0', "empty decode");
        free(s);
        CHECK_STATUS(cx_tokenizer_decode(t, NULL, 2, false, &s), CATTR_ERR_INVALID_ARGUMENT, NULL, "decode NULL ids");
    }
    cx_tokenizer_free(t);

    /* the same folder with a tokenizer_config.json */
    write_text(tmp_path("bpe/tokenizer_config.json"),
               "{\"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<s>\"}, \"eos_token\": \"[X]\", "
               "\"pad_token\": null, \"add_bos_token\": true}");
    t = load_ok(__LINE__, tmp_path("bpe"));
    if (t) {
        CHECK(cx_tokenizer_special_id(t, "bos") == 300, "bos");
        CHECK(cx_tokenizer_special_id(t, "eos") == 301, "eos");
        CHECK(cx_tokenizer_special_id(t, "pad") == -1, "pad");
        CHECK(cx_tokenizer_special_id(t, "unk") == -1, "unknown name");
        EXPECT_ENCODE(t, "abc", true, 300, 97, 256, 300, 301); /* the template wins over add_bos_token */
        cx_tokenizer_free(t);
    }
    /* a corrupt tokenizer_config.json is an error naming it */
    write_text(tmp_path("bpe/tokenizer_config.json"), "{\"bos_token\": ");
    t = NULL;
    CHECK_STATUS(cx_tokenizer_load(tmp_path("bpe"), &t), CATTR_ERR_FORMAT, "tokenizer_config.json", "bad config");
    CHECK(t == NULL, "no tokenizer on failure");
}

static void test_synthetic_pretokenizers(void) {
    /* Split(\s+, Removed): \s is Unicode White_Space (U+0085 yes; U+180E, U+FEFF, U+200B no) */
    mkdir(tmp_path("ws"), 0755);
    write_tokenizer(tmp_path("ws/tokenizer.json"), "BPE", "", "[]", "[]", "null",
                    SPLIT_SEQ("{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\s+\"}, \"behavior\": \"Removed\", "
                              "\"invert\": false}"),
                    "null", BL_DEC);
    write_text(tmp_path("ws/tokenizer_config.json"), "{\"bos_token\": \"a\", \"add_bos_token\": true, \"eos_token\": null}");
    cx_tokenizer *t = load_ok(__LINE__, tmp_path("ws"));
    if (t) {
        EXPECT_ENCODE(t, "a\xC2\x85" "b", false, 97, 98);                  /* U+0085 NEL is a space */
        EXPECT_ENCODE(t, "a\xE1\xA0\x8E" "b", false, 97, 0xE1, 0xA0, 0x8E, 98); /* U+180E is not (PCRE2's \s says yes) */
        EXPECT_ENCODE(t, "a\xEF\xBB\xBF" "b", false, 97, 0xEF, 0xBB, 0xBF, 98); /* U+FEFF is not */
        EXPECT_ENCODE(t, "a\xE2\x80\x8B" "b", false, 97, 0xE2, 0x80, 0x8B, 98); /* U+200B is not */
        EXPECT_ENCODE(t, "a \t\xE2\x80\xA8\xE3\x80\x80\xC2\xA0\x0B\x0C" "b", false, 97, 98);
        EXPECT_ENCODE(t, "a\x1C" "b", false, 97, 0x1C, 98); /* U+001C is not White_Space */
        EXPECT_ENCODE(t, "b", true, 97, 98);                /* add_bos_token without a template */
        EXPECT_ENCODE(t, "b", false, 98);
        CHECK(cx_tokenizer_special_id(t, "eos") == -1, "eos null");
        cx_tokenizer_free(t);
    }
    /* \S inside a class, Isolated behaviour */
    write_tokenizer(tmp_path("nws.json"), "BPE", "", "[]", "[]", "null",
                    SPLIT_SEQ("{\"type\": \"Split\", \"pattern\": {\"Regex\": \"[^\\\\S\\\\n]+\"}, \"behavior\": \"Removed\", "
                              "\"invert\": false}"),
                    "null", BL_DEC);
    t = load_ok(__LINE__, tmp_path("nws.json"));
    if (t) {
        EXPECT_ENCODE(t, "a \xC2\x85\nb", false, 97, 10, 98);
        cx_tokenizer_free(t);
    }
    /* literal String pattern: '.' is not a metacharacter */
    write_tokenizer(tmp_path("lit.json"), "BPE", "", "[]", "[]", "null",
                    SPLIT_SEQ("{\"type\": \"Split\", \"pattern\": {\"String\": \".\"}, \"behavior\": \"Removed\", "
                              "\"invert\": false}"),
                    "null", BL_DEC);
    t = load_ok(__LINE__, tmp_path("lit.json"));
    if (t) {
        EXPECT_ENCODE(t, "a.b", false, 97, 98);
        EXPECT_ENCODE(t, "ab", false, 97, 98);
        cx_tokenizer_free(t);
    }
    /* invert: the matches are kept, the rest removed; \uHHHH escapes (Oniguruma) */
    write_tokenizer(tmp_path("inv.json"), "BPE", "", "[]", "[]", "null",
                    SPLIT_SEQ("{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\u0061\"}, \"behavior\": \"Removed\", "
                              "\"invert\": true}"),
                    "null", BL_DEC);
    t = load_ok(__LINE__, tmp_path("inv.json"));
    if (t) {
        EXPECT_ENCODE(t, "xaya", false, 97, 97);
        cx_tokenizer_free(t);
    }
    /* Oniguruma-only syntax: {,n} means {0,n}; \h is a hexadecimal digit */
    write_tokenizer(tmp_path("onig.json"), "BPE", "", "[]", "[]", "null",
                    "{\"type\": \"Sequence\", \"pretokenizers\": ["
                    "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"x{,2}\"}, \"behavior\": \"Removed\", \"invert\": false}, "
                    "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\h+\"}, \"behavior\": \"Removed\", \"invert\": false}, "
                    BL_PRE_NOREGEX "]}",
                    "null", BL_DEC);
    t = load_ok(__LINE__, tmp_path("onig.json"));
    if (t) {
        EXPECT_ENCODE(t, "xxxg", false, 103);
        EXPECT_ENCODE(t, "a1g zF9", false, 103, 32, 122);
        cx_tokenizer_free(t);
    }
    /* a plain ByteLevel with add_prefix_space and the GPT-2 regex; merges "Ġ h" -> 256 */
    write_tokenizer(tmp_path("gpt2.json"), "BPE", "\"\xC4\xA0h\": 256", "[\"\xC4\xA0 h\"]", "[]", "null",
                    "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true}",
                    "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true}",
                    BL_DEC);
    t = load_ok(__LINE__, tmp_path("gpt2.json"));
    if (t) {
        EXPECT_ENCODE(t, "hi", false, 256, 105);
        EXPECT_ENCODE(t, "hi there", false, 256, 105, 32, 116, 104, 101, 114, 101);
        EXPECT_ENCODE(t, "it's", false, 32, 105, 116, 39, 115); /* " it" then "'s" */
        cx_tokenizer_free(t);
    }
}

static void test_errors(void) {
    cx_tokenizer *t = (cx_tokenizer *)&t; /* must be reset to NULL */
    const char *missing = tmp_path("does-not-exist.json");
    CHECK_STATUS(cx_tokenizer_load(missing, &t), CATTR_ERR_IO, missing, "missing file");
    CHECK(t == NULL, "out cleared");
    mkdir(tmp_path("empty"), 0755);
    CHECK_STATUS(cx_tokenizer_load(tmp_path("empty"), &t), CATTR_ERR_IO, "tokenizer.json", "folder without tokenizer.json");
    CHECK_STATUS(cx_tokenizer_load(NULL, &t), CATTR_ERR_INVALID_ARGUMENT, NULL, "NULL path");

    const char *bad = tmp_path("notjson.json");
    write_text(bad, "this is not JSON {");
    CHECK_STATUS(cx_tokenizer_load(bad, &t), CATTR_ERR_FORMAT, bad, "non-JSON file");
    write_text(bad, "[1, 2, 3]");
    CHECK_STATUS(cx_tokenizer_load(bad, &t), CATTR_ERR_FORMAT, bad, "JSON array");
    write_text(bad, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []");
    CHECK_STATUS(cx_tokenizer_load(bad, &t), CATTR_ERR_FORMAT, bad, "truncated JSON");

    const char *p = tmp_path("err.json");
    write_tokenizer(p, "WordPiece", "", "[]", "[]", "null", BL_PRE, "null", BL_DEC);
    CHECK_STATUS(cx_tokenizer_load(p, &t), CATTR_ERR_UNSUPPORTED, "model.type", "WordPiece model");
    write_tokenizer(p, "Unigram", "", "[]", "[]", "null", BL_PRE, "null", BL_DEC);
    CHECK_STATUS(cx_tokenizer_load(p, &t), CATTR_ERR_UNSUPPORTED, "Unigram", "Unigram model");
    write_tokenizer(p, "BPE", "", "[]", "[]", "null",
                    "{\"type\": \"Sequence\", \"pretokenizers\": [" BL_PRE ", {\"type\": \"Metaspace\"}]}", "null", BL_DEC);
    CHECK_STATUS(cx_tokenizer_load(p, &t), CATTR_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[1]", "pre-tokenizer after ByteLevel");
    write_tokenizer(p, "BPE", "", "[]", "[]", "null",
                    "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Metaspace\"}, " BL_PRE "]}", "null", BL_DEC);
    CHECK_STATUS(cx_tokenizer_load(p, &t), CATTR_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[0]", "Metaspace");
    write_tokenizer(p, "BPE", "", "[]", "[]",
                    "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, {\"type\": \"Lowercase\"}]}", BL_PRE,
                    "null", BL_DEC);
    CHECK_STATUS(cx_tokenizer_load(p, &t), CATTR_ERR_UNSUPPORTED, "normalizer.normalizers[1]", "Lowercase normalizer");
    write_tokenizer(p, "BPE", "", "[]", "[]", "null",
                    SPLIT_SEQ("{\"type\": \"Split\", \"pattern\": {\"Regex\": \"x\"}, \"behavior\": \"MergedWithPrevious\", "
                              "\"invert\": false}"),
                    "null", BL_DEC);
    CHECK_STATUS(cx_tokenizer_load(p, &t), CATTR_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[0].behavior", "Split behaviour");
    write_tokenizer(p, "BPE", "", "[]", "[]", "null",
                    SPLIT_SEQ("{\"type\": \"Split\", \"pattern\": {\"Regex\": \"[a[b]]\"}, \"behavior\": \"Isolated\", "
                              "\"invert\": false}"),
                    "null", BL_DEC);
    CHECK_STATUS(cx_tokenizer_load(p, &t), CATTR_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[0].pattern", "nested class");
    write_tokenizer(p, "BPE", "", "[]", "[]", "null", BL_PRE, "null", "{\"type\": \"WordPiece\", \"prefix\": \"##\"}");
    CHECK_STATUS(cx_tokenizer_load(p, &t), CATTR_ERR_UNSUPPORTED, "decoder", "WordPiece decoder");
    write_tokenizer(p, "BPE", "", "[]", "[]", "null", BL_PRE, "{\"type\": \"Mystery\"}", BL_DEC);
    CHECK_STATUS(cx_tokenizer_load(p, &t), CATTR_ERR_UNSUPPORTED, "post_processor", "unknown post-processor");
    write_tokenizer(p, "BPE", "", "[\"a zz\"]", "[]", "null", BL_PRE, "null", BL_DEC);
    CHECK_STATUS(cx_tokenizer_load(p, &t), CATTR_ERR_FORMAT, "model.merges[0]", "merge of an unknown token");
    write_tokenizer(p, "BPE", "", "[\"a b\"]", "[]", "null", BL_PRE, "null", BL_DEC); /* "ab" is not in the vocab */
    CHECK_STATUS(cx_tokenizer_load(p, &t), CATTR_ERR_FORMAT, "'ab'", "merge result not in the vocabulary");
    write_tokenizer(p, "BPE", "", "[\"abc\"]", "[]", "null", BL_PRE, "null", BL_DEC);
    CHECK_STATUS(cx_tokenizer_load(p, &t), CATTR_ERR_FORMAT, "model.merges[0]", "merge without a space");
    write_tokenizer(p, "BPE", "", "[]", "[{\"id\": -3, \"content\": \"<x>\"}]", "null", BL_PRE, "null", BL_DEC);
    CHECK_STATUS(cx_tokenizer_load(p, &t), CATTR_ERR_FORMAT, "added_tokens[0]", "negative added id");
    CHECK(t == NULL, "out stays NULL");
}

/* ---- the Qwen3 golden ------------------------------------------------------------------------------------------ */

/* Prints a string as a JSON literal (escapes control characters). */
static void print_json_string(const char *s) {
    cJSON *j = cJSON_CreateString(s);
    char *p = j ? cJSON_PrintUnformatted(j) : NULL;
    printf("%s", p ? p : "?");
    free(p);
    cJSON_Delete(j);
}

static int64_t *json_ids(const cJSON *arr, int64_t *n) {
    *n = cJSON_GetArraySize(arr);
    int64_t *ids = malloc(((size_t)*n + 1) * sizeof *ids);
    int64_t i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) ids[i++] = (int64_t)x->valuedouble;
    return ids;
}

/* Returns 1 if the case passed. */
static int golden_case(const cx_tokenizer *t, const cJSON *c) {
    const cJSON *jid = cJSON_GetObjectItem(c, "id"), *jtext = cJSON_GetObjectItem(c, "text");
    const cJSON *jids = cJSON_GetObjectItem(c, "ids"), *jtoks = cJSON_GetObjectItem(c, "tokens");
    const cJSON *jdec = cJSON_GetObjectItem(c, "decoded");
    if (!cJSON_IsString(jtext) || !cJSON_IsArray(jids) || !cJSON_IsArray(jtoks) || !cJSON_IsString(jdec)) {
        printf("MISMATCH case %d: malformed golden line\n", cJSON_IsNumber(jid) ? jid->valueint : -1);
        return 0;
    }
    int id = cJSON_IsNumber(jid) ? jid->valueint : -1;
    const char *text = jtext->valuestring;
    int64_t nw = 0, n = 0;
    int64_t *want = json_ids(jids, &nw), *got = NULL;
    int ok = 1;
    cattr_status st = cx_tokenizer_encode(t, text, strlen(text), false, &got, &n);
    if (st != CATTR_OK) {
        printf("MISMATCH case %d: text ", id);
        print_json_string(text);
        printf(": encode failed: %s\n", cattr_last_error());
        ok = 0;
    } else if (!ids_eq(got, n, want, nw)) {
        printf("MISMATCH case %d: text ", id);
        print_json_string(text);
        printf("\n  expected ids ");
        print_ids(want, nw);
        printf("\n  got ids      ");
        print_ids(got, n);
        printf("\n");
        ok = 0;
    }
    /* token strings of our ids */
    if (st == CATTR_OK) {
        int k = 0;
        const cJSON *tok;
        bool tok_ok = cJSON_GetArraySize(jtoks) == n;
        cJSON_ArrayForEach(tok, jtoks) {
            if (k >= n) break;
            const char *s = cx_tokenizer_id_to_token(t, got[k]);
            if (!cJSON_IsString(tok) || !s || strcmp(s, tok->valuestring) != 0) tok_ok = false;
            if (cJSON_IsString(tok) && cx_tokenizer_token_to_id(t, tok->valuestring) != want[k < nw ? k : 0]) tok_ok = false;
            k++;
        }
        if (!tok_ok) {
            printf("MISMATCH case %d: text ", id);
            print_json_string(text);
            printf(": token strings differ; expected ");
            char *e = cJSON_PrintUnformatted(jtoks);
            printf("%s got [", e ? e : "?");
            free(e);
            for (int64_t i = 0; i < n; i++) {
                printf("%s", i ? ", " : "");
                const char *s = cx_tokenizer_id_to_token(t, got[i]);
                print_json_string(s ? s : "(null)");
            }
            printf("]\n");
            ok = 0;
        }
    }
    char *dec = NULL;
    st = cx_tokenizer_decode(t, want, nw, false, &dec);
    if (st != CATTR_OK || strcmp(dec, jdec->valuestring) != 0) {
        printf("MISMATCH case %d: decode of the expected ids: expected ", id);
        print_json_string(jdec->valuestring);
        printf(" got ");
        if (st == CATTR_OK) print_json_string(dec);
        else printf("error %s", cattr_last_error());
        printf("\n");
        ok = 0;
    }
    free(dec);
    free(want);
    free(got);
    return ok;
}

static bool file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* Encodes `text` and returns the ids (caller frees) or NULL after reporting a failure. */
static int64_t *enc(const cx_tokenizer *t, const char *text, size_t len, int64_t *n) {
    int64_t *ids = NULL;
    if (cx_tokenizer_encode(t, text, len, false, &ids, n) != CATTR_OK) {
        g_failures++;
        printf("FAIL: encode of a %zu-byte text: %s\n", len, cattr_last_error());
        return NULL;
    }
    return ids;
}

/* Checks encode(whole) == concatenation of encode(piece) for the expected pre-tokens `want`, and reports whether the
 * vocabulary tells them apart from the pre-tokens `other` (what a different regex semantics would produce). */
static void check_pieces(const cx_tokenizer *t, const char *whole, const char *const *want, const char *const *other) {
    int64_t cat[2][64], ncat[2] = {0, 0};
    for (int w = 0; w < 2; w++) {
        const char *const *pieces = w ? other : want;
        for (int k = 0; pieces[k]; k++) {
            int64_t n = 0;
            int64_t *ids = enc(t, pieces[k], strlen(pieces[k]), &n);
            for (int64_t i = 0; ids && i < n && ncat[w] < 64; i++) cat[w][ncat[w]++] = ids[i];
            free(ids);
        }
    }
    int64_t n = 0;
    int64_t *ids = enc(t, whole, strlen(whole), &n);
    if (!ids) return;
    if (!ids_eq(ids, n, cat[0], ncat[0])) {
        g_failures++;
        printf("FAIL: pre-tokenization of ");
        print_json_string(whole);
        printf(": expected ");
        print_ids(cat[0], ncat[0]);
        printf(" got ");
        print_ids(ids, n);
        printf("\n");
    }
    if (ids_eq(cat[0], ncat[0], cat[1], ncat[1])) {
        printf("note: the pre-tokenization check of ");
        print_json_string(whole);
        printf(" does not discriminate with this vocabulary\n");
    }
    free(ids);
}

/* Extra checks on the real Qwen3 tokenizer. */
static void qwen3_extras(const cx_tokenizer *t, const char *cases_path) {
    CHECK(cx_tokenizer_vocab_size(t) == 151669, "vocab size %lld", (long long)cx_tokenizer_vocab_size(t));
    CHECK(cx_tokenizer_special_id(t, "eos") == 151645, "eos %lld", (long long)cx_tokenizer_special_id(t, "eos"));
    CHECK(cx_tokenizer_special_id(t, "pad") == 151643, "pad %lld", (long long)cx_tokenizer_special_id(t, "pad"));
    CHECK(cx_tokenizer_special_id(t, "bos") == -1, "bos %lld", (long long)cx_tokenizer_special_id(t, "bos"));
    CHECK(cx_tokenizer_token_to_id(t, "<|im_start|>") == 151644, "im_start");
    CHECK(cx_tokenizer_token_to_id(t, "\xC4\xA0world") == 1879, "Ġworld");
    CHECK(cx_tokenizer_id_to_token(t, 151667) && strcmp(cx_tokenizer_id_to_token(t, 151667), "<think>") == 0, "<think>");
    CHECK(cx_tokenizer_id_to_token(t, 151669) == NULL, "beyond the vocabulary");
    EXPECT_ENCODE(t, "<|im_start|>user\nHi<|im_end|>\n", true, 151644, 872, 198, 13048, 151645, 198); /* adds nothing */
    EXPECT_DECODE(t, true, "user\nHi\n", 151644, 872, 198, 13048, 151645, 198);
    EXPECT_DECODE(t, true, "<think>\n\n</think>", 151667, 271, 151668); /* non-special added tokens are kept */
    int64_t f0 = cx_tokenizer_token_to_id(t, "\xC3\xB0");      /* byte 0xF0 */
    int64_t f09f = cx_tokenizer_token_to_id(t, "\xC3\xB0\xC5\x81"); /* bytes F0 9F */
    CHECK(f0 >= 0 && f09f >= 0, "byte tokens");
    EXPECT_DECODE(t, false, "\xEF\xBF\xBD", f0);
    EXPECT_DECODE(t, false, "\xEF\xBF\xBD" "A", f09f, 32);
    EXPECT_DECODE(t, false, "x\xEF\xBF\xBD\xEF\xBF\xBDy", 87, f0, f0, 88);

    /* \s: U+180E is not White_Space. "x \u180Eb" pre-tokenizes as "x" | " \u180E" | "b" (` ?[^\s\p{L}\p{N}]+`);
     * PCRE2's own UCP \s (which includes U+180E) would give "x" | " " | "\u180Eb". */
    check_pieces(t, "x \xE1\xA0\x8E" "b", (const char *[]){"x", " \xE1\xA0\x8E", "b", NULL},
                 (const char *[]){"x", " ", "\xE1\xA0\x8E" "b", NULL});
    check_pieces(t, "x\xE1\xA0\x8E\xE1\xA0\x8E!", (const char *[]){"x", "\xE1\xA0\x8E\xE1\xA0\x8E!", NULL},
                 (const char *[]){"x", "\xE1\xA0\x8E", "\xE1\xA0\x8E", "!", NULL});
    /* U+0085 is White_Space (as in the golden's js_divergence cases): "hi\u0085\u0085b" -> "hi" | "\u0085" (\s+ not
     * followed by \S) | "\u0085b"; without it, "hi" | "\u0085\u0085" | "b" */
    check_pieces(t, "hi\xC2\x85\xC2\x85" "b", (const char *[]){"hi", "\xC2\x85", "\xC2\x85" "b", NULL},
                 (const char *[]){"hi", "\xC2\x85\xC2\x85", "b", NULL});

    /* ~1 MB of mixed text built from the golden texts: speed and round trip */
    FILE *fp = fopen(cases_path, "rb");
    char *line = NULL;
    size_t cap = 0;
    char *big = malloc((1u << 20) + 4096);
    size_t nbig = 0;
    if (fp && big) {
        while (nbig < (1u << 20)) {
            ssize_t r = getline(&line, &cap, fp);
            if (r < 0) {
                rewind(fp);
                continue;
            }
            cJSON *c = cJSON_Parse(line);
            const cJSON *tx = cJSON_GetObjectItem(c, "text");
            const cJSON *nfc = cJSON_GetObjectItem(c, "nfc_changes_text");
            if (cJSON_IsString(tx) && !cJSON_IsTrue(nfc)) {
                size_t l = strlen(tx->valuestring);
                if (nbig + l + 1 < (1u << 20) + 4096) {
                    memcpy(big + nbig, tx->valuestring, l);
                    nbig += l;
                    big[nbig] = (nbig % 3) ? ' ' : '\n';
                    nbig++;
                }
            }
            cJSON_Delete(c);
        }
        double t0 = now_s();
        int64_t n = 0;
        int64_t *ids = enc(t, big, nbig, &n);
        double dt = now_s() - t0;
        printf("encode of %zu bytes of mixed text: %lld tokens in %.3f s\n", nbig, (long long)n, dt);
        CHECK(dt < 1.0, "encoding 1 MB took %.3f s", dt);
        char *back = NULL;
        if (ids && cx_tokenizer_decode(t, ids, n, false, &back) == CATTR_OK) {
            CHECK(strlen(back) == nbig && memcmp(back, big, nbig) == 0, "1 MB round trip");
        } else {
            CHECK(0, "decode of the 1 MB text: %s", cattr_last_error());
        }
        free(back);
        free(ids);
    }
    free(line);
    if (fp) fclose(fp);
    /* degenerate 1 MB inputs: one character repeated (a single huge pre-token or long backtracking runs) */
    const char *fills[] = {" ", "a", "7", "\n", "\xC2\x85", " \n", "!"};
    for (size_t k = 0; k < CX_ARRAY_LEN(fills) && big; k++) {
        size_t fl = strlen(fills[k]);
        nbig = 0;
        while (nbig + fl <= (1u << 20)) {
            memcpy(big + nbig, fills[k], fl);
            nbig += fl;
        }
        double t0 = now_s();
        int64_t n = 0;
        int64_t *ids = enc(t, big, nbig, &n);
        double dt = now_s() - t0;
        char *back = NULL;
        if (ids && cx_tokenizer_decode(t, ids, n, false, &back) == CATTR_OK)
            CHECK(strlen(back) == nbig && memcmp(back, big, nbig) == 0, "round trip of 1 MB of '%s'", fills[k]);
        printf("encode of 1 MB of ");
        print_json_string(fills[k]);
        printf(": %lld tokens in %.3f s\n", (long long)n, dt);
        CHECK(dt < 5.0, "encoding 1 MB of a repeated character took %.3f s", dt); /* guards against quadratic time */
        free(back);
        free(ids);
    }
    free(big);
}

/* Returns 0 when run, 77 when the golden data is absent. */
static int test_golden(void) {
    const char *root = getenv("CATTR_GOLDEN");
    if (!root || !*root) root = "../shared/golden";
    char cases[1024], tokdir[1024], tokjson[1100];
    snprintf(cases, sizeof cases, "%s/tokenizer/qwen3_cases.jsonl", root);
    snprintf(tokdir, sizeof tokdir, "%s/tokenizer/../llm/qwen3-tiny", root);
    snprintf(tokjson, sizeof tokjson, "%s/tokenizer.json", tokdir);
    if (!file_exists(cases) || !file_exists(tokjson)) {
        printf("SKIP: golden data absent (%s, %s)\n", cases, tokjson);
        return 77;
    }
    double t0 = now_s();
    cx_tokenizer *t = load_ok(__LINE__, tokdir);
    if (!t) return 0;
    printf("loaded %s in %.3f s\n", tokdir, now_s() - t0);
    FILE *f = fopen(cases, "rb");
    if (!f) {
        g_failures++;
        printf("FAIL: cannot open %s\n", cases);
        cx_tokenizer_free(t);
        return 0;
    }
    char *line = NULL;
    size_t cap = 0;
    int passed = 0, failed = 0;
    ssize_t r;
    while ((r = getline(&line, &cap, f)) >= 0) {
        if (r <= 1) continue;
        cJSON *c = cJSON_ParseWithLength(line, (size_t)r);
        if (!c) {
            printf("MISMATCH: unparsable golden line %d\n", passed + failed);
            failed++;
            continue;
        }
        if (golden_case(t, c)) passed++;
        else failed++;
        cJSON_Delete(c);
    }
    free(line);
    fclose(f);
    printf("qwen3 tokenizer golden: %d passed, %d failed\n", passed, failed);
    g_failures += failed;
    CHECK(passed + failed == 352, "expected 352 golden cases, read %d", passed + failed);
    qwen3_extras(t, cases);
    cx_tokenizer_free(t);
    return 0;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/cattr_tok_XXXXXX");
    if (!mkdtemp(g_dir)) {
        printf("FAIL: mkdtemp\n");
        return 1;
    }
    test_synthetic_bpe();
    test_synthetic_pretokenizers();
    test_errors();
    int golden = test_golden();
    if (nftw(g_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0) printf("note: could not remove %s\n", g_dir);
    if (g_failures) {
        printf("test_tokenizer: %d failure(s)\n", g_failures);
        return 1;
    }
    if (golden == 77) return 77;
    printf("test_tokenizer: all passed\n");
    return 0;
}
