/* test_profile.c - the profiler (cattr_profile_begin / _end / _count): IntegratedGradients on the bundled digits
 * model at 8 and 64 steps records op, copy and plan events; the Chrome trace it writes parses back (cJSON) as a
 * valid trace; the summary names the op kinds; node names with quotes, backslashes, control and non-UTF-8 bytes are
 * escaped; nothing is recorded while the profiler is off; and the API's error paths. */
#include "cattr.h"
#include "core/profile.h"
#include "io/fileutil.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int checks, fails;
#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        checks++;                                                                                                      \
        if (!(cond)) {                                                                                                 \
            fails++;                                                                                                   \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                                \
            printf(__VA_ARGS__);                                                                                       \
            printf(" (last error: %s)\n", cattr_last_error());                                                        \
        }                                                                                                              \
    } while (0)

static char *read_text(const char *path) { /* the library's reader: NUL-terminated, NULL on any failure */
    void *data = NULL;
    size_t size = 0;
    return cx_read_file(path, &data, &size) == CATTR_OK ? data : NULL;
}

/* Parses the trace at path and checks its shape: an object with a "traceEvents" array whose every element has string
 * "name" and "ph", numeric "ts", "pid" and "tid", and numeric "dur" when ph is "X". Returns the parsed document
 * (caller deletes), NULL on failure. */
static cJSON *load_trace(const char *path) {
    char *text = read_text(path);
    CHECK(text != NULL, "read %s", path);
    if (!text) return NULL;
    cJSON *doc = cJSON_Parse(text);
    free(text);
    CHECK(doc && cJSON_IsObject(doc), "trace %s parses as a JSON object", path);
    if (!doc) return NULL;
    const cJSON *evs = cJSON_GetObjectItemCaseSensitive(doc, "traceEvents");
    CHECK(cJSON_IsArray(evs), "traceEvents is an array");
    const cJSON *unit = cJSON_GetObjectItemCaseSensitive(doc, "displayTimeUnit");
    CHECK(cJSON_IsString(unit) && !strcmp(unit->valuestring, "ms"), "displayTimeUnit ms");
    int bad = 0, i = 0;
    const cJSON *ev;
    cJSON_ArrayForEach(ev, evs) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(ev, "name"), *ph = cJSON_GetObjectItemCaseSensitive(ev, "ph");
        bool ok = cJSON_IsObject(ev) && cJSON_IsString(name) && cJSON_IsString(ph) &&
                  cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(ev, "ts")) &&
                  cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(ev, "pid")) &&
                  cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(ev, "tid"));
        if (ok && !strcmp(ph->valuestring, "X")) {
            const cJSON *dur = cJSON_GetObjectItemCaseSensitive(ev, "dur");
            ok = cJSON_IsNumber(dur) && dur->valuedouble >= 0;
        }
        if (!ok && bad++ < 3) printf("bad trace event %d\n", i);
        i++;
    }
    CHECK(bad == 0, "%d of %d trace events lack name/ph/ts/pid/tid (or dur)", bad, i);
    return doc;
}

/* Events of the trace with this category. */
static int count_cat(const cJSON *doc, const char *cat) {
    int n = 0;
    const cJSON *ev;
    cJSON_ArrayForEach(ev, cJSON_GetObjectItemCaseSensitive(doc, "traceEvents")) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(ev, "cat");
        n += cJSON_IsString(c) && !strcmp(c->valuestring, cat);
    }
    return n;
}

typedef struct {
    int op, copy, plan;
} counts;

/* One profiled IG call at n_steps; writes the trace to json (NULL: none) and the summary to *summary. */
static counts profiled_ig(const cattr_model *m, const cattr_tensor *x, int n_steps, bool eager, const char *json,
                          char **summary) {
    counts c = {0, 0, 0};
    CHECK(cattr_profile_begin() == CATTR_OK, "begin");
    CHECK(cattr_profile_count(NULL) == 0, "begin clears the events");
    cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_INTEGRATED_GRADIENTS);
    p.n_steps = n_steps;
    p.executor = eager ? CATTR_EXEC_EAGER : CATTR_EXEC_PLANNED;
    cattr_explainer *e = NULL;
    CHECK(cattr_explainer_new(m, &p, &e) == CATTR_OK, "IG explainer, %d steps", n_steps);
    int64_t tidx = 3;
    cattr_target t = {CATTR_TARGET_INDEX, 1, 0, &tidx};
    const cattr_tensor *in[1] = {x};
    cattr_tensor *a = NULL, *d = NULL;
    if (e) CHECK(cattr_explainer_attribute(e, in, 1, NULL, &t, NULL, 0, &a, &d) == CATTR_OK, "IG %d steps", n_steps);
    cattr_tensor_free(a);
    cattr_tensor_free(d);
    cattr_explainer_free(e);
    c.op = cattr_profile_count("op");
    c.copy = cattr_profile_count("copy");
    c.plan = cattr_profile_count("plan");
    CHECK(cattr_profile_end(json, summary) == CATTR_OK, "end, %d steps", n_steps);
    CHECK(cattr_profile_count("op") == c.op && cattr_profile_count("copy") == c.copy, "counts kept after end");
    return c;
}

/* Copy events of one profiled call with params p on x (target 3) and, when features > 0, a mask giving the 64 elements
 * `features` features (blocks of 64 / features consecutive elements); -1 when it could not run. */
static int profiled_copies(const cattr_model *m, const cattr_tensor *x, const cattr_attr_params *p, int features) {
    int64_t shape[4] = {1, 1, 8, 8};
    cattr_tensor *mask = NULL;
    if (features > 0) {
        CHECK(cattr_tensor_new(CATTR_INT64, 4, shape, &mask) == CATTR_OK, "mask");
        if (!mask) return -1;
        int64_t *mv = cattr_tensor_data(mask);
        for (int k = 0; k < 64; k++) mv[k] = k / (64 / features);
    }
    CHECK(cattr_profile_begin() == CATTR_OK, "begin");
    cattr_explainer *e = NULL;
    CHECK(cattr_explainer_new(m, p, &e) == CATTR_OK, "%s explainer", cattr_method_name(p->method));
    int64_t tidx = 3;
    cattr_target t = {CATTR_TARGET_INDEX, 1, 0, &tidx};
    const cattr_tensor *in[1] = {x}, *masks[1] = {mask};
    cattr_call call = {0};
    call.inputs = in;
    call.n_inputs = 1;
    call.target = &t;
    call.feature_masks = mask ? masks : NULL;
    cattr_tensor *a = NULL;
    if (e)
        CHECK(cattr_explainer_run(e, &call, &a, NULL) == CATTR_OK, "%s (%d features): %s", cattr_method_name(p->method),
              features, cattr_last_error());
    int copies = a ? cattr_profile_count("copy") : -1;
    CHECK(cattr_profile_end(NULL, NULL) == CATTR_OK, "end");
    cattr_tensor_free(a);
    cattr_explainer_free(e);
    cattr_tensor_free(mask);
    return copies;
}

/* FeatureAblation with `features` features, in passes of 4 (more passes for more features). */
static int profiled_fa(const cattr_model *m, const cattr_tensor *x, int features) {
    cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_FEATURE_ABLATION);
    p.perturbations_per_eval = 4;
    return profiled_copies(m, x, &p, features);
}

/* Lime or ShapleyValueSampling with n_samples samples over 4 features, all in one pass (the budget allows it). */
static int profiled_samples(const cattr_model *m, const cattr_tensor *x, int n_samples, cattr_method method) {
    cattr_attr_params p = cattr_attr_default_params(method);
    p.n_samples = n_samples;
    return profiled_copies(m, x, &p, 4);
}

/* NoiseTunnel (smoothgrad around Saliency) with n samples, or GradientShap with n samples, in one partition. */
static int profiled_noise(const cattr_model *m, const cattr_tensor *x, int n, cattr_method method) {
    cattr_attr_params p = cattr_attr_default_params(method);
    if (method == CATTR_METHOD_GRADIENT_SHAP) {
        p.n_samples = n;
    } else {
        p.nt_type = CATTR_NT_SMOOTHGRAD;
        p.nt_samples = n;
    }
    p.stdevs = 0.1;
    return profiled_copies(m, x, &p, 0);
}

/* A layer method with n_steps steps on layer conv2 (one chunk). */
static int profiled_layer(const cattr_model *m, const cattr_tensor *x, int n_steps, cattr_method method) {
    cattr_attr_params p = cattr_attr_default_params(method);
    p.n_steps = n_steps;
    p.layer = "conv2";
    return profiled_copies(m, x, &p, 0);
}

/* Occlusion with 2x2 windows at `stride` (stride 1: 49 windows, 2: 16), in one pass. */
static int profiled_occlusion(const cattr_model *m, const cattr_tensor *x, int64_t stride) {
    cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_OCCLUSION);
    p.sliding_window_ndim[0] = p.strides_ndim[0] = 3;
    p.sliding_window[0][0] = p.strides[0][0] = 1;
    p.sliding_window[0][1] = p.sliding_window[0][2] = 2;
    p.strides[0][1] = p.strides[0][2] = stride;
    return profiled_copies(m, x, &p, 0);
}

/* Threads recording at once: each its own tid, no event lost. */
#define STRESS_THREADS 4
#define STRESS_EVENTS 5000
static void *stress(void *arg) {
    int k = (int)(intptr_t)arg;
    char node[64];
    for (int i = 0; i < STRESS_EVENTS; i++) {
        snprintf(node, sizeof node, "thread%d/node%d", k, i);
        uint64_t t = cx_prof_now();
        cx_prof_op("cpu", i % 2 ? "Add" : "Mul", node, "[1]x[1]->[1]", t, t + 1);
        if (i % 10 == 0) cx_prof_copy("cpu", "in", 4, t, t + 1);
    }
    return NULL;
}

static void check_threads(const char *json) {
    CHECK(cattr_profile_begin() == CATTR_OK, "begin");
    pthread_t th[STRESS_THREADS];
    for (int k = 0; k < STRESS_THREADS; k++) pthread_create(&th[k], NULL, stress, (void *)(intptr_t)k);
    for (int k = 0; k < STRESS_THREADS; k++) pthread_join(th[k], NULL);
    CHECK(cattr_profile_count("op") == STRESS_THREADS * STRESS_EVENTS, "ops from threads: %d",
          cattr_profile_count("op"));
    CHECK(cattr_profile_count("copy") == STRESS_THREADS * STRESS_EVENTS / 10, "copies from threads: %d",
          cattr_profile_count("copy"));
    CHECK(cattr_profile_end(json, NULL) == CATTR_OK, "end");
    cJSON *doc = load_trace(json);
    if (doc) {
        CHECK(count_cat(doc, "op") == STRESS_THREADS * STRESS_EVENTS, "trace ops from threads");
        /* the tids of one thread's events are all equal, and differ between threads */
        int tid_of[STRESS_THREADS], ok = 1;
        for (int k = 0; k < STRESS_THREADS; k++) tid_of[k] = -1;
        const cJSON *ev;
        cJSON_ArrayForEach(ev, cJSON_GetObjectItemCaseSensitive(doc, "traceEvents")) {
            const cJSON *node = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ev, "args"), "node");
            int k;
            if (!cJSON_IsString(node) || sscanf(node->valuestring, "thread%d/", &k) != 1 || k < 0 ||
                k >= STRESS_THREADS)
                continue;
            int tid = cJSON_GetObjectItemCaseSensitive(ev, "tid")->valueint;
            if (tid_of[k] < 0) tid_of[k] = tid;
            ok &= tid_of[k] == tid;
        }
        for (int a = 0; a < STRESS_THREADS; a++)
            for (int b = 0; b < a; b++) ok &= tid_of[a] != tid_of[b];
        CHECK(ok, "one tid per thread");
        cJSON_Delete(doc);
    }
}

int main(void) {
    cattr_model *m = NULL;
    cattr_tensor *x = NULL;
    if (cattr_model_load_onnx("models/digits/digits.onnx", &m) != CATTR_OK ||
        cattr_tensor_load_npy("models/digits/samples/digit_3.npy", &x) != CATTR_OK) {
        printf("FAIL: cannot load the digits model or sample: %s\n", cattr_last_error());
        return 1;
    }
    /* the backend under test: CATTR_TEST_DEVICE (default cpu) */
    cattr_status dst = cattr_model_set_device(m, getenv("CATTR_TEST_DEVICE"));
    if (dst == CATTR_ERR_UNSUPPORTED) { /* e.g. cuda in a build with the backend, on a machine without a GPU */
        printf("SKIP: CATTR_TEST_DEVICE: %s\n", cattr_last_error());
        cattr_model_free(m);
        cattr_tensor_free(x);
        return 77;
    }
    if (dst != CATTR_OK) {
        printf("FAIL: CATTR_TEST_DEVICE: %s\n", cattr_last_error());
        return 1;
    }
    const char *tmpdir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char json[512];
    snprintf(json, sizeof json, "%s/cattr_test_profile_%ld.json", tmpdir, (long)getpid());

    /* errors: not started */
    char *summary = (char *)1;
    CHECK(cattr_profile_end(NULL, &summary) == CATTR_ERR_INVALID_ARGUMENT && summary == NULL, "end before begin");
    CHECK(cattr_profile_count("op") == 0, "no events before the first session");

    /* IG at 8 steps, with the trace and the summary */
    counts c8 = profiled_ig(m, x, 8, false, json, &summary);
    CHECK(c8.op > 0, "op events at 8 steps: %d", c8.op);
    CHECK(c8.copy > 0, "copy events at 8 steps: %d", c8.copy);
    CHECK(c8.plan > 0, "a plan span at 8 steps: %d", c8.plan);
    CHECK(summary != NULL, "summary");
    cJSON *doc = load_trace(json);
    if (doc) {
        CHECK(count_cat(doc, "op") == c8.op, "trace op events %d, counted %d", count_cat(doc, "op"), c8.op);
        CHECK(count_cat(doc, "copy") == c8.copy, "trace copy events %d, counted %d", count_cat(doc, "copy"), c8.copy);
        CHECK(count_cat(doc, "plan") == c8.plan, "trace plan spans %d, counted %d", count_cat(doc, "plan"), c8.plan);
        CHECK(count_cat(doc, "memory") >= 1, "a memory counter event");
        /* every op kind of the trace is in the summary, and the op events carry backend, node and shapes */
        int kinds = 0, missing = 0, args_ok = 1;
        const cJSON *ev;
        cJSON_ArrayForEach(ev, cJSON_GetObjectItemCaseSensitive(doc, "traceEvents")) {
            const cJSON *cat = cJSON_GetObjectItemCaseSensitive(ev, "cat");
            const cJSON *ph = cJSON_GetObjectItemCaseSensitive(ev, "ph");
            const cJSON *args = cJSON_GetObjectItemCaseSensitive(ev, "args");
            if (cJSON_IsString(ph) && !strcmp(ph->valuestring, "C")) {
                const cJSON *pb = cJSON_GetObjectItemCaseSensitive(args, "peak_bytes");
                CHECK(cJSON_IsNumber(pb) && pb->valuedouble > 0, "memory counter has peak_bytes");
            }
            if (!cJSON_IsString(cat) || strcmp(cat->valuestring, "op")) continue;
            const cJSON *sh = cJSON_GetObjectItemCaseSensitive(args, "shapes");
            args_ok &= cJSON_IsString(cJSON_GetObjectItemCaseSensitive(args, "backend")) &&
                       cJSON_IsString(cJSON_GetObjectItemCaseSensitive(args, "node")) && cJSON_IsString(sh) &&
                       strstr(sh->valuestring, "->[") != NULL;
            const char *name = cJSON_GetObjectItemCaseSensitive(ev, "name")->valuestring;
            kinds++;
            if (summary && !strstr(summary, name) && missing++ < 3) printf("summary lacks op kind %s\n", name);
        }
        CHECK(kinds > 0 && missing == 0, "summary names every op kind (%d op events, %d missing)", kinds, missing);
        CHECK(args_ok, "op events have backend, node and shapes");
        cJSON_Delete(doc);
    }
    if (summary) {
        CHECK(strstr(summary, "plan build") && strstr(summary, "peak memory") && strstr(summary, "share"),
              "summary sections");
        printf("%s\n", summary);
    }
    free(summary);
    summary = NULL;

    /* IG at 64 steps, summary only */
    counts c64 = profiled_ig(m, x, 64, false, NULL, NULL);
    CHECK(c64.op > 0 && c64.copy > 0 && c64.plan > 0, "64 steps: op %d, copy %d, plan %d", c64.op, c64.copy, c64.plan);
    /* the eager executor records too */
    counts ce = profiled_ig(m, x, 8, true, NULL, NULL);
    CHECK(ce.op > 0 && ce.copy > 0 && ce.plan > 0, "eager: op %d, copy %d, plan %d", ce.op, ce.copy, ce.plan);
    printf("copy events: IG 8 steps %d, IG 64 steps %d (op events %d, %d; plan builds %d, %d)\n", c8.copy, c64.copy,
           c8.op, c64.op, c8.plan, c64.plan);
    /* IG runs as one graph on the backend: the inputs go up once and the attributions come down once, however many
     * steps (8 steps take one chunk, 64 two halves at once) */
    CHECK(c8.copy == c64.copy, "copies per IG call grow with the steps: %d at 8, %d at 64", c8.copy, c64.copy);
    /* FeatureAblation likewise: masks, inputs and the schedule go up once, the attributions come down once */
    int f4 = profiled_fa(m, x, 4), f64 = profiled_fa(m, x, 64);
    printf("copy events: FeatureAblation 4 features %d, 64 features %d\n", f4, f64);
    CHECK(f4 > 0 && f4 == f64, "copies per FeatureAblation call grow with the features: %d at 4, %d at 64", f4, f64);

    /* Lime: the inputs, feature ids and every sample go up once; the sampled inputs are made on the backend */
    int l8 = profiled_samples(m, x, 8, CATTR_METHOD_LIME), l64 = profiled_samples(m, x, 64, CATTR_METHOD_LIME);
    printf("copy events: Lime 8 samples %d, 64 samples %d\n", l8, l64);
    CHECK(l8 > 0 && l8 == l64, "copies per Lime call grow with the samples: %d at 8, %d at 64", l8, l64);
    /* ShapleyValueSampling: the inputs, column maps and every order's ranks go up once, the states are made there */
    int v2 = profiled_samples(m, x, 2, CATTR_METHOD_SHAPLEY_VALUE_SAMPLING);
    int v16 = profiled_samples(m, x, 16, CATTR_METHOD_SHAPLEY_VALUE_SAMPLING);
    printf("copy events: ShapleyValueSampling 2 orders %d, 16 orders %d\n", v2, v16);
    CHECK(v2 > 0 && v2 == v16, "copies per ShapleyValueSampling call grow with the orders: %d at 2, %d at 16", v2, v16);

    /* Occlusion: the inputs and coordinate maps go up once, the windows are made on the backend */
    int o4 = profiled_occlusion(m, x, 2), o1 = profiled_occlusion(m, x, 1);
    printf("copy events: Occlusion 16 windows %d, 49 windows %d\n", o4, o1);
    CHECK(o4 > 0 && o4 == o1, "copies per Occlusion call grow with the windows: %d at 16, %d at 49", o4, o1);

    /* NoiseTunnel and GradientShap: the inputs and every sample's draws go up once, the noisy inputs are made and the
     * samples summed on the backend, the attributions come down once */
    int n4 = profiled_noise(m, x, 4, CATTR_METHOD_SALIENCY), n32 = profiled_noise(m, x, 32, CATTR_METHOD_SALIENCY);
    printf("copy events: NoiseTunnel(Saliency) 4 samples %d, 32 samples %d\n", n4, n32);
    CHECK(n4 > 0 && n4 == n32, "copies per NoiseTunnel call grow with the samples: %d at 4, %d at 32", n4, n32);
    int g4 = profiled_noise(m, x, 4, CATTR_METHOD_GRADIENT_SHAP), g32 = profiled_noise(m, x, 32, CATTR_METHOD_GRADIENT_SHAP);
    printf("copy events: GradientShap 4 samples %d, 32 samples %d\n", g4, g32);
    CHECK(g4 > 0 && g4 == g32, "copies per GradientShap call grow with the samples: %d at 4, %d at 32", g4, g32);

    /* the integrated layer methods: the inputs and the schedule go up once, the path is made on the backend */
    int li8 = profiled_layer(m, x, 8, CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS);
    int li64 = profiled_layer(m, x, 64, CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS);
    printf("copy events: LayerIntegratedGradients 8 steps %d, 64 steps %d\n", li8, li64);
    CHECK(li8 > 0 && li8 == li64, "copies per LayerIntegratedGradients call grow with the steps: %d at 8, %d at 64", li8,
          li64);
    int lc8 = profiled_layer(m, x, 8, CATTR_METHOD_LAYER_CONDUCTANCE);
    int lc64 = profiled_layer(m, x, 64, CATTR_METHOD_LAYER_CONDUCTANCE);
    printf("copy events: LayerConductance 8 steps %d, 64 steps %d\n", lc8, lc64);
    CHECK(lc8 > 0 && lc8 == lc64, "copies per LayerConductance call grow with the steps: %d at 8, %d at 64", lc8, lc64);

    /* off: nothing is recorded */
    int before = cattr_profile_count(NULL);
    {
        cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_INTEGRATED_GRADIENTS);
        p.n_steps = 8;
        cattr_explainer *e = NULL;
        CHECK(cattr_explainer_new(m, &p, &e) == CATTR_OK, "IG explainer");
        int64_t tidx = 3;
        cattr_target t = {CATTR_TARGET_INDEX, 1, 0, &tidx};
        const cattr_tensor *in[1] = {x};
        cattr_tensor *a = NULL;
        if (e) CHECK(cattr_explainer_attribute(e, in, 1, NULL, &t, NULL, 0, &a, NULL) == CATTR_OK, "IG, profiler off");
        cattr_tensor_free(a);
        cattr_explainer_free(e);
    }
    CHECK(cattr_profile_count(NULL) == before, "profiler off: count %d stays %d", cattr_profile_count(NULL), before);
    CHECK(cattr_profile_end(NULL, NULL) == CATTR_ERR_INVALID_ARGUMENT, "end twice");

    /* escaping: quotes, backslashes, control bytes, invalid UTF-8 (as \u00XX), valid UTF-8 kept */
    CHECK(cattr_profile_begin() == CATTR_OK, "begin");
    uint64_t t0 = cx_prof_now();
    cx_prof_op("cpu", "Weird\"Op", "n\"o\\d\x01\x1f\x7f\xff\xc3\xa9\xe2\x82", "[1]->[1]", t0, t0 + 1500);
    cx_prof_span("plan", "plan build", t0, t0 + 10);
    cx_prof_copy("cpu", "zero", 64, t0, t0 + 5);
    cx_prof_peak("cpu", 100);
    cx_prof_peak("cpu", 50);
    cx_prof_peak("cpu", 200);
    CHECK(cattr_profile_count("op") == 1 && cattr_profile_count("plan") == 1 && cattr_profile_count("copy") == 1,
          "hook counts");
    CHECK(cattr_profile_count("memory") == 2, "a memory counter only when the peak rises: %d",
          cattr_profile_count("memory"));
    CHECK(cattr_profile_end(json, &summary) == CATTR_OK, "end with odd names");
    doc = load_trace(json);
    if (doc) {
        int found = 0;
        const cJSON *ev;
        cJSON_ArrayForEach(ev, cJSON_GetObjectItemCaseSensitive(doc, "traceEvents")) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(ev, "name");
            if (!cJSON_IsString(name) || strcmp(name->valuestring, "Weird\"Op")) continue;
            const cJSON *node = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ev, "args"), "node");
            /* \xff, \xe2 and \x82 are not valid UTF-8: read back as U+00FF, U+00E2, U+0082 */
            const char *want = "n\"o\\d\x01\x1f\x7f\xc3\xbf\xc3\xa9\xc3\xa2\xc2\x82";
            CHECK(cJSON_IsString(node) && !strcmp(node->valuestring, want), "node name escaped and read back");
            const cJSON *dur = cJSON_GetObjectItemCaseSensitive(ev, "dur");
            CHECK(cJSON_IsNumber(dur) && dur->valuedouble == 1.5, "dur in microseconds: %g", dur ? dur->valuedouble : -1);
            found++;
        }
        CHECK(found == 1, "the odd event is in the trace");
        cJSON_Delete(doc);
    }
    CHECK(summary && strstr(summary, "200 bytes"), "summary peak is the largest seen");
    free(summary);
    check_threads(json);
    unlink(json);

    /* errors: an unwritable path names the path; the profiler is stopped all the same */
    CHECK(cattr_profile_begin() == CATTR_OK, "begin");
    const char *bad = "/nonexistent-cattr-dir/trace.json";
    summary = (char *)1;
    CHECK(cattr_profile_end(bad, &summary) == CATTR_ERR_IO && summary == NULL, "unwritable path");
    CHECK(strstr(cattr_last_error(), bad) != NULL, "message names the path: %s", cattr_last_error());
    CHECK(!cx_prof_on(), "stopped after a failed write");
    CHECK(cattr_profile_end(NULL, NULL) == CATTR_ERR_INVALID_ARGUMENT, "stopped after a failed write");

    cattr_tensor_free(x);
    cattr_model_free(m);
    printf("%d checks, %d failures\n", checks, fails);
    return fails ? 1 : 0;
}
