/* rows.h - tensor files read and written a batch of rows (dim 0) at a time, for datasets that do not fit in memory
 * (`cattr explain --batch-size`, docs/CLI.md).
 *
 * A reader maps a .npy file, or one tensor of a .safetensors file, checks its header with the same parsers as the
 * whole-file loaders (cx_npy_locate, cx_st_header_parse) and decodes the rows asked for; the OS pages in only what is
 * read. A writer creates PATH.part with the whole file's header (byte for byte what cattr_tensor_save_npy or
 * cattr_tensor_set_save would write for the same tensors) and the file's full size, writes rows at their places in any
 * order, makes them durable on request (fdatasync) and renames PATH.part to PATH when every row is there; reopened on
 * an existing PATH.part whose header is the same, it keeps the rows already written (a resumed run). */
#ifndef CATTR_IO_ROWS_H
#define CATTR_IO_ROWS_H

#include "io/fileutil.h"

#include <stdbool.h>

typedef struct cx_rows_reader {
    cx_file_map map;
    cx_elem elem;           /* as stored */
    int ndim;               /* >= 1 */
    int64_t shape[CATTR_MAX_DIMS];
    uint64_t offset;        /* of row 0 in the file */
    uint64_t row_elems;     /* elements per row */
    char what[256];         /* the file (and tensor) in messages */
} cx_rows_reader;

/* Opens `spec`: FILE.npy, FILE.safetensors (its only tensor) or FILE.safetensors:NAME. Errors: CATTR_ERR_IO,
 * CATTR_ERR_FORMAT, CATTR_ERR_UNSUPPORTED (as the whole-file loaders), CATTR_ERR_INVALID_ARGUMENT (no such tensor,
 * several tensors and none named, a 0-D tensor: no rows). On failure *r is zeroed. */
cattr_status cx_rows_open(const char *spec, cx_rows_reader *r);
/* Rows [b0, b1) as a new tensor in the file's cattr dtype (float16/bfloat16 widened to float32, integers and bool to
 * int64, as the loaders do). Errors: CATTR_ERR_INVALID_ARGUMENT (a range outside the rows), CATTR_ERR_NO_MEMORY. */
cattr_status cx_rows_read(const cx_rows_reader *r, int64_t b0, int64_t b1, cattr_tensor **out);
void cx_rows_close(cx_rows_reader *r);

typedef struct cx_rows_writer cx_rows_writer;

/* Opens PATH.part, the file a writer fills: never through a symbolic link, a regular file only, created (empty) when
 * absent, and locked (cx_open_locked) for as long as the descriptor is open: a second run on the same output is refused
 * ("another process is writing"). *created tells whether it was made now. Errors: CATTR_ERR_IO naming PATH.part. */
cattr_status cx_rows_part_open(const char *path, int *fd, bool *created);

/* A writer of n tensors on PATH.part (fd, open and locked by cx_rows_part_open; the writer owns it from here, also on
 * failure): their names (.safetensors), dtypes and full shapes (dim 0 the rows). A .npy path takes one tensor. With
 * `resume` the part file must already hold this very header at this size (the rows written by an interrupted run are
 * kept); without, the file is written anew: the header, then zeros to the full size. Errors:
 * CATTR_ERR_INVALID_ARGUMENT (a .npy of several tensors, another extension), CATTR_ERR_IO naming the file (also a part
 * file to resume that holds another header or size), CATTR_ERR_NO_MEMORY. */
cattr_status cx_rows_writer_open(const char *path, int fd, int n, const char *const *names, const cattr_dtype *dt,
                                 const int *ndim, const int64_t (*shape)[CATTR_MAX_DIMS], bool resume,
                                 cx_rows_writer **out);
/* Writes `rows` (tensor i's dtype and row shape, any number of rows) at row `row0` of tensor i. Errors:
 * CATTR_ERR_INVALID_ARGUMENT (dtype, row shape or range), CATTR_ERR_IO. */
cattr_status cx_rows_writer_put(cx_rows_writer *w, int i, int64_t row0, const cattr_tensor *rows);
/* Makes what was written durable (fdatasync). Errors: CATTR_ERR_IO. */
cattr_status cx_rows_writer_sync(cx_rows_writer *w);
/* Syncs, closes and renames PATH.part to PATH (the finished file). Errors: CATTR_ERR_IO. The writer is freed either
 * way. */
cattr_status cx_rows_writer_finish(cx_rows_writer *w);
/* The same for a part file whose rows were all written by an earlier run (fd from cx_rows_part_open; closed here). */
cattr_status cx_rows_part_commit(const char *path, int fd);
/* Closes without renaming: PATH.part stays, for a later resume. */
void cx_rows_writer_free(cx_rows_writer *w);

#endif
