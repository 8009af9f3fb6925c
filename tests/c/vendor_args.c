/* Illegal and degenerate arguments over any vendor BLAS: with the shim, the program must see
 * exactly what its BLAS does without it, whatever the route: the same C (every bit, padding
 * included) and the same error-handler reports.
 *
 * The cases are the reference BLAS's argument checks one by one (each check of dgemm.f,
 * dsyrk.f, cblas_dgemm.c and cblas_dsyrk.c, in both layouts) plus the edges where vendors
 * differ from the reference: OpenBLAS accepts ld >= rows, so k = 0 with ldb = 0 scales C
 * there, while the reference reports it; OpenBLAS reports an illegal CBLAS layout through
 * xerbla_, the reference through cblas_xerbla. Both handlers here print and return.
 * Output: per case its name, the reports it caused and a hash of C; "cases N" at the end.
 * Cases named "... legal" are computed (a non-vendor route may round differently there).
 */
#include "common.h"

/* Fortran XERBLA: SRNAME is CHARACTER*(*) (hidden length), INFO an INTEGER. */
void xerbla_(const char *srname, const int *info, size_t len) {
    char name[64];
    size_t n = len < sizeof name - 1 ? len : sizeof name - 1;
    memcpy(name, srname, n);
    while (n > 0 && (name[n - 1] == ' ' || name[n - 1] == 0)) n--;
    name[n] = 0;
    printf("  xerbla [%s] info=%d\n", name, *info);
}

void cblas_xerbla(int p, const char *rout, const char *form, ...) {
    (void)form;
    printf("  cblas_xerbla [%s] p=%d\n", rout, p);
}

static double a[64], b[64], c[64];
static int cases = 0;

static void before(const char *what) {
    rng_state = 0x853c49e6748fea9bULL;
    fill(a, 64);
    fill(b, 64);
    fill(c, 64);
    printf("case %s\n", what);
    fflush(stdout);
}

static void after(void) {
    printf("  c=%016llx\n", (unsigned long long)hash_bits(c, 64));
    fflush(stdout);
    cases++;
}

static void gemm(const char *what, char ta, char tb, int m, int n, int k, int lda, int ldb, int ldc, double beta) {
    double alpha = 1.5;
    before(what);
    dgemm_(&ta, &tb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc, 1, 1);
    after();
}

static void syrk(const char *what, char up, char tr, int n, int k, int lda, int ldc, double beta) {
    double alpha = 1.5;
    before(what);
    dsyrk_(&up, &tr, &n, &k, &alpha, a, &lda, &beta, c, &ldc, 1, 1);
    after();
}

static void cgemm(const char *what, int order, int ta, int tb, int m, int n, int k, int lda, int ldb, int ldc,
                  double beta) {
    before(what);
    cblas_dgemm(order, ta, tb, m, n, k, 1.5, a, lda, b, ldb, beta, c, ldc);
    after();
}

static void csyrk(const char *what, int order, int up, int tr, int n, int k, int lda, int ldc, double beta) {
    before(what);
    cblas_dsyrk(order, up, tr, n, k, 1.5, a, lda, beta, c, ldc);
    after();
}

int main(void) {
    /* dgemm.f, one check at a time */
    gemm("dgemm transa", 'X', 'N', 2, 2, 2, 2, 2, 2, 0.5);
    gemm("dgemm transb", 'N', 'x', 2, 2, 2, 2, 2, 2, 0.5);
    gemm("dgemm m<0", 'N', 'N', -1, 2, 2, 2, 2, 2, 0.5);
    gemm("dgemm n<0", 'T', 'N', 2, -1, 2, 2, 2, 2, 0.5);
    gemm("dgemm k<0", 'N', 'T', 2, 2, -1, 2, 2, 2, 0.5);
    gemm("dgemm lda (N)", 'N', 'N', 4, 2, 2, 3, 2, 4, 0.5);
    gemm("dgemm lda (T)", 'T', 'N', 2, 2, 4, 3, 4, 2, 0.5);
    gemm("dgemm ldb (N)", 'N', 'N', 2, 2, 4, 2, 3, 2, 0.5);
    gemm("dgemm ldb (T)", 'N', 'T', 2, 4, 2, 2, 3, 2, 0.5);
    gemm("dgemm ldc", 'N', 'N', 4, 2, 2, 4, 2, 3, 0.5);
    gemm("dgemm two errors", 'X', 'N', -1, 2, 2, 2, 2, 2, 0.5);
    /* dgemm: zero sizes with zero leading dimensions (ld >= rows, but < max(1, rows)) */
    gemm("dgemm k=0 ldb=0", 'N', 'N', 2, 2, 0, 2, 0, 2, 0.5);
    gemm("dgemm k=0 ldb=0 beta=1", 'N', 'N', 2, 2, 0, 2, 0, 2, 1.0);
    gemm("dgemm k=0 ldb=0 beta=0", 'N', 'N', 2, 2, 0, 2, 0, 2, 0.0);
    gemm("dgemm k=0 lda=0 (T)", 'T', 'N', 2, 2, 0, 0, 0, 2, 0.5);
    gemm("dgemm k=0 ldb=0 (T)", 'N', 'T', 2, 2, 0, 2, 2, 2, 0.5);
    gemm("dgemm m=0 ldc=0", 'N', 'N', 0, 2, 2, 1, 2, 0, 0.5);
    gemm("dgemm m=0 lda=0", 'N', 'N', 0, 2, 2, 0, 2, 1, 0.5);
    gemm("dgemm m=0 lda=0 ldc=0", 'N', 'N', 0, 2, 2, 0, 2, 0, 0.5);
    gemm("dgemm n=0 ldb=0 (T)", 'N', 'T', 2, 0, 2, 2, 0, 2, 0.5);
    gemm("dgemm all zero", 'N', 'N', 0, 0, 0, 0, 0, 0, 0.5);
    gemm("dgemm m=0 legal", 'N', 'N', 0, 2, 2, 1, 2, 1, 0.5);
    gemm("dgemm n=0 legal", 'N', 'N', 2, 0, 2, 2, 2, 2, 0.5);
    gemm("dgemm k=0 legal", 'N', 'N', 2, 2, 0, 2, 1, 2, 0.5);
    gemm("dgemm beta=1 legal", 'N', 'N', 2, 2, 2, 2, 2, 2, 1.0);
    /* dsyrk.f */
    syrk("dsyrk uplo", 'X', 'N', 2, 2, 2, 2, 0.5);
    syrk("dsyrk trans", 'U', 'X', 2, 2, 2, 2, 0.5);
    syrk("dsyrk n<0", 'L', 'N', -1, 2, 2, 2, 0.5);
    syrk("dsyrk k<0", 'u', 't', 2, -1, 2, 2, 0.5);
    syrk("dsyrk lda (N)", 'U', 'N', 4, 2, 3, 4, 0.5);
    syrk("dsyrk lda (T)", 'L', 'T', 2, 4, 3, 2, 0.5);
    syrk("dsyrk ldc", 'U', 'N', 4, 2, 4, 3, 0.5);
    syrk("dsyrk n=0 ldc=0", 'U', 'N', 0, 2, 1, 0, 0.5);
    syrk("dsyrk n=0 lda=0", 'L', 'N', 0, 2, 0, 1, 0.5);
    syrk("dsyrk k=0 lda=0 (T)", 'U', 'T', 2, 0, 0, 2, 0.5);
    syrk("dsyrk k=0 legal", 'L', 'N', 2, 0, 2, 2, 0.5);
    syrk("dsyrk n=0 legal", 'U', 'T', 0, 2, 2, 1, 0.5);
    /* cblas_dgemm.c, both layouts */
    cgemm("cblas_dgemm layout 0", 0, NoTrans, NoTrans, 2, 2, 2, 2, 2, 2, 0.5);
    cgemm("cblas_dgemm layout 103", 103, NoTrans, NoTrans, 2, 2, 2, 2, 2, 2, 0.5);
    cgemm("cblas_dgemm transa col", ColMajor, 0, NoTrans, 2, 2, 2, 2, 2, 2, 0.5);
    cgemm("cblas_dgemm transa row", RowMajor, 0, NoTrans, 2, 2, 2, 2, 2, 2, 0.5);
    cgemm("cblas_dgemm transb col", ColMajor, NoTrans, 7, 2, 2, 2, 2, 2, 2, 0.5);
    cgemm("cblas_dgemm transb row", RowMajor, NoTrans, 7, 2, 2, 2, 2, 2, 2, 0.5);
    cgemm("cblas_dgemm m<0 col", ColMajor, NoTrans, NoTrans, -1, 2, 2, 2, 2, 2, 0.5);
    cgemm("cblas_dgemm m<0 row", RowMajor, NoTrans, NoTrans, -1, 2, 2, 2, 2, 2, 0.5);
    cgemm("cblas_dgemm n<0 col", ColMajor, NoTrans, NoTrans, 2, -1, 2, 2, 2, 2, 0.5);
    cgemm("cblas_dgemm n<0 row", RowMajor, NoTrans, NoTrans, 2, -1, 2, 2, 2, 2, 0.5);
    cgemm("cblas_dgemm k<0 row", RowMajor, Trans, NoTrans, 2, 2, -1, 2, 2, 2, 0.5);
    cgemm("cblas_dgemm lda col", ColMajor, NoTrans, NoTrans, 4, 2, 2, 3, 2, 4, 0.5);
    cgemm("cblas_dgemm lda row", RowMajor, NoTrans, NoTrans, 2, 2, 4, 3, 2, 2, 0.5);
    cgemm("cblas_dgemm ldb col", ColMajor, NoTrans, NoTrans, 2, 2, 4, 2, 3, 2, 0.5);
    cgemm("cblas_dgemm ldb row", RowMajor, NoTrans, Trans, 2, 4, 2, 2, 1, 4, 0.5);
    cgemm("cblas_dgemm ldc col", ColMajor, NoTrans, NoTrans, 4, 2, 2, 4, 2, 3, 0.5);
    cgemm("cblas_dgemm ldc row", RowMajor, NoTrans, NoTrans, 2, 4, 2, 2, 4, 3, 0.5);
    cgemm("cblas_dgemm k=0 ldb=0 col", ColMajor, NoTrans, NoTrans, 2, 2, 0, 2, 0, 2, 0.5);
    cgemm("cblas_dgemm k=0 lda=0 row", RowMajor, NoTrans, NoTrans, 2, 2, 0, 0, 2, 2, 0.5);
    cgemm("cblas_dgemm m=0 ldc=0 col", ColMajor, NoTrans, NoTrans, 0, 2, 2, 1, 2, 0, 0.5);
    cgemm("cblas_dgemm n=0 ldc=0 row", RowMajor, NoTrans, NoTrans, 2, 0, 2, 2, 1, 0, 0.5);
    cgemm("cblas_dgemm k=0 legal row", RowMajor, NoTrans, NoTrans, 2, 2, 0, 1, 2, 2, 0.5);
    /* cblas_dsyrk.c */
    csyrk("cblas_dsyrk layout 5", 5, Upper, NoTrans, 2, 2, 2, 2, 0.5);
    csyrk("cblas_dsyrk uplo col", ColMajor, 3, NoTrans, 2, 2, 2, 2, 0.5);
    csyrk("cblas_dsyrk uplo row", RowMajor, 3, NoTrans, 2, 2, 2, 2, 0.5);
    csyrk("cblas_dsyrk trans row", RowMajor, Upper, 1, 2, 2, 2, 2, 0.5);
    csyrk("cblas_dsyrk n<0 row", RowMajor, Lower, NoTrans, -1, 2, 2, 2, 0.5);
    csyrk("cblas_dsyrk k<0 col", ColMajor, Lower, Trans, 2, -1, 2, 2, 0.5);
    csyrk("cblas_dsyrk lda row", RowMajor, Upper, NoTrans, 2, 4, 3, 2, 0.5);
    csyrk("cblas_dsyrk lda col", ColMajor, Upper, NoTrans, 4, 2, 3, 4, 0.5);
    csyrk("cblas_dsyrk ldc row", RowMajor, Upper, NoTrans, 4, 2, 2, 3, 0.5);
    csyrk("cblas_dsyrk k=0 lda=0 row", RowMajor, Upper, NoTrans, 2, 0, 0, 2, 0.5);
    csyrk("cblas_dsyrk n=0 ldc=0 col", ColMajor, Lower, NoTrans, 0, 2, 1, 0, 0.5);
    /* legal calls afterwards still compute */
    gemm("dgemm legal", 'N', 'T', 3, 2, 4, 3, 2, 3, 0.5);
    syrk("dsyrk legal", 'L', 'T', 3, 2, 2, 3, 0.5);
    cgemm("cblas_dgemm legal row", RowMajor, Trans, NoTrans, 2, 3, 2, 2, 3, 3, 0.5);
    printf("cases %d\n", cases);
    return 0;
}
