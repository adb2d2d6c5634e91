/* check_backend.h - the "cpu-check" backend: scalar reference kernels, memory touched only by the backend. Only the
 * device registry (backend/registry.c) asks for it by name. */
#ifndef CATTR_CHECK_BACKEND_H
#define CATTR_CHECK_BACKEND_H

#include "backend/backend.h"

/* The process-wide cpu-check backend, never freed. */
cx_backend *cx_backend_check_get(void);

#endif
