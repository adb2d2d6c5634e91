/* explain_llm.c - `cattr explain-llm`: which prompt tokens made a language model predict a continuation. Writes
 * Captum's LLMAttributionResult fields as JSON, a self-contained HTML heatmap, and a terminal view. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "llm_req.h"
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
#include <sys/ioctl.h>
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
        "  --steps N|auto          layer-ig: integration steps (default 50); auto: 8, 16, 32, ... until every target\n"
        "                          token's |delta| <= --delta-tol x the sum of its |attributions|\n"
        "  --delta-tol X           --steps auto's tolerance (default 1e-3); --max-steps N its most steps (512)\n"
        "  --quadrature Q          layer-ig: gausslegendre (default) | riemann_left | riemann_right | riemann_middle |\n"
        "                          riemann_trapezoid\n"
        "  --segments S            the features: tokens (default) | words | sentences | lines | FILE.json (a list\n"
        "                          of strings that spell the prompt, or of [start, end] character spans): every\n"
        "                          method attributes to the segments (gradients summed over their tokens)\n"
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
        "  --max-memory SIZE       activation memory budget, e.g. 2G (default: 1/4 of the free memory, at most what\n"
        "                          3584 positions of the model hold: 896M at Qwen3-0.6B's shapes, ~3G at 8B's)\n"
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
        "                          (\"slot_baselines\"), \"segments\", and method options (\"method\", \"steps\" (or\n"
        "                          \"auto\", with \"delta_tol\"), \"quadrature\", \"n_samples\", \"seed\", \"baseline\",\n"
        "                          \"max_new_tokens\", \"perturbations_per_eval\");\n"
        "                          the other options are every line's defaults. --output RESULTS.jsonl gets a header\n"
        "                          line (the checkpoint's fingerprint and the options) and a result per request (the\n"
        "                          JSON below plus \"id\" and \"request_hash\"; {\"id\", \"error\", \"status\", ...} for a\n"
        "                          request that fails, a repeated id too, and the run goes on), appended as each\n"
        "                          finishes: a rerun with the same checkpoint and options skips the requests already\n"
        "                          there (a changed one is refused). Exit code 1 when any request failed. Under mpirun\n"
        "                          -n N (a build with MPI) the N ranks share the requests and rank 0 writes the file\n"
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
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || (size_t)k >= cap || errno == ERANGE) {
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

/* The terminal's width in columns (100 when stdout is not a terminal or it does not say). */
static int term_width(void) {
    struct winsize ws;
    if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40) return ws.ws_col;
    return 100;
}

/* Appends up to `room` columns of s to buf (at *len, cap bytes), whole UTF-8 characters only, a character a
 * column, control characters (newlines, tabs) as spaces; returns the columns used. */
static int put_text(char *buf, size_t cap, size_t *len, const char *s, int room) {
    int cols = 0;
    for (const unsigned char *c = (const unsigned char *)s; *c && cols < room;) {
        int nb = *c < 0x80 ? 1 : *c >= 0xf0 ? 4 : *c >= 0xe0 ? 3 : *c >= 0xc0 ? 2 : 1;
        for (int k = 1; k < nb; k++)
            if ((c[k] & 0xc0) != 0x80) nb = 1; /* a broken sequence: one byte at a time */
        if (*len + (size_t)nb + 1 > cap) break;
        if (*c < 0x20 || *c == 0x7f) buf[*len] = ' ';
        else memcpy(buf + *len, c, (size_t)nb);
        *len += (size_t)nb;
        c += nb;
        cols++;
    }
    buf[*len] = '\0';
    return cols;
}

/* A prompt too long for a column per token: a bar of the whole prompt (each cell the summed attribution of a run of
 * tokens) and the TOP tokens of the largest |attribution| over all targets, each with its neighbours, every line within
 * `width` columns. The JSON and HTML outputs hold every value. */
#define TOP 12
static void terminal_summary(char **in_tok, int64_t T, int64_t n, const double *seq, int width, bool ansi,
                             const char *unit) {
    int ctx = strcmp(unit, "tokens") ? 0 : 3; /* neighbours shown around a token (a segment is shown alone) */
    int cells = width - 2 < 96 ? width - 2 : 96;
    if (cells > T) cells = (int)T;
    double cell[96] = {0}, cm = 0;
    for (int64_t i = 0; i < T; i++) cell[i * cells / T] += seq[i];
    for (int c = 0; c < cells; c++) cm = fmax(cm, fabs(cell[c]));
    if (cm == 0) cm = 1;
    printf("%lld prompt %s, %lld target token%s: the attribution summed over the targets\n", (long long)T, unit,
           (long long)n, n == 1 ? "" : "s");
    printf("whole prompt, %.1f %s a cell (%s):\n", (double)T / cells, unit,
           ansi ? "red positive, blue negative" : "+ # positive, - = negative, by size");
    printf("|");
    for (int c = 0; c < cells; c++) {
        if (ansi) {
            unsigned char rgb[3];
            cx_heatmap_colour(cell[c], cm, rgb);
            printf("\x1b[48;2;%d;%d;%dm \x1b[0m", rgb[0], rgb[1], rgb[2]);
        } else {
            double r = fabs(cell[c]) / cm;
            putchar(r < 0.1 ? ' ' : r < 0.5 ? (cell[c] > 0 ? '+' : '-') : (cell[c] > 0 ? '#' : '='));
        }
    }
    printf("|\n");
    int64_t top[TOP];
    int k = 0;
    for (int64_t i = 0; i < T; i++) { /* insertion into the TOP largest |seq|, ties to the earlier token */
        int at = k < TOP ? k : TOP;
        while (at > 0 && fabs(seq[i]) > fabs(seq[top[at - 1]])) at--;
        if (at >= TOP) continue;
        if (k < TOP) k++;
        memmove(top + at + 1, top + at, (size_t)(k - 1 - at) * sizeof *top);
        top[at] = i;
    }
    if (ctx) printf("the %d tokens of the largest |attribution| ([token] in its context):\n", k);
    else printf("the %d %s of the largest |attribution|:\n", k, unit);
    for (int j = 0; j < k; j++) {
        int64_t i = top[j];
        char line[1024];
        int head = snprintf(line, sizeof line, "%7lld %+10.4f  ", (long long)i, seq[i]);
        size_t len = (size_t)head;
        int room = width - head;
        for (int64_t q = i - ctx < 0 ? 0 : i - ctx; q < i && room > 0; q++) room -= put_text(line, sizeof line, &len, in_tok[q], room);
        if (room > 0) room -= put_text(line, sizeof line, &len, "[", room);
        if (room > 0) room -= put_text(line, sizeof line, &len, in_tok[i], room);
        if (room > 0) room -= put_text(line, sizeof line, &len, "]", room);
        for (int64_t q = i + 1; q < T && q <= i + ctx && room > 0; q++) room -= put_text(line, sizeof line, &len, in_tok[q], room);
        printf("%s\n", line);
    }
}

static void terminal_view(char **in_tok, int64_t T, char **out_tok, int64_t n, const double *seq, const double *tok,
                          const char *unit) {
    double m = 0;
    for (int64_t i = 0; i < n * T; i++) m = fmax(m, fabs(tok[i]));
    for (int64_t i = 0; i < T; i++) m = fmax(m, fabs(seq[i]));
    if (m == 0) m = 1;
    bool ansi = isatty(STDOUT_FILENO);
    int width = term_width();
    if (16 + 9 * T > width) { /* a column per token would not fit: the summary */
        terminal_summary(in_tok, T, n, seq, width, ansi, unit);
        return;
    }
    printf("%-16s", "");
    for (int64_t i = 0; i < T; i++) { /* the first 8 characters, right-aligned */
        char cell[64];
        size_t len = 0;
        int cols = put_text(cell, sizeof cell, &len, in_tok[i], 8);
        printf(" %*s%s", 8 - cols, "", cell);
    }
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

void llm_out_free(llm_out *o) {
    for (int64_t i = 0; o->in_tok && i < o->T; i++) free(o->in_tok[i]);
    for (int64_t i = 0; o->ids_tok && i < o->n_ids; i++) free(o->ids_tok[i]);
    free(o->ids_tok);
    free(o->seg);
    free(o->seg_start);
    free(o->seg_end);
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

int llm_req_fail(char *err, size_t size, int code, const char *what, bool lib) {
    if (lib) snprintf(err, size, "%s: %s", what, cattr_last_error());
    else snprintf(err, size, "%s", what);
    return code;
}

int llm_req_check(const cattr_attr_params *p, const llm_req *r, char *err, size_t size) {
    if (r->tmpl) {
        if (r->prompt || r->prompt_ids) return llm_req_fail(err, size, CLI_USAGE, "a template replaces the prompt", false);
        if (r->n_slots < 1) return llm_req_fail(err, size, CLI_USAGE, "a template needs a slot value per '{}'", false);
        if (r->n_slot_bases && r->n_slot_bases != r->n_slots) {
            snprintf(err, size, "give one slot baseline per slot (%d slots, %d baselines)", r->n_slots, r->n_slot_bases);
            return CLI_USAGE;
        }
        if (p->method != CATTR_METHOD_FEATURE_ABLATION)
            return llm_req_fail(err, size, CLI_USAGE, "a template works with the method feature-ablation", false);
    } else if (!!r->prompt + !!r->prompt_ids != 1) {
        return llm_req_fail(err, size, CLI_USAGE, "give exactly one of a prompt and prompt ids", false);
    }
    if (r->target && r->target_ids) return llm_req_fail(err, size, CLI_USAGE, "give at most one of a target and target ids", false);
    return CLI_OK;
}

/* The byte offset of code point `cp` in the UTF-8 text (-1 past its end). */
static int64_t cp_offset(const char *text, int64_t cp) {
    int64_t i = 0, n = 0;
    while (text[i]) {
        if (n == cp) return i;
        i++;
        while (text[i] && ((unsigned char)text[i] & 0xC0) == 0x80) i++;
        n++;
    }
    return n == cp ? i : -1;
}

/* --segments FILE.json: a list of strings whose concatenation is the prompt, or of [start, end) character (code
 * point) spans, into byte spans (*spans, 2 per span, malloc'ed). CLI_OK or CLI_USAGE with a message in err. */
static int segment_file(const char *path, const char *text, int64_t **spans, int64_t *n_spans, char *err, size_t size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, size, "--segments %s: cannot open the file (give tokens, words, sentences, lines or a .json "
                 "file)", path);
        return CLI_USAGE;
    }
    char *buf = NULL;
    size_t cap = 0, len = 0, got;
    do {
        if (len + 65536 > cap) {
            char *nb = realloc(buf, cap = cap * 2 + 65536 + 1);
            if (!nb) {
                free(buf);
                fclose(f);
                return llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
            }
            buf = nb;
        }
        got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
    } while (got > 0);
    fclose(f);
    buf[len] = 0;
    char what[1100];
    snprintf(what, sizeof what, "--segments %.1024s", path);
    int rc = llm_segments_json(buf, what, "the prompt", text, spans, n_spans, err, size);
    free(buf);
    return rc;
}

int llm_segments_json(const char *json, const char *what, const char *whole, const char *text, int64_t **spans,
                      int64_t *n_spans, char *err, size_t size) {
    cJSON *root = cJSON_Parse(json);
    int n = cJSON_IsArray(root) ? cJSON_GetArraySize(root) : -1;
    if (n < 1) {
        cJSON_Delete(root);
        snprintf(err, size, "%s: give a JSON list of strings whose concatenation is %s, or of [start, end] character "
                 "spans", what, whole);
        return CLI_USAGE;
    }
    int64_t *sp = malloc((size_t)(2 * n) * sizeof *sp);
    if (!sp) {
        cJSON_Delete(root);
        return llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
    }
    size_t tl = strlen(text), at = 0;
    int rc = CLI_OK;
    bool strings = false, pairs = false;
    for (int i = 0; i < n && rc == CLI_OK; i++) {
        cJSON *it = cJSON_GetArrayItem(root, i);
        if (cJSON_IsString(it)) {
            strings = true;
            size_t l = strlen(it->valuestring);
            if (l == 0 || at + l > tl || memcmp(text + at, it->valuestring, l) != 0) {
                snprintf(err, size, "%s: string %d is not the text of %s from byte %zu on (the strings must be "
                         "non-empty and spell %s in order)", what, i, whole, at, whole);
                rc = CLI_USAGE;
            } else {
                sp[2 * i] = (int64_t)at;
                sp[2 * i + 1] = (int64_t)(at += l);
            }
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsNumber(cJSON_GetArrayItem(it, 0)) &&
                   cJSON_IsNumber(cJSON_GetArrayItem(it, 1))) {
            pairs = true;
            double a = cJSON_GetArrayItem(it, 0)->valuedouble, b = cJSON_GetArrayItem(it, 1)->valuedouble;
            /* whole numbers in range first: a cast of a value outside int64_t is undefined */
            int64_t ba = a >= 0 && a < 1e15 && a == floor(a) ? cp_offset(text, (int64_t)a) : -1;
            int64_t bb = b >= 0 && b < 1e15 && b == floor(b) ? cp_offset(text, (int64_t)b) : -1;
            if (ba < 0 || bb <= ba) {
                snprintf(err, size, "%s: span %d [%g, %g] is not within %s's characters with start < end", what,
                         i, a, b, whole);
                rc = CLI_USAGE;
            } else {
                sp[2 * i] = ba;
                sp[2 * i + 1] = bb;
            }
        } else {
            snprintf(err, size, "%s: entry %d is neither a string nor a [start, end] span", what, i);
            rc = CLI_USAGE;
        }
    }
    cJSON_Delete(root);
    if (rc == CLI_OK && strings && pairs) {
        snprintf(err, size, "%s: give either strings or [start, end] spans, not both", what);
        rc = CLI_USAGE;
    }
    if (rc == CLI_OK && strings && at != tl) {
        snprintf(err, size, "%s: the strings spell %zu of the %zu bytes of %s (they must spell all of it)",
                 what, at, tl, whole);
        rc = CLI_USAGE;
    }
    if (rc != CLI_OK) {
        free(sp);
        return rc;
    }
    *spans = sp;
    *n_spans = n;
    return CLI_OK;
}

/* The request's segments (--segments words|sentences|lines|FILE.json) over the prompt text (the ids' decoding for
 * --prompt-ids): o->seg per token, each segment's bytes and text (o->in_tok, made here), o->T the segments. */
static int prepare_segments(cattr_llm *m, const llm_req *r, const char *prompt, llm_out *o, char *err, size_t size) {
    if (r->tmpl) return llm_req_fail(err, size, CLI_USAGE, "--segments does not apply to --template (its slots are the "
                                     "features)", false);
    char *own = NULL;
    cattr_status st = CATTR_OK;
    if (!prompt) {
        st = cattr_llm_decode(m, o->ids, o->T, 0, &own);
        if (st != CATTR_OK) return llm_req_fail(err, size, cli_error_code(st), "--segments: cannot decode the prompt ids", true);
        prompt = own;
    }
    const char *kind = r->segments;
    int64_t *spans = NULL, n_spans = 0, T = o->T, G = 0;
    int rc = CLI_OK;
    bool file = strcmp(kind, "words") && strcmp(kind, "sentences") && strcmp(kind, "lines");
    if (file) {
        size_t kl = strlen(kind);
        if (kl < 5 || strcmp(kind + kl - 5, ".json")) {
            free(own);
            snprintf(err, size, "--segments %s: give tokens, words, sentences, lines or a FILE.json of spans", kind);
            return CLI_USAGE;
        }
        rc = segment_file(kind, prompt, &spans, &n_spans, err, size);
    }
    int64_t *ts = malloc((size_t)T * sizeof *ts), *te = malloc((size_t)T * sizeof *te);
    o->seg = malloc((size_t)T * sizeof *o->seg);
    if (rc == CLI_OK && (!ts || !te || !o->seg)) rc = llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
    if (rc == CLI_OK) {
        st = cattr_llm_segments(m, prompt, o->ids, T, file ? "spans" : kind, spans, n_spans, o->seg, &G);
        if (st == CATTR_OK) st = cattr_llm_token_spans(m, prompt, o->ids, T, ts, te);
        if (st != CATTR_OK) rc = llm_req_fail(err, size, cli_error_code(st), "--segments", true);
    }
    if (rc == CLI_OK) {
        o->seg_start = malloc((size_t)G * sizeof *o->seg_start);
        o->seg_end = malloc((size_t)G * sizeof *o->seg_end);
        o->in_tok = calloc((size_t)G, sizeof *o->in_tok);
        if (!o->seg_start || !o->seg_end || !o->in_tok) rc = llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
    }
    for (int64_t g = 0; rc == CLI_OK && g < G; g++) o->seg_start[g] = -1;
    for (int64_t t = 0; rc == CLI_OK && t < T; t++) { /* a segment's bytes: from its first token's to its last's */
        int64_t g = o->seg[t];
        if (o->seg_start[g] < 0) o->seg_start[g] = ts[t];
        o->seg_end[g] = te[t];
    }
    for (int64_t g = 0; rc == CLI_OK && g < G; g++) {
        int64_t a = o->seg_start[g], l = o->seg_end[g] - a;
        o->in_tok[g] = malloc((size_t)l + 1);
        if (!o->in_tok[g]) {
            rc = llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
            break;
        }
        memcpy(o->in_tok[g], prompt + a, (size_t)l);
        o->in_tok[g][l] = 0;
    }
    if (rc == CLI_OK) {
        o->T = G;
        o->seg_kind = kind;
    } else if (o->in_tok) { /* G texts at most, while o->T still counts the tokens: freed here, not by llm_out_free */
        for (int64_t g = 0; g < G; g++) free(o->in_tok[g]);
        free(o->in_tok);
        o->in_tok = NULL;
    }
    free(ts);
    free(te);
    free(spans);
    free(own);
    return rc;
}

int llm_req_prepare(cattr_llm *m, const cattr_attr_params *p, const llm_req *r, llm_out *o, char *err, size_t size) {
    memset(o, 0, sizeof *o);
    o->baseline_token = -1;
    int rc = llm_req_check(p, r, err, size);
    if (rc != CLI_OK) return rc;
    const char *prompt = r->prompt;
    if (r->tmpl) { /* the prompt is the template with its slots filled */
        size_t len = strlen(r->tmpl) + 1;
        for (int k = 0; k < r->n_slots; k++) len += strlen(r->slots[k]);
        o->filled = malloc(len);
        if (!o->filled) return llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
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
        return llm_req_fail(err, size, CLI_USAGE, "the prompt ids must be integers such as 1,2,3", false);
    if (st != CATTR_OK) return llm_req_fail(err, size, cli_error_code(st), "cannot tokenize the prompt", true);
    if (o->T < 1) return llm_req_fail(err, size, CLI_USAGE, "the prompt tokenizes to nothing", false);
    if (r->target) {
        st = cattr_llm_encode(m, r->target, &o->tg, &o->n);
        if (st != CATTR_OK) return llm_req_fail(err, size, cli_error_code(st), "cannot tokenize the target", true);
        if (o->n < 1) {
            snprintf(err, size, "the target '%s' tokenizes to nothing", r->target);
            return CLI_USAGE;
        }
    } else if (r->target_ids) {
        if (parse_ids(r->target_ids, &o->tg, &o->n) || o->n < 1)
            return llm_req_fail(err, size, CLI_USAGE, "the target ids must be integers such as 4,5", false);
    } else {
        cattr_attr_params gp = *p; /* the call's cancel flag (serve's timeouts); its progress is the attribution's */
        gp.progress = NULL;
        st = cattr_llm_generate_params(m, &gp, o->ids, o->T, r->max_new, &o->tg, &o->n);
        if (st != CATTR_OK) return llm_req_fail(err, size, cli_error_code(st), "generation failed", true);
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
    o->n_ids = o->T;
    if (r->segments && strcmp(r->segments, "tokens") != 0) {
        rc = prepare_segments(m, r, prompt, o, err, size);
        if (rc != CLI_OK) return rc;
    }
    if (r->tmpl) o->T = r->n_slots;
    o->seq = calloc((size_t)o->T, sizeof *o->seq);
    o->tok = calloc((size_t)(o->n * o->T), sizeof *o->tok);
    o->lp = calloc((size_t)o->n, sizeof *o->lp);
    o->delta = calloc((size_t)o->n, sizeof *o->delta);
    if (!o->seq || !o->tok || !o->lp || !o->delta) return llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
    return CLI_OK;
}

cattr_status llm_req_attribute(cattr_llm *m, const cattr_attr_params *p, const llm_req *r, llm_out *o, double *seq,
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
    cattr_llm_call call = cattr_llm_call_make(o->ids, o->n_ids, o->tg, o->n);
    call.baseline_token = o->baseline_token;
    if (o->seg) {
        call.segments = o->seg;
        call.n_segments = o->T;
    }
    cattr_status st = cattr_llm_attribute(m, p, &call, seq, tok, lp, delta);
    o->steps_used = st == CATTR_OK ? cattr_llm_steps_used(m) : 0;
    return st;
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
    cattr_llm_call call = cattr_llm_call_make(o->ids, o->n_ids, o->tg, o->n);
    call.baseline_token = o->baseline_token;
    if (o->seg) {
        call.segments = o->seg;
        call.n_segments = o->T;
    }
    llm_split s = {m, p, &call, o};
    return cli_split_run(llm_split_part, llm_split_combine, &s, o->n, quiet);
}

int llm_req_texts(const cattr_llm *m, const llm_req *r, llm_out *o, char *err, size_t size) {
    if (o->seg) { /* the columns' texts are the segments' (prepare_segments); every token's text for the JSON */
        if (!o->ids_tok && !(o->ids_tok = calloc((size_t)o->n_ids, sizeof *o->ids_tok)))
            return llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
        for (int64_t i = 0; i < o->n_ids; i++)
            if (!o->ids_tok[i] && !(o->ids_tok[i] = token_text(m, o->ids[i])))
                return llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
    } else {
        for (int64_t i = 0; o->in_tok && i < o->T; i++) free(o->in_tok[i]);
        free(o->in_tok);
        o->in_tok = calloc((size_t)o->T, sizeof *o->in_tok);
    }
    for (int64_t k = 0; o->out_tok && k < o->n; k++) free(o->out_tok[k]);
    free(o->out_tok);
    o->out_tok = calloc((size_t)o->n, sizeof *o->out_tok);
    if (!o->in_tok || !o->out_tok) return llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
    for (int64_t i = 0; !o->seg && i < o->T; i++)
        o->in_tok[i] = r->tmpl ? strdup(r->slots[i]) : token_text(m, o->ids[i]);
    for (int64_t k = 0; k < o->n; k++) o->out_tok[k] = token_text(m, o->tg[k]);
    for (int64_t i = 0; i < o->T; i++)
        if (!o->in_tok[i]) return llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
    for (int64_t k = 0; k < o->n; k++)
        if (!o->out_tok[k]) return llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
    return CLI_OK;
}

static const char *method_cli_name(cattr_method mk) {
    return mk == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS ? "layer-ig"
           : mk == CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION ? "layer-gradient-x-activation"
           : mk == CATTR_METHOD_FEATURE_ABLATION ? "feature-ablation"
           : mk == CATTR_METHOD_LIME ? "lime"
           : mk == CATTR_METHOD_KERNEL_SHAP ? "kernel-shap" : "shapley-value-sampling";
}

int llm_method_arg(const char *v) {
    int mk = !strcmp(v, "layer-ig") ? CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS : cattr_method_from_name(v);
    if (mk != CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS && mk != CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION &&
        mk != CATTR_METHOD_FEATURE_ABLATION && mk != CATTR_METHOD_SHAPLEY_VALUE_SAMPLING && mk != CATTR_METHOD_LIME &&
        mk != CATTR_METHOD_KERNEL_SHAP)
        return -1;
    return mk;
}

cJSON *llm_result_json(const cattr_attr_params *p, const llm_out *o) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    cJSON *a = cJSON_AddArrayToObject(root, "input_tokens");
    char **toks = o->seg ? o->ids_tok : o->in_tok;
    int64_t nt = o->seg ? o->n_ids : o->T;
    for (int64_t i = 0; i < nt; i++) cJSON_AddItemToArray(a, cJSON_CreateString(toks[i]));
    a = cJSON_AddArrayToObject(root, "input_ids");
    for (int64_t i = 0; i < o->n_ids; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)o->ids[i]));
    if (o->seg) { /* the features: each segment's text and bytes in the prompt, and each token's segment */
        a = cJSON_AddArrayToObject(root, "segments");
        for (int64_t g = 0; g < o->T; g++) {
            cJSON *sg = cJSON_CreateObject();
            cJSON_AddStringToObject(sg, "text", o->in_tok[g]);
            cJSON_AddNumberToObject(sg, "start", (double)o->seg_start[g]);
            cJSON_AddNumberToObject(sg, "end", (double)o->seg_end[g]);
            cJSON_AddItemToArray(a, sg);
        }
        a = cJSON_AddArrayToObject(root, "token_segment");
        for (int64_t i = 0; i < o->n_ids; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)o->seg[i]));
    }
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
        cJSON_AddNumberToObject(args, "n_steps", o->steps_used > 0 ? o->steps_used : p->n_steps);
        if (p->n_steps == CATTR_STEPS_AUTO) {
            cJSON *au = cJSON_AddObjectToObject(args, "n_steps_auto");
            cJSON_AddNumberToObject(au, "delta_tol", p->delta_tol);
            cJSON_AddNumberToObject(au, "max_steps", p->max_steps);
        }
        cJSON_AddStringToObject(args, "method", cattr_quadrature_name(p->quadrature));
    }
    if (p->method == CATTR_METHOD_SHAPLEY_VALUE_SAMPLING) cJSON_AddNumberToObject(args, "n_samples", p->n_samples);
    if (o->seg) cJSON_AddStringToObject(args, "segments", o->seg_kind);
    if (o->baseline_token >= 0) cJSON_AddNumberToObject(args, "baseline_token", (double)o->baseline_token);
    else cJSON_AddStringToObject(args, "baseline", p->method == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS ? "zeros" : "pad");
    if (p->method == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS) cJSON_AddItemToObject(root, "convergence_delta", num_array(o->delta, o->n));
    else cJSON_AddNullToObject(root, "convergence_delta");
    return root;
}

/* The options of a command line that shape a result, for the header of a corpus's results file: every option but
 * --prompts, --output, --quiet and --max-memory (which only sizes the chunks); the checkpoint folder is recorded by its
 * fingerprint. NULL when out of memory. */
static cJSON *result_options(int argc, char **argv) {
    static const char *const flags[] = {"--precision-error", "--no-prefix-cache", "--quiet", "-q", NULL};
    static const char *const skip[] = {"model", "--prompts", "--output", "--quiet", "--max-memory", NULL};
    return cli_options_json(argc, argv, flags, skip);
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
        int took = cli_attr_option("explain-llm", o, v, &i, &p, &p, NULL);
        if (took < 0) return CLI_USAGE;
        if (took) continue;
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
            int mk = llm_method_arg(v);
            if (mk < 0) return cli_usage_error("unknown method '%s' (see cattr explain-llm --help)", v);
            p.method = (cattr_method)mk;
        } else if (!strcmp(o, "--baseline")) { NEED(); r.baseline = v;
        } else if (!strcmp(o, "--segments")) { NEED(); r.segments = v;
        } else if (!strcmp(o, "--max-new-tokens")) {
            NEED();
            if (!cli_int_arg(o, v, 1, 100000, &x)) return CLI_USAGE;
            r.max_new = (int)x;
        } else if (!strcmp(o, "--precision-error")) {
            precision_error = true;
        } else if (!strcmp(o, "--no-prefix-cache")) {
            p.no_prefix_cache = 1;
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
    {
        cattr_attr_params dflt = cattr_attr_default_params(p.method);
        if (p.n_steps == CATTR_STEPS_AUTO && p.method != CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS)
            return cli_usage_error("--steps auto is for layer-ig (not %s)", method_cli_name(p.method));
        if (p.n_steps != CATTR_STEPS_AUTO && (p.delta_tol != dflt.delta_tol || p.max_steps != dflt.max_steps))
            return cli_usage_error("--delta-tol and --max-steps go with --steps auto");
        if (split && p.n_steps == CATTR_STEPS_AUTO)
            return cli_usage_error("--split steps needs a number of --steps, not auto (every part cuts the same steps)");
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
        if (llm_req_check(&p, &r, err, sizeof err) != CLI_OK) return cli_usage_error("%s", err);
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
    /* rank 0 (the only one that writes) checks that no output is an input or another output; then every rank that
     * it runs the same command as rank 0 */
    rc = CLI_OK;
    if (mpi_driver_rank() == 0 &&
        !(cli_folder_in(dir, "the checkpoint") && cli_file_in(prompts, "--prompts") && cli_file_out(output, "--output") &&
          cli_file_out(html, "--html")))
        rc = CLI_USAGE;
    if (prompts || split) {
        rc = mpi_driver_max(rc);
        if (rc == CLI_OK && !cli_ranks_agree(argc, argv, &dir, 1)) rc = CLI_USAGE;
    }
    if (rc != CLI_OK) goto done;
    cattr_status st = cattr_llm_load(dir, &m);
    if (st == CATTR_OK) st = cattr_llm_set_device(m, p.device);
    if (st != CATTR_OK) rc = cli_error(st, "cannot load the model");
    if (prompts) { /* every rank loads the model; they go on only if all did */
        int worst = mpi_driver_max(st != CATTR_OK ? rc : CLI_OK);
        if (worst != CLI_OK && st == CATTR_OK && mpi_driver_rank() == 0)
            fprintf(stderr, "cattr: another rank cannot load the model (see its message)\n");
        cJSON *options = worst == CLI_OK ? result_options(argc, argv) : NULL;
        if (worst == CLI_OK && !options) worst = cli_error(CATTR_ERR_NO_MEMORY, "out of memory");
        rc = worst == CLI_OK ? llm_corpus(m, &p, &r, dir, prompts, output, options, quiet) : worst;
        cJSON_Delete(options);
        goto done;
    }
    if (st != CATTR_OK) goto done;
    rc = llm_req_prepare(m, &p, &r, &o, err, sizeof err);
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
    cli_progress_state prog = {now_s(), false, false, NULL};
    p.progress = cli_progress;
    p.progress_user = &prog;
    for (int k = 0; k < nruns; k++) {
        double t0 = now_s();
        prog.start = t0;
        st = split ? req_attribute_split(m, &p, &o, quiet) : llm_req_attribute(m, &p, &r, &o, NULL, NULL, NULL, NULL);
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
        if (q.n_steps == CATTR_STEPS_AUTO) q.n_steps = o.steps_used; /* the same steps as the call compared with */
        double *seq2 = calloc((size_t)T, sizeof *seq2), *tok2 = calloc((size_t)(n * T), sizeof *tok2);
        double *lp2 = calloc((size_t)n, sizeof *lp2), *d2 = calloc((size_t)n, sizeof *d2);
        if (!seq2 || !tok2 || !lp2 || !d2) st = CATTR_ERR_NO_MEMORY;
        else st = llm_req_attribute(m, &q, &r, &o, seq2, tok2, lp2, d2);
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
    if (llm_req_texts(m, &r, &o, err, sizeof err) != CLI_OK) {
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
        cJSON *root = llm_result_json(&p, &o);
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
        if (p.method == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS && p.n_steps == CATTR_STEPS_AUTO)
            printf("steps: %d (auto, delta tolerance %g)\n", o.steps_used, p.delta_tol);
        if (p.method == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS) {
            printf("convergence delta:");
            for (int64_t k = 0; k < n; k++) printf(" %.3e", o.delta[k]);
            printf("\n");
        }
        terminal_view(o.in_tok, T, o.out_tok, n, o.seq, o.tok, o.seg ? "segments" : r.tmpl ? "slots" : "tokens");
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
    llm_out_free(&o);
    free(times);
    cattr_llm_free(m);
    if (prompts || split) mpi_driver_stop();
    return rc;
}
