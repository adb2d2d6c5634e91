/* fuzz_segments.c - libFuzzer harness: a prompt's segments (cattr_llm_token_spans, cattr_llm_segments) over arbitrary
 * text with the golden Qwen3 tokenizer, and explain-llm's --segments FILE.json reader (llm_segments_json) on
 * arbitrary JSON. Byte 0 picks the form (tokens, words, sentences, lines, or JSON spans: then the JSON runs up to the
 * first byte 0x01 and the text follows); the rest is the text. Checks: every token has a segment, the ids go up
 * from 0 by at most 1 in token order, and n_segments is the last id + 1. The checkpoint is CATTR_FUZZ_CHECKPOINT,
 * default $CATTR_GOLDEN/llm/qwen3-tiny (CATTR_GOLDEN default ../shared/golden). */
#include "cattr.h"
#include "llm_req.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cattr_llm *g_m;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    char path[4096];
    const char *p = getenv("CATTR_FUZZ_CHECKPOINT");
    if (!p) {
        const char *g = getenv("CATTR_GOLDEN") ? getenv("CATTR_GOLDEN") : "../shared/golden";
        snprintf(path, sizeof path, "%s/llm/qwen3-tiny", g);
        p = path;
    }
    if (cattr_llm_load(p, &g_m) != CATTR_OK) {
        fprintf(stderr, "fuzz_segments: cannot load %s: %s (set CATTR_FUZZ_CHECKPOINT or CATTR_GOLDEN)\n", p,
                cattr_last_error());
        exit(1);
    }
    return 0;
}

static void check(const char *text, const char *kind, const int64_t *spans, int64_t n_spans) {
    int64_t *ids = NULL, T = 0;
    if (cattr_llm_encode(g_m, text, &ids, &T) != CATTR_OK || T < 1) {
        free(ids);
        return;
    }
    int64_t *seg = malloc((size_t)T * sizeof *seg), G = -1;
    if (seg && cattr_llm_segments(g_m, text, ids, T, kind, spans, n_spans, seg, &G) == CATTR_OK) {
        if (seg[0] != 0 || G < 1 || G > T || seg[T - 1] != G - 1) abort();
        for (int64_t t = 1; t < T; t++)
            if (seg[t] < seg[t - 1] || seg[t] > seg[t - 1] + 1) abort();
    }
    free(seg);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    char *buf = malloc(size);
    if (!buf) return 0;
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = 0; /* the text stops at its first NUL */
    static const char *kinds[] = {"tokens", "words", "sentences", "lines"};
    int form = data[0] % 5;
    if (form < 4) {
        check(buf, kinds[form], NULL, 0);
    } else {
        char *sep = strchr(buf, 1);
        const char *text = sep ? sep + 1 : "";
        if (sep) *sep = 0;
        int64_t *spans = NULL, n = 0;
        char err[512];
        if (llm_segments_json(buf, "fuzz.json", "the prompt", text, &spans, &n, err, sizeof err) == 0) check(text, "spans", spans, n);
        free(spans);
    }
    free(buf);
    return 0;
}
