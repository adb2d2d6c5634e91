/* npy.c - NumPy .npy reader (format 1.0, 2.0, 3.0) and writer (format 1.0).
 *
 * Byte format (numpy.lib.format):
 *   0..5   magic "\x93NUMPY"
 *   6, 7   major, minor version
 *   8..    header length HLEN: uint16 little-endian (1.0) or uint32 little-endian (2.0, 3.0)
 *   ..     HLEN bytes of header: a Python dict literal (ASCII for 1.0/2.0, UTF-8 for 3.0), e.g.
 *          "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", padded with spaces and ended by '\n'
 *          so that the data starts on a multiple of 64 bytes
 *   ..     numel * itemsize bytes of data, C order unless fortran_order
 * The header is parsed with a small literal parser: keys and strings in single or double quotes, True/False, and
 * tuples of non-negative integers. Anything else (structured dtypes, object arrays) is rejected. */
#define _POSIX_C_SOURCE 200809L
#include "io/fileutil.h"
#include "io/tensorio.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NPY_MAX_HEADER (1u << 20) /* numpy itself refuses headers over 10000 bytes by default */

/* ==== header literal parser ================================================================================ */

typedef struct npy_header {
    char descr[32];
    int have_descr, have_order, have_shape;
    int fortran;
    int ndim;
    int64_t shape[CATTR_MAX_DIMS];
} npy_header;

typedef struct lexer {
    const char *start, *p, *end;
    const char *path;
} lexer;

static void skip_ws(lexer *lx) {
    while (lx->p < lx->end && (*lx->p == ' ' || *lx->p == '\t' || *lx->p == '\n' || *lx->p == '\r')) lx->p++;
}

static int accept(lexer *lx, char c) {
    skip_ws(lx);
    if (lx->p < lx->end && *lx->p == c) {
        lx->p++;
        return 1;
    }
    return 0;
}

static cattr_status bad_header(const lexer *lx, const char *what) {
    return cx_fail(CATTR_ERR_FORMAT, "'%s': malformed .npy header: %s (at header offset %td)", lx->path, what,
                   lx->p - lx->start);
}

/* Parses a quoted string (no escapes are needed by any valid key or descr; a backslash is rejected). */
static cattr_status parse_string(lexer *lx, char *out, size_t cap) {
    skip_ws(lx);
    if (lx->p >= lx->end || (*lx->p != '\'' && *lx->p != '"')) return bad_header(lx, "expected a quoted string");
    char q = *lx->p++;
    size_t n = 0;
    while (lx->p < lx->end && *lx->p != q) {
        if (*lx->p == '\\') return bad_header(lx, "escape sequences are not supported");
        if (n + 1 < cap) out[n] = *lx->p;
        n++;
        lx->p++;
    }
    if (lx->p >= lx->end) return bad_header(lx, "unterminated string");
    lx->p++;
    if (n + 1 > cap) return bad_header(lx, "string too long");
    out[n] = '\0';
    return CATTR_OK;
}

static cattr_status parse_bool(lexer *lx, int *v) {
    skip_ws(lx);
    size_t left = (size_t)(lx->end - lx->p);
    if (left >= 4 && memcmp(lx->p, "True", 4) == 0) {
        lx->p += 4;
        *v = 1;
        return CATTR_OK;
    }
    if (left >= 5 && memcmp(lx->p, "False", 5) == 0) {
        lx->p += 5;
        *v = 0;
        return CATTR_OK;
    }
    return bad_header(lx, "expected True or False");
}

/* A tuple of integers: "()", "(3,)", "(2, 3)", "(2, 3,)". Python 2 era files may carry an 'L' suffix. */
static cattr_status parse_shape(lexer *lx, npy_header *h) {
    if (!accept(lx, '(')) return bad_header(lx, "expected '(' to start the shape");
    h->ndim = 0;
    for (;;) {
        if (accept(lx, ')')) break;
        skip_ws(lx);
        if (lx->p >= lx->end || *lx->p < '0' || *lx->p > '9') {
            if (lx->p < lx->end && *lx->p == '-') return bad_header(lx, "negative dimension in shape");
            return bad_header(lx, "expected a dimension in shape");
        }
        int64_t v = 0;
        while (lx->p < lx->end && *lx->p >= '0' && *lx->p <= '9') {
            if (v > (INT64_MAX - 9) / 10) return bad_header(lx, "dimension too large");
            v = v * 10 + (*lx->p - '0');
            lx->p++;
        }
        if (lx->p < lx->end && (*lx->p == 'L' || *lx->p == 'l')) lx->p++;
        if (h->ndim >= CATTR_MAX_DIMS)
            return cx_fail(CATTR_ERR_UNSUPPORTED, "'%s': array has more than %d dimensions", lx->path, CATTR_MAX_DIMS);
        h->shape[h->ndim++] = v;
        if (accept(lx, ',')) continue;
        if (accept(lx, ')')) break;
        return bad_header(lx, "expected ',' or ')' in shape");
    }
    return CATTR_OK;
}

static cattr_status parse_header(const char *text, size_t len, const char *path, npy_header *h) {
    lexer lx = {text, text, text + len, path};
    memset(h, 0, sizeof *h);
    if (!accept(&lx, '{')) return bad_header(&lx, "expected '{'");
    for (;;) {
        if (accept(&lx, '}')) break;
        char key[32];
        CX_CHECK(parse_string(&lx, key, sizeof key));
        if (!accept(&lx, ':')) return bad_header(&lx, "expected ':' after a key");
        if (strcmp(key, "descr") == 0) {
            skip_ws(&lx);
            if (lx.p < lx.end && *lx.p == '[')
                return cx_fail(CATTR_ERR_UNSUPPORTED, "'%s': structured dtypes are not supported", path);
            CX_CHECK(parse_string(&lx, h->descr, sizeof h->descr));
            h->have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            CX_CHECK(parse_bool(&lx, &h->fortran));
            h->have_order = 1;
        } else if (strcmp(key, "shape") == 0) {
            CX_CHECK(parse_shape(&lx, h));
            h->have_shape = 1;
        } else {
            return cx_fail(CATTR_ERR_FORMAT, "'%s': malformed .npy header: unexpected key '%s'", path, key);
        }
        if (accept(&lx, ',')) continue;
        if (accept(&lx, '}')) break;
        return bad_header(&lx, "expected ',' or '}'");
    }
    skip_ws(&lx);
    if (lx.p != lx.end) return bad_header(&lx, "trailing characters after the dictionary");
    if (!h->have_descr || !h->have_order || !h->have_shape)
        return cx_fail(CATTR_ERR_FORMAT, "'%s': malformed .npy header: missing %s", path,
                       !h->have_descr ? "'descr'" : !h->have_order ? "'fortran_order'" : "'shape'");
    return CATTR_OK;
}

/* Maps a descr ("<f4", "|b1", ...) to an element type. */
static cattr_status descr_elem(const char *descr, const char *path, cx_elem *e) {
    static const struct {
        const char *code;
        cx_elem elem;
    } table[] = {
        {"f2", CX_ELEM_F16}, {"f4", CX_ELEM_F32}, {"f8", CX_ELEM_F64}, {"i1", CX_ELEM_I8},   {"u1", CX_ELEM_U8},
        {"b1", CX_ELEM_BOOL}, {"i2", CX_ELEM_I16}, {"u2", CX_ELEM_U16}, {"i4", CX_ELEM_I32}, {"u4", CX_ELEM_U32},
        {"i8", CX_ELEM_I64},
    };
    char order = descr[0];
    const char *code = descr;
    if (order == '<' || order == '>' || order == '|' || order == '=') code++;
    for (size_t i = 0; i < CX_ARRAY_LEN(table); i++) {
        if (strcmp(code, table[i].code) != 0) continue;
        if (order == '>' && cx_elem_size(table[i].elem) > 1)
            return cx_fail(CATTR_ERR_UNSUPPORTED, "'%s': big-endian dtype '%s' is not supported", path, descr);
        *e = table[i].elem;
        return CATTR_OK;
    }
    return cx_fail(CATTR_ERR_UNSUPPORTED,
                   "'%s': dtype '%s' is not supported (float16/32/64, int8/16/32/64, uint8/16/32, bool)", path, descr);
}

/* ==== load ================================================================================================= */

cattr_status cx_npy_locate(const void *data, size_t fsize, const char *path, cx_npy_layout *lay) {
    memset(lay, 0, sizeof *lay);
    const unsigned char *pre = data;
    if (fsize < 10)
        return cx_fail(CATTR_ERR_FORMAT, "'%s': not a .npy file (only %zu bytes)", path, fsize);
    if (memcmp(pre, "\x93NUMPY", 6) != 0) return cx_fail(CATTR_ERR_FORMAT, "'%s': not a .npy file (bad magic)", path);
    int major = pre[6], minor = pre[7];
    uint64_t hlen, hstart;
    if (major == 1) {
        hlen = (uint64_t)pre[8] | ((uint64_t)pre[9] << 8);
        hstart = 10;
    } else if (major == 2 || major == 3) {
        if (fsize < 12) return cx_fail(CATTR_ERR_FORMAT, "'%s': truncated .npy preamble", path);
        hlen = (uint64_t)pre[8] | ((uint64_t)pre[9] << 8) | ((uint64_t)pre[10] << 16) | ((uint64_t)pre[11] << 24);
        hstart = 12;
    } else {
        return cx_fail(CATTR_ERR_UNSUPPORTED, "'%s': .npy format version %d.%d is not supported (1.0-3.0)", path,
                       major, minor);
    }
    if (minor != 0)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "'%s': .npy format version %d.%d is not supported (1.0-3.0)", path,
                       major, minor);
    if (hlen > NPY_MAX_HEADER)
        return cx_fail(CATTR_ERR_FORMAT, "'%s': .npy header length %llu is implausibly large", path,
                       (unsigned long long)hlen);
    if (hstart + hlen > fsize)
        return cx_fail(CATTR_ERR_FORMAT, "'%s': truncated .npy header (%llu header bytes declared, file has %zu)",
                       path, (unsigned long long)hlen, fsize);
    const char *text = (const char *)pre + hstart;
    if (memchr(text, '\0', (size_t)hlen))
        return cx_fail(CATTR_ERR_FORMAT, "'%s': malformed .npy header: NUL byte in the header", path);
    npy_header h;
    CX_CHECK(parse_header(text, (size_t)hlen, path, &h));

    cx_elem elem = CX_ELEM_F32;
    CX_CHECK(descr_elem(h.descr, path, &elem));
    /* Fortran order only matters for more than one non-trivial dimension, but numpy writes it only then anyway. */
    if (h.fortran)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "'%s': Fortran-ordered arrays are not supported (save a C-contiguous "
                       "array, e.g. numpy.ascontiguousarray)", path);

    /* numel and byte count, guarded against overflow (whatever the order of the dims, a 0 among them included)
     * and against the actual file size before allocating */
    uint64_t data_avail = fsize - hstart - hlen;
    uint64_t es = cx_elem_size(elem), numel = 1;
    char sb[256];
    bool zero = false;
    for (int i = 0; i < h.ndim; i++) zero |= h.shape[i] == 0;
    for (int i = 0; i < h.ndim && !zero; i++) {
        uint64_t d = (uint64_t)h.shape[i];
        if (numel > (uint64_t)INT64_MAX / es / d)
            return cx_fail(CATTR_ERR_FORMAT, "'%s': shape %s is too large", path,
                           cx_shape_str(h.ndim, h.shape, sb, sizeof sb));
        numel *= d;
    }
    if (zero) numel = 0;
    if (numel * es > data_avail)
        return cx_fail(CATTR_ERR_FORMAT, "'%s': truncated data: shape %s of %s needs %llu bytes, the file holds %llu",
                       path, cx_shape_str(h.ndim, h.shape, sb, sizeof sb), h.descr,
                       (unsigned long long)(numel * es), (unsigned long long)data_avail);
    if (numel * es < data_avail)
        return cx_fail(CATTR_ERR_FORMAT, "'%s': %llu bytes after the data (shape %s of %s needs %llu bytes): not a "
                       "single .npy array", path, (unsigned long long)(data_avail - numel * es),
                       cx_shape_str(h.ndim, h.shape, sb, sizeof sb), h.descr, (unsigned long long)(numel * es));
    lay->elem = elem;
    lay->ndim = h.ndim;
    memcpy(lay->shape, h.shape, sizeof lay->shape);
    lay->numel = numel;
    lay->offset = hstart + hlen;
    return CATTR_OK;
}

cattr_status cx_npy_parse(const void *data, size_t fsize, const char *path, cattr_tensor **out) {
    *out = NULL;
    cx_npy_layout lay;
    CX_CHECK(cx_npy_locate(data, fsize, path, &lay));
    cattr_tensor *t = cx_tensor_alloc(cx_elem_dtype(lay.elem), lay.ndim, lay.shape);
    if (!t)
        return cx_fail(CATTR_ERR_NO_MEMORY, "'%s': cannot allocate %llu elements", path, (unsigned long long)lay.numel);
    cx_decode_le(lay.elem, (const unsigned char *)data + lay.offset, (size_t)lay.numel, t->data);
    *out = t;
    return CATTR_OK;
}

cattr_status cattr_tensor_load_npy(const char *path, cattr_tensor **out) {
    if (out) *out = NULL;
    if (!path || !out) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "no .npy file name or output given");
    cx_file_map m;
    CX_CHECK(cx_file_map_open(path, &m));
    cattr_status st = cx_npy_parse(m.data, m.size, path, out);
    cx_file_unmap(&m);
    return st;
}

/* ==== save ================================================================================================= */

/* Builds the format 1.0 header exactly as numpy 1.24's np.save does, so that files are byte-identical: keys sorted,
 * the shape's repr, 21 - len(repr(shape[0])) spaces of growth room for the first axis, then spaces and '\n' up to a
 * multiple of 64 bytes including the 10-byte preamble. Returns the header length, or 0 if it does not fit. */
static size_t npy_header_text(cattr_dtype dtype, int ndim, const int64_t *dims, char *buf, size_t cap) {
    const char *descr = dtype == CATTR_FLOAT32 ? "<f4" : dtype == CATTR_FLOAT64 ? "<f8" : "<i8";
    char shape[8 * 24 + 8];
    size_t n = 0;
    n += (size_t)snprintf(shape + n, sizeof shape - n, "(");
    for (int i = 0; i < ndim; i++)
        n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%lld", i ? ", " : "", (long long)dims[i]);
    snprintf(shape + n, sizeof shape - n, "%s)", ndim == 1 ? "," : "");
    int len = snprintf(buf, cap, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    if (len < 0 || (size_t)len >= cap) return 0;
    size_t hl = (size_t)len;
    if (ndim > 0) {
        char d0[32];
        int dl = snprintf(d0, sizeof d0, "%lld", (long long)dims[0]);
        for (int i = dl; i < 21 && hl + 1 < cap; i++) buf[hl++] = ' ';
    }
    size_t total = 10 + hl + 1; /* preamble + text + '\n' */
    size_t pad = (64 - total % 64) % 64;
    if (hl + pad + 1 >= cap) return 0;
    memset(buf + hl, ' ', pad);
    hl += pad;
    buf[hl++] = '\n';
    buf[hl] = '\0';
    return hl;
}

static cattr_status write_npy(FILE *f, void *ctx) {
    const cattr_tensor *t = ctx;
    char header[512];
    size_t hl = npy_header_text(t->dtype, t->ndim, t->shape, header, sizeof header);
    if (hl == 0 || hl > 65535) return cx_fail(CATTR_ERR_INTERNAL, "npy header does not fit");
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 0xff), (unsigned char)(hl >> 8)};
    if (fwrite(pre, 1, 10, f) != 10 || fwrite(header, 1, hl, f) != hl)
        return cx_fail(CATTR_ERR_IO, "write failed: %s", strerror(errno));
    return cx_write_tensor_data(f, t);
}

size_t cx_npy_header(cattr_dtype dtype, int ndim, const int64_t *shape, unsigned char *buf, size_t cap) {
    char header[512];
    size_t hl = npy_header_text(dtype, ndim, shape, header, sizeof header);
    if (hl == 0 || hl > 65535 || 10 + hl > cap) return 0;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 0xff), (unsigned char)(hl >> 8)};
    memcpy(buf, pre, 10);
    memcpy(buf + 10, header, hl);
    return 10 + hl;
}

cattr_status cattr_tensor_save_npy(const cattr_tensor *t, const char *path) {
    if (!t || !path) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_tensor_save_npy: NULL argument");
    if (cattr_dtype_size(t->dtype) == 0) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "'%s': invalid tensor dtype", path);
    return cx_write_file_atomic(path, write_npy, (void *)t);
}
