/* split.c - one attribution cut into parts (cattr_explainer_run_part / cattr_explainer_combine) for every method but
 * IntegratedGradients, which has its own scheme (integrated_gradients.c: unit sums).
 *
 * A method runs its work as a sequence of units (chunks of perturbed states or samples, chunks of steps, partitions
 * of a noise tunnel's samples), cut by perturbations_per_eval, internal_batch_size or the memory budget, never by the
 * part count. A part computes a contiguous range of the units, p*C/P .. (p+1)*C/P - 1, and keeps each unit's values
 * as doubles in its bytes; combining reads the parts' values in unit order and does with them what one process does
 * after each unit, so the result is one process's, bit for bit:
 *  - cx_vsplit: the units' values are the model outputs of their states, consumed by the same host code (the
 *    perturbation methods of perturbation.c, Lime and KernelShap in lime.c), or partition sums (noise.c run_tunnel);
 *  - cx_acc_split: the units add into accumulators on the backend (the tunnels of noise.c, the path methods of
 *    layer.c): a part runs its units from zero accumulators, combining adds each unit with the same Add.
 *
 * The bytes: a cx_vsplit_head (the call's shape and the cut, so that parts of another call or cut are refused), then
 * the values of the part's units in order. */
#include "attr/derive.h"
#include "attr/internal.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define VSPLIT_MAGIC "cattrPT1"

typedef struct cx_vsplit_head {
    char magic[8];
    int64_t method, tunnel, dtype, B, n, numel[CX_MAX_IN], n_states, n_out, per; /* the call and its units */
    int64_t n_chunks, part, n_parts, first, count;                        /* the cut, and this part's chunks */
} cx_vsplit_head;

/* Values of chunks [first, first + count): states of those chunks times n_out. */
static int64_t chunk_values(const cx_vsplit *v, int64_t first, int64_t count) {
    int64_t s0 = first * v->per, s1 = (first + count) * v->per;
    if (s1 > v->n_states) s1 = v->n_states;
    return s1 > s0 ? (s1 - s0) * v->n_out : 0;
}

static void head_fill(const cattr_explainer *e, const cx_call *c, const cx_vsplit *v, cx_vsplit_head *h) {
    memset(h, 0, sizeof *h);
    memcpy(h->magic, VSPLIT_MAGIC, 8);
    h->method = e->p.method;
    h->tunnel = e->p.nt_type;
    h->dtype = c->dt;
    h->B = c->B;
    h->n = c->n;
    for (int i = 0; i < c->n; i++) h->numel[i] = c->x[i]->numel;
    h->n_states = v->n_states;
    h->n_out = v->n_out;
    h->per = v->per;
    h->n_chunks = v->n_chunks;
}

cattr_status cx_vsplit_begin(cattr_explainer *e, const cx_call *c, int64_t n_states, int64_t per, int64_t n_out,
                             cx_vsplit *v) {
    memset(v, 0, sizeof *v);
    v->e = e;
    v->n_states = n_states > 0 ? n_states : 0;
    v->per = per > 0 ? per : 1;
    v->n_out = n_out;
    v->n_chunks = (v->n_states + v->per - 1) / v->per;
    v->last = v->n_chunks;
    if (e->split.n_parts > 0) { /* a part: its chunks, their values kept */
        int64_t P = e->split.n_parts, p = e->split.part;
        v->mode = CX_VSPLIT_PART;
        v->first = p * v->n_chunks / P;
        v->last = (p + 1) * v->n_chunks / P;
        cx_vsplit_head h;
        head_fill(e, c, v, &h);
        h.part = p;
        h.n_parts = P;
        h.first = v->first;
        h.count = v->last - v->first;
        size_t len = sizeof h + (size_t)chunk_values(v, v->first, h.count) * sizeof(double);
        v->blob = malloc(len);
        if (!v->blob) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory for a part of %zu bytes", len);
        memcpy(v->blob, &h, sizeof h);
        v->len = len;
        v->at = sizeof h;
        return CATTR_OK;
    }
    if (e->split.n_comb <= 0) return CATTR_OK; /* one process: every chunk, consumed at once */
    v->mode = CX_VSPLIT_COMBINE;
    int P = e->split.n_comb;
    cx_vsplit_head want, h0;
    head_fill(e, c, v, &want);
    int64_t next = 0;
    for (int p = 0; p < P; p++) {
        cx_vsplit_head h;
        const void *b = e->split.parts[p];
        size_t len = e->split.lens[p];
        if (!b || len < sizeof h) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "part %d: %zu bytes, not a part", p, len);
        memcpy(&h, b, sizeof h);
        if (p == 0) h0 = h;
        if (memcmp(&h, &want, offsetof(cx_vsplit_head, per)) != 0)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "part %d is not a part of this call (another method, dtype, "
                           "batch, inputs or number of %s)", p, "perturbations");
        if (h.per != want.per || h.n_chunks != want.n_chunks || h.n_parts != P)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "part %d cut the work differently (%lld and %lld "
                           "perturbations per pass, %lld and %lld parts): give every part the same "
                           "perturbations_per_eval", p, (long long)want.per, (long long)h.per, (long long)P,
                           (long long)h.n_parts);
        if (h.part != p || h.first != next || h.count < 0 || h.count > h.n_chunks - next ||
            len != sizeof h + (size_t)chunk_values(v, h.first, h.count) * sizeof(double))
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "part %d is out of order, overlaps another or is truncated "
                           "(it says part %lld, %lld chunks from chunk %lld of %lld; %zu bytes)", p, (long long)h.part,
                           (long long)h.count, (long long)h.first, (long long)h.n_chunks, len);
        next += h.count;
    }
    if (next != want.n_chunks)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "the parts hold %lld of the %lld chunks", (long long)next,
                       (long long)want.n_chunks);
    v->part = 0;
    v->at = sizeof h0;
    v->part_end = sizeof h0 + (size_t)chunk_values(v, h0.first, h0.count) * sizeof(double);
    return CATTR_OK;
}

bool cx_vsplit_mine(const cx_vsplit *v, int64_t k) {
    return v->mode == CX_VSPLIT_NONE || (v->mode == CX_VSPLIT_PART && k >= v->first && k < v->last);
}

cattr_status cx_vsplit_put(cx_vsplit *v, int64_t k, const double *vals, int64_t n) {
    if (v->mode != CX_VSPLIT_PART) return CATTR_OK;
    if (n != chunk_values(v, k, 1) || v->at + (size_t)n * sizeof(double) > v->len)
        return cx_fail(CATTR_ERR_INTERNAL, "chunk %lld of a part has %lld values", (long long)k, (long long)n);
    memcpy(v->blob + v->at, vals, (size_t)n * sizeof(double));
    v->at += (size_t)n * sizeof(double);
    return CATTR_OK;
}

cattr_status cx_vsplit_get(cx_vsplit *v, int64_t k, double *vals, int64_t n) {
    const cattr_explainer *e = v->e;
    if (n != chunk_values(v, k, 1)) return cx_fail(CATTR_ERR_INTERNAL, "chunk %lld has %lld values", (long long)k, (long long)n);
    while (v->at >= v->part_end && v->part + 1 < e->split.n_comb) { /* the next part (a part may hold no chunk) */
        cx_vsplit_head h;
        v->part++;
        memcpy(&h, e->split.parts[v->part], sizeof h);
        v->at = sizeof h;
        v->part_end = sizeof h + (size_t)chunk_values(v, h.first, h.count) * sizeof(double);
    }
    if (v->at + (size_t)n * sizeof(double) > v->part_end)
        return cx_fail(CATTR_ERR_INTERNAL, "the parts end before chunk %lld", (long long)k);
    memcpy(vals, (const char *)e->split.parts[v->part] + v->at, (size_t)n * sizeof(double));
    v->at += (size_t)n * sizeof(double);
    return CATTR_OK;
}

cattr_status cx_vsplit_end(cx_vsplit *v, cattr_status st) {
    if (v->mode == CX_VSPLIT_PART && st == CATTR_OK) {
        if (v->at != v->len) st = cx_fail(CATTR_ERR_INTERNAL, "a part kept %zu of its %zu bytes", v->at, v->len);
        else {
            *v->e->split.blob = v->blob;
            *v->e->split.len = v->len;
            v->blob = NULL;
        }
    }
    free(v->blob);
    v->blob = NULL;
    return st;
}

/* ---- accumulators on the backend ----------------------------------------------------------------------------------
 * For the methods whose chunks add into accumulators on the backend (acc_k += the chunk's value): a part runs its
 * chunks with zero accumulators (cx_acc_split.zero) into chunk buffers (.chunk) and keeps them as its values;
 * combining uploads each chunk's values and adds them with the same Add, in chunk order. */
cattr_status cx_acc_split_init(cattr_explainer *e, const cx_vsplit *v, int n, const int *nd,
                               const int64_t (*sh)[CATTR_MAX_DIMS], cattr_dtype dt, cx_acc_split *a) {
    memset(a, 0, sizeof *a);
    a->n = n;
    a->dt = dt;
    if (v->mode == CX_VSPLIT_NONE) return CATTR_OK;
    if (n > CX_ACC_SPLIT_MAX)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "a split call of %d accumulated tensors (at most %d)", n, CX_ACC_SPLIT_MAX);
    size_t es = cattr_dtype_size(dt);
    for (int k = 0; k < n; k++) {
        a->nd[k] = nd[k];
        memcpy(a->sh[k], sh[k], sizeof a->sh[k]);
        a->numel[k] = cx_numel(nd[k], sh[k]);
        size_t bytes = (size_t)a->numel[k] * es;
        CX_CHECK(cx_buf_fit(e->be, &a->chunk[k], bytes, NULL, false));
        if (v->mode == CX_VSPLIT_PART) CX_CHECK(cx_buf_fit(e->be, &a->zero[k], bytes, NULL, true));
    }
    return CATTR_OK;
}

int64_t cx_acc_split_width(int n, const int *nd, const int64_t (*sh)[CATTR_MAX_DIMS]) {
    int64_t w = 0;
    for (int k = 0; k < n; k++) w += cx_numel(nd[k], sh[k]);
    return w;
}

cattr_status cx_acc_split_chunk(cattr_explainer *e, cx_vsplit *v, cx_acc_split *a, cx_consts *consts, int64_t k,
                                void *const *acc, double *vals, int64_t at0) {
    size_t es = cattr_dtype_size(a->dt);
    int64_t most = 1;
    for (int q = 0; q < a->n; q++) most = a->numel[q] > most ? a->numel[q] : most;
    void *tmp = malloc((size_t)most * es);
    if (!tmp) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_status st = v->mode == CX_VSPLIT_COMBINE ? cx_vsplit_get(v, k, vals, v->n_out) : CATTR_OK;
    int64_t at = at0;
    for (int q = 0; q < a->n && st == CATTR_OK; q++) {
        int64_t cnt = a->numel[q];
        if (v->mode == CX_VSPLIT_PART) {
            st = cx_buf_get(&a->chunk[q], 0, tmp, NULL, (size_t)cnt * es);
            for (int64_t i = 0; i < cnt && st == CATTR_OK; i++)
                vals[at + i] = a->dt == CATTR_FLOAT32 ? (double)((float *)tmp)[i] : ((double *)tmp)[i];
        } else {
            for (int64_t i = 0; i < cnt; i++) {
                if (a->dt == CATTR_FLOAT32) ((float *)tmp)[i] = (float)vals[at + i];
                else ((double *)tmp)[i] = vals[at + i];
            }
            st = cx_buf_put(&a->chunk[q], 0, tmp, NULL, (size_t)cnt * es);
        }
        at += cnt;
    }
    free(tmp);
    if (st != CATTR_OK) return st;
    if (v->mode == CX_VSPLIT_PART) return cx_vsplit_put(v, k, vals, v->n_out);
    if (!a->g) { /* acc_q + chunk_q */
        cg_graph *g = a->g = cg_new();
        if (!g) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        int x[CX_ACC_SPLIT_MAX], y[CX_ACC_SPLIT_MAX];
        for (int q = 0; q < a->n; q++) x[q] = cg_add_input(g, "__split_acc");
        for (int q = 0; q < a->n; q++) y[q] = cg_add_input(g, "__split_chunk");
        for (int q = 0; q < a->n; q++)
            if ((a->outs[q] = cx_emit2(g, CG_ADD, "__split_add", x[q], y[q])) < 0)
                return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    cx_arg in[2 * CX_ACC_SPLIT_MAX];
    void *out[CX_ACC_SPLIT_MAX];
    for (int q = 0; q < 2 * a->n; q++) {
        cx_arg x = {.nd = a->nd[q % a->n], .dt = a->dt, .dev = q < a->n ? acc[q] : a->chunk[q - a->n].p};
        memcpy(x.sh, a->sh[q % a->n], sizeof x.sh);
        in[q] = x;
    }
    for (int q = 0; q < a->n; q++) out[q] = acc[q];
    cx_job j = cx_job_for(e, a->g, consts);
    j.n_in = 2 * a->n;
    j.in = in;
    j.n_out = a->n;
    j.outs = a->outs;
    j.out_dev = out;
    return cx_run(&j);
}

void cx_acc_split_free(cx_acc_split *a) {
    cg_free(a->g);
    for (int q = 0; q < CX_ACC_SPLIT_MAX; q++) {
        cx_buf_free(&a->zero[q]);
        cx_buf_free(&a->chunk[q]);
    }
    memset(a, 0, sizeof *a);
}
