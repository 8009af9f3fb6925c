/* A GPU program's cuBLAS calls, for the cuBLAS hook's tests (shim/tests/cublas_hook.rs):
 * built as a shared library linked against libcublas.so.13 (the fake, tests/c/fake_cublas_api.c)
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

#define R32F 0
#define R64F 1
#define COMPUTE_32F 68
#define COMPUTE_64F 70

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
    printf(bad ? "failed\n" : "done\n");
    return bad;
}
