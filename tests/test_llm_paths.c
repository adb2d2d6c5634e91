/* test_llm_paths.c - the language-model fast paths agree with the plain ones on the golden qwen3-tiny checkpoint:
 * FeatureAblation with the prompt prefix computed once = every ablated sequence in full = one forward per sequence;
 * LayerIG over several target tokens in one batched pass = one call per target token (Captum's form, teacher
 * forcing); precision "high" (bfloat16 GEMM) stays within a few per cent of "highest". Skips (77) without the golden
 * data (CATTR_GOLDEN). */
#include "test_util.h"

#include "attr/llm_internal.h"
#include "cattr.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static double max_abs(const double *a, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
    return m;
}

static double max_diff(const double *a, const double *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(a[i] - b[i]));
    return m;
}

/* The default activation budget's cap grows with the model's width (products need as many rows at any width): the
 * floor at Qwen3-0.6B's shapes, 3584 positions of Qwen3-8B's forward pass there; never above a quarter of what is
 * available. */
static void test_default_budget(void) {
    cx_hf_config q06 = {0}, q8 = {0};
    q06.hidden_size = 1024, q06.intermediate_size = 3072, q06.num_attention_heads = 16, q06.num_key_value_heads = 8,
    q06.head_dim = 128;
    q8.hidden_size = 4096, q8.intermediate_size = 12288, q8.num_attention_heads = 32, q8.num_key_value_heads = 8,
    q8.head_dim = 128;
    size_t quarter = cx_avail_memory() / 4, b06 = cx_llm_default_budget(&q06), b8 = cx_llm_default_budget(&q8);
    size_t cap8 = (size_t)2 * (3 * 4096 + 3 * 12288 + (32 + 2 * 8) * 128) * sizeof(double) * LLM_CAP_POSITIONS;
    CHECK(b06 == (quarter < LLM_CAP_FLOOR ? quarter : LLM_CAP_FLOOR), "0.6B shapes: budget %zu, quarter %zu", b06,
          quarter);
    CHECK(b8 == (quarter < cap8 ? quarter : cap8) && cap8 > ((size_t)2900 << 20),
          "8B shapes: budget %zu, quarter %zu, cap %zu", b8, quarter, cap8);
    CHECK(cx_llm_default_budget(NULL) == b06, "no model: the floor's budget");
}

int main(void) {
    test_default_budget();
    const char *golden = getenv("CATTR_GOLDEN") ? getenv("CATTR_GOLDEN") : "../shared/golden";
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/llm/qwen3-tiny", golden);
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        printf("SKIP: %s is absent (set CATTR_GOLDEN)\n", dir);
        return g_failures ? 1 : 77; /* the budget's check ran */
    }
    cattr_llm *m = NULL;
    CHECK(cattr_llm_load(dir, &m) == CATTR_OK, "load: %s", cattr_last_error());
    if (!m) return 1;
    { /* decoding a sequence gives whole characters back (an emoji spans several byte-level tokens) */
        const char *text = "Caf\xc3\xa9 \xf0\x9f\x98\x80 ok";
        int64_t *ids = NULL, n = 0;
        char *back = NULL;
        CHECK(cattr_llm_encode(m, text, &ids, &n) == CATTR_OK && n > 0, "encode");
        CHECK(ids && cattr_llm_decode(m, ids, n, 0, &back) == CATTR_OK && back && !strcmp(back, text),
              "decode gives '%s'", back ? back : "(none)");
        free(back);
        free(ids);
        back = (char *)"not written";
        CHECK(cattr_llm_decode(m, NULL, -1, 0, &back) == CATTR_ERR_INVALID_ARGUMENT && !back, "n < 0 refused");
    }
    { /* module paths: the embedding is its gather, not the output head tied to its weight */
        const cattr_model *mm = NULL;
        const char *v = NULL;
        CHECK(cattr_llm_model(m, &mm) == CATTR_OK && mm, "cattr_llm_model");
        CHECK(mm && cattr_model_resolve_value(mm, "model.embed_tokens", &v) == CATTR_OK && !strcmp(v, "hidden.embed"),
              "model.embed_tokens resolves to '%s'", v ? v : "(none)");
    }
    enum { T = 40, N = 3 };
    int64_t prompt[T], tg[N] = {7, 9, 13};
    for (int i = 0; i < T; i++) prompt[i] = (i * 37) % 200 + 3;
    cattr_llm_call all = cattr_llm_call_make(prompt, T, tg, N);

    /* FeatureAblation: prefix reuse (one ragged pass at this length), full sequences, one forward per sequence, and
     * prefix reuse in passes of at most 4 sequences' positions (several ragged passes) */
    double seq[4][T], tok[4][N * T], lp[4][N];
    for (int v = 0; v < 4; v++) {
        cattr_attr_params p = cattr_attr_default_params(CATTR_METHOD_FEATURE_ABLATION);
        p.no_prefix_cache = v == 1 || v == 2;
        p.perturbations_per_eval = v == 2 ? 1 : v == 3 ? 4 : 0;
        CHECK(cattr_llm_attribute(m, &p, &all, seq[v], tok[v], lp[v], NULL) == CATTR_OK, "FA %d: %s", v,
              cattr_last_error());
    }
    double scale = max_abs(tok[1], N * T);
    printf("FeatureAblation: prefix vs full %.2e, one-per-sequence vs full %.2e, prefix in small passes vs full %.2e "
           "(max |attr| %.3f)\n", max_diff(tok[0], tok[1], N * T), max_diff(tok[2], tok[1], N * T),
           max_diff(tok[3], tok[1], N * T), scale);
    CHECK(scale > 0, "all-zero attributions");
    /* an attribution is a difference of two float32 log-probabilities: a few ulps of their size is the resolution
     * (other batch shapes round the GEMMs differently) */
    double tol = 8 * max_abs(lp[1], N) * 0x1p-23;
    CHECK(max_diff(tok[0], tok[1], N * T) <= tol, "prefix reuse changed the attributions (tolerance %.2e)", tol);
    CHECK(max_diff(tok[2], tok[1], N * T) <= tol, "one forward per sequence changed them (tolerance %.2e)", tol);
    CHECK(max_diff(tok[3], tok[1], N * T) <= tol, "prefix reuse in several passes changed them (tolerance %.2e)", tol);
    CHECK(max_diff(lp[0], lp[1], N) <= tol, "target log-probabilities differ");

    /* LayerIG: three targets in one pass vs one call per target token with the earlier targets appended */
    cattr_attr_params ig = cattr_attr_default_params(CATTR_METHOD_LAYER_INTEGRATED_GRADIENTS);
    ig.n_steps = 16;
    double s_all[T], t_all[N * T], d_all[N], lp_all[N];
    CHECK(cattr_llm_attribute(m, &ig, &all, s_all, t_all, lp_all, d_all) == CATTR_OK, "IG: %s",
          cattr_last_error());
    { /* the token sums are made on the backend: what comes down is far less than the embeddings' attributions */
        char *summary = NULL;
        double s_p[T], t_p[N * T], d_p[N], lp_p[N];
        CHECK(cattr_profile_begin() == CATTR_OK, "profile begin");
        CHECK(cattr_llm_attribute(m, &ig, &all, s_p, t_p, lp_p, d_p) == CATTR_OK, "IG profiled: %s", cattr_last_error());
        CHECK(cattr_profile_end(NULL, &summary) == CATTR_OK && summary, "profile end");
        const char *line = summary ? strstr(summary, "\nout ") : NULL;
        unsigned long long n_out = 0, bytes = 0;
        double ms = 0;
        CHECK(line && sscanf(line, " out %llu %lf %llu", &n_out, &ms, &bytes) == 3, "the summary's copy-out line");
        int64_t full = (int64_t)N * (T + N - 1) * 64 * (int64_t)sizeof(float); /* [N, L, hidden 64] */
        printf("LayerIG over %d targets: %llu downloads, %llu bytes (the embeddings' attributions: %lld bytes)\n", N,
               n_out, bytes, (long long)full);
        CHECK(bytes > 0 && (int64_t)bytes < full / 8, "%llu bytes came down: the token sums were not made on the backend",
              bytes);
        CHECK(max_diff(t_p, t_all, N * T) == 0, "the same call gave other token attributions");
        free(summary);
    }
    /* row k of a call over targets 0..k scores sequences of length T + k (no tokens after the scored position),
     * row k of the call over all N targets sequences of length T + N - 1: causality makes them equal */
    double worst = 0, mag = max_abs(t_all, N * T);
    for (int k = 0; k < N; k++) {
        double s1[T], t1[N * T], d1[N], lp1[N];
        cattr_llm_call ck = cattr_llm_call_make(prompt, T, tg, k + 1);
        CHECK(cattr_llm_attribute(m, &ig, &ck, s1, t1, lp1, d1) == CATTR_OK, "IG k=%d: %s", k,
              cattr_last_error());
        worst = fmax(worst, max_diff(t1 + k * T, t_all + k * T, T));
        CHECK(fabs(d1[k] - d_all[k]) <= 1e-4 + 1e-4 * fabs(d1[k]), "delta of target %d: %g vs %g", k, d1[k], d_all[k]);
        CHECK(fabs(lp1[k] - lp_all[k]) <= 1e-5, "log-prob of target %d: %g vs %g", k, lp1[k], lp_all[k]);
    }
    { /* one LayerIG call split into parts (16 steps of 3 targets in chunks of 3 steps: 9 rows), combined: the
       * numbers of the unsplit call with the same chunks, bit for bit */
        cattr_attr_params igc = ig;
        igc.internal_batch_size = 3 * N;
        double s_ref[T], t_ref[N * T], d_ref[N], lp_ref[N];
        CHECK(cattr_llm_attribute(m, &igc, &all, s_ref, t_ref, lp_ref, d_ref) == CATTR_OK, "IG in chunks: %s",
              cattr_last_error());
        for (int P = 1; P <= 4; P++) {
            void *blobs[4] = {0};
            size_t lens[4] = {0};
            for (int k = 0; k < P; k++)
                CHECK(cattr_llm_attribute_part(m, &igc, &all, k, P, &blobs[k], &lens[k]) == CATTR_OK, "part %d of %d: %s",
                      k, P, cattr_last_error());
            double s2[T], t2[N * T], d2[N], lp2[N];
            CHECK(cattr_llm_combine(m, &igc, &all, (const void *const *)blobs, lens, P, s2, t2, lp2, d2) == CATTR_OK,
                  "combine %d: %s", P, cattr_last_error());
            CHECK(!memcmp(s2, s_ref, sizeof s2) && !memcmp(t2, t_ref, sizeof t2) && !memcmp(d2, d_ref, sizeof d2) &&
                      !memcmp(lp2, lp_ref, sizeof lp2),
                  "%d parts: not the unsplit call's numbers (seq %.2e)", P, max_diff(s2, s_ref, T));
            for (int k = 0; k < P; k++) free(blobs[k]);
        }
        cattr_attr_params fa = cattr_attr_default_params(CATTR_METHOD_FEATURE_ABLATION);
        void *b = NULL;
        size_t bl = 0;
        CHECK(cattr_llm_attribute_part(m, &fa, &all, 0, 2, &b, &bl) == CATTR_ERR_UNSUPPORTED && !b &&
                  strstr(cattr_last_error(), "perturbations_per_eval"),
              "an FA part with the prefix passes refused");
        /* the presence-model methods (FeatureAblation with perturbations_per_eval, ShapleyValueSampling, Lime,
         * KernelShap): 1-3 parts give the unsplit call's numbers, bit for bit */
        cattr_method ms[4] = {CATTR_METHOD_FEATURE_ABLATION, CATTR_METHOD_SHAPLEY_VALUE_SAMPLING, CATTR_METHOD_LIME,
                              CATTR_METHOD_KERNEL_SHAP};
        for (int q = 0; q < 4; q++) {
            cattr_attr_params pp = cattr_attr_default_params(ms[q]);
            pp.perturbations_per_eval = q == 0 ? 2 : 3;
            pp.n_samples = ms[q] == CATTR_METHOD_SHAPLEY_VALUE_SAMPLING ? 2 : 16;
            double s_r[T], t_r[N * T], lp_r[N];
            CHECK(cattr_llm_attribute(m, &pp, &all, s_r, t_r, lp_r, NULL) == CATTR_OK, "%s: %s",
                  cattr_method_name(ms[q]), cattr_last_error());
            for (int P = 1; P <= 3; P++) {
                void *blobs[3] = {0};
                size_t lens[3] = {0};
                for (int k = 0; k < P; k++)
                    CHECK(cattr_llm_attribute_part(m, &pp, &all, k, P, &blobs[k], &lens[k]) == CATTR_OK,
                          "%s: part %d of %d: %s", cattr_method_name(ms[q]), k, P, cattr_last_error());
                double s2[T], t2[N * T], lp2[N];
                CHECK(cattr_llm_combine(m, &pp, &all, (const void *const *)blobs, lens, P, s2, t2, lp2, NULL) == CATTR_OK,
                      "%s: combine %d: %s", cattr_method_name(ms[q]), P, cattr_last_error());
                CHECK(!memcmp(s2, s_r, sizeof s2) && !memcmp(t2, t_r, sizeof t2) && !memcmp(lp2, lp_r, sizeof lp2),
                      "%s, %d parts: not the unsplit call's numbers (seq %.2e)", cattr_method_name(ms[q]), P,
                      max_diff(s2, s_r, T));
                for (int k = 0; k < P; k++) free(blobs[k]);
            }
        }
    }
    /* the target log-probabilities of an IG call come from its convergence delta's forward pass at the inputs;
     * without a delta from a forward pass of their own; FeatureAblation's from its unablated row: all the same */
    double lp_nd[N], s_nd[T], t_nd[N * T];
    CHECK(cattr_llm_attribute(m, &ig, &all, s_nd, t_nd, lp_nd, NULL) == CATTR_OK, "IG without delta: %s",
          cattr_last_error());
    CHECK(max_diff(lp_all, lp_nd, N) <= 1e-5, "IG log-probs with and without the delta differ by %.2e",
          max_diff(lp_all, lp_nd, N));
    CHECK(max_diff(lp_all, lp[1], N) <= 1e-5, "IG and FeatureAblation log-probs differ by %.2e",
          max_diff(lp_all, lp[1], N));
    printf("LayerIG: targets scored at their own length vs in one batch %.2e (max |attr| %.3f)\n", worst, mag);
    CHECK(worst <= 1e-5 * mag + 1e-6, "trailing target tokens changed the attributions");
    for (int k = 0; k < N; k++) CHECK(isfinite(d_all[k]) && fabs(d_all[k]) < 0.5, "delta %d = %g", k, d_all[k]);

    /* the checkpoint as a model for the explainer: LayerIG over the token ids at the embedding output, baseline ids
     * 0 (the embedding of token 0, as baseline_token 0), target token 0: per token the sum over the embedding of the
     * explainer's attribution equals cattr_llm_attribute's */
    {
        const cattr_model *lm = NULL;
        CHECK(cattr_llm_model(m, &lm) == CATTR_OK, "cattr_llm_model: %s", cattr_last_error());
        cattr_attr_params p = ig;
        p.layer = "hidden.embed";
        cattr_explainer *ex = NULL;
        CHECK(lm && cattr_explainer_new(lm, &p, &ex) == CATTR_OK, "explainer on the checkpoint: %s", cattr_last_error());
        int64_t sh[2] = {1, T}, zero = 0, tix[2] = {0, tg[0]};
        cattr_tensor *ids = NULL, *bl = NULL, *a = NULL;
        CHECK(cattr_tensor_new(CATTR_INT64, 2, sh, &ids) == CATTR_OK && cattr_tensor_new(CATTR_INT64, 0, &zero, &bl) == CATTR_OK,
              "tensors");
        if (ids) memcpy(cattr_tensor_data(ids), prompt, sizeof prompt);
        if (bl) *(int64_t *)cattr_tensor_data(bl) = 0;
        const cattr_tensor *in[1] = {ids}, *bls[1] = {bl};
        cattr_target t = {CATTR_TARGET_INDEX, 2, 0, tix};
        if (ex && ids && bl)
            CHECK(cattr_explainer_attribute(ex, in, 1, bls, &t, NULL, 0, &a, NULL) == CATTR_OK, "LayerIG on ids: %s",
                  cattr_last_error());
        cattr_llm_call c0 = cattr_llm_call_make(prompt, T, tg, 1);
        c0.baseline_token = 0;
        double s0[T], t0[T];
        CHECK(cattr_llm_attribute(m, &ig, &c0, s0, t0, NULL, NULL) == CATTR_OK, "IG baseline 0: %s", cattr_last_error());
        if (a) {
            int64_t H = cattr_tensor_numel(a) / T;
            const float *av = cattr_tensor_data(a);
            double per[T];
            for (int i = 0; i < T; i++) {
                per[i] = 0;
                for (int64_t h = 0; h < H; h++) per[i] += av[i * H + h];
            }
            double d = max_diff(per, s0, T), sc = max_abs(s0, T);
            printf("cattr_llm_model: explainer LayerIG on token ids vs cattr_llm_attribute %.2e (max |attr| %.3f)\n", d, sc);
            CHECK(sc > 0 && d <= 1e-4 * sc + 1e-6, "the explainer on the checkpoint differs from cattr_llm_attribute");
        }
        /* a float-only method refuses ids, naming the layer methods */
        cattr_attr_params sp = cattr_attr_default_params(CATTR_METHOD_SALIENCY);
        cattr_explainer *es = NULL;
        cattr_tensor *as = NULL;
        CHECK(lm && cattr_explainer_new(lm, &sp, &es) == CATTR_OK, "saliency explainer");
        if (es && ids)
            CHECK(cattr_explainer_attribute(es, in, 1, NULL, &t, NULL, 0, &as, NULL) == CATTR_ERR_DTYPE &&
                      strstr(cattr_last_error(), "LayerIntegratedGradients"),
                  "Saliency on ids must be refused naming the layer methods (%s)", cattr_last_error());
        cattr_tensor_free(as);
        cattr_explainer_free(es);
        cattr_tensor_free(a);
        cattr_tensor_free(ids);
        cattr_tensor_free(bl);
        cattr_explainer_free(ex);
    }

    /* precision high */
    cattr_attr_params hi = ig;
    hi.precision = CATTR_PRECISION_HIGH;
    double s_hi[T], t_hi[N * T], d_hi[N], lp_hi[N];
    cattr_status st = cattr_llm_attribute(m, &hi, &all, s_hi, t_hi, lp_hi, d_hi);
    if (st == CATTR_ERR_UNSUPPORTED) {
        printf("precision high: not available on this CPU (%s)\n", cattr_last_error());
    } else {
        CHECK(st == CATTR_OK, "high: %s", cattr_last_error());
        double e = max_diff(s_hi, s_all, T), sm = max_abs(s_all, T);
        printf("precision high vs highest: seq_attr error %.2e of %.3f, log-prob error %.2e\n", e, sm,
               max_diff(lp_hi, lp_all, N));
        CHECK(e <= 0.05 * sm, "bfloat16 error above 5%% of the attributions");
        CHECK(max_diff(lp_hi, lp_all, N) <= 0.05, "bfloat16 log-prob error above 0.05");
        hi.dtype = CATTR_FLOAT64;
        CHECK(cattr_llm_attribute(m, &hi, &all, s_hi, t_hi, lp_hi, d_hi) == CATTR_ERR_INVALID_ARGUMENT,
              "high with float64 must be refused");
    }
    cattr_llm_free(m);
    return g_failures ? 1 : 0;
}
