/* perturb_forms.c - the forms of a call the perturbation methods take besides one model output per example: a model
 * of the whole batch (perturb_forms.h). */
#include "attr/perturb_internal.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the forms of a call (perturb_forms.h) ---------------------------------------------------------------------- */

_Thread_local bool cx_pform_building_whole;

void cx_pform_free(cx_pform *f) {
    cx_call_free(&f->v);
    memset(f, 0, sizeof *f);
}

/* *out: a tensor over t's data with a leading dim of 1 (NULL for t NULL). */
static cattr_status view1(const cattr_tensor *t, const char *what, int i, cattr_tensor **out) {
    *out = NULL;
    if (!t) return CATTR_OK;
    if (t->ndim >= CATTR_MAX_DIMS)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "%s %d has %d dims: a model of the whole batch takes at most %d", what, i,
                       t->ndim, CATTR_MAX_DIMS - 1);
    int64_t sh[CATTR_MAX_DIMS];
    sh[0] = 1;
    memcpy(sh + 1, t->shape, (size_t)t->ndim * sizeof *sh);
    return cattr_tensor_wrap(t->dtype, t->ndim + 1, sh, t->data, out);
}

cattr_status cx_pform_get(cattr_explainer *e, cx_call *c, bool batched, bool one_value, cx_pform *f) {
    char s1[128];
    memset(f, 0, sizeof *f);
    bool whole = false, target = c->target && c->target->kind != CATTR_TARGET_NONE;
    for (int i = 0; i < c->n; i++) whole |= c->x[i]->shape[0] != c->B;
    for (int j = 0; j < c->n_add; j++) whole |= c->add[j]->ndim < 1 || c->add[j]->shape[0] != c->B;
    CX_CHECK(cx_output_shape(e, c, 1, &f->ond, f->osh, &f->odt));
    whole |= f->ond < 1 || f->osh[0] != c->B;
    int ppe = e->p.perturbations_per_eval;
    if (!whole && batched && ppe != 1 && c->B > 0) { /* copies of the batch share a pass: the output grows with it */
        int nd2 = 0;
        int64_t sh2[CATTR_MAX_DIMS];
        if (cx_output_shape(e, c, 2, &nd2, sh2, NULL) != CATTR_OK) /* a model that takes no other batch */
            whole = true;
        else
            whole = nd2 != f->ond || sh2[0] != 2 * f->osh[0] || !cx_shape_eq(nd2 - 1, sh2 + 1, f->ond - 1, f->osh + 1);
    }
    f->whole = whole;
    cx_shape_str(f->ond, f->osh, s1, sizeof s1);
    if (whole && target && f->ond < 1)
        return cx_fail(CATTR_ERR_TARGET, "the model output has shape %s (one value for the whole batch): there is "
                       "nothing for a target to select; give no target", s1);
    f->n_sel = !target ? cx_numel(f->ond, f->osh) : whole ? f->osh[0] : c->B;
    if (!whole) return CATTR_OK;
    if (one_value && f->n_sel != 1)
        return cx_fail(CATTR_ERR_SHAPE, "the model output has shape %s for inputs of batch %lld: Lime and KernelShap fit "
                       "one value per example (a model of the whole batch: one value, or a target that selects one)",
                       s1, (long long)c->B);
    if (e->p.nt_type != CATTR_NT_NONE)
        return cx_fail(CATTR_ERR_SHAPE, "the model output has shape %s for inputs of batch %lld: a noise tunnel needs a "
                       "model output with the batch first (one per example)", s1, (long long)c->B);
    if (batched && ppe > 1)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "perturbations_per_eval is %d, but the model output (shape %s for "
                       "inputs of batch %lld) does not grow with the batch: perturbed copies of a model of the whole "
                       "batch cannot share a forward pass; give perturbations_per_eval 1 (Captum asserts the same)",
                       ppe, s1, (long long)c->B);
    if (c->x_dev[0] || c->attr_dev[0])
        return cx_fail(CATTR_ERR_INTERNAL, "a model of the whole batch with inputs or results on the backend");
    cx_call *v = &f->v;
    v->n = c->n;
    v->B = 1;
    v->dt = c->dt;
    v->n_add = c->n_add;
    v->target = c->target;
    v->user = c->user;
    v->next_draw = c->next_draw;
    cattr_status st = CATTR_OK;
    for (int i = 0; i < c->n && st == CATTR_OK; i++) {
        f->rows[i] = c->x[i]->shape[0];
        st = view1(c->x[i], "input", i, &v->x[i]);
        if (st == CATTR_OK) st = view1(c->base[i], "baseline", i, &v->base[i]);
    }
    for (int j = 0; j < c->n_add && st == CATTR_OK; j++) st = view1(c->add[j], "additional input", j, &v->add[j]);
    if (st != CATTR_OK) cx_pform_free(f);
    return st;
}

int cx_pform_model_input(cg_graph *g, bool whole, int v) {
    if (!whole || v < 0) return v;
    cg_attrs a = cg_attrs_default();
    a.n_ints = 1;
    a.ints[0] = 0;
    return cg_emit(g, CG_SQUEEZE, "__whole_batch", &v, 1, &a);
}

cattr_status cx_pform_target_rows(const cx_pform *f, const cx_call *c, int64_t *tidx) {
    int64_t rows = f->ond ? f->osh[0] : 1, per = f->ond ? cx_numel(f->ond - 1, f->osh + 1) : 1;
    double *mask = malloc((size_t)(rows * per + 1) * sizeof *mask);
    if (!mask) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_status st = cx_target_mask(c->target, f->ond, f->osh, mask);
    for (int64_t r = 0; r < rows && st == CATTR_OK; r++) {
        tidx[r] = 0;
        for (int64_t k = 0; k < per; k++)
            if (mask[r * per + k] != 0) tidx[r] = k;
    }
    free(mask);
    return st;
}

cattr_status cx_pform_id_rows(const cx_pform *f, int i, const int64_t *ids, int64_t per, int64_t n_out,
                              int64_t *id_rows) {
    int64_t rows = f->rows[i];
    *id_rows = 1;
    for (int64_t b = 1; b < rows && *id_rows == 1; b++)
        if (memcmp(ids, ids + b * per, (size_t)per * sizeof *ids)) *id_rows = rows;
    if (*id_rows > 1 && *id_rows != n_out) {
        char s[128];
        return cx_fail(CATTR_ERR_SHAPE, "feature mask %d differs between the %lld examples, but the model output (shape "
                       "%s) has %lld values for the whole batch: a mask per example needs one output value per "
                       "example (Captum: different masks for each example need an output per example)", i,
                       (long long)rows, cx_shape_str(f->ond, f->osh, s, sizeof s), (long long)n_out);
    }
    return CATTR_OK;
}
