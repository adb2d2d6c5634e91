/* test_alloc_fail.c - a failed allocation anywhere is an error, never a crash: every entry point that reads outside
 * data or attributes runs once to count the allocations it makes, then again with allocation k failing, for every k
 * (up to a few hundred; evenly spread beyond), and must return an error status (or succeed: some allocations have a
 * fallback) without crashing. Under the sanitizer build the same runs also prove that no error path leaks or touches
 * freed memory.
 *
 * The switch: this test is linked with -Wl,--wrap for malloc, calloc, realloc, aligned_alloc, posix_memalign and
 * strdup (tests/CMakeLists.txt), so every allocation the library's own code makes goes through the wrappers below;
 * g_fail_at = k makes the k-th one (counted from the arming) fail. Allocations inside other libraries (cJSON,
 * protobuf-c, libgomp) are not counted: what they report as failure the library already checks. */
#define _GNU_SOURCE
#include "cattr.h"
#include "io/tensorio.h"
#include "io/tokenizer.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_util.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t s);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);
char *__real_strdup(const char *s);

static atomic_long g_count;   /* allocations since arming */
static atomic_long g_fail_at; /* 0: none fails */

static int should_fail(void) {
    long k = atomic_fetch_add(&g_count, 1) + 1;
    return atomic_load(&g_fail_at) == k;
}
void *__wrap_malloc(size_t n) { return should_fail() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t s) { return should_fail() ? NULL : __real_calloc(n, s); }
void *__wrap_realloc(void *p, size_t n) { return should_fail() ? NULL : __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) { return should_fail() ? NULL : __real_aligned_alloc(a, n); }
int __wrap_posix_memalign(void **p, size_t a, size_t n) { return should_fail() ? 12 /* ENOMEM */ : __real_posix_memalign(p, a, n); }
char *__wrap_strdup(const char *s) { return should_fail() ? NULL : __real_strdup(s); }

static void arm(long fail_at) {
    atomic_store(&g_fail_at, 0);
    atomic_store(&g_count, 0);
    atomic_store(&g_fail_at, fail_at);
}
static long disarm(void) {
    long n = atomic_load(&g_count);
    atomic_store(&g_fail_at, 0);
    return n;
}

/* One scenario: a function that runs it (with whatever it loaded beforehand) and returns its status. */
typedef cattr_status (*scenario_fn)(void *ctx);

/* Runs fn unarmed (it must succeed: the allocation count), then with each chosen allocation failing. */
static void sweep(const char *name, scenario_fn fn, void *ctx, long max_points) {
    arm(0);
    cattr_status st = fn(ctx);
    long total = disarm();
    CHECK(st == CATTR_OK, "%s: the unarmed run failed: %s", name, cattr_last_error());
    if (st != CATTR_OK) return;
    long step = total > max_points ? total / max_points : 1, tried = 0, errors = 0;
    for (long k = 1; k <= total; k += step) {
        arm(k);
        st = fn(ctx);
        disarm();
        tried++;
        if (st != CATTR_OK) {
            errors++;
            CHECK(cattr_last_error()[0] != '\0', "%s: allocation %ld failed: an error without a message", name, k);
        }
    }
    printf("%s: %ld allocations, %ld failure points tried, %ld gave an error, the rest had a fallback\n", name, total,
           tried, errors);
    CHECK(errors > 0, "%s: no failed allocation was ever reported", name);
}

/* ---- scenarios -------------------------------------------------------------------------------------------------- */

static cattr_status sc_npy(void *ctx) {
    cattr_tensor *t = NULL;
    cattr_status st = cattr_tensor_load_npy(ctx, &t);
    cattr_tensor_free(t);
    return st;
}

static cattr_status sc_safetensors(void *ctx) {
    cattr_tensor_set *s = NULL;
    cattr_status st = cattr_tensor_set_load(ctx, &s);
    if (st == CATTR_OK) st = cattr_tensor_set_save(s, "/tmp/cattr_alloc_fail.safetensors");
    cattr_tensor_set_free(s);
    return st;
}

static cattr_status sc_onnx(void *ctx) {
    cattr_model *m = NULL;
    cattr_status st = cattr_model_load_onnx(ctx, &m);
    if (st == CATTR_OK) {
        char buf[256];
        (void)cattr_model_describe(m, buf, sizeof buf);
    }
    cattr_model_free(m);
    return st;
}

typedef struct {
    const cattr_model *m;
    const cattr_tensor *x;
    cattr_method method;
} explain_ctx;

static cattr_status sc_explain(void *vctx) {
    explain_ctx *c = vctx;
    cattr_attr_params p = cattr_attr_default_params(c->method);
    p.n_steps = 8;
    p.n_samples = 4;
    if (c->method == CATTR_METHOD_LAYER_GRADCAM) p.layer = "conv2";
    cattr_explainer *e = NULL;
    cattr_status st = cattr_explainer_new(c->m, &p, &e);
    int64_t cls = 3;
    cattr_target t = {CATTR_TARGET_INDEX, 1, 0, &cls};
    const cattr_tensor *in[1] = {c->x};
    cattr_tensor *attr[CATTR_MAX_OUTPUTS] = {0}, *delta = NULL;
    if (st == CATTR_OK) st = cattr_explainer_attribute(e, in, 1, NULL, &t, NULL, 0, attr, &delta);
    for (int i = 0; i < CATTR_MAX_OUTPUTS; i++) cattr_tensor_free(attr[i]);
    cattr_tensor_free(delta);
    cattr_explainer_free(e);
    return st;
}

static cattr_status sc_llm_load(void *ctx) {
    cattr_llm *m = NULL;
    cattr_status st = cattr_llm_load(ctx, &m);
    cattr_llm_free(m);
    return st;
}

/* A fresh model per run: the plans, explainer and caches a first call makes are part of what must fail cleanly. */
static cattr_status sc_llm(void *vctx) {
    const cattr_method *method = vctx;
    cattr_llm *m = NULL;
    cattr_status st = cattr_llm_load("tests/data/llm/tiny", &m);
    cattr_attr_params p = cattr_attr_default_params(*method);
    p.n_steps = 4;
    p.n_samples = 3;
    int64_t *ids = NULL, T = 0;
    if (st == CATTR_OK) st = cattr_llm_encode(m, "The capital of France is", &ids, &T);
    int64_t tg[2] = {5, 7};
    double seq[64], tok[128], lp[2], dl[2];
    cattr_llm_call c = cattr_llm_call_make(ids, T, tg, 2);
    if (st == CATTR_OK) st = cattr_llm_attribute(m, &p, &c, seq, tok, lp, dl);
    free(ids);
    cattr_llm_free(m);
    return st;
}

static cattr_status sc_tokenizer(void *ctx) {
    cx_tokenizer *t = NULL;
    cattr_status st = cx_tokenizer_load(ctx, &t);
    int64_t *ids = NULL, n = 0;
    char *text = NULL;
    if (st == CATTR_OK) st = cx_tokenizer_encode(t, "Hello, world! caf\xc3\xa9 <|bos|>", 25, true, &ids, &n);
    if (st == CATTR_OK) st = cx_tokenizer_decode(t, ids, n, false, &text);
    free(ids);
    free(text);
    cx_tokenizer_free(t);
    return st;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0); /* the lines before a crash are not lost */
    sweep("npy", sc_npy, "models/digits/samples/digit_3.npy", 1000);
    sweep("safetensors", sc_safetensors, "tests/data/io/mixed.safetensors", 1000);
    sweep("onnx", sc_onnx, "models/digits/digits.onnx", 400);
    sweep("tokenizer", sc_tokenizer, "tests/data/llm/tiny", 400);
    cattr_model *m = NULL;
    cattr_tensor *x = NULL;
    CHECK(cattr_model_load_onnx("models/digits/digits.onnx", &m) == CATTR_OK, "%s", cattr_last_error());
    CHECK(cattr_tensor_load_npy("models/digits/samples/digit_3.npy", &x) == CATTR_OK, "%s", cattr_last_error());
    const cattr_method methods[] = {CATTR_METHOD_INTEGRATED_GRADIENTS, CATTR_METHOD_DEEPLIFT,
                                    CATTR_METHOD_FEATURE_ABLATION, CATTR_METHOD_LIME, CATTR_METHOD_LAYER_GRADCAM};
    for (size_t i = 0; m && x && i < sizeof methods / sizeof *methods; i++) {
        explain_ctx c = {m, x, methods[i]};
        char name[64];
        snprintf(name, sizeof name, "explain %s", cattr_method_name(methods[i]));
        sweep(name, sc_explain, &c, 300);
    }
    cattr_tensor_free(x);
    cattr_model_free(m);
    sweep("llm load", sc_llm_load, "tests/data/llm/tiny", 300);
    static const struct {
        cattr_method m;
        const char *name;
    } lms[] = {{CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS, "explain-llm layer-ig"},
               {CATTR_METHOD_FEATURE_ABLATION, "explain-llm feature-ablation"},
               {CATTR_METHOD_KERNEL_SHAP, "explain-llm kernel-shap"}};
    for (size_t i = 0; i < sizeof lms / sizeof *lms; i++) sweep(lms[i].name, sc_llm, (void *)&lms[i].m, 400);
    remove("/tmp/cattr_alloc_fail.safetensors");
    if (g_failures) {
        printf("test_alloc_fail: %d check(s) FAILED\n", g_failures);
        return 1;
    }
    printf("test_alloc_fail: all checks passed\n");
    return 0;
}
