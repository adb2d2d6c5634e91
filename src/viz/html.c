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
