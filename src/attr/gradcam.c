/* gradcam.c - GuidedGradCam: guided backprop attributions multiplied by the layer's Grad-CAM map, upsampled to the
 * input by nearest neighbour and broadcast over channels (Captum's GuidedGradCam, relu_attributions=True). An input
 * without spatial dims cannot take the map: its attribution is an empty tensor, as in Captum. */
#include "attr/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int layer;
    cattr_explainer *gb; /* the guided-backprop explainer over the same model */
} ggc_state;

static void ggc_release(cattr_explainer *e) {
    ggc_state *s = e->method_state;
    if (!s) return;
    cattr_explainer_free(s->gb);
    free(s);
    e->method_state = NULL;
}

static cattr_status ggc_init(cattr_explainer *e) {
    ggc_state *s = calloc(1, sizeof *s);
    if (!s) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    e->method_state = s;
    CX_CHECK(cx_resolve_layer(e, e->p.layer, e->p.attribute_to_layer_input != 0, &s->layer));
    cattr_attr_params p = e->p;
    p.method = CATTR_METHOD_GUIDED_BACKPROP;
    p.nt_type = CATTR_NT_NONE;
    p.device = e->be->name;
    return cattr_explainer_new(e->m, &p, &s->gb);
}

/* Grad-CAM map [B, 1, spatial...]: relu(sum over channels of mean_spatial(grad) * act), in torch's order. */
static cattr_status cam_map(cattr_dtype dt, const cattr_tensor *act, const cattr_tensor *grad, cattr_tensor **out) {
    int nd = act->ndim;
    int64_t B = act->shape[0], C = nd > 1 ? act->shape[1] : 1, sp = cx_numel(nd - 2 > 0 ? nd - 2 : 0, act->shape + 2);
    int64_t sh[CATTR_MAX_DIMS];
    memcpy(sh, act->shape, sizeof sh);
    if (nd > 1) sh[1] = 1;
    cattr_tensor *m = cx_tensor_alloc(dt, nd, sh);
    double *buf = malloc((size_t)((sp > C ? sp : C) + 1) * sizeof *buf), *wt = malloc((size_t)(C + 1) * sizeof *wt);
    double *prod = malloc((size_t)(C * sp + 1) * sizeof *prod);
    if (!m || !buf || !wt || !prod) {
        cattr_tensor_free(m);
        free(buf);
        free(wt);
        free(prod);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    for (int64_t b = 0; b < B; b++) {
        for (int64_t ch = 0; ch < C; ch++) { /* weights: the mean of the gradient over the spatial dims */
            const int64_t at = (b * C + ch) * sp;
            if (nd <= 2) {
                wt[ch] = cx_tensor_get(grad, at);
                continue;
            }
            for (int64_t k = 0; k < sp; k++) buf[k] = cx_tensor_get(grad, at + k);
            wt[ch] = cx_rnd(dt, cx_torch_sum(dt, buf, sp, 0, 1) / (double)sp);
        }
        for (int64_t ch = 0; ch < C; ch++)
            for (int64_t k = 0; k < sp; k++)
                prod[ch * sp + k] = cx_rnd(dt, wt[ch] * cx_tensor_get(act, (b * C + ch) * sp + k));
        for (int64_t k = 0; k < sp; k++) {
            for (int64_t ch = 0; ch < C; ch++) buf[ch] = prod[ch * sp + k];
            double v = cx_torch_sum(dt, buf, C, k, sp);
            cx_tensor_set(m, b * sp + k, v > 0 ? v : 0);
        }
    }
    free(buf);
    free(wt);
    free(prod);
    *out = m;
    return CATTR_OK;
}

/* gb * nearest-upsampled map, broadcast over the input's channels; an empty tensor when x has no spatial dims or the
 * map's rank differs. */
static cattr_status combine(cattr_dtype dt, const cattr_tensor *gb, const cattr_tensor *map, cattr_tensor **out) {
    int nd = gb->ndim, mnd = map->ndim;
    if (nd < 3 || mnd != nd) {
        int64_t zero = 0;
        *out = cx_tensor_alloc(dt, 1, &zero);
        if (!*out) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        cx_log(CATTR_LOG_WARN, "GuidedGradCam: the layer's map cannot be upsampled to an input of rank %d; its "
                               "attribution is empty (as in Captum)", nd);
        return CATTR_OK;
    }
    cattr_tensor *o = cx_tensor_alloc(dt, nd, gb->shape);
    if (!o) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    int ns = nd - 2;
    int64_t B = gb->shape[0], C = gb->shape[1], sp = cx_numel(ns, gb->shape + 2), msp = cx_numel(ns, map->shape + 2);
    for (int64_t k = 0; k < sp; k++) {
        /* nearest: dst index j -> src floor(j * in / out), per spatial dim (torch computes the scale in float) */
        int64_t rem = k, src = 0, mstride = 1;
        int64_t idx[CATTR_MAX_DIMS];
        for (int d = ns - 1; d >= 0; d--) {
            idx[d] = rem % gb->shape[2 + d];
            rem /= gb->shape[2 + d];
        }
        for (int d = ns - 1; d >= 0; d--) {
            int64_t in = map->shape[2 + d], outn = gb->shape[2 + d];
            float scale = (float)in / (float)outn;
            int64_t s = (int64_t)floorf((float)idx[d] * scale);
            if (s > in - 1) s = in - 1;
            src += s * mstride;
            mstride *= in;
        }
        for (int64_t b = 0; b < B; b++) {
            double mv = cx_tensor_get(map, b * msp + src);
            for (int64_t ch = 0; ch < C; ch++) {
                int64_t at = (b * C + ch) * sp + k;
                cx_tensor_set(o, at, cx_rnd(dt, cx_tensor_get(gb, at) * mv));
            }
        }
    }
    *out = o;
    return CATTR_OK;
}

static cattr_status guided_gradcam(cattr_explainer *e, cx_call *c, cattr_tensor **attr, cattr_tensor **delta) {
    (void)delta;
    ggc_state *s = e->method_state;
    cattr_tensor *gb[CX_MAX_IN] = {0}, *act = NULL, *grad = NULL, *map = NULL;
    cattr_call call = *c->user;
    call.n_draws = 0;
    cattr_status st = cattr_explainer_run(s->gb, &call, gb, NULL);
    if (st == CATTR_OK) st = cx_layer_pass(e, c, c->x, 1, CX_TILE, s->layer, true, &act, &grad);
    if (st == CATTR_OK) st = cam_map(c->dt, act, grad, &map);
    for (int i = 0; i < c->n && st == CATTR_OK; i++) st = combine(c->dt, gb[i], map, &attr[i]);
    for (int i = 0; i < CX_MAX_IN; i++) cattr_tensor_free(gb[i]);
    cattr_tensor_free(act);
    cattr_tensor_free(grad);
    cattr_tensor_free(map);
    return st;
}

const cx_method cx_method_guided_gradcam = {CATTR_METHOD_GUIDED_GRADCAM, "guided-gradcam", "GuidedGradCam", false,
                                            ggc_init, guided_gradcam, ggc_release};
