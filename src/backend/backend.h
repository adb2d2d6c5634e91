/* backend.h - the backend interface: a table of functions plus a context pointer.
 *
 * A backend owns its memory (host RAM for the CPU, device memory for a GPU). Code outside a backend only holds
 * opaque buffer pointers from alloc() and moves data with copy_in/copy_out. run_op executes one node on buffers the
 * backend owns; shapes are already inferred by the planner.
 */
#ifndef CATTR_BACKEND_H
#define CATTR_BACKEND_H

#include "graph/graph.h"

/* A typed view of one backend buffer. */
typedef struct cx_view {
    cattr_dtype dtype;
    int ndim;
    int64_t shape[CATTR_MAX_DIMS];
    void *data; /* backend memory */
} cx_view;

static inline int64_t cx_view_numel(const cx_view *v) { return cx_numel(v->ndim, v->shape); }

#define CX_BACKEND_VERSION 1

typedef struct cx_backend {
    int version;
    const char *name;
    void *ctx;
    void *(*alloc)(void *ctx, size_t bytes);       /* NULL on failure */
    void (*free)(void *ctx, void *p, size_t bytes); /* accepts NULL */
    cattr_status (*copy_in)(void *ctx, void *dst, const void *host_src, size_t bytes);
    cattr_status (*copy_out)(void *ctx, void *host_dst, const void *src, size_t bytes);
    cattr_status (*memset_zero)(void *ctx, void *dst, size_t bytes);
    /* Runs node `n` reading `in` (n->n_in views; absent optional inputs have data == NULL) into `out`. */
    cattr_status (*run_op)(void *ctx, const cg_node *n, const cx_view *in, cx_view *out);
    cattr_status (*synchronize)(void *ctx);
    size_t (*peak_memory)(void *ctx);    /* high-water mark of bytes allocated */
    void (*reset_peak)(void *ctx);
    bool (*supports_op)(void *ctx, cg_op op, cattr_dtype dtype);
    /* true when buffers are plain host memory: graph constants of the compute dtype are then used in place (never
     * written), not copied, so a model's weights exist once */
    bool host_memory;
} cx_backend;

/* The CPU backend (OpenBLAS + OpenMP); process-wide, never freed. */
cx_backend *cx_backend_cpu(void);

#endif
