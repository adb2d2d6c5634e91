/* corpus.h - corpus mode of the language-model commands (corpus.c): a requests file of one JSON object per line, a
 * results file of one record per line, appended as each finishes, resumed by a rerun, spread over MPI ranks. The
 * command supplies what answers one request; corpus.c does the files, the ids, the resumption and the ranks. */
#ifndef CATTR_CLI_CORPUS_H
#define CATTR_CLI_CORPUS_H

#include "cattr.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* Answers one request line (rq: the parsed object, its "id" included): *rec the record (a new object; corpus.c adds
 * "id" and "request_hash"). Returns CLI_OK, or CLI_USAGE (a bad request) / CLI_FAIL with the message in err and, where
 * the library failed, its status in *ast. Runs on every rank, one request at a time per rank. */
typedef int (*corpus_answer_fn)(void *user, const cJSON *rq, cJSON **rec, cattr_status *ast, char *err, size_t size);

typedef struct corpus_job {
    const char *command; /* "explain-llm", "explain-context": the results file's header records it */
    corpus_answer_fn answer;
    void *user;
} corpus_job;

/* Whether every field of obj is one of the n names in known; else false with "unknown field 'NAME' (hint)" in err. */
bool cli_json_known_fields(const cJSON *obj, const char *const *known, size_t n, const char *hint, char *err,
                           size_t size);

/* The run over `requests` into `output` (every rank, collectively). `dir` (the checkpoint) is recorded by its
 * fingerprint and `options` (the command's options that shape a result) as they are; a rerun must give the same.
 * Returns the exit code (CLI_FAIL when a request failed; its error record is in the output). */
int cli_corpus_run(const corpus_job *job, const char *dir, const char *requests, const char *output,
                   const cJSON *options, bool quiet);

#endif
