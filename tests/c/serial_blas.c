/* A stand-in vendor BLAS that serialises concurrent calls behind one lock, as OpenBLAS's
 * level-3 lock does: each dgemm_ holds a process-wide mutex while it busy-waits 1 ms (its
 * arguments are not read), so N callers at once take N times as long per call in flight.
 * `ozaki calibrate --cpu-only --blas` must measure that slowdown. */
#include <pthread.h>
#include <stddef.h>
#include <time.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

void dgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k,
            const double *alpha, const double *a, const int *lda, const double *b,
            const int *ldb, const double *beta, double *c, const int *ldc, size_t lta,
            size_t ltb) {
    (void)ta; (void)tb; (void)m; (void)n; (void)k; (void)alpha; (void)a; (void)lda;
    (void)b; (void)ldb; (void)beta; (void)c; (void)ldc; (void)lta; (void)ltb;
    pthread_mutex_lock(&lock);
    double end = now() + 1e-3;
    while (now() < end) {
    }
    pthread_mutex_unlock(&lock);
}
