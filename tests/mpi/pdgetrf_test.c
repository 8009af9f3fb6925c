/* ScaLAPACK pdgetrf (LU with partial pivoting) under the shim.
 *
 * Usage: mpirun -n P ./pdgetrf_test [n=256] [nb=32]
 *
 * Factors a pseudo-random n x n matrix, solves A x = A 1 with pdgetrs and checks that x is
 * close to 1. The LU factors, pivots and solution are fingerprinted bit for bit: for a given
 * rank count they must be identical with and without the shim (its pass-through forwards
 * every dgemm/dtrsm call unchanged). Rank 0 prints "fingerprint NAME 0x..." lines and "OK";
 * exit status 1 on a wrong result. */
#include "scalapack_common.h"

#include <math.h>

/* Entries in [-0.5, 0.5) from the global position: no diagonal dominance, so the
 * factorisation really pivots. */
static double a_val(int i, int j, int n) {
    return (double)(splitmix64((uint64_t)i * (uint64_t)n + (uint64_t)j) >> 11) * 0x1.0p-53 - 0.5;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int n = arg_int(argc, argv, 1, 256), nb = arg_int(argc, argv, 2, 32), one = 1, info = 0, bad = 0;
    struct grid g = grid_open();
    struct dmat a = dmat_new(&g, n, n, nb), a0 = dmat_new(&g, n, n, nb);
    struct dmat x = dmat_new(&g, n, 1, nb), ones = dmat_new(&g, n, 1, nb);
    for (int lj = 0; lj < a.lcols; lj++)
        for (int li = 0; li < a.lrows; li++)
            a.a[li + (size_t)lj * a.desc[8]] =
                a_val(global_index(li, nb, g.myrow, g.nprow), global_index(lj, nb, g.mycol, g.npcol), n);
    memcpy(a0.a, a.a, sizeof(double) * (size_t)a.desc[8] * (size_t)(a.lcols > 0 ? a.lcols : 1));
    for (int li = 0; li < ones.lrows && ones.lcols > 0; li++) ones.a[li] = 1.0;
    if (g.rank == 0) printf("pdgetrf n=%d nb=%d grid=%dx%d ranks=%d\n", n, nb, g.nprow, g.npcol, g.nprocs);

    /* b = A * 1, through pdgemm as well. */
    const double d1 = 1.0, d0 = 0.0;
    pdgemm_("N", "N", &n, &one, &n, &d1, a0.a, &one, &one, a0.desc, ones.a, &one, &one, ones.desc, &d0, x.a, &one,
            &one, x.desc);

    int *ipiv = calloc((size_t)a.lrows + (size_t)nb, sizeof(int));
    pdgetrf_(&n, &n, a.a, &one, &one, a.desc, ipiv, &info);
    if (info != 0) {
        if (g.rank == 0) printf("pdgetrf info=%d\nFAILED\n", info);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    pdgetrs_("N", &n, &one, a.a, &one, &one, a.desc, ipiv, x.a, &one, &one, x.desc, &info, 1);
    if (info != 0) {
        if (g.rank == 0) printf("pdgetrs info=%d\nFAILED\n", info);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    double err = 0.0, all = 0.0;
    for (int li = 0; li < x.lrows && x.lcols > 0; li++) err = fmax(err, fabs(x.a[li] - 1.0));
    MPI_Allreduce(&err, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

    /* Pivots: each process row holds those of its local rows; fingerprint them once per
     * process row (column 0 of the grid) as integers. */
    uint64_t hp = 0, piv = 0;
    if (g.mycol == 0)
        for (int li = 0; li < a.lrows; li++)
            hp += splitmix64(((uint64_t)global_index(li, nb, g.myrow, g.nprow) << 32) ^ (uint64_t)(uint32_t)ipiv[li]);
    MPI_Allreduce(&hp, &piv, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    uint64_t flu = dmat_fingerprint(&g, &a), fx = dmat_fingerprint(&g, &x);

    bad = !(all < 1e-8);
    if (g.rank == 0) {
        printf("check x max_abs_err=%.3e\n", all);
        printf("fingerprint LU 0x%016llx\n", (unsigned long long)flu);
        printf("fingerprint ipiv 0x%016llx\n", (unsigned long long)piv);
        printf("fingerprint x 0x%016llx\n", (unsigned long long)fx);
        puts(bad ? "FAILED" : "OK");
    }
    free(ipiv);
    free(a.a);
    free(a0.a);
    free(x.a);
    free(ones.a);
    Cblacs_gridexit(g.ctxt);
    Cblacs_exit(1);
    MPI_Finalize();
    return bad;
}
