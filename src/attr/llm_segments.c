/* llm_segments.c - a prompt's segments (words, sentences, lines, a user's spans) as features of a language-model
 * attribution (cattr_llm_call.segments): each token's byte span in the prompt's text, and the segment of each token.
 *
 * A token belongs to the segment that holds its first byte that is not white space (its first byte if it is all white
 * space): " Paris" belongs to the word "Paris", "\n" to the line it ends. Segments no token falls in are dropped, and
 * the ids are renumbered in order, so that every id from 0 to n_segments - 1 has a token. */
#include "attr/llm_internal.h"

#include <stdlib.h>
#include <string.h>

static bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

cattr_status cattr_llm_token_spans(const cattr_llm *m, const char *text, const int64_t *ids, int64_t T, int64_t *start,
                                   int64_t *end) {
    if (!m || !text || !ids || !start || !end || T < 1)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_llm_token_spans: a NULL argument or no token");
    size_t len = strlen(text);
    /* the decoded prefix of t + 1 tokens, compared with the text: the bytes they agree on end token t (a token that
     * ends inside a multi-byte character decodes to U+FFFD, so its end waits for the token that completes it) */
    int64_t at = 0;
    cattr_status st = CATTR_OK;
    for (int64_t t = 0; t < T && st == CATTR_OK; t++) {
        char *d = NULL;
        st = cattr_llm_decode(m, ids, t + 1, 0, &d);
        if (st != CATTR_OK) break;
        size_t k = 0;
        while (k < len && d[k] && d[k] == text[k]) k++;
        if (t == T - 1 && (k != len || d[k])) {
            size_t dl = strlen(d);
            free(d);
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "the prompt's %lld tokens do not spell its text (they decode to "
                           "%zu bytes that differ from the text's %zu from byte %zu: the tokenizer normalises the "
                           "text, or the ids are not its encoding), so segments of the text cannot be mapped to tokens",
                           (long long)T, dl, len, k);
        }
        free(d);
        start[t] = at;
        end[t] = (int64_t)k > at ? (int64_t)k : at;
        at = end[t];
    }
    return st;
}

/* The byte that places token t: its first one that is not white space, else its first. */
static int64_t token_key(const char *text, int64_t a, int64_t b) {
    for (int64_t p = a; p < b; p++)
        if (!is_space((unsigned char)text[p])) return p;
    return a;
}

/* Whether a sentence ends at byte p (after its . ! ? and closing quotes or brackets, white space follows). */
static bool sentence_end(const char *text, size_t len, size_t p) {
    if (p == 0 || p >= len || !is_space((unsigned char)text[p])) return false;
    size_t q = p;
    while (q > 0 && strchr("\"')]", text[q - 1])) q--;
    return q > 0 && strchr(".!?", text[q - 1]) != NULL;
}

cattr_status cattr_llm_segments(const cattr_llm *m, const char *text, const int64_t *ids, int64_t T, const char *kind,
                                const int64_t *spans, int64_t n_spans, int64_t *segments, int64_t *n_segments) {
    if (!m || !text || !ids || !kind || !segments || !n_segments || T < 1)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_llm_segments: a NULL argument or no token");
    int by = !strcmp(kind, "tokens") ? 0 : !strcmp(kind, "words") ? 1 : !strcmp(kind, "sentences") ? 2
             : !strcmp(kind, "lines") ? 3 : !strcmp(kind, "spans") ? 4 : -1;
    if (by < 0)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "segments '%s': give tokens, words, sentences, lines or spans", kind);
    if (by == 0) {
        for (int64_t t = 0; t < T; t++) segments[t] = t;
        *n_segments = T;
        return CATTR_OK;
    }
    size_t len = strlen(text);
    if (by == 4) {
        if (!spans || n_spans < 1) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "segments 'spans' needs at least one span");
        for (int64_t s = 0; s < n_spans; s++) {
            int64_t a = spans[2 * s], b = spans[2 * s + 1];
            if (a < 0 || b <= a || (size_t)b > len || (s > 0 && a < spans[2 * s - 1]))
                return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "span %lld is [%lld, %lld): spans must be non-empty, in "
                               "order, not overlapping and within the prompt's %zu bytes", (long long)s, (long long)a,
                               (long long)b, len);
        }
    }
    int64_t *st_ = malloc((size_t)T * sizeof *st_), *en = malloc((size_t)T * sizeof *en);
    /* the bytes where a segment begins, in order (the text's first byte begins one) */
    int64_t *bound = malloc((2 * len + 2 * (size_t)(n_spans > 0 ? n_spans : 0) + 2) * sizeof *bound);
    if (!st_ || !en || !bound) {
        free(st_);
        free(en);
        free(bound);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    cattr_status st = cattr_llm_token_spans(m, text, ids, T, st_, en);
    size_t nb = 0;
    bound[nb++] = 0;
    if (by == 4) { /* the spans and the gaps between them */
        int64_t at = 0;
        for (int64_t s = 0; s < n_spans; s++) {
            if (spans[2 * s] > at) bound[nb++] = spans[2 * s];
            at = spans[2 * s + 1];
            bound[nb++] = at;
        }
    } else {
        for (size_t p = 1; p < len; p++) {
            unsigned char c = (unsigned char)text[p], pc = (unsigned char)text[p - 1];
            bool b = by == 1 ? !is_space(c) && is_space(pc)
                     : by == 3 ? pc == '\n'
                               : false;
            if (by == 2 && !is_space(c)) { /* a sentence begins after an end, or after a blank line */
                size_t q = p;
                while (q > 0 && is_space((unsigned char)text[q - 1])) q--;
                int nl = 0;
                for (size_t r = q; r < p; r++) nl += text[r] == '\n';
                b = q < p && (sentence_end(text, len, q) || nl >= 2);
            }
            if (b) bound[nb++] = (int64_t)p;
        }
    }
    /* each token's segment: the bounds at or before its key byte, renumbered over the segments that have tokens */
    size_t j = 0;
    int64_t prev = -1, id = -1;
    for (int64_t t = 0; t < T && st == CATTR_OK; t++) {
        int64_t key = token_key(text, st_[t], en[t]);
        while (j + 1 < nb && bound[j + 1] <= key) j++;
        if ((int64_t)j != prev) {
            id++;
            prev = (int64_t)j;
        }
        segments[t] = id;
    }
    if (st == CATTR_OK) *n_segments = id + 1;
    free(st_);
    free(en);
    free(bound);
    return st;
}
