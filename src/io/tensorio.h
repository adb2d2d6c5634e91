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

#endif
