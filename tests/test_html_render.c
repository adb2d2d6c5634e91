/* test_html_render.c - the HTML heatmap of `cattr explain-llm` rendered by headless Chromium (Debian's chromium):
 * the screenshot is not blank (many non-background pixels, several colours) and the rendered DOM holds every prompt
 * and target token, escaped; the same for `cattr explain-context`'s page (every source and the question, escaped). Needs the golden qwen3-tiny checkpoint (CATTR_GOLDEN) and chromium; skips (77) with a
 * message when either is absent. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include <cjson/cJSON.h>
#include <png.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef CATTR_CLI
#define CATTR_CLI "build/cattr"
#endif

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    size_t r;
    while (b && (r = fread(b + len, 1, cap - len - 1, f)) > 0) {
        len += r;
        if (cap - len < 2) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                b = NULL;
            }
            b = nb;
        }
    }
    fclose(f);
    if (b) b[len] = 0;
    if (n) *n = len;
    return b;
}

/* The text the page shows for a token, as Chromium's DOM serialiser writes a text node: spaces are shown as U+00B7
 * and newlines as U+21B5 by cattr; & < > are escaped by the serialiser. */
static void displayed(const char *tok, char *out, size_t size) {
    size_t o = 0;
    for (const char *s = tok; *s && o + 8 < size; s++) {
        const char *rep = NULL;
        char one[2] = {*s, 0};
        switch (*s) {
        case ' ': rep = "\xc2\xb7"; break;
        case '\n': rep = "\xe2\x86\xb5"; break;
        case '&': rep = "&amp;"; break;
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        default: rep = one;
        }
        size_t l = strlen(rep);
        memcpy(out + o, rep, l);
        o += l;
    }
    out[o] = 0;
}

/* Non-background pixels and distinct colours (up to 64 counted) of an RGB(A) PNG. */
static int png_stats(const char *path, long *w, long *h, long *ink, int *colours) {
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_file(&img, path)) return -1;
    img.format = PNG_FORMAT_RGB;
    unsigned char *px = malloc(PNG_IMAGE_SIZE(img));
    if (!px || !png_image_finish_read(&img, NULL, px, 0, NULL)) {
        free(px);
        png_image_free(&img);
        return -1;
    }
    *w = img.width;
    *h = img.height;
    unsigned seen[64];
    int ns = 0;
    *ink = 0;
    for (long i = 0; i < *w * *h; i++) {
        const unsigned char *p = px + 3 * i;
        unsigned c = (unsigned)p[0] << 16 | (unsigned)p[1] << 8 | p[2];
        if (memcmp(p, px, 3)) (*ink)++;
        bool dup = false;
        for (int k = 0; k < ns && !dup; k++) dup = seen[k] == c;
        if (!dup && ns < 64) seen[ns++] = c;
    }
    *colours = ns;
    free(px);
    return 0;
}

int main(void) {
    const char *golden = getenv("CATTR_GOLDEN") ? getenv("CATTR_GOLDEN") : "../shared/golden";
    char model[4096], cmd[16384];
    snprintf(model, sizeof model, "%s/llm/qwen3-tiny", golden);
    struct stat sb;
    if (stat(model, &sb) != 0) {
        printf("SKIP: %s is absent (set CATTR_GOLDEN)\n", model);
        return 77;
    }
    if (system("command -v chromium >/dev/null 2>&1") != 0) {
        printf("SKIP: chromium is not installed (apt-get install chromium; scripts/deps.sh --test does it)\n");
        return 77;
    }
    char dir[] = "/tmp/cattr-html-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "failed");
    /* a prompt with characters that must be escaped */
    snprintf(cmd, sizeof cmd,
             "'%s' explain-llm '%s' --prompt 'The <b>capital</b> of \"France\" & Co is' --target ' Paris' "
             "--method feature-ablation --quiet --output %s/a.json --html %s/a.html 2>%s/cattr.log",
             CATTR_CLI, model, dir, dir, dir);
    CHECK(system(cmd) == 0, "failed");
    snprintf(cmd, sizeof cmd,
             "cd %s && timeout 120 chromium --headless --no-sandbox --disable-gpu --user-data-dir=%s/profile "
             "--window-size=1000,600 --screenshot=%s/shot.png file://%s/a.html >chrome1.log 2>&1",
             dir, dir, dir, dir);
    CHECK(system(cmd) == 0, "failed");
    snprintf(cmd, sizeof cmd,
             "cd %s && timeout 120 chromium --headless --no-sandbox --disable-gpu --user-data-dir=%s/profile "
             "--dump-dom file://%s/a.html >dom.html 2>chrome2.log",
             dir, dir, dir);
    CHECK(system(cmd) == 0, "failed");

    char path[8192];
    snprintf(path, sizeof path, "%s/shot.png", dir);
    long w = 0, h = 0, ink = 0;
    int colours = 0;
    CHECK(png_stats(path, &w, &h, &ink, &colours) == 0, "failed");
    printf("screenshot %ldx%ld: %ld non-background pixels, %d+ colours\n", w, h, ink, colours);
    CHECK(w > 0 && h > 0, "failed");
    CHECK(ink > w * h / 100, "a blank screenshot"); /* not blank */
    CHECK(colours >= 8, "a flat image"); /* text and heatmap cells, not one flat colour */

    snprintf(path, sizeof path, "%s/dom.html", dir);
    char *dom = slurp(path, NULL);
    snprintf(path, sizeof path, "%s/a.json", dir);
    char *js = slurp(path, NULL);
    CHECK(dom && js, "failed");
    cJSON *j = js ? cJSON_Parse(js) : NULL;
    CHECK(j != NULL, "failed");
    int n_tok = 0;
    const char *keys[2] = {"input_tokens", "output_tokens"};
    for (int k = 0; k < 2 && j && dom; k++) {
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, keys[k]), *it;
        CHECK(cJSON_IsArray(arr) && cJSON_GetArraySize(arr) > 0, "failed");
        cJSON_ArrayForEach(it, arr) {
            char want[1024];
            displayed(cJSON_GetStringValue(it) ? cJSON_GetStringValue(it) : "", want, sizeof want);
            if (!strstr(dom, want)) printf("token '%s' (shown as '%s') is not in the rendered page\n", it->valuestring, want);
            CHECK(strstr(dom, want) != NULL, "failed");
            n_tok++;
        }
    }
    CHECK(dom && strstr(dom, "<b>") == NULL, "the prompt's markup became markup"); /* it must stay text */
    printf("%d tokens found in the rendered page\n", n_tok);
    cJSON_Delete(j);
    free(dom);
    free(js);

    /* explain-context's page: every source's text and the question, escaped, in the rendered DOM; not blank */
    snprintf(cmd, sizeof cmd,
             "printf 'The sky is <green> today. Birds fly low.' > %s/d1.txt && printf 'The sea is loud & deep.' > "
             "%s/d2.txt && '%s' explain-context '%s' --question 'What colour is the <sky>?' --context %s/d1.txt "
             "--context %s/d2.txt --answer ' Green' --sources sentences --quiet --json %s/c.json --html %s/c.html "
             "2>%s/cattr2.log", dir, dir, CATTR_CLI, model, dir, dir, dir, dir, dir);
    CHECK(system(cmd) == 0, "explain-context --html failed");
    snprintf(cmd, sizeof cmd,
             "cd %s && timeout 120 chromium --headless --no-sandbox --disable-gpu --user-data-dir=%s/profile "
             "--window-size=1000,600 --screenshot=%s/shot2.png file://%s/c.html >chrome3.log 2>&1 && timeout 120 "
             "chromium --headless --no-sandbox --disable-gpu --user-data-dir=%s/profile --dump-dom file://%s/c.html "
             ">dom2.html 2>chrome4.log", dir, dir, dir, dir, dir, dir);
    CHECK(system(cmd) == 0, "chromium on the context page failed");
    snprintf(path, sizeof path, "%s/shot2.png", dir);
    ink = 0, colours = 0;
    CHECK(png_stats(path, &w, &h, &ink, &colours) == 0 && ink > w * h / 100 && colours >= 8,
          "the context page's screenshot is blank or flat");
    snprintf(path, sizeof path, "%s/dom2.html", dir);
    dom = slurp(path, NULL);
    static const char *const want2[] = {"The sky is &lt;green&gt; today.", "Birds fly low.", "The sea is loud &amp; deep.",
                                        "What colour is the &lt;sky&gt;?", "Green"};
    for (size_t k = 0; dom && k < sizeof want2 / sizeof *want2; k++) {
        if (!strstr(dom, want2[k])) printf("'%s' is not in the rendered context page\n", want2[k]);
        CHECK(strstr(dom, want2[k]) != NULL, "a source or the question is missing from the page");
    }
    CHECK(dom && !strstr(dom, "<green>") && !strstr(dom, "<sky>"), "the documents' markup became markup");
    printf("the context page: screenshot %ldx%ld, %ld non-background pixels; every source in the DOM\n", w, h, ink);
    free(dom);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("could not remove %s\n", dir);
    return g_failures ? 1 : 0;
}
