/* One dgemm_ of small integers (exact in every route), its result printed: the program the
 * load-time tests (early_blas.c, ctor_vendor.c) run. */
#include "common.h"

int main(void) {
    double a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, -1, 2, 1, 0}, c[4] = {1, 1, 1, 1};
    int m = 2, n = 2, k = 3, lda = 2, ldb = 3, ldc = 2;
    double alpha = 1.0, beta = 1.0;
    dgemm_("N", "N", &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc, 1, 1);
    printf("main c = %g %g %g %g\n", c[0], c[1], c[2], c[3]);
    return 0;
}
