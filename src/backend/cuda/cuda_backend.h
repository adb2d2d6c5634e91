/* cuda_backend.h - the "cuda" backend: NVIDIA GPUs through the CUDA runtime and cuBLAS (builds with CATTR_CUDA), or
 * the same code run on the host for testing (builds with CATTR_CUDA_EMULATE). */
#ifndef CATTR_CUDA_BACKEND_H
#define CATTR_CUDA_BACKEND_H

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The backend of device `ordinal` (cuda:N; "cuda" is 0), made on first use and kept for the process. Errors:
 * CATTR_ERR_UNSUPPORTED (no CUDA device, a driver too old for the runtime, an ordinal beyond the devices: the message
 * says which), CATTR_ERR_NO_MEMORY. */
cattr_status cx_backend_cuda_get(int ordinal, cx_backend **out);

/* Whether this build runs the backend's kernels on the host instead of a GPU (CATTR_CUDA_EMULATE). */
int cx_backend_cuda_emulated(void);

/* The emulated build's count of the multiply-adds its block kernels have done so far in this process (cu.h's
 * blk.count: the work-count tests, e.g. attention's T^2 d); -1 on a GPU, which does not count. */
int64_t cx_backend_cuda_emulated_work(void);

#ifdef __cplusplus
}
#endif

#endif
