/* profile.c - the process-wide profiler (see profile.h): events in memory under one mutex, strings interned, sums per
 * kind kept as events arrive (so the summary counts every event, also those past the cap), and the Chrome trace
 * writer. cattr_profile_end, which writes the file, is in io/profile_write.c (core does not include io). */
#define _POSIX_C_SOURCE 200809L
#include "core/profile.h"

#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

atomic_bool cx_prof_enabled_;

/* events kept per session (48 bytes each); later ones are still counted in the sums */
#define PROF_MAX_EVENTS ((size_t)1 << 21)
/* distinct (kind, name) sums */
#define PROF_MAX_SUMS 256

enum { EV_OP = 0, EV_COPY = 1, EV_SPAN = 2, EV_PEAK = 3 };

/* One event. Strings are ids of interned strings: op (backend, op, node, shapes), copy (backend, direction), span
 * (cat, name), peak (backend). */
typedef struct {
    uint64_t t0, t1, bytes;
    uint32_t s[4];
    int32_t kind, tid;
} prof_ev;

/* The sum of the events of one kind and key: op (a = op), copy (a = direction), span (a = cat, b = name), peak. */
typedef struct {
    int kind;
    uint32_t a, b;
    uint64_t count, ns, bytes;
    char cat[24]; /* the category, for cattr_profile_count after the strings went with the data */
} prof_sum;

struct cx_prof_data {
    prof_ev *ev;
    size_t n_ev, cap_ev;
    char *pool; /* interned strings, NUL-terminated, at str_off[id] */
    size_t pool_len, pool_cap;
    size_t *str_off;
    uint32_t n_str, cap_str;
    uint32_t *slots; /* open-addressing hash of the strings: id + 1, 0 empty */
    uint32_t n_slots;
    prof_sum sums[PROF_MAX_SUMS];
    int n_sums;
    uint64_t dropped; /* events not kept (cap, or out of memory) */
    uint64_t t_begin, t_end;
    uint64_t peak;
    uint32_t peak_backend;
    bool has_peak;
    long pid;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static cx_prof_data g_d;     /* the session being collected, or the last one's sums after it ended */
static bool g_started;       /* under g_mu: between begin and end */
static atomic_int g_next_tid = 1;
static _Thread_local int t_tid;

uint64_t cx_prof_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int my_tid(void) {
    if (!t_tid) t_tid = atomic_fetch_add_explicit(&g_next_tid, 1, memory_order_relaxed);
    return t_tid;
}

static void data_release(cx_prof_data *d) {
    free(d->ev);
    free(d->pool);
    free(d->str_off);
    free(d->slots);
    memset(d, 0, sizeof *d);
}

/* ---- interning ---------------------------------------------------------------------------------------------- */

static uint32_t hash_str(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static bool rehash(cx_prof_data *d, uint32_t n_slots) {
    uint32_t *sl = calloc(n_slots, sizeof *sl);
    if (!sl) return false;
    for (uint32_t id = 0; id < d->n_str; id++) {
        uint32_t i = hash_str(d->pool + d->str_off[id]) & (n_slots - 1);
        while (sl[i]) i = (i + 1) & (n_slots - 1);
        sl[i] = id + 1;
    }
    free(d->slots);
    d->slots = sl;
    d->n_slots = n_slots;
    return true;
}

/* The id of s (NULL: ""), adding it; UINT32_MAX when out of memory. */
static uint32_t intern(cx_prof_data *d, const char *s) {
    if (!s) s = "";
    if ((uint64_t)(d->n_str + 1) * 2 > d->n_slots && !rehash(d, d->n_slots ? d->n_slots * 2 : 64)) return UINT32_MAX;
    uint32_t i = hash_str(s) & (d->n_slots - 1);
    for (; d->slots[i]; i = (i + 1) & (d->n_slots - 1))
        if (!strcmp(d->pool + d->str_off[d->slots[i] - 1], s)) return d->slots[i] - 1;
    size_t len = strlen(s) + 1;
    if (d->pool_len + len > d->pool_cap) {
        size_t cap = d->pool_cap ? d->pool_cap : 4096;
        while (cap < d->pool_len + len) cap *= 2;
        char *p = realloc(d->pool, cap);
        if (!p) return UINT32_MAX;
        d->pool = p;
        d->pool_cap = cap;
    }
    if (d->n_str == d->cap_str) {
        uint32_t cap = d->cap_str ? d->cap_str * 2 : 64;
        size_t *o = realloc(d->str_off, (size_t)cap * sizeof *o);
        if (!o) return UINT32_MAX;
        d->str_off = o;
        d->cap_str = cap;
    }
    memcpy(d->pool + d->pool_len, s, len);
    d->str_off[d->n_str] = d->pool_len;
    d->pool_len += len;
    d->slots[i] = d->n_str + 1;
    return d->n_str++;
}

static const char *str_of(const cx_prof_data *d, uint32_t id) { return d->pool + d->str_off[id]; }

/* ---- recording ---------------------------------------------------------------------------------------------- */

static const char *const kind_cats[] = {"op", "copy", NULL, "memory"};

static void add_sum(cx_prof_data *d, int kind, uint32_t a, uint32_t b, uint64_t ns, uint64_t bytes) {
    for (int i = 0; i < d->n_sums; i++) {
        prof_sum *s = &d->sums[i];
        if (s->kind == kind && s->a == a && s->b == b) {
            s->count++;
            s->ns += ns;
            s->bytes += bytes;
            return;
        }
    }
    if (d->n_sums == PROF_MAX_SUMS) return;
    prof_sum *s = &d->sums[d->n_sums++];
    *s = (prof_sum){kind, a, b, 1, ns, bytes, ""};
    const char *cat = kind == EV_SPAN ? str_of(d, a) : kind_cats[kind];
    snprintf(s->cat, sizeof s->cat, "%s", cat);
}

/* Records one event (the caller holds g_mu and the session is on): strings s[0..ns) interned, summed under the key
 * (s[ka], s[kb]) (-1: none). */
static void record_locked(cx_prof_data *d, int kind, const char *const *s, int ns, int ka, int kb, uint64_t t0,
                          uint64_t t1, uint64_t bytes) {
    uint32_t id[4] = {0, 0, 0, 0};
    for (int i = 0; i < ns; i++) {
        id[i] = intern(d, s[i]);
        if (id[i] == UINT32_MAX) {
            d->dropped++;
            return;
        }
    }
    add_sum(d, kind, ka >= 0 ? id[ka] : 0, kb >= 0 ? id[kb] : 0, t1 > t0 ? t1 - t0 : 0, bytes);
    if (d->n_ev == d->cap_ev && d->cap_ev < PROF_MAX_EVENTS) {
        size_t cap = d->cap_ev ? d->cap_ev * 2 : 1024;
        prof_ev *e = realloc(d->ev, cap * sizeof *e);
        if (e) {
            d->ev = e;
            d->cap_ev = cap;
        }
    }
    if (d->n_ev < d->cap_ev) d->ev[d->n_ev++] = (prof_ev){t0, t1, bytes, {id[0], id[1], id[2], id[3]}, kind, my_tid()};
    else d->dropped++;
}

static void record(int kind, const char *const *s, int ns, int ka, int kb, uint64_t t0, uint64_t t1, uint64_t bytes) {
    pthread_mutex_lock(&g_mu);
    if (g_started && t0 >= g_d.t_begin) /* not stopped, and not begun before this session */
        record_locked(&g_d, kind, s, ns, ka, kb, t0, t1, bytes);
    pthread_mutex_unlock(&g_mu);
}

void cx_prof_op(const char *backend, const char *op, const char *node, const char *shape_text, uint64_t t0,
                uint64_t t1) {
    const char *s[4] = {backend, op, node, shape_text};
    record(EV_OP, s, 4, 1, -1, t0, t1, 0);
}

void cx_prof_copy(const char *backend, const char *direction, size_t bytes, uint64_t t0, uint64_t t1) {
    const char *s[2] = {backend, direction};
    record(EV_COPY, s, 2, 1, -1, t0, t1, bytes);
}

void cx_prof_span(const char *cat, const char *name, uint64_t t0, uint64_t t1) {
    const char *s[2] = {cat, name};
    record(EV_SPAN, s, 2, 0, 1, t0, t1, 0);
}

void cx_prof_peak(const char *backend, size_t bytes) {
    if (!cx_prof_on()) return;
    uint64_t t = cx_prof_now();
    pthread_mutex_lock(&g_mu);
    if (g_started && (!g_d.has_peak || bytes > g_d.peak)) { /* a counter event only when the peak rises */
        uint32_t id = intern(&g_d, backend);
        if (id == UINT32_MAX) g_d.dropped++;
        else {
            const char *s[1] = {backend};
            record_locked(&g_d, EV_PEAK, s, 1, -1, -1, t, t, bytes);
            g_d.peak = bytes;
            g_d.peak_backend = id;
            g_d.has_peak = true;
        }
    }
    pthread_mutex_unlock(&g_mu);
}

/* ---- sessions ----------------------------------------------------------------------------------------------- */

cattr_status cattr_profile_begin(void) {
    pthread_mutex_lock(&g_mu);
    data_release(&g_d);
    g_d.t_begin = cx_prof_now();
    g_d.pid = (long)getpid();
    g_started = true;
    atomic_store_explicit(&cx_prof_enabled_, true, memory_order_release);
    pthread_mutex_unlock(&g_mu);
    return CATTR_OK;
}

cattr_status cx_prof_stop(cx_prof_data **out) {
    *out = NULL;
    cx_prof_data *d = malloc(sizeof *d);
    pthread_mutex_lock(&g_mu);
    if (!g_started) {
        pthread_mutex_unlock(&g_mu);
        free(d);
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "the profiler was not started (cattr_profile_begin)");
    }
    atomic_store_explicit(&cx_prof_enabled_, false, memory_order_release);
    g_started = false;
    g_d.t_end = cx_prof_now();
    if (!d) { /* stopped all the same; the sums stay for cattr_profile_count */
        pthread_mutex_unlock(&g_mu);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory ending the profile");
    }
    *d = g_d; /* the events and strings go to the caller; the sums stay for cattr_profile_count */
    g_d.ev = NULL;
    g_d.pool = NULL;
    g_d.str_off = NULL;
    g_d.slots = NULL;
    g_d.n_ev = g_d.cap_ev = g_d.pool_len = g_d.pool_cap = 0;
    g_d.n_str = g_d.cap_str = g_d.n_slots = 0;
    /* the sums' keys are string ids: keep the categories ("op", "copy", span categories) countable by name */
    pthread_mutex_unlock(&g_mu);
    *out = d;
    return CATTR_OK;
}

void cx_prof_data_free(cx_prof_data *d) {
    if (!d) return;
    data_release(d);
    free(d);
}

int cattr_profile_count(const char *category) {
    uint64_t n = 0;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_d.n_sums; i++)
        if (!category || !strcmp(g_d.sums[i].cat, category)) n += g_d.sums[i].count;
    pthread_mutex_unlock(&g_mu);
    return n > INT_MAX ? INT_MAX : (int)n;
}

/* ---- the trace ---------------------------------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (no overlongs, surrogates or code points above U+10FFFF), 0 if none. */
static size_t utf8_len(const unsigned char *s) {
    unsigned c = s[0], min, cp;
    size_t len;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, min = 0x10000;
    else return 0;
    cp = c & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0; /* also stops at the NUL */
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

/* A JSON string: quotes and backslashes escaped, control bytes and DEL as \u00XX, valid UTF-8 as is, and every
 * byte that is not part of valid UTF-8 as \u00XX (its Latin-1 reading), so the file is always valid JSON. */
static void json_str(FILE *f, const char *str) {
    const unsigned char *s = (const unsigned char *)str;
    fputc('"', f);
    while (*s) {
        unsigned c = *s;
        size_t n = utf8_len(s);
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c < 0x20 || c == 0x7F || n == 0) fprintf(f, "\\u%04x", c);
        else {
            fwrite(s, 1, n, f);
            s += n;
            continue;
        }
        s++;
    }
    fputc('"', f);
}

/* Nanoseconds as microseconds with three decimals, without printf's locale-dependent decimal point. */
static void json_us(FILE *f, uint64_t ns) { fprintf(f, "%" PRIu64 ".%03u", ns / 1000, (unsigned)(ns % 1000)); }

cattr_status cx_prof_write_trace(FILE *f, void *ctx) {
    const cx_prof_data *d = ctx;
    int max_tid = 0;
    for (size_t i = 0; i < d->n_ev; i++)
        if (d->ev[i].tid > max_tid) max_tid = d->ev[i].tid;
    fprintf(f, "{\"traceEvents\":[\n");
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"ts\":0,\"pid\":%ld,\"tid\":0,\"args\":{\"name\":\"cattr\"}}",
            d->pid);
    /* a name for each thread that recorded */
    char *seen = calloc((size_t)max_tid + 1, 1);
    for (size_t i = 0; i < d->n_ev && seen; i++) {
        int t = d->ev[i].tid;
        if (seen[t]) continue;
        seen[t] = 1;
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"ts\":0,\"pid\":%ld,\"tid\":%d,"
                   "\"args\":{\"name\":\"cattr thread %d\"}}", d->pid, t, t);
    }
    free(seen);
    for (size_t i = 0; i < d->n_ev; i++) {
        const prof_ev *e = &d->ev[i];
        uint64_t ts = e->t0 - d->t_begin, dur = e->t1 > e->t0 ? e->t1 - e->t0 : 0;
        fputs(",\n{\"name\":", f);
        switch (e->kind) {
        case EV_OP: json_str(f, str_of(d, e->s[1])); fputs(",\"cat\":\"op\",\"ph\":\"X\"", f); break;
        case EV_COPY: {
            char nm[64];
            snprintf(nm, sizeof nm, "copy %s", str_of(d, e->s[1]));
            json_str(f, nm);
            fputs(",\"cat\":\"copy\",\"ph\":\"X\"", f);
            break;
        }
        case EV_SPAN:
            json_str(f, str_of(d, e->s[1]));
            fputs(",\"cat\":", f);
            json_str(f, str_of(d, e->s[0]));
            fputs(",\"ph\":\"X\"", f);
            break;
        default: fputs("\"memory\",\"cat\":\"memory\",\"ph\":\"C\"", f); break;
        }
        fputs(",\"ts\":", f);
        json_us(f, ts);
        if (e->kind != EV_PEAK) {
            fputs(",\"dur\":", f);
            json_us(f, dur);
        }
        fprintf(f, ",\"pid\":%ld,\"tid\":%d,\"args\":{", d->pid, e->tid);
        switch (e->kind) {
        case EV_OP:
            fputs("\"backend\":", f);
            json_str(f, str_of(d, e->s[0]));
            fputs(",\"node\":", f);
            json_str(f, str_of(d, e->s[2]));
            fputs(",\"shapes\":", f);
            json_str(f, str_of(d, e->s[3]));
            break;
        case EV_COPY:
            fprintf(f, "\"bytes\":%" PRIu64 ",\"direction\":", e->bytes);
            json_str(f, str_of(d, e->s[1]));
            fputs(",\"backend\":", f);
            json_str(f, str_of(d, e->s[0]));
            break;
        case EV_PEAK: fprintf(f, "\"peak_bytes\":%" PRIu64, e->bytes); break;
        default: break;
        }
        fputs("}}", f);
    }
    fprintf(f, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"cattr %s\",\"dropped_events\":%" PRIu64
               "}}\n", cattr_version(), d->dropped);
    return ferror(f) ? cx_fail(CATTR_ERR_IO, "write error") : CATTR_OK;
}

/* ---- the summary -------------------------------------------------------------------------------------------- */

typedef struct {
    char *s;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 1024;
        while (cap <= b->len + (size_t)n) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
}

static int cmp_sum_ns(const void *a, const void *b) {
    const prof_sum *x = *(const prof_sum *const *)a, *y = *(const prof_sum *const *)b;
    return x->ns < y->ns ? 1 : x->ns > y->ns ? -1 : 0;
}

/* A name shortened for a table column (printable ASCII only; the trace has the exact text). */
static void col_name(const char *s, char *buf, size_t size) {
    size_t k = 0;
    for (; *s && k + 1 < size; s++) buf[k++] = (*s >= 0x20 && *s < 0x7F) ? *s : '?';
    buf[k] = '\0';
}

char *cx_prof_summary(const cx_prof_data *d) {
    sbuf b = {0};
    const prof_sum *ops[PROF_MAX_SUMS];
    int n_ops = 0;
    uint64_t op_ns = 0, op_n = 0;
    for (int i = 0; i < d->n_sums; i++)
        if (d->sums[i].kind == EV_OP) {
            ops[n_ops++] = &d->sums[i];
            op_ns += d->sums[i].ns;
            op_n += d->sums[i].count;
        }
    qsort(ops, (size_t)n_ops, sizeof ops[0], cmp_sum_ns);
    char name[64];
    sb_printf(&b, "cattr profile: %.3f ms, %zu events kept", (double)(d->t_end - d->t_begin) * 1e-6, d->n_ev);
    if (d->dropped) sb_printf(&b, ", %" PRIu64 " dropped (counted below, not in the trace)", d->dropped);
    sb_printf(&b, "\n\n%-28s %10s %12s %7s\n", "op", "count", "total ms", "share");
    for (int i = 0; i < n_ops; i++) {
        col_name(str_of(d, ops[i]->a), name, sizeof name);
        sb_printf(&b, "%-28s %10" PRIu64 " %12.3f %6.1f%%\n", name, ops[i]->count, (double)ops[i]->ns * 1e-6,
                  op_ns ? 100.0 * (double)ops[i]->ns / (double)op_ns : 0.0);
    }
    sb_printf(&b, "%-28s %10" PRIu64 " %12.3f %6.1f%%\n", "all ops", op_n, (double)op_ns * 1e-6, op_n ? 100.0 : 0.0);
    sb_printf(&b, "\n%-28s %10s %12s %16s\n", "copy", "count", "total ms", "bytes");
    const char *dirs[3] = {"in", "out", "zero"};
    for (int k = 0; k < 3; k++) {
        uint64_t n = 0, ns = 0, bytes = 0;
        for (int i = 0; i < d->n_sums; i++)
            if (d->sums[i].kind == EV_COPY && !strcmp(str_of(d, d->sums[i].a), dirs[k])) {
                n += d->sums[i].count;
                ns += d->sums[i].ns;
                bytes += d->sums[i].bytes;
            }
        sb_printf(&b, "%-28s %10" PRIu64 " %12.3f %16" PRIu64 "\n", dirs[k], n, (double)ns * 1e-6, bytes);
    }
    sb_printf(&b, "\n%-28s %10s %12s\n", "span", "count", "total ms");
    bool any_plan = false;
    for (int i = 0; i < d->n_sums; i++)
        if (d->sums[i].kind == EV_SPAN) {
            char cat[32];
            col_name(str_of(d, d->sums[i].a), cat, sizeof cat);
            col_name(str_of(d, d->sums[i].b), name, sizeof name);
            char key[100];
            snprintf(key, sizeof key, "%s: %s", cat, name);
            any_plan |= !strcmp(str_of(d, d->sums[i].a), "plan");
            sb_printf(&b, "%-28s %10" PRIu64 " %12.3f\n", key, d->sums[i].count, (double)d->sums[i].ns * 1e-6);
        }
    if (!any_plan) sb_printf(&b, "%-28s %10d %12.3f\n", "plan: plan build", 0, 0.0);
    if (d->has_peak) {
        col_name(str_of(d, d->peak_backend), name, sizeof name);
        sb_printf(&b, "\npeak memory: %" PRIu64 " bytes (%.1f MiB, backend %s)\n", d->peak,
                  (double)d->peak / 1048576.0, name);
    } else sb_printf(&b, "\npeak memory: not recorded\n");
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
