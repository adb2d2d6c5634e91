/* tally.c - the cross-device tally of `cattr compare` (see tally.h). */
#include "tally.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

void cmp_record(cmp_tally *t, int *passed, int *failed, const char *case_name, const char *method, const double *a, const double *b,
                int64_t n) {
    double max_abs = 0, max_a = 0;
    bool nan = false;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (isnan(a[i]) != isnan(b[i]) || (isnan(d) && !(isnan(a[i]) && isnan(b[i])))) nan = true;
        if (d > max_abs) max_abs = d;
        if (fabs(a[i]) > max_a) max_a = fabs(a[i]);
    }
    double max_rel = max_a > 0 ? max_abs / max_a : (max_abs > 0 ? INFINITY : 0);
    if (nan) max_abs = max_rel = INFINITY;
    bool fail = nan || (t->max_rel > 0 && !(max_rel <= t->max_rel));
    printf("%s %s %s max_abs=%.3e max_rel=%.3e\n", fail ? "FAIL" : "PASS", case_name, method, max_abs, max_rel);
    if (fail) (*failed)++;
    else (*passed)++;
    int k = 0;
    while (k < t->n_methods && strcmp(t->m[k].method, method)) k++;
    if (k == t->n_methods && k < CMP_MAX_METHODS) {
        memset(&t->m[k], 0, sizeof t->m[k]);
        snprintf(t->m[k].method, sizeof t->m[k].method, "%s", method);
        t->n_methods++;
    }
    if (k < t->n_methods) {
        t->m[k].cases++;
        if (max_abs > t->m[k].max_abs) t->m[k].max_abs = max_abs;
        if (max_rel >= t->m[k].max_rel) {
            t->m[k].max_rel = max_rel;
            snprintf(t->m[k].worst_case, sizeof t->m[k].worst_case, "%s", case_name);
        }
    }
    cJSON *row = cJSON_CreateObject();
    if (row) {
        cJSON_AddStringToObject(row, "case", case_name);
        cJSON_AddStringToObject(row, "method", method);
        cJSON_AddNumberToObject(row, "numel", (double)n);
        cJSON_AddNumberToObject(row, "max_abs", isfinite(max_abs) ? max_abs : -1);
        cJSON_AddNumberToObject(row, "max_rel", isfinite(max_rel) ? max_rel : -1);
        cJSON_AddItemToArray(t->json_rows, row);
    }
}

