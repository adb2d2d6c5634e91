/* index.cu - the CUDA backend's data movement: Transpose, Concat and its gradient, Gather and its gradient, Slice and
 * its gradient, SeqPick and its gradient, Pad, TileGrad, and the perturbation methods' WhereId and PlaceRows. Copies
 * move elements by bytes (every dtype); the gradients gather (each output element sums its sources in double, in
 * the reference kernels' order), so no atomics and the same result every run. A bad index sets the device error word
 * (reported at the next synchronisation) and reads element 0 instead. */
#include "backend/cuda/cu.h"

extern "C" {
#include "ops/ops.h"
}

static void transpose(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    int nd = in[0].ndim;
    int64_t istr[CATTR_MAX_DIMS], pstr[CATTR_MAX_DIMS], r = 1;
    for (int d = nd - 1; d >= 0; d--) {
        istr[d] = r;
        r *= in[0].shape[d];
    }
    for (int d = 0; d < nd; d++) pstr[d] = istr[n->a.n_ints ? n->a.ints[d] : nd - 1 - d];
    dv x = cu_dv(&in[0]), y = cu_dv(out);
    cu_each(c, cx_view_numel(out), CU_FN {
        int64_t cc[CATTR_MAX_DIMS], src = 0;
        unrav(i, nd, y.sh, cc);
        for (int d = 0; d < nd; d++) src += cc[d] * pstr[d];
        cpe(y, i, x, src);
    });
}

/* Concat: one launch per input, each element to its place; ConcatGrad: the piece of gY of input `index`. */
static void concat(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    int nd = out->ndim, ax = (int)(n->a.axis < 0 ? n->a.axis + nd : n->a.axis);
    int64_t inner = cx_numel(nd - ax - 1, out->shape + ax + 1), olen = out->shape[ax], off = 0;
    dv y = cu_dv(out);
    for (int k = 0; k < n->n_in; k++) {
        dv x = cu_dv(&in[k]);
        int64_t len = in[k].shape[ax], o0 = off;
        cu_each(c, cx_view_numel(&in[k]), CU_FN {
            int64_t t = i % inner, j = (i / inner) % len, o = i / (inner * len);
            cpe(y, (o * olen + o0 + j) * inner + t, x, i);
        });
        off += len;
    }
}

static void concat_grad(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    int nd = in[0].ndim, ax = (int)(n->a.axis < 0 ? n->a.axis + nd : n->a.axis);
    int64_t inner = cx_numel(nd - ax - 1, in[0].shape + ax + 1), glen = in[0].shape[ax], len = out->shape[ax], off = 0;
    for (int64_t k = 0; k < n->a.index; k++) off += in[1 + k].shape[ax];
    dv g = cu_dv(&in[0]), y = cu_dv(out);
    cu_each(c, cx_view_numel(out), CU_FN {
        int64_t t = i % inner, j = (i / inner) % len, o = i / (inner * len);
        cpe(y, i, g, (o * glen + off + j) * inner + t);
    });
}

/* Gather: out[o, j, t] = data[o, idx[j], t]. GatherGrad (gY, idx, X): element (o, k, t) of X's shape sums the gY rows
 * whose index is k (segmented: the rows of each k listed first, so the work is O(ni + dim + the output)). */
static cattr_status gather(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_GATHER_GRAD;
    const cx_view *data = grad ? &in[2] : &in[0];
    int ax = (int)(n->a.axis < 0 ? n->a.axis + data->ndim : n->a.axis);
    int64_t inner = cx_numel(data->ndim - ax - 1, data->shape + ax + 1);
    int64_t dim = data->shape[ax], ni = cx_view_numel(&in[1]);
    dv ix = cu_dv(&in[1]), y = cu_dv(out), src = cu_dv(&in[0]);
    int *err = c->err;
    if (!grad) {
        bool widen = cx_dtype_is_storage(data->dtype); /* a checkpoint's table as stored, read by a float32 call */
        cu_each(c, cx_view_numel(out), CU_FN {
            int64_t t = i % inner, j = (i / inner) % ni, o = i / (inner * ni), k = ldi(ix, j);
            if (k < 0) k += dim;
            if (k < 0 || k >= dim) {
                cu_flag(err, CU_ERR_GATHER_INDEX);
                k = 0;
            }
            if (widen) ((float *)y.p)[i] = cu_from16(src.p, src.dt, (o * dim + k) * inner + t);
            else cpe(y, i, src, (o * dim + k) * inner + t);
        });
        return CATTR_OK;
    }
    /* the indices grouped by target, ascending within each (a counting sort by one thread: O(ni + dim)), so each
     * output element reads only its own sources, in the reference's order */
    int64_t *off = (int64_t *)cu_scratch(c, (size_t)(dim + 1 + ni) * sizeof(int64_t)), *lst = off + dim + 1;
    if (!off) return cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': out of device memory", n->name);
    cattr_status st = cu_blocks(c, 1, 0, CU_BLK_FN {
        blk.each(1, [&](int64_t) {
            for (int64_t k = 0; k <= dim; k++) off[k] = 0;
            for (int64_t j = 0; j < ni; j++) {
                int64_t q = ldi(ix, j);
                if (q < 0) q += dim;
                if (q < 0 || q >= dim) cu_flag(err, CU_ERR_GATHER_INDEX);
                else off[q + 1]++;
            }
            for (int64_t k = 0; k < dim; k++) off[k + 1] += off[k];
            for (int64_t j = 0; j < ni; j++) { /* off[q] moves to the end of q's sources (the start of q + 1) */
                int64_t q = ldi(ix, j);
                if (q < 0) q += dim;
                if (q >= 0 && q < dim) lst[off[q]++] = j;
            }
        });
        blk.count(ni + dim);
    });
    if (st != CATTR_OK) return st;
    bool ints = out->dtype == CATTR_INT64;
    cu_each(c, cx_view_numel(out), CU_FN {
        int64_t t = i % inner, k = (i / inner) % dim, o = i / (inner * dim), si = 0;
        double s = 0;
        for (int64_t e = k ? off[k - 1] : 0; e < off[k]; e++) {
            int64_t j = lst[e];
            if (ints) si += ldi(src, (o * ni + j) * inner + t);
            else s += ld(src, (o * ni + j) * inner + t);
        }
        if (ints) ((int64_t *)y.p)[i] = si;
        else sto(y, i, s);
    });
    return CATTR_OK;
}

/* Slice: Y[c] = X[start + c step]; SliceGrad (gY, X): zeros of X's shape, then gY written into the slice. */
static cattr_status slice(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_SLICE_GRAD;
    const cx_view *big = grad ? out : &in[0], *small = grad ? &in[0] : out;
    int nd = big->ndim;
    int64_t s0[CATTR_MAX_DIMS], sp[CATTR_MAX_DIMS], cnt[CATTR_MAX_DIMS], bstr[CATTR_MAX_DIMS], r = 1;
    cx_slice_resolve(&n->a, nd, big->shape, s0, sp, cnt);
    for (int d = nd - 1; d >= 0; d--) {
        bstr[d] = r;
        r *= big->shape[d];
    }
    int64_t total = cx_numel(nd, cnt);
    if (cx_view_numel(small) != total)
        return cx_fail(CATTR_ERR_SHAPE, "node '%s' (op %s): the slice has %lld elements, the gradient %lld", n->name,
                       cg_op_names[n->op], (long long)total, (long long)cx_view_numel(small));
    if (grad) {
        cattr_status rc = cu_zero(c, out->data, (size_t)cx_view_numel(out) * cattr_dtype_size(out->dtype));
        if (rc != CATTR_OK) return rc;
    }
    dv x = cu_dv(&in[0]), y = cu_dv(out);
    cu_each(c, total, CU_FN {
        int64_t cc[CATTR_MAX_DIMS], off = 0;
        unrav(i, nd, cnt, cc);
        for (int d = 0; d < nd; d++) off += (s0[d] + cc[d] * sp[d]) * bstr[d];
        if (grad) cpe(y, off, x, i);
        else cpe(y, i, x, off);
    });
    return CATTR_OK;
}

/* SeqPick (X [S, L, C], pos [S] or [S, P]) -> [S, P, C]; SeqPickGrad (gY, pos, X): element (s, l, c) of X's shape sums
 * the gY rows of s picked at l. */
static void seq_pick(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    bool grad = n->op == CG_SEQ_PICK_GRAD;
    const cx_view *big = grad ? out : &in[0];
    int64_t L = big->shape[1], C = big->shape[2], P = in[1].ndim == 2 ? in[1].shape[1] : 1;
    dv x = cu_dv(&in[0]), pos = cu_dv(&in[1]), y = cu_dv(out);
    int *err = c->err;
    if (!grad) {
        cu_each(c, cx_view_numel(out), CU_FN {
            int64_t ch = i % C, sp = i / C, s = sp / P, l = ldi(pos, sp);
            if (l < 0 || l >= L) {
                cu_flag(err, CU_ERR_SEQ_POS);
                l = 0;
            }
            cpe(y, i, x, (s * L + l) * C + ch);
        });
        return;
    }
    bool ints = out->dtype == CATTR_INT64;
    cu_each(c, cx_view_numel(out), CU_FN {
        int64_t ch = i % C, l = (i / C) % L, s = i / (C * L), si = 0;
        double acc = 0;
        for (int64_t p = 0; p < P; p++) {
            int64_t q = ldi(pos, s * P + p);
            if (q < 0 || q >= L) cu_flag(err, CU_ERR_SEQ_POS);
            if (q != l) continue;
            if (ints) si += ldi(x, (s * P + p) * C + ch);
            else acc += ld(x, (s * P + p) * C + ch);
        }
        if (ints) ((int64_t *)y.p)[i] = si;
        else sto(y, i, acc);
    });
}

/* Pad: each output position reads the element cx_pad_source names, or the constant. */
static void pad(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    dv x = cu_dv(&in[0]), y = cu_dv(out);
    int64_t pads[2 * CATTR_MAX_DIMS];
    for (int k = 0; k < 2 * CATTR_MAX_DIMS; k++) pads[k] = k < n->a.n_ints ? n->a.ints[k] : 0;
    int mode = (int)n->a.index, nd = in[0].ndim;
    double cv = rd(y, n->a.alpha);
    cu_each(c, cx_view_numel(out), CU_FN {
        int64_t cc[CATTR_MAX_DIMS];
        unrav(i, nd, y.sh, cc);
        int64_t at = cx_pad_source(cc, nd, x.sh, pads, mode);
        sto(y, i, at >= 0 ? ld(x, at) : cv);
    });
}

/* TileGrad (gY, X): each element of X sums its copies in gY (in gY's order). */
static void tile_grad(cu_ctx *c, const cx_view *in, cx_view *out) {
    dv g = cu_dv(&in[0]), y = cu_dv(out);
    int nd = out->ndim;
    int64_t rep[CATTR_MAX_DIMS], cnt = 1;
    for (int d = 0; d < nd; d++) {
        rep[d] = out->shape[d] ? in[0].shape[d] / out->shape[d] : 0;
        cnt *= rep[d];
    }
    cu_each(c, cx_view_numel(out), CU_FN {
        int64_t oc[CATTR_MAX_DIMS], rc[CATTR_MAX_DIMS];
        unrav(i, nd, y.sh, oc);
        double s = 0;
        for (int64_t j = 0; j < cnt; j++) {
            unrav(j, nd, rep, rc);
            int64_t at = 0;
            for (int d = 0; d < nd; d++) at = at * g.sh[d] + rc[d] * y.sh[d] + oc[d];
            s += ld(g, at);
        }
        sto(y, i, s);
    });
}

/* WhereId: out = M == id[row] (index 1: <=) ? B : A over M's shape, broadcasting A and B; with row maps, row r reads
 * row arow[r] of A, brow[r] of B, mrow[r] of M. */
static void where_id(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out) {
    dv a = cu_dv(&in[0]), b = cu_dv(&in[1]), m = cu_dv(&in[2]), id = cu_dv(&in[3]), y = cu_dv(out);
    bool le = n->a.index == 1;
    int *err = c->err;
    if (n->n_in > 4) {
        int64_t R = out->shape[0], per = R ? cx_view_numel(out) / R : 0;
        bool has[3];
        dv map[3];
        for (int k = 0; k < 3; k++) {
            has[k] = n->n_in > 4 + k && in[4 + k].data;
            map[k] = has[k] ? cu_dv(&in[4 + k]) : y;
        }
        int64_t lim[3] = {in[0].shape[0], in[1].shape[0], in[2].shape[0]};
        cu_each(c, cx_view_numel(out), CU_FN {
            int64_t r = i / per, k = i % per, row[3];
            for (int q = 0; q < 3; q++) {
                row[q] = has[q] ? (int64_t)ld(map[q], r) : r;
                if (row[q] < 0 || row[q] >= lim[q]) {
                    cu_flag(err, CU_ERR_ROW_MAP);
                    row[q] = 0;
                }
            }
            int64_t mk = ldi(m, row[2] * per + k), idr = ldi(id, r);
            bool pick = le ? mk <= idr : mk == idr;
            if (pick) cpe(y, i, b, row[1] * per + k);
            else cpe(y, i, a, row[0] * per + k);
        });
        return;
    }
    int nd = in[2].ndim;
    cu_each(c, cx_view_numel(&in[2]), CU_FN {
        int64_t cc[CATTR_MAX_DIMS];
        unrav(i, nd, m.sh, cc);
        int64_t mk = ldi(m, i), idr = ldi(id, cc[0]);
        bool pick = le ? mk <= idr : mk == idr;
        if (pick) cpe(y, i, b, bidx(nd, cc, b));
        else cpe(y, i, a, bidx(nd, cc, a));
    });
}

/* PlaceRows: out[b, k] = v[(ord[b or 0, k] - q0) B + b] where 0 <= ord - q0 < R / B, else acc[b, k]. */
static void place_rows(cu_ctx *c, const cx_view *in, cx_view *out) {
    int64_t B = out->shape[0], per = B ? cx_view_numel(out) / B : 0, S = B ? in[1].shape[0] / B : 0;
    bool one = in[2].shape[0] == 1;
    dv acc = cu_dv(&in[0]), v = cu_dv(&in[1]), ord = cu_dv(&in[2]), q0 = cu_dv(&in[3]), y = cu_dv(out);
    cu_each(c, cx_view_numel(out), CU_FN {
        int64_t b = i / per, k = i % per;
        int64_t j = (int64_t)ld(ord, (one ? 0 : b) * per + k) - (int64_t)ld(q0, 0);
        if (j >= 0 && j < S) cpe(y, i, v, j * B + b);
        else cpe(y, i, acc, i);
    });
}

cattr_status cu_run_index(cu_ctx *c, const cg_node *n, const cx_view *in, cx_view *out, bool *done) {
    *done = true;
    switch (n->op) {
    case CG_TRANSPOSE: transpose(c, n, in, out); return CATTR_OK;
    case CG_CONCAT: concat(c, n, in, out); return CATTR_OK;
    case CG_CONCAT_GRAD: concat_grad(c, n, in, out); return CATTR_OK;
    case CG_GATHER: case CG_GATHER_GRAD: return gather(c, n, in, out);
    case CG_SLICE: case CG_SLICE_GRAD: return slice(c, n, in, out);
    case CG_SEQ_PICK: case CG_SEQ_PICK_GRAD: seq_pick(c, n, in, out); return CATTR_OK;
    case CG_WHERE_ID: where_id(c, n, in, out); return CATTR_OK;
    case CG_PLACE_ROWS: place_rows(c, in, out); return CATTR_OK;
    default: break;
    }
    if (out->dtype != CATTR_INT64) switch (n->op) {
        case CG_PAD: pad(c, n, in, out); return CATTR_OK;
        case CG_TILE_GRAD: tile_grad(c, in, out); return CATTR_OK;
        default: break;
        }
    *done = false;
    return CATTR_OK;
}
