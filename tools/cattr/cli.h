/* cli.h - shared pieces of the cattr command-line tool (the only code in cattr that exits). */
#ifndef CATTR_CLI_H
#define CATTR_CLI_H

#include "cattr.h"

#include <stdbool.h>
#include <stdio.h>

/* Exit codes: 0 success, 1 a failed check or an attribution error (bad target, unsupported op, NaN input, ...),
 * 2 a usage error or an unreadable, missing or corrupt file. */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

int cmd_explain(int argc, char **argv);
int cmd_replay(int argc, char **argv);
int cmd_info(int argc, char **argv);

/* Prints "cattr: <what>: <last error>" to stderr and returns the exit code for `st`. */
int cli_error(cattr_status st, const char *what);
/* The exit code for `st`: CLI_USAGE for a bad argument or an unreadable or corrupt file, else CLI_FAIL. */
int cli_error_code(cattr_status st);
/* On this thread from now on (buf non-NULL): the first message cli_error or cli_usage_error gives goes into buf
 * (size bytes) instead of stderr, and cli_captured_status() returns its status (CATTR_ERR_INVALID_ARGUMENT for a
 * usage error; CATTR_OK while none came). cli_capture(NULL, 0) prints again. */
void cli_capture(char *buf, size_t size);
cattr_status cli_captured_status(void);
/* Prints "cattr: <message>" to stderr; returns CLI_USAGE. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Loads a tensor from FILE.npy, FILE.safetensors (its only tensor) or FILE.safetensors:NAME. */
cattr_status cli_load_tensor(const char *spec, cattr_tensor **out);

/* Parses a number with strtol/strtod and range checks; false if the text is not entirely a number. */
bool cli_parse_int(const char *s, long long *out);
bool cli_parse_double(const char *s, double *out);
/* The integer value of option `opt` in [lo, hi]; otherwise prints "cattr: --steps needs an integer from 1 to 1000000,
 * not '1000001'" (or ">= lo" when hi is LLONG_MAX) and returns false. */
bool cli_int_arg(const char *opt, const char *s, long long lo, long long hi, long long *out);
/* Checks a --device value (cattr_device_check); prints the error and returns false when it names no device of this
 * build. */
bool cli_device_arg(const char *name);
/* --dtype's value into *dt (float32 or float64); false after a usage message otherwise. */
bool cli_dtype_arg(const char *v, cattr_dtype *dt);
/* The files a command reads and writes, registered before any output is touched: an output may be neither the same file
 * as an input nor another output of the command (the same st_dev/st_ino; for a file not yet there, the same folder and
 * name; hard links and links to the same file count as the same). cli_file_out also checks that the path may be
 * written (cx_output_kind: not a directory, not a link to a file). `what` names the option in the message. Each
 * returns false with the message printed ("--output 'a.npy' is the same file as --input 'x/../a.npy'"). A path that
 * cannot be examined as an input is left to the loader's own message. */
bool cli_file_in(const char *path, const char *what);
bool cli_file_out(const char *path, const char *what);
/* The regular files of a folder and of its subfolders (not deeper), as inputs: a checkpoint, a case folder, a folder of
 * case folders. A path that is not a folder registers nothing (cli_file_in does). */
bool cli_folder_in(const char *dir, const char *what);
/* Forgets the registered files (a command run twice in one process, as the tests do). */
void cli_files_reset(void);

/* Under MPI (collective): whether every rank runs the same command as rank 0: the same command line (but --quiet) and
 * the same content in the files and folders `paths` names (cx_file_fingerprint, without times: copies on several
 * machines agree). Rank 0 prints which rank differs; every rank returns false then. True without MPI. */
bool cli_ranks_agree(int argc, char **argv, const char *const *paths, int n_paths);

/* The options of a command line as a JSON object, to record what made an output and to tell a rerun with other options:
 * "--steps": "16", a flag (listed in `flags`, NULL-terminated): true, an option given several times: an array of its
 * values in order; the positional argument (the model or checkpoint) as "model". Options in `skip` (NULL-terminated)
 * are left out (--output, --quiet...). NULL when out of memory. */
struct cJSON;
struct cJSON *cli_options_json(int argc, char **argv, const char *const *flags, const char *const *skip);
/* What differs between two such objects (every key of either, compared by their JSON texts), as "--steps "7" here,
 * "16" in the file; ..." in out (at most four, then "..."). Returns the number of differing keys. */
int cli_json_diff(const struct cJSON *here, const struct cJSON *there, char *out, size_t size);

/* Writes `text` to `path` atomically (cx_write_file_atomic). Errors: CATTR_ERR_IO naming the path. */
cattr_status cli_write_text_file(const char *path, const char *text);
/* Parses a byte size: 512M, 2G, 1T (binary multiples; an optional i and B: 2GiB), 1000000. */
bool cli_parse_size(const char *s, size_t *out);

/* The options of an attribution's parameters that explain and explain-llm both take, parsed in one place:
 * --steps N|auto, --delta-tol, --max-steps, --quadrature, --internal-batch-size, --max-memory, --dtype, --device and
 * --precision into *p; --n-samples, --perturbations-per-eval and --seed into *m (the method's own values: p again, or
 * a second set the command merges into the method's defaults; *n_samples_given set when --n-samples came). Option o
 * with its value v (NULL when the command line ends). Returns 1 when o is one of them (its value taken: *i advanced),
 * 0 when it is not, -1 after printing the usage error. */
int cli_attr_option(const char *cmd, const char *o, const char *v, int *i, cattr_attr_params *p, cattr_attr_params *m,
                    bool *n_samples_given);

/* --split: one attribution cut into as many parts as there are MPI ranks (one process without mpirun), each part made
 * by `part` on the rank the farm hands it to (mpi_driver_farm), the parts combined in order on rank 0 by `combine`.
 * part(user, p, n, &blob, &len) returns a malloc'ed blob (freed here); combine(user, blobs, lens, n) writes the
 * result. `rows` is the number of rows per IG step (the examples or target tokens), for the message that tells (for IG)
 * the --internal-batch-size giving one process the same numbers. Collective: every rank calls it and returns rank 0's
 * status (the error message is set on every rank). A part's failure is printed with its message. */
typedef cattr_status (*cli_part_fn)(void *user, int part, int n_parts, void **blob, size_t *len);
typedef cattr_status (*cli_combine_fn)(void *user, const void *const *blobs, const size_t *lens, int n);
cattr_status cli_split_run(cli_part_fn part, cli_combine_fn combine, void *user, int64_t rows, bool quiet);

/* Median of n doubles (sorts in place); NAN for n == 0. */
double cli_median(double *v, int n);

/* A progress bar on stderr, only on a terminal and only once the work has taken a second (cattr_progress_fn); with
 * `always` (--progress) from the first chunk and wherever stderr goes, in Captum's words: "<Method> attribution:
 * NN%|####      | done/total" (`name` the method, e.g. "Feature Ablation"), ending with a newline at 100%. */
typedef struct {
    double start;
    bool shown;
    bool always;
    const char *name;
} cli_progress_state;
void cli_progress(int64_t done, int64_t total, void *user);

int cmd_explain_llm(int argc, char **argv);
/* explain-llm's corpus-mode parsers on fuzzer input (tests/fuzz/fuzz_requests.c); returns 0. */
int cli_corpus_fuzz(const unsigned char *data, size_t size);
/* explain-context's request-line parser (its documents and spans) on fuzzer input (tests/fuzz/fuzz_requests.c); 0. */
int cli_context_fuzz(const unsigned char *data, size_t size);
/* explain's dataset-mode progress file parser on fuzzer input (tests/fuzz/fuzz_requests.c); returns 0. */
int cli_progress_fuzz(const unsigned char *data, size_t size);
int cmd_compare(int argc, char **argv);
int cmd_attack(int argc, char **argv);
int cmd_influence(int argc, char **argv);
int cmd_explain_context(int argc, char **argv);
int cmd_serve(int argc, char **argv);
/* cattr serve's explainers kept between requests on one thread (explain_cache.c): an explainer of model m with
 * parameters p from cache c, or a new one (c NULL, or p with a progress callback or node rules); *owned says whether
 * the caller frees it. cli_explainer_drop frees a cached one (after a call that failed). */
typedef struct cli_explainer_cache cli_explainer_cache;
cli_explainer_cache *cli_explainer_cache_new(void);
void cli_explainer_cache_free(cli_explainer_cache *c);
cattr_status cli_explainer_get(cli_explainer_cache *c, const cattr_model *m, const cattr_attr_params *p,
                               cattr_explainer **e, bool *owned);
void cli_explainer_drop(cli_explainer_cache *c, cattr_explainer *e);
/* cattr serve: one `cattr explain` in memory. argv as explain's command line without files: the model's name as the
 * positional argument (the JSON's "model"), "--input @K" once per tensor, "--quiet"; the served model (borrowed, never
 * changed: its device was set when it was loaded), the n_inputs input tensors, the n_side tensors that "--baseline @S<k>"
 * and "--feature-mask @S<k>" name, a cancel flag (cattr_attr_params), the thread's explainer cache (NULL: none).
 * Returns explain's exit code; on CLI_OK *json holds the JSON explain writes (malloc'ed). Messages go where
 * cli_capture says. */
int cli_explain_mem(const cattr_model *m, int argc, char **argv, const cattr_tensor *const *inputs, int n_inputs,
                    const cattr_tensor *const *side, int n_side, const volatile int *cancel, cli_explainer_cache *cache,
                    char **json);
/* cattr serve: one explain-llm request line (corpus mode's fields, corpus.c) on a loaded checkpoint, explain-llm's
 * defaults under it, the cancel flag; *json the record's JSON (malloc'ed) on CLI_OK, else the message in err and
 * the library's status in *ast. */
struct cJSON;
/* cattr serve: one explain-context request on checkpoint m (loaded from dir): the fields of a --requests line (id,
 * question, contexts, answer, spans; no context_files) and explain-context's options by Captum-like names (method,
 * sources, samples, keep_prob, alpha, seed, max_new_tokens, top_documents, template, dtype, quality, per_token; not
 * the proxy), the cancel flag; *json the record corpus mode writes (malloc'ed) on CLI_OK, else the message in err (or
 * where cli_capture says) and the library's status in *ast. m NULL: the body is checked, nothing run (fuzzing). */
int cli_context_answer_mem(cattr_llm *m, const char *dir, const struct cJSON *rq, const volatile int *cancel,
                           char **json, cattr_status *ast, char *err, size_t size);
int cli_llm_answer_mem(cattr_llm *m, const struct cJSON *rq, const volatile int *cancel, char **json, cattr_status *ast,
                       char *err, size_t size);
/* The serve request decoder on arbitrary bytes (the fuzz harness): never crashes, leaks or reads past the data. */
int cli_serve_fuzz(const unsigned char *data, size_t size);
int cmd_evaluate(int argc, char **argv);

/* explain's --metrics (metrics_cli.c): which of Captum's metrics, and their perturbations. */
typedef struct cli_metric_opts {
    bool infidelity, sensitivity, normalize;
    bool deletion, insertion, curve_softmax; /* the curves (cattr_deletion_curve); --curve-softmax */
    long long samples;    /* --metric-samples (10) */
    double noise, radius; /* --metric-noise: infidelity's Gaussian std (0.003); --metric-radius: sensitivity's (0.02) */
    long long curve_steps; /* --curve-steps (20) */
    const char *curve_png; /* --curve-png: the curves' plot */
    bool randomization, independent; /* the model-randomisation check; --randomize-independent */
    const char *randomize;           /* --randomize-modules LIST (NULL: every module with weights, output first) */
} cli_metric_opts;
void cli_metric_defaults(cli_metric_opts *mo);
/* Takes option o (value v, *i advanced past it): 1 taken, 0 not a metric option, -1 a usage error (printed). */
int cli_metric_option(const char *o, const char *v, int *i, cli_metric_opts *mo);
/* The metrics of attributions attr (n_attr tensors) that e made for call: *out a JSON object {"infidelity": {...},
 * "sensitivity_max": {...}, "deletion": {...}, "insertion": {...}, "randomization": {...}} (NULL when none was
 * asked); writes --curve-png. m: the model e explains (the randomisation check copies it).
 * Returns a CLI exit code (the error printed). */
int cli_metrics_run(const cli_metric_opts *mo, const cattr_model *m, cattr_explainer *e, const cattr_attr_params *p,
                    const cattr_call *call, cattr_tensor *const *attr, int n_attr, struct cJSON **out);
/* The words printed after a metric's name: what it measures. */
const char *cli_metric_label(const char *name);
/* Prints the randomisation check's JSON (cli_metrics_run's "randomization") as a table: a line per module. */
void cli_print_randomization(const struct cJSON *r);
/* Whether any metric was asked for. */
static inline bool cli_metrics_any(const cli_metric_opts *mo) {
    return mo->infidelity || mo->sensitivity || mo->deletion || mo->insertion || mo->randomization;
}

/* Log callback printing warnings and errors to stderr. */
void cli_log(cattr_log_level level, const char *msg, void *user);

#endif
