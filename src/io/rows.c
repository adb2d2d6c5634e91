/* rows.c - tensor files read and written a batch of rows at a time (rows.h). */
#define _POSIX_C_SOURCE 200809L
#include "io/rows.h"

#include "io/tensorio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* ---- reader ------------------------------------------------------------------------------------------------- */

cattr_status cx_rows_open(const char *spec, cx_rows_reader *r) {
    memset(r, 0, sizeof *r);
    if (!spec) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "no file given");
    char path[4096];
    snprintf(path, sizeof path, "%s", spec);
    char *name = NULL, *colon = strstr(path, ".safetensors:");
    if (colon) {
        colon[strlen(".safetensors")] = 0;
        name = colon + strlen(".safetensors") + 1;
    }
    snprintf(r->what, sizeof r->what, "%s", spec);
    CX_CHECK(cx_file_map_open(path, &r->map));
    cattr_status st = CATTR_OK;
    if (ends_with(path, ".safetensors")) {
        cx_st_header h;
        st = cx_st_header_parse(r->map.data, r->map.size, path, &h);
        int pick = -1;
        if (st == CATTR_OK) {
            for (int i = 0; i < h.n && name && pick < 0; i++)
                if (strcmp(h.e[i].name, name) == 0) pick = i;
            if (!name && h.n == 1) pick = 0;
            if (pick < 0)
                st = name ? cx_fail(CATTR_ERR_INVALID_ARGUMENT, "'%s' has no tensor named '%s'", path, name)
                          : cx_fail(CATTR_ERR_INVALID_ARGUMENT, "'%s' holds %d tensors: name one as FILE.safetensors:NAME",
                                    path, h.n);
        }
        if (st == CATTR_OK) {
            const cx_st_entry *e = &h.e[pick];
            r->elem = e->elem;
            r->ndim = e->ndim;
            memcpy(r->shape, e->shape, sizeof r->shape);
            r->offset = h.data_start + e->begin;
        }
        cx_st_header_free(&h);
    } else {
        cx_npy_layout lay;
        st = cx_npy_locate(r->map.data, r->map.size, path, &lay);
        if (st == CATTR_OK) {
            r->elem = lay.elem;
            r->ndim = lay.ndim;
            memcpy(r->shape, lay.shape, sizeof r->shape);
            r->offset = lay.offset;
        }
    }
    if (st == CATTR_OK && r->ndim < 1)
        st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "'%s' holds a scalar: a dataset needs rows (a first dim)", spec);
    if (st != CATTR_OK) {
        cx_rows_close(r);
        return st;
    }
    r->row_elems = 1;
    for (int d = 1; d < r->ndim; d++) r->row_elems *= (uint64_t)r->shape[d]; /* bounded: the header was checked */
    return CATTR_OK;
}

cattr_status cx_rows_read(const cx_rows_reader *r, int64_t b0, int64_t b1, cattr_tensor **out) {
    *out = NULL;
    if (b0 < 0 || b1 < b0 || b1 > r->shape[0])
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "'%s': rows %lld to %lld of %lld", r->what, (long long)b0,
                       (long long)b1, (long long)r->shape[0]);
    int64_t sh[CATTR_MAX_DIMS];
    memcpy(sh, r->shape, sizeof sh);
    sh[0] = b1 - b0;
    cattr_tensor *t = cx_tensor_alloc(cx_elem_dtype(r->elem), r->ndim, sh);
    if (!t) return cx_fail(CATTR_ERR_NO_MEMORY, "'%s': cannot allocate rows %lld to %lld", r->what, (long long)b0,
                           (long long)b1);
    size_t es = cx_elem_size(r->elem);
    cx_decode_le(r->elem, r->map.data + r->offset + (uint64_t)b0 * r->row_elems * es, (size_t)t->numel, t->data);
    *out = t;
    return CATTR_OK;
}

void cx_rows_close(cx_rows_reader *r) {
    cx_file_unmap(&r->map);
    memset(r, 0, sizeof *r);
}

/* ---- writer ------------------------------------------------------------------------------------------------- */

#define ROWS_MAX_TENSORS 32 /* the attributions of up to 16 inputs or layer tensors and a delta, with room */

struct cx_rows_writer {
    int fd, n;
    char *path, *part;
    cattr_dtype dt[ROWS_MAX_TENSORS];
    int64_t rows[ROWS_MAX_TENSORS];
    uint64_t offset[ROWS_MAX_TENSORS], row_bytes[ROWS_MAX_TENSORS];
};

void cx_rows_writer_free(cx_rows_writer *w) {
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    free(w->path);
    free(w->part);
    free(w);
}

static cattr_status pwrite_all(int fd, const void *buf, size_t len, uint64_t at, const char *what) {
    const char *p = buf;
    while (len) {
        ssize_t k = pwrite(fd, p, len, (off_t)at);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return cx_fail(CATTR_ERR_IO, "cannot write '%s': %s", what, k < 0 ? strerror(errno) : "no progress");
        p += k;
        len -= (size_t)k;
        at += (uint64_t)k;
    }
    return CATTR_OK;
}

static char *part_name(const char *path) {
    size_t pl = strlen(path);
    char *part = malloc(pl + 6);
    if (part) snprintf(part, pl + 6, "%s.part", path);
    return part;
}

cattr_status cx_rows_part_open(const char *path, int *fd, bool *created) {
    char *part = part_name(path);
    if (!part) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    cattr_status st = cx_open_locked(part, true, fd, created);
    if (st == CATTR_OK) { /* the output's lock is ours: what a killed run left half-written beside it goes */
        size_t pl = strlen(path);
        char *progress = malloc(pl + 16);
        if (progress) {
            snprintf(progress, pl + 16, "%s.part.json", path);
            cx_remove_stale_temps(progress);
            free(progress);
        }
        cx_remove_stale_temps(path);
    }
    free(part);
    return st;
}

cattr_status cx_rows_writer_open(const char *path, int fd, int n, const char *const *names, const cattr_dtype *dt,
                                 const int *ndim, const int64_t (*shape)[CATTR_MAX_DIMS], bool resume,
                                 cx_rows_writer **out) {
    *out = NULL;
    bool npy = ends_with(path, ".npy");
    cattr_status st = CATTR_OK;
    if (!npy && !ends_with(path, ".safetensors"))
        st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "'%s': rows are written to .npy or .safetensors files", path);
    else if (n < 1 || n > ROWS_MAX_TENSORS || (npy && n != 1))
        st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "'%s': %d tensors (%s)", path, n, npy ? "a .npy holds one" : "too many");
    for (int i = 0; i < n && st == CATTR_OK; i++)
        if (ndim[i] < 1 || cattr_dtype_size(dt[i]) == 0)
            st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "'%s': tensor %d has no rows or no dtype", path, i);
    cx_rows_writer *w = st == CATTR_OK ? calloc(1, sizeof *w) : NULL;
    if (st == CATTR_OK && !w) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (!w) {
        if (fd >= 0) close(fd);
        return st;
    }
    w->fd = fd;
    w->n = n;
    w->path = strdup(path);
    w->part = part_name(path);
    unsigned char *hdr = NULL, small[65536 + 16];
    size_t hlen = 0;
    if (!w->path || !w->part) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) {
        if (npy) {
            hlen = cx_npy_header(dt[0], ndim[0], shape[0], small, sizeof small);
            if (!hlen) st = cx_fail(CATTR_ERR_INVALID_ARGUMENT, "'%s': the .npy header does not fit", path);
            w->offset[0] = hlen;
        } else {
            st = cx_st_header_bytes(n, names, dt, ndim, shape, &hdr, &hlen, w->offset);
        }
    }
    const unsigned char *h = npy ? small : hdr;
    uint64_t total = hlen;
    for (int i = 0; i < n && st == CATTR_OK; i++) {
        w->dt[i] = dt[i];
        w->rows[i] = shape[i][0];
        w->row_bytes[i] = cattr_dtype_size(dt[i]);
        for (int d = 1; d < ndim[i]; d++) w->row_bytes[i] *= (uint64_t)shape[i][d];
        total += w->row_bytes[i] * (uint64_t)shape[i][0];
    }
    if (st == CATTR_OK && resume) { /* the part file of an interrupted run: the same header at the same size */
        struct stat sb;
        unsigned char *old = malloc(hlen ? hlen : 1);
        if (!old) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != total || pread(fd, old, hlen, 0) != (ssize_t)hlen ||
                 memcmp(old, h, hlen) != 0)
            st = cx_fail(CATTR_ERR_IO, "'%s' does not hold the rows this run writes (another header or size): it was "
                         "not written by this command; remove it and its progress file to start over", w->part);
        free(old);
    } else if (st == CATTR_OK) { /* written anew: the header, then zeros to the full size */
        if (ftruncate(fd, 0) != 0 || ftruncate(fd, (off_t)total) != 0)
            st = cx_fail(CATTR_ERR_IO, "cannot size '%s' to %llu bytes: %s", w->part, (unsigned long long)total,
                         strerror(errno));
        if (st == CATTR_OK) st = pwrite_all(fd, h, hlen, 0, w->part);
    }
    free(hdr);
    if (st != CATTR_OK) {
        cx_rows_writer_free(w);
        return st;
    }
    *out = w;
    return CATTR_OK;
}

cattr_status cx_rows_writer_put(cx_rows_writer *w, int i, int64_t row0, const cattr_tensor *rows) {
    if (i < 0 || i >= w->n || rows->dtype != w->dt[i] || rows->ndim < 1)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "'%s': tensor %d: wrong dtype or shape", w->path, i);
    int64_t k = rows->shape[0];
    uint64_t bytes = (uint64_t)rows->numel * cattr_dtype_size(rows->dtype);
    if (row0 < 0 || k > w->rows[i] - row0 || bytes != (uint64_t)k * w->row_bytes[i])
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "'%s': tensor %d: %lld rows of %llu bytes at row %lld do not fit",
                       w->path, i, (long long)k, (unsigned long long)(k ? bytes / (uint64_t)k : 0), (long long)row0);
    return pwrite_all(w->fd, rows->data, (size_t)bytes, w->offset[i] + (uint64_t)row0 * w->row_bytes[i], w->part);
}

cattr_status cx_rows_writer_sync(cx_rows_writer *w) {
    if (fdatasync(w->fd) != 0) return cx_fail(CATTR_ERR_IO, "cannot sync '%s': %s", w->part, strerror(errno));
    return CATTR_OK;
}

cattr_status cx_rows_part_commit(const char *path, int fd) {
    char *part = part_name(path);
    cattr_status st = part ? CATTR_OK : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK && fsync(fd) != 0 && errno != EINVAL)
        st = cx_fail(CATTR_ERR_IO, "cannot sync '%s': %s", part, strerror(errno));
    /* renamed while the lock is held: no other run can have begun writing it meanwhile */
    if (st == CATTR_OK && rename(part, path) != 0)
        st = cx_fail(CATTR_ERR_IO, "cannot rename '%s' to '%s': %s", part, path, strerror(errno));
    if (close(fd) != 0 && st == CATTR_OK) st = cx_fail(CATTR_ERR_IO, "cannot close '%s': %s", path, strerror(errno));
    free(part);
    return st;
}

cattr_status cx_rows_writer_finish(cx_rows_writer *w) {
    cattr_status st = cx_rows_part_commit(w->path, w->fd);
    w->fd = -1;
    cx_rows_writer_free(w);
    return st;
}
