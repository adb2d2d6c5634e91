/* core.h - internal core: the tensor struct, error reporting, logging and small helpers shared by every module. */
#ifndef CATTR_CORE_H
#define CATTR_CORE_H

#include "cattr.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Host tensor: C-contiguous, owns its buffer. */
struct cattr_tensor {
    cattr_dtype dtype;
    int ndim;
    int64_t shape[CATTR_MAX_DIMS];
    int64_t numel;
    void *data;
    bool borrowed; /* data is the caller's (cattr_tensor_wrap, cx_tensor_borrow): freeing the tensor leaves it */
    void *map;     /* a read-only file mapping that holds data (a checkpoint's weight, cx_hf_weight): unmapped on free */
    size_t map_size;
};

/* Storage dtypes: a checkpoint's weights kept as the file stores them (bfloat16, float16), read only by kernels that
 * widen them to float32 as they load them (exact), never a compute dtype and never accepted from the public API.
 * cattr_dtype_size gives 2 for them. */
#define CX_BFLOAT16 ((cattr_dtype)8)
#define CX_FLOAT16 ((cattr_dtype)9)
static inline bool cx_dtype_is_storage(cattr_dtype d) { return d == CX_BFLOAT16 || d == CX_FLOAT16; }
/* float32, float64 or int64: what the public API takes */
static inline bool cx_dtype_public(cattr_dtype d) {
    return d == CATTR_FLOAT32 || d == CATTR_FLOAT64 || d == CATTR_INT64;
}
/* The exact float32 of a bfloat16 / IEEE half (bits as stored). */
static inline float cx_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v = {(uint32_t)h << 16};
    return v.f;
}
float cx_f16_to_f32(uint16_t h);
/* Row `row` of a 2-D float tensor (any float dtype, storage dtypes included) into dst as float32, widened exactly
 * (float64 rounded). */
void cx_tensor_row_f32(const cattr_tensor *t, int64_t row, float *dst);

/* A handle over t's data without a copy (borrowed: t must outlive it and its data stays unchanged); NULL when out of
 * memory. */
cattr_tensor *cx_tensor_borrow(const cattr_tensor *t);

/* Records a failure message (printf format) for cattr_last_error() and returns `st`, so that error paths read
 * `return cx_fail(CATTR_ERR_IO, "cannot open '%s'", path);`. */
cattr_status cx_fail(cattr_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes the current error message with a context string ("input 2: ..."); returns `st`. */
cattr_status cx_fail_context(cattr_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cx_log(cattr_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Copies the NUL-terminated src into dst (cap bytes, always NUL-terminated) with every byte that is not part of valid
 * UTF-8, and every control character but tab (C0 with newline, DEL, C1), written as \xNN. Returns the length
 * written. cx_fail and cx_log pass their messages through it. */
size_t cx_escape_text(const char *src, char *dst, size_t cap);

/* Allocation helpers; NULL on failure (callers turn that into CATTR_ERR_NO_MEMORY). */
void *cx_malloc(size_t n);
void *cx_calloc(size_t n, size_t size);
void *cx_realloc(void *p, size_t n);
char *cx_strdup(const char *s);

/* The element count of a shape: 0 when a size is 0 (whatever the others), -1 when a size is negative or the product
 * overflows an int64. */
int64_t cx_numel(int ndim, const int64_t *shape);
/* Formats a shape as "[2, 3, 4]" into buf (always NUL-terminated); returns buf. */
char *cx_shape_str(int ndim, const int64_t *shape, char *buf, size_t size);
bool cx_shape_eq(int na, const int64_t *a, int nb, const int64_t *b);

/* Internal tensor constructor with no zero fill (data uninitialised). */
cattr_tensor *cx_tensor_alloc(cattr_dtype dtype, int ndim, const int64_t *shape);
/* Reads element i of any dtype as double / writes it. */
double cx_tensor_get(const cattr_tensor *t, int64_t i);
void cx_tensor_set(cattr_tensor *t, int64_t i, double v);
/* The flat index of the first NaN or infinity of a float tensor, -1 when every value is finite (and for int64).
 * Scans blocks with integer compares of the exponent bits (vectorised), then the block that holds one. */
int64_t cx_tensor_first_nonfinite(const cattr_tensor *t);

/* Monotonic wall clock in seconds. */
double cx_now(void);

#define CX_CHECK(expr)                                                                                                 \
    do {                                                                                                               \
        cattr_status cx_st_ = (expr);                                                                                  \
        if (cx_st_ != CATTR_OK) return cx_st_;                                                                         \
    } while (0)

#define CX_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
