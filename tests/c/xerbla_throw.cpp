// A C++ program whose xerbla_ throws: the exception must reach the program's catch through
// the BLAS (and, with the shim preloaded, through the shim), as it does without the shim.
// Output: one "caught ..." line per illegal call, then a legal call's C.
//
// `xerbla_throw ilp64` makes the same calls through the ILP64 names (dgemm_64_, dsyrk_64_,
// cblas_dgemm64_), looked up at run time: no Debian library exports them, so under the shim
// there is no vendor to forward them to and the shim calls the program's xerbla_ itself. The
// exception must reach the catch from there too, and the output must be the reference's
// (the LP64 run without the shim). Exits 3 when the names are missing.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

extern "C" {
void dgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k, const double *alpha,
            const double *a, const int *lda, const double *b, const int *ldb, const double *beta, double *c,
            const int *ldc, size_t lta, size_t ltb);
void dsyrk_(const char *uplo, const char *trans, const int *n, const int *k, const double *alpha, const double *a,
            const int *lda, const double *beta, double *c, const int *ldc, size_t lu, size_t lt);
void cblas_dgemm(int order, int ta, int tb, int m, int n, int k, double alpha, const double *a, int lda,
                 const double *b, int ldb, double beta, double *c, int ldc);

void xerbla_(const char *srname, const int *info, size_t len) {
    std::string name(srname, strnlen(srname, len));
    while (!name.empty() && name.back() == ' ') name.pop_back();
    throw std::invalid_argument(name + " parameter " + std::to_string(*info));
}
}

static double a[16], b[16], c[16];

#include "ilp64_types.h"
static gemm64_t gemm64;
static syrk64_t syrk64;
static cgemm64_t cgemm64;

// The calls below, through the LP64 names or (when gemm64 is set) the ILP64 ones.
static void gemm(const char *ta, const char *tb, int m, int n, int k, double alpha, int lda, int ldb, double beta,
                 int ldc) {
    if (gemm64) {
        I M = m, N = n, K = k, LDA = lda, LDB = ldb, LDC = ldc;
        gemm64(ta, tb, &M, &N, &K, &alpha, a, &LDA, b, &LDB, &beta, c, &LDC, 1, 1);
    } else {
        dgemm_(ta, tb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc, 1, 1);
    }
}

static void syrk(const char *up, const char *tr, int n, int k, double alpha, int lda, double beta, int ldc) {
    if (syrk64) {
        I N = n, K = k, LDA = lda, LDC = ldc;
        syrk64(up, tr, &N, &K, &alpha, a, &LDA, &beta, c, &LDC, 1, 1);
    } else {
        dsyrk_(up, tr, &n, &k, &alpha, a, &lda, &beta, c, &ldc, 1, 1);
    }
}

static void cgemm(int order, int ta, int tb, int m, int n, int k, double alpha, int lda, int ldb, double beta,
                  int ldc) {
    if (cgemm64)
        cgemm64(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else
        cblas_dgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <class F> static void expect_throw(const char *what, F f) {
    try {
        f();
        std::printf("%s: returned\n", what);
    } catch (const std::invalid_argument &e) {
        std::printf("%s: caught %s\n", what, e.what());
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && std::strcmp(argv[1], "ilp64") == 0) {
        gemm64 = (gemm64_t)dlsym(RTLD_DEFAULT, "dgemm_64_");
        syrk64 = (syrk64_t)dlsym(RTLD_DEFAULT, "dsyrk_64_");
        cgemm64 = (cgemm64_t)dlsym(RTLD_DEFAULT, "cblas_dgemm64_");
        if (!gemm64 || !syrk64 || !cgemm64) {
            std::printf("missing the ILP64 names\n");
            return 3;
        }
    }
    for (int i = 0; i < 16; i++) a[i] = b[i] = c[i] = i % 5 - 2;
    expect_throw("dgemm transa", [] { gemm("X", "N", 2, 2, 2, 1.0, 2, 2, 0.5, 2); });
    expect_throw("dgemm m<0", [] { gemm("N", "N", -1, 2, 2, 1.0, 2, 2, 0.5, 2); });
    expect_throw("dsyrk n<0", [] { syrk("U", "N", -1, 2, 1.0, 2, 0.5, 2); });
    expect_throw("cblas_dgemm m<0", [] { cgemm(102, 111, 111, -1, 2, 2, 1.0, 2, 2, 0.5, 2); });
    expect_throw("cblas_dgemm ldc row", [] { cgemm(101, 111, 111, 2, 4, 2, 1.0, 2, 4, 0.5, 3); });
    // The thread carries on normally: a legal call computes.
    gemm("N", "N", 2, 2, 2, 1.0, 2, 2, 0.5, 2);
    std::printf("legal c = %g %g %g %g\n", c[0], c[1], c[2], c[3]);
    return 0;
}
