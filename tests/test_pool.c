/* test_pool.c - the task pool (src/core/pool.h): every task runs exactly once whatever the thread count, tasks that
 * run beside each other see OpenMP on one thread, a nested call runs inline, two threads' calls at once both finish, and a child
 * of fork() (forked after the parent's helpers started) runs its tasks too. */
#include "core/pool.h"
#include "test_util.h"

#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define N_MAX 64

typedef struct {
    atomic_int runs[N_MAX];
    atomic_int omp_threads_max; /* the largest omp_get_max_threads() a task saw */
    atomic_int nested_runs;
} counts;

static void note_threads(counts *k) {
    int t = omp_get_max_threads(), cur = atomic_load(&k->omp_threads_max);
    while (t > cur && !atomic_compare_exchange_weak(&k->omp_threads_max, &cur, t)) {
    }
}

static void task(void *user, int i) {
    counts *k = user;
    atomic_fetch_add(&k->runs[i], 1);
    note_threads(k);
}

static void nested_one(void *user, int i) {
    (void)i;
    atomic_fetch_add(&((counts *)user)->nested_runs, 1);
}

static void nesting_task(void *user, int i) {
    task(user, i);
    cx_pool_run(3, 4, nested_one, user); /* inline: three runs on this thread */
}

static int all_once(counts *k, int n) {
    for (int i = 0; i < N_MAX; i++)
        if (atomic_load(&k->runs[i]) != (i < n ? 1 : 0)) return 0;
    return 1;
}

static void *caller(void *arg) {
    counts *k = arg;
    for (int r = 0; r < 200; r++) {
        memset(k, 0, sizeof *k);
        cx_pool_run(8, 2, task, k);
        if (!all_once(k, 8)) return (void *)1;
    }
    return NULL;
}

int main(void) {
    int threads[4] = {1, 2, 3, 8};
    for (int t = 0; t < 4; t++)
        for (int n = 0; n <= 10; n++) {
            counts k;
            memset(&k, 0, sizeof k);
            cx_pool_run(n, threads[t], task, &k);
            CHECK(all_once(&k, n), "%d tasks on %d threads: not every task ran exactly once", n, threads[t]);
            bool beside = (threads[t] < n ? threads[t] : n) >= 2; /* else inline: OpenMP as it is */
            CHECK(!beside || atomic_load(&k.omp_threads_max) <= 1,
                  "%d tasks on %d threads: a task saw OpenMP with %d threads", n, threads[t],
                  atomic_load(&k.omp_threads_max));
        }
    int before = omp_get_max_threads();
    counts k;
    memset(&k, 0, sizeof k);
    cx_pool_run(4, 2, nesting_task, &k);
    CHECK(all_once(&k, 4) && atomic_load(&k.nested_runs) == 12, "nested calls: %d inner runs, want 12",
          atomic_load(&k.nested_runs));
    CHECK(omp_get_max_threads() == before, "the caller's OpenMP threads are %d after a call, %d before",
          omp_get_max_threads(), before);

    /* two threads' calls at once: one holds the helpers, the other runs inline; both finish every task */
    counts a, b;
    pthread_t ta, tb;
    void *ra = NULL, *rb = NULL;
    CHECK(pthread_create(&ta, NULL, caller, &a) == 0 && pthread_create(&tb, NULL, caller, &b) == 0, "threads");
    pthread_join(ta, &ra);
    pthread_join(tb, &rb);
    CHECK(ra == NULL && rb == NULL, "concurrent calls lost a task");

    /* a child forked after the helpers started: its own pool */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        counts c;
        memset(&c, 0, sizeof c);
        cx_pool_run(6, 2, task, &c);
        _exit(all_once(&c, 6) ? 0 : 3);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the forked child's tasks: status %d", status);

    printf("test_pool: %s\n", g_failures ? "FAILED" : "ok");
    return g_failures ? 1 : 0;
}
