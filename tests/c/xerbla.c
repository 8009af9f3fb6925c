/* Illegal arguments: the program's own XERBLA (and cblas_xerbla) must receive the routine
 * name and parameter position the reference BLAS reports, and C must be left untouched.
 *
 * Both handlers here return instead of stopping the program (as the reference testers'
 * handlers do), so every case runs. Output: one "xerbla" / "cblas_xerbla" line per report,
 * one "case" line per call with whether C kept every bit, and "illegal N" at the end. The
 * run with the shim must print exactly what the run without it prints.
 */
#include <stdarg.h>

#include "common.h"

static int reports = 0;

/* Fortran XERBLA: SRNAME is CHARACTER*(*) (hidden length), INFO an INTEGER. */
void xerbla_(const char *srname, const int *info, size_t len) {
    char name[64];
    size_t n = len < sizeof name - 1 ? len : sizeof name - 1;
    memcpy(name, srname, n);
    while (n > 0 && name[n - 1] == ' ') n--;
    name[n] = 0;
    printf("  xerbla [%s] info=%d\n", name, *info);
    reports++;
}

/* Reference CBLAS error handler: parameter position, routine name, printf-style message. */
void cblas_xerbla(int p, const char *rout, const char *form, ...) {
    (void)form;
    printf("  cblas_xerbla [%s] p=%d\n", rout, p);
    reports++;
}

static double a[64], b[64], c[64], saved[64];
static int illegal = 0;

static void before(void) {
    fill(a, 64);
    fill(b, 64);
    fill(c, 64);
    memcpy(saved, c, sizeof c);
}

static void after(const char *what) {
    printf("case %s: C %s\n", what, memcmp(saved, c, sizeof c) == 0 ? "untouched" : "MODIFIED");
    printf("expect-xerbla\n");
    illegal++;
}

static void gemm(const char *what, char ta, char tb, int m, int n, int k, int lda, int ldb, int ldc) {
    double alpha = 1.5, beta = 0.5;
    before();
    dgemm_(&ta, &tb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc, 1, 1);
    after(what);
}

static void syrk(const char *what, char up, char tr, int n, int k, int lda, int ldc) {
    double alpha = 1.5, beta = 0.5;
    before();
    dsyrk_(&up, &tr, &n, &k, &alpha, a, &lda, &beta, c, &ldc, 1, 1);
    after(what);
}

static void cgemm(const char *what, int order, int ta, int tb, int m, int n, int k, int lda, int ldb, int ldc) {
    before();
    cblas_dgemm(order, ta, tb, m, n, k, 1.5, a, lda, b, ldb, 0.5, c, ldc);
    after(what);
}

static void csyrk(const char *what, int order, int up, int tr, int n, int k, int lda, int ldc) {
    before();
    cblas_dsyrk(order, up, tr, n, k, 1.5, a, lda, 0.5, c, ldc);
    after(what);
}

int main(void) {
    gemm("dgemm transa", 'X', 'N', 2, 2, 2, 2, 2, 2);
    gemm("dgemm transb", 'N', 'x', 2, 2, 2, 2, 2, 2);
    gemm("dgemm m<0", 'N', 'N', -1, 2, 2, 2, 2, 2);
    gemm("dgemm n<0", 'T', 'N', 2, -1, 2, 2, 2, 2);
    gemm("dgemm k<0", 'N', 'T', 2, 2, -1, 2, 2, 2);
    gemm("dgemm lda (N)", 'N', 'N', 4, 2, 2, 3, 2, 4);
    gemm("dgemm lda (T)", 'T', 'N', 2, 2, 4, 3, 4, 2);
    gemm("dgemm ldb (N)", 'N', 'N', 2, 2, 4, 2, 3, 2);
    gemm("dgemm ldb (T)", 'N', 'T', 2, 4, 2, 2, 3, 2);
    gemm("dgemm ldc", 'N', 'N', 4, 2, 2, 4, 2, 3);
    gemm("dgemm lda=0 with m=0", 'N', 'N', 0, 2, 2, 0, 2, 1);
    gemm("dgemm two errors", 'X', 'N', -1, 2, 2, 2, 2, 2);
    syrk("dsyrk uplo", 'X', 'N', 2, 2, 2, 2);
    syrk("dsyrk trans", 'U', 'X', 2, 2, 2, 2);
    syrk("dsyrk n<0", 'L', 'N', -1, 2, 2, 2);
    syrk("dsyrk k<0", 'u', 't', 2, -1, 2, 2);
    syrk("dsyrk lda (N)", 'U', 'N', 4, 2, 3, 4);
    syrk("dsyrk lda (T)", 'L', 'T', 2, 4, 3, 2);
    syrk("dsyrk ldc", 'U', 'N', 4, 2, 4, 3);
    cgemm("cblas_dgemm order", 0, NoTrans, NoTrans, 2, 2, 2, 2, 2, 2);
    cgemm("cblas_dgemm transa", ColMajor, 0, NoTrans, 2, 2, 2, 2, 2, 2);
    cgemm("cblas_dgemm transb", RowMajor, NoTrans, 7, 2, 2, 2, 2, 2, 2);
    cgemm("cblas_dgemm m<0 col", ColMajor, NoTrans, NoTrans, -1, 2, 2, 2, 2, 2);
    cgemm("cblas_dgemm m<0 row", RowMajor, NoTrans, NoTrans, -1, 2, 2, 2, 2, 2);
    cgemm("cblas_dgemm n<0 row", RowMajor, NoTrans, NoTrans, 2, -1, 2, 2, 2, 2);
    cgemm("cblas_dgemm k<0 row", RowMajor, Trans, NoTrans, 2, 2, -1, 2, 2, 2);
    cgemm("cblas_dgemm lda col", ColMajor, NoTrans, NoTrans, 4, 2, 2, 3, 2, 4);
    cgemm("cblas_dgemm lda row", RowMajor, NoTrans, NoTrans, 2, 2, 4, 3, 2, 2);
    cgemm("cblas_dgemm ldb row", RowMajor, NoTrans, Trans, 2, 4, 2, 2, 1, 4);
    cgemm("cblas_dgemm ldc row", RowMajor, NoTrans, NoTrans, 2, 4, 2, 2, 4, 3);
    csyrk("cblas_dsyrk order", 5, Upper, NoTrans, 2, 2, 2, 2);
    csyrk("cblas_dsyrk uplo", ColMajor, 3, NoTrans, 2, 2, 2, 2);
    csyrk("cblas_dsyrk trans", RowMajor, Upper, 1, 2, 2, 2, 2);
    csyrk("cblas_dsyrk n<0 row", RowMajor, Lower, NoTrans, -1, 2, 2, 2);
    csyrk("cblas_dsyrk k<0 col", ColMajor, Lower, Trans, 2, -1, 2, 2);
    csyrk("cblas_dsyrk lda row", RowMajor, Upper, NoTrans, 2, 4, 3, 2);
    csyrk("cblas_dsyrk lda col", ColMajor, Upper, NoTrans, 4, 2, 3, 4);
    csyrk("cblas_dsyrk ldc row", RowMajor, Upper, NoTrans, 4, 2, 2, 3);

    /* A legal call afterwards still computes (the handlers above did not stop the program). */
    int m = 3, n = 2, k = 4, lda = 3, ldb = 4, ldc = 3;
    double alpha = 1.0, beta = 0.0;
    fill(a, 64);
    fill(b, 64);
    dgemm_("N", "N", &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc, 1, 1);
    printf("legal c=%016llx\n", (unsigned long long)hash_bits(c, 6));
    expect_gemm("dgemm_", "col", 'N', 'N', m, n, k, lda, ldb, ldc, alpha, beta, 0);
    printf("illegal %d reports %d\n", illegal, reports);
    return 0;
}
