/* tensorio.h - the tensor file formats parsed from memory: .npy arrays and .safetensors files (a set of tensors, or
 * the checked header alone for loaders that keep the data mapped, as the checkpoint loader does). The public file
 * functions (cattr_tensor_load_npy, cattr_tensor_set_load) map the file and call these; the fuzz harnesses call them
 * directly. Every size, offset and shape is checked against the buffer before it is used. */
#ifndef CATTR_IO_TENSORIO_H
#define CATTR_IO_TENSORIO_H

#include "io/fileutil.h"

/* Parses a whole .npy file of `size` bytes (borrowed). `what` names the source in messages. On success *out is a new
 * tensor. Errors: CATTR_ERR_FORMAT (bad magic, header, truncated data, bytes after the data), CATTR_ERR_UNSUPPORTED
 * (dtype, Fortran order, version), CATTR_ERR_NO_MEMORY. */
cattr_status cx_npy_parse(const void *data, size_t size, const char *what, cattr_tensor **out);

/* Where a .npy file's array lies: its element type, shape and the byte offset of its data (C order). */
typedef struct cx_npy_layout {
    cx_elem elem;
    int ndim;
    int64_t shape[CATTR_MAX_DIMS];
    uint64_t numel, offset;
} cx_npy_layout;

/* Parses and checks a .npy file's preamble and header against its `size` bytes (cx_npy_parse's checks, without
 * reading the data). Errors: as cx_npy_parse but CATTR_ERR_NO_MEMORY. */
cattr_status cx_npy_locate(const void *data, size_t size, const char *what, cx_npy_layout *lay);

/* The preamble and header (format 1.0, numpy's bytes, as cattr_tensor_save_npy writes them) of an array of this dtype
 * and shape, into buf; returns its length, a multiple of 64, or 0 when it does not fit in cap. */
size_t cx_npy_header(cattr_dtype dtype, int ndim, const int64_t *shape, unsigned char *buf, size_t cap);

/* One tensor of a .safetensors header. */
typedef struct cx_st_entry {
    char *name;
    cx_elem elem;
    int ndim;
    int64_t shape[CATTR_MAX_DIMS];
    uint64_t numel;
    uint64_t begin, end; /* byte offsets relative to the data section */
} cx_st_entry;

/* A checked .safetensors header: the entries in header order, and where the data section starts in the file. The
 * tensors' byte ranges are disjoint and cover the data section (the format's rule), but for alignment padding (fewer
 * than 8 zero bytes ending on a multiple of 8); every shape matches its dtype and byte range; names are unique. */
typedef struct cx_st_header {
    cx_st_entry *e;
    int n;
    uint64_t data_start, data_size;
} cx_st_header;

/* Parses and checks the header of a .safetensors file of `size` bytes. Errors: CATTR_ERR_FORMAT naming the file and
 * tensor, CATTR_ERR_UNSUPPORTED (a dtype with no cattr equivalent, more than CATTR_MAX_DIMS dims),
 * CATTR_ERR_NO_MEMORY. On failure *h is empty. */
cattr_status cx_st_header_parse(const void *file, size_t size, const char *what, cx_st_header *h);
void cx_st_header_free(cx_st_header *h);

/* Parses a whole .safetensors file into a new tensor set (F16/BF16 widened to float32, integers and bool to int64).
 * Errors: as cx_st_header_parse. */
cattr_status cx_tensor_set_parse(const void *file, size_t size, const char *what, cattr_tensor_set **out);

/* The 8-byte length and the JSON header (as cattr_tensor_set_save writes them) of a .safetensors file holding n
 * tensors named names[i] of dtype dt[i] and shape (ndim[i], shape[i]), in that order: *out (malloc'ed, *len bytes) and
 * each tensor's byte offset in the file (offset[i]). Errors: CATTR_ERR_NO_MEMORY. */
cattr_status cx_st_header_bytes(int n, const char *const *names, const cattr_dtype *dt, const int *ndim,
                                const int64_t (*shape)[CATTR_MAX_DIMS], unsigned char **out, size_t *len, uint64_t *offset);

#endif
