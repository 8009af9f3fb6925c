/* BLAS calls from inside an OpenMP parallel region and from outside it, as PySCF's C code
 * makes them: each of the team's threads makes `calls` 48 x 48 x 48 dgemm_ calls, then the
 * main thread alone makes `calls` more. Prints one hash over every result (identical with
 * and without the shim, whatever thread count the vendor ran at).
 *
 * Usage: omp_team [THREADS [CALLS]]   (default 4 x 20); build with -fopenmp
 */
#include <omp.h>

#include "common.h"

enum { N = 48 };

static uint64_t run(int seed, int calls) {
    static _Thread_local double a[N * N], b[N * N], c[N * N];
    for (int i = 0; i < N * N; i++) {
        a[i] = 1.0 / (i + seed + 1);
        b[i] = 1.0 - 1.0 / (i + 2);
        c[i] = 0.0;
    }
    int n = N;
    double alpha = 1.0, beta = 0.5;
    uint64_t h = 0;
    for (int i = 0; i < calls; i++) {
        dgemm_("N", "N", &n, &n, &n, &alpha, a, &n, b, &n, &beta, c, &n, 1, 1);
        h = h * 31 + hash_bits(c, (size_t)N * N);
    }
    return h;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    int calls = argc > 2 ? atoi(argv[2]) : 20;
    uint64_t each[64] = {0};
    if (threads < 1 || threads > 64) return 2;
#pragma omp parallel num_threads(threads)
    each[omp_get_thread_num()] = run(omp_get_thread_num(), calls);
    uint64_t h = run(threads, calls);
    for (int t = 0; t < threads; t++) h = h * 31 + each[t];
    printf("team %d calls %d hash %016llx\n", threads, calls, (unsigned long long)h);
    return 0;
}
