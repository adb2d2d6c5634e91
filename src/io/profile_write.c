/* profile_write.c - cattr_profile_end: stops the profiler (core/profile.c) and writes its Chrome trace atomically.
 * It lives in io because core does not include io (cx_write_file_atomic). */
#include "core/profile.h"
#include "io/fileutil.h"

#include <stdlib.h>

cattr_status cattr_profile_end(const char *json_path, char **summary) {
    if (summary) *summary = NULL;
    cx_prof_data *d = NULL;
    CX_CHECK(cx_prof_stop(&d));
    cattr_status st = CATTR_OK;
    if (json_path) st = cx_write_file_atomic(json_path, cx_prof_write_trace, d);
    if (st == CATTR_OK && summary) {
        *summary = cx_prof_summary(d);
        if (!*summary) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory writing the profile summary");
    }
    cx_prof_data_free(d);
    return st;
}
