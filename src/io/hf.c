/* hf.c - Hugging Face checkpoint folders: config.json and mapped safetensors weights (see hf.h). */
#include "io/hf.h"

#include "io/fileutil.h"
#include "io/tensorio.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
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

/* Sizes are bounded so that every product the model builder forms (heads x head_dim, vocab x hidden, ...) fits an
 * int64 with room to spare; no released model comes near these. */
#define HF_MAX_SIZE ((int64_t)1 << 24)

/* A JSON number that is an integer in [lo, hi] (checked as a double before any conversion). */
static bool int_in(const cJSON *v, int64_t lo, int64_t hi, int64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= (double)lo && d <= (double)hi) || d != floor(d)) return false;
    *out = (int64_t)d;
    return true;
}

static cattr_status get_int(const cJSON *o, const char *k, const char *path, bool required, int64_t def, int64_t lo,
                            int64_t hi, int64_t *out) {
    const cJSON *v = key(o, k);
    if (!v) {
        if (required) return cx_fail(CATTR_ERR_FORMAT, "'%s': missing key '%s'", path, k);
        *out = def;
        return CATTR_OK;
    }
    if (!int_in(v, lo, hi, out))
        return cx_fail(CATTR_ERR_FORMAT, "'%s': key '%s' must be an integer from %lld to %lld", path, k, (long long)lo,
                       (long long)hi);
    return CATTR_OK;
}

/* A number; `positive`: finite and > 0 (what every scale and epsilon of the model's math needs). */
static cattr_status get_num(const cJSON *o, const char *k, const char *path, double def, bool positive, double *out) {
    const cJSON *v = key(o, k);
    if (!v) {
        *out = def;
        return CATTR_OK;
    }
    if (!cJSON_IsNumber(v)) return cx_fail(CATTR_ERR_FORMAT, "'%s': key '%s' must be a number", path, k);
    *out = v->valuedouble;
    if (positive && !(isfinite(*out) && *out > 0))
        return cx_fail(CATTR_ERR_FORMAT, "'%s': key '%s' is %g; it must be a finite number greater than 0", path, k,
                       *out);
    return CATTR_OK;
}

static bool get_bool(const cJSON *o, const char *k, bool def) {
    const cJSON *v = key(o, k);
    return v ? cJSON_IsTrue(v) : def;
}

/* A token id, or a list of them (Llama 3.1's eos_token_id): the first is kept. */
static cattr_status get_token(const cJSON *o, const char *k, const char *path, int64_t *out) {
    const cJSON *v = key(o, k);
    *out = -1;
    if (!v) return CATTR_OK;
    if (cJSON_IsArray(v)) v = cJSON_GetArrayItem(v, 0);
    if (v && !int_in(v, 0, INT32_MAX, out))
        return cx_fail(CATTR_ERR_FORMAT, "'%s': key '%s' must be a token id (or a list of them)", path, k);
    return CATTR_OK;
}

void cx_hf_rope_inv_freq(const cx_hf_config *cfg, double *inv) {
    int64_t d = cfg->head_dim;
    for (int64_t m = 0; m < d / 2; m++) {
        double f = pow(cfg->rope_theta, -2.0 * (double)m / (double)d);
        if (!strcmp(cfg->rope_type, "llama3")) {
            double F = cfg->rope_factor, lo = cfg->rope_low_freq_factor, hi = cfg->rope_high_freq_factor;
            double C = (double)cfg->rope_original_max_position_embeddings, lambda = 2.0 * M_PI / f;
            if (lambda < C / hi) {
                /* high frequencies unchanged */
            } else if (lambda > C / lo) {
                f = f / F;
            } else {
                double s = (C / lambda - lo) / (hi - lo);
                f = (1 - s) * f / F + s * f;
            }
        }
        inv[m] = f;
    }
}

cattr_status cx_hf_config_parse(const char *text, size_t size, const char *path, cx_hf_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cJSON *o = cJSON_ParseWithLength(text, size);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return cx_fail(CATTR_ERR_FORMAT, "'%s' is not a JSON object", path);
    }
    cattr_status st = CATTR_OK;
    const char *mt = cJSON_GetStringValue(key(o, "model_type"));
    if (!mt) st = cx_fail(CATTR_ERR_FORMAT, "'%s': missing key 'model_type'", path);
    else if (strcmp(mt, "qwen3") && strcmp(mt, "llama") && strcmp(mt, "qwen2") && strcmp(mt, "mistral"))
        st = cx_fail(CATTR_ERR_UNSUPPORTED, "'%s': model_type '%.64s' is not supported (qwen3, llama, qwen2, mistral)",
                     path, mt);
    else snprintf(cfg->model_type, sizeof cfg->model_type, "%s", mt);
    const int64_t M = HF_MAX_SIZE;
    if (st == CATTR_OK) st = get_int(o, "vocab_size", path, true, 0, 1, M, &cfg->vocab_size);
    if (st == CATTR_OK) st = get_int(o, "hidden_size", path, true, 0, 1, M, &cfg->hidden_size);
    if (st == CATTR_OK) st = get_int(o, "intermediate_size", path, true, 0, 1, M, &cfg->intermediate_size);
    if (st == CATTR_OK) st = get_int(o, "num_hidden_layers", path, true, 0, 1, 1 << 16, &cfg->num_hidden_layers);
    if (st == CATTR_OK) st = get_int(o, "num_attention_heads", path, true, 0, 1, 1 << 16, &cfg->num_attention_heads);
    if (st == CATTR_OK)
        st = get_int(o, "num_key_value_heads", path, false, cfg->num_attention_heads, 1, 1 << 16,
                     &cfg->num_key_value_heads);
    if (st == CATTR_OK)
        st = get_int(o, "head_dim", path, false, cfg->hidden_size / cfg->num_attention_heads, 0, 1 << 16,
                     &cfg->head_dim);
    if (st == CATTR_OK)
        st = get_int(o, "max_position_embeddings", path, false, 32768, 1, INT32_MAX, &cfg->max_position_embeddings);
    if (st == CATTR_OK) st = get_num(o, "rms_norm_eps", path, 1e-6, true, &cfg->rms_norm_eps);
    if (st == CATTR_OK) st = get_num(o, "rope_theta", path, 10000.0, true, &cfg->rope_theta);
    if (st == CATTR_OK) st = get_token(o, "bos_token_id", path, &cfg->bos_token_id);
    if (st == CATTR_OK) st = get_token(o, "eos_token_id", path, &cfg->eos_token_id);
    if (st == CATTR_OK) {
        cfg->tie_word_embeddings = get_bool(o, "tie_word_embeddings", false);
        cfg->attention_bias = get_bool(o, "attention_bias", false);
        cfg->mlp_bias = get_bool(o, "mlp_bias", false);
        bool qwen2 = !strcmp(mt, "qwen2"), qwen3 = !strcmp(mt, "qwen3"), llama = !strcmp(mt, "llama");
        cfg->qkv_bias = qwen2 || ((llama || qwen3) && cfg->attention_bias);
        cfg->o_bias = (llama || qwen3) && cfg->attention_bias;
        cfg->qk_norm = qwen3;
        if (!llama) cfg->mlp_bias = false;
        const cJSON *actv = key(o, "hidden_act");
        const char *act = cJSON_GetStringValue(actv);
        if (actv && (!act || strcmp(act, "silu")))
            st = cx_fail(CATTR_ERR_UNSUPPORTED, "'%s': hidden_act '%.64s' is not supported (silu)", path,
                         act ? act : "(not a string)");
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
            st = cx_fail(CATTR_ERR_UNSUPPORTED, "'%s': rope_scaling type '%.64s' is not supported (llama3)", path,
                         type ? type : "?");
        else {
            snprintf(cfg->rope_type, sizeof cfg->rope_type, "llama3");
            st = get_num(rs, "factor", path, 8.0, true, &cfg->rope_factor);
            if (st == CATTR_OK) st = get_num(rs, "low_freq_factor", path, 1.0, true, &cfg->rope_low_freq_factor);
            if (st == CATTR_OK) st = get_num(rs, "high_freq_factor", path, 4.0, true, &cfg->rope_high_freq_factor);
            if (st == CATTR_OK)
                st = get_int(rs, "original_max_position_embeddings", path, false, 8192, 1, INT32_MAX,
                             &cfg->rope_original_max_position_embeddings);
            if (st == CATTR_OK && !(cfg->rope_high_freq_factor > cfg->rope_low_freq_factor))
                st = cx_fail(CATTR_ERR_FORMAT, "'%s': rope_scaling high_freq_factor (%g) must be greater than "
                             "low_freq_factor (%g)", path, cfg->rope_high_freq_factor, cfg->rope_low_freq_factor);
        }
    }
    if (st == CATTR_OK && (cfg->head_dim < 2 || cfg->num_attention_heads % cfg->num_key_value_heads ||
                           cfg->head_dim % 2))
        st = cx_fail(CATTR_ERR_FORMAT, "'%s': inconsistent sizes (heads %lld, kv heads %lld, head_dim %lld: the heads "
                     "must be a multiple of the kv heads and head_dim even)", path,
                     (long long)cfg->num_attention_heads, (long long)cfg->num_key_value_heads,
                     (long long)cfg->head_dim);
    if (st == CATTR_OK) { /* the frequencies the values give must be usable: finite and above 0 */
        double *inv = malloc((size_t)(cfg->head_dim / 2) * sizeof *inv);
        if (!inv) st = cx_fail(CATTR_ERR_NO_MEMORY, "'%s': out of memory", path);
        else {
            cx_hf_rope_inv_freq(cfg, inv);
            for (int64_t m = 0; m < cfg->head_dim / 2 && st == CATTR_OK; m++)
                if (!(isfinite(inv[m]) && inv[m] > 0))
                    st = cx_fail(CATTR_ERR_FORMAT, "'%s': rope_theta %g%s gives the rotary frequency %g for dim %lld "
                                 "of %lld: it must be finite and above 0", path, cfg->rope_theta,
                                 cfg->rope_type[0] ? " with this rope_scaling" : "", inv[m], (long long)(2 * m),
                                 (long long)cfg->head_dim);
            free(inv);
        }
    }
    cJSON_Delete(o);
    return st;
}

cattr_status cx_hf_config_load(const char *dir, cx_hf_config *cfg) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    void *text = NULL;
    size_t size = 0;
    memset(cfg, 0, sizeof *cfg);
    CX_CHECK(cx_read_file(path, &text, &size));
    cattr_status st = cx_hf_config_parse(text, size, path, cfg);
    free(text);
    return st;
}

/* ---- mapped safetensors --------------------------------------------------------------------------------------- */

typedef enum { W_F32, W_F64, W_BF16, W_F16, W_OTHER } wtype;

typedef struct {
    char *name;
    wtype type;
    int ndim;
    int64_t shape[CATTR_MAX_DIMS];
    const unsigned char *data; /* into a mapping */
    size_t bytes;
    int shard; /* index of its mapping */
} wentry;

typedef struct {
    void *map;
    size_t size;
    int fd; /* kept open for the weights mapped on their own (cx_hf_weight_stored) */
} mapping;

struct cx_hf_weights {
    mapping *maps;
    int n_maps;
    wentry *w;
    int n, cap;
};

void cx_hf_weights_free(cx_hf_weights *w) {
    if (!w) return;
    for (int i = 0; i < w->n_maps; i++) {
        if (w->maps[i].map) munmap(w->maps[i].map, w->maps[i].size);
        if (w->maps[i].fd >= 0) close(w->maps[i].fd);
    }
    for (int i = 0; i < w->n; i++) free(w->w[i].name);
    free(w->maps);
    free(w->w);
    free(w);
}

static const wentry *find(const cx_hf_weights *w, const char *name) {
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->w[i].name, name)) return &w->w[i];
    return NULL;
}

/* Maps one shard and adds its tensors; the header is checked by the safetensors parser (sizes, offsets, overlaps,
 * bytes outside every tensor). A name already seen in another shard is an error. */
static cattr_status map_shard(cx_hf_weights *w, const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cx_fail(CATTR_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 8) {
        close(fd);
        return cx_fail(CATTR_ERR_FORMAT, "'%s' is too short to be a safetensors file", path);
    }
    size_t size = (size_t)sb.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        int e = errno;
        close(fd);
        return cx_fail(CATTR_ERR_IO, "cannot map '%s': %s", path, strerror(e));
    }
    mapping *nm = realloc(w->maps, (size_t)(w->n_maps + 1) * sizeof *nm);
    if (!nm) {
        munmap(map, size);
        close(fd);
        return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    w->maps = nm;
    w->maps[w->n_maps++] = (mapping){map, size, fd};
    cx_st_header h;
    CX_CHECK(cx_st_header_parse(map, size, path, &h));
    cattr_status st = CATTR_OK;
    if (w->n + h.n > w->cap) {
        int cap = w->n + h.n + 64;
        wentry *nw = realloc(w->w, (size_t)cap * sizeof *nw);
        if (!nw) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        else {
            w->w = nw;
            w->cap = cap;
        }
    }
    for (int i = 0; i < h.n && st == CATTR_OK; i++) {
        cx_st_entry *se = &h.e[i];
        if (find(w, se->name)) {
            st = cx_fail(CATTR_ERR_FORMAT, "'%s': weight '%s' is also in another shard", path, se->name);
            break;
        }
        wentry e;
        memset(&e, 0, sizeof e);
        switch (se->elem) {
        case CX_ELEM_F32: e.type = W_F32; break;
        case CX_ELEM_F64: e.type = W_F64; break;
        case CX_ELEM_BF16: e.type = W_BF16; break;
        case CX_ELEM_F16: e.type = W_F16; break;
        default: e.type = W_OTHER; break; /* an error only if the model reads it */
        }
        e.ndim = se->ndim;
        memcpy(e.shape, se->shape, sizeof e.shape);
        e.data = (const unsigned char *)map + h.data_start + se->begin;
        e.bytes = (size_t)(se->end - se->begin);
        e.shard = w->n_maps - 1;
        e.name = se->name;
        se->name = NULL; /* owned by the entry now */
        w->w[w->n++] = e;
    }
    cx_st_header_free(&h);
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

bool cx_hf_weights_has(const cx_hf_weights *w, const char *name) { return find(w, name) != NULL; }

/* Drops the resident pages that lie wholly inside [p, p + n) of a read-only file mapping (they are re-read from the
 * file if touched again). */
static void cx_hf_release_range(const void *p, size_t n) {
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = ((uintptr_t)p + pg - 1) / pg * pg, b = ((uintptr_t)p + n) / pg * pg;
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

/* The entry of weight `name`, a float tensor of the expected shape (when exp_ndim >= 0). */
static cattr_status lookup(const cx_hf_weights *w, const char *name, int exp_ndim, const int64_t *exp_shape,
                           const wentry **out) {
    const wentry *e = *out = find(w, name);
    if (!e) return cx_fail(CATTR_ERR_FORMAT, "the checkpoint has no weight '%s'", name);
    if (e->type == W_OTHER)
        return cx_fail(CATTR_ERR_UNSUPPORTED, "weight '%s' is not a float tensor (BF16, F16, F32 or F64)", name);
    char s1[128], s2[128];
    if (exp_ndim >= 0 && !cx_shape_eq(e->ndim, e->shape, exp_ndim, exp_shape))
        return cx_fail(CATTR_ERR_FORMAT, "weight '%s' has shape %s; the config implies %s", name,
                       cx_shape_str(e->ndim, e->shape, s1, sizeof s1), cx_shape_str(exp_ndim, exp_shape, s2, sizeof s2));
    return CATTR_OK;
}

cattr_status cx_hf_weight(const cx_hf_weights *w, const char *name, cattr_dtype dtype, int exp_ndim,
                          const int64_t *exp_shape, cattr_tensor **out) {
    *out = NULL;
    const wentry *e = NULL;
    CX_CHECK(lookup(w, name, exp_ndim, exp_shape, &e));
    cattr_tensor *t = cx_tensor_alloc(dtype, e->ndim, e->shape);
    if (!t) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory loading '%s'", name);
    int64_t n = t->numel;
    const unsigned char *p = e->data;
    float *f32 = dtype == CATTR_FLOAT32 ? t->data : NULL;
    double *f64 = dtype == CATTR_FLOAT64 ? t->data : NULL;
    /* one tight loop per source type (safetensors is little-endian; bytes are assembled explicitly) */
    /* `bad` gathers, without a branch per element, whether any converted value is NaN or infinite: a checkpoint
     * with such a weight gives NaN everywhere, and is refused here, naming the weight */
    int bad = 0;
    switch (e->type) {
    case W_BF16:
#pragma omp parallel for if (n > (1 << 20)) schedule(static) reduction(| : bad)
        for (int64_t i = 0; i < n; i++) {
            uint32_t b = ((uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8) << 16;
            bad |= (b & 0x7f800000u) == 0x7f800000u;
            float f;
            memcpy(&f, &b, 4);
            if (f32) f32[i] = f;
            else f64[i] = f;
        }
        break;
    case W_F32:
        for (int64_t i = 0; i < n; i++) {
            uint32_t b = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24;
            bad |= (b & 0x7f800000u) == 0x7f800000u;
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
            if (f32) { /* also a double beyond float's range: the float is what must be finite */
                f32[i] = (float)v;
                bad |= !isfinite(f32[i]);
            } else {
                f64[i] = v;
                bad |= !isfinite(v);
            }
        }
        break;
    default:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
            bad |= (h & 0x7c00u) == 0x7c00u;
            double v = cx_f16_to_f32(h);
            if (f32) f32[i] = (float)v;
            else f64[i] = v;
        }
        break;
    }
    if (bad) {
        int64_t at = 0;
        while (at < n && isfinite(f32 ? (double)f32[at] : f64[at])) at++;
        bool nan = at < n && isnan(f32 ? (double)f32[at] : f64[at]);
        cattr_tensor_free(t);
        return cx_fail(CATTR_ERR_FORMAT, "weight '%s' holds a non-finite value (%s at element %lld): the checkpoint "
                       "is corrupt", name, nan ? "nan" : "inf", (long long)at);
    }
    /* the mapped pages of this weight are no longer needed: release them so the BF16 file and the float32 copy do
     * not both stay resident */
    cx_hf_release_range(e->data, (size_t)n * (e->type == W_F32 ? 4 : e->type == W_F64 ? 8 : 2));
    *out = t;
    return CATTR_OK;
}

cattr_status cx_hf_weight_stored(const cx_hf_weights *w, const char *name, int exp_ndim, const int64_t *exp_shape,
                                 cattr_tensor **out) {
    *out = NULL;
    const wentry *e = NULL;
    CX_CHECK(lookup(w, name, exp_ndim, exp_shape, &e));
    int64_t n = cx_numel(e->ndim, e->shape);
    if ((e->type != W_BF16 && e->type != W_F16) || n == 0) return cx_hf_weight(w, name, CATTR_FLOAT32, exp_ndim, exp_shape, out);
    bool bf = e->type == W_BF16;
    /* any NaN or infinity (an all-ones exponent) refuses the checkpoint, naming the weight, as cx_hf_weight does */
    const unsigned char *p = e->data;
    uint16_t em = bf ? 0x7f80u : 0x7c00u;
    int bad = 0;
#pragma omp parallel for if (n > (1 << 20)) schedule(static) reduction(| : bad)
    for (int64_t i = 0; i < n; i++) bad |= (((uint16_t)(p[2 * i] | p[2 * i + 1] << 8)) & em) == em;
    if (bad) {
        int64_t at = 0;
        while (at < n && (((uint16_t)(p[2 * at] | p[2 * at + 1] << 8)) & em) != em) at++;
        uint16_t h = (uint16_t)(p[2 * at] | p[2 * at + 1] << 8);
        bool nan = (h & (bf ? 0x7fu : 0x3ffu)) != 0;
        return cx_fail(CATTR_ERR_FORMAT, "weight '%s' holds a non-finite value (%s at element %lld): the checkpoint "
                       "is corrupt", name, nan ? "nan" : "inf", (long long)at);
    }
    cattr_tensor *t = calloc(1, sizeof *t);
    if (!t) return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory loading '%s'", name);
    t->dtype = bf ? CX_BFLOAT16 : CX_FLOAT16;
    t->ndim = e->ndim;
    memcpy(t->shape, e->shape, sizeof t->shape);
    t->numel = n;
    const mapping *mp = &w->maps[e->shard];
    size_t off = (size_t)(e->data - (const unsigned char *)mp->map), pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t aoff = off / pg * pg, len = off - aoff + (size_t)n * 2;
    void *m = off % 2 ? MAP_FAILED : mmap(NULL, len, PROT_READ, MAP_PRIVATE, mp->fd, (off_t)aoff);
    if (m != MAP_FAILED) { /* a mapping of its own: the tensor outlives the checkpoint's handle */
        t->map = m;
        t->map_size = len;
        t->data = (char *)m + (off - aoff);
    } else { /* an odd offset (no aligned element), or no mapping: a copy */
        t->data = malloc((size_t)n * 2);
        if (!t->data) {
            free(t);
            return cx_fail(CATTR_ERR_NO_MEMORY, "out of memory loading '%s'", name);
        }
        memcpy(t->data, e->data, (size_t)n * 2);
    }
    /* the pages read through the checkpoint's own mapping (the scan above) are not needed there */
    cx_hf_release_range(e->data, (size_t)n * 2);
    *out = t;
    return CATTR_OK;
}

int64_t cx_hf_weights_resident_bytes(const cx_hf_weights *w) {
    int64_t b = 0;
    for (int i = 0; i < w->n; i++) {
        const wentry *e = &w->w[i];
        if (e->type == W_OTHER) continue;
        bool stored = e->ndim == 2 && (e->type == W_BF16 || e->type == W_F16);
        b += stored ? (int64_t)e->bytes : cx_numel(e->ndim, e->shape) * 4;
    }
    return b;
}

void cx_hf_weights_release_pages(cx_hf_weights *w) {
    for (int i = 0; i < w->n_maps; i++) madvise(w->maps[i].map, w->maps[i].size, MADV_DONTNEED);
}
