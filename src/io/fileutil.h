/* fileutil.h - file helpers shared by the loaders and writers: atomic whole-file writes, whole-file reads, and
 * little-endian element codecs (the byte order of .npy and .safetensors data) that convert foreign element types
 * to the three cattr dtypes. Portable: byte order is handled with shifts, never by assuming the host's. */
#ifndef CATTR_IO_FILEUTIL_H
#define CATTR_IO_FILEUTIL_H

#include "core/core.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* What an output path is, and so how it may be written (cx_output_kind). */
typedef enum cx_dest {
    CX_DEST_NEW = 0, /* nothing is there: created */
    CX_DEST_FILE,    /* a regular file: replaced as a whole (a temporary renamed over it) */
    CX_DEST_STREAM   /* a character device or a FIFO (such as /dev/stdout, /dev/null, a pipe): written in place */
} cx_dest;

/* How `path` may be written as an output. Never through a symbolic link to a file: a link is refused unless it leads
 * to a character device or a FIFO. The process's own descriptors (/dev/stdout, /dev/stderr, /dev/fd/N,
 * /proc/self/fd/N, when open) are streams written through the descriptor, wherever it leads. Errors: CATTR_ERR_IO naming the
 * path: a directory, a symbolic link to a file (or a dangling one), a block device, a socket, or a path that cannot be
 * examined. */
cattr_status cx_output_kind(const char *path, cx_dest *kind);

/* Writes a file atomically: opens "<path>.tmp.<pid>" beside `path`, calls writer(f, ctx), then fflush + fsync +
 * close, and renames the temporary over `path`. On any failure the temporary is removed and `path` is untouched.
 * A path that is a character device or a FIFO (cx_output_kind) is written in place instead (a FIFO without a reader is
 * an error, never a hang); anything cx_output_kind refuses is refused before a byte is written.
 * A writer reports failure by returning a non-OK status (after cx_fail); that status is returned with the message
 * prefixed by the path. Every other failure (open, write error on the stream, flush, sync, close, rename) returns
 * CATTR_ERR_IO with a message naming the path and the system error. */
cattr_status cx_write_file_atomic(const char *path, cattr_status (*writer)(FILE *f, void *ctx), void *ctx);

/* Opens an output that a run writes in place and a later run resumes (a corpus's results, a dataset's PATH.part):
 * read-write, never through a symbolic link (O_NOFOLLOW), a regular file only, created exclusively (mode 0644) when
 * absent and `create` is set (*created tells; else an absent file is an error), and locked (flock, exclusive) for as
 * long as the descriptor stays open, so that two runs never write one file. On failure *fd is -1. Errors:
 * CATTR_ERR_IO naming the path: a symbolic link, not a regular file, cannot be opened, or "another process is writing
 * '<path>'" while a lock is held. */
cattr_status cx_open_locked(const char *path, bool create, int *fd, bool *created);

/* Removes the temporaries "<path>.tmp.<pid>" (cx_write_file_atomic's) that a process which no longer exists left
 * beside `path` (killed while it wrote: kill -9, a crash, power loss); those of live processes are kept. Called by a
 * run that holds the lock of the output they belong to, so no live writer of that output can own one. Best effort: a
 * temporary that cannot be removed is left. Returns how many were removed. */
int cx_remove_stale_temps(const char *path);

/* A 64-bit fingerprint of what a file holds, to tell whether an input changed between runs or differs between the
 * processes of a job: its size and, for files up to 64 MiB, every byte; for larger ones its first and last MiB and 62
 * blocks of 64 KiB spread evenly between (about 6 MiB read whatever the size). `with_time` mixes in the modification
 * time and inode of a large file too, whose unread parts could change unseen (a resume check on one machine; leave it
 * off to compare copies of a file on several machines). A folder's (a checkpoint's) fingerprint is that of its .json
 * and .safetensors files (not recursive; in name order, each name mixed in). Errors: CATTR_ERR_IO naming the path. */
cattr_status cx_file_fingerprint(const char *path, bool with_time, uint64_t *out);

/* The fingerprint's mixing function over bytes (a 64-bit hash, not cryptographic), continuing from h (start with 0). */
uint64_t cx_hash_bytes(uint64_t h, const void *data, size_t n);

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
