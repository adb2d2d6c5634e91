/* run.h - the graph runner: a method builds a graph and hands it over with its bindings; the runner uploads what the
 * host gives, plans (keeping the plans of each graph by input shapes, dtypes and outputs), runs, and downloads what
 * the host wants.
 *
 * A run is a cx_job: the graph and its constants, the slot of the graph's plans it plans into, one cx_arg per graph
 * input (host values, or values already in backend memory), the outputs wanted and where each goes (host memory or
 * backend memory), and what the run watches (cancel flag, progress beat, the non-finite diagnosis). Backend memory
 * that outlives a run (accumulators across chunks, inputs uploaded once for many runs) is a cx_buf, filled and read
 * through cx_buf_put and cx_buf_get.
 */
#ifndef CATTR_EXEC_RUN_H
#define CATTR_EXEC_RUN_H

#include "exec/plan.h"

/* The runner keeps each graph's plans (by input shapes, dtypes and outputs; the least recently used evicted) per
 * (graph, constants, slot) from its first run until the graph or the constants are freed; a graph changed since
 * (cg_graph.rev) is planned again. */
#define CX_PLAN_CACHE_MAX 12
#define CX_PLAN_CACHE_DEFAULT 4

/* Backend memory that outlives a run. A zeroed cx_buf holds nothing. */
typedef struct cx_buf {
    cx_backend *be;
    void *p;
    size_t bytes;
} cx_buf;

/* New backend memory of `bytes` bytes, zeroed when `zero`. Errors: CATTR_ERR_NO_MEMORY, the backend's. */
cattr_status cx_buf_alloc(cx_backend *be, size_t bytes, bool zero, cx_buf *out);
/* New backend memory holding a copy of host tensor t. Errors: as cx_buf_alloc. */
cattr_status cx_buf_upload(cx_backend *be, const cattr_tensor *t, cx_buf *out);
/* Backend memory holding `bytes` bytes from host memory. */
cattr_status cx_buf_upload_raw(cx_backend *be, const void *host, size_t bytes, cx_buf *out);
void cx_buf_free(cx_buf *b);
/* Keeps *b (reallocated only when smaller than `bytes`) and fills its first `bytes` bytes from host memory, or with
 * zeros when `zero`, or leaves them. For buffers a method keeps from call to call. */
cattr_status cx_buf_fit(cx_backend *be, cx_buf *b, size_t bytes, const void *host, bool zero);
/* Writes bytes [off, off + bytes) of b from backend memory dev when dev is set (a copy inside the backend), else from
 * host memory host. Errors: CATTR_ERR_INVALID_ARGUMENT (past b's end), the backend's. */
cattr_status cx_buf_put(cx_buf *b, size_t off, const void *host, const void *dev, size_t bytes);
/* Copies bytes [off, off + bytes) of b to backend memory dev when dev is set, else to host memory host: how a result
 * kept on the backend reaches the caller, who takes it in host memory or in backend memory of its own. Errors: as
 * cx_buf_put. */
cattr_status cx_buf_get(const cx_buf *b, size_t off, void *host, void *dev, size_t bytes);

/* Graph inputs (and outputs) of one run, at most: a method's graph takes inputs, baselines, additional inputs and its
 * own (IntegratedGradients' fold: 19 per attributed input). */
#define CX_RUN_MAX_IN 320

/* One graph input of a run: its shape and dtype, and its values from one of
 * - host: host memory, copied in by the run (read in place where the backend's memory is the host's);
 * - dev: backend memory of the input's size, read in place;
 * - neither: an input the outputs do not read (or a planning-only job).
 * A tensor input: cx_arg_of. */
typedef struct cx_arg {
    int nd;
    int64_t sh[CATTR_MAX_DIMS];
    cattr_dtype dt;
    const void *host;
    const void *dev;
} cx_arg;

/* The argument of host tensor t: its shape, dtype and values. */
cx_arg cx_arg_of(const cattr_tensor *t);
/* The argument of values in backend memory dev, shaped as host tensor like (whose values are not read). */
cx_arg cx_arg_dev(const cattr_tensor *like, const void *dev);

/* A run of graph g's outputs outs[0..n_out) for inputs in[0..n_in) (graph-input order, every input of g). Output k
 * goes to out_dev[k] (backend memory) when out_dev and out_dev[k] are set, and to out_host[k] (host memory sized from
 * the plan's view of outs[k]) when out_host and out_host[k] are set: both, and it stays on the backend and comes down
 * too; neither, and it is not delivered. */
typedef struct cx_job {
    const cg_graph *g;
    cx_consts *consts;   /* the graph's constants on the backend that runs it (its compute dtype) */
    int slot;            /* which of the graph's sets of plans (0 unless a method keeps more than one: plans of one
                          * graph that may run at once, or that must not share an arena) */
    int plans;           /* plans kept in the slot (0: CX_PLAN_CACHE_DEFAULT; at most CX_PLAN_CACHE_MAX) */
    bool share_arena;    /* the slot's plans share one arena, the size of the largest (they never run at once); set
                          * by the slot's first job */
    bool eager;          /* the eager executor (op by op) instead of the planned one */
    int n_in;
    const cx_arg *in;
    int n_out;
    const int *outs;
    void *const *out_host;
    void *const *out_dev;
    cx_watch watch;      /* cancel flag and progress beat between nodes (cx_plan_run_watched) */
    bool check_finite;   /* look for the node where a NaN or Inf first appears (cx_plan_set_check_finite) */
    size_t *peak;        /* when set: raised to the plan's bytes */
    cx_plan **plan;      /* when set: receives the plan that ran (for cx_plan_view of the job's values) */
} cx_job;

/* Frees the plans kept for constants c (cx_consts_free calls it). */
void cx_run_drop_consts(const cx_consts *c);
/* The number of plans the runner keeps now, over every graph, constants and slot (for tests: only while no run is
 * in flight on another thread). */
int cx_run_kept_plans(void);

/* Uploads j's host inputs, plans (or finds the plan), runs and delivers the outputs. Errors: CATTR_ERR_INVALID_ARGUMENT
 * (more inputs than a run takes), the plan's, the backend's, CATTR_ERR_CANCELLED. */
cattr_status cx_run(const cx_job *j);
/* The shape and dtype of value v of j's graph for j's inputs, from j's plan (made or found, not run; its outputs
 * must reach v: v itself, or outputs computed from it). Errors: the plan's. */
cattr_status cx_run_view(const cx_job *j, int v, cx_view *out);
/* The working memory (bytes) of j's plan: from the cache (made there when missing) when `cached`, else from a plan
 * made for the question and freed (shapes a method asks about once: no cached plan is evicted for it). Errors: the
 * plan's. */
cattr_status cx_run_bytes(const cx_job *j, bool cached, size_t *bytes);

#endif
