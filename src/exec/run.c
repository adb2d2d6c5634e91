/* run.c - the graph runner (run.h): the plans it keeps, backend buffers that outlive a run, and cx_run. */
#include "exec/run.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define RUN_MAX_IN CX_RUN_MAX_IN

/* Plans of one graph by input shapes, dtypes and outputs; the least recently used is evicted. */
typedef struct cx_plan_cache {
    struct {
        cx_plan *p;
        int *outs; /* the planned outputs (owned) */
        int n_outs;
        uint64_t used;
    } e[CX_PLAN_CACHE_MAX];
    int cap;        /* plans kept (0: CX_PLAN_CACHE_DEFAULT; at most CX_PLAN_CACHE_MAX) */
    uint64_t clock;
    cx_backend *arena_be; /* non-NULL: the plans never run at once and share one arena of this backend, the size of
                           * the largest */
    void *arena;
    size_t arena_bytes;
} cx_plan_cache;

/* Lends plan p the shared arena, grown to its size first (no plan may keep the old block). */
static cattr_status lend_arena(cx_plan_cache *pc, cx_plan *p) {
    size_t b = cx_plan_bytes(p);
    if (b > pc->arena_bytes) {
        for (int i = 0; i < CX_PLAN_CACHE_MAX; i++)
            if (pc->e[i].p) cx_plan_use_arena(pc->e[i].p, NULL);
        if (pc->arena) pc->arena_be->free(pc->arena_be->ctx, pc->arena, pc->arena_bytes);
        pc->arena = pc->arena_be->alloc(pc->arena_be->ctx, b);
        pc->arena_bytes = pc->arena ? b : 0;
        if (!pc->arena) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot allocate a %zu-byte activation arena", b);
    }
    cx_plan_use_arena(p, pc->arena);
    return CATTR_OK;
}

static cattr_status cx_plan_cache_get(cx_plan_cache *pc, const cg_graph *g, cx_consts *consts, bool eager, const int *nd,
                               const int64_t (*sh)[CATTR_MAX_DIMS], const cattr_dtype *dt, const int *outs, int n_outs,
                               cx_plan **out) {
    int cap = pc->cap > 0 ? (pc->cap < CX_PLAN_CACHE_MAX ? pc->cap : CX_PLAN_CACHE_MAX) : CX_PLAN_CACHE_DEFAULT;
    int lru = 0;
    for (int i = 0; i < cap; i++) {
        if (pc->e[i].p && pc->e[i].n_outs == n_outs && !memcmp(pc->e[i].outs, outs, (size_t)n_outs * sizeof *outs) &&
            cx_plan_matches(pc->e[i].p, nd, sh, dt)) {
            pc->e[i].used = ++pc->clock;
            *out = pc->e[i].p;
            return pc->arena_be && !eager ? lend_arena(pc, *out) : CATTR_OK;
        }
        if (!pc->e[i].p || (pc->e[lru].p && pc->e[i].used < pc->e[lru].used)) lru = i;
    }
    int *o = malloc((size_t)(n_outs > 0 ? n_outs : 1) * sizeof *o);
    if (!o) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    memcpy(o, outs, (size_t)n_outs * sizeof *o);
    cx_plan *p = NULL;
    cattr_status st = cx_plan_new(g, consts, eager, nd, sh, dt, outs, n_outs, &p);
    if (st != CATTR_OK) {
        free(o);
        return st;
    }
    cx_plan_free(pc->e[lru].p);
    free(pc->e[lru].outs);
    pc->e[lru].p = p;
    pc->e[lru].outs = o;
    pc->e[lru].n_outs = n_outs;
    pc->e[lru].used = ++pc->clock;
    *out = p;
    return pc->arena_be && !eager ? lend_arena(pc, p) : CATTR_OK;
}

static void cx_plan_cache_clear(cx_plan_cache *pc) {
    for (int i = 0; i < CX_PLAN_CACHE_MAX; i++) {
        cx_plan_free(pc->e[i].p);
        free(pc->e[i].outs);
        pc->e[i].p = NULL;
        pc->e[i].outs = NULL;
    }
    if (pc->arena) pc->arena_be->free(pc->arena_be->ctx, pc->arena, pc->arena_bytes);
    pc->arena = NULL;
    pc->arena_bytes = 0;
}

/* The plans kept: one cache per (graph, constants, slot, executor), in a list with the last used first, guarded by
 * kept_mu (a cache itself is used by one run at a time: run.h). An entry records the graph's revision, node array and node
 * count it was planned for: a change to any of them clears its plans. */
typedef struct kept {
    uint64_t uid, rev;
    const void *nodes;
    int n_nodes, slot;
    bool eager;
    const cx_consts *consts;
    cx_plan_cache pc;
    struct kept *next;
} kept;
static pthread_mutex_t kept_mu = PTHREAD_MUTEX_INITIALIZER;
static kept *kept_list;
static pthread_once_t hook_once = PTHREAD_ONCE_INIT;

/* Unlinks the entries for which drop(entry, key) holds and frees them (outside the lock). */
static void drop_where(bool (*drop)(const kept *k, const void *key), const void *key) {
    kept *gone = NULL;
    pthread_mutex_lock(&kept_mu);
    for (kept **at = &kept_list; *at;) {
        kept *k = *at;
        if (drop(k, key)) {
            *at = k->next;
            k->next = gone;
            gone = k;
        } else {
            at = &k->next;
        }
    }
    pthread_mutex_unlock(&kept_mu);
    while (gone) {
        kept *k = gone;
        gone = k->next;
        cx_plan_cache_clear(&k->pc);
        free(k);
    }
}

static bool of_graph(const kept *k, const void *g) { return k->uid == ((const cg_graph *)g)->uid; }
static bool of_consts(const kept *k, const void *c) { return k->consts == c; }
static void graph_freed(const cg_graph *g) { drop_where(of_graph, g); }
static void install_hook(void) { cg_set_free_hook(graph_freed); }

void cx_run_drop_consts(const cx_consts *c) { drop_where(of_consts, c); }

int cx_run_kept_plans(void) {
    int n = 0;
    pthread_mutex_lock(&kept_mu);
    for (const kept *k = kept_list; k; k = k->next)
        for (int i = 0; i < CX_PLAN_CACHE_MAX; i++) n += k->pc.e[i].p != NULL;
    pthread_mutex_unlock(&kept_mu);
    return n;
}

/* The plan cache of j's graph, constants and slot (made when missing; its plans cleared when the graph changed). */
static cattr_status kept_of(const cx_job *j, cx_plan_cache **out) {
    pthread_once(&hook_once, install_hook);
    const cg_graph *g = j->g;
    pthread_mutex_lock(&kept_mu);
    kept **at = &kept_list, *k = NULL;
    for (; *at; at = &(*at)->next)
        if ((*at)->uid == g->uid && (*at)->consts == j->consts && (*at)->slot == j->slot &&
            (*at)->eager == j->eager)
            break;
    if (*at) {
        k = *at;
        *at = k->next; /* moved to the front below */
    } else if ((k = calloc(1, sizeof *k))) {
        k->uid = g->uid;
        k->rev = g->rev;
        k->nodes = g->nodes;
        k->n_nodes = g->n_nodes;
        k->consts = j->consts;
        k->slot = j->slot;
        k->eager = j->eager;
        if (j->share_arena) k->pc.arena_be = cx_consts_backend(j->consts);
    }
    if (k) {
        k->next = kept_list;
        kept_list = k;
        if (j->plans > k->pc.cap) k->pc.cap = j->plans;
    }
    bool stale = k && (k->rev != g->rev || k->nodes != (const void *)g->nodes || k->n_nodes != g->n_nodes);
    if (stale) { /* plans of the graph as it was: they may read its moved node array */
        k->rev = g->rev;
        k->nodes = g->nodes;
        k->n_nodes = g->n_nodes;
    }
    pthread_mutex_unlock(&kept_mu);
    if (!k) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (stale) cx_plan_cache_clear(&k->pc);
    *out = &k->pc;
    return CATTR_OK;
}

cattr_status cx_buf_alloc(cx_backend *be, size_t bytes, bool zero, cx_buf *out) {
    out->be = be;
    out->bytes = bytes ? bytes : 1;
    out->p = be->alloc(be->ctx, out->bytes);
    if (!out->p) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot allocate %zu bytes on device '%s'", bytes, be->name);
    if (zero) {
        cattr_status st = cx_zero(be, out->p, out->bytes);
        if (st != CATTR_OK) {
            cx_buf_free(out);
            return st;
        }
    }
    return CATTR_OK;
}

cattr_status cx_buf_upload_raw(cx_backend *be, const void *host, size_t bytes, cx_buf *out) {
    CX_CHECK(cx_buf_alloc(be, bytes, false, out));
    cattr_status st = bytes ? cx_copy_in(be, out->p, host, bytes) : CATTR_OK;
    if (st != CATTR_OK) cx_buf_free(out);
    return st;
}

cattr_status cx_buf_upload(cx_backend *be, const cattr_tensor *t, cx_buf *out) {
    return cx_buf_upload_raw(be, t->data, (size_t)t->numel * cattr_dtype_size(t->dtype), out);
}

void cx_buf_free(cx_buf *b) {
    if (b->p) b->be->free(b->be->ctx, b->p, b->bytes);
    b->p = NULL;
    b->bytes = 0;
}

cattr_status cx_buf_fit(cx_backend *be, cx_buf *b, size_t bytes, const void *host, bool zero) {
    if (b->p && b->bytes < bytes) cx_buf_free(b);
    if (!b->p) CX_CHECK(cx_buf_alloc(be, bytes, false, b));
    if (host && bytes) return cx_copy_in(be, b->p, host, bytes);
    if (zero) return cx_zero(be, b->p, bytes);
    return CATTR_OK;
}

cattr_status cx_buf_put(cx_buf *b, size_t off, const void *host, const void *dev, size_t bytes) {
    if (!bytes) return CATTR_OK;
    if (off > b->bytes || bytes > b->bytes - off)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "a copy of %zu bytes at %zu past a %zu-byte buffer", bytes, off,
                       b->bytes);
    char *at = (char *)b->p + off;
    return dev ? cx_copy_dev(b->be, at, dev, bytes) : cx_copy_in(b->be, at, host, bytes);
}

cattr_status cx_buf_get(const cx_buf *b, size_t off, void *host, void *dev, size_t bytes) {
    if (!bytes) return CATTR_OK;
    if (off > b->bytes || bytes > b->bytes - off)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "a copy of %zu bytes at %zu past a %zu-byte buffer", bytes, off,
                       b->bytes);
    const char *at = (const char *)b->p + off;
    return dev ? cx_copy_dev(b->be, dev, at, bytes) : cx_copy_out(b->be, host, at, bytes);
}

cx_arg cx_arg_of(const cattr_tensor *t) {
    cx_arg a = {.nd = t->ndim, .dt = t->dtype, .host = t->data};
    memcpy(a.sh, t->shape, sizeof a.sh);
    return a;
}

cx_arg cx_arg_dev(const cattr_tensor *like, const void *dev) {
    cx_arg a = {.nd = like->ndim, .dt = like->dtype, .dev = dev};
    memcpy(a.sh, like->shape, sizeof a.sh);
    return a;
}

/* The shapes and dtypes of j's inputs, as cx_plan_new takes them. */
typedef struct job_shapes {
    int nd[RUN_MAX_IN];
    int64_t sh[RUN_MAX_IN][CATTR_MAX_DIMS];
    cattr_dtype dt[RUN_MAX_IN];
} job_shapes;

static cattr_status shapes_of(const cx_job *j, job_shapes *s) {
    if (j->n_in > RUN_MAX_IN)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "a run takes at most %d graph inputs, not %d", RUN_MAX_IN, j->n_in);
    for (int k = 0; k < j->n_in; k++) {
        s->nd[k] = j->in[k].nd;
        memcpy(s->sh[k], j->in[k].sh, sizeof s->sh[k]);
        s->dt[k] = j->in[k].dt;
    }
    return CATTR_OK;
}

/* The cached plan of j when there is one (its inputs compared in place: no copy of the shapes on a hit), else NULL. */
static cx_plan *cache_hit(const cx_job *j, cx_plan_cache *pc) {
    int cap = pc->cap > 0 ? (pc->cap < CX_PLAN_CACHE_MAX ? pc->cap : CX_PLAN_CACHE_MAX) : CX_PLAN_CACHE_DEFAULT;
    for (int i = 0; i < cap; i++) {
        cx_plan *p = pc->e[i].p;
        if (!p || pc->e[i].n_outs != j->n_out || memcmp(pc->e[i].outs, j->outs, (size_t)j->n_out * sizeof *j->outs) ||
            cx_plan_n_inputs(p) > j->n_in)
            continue;
        bool same = true;
        for (int k = 0; k < cx_plan_n_inputs(p) && same; k++)
            same = cx_plan_input_is(p, k, j->in[k].nd, j->in[k].sh, j->in[k].dt);
        if (!same) continue;
        pc->e[i].used = ++pc->clock;
        return p;
    }
    return NULL;
}

static cattr_status job_plan(const cx_job *j, cx_plan **plan) {
    cx_plan_cache *pc = NULL;
    CX_CHECK(kept_of(j, &pc));
    cx_plan *hit = cache_hit(j, pc);
    if (hit) {
        if (pc->arena_be && !j->eager) CX_CHECK(lend_arena(pc, hit));
        if (j->peak && cx_plan_bytes(hit) > *j->peak) *j->peak = cx_plan_bytes(hit);
        if (j->plan) *j->plan = hit;
        *plan = hit;
        return CATTR_OK;
    }
    job_shapes js;
    CX_CHECK(shapes_of(j, &js));
    int *nd = js.nd;
    int64_t (*sh)[CATTR_MAX_DIMS] = js.sh;
    cattr_dtype *dt = js.dt;
    CX_CHECK(cx_plan_cache_get(pc, j->g, j->consts, j->eager, nd, (const int64_t(*)[CATTR_MAX_DIMS])sh, dt,
                               j->outs, j->n_out, plan));
    if (j->peak && cx_plan_bytes(*plan) > *j->peak) *j->peak = cx_plan_bytes(*plan);
    if (j->plan) *j->plan = *plan;
    return CATTR_OK;
}

cattr_status cx_run_view(const cx_job *j, int v, cx_view *out) {
    cx_plan *p = NULL;
    CX_CHECK(job_plan(j, &p));
    *out = *cx_plan_view(p, v);
    out->data = NULL;
    return CATTR_OK;
}

cattr_status cx_run(const cx_job *j) {
    cx_plan *p = NULL;
    CX_CHECK(job_plan(j, &p));
    const void *host[RUN_MAX_IN];
    void *dev[RUN_MAX_IN];
    cx_backend *be = cx_consts_backend(j->consts);
    for (int k = 0; k < j->n_in; k++) {
        host[k] = j->in[k].host;
        dev[k] = (void *)j->in[k].dev;
        /* a backend whose memory is the host's reads host inputs in place (never written: plan.h), no copy */
        if (!dev[k] && be->host_memory) dev[k] = (void *)j->in[k].host;
    }
    if (j->n_out > RUN_MAX_IN)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "a run gives at most %d outputs, not %d", RUN_MAX_IN, j->n_out);
    void *oh[RUN_MAX_IN], *od[RUN_MAX_IN];
    bool both = false;
    for (int k = 0; k < j->n_out; k++) {
        od[k] = j->out_dev ? j->out_dev[k] : NULL;
        oh[k] = od[k] ? NULL : j->out_host ? j->out_host[k] : NULL;
        both |= od[k] && j->out_host && j->out_host[k];
    }
    cx_plan_set_check_finite(p, j->check_finite);
    CX_CHECK(cx_plan_run_watched(p, host, dev, oh, od, &j->watch));
    for (int k = 0; both && k < j->n_out; k++) /* kept on the backend and brought down */
        if (od[k] && j->out_host[k]) {
            const cx_view *v = cx_plan_view(p, j->outs[k]);
            CX_CHECK(cx_copy_out(be, j->out_host[k], od[k], (size_t)cx_view_numel(v) * cattr_dtype_size(v->dtype)));
        }
    return CATTR_OK;
}

cattr_status cx_run_bytes(const cx_job *j, bool cached, size_t *bytes) {
    cx_plan *p = NULL;
    if (cached) {
        CX_CHECK(job_plan(j, &p));
        *bytes = cx_plan_bytes(p);
        return CATTR_OK;
    }
    job_shapes js;
    CX_CHECK(shapes_of(j, &js));
    CX_CHECK(cx_plan_new(j->g, j->consts, j->eager, js.nd, (const int64_t(*)[CATTR_MAX_DIMS])js.sh, js.dt, j->outs,
                         j->n_out, &p));
    *bytes = cx_plan_bytes(p);
    cx_plan_free(p);
    return CATTR_OK;
}
