/* ILP64 entry points (64-bit integers): dgemm_64_, dsyrk_64_, cblas_dgemm64_, cblas_dsyrk64_.
 *
 * No Debian library exports these names (Debian's libblas64.so.3 exports plain dgemm_ etc.
 * with 64-bit integers), so this program looks the names up at run time: under the shim they
 * exist, and each result is compared bit for bit with Debian's ILP64 reference BLAS, loaded
 * privately with dlopen. The data are small integers, so every product and sum is exact and
 * any correct summation order gives the same bits.
 *
 * Debian's libblas64 shares the LP64 names, so a program linked against it calls the shim's
 * LP64 dgemm_ with 64-bit integers; that only works by accident (little-endian, small
 * values). Use the *64_ names, or OZAKI_VENDOR_BLAS, for ILP64 programs.
 *
 * One case uses leading dimensions above 2^32 with a single live column: a shim that read
 * only 32 bits of them would record (and use) the wrong value.
 *
 * Prints "ilp64 ok N" when all N comparisons matched; "MISMATCH ..." lines otherwise; exits
 * 3 when the ILP64 names or the reference library are missing.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>

#include "common.h"

#include "ilp64_types.h"

static void ifill(double *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = (double)((int)(rnd() * 8.0));
}

static int mismatches = 0, compared = 0;

static void check(const char *what, const double *x, const double *y, size_t n) {
    compared++;
    if (memcmp(x, y, n * sizeof(double)) != 0) {
        mismatches++;
        printf("MISMATCH %s\n", what);
    }
}

int main(void) {
    /* RTLD_DEEPBIND: libblas64's cblas_dgemm calls its own dgemm_ (64-bit integers), not the
     * LP64 dgemm_ that the preloaded shim puts first in the global scope. */
    void *ref = dlopen("libblas64.so.3", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    gemm64_t s_gemm = (gemm64_t)dlsym(RTLD_DEFAULT, "dgemm_64_");
    syrk64_t s_syrk = (syrk64_t)dlsym(RTLD_DEFAULT, "dsyrk_64_");
    cgemm64_t s_cgemm = (cgemm64_t)dlsym(RTLD_DEFAULT, "cblas_dgemm64_");
    csyrk64_t s_csyrk = (csyrk64_t)dlsym(RTLD_DEFAULT, "cblas_dsyrk64_");
    if (!ref || !s_gemm || !s_syrk || !s_cgemm || !s_csyrk) {
        printf("missing: %s%s%s%s%s\n", ref ? "" : "libblas64.so.3 ", s_gemm ? "" : "dgemm_64_ ",
               s_syrk ? "" : "dsyrk_64_ ", s_cgemm ? "" : "cblas_dgemm64_ ", s_csyrk ? "" : "cblas_dsyrk64_");
        return 3;
    }
    gemm64_t r_gemm = (gemm64_t)dlsym(ref, "dgemm_");
    syrk64_t r_syrk = (syrk64_t)dlsym(ref, "dsyrk_");
    cgemm64_t r_cgemm = (cgemm64_t)dlsym(ref, "cblas_dgemm");
    csyrk64_t r_csyrk = (csyrk64_t)dlsym(ref, "cblas_dsyrk");

    static const I sizes[][3] = {{0, 2, 3}, {1, 1, 1}, {5, 3, 4}, {9, 7, 11}};
    const double alpha = 0.5, beta = -2.0;
    char label[128];
    for (size_t s = 0; s < 4; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                I m = sizes[s][0], n = sizes[s][1], k = sizes[s][2];
                I lda = (ta ? k : m) + 1, ldb = (tb ? n : k) + 2, ldc = m + 1;
                size_t na = (size_t)(lda * (ta ? m : k)), nb = (size_t)(ldb * (tb ? k : n)), nc = (size_t)(ldc * n);
                double *a = calloc(na + 1, 8), *b = calloc(nb + 1, 8), *c1 = calloc(nc + 1, 8),
                       *c2 = calloc(nc + 1, 8);
                ifill(a, na);
                ifill(b, nb);
                ifill(c1, nc);
                memcpy(c2, c1, nc * 8);
                char fa = "NT"[ta], fb = "NT"[tb];
                r_gemm(&fa, &fb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c1, &ldc, 1, 1);
                s_gemm(&fa, &fb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c2, &ldc, 1, 1);
                snprintf(label, sizeof label, "dgemm_64_ %c%c %" PRId64 "x%" PRId64 "x%" PRId64, fa, fb, m, n, k);
                check(label, c1, c2, nc);
                expect_gemm("dgemm_64_", "col", fa, fb, m, n, k, lda, ldb, ldc, alpha, beta, 1);

                /* Row-major CBLAS with the same buffers (reinterpreted). */
                I rlda = ta ? m : k, rldb = tb ? k : n, rldc = n;
                rlda += 1; rldb += 1; rldc += 1;
                size_t rna = (size_t)(rlda * (ta ? k : m)), rnb = (size_t)(rldb * (tb ? n : k)),
                       rnc = (size_t)(rldc * m);
                double *ra = calloc(rna + 1, 8), *rb = calloc(rnb + 1, 8), *rc1 = calloc(rnc + 1, 8),
                       *rc2 = calloc(rnc + 1, 8);
                ifill(ra, rna);
                ifill(rb, rnb);
                ifill(rc1, rnc);
                memcpy(rc2, rc1, rnc * 8);
                int cta = ta ? Trans : NoTrans, ctb = tb ? Trans : NoTrans;
                r_cgemm(RowMajor, cta, ctb, m, n, k, alpha, ra, rlda, rb, rldb, beta, rc1, rldc);
                s_cgemm(RowMajor, cta, ctb, m, n, k, alpha, ra, rlda, rb, rldb, beta, rc2, rldc);
                snprintf(label, sizeof label, "cblas_dgemm64_ row %c%c %" PRId64 "x%" PRId64 "x%" PRId64, fa, fb, m,
                         n, k);
                check(label, rc1, rc2, rnc);
                expect_gemm("cblas_dgemm64_", "row", fa, fb, m, n, k, rlda, rldb, rldc, alpha, beta, 1);
                free(a); free(b); free(c1); free(c2); free(ra); free(rb); free(rc1); free(rc2);
            }
    for (size_t s = 0; s < 4; s++)
        for (int up = 0; up < 2; up++)
            for (int t = 0; t < 2; t++) {
                I n = sizes[s][1], k = sizes[s][2];
                I lda = (t ? k : n) + 3, ldc = n + 2;
                size_t na = (size_t)(lda * (t ? n : k)), nc = (size_t)(ldc * n);
                double *a = calloc(na + 1, 8), *c1 = calloc(nc + 1, 8), *c2 = calloc(nc + 1, 8);
                ifill(a, na);
                ifill(c1, nc);
                memcpy(c2, c1, nc * 8);
                char fu = "UL"[up], ft = "NT"[t];
                r_syrk(&fu, &ft, &n, &k, &alpha, a, &lda, &beta, c1, &ldc, 1, 1);
                s_syrk(&fu, &ft, &n, &k, &alpha, a, &lda, &beta, c2, &ldc, 1, 1);
                snprintf(label, sizeof label, "dsyrk_64_ %c%c %" PRId64 "x%" PRId64, fu, ft, n, k);
                check(label, c1, c2, nc);
                expect_syrk("dsyrk_64_", "col", fu, ft, n, k, lda, ldc, alpha, beta, 1);
                memcpy(c2, c1, nc * 8);
                r_csyrk(ColMajor, up ? Lower : Upper, t ? Trans : NoTrans, n, k, alpha, a, lda, beta, c1, ldc);
                s_csyrk(ColMajor, up ? Lower : Upper, t ? Trans : NoTrans, n, k, alpha, a, lda, beta, c2, ldc);
                snprintf(label, sizeof label, "cblas_dsyrk64_ %c%c %" PRId64 "x%" PRId64, fu, ft, n, k);
                check(label, c1, c2, nc);
                expect_syrk("cblas_dsyrk64_", "col", fu, ft, n, k, lda, ldc, alpha, beta, 1);
                free(a); free(c1); free(c2);
            }

    /* Leading dimensions above 2^32, one live column each. */
    {
        I m = 3, n = 1, k = 1, big = ((I)1 << 32) + 3;
        double a[3], b[1], c1[3], c2[3];
        ifill(a, 3);
        ifill(b, 1);
        ifill(c1, 3);
        memcpy(c2, c1, sizeof c1);
        r_gemm("N", "N", &m, &n, &k, &alpha, a, &big, b, &big, &beta, c1, &big, 1, 1);
        s_gemm("N", "N", &m, &n, &k, &alpha, a, &big, b, &big, &beta, c2, &big, 1, 1);
        check("dgemm_64_ lda=ldb=ldc=2^32+3", c1, c2, 3);
        expect_gemm("dgemm_64_", "col", 'N', 'N', m, n, k, big, big, big, alpha, beta, 1);
    }
    printf("ilp64 %s %d\n", mismatches ? "FAILED" : "ok", compared);
    return mismatches ? 1 : 0;
}
