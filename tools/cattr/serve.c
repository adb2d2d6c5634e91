/* serve.c - `cattr serve`: explanations over HTTP (KServe V1) for ONNX models loaded once.
 *
 * libmicrohttpd parses HTTP on its own thread (epoll where there is one). A :predict or :explain request's body is
 * read (bounded by --max-body), decoded (serve_req.c: a bad body is answered at once), and queued as a job; its
 * connection is suspended. A fixed set of workers (--workers) takes the jobs in order and runs each as `cattr
 * explain` in memory (cli_explain_mem) or a forward pass; the connection is then resumed with the answer. The queue
 * holds at most --queue jobs: one more is answered 503 with Retry-After at once, so memory stays bounded. A watcher
 * thread cancels (cattr_attr_params.cancel) a job past its --timeout, or whose client has closed its connection.
 * SIGTERM or SIGINT: no new connection or job is taken (503), the jobs queued and running finish and are answered,
 * then the process exits. Every answer is JSON; errors carry cattr explain's message and exit code. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "serve.h"

#include "core/core.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef CATTR_HAVE_MHD
int cmd_serve(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "cattr: serve: this cattr was built without libmicrohttpd (apt-get install libmicrohttpd-dev, "
                    "then build again)\n");
    return CLI_FAIL;
}
#else

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <omp.h>
#include <pthread.h>
#include <sys/socket.h>

#define MAX_MODELS 32

static void serve_help(FILE *f) {
    fprintf(f,
        "usage: cattr serve --model NAME=MODEL.onnx [--model ...] [options]\n"
        "\n"
        "Answers explanations over HTTP/1.1 with JSON (KServe V1 protocol), the models loaded once:\n"
        "  GET  /                            a web page: pick a model and methods, draw or upload an image,\n"
        "                                    see the attributions as heat maps side by side\n"
        "  GET  /health                      {\"status\": \"ok\"} (503 while shutting down)\n"
        "  GET  /v1/models                   the models' names\n"
        "  GET  /v1/models/NAME              {\"name\", \"ready\", \"inputs\", \"outputs\"}\n"
        "  POST /v1/models/NAME:predict      {\"instances\": [...]} -> {\"predictions\": [...]}\n"
        "  POST /v1/models/NAME:explain      {\"instances\": [...], \"explanation\": {\"method\": ...,\n"
        "                                    \"target\": ..., \"n_steps\": ...}} -> cattr explain's JSON\n"
        "  GET  /metrics                     Prometheus text: requests, latencies, queue, errors, models\n"
        "(docs/serve.md: the fields, the explanation's options, errors, curl and Python examples)\n"
        "\n"
        "options:\n"
        "  --model NAME=PATH        an ONNX model, or a language-model checkpoint folder (its :explain takes an\n"
        "                           explain-llm request line, or explain-context's with a \"question\"; its :predict\n"
        "                           {\"instances\": [prompt, ...], \"max_new_tokens\": N} generates), to serve under\n"
        "                           NAME (repeat for more; NAME: letters, digits, . _ -)\n"
        "  --image-norm NAME=SCALE:MEAN:STD  the web page's preprocessing of NAME's images: each pixel (0..255)\n"
        "                           times SCALE, minus MEAN, over STD (one number, or one per channel: e.g.\n"
        "                           1/255:0.485,0.456,0.406:0.229,0.224,0.225); the page's default is 1/255:0:1\n"
        "  --host ADDR              the address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 or ::\n"
        "                           for every interface)\n"
        "  --port N                 the port (default 8080; 0: any free port, printed)\n"
        "  --workers N              requests computed at once (default: the cores); each uses cores/N threads\n"
        "  --queue N                requests waiting beyond those (default 64); more are answered 503 + Retry-After\n"
        "  --max-body SIZE          the largest request body (default 64M): more is answered 413\n"
        "  --timeout SECONDS        a request's limit from its arrival, queued or running (default 300): 504\n"
        "  --token-file FILE        require \"Authorization: Bearer TOKEN\" (the file's first line) on every route\n"
        "                           but /health: 401 otherwise\n"
        "  --device NAME            cpu (default), cpu-check or cuda\n"
        "  --no-access-log          no line per request on stderr\n");
}

typedef struct served {
    char name[64];
    char path[4096];
    cattr_model *model;
    cattr_llm *llm;     /* a language-model checkpoint (a folder) instead of an ONNX model */
    pthread_mutex_t mu; /* a checkpoint answers one request at a time */
    const char *names[CATTR_MAX_INPUTS];
    int n_inputs;
    long long file_bytes, weight_bytes; /* its file (a checkpoint: its .safetensors); its weights in memory */
    char norm[256]; /* --image-norm: the page's scale:mean:std for this model's images ("" none) */
} served;

enum { ROUTE_NONE, ROUTE_HEALTH, ROUTE_MODELS, ROUTE_MODEL, ROUTE_PREDICT, ROUTE_EXPLAIN, ROUTE_METRICS, ROUTE_PAGE, N_ROUTES };
static const char *const ROUTE_NAMES[N_ROUTES] = {"other", "health", "models", "model", "predict", "explain", "metrics", "page"};

/* the web page (tools/cattr/web/index.html, compiled in by CMakeLists.txt) */
extern const unsigned char cattr_serve_page[];
extern const size_t cattr_serve_page_len;

typedef struct job job;

/* One request's state (libmicrohttpd's per-request pointer) */
typedef struct req {
    double t0;
    int route;
    served *model;
    char *body;
    size_t len, cap;
    bool too_big, answered;
    char type[64]; /* the body's Content-Type, its media type */
    job *job;
    int status;
    size_t bytes;
    char method[8], url[256];
} req;

struct job {
    struct MHD_Connection *conn;
    served *model;
    serve_req sr;
    cJSON *llm_rq; /* a language model's request */
    bool explain;
    double deadline;
    volatile int cancel; /* the library's cancel flag; the watcher sets it */
    int why;             /* 1 timeout, 2 client gone */
    int status;
    char *answer;
    job *next;
};

static struct {
    served models[MAX_MODELS];
    int n_models;
    int workers, threads_per_worker, queue_max;
    size_t max_body;
    double timeout;
    char token[512];
    bool access_log;
    struct MHD_Daemon *daemon;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *head, *tail; /* waiting jobs, in arrival order */
    int queued, running, open_jobs; /* open: queued or running or answered but not yet sent */
    job *active[256]; /* the jobs a worker runs (the watcher's view) */
    volatile int cancel[256]; /* each worker's cancel flag: its kept explainers read it (set with its job's) */
    atomic_bool draining; /* set by the main thread on SIGTERM, read by the HTTP thread */
    bool stop;
    /* metrics */
    unsigned long long requests[N_ROUTES][16]; /* by route and status (CODES, then any other) */
    unsigned long long errors[16];           /* by cattr_status */
    unsigned long long hist[N_ROUTES][16];   /* latency buckets (cumulative when printed) */
    double lat_sum[N_ROUTES];
    unsigned long long lat_n[N_ROUTES];
} S = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static const double BUCKETS[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};
#define N_BUCKETS (int)(sizeof BUCKETS / sizeof BUCKETS[0])

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const int CODES[] = {200, 400, 401, 404, 405, 408, 413, 415, 499, 500, 503, 504};
#define N_CODES (int)(sizeof CODES / sizeof CODES[0])

static int status_class(int st) { /* the index of a status in CODES (N_CODES: another one) */
    int k = 0;
    while (k < N_CODES && CODES[k] != st) k++;
    return k;
}

/* ---- answers ------------------------------------------------------------------------------------------------------ */

static enum MHD_Result answer(struct MHD_Connection *c, req *rq, int status, char *body, const char *type,
                              int retry_after) {
    size_t n = strlen(body);
    struct MHD_Response *resp = MHD_create_response_from_buffer(n, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", type);
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    if (!strncmp(type, "text/html", 9)) /* the page: its own inline script and style, this server, nothing else */
        MHD_add_response_header(resp, "Content-Security-Policy",
                                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                                "connect-src 'self'; img-src 'self' blob: data:");
    if (retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", retry_after);
        MHD_add_response_header(resp, "Retry-After", ra);
    }
    if (status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    enum MHD_Result r = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    if (rq) {
        rq->status = status;
        rq->bytes = n;
        rq->answered = true;
    }
    return r;
}

static char *json_text(cJSON *o) {
    char *t = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!t) return NULL;
    size_t n = strlen(t);
    char *w = realloc(t, n + 2);
    if (!w) return t;
    w[n] = '\n';
    w[n + 1] = '\0';
    return w;
}

/* {"error": message, "code": the CLI's exit code for it, "kind": the status's name} */
static char *error_body(const char *msg, cattr_status st) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "error", msg);
    cJSON_AddNumberToObject(o, "code", st == CATTR_OK ? CLI_USAGE : cli_error_code(st));
    cJSON_AddStringToObject(o, "kind", st == CATTR_OK ? "usage" : cattr_status_string(st));
    char *t = json_text(o);
    return t ? t : strdup("{\"error\":\"out of memory\"}\n");
}

static enum MHD_Result answer_error(struct MHD_Connection *c, req *rq, int status, cattr_status st, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static enum MHD_Result answer_error(struct MHD_Connection *c, req *rq, int status, cattr_status st, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return answer(c, rq, status, error_body(msg, st), "application/json", status == 503 || status == 429 ? 1 : 0);
}

/* The HTTP status of a failed job: a bad request (the CLI's usage code) 400, a cancelled one 504 or 499 (the client
 * left), memory 503, else 500 */
static int http_status(cattr_status st, int why) {
    if (st == CATTR_ERR_CANCELLED) return why == 2 ? 499 : 504;
    if (st == CATTR_ERR_NO_MEMORY) return 503;
    if (st == CATTR_OK || cli_error_code(st) == CLI_USAGE || st == CATTR_ERR_SHAPE || st == CATTR_ERR_DTYPE ||
        st == CATTR_ERR_TARGET || st == CATTR_ERR_NONFINITE || st == CATTR_ERR_UNSUPPORTED)
        return 400;
    return 500;
}

/* ---- the workers ---------------------------------------------------------------------------------------------------- */

/* The rows of t ([B, ...]) as nested lists */
static cJSON *rows_json(const double *v, const int64_t *shape, int nd) {
    if (nd == 0) return cJSON_CreateNumber(*v);
    cJSON *a = cJSON_CreateArray();
    int64_t inner = 1;
    for (int d = 1; d < nd; d++) inner *= shape[d];
    for (int64_t i = 0; i < shape[0]; i++) cJSON_AddItemToArray(a, rows_json(v + i * inner, shape + 1, nd - 1));
    return a;
}

/* A failed job's answer: the HTTP status of st (a usage error when the library gave none), msg, the error counted */
static void fail_job(job *j, cattr_status st, const char *msg) {
    if (st == CATTR_OK) st = CATTR_ERR_INVALID_ARGUMENT;
    j->status = http_status(st, j->why);
    j->answer = error_body(msg, st);
    pthread_mutex_lock(&S.mu);
    S.errors[st > 0 && st < 16 ? st : 0]++;
    pthread_mutex_unlock(&S.mu);
}

/* A language model's :predict: each prompt's greedy continuation (cattr_llm_generate_params, watched by the job's
 * cancel flag), {"predictions": [{"text", "token_ids"}, ...]}; st and msg say why not */
static char *generate_json(served *m, const cJSON *prompts, const volatile int *cancel, cattr_status *st, char *msg,
                           size_t size) {
    cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_FEATURE_ABLATION); /* float32, nothing watched */
    p.cancel = cancel;
    cJSON *root = cJSON_CreateObject(), *preds = cJSON_AddArrayToObject(root, "predictions");
    *st = preds ? CATTR_OK : CATTR_ERR_NO_MEMORY;
    if (!preds) snprintf(msg, size, "out of memory");
    int i = 0;
    for (const cJSON *e = prompts->child; e && *st == CATTR_OK; e = e->next, i++) {
        const char *prompt = cJSON_GetObjectItemCaseSensitive(e, "prompt")->valuestring;
        int max_new = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "max_new_tokens"));
        int64_t *ids = NULL, T = 0, *gen = NULL, n = 0;
        char *text = NULL;
        *st = cattr_llm_encode(m->llm, prompt, &ids, &T);
        if (*st != CATTR_OK) {
            snprintf(msg, size, "instances[%d]: cannot tokenize the prompt: %s", i, cattr_last_error());
        } else if (T < 1) {
            *st = CATTR_ERR_INVALID_ARGUMENT;
            snprintf(msg, size, "instances[%d]: the prompt tokenizes to nothing", i);
        } else if ((*st = cattr_llm_generate_params(m->llm, &p, ids, T, max_new, &gen, &n)) != CATTR_OK) {
            snprintf(msg, size, "instances[%d]: generation failed: %s", i, cattr_last_error());
        } else if ((*st = cattr_llm_decode(m->llm, gen, n, 1, &text)) != CATTR_OK) {
            snprintf(msg, size, "instances[%d]: cannot decode the tokens: %s", i, cattr_last_error());
        } else {
            cJSON *o = cJSON_CreateObject(), *tk = cJSON_AddArrayToObject(o, "token_ids");
            cJSON_AddStringToObject(o, "text", text);
            for (int64_t k = 0; tk && k < n; k++) cJSON_AddItemToArray(tk, cJSON_CreateNumber((double)gen[k]));
            cJSON_AddItemToArray(preds, o);
        }
        free(ids);
        free(gen);
        free(text);
    }
    if (*st != CATTR_OK) {
        cJSON_Delete(root);
        return NULL;
    }
    char *out = json_text(root); /* root freed */
    if (!out) {
        *st = CATTR_ERR_NO_MEMORY;
        snprintf(msg, size, "out of memory");
    }
    return out;
}

static void run_job(job *j, int slot, cli_explainer_cache *cache) {
    char msg[2048];
    cli_capture(msg, sizeof msg);
    if (j->model->llm && !j->explain) {
        cattr_status st = CATTR_OK;
        pthread_mutex_lock(&j->model->mu);
        char *json = generate_json(j->model, j->llm_rq, &j->cancel, &st, msg, sizeof msg);
        pthread_mutex_unlock(&j->model->mu);
        if (json) {
            j->status = 200;
            j->answer = json;
        } else {
            fail_job(j, st, msg);
        }
    } else if (j->model->llm) {
        char *json = NULL;
        cattr_status st = CATTR_OK;
        pthread_mutex_lock(&j->model->mu);
        int rc = cJSON_GetObjectItemCaseSensitive(j->llm_rq, "question") /* explain-context's, else explain-llm's */
                     ? cli_context_answer_mem(j->model->llm, j->model->path, j->llm_rq, &j->cancel, &json, &st, msg,
                                              sizeof msg)
                     : cli_llm_answer_mem(j->model->llm, j->llm_rq, &j->cancel, &json, &st, msg, sizeof msg);
        pthread_mutex_unlock(&j->model->mu);
        if (rc == CLI_OK) {
            size_t n = strlen(json);
            char *w = realloc(json, n + 2);
            if (w) {
                w[n] = '\n';
                w[n + 1] = '\0';
                json = w;
            }
            j->status = 200;
            j->answer = json;
        } else {
            if (st == CATTR_OK && rc != CLI_USAGE) st = CATTR_ERR_INTERNAL;
            fail_job(j, st, msg[0] ? msg : "the explanation failed");
        }
    } else if (j->explain) {
        char *json = NULL;
        int rc = cli_explain_mem(j->model->model, j->sr.argc, j->sr.argv, (const cattr_tensor *const *)j->sr.inputs,
                                 j->sr.n_inputs, (const cattr_tensor *const *)j->sr.side, j->sr.n_side, &S.cancel[slot],
                                 cache, &json);
        if (rc == CLI_OK && json) {
            j->status = 200;
            j->answer = json;
        } else {
            free(json);
            if (!msg[0]) snprintf(msg, sizeof msg, "the explanation failed (exit code %d)", rc);
            fail_job(j, cli_captured_status(), msg);
        }
    } else {
        cattr_tensor *out = NULL, *d = NULL;
        cattr_status st = cattr_model_forward(j->model->model, CATTR_FLOAT32, (const cattr_tensor *const *)j->sr.inputs,
                                              j->sr.n_inputs, &out);
        if (st == CATTR_OK) st = cattr_tensor_convert(out, CATTR_FLOAT64, &d);
        if (st == CATTR_OK) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddItemToObject(o, "predictions",
                                  rows_json(cattr_tensor_data_const(d), cattr_tensor_shape(d), cattr_tensor_ndim(d)));
            j->answer = json_text(o);
            j->status = j->answer ? 200 : 500;
            if (!j->answer) j->answer = error_body("out of memory", CATTR_ERR_NO_MEMORY);
        } else {
            snprintf(msg, sizeof msg, "forward pass failed: %s", cattr_last_error());
            fail_job(j, st, msg);
        }
        cattr_tensor_free(out);
        cattr_tensor_free(d);
    }
    cli_capture(NULL, 0);
}

static void *worker_main(void *arg) {
    int slot = (int)(intptr_t)arg;
    omp_set_num_threads(S.threads_per_worker);
    cli_explainer_cache *cache = cli_explainer_cache_new(); /* NULL (no memory): an explainer per request */
    for (;;) {
        pthread_mutex_lock(&S.mu);
        while (!S.head && !S.stop) pthread_cond_wait(&S.cv, &S.mu);
        if (!S.head) { /* stop, and nothing left */
            pthread_mutex_unlock(&S.mu);
            cli_explainer_cache_free(cache);
            return NULL;
        }
        job *j = S.head;
        S.head = j->next;
        if (!S.head) S.tail = NULL;
        S.queued--;
        S.running++;
        S.active[slot] = j;
        S.cancel[slot] = j->cancel;
        pthread_mutex_unlock(&S.mu);
        if (j->cancel) { /* past its time, or its client left, while it waited */
            j->status = j->why == 2 ? 499 : 504;
            j->answer = error_body(j->why == 2 ? "the client closed the connection" : "the request timed out in the queue",
                                   CATTR_ERR_CANCELLED);
        } else {
            run_job(j, slot, cache);
        }
        struct MHD_Connection *conn = j->conn; /* j belongs to the connection again once resumed */
        pthread_mutex_lock(&S.mu);
        S.active[slot] = NULL;
        S.running--;
        pthread_mutex_unlock(&S.mu);
        MHD_resume_connection(conn);
    }
}

/* Every 50 ms: a job past its deadline, or whose client closed the connection, is cancelled */
static void *watcher_main(void *arg) {
    (void)arg;
    for (;;) {
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&S.mu);
        if (S.stop) {
            pthread_mutex_unlock(&S.mu);
            return NULL;
        }
        double t = now_s();
        job *look[512];
        int n = 0, worker[512];
        for (job *j = S.head; j && n < 256; j = j->next) worker[n] = -1, look[n++] = j;
        for (int w = 0; w < S.workers; w++)
            if (S.active[w]) worker[n] = w, look[n++] = S.active[w];
        for (int k = 0; k < n; k++) {
            job *j = look[k];
            if (j->cancel) continue;
            const union MHD_ConnectionInfo *ci = NULL;
            char b;
            if (t > j->deadline) j->why = 1;
            else if ((ci = MHD_get_connection_info(j->conn, MHD_CONNECTION_INFO_CONNECTION_FD)) &&
                     recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0) /* an orderly close */
                j->why = 2;
            else continue;
            j->cancel = 1;
            if (worker[k] >= 0) S.cancel[worker[k]] = 1;
        }
        pthread_mutex_unlock(&S.mu);
    }
}

/* ---- routes ---------------------------------------------------------------------------------------------------------- */

static served *find_model(const char *name, size_t n) {
    for (int i = 0; i < S.n_models; i++)
        if (strlen(S.models[i].name) == n && !strncmp(S.models[i].name, name, n)) return &S.models[i];
    return NULL;
}

/* The route of (method, url); *m the model it names, *bad a 404/405 */
static int route_of(const char *method, const char *url, served **m, int *bad) {
    *m = NULL;
    *bad = 0;
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    int r = ROUTE_NONE;
    bool wants_post = false;
    if (!strcmp(url, "/health") || !strcmp(url, "/v2/health/ready") || !strcmp(url, "/v2/health/live")) r = ROUTE_HEALTH;
    else if (!strcmp(url, "/metrics")) r = ROUTE_METRICS;
    else if (!strcmp(url, "/") || !strcmp(url, "/index.html")) r = ROUTE_PAGE;
    else if (!strcmp(url, "/v1/models")) r = ROUTE_MODELS;
    else if (!strncmp(url, "/v1/models/", 11)) {
        const char *name = url + 11, *colon = strchr(name, ':');
        size_t n = colon ? (size_t)(colon - name) : strlen(name);
        if (colon && !strcmp(colon, ":predict")) r = ROUTE_PREDICT, wants_post = true;
        else if (colon && !strcmp(colon, ":explain")) r = ROUTE_EXPLAIN, wants_post = true;
        else if (!colon) r = ROUTE_MODEL;
        if (r != ROUTE_NONE && !(*m = find_model(name, n))) {
            *bad = 404;
            return r;
        }
    }
    if (r == ROUTE_NONE) *bad = 404;
    else if (wants_post ? !post : !get) *bad = 405;
    return r;
}

static char *health_body(void) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", S.draining ? "shutting down" : "ok");
    cJSON_AddNumberToObject(o, "models", S.n_models);
    return json_text(o);
}

static char *models_body(void) {
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "models");
    for (int i = 0; i < S.n_models; i++) cJSON_AddItemToArray(a, cJSON_CreateString(S.models[i].name));
    return json_text(o);
}

static char *model_body(const served *m) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", m->name);
    cJSON_AddBoolToObject(o, "ready", !S.draining);
    cJSON_AddStringToObject(o, "kind", m->llm ? "language-model" : "onnx");
    if (m->norm[0]) { /* --image-norm: what the web page does to an image's pixels (0..255) */
        char buf[256];
        snprintf(buf, sizeof buf, "%s", m->norm);
        char *mean = strchr(buf, ':'), *std = mean ? strchr(mean + 1, ':') : NULL;
        if (mean && std) {
            *mean++ = '\0';
            *std++ = '\0';
            cJSON *im = cJSON_AddObjectToObject(o, "image");
            cJSON_AddStringToObject(im, "scale", buf);
            cJSON_AddStringToObject(im, "mean", mean);
            cJSON_AddStringToObject(im, "std", std);
        }
    }
    if (m->llm) {
        cJSON_AddStringToObject(o, "explain", "POST {\"prompt\", \"target\", \"method\", ...} as an explain-llm request line");
        return json_text(o);
    }
    cJSON *ins = cJSON_AddArrayToObject(o, "inputs");
    for (int i = 0; i < cattr_model_n_inputs(m->model); i++) {
        cJSON *e = cJSON_CreateObject();
        int64_t sh[CATTR_MAX_DIMS];
        int nd = cattr_model_input_shape(m->model, i, sh);
        cJSON_AddStringToObject(e, "name", cattr_model_input_name(m->model, i));
        cJSON *s = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < nd; d++) cJSON_AddItemToArray(s, cJSON_CreateNumber((double)sh[d]));
        cJSON_AddItemToArray(ins, e);
    }
    cJSON *outs = cJSON_AddArrayToObject(o, "outputs");
    for (int i = 0; i < cattr_model_n_outputs(m->model); i++)
        cJSON_AddItemToArray(outs, cJSON_CreateString(cattr_model_output_name(m->model, i)));
    return json_text(o);
}

static char *metrics_body(void) {
    size_t cap = 1 << 16, off = 0;
    char *b = malloc(cap);
    if (!b) return NULL;
#define P(...) (off += (size_t)snprintf(b + off, off < cap ? cap - off : 0, __VA_ARGS__))
    pthread_mutex_lock(&S.mu);
    P("# HELP cattr_requests_total Requests answered, by route and status.\n# TYPE cattr_requests_total counter\n");
    for (int r = 0; r < N_ROUTES; r++)
        for (int c = 0; c <= N_CODES; c++)
            if (S.requests[r][c]) {
                if (c < N_CODES) P("cattr_requests_total{route=\"%s\",status=\"%d\"} %llu\n", ROUTE_NAMES[r], CODES[c], S.requests[r][c]);
                else P("cattr_requests_total{route=\"%s\",status=\"other\"} %llu\n", ROUTE_NAMES[r], S.requests[r][c]);
            }
    P("# HELP cattr_request_seconds Time from a request's arrival to its answer.\n# TYPE cattr_request_seconds histogram\n");
    for (int r = 0; r < N_ROUTES; r++) {
        if (!S.lat_n[r]) continue;
        unsigned long long cum = 0;
        for (int k = 0; k < N_BUCKETS; k++) {
            cum += S.hist[r][k];
            P("cattr_request_seconds_bucket{route=\"%s\",le=\"%g\"} %llu\n", ROUTE_NAMES[r], BUCKETS[k], cum);
        }
        P("cattr_request_seconds_bucket{route=\"%s\",le=\"+Inf\"} %llu\n", ROUTE_NAMES[r], S.lat_n[r]);
        P("cattr_request_seconds_sum{route=\"%s\"} %.6f\ncattr_request_seconds_count{route=\"%s\"} %llu\n", ROUTE_NAMES[r],
          S.lat_sum[r], ROUTE_NAMES[r], S.lat_n[r]);
    }
    P("# HELP cattr_queue_depth Jobs waiting for a worker.\n# TYPE cattr_queue_depth gauge\ncattr_queue_depth %d\n", S.queued);
    P("# HELP cattr_jobs_running Jobs a worker computes now.\n# TYPE cattr_jobs_running gauge\ncattr_jobs_running %d\n", S.running);
    P("# HELP cattr_queue_capacity The most jobs that wait.\n# TYPE cattr_queue_capacity gauge\ncattr_queue_capacity %d\n", S.queue_max);
    P("# HELP cattr_errors_total Failed jobs by kind.\n# TYPE cattr_errors_total counter\n");
    for (int k = 1; k < 16; k++)
        if (S.errors[k]) P("cattr_errors_total{kind=\"%s\"} %llu\n", cattr_status_string((cattr_status)k), S.errors[k]);
    P("# HELP cattr_model_file_bytes The size of each served model's file (a checkpoint: its .safetensors files).\n"
      "# TYPE cattr_model_file_bytes gauge\n");
    for (int i = 0; i < S.n_models; i++) P("cattr_model_file_bytes{model=\"%s\"} %lld\n", S.models[i].name, S.models[i].file_bytes);
    P("# HELP cattr_model_weight_bytes The bytes of each served model's weights (a checkpoint's: its files, mapped).\n"
      "# TYPE cattr_model_weight_bytes gauge\n");
    for (int i = 0; i < S.n_models; i++)
        P("cattr_model_weight_bytes{model=\"%s\"} %lld\n", S.models[i].name, S.models[i].weight_bytes);
    long pages = 0, resident = 0;
    FILE *sm = fopen("/proc/self/statm", "r");
    if (sm && fscanf(sm, "%ld %ld", &pages, &resident) == 2)
        P("# HELP process_resident_memory_bytes Resident memory (models, kept explainers and buffers, requests).\n"
          "# TYPE process_resident_memory_bytes gauge\n"
          "process_resident_memory_bytes %lld\n", (long long)resident * sysconf(_SC_PAGESIZE));
    if (sm) fclose(sm);
    pthread_mutex_unlock(&S.mu);
#undef P
    if (off >= cap) {
        free(b);
        return strdup("# the metrics outgrew their buffer\n");
    }
    return b;
}

static bool authorized(struct MHD_Connection *c) {
    if (!S.token[0]) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7)) return false;
    h += 7;
    size_t a = strlen(h), b = strlen(S.token);
    unsigned diff = (unsigned)(a ^ b);
    for (size_t i = 0; i < b; i++) diff |= (unsigned char)(i < a ? h[i] : 0) ^ (unsigned char)S.token[i];
    return diff == 0;
}

typedef struct query {
    const char *keys[40], *values[40];
    int n;
    bool overflow;
} query;

static enum MHD_Result query_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    query *q = cls;
    if (q->n == (int)(sizeof q->keys / sizeof q->keys[0])) {
        q->overflow = true;
        return MHD_NO;
    }
    q->keys[q->n] = key;
    q->values[q->n++] = value;
    return MHD_YES;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)cls;
    (void)version;
    req *rq = *con_cls;
    if (!rq) { /* the headers are in: route, authorization, the announced size */
        rq = calloc(1, sizeof *rq);
        if (!rq) return MHD_NO;
        *con_cls = rq;
        rq->t0 = now_s();
        snprintf(rq->method, sizeof rq->method, "%s", method);
        snprintf(rq->url, sizeof rq->url, "%s", url);
        int bad = 0;
        rq->route = route_of(method, url, &rq->model, &bad);
        if (bad == 404)
            return rq->route == ROUTE_NONE ? answer_error(c, rq, 404, CATTR_ERR_INVALID_ARGUMENT, "no route %.200s (see GET /v1/models)", url)
                                           : answer_error(c, rq, 404, CATTR_ERR_INVALID_ARGUMENT, "no model called '%.200s' (serving %d: see GET /v1/models)",
                                                          url + 11, S.n_models);
        if (bad == 405) return answer_error(c, rq, 405, CATTR_ERR_INVALID_ARGUMENT, "%s %.200s: use %s", method, url,
                                            rq->route == ROUTE_PREDICT || rq->route == ROUTE_EXPLAIN ? "POST" : "GET");
        if (rq->route != ROUTE_HEALTH && rq->route != ROUTE_PAGE && !authorized(c)) /* the page asks for the token */
            return answer_error(c, rq, 401, CATTR_ERR_INVALID_ARGUMENT, "this server needs \"Authorization: Bearer TOKEN\"");
        const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
        snprintf(rq->type, sizeof rq->type, "%.*s", ct ? (int)strcspn(ct, "; ") : 0, ct ? ct : "");
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > S.max_body)
            return answer_error(c, rq, 413, CATTR_ERR_INVALID_ARGUMENT, "the body's %s bytes are over the limit of %zu (--max-body)", cl, S.max_body);
        return MHD_YES;
    }
    if (rq->answered) { /* an error answered early: the rest of the body is dropped */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) { /* more of the body */
        if (rq->len + *upload_size > S.max_body) rq->too_big = true;
        else {
            if (rq->len + *upload_size + 1 > rq->cap) {
                size_t nc = rq->cap ? rq->cap : 65536;
                while (nc < rq->len + *upload_size + 1) nc *= 2;
                char *g = realloc(rq->body, nc);
                if (!g) return MHD_NO;
                rq->body = g;
                rq->cap = nc;
            }
            memcpy(rq->body + rq->len, upload, *upload_size);
            rq->len += *upload_size;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->job) { /* resumed: the worker's answer */
        job *j = rq->job;
        char *a = j->answer;
        j->answer = NULL;
        return answer(c, rq, j->status, a ? a : error_body("no answer", CATTR_ERR_INTERNAL), "application/json", 0);
    }
    if (rq->too_big)
        return answer_error(c, rq, 413, CATTR_ERR_INVALID_ARGUMENT, "the body is over the limit of %zu bytes (--max-body)", S.max_body);
    switch (rq->route) {
    case ROUTE_HEALTH: return answer(c, rq, S.draining ? 503 : 200, health_body(), "application/json", 0);
    case ROUTE_MODELS: return answer(c, rq, 200, models_body(), "application/json", 0);
    case ROUTE_MODEL: return answer(c, rq, 200, model_body(rq->model), "application/json", 0);
    case ROUTE_METRICS: return answer(c, rq, 200, metrics_body(), "text/plain; version=0.0.4", 0);
    case ROUTE_PAGE: {
        char *page = malloc(cattr_serve_page_len + 1);
        if (!page) return MHD_NO;
        memcpy(page, cattr_serve_page, cattr_serve_page_len);
        page[cattr_serve_page_len] = '\0';
        return answer(c, rq, 200, page, "text/html; charset=utf-8", 0);
    }
    default: break;
    }
    /* :predict or :explain */
    if (S.draining) return answer_error(c, rq, 503, CATTR_ERR_INVALID_ARGUMENT, "the server is shutting down");
    job *j = calloc(1, sizeof *j);
    if (!j) return answer_error(c, rq, 503, CATTR_ERR_NO_MEMORY, "out of memory");
    char err[1024];
    j->explain = rq->route == ROUTE_EXPLAIN;
    query q = {.n = 0};
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, query_arg, &q);
    if (rq->model->llm) {
        int lst = 0;
        if (q.n) {
            lst = 400;
            snprintf(err, sizeof err, "a language model's request holds its options in its JSON body, not the query");
        } else if (!j->explain) { /* generation */
            lst = serve_decode_llm_predict(rq->body ? rq->body : "", rq->len, &j->llm_rq, err, sizeof err);
        } else {
            lst = serve_decode_llm(rq->body ? rq->body : "", rq->len, &j->llm_rq, err, sizeof err);
        }
        free(rq->body);
        rq->body = NULL;
        if (lst) {
            free(j);
            return answer_error(c, rq, lst, CATTR_ERR_INVALID_ARGUMENT, "%s", err);
        }
        goto queue_it;
    }
    /* the body's kind: its Content-Type, or for application/octet-stream its first bytes */
    bool npy = !strcasecmp(rq->type, "application/x-npy"), st_body = !strcasecmp(rq->type, "application/x-safetensors");
    if (!strcasecmp(rq->type, "application/octet-stream")) {
        npy = rq->len >= 6 && !memcmp(rq->body, "\x93NUMPY", 6);
        st_body = !npy;
    }
    int st;
    if (npy || st_body) {
        st = serve_decode_tensors(rq->body ? rq->body : "", rq->len, st_body, rq->model->name, rq->model->names,
                                  rq->model->n_inputs, j->explain, q.keys, q.values, q.n, &j->sr, err, sizeof err);
    } else if (q.n) {
        st = 400;
        snprintf(err, sizeof err, "query arguments ('%.64s', ...) go with an .npy or .safetensors body: a JSON body "
                 "holds its options in \"explanation\"", q.keys[0]);
    } else if (rq->type[0] && strcasecmp(rq->type, "application/json") && strcasecmp(rq->type, "text/plain") &&
               strcasecmp(rq->type, "application/x-www-form-urlencoded")) {
        st = 415;
        snprintf(err, sizeof err, "Content-Type '%.64s': send application/json, application/x-npy or "
                 "application/x-safetensors", rq->type);
    } else {
        st = serve_decode(rq->body ? rq->body : "", rq->len, rq->model->name, rq->model->names, rq->model->n_inputs,
                          j->explain, &j->sr, err, sizeof err);
    }
    if (q.overflow) {
        serve_req_free(&j->sr);
        st = 400;
        snprintf(err, sizeof err, "more than %d query arguments", (int)(sizeof q.keys / sizeof q.keys[0]));
    }
    free(rq->body);
    rq->body = NULL;
    if (st) {
        serve_req_free(&j->sr);
        free(j);
        return answer_error(c, rq, st, CATTR_ERR_INVALID_ARGUMENT, "%s", err);
    }
queue_it:
    j->conn = c;
    j->model = rq->model;
    j->deadline = rq->t0 + S.timeout;
    pthread_mutex_lock(&S.mu);
    if (S.queued + S.running >= S.workers + S.queue_max) { /* every worker busy and the queue full */
        pthread_mutex_unlock(&S.mu);
        serve_req_free(&j->sr);
        cJSON_Delete(j->llm_rq);
        free(j);
        return answer_error(c, rq, 503, CATTR_ERR_INVALID_ARGUMENT,
                            "the queue is full (%d requests waiting, %d running): try again later", S.queue_max, S.workers);
    }
    rq->job = j;
    MHD_suspend_connection(c);
    if (S.tail) S.tail->next = j;
    else S.head = j;
    S.tail = j;
    S.queued++;
    S.open_jobs++;
    pthread_cond_signal(&S.cv);
    pthread_mutex_unlock(&S.mu);
    return MHD_YES;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why) {
    (void)cls;
    req *rq = *con_cls;
    if (!rq) return;
    *con_cls = NULL;
    double dt = now_s() - rq->t0;
    int status = rq->answered ? rq->status : why == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED ? 408 : 499;
    pthread_mutex_lock(&S.mu);
    S.requests[rq->route][status_class(status)]++;
    int k = 0;
    while (k < N_BUCKETS && dt > BUCKETS[k]) k++;
    if (k < N_BUCKETS) S.hist[rq->route][k]++;
    S.lat_sum[rq->route] += dt;
    S.lat_n[rq->route]++;
    pthread_mutex_unlock(&S.mu);
    if (S.access_log) {
        char ip[64] = "-";
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci && ci->client_addr) {
            const struct sockaddr *sa = ci->client_addr;
            if (sa->sa_family == AF_INET) inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, ip, sizeof ip);
            else if (sa->sa_family == AF_INET6) inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, ip, sizeof ip);
        }
        char url[256];
        cx_escape_text(rq->url, url, sizeof url);
        fprintf(stderr, "%s \"%s %s\" %d %zu %.1f ms\n", ip, rq->method, url, status, rq->bytes, 1e3 * dt);
    }
    if (rq->job) {
        pthread_mutex_lock(&S.mu);
        S.open_jobs--;
        pthread_mutex_unlock(&S.mu);
        serve_req_free(&rq->job->sr);
        cJSON_Delete(rq->job->llm_rq);
        free(rq->job->answer);
        free(rq->job);
    }
    free(rq->body);
    free(rq);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    fprintf(stderr, "cattr: serve: ");
    vfprintf(stderr, fmt, ap);
}

/* ---- the command ----------------------------------------------------------------------------------------------------- */

static bool name_ok(const char *s, size_t n) {
    if (!n || n >= sizeof S.models[0].name) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '.' ||
              s[i] == '_' || s[i] == '-'))
            return false;
    return true;
}

int cmd_serve(int argc, char **argv) {
    const char *host = "127.0.0.1", *token_file = NULL, *device = "cpu";
    long long port = 8080, workers = 0, queue = 64, timeout = 300;
    size_t max_body = (size_t)64 << 20;
    bool access_log = true;
    const char *specs[MAX_MODELS], *norms[MAX_MODELS];
    int n_specs = 0, n_norms = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            serve_help(stdout);
            return CLI_OK;
        }
        if (!strcmp(o, "--no-access-log")) {
            access_log = false;
            continue;
        }
        if (o[0] != '-') return cli_usage_error("serve: unexpected argument '%s' (models are given as --model NAME=PATH)", o);
        static const char *const valued[] = {"--model", "--image-norm", "--host", "--port", "--workers", "--queue",
                                             "--timeout", "--max-body", "--token-file", "--device", NULL};
        int k = 0;
        while (valued[k] && strcmp(valued[k], o)) k++;
        if (!valued[k]) return cli_usage_error("serve: unknown option '%s' (see cattr serve --help)", o);
        if (!v) return cli_usage_error("%s needs a value (see cattr serve --help)", o);
        i++;
        if (!strcmp(o, "--model")) {
            if (n_specs >= MAX_MODELS) return cli_usage_error("at most %d --model", MAX_MODELS);
            specs[n_specs++] = v;
        } else if (!strcmp(o, "--image-norm")) {
            if (n_norms >= MAX_MODELS) return cli_usage_error("at most %d --image-norm", MAX_MODELS);
            norms[n_norms++] = v;
        } else if (!strcmp(o, "--host")) {
            host = v;
        } else if (!strcmp(o, "--port")) {
            if (!cli_int_arg(o, v, 0, 65535, &port)) return CLI_USAGE;
        } else if (!strcmp(o, "--workers")) {
            if (!cli_int_arg(o, v, 1, 256, &workers)) return CLI_USAGE;
        } else if (!strcmp(o, "--queue")) {
            if (!cli_int_arg(o, v, 0, 1000000, &queue)) return CLI_USAGE;
        } else if (!strcmp(o, "--timeout")) {
            if (!cli_int_arg(o, v, 1, 86400 * 7, &timeout)) return CLI_USAGE;
        } else if (!strcmp(o, "--max-body")) {
            if (!cli_parse_size(v, &max_body) || max_body < 1)
                return cli_usage_error("--max-body needs a size such as 64M or 1G, not '%s'", v);
        } else if (!strcmp(o, "--token-file")) {
            token_file = v;
        } else if (!strcmp(o, "--device")) {
            if (!cli_device_arg(v)) return CLI_USAGE;
            device = v;
        } else {
            return cli_usage_error("serve: unknown option '%s' (see cattr serve --help)", o);
        }
    }
    if (!n_specs) return cli_usage_error("serve: give at least one --model NAME=MODEL.onnx");
    struct sockaddr_storage addr;
    memset(&addr, 0, sizeof addr);
    bool v6 = strchr(host, ':') != NULL;
    if (v6) {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&addr;
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, host, &a6->sin6_addr) != 1) return cli_usage_error("--host: '%s' is not an IPv6 address", host);
    } else {
        struct sockaddr_in *a4 = (struct sockaddr_in *)&addr;
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        if (!strcmp(host, "localhost")) host = "127.0.0.1";
        if (inet_pton(AF_INET, host, &a4->sin_addr) != 1)
            return cli_usage_error("--host: '%s' is not an IPv4 address (such as 127.0.0.1 or 0.0.0.0) or an IPv6 one", host);
    }
    if (token_file) {
        FILE *f = fopen(token_file, "r");
        if (!f) return cli_usage_error("--token-file: cannot read '%s': %s", token_file, strerror(errno));
        if (!fgets(S.token, sizeof S.token, f)) S.token[0] = '\0';
        fclose(f);
        S.token[strcspn(S.token, "\r\n")] = '\0';
        if (strlen(S.token) < 16) return cli_usage_error("--token-file: '%s' needs a token of 16 characters or more on its first line", token_file);
    }
    int rc = CLI_OK;
    for (int i = 0; i < n_specs; i++) {
        const char *eq = strchr(specs[i], '=');
        if (!eq || !name_ok(specs[i], (size_t)(eq - specs[i])) || !eq[1]) {
            rc = cli_usage_error("--model %s: give NAME=PATH (NAME of letters, digits, '.', '_', '-')", specs[i]);
            goto out;
        }
        served *m = &S.models[S.n_models];
        snprintf(m->name, sizeof m->name, "%.*s", (int)(eq - specs[i]), specs[i]);
        snprintf(m->path, sizeof m->path, "%s", eq + 1);
        if (find_model(m->name, strlen(m->name))) {
            rc = cli_usage_error("--model %s: the name '%s' is given twice", specs[i], m->name);
            goto out;
        }
        struct stat sb;
        bool dir = stat(m->path, &sb) == 0 && S_ISDIR(sb.st_mode); /* a language-model checkpoint */
        if (dir ? !cli_folder_in(m->path, "--model") : !cli_file_in(m->path, "--model")) {
            rc = CLI_USAGE;
            goto out;
        }
        cattr_status st;
        if (dir) {
            st = cattr_llm_load(m->path, &m->llm);
            if (st == CATTR_OK) st = cattr_llm_set_device(m->llm, device);
        } else {
            st = cattr_model_load_onnx(m->path, &m->model);
            if (st == CATTR_OK) st = cattr_model_set_device(m->model, device);
        }
        if (st != CATTR_OK) {
            char what[256];
            snprintf(what, sizeof what, "cannot load --model %.200s", specs[i]);
            rc = cli_error(st, what);
            goto out;
        }
        pthread_mutex_init(&m->mu, NULL);
        if (m->model) {
            m->n_inputs = cattr_model_n_inputs(m->model);
            for (int k = 0; k < m->n_inputs && k < CATTR_MAX_INPUTS; k++) m->names[k] = cattr_model_input_name(m->model, k);
        }
        m->file_bytes = dir ? 0 : (long long)sb.st_size;
        if (dir) { /* a checkpoint: its .safetensors files, mapped in their own dtype */
            DIR *d = opendir(m->path);
            for (struct dirent *de; d && (de = readdir(d));) {
                size_t n = strlen(de->d_name);
                char f[8192];
                struct stat fs;
                if (n > 12 && !strcmp(de->d_name + n - 12, ".safetensors") &&
                    snprintf(f, sizeof f, "%s/%s", m->path, de->d_name) < (int)sizeof f && !stat(f, &fs))
                    m->file_bytes += (long long)fs.st_size;
            }
            if (d) closedir(d);
            m->weight_bytes = m->file_bytes;
        } else {
            int nw = cattr_model_module_weights(m->model, NULL, NULL, 0);
            const char **wn = nw > 0 ? calloc((size_t)nw, sizeof *wn) : NULL;
            if (wn) nw = cattr_model_module_weights(m->model, NULL, wn, nw);
            for (int k = 0; wn && k < nw; k++) {
                const cattr_tensor *w = cattr_model_weight(m->model, wn[k]);
                if (w) m->weight_bytes += (long long)(cattr_tensor_numel(w) * (int64_t)cattr_dtype_size(cattr_tensor_dtype(w)));
            }
            free(wn);
        }
        S.n_models++;
    }
    for (int i = 0; i < n_norms; i++) { /* NAME=SCALE:MEAN:STD, MEAN and STD one number or one per channel */
        const char *eq = strchr(norms[i], '=');
        served *m = eq ? find_model(norms[i], (size_t)(eq - norms[i])) : NULL;
        if (!m) {
            rc = cli_usage_error("--image-norm %s: give NAME=SCALE:MEAN:STD for a --model NAME", norms[i]);
            goto out;
        }
        int colons = 0;
        bool ok = strlen(eq + 1) < sizeof m->norm;
        for (const char *c = eq + 1; *c && ok; c++) {
            colons += *c == ':';
            ok = strchr("0123456789.,:/eE+-", *c) != NULL;
        }
        if (!ok || colons != 2) {
            rc = cli_usage_error("--image-norm %s: give SCALE:MEAN:STD such as 1/255:0.485,0.456,0.406:0.229,0.224,0.225",
                                 norms[i]);
            goto out;
        }
        snprintf(m->norm, sizeof m->norm, "%s", eq + 1);
    }
    int cores = omp_get_max_threads();
    S.workers = workers > 0 ? (int)workers : cores;
    S.threads_per_worker = cores / S.workers > 1 ? cores / S.workers : 1;
    S.queue_max = (int)queue;
    S.max_body = max_body;
    S.timeout = (double)timeout;
    S.access_log = access_log;
    /* the signals go to sigwait below, in no other thread */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
                     (v6 ? MHD_USE_IPv6 : 0);
    S.daemon = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, handle, NULL, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                                MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
                                MHD_OPTION_CONNECTION_LIMIT, (unsigned)1024, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60,
                                MHD_OPTION_END);
    if (!S.daemon) {
        rc = cli_usage_error("serve: cannot listen on %s port %lld (in use, or not an address of this machine?)", host, port);
        goto out;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(S.daemon, MHD_DAEMON_INFO_BIND_PORT);
    int bound = di ? (int)di->port : (int)port;
    pthread_t th[256], watcher;
    int started = 0;
    for (; started < S.workers; started++)
        if (pthread_create(&th[started], NULL, worker_main, (void *)(intptr_t)started) != 0) break;
    bool watching = pthread_create(&watcher, NULL, watcher_main, NULL) == 0;
    if (started < S.workers || !watching) {
        fprintf(stderr, "cattr: serve: cannot start its threads\n");
        rc = CLI_FAIL;
        S.draining = true;
    } else {
        printf("cattr serve: listening on http://%s%s%s:%d (", v6 ? "[" : "", host, v6 ? "]" : "", bound);
        for (int i = 0; i < S.n_models; i++) printf("%s%s", i ? ", " : "", S.models[i].name);
        printf("; %d worker%s of %d thread%s, queue %d)\n", S.workers, S.workers == 1 ? "" : "s", S.threads_per_worker,
               S.threads_per_worker == 1 ? "" : "s", S.queue_max);
        fflush(stdout);
        int sig = 0;
        sigwait(&sigs, &sig);
        S.draining = true; /* new jobs are refused from here on */
        fprintf(stderr, "cattr: serve: %s: finishing %d running and %d queued requests\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
                S.running, S.queued);
    }
    /* drain: every job computed and its answer sent (the daemon still runs), then stop; an answer a client does not
     * read is given up after a minute */
    for (double t_idle = -1;;) {
        pthread_mutex_lock(&S.mu);
        bool computed = !S.head && S.running == 0, sent = S.open_jobs == 0;
        pthread_mutex_unlock(&S.mu);
        if (computed && t_idle < 0) t_idle = now_s();
        if (sent || (computed && now_s() - t_idle > 60)) break;
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    MHD_stop_daemon(S.daemon);
    pthread_mutex_lock(&S.mu);
    S.stop = true;
    pthread_cond_broadcast(&S.cv);
    pthread_mutex_unlock(&S.mu);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    if (watching) pthread_join(watcher, NULL);
    if (rc == CLI_OK) fprintf(stderr, "cattr: serve: stopped\n");
out:
    for (int i = 0; i < S.n_models; i++) {
        cattr_model_free(S.models[i].model);
        cattr_llm_free(S.models[i].llm);
        pthread_mutex_destroy(&S.models[i].mu);
    }
    return rc;
}
#endif
