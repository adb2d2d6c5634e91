/* cpu_backend.h - the CPU backend (OpenBLAS + OpenMP). Only the device registry (backend/registry.c) asks for it by
 * name; everything else gets a backend from cx_backend_by_name. */
#ifndef CATTR_CPU_BACKEND_H
#define CATTR_CPU_BACKEND_H

#include "backend/backend.h"

/* The process-wide CPU backend, never freed. */
cx_backend *cx_backend_cpu_get(void);

#endif
