/* test_run.c - the plans the runner keeps (src/exec/run.h): found again for the same graph, constants, slot and
 * shapes; planned afresh when the graph changes; freed with the graph or with the constants, whichever goes first;
 * and two threads making, running and freeing graphs at once. */
#include "backend/backend.h"
#include "exec/run.h"
#include "test_util.h"

#include <pthread.h>
#include <string.h>

/* y = x + c (c a constant [3]) */
static cg_graph *small_graph(cattr_tensor **c, int *y) {
    int64_t n = 3;
    if (cattr_tensor_new(CATTR_FLOAT32, 1, &n, c) != CATTR_OK) return NULL;
    for (int i = 0; i < 3; i++) ((float *)(*c)->data)[i] = (float)(i + 1);
    cg_graph *g = cg_new();
    int x = cg_add_input(g, "x"), k = cg_add_const(g, "c", *c, false);
    int in[2] = {x, k};
    *y = cg_add_node(g, CG_ADD, "add", in, 2, NULL, "y");
    cg_add_output(g, *y);
    return g;
}

/* Runs y for x of shape [rows, 3] (all ones) in slot `slot`; true when every value is 1 + c. */
static int run_once(const cg_graph *g, cx_consts *cs, int y, int64_t rows, int slot) {
    float x[4 * 3], out[4 * 3];
    for (int i = 0; i < 12; i++) x[i] = 1;
    cx_arg a = {.nd = 2, .sh = {rows, 3}, .dt = CATTR_FLOAT32, .host = x};
    void *dst = out;
    cx_job j = {.g = g, .consts = cs, .slot = slot, .n_in = 1, .in = &a, .n_out = 1, .outs = &y, .out_host = &dst};
    if (cx_run(&j) != CATTR_OK) {
        printf("run: %s\n", cattr_last_error());
        return 0;
    }
    for (int64_t i = 0; i < rows * 3; i++)
        if (out[i] != 2.0f + (float)(i % 3)) {
            printf("value %d: %g\n", (int)i, out[i]);
            return 0;
        }
    return 1;
}

typedef struct {
    cx_backend *be;
    int ok;
} worker;

/* Graphs and their constants made, run and freed (the graph first or the constants first, in turn). */
static void *work(void *arg) {
    worker *w = arg;
    w->ok = 1;
    for (int r = 0; r < 200 && w->ok; r++) {
        cattr_tensor *c = NULL;
        cx_consts *cs = NULL;
        int y = -1;
        cg_graph *g = small_graph(&c, &y);
        w->ok = g && cx_consts_new(w->be, CATTR_FLOAT32, &cs) == CATTR_OK && run_once(g, cs, y, 1 + r % 4, r % 2) &&
                run_once(g, cs, y, 1 + r % 4, r % 2);
        if (r % 2) cx_consts_free(cs);
        cg_free(g);
        if (!(r % 2)) cx_consts_free(cs);
        cattr_tensor_free(c);
    }
    return NULL;
}

int main(void) {
    cx_backend *be = NULL;
    cx_consts *cs = NULL;
    CHECK(cx_backend_by_name("cpu", &be) == CATTR_OK && cx_consts_new(be, CATTR_FLOAT32, &cs) == CATTR_OK, "consts");
    int base = cx_run_kept_plans();
    cattr_tensor *c = NULL;
    int y = -1;
    cg_graph *g = small_graph(&c, &y);
    CHECK(g && y >= 0, "graph");
    CHECK(run_once(g, cs, y, 2, 0), "first run");
    CHECK(cx_run_kept_plans() == base + 1, "one plan kept after a run, not %d", cx_run_kept_plans() - base);
    CHECK(run_once(g, cs, y, 2, 0), "second run");
    CHECK(cx_run_kept_plans() == base + 1, "the same shapes planned twice: %d plans", cx_run_kept_plans() - base);
    CHECK(run_once(g, cs, y, 3, 0) && run_once(g, cs, y, 3, 1), "other shapes, other slot");
    CHECK(cx_run_kept_plans() == base + 3, "two shapes in slot 0 and one in slot 1: %d plans",
          cx_run_kept_plans() - base);
    /* a change to the graph: slot 0's plans go at its next run (slot 1's when it runs) */
    int in[1] = {y};
    int z = cg_add_node(g, CG_RELU, "relu", in, 1, NULL, "z");
    CHECK(z >= 0 && run_once(g, cs, y, 2, 0), "run after a change");
    CHECK(cx_run_kept_plans() == base + 2, "after a change, slot 0 planned afresh: %d plans",
          cx_run_kept_plans() - base);
    cg_free(g);
    cattr_tensor_free(c);
    CHECK(cx_run_kept_plans() == base, "the graph freed: %d plans left", cx_run_kept_plans() - base);
    /* freed with the constants (constants belong to one graph and those derived from it: a new graph, new ones) */
    cx_consts_free(cs);
    CHECK(cx_consts_new(be, CATTR_FLOAT32, &cs) == CATTR_OK, "consts");
    g = small_graph(&c, &y);
    CHECK(run_once(g, cs, y, 1, 0) && cx_run_kept_plans() == base + 1, "a new graph's run");
    cx_consts_free(cs);
    CHECK(cx_run_kept_plans() == base, "the constants freed: %d plans left", cx_run_kept_plans() - base);
    cg_free(g);
    cattr_tensor_free(c);
    /* two threads, each its own constants, graphs made, run and freed at once */
    worker w[2] = {{be, 0}, {be, 0}};
    pthread_t th[2];
    for (int t = 0; t < 2; t++) CHECK(pthread_create(&th[t], NULL, work, &w[t]) == 0, "thread");
    for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
    CHECK(w[0].ok && w[1].ok, "runs on two threads at once: %d %d", w[0].ok, w[1].ok);
    CHECK(cx_run_kept_plans() == base, "after the threads' graphs were freed: %d plans left",
          cx_run_kept_plans() - base);
    if (g_failures) printf("%d failure(s)\n", g_failures);
    else printf("test_run: ok\n");
    return g_failures ? 1 : 0;
}
