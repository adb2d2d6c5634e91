/* fuzz_chat_frame.c - libFuzzer harness: a checkpoint's tokenizer_config.json (the chat template that
 * cattr_llm_chat_frame recognises, cx_chat_frame_parse) from arbitrary bytes; an accepted one gives a prefix and a
 * suffix that holds the question. */
#include "attr/llm_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *pre = NULL, *post = NULL;
    if (cx_chat_frame_parse((const char *)data, size, "fuzz/tokenizer_config.json", "Q?", &pre, &post) == CATTR_OK &&
        (!pre || !post || !strstr(post, "Q?")))
        abort();
    free(pre);
    free(post);
    return 0;
}
