/* mpi_driver.c - the cattr command's MPI driver (see mpi_driver.h for what it does and its protocol). Without
 * CATTR_HAVE_MPI it is one rank: the farm computes and delivers each item in turn. */
#define _POSIX_C_SOURCE 200809L
#include "mpi_driver.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef CATTR_HAVE_MPI
#include <mpi.h>
#endif

static int g_rank = 0, g_size = 1;

int mpi_driver_rank(void) { return g_rank; }
int mpi_driver_size(void) { return g_size; }

#ifndef CATTR_HAVE_MPI

int mpi_driver_start(void) { return 0; }
void mpi_driver_stop(void) {}
void mpi_driver_bcast(void *buf, size_t len) {
    (void)buf;
    (void)len;
}
int mpi_driver_max(int v) { return v; }

#else

enum { TAG_RESULT = 2 };

static int g_started = 0; /* 1: MPI_Init was called here */

int mpi_driver_start(void) {
    if (g_started) return 0;
    const char *off = getenv("CATTR_NO_MPI");
    if (off && *off && strcmp(off, "0")) return 0;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) return -1;
        g_started = 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    return 0;
}

void mpi_driver_stop(void) {
    if (g_started) MPI_Finalize();
    g_started = 0;
    g_rank = 0;
    g_size = 1;
}

void mpi_driver_bcast(void *buf, size_t len) {
    if (g_size < 2) return;
    char *p = buf;
    while (len > 0) {
        int piece = len > (size_t)1 << 30 ? 1 << 30 : (int)len;
        MPI_Bcast(p, piece, MPI_BYTE, 0, MPI_COMM_WORLD);
        p += piece;
        len -= (size_t)piece;
    }
}

int mpi_driver_max(int v) {
    int m = v;
    if (g_size > 1) MPI_Allreduce(&v, &m, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

/* A short pause between polls of a rank that has nothing to compute: it leaves the core to the ranks that do (an
 * oversubscribed node) and adds at most this much to the latency of a message. */
static void nap(void) {
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
}

/* Waits for a request without a blocking MPI call (polls and naps). */
static void wait_polling(MPI_Request *rq) {
    for (;;) {
        int done = 0;
        MPI_Test(rq, &done, MPI_STATUS_IGNORE);
        if (done) return;
        nap();
    }
}

/* The shared counter: the next item, an int64 in an MPI-3 window on rank 0, taken with an atomic fetch-and-add.
 * take_start() starts taking one (a request), take_end() waits for it: the worker starts the next take before it
 * computes an item, so that it has the next item at once even where the window needs rank 0's attention. */
static void take_start(MPI_Win win, int64_t *got, MPI_Request *rq) {
    static const int64_t one = 1;
    MPI_Rget_accumulate(&one, 1, MPI_INT64_T, got, 1, MPI_INT64_T, 0, 0, 1, MPI_INT64_T, MPI_SUM, win, rq);
}

/* Sends a result to rank 0 (tag 2: int64 item, int32 status, then the bytes) with a non-blocking send, after freeing
 * the buffers of the earlier sends that have completed. */
typedef struct sent {
    MPI_Request rq;
    char *buf;
} sent;

typedef struct outbox {
    sent *v;
    int64_t n, cap;
} outbox;

static void send_result(outbox *ob, int64_t item, int32_t status, char *data, size_t len) {
    size_t hdr = sizeof item + sizeof status;
    if (len > (size_t)2147483647 - hdr) { /* not sendable as one message: fatal for the farm */
        free(data);
        data = NULL;
        len = 0;
        status = -1;
    }
    char *msg = malloc(hdr + len);
    if (!msg) MPI_Abort(MPI_COMM_WORLD, 2);
    memcpy(msg, &item, sizeof item);
    memcpy(msg + sizeof item, &status, sizeof status);
    if (len) memcpy(msg + hdr, data, len);
    free(data);
    int64_t keep = 0;
    for (int64_t k = 0; k < ob->n; k++) {
        int done = 0;
        MPI_Test(&ob->v[k].rq, &done, MPI_STATUS_IGNORE);
        if (done) free(ob->v[k].buf);
        else ob->v[keep++] = ob->v[k];
    }
    ob->n = keep;
    if (ob->n == ob->cap) {
        ob->cap = ob->cap ? 2 * ob->cap : 8;
        sent *grown = realloc(ob->v, (size_t)ob->cap * sizeof *ob->v);
        if (!grown) MPI_Abort(MPI_COMM_WORLD, 2);
        ob->v = grown;
    }
    ob->v[ob->n].buf = msg;
    MPI_Isend(msg, (int)(hdr + len), MPI_BYTE, 0, TAG_RESULT, MPI_COMM_WORLD, &ob->v[ob->n].rq);
    ob->n++;
}

/* ---- rank 0 ---- */

typedef struct farm0 {
    int64_t n, deliver_next, received;
    int stop;          /* a fatal status came (or deliver failed): nothing more is taken */
    int rc;            /* what the farm returns: deliver's non-zero return, or the fatal status once delivered */
    char **data;       /* results waiting for their turn */
    size_t *len;
    int *status;
    unsigned char *have;
    mpi_driver_deliver_fn deliver;
    void *user;
} farm0;

static void store(farm0 *f, int64_t item, int status, char *data, size_t len) {
    if (status < 0) f->stop = 1;
    if (item < 0 || item >= f->n || f->have[item]) { /* not a result of this farm: ignore */
        free(data);
        return;
    }
    f->data[item] = data;
    f->len[item] = len;
    f->status[item] = status;
    f->have[item] = 1;
}

/* Passes the results that are next in item order to deliver, up to and including the first fatal one (delivered so that
 * its message is reported; the items before it are delivered too, so their work is kept). */
static void flush(farm0 *f) {
    while (!f->rc && f->deliver_next < f->n && f->have[f->deliver_next]) {
        int64_t k = f->deliver_next++;
        int rc = f->deliver(k, f->status[k], f->data[k], f->len[k], f->user);
        free(f->data[k]);
        f->data[k] = NULL;
        if (f->status[k] < 0) f->rc = rc ? rc : f->status[k];
        else if (rc) f->rc = rc;
        if (f->rc) f->stop = 1;
    }
}

/* Receives every result that has arrived. Returns how many. */
static int poll_results(farm0 *f) {
    int got = 0;
    for (;;) {
        int flag = 0, count = 0;
        MPI_Status st;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_RESULT, MPI_COMM_WORLD, &flag, &st);
        if (!flag) break;
        MPI_Get_count(&st, MPI_BYTE, &count);
        char *msg = malloc(count > 0 ? (size_t)count : 1);
        if (!msg) MPI_Abort(MPI_COMM_WORLD, 2);
        MPI_Recv(msg, count, MPI_BYTE, st.MPI_SOURCE, TAG_RESULT, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        int64_t item = -1;
        int32_t status = -1;
        size_t hdr = sizeof item + sizeof status, len = (size_t)count > hdr ? (size_t)count - hdr : 0;
        if ((size_t)count >= hdr) {
            memcpy(&item, msg, sizeof item);
            memcpy(&status, msg + sizeof item, sizeof status);
        }
        char *data = len ? malloc(len) : NULL;
        if (len && !data) MPI_Abort(MPI_COMM_WORLD, 2);
        if (len) memcpy(data, msg + hdr, len);
        free(msg);
        f->received++;
        store(f, item, status, data, len);
        got++;
    }
    return got;
}

static int farm_root(int64_t n, MPI_Win win, mpi_driver_work_fn work, mpi_driver_deliver_fn deliver, void *user) {
    farm0 f;
    memset(&f, 0, sizeof f);
    f.n = n;
    f.deliver = deliver;
    f.user = user;
    size_t cn = n > 0 ? (size_t)n : 1;
    f.data = calloc(cn, sizeof *f.data);
    f.len = calloc(cn, sizeof *f.len);
    f.status = calloc(cn, sizeof *f.status);
    f.have = calloc(cn, 1);
    if (!f.data || !f.len || !f.status || !f.have) MPI_Abort(MPI_COMM_WORLD, 2);
    int64_t handed = -1, own = 0; /* handed: how many items were taken in all, once no more can be */
    for (;;) {
        poll_results(&f);
        flush(&f);
        if (handed < 0 && f.stop) { /* take no more: the counter jumps to n; what it held was taken */
            int64_t old = 0;
            MPI_Fetch_and_op(&n, &old, MPI_INT64_T, 0, 0, MPI_REPLACE, win);
            MPI_Win_flush(0, win);
            handed = old < n ? old : n;
        }
        if (handed < 0) { /* rank 0 computes too, one item between polls */
            int64_t item = 0;
            MPI_Request rq;
            take_start(win, &item, &rq);
            MPI_Wait(&rq, MPI_STATUS_IGNORE); /* rank 0's own window: no other rank is needed */
            if (item >= n) {
                handed = n;
                continue;
            }
            char *data = NULL;
            size_t len = 0;
            int status = work(item, &data, &len, user);
            own++;
            store(&f, item, status, data, len);
            continue;
        }
        if (own + f.received >= handed) break; /* every item taken has come back */
        if (!poll_results(&f)) nap();
    }
    flush(&f);
    for (int64_t k = 0; k < n; k++) free(f.data[k]);
    free(f.data);
    free(f.len);
    free(f.status);
    free(f.have);
    return f.rc;
}

/* ---- the other ranks ---- */

static void farm_worker(int64_t n, MPI_Win win, mpi_driver_work_fn work, void *user) {
    outbox ob = {NULL, 0, 0};
    int64_t item = 0, next = 0;
    MPI_Request rq;
    take_start(win, &item, &rq);
    wait_polling(&rq);
    while (item < n) {
        take_start(win, &next, &rq); /* the next item, taken while this one is computed */
        char *data = NULL;
        size_t len = 0;
        int32_t status = (int32_t)work(item, &data, &len, user);
        send_result(&ob, item, status, data, len);
        wait_polling(&rq);
        item = next;
    }
    for (int64_t k = 0; k < ob.n; k++) {
        wait_polling(&ob.v[k].rq);
        free(ob.v[k].buf);
    }
    free(ob.v);
}

static int farm_mpi(int64_t n, mpi_driver_work_fn work, mpi_driver_deliver_fn deliver, void *user) {
    int64_t *counter = NULL;
    MPI_Win win;
    MPI_Win_allocate(g_rank == 0 ? (MPI_Aint)sizeof *counter : 0, (int)sizeof *counter, MPI_INFO_NULL,
                     MPI_COMM_WORLD, &counter, &win);
    if (g_rank == 0) *counter = 0;
    MPI_Win_fence(0, win); /* the 0 is in place before anyone takes */
    MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
    int rc = 0;
    if (g_rank == 0) rc = farm_root(n, win, work, deliver, user);
    else farm_worker(n, win, work, user);
    MPI_Win_unlock_all(win);
    /* every rank waits here (polling, not in a blocking call) for the others to finish before the window goes */
    MPI_Request rq;
    MPI_Ibarrier(MPI_COMM_WORLD, &rq);
    wait_polling(&rq);
    MPI_Win_free(&win);
    return rc;
}

#endif

int mpi_driver_farm(int64_t n, mpi_driver_work_fn work, mpi_driver_deliver_fn deliver, void *user) {
#ifdef CATTR_HAVE_MPI
    if (g_size > 1) return farm_mpi(n, work, deliver, user);
#endif
    for (int64_t k = 0; k < n; k++) {
        char *data = NULL;
        size_t len = 0;
        int status = work(k, &data, &len, user);
        int rc = deliver(k, status, data, len, user); /* a fatal result too: deliver reports its message */
        free(data);
        if (status < 0) return rc ? rc : status;
        if (rc) return rc;
    }
    return 0;
}

uint64_t mpi_driver_hash(uint64_t h, const void *data, size_t len) {
    const unsigned char *p = data;
    if (!h) h = 1469598103934665603ull;
    for (size_t k = 0; k < len; k++) h = (h ^ p[k]) * 1099511628211ull;
    return h;
}

int mpi_driver_agree(uint64_t digest) {
#ifdef CATTR_HAVE_MPI
    if (g_size > 1) {
        uint64_t *all = malloc((size_t)g_size * sizeof *all);
        if (!all) MPI_Abort(MPI_COMM_WORLD, 2);
        MPI_Allgather(&digest, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
        int odd = 0;
        for (int r = 1; r < g_size && !odd; r++)
            if (all[r] != all[0]) odd = r;
        free(all);
        return odd;
    }
#endif
    (void)digest;
    return 0;
}
