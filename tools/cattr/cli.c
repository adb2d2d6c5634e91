/* cli.c - helpers shared by the cattr subcommands: error reporting and exit codes, argument parsing, tensor
 * loading, progress and logging. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "mpi_driver.h"

#include "core/core.h"
#include "io/fileutil.h"

#include <cjson/cJSON.h>

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int cli_error_code(cattr_status st) {
    return st == CATTR_ERR_IO || st == CATTR_ERR_INVALID_ARGUMENT || st == CATTR_ERR_FORMAT ? CLI_USAGE : CLI_FAIL;
}

/* cli_capture's buffer on this thread (serve's workers): the first error of a request, instead of stderr */
static _Thread_local char *cap_buf;
static _Thread_local size_t cap_size;
static _Thread_local cattr_status cap_status;

void cli_capture(char *buf, size_t size) {
    cap_buf = size ? buf : NULL;
    cap_size = size;
    cap_status = CATTR_OK;
    if (cap_buf) cap_buf[0] = '\0';
}

cattr_status cli_captured_status(void) { return cap_status; }

int cli_error(cattr_status st, const char *what) {
    if (cap_buf) {
        if (!cap_buf[0]) {
            snprintf(cap_buf, cap_size, "%s: %s", what, cattr_last_error());
            cap_status = st;
        }
        return cli_error_code(st);
    }
    char esc[1024];
    cx_escape_text(what, esc, sizeof esc);
    fprintf(stderr, "cattr: %s: %s\n", esc, cattr_last_error());
    return cli_error_code(st);
}

int cli_usage_error(const char *fmt, ...) {
    char msg[2048], esc[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (cap_buf) {
        if (!cap_buf[0]) {
            snprintf(cap_buf, cap_size, "%s", msg);
            cap_status = CATTR_ERR_INVALID_ARGUMENT;
        }
        return CLI_USAGE;
    }
    cx_escape_text(msg, esc, sizeof esc); /* arguments may hold any bytes */
    fprintf(stderr, "cattr: %s\n", esc);
    return CLI_USAGE;
}

void cli_log(cattr_log_level level, const char *msg, void *user) {
    (void)user;
    /* CATTR_LOG=info (or debug) shows the library's planning messages too (chunk sizes, memory) */
    static int min = -1;
    if (min < 0) {
        const char *e = getenv("CATTR_LOG");
        min = e && !strcmp(e, "debug") ? CATTR_LOG_DEBUG : e && !strcmp(e, "info") ? CATTR_LOG_INFO : CATTR_LOG_WARN;
    }
    static const char *names[] = {"debug", "info", "warning", "error"};
    if ((int)level >= min) fprintf(stderr, "cattr: %s: %s\n", names[level], msg);
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

cattr_status cli_load_tensor(const char *spec, cattr_tensor **out) {
    *out = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s", spec);
    char *name = NULL;
    char *st = strstr(path, ".safetensors:");
    if (st) {
        st[strlen(".safetensors")] = 0;
        name = st + strlen(".safetensors") + 1;
    }
    if (ends_with(path, ".safetensors")) {
        cattr_tensor_set *set = NULL;
        cattr_status s = cattr_tensor_set_load(path, &set);
        if (s != CATTR_OK) return s;
        const cattr_tensor *t = NULL;
        if (name) {
            t = cattr_tensor_set_get(set, name);
            if (!t) {
                cattr_tensor_set_free(set);
                return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "'%s' has no tensor named '%s'", path, name);
            }
        } else if (cattr_tensor_set_count(set) == 1) {
            t = cattr_tensor_set_get(set, cattr_tensor_set_name(set, 0));
        } else {
            int n = cattr_tensor_set_count(set);
            cattr_tensor_set_free(set);
            return cx_fail(CATTR_ERR_INVALID_ARGUMENT, "'%s' holds %d tensors: name one as FILE.safetensors:NAME", path, n);
        }
        s = cattr_tensor_convert(t, cattr_tensor_dtype(t), out);
        cattr_tensor_set_free(set);
        return s;
    }
    return cattr_tensor_load_npy(path, out);
}

bool cli_parse_int(const char *s, long long *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return true;
}

bool cli_int_arg(const char *opt, const char *s, long long lo, long long hi, long long *out) {
    long long v;
    if (cli_parse_int(s, &v) && v >= lo && v <= hi) {
        *out = v;
        return true;
    }
    if (hi == LLONG_MAX) (void)cli_usage_error("%s needs an integer >= %lld, not '%s'", opt, lo, s);
    else (void)cli_usage_error("%s needs an integer from %lld to %lld, not '%s'", opt, lo, hi, s);
    return false;
}

int cli_attr_option(const char *cmd, const char *o, const char *v, int *i, cattr_attr_params *p, cattr_attr_params *m,
                    bool *n_samples_given) {
    static const char *const opts[] = {"--steps", "--delta-tol", "--max-steps", "--quadrature", "--internal-batch-size",
                                       "--max-memory", "--dtype", "--device", "--precision", "--n-samples",
                                       "--perturbations-per-eval", "--seed", NULL};
    int k = 0;
    while (opts[k] && strcmp(o, opts[k])) k++;
    if (!opts[k]) return 0;
    if (!v) return (void)cli_usage_error("%s needs a value (see cattr %s --help)", o, cmd), -1;
    (*i)++;
    long long n;
    switch (k) {
    case 0: /* --steps */
        if (!strcmp(v, "auto")) p->n_steps = CATTR_STEPS_AUTO;
        else if (!cli_int_arg(o, v, 1, 1000000, &n)) return -1;
        else p->n_steps = (int)n;
        return 1;
    case 1:
        if (!cli_parse_double(v, &p->delta_tol) || !(p->delta_tol > 0 && p->delta_tol < 1))
            return (void)cli_usage_error("--delta-tol needs a number > 0 and < 1, not '%s'", v), -1;
        return 1;
    case 2:
        if (!cli_int_arg(o, v, 8, 1000000, &n)) return -1;
        p->max_steps = (int)n;
        return 1;
    case 3: {
        int q = cattr_quadrature_from_name(v);
        if (q < 0) return (void)cli_usage_error("unknown quadrature '%s'", v), -1;
        p->quadrature = (cattr_quadrature)q;
        return 1;
    }
    case 4:
        if (!cli_int_arg(o, v, 1, 1000000000, &n)) return -1;
        p->internal_batch_size = (int)n;
        return 1;
    case 5:
        if (!cli_parse_size(v, &p->max_memory) || !p->max_memory)
            return (void)cli_usage_error("--max-memory needs a size such as 512M or 2G, not '%s'", v), -1;
        return 1;
    case 6:
        return cli_dtype_arg(v, &p->dtype) ? 1 : -1;
    case 7:
        if (!cli_device_arg(v)) return -1;
        p->device = v;
        return 1;
    case 8:
        if (!strcmp(v, "highest")) p->precision = CATTR_PRECISION_HIGHEST;
        else if (!strcmp(v, "high")) p->precision = CATTR_PRECISION_HIGH;
        else return (void)cli_usage_error("--precision must be highest or high, not '%s'", v), -1;
        return 1;
    case 9:
        if (!cli_int_arg(o, v, 1, 100000000, &n)) return -1;
        m->n_samples = (int)n;
        if (n_samples_given) *n_samples_given = true;
        return 1;
    case 10:
        if (!cli_int_arg(o, v, 1, 100000000, &n)) return -1;
        m->perturbations_per_eval = (int)n;
        return 1;
    default: /* --seed */
        if (!cli_int_arg(o, v, 0, LLONG_MAX, &n)) return -1;
        m->seed = (uint64_t)n;
        return 1;
    }
}

bool cli_parse_double(const char *s, double *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end) return false;
    *out = v;
    return true;
}

bool cli_parse_size(const char *s, size_t *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || !(v >= 0) || v > 1e18 || end == s) return false;
    double mul = 1;
    if (*end == 'k' || *end == 'K') mul = 1024.0, end++;
    else if (*end == 'm' || *end == 'M') mul = 1024.0 * 1024, end++;
    else if (*end == 'g' || *end == 'G') mul = 1024.0 * 1024 * 1024, end++;
    else if (*end == 't' || *end == 'T') mul = 1024.0 * 1024 * 1024 * 1024, end++;
    if (mul > 1 && *end == 'i') end++;
    if (*end == 'B') end++;
    if (*end) return false;
    *out = (size_t)(v * mul);
    return true;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double cli_median(double *v, int n) {
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void cli_progress(int64_t done, int64_t total, void *user) {
    cli_progress_state *ps = user;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    if (ps->always) { /* --progress: Captum's form, every update, wherever stderr goes */
        if (total <= 0) return;
        int fill = (int)(10 * done / total);
        fprintf(stderr, "\r%s attribution: %3d%%|%.*s%*s| %lld/%lld", ps->name ? ps->name : "", (int)(100 * done / total),
                fill, "##########", 10 - fill, "", (long long)done, (long long)total);
        if (done >= total) fprintf(stderr, "\n");
        fflush(stderr);
        return;
    }
    if (t - ps->start < 1.0 && !ps->shown) return; /* short work shows nothing (and costs no system call) */
    static int tty = -1;
    if (tty < 0) tty = isatty(STDERR_FILENO);
    if (!tty) return;
    int width = 40, fill = total > 0 ? (int)(width * done / total) : width;
    fprintf(stderr, "\r[%.*s%*s] %lld/%lld %.1fs", fill, "########################################", width - fill, "",
            (long long)done, (long long)total, t - ps->start);
    if (done >= total) fprintf(stderr, "\n");
    ps->shown = done < total;
    fflush(stderr);
}

bool cli_dtype_arg(const char *v, cattr_dtype *dt) {
    if (!strcmp(v, "float32")) *dt = CATTR_FLOAT32;
    else if (!strcmp(v, "float64")) *dt = CATTR_FLOAT64;
    else return (void)cli_usage_error("--dtype must be float32 or float64, not '%s'", v), false;
    return true;
}

bool cli_device_arg(const char *name) {
    cattr_status st = cattr_device_check(name);
    if (st == CATTR_OK) return true;
    char esc[1024];
    cx_escape_text(cattr_last_error(), esc, sizeof esc);
    fprintf(stderr, "cattr: --device: %s\n", esc);
    return false;
}

/* ---- the files of a command ------------------------------------------------------------------------------------ */

typedef struct cli_file {
    dev_t dev;
    ino_t ino;
    char *name; /* for a file not yet there: its name in the folder (dev, ino); else NULL */
    char *path; /* as given, for messages */
    const char *what;
    bool out;
} cli_file;

static cli_file *g_files;
static int g_n_files, g_cap_files;

void cli_files_reset(void) {
    for (int i = 0; i < g_n_files; i++) {
        free(g_files[i].name);
        free(g_files[i].path);
    }
    free(g_files);
    g_files = NULL;
    g_n_files = g_cap_files = 0;
}

/* The identity of `path`: the file's (dev, ino), or for a file not yet there its folder's and its own name. */
static bool file_key(const char *path, cli_file *k) {
    struct stat sb;
    memset(k, 0, sizeof *k);
    if (stat(path, &sb) == 0) {
        k->dev = sb.st_dev;
        k->ino = sb.st_ino;
        return true;
    }
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash == path ? 1 : slash - path), path);
    if (stat(dir, &sb) != 0) return false;
    k->dev = sb.st_dev;
    k->ino = sb.st_ino;
    k->name = strdup(slash ? slash + 1 : path);
    return k->name != NULL;
}

static bool file_add(const char *path, const char *what, bool out) {
    if (!path || !*path) return true;
    cli_file k;
    if (!file_key(path, &k)) return true; /* its loader or writer names the problem */
    k.path = strdup(path);
    k.what = what;
    k.out = out;
    for (int i = 0; i < g_n_files; i++) {
        const cli_file *f = &g_files[i];
        bool same = f->dev == k.dev && f->ino == k.ino && (!f->name) == (!k.name) && (!k.name || !strcmp(f->name, k.name));
        if (same && (out || f->out)) {
            char a[1024], b[1024];
            cx_escape_text(path, a, sizeof a);
            cx_escape_text(f->path, b, sizeof b);
            fprintf(stderr, "cattr: %s '%s' is the same file as %s '%s': %s\n", what, a, f->what, b,
                    out && f->out ? "two outputs cannot share a file" : "an output must not overwrite an input");
            free(k.name);
            free(k.path);
            return false;
        }
    }
    if (g_n_files == g_cap_files) {
        int cap = g_cap_files ? 2 * g_cap_files : 64;
        cli_file *grown = realloc(g_files, (size_t)cap * sizeof *grown);
        if (grown) {
            g_files = grown;
            g_cap_files = cap;
        }
    }
    if (!k.path || g_n_files == g_cap_files) { /* out of memory: not checked */
        free(k.name);
        free(k.path);
        return true;
    }
    g_files[g_n_files++] = k;
    return true;
}

bool cli_file_in(const char *path, const char *what) { return file_add(path, what, false); }

bool cli_file_out(const char *path, const char *what) {
    if (!path || !*path) return true;
    cx_dest kind;
    if (cx_output_kind(path, &kind) != CATTR_OK) {
        char esc[1024];
        cx_escape_text(cattr_last_error(), esc, sizeof esc);
        fprintf(stderr, "cattr: %s: %s\n", what, esc);
        return false;
    }
    if (kind == CX_DEST_STREAM) return true; /* /dev/stdout, /dev/null, a pipe: written in place, never replaced */
    return file_add(path, what, true);
}

static bool folder_in(const char *dir, const char *what, int depth) {
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d) return true;
    bool ok = true;
    for (struct dirent *de; ok && (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        size_t len = strlen(dir) + strlen(de->d_name) + 2;
        char *full = malloc(len);
        struct stat sb;
        if (!full) break;
        snprintf(full, len, "%s/%s", dir, de->d_name);
        if (stat(full, &sb) == 0 && S_ISREG(sb.st_mode)) ok = file_add(full, what, false);
        else if (depth > 0 && S_ISDIR(sb.st_mode)) ok = folder_in(full, what, depth - 1);
        free(full);
    }
    closedir(d);
    return ok;
}

bool cli_folder_in(const char *dir, const char *what) { return folder_in(dir, what, 1); }

bool cli_ranks_agree(int argc, char **argv, const char *const *paths, int n_paths) {
    if (mpi_driver_size() < 2) return true;
    uint64_t h = 0;
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--quiet") && strcmp(argv[i], "-q")) h = mpi_driver_hash(h, argv[i], strlen(argv[i]) + 1);
    for (int k = 0; k < n_paths; k++) {
        uint64_t fp = 0;
        if (paths[k] && cx_file_fingerprint(paths[k], false, &fp) != CATTR_OK) fp = 1; /* its loader will say why */
        h = mpi_driver_hash(h, &fp, sizeof fp);
    }
    int odd = mpi_driver_agree(h);
    if (odd && mpi_driver_rank() == 0)
        fprintf(stderr, "cattr: rank %d does not run the same command as rank 0 (its command line, or the content of "
                "the files it reads, differs): every rank of the job must run one command\n", odd);
    return odd == 0;
}

static bool in_list(const char *s, const char *const *list) {
    for (; list && *list; list++)
        if (!strcmp(s, *list)) return true;
    return false;
}

cJSON *cli_options_json(int argc, char **argv, const char *const *flags, const char *const *skip) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 1; o && i < argc; i++) {
        const char *k = argv[i], *v = NULL;
        if (k[0] != '-' || !k[1]) { /* the positional argument */
            v = k;
            k = "model";
        } else if (!in_list(k, flags)) {
            v = i + 1 < argc ? argv[++i] : NULL;
        }
        if (!strcmp(k, "-o")) k = "--output";
        if (!strcmp(k, "-q")) k = "--quiet";
        if (in_list(k, skip)) continue;
        cJSON *val = v ? cJSON_CreateString(v) : cJSON_CreateTrue(), *old = cJSON_GetObjectItemCaseSensitive(o, k);
        if (!val) {
            cJSON_Delete(o);
            return NULL;
        }
        if (!old) {
            cJSON_AddItemToObject(o, k, val);
        } else { /* given again: the values in order */
            if (!cJSON_IsArray(old)) {
                cJSON *arr = cJSON_CreateArray();
                cJSON_AddItemToArray(arr, cJSON_Duplicate(old, true));
                cJSON_ReplaceItemInObjectCaseSensitive(o, k, arr);
                old = arr;
            }
            cJSON_AddItemToArray(old, val);
        }
    }
    return o;
}

int cli_json_diff(const cJSON *here, const cJSON *there, char *out, size_t size) {
    size_t at = 0;
    int nd = 0;
    if (size) out[0] = 0;
    for (int pass = 0; pass < 2; pass++) {
        const cJSON *a = pass ? there : here, *b = pass ? here : there, *it;
        cJSON_ArrayForEach(it, a) {
            const cJSON *o = b ? cJSON_GetObjectItemCaseSensitive(b, it->string) : NULL;
            if (pass && o) continue; /* compared in the first pass */
            char *ta = cJSON_PrintUnformatted(it), *tb = o ? cJSON_PrintUnformatted(o) : NULL;
            if (ta && (!tb || strcmp(ta, tb))) {
                const char *h = pass ? tb : ta, *t = pass ? ta : tb;
                if (nd < 4 && at < size)
                    at += (size_t)snprintf(out + at, size - at, "%s%s %s here, %s in the file", at ? "; " : "",
                                           it->string, h ? h : "not given", t ? t : "not given");
                else if (nd == 4 && at < size)
                    at += (size_t)snprintf(out + at, size - at, "; ...");
                nd++;
            }
            free(ta);
            free(tb);
        }
    }
    return nd;
}

static cattr_status put_text(FILE *f, void *ctx) { return fputs((const char *)ctx, f) < 0 ? CATTR_ERR_IO : CATTR_OK; }

cattr_status cli_write_text_file(const char *path, const char *text) {
    return cx_write_file_atomic(path, put_text, (void *)text);
}

/* ---- one attribution split over ranks (--split steps) ---------------------------------------------------------- */

typedef struct split_run {
    cli_part_fn part;
    void *user;
    int n;
    void **blobs;
    size_t *lens;
} split_run;

static int split_work(int64_t item, char **data, size_t *len, void *user) {
    split_run *r = user;
    void *b = NULL;
    if (r->part(r->user, (int)item, r->n, &b, len) == CATTR_OK) {
        *data = b;
        return 0;
    }
    char msg[1024];
    snprintf(msg, sizeof msg, "part %lld: %s", (long long)item, cattr_last_error());
    *len = strlen(msg) + 1;
    *data = malloc(*len);
    if (*data) memcpy(*data, msg, *len);
    else *len = 0;
    return -1;
}

static int split_deliver(int64_t item, int status, const char *data, size_t len, void *user) {
    split_run *r = user;
    if (status < 0) {
        fprintf(stderr, "cattr: attribution failed: %s\n", len ? data : "(no message)");
        return CLI_FAIL;
    }
    if (!(r->blobs[item] = malloc(len ? len : 1))) return CLI_FAIL;
    memcpy(r->blobs[item], data, len);
    r->lens[item] = len;
    return 0;
}

cattr_status cli_split_run(cli_part_fn part, cli_combine_fn combine, void *user, int64_t rows, bool quiet) {
    int n = mpi_driver_size();
    split_run r = {part, user, n, calloc((size_t)n, sizeof(void *)), calloc((size_t)n, sizeof(size_t))};
    if (!r.blobs || !r.lens) { /* the others would wait for this rank */
        fprintf(stderr, "cattr: rank %d: out of memory\n", mpi_driver_rank());
        exit(CLI_FAIL);
    }
    int64_t res = CATTR_OK;
    int frc = mpi_driver_farm(n, split_work, split_deliver, &r);
    if (mpi_driver_rank() == 0) {
        res = frc != 0 ? cx_fail(CATTR_ERR_INTERNAL, "a part of the attribution failed (above)")
                       : combine(user, (const void *const *)r.blobs, r.lens, n);
        int chunk = res == CATTR_OK && n > 1 ? cattr_split_chunk_steps(r.blobs[0], r.lens[0]) : 0;
        if (quiet)
            ;
        else if (chunk > 0)
            fprintf(stderr, "cattr: %d parts combined; IG steps summed in units of %d (one process gives the same "
                    "numbers)\n", n, chunk);
        else if (res == CATTR_OK && n > 1)
            fprintf(stderr, "cattr: %d parts combined\n", n);
    }
    for (int k = 0; k < n; k++) free(r.blobs[k]);
    free(r.blobs);
    free(r.lens);
    mpi_driver_bcast(&res, sizeof res);
    if (res != CATTR_OK && mpi_driver_rank() != 0) cx_fail((cattr_status)res, "rank 0 could not combine the parts");
    return (cattr_status)res;
}
