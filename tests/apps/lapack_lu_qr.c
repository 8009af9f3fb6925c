/* Blocked dense LU (dgetrf) or QR (dgeqrf) of one n x n matrix through the Fortran LAPACK
 * ABI: the workloads of traces #5 and #6 in the Ozaki 2.5 paper (section 6.1, n = 4096).
 *
 * The GEMMs inside LAPACK are what the shim traces, so this must run against a LAPACK that
 * calls dgemm_ through the PLT: Debian's reference liblapack3 does (dgetrf -> dgetrf2
 * recursion and the trailing dgemm_ updates; dgeqrf -> dlarfb's dgemm_), OpenBLAS's
 * LAPACK does not for getrf/potrf (they are native there and invisible to any interposer).
 *
 * Build: gcc -O2 lapack_lu_qr.c -o lapack_lu_qr -llapack -lblas -lm
 * Run:   ./lapack_lu_qr lu|qr [n=4096]
 * The matrix is filled from a fixed linear congruential generator (reproducible). The
 * checks afterwards use plain loops, no BLAS, so the trace holds only the factorisation.
 *
 * Checks (exit status 1 when one fails): the normwise backward error of the factorisation,
 * ||P A - L U|| / (n ||A||) for LU and ||A - Q R|| / (n ||A||) for QR, and for QR the loss
 * of orthogonality ||Q^T Q - I|| / n, each estimated in the infinity norm on PROBES random
 * vectors x (||(PA - LU) x|| / (n ||A|| ||x||) is at most the matrix ratio, and for a wrong
 * factor it is of the order of the error). That costs O(n^2) per vector instead of the
 * O(n^3) of forming L U. A correct LAPACK gives about 1e-17 to 1e-16 here; the limit is
 * 1e-12. The output's sum log|diag| is log|det A| for both factorisations, so it must agree
 * between any two correct runs whatever pivots they chose.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern void dgetrf_(const int *m, const int *n, double *a, const int *lda, int *ipiv, int *info);
extern void dgeqrf_(const int *m, const int *n, double *a, const int *lda, double *tau, double *work,
                    const int *lwork, int *info);

enum { PROBES = 4 };
static const double LIMIT = 1e-12;

static unsigned long long lcg = 12345;
static double uniform(void) {
    lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(lcg >> 11) / 9007199254740992.0 - 0.5;
}

static double norm_inf_vec(const double *x, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* Infinity norm of the n x n column-major matrix a (largest row sum of |a_ij|). */
static double norm_inf_mat(const double *a, int n) {
    double *row = calloc(n, sizeof(double)), m;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) row[i] += fabs(a[i + (size_t)j * n]);
    m = norm_inf_vec(row, n);
    free(row);
    return m;
}

/* y = A x for the column-major n x n matrix a. */
static void matvec(const double *a, int n, const double *x, double *y) {
    for (int i = 0; i < n; i++) y[i] = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) y[i] += a[i + (size_t)j * n] * x[j];
}

/* y = U x with U the upper triangle (diagonal included) of the factor f; by columns, so
 * that f is read in memory order. */
static void upper_times(const double *f, int n, const double *x, double *y) {
    for (int i = 0; i < n; i++) y[i] = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i <= j; i++) y[i] += f[i + (size_t)j * n] * x[j];
}

/* y = L x with L the unit lower triangle of the LU factor f, by columns as above. */
static void unit_lower_times(const double *f, int n, const double *x, double *y) {
    for (int i = 0; i < n; i++) y[i] = x[i];
    for (int j = 0; j < n; j++)
        for (int i = j + 1; i < n; i++) y[i] += f[i + (size_t)j * n] * x[j];
}

/* x <- H_j x with H_j = I - tau_j v v^T, v = (0..0, 1, f[j+1..n-1, j]) (dgeqrf's reflector). */
static void reflect(const double *f, const double *tau, int n, int j, double *x) {
    double d = x[j];
    for (int i = j + 1; i < n; i++) d += f[i + (size_t)j * n] * x[i];
    d *= tau[j];
    x[j] -= d;
    for (int i = j + 1; i < n; i++) x[i] -= d * f[i + (size_t)j * n];
}

/* The largest of the backward errors over the probes; for QR also the orthogonality. */
static void check(int lu, const double *a, const double *f, const int *ipiv, const double *tau, int n,
                  double *resid, double *orth) {
    double *x = malloc(sizeof(double) * n), *y = malloc(sizeof(double) * n), *z = malloc(sizeof(double) * n);
    double *w = malloc(sizeof(double) * n);
    double anorm = norm_inf_mat(a, n);
    *resid = 0;
    *orth = 0;
    for (int p = 0; p < PROBES; p++) {
        for (int i = 0; i < n; i++) x[i] = uniform();
        double xn = norm_inf_vec(x, n);
        matvec(a, n, x, y); /* y = A x */
        upper_times(f, n, x, z); /* z = U x or R x */
        if (lu) {
            unit_lower_times(f, n, z, w); /* z = L U x */
            for (int i = 0; i < n; i++) z[i] = w[i];
            for (int i = 0; i < n; i++) { /* y = P A x: dgetrf's row interchanges, in order */
                int r = ipiv[i] - 1;
                double t = y[i]; y[i] = y[r]; y[r] = t;
            }
        } else {
            for (int j = n - 1; j >= 0; j--) reflect(f, tau, n, j, z); /* z = Q R x */
        }
        for (int i = 0; i < n; i++) z[i] -= y[i];
        *resid = fmax(*resid, norm_inf_vec(z, n) / (n * anorm * xn));
        if (!lu) { /* z = Q^T Q x - x */
            for (int i = 0; i < n; i++) z[i] = x[i];
            for (int j = n - 1; j >= 0; j--) reflect(f, tau, n, j, z);
            for (int j = 0; j < n; j++) reflect(f, tau, n, j, z);
            for (int i = 0; i < n; i++) z[i] -= x[i];
            *orth = fmax(*orth, norm_inf_vec(z, n) / (n * xn));
        }
    }
    free(x); free(y); free(z); free(w);
}

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
    size_t nn = (size_t)n * n;
    double *a = malloc(sizeof(double) * nn), *f = malloc(sizeof(double) * nn);
    int *ipiv = malloc(sizeof(int) * n);
    double *tau = malloc(sizeof(double) * n);
    if (!a || !f || !ipiv || !tau) { fprintf(stderr, "out of memory\n"); return 1; }
    for (size_t i = 0; i < nn; i++) a[i] = uniform();
    memcpy(f, a, sizeof(double) * nn);
    double t0 = now(), diag = 0;
    if (lu) {
        dgetrf_(&n, &n, f, &n, ipiv, &info);
    } else {
        double query = 0;
        int lwork = -1;
        dgeqrf_(&n, &n, f, &n, tau, &query, &lwork, &info);
        lwork = (int)query;
        double *work = malloc(sizeof(double) * (size_t)lwork);
        dgeqrf_(&n, &n, f, &n, tau, work, &lwork, &info);
        free(work);
    }
    double t = now() - t0;
    /* log|det A| from the factor's diagonal: a fingerprint that changes if the result does. */
    for (int i = 0; i < n; i++) diag += log(fabs(f[i + (size_t)i * n]));
    printf("%s n = %d: info = %d, %.4f s, sum log|diag| = %.10f\n", lu ? "dgetrf" : "dgeqrf", n, info, t, diag);
    double resid = 0, orth = 0;
    if (info == 0) check(lu, a, f, ipiv, tau, n, &resid, &orth);
    int ok = info == 0 && resid <= LIMIT && orth <= LIMIT;
    if (lu)
        printf("check ||PA - LU|| / (n ||A||) = %.2e (limit %.0e, %d probes): %s\n", resid, LIMIT, PROBES,
               ok ? "ok" : "FAILED");
    else
        printf("check ||A - QR|| / (n ||A||) = %.2e, ||Q^T Q - I|| / n = %.2e (limit %.0e, %d probes): %s\n", resid,
               orth, LIMIT, PROBES, ok ? "ok" : "FAILED");
    free(a); free(f); free(ipiv); free(tau);
    return ok ? 0 : 1;
}
