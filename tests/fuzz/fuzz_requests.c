/* fuzz_requests.c - libFuzzer harness: the command's resume files on arbitrary bytes. `cattr explain-llm --prompts`
 * corpus mode's parsers (tools/cattr/corpus.c): the input as a requests file (each line's key, id checks and request
 * fields) and as a results file read for a rerun (its header checked against a run's, the ids and request hashes of
 * its records, a torn last line dropped: in a temporary file); `cattr explain-context --requests`' line parser (the
 * documents and their spans: files are not read here); and `cattr explain --batch-size` dataset mode's progress
 * file (tools/cattr/explain.c, OUTPUT.part.json) checked against a run's identity; `cattr serve`'s request decoder
 * (tools/cattr/serve_req.c: a :predict and an :explain body, for a model of one input and of two). */
#include "cli.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cli_corpus_fuzz(data, size);
    cli_context_fuzz(data, size);
    cli_serve_fuzz(data, size);
    return cli_progress_fuzz(data, size);
}
