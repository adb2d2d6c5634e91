/* kernels_impl.h - CPU reference kernels, written once and instantiated for float and double.
 *
 * Included by cpu_backend.c with T (element type), K(name) (name mangler) and GEMM (cblas_sgemm / cblas_dgemm)
 * defined. Every kernel reads `in` views and writes `out` (already allocated, shape inferred). OpenMP is used for
 * loops large enough to pay for a parallel region.
 */

#define PAR_MIN (1 << 18)
#ifndef PAR_FOR
/* Runs a for statement on the OpenMP team (omp parallel for with the given clauses) when `cond` holds and inline
 * otherwise: an omp `if` clause still enters libgomp, which costs microseconds per call, more than the whole kernel
 * on small tensors. */
#define CX_PRAGMA(x) _Pragma(#x)
#define PAR_FOR_WITH(clauses, cond, ...)                                                                               \
    do {                                                                                                               \
        if (cond) {                                                                                                    \
            CX_PRAGMA(omp parallel for clauses) __VA_ARGS__                                                           \
        } else {                                                                                                       \
            __VA_ARGS__                                                                                                \
        }                                                                                                              \
    } while (0)
#define PAR_FOR(cond, ...) PAR_FOR_WITH(schedule(static), cond, __VA_ARGS__)
/* iterations handed out one at a time, for iterations of unequal work */
#define PAR_FOR_DYN(cond, ...) PAR_FOR_WITH(schedule(dynamic, 1), cond, __VA_ARGS__)
#define PAR_FOR2(cond, ...) PAR_FOR_WITH(collapse(2) schedule(static), cond, __VA_ARGS__)
/* As PAR_FOR_WITH, with `per` elements of scratch of type Ty per thread at `sc` (declared by the macro for the body).
 * The scratch is sized and indexed from one source, the team actually running the loop: inside the parallel region,
 * by omp_get_num_threads() and omp_get_thread_num() of that region (one thread allocates for the team while the
 * others wait); inline, one buffer. Never by omp_get_max_threads() or a thread number read outside the region, which
 * differ from the running team's inside a region with num_threads(...), a nested region, or when the inline path runs
 * on an outer team's thread. `ok` is set to false when the scratch could not be allocated (then no iteration ran). */
#define PAR_FOR_SCRATCH(clauses, cond, Ty, per, sc, ok, ...)                                                           \
    do {                                                                                                               \
        Ty *cx_sbase_ = NULL;                                                                                          \
        size_t cx_sper_ = (size_t)(per);                                                                               \
        if (cond) {                                                                                                    \
            CX_PRAGMA(omp parallel)                                                                                    \
            {                                                                                                          \
                CX_PRAGMA(omp single)                                                                                  \
                cx_sbase_ = malloc(cx_sper_ * (size_t)omp_get_num_threads() * sizeof(Ty));                             \
                if (cx_sbase_) { /* the single's barrier publishes the pointer to the team */                          \
                    Ty *sc = cx_sbase_ + (size_t)omp_get_thread_num() * cx_sper_;                                      \
                    CX_PRAGMA(omp for clauses) __VA_ARGS__                                                             \
                }                                                                                                      \
            }                                                                                                          \
        } else {                                                                                                       \
            cx_sbase_ = malloc(cx_sper_ * sizeof(Ty));                                                                 \
            if (cx_sbase_) {                                                                                           \
                Ty *sc = cx_sbase_;                                                                                    \
                __VA_ARGS__                                                                                            \
            }                                                                                                          \
        }                                                                                                              \
        ok = cx_sbase_ != NULL;                                                                                        \
        free(cx_sbase_);                                                                                               \
    } while (0)
#endif

/* ---- elementwise unary ---------------------------------------------------------------------------------- */

static cattr_status K(unary)(const cg_node *n, const cx_view *in, cx_view *out) {
    const T *x = in[0].data;
    T *y = out->data;
    int64_t cnt = cx_view_numel(out);
    const T alpha = (T)n->a.alpha, beta = (T)n->a.beta;
    switch (n->op) {
    case CG_IDENTITY:
        if (y != x) memcpy(y, x, (size_t)cnt * sizeof(T));
        break;
    case CG_RELU:
        PAR_FOR(cnt > PAR_MIN,
        for (int64_t i = 0; i < cnt; i++) y[i] = x[i] > 0 ? x[i] : (T)0;);
        break;
    case CG_LEAKYRELU:
        PAR_FOR(cnt > PAR_MIN,
        for (int64_t i = 0; i < cnt; i++) y[i] = x[i] > 0 ? x[i] : x[i] * alpha;);
        break;
    case CG_SIGMOID:
        PAR_FOR(cnt > PAR_MIN,
        for (int64_t i = 0; i < cnt; i++) y[i] = (T)1 / ((T)1 + EXP(-x[i])););
        break;
    case CG_TANH:
        PAR_FOR(cnt > PAR_MIN,
        for (int64_t i = 0; i < cnt; i++) y[i] = TANH(x[i]););
        break;
    case CG_CLIP:
        PAR_FOR(cnt > PAR_MIN,
        for (int64_t i = 0; i < cnt; i++) {
            T v = x[i] < alpha ? alpha : x[i];
            y[i] = v > beta ? beta : v;
        });
        break;
    case CG_NEG:
        PAR_FOR(cnt > PAR_MIN,
        for (int64_t i = 0; i < cnt; i++) y[i] = -x[i];);
        break;
    case CG_ABS:
        PAR_FOR(cnt > PAR_MIN,
        for (int64_t i = 0; i < cnt; i++) y[i] = x[i] < 0 ? -x[i] : (x[i] == 0 ? (T)0 : x[i]););
        break;
    case CG_ZEROS_LIKE:
        memset(y, 0, (size_t)cnt * sizeof(T));
        break;
    default: return cx_fail(CATTR_ERR_INTERNAL, "unary kernel: bad op");
    }
    return CATTR_OK;
}

/* (X or Y, gY) -> gX */
static cattr_status K(unary_grad)(const cg_node *n, const cx_view *in, cx_view *out) {
    const T *x = in[0].data, *g = in[1].data;
    T *y = out->data;
    int64_t cnt = cx_view_numel(out);
    const T alpha = (T)n->a.alpha, beta = (T)n->a.beta;
    switch (n->op) {
    case CG_RELU_GRAD:
        PAR_FOR(cnt > PAR_MIN,
        for (int64_t i = 0; i < cnt; i++) {
            T gv = g[i]; /* loaded whatever the sign: a select the vectoriser takes, not a branch per element */
            y[i] = x[i] > 0 ? gv : (T)0;
        });
        break;
    case CG_LEAKYRELU_GRAD:
        PAR_FOR(cnt > PAR_MIN,
        for (int64_t i = 0; i < cnt; i++) y[i] = x[i] > 0 ? g[i] : g[i] * alpha;);
        break;
    case CG_SIGMOID_GRAD:
        PAR_FOR(cnt > PAR_MIN,
        for (int64_t i = 0; i < cnt; i++) y[i] = g[i] * ((T)1 - x[i]) * x[i];);
        break;
    case CG_TANH_GRAD:
        PAR_FOR(cnt > PAR_MIN,
        for (int64_t i = 0; i < cnt; i++) y[i] = g[i] * ((T)1 - x[i] * x[i]););
        break;
    case CG_CLIP_GRAD:
        PAR_FOR(cnt > PAR_MIN,
        for (int64_t i = 0; i < cnt; i++) {
            T gv = g[i];
            y[i] = ((x[i] >= alpha) & (x[i] <= beta)) ? gv : (T)0;
        });
        break;
    case CG_ABS_GRAD:
        PAR_FOR(cnt > PAR_MIN,
        for (int64_t i = 0; i < cnt; i++) {
            T gv = g[i];
            y[i] = x[i] > 0 ? gv : x[i] < 0 ? -gv : (T)0;
        });
        break;
    default: return cx_fail(CATTR_ERR_INTERNAL, "unary grad kernel: bad op");
    }
    return CATTR_OK;
}

/* The elementwise functions of ops/elementwise.h: each value computed in double and rounded to T once. */
static cattr_status K(ew_unary)(const cg_node *n, const cx_view *in, cx_view *out) {
    const T *x = in[0].data;
    T *y = out->data;
    int64_t cnt = cx_view_numel(out);
    cg_op op = n->op;
    double al = n->a.alpha, be = n->a.beta;
    int ap = (int)n->a.index;
    PAR_FOR(cnt > PAR_MIN / 8, for (int64_t i = 0; i < cnt; i++) y[i] = (T)cx_unary_f(op, (double)x[i], al, be, ap););
    return CATTR_OK;
}

/* UnaryGrad: (X, gY) -> gY * f'(X) of the forward op in index (its attributes copied). */
static cattr_status K(ew_unary_grad)(const cg_node *n, const cx_view *in, cx_view *out) {
    const T *x = in[0].data, *g = in[1].data;
    T *y = out->data;
    int64_t cnt = cx_view_numel(out);
    cg_op op = (cg_op)n->a.index;
    double al = n->a.alpha, be = n->a.beta;
    int ap = (int)n->a.axis;
    PAR_FOR(cnt > PAR_MIN / 8,
    for (int64_t i = 0; i < cnt; i++) y[i] = (T)((double)g[i] * cx_unary_df(op, (double)x[i], al, be, ap)););
    return CATTR_OK;
}

/* Pow, Max, Min with numpy broadcasting, and BinaryGrad (A, B, gY) at the broadcast shape. */
static cattr_status K(ew_binary)(const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_BINARY_GRAD;
    cg_op op = grad ? (cg_op)n->a.axis : n->op;
    int which = (int)n->a.index, nd = out->ndim;
    const T *a = in[0].data, *b = in[1].data, *g = grad ? (const T *)in[2].data : NULL;
    T *y = out->data;
    int64_t sa[CATTR_MAX_DIMS], sb[CATTR_MAX_DIMS], cnt = cx_view_numel(out);
    cx_bcast_strides(nd, &in[0], sa);
    cx_bcast_strides(nd, &in[1], sb);
    for (int64_t i = 0; i < cnt; i++) {
        int64_t rem = i, oa = 0, ob = 0;
        for (int d = nd - 1; d >= 0; d--) {
            int64_t c = rem % out->shape[d];
            rem /= out->shape[d];
            oa += c * sa[d];
            ob += c * sb[d];
        }
        double av = (double)a[oa], bv = (double)b[ob];
        y[i] = (T)(grad ? cx_binary_df(op, which, av, bv, (double)g[i]) : cx_binary_f(op, av, bv));
    }
    return CATTR_OK;
}

/* Pad (X) -> Y and PadGrad (gY, X) -> gX (the gradients of the positions that read each element, added in order). */
static cattr_status K(pad)(const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_PAD_GRAD;
    const cx_view *x = grad ? &in[1] : &in[0], *y = grad ? &in[0] : out;
    int nd = x->ndim, mode = (int)n->a.index;
    int64_t cnt = cx_view_numel(y), c[CATTR_MAX_DIMS];
    const T *src = in[0].data;
    T *dst = out->data;
    if (grad) memset(dst, 0, (size_t)cx_view_numel(out) * sizeof(T));
    for (int64_t i = 0; i < cnt; i++) {
        int64_t rem = i;
        for (int d = nd - 1; d >= 0; d--) {
            c[d] = rem % y->shape[d];
            rem /= y->shape[d];
        }
        int64_t at = cx_pad_source(c, nd, x->shape, n->a.ints, mode);
        if (grad) {
            if (at >= 0) dst[at] += src[i];
        } else {
            dst[i] = at >= 0 ? src[at] : (T)n->a.alpha;
        }
    }
    return CATTR_OK;
}

/* In-place ReLU on a kernel's result: the epilogue of a node the planner fused with a following Relu. */
static void K(relu_inplace)(T *y, int64_t cnt) {
    PAR_FOR(cnt > PAR_MIN, for (int64_t i = 0; i < cnt; i++) y[i] = y[i] > 0 ? y[i] : (T)0;);
}

/* ---- broadcasting binary ops ---------------------------------------------------------------------------- */

static inline T K(binop)(cg_op op, T a, T b) {
    switch (op) {
    case CG_ADD: return a + b;
    case CG_SUB: return a - b;
    case CG_MUL: return a * b;
    default: return a / b;
    }
}

/* y[j] = a[j * ia] op b[j * ib] for j < n, ia and ib 0 (a broadcast scalar) or 1: the op and the strides chosen
 * outside the loop so that it vectorises (with the switch inside, the residual adds of a transformer ran one element
 * at a time) */
#define BIN_LOOP(E)                                                                                                    \
    do {                                                                                                               \
        if (ia && ib) for (int64_t j = 0; j < n; j++) { T u = a[j], v = b[j]; y[j] = (E); }                            \
        else if (ia) { const T v = b[0]; for (int64_t j = 0; j < n; j++) { T u = a[j]; y[j] = (E); } }                 \
        else if (ib) { const T u = a[0]; for (int64_t j = 0; j < n; j++) { T v = b[j]; y[j] = (E); } }                 \
        else { const T u = a[0], v = b[0]; for (int64_t j = 0; j < n; j++) y[j] = (E); }                               \
    } while (0)
static CX_CLONES void K(binary_run)(cg_op op, const T *a, int ia, const T *b, int ib, T *y, int64_t n) {
    switch (op) {
    case CG_ADD: BIN_LOOP(u + v); break;
    case CG_SUB: BIN_LOOP(u - v); break;
    case CG_MUL: BIN_LOOP(u * v); break;
    default: BIN_LOOP(K(binop)(op, u, v)); break;
    }
}
#undef BIN_LOOP

static cattr_status K(binary)(const cg_node *n, const cx_view *in, cx_view *out) {
    const T *a = in[0].data, *b = in[1].data;
    T *y = out->data;
    int nd = out->ndim;
    int64_t cnt = cx_view_numel(out);
    int64_t na = cx_view_numel(&in[0]), nb = cx_view_numel(&in[1]);
    cg_op op = n->op;
    if ((na == cnt || na == 1) && (nb == cnt || nb == 1)) { /* equal shapes, or a scalar with the other */
        int ia = na == cnt, ib = nb == cnt;
        int64_t blk = 4096, nbk = (cnt + blk - 1) / blk;
        PAR_FOR(cnt > PAR_MIN,
        for (int64_t k = 0; k < nbk; k++) {
            int64_t lo = k * blk;
            K(binary_run)(op, a + lo * ia, ia, b + lo * ib, ib, y + lo, cnt - lo < blk ? cnt - lo : blk);
        });
        return CATTR_OK;
    }
    /* general case: broadcast strides over the output shape */
    int64_t sa[CATTR_MAX_DIMS], sb[CATTR_MAX_DIMS];
    cx_bcast_strides(nd, &in[0], sa);
    cx_bcast_strides(nd, &in[1], sb);
    int64_t inner = nd ? out->shape[nd - 1] : 1, rows = inner ? cnt / inner : 0;
    int64_t ia_in = nd ? sa[nd - 1] : 0, ib_in = nd ? sb[nd - 1] : 0;
    PAR_FOR(cnt > PAR_MIN,
    for (int64_t r = 0; r < rows; r++) {
        int64_t rem = r, oa = 0, ob = 0;
        for (int d = nd - 2; d >= 0; d--) {
            int64_t i = rem % out->shape[d];
            rem /= out->shape[d];
            oa += i * sa[d];
            ob += i * sb[d];
        }
        K(binary_run)(op, a + oa, (int)ia_in, b + ob, (int)ib_in, y + r * inner, inner);
    });
    return CATTR_OK;
}

/* (gY, X): sum gY over the dims that X broadcasts along, giving X's shape. */
static cattr_status K(reduce_sum_like)(const cg_node *n, const cx_view *in, cx_view *out) {
    const T *g = in[0].data;
    T *y = out->data;
    int nd = in[0].ndim;
    int64_t cnt = cx_view_numel(&in[0]), ocnt = cx_view_numel(out);
    if (cnt == ocnt) {
        memcpy(y, g, (size_t)cnt * sizeof(T));
        return CATTR_OK;
    }
    int64_t so[CATTR_MAX_DIMS];
    cx_bcast_strides(nd, out, so);
    /* the reduced dims as one trailing block (a per-channel scale's gradient, [N, C, H, W] -> [N, C, 1, 1]) or one
     * leading block (a bias's, [N, C] -> [C]): contiguous sums, in the order of the general loop below */
    int lo = nd, hi = -1;
    for (int d = 0; d < nd; d++)
        if (so[d] == 0 && in[0].shape[d] != 1) {
            if (d < lo) lo = d;
            hi = d;
        }
    bool block = hi >= 0;
    for (int d = lo; d <= hi && block; d++) block = so[d] == 0 || in[0].shape[d] == 1;
    if (block && hi == nd - 1) {
        int64_t inner = cx_numel(nd - lo, in[0].shape + lo);
        PAR_FOR(cnt > PAR_MIN, for (int64_t o = 0; o < ocnt; o++) {
            T s = 0;
            for (int64_t i = 0; i < inner; i++) s += g[o * inner + i];
            y[o] = s;
        });
        return CATTR_OK;
    }
    if (block && lo == 0) {
        int64_t outer = cx_numel(hi + 1, in[0].shape);
        memset(y, 0, (size_t)ocnt * sizeof(T));
        for (int64_t r = 0; r < outer; r++)
            for (int64_t j = 0; j < ocnt; j++) y[j] += g[r * ocnt + j];
        return CATTR_OK;
    }
    memset(y, 0, (size_t)ocnt * sizeof(T));
    for (int64_t i = 0; i < cnt; i++) {
        int64_t rem = i, o = 0;
        for (int d = nd - 1; d >= 0; d--) {
            o += (rem % in[0].shape[d]) * so[d];
            rem /= in[0].shape[d];
        }
        y[o] += g[i];
    }
    return CATTR_OK;
}

/* TorchSum: the sum over one axis of X = [outer, m, per] in torch's CPU order (cx_torch_sum), one column at a time
 * gathered into the thread's scratch (m doubles). */
static cattr_status K(torch_sum)(const cg_node *n, const cx_view *in, cx_view *out) {
    const cx_view *x = &in[0];
    int ax = (int)(n->a.ints[0] < 0 ? n->a.ints[0] + x->ndim : n->a.ints[0]);
    int64_t outer = cx_numel(ax, x->shape), m = x->shape[ax], per = cx_numel(x->ndim - ax - 1, x->shape + ax + 1);
    const T *xv = x->data;
    T *y = out->data;
    bool ok;
    PAR_FOR_SCRATCH(schedule(static), outer * m * per > PAR_MIN, double, m > 0 ? m : 1, col, ok,
    for (int64_t c = 0; c < outer * per; c++) {
        int64_t o = c / per, k = c % per;
        for (int64_t i = 0; i < m; i++) col[i] = (double)xv[(o * m + i) * per + k];
        y[c] = (T)cx_torch_sum(x->dtype, col, m, k, per);
    });
    return ok ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': out of memory", n->name);
}

/* ReduceSum / ReduceMean (sums in double, rounded once to T; the mean divides the rounded sum by the count in T, as
 * torch does) and their gradient ReduceGrad (gY broadcast back over the reduced axes). */
static cattr_status K(reduce)(const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_REDUCE_GRAD, mean = grad ? n->a.axis == 1 : n->op == CG_REDUCE_MEAN;
    const cx_view *x = grad ? &in[1] : &in[0];
    int nd = x->ndim;
    bool red[CATTR_MAX_DIMS];
    if (!cx_reduce_axes(&n->a, nd, red)) return cx_fail(CATTR_ERR_SHAPE, "node '%s': reduction axis out of range", n->name);
    int64_t so[CATTR_MAX_DIMS], kept = 1, cnt = 1, nx = cx_view_numel(x);
    for (int d = nd - 1; d >= 0; d--) {
        so[d] = red[d] ? 0 : kept;
        if (red[d]) cnt *= x->shape[d];
        else kept *= x->shape[d];
    }
    /* the usual case: the reduced axes are one block of consecutive dims, x = [outer, cnt, inner] */
    int first = -1, last = -1;
    bool block = true;
    for (int d = 0; d < nd; d++)
        if (red[d]) {
            if (first < 0) first = d;
            else if (last != d - 1) block = false;
            last = d;
        }
    if (block && first >= 0) {
        int64_t outer = cx_numel(first, x->shape), inner = cx_numel(nd - last - 1, x->shape + last + 1);
        if (grad) {
            const T *g = in[0].data;
            T *y = out->data, c = (T)cnt;
            if (inner == 1) { /* a value per outer index, filled over the reduced block */
                PAR_FOR(nx > PAR_MIN,
                for (int64_t o = 0; o < outer; o++) {
                    T v = mean ? (T)(g[o] / c) : g[o], *yo = y + o * cnt;
                    for (int64_t r = 0; r < cnt; r++) yo[r] = v;
                });
                return CATTR_OK;
            }
            PAR_FOR2(nx > PAR_MIN,
            for (int64_t o = 0; o < outer; o++)
                for (int64_t r = 0; r < cnt; r++) {
                    T *yr = y + (o * cnt + r) * inner;
                    const T *gr = g + o * inner;
                    if (mean)
                        for (int64_t i = 0; i < inner; i++) yr[i] = (T)(gr[i] / c);
                    else
                        for (int64_t i = 0; i < inner; i++) yr[i] = gr[i];
                });
            return CATTR_OK;
        }
        const T *xv = x->data;
        T *y = out->data;
        double *acc = calloc((size_t)(inner > 0 ? inner : 1), sizeof *acc);
        if (!acc) return cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': out of memory", n->name);
        for (int64_t o = 0; o < outer; o++) {
            for (int64_t i = 0; i < inner; i++) acc[i] = 0;
            for (int64_t r = 0; r < cnt; r++) {
                const T *row = xv + (o * cnt + r) * inner;
                for (int64_t i = 0; i < inner; i++) acc[i] += (double)row[i];
            }
            for (int64_t i = 0; i < inner; i++)
                y[o * inner + i] = mean ? (T)((T)acc[i] / (T)cnt) : (T)acc[i];
        }
        free(acc);
        return CATTR_OK;
    }
    if (grad) {
        const T *g = in[0].data;
        T *y = out->data, c = (T)cnt;
        for (int64_t i = 0; i < nx; i++) {
            int64_t rem = i, o = 0;
            for (int d = nd - 1; d >= 0; d--) {
                o += (rem % x->shape[d]) * so[d];
                rem /= x->shape[d];
            }
            y[i] = mean ? (T)(g[o] / c) : g[o];
        }
        return CATTR_OK;
    }
    double *acc = calloc((size_t)(kept > 0 ? kept : 1), sizeof *acc);
    if (!acc) return cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': out of memory", n->name);
    const T *xv = x->data;
    for (int64_t i = 0; i < nx; i++) {
        int64_t rem = i, o = 0;
        for (int d = nd - 1; d >= 0; d--) {
            o += (rem % x->shape[d]) * so[d];
            rem /= x->shape[d];
        }
        acc[o] += (double)xv[i];
    }
    T *y = out->data;
    for (int64_t o = 0; o < kept; o++) y[o] = mean ? (T)((T)acc[o] / (T)cnt) : (T)acc[o];
    free(acc);
    return CATTR_OK;
}

/* ---- matrix products ------------------------------------------------------------------------------------ */

static cattr_status K(gemm)(const cg_node *n, const cx_view *in, cx_view *out) {
    const cg_attrs *a = &n->a;
    int64_t m = out->shape[0], nn = out->shape[1];
    int64_t k = a->trans_a ? in[0].shape[0] : in[0].shape[1];
    T *y = out->data;
    T beta = 0;
    cx_gemm_btype bt = gemm_btype(in[1].dtype);
    if (a->bf16 && sizeof(T) == sizeof(float) && !a->trans_a && k > 0 && m > 0 && nn > 0) { /* precision "high" */
        CX_CHECK(cx_bf16_gemm(m, nn, k, (const float *)(const void *)in[0].data, in[0].shape[1], in[1].data, bt,
                              in[1].shape[1], a->trans_b != 0, (float *)(void *)y, nn));
        T al = (T)a->alpha;
        bool add_c = n->n_in > 2 && in[2].data && a->beta != 0;
        const T *c = add_c ? in[2].data : NULL;
        int cnd = add_c ? in[2].ndim : 0;
        int64_t cm = cnd == 2 ? in[2].shape[0] : 1, cn = cnd >= 1 ? in[2].shape[cnd - 1] : 1;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < nn; j++) {
                T v = al == (T)1 ? y[i * nn + j] : al * y[i * nn + j];
                y[i * nn + j] = c ? (T)a->beta * c[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)] + v : v;
            }
        return CATTR_OK;
    }
    if (n->n_in > 2 && in[2].data && a->beta != 0) {
        const T *c = in[2].data;
        int cnd = in[2].ndim;
        int64_t cm = cnd == 2 ? in[2].shape[0] : 1, cn = cnd >= 1 ? in[2].shape[cnd - 1] : 1;
        T cb = (T)a->beta;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < nn; j++) y[i * nn + j] = cb * c[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)];
        beta = 1;
    }
    if (m == 0 || nn == 0) return CATTR_OK;
    if (k == 0) {
        if (beta == 0) memset(y, 0, (size_t)(m * nn) * sizeof(T));
        return CATTR_OK;
    }
    if (bt != CX_GEMM_B_F32) /* a checkpoint's matrix as stored (float32 calls only: see gemm_btype) */
        return cx_sgemm_stored(a->trans_a ? CblasTrans : CblasNoTrans, a->trans_b ? CblasTrans : CblasNoTrans, (int)m,
                               (int)nn, (int)k, (float)a->alpha, (const float *)(const void *)in[0].data,
                               (int)in[0].shape[1], in[1].data, bt, (int)in[1].shape[1], (float)beta,
                               (float *)(void *)y, (int)nn);
    GEMM(CblasRowMajor, a->trans_a ? CblasTrans : CblasNoTrans, a->trans_b ? CblasTrans : CblasNoTrans, (int)m,
         (int)nn, (int)k, (T)a->alpha, in[0].data, (int)in[0].shape[1], in[1].data, (int)in[1].shape[1], beta, y,
         (int)nn);
    return CATTR_OK;
}

static cattr_status K(matmul)(const cg_node *n, const cx_view *in, cx_view *out) {
    const cg_attrs *a = &n->a;
    int64_t as[CATTR_MAX_DIMS], bs[CATTR_MAX_DIMS];
    int na = in[0].ndim, nb = in[1].ndim;
    memcpy(as, in[0].shape, sizeof as);
    memcpy(bs, in[1].shape, sizeof bs);
    if (na == 1) { as[1] = as[0]; as[0] = 1; na = 2; }
    if (nb == 1) { bs[1] = 1; nb = 2; }
    int64_t ar = as[na - 2], ac = as[na - 1], br = bs[nb - 2], bc = bs[nb - 1];
    int64_t m = a->trans_a ? ac : ar, k = a->trans_a ? ar : ac, nn = a->trans_b ? br : bc;
    int nbat;
    int64_t bat[CATTR_MAX_DIMS];
    cx_broadcast_shape(na - 2, as, nb - 2, bs, &nbat, bat);
    int64_t nbatch = cx_numel(nbat, bat);
    int64_t sa[CATTR_MAX_DIMS], sb[CATTR_MAX_DIMS], ra = ar * ac, rb = br * bc;
    for (int d = nbat - 1; d >= 0; d--) {
        int da = d - (nbat - (na - 2)), db = d - (nbat - (nb - 2));
        int64_t ea = da >= 0 ? as[da] : 1, eb = db >= 0 ? bs[db] : 1;
        sa[d] = ea == 1 ? 0 : ra;
        sb[d] = eb == 1 ? 0 : rb;
        ra *= ea;
        rb *= eb;
    }
    const T *A = in[0].data, *B = in[1].data;
    T *Y = out->data;
    cx_gemm_btype bt = gemm_btype(in[1].dtype);
    if (a->bf16 && sizeof(T) == sizeof(float) && in[1].ndim == 2 && !a->trans_a && k > 0) { /* precision "high" */
        return cx_bf16_gemm(nbatch * m, nn, k, (const float *)(const void *)A, ac, in[1].data, bt, bc,
                            a->trans_b != 0, (float *)(void *)Y, nn);
    }
    if (bt != CX_GEMM_B_F32) { /* a checkpoint's matrix as stored: 2-D (the planner keeps it so for MatMul's B only) */
        if (in[1].ndim != 2 || a->trans_a || nbat != na - 2)
            return cx_fail(CATTR_ERR_INTERNAL, "node '%s' (op MatMul): a stored matrix where a float32 one is needed",
                           n->name);
        if (k == 0 || nbatch * m == 0 || nn == 0) {
            memset(Y, 0, (size_t)(nbatch * m * nn) * sizeof(T));
            return CATTR_OK;
        }
        return cx_sgemm_stored(CblasNoTrans, a->trans_b ? CblasTrans : CblasNoTrans, (int)(nbatch * m), (int)nn, (int)k,
                               1.0f, (const float *)(const void *)A, (int)ac, in[1].data, bt, (int)bc, 0.0f,
                               (float *)(void *)Y, (int)nn);
    }
    if (in[1].ndim == 2 && !a->trans_a && nbatch > 1 && k > 0 && nbat == na - 2) {
        /* [..., m, k] x [k, n]: the batch dims of A fold into the rows of one GEMM (one packing of B, full panels) */
        GEMM(CblasRowMajor, CblasNoTrans, a->trans_b ? CblasTrans : CblasNoTrans, (int)(nbatch * m), (int)nn, (int)k,
             (T)1, A, (int)ac, B, (int)bc, (T)0, Y, (int)nn);
        return CATTR_OK;
    }
    for (int64_t b = 0; b < nbatch; b++) {
        int64_t rem = b, oa = 0, ob = 0;
        for (int d = nbat - 1; d >= 0; d--) {
            oa += (rem % bat[d]) * sa[d];
            ob += (rem % bat[d]) * sb[d];
            rem /= bat[d];
        }
        T *yb = Y + b * m * nn;
        if (k == 0) {
            memset(yb, 0, (size_t)(m * nn) * sizeof(T));
            continue;
        }
        GEMM(CblasRowMajor, a->trans_a ? CblasTrans : CblasNoTrans, a->trans_b ? CblasTrans : CblasNoTrans, (int)m,
             (int)nn, (int)k, (T)1, A + oa, (int)ac, B + ob, (int)bc, (T)0, yb, (int)nn);
    }
    return CATTR_OK;
}

/* ---- convolution as GEMM -------------------------------------------------------------------------------- */

/* Output positions o in [*lo, *hi) read input index o*s + off inside [0, in). */
static inline void K(valid_range)(int64_t in, int64_t out, int64_t s, int64_t off, int64_t *lo, int64_t *hi) {
    int64_t l = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t h = in - off > 0 ? (in - off + s - 1) / s : 0;
    *lo = l < out ? l : out;
    *hi = h < out ? (h > *lo ? h : *lo) : out;
}

/* col[kidx, b*P + p] for images b0..b0+nb-1 and channels c0..c0+cg-1 */
static void K(im2col)(const cx_geom *g, const T *x, int64_t b0, int64_t nb, int64_t c0, int64_t cg, T *col) {
    int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2], P = OD * OH * OW, KK = g->k[0] * g->k[1] * g->k[2];
    int64_t ispat = g->in[0] * g->in[1] * g->in[2];
    int64_t rows = cg * KK;
    PAR_FOR(rows * nb * P > PAR_MIN,
    for (int64_t r = 0; r < rows; r++) {
        int64_t c = r / KK, kk = r % KK;
        int64_t kz = kk / (g->k[1] * g->k[2]), ky = (kk / g->k[2]) % g->k[1], kx = kk % g->k[2];
        int64_t offz = kz * g->d[0] - g->pb[0], offy = ky * g->d[1] - g->pb[1], offx = kx * g->d[2] - g->pb[2];
        int64_t lo, hi, sx = g->s[2];
        K(valid_range)(g->in[2], OW, sx, offx, &lo, &hi);
        T *crow = col + r * nb * P;
        for (int64_t b = 0; b < nb; b++) {
            const T *xc = x + ((b0 + b) * g->c_in + c0 + c) * ispat;
            for (int64_t oz = 0; oz < OD; oz++) {
                int64_t iz = oz * g->s[0] + offz;
                for (int64_t oy = 0; oy < OH; oy++) {
                    int64_t iy = oy * g->s[1] + offy;
                    T *cq = crow + b * P + (oz * OH + oy) * OW;
                    /* plain loops: rows are short, and a memcpy call per row costs more than the copy */
                    if (iz < 0 || iz >= g->in[0] || iy < 0 || iy >= g->in[1]) {
                        for (int64_t ox = 0; ox < OW; ox++) cq[ox] = 0;
                        continue;
                    }
                    const T *xr = xc + (iz * g->in[1] + iy) * g->in[2] + offx;
                    for (int64_t ox = 0; ox < lo; ox++) cq[ox] = 0;
                    if (sx == 1)
                        for (int64_t ox = lo; ox < hi; ox++) cq[ox] = xr[ox];
                    else
                        for (int64_t ox = lo; ox < hi; ox++) cq[ox] = xr[ox * sx];
                    for (int64_t ox = hi; ox < OW; ox++) cq[ox] = 0;
                }
            }
        }
    });
}

/* dx += col2im(col); parallel over channels so that no two threads write the same element */
static void K(col2im)(const cx_geom *g, const T *col, int64_t b0, int64_t nb, int64_t c0, int64_t cg, T *dx) {
    int64_t OD = g->out[0], OH = g->out[1], OW = g->out[2], P = OD * OH * OW, KK = g->k[0] * g->k[1] * g->k[2];
    int64_t ispat = g->in[0] * g->in[1] * g->in[2];
    PAR_FOR(cg * KK * nb * P > PAR_MIN,
    for (int64_t c = 0; c < cg; c++) {
        for (int64_t kk = 0; kk < KK; kk++) {
            int64_t kz = kk / (g->k[1] * g->k[2]), ky = (kk / g->k[2]) % g->k[1], kx = kk % g->k[2];
            int64_t offz = kz * g->d[0] - g->pb[0], offy = ky * g->d[1] - g->pb[1], offx = kx * g->d[2] - g->pb[2];
            int64_t lo, hi, sx = g->s[2];
            K(valid_range)(g->in[2], OW, sx, offx, &lo, &hi);
            const T *crow = col + (c * KK + kk) * nb * P;
            for (int64_t b = 0; b < nb; b++) {
                T *xc = dx + ((b0 + b) * g->c_in + c0 + c) * ispat;
                for (int64_t oz = 0; oz < OD; oz++) {
                    int64_t iz = oz * g->s[0] + offz;
                    if (iz < 0 || iz >= g->in[0]) continue;
                    for (int64_t oy = 0; oy < OH; oy++) {
                        int64_t iy = oy * g->s[1] + offy;
                        if (iy < 0 || iy >= g->in[1]) continue;
                        const T *cq = crow + b * P + (oz * OH + oy) * OW;
                        T *xr = xc + (iz * g->in[1] + iy) * g->in[2] + offx;
                        if (sx == 1)
                            for (int64_t ox = lo; ox < hi; ox++) xr[ox] += cq[ox];
                        else
                            for (int64_t ox = lo; ox < hi; ox++) xr[ox * sx] += cq[ox];
                    }
                }
            }
        }
    });
}

/* Direct 2-D convolution (stride 1, no dilation, padding < kernel) for small filters and images, where im2col and a
 * GEMM call cost more than the products (a 3x3 conv of 1 -> 3 channels on 10x10 images). Each source plane is
 * copied once into a zero-padded plane of row length PW; an output plane is then, per tap, one long contiguous
 * y_ext[q] += w * src[q + tap offset] over q < OH * PW (the PW - OW extra columns are discarded). The backward to the
 * input is the same with the output gradient padded by K - 1 - pad and the kernel flipped. The taps of one source
 * plane are summed per element in registers (in tap order, so the rounding is the same on every ISA). Planes are independent
 * (no two threads write one element) and each element sums its terms in a fixed order. */
#ifndef CX_VEC_SLACK
#define CX_VEC_SLACK 16 /* elements past a buffer's end that whole-vector loops may touch */
#endif
/* y[i] += sum over taps t of wv[t] * x[i + off[t]] for i < n rounded up to a whole vector of 64 bytes: y and x must
 * hold that many (the extra lanes compute values the caller discards). */
static CX_CLONES void K(taps_row)(int64_t n, int nt, const T *wv, const int64_t *off, const T *x, T *y) {
    typedef T vec __attribute__((vector_size(64))); /* 64 bytes of sums held in registers across the taps */
    for (int64_t i = 0; i < n; i += (int64_t)(64 / sizeof(T))) {
        vec s, xv;
        memcpy(&s, y + i, sizeof s);
        for (int t = 0; t < nt; t++) {
            memcpy(&xv, x + i + off[t], sizeof xv);
            s += wv[t] * xv;
        }
        memcpy(y + i, &s, sizeof s);
    }
}

static bool K(conv_direct_ok)(const cx_geom *g, int64_t G) {
    int64_t kdim = g->c_in / G * g->k[1] * g->k[2];
    if (g->in[0] != 1 || g->k[0] != 1 || g->k[1] * g->k[2] > 64 || kdim * (g->c_out / G) > 1024) return false;
    for (int d = 1; d < 3; d++)
        if (g->s[d] != 1 || g->d[d] != 1 || g->pb[d] >= g->k[d] || g->pe[d] >= g->k[d]) return false;
    int64_t planes = g->n * (g->c_in > g->c_out ? g->c_in : g->c_out);
    return planes * (g->in[1] + 2 * g->k[1]) * (g->in[2] + 2 * g->k[2]) <= ((int64_t)1 << 20);
}

/* The `planes` planes of src (H x W each) copied into zero planes of PH x PW at offset (oy, ox), cropped, in this
 * thread's scratch buffer 0, followed by CX_VEC_SLACK zeros; NULL when out of memory. */
static T *K(pad_planes)(const T *src, int64_t planes, int64_t H, int64_t W, int64_t PH, int64_t PW, int64_t oy,
                        int64_t ox) {
    T *pad = cpu_scratch(0, (size_t)(planes * PH * PW + CX_VEC_SLACK) * sizeof(T));
    if (!pad) return NULL;
    memset(pad, 0, (size_t)(planes * PH * PW + CX_VEC_SLACK) * sizeof(T));
    int64_t x0 = ox < 0 ? -ox : 0, x1 = PW - ox < W ? PW - ox : W; /* source columns that land inside */
    for (int64_t p = 0; p < planes; p++)
        for (int64_t y = oy < 0 ? -oy : 0; y < H && y + oy < PH; y++) {
            T *d = pad + p * PH * PW + (y + oy) * PW + ox;
            const T *r = src + (p * H + y) * W;
            for (int64_t x = x0; x < x1; x++) d[x] = r[x];
        }
    return pad;
}

/* out[b, co] (OH x OW) = sum over ci of the correlation of src[b, ci] with w (flipped when `flip`), from padded
 * planes: `np_src` planes per image in `pad` (PH x PW each). wk(co, ci) gives the KH x KW taps. */
static cattr_status K(conv_direct_run)(const cg_node *n, int64_t nimg, int64_t c_src, int64_t c_dst, int64_t per_group_src,
                                       int64_t per_group_dst, const T *pad, int64_t PH, int64_t PW, int64_t KH, int64_t KW,
                                       const T *w, bool flip, int64_t OH, int64_t OW, const T *bias, int relu, T *out) {
    int64_t ext = OH * PW;
    bool fail = false;
    PAR_FOR_WITH(schedule(static) reduction(|| : fail), nimg * c_dst * ext * per_group_src * KH * KW > PAR_MIN,
    for (int64_t bc = 0; bc < nimg * c_dst; bc++) {
        int64_t b = bc / c_dst, c = bc % c_dst, gi = c / per_group_dst;
        T *acc = cpu_scratch(1, (size_t)(ext + CX_VEC_SLACK) * sizeof(T));
        if (!acc) {
            fail = true;
            continue;
        }
        memset(acc, 0, (size_t)(ext + CX_VEC_SLACK) * sizeof(T));
        for (int64_t j = 0; j < per_group_src; j++) {
            int64_t cs = gi * per_group_src + j;
            const T *pp = pad + (b * c_src + cs) * PH * PW;
            /* forward: w[c, j]; backward: w[cs, c % per_group_dst], taps flipped */
            const T *wk = flip ? w + (cs * per_group_dst + c % per_group_dst) * KH * KW : w + (c * per_group_src + j) * KH * KW;
            T wv[64];
            int64_t off[64];
            for (int64_t ky = 0; ky < KH; ky++)
                for (int64_t kx = 0; kx < KW; kx++) {
                    wv[ky * KW + kx] = flip ? wk[(KH - 1 - ky) * KW + (KW - 1 - kx)] : wk[ky * KW + kx];
                    off[ky * KW + kx] = ky * PW + kx;
                }
            K(taps_row)((OH - 1) * PW + OW, (int)(KH * KW), wv, off, pp, acc);
        }
        T *yp = out + bc * OH * OW;
        T bv = bias ? bias[c] : (T)0;
        for (int64_t oy = 0; oy < OH; oy++)
            for (int64_t ox = 0; ox < OW; ox++) {
                T v = acc[oy * PW + ox] + bv;
                yp[oy * OW + ox] = relu && !(v > 0) ? (T)0 : v;
            }
    });
    if (fail) return cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': cannot allocate the convolution buffer", n->name);
    return CATTR_OK;
}

static cattr_status K(conv_direct)(const cg_node *n, const cx_geom *g, int64_t G, const T *x, const T *w, const T *bias,
                                   int relu, T *y) {
    const int64_t KH = g->k[1], KW = g->k[2], OH = g->out[1], OW = g->out[2];
    const int64_t PH = OH + KH - 1, PW = OW + KW - 1, planes = g->n * g->c_in;
    T *pad = K(pad_planes)(x, planes, g->in[1], g->in[2], PH, PW, g->pb[1], g->pb[2]);
    if (!pad) return cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': cannot allocate the convolution buffer", n->name);
    return K(conv_direct_run)(n, g->n, g->c_in, g->c_out, g->c_in / G, g->c_out / G, pad, PH, PW, KH, KW, w, false,
                              OH, OW, bias, relu, y);
}

static cattr_status K(conv_direct_grad_input)(const cg_node *n, const cx_geom *g, int64_t G, const T *w, const T *gy,
                                              T *dx) {
    const int64_t KH = g->k[1], KW = g->k[2], IH = g->in[1], IW = g->in[2];
    const int64_t QH = IH + KH - 1, QW = IW + KW - 1, planes = g->n * g->c_out;
    T *pad = K(pad_planes)(gy, planes, g->out[1], g->out[2], QH, QW, KH - 1 - g->pb[1], KW - 1 - g->pb[2]);
    if (!pad) return cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': cannot allocate the convolution buffer", n->name);
    return K(conv_direct_run)(n, g->n, g->c_out, g->c_in, g->c_out / G, g->c_in / G, pad, QH, QW, KH, KW, w, true,
                              IH, IW, NULL, 0, dx);
}

/* Kernel taps [*k0, *k1) of output position o that land inside the input along one dim. */
static inline void K(tap_range)(const cx_geom *g, int d, int64_t o, int64_t *k0, int64_t *k1) {
    int64_t base = o * g->s[d] - g->pb[d], dd = g->d[d];
    int64_t a = base >= 0 ? 0 : (-base + dd - 1) / dd;
    int64_t b = g->in[d] - base > 0 ? (g->in[d] - base + dd - 1) / dd : 0;
    *k0 = a;
    *k1 = b < g->k[d] ? b : g->k[d];
    if (*k1 < *k0) *k1 = *k0;
}

/* dst[p] = src[p] + bv for a row of P outputs (dst may be src), then ReLU when relu */
static inline void K(bias_relu_row)(const T *src, T *dst, int64_t P, T bv, int relu) {
    if (relu)
        for (int64_t p = 0; p < P; p++) {
            T v = src[p] + bv;
            dst[p] = v > 0 ? v : (T)0;
        }
    else
        for (int64_t p = 0; p < P; p++) dst[p] = src[p] + bv;
}

/* Depthwise 2-D convolution (one input channel per group and one output channel per group: MobileNet's and
 * EfficientNet's 3x3 and 5x5 layers), any stride, dilation and padding, one plane per thread. Through im2col it was
 * one GEMM of one row per channel (1% of the GEMM rate, bench/conv_layers.py). The forward sums the taps of an output
 * element in tap order; the input gradient adds, for each tap in order, w * gy into the elements it reaches, the
 * order col2im adds them in. */
static bool K(conv_dw_ok)(const cx_geom *g, int64_t G) {
    return G > 1 && g->c_in == G && g->c_out == G && g->in[0] == 1 && g->k[0] == 1 && g->out[0] == 1;
}

static cattr_status K(conv_dw)(const cx_geom *g, const T *x, const T *w, const T *bias, int relu, T *y) {
    const int64_t IH = g->in[1], IW = g->in[2], OH = g->out[1], OW = g->out[2], KH = g->k[1], KW = g->k[2];
    const int64_t C = g->c_in;
    PAR_FOR(g->n * C * OH * OW * KH * KW > PAR_MIN,
    for (int64_t bc = 0; bc < g->n * C; bc++) {
        int64_t c = bc % C;
        const T *xp = x + bc * IH * IW, *wk = w + c * KH * KW;
        T *yp = y + bc * OH * OW;
        T bv = bias ? bias[c] : (T)0;
        for (int64_t oy = 0; oy < OH; oy++) {
            int64_t ky0, ky1;
            K(tap_range)(g, 1, oy, &ky0, &ky1);
            int64_t iy0 = oy * g->s[1] - g->pb[1];
            T *yr = yp + oy * OW;
            for (int64_t ox = 0; ox < OW; ox++) yr[ox] = 0;
            /* a row of outputs at a time, taps in order: each element's sum runs in tap order, over the taps that
             * reach inside the input */
            for (int64_t ky = ky0; ky < ky1; ky++) {
                const T *xr = xp + (iy0 + ky * g->d[1]) * IW;
                for (int64_t kx = 0; kx < KW; kx++) {
                    int64_t offx = kx * g->d[2] - g->pb[2], lo, hi;
                    K(valid_range)(IW, OW, g->s[2], offx, &lo, &hi);
                    T wv = wk[ky * KW + kx];
                    const T *xo = xr + offx;
                    if (g->s[2] == 1)
                        for (int64_t ox = lo; ox < hi; ox++) yr[ox] += wv * xo[ox];
                    else
                        for (int64_t ox = lo; ox < hi; ox++) yr[ox] += wv * xo[ox * g->s[2]];
                }
            }
            K(bias_relu_row)(yr, yr, OW, bv, relu);
        }
    });
    return CATTR_OK;
}

static cattr_status K(conv_dw_grad_input)(const cx_geom *g, const T *w, const T *gy, T *dx) {
    const int64_t IH = g->in[1], IW = g->in[2], OH = g->out[1], OW = g->out[2], KH = g->k[1], KW = g->k[2];
    const int64_t C = g->c_in;
    PAR_FOR(g->n * C * OH * OW * KH * KW > PAR_MIN,
    for (int64_t bc = 0; bc < g->n * C; bc++) {
        int64_t c = bc % C;
        const T *gp = gy + bc * OH * OW, *wk = w + c * KH * KW;
        T *dp = dx + bc * IH * IW;
        memset(dp, 0, (size_t)(IH * IW) * sizeof(T));
        for (int64_t ky = 0; ky < KH; ky++)
            for (int64_t kx = 0; kx < KW; kx++) {
                T wv = wk[ky * KW + kx];
                int64_t offy = ky * g->d[1] - g->pb[1], offx = kx * g->d[2] - g->pb[2], lo, hi;
                K(valid_range)(IW, OW, g->s[2], offx, &lo, &hi);
                for (int64_t oy = 0; oy < OH; oy++) {
                    int64_t iy = oy * g->s[1] + offy;
                    if (iy < 0 || iy >= IH) continue;
                    T *dr = dp + iy * IW + offx;
                    const T *gr = gp + oy * OW;
                    for (int64_t ox = lo; ox < hi; ox++) dr[ox * g->s[2]] += wv * gr[ox];
                }
            }
    });
    return CATTR_OK;
}

/* Output positions per image from which a convolution runs one image per product (no staging copy of its output
 * or gradient); below, images go side by side so that the product is wide enough. */
#ifndef CONV_DIRECT_OUT
#define CONV_DIRECT_OUT 1024
#endif

/* Images per chunk so that the column buffer stays near 32 MiB. */
static int64_t K(conv_chunk)(const cx_geom *g, int64_t kdim) {
    int64_t P = g->out[0] * g->out[1] * g->out[2];
    int64_t per = kdim * P * (int64_t)sizeof(T) * 2;
    int64_t nb = per > 0 ? ((int64_t)32 << 20) / per : g->n;
    if (nb < 1) nb = 1;
    if (nb > g->n) nb = g->n;
    return nb;
}

static cattr_status K(conv)(const cg_node *n, const cx_view *in, cx_view *out) {
    cx_geom g;
    cx_geom_init(&g, &n->a, in[0].shape, in[0].ndim, in[1].shape);
    int64_t G = n->a.group, cig = g.c_in / G, cog = g.c_out / G;
    int64_t KK = g.k[0] * g.k[1] * g.k[2], kdim = cig * KK, P = g.out[0] * g.out[1] * g.out[2];
    const T *x = in[0].data, *w = in[1].data, *bias = n->n_in > 2 ? in[2].data : NULL;
    T *y = out->data;
    const int relu = n->a.fuse_relu;
    if (K(conv_direct_ok)(&g, G)) return K(conv_direct)(n, &g, G, x, w, bias, relu, y);
    if (K(conv_dw_ok)(&g, G)) return K(conv_dw)(&g, x, w, bias, relu, y);
    /* large images: one image per product, written straight into y (the product's sums do not depend on its
     * columns, so the bits are those of a batched product); small ones: images side by side in one product */
    const bool direct = P >= CONV_DIRECT_OUT;
    int64_t chunk = direct ? 1 : K(conv_chunk)(&g, kdim);
    T *col = cpu_scratch(0, (size_t)(kdim * chunk * P) * sizeof(T));
    T *tmp = direct ? NULL : cpu_scratch(1, (size_t)(cog * chunk * P) * sizeof(T));
    if (!col || (!direct && !tmp)) {
        return cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': cannot allocate the convolution buffer", n->name);
    }
    for (int64_t b0 = 0; b0 < g.n; b0 += chunk) {
        int64_t nb = g.n - b0 < chunk ? g.n - b0 : chunk;
        for (int64_t gi = 0; gi < G; gi++) {
            K(im2col)(&g, x, b0, nb, gi * cig, cig, col);
            if (direct) {
                T *yg = y + (b0 * g.c_out + gi * cog) * P;
                GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)cog, (int)P, (int)kdim, (T)1, w + gi * cog * kdim,
                     (int)kdim, col, (int)P, (T)0, yg, (int)P);
                if (!bias && !relu) continue;
                PAR_FOR(cog * P > PAR_MIN,
                for (int64_t co = 0; co < cog; co++)
                    K(bias_relu_row)(yg + co * P, yg + co * P, P, bias ? bias[gi * cog + co] : (T)0, relu););
                continue;
            }
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)cog, (int)(nb * P), (int)kdim, (T)1,
                 w + gi * cog * kdim, (int)kdim, col, (int)(nb * P), (T)0, tmp, (int)(nb * P));
            PAR_FOR2(cog * nb * P > PAR_MIN,
            for (int64_t b = 0; b < nb; b++)
                for (int64_t co = 0; co < cog; co++)
                    K(bias_relu_row)(tmp + co * nb * P + b * P, y + ((b0 + b) * g.c_out + gi * cog + co) * P, P,
                                     bias ? bias[gi * cog + co] : (T)0, relu););
        }
    }
    return CATTR_OK;
}

/* (X, W, gY) -> dX */
static cattr_status K(conv_grad_input)(const cg_node *n, const cx_view *in, cx_view *out) {
    cx_geom g;
    cx_geom_init(&g, &n->a, in[0].shape, in[0].ndim, in[1].shape);
    int64_t G = n->a.group, cig = g.c_in / G, cog = g.c_out / G;
    int64_t KK = g.k[0] * g.k[1] * g.k[2], kdim = cig * KK, P = g.out[0] * g.out[1] * g.out[2];
    const T *w = in[1].data, *gy = in[2].data;
    T *dx = out->data;
    if (K(conv_direct_ok)(&g, G)) return K(conv_direct_grad_input)(n, &g, G, w, gy, dx);
    if (K(conv_dw_ok)(&g, G)) return K(conv_dw_grad_input)(&g, w, gy, dx);
    memset(dx, 0, (size_t)cx_view_numel(out) * sizeof(T));
    const bool direct = P >= CONV_DIRECT_OUT; /* one image per product, its gradient read in place (as above) */
    int64_t chunk = direct ? 1 : K(conv_chunk)(&g, kdim);
    T *col = cpu_scratch(0, (size_t)(kdim * chunk * P) * sizeof(T));
    T *tmp = direct ? NULL : cpu_scratch(1, (size_t)(cog * chunk * P) * sizeof(T));
    T *wt = cpu_scratch(2, (size_t)(kdim * cog * G) * sizeof(T));
    if (!col || (!direct && !tmp) || !wt) {
        return cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': cannot allocate the convolution buffer", n->name);
    }
    /* each group's filters transposed ([kdim, cog]), once per call, so that the product is a plain one, which the
     * float32 GEMM of cattr's own takes (OpenBLAS's transposed-A sgemm ran at a third of the rate) */
    for (int64_t gi = 0; gi < G; gi++) {
        const T *wg = w + gi * cog * kdim;
        T *wtg = wt + gi * kdim * cog;
        for (int64_t r = 0; r < kdim; r++)
            for (int64_t co = 0; co < cog; co++) wtg[r * cog + co] = wg[co * kdim + r];
    }
    for (int64_t b0 = 0; b0 < g.n; b0 += chunk) {
        int64_t nb = g.n - b0 < chunk ? g.n - b0 : chunk;
        for (int64_t gi = 0; gi < G; gi++) {
            const T *gsrc = gy + (b0 * g.c_out + gi * cog) * P; /* direct: this image's [cog, P] block */
            if (!direct) {
                PAR_FOR2(cog * nb * P > PAR_MIN,
                for (int64_t co = 0; co < cog; co++)
                    for (int64_t b = 0; b < nb; b++) {
                        T *dst = tmp + co * nb * P + b * P;
                        const T *src = gy + ((b0 + b) * g.c_out + gi * cog + co) * P;
                        for (int64_t q = 0; q < P; q++) dst[q] = src[q];
                    });
                gsrc = tmp;
            }
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)kdim, (int)(nb * P), (int)cog, (T)1,
                 wt + gi * kdim * cog, (int)cog, gsrc, (int)(nb * P), (T)0, col, (int)(nb * P));
            K(col2im)(&g, col, b0, nb, gi * cig, cig, dx);
        }
    }
    return CATTR_OK;
}

/* ---- pooling -------------------------------------------------------------------------------------------- */


/* Max and average pooling, forward (gy_view NULL) or backward (dx into out). The maximum is the first one in
 * window scan order, as in PyTorch; windows that hold no input element give -inf (max) or 0 (average). */
/* Max pooling over 2-D (or 1-D) windows that lie wholly inside the input (no padding, no dilation, windows that
 * do not reach past the edge): the common CNN case, without per-tap bounds. Same first-maximum rule. */
static void K(maxpool_inside)(const cx_geom *g, int64_t NC, const T *x, const T *gy, T *y) {
    const int64_t IH = g->in[1], IW = g->in[2], OH = g->out[1], OW = g->out[2], KH = g->k[1], KW = g->k[2];
    const int64_t SH = g->s[1], SW = g->s[2], isp = IH * IW, osp = OH * OW;
    if (KH == 2 && KW == 2 && SH == 2 && SW == 2) { /* the common 2x2 / 2 window, unrolled */
        PAR_FOR(NC * osp * 4 > PAR_MIN,
        for (int64_t nc = 0; nc < NC; nc++) {
            const T *xc = x + nc * isp;
            for (int64_t oy = 0; oy < OH; oy++) {
                const T *r0 = xc + 2 * oy * IW;
                for (int64_t ox = 0; ox < OW; ox++) {
                    const T *w0 = r0 + 2 * ox;
                    const T v[4] = {w0[0], w0[1], w0[IW], w0[IW + 1]};
                    int64_t best = 0;
                    T bv = v[0];
                    for (int t = 1; t < 4; t++) {
                        int take = (v[t] > bv) | (v[t] != v[t]); /* as PyTorch: v > bv, or v is NaN (a NaN stays) */
                        best = take ? t : best;
                        bv = take ? v[t] : bv;
                    }
                    if (gy) y[nc * isp + 2 * oy * IW + 2 * ox + (best >> 1) * IW + (best & 1)] += gy[nc * osp + oy * OW + ox];
                    else y[nc * osp + oy * OW + ox] = bv;
                }
            }
        });
        return;
    }
    PAR_FOR(NC * osp * KH * KW > PAR_MIN,
    for (int64_t nc = 0; nc < NC; nc++) {
        const T *xc = x + nc * isp;
        for (int64_t oy = 0; oy < OH; oy++)
            for (int64_t ox = 0; ox < OW; ox++) {
                const T *w0 = xc + oy * SH * IW + ox * SW;
                int64_t best = 0;
                T bv = w0[0];
                for (int64_t ky = 0; ky < KH; ky++)
                    for (int64_t kx = 0; kx < KW; kx++) {
                        T v = w0[ky * IW + kx];
                        int take = (v > bv) | (v != v); /* as PyTorch: v > bv, or v is NaN (a NaN stays) */
                        best = take ? ky * IW + kx : best;
                        bv = take ? v : bv;
                    }
                if (gy) y[nc * isp + oy * SH * IW + ox * SW + best] += gy[nc * osp + oy * OW + ox];
                else y[nc * osp + oy * OW + ox] = bv;
            }
    });
}

/* One tap of a row of max-pooling windows: outputs lo..hi-1 read xr[ox * sx]; a window's first tap, a larger value
 * or a NaN (as PyTorch: a NaN stays) takes its place. Selects, no branches: inlined with a constant stride, the
 * vectoriser takes it. */
static inline __attribute__((always_inline)) void K(maxpool_tap)(int64_t lo, int64_t hi, const T *xr, int64_t sx,
                                                                 int32_t at, int32_t *best, T *bv) {
    for (int64_t ox = lo; ox < hi; ox++) {
        T v = xr[ox * sx], c = bv[ox];
        int32_t b = best[ox];
        int take = (b < 0) | (v > c) | (v != v);
        best[ox] = take ? at + (int32_t)(ox * sx) : b;
        bv[ox] = take ? v : c;
    }
}

/* Max pooling over 2-D (or 1-D) windows with padding, any stride and dilation (ResNet's 3x3 / 2 stem pool), planes
 * of under 2^31 elements: a row of outputs at a time, the taps in scan order, each over the outputs whose window it
 * reaches inside the input. Every output sees its taps in the scalar loop's order under the same first-maximum rule;
 * the gradient adds in output order. Returns false when the row buffers cannot be allocated. */
static bool K(maxpool_rows_ok)(const cx_geom *g) { return g->in[0] == 1 && g->k[0] == 1 && g->in[1] * g->in[2] < INT32_MAX; }

static bool K(maxpool_rows)(const cx_geom *g, int64_t NC, const T *x, const T *gy, T *y) {
    const int64_t IH = g->in[1], IW = g->in[2], OH = g->out[1], OW = g->out[2], KH = g->k[1], KW = g->k[2];
    const int64_t isp = IH * IW, osp = OH * OW, SX = g->s[2];
    bool fail = false;
    PAR_FOR_WITH(schedule(static) reduction(|| : fail), NC * osp * KH * KW > PAR_MIN,
    for (int64_t nc = 0; nc < NC; nc++) {
        T *bv = cpu_scratch(0, (size_t)OW * (sizeof(int32_t) + sizeof(T)));
        if (!bv) {
            fail = true;
            continue;
        }
        int32_t *best = (int32_t *)(bv + OW);
        const T *xc = x + nc * isp;
        for (int64_t oy = 0; oy < OH; oy++) {
            int64_t y0, y1;
            K(tap_range)(g, 1, oy, &y0, &y1);
            int64_t by = oy * g->s[1] - g->pb[1];
            for (int64_t ox = 0; ox < OW; ox++) {
                best[ox] = -1;
                bv[ox] = (T)(-INFINITY); /* stays where the window holds no element */
            }
            for (int64_t ky = y0; ky < y1; ky++) {
                int64_t row = (by + ky * g->d[1]) * IW;
                for (int64_t kx = 0; kx < KW; kx++) {
                    int64_t offx = kx * g->d[2] - g->pb[2], lo, hi;
                    K(valid_range)(IW, OW, SX, offx, &lo, &hi);
                    const T *xr = xc + row + offx;
                    int32_t at = (int32_t)(row + offx);
                    if (SX == 1) K(maxpool_tap)(lo, hi, xr, 1, at, best, bv);
                    else if (SX == 2) K(maxpool_tap)(lo, hi, xr, 2, at, best, bv);
                    else K(maxpool_tap)(lo, hi, xr, SX, at, best, bv);
                }
            }
            if (gy) {
                T *yc = y + nc * isp;
                const T *gr = gy + nc * osp + oy * OW;
                for (int64_t ox = 0; ox < OW; ox++)
                    if (best[ox] >= 0) yc[best[ox]] += gr[ox];
            } else {
                memcpy(y + nc * osp + oy * OW, bv, (size_t)OW * sizeof(T));
            }
        }
    });
    return !fail;
}

static cattr_status K(pool)(const cg_node *n, const cx_view *in, cx_view *out, const cx_view *gy_view) {
    cx_geom g;
    cx_geom_init(&g, &n->a, in[0].shape, in[0].ndim, NULL);
    int64_t NC = g.n * g.c_in, isp = g.in[0] * g.in[1] * g.in[2], osp = g.out[0] * g.out[1] * g.out[2];
    const T *x = in[0].data;
    const T *gy = gy_view ? gy_view->data : NULL;
    T *y = out->data;
    bool grad = gy != NULL, maxp = n->op == CG_MAXPOOL || n->op == CG_MAXPOOL_GRAD;
    int64_t IH = g.in[1], IW = g.in[2];
    if (grad) memset(y, 0, (size_t)(NC * isp) * sizeof(T));
    bool inside = maxp && g.in[0] == 1 && g.k[0] == 1 && g.d[1] == 1 && g.d[2] == 1 && g.pb[1] == 0 && g.pb[2] == 0 &&
                  (g.out[1] - 1) * g.s[1] + g.k[1] <= IH && (g.out[2] - 1) * g.s[2] + g.k[2] <= IW;
    if (inside) {
        K(maxpool_inside)(&g, NC, x, gy, y);
        return CATTR_OK;
    }
    if (maxp && K(maxpool_rows_ok)(&g)) {
        if (!K(maxpool_rows)(&g, NC, x, gy, y))
            return cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': cannot allocate the pooling rows", n->name);
        return CATTR_OK;
    }
    /* tap ranges per output position and dim, computed once: [k0, k1) in r[d][2*o], r[d][2*o+1] */
    int64_t nr = 2 * (g.out[0] + g.out[1] + g.out[2]);
    int64_t stackr[192], *r0 = nr <= 192 ? stackr : malloc((size_t)nr * sizeof(int64_t));
    if (!r0) return cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': out of memory", n->name);
    int64_t *rr[3] = {r0, r0 + 2 * g.out[0], r0 + 2 * (g.out[0] + g.out[1])};
    for (int d = 0; d < 3; d++)
        for (int64_t o = 0; o < g.out[d]; o++) K(tap_range)(&g, d, o, &rr[d][2 * o], &rr[d][2 * o + 1]);
    PAR_FOR(NC * osp * g.k[0] * g.k[1] * g.k[2] > PAR_MIN,
    for (int64_t nc = 0; nc < NC; nc++) {
        const T *xc = x + nc * isp;
        T *yc = y + (grad ? nc * isp : nc * osp);
        const T *gc = grad ? gy + nc * osp : NULL;
        for (int64_t oz = 0; oz < g.out[0]; oz++) {
            int64_t z0 = rr[0][2 * oz], z1 = rr[0][2 * oz + 1], bz = oz * g.s[0] - g.pb[0];
            for (int64_t oy = 0; oy < g.out[1]; oy++) {
                int64_t y0 = rr[1][2 * oy], y1 = rr[1][2 * oy + 1], by = oy * g.s[1] - g.pb[1];
                for (int64_t ox = 0; ox < g.out[2]; ox++) {
                    int64_t x0 = rr[2][2 * ox], x1 = rr[2][2 * ox + 1], bx = ox * g.s[2] - g.pb[2];
                    int64_t o = (oz * g.out[1] + oy) * g.out[2] + ox;
                    if (maxp) {
                        if (z0 == z1 || y0 == y1 || x0 == x1) { /* the window holds no input element */
                            if (!grad) yc[o] = (T)(-INFINITY);
                            continue;
                        }
                        int64_t best = ((bz + z0 * g.d[0]) * IH + by + y0 * g.d[1]) * IW + bx + x0 * g.d[2];
                        T bv = xc[best];
                        for (int64_t kz = z0; kz < z1; kz++)
                            for (int64_t ky = y0; ky < y1; ky++) {
                                const int64_t row = ((bz + kz * g.d[0]) * IH + by + ky * g.d[1]) * IW + bx;
                                for (int64_t kx = x0; kx < x1; kx++) {
                                    int64_t idx = row + kx * g.d[2];
                                    T v = xc[idx];
                                    /* branch-free first maximum (NaN wins, as in PyTorch) */
                                    int take = (v > bv) | (v != v); /* as PyTorch: v > bv, or v is NaN (a NaN stays) */
                                    best = take ? idx : best;
                                    bv = take ? v : bv;
                                }
                            }
                        if (grad) yc[best] += gc[o];
                        else yc[o] = bv;
                        continue;
                    }
                    int64_t cnt;
                    if (n->a.count_include_pad) {
                        int64_t pd[3], bb[3] = {bz, by, bx};
                        for (int d = 0; d < 3; d++) {
                            int64_t e = bb[d] + g.k[d], pe = g.in[d] + g.pe[d];
                            pd[d] = (e < pe ? e : pe) - bb[d];
                        }
                        cnt = pd[0] * pd[1] * pd[2];
                    } else {
                        cnt = (z1 - z0) * (y1 - y0) * (x1 - x0);
                    }
                    T acc = 0, gv = grad && cnt > 0 ? gc[o] / (T)cnt : 0;
                    for (int64_t kz = z0; kz < z1; kz++)
                        for (int64_t ky = y0; ky < y1; ky++) {
                            const int64_t row = ((bz + kz * g.d[0]) * IH + by + ky * g.d[1]) * IW + bx;
                            for (int64_t kx = x0; kx < x1; kx++) {
                                if (grad) yc[row + kx * g.d[2]] += gv;
                                else acc += xc[row + kx * g.d[2]];
                            }
                        }
                    if (!grad) yc[o] = cnt > 0 ? acc / (T)cnt : (T)0;
                }
            }
        }
    });
    if (r0 != stackr) free(r0);
    return CATTR_OK;
}

static cattr_status K(global_avgpool)(const cg_node *n, const cx_view *in, cx_view *out) {
    int64_t NC = in[0].shape[0] * in[0].shape[1], sp = cx_view_numel(&in[0]) / (NC ? NC : 1);
    T *y = out->data;
    if (n->op == CG_GLOBALAVGPOOL) {
        const T *x = in[0].data;
        for (int64_t i = 0; i < NC; i++) {
            T s = 0;
            for (int64_t j = 0; j < sp; j++) s += x[i * sp + j];
            y[i] = s / (T)sp;
        }
    } else {
        const T *g = in[1].data;
        for (int64_t i = 0; i < NC; i++)
            for (int64_t j = 0; j < sp; j++) y[i * sp + j] = g[i] / (T)sp;
    }
    return CATTR_OK;
}

/* ---- softmax, batchnorm ----------------------------------------------------------------------------------- */

static void K(axis_split)(const cg_node *n, const cx_view *v, int64_t *outer, int64_t *len, int64_t *inner) {
    int ax = (int)(n->a.axis < 0 ? n->a.axis + v->ndim : n->a.axis);
    *outer = cx_numel(ax, v->shape);
    if (n->a.index == 1) { /* legacy (opset < 13) softmax: coerce to 2-D at axis */
        *len = cx_numel(v->ndim - ax, v->shape + ax);
        *inner = 1;
    } else {
        *len = v->shape[ax];
        *inner = cx_numel(v->ndim - ax - 1, v->shape + ax + 1);
    }
}

static cattr_status K(softmax)(const cg_node *n, const cx_view *in, cx_view *out) {
    int64_t outer, len, inner;
    K(axis_split)(n, &in[0], &outer, &len, &inner);
    const T *x = in[0].data;
    T *y = out->data;
    PAR_FOR2(outer * len * inner > PAR_MIN,
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const T *xp = x + o * len * inner + i;
            T *yp = y + o * len * inner + i;
            T mx = xp[0];
            for (int64_t j = 1; j < len; j++)
                if (xp[j * inner] > mx) mx = xp[j * inner];
            T s = 0;
            for (int64_t j = 0; j < len; j++) {
                yp[j * inner] = EXP(xp[j * inner] - mx);
                s += yp[j * inner];
            }
            for (int64_t j = 0; j < len; j++) yp[j * inner] /= s;
        });
    return CATTR_OK;
}

/* (Y, gY) -> Y * (gY - sum(gY * Y)) */
static cattr_status K(softmax_grad)(const cg_node *n, const cx_view *in, cx_view *out) {
    int64_t outer, len, inner;
    K(axis_split)(n, &in[0], &outer, &len, &inner);
    const T *yv = in[0].data, *g = in[1].data;
    T *dx = out->data;
    PAR_FOR2(outer * len * inner > PAR_MIN,
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t base = o * len * inner + i;
            T s = 0;
            for (int64_t j = 0; j < len; j++) s += g[base + j * inner] * yv[base + j * inner];
            for (int64_t j = 0; j < len; j++) dx[base + j * inner] = yv[base + j * inner] * (g[base + j * inner] - s);
        });
    return CATTR_OK;
}

/* forward: (X, scale, bias, mean, var); grad: (gY, scale, var) */
static cattr_status K(batchnorm)(const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_BATCHNORM_GRAD;
    const T *x = in[0].data, *scale = in[1].data;
    const T *bias = grad ? NULL : in[2].data, *mean = grad ? NULL : in[3].data, *var = in[grad ? 2 : 4].data;
    int64_t N = in[0].shape[0], C = in[0].shape[1], sp = cx_numel(in[0].ndim - 2, in[0].shape + 2);
    T *y = out->data;
    T eps = (T)n->a.alpha;
    for (int64_t b = 0; b < N; b++)
        for (int64_t c = 0; c < C; c++) {
            T inv = (T)1 / SQRT(var[c] + eps);
            const T *xp = x + (b * C + c) * sp;
            T *yp = y + (b * C + c) * sp;
            if (grad) {
                T f = scale[c] * inv;
                for (int64_t j = 0; j < sp; j++) yp[j] = xp[j] * f;
            } else {
                for (int64_t j = 0; j < sp; j++) yp[j] = (xp[j] - mean[c]) * inv * scale[c] + bias[c];
            }
        }
    return CATTR_OK;
}

/* ---- rule ops: DeepLift and LRP backward rules (src/attr/rules.c) ---------------------------------------------- */

/* The DeepLift ops see a batch of 2N rows, N actual rows followed by their N references, as a tensor of two equal
 * halves (Captum's chunk(2) along dim 0); every value is computed in T in the order torch evaluates it. */

/* (X) -> cat2(Xa - Xr) */
static cattr_status K(dl_delta)(const cg_node *n, const cx_view *in, cx_view *out) {
    (void)n;
    const T *x = in[0].data;
    T *y = out->data;
    int64_t half = cx_view_numel(out) / 2;
    PAR_FOR(half > PAR_MIN,
    for (int64_t i = 0; i < half; i++) {
        T d = x[i] - x[half + i];
        y[i] = d;
        y[half + i] = d;
    });
    return CATTR_OK;
}

/* (G0, gY, dY, dX) -> where(|dX| < eps, G0, gY * dY / dX); the division is skipped where it is not used */
static cattr_status K(dl_rescale)(const cg_node *n, const cx_view *in, cx_view *out) {
    const T *g0 = in[0].data, *gy = in[1].data, *dy = in[2].data, *dx = in[3].data;
    T *y = out->data;
    const T eps = (T)n->a.alpha;
    int64_t cnt = cx_view_numel(out);
    PAR_FOR(cnt > PAR_MIN,
    for (int64_t i = 0; i < cnt; i++) {
        T d = dx[i];
        y[i] = (d < 0 ? -d : d) < eps ? g0[i] : gy[i] * dy[i] / d;
    });
    return CATTR_OK;
}

/* (U) -> U - sum(U) / numel(U); the sum is accumulated in double (torch's float sum is more exact than a naive
 * float loop) and rounded to T */
static cattr_status K(dl_center)(const cg_node *n, const cx_view *in, cx_view *out) {
    (void)n;
    const T *u = in[0].data;
    T *y = out->data;
    int64_t cnt = cx_view_numel(out);
    double s = 0;
    for (int64_t i = 0; i < cnt; i++) s += (double)u[i];
    const T m = (T)s / (T)cnt;
    PAR_FOR(cnt > PAR_MIN, for (int64_t i = 0; i < cnt; i++) y[i] = u[i] - m;);
    return CATTR_OK;
}

/* DeepLift's max-pool rule (X, Y, gY, G0) -> gX, with Xa, Xr (Ya, Yr) the actual and reference halves:
 *   dOut = [max(Ya, Yr) - Yr ; Ya - max(Ya, Yr)]
 *   P    = unpool(gY * dOut) at the argmax of each window of X (torch's max_unpool: assignment, the last window
 *          that picks an element wins)
 *   gX   = cat2(where(|Xa - Xr| < eps, G0[0], (Pa + Pr) / (Xa - Xr)))
 * G0[0], the first row of the incoming input gradient broadcast to every row, is Captum's fallback. */
static cattr_status K(dl_maxpool)(const cg_node *n, const cx_view *in, cx_view *out) {
    cx_geom g;
    cx_geom_init(&g, &n->a, in[0].shape, in[0].ndim, NULL);
    const int64_t C = g.c_in, NC = g.n * C, half = g.n / 2;
    const int64_t isp = g.in[0] * g.in[1] * g.in[2], osp = g.out[0] * g.out[1] * g.out[2];
    const int64_t IH = g.in[1], IW = g.in[2];
    const T *x = in[0].data, *yv = in[1].data, *gy = in[2].data, *g0 = in[3].data;
    T *u = out->data;
    int64_t cnt = cx_view_numel(out);
    memset(u, 0, (size_t)cnt * sizeof(T));
    PAR_FOR(NC * osp * g.k[0] * g.k[1] * g.k[2] > PAR_MIN,
    for (int64_t nc = 0; nc < NC; nc++) {
        const bool actual = nc / C < half;
        const int64_t nca = actual ? nc : nc - half * C; /* the plane of the actual row */
        const T *ya = yv + nca * osp, *yr = yv + (nca + half * C) * osp, *gc = gy + nc * osp, *xc = x + nc * isp;
        T *uc = u + nc * isp;
        for (int64_t oz = 0; oz < g.out[0]; oz++) {
            int64_t z0, z1, bz = oz * g.s[0] - g.pb[0];
            K(tap_range)(&g, 0, oz, &z0, &z1);
            for (int64_t oy = 0; oy < g.out[1]; oy++) {
                int64_t y0, y1, by = oy * g.s[1] - g.pb[1];
                K(tap_range)(&g, 1, oy, &y0, &y1);
                for (int64_t ox = 0; ox < g.out[2]; ox++) {
                    int64_t x0, x1, bx = ox * g.s[2] - g.pb[2];
                    K(tap_range)(&g, 2, ox, &x0, &x1);
                    if (z0 == z1 || y0 == y1 || x0 == x1) continue; /* the window holds no input element */
                    int64_t best = ((bz + z0 * g.d[0]) * IH + by + y0 * g.d[1]) * IW + bx + x0 * g.d[2];
                    T bv = xc[best];
                    for (int64_t kz = z0; kz < z1; kz++)
                        for (int64_t ky = y0; ky < y1; ky++) {
                            const int64_t row = ((bz + kz * g.d[0]) * IH + by + ky * g.d[1]) * IW + bx;
                            for (int64_t kx = x0; kx < x1; kx++) {
                                int64_t idx = row + kx * g.d[2];
                                T v = xc[idx];
                                int take = (v > bv) | (v != v); /* the first maximum, NaN wins: as the pool */
                                best = take ? idx : best;
                                bv = take ? v : bv;
                            }
                        }
                    int64_t o = (oz * g.out[1] + oy) * g.out[2] + ox;
                    T a = ya[o], r = yr[o];
                    T m = (a > r || a != a) ? a : r; /* torch.max propagates NaN */
                    uc[best] = gc[o] * (actual ? m - r : a - m);
                }
            }
        }
    });
    const int64_t hn = cnt / 2, row = g.n ? cnt / g.n : 0;
    const T eps = (T)n->a.alpha;
    PAR_FOR(hn > PAR_MIN,
    for (int64_t i = 0; i < hn; i++) {
        T s = u[i] + u[hn + i], d = x[i] - x[hn + i];
        T v = (d < 0 ? -d : d) < eps ? g0[i % row] : s / d;
        u[i] = v;
        u[hn + i] = v;
    });
    return CATTR_OK;
}

/* LRP's epsilon stabiliser: (gY, Z) -> gY / (Z + eps * sign(Z)) with sign(0) = +1 */
static cattr_status K(lrp_div)(const cg_node *n, const cx_view *in, cx_view *out) {
    const T *g = in[0].data, *z = in[1].data;
    T *y = out->data;
    const T eps = (T)n->a.alpha;
    int64_t cnt = cx_view_numel(out);
    PAR_FOR(cnt > PAR_MIN,
    for (int64_t i = 0; i < cnt; i++) y[i] = g[i] / (z[i] + (z[i] < 0 ? -eps : eps)););
    return CATTR_OK;
}

/* ---- recurrent layers (ONNX LSTM and GRU with their default activations; graph.h, CG_RNN) ------------------ */

static inline T K(rnn_sig)(T x) { return (T)1 / ((T)1 + EXP(-x)); }

/* One step's gates in direction d from the previous state hp (rows of stride ldh): g[B, G*H] holds the activated
 * gates (LSTM i o f c; GRU z r h), q[B, H] the GRU's recurrent part of its h gate (h R_h^T + Rb_h, or with
 * linear_before_reset = 0 the product (r * h) R_h^T + Rb_h), both for the backward step. */
static void K(rnn_gates)(const cg_node *n, const cx_view *in, const T *bias0, int64_t d, int64_t t, const T *hp,
                         int64_t ldh, T *g, T *hr, T *q) {
    const cx_view *x = &in[0];
    int64_t B = x->shape[1], In = x->shape[2], H = n->a.ints[0], G = n->a.index == 0 ? 4 : 3, GH = G * H;
    const T *X = (const T *)x->data + t * B * In, *W = (const T *)in[1].data + d * GH * In;
    const T *R = (const T *)in[2].data + d * GH * H;
    const T *bias = bias0 ? bias0 + d * 2 * GH : NULL;
    bool lstm = n->a.index == 0, lbr = n->a.ints[2] != 0;
    GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)B, (int)GH, (int)In, (T)1, X, (int)In, W, (int)In, (T)0, g, (int)GH);
    /* the recurrent products: every gate's for an LSTM, z and r (and h's when linear_before_reset) for a GRU */
    int64_t nrec = lstm || lbr ? GH : 2 * H;
    GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)B, (int)nrec, (int)H, (T)1, hp, (int)ldh, R, (int)H, (T)0, hr,
         (int)GH);
    for (int64_t b = 0; b < B; b++) {
        T *gb = g + b * GH, *hb = hr + b * GH;
        for (int64_t j = 0; j < GH; j++) {
            T wb = bias ? bias[j] : 0, rb = bias ? bias[GH + j] : 0;
            if (lstm || j < 2 * H) {
                T a = gb[j] + hb[j] + wb + rb;
                gb[j] = lstm && j >= 3 * H ? TANH(a) : K(rnn_sig)(a);
            }
        }
    }
    if (lstm) return;
    if (!lbr) { /* (r * h) R_h^T: r first */
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < H; j++) q[b * H + j] = g[b * GH + H + j] * hp[b * ldh + j];
        GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)B, (int)H, (int)H, (T)1, q, (int)H, R + 2 * H * H, (int)H,
             (T)0, hr + 2 * H, (int)GH);
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < H; j++) {
            T rec = hr[b * GH + 2 * H + j] + (bias ? bias[GH + 2 * H + j] : 0);
            T *gh = &g[b * GH + 2 * H + j];
            q[b * H + j] = rec;
            *gh = TANH(*gh + (bias ? bias[2 * H + j] : 0) + (lbr ? g[b * GH + H + j] * rec : rec));
        }
}

/* RNN (X, W, R, bias, h0, c0) -> states [T, D, B, S], and RNNGrad (gS, S, X, W, R, bias, h0, c0) -> the gradient
 * of X, h0 or c0 by backpropagation through time, each step's gates recomputed from the stored states. */
static cattr_status K(rnn)(const cg_node *n, const cx_view *in0, cx_view *out) {
    bool grad = n->op == CG_RNN_GRAD, lstm = n->a.index == 0, lbr = n->a.ints[2] != 0;
    const cx_view *in = grad ? in0 + 2 : in0;
    const T *gS = grad ? in0[0].data : NULL;
    const T *S = grad ? in0[1].data : out->data;
    int nin = n->n_in - (grad ? 2 : 0);
    const int *src = grad ? n->in + 2 : n->in;
    int64_t T_ = in[0].shape[0], B = in[0].shape[1], In = in[0].shape[2], H = n->a.ints[0];
    int64_t D = n->a.ints[1] == 2 ? 2 : 1, G = lstm ? 4 : 3, GH = G * H, SW = lstm ? 2 * H : H;
    int which = grad ? (int)n->a.ints[3] : -1;
    const T *h0 = nin > 4 && src[4] >= 0 ? in[4].data : NULL, *c0 = nin > 5 && src[5] >= 0 ? in[5].data : NULL;
    const T *bias = nin > 3 && src[3] >= 0 ? in[3].data : NULL;
    size_t per = (size_t)(B * GH * 3 + B * H * 6);
    T *buf = calloc(per, sizeof(T));
    if (!buf) return cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': out of memory", n->name);
    T *g = buf, *hr = g + B * GH, *da = hr + B * GH, *q = da + B * GH, *zero = q + B * H, *dh = zero + B * H;
    T *dc = dh + B * H, *dhp = dc + B * H, *tmp = dhp + B * H;
    T *Y = out->data;
    if (grad) memset(Y, 0, (size_t)cx_view_numel(out) * sizeof(T));
    for (int64_t d = 0; d < D; d++) {
        bool rev = n->a.ints[1] == 1 || d == 1;
        const T *W = (const T *)in[1].data + d * GH * In, *R = (const T *)in[2].data + d * GH * H;
        const T *hinit = h0 ? h0 + d * B * H : zero, *cinit = c0 ? c0 + d * B * H : zero;
        if (grad) {
            memset(dh, 0, (size_t)(B * H) * sizeof(T));
            memset(dc, 0, (size_t)(B * H) * sizeof(T));
        }
        for (int64_t s = 0; s < T_; s++) {
            int64_t k = grad ? T_ - 1 - s : s, t = rev ? T_ - 1 - k : k, tp = rev ? t + 1 : t - 1;
            bool first = k == 0;
            const T *hp = first ? hinit : S + (tp * D + d) * B * SW, *cp = first ? cinit : S + (tp * D + d) * B * SW + H;
            int64_t ldh = first ? H : SW;
            K(rnn_gates)(n, in, bias, d, t, hp, ldh, g, hr, q);
            const T *st = S + (t * D + d) * B * SW;
            if (!grad) {
                T *o = Y + (t * D + d) * B * SW;
                for (int64_t b = 0; b < B; b++)
                    for (int64_t j = 0; j < H; j++) {
                        const T *gb = g + b * GH;
                        if (lstm) {
                            T c = gb[2 * H + j] * cp[b * ldh + j] + gb[j] * gb[3 * H + j];
                            o[b * SW + H + j] = c;
                            o[b * SW + j] = gb[H + j] * TANH(c);
                        } else {
                            o[b * SW + j] = ((T)1 - gb[j]) * gb[2 * H + j] + gb[j] * hp[b * ldh + j];
                        }
                    }
                continue;
            }
            const T *gs = gS + (t * D + d) * B * SW;
            for (int64_t b = 0; b < B; b++)
                for (int64_t j = 0; j < H; j++) {
                    const T *gb = g + b * GH;
                    T *ab = da + b * GH;
                    T dH = gs[b * SW + j] + dh[b * H + j], hpv = hp[b * ldh + j];
                    if (lstm) {
                        T i = gb[j], o = gb[H + j], f = gb[2 * H + j], c = gb[3 * H + j], cv = st[b * SW + H + j];
                        T tc = TANH(cv), dC = gs[b * SW + H + j] + dc[b * H + j] + dH * o * ((T)1 - tc * tc);
                        ab[j] = dC * c * i * ((T)1 - i);
                        ab[H + j] = dH * tc * o * ((T)1 - o);
                        ab[2 * H + j] = dC * cp[b * ldh + j] * f * ((T)1 - f);
                        ab[3 * H + j] = dC * i * ((T)1 - c * c);
                        dc[b * H + j] = dC * f;
                    } else {
                        T z = gb[j], r = gb[H + j], ht = gb[2 * H + j];
                        T dah = dH * ((T)1 - z) * ((T)1 - ht * ht);
                        ab[j] = dH * (hpv - ht) * z * ((T)1 - z);
                        ab[2 * H + j] = dah;
                        dhp[b * H + j] = dH * z;
                        if (lbr) {
                            ab[H + j] = dah * q[b * H + j] * r * ((T)1 - r);
                            tmp[b * H + j] = dah * r; /* the gradient of the recurrent part h R_h^T */
                        }
                    }
                }
            if (!lstm && !lbr) { /* ds = dah R_h: r's gradient ds * h, h's ds * r */
                for (int64_t b = 0; b < B; b++)
                    for (int64_t j = 0; j < H; j++) tmp[b * H + j] = da[b * GH + 2 * H + j];
                T *ds = q; /* q is free once read above */
                GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)B, (int)H, (int)H, (T)1, tmp, (int)H,
                     R + 2 * H * H, (int)H, (T)0, ds, (int)H);
                for (int64_t b = 0; b < B; b++)
                    for (int64_t j = 0; j < H; j++) {
                        T r = g[b * GH + H + j];
                        da[b * GH + H + j] = ds[b * H + j] * hp[b * ldh + j] * r * ((T)1 - r);
                        dhp[b * H + j] += ds[b * H + j] * r;
                    }
            }
            if (which == 0) /* dX_t += da W */
                GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)B, (int)In, (int)GH, (T)1, da, (int)GH, W, (int)In,
                     (T)1, Y + t * B * In, (int)In);
            if (lstm) { /* dh_prev = da R */
                GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)B, (int)H, (int)GH, (T)1, da, (int)GH, R, (int)H,
                     (T)0, dh, (int)H);
            } else {
                if (lbr) /* + (dah * r) R_h */
                    GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)B, (int)H, (int)H, (T)1, tmp, (int)H,
                         R + 2 * H * H, (int)H, (T)1, dhp, (int)H);
                GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)B, (int)H, (int)(2 * H), (T)1, da, (int)GH, R,
                     (int)H, (T)1, dhp, (int)H);
                memcpy(dh, dhp, (size_t)(B * H) * sizeof(T));
            }
        }
        if (which == 1) memcpy(Y + d * B * H, dh, (size_t)(B * H) * sizeof(T));
        if (which == 2) memcpy(Y + d * B * H, dc, (size_t)(B * H) * sizeof(T));
    }
    free(buf);
    return CATTR_OK;
}

/* TileGrad (gY, X) -> gX: each gradient element added to the element of X it copies (in gY's order). */
static cattr_status K(tile_grad)(const cg_node *n, const cx_view *in, cx_view *out) {
    (void)n;
    const T *gy = in[0].data;
    T *gx = out->data;
    int nd = out->ndim;
    int64_t cnt = cx_view_numel(&in[0]), c[CATTR_MAX_DIMS];
    memset(gx, 0, (size_t)cx_view_numel(out) * sizeof(T));
    for (int64_t i = 0; i < cnt; i++) {
        int64_t rem = i, at = 0;
        for (int d = nd - 1; d >= 0; d--) {
            c[d] = rem % in[0].shape[d];
            rem /= in[0].shape[d];
        }
        for (int d = 0; d < nd; d++) at = at * out->shape[d] + c[d] % out->shape[d];
        gx[at] += gy[i];
    }
    return CATTR_OK;
}

/* ReduceMax / ReduceMin (X) -> Y, and ReduceExtGrad (gY, X, Y) -> gX: gY[o] / (the number of elements of X equal to
 * Y[o]) at those elements, as torch's amax / amin share the gradient among ties. */
static cattr_status K(reduce_ext)(const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_REDUCE_EXT_GRAD, mx = n->op == CG_REDUCE_MAX;
    const cx_view *x = grad ? &in[1] : &in[0];
    int nd = x->ndim;
    bool red[CATTR_MAX_DIMS];
    if (!cx_reduce_axes(&n->a, nd, red)) return cx_fail(CATTR_ERR_SHAPE, "node '%s': reduction axis out of range", n->name);
    int64_t so[CATTR_MAX_DIMS], kept = 1, nx = cx_view_numel(x);
    for (int d = nd - 1; d >= 0; d--) {
        so[d] = red[d] ? 0 : kept;
        if (!red[d]) kept *= x->shape[d];
    }
    const T *xv = x->data;
    const T *yv = grad ? (const T *)in[2].data : NULL, *g = grad ? (const T *)in[0].data : NULL;
    T *y = out->data;
    int64_t *ties = grad ? calloc((size_t)(kept > 0 ? kept : 1), sizeof *ties) : NULL;
    if (grad && !ties) return cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': out of memory", n->name);
    if (!grad)
        for (int64_t o = 0; o < kept; o++) y[o] = mx ? (T)-INFINITY : (T)INFINITY;
    for (int pass = grad ? 0 : 1; pass < 2; pass++) /* the gradient counts the ties first */
        for (int64_t i = 0; i < nx; i++) {
            int64_t rem = i, o = 0;
            for (int d = nd - 1; d >= 0; d--) {
                o += (rem % x->shape[d]) * so[d];
                rem /= x->shape[d];
            }
            if (!grad) {
                T v = xv[i];
                if (v != v || (mx ? v > y[o] : v < y[o])) y[o] = v; /* a NaN stays: no comparison replaces it */
            } else if (pass == 0) {
                ties[o] += xv[i] == yv[o];
            } else {
                y[i] = xv[i] == yv[o] ? (T)(g[o] / (T)ties[o]) : (T)0;
            }
        }
    free(ties);
    return CATTR_OK;
}

/* Resize (X) -> Y and ResizeGrad (gY, X) -> gX over the last one or two dims (ops.h, cx_resize_src): each output
 * reads up to four input elements with bilinear weights (one for nearest). */
static cattr_status K(resize)(const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_RESIZE_GRAD;
    const cx_view *x = grad ? &in[1] : &in[0], *y = grad ? &in[0] : out;
    int nd = x->ndim;
    int64_t planes = x->shape[0] * x->shape[1], H = nd == 4 ? x->shape[2] : 1, W = x->shape[nd - 1];
    int64_t OH = nd == 4 ? y->shape[2] : 1, OW = y->shape[nd - 1];
    double sh = nd == 4 ? cx_resize_scale(&n->a, nd, 2, H, OH) : 1, sw = cx_resize_scale(&n->a, nd, nd - 1, W, OW);
    const T *src = in[0].data;
    T *dst = out->data;
    if (grad) memset(dst, 0, (size_t)cx_view_numel(out) * sizeof(T));
    for (int64_t oy = 0; oy < OH; oy++) {
        int64_t y0 = 0, y1 = 0, x0, x1;
        double wy = 0, wx;
        if (nd == 4) cx_resize_src(&n->a, oy, H, OH, sh, sizeof(T) == 4, &y0, &y1, &wy);
        for (int64_t ox = 0; ox < OW; ox++) {
            cx_resize_src(&n->a, ox, W, OW, sw, sizeof(T) == 4, &x0, &x1, &wx);
            double w00 = (1 - wy) * (1 - wx), w01 = (1 - wy) * wx, w10 = wy * (1 - wx), w11 = wy * wx;
            for (int64_t p = 0; p < planes; p++) {
                int64_t base = p * H * W, o = (p * OH + oy) * OW + ox;
                if (grad) {
                    double g = (double)src[o];
                    dst[base + y0 * W + x0] += (T)(w00 * g);
                    if (w01 != 0) dst[base + y0 * W + x1] += (T)(w01 * g);
                    if (w10 != 0) dst[base + y1 * W + x0] += (T)(w10 * g);
                    if (w11 != 0) dst[base + y1 * W + x1] += (T)(w11 * g);
                } else {
                    const T *s = src + base;
                    dst[o] = (T)(w00 * (double)s[y0 * W + x0] + w01 * (double)s[y0 * W + x1] + w10 * (double)s[y1 * W + x0] +
                                 w11 * (double)s[y1 * W + x1]);
                }
            }
        }
    }
    return CATTR_OK;
}
