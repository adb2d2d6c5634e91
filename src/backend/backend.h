/* backend.h - the backend interface: a table of functions plus a context pointer.
 *
 * A backend owns its memory (host RAM for the CPU, device memory for a GPU). Code outside a backend only holds
 * opaque buffer pointers from alloc() and moves data with copy_in/copy_out. run_op executes one node on buffers the
 * backend owns; shapes are already inferred by the planner.
 */
#ifndef CATTR_BACKEND_H
#define CATTR_BACKEND_H

#include "graph/graph.h"
#include "ops/ops.h"

#define CX_BACKEND_VERSION 2

/* What a backend can do beyond exact float32/float64 arithmetic (asked through the table, never by name). */
typedef enum cx_cap {
    CX_CAP_BF16_GEMM = 0, /* MatMul nodes with a.bf16: bfloat16 inputs, float32 accumulation (precision "high") */
    CX_CAP_TF32 = 1,      /* TensorFloat-32 products */
    /* a checkpoint's 16-bit matrices (CX_BFLOAT16, CX_FLOAT16 constants) read as stored, widened exactly by the
     * kernels, in a float32 call: as B of MatMul and Gemm (trans_a 0) and as the data of Gather; without it (or for
     * any other reader) the planner gives the kernels a float32 (float64) copy */
    CX_CAP_STORED_WEIGHTS = 2,
    CX_CAP_COUNT
} cx_cap;

typedef struct cx_backend {
    int version;
    const char *name;
    void *ctx;
    void *(*alloc)(void *ctx, size_t bytes);       /* NULL on failure */
    void (*free)(void *ctx, void *p, size_t bytes); /* accepts NULL */
    cattr_status (*copy_in)(void *ctx, void *dst, const void *host_src, size_t bytes);
    cattr_status (*copy_out)(void *ctx, void *host_dst, const void *src, size_t bytes);
    cattr_status (*memset_zero)(void *ctx, void *dst, size_t bytes);
    cattr_status (*copy_dev)(void *ctx, void *dst, const void *src, size_t bytes); /* backend to backend memory */
    /* Runs node `n` reading `in` (n->n_in views; absent optional inputs have data == NULL) into `out`. */
    cattr_status (*run_op)(void *ctx, const cg_node *n, const cx_view *in, cx_view *out);
    cattr_status (*synchronize)(void *ctx);
    size_t (*peak_memory)(void *ctx);    /* high-water mark of bytes allocated */
    void (*reset_peak)(void *ctx);
    bool (*supports_op)(void *ctx, cg_op op, cattr_dtype dtype);
    /* true when buffers are plain host memory: graph constants of the compute dtype are then used in place (never
     * written), not copied, so a model's weights exist once */
    bool host_memory;
    bool (*has_cap)(void *ctx, cx_cap cap);
    /* Forgets whatever the backend derived from host constant memory `host` (e.g. packed bfloat16 weights), before
     * the caller frees it. May be NULL. */
    void (*forget_host)(void *ctx, const void *host);
    /* The bytes this device can still allocate, for the memory budget (cx_memory_budget), or SIZE_MAX when it is the
     * host's memory (the budget then comes from the host). May be NULL: the host's. */
    size_t (*free_memory)(void *ctx);
} cx_backend;

/* The one place that maps a device name to a backend (src/backend/registry.c): "cpu" (NULL or "" too), "cpu-check",
 * "cuda" / "cuda:N" in builds with CUDA. Backends are process-wide and never freed. Errors:
 * CATTR_ERR_INVALID_ARGUMENT (an unknown name; the message lists this build's devices), CATTR_ERR_UNSUPPORTED (a
 * known device this build or machine lacks). */
cattr_status cx_backend_by_name(const char *name, cx_backend **out);

/* The devices of this build, comma-separated ("cpu, cpu-check"). */
const char *cx_backend_names(void);

#endif
