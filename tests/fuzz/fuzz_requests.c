/* fuzz_requests.c - libFuzzer harness: the command's resume files on arbitrary bytes. `cattr explain-llm --prompts`
 * corpus mode's parsers (tools/cattr/explain_llm.c): a requests line (its fields and the request's form) and a results
 * file read for a rerun (the ids of its records); and `cattr explain --batch-size` dataset mode's progress file
 * (tools/cattr/explain.c, OUTPUT.part.json). */
#include "cli.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cli_corpus_fuzz(data, size);
    return cli_progress_fuzz(data, size);
}
