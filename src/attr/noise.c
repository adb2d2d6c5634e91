/* noise.c - NoiseTunnel (SmoothGrad, SmoothGrad-squared and VarGrad around any method) and GradientShap, which Captum
 * defines as NoiseTunnel(smoothgrad, nt_samples = n_samples, stdevs, draw_baseline_from_distrib) over
 * InputBaselineXGradient (shared/reference/captum_spec.md sections 2 and 5; shared/golden/README.md section 7 for
 * the order of the random draws).
 *
 * The tunnel works in partitions of nt_samples_batch_size samples. For each partition of m samples it builds a
 * derived cx_call of B*m rows, example-major (row b*m + j = sample j of example b): the inputs plus float32 Gaussian
 * noise, the baselines (drawn rows of the distribution, or the caller's repeat-interleaved), the additional inputs,
 * the target and the feature masks interleaved the same way. It runs the wrapped method on that call and accumulates
 * the per-example sums of the attributions and of their squares; the deltas of the partitions are concatenated.
 *
 * Random numbers come from the call's explicit draws when it has them (replay of a recorded Captum run, consumed
 * in Captum's order) and otherwise from the counter-based Philox generator keyed by params.seed, with one stream per
 * input and example whose counter is the sample. Without explicit draws GradientShap also cuts its samples into
 * partitions that fit the memory budget; that changes nothing but the rounding.
 */
#include "attr/internal.h"
#include "core/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A partition: m samples per example, the first being sample j0 of nt_samples; `part` counts partitions. */
typedef struct part_info {
    int64_t m, j0;
    uint64_t part;
} part_info;

typedef cattr_status (*inner_fn)(cattr_explainer *e, cx_call *c, const part_info *pi, cattr_tensor **attr,
                                 cattr_tensor **delta);

/* One tunnel: Captum's NoiseTunnel.attribute arguments and the method it wraps. */
typedef struct tunnel {
    cattr_noise_tunnel type;
    int64_t n;     /* nt_samples */
    int64_t batch; /* samples per full partition */
    double stdev;
    bool draw_baselines; /* draw_baseline_from_distrib */
    /* partitions made only to bound memory (GradientShap, generator only): the result is that of one partition,
     * baseline rows drawn for each sample (Captum draws them once for all full partitions and again for the
     * remainder) and deltas in one partition's order */
    bool split;
    inner_fn inner;
    bool inner_dist; /* the wrapped method takes its baselines as a distribution (cx_call.dist) */
    uint64_t tag;    /* generator stream family, so that nested tunnels draw independent numbers */
} tunnel;

/* Generator streams: a family (tag), a kind of draw, the input, a draw number and the example; within a stream the
 * counter is the sample, so that the numbers do not depend on how the samples are cut into partitions. */
enum { TAG_NOISE_TUNNEL = 1, TAG_GRADIENT_SHAP = 2 };
enum { DRAW_NOISE = 1, DRAW_BASELINE = 2, DRAW_COEFF = 3 };

static uint64_t stream_id(uint64_t tag, uint64_t kind, uint64_t input, uint64_t no, int64_t example) {
    return (tag << 56) | (kind << 48) | ((input & 0xff) << 40) | ((no & 0xff) << 32) |
           ((uint64_t)example & 0xffffffffu);
}

/* splitmix64: the seed the wrapped method sees in partition `part`, so that stochastic inner methods do not repeat
 * their draws from one partition to the next. */
static uint64_t mix_seed(uint64_t seed, uint64_t part) {
    uint64_t z = seed ^ ((part + 1) * 0xD1B54A32D192ED03ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static cattr_status oom(void) { return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory"); }

/* A tensor of `rows` rows shaped like t's rows (uninitialised). */
static cattr_tensor *alloc_rows(const cattr_tensor *t, cattr_dtype dt, int64_t rows) {
    int64_t sh[CATTR_MAX_DIMS];
    memcpy(sh, t->shape, sizeof sh);
    sh[0] = rows;
    return cx_tensor_alloc(dt, t->ndim, sh);
}

/* A non-owning view of rows [r0, r1) of t (never freed). */
static cattr_tensor row_view(const cattr_tensor *t, int64_t r0, int64_t r1) {
    cattr_tensor v = *t;
    int64_t per = t->shape[0] ? t->numel / t->shape[0] : 0;
    v.shape[0] = r1 - r0;
    v.numel = per * (r1 - r0);
    v.data = (char *)t->data + (size_t)(r0 * per) * cattr_dtype_size(t->dtype);
    return v;
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
            cx_rng_init(&g, e->p.seed, stream_id(t->tag, DRAW_BASELINE, (uint64_t)i, no, b));
            g.index = (uint64_t)(j0 + j);
            idx[b * m + j] = cx_rng_below(&g, n_ref);
        }
    return CATTR_OK;
}

cattr_status cx_noisy_rows(cx_call *c, int i, int64_t m, double stdev, uint64_t seed, const uint64_t *streams,
                           uint64_t start, cattr_tensor **out) {
    const cattr_tensor *x = c->x[i];
    int64_t rows = c->B * m, per = c->B ? x->numel / c->B : 0;
    char role[48];
    snprintf(role, sizeof role, "nt_noise.input%d", i);
    const cattr_tensor *d = NULL;
    CX_CHECK(cx_next_draw(c, role, NULL, &d));
    if (d && d->numel != rows * per)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explicit draw '%s' has %lld values; %lld are needed", role,
                       (long long)d->numel, (long long)(rows * per));
    cattr_tensor *o = alloc_rows(x, c->dt, rows);
    if (!o) return oom();
    float sd = (float)stdev; /* torch.tensor(stdev): float32 */
    for (int64_t b = 0; b < c->B; b++) {
        cx_rng g; /* one normal per Philox block */
        cx_rng_init(&g, seed, streams[b]);
        g.index = start;
        for (int64_t j = 0; j < m; j++) {
            int64_t r = b * m + j;
            for (int64_t k = 0; k < per; k++) {
                double noise;
                if (d) noise = (double)(float)cx_tensor_get(d, r * per + k);
                else noise = sd == 0 ? 0.0 : (double)(float)((double)sd * (double)(float)cx_rng_normal(&g));
                cx_tensor_set(o, r * per + k, cx_rnd(c->dt, cx_tensor_get(x, b * per + k) + noise));
            }
        }
    }
    *out = o;
    return CATTR_OK;
}

/* Input i repeated m times per example (interleaved) plus float32 Gaussian noise (nt_noise.input<i>); sample j's
 * noise starts at Philox block j*per of the example's stream. */
static cattr_status noisy_input(cattr_explainer *e, cx_call *c, const tunnel *t, int i, const part_info *pi,
                                cattr_tensor **out) {
    int64_t per = c->B ? c->x[i]->numel / c->B : 0;
    uint64_t *streams = malloc((size_t)(c->B + 1) * sizeof *streams);
    if (!streams) return oom();
    for (int64_t b = 0; b < c->B; b++) streams[b] = stream_id(t->tag, DRAW_NOISE, (uint64_t)i, 0, b);
    cattr_status st = cx_noisy_rows(c, i, pi->m, t->stdev, e->p.seed, streams, (uint64_t)(pi->j0 * per), out);
    free(streams);
    return st;
}

/* ---- the derived call ------------------------------------------------------------------------------------------ */

/* The call the wrapped method sees for a partition of m samples: B*m rows, everything interleaved per example. */
typedef struct derived {
    cx_call c;
    cattr_call user;
    cattr_target target;
    int64_t *tidx;
    cattr_tensor *masks[CX_MAX_IN]; /* expanded feature masks (owned), or NULL */
    const cattr_tensor *in[CX_MAX_IN], *bl[CX_MAX_IN], *add[CX_MAX_IN], *fm[CX_MAX_IN];
} derived;

static void derived_free(derived *d) {
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
static cattr_status derived_init(const cx_call *c, int64_t m, derived *d) {
    memset(d, 0, sizeof *d);
    d->c.n = c->n;
    d->c.B = c->B * m;
    d->c.dt = c->dt;
    d->c.n_add = c->n_add;
    d->c.user = &d->user;
    d->c.next_draw = c->next_draw;
    for (int j = 0; j < c->n_add; j++) {
        d->c.add[j] = cx_expand_rows(c->add[j], m, CX_INTERLEAVE);
        if (!d->c.add[j]) return oom();
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
        if (!d->tidx) return oom();
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
                if (!d->masks[i]) return oom();
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
static cattr_status derived_baseline(const cx_call *c, const tunnel *t, int i, int64_t m, const int64_t *idx,
                                     derived *d) {
    const cattr_tensor *src = c->dist[i] ? c->dist[i] : c->base[i];
    int64_t rows = c->B * m;
    cattr_tensor *o = NULL;
    if (!src) return cx_fail(CATTR_ERR_INTERNAL, "input %d has no prepared baseline", i);
    int64_t per = src->shape[0] ? src->numel / src->shape[0] : 0;
    size_t row_bytes = (size_t)per * cattr_dtype_size(src->dtype);
    if (idx) {
        o = alloc_rows(src, src->dtype, rows);
        if (!o) return oom();
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
    if (!o) return oom();
    if (t->inner_dist) d->c.dist[i] = o;
    else d->c.base[i] = o;
    d->bl[i] = o;
    return CATTR_OK;
}

/* ---- accumulation ------------------------------------------------------------------------------------------- */

/* Per-example sums over samples of the attributions and their squares, in the attributions' dtype. */
typedef struct sums {
    cattr_dtype dt;
    int ndim;
    int64_t shape[CATTR_MAX_DIMS];
    int64_t numel;
    double *sum, *sq;
} sums;

static cattr_status accumulate(const cattr_tensor *a, int i, int64_t m, sums *s) {
    if (a->ndim < 1 || a->shape[0] % m != 0)
        return cx_fail(CATTR_ERR_SHAPE, "the wrapped method's attribution %d has %lld rows, not a multiple of the %lld "
                                        "samples",
                       i, (long long)(a->ndim ? a->shape[0] : 0), (long long)m);
    int64_t bsz = a->shape[0] / m, per = a->shape[0] ? a->numel / a->shape[0] : 0;
    cattr_dtype dt = a->dtype;
    bool first = s->sum == NULL;
    if (first) {
        s->dt = dt;
        s->ndim = a->ndim;
        memcpy(s->shape, a->shape, sizeof s->shape);
        s->shape[0] = bsz;
        s->numel = bsz * per;
        s->sum = malloc((size_t)(s->numel + 1) * sizeof *s->sum);
        s->sq = malloc((size_t)(s->numel + 1) * sizeof *s->sq);
        if (!s->sum || !s->sq) return oom();
    } else if (bsz * per != s->numel || dt != s->dt) {
        return cx_fail(CATTR_ERR_SHAPE, "the wrapped method's attribution %d changed shape between partitions", i);
    }
    double *col = malloc((size_t)(2 * m + 1) * sizeof *col), *col_sq = col ? col + m : NULL;
    if (!col) return oom();
    for (int64_t b = 0; b < bsz; b++)
        for (int64_t k = 0; k < per; k++) {
            for (int64_t j = 0; j < m; j++) {
                double v = cx_tensor_get(a, (b * m + j) * per + k);
                col[j] = v;
                col_sq[j] = cx_rnd(dt, v * v); /* attribution ** 2 */
            }
            double su = cx_torch_sum(dt, col, m, k, per), sq = cx_torch_sum(dt, col_sq, m, k, per);
            int64_t o = b * per + k;
            s->sum[o] = first ? su : cx_rnd(dt, s->sum[o] + su);
            s->sq[o] = first ? sq : cx_rnd(dt, s->sq[o] + sq);
        }
    free(col);
    return CATTR_OK;
}

/* smoothgrad E[a], smoothgrad_sq E[a^2], vargrad E[a^2] - E[a]^2, with E[.] = sum * 1 / n as Captum writes it
 * (Python evaluates (sum * 1) / n). */
static cattr_status smooth(const sums *s, cattr_noise_tunnel type, int64_t n, cattr_tensor **out) {
    cattr_tensor *o = cx_tensor_alloc(s->dt, s->ndim, s->shape);
    if (!o) return oom();
    for (int64_t k = 0; k < s->numel; k++) {
        double mean = cx_rnd(s->dt, s->sum[k] / (double)n), mean_sq = cx_rnd(s->dt, s->sq[k] / (double)n), v;
        if (type == CATTR_NT_SMOOTHGRAD) v = mean;
        else if (type == CATTR_NT_SMOOTHGRAD_SQ) v = mean_sq;
        else v = cx_rnd(s->dt, mean_sq - cx_rnd(s->dt, mean * mean));
        cx_tensor_set(o, k, v);
    }
    *out = o;
    return CATTR_OK;
}

/* Concatenates the partitions' deltas (Captum), or for a split tunnel puts them in one partition's order: entry
 * (b*n + j)*q + s for sample j of example b. */
static cattr_status concat_deltas(const tunnel *t, int64_t B, int64_t bs, cattr_tensor **parts, int n_parts,
                                  cattr_tensor **out) {
    int64_t total = 0;
    for (int p = 0; p < n_parts; p++) {
        if (!parts[p]) return CATTR_OK; /* the wrapped method has no delta */
        total += parts[p]->numel;
    }
    if (n_parts == 0) return CATTR_OK;
    cattr_tensor *o = cx_tensor_alloc(parts[0]->dtype, 1, &total);
    if (!o) return oom();
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
static cattr_status run_partition(cattr_explainer *e, cx_call *c, const tunnel *t, const part_info *pi, bool redraw,
                                  int64_t **idx, sums *acc, cattr_tensor **delta) {
    int64_t m = pi->m;
    derived d;
    cattr_tensor *attr[CX_MAX_IN] = {0};
    cattr_status st = derived_init(c, m, &d);
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        st = noisy_input(e, c, t, i, pi, &d.c.x[i]);
        d.in[i] = d.c.x[i];
    }
    if (redraw) /* Captum's remainder partition draws its baselines after its noise */
        for (int i = 0; i < c->n && st == CATTR_OK; i++)
            if (idx[i])
                st = t->split ? draw_indices(e, c, t, i, m, pi->j0, 0, idx[i])
                                        : draw_indices(e, c, t, i, m, 0, 1, idx[i]);
    for (int i = 0; i < c->n && st == CATTR_OK; i++) st = derived_baseline(c, t, i, m, idx[i], &d);
    if (st == CATTR_OK) {
        d.c.next_draw = c->next_draw;
        st = t->inner(e, &d.c, pi, attr, delta);
        c->next_draw = d.c.next_draw;
    }
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        if (!attr[i]) st = cx_fail(CATTR_ERR_INTERNAL, "the wrapped method returned no attribution for input %d", i);
        else st = accumulate(attr[i], i, m, &acc[i]);
    }
    for (int i = 0; i < CX_MAX_IN; i++) cattr_tensor_free(attr[i]);
    derived_free(&d);
    return st;
}

static cattr_status run_tunnel(cattr_explainer *e, cx_call *c, const tunnel *t, cattr_tensor **attr_out,
                               cattr_tensor **delta_out) {
    int64_t bs = t->batch > 0 && t->batch < t->n ? t->batch : t->n;
    int64_t full = t->n / bs, rem = t->n - full * bs;
    int n_parts = (int)(full + (rem > 0));
    sums acc[CX_MAX_IN];
    int64_t *idx[CX_MAX_IN] = {0};
    cattr_tensor **deltas = calloc((size_t)n_parts + 1, sizeof *deltas);
    memset(acc, 0, sizeof acc);
    cattr_status st = deltas ? CATTR_OK : oom();
    /* Captum draws the baseline rows of the full partitions once, before any noise, and reuses them in each */
    for (int i = 0; i < c->n && st == CATTR_OK && t->draw_baselines; i++) {
        if (!tensor_baseline(c, i)) continue;
        idx[i] = malloc((size_t)(c->B * bs + 1) * sizeof *idx[i]);
        if (!idx[i]) st = oom();
        else if (!t->split) st = draw_indices(e, c, t, i, bs, 0, 0, idx[i]);
    }
    for (int64_t p = 0; p < full && st == CATTR_OK; p++) {
        part_info pi = {bs, p * bs, (uint64_t)p};
        st = run_partition(e, c, t, &pi, t->split, idx, acc, delta_out ? &deltas[p] : NULL);
    }
    if (rem > 0 && st == CATTR_OK) {
        part_info pi = {rem, full * bs, (uint64_t)full};
        st = run_partition(e, c, t, &pi, true, idx, acc, delta_out ? &deltas[full] : NULL);
    }
    for (int i = 0; i < c->n && st == CATTR_OK; i++) st = smooth(&acc[i], t->type, t->n, &attr_out[i]);
    if (st == CATTR_OK && delta_out) st = concat_deltas(t, c->B, bs, deltas, n_parts, delta_out);
    if (st != CATTR_OK)
        for (int i = 0; i < c->n; i++) {
            cattr_tensor_free(attr_out[i]);
            attr_out[i] = NULL;
        }
    for (int i = 0; i < CX_MAX_IN; i++) {
        free(idx[i]);
        free(acc[i].sum);
        free(acc[i].sq);
    }
    for (int p = 0; deltas && p < n_parts; p++) cattr_tensor_free(deltas[p]);
    free(deltas);
    return st;
}

/* ---- NoiseTunnel ------------------------------------------------------------------------------------------ */

static cattr_status check_noise(double stdev, const char *what) {
    if (!isfinite(stdev) || stdev < 0)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "%s must be a finite number >= 0 (got %g)", what, stdev);
    return CATTR_OK;
}

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
    const cattr_attr_params *p = &e->p;
    if (p->nt_type < CATTR_NT_SMOOTHGRAD || p->nt_type > CATTR_NT_VARGRAD)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "unknown NoiseTunnel type %d", (int)p->nt_type);
    if (p->nt_samples < 1)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "nt_samples must be at least 1 (got %d)", p->nt_samples);
    if (p->nt_samples_batch_size < 0)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "nt_samples_batch_size must be positive, or 0 for all samples at "
                                                   "once (got %d)",
                       p->nt_samples_batch_size);
    CX_CHECK(check_noise(p->stdevs, "the NoiseTunnel stdevs"));
    tunnel t = {.type = p->nt_type,
                .n = p->nt_samples,
                .batch = p->nt_samples_batch_size,
                .stdev = p->stdevs,
                .draw_baselines = p->draw_baseline_from_distrib != 0,
                .inner = wrapped_method,
                .inner_dist = e->method->baseline_distribution,
                .tag = TAG_NOISE_TUNNEL};
    return run_tunnel(e, c, &t, attr, delta);
}

cattr_status (*const cx_noise_tunnel)(cattr_explainer *e, cx_call *c, cattr_tensor **attr,
                                      cattr_tensor **delta) = noise_tunnel;

/* ---- GradientShap ------------------------------------------------------------------------------------------- */

/* Rows of the gradient passes per chunk, from the memory budget. */
static cattr_status rows_per_chunk(cattr_explainer *e, cx_call *c, int64_t *out) {
    size_t budget = cx_memory_budget(e), row = 0;
    CX_CHECK(cx_row_bytes(e, c, true, &row));
    size_t k = row ? budget / row : (size_t)c->B;
    if (k < 1) {
        cx_log(CATTR_LOG_WARN, "the memory budget (%zu bytes) is below one row (%zu bytes); running one row per pass",
               budget, row);
        k = 1;
    }
    *out = k > (size_t)c->B ? c->B : (int64_t)k;
    return CATTR_OK;
}

/* Captum's InputBaselineXGradient on the derived call (rows already expanded): one coefficient c per row
 * (gradshap_coeff), the gradient at c*x + (1-c)*baseline, times (x - baseline); delta per row. */
static cattr_status input_baseline_x_gradient(cattr_explainer *e, cx_call *c, const part_info *pi,
                                              cattr_tensor **attr, cattr_tensor **delta) {
    cattr_dtype dt = c->dt;
    int64_t B = c->B;
    cattr_tensor *pts[CX_MAX_IN] = {0};
    double *coef = malloc((size_t)(B + 1) * sizeof *coef);
    const cattr_tensor *d = NULL;
    cattr_status st = coef ? cx_next_draw(c, "gradshap_coeff", NULL, &d) : oom();
    if (st == CATTR_OK && d && d->numel != B)
        st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "explicit draw 'gradshap_coeff' has %lld values; %lld are needed",
                     (long long)d->numel, (long long)B);
    for (int64_t r = 0; r < B && st == CATTR_OK; r++) {
        double v;
        if (d) {
            v = cx_tensor_get(d, r);
        } else { /* row r = b*m + j is sample j0 + j of example b */
            cx_rng g;
            cx_rng_init(&g, e->p.seed, stream_id(TAG_GRADIENT_SHAP, DRAW_COEFF, 0, 0, r / pi->m));
            g.index = (uint64_t)(pi->j0 + r % pi->m);
            v = cx_rng_uniform(&g);
        }
        coef[r] = cx_rnd(dt, v); /* numpy's float64 draw converted to the input dtype */
    }
    /* points c*x + (1-c)*b and attributions' factor (x - b), in torch's operation order */
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        const cattr_tensor *x = c->x[i], *b = c->base[i];
        pts[i] = cx_tensor_alloc(dt, x->ndim, x->shape);
        attr[i] = cx_tensor_alloc(dt, x->ndim, x->shape);
        if (!pts[i] || !attr[i]) {
            st = oom();
            break;
        }
        int64_t per = B ? x->numel / B : 0;
        for (int64_t r = 0; r < B; r++) {
            double cr = coef[r], one_minus = cx_rnd(dt, 1.0 - cr);
            for (int64_t k = r * per; k < (r + 1) * per; k++) {
                double xv = cx_tensor_get(x, k), bv = cx_tensor_get(b, k);
                cx_tensor_set(pts[i], k, cx_rnd(dt, cx_rnd(dt, cr * xv) + cx_rnd(dt, one_minus * bv)));
            }
        }
    }
    int64_t chunk = B;
    if (st == CATTR_OK) st = rows_per_chunk(e, c, &chunk);
    bool want_delta = delta && e->p.return_convergence_delta;
    if (st == CATTR_OK && want_delta) {
        *delta = cx_tensor_alloc(dt, 1, &B);
        if (!*delta) st = oom();
    }
    for (int64_t r0 = 0; r0 < B && st == CATTR_OK; r0 += chunk) {
        int64_t r1 = r0 + chunk < B ? r0 + chunk : B;
        cattr_tensor vx[CX_MAX_IN], vb[CX_MAX_IN], vp[CX_MAX_IN], va[CX_MAX_IN], *gr[CX_MAX_IN] = {0};
        cattr_tensor *pp[CX_MAX_IN], *ap[CX_MAX_IN], *bp[CX_MAX_IN];
        cattr_tensor vadd[CX_MAX_IN];
        cx_call sub = *c;
        cattr_target tsub;
        sub.B = r1 - r0;
        for (int i = 0; i < c->n; i++) {
            vx[i] = row_view(c->x[i], r0, r1);
            vb[i] = row_view(c->base[i], r0, r1);
            vp[i] = row_view(pts[i], r0, r1);
            va[i] = row_view(attr[i], r0, r1);
            sub.x[i] = &vx[i];
            sub.base[i] = bp[i] = &vb[i];
            pp[i] = &vp[i];
            ap[i] = &va[i];
        }
        for (int j = 0; j < c->n_add; j++) {
            vadd[j] = row_view(c->add[j], r0, r1);
            sub.add[j] = &vadd[j];
        }
        if (c->target && c->target->kind == CATTR_TARGET_PER_EXAMPLE) {
            tsub = *c->target;
            tsub.idx = c->target->idx + r0 * c->target->n_idx;
            tsub.n_rows = r1 - r0;
            sub.target = &tsub;
        }
        st = cx_grad(e, &sub, pp, 1, CX_TILE, gr);
        for (int i = 0; i < c->n && st == CATTR_OK; i++) {
            int64_t n = va[i].numel;
            for (int64_t k = 0; k < n; k++) {
                double g = cx_tensor_get(gr[i], k);
                double v = e->p.multiply_by_inputs
                               ? cx_rnd(dt, cx_rnd(dt, cx_tensor_get(&vx[i], k) - cx_tensor_get(&vb[i], k)) * g)
                               : g;
                cx_tensor_set(&va[i], k, v);
            }
        }
        for (int i = 0; i < CX_MAX_IN; i++) cattr_tensor_free(gr[i]);
        if (st == CATTR_OK && want_delta) {
            cattr_tensor *dd = NULL;
            st = cx_convergence_delta(e, &sub, ap, bp, &dd);
            if (st == CATTR_OK)
                for (int64_t r = r0; r < r1; r++) cx_tensor_set(*delta, r, cx_tensor_get(dd, r - r0));
            cattr_tensor_free(dd);
        }
    }
    for (int i = 0; i < CX_MAX_IN; i++) cattr_tensor_free(pts[i]);
    free(coef);
    if (st != CATTR_OK) {
        for (int i = 0; i < c->n; i++) {
            cattr_tensor_free(attr[i]);
            attr[i] = NULL;
        }
        if (want_delta) {
            cattr_tensor_free(*delta);
            *delta = NULL;
        }
    }
    return st;
}

static cattr_status gradient_shap_init(cattr_explainer *e) {
    if (e->p.n_samples < 1)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "GradientShap needs n_samples >= 1 (got %d)", e->p.n_samples);
    return check_noise(e->p.stdevs, "GradientShap's stdevs");
}

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
                .inner = input_baseline_x_gradient,
                .inner_dist = false,
                .tag = TAG_GRADIENT_SHAP};
    return run_tunnel(e, c, &t, attr, delta);
}

const cx_method cx_method_gradient_shap = {CATTR_METHOD_GRADIENT_SHAP, "gradient-shap", "GradientShap", true,
                                           gradient_shap_init, gradient_shap, NULL};
