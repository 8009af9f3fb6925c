/* Every transpose / uplo / layout combination of dgemm_, dsyrk_, cblas_dgemm and cblas_dsyrk,
 * with edge sizes (0, 1, odd), alpha and beta in {0, 1, other} and odd leading dimensions.
 *
 * Bytes the BLAS must not read are NaN (padding rows of A and B, all of C when beta == 0),
 * and the padding rows of C hold values that must come back unchanged: the hash printed per
 * call covers the whole C buffer. See common.h for the output format.
 *
 * Usage: combos [fortran|cblas|all]   (default all)
 */
#include "common.h"

static const int gemm_sizes[][3] = {{0, 3, 2}, {3, 0, 2}, {3, 2, 0}, {1, 1, 1}, {2, 3, 1},
                                    {5, 3, 4}, {7, 5, 9}, {17, 13, 11}};
static const int syrk_sizes[][2] = {{0, 2}, {3, 0}, {1, 1}, {4, 3}, {7, 9}, {13, 5}};
static const double alphas[] = {1.0, 0.0, -0.75};
static const double betas[] = {0.0, 1.0, 0.5};
static const int pads[] = {0, 3};

/* An operand stored with `lines` lines of `ld` elements, of which the first `live` are used. */
static double *operand(int live, int ld, int lines) {
    size_t n = (size_t)ld * (size_t)(lines > 0 ? lines : 1);
    double *x = malloc(n * sizeof(double));
    for (int j = 0; j < (lines > 0 ? lines : 1); j++)
        for (int i = 0; i < ld; i++) x[(size_t)j * ld + i] = (i < live && j < lines) ? rnd() : NAN;
    return x;
}

/* C: live part random (or NaN when beta == 0: it must not be read), padding rows random
 * sentinels that must survive. */
static double *output(int live, int ld, int lines, double beta) {
    size_t n = (size_t)ld * (size_t)(lines > 0 ? lines : 1);
    double *c = malloc(n * sizeof(double));
    fill(c, n);
    if (beta == 0.0)
        for (int j = 0; j < lines; j++)
            for (int i = 0; i < live; i++) c[(size_t)j * ld + i] = NAN;
    return c;
}

static size_t len(int ld, int lines) { return (size_t)ld * (size_t)(lines > 0 ? lines : 1); }

static int run_gemm(int cblas) {
    const char *tflags = "NTCntc";
    int calls = 0;
    for (int layout = 0; layout < (cblas ? 2 : 1); layout++) {
        int row = layout == 1;
        for (int ita = 0; ita < 3; ita++)
            for (int itb = 0; itb < 3; itb++)
                for (size_t s = 0; s < sizeof gemm_sizes / sizeof gemm_sizes[0]; s++)
                    for (int ia = 0; ia < 3; ia++)
                        for (int ib = 0; ib < 3; ib++)
                            for (int ip = 0; ip < 2; ip++) {
                                int m = gemm_sizes[s][0], n = gemm_sizes[s][1], k = gemm_sizes[s][2];
                                double alpha = alphas[ia], beta = betas[ib];
                                int ta_t = ita != 0, tb_t = itb != 0;
                                /* Per operand: live length of a line and number of lines. */
                                int a_live, a_lines, b_live, b_lines, c_live, c_lines;
                                if (!row) {
                                    a_live = ta_t ? k : m; a_lines = ta_t ? m : k;
                                    b_live = tb_t ? n : k; b_lines = tb_t ? k : n;
                                    c_live = m; c_lines = n;
                                } else {
                                    a_live = ta_t ? m : k; a_lines = ta_t ? k : m;
                                    b_live = tb_t ? k : n; b_lines = tb_t ? n : k;
                                    c_live = n; c_lines = m;
                                }
                                int pad = pads[ip];
                                int lda = imax(1, a_live) + pad, ldb = imax(1, b_live) + pad,
                                    ldc = imax(1, c_live) + pad;
                                double *a = operand(a_live, lda, a_lines);
                                double *b = operand(b_live, ldb, b_lines);
                                double *c = output(c_live, ldc, c_lines, beta);
                                char ta, tb;
                                if (cblas) {
                                    int cta = NoTrans + ita, ctb = NoTrans + itb;
                                    cblas_dgemm(row ? RowMajor : ColMajor, cta, ctb, m, n, k, alpha, a, lda, b, ldb,
                                                beta, c, ldc);
                                    ta = cblas_trans_char(cta);
                                    tb = cblas_trans_char(ctb);
                                } else {
                                    /* Alternate upper and lower case flags, as Fortran allows. */
                                    char fa = tflags[ita + 3 * ((int)s % 2)], fb = tflags[itb + 3 * (ip % 2)];
                                    dgemm_(&fa, &fb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc, 1, 1);
                                    ta = "NTC"[ita];
                                    tb = "NTC"[itb];
                                }
                                printf("result %s %s %c%c m=%d n=%d k=%d alpha=%g beta=%g pad=%d c=%016llx\n",
                                       cblas ? "cblas_dgemm" : "dgemm_", row ? "row" : "col", ta, tb, m, n, k, alpha,
                                       beta, pad, (unsigned long long)hash_bits(c, len(ldc, c_lines)));
                                expect_gemm(cblas ? "cblas_dgemm" : "dgemm_", row ? "row" : "col", ta, tb, m, n, k,
                                            lda, ldb, ldc, alpha, beta, 0);
                                free(a);
                                free(b);
                                free(c);
                                calls++;
                            }
    }
    return calls;
}

static int run_syrk(int cblas) {
    int calls = 0;
    for (int layout = 0; layout < (cblas ? 2 : 1); layout++) {
        int row = layout == 1;
        for (int iu = 0; iu < 2; iu++)
            for (int it = 0; it < 3; it++)
                for (size_t s = 0; s < sizeof syrk_sizes / sizeof syrk_sizes[0]; s++)
                    for (int ia = 0; ia < 3; ia++)
                        for (int ib = 0; ib < 3; ib++)
                            for (int ip = 0; ip < 2; ip++) {
                                int n = syrk_sizes[s][0], k = syrk_sizes[s][1];
                                double alpha = alphas[ia], beta = betas[ib];
                                int t = it != 0;
                                /* A is n x k (trans N) or k x n (trans T), in the given storage order. */
                                int a_live = (t != row) ? k : n, a_lines = (t != row) ? n : k;
                                int pad = pads[ip];
                                int lda = imax(1, a_live) + pad, ldc = imax(1, n) + pad;
                                double *a = operand(a_live, lda, a_lines);
                                double *c = output(n, ldc, n, beta);
                                char up = "UL"[iu], tr;
                                if (cblas) {
                                    int ct = NoTrans + it;
                                    cblas_dsyrk(row ? RowMajor : ColMajor, iu ? Lower : Upper, ct, n, k, alpha, a, lda,
                                                beta, c, ldc);
                                    tr = cblas_trans_char(ct);
                                } else {
                                    char fu = "ULul"[iu + 2 * (ip % 2)], ft = "NTCntc"[it + 3 * ((int)s % 2)];
                                    dsyrk_(&fu, &ft, &n, &k, &alpha, a, &lda, &beta, c, &ldc, 1, 1);
                                    tr = "NTC"[it];
                                }
                                printf("result %s %s %c%c n=%d k=%d alpha=%g beta=%g pad=%d c=%016llx\n",
                                       cblas ? "cblas_dsyrk" : "dsyrk_", row ? "row" : "col", up, tr, n, k, alpha,
                                       beta, pad, (unsigned long long)hash_bits(c, len(ldc, n)));
                                expect_syrk(cblas ? "cblas_dsyrk" : "dsyrk_", row ? "row" : "col", up, tr, n, k, lda,
                                            ldc, alpha, beta, 0);
                                free(a);
                                free(c);
                                calls++;
                            }
    }
    return calls;
}

int main(int argc, char **argv) {
    const char *which = argc > 1 ? argv[1] : "all";
    int all = strcmp(which, "all") == 0, calls = 0;
    if (all || strcmp(which, "fortran") == 0) calls += run_gemm(0) + run_syrk(0);
    if (all || strcmp(which, "cblas") == 0) calls += run_gemm(1) + run_syrk(1);
    printf("calls %d\n", calls);
    return 0;
}
