/* plan.h - executors over the IR: a planned one (order, liveness, one arena reused across calls, view aliasing)
 * and an eager one (op by op, each value its own allocation, freed at last use). Both run the same backend kernels,
 * so they give bitwise-identical results.
 */
#ifndef CATTR_PLAN_H
#define CATTR_PLAN_H

#include "backend/backend.h"

/* Constants uploaded to a backend in one compute dtype (float constants converted, int64 kept). Shared by every
 * plan of a model; grows lazily when graphs derived from the model add constants. */
typedef struct cx_consts cx_consts;
cattr_status cx_consts_new(cx_backend *be, cattr_dtype dtype, cx_consts **out);
void cx_consts_free(cx_consts *c);
/* The backend the constants live on. */
cx_backend *cx_consts_backend(const cx_consts *c);

typedef struct cx_plan cx_plan;

/* Whether input j of node n only gives the node its output shape or parameters (Reshape's target, Slice's bounds,
 * Expand's, Tile's, Pad's, Resize's, ConstantOfShape's, Range's): the planner folds it from shapes and constants when
 * a call is planned, and the node runs without it. */
bool cx_shape_value_input(const cg_node *n, int j);

/* Plans `outs` (n_outs value ids) of graph g for inputs of the given shapes and dtypes (in graph-input order;
 * in_dtype may be NULL: every input takes the compute dtype of `consts`). Inputs not needed by the outputs may
 * have any shape. The plan borrows g and consts, which must outlive it.
 * Errors: CATTR_ERR_SHAPE (naming the node), CATTR_ERR_NO_MEMORY, CATTR_ERR_UNSUPPORTED. */
cattr_status cx_plan_new(const cg_graph *g, cx_consts *consts, bool eager, const int *in_ndim,
                         const int64_t (*in_shape)[CATTR_MAX_DIMS], const cattr_dtype *in_dtype, const int *outs,
                         int n_outs, cx_plan **out);
void cx_plan_free(cx_plan *p);
/* Lends the plan an arena of at least cx_plan_bytes(p) bytes of backend memory, owned by the caller, who keeps it
 * alive while the plan may run (NULL: the plan allocates its own again). Plans that never run at the same time can
 * share one arena. */
void cx_plan_use_arena(cx_plan *p, void *arena);

/* True when the plan was made for exactly these input shapes and dtypes (in_dtype NULL: the compute dtype). */
bool cx_plan_matches(const cx_plan *p, const int *in_ndim, const int64_t (*in_shape)[CATTR_MAX_DIMS],
                     const cattr_dtype *in_dtype);

/* Whether input i of plan p was planned for rank nd, shape sh and dtype dt (a cache's match, input by input). */
bool cx_plan_input_is(const cx_plan *p, int i, int nd, const int64_t *sh, cattr_dtype dt);
/* The number of graph inputs p was planned for. */
int cx_plan_n_inputs(const cx_plan *p);

/* The inferred view (dtype, shape) of value v; data is NULL outside a run. */
const cx_view *cx_plan_view(const cx_plan *p, int v);

/* Runs the plan (the first run of a planned plan allocates its arena, kept for later runs): copies host inputs (in graph-input order, each in the plan's input dtype, NULL for inputs the
 * outputs do not need) in, executes, and copies output k into host buffer out_host[k] (sized from cx_plan_view).
 * Errors: whatever a kernel reports (naming the node), CATTR_ERR_NO_MEMORY. */
cattr_status cx_plan_run(cx_plan *p, const void *const *in_host, void *const *out_host);

/* cx_plan_run with inputs and outputs that may stay in backend memory: input i is read in place from in_dev[i]
 * (backend memory of its size, owned by the caller, not written) when in_dev and in_dev[i] are not NULL, else copied
 * from in_host[i]; output k goes to out_dev[k] (backend memory, by a copy inside the backend) when given, else to
 * out_host[k] (an output with neither is not delivered). Errors: as cx_plan_run. */
cattr_status cx_plan_run_dev(cx_plan *p, const void *const *in_host, void *const *in_dev, void *const *out_host,
                             void *const *out_dev);

/* What a run watches between its nodes (cx_plan_run_watched), so that a call can be stopped during a long chunk
 * of work and not only between chunks:
 * - cancel (may be NULL): read before each node; a non-zero value stops the run with CATTR_ERR_CANCELLED (nothing
 *   is written to its outputs);
 * - progress, progress_user (may be NULL; called only when cancel is set too): a beat, progress(done, total,
 *   progress_user) with the counts this callback last received on this thread (cx_watch_note; 0 of 0 before any),
 *   before a node once CX_WATCH_BEAT_MS milliseconds have passed since the callback's last call (a chunk's or a
 *   beat), counting the time inside watched runs and the pauses between them shorter than that (a longer pause, as
 *   between two calls, starts the period anew), from OpenMP thread 0 of the run (the calling thread when the run is
 *   not inside a parallel region of a thread other than the caller's). The beat is how a caller whose flag is set by
 *   code that runs only when the library calls back (Python's signal handlers, which CPython runs between bytecodes
 *   of its main thread) gets to set it while one chunk runs.
 * The clock is CLOCK_MONOTONIC_COARSE (no system call), read before each node only when both are set. */
#define CX_WATCH_BEAT_MS 100
typedef struct cx_watch {
    const volatile int *cancel;
    cattr_progress_fn progress;
    void *progress_user;
} cx_watch;

/* The watch of a call's parameters (its cancel flag and progress callback). */
static inline cx_watch cx_watch_of(const cattr_attr_params *p) {
    cx_watch w = {p->cancel, p->progress, p->progress_user};
    return w;
}

/* Records that progress callback (fn, user) was just called with (done, total) on this thread: what the beats of
 * cx_plan_run_watched repeat, and when the next one is due (CX_WATCH_BEAT_MS from now). Call it where the progress
 * callback is called after a chunk of work. */
void cx_watch_note(cattr_progress_fn fn, void *user, int64_t done, int64_t total);

/* cx_plan_run_dev watching w (NULL: nothing) between nodes. Errors: as cx_plan_run_dev, CATTR_ERR_CANCELLED. */
cattr_status cx_plan_run_watched(cx_plan *p, const void *const *in_host, void *const *in_dev, void *const *out_host,
                                 void *const *out_dev, const cx_watch *w);

/* Transfers through a backend, each a copy event for the profiler: host to backend, backend to host, backend to
 * backend, zeroing. Errors: whatever the backend reports. */
cattr_status cx_copy_in(cx_backend *be, void *dev, const void *host, size_t bytes);
cattr_status cx_copy_out(cx_backend *be, void *host, const void *dev, size_t bytes);
cattr_status cx_copy_dev(cx_backend *be, void *dst, const void *src, size_t bytes);
cattr_status cx_zero(cx_backend *be, void *dev, size_t bytes);

/* Diagnosis of non-finite results (slow: every value is copied out and scanned). When on,
 * cx_plan_run fails with CATTR_ERR_NONFINITE naming the first node whose output holds NaN (else Inf) computed from
 * inputs without it, when such a value reaches one of the plan's outputs. */
void cx_plan_set_check_finite(cx_plan *p, bool on);

/* Bytes of the plan's arena (planned) or the peak of its allocations (eager, after a run). */
size_t cx_plan_bytes(const cx_plan *p);

#endif
