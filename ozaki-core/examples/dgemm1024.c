/* One timed n x n x n dgemm_ (default n = 1024) for BENCHMARKS.md (cpu-ozaki section):
 * gcc -O2 -o dgemm1024 ozaki-core/examples/dgemm1024.c -lblas; run with and without
 * LD_PRELOAD=target/release/libozaki_shim.so OZAKI_ROUTE=cpu-ozaki. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
void dgemm_(const char*, const char*, const int*, const int*, const int*, const double*, const double*, const int*, const double*, const int*, const double*, double*, const int*);
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1024;
    double *a = malloc(sizeof(double) * n * n), *b = malloc(sizeof(double) * n * n), *c = malloc(sizeof(double) * n * n);
    srand(1);
    for (long i = 0; i < (long)n * n; i++) { a[i] = rand() / (double)RAND_MAX - 0.5; b[i] = rand() / (double)RAND_MAX - 0.5; c[i] = 0; }
    double one = 1.0, zero = 0.0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    dgemm_("N", "N", &n, &n, &n, &one, a, &n, b, &n, &zero, c, &n);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("n=%d seconds=%.3f c[0]=%.17g\n", n, (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec), c[0]);
    return 0;
}
