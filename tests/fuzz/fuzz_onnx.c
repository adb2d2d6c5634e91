/* fuzz_onnx.c - libFuzzer harness: an ONNX model (cattr_model_load_onnx's importer) from arbitrary bytes, then what
 * `cattr info` does with it (cattr_model_describe: shape inference for the declared input shapes) and, where the
 * plan is small (256 KiB), a forward pass on zero inputs (the kernels on crafted attributes and constants). */
#include "models/model.h"
#include "exec/plan.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* the default device */
static cx_backend *cx_test_backend(void) {
    cx_backend *be = NULL;
    if (cx_backend_by_name(NULL, &be) != CATTR_OK) {
        abort();
    }
    return be;
}


#define MAX_PLAN_BYTES ((size_t)256 << 10) /* small: the kernels run under coverage instrumentation */

static void forward(const cattr_model *m) {
    const cg_graph *g = m->g;
    int n = g->n_inputs;
    if (n > 16) return;
    int nd[16];
    int64_t sh[16][CATTR_MAX_DIMS];
    cattr_dtype dt[16];
    void *host[16] = {0};
    for (int i = 0; i < n; i++) {
        nd[i] = m->in_ndim[i];
        if (nd[i] < 0) return;
        int64_t numel = 1;
        for (int d = 0; d < nd[i]; d++) {
            sh[i][d] = m->in_shape[i][d] < 0 ? 1 : m->in_shape[i][d];
            if (sh[i][d] > (1 << 16) || (numel *= sh[i][d] ? sh[i][d] : 1) > (1 << 16)) return;
        }
        dt[i] = m->in_dtype[i] == CATTR_INT64 ? CATTR_INT64 : CATTR_FLOAT32;
    }
    cx_consts *c = NULL;
    cx_plan *p = NULL;
    int outv = cx_model_output(m);
    if (cx_consts_new(cx_test_backend(), CATTR_FLOAT32, &c) == CATTR_OK &&
        cx_plan_new(g, c, false, nd, (const int64_t(*)[CATTR_MAX_DIMS])sh, dt, &outv, 1, &p) == CATTR_OK &&
        cx_plan_bytes(p) <= MAX_PLAN_BYTES) {
        const cx_view *v = cx_plan_view(p, outv);
        size_t ob = 1;
        for (int d = 0; d < v->ndim; d++) ob *= (size_t)v->shape[d];
        ob *= cattr_dtype_size(v->dtype);
        void *out = ob <= MAX_PLAN_BYTES ? calloc(1, ob ? ob : 1) : NULL;
        bool ok = out != NULL;
        for (int i = 0; i < n && ok; i++) {
            size_t b = cattr_dtype_size(dt[i]);
            for (int d = 0; d < nd[i]; d++) b *= (size_t)sh[i][d];
            ok = (host[i] = calloc(1, b ? b : 1)) != NULL;
        }
        if (ok) (void)cx_plan_run(p, (const void *const *)host, &out);
        free(out);
    }
    for (int i = 0; i < n; i++) free(host[i]);
    cx_plan_free(p);
    cx_consts_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cattr_model *m = NULL;
    if (cx_model_load_onnx_buffer(data, size, "fuzz.onnx", &m) != CATTR_OK) return 0;
    size_t need = cattr_model_describe(m, NULL, 0);
    char *text = malloc(need + 1);
    if (text) {
        size_t got = cattr_model_describe(m, text, need + 1);
        if (got != need || strlen(text) != need) abort(); /* snprintf semantics */
        free(text);
    }
    forward(m);
    cattr_model_free(m);
    return 0;
}
