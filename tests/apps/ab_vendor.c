/* A stand-in "vendor BLAS" for the A/B tests (ozaki-cli/tests/ab_client.rs): dgemm_ and dsyrk_
 * computed correctly but with the inner sum in reverse order and alpha applied last, so
 * its results differ from the reference BLAS (and from the shim's built-in route, which
 * follows the reference's order) in the last bits. That makes "the program got the
 * vendor's result" observable bit for bit.
 *
 * Build: gcc -O2 -shared -fPIC ab_vendor.c -o libab_vendor.so
 * Use:   LD_PRELOAD=./libab_vendor.so prog       (the vendor itself)
 *        OZAKI_VENDOR_BLAS=./libab_vendor.so LD_PRELOAD=libozaki_shim.so prog
 * Arguments are assumed legal (the shim checks them before any route runs).
 */
#include <stddef.h>

static int up(char c) { return c >= 'a' && c <= 'z' ? c - 32 : c; }

void dgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k, const double *alpha,
            const double *a, const int *lda, const double *b, const int *ldb, const double *beta, double *c,
            const int *ldc, size_t lta, size_t ltb) {
    (void)lta; (void)ltb;
    int tra = up(*ta) != 'N', trb = up(*tb) != 'N';
    for (int j = 0; j < *n; j++)
        for (int i = 0; i < *m; i++) {
            double s = 0;
            for (int l = *k - 1; l >= 0; l--) {
                double x = tra ? a[l + (size_t)i * *lda] : a[i + (size_t)l * *lda];
                double y = trb ? b[j + (size_t)l * *ldb] : b[l + (size_t)j * *ldb];
                s += x * y;
            }
            double *cij = &c[i + (size_t)j * *ldc];
            *cij = *beta == 0 ? *alpha * s : *alpha * s + *beta * *cij;
        }
}

void dsyrk_(const char *uplo, const char *trans, const int *n, const int *k, const double *alpha, const double *a,
            const int *lda, const double *beta, double *c, const int *ldc, size_t lu, size_t lt) {
    (void)lu; (void)lt;
    int upper = up(*uplo) == 'U', tr = up(*trans) != 'N';
    for (int j = 0; j < *n; j++)
        for (int i = upper ? 0 : j; i < (upper ? j + 1 : *n); i++) {
            double s = 0;
            for (int l = *k - 1; l >= 0; l--) {
                double x = tr ? a[l + (size_t)i * *lda] : a[i + (size_t)l * *lda];
                double y = tr ? a[l + (size_t)j * *lda] : a[j + (size_t)l * *lda];
                s += x * y;
            }
            double *cij = &c[i + (size_t)j * *ldc];
            *cij = *beta == 0 ? *alpha * s : *alpha * s + *beta * *cij;
        }
}
