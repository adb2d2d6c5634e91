/* serve.h - `cattr serve`'s request decoder (serve_req.c), apart from the HTTP server (serve.c) so that it can be
 * fuzzed without one: the JSON body of a KServe V1 :predict or :explain request becomes the input tensors and the
 * command line of a `cattr explain` (cli_explain_mem), with messages that name the offending field. */
#ifndef CATTR_SERVE_H
#define CATTR_SERVE_H

#include "cattr.h"

#include <stdbool.h>
#include <stddef.h>

#define SERVE_MAXARG 96

typedef struct serve_req {
    int argc;
    char *argv[SERVE_MAXARG]; /* explain's command line: "explain", the model's name, --input @K..., the options */
    cattr_tensor *inputs[CATTR_MAX_INPUTS];
    int n_inputs;
    int64_t n_instances;
    cattr_tensor *side[2]; /* tensors the options name as "@S0", "@S1": baselines (float32), feature_mask (int64) */
    int n_side;
    size_t body_len; /* the body's bytes: no tensor of a list may claim more numbers than it can hold */
} serve_req;

/* Decodes a request body (len bytes, not NUL-terminated) for a model with n_names inputs called names: "instances"
 * (KServe V1: one entry per example: a number or nested lists of numbers for a one-input model, or an object with a
 * value per input name) stacked into float32 tensors [instances, ...]; for an explanation (explain true) also
 * "explanation": {"method": ..., "target": ..., options with cattr explain's names (n_steps, baselines, ...)}.
 * Returns 0, or an HTTP status (400) with the message in err (errsz bytes). *r is freed with serve_req_free
 * either way. */
int serve_decode(const char *body, size_t len, const char *model, const char *const *names, int n_names, bool explain,
                 serve_req *r, char *err, size_t errsz);
/* The same for a binary body: an .npy file (a one-input model) or a .safetensors file (a tensor per input name), the
 * instances along the first dim of every tensor; the explanation's options as the query's n_query keys and values
 * (the same names; a value that reads as JSON is that JSON: "3", "[1,2,2]", "false"; else a string). */
int serve_decode_tensors(const void *body, size_t len, bool safetensors, const char *model, const char *const *names,
                         int n_names, bool explain, const char *const *keys, const char *const *values, int n_query,
                         serve_req *r, char *err, size_t errsz);
void serve_req_free(serve_req *r);
/* A language model's :explain body: one explain-llm request object (corpus mode's fields: prompt, target, method,
 * steps, ...) into *rq (cJSON_Delete it); a "segments" that would name a file on the server is refused. */
struct cJSON;
int serve_decode_llm(const char *body, size_t len, struct cJSON **rq, char *err, size_t errsz);
/* A language model's :predict body: {"instances": [prompt, ...], "max_new_tokens": N} (a prompt a string, or an object
 * {"prompt": ..., "max_new_tokens": ...}; N from 1 to SERVE_MAX_NEW, default 16) into *rq, a list of {"prompt",
 * "max_new_tokens"} objects (cJSON_Delete it). */
#define SERVE_MAX_NEW 4096
int serve_decode_llm_predict(const char *body, size_t len, struct cJSON **rq, char *err, size_t errsz);

/* The explanation options serve_decode takes, comma-separated (for messages and docs). */
const char *serve_known_options(void);

#endif
