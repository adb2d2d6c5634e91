/* fuzz_requests.c - libFuzzer harness: `cattr explain-llm --prompts` corpus mode's parsers (tools/cattr/explain_llm.c)
 * on arbitrary bytes: a requests line (its fields and the request's form) and a results file read for a rerun (the
 * ids of its records). */
#include "cli.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return cli_corpus_fuzz(data, size); }
