/* Runs argument cases read from a file, one call per line, and prints what the program saw:
 * the error-handler calls (routine name and argument position) and every bit of C.
 * shim/tests/arg_props.rs generates the cases (random letters, dimensions, leading
 * dimensions and scalars) and compares this output with the shim and without it.
 *
 * Usage: arg_cases FILE lp64|ilp64
 *   lp64:  calls dgemm_, dsyrk_, cblas_dgemm, cblas_dsyrk (the program's BLAS, or the shim);
 *   ilp64: calls dgemm_64_, dsyrk_64_, cblas_dgemm64_, cblas_dsyrk64_, looked up at run time
 *          (only the shim exports them here); exits 3 when they are missing.
 * A line: KIND F1 F2 F3 M N K LDA LDB LDC ALPHA BETA POISON
 *   KIND G (dgemm_: F1 F2 = transa transb as character codes), S (dsyrk_: F1 F2 = uplo trans),
 *   CG (cblas_dgemm: F1 = layout, F2 F3 = transa transb), CS (cblas_dsyrk: F1 = layout,
 *   F2 F3 = uplo trans); for dsyrk M and LDB are ignored; ALPHA and BETA are the hex bit
 *   patterns of the doubles (NaN, -0 and infinities survive); POISON 1 puts NaNs into C.
 * Output per case: "case I", one line per handler call, then "c" and the NC words of C in
 * hex. Every buffer is larger than any generated case can reach, so no call goes out of
 * bounds whatever a vendor accepts.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <stdarg.h>

#include "common.h"

enum { NA = 256, NC = 64 };

void xerbla_(const char *srname, const int *info, size_t len);
void xerbla_64_(const char *srname, const int64_t *info, size_t len);
void cblas_xerbla(int p, const char *rout, const char *form, ...);
void cblas_xerbla64_(int64_t p, const char *rout, const char *form, ...);

static void report_fortran(const char *srname, long info, size_t len) {
    char name[64];
    size_t n = len < sizeof name - 1 ? len : sizeof name - 1;
    memcpy(name, srname, n);
    while (n > 0 && (name[n - 1] == ' ' || name[n - 1] == 0)) n--;
    name[n] = 0;
    printf("  xerbla [%s] info=%ld\n", name, info);
}

void xerbla_(const char *srname, const int *info, size_t len) { report_fortran(srname, *info, len); }
void xerbla_64_(const char *srname, const int64_t *info, size_t len) { report_fortran(srname, (long)*info, len); }
void cblas_xerbla(int p, const char *rout, const char *form, ...) {
    (void)form;
    printf("  cblas_xerbla [%s] p=%d\n", rout, p);
}
void cblas_xerbla64_(int64_t p, const char *rout, const char *form, ...) {
    (void)form;
    printf("  cblas_xerbla [%s] p=%ld\n", rout, (long)p);
}

#include "ilp64_types.h"

static double a[NA], b[NA], c[NA];

static double from_bits(uint64_t u) {
    double d;
    memcpy(&d, &u, 8);
    return d;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: arg_cases FILE lp64|ilp64\n");
        return 2;
    }
    int ilp64 = strcmp(argv[2], "ilp64") == 0;
    gemm64_t g64 = 0;
    syrk64_t s64 = 0;
    cgemm64_t cg64 = 0;
    csyrk64_t cs64 = 0;
    if (ilp64) {
        g64 = (gemm64_t)dlsym(RTLD_DEFAULT, "dgemm_64_");
        s64 = (syrk64_t)dlsym(RTLD_DEFAULT, "dsyrk_64_");
        cg64 = (cgemm64_t)dlsym(RTLD_DEFAULT, "cblas_dgemm64_");
        cs64 = (csyrk64_t)dlsym(RTLD_DEFAULT, "cblas_dsyrk64_");
        if (!g64 || !s64 || !cg64 || !cs64) {
            printf("missing ILP64 names\n");
            return 3;
        }
    }
    FILE *in = fopen(argv[1], "r");
    if (!in) {
        perror(argv[1]);
        return 2;
    }
    char kind[4];
    int f1, f2, f3, poison;
    long m, n, k, lda, ldb, ldc;
    uint64_t alpha_bits, beta_bits;
    int cases = 0;
    while (fscanf(in, "%3s %d %d %d %ld %ld %ld %ld %ld %ld %" SCNx64 " %" SCNx64 " %d", kind, &f1, &f2, &f3, &m, &n,
                  &k, &lda, &ldb, &ldc, &alpha_bits, &beta_bits, &poison) == 13) {
        double alpha = from_bits(alpha_bits), beta = from_bits(beta_bits);
        rng_state = 0x853c49e6748fea9bULL ^ (uint64_t)cases;
        fill(a, NA);
        fill(b, NA);
        fill(c, NA);
        if (poison)
            for (int i = 0; i < NC; i += 7) c[i] = NAN;
        printf("case %d\n", cases);
        fflush(stdout);
        char c1 = (char)f1, c2 = (char)f2;
        int im = (int)m, in_ = (int)n, ik = (int)k, ilda = (int)lda, ildb = (int)ldb, ildc = (int)ldc;
        I lm = m, ln = n, lk = k, llda = lda, lldb = ldb, lldc = ldc;
        if (strcmp(kind, "G") == 0) {
            if (ilp64)
                g64(&c1, &c2, &lm, &ln, &lk, &alpha, a, &llda, b, &lldb, &beta, c, &lldc, 1, 1);
            else
                dgemm_(&c1, &c2, &im, &in_, &ik, &alpha, a, &ilda, b, &ildb, &beta, c, &ildc, 1, 1);
        } else if (strcmp(kind, "S") == 0) {
            if (ilp64)
                s64(&c1, &c2, &ln, &lk, &alpha, a, &llda, &beta, c, &lldc, 1, 1);
            else
                dsyrk_(&c1, &c2, &in_, &ik, &alpha, a, &ilda, &beta, c, &ildc, 1, 1);
        } else if (strcmp(kind, "CG") == 0) {
            if (ilp64)
                cg64(f1, f2, f3, lm, ln, lk, alpha, a, llda, b, lldb, beta, c, lldc);
            else
                cblas_dgemm(f1, f2, f3, im, in_, ik, alpha, a, ilda, b, ildb, beta, c, ildc);
        } else if (strcmp(kind, "CS") == 0) {
            if (ilp64)
                cs64(f1, f2, f3, ln, lk, alpha, a, llda, beta, c, lldc);
            else
                cblas_dsyrk(f1, f2, f3, in_, ik, alpha, a, ilda, beta, c, ildc);
        } else {
            fprintf(stderr, "bad case kind %s\n", kind);
            return 2;
        }
        printf("  c");
        for (int i = 0; i < NC; i++) {
            uint64_t u;
            memcpy(&u, &c[i], 8);
            printf(" %016" PRIx64, u);
        }
        printf("\n");
        cases++;
    }
    printf("cases %d\n", cases);
    return 0;
}
