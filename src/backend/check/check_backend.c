/* check_backend.c - the "cpu-check" backend: the reference kernels of check_kernels.c behind memory that only the
 * backend's own functions can touch.
 *
 * Every buffer is a private mapping of its own, kept PROT_NONE except while one of this table's functions runs (the
 * buffers a call touches are opened on entry and closed again on exit, under one lock). Code outside the backend that reads or
 * writes backend memory directly (a method looping over a result, an executor using a constant in place) therefore
 * faults at once, here on the CPU, instead of reading garbage on a GPU. Host pointers handed to copy_in / copy_out
 * and views handed to run_op are checked too: a host pointer inside backend memory, or a view outside it, is an
 * error naming the node or the copy. Slow by design (one lock, mprotect calls around every call, scalar kernels).
 */
#include "backend/check/check_backend.h"
#include "backend/check/check_kernels.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct region {
    char *base;
    size_t len; /* whole pages */
} region;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static region *g_regions;
static int g_n, g_cap;
static size_t g_cur, g_peak; /* bytes asked for (not pages) */
static size_t *g_asked;      /* per region, parallel to g_regions */

static size_t page_round(size_t b) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (b + pg - 1) / pg * pg;
}

/* Opens (PROT_READ | PROT_WRITE) the regions a call touches, under the lock; close() protects them again and
 * unlocks. Only the touched regions change protection: sweeping every buffer on every call cost more than the
 * kernels (a 39 MB embedding is 10,000 pages). */
#define MAX_OPEN (CG_MAX_IN + 1)
typedef struct open_set {
    int idx[MAX_OPEN];
    int n;
} open_set;

static void open_region(open_set *o, int r) {
    if (r < 0) return;
    for (int i = 0; i < o->n; i++)
        if (o->idx[i] == r) return;
    if (o->n == MAX_OPEN) return;
    o->idx[o->n++] = r;
    mprotect(g_regions[r].base, g_regions[r].len, PROT_READ | PROT_WRITE);
}
static void close_all(open_set *o) {
    for (int i = 0; i < o->n; i++) mprotect(g_regions[o->idx[i]].base, g_regions[o->idx[i]].len, PROT_NONE);
    o->n = 0;
    pthread_mutex_unlock(&g_lock);
}

/* index of the region holding [p, p + bytes), or -1 */
static int find(const void *p, size_t bytes) {
    const char *c = p;
    for (int i = 0; i < g_n; i++)
        if (c >= g_regions[i].base && c + bytes <= g_regions[i].base + g_regions[i].len) return i;
    return -1;
}
static bool overlaps(const void *p, size_t bytes) {
    const char *c = p;
    for (int i = 0; i < g_n; i++)
        if (c < g_regions[i].base + g_regions[i].len && c + bytes > g_regions[i].base) return true;
    return false;
}

/* Buffers of 2 MiB and more are mapped on 2 MiB boundaries in whole 2 MiB units and offered to transparent huge
 * pages: opening and closing one then changes one page-table entry per 2 MiB instead of 512 (a language model's
 * embedding opened for every gather and output head was a third of this backend's time in small pages). */
#define HUGE_UNIT ((size_t)2 << 20)

static void *map_region(size_t len) {
    if (len < HUGE_UNIT) {
        void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    char *p = mmap(NULL, len + HUGE_UNIT, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    char *a = (char *)(((uintptr_t)p + HUGE_UNIT - 1) & ~(uintptr_t)(HUGE_UNIT - 1));
    if (a > p) munmap(p, (size_t)(a - p));
    munmap(a + len, (size_t)(p + HUGE_UNIT - a));
#ifdef MADV_HUGEPAGE
    madvise(a, len, MADV_HUGEPAGE); /* a hint: without huge pages the region works the same */
#endif
    return a;
}

static void *chk_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    size_t len = page_round(bytes ? bytes : 1);
    if (len >= HUGE_UNIT) len = (len + HUGE_UNIT - 1) / HUGE_UNIT * HUGE_UNIT;
    pthread_mutex_lock(&g_lock);
    void *p = NULL;
    if (g_n == g_cap) {
        int cap = g_cap ? 2 * g_cap : 64;
        region *r = realloc(g_regions, (size_t)cap * sizeof *r);
        if (r) g_regions = r;
        size_t *a = realloc(g_asked, (size_t)cap * sizeof *a);
        if (a) g_asked = a;
        if (r && a) g_cap = cap;
    }
    if (g_n < g_cap) {
        p = map_region(len);
        if (p) {
            g_regions[g_n] = (region){p, len};
            g_asked[g_n++] = bytes;
            g_cur += bytes;
            if (g_cur > g_peak) g_peak = g_cur;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return p;
}

static void chk_free(void *ctx, void *p, size_t bytes) {
    (void)ctx, (void)bytes;
    if (!p) return;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < g_n; i++)
        if (g_regions[i].base == p) {
            munmap(p, g_regions[i].len);
            g_cur -= g_asked[i];
            g_regions[i] = g_regions[g_n - 1];
            g_asked[i] = g_asked[g_n - 1];
            g_n--;
            break;
        }
    pthread_mutex_unlock(&g_lock);
}

static cattr_status chk_copy(void *dev, const void *host, size_t bytes, bool in) {
    if (!bytes) return CATTR_OK;
    pthread_mutex_lock(&g_lock);
    open_set o = {.n = 0};
    int r = find(dev, bytes);
    open_region(&o, r);
    cattr_status st = CATTR_OK;
    if (r < 0)
        st = cx_fail(CATTR_ERR_INTERNAL, "cpu-check: copy %s of %zu bytes at %p: not backend memory", in ? "in" : "out",
                     bytes, dev);
    else if (overlaps(host, bytes))
        st = cx_fail(CATTR_ERR_INTERNAL, "cpu-check: copy %s of %zu bytes: the host side %p is backend memory",
                     in ? "in" : "out", bytes, host);
    else if (in)
        memcpy(dev, host, bytes);
    else
        memcpy((void *)host, dev, bytes);
    close_all(&o);
    return st;
}
static cattr_status chk_copy_in(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    return chk_copy(dst, src, bytes, true);
}
static cattr_status chk_copy_out(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    return chk_copy((void *)src, dst, bytes, false);
}

static cattr_status chk_copy_dev(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    if (!bytes) return CATTR_OK;
    pthread_mutex_lock(&g_lock);
    open_set o = {.n = 0};
    int rd = find(dst, bytes), rs = find(src, bytes);
    open_region(&o, rd);
    open_region(&o, rs);
    cattr_status st = CATTR_OK;
    if (rd < 0 || rs < 0)
        st = cx_fail(CATTR_ERR_INTERNAL, "cpu-check: copy of %zu bytes from %p to %p: %s is not backend memory", bytes,
                     src, dst, rs < 0 ? "the source" : "the destination");
    else
        memmove(dst, src, bytes);
    close_all(&o);
    return st;
}

static cattr_status chk_zero(void *ctx, void *dst, size_t bytes) {
    (void)ctx;
    if (!bytes) return CATTR_OK;
    pthread_mutex_lock(&g_lock);
    open_set o = {.n = 0};
    int r = find(dst, bytes);
    open_region(&o, r);
    cattr_status st = CATTR_OK;
    if (r < 0)
        st = cx_fail(CATTR_ERR_INTERNAL, "cpu-check: zeroing %zu bytes at %p: not backend memory", bytes, dst);
    else
        memset(dst, 0, bytes);
    close_all(&o);
    return st;
}

static cattr_status check_view(open_set *o, const cg_node *n, const cx_view *v, const char *what, int k) {
    size_t bytes = (size_t)cx_view_numel(v) * cattr_dtype_size(v->dtype);
    if (!v->data || !bytes) return CATTR_OK;
    int r = find(v->data, bytes);
    if (r >= 0) {
        open_region(o, r);
        return CATTR_OK;
    }
    return cx_fail(CATTR_ERR_INTERNAL, "cpu-check: node '%s' (op %s): %s %d (%zu bytes at %p) is not backend memory",
                   n->name, cg_op_names[n->op], what, k, bytes, v->data);
}

/* HostCall: the host function gets host copies of its inputs (this memory stays closed to code outside the backend)
 * and runs outside the lock (it may take long, and may call the library itself); its output is copied in. */
static cattr_status chk_host_call(const cg_node *n, const cx_view *in, cx_view *out) {
    cx_view hin[CG_MAX_IN], hout = *out;
    void *bufs[CG_MAX_IN + 1] = {0};
    cattr_status st = CATTR_OK;
    for (int i = 0; i < n->n_in && st == CATTR_OK; i++) {
        size_t b = (size_t)cx_view_numel(&in[i]) * cattr_dtype_size(in[i].dtype);
        hin[i] = in[i];
        if (!(bufs[i] = malloc(b ? b : 1))) st = cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': out of memory", n->name);
        else st = chk_copy(in[i].data, bufs[i], b, false);
        hin[i].data = bufs[i];
    }
    size_t ob = (size_t)cx_view_numel(out) * cattr_dtype_size(out->dtype);
    if (st == CATTR_OK && !(bufs[CG_MAX_IN] = calloc(1, ob ? ob : 1)))
        st = cx_fail(CATTR_ERR_NO_MEMORY, "node '%s': out of memory", n->name);
    hout.data = bufs[CG_MAX_IN];
    if (st == CATTR_OK) st = cx_check_run_op(n, hin, &hout);
    if (st == CATTR_OK) st = chk_copy(out->data, hout.data, ob, true);
    for (int i = 0; i <= CG_MAX_IN; i++) free(bufs[i]);
    return st;
}

static cattr_status chk_run_op(void *ctx, const cg_node *n, const cx_view *in, cx_view *out) {
    (void)ctx;
    if (n->op == CG_HOST_CALL) return chk_host_call(n, in, out);
    pthread_mutex_lock(&g_lock);
    open_set o = {.n = 0};
    cattr_status st = CATTR_OK;
    for (int i = 0; i < n->n_in && st == CATTR_OK; i++) st = check_view(&o, n, &in[i], "input", i);
    if (st == CATTR_OK) st = check_view(&o, n, out, "output", 0);
    if (st == CATTR_OK) st = cx_check_run_op(n, in, out);
    close_all(&o);
    return st;
}

static cattr_status chk_sync(void *ctx) {
    (void)ctx;
    return CATTR_OK;
}
static size_t chk_peak(void *ctx) {
    (void)ctx;
    pthread_mutex_lock(&g_lock);
    size_t p = g_peak;
    pthread_mutex_unlock(&g_lock);
    return p;
}
static void chk_reset_peak(void *ctx) {
    (void)ctx;
    pthread_mutex_lock(&g_lock);
    g_peak = g_cur;
    pthread_mutex_unlock(&g_lock);
}
static bool chk_supports(void *ctx, cg_op op, cattr_dtype dtype) {
    (void)ctx, (void)dtype;
    return op < CG_OP_COUNT && !cx_op_run_by_executor(op);
}
/* full precision only; a checkpoint's 16-bit matrices read as stored (the reference kernels widen them exactly) */
static bool chk_has_cap(void *ctx, cx_cap cap) {
    (void)ctx;
    return cap == CX_CAP_STORED_WEIGHTS;
}

static cx_backend g_check = {
    .version = CX_BACKEND_VERSION,
    .name = "cpu-check",
    .ctx = NULL,
    .alloc = chk_alloc,
    .free = chk_free,
    .copy_in = chk_copy_in,
    .copy_out = chk_copy_out,
    .memset_zero = chk_zero,
    .copy_dev = chk_copy_dev,
    .run_op = chk_run_op,
    .synchronize = chk_sync,
    .peak_memory = chk_peak,
    .reset_peak = chk_reset_peak,
    .supports_op = chk_supports,
    .host_memory = false,
    .has_cap = chk_has_cap,
    .forget_host = NULL,
};

cx_backend *cx_backend_check_get(void) { return &g_check; }
