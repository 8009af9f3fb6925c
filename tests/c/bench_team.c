/* BLAS calls from every thread of an OpenMP team, for scripts/bench-team: what the vendor's
 * thread count does to a program whose OpenMP threads each call dgemm_ (PySCF's C code).
 *
 * Each thread of the team (OMP_NUM_THREADS, default one per core) makes CALLS products
 * C = A B of N x N x N on operands of its own. Prints "wall_s=... checksum=...": the wall time
 * of the parallel region and a hash of every thread's last C.
 *
 * Usage: bench_team N CALLS     (build with -fopenmp)
 */
#include <omp.h>
#include <time.h>

#include "common.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    int n = atoi(argv[1]), calls = atoi(argv[2]);
    if (n < 1 || calls < 1) return 2;
    uint64_t hashes[256] = {0};
    double t0 = now_s();
#pragma omp parallel
    {
        size_t nn = (size_t)n * n;
        double *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = malloc(nn * sizeof *c);
        int me = omp_get_thread_num();
        for (size_t i = 0; i < nn; i++) {
            a[i] = 1.0 / (double)(i + me + 1);
            b[i] = 1.0 - 1.0 / (double)(i + 2);
        }
        double alpha = 1.0, beta = 0.0;
        for (int i = 0; i < calls; i++)
            dgemm_("N", "N", &n, &n, &n, &alpha, a, &n, b, &n, &beta, c, &n, 1, 1);
        if (me < 256) hashes[me] = hash_bits(c, nn);
        free(a);
        free(b);
        free(c);
    }
    double t1 = now_s();
    uint64_t h = 0;
    for (int t = 0; t < 256; t++) h = h * 31 + hashes[t];
    printf("wall_s=%.4f checksum=%016llx\n", t1 - t0, (unsigned long long)h);
    return 0;
}
