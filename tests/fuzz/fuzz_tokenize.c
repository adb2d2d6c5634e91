/* fuzz_tokenize.c - libFuzzer harness: the real Qwen3 tokenizer encoding arbitrary bytes (refused unless valid UTF-8)
 * and decoding arbitrary ids (the bytes read as little-endian int32, so out-of-range and negative ids occur).
 * The tokenizer is the golden checkpoint's: CATTR_FUZZ_TOKENIZER names a tokenizer.json or a checkpoint folder,
 * default $CATTR_GOLDEN/llm/qwen3-tiny (CATTR_GOLDEN default ../shared/golden). */
#include "io/tokenizer.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cx_tokenizer *g_tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    char path[4096];
    const char *p = getenv("CATTR_FUZZ_TOKENIZER");
    if (!p) {
        const char *g = getenv("CATTR_GOLDEN") ? getenv("CATTR_GOLDEN") : "../shared/golden";
        snprintf(path, sizeof path, "%s/llm/qwen3-tiny", g);
        p = path;
    }
    if (cx_tokenizer_load(p, &g_tok) != CATTR_OK) {
        fprintf(stderr, "fuzz_tokenize: cannot load the tokenizer: %s (set CATTR_FUZZ_TOKENIZER or CATTR_GOLDEN)\n",
                cattr_last_error());
        exit(1);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int64_t *ids = NULL, n = 0;
    for (int special = 0; special < 2; special++) {
        if (cx_tokenizer_encode(g_tok, (const char *)data, size, special, &ids, &n) == CATTR_OK) {
            char *back = NULL;
            /* byte-level BPE is lossless up to the NFC normalizer, which leaves ASCII alone: decoding the ids of an
             * ASCII text (without NUL) gives the text back */
            if (cx_tokenizer_decode(g_tok, ids, n, false, &back) == CATTR_OK) {
                bool ascii = true;
                for (size_t i = 0; i < size && ascii; i++) ascii = data[i] > 0 && data[i] < 0x80;
                if (ascii && (strlen(back) != size || memcmp(back, data, size))) abort();
                free(back);
            }
        }
        free(ids);
        ids = NULL;
    }
    size_t m = size / 4;
    int64_t *raw = malloc((m ? m : 1) * sizeof *raw);
    if (!raw) return 0;
    for (size_t i = 0; i < m; i++) {
        int32_t v;
        memcpy(&v, data + 4 * i, 4);
        raw[i] = v;
    }
    for (int skip = 0; skip < 2; skip++) {
        char *text = NULL;
        if (cx_tokenizer_decode(g_tok, raw, (int64_t)m, skip, &text) == CATTR_OK) free(text);
    }
    free(raw);
    return 0;
}
