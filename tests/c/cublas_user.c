/* A GPU program's cuBLAS and cuBLASLt calls, for the cuBLAS hook's tests
 * (shim/tests/cublas_hook.rs): built as a shared library linked against libcublas.so.13 and
 * libcublasLt.so.13 (the fakes, tests/c/fake_cublas_api.c and tests/c/fake_cublaslt.c)
 * and loaded RTLD_LOCAL by tests/c/cublas_client.c, as Python loads PyTorch's and CuPy's
 * extension modules, so cuBLAS is not in the program's global scope. The matrices are
 * made-up device addresses (the fake reads none). Prints "done" after every call returned
 * success.
 */
#include <stdint.h>
#include <stdio.h>

typedef void *handle_t;
int cublasCreate_v2(handle_t *h);
int cublasSetStream_v2(handle_t h, void *s);
int cublasSetPointerMode_v2(handle_t h, int m);
int cublasDgemm_v2(handle_t, int, int, int, int, int, const double *, const double *, int,
                   const double *, int, const double *, double *, int);
int cublasDgemm_v2_64(handle_t, int, int, int64_t, int64_t, int64_t, const double *,
                      const double *, int64_t, const double *, int64_t, const double *,
                      double *, int64_t);
int cublasGemmEx(handle_t, int, int, int, int, int, const void *, const void *, int, int,
                 const void *, int, int, const void *, void *, int, int, int, int);
int cublasGemmEx_64(handle_t, int, int, int64_t, int64_t, int64_t, const void *, const void *,
                    int, int64_t, const void *, int, int64_t, const void *, void *, int,
                    int64_t, int, int);
int cublasDgemmStridedBatched(handle_t, int, int, int, int, int, const double *,
                              const double *, int, long long, const double *, int, long long,
                              const double *, double *, int, long long, int);
int cublasDgemmStridedBatched_64(handle_t, int, int, int64_t, int64_t, int64_t, const double *,
                                 const double *, int64_t, long long, const double *, int64_t,
                                 long long, const double *, double *, int64_t, long long,
                                 int64_t);
int cublasGemmStridedBatchedEx(handle_t, int, int, int, int, int, const void *, const void *,
                               int, int, long long, const void *, int, int, long long,
                               const void *, void *, int, int, long long, int, int, int);
int cublasGemmStridedBatchedEx_64(handle_t, int, int, int64_t, int64_t, int64_t, const void *,
                                  const void *, int, int64_t, long long, const void *, int,
                                  int64_t, long long, const void *, void *, int, int64_t,
                                  long long, int64_t, int, int);
int cublasDsyrk_v2(handle_t, int, int, int, int, const double *, const double *, int,
                   const double *, double *, int);
int cublasDsyrk_v2_64(handle_t, int, int, int64_t, int64_t, const double *, const double *,
                      int64_t, const double *, double *, int64_t);

typedef void *lt_t;
int cublasLtCreate(lt_t *h);
int cublasLtMatmulDescCreate(lt_t *d, int compute, int scale);
int cublasLtMatmulDescSetAttribute(lt_t d, int attr, const void *buf, size_t bytes);
int cublasLtMatrixLayoutCreate(lt_t *l, int type, uint64_t rows, uint64_t cols, int64_t ld);
int cublasLtMatrixLayoutSetAttribute(lt_t l, int attr, const void *buf, size_t bytes);
int cublasLtMatmul(lt_t h, lt_t desc, const void *alpha, const void *a, lt_t ad, const void *b,
                   lt_t bd, const void *beta, const void *c, lt_t cd, void *d, lt_t dd,
                   const void *algo, void *workspace, size_t ws_bytes, void *stream);

#define R32F 0
#define R64F 1
#define COMPUTE_32F 68
#define COMPUTE_64F 70

/* Descriptor and layout attributes (cublasLt.h). */
#define DESC_POINTER_MODE 2
#define DESC_TRANSA 3
#define DESC_EPILOGUE 7
#define DESC_BIAS_POINTER 8
#define LAYOUT_ORDER 1
#define LAYOUT_BATCH_COUNT 5
#define LAYOUT_STRIDED_BATCH_OFFSET 6

static lt_t layout(int type, uint64_t rows, uint64_t cols, int64_t ld, int batch, int64_t stride) {
    lt_t l;
    cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld);
    if (batch != 1) {
        cublasLtMatrixLayoutSetAttribute(l, LAYOUT_BATCH_COUNT, &batch, sizeof batch);
        cublasLtMatrixLayoutSetAttribute(l, LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
    }
    return l;
}

/* cublasLtMatmul calls, in the order shim/tests/cublas_hook.rs lists them. */
static int run_lt(void) {
    char *A = (char *)0xA0000, *B = (char *)0xB0000, *C = (char *)0xC0000, *D = (char *)0xE0000;
    void *ws = (void *)0xF0000, *stream = (void *)0x5000;
    double alpha = 1.5, beta = 0.25, zero = 0.0;
    float alpha32 = 2.0f, beta32 = 0.0f;
    int bad = 0, t = 1;
    lt_t h, d32, d64, dT, dbias, ddev;
    bad |= cublasLtCreate(&h);
    bad |= cublasLtMatmulDescCreate(&d32, COMPUTE_32F, R32F);
    bad |= cublasLtMatmulDescCreate(&d64, COMPUTE_64F, R64F);
    bad |= cublasLtMatmulDescCreate(&dT, COMPUTE_64F, R64F);
    bad |= cublasLtMatmulDescSetAttribute(dT, DESC_TRANSA, &t, sizeof t);
    bad |= cublasLtMatmulDescCreate(&dbias, COMPUTE_64F, R64F);
    unsigned epilogue_bias = 4;
    void *bias = (void *)0xB1A5;
    bad |= cublasLtMatmulDescSetAttribute(dbias, DESC_EPILOGUE, &epilogue_bias, 4);
    bad |= cublasLtMatmulDescSetAttribute(dbias, DESC_BIAS_POINTER, &bias, sizeof bias);
    bad |= cublasLtMatmulDescCreate(&ddev, COMPUTE_64F, R64F);
    int device = 1;
    bad |= cublasLtMatmulDescSetAttribute(ddev, DESC_POINTER_MODE, &device, sizeof device);
    lt_t a32 = layout(R32F, 96, 64, 96, 1, 0), b32 = layout(R32F, 64, 80, 64, 1, 0),
         c32 = layout(R32F, 96, 80, 96, 1, 0);
    lt_t a = layout(R64F, 96, 64, 96, 1, 0), aT = layout(R64F, 64, 96, 64, 1, 0),
         b = layout(R64F, 64, 80, 64, 1, 0), c = layout(R64F, 96, 80, 100, 1, 0);
    lt_t ab = layout(R64F, 32, 8, 32, 3, 256), bb = layout(R64F, 8, 16, 8, 3, 128),
         cb = layout(R64F, 32, 16, 32, 3, 512);
    lt_t row = layout(R64F, 96, 80, 80, 1, 0);
    int order_row = 1;
    cublasLtMatrixLayoutSetAttribute(row, LAYOUT_ORDER, &order_row, sizeof order_row);
    /* fp32: forwarded at once, unrecorded */
    bad |= cublasLtMatmul(h, d32, &alpha32, A, a32, B, b32, &beta32, C, c32, C, c32, 0, ws,
                          1 << 20, stream);
    /* plain fp64 products: C is D, transposed A, a strided batch, C != D with beta = 0 */
    bad |= cublasLtMatmul(h, d64, &alpha, A, a, B, b, &beta, C, c, C, c, 0, ws, 1 << 20, stream);
    bad |= cublasLtMatmul(h, dT, &alpha, A, aT, B, b, &beta, C, c, C, c, 0, 0, 0, stream);
    bad |= cublasLtMatmul(h, d64, &alpha, A, ab, B, bb, &beta, C, cb, C, cb, 0, ws, 4096, stream);
    bad |= cublasLtMatmul(h, d64, &alpha, A, a, B, b, &zero, C, c, D, c, 0, ws, 1 << 20, stream);
    /* what the emulation cannot honour: a bias epilogue, row order */
    bad |= cublasLtMatmul(h, dbias, &alpha, A, a, B, b, &zero, C, c, C, c, 0, ws, 0, stream);
    /* plain again: C != D with beta != 0 (the hook copies C into D first) */
    bad |= cublasLtMatmul(h, d64, &alpha, A, a, B, b, &beta, C, c, D, c, 0, ws, 0, stream);
    /* row order: refused */
    bad |= cublasLtMatmul(h, d64, &alpha, A, a, B, b, &beta, C, row, C, row, 0, ws, 0, stream);
    /* alpha and beta in device memory: made-up addresses nobody may read */
    bad |= cublasLtMatmul(h, ddev, (const void *)0xD0010, A, a, B, b, (const void *)0xD0018, C,
                          c, C, c, 0, ws, 0, stream);
    return bad;
}

int run(void) {
    double *A = (double *)0xA0000, *B = (double *)0xB0000, *C = (double *)0xC0000;
    double alpha = 1.5, beta = 0.25;
    float alpha32 = 2.0f, beta32 = 0.0f;
    handle_t h;
    int bad = 0;
    bad |= cublasCreate_v2(&h);
    bad |= cublasSetStream_v2(h, (void *)0x5000);
    /* fp32: forwarded at once, unrecorded */
    bad |= cublasGemmEx(h, 0, 1, 96, 80, 64, &alpha32, A, R32F, 96, B, R32F, 80, &beta32, C,
                        R32F, 96, COMPUTE_32F, -1);
    bad |= cublasDgemm_v2(h, 0, 0, 96, 80, 64, &alpha, A, 96, B, 64, &beta, C, 100);
    bad |= cublasGemmEx(h, 1, 0, 96, 80, 64, &alpha, A, R64F, 64, B, R64F, 64, &beta, C, R64F,
                        96, COMPUTE_64F, -1);
    bad |= cublasDgemmStridedBatched(h, 0, 0, 32, 16, 8, &alpha, A, 32, 256, B, 8, 128, &beta,
                                     C, 32, 512, 3);
    bad |= cublasGemmStridedBatchedEx(h, 0, 0, 32, 16, 8, &alpha, A, R64F, 32, 256, B, R64F, 8,
                                      128, &beta, C, R64F, 32, 512, 2, COMPUTE_64F, -1);
    bad |= cublasDsyrk_v2(h, 1, 0, 50, 40, &alpha, A, 50, &beta, C, 50);
    bad |= cublasDgemm_v2_64(h, 2, 0, 70, 60, 50, &alpha, A, 50, B, 50, &beta, C, 70);
    bad |= cublasGemmEx_64(h, 0, 0, 70, 60, 50, &alpha, A, R64F, 70, B, R64F, 50, &beta, C,
                           R64F, 70, COMPUTE_64F, -1);
    bad |= cublasDgemmStridedBatched_64(h, 0, 1, 20, 10, 5, &alpha, A, 20, 100, B, 10, 50,
                                        &beta, C, 20, 200, 4);
    bad |= cublasGemmStridedBatchedEx_64(h, 0, 0, 20, 10, 5, &alpha, A, R64F, 20, 100, B, R64F,
                                         5, 50, &beta, C, R64F, 20, 200, 2, COMPUTE_64F, -1);
    bad |= cublasDsyrk_v2_64(h, 0, 1, 30, 20, &alpha, A, 20, &beta, C, 30);
    /* alpha and beta in device memory: made-up addresses nobody may read */
    bad |= cublasSetPointerMode_v2(h, 1);
    bad |= cublasDgemm_v2(h, 0, 0, 96, 80, 64, (const double *)0xD0010, A, 96, B, 64,
                          (const double *)0xD0018, C, 96);
    bad |= run_lt();
    printf(bad ? "failed\n" : "done\n");
    return bad;
}
