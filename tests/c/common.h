/* What the C client programs in tests/c/.
 *
 * Each client calls BLAS the way a real program does (linked against -lblas, no shim
 * headers) and prints to stdout:
 *   - one "result" line per call with a hash of every bit of C (including the padding rows
 *     between m and ldc, which must stay untouched), so the run with the shim can be
 *     compared byte for byte with the run without it;
 *   - one "expect" line per call describing the trace record the shim must write for it:
 *     expect SYM ROUTINE LAYOUT OP1 OP2 M N K LDA LDB LDC ALPHA BETA ILP64
 *     (OP1 OP2 = transa transb for dgemm, uplo trans for dsyrk; ldb is 0 for dsyrk).
 * ozaki-cli/tests/clients.rs compiles and runs them.
 */
#ifndef OZAKI_TEST_COMMON_H
#define OZAKI_TEST_COMMON_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fortran BLAS, LP64, with the hidden character-length arguments gfortran passes. */
void dgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k, const double *alpha,
            const double *a, const int *lda, const double *b, const int *ldb, const double *beta, double *c,
            const int *ldc, size_t lta, size_t ltb);
void dsyrk_(const char *uplo, const char *trans, const int *n, const int *k, const double *alpha, const double *a,
            const int *lda, const double *beta, double *c, const int *ldc, size_t lu, size_t lt);

/* CBLAS, with the reference enum values (declared here so no cblas.h is needed). */
enum { RowMajor = 101, ColMajor = 102 };
enum { NoTrans = 111, Trans = 112, ConjTrans = 113 };
enum { Upper = 121, Lower = 122 };
void cblas_dgemm(int order, int ta, int tb, int m, int n, int k, double alpha, const double *a, int lda,
                 const double *b, int ldb, double beta, double *c, int ldc);
void cblas_dsyrk(int order, int uplo, int trans, int n, int k, double alpha, const double *a, int lda, double beta,
                 double *c, int ldc);

/* Deterministic, non-trivial doubles in [-1, 1) (64-bit LCG, top 53 bits). */
static uint64_t rng_state = 0x853c49e6748fea9bULL;
static inline double rnd(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng_state >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}
static inline void fill(double *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = rnd();
}

/* FNV-1a over the bit patterns of x[0..n). */
static inline uint64_t hash_bits(const double *x, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        uint64_t b;
        memcpy(&b, &x[i], 8);
        for (int j = 0; j < 8; j++) {
            h ^= (b >> (8 * j)) & 0xff;
            h *= 0x100000001b3ULL;
        }
    }
    return h;
}

static inline int imax(int a, int b) { return a > b ? a : b; }

static inline char cblas_trans_char(int t) { return t == NoTrans ? 'N' : t == Trans ? 'T' : 'C'; }

static inline void expect_gemm(const char *sym, const char *layout, char ta, char tb, long m, long n, long k, long lda,
                        long ldb, long ldc, double alpha, double beta, int ilp64) {
    printf("expect %s dgemm %s %c %c %ld %ld %ld %ld %ld %ld %.17g %.17g %d\n", sym, layout, ta, tb, m, n, k, lda, ldb,
           ldc, alpha, beta, ilp64);
}

static inline void expect_syrk(const char *sym, const char *layout, char uplo, char trans, long n, long k, long lda,
                        long ldc, double alpha, double beta, int ilp64) {
    printf("expect %s dsyrk %s %c %c %ld %ld %ld %ld %d %ld %.17g %.17g %d\n", sym, layout, uplo, trans, n, n, k, lda,
           0, ldc, alpha, beta, ilp64);
}

#endif
