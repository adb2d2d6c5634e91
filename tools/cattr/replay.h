/* replay.h - what `cattr replay` and `cattr compare` share: the walk over golden cases and the cross-device tally. */
#ifndef CATTR_REPLAY_H
#define CATTR_REPLAY_H

#include "cli.h"

/* The differences between two devices, per method (compare mode). */
#define CMP_MAX_METHODS 64
typedef struct cmp_tally {
    const char *device_b;  /* the second device; NULL: plain replay against the golden numbers */
    double max_rel;        /* --max-rel: a case above it fails (0: report only) */
    struct {
        char method[64];
        int cases;
        double max_abs, max_rel;
        char worst_case[160];
    } m[CMP_MAX_METHODS];
    int n_methods;
    void *json_rows; /* cJSON array of {case, method, max_abs, max_rel, numel} */
} cmp_tally;

typedef struct replay_opts {
    cattr_dtype dtype;
    int runs;
    int passed, failed, skipped;
    const char *tokenizer;
    const char *device;
    cmp_tally *cmp; /* compare mode when not NULL */
} replay_opts;

/* Replays (or, with o->cmp, compares) a case folder, a folder of cases, an LLM golden folder or index, or a tokenizer
 * .jsonl. Returns -1 on a usage or I/O error (printed). */
int replay_path(const char *path, replay_opts *o);

int replay_llm_index(const char *path, replay_opts *o);
int replay_tokenizer(const char *path, const char *tokdir, int *passed, int *failed);

/* Records the difference between results a (device A) and b (device B) of n values for a case; prints
 * "<case> <method> max_abs=<e> max_rel=<e>" and counts it as passed or failed against o->cmp->max_rel. max_rel is
 * max|a - b| / max|a| (relative to the largest attribution, so that values near zero do not blow it up). */
void cmp_record(replay_opts *o, const char *case_name, const char *method, const double *a, const double *b,
                int64_t n);

#endif
