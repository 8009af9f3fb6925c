/* Blocked dense LU (dgetrf) or QR (dgeqrf) of one n x n matrix through the Fortran LAPACK
 * ABI: the workloads of traces #5 and #6 in the Ozaki 2.5 paper (section 6.1, n = 4096).
 *
 * The GEMMs inside LAPACK are what the shim traces, so this must run against a LAPACK that
 * calls dgemm_ through the PLT: Debian's reference liblapack3 does (dgetrf -> dgetrf2
 * recursion and the trailing dgemm_ updates; dgeqrf -> dlarfb's dgemm_), OpenBLAS's
 * LAPACK does not for getrf/potrf (they are native there and invisible to any interposer).
 *
 * Build: gcc -O2 lapack_lu_qr.c -o lapack_lu_qr -llapack -lblas
 * Run:   ./lapack_lu_qr lu|qr [n=4096]
 * The matrix is filled from a fixed linear congruential generator (reproducible). The
 * check afterwards uses plain loops, no BLAS, so the trace holds only the factorisation.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern void dgetrf_(const int *m, const int *n, double *a, const int *lda, int *ipiv, int *info);
extern void dgeqrf_(const int *m, const int *n, double *a, const int *lda, double *tau, double *work,
                    const int *lwork, int *info);

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 2 || (strcmp(argv[1], "lu") && strcmp(argv[1], "qr"))) {
        fprintf(stderr, "usage: %s lu|qr [n]\n", argv[0]);
        return 2;
    }
    int lu = !strcmp(argv[1], "lu");
    int n = argc > 2 ? atoi(argv[2]) : 4096, info = 0;
    if (n < 1) { fprintf(stderr, "n must be >= 1\n"); return 2; }
    double *a = malloc(sizeof(double) * (size_t)n * n);
    if (!a) { fprintf(stderr, "out of memory\n"); return 1; }
    unsigned long long s = 12345;
    for (size_t i = 0; i < (size_t)n * n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        a[i] = (double)(s >> 11) / 9007199254740992.0 - 0.5;
    }
    double t0 = now(), diag = 0;
    if (lu) {
        int *ipiv = malloc(sizeof(int) * n);
        dgetrf_(&n, &n, a, &n, ipiv, &info);
        free(ipiv);
    } else {
        double *tau = malloc(sizeof(double) * n), query = 0;
        int lwork = -1;
        dgeqrf_(&n, &n, a, &n, tau, &query, &lwork, &info);
        lwork = (int)query;
        double *work = malloc(sizeof(double) * (size_t)lwork);
        dgeqrf_(&n, &n, a, &n, tau, work, &lwork, &info);
        free(work);
        free(tau);
    }
    double t = now() - t0;
    /* log|det| of the factor's diagonal: a cheap fingerprint that changes if the result does. */
    for (int i = 0; i < n; i++) diag += log(fabs(a[i + (size_t)i * n]));
    printf("%s n = %d: info = %d, %.2f s, sum log|diag| = %.6f\n", lu ? "dgetrf" : "dgeqrf", n, info, t, diag);
    free(a);
    return info == 0 ? 0 : 1;
}
