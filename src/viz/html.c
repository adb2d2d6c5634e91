/* html.c - the token-attribution heatmap as a self-contained HTML page (no scripts, no network access). */
#include "viz/heatmap.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growing string; `failed` once an allocation failed (later appends do nothing). */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool failed;
} sbuf;

static bool sb_room(sbuf *b, size_t more) {
    if (b->failed) return false;
    if (b->len + more + 1 <= b->cap) return true;
    size_t cap = (b->cap + more + 1) * 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (!sb_room(b, n)) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n > 0 && sb_room(b, (size_t)n)) {
        vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
}

/* Token text as HTML: markup characters escaped, spaces as middle dots (byte-level tokens' leading spaces stay
 * visible), newlines as a return arrow. */
static void sb_escape(sbuf *b, const char *s) {
    for (; *s; s++) {
        const char *rep = NULL;
        switch (*s) {
        case '&': rep = "&amp;"; break;
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        case '"': rep = "&quot;"; break;
        case '\'': rep = "&#39;"; break;
        case ' ': rep = "&middot;"; break;
        case '\n': rep = "&#8629;"; break;
        default: sb_put(b, s, 1); continue;
        }
        sb_put(b, rep, strlen(rep));
    }
}

cattr_status cx_html_token_heatmap(const char *model, const char *const *in_tok, int64_t T, const char *const *out_tok,
                                   int64_t n, const double *seq, const double *tok, const double *lp,
                                   const char *method, char **out) {
    sbuf b = {NULL, 0, 0, false};
    double m = 0;
    for (int64_t i = 0; i < T; i++) m = fmax(m, fabs(seq[i]));
    for (int64_t i = 0; i < n * T; i++) m = fmax(m, fabs(tok[i]));
    if (m == 0) m = 1;
    sb_printf(&b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>cattr token attribution</title>\n<style>"
                  "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
                  "padding:4px 6px;text-align:center;font-family:monospace;font-size:13px}th{background:#f4f4f4}"
                  ".legend{display:flex;align-items:center;gap:8px;margin:1em 0}.bar{width:240px;height:14px;"
                  "background:linear-gradient(to right,#2166ac,#ffffff,#b2182b)}</style></head><body>\n"
                  "<h2>Token attribution</h2><p>model: ");
    sb_escape(&b, model);
    sb_printf(&b, " &mdash; method: %s</p>\n<div class=\"legend\"><span>%.3g</span><div class=\"bar\"></div>"
                  "<span>%.3g</span><span>(blue: lowers the target's log-probability, red: raises it)</span></div>\n"
                  "<table><tr><th>target token</th><th>log-prob</th>", method, -m, m);
    for (int64_t i = 0; i < T; i++) {
        sb_printf(&b, "<th>");
        sb_escape(&b, in_tok[i]);
        sb_printf(&b, "</th>");
    }
    sb_printf(&b, "</tr>\n");
    for (int64_t k = -1; k < n; k++) {
        sb_printf(&b, "<tr><th>");
        if (k < 0) sb_printf(&b, "(all targets)</th><td></td>");
        else {
            sb_escape(&b, out_tok[k]);
            sb_printf(&b, "</th><td>%.4f</td>", lp[k]);
        }
        for (int64_t i = 0; i < T; i++) {
            double v = k < 0 ? seq[i] : tok[k * T + i];
            unsigned char rgb[3];
            cx_heatmap_colour(v, m, rgb);
            sb_printf(&b, "<td style=\"background:#%02x%02x%02x\" title=\"%.6g\">%.3f</td>", rgb[0], rgb[1], rgb[2], v, v);
        }
        sb_printf(&b, "</tr>\n");
    }
    sb_printf(&b, "</table>\n</body></html>\n");
    if (b.failed) {
        free(b.p);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory writing the HTML page");
    }
    *out = b.p;
    return CATTR_OK;
}

/* Document text as HTML: markup characters escaped, line breaks kept. */
static void sb_text(sbuf *b, const char *s, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const char *rep = NULL;
        switch (s[i]) {
        case '&': rep = "&amp;"; break;
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        case '"': rep = "&quot;"; break;
        case '\'': rep = "&#39;"; break;
        case '\n': rep = "<br>"; break;
        default: sb_put(b, s + i, 1); continue;
        }
        sb_put(b, rep, strlen(rep));
    }
}

static int desc_pairs(const void *x, const void *y) {
    double a = ((const double *)x)[0], c = ((const double *)y)[0];
    return a < c ? 1 : a > c ? -1 : 0;
}

cattr_status cx_html_context(const char *question, const char *answer, const char *method, int n_docs,
                             const char *const *names, const char *const *docs, int64_t S, const int *document,
                             const int64_t *start, const int64_t *end, const double *score, char **out) {
    sbuf b = {NULL, 0, 0, false};
    double m = 0;
    for (int64_t s = 0; s < S; s++) m = fmax(m, fabs(score[s]));
    if (m == 0) m = 1;
    sb_printf(&b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>cattr context attribution</title>\n"
                  "<style>body{font-family:sans-serif;margin:1.5em;max-width:60em}.doc{border:1px solid #ccc;"
                  "padding:8px 12px;margin:10px 0;line-height:1.6}.doc h3{margin:0 0 6px 0;font-size:14px;color:#555}"
                  ".src{border-radius:3px;padding:1px 0}.answer{background:#f4f4f4;padding:8px 12px}"
                  ".legend{display:flex;align-items:center;gap:8px;margin:1em 0}.bar{width:240px;height:14px;"
                  "background:linear-gradient(to right,#2166ac,#ffffff,#b2182b)}table{border-collapse:collapse}"
                  "td,th{border:1px solid #ccc;padding:3px 6px;font-size:13px}</style></head><body>\n"
                  "<h2>Context attribution</h2>\n<p><b>Question:</b> ");
    sb_text(&b, question, (int64_t)strlen(question));
    sb_printf(&b, "</p>\n<p><b>Answer:</b></p><div class=\"answer\">");
    sb_text(&b, answer, (int64_t)strlen(answer));
    sb_printf(&b, "</div>\n<p>method: %s</p><div class=\"legend\"><span>%.3g</span><div class=\"bar\"></div>"
                  "<span>%.3g</span><span>(red: the answer relies on it; blue: it works against the answer)</span>"
                  "</div>\n", method, -m, m);
    for (int d = 0; d < n_docs; d++) {
        sb_printf(&b, "<div class=\"doc\"><h3>");
        sb_text(&b, names[d], (int64_t)strlen(names[d]));
        sb_printf(&b, "</h3>");
        int64_t at = 0, len = (int64_t)strlen(docs[d]);
        for (int64_t s = 0; s < S; s++) {
            if (document[s] != d || start[s] < at || end[s] > len) continue;
            sb_text(&b, docs[d] + at, start[s] - at);
            unsigned char rgb[3];
            cx_heatmap_colour(score[s], m, rgb);
            sb_printf(&b, "<span class=\"src\" style=\"background:#%02x%02x%02x\" title=\"source %lld: %.6g\">",
                      rgb[0], rgb[1], rgb[2], (long long)s, score[s]);
            sb_text(&b, docs[d] + start[s], end[s] - start[s]);
            sb_printf(&b, "</span>");
            at = end[s];
        }
        sb_text(&b, docs[d] + at, len - at);
        sb_printf(&b, "</div>\n");
    }
    sb_printf(&b, "<table><tr><th>rank</th><th>score</th><th>document</th><th>source</th></tr>\n");
    double *order = malloc((size_t)(2 * S + 2) * sizeof *order); /* (score, index) pairs, highest score first */
    for (int64_t s = 0; order && s < S; s++) order[2 * s] = isnan(score[s]) ? -INFINITY : score[s], order[2 * s + 1] = (double)s;
    if (order) qsort(order, (size_t)S, 2 * sizeof *order, desc_pairs);
    for (int64_t r = 0; order && r < S; r++) {
        int64_t s = (int64_t)order[2 * r + 1];
        sb_printf(&b, "<tr><td>%lld</td><td>%.4f</td><td>", (long long)(r + 1), score[s]);
        sb_text(&b, names[document[s]], (int64_t)strlen(names[document[s]]));
        sb_printf(&b, "</td><td>");
        sb_text(&b, docs[document[s]] + start[s], end[s] - start[s]);
        sb_printf(&b, "</td></tr>\n");
    }
    if (!order) b.failed = true;
    free(order);
    sb_printf(&b, "</table>\n</body></html>\n");
    if (b.failed) {
        free(b.p);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory writing the HTML page");
    }
    *out = b.p;
    return CATTR_OK;
}
