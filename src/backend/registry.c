/* registry.c - the one place where a device name becomes a backend. Nothing outside this file and the backends'
 * own files names a backend; everything else asks cx_backend_by_name (the API's `device` parameters end here). */
#include "backend/backend.h"
#include "backend/check/check_backend.h"
#include "backend/cpu/cpu_backend.h"
#if defined(CATTR_HAVE_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif

#include <stdlib.h>
#include <string.h>

typedef struct device_entry {
    const char *name;
    cx_backend *(*get)(void);
    const char *what;
} device_entry;

static const device_entry g_devices[] = {
    {"cpu", cx_backend_cpu_get, "OpenBLAS and OpenMP kernels (the default)"},
    {"cpu-check", cx_backend_check_get, "scalar reference kernels behind protected memory (slow; for testing)"},
};
#define N_DEVICES (int)(sizeof g_devices / sizeof g_devices[0])

#if defined(CATTR_HAVE_CUDA)
const char *cx_backend_names(void) { return "cpu, cpu-check, cuda, cuda:N"; }
#else
const char *cx_backend_names(void) { return "cpu, cpu-check"; }
#endif

cattr_status cx_backend_by_name(const char *name, cx_backend **out) {
    *out = NULL;
    if (!name || !*name) name = "cpu";
    for (int i = 0; i < N_DEVICES; i++)
        if (strcmp(name, g_devices[i].name) == 0) {
            *out = g_devices[i].get();
            return CATTR_OK;
        }
    if (strcmp(name, "cuda") == 0 || strncmp(name, "cuda:", 5) == 0) {
#if defined(CATTR_HAVE_CUDA)
        int ordinal = 0;
        if (name[4] == ':') {
            char *end = NULL;
            long v = strtol(name + 5, &end, 10);
            if (!name[5] || *end || v < 0 || v > 1000)
                return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "device '%s': expected cuda or cuda:N with N a device number",
                               name);
            ordinal = (int)v;
        }
        return cx_backend_cuda_get(ordinal, out);
#else
        return cx_fail(CATTR_ERR_UNSUPPORTED, "device '%s': this build has no CUDA backend (devices: %s)", name,
                       cx_backend_names());
#endif
    }
    return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "unknown device '%s' (devices: %s)", name, cx_backend_names());
}
