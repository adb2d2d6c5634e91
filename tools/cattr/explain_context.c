/* explain_context.c - `cattr explain-context`: which documents and sentences of a retrieved context an answer is built
 * on. The prompt is the checkpoint's chat template (ChatML, Llama 3 and Mistral forms) or the user's --template around
 * the documents and the question (cattr_llm_chat_frame); the library scores the sources (cattr_llm_explain_context:
 * leave-one-out or ContextCite's surrogate over cattr_llm_score_removals, the quality numbers on request); this file
 * reads the files, prints the terminal view and writes the JSON. */
#include "cli.h"
#include "core/core.h"
#include "io/fileutil.h"
#include "viz/heatmap.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DOCS 256

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
        "                       (ContextCite: --samples random keep/drop masks and a Lasso fit) or gradient\n"
        "                       (gradient x activation at the embeddings summed per source: one pass, a baseline)\n"
        "                       or hierarchical (AttriBoT: leave-one-out over the documents, then over the\n"
        "                       sentences of the --top-documents best; the others stay whole)\n"
        "  --top-documents N    hierarchical: the documents refined into sentences (default 3)\n"
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
        "  --html FILE          a page of the documents with the sources highlighted by score, and the ranking\n"
        "  --device D, --dtype T  where and in what the passes run (cpu, float32)\n"
        "  --quiet              print nothing but errors\n");
}

typedef struct {
    const char *dir, *question, *answer, *tmpl, *json, *html, *device;
    const char *docs[MAX_DOCS];
    int n_docs;
    bool sentences, surrogate, gradient, hierarchical, quality, quiet;
    long long max_new, samples, seed, top, top_docs;
    double keep, alpha;
    cattr_dtype dtype;
} ctx_args;

static int parse(int argc, char **argv, ctx_args *a) {
    memset(a, 0, sizeof *a);
    a->max_new = 64, a->samples = 64, a->top = 5, a->keep = 0.5, a->alpha = 0.01, a->dtype = CATTR_FLOAT32;
    static const char *const valued[] = {"--question", "--context", "--answer", "--max-new", "--method", "--sources",
                                         "--samples", "--keep-prob", "--alpha", "--seed", "--template", "--top", "--top-documents",
                                         "--json", "--html", "--device", "--dtype"};
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
        } else if (!strcmp(o, "--html")) {
            a->html = v;
        } else if (!strcmp(o, "--method")) {
            if (strcmp(v, "loo") && strcmp(v, "surrogate") && strcmp(v, "gradient") && strcmp(v, "hierarchical"))
                return cli_usage_error("--method must be loo, surrogate, gradient or hierarchical, not '%s'", v);
            a->surrogate = !strcmp(v, "surrogate");
            a->gradient = !strcmp(v, "gradient");
            a->hierarchical = !strcmp(v, "hierarchical");
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
        } else if (!strcmp(o, "--top-documents")) {
            if (!cli_int_arg(o, v, 1, MAX_DOCS, &a->top_docs)) return CLI_USAGE;
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
            if (!cli_dtype_arg(v, &a->dtype)) return CLI_USAGE;
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
    if ((a->json && !cli_file_out(a->json, "--json")) || (a->html && !cli_file_out(a->html, "--html"))) return CLI_USAGE;
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
    void *text = NULL;
    size_t len = 0;
    return cx_read_file(path, &text, &len) == CATTR_OK ? text : NULL;
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

static const char *method_name(const ctx_args *a) {
    return a->surrogate ? "surrogate" : a->gradient ? "gradient" : a->hierarchical ? "hierarchical" : "loo";
}

static int cmp_desc(const void *x, const void *y) {
    double a = ((const double *)x)[0], b = ((const double *)y)[0];
    return a < b ? 1 : a > b ? -1 : 0;
}

int cmd_explain_context(int argc, char **argv) {
    ctx_args a;
    int rc = parse(argc, argv, &a);
    if (rc) return rc < 0 ? CLI_OK : rc;
    cattr_llm *m = NULL;
    char *pre = NULL, *post = NULL, *doc[MAX_DOCS] = {0};
    cattr_context_result *res = NULL;
    cJSON *root = NULL;
    cattr_status st = cattr_llm_load(a.dir, &m);
    if (st == CATTR_OK && a.device) st = cattr_llm_set_device(m, a.device);
    if (st != CATTR_OK) return cli_error(st, "cannot load the checkpoint");
    if (a.tmpl) { /* {context} ... {question} */
        const char *c = strstr(a.tmpl, "{context}"), *q = strstr(a.tmpl, "{question}");
        if (q < c) {
            rc = cli_usage_error("--template: {question} must come after {context} (the sources come first)");
        } else {
            pre = dupn(a.tmpl, (size_t)(c - a.tmpl));
            post = malloc(strlen(a.tmpl) + strlen(a.question) + 1);
            if (post) sprintf(post, "%.*s%s%s", (int)(q - c - 9), c + 9, a.question, q + 10);
            if (!pre || !post) rc = cli_error(CATTR_ERR_NO_MEMORY, "out of memory");
        }
    } else if ((st = cattr_llm_chat_frame(a.dir, a.question, &pre, &post)) != CATTR_OK) {
        rc = cli_usage_error("%s; give --template with {context} and {question}", cattr_last_error());
    }
    for (int d = 0; d < a.n_docs && rc == CLI_OK; d++) {
        if (!(doc[d] = read_text(a.docs[d]))) rc = cli_usage_error("--context %s: cannot read it", a.docs[d]);
        else if (!doc[d][0]) rc = cli_usage_error("--context %s is empty", a.docs[d]);
    }
    cattr_context_request r = {.prefix = pre, .suffix = post, .documents = (const char *const *)doc,
                               .n_documents = a.n_docs, .answer = a.answer, .max_new = (int)a.max_new,
                               .sentences = a.sentences, .method = a.surrogate  ? CATTR_CONTEXT_SURROGATE
                                                         : a.gradient ? CATTR_CONTEXT_GRADIENT
                                                         : a.hierarchical ? CATTR_CONTEXT_HIERARCHICAL
                                                                          : CATTR_CONTEXT_LOO,
                               .top_documents = (int)a.top_docs,
                               .samples = a.samples, .keep_prob = a.keep, .alpha = a.alpha,
                               .seed = (uint64_t)a.seed, .quality = a.quality};
    cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_FEATURE_ABLATION);
    p.dtype = a.dtype;
    p.device = a.device;
    if (rc == CLI_OK && (st = cattr_llm_explain_context(m, &p, &r, &res)) != CATTR_OK)
        rc = cli_error(st, "context attribution failed");
    int64_t S = res ? res->n_sources : 0;
    double *order = rc == CLI_OK ? malloc((size_t)(2 * S + 2) * sizeof *order) : NULL;
    if (rc == CLI_OK && !order) rc = cli_error(CATTR_ERR_NO_MEMORY, "out of memory");
    for (int64_t s = 0; order && s < S; s++) order[2 * s] = res->score[s], order[2 * s + 1] = (double)s;
    if (order) qsort(order, (size_t)S, 2 * sizeof *order, cmp_desc);
    if (rc == CLI_OK) {
        root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "answer", res->answer);
        cJSON_AddStringToObject(root, "method", method_name(&a));
        cJSON_AddStringToObject(root, "sources_kind", a.hierarchical ? "documents and sentences"
                                                      : a.sentences ? "sentences" : "documents");
        cJSON_AddNumberToObject(root, "answer_logprob", res->answer_logprob);
        cJSON_AddNumberToObject(root, "prompt_tokens", (double)res->n_prompt);
        cJSON_AddNumberToObject(root, "answer_tokens", (double)res->n_answer);
        cJSON_AddNumberToObject(root, "ablations", (double)res->ablations);
        cJSON_AddNumberToObject(root, "held_out", (double)res->held_out);
        cJSON *arr = cJSON_AddArrayToObject(root, "sources");
        for (int64_t s = 0; s < S; s++) {
            cJSON *o = cJSON_CreateObject();
            int d = res->document[s];
            cJSON_AddStringToObject(o, "document", a.docs[d]);
            cJSON_AddNumberToObject(o, "start", (double)res->start[s]);
            cJSON_AddNumberToObject(o, "end", (double)res->end[s]);
            char *text = dupn(doc[d] + res->start[s], (size_t)(res->end[s] - res->start[s]));
            cJSON_AddStringToObject(o, "text", text ? text : "");
            free(text);
            cJSON_AddNumberToObject(o, "score", res->score[s]);
            cJSON_AddItemToArray(arr, o);
        }
        if (a.quality) {
            cJSON *d = cJSON_AddObjectToObject(root, "top_k_drop");
            cJSON_AddNumberToObject(d, "1", res->top_k_drop[0]);
            cJSON_AddNumberToObject(d, "3", res->top_k_drop[1]);
            cJSON_AddNumberToObject(d, "5", res->top_k_drop[2]);
            if (a.surrogate) cJSON_AddNumberToObject(root, "lds", res->lds);
        }
        cJSON *tm = cJSON_AddObjectToObject(root, "timings_s");
        cJSON_AddNumberToObject(tm, "generation", res->seconds_generation);
        cJSON_AddNumberToObject(tm, "ablations", res->seconds_ablations);
        if (a.json) {
            char *text = cJSON_Print(root);
            st = text ? cli_write_text_file(a.json, text) : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
            free(text);
            if (st != CATTR_OK) rc = cli_error(st, "cannot write --json");
        }
    }
    if (rc == CLI_OK && a.html) {
        char *page = NULL;
        st = cx_html_context(a.question, res->answer, method_name(&a),
                             a.n_docs, a.docs, (const char *const *)doc, S, res->document, res->start, res->end,
                             res->score, &page);
        if (st == CATTR_OK) st = cli_write_text_file(a.html, page);
        free(page);
        if (st != CATTR_OK) {
            rc = cli_error(st, "cannot write --html");
            if (a.json) remove(a.json);
        }
    }
    if (rc == CLI_OK && !a.quiet) {
        char line[96];
        fold(res->answer, (int64_t)strlen(res->answer), line, 72);
        printf("answer (%lld tokens, log-probability %.4f): %s\n", (long long)res->n_answer, res->answer_logprob, line);
        printf("%s over %lld %s: %lld ablations%s (%.2f s)\n",
               a.surrogate ? "surrogate" : a.gradient ? "gradient x activation" : a.hierarchical ? "hierarchical"
                                                                                        : "leave-one-out",
               (long long)S, a.hierarchical ? "sources" : a.sentences ? "sentences" : "documents", (long long)res->ablations,
               res->held_out ? " and 32 held out" : "", res->seconds_ablations);
        for (int64_t q = 0; q < S && q < a.top; q++) {
            int64_t s = (int64_t)order[2 * q + 1];
            int d = res->document[s];
            fold(doc[d] + res->start[s], res->end[s] - res->start[s], line, 60);
            printf("  %+10.4f  [%s] %s\n", res->score[s], a.docs[d], line);
        }
        if (a.quality) {
            printf("top-k drop: top 1 %.4f, top 3 %.4f, top 5 %.4f", res->top_k_drop[0], res->top_k_drop[1],
                   res->top_k_drop[2]);
            if (a.surrogate) printf(", LDS %.3f", res->lds);
            printf("\n");
        }
        if (a.json) printf("wrote %s\n", a.json);
        if (a.html) printf("wrote %s\n", a.html);
    }
    free(order);
    cJSON_Delete(root);
    cattr_context_result_free(res);
    free(pre);
    free(post);
    for (int d = 0; d < a.n_docs; d++) free(doc[d]);
    cattr_llm_free(m);
    return rc;
}
