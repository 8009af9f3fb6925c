/* A stand-in for cuBLAS's fp64 entry points, for testing the shim's cuBLAS hook on machines
 * without a GPU (shim/tests/cublas_hook.rs). Built as libcublas.so.13. Each entry point
 * appends one line to the file FAKE_CUBLAS_LOG naming itself and every argument it got (alpha
 * and beta by value in host pointer mode, by address in device pointer mode), and returns
 * CUBLAS_STATUS_SUCCESS; it reads and writes no matrix (the test passes made-up device
 * addresses). Like a real library, its fp64 cublasGemmEx calls its own exported
 * cublasDgemm_v2 through the dynamic linker, which a preloaded library intercepts: the hook
 * must send that inner call straight here. The handle keeps a stream, pointer mode and math
 * mode.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fake_log.h"

typedef struct {
    int id; /* logged instead of the handle's address, which differs from run to run */
    void *stream;
    int pointer_mode;
    int math_mode;
} handle_t;

static void scalar(FILE *f, const char *name, const handle_t *h, const double *v) {
    if (h->pointer_mode == 0)
        fprintf(f, " %s=%.17g", name, *v);
    else
        fprintf(f, " %s@%p", name, (const void *)v);
}

int cublasCreate_v2(handle_t **h) {
    static int handles;
    *h = calloc(1, sizeof **h);
    (*h)->id = ++handles;
    return 0;
}
int cublasDestroy_v2(handle_t *h) {
    free(h);
    return 0;
}
int cublasSetStream_v2(handle_t *h, void *s) {
    h->stream = s;
    return 0;
}
int cublasGetStream_v2(handle_t *h, void **s) {
    *s = h->stream;
    return 0;
}
int cublasSetPointerMode_v2(handle_t *h, int m) {
    h->pointer_mode = m;
    return 0;
}
int cublasGetPointerMode_v2(handle_t *h, int *m) {
    *m = h->pointer_mode;
    return 0;
}
int cublasSetMathMode(handle_t *h, int m) {
    h->math_mode = m;
    return 0;
}
int cublasGetMathMode(handle_t *h, int *m) {
    *m = h->math_mode;
    return 0;
}

#define GEMM_BODY(NAME, FMT_INT)                                                              \
    FILE *f = log_file();                                                                     \
    fprintf(f, "%s h=%d ta=%d tb=%d m=" FMT_INT " n=" FMT_INT " k=" FMT_INT, NAME, h->id, \
            ta, tb, m, n, k);                                                                 \
    scalar(f, "alpha", h, alpha);                                                             \
    fprintf(f, " A=%p lda=" FMT_INT " B=%p ldb=" FMT_INT, a, lda, b, ldb);                    \
    scalar(f, "beta", h, beta);                                                               \
    fprintf(f, " C=%p ldc=" FMT_INT, c, ldc);

int cublasDgemm_v2(handle_t *h, int ta, int tb, int m, int n, int k, const double *alpha,
                   const double *a, int lda, const double *b, int ldb, const double *beta,
                   double *c, int ldc) {
    GEMM_BODY("cublasDgemm_v2", "%d")
    fprintf(f, "\n");
    return 0;
}

int cublasDgemm_v2_64(handle_t *h, int ta, int tb, int64_t m, int64_t n, int64_t k,
                      const double *alpha, const double *a, int64_t lda, const double *b,
                      int64_t ldb, const double *beta, double *c, int64_t ldc) {
    GEMM_BODY("cublasDgemm_v2_64", "%ld")
    fprintf(f, "\n");
    return 0;
}

int cublasGemmEx(handle_t *h, int ta, int tb, int m, int n, int k, const void *alpha_,
                 const void *a, int atype, int lda, const void *b, int btype, int ldb,
                 const void *beta_, void *c, int ctype, int ldc, int compute, int algo) {
    const double *alpha = alpha_, *beta = beta_;
    int fp64 = atype == 1 && btype == 1 && ctype == 1 && compute == 70;
    FILE *f = log_file();
    fprintf(f, "cublasGemmEx h=%d ta=%d tb=%d m=%d n=%d k=%d", h->id, ta, tb, m, n, k);
    if (fp64)
        scalar(f, "alpha", h, alpha);
    else
        fprintf(f, " alpha32=%g", h->pointer_mode == 0 ? *(const float *)alpha_ : -1.0);
    fprintf(f, " A=%p/%d lda=%d B=%p/%d ldb=%d C=%p/%d ldc=%d compute=%d algo=%d\n", a, atype,
            lda, b, btype, ldb, c, ctype, ldc, compute, algo);
    if (fp64) /* the library's own exported fp64 routine, through the dynamic linker */
        return cublasDgemm_v2(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return 0;
}

int cublasGemmEx_64(handle_t *h, int ta, int tb, int64_t m, int64_t n, int64_t k,
                    const void *alpha, const void *a, int atype, int64_t lda, const void *b,
                    int btype, int64_t ldb, const void *beta, void *c, int ctype, int64_t ldc,
                    int compute, int algo) {
    fprintf(log_file(),
            "cublasGemmEx_64 h=%d ta=%d tb=%d m=%ld n=%ld k=%ld A=%p/%d lda=%ld B=%p/%d ldb=%ld "
            "C=%p/%d ldc=%ld compute=%d algo=%d\n",
            h->id, ta, tb, m, n, k, a, atype, lda, b, btype, ldb, c, ctype, ldc, compute,
            algo);
    (void)alpha, (void)beta;
    return 0;
}

int cublasDgemmStridedBatched(handle_t *h, int ta, int tb, int m, int n, int k,
                              const double *alpha, const double *a, int lda, long long sa,
                              const double *b, int ldb, long long sb, const double *beta,
                              double *c, int ldc, long long sc, int count) {
    GEMM_BODY("cublasDgemmStridedBatched", "%d")
    fprintf(f, " strides=%lld,%lld,%lld batch=%d\n", sa, sb, sc, count);
    return 0;
}

int cublasDgemmStridedBatched_64(handle_t *h, int ta, int tb, int64_t m, int64_t n, int64_t k,
                                 const double *alpha, const double *a, int64_t lda,
                                 long long sa, const double *b, int64_t ldb, long long sb,
                                 const double *beta, double *c, int64_t ldc, long long sc,
                                 int64_t count) {
    GEMM_BODY("cublasDgemmStridedBatched_64", "%ld")
    fprintf(f, " strides=%lld,%lld,%lld batch=%ld\n", sa, sb, sc, count);
    return 0;
}

#define STRIDED_EX_BODY(NAME, FMT_INT)                                                        \
    fprintf(log_file(),                                                                       \
            NAME " h=%d ta=%d tb=%d m=" FMT_INT " n=" FMT_INT " k=" FMT_INT " A=%p/%d lda=" FMT_INT \
                 " sa=%lld B=%p/%d ldb=" FMT_INT " sb=%lld C=%p/%d ldc=" FMT_INT                  \
                 " sc=%lld batch=" FMT_INT " compute=%d algo=%d\n",                              \
            h->id, ta, tb, m, n, k, a, atype, lda, sa, b, btype, ldb, sb, c, ctype, ldc, sc,     \
            count, compute, algo);                                                            \
    (void)alpha, (void)beta;                                                                  \
    return 0;

int cublasGemmStridedBatchedEx(handle_t *h, int ta, int tb, int m, int n, int k,
                               const void *alpha, const void *a, int atype, int lda,
                               long long sa, const void *b, int btype, int ldb, long long sb,
                               const void *beta, void *c, int ctype, int ldc, long long sc,
                               int count, int compute, int algo) {
    STRIDED_EX_BODY("cublasGemmStridedBatchedEx", "%d")
}

int cublasGemmStridedBatchedEx_64(handle_t *h, int ta, int tb, int64_t m, int64_t n, int64_t k,
                                  const void *alpha, const void *a, int atype, int64_t lda,
                                  long long sa, const void *b, int btype, int64_t ldb,
                                  long long sb, const void *beta, void *c, int ctype,
                                  int64_t ldc, long long sc, int64_t count, int compute,
                                  int algo) {
    STRIDED_EX_BODY("cublasGemmStridedBatchedEx_64", "%ld")
}

#define SYRK_BODY(NAME, FMT_INT)                                                              \
    FILE *f = log_file();                                                                     \
    fprintf(f, "%s h=%d uplo=%d trans=%d n=" FMT_INT " k=" FMT_INT, NAME, h->id, uplo,    \
            trans, n, k);                                                                     \
    scalar(f, "alpha", h, alpha);                                                             \
    fprintf(f, " A=%p lda=" FMT_INT, a, lda);                                                 \
    scalar(f, "beta", h, beta);                                                               \
    fprintf(f, " C=%p ldc=" FMT_INT "\n", c, ldc);

int cublasDsyrk_v2(handle_t *h, int uplo, int trans, int n, int k, const double *alpha,
                   const double *a, int lda, const double *beta, double *c, int ldc) {
    SYRK_BODY("cublasDsyrk_v2", "%d")
    return 0;
}

int cublasDsyrk_v2_64(handle_t *h, int uplo, int trans, int64_t n, int64_t k,
                      const double *alpha, const double *a, int64_t lda, const double *beta,
                      double *c, int64_t ldc) {
    SYRK_BODY("cublasDsyrk_v2_64", "%ld")
    return 0;
}
