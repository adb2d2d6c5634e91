/* test_op_table.c - every op of the IR is complete (docs/ADDING.md's checklist): for each cg_op,
 *  - a name (cg_op_names), unique;
 *  - a gradient rule in cg_rules_default exactly when cx_op_differentiable says it is differentiable;
 *  - a shape rule: a `case CG_X:` in cx_infer (src/ops/shape.c);
 *  - a cpu kernel and a reference (cpu-check) kernel: a `case CG_X:` in their dispatch files, unless the executor runs
 *    the op itself (cx_op_run_by_executor);
 *  - a cuda kernel: a `case CG_X:` in src/backend/cuda, or the op listed in cx_op_cuda_on_host (run on the host), and
 *    not both; the cuda backend's supports_op says which (checked here on the ops' lists, whether or not the build
 *    has CUDA).
 * The op identifiers are read from the enum in src/ops/op.h, in order, and must be CG_OP_COUNT of them. The
 * source files are read from the repository root (the test's working directory). */
#include "graph/autodiff.h"
#include "graph/graph.h"
#include "ops/ops.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* The concatenation of the files (NULL-terminated list); each must exist. */
static char *slurp_all(const char *const *paths) {
    size_t len = 0;
    char *all = calloc(1, 1);
    for (int k = 0; paths[k] && all; k++) {
        char *s = test_read_text(paths[k]);
        CHECK(s != NULL, "read %s", paths[k]);
        if (!s) continue;
        size_t n = strlen(s);
        char *grown = realloc(all, len + n + 2);
        if (!grown) {
            free(s);
            free(all);
            return NULL;
        }
        all = grown;
        memcpy(all + len, s, n);
        all[len + n] = '\n';
        all[len + n + 1] = '\0';
        len += n + 1;
        free(s);
    }
    return all;
}

/* Whether text holds "case ID:" (spaces allowed before the colon). */
static bool has_case(const char *text, const char *id) {
    size_t n = strlen(id);
    for (const char *p = strstr(text, "case "); p; p = strstr(p + 1, "case ")) {
        const char *q = p + 5;
        while (*q == ' ') q++;
        if (strncmp(q, id, n) != 0) continue;
        q += n;
        while (*q == ' ') q++;
        if (*q == ':') return true;
    }
    return false;
}

int main(void) {
    /* the enum's identifiers, in order */
    char *gh = test_read_text("src/ops/op.h");
    CHECK(gh != NULL, "read src/ops/op.h (run from the repository root)");
    if (!gh) return 1;
    char *start = strstr(gh, "typedef enum"), *end = start ? strstr(start, "CG_OP_COUNT") : NULL;
    CHECK(start && end, "the cg_op enum in op.h");
    if (!start || !end) return 1;
    static char ids[CG_OP_COUNT + 1][64];
    int n = 0;
    for (char *p = start; p < end && n <= CG_OP_COUNT;) {
        if (p[0] == '/' && p[1] == '*') { /* a comment */
            char *e = strstr(p + 2, "*/");
            p = e ? e + 2 : end;
            continue;
        }
        if (strncmp(p, "CG_", 3) == 0 && (p == start || !(isalnum((unsigned char)p[-1]) || p[-1] == '_'))) {
            int k = 0;
            while ((isalnum((unsigned char)p[k]) || p[k] == '_') && k < 63) k++;
            memcpy(ids[n], p, (size_t)k);
            ids[n][k] = '\0';
            n++;
            p += k;
            continue;
        }
        p++;
    }
    CHECK(n == CG_OP_COUNT, "op.h's enum holds %d ops before CG_OP_COUNT, the build %d", n, (int)CG_OP_COUNT);
    if (n != CG_OP_COUNT) return 1;

    static const char *const shape_files[] = {"src/ops/shape.c", NULL};
    static const char *const cpu_files[] = {"src/backend/cpu/cpu_backend.c", "src/backend/cpu/kernels_impl.h",
                                            "src/backend/cpu/llm_impl.h", NULL};
    static const char *const check_files[] = {"src/backend/check/check_kernels.c", "src/backend/check/check_backend.c",
                                              NULL};
    static const char *const cuda_files[] = {"src/backend/cuda/cuda_backend.cu", "src/backend/cuda/elementwise.cu",
                                             "src/backend/cuda/linear.cu", "src/backend/cuda/pool.cu",
                                             "src/backend/cuda/reduce.cu", "src/backend/cuda/index.cu",
                                             "src/backend/cuda/decoder.cu", "src/backend/cuda/cu.h", NULL};
    char *shape = slurp_all(shape_files), *cpu = slurp_all(cpu_files), *chk = slurp_all(check_files),
         *cuda = slurp_all(cuda_files);
    CHECK(shape && cpu && chk && cuda, "read the rule and kernel files");
    if (!shape || !cpu || !chk || !cuda) return 1;

    cg_rules r;
    cg_rules_default(&r);
    int n_diff = 0, n_host = 0;
    for (int op = 0; op < CG_OP_COUNT; op++) {
        const char *id = ids[op], *name = cg_op_names[op];
        CHECK(name && *name, "%s has a name", id);
        for (int k = 0; k < op && name; k++)
            CHECK(!cg_op_names[k] || strcmp(cg_op_names[k], name) != 0, "%s and %s share the name %s", id, ids[k],
                  name);
        bool diff = cx_op_differentiable((cg_op)op), exec = cx_op_run_by_executor((cg_op)op),
             host = cx_op_cuda_on_host((cg_op)op);
        n_diff += diff;
        n_host += host;
        CHECK(!diff || r.by_op[op], "%s (%s) is differentiable but has no gradient rule in cg_rules_default (or list "
              "it in cx_op_differentiable's non-differentiable ops, src/ops/optable.c)", id, name);
        CHECK(diff || !r.by_op[op], "%s (%s) has a gradient rule but cx_op_differentiable says it has none", id, name);
        CHECK(has_case(shape, id), "%s (%s) has no shape rule (a case in cx_infer, src/ops/shape.c)", id, name);
        CHECK(exec || has_case(cpu, id), "%s (%s) has no cpu kernel (a case in cpu_run_op)", id, name);
        CHECK(exec || has_case(chk, id), "%s (%s) has no cpu-check kernel (a case in check_kernels.c)", id, name);
        bool cu = has_case(cuda, id);
        CHECK(exec || cu || host, "%s (%s) has no cuda kernel and is not listed in cx_op_cuda_on_host "
              "(src/ops/optable.c): it would run on the host unnoticed", id, name);
        CHECK(!(cu && host) || op == CG_HOST_CALL, "%s (%s) has a cuda kernel but is listed in cx_op_cuda_on_host",
              id, name);
        CHECK(!(exec && host), "%s (%s) is the executor's and listed in cx_op_cuda_on_host", id, name);
    }
    CHECK(!cx_op_differentiable(CG_OP_COUNT) && !cx_op_differentiable((cg_op)-1), "ops out of range");
    printf("test_op_table: %d ops, %d differentiable, %d run on the host by the cuda backend; %d failed\n",
           n, n_diff, n_host, g_failures);
    free(gh);
    free(shape);
    free(cpu);
    free(chk);
    free(cuda);
    return g_failures ? 1 : 0;
}
