/* fuzz_checkpoint.c - libFuzzer harness: a Hugging Face checkpoint folder (cattr_llm_load) made from arbitrary bytes,
 * then, when it loads, one gradient attribution and one greedy token on it.
 *
 * The input is a small archive of the folder's files: records of [u8 file][u32 little-endian length][bytes], file
 * 0 config.json, 1 model.safetensors, 2 model.safetensors.index.json, 3 model-00001-of-00002.safetensors,
 * 4 model-00002-of-00002.safetensors, 5 tokenizer_config.json (other values are skipped). The files are written to a
 * private folder under $TMPDIR (default /tmp) for each input. tests/fuzz/make_seeds.py writes seeds of this form. */
#include "cattr.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const g_names[] = {"config.json",
                                      "model.safetensors",
                                      "model.safetensors.index.json",
                                      "model-00001-of-00002.safetensors",
                                      "model-00002-of-00002.safetensors",
                                      "tokenizer_config.json"};
#define N_FILES (int)(sizeof g_names / sizeof g_names[0])
static char g_dir[4096];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/cattr-fuzz-ckpt-XXXXXX", tmp);
    if (!mkdtemp(g_dir)) {
        perror("fuzz_checkpoint: mkdtemp");
        exit(1);
    }
    return 0;
}

static void path_of(int f, char *buf, size_t size) { snprintf(buf, size, "%s/%s", g_dir, g_names[f]); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[4200];
    for (int f = 0; f < N_FILES; f++) {
        path_of(f, path, sizeof path);
        unlink(path);
    }
    size_t at = 0;
    while (at + 5 <= size) {
        int f = data[at];
        uint32_t len = (uint32_t)data[at + 1] | (uint32_t)data[at + 2] << 8 | (uint32_t)data[at + 3] << 16 |
                       (uint32_t)data[at + 4] << 24;
        at += 5;
        if (len > size - at) len = (uint32_t)(size - at);
        if (f < N_FILES) {
            path_of(f, path, sizeof path);
            FILE *fp = fopen(path, "wb");
            if (!fp) abort();
            if (len && fwrite(data + at, 1, len, fp) != len) abort();
            fclose(fp);
        }
        at += len;
    }
    cattr_llm *m = NULL;
    if (cattr_llm_load(g_dir, &m) != CATTR_OK) return 0;
    int64_t V = cattr_llm_vocab_size(m);
    int64_t prompt[2] = {0, V > 1 ? 1 : 0}, target[1] = {V > 2 ? 2 : 0};
    double seq[2], tok[2], lp[1];
    cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION);
    p.max_memory = (size_t)64 << 20;
    cattr_llm_call c = cattr_llm_call_make(prompt, 2, target, 1);
    (void)cattr_llm_attribute(m, &p, &c, seq, tok, lp, NULL);
    int64_t *gen = NULL, ng = 0;
    if (cattr_llm_generate(m, CATTR_FLOAT32, prompt, 2, 1, &gen, &ng) == CATTR_OK) free(gen);
    cattr_llm_free(m);
    return 0;
}
