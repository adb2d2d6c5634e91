/* tally.h - the cross-device tally of `cattr compare`: differences per case and per method. */
#ifndef CATTR_TALLY_H
#define CATTR_TALLY_H

#include <stdint.h>

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

/* Records the difference between results a (device A) and b (device B) of n values for a case; prints
 * "<case> <method> max_abs=<e> max_rel=<e>" and counts it in *passed or *failed against t->max_rel. max_rel is
 * max|a - b| / max|a| (relative to the largest attribution, so that values near zero do not blow it up). */
void cmp_record(cmp_tally *t, int *passed, int *failed, const char *case_name, const char *method, const double *a, const double *b,
                int64_t n);

#endif
