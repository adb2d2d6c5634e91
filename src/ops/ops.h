/* ops.h - typed views of tensors, per-op shape inference and helpers shared by the kernels of every backend. */
#ifndef CATTR_OPS_H
#define CATTR_OPS_H

#include "core/hd.h"
#include "ops/op.h"
#include <math.h>

/* A typed view of one buffer (backend memory during a run; data NULL when only the shape is known). */
typedef struct cx_view {
    cattr_dtype dtype;
    int ndim;
    int64_t shape[CATTR_MAX_DIMS];
    void *data; /* backend memory */
} cx_view;

static inline int64_t cx_view_numel(const cx_view *v) { return cx_numel(v->ndim, v->shape); }


/* Infers the output dtype and shape of node `n` from its input views (data pointers are not read, except for
 * int64 constants flagged by the caller). Errors: CATTR_ERR_SHAPE naming the node and the shapes. */
cattr_status cx_infer(const cg_node *n, const cx_view *in, cx_view *out);

/* Op metadata (optable.c; docs/ADDING.md): whether autodiff has (and must have) a rule for op; whether the executor
 * runs op itself (a backend never sees it: MapRows); whether the cuda backend runs op on the host (no device kernel
 * yet: its inputs copied out and its output in, logged once). tests/test_op_table.c checks every op against them. */
bool cx_op_differentiable(cg_op op);
bool cx_op_run_by_executor(cg_op op);
bool cx_op_cuda_on_host(cg_op op);

/* The status a call fails with when a host function (HostCall, cattr_callback_fn) returned st != CATTR_OK: st itself
 * when it is a cattr_status, else CATTR_ERR_INVALID_ARGUMENT. */
cattr_status cx_host_status(int st);

/* The axes a ReduceSum / ReduceMean / ReduceGrad node reduces for an input of rank nd: red[d] for d < nd (every
 * axis when the node names none). False when an axis is out of range. */
bool cx_reduce_axes(const cg_attrs *a, int nd, bool *red);

/* A sum as torch's CPU sum kernel computes it (cascade sums in dt, AVX2 vector widths; torch_sum.c): of the m values
 * col[0..m) that are column k of the `per` columns being reduced (per == 1: one contiguous reduction). The TorchSum
 * op's kernels and the host code that sums like Captum call it. */
double cx_torch_sum(cattr_dtype dt, const double *col, int64_t m, int64_t k, int64_t per);

/* Lime's default similarity of an original and a perturbed input, n values each of dtype dt (float32 or float64; cast
 * to float32 as Captum casts them): exp(-d^2 / (2 width^2)) with d the cosine distance (torch's cosine_similarity) or,
 * with euclidean, the norm of the difference; a float32 value (similarity.c). The LimeSimilarity op's kernels. */
double cx_lime_similarity(const void *o, const void *p, cattr_dtype dt, int64_t n, double width, bool euclidean);

/* The strides of operand x over an output of rank nd it broadcasts to (numpy rules): s[d] is 0 along the dims x
 * repeats, else x's row-major stride there. */
static inline void cx_bcast_strides(int nd, const cx_view *x, int64_t *s) {
    int64_t r = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int dx = d - (nd - x->ndim);
        int64_t e = dx >= 0 ? x->shape[dx] : 1;
        s[d] = e == 1 ? 0 : r;
        r *= e;
    }
}

/* Resize (graph.h, CG_RESIZE): for output position o of a dim resized from n_in to n_out elements at scale s, the
 * source elements i0 and i1 and the weight w of i1 (linear: (1 - w) x[i0] + w x[i1]; nearest: x[i0], w = 0), by
 * the node's coordinate transformation (axis) and nearest rounding (trans_a). */
static inline void cx_resize_src(const cg_attrs *a, int64_t o, int64_t n_in, int64_t n_out, double s, bool f32,
                                 int64_t *i0, int64_t *i1, double *w) {
    double x;
    if (f32 && a->n_ints == 0) { /* float32 data and given scales: the coordinate in float32 from the float32 scale,
                                  * as onnxruntime computes it (at a boundary the nearest pixel depends on it:
                                  * (1 + 0.5) / 0.6f - 0.5 is 2 in float32, just below 2 in double); with sizes, the
                                  * exact ratio of the sizes (2 / (4 / 7) is 3.5, not 3.4999998) */
        float sf = (float)s, of = (float)o;
        switch (a->axis) {
        case 1: x = of / sf; break;
        case 2: x = n_out > 1 ? of * (float)(n_in - 1) / (float)(n_out - 1) : 0; break;
        case 3: x = n_out > 1 ? (of + 0.5f) / sf - 0.5f : 0; break;
        default: x = (of + 0.5f) / sf - 0.5f; break;
        }
    } else {
        switch (a->axis) {
        case 1: x = (double)o / s; break;                                           /* asymmetric */
        case 2: x = n_out > 1 ? (double)o * (double)(n_in - 1) / (double)(n_out - 1) : 0; break; /* align_corners */
        case 3: x = n_out > 1 ? ((double)o + 0.5) / s - 0.5 : 0; break;            /* pytorch_half_pixel */
        default: x = ((double)o + 0.5) / s - 0.5; break;                           /* half_pixel */
        }
    }
    if (a->index == 0) { /* nearest */
        double f = floor(x), r;
        switch (a->trans_a) {
        case 1: r = x - f >= 0.5 ? f + 1 : f; break;  /* round_prefer_ceil */
        case 2: r = f; break;                         /* floor */
        case 3: r = ceil(x); break;                   /* ceil */
        default: r = x - f > 0.5 ? f + 1 : f; break;  /* round_prefer_floor */
        }
        int64_t i = (int64_t)r;
        *i0 = *i1 = i < 0 ? 0 : i >= n_in ? n_in - 1 : i;
        *w = 0;
        return;
    }
    if (x < 0) x = 0;
    if (x > (double)(n_in - 1)) x = (double)(n_in - 1);
    int64_t f = (int64_t)floor(x);
    *i0 = f;
    *i1 = f + 1 < n_in ? f + 1 : n_in - 1;
    *w = x - (double)f;
}

/* Resize's scale of dim d of a rank-nd input: alpha (dim nd - 2 of 4, or dim 2 of 3) and beta (dim 3 of 4), or the
 * ratio of the sizes when the node gives output sizes (ints). */
static inline double cx_resize_scale(const cg_attrs *a, int nd, int d, int64_t n_in, int64_t n_out) {
    if (a->n_ints > 0) return n_in > 0 ? (double)n_out / (double)n_in : 1;
    return d == nd - 1 ? (nd == 4 ? a->beta : a->alpha) : d == nd - 2 && nd == 4 ? a->alpha : 1;
}

/* Pad: the flat index in X (rank nd, shape xs) that output position c (coordinates in the padded shape) reads, or -1
 * for a constant-filled position; pads as the node's ints, mode 0 constant, 1 reflect, 2 edge. */
static inline CX_HD int64_t cx_pad_source(const int64_t *c, int nd, const int64_t *xs, const int64_t *pads, int mode) {
    int64_t at = 0;
    for (int d = 0; d < nd; d++) {
        int64_t i = c[d] - pads[d], n = xs[d];
        if (i < 0 || i >= n) {
            if (mode == 0 || n == 0) return -1;
            if (mode == 2) i = i < 0 ? 0 : n - 1;
            else if (n == 1) i = 0;
            else { /* reflect without repeating the edge */
                int64_t period = 2 * (n - 1);
                i %= period;
                if (i < 0) i += period;
                if (i >= n) i = period - i;
            }
        }
        at = at * n + i;
    }
    return at;
}

/* The flat index in a tensor of shape (nd, sh) that output coordinates c (rank nc, numpy broadcasting: trailing dims
 * aligned, size-1 dims repeated) read. */
static inline CX_HD int64_t cx_bcast_at(int nc, const int64_t *c, int nd, const int64_t *sh) {
    int64_t at = 0;
    for (int d = 0; d < nd; d++) {
        int64_t i = c[nc - nd + d];
        at = at * sh[d] + (sh[d] == 1 ? 0 : i);
    }
    return at;
}

/* Broadcast shape of two shapes (numpy rules); returns false if they do not broadcast. */
bool cx_broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int *nout, int64_t *out);

/* Pool/conv geometry normalised to 3 spatial dims (missing leading dims have size 1, kernel 1). */
typedef struct cx_geom {
    int64_t n, c_in, c_out;
    int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
} cx_geom;
/* Fills g from an input of shape x (N, C, spatial...) and node attributes; c_out from the weight when w != NULL. */
void cx_geom_init(cx_geom *g, const cg_attrs *a, const int64_t *x, int xnd, const int64_t *w);

/* Resolved Slice parameters for a tensor of shape `shape`: per dim start, step and count. */
void cx_slice_resolve(const cg_attrs *a, int ndim, const int64_t *shape, int64_t *start, int64_t *step,
                      int64_t *count);

#endif
