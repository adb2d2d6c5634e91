/* replay.h - what `cattr replay` and `cattr compare` share: the walk over golden cases and the cross-device tally. */
#ifndef CATTR_REPLAY_H
#define CATTR_REPLAY_H

#include "cli.h"
#include "tally.h"

typedef struct replay_opts {
    cattr_dtype dtype;
    int runs;
    int passed, failed, skipped;
    const char *tokenizer;
    const char *device;
    cmp_tally *cmp; /* compare mode when not NULL */
    bool digest;    /* print each case's result bits as a hash (--digest) */
} replay_opts;

/* Replays a golden case of Captum's metrics (case.json's "kind": "metric"; its parsed JSON c, read from `file`):
 * prints PASS / FAIL and counts it in o. Returns 0, or -1 on a usage or I/O error (printed). */
/* The largest |a - e| over the elements (*err; NaN counts as infinite) and what a case allows: rtol x the largest |e|
 * + atol (*allowed). */
void replay_compare(const cattr_tensor *a, const cattr_tensor *e, double rtol, double atol, double *err,
                    double *allowed);
struct cJSON;
int replay_metric_case(const char *dir, const char *file, const struct cJSON *c, replay_opts *o);

/* Replays (or, with o->cmp, compares) a case folder, a folder of cases, an LLM golden folder or index, or a tokenizer
 * .jsonl. Returns -1 on a usage or I/O error (printed). */
int replay_path(const char *path, replay_opts *o);

int replay_llm_index(const char *path, replay_opts *o);
int replay_tokenizer(const char *path, const char *tokdir, int *passed, int *failed);

#endif
