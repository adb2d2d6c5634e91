/* fileutil.h - file helpers shared by the loaders and writers: atomic whole-file writes, whole-file reads, and
 * little-endian element codecs (the byte order of .npy and .safetensors data) that convert foreign element types
 * to the three cattr dtypes. Portable: byte order is handled with shifts, never by assuming the host's. */
#ifndef CATTR_IO_FILEUTIL_H
#define CATTR_IO_FILEUTIL_H

#include "core/core.h"

#include <stdint.h>
#include <stdio.h>

/* Writes a file atomically: opens "<path>.tmp.<pid>" beside `path`, calls writer(f, ctx), then fflush + fsync +
 * close, and renames the temporary over `path`. On any failure the temporary is removed and `path` is untouched.
 * A writer reports failure by returning a non-OK status (after cx_fail); that status is returned with the message
 * prefixed by the path. Every other failure (open, write error on the stream, flush, sync, close, rename) returns
 * CATTR_ERR_IO with a message naming the path and the system error. */
cattr_status cx_write_file_atomic(const char *path, cattr_status (*writer)(FILE *f, void *ctx), void *ctx);

/* Reads a whole regular file into a new malloc'd buffer (*data, freed by the caller with free()) of *size bytes,
 * followed by one extra NUL byte that is not counted in *size (so text can be parsed in place).
 * Errors: CATTR_ERR_INVALID_ARGUMENT (NULL argument), CATTR_ERR_IO (naming the path and strerror),
 * CATTR_ERR_NO_MEMORY. On failure *data is NULL and *size 0. */
cattr_status cx_read_file(const char *path, void **data, size_t *size);

/* A whole regular file, read-only, in memory: mapped (mmap) where it can be, else read into a buffer. */
typedef struct cx_file_map {
    const unsigned char *data; /* size bytes ("" for an empty file) */
    size_t size;
    void *map_, *heap_; /* what cx_file_unmap releases */
} cx_file_map;

/* Maps `path`. On failure *m is zeroed. Errors: CATTR_ERR_INVALID_ARGUMENT (NULL argument), CATTR_ERR_IO (cannot open
 * or read it, or not a regular file: naming the path), CATTR_ERR_NO_MEMORY. */
cattr_status cx_file_map_open(const char *path, cx_file_map *m);
/* Releases a mapping (a zeroed one too). */
void cx_file_unmap(cx_file_map *m);

/* Size in bytes of the open file `f` (fstat). Errors: CATTR_ERR_IO naming `path`. */
cattr_status cx_file_size(FILE *f, const char *path, uint64_t *size);

/* ---- little-endian element codecs --------------------------------------------------------------------- */

/* Element types found in files. */
typedef enum cx_elem {
    CX_ELEM_F16 = 0, /* IEEE binary16 -> float32 */
    CX_ELEM_BF16,    /* bfloat16 -> float32 */
    CX_ELEM_F32,     /* -> float32 */
    CX_ELEM_F64,     /* -> float64 */
    CX_ELEM_I8,      /* -> int64 */
    CX_ELEM_U8,      /* -> int64 */
    CX_ELEM_I16,     /* -> int64 */
    CX_ELEM_U16,     /* -> int64 */
    CX_ELEM_I32,     /* -> int64 */
    CX_ELEM_U32,     /* -> int64 */
    CX_ELEM_I64,     /* -> int64 */
    CX_ELEM_BOOL     /* one byte, nonzero -> 1, -> int64 */
} cx_elem;

/* Bytes per element in the file. */
size_t cx_elem_size(cx_elem e);
/* The cattr dtype an element type is loaded as. */
cattr_dtype cx_elem_dtype(cx_elem e);

/* Decodes n little-endian elements of type `e` from `src` into `dst` (n elements of cx_elem_dtype(e)). */
void cx_decode_le(cx_elem e, const void *src, size_t n, void *dst);
/* Encodes n elements of `dtype` from `src` into `dst` as little-endian bytes (n * cattr_dtype_size bytes). */
void cx_encode_le(cattr_dtype dtype, const void *src, size_t n, void *dst);

/* Reads n elements of type `e` from `f` into `dst` (converted as cx_decode_le). The raw bytes are read into the
 * tail of `dst` and widened in place, so no scratch memory is needed. Returns 1 if all n elements were read, 0 on a
 * short read or a read error (dst is then partly undefined). */
int cx_read_elems(FILE *f, cx_elem e, size_t n, void *dst);
/* Writes the numel elements of `t` to `f` as little-endian bytes, through a bounded stack buffer.
 * Errors: CATTR_ERR_IO (message without a path: cx_write_file_atomic adds it). */
cattr_status cx_write_tensor_data(FILE *f, const cattr_tensor *t);

#endif
