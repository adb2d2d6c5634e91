/* noise.c - NoiseTunnel (SmoothGrad, SmoothGrad-squared and VarGrad around any method) and GradientShap, which Captum
 * defines as NoiseTunnel(smoothgrad, nt_samples = n_samples, stdevs, draw_baseline_from_distrib) over
 * InputBaselineXGradient (shared/reference/captum_spec.md sections 2 and 5; shared/golden/README.md section 7 for
 * the order of the random draws).
 *
 * The tunnel works in partitions of nt_samples_batch_size samples. For each partition of m samples it builds a
 * derived cx_call of B*m rows, example-major (row b*m + j = sample j of example b): the inputs plus float32 Gaussian
 * noise, the baselines (drawn rows of the distribution, or the caller's repeat-interleaved), the additional inputs,
 * the target and the feature masks interleaved the same way. It runs the wrapped method on that call and accumulates
 * the per-example sums of the attributions and of their squares on the backend (tunnel_dev.c: the one-pass gradient
 * methods and GradientShap as one graph; tunnel_io.c: any other method, run whole per partition); the deltas of the
 * partitions are concatenated.
 *
 * Random numbers come from the call's explicit draws when it has them (replay of a recorded Captum run, consumed
 * in Captum's order) and otherwise from the counter-based Philox generator keyed by params.seed, with one stream per
 * input and example whose counter is the sample. Without explicit draws GradientShap also cuts its samples into
 * partitions that fit the memory budget; that changes nothing but the rounding.
 */
#include "attr/noise_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t cx_nt_stream_id(uint64_t tag, uint64_t kind, uint64_t input, uint64_t no, int64_t example) {
    return (tag << 56) | (kind << 48) | ((input & 0xff) << 40) | ((no & 0xff) << 32) |
           ((uint64_t)example & 0xffffffffu);
}

uint64_t cx_tunnel_noise_stream(int input, int64_t example) {
    return cx_nt_stream_id(TAG_NOISE_TUNNEL, DRAW_NOISE, (uint64_t)input, 0, example);
}

/* splitmix64: the seed the wrapped method sees in partition `part`, so that stochastic inner methods do not repeat
 * their draws from one partition to the next. */
static uint64_t mix_seed(uint64_t seed, uint64_t part) {
    uint64_t z = seed ^ ((part + 1) * 0xD1B54A32D192ED03ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

cattr_status cx_nt_oom(void) { return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory"); }

/* A tensor of `rows` rows shaped like t's rows (uninitialised). */
cattr_tensor *cx_nt_alloc_rows(const cattr_tensor *t, cattr_dtype dt, int64_t rows) {
    int64_t sh[CATTR_MAX_DIMS];
    memcpy(sh, t->shape, sizeof sh);
    sh[0] = rows;
    return cx_tensor_alloc(dt, t->ndim, sh);
}

/* ---- random draws ------------------------------------------------------------------------------------------ */

/* Does the caller give input i's baseline as a tensor (Captum draws rows only for tensor baselines; a scalar or no
 * baseline is left as it is)? */
static bool tensor_baseline(const cx_call *c, int i) {
    const cattr_tensor *b = c->user && c->user->baselines ? c->user->baselines[i] : NULL;
    return b && b->ndim >= 1 && b->ndim == c->x[i]->ndim;
}

/* Number of rows to draw input i's baselines from. */
static int64_t reference_rows(const cx_call *c, int i) {
    if (c->dist[i]) return c->dist[i]->shape[0];
    const cattr_tensor *b = c->user->baselines[i];
    return b->shape[0] == 1 ? 1 : c->B; /* per-example baselines (prepared for a method without distributions) */
}

/* Baseline row indices for input i (nt_baseline_index.input<i>): B*m values in [0, n_ref), for samples j0.. of
 * each example; `no` tells apart Captum's second draw (the remainder partition). */
static cattr_status draw_indices(cattr_explainer *e, cx_call *c, const tunnel *t, int i, int64_t m, int64_t j0,
                                 uint64_t no, int64_t *idx) {
    int64_t n_ref = reference_rows(c, i), rows = c->B * m;
    char role[48];
    snprintf(role, sizeof role, "nt_baseline_index.input%d", i);
    const cattr_tensor *d = NULL;
    CX_CHECK(cx_next_draw(c, role, NULL, &d));
    if (d) {
        if (d->numel != rows)
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explicit draw '%s' has %lld values; %lld are needed", role,
                           (long long)d->numel, (long long)rows);
        for (int64_t r = 0; r < rows; r++) {
            double v = cx_tensor_get(d, r);
            if (!(v >= 0 && v < (double)n_ref))
                return cx_fail(CATTR_ERR_INVALID_ARGUMENT,
                               "explicit draw '%s' holds index %g; baseline %d has %lld rows", role, v, i,
                               (long long)n_ref);
            idx[r] = (int64_t)v;
        }
        return CATTR_OK;
    }
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t j = 0; j < m; j++) {
            cx_rng g;
            cx_rng_init(&g, e->p.seed, cx_nt_stream_id(t->tag, DRAW_BASELINE, (uint64_t)i, no, b));
            g.index = (uint64_t)(j0 + j);
            idx[b * m + j] = cx_rng_below(&g, n_ref);
        }
    return CATTR_OK;
}


/* ---- the derived call ------------------------------------------------------------------------------------------ */


void cx_nt_derived_free(derived *d) {
    for (int i = 0; i < CX_MAX_IN; i++) {
        cattr_tensor_free(d->c.x[i]);
        cattr_tensor_free(d->c.base[i]);
        cattr_tensor_free(d->c.dist[i]);
        cattr_tensor_free(d->c.add[i]);
        cattr_tensor_free(d->masks[i]);
    }
    free(d->tidx);
    memset(d, 0, sizeof *d);
}

/* Everything but the inputs and baselines: additional inputs, target, feature masks, the draw queue. */
cattr_status cx_nt_derived_init(const cx_call *c, int64_t m, derived *d) {
    memset(d, 0, sizeof *d);
    d->c.n = c->n;
    d->c.B = c->B * m;
    d->c.dt = c->dt;
    d->c.n_add = c->n_add;
    d->c.user = &d->user;
    d->c.next_draw = c->next_draw;
    for (int j = 0; j < c->n_add; j++) {
        d->c.add[j] = cx_expand_rows(c->add[j], m, CX_INTERLEAVE);
        if (!d->c.add[j]) return cx_nt_oom();
        d->add[j] = d->c.add[j];
    }
    const cattr_target *t = c->target;
    d->c.target = t;
    if (t && t->kind == CATTR_TARGET_PER_EXAMPLE) {
        if (t->n_rows != c->B)
            return cx_fail(CATTR_ERR_TARGET, "%lld per-example targets given for a batch of %lld", (long long)t->n_rows,
                           (long long)c->B);
        if (t->n_idx < 0 || (t->n_idx > 0 && !t->idx))
            return cx_fail(CATTR_ERR_TARGET, "a per-example target needs its indices");
        d->tidx = malloc((size_t)(d->c.B * t->n_idx + 1) * sizeof *d->tidx);
        if (!d->tidx) return cx_nt_oom();
        for (int64_t b = 0; b < c->B; b++)
            for (int64_t j = 0; j < m; j++)
                for (int k = 0; k < t->n_idx; k++) d->tidx[(b * m + j) * t->n_idx + k] = t->idx[b * t->n_idx + k];
        d->target = *t;
        d->target.n_rows = d->c.B;
        d->target.idx = d->tidx;
        d->c.target = &d->target;
    }
    if (c->user) d->user = *c->user;
    d->user.inputs = d->in;
    d->user.n_inputs = c->n;
    d->user.baselines = d->bl;
    d->user.target = d->c.target;
    d->user.additional = d->add;
    d->user.n_additional = c->n_add;
    if (c->user && c->user->feature_masks) { /* Captum interleaves masks whose first dim is above 1 */
        for (int i = 0; i < c->n; i++) {
            const cattr_tensor *fm = c->user->feature_masks[i];
            if (fm && fm->ndim >= 1 && fm->shape[0] > 1) {
                d->masks[i] = cx_expand_rows(fm, m, CX_INTERLEAVE);
                if (!d->masks[i]) return cx_nt_oom();
                fm = d->masks[i];
            }
            d->fm[i] = fm;
        }
        d->user.feature_masks = d->fm;
    }
    return CATTR_OK;
}

/* Input i's baselines in the derived call: the drawn rows `idx`, or (idx NULL) the caller's baselines expanded as
 * Captum does: per-example tensors interleaved, a distribution of another size (or one row) kept as it is. A method
 * without distributions gets a full tensor of B*m rows. */
cattr_status cx_nt_derived_baseline(const cx_call *c, const tunnel *t, int i, int64_t m, const int64_t *idx,
                                     derived *d) {
    const cattr_tensor *src = c->dist[i] ? c->dist[i] : c->base[i];
    int64_t rows = c->B * m;
    cattr_tensor *o = NULL;
    if (!src) return cx_fail(CATTR_ERR_INTERNAL, "input %d has no prepared baseline", i);
    int64_t per = src->shape[0] ? src->numel / src->shape[0] : 0;
    size_t row_bytes = (size_t)per * cattr_dtype_size(src->dtype);
    if (idx) {
        o = cx_nt_alloc_rows(src, src->dtype, rows);
        if (!o) return cx_nt_oom();
        for (int64_t r = 0; r < rows; r++)
            memcpy((char *)o->data + (size_t)r * row_bytes, (const char *)src->data + (size_t)idx[r] * row_bytes,
                   row_bytes);
    } else if (!c->dist[i] || (src->shape[0] == c->B && c->B > 1)) {
        o = cx_expand_rows(src, m, CX_INTERLEAVE);
    } else if (t->inner_dist || src->shape[0] == rows) {
        o = cx_expand_rows(src, 1, CX_TILE);
    } else if (src->shape[0] == 1) {
        o = cx_expand_rows(src, rows, CX_TILE);
    } else {
        return cx_fail(CATTR_ERR_SHAPE,
                       "baseline %d is a distribution of %lld rows: give one row, one per example, or draw the "
                       "baselines from the distribution (draw_baseline_from_distrib)",
                       i, (long long)src->shape[0]);
    }
    if (!o) return cx_nt_oom();
    if (t->inner_dist) d->c.dist[i] = o;
    else d->c.base[i] = o;
    d->bl[i] = o;
    return CATTR_OK;
}

/* Concatenates the partitions' deltas (Captum), or for a split tunnel puts them in one partition's order: entry
 * (b*n + j)*q + s for sample j of example b. */
cattr_status cx_nt_concat_deltas(const tunnel *t, int64_t B, int64_t bs, cattr_tensor **parts, int n_parts,
                                  cattr_tensor **out) {
    int64_t total = 0;
    for (int p = 0; p < n_parts; p++) {
        if (!parts[p]) return CATTR_OK; /* the wrapped method has no delta */
        total += parts[p]->numel;
    }
    if (n_parts == 0) return CATTR_OK;
    cattr_tensor *o = cx_tensor_alloc(parts[0]->dtype, 1, &total);
    if (!o) return cx_nt_oom();
    int64_t at = 0;
    for (int p = 0; p < n_parts; p++) {
        int64_t m = p * bs + bs <= t->n ? bs : t->n - p * bs, q = parts[p]->numel / (B * m);
        for (int64_t k = 0; k < parts[p]->numel; k++) {
            int64_t to = at + k;
            if (t->split && q * B * m == parts[p]->numel) {
                int64_t row = k / q, b = row / m, j = p * bs + row % m;
                to = (b * t->n + j) * q + k % q;
            }
            cx_tensor_set(o, to, cx_tensor_get(parts[p], k));
        }
        at += parts[p]->numel;
    }
    *out = o;
    return CATTR_OK;
}

/* ---- the tunnel ---------------------------------------------------------------------------------------------- */

/* One partition: noise, baselines (idx[i]: drawn rows or NULL; redrawn first when `redraw`), the wrapped method,
 * accumulation. */
/* The baseline rows Captum draws once for the full partitions of bs samples, before any noise (idx[i] for the inputs
 * whose baselines are drawn: allocated for B*bs rows; a split tunnel draws per partition instead). */
cattr_status cx_nt_draw_first(cattr_explainer *e, cx_call *c, const tunnel *t, int64_t bs, int64_t **idx) {
    for (int i = 0; i < c->n && t->draw_baselines; i++) {
        if (!tensor_baseline(c, i)) continue;
        if (!(idx[i] = malloc((size_t)(c->B * bs + 1) * sizeof *idx[i]))) return cx_nt_oom();
        if (!t->split) CX_CHECK(draw_indices(e, c, t, i, bs, 0, 0, idx[i]));
    }
    return CATTR_OK;
}

/* A partition's own baseline rows, drawn after its noise: the remainder partition's (Captum's second draw), or every
 * partition's in a split tunnel. */
cattr_status cx_nt_draw_again(cattr_explainer *e, cx_call *c, const tunnel *t, const part_info *pi, int64_t **idx) {
    for (int i = 0; i < c->n; i++)
        if (idx[i])
            CX_CHECK(t->split ? draw_indices(e, c, t, i, pi->m, pi->j0, 0, idx[i])
                              : draw_indices(e, c, t, i, pi->m, 0, 1, idx[i]));
    return CATTR_OK;
}

/* ---- NoiseTunnel ------------------------------------------------------------------------------------------ */

/* The explainer's method on a partition's derived call, under a seed of its own for each partition. */
static cattr_status wrapped_method(cattr_explainer *e, cx_call *c, const part_info *pi, cattr_tensor **attr,
                                   cattr_tensor **delta) {
    uint64_t seed = e->p.seed;
    e->p.seed = mix_seed(seed, pi->part);
    cattr_status st = e->method->attribute(e, c, attr, delta);
    e->p.seed = seed;
    return st;
}

static cattr_status noise_tunnel(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    const cattr_attr_params *p = &e->p; /* nt_type, nt_samples, nt_samples_batch_size, stdevs: cx_params_check */
    tunnel t = {.type = p->nt_type,
                .n = p->nt_samples,
                .batch = p->nt_samples_batch_size,
                .stdev = p->stdevs,
                .draw_baselines = p->draw_baseline_from_distrib != 0,
                .inner = wrapped_method,
                .inner_dist = e->method->baseline_distribution,
                .tag = TAG_NOISE_TUNNEL};
    int kind = 0; /* the wrapped gradient methods run on the backend with the tunnel */
    switch (e->p.method) {
    case CATTR_METHOD_SALIENCY: kind = e->p.abs ? DEV_GRAD_ABS : DEV_GRAD; break;
    case CATTR_METHOD_INPUT_X_GRADIENT: kind = DEV_GRAD_X; break;
    case CATTR_METHOD_GUIDED_BACKPROP: case CATTR_METHOD_DECONVOLUTION: kind = DEV_GRAD; break;
    default: break;
    }
    for (int i = 0; i < c->n && kind && t.draw_baselines; i++)
        if (tensor_baseline(c, i)) kind = 0; /* rows drawn for a method that ignores them: Captum's draw order */
    if (kind) return cx_nt_run_tunnel_dev(e, c, &t, kind, NULL, 0, attr, delta);
    return cx_nt_run_tunnel_io(e, c, &t, attr, delta);
}

cattr_status (*const cx_noise_tunnel)(cattr_explainer *e, cx_call *c, cattr_tensor **attr,
                                      cattr_tensor **delta) = noise_tunnel;

/* ---- GradientShap ------------------------------------------------------------------------------------------- */

/* GradientShap's n_samples and stdevs are checked by cx_params_check (methods.c). */

/* Samples per partition: Captum's one partition when replaying recorded draws; otherwise as many as the memory
 * budget allows for the host tensors of a partition (noisy inputs, baselines, points, attributions, additional
 * inputs: B rows per sample). */
static int64_t gradient_shap_batch(cattr_explainer *e, const cx_call *c, int64_t n) {
    if (c->user && c->user->n_draws > 0) return n;
    size_t row = 0;
    for (int i = 0; i < c->n; i++) row += 4 * (size_t)(c->x[i]->numel / (c->B ? c->B : 1)) * cattr_dtype_size(c->dt);
    for (int j = 0; j < c->n_add; j++)
        row += (size_t)(c->add[j]->numel / (c->B ? c->B : 1)) * cattr_dtype_size(c->add[j]->dtype);
    size_t per_sample = row * (size_t)(c->B ? c->B : 1), k = per_sample ? cx_memory_budget(e) / 2 / per_sample : 0;
    return k < 1 ? 1 : (k > (size_t)n ? n : (int64_t)k);
}

static cattr_status gradient_shap(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    int64_t n = e->p.n_samples, batch = gradient_shap_batch(e, c, n);
    tunnel t = {.type = CATTR_NT_SMOOTHGRAD,
                .n = n,
                .batch = batch,
                .stdev = e->p.stdevs,
                .draw_baselines = true,
                .split = batch < n,
                .tag = TAG_GRADIENT_SHAP};
    return cx_nt_run_tunnel_dev(e, c, &t, DEV_GSHAP, NULL, 0, attr, delta);
}

cattr_status cx_layer_gradient_shap(cattr_explainer *e, cx_call *c, const int *layers, int n_l, cattr_tensor **attr,
                                    cattr_tensor **delta) {
    int64_t n = e->p.n_samples;
    tunnel t = {.type = CATTR_NT_SMOOTHGRAD,
                .n = n,
                .batch = n, /* one partition, as Captum's */
                .stdev = e->p.stdevs,
                .draw_baselines = true,
                .tag = TAG_GRADIENT_SHAP};
    return cx_nt_run_tunnel_dev(e, c, &t, DEV_LAYER_GSHAP, layers, n_l, attr, delta);
}

const cx_method cx_method_gradient_shap = {CATTR_METHOD_GRADIENT_SHAP, true,
                                           NULL, gradient_shap, NULL};

