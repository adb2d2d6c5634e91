/* corpus.c - corpus mode (corpus.h): `cattr explain-llm DIR --prompts REQUESTS.jsonl --output RESULTS.jsonl` and
 * `cattr explain-context DIR --requests ... --output ...`: a request per line, a result record per line, appended as
 * each finishes (made durable every tenth of a second), resumed by rerunning the command; spread over MPI ranks. The
 * command answers a line (corpus_answer_fn); explain-llm's answer is at the end of this file.
 *
 * The results file. Line 1 is a header that records what made the file:
 *     {"cattr_results":1,"command":"explain-llm" (or the other command),"checkpoint":DIR,"checkpoint_fingerprint":"16 hex digits",
 *      "options":{"--method":"feature-ablation",...}}
 * (the checkpoint's fingerprint is cx_file_fingerprint of its .json and .safetensors files; the options are those of
 * the command line that shape a result: all but --prompts, --output, --quiet and --max-memory, which only sizes the
 * chunks). Each further line is the record of one request line: the single call's JSON plus "id" and "request_hash"
 * (the fingerprint of the request line's text), or {"error", "status", "id", "request_hash"} for a request that fails.
 *
 * Ids. A request is known by its "id": a string (without NUL characters) or an integer from -2^53 to 2^53; a line
 * without one (or with "id": null), and a line that cannot carry one (not JSON, text after the object, a NUL
 * character, an id of another type), by its line number. The k-th line with a given id is answered by the k-th record
 * with that id, so a repeated id is never dropped: its later lines get error records saying which line had it first.
 *
 * A rerun. The output is opened without following links, must be a regular file, and is locked for the whole run
 * (cx_open_locked): a second run on it is refused. It must begin with the header, and the header must name the same
 * checkpoint (by fingerprint) and the same options, or the run is refused naming the difference; every complete line
 * after it must be a record. Only then is a torn last line (a record cut by a crash) dropped, and the request lines
 * whose records are there are skipped after checking that each is still the request its record answers (its
 * request_hash): a changed request is refused, naming its line. Nothing in a file that is not a results file of this
 * command is ever changed. The ids are kept in a hash table: a rerun over a million results starts in seconds. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "corpus.h"
#include "llm_req.h"
#include "mpi_driver.h"

#include "core/core.h"
#include "io/fileutil.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RESULTS_VERSION 1
#define MAX_ID_BYTES 4096

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- request lines ------------------------------------------------------------------------------------------- */

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

/* Ids as "1,2,3" from a JSON array of integers, into *buf (grown to fit: any length). */
static bool ids_field(const cJSON *rq, const char *key, const char **out, char **buf, char *err, size_t size) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rq, key), *it;
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return true;
    bool ok = cJSON_IsArray(v);
    size_t need = ok ? (size_t)cJSON_GetArraySize(v) * 22 + 1 : 0;
    char *b = ok ? realloc(*buf, need) : NULL;
    if (ok && !b) {
        snprintf(err, size, "out of memory for '%s'", key);
        return false;
    }
    if (b) *buf = b;
    size_t at = 0;
    if (b) b[0] = 0;
    cJSON_ArrayForEach(it, v) {
        long long x = 0;
        ok = ok && json_int(it, 0, LLONG_MAX, &x);
        if (ok) at += (size_t)snprintf(b + at, need - at, "%s%lld", at ? "," : "", x);
    }
    if (!ok) {
        snprintf(err, size, "'%s' must be an array of token ids (integers from 0)", key);
        return false;
    }
    *out = b;
    return true;
}

bool cli_json_known_fields(const cJSON *obj, const char *const *known, size_t n, const char *hint, char *err,
                           size_t size) {
    const cJSON *it;
    cJSON_ArrayForEach(it, obj) {
        bool ok = false;
        for (size_t k = 0; k < n && !ok; k++) ok = !strcmp(it->string, known[k]);
        if (!ok) {
            char esc[256];
            cx_escape_text(it->string, esc, sizeof esc);
            snprintf(err, size, "unknown field '%s'%s%s%s", esc, hint ? " (" : "", hint ? hint : "", hint ? ")" : "");
            return false;
        }
    }
    return true;
}

/* A request line over the command line's request and params: prompt / prompt_ids, target / target_ids, template,
 * slots, slot_baselines, segments, and the method options method, steps (a number or "auto"), delta_tol, quadrature,
 * n_samples, seed, baseline, max_new_tokens, perturbations_per_eval. idbuf: two buffers for the id lists (grown as needed; the caller frees). */
static bool parse_request(const cJSON *rq, llm_req *r, cattr_attr_params *p, char *idbuf[2], char *err, size_t size) {
    if (!cJSON_IsObject(rq)) {
        snprintf(err, size, "the line is not a JSON object");
        return false;
    }
    static const char *known[] = {"id", "prompt", "prompt_ids", "target", "target_ids", "template", "slots",
                                  "slot_baselines", "method", "steps", "quadrature", "n_samples", "seed", "baseline",
                                  "max_new_tokens", "perturbations_per_eval", "segments", "delta_tol"};
    const cJSON *it;
    if (!cli_json_known_fields(rq, known, sizeof known / sizeof *known, NULL, err, size)) return false;
    r->prompt = r->target = r->tmpl = NULL;
    r->prompt_ids = r->target_ids = NULL;
    if (!str_field(rq, "prompt", &r->prompt, err, size) || !str_field(rq, "target", &r->target, err, size) ||
        !str_field(rq, "template", &r->tmpl, err, size) ||
        !ids_field(rq, "prompt_ids", &r->prompt_ids, &idbuf[0], err, size) ||
        !ids_field(rq, "target_ids", &r->target_ids, &idbuf[1], err, size))
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
    const char *mname = NULL, *quad = NULL, *segs = NULL;
    if (!str_field(rq, "method", &mname, err, size) || !str_field(rq, "quadrature", &quad, err, size) ||
        !str_field(rq, "segments", &segs, err, size))
        return false;
    if (segs) r->segments = segs; /* tokens, words, sentences, lines or a FILE.json (checked when prepared) */
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(rq, "steps");
    if (cJSON_IsString(sv)) {
        if (strcmp(sv->valuestring, "auto") != 0) {
            snprintf(err, size, "'steps' must be an integer from 1 to 100000 or \"auto\"");
            return false;
        }
        p->n_steps = CATTR_STEPS_AUTO;
    }
    const cJSON *dv = cJSON_GetObjectItemCaseSensitive(rq, "delta_tol");
    if (dv) {
        if (!cJSON_IsNumber(dv) || !(dv->valuedouble > 0 && dv->valuedouble < 1)) {
            snprintf(err, size, "'delta_tol' must be a number > 0 and < 1");
            return false;
        }
        if (p->n_steps != CATTR_STEPS_AUTO) {
            snprintf(err, size, "'delta_tol' goes with \"steps\": \"auto\"");
            return false;
        }
        p->delta_tol = dv->valuedouble;
    }
    if (mname) {
        int mk = llm_method_arg(mname);
        if (mk < 0) {
            char esc[256];
            cx_escape_text(mname, esc, sizeof esc);
            snprintf(err, size, "unknown method '%s' (layer-ig, layer-gradient-x-activation, feature-ablation, "
                     "shapley-value-sampling, lime or kernel-shap)", esc);
            return false;
        }
        p->method = (cattr_method)mk;
    }
    if (quad) {
        int q = cattr_quadrature_from_name(quad);
        if (q < 0) {
            char esc[256];
            cx_escape_text(quad, esc, sizeof esc);
            snprintf(err, size, "unknown quadrature '%s' (gausslegendre, riemann_left, riemann_right, riemann_middle "
                     "or riemann_trapezoid)", esc);
            return false;
        }
        p->quadrature = (cattr_quadrature)q;
    }
    static const struct { const char *key; long long lo, hi; } ints[] = {
        {"steps", 1, 100000}, {"n_samples", 1, 1000000}, {"seed", 0, LLONG_MAX}, {"max_new_tokens", 1, 100000},
        {"perturbations_per_eval", 1, 1000000}};
    for (size_t k = 0; k < sizeof ints / sizeof *ints; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(rq, ints[k].key);
        if (!v || (k == 0 && cJSON_IsString(v))) continue; /* "steps": "auto" above */
        long long x;
        if (!json_int(v, ints[k].lo, ints[k].hi, &x)) {
            if (ints[k].hi == LLONG_MAX) snprintf(err, size, "'%s' must be an integer from %lld", ints[k].key, ints[k].lo);
            else snprintf(err, size, "'%s' must be an integer from %lld to %lld", ints[k].key, ints[k].lo, ints[k].hi);
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

/* Whether the JSON text holds the escape \u0000 (a NUL character, which no C string of cattr can carry). */
static bool has_nul_escape(const char *s, size_t len) {
    for (size_t i = 0; i + 1 < len; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && i + 5 < len && !memcmp(s + i + 2, "0000", 4)) return true;
        i++; /* the escaped character */
    }
    return false;
}

/* A request line (len bytes, trimmed) parsed and its key: the "id" as JSON text, or the line number when it has none
 * or cannot carry one. Returns CLI_OK with *rq (the parsed line, the caller deletes it) when the line is a JSON object
 * whose id is well formed; else CLI_USAGE with the problem in err (*rq NULL). *key is set either way (malloc'ed; NULL
 * when out of memory), and *implicit tells whether it is the line number. */
static int line_parse(const char *line, size_t len, int64_t lineno, cJSON **rq, char **key, bool *implicit, char *err,
                      size_t size) {
    *rq = NULL;
    *key = NULL;
    *implicit = true;
    int rc = CLI_OK;
    cJSON *j = NULL;
    const char *end = NULL;
    if (memchr(line, 0, len) || has_nul_escape(line, len)) {
        snprintf(err, size, "line %lld holds a NUL character (\\u0000), which no field can carry", (long long)lineno);
        rc = CLI_USAGE;
    } else if (!(j = cJSON_ParseWithLengthOpts(line, len, &end, 0))) {
        snprintf(err, size, "line %lld is not valid JSON", (long long)lineno);
        rc = CLI_USAGE;
    } else if (end && (size_t)(end - line) < len) {
        snprintf(err, size, "line %lld has text after its JSON object (one request per line)", (long long)lineno);
        rc = CLI_USAGE;
    } else if (!cJSON_IsObject(j)) {
        snprintf(err, size, "line %lld is not a JSON object", (long long)lineno);
        rc = CLI_USAGE;
    }
    const cJSON *id = rc == CLI_OK ? cJSON_GetObjectItemCaseSensitive(j, "id") : NULL;
    long long iv;
    if (id && !cJSON_IsNull(id)) {
        bool ok = (cJSON_IsString(id) && id->valuestring[0] && strlen(id->valuestring) <= MAX_ID_BYTES) ||
                  json_int(id, -9007199254740992LL, 9007199254740992LL, &iv);
        if (ok) {
            *key = cJSON_PrintUnformatted(id);
            *implicit = false;
        } else {
            snprintf(err, size, "line %lld: 'id' must be a non-empty string (at most %d bytes) or an integer from "
                     "-2^53 to 2^53", (long long)lineno, MAX_ID_BYTES);
            rc = CLI_USAGE;
        }
    }
    if (*implicit) {
        char num[32];
        snprintf(num, sizeof num, "%lld", (long long)lineno);
        *key = strdup(num);
    }
    if (rc == CLI_OK) *rq = j;
    else cJSON_Delete(j);
    return rc;
}

static uint64_t request_hash(const char *line, size_t len) { return cx_hash_bytes(0x72657175ull, line, len); }

/* The request lines of a requests file: splits text (n bytes, NUL-terminated) into lines, trimmed of surrounding
 * white space (a CR too); blank lines are skipped. Calls fn for each with its offset, length and line number. */
typedef bool (*line_fn)(size_t off, size_t len, int64_t lineno, void *user);
static bool for_each_line(char *text, size_t n, line_fn fn, void *user) {
    int64_t lineno = 0;
    for (size_t at = 0; at < n;) {
        char *s = text + at, *nl = memchr(s, '\n', n - at);
        size_t len = nl ? (size_t)(nl - s) : n - at;
        at += len + (nl != NULL);
        lineno++;
        size_t b = 0;
        while (b < len && (isspace((unsigned char)s[b]) || s[b] == 0)) b++;
        while (len > b && (isspace((unsigned char)s[len - 1]) || s[len - 1] == 0)) len--;
        if (len == b) continue; /* a blank line */
        s[len] = 0;             /* every line NUL-terminated (its newline or trailing space) */
        if (!fn((size_t)(s + b - text), len - b, lineno, user)) return false;
    }
    return true;
}

/* ---- the set of ids --------------------------------------------------------------------------------------------- */

typedef struct id_entry {
    char *key;            /* the id's JSON text */
    uint64_t *hashes;     /* request_hash of each record with this id, in file order */
    int64_t n, cap;       /* records */
    int64_t seen;         /* request lines with this id so far */
    int64_t first_line;   /* the first request line with it */
    bool first_implicit;  /* that line had no id of its own */
} id_entry;

typedef struct id_set {
    id_entry *v;
    size_t cap, n;
} id_set;

static void idset_free(id_set *s) {
    for (size_t k = 0; k < s->cap; k++) {
        free(s->v[k].key);
        free(s->v[k].hashes);
    }
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* The entry of `key`, added when absent (the set takes `key`; it frees it when it has the key already). NULL when out
 * of memory. */
static id_entry *idset_get(id_set *s, char *key) {
    if (2 * (s->n + 1) > s->cap) { /* at most half full */
        size_t cap = s->cap ? 2 * s->cap : 1024;
        id_entry *v = calloc(cap, sizeof *v);
        if (!v) {
            free(key);
            return NULL;
        }
        for (size_t k = 0; k < s->cap; k++) {
            if (!s->v[k].key) continue;
            size_t h = (size_t)cx_hash_bytes(0, s->v[k].key, strlen(s->v[k].key)) & (cap - 1);
            while (v[h].key) h = (h + 1) & (cap - 1);
            v[h] = s->v[k];
        }
        free(s->v);
        s->v = v;
        s->cap = cap;
    }
    size_t h = (size_t)cx_hash_bytes(0, key, strlen(key)) & (s->cap - 1);
    while (s->v[h].key && strcmp(s->v[h].key, key)) h = (h + 1) & (s->cap - 1);
    if (s->v[h].key) {
        free(key);
    } else {
        s->v[h].key = key;
        s->n++;
    }
    return &s->v[h];
}

static bool entry_add_record(id_entry *e, uint64_t hash) {
    if (e->n == e->cap) {
        int64_t cap = e->cap ? 2 * e->cap : 1;
        uint64_t *h = realloc(e->hashes, (size_t)cap * sizeof *h);
        if (!h) return false;
        e->hashes = h;
        e->cap = cap;
    }
    e->hashes[e->n++] = hash;
    return true;
}

/* ---- the results file -------------------------------------------------------------------------------------------- */

static void hex64(uint64_t v, char out[17]) { snprintf(out, 17, "%016llx", (unsigned long long)v); }

/* The header line of this run (with its newline), malloc'ed. */
static char *header_text(const char *cmd, const char *dir, uint64_t fp, const cJSON *options) {
    cJSON *h = cJSON_CreateObject();
    char hex[17];
    hex64(fp, hex);
    cJSON_AddNumberToObject(h, "cattr_results", RESULTS_VERSION);
    cJSON_AddStringToObject(h, "command", cmd);
    cJSON_AddStringToObject(h, "checkpoint", dir);
    cJSON_AddStringToObject(h, "checkpoint_fingerprint", hex);
    cJSON_AddItemToObject(h, "options", options ? cJSON_Duplicate(options, true) : cJSON_CreateObject());
    char *t = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    char *line = t ? malloc(strlen(t) + 2) : NULL;
    if (line) sprintf(line, "%s\n", t);
    free(t);
    return line;
}

/* Compares a results file's header with this run's: CLI_OK, or CLI_USAGE with what differs in err. */
static int header_check(const char *cmd, const cJSON *h, const char *path, const char *dir, uint64_t fp,
                        const cJSON *options, char *err, size_t size) {
    const char *want_cmd = cmd;
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(h, "cattr_results"),
                *hcmd = cJSON_GetObjectItemCaseSensitive(h, "command"),
                *ck = cJSON_GetObjectItemCaseSensitive(h, "checkpoint"),
                *cf = cJSON_GetObjectItemCaseSensitive(h, "checkpoint_fingerprint"),
                *op = cJSON_GetObjectItemCaseSensitive(h, "options");
    if (!cJSON_IsNumber(ver) || !cJSON_IsString(hcmd) || !cJSON_IsString(ck) || !cJSON_IsString(cf) || !cJSON_IsObject(op)) {
        snprintf(err, size, "'%s' is not a results file of cattr %s: its header lacks a field", path, want_cmd);
        return CLI_USAGE;
    }
    if (ver->valuedouble != RESULTS_VERSION || strcmp(hcmd->valuestring, want_cmd)) {
        snprintf(err, size, "'%s' is a results file of another version or command (%s, version %g): write to a new "
                 "--output", path, hcmd->valuestring, ver->valuedouble);
        return CLI_USAGE;
    }
    char hex[17];
    hex64(fp, hex);
    if (strcmp(cf->valuestring, hex)) {
        snprintf(err, size, "'%s' holds results of another checkpoint ('%s', fingerprint %.16s; this run's '%s' is %s): "
                 "rerun with that checkpoint, or write to a new --output", path, ck->valuestring, cf->valuestring, dir,
                 hex);
        return CLI_USAGE;
    }
    char diff[1536];
    int nd = cli_json_diff(options, op, diff, sizeof diff);
    if (nd) {
        snprintf(err, size, "'%s' holds results made with other options (%s): rerun with the options it was made "
                 "with, or write to a new --output", path, diff);
        return CLI_USAGE;
    }
    return CLI_OK;
}

/* Reads the results file open on fd (locked): checks its header against this run's, reads the ids and request hashes
 * of its records into `done`, and drops a torn last line. An empty file gets the header. Returns CLI_OK, or CLI_USAGE /
 * CLI_FAIL with a message in err; on an error the file is unchanged. `verbose` reports a dropped line. */
static int results_read(const char *cmd, int fd, const char *path, const char *dir, uint64_t fp, const cJSON *options,
                        id_set *done, bool *torn, bool verbose, char *err, size_t size) {
    *torn = false;
    int fd2 = dup(fd);
    FILE *f = fd2 >= 0 ? fdopen(fd2, "rb") : NULL;
    if (!f) {
        if (fd2 >= 0) close(fd2);
        snprintf(err, size, "cannot read '%s': %s", path, strerror(errno));
        return CLI_USAGE;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int64_t lineno = 0;
    off_t keep = 0; /* the end of the last complete line */
    int rc = CLI_OK;
    char *want = header_text(cmd, dir, fp, options);
    if (!want) rc = llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
    while (rc == CLI_OK && (got = getline(&line, &cap, f)) > 0) {
        if (line[got - 1] != '\n') { /* a torn last line, dropped below once the rest proved to be a results file */
            if (lineno == 0 && strncmp(line, want, (size_t)got) != 0) { /* not even a header cut short */
                snprintf(err, size, "'%s' is not a results file of cattr %s (it does not begin with the "
                         "header line a results file starts with): choose another --output", path, cmd);
                rc = CLI_USAGE;
            }
            *torn = lineno > 0;
            break;
        }
        lineno++;
        const char *jend = NULL;
        cJSON *j = strlen(line) == (size_t)got ? cJSON_ParseWithLengthOpts(line, (size_t)got - 1, &jend, 0) : NULL;
        if (j && jend != line + got - 1) { /* text after the object */
            cJSON_Delete(j);
            j = NULL;
        }
        if (lineno == 1) {
            if (!cJSON_IsObject(j) || !cJSON_GetObjectItemCaseSensitive(j, "cattr_results")) {
                bool old = cJSON_IsObject(j) && cJSON_GetObjectItemCaseSensitive(j, "id");
                snprintf(err, size, old ? "'%s' was written by an earlier cattr (its first line is a record, not the "
                                          "header line that now begins a results file): finish it with that version, "
                                          "or write to a new --output"
                                        : "'%s' is not a results file of cattr %s (its first line is not the "
                                          "header a results file starts with): choose another --output",
                         path, cmd);
                rc = CLI_USAGE;
            } else {
                rc = header_check(cmd, j, path, dir, fp, options, err, size);
            }
        } else {
            const cJSON *id = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "id") : NULL,
                        *rh = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "request_hash") : NULL;
            char *key = id && (cJSON_IsString(id) || cJSON_IsNumber(id)) ? cJSON_PrintUnformatted(id) : NULL;
            unsigned long long hv = 0;
            char *hend = NULL;
            if (cJSON_IsString(rh)) hv = strtoull(rh->valuestring, &hend, 16);
            if (!key || !hend || *hend || strlen(rh->valuestring) != 16) {
                free(key);
                snprintf(err, size, "line %lld of '%s' is not a result record (an object with \"id\" and "
                         "\"request_hash\"): the file was edited, or is not a results file of cattr", (long long)lineno,
                         path);
                rc = CLI_USAGE;
            } else {
                id_entry *e = idset_get(done, key);
                if (!e || !entry_add_record(e, (uint64_t)hv)) rc = llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
            }
        }
        cJSON_Delete(j);
        keep += got;
    }
    if (rc == CLI_OK && ferror(f)) {
        snprintf(err, size, "cannot read '%s': %s", path, strerror(errno));
        rc = CLI_USAGE;
    }
    free(line);
    fclose(f);
    struct stat sb;
    if (rc == CLI_OK && fstat(fd, &sb) == 0 && sb.st_size > keep) { /* drop the torn line (or a torn header) */
        if (ftruncate(fd, keep) != 0) {
            snprintf(err, size, "cannot drop the incomplete last line of '%s': %s", path, strerror(errno));
            rc = CLI_USAGE;
        } else if (verbose) {
            fprintf(stderr, "cattr: %s: dropped an incomplete last %s (%lld bytes) left by an interrupted run\n", path,
                    *torn ? "line" : "header", (long long)(sb.st_size - keep));
        }
    }
    if (rc == CLI_OK && keep == 0) { /* a new (or empty) file: the header first */
        size_t len = strlen(want);
        if (pwrite(fd, want, len, 0) != (ssize_t)len || fdatasync(fd) != 0) {
            snprintf(err, size, "cannot write '%s': %s", path, strerror(errno));
            rc = CLI_USAGE;
        }
    }
    free(want);
    /* records are appended from here, whatever the offset the reading left */
    int fl = fcntl(fd, F_GETFL);
    if (rc == CLI_OK && (fl < 0 || fcntl(fd, F_SETFL, fl | O_APPEND) != 0)) {
        snprintf(err, size, "cannot append to '%s': %s", path, strerror(errno));
        rc = CLI_USAGE;
    }
    return rc;
}

/* Appends one record (a line of JSON ending in a newline: len bytes) and makes what was appended durable when a tenth
 * of a second has passed since it last did (and, with `now`, at once): a sync per record would cost a corpus of fast
 * requests more than its work (3 ms each on a virtual disk). A crash of the process loses nothing written; a crash of
 * the machine at most the records of the last tenth of a second, which a rerun does again. */
static cattr_status corpus_append(int fd, const char *text, size_t len, const char *path, double *synced, bool now) {
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
    double t = now_s();
    if (!now && t - *synced < 0.1) return CATTR_OK;
    *synced = t;
    if (fdatasync(fd) != 0 && errno != EINVAL) {
        fprintf(stderr, "cattr: cannot sync '%s': %s\n", path, strerror(errno));
        return CATTR_ERR_IO;
    }
    return CATTR_OK;
}

/* ---- the run ------------------------------------------------------------------------------------------------------ */

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

/* A request line still to do: where it is in the requests text, its number, and the first line with the same id
 * when it repeats one (0 when not; negative when that line had no id of its own). */
typedef struct pending {
    int64_t off, len, lineno, dup_of;
} pending;

/* A corpus run: the requests still to do and, on rank 0, the output. Every rank holds the requests file (read by rank
 * 0 and broadcast: only rank 0 needs the files) and the list of pending lines. */
typedef struct corpus_run {
    const corpus_job *job;
    bool quiet;
    char *text;   /* the requests file, every line NUL-terminated */
    pending *pd;  /* the lines to do */
    int64_t np;
    /* rank 0 */
    int fd;
    const char *output;
    corpus_progress cp;
    int64_t n_ok, n_failed;
    double synced; /* when the output was last made durable */
    /* the set-up's pass over the lines */
    id_set done;
    int64_t total, skipped, bad_line;
    int rc;
    char err[2048];
} corpus_run;

/* One request (mpi_driver_work_fn): its record, the exact line the output gets, then a NUL and the message for
 * stderr (empty when it succeeded). Returns 0, 1 when the request failed (an error record), -1 out of memory. */
static int corpus_work(int64_t item, char **data, size_t *len, void *user) {
    corpus_run *c = user;
    const pending *pl = &c->pd[item];
    const char *line = c->text + pl->off;
    char err[2048], *key = NULL;
    cJSON *rq = NULL;
    bool implicit;
    int code = line_parse(line, (size_t)pl->len, pl->lineno, &rq, &key, &implicit, err, sizeof err);
    cJSON *id = NULL;
    if (key) id = implicit ? cJSON_CreateNumber((double)pl->lineno) : cJSON_Parse(key);
    if (code == CLI_OK && pl->dup_of) {
        char esc[600];
        cx_escape_text(key, esc, sizeof esc);
        snprintf(err, sizeof err, "line %lld: the id %s is already line %lld's (ids name the results: each must be "
                 "unique%s)", (long long)pl->lineno, esc, (long long)(pl->dup_of < 0 ? -pl->dup_of : pl->dup_of),
                 implicit || pl->dup_of < 0 ? "; a line without an \"id\" is known by its line number" : "");
        code = CLI_USAGE;
    }
    cJSON *rec = NULL;
    cattr_status ast = CATTR_OK;
    if (code == CLI_OK) code = c->job->answer(c->job->user, rq, &rec, &ast, err, sizeof err);
    if (code != CLI_OK) {
        cJSON_Delete(rec);
        rec = cJSON_CreateObject();
        if (rec) {
            cJSON_AddStringToObject(rec, "error", err);
            cJSON_AddStringToObject(rec, "status", ast != CATTR_OK ? cattr_status_string(ast)
                                                   : code == CLI_USAGE ? "bad request" : "failed");
        }
    }
    char *text = NULL, hex[17];
    hex64(request_hash(line, (size_t)pl->len), hex);
    if (rec && id) {
        cJSON_AddItemToObject(rec, "id", id); /* the record owns it from here */
        id = NULL;
        cJSON_AddStringToObject(rec, "request_hash", hex);
        text = cJSON_PrintUnformatted(rec);
    }
    char esc[1024] = "", kesc[600] = "";
    if (code != CLI_OK) cx_escape_text(err, esc, sizeof esc);
    if (key) cx_escape_text(key, kesc, sizeof kesc);
    int status = code == CLI_OK ? 0 : 1;
    *data = NULL;
    if (text) {
        size_t tl = strlen(text), ml = code != CLI_OK ? strlen("request : ") + strlen(kesc) + strlen(esc) : 0;
        *data = malloc(tl + ml + 3);
        if (*data) {
            memcpy(*data, text, tl);
            (*data)[tl] = '\n';
            (*data)[tl + 1] = 0;
            (*data)[tl + 2] = 0;
            if (ml) snprintf(*data + tl + 2, ml + 1, "request %s: %s", kesc, esc);
            *len = tl + ml + 3;
        }
    }
    if (!*data) {
        status = -1;
        *len = 0;
    }
    free(text);
    free(key);
    cJSON_Delete(rec);
    cJSON_Delete(id);
    cJSON_Delete(rq);
    return status;
}

/* Rank 0, in input order (mpi_driver_deliver_fn): appends a record and reports a failed request. Returns 0, or
 * CLI_USAGE when the output cannot be written, CLI_FAIL when a request ran out of memory (the message is printed). */
static int corpus_deliver(int64_t item, int status, const char *data, size_t len, void *user) {
    corpus_run *c = user;
    if (status < 0) {
        fprintf(stderr, "%scattr: request on line %lld: out of memory\n", c->cp.shown ? "\n" : "",
                (long long)c->pd[item].lineno);
        return CLI_FAIL;
    }
    size_t rl = strnlen(data, len);
    if (corpus_append(c->fd, data, rl, c->output, &c->synced, false) != CATTR_OK) return CLI_USAGE;
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

/* Rank 0's pass over the request lines (line_fn): counts them, skips those answered in the output (checking that each is
 * the request its record answers), and lists the rest. */
static bool setup_line(size_t off, size_t len, int64_t lineno, void *user) {
    corpus_run *c = user;
    char err[512], *key = NULL;
    cJSON *rq = NULL;
    bool implicit;
    (void)line_parse(c->text + off, len, lineno, &rq, &key, &implicit, err, sizeof err);
    cJSON_Delete(rq);
    id_entry *e = key ? idset_get(&c->done, key) : NULL;
    if (!e) {
        c->rc = llm_req_fail(c->err, sizeof c->err, CLI_FAIL, "out of memory", false);
        return false;
    }
    c->total++;
    int64_t k = e->seen++;
    if (k == 0) {
        e->first_line = lineno;
        e->first_implicit = implicit;
    }
    uint64_t h = request_hash(c->text + off, len);
    if (k < e->n) { /* answered: is it still the same request? */
        if (e->hashes[k] != h) {
            char esc[600];
            cx_escape_text(e->key, esc, sizeof esc);
            snprintf(c->err, sizeof c->err, "line %lld of the requests (id %s) is not the request whose result is in "
                     "'%s': the requests changed since it was written; restore them, or write to a new --output",
                     (long long)lineno, esc, c->output);
            c->rc = CLI_USAGE;
            return false;
        }
        c->skipped++;
        return true;
    }
    c->pd[c->np++] = (pending){(int64_t)off, (int64_t)len, lineno,
                               k == 0 ? 0 : e->first_implicit ? -e->first_line : e->first_line};
    return true;
}

/* Rank 0: reads the requests file, opens and locks the output, checks it and lists the lines still to do. Sets hdr:
 * {n pending, total requests, already done}. Returns CLI_OK or the exit code (the message printed). */
static int corpus_setup(corpus_run *c, const char *prompts, const char *dir, const cJSON *options, size_t *text_len,
                        int64_t hdr[3]) {
    void *data = NULL;
    size_t n = 0;
    cattr_status st = cx_read_file(prompts, &data, &n); /* NUL-terminated; before the output is touched */
    if (st != CATTR_OK) return cli_error(st, "cannot read the requests");
    c->text = data;
    uint64_t fp = 0;
    if ((st = cx_file_fingerprint(dir, false, &fp)) != CATTR_OK) return cli_error(st, "cannot read the checkpoint");
    bool created = false, torn = false;
    if ((st = cx_open_locked(c->output, true, &c->fd, &created)) != CATTR_OK) return cli_error(st, "--output");
    int rc = results_read(c->job->command, c->fd, c->output, dir, fp, options, &c->done, &torn, true, c->err,
                          sizeof c->err);
    if (rc == CLI_OK) {
        int64_t lines = 1;
        for (size_t k = 0; k < n; k++) lines += c->text[k] == '\n';
        c->pd = malloc((size_t)lines * sizeof *c->pd);
        if (!c->pd) rc = llm_req_fail(c->err, sizeof c->err, CLI_FAIL, "out of memory", false);
    }
    if (rc == CLI_OK && !for_each_line(c->text, n, setup_line, c)) rc = c->rc;
    idset_free(&c->done);
    if (rc != CLI_OK) {
        if (created) unlink(c->output); /* made by this run, and still empty */
        char esc[2048];
        cx_escape_text(c->err, esc, sizeof esc);
        fprintf(stderr, "cattr: %s\n", esc);
        return rc;
    }
    *text_len = n + 1;
    hdr[0] = c->np;
    hdr[1] = c->total;
    hdr[2] = c->skipped;
    return CLI_OK;
}

int cli_corpus_run(const corpus_job *job, const char *dir, const char *prompts, const char *output,
                   const cJSON *options, bool quiet) {
    corpus_run c;
    memset(&c, 0, sizeof c);
    c.job = job;
    c.quiet = quiet;
    c.output = output;
    c.fd = -1;
    double start = now_s();
    int rank = mpi_driver_rank();
    /* header from rank 0: exit code of the set-up, length of the requests text, pending, total, already done */
    int64_t hdr[5] = {CLI_OK, 0, 0, 0, 0};
    if (rank == 0) {
        size_t tl = 0;
        hdr[0] = corpus_setup(&c, prompts, dir, options, &tl, hdr + 2);
        hdr[1] = (int64_t)tl;
    }
    mpi_driver_bcast(hdr, sizeof hdr);
    int rc = (int)hdr[0];
    int64_t np = hdr[2];
    if (rc == CLI_OK && rank != 0) {
        c.text = malloc((size_t)hdr[1]);
        c.pd = malloc((size_t)(np + 1) * sizeof *c.pd);
        if (!c.text || !c.pd) { /* the others would wait for this rank: stop the job */
            fprintf(stderr, "cattr: rank %d: out of memory for the requests\n", rank);
            exit(CLI_FAIL);
        }
    }
    if (rc == CLI_OK) {
        mpi_driver_bcast(c.text, (size_t)hdr[1]);
        mpi_driver_bcast(c.pd, (size_t)np * sizeof *c.pd);
        c.cp = (corpus_progress){now_s(), hdr[4], hdr[3], rank == 0 && isatty(STDERR_FILENO) && !quiet, false};
        if (rank == 0 && !quiet && hdr[4] > 0)
            fprintf(stderr, "cattr: resuming %s: %lld of %lld requests are there\n", output, (long long)hdr[4],
                    (long long)hdr[3]);
        int frc = mpi_driver_farm(np, corpus_work, corpus_deliver, &c);
        if (rank == 0) {
            if (c.cp.shown) corpus_show(&c.cp, true);
            bool closed = corpus_append(c.fd, "", 0, output, &c.synced, true) == CATTR_OK; /* the last records */
            closed = close(c.fd) == 0 && closed;
            c.fd = -1;
            if (frc != 0) rc = frc;
            else if (!closed) rc = cli_usage_error("cannot close '%s': %s", output, strerror(errno));
            else {
                if (!quiet)
                    fprintf(stderr, "%lld requests: %lld attributed, %lld failed, %lld already in %s (%.1f s)\n",
                            (long long)(c.n_ok + c.n_failed + hdr[4]), (long long)c.n_ok, (long long)c.n_failed,
                            (long long)hdr[4], output, now_s() - start);
                rc = c.n_failed ? CLI_FAIL : CLI_OK;
            }
        }
        int64_t final = rc;
        mpi_driver_bcast(&final, sizeof final);
        rc = (int)final;
    }
    if (c.fd >= 0) close(c.fd);
    free(c.text);
    free(c.pd);
    return rc;
}

/* ---- explain-llm's requests --------------------------------------------------------------------------------------- */

typedef struct llm_job {
    cattr_llm *m;
    const cattr_attr_params *p0;
    const llm_req *r0;
    char *idbuf[2];
} llm_job;

/* A request line of explain-llm (corpus_answer_fn): parsed over the command line's request, attributed, its JSON. */
static int llm_answer(void *user, const cJSON *rq, cJSON **rec, cattr_status *ast, char *err, size_t size) {
    llm_job *j = user;
    llm_req r = *j->r0;
    cattr_attr_params p = *j->p0;
    llm_out o;
    memset(&o, 0, sizeof o);
    int code = parse_request(rq, &r, &p, j->idbuf, err, size) ? CLI_OK : CLI_USAGE;
    if (code == CLI_OK) code = llm_req_prepare(j->m, &p, &r, &o, err, size);
    if (code == CLI_OK) {
        *ast = llm_req_attribute(j->m, &p, &r, &o, NULL, NULL, NULL, NULL);
        if (*ast != CATTR_OK) code = llm_req_fail(err, size, CLI_FAIL, "attribution failed", true);
    }
    if (code == CLI_OK) code = llm_req_texts(j->m, &r, &o, err, size);
    if (code == CLI_OK) {
        *rec = llm_result_json(&p, &o);
        if (*rec && o.generated) cJSON_AddTrueToObject(*rec, "generated");
        if (!*rec) code = llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
    }
    llm_out_free(&o);
    return code;
}

int llm_corpus(cattr_llm *m, const cattr_attr_params *p0, const llm_req *r0, const char *dir, const char *prompts,
               const char *output, const cJSON *options, bool quiet) {
    llm_job j = {m, p0, r0, {NULL, NULL}};
    corpus_job job = {"explain-llm", llm_answer, &j};
    int rc = cli_corpus_run(&job, dir, prompts, output, options, quiet);
    free(j.idbuf[0]);
    free(j.idbuf[1]);
    return rc;
}

int cli_llm_answer_mem(cattr_llm *m, const cJSON *rq, const volatile int *cancel, char **json, cattr_status *ast,
                       char *err, size_t size) {
    cattr_attr_params p0 = cattr_attr_default_params(CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS); /* explain-llm's */
    p0.cancel = cancel;
    llm_req r0;
    memset(&r0, 0, sizeof r0);
    r0.max_new = 8;
    llm_job j = {m, &p0, &r0, {NULL, NULL}};
    cJSON *rec = NULL;
    *json = NULL;
    *ast = CATTR_OK;
    err[0] = '\0';
    int code = llm_answer(&j, rq, &rec, ast, err, size);
    free(j.idbuf[0]);
    free(j.idbuf[1]);
    if (code == CLI_OK) {
        *json = cJSON_PrintUnformatted(rec);
        if (!*json) code = llm_req_fail(err, size, CLI_FAIL, "out of memory", false);
    }
    cJSON_Delete(rec);
    return code;
}

/* ---- fuzzing ------------------------------------------------------------------------------------------------------ */

/* For tests/fuzz/fuzz_requests.c: `data` as a requests file (every line parsed and checked as corpus mode does, before
 * a model is needed) and as a results file (read as a rerun reads it, in a temporary file). Returns 0. */
int cli_corpus_fuzz(const unsigned char *data, size_t size) {
    char *text = malloc(size + 1), *idbuf[2] = {NULL, NULL}, err[2048];
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    int64_t lineno = 0;
    for (size_t at = 0; at < size;) { /* each line: its key and request */
        char *s = text + at, *nl = memchr(s, '\n', size - at);
        size_t len = nl ? (size_t)(nl - s) : size - at;
        at += len + (nl != NULL);
        cJSON *rq = NULL;
        char *key = NULL;
        bool implicit;
        if (line_parse(s, len, ++lineno, &rq, &key, &implicit, err, sizeof err) == CLI_OK) {
            llm_req r;
            memset(&r, 0, sizeof r);
            r.max_new = 8;
            cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS);
            if (parse_request(rq, &r, &p, idbuf, err, sizeof err)) (void)llm_req_check(&p, &r, err, sizeof err);
        }
        cJSON_Delete(rq);
        free(key);
    }
    free(idbuf[0]);
    free(idbuf[1]);
    char path[] = "/tmp/cattr_fuzz_results_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) {
        if (write(fd, data, size) == (ssize_t)size) {
            id_set done = {0};
            bool torn;
            cJSON *opts = cJSON_CreateObject();
            (void)results_read("explain-llm", fd, path, "/nonexistent", 0x1234, opts, &done, &torn, false, err, sizeof err);
            cJSON_Delete(opts);
            idset_free(&done);
        }
        close(fd);
        unlink(path);
    }
    free(text);
    return 0;
}
