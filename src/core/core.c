/* core.c - status strings, thread-local error text, logging, allocation and tensor basics. */
#define _POSIX_C_SOURCE 200809L
#include "core.h"

#include <errno.h>
#include <math.h>
#include <sys/mman.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char g_err[2048];
static cattr_log_fn g_log_fn;
static void *g_log_user;

const char *cattr_version(void) { return "0.1.0"; }

size_t cattr_sizeof(const char *type) {
    static const struct {
        const char *name;
        size_t size;
    } k[] = {{"cattr_attr_params", sizeof(cattr_attr_params)}, {"cattr_call", sizeof(cattr_call)},
             {"cattr_target", sizeof(cattr_target)}, {"cattr_node_rule", sizeof(cattr_node_rule)},
             {"cattr_llm_call", sizeof(cattr_llm_call)}};
    for (size_t i = 0; type && i < sizeof k / sizeof *k; i++)
        if (!strcmp(type, k[i].name)) return k[i].size;
    return 0;
}

const char *cattr_status_string(cattr_status st) {
    switch (st) {
    case CATTR_OK: return "ok";
    case CATTR_ERR_INVALID_ARGUMENT: return "invalid argument";
    case CATTR_ERR_IO: return "i/o error";
    case CATTR_ERR_FORMAT: return "malformed file";
    case CATTR_ERR_UNSUPPORTED: return "unsupported";
    case CATTR_ERR_SHAPE: return "shape mismatch";
    case CATTR_ERR_DTYPE: return "wrong dtype";
    case CATTR_ERR_TARGET: return "bad target";
    case CATTR_ERR_NONFINITE: return "non-finite value";
    case CATTR_ERR_NO_MEMORY: return "out of memory";
    case CATTR_ERR_INTERNAL: return "internal error";
    case CATTR_ERR_CANCELLED: return "cancelled";
    }
    return "unknown status";
}

const char *cattr_last_error(void) { return g_err; }

/* Length of the valid UTF-8 sequence at s (at most n bytes; no overlongs, surrogates or code points above U+10FFFF),
 * 0 if there is none. */
static size_t utf8_valid_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, min = 0x10000;
    else return 0;
    if (len > n) return 0;
    unsigned cp = c & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

size_t cx_escape_text(const char *src, char *dst, size_t cap) {
    const unsigned char *s = (const unsigned char *)src;
    size_t n = strlen(src), o = 0;
    for (size_t i = 0; i < n && cap;) {
        size_t l = utf8_valid_len(s + i, n - i);
        /* C0 controls but tab, DEL, and the C1 controls U+0080-U+009F (0xC2 0x80-0x9F) are escaped too: a name
         * from a file can neither move the cursor nor start a line of its own */
        bool ctl = (l == 1 && ((s[i] < 0x20 && s[i] != '\t') || s[i] == 0x7F)) ||
                   (l == 2 && s[i] == 0xC2 && s[i + 1] < 0xA0);
        if (l && !ctl) {
            if (o + l >= cap) break;
            memcpy(dst + o, s + i, l);
            o += l;
            i += l;
        } else {
            size_t m = l ? l : 1; /* a control character's bytes, or one invalid byte */
            if (o + 4 * m >= cap) break;
            for (size_t k = 0; k < m; k++, i++, o += 4) snprintf(dst + o, 5, "\\x%02x", s[i]);
        }
    }
    if (cap) dst[o < cap ? o : cap - 1] = '\0';
    return o;
}

/* Messages may quote names and text from files: anything that is not printable UTF-8 is escaped as \xNN, so that a
 * corrupt file never writes raw bytes to a terminal or a log. */
static void escape_in_place(char *buf, size_t cap) {
    char tmp[sizeof g_err];
    cx_escape_text(buf, tmp, cap < sizeof tmp ? cap : sizeof tmp);
    memcpy(buf, tmp, strlen(tmp) + 1);
}

cattr_status cx_fail(cattr_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    escape_in_place(g_err, sizeof g_err);
    return st;
}

cattr_status cx_fail_context(cattr_status st, const char *fmt, ...) {
    char prefix[512], old[sizeof g_err];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, g_err, sizeof old);
    size_t np = strlen(prefix);
    if (np + 2 >= sizeof g_err) np = sizeof g_err - 3;
    memcpy(g_err, prefix, np);
    memcpy(g_err + np, ": ", 2);
    size_t room = sizeof g_err - np - 3, no = strlen(old);
    if (no > room) no = room;
    memcpy(g_err + np + 2, old, no);
    g_err[np + 2 + no] = '\0';
    escape_in_place(g_err, sizeof g_err);
    return st;
}

void cattr_set_log_callback(cattr_log_fn fn, void *user) {
    g_log_fn = fn;
    g_log_user = user;
}

void cx_log(cattr_log_level level, const char *fmt, ...) {
    if (!g_log_fn) return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    escape_in_place(buf, sizeof buf);
    g_log_fn(level, buf, g_log_user);
}

/* 64-byte aligned (a cache line, an AVX-512 vector). Blocks of CX_HUGE bytes and more (weights, activation arenas)
 * are aligned to 2 MiB and advised to the kernel as candidates for transparent huge pages: a GEMM reading a weight
 * matrix down its columns touches a new 4 KiB page on every row, and with 4 KiB pages those TLB misses were a tenth
 * of the packed kernel's time. The last huge page of a block may hold up to 2 MiB beyond n (not counted by the
 * backend's peak counter). NULL where n rounded up does not fit a size_t. errno is left as the allocation left it. */
#define CX_HUGE ((size_t)2 << 20)
void *cx_malloc(size_t n) {
    if (n < CX_HUGE) return aligned_alloc(64, n ? (n + 63) / 64 * 64 : 64);
    if (n > SIZE_MAX - CX_HUGE) return NULL;
    size_t r = (n + CX_HUGE - 1) / CX_HUGE * CX_HUGE;
    void *p = aligned_alloc(CX_HUGE, r);
#ifdef MADV_HUGEPAGE
    int e = errno;
    if (p) (void)madvise(p, r, MADV_HUGEPAGE);
    errno = e;
#endif
    return p;
}
void *cx_calloc(size_t n, size_t size) { return calloc(n ? n : 1, size ? size : 1); }
void *cx_realloc(void *p, size_t n) { return realloc(p, n ? n : 1); }
char *cx_strdup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

int64_t cx_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 0) return 0; /* a 0 anywhere: no element, whatever the other sizes */
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || __builtin_mul_overflow(n, shape[i], &n)) return -1;
    return n;
}

char *cx_shape_str(int ndim, const int64_t *shape, char *buf, size_t size) {
    size_t off = 0;
    off += (size_t)snprintf(buf + off, off < size ? size - off : 0, "[");
    for (int i = 0; i < ndim; i++)
        off += (size_t)snprintf(buf + off, off < size ? size - off : 0, "%s%lld", i ? ", " : "", (long long)shape[i]);
    snprintf(buf + (off < size ? off : size - 1), off < size ? size - off : 1, "]");
    return buf;
}

bool cx_shape_eq(int na, const int64_t *a, int nb, const int64_t *b) {
    if (na != nb) return false;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i]) return false;
    return true;
}

double cx_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- dtypes and tensors ---------------------------------------------------------------------------------- */

const char *cattr_dtype_name(cattr_dtype d) {
    switch (d) {
    case CATTR_FLOAT32: return "float32";
    case CATTR_FLOAT64: return "float64";
    case CATTR_INT64: return "int64";
    }
    return d == CX_BFLOAT16 ? "bfloat16" : d == CX_FLOAT16 ? "float16" : "?";
}

size_t cattr_dtype_size(cattr_dtype d) {
    switch (d) {
    case CATTR_FLOAT32: return 4;
    case CATTR_FLOAT64: return 8;
    case CATTR_INT64: return 8;
    }
    return cx_dtype_is_storage(d) ? 2 : 0;
}

cattr_tensor *cx_tensor_alloc(cattr_dtype dtype, int ndim, const int64_t *shape) {
    cattr_tensor *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->numel = cx_numel(ndim, shape);
    size_t es = cattr_dtype_size(dtype), bytes;
    if (t->numel < 0 || __builtin_mul_overflow((size_t)t->numel, es, &bytes)) { /* no such allocation can succeed */
        free(t);
        return NULL;
    }
    t->data = cx_malloc(bytes);
    if (!t->data) {
        free(t);
        return NULL;
    }
    return t;
}

static cattr_status check_shape_args(cattr_dtype dtype, int ndim, const int64_t *shape) {
    if (!cx_dtype_public(dtype)) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "invalid dtype %d", (int)dtype);
    if (ndim < 0 || ndim > CATTR_MAX_DIMS)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "tensor rank %d is outside 0..%d", ndim, CATTR_MAX_DIMS);
    if (ndim > 0 && !shape) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "shape is NULL");
    uint64_t n = 1, cap = (uint64_t)(SIZE_MAX < INT64_MAX ? SIZE_MAX : INT64_MAX) / cattr_dtype_size(dtype);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "negative size %lld in dim %d", (long long)shape[i], i);
        if (shape[i] && n > cap / (uint64_t)shape[i])
            return cx_fail(CATTR_ERR_NO_MEMORY, "a tensor of shape %s is too large to allocate",
                           cx_shape_str(ndim, shape, (char[160]){0}, 160));
        n *= (uint64_t)shape[i];
    }
    return CATTR_OK;
}

cattr_status cattr_tensor_new(cattr_dtype dtype, int ndim, const int64_t *shape, cattr_tensor **out) {
    if (!out) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    CX_CHECK(check_shape_args(dtype, ndim, shape));
    cattr_tensor *t = cx_tensor_alloc(dtype, ndim, shape);
    if (!t) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot allocate a tensor");
    memset(t->data, 0, (size_t)t->numel * cattr_dtype_size(dtype));
    *out = t;
    return CATTR_OK;
}

cattr_status cattr_tensor_from_data(cattr_dtype dtype, int ndim, const int64_t *shape, const void *data,
                                    cattr_tensor **out) {
    if (!out) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    CX_CHECK(check_shape_args(dtype, ndim, shape));
    cattr_tensor *t = cx_tensor_alloc(dtype, ndim, shape);
    if (!t) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot allocate a tensor");
    size_t n = (size_t)t->numel * cattr_dtype_size(dtype);
    if (n && !data) {
        cattr_tensor_free(t);
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "data is NULL");
    }
    if (n) memcpy(t->data, data, n);
    *out = t;
    return CATTR_OK;
}

float cx_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0x1f) {
        u = sign | 0x7f800000u | m << 13; /* inf, NaN (payload kept) */
    } else if (e) {
        u = sign | (e + 112) << 23 | m << 13;
    } else if (!m) {
        u = sign;
    } else { /* subnormal: normalise */
        e = 113;
        while (!(m & 0x400u)) {
            m <<= 1;
            e--;
        }
        u = sign | e << 23 | (m & 0x3ffu) << 13;
    }
    union { uint32_t u; float f; } v = {u};
    return v.f;
}

static inline uint16_t rd_u16(const void *p, int64_t i) {
    uint16_t h;
    memcpy(&h, (const char *)p + 2 * i, 2);
    return h;
}

double cx_tensor_get(const cattr_tensor *t, int64_t i) {
    switch (t->dtype) {
    case CATTR_FLOAT32: return ((const float *)t->data)[i];
    case CATTR_FLOAT64: return ((const double *)t->data)[i];
    case CATTR_INT64: return (double)((const int64_t *)t->data)[i];
    }
    if (t->dtype == CX_BFLOAT16) return cx_bf16_to_f32(rd_u16(t->data, i));
    if (t->dtype == CX_FLOAT16) return cx_f16_to_f32(rd_u16(t->data, i));
    return 0;
}

void cx_tensor_row_f32(const cattr_tensor *t, int64_t row, float *dst) {
    int64_t n = t->ndim >= 2 ? t->shape[t->ndim - 1] : t->numel, o = row * n;
    if (t->dtype == CATTR_FLOAT32) {
        memcpy(dst, (const float *)t->data + o, (size_t)n * sizeof *dst);
    } else if (t->dtype == CX_BFLOAT16) {
        for (int64_t k = 0; k < n; k++) dst[k] = cx_bf16_to_f32(rd_u16(t->data, o + k));
    } else {
        for (int64_t k = 0; k < n; k++) dst[k] = (float)cx_tensor_get(t, o + k);
    }
}

#define NONFINITE_BLOCK 4096
int64_t cx_tensor_first_nonfinite(const cattr_tensor *t) {
    if (t->dtype != CATTR_FLOAT32 && t->dtype != CATTR_FLOAT64) return -1;
    for (int64_t b0 = 0; b0 < t->numel; b0 += NONFINITE_BLOCK) {
        int64_t n = t->numel - b0 < NONFINITE_BLOCK ? t->numel - b0 : NONFINITE_BLOCK;
        int bad = 0; /* an all-ones exponent: inf or NaN (integer compares, which the compiler vectorises) */
        if (t->dtype == CATTR_FLOAT32) {
            const float *v = (const float *)t->data + b0;
            for (int64_t k = 0; k < n; k++) {
                uint32_t u;
                memcpy(&u, v + k, sizeof u);
                bad |= (u & 0x7f800000u) == 0x7f800000u;
            }
        } else {
            const double *v = (const double *)t->data + b0;
            for (int64_t k = 0; k < n; k++) {
                uint64_t u;
                memcpy(&u, v + k, sizeof u);
                bad |= (u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
            }
        }
        if (bad)
            for (int64_t k = b0; k < b0 + n; k++)
                if (!isfinite(cx_tensor_get(t, k))) return k;
    }
    return -1;
}

void cx_tensor_set(cattr_tensor *t, int64_t i, double v) {
    switch (t->dtype) {
    case CATTR_FLOAT32: ((float *)t->data)[i] = (float)v; break;
    case CATTR_FLOAT64: ((double *)t->data)[i] = v; break;
    case CATTR_INT64: ((int64_t *)t->data)[i] = (int64_t)v; break;
    }
}

cattr_status cattr_tensor_convert(const cattr_tensor *src, cattr_dtype dtype, cattr_tensor **out) {
    if (!out || !src) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "NULL argument to cattr_tensor_convert");
    *out = NULL;
    if (!cx_dtype_public(dtype) || (cx_dtype_is_storage(src->dtype) && dtype == CATTR_INT64))
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cannot convert %s to %s", cattr_dtype_name(src->dtype),
                       cattr_dtype_name(dtype));
    cattr_tensor *t = cx_tensor_alloc(dtype, src->ndim, src->shape);
    if (!t) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot allocate a tensor");
    if (cx_dtype_is_storage(src->dtype)) { /* a weight as its checkpoint stores it, widened exactly */
        bool bf = src->dtype == CX_BFLOAT16, f32 = dtype == CATTR_FLOAT32;
#pragma omp parallel for if (src->numel > (1 << 20)) schedule(static)
        for (int64_t i = 0; i < src->numel; i++) {
            uint16_t h = rd_u16(src->data, i);
            float f = bf ? cx_bf16_to_f32(h) : cx_f16_to_f32(h);
            if (f32) ((float *)t->data)[i] = f;
            else ((double *)t->data)[i] = f;
        }
    } else if (dtype == src->dtype) {
        memcpy(t->data, src->data, (size_t)src->numel * cattr_dtype_size(dtype));
    } else if (src->dtype == CATTR_INT64 || dtype == CATTR_INT64) {
        for (int64_t i = 0; i < src->numel; i++) cx_tensor_set(t, i, cx_tensor_get(src, i));
    } else if (dtype == CATTR_FLOAT64) {
        const float *s = src->data;
        double *d = t->data;
        for (int64_t i = 0; i < src->numel; i++) d[i] = s[i];
    } else {
        const double *s = src->data;
        float *d = t->data;
        for (int64_t i = 0; i < src->numel; i++) d[i] = (float)s[i];
    }
    *out = t;
    return CATTR_OK;
}

void cattr_tensor_free(cattr_tensor *t) {
    if (!t) return;
    if (t->map) {
        if (!t->borrowed) munmap(t->map, t->map_size);
    } else if (!t->borrowed) {
        free(t->data);
    }
    free(t);
}

cattr_tensor *cx_tensor_borrow(const cattr_tensor *t) {
    cattr_tensor *b = malloc(sizeof *b);
    if (!b) return NULL;
    *b = *t;
    b->borrowed = true;
    return b;
}

cattr_status cattr_tensor_wrap(cattr_dtype dtype, int ndim, const int64_t *shape, void *data, cattr_tensor **out) {
    if (!out) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    CX_CHECK(check_shape_args(dtype, ndim, shape));
    cattr_tensor *t = calloc(1, sizeof *t);
    if (!t) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot allocate a tensor");
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->numel = cx_numel(ndim, shape);
    if (t->numel > 0 && !data) {
        free(t);
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "data is NULL");
    }
    t->data = data;
    t->borrowed = true;
    *out = t;
    return CATTR_OK;
}

cattr_dtype cattr_tensor_dtype(const cattr_tensor *t) { return t->dtype; }
int cattr_tensor_ndim(const cattr_tensor *t) { return t->ndim; }
const int64_t *cattr_tensor_shape(const cattr_tensor *t) { return t->shape; }
int64_t cattr_tensor_numel(const cattr_tensor *t) { return t->numel; }
void *cattr_tensor_data(cattr_tensor *t) { return t->data; }
const void *cattr_tensor_data_const(const cattr_tensor *t) { return t->data; }
