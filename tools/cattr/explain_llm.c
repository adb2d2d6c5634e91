/* explain_llm.c - `cattr explain-llm`: which prompt tokens made a language model predict a continuation. Writes
 * Captum's LLMAttributionResult fields as JSON, a self-contained HTML heatmap, and a terminal view. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "mpi_driver.h"

#include "io/fileutil.h"
#include "viz/heatmap.h"

#include "core/core.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

static void help(FILE *f) {
    fprintf(f,
        "usage: cattr explain-llm DIR (--prompt TEXT | --prompt-ids 1,2,3) [--target TEXT | --target-ids 4,5] [options]\n"
        "       cattr explain-llm DIR --prompts REQUESTS.jsonl --output RESULTS.jsonl [options]\n"
        "\n"
        "Attributes the log-probability of each target token (teacher forcing) to the prompt tokens of a Hugging Face\n"
        "checkpoint folder (config.json, *.safetensors, tokenizer.json): qwen3, llama, qwen2 or mistral.\n"
        "Without a target, the greedy continuation (--max-new-tokens) is generated and attributed.\n"
        "\n"
        "  --method M              layer-ig (default) | layer-gradient-x-activation | feature-ablation |\n"
        "                          shapley-value-sampling | lime | kernel-shap (seq_attr only, as in Captum)\n"
        "  --template T --slot V...  a text template with '{}' slots and their values: one column per slot\n"
        "                          (feature-ablation); --slot-baseline V per slot (default: the empty string)\n"
        "  --steps N               layer-ig: integration steps (default 50)\n"
        "  --quadrature Q          layer-ig: gausslegendre (default) | riemann_left | riemann_right | riemann_middle |\n"
        "                          riemann_trapezoid\n"
        "  --baseline B            zeros (layer-ig default: the zero embedding) | pad (the pad token; the ablation\n"
        "                          methods' default) | a token id\n"
        "  --n-samples N           shapley-value-sampling: permutations (default 25)\n"
        "  --seed N                generator key for the permutations (default 0)\n"
        "  --max-new-tokens N      tokens generated when there is no target (default 8)\n"
        "  --dtype D               float32 (default) | float64\n"
        "  --internal-batch-size N layer-ig: rows per chunk of the path (default: from --max-memory)\n"
        "  --split steps|features|samples\n"
        "                          under mpirun: one attribution's work over the ranks, combined on rank 0 into\n"
        "                          one process's numbers: layer-ig's steps, feature-ablation's perturbations (with\n"
        "                          --perturbations-per-eval), the samples of shapley-value-sampling, lime and\n"
        "                          kernel-shap (docs/CLI.md)\n"
        "  --max-memory SIZE       activation memory budget, e.g. 2G (default: 1/4 of free RAM, at most 896M)\n"
        "  --device NAME           cpu (default) | cpu-check (reference kernels, protected memory) | cuda[:N]\n"
        "  --precision P           highest (default: float32 throughout) | high (bfloat16 inputs of the layers'\n"
        "                          projections, float32 accumulation; AVX-512 BF16 CPUs, float32 only)\n"
        "  --precision-error       also run at the other precision and print the error of high against highest\n"
        "  --perturbations-per-eval N  perturbation methods: sequences per forward pass (default: from --max-memory;\n"
        "                          1 = one forward per perturbed sequence, as Captum's default)\n"
        "  --no-prefix-cache       feature-ablation: run every ablated sequence in full (default: the unchanged prefix\n"
        "                          is computed once and only the positions from the ablated token on are run)\n"
        "  --prompts FILE.jsonl    corpus mode: one request per line, a JSON object with \"id\", \"prompt\" or\n"
        "                          \"prompt_ids\", optionally \"target\" or \"target_ids\", \"template\" and \"slots\"\n"
        "                          (\"slot_baselines\"), and method options (\"method\", \"steps\", \"quadrature\",\n"
        "                          \"n_samples\", \"seed\", \"baseline\", \"max_new_tokens\", \"perturbations_per_eval\");\n"
        "                          the other options are every line's defaults. One result per line in --output\n"
        "                          RESULTS.jsonl (the JSON below plus \"id\"; {\"id\", \"error\", \"status\"} for a request\n"
        "                          that fails, and the run goes on), appended and synced one by one: a rerun skips the\n"
        "                          ids already there. Exit code 1 when any request failed. Under mpirun -n N (a build\n"
        "                          with MPI) the N ranks share the requests and rank 0 writes the same file\n"
        "  --output FILE.json      input_tokens, input_ids, output_tokens, output_ids, seq_attr, token_attr,\n"
        "                          target_logprobs, method, args, convergence_delta\n"
        "  --html FILE             a heatmap page that opens in any browser without network access\n"
        "  --runs N                run the attribution N times; print 'time: first=<s> warm_median=<s>'\n"
        "  --quiet                 no terminal view\n");
}

static int parse_ids(const char *s, int64_t **out, int64_t *n) {
    size_t cap = strlen(s) / 2 + 2;
    int64_t *v = malloc(cap * sizeof *v);
    int64_t k = 0;
    const char *p = s;
    while (v && *p) {
        char *end;
        long long x = strtoll(p, &end, 10);
        if (end == p || (size_t)k >= cap) {
            free(v);
            return -1;
        }
        v[k++] = x;
        while (*end == ' ') end++;
        if (*end == ',') end++;
        else if (*end) {
            free(v);
            return -1;
        }
        p = end;
    }
    *out = v;
    *n = k;
    return v ? 0 : -1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- output ------------------------------------------------------------------------------------------------ */

static cJSON *num_array(const double *v, int64_t n) {
    cJSON *a = cJSON_CreateArray();
    for (int64_t i = 0; i < n; i++) cJSON_AddItemToArray(a, isnan(v[i]) ? cJSON_CreateNull() : cJSON_CreateNumber(v[i]));
    return a;
}

static void terminal_view(char **in_tok, int64_t T, char **out_tok, int64_t n, const double *seq, const double *tok) {
    double m = 0;
    for (int64_t i = 0; i < n * T; i++) m = fmax(m, fabs(tok[i]));
    for (int64_t i = 0; i < T; i++) m = fmax(m, fabs(seq[i]));
    if (m == 0) m = 1;
    bool ansi = isatty(STDOUT_FILENO);
    printf("%-16s", "");
    for (int64_t i = 0; i < T; i++) printf(" %8.8s", in_tok[i]);
    printf("\n");
    for (int64_t k = -1; k < n; k++) {
        if (k >= 0 && T > 0 && isnan(tok[k * T])) continue; /* Lime and KernelShap give no per-token rows */
        printf("%-16.16s", k < 0 ? "(all targets)" : out_tok[k]);
        for (int64_t i = 0; i < T; i++) {
            double v = k < 0 ? seq[i] : tok[k * T + i];
            if (ansi) {
                unsigned char rgb[3];
                cx_heatmap_colour(v, m, rgb);
                printf(" \x1b[48;2;%d;%d;%dm\x1b[30m%8.3f\x1b[0m", rgb[0], rgb[1], rgb[2], v);
            } else {
                printf(" %8.3f", v);
            }
        }
        printf("\n");
    }
}

/* A token's display text: the decoded piece with control characters made visible. */
static char *token_text(const cattr_llm *m, int64_t id) {
    char buf[256];
    cattr_llm_token_text(m, id, buf, sizeof buf);
    for (char *c = buf; *c; c++)
        if ((unsigned char)*c < 0x20) *c = ' ';
    return strdup(buf);
}

/* ---- one request --------------------------------------------------------------------------------------------- */

/* What one attribution is asked for: the command line's options, or a line of a --prompts file over them. */
typedef struct llm_req {
    const char *prompt, *prompt_ids, *target, *target_ids, *baseline, *tmpl;
    const char *slots[16], *slot_bases[16];
    int n_slots, n_slot_bases;
    int max_new;
} llm_req;

/* A request's tokens and results. */
typedef struct llm_out {
    char *filled; /* the template with its slots filled */
    int64_t *ids, *tg, T, n, baseline_token;
    bool generated;
    double *seq, *tok, *lp, *delta;
    char **in_tok, **out_tok;
} llm_out;

static void out_free(llm_out *o) {
    for (int64_t i = 0; o->in_tok && i < o->T; i++) free(o->in_tok[i]);
    for (int64_t k = 0; o->out_tok && k < o->n; k++) free(o->out_tok[k]);
    free(o->in_tok);
    free(o->out_tok);
    free(o->filled);
    free(o->ids);
    free(o->tg);
    free(o->seq);
    free(o->tok);
    free(o->lp);
    free(o->delta);
    memset(o, 0, sizeof *o);
}

/* Message of a failed step: `what` and the library's error (or just `what`). */
static int req_fail(char *err, size_t size, int code, const char *what, bool lib) {
    if (lib) snprintf(err, size, "%s: %s", what, cattr_last_error());
    else snprintf(err, size, "%s", what);
    return code;
}

/* Checks a request's form (CLI_USAGE with a message in err when it is not one attribution). */
static int req_check(const cattr_attr_params *p, const llm_req *r, char *err, size_t size) {
    if (r->tmpl) {
        if (r->prompt || r->prompt_ids) return req_fail(err, size, CLI_USAGE, "a template replaces the prompt", false);
        if (r->n_slots < 1) return req_fail(err, size, CLI_USAGE, "a template needs a slot value per '{}'", false);
        if (r->n_slot_bases && r->n_slot_bases != r->n_slots) {
            snprintf(err, size, "give one slot baseline per slot (%d slots, %d baselines)", r->n_slots, r->n_slot_bases);
            return CLI_USAGE;
        }
        if (p->method != CATTR_METHOD_FEATURE_ABLATION)
            return req_fail(err, size, CLI_USAGE, "a template works with the method feature-ablation", false);
    } else if (!!r->prompt + !!r->prompt_ids != 1) {
        return req_fail(err, size, CLI_USAGE, "give exactly one of a prompt and prompt ids", false);
    }
    if (r->target && r->target_ids) return req_fail(err, size, CLI_USAGE, "give at most one of a target and target ids", false);
    return CLI_OK;
}

/* Tokens of the prompt and the target (generated greedily when none is given), the baseline, result arrays. Returns
 * CLI_OK, or CLI_USAGE / CLI_FAIL with a message in err. */
static int req_prepare(cattr_llm *m, const cattr_attr_params *p, const llm_req *r, llm_out *o, char *err, size_t size) {
    memset(o, 0, sizeof *o);
    o->baseline_token = -1;
    int rc = req_check(p, r, err, size);
    if (rc != CLI_OK) return rc;
    const char *prompt = r->prompt;
    if (r->tmpl) { /* the prompt is the template with its slots filled */
        size_t len = strlen(r->tmpl) + 1;
        for (int k = 0; k < r->n_slots; k++) len += strlen(r->slots[k]);
        o->filled = malloc(len);
        if (!o->filled) return req_fail(err, size, CLI_FAIL, "out of memory", false);
        size_t at = 0;
        int k = 0;
        for (const char *c = r->tmpl; *c;) {
            if (c[0] == '{' && c[1] == '}' && k < r->n_slots) {
                size_t l = strlen(r->slots[k]);
                memcpy(o->filled + at, r->slots[k++], l);
                at += l;
                c += 2;
            } else {
                o->filled[at++] = *c++;
            }
        }
        o->filled[at] = 0;
        prompt = o->filled;
    }
    cattr_status st = CATTR_OK;
    if (prompt) st = cattr_llm_encode(m, prompt, &o->ids, &o->T);
    else if (parse_ids(r->prompt_ids, &o->ids, &o->T))
        return req_fail(err, size, CLI_USAGE, "the prompt ids must be integers such as 1,2,3", false);
    if (st != CATTR_OK) return req_fail(err, size, cli_error_code(st), "cannot tokenize the prompt", true);
    if (o->T < 1) return req_fail(err, size, CLI_USAGE, "the prompt tokenizes to nothing", false);
    if (r->target) {
        st = cattr_llm_encode(m, r->target, &o->tg, &o->n);
        if (st != CATTR_OK) return req_fail(err, size, cli_error_code(st), "cannot tokenize the target", true);
        if (o->n < 1) {
            snprintf(err, size, "the target '%s' tokenizes to nothing", r->target);
            return CLI_USAGE;
        }
    } else if (r->target_ids) {
        if (parse_ids(r->target_ids, &o->tg, &o->n) || o->n < 1)
            return req_fail(err, size, CLI_USAGE, "the target ids must be integers such as 4,5", false);
    } else {
        st = cattr_llm_generate(m, p->dtype, o->ids, o->T, r->max_new, &o->tg, &o->n);
        if (st != CATTR_OK) return req_fail(err, size, cli_error_code(st), "generation failed", true);
        o->generated = true;
    }
    if (r->baseline) {
        long long x;
        if (!strcmp(r->baseline, "zeros")) o->baseline_token = -1;
        else if (!strcmp(r->baseline, "pad")) o->baseline_token = cattr_llm_pad_token(m);
        else if (cli_parse_int(r->baseline, &x) && x >= 0) o->baseline_token = x;
        else {
            snprintf(err, size, "the baseline must be zeros, pad or a token id: '%s'", r->baseline);
            return CLI_USAGE;
        }
    }
    if (r->tmpl) o->T = r->n_slots;
    o->seq = calloc((size_t)o->T, sizeof *o->seq);
    o->tok = calloc((size_t)(o->n * o->T), sizeof *o->tok);
    o->lp = calloc((size_t)o->n, sizeof *o->lp);
    o->delta = calloc((size_t)o->n, sizeof *o->delta);
    if (!o->seq || !o->tok || !o->lp || !o->delta) return req_fail(err, size, CLI_FAIL, "out of memory", false);
    return CLI_OK;
}

/* The attribution of a prepared request (into o's arrays; seq and tok also into the given ones when not NULL). */
static cattr_status req_attribute(cattr_llm *m, const cattr_attr_params *p, const llm_req *r, llm_out *o, double *seq,
                                  double *tok, double *lp, double *delta) {
    seq = seq ? seq : o->seq;
    tok = tok ? tok : o->tok;
    lp = lp ? lp : o->lp;
    delta = delta ? delta : o->delta;
    if (r->tmpl) { /* one column per slot */
        for (int64_t k = 0; k < o->n; k++) lp[k] = delta[k] = NAN;
        return cattr_llm_attribute_template(m, p, r->tmpl, r->slots, r->n_slot_bases ? r->slot_bases : NULL,
                                            r->n_slots, o->tg, o->n, seq, tok);
    }
    cattr_llm_call call = cattr_llm_call_make(o->ids, o->T, o->tg, o->n);
    call.baseline_token = o->baseline_token;
    return cattr_llm_attribute(m, p, &call, seq, tok, lp, delta);
}

/* --split steps: the prepared request's LayerIG over the MPI ranks (cattr_llm_attribute_part on each, the parts
 * combined on rank 0 into o's arrays by cattr_llm_combine; cli_split_run). Every rank returns the same status. */
typedef struct llm_split {
    cattr_llm *m;
    const cattr_attr_params *p;
    const cattr_llm_call *call;
    llm_out *o;
} llm_split;

static cattr_status llm_split_part(void *user, int part, int n_parts, void **blob, size_t *len) {
    llm_split *s = user;
    return cattr_llm_attribute_part(s->m, s->p, s->call, part, n_parts, blob, len);
}

static cattr_status llm_split_combine(void *user, const void *const *blobs, const size_t *lens, int n) {
    llm_split *s = user;
    return cattr_llm_combine(s->m, s->p, s->call, blobs, lens, n, s->o->seq, s->o->tok, s->o->lp, s->o->delta);
}

static cattr_status req_attribute_split(cattr_llm *m, const cattr_attr_params *p, llm_out *o, bool quiet) {
    cattr_llm_call call = cattr_llm_call_make(o->ids, o->T, o->tg, o->n);
    call.baseline_token = o->baseline_token;
    llm_split s = {m, p, &call, o};
    return cli_split_run(llm_split_part, llm_split_combine, &s, o->n, quiet);
}

static int req_texts(const cattr_llm *m, const llm_req *r, llm_out *o, char *err, size_t size) {
    o->in_tok = calloc((size_t)o->T, sizeof *o->in_tok);
    o->out_tok = calloc((size_t)o->n, sizeof *o->out_tok);
    if (!o->in_tok || !o->out_tok) return req_fail(err, size, CLI_FAIL, "out of memory", false);
    for (int64_t i = 0; i < o->T; i++) o->in_tok[i] = r->tmpl ? strdup(r->slots[i]) : token_text(m, o->ids[i]);
    for (int64_t k = 0; k < o->n; k++) o->out_tok[k] = token_text(m, o->tg[k]);
    for (int64_t i = 0; i < o->T; i++)
        if (!o->in_tok[i]) return req_fail(err, size, CLI_FAIL, "out of memory", false);
    for (int64_t k = 0; k < o->n; k++)
        if (!o->out_tok[k]) return req_fail(err, size, CLI_FAIL, "out of memory", false);
    return CLI_OK;
}

static const char *method_cli_name(cattr_method mk) {
    return mk == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS ? "layer-ig"
           : mk == CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION ? "layer-gradient-x-activation"
           : mk == CATTR_METHOD_FEATURE_ABLATION ? "feature-ablation"
           : mk == CATTR_METHOD_LIME ? "lime"
           : mk == CATTR_METHOD_KERNEL_SHAP ? "kernel-shap" : "shapley-value-sampling";
}

/* The method of a --method value, or -1. */
static int method_arg(const char *v) {
    int mk = !strcmp(v, "layer-ig") ? CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS : cattr_method_from_name(v);
    if (mk != CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS && mk != CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION &&
        mk != CATTR_METHOD_FEATURE_ABLATION && mk != CATTR_METHOD_SHAPLEY_VALUE_SAMPLING && mk != CATTR_METHOD_LIME &&
        mk != CATTR_METHOD_KERNEL_SHAP)
        return -1;
    return mk;
}

/* The JSON of a result: input_tokens, input_ids, output_tokens, output_ids, seq_attr, token_attr, target_logprobs,
 * method, args, convergence_delta. */
static cJSON *result_json(const cattr_attr_params *p, const llm_out *o) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    cJSON *a = cJSON_AddArrayToObject(root, "input_tokens");
    for (int64_t i = 0; i < o->T; i++) cJSON_AddItemToArray(a, cJSON_CreateString(o->in_tok[i]));
    a = cJSON_AddArrayToObject(root, "input_ids");
    for (int64_t i = 0; i < o->T; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)o->ids[i]));
    a = cJSON_AddArrayToObject(root, "output_tokens");
    for (int64_t k = 0; k < o->n; k++) cJSON_AddItemToArray(a, cJSON_CreateString(o->out_tok[k]));
    a = cJSON_AddArrayToObject(root, "output_ids");
    for (int64_t k = 0; k < o->n; k++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)o->tg[k]));
    cJSON_AddItemToObject(root, "seq_attr", num_array(o->seq, o->T));
    if (p->method == CATTR_METHOD_LIME || p->method == CATTR_METHOD_KERNEL_SHAP) {
        cJSON_AddNullToObject(root, "token_attr"); /* Captum gives none for these */
    } else {
        a = cJSON_AddArrayToObject(root, "token_attr");
        for (int64_t k = 0; k < o->n; k++) cJSON_AddItemToArray(a, num_array(o->tok + k * o->T, o->T));
    }
    cJSON_AddItemToObject(root, "target_logprobs", num_array(o->lp, o->n));
    cJSON_AddStringToObject(root, "method", method_cli_name(p->method));
    cJSON *args = cJSON_AddObjectToObject(root, "args");
    cJSON_AddStringToObject(args, "dtype", cattr_dtype_name(p->dtype));
    cJSON_AddStringToObject(args, "precision", p->precision == CATTR_PRECISION_HIGH ? "high" : "highest");
    if (p->method == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS) {
        cJSON_AddNumberToObject(args, "n_steps", p->n_steps);
        cJSON_AddStringToObject(args, "method", cattr_quadrature_name(p->quadrature));
    }
    if (p->method == CATTR_METHOD_SHAPLEY_VALUE_SAMPLING) cJSON_AddNumberToObject(args, "n_samples", p->n_samples);
    if (o->baseline_token >= 0) cJSON_AddNumberToObject(args, "baseline_token", (double)o->baseline_token);
    else cJSON_AddStringToObject(args, "baseline", p->method == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS ? "zeros" : "pad");
    if (p->method == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS) cJSON_AddItemToObject(root, "convergence_delta", num_array(o->delta, o->n));
    else cJSON_AddNullToObject(root, "convergence_delta");
    return root;
}

/* ---- corpus mode ---------------------------------------------------------------------------------------------- */

/* The ids of the records in buf[0..len) (complete lines only), appended to `done` as their unformatted JSON texts.
 * Returns CLI_OK, or CLI_USAGE with a message naming the line when one is not a result record with an id. */
static int done_ids_parse(char *buf, size_t len, const char *path, cJSON *done, char *err, size_t size) {
    int line = 0;
    for (size_t at = 0; at < len;) {
        char *s = buf + at, *e = memchr(s, '\n', len - at);
        if (!e) break; /* not a complete line */
        *e = 0;
        at = (size_t)(e - buf) + 1;
        line++;
        cJSON *rec = strlen(s) == (size_t)(e - s) ? cJSON_Parse(s) : NULL; /* a NUL inside a line: not a record */
        cJSON *id = cJSON_IsObject(rec) ? cJSON_GetObjectItemCaseSensitive(rec, "id") : NULL;
        char *txt = id ? cJSON_PrintUnformatted(id) : NULL;
        cJSON_Delete(rec);
        if (!txt) {
            snprintf(err, size, "line %d of '%s' is not a result record with an id: is it a results file of cattr?",
                     line, path);
            return CLI_USAGE;
        }
        cJSON_AddItemToArray(done, cJSON_CreateString(txt));
        free(txt);
    }
    return CLI_OK;
}

/* The ids already in a results file (a JSON array of their unformatted texts), after dropping a torn last line
 * (a record cut short by a crash: everything after the last newline). Returns CLI_OK, or CLI_USAGE with a message. */
static int corpus_done_ids(const char *path, cJSON **done, char *err, size_t size) {
    *done = cJSON_CreateArray();
    if (!*done) return req_fail(err, size, CLI_FAIL, "out of memory", false);
    if (access(path, F_OK) != 0) return CLI_OK; /* a new file */
    void *data = NULL;
    size_t len = 0;
    if (cx_read_file(path, &data, &len) != CATTR_OK) return req_fail(err, size, CLI_USAGE, "cannot read the output", true);
    char *buf = data;
    size_t keep = 0;
    for (size_t k = len; k > 0; k--)
        if (buf[k - 1] == '\n') {
            keep = k;
            break;
        }
    if (keep < len) { /* a torn last record */
        if (truncate(path, (off_t)keep) != 0) {
            free(buf);
            snprintf(err, size, "cannot drop the incomplete last line of '%s'", path);
            return CLI_USAGE;
        }
        fprintf(stderr, "cattr: %s: dropped an incomplete last line (%zu bytes) left by an interrupted run\n", path,
                len - keep);
    }
    int rc = done_ids_parse(buf, keep, path, *done, err, size);
    free(buf);
    return rc;
}

static bool id_done(const cJSON *done, const char *txt) {
    const cJSON *it;
    cJSON_ArrayForEach(it, done) if (!strcmp(it->valuestring, txt)) return true;
    return false;
}

/* Appends one record (a line of JSON ending in a newline: len bytes) and makes it durable. */
static cattr_status corpus_append(int fd, const char *text, size_t len, const char *path) {
    const char *p = text;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            fprintf(stderr, "cattr: cannot append to '%s': %s\n", path, strerror(errno));
            return CATTR_ERR_IO;
        }
        p += w;
        left -= (size_t)w;
    }
    fdatasync(fd);
    return CATTR_OK;
}

/* v as an integer in [lo, hi]: false when it is not a JSON number with an integer value in that range (and never a
 * conversion out of long long's range). */
static bool json_int(const cJSON *v, long long lo, long long hi, long long *out) {
    if (!cJSON_IsNumber(v)) return false;
    double x = v->valuedouble;
    if (!(x >= -9.2e18 && x <= 9.2e18)) return false;
    long long i = (long long)x;
    if ((double)i != x || i < lo || i > hi) return false;
    *out = i;
    return true;
}

/* A string field of a request line (NULL when absent); false with a message when it is not a string. */
static bool str_field(const cJSON *rq, const char *key, const char **out, char *err, size_t size) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rq, key);
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsString(v)) {
        snprintf(err, size, "'%s' must be a string", key);
        return false;
    }
    *out = v->valuestring;
    return true;
}

/* Ids as "1,2,3" from a JSON array of integers (into buf). */
static bool ids_field(const cJSON *rq, const char *key, const char **out, char *buf, size_t bsize, char *err,
                      size_t size) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rq, key), *it;
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return true;
    size_t at = 0;
    bool ok = cJSON_IsArray(v);
    cJSON_ArrayForEach(it, v) {
        long long x = 0;
        ok = ok && json_int(it, LLONG_MIN, LLONG_MAX, &x) && at + 24 < bsize;
        if (ok) at += (size_t)snprintf(buf + at, bsize - at, "%s%lld", at ? "," : "", x);
    }
    if (!ok) {
        snprintf(err, size, "'%s' must be an array of integers", key);
        return false;
    }
    buf[at] = 0;
    *out = buf;
    return true;
}

/* A request line over the command line's request and params: prompt / prompt_ids, target / target_ids, template,
 * slots, slot_baselines, and the method options method, steps, quadrature, n_samples, seed, baseline,
 * max_new_tokens, perturbations_per_eval. */
static bool parse_request(const cJSON *rq, llm_req *r, cattr_attr_params *p, char *idbuf[2], char *err, size_t size) {
    if (!cJSON_IsObject(rq)) {
        snprintf(err, size, "the line is not a JSON object");
        return false;
    }
    static const char *known[] = {"id", "prompt", "prompt_ids", "target", "target_ids", "template", "slots",
                                  "slot_baselines", "method", "steps", "quadrature", "n_samples", "seed", "baseline",
                                  "max_new_tokens", "perturbations_per_eval"};
    const cJSON *it;
    cJSON_ArrayForEach(it, rq) {
        bool ok = false;
        for (size_t k = 0; k < sizeof known / sizeof *known && !ok; k++) ok = !strcmp(it->string, known[k]);
        if (!ok) {
            snprintf(err, size, "unknown field '%s'", it->string);
            return false;
        }
    }
    r->prompt = r->target = r->tmpl = NULL;
    r->prompt_ids = r->target_ids = NULL;
    if (!str_field(rq, "prompt", &r->prompt, err, size) || !str_field(rq, "target", &r->target, err, size) ||
        !str_field(rq, "template", &r->tmpl, err, size) ||
        !ids_field(rq, "prompt_ids", &r->prompt_ids, idbuf[0], 65536, err, size) ||
        !ids_field(rq, "target_ids", &r->target_ids, idbuf[1], 65536, err, size))
        return false;
    const char *b = NULL;
    const cJSON *bv = cJSON_GetObjectItemCaseSensitive(rq, "baseline");
    if (cJSON_IsNumber(bv)) {
        static _Thread_local char num[32];
        long long t;
        if (!json_int(bv, 0, LLONG_MAX, &t)) {
            snprintf(err, size, "'baseline' must be zeros, pad or a token id (an integer from 0)");
            return false;
        }
        snprintf(num, sizeof num, "%lld", t);
        r->baseline = num;
    } else if (bv) {
        if (!str_field(rq, "baseline", &b, err, size)) return false;
        r->baseline = b;
    }
    for (int pass = 0; pass < 2; pass++) {
        const char *key = pass ? "slot_baselines" : "slots";
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(rq, key);
        int *cnt = pass ? &r->n_slot_bases : &r->n_slots;
        const char **dst = pass ? r->slot_bases : r->slots;
        if (!v) continue;
        *cnt = 0;
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > 16) {
            snprintf(err, size, "'%s' must be an array of at most 16 strings", key);
            return false;
        }
        cJSON_ArrayForEach(it, v) {
            if (!cJSON_IsString(it)) {
                snprintf(err, size, "'%s' must be an array of strings", key);
                return false;
            }
            dst[(*cnt)++] = it->valuestring;
        }
    }
    const char *mname = NULL, *quad = NULL;
    if (!str_field(rq, "method", &mname, err, size) || !str_field(rq, "quadrature", &quad, err, size)) return false;
    if (mname) {
        int mk = method_arg(mname);
        if (mk < 0) {
            snprintf(err, size, "unknown method '%s'", mname);
            return false;
        }
        cattr_attr_params d = cattr_attr_default_params((cattr_method)mk);
        p->method = d.method;
    }
    if (quad) {
        int q = cattr_quadrature_from_name(quad);
        if (q < 0) {
            snprintf(err, size, "unknown quadrature '%s'", quad);
            return false;
        }
        p->quadrature = (cattr_quadrature)q;
    }
    static const struct { const char *key; long long lo, hi; } ints[] = {
        {"steps", 1, 100000}, {"n_samples", 1, 1000000}, {"seed", 0, LLONG_MAX}, {"max_new_tokens", 1, 100000},
        {"perturbations_per_eval", 1, 1000000}};
    for (size_t k = 0; k < sizeof ints / sizeof *ints; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(rq, ints[k].key);
        if (!v) continue;
        long long x;
        if (!json_int(v, ints[k].lo, ints[k].hi, &x)) {
            snprintf(err, size, "'%s' must be an integer from %lld", ints[k].key, ints[k].lo);
            return false;
        }
        if (k == 0) p->n_steps = (int)x;
        else if (k == 1) p->n_samples = (int)x;
        else if (k == 2) p->seed = (uint64_t)x;
        else if (k == 3) r->max_new = (int)x;
        else p->perturbations_per_eval = (int)x;
    }
    return true;
}

typedef struct corpus_progress {
    double start;
    int64_t done, total;
    bool tty, shown;
} corpus_progress;

static void corpus_show(corpus_progress *cp, bool last) {
    if (!cp->tty) return;
    double t = now_s() - cp->start, rate = t > 0 ? (double)cp->done / t : 0;
    double eta = rate > 0 ? (double)(cp->total - cp->done) / rate : 0;
    int width = 30, fill = cp->total > 0 ? (int)((double)width * (double)cp->done / (double)cp->total) : width;
    fprintf(stderr, "\r[%.*s%*s] %lld/%lld requests, %.2f/s, ETA %.0f s  ", fill, "##############################",
            width - fill, "", (long long)cp->done, (long long)cp->total, rate, eta);
    if (last) fprintf(stderr, "\n");
    cp->shown = true;
}

/* A corpus run: the requests still to do and, on rank 0, the output. Every rank holds the requests file (read by rank
 * 0 and broadcast: only rank 0 needs the files) and the list of pending lines. */
typedef struct corpus_run {
    cattr_llm *m;
    const cattr_attr_params *p0;
    const llm_req *r0;
    bool quiet;
    char *text;             /* the requests file, every line NUL-terminated */
    int64_t *off, *lineno;  /* the pending lines: their offsets in text and line numbers */
    char *idbuf[2];
    /* rank 0 */
    int fd;
    const char *output;
    corpus_progress cp;
    int64_t n_ok, n_failed;
} corpus_run;

/* One request (mpi_driver_work_fn): its record, the exact line the output gets, then a NUL and the message for
 * stderr (empty when it succeeded). Returns 0, 1 when the request failed (an error record), -1 out of memory. */
static int corpus_work(int64_t item, char **data, size_t *len, void *user) {
    corpus_run *c = user;
    const char *line = c->text + c->off[item];
    int64_t lineno = c->lineno[item];
    char err[2048];
    cJSON *rq = cJSON_Parse(line);
    const cJSON *idv = rq ? cJSON_GetObjectItemCaseSensitive(rq, "id") : NULL;
    cJSON *id = idv ? cJSON_Duplicate(idv, true) : cJSON_CreateNumber((double)lineno);
    char *idtxt = id ? cJSON_PrintUnformatted(id) : NULL;
    llm_req r = *c->r0;
    cattr_attr_params p = *c->p0;
    llm_out o;
    memset(&o, 0, sizeof o);
    cJSON *rec = NULL;
    int code = CLI_OK;
    cattr_status ast = CATTR_OK;
    if (!rq) {
        snprintf(err, sizeof err, "line %lld is not valid JSON", (long long)lineno);
        code = CLI_USAGE;
    } else if (!parse_request(rq, &r, &p, c->idbuf, err, sizeof err)) {
        code = CLI_USAGE;
    }
    if (code == CLI_OK) code = req_prepare(c->m, &p, &r, &o, err, sizeof err);
    if (code == CLI_OK) {
        ast = req_attribute(c->m, &p, &r, &o, NULL, NULL, NULL, NULL);
        if (ast != CATTR_OK) code = req_fail(err, sizeof err, CLI_FAIL, "attribution failed", true);
    }
    if (code == CLI_OK) code = req_texts(c->m, &r, &o, err, sizeof err);
    if (code == CLI_OK) {
        rec = result_json(&p, &o);
        if (rec && o.generated) cJSON_AddTrueToObject(rec, "generated");
    } else {
        rec = cJSON_CreateObject();
        if (rec) {
            cJSON_AddStringToObject(rec, "error", err);
            cJSON_AddStringToObject(rec, "status", ast != CATTR_OK ? cattr_status_string(ast)
                                                   : code == CLI_USAGE ? "bad request" : "failed");
        }
    }
    char *text = NULL;
    if (rec && id) {
        cJSON_AddItemToObject(rec, "id", id); /* the record owns it from here */
        id = NULL;
        text = cJSON_PrintUnformatted(rec);
    }
    char esc[1024] = "";
    if (code != CLI_OK) cx_escape_text(err, esc, sizeof esc);
    int status = code == CLI_OK ? 0 : 1;
    if (text && idtxt) {
        size_t tl = strlen(text), ml = code != CLI_OK ? strlen("request : ") + strlen(idtxt) + strlen(esc) : 0;
        *data = malloc(tl + ml + 3);
        if (*data) {
            memcpy(*data, text, tl);
            (*data)[tl] = '\n';
            (*data)[tl + 1] = 0;
            (*data)[tl + 2] = 0;
            if (ml) snprintf(*data + tl + 2, ml + 1, "request %s: %s", idtxt, esc);
            *len = tl + ml + 3;
        }
    }
    if (!*data) status = -1;
    free(text);
    cJSON_Delete(rec);
    cJSON_Delete(id);
    cJSON_Delete(rq);
    free(idtxt);
    out_free(&o);
    return status;
}

/* Rank 0, in input order (mpi_driver_deliver_fn): appends a record and reports a failed request. Returns 0, or 1
 * when the output cannot be written (the message is printed). */
static int corpus_deliver(int64_t item, int status, const char *data, size_t len, void *user) {
    corpus_run *c = user;
    (void)item;
    size_t rl = strnlen(data, len);
    if (corpus_append(c->fd, data, rl, c->output) != CATTR_OK) return 1;
    if (status == 0) c->n_ok++;
    else c->n_failed++;
    if (status != 0 && !c->quiet && rl + 1 < len) {
        fprintf(stderr, "%scattr: %s\n", c->cp.shown ? "\n" : "", data + rl + 1);
        c->cp.shown = false;
    }
    c->cp.done++;
    corpus_show(&c->cp, false);
    return 0;
}

/* Rank 0: reads the requests file into c->text (lines NUL-terminated), drops a torn last line of the output, opens it
 * for appending and lists the lines still to do (not blank, their id neither in the output nor on an earlier line).
 * Sets hdr: {n pending, total requests, already done}. Returns CLI_OK or the exit code (the message printed). */
static int corpus_setup(corpus_run *c, const char *prompts, size_t *text_len, int64_t hdr[3]) {
    char err[2048];
    void *data = NULL;
    size_t n = 0;
    cattr_status st = cx_read_file(prompts, &data, &n); /* NUL-terminated; before the output is touched */
    if (st != CATTR_OK) return cli_error(st, "cannot read the requests");
    c->text = data;
    cJSON *done = NULL;
    int rc = corpus_done_ids(c->output, &done, err, sizeof err);
    if (rc != CLI_OK) {
        cJSON_Delete(done);
        return rc == CLI_USAGE ? cli_usage_error("%s", err) : cli_error(CATTR_ERR_NO_MEMORY, err);
    }
    c->fd = open(c->output, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (c->fd < 0) {
        cJSON_Delete(done);
        return cli_usage_error("cannot open '%s' for appending: %s", c->output, strerror(errno));
    }
    *text_len = n + 1;
    int64_t total = 0, lines = 0, skipped = 0, np = 0;
    for (size_t k = 0; k < n; k++) total += c->text[k] == '\n';
    lines = total + (n > 0 && c->text[n - 1] != '\n');
    c->off = malloc((size_t)(lines + 1) * sizeof *c->off);
    c->lineno = malloc((size_t)(lines + 1) * sizeof *c->lineno);
    bool oom = !c->off || !c->lineno;
    int64_t lineno = 0;
    for (size_t at = 0; !oom && at < n;) { /* the lines as getline() gives them */
        char *s = c->text + at, *nl = memchr(s, '\n', n - at);
        size_t len = nl ? (size_t)(nl - s) : n - at;
        at += len + (nl != NULL);
        s[len] = 0;
        lineno++;
        while (len > 0 && s[len - 1] == '\r') s[--len] = 0;
        if (len == 0) { /* blank lines are allowed and skipped */
            total--;
            continue;
        }
        cJSON *rq = cJSON_Parse(s);
        const cJSON *idv = rq ? cJSON_GetObjectItemCaseSensitive(rq, "id") : NULL;
        cJSON *id = idv ? cJSON_Duplicate(idv, true) : cJSON_CreateNumber((double)lineno);
        char *idtxt = id ? cJSON_PrintUnformatted(id) : NULL;
        if (!idtxt) oom = true;
        else if (id_done(done, idtxt)) skipped++;
        else { /* to do; a later line with the same id is skipped, as the record written for this one would make it */
            c->off[np] = s - c->text;
            c->lineno[np++] = lineno;
            cJSON_AddItemToArray(done, cJSON_CreateString(idtxt));
        }
        cJSON_Delete(rq);
        cJSON_Delete(id);
        free(idtxt);
    }
    cJSON_Delete(done);
    if (oom) return cli_error(CATTR_ERR_NO_MEMORY, "corpus");
    hdr[0] = np;
    hdr[1] = total;
    hdr[2] = skipped;
    return CLI_OK;
}

/* `--prompts FILE.jsonl --output RESULTS.jsonl`: one request per line, one result record per line (the single call's
 * JSON plus "id"; an error record {"id", "error", "status"} for a request that fails), appended and made durable one
 * by one. A rerun skips the ids already in the output (a torn last line is dropped first). Exit code: CLI_OK when
 * every request succeeded, CLI_FAIL when any failed, CLI_USAGE when the files cannot be used.
 * Under mpirun (mpi_driver.h) every rank calls this: rank 0 reads the files and broadcasts the requests still to do,
 * every rank computes requests handed out one by one, and rank 0 writes the records in input order, so the file is
 * the one a single process writes. Every rank returns the same exit code. */
static int corpus(cattr_llm *m, const cattr_attr_params *p0, const llm_req *r0, const char *prompts,
                  const char *output, bool quiet) {
    corpus_run c;
    memset(&c, 0, sizeof c);
    c.m = m;
    c.p0 = p0;
    c.r0 = r0;
    c.quiet = quiet;
    c.output = output;
    c.fd = -1;
    int rank = mpi_driver_rank();
    /* header from rank 0: exit code of the set-up, length of the requests text, pending, total, already done */
    int64_t hdr[5] = {CLI_OK, 0, 0, 0, 0};
    if (rank == 0) {
        size_t tl = 0;
        hdr[0] = corpus_setup(&c, prompts, &tl, hdr + 2);
        hdr[1] = (int64_t)tl;
    }
    mpi_driver_bcast(hdr, sizeof hdr);
    int rc = (int)hdr[0];
    int64_t np = hdr[2];
    if (rc == CLI_OK && rank != 0) {
        c.text = malloc((size_t)hdr[1]);
        c.off = malloc((size_t)(np + 1) * sizeof *c.off);
        c.lineno = malloc((size_t)(np + 1) * sizeof *c.lineno);
        if (!c.text || !c.off || !c.lineno) { /* the others would wait for this rank: stop the job */
            fprintf(stderr, "cattr: rank %d: out of memory for the requests\n", rank);
            exit(CLI_FAIL);
        }
    }
    if (rc == CLI_OK) {
        mpi_driver_bcast(c.text, (size_t)hdr[1]);
        mpi_driver_bcast(c.off, (size_t)np * sizeof *c.off);
        mpi_driver_bcast(c.lineno, (size_t)np * sizeof *c.lineno);
        c.idbuf[0] = malloc(65536);
        c.idbuf[1] = malloc(65536);
        if (!c.idbuf[0] || !c.idbuf[1]) {
            fprintf(stderr, "cattr: rank %d: out of memory\n", rank);
            exit(CLI_FAIL);
        }
        c.cp = (corpus_progress){now_s(), hdr[4], hdr[3], rank == 0 && isatty(STDERR_FILENO) && !quiet, false};
        int frc = mpi_driver_farm(np, corpus_work, corpus_deliver, &c);
        if (rank == 0) {
            if (c.cp.shown) corpus_show(&c.cp, true);
            bool closed = close(c.fd) == 0;
            c.fd = -1;
            if (frc < 0) rc = cli_error(CATTR_ERR_NO_MEMORY, "corpus");
            else if (frc > 0 || !closed) rc = CLI_USAGE;
            else {
                if (!quiet)
                    fprintf(stderr, "%lld requests: %lld attributed, %lld failed, %lld already in %s (%.1f s)\n",
                            (long long)(c.n_ok + c.n_failed + hdr[4]), (long long)c.n_ok, (long long)c.n_failed,
                            (long long)hdr[4], output, now_s() - c.cp.start);
                rc = c.n_failed ? CLI_FAIL : CLI_OK;
            }
        }
        int64_t final = rc;
        mpi_driver_bcast(&final, sizeof final);
        rc = (int)final;
    }
    if (c.fd >= 0) close(c.fd);
    free(c.text);
    free(c.off);
    free(c.lineno);
    free(c.idbuf[0]);
    free(c.idbuf[1]);
    return rc;
}

/* For tests/fuzz/fuzz_requests.c: `data` as one line of a requests file (parsed and checked as corpus mode does,
 * before a model is needed) and as a results file (its ids read as a rerun reads them). Returns 0. */
int cli_corpus_fuzz(const unsigned char *data, size_t size) {
    char *text = malloc(size + 1), *idbuf[2] = {malloc(65536), malloc(65536)}, err[2048];
    if (text && idbuf[0] && idbuf[1]) {
        memcpy(text, data, size);
        text[size] = 0;
        cJSON *rq = cJSON_Parse(text);
        if (rq) {
            llm_req r;
            memset(&r, 0, sizeof r);
            r.max_new = 8;
            cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS);
            if (parse_request(rq, &r, &p, idbuf, err, sizeof err)) (void)req_check(&p, &r, err, sizeof err);
            cJSON_Delete(rq);
        }
        memcpy(text, data, size);
        cJSON *done = cJSON_CreateArray();
        if (done) (void)done_ids_parse(text, size, "fuzz.jsonl", done, err, sizeof err);
        cJSON_Delete(done);
    }
    free(text);
    free(idbuf[0]);
    free(idbuf[1]);
    return 0;
}

/* ---- the command ----------------------------------------------------------------------------------------------- */

int cmd_explain_llm(int argc, char **argv) {
    const char *dir = NULL, *output = NULL, *html = NULL, *prompts = NULL;
    cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS);
    llm_req r;
    memset(&r, 0, sizeof r);
    r.max_new = 8;
    int runs = 0;
    bool precision_error = false;
    const char *split = NULL; /* --split steps: the call's IG steps over the MPI ranks */
    bool quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long x;
#define NEED()                                                                                                         \
    do {                                                                                                               \
        if (!v) return cli_usage_error("%s needs a value (see cattr explain-llm --help)", o);                          \
        i++;                                                                                                           \
    } while (0)
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            help(stdout);
            return CLI_OK;
        } else if (!strcmp(o, "--prompt")) { NEED(); r.prompt = v;
        } else if (!strcmp(o, "--prompt-ids")) { NEED(); r.prompt_ids = v;
        } else if (!strcmp(o, "--prompts")) { NEED(); prompts = v;
        } else if (!strcmp(o, "--target")) { NEED(); r.target = v;
        } else if (!strcmp(o, "--target-ids")) { NEED(); r.target_ids = v;
        } else if (!strcmp(o, "--method")) {
            NEED();
            int mk = method_arg(v);
            if (mk < 0) return cli_usage_error("unknown method '%s' (see cattr explain-llm --help)", v);
            p.method = (cattr_method)mk;
        } else if (!strcmp(o, "--steps")) {
            NEED();
            if (!cli_int_arg(o, v, 1, 100000, &x)) return CLI_USAGE;
            p.n_steps = (int)x;
        } else if (!strcmp(o, "--quadrature")) {
            NEED();
            int q = cattr_quadrature_from_name(v);
            if (q < 0) return cli_usage_error("unknown quadrature '%s'", v);
            p.quadrature = (cattr_quadrature)q;
        } else if (!strcmp(o, "--baseline")) { NEED(); r.baseline = v;
        } else if (!strcmp(o, "--n-samples")) {
            NEED();
            if (!cli_int_arg(o, v, 1, 1000000, &x)) return CLI_USAGE;
            p.n_samples = (int)x;
        } else if (!strcmp(o, "--seed")) {
            NEED();
            if (!cli_int_arg(o, v, 0, LLONG_MAX, &x)) return CLI_USAGE;
            p.seed = (uint64_t)x;
        } else if (!strcmp(o, "--max-new-tokens")) {
            NEED();
            if (!cli_int_arg(o, v, 1, 100000, &x)) return CLI_USAGE;
            r.max_new = (int)x;
        } else if (!strcmp(o, "--dtype")) {
            NEED();
            if (!strcmp(v, "float32")) p.dtype = CATTR_FLOAT32;
            else if (!strcmp(v, "float64")) p.dtype = CATTR_FLOAT64;
            else return cli_usage_error("--dtype must be float32 or float64, not '%s'", v);
        } else if (!strcmp(o, "--device")) {
            NEED();
            if (!cli_device_arg(v)) return CLI_USAGE;
            p.device = v;
        } else if (!strcmp(o, "--precision")) {
            NEED();
            if (!strcmp(v, "highest")) p.precision = CATTR_PRECISION_HIGHEST;
            else if (!strcmp(v, "high")) p.precision = CATTR_PRECISION_HIGH;
            else return cli_usage_error("--precision must be highest or high, not '%s'", v);
        } else if (!strcmp(o, "--precision-error")) {
            precision_error = true;
        } else if (!strcmp(o, "--perturbations-per-eval")) {
            NEED();
            if (!cli_int_arg(o, v, 1, 1000000, &x)) return CLI_USAGE;
            p.perturbations_per_eval = (int)x;
        } else if (!strcmp(o, "--no-prefix-cache")) {
            p.no_prefix_cache = 1;
        } else if (!strcmp(o, "--internal-batch-size")) {
            NEED();
            if (!cli_int_arg(o, v, 1, 2147483647, &x)) return CLI_USAGE;
            p.internal_batch_size = (int)x;
        } else if (!strcmp(o, "--max-memory")) {
            NEED();
            if (!cli_parse_size(v, &p.max_memory) || !p.max_memory) return cli_usage_error("--max-memory needs a size such as 512M or 2G, not '%s'", v);
        } else if (!strcmp(o, "--output") || !strcmp(o, "-o")) { NEED(); output = v;
        } else if (!strcmp(o, "--html")) { NEED(); html = v;
        } else if (!strcmp(o, "--runs")) {
            NEED();
            if (!cli_int_arg(o, v, 1, 100000, &x)) return CLI_USAGE;
            runs = (int)x;
        } else if (!strcmp(o, "--split")) {
            NEED();
            split = v;
        } else if (!strcmp(o, "--quiet") || !strcmp(o, "-q")) {
            quiet = true;
        } else if (!strcmp(o, "--template")) {
            NEED();
            r.tmpl = v;
        } else if (!strcmp(o, "--slot") || !strcmp(o, "--slot-baseline")) {
            NEED();
            bool base = !strcmp(o, "--slot-baseline");
            int *cnt = base ? &r.n_slot_bases : &r.n_slots;
            if (*cnt >= 16) return cli_usage_error("at most 16 %s", o);
            (base ? r.slot_bases : r.slots)[(*cnt)++] = v;
        } else if (o[0] == '-' && o[1]) {
            return cli_usage_error("explain-llm: unknown option '%s' (see cattr explain-llm --help)", o);
        } else if (!dir) {
            dir = o;
        } else {
            return cli_usage_error("explain-llm: unexpected argument '%s'", o);
        }
#undef NEED
    }
    if (!dir) return cli_usage_error("explain-llm: give a checkpoint folder (see cattr explain-llm --help)");
    char err[2048];
    if (prompts) {
        if (r.prompt || r.prompt_ids || r.tmpl || r.target || r.target_ids)
            return cli_usage_error("--prompts takes the prompts and targets from its lines, not from --prompt, "
                                   "--prompt-ids, --template, --target or --target-ids");
        if (!output || strlen(output) < 6 || strcmp(output + strlen(output) - 6, ".jsonl"))
            return cli_usage_error("--prompts needs --output RESULTS.jsonl (one result per line)");
        if (html || runs || precision_error) return cli_usage_error("--prompts writes JSON lines only (no --html, --runs or --precision-error)");
    }
    if (split) {
        cattr_method mk = p.method;
        const char *kind = mk == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS ? "steps"
                           : mk == CATTR_METHOD_FEATURE_ABLATION ? "features"
                           : mk == CATTR_METHOD_SHAPLEY_VALUE_SAMPLING || mk == CATTR_METHOD_LIME ||
                                   mk == CATTR_METHOD_KERNEL_SHAP
                               ? "samples"
                               : NULL;
        if (strcmp(split, "steps") != 0 && strcmp(split, "features") != 0 && strcmp(split, "samples") != 0)
            return cli_usage_error("--split %s: give steps, features or samples", split);
        if (!kind || r.tmpl)
            return cli_usage_error("--split splits layer-ig (steps), feature-ablation (features), "
                                   "shapley-value-sampling, lime and kernel-shap (samples) over a prompt (not %s%s)",
                                   method_cli_name(mk), r.tmpl ? ", a template" : "");
        if (strcmp(split, kind) != 0)
            return cli_usage_error("--split %s does not apply to %s: its work is split with --split %s", split,
                                   method_cli_name(mk), kind);
        if (mk == CATTR_METHOD_FEATURE_ABLATION && p.perturbations_per_eval <= 0 && !p.no_prefix_cache)
            return cli_usage_error("--split features needs --perturbations-per-eval N (the sequences per forward "
                                   "pass, the same on every rank): feature-ablation otherwise runs passes that reuse "
                                   "the prompt's prefix, which are not split");
        if (prompts || runs || precision_error)
            return cli_usage_error("--split cannot be combined with --prompts, --runs or --precision-error");
    }
    if (!prompts) {
        if (req_check(&p, &r, err, sizeof err) != CLI_OK) return cli_usage_error("%s", err);
        if (output && (strlen(output) < 5 || strcmp(output + strlen(output) - 5, ".json")))
            return cli_usage_error("--output must end in .json: '%s'", output);
    }
    cattr_llm *m = NULL;
    llm_out o;
    memset(&o, 0, sizeof o);
    double *times = NULL;
    int rc = CLI_FAIL;
    if ((prompts || split) && mpi_driver_start() != 0) { /* corpus mode and --split run on every rank (mpi_driver.h) */
        fprintf(stderr, "cattr: MPI cannot start (CATTR_NO_MPI=1 runs without it)\n");
        return CLI_FAIL;
    }
    cattr_status st = cattr_llm_load(dir, &m);
    if (st == CATTR_OK) st = cattr_llm_set_device(m, p.device);
    if (st != CATTR_OK) rc = cli_error(st, "cannot load the model");
    if (prompts) { /* every rank loads the model; they go on only if all did */
        int worst = mpi_driver_max(st != CATTR_OK ? rc : CLI_OK);
        if (worst != CLI_OK && st == CATTR_OK && mpi_driver_rank() == 0)
            fprintf(stderr, "cattr: another rank cannot load the model (see its message)\n");
        rc = worst == CLI_OK ? corpus(m, &p, &r, prompts, output, quiet) : worst;
        goto done;
    }
    if (st != CATTR_OK) goto done;
    rc = req_prepare(m, &p, &r, &o, err, sizeof err);
    if (rc != CLI_OK) {
        char esc[2048];
        cx_escape_text(err, esc, sizeof esc);
        fprintf(stderr, "cattr: %s\n", esc);
        goto done;
    }
    rc = CLI_FAIL;
    if (o.generated && !quiet) printf("generated %lld tokens (greedy)\n", (long long)o.n);
    int64_t T = o.T, n = o.n;
    int nruns = runs > 0 ? runs : 1;
    times = calloc((size_t)nruns, sizeof *times);
    if (!times) {
        rc = cli_error(CATTR_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    cli_progress_state prog = {now_s(), false};
    p.progress = cli_progress;
    p.progress_user = &prog;
    for (int k = 0; k < nruns; k++) {
        double t0 = now_s();
        prog.start = t0;
        st = split ? req_attribute_split(m, &p, &o, quiet) : req_attribute(m, &p, &r, &o, NULL, NULL, NULL, NULL);
        times[k] = now_s() - t0;
        if (st != CATTR_OK) {
            rc = split && mpi_driver_rank() != 0 ? cli_error_code(st) : cli_error(st, "attribution failed");
            goto done;
        }
    }
    if (split && mpi_driver_rank() != 0) { /* rank 0 writes and prints */
        rc = CLI_OK;
        goto done;
    }
    if (precision_error) { /* the same attribution at the other precision: the error of "high" against "highest" */
        cattr_attr_params q = p;
        q.precision = p.precision == CATTR_PRECISION_HIGH ? CATTR_PRECISION_HIGHEST : CATTR_PRECISION_HIGH;
        q.progress = NULL;
        double *seq2 = calloc((size_t)T, sizeof *seq2), *tok2 = calloc((size_t)(n * T), sizeof *tok2);
        double *lp2 = calloc((size_t)n, sizeof *lp2), *d2 = calloc((size_t)n, sizeof *d2);
        if (!seq2 || !tok2 || !lp2 || !d2) st = CATTR_ERR_NO_MEMORY;
        else st = req_attribute(m, &q, &r, &o, seq2, tok2, lp2, d2);
        if (st == CATTR_OK) {
            const double *hi = p.precision == CATTR_PRECISION_HIGH ? o.seq : seq2, *ref = hi == o.seq ? seq2 : o.seq;
            double e = 0, mx = 0, el = 0;
            for (int64_t i = 0; i < T; i++) {
                e = fmax(e, fabs(hi[i] - ref[i]));
                mx = fmax(mx, fabs(ref[i]));
            }
            for (int64_t k = 0; !r.tmpl && k < n; k++) el = fmax(el, fabs(o.lp[k] - lp2[k]));
            fprintf(stderr, "precision high vs highest: max |seq_attr error| %.3e (%.3e of max |seq_attr| %.3e)", e,
                    mx > 0 ? e / mx : 0.0, mx);
            if (!r.tmpl) fprintf(stderr, ", max |target log-prob error| %.3e", el);
            fprintf(stderr, "\n");
        }
        free(seq2);
        free(tok2);
        free(lp2);
        free(d2);
        if (st != CATTR_OK) {
            rc = cli_error(st, "the attribution at the other precision failed");
            goto done;
        }
    }
    if (req_texts(m, &r, &o, err, sizeof err) != CLI_OK) {
        rc = cli_error(CATTR_ERR_NO_MEMORY, err);
        goto done;
    }
    if (html) { /* before the JSON, so that a failure leaves neither */
        char *page = NULL;
        st = cx_html_token_heatmap(dir, (const char *const *)o.in_tok, T, (const char *const *)o.out_tok, n, o.seq,
                                   o.tok, o.lp, method_cli_name(p.method), &page);
        if (st == CATTR_OK) st = cli_write_text_file(html, page);
        free(page);
        if (st != CATTR_OK) {
            rc = cli_error(st, "cannot write the HTML page");
            goto done;
        }
    }
    if (output) {
        cJSON *root = result_json(&p, &o);
        char *text = root ? cJSON_Print(root) : NULL;
        cJSON_Delete(root);
        st = text ? cli_write_text_file(output, text) : CATTR_ERR_NO_MEMORY;
        free(text);
        if (st != CATTR_OK) {
            if (html) remove(html);
            rc = cli_error(st, "cannot write the output");
            goto done;
        }
    }
    if (!quiet) {
        if (n > 0 && !isnan(o.lp[0])) {
            printf("target log-probabilities:");
            for (int64_t k = 0; k < n; k++) printf(" %.4f", o.lp[k]);
            printf("\n");
        }
        if (p.method == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS) {
            printf("convergence delta:");
            for (int64_t k = 0; k < n; k++) printf(" %.3e", o.delta[k]);
            printf("\n");
        }
        terminal_view(o.in_tok, T, o.out_tok, n, o.seq, o.tok);
        if (output) printf("wrote %s\n", output);
        if (html) printf("wrote %s\n", html);
    }
    if (runs > 0) printf("time: first=%.6f warm_median=%.6f\n", times[0], runs >= 2 ? cli_median(times + 1, runs - 1) : NAN);
    {
        struct rusage ru;
        if (!getrusage(RUSAGE_SELF, &ru)) /* weights, working memory and everything else this process touched */
            fprintf(stderr, "peak memory: %.0f MiB resident\n", (double)ru.ru_maxrss / 1024.0);
    }
    rc = CLI_OK;
done:
    out_free(&o);
    free(times);
    cattr_llm_free(m);
    if (prompts || split) mpi_driver_stop();
    return rc;
}
