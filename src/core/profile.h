/* profile.h - the process-wide profiler behind cattr_profile_begin / cattr_profile_end: timed events (backend ops,
 * host <-> backend copies, spans such as plan builds) and the peak of backend memory, kept in memory while it is on
 * and written as a Chrome trace (the JSON Trace Event Format that Perfetto and chrome://tracing load).
 *
 * Off by default. A hook costs one relaxed atomic load when it is off: callers test cx_prof_on() (once per run in
 * the executors) and only then take times and call the recorders. Recorders may be called from any thread; each
 * thread gets a small trace "tid" (1, 2, ...) on its first event. Strings passed to the recorders are copied. An
 * event that arrives after the profiler was stopped is dropped.
 */
#ifndef CATTR_CORE_PROFILE_H
#define CATTR_CORE_PROFILE_H

#include "core/core.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

extern atomic_bool cx_prof_enabled_; /* read through cx_prof_on() */

/* Whether the profiler is collecting (a relaxed load: a hook may see the switch a moment late). */
static inline bool cx_prof_on(void) { return atomic_load_explicit(&cx_prof_enabled_, memory_order_relaxed); }

/* CLOCK_MONOTONIC in nanoseconds: the time base of every event. */
uint64_t cx_prof_now(void);

/* One backend op: category "op", named by `op` (the op kind), args backend, node and shapes ("[2,3]x[3,4]->[2,3]"). */
void cx_prof_op(const char *backend, const char *op, const char *node, const char *shape_text, uint64_t t0,
                uint64_t t1);
/* One copy through a backend: category "copy", direction "in" (host to backend), "out" or "zero" (memset_zero). */
void cx_prof_copy(const char *backend, const char *direction, size_t bytes, uint64_t t0, uint64_t t1);
/* A span of category `cat` (e.g. "plan", "plan build"). */
void cx_prof_span(const char *cat, const char *name, uint64_t t0, uint64_t t1);
/* The backend's high-water mark of memory now: the profile keeps the largest seen (a "memory" counter event). */
void cx_prof_peak(const char *backend, size_t bytes);

/* What cx_prof_stop hands over: the events of the session that just ended. */
typedef struct cx_prof_data cx_prof_data;

/* Stops collecting and hands over the events (*out, freed with cx_prof_data_free). Errors:
 * CATTR_ERR_INVALID_ARGUMENT (the profiler was not started). */
cattr_status cx_prof_stop(cx_prof_data **out);
void cx_prof_data_free(cx_prof_data *d);
/* Writes the trace JSON to f (ctx: the cx_prof_data), in the shape cx_write_file_atomic takes. Errors: CATTR_ERR_IO. */
cattr_status cx_prof_write_trace(FILE *f, void *ctx);
/* The text summary (malloc'd, NULL when out of memory): per op kind count, total ms and share; copies per direction;
 * plan builds; peak memory. */
char *cx_prof_summary(const cx_prof_data *d);

#endif
