/* fuzz_tokenizer_json.c - libFuzzer harness: a tokenizer.json (cx_tokenizer_load's parser) from arbitrary bytes; an
 * accepted tokenizer then encodes and decodes a fixed text. */
#include "io/tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cx_tokenizer *t = NULL;
    if (cx_tokenizer_load_json((const char *)data, size, "fuzz/tokenizer.json", &t) != CATTR_OK) return 0;
    static const char text[] = "Hello, world! <|im_start|> 123 caf\xc3\xa9  \n\tx";
    int64_t *ids = NULL, n = 0;
    if (cx_tokenizer_encode(t, text, sizeof text - 1, true, &ids, &n) == CATTR_OK) {
        char *back = NULL;
        if (cx_tokenizer_decode(t, ids, n, false, &back) == CATTR_OK) free(back);
        if (cx_tokenizer_decode(t, ids, n, true, &back) == CATTR_OK) free(back);
    }
    free(ids);
    (void)cx_tokenizer_id_to_token(t, 0);
    cx_tokenizer_free(t);
    return 0;
}
