/* explain_context.c - `cattr explain-context`: which documents and sentences of a retrieved context an answer is built
 * on. The prompt is the checkpoint's chat template (ChatML, Llama 3 and Mistral forms) or the user's --template around
 * the documents and the question (cattr_llm_chat_frame); the library scores the sources (cattr_llm_explain_context:
 * leave-one-out, ContextCite's surrogate, gradient x activation, AttriBoT's hierarchy and proxy, over
 * cattr_llm_score_removals; the quality numbers on request); this file reads the files, prints the terminal view and
 * writes the JSON, one request from the command line or a corpus of them (--requests, corpus.c). */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "corpus.h"
#include "llm_req.h"
#include "mpi_driver.h"
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
        "       cattr explain-context CHECKPOINT_DIR --requests FILE.jsonl --output RESULTS.jsonl [options]\n"
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
        "                       pieces of the --top-documents best; the others stay whole) or proxy (AttriBoT:\n"
        "                       leave-one-out with the smaller --proxy model over every source, then with this\n"
        "                       model over its --proxy-top best)\n"
        "  --proxy DIR          proxy: a smaller checkpoint with the same tokenizer (e.g. Qwen3-0.6B for Qwen3-8B)\n"
        "  --proxy-top N        proxy: the sources this model rescores (default: 5 or a fifth, the larger)\n"
        "  --top-documents N    hierarchical: the documents refined into pieces (default 3)\n"
        "  --sources S          documents (default), sentences (each document split after . ! ? or a blank line),\n"
        "                       lines, or FILE.json: one entry per --context, a list of [start, end] character spans\n"
        "                       of that document or of strings that spell it (the text around spans forms sources\n"
        "                       of its own); hierarchical refines into sentences unless told otherwise\n"
        "  --samples N          surrogate: random ablations (default 64)\n"
        "  --keep-prob P        surrogate: each source's chance to be kept in a mask (default 0.5)\n"
        "  --alpha A            surrogate: the Lasso's regularisation (default 0.01)\n"
        "  --seed N             surrogate: the masks' seed (cattr's generator; default 0)\n"
        "  --quality            also measure the top-k drop (the top 1, 3, 5 sources removed) and the linear\n"
        "                       datamodeling score (LDS: the scores' prediction of 32 held-out random ablations)\n"
        "  --per-token          also a score per source and answer token (JSON: answer_token_texts, token_scores)\n"
        "  --template TEXT      the prompt instead of the chat template: {context} and {question} are replaced\n"
        "  --top K              sources shown in the terminal view (default 5)\n"
        "  --json FILE          the sources, their spans and scores, the answer, timings\n"
        "  --html FILE          a page of the documents with the sources highlighted by score, and the ranking\n"
        "  --requests FILE.jsonl  corpus mode: one request per line, a JSON object with \"question\", \"contexts\"\n"
        "                       (the documents' texts) or \"context_files\" (their paths), and optionally \"id\",\n"
        "                       \"answer\", \"spans\" (as --sources FILE.json's list); each result is a line of\n"
        "                       --output (the --json object with the id), appended as it finishes: a rerun resumes;\n"
        "                       under mpirun -n N the ranks share the requests\n"
        "  --output FILE.jsonl  corpus mode's results\n"
        "  --device D, --dtype T  where and in what the passes run (cpu, float32)\n"
        "  --quiet              print nothing but errors\n");
}

typedef struct ctx_args {
    const char *dir, *question, *answer, *tmpl, *json, *html, *device, *proxy, *spans_file, *requests, *output;
    const char *docs[MAX_DOCS];
    int n_docs;
    cattr_context_method method;
    cattr_context_sources sources;
    bool quality, quiet, per_token;
    long long max_new, samples, seed, top, top_docs, proxy_top;
    double keep, alpha;
    cattr_dtype dtype;
} ctx_args;

static const char *const method_names[] = {"loo", "surrogate", "gradient", "hierarchical", "proxy"};
static const char *const source_names[] = {"documents", "sentences", "lines", "spans"};

static int parse(int argc, char **argv, ctx_args *a) {
    memset(a, 0, sizeof *a);
    a->max_new = 64, a->samples = 64, a->top = 5, a->keep = 0.5, a->alpha = 0.01, a->dtype = CATTR_FLOAT32;
    static const char *const valued[] = {"--question", "--context", "--answer", "--max-new", "--method", "--sources",
                                         "--samples", "--keep-prob", "--alpha", "--seed", "--template", "--top",
                                         "--top-documents", "--json", "--html", "--device", "--dtype", "--proxy",
                                         "--proxy-top", "--requests", "--output"};
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
        } else if (!strcmp(o, "--proxy")) {
            a->proxy = v;
        } else if (!strcmp(o, "--requests")) {
            a->requests = v;
        } else if (!strcmp(o, "--output") || !strcmp(o, "-o")) {
            a->output = v;
        } else if (!strcmp(o, "--method")) {
            int k = 0;
            while (k < 5 && strcmp(v, method_names[k])) k++;
            if (k == 5)
                return cli_usage_error("--method must be loo, surrogate, gradient, hierarchical or proxy, not '%s'", v);
            a->method = (cattr_context_method)k;
        } else if (!strcmp(o, "--sources")) {
            int k = 0;
            while (k < 3 && strcmp(v, source_names[k])) k++;
            size_t l = strlen(v);
            if (k == 3 && !(l > 5 && !strcmp(v + l - 5, ".json")))
                return cli_usage_error("--sources must be documents, sentences, lines or a FILE.json of spans, not '%s'", v);
            a->sources = (cattr_context_sources)k;
            a->spans_file = k == 3 ? v : NULL;
        } else if (!strcmp(o, "--max-new")) {
            if (!cli_int_arg(o, v, 1, 100000, &a->max_new)) return CLI_USAGE;
        } else if (!strcmp(o, "--samples")) {
            if (!cli_int_arg(o, v, 2, 1000000, &a->samples)) return CLI_USAGE;
        } else if (!strcmp(o, "--seed")) {
            if (!cli_int_arg(o, v, 0, INT64_MAX, &a->seed)) return CLI_USAGE;
        } else if (!strcmp(o, "--top-documents")) {
            if (!cli_int_arg(o, v, 1, MAX_DOCS, &a->top_docs)) return CLI_USAGE;
        } else if (!strcmp(o, "--proxy-top")) {
            if (!cli_int_arg(o, v, 1, 1000000, &a->proxy_top)) return CLI_USAGE;
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
        } else if (!strcmp(o, "--per-token")) {
            a->per_token = true;
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
    if (a->requests) {
        if (a->question || a->n_docs || a->answer || a->json || a->html || a->spans_file)
            return cli_usage_error("--requests takes the questions, contexts, answers and spans from its lines: give "
                                   "no --question, --context, --answer, --json, --html or --sources FILE.json");
        if (!a->output) return cli_usage_error("--requests needs --output RESULTS.jsonl");
    } else {
        if (a->output) return cli_usage_error("--output is corpus mode's (with --requests); give --json FILE");
        if (!a->question) return cli_usage_error("explain-context: --question is required");
        if (!a->n_docs) return cli_usage_error("explain-context: give at least one --context FILE");
    }
    if (a->method == CATTR_CONTEXT_PROXY && !a->proxy) return cli_usage_error("--method proxy needs --proxy DIR");
    if (a->proxy && a->method != CATTR_CONTEXT_PROXY) return cli_usage_error("--proxy goes with --method proxy");
    if (a->tmpl && (!strstr(a->tmpl, "{context}") || !strstr(a->tmpl, "{question}")))
        return cli_usage_error("--template must hold {context} and {question}");
    if (a->tmpl && strstr(a->tmpl, "{question}") < strstr(a->tmpl, "{context}"))
        return cli_usage_error("--template: {question} must come after {context} (the sources come first)");
    return 0;
}

/* The files a run reads and writes, checked on the rank that writes (no output is an input or another output). */
static bool check_paths(const ctx_args *a) {
    if (!cli_folder_in(a->dir, "the checkpoint folder")) return false;
    if (a->proxy && !cli_folder_in(a->proxy, "--proxy")) return false;
    for (int d = 0; d < a->n_docs; d++)
        if (!cli_file_in(a->docs[d], "--context")) return false;
    return (!a->spans_file || cli_file_in(a->spans_file, "--sources")) &&
           (!a->requests || cli_file_in(a->requests, "--requests")) && cli_file_out(a->json, "--json") &&
           cli_file_out(a->html, "--html") && cli_file_out(a->output, "--output");
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

/* ---- one request ---------------------------------------------------------------------------------------------- */

typedef struct ctx_job {
    cattr_llm *m, *proxy;
    const ctx_args *a;
    cattr_attr_params p;
} ctx_job;

/* A request's documents: texts (owned), names, and the spans when the sources are the caller's. */
typedef struct ctx_docs {
    int n;
    char *text[MAX_DOCS];
    const char *name[MAX_DOCS];
    char namebuf[MAX_DOCS][24];
    int64_t *spans, n_spans; /* triples (document, start, end) */
} ctx_docs;

static void docs_free(ctx_docs *d) {
    for (int i = 0; i < d->n; i++) free(d->text[i]);
    free(d->spans);
    memset(d, 0, sizeof *d);
}

/* The spans of a JSON list with one entry per document (--sources FILE.json's, a request's "spans"), each a list of
 * [start, end] character spans or strings that spell the document, into d->spans. */
static int docs_spans(ctx_docs *d, const cJSON *list, const char *what, char *err, size_t size) {
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) != d->n) {
        snprintf(err, size, "%s: give a list with one entry per document (%d), each a list of [start, end] character "
                 "spans or of strings that spell the document", what, d->n);
        return CLI_USAGE;
    }
    int rc = CLI_OK;
    for (int i = 0; i < d->n && rc == CLI_OK; i++) {
        const cJSON *e = cJSON_GetArrayItem(list, i);
        if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 0) continue; /* the document whole */
        char *js = cJSON_PrintUnformatted(e), w[1100], whole[64];
        int64_t *sp = NULL, ns = 0;
        snprintf(w, sizeof w, "%.1000s, entry %d", what, i);
        snprintf(whole, sizeof whole, "document %d", i + 1);
        rc = js ? llm_segments_json(js, w, whole, d->text[i], &sp, &ns, err, size)
                : llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
        free(js);
        int64_t *grown = rc == CLI_OK ? realloc(d->spans, (size_t)(3 * (d->n_spans + ns)) * sizeof *grown) : NULL;
        if (rc == CLI_OK && !grown) rc = llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
        for (int64_t q = 0; grown && q < ns; q++) {
            grown[3 * (d->n_spans + q)] = i, grown[3 * (d->n_spans + q) + 1] = sp[2 * q];
            grown[3 * (d->n_spans + q) + 2] = sp[2 * q + 1];
        }
        if (grown) d->spans = grown, d->n_spans += ns;
        free(sp);
    }
    return rc;
}

/* The JSON record of a result (the --json object). */
static cJSON *result_json(const ctx_job *j, const ctx_docs *d, const cattr_context_result *res) {
    const ctx_args *a = j->a;
    cJSON *root = cJSON_CreateObject();
    int64_t S = res->n_sources, n = res->n_answer;
    cJSON_AddStringToObject(root, "answer", res->answer);
    cJSON_AddStringToObject(root, "method", method_names[a->method]);
    cJSON_AddStringToObject(root, "sources_kind", a->method == CATTR_CONTEXT_HIERARCHICAL
                                                      ? (a->sources ? "documents and pieces" : "documents and sentences")
                                                      : source_names[a->sources]);
    cJSON_AddNumberToObject(root, "answer_logprob", res->answer_logprob);
    cJSON_AddNumberToObject(root, "prompt_tokens", (double)res->n_prompt);
    cJSON_AddNumberToObject(root, "answer_tokens", (double)n);
    cJSON_AddNumberToObject(root, "ablations", (double)res->ablations);
    cJSON_AddNumberToObject(root, "held_out", (double)res->held_out);
    if (res->rescored) cJSON_AddNumberToObject(root, "proxy_ablations", (double)res->proxy_ablations);
    if (res->token_score) {
        cJSON *at = cJSON_AddArrayToObject(root, "answer_token_texts");
        for (int64_t q = 0; q < n; q++) {
            char *t = NULL;
            cJSON_AddItemToArray(at, cJSON_CreateString(cattr_llm_decode(j->m, res->answer_ids + q, 1, 0, &t) == CATTR_OK
                                                            ? t : ""));
            free(t);
        }
    }
    int64_t *order = malloc((size_t)(S + 1) * sizeof *order);
    cJSON *arr = cJSON_AddArrayToObject(root, "sources");
    for (int64_t s = 0; s < S; s++) {
        cJSON *o = cJSON_CreateObject();
        int doc = res->document[s];
        cJSON_AddStringToObject(o, "document", d->name[doc]);
        cJSON_AddNumberToObject(o, "document_index", doc);
        cJSON_AddNumberToObject(o, "start", (double)res->start[s]);
        cJSON_AddNumberToObject(o, "end", (double)res->end[s]);
        char *text = strndup(d->text[doc] + res->start[s], (size_t)(res->end[s] - res->start[s]));
        cJSON_AddStringToObject(o, "text", text ? text : "");
        free(text);
        cJSON_AddNumberToObject(o, "score", res->score[s]);
        if (res->rescored) cJSON_AddBoolToObject(o, "rescored", res->rescored[s]);
        if (res->token_score) {
            cJSON *ts = cJSON_AddArrayToObject(o, "token_scores");
            for (int64_t q = 0; q < n; q++) cJSON_AddItemToArray(ts, cJSON_CreateNumber(res->token_score[s * n + q]));
        }
        cJSON_AddItemToArray(arr, o);
    }
    if (order && cattr_context_rank(res, order) == CATTR_OK) {
        cJSON *rk = cJSON_AddArrayToObject(root, "ranking");
        for (int64_t s = 0; s < S; s++) cJSON_AddItemToArray(rk, cJSON_CreateNumber((double)order[s]));
    }
    free(order);
    if (a->quality) {
        cJSON *q = cJSON_AddObjectToObject(root, "top_k_drop");
        cJSON_AddNumberToObject(q, "1", res->top_k_drop[0]);
        cJSON_AddNumberToObject(q, "3", res->top_k_drop[1]);
        cJSON_AddNumberToObject(q, "5", res->top_k_drop[2]);
        cJSON_AddNumberToObject(root, "lds", res->lds);
    }
    cJSON *tm = cJSON_AddObjectToObject(root, "timings_s");
    cJSON_AddNumberToObject(tm, "generation", res->seconds_generation);
    cJSON_AddNumberToObject(tm, "ablations", res->seconds_ablations);
    if (a->quality) cJSON_AddNumberToObject(tm, "quality", res->seconds_quality);
    if (res->rescored) cJSON_AddNumberToObject(tm, "proxy", res->seconds_proxy);
    return root;
}

/* One explanation of `question` over d (answer: NULL to generate): *res and, when rec is not NULL, its JSON. Returns
 * CLI_OK, or CLI_USAGE / CLI_FAIL with a message in err (and the library's status in *ast). */
static int ctx_explain(ctx_job *j, const char *question, const ctx_docs *d, const char *answer,
                       cattr_context_result **res, cJSON **rec, cattr_status *ast, char *err, size_t size) {
    const ctx_args *a = j->a;
    char *pre = NULL, *post = NULL;
    int rc = CLI_OK;
    *res = NULL;
    if (a->tmpl) { /* {context} ... {question} */
        const char *c = strstr(a->tmpl, "{context}"), *q = strstr(a->tmpl, "{question}");
        pre = strndup(a->tmpl, (size_t)(c - a->tmpl));
        post = malloc(strlen(a->tmpl) + strlen(question) + 1);
        if (post) sprintf(post, "%.*s%s%s", (int)(q - c - 9), c + 9, question, q + 10);
        if (!pre || !post) rc = llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
    } else if (cattr_llm_chat_frame(a->dir, question, &pre, &post) != CATTR_OK) {
        snprintf(err, size, "%s; give --template with {context} and {question}", cattr_last_error());
        rc = CLI_USAGE;
    }
    cattr_context_request r = {.prefix = pre, .suffix = post, .documents = (const char *const *)d->text,
                               .n_documents = d->n, .answer = answer, .max_new = (int)a->max_new,
                               .sources = a->sources, .spans = d->spans, .n_spans = d->n_spans, .method = a->method,
                               .top_documents = (int)a->top_docs, .samples = a->samples, .keep_prob = a->keep,
                               .alpha = a->alpha, .seed = (uint64_t)a->seed, .quality = a->quality,
                               .per_token = a->per_token, .proxy = j->proxy, .proxy_top = (int)a->proxy_top};
    if (rc == CLI_OK && (*ast = cattr_llm_explain_context(j->m, &j->p, &r, res)) != CATTR_OK)
        rc = llm_req_fail(err, size, CLI_FAIL, "context attribution failed", true);
    if (rc == CLI_OK && rec && !(*rec = result_json(j, d, *res)))
        rc = llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
    free(pre);
    free(post);
    return rc;
}

/* A line of --requests: "question", "contexts" (texts) or "context_files" (paths: read only when `files`), "answer",
 * "spans" (as --sources FILE.json's list), "id". Fills d (the documents; their spans when given: *spans_given) and
 * the borrowed *question and *answer. Returns CLI_OK, or CLI_USAGE / CLI_FAIL with a message in err. */
static int ctx_parse(const cJSON *rq, bool files, ctx_docs *d, const char **question, const char **answer,
                     bool *spans_given, char *err, size_t size) {
    static const char *const known[] = {"id", "question", "contexts", "context_files", "answer", "spans"};
    const cJSON *it;
    *spans_given = false;
    if (!cJSON_IsObject(rq)) return snprintf(err, size, "the line is not a JSON object"), CLI_USAGE;
    if (!cli_json_known_fields(rq, known, sizeof known / sizeof *known,
                               "question, contexts or context_files, answer, spans, id", err, size))
        return CLI_USAGE;
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(rq, "question"), *an = cJSON_GetObjectItemCaseSensitive(rq, "answer");
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(rq, "contexts"), *cf = cJSON_GetObjectItemCaseSensitive(rq, "context_files");
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(rq, "spans");
    if (!cJSON_IsString(q) || !q->valuestring[0])
        return snprintf(err, size, "'question' must be a non-empty string"), CLI_USAGE;
    if (an && !cJSON_IsString(an)) return snprintf(err, size, "'answer' must be a string"), CLI_USAGE;
    if (!ct == !cf) return snprintf(err, size, "give either 'contexts' (texts) or 'context_files' (paths)"), CLI_USAGE;
    const cJSON *list = ct ? ct : cf;
    const char *lname = ct ? "contexts" : "context_files";
    int nd = cJSON_IsArray(list) ? cJSON_GetArraySize(list) : 0;
    if (nd < 1 || nd > MAX_DOCS)
        return snprintf(err, size, "'%s' must be a list of 1 to %d strings", lname, MAX_DOCS), CLI_USAGE;
    cJSON_ArrayForEach(it, list) {
        if (!cJSON_IsString(it) || !it->valuestring[0])
            return snprintf(err, size, "'%s' entry %d is not a non-empty string", lname, d->n), CLI_USAGE;
        char *t = ct ? cx_strdup(it->valuestring) : files ? read_text(it->valuestring) : cx_strdup("x");
        if (!t && ct) return llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
        if (!t) return snprintf(err, size, "context_files entry %d: cannot read '%.900s'", d->n, it->valuestring), CLI_USAGE;
        d->text[d->n] = t;
        if (ct) snprintf(d->namebuf[d->n], sizeof d->namebuf[d->n], "context %d", d->n + 1);
        d->name[d->n] = ct ? d->namebuf[d->n] : it->valuestring;
        d->n++;
        if (!t[0]) return snprintf(err, size, "document %d is empty", d->n), CLI_USAGE;
    }
    *question = q->valuestring;
    *answer = an ? an->valuestring : NULL;
    *spans_given = sp != NULL;
    return sp ? docs_spans(d, sp, "'spans'", err, size) : CLI_OK;
}

/* A request line (files: its context_files are read) parsed (ctx_parse) and explained. */
static int ctx_answer_line(ctx_job *j, const cJSON *rq, bool files, cJSON **rec, cattr_status *ast, char *err,
                           size_t size) {
    ctx_docs *d = calloc(1, sizeof *d);
    if (!d) return llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
    const char *question = NULL, *answer = NULL;
    bool spans = false;
    int rc = ctx_parse(rq, files, d, &question, &answer, &spans, err, size);
    if (rc == CLI_OK && spans && j->a->sources != CATTR_CONTEXT_SPANS && j->a->sources != CATTR_CONTEXT_DOCUMENTS) {
        snprintf(err, size, "'spans' goes with the default --sources (documents)");
        rc = CLI_USAGE;
    }
    ctx_args a2 = *j->a; /* a request's spans make its sources the spans */
    ctx_job j2 = *j;
    if (spans) a2.sources = CATTR_CONTEXT_SPANS, j2.a = &a2;
    cattr_context_result *res = NULL;
    if (rc == CLI_OK) rc = ctx_explain(&j2, question, d, answer, &res, rec, ast, err, size);
    cattr_context_result_free(res);
    docs_free(d);
    free(d);
    return rc;
}

/* A line of --requests (corpus_answer_fn) */
static int ctx_answer(void *user, const cJSON *rq, cJSON **rec, cattr_status *ast, char *err, size_t size) {
    return ctx_answer_line(user, rq, true, rec, ast, err, size);
}

/* cattr serve: the options a request body may give beside its line's fields, to explain-context's own */
static const struct {
    const char *key, *flag;
    char kind; /* 's' a string, 'i' an integer, 'n' a number, 'b' a flag given when true */
} MEM_OPTS[] = {{"method", "--method", 's'},       {"sources", "--sources", 's'},
                {"samples", "--samples", 'i'},     {"keep_prob", "--keep-prob", 'n'},
                {"alpha", "--alpha", 'n'},         {"seed", "--seed", 'i'},
                {"max_new_tokens", "--max-new", 'i'}, {"top_documents", "--top-documents", 'i'},
                {"template", "--template", 's'},   {"dtype", "--dtype", 's'},
                {"quality", "--quality", 'b'},     {"per_token", "--per-token", 'b'}};
#define N_MEM_OPTS (int)(sizeof MEM_OPTS / sizeof MEM_OPTS[0])

int cli_context_answer_mem(cattr_llm *m, const char *dir, const cJSON *rq, const volatile int *cancel, char **json,
                           cattr_status *ast, char *err, size_t size) {
    static const char *const line_fields[] = {"id", "question", "contexts", "answer", "spans"};
    *json = NULL;
    *ast = CATTR_OK;
    err[0] = '\0';
    if (!cJSON_IsObject(rq)) return snprintf(err, size, "the body must be a JSON object"), CLI_USAGE;
    if (cJSON_GetObjectItemCaseSensitive(rq, "context_files"))
        return snprintf(err, size, "'context_files' would read files on the server: send the texts as 'contexts'"),
               CLI_USAGE;
    /* explain-context's command line in corpus mode (no file is opened here), the body's options on it */
    char *argv[64], vals[N_MEM_OPTS][64];
    int argc = 0;
    argv[argc++] = "explain-context";
    argv[argc++] = (char *)dir;
    argv[argc++] = "--requests";
    argv[argc++] = "-";
    argv[argc++] = "--output";
    argv[argc++] = "-";
    cJSON *line = cJSON_CreateObject();
    if (!line) return llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
    int rc = CLI_OK;
    for (const cJSON *f = rq->child; f && rc == CLI_OK; f = f->next) {
        size_t l = 0;
        while (l < sizeof line_fields / sizeof *line_fields && strcmp(line_fields[l], f->string)) l++;
        if (l < sizeof line_fields / sizeof *line_fields) { /* the request line's own */
            cJSON *c = cJSON_Duplicate(f, true);
            if (!c) rc = llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
            else cJSON_AddItemToObject(line, f->string, c);
            continue;
        }
        int k = 0;
        while (k < N_MEM_OPTS && strcmp(MEM_OPTS[k].key, f->string)) k++;
        bool twice = false; /* cJSON keeps a repeated key: each would add to argv */
        for (const cJSON *g = rq->child; g != f && !twice; g = g->next) twice = !strcmp(g->string, f->string);
        if (twice) {
            snprintf(err, size, "'%.64s' is given twice", f->string);
            rc = CLI_USAGE;
        } else if (k == N_MEM_OPTS) {
            snprintf(err, size, "unknown field '%.64s' (known: id, question, contexts, answer, spans, method, sources, "
                     "samples, keep_prob, alpha, seed, max_new_tokens, top_documents, template, dtype, quality, "
                     "per_token)", f->string);
            rc = CLI_USAGE;
        } else if (MEM_OPTS[k].kind == 'b') {
            if (!cJSON_IsBool(f)) snprintf(err, size, "'%s' must be true or false", f->string), rc = CLI_USAGE;
            else if (cJSON_IsTrue(f)) argv[argc++] = (char *)MEM_OPTS[k].flag;
        } else {
            const char *v = NULL;
            if (MEM_OPTS[k].kind == 's' && cJSON_IsString(f)) v = f->valuestring;
            else if (MEM_OPTS[k].kind != 's' && cJSON_IsNumber(f))
                snprintf(vals[k], sizeof vals[k], MEM_OPTS[k].kind == 'i' ? "%.0f" : "%.17g", f->valuedouble), v = vals[k];
            if (!v)
                snprintf(err, size, "'%s' must be %s", f->string, MEM_OPTS[k].kind == 's' ? "a string" : "a number"),
                    rc = CLI_USAGE;
            else if (MEM_OPTS[k].kind == 'i' && f->valuedouble != floor(f->valuedouble))
                snprintf(err, size, "'%s' must be an integer", f->string), rc = CLI_USAGE;
            else if (!strcmp(f->string, "sources") && strcmp(v, "documents") && strcmp(v, "sentences") && strcmp(v, "lines"))
                snprintf(err, size, "'sources' must be documents, sentences or lines here (give your own spans as "
                         "'spans')"), rc = CLI_USAGE;
            else if (!strcmp(f->string, "method") && !strcmp(v, "proxy"))
                snprintf(err, size, "the proxy method is not served (it needs a second checkpoint)"), rc = CLI_USAGE;
            else argv[argc++] = (char *)MEM_OPTS[k].flag, argv[argc++] = (char *)v;
        }
    }
    ctx_args a;
    if (rc == CLI_OK) { /* its messages go where cli_capture says (serve: into err) */
        rc = parse(argc, argv, &a);
        if (rc < 0) rc = CLI_USAGE;
    }
    if (rc == CLI_OK && m) { /* m NULL: the body checked only (the fuzz harness) */
        ctx_job j = {.m = m, .a = &a, .p = cattr_attr_default_params(CATTR_METHOD_FEATURE_ABLATION)};
        j.p.dtype = a.dtype;
        j.p.cancel = cancel;
        cJSON *rec = NULL;
        rc = ctx_answer_line(&j, line, false, &rec, ast, err, size);
        if (rc == CLI_OK && !(*json = cJSON_PrintUnformatted(rec)))
            rc = llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
        cJSON_Delete(rec);
    }
    cJSON_Delete(line);
    return rc;
}

int cli_context_fuzz(const unsigned char *data, size_t size) {
    cJSON *rq = cJSON_ParseWithLength((const char *)data, size);
    ctx_docs *d = calloc(1, sizeof *d);
    const char *question, *answer;
    bool spans;
    char err[2048];
    if (rq && d) (void)ctx_parse(rq, false, d, &question, &answer, &spans, err, sizeof err);
    char *json = NULL;
    cattr_status ast;
    char cap[2048];
    cli_capture(cap, sizeof cap); /* the parser's messages, not on stderr */
    if (rq) (void)cli_context_answer_mem(NULL, "dir", rq, NULL, &json, &ast, err, sizeof err); /* serve's body */
    cli_capture(NULL, 0);
    free(json);
    if (d) docs_free(d);
    free(d);
    cJSON_Delete(rq);
    return 0;
}

/* The options of a command line that shape a result, for a results file's header. */
static cJSON *result_options(int argc, char **argv) {
    static const char *const flags[] = {"--quality", "--per-token", "--quiet", "-q", NULL};
    static const char *const skip[] = {"model", "--requests", "--output", "-o", "--quiet", "--top", NULL};
    return cli_options_json(argc, argv, flags, skip);
}

/* ---- the command ------------------------------------------------------------------------------------------------ */

/* The terminal view of one result. */
static void show(const ctx_args *a, const ctx_docs *d, const cattr_context_result *res) {
    char line[96];
    int64_t S = res->n_sources, *order = malloc((size_t)(S + 1) * sizeof *order);
    if (!order || cattr_context_rank(res, order) != CATTR_OK) {
        free(order);
        fprintf(stderr, "cattr: out of memory\n");
        return;
    }
    fold(res->answer, (int64_t)strlen(res->answer), line, 72);
    printf("answer (%lld tokens, log-probability %.4f): %s\n", (long long)res->n_answer, res->answer_logprob, line);
    static const char *const long_names[] = {"leave-one-out", "surrogate", "gradient x activation", "hierarchical",
                                             "proxy"};
    printf("%s over %lld %s: %lld ablations", long_names[a->method], (long long)S,
           a->method == CATTR_CONTEXT_HIERARCHICAL ? "sources" : source_names[a->sources], (long long)res->ablations);
    if (res->rescored) printf(" and %lld with the proxy", (long long)res->proxy_ablations);
    printf(" (%.2f s)\n", res->seconds_ablations);
    for (int64_t q = 0; q < S && q < a->top; q++) {
        int64_t s = order[q];
        int doc = res->document[s];
        fold(d->text[doc] + res->start[s], res->end[s] - res->start[s], line, 56);
        printf("  %+10.4f%s [%s] %s\n", res->score[s], res->rescored ? (res->rescored[s] ? "  " : " p") : "",
               d->name[doc], line);
    }
    if (res->rescored) printf("  (p: the proxy's score; the others rescored by this model)\n");
    if (a->quality) {
        printf("top-k drop: top 1 %.4f, top 3 %.4f, top 5 %.4f", res->top_k_drop[0], res->top_k_drop[1],
               res->top_k_drop[2]);
        printf(", LDS %.3f (%lld held-out ablations, %.2f s)\n", res->lds, (long long)res->held_out,
               res->seconds_quality);
    }
    free(order);
}

/* One request from the command line: the files read, the explanation, the terminal view, --json and --html. */
static int explain_one(ctx_job *j) {
    const ctx_args *a = j->a;
    ctx_docs d;
    memset(&d, 0, sizeof d);
    int rc = CLI_OK;
    for (int i = 0; i < a->n_docs && rc == CLI_OK; i++) {
        if (!(d.text[i] = read_text(a->docs[i]))) rc = cli_usage_error("--context %s: cannot read it", a->docs[i]);
        else if (!d.text[i][0]) rc = cli_usage_error("--context %s is empty", a->docs[i]);
        d.name[i] = a->docs[i];
        d.n = i + 1;
    }
    char err[2048];
    if (rc == CLI_OK && a->spans_file) {
        char *js = read_text(a->spans_file);
        cJSON *list = js ? cJSON_Parse(js) : NULL;
        char what[1100];
        snprintf(what, sizeof what, "--sources %.1024s", a->spans_file);
        if (!list) {
            rc = cli_usage_error("--sources %s is not readable JSON", a->spans_file);
        } else if ((rc = docs_spans(&d, list, what, err, sizeof err)) != CLI_OK) {
            char esc[2048];
            cx_escape_text(err, esc, sizeof esc);
            fprintf(stderr, "cattr: %s\n", esc);
        }
        cJSON_Delete(list);
        free(js);
    }
    cattr_context_result *res = NULL;
    cJSON *root = NULL;
    cattr_status ast = CATTR_OK;
    if (rc == CLI_OK) {
        rc = ctx_explain(j, a->question, &d, a->answer, &res, &root, &ast, err, sizeof err);
        if (rc != CLI_OK) {
            char esc[2048];
            cx_escape_text(err, esc, sizeof esc);
            fprintf(stderr, "cattr: %s\n", esc);
        }
    }
    cattr_status st = CATTR_OK;
    if (rc == CLI_OK && a->json) {
        char *text = cJSON_Print(root);
        st = text ? cli_write_text_file(a->json, text) : cx_fail(CATTR_ERR_NO_MEMORY, "out of memory");
        free(text);
        if (st != CATTR_OK) rc = cli_error(st, "cannot write --json");
    }
    if (rc == CLI_OK && a->html) {
        char *page = NULL;
        st = cx_html_context(a->question, res->answer, method_names[a->method], d.n, d.name,
                             (const char *const *)d.text, res->n_sources, res->document, res->start, res->end,
                             res->score, &page);
        if (st == CATTR_OK) st = cli_write_text_file(a->html, page);
        free(page);
        if (st != CATTR_OK) {
            rc = cli_error(st, "cannot write --html");
            if (a->json) remove(a->json);
        }
    }
    if (rc == CLI_OK && !a->quiet) {
        show(a, &d, res);
        if (a->json) printf("wrote %s\n", a->json);
        if (a->html) printf("wrote %s\n", a->html);
    }
    cJSON_Delete(root);
    cattr_context_result_free(res);
    docs_free(&d);
    return rc;
}

int cmd_explain_context(int argc, char **argv) {
    ctx_args a;
    int rc = parse(argc, argv, &a);
    if (rc) return rc < 0 ? CLI_OK : rc;
    bool corpus = a.requests != NULL;
    if (corpus && mpi_driver_start() != 0) { /* corpus mode runs on every rank (mpi_driver.h) */
        fprintf(stderr, "cattr: MPI cannot start (CATTR_NO_MPI=1 runs without it)\n");
        return CLI_FAIL;
    }
    rc = mpi_driver_rank() == 0 && !check_paths(&a) ? CLI_USAGE : CLI_OK;
    if (corpus) {
        rc = mpi_driver_max(rc);
        const char *agree[2] = {a.dir, a.proxy};
        if (rc == CLI_OK && !cli_ranks_agree(argc, argv, agree, a.proxy ? 2 : 1)) rc = CLI_USAGE;
    }
    ctx_job j = {.a = &a, .p = cattr_attr_default_params(CATTR_METHOD_FEATURE_ABLATION)};
    j.p.dtype = a.dtype;
    j.p.device = a.device;
    cattr_status st = CATTR_OK;
    if (rc == CLI_OK) {
        st = cattr_llm_load(a.dir, &j.m);
        if (st == CATTR_OK && a.device) st = cattr_llm_set_device(j.m, a.device);
        if (st != CATTR_OK) rc = cli_error(st, "cannot load the checkpoint");
    }
    if (rc == CLI_OK && a.proxy) {
        st = cattr_llm_load(a.proxy, &j.proxy);
        if (st == CATTR_OK && a.device) st = cattr_llm_set_device(j.proxy, a.device);
        if (st != CATTR_OK) rc = cli_error(st, "cannot load the --proxy checkpoint");
    }
    if (corpus) { /* every rank loaded the models; they go on only if all did */
        int worst = mpi_driver_max(rc);
        if (worst != CLI_OK && rc == CLI_OK && mpi_driver_rank() == 0)
            fprintf(stderr, "cattr: another rank cannot start (see its message)\n");
        cJSON *options = worst == CLI_OK ? result_options(argc, argv) : NULL;
        if (worst == CLI_OK && !options) worst = cli_error(CATTR_ERR_NO_MEMORY, "out of memory");
        corpus_job job = {"explain-context", ctx_answer, &j};
        rc = worst == CLI_OK ? cli_corpus_run(&job, a.dir, a.requests, a.output, options, a.quiet) : worst;
        cJSON_Delete(options);
    } else if (rc == CLI_OK) {
        rc = explain_one(&j);
    }
    cattr_llm_free(j.proxy);
    cattr_llm_free(j.m);
    if (corpus) mpi_driver_stop();
    return rc;
}
