/* compare.c - `cattr compare`: the same attributions on two devices, and how far apart they are.
 *
 * Runs every golden case under PATH (Captum cases, language-model indexes) on device A and again on device B, and
 * prints per case "<case> <method> max_abs=<e> max_rel=<e>", then the matrix per method (cases, worst absolute and
 * relative difference, the worst case). --json FILE writes the rows and the matrix. --max-rel X makes a case above
 * X a failure (exit 1), so that CI can hold two devices to each other.
 */
#define _POSIX_C_SOURCE 200809L
#include "replay.h"

#include "core/core.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void compare_help(FILE *f) {
    fprintf(f, "usage: cattr compare PATH... [--devices A,B] [--dtype float32|float64] [--max-rel X] [--json FILE]\n"
               "\n"
               "Runs the attributions of golden cases on two devices and prints how far apart they are.\n"
               "  PATH            a Captum case folder or a folder of them; a language-model golden folder or one\n"
               "                  of its *cases.json indexes\n"
               "  --devices A,B   the two devices (default cpu,cpu-check; see cattr info --devices)\n"
               "  --dtype D       float64 (default) | float32\n"
               "  --max-rel X     a case whose max_rel exceeds X fails (exit 1); default 0: report only\n"
               "  --json FILE     also write {devices, dtype, rows: [{case, method, numel, max_abs, max_rel}],\n"
               "                  methods: [{method, cases, max_abs, max_rel, worst_case}]} (-1: infinite or NaN)\n"
               "Output: PASS|FAIL <case> <method> max_abs=<e> max_rel=<e> per case, where max_rel is\n"
               "max|a - b| / max|a| over every value of the results (attributions, then the convergence delta;\n"
               "token_attr for language models), then a table per method. A result that is NaN on one device only\n"
               "counts as infinitely far.\n");
}

int cmd_compare(int argc, char **argv) {
    static char devbuf[256];
    const char *devices = "cpu,cpu-check", *json = NULL;
    cmp_tally tally;
    memset(&tally, 0, sizeof tally);
    replay_opts o = {CATTR_FLOAT64, 0, 0, 0, 0, NULL, NULL, &tally};
    const char *paths[256];
    int np = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            compare_help(stdout);
            return CLI_OK;
        } else if (!strcmp(a, "--devices")) {
            if (++i >= argc) return cli_usage_error("--devices needs two names, such as cpu,cpu-check");
            devices = argv[i];
        } else if (!strcmp(a, "--dtype")) {
            if (++i >= argc) return cli_usage_error("--dtype needs a value");
            if (!strcmp(argv[i], "float64")) o.dtype = CATTR_FLOAT64;
            else if (!strcmp(argv[i], "float32")) o.dtype = CATTR_FLOAT32;
            else return cli_usage_error("--dtype must be float64 or float32, not '%s'", argv[i]);
        } else if (!strcmp(a, "--max-rel")) {
            if (++i >= argc) return cli_usage_error("--max-rel needs a value");
            if (!cli_parse_double(argv[i], &tally.max_rel) || !(tally.max_rel >= 0))
                return cli_usage_error("--max-rel needs a number >= 0, not '%s'", argv[i]);
        } else if (!strcmp(a, "--json")) {
            if (++i >= argc) return cli_usage_error("--json needs a file name");
            json = argv[i];
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("compare: unknown option '%s' (see cattr compare --help)", a);
        } else if (np < 256) {
            paths[np++] = a;
        }
    }
    if (np == 0) {
        compare_help(stderr);
        return CLI_USAGE;
    }
    snprintf(devbuf, sizeof devbuf, "%s", devices);
    char *comma = strchr(devbuf, ',');
    if (!comma || strchr(comma + 1, ','))
        return cli_usage_error("--devices needs exactly two names separated by a comma, not '%s'", devices);
    *comma = 0;
    o.device = devbuf;
    tally.device_b = comma + 1;
    if (!cli_device_arg(o.device) || !cli_device_arg(tally.device_b)) return CLI_USAGE;
    tally.json_rows = cJSON_CreateArray();
    if (!tally.json_rows) return cli_usage_error("out of memory");
    printf("devices: A %s, B %s; %s\n", o.device, tally.device_b, cattr_dtype_name(o.dtype));
    int rc = CLI_OK;
    for (int i = 0; i < np && rc == CLI_OK; i++)
        if (replay_path(paths[i], &o) != 0) rc = CLI_USAGE;
    if (rc == CLI_OK) {
        printf("\n%-34s %6s %11s %11s  %s\n", "method", "cases", "max_abs", "max_rel", "worst case");
        for (int k = 0; k < tally.n_methods; k++)
            printf("%-34s %6d %11.3e %11.3e  %s\n", tally.m[k].method, tally.m[k].cases, tally.m[k].max_abs,
                   tally.m[k].max_rel, tally.m[k].worst_case);
        printf("%d passed, %d failed, %d skipped\n", o.passed, o.failed, o.skipped);
        if (json) {
            cJSON *root = cJSON_CreateObject(), *ms = cJSON_CreateArray();
            cJSON *dv = cJSON_CreateArray();
            cJSON_AddItemToArray(dv, cJSON_CreateString(o.device));
            cJSON_AddItemToArray(dv, cJSON_CreateString(tally.device_b));
            cJSON_AddItemToObject(root, "devices", dv);
            cJSON_AddStringToObject(root, "dtype", cattr_dtype_name(o.dtype));
            cJSON_AddItemToObject(root, "rows", tally.json_rows);
            tally.json_rows = NULL;
            for (int k = 0; k < tally.n_methods; k++) {
                cJSON *m = cJSON_CreateObject();
                cJSON_AddStringToObject(m, "method", tally.m[k].method);
                cJSON_AddNumberToObject(m, "cases", tally.m[k].cases);
                cJSON_AddNumberToObject(m, "max_abs", isfinite(tally.m[k].max_abs) ? tally.m[k].max_abs : -1);
                cJSON_AddNumberToObject(m, "max_rel", isfinite(tally.m[k].max_rel) ? tally.m[k].max_rel : -1);
                cJSON_AddStringToObject(m, "worst_case", tally.m[k].worst_case);
                cJSON_AddItemToArray(ms, m);
            }
            cJSON_AddItemToObject(root, "methods", ms);
            char *text = cJSON_Print(root);
            cattr_status st = text ? cli_write_text_file(json, text)
                                   : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            free(text);
            cJSON_Delete(root);
            if (st != CATTR_OK) rc = cli_error(st, "--json");
        }
        if (rc == CLI_OK && o.failed) rc = CLI_FAIL;
        if (rc == CLI_OK && o.passed == 0) {
            fprintf(stderr, "cattr: compare: no case ran on both devices\n");
            rc = CLI_FAIL;
        }
    }
    cJSON_Delete(tally.json_rows);
    return rc;
}
