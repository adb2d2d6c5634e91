/* hd.h - CX_HD marks a small inline function of a shared header (ops/elementwise.h, core/philox.h) as callable from
 * CUDA device code too (the CUDA backend's kernels evaluate the same formulas as the CPU kernels); empty in C. */
#ifndef CATTR_HD_H
#define CATTR_HD_H

#if defined(__CUDACC__)
#define CX_HD __host__ __device__
#else
#define CX_HD
#endif

#endif
