/* replay_llm.c - `cattr replay` for the language-model goldens (shared/golden/llm/README.md): forward checks of every
 * prompt (hidden states, last-position logits, logsumexp, target log-probabilities, tokenization) and token
 * attributions: LayerIntegratedGradients and LayerGradientXActivation on the embedding output (teacher forcing),
 * FeatureAblation and ShapleyValueSampling over prompt tokens. Other cases are reported as SKIP. */
#define _POSIX_C_SOURCE 200809L
#include "replay.h"

#include "attr/internal.h"
#include "io/fileutil.h"
#include "io/tokenizer.h"
#include "models/decoder.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    char dir[4096];
    cattr_model *ids_all; /* ids -> logits at every position (forward checks) */
    cattr_llm *llm;       /* attribution */
    cx_hf_config cfg;
    cx_tokenizer *tok;
} llm_model;

typedef struct {
    cattr_dtype dtype;
    const char *device;
    const char *index; /* the index file (cases.json), for the messages */
    replay_opts *o;
    int *passed, *failed, *skipped;
    llm_model models[4];
    int n_models;
} llm_ctx;

static void models_free(llm_ctx *x) {
    for (int i = 0; i < x->n_models; i++) {
        cattr_model_free(x->models[i].ids_all);
        cattr_llm_free(x->models[i].llm);
        cx_tokenizer_free(x->models[i].tok);
    }
    x->n_models = 0;
}

static cattr_status get_model(llm_ctx *x, const char *dir, llm_model **out) {
    for (int i = 0; i < x->n_models; i++)
        if (!strcmp(x->models[i].dir, dir)) {
            *out = &x->models[i];
            return CATTR_OK;
        }
    if (x->n_models == 4) models_free(x);
    llm_model *m = &x->models[x->n_models];
    memset(m, 0, sizeof *m);
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    cx_decoder_opts a = {.ids_input = true, .all_logits = true, .pos_input = false};
    CX_CHECK(cx_decoder_load(dir, &a, &m->ids_all, &m->cfg));
    cattr_status st = cattr_model_set_device(m->ids_all, x->device);
    if (st == CATTR_OK) st = cattr_llm_load(dir, &m->llm);
    if (st == CATTR_OK) st = cattr_llm_set_device(m->llm, x->device);
    if (st != CATTR_OK) {
        cattr_llm_free(m->llm);
        m->llm = NULL;
        cattr_model_free(m->ids_all);
        return st;
    }
    char tp[4200];
    snprintf(tp, sizeof tp, "%s/tokenizer.json", dir);
    struct stat sb;
    if (stat(tp, &sb) == 0) cx_tokenizer_load(dir, &m->tok); /* optional: arch models have none */
    x->n_models++;
    *out = m;
    return CATTR_OK;
}

static const cattr_tensor *tensor(const cattr_tensor_set *s, const char *name) { return cattr_tensor_set_get(s, name); }

/* max |a - e| over n values (a in double) against tensor e */
static double max_err(const double *a, const cattr_tensor *e, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(a[i] - cx_tensor_get(e, i));
        if (!(d <= m)) m = isnan(d) ? INFINITY : d;
    }
    return m;
}

static double atol_of(const cJSON *tol) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(tol, "suggested_atol");
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static int64_t *json_ids(const cJSON *arr, int64_t *n) {
    *n = cJSON_GetArraySize(arr);
    int64_t *ids = malloc((size_t)(*n + 1) * sizeof *ids);
    for (int64_t i = 0; ids && i < *n; i++) {
        const cJSON *v = cJSON_GetArrayItem(arr, (int)i);
        ids[i] = cJSON_IsNumber(v) && fabs(v->valuedouble) < 9.2e18 ? (int64_t)v->valuedouble : -1;
    }
    return ids;
}

/* ---- what a case may hold: counts within the C API's limits, ids within the vocabulary ------------------------- */

/* Integer `field` of record `id` in index x->index from JSON value v, from lo to hi; false with `why` naming the index
 * file, the record, the field and the value otherwise. */
static bool rec_int(const llm_ctx *x, const char *id, const char *field, const cJSON *v, long long lo, long long hi,
                    long long *out, char *why, size_t wn) {
    if (cJSON_IsNumber(v) && v->valuedouble >= (double)lo && v->valuedouble <= (double)hi &&
        v->valuedouble == floor(v->valuedouble)) {
        *out = (long long)v->valuedouble;
        return true;
    }
    char *txt = v ? cJSON_PrintUnformatted(v) : NULL;
    snprintf(why, wn, "%s: %s: %s must be an integer from %lld to %lld (got %s)", x->index, id ? id : "?", field, lo, hi,
             txt ? txt : "nothing");
    cJSON_free(txt);
    return false;
}

/* Token ids `field` of record `id`: a list of at least min_n integers in the vocabulary of m (*ids malloc'ed). */
static bool rec_ids(const llm_ctx *x, const llm_model *m, const char *id, const char *field, const cJSON *arr,
                    int64_t min_n, int64_t **ids, int64_t *n, char *why, size_t wn) {
    *ids = NULL;
    *n = 0;
    int64_t cnt = cJSON_GetArraySize(arr), V = m->cfg.vocab_size;
    if (!cJSON_IsArray(arr) || cnt < min_n || cnt > m->cfg.max_position_embeddings) {
        snprintf(why, wn, "%s: %s: %s must be a list of from %lld to %lld token ids (got %lld)", x->index, id ? id : "?",
                 field, (long long)min_n, (long long)m->cfg.max_position_embeddings, (long long)cnt);
        return false;
    }
    int64_t *v = malloc((size_t)(cnt + 1) * sizeof *v);
    if (!v) {
        snprintf(why, wn, "out of memory");
        return false;
    }
    for (int64_t i = 0; i < cnt; i++) {
        char f[96];
        long long t = 0;
        snprintf(f, sizeof f, "%s[%lld] (a token id)", field, (long long)i);
        if (!rec_int(x, id, f, cJSON_GetArrayItem(arr, (int)i), 0, V - 1, &t, why, wn)) {
            free(v);
            return false;
        }
        v[i] = t;
    }
    *ids = v;
    *n = cnt;
    return true;
}

/* ---- forward checks ------------------------------------------------------------------------------------------- */

static void check_prompt(llm_ctx *x, const cJSON *p, const char *base, const char *model_dir) {
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "id"));
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", base, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "tensor_file")));
    cattr_tensor_set *set = NULL;
    llm_model *m = NULL;
    int64_t T = 0, n = 0, *ids = NULL, *tg = NULL;
    cattr_tensor *out = NULL, *hid[4] = {0};
    double worst = 0, *buf = NULL;
    char what[256] = "";
    bool fail = false;
    cattr_status st = get_model(x, model_dir, &m);
    if (st == CATTR_OK) st = cattr_tensor_set_load(path, &set);
    if (st != CATTR_OK) {
        printf("FAIL forward:%s load err=%s allowed=0\n", id, cattr_last_error());
        (*x->failed)++;
        return;
    }
    char why[1024];
    bool data_ok = rec_ids(x, m, id, "input_ids", cJSON_GetObjectItemCaseSensitive(p, "input_ids"), 1, &ids, &T, why,
                           sizeof why) &&
                   rec_ids(x, m, id, "target_ids", cJSON_GetObjectItemCaseSensitive(p, "target_ids"), 0, &tg, &n, why,
                           sizeof why);
    if (data_ok && T + n > m->cfg.max_position_embeddings) {
        snprintf(why, sizeof why, "%s: %s: input_ids (%lld) and target_ids (%lld) exceed the model's context of %lld",
                 x->index, id ? id : "?", (long long)T, (long long)n, (long long)m->cfg.max_position_embeddings);
        data_ok = false;
    }
    if (!data_ok) {
        printf("FAIL forward:%s case err=data allowed=0 (%s)\n", id, why);
        (*x->failed)++;
        free(ids);
        free(tg);
        cattr_tensor_set_free(set);
        return;
    }
    const cJSON *tol = cJSON_GetObjectItemCaseSensitive(p, "tolerance");
    /* tokenization, where the prompt has text and the model a tokenizer */
    const char *text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "text"));
    const char *ttext = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "target_text"));
    if (text && m->tok) {
        for (int k = 0; k < 2 && !fail; k++) {
            int64_t *got = NULL, gn = 0;
            const char *s = k ? ttext : text;
            if (!s) continue;
            st = cx_tokenizer_encode(m->tok, s, strlen(s), false, &got, &gn);
            if (st != CATTR_OK || gn != (k ? n : T) || memcmp(got, k ? tg : ids, (size_t)gn * sizeof *got)) {
                snprintf(what, sizeof what, "%s err=ids allowed=0", k ? "target_ids" : "input_ids");
                fail = true;
            }
            free(got);
        }
    }
    /* one pass over prompt + target[:-1]: hidden states of the prompt rows, logits at every position */
    int64_t L = T + (n > 0 ? n - 1 : 0);
    int64_t *seq = malloc((size_t)(L + 1) * sizeof *seq);
    memcpy(seq, ids, (size_t)T * sizeof *seq);
    for (int64_t k = 0; k + 1 < n; k++) seq[T + k] = tg[k];
    const char *hn[4] = {"hidden.embed", "hidden.layer0", "hidden.layer1", "hidden.final_norm"};
    if (!fail) {
        cx_consts *c = NULL;
        int outs[6], no = 0;
        outs[no++] = cx_model_output(m->ids_all);
        const cJSON *hs;
        cJSON_ArrayForEach(hs, cJSON_GetObjectItemCaseSensitive(p, "hidden_states")) {
            const char *full = hs->valuestring, *dot = strchr(full, '.');
            int v = dot ? cg_find_value(m->ids_all->g, dot + 1) : -1;
            if (v >= 0 && no < 6) outs[no++] = v;
        }
        cx_arg in = {.nd = 2, .sh = {1, L}, .dt = CATTR_INT64, .host = seq};
        cx_backend *be = NULL;
        st = cx_model_backend(m->ids_all, &be);
        if (st == CATTR_OK) st = cx_consts_new(be, x->dtype, &c);
        cx_job j = {.g = m->ids_all->g, .consts = c, .n_in = 1, .in = &in, .n_out = no, .outs = outs};
        cattr_tensor *res[6] = {0};
        void *hp[6];
        for (int i = 0; i < no && st == CATTR_OK; i++) {
            cx_view vw;
            st = cx_run_view(&j, outs[i], &vw);
            res[i] = st == CATTR_OK ? cx_tensor_alloc(vw.dtype, vw.ndim, vw.shape) : NULL;
            hp[i] = res[i] ? res[i]->data : NULL;
        }
        j.out_host = hp;
        if (st == CATTR_OK) st = cx_run(&j);
        if (st != CATTR_OK) {
            snprintf(what, sizeof what, "run err=%s allowed=0", cattr_last_error());
            fail = true;
        } else {
            out = res[0];
            int64_t V = out->shape[2], H = m->cfg.hidden_size;
            int64_t nb = V > L ? V : L;
            if (T * H > nb) nb = T * H; /* the prompt rows' hidden states */
            buf = malloc((size_t)(nb + 1) * sizeof *buf);
            /* hidden states of the prompt rows */
            int hi = 1;
            cJSON_ArrayForEach(hs, cJSON_GetObjectItemCaseSensitive(p, "hidden_states")) {
                const cattr_tensor *e = tensor(set, hs->valuestring);
                const cJSON *ht = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tol, "hidden_states"), hs->valuestring);
                if (!e || hi >= no) continue;
                for (int64_t k = 0; k < T * H; k++) buf[k] = cx_tensor_get(res[hi], k);
                double err = max_err(buf, e, T * H), al = atol_of(ht), r = al > 0 ? err / al : INFINITY;
                if (r > worst) worst = r;
                if (!(err <= al) && !fail) {
                    snprintf(what, sizeof what, "%s err=%.3e allowed=%.3e", hs->valuestring, err, al);
                    fail = true;
                }
                hi++;
            }
            /* last prompt position's logits, logsumexp over every prompt position, target log-probabilities */
            char tn[256];
            snprintf(tn, sizeof tn, "%s.logits_last", id);
            const cattr_tensor *ll = tensor(set, tn);
            if (ll) {
                for (int64_t v = 0; v < V; v++) buf[v] = cx_tensor_get(out, (T - 1) * V + v);
                double err = max_err(buf, ll, V), al = atol_of(cJSON_GetObjectItemCaseSensitive(tol, "logits"));
                double r = al > 0 ? err / al : INFINITY;
                if (r > worst) worst = r;
                if (!(err <= al) && !fail) {
                    snprintf(what, sizeof what, "logits_last err=%.3e allowed=%.3e", err, al);
                    fail = true;
                }
            }
            double *lse = malloc((size_t)(L + 1) * sizeof *lse);
            for (int64_t t = 0; lse && t < L; t++) {
                double mx = -INFINITY, s = 0;
                for (int64_t v = 0; v < V; v++) mx = fmax(mx, cx_tensor_get(out, t * V + v));
                for (int64_t v = 0; v < V; v++) s += exp(cx_tensor_get(out, t * V + v) - mx);
                lse[t] = mx + log(s);
            }
            snprintf(tn, sizeof tn, "%s.logsumexp_all", id);
            const cattr_tensor *le = tensor(set, tn);
            if (le && lse) {
                double err = max_err(lse, le, T), al = atol_of(cJSON_GetObjectItemCaseSensitive(tol, "logsumexp"));
                double r = al > 0 ? err / al : INFINITY;
                if (r > worst) worst = r;
                if (!(err <= al) && !fail) {
                    snprintf(what, sizeof what, "logsumexp_all err=%.3e allowed=%.3e", err, al);
                    fail = true;
                }
            }
            snprintf(tn, sizeof tn, "%s.target_logprobs", id);
            const cattr_tensor *te = tensor(set, tn);
            if (te && lse) {
                double f[16];
                for (int64_t k = 0; k < n && k < 16; k++) f[k] = cx_tensor_get(out, (T - 1 + k) * V + tg[k]) - lse[T - 1 + k];
                double err = max_err(f, te, n < 16 ? n : 16);
                double al = atol_of(cJSON_GetObjectItemCaseSensitive(tol, "target_logprobs"));
                double r = al > 0 ? err / al : INFINITY;
                if (r > worst) worst = r;
                if (!(err <= al) && !fail) {
                    snprintf(what, sizeof what, "target_logprobs err=%.3e allowed=%.3e", err, al);
                    fail = true;
                }
            }
            free(lse);
        }
        for (int i = 1; i < 6; i++) cattr_tensor_free(res[i]);
        cx_consts_free(c);
    }
    if (fail) {
        printf("FAIL forward:%s %s\n", id, what);
        (*x->failed)++;
    } else {
        printf("PASS forward:%s %.3e\n", id, worst);
        (*x->passed)++;
    }
    (void)hn;
    free(seq);
    free(buf);
    free(ids);
    free(tg);
    cattr_tensor_free(out);
    for (int i = 0; i < 4; i++) cattr_tensor_free(hid[i]);
    cattr_tensor_set_free(set);
}

/* ---- attribution cases ---------------------------------------------------------------------------------------- */

/* The case's parameters for cattr_llm_attribute; false with `why` for a count, an index or a name out of its range. */
static bool case_params(llm_ctx *x, const llm_model *m, const cJSON *cs, const char *id, cattr_method method,
                        cattr_attr_params *p, cattr_llm_call *c, int64_t **perms, int64_t T, char *why, size_t wn) {
    *p = cattr_attr_default_params(method);
    p->dtype = x->dtype;
    *perms = NULL;
    long long k = 0;
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(cs, "args"), *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(args, "n_steps")) && !cJSON_IsNull(v)) {
        if (!rec_int(x, id, "args.n_steps", v, 1, CX_MAX_STEPS, &k, why, wn)) return false;
        p->n_steps = (int)k;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(args, "method")) && cJSON_IsString(v)) {
        int q = cattr_quadrature_from_name(v->valuestring);
        if (q < 0) {
            snprintf(why, wn, "%s: %s: args.method (the quadrature) must be one of riemann_left, riemann_right, "
                     "riemann_middle, riemann_trapezoid or gausslegendre (got '%s')", x->index, id ? id : "?",
                     v->valuestring);
            return false;
        }
        p->quadrature = (cattr_quadrature)q;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(args, "internal_batch_size")) && !cJSON_IsNull(v)) {
        if (!rec_int(x, id, "args.internal_batch_size", v, 1, CX_MAX_INTERNAL_BATCH, &k, why, wn)) return false;
        p->internal_batch_size = (int)k;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(args, "n_samples")) && !cJSON_IsNull(v)) {
        if (!rec_int(x, id, "args.n_samples", v, 1, CX_MAX_SAMPLES, &k, why, wn)) return false;
        p->n_samples = (int)k;
    }
    const cJSON *bl = cJSON_GetObjectItemCaseSensitive(cs, "baseline");
    const char *bk = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(bl, "kind"));
    if (bk && !strcmp(bk, "token")) {
        if (!rec_int(x, id, "baseline.token_id", cJSON_GetObjectItemCaseSensitive(bl, "token_id"), 0,
                     m->cfg.vocab_size - 1, &k, why, wn))
            return false;
        c->baseline_token = (int64_t)k;
    }
    const cJSON *pm = cJSON_GetObjectItemCaseSensitive(cs, "permutations");
    if (cJSON_IsArray(pm)) { /* the recorded orders of torch's generator: each an order of the T prompt positions */
        int S = cJSON_GetArraySize(pm);
        if (S < 1 || S > CX_MAX_SAMPLES) {
            snprintf(why, wn, "%s: %s: permutations must hold from 1 to %d orders (got %d)", x->index, id ? id : "?",
                     CX_MAX_SAMPLES, S);
            return false;
        }
        *perms = malloc((size_t)((int64_t)S * T + 1) * sizeof **perms);
        if (!*perms) {
            snprintf(why, wn, "out of memory");
            return false;
        }
        for (int s = 0; s < S; s++) {
            const cJSON *row = cJSON_GetArrayItem(pm, s);
            if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != T) {
                snprintf(why, wn, "%s: %s: permutations[%d] must be an order of the %lld prompt positions", x->index,
                         id ? id : "?", s, (long long)T);
                return false;
            }
            for (int64_t i = 0; i < T; i++) {
                char f[96];
                snprintf(f, sizeof f, "permutations[%d][%lld]", s, (long long)i);
                if (!rec_int(x, id, f, cJSON_GetArrayItem(row, (int)i), 0, T - 1, &k, why, wn)) return false;
                (*perms)[s * T + i] = (int64_t)k;
            }
        }
        c->permutations = *perms;
        p->n_samples = S;
    }
    return true;
}

static void run_case(llm_ctx *x, const cJSON *cs, const cJSON *prompt, const char *base, const char *model_dir) {
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cs, "id"));
    const char *method = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cs, "method"));
    bool ig = method && !strcmp(method, "LayerIntegratedGradients");
    bool gxa = method && !strcmp(method, "LayerGradientXActivation");
    const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(cs, "input");
    bool fa = method && !strcmp(method, "FeatureAblation");
    bool svs = method && !strcmp(method, "ShapleyValueSampling");
    bool lime = method && !strcmp(method, "Lime"), ks = method && !strcmp(method, "KernelShap");
    if (!ig && !gxa && !fa && !svs && !lime && !ks) {
        printf("SKIP %s LLM %s not implemented yet\n", id, method ? method : "?");
        (*x->skipped)++;
        return;
    }
    llm_model *m = NULL;
    cattr_tensor_set *set = NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", base, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cs, "tensor_file")));
    cattr_status st = get_model(x, model_dir, &m);
    if (st == CATTR_OK) st = cattr_tensor_set_load(path, &set);
    int64_t T = 0, n = 0;
    const cJSON *idsj = cJSON_GetObjectItemCaseSensitive(cs, "input_ids");
    if (!idsj) idsj = cJSON_GetObjectItemCaseSensitive(prompt, "input_ids");
    int64_t *ids = NULL, *tg = NULL;
    char why[1024] = "";
    bool data_ok = st != CATTR_OK || tpl ||
                   rec_ids(x, m, id, "input_ids", idsj, 1, &ids, &T, why, sizeof why);
    if (st == CATTR_OK && data_ok)
        data_ok = rec_ids(x, m, id, "target_ids", cJSON_GetObjectItemCaseSensitive(cs, "target_ids"), 1, &tg, &n, why,
                          sizeof why);
    if (st == CATTR_OK && data_ok && T + n > m->cfg.max_position_embeddings) {
        snprintf(why, sizeof why, "%s: %s: input_ids (%lld) and target_ids (%lld) exceed the model's context of %lld",
                 x->index, id ? id : "?", (long long)T, (long long)n, (long long)m->cfg.max_position_embeddings);
        data_ok = false;
    }
    if (st == CATTR_OK && tpl) { /* a text template: at most 16 slots, strings */
        const cJSON *it;
        const cJSON *tv = cJSON_GetObjectItemCaseSensitive(tpl, "values"), *tb = cJSON_GetObjectItemCaseSensitive(tpl, "baselines_used");
        if (data_ok && (cJSON_GetArraySize(tv) < 1 || cJSON_GetArraySize(tv) > 16 || cJSON_GetArraySize(tb) > 16)) {
            snprintf(why, sizeof why, "%s: %s: input.values must hold from 1 to 16 slot values, and "
                     "input.baselines_used at most 16 (got %d and %d)", x->index, id ? id : "?",
                     cJSON_GetArraySize(tv), cJSON_GetArraySize(tb));
            data_ok = false;
        }
        cJSON_ArrayForEach(it, tv) if (data_ok && !cJSON_IsString(it)) {
            snprintf(why, sizeof why, "%s: %s: input.values holds a value that is not a string", x->index, id ? id : "?");
            data_ok = false;
        }
        cJSON_ArrayForEach(it, tb) if (data_ok && !cJSON_IsString(it) && !cJSON_IsNull(it)) {
            snprintf(why, sizeof why, "%s: %s: input.baselines_used holds a value that is not a string", x->index,
                     id ? id : "?");
            data_ok = false;
        }
    }
    if (!data_ok) {
        printf("FAIL %s case err=data allowed=0 (%s)\n", id, why);
        (*x->failed)++;
        free(ids);
        free(tg);
        cattr_tensor_set_free(set);
        return;
    }
    double *token_attr = calloc((size_t)(n * T + 1), sizeof *token_attr), *seq_attr = calloc((size_t)(T + 1), sizeof *seq_attr);
    const cattr_tensor **draws = NULL;
    const char **roles = NULL;
    const char *vals[16] = {0}, *bls[16] = {0};
    int n_slots = 0;
    if (st == CATTR_OK && tpl) { /* a text template: one column per slot */
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(tpl, "values")) if (n_slots < 16) vals[n_slots++] = it->valuestring;
        int nb = 0;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(tpl, "baselines_used")) if (nb < 16) bls[nb++] = cJSON_GetStringValue(it);
        T = n_slots;
        free(token_attr);
        free(seq_attr);
        token_attr = calloc((size_t)(n * T + 1), sizeof *token_attr);
        seq_attr = calloc((size_t)(T + 1), sizeof *seq_attr);
    }
    if (st == CATTR_OK) {
        cattr_method lm = ig ? CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS : gxa ? CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION
                        : svs ? CATTR_METHOD_SHAPLEY_VALUE_SAMPLING : lime ? CATTR_METHOD_LIME
                        : ks ? CATTR_METHOD_KERNEL_SHAP : CATTR_METHOD_FEATURE_ABLATION;
        cattr_attr_params lp;
        cattr_llm_call lc = cattr_llm_call_make(ids, T, tg, n);
        int64_t *perms = NULL;
        if (!case_params(x, m, cs, id, lm, &lp, &lc, &perms, T, why, sizeof why)) {
            printf("FAIL %s case err=data allowed=0 (%s)\n", id, why);
            (*x->failed)++;
            free(perms);
            goto out;
        }
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(cs, "args"), *v;
        if ((v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(args, "sklearn_kwargs"), "alpha")) && cJSON_IsNumber(v))
            lp.lime_alpha = v->valuedouble;
        const cJSON *rd = cJSON_GetObjectItemCaseSensitive(cs, "random_draws");
        if (rd) { /* recorded draws, by the case's name format */
            const char *fmt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rd, "tensor_name_format"));
            const cJSON *seq = cJSON_GetObjectItemCaseSensitive(rd, "sequence");
            int nd = cJSON_GetArraySize(seq);
            if (nd > cattr_tensor_set_count(set)) { /* each draw is a tensor of the set */
                st = cx_fail(CATTR_ERR_FORMAT, "%s: %s: random_draws.sequence has %d draws; its tensor file holds only %d "
                             "tensors", x->index, id ? id : "?", nd, cattr_tensor_set_count(set));
                nd = 0;
            }
            draws = calloc((size_t)(nd + 1), sizeof *draws);
            roles = calloc((size_t)(nd + 1), sizeof *roles);
            for (int k = 0; fmt && draws && roles && k < nd; k++) {
                char name[256];
                snprintf(name, sizeof name, fmt, k);
                draws[k] = tensor(set, name);
                roles[k] = cJSON_GetStringValue(cJSON_GetArrayItem(seq, k));
                if (!draws[k]) st = cx_fail(CATTR_ERR_FORMAT, "missing draw '%s'", name);
            }
            lc.draws = draws;
            lc.draw_roles = roles;
            lc.n_draws = nd;
        }
        if (st == CATTR_OK) {
            if (tpl)
                st = cattr_llm_attribute_template(m->llm, &lp, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(tpl, "template")),
                                                  vals, bls, n_slots, tg, n, seq_attr, token_attr);
            else
                st = cattr_llm_attribute(m->llm, &lp, &lc, seq_attr, token_attr, NULL, NULL);
        }
        if (st == CATTR_OK && x->o->cmp) { /* the same call on device B: token_attr (whose rows sum to seq_attr) */
            double *tb = calloc((size_t)(n * T + 1), sizeof *tb), *sb = calloc((size_t)(T + 1), sizeof *sb);
            lp.device = x->o->cmp->device_b;
            if (!tb || !sb) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            else if (tpl)
                st = cattr_llm_attribute_template(m->llm, &lp, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(tpl, "template")),
                                                  vals, bls, n_slots, tg, n, sb, tb);
            else
                st = cattr_llm_attribute(m->llm, &lp, &lc, sb, tb, NULL, NULL);
            if (st == CATTR_OK) cmp_record(x->o->cmp, &x->o->passed, &x->o->failed, id, method, token_attr, tb, n * T);
            free(tb);
            free(sb);
            if (st != CATTR_OK) {
                printf("FAIL %s on %s: %s\n", id, x->o->cmp->device_b, cattr_last_error());
                (*x->failed)++;
                st = CATTR_OK;
                free(perms);
                free(draws);
                free(roles);
                goto out;
            }
            free(perms);
            free(draws);
            free(roles);
            goto out;
        }
        free(perms);
    }
    free(draws);
    free(roles);
    if (st != CATTR_OK) {
        printf("FAIL %s attribute err=error allowed=0 (%s)\n", id, cattr_last_error());
        (*x->failed)++;
    } else {
        const cJSON *ex = cJSON_GetObjectItemCaseSensitive(cs, x->dtype == CATTR_FLOAT32 ? "expected" : "expected_f64");
        double al = atol_of(cJSON_GetObjectItemCaseSensitive(cs, "tolerance")), worst = 0;
        char what[256] = "";
        bool fail = false;
        for (int k = 0; k < 2; k++) {
            const char *tn = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ex, k ? "token_attr" : "seq_attr"));
            if (!tn) continue;
            const cattr_tensor *e = tensor(set, tn);
            if (!e || cattr_tensor_numel(e) != (k ? n * T : T)) {
                snprintf(what, sizeof what, "%s err=missing allowed=0", tn);
                fail = true;
                break;
            }
            double err = max_err(k ? token_attr : seq_attr, e, k ? n * T : T), r = al > 0 ? err / al : INFINITY;
            if (r > worst) worst = r;
            if (!(err <= al) && !fail) {
                snprintf(what, sizeof what, "%s err=%.3e allowed=%.3e", tn, err, al);
                fail = true;
            }
        }
        if (fail) {
            printf("FAIL %s %s\n", id, what);
            (*x->failed)++;
        } else {
            printf("PASS %s %.3e\n", id, worst);
            (*x->passed)++;
        }
    }
out:
    fflush(stdout);
    free(ids);
    free(tg);
    free(token_attr);
    free(seq_attr);
    cattr_tensor_set_free(set);
}

/* Replays one index file (cases.json, arch_cases.json, more_cases.json). Returns -1 on an I/O error. */
int replay_llm_index(const char *path, replay_opts *o) {
    void *text = NULL;
    size_t size = 0;
    if (cx_read_file(path, &text, &size) != CATTR_OK) {
        fprintf(stderr, "cattr: %s\n", cattr_last_error());
        return -1;
    }
    cJSON *j = cJSON_ParseWithLength(text, size);
    free(text);
    if (!j) {
        fprintf(stderr, "cattr: '%s' is not valid JSON\n", path);
        return -1;
    }
    char base[4096];
    snprintf(base, sizeof base, "%s", path);
    char *slash = strrchr(base, '/');
    if (slash) *slash = 0;
    else snprintf(base, sizeof base, ".");
    llm_ctx x;
    memset(&x, 0, sizeof x);
    x.dtype = o->dtype;
    x.device = o->device;
    x.index = path;
    x.o = o;
    x.passed = &o->passed;
    x.failed = &o->failed;
    x.skipped = &o->skipped;
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(j, "models");
    const char *default_dir = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "model"), "dir"));
    const cJSON *p, *c;
    /* model dir of a record: its `model` id looked up in models[], else the index's model */
    #define MODEL_DIR(rec, out)                                                                                        \
        do {                                                                                                          \
            const char *mid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rec, "model"));                   \
            const char *d = default_dir;                                                                              \
            const cJSON *mm;                                                                                          \
            cJSON_ArrayForEach(mm, models) if (mid && !strcmp(mid, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(mm, "id")))) \
                d = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(mm, "dir"));                               \
            snprintf(out, sizeof out, "%s/%s", base, d ? d : "");                                                     \
        } while (0)
    char dir[4200];
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(j, "prompts")) {
        if (!cJSON_GetObjectItemCaseSensitive(p, "hidden_states") && strstr(path, "more_cases")) continue;
        MODEL_DIR(p, dir);
        if (!o->cmp) check_prompt(&x, p, base, dir); /* the forward pass against the golden numbers */
        fflush(stdout);
    }
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(j, "cases")) {
        const char *pid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "prompt"));
        const cJSON *prompt = NULL;
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(j, "prompts")) if (pid && !strcmp(pid, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "id")))) prompt = p;
        const cJSON *rec = prompt ? prompt : c;
        MODEL_DIR(rec, dir);
        run_case(&x, c, prompt, base, dir);
    }
    #undef MODEL_DIR
    models_free(&x);
    cJSON_Delete(j);
    return 0;
}

/* Tokenizer cases (a .jsonl file of shared/golden/tokenizer): PASS tok:<id> per line. */
int replay_tokenizer(const char *path, const char *tokdir, int *passed, int *failed) {
    cx_tokenizer *t = NULL;
    if (cx_tokenizer_load(tokdir, &t) != CATTR_OK) {
        fprintf(stderr, "cattr: %s\n", cattr_last_error());
        return -1;
    }
    void *text = NULL;
    size_t size = 0;
    if (cx_read_file(path, &text, &size) != CATTR_OK) {
        fprintf(stderr, "cattr: %s\n", cattr_last_error());
        cx_tokenizer_free(t);
        return -1;
    }
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        cJSON *j = cJSON_Parse(line);
        if (!j) continue;
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
        const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "text"));
        const char *dec = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "decoded"));
        int64_t n = 0, *want = json_ids(cJSON_GetObjectItemCaseSensitive(j, "ids"), &n), *got = NULL, gn = 0;
        char *back = NULL;
        bool ok = s && cx_tokenizer_encode(t, s, strlen(s), false, &got, &gn) == CATTR_OK && gn == n &&
                  !memcmp(got, want, (size_t)n * sizeof *got);
        ok = ok && cx_tokenizer_decode(t, want, n, false, &back) == CATTR_OK && dec && !strcmp(back, dec);
        if (ok) {
            printf("PASS tok:%d 0.000e+00\n", id ? id->valueint : -1);
            (*passed)++;
        } else {
            printf("FAIL tok:%d ids err=mismatch allowed=0\n", id ? id->valueint : -1);
            (*failed)++;
        }
        free(want);
        free(got);
        free(back);
        cJSON_Delete(j);
    }
    free(text);
    cx_tokenizer_free(t);
    return 0;
}
