/* llm_req.h - one language-model attribution request of `cattr explain-llm` (the command line's, or a line of a
 * corpus's requests file) and its result: shared by explain_llm.c (the command, one request) and corpus.c (corpus
 * mode, a request per line). */
#ifndef CATTR_CLI_LLM_REQ_H
#define CATTR_CLI_LLM_REQ_H

#include "cattr.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What one attribution is asked for: the command line's options, or a line of a --prompts file over them. */
typedef struct llm_req {
    const char *prompt, *prompt_ids, *target, *target_ids, *baseline, *tmpl;
    const char *segments; /* NULL or "tokens" (each token), words, sentences, lines, or a FILE.json of spans */
    const char *slots[16], *slot_bases[16];
    int n_slots, n_slot_bases;
    int max_new;
} llm_req;

/* A request's tokens and results. */
typedef struct llm_out {
    char *filled; /* the template with its slots filled */
    int64_t *ids, *tg, T, n, baseline_token;
    int64_t n_ids; /* the prompt's tokens (T is the columns: the tokens, the template's slots or the segments) */
    bool generated;
    double *seq, *tok, *lp, *delta;
    char **in_tok, **out_tok;
    int steps_used; /* layer-ig's steps (the count --steps auto reached) */
    /* --segments: each token's segment [n_ids], each segment's bytes [start, end) in the prompt text, and the texts
     * of all tokens [n_ids] (in_tok holds the segments' texts) */
    int64_t *seg, *seg_start, *seg_end;
    char **ids_tok;
    const char *seg_kind; /* the request's --segments (borrowed) */
} llm_out;

void llm_out_free(llm_out *o);
/* A JSON list of spans of `text` (--segments FILE.json's, a document's in explain-context's --sources FILE.json):
 * strings that spell it, or [start, end) character (code point) spans of it, into byte spans (*spans, 2 per span,
 * malloc'ed; *n_spans). Messages begin with `what` ("--segments FILE") and name the text as `whole` ("the prompt").
 * Returns CLI_OK, or CLI_USAGE with a message in err. */
int llm_segments_json(const char *json, const char *what, const char *whole, const char *text, int64_t **spans,
                      int64_t *n_spans, char *err, size_t size);
/* The message of a failed step in err: `what`, and with `lib` the library's error after it. Returns `code`. */
int llm_req_fail(char *err, size_t size, int code, const char *what, bool lib);
/* Checks a request's form (CLI_USAGE with a message in err when it is not one attribution). */
int llm_req_check(const cattr_attr_params *p, const llm_req *r, char *err, size_t size);
/* Tokens of the prompt and the target (generated greedily when none is given), the baseline, result arrays. Returns
 * CLI_OK, or CLI_USAGE / CLI_FAIL with a message in err. */
int llm_req_prepare(cattr_llm *m, const cattr_attr_params *p, const llm_req *r, llm_out *o, char *err, size_t size);
/* The attribution of a prepared request (into o's arrays; seq, tok, lp and delta also into the given ones when not
 * NULL). */
cattr_status llm_req_attribute(cattr_llm *m, const cattr_attr_params *p, const llm_req *r, llm_out *o, double *seq,
                               double *tok, double *lp, double *delta);
/* The display texts of the prompt and target tokens. */
int llm_req_texts(const cattr_llm *m, const llm_req *r, llm_out *o, char *err, size_t size);
/* The JSON of a result: input_tokens, input_ids, output_tokens, output_ids, seq_attr, token_attr, target_logprobs,
 * method, args, convergence_delta. */
cJSON *llm_result_json(const cattr_attr_params *p, const llm_out *o);
/* The method of a --method value (the six language-model methods), or -1. */
int llm_method_arg(const char *v);

/* Corpus mode (corpus.c): `--prompts FILE.jsonl --output RESULTS.jsonl`, on every MPI rank. `options` is the
 * command's options that shape a result (the results file's header records them; a rerun must give the same). */
int llm_corpus(cattr_llm *m, const cattr_attr_params *p0, const llm_req *r0, const char *dir, const char *prompts,
               const char *output, const cJSON *options, bool quiet);

#endif
