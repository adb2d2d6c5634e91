/* mpi_driver.h - the cattr command's MPI driver: a work farm over a list of items with the results delivered on rank 0
 * in item order. The library (libcattr) knows nothing of MPI; this module is part of the command only. It is small and
 * self-contained, for C programs that link libcattr and want to spread their own calls over ranks the same way: copy
 * it and compile it with -DCATTR_HAVE_MPI against an MPI-3 library (OpenMPI, MPICH).
 *
 * Built without CATTR_HAVE_MPI every function works too, as one process of one rank: mpi_driver_farm() then computes
 * each item and delivers it at once, in order; the command runs the same code either way.
 *
 * Use:
 *     mpi_driver_start();                       // MPI_Init (MPI_THREAD_FUNNELED), once; size 1 without mpirun
 *     ... rank 0 reads the inputs; mpi_driver_bcast() hands them (and an agreed status) to every rank ...
 *     rc = mpi_driver_farm(n, work, deliver, user);   // every rank, collectively
 *     ... mpi_driver_bcast() of rank 0's summary, so that every rank returns the same exit code ...
 *     mpi_driver_stop();                        // MPI_Finalize
 *
 * The farm's protocol (size > 1). Items are 0..n-1; every rank, rank 0 included, computes items with `work`. The
 * next item to take is a counter (int64) in an MPI-3 window on rank 0, taken with an atomic fetch-and-add
 * (MPI_Rget_accumulate with MPI_SUM, in a passive-target lock_all epoch), so items go out dynamically as ranks become
 * free and a rank with a long item does not hold the others back. Inside a node the window is shared memory and a take
 * needs nothing of rank 0; over a network without hardware atomics it completes when rank 0 next enters MPI, which is
 * why a worker starts taking its next item before it computes the current one. A worker sends each result (tag 2:
 * int64 item, int32 status, then the bytes `work` produced) with a non-blocking send and goes on, until it takes an
 * item >= n. Rank 0 polls (MPI_Iprobe, never a blocking receive) between its own items and while it waits for the
 * last results, buffers the results that arrive ahead of their turn and passes them to `deliver` strictly in item
 * order, so that the output equals one process's. When `work` reports a fatal error (status < 0) or `deliver` returns
 * non-zero, rank 0 sets the counter to n (no rank takes another item), collects the results of the items already
 * taken, delivers those before the fatal one and the fatal one itself (its message), and returns that code. The
 * ranks then meet in an MPI_Ibarrier (waited for by polling) and free the window.
 *
 * Faults: inside the farm no rank waits in a blocking MPI call for another rank (they poll and sleep 0.2 ms; the
 * broadcasts around the farm are short), and in any case a rank that dies (a crash, kill -9, out of memory) is
 * noticed by the launcher: OpenMPI's mpirun then stops the whole
 * job and names the rank and its exit status or signal. Under Slurm, run srun with --kill-on-bad-exit=1 (-K), which
 * makes srun do the same (else the other tasks of a step can wait for the dead one until the job's time limit). The
 * results rank 0 had written stay written, so a rerun of the same command resumes.
 */
#ifndef CATTR_MPI_DRIVER_H
#define CATTR_MPI_DRIVER_H

#include <stddef.h>
#include <stdint.h>

/* Initialises MPI once (later calls do nothing): MPI_Init_thread asking for MPI_THREAD_FUNNELED (only the main thread
 * calls MPI; OpenMP threads compute). Without mpirun this is a singleton run of size 1. Setting the environment
 * variable CATTR_NO_MPI=1 skips MPI altogether (one process). Returns 0, or -1 when MPI cannot start. */
int mpi_driver_start(void);
/* Finalises MPI if mpi_driver_start() initialised it. */
void mpi_driver_stop(void);
/* This process's rank and the number of ranks (0 and 1 without MPI). */
int mpi_driver_rank(void);
int mpi_driver_size(void);
/* Broadcasts len bytes from rank 0's buf into every rank's buf (any length; sent in pieces under 1 GiB). */
void mpi_driver_bcast(void *buf, size_t len);

/* The largest of every rank's v (collective; v itself without MPI): for the ranks to agree on a status. */
int mpi_driver_max(int v);

/* Whether every rank runs the same command (collective): each passes a digest of what it was asked to do (its command
 * line, the fingerprints of the files it reads); returns 0 when all agree, else on every rank the lowest rank whose
 * digest differs from rank 0's. 0 without MPI. */
int mpi_driver_agree(uint64_t digest);
/* FNV-1a over len bytes, continuing from h (0 to start): for the digest above. */
uint64_t mpi_driver_hash(uint64_t h, const void *data, size_t len);

/* Computes item `item` on this rank: sets *data (malloc'ed, freed by the driver; NULL with *len 0 for nothing) and
 * returns a status: 0 done, > 0 done but failed (the result is delivered all the same), < 0 fatal (stop the farm). */
typedef int (*mpi_driver_work_fn)(int64_t item, char **data, size_t *len, void *user);
/* On rank 0 only, in item order: one item's result. Returns 0, or non-zero to stop the farm (that value is returned
 * by mpi_driver_farm). A fatal result (status < 0) is delivered too, after every item before it, so that its message
 * (in data) is reported; it stops the farm, and nothing after it is delivered. */
typedef int (*mpi_driver_deliver_fn)(int64_t item, int status, const char *data, size_t len, void *user);

/* Runs items 0..n-1 over every rank (collective: every rank calls it with the same n). On rank 0 returns 0 when
 * every item was delivered, deliver's return for the first fatal result (or that status when deliver returns 0), or the
 * first non-zero return of `deliver`; on the
 * other ranks 0 (they learn the outcome from rank 0, with mpi_driver_bcast). */
int mpi_driver_farm(int64_t n, mpi_driver_work_fn work, mpi_driver_deliver_fn deliver, void *user);

#endif
