// A C++ program whose xerbla_ throws: the exception must reach the program's catch through
// the BLAS (and, with the shim preloaded, through the shim), as it does without the shim.
// Output: one "caught ..." line per illegal call, then a hash of a legal call's C.
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

template <class F> static void expect_throw(const char *what, F f) {
    try {
        f();
        std::printf("%s: returned\n", what);
    } catch (const std::invalid_argument &e) {
        std::printf("%s: caught %s\n", what, e.what());
    }
}

int main() {
    for (int i = 0; i < 16; i++) a[i] = b[i] = c[i] = i % 5 - 2;
    int two = 2, bad = -1;
    double one = 1.0, half = 0.5;
    expect_throw("dgemm transa", [&] { dgemm_("X", "N", &two, &two, &two, &one, a, &two, b, &two, &half, c, &two, 1, 1); });
    expect_throw("dgemm m<0", [&] { dgemm_("N", "N", &bad, &two, &two, &one, a, &two, b, &two, &half, c, &two, 1, 1); });
    expect_throw("dsyrk n<0", [&] { dsyrk_("U", "N", &bad, &two, &one, a, &two, &half, c, &two, 1, 1); });
    expect_throw("cblas_dgemm m<0", [&] { cblas_dgemm(102, 111, 111, -1, 2, 2, 1.0, a, 2, b, 2, 0.5, c, 2); });
    expect_throw("cblas_dgemm ldc row", [&] { cblas_dgemm(101, 111, 111, 2, 4, 2, 1.0, a, 2, b, 4, 0.5, c, 3); });
    // The thread carries on normally: a legal call computes.
    dgemm_("N", "N", &two, &two, &two, &one, a, &two, b, &two, &half, c, &two, 1, 1);
    std::printf("legal c = %g %g %g %g\n", c[0], c[1], c[2], c[3]);
    return 0;
}
