/* test_quadrature.c - checks cattr_quadrature_* against Captum: names and errors, structural properties, the
 * committed reference fixture (tests/data/quadrature/reference.txt, made by tests/data/make_quadrature_reference.py
 * from numpy and torch; CATTR_QUAD_REFERENCE overrides the path) and, when present, the golden Captum cases
 * (${CATTR_GOLDEN:-../shared/golden}/captum/<case>/case.json with a "quadrature" entry: tensors "quad.alphas" and the
 * float32-rounded "quad.step_sizes"). Alphas must match within 1 ulp (of the double; riemann alphas are float32-valued,
 * so for them this means bit-exact), step sizes within 1 ulp as doubles (fixture) and after float32 rounding within
 * 1 ulp (float); the summary says how many were bit-exact. Run from the repository root. Exit 0 on success, 1 on
 * any failure (each failure is printed). */
#define _POSIX_C_SOURCE 200809L
#include "cattr.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_failures;

#define FAIL(...)                                                                                                      \
    do {                                                                                                               \
        g_failures++;                                                                                                  \
        printf("FAIL: " __VA_ARGS__);                                                                                  \
        printf("\n");                                                                                                  \
    } while (0)

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) FAIL(__VA_ARGS__);                                                                                \
    } while (0)

/* ---- ulp distances ------------------------------------------------------------------------------------------ */

/* Distance in units in the last place between two finite doubles (0: bit-identical, also for +0/-0). */
static uint64_t ulp_diff_f64(double a, double b) {
    if (a == b) return 0;
    int64_t ia, ib;
    memcpy(&ia, &a, sizeof ia);
    memcpy(&ib, &b, sizeof ib);
    if (ia < 0) ia = INT64_MIN - ia; /* map to a monotonic integer line */
    if (ib < 0) ib = INT64_MIN - ib;
    return ia > ib ? (uint64_t)ia - (uint64_t)ib : (uint64_t)ib - (uint64_t)ia;
}

static uint32_t ulp_diff_f32(float a, float b) {
    if (a == b) return 0;
    int32_t ia, ib;
    memcpy(&ia, &a, sizeof ia);
    memcpy(&ib, &b, sizeof ib);
    if (ia < 0) ia = INT32_MIN - ia;
    if (ib < 0) ib = INT32_MIN - ib;
    return ia > ib ? (uint32_t)ia - (uint32_t)ib : (uint32_t)ib - (uint32_t)ia;
}

/* Tallies of one comparison family. */
typedef struct {
    long alphas, alphas_exact, steps, steps_exact, steps32_exact;
} tally;

/* Compares one rule/n against reference alphas and step sizes. `ref_steps_are_f32`: the reference steps are
 * already float32-rounded (golden data), so only the rounded values are compared. */
static void compare_points(const char *what, cattr_quadrature q, int n, const double *ref_alphas,
                           const double *ref_steps, int ref_steps_are_f32, tally *t) {
    double *a = malloc(sizeof(double) * (size_t)n), *s = malloc(sizeof(double) * (size_t)n);
    if (!a || !s) {
        FAIL("%s: out of memory", what);
        free(a);
        free(s);
        return;
    }
    cattr_status st = cattr_quadrature_points(q, n, a, s);
    if (st != CATTR_OK) {
        FAIL("%s: cattr_quadrature_points(%s, %d) failed: %s", what, cattr_quadrature_name(q), n, cattr_last_error());
        free(a);
        free(s);
        return;
    }
    int reported = 0;
    for (int i = 0; i < n; i++) {
        uint64_t da = ulp_diff_f64(a[i], ref_alphas[i]);
        t->alphas++;
        t->alphas_exact += da == 0;
        if (da > 1 && reported++ < 5)
            FAIL("%s: %s n=%d alpha[%d] = %a, reference %a (%" PRIu64 " ulp)", what, cattr_quadrature_name(q), n, i,
                 a[i], ref_alphas[i], da);
        if (!ref_steps) continue;
        t->steps++;
        if (!ref_steps_are_f32) {
            uint64_t dd = ulp_diff_f64(s[i], ref_steps[i]);
            t->steps_exact += dd == 0;
            if (dd > 1 && reported++ < 5)
                FAIL("%s: %s n=%d step[%d] = %a, reference %a (%" PRIu64 " ulp)", what, cattr_quadrature_name(q), n, i,
                     s[i], ref_steps[i], dd);
        }
        float mine = (float)s[i], ref = (float)ref_steps[i];
        if (ref_steps_are_f32 && (double)ref != ref_steps[i]) {
            FAIL("%s: %s n=%d reference step[%d] = %a is not float32-valued", what, cattr_quadrature_name(q), n, i,
                 ref_steps[i]);
            continue;
        }
        uint32_t ds = ulp_diff_f32(mine, ref);
        t->steps32_exact += ds == 0;
        if (ds > 1 && reported++ < 5)
            FAIL("%s: %s n=%d float32 step[%d] = %a, reference %a (%" PRIu32 " ulp)", what, cattr_quadrature_name(q), n,
                 i, (double)mine, (double)ref, ds);
    }
    free(a);
    free(s);
}

/* ---- names and errors --------------------------------------------------------------------------------------- */

static void test_names(void) {
    static const struct {
        const char *name;
        int q;
    } cases[] = {
        {"riemann_left", CATTR_QUAD_RIEMANN_LEFT},       {"riemann_right", CATTR_QUAD_RIEMANN_RIGHT},
        {"riemann_middle", CATTR_QUAD_RIEMANN_MIDDLE},   {"riemann_trapezoid", CATTR_QUAD_RIEMANN_TRAPEZOID},
        {"gausslegendre", CATTR_QUAD_GAUSS_LEGENDRE},    {"riemann-left", CATTR_QUAD_RIEMANN_LEFT},
        {"riemann-trapezoid", CATTR_QUAD_RIEMANN_TRAPEZOID}, {"gauss-legendre", CATTR_QUAD_GAUSS_LEGENDRE},
        {"gauss_legendre", CATTR_QUAD_GAUSS_LEGENDRE},   {"riemann", -1},
        {"riemann_left_", -1},                           {"riemann_lef", -1},
        {"", -1},                                        {"Riemann_left", -1},
        {"trapezoid", -1},                               {"gausslegendre ", -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int got = cattr_quadrature_from_name(cases[i].name);
        CHECK(got == cases[i].q, "cattr_quadrature_from_name(\"%s\") = %d, expected %d", cases[i].name, got,
              cases[i].q);
    }
    CHECK(cattr_quadrature_from_name(NULL) == -1, "cattr_quadrature_from_name(NULL) should be -1");
    for (int q = CATTR_QUAD_RIEMANN_LEFT; q <= CATTR_QUAD_GAUSS_LEGENDRE; q++) {
        const char *name = cattr_quadrature_name((cattr_quadrature)q);
        CHECK(name && cattr_quadrature_from_name(name) == q, "name round trip failed for %d (\"%s\")", q,
              name ? name : "(null)");
    }
    CHECK(strcmp(cattr_quadrature_name((cattr_quadrature)99), "?") == 0, "name of an invalid rule should be \"?\"");
}

static void expect_invalid(cattr_quadrature q, int n) {
    double a[4] = {0}, s[4] = {0};
    cattr_status st = cattr_quadrature_points(q, n, a, s);
    CHECK(st == CATTR_ERR_INVALID_ARGUMENT, "cattr_quadrature_points(%d, %d) returned %s, expected invalid argument",
          (int)q, n, cattr_status_string(st));
    CHECK(cattr_last_error()[0] != '\0', "cattr_quadrature_points(%d, %d) set no error message", (int)q, n);
}

static void test_errors(void) {
    for (int q = CATTR_QUAD_RIEMANN_LEFT; q <= CATTR_QUAD_RIEMANN_TRAPEZOID; q++) {
        expect_invalid((cattr_quadrature)q, 1);
        expect_invalid((cattr_quadrature)q, 0);
        expect_invalid((cattr_quadrature)q, -3);
    }
    expect_invalid(CATTR_QUAD_GAUSS_LEGENDRE, 0);
    expect_invalid(CATTR_QUAD_GAUSS_LEGENDRE, -1);
    expect_invalid((cattr_quadrature)42, 10);
    expect_invalid((cattr_quadrature)-1, 10);
}

/* ---- structural properties ---------------------------------------------------------------------------------- */

static void test_properties(void) {
    enum { NMAX = 300 };
    static double a[NMAX], s[NMAX], a2[NMAX], s2[NMAX];
    for (int q = CATTR_QUAD_RIEMANN_LEFT; q <= CATTR_QUAD_GAUSS_LEGENDRE; q++) {
        const char *name = cattr_quadrature_name((cattr_quadrature)q);
        const int gl = q == CATTR_QUAD_GAUSS_LEGENDRE;
        for (int n = gl ? 1 : 2; n <= NMAX; n++) {
            if (cattr_quadrature_points((cattr_quadrature)q, n, a, s) != CATTR_OK) {
                FAIL("%s n=%d: %s", name, n, cattr_last_error());
                continue;
            }
            double sum = 0.0;
            for (int i = 0; i < n; i++) {
                sum += s[i];
                CHECK(s[i] > 0.0 && s[i] <= 1.0, "%s n=%d: step[%d] = %g out of (0, 1]", name, n, i, s[i]);
                CHECK(gl ? (a[i] > 0.0 && a[i] < 1.0) : (a[i] >= 0.0 && a[i] <= 1.0),
                      "%s n=%d: alpha[%d] = %.17g out of range", name, n, i, a[i]);
                CHECK(i == 0 || a[i] > a[i - 1], "%s n=%d: alphas not increasing at %d", name, n, i);
                CHECK(gl || (double)(float)a[i] == a[i], "%s n=%d: alpha[%d] = %a is not float32-valued", name, n, i,
                      a[i]);
            }
            /* Captum's trapezoid keeps the step 1/n and halves the two ends, so its steps sum to 1 - 1/n. */
            const double expect = q == CATTR_QUAD_RIEMANN_TRAPEZOID ? 1.0 - 1.0 / n : 1.0;
            CHECK(fabs(sum - expect) < 1e-12, "%s n=%d: step sizes sum to %.17g, expected %.17g", name, n, sum, expect);
            if (q == CATTR_QUAD_RIEMANN_LEFT) CHECK(a[0] == 0.0, "riemann_left n=%d: first alpha %g", n, a[0]);
            if (q == CATTR_QUAD_RIEMANN_RIGHT) CHECK(a[n - 1] == 1.0, "riemann_right n=%d: last alpha %g", n, a[n - 1]);
            if (q == CATTR_QUAD_RIEMANN_TRAPEZOID)
                CHECK(a[0] == 0.0 && a[n - 1] == 1.0 && s[0] == 0.5 / n && s[n - 1] == 0.5 / n,
                      "riemann_trapezoid n=%d: wrong end points", n);
            if (gl)
                for (int i = 0; i < n; i++) {
                    CHECK(s[i] == s[n - 1 - i], "gausslegendre n=%d: weights not symmetric at %d", n, i);
                    CHECK(fabs(a[i] + a[n - 1 - i] - 1.0) < 1e-15, "gausslegendre n=%d: nodes not symmetric at %d", n,
                          i);
                }
            /* Either output may be NULL; the other one is unchanged. */
            CHECK(cattr_quadrature_points((cattr_quadrature)q, n, a2, NULL) == CATTR_OK &&
                      cattr_quadrature_points((cattr_quadrature)q, n, NULL, s2) == CATTR_OK &&
                      memcmp(a, a2, sizeof(double) * (size_t)n) == 0 && memcmp(s, s2, sizeof(double) * (size_t)n) == 0,
                  "%s n=%d: results differ when one output is NULL", name, n);
        }
    }
    /* Gauss-Legendre integrates polynomials of degree 2n-1 exactly: check x^k on [0, 1] for a few n. */
    const int ns[] = {1, 2, 3, 7, 16, 50};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        int n = ns[k];
        if (cattr_quadrature_points(CATTR_QUAD_GAUSS_LEGENDRE, n, a, s) != CATTR_OK) continue;
        for (int d = 0; d <= 2 * n - 1 && d <= 30; d++) {
            double acc = 0.0;
            for (int i = 0; i < n; i++) acc += s[i] * pow(a[i], d);
            CHECK(fabs(acc - 1.0 / (d + 1)) < 1e-13, "gausslegendre n=%d: integral of x^%d = %.17g, expected %.17g", n,
                  d, acc, 1.0 / (d + 1));
        }
    }
}

/* ---- reference fixture -------------------------------------------------------------------------------------- */

static void test_fixture(void) {
    const char *path = getenv("CATTR_QUAD_REFERENCE");
    if (!path || !*path) path = "tests/data/quadrature/reference.txt";
    FILE *f = fopen(path, "r");
    if (!f) {
        FAIL("cannot open the quadrature reference %s (run from the repository root)", path);
        return;
    }
    tally t[5] = {{0}};
    int blocks = 0, nmin[5], nmax[5];
    for (int q = 0; q < 5; q++) nmin[q] = 1 << 30, nmax[q] = 0;
    char line[512];
    double *ra = NULL, *rs = NULL;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        char rule[64];
        int n;
        if (sscanf(line, "%63s %d", rule, &n) != 2 || n < 1) {
            FAIL("%s: bad block header: %s", path, line);
            break;
        }
        int q = cattr_quadrature_from_name(rule);
        if (q < 0) {
            FAIL("%s: unknown rule '%s'", path, rule);
            break;
        }
        double *na = realloc(ra, sizeof(double) * (size_t)n), *ns = na ? realloc(rs, sizeof(double) * (size_t)n) : NULL;
        if (na) ra = na;
        if (ns) rs = ns;
        if (!na || !ns) {
            FAIL("out of memory");
            break;
        }
        int ok = 1;
        for (int i = 0; i < n && ok; i++) {
            char *end;
            ok = fgets(line, sizeof line, f) != NULL;
            if (!ok) break;
            ra[i] = strtod(line, &end);
            rs[i] = strtod(end, &end);
            ok = end != line;
        }
        if (!ok) {
            FAIL("%s: truncated block %s %d", path, rule, n);
            break;
        }
        compare_points("fixture", (cattr_quadrature)q, n, ra, rs, 0, &t[q]);
        blocks++;
        if (n < nmin[q]) nmin[q] = n;
        if (n > nmax[q]) nmax[q] = n;
    }
    fclose(f);
    free(ra);
    free(rs);
    CHECK(blocks > 0, "%s: no reference blocks", path);
    for (int q = 0; q < 5; q++) {
        if (!t[q].alphas) continue;
        printf("fixture %-17s n=%d..%d: alphas %ld/%ld bit-exact, steps %ld/%ld bit-exact (float32: %ld/%ld)\n",
               cattr_quadrature_name((cattr_quadrature)q), nmin[q], nmax[q], t[q].alphas_exact, t[q].alphas,
               t[q].steps_exact, t[q].steps, t[q].steps32_exact, t[q].steps);
    }
}

/* ---- golden Captum cases ------------------------------------------------------------------------------------ */

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        len += fread(buf + len, 1, cap - len - 1, f);
        if (len < cap - 1) break;
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    fclose(f);
    if (buf) buf[len] = '\0';
    return buf;
}

/* Copies a float64 1-D tensor of n elements from the set into dst; 0 on a missing or malformed tensor. */
static int get_f64(const cattr_tensor_set *set, const char *name, int n, double *dst) {
    const cattr_tensor *t = cattr_tensor_set_get(set, name);
    if (!t || cattr_tensor_numel(t) != n) return 0;
    const void *data = cattr_tensor_data_const(t);
    for (int i = 0; i < n; i++) {
        if (cattr_tensor_dtype(t) == CATTR_FLOAT64) dst[i] = ((const double *)data)[i];
        else if (cattr_tensor_dtype(t) == CATTR_FLOAT32) dst[i] = ((const float *)data)[i];
        else return 0;
    }
    return 1;
}

/* path = dir/name/file; 0 if it does not fit. */
static int case_path(char *path, size_t size, const char *dir, const char *name, const char *file) {
    int len = snprintf(path, size, "%s/%s/%s", dir, name, file);
    return len >= 0 && (size_t)len < size;
}

static void check_golden_case(const char *dir, const char *name, tally *t, int *n_cases) {
    char path[4096];
    if (!case_path(path, sizeof path, dir, name, "case.json")) {
        FAIL("golden %s: path too long", name);
        return;
    }
    char *text = read_text(path);
    if (!text) return; /* not a case directory */
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) {
        FAIL("golden %s: cannot parse case.json", name);
        return;
    }
    const cJSON *quad = cJSON_GetObjectItemCaseSensitive(root, "quadrature");
    if (!cJSON_IsObject(quad)) {
        cJSON_Delete(root);
        return;
    }
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(quad, "method");
    const cJSON *nsteps = cJSON_GetObjectItemCaseSensitive(quad, "n_steps");
    const cJSON *an = cJSON_GetObjectItemCaseSensitive(quad, "alphas");
    const cJSON *sn = cJSON_GetObjectItemCaseSensitive(quad, "step_sizes");
    int q = cJSON_IsString(method) ? cattr_quadrature_from_name(method->valuestring) : -1;
    if (q < 0 || !cJSON_IsNumber(nsteps) || nsteps->valueint < 1) {
        FAIL("golden %s: bad quadrature entry", name);
        cJSON_Delete(root);
        return;
    }
    int n = nsteps->valueint;
    const char *alpha_name = cJSON_IsString(an) ? an->valuestring : "quad.alphas";
    const char *step_name = cJSON_IsString(sn) ? sn->valuestring : "quad.step_sizes";
    cattr_tensor_set *set = NULL;
    if (!case_path(path, sizeof path, dir, name, "tensors.safetensors") ||
        cattr_tensor_set_load(path, &set) != CATTR_OK) {
        FAIL("golden %s: %s", name, cattr_last_error());
        cJSON_Delete(root);
        return;
    }
    double *ra = malloc(sizeof(double) * (size_t)n), *rs = malloc(sizeof(double) * (size_t)n);
    if (!ra || !rs) {
        FAIL("out of memory");
    } else if (!get_f64(set, alpha_name, n, ra)) {
        FAIL("golden %s: tensor %s missing or not %d floats", name, alpha_name, n);
    } else {
        int have_steps = get_f64(set, step_name, n, rs);
        char what[600];
        snprintf(what, sizeof what, "golden %s", name);
        compare_points(what, (cattr_quadrature)q, n, ra, have_steps ? rs : NULL, 1, &t[q]);
        (*n_cases)++;
    }
    free(ra);
    free(rs);
    cattr_tensor_set_free(set);
    cJSON_Delete(root);
}

static void test_golden(void) {
    const char *root = getenv("CATTR_GOLDEN");
    if (!root || !*root) root = "../shared/golden";
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/captum", root);
    DIR *d = opendir(dir);
    if (!d) {
        printf("SKIP golden quadrature: %s not found\n", dir);
        return;
    }
    tally t[5] = {{0}};
    int n_cases = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        if (ent->d_name[0] == '.') continue;
        check_golden_case(dir, ent->d_name, t, &n_cases);
    }
    closedir(d);
    printf("golden: %d cases with a quadrature\n", n_cases);
    for (int q = 0; q < 5; q++)
        if (t[q].alphas)
            printf("golden %-17s: alphas %ld/%ld bit-exact, float32 steps %ld/%ld bit-exact\n",
                   cattr_quadrature_name((cattr_quadrature)q), t[q].alphas_exact, t[q].alphas, t[q].steps32_exact,
                   t[q].steps);
}

int main(void) {
    test_names();
    test_errors();
    test_properties();
    test_fixture();
    test_golden();
    if (g_failures) {
        printf("test_quadrature: %d failure(s)\n", g_failures);
        return 1;
    }
    printf("test_quadrature: all passed\n");
    return 0;
}
