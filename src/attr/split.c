/* split.c - one attribution cut into parts (cattr_explainer_run_part / cattr_explainer_combine) for the methods that
 * evaluate the model on a sequence of perturbed states or samples and consume the outputs in order on the host: the
 * perturbation methods (FeatureAblation, FeaturePermutation, Occlusion, ShapleyValueSampling, ShapleyValues) and the
 * surrogate methods (Lime, KernelShap). IntegratedGradients has its own scheme (gradient.c: chunk sums).
 *
 * Such a method runs its states in chunks (perturbations_per_eval or the memory budget fixes the cut, never the part
 * count). A part evaluates a contiguous range of the chunks, p*C/P .. (p+1)*C/P - 1, and keeps the output values of
 * every state it evaluated, as doubles, in its bytes; combining feeds the parts' values, in chunk order, to the same
 * host code one process runs after each chunk. Each state's values come from the same forward pass of the same
 * chunk as in one process, so the result is one process's, bit for bit.
 *
 * The bytes: a cx_vsplit_head (the call's shape and the cut, so that parts of another call or cut are refused), then
 * the values of the part's chunks in order. */
#include "attr/internal.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define VSPLIT_MAGIC "cattrPT1"

typedef struct cx_vsplit_head {
    char magic[8];
    int64_t method, dtype, B, n, numel[CX_MAX_IN], n_states, n_out, per; /* the call and its states */
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
