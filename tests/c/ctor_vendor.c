/* A "vendor BLAS" for OZAKI_VENDOR_BLAS whose constructor calls dgemm_ (some BLAS libraries
 * self-test or warm up at load): the shim loads it at the program's first call, and that
 * nested call must not wait for the shim's own half-finished set-up. Its dgemm_ is a plain
 * triple loop for the no-transpose case (all the test program needs). Built -shared -fPIC. */
#include <stdio.h>
#include <stddef.h>

void dgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k, const double *alpha,
            const double *a, const int *lda, const double *b, const int *ldb, const double *beta, double *c,
            const int *ldc, size_t lta, size_t ltb) {
    (void)ta, (void)tb, (void)lta, (void)ltb;
    for (int j = 0; j < *n; j++)
        for (int i = 0; i < *m; i++) {
            double s = 0;
            for (int l = 0; l < *k; l++) s += a[i + l * *lda] * b[l + j * *ldb];
            c[i + j * *ldc] = *alpha * s + *beta * c[i + j * *ldc];
        }
}

__attribute__((constructor)) static void warm_up(void) {
    double a[4] = {1, 2, 3, 4}, b[4] = {2, 0, 0, 2}, c[4] = {0, 0, 0, 0};
    int n = 2;
    double alpha = 1.0, beta = 0.0;
    /* Through the global scope: the preloaded shim's dgemm_ when it is there. */
    dgemm_("N", "N", &n, &n, &n, &alpha, a, &n, b, &n, &beta, c, &n, 1, 1);
    printf("vendor constructor c = %g %g %g %g\n", c[0], c[1], c[2], c[3]);
}
