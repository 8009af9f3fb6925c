/* Concurrent dgemm_ calls on disjoint row blocks of one C (same ldc), the pattern of
 * OpenMP-parallel programs such as PySCF: each call's C spans memory that interleaves with
 * the other's, so a route that writes anything outside its own m x n elements (e.g. copies a
 * scratch buffer back over the whole span) corrupts the other thread's rows. Prints the
 * bits of C after many rounds, for comparison with the vendor alone.
 *
 * Build: gcc -O2 -pthread ab_threads.c -o ab_threads -lblas
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern void dgemm_(const char *, const char *, const int *, const int *, const int *, const double *, const double *,
                   const int *, const double *, const int *, const double *, double *, const int *, size_t, size_t);

enum { M = 64, N = 48, K = 40, ROUNDS = 300, THREADS = 4 };
static double a[M * K], b[K * N], c[M * N];

static void *work(void *arg) {
    int t = (int)(intptr_t)arg, rows = M / THREADS, ld = M, ldb = K, n = N, k = K;
    double alpha = 1.0, beta = 0.5;
    for (int r = 0; r < ROUNDS; r++)
        dgemm_("N", "N", &rows, &n, &k, &alpha, a + t * rows, &ld, b, &ldb, &beta, c + t * rows, &ld, 1, 1);
    return NULL;
}

int main(void) {
    uint64_t s = 7;
    for (int i = 0; i < M * K; i++) { s = s * 6364136223846793005ULL + 1; a[i] = (double)(s >> 40) / (1 << 24) - 0.5; }
    for (int i = 0; i < K * N; i++) { s = s * 6364136223846793005ULL + 1; b[i] = (double)(s >> 40) / (1 << 24) - 0.5; }
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, work, (void *)(intptr_t)t);
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    for (int i = 0; i < M * N; i++) {
        uint64_t u;
        memcpy(&u, &c[i], 8);
        printf("%016llx\n", (unsigned long long)u);
    }
    return 0;
}
