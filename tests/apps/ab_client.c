/* A small BLAS client for the A/B tests (ozaki-cli/tests/ab_client.rs): one dgemm_ and one
 * dsyrk_ on fixed pseudo-random data with beta != 0 (so C's old values matter), printing
 * every element of both results as the hex of its bits, one per line, so two runs can be
 * compared bit for bit.
 *
 * Build: gcc -O2 ab_client.c -o ab_client -lblas
 * Run:   ./ab_client [M=37] [N=29] [K=300]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

extern void dgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k, const double *alpha,
                   const double *a, const int *lda, const double *b, const int *ldb, const double *beta, double *c,
                   const int *ldc, size_t, size_t);
extern void dsyrk_(const char *uplo, const char *trans, const int *n, const int *k, const double *alpha,
                   const double *a, const int *lda, const double *beta, double *c, const int *ldc, size_t, size_t);

static uint64_t s = 2026;
static double rnd(void) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    /* Spread exponents a little so summation order shows in the last bits. */
    return ((double)(s >> 11) / 9007199254740992.0 - 0.5) * (1 << (s >> 60 & 7));
}

static void dump(const double *x, int rows, int cols, int ld) {
    for (int j = 0; j < cols; j++)
        for (int i = 0; i < rows; i++) {
            uint64_t u;
            memcpy(&u, &x[i + (size_t)j * ld], 8);
            printf("%016llx\n", (unsigned long long)u);
        }
}

int main(int argc, char **argv) {
    int m = argc > 1 ? atoi(argv[1]) : 37, n = argc > 2 ? atoi(argv[2]) : 29, k = argc > 3 ? atoi(argv[3]) : 300;
    int ldc = m + 3;
    double alpha = 1.5, beta = -0.75;
    double *a = malloc(sizeof(double) * m * k), *b = malloc(sizeof(double) * k * n);
    double *c = malloc(sizeof(double) * ldc * n), *d = malloc(sizeof(double) * ldc * m);
    for (int i = 0; i < m * k; i++) a[i] = rnd();
    for (int i = 0; i < k * n; i++) b[i] = rnd();
    for (int i = 0; i < ldc * n; i++) c[i] = rnd();
    for (int i = 0; i < ldc * m; i++) d[i] = rnd();
    dgemm_("N", "N", &m, &n, &k, &alpha, a, &m, b, &k, &beta, c, &ldc, 1, 1);
    dump(c, ldc, n, ldc); /* the whole array: rows m..ldc-1 must stay untouched */
    dsyrk_("L", "N", &m, &k, &alpha, a, &m, &beta, d, &ldc, 1, 1);
    dump(d, ldc, m, ldc); /* the upper triangle must stay untouched too */
    free(a); free(b); free(c); free(d);
    return 0;
}
