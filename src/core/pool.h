/* pool.h - a few independent tasks of one call run at once, without waiting for a thread that has not started.
 *
 * cx_pool_run runs tasks 0..n-1: each is claimed from a shared counter by whichever thread is free, the calling
 * thread too, and the call returns when every claimed task is done. A task nobody has claimed yet is never waited
 * for: when the helper threads are slow to wake (a loaded machine), the caller runs every task itself. Helpers sleep
 * on a condition variable when idle and never spin, so a process that ran a few tasks leaves no thread competing for
 * the cores (libgomp's idle workers spin for milliseconds after a region: on a machine with one busy core, a call of
 * 0.2 ms then took 8 ms).
 *
 * This is for task-level forks of small calls (IntegratedGradients' two halves). The data-parallel loops of the
 * kernels and OpenBLAS keep libgomp's team: while tasks run beside each other, OpenMP runs one thread in each (their
 * threads have omp_set_num_threads(1)), as nested regions did, so the two never run more threads than
 * OMP_NUM_THREADS; a call that runs its tasks inline (one thread, or helpers held by another call) leaves OpenMP as
 * it is.
 */
#ifndef CATTR_CORE_POOL_H
#define CATTR_CORE_POOL_H

/* Runs fn(user, i) for i in [0, n) on the calling thread and up to max_threads - 1 helpers (max_threads <= 1: all on
 * the calling thread, in order). Tasks must not call cx_pool_run themselves (a nested call runs inline). A call made
 * while another thread's call holds the helpers runs its tasks inline. Helpers that cannot be started leave their
 * tasks to the caller. */
void cx_pool_run(int n, int max_threads, void (*fn)(void *user, int i), void *user);

/* Whether this thread is one of the pool's helpers (what only the caller's thread does, such as calling back into the
 * caller's code between nodes, checks it). */
_Bool cx_pool_is_helper(void);

#endif
