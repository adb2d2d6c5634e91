/* pool.c - the task pool (pool.h): sleeping helpers, tasks claimed from a shared counter.
 *
 * One call holds the helpers at a time (`busy`); it publishes its job under the mutex with a new generation and
 * invites up to n - 1 helpers. A helper joins only while invitations are open (`invited` > 0) and counts itself in
 * `active`; the caller claims tasks like the helpers, then closes the invitations and waits for the helpers that
 * joined to finish the tasks they claimed. A helper that wakes late finds the invitations closed and sleeps again, so
 * a call never waits for a thread that has not started, and no helper ever reads a job after its call returned. */
#include "pool.h"

#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define POOL_MAX 63 /* helpers at most */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_work = PTHREAD_COND_INITIALIZER; /* a job was published */
static pthread_cond_t g_idle = PTHREAD_COND_INITIALIZER; /* the last helper of a job left it */
static int g_started;   /* helpers running */
static bool g_busy;     /* a call holds the helpers */
static uint64_t g_gen;  /* the job's generation */
static int g_invited;   /* helpers that may still join the job */
static int g_active;    /* helpers in the job */
static void (*g_fn)(void *user, int i);
static void *g_user;
static int g_n;
static atomic_int g_next; /* the next task to claim */
static _Thread_local bool tl_in_task; /* this thread runs a task (a nested call runs inline) */
static _Thread_local bool tl_helper;  /* this thread is a helper */

bool cx_pool_is_helper(void) { return tl_helper; }

static void claim_all(void (*fn)(void *user, int i), void *user, int n) {
    for (int i; (i = atomic_fetch_add(&g_next, 1)) < n;) fn(user, i);
}

static void *helper(void *arg) {
    (void)arg;
    omp_set_num_threads(1); /* a task's kernels run on this thread alone (see pool.h) */
    tl_in_task = true;
    tl_helper = true;
    uint64_t seen = 0;
    pthread_mutex_lock(&g_mu);
    for (;;) {
        while (g_gen == seen || g_invited == 0) {
            if (g_gen != seen && g_invited == 0) seen = g_gen; /* a job that needs no more helpers */
            pthread_cond_wait(&g_work, &g_mu);
        }
        seen = g_gen;
        g_invited--;
        g_active++;
        void (*fn)(void *user, int i) = g_fn;
        void *user = g_user;
        int n = g_n;
        pthread_mutex_unlock(&g_mu);
        claim_all(fn, user, n);
        pthread_mutex_lock(&g_mu);
        if (--g_active == 0) pthread_cond_signal(&g_idle);
    }
    return NULL;
}

/* A child of fork() has none of the parent's helpers, and may have been forked while another thread held the mutex:
 * it starts with a fresh pool (its first call starts its own helpers). */
static void after_fork_child(void) {
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c1 = PTHREAD_COND_INITIALIZER, c2 = PTHREAD_COND_INITIALIZER;
    g_mu = mu;
    g_work = c1;
    g_idle = c2;
    g_started = 0;
    g_busy = false;
    g_invited = 0;
    g_active = 0;
    tl_in_task = false;
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void pool_init(void) { pthread_atfork(NULL, NULL, after_fork_child); }

static void run_inline(int n, void (*fn)(void *user, int i), void *user) {
    for (int i = 0; i < n; i++) fn(user, i);
}

void cx_pool_run(int n, int max_threads, void (*fn)(void *user, int i), void *user) {
    int want = (max_threads < n ? max_threads : n) - 1;
    if (want > POOL_MAX) want = POOL_MAX;
    if (n <= 0) return;
    if (want <= 0 || tl_in_task) {
        run_inline(n, fn, user);
        return;
    }
    pthread_once(&g_once, pool_init);
    pthread_mutex_lock(&g_mu);
    if (g_busy) { /* another thread's call holds the helpers */
        pthread_mutex_unlock(&g_mu);
        run_inline(n, fn, user);
        return;
    }
    while (g_started < want) {
        pthread_t t;
        pthread_attr_t at;
        if (pthread_attr_init(&at) != 0) break;
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &at, helper, NULL);
        pthread_attr_destroy(&at);
        if (rc != 0) break; /* the tasks it would have taken fall to the caller */
        g_started++;
    }
    g_busy = true;
    g_fn = fn;
    g_user = user;
    g_n = n;
    atomic_store(&g_next, 0);
    g_gen++;
    g_invited = want < g_started ? want : g_started;
    g_active = 0;
    pthread_cond_broadcast(&g_work);
    pthread_mutex_unlock(&g_mu);

    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    tl_in_task = true;
    claim_all(fn, user, n);
    tl_in_task = false;
    omp_set_num_threads(saved);

    pthread_mutex_lock(&g_mu);
    g_invited = 0; /* late helpers stay asleep */
    while (g_active > 0) pthread_cond_wait(&g_idle, &g_mu);
    g_busy = false;
    pthread_mutex_unlock(&g_mu);
}
