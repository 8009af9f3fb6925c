/* The ILP64 BLAS entry points the clients look up at run time with dlsym (dgemm_64_,
 * dsyrk_64_, cblas_dgemm64_, cblas_dsyrk64_): 64-bit integers, Fortran hidden character
 * lengths as size_t, CBLAS enums as int. C and C++ alike. */
#ifndef OZAKI_TEST_ILP64_TYPES_H
#define OZAKI_TEST_ILP64_TYPES_H

#include <stddef.h>
#include <stdint.h>

typedef int64_t I;
typedef void (*gemm64_t)(const char *, const char *, const I *, const I *, const I *, const double *, const double *,
                         const I *, const double *, const I *, const double *, double *, const I *, size_t, size_t);
typedef void (*syrk64_t)(const char *, const char *, const I *, const I *, const double *, const double *, const I *,
                         const double *, double *, const I *, size_t, size_t);
typedef void (*cgemm64_t)(int, int, int, I, I, I, double, const double *, I, const double *, I, double, double *, I);
typedef void (*csyrk64_t)(int, int, int, I, I, double, const double *, I, double, double *, I);

#endif
