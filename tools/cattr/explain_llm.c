/* explain_llm.c - `cattr explain-llm`: which prompt tokens made a language model predict a continuation. Writes
 * Captum's LLMAttributionResult fields as JSON, a self-contained HTML heatmap, and a terminal view. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include "io/fileutil.h"
#include "viz/heatmap.h"

#include <cjson/cJSON.h>
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
        "  --max-memory SIZE       activation memory budget, e.g. 2G (default: 1/4 of free RAM, at most 896M)\n"
        "  --device NAME           cpu (default) | cpu-check (reference kernels, protected memory) | cuda[:N]\n"
        "  --precision P           highest (default: float32 throughout) | high (bfloat16 inputs of the layers'\n"
        "                          projections, float32 accumulation; AVX-512 BF16 CPUs, float32 only)\n"
        "  --precision-error       also run at the other precision and print the error of high against highest\n"
        "  --perturbations-per-eval N  perturbation methods: sequences per forward pass (default: from --max-memory;\n"
        "                          1 = one forward per perturbed sequence, as Captum's default)\n"
        "  --no-prefix-cache       feature-ablation: run every ablated sequence in full (default: the unchanged prefix\n"
        "                          is computed once and only the positions from the ablated token on are run)\n"
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

int cmd_explain_llm(int argc, char **argv) {
    const char *dir = NULL, *prompt = NULL, *target = NULL, *prompt_ids = NULL, *target_ids = NULL, *output = NULL,
               *html = NULL, *baseline = NULL;
    cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS);
    int64_t baseline_token = -1;
    int max_new = 8, runs = 0, n_slots = 0, n_slot_bases = 0;
    bool precision_error = false;
    bool quiet = false;
    const char *tmpl = NULL, *slots[16] = {0}, *slot_bases[16] = {0};
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
        } else if (!strcmp(o, "--prompt")) { NEED(); prompt = v;
        } else if (!strcmp(o, "--prompt-ids")) { NEED(); prompt_ids = v;
        } else if (!strcmp(o, "--target")) { NEED(); target = v;
        } else if (!strcmp(o, "--target-ids")) { NEED(); target_ids = v;
        } else if (!strcmp(o, "--method")) {
            NEED();
            int mk = !strcmp(v, "layer-ig") ? CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS : cattr_method_from_name(v);
            if (mk != CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS && mk != CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION &&
                mk != CATTR_METHOD_FEATURE_ABLATION && mk != CATTR_METHOD_SHAPLEY_VALUE_SAMPLING &&
                mk != CATTR_METHOD_LIME && mk != CATTR_METHOD_KERNEL_SHAP)
                return cli_usage_error("unknown method '%s' (see cattr explain-llm --help)", v);
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
        } else if (!strcmp(o, "--baseline")) { NEED(); baseline = v;
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
            max_new = (int)x;
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
        } else if (!strcmp(o, "--quiet") || !strcmp(o, "-q")) {
            quiet = true;
        } else if (!strcmp(o, "--template")) {
            NEED();
            tmpl = v;
        } else if (!strcmp(o, "--slot") || !strcmp(o, "--slot-baseline")) {
            NEED();
            bool base = !strcmp(o, "--slot-baseline");
            int *cnt = base ? &n_slot_bases : &n_slots;
            if (*cnt >= 16) return cli_usage_error("at most 16 %s", o);
            (base ? slot_bases : slots)[(*cnt)++] = v;
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
    if (tmpl) { /* the prompt is the template with its slots filled */
        if (prompt || prompt_ids) return cli_usage_error("--template replaces --prompt");
        if (n_slots < 1) return cli_usage_error("--template needs a --slot value per '{}'");
        if (n_slot_bases && n_slot_bases != n_slots)
            return cli_usage_error("give one --slot-baseline per --slot (%d slots, %d baselines)", n_slots, n_slot_bases);
        if (p.method != CATTR_METHOD_FEATURE_ABLATION) return cli_usage_error("--template works with --method feature-ablation");
        static char filled[8192];
        size_t o = 0;
        int k = 0;
        for (const char *c = tmpl; *c && o + 1 < sizeof filled;) {
            if (c[0] == '{' && c[1] == '}' && k < n_slots) {
                o += (size_t)snprintf(filled + o, sizeof filled - o, "%s", slots[k++]);
                c += 2;
            } else {
                filled[o++] = *c++;
            }
        }
        filled[o < sizeof filled ? o : sizeof filled - 1] = 0;
        prompt = filled;
    }
    if (!!prompt + !!prompt_ids != 1) return cli_usage_error("give exactly one of --prompt and --prompt-ids");
    if (target && target_ids) return cli_usage_error("give at most one of --target and --target-ids");
    if (output && (strlen(output) < 5 || strcmp(output + strlen(output) - 5, ".json")))
        return cli_usage_error("--output must end in .json: '%s'", output);
    cattr_llm *m = NULL;
    int64_t *ids = NULL, *tg = NULL, T = 0, n = 0;
    double *seq = NULL, *tok = NULL, *lp = NULL, *delta = NULL, *times = NULL;
    char **in_tok = NULL, **out_tok = NULL;
    int rc = CLI_FAIL;
    cattr_status st = cattr_llm_load(dir, &m);
    if (st == CATTR_OK) st = cattr_llm_set_device(m, p.device);
    if (st != CATTR_OK) {
        rc = cli_error(st, "cannot load the model");
        goto done;
    }
    if (prompt) st = cattr_llm_encode(m, prompt, &ids, &T);
    else if (parse_ids(prompt_ids, &ids, &T)) {
        rc = cli_usage_error("--prompt-ids must be integers such as 1,2,3");
        goto done;
    }
    if (st != CATTR_OK) {
        rc = cli_error(st, "cannot tokenize the prompt");
        goto done;
    }
    if (T < 1) {
        rc = cli_usage_error("the prompt tokenizes to nothing");
        goto done;
    }
    if (target) {
        st = cattr_llm_encode(m, target, &tg, &n);
        if (st != CATTR_OK) {
            rc = cli_error(st, "cannot tokenize the target");
            goto done;
        }
        if (n < 1) {
            rc = cli_usage_error("the target '%s' tokenizes to nothing", target);
            goto done;
        }
    } else if (target_ids) {
        if (parse_ids(target_ids, &tg, &n) || n < 1) {
            rc = cli_usage_error("--target-ids must be integers such as 4,5");
            goto done;
        }
    } else {
        st = cattr_llm_generate(m, p.dtype, ids, T, max_new, &tg, &n);
        if (st != CATTR_OK) {
            rc = cli_error(st, "generation failed");
            goto done;
        }
        if (!quiet) printf("generated %lld tokens (greedy)\n", (long long)n);
    }
    if (baseline) {
        long long x;
        if (!strcmp(baseline, "zeros")) baseline_token = -1;
        else if (!strcmp(baseline, "pad")) baseline_token = cattr_llm_pad_token(m);
        else if (cli_parse_int(baseline, &x) && x >= 0) baseline_token = x;
        else {
            rc = cli_usage_error("--baseline must be zeros, pad or a token id: '%s'", baseline);
            goto done;
        }
    }
    if (tmpl) T = n_slots;
    seq = calloc((size_t)T, sizeof *seq);
    tok = calloc((size_t)(n * T), sizeof *tok);
    lp = calloc((size_t)n, sizeof *lp);
    delta = calloc((size_t)n, sizeof *delta);
    int nruns = runs > 0 ? runs : 1;
    times = calloc((size_t)nruns, sizeof *times);
    cattr_llm_call call = cattr_llm_call_make(ids, T, tg, n);
    call.baseline_token = baseline_token;
    cli_progress_state prog = {now_s(), false};
    p.progress = cli_progress;
    p.progress_user = &prog;
    for (int r = 0; r < nruns; r++) {
        double t0 = now_s();
        prog.start = t0;
        if (tmpl) { /* one column per slot */
            st = cattr_llm_attribute_template(m, &p, tmpl, slots, n_slot_bases ? slot_bases : NULL, n_slots, tg, n,
                                              seq, tok);
            for (int64_t k = 0; k < n; k++) lp[k] = delta[k] = NAN;
        } else {
            st = cattr_llm_attribute(m, &p, &call, seq, tok, lp, delta);
        }
        times[r] = now_s() - t0;
        if (st != CATTR_OK) {
            rc = cli_error(st, "attribution failed");
            goto done;
        }
    }
    if (precision_error) { /* the same attribution at the other precision: the error of "high" against "highest" */
        cattr_attr_params q = p;
        q.precision = p.precision == CATTR_PRECISION_HIGH ? CATTR_PRECISION_HIGHEST : CATTR_PRECISION_HIGH;
        q.progress = NULL;
        double *seq2 = calloc((size_t)T, sizeof *seq2), *tok2 = calloc((size_t)(n * T), sizeof *tok2);
        double *lp2 = calloc((size_t)n, sizeof *lp2), *d2 = calloc((size_t)n, sizeof *d2);
        if (!seq2 || !tok2 || !lp2 || !d2) st = CATTR_ERR_NO_MEMORY;
        else if (tmpl) st = cattr_llm_attribute_template(m, &q, tmpl, slots, n_slot_bases ? slot_bases : NULL, n_slots, tg, n, seq2, tok2);
        else st = cattr_llm_attribute(m, &q, &call, seq2, tok2, lp2, d2);
        if (st == CATTR_OK) {
            const double *hi = p.precision == CATTR_PRECISION_HIGH ? seq : seq2, *ref = hi == seq ? seq2 : seq;
            double e = 0, mx = 0, el = 0;
            for (int64_t i = 0; i < T; i++) {
                e = fmax(e, fabs(hi[i] - ref[i]));
                mx = fmax(mx, fabs(ref[i]));
            }
            for (int64_t k = 0; !tmpl && k < n; k++) el = fmax(el, fabs(lp[k] - lp2[k]));
            fprintf(stderr, "precision high vs highest: max |seq_attr error| %.3e (%.3e of max |seq_attr| %.3e)", e,
                    mx > 0 ? e / mx : 0.0, mx);
            if (!tmpl) fprintf(stderr, ", max |target log-prob error| %.3e", el);
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
    in_tok = calloc((size_t)T, sizeof *in_tok);
    out_tok = calloc((size_t)n, sizeof *out_tok);
    for (int64_t i = 0; i < T; i++) in_tok[i] = tmpl ? strdup(slots[i]) : token_text(m, ids[i]);
    for (int64_t k = 0; k < n; k++) out_tok[k] = token_text(m, tg[k]);
    const char *mname = p.method == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS ? "layer-ig"
                        : p.method == CATTR_METHOD_LAYER_GRADIENT_X_ACTIVATION ? "layer-gradient-x-activation"
                        : p.method == CATTR_METHOD_FEATURE_ABLATION ? "feature-ablation"
                        : p.method == CATTR_METHOD_LIME ? "lime"
                        : p.method == CATTR_METHOD_KERNEL_SHAP ? "kernel-shap" : "shapley-value-sampling";
    if (html) { /* before the JSON, so that a failure leaves neither */
        char *page = NULL;
        st = cx_html_token_heatmap(dir, (const char *const *)in_tok, T, (const char *const *)out_tok, n, seq, tok, lp,
                                   mname, &page);
        if (st == CATTR_OK) st = cli_write_text_file(html, page);
        free(page);
        if (st != CATTR_OK) {
            rc = cli_error(st, "cannot write the HTML page");
            goto done;
        }
    }
    if (output) {
        cJSON *root = cJSON_CreateObject();
        cJSON *a = cJSON_AddArrayToObject(root, "input_tokens");
        for (int64_t i = 0; i < T; i++) cJSON_AddItemToArray(a, cJSON_CreateString(in_tok[i]));
        a = cJSON_AddArrayToObject(root, "input_ids");
        for (int64_t i = 0; i < T; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)ids[i]));
        a = cJSON_AddArrayToObject(root, "output_tokens");
        for (int64_t k = 0; k < n; k++) cJSON_AddItemToArray(a, cJSON_CreateString(out_tok[k]));
        a = cJSON_AddArrayToObject(root, "output_ids");
        for (int64_t k = 0; k < n; k++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)tg[k]));
        cJSON_AddItemToObject(root, "seq_attr", num_array(seq, T));
        if (p.method == CATTR_METHOD_LIME || p.method == CATTR_METHOD_KERNEL_SHAP) {
            cJSON_AddNullToObject(root, "token_attr"); /* Captum gives none for these */
        } else {
            a = cJSON_AddArrayToObject(root, "token_attr");
            for (int64_t k = 0; k < n; k++) cJSON_AddItemToArray(a, num_array(tok + k * T, T));
        }
        cJSON_AddItemToObject(root, "target_logprobs", num_array(lp, n));
        cJSON_AddStringToObject(root, "method", mname);
        cJSON *args = cJSON_AddObjectToObject(root, "args");
        cJSON_AddStringToObject(args, "dtype", cattr_dtype_name(p.dtype));
        cJSON_AddStringToObject(args, "precision", p.precision == CATTR_PRECISION_HIGH ? "high" : "highest");
        if (p.method == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS) {
            cJSON_AddNumberToObject(args, "n_steps", p.n_steps);
            cJSON_AddStringToObject(args, "method", cattr_quadrature_name(p.quadrature));
        }
        if (p.method == CATTR_METHOD_SHAPLEY_VALUE_SAMPLING) cJSON_AddNumberToObject(args, "n_samples", p.n_samples);
        if (baseline_token >= 0) cJSON_AddNumberToObject(args, "baseline_token", (double)baseline_token);
        else cJSON_AddStringToObject(args, "baseline", p.method == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS ? "zeros" : "pad");
        if (p.method == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS) cJSON_AddItemToObject(root, "convergence_delta", num_array(delta, n));
        else cJSON_AddNullToObject(root, "convergence_delta");
        char *text = cJSON_Print(root);
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
        if (n > 0 && !isnan(lp[0])) {
            printf("target log-probabilities:");
            for (int64_t k = 0; k < n; k++) printf(" %.4f", lp[k]);
            printf("\n");
        }
        if (p.method == CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS) {
            printf("convergence delta:");
            for (int64_t k = 0; k < n; k++) printf(" %.3e", delta[k]);
            printf("\n");
        }
        terminal_view(in_tok, T, out_tok, n, seq, tok);
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
    for (int64_t i = 0; in_tok && i < T; i++) free(in_tok[i]);
    for (int64_t k = 0; out_tok && k < n; k++) free(out_tok[k]);
    free(in_tok);
    free(out_tok);
    free(ids);
    free(tg);
    free(seq);
    free(tok);
    free(lp);
    free(delta);
    free(times);
    cattr_llm_free(m);
    return rc;
}
