/* explain_context.c - `cattr explain-context`: which documents and sentences of a retrieved context an answer is built
 * on. The prompt is the checkpoint's chat template (ChatML, Llama 3 and Mistral forms) or the user's --template around
 * the documents and the question; the answer is given or generated greedily. Sources are the documents or their
 * sentences; each method scores them by the answer's total log-probability with sources removed from the token
 * sequence (cattr_llm_score_removals: the unchanged prefix computed once, every ablation a ragged continuation):
 * `loo` (leave one source out), `surrogate` (ContextCite: random keep/drop masks and a Lasso fit). Quality numbers on
 * request: the log-probability drop when the top 1/3/5 sources are removed, and the linear datamodeling score
 * (Spearman correlation of the surrogate's predictions with held-out random ablations). */
#include "cli.h"
#include "attr/linmodel.h"
#include "core/core.h"
#include "core/rng.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_DOCS 256
#define CTX_STREAM 0x4354580000000000ull /* "CTX": the surrogate's masks */

static void context_help(FILE *f) {
    fprintf(f,
        "usage: cattr explain-context CHECKPOINT_DIR --question TEXT --context FILE [--context FILE...] [options]\n"
        "\n"
        "Which documents (or sentences) of a retrieved context the answer is built on: each source is scored by how\n"
        "much the answer's log-probability falls when the source is taken out of the prompt.\n"
        "\n"
        "  --question TEXT      the question\n"
        "  --context FILE       a document (UTF-8 text); repeat for each, in the prompt's order\n"
        "  --answer TEXT        the answer to explain (default: generated greedily, up to --max-new tokens)\n"
        "  --max-new N          tokens to generate without --answer (default 64)\n"
        "  --method M           loo (default: leave one source out, one ablation per source) or surrogate\n"
        "                       (ContextCite: --samples random keep/drop masks and a Lasso fit)\n"
        "  --sources S          documents (default) or sentences (each document split after . ! ? or a blank line)\n"
        "  --samples N          surrogate: random ablations (default 64)\n"
        "  --keep-prob P        surrogate: each source's chance to be kept in a mask (default 0.5)\n"
        "  --alpha A            surrogate: the Lasso's regularisation (default 0.01)\n"
        "  --seed N             surrogate: the masks' seed (cattr's generator; default 0)\n"
        "  --quality            also measure the top-k drop (the top 1, 3, 5 sources removed) and, for surrogate,\n"
        "                       the linear datamodeling score over 32 held-out random ablations\n"
        "  --template TEXT      the prompt instead of the chat template: {context} and {question} are replaced\n"
        "  --top K              sources shown in the terminal view (default 5)\n"
        "  --json FILE          the sources, their spans and scores, the answer, timings\n"
        "  --device D, --dtype T  where and in what the passes run (cpu, float32)\n"
        "  --quiet              print nothing but errors\n");
}

typedef struct {
    const char *dir, *question, *answer, *tmpl, *json, *device;
    const char *docs[MAX_DOCS];
    int n_docs;
    bool sentences, surrogate, quality, quiet;
    long long max_new, samples, seed, top;
    double keep, alpha;
    cattr_dtype dtype;
} ctx_args;

static int parse(int argc, char **argv, ctx_args *a) {
    memset(a, 0, sizeof *a);
    a->max_new = 64, a->samples = 64, a->top = 5, a->keep = 0.5, a->alpha = 0.01, a->dtype = CATTR_FLOAT32;
    static const char *const valued[] = {"--question", "--context", "--answer", "--max-new", "--method", "--sources",
                                         "--samples", "--keep-prob", "--alpha", "--seed", "--template", "--top",
                                         "--json", "--device", "--dtype"};
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool val = false;
        for (size_t q = 0; q < sizeof valued / sizeof *valued; q++) val |= !strcmp(o, valued[q]);
        if (val && !v) return cli_usage_error("%s needs a value (see cattr explain-context --help)", o);
        if (val) i++;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            context_help(stdout);
            return -1;
        } else if (!strcmp(o, "--question")) {
            a->question = v;
        } else if (!strcmp(o, "--context")) {
            if (a->n_docs >= MAX_DOCS) return cli_usage_error("at most %d --context", MAX_DOCS);
            a->docs[a->n_docs++] = v;
        } else if (!strcmp(o, "--answer")) {
            a->answer = v;
        } else if (!strcmp(o, "--template")) {
            a->tmpl = v;
        } else if (!strcmp(o, "--json")) {
            a->json = v;
        } else if (!strcmp(o, "--method")) {
            if (strcmp(v, "loo") && strcmp(v, "surrogate"))
                return cli_usage_error("--method must be loo or surrogate, not '%s'", v);
            a->surrogate = !strcmp(v, "surrogate");
        } else if (!strcmp(o, "--sources")) {
            if (strcmp(v, "documents") && strcmp(v, "sentences"))
                return cli_usage_error("--sources must be documents or sentences, not '%s'", v);
            a->sentences = !strcmp(v, "sentences");
        } else if (!strcmp(o, "--max-new")) {
            if (!cli_int_arg(o, v, 1, 100000, &a->max_new)) return CLI_USAGE;
        } else if (!strcmp(o, "--samples")) {
            if (!cli_int_arg(o, v, 2, 1000000, &a->samples)) return CLI_USAGE;
        } else if (!strcmp(o, "--seed")) {
            if (!cli_int_arg(o, v, 0, INT64_MAX, &a->seed)) return CLI_USAGE;
        } else if (!strcmp(o, "--top")) {
            if (!cli_int_arg(o, v, 1, 100000, &a->top)) return CLI_USAGE;
        } else if (!strcmp(o, "--keep-prob")) {
            if (!cli_parse_double(v, &a->keep) || !(a->keep > 0 && a->keep < 1))
                return cli_usage_error("--keep-prob must be a number between 0 and 1, not '%s'", v);
        } else if (!strcmp(o, "--alpha")) {
            if (!cli_parse_double(v, &a->alpha) || !(a->alpha >= 0) || !isfinite(a->alpha))
                return cli_usage_error("--alpha must be a number >= 0, not '%s'", v);
        } else if (!strcmp(o, "--device")) {
            if (!cli_device_arg(v)) return CLI_USAGE;
            a->device = v;
        } else if (!strcmp(o, "--dtype")) {
            if (strcmp(v, "float32") && strcmp(v, "float64"))
                return cli_usage_error("--dtype must be float32 or float64, not '%s'", v);
            a->dtype = !strcmp(v, "float32") ? CATTR_FLOAT32 : CATTR_FLOAT64;
        } else if (!strcmp(o, "--quality")) {
            a->quality = true;
        } else if (!strcmp(o, "--quiet") || !strcmp(o, "-q")) {
            a->quiet = true;
        } else if (o[0] == '-' && o[1]) {
            return cli_usage_error("explain-context: unknown option '%s' (see cattr explain-context --help)", o);
        } else if (!a->dir) {
            a->dir = o;
        } else {
            return cli_usage_error("explain-context: unexpected argument '%s'", o);
        }
    }
    if (!a->dir) return cli_usage_error("explain-context: no checkpoint folder given (see cattr explain-context --help)");
    if (!a->question) return cli_usage_error("explain-context: --question is required");
    if (!a->n_docs) return cli_usage_error("explain-context: give at least one --context FILE");
    if (!cli_folder_in(a->dir, "the checkpoint folder")) return CLI_USAGE;
    for (int d = 0; d < a->n_docs; d++)
        if (!cli_file_in(a->docs[d], "--context")) return CLI_USAGE;
    if (a->tmpl && (!strstr(a->tmpl, "{context}") || !strstr(a->tmpl, "{question}")))
        return cli_usage_error("--template must hold {context} and {question}");
    if (a->json && !cli_file_out(a->json, "--json")) return CLI_USAGE;
    return 0;
}

static char *dupn(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *s = malloc(cap);
    size_t k;
    while (s && (k = fread(s + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        if (cap - n - 1 == 0) {
            char *t = realloc(s, cap *= 2);
            if (!t) free(s);
            s = t;
        }
    }
    fclose(f);
    if (s) s[n] = 0;
    return s;
}

/* The prompt around the context: text before it (*pre) and after it (*post), from --template or the checkpoint's
 * chat template (ChatML, Llama 3, Mistral), as a user turn "<context>\n\n<question>" and the assistant's start. */
static int prompt_frame(const ctx_args *a, char **pre, char **post) {
    if (a->tmpl) {
        const char *c = strstr(a->tmpl, "{context}"), *q = strstr(a->tmpl, "{question}");
        if (q < c) return cli_usage_error("--template: {question} must come after {context} (the sources come first)");
        size_t mid = (size_t)(q - c) - 9;
        *pre = dupn(a->tmpl, (size_t)(c - a->tmpl));
        size_t pl = strlen(q + 10);
        *post = malloc(mid + strlen(a->question) + pl + 1);
        if (*post) sprintf(*post, "%.*s%s%s", (int)mid, c + 9, a->question, q + 10);
        return *pre && *post ? CLI_OK : cli_error(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", a->dir);
    char *text = read_text(path);
    cJSON *cfg = text ? cJSON_Parse(text) : NULL;
    free(text);
    const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(cfg, "chat_template"));
    const char *ppre = NULL, *ppost = NULL;
    if (t && strstr(t, "<|im_start|>")) { /* ChatML (Qwen); Qwen3's thinking switched off, as for a plain answer */
        ppre = "<|im_start|>user\n";
        ppost = strstr(t, "enable_thinking") ? "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
                                              : "<|im_end|>\n<|im_start|>assistant\n";
    } else if (t && strstr(t, "<|start_header_id|>")) { /* Llama 3 */
        ppre = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n";
        ppost = "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
    } else if (t && strstr(t, "[INST]")) { /* Mistral */
        ppre = "<s>[INST] ";
        ppost = " [/INST]";
    }
    int rc = CLI_OK;
    if (!ppre) {
        rc = cli_usage_error("%s: %s; give --template with {context} and {question}", path,
                             !cfg ? "no readable tokenizer_config.json"
                             : !t ? "no chat_template"
                                  : "a chat_template of a form cattr cannot render (it renders ChatML, Llama 3 and "
                                    "Mistral's)");
    } else {
        *pre = cx_strdup(ppre);
        *post = malloc(strlen(ppost) + strlen(a->question) + 3);
        if (*post) sprintf(*post, "\n\n%s%s", a->question, ppost);
        if (!*pre || !*post) rc = cli_error(CATTR_ERR_NO_MEMORY, "out of memory");
    }
    cJSON_Delete(cfg);
    return rc;
}

typedef struct {
    int doc;
    int64_t t0, t1;     /* its tokens in the prompt */
    int64_t b0, b1;     /* its bytes in the document */
    double score;
} source;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Appends ids[0..k) to the prompt (grown). */
static bool append(int64_t **p, int64_t *T, int64_t *cap, const int64_t *ids, int64_t k) {
    if (*T + k > *cap) {
        int64_t c = (*T + k) * 2;
        int64_t *q = realloc(*p, (size_t)c * sizeof *q);
        if (!q) return false;
        *p = q, *cap = c;
    }
    memcpy(*p + *T, ids, (size_t)k * sizeof *ids);
    *T += k;
    return true;
}

/* Spearman's rank correlation of x and y (n values; average ranks for ties). */
static double spearman(const double *x, const double *y, int64_t n) {
    double *r[2] = {malloc((size_t)n * sizeof(double)), malloc((size_t)n * sizeof(double))};
    const double *v[2] = {x, y};
    for (int s = 0; s < 2 && r[0] && r[1]; s++)
        for (int64_t i = 0; i < n; i++) {
            double less = 0, eq = 0;
            for (int64_t j = 0; j < n; j++) less += v[s][j] < v[s][i], eq += v[s][j] == v[s][i];
            r[s][i] = less + (eq + 1) / 2;
        }
    double mx = (n + 1) / 2.0, sxy = 0, sxx = 0, syy = 0;
    for (int64_t i = 0; r[0] && r[1] && i < n; i++) {
        sxy += (r[0][i] - mx) * (r[1][i] - mx);
        sxx += (r[0][i] - mx) * (r[0][i] - mx);
        syy += (r[1][i] - mx) * (r[1][i] - mx);
    }
    free(r[0]);
    free(r[1]);
    return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : NAN;
}

/* text[0..len) on one line: white space runs folded to a space and trimmed, cut at about `width` bytes (never inside a
 * UTF-8 character) with "..." */
static void fold(const char *text, int64_t len, char *out, int width) {
    int w = 0;
    bool space = true, cut = false;
    for (int64_t b = 0; b < len; b++) {
        char c = text[b];
        bool ws = c == ' ' || c == '\n' || c == '\t' || c == '\r';
        if (ws && space) continue;
        if (w >= width) {
            cut = true;
            break;
        }
        out[w++] = ws ? ' ' : c;
        space = ws;
    }
    if (cut) {
        while (w > 0 && ((unsigned char)out[w - 1] & 0xC0) == 0x80) w--;
        if (w > 0 && ((unsigned char)out[w - 1] & 0xC0) == 0xC0) w--;
    }
    while (w > 0 && out[w - 1] == ' ') w--;
    strcpy(out + w, cut ? "..." : "");
}

static int cmp_score(const void *x, const void *y) {
    double a = (*(source *const *)x)->score, b = (*(source *const *)y)->score;
    return a < b ? 1 : a > b ? -1 : 0;
}

int cmd_explain_context(int argc, char **argv) {
    ctx_args a;
    int rc = parse(argc, argv, &a);
    if (rc) return rc < 0 ? CLI_OK : rc;
    double t_start = now_s();
    cattr_llm *m = NULL;
    char *pre = NULL, *post = NULL, *doc[MAX_DOCS] = {0};
    int64_t *prompt = NULL, T = 0, cap = 0, *ans = NULL, n = 0, *ids = NULL, k = 0;
    source *src = NULL;
    int64_t S = 0;
    unsigned char *keep = NULL;
    double *lp = NULL, *y = NULL;
    cJSON *root = NULL;
    cattr_status st = cattr_llm_load(a.dir, &m);
    if (st == CATTR_OK && a.device) st = cattr_llm_set_device(m, a.device);
    if (st != CATTR_OK) return cli_error(st, "cannot load the checkpoint");
    rc = prompt_frame(&a, &pre, &post);
    /* the prompt, piece by piece: the sources' token spans are exact */
    if (rc == CLI_OK && (st = cattr_llm_encode(m, pre, &ids, &k)) == CATTR_OK && !append(&prompt, &T, &cap, ids, k))
        st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    free(ids), ids = NULL;
    src = calloc(1, sizeof *src);
    int64_t cap_src = 1;
    for (int d = 0; d < a.n_docs && rc == CLI_OK && st == CATTR_OK; d++) {
        if (!(doc[d] = read_text(a.docs[d]))) {
            rc = cli_usage_error("--context %s: cannot read it", a.docs[d]);
            break;
        }
        if (d > 0 && ((st = cattr_llm_encode(m, "\n\n", &ids, &k)) != CATTR_OK || !append(&prompt, &T, &cap, ids, k)))
            st = st ? st : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        free(ids), ids = NULL;
        if (st != CATTR_OK) break;
        if (!doc[d][0]) {
            rc = cli_usage_error("--context %s is empty", a.docs[d]);
            break;
        }
        if ((st = cattr_llm_encode(m, doc[d], &ids, &k)) != CATTR_OK) break;
        int64_t *seg = malloc((size_t)k * sizeof *seg), *bs = malloc((size_t)k * sizeof *bs),
                *be = malloc((size_t)k * sizeof *be), G = 1;
        if (!seg || !bs || !be) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        if (st == CATTR_OK && a.sentences) st = cattr_llm_segments(m, doc[d], ids, k, "sentences", NULL, 0, seg, &G);
        else if (st == CATTR_OK) memset(seg, 0, (size_t)k * sizeof *seg);
        if (st == CATTR_OK) st = cattr_llm_token_spans(m, doc[d], ids, k, bs, be);
        if (st == CATTR_OK && S + G > cap_src) {
            source *ns = realloc(src, (size_t)(S + G) * 2 * sizeof *ns);
            if (ns) src = ns, cap_src = (S + G) * 2;
            else st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        }
        for (int64_t g = 0; st == CATTR_OK && g < G; g++) src[S + g] = (source){d, -1, -1, -1, -1, 0};
        for (int64_t t = 0; st == CATTR_OK && t < k; t++) {
            source *s = &src[S + seg[t]];
            if (s->t0 < 0) s->t0 = T + t, s->b0 = bs[t];
            s->t1 = T + t + 1, s->b1 = be[t];
        }
        if (st == CATTR_OK && !append(&prompt, &T, &cap, ids, k)) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        S += st == CATTR_OK ? G : 0;
        free(seg), free(bs), free(be), free(ids), ids = NULL;
    }
    if (rc == CLI_OK && st == CATTR_OK && (st = cattr_llm_encode(m, post, &ids, &k)) == CATTR_OK &&
        !append(&prompt, &T, &cap, ids, k))
        st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
    free(ids), ids = NULL;
    if (rc == CLI_OK && st != CATTR_OK) rc = cli_error(st, "cannot build the prompt");
    /* the answer: given, or greedy (its end-of-sequence and other special tokens at the end dropped) */
    double t_gen = now_s();
    if (rc == CLI_OK && a.answer) {
        st = cattr_llm_encode(m, a.answer, &ans, &n);
        if (st == CATTR_OK && n < 1) rc = cli_usage_error("--answer encodes to no token");
    } else if (rc == CLI_OK) {
        int64_t *out = NULL, no = 0;
        st = cattr_llm_generate(m, a.dtype, prompt, T, (int)a.max_new, &out, &no);
        n = no;
        while (st == CATTR_OK && n > 0) { /* trailing special tokens (end of turn, end of text) */
            char *txt = NULL;
            if (cattr_llm_decode(m, out + n - 1, 1, 1, &txt) != CATTR_OK) break;
            bool special = !txt[0];
            free(txt);
            if (!special && out[n - 1] != cattr_llm_eos_token(m)) break;
            n--;
        }
        ans = out;
        if (st == CATTR_OK && n < 1) rc = cli_usage_error("the generated answer is empty; give --answer");
    }
    if (rc == CLI_OK && st != CATTR_OK) rc = cli_error(st, "cannot make the answer");
    t_gen = now_s() - t_gen;
    /* the ablations: row 0 keeps everything; loo removes each source; surrogate draws masks; --quality adds the top-k
     * removals (after the scores) and the held-out masks */
    int64_t n_main = a.surrogate ? a.samples : S, n_hold = a.quality && a.surrogate ? 32 : 0, R = 1 + n_main + n_hold;
    unsigned char *mask = rc == CLI_OK ? calloc((size_t)(R * (S ? S : 1)), 1) : NULL; /* [R, S]: kept sources */
    if (rc == CLI_OK && !mask) rc = cli_error(CATTR_ERR_NO_MEMORY, "out of memory");
    if (rc == CLI_OK) {
        cx_rng g;
        cx_rng_init(&g, (uint64_t)a.seed, CTX_STREAM);
        memset(mask, 1, (size_t)S);
        for (int64_t r = 1; r < R; r++)
            for (int64_t s = 0; s < S; s++)
                mask[r * S + s] = a.surrogate ? cx_rng_uniform(&g) < a.keep : s != r - 1;
    }
    cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_FEATURE_ABLATION);
    p.dtype = a.dtype;
    p.device = a.device;
    /* the rows' token masks and their scores */
    keep = rc == CLI_OK ? malloc((size_t)((R + 5) * T)) : NULL;
    lp = rc == CLI_OK ? malloc((size_t)((R + 5) * n) * sizeof *lp) : NULL;
    y = rc == CLI_OK ? calloc((size_t)(R + 5), sizeof *y) : NULL;
    if (rc == CLI_OK && (!keep || !lp || !y)) rc = cli_error(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t r = 0; rc == CLI_OK && r < R; r++) {
        memset(keep + r * T, 1, (size_t)T);
        for (int64_t s = 0; s < S; s++)
            if (!mask[r * S + s]) memset(keep + r * T + src[s].t0, 0, (size_t)(src[s].t1 - src[s].t0));
    }
    double t_abl = now_s();
    if (rc == CLI_OK && (st = cattr_llm_score_removals(m, &p, prompt, T, ans, n, keep, R, lp)) != CATTR_OK)
        rc = cli_error(st, "the ablations failed");
    for (int64_t r = 0; rc == CLI_OK && r < R; r++)
        for (int64_t q = 0; q < n; q++) y[r] += lp[r * n + q];
    /* scores */
    if (rc == CLI_OK && !a.surrogate) {
        for (int64_t s = 0; s < S; s++) src[s].score = y[0] - y[1 + s];
    } else if (rc == CLI_OK) {
        float *X = malloc((size_t)(n_main * S) * sizeof *X), *Y = malloc((size_t)n_main * sizeof *Y),
              *W = malloc((size_t)n_main * sizeof *W), *coef = malloc((size_t)S * sizeof *coef), icpt = 0;
        if (!X || !Y || !W || !coef) st = cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        for (int64_t r = 0; st == CATTR_OK && r < n_main; r++) {
            for (int64_t s = 0; s < S; s++) X[r * S + s] = mask[(1 + r) * S + s];
            Y[r] = (float)y[1 + r], W[r] = 1;
        }
        cx_lasso_opts lo = CX_LASSO_DEFAULTS(a.alpha);
        if (st == CATTR_OK) st = cx_lasso_fit(n_main, S, X, Y, W, &lo, coef, &icpt, NULL);
        for (int64_t s = 0; st == CATTR_OK && s < S; s++) src[s].score = coef[s];
        if (st == CATTR_OK && n_hold) { /* the linear datamodeling score on the held-out masks */
            double *pred = malloc((size_t)n_hold * sizeof *pred);
            for (int64_t h = 0; pred && h < n_hold; h++) {
                pred[h] = icpt;
                for (int64_t s = 0; s < S; s++) pred[h] += coef[s] * mask[(1 + n_main + h) * S + s];
            }
            root = cJSON_CreateObject();
            cJSON_AddNumberToObject(root, "lds", pred ? spearman(pred, y + 1 + n_main, n_hold) : NAN);
            free(pred);
        }
        if (st != CATTR_OK) rc = cli_error(st, "the surrogate's fit failed");
        free(X), free(Y), free(W), free(coef);
    }
    /* the top-k drops: the top 1, 3 and 5 sources removed */
    source **order = rc == CLI_OK ? malloc((size_t)(S ? S : 1) * sizeof *order) : NULL;
    for (int64_t s = 0; order && s < S; s++) order[s] = &src[s];
    if (order) qsort(order, (size_t)S, sizeof *order, cmp_score);
    static const int ks[3] = {1, 3, 5};
    double drop[3] = {NAN, NAN, NAN};
    if (rc == CLI_OK && a.quality) {
        for (int q = 0; q < 3; q++) {
            unsigned char *kr = keep + (R + q) * T;
            memset(kr, 1, (size_t)T);
            for (int64_t s = 0; s < ks[q] && s < S; s++) memset(kr + order[s]->t0, 0, (size_t)(order[s]->t1 - order[s]->t0));
        }
        if ((st = cattr_llm_score_removals(m, &p, prompt, T, ans, n, keep + R * T, 3, lp + R * n)) != CATTR_OK)
            rc = cli_error(st, "the top-k removals failed");
        for (int q = 0; rc == CLI_OK && q < 3; q++) {
            double v = 0;
            for (int64_t i = 0; i < n; i++) v += lp[(R + q) * n + i];
            drop[q] = y[0] - v;
        }
    }
    t_abl = now_s() - t_abl;
    /* the JSON and the terminal view */
    char *answer_text = NULL;
    if (rc == CLI_OK && (st = cattr_llm_decode(m, ans, n, 1, &answer_text)) != CATTR_OK)
        rc = cli_error(st, "cannot decode the answer");
    if (rc == CLI_OK) {
        if (!root) root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "answer", answer_text);
        cJSON_AddStringToObject(root, "method", a.surrogate ? "surrogate" : "loo");
        cJSON_AddStringToObject(root, "sources_kind", a.sentences ? "sentences" : "documents");
        cJSON_AddNumberToObject(root, "answer_logprob", y[0]);
        cJSON_AddNumberToObject(root, "prompt_tokens", (double)T);
        cJSON_AddNumberToObject(root, "answer_tokens", (double)n);
        cJSON_AddNumberToObject(root, "ablations", (double)(R - 1));
        cJSON *arr = cJSON_AddArrayToObject(root, "sources");
        for (int64_t s = 0; s < S; s++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "document", a.docs[src[s].doc]);
            cJSON_AddNumberToObject(o, "start", (double)src[s].b0);
            cJSON_AddNumberToObject(o, "end", (double)src[s].b1);
            char *text = dupn(doc[src[s].doc] + src[s].b0, (size_t)(src[s].b1 - src[s].b0));
            cJSON_AddStringToObject(o, "text", text ? text : "");
            free(text);
            cJSON_AddNumberToObject(o, "score", src[s].score);
            cJSON_AddItemToArray(arr, o);
        }
        if (a.quality) {
            cJSON *d = cJSON_AddObjectToObject(root, "top_k_drop");
            for (int q = 0; q < 3; q++) {
                char key[8];
                snprintf(key, sizeof key, "%d", ks[q]);
                cJSON_AddNumberToObject(d, key, drop[q]);
            }
        }
        cJSON *tm = cJSON_AddObjectToObject(root, "timings_s");
        cJSON_AddNumberToObject(tm, "generation", a.answer ? 0 : t_gen);
        cJSON_AddNumberToObject(tm, "ablations", t_abl);
        cJSON_AddNumberToObject(tm, "total", now_s() - t_start);
        if (a.json) {
            char *text = cJSON_Print(root);
            st = text ? cli_write_text_file(a.json, text) : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            free(text);
            if (st != CATTR_OK) rc = cli_error(st, "cannot write --json");
        }
    }
    if (rc == CLI_OK && !a.quiet) {
        char line[96];
        fold(answer_text, (int64_t)strlen(answer_text), line, 72);
        printf("answer (%lld tokens, log-probability %.4f): %s\n", (long long)n, y[0], line);
        printf("%s over %lld %s: %lld ablations%s (%.2f s)\n", a.surrogate ? "surrogate" : "leave-one-out",
               (long long)S, a.sentences ? "sentences" : "documents", (long long)n_main,
               n_hold ? " and 32 held out" : "", t_abl);
        for (int64_t q = 0; q < S && q < a.top; q++) {
            const source *s = order[q];
            fold(doc[s->doc] + s->b0, s->b1 - s->b0, line, 60);
            printf("  %+10.4f  [%s] %s\n", s->score, a.docs[s->doc], line);
        }
        if (a.quality) {
            printf("top-k drop: top 1 %.4f, top 3 %.4f, top 5 %.4f", drop[0], drop[1], drop[2]);
            const cJSON *l = cJSON_GetObjectItem(root, "lds");
            if (l) printf(", LDS %.3f", cJSON_GetNumberValue(l));
            printf("\n");
        }
        if (a.json) printf("wrote %s\n", a.json);
    }
    free(answer_text);
    free(order);
    cJSON_Delete(root);
    free(mask);
    free(keep);
    free(lp);
    free(y);
    free(src);
    free(prompt);
    free(ans);
    free(pre);
    free(post);
    for (int d = 0; d < a.n_docs; d++) free(doc[d]);
    cattr_llm_free(m);
    return rc;
}
