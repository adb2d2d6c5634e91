/* test_llm_context.c - cattr_llm_score_removals (context attribution's passes) against brute force on the golden
 * qwen3-tiny checkpoint: every row's kept prompt compacted and each answer token scored by a plain forward pass of its
 * own (no prefix cache, no ragged segments), for rows that keep everything, remove a middle span, the start, the end,
 * single tokens and random halves, in float32 and float64, with several rows per pass and with one row per pass; and
 * greedy generation over the prompt's kept keys and values against a full pass per generated token.
 * Skips (77) without the golden data (CATTR_GOLDEN). */
#include "test_util.h"

#include "attr/llm_internal.h"
#include "cattr.h"
#include "core/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* log p(target[q] | compacted prompt, target[0..q-1]) by one forward pass per q */
static void brute(cattr_llm *m, cattr_dtype dt, const int64_t *prompt, int64_t T, const int64_t *target, int64_t n,
                  const unsigned char *keep, double *lp) {
    int64_t *seq = malloc((size_t)(T + n) * sizeof *seq), L = 0;
    for (int64_t t = 0; t < T; t++)
        if (keep[t]) seq[L++] = prompt[t];
    for (int64_t q = 0; q < n; q++) {
        CHECK(cx_llm_forward(m, dt, seq, 1, L, target[q], &lp[q], NULL) == CATTR_OK, "brute forward: %s",
              cattr_last_error());
        seq[L++] = target[q];
    }
    free(seq);
}

/* The progress callback of a watched generation: calls[0] counts the calls, calls[1] keeps the total; at token
 * stop_at_token it sets *stop_flag (when given) */
static int stop_at_token;
static volatile int *stop_flag;
static void count_tokens(int64_t done, int64_t total, void *user) {
    int *calls = user;
    calls[0]++;
    calls[1] = (int)total;
    if (stop_flag && done == stop_at_token) *stop_flag = 1;
}

int main(void) {
    const char *golden = getenv("CATTR_GOLDEN") ? getenv("CATTR_GOLDEN") : "../shared/golden";
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/llm/qwen3-tiny", golden);
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        printf("SKIP: %s is absent (set CATTR_GOLDEN)\n", dir);
        return 77;
    }
    cattr_llm *m = NULL;
    CHECK(cattr_llm_load(dir, &m) == CATTR_OK, "load: %s", cattr_last_error());
    if (!m) return 1;
    int64_t *prompt = NULL, *target = NULL, T = 0, n = 0;
    CHECK(cattr_llm_encode(m, "Doc one: the sky is green. Doc two: the sea is loud and deep. Question: what colour "
                              "is the sky?", &prompt, &T) == CATTR_OK, "encode");
    CHECK(cattr_llm_encode(m, " The sky is green.", &target, &n) == CATTR_OK, "encode answer");
    enum { R = 12 };
    unsigned char *keep = malloc((size_t)(R * T));
    memset(keep, 1, (size_t)(R * T));
    for (int64_t t = 3; t < 9 && t < T; t++) keep[1 * T + t] = 0;  /* a middle span */
    for (int64_t t = 0; t < 4; t++) keep[2 * T + t] = 0;           /* the start */
    for (int64_t t = T - 3; t < T; t++) keep[3 * T + t] = 0;       /* the end: its last kept token starts the row */
    keep[4 * T + 0] = 0, keep[5 * T + T - 1] = 0, keep[6 * T + T / 2] = 0; /* single tokens */
    cx_rng g;
    cx_rng_init(&g, 7, 0);
    for (int r = 7; r < R; r++)
        for (int64_t t = 0; t < T; t++) keep[r * T + t] = cx_rng_uniform(&g) < 0.5;
    keep[(R - 1) * T + T - 1] = 1; /* (never the whole prompt) */
    double *want = malloc((size_t)(R * n) * sizeof *want), *got = malloc((size_t)(R * n) * sizeof *got);
    for (int d = 0; d < 2; d++) {
        cattr_dtype dt = d ? CATTR_FLOAT64 : CATTR_FLOAT32;
        cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_FEATURE_ABLATION);
        p.dtype = dt;
        for (int r = 0; r < R; r++) brute(m, dt, prompt, T, target, n, keep + r * T, want + r * n);
        for (int one = 0; one < 2; one++) {
            p.perturbations_per_eval = one; /* 1: a budget of one sequence per pass */
            p.max_memory = one ? 1 : 0;
            CHECK(cattr_llm_score_removals(m, &p, prompt, T, target, n, keep, R, got) == CATTR_OK, "score: %s",
                  cattr_last_error());
            double worst = 0, scale = 0;
            for (int64_t i = 0; i < R * n; i++) {
                worst = fmax(worst, fabs(got[i] - want[i]));
                scale = fmax(scale, fabs(want[i]));
            }
            double tol = d ? 1e-10 * fmax(1, scale) : 1e-5 * fmax(1, scale);
            CHECK(worst <= tol, "%s%s: removal scores differ from brute force by %.3g (tolerance %.3g)",
                  d ? "float64" : "float32", one ? ", one row per pass" : "", worst, tol);
        }
    }
    /* greedy generation (the prompt's keys and values kept, each step running only the generated tokens) picks the
     * tokens a full forward pass per step picks (float64: no near tie can flip) */
    {
        int64_t *gen = NULL, ng = 0, *seq = malloc((size_t)(T + 8) * sizeof *seq), L = T;
        double *lpv = malloc((size_t)cattr_llm_vocab_size(m) * sizeof *lpv);
        CHECK(cattr_llm_generate(m, CATTR_FLOAT64, prompt, T, 6, &gen, &ng) == CATTR_OK, "generate: %s",
              cattr_last_error());
        memcpy(seq, prompt, (size_t)T * sizeof *seq);
        for (int64_t k = 0; k < ng; k++) {
            CHECK(cx_llm_forward(m, CATTR_FLOAT64, seq, 1, L, -1, lpv, NULL) == CATTR_OK, "forward: %s",
                  cattr_last_error());
            int64_t best = 0;
            for (int64_t v = 1; v < cattr_llm_vocab_size(m); v++)
                if (lpv[v] > lpv[best]) best = v;
            CHECK(gen[k] == best, "generated token %lld is %lld, a full pass picks %lld", (long long)k,
                  (long long)gen[k], (long long)best);
            seq[L++] = gen[k];
        }
        CHECK(ng >= 1, "nothing generated");
        /* watched: the same tokens, a progress call per token; a cancel flag set from the third token on stops it */
        int64_t *gen2 = NULL, ng2 = 0;
        int calls[2] = {0, 0};
        volatile int stop = 0;
        cattr_attr_params gp = cattr_attr_default_params(CATTR_METHOD_FEATURE_ABLATION);
        gp.dtype = CATTR_FLOAT64;
        gp.progress = count_tokens;
        gp.progress_user = calls;
        CHECK(cattr_llm_generate_params(m, &gp, prompt, T, 6, &gen2, &ng2) == CATTR_OK && ng2 == ng &&
                  !memcmp(gen2, gen, (size_t)ng * sizeof *gen) && calls[0] == ng && calls[1] == 6,
              "watched generation: %lld tokens, %d progress calls (last total %d): %s", (long long)ng2, calls[0],
              calls[1], cattr_last_error());
        free(gen2);
        gen2 = NULL;
        calls[0] = 0;
        stop_at_token = 2, stop_flag = &stop;
        gp.cancel = &stop;
        cattr_status cs = cattr_llm_generate_params(m, &gp, prompt, T, 6, &gen2, &ng2);
        CHECK(ng >= 3 && cs == CATTR_ERR_CANCELLED && !gen2 && calls[0] == 2, "a cancelled generation: %s, %d calls",
              cattr_status_string(cs), calls[0]);
        stop_flag = NULL;
        free(gen2);
        free(gen), free(seq), free(lpv);
    }
    /* the unablated row is the plain answer's log-probabilities; a row that removes everything is refused */
    unsigned char *none = calloc((size_t)T, 1);
    cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_FEATURE_ABLATION);
    CHECK(cattr_llm_score_removals(m, &p, prompt, T, target, n, none, 1, got) == CATTR_ERR_INVALID_ARGUMENT &&
              strstr(cattr_last_error(), "removes the whole prompt"),
          "a row without tokens: %s", cattr_last_error());
    free(none);
    free(want);
    free(got);
    free(keep);
    free(prompt);
    free(target);
    cattr_llm_free(m);
    printf("test_llm_context: %d failed\n", g_failures);
    return g_failures ? 1 : 0;
}
