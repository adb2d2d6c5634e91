/* cpu_backend.h - the CPU backend (OpenBLAS + OpenMP). Only the device registry (backend/registry.c) asks for it by
 * name; everything else gets a backend from cx_backend_by_name. */
#ifndef CATTR_CPU_BACKEND_H
#define CATTR_CPU_BACKEND_H

#include "backend/backend.h"

/* The process-wide CPU backend, never freed. */
cx_backend *cx_backend_cpu_get(void);

/* Tests: the attention kernels' vector width, 8 or 16 lanes (0: chosen from the CPU again; see cpu_att_wide). */
void cx_cpu_att_lanes_for_tests(int lanes);

#endif
