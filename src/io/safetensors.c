/* safetensors.c - named tensor sets read from and written to .safetensors files.
 *
 * Byte format:
 *   0..7      N: header length, uint64 little-endian
 *   8..8+N    UTF-8 JSON object: {"<name>": {"dtype": "F32", "shape": [d0, ...], "data_offsets": [begin, end]}, ...}
 *             plus an optional "__metadata__" object (string -> string) that is ignored; right-padded with spaces
 *   8+N..     data section; offsets are relative to its start, little-endian, C order
 * The reader trusts nothing: N must be at most the file size - 8 and at most 100 MB; every entry must be an object
 * with a known dtype, a shape of non-negative integers whose element count does not overflow, and offsets with
 * begin <= end <= data size and end - begin == numel * itemsize. Names must be unique, and the tensors' byte ranges
 * must be disjoint and cover the data section (the format forbids overlaps and bytes outside every tensor), but for
 * alignment padding: fewer than 8 zero bytes before a tensor (or the end) that starts on a multiple of 8. Tensors
 * keep the order of the header's keys. F16/BF16 load as float32; I8, U8, I16, U16, I32, U32 and BOOL load as int64.
 * The writer emits F32/F64/I64 entries in insertion order, offsets contiguous, header padded to a multiple of 8. */
#define _POSIX_C_SOURCE 200809L
#define _FILE_OFFSET_BITS 64
#include "io/tensorio.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define ST_MAX_HEADER (100u * 1000u * 1000u)

struct cattr_tensor_set {
    int count, cap;
    char **names;
    cattr_tensor **tensors;
};

/* ==== set basics =========================================================================================== */

cattr_status cattr_tensor_set_new(cattr_tensor_set **out) {
    if (!out) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_tensor_set_new: out is NULL");
    *out = calloc(1, sizeof **out);
    if (!*out) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot allocate a tensor set");
    return CATTR_OK;
}

void cattr_tensor_set_free(cattr_tensor_set *s) {
    if (!s) return;
    for (int i = 0; i < s->count; i++) {
        free(s->names[i]);
        cattr_tensor_free(s->tensors[i]);
    }
    free(s->names);
    free(s->tensors);
    free(s);
}

int cattr_tensor_set_count(const cattr_tensor_set *s) { return s ? s->count : 0; }

const char *cattr_tensor_set_name(const cattr_tensor_set *s, int i) {
    return s && i >= 0 && i < s->count ? s->names[i] : NULL;
}

static int find_index(const cattr_tensor_set *s, const char *name) {
    for (int i = 0; i < s->count; i++)
        if (strcmp(s->names[i], name) == 0) return i;
    return -1;
}

const cattr_tensor *cattr_tensor_set_get(const cattr_tensor_set *s, const char *name) {
    if (!s || !name) return NULL;
    int i = find_index(s, name);
    return i >= 0 ? s->tensors[i] : NULL;
}

/* Appends (takes ownership of `t` on success only); the caller has checked that the name is new. */
static cattr_status append_owned(cattr_tensor_set *s, const char *name, cattr_tensor *t) {
    if (s->count == s->cap) {
        int cap = s->cap ? s->cap * 2 : 16;
        char **nn = realloc(s->names, (size_t)cap * sizeof *nn);
        if (!nn) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot grow a tensor set");
        s->names = nn;
        cattr_tensor **tt = realloc(s->tensors, (size_t)cap * sizeof *tt);
        if (!tt) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot grow a tensor set");
        s->tensors = tt;
        s->cap = cap;
    }
    char *copy = cx_strdup(name);
    if (!copy) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot allocate tensor name '%s'", name);
    s->names[s->count] = copy;
    s->tensors[s->count] = t;
    s->count++;
    return CATTR_OK;
}

cattr_status cattr_tensor_set_add(cattr_tensor_set *s, const char *name, const cattr_tensor *t) {
    if (!s || !name || !t) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_tensor_set_add: NULL argument");
    if (!*name || strcmp(name, "__metadata__") == 0)
        return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "'%s' cannot name a tensor in a safetensors set", name);
    cattr_tensor *copy = NULL;
    CX_CHECK(cattr_tensor_from_data(t->dtype, t->ndim, t->shape, t->data, &copy));
    int i = find_index(s, name);
    if (i >= 0) {
        cattr_tensor_free(s->tensors[i]);
        s->tensors[i] = copy;
        return CATTR_OK;
    }
    cattr_status st = append_owned(s, name, copy);
    if (st != CATTR_OK) cattr_tensor_free(copy);
    return st;
}

/* ==== load ================================================================================================= */

static int parse_dtype(const char *s, cx_elem *e) {
    static const struct {
        const char *name;
        cx_elem elem;
    } table[] = {
        {"F32", CX_ELEM_F32}, {"F64", CX_ELEM_F64}, {"I64", CX_ELEM_I64}, {"F16", CX_ELEM_F16},
        {"BF16", CX_ELEM_BF16}, {"I32", CX_ELEM_I32}, {"I16", CX_ELEM_I16}, {"I8", CX_ELEM_I8},
        {"U8", CX_ELEM_U8}, {"U16", CX_ELEM_U16}, {"U32", CX_ELEM_U32}, {"BOOL", CX_ELEM_BOOL},
    };
    for (size_t i = 0; i < CX_ARRAY_LEN(table); i++)
        if (strcmp(s, table[i].name) == 0) {
            *e = table[i].elem;
            return 1;
        }
    return 0;
}

/* A JSON number that is an exact non-negative integer below 2^53 (the range a double holds exactly). */
static int json_uint(const cJSON *j, uint64_t *v) {
    if (!cJSON_IsNumber(j)) return 0;
    double d = j->valuedouble;
    if (!(d >= 0.0) || d >= 9007199254740992.0 || d != floor(d)) return 0;
    *v = (uint64_t)d;
    return 1;
}

static cattr_status parse_entry(const cJSON *item, const char *path, uint64_t data_size, cx_st_entry *e) {
    const char *name = item->string;
    if (!cJSON_IsObject(item))
        return cx_fail(CATTR_ERR_FORMAT, "'%s': tensor '%s': header entry is not an object", path, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off))
        return cx_fail(CATTR_ERR_FORMAT, "'%s': tensor '%s': needs a string \"dtype\" and arrays \"shape\" and "
                       "\"data_offsets\"", path, name);
    if (!parse_dtype(dt->valuestring, &e->elem))
        return cx_fail(CATTR_ERR_UNSUPPORTED, "'%s': tensor '%s': dtype '%s' is not supported", path, name,
                       dt->valuestring);
    int nd = cJSON_GetArraySize(sh);
    if (nd > CATTR_MAX_DIMS)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "'%s': tensor '%s': %d dimensions (at most %d)", path, name, nd,
                       CATTR_MAX_DIMS);
    e->ndim = 0;
    const cJSON *d;
    int zero = 0;
    cJSON_ArrayForEach(d, sh) {
        uint64_t v;
        if (!json_uint(d, &v))
            return cx_fail(CATTR_ERR_FORMAT, "'%s': tensor '%s': shape entries must be non-negative integers", path,
                           name);
        if (v == 0) zero = 1;
        e->shape[e->ndim++] = (int64_t)v;
    }
    uint64_t es = cx_elem_size(e->elem), numel = 1;
    for (int i = 0; i < e->ndim && !zero; i++) {
        uint64_t v = (uint64_t)e->shape[i];
        if (numel > (uint64_t)INT64_MAX / es / v)
            return cx_fail(CATTR_ERR_FORMAT, "'%s': tensor '%s': shape is too large (element count overflows)", path,
                           name);
        numel *= v;
    }
    e->numel = zero ? 0 : numel;
    if (cJSON_GetArraySize(off) != 2 || !json_uint(cJSON_GetArrayItem(off, 0), &e->begin) ||
        !json_uint(cJSON_GetArrayItem(off, 1), &e->end))
        return cx_fail(CATTR_ERR_FORMAT, "'%s': tensor '%s': data_offsets must be two non-negative integers", path,
                       name);
    if (e->begin > e->end || e->end > data_size)
        return cx_fail(CATTR_ERR_FORMAT, "'%s': tensor '%s': data_offsets [%llu, %llu] lie outside the data section "
                       "(%llu bytes)", path, name, (unsigned long long)e->begin, (unsigned long long)e->end,
                       (unsigned long long)data_size);
    if (e->end - e->begin != e->numel * es)
        return cx_fail(CATTR_ERR_FORMAT, "'%s': tensor '%s': data_offsets span %llu bytes, shape and dtype need %llu",
                       path, name, (unsigned long long)(e->end - e->begin), (unsigned long long)(e->numel * es));
    e->name = cx_strdup(name);
    if (!e->name) return cx_fail(CATTR_ERR_NO_MEMORY, "'%s': out of memory reading the header", path);
    return CATTR_OK;
}

void cx_st_header_free(cx_st_header *h) {
    if (!h) return;
    for (int i = 0; i < h->n; i++) free(h->e[i].name);
    free(h->e);
    memset(h, 0, sizeof *h);
}

static int cmp_range(const void *a, const void *b) {
    const cx_st_entry *x = *(const cx_st_entry *const *)a, *y = *(const cx_st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}
static int cmp_name(const void *a, const void *b) {
    return strcmp((*(const cx_st_entry *const *)a)->name, (*(const cx_st_entry *const *)b)->name);
}

/* Whether bytes [a, b) of the data section are alignment padding: fewer than 8 zero bytes that end on a multiple of
 * 8 (writers that align every tensor to 8 bytes, as the golden data's, leave such gaps). */
static bool is_padding(const unsigned char *data, uint64_t a, uint64_t b) {
    if (b - a >= 8 || b % 8) return false;
    for (uint64_t i = a; i < b; i++)
        if (data[i]) return false;
    return true;
}

/* The format's rules across entries: names unique, byte ranges disjoint and covering the data section (sorted by
 * offset, each range starts where the previous one ended, and the last ends at the end of the file), but for the
 * alignment padding is_padding accepts. */
static cattr_status check_layout(const cx_st_header *h, const unsigned char *data, const char *path) {
    if (h->n == 0) {
        if (h->data_size && !is_padding(data, 0, h->data_size))
            return cx_fail(CATTR_ERR_FORMAT, "'%s': %llu data bytes but no tensor in the header", path,
                           (unsigned long long)h->data_size);
        return CATTR_OK;
    }
    const cx_st_entry **v = malloc((size_t)h->n * sizeof *v);
    if (!v) return cx_fail(CATTR_ERR_NO_MEMORY, "'%s': out of memory checking the header", path);
    for (int i = 0; i < h->n; i++) v[i] = &h->e[i];
    cattr_status st = CATTR_OK;
    qsort(v, (size_t)h->n, sizeof *v, cmp_name);
    for (int i = 1; i < h->n && st == CATTR_OK; i++)
        if (!strcmp(v[i]->name, v[i - 1]->name))
            st = cx_fail(CATTR_ERR_FORMAT, "'%s': tensor '%s' appears twice in the header", path, v[i]->name);
    qsort(v, (size_t)h->n, sizeof *v, cmp_range);
    uint64_t at = 0;
    for (int i = 0; i < h->n && st == CATTR_OK; i++) {
        if (v[i]->begin < at)
            st = cx_fail(CATTR_ERR_FORMAT, "'%s': the data of tensors '%s' and '%s' overlap (bytes %llu to %llu of "
                         "the data section)", path, v[i - 1]->name, v[i]->name, (unsigned long long)v[i]->begin,
                         (unsigned long long)(at < v[i]->end ? at : v[i]->end));
        else if (v[i]->begin > at && !is_padding(data, at, v[i]->begin))
            st = cx_fail(CATTR_ERR_FORMAT, "'%s': bytes %llu to %llu of the data section belong to no tensor (before "
                         "'%s')", path, (unsigned long long)at, (unsigned long long)v[i]->begin, v[i]->name);
        at = v[i]->end;
    }
    if (st == CATTR_OK && at != h->data_size && !is_padding(data, at, h->data_size))
        st = cx_fail(CATTR_ERR_FORMAT, "'%s': the last %llu bytes of the data section belong to no tensor", path,
                     (unsigned long long)(h->data_size - at));
    free(v);
    return st;
}

cattr_status cx_st_header_parse(const void *file, size_t fsize, const char *path, cx_st_header *h) {
    memset(h, 0, sizeof *h);
    const unsigned char *pre = file;
    if (fsize < 8) return cx_fail(CATTR_ERR_FORMAT, "'%s': not a safetensors file (%zu bytes)", path, fsize);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | pre[i];
    if (n > fsize - 8)
        return cx_fail(CATTR_ERR_FORMAT, "'%s': header length %llu exceeds the file (%zu bytes)", path,
                       (unsigned long long)n, fsize);
    if (n > ST_MAX_HEADER)
        return cx_fail(CATTR_ERR_FORMAT, "'%s': header length %llu is over the 100 MB limit", path,
                       (unsigned long long)n);
    const char *text = (const char *)pre + 8, *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)n, &end, 0);
    if (!root) return cx_fail(CATTR_ERR_FORMAT, "'%s': the header is not valid JSON", path);
    /* Only whitespace padding may follow the JSON object. */
    for (const char *p = end; p && p < text + n; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            return cx_fail(CATTR_ERR_FORMAT, "'%s': unexpected bytes after the header JSON (offset %td)", path,
                           p - text);
        }
    cattr_status st = CATTR_OK;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return cx_fail(CATTR_ERR_FORMAT, "'%s': the header is not a JSON object", path);
    }
    h->data_start = 8 + n;
    h->data_size = fsize - h->data_start;
    int cap = cJSON_GetArraySize(root);
    h->e = calloc((size_t)(cap > 0 ? cap : 1), sizeof *h->e);
    if (!h->e) st = cx_fail(CATTR_ERR_NO_MEMORY, "'%s': out of memory reading the header", path);
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        if (st != CATTR_OK) break;
        if (!item->string) {
            st = cx_fail(CATTR_ERR_FORMAT, "'%s': header entry without a name", path);
            break;
        }
        if (strcmp(item->string, "__metadata__") == 0) continue;
        st = parse_entry(item, path, h->data_size, &h->e[h->n]);
        if (st == CATTR_OK) h->n++;
    }
    cJSON_Delete(root);
    if (st == CATTR_OK) st = check_layout(h, pre + h->data_start, path);
    if (st != CATTR_OK) cx_st_header_free(h);
    return st;
}

cattr_status cx_tensor_set_parse(const void *file, size_t size, const char *path, cattr_tensor_set **out) {
    *out = NULL;
    cx_st_header h;
    CX_CHECK(cx_st_header_parse(file, size, path, &h));
    cattr_tensor_set *s = NULL;
    cattr_status st = cattr_tensor_set_new(&s);
    for (int i = 0; i < h.n && st == CATTR_OK; i++) {
        const cx_st_entry *e = &h.e[i];
        cattr_tensor *t = cx_tensor_alloc(cx_elem_dtype(e->elem), e->ndim, e->shape);
        if (!t) {
            st = cx_fail(CATTR_ERR_NO_MEMORY, "'%s': cannot allocate tensor '%s'", path, e->name);
            break;
        }
        cx_decode_le(e->elem, (const unsigned char *)file + h.data_start + e->begin, (size_t)e->numel, t->data);
        if ((st = append_owned(s, e->name, t)) != CATTR_OK) cattr_tensor_free(t);
    }
    cx_st_header_free(&h);
    if (st != CATTR_OK) {
        cattr_tensor_set_free(s);
        return st;
    }
    *out = s;
    return CATTR_OK;
}

cattr_status cattr_tensor_set_load(const char *path, cattr_tensor_set **out) {
    if (out) *out = NULL;
    if (!path || !out) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "no .safetensors file name or output given");
    cx_file_map m;
    CX_CHECK(cx_file_map_open(path, &m));
    cattr_status st = cx_tensor_set_parse(m.data, m.size, path, out);
    cx_file_unmap(&m);
    return st;
}

/* ==== save ================================================================================================= */

/* A growable text buffer for the header. */
typedef struct strbuf {
    char *p;
    size_t len, cap;
    int oom;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* A JSON string literal: quotes, backslashes and control characters escaped; other bytes (UTF-8) copied. */
static void sb_json_string(strbuf *b, const char *s) {
    sb_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            sb_put(b, esc, 2);
        } else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            sb_puts(b, esc);
        } else {
            sb_put(b, (const char *)p, 1);
        }
    }
    sb_puts(b, "\"");
}

static cattr_status build_header(const cattr_tensor_set *s, strbuf *b) {
    uint64_t off = 0;
    char num[64];
    sb_puts(b, "{");
    for (int i = 0; i < s->count; i++) {
        const cattr_tensor *t = s->tensors[i];
        const char *dt = t->dtype == CATTR_FLOAT32 ? "F32" : t->dtype == CATTR_FLOAT64 ? "F64" : "I64";
        if (i) sb_puts(b, ",");
        sb_json_string(b, s->names[i]);
        sb_puts(b, ":{\"dtype\":\"");
        sb_puts(b, dt);
        sb_puts(b, "\",\"shape\":[");
        for (int k = 0; k < t->ndim; k++) {
            snprintf(num, sizeof num, "%s%lld", k ? "," : "", (long long)t->shape[k]);
            sb_puts(b, num);
        }
        uint64_t nbytes = (uint64_t)t->numel * cattr_dtype_size(t->dtype);
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)(off + nbytes));
        sb_puts(b, num);
        off += nbytes;
    }
    sb_puts(b, "}");
    while (!b->oom && b->len % 8 != 0) sb_puts(b, " ");
    if (b->oom) return cx_fail(CATTR_ERR_NO_MEMORY, "cannot allocate the safetensors header");
    return CATTR_OK;
}

cattr_status cx_st_header_bytes(int n, const char *const *names, const cattr_dtype *dt, const int *ndim,
                                const int64_t (*shape)[CATTR_MAX_DIMS], unsigned char **out, size_t *len, uint64_t *offset) {
    *out = NULL;
    *len = 0;
    cattr_tensor *ts = calloc((size_t)(n > 0 ? n : 1), sizeof *ts), **tp = calloc((size_t)(n > 0 ? n : 1), sizeof *tp);
    if (!ts || !tp) {
        free(ts);
        free(tp);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    for (int i = 0; i < n; i++) { /* shapes without data: the header reads only dtype, ndim, shape, numel */
        ts[i].dtype = dt[i];
        ts[i].ndim = ndim[i];
        memcpy(ts[i].shape, shape[i], sizeof ts[i].shape);
        ts[i].numel = 1;
        for (int k = 0; k < ndim[i]; k++) ts[i].numel *= shape[i][k];
        tp[i] = &ts[i];
    }
    cattr_tensor_set set = {n, n, (char **)names, tp};
    strbuf b = {0};
    cattr_status st = build_header(&set, &b);
    if (st == CATTR_OK && !(*out = malloc(8 + b.len))) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    if (st == CATTR_OK) {
        for (int i = 0; i < 8; i++) (*out)[i] = (unsigned char)((uint64_t)b.len >> (8 * i));
        memcpy(*out + 8, b.p, b.len);
        *len = 8 + b.len;
        uint64_t off = *len;
        for (int i = 0; i < n; i++) {
            offset[i] = off;
            off += (uint64_t)ts[i].numel * cattr_dtype_size(ts[i].dtype);
        }
    }
    free(b.p);
    free(ts);
    free(tp);
    return st;
}

typedef struct save_ctx {
    const cattr_tensor_set *set;
    const strbuf *header;
} save_ctx;

static cattr_status write_set(FILE *f, void *vctx) {
    const save_ctx *c = vctx;
    unsigned char pre[8];
    uint64_t n = c->header->len;
    for (int i = 0; i < 8; i++) pre[i] = (unsigned char)(n >> (8 * i));
    if (fwrite(pre, 1, 8, f) != 8 || fwrite(c->header->p, 1, c->header->len, f) != c->header->len)
        return cx_fail(CATTR_ERR_IO, "write failed: %s", strerror(errno));
    for (int i = 0; i < c->set->count; i++) {
        cattr_status st = cx_write_tensor_data(f, c->set->tensors[i]);
        if (st != CATTR_OK) return cx_fail_context(st, "tensor '%s'", c->set->names[i]);
    }
    return CATTR_OK;
}

cattr_status cattr_tensor_set_save(const cattr_tensor_set *s, const char *path) {
    if (!s || !path) return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "cattr_tensor_set_save: NULL argument");
    strbuf b = {0};
    cattr_status st = build_header(s, &b);
    if (st == CATTR_OK) {
        save_ctx c = {s, &b};
        st = cx_write_file_atomic(path, write_set, &c);
    }
    free(b.p);
    return st;
}
