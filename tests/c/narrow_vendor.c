/* A stand-in OpenBLAS for the shim's vendor-thread rules: dgemm_ (column-major, no
 * transposes, exact naive loops) plus openblas_set_num_threads / openblas_get_num_threads /
 * openblas_get_parallel.
 * Each dgemm_ call notes the thread count set at its start and holds the CPU for about a
 * millisecond, so that calls from several threads overlap. At exit it prints on stderr
 * "narrow-vendor: fewer N all M final F": the calls that ran at fewer than the 16 threads it
 * starts with, those that ran at 16 or more, and the count set at the end.
 *
 * Build: cc -shared -fPIC narrow_vendor.c -o libnarrow_vendor.so
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static atomic_int threads = 16;
static atomic_int fewer, all;

void openblas_set_num_threads(int n) { atomic_store(&threads, n < 1 ? 1 : n); }
int openblas_get_num_threads(void) { return atomic_load(&threads); }
/* A pthreads build, unless NARROW_VENDOR_PARALLEL names another model (2: OpenMP). */
int openblas_get_parallel(void) {
    const char *model = getenv("NARROW_VENDOR_PARALLEL");
    return model ? atoi(model) : 1;
}

void dgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k,
            const double *alpha, const double *a, const int *lda, const double *b,
            const int *ldb, const double *beta, double *c, const int *ldc) {
    (void)ta;
    (void)tb;
    atomic_fetch_add(atomic_load(&threads) < 16 ? &fewer : &all, 1);
    for (int j = 0; j < *n; j++)
        for (int i = 0; i < *m; i++) {
            double s = 0.0;
            for (int p = 0; p < *k; p++) s += a[i + p * *lda] * b[p + j * *ldb];
            double *cij = &c[i + j * *ldc];
            *cij = *alpha * s + (*beta == 0.0 ? 0.0 : *beta * *cij);
        }
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 1000000L);
}

__attribute__((destructor)) static void report(void) {
    fprintf(stderr, "narrow-vendor: fewer %d all %d final %d\n", atomic_load(&fewer),
            atomic_load(&all), atomic_load(&threads));
}
