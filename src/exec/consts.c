/* consts.c - a graph's constants on a backend (cx_consts): uploaded once per (backend, host tensor, dtype) for the
 * whole process and shared by reference counts. */
#include "exec/plan_internal.h"
#include "exec/run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- constants -------------------------------------------------------------------------------------------- */

static pthread_mutex_t g_dc_mu = PTHREAD_MUTEX_INITIALIZER;
static dev_const *g_dc;
static int g_dc_n, g_dc_cap;

/* A reference to t on be in dtype dt (uploaded on first use). Errors: CATTR_ERR_NO_MEMORY, the backend's. */
static cattr_status dc_acquire(cx_backend *be, const cattr_tensor *t, cattr_dtype dt, const char *name, void **res,
                               size_t *bytes) {
    cattr_status st = CATTR_ERR_NO_MEMORY;
    *res = NULL;
    pthread_mutex_lock(&g_dc_mu);
    for (int i = 0; i < g_dc_n; i++) {
        dev_const *d = &g_dc[i];
        if (d->be == be && d->t == t && d->host == t->data && d->numel == t->numel && d->dtype == dt) {
            d->refs++;
            *bytes = d->bytes;
            *res = d->p;
            st = CATTR_OK;
            goto out;
        }
    }
    if (g_dc_n == g_dc_cap) {
        int cap = g_dc_cap ? 2 * g_dc_cap : 64;
        dev_const *n = realloc(g_dc, (size_t)cap * sizeof *n);
        if (!n) {
            st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            goto out;
        }
        g_dc = n;
        g_dc_cap = cap;
    }
    cattr_tensor *conv = NULL;
    const cattr_tensor *use = t;
    if (dt != t->dtype) {
        if ((st = cattr_tensor_convert(t, dt, &conv)) != CATTR_OK) goto out;
        use = conv;
    }
    size_t nb = (size_t)use->numel * cattr_dtype_size(dt);
    void *p = be->alloc(be->ctx, nb);
    if (!p) {
        st = cx_fail(CATTR_ERR_NO_MEMORY, "cannot allocate constant '%s' (%zu bytes) on device '%s'", name, nb,
                     be->name);
    } else if ((st = cx_pl_be_copy(be, cx_prof_on(), BE_COPY_IN, p, use->data, nb)) != CATTR_OK) {
        be->free(be->ctx, p, nb);
    } else {
        g_dc[g_dc_n++] = (dev_const){be, t, t->data, t->numel, dt, p, nb, 1};
        *bytes = nb;
        *res = p;
    }
    cattr_tensor_free(conv);
out:
    pthread_mutex_unlock(&g_dc_mu);
    return st;
}

static void dc_release(cx_backend *be, void *p) {
    pthread_mutex_lock(&g_dc_mu);
    for (int i = 0; i < g_dc_n; i++)
        if (g_dc[i].be == be && g_dc[i].p == p) {
            if (--g_dc[i].refs == 0) {
                be->free(be->ctx, p, g_dc[i].bytes);
                g_dc[i] = g_dc[--g_dc_n];
            }
            break;
        }
    pthread_mutex_unlock(&g_dc_mu);
}


cattr_status cx_consts_new(cx_backend *be, cattr_dtype dtype, cx_consts **out) {
    cx_consts *c = calloc(1, sizeof *c);
    if (!c) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    c->be = be;
    c->dtype = dtype;
    *out = c;
    return CATTR_OK;
}

cx_backend *cx_consts_backend(const cx_consts *c) { return c->be; }

void cx_consts_free(cx_consts *c) {
    if (!c) return;
    cx_run_drop_consts(c); /* the plans kept for these constants read them */
    for (int i = 0; i < c->n; i++)
        if (c->views[i].data && c->bytes[i]) dc_release(c->be, c->views[i].data);
    free(c->src);
    free(c->views);
    free(c->bytes);
    free(c);
}

cattr_status cx_pl_consts_get(cx_consts *c, const cg_graph *g, int v, bool stored, cx_view *out) {
    int slot = 2 * v + (stored ? 1 : 0); /* a value's copy in the compute dtype, and its bytes as stored */
    if (slot >= c->n) {
        int n = 2 * (g->n_vals > v + 1 ? g->n_vals : v + 1);
        const cattr_tensor **s = realloc(c->src, (size_t)n * sizeof *s);
        if (s) c->src = s;
        cx_view *vw = realloc(c->views, (size_t)n * sizeof *vw);
        if (vw) c->views = vw;
        size_t *b = realloc(c->bytes, (size_t)n * sizeof *b);
        if (b) c->bytes = b;
        if (!s || !vw || !b) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        for (int i = c->n; i < n; i++) {
            c->src[i] = NULL;
            memset(&c->views[i], 0, sizeof c->views[i]);
            c->bytes[i] = 0;
        }
        c->n = n;
    }
    const cattr_tensor *t = g->vals[v].data;
    if (c->src[slot] != t) { /* a different graph reused this id: replace */
        if (c->views[slot].data && c->bytes[slot]) dc_release(c->be, c->views[slot].data);
        c->views[slot].data = NULL;
        c->src[slot] = NULL;
    }
    if (!c->views[slot].data) {
        cattr_dtype dt = stored || t->dtype == CATTR_INT64 ? t->dtype : c->dtype;
        c->views[slot].dtype = dt;
        c->views[slot].ndim = t->ndim;
        memcpy(c->views[slot].shape, t->shape, sizeof t->shape);
        c->src[slot] = t;
        if (dt == t->dtype && c->be->host_memory) { /* used in place; bytes 0 marks it as not ours */
            c->views[slot].data = t->data;
            c->bytes[slot] = 0;
        } else {
            size_t bytes = 0;
            void *p = NULL;
            cattr_status st = dc_acquire(c->be, t, dt, g->vals[v].name, &p, &bytes);
            if (st != CATTR_OK) {
                c->src[slot] = NULL;
                return st;
            }
            c->views[slot].data = p;
            c->bytes[slot] = bytes;
        }
    }
    *out = c->views[slot];
    return CATTR_OK;
}
