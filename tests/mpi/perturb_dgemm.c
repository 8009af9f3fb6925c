/* Negative control for the MPI driver: an LD_PRELOAD library whose dgemm_
 * forwards to the real one and then flips the lowest bit of C(1,1). If the driver's
 * fingerprints did not change under it, the comparison (or the preload through mpirun)
 * would be blind, and the with/without-shim check would prove nothing. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

typedef void dgemm_fn(const char *, const char *, const int *, const int *, const int *, const double *,
                      const double *, const int *, const double *, const int *, const double *, double *,
                      const int *, size_t, size_t);

void dgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k, const double *alpha,
            const double *a, const int *lda, const double *b, const int *ldb, const double *beta, double *c,
            const int *ldc, size_t la, size_t lb) {
    static dgemm_fn *real;
    if (!real) real = (dgemm_fn *)dlsym(RTLD_NEXT, "dgemm_");
    real(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, la, lb);
    if (*m > 0 && *n > 0) {
        uint64_t bits;
        memcpy(&bits, c, sizeof bits);
        bits ^= 1;
        memcpy(c, &bits, sizeof bits);
    }
}
