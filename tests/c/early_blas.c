/* A preloaded library that calls BLAS from its constructor, before the shim's constructor
 * may have run: that call must be traced as this process's own (its pid, no parent), with a
 * real start time. Built with -shared -fPIC; preloaded after the shim. */
#include "common.h"

__attribute__((constructor)) static void early_call(void) {
    double a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4] = {0, 0, 0, 0};
    int n = 2;
    double alpha = 1.0, beta = 0.0;
    dgemm_("N", "N", &n, &n, &n, &alpha, a, &n, b, &n, &beta, c, &n, 1, 1);
    printf("early c = %g %g %g %g\n", c[0], c[1], c[2], c[3]);
}
