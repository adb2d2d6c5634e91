/* perturb_internal.h - what the perturbation methods' files share (perturbation.c: the masks, the reference output,
 * the batched passes, FeatureAblation and FeaturePermutation; occlusion.c; shapley.c). */
#ifndef CATTR_ATTR_PERTURB_INTERNAL_H
#define CATTR_ATTR_PERTURB_INTERNAL_H

#include "attr/derive.h"
#include "attr/internal.h"
#include "attr/perturb_forms.h"
#include "core/rng.h"

#define PT_STREAM_FP 0x4650000000000000ull  /* FeaturePermutation: + feature ordinal */
#define PT_STREAM_SVS 0x5356530000000000ull /* ShapleyValueSampling: the n_samples orders, in turn */
#define SV_MAX_FEATURES 12                  /* ShapleyValues enumerates M! orders */

/* Feature ids per input, expanded to `rows` x per-example elements, and for every feature the mask positions
 * (row*per + k) that hold it. */
typedef struct pt_masks {
    int n;
    int64_t B;
    int64_t per[CX_MAX_IN];  /* elements per example of input i */
    int64_t rows[CX_MAX_IN]; /* mask rows: 1 (shared by the examples) or B */
    int64_t *ids[CX_MAX_IN]; /* rows*per feature ids */
    int64_t F;               /* features, numbered 0..F-1 in visiting order */
    bool dense;              /* feature q has id q (Shapley methods); else looked up in by_id */
    int64_t *by_id;          /* F pairs (id, ordinal), ascending by id */
    uint32_t *holds;         /* F: bit i set when input i has elements of the feature */
    int64_t *start[CX_MAX_IN]; /* F+1 offsets into pos */
    int64_t *pos[CX_MAX_IN];   /* positions grouped by feature */
} pt_masks;

/* Target-selected output of one state: n_out values (B with a target, every output element without one). */
typedef struct pt_ref {
    double *y;
    int64_t n_out;
    int64_t per_row; /* values per example: n_out / B */
    cattr_dtype dt;  /* model-output dtype */
    int ndim;        /* shape of the target-selected output */
    int64_t shape[CATTR_MAX_DIMS];
} pt_ref;

/* A sequence of perturbed states, evaluated many per forward pass and consumed in order. */
typedef struct pt_pass pt_pass;
struct pt_pass {
    cattr_explainer *e;
    cx_call *c;
    int64_t n_states;
    int64_t n_out;
    /* consumes the n_out target-selected output values of state s; called in state order */
    cattr_status (*take)(pt_pass *p, int64_t s, const double *y);
    void *user;
    /* a model of the whole batch: c is the view of the call c0 (perturb_forms.h) */
    const cx_pform *f;
    cx_call *c0;
};

#define pt_state cx_pform_state

cattr_status cx_pt_alloc_attr(cattr_dtype dt, int lead_nd, const int64_t *lead, const cattr_tensor *x,
                              cattr_tensor **out);
static inline int64_t cx_pt_example_numel(const cattr_tensor *x) { return cx_numel(x->ndim - 1, x->shape + 1); }
static inline bool cx_pt_has_target(const cx_call *c) { return c->target && c->target->kind != CATTR_TARGET_NONE; }
cattr_status cx_pt_reference_output(cattr_explainer *e, cx_call *c, cattr_tensor *const *xs, pt_ref *ref);
cattr_status cx_pt_states_per_pass(cattr_explainer *e, cx_call *c, int64_t n_states, int64_t *out);
cattr_status cx_pt_whole_values(cattr_explainer *e, cx_call *c0, const cx_pform *f, cattr_tensor *const *xs,
                                double *vals);
cattr_status cx_pt_features_dense(pt_masks *pm);
void cx_pt_masks_free(pt_masks *pm);
cattr_status cx_pt_masks_index(pt_masks *pm);
cattr_status cx_pt_masks_load(const cx_call *c, const cx_pform *f, pt_masks *pm);
static inline bool cx_pt_replaying(const cx_call *c) { return c->user && c->user->n_draws > 0; }
cattr_status cx_pt_take_perm_draw(cx_call *c, const char *role, int64_t n, int64_t *out);
cattr_status cx_pt_computed(pt_pass *p, cx_vsplit *v, int64_t k, int64_t s0, int64_t cnt, const double *vals);
cattr_status cx_pt_other(pt_pass *p, cx_vsplit *v, int64_t k, int64_t s0, int64_t cnt, double *vals);
/* (occlusion.c) */
cattr_status cx_pt_reference(cattr_explainer *e, cx_call *c0, const cx_pform *f, cattr_tensor *const *xs,
                             pt_ref *ref);

/* (perturb_forms.c, ablation_dev.c) */
typedef struct fa_run {
    pt_masks *pm;
    pt_ref *ref;
    cattr_tensor **attr;
    bool permute;
    int64_t *perms;   /* replay: the recorded permutations, B each */
    int64_t *perm_at; /* replay: F x n offsets into perms (-1: none) */
    int64_t *scratch; /* the most rows of an input: a generated permutation */
    double *diff;     /* n_out */
    uint64_t seed;
    const cx_pform *f;            /* the call's form */
    int64_t aper[CX_MAX_IN];      /* elements of an attribution row of input i (its dims but the first) */
    int64_t arows[CX_MAX_IN];     /* whole: the rows of ids the attributions take (1, or one per output value) */
} fa_run;

void cx_pt_fa_release(cattr_explainer *e);
cattr_status cx_pt_fa_take(pt_pass *p, int64_t q, const double *y);
cattr_status cx_pt_feature_ablation(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta);
int64_t cx_pt_feature_of(const pt_masks *pm, int64_t v);
cattr_status cx_pt_feature_permutation(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta);
cattr_status cx_pt_features_first_seen(pt_masks *pm);
cattr_status cx_pt_fp_replay_perms(cattr_explainer *e, cx_call *c, fa_run *f);
bool cx_pt_is_identity(const int64_t *p, int64_t n);
int64_t cx_pt_perm_rows(const fa_run *f, const cx_call *c, int i);

#endif
