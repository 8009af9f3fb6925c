/* A GPU program that finds cuBLAS's entry points as JAX's XLA plugin does: it loads
 * libcublas.so.13 (the fake, tests/c/fake_cublas_api.c) RTLD_LOCAL from the directory in
 * argv[1] and resolves each function with dlsym on that handle, so no preloaded library is
 * in the lookup. Makes an fp32 cublasGemmEx, an fp64 cublasDgemm_v2 and an fp64 cublasGemmEx
 * on made-up device addresses (the fake reads none); prints "done" when all succeeded. */
#include <dlfcn.h>
#include <stdio.h>

typedef void *handle_t;
typedef int (*create_t)(handle_t *);
typedef int (*dgemm_t)(handle_t, int, int, int, int, int, const double *, const double *, int,
                       const double *, int, const double *, double *, int);
typedef int (*gemm_ex_t)(handle_t, int, int, int, int, int, const void *, const void *, int,
                         int, const void *, int, int, const void *, void *, int, int, int, int);

#define R32F 0
#define R64F 1
#define COMPUTE_32F 68
#define COMPUTE_64F 70

int main(int argc, char **argv) {
    char path[4096];
    snprintf(path, sizeof path, "%s/libcublas.so.13", argc > 1 ? argv[1] : ".");
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "%s\n", dlerror());
        return 2;
    }
    create_t create = (create_t)dlsym(lib, "cublasCreate_v2");
    dgemm_t dgemm = (dgemm_t)dlsym(lib, "cublasDgemm_v2");
    gemm_ex_t gemm_ex = (gemm_ex_t)dlsym(lib, "cublasGemmEx");
    if (!create || !dgemm || !gemm_ex) {
        fprintf(stderr, "missing entry point\n");
        return 3;
    }
    double *A = (double *)0xA0000, *B = (double *)0xB0000, *C = (double *)0xC0000;
    double alpha = 1.5, beta = 0.25;
    float alpha32 = 2.0f, beta32 = 0.0f;
    handle_t h;
    int bad = create(&h);
    bad |= gemm_ex(h, 0, 1, 96, 80, 64, &alpha32, A, R32F, 96, B, R32F, 80, &beta32, C, R32F,
                   96, COMPUTE_32F, -1);
    bad |= dgemm(h, 0, 0, 96, 80, 64, &alpha, A, 96, B, 64, &beta, C, 100);
    bad |= gemm_ex(h, 1, 0, 96, 80, 64, &alpha, A, R64F, 64, B, R64F, 64, &beta, C, R64F, 96,
                   COMPUTE_64F, -1);
    printf(bad ? "failed\n" : "done\n");
    return bad;
}
