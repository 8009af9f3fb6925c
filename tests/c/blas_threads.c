/* A program that changes OpenBLAS's thread limit at run time, as threadpoolctl and many
 * applications do, with openblas_set_num_threads, then calls dgemm_: the shim's CPU
 * emulation must follow the limit the program set, not the environment it started with.
 *
 * For each count N on the command line: sets N, prints "set N get M" (M: what OpenBLAS then
 * reports), and makes one 48 x 48 x 48 dgemm_ call. Looks the OpenBLAS functions up at run
 * time and exits 3 when the BLAS is not OpenBLAS.
 *
 * Usage: blas_threads N...
 */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "common.h"

int main(int argc, char **argv) {
    void (*set)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "openblas_set_num_threads");
    int (*get)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "openblas_get_num_threads");
    if (!set || !get) {
        printf("not OpenBLAS: no openblas_set_num_threads\n");
        return 3;
    }
    static double a[48 * 48], b[48 * 48], c[48 * 48];
    fill(a, 48 * 48);
    fill(b, 48 * 48);
    int n = 48;
    double alpha = 1.0, beta = 0.0;
    printf("start get %d\n", get());
    for (int i = 1; i < argc; i++) {
        set(atoi(argv[i]));
        printf("set %s get %d\n", argv[i], get());
        fflush(stdout);
        dgemm_("N", "N", &n, &n, &n, &alpha, a, &n, b, &n, &beta, c, &n, 1, 1);
        printf("c %016llx\n", (unsigned long long)hash_bits(c, 48 * 48));
    }
    return 0;
}
