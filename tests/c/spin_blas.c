/* A stand-in vendor BLAS whose threads keep the host busy after a call returns, as
 * OpenBLAS's pool spins waiting for new work: each dgemm_ busy-waits 1 ms (its arguments are
 * not read), then leaves two threads per CPU spinning for SPIN_S seconds after it returned.
 * `ozaki calibrate --cpu-only --blas` must measure that window and the slowdown of host
 * copies made in it. */
#include <pthread.h>
#include <stddef.h>
#include <time.h>
#include <unistd.h>

#define SPIN_S 0.12

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work = PTHREAD_COND_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static double spin_until;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *spinner(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&lock);
        while (now() >= spin_until) {
            pthread_cond_wait(&work, &lock);
        }
        double end = spin_until;
        pthread_mutex_unlock(&lock);
        while (now() < end) {
        }
    }
    return NULL;
}

static void start_pool(void) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    for (long i = 0; i < 2 * (cpus > 0 ? cpus : 1); i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, spinner, NULL) == 0) {
            pthread_detach(t);
        }
    }
}

void dgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k,
            const double *alpha, const double *a, const int *lda, const double *b,
            const int *ldb, const double *beta, double *c, const int *ldc, size_t lta,
            size_t ltb) {
    (void)ta; (void)tb; (void)m; (void)n; (void)k; (void)alpha; (void)a; (void)lda;
    (void)b; (void)ldb; (void)beta; (void)c; (void)ldc; (void)lta; (void)ltb;
    pthread_once(&once, start_pool);
    double end = now() + 1e-3;
    while (now() < end) {
    }
    pthread_mutex_lock(&lock);
    spin_until = now() + SPIN_S;
    pthread_cond_broadcast(&work);
    pthread_mutex_unlock(&lock);
}
