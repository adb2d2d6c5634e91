/* hf.c - Hugging Face checkpoint folders: config.json and mapped safetensors weights (see hf.h). */
#include "io/hf.h"

#include "io/fileutil.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- config.json ------------------------------------------------------------------------------------------- */

static const cJSON *key(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static cattr_status get_int(const cJSON *o, const char *k, const char *path, bool required, int64_t def, int64_t *out) {
    const cJSON *v = key(o, k);
    if (!v) {
        if (required) return cx_fail(CATTR_ERR_FORMAT, "'%s': missing key '%s'", path, k);
        *out = def;
        return CATTR_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int64_t)v->valuedouble || v->valuedouble < 0)
        return cx_fail(CATTR_ERR_FORMAT, "'%s': key '%s' must be a non-negative integer", path, k);
    *out = (int64_t)v->valuedouble;
    return CATTR_OK;
}

static cattr_status get_num(const cJSON *o, const char *k, const char *path, double def, double *out) {
    const cJSON *v = key(o, k);
    if (!v) {
        *out = def;
        return CATTR_OK;
    }
    if (!cJSON_IsNumber(v)) return cx_fail(CATTR_ERR_FORMAT, "'%s': key '%s' must be a number", path, k);
    *out = v->valuedouble;
    return CATTR_OK;
}

static bool get_bool(const cJSON *o, const char *k, bool def) {
    const cJSON *v = key(o, k);
    return v ? cJSON_IsTrue(v) : def;
}

cattr_status cx_hf_config_load(const char *dir, cx_hf_config *cfg) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    void *text = NULL;
    size_t size = 0;
    CX_CHECK(cx_read_file(path, &text, &size));
    cJSON *o = cJSON_ParseWithLength(text, size);
    free(text);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return cx_fail(CATTR_ERR_FORMAT, "'%s' is not a JSON object", path);
    }
    memset(cfg, 0, sizeof *cfg);
    cattr_status st = CATTR_OK;
    const char *mt = cJSON_GetStringValue(key(o, "model_type"));
    if (!mt) st = cx_fail(CATTR_ERR_FORMAT, "'%s': missing key 'model_type'", path);
    else if (strcmp(mt, "qwen3") && strcmp(mt, "llama") && strcmp(mt, "qwen2") && strcmp(mt, "mistral"))
        st = cx_fail(CATTR_ERR_UNSUPPORTED, "'%s': model_type '%s' is not supported (qwen3, llama, qwen2, mistral)",
                     path, mt);
    else snprintf(cfg->model_type, sizeof cfg->model_type, "%s", mt);
    if (st == CATTR_OK) st = get_int(o, "vocab_size", path, true, 0, &cfg->vocab_size);
    if (st == CATTR_OK) st = get_int(o, "hidden_size", path, true, 0, &cfg->hidden_size);
    if (st == CATTR_OK) st = get_int(o, "intermediate_size", path, true, 0, &cfg->intermediate_size);
    if (st == CATTR_OK) st = get_int(o, "num_hidden_layers", path, true, 0, &cfg->num_hidden_layers);
    if (st == CATTR_OK) st = get_int(o, "num_attention_heads", path, true, 0, &cfg->num_attention_heads);
    if (st == CATTR_OK)
        st = get_int(o, "num_key_value_heads", path, false, cfg->num_attention_heads, &cfg->num_key_value_heads);
    if (st == CATTR_OK && cfg->num_attention_heads > 0)
        st = get_int(o, "head_dim", path, false, cfg->hidden_size / cfg->num_attention_heads, &cfg->head_dim);
    if (st == CATTR_OK) st = get_int(o, "max_position_embeddings", path, false, 32768, &cfg->max_position_embeddings);
    if (st == CATTR_OK) st = get_num(o, "rms_norm_eps", path, 1e-6, &cfg->rms_norm_eps);
    if (st == CATTR_OK) st = get_num(o, "rope_theta", path, 10000.0, &cfg->rope_theta);
    if (st == CATTR_OK) st = get_int(o, "bos_token_id", path, false, -1, &cfg->bos_token_id);
    if (st == CATTR_OK) st = get_int(o, "eos_token_id", path, false, -1, &cfg->eos_token_id);
    if (st == CATTR_OK) {
        cfg->tie_word_embeddings = get_bool(o, "tie_word_embeddings", false);
        cfg->attention_bias = get_bool(o, "attention_bias", false);
        cfg->mlp_bias = get_bool(o, "mlp_bias", false);
        bool qwen2 = !strcmp(mt, "qwen2"), qwen3 = !strcmp(mt, "qwen3"), llama = !strcmp(mt, "llama");
        cfg->qkv_bias = qwen2 || ((llama || qwen3) && cfg->attention_bias);
        cfg->o_bias = (llama || qwen3) && cfg->attention_bias;
        cfg->qk_norm = qwen3;
        if (!llama) cfg->mlp_bias = false;
        const char *act = cJSON_GetStringValue(key(o, "hidden_act"));
        if (act && strcmp(act, "silu"))
            st = cx_fail(CATTR_ERR_UNSUPPORTED, "'%s': hidden_act '%s' is not supported (silu)", path, act);
        if ((qwen2 || qwen3) && get_bool(o, "use_sliding_window", false))
            st = cx_fail(CATTR_ERR_UNSUPPORTED, "'%s': use_sliding_window true is not supported", path);
        if (!strcmp(mt, "mistral") && key(o, "sliding_window"))
            cx_log(CATTR_LOG_WARN, "'%s': sliding_window is ignored (attention is plain causal: exact for sequences "
                                   "shorter than the window)", path);
    }
    const cJSON *rs = key(o, "rope_scaling");
    if (st == CATTR_OK && rs) {
        const char *type = cJSON_GetStringValue(key(rs, "rope_type"));
        if (!type) type = cJSON_GetStringValue(key(rs, "type"));
        if (!type || strcmp(type, "llama3"))
            st = cx_fail(CATTR_ERR_UNSUPPORTED, "'%s': rope_scaling type '%s' is not supported (llama3)", path,
                         type ? type : "?");
        else {
            snprintf(cfg->rope_type, sizeof cfg->rope_type, "llama3");
            st = get_num(rs, "factor", path, 8.0, &cfg->rope_factor);
            if (st == CATTR_OK) st = get_num(rs, "low_freq_factor", path, 1.0, &cfg->rope_low_freq_factor);
            if (st == CATTR_OK) st = get_num(rs, "high_freq_factor", path, 4.0, &cfg->rope_high_freq_factor);
            if (st == CATTR_OK)
                st = get_int(rs, "original_max_position_embeddings", path, false, 8192,
                             &cfg->rope_original_max_position_embeddings);
        }
    }
    if (st == CATTR_OK && (cfg->num_attention_heads < 1 || cfg->num_key_value_heads < 1 || cfg->head_dim < 2 ||
                           cfg->num_attention_heads % cfg->num_key_value_heads || cfg->head_dim % 2 ||
                           cfg->hidden_size < 1 || cfg->vocab_size < 1))
        st = cx_fail(CATTR_ERR_FORMAT, "'%s': inconsistent sizes (heads %lld, kv heads %lld, head_dim %lld)", path,
                     (long long)cfg->num_attention_heads, (long long)cfg->num_key_value_heads,
                     (long long)cfg->head_dim);
    cJSON_Delete(o);
    return st;
}

/* ---- mapped safetensors --------------------------------------------------------------------------------------- */

typedef enum { W_F32, W_F64, W_BF16, W_F16 } wtype;

typedef struct {
    char *name;
    wtype type;
    int ndim;
    int64_t shape[CATTR_MAX_DIMS];
    const unsigned char *data; /* into a mapping */
    size_t bytes;
} wentry;

typedef struct {
    void *map;
    size_t size;
} mapping;

struct cx_hf_weights {
    mapping *maps;
    int n_maps;
    wentry *w;
    int n, cap;
};

void cx_hf_weights_free(cx_hf_weights *w) {
    if (!w) return;
    for (int i = 0; i < w->n_maps; i++)
        if (w->maps[i].map) munmap(w->maps[i].map, w->maps[i].size);
    for (int i = 0; i < w->n; i++) free(w->w[i].name);
    free(w->maps);
    free(w->w);
    free(w);
}

static cattr_status map_shard(cx_hf_weights *w, const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return cx_fail(CATTR_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size < 8) {
        close(fd);
        return cx_fail(CATTR_ERR_FORMAT, "'%s' is too short to be a safetensors file", path);
    }
    size_t size = (size_t)sb.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return cx_fail(CATTR_ERR_IO, "cannot map '%s': %s", path, strerror(errno));
    mapping *nm = realloc(w->maps, (size_t)(w->n_maps + 1) * sizeof *nm);
    if (!nm) {
        munmap(map, size);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    w->maps = nm;
    w->maps[w->n_maps++] = (mapping){map, size};
    const unsigned char *p = map;
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)p[i] << (8 * i);
    if (hlen > size - 8 || hlen > ((uint64_t)100 << 20))
        return cx_fail(CATTR_ERR_FORMAT, "'%s': header length %llu exceeds the file", path, (unsigned long long)hlen);
    cJSON *h = cJSON_ParseWithLength((const char *)p + 8, (size_t)hlen);
    if (!h || !cJSON_IsObject(h)) {
        cJSON_Delete(h);
        return cx_fail(CATTR_ERR_FORMAT, "'%s': the header is not a JSON object", path);
    }
    const unsigned char *data = p + 8 + hlen;
    size_t data_size = size - 8 - (size_t)hlen;
    cattr_status st = CATTR_OK;
    const cJSON *it;
    cJSON_ArrayForEach(it, h) {
        if (!strcmp(it->string, "__metadata__")) continue;
        const char *dt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "dtype"));
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(it, "shape");
        const cJSON *offs = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
        wentry e;
        memset(&e, 0, sizeof e);
        size_t es;
        if (!dt) { st = cx_fail(CATTR_ERR_FORMAT, "'%s': tensor '%s' has no dtype", path, it->string); break; }
        if (!strcmp(dt, "F32")) e.type = W_F32, es = 4;
        else if (!strcmp(dt, "F64")) e.type = W_F64, es = 8;
        else if (!strcmp(dt, "BF16")) e.type = W_BF16, es = 2;
        else if (!strcmp(dt, "F16")) e.type = W_F16, es = 2;
        else { st = cx_fail(CATTR_ERR_UNSUPPORTED, "'%s': tensor '%s' has dtype %s", path, it->string, dt); break; }
        int nd = cJSON_GetArraySize(shape);
        if (!cJSON_IsArray(shape) || nd > CATTR_MAX_DIMS || !cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2) {
            st = cx_fail(CATTR_ERR_FORMAT, "'%s': tensor '%s' has a bad shape or data_offsets", path, it->string);
            break;
        }
        uint64_t numel = 1;
        for (int d = 0; d < nd; d++) {
            const cJSON *dv = cJSON_GetArrayItem(shape, d);
            if (!cJSON_IsNumber(dv) || dv->valuedouble < 0 || dv->valuedouble > 9.0e15) { st = CATTR_ERR_FORMAT; break; }
            e.shape[d] = (int64_t)dv->valuedouble;
            if (e.shape[d] && numel > UINT64_MAX / (uint64_t)e.shape[d]) { st = CATTR_ERR_FORMAT; break; }
            numel *= (uint64_t)e.shape[d];
        }
        double b0 = cJSON_GetArrayItem(offs, 0)->valuedouble, b1 = cJSON_GetArrayItem(offs, 1)->valuedouble;
        if (st != CATTR_OK || b0 < 0 || b1 < b0 || b1 > (double)data_size || numel > SIZE_MAX / es ||
            (uint64_t)(b1 - b0) != numel * es) {
            st = cx_fail(CATTR_ERR_FORMAT, "'%s': tensor '%s' has inconsistent shape, dtype and data_offsets", path,
                         it->string);
            break;
        }
        e.ndim = nd;
        e.data = data + (size_t)b0;
        e.bytes = (size_t)(b1 - b0);
        e.name = cx_strdup(it->string);
        if (w->n == w->cap) {
            int cap = w->cap ? 2 * w->cap : 64;
            wentry *nw = realloc(w->w, (size_t)cap * sizeof *nw);
            if (!nw) { free(e.name); st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory"); break; }
            w->w = nw;
            w->cap = cap;
        }
        if (!e.name) { st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory"); break; }
        w->w[w->n++] = e;
    }
    cJSON_Delete(h);
    return st;
}

cattr_status cx_hf_weights_open(const char *dir, cx_hf_weights **out) {
    *out = NULL;
    cx_hf_weights *w = calloc(1, sizeof *w);
    if (!w) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    struct stat sb;
    cattr_status st = CATTR_OK;
    if (stat(path, &sb) == 0) {
        void *text = NULL;
        size_t size = 0;
        st = cx_read_file(path, &text, &size);
        cJSON *idx = st == CATTR_OK ? cJSON_ParseWithLength(text, size) : NULL;
        free(text);
        const cJSON *wm = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
        if (st == CATTR_OK && !cJSON_IsObject(wm)) st = cx_fail(CATTR_ERR_FORMAT, "'%s' has no weight_map", path);
        /* map each distinct shard once */
        const cJSON *it;
        char **seen = NULL;
        int n_seen = 0;
        cJSON_ArrayForEach(it, wm) {
            if (st != CATTR_OK) break;
            const char *f = cJSON_GetStringValue(it);
            if (!f || strchr(f, '/')) { st = cx_fail(CATTR_ERR_FORMAT, "'%s': bad shard name", path); break; }
            bool dup = false;
            for (int k = 0; k < n_seen && !dup; k++) dup = !strcmp(seen[k], f);
            if (dup) continue;
            char **ns = realloc(seen, (size_t)(n_seen + 1) * sizeof *ns);
            if (!ns) { st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory"); break; }
            seen = ns;
            seen[n_seen++] = (char *)f;
            char shard[4096];
            snprintf(shard, sizeof shard, "%s/%s", dir, f);
            st = map_shard(w, shard);
        }
        free(seen);
        cJSON_Delete(idx);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        st = map_shard(w, path);
    }
    if (st != CATTR_OK) {
        cx_hf_weights_free(w);
        return st;
    }
    *out = w;
    return CATTR_OK;
}

static const wentry *find(const cx_hf_weights *w, const char *name) {
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->w[i].name, name)) return &w->w[i];
    return NULL;
}

bool cx_hf_weights_has(const cx_hf_weights *w, const char *name) { return find(w, name) != NULL; }

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else { /* subnormal */
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400));
            bits = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | man << 13;
    } else {
        bits = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Drops the resident pages that lie wholly inside [p, p + n) of a read-only file mapping (they are re-read from the
 * file if touched again). */
static void cx_hf_release_range(const void *p, size_t n) {
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = ((uintptr_t)p + pg - 1) / pg * pg, b = ((uintptr_t)p + n) / pg * pg;
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

cattr_status cx_hf_weight(const cx_hf_weights *w, const char *name, cattr_dtype dtype, int exp_ndim,
                          const int64_t *exp_shape, cattr_tensor **out) {
    *out = NULL;
    const wentry *e = find(w, name);
    if (!e) return cx_fail(CATTR_ERR_FORMAT, "the checkpoint has no weight '%s'", name);
    char s1[128], s2[128];
    if (exp_ndim >= 0 && !cx_shape_eq(e->ndim, e->shape, exp_ndim, exp_shape))
        return cx_fail(CATTR_ERR_FORMAT, "weight '%s' has shape %s; the config implies %s", name,
                       cx_shape_str(e->ndim, e->shape, s1, sizeof s1), cx_shape_str(exp_ndim, exp_shape, s2, sizeof s2));
    cattr_tensor *t = cx_tensor_alloc(dtype, e->ndim, e->shape);
    if (!t) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory loading '%s'", name);
    int64_t n = t->numel;
    const unsigned char *p = e->data;
    float *f32 = dtype == CATTR_FLOAT32 ? t->data : NULL;
    double *f64 = dtype == CATTR_FLOAT64 ? t->data : NULL;
    /* one tight loop per source type (safetensors is little-endian; bytes are assembled explicitly) */
    switch (e->type) {
    case W_BF16:
#pragma omp parallel for if (n > (1 << 20)) schedule(static)
        for (int64_t i = 0; i < n; i++) {
            uint32_t b = ((uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8) << 16;
            float f;
            memcpy(&f, &b, 4);
            if (f32) f32[i] = f;
            else f64[i] = f;
        }
        break;
    case W_F32:
        for (int64_t i = 0; i < n; i++) {
            uint32_t b = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24;
            float f;
            memcpy(&f, &b, 4);
            if (f32) f32[i] = f;
            else f64[i] = f;
        }
        break;
    case W_F64:
        for (int64_t i = 0; i < n; i++) {
            uint64_t b = 0;
            for (int k = 0; k < 8; k++) b |= (uint64_t)p[8 * i + k] << (8 * k);
            double v;
            memcpy(&v, &b, 8);
            if (f32) f32[i] = (float)v;
            else f64[i] = v;
        }
        break;
    default:
        for (int64_t i = 0; i < n; i++) {
            double v = half_to_float((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
            if (f32) f32[i] = (float)v;
            else f64[i] = v;
        }
        break;
    }
    /* the mapped pages of this weight are no longer needed: release them so the BF16 file and the float32 copy do
     * not both stay resident */
    cx_hf_release_range(e->data, (size_t)n * (e->type == W_F32 ? 4 : e->type == W_F64 ? 8 : 2));
    *out = t;
    return CATTR_OK;
}

void cx_hf_weights_release_pages(cx_hf_weights *w) {
    for (int i = 0; i < w->n_maps; i++) madvise(w->maps[i].map, w->maps[i].size, MADV_DONTNEED);
}
